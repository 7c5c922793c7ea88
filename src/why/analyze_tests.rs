//! Unit tests of `why`'s pure analysis, on hand-built reads.

use super::analyze::analyze;
use super::gather::WhyGathered;
use super::model::{Cause, End, WhyReport};
use chrono::{DateTime, TimeZone, Utc};
use serde_json::{Value, json};
use std::collections::BTreeMap;

const NOW: i64 = 1_800_000_000;

fn at(secs: i64) -> String {
    Utc.timestamp_opt(NOW + secs, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn now() -> DateTime<Utc> {
    Utc.timestamp_opt(NOW, 0).unwrap()
}

fn vm(run_strategy: &str, status: Value) -> crate::api::VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "vm-a", "namespace": "demo", "uid": "vm-uid"},
        "spec": {"runStrategy": run_strategy, "template": {"spec": {
            "domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}}}},
        "status": status
    }))
    .expect("vm")
}

fn vmi(uid: &str, phases: &[(&str, i64)], node: &str) -> crate::api::VirtualMachineInstance {
    let ts: Vec<Value> = phases
        .iter()
        .map(|(p, s)| json!({"phase": p, "phaseTransitionTimestamp": at(*s)}))
        .collect();
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm-a", "namespace": "demo", "uid": uid,
            "creationTimestamp": at(phases.first().map_or(-100, |p| p.1))},
        "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}},
        "status": {"phase": phases.last().map_or("", |p| p.0), "nodeName": node,
            "phaseTransitionTimestamps": ts}
    }))
    .expect("vmi")
}

fn pod(vmi_uid: &str, name: &str, node: &str, status: Value) -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "demo",
            "labels": {"kubevirt.io/created-by": vmi_uid, "vm.kubevirt.io/name": "vm-a"},
            "annotations": {"kubevirt.io/memory-overhead-bytes": "250000000"}},
        "spec": {"nodeName": node, "containers": [{"name": "compute", "image": "x",
            "resources": {"requests": {"memory": "1300Mi"}, "limits": {"memory": "1300Mi"}}}]},
        "status": status
    }))
    .expect("pod")
}

fn terminated(reason: &str, code: i32, finished: i64) -> Value {
    json!({"phase": "Failed", "containerStatuses": [{"name": "compute", "image": "x", "imageID": "",
        "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": code, "reason": reason, "finishedAt": at(finished)}}}]})
}

fn event(
    kind: &str,
    uid: &str,
    type_: &str,
    reason: &str,
    message: &str,
    t: i64,
) -> k8s_openapi::api::core::v1::Event {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("e{t}{reason}"), "namespace": "demo"},
        "involvedObject": {"kind": kind, "name": "vm-a", "namespace": "demo", "uid": uid},
        "type": type_, "reason": reason, "message": message,
        "firstTimestamp": at(t), "lastTimestamp": at(t), "count": 1,
        "source": {"component": "virt-handler", "host": "node-1"}
    }))
    .expect("event")
}

fn lease(holder: Option<&str>, renewed: i64) -> k8s_openapi::api::coordination::v1::Lease {
    let renew = Utc
        .timestamp_opt(NOW + renewed, 0)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    serde_json::from_value(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "virt-controller", "namespace": "kubevirt"},
        "spec": {"holderIdentity": holder, "renewTime": renew, "leaseDurationSeconds": 15}
    }))
    .expect("lease")
}

fn ready_node(name: &str, ready: &str) -> k8s_openapi::api::core::v1::Node {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}]}
    }))
    .expect("node")
}

fn gathered(vm: crate::api::VirtualMachine) -> WhyGathered {
    WhyGathered {
        now: now(),
        namespace: "demo".into(),
        name: "vm-a".into(),
        vm,
        lease: Some(lease(Some("ctrl-1"), -2)),
        lease_key: "kubevirt/virt-controller".into(),
        nodes: BTreeMap::from([("node-1".to_string(), Some(ready_node("node-1", "True")))]),
        ..Default::default()
    }
}

fn only_end(r: &WhyReport) -> &End {
    let ends: Vec<&End> = r.runs.iter().filter_map(|x| x.end.as_ref()).collect();
    assert_eq!(ends.len(), 1, "{r:#?}");
    ends[0]
}

