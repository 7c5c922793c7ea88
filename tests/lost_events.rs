//! The controller against lost watch events (issue 14): the real VM and VMI controllers on the
//! embedded cluster with one of the API server's lost-event faults on (src/sim/faults.rs),
//! scoped to the controller's user agent. In each, every VM must converge, and the audit log
//! must show exactly one VMI and one launcher pod per VM at a time (tests/common/one_per_vm.rs:
//! the successful creates per VM, none while the VM's previous launcher pod was not deleted,
//! no VMI create refused as AlreadyExists).
//!
//! * **tombstone deletions**: the controller's VMI and pod watches end with `410 Expired`
//!   where a `DELETED` would have been, so every deletion reaches it through a relist
//!   (client-go's `DeletedFinalStateUnknown`, our informer's `Delete { relisted: true }`); the
//!   user deletes each running VMI, and the VM controller must see it gone to start a new one.
//! * **stale lists**: a second controller takes over from a stopped one, and its first lists of
//!   VMs, VMIs and pods answer the state of a few events ago (a lagging watch cache), from
//!   before the changes made while no controller ran (a VMI deleted, a VM halted); the watches
//!   from those resourceVersions replay the changes.
//! * **dropped events**: the controller's first pod watch silently skips the `ADDED` of every
//!   launcher pod (what the VMI controller's creation expectation waits for) and the first
//!   binding, while VMs start; the later events of the same pods (the binding, the kubelet's
//!   status) carry the state the dropped ones had. Not every loss is made good: a dropped
//!   `DELETED`, or a dropped VMI event that no other write of the VMI follows (the VMI's
//!   `ADDED`, the controller's own `phase: Pending` update: nobody else changes a Pending VMI),
//!   lasts until a relist, and the controller never relists by itself: the VMI stays Pending,
//!   the VM `Starting` (docs/embedded-cluster.md, "Lost events").
//!
//! No fixed sleeps: every wait is for a condition, with the scenario's deadline.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::env::{CONTROLLER_AGENT, Env, EnvConfig, printable, start_leading_manager};
use common::one_per_vm::assert_one_at_a_time;
use kube::api::{DeleteParams, ListParams};
use serde_json::json;
use virtctl_rs::api::{Phase, VirtualMachine, VirtualMachineInstance};
use virtctl_rs::sim::cluster::EmbeddedCluster;
use virtctl_rs::sim::nodes::Matcher;
use virtctl_rs::sim::store::EventKind;
use virtctl_rs::sim::{AuditEntry, FaultRule};

const VMS: usize = 3;
const WATCHED: [&str; 2] = ["virtualmachineinstances", "pods"];

fn vm_name(i: usize) -> String {
    format!("lost-{i}")
}

/// docs/examples/vm-containerdisk.yaml as `name`, runStrategy Always.
fn vm(name: &str) -> VirtualMachine {
    let mut vm = common::example_vm_with("vm-containerdisk", "Always");
    vm.metadata.name = Some(name.to_string());
    vm
}

fn config(identity: &str) -> EnvConfig {
    let mut c = EnvConfig::new(identity);
    c.deadline = Duration::from_secs(60);
    c
}

/// Create the VMs and wait until each runs; returns their VMIs' UIDs.
async fn start_vms(env: &Env) -> Vec<String> {
    for i in 0..VMS {
        env.create_vm(&vm(&vm_name(i))).await;
    }
    let mut uids = Vec::new();
    for i in 0..VMS {
        let (_, vmi) = env.wait_running(&vm_name(i)).await;
        uids.push(vmi.metadata.uid.clone().unwrap_or_default());
    }
    uids
}

/// Wait until the controller is idle with caches equal to the server's objects.
async fn settle(env: &Env) {
    env.wait_for("idle queues and current caches", || async {
        (env.queues_idle() && env.caches_current().await).then_some(())
    })
    .await;
}

/// Lists of `resource` by user agents containing `agent`.
fn lists(audit: &[AuditEntry], resource: &str, agent: &str) -> usize {
    audit
        .iter()
        .filter(|e| e.verb == "list" && e.resource == resource && e.user_agent.contains(agent))
        .count()
}

