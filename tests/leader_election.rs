//! Leader election end to end: two controller `Manager`s on one embedded cluster compete for the
//! `kubevirt/virt-controller` Lease, as two virt-controller pods do (KubeVirt
//! pkg/virt-controller/watch/application.go:1132-1177, client-go tools/leaderelection).
//!
//! Each manager talks through its own kube client with its own user agent (`controller-a`,
//! `controller-b`), so the embedded API server's audit log tells their requests apart. The
//! properties proven here:
//!
//! * at most one manager reports `leading` at any sampled instant, and the Lease's
//!   `holderIdentity` names the one that does;
//! * a graceful stop (cancelling `run`) releases the Lease and the standby takes over within one
//!   jittered retry period; killing the leader (aborting its `run` task, no release) hands over
//!   after the Lease expires, never before;
//! * from the audit log (`tests/common/split_brain.rs`): leadership terms never overlap, and
//!   every non-Lease write of an agent (VMs, VMIs, pods, events, revisions...) happens inside
//!   one of its own terms, i.e. a standby never writes anything but the Lease, and a former
//!   leader stops writing before the next one acquires; the handover times are read from
//!   *epochs* (maximal runs of successful Lease writes by one agent);
//! * the VM stays Running with exactly one VMI and one launcher pod across handovers (creates
//!   counted in the audit log);
//! * `OnLostLease::Standby`: a leader that cannot renew stops its workers, keeps `run` going,
//!   and leads again later; `OnLostLease::Exit`: `run` returns `Err(LeaseLost)`.
//!
//! Lease timings are short (2 s / 1.5 s / 0.25 s). Conditions are awaited with generous
//! deadlines; the only timing bounds asserted are the handover bounds the acceptance criteria
//! ask for, with an allowance of a second on top of the algorithm's own bound.

use crate::common;

use common::split_brain::assert_no_split_brain;
use common::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::apply::apply_path;
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::controller::manager::{Manager, ManagerConfig, ManagerError, OnLostLease};
use virtctl_rs::runtime::lease::{JITTER_FACTOR, LeaderElectionConfig, LostReason};
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use virtctl_rs::sim::{AuditEntry, DEFAULT_USER_AGENT, FaultRule, Verb};

const LEASE_DURATION: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
const RETRY_PERIOD: Duration = Duration::from_millis(250);
/// Slack on top of the algorithm's bounds for request latency on a busy machine.
const ALLOWANCE: Duration = Duration::from_secs(1);
/// Deadline of every wait.
const DEADLINE: Duration = Duration::from_secs(60);
const LEASE_NAMESPACE: &str = "kubevirt";
const LEASE_NAME: &str = "virt-controller";

async fn start_cluster() -> EmbeddedCluster {
    EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: 2,
        ..Default::default()
    })
    .await
    .expect("embedded cluster starts")
}

fn manager_config(identity: &str, on_lost_lease: OnLostLease) -> ManagerConfig {
    ManagerConfig {
        vm_workers: 2,
        vmi_workers: 2,
        on_lost_lease,
        kubevirt_namespace: None,
        ..ManagerConfig::new(LeaderElectionConfig {
            lease_duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
            ..LeaderElectionConfig::new(identity)
        })
    }
}

/// One controller process: a manager, the token that stops it gracefully, its `run` task.
struct Instance {
    /// User agent and leader-election identity.
    agent: &'static str,
    manager: Arc<Manager>,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), ManagerError>>,
}

impl Instance {
    async fn start(cluster: &EmbeddedCluster, agent: &'static str, on_lost: OnLostLease) -> Self {
        Self::start_as(cluster, agent, agent, on_lost).await
    }

    /// An instance whose Lease identity is `identity` (its user agent stays `agent`).
    async fn start_as(
        cluster: &EmbeddedCluster,
        agent: &'static str,
        identity: &str,
        on_lost: OnLostLease,
    ) -> Self {
        let client = cluster
            .api()
            .client_with_agent(agent)
            .await
            .expect("kube client");
        let (vm, vmi) = virtctl_rs::controller::reconcilers();
        let manager = Arc::new(
            Manager::start(client, manager_config(identity, on_lost), vm, vmi)
                .await
                .expect("manager starts"),
        );
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let manager = manager.clone();
            let cancel = cancel.clone();
            async move { manager.run(cancel).await }
        });
        Instance {
            agent,
            manager,
            cancel,
            task,
        }
    }

    fn leading(&self) -> bool {
        self.manager.leader_state().leading
    }
}

