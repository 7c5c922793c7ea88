//! `inspect vm/NAME --what-if …` end to end, through the built binary, against the embedded
//! cluster with our controller leading a running VM: a run-strategy change to Halted, graphics
//! turned off (RestartRequired and the videoRam term), `memory.guest` under both rollout
//! strategies, and a pod no node can hold. Every run is checked against the API server's audit
//! log: the binary only reads. Plus `-f FILE --what-if` and `explain-overhead --what-if`, which
//! need no cluster.
//!
//! Conditions are polled with generous deadlines; nothing sleeps for a fixed time.

use crate::common;

use common::wait_for;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::controller::manager::Manager;
use virtctl_rs::sim::cluster::EmbeddedCluster;

const NS: &str = "default";
const CONTROLLER_AGENT: &str = "virt-controller-whatif-e2e";
/// User agents that are not the binary: the controller, the test's own client, the simulator.
const OTHER_AGENTS: &[&str] = &[
    CONTROLLER_AGENT,
    "virtctl-rs-test",
    "sim-scheduler",
    "sim-kubelet",
    "sim-virt-handler",
    "sim-node-lifecycle",
];

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"));
    c.env_remove("KUBECONFIG").kill_on_drop(true);
    c
}

/// `inspect ARGS` against the cluster: (exit code, stdout, stderr). Asserts from the audit log
/// that the run wrote nothing and (unless it was a usage error, exit 2) did read.
async fn inspect(cluster: &EmbeddedCluster, args: &[&str]) -> (Option<i32>, String, String) {
    let audit = cluster.api().audit();
    let from = audit.len();
    let out = bin()
        .arg("inspect")
        .args(args)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .output()
        .await
        .expect("run inspect");
    let entries = audit.entries();
    let ours: Vec<_> = entries
        .iter()
        .skip(from)
        .filter(|e| !OTHER_AGENTS.contains(&e.user_agent.as_str()))
        .collect();
    assert!(
        out.status.code() == Some(2) || !ours.is_empty(),
        "the binary's reads are in the audit log: {:?} {}",
        entries
            .iter()
            .skip(from)
            .map(|e| e.user_agent.clone())
            .collect::<std::collections::BTreeSet<_>>(),
        String::from_utf8_lossy(&out.stderr)
    );
    let writes: Vec<_> = ours.iter().filter(|e| e.is_write()).collect();
    assert!(writes.is_empty(), "inspect --what-if wrote: {writes:?}");
    let test_writes: Vec<_> = entries
        .iter()
        .skip(from)
        .filter(|e| e.user_agent == "virtctl-rs-test" && e.is_write())
        .collect();
    assert!(test_writes.is_empty(), "{test_writes:?}");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn what_if_json(cluster: &EmbeddedCluster, args: &[&str]) -> Value {
    let mut all = vec!["vm/vm-w", "-n", NS, "-o", "json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = inspect(cluster, &all).await;
    assert_eq!(code, Some(0), "inspect {all:?} failed: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn vm() -> VirtualMachine {
    common::objects::container_disk_vm(NS, "vm-w", "Always")
}

fn outcome_has(json: &Value, needle: &str) -> bool {
    json["outcome"].as_array().is_some_and(|o| {
        o.iter()
            .any(|l| l.as_str().is_some_and(|s| s.contains(needle)))
    })
}

/// Our controller, leading (see [`common::env::start_leading_manager`]).
async fn start_manager(
    cluster: &EmbeddedCluster,
) -> (Arc<Manager>, CancellationToken, tokio::task::JoinHandle<()>) {
    common::env::start_leading_manager(cluster, CONTROLLER_AGENT, "whatif-e2e").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_if_on_a_running_vm_reads_only_and_answers() {
    let cluster = common::fast_cluster(2).await;
    let client = cluster.client().await.expect("client");
    let (_manager, cancel, run) = start_manager(&cluster).await;
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), NS);
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), NS);
    vms.create(&PostParams::default(), &vm())
        .await
        .expect("create VM");
    wait_for("vm-w Running and the controller idle", || async {
        let (code, out, _) = inspect(&cluster, &["vm/vm-w", "-n", NS, "-o", "json"]).await;
        let json: Value = serde_json::from_str(&out).ok()?;
        (code == Some(0)
            && json["vmi"]["phase"] == "Running"
            && json["vm"]["printableStatus"] == "Running"
            && json["nextDecision"]["actions"] == json!([]))
        .then_some(())
    })
    .await;
    let vm_before = vms.get("vm-w").await.expect("vm");
    let vmi_before = vmis.get("vm-w").await.expect("vmi");

    // 1. runStrategy Halted: would delete the VMI; the text says so too.
    let json = what_if_json(&cluster, &["--set", "spec.runStrategy=Halted"]).await;
    assert!(
        outcome_has(&json, "would delete VMI vm-w"),
        "{}",
        json["outcome"]
    );
    assert!(
        json["after"]["actions"]
            .as_array()
            .expect("actions")
            .iter()
            .any(|a| a["kind"] == "DeleteVmi"
                && a["why"].as_str().is_some_and(|w| w.contains("vm.go:"))),
        "{}",
        json["after"]
    );
    assert_eq!(json["before"]["actions"], json!([]));
    let (code, text, _) = inspect(
        &cluster,
        &["vm/vm-w", "-n", NS, "--set", "spec.runStrategy=Halted"],
    )
    .await;
    assert_eq!(code, Some(0));
    assert!(text.contains("would delete VMI vm-w"), "{text}");
    assert!(text.contains("(nothing is written)"), "{text}");

    // 2. Graphics off: RestartRequired, and the pod's memory request moves by the videoRam term.
    let json = what_if_json(
        &cluster,
        &[
            "--what-if",
            r#"{"spec":{"template":{"spec":{"domain":{"devices":{"autoattachGraphicsDevice":false}}}}}}"#,
        ],
    )
    .await;
    assert_eq!(json["before"]["restartRequired"], false);
    assert_eq!(json["after"]["restartRequired"], true, "{}", json["after"]);
    assert!(outcome_has(&json, "RestartRequired"), "{}", json["outcome"]);
    let pod = &json["pod"];
    assert!(
        pod["beforeSource"]
            .as_str()
            .is_some_and(|s| s.starts_with("pod/virt-launcher-vm-w-")),
        "{pod}"
    );
    let terms = pod["terms"].as_array().expect("terms");
    assert_eq!(terms.len(), 1, "{pod}");
    assert_eq!(terms[0]["name"], "videoRam");
    assert_eq!(terms[0]["deltaBytes"], -32 * 1024 * 1024);
    let (b, a) = (
        pod["memoryRequestBeforeBytes"].as_i64().expect("before"),
        pod["memoryRequestAfterBytes"].as_i64().expect("after"),
    );
    assert_eq!(a - b, -32 * 1024 * 1024, "{pod}");

    // 3. memory.guest: LiveUpdate (no KubeVirt CR: KubeVirt's default), then Stage.
    let guest = ["--set", "spec.template.spec.domain.memory.guest=256Mi"];
    let json = what_if_json(&cluster, &guest).await;
    assert_eq!(json["rollout"]["strategy"], "LiveUpdate");
    assert_eq!(json["after"]["restartRequired"], false);
    assert!(
        json["rollout"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("live update of spec.template.spec.domain.memory.guest")),
        "{}",
        json["rollout"]
    );
    let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt");
    let kubevirts: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "kubevirt",
        &ApiResource::from_gvk_with_plural(&gvk, "kubevirts"),
    );
    let cr: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"vmRolloutStrategy": "Stage"}}
    }))
    .expect("cr");
    kubevirts
        .create(&PostParams::default(), &cr)
        .await
        .expect("create KubeVirt CR");
    let json = what_if_json(&cluster, &guest).await;
    assert_eq!(json["rollout"]["strategy"], "Stage");
    assert_eq!(json["after"]["restartRequired"], true, "{}", json["after"]);
    assert!(
        json["rollout"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("RestartRequired")),
        "{}",
        json["rollout"]
    );

    // 4. A memory request no node has: unschedulable, with the closest node.
    let json = what_if_json(
        &cluster,
        &[
            "--set",
            "spec.template.spec.domain.resources.requests.memory=512Gi",
        ],
    )
    .await;
    let fit = &json["fit"];
    assert_eq!(fit["fits"], false, "{fit}");
    let closest = fit["closestNode"].as_str().expect("closest node");
    assert!(closest.starts_with("sim-node-"), "{fit}");
    assert!(
        fit["summary"]
            .as_str()
            .is_some_and(|s| s.contains("unschedulable")
                && s.contains(closest)
                && s.contains("memory")),
        "{fit}"
    );
    assert!(outcome_has(&json, "unschedulable"), "{}", json["outcome"]);

    // 5. A restart request, and one virt-api would refuse (exit 1 with its message).
    let json = what_if_json(&cluster, &["--what-if-request", "restart"]).await;
    assert!(outcome_has(&json, "would restart"), "{}", json["outcome"]);
    let (code, _, stderr) = inspect(
        &cluster,
        &["vm/vm-w", "-n", NS, "--what-if-request", "start"],
    )
    .await;
    assert_eq!(code, Some(1));
    assert!(stderr.contains("VM is already running"), "{stderr}");
    let (code, _, stderr) = inspect(&cluster, &["vm/vm-w", "-n", NS, "--set", "nope"]).await;
    assert_eq!(code, Some(2), "{stderr}");

    // Nothing moved on the server.
    let vm_after = vms.get("vm-w").await.expect("vm");
    assert_eq!(
        vm_after.metadata.resource_version,
        vm_before.metadata.resource_version
    );
    assert_eq!(vm_after.spec.run_strategy.as_deref(), Some("Always"));
    let vmi_after = vmis.get("vm-w").await.expect("vmi");
    assert_eq!(vmi_after.metadata.uid, vmi_before.metadata.uid);

    cancel.cancel();
    let _ = run.await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn from_a_file_and_for_the_formula_no_cluster_needed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("vm.yaml");
    std::fs::write(&file, serde_yaml::to_string(&vm()).expect("yaml")).expect("write");
    let file = file.to_str().expect("path");
    let out = bin()
        .args([
            "inspect",
            "-f",
            file,
            "--set",
            "spec.runStrategy=Halted",
            "-o",
            "json",
        ])
        .output()
        .await
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(json["name"], "vm-w");
    assert_eq!(json["changedFields"][0]["path"], "spec.runStrategy");
    assert_eq!(json["changedFields"][0]["after"], "Halted");

    let out = bin()
        .args([
            "explain-overhead",
            "-f",
            file,
            "--set",
            "spec.template.spec.domain.devices.autoattachGraphicsDevice=false",
            "-o",
            "json",
        ])
        .output()
        .await
        .expect("run");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).expect("json");
    let terms = json[0]["terms"].as_array().expect("terms");
    let video = terms
        .iter()
        .find(|t| t["name"] == "videoRam")
        .expect("videoRam");
    assert_eq!(video["beforeBytes"], 32 * 1024 * 1024);
    assert_eq!(video["afterBytes"], 0);
    assert_eq!(
        json[0]["after"]["overhead"]["totalBytes"].as_i64().unwrap()
            - json[0]["before"]["overhead"]["totalBytes"]
                .as_i64()
                .unwrap(),
        -32 * 1024 * 1024
    );
    let out = bin()
        .args([
            "explain-overhead",
            "-f",
            file,
            "--set",
            "spec.runStrategy=Halted",
        ])
        .output()
        .await
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("(what-if)") && text.contains("BEFORE"),
        "{text}"
    );
    let out = bin()
        .args(["inspect", "-f", file])
        .output()
        .await
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
}
