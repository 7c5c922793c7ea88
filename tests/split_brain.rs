//! Split-brain checks (issue 13): two controller instances compete for the
//! `kubevirt/virt-controller` Lease under three faults that make leader election go wrong in
//! practice, and the embedded API server's audit log must show, in each, that leadership
//! terms never overlap and that every non-Lease write of an instance falls inside one of its
//! own terms (`tests/common/split_brain.rs`, terms derived from the Lease writes alone):
//!
//! * **clock skew**: one instance's wall clock is five minutes ahead, so the `renewTime` it
//!   writes is in the future and the other's looks five minutes old to it;
//! * **a paused leader**: a real `run-controller` process against a real `cluster serve`
//!   process is stopped with SIGSTOP past its renew deadline, the other process takes over,
//!   and SIGCONT wakes the old leader with its work queues still in memory;
//! * **a network stall on the Lease only**: the leader's Lease requests (and only those) are
//!   delayed past its renew deadline while its other requests flow.
//!
//! Work happens throughout (the demo VM's VMI is deleted and recreated), so the instances have
//! something to write. Lease timings are short (2 s / 1.5 s / 0.25 s); nothing sleeps for a
//! fixed time except the pause itself, which is what is under test.

use crate::common;

use common::split_brain::{Term, assert_no_split_brain, describe};
use common::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::VirtualMachineInstance;
use virtctl_rs::api::apply::apply_path;
use virtctl_rs::controller::manager::{Manager, ManagerConfig, ManagerError, OnLostLease};
use virtctl_rs::runtime::lease::{LeaderElectionConfig, WallClock};
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use virtctl_rs::sim::{AuditEntry, FaultRule};

const LEASE: (&str, &str) = ("kubevirt", "virt-controller");
const LEASE_DURATION: Duration = Duration::from_secs(2);
const RENEW_DEADLINE: Duration = Duration::from_millis(1500);
const RETRY_PERIOD: Duration = Duration::from_millis(250);
const DEADLINE: Duration = Duration::from_secs(60);
/// How far ahead the skewed clock runs.
const SKEW: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

fn lease_config(identity: &str) -> LeaderElectionConfig {
    LeaderElectionConfig {
        lease_duration: LEASE_DURATION,
        renew_deadline: RENEW_DEADLINE,
        retry_period: RETRY_PERIOD,
        ..LeaderElectionConfig::new(identity)
    }
}

/// One in-process controller: its manager, the token that stops it, its `run` task.
struct Instance {
    manager: Arc<Manager>,
    cancel: CancellationToken,
    task: JoinHandle<Result<(), ManagerError>>,
}

impl Instance {
    /// A manager with user agent and identity `agent`, its Lease times from `clock` if given,
    /// standing by again after a lost Lease.
    async fn start(cluster: &EmbeddedCluster, agent: &str, clock: Option<WallClock>) -> Self {
        let client = cluster
            .api()
            .client_with_agent(agent)
            .await
            .expect("kube client");
        let config = ManagerConfig {
            vm_workers: 2,
            vmi_workers: 2,
            on_lost_lease: OnLostLease::Standby,
            kubevirt_namespace: None,
            ..ManagerConfig::new(lease_config(agent))
        };
        let (vm, vmi) = virtctl_rs::controller::reconcilers();
        let mut manager = Manager::start(client, config, vm, vmi)
            .await
            .expect("manager starts");
        if let Some(clock) = clock {
            manager = manager.with_wall_clock(clock);
        }
        let manager = Arc::new(manager);
        let cancel = CancellationToken::new();
        let task = tokio::spawn({
            let (manager, cancel) = (manager.clone(), cancel.clone());
            async move { manager.run(cancel).await }
        });
        Instance {
            manager,
            cancel,
            task,
        }
    }

    fn leading(&self) -> bool {
        self.manager.leader_state().leading
    }