const STOPPED: &str = "Stopped the virtual machine by deleting the virtual machine instance ";

#[test]
fn an_oom_killed_launcher_is_the_cause_and_names_the_formula() {
    let mut g = gathered(vm("Always", json!({"printableStatus": "Stopped"})));
    g.vmi = Some(vmi(
        "u1",
        &[("Scheduling", -60), ("Running", -50), ("Failed", -10)],
        "node-1",
    ));
    g.pods = vec![pod(
        "u1",
        "virt-launcher-vm-a-x",
        "node-1",
        terminated("OOMKilled", 137, -11),
    )];
    let r = analyze(&g);
    let end = only_end(&r);
    assert_eq!(end.cause, Cause::OomKilled);
    assert!(end.sentence.starts_with("the VM stopped (and is to restart) because its launcher pod virt-launcher-vm-a-x was OOM-killed (container compute, exit code 137)"), "{}", end.sentence);
    assert!(
        end.sentence
            .contains("the formula's launcher overhead for this VM is"),
        "{}",
        end.sentence
    );
    assert!(
        end.sentence.contains("within a 1300Mi memory limit"),
        "{}",
        end.sentence
    );
    assert!(
        end.sentence.contains("the pod was rendered with"),
        "{}",
        end.sentence
    );
    let evidence = end
        .chain
        .iter()
        .flat_map(|l| l.evidence.iter())
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        evidence.contains("exit code 137, reason OOMKilled"),
        "{evidence}"
    );
    assert!(
        evidence.contains("explain-overhead of the VMI"),
        "{evidence}"
    );
    assert!(
        end.unknown
            .iter()
            .any(|u| u.contains("the memory the pod used")),
        "{:?}",
        end.unknown
    );
    assert!(
        end.chain
            .iter()
            .any(|l| l.claim == "runStrategy Always restarts it"),
        "{:?}",
        end.chain
    );
}

#[test]
fn a_deleted_crashed_vmi_and_its_replacement_come_from_events() {
    let mut g = gathered(vm("Always", json!({"printableStatus": "Running"})));
    g.vmi = Some(vmi(
        "u2",
        &[("Scheduling", -20), ("Running", -15)],
        "node-1",
    ));
    g.events = vec![
        event(
            "VirtualMachineInstance",
            "u1",
            "Normal",
            "SuccessfulCreate",
            "Created virtual machine pod virt-launcher-vm-a-old",
            -100,
        ),
        event(
            "VirtualMachineInstance",
            "u1",
            "Normal",
            "Started",
            "VirtualMachineInstance started.",
            -90,
        ),
        event(
            "VirtualMachineInstance",
            "u1",
            "Warning",
            "Stopped",
            "The VirtualMachineInstance crashed.",
            -30,
        ),
        event(
            "VirtualMachine",
            "vm-uid",
            "Normal",
            "SuccessfulDelete",
            &format!("{STOPPED}u1"),
            -29,
        ),
    ];
    let r = analyze(&g);
    assert_eq!(r.runs.len(), 2, "{r:#?}");
    assert_eq!(r.runs[0].vmi_uid.as_deref(), Some("u1"));
    assert!(!r.runs[0].vmi_exists);
    assert_eq!(r.runs[0].pods, vec!["virt-launcher-vm-a-old".to_string()]);
    assert_eq!(r.runs[0].final_phase.as_deref(), Some("Failed"));
    let end = only_end(&r);
    assert_eq!(end.cause, Cause::GuestCrashed);
    assert!(
        end.sentence
            .starts_with("the VM restarted because virt-handler reported the guest crashed"),
        "{}",
        end.sentence
    );
    assert!(r.runs[1].end.is_none());
    assert!(
        r.unknown
            .iter()
            .any(|u| u.contains("VMIs that were deleted")),
        "{:?}",
        r.unknown
    );
}

