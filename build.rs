//! Build-time facts for `kubectl virtctl-rs version`: the git commit (`VIRTCTL_GIT_COMMIT`, or
//! `git rev-parse`; `unknown` outside a git checkout, e.g. from a release tarball or crates.io)
//! and the Kubernetes API level k8s-openapi was built for (its `DEP_K8S_OPENAPI_*_VERSION`).

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=VIRTCTL_GIT_COMMIT");
    let commit = match std::env::var("VIRTCTL_GIT_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            // Rebuild when HEAD moves: HEAD itself and the branch it points at.
            for path in [
                git(&["rev-parse", "--git-path", "HEAD"]),
                git(&["symbolic-ref", "-q", "HEAD"])
                    .and_then(|r| git(&["rev-parse", "--git-path", &r])),
                git(&["rev-parse", "--git-path", "packed-refs"]),
            ]
            .into_iter()
            .flatten()
            {
                if Path::new(&path).exists() {
                    println!("cargo::rerun-if-changed={path}");
                }
            }
            git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo::rustc-env=VIRTCTL_GIT_COMMIT={commit}");
    // 0x00_MM_NN_00, e.g. 0x00_01_21_00 for v1_33.
    let level = std::env::vars()
        .find(|(k, _)| k.starts_with("DEP_K8S_OPENAPI_") && k.ends_with("_VERSION"))
        .and_then(|(_, v)| v.parse::<u32>().ok())
        .map(|v| format!("{}.{}", (v >> 16) & 0xff, (v >> 8) & 0xff))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo::rustc-env=VIRTCTL_K8S_API_LEVEL={level}");
}
