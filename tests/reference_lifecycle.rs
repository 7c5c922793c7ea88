//! The lifecycle script of the differential conformance suite (issue 41, item 3): what
//! `tests/reference_conformance.rs` does to the VMs it started, step by step, on both sides (ours
//! first, then KubeVirt's), comparing after each step what it compares after the start.
//!
//! The steps stand in for what a user, virt-api's subresources and virt-handler do:
//!
//! - **start**: a Halted VM patched to `Always` and a Manual VM given a `Start` request, as
//!   virt-api's start subresource does (pkg/virt-api/rest/lifecycle.go:95-118, 120-144);
//! - **stop**: `runStrategy: Halted`, or `running: false` where the VM uses `running`, as its stop
//!   subresource does for `Always` (lifecycle.go:238-250, getRunningPatch 633-650);
//! - **restart**: `status.stateChangeRequests` `[Stop{uid of the VMI}, Start]`, as its restart
//!   subresource does (RestartVMRequestHandler, lifecycle.go:395-496; getChangeRequestJson
//!   606-631). In v1.9.0 the handler deletes nothing: the VM controller acts on the requests;
//! - **crash**: the guest crashes on the simulated node (VMI `Failed` as virt-handler reports
//!   it, launcher pod `Failed`), for `Always`, `RerunOnFailure`, `Once` and `Manual` VMs;
//! - **shutdown**: the guest of an `Always` VM shuts down (VMI `Succeeded`);
//! - **stop and start requests**: a `Stop{uid}` request for a `RerunOnFailure` VM
//!   (lifecycle.go:227-237) and a start of the crashed `Manual` VM, `[Stop{uid}, Start]`
//!   (lifecycle.go:120-138);
//! - **delete-launcher**: a user deletes the launcher pod;
//! - **boot-failure**: a `Once` VM created on nodes where its VMI fails before it runs (its
//!   start failure and `CrashLoopBackOff`, vm.go:1575-1603, 2516-2557);
//! - **start-paused**: the two stopped VMs started with `--paused`, a `Start` request with
//!   data `paused: "true"` (lifecycle.go:95-109), on which the VM controller sets the run
//!   strategy (or `running`) itself (vm.go:1115-1139) and starts the VMI paused;
//! - **restart-required**: a disk's bus changed, which no live update applies (the VM's
//!   `RestartRequired` condition, pkg/virt-controller/watch/vm/vm.go:2978-3065), then that VM
//!   restarted (its new start ControllerRevision, vm.go:1840-1866).
//!
//! The VMs are examples, the [`script_vms`] added for the run strategies no example has, and a
//! handful of generated ones ([`Script::new`]): the script's run time stays small whatever the
//! generated count.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::{Api, Client, ResourceExt};
use serde_json::{Value, json};
use virtctl_rs::api::VirtualMachine;
use virtctl_rs::sim::nodes::{Matcher, NodeSimHandle};

/// What a step does to one VM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Virt-api's start: `Always` for a Halted VM, a `Start` request otherwise.
    Start,
    /// Virt-api's start of a Halted VM with `--paused`: a `Start` request with data
    /// `paused: "true"` (the VM controller then sets the run strategy itself).
    StartPaused,
    /// Virt-api's stop of an `Always` VM: `Halted`, or `running: false`.
    Stop,
    /// Virt-api's restart: `[Stop{uid}, Start]` requests.
    Restart,
    /// The guest crashes (virt-handler reports the VMI `Failed`).
    Crash,
    /// The guest shuts down (virt-handler reports the VMI `Succeeded`).
    Shutdown,
    /// Virt-api's stop of a `Manual` or `RerunOnFailure` VM: a `Stop{uid}` request.
    StopRequest,
    /// A user deletes the launcher pod.
    DeleteLauncher,
    /// The first disk's bus changes (not live-updatable).
    ChangeDiskBus,
    /// The VM is created (a `Once` copy of the container-disk example) on nodes where its
    /// first VMI fails during boot, before it runs.
    CreateFailingBoot,
}