#[test]
fn a_deletion_before_any_failure_is_a_stop() {
    let mut g = gathered(vm("Halted", json!({"printableStatus": "Stopped"})));
    g.events = vec![
        event(
            "VirtualMachineInstance",
            "u1",
            "Normal",
            "Started",
            "VirtualMachineInstance started.",
            -90,
        ),
        event(
            "VirtualMachine",
            "vm-uid",
            "Normal",
            "SuccessfulDelete",
            &format!("{STOPPED}u1"),
            -30,
        ),
        event(
            "VirtualMachineInstance",
            "u1",
            "Normal",
            "Stopped",
            "The VirtualMachineInstance was shut down.",
            -29,
        ),
    ];
    let r = analyze(&g);
    let end = only_end(&r);
    assert_eq!(end.cause, Cause::StopRequested, "{end:#?}");
    assert!(
        end.sentence
            .starts_with("the VM stopped because it was asked to stop"),
        "{}",
        end.sentence
    );
}

#[test]
fn a_vanished_node_is_node_lost() {
    let mut g = gathered(vm("Manual", json!({})));
    g.vmi = Some(vmi("u1", &[("Running", -50), ("Failed", -5)], "node-2"));
    g.nodes.insert("node-2".into(), None);
    let r = analyze(&g);
    let end = only_end(&r);
    assert_eq!(end.cause, Cause::NodeLost);
    assert!(
        end.chain[0]
            .evidence
            .iter()
            .any(|e| e == "GET Node/node-2: not found"),
        "{:?}",
        end.chain
    );
    assert!(
        end.sentence.contains("its node was lost"),
        "{}",
        end.sentence
    );
}

#[test]
fn a_failure_before_running_is_a_start_failure_with_its_backoff() {
    let status = json!({"printableStatus": "CrashLoopBackOff", "startFailure": {
        "consecutiveFailCount": 2, "lastFailedVMIUID": "u1", "retryAfterTimestamp": at(40)}});
    let mut g = gathered(vm("RerunOnFailure", status));
    g.events = vec![
        event(
            "VirtualMachineInstance",
            "u1",
            "Warning",
            "Stopped",
            "The VirtualMachineInstance crashed.",
            -20,
        ),
        event(
            "VirtualMachine",
            "vm-uid",
            "Normal",
            "SuccessfulDelete",
            &format!("{STOPPED}u1"),
            -19,
        ),
    ];
    let r = analyze(&g);
    let end = only_end(&r);
    assert_eq!(end.cause, Cause::StartFailure);
    let claims: Vec<&str> = end.chain.iter().map(|l| l.claim.as_str()).collect();
    assert!(
        claims.iter().any(|c| c.contains("a start failure")),
        "{claims:?}"
    );
    assert!(
        claims
            .iter()
            .any(|c| c.contains("after the start-failure backoff") && c.contains("(in 40 s)")),
        "{claims:?}"
    );
    assert!(
        r.now_chain
            .iter()
            .any(|l| l.claim.contains("2 consecutive start failure(s)")),
        "{:?}",
        r.now_chain
    );
}

#[test]
fn an_end_nothing_explains_says_so() {
    let mut g = gathered(vm("Always", json!({})));
    g.events = vec![event(
        "VirtualMachine",
        "vm-uid",
        "Normal",
        "SuccessfulDelete",
        &format!("{STOPPED}u1"),
        -19,
    )];
    g.events[0].involved_object.name = Some("vm-a".into());
    // No VMI events at all: a deletion with nothing before it reads as a stop.
    let r = analyze(&g);
    assert_eq!(only_end(&r).cause, Cause::StopRequested);
    // A start failure named by the VM's status only, with no event: the cause is not known.
    let status = json!({"startFailure": {"consecutiveFailCount": 1, "lastFailedVMIUID": "u9"}});
    let g = gathered(vm("Always", status));
    let r = analyze(&g);
    let end = only_end(&r);
    assert_eq!(end.cause, Cause::StartFailure);
    assert!(
        end.unknown.iter().any(|u| u.contains("what ended VMI u9")),
        "{:?}",
        end.unknown
    );
}

