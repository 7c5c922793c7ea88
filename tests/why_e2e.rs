//! `why vm/NAME` end to end on the embedded cluster: each scenario breaks a running VM with one
//! of the simulated nodes' faults (an OOM kill, a lost node, a crashed guest, a failure before
//! running) or a user's stop and start, then checks that `why` names the cause and its evidence.

use crate::common;

use common::env::{Env, printable};
use std::time::Duration;
use tokio::process::Command;
use virtctl_rs::api::manifest::KubeVirtObject;
use virtctl_rs::api::quantity::human_bytes;
use virtctl_rs::api::{Phase, VirtualMachine};
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::inspect::GatherOptions;
use virtctl_rs::launcher::explain::explain;
use virtctl_rs::sim::nodes::Matcher;
use virtctl_rs::why::model::{Cause, End, Link, WhyReport};

const VM: &str = "demo-vm";

fn example_vm(run_strategy: &str) -> VirtualMachine {
    let mut vm = common::example_vm_with("vm-containerdisk", run_strategy);
    vm.metadata.namespace = Some("default".into());
    vm
}

fn options(env: &Env) -> GatherOptions {
    GatherOptions {
        lease_namespace: env.manager_lease_namespace(),
        lease_name: "virt-controller".into(),
        kubevirt_namespace: env.manager_kubevirt_namespace(),
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

async fn why(env: &Env) -> WhyReport {
    virtctl_rs::why::why_vm(&env.client, &env.namespace, VM, &options(env), &[])
        .await
        .expect("why")
}

/// The end of the run of VMI `uid`.
fn end_of<'a>(r: &'a WhyReport, uid: &str) -> &'a End {
    r.runs
        .iter()
        .find(|run| run.vmi_uid.as_deref() == Some(uid))
        .and_then(|run| run.end.as_ref())
        .unwrap_or_else(|| panic!("no end for VMI {uid}: {r:#?}"))
}

fn evidence(chain: &[Link]) -> String {
    chain
        .iter()
        .flat_map(|l| l.evidence.iter())
        .cloned()
        .collect::<Vec<_>>()
        .join("\n")
}