/// One step of the script: its name and what it does to which VM.
#[derive(Clone, Debug)]
pub struct Step {
    pub name: &'static str,
    pub actions: Vec<(String, Action)>,
}

/// The VMs the script adds to the inputs: run strategies and `spec.running`, which no example
/// uses, built from `docs/examples/vm-containerdisk.yaml`.
pub fn script_vms() -> Vec<Value> {
    ["life-running", "life-rerun", "life-once", "life-manual"]
        .into_iter()
        .zip([None, Some("RerunOnFailure"), Some("Once"), Some("Manual")])
        .map(|(name, strategy)| script_vm(name, strategy))
        .collect()
}

/// The container-disk example named `name`, with `strategy` (`None`: `running: true`).
fn script_vm(name: &str, strategy: Option<&str>) -> Value {
    let path = crate::common::repo_path("docs/examples/vm-containerdisk.yaml");
    let text = std::fs::read_to_string(&path).expect("read vm-containerdisk.yaml");
    let base = virtctl_rs::api::manifest::split_documents(&path.display().to_string(), &text)
        .expect("parse vm-containerdisk.yaml")
        .into_iter()
        .map(|(_, doc)| doc)
        .find(|doc| doc["kind"] == "VirtualMachine")
        .expect("a VirtualMachine in vm-containerdisk.yaml");
    let mut vm = base;
    vm["metadata"]["name"] = name.into();
    let spec = vm["spec"].as_object_mut().expect("spec");
    spec.remove("runStrategy");
    match strategy {
        Some(s) => spec.insert("runStrategy".into(), s.into()),
        None => spec.insert("running".into(), true.into()),
    };
    vm
}

/// The script of a run: fixed for the examples and [`script_vms`]; for the generated VMs, the
/// first three (by name) that `running` lists as started on our side.
pub fn script(running: &[String]) -> Vec<Step> {
    let gen_vms: Vec<&String> = running
        .iter()
        .filter(|n| n.starts_with("gen-"))
        .take(3)
        .collect();
    let generated = |i: usize, action: Action| gen_vms.get(i).map(|n| ((*n).clone(), action));
    let step = |name, fixed: &[(&str, Action)], more: Vec<Option<(String, Action)>>| Step {
        name,
        actions: fixed
            .iter()
            .map(|(n, a)| (n.to_string(), *a))
            .chain(more.into_iter().flatten())
            .collect(),
    };
    use Action::*;
    vec![
        step(
            "start",
            &[("demo-halted", Start), ("life-manual", Start)],
            vec![],
        ),
        step("stop", &[("demo-vm", Stop), ("life-running", Stop)], vec![]),
        step(
            "restart",
            &[("demo-sata", Restart)],
            vec![generated(0, Restart)],
        ),
        step(
            "crash",
            &[
                ("demo-pvc", Crash),
                ("life-rerun", Crash),
                ("life-once", Crash),
                ("life-manual", Crash),
            ],
            vec![generated(1, Crash)],
        ),
        step(
            "delete-launcher",
            &[("demo-priority", DeleteLauncher)],
            vec![],
        ),
        step(
            "restart-required",
            &[("demo-hugepages", ChangeDiskBus)],
            vec![generated(2, ChangeDiskBus)],
        ),
        step("shutdown", &[("demo-dedicated-cpu", Shutdown)], vec![]),
        step(
            "stop-and-start-requests",
            &[("life-rerun", StopRequest), ("life-manual", Start)],
            vec![],
        ),
        step(
            "boot-failure",
            &[("life-once-boot", CreateFailingBoot)],
            vec![],
        ),
        step(
            "restart-after-change",
            &[("demo-hugepages", Restart)],
            vec![generated(2, Restart)],
        ),
        step(
            "start-paused",
            &[("demo-vm", StartPaused), ("life-running", StartPaused)],
            vec![],
        ),
    ]
}

/// Apply `step` to the VMs of `namespace` (the test's client; the simulated nodes' handle for
/// a crash).
pub async fn apply(client: &Client, nodes: &NodeSimHandle, namespace: &str, step: &Step) {
    for (name, action) in &step.actions {
        apply_one(client, nodes, namespace, name, *action)
            .await
            .unwrap_or_else(|e| {
                panic!("step {}: {action:?} VM {namespace}/{name}: {e}", step.name)
            });
    }
}

