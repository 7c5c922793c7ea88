//! Interface hotplug, unplug and NAD reference updates end to end (KubeVirt v1.9's network
//! synchronizer, pkg/network/controllers/vm.go; the VMI controller's Multus annotation sync,
//! generator.go:116-162, and `MigrationRequired`, lifecycle.go:1197-1245):
//! - a bridge interface added to a running VM reaches its VMI without a restart, the launcher
//!   pod's `k8s.v1.cni.cncf.io/networks` gains it, and the VMI gets `MigrationRequired=False`
//!   (`AutoMigrationPending`) turning `True` (`AutoMigrationDueToLiveUpdate`) once the 15 s
//!   grace period passes (the embedded cluster has no dynamic network controller to plug it);
//! - `state: absent` on an interface reaches the VMI and drops it from the pod's annotation;
//! - a new `multus.networkName` reaches the VMI with no `RestartRequired`, except under
//!   `--kubevirt-version main` on a VMI that is not live-migratable (PR 18194).

use crate::common;

use common::env::{Env, EnvConfig, Server};
use serde_json::{Value, json};
use std::time::Duration;
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::kubevirt_version::KubeVirtVersion;

const VM: &str = "demo-vm";
const MULTUS_NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";

/// demo-vm with a masquerade pod network (live migratable) and, optionally, a bridge interface
/// on the Multus network `red` (NAD `red-nad`); `pod_binding` chooses the pod network's binding.
fn vm_with(secondary: bool, pod_binding: &str) -> VirtualMachine {
    let vm = common::example_vm_with("vm-containerdisk", "Always");
    let mut v = serde_json::to_value(&vm).expect("json");
    let spec = &mut v["spec"]["template"]["spec"];
    let mut ifaces = vec![json!({"name": "default", pod_binding: {}})];
    let mut nets = vec![json!({"name": "default", "pod": {}})];
    if secondary {
        ifaces.push(json!({"name": "red", "bridge": {}}));
        nets.push(json!({"name": "red", "multus": {"networkName": "red-nad"}}));
    }
    spec["domain"]["devices"]["interfaces"] = json!(ifaces);
    spec["networks"] = json!(nets);
    serde_json::from_value(v).expect("VM")
}

fn spec_of(vmi: &VirtualMachineInstance) -> Value {
    serde_json::to_value(&vmi.spec).expect("json")
}

fn migration_required(vmi: &VirtualMachineInstance) -> Option<(String, String)> {
    vmi.condition("MigrationRequired").map(|c| {
        (
            c.status.to_string(),
            c.reason.as_deref().unwrap_or_default().to_string(),
        )
    })
}

async fn pod_networks_annotation(env: &Env, uid: &str) -> Option<String> {
    let pods = env.launcher_pods(uid).await;
    pods.first()?
        .metadata
        .annotations
        .as_ref()?
        .get(MULTUS_NETWORKS)
        .cloned()
}

async fn a_hotplugged_interface_reaches_the_vmi_and_its_pod(server: Server) {
    let env = Env::start_on(server).await;
    env.create_vm(&vm_with(false, "masquerade")).await;
    let (_, first) = env.wait_running(VM).await;
    let uid = first.metadata.uid.clone().expect("uid");
    assert_eq!(pod_networks_annotation(&env, &uid).await, None);

    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {
            "domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}}, {"name": "blue", "bridge": {}}]}},
            "networks": [{"name": "default", "pod": {}},
                         {"name": "blue", "multus": {"networkName": "blue-nad"}}]}}}}),
    )
    .await;
    let vmi = env
        .wait_vmi(VM, "the blue interface and a pending migration", |vmi| {
            let s = spec_of(vmi);
            s["domain"]["devices"]["interfaces"][1]["name"] == "blue"
                && s["networks"][1]["multus"]["networkName"] == "blue-nad"
                && migration_required(vmi).is_some()
        })
        .await;
    assert_eq!(
        vmi.metadata.uid.as_deref(),
        Some(uid.as_str()),
        "no restart"
    );
    let annotation = env
        .wait_for("the pod's Multus annotation lists blue-nad", || async {
            pod_networks_annotation(&env, &uid)
                .await
                .filter(|a| a.contains("blue-nad"))
        })
        .await;
    let elements: Value = serde_json::from_str(&annotation).expect("JSON list");
    assert_eq!(elements[0]["namespace"], env.namespace.as_str());
    assert!(
        elements[0]["interface"]
            .as_str()
            .is_some_and(|i| i.starts_with("pod") && i.len() == 14),
        "a hashed pod interface name: {elements}"
    );
    let vmi = env
        .wait_for_within(
            "MigrationRequired=True after the grace period",
            Duration::from_secs(90),
            || async {
                env.vmi(VM)
                    .await
                    .filter(|v| migration_required(v).is_some_and(|(s, _)| s == "True"))
            },
        )
        .await;
    assert_eq!(
        migration_required(&vmi),
        Some(("True".into(), "AutoMigrationDueToLiveUpdate".into()))
    );
    let vm = env.vm(VM).await.expect("VM");
    assert!(vm.condition("RestartRequired").is_none(), "{:?}", vm.status);
    assert!(vm.condition("Failure").is_none(), "{:?}", vm.status);

    env.shutdown().await;
}