    async fn stop(mut self) {
        self.cancel.cancel();
        let r = tokio::time::timeout(DEADLINE, &mut self.task)
            .await
            .expect("run returns")
            .expect("no panic");
        assert!(r.is_ok(), "{r:?}");
    }
}

async fn start_cluster() -> (EmbeddedCluster, kube::Client) {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: 2,
        ..Default::default()
    })
    .await
    .expect("embedded cluster starts");
    let client = cluster.client().await.expect("client");
    apply_path(
        &client,
        &common::repo_path("docs/examples/vm-containerdisk.yaml"),
    )
    .await
    .expect("apply demo-vm");
    (cluster, client)
}

/// The Lease's holder, `None` when absent or released.
async fn holder(client: &kube::Client) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE.0);
    leases
        .get_opt(LEASE.1)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
        .filter(|h| !h.is_empty())
}

/// The UID of demo-vm's VMI once it runs.
async fn running_vmi(client: &kube::Client) -> String {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), "default");
    wait_for("demo-vm's VMI Running", || async {
        let vmi = vmis.get_opt("demo-vm").await.ok().flatten()?;
        (vmi.phase() == virtctl_rs::api::Phase::Running
            && vmi.metadata.deletion_timestamp.is_none())
        .then(|| vmi.metadata.uid.clone())
        .flatten()
    })
    .await
}

/// Give the leader work: delete demo-vm's VMI, so that it deletes the pod and creates another.
async fn churn(client: &kube::Client) {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), "default");
    let _ = vmis.delete("demo-vm", &DeleteParams::default()).await;
}