async fn apply_one(
    client: &Client,
    nodes: &NodeSimHandle,
    namespace: &str,
    name: &str,
    action: Action,
) -> Result<(), String> {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), namespace);
    if action == Action::CreateFailingBoot {
        nodes.fail_vmis_before_running(Matcher::vmi(name), 1);
        let vm: VirtualMachine =
            serde_json::from_value(script_vm(name, Some("Once"))).map_err(|e| e.to_string())?;
        return vms
            .create(&kube::api::PostParams::default(), &vm)
            .await
            .map(drop)
            .map_err(|e| e.to_string());
    }
    let vm = serde_json::to_value(vms.get(name).await.map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let vmi_uid = || async {
        let vmis: Api<virtctl_rs::api::VirtualMachineInstance> =
            Api::namespaced(client.clone(), namespace);
        vmis.get(name)
            .await
            .map(|vmi| vmi.uid().unwrap_or_default())
            .map_err(|e| format!("its VMI: {e}"))
    };
    let params = PatchParams::default();
    match action {
        Action::Start if vm.pointer("/spec/runStrategy") == Some(&json!("Halted")) => {
            let patch = json!({"spec": {"runStrategy": "Always"}});
            vms.patch(name, &params, &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        Action::Start => {
            // A Manual VM whose VMI is final gets `[Stop{uid}, Start]` (lifecycle.go:120-138).
            let vmis: Api<virtctl_rs::api::VirtualMachineInstance> =
                Api::namespaced(client.clone(), namespace);
            let vmi = vmis.get_opt(name).await.map_err(|e| e.to_string())?;
            let final_uid = vmi
                .filter(|v| {
                    v.status
                        .as_ref()
                        .and_then(|s| s.phase)
                        .is_some_and(|p| p.is_final())
                })
                .map(|v| v.uid().unwrap_or_default());
            let requests = match final_uid {
                Some(uid) => json!([{"action": "Stop", "uid": uid}, {"action": "Start"}]),
                None => json!([{"action": "Start"}]),
            };
            let patch = json!({"status": {"stateChangeRequests": requests}});
            vms.patch_status(name, &params, &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        Action::StartPaused => {
            // lifecycle.go:95-109: the request, not a spec patch, when starting paused.
            let requests = json!([{"action": "Start", "data": {"paused": "true"}}]);
            let patch = json!({"status": {"stateChangeRequests": requests}});
            vms.patch_status(name, &params, &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        Action::Stop => {
            let patch = if vm.pointer("/spec/running").is_some() {
                json!({"spec": {"running": false}})
            } else {
                json!({"spec": {"runStrategy": "Halted"}})
            };
            vms.patch(name, &params, &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        Action::Restart => {
            let uid = vmi_uid().await?;
            let requests = json!([{"action": "Stop", "uid": uid}, {"action": "Start"}]);
            let patch = json!({"status": {"stateChangeRequests": requests}});
            vms.patch_status(name, &params, &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        Action::Crash => {
            return nodes
                .crash_guest(namespace, name)
                .await
                .map_err(|e| e.to_string());
        }
        Action::Shutdown => {
            return nodes
                .shutdown_guest(namespace, name)
                .await
                .map_err(|e| e.to_string());
        }
        Action::StopRequest => {
            // patchVMStatusStopped: the list replaced by the one request (lifecycle.go:227-237,
            // 618-620).
            let uid = vmi_uid().await?;
            let patch =
                json!({"status": {"stateChangeRequests": [{"action": "Stop", "uid": uid}]}});
            vms.patch_status(name, &params, &Patch::Merge(&patch))
                .await
                .map(drop)
        }
        Action::DeleteLauncher => {
            let uid = vmi_uid().await?;
            let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
            let selector = format!("kubevirt.io/created-by={uid}");
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|e| e.to_string())?;
            for pod in list.items {
                pods.delete(&pod.name_any(), &DeleteParams::default())
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        // Created above.
        Action::CreateFailingBoot => Ok(()),
        Action::ChangeDiskBus => {
            // The whole list in a merge patch: the same as a JSON patch of the one bus.
            let mut disks = vm
                .pointer("/spec/template/spec/domain/devices/disks")
                .cloned()
                .ok_or("spec.template.spec.domain.devices.disks: none")?;
            let bus = disks
                .pointer_mut("/0/disk/bus")
                .ok_or("spec.template.spec.domain.devices.disks[0].disk.bus: none")?;
            *bus = if bus == "sata" { "virtio" } else { "sata" }.into();
            let patch = json!({"spec": {"template": {"spec": {"domain": {"devices": {
                "disks": disks}}}}}});
            vms.patch(name, &params, &Patch::Merge(&patch))
                .await
                .map(drop)
        }
    }
    .map_err(|e| e.to_string())
}

/// What a step's actions must have led to on our side before it counts as settled (beside the
/// shape no longer changing): per VM of the step, a predicate over the VM's captured VM, VMI
/// and pod and the VMI's uid before the step.
pub fn reached(
    step: &Step,
    before: &BTreeMap<String, Value>,
    vms: &BTreeMap<String, Value>,
    vmis: &BTreeMap<String, Value>,
    pods: &BTreeMap<String, Value>,
) -> bool {
    step.actions.iter().all(|(name, action)| {
        let text = |o: Option<&Value>, p: &str| {
            o.and_then(|o| o.pointer(p))
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let vmi = vmis.get(name);
        let uid = text(vmi, "/metadata/uid");
        let replaced = vmi.is_some() && before.get(name).and_then(Value::as_str) != Some(&uid);
        let pod_running = text(pods.get(name), "/status/phase") == "Running";
        let strategy = text(vms.get(name), "/spec/runStrategy");
        match action {
            Action::Start => vmi.is_some() && pod_running,
            Action::StartPaused => vmi.is_some(),
            Action::Stop | Action::StopRequest => vmi.is_none(),
            Action::Shutdown if strategy == "RerunOnFailure" => vmi.is_none(),
            Action::Shutdown => replaced && pod_running,
            Action::Restart | Action::DeleteLauncher => replaced && pod_running,
            Action::Crash if matches!(strategy.as_str(), "Once" | "Manual") => {
                text(vmi, "/status/phase") == "Failed"
            }
            Action::Crash => replaced && pod_running,
            Action::CreateFailingBoot => text(vmi, "/status/phase") == "Failed",
            Action::ChangeDiskBus => vms
                .get(name)
                .and_then(|vm| vm.pointer("/status/conditions"))
                .and_then(Value::as_array)
                .is_some_and(|c| c.iter().any(|c| c["type"] == "RestartRequired")),
        }
    })
}

#[test]
fn the_script_acts_on_vms_the_inputs_hold() {
    let mut names: Vec<String> = crate::reference_conformance::EXAMPLES
        .iter()
        .map(|f| {
            crate::common::example_vm(f)
                .metadata
                .name
                .clone()
                .unwrap_or_default()
        })
        .collect();
    names.extend(
        script_vms()
            .iter()
            .filter_map(|vm| vm.pointer("/metadata/name")?.as_str().map(str::to_string)),
    );
    let running: Vec<String> = ["gen-0003", "demo-vm", "gen-0001", "gen-0002", "gen-0007"]
        .map(String::from)
        .to_vec();
    let steps = script(&running);
    for step in &steps {
        for (name, action) in &step.actions {
            assert!(
                names.contains(name)
                    || running.contains(name)
                    || *action == Action::CreateFailingBoot,
                "step {}: {action:?} on {name}, which no input holds",
                step.name
            );
        }
    }
    // The generated VMs acted on are the first three started (in the order given, by name in
    // the suite).
    let generated: Vec<&str> = steps
        .iter()
        .flat_map(|s| &s.actions)
        .map(|(n, _)| n.as_str())
        .filter(|n| n.starts_with("gen-"))
        .collect();
    assert_eq!(generated, ["gen-0003", "gen-0001", "gen-0002", "gen-0002"]);
}