async fn an_unplugged_interface_leaves_the_vmi_spec_and_pod(server: Server) {
    let env = Env::start_on(server).await;
    env.create_vm(&vm_with(true, "masquerade")).await;
    let (_, first) = env.wait_running(VM).await;
    let uid = first.metadata.uid.clone().expect("uid");
    // The pod interface name the VMI controller records makes the naming scheme known.
    env.wait_vmi(VM, "red's status entry with its pod interface", |vmi| {
        let s = serde_json::to_value(&vmi.status).expect("json");
        s["interfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["name"] == "red" && e["podInterfaceName"].as_str().is_some())
    })
    .await;
    assert!(
        pod_networks_annotation(&env, &uid)
            .await
            .is_some_and(|a| a.contains("red-nad"))
    );

    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {"domain": {"devices": {"interfaces": [
            {"name": "default", "masquerade": {}},
            {"name": "red", "bridge": {}, "state": "absent"}]}}}}}}),
    )
    .await;
    let vmi = env
        .wait_vmi(VM, "red marked absent", |vmi| {
            spec_of(vmi)["domain"]["devices"]["interfaces"][1]["state"] == "absent"
        })
        .await;
    assert_eq!(
        vmi.metadata.uid.as_deref(),
        Some(uid.as_str()),
        "no restart"
    );
    env.wait_for("red-nad gone from the pod's Multus annotation", || async {
        pod_networks_annotation(&env, &uid)
            .await
            .filter(|a| !a.contains("red-nad"))
    })
    .await;
    let vm = env.vm(VM).await.expect("VM");
    assert!(vm.condition("RestartRequired").is_none(), "{:?}", vm.status);

    env.shutdown().await;
}

async fn change_nad(env: &Env) {
    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {"networks": [
            {"name": "default", "pod": {}},
            {"name": "red", "multus": {"networkName": "red-v2"}}]}}}}),
    )
    .await;
}

async fn a_new_nad_reference_reaches_the_vmi(server: Server) {
    let env = Env::start_on(server).await;
    env.create_vm(&vm_with(true, "masquerade")).await;
    let (_, first) = env.wait_running(VM).await;
    change_nad(&env).await;
    let vmi = env
        .wait_vmi(VM, "red's networkName red-v2", |vmi| {
            spec_of(vmi)["networks"][1]["multus"]["networkName"] == "red-v2"
        })
        .await;
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart");
    let vm = env.vm(VM).await.expect("VM");
    assert!(vm.condition("RestartRequired").is_none(), "{:?}", vm.status);
    assert!(vm.condition("Failure").is_none(), "{:?}", vm.status);
    env.shutdown().await;
}

/// PR 18194 (`--kubevirt-version main`): a bridge-bound pod network is not live-migratable, so
/// the NAD change needs a restart and stays out of the VMI.
async fn main_needs_a_restart_for_a_nad_change_on_a_non_migratable_vmi(server: Server) {
    let mut config = EnvConfig::new("ctrl-e2e");
    config.settings.kubevirt_version = KubeVirtVersion::Main;
    let env = Env::start_on_with(server, config).await;
    env.create_vm(&vm_with(true, "bridge")).await;
    let (_, first) = env.wait_running(VM).await;
    env.wait_vmi(VM, "LiveMigratable=False", |vmi| {
        vmi.condition("LiveMigratable")
            .is_some_and(|c| c.status == "False")
    })
    .await;
    change_nad(&env).await;
    env.wait_vm(VM, "RestartRequired=True", |vm| {
        vm.condition("RestartRequired")
            .is_some_and(|c| c.status == "True")
    })
    .await;
    let vmi = env.vmi(VM).await.expect("VMI");
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart by itself");
    assert_eq!(
        spec_of(&vmi)["networks"][1]["multus"]["networkName"],
        "red-nad"
    );
    env.shutdown().await;
}

on_both_servers!(
    a_hotplugged_interface_reaches_the_vmi_and_its_pod,
    an_unplugged_interface_leaves_the_vmi_spec_and_pod,
    a_new_nad_reference_reaches_the_vmi,
    main_needs_a_restart_for_a_nad_change_on_a_non_migratable_vmi,
);
