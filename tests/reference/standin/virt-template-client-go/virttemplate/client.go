// Package virttemplate is the client KubeVirt v1.9.0's informer factory builds for
// VirtualMachineTemplates (pkg/controller/virtinformers.go:792-796): NewForConfig, then
// TemplateV1beta1().RESTClient() for a list-watch.
package virttemplate

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Clientset reaches the template.kubevirt.io API group.
type Clientset struct {
	v1beta1 *TemplateV1beta1Client
}

// TemplateV1beta1Client is a REST client for template.kubevirt.io/v1beta1.
type TemplateV1beta1Client struct {
	client rest.Interface
}

// RESTClient is the client the list-watch uses.
func (c *TemplateV1beta1Client) RESTClient() rest.Interface {
	return c.client
}

// TemplateV1beta1 is the v1beta1 group client.
func (c *Clientset) TemplateV1beta1() *TemplateV1beta1Client {
	return c.v1beta1
}

// NewForConfig builds a client for template.kubevirt.io/v1beta1 from a copy of config.
func NewForConfig(config *rest.Config) (*Clientset, error) {
	cfg := rest.CopyConfig(config)
	cfg.GroupVersion = &schema.GroupVersion{Group: "template.kubevirt.io", Version: "v1beta1"}
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.WithoutConversionCodecFactory{CodecFactory: scheme.Codecs}
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &Clientset{v1beta1: &TemplateV1beta1Client{client: client}}, nil
}
