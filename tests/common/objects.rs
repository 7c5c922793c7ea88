//! Small objects (audit log entries too) and API helpers for the tests (`common::objects`).

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

/// The VM `namespace/name` with `runStrategy` `run_strategy`: one virtio container disk
/// (`quay.io/kubevirt/cirros-container-disk-demo`) and 128Mi of memory.
pub fn container_disk_vm(
    namespace: &str,
    name: &str,
    run_strategy: &str,
) -> virtctl_rs::api::VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runStrategy": run_strategy,
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": {
                    "domain": {
                        "devices": {"disks": [{"name": "containerdisk", "disk": {"bus": "virtio"}}]},
                        "resources": {"requests": {"memory": "128Mi"}}
                    },
                    "volumes": [{"name": "containerdisk",
                        "containerDisk": {"image": "quay.io/kubevirt/cirros-container-disk-demo"}}]
                }
            }
        }
    }))
    .expect("vm")
}

/// `kubevirt.io/v1` VirtualMachineInstance.
pub fn vmi_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

/// `kubevirt.io/v1` VirtualMachine.
pub fn vm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

/// A small VM object.
pub fn vm(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}
    }))
    .expect("static VM")
}

/// A small VMI object.
pub fn vmi(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name},
        "spec": {"domain": {"devices": {}}}
    }))
    .expect("static VMI")
}

/// A pod with one container, optionally bound to `node`.
pub fn pod(name: &str, node: Option<&str>) -> k8s_openapi::api::core::v1::Pod {
    let mut v = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}
    });
    if let Some(n) = node {
        v["spec"]["nodeName"] = json!(n);
    }
    serde_json::from_value(v).expect("static pod")
}

/// The `kube::Error::Api` status of a failed call.
pub fn api_err(e: kube::Error) -> kube::core::Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// An audit log entry: `agent`'s `verb` of `resource` `name` in namespace `ns`, answered `code`
/// now (for the tests of what reads the audit log).
pub fn audit_entry(
    seq: u64,
    verb: &str,
    resource: &str,
    name: &str,
    agent: &str,
    code: u16,
) -> virtctl_rs::sim::audit::AuditEntry {
    virtctl_rs::sim::audit::AuditEntry {
        seq,
        time: chrono::Utc::now(),
        verb: verb.into(),
        group: String::new(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: "ns".into(),
        name: name.into(),
        user_agent: agent.into(),
        code,
        path: String::new(),
        lease: None,
    }
}
