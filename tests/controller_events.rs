//! The controllers' Events as `kubectl describe` and event tooling read them: core/v1 Events
//! written as client-go's recorder writes them for KubeVirt's virt-controller
//! (src/runtime/recorder.rs), on both API servers.

use crate::common;

use common::env::{Env, Server};
use k8s_openapi::api::core::v1::Event;
use kube::Api;
use kube::api::ListParams;
use serde_json::json;

/// The source component of KubeVirt's VM and VMI controllers' recorders
/// (pkg/virt-controller/watch/application.go:391, 817).
const COMPONENT: &str = "virtualmachine-controller";

/// The `SuccessfulCreate` Events about `kind`/`name` in `env`'s namespace.
async fn successful_creates(env: &Env, kind: &str, name: &str) -> Vec<Event> {
    let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
    let fields =
        format!("involvedObject.kind={kind},involvedObject.name={name},reason=SuccessfulCreate");
    events
        .list(&ListParams::default().fields(&fields))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

/// Start, stop and start a VM: the VM controller's `SuccessfulCreate` about the VM is one
/// Event counted twice (client-go's keys ignore the VM's resourceVersion), with KubeVirt's
/// source and reporting component, no reporting instance, and the VM as involved object; each
/// VMI's `SuccessfulCreate` (another pod name, another VMI) is an Event of its own.
async fn a_repeated_event_is_counted_on_one_core_event(server: Server) {
    let env = Env::start_on(server).await;
    let vm = env
        .create_vm(&common::example_vm_with("vm-containerdisk", "Always"))
        .await;
    let (_, first_vmi) = env.wait_running("demo-vm").await;
    env.merge_patch_vm("demo-vm", json!({"spec": {"runStrategy": "Halted"}}))
        .await;
    env.wait_vmi_gone("demo-vm").await;
    env.merge_patch_vm("demo-vm", json!({"spec": {"runStrategy": "Always"}}))
        .await;
    let (_, second_vmi) = env.wait_running("demo-vm").await;

    let event = env
        .wait_for("the VM's SuccessfulCreate counted twice", || async {
            let events = successful_creates(&env, "VirtualMachine", "demo-vm").await;
            (events.len() == 1 && events[0].count == Some(2)).then(|| events[0].clone())
        })
        .await;
    assert_eq!(
        event.message.as_deref(),
        Some("Started the virtual machine by creating the new virtual machine instance demo-vm")
    );
    assert_eq!(event.type_.as_deref(), Some("Normal"));
    assert_eq!(
        event.source.as_ref().and_then(|s| s.component.as_deref()),
        Some(COMPONENT)
    );
    assert_eq!(event.source.as_ref().and_then(|s| s.host.as_deref()), None);
    assert_eq!(event.reporting_component.as_deref(), Some(COMPONENT));
    assert_eq!(event.reporting_instance.as_deref().unwrap_or(""), "");
    let involved = &event.involved_object;
    assert_eq!(involved.api_version.as_deref(), Some("kubevirt.io/v1"));
    assert_eq!(involved.kind.as_deref(), Some("VirtualMachine"));
    assert_eq!(involved.namespace.as_deref(), Some(env.namespace.as_str()));
    assert_eq!(involved.name.as_deref(), Some("demo-vm"));
    assert_eq!(involved.uid, vm.metadata.uid);
    let (first, last) = (
        event.first_timestamp.clone().expect("firstTimestamp"),
        event.last_timestamp.clone().expect("lastTimestamp"),
    );
    assert!(first <= last, "{first:?} > {last:?}");

    for vmi in [&first_vmi, &second_vmi] {
        let uid = vmi.metadata.uid.clone();
        let event = env
            .wait_for("the VMI's SuccessfulCreate", || async {
                successful_creates(&env, "VirtualMachineInstance", "demo-vm")
                    .await
                    .into_iter()
                    .find(|e| e.involved_object.uid == uid)
            })
            .await;
        assert_eq!(event.count, Some(1));
        assert_eq!(event.reporting_component.as_deref(), Some(COMPONENT));
        assert!(
            event.message.as_deref().is_some_and(
                |m| m.starts_with("Created virtual machine pod virt-launcher-demo-vm-")
            ),
            "{event:?}"
        );
    }
    env.shutdown().await;
}

on_both_servers!(a_repeated_event_is_counted_on_one_core_event);