/// A manager and its user agent.
type Named = (&'static str, Arc<Manager>);

/// Samples `leader_state()` of every registered manager every 5 ms and records every instant
/// at which more than one of them claimed to lead.
#[derive(Clone, Default)]
struct LeaderSampler {
    managers: Arc<Mutex<Vec<Named>>>,
    overlaps: Arc<Mutex<Vec<String>>>,
    samples: Arc<Mutex<u64>>,
    stop: CancellationToken,
}

impl LeaderSampler {
    fn spawn() -> Self {
        let sampler = LeaderSampler::default();
        let s = sampler.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = s.stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                }
                let leaders: Vec<String> = s
                    .managers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .iter()
                    .filter(|(_, m)| m.leader_state().leading)
                    .map(|(name, m)| format!("{name} ({})", m.leader_state().identity))
                    .collect();
                *s.samples.lock().unwrap_or_else(|e| e.into_inner()) += 1;
                if leaders.len() > 1 {
                    s.overlaps
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("{} both leading: {leaders:?}", chrono::Utc::now()));
                }
            }
        });
        sampler
    }

    fn add(&self, instance: &Instance) {
        self.managers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((instance.agent, instance.manager.clone()));
    }

    /// Stops sampling; panics if two managers ever claimed to lead at once.
    fn finish(&self) {
        self.stop.cancel();
        let samples = *self.samples.lock().unwrap_or_else(|e| e.into_inner());
        assert!(samples > 100, "the sampler ran ({samples} samples)");
        let overlaps = self.overlaps.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            overlaps.is_empty(),
            "more than one manager claimed to lead: {overlaps:#?}"
        );
    }
}

