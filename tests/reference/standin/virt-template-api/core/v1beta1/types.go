// Package v1beta1 holds the fields of a VirtualMachineTemplate that KubeVirt v1.9.0's
// virt-controller reads (pkg/storage/export/export/vmtemplate-source.go:54-130, 155-270,
// 271-480): the embedded VM, the parameters and the Ready condition. Other fields of a stored
// template are not modelled; the reference controller never meets one in the conformance
// suite (no template CRD is installed).
package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ConditionReady is the condition type the export controller waits for.
const ConditionReady = "Ready"

// GroupVersion is template.kubevirt.io/v1beta1.
var GroupVersion = schema.GroupVersion{Group: "template.kubevirt.io", Version: "v1beta1"}

// Parameter is one named value substituted as ${NAME} into the embedded VM.
type Parameter struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// VirtualMachineTemplateSpec is the embedded VM and its parameters.
type VirtualMachineTemplateSpec struct {
	VirtualMachine *runtime.RawExtension `json:"virtualMachine,omitempty"`
	Parameters     []Parameter           `json:"parameters,omitempty"`
}

// VirtualMachineTemplateStatus carries the template's conditions.
type VirtualMachineTemplateStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// VirtualMachineTemplate is a VM with parameters.
type VirtualMachineTemplate struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VirtualMachineTemplateSpec   `json:"spec,omitempty"`
	Status            VirtualMachineTemplateStatus `json:"status,omitempty"`
}

// VirtualMachineTemplateList is a page of templates, as the informer's lister decodes it.
type VirtualMachineTemplateList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []VirtualMachineTemplate `json:"items"`
}

// DeepCopy copies the template through its own fields.
func (in *VirtualMachineTemplate) DeepCopy() *VirtualMachineTemplate {
	if in == nil {
		return nil
	}
	out := &VirtualMachineTemplate{TypeMeta: in.TypeMeta}
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.VirtualMachine != nil {
		out.Spec.VirtualMachine = in.Spec.VirtualMachine.DeepCopy()
	}
	out.Spec.Parameters = append([]Parameter(nil), in.Spec.Parameters...)
	for i := range in.Status.Conditions {
		var c metav1.Condition
		in.Status.Conditions[i].DeepCopyInto(&c)
		out.Status.Conditions = append(out.Status.Conditions, c)
	}
	return out
}

// DeepCopyObject makes the template a runtime.Object for the informer.
func (in *VirtualMachineTemplate) DeepCopyObject() runtime.Object {
	return in.DeepCopy()
}

// DeepCopyObject makes the list a runtime.Object.
func (in *VirtualMachineTemplateList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &VirtualMachineTemplateList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	for i := range in.Items {
		out.Items = append(out.Items, *in.Items[i].DeepCopy())
	}
	return out
}
