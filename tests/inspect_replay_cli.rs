//! `inspect --replay DIR vm/NAME` through the built binary, on a small recording written here:
//! every recorded reconcile of the VM shown with its inputs, its decision and whether the
//! replay agrees (`--once`, the path taken when stdout is not a terminal), the steps as JSON,
//! and a VM the recording does not hold.

use chrono::Utc;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use virtctl_rs::flight::{
    Body, Decided, FORMAT, Input, Line, ObjectId, Reconcile, Version, WatchOp,
};

fn vm_id() -> ObjectId {
    ObjectId {
        kind: "VirtualMachine".into(),
        key: "ns/a".into(),
    }
}

/// A Halted VM that already has its finalizer and annotations.
fn halted_vm() -> Value {
    json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "a", "namespace": "ns", "uid": "vm-uid", "resourceVersion": "1",
            "generation": 1, "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"}},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {
            "memory": {"guest": "128Mi"}, "devices": {}}}}}})
}

fn reconcile(seq: u64, decided: &[&str]) -> Line {
    line(
        seq,
        Body::Reconcile(Box::new(Reconcile {
            controller: "vm".into(),
            key: "ns/a".into(),
            now: Utc::now(),
            inputs: vec![Input {
                id: vm_id(),
                rv: "1".into(),
            }],
            expectations: Vec::new(),
            decided: decided
                .iter()
                .map(|a| Decided {
                    action: a.to_string(),
                    why: String::new(),
                })
                .collect(),
            sync_failed: false,
            skipped: None,
            applied: Vec::new(),
            error: None,
        })),
    )
}

fn line(seq: u64, body: Body) -> Line {
    Line {
        seq,
        at: Utc::now(),
        body,
    }
}

/// The recording: the VM added, then two reconciles of it, the first recording a VMI creation
/// (which a Halted VM never decides).
fn write_recording(dir: &Path) -> Vec<Line> {
    let lines = vec![
        line(
            1,
            Body::Header {
                format: FORMAT.into(),
                identity: "test".into(),
                segment: 1,
            },
        ),
        line(
            2,
            Body::Watch {
                id: vm_id(),
                op: WatchOp::Add,
                version: Some(Version {
                    rv: "1".into(),
                    from_rv: None,
                    object: Some(halted_vm()),
                    patch: None,
                }),
            },
        ),
        reconcile(3, &["CreateVmi"]),
        reconcile(4, &[]),
    ];
    let text: String = lines
        .iter()
        .map(|l| serde_json::to_string(l).expect("a line") + "\n")
        .collect();
    std::fs::write(dir.join("flight-000001.jsonl"), text).expect("write the recording");
    lines
}

fn inspect(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
        .arg("inspect")
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .expect("run inspect");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn inspect_replay_once_shows_each_recorded_reconcile_of_the_vm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = write_recording(dir.path());
    let report = virtctl_rs::replay::replay(&lines);
    let replayed = report.vms[0].steps[0].replayed.join(", ");
    let path = dir.path().to_str().expect("a path");

    let (code, out, err) = inspect(&["--replay", path, "vm/a", "-n", "ns", "--once"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("Replay VM ns/a"), "{out}");
    for want in [
        "step 1/2",
        "step 2/2",
        "    VirtualMachine ns/a rv 1",
        "    recorded: CreateVmi",
        "    verdict: DIFFERS",
    ] {
        assert!(out.contains(want), "{want:?} not in\n{out}");
    }
    let replayed = if replayed.is_empty() {
        "nothing".to_string()
    } else {
        replayed
    };
    assert!(out.contains(&format!("    replayed: {replayed}")), "{out}");

    let (code, out, err) = inspect(&["--replay", path, "vm/a", "-n", "ns", "-o", "json"]);
    assert_eq!(code, Some(0), "{err}");
    let json: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(json["key"], "ns/a");
    assert_eq!(json["steps"].as_array().map(Vec::len), Some(2), "{json}");
    assert_eq!(json["steps"][0]["verdict"], "differ");

    let (code, out, err) = inspect(&["--replay", path, "vm/b", "-n", "ns", "--once"]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        err.contains("ns/b") && err.contains("it holds ns/a"),
        "{err}"
    );

    let (code, _, err) = inspect(&["--replay", path, "-n", "ns"]);
    assert_eq!(code, Some(2), "{err}");
}

/// `inspect --replay FILE` on an audit log (tests/fixtures/audit-replay.jsonl) steps through the
/// controller's writes of the VM as `replay FILE` compares them (one loader): each write with
/// its verdict, the one no decision of ours makes, and the refused one with the server's
/// error. Before, it refused an audit log ("inspect --replay steps through a flight recording").
#[test]
fn inspect_replay_steps_through_an_audit_log_as_replay_reads_it() {
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit-replay.jsonl");
    let log = log.to_str().expect("a path");
    let lease = ["--lease-namespace", "ns", "--lease-name", "ctl"];
    let mut args = vec!["--replay", log, "vm/a", "-n", "ns", "--once"];
    args.extend(lease);
    let (code, out, err) = inspect(&args);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.starts_with("Replay VM ns/a"), "{out}");
    for want in [
        "step 4/4",
        "    write: the controller's, audit log line 3",
        "    recorded: update VirtualMachine ns/a (main)",
        "    recorded: create ControllerRevision ns/revision-start-vm-vm-uid-1 (main)",
        "  we-would-not-write: no decision of ours makes this write",
        "    update VirtualMachine ns/a → failed: 500 InternalError: Internal error occurred: injected fault",
    ] {
        assert!(out.contains(want), "{want:?} not in\n{out}");
    }

    let mut args = vec!["--replay", log, "vm/a", "-n", "ns", "-o", "json"];
    args.extend(lease);
    let (code, out, err) = inspect(&args);
    assert_eq!(code, Some(0), "{err}");
    let steps: Value = serde_json::from_str(&out).expect("JSON");
    let verdicts: Vec<&str> = steps["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| s["verdict"].as_str())
        .collect();
    assert_eq!(verdicts, ["same", "same", "differ", "same"], "{steps:#}");

    // `replay` reads the same file the same way.
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
        .args(["replay", log, "--lease", "ns/ctl", "-o", "json"])
        .output()
        .expect("run replay");
    assert_eq!(out.status.code(), Some(3), "a write differs");
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let writes = report["vms"][0]["writes"].as_array().expect("writes");
    let refused = report["refusedWrites"].as_array().expect("refusedWrites");
    assert_eq!((writes.len(), refused.len()), (3, 1), "{report:#}");
    assert_eq!(refused[0]["decidedFromError"], true, "{report:#}");
}
