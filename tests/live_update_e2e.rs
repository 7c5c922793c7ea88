//! Live updates end to end under v1.9's default `vmRolloutStrategy: LiveUpdate`
//! (pkg/virt-controller/watch/vm/vm.go:3351-3377; VMI side lifecycle.go:502-508): a socket, 1Gi
//! of memory and a toleration added to a running VM reach its VMI without a restart, the VMI
//! gets `HotVCPUChange` / `HotMemoryChange` (v1.9's request for the migration that completes a
//! hotplug; the migration itself is not modelled, so they stay), and the launcher pod keeps
//! the resources it started with. A socket count above `maxSockets` gives `RestartRequired`.
//!
//! The template sets `maxSockets`, `maxGuest` and `architecture` itself: virt-api would
//! default them on a real cluster, and the real API server of these tests has no virt-api.

use crate::common;

use common::env::{Env, Server};
use serde_json::{Value, json};
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};

const VM: &str = "demo-vm";

/// demo-vm with 1 socket (max 2), 1Gi (max 2Gi), amd64 and a masquerade pod network (live
/// migratable, which memory hotplug needs, vm.go:3474-3477).
fn hotpluggable_vm() -> VirtualMachine {
    let vm = common::example_vm_with("vm-containerdisk", "Always");
    let mut v = serde_json::to_value(&vm).expect("json");
    let spec = &mut v["spec"]["template"]["spec"];
    spec["architecture"] = json!("amd64");
    spec["domain"]["cpu"] = json!({"sockets": 1, "cores": 1, "threads": 1, "maxSockets": 2});
    spec["domain"]["memory"] = json!({"guest": "1Gi", "maxGuest": "2Gi"});
    spec["domain"]["devices"]["interfaces"] = json!([{"name": "default", "masquerade": {}}]);
    spec["networks"] = json!([{"name": "default", "pod": {}}]);
    serde_json::from_value(v).expect("VM")
}

fn vmi_condition(vmi: &VirtualMachineInstance, type_: &str) -> Option<String> {
    vmi.condition(type_).map(|c| c.status.to_string())
}

fn vmi_json(vmi: &VirtualMachineInstance) -> Value {
    serde_json::to_value(vmi).expect("json")
}

fn compute_resources(env_pods: &[k8s_openapi::api::core::v1::Pod]) -> Value {
    assert_eq!(env_pods.len(), 1, "one launcher pod");
    let c = env_pods[0]
        .spec
        .as_ref()
        .and_then(|s| s.containers.iter().find(|c| c.name == "compute"))
        .expect("compute container");
    serde_json::to_value(&c.resources).expect("json")
}

async fn a_socket_memory_and_a_toleration_reach_the_running_vmi(server: Server) {
    let env = Env::start_on(server).await;
    env.create_vm(&hotpluggable_vm()).await;
    let (_, first) = env.wait_running(VM).await;
    let uid = first.metadata.uid.clone().expect("uid");
    let resources_at_start = compute_resources(&env.launcher_pods(&uid).await);

    let toleration = json!({"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"});
    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {
            "domain": {"cpu": {"sockets": 2}, "memory": {"guest": "2Gi"}},
            "tolerations": [toleration.clone()]}}}}),
    )
    .await;
    let vmi = env
        .wait_vmi(
            VM,
            "2 sockets, 2Gi, the toleration, both hotplug conditions",
            |vmi| {
                let v = vmi_json(vmi);
                v["spec"]["domain"]["cpu"]["sockets"] == 2
                    && v["spec"]["domain"]["memory"]["guest"] == "2Gi"
                    && v["spec"]["tolerations"] == json!([toleration.clone()])
                    && vmi_condition(vmi, "HotVCPUChange").as_deref() == Some("True")
                    && vmi_condition(vmi, "HotMemoryChange").as_deref() == Some("True")
            },
        )
        .await;
    assert_eq!(
        vmi.metadata.uid.as_deref(),
        Some(uid.as_str()),
        "no restart"
    );
    let v = vmi_json(&vmi);
    assert_eq!(
        v["status"]["memory"]["guestRequested"], "1Gi",
        "the guest has the new memory only once the migration completes"
    );
    assert_eq!(v["status"]["memory"]["guestAtBoot"], "1Gi");
    let vm = env.vm(VM).await.expect("VM");
    assert!(vm.condition("RestartRequired").is_none(), "{:?}", vm.status);
    assert!(vm.condition("Failure").is_none(), "{:?}", vm.status);
    assert_eq!(
        compute_resources(&env.launcher_pods(&uid).await),
        resources_at_start,
        "v1.9 leaves the running launcher pod as it is"
    );

    env.shutdown().await;
}

async fn sockets_above_max_sockets_require_a_restart(server: Server) {
    let env = Env::start_on(server).await;
    env.create_vm(&hotpluggable_vm()).await;
    let (_, first) = env.wait_running(VM).await;

    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {"domain": {"cpu": {"sockets": 3}}}}}}),
    )
    .await;
    let vm = env
        .wait_vm(VM, "RestartRequired=True", |vm| {
            vm.condition("RestartRequired")
                .is_some_and(|c| c.status == "True")
        })
        .await;
    assert_eq!(
        vm.condition("RestartRequired")
            .and_then(|c| c.message.clone())
            .as_deref(),
        Some("CPU sockets updated in template spec to a value higher than what's available")
    );
    let vmi = env.vmi(VM).await.expect("VMI");
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart");
    assert_eq!(vmi_json(&vmi)["spec"]["domain"]["cpu"]["sockets"], 1);
    assert!(vmi_condition(&vmi, "HotVCPUChange").is_none());

    env.shutdown().await;
}

/// With the KubeVirt CR's `additionalGuestMemoryOverheadRatio`, a memory hotplug labels the VMI
/// `kubevirt.io/memory-hotplug-overhead-ratio` with it (lifecycle.go:1185-1195).
async fn memory_hotplug_labels_the_overhead_ratio(server: Server) {
    let mut config = common::env::EnvConfig::new("ctrl-e2e");
    config.settings.additional_guest_memory_overhead_ratio = Some("1.75".into());
    let env = Env::start_on_with(server, config).await;
    env.create_vm(&hotpluggable_vm()).await;
    let (_, first) = env.wait_running(VM).await;
    let label = |vmi: &VirtualMachineInstance| {
        vmi.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubevirt.io/memory-hotplug-overhead-ratio").cloned())
    };
    assert_eq!(label(&first), None);
    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {"domain": {"memory": {"guest": "2Gi"}}}}}}),
    )
    .await;
    let vmi = env
        .wait_vmi(VM, "HotMemoryChange and the ratio label", |vmi| {
            vmi_condition(vmi, "HotMemoryChange").as_deref() == Some("True") && label(vmi).is_some()
        })
        .await;
    assert_eq!(label(&vmi).as_deref(), Some("1.75"));
    env.shutdown().await;
}

on_both_servers!(
    a_socket_memory_and_a_toleration_reach_the_running_vmi,
    memory_hotplug_labels_the_overhead_ratio,
    sockets_above_max_sockets_require_a_restart,
);