fn starts(counts: &[usize]) -> BTreeMap<String, usize> {
    counts
        .iter()
        .enumerate()
        .map(|(i, n)| (vm_name(i), *n))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstone_deletions_reach_the_controller_through_relists() {
    let env = Env::start_with(config("lost-tombstone"), |cluster: &EmbeddedCluster| {
        for resource in WATCHED {
            cluster.api().faults().add(
                FaultRule::tombstone_deletes()
                    .resource(resource)
                    .user_agent(CONTROLLER_AGENT),
            );
        }
    })
    .await;
    let first = start_vms(&env).await;
    let before = env.cluster().api().audit().entries();
    for i in 0..VMS {
        env.vmis()
            .delete(&vm_name(i), &DeleteParams::default())
            .await
            .expect("delete VMI");
    }
    for (i, old) in first.iter().enumerate() {
        env.wait_vmi(&vm_name(i), "a new Running VMI after the deletion", |v| {
            v.metadata.uid.as_ref() != Some(old) && v.phase() == Phase::Running
        })
        .await;
        env.wait_vm(&vm_name(i), "Running again", |vm| {
            printable(vm) == "Running"
        })
        .await;
    }
    settle(&env).await;
    let audit = env.cluster().api().audit().entries();
    for resource in WATCHED {
        assert!(
            lists(&audit, resource, CONTROLLER_AGENT) > lists(&before, resource, CONTROLLER_AGENT),
            "the controller never relisted {resource}: the tombstones did not bite"
        );
    }
    assert_one_at_a_time(&audit, CONTROLLER_AGENT, &starts(&[2; VMS]));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_taking_over_from_stale_lists_catches_up_from_the_watch() {
    let mut env = Env::start_with(config("lost-stale-a"), |_| {}).await;
    let first = start_vms(&env).await;
    settle(&env).await;
    // The first controller stops (and releases the Lease).
    env.cancel.cancel();
    if let Some(run) = env.run.take() {
        run.await
            .expect("manager task")
            .expect("manager stops cleanly");
    }
    // While none runs: lost-0's VMI is deleted, lost-1 is halted.
    env.vmis()
        .delete(&vm_name(0), &DeleteParams::default())
        .await
        .expect("delete VMI");
    env.merge_patch_vm(&vm_name(1), json!({"spec": {"runStrategy": "Halted"}}))
        .await;
    // The next controller's first list of each resource is four of its events behind.
    let agent_b = "virt-controller-b";
    let faults = env.cluster().api().faults();
    let mut stale_rules = Vec::new();
    for resource in ["virtualmachines", "virtualmachineinstances", "pods"] {
        stale_rules.push(
            faults.add(
                FaultRule::stale_list(4)
                    .resource(resource)
                    .user_agent(agent_b)
                    .times(1),
            ),
        );
    }
    let (manager_b, cancel_b, run_b) =
        start_leading_manager(env.cluster(), agent_b, "lost-stale-b").await;
    env.wait_vmi(&vm_name(0), "a new Running VMI for lost-0", |v| {
        v.metadata.uid.as_ref() != Some(&first[0]) && v.phase() == Phase::Running
    })
    .await;
    env.wait_vm(&vm_name(1), "lost-1 Stopped", |vm| {
        printable(vm) == "Stopped"
    })
    .await;
    env.wait_for("lost-1's VMI gone", || async {
        env.vmi(&vm_name(1)).await.is_none().then_some(())
    })
    .await;
    for i in [0, 2] {
        env.wait_vm(&vm_name(i), "Running", |vm| printable(vm) == "Running")
            .await;
    }
    let (_, vmi2) = env.wait_running(&vm_name(2)).await;
    assert_eq!(
        vmi2.metadata.uid.as_ref(),
        Some(&first[2]),
        "lost-2 untouched"
    );
    let left: Vec<_> = faults
        .installed()
        .into_iter()
        .filter(|(id, _)| stale_rules.contains(id))
        .map(|(_, r)| r.times)
        .collect();
    assert_eq!(left, [Some(0); 3], "every stale list was served");
    env.wait_for("no launcher pod of lost-1 left", || async {
        let pods = env
            .pods()
            .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
            .await
            .ok()?;
        (!pods.items.iter().any(|p| {
            p.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("virt-launcher-lost-1-"))
        }))
        .then_some(())
    })
    .await;
    let audit = env.cluster().api().audit().entries();
    // Both controllers' user agents contain "virt-controller".
    assert_one_at_a_time(&audit, CONTROLLER_AGENT, &starts(&[2, 1, 1]));
    assert!(manager_b.leader_state().leading);
    cancel_b.cancel();
    run_b.await.expect("second manager task");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_events_are_made_good_by_later_ones() {
    let env = Env::start_with(config("lost-dropped"), |cluster: &EmbeddedCluster| {
        let faults = cluster.api().faults();
        // Each launcher pod's ADDED (the scheduler's binding follows it) and the first pod's
        // binding (the kubelet's status updates follow it).
        let drops = [
            ("pods", 1, EventKind::Added),
            ("pods", 2, EventKind::Added),
            ("pods", 3, EventKind::Added),
            ("pods", 1, EventKind::Modified),
        ];
        for (resource, nth, kind) in drops {
            faults.add(
                FaultRule::drop_event(nth, Some(kind))
                    .resource(resource)
                    .user_agent(CONTROLLER_AGENT)
                    .times(1),
            );
        }
    })
    .await;
    start_vms(&env).await;
    settle(&env).await;
    let faults = env.cluster().api().faults();
    assert!(
        faults.rules().iter().all(|r| r.times == Some(0)),
        "every drop rule reached a controller watch: {:?}",
        faults.rules()
    );
    let audit = env.cluster().api().audit().entries();
    assert_one_at_a_time(&audit, CONTROLLER_AGENT, &starts(&[1; VMS]));
    env.shutdown().await;
}

/// Halt VM `name`, whose VMI is `vmi`, with the drop rule installed first: its pods and VMI
/// go, the VM is Stopped, the rule was used, and the controller settles.
async fn halt_and_see_it_stop(env: Env, name: &str, vmi: &VirtualMachineInstance) {
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    env.merge_patch_vm(name, json!({"spec": {"runStrategy": "Halted"}}))
        .await;
    env.wait_pods_gone(&uid).await;
    env.wait_vmi_gone(name).await;
    env.wait_vm(name, "Stopped", |vm| printable(vm) == "Stopped")
        .await;
    assert!(
        env.cluster().api().faults().rules()[0].times == Some(0),
        "the drop rule reached the controller's pod watch"
    );
    settle(&env).await;
    env.shutdown().await;
}

/// Issue 38 item 2: the controller's pod watch drops the `DELETED` of the launcher pod of a
/// stopped VM. The pod expectation waits for it until it expires (shortened here from five
/// minutes to five seconds); the sync that follows deletes the pod again and gets 404. A 404
/// means the pod is gone: the cache must say so and the VMI's finalizer go, rather than the VMI
/// staying Terminating until a relist that never comes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_pod_deletion_does_not_hold_the_vmi_terminating() {
    let mut config = config("lost-delete");
    config.expectations_timeout = Duration::from_secs(5);
    let env = Env::start_with(config, |cluster: &EmbeddedCluster| {
        cluster.api().faults().add(
            FaultRule::drop_event(1, Some(EventKind::Deleted))
                .resource("pods")
                .user_agent(CONTROLLER_AGENT)
                .times(1),
        );
    })
    .await;
    let name = vm_name(0);
    env.create_vm(&vm(&name)).await;
    let (_, vmi) = env.wait_running(&name).await;
    halt_and_see_it_stop(env, &name, &vmi).await;
}

/// The same loss for a launcher pod that never ran (its image pull is stuck): the kubelet
/// deletes it at once, so the last state the controller saw is `Pending` with a
/// deletionTimestamp, which KubeVirt never deletes again (lifecycle.go:1001). When the pod
/// expectation expires, the controller reads the pod from the server, finds it gone and drops
/// it from the cache; otherwise the VMI stays Terminating (the fault soak's seed 15).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_deletion_of_a_pod_that_never_ran_does_not_hold_the_vmi() {
    let mut config = config("lost-delete-pending");
    config.expectations_timeout = Duration::from_secs(5);
    let env = Env::start_with(config, |cluster: &EmbeddedCluster| {
        cluster.api().faults().add(
            FaultRule::drop_event(1, Some(EventKind::Deleted))
                .resource("pods")
                .user_agent(CONTROLLER_AGENT)
                .times(1),
        );
        cluster
            .nodes()
            .stick_image_pull(Matcher::name_prefix("virt-launcher-lost-0-"));
    })
    .await;
    let name = vm_name(0);
    env.create_vm(&vm(&name)).await;
    env.wait_vm(
        &name,
        "ImagePullBackOff (the pod bound, never running)",
        |vm| printable(vm) == "ImagePullBackOff",
    )
    .await;
    let vmi = env.vmi(&name).await.expect("the VMI");
    halt_and_see_it_stop(env, &name, &vmi).await;
}