/// Wait until the audit log shows `agent` with at least `n` Lease writes in its current term.
async fn renewed(cluster: &EmbeddedCluster, agent: &str, agents: &[&str], n: usize) -> Term {
    wait_for(&format!("{agent} to renew {n} times"), || async {
        let entries = cluster.api().audit().entries();
        common::split_brain::terms(&entries, LEASE, agents)
            .pop()
            .filter(|t| t.agent == agent && t.writes >= n)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn clock_skew_between_two_controllers() {
    let (cluster, client) = start_cluster().await;
    let agents = ["ctl-normal", "ctl-ahead"];
    let ahead: WallClock = Arc::new(|| chrono::Utc::now() + SKEW);

    // The instance on time leads; the one five minutes ahead sees its renewTime as five
    // minutes old, yet must wait while it renews.
    let normal = Instance::start(&cluster, "ctl-normal", None).await;
    wait_for("ctl-normal to lead", || async {
        normal.leading().then_some(())
    })
    .await;
    let skewed = Instance::start(&cluster, "ctl-ahead", Some(ahead.clone())).await;
    running_vmi(&client).await;
    churn(&client).await;
    running_vmi(&client).await;
    renewed(&cluster, "ctl-normal", &agents, 20).await;
    assert!(normal.leading() && !skewed.leading());

    // The on-time leader is killed (no release): the skewed one takes over after expiry.
    normal.task.abort();
    wait_for("ctl-ahead to lead", || async {
        skewed.leading().then_some(())
    })
    .await;
    churn(&client).await;
    running_vmi(&client).await;

    // A new on-time instance sees renewTimes five minutes in the future: it must not take
    // them as "not expired for five minutes" (nor as anything else): it waits for a real
    // expiry, i.e. for the skewed leader to stop.
    let late = Instance::start(&cluster, "ctl-normal", None).await;
    let term = renewed(&cluster, "ctl-ahead", &agents, 20).await;
    assert!(skewed.leading() && !late.leading());
    let written: chrono::DateTime<chrono::Utc> = term
        .last_renew_time_written
        .as_deref()
        .expect("renewTime written")
        .parse()
        .expect("renewTime is RFC 3339");
    assert!(
        written - term.last_renew > SKEW - chrono::TimeDelta::seconds(30),
        "the skewed clock shows in the Lease: renewTime {written}, server time {}",
        term.last_renew
    );
    skewed.stop().await;
    wait_for("the new ctl-normal to lead", || async {
        late.leading().then_some(())
    })
    .await;
    churn(&client).await;
    running_vmi(&client).await;
    late.stop().await;

    let terms = assert_no_split_brain(&cluster.api().audit().entries(), LEASE, &agents);
    let order: Vec<&str> = terms.iter().map(|t| t.agent.as_str()).collect();
    assert_eq!(
        order,
        ["ctl-normal", "ctl-ahead", "ctl-normal"],
        "{}",
        describe(&terms)
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_network_stall_on_the_lease_only() {
    let (cluster, client) = start_cluster().await;
    let agents = ["ctl-a", "ctl-b"];
    let a = Instance::start(&cluster, "ctl-a", None).await;
    wait_for("ctl-a to lead", || async { a.leading().then_some(()) }).await;
    let b = Instance::start(&cluster, "ctl-b", None).await;
    running_vmi(&client).await;
    renewed(&cluster, "ctl-a", &agents, 5).await;

    // A's Lease requests (only those) take longer than its renew deadline; everything else it
    // sends goes through. It keeps working until its deadline, then must stop writing before
    // B can take over.
    let stall = cluster.api().faults().add(
        FaultRule::latency(LEASE_DURATION + RENEW_DEADLINE)
            .resource("leases")
            .user_agent("ctl-a"),
    );
    churn(&client).await;
    wait_for("ctl-b to lead", || async { b.leading().then_some(()) }).await;
    assert!(!a.leading(), "A gave up the Lease it could not renew");
    running_vmi(&client).await;
    churn(&client).await;
    running_vmi(&client).await;
    // The stall ends: A stands by behind B, and never writes again while B leads.
    cluster.api().faults().remove(stall);
    renewed(&cluster, "ctl-b", &agents, 10).await;
    assert!(b.leading() && !a.leading());
    b.stop().await;
    wait_for("ctl-a to lead again", || async {
        a.leading().then_some(())
    })
    .await;
    churn(&client).await;
    running_vmi(&client).await;
    a.stop().await;

    let entries = cluster.api().audit().entries();
    let delayed = entries
        .iter()
        .filter(|e| e.resource == "leases" && e.user_agent.contains("ctl-a"))
        .count();
    assert!(delayed > 0);
    let terms = assert_no_split_brain(&entries, LEASE, &agents);
    let order: Vec<&str> = terms.iter().map(|t| t.agent.as_str()).collect();
    assert_eq!(order, ["ctl-a", "ctl-b", "ctl-a"], "{}", describe(&terms));
    cluster.shutdown().await;
}

/// Real processes: `cluster serve` and two `run-controller`s.
mod processes {
    use super::*;
    use std::path::Path;
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::process::{Child, Command};

    fn binary() -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"));
        c.current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        c
    }

    /// Send `signal` (`STOP`, `CONT`, `TERM`) to a child this test started.
    pub fn signal(child: &Child, signal: &str) {
        let pid = child.id().expect("process still running");
        let status = std::process::Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} delivered");
    }

    /// `cluster serve` writing its kubeconfig to `kubeconfig` and its audit log to `audit`;
    /// returned once it printed its `export KUBECONFIG=` line.
    pub async fn serve(kubeconfig: &Path, audit: &Path) -> Child {
        let mut child = binary()
            .args([
                "cluster",
                "serve",
                "--nodes",
                "2",
                "--kubelet-delay-ms",
                "50",
            ])
            .arg("--kubeconfig-out")
            .arg(kubeconfig)
            .arg("--audit-log")
            .arg(audit)
            .args(["--apply", "docs/examples/vm-containerdisk.yaml"])
            .spawn()
            .expect("spawn cluster serve");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        tokio::time::timeout(DEADLINE, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("export KUBECONFIG=") {
                    return;
                }
            }
            panic!("cluster serve ended before printing its kubeconfig");
        })
        .await
        .expect("cluster serve starts");
        // Keep reading so the server never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        child
    }

    /// `run-controller` as `agent` (identity and user agent), short Lease timings.
    pub fn run_controller(kubeconfig: &Path, agent: &str) -> Child {
        let mut child = binary()
            .args(["run-controller", "--quiet", "--listen", "none"])
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args(["--identity", agent, "--user-agent", agent])
            .args(["--leader-elect-lease-duration", "2"])
            .args(["--leader-elect-renew-deadline", "1.5"])
            .args(["--leader-elect-retry-period", "0.25"])
            .args(["--on-lost-lease", "standby"])
            .spawn()
            .expect("spawn run-controller");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        child
    }

    /// The audit log file's entries; `complete` once the server has exited (while it runs,
    /// the last line may be half written and is skipped).
    pub fn audit_entries(path: &Path, complete: bool) -> Vec<AuditEntry> {
        let text = std::fs::read_to_string(path).expect("read the audit log");
        let mut out = Vec::new();
        for line in text.lines() {
            match serde_json::from_str(line) {
                Ok(e) => out.push(e),
                Err(e) if complete => panic!("audit line {line:?} is not an AuditEntry: {e}"),
                Err(_) => {}
            }
        }
        out
    }

    /// Wait for `child` to exit within the deadline; its exit code.
    pub async fn exited(child: &mut Child) -> Option<i32> {
        tokio::time::timeout(DEADLINE, child.wait())
            .await
            .expect("process exits")
            .expect("wait")
            .code()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_renew_deadline() {
    use processes::*;
    let dir = tempfile::tempdir().expect("temp dir");
    let (kubeconfig, audit) = (
        dir.path().join("kubeconfig"),
        dir.path().join("audit.jsonl"),
    );
    let mut server = serve(&kubeconfig, &audit).await;
    let client = {
        let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("config");
        kube::Client::try_from(config).expect("client")
    };
    let agents = ["ctl-a", "ctl-b"];
    let mut a = run_controller(&kubeconfig, "ctl-a");
    wait_for("ctl-a to hold the Lease", || async {
        (holder(&client).await.as_deref() == Some("ctl-a")).then_some(())
    })
    .await;
    let mut b = run_controller(&kubeconfig, "ctl-b");
    running_vmi(&client).await;

    // Pause A in the middle of work: its VMI was just deleted, so it has a pod to delete and
    // a VMI to create. B takes over once A's record is a lease duration old.
    churn(&client).await;
    signal(&a, "STOP");
    wait_for("ctl-b to hold the Lease", || async {
        (holder(&client).await.as_deref() == Some("ctl-b")).then_some(())
    })
    .await;
    running_vmi(&client).await;
    churn(&client).await;
    // A wakes with its queues, expectations and in-flight reconciles as they were: it must
    // find its term over before writing anything.
    signal(&a, "CONT");
    running_vmi(&client).await;
    // Several lease durations of B renewing with A awake beside it.
    wait_for("B to renew 12 times with A awake", || async {
        common::split_brain::terms(&audit_entries(&audit, false), LEASE, &agents)
            .pop()
            .filter(|t| t.agent == "ctl-b" && t.writes > 12)
    })
    .await;
    assert_eq!(holder(&client).await.as_deref(), Some("ctl-b"));

    signal(&b, "TERM");
    assert_eq!(exited(&mut b).await, Some(0), "B stops gracefully");
    wait_for("ctl-a to lead again", || async {
        (holder(&client).await.as_deref() == Some("ctl-a")).then_some(())
    })
    .await;
    churn(&client).await;
    running_vmi(&client).await;
    signal(&a, "TERM");
    assert_eq!(exited(&mut a).await, Some(0), "A stops gracefully");
    signal(&server, "TERM");
    exited(&mut server).await;

    let entries = audit_entries(&audit, true);
    let terms = assert_no_split_brain(&entries, LEASE, &agents);
    let order: Vec<&str> = terms.iter().map(|t| t.agent.as_str()).collect();
    assert_eq!(order, ["ctl-a", "ctl-b", "ctl-a"], "{}", describe(&terms));
    println!("{}", describe(&terms));
}