/// The Lease's current holder (`None` when absent or released).
async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt(LEASE_NAME)
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Waits until exactly `leader` (among `all`) reports leading and the Lease names it.
async fn wait_sole_leader(leases: &Api<Lease>, leader: &Instance, all: &[&Instance]) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let others_standing_by = all
            .iter()
            .filter(|i| !Arc::ptr_eq(&i.manager, &leader.manager))
            .all(|i| !i.leading());
        let holder = lease_holder(leases).await;
        if leader.leading() && others_standing_by && holder.as_deref() == Some(leader.agent) {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            let states: Vec<_> = all
                .iter()
                .map(|i| (i.agent, i.manager.leader_state()))
                .collect();
            panic!(
                "timed out after {DEADLINE:?} waiting for {} to be the sole leader; Lease holder {holder:?}; states {states:#?}",
                leader.agent
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A successful write to the election Lease.
fn is_lease_write(e: &AuditEntry) -> bool {
    e.is_write()
        && e.resource == "leases"
        && e.namespace == LEASE_NAMESPACE
        && (e.name == LEASE_NAME || e.verb == "create")
        && (200..300).contains(&e.code)
}

/// A maximal run of successful Lease writes by one agent: a leadership epoch, from its acquire
/// to its last renewal (or release).
#[derive(Debug, Clone)]
struct Epoch {
    agent: String,
    first: AuditEntry,
    last: AuditEntry,
}

/// The leadership epochs of `agents` in audit order.
fn epochs(entries: &[AuditEntry], agents: &[&str]) -> Vec<Epoch> {
    let mut out: Vec<Epoch> = Vec::new();
    for e in entries.iter().filter(|e| is_lease_write(e)) {
        let Some(agent) = agents.iter().find(|a| e.user_agent.contains(**a)) else {
            continue;
        };
        match out.last_mut() {
            Some(epoch) if epoch.agent == *agent => epoch.last = e.clone(),
            _ => out.push(Epoch {
                agent: agent.to_string(),
                first: e.clone(),
                last: e.clone(),
            }),
        }
    }
    out
}

/// Successful creates of `resource` in `default` whose name starts with `prefix`.
fn creates(entries: &[AuditEntry], resource: &str, prefix: &str) -> Vec<AuditEntry> {
    entries
        .iter()
        .filter(|e| {
            e.verb == "create"
                && e.resource == resource
                && e.subresource.is_empty()
                && e.namespace == "default"
                && e.name.starts_with(prefix)
                && (200..300).contains(&e.code)
        })
        .cloned()
        .collect()
}

/// Prints how many writes each controller made per resource (for the test log).
fn print_write_summary(entries: &[AuditEntry]) {
    let mut counts = std::collections::BTreeMap::<(String, String, String), usize>::new();
    for e in entries.iter().filter(|e| e.is_write()) {
        if let Some(agent) = ["controller-a", "controller-b"]
            .iter()
            .find(|a| e.user_agent.contains(**a))
        {
            let resource = match e.subresource.as_str() {
                "" => e.resource.clone(),
                sub => format!("{}/{sub}", e.resource),
            };
            *counts
                .entry((agent.to_string(), resource, e.verb.clone()))
                .or_default() += 1;
        }
    }
    println!("writes by agent, resource, verb: {counts:?}");
}

fn seconds(d: chrono::TimeDelta) -> f64 {
    d.num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

/// Waits until the VM is Running with exactly one VMI (Running, not being deleted) and exactly
/// one launcher pod; returns the VMI's uid.
async fn wait_vm_running_alone(client: &kube::Client) -> String {
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), "default");
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let vm = vms.get("demo-vm").await.ok();
        let status = vm
            .as_ref()
            .and_then(|vm| vm.status.as_ref()?.printable_status.clone());
        let vmi_list = vmis
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        let pod_list = pods
            .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
            .await
            .map(|l| l.items)
            .unwrap_or_default();
        if let ([vmi], [_pod]) = (vmi_list.as_slice(), pod_list.as_slice())
            && status.as_deref() == Some("Running")
            && vmi.phase().as_str() == "Running"
            && vmi.metadata.deletion_timestamp.is_none()
        {
            return vmi.metadata.uid.clone().unwrap_or_default();
        }
        if tokio::time::Instant::now() >= deadline {
            let vmis: Vec<_> = vmi_list
                .iter()
                .map(|v| {
                    (
                        v.metadata.uid.clone(),
                        v.phase().as_str().to_string(),
                        v.metadata.deletion_timestamp.is_some(),
                    )
                })
                .collect();
            let pods: Vec<_> = pod_list
                .iter()
                .map(|p| {
                    (
                        p.metadata.name.clone(),
                        p.status.as_ref().and_then(|s| s.phase.clone()),
                    )
                })
                .collect();
            panic!(
                "timed out after {DEADLINE:?} waiting for demo-vm Running with one VMI and one launcher pod: printableStatus {status:?}, VMIs (uid, phase, deleting) {vmis:?}, pods {pods:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Deletes the VM's VMI and waits for its replacement to run alone; returns the new uid.
async fn recreate_vmi(client: &kube::Client, old_uid: &str) -> String {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), "default");
    vmis.delete("demo-vm", &DeleteParams::default())
        .await
        .expect("delete the VMI");
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let uid = wait_vm_running_alone(client).await;
        if uid != old_uid {
            return uid;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the deleted VMI {old_uid} was not replaced"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Exactly `n` VMIs and `n` launcher pods were ever created for demo-vm, the last ones by
/// `last_by`.
fn assert_creates(cluster: &EmbeddedCluster, n: usize, last_by: &str) {
    let entries = cluster.api().audit().entries();
    for (resource, prefix) in [
        ("virtualmachineinstances", "demo-vm"),
        ("pods", "virt-launcher-demo-vm"),
    ] {
        let created = creates(&entries, resource, prefix);
        assert_eq!(created.len(), n, "{resource} created: {created:#?}");
        assert!(
            created
                .last()
                .is_some_and(|c| c.user_agent.contains(last_by)),
            "the last {resource} create is by {last_by}: {created:#?}"
        );
    }
}

fn demo_vm_manifest() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("docs/examples/vm-containerdisk.yaml")
}

/// Graceful handover, then a killed leader, with a VM kept Running throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_leader_at_a_time_across_graceful_stop_and_kill() {
    let cluster = start_cluster().await;
    let client = cluster.client().await.expect("client");
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    apply_path(&client, &demo_vm_manifest())
        .await
        .expect("apply demo-vm");
    let sampler = LeaderSampler::spawn();

    // A starts first and wins the (absent) Lease; B stands by with warm caches.
    let mut a = Instance::start(&cluster, "controller-a", OnLostLease::Exit).await;
    sampler.add(&a);
    wait_for("controller-a to lead", || async {
        a.leading().then_some(())
    })
    .await;
    let mut b = Instance::start(&cluster, "controller-b", OnLostLease::Exit).await;
    sampler.add(&b);
    wait_for("controller-b's caches", || async {
        b.manager.context().caches.all_synced().then_some(())
    })
    .await;
    wait_sole_leader(&leases, &a, &[&a, &b]).await;
    let first_vmi = wait_vm_running_alone(&client).await;
    assert!(
        !b.leading() && b.manager.debug_state()["queues"]["virt-controller-vm"].is_null(),
        "the standby runs no queues"
    );
    // ... but exports their series at zero, as KubeVirt's standby does.
    let standby_metrics = b.manager.context().metrics.encode().expect("metrics");
    for queue in ["virt-controller-vm", "virt-controller-vmi"] {
        let series = format!("kubevirt_workqueue_depth{{name=\"{queue}\"}} 0\n");
        assert!(
            standby_metrics.contains(&series),
            "the standby's /metrics lacks {series:?}:\n{standby_metrics}"
        );
    }

    // 1. Graceful stop of A: its Lease is released and B takes over within one jittered retry.
    a.cancel.cancel();
    let stopped = tokio::time::timeout(DEADLINE, &mut a.task)
        .await
        .expect("A's run returns after cancellation")
        .expect("A's run task did not panic");
    assert!(stopped.is_ok(), "graceful stop is Ok: {stopped:?}");
    assert!(!a.leading(), "A no longer leads after run returned");
    wait_sole_leader(&leases, &b, &[&a, &b]).await;
    let entries = cluster.api().audit().entries();
    let eps = epochs(&entries, &["controller-a", "controller-b"]);
    let (ep_a, ep_b) = match eps.as_slice() {
        [ep_a, ep_b] if ep_a.agent == "controller-a" && ep_b.agent == "controller-b" => {
            (ep_a.clone(), ep_b.clone())
        }
        other => panic!("expected the epochs A then B, got {other:#?}"),
    };
    let graceful = seconds(ep_b.first.time - ep_a.last.time);
    let graceful_bound = RETRY_PERIOD.mul_f64(1.0 + JITTER_FACTOR) + ALLOWANCE;
    println!(
        "graceful handover: A released at {}, B acquired at {} ({graceful:.3} s; bound {:.3} s)",
        ep_a.last.time,
        ep_b.first.time,
        graceful_bound.as_secs_f64()
    );
    assert!(
        graceful >= 0.0 && graceful <= graceful_bound.as_secs_f64(),
        "graceful handover took {graceful:.3} s (bound {graceful_bound:?})"
    );
    // The VM is untouched by the handover: same VMI, still one VMI and one pod ever created.
    assert_eq!(wait_vm_running_alone(&client).await, first_vmi);
    assert_creates(&cluster, 1, "controller-a");
    // B works: a deleted VMI is recreated, once, by B.
    let second_vmi = recreate_vmi(&client, &first_vmi).await;
    assert_creates(&cluster, 2, "controller-b");

    // A restarts (same identity and user agent) and stands by behind B.
    let mut a2 = Instance::start(&cluster, "controller-a", OnLostLease::Exit).await;
    sampler.add(&a2);
    wait_for("restarted A's caches", || async {
        a2.manager.context().caches.all_synced().then_some(())
    })
    .await;
    wait_sole_leader(&leases, &b, &[&a2, &b]).await;

    // Let B renew a few times, so that its last renewal is a renewal.
    wait_for("B to renew the Lease", || async {
        let entries = cluster.api().audit().entries();
        let eps = epochs(&entries, &["controller-a", "controller-b"]);
        eps.last()
            .filter(|ep| ep.agent == "controller-b")
            .map(|ep| {
                entries[ep.first.seq as usize..=ep.last.seq as usize]
                    .iter()
                    .filter(|e| is_lease_write(e))
                    .count()
            })
            .filter(|n| *n >= 3)
    })
    .await;

    // 2. Kill B: abort its run task (no release, no further renewals). Its manager (informers)
    // stays alive, so any worker left running would still react to changes.
    let killed_at = cluster.api().audit().len() as u64;
    b.task.abort();
    let aborted = (&mut b.task).await;
    assert!(
        aborted.as_ref().is_err_and(|e| e.is_cancelled()),
        "B's run task was aborted: {aborted:?}"
    );
    wait_sole_leader(&leases, &a2, &[&a2, &b]).await;
    let entries = cluster.api().audit().entries();
    let eps = epochs(&entries, &["controller-a", "controller-b"]);
    let [.., ep_b, ep_a2] = eps.as_slice() else {
        panic!("expected epochs A, B, A: {eps:#?}");
    };
    assert_eq!(
        (ep_b.agent.as_str(), ep_a2.agent.as_str()),
        ("controller-b", "controller-a")
    );
    assert!(
        ep_b.last.seq < killed_at,
        "B wrote the Lease after being killed: {:?}",
        ep_b.last
    );
    let kill = seconds(ep_a2.first.time - ep_b.last.time);
    // A notices B's last renewal at its next attempt (up to one jittered retry later), and
    // takes over at its first attempt a lease duration after that observation (up to one more).
    let kill_bound = LEASE_DURATION + RETRY_PERIOD.mul_f64(2.0 * (1.0 + JITTER_FACTOR)) + ALLOWANCE;
    println!(
        "kill handover: B last renewed at {}, A acquired at {} ({kill:.3} s; lease {:.3} s, bound {:.3} s)",
        ep_b.last.time,
        ep_a2.first.time,
        LEASE_DURATION.as_secs_f64(),
        kill_bound.as_secs_f64()
    );
    // Safety: A waited a full lease duration (on its own clock) after B's last renewal it saw;
    // 20 ms of slack for the audit timestamps being taken on arrival.
    assert!(
        kill >= LEASE_DURATION.as_secs_f64() - 0.02,
        "A took over {kill:.3} s after B's last renewal, before the lease expired"
    );
    assert!(
        kill <= kill_bound.as_secs_f64(),
        "kill handover took {kill:.3} s (bound {kill_bound:?})"
    );
    // B's renew loop is dead: nothing from B touches the Lease after the kill.
    let late_lease_calls: Vec<_> = entries
        .iter()
        .filter(|e| {
            e.seq >= killed_at && e.resource == "leases" && e.user_agent.contains("controller-b")
        })
        .collect();
    assert!(
        late_lease_calls.is_empty(),
        "killed B still calls the Lease API: {late_lease_calls:#?}"
    );

    // The new leader keeps the VM as it is (no duplicate creations across the handover); a VMI
    // deleted now is recreated exactly once, by A alone (B's informers still see the deletion;
    // its workers must not act on it).
    assert_eq!(wait_vm_running_alone(&client).await, second_vmi);
    assert_creates(&cluster, 2, "controller-b");
    let _third_vmi = recreate_vmi(&client, &second_vmi).await;
    assert_creates(&cluster, 3, "controller-a");
    let entries = cluster.api().audit().entries();
    let late_b_writes: Vec<_> = entries
        .iter()
        .filter(|e| e.seq >= killed_at && e.is_write() && e.user_agent.contains("controller-b"))
        .collect();
    assert!(
        late_b_writes.is_empty(),
        "killed B still writes: {late_b_writes:#?}"
    );
    assert!(!b.leading(), "killed B does not claim to lead");
    assert!(
        b.manager.debug_state()["queues"]["virt-controller-vm"].is_null(),
        "killed B has no work queues"
    );

    // Whole history: epochs A, B, A in that order, and nobody wrote outside its own epoch.
    let eps = assert_no_split_brain(
        &entries,
        (LEASE_NAMESPACE, LEASE_NAME),
        &["controller-a", "controller-b"],
    );
    let order: Vec<&str> = eps.iter().map(|e| e.agent.as_str()).collect();
    assert_eq!(order, ["controller-a", "controller-b", "controller-a"]);
    print_write_summary(&entries);
    sampler.finish();

    a2.cancel.cancel();
    let stopped = tokio::time::timeout(DEADLINE, &mut a2.task)
        .await
        .expect("A's run returns")
        .expect("no panic");
    assert!(stopped.is_ok(), "{stopped:?}");
    drop(b);
    cluster.shutdown().await;
}

/// Lease writes of `agent` fail with 500 (reads still work): it cannot renew.
fn block_lease_writes(agent: &str) -> FaultRule {
    FaultRule::error(500)
        .verbs(&[Verb::Create, Verb::Update, Verb::Patch])
        .resource("leases")
        .user_agent(agent)
}

/// `OnLostLease::Standby`: a leader that cannot renew stops working but keeps running, and
/// leads again once it can.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lost_lease_with_standby_stops_the_workers_and_leads_again_later() {
    let cluster = start_cluster().await;
    let client = cluster.client().await.expect("client");
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    apply_path(&client, &demo_vm_manifest())
        .await
        .expect("apply demo-vm");
    let sampler = LeaderSampler::spawn();
    let mut a = Instance::start(&cluster, "controller-a", OnLostLease::Standby).await;
    sampler.add(&a);
    wait_for("controller-a to lead", || async {
        a.leading().then_some(())
    })
    .await;
    let mut b = Instance::start(&cluster, "controller-b", OnLostLease::Standby).await;
    sampler.add(&b);
    wait_sole_leader(&leases, &a, &[&a, &b]).await;
    let first_vmi = wait_vm_running_alone(&client).await;

    // A's Lease writes fail for longer than the renew deadline: it loses the Lease.
    let fault = cluster
        .api()
        .faults()
        .add(block_lease_writes("controller-a"));
    wait_for("A to stop leading", || async {
        (!a.leading()).then_some(())
    })
    .await;
    let state = a.manager.leader_state();
    assert!(
        state.last_error.is_some(),
        "the failed renewals are reported: {state:?}"
    );
    // Workers stopped (no queues), while `run` keeps going.
    wait_for("A's queues to be gone", || async {
        a.manager.debug_state()["queues"]["virt-controller-vm"]
            .is_null()
            .then_some(())
    })
    .await;
    assert!(!a.task.is_finished(), "run keeps going in standby mode");
    let lost_at = cluster.api().audit().len() as u64;
    // Work appears while A stands by (most likely before B's takeover): A must not act on it;
    // B recreates the VMI once it leads.
    let second_vmi = recreate_vmi(&client, &first_vmi).await;
    wait_sole_leader(&leases, &b, &[&a, &b]).await;
    assert_creates(&cluster, 2, "controller-b");
    assert!(!a.task.is_finished(), "A still competes for the Lease");

    // Faults clear; B stops gracefully; A leads again with the same `run`.
    cluster.api().faults().remove(fault);
    b.cancel.cancel();
    let stopped = tokio::time::timeout(DEADLINE, &mut b.task)
        .await
        .expect("B's run returns")
        .expect("no panic");
    assert!(stopped.is_ok(), "{stopped:?}");
    wait_sole_leader(&leases, &a, &[&a, &b]).await;
    assert!(!a.task.is_finished(), "A leads again in the same run");
    // ... and works again: a deleted VMI is recreated by A.
    assert_eq!(wait_vm_running_alone(&client).await, second_vmi);
    recreate_vmi(&client, &second_vmi).await;
    assert_creates(&cluster, 3, "controller-a");

    let entries = cluster.api().audit().entries();
    let eps = assert_no_split_brain(
        &entries,
        (LEASE_NAMESPACE, LEASE_NAME),
        &["controller-a", "controller-b"],
    );
    let order: Vec<&str> = eps.iter().map(|e| e.agent.as_str()).collect();
    assert_eq!(order, ["controller-a", "controller-b", "controller-a"]);
    // Nothing but (failed) Lease writes from A between its loss and its next acquire.
    let standby_writes: Vec<_> = entries
        .iter()
        .filter(|e| {
            e.seq >= lost_at
                && e.seq < eps[2].start_seq
                && e.is_write()
                && e.user_agent.contains("controller-a")
                && e.resource != "leases"
        })
        .collect();
    assert!(
        standby_writes.is_empty(),
        "A wrote while standing by: {standby_writes:#?}"
    );
    print_write_summary(&entries);
    sampler.finish();

    a.cancel.cancel();
    let stopped = tokio::time::timeout(DEADLINE, &mut a.task)
        .await
        .expect("A's run returns")
        .expect("no panic");
    assert!(stopped.is_ok(), "{stopped:?}");
    cluster.shutdown().await;
}

/// `OnLostLease::Exit` (KubeVirt's behaviour): losing the Lease ends `run` with `LeaseLost`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_with_exit_ends_run_with_lease_lost() {
    let cluster = start_cluster().await;
    let mut a = Instance::start(&cluster, "controller-a", OnLostLease::Exit).await;
    wait_for("controller-a to lead", || async {
        a.leading().then_some(())
    })
    .await;
    cluster
        .api()
        .faults()
        .add(block_lease_writes("controller-a"));
    let result = tokio::time::timeout(DEADLINE, &mut a.task)
        .await
        .expect("run returns after losing the Lease")
        .expect("no panic");
    match &result {
        Err(ManagerError::LeaseLost { lease, reason }) => {
            assert_eq!(lease, "kubevirt/virt-controller");
            assert!(
                matches!(reason, LostReason::NotRenewed { last_error: Some(e), .. } if e.contains("500")),
                "the renewals' error is the reason: {reason:?}"
            );
        }
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    // The exit message says why: the renewals failed, and with which error (issue 38 item 3).
    let message = result
        .map(|()| String::new())
        .unwrap_or_else(|e| e.to_string());
    println!("exit message: {message}");
    assert!(
        message.contains("kubevirt/virt-controller") && message.contains("500"),
        "the message names the Lease and the renewals' error: {message}"
    );
    assert!(!a.leading());
    cluster.shutdown().await;
}

/// Issue 38 item 3: `kubectl patch lease virt-controller` with a renewTime the leader did not
/// write made the leader step down ("another process renews the lease … under this identity")
/// and exit, leaving the controllers without a leader for 18–21 s. Such a write keeps the
/// holder and its acquisition (acquireTime, leaseTransitions): the leader renews over it and
/// keeps leading, without a gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_time_patched_by_someone_else_does_not_unseat_the_leader() {
    let cluster = start_cluster().await;
    // A normal client, as `kubectl patch` would use.
    let client = cluster.client().await.expect("client");
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    // Exit on a lost Lease, as KubeVirt does: stepping down would end `run`.
    let mut a = Instance::start(&cluster, "controller-a", OnLostLease::Exit).await;
    wait_for("controller-a to lead", || async {
        a.leading().then_some(())
    })
    .await;
    wait_sole_leader(&leases, &a, &[&a]).await;
    let spec = |l: &Lease| l.spec.clone().unwrap_or_default();
    let acquired = spec(&leases.get(LEASE_NAME).await.expect("the Lease"));

    // Every instant at which A did not claim to lead, from now on.
    let gaps = Arc::new(Mutex::new(Vec::new()));
    let stop_sampling = CancellationToken::new();
    let sampler = tokio::spawn({
        let (manager, gaps, stop) = (a.manager.clone(), gaps.clone(), stop_sampling.clone());
        async move {
            let mut samples = 0u64;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return samples,
                    _ = tokio::time::sleep(Duration::from_millis(5)) => {}
                }
                samples += 1;
                let state = manager.leader_state();
                if !state.leading {
                    gaps.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(format!("{} not leading: {state:?}", chrono::Utc::now()));
                }
            }
        }
    });

    let patched_at = cluster.api().audit().len() as u64;
    for round in 0..3 {
        // A renewTime an hour ahead: certainly not one A wrote.
        let foreign = (chrono::Utc::now() + chrono::Duration::hours(1))
            .format("%Y-%m-%dT%H:%M:%S%.6fZ")
            .to_string();
        let patch = serde_json::json!({"spec": {"renewTime": foreign}});
        let patched = leases
            .patch(LEASE_NAME, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch the Lease's renewTime");
        assert_eq!(
            spec(&patched).holder_identity.as_deref(),
            Some("controller-a"),
            "round {round}: the patch keeps the holder"
        );
        let patched_rv = patched.metadata.resource_version.clone();
        // A renews over the patch: a newer resourceVersion with A's own renewTime.
        wait_for("A to renew over the patched renewTime", || {
            let leases = leases.clone();
            let patched_rv = patched_rv.clone();
            async move {
                let lease = leases.get(LEASE_NAME).await.ok()?;
                let renewed = lease.metadata.resource_version != patched_rv
                    && spec(&lease).holder_identity.as_deref() == Some("controller-a");
                renewed.then_some(())
            }
        })
        .await;
    }

    // A keeps renewing for longer than a lease duration plus the renew deadline after the
    // last patch: were it going to step down or lose the Lease, it would have by then.
    let last_patch = cluster
        .api()
        .audit()
        .entries()
        .into_iter()
        .rfind(|e| e.seq >= patched_at && e.verb == "patch" && e.resource == "leases")
        .expect("the patches are audited");
    let enough = chrono::TimeDelta::from_std(LEASE_DURATION + RENEW_DEADLINE).expect("delta");
    wait_for(
        "A to renew for a lease duration after the patches",
        || async {
            cluster
                .api()
                .audit()
                .by_user_agent("controller-a")
                .into_iter()
                .any(|e| is_lease_write(&e) && e.time - last_patch.time > enough)
                .then_some(())
        },
    )
    .await;
    stop_sampling.cancel();
    let samples = sampler.await.expect("sampler");
    assert!(samples > 100, "the sampler ran ({samples} samples)");
    let gaps = gaps.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(gaps.is_empty(), "A stopped leading: {gaps:#?}");
    assert!(!a.task.is_finished(), "A's run goes on (no exit)");
    let now = spec(&leases.get(LEASE_NAME).await.expect("the Lease"));
    assert_eq!(now.holder_identity.as_deref(), Some("controller-a"));
    let renewed = now
        .renew_time
        .and_then(|t| chrono::DateTime::from_timestamp_micros(t.0.as_microsecond()))
        .expect("a renewTime");
    assert!(
        renewed < chrono::Utc::now() + chrono::Duration::minutes(30),
        "A's own renewTime replaced the patched one: {renewed}"
    );
    assert_eq!(
        (now.acquire_time, now.lease_transitions),
        (acquired.acquire_time, acquired.lease_transitions),
        "the same acquisition: no step-down and re-acquire"
    );
    // Every Lease write after the first patch is A's (a renewal) or a patch of this test.
    let writers: std::collections::BTreeSet<String> = cluster
        .api()
        .audit()
        .entries()
        .into_iter()
        .filter(|e| e.seq >= patched_at && is_lease_write(e))
        .map(|e| e.user_agent.clone())
        .collect();
    assert!(
        writers
            .iter()
            .all(|w| w.contains("controller-a") || w.contains(DEFAULT_USER_AGENT)),
        "{writers:?}"
    );

    a.cancel.cancel();
    let stopped = tokio::time::timeout(DEADLINE, &mut a.task)
        .await
        .expect("A's run returns")
        .expect("no panic");
    assert!(stopped.is_ok(), "{stopped:?}");
    cluster.shutdown().await;
}