#[test]
fn a_running_vmi_failed_under_a_running_launcher_matches_18763() {
    let mut g = gathered(vm("Manual", json!({})));
    g.vmi = Some(vmi("u1", &[("Running", -50), ("Failed", -5)], "node-1"));
    let running = json!({"phase": "Running", "containerStatuses": [{"name": "compute", "image": "x",
        "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {"startedAt": at(-55)}}}]});
    g.pods = vec![pod("u1", "virt-launcher-vm-a-x", "node-1", running)];
    let r = analyze(&g);
    let end = only_end(&r);
    assert_eq!(end.cause, Cause::GuestCrashed);
    assert_eq!(end.defects.len(), 1, "{end:#?}");
    assert!(end.defects[0].upstream.contains("18763"));
    assert!(end.defects[0].fixed_in.contains("18453"));
    assert!(
        end.sentence.contains("matches the known defect"),
        "{}",
        end.sentence
    );
}

#[test]
fn a_leaderless_gap_is_named() {
    let mut g = gathered(vm("Always", json!({})));
    g.vmi = Some(vmi("u1", &[("Running", -50), ("Failed", -5)], "node-1"));
    g.pods = vec![pod(
        "u1",
        "virt-launcher-vm-a-x",
        "node-1",
        terminated("OOMKilled", 137, -6),
    )];
    g.lease = Some(lease(None, -30));
    let r = analyze(&g);
    assert!(r.leader.contains("has no holder"), "{}", r.leader);
    let end = only_end(&r);
    assert!(
        end.chain
            .iter()
            .any(|l| l.claim.contains("but no controller acts now")),
        "{:?}",
        end.chain
    );
    g.lease = Some(lease(Some("ctrl-1"), -60));
    let r = analyze(&g);
    assert!(r.leader.contains("expired"), "{}", r.leader);
    assert!(
        r.now_chain
            .iter()
            .any(|l| l.claim == "no VM controller acts on this VM now")
    );
}

#[test]
fn a_lease_handover_during_a_run_is_a_link() {
    let mut g = gathered(vm("Always", json!({})));
    g.vmi = Some(vmi(
        "u1",
        &[("Scheduling", -50), ("Running", -40)],
        "node-1",
    ));
    let mut l = lease(Some("ctrl-2"), -1);
    let spec = l.spec.as_mut().expect("spec");
    spec.lease_transitions = Some(1);
    spec.acquire_time = lease(None, -45).spec.and_then(|s| s.renew_time);
    g.lease = Some(l.clone());
    let r = analyze(&g);
    let link = r
        .now_chain
        .iter()
        .find(|l| {
            l.claim
                .starts_with("the controller Lease changed hands meanwhile: ctrl-2 acquired it at")
        })
        .unwrap_or_else(|| panic!("{:#?}", r.now_chain));
    assert!(link.evidence[0].contains("leaseTransitions 1"), "{link:?}");
    // Acquired before the VMI was created: not a handover during this run.
    l.spec.as_mut().expect("spec").acquire_time = lease(None, -60).spec.and_then(|s| s.renew_time);
    g.lease = Some(l);
    let r = analyze(&g);
    assert!(
        !r.now_chain
            .iter()
            .any(|l| l.claim.contains("changed hands")),
        "{:#?}",
        r.now_chain
    );
}

fn recorded(
    seq: u64,
    t: i64,
    kind: &str,
    name: &str,
    uid: &str,
    reason: &str,
    message: &str,
) -> crate::flight::Line {
    crate::flight::Line {
        seq,
        at: now() + chrono::Duration::seconds(t),
        body: crate::flight::Body::Event(crate::flight::EventLine {
            kind: kind.into(),
            namespace: "demo".into(),
            name: name.into(),
            uid: uid.into(),
            event_type: "Normal".into(),
            reason: reason.into(),
            message: message.into(),
        }),
    }
}

/// issue 42 item 2: the cluster's Events of a run two hours ago are gone (one-hour TTL); the
/// flight recording kept the controller's, so that run is traced again: its VMI, its pod, the
/// deletion that ended it. Events the cluster still holds are not doubled, another VM's are
/// left out, and repeats are one Event with their count.
#[test]
fn a_run_whose_events_expired_comes_back_from_a_recording() {
    let mut g = gathered(vm("Always", json!({"printableStatus": "Running"})));
    g.vmi = Some(vmi(
        "u2",
        &[("Scheduling", -20), ("Running", -15)],
        "node-1",
    ));
    let new_pod = "Created virtual machine pod virt-launcher-vm-a-new";
    g.events = vec![event(
        "VirtualMachineInstance",
        "u2",
        "Normal",
        "SuccessfulCreate",
        new_pod,
        -20,
    )];
    let old_pod = "Created virtual machine pod virt-launcher-vm-a-old";
    let stopped = format!("{STOPPED}u1");
    let lines = vec![
        recorded(
            1,
            -7200,
            "VirtualMachineInstance",
            "vm-a",
            "u1",
            "SuccessfulCreate",
            old_pod,
        ),
        recorded(
            2,
            -7100,
            "VirtualMachine",
            "vm-b",
            "vm-b-uid",
            "SuccessfulDelete",
            "other VM",
        ),
        recorded(
            3,
            -7000,
            "VirtualMachine",
            "vm-a",
            "vm-uid",
            "SuccessfulDelete",
            &stopped,
        ),
        recorded(
            4,
            -6990,
            "VirtualMachine",
            "vm-a",
            "vm-uid",
            "SuccessfulDelete",
            &stopped,
        ),
        recorded(
            5,
            -20,
            "VirtualMachineInstance",
            "vm-a",
            "u2",
            "SuccessfulCreate",
            new_pod,
        ),
    ];
    assert_eq!(analyze(&g).runs.len(), 1, "without the recording, one run");

    super::recorded::add_recorded_events(&mut g, &lines);
    let from_recording: Vec<_> = g
        .events
        .iter()
        .filter(|e| {
            e.source.as_ref().and_then(|s| s.component.as_deref())
                == Some(super::recorded::RECORDED_SOURCE)
        })
        .collect();
    assert_eq!(from_recording.len(), 2, "{from_recording:#?}");
    let deleted = from_recording
        .iter()
        .find(|e| e.reason.as_deref() == Some("SuccessfulDelete"));
    assert_eq!(deleted.and_then(|e| e.count), Some(2));
    assert_eq!(g.events.len(), 3);
    let r = analyze(&g);
    assert_eq!(r.runs.len(), 2, "{r:#?}");
    assert_eq!(r.runs[0].vmi_uid.as_deref(), Some("u1"));
    assert_eq!(r.runs[0].pods, vec!["virt-launcher-vm-a-old".to_string()]);
    let end = r.runs[0].end.as_ref().expect("the old run ended");
    let evidence = end.chain.iter().flat_map(|l| l.evidence.iter());
    assert!(
        evidence.clone().any(|e| e.contains("SuccessfulDelete")),
        "{end:#?}"
    );
}

/// `why` reads the cluster's release: a stopped `RerunOnFailure` VM stuck at
/// `WaitingForVolumeBinding` is the PR 18787 defect on v1.9.0 (named with where the release was
/// read), and not on `main`, where the status is right.
#[test]
fn the_rerun_on_failure_defect_is_named_only_on_a_release_that_has_it() {
    use crate::kubevirt_version::KubeVirtVersion;
    let stuck = || {
        gathered(vm(
            "RerunOnFailure",
            json!({"printableStatus": "WaitingForVolumeBinding"}),
        ))
    };
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "virt-launcher-vm-a-x"},
        "spec": {"containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}]}
    }))
    .unwrap();
    let mut g = stuck();
    g.kubevirt_version = crate::why::gather::cluster_version(None, std::slice::from_ref(&pod));
    let r = analyze(&g);
    assert_eq!(r.defects.len(), 1, "{:#?}", r.defects);
    assert!(
        r.defects[0]
            .message
            .contains("KubeVirt v1.9.0, from the launcher image tag of pod virt-launcher-vm-a-x"),
        "{}",
        r.defects[0].message
    );
    let mut g = stuck();
    g.kubevirt_version = crate::why::gather::cluster_version(Some("main"), &[pod]);
    assert_eq!(
        g.kubevirt_version.as_ref().map(|v| v.0),
        Some(KubeVirtVersion::Main)
    );
    assert!(analyze(&g).defects.is_empty(), "main has PR 18787");
}
