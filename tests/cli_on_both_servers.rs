//! The commands a user runs against a cluster, run through the built binary against the
//! embedded cluster and against the real kube-apiserver (tests/common/control_plane.rs), with
//! the simulated nodes on both: `inspect vm/NAME -o json`, `inspect` with what-if,
//! `explain-overhead vm/NAME` and `-A`, two `run-controller` processes failing over on the
//! Lease, one `--identity` twice, `--apply` of every example in docs/examples, and the RBAC of
//! deploy/rbac exercised by impersonating a ServiceAccount (`--as`): on the real server RBAC is
//! enforced, so a missing permission fails these tests.
//!
//! Each scenario is an `async fn NAME(server: Server)`; `on_both_servers!` at the end declares
//! `embedded::NAME` and `real_apiserver::NAME`.

use crate::common;

use std::path::Path;
use std::process::Stdio;

use common::env::{Env, EnvConfig, Server, printable};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The built binary with `args` against the scenario's cluster (its kubeconfig, no
/// `$KUBECONFIG`): (exit code, stdout, stderr).
pub(crate) async fn run(env: &Env, args: &[&str]) -> (Option<i32>, String, String) {
    let out = command(&env.kubeconfig_path(), args)
        .output()
        .await
        .expect("run the binary");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) fn command(kubeconfig: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"));
    cmd.args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// [`run`] with `-o json`, which must exit `code`.
pub(crate) async fn run_json(env: &Env, args: &[&str], code: i32) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (got, stdout, stderr) = run(env, &all).await;
    assert_eq!(got, Some(code), "{all:?}: {stderr}\n{stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{all:?}: not JSON ({e}): {stdout}"))
}

/// demo-vm (docs/examples/vm-containerdisk.yaml) with `runStrategy: Always`, Running.
pub(crate) async fn running_demo_vm(env: &Env) {
    env.create_vm(&common::example_vm_with("vm-containerdisk", "Always"))
        .await;
    env.wait_running("demo-vm").await;
}

async fn inspect_shows_a_running_vm_and_its_overhead_match(server: Server) {
    let env = Env::start_on(server).await;
    running_demo_vm(&env).await;
    let ns = env.namespace.clone();
    let json = env
        .wait_for("inspect to see demo-vm Running and steady", || async {
            // The Env's controller keeps its Lease in the scenario's namespace on the real
            // server, in kubevirt on the embedded one.
            let lease_ns = env.manager_lease_namespace();
            let args = [
                "inspect",
                "vm/demo-vm",
                "-n",
                &ns,
                "--lease-namespace",
                &lease_ns,
            ];
            let json = run_json(&env, &args, 0).await;
            (json["vmi"]["phase"] == "Running"
                && json["vm"]["printableStatus"] == "Running"
                && json["nextDecision"]["actions"] == json!([]))
            .then_some(json)
        })
        .await;
    assert_eq!(
        json["overheadCheck"]["match"], true,
        "{}",
        json["overheadCheck"]
    );
    assert_eq!(json["blockers"], json!([]), "{}", json["blockers"]);
    assert_eq!(json["printableStatusReason"]["computed"], "Running");
    env.shutdown().await;
}

async fn what_if_halted_deletes_the_vmi_and_writes_nothing(server: Server) {
    let env = Env::start_on(server).await;
    running_demo_vm(&env).await;
    let ns = env.namespace.clone();
    let before = env.vm("demo-vm").await.expect("VM");
    let json = run_json(
        &env,
        &[
            "inspect",
            "vm/demo-vm",
            "-n",
            &ns,
            "--set",
            "spec.runStrategy=Halted",
        ],
        0,
    )
    .await;
    let outcome = json["outcome"].as_array().cloned().unwrap_or_default();
    assert!(
        outcome.iter().any(|l| l
            .as_str()
            .is_some_and(|s| s.contains("would delete VMI demo-vm"))),
        "{outcome:?}"
    );
    let after = env.vm("demo-vm").await.expect("VM");
    assert_eq!(
        before.metadata.generation, after.metadata.generation,
        "what-if wrote to the VM"
    );
    assert_eq!(after.spec.run_strategy.as_deref(), Some("Always"));
    env.shutdown().await;
}

