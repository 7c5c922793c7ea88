// virtctl-rs's own stand-in for kubevirt.io/virt-template-api, which the Go module proxy does
// not serve. It holds only what KubeVirt v1.9.0's virt-controller build refers to (see
// ../../go.mod); it is not the upstream module.
module kubevirt.io/virt-template-api

go 1.26.0

require k8s.io/apimachinery v0.34.2
