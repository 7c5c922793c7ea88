//! The flight recorder and `replay` end to end on the embedded cluster: a controller that
//! records while a fifth of its writes fail and a launcher pod is OOM-killed, and a replay of
//! that recording that decides at every reconcile what the controller decided.

use crate::common;

use common::env::{CONTROLLER_AGENT, Env, EnvConfig};
use virtctl_rs::api::{Phase, VirtualMachine};
use virtctl_rs::flight::{Body, FlightRecorder, read_recording};
use virtctl_rs::replay::{Verdict, replay};
use virtctl_rs::sim::FaultRule;
use virtctl_rs::sim::faults::Verb;

const VMS: usize = 6;

fn vm(i: usize) -> VirtualMachine {
    let mut vm = common::example_vm_with("vm-containerdisk", "Always");
    vm.metadata.name = Some(format!("replay-{i}"));
    vm.metadata.namespace = Some("default".into());
    vm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recorded_run_with_faults_replays_to_the_decisions_the_controller_took() {
    let dir = tempfile::tempdir().expect("tempdir");
    let recorder = FlightRecorder::open(dir.path(), 64 << 20, "e2e").expect("recorder");
    let config = EnvConfig {
        record: Some(recorder.clone()),
        ..EnvConfig::new("replay-e2e")
    };
    let mut env = Env::start_with(config, |cluster| {
        cluster.api().faults().add(
            FaultRule::error(500)
                .verbs(&[Verb::Create, Verb::Update, Verb::Patch])
                .user_agent(CONTROLLER_AGENT)
                .probability(0.2),
        );
    })
    .await;
    for i in 0..VMS {
        env.create_vm(&vm(i)).await;
    }
    for i in 0..VMS {
        env.wait_running(&format!("replay-{i}")).await;
    }
    // One launcher OOM-killed: the VMI fails and the VM controller replaces it.
    let (_, vmi) = env.wait_running("replay-0").await;
    let old = vmi.metadata.uid.clone().expect("uid");
    let pod = env.launcher_pods(&old).await.remove(0);
    env.nodes()
        .oom_kill_pod(
            &env.namespace,
            pod.metadata.name.as_deref().expect("pod name"),
        )
        .await
        .expect("OOM kill");
    env.wait_vmi("replay-0", "a new Running VMI", |v| {
        v.metadata.uid.as_deref() != Some(old.as_str()) && v.phase() == Phase::Running
    })
    .await;
    env.stop_manager().await;
    recorder.flush();

    let lines = read_recording(dir.path()).expect("read the recording");
    let failed_writes = lines
        .iter()
        .filter(|l| matches!(&l.body, Body::Write(w) if w.error.is_some()))
        .count();
    assert!(failed_writes > 0, "the faults failed no recorded write");
    let report = replay(&lines);
    let bad: Vec<String> = report
        .vms
        .iter()
        .flat_map(|vm| vm.steps.iter().map(move |s| (vm, s)))
        .filter(|(_, s)| s.verdict != Verdict::Same)
        .map(|(vm, s)| format!("{} {s:?}", vm.key))
        .collect();
    assert!(
        bad.is_empty(),
        "{} of {}:\n{}",
        bad.len(),
        report.reconciles,
        bad.join("\n")
    );
    assert!(
        report.reconciles > 10 * VMS,
        "{} reconciles",
        report.reconciles
    );
    assert_eq!(report.vms.len(), VMS);
    // The failed writes are in the steps that made them; the OOM kill is in the Events.
    let steps = report.vms.iter().flat_map(|v| v.steps.iter());
    let failed = steps
        .flat_map(|s| s.writes.iter())
        .filter(|w| w.contains("(failed: "));
    assert_eq!(failed.count(), failed_writes);
    let text = virtctl_rs::replay::render_text(&report);
    assert!(
        text.contains("started-leading") && text.contains("stopped-leading"),
        "{text}"
    );
    assert!(
        report
            .timeline
            .iter()
            .any(|t| t.contains("Event SuccessfulDelete")),
        "{:#?}",
        report.timeline
    );
}