/// Issue 13 item 1: two instances started with the same identity (a user running
/// `run-controller --identity me` twice). client-go would let both lead; here the second
/// stands by while the first renews, writes nothing, and takes over once the first stops.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_with_one_identity_never_both_lead_or_write() {
    let cluster = start_cluster().await;
    let client = cluster.client().await.expect("client");
    apply_path(&client, &demo_vm_manifest())
        .await
        .expect("apply demo-vm");
    let sampler = LeaderSampler::spawn();
    let mut a = Instance::start_as(&cluster, "twin-a", "me", OnLostLease::Standby).await;
    sampler.add(&a);
    wait_for("twin-a to lead", || async { a.leading().then_some(()) }).await;
    let mut b = Instance::start_as(&cluster, "twin-b", "me", OnLostLease::Standby).await;
    sampler.add(&b);
    let first_vmi = wait_vm_running_alone(&client).await;
    // Several lease durations of A renewing under the shared identity.
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let renewals = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone());
    let seen = Arc::new(Mutex::new(std::collections::BTreeSet::new()));
    wait_for("A to renew several times while B runs", || {
        let (leases, seen) = (leases.clone(), seen.clone());
        async move {
            let l = leases.get(LEASE_NAME).await.ok()?;
            let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
            seen.insert(format!("{:?}", renewals(&l)));
            (seen.len() > 24).then_some(())
        }
    })
    .await;
    assert!(a.leading() && !b.leading(), "A leads, B stands by");
    let b_writes: Vec<AuditEntry> = cluster
        .api()
        .audit()
        .by_user_agent("twin-b")
        .into_iter()
        .filter(|e| e.is_write() && e.resource != "leases")
        .collect();
    assert!(b_writes.is_empty(), "B wrote: {b_writes:#?}");
    let b_lease_writes = cluster
        .api()
        .audit()
        .by_user_agent("twin-b")
        .into_iter()
        .filter(|e| e.is_write() && e.resource == "leases")
        .count();
    assert_eq!(b_lease_writes, 0, "B never renewed A's record");

    // A stops (releasing): B takes over and keeps the VM running, with the same VMI.
    a.cancel.cancel();
    let _ = tokio::time::timeout(DEADLINE, &mut a.task).await;
    wait_for("twin-b to lead", || async { b.leading().then_some(()) }).await;
    assert_eq!(wait_vm_running_alone(&client).await, first_vmi);
    sampler.finish();
    b.cancel.cancel();
    let _ = tokio::time::timeout(DEADLINE, &mut b.task).await;
}

