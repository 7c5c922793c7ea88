//! `start`, `stop` and `restart` end to end: the built binary against a cluster with our
//! controller leading, on the embedded cluster and on the real kube-apiserver. Neither serves
//! `subresources.kubevirt.io/v1`, so the binary makes virt-api's writes itself (the
//! subresource route is tested against a stand-in virt-api in src/lifecycle/request_tests.rs).
//! Each run sends `--user-agent` [`AGENT`], so the audit log tells its writes apart.

use crate::cli_on_both_servers::{run, running_demo_vm};
use crate::common;

use common::env::{Env, Server, printable};
use kube::ResourceExt;
use serde_json::{Value, json};
use virtctl_rs::api::Phase;
use virtctl_rs::sim::faults::{FaultRule, Verb};

const AGENT: &str = "lifecycle-e2e";

/// `ARGS -n NS --user-agent AGENT` through the binary: (exit code, stdout, stderr).
async fn lifecycle(env: &Env, args: &[&str]) -> (Option<i32>, String, String) {
    let mut all = args.to_vec();
    all.extend(["-n", env.namespace.as_str(), "--user-agent", AGENT]);
    run(env, &all).await
}

/// [`lifecycle`], which must exit 0; its stdout.
async fn accepted(env: &Env, args: &[&str]) -> String {
    let (code, stdout, stderr) = lifecycle(env, args).await;
    assert_eq!(code, Some(0), "{args:?}: {stderr}\n{stdout}");
    stdout
}

/// The binary's writes, in the order the server answered them: (resource, subresource).
fn writes(env: &Env) -> Vec<(String, String)> {
    env.audit()
        .into_iter()
        .filter(|e| e.user_agent == AGENT && e.is_write())
        .map(|e| (e.resource, e.subresource))
        .collect()
}

fn uid(vmi: &virtctl_rs::api::VirtualMachineInstance) -> String {
    vmi.uid().unwrap_or_default()
}

async fn start_restart_stop_move_the_vm(server: Server) {
    let env = Env::start_on(server).await;
    env.create_vm(&common::example_vm_with("vm-containerdisk", "Halted"))
        .await;
    env.wait_vm("demo-vm", "Stopped", |vm| printable(vm) == "Stopped")
        .await;

    let out = accepted(&env, &["start", "vm/demo-vm"]).await;
    for line in [
        "VM demo-vm was scheduled to start",
        "via direct writes, as virt-api's StartVMRequestHandler makes them",
        "PATCH virtualmachines/demo-vm: VM spec.runStrategy Halted -> Always",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    let (vm, first) = env.wait_running("demo-vm").await;
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));

    let out = accepted(&env, &["restart", "virtualmachine/demo-vm"]).await;
    assert!(
        out.contains("PATCH virtualmachines/demo-vm/status: VM status.stateChangeRequests"),
        "{out}"
    );
    let second = env
        .wait_for("a new VMI of demo-vm Running", || async {
            let vmi = env.vmi("demo-vm").await?;
            (uid(&vmi) != uid(&first) && vmi.phase() == Phase::Running).then_some(vmi)
        })
        .await;
    env.wait_running("demo-vm").await;

    let out = accepted(&env, &["stop", "demo-vm"]).await;
    assert!(
        out.contains("VM spec.runStrategy Always -> Halted"),
        "{out}"
    );
    env.wait_vmi_gone("demo-vm").await;
    let vm = env
        .wait_vm("demo-vm", "Stopped", |vm| printable(vm) == "Stopped")
        .await;
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Halted"));
    assert_ne!(uid(&first), uid(&second));
    assert_eq!(
        writes(&env),
        [
            ("virtualmachines".to_string(), String::new()),
            ("virtualmachines".to_string(), "status".to_string()),
            ("virtualmachines".to_string(), String::new()),
        ]
    );
    env.shutdown().await;
}

async fn refusals_print_kubevirts_message_and_write_nothing(server: Server) {
    let env = Env::start_on(server).await;
    running_demo_vm(&env).await;
    let ns = env.namespace.clone();
    let refused = |args: &'static [&'static str], code: i32, message: String| {
        let env = &env;
        async move {
            let (got, stdout, stderr) = lifecycle(env, args).await;
            assert_eq!(got, Some(code), "{args:?}: {stderr}\n{stdout}");
            assert!(
                stderr.contains(&message),
                "{args:?}: no {message:?} in {stderr}"
            );
        }
    };
    refused(
        &["start", "vm/demo-vm"],
        1,
        format!(
            "error: starting VirtualMachine {ns}/demo-vm: Operation cannot be fulfilled on \
             virtualmachine.kubevirt.io \"demo-vm\": VM is already running"
        ),
    )
    .await;
    refused(
        &["start", "vm/missing"],
        1,
        "virtualmachine.kubevirt.io \"missing\" not found".into(),
    )
    .await;
    refused(
        &["restart", "vm/demo-vm", "--force", "--grace-period=5"],
        1,
        "force restarting VirtualMachine".to_string()
            + &format!(" {ns}/demo-vm: For force restart, only gracePeriod=0 is supported for now"),
    )
    .await;
    refused(
        &["stop", "vm/demo-vm", "--force"],
        2,
        "Must both use --force=true and set --grace-period.".into(),
    )
    .await;
    refused(
        &["start", "pod/demo-vm"],
        2,
        "resource type \"pod\" is not one".into(),
    )
    .await;

    let out = accepted(&env, &["stop", "vm/demo-vm", "--dry-run"]).await;
    for line in [
        "Dry Run execution",
        "VM demo-vm was scheduled to stop (dry run: nothing written)",
        "VM spec.runStrategy Always -> Halted",
        r#"[{"op":"test","path":"/spec/runStrategy","value":"Always"},{"op":"replace","path":"/spec/runStrategy","value":"Halted"}]"#,
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    assert_eq!(writes(&env), Vec::<(String, String)>::new());
    let vm = env.vm("demo-vm").await.expect("VM");
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));

    env.merge_patch_vm("demo-vm", json!({"spec": {"runStrategy": "Halted"}}))
        .await;
    env.wait_vmi_gone("demo-vm").await;
    refused(
        &["restart", "vm/demo-vm"],
        1,
        "\"demo-vm\": RunStategy Halted does not support manual restart requests".into(),
    )
    .await;
    refused(
        &["stop", "vm/demo-vm"],
        1,
        "\"demo-vm\": VM is not running".into(),
    )
    .await;
    assert_eq!(writes(&env), Vec::<(String, String)>::new());
    env.shutdown().await;
}