fn uid_of(vmi: &virtctl_rs::api::VirtualMachineInstance) -> String {
    vmi.metadata.uid.clone().expect("uid")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_killed_launcher_is_named_with_the_formula_and_the_leaderless_gap() {
    let mut env = Env::start().await;
    env.create_vm(&example_vm("Always")).await;
    let (_, vmi) = env.wait_running(VM).await;
    let uid = uid_of(&vmi);
    let pod = env.launcher_pods(&uid).await.remove(0);
    let pod_name = pod.metadata.name.clone().expect("pod name");
    // No controller: the Failed VMI and its pod stay for `why` to read.
    env.stop_manager().await;
    env.nodes()
        .oom_kill_pod(&env.namespace, &pod_name)
        .await
        .expect("OOM kill");
    env.wait_vmi(VM, "Failed", |v| v.phase() == Phase::Failed)
        .await;

    let r = why(&env).await;
    let end = end_of(&r, &uid);
    assert_eq!(end.cause, Cause::OomKilled, "{end:#?}");
    let formula = explain(
        &KubeVirtObject::Vmi(Box::new(vmi.clone())),
        "default",
        &ClusterSettings::default(),
    )
    .expect("formula")
    .overhead
    .total_bytes;
    let expected = format!(
        "its launcher pod {pod_name} was OOM-killed (container compute, exit code 137); \
         the formula's launcher overhead for this VM is {}",
        human_bytes(formula)
    );
    assert!(
        end.sentence.contains(&expected),
        "{}\nwanted: {expected}",
        end.sentence
    );
    let ev = evidence(&end.chain);
    assert!(
        ev.contains(&format!(
            "Pod/{pod_name} container compute terminated: exit code 137, reason OOMKilled"
        )),
        "{ev}"
    );
    assert!(ev.contains("explain-overhead of the VMI"), "{ev}");
    assert!(
        end.chain.iter().any(|l| l
            .claim
            .starts_with("runStrategy Always restarts it, but no controller acts now")),
        "{:#?}",
        end.chain
    );
    assert!(r.leader.contains("has no holder"), "{}", r.leader);

    // The CLI prints the same sentence.
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
        .arg("--kubeconfig")
        .arg(env.kubeconfig_path())
        .args(["why", "vm/demo-vm", "-n", "default", "--lease-namespace"])
        .arg(env.manager_lease_namespace())
        .output()
        .await
        .expect("run why");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&expected), "{stdout}");

    // Once a controller leads again the VM restarts; the deleted VMI's OOM kill is gone with
    // its pod, and `why` says what survives: virt-handler's crash report.
    env.start_manager_again().await;
    let second = env
        .wait_vmi(VM, "a new VMI Running", |v| {
            v.metadata.uid.as_deref() != Some(uid.as_str()) && v.phase() == Phase::Running
        })
        .await;
    env.wait_pods_gone(&uid).await;
    let r = why(&env).await;
    let end = end_of(&r, &uid);
    assert_eq!(end.cause, Cause::GuestCrashed, "{end:#?}");
    assert!(
        end.sentence.starts_with("the VM restarted because"),
        "{}",
        end.sentence
    );
    assert!(
        end.chain.iter().any(|l| l.claim.contains(&uid_of(&second))),
        "{:#?}",
        end.chain
    );
    assert!(
        r.unknown
            .iter()
            .any(|u| u.contains("VMIs that were deleted")),
        "{:?}",
        r.unknown
    );
    assert!(
        end.unknown
            .iter()
            .any(|u| u
                .contains("virt-handler reports an OOM-killed or failed launcher as a crash too")),
        "{:?}",
        end.unknown
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_is_named() {
    let env = Env::start().await;
    env.create_vm(&example_vm("Once")).await;
    let (_, vmi) = env.wait_running(VM).await;
    let uid = uid_of(&vmi);
    let node = vmi
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("node");
    env.nodes().remove_node(&node).await.expect("remove node");
    env.wait_vmi(VM, "Failed", |v| v.phase() == Phase::Failed)
        .await;
    env.wait_pods_gone(&uid).await;

    let r = why(&env).await;
    let end = end_of(&r, &uid);
    assert_eq!(end.cause, Cause::NodeLost, "{end:#?}");
    assert!(evidence(&end.chain).contains(&format!("GET Node/{node}: not found")));
    assert!(
        end.sentence
            .starts_with("the VM stopped because its node was lost"),
        "{}",
        end.sentence
    );
    assert!(
        end.chain
            .iter()
            .any(|l| l.claim == "runStrategy Once does not start a new VMI after this end"),
        "{:#?}",
        end.chain
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_virt_handler_reports_is_named() {
    let env = Env::start().await;
    env.create_vm(&example_vm("Once")).await;
    let (_, vmi) = env.wait_running(VM).await;
    let uid = uid_of(&vmi);
    env.nodes()
        .crash_guest(&env.namespace, VM)
        .await
        .expect("crash");
    env.wait_vm(VM, "Stopped", |vm| printable(vm) == "Stopped")
        .await;

    let r = why(&env).await;
    let end = end_of(&r, &uid);
    assert_eq!(end.cause, Cause::GuestCrashed, "{end:#?}");
    let ev = evidence(&end.chain);
    assert!(
        ev.contains("Stopped \"The VirtualMachineInstance crashed.\""),
        "{ev}"
    );
    assert!(ev.contains("terminated: exit code 1, reason Error"), "{ev}");
    assert!(
        end.sentence
            .starts_with("the VM stopped because virt-handler reported the guest crashed"),
        "{}",
        end.sentence
    );
    assert!(
        end.defects.is_empty(),
        "the launcher ended too: {:?}",
        end.defects
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_stop_then_start_is_named() {
    let env = Env::start().await;
    env.create_vm(&example_vm("Always")).await;
    let (_, first) = env.wait_running(VM).await;
    let first_uid = uid_of(&first);
    env.merge_patch_vm(VM, serde_json::json!({"spec": {"runStrategy": "Halted"}}))
        .await;
    env.wait_for("the VMI gone", || async {
        env.vmi(VM).await.is_none().then_some(())
    })
    .await;
    env.merge_patch_vm(VM, serde_json::json!({"spec": {"runStrategy": "Always"}}))
        .await;
    let second = env
        .wait_vmi(VM, "a new VMI Running", |v| {
            v.metadata.uid.as_deref() != Some(first_uid.as_str()) && v.phase() == Phase::Running
        })
        .await;

    let r = why(&env).await;
    let end = end_of(&r, &first_uid);
    assert_eq!(end.cause, Cause::StopRequested, "{end:#?}");
    assert!(
        evidence(&end.chain).contains(&format!(
            "Stopped the virtual machine by deleting the virtual machine instance {first_uid}"
        )),
        "{:#?}",
        end.chain
    );
    assert!(
        end.sentence
            .starts_with("the VM stopped because it was asked to stop")
            && end.sentence.contains("then started again"),
        "{}",
        end.sentence
    );
    let last = r.runs.last().expect("runs");
    assert_eq!(last.vmi_uid.as_deref(), Some(uid_of(&second).as_str()));
    assert!(last.end.is_none(), "the new VMI runs: {last:#?}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rerun_on_failure_crash_loop_names_the_start_failure_and_its_backoff() {
    let env = Env::start().await;
    env.nodes().fail_vmis_before_running(Matcher::vmi(VM), 1);
    env.create_vm(&example_vm("RerunOnFailure")).await;
    let vm = env
        .wait_vm(VM, "CrashLoopBackOff", |vm| {
            printable(vm) == "CrashLoopBackOff"
        })
        .await;
    let failed = vm
        .status
        .as_ref()
        .and_then(|s| s.start_failure.as_ref())
        .and_then(|f| f.last_failed_vmi_uid.clone())
        .expect("startFailure.lastFailedVMIUID");

    let r = why(&env).await;
    let end = end_of(&r, &failed);
    assert_eq!(end.cause, Cause::StartFailure, "{end:#?}");
    let ev = evidence(&end.chain);
    assert!(
        ev.contains(&format!(
            "status.startFailure: consecutiveFailCount 1, lastFailedVMIUID {failed}"
        )),
        "{ev}"
    );
    assert!(
        ev.contains("Stopped \"The VirtualMachineInstance crashed.\""),
        "{ev}"
    );
    assert!(
        end.chain.iter().any(|l| l
            .claim
            .starts_with("runStrategy RerunOnFailure restarts it after the start-failure backoff")),
        "{:#?}",
        end.chain
    );
    assert!(
        r.now_chain
            .iter()
            .any(|l| l.claim.starts_with("1 consecutive start failure(s)")),
        "{:#?}",
        r.now_chain
    );
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_handover_during_a_start_is_named() {
    let mut env = Env::start().await;
    // virt-handler holds the new VMI at Scheduled while the controller changes hands.
    env.nodes().set_virt_handler_delay(Duration::from_secs(120));
    env.create_vm(&example_vm("Always")).await;
    let vmi = env
        .wait_vmi(VM, "Scheduled", |v| v.phase() == Phase::Scheduled)
        .await;
    // A crashed controller: its Lease expires, then another instance takes it over.
    env.kill_manager().await;
    env.start_manager_as("virt-controller-2", "ctrl-e2e-2")
        .await;
    env.nodes().set_virt_handler_delay(Duration::ZERO);
    env.wait_running(VM).await;

    let r = why(&env).await;
    let run = r.runs.last().expect("a run");
    assert_eq!(run.vmi_uid.as_deref(), Some(uid_of(&vmi).as_str()));
    let link = r
        .now_chain
        .iter()
        .find(|l| {
            l.claim
                .starts_with("the controller Lease changed hands meanwhile: ctrl-e2e-2 acquired it")
        })
        .unwrap_or_else(|| panic!("{:#?}", r.now_chain));
    assert!(link.evidence[0].contains("leaseTransitions 1"), "{link:?}");
    assert!(r.leader.contains("held by ctrl-e2e-2"), "{}", r.leader);
    env.shutdown().await;
}