/// A manager whose writes have their own fenced connection pool (as `run-controller` starts
/// it) and no Lease client of its own acquires the Lease through the client it was started
/// with and runs a VM: the write pool refuses everything outside a term, so an elector that
/// used it could never acquire (the 1,000-VM bench caught that: "no leadership").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manager_with_its_own_write_pool_acquires_and_runs_a_vm() {
    let cluster = start_cluster().await;
    let agent = "ctl-pool";
    let client = cluster
        .api()
        .client_with_agent(agent)
        .await
        .expect("kube client");
    let mut write_config = cluster.api().kube_config().await.expect("kube config");
    write_config.headers.push((
        axum::http::header::USER_AGENT,
        axum::http::HeaderValue::from_static("ctl-pool"),
    ));
    let (vm, vmi) = virtctl_rs::controller::reconcilers();
    let manager = Arc::new(
        Manager::start_with_write_pool(
            client.clone(),
            write_config,
            manager_config(agent, OnLostLease::Exit),
            vm,
            vmi,
        )
        .await
        .expect("manager starts"),
    );
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let (manager, cancel) = (manager.clone(), cancel.clone());
        async move { manager.run(cancel).await }
    });
    wait_for("the manager to lead", || async {
        manager.leader_state().leading.then_some(())
    })
    .await;
    apply_path(&client, &demo_vm_manifest())
        .await
        .expect("apply demo-vm");
    wait_vm_running_alone(&client).await;
    cancel.cancel();
    task.await.expect("run task").expect("graceful stop");
    let writes: Vec<_> = cluster
        .api()
        .audit()
        .entries()
        .into_iter()
        .filter(|e| e.user_agent.contains(agent) && e.resource == "virtualmachineinstances")
        .filter(|e| e.verb == "create" && (200..300).contains(&e.code))
        .collect();
    assert_eq!(
        writes.len(),
        1,
        "the VMI was created through the write pool"
    );
    cluster.shutdown().await;
}