async fn force_restart_lowers_the_grace_period_before_the_stop_request(server: Server) {
    let mut env = Env::start_on(server).await;
    running_demo_vm(&env).await;
    let (_, vmi) = env.wait_running("demo-vm").await;
    let before = vmi.spec.termination_grace_period_seconds;
    // Without a controller the VMI stays as the restart request leaves it.
    env.stop_manager().await;

    let out = accepted(
        &env,
        &["restart", "vm/demo-vm", "--force", "--grace-period=0"],
    )
    .await;
    let grace_line = format!(
        "PATCH virtualmachineinstances/demo-vm: VMI spec.terminationGracePeriodSeconds {} -> 1",
        before.map_or("(unset)".to_string(), |g| g.to_string())
    );
    assert!(out.contains(&grace_line), "no {grace_line:?} in:\n{out}");
    let lowered = env.vmi("demo-vm").await.expect("VMI");
    assert_eq!(uid(&lowered), uid(&vmi));
    assert_eq!(lowered.spec.termination_grace_period_seconds, Some(1));
    let vm = env.vm("demo-vm").await.expect("VM");
    let requests: Value = serde_json::to_value(
        vm.status
            .as_ref()
            .and_then(|s| s.state_change_requests.as_ref()),
    )
    .expect("JSON");
    assert_eq!(
        requests,
        json!([{"action": "Stop", "uid": uid(&vmi)}, {"action": "Start"}])
    );
    // The grace period first, then the request (the real server's audit log may lag).
    let order = env
        .wait_for("the binary's two writes in the audit log", || async {
            let w = writes(&env);
            (w.len() >= 2).then_some(w)
        })
        .await;
    assert_eq!(
        order,
        [
            ("virtualmachineinstances".to_string(), String::new()),
            ("virtualmachines".to_string(), "status".to_string()),
        ]
    );

    env.start_manager_again().await;
    env.wait_for("a new VMI of demo-vm Running", || async {
        let new = env.vmi("demo-vm").await?;
        (uid(&new) != uid(&vmi) && new.phase() == Phase::Running).then_some(())
    })
    .await;
    env.shutdown().await;
}

on_both_servers!(
    start_restart_stop_move_the_vm,
    refusals_print_kubevirts_message_and_write_nothing,
    force_restart_lowers_the_grace_period_before_the_stop_request,
);

/// A VM that changes between read and write (here: the API server's 409 on the binary's
/// patch) is read again and the request retried, a bounded number of times, then reported as
/// a conflict. API-server faults exist on the embedded server only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_are_retried_on_a_fresh_read_then_reported() {
    let env = Env::start_on(Server::Embedded).await;
    running_demo_vm(&env).await;
    let faults = env.cluster().api().faults();
    let conflict = || {
        FaultRule::conflict()
            .verbs(&[Verb::Patch])
            .resource("virtualmachines")
            .user_agent(AGENT)
    };
    faults.add(conflict().times(2));
    let out = accepted(&env, &["stop", "vm/demo-vm"]).await;
    assert!(
        out.contains("the VM changed between read and write; accepted on attempt 3 of 5"),
        "{out}"
    );
    env.wait_vmi_gone("demo-vm").await;

    env.merge_patch_vm("demo-vm", json!({"spec": {"runStrategy": "Always"}}))
        .await;
    env.wait_running("demo-vm").await;
    faults.add(conflict().times(5));
    let (code, stdout, stderr) = lifecycle(&env, &["stop", "vm/demo-vm"]).await;
    assert_eq!(code, Some(1), "{stderr}\n{stdout}");
    assert!(
        stderr.contains(&format!(
            "stopping VirtualMachine {}/demo-vm: conflict: the VM changed between read and write on each of 5 attempts",
            env.namespace
        )),
        "{stderr}"
    );
    let vm = env.vm("demo-vm").await.expect("VM");
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));
    env.shutdown().await;
}