/// Issue 38 item 1: the controller's pod events arrive 10 s late, and its VMI watch ends in
/// `410 Expired` at every deletion, after which its relist answers the VMIs of eight events
/// ago. A VM is started, and while its launcher pod's `ADDED` is still on its way, an unrelated
/// VMI is deleted: the stale relist lacks the new VMI (a relisted deletion), and the watch from
/// that older resourceVersion brings it back. The pod created before must keep the VMI from a
/// second one: exactly one VMI and one launcher pod per VM throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_relist_while_pod_events_lag_does_not_duplicate_the_launcher_pod() {
    let env = Env::start_with(config("lost-stale-relist"), |cluster: &EmbeddedCluster| {
        let faults = cluster.api().faults();
        faults.add(
            FaultRule::delay_watch_events(Duration::from_secs(10))
                .resource("pods")
                .user_agent(CONTROLLER_AGENT),
        );
        faults.add(
            FaultRule::tombstone_deletes()
                .resource("virtualmachineinstances")
                .user_agent(CONTROLLER_AGENT),
        );
    })
    .await;
    // The unrelated VMI: no VM owns it.
    let template = vm("unrelated").spec.template.clone().expect("template");
    let mut unrelated = VirtualMachineInstance {
        spec: template.spec.unwrap_or_default(),
        ..Default::default()
    };
    unrelated.metadata.name = Some("unrelated".into());
    env.vmis()
        .create(&kube::api::PostParams::default(), &unrelated)
        .await
        .expect("create the unrelated VMI");
    env.wait_vmi("unrelated", "Running", |v| v.phase() == Phase::Running)
        .await;
    settle(&env).await;

    let name = vm_name(0);
    env.cluster().api().faults().add(
        FaultRule::stale_list(8)
            .resource("virtualmachineinstances")
            .user_agent(CONTROLLER_AGENT)
            .times(1),
    );
    env.create_vm(&vm(&name)).await;
    // The launcher pod exists on the server; the controller will hear of it in 10 s.
    env.wait_for("the launcher pod on the server", || async {
        let vmi = env.vmi(&name).await?;
        let uid = vmi.metadata.uid.clone()?;
        (!env.launcher_pods(&uid).await.is_empty()).then_some(())
    })
    .await;
    // Deleted at once (no finalizer to wait on): its DELETED, a 410 for the controller, is
    // sent while the pod's ADDED is still held back.
    env.vmis()
        .patch(
            "unrelated",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .expect("clear the unrelated VMI's finalizers");
    env.vmis()
        .delete("unrelated", &DeleteParams::default())
        .await
        .expect("delete the unrelated VMI");
    env.wait_for("the stale relist of VMIs", || async {
        (env.cluster().api().faults().rules()[2].times == Some(0)).then_some(())
    })
    .await;
    env.wait_running(&name).await;
    settle(&env).await;
    // The VMs' objects only (the unrelated VMI's launcher pod is the controller's too).
    let audit: Vec<AuditEntry> = env
        .cluster()
        .api()
        .audit()
        .entries()
        .into_iter()
        .filter(|e| !e.name.contains("unrelated"))
        .collect();
    assert_one_at_a_time(&audit, CONTROLLER_AGENT, &starts(&[1]));
    env.shutdown().await;
}
