// Package core names the VirtualMachineTemplate API as KubeVirt v1.9.0 refers to it:
// pkg/controller/virtinformers.go:766-797 (index and informer) and
// pkg/storage/export/export/vmtemplate-source.go:142,258. The group and plural are the ones
// KubeVirt's RBAC grants (pkg/virt-operator/resource/generate/rbac/controller.go:371-374).
package core

const (
	// GroupName is the API group of VirtualMachineTemplates.
	GroupName = "template.kubevirt.io"
	// SingularResourceName names the export index of templates.
	SingularResourceName = "virtualmachinetemplate"
	// PluralResourceName is the resource the informer lists.
	PluralResourceName = "virtualmachinetemplates"
)
