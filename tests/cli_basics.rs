//! The binary's top-level behaviour: help, version, and the subcommand that is not built yet.

use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
}

#[test]
fn help_lists_every_subcommand() {
    let out = bin().arg("--help").output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for sub in ["run-controller", "inspect", "explain-overhead", "cluster"] {
        assert!(text.contains(sub), "--help lacks {sub}:\n{text}");
    }
}

/// A subcommand that is not built yet says so plainly and exits non-zero (2), with no fake output.
#[test]
fn inspect_is_not_available_yet() {
    let out = bin().args(["inspect", "vm/foo"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("`inspect` is not available yet"));
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