async fn explain_overhead_matches_the_pod_and_the_audit_flags_nothing(server: Server) {
    let env = Env::start_on(server).await;
    running_demo_vm(&env).await;
    let ns = env.namespace.clone();
    let explained = run_json(&env, &["explain-overhead", "vm/demo-vm", "-n", &ns], 0).await;
    let first = &explained[0];
    assert_eq!(first["podCheck"]["match"], true, "{first:#}");
    let (code, table, stderr) = run(&env, &["explain-overhead", "vm/demo-vm", "-n", &ns]).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(table.contains(": MATCH"), "{table}");
    // The fleet audit: the controller's own pod is no drift, no OOM risk.
    let (code, audit, stderr) = run(&env, &["explain-overhead", "-n", &ns, "-A"]).await;
    assert_eq!(code, Some(0), "-A flagged something:\n{audit}\n{stderr}");
    env.shutdown().await;
}

/// A `run-controller` process against the scenario's cluster, in its namespace, with its Lease
/// there and short Lease timings.
pub(crate) fn run_controller(env: &Env, identity: &str, extra: &[&str]) -> Child {
    let ns = env.namespace.clone();
    let mut args = vec![
        "run-controller",
        "-n",
        &ns,
        "--lease-namespace",
        &ns,
        "--identity",
        identity,
        "--listen",
        "none",
        "--leader-elect-lease-duration",
        "3",
        "--leader-elect-renew-deadline",
        "2",
        "--leader-elect-retry-period",
        "0.5",
        "--quiet",
    ];
    args.extend_from_slice(extra);
    if env.server().is_real() {
        args.push("--without-virt-api");
    }
    command(&env.kubeconfig_path(), &args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start run-controller")
}

pub(crate) async fn lease_holder(env: &Env) -> Option<String> {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &env.namespace);
    leases
        .get_opt("virt-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// An Env whose own manager leads under a Lease in another namespace's name, so the processes
/// under test compete only with each other: the manager's Lease is `kubevirt-e2e-env`.
pub(crate) async fn env_without_controller(server: Server) -> Env {
    let mut config = EnvConfig::new("env-manager");
    config.lease.lease_name = "kubevirt-e2e-env".into();
    let env = Env::start_on_with(server, config).await;
    // The Env's manager must not act on the scenario's VMs: stop it.
    env.cancel.cancel();
    env
}

async fn two_run_controller_processes_fail_over_on_the_lease(server: Server) {
    let env = env_without_controller(server).await;
    let mut first = run_controller(&env, "proc-a", &[]);
    env.wait_for("proc-a to hold the Lease", || async {
        (lease_holder(&env).await.as_deref() == Some("proc-a")).then_some(())
    })
    .await;
    let mut second = run_controller(&env, "proc-b", &[]);
    running_demo_vm(&env).await;
    // Kill the leader without a release: proc-b takes over after the Lease expires.
    first.kill().await.expect("kill proc-a");
    env.wait_for("proc-b to take the Lease over", || async {
        (lease_holder(&env).await.as_deref() == Some("proc-b")).then_some(())
    })
    .await;
    // The new leader runs VMs: stop demo-vm through it.
    env.merge_patch_vm("demo-vm", json!({"spec": {"runStrategy": "Halted"}}))
        .await;
    env.wait_vm("demo-vm", "Stopped by proc-b", |vm| {
        printable(vm) == "Stopped"
    })
    .await;
    env.wait_vmi_gone("demo-vm").await;
    second.kill().await.expect("kill proc-b");
    env.shutdown().await;
}

async fn one_identity_twice_never_leads_twice(server: Server) {
    let env = env_without_controller(server).await;
    let mut a = run_controller(&env, "twin", &[]);
    let mut b = run_controller(&env, "twin", &[]);
    running_demo_vm(&env).await;
    // Both processes see the VM; exactly one VMI and one launcher pod are created.
    lease_held_and_demo_vm_running(&env).await;
    let vmi = env.vmi("demo-vm").await.expect("VMI");
    let pods = env
        .launcher_pods(vmi.metadata.uid.as_deref().unwrap_or(""))
        .await;
    assert_eq!(pods.len(), 1, "one launcher pod");
    assert_eq!(env.vmi_creations("demo-vm").len(), 1, "one VMI create");
    a.kill().await.expect("kill");
    b.kill().await.expect("kill");
    env.shutdown().await;
}

async fn apply_of_every_example_runs_them_all(server: Server) {
    let env = env_without_controller(server).await;
    env.create_example_priority_class().await;
    let dir = common::repo_path("docs/examples");
    let dir = dir.to_string_lossy().into_owned();
    let child = run_controller(
        &env,
        "apply-examples",
        &[
            "--apply",
            &dir,
            "--exit-when-ready",
            "--ready-timeout-seconds",
            "120",
        ],
    );
    let out = child.wait_with_output().await.expect("run-controller");
    assert!(
        out.status.success(),
        "run-controller --apply docs/examples --exit-when-ready: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["demo-vm", "demo-sata", "demo-priority", "demo-pvc"] {
        let vm = env
            .vm(name)
            .await
            .unwrap_or_else(|| panic!("{name} applied"));
        assert_eq!(printable(&vm), "Running", "{name}");
    }
    env.shutdown().await;
}

/// Without `--kubevirt-version`, `shadow` decides as the release the KubeVirt CR reports
/// (`status.observedKubeVirtVersion`, a patch release by its row), as `explain-overhead` and
/// `why` read it, and its report says so and where it read it; the flag wins over the CR.
async fn the_shadow_decides_as_the_release_the_kubevirt_cr_reports(server: Server) {
    let env = Env::start_on(server).await;
    env.create_kubevirt_cr(json!({})).await;
    let kv_ns = env.manager_kubevirt_namespace();
    env.kubevirts(&kv_ns)
        .patch_status(
            "kubevirt",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"status": {"observedKubeVirtVersion": "v1.8.2"}})),
        )
        .await
        .expect("the KubeVirt CR's status");
    let ns = env.namespace.clone();
    let shadow = [
        "shadow",
        "--for",
        "0s",
        "-n",
        &ns,
        "--kubevirt-namespace",
        &kv_ns,
    ];
    let report = run_json(&env, &shadow, 0).await;
    assert_eq!(
        report["decidedAs"],
        json!({"version": "v1.8.0", "source": "the KubeVirt CR's status.observedKubeVirtVersion"}),
        "{report:#}"
    );
    let (code, text, stderr) = run(&env, &shadow).await;
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        text.contains(
            "decided as KubeVirt v1.8.0, from the KubeVirt CR's status.observedKubeVirtVersion"
        ),
        "{text}"
    );
    let mut flagged = shadow.to_vec();
    flagged.extend(["--kubevirt-version", "main"]);
    let report = run_json(&env, &flagged, 0).await;
    assert_eq!(
        report["decidedAs"],
        json!({"version": "main", "source": "--kubevirt-version"}),
        "{report:#}"
    );
    env.shutdown().await;
}

/// Wait until the Lease has a holder and demo-vm is Running (where the controllers under
/// test are processes, not the Env's manager).
async fn lease_held_and_demo_vm_running(env: &Env) {
    env.wait_for("a Lease holder and demo-vm Running", || async {
        lease_holder(env).await?;
        let vm = env.vm("demo-vm").await?;
        (printable(&vm) == "Running").then_some(())
    })
    .await;
}

on_both_servers!(
    inspect_shows_a_running_vm_and_its_overhead_match,
    what_if_halted_deletes_the_vmi_and_writes_nothing,
    explain_overhead_matches_the_pod_and_the_audit_flags_nothing,
    two_run_controller_processes_fail_over_on_the_lease,
    one_identity_twice_never_leads_twice,
    apply_of_every_example_runs_them_all,
    the_shadow_decides_as_the_release_the_kubevirt_cr_reports,
);
