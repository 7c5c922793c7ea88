//! The binary's top-level behaviour: help, version, usage errors.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
}

#[test]
fn help_lists_every_subcommand() {
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in [
        "run-controller",
        "inspect",
        "explain-overhead",
        "cluster",
        "demo",
    ] {
        assert!(text.contains(sub), "--help lacks {sub}:\n{text}");
    }
}

/// `demo` draws a terminal UI: without a terminal it says so (exit 1) and starts nothing.
#[test]
fn demo_needs_a_terminal() {
    let out = bin().arg("demo").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("demo draws a terminal UI"), "{err}");
}

/// `inspect` refuses what is not a VM with a usage error (exit 2), before touching any cluster.
#[test]
fn inspect_refuses_a_non_vm_target_with_usage() {
    let out = bin().args(["inspect", "pod/foo"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("use vm/NAME"));
    let out = bin().args(["inspect", "foo"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("TYPE/NAME"));
}

#[test]
fn bad_flags_are_rejected_with_usage() {
    let out = bin()
        .args(["run-controller", "--vm-workers", "0", "--embedded"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--vm-workers"));
    let out = bin()
        .args(["run-controller", "--worker-threads", "0", "--embedded"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--worker-threads must be at least 1"));
    let out = bin()
        .args([
            "run-controller",
            "--leader-elect-lease-duration",
            "1",
            "--embedded",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("leader election"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `why --recording` reads the recording before any cluster: one it cannot read is exit 1
/// naming the flag and the path.
#[test]
fn why_names_an_unreadable_recording() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-recording");
    let out = bin()
        .args(["why", "vm/a", "--recording"])
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--recording") && err.contains("no-such-recording"),
        "{err}"
    );
}
