//! `kubectl virtctl-rs inspect` end to end, through the built binary, against the embedded
//! cluster: with our controller leading (real queue depth and expectations, including a VMI
//! creation expectation held open by delayed watch delivery), against a Lease held by a name
//! with no debug endpoint, and the exit codes (VM not found, usage).
//!
//! Conditions are polled with generous deadlines; nothing sleeps for a fixed time.

use crate::common;

use common::wait_for;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::VirtualMachine;
use virtctl_rs::controller::manager::Manager;
use virtctl_rs::controller::vm::QUEUE_NAME as VM_QUEUE_NAME;
use virtctl_rs::sim::cluster::EmbeddedCluster;
use virtctl_rs::sim::faults::FaultRule;

const NS: &str = "default";
const CONTROLLER_AGENT: &str = "virt-controller-inspect-e2e";

async fn cluster() -> EmbeddedCluster {
    common::fast_cluster(1).await
}

/// `inspect ARGS` against the cluster: (exit code, stdout, stderr).
async fn inspect(cluster: &EmbeddedCluster, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
        .arg("inspect")
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output()
        .await
        .expect("run inspect");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn inspect_json(cluster: &EmbeddedCluster, args: &[&str]) -> Value {
    let (code, stdout, stderr) = inspect(cluster, args).await;
    assert_eq!(code, Some(0), "inspect {args:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The VM queue's entry in an inspect JSON document.
fn vm_queue_of(json: &Value) -> Value {
    json["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .find(|q| q["name"] == VM_QUEUE_NAME)
        .expect("vm queue in the JSON")
        .clone()
}

fn vm(name: &str, run_strategy: &str) -> VirtualMachine {
    common::objects::container_disk_vm(NS, name, run_strategy)
}

async fn create_vm(client: &kube::Client, vm: &VirtualMachine) {
    Api::<VirtualMachine>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), vm)
        .await
        .expect("create VM");
}

/// Our controller, leading (see [`common::env::start_leading_manager`]).
async fn start_manager(
    cluster: &EmbeddedCluster,
) -> (Arc<Manager>, CancellationToken, tokio::task::JoinHandle<()>) {
    common::env::start_leading_manager(cluster, CONTROLLER_AGENT, "inspect-e2e").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_our_controller_leading_json_has_the_real_queue_and_a_held_open_expectation() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    // The controller hears about VMIs only much later: its VMI creation expectation stays open.
    cluster.api().faults().add(
        FaultRule::delay_watch_events(Duration::from_secs(120))
            .resource("virtualmachineinstances")
            .user_agent(CONTROLLER_AGENT),
    );
    let (manager, cancel, run) = start_manager(&cluster).await;
    create_vm(&client, &vm("vm-a", "Always")).await;

    let key = format!("{NS}/vm-a");
    let json = wait_for(
        "inspect to show the pending VMI creation of a created VMI",
        || async {
            let json = inspect_json(&cluster, &["vm/vm-a", "-n", NS, "-o", "json"]).await;
            let pending = json["expectations"].as_array().is_some_and(|es| {
                es.iter().any(|e| {
                    e["store"] == "vm-vmi"
                        && e["key"] == key.as_str()
                        && e["adds"] == 1
                        && e["satisfied"] == false
                })
            });
            // The expectation is raised before the create is sent (KubeVirt's order): wait for the
            // VMI to be on the server too, or a loaded machine inspects in between.
            let created = json["vmi"]["phase"].is_string();
            (pending && created).then_some(json)
        },
    )
    .await;
    assert_eq!(json["controller"]["kind"], "debugEndpoint");
    assert_eq!(json["controller"]["expectationsExposed"], true);
    assert_eq!(json["lease"]["holderKind"], "virtctlRs");
    assert_eq!(json["lease"]["stale"], false);
    assert_eq!(json["lease"]["leaseDurationSeconds"], 6);
    assert!(
        json["lease"]["holderIdentity"]
            .as_str()
            .is_some_and(|h| h.starts_with("inspect-e2e"))
    );
    let summary = json["nextDecision"]["summary"].as_str().unwrap_or("");
    assert!(
        summary.starts_with("waiting: VMI creation expected "),
        "{summary}"
    );
    assert!(summary.contains(", expectations expire in "), "{summary}");
    assert!(
        !json["nextDecision"]["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .any(|a| a["kind"] == "CreateVmi"),
        "no second VMI while one is expected"
    );
    // The VMI exists on the server while the leader's cache has not seen it.
    assert!(json["vmi"]["phase"].is_string());
    assert_eq!(json["caughtUp"]["vmiCacheCurrent"], false);
    assert!(json["nextDecision"]["disagreement"].is_string());

    // The queue depth is the leader's own: idle key, and the same depth its queue reports.
    let queue = manager.context().vm_queue.get().expect("vm queue");
    let vm_q = vm_queue_of(&json);
    assert_eq!(vm_q["depth"], queue.len());
    assert!(vm_q["retries"].is_u64());
    assert!(vm_q["keyState"].is_string());

    // -o yaml is the same document.
    let (code, yaml, _) = inspect(&cluster, &["vm/vm-a", "-n", NS, "-o", "yaml"]).await;
    assert_eq!(code, Some(0));
    let from_yaml: Value = serde_yaml::from_str(&yaml).expect("yaml");
    assert_eq!(from_yaml["lease"]["holderKind"], "virtctlRs");

    // The fleet lists the VM with its pending expectation.
    let fleet = inspect_json(&cluster, &["-n", NS, "-o", "json"]).await;
    let row = fleet["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["name"] == "vm-a")
        .expect("vm-a row")
        .clone();
    assert_eq!(row["pendingExpectations"], 1);
    assert_eq!(fleet["controller"]["kind"], "debugEndpoint");

    cancel.cancel();
    let _ = run.await;
    cluster.shutdown().await;
}

/// Every VMI create of the controller fails (500, which kube's client does not retry), for
/// enough VMs that their retries spend the VM queue's shared token bucket (a burst of 100): the
/// inspector reports how far ahead the bucket is reserved and says, for a VM whose key is
/// parked behind it, when the key runs again and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_parked_behind_the_spent_shared_rate_limit_is_explained() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    cluster.api().faults().add(
        FaultRule::error(500)
            .verbs(&[virtctl_rs::sim::Verb::Create])
            .resource("virtualmachineinstances")
            .user_agent(CONTROLLER_AGENT),
    );
    let (manager, cancel, run) = start_manager(&cluster).await;
    for i in 0..40 {
        create_vm(&client, &vm(&format!("vm-{i:02}"), "Always")).await;
    }
    let queue = manager.context().vm_queue.get().expect("vm queue");
    wait_for(
        "the VM queue's shared rate limit to be reserved",
        || async { (queue.snapshot().rate_limiter_wait_seconds >= 2.0).then_some(()) },
    )
    .await;
    let json = wait_for("inspect to explain a parked key", || async {
        for i in 0..40 {
            let name = format!("vm/vm-{i:02}");
            let json = inspect_json(&cluster, &[name.as_str(), "-n", NS, "-o", "json"]).await;
            let waiting = json["nextDecision"]["waiting"].as_str().unwrap_or("");
            if waiting.contains("the queue's shared rate limit is reserved") {
                return Some(json);
            }
        }
        None
    })
    .await;
    let waiting = json["nextDecision"]["waiting"].as_str().unwrap_or("");
    assert!(
        waiting.starts_with("retry after ")
            && waiting.contains("virt-controller-vm runs this key again in "),
        "{waiting}"
    );
    let vm_q = vm_queue_of(&json);
    assert_eq!(vm_q["keyState"], "waiting");
    assert!(vm_q["retries"].as_u64().is_some_and(|n| n > 0), "{vm_q}");
    assert!(
        vm_q["rateLimiterWaitSeconds"]
            .as_f64()
            .is_some_and(|w| w >= 1.0),
        "{vm_q}"
    );
    // No VMI was created: the decision is still to create one.
    let summary = json["nextDecision"]["summary"].as_str().unwrap_or("");
    assert!(summary.contains("would create VMI"), "{summary}");

    cancel.cancel();
    let _ = run.await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_held_by_a_name_with_no_endpoint_is_shown_and_explained() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let now = chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let lease: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "virt-controller", "namespace": "kubevirt"},
        "spec": {"holderIdentity": "somebody-else", "leaseDurationSeconds": 3600,
                 "renewTime": now, "acquireTime": now, "leaseTransitions": 4}
    }))
    .expect("lease");
    Api::<Lease>::namespaced(client.clone(), "kubevirt")
        .create(&PostParams::default(), &lease)
        .await
        .expect("create Lease");
    create_vm(&client, &vm("vm-b", "Halted")).await;

    let json = inspect_json(&cluster, &["vm/vm-b", "-n", NS, "-o", "json"]).await;
    assert_eq!(json["lease"]["holderIdentity"], "somebody-else");
    assert_eq!(json["lease"]["holderKind"], "unknown");
    assert_eq!(json["lease"]["stale"], false);
    assert_eq!(json["lease"]["leaseTransitions"], 4);
    assert_eq!(json["controller"]["kind"], "unavailable");
    assert_eq!(json["queues"], json!([]));
    let missing = json["missing"].as_array().expect("missing");
    let controller = missing
        .iter()
        .find(|m| m["what"] == "controller")
        .expect("controller recorded as missing");
    assert!(
        controller["reason"]
            .as_str()
            .is_some_and(|r| r.contains("no debug endpoint annotation")),
        "{controller}"
    );
    assert!(missing.iter().any(|m| m["what"] == "vmi"));
    // Nobody reconciled the VM: its first sync would stamp the api-version annotations.
    assert!(
        json["nextDecision"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("observed api-version annotations")),
        "{}",
        json["nextDecision"]
    );
    assert_eq!(json["printableStatusReason"]["computed"], "Stopped");
    assert!(
        json["overheadCheck"]["formulaBytes"]
            .as_i64()
            .is_some_and(|b| b > 0)
    );

    // --once: the same, as text sections.
    let (code, text, _) = inspect(&cluster, &["vm", "vm-b", "-n", NS, "--once"]).await;
    assert_eq!(code, Some(0));
    for section in [
        "NEXT DECISION",
        "LEADER",
        "somebody-else (unknown kind)",
        "MISSING",
    ] {
        assert!(text.contains(section), "no {section:?} in\n{text}");
    }

    // A stale Lease whose debug endpoint nobody answers: both recorded, still exit 0.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let closed_addr = closed.local_addr().expect("addr");
    drop(closed);
    let hour_ago = (chrono::Utc::now() - chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    let gone: Lease = serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "gone-controller", "namespace": "kubevirt",
            "annotations": {"virtctl-rs.kubevirt.io/debug-endpoint":
                format!("http://{closed_addr}/debug/state")}},
        "spec": {"holderIdentity": "gone-host_1", "leaseDurationSeconds": 15,
                 "renewTime": hour_ago, "acquireTime": hour_ago, "leaseTransitions": 0}
    }))
    .expect("lease");
    Api::<Lease>::namespaced(client.clone(), "kubevirt")
        .create(&PostParams::default(), &gone)
        .await
        .expect("create Lease");
    let json = inspect_json(
        &cluster,
        &[
            "vm/vm-b",
            "-n",
            NS,
            "-o",
            "json",
            "--lease-name",
            "gone-controller",
        ],
    )
    .await;
    assert_eq!(json["lease"]["stale"], true);
    assert_eq!(json["lease"]["holderKind"], "virtctlRs");
    assert!(
        json["lease"]["renewAgeSeconds"]
            .as_f64()
            .is_some_and(|a| a >= 3599.0)
    );
    let missing = json["missing"].as_array().expect("missing");
    let reason = |what: &str| {
        missing
            .iter()
            .find(|m| m["what"] == what)
            .and_then(|m| m["reason"].as_str())
            .map(str::to_string)
            .unwrap_or_default()
    };
    assert!(
        reason("leader").starts_with("stale Lease kubevirt/gone-controller"),
        "{missing:?}"
    );
    assert!(reason("debugState").contains("unreachable"), "{missing:?}");
    assert_eq!(json["controller"]["kind"], "unavailable");

    // Exit codes: 1 with the reason for a VM that does not exist, 2 for usage.
    let (code, stdout, stderr) = inspect(&cluster, &["vm/nope", "-n", NS, "-o", "json"]).await;
    assert_eq!(code, Some(1));
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("VirtualMachine default/nope not found"),
        "{stderr}"
    );
    let (code, _, stderr) = inspect(&cluster, &["pod/x"]).await;
    assert_eq!(code, Some(2));
    assert!(stderr.contains("use vm/NAME"), "{stderr}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn an_unreachable_cluster_exits_1_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{addr}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n    namespace: default\nusers:\n- name: u\n  user: {{}}\ncurrent-context: c\n"
        ),
    )
    .expect("write kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
        .args(["inspect", "vm/x", "-o", "json", "--kubeconfig"])
        .arg(&kubeconfig)
        .output()
        .await
        .expect("run");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cluster unreachable"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_vm_under_our_controller_is_steady_and_matches_the_formula() {
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let (_manager, cancel, run) = start_manager(&cluster).await;
    create_vm(&client, &vm("vm-c", "Always")).await;
    let json = wait_for("vm-c Running with the controller caught up", || async {
        let json = inspect_json(&cluster, &["vm/vm-c", "-n", NS, "-o", "json"]).await;
        let steady = json["vmi"]["phase"] == "Running"
            && json["vm"]["printableStatus"] == "Running"
            && json["caughtUp"]["vmCacheCurrent"] == true
            && json["caughtUp"]["vmiCacheCurrent"] == true
            && json["nextDecision"]["actions"] == json!([]);
        steady.then_some(json)
    })
    .await;
    if std::env::var_os("INSPECT_PRINT").is_some() {
        let (_, text, _) = inspect(&cluster, &["vm/vm-c", "-n", NS, "--once"]).await;
        eprintln!("{text}");
    }
    let summary = json["nextDecision"]["summary"].as_str().unwrap_or("");
    assert!(
        summary.starts_with("VMI Running: runStrategy Always"),
        "{summary}"
    );
    assert!(json["nextDecision"].get("disagreement").is_none());
    assert_eq!(
        json["overheadCheck"]["match"], true,
        "{}",
        json["overheadCheck"]
    );
    assert!(json["overheadCheck"]["podRequestBytes"].is_i64());
    // The Overhead bar's scale: the guest's memory beside the request.
    assert!(json["overheadCheck"]["guestMemoryBytes"].is_i64());
    assert!(json["overheadCheck"]["annotationBytes"].is_i64());
    assert_eq!(json["printableStatusReason"]["computed"], "Running");
    assert_eq!(json["blockers"], json!([]));
    // `--kubevirt-version`: the same VM under another release's formula, beside the check.
    let args = ["vm/vm-c", "-n", NS, "--kubevirt-version", "v1.3.0"];
    let v13 = inspect_json(&cluster, &[&args[..], &["-o", "json"]].concat()).await;
    let other = &v13["kubevirtVersionOverhead"];
    assert_eq!(other["kubevirtVersion"], "v1.3.0", "{v13}");
    let sum: i64 = other["terms"]
        .as_array()
        .expect("terms")
        .iter()
        .filter_map(|t| t["bytes"].as_i64())
        .sum();
    assert_eq!(Some(sum), other["formulaBytes"].as_i64(), "{other}");
    assert_ne!(other["formulaBytes"], v13["overheadCheck"]["formulaBytes"]);
    assert!(json.get("kubevirtVersionOverhead").is_none());
    let (code, text, stderr) = inspect(&cluster, &[&args[..], &["--once"]].concat()).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(text.contains("  under v1.3.0: overhead −"), "{text}");
    let phases: Vec<&str> = json["vmi"]["phaseTransitions"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter_map(|p| p["phase"].as_str())
        .collect();
    assert!(phases.ends_with(&["Running"]), "{phases:?}");
    assert!(
        json["events"]
            .as_array()
            .is_some_and(|es| es.iter().any(|e| e["object"] == "VirtualMachine/vm-c")),
        "{}",
        json["events"]
    );
    cancel.cancel();
    let _ = run.await;
    cluster.shutdown().await;
}

/// A second launcher pod for a running VMI, made by hand (a copy of the real one under another
/// name, still controlled by the VMI): `inspect` names both as a blocker, in JSON and in text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_second_launcher_pod_is_a_blocker_naming_both_pods() {
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    let cluster = cluster().await;
    let client = cluster.client().await.expect("client");
    let (_manager, cancel, run) = start_manager(&cluster).await;
    create_vm(&client, &vm("vm-dup", "Always")).await;
    wait_for("vm-dup Running", || async {
        let json = inspect_json(&cluster, &["vm/vm-dup", "-n", NS, "-o", "json"]).await;
        (json["vmi"]["phase"] == "Running").then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let vmi: virtctl_rs::api::VirtualMachineInstance = Api::namespaced(client.clone(), NS)
        .get("vm-dup")
        .await
        .expect("vmi");
    let uid = vmi.metadata.uid.clone().expect("vmi uid");
    let lp = ListParams::default().labels(&format!("kubevirt.io/created-by={uid}"));
    let original = pods.list(&lp).await.expect("pods").items.remove(0);
    let original_name = original.metadata.name.clone().expect("name");
    let copy_name = format!("{original_name}-copy");
    let mut copy = original.clone();
    copy.metadata = kube::api::ObjectMeta {
        name: Some(copy_name.clone()),
        namespace: original.metadata.namespace.clone(),
        labels: original.metadata.labels.clone(),
        annotations: original.metadata.annotations.clone(),
        owner_references: original.metadata.owner_references.clone(),
        ..Default::default()
    };
    copy.status = None;
    pods.create(&PostParams::default(), &copy)
        .await
        .expect("create the copy");

    let blocker = wait_for("inspect to name the duplicate launcher pod", || async {
        let json = inspect_json(&cluster, &["vm/vm-dup", "-n", NS, "-o", "json"]).await;
        json["blockers"]
            .as_array()
            .and_then(|bs| bs.iter().find(|b| b["reason"] == "DuplicateLauncherPod"))
            .cloned()
    })
    .await;
    let message = blocker["message"].as_str().unwrap_or("");
    assert!(
        message.contains("2 live launcher pods are controlled by VMI vm-dup")
            && message.contains(&format!("{original_name} (Running on "))
            && message.contains(&format!("{copy_name} (")),
        "{blocker}"
    );
    assert_eq!(blocker["depth"], 2);
    let (code, text, stderr) = inspect(&cluster, &["vm/vm-dup", "-n", NS, "--once"]).await;
    assert_eq!(code, Some(0), "{stderr}");
    let blockers = text
        .split("BLOCKERS (deepest first)\n")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or("");
    assert!(
        blockers.contains("DuplicateLauncherPod: 2 live launcher pods")
            && blockers.contains(&original_name)
            && blockers.contains(&copy_name),
        "{text}"
    );
    cancel.cancel();
    let _ = run.await;
    cluster.shutdown().await;
}

/// An unknown `--kubevirt-version` is a usage error naming the flag, before any read.
#[tokio::test]
async fn an_unknown_kubevirt_version_is_a_usage_error_naming_the_flag() {
    for extra in [
        &["vm/a"][..],
        &["-A"][..],
        &["vm/a", "--set", "spec.running=true"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
            .arg("inspect")
            .args(extra)
            .args([
                "--kubevirt-version",
                "v0.9.9",
                "--kubeconfig",
                "/nonexistent/kubeconfig",
            ])
            .env_remove("KUBECONFIG")
            .kill_on_drop(true)
            .output()
            .await
            .expect("run inspect");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains("--kubevirt-version"), "{extra:?}: {stderr}");
        assert!(stderr.contains("v0.9.9"), "{extra:?}: {stderr}");
    }
}
