//! Gathered state → Inspection, for every scenario of issue 10. Fixtures are written as JSON the
//! way the API server returns the objects; "now" is fixed.

use super::*;
use crate::api::common::ObjectVersion;
use crate::controller::context::ReconcileRecord;
use crate::controller::debug_state::{CacheState, CachedObjects};
use crate::controller::vmi::executor::render_pod_with;
use crate::inspect::gather::{ControllerView, Gathered};
use crate::runtime::expectations::{ExpectationEntry, ExpectationsSnapshot};
use crate::runtime::lease::LeaderState;
use crate::runtime::queue::QueueSnapshot;
use k8s_openapi::api::coordination::v1::Lease;
use serde_json::{Value, json};

use crate::inspect::test_support::{at, domain, now, vm_a};

/// [`vm_a`] created two minutes before the tests' now.
fn vm(strategy: &str, volumes: Value, status: Value) -> VirtualMachine {
    let mut vm = vm_a(strategy, volumes, status);
    vm.metadata.creation_timestamp = serde_json::from_value(json!(at(-120))).expect("time");
    vm
}

fn vmi(phase: &str, transitions: &[(&str, i64)], extra_status: Value) -> VirtualMachineInstance {
    let mut status = json!({
        "phase": phase,
        "virtualMachineRevisionName": "revision-start-vm-vm-uid-2",
        "phaseTransitionTimestamps": transitions.iter().map(|(p, t)| json!({
            "phase": p, "phaseTransitionTimestamp": at(*t)
        })).collect::<Vec<_>>(),
    });
    if let (Some(s), Some(e)) = (status.as_object_mut(), extra_status.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": "vm-a", "namespace": "demo", "uid": "vmi-uid", "resourceVersion": "20",
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                "name": "vm-a", "uid": "vm-uid", "controller": true, "blockOwnerDeletion": true}],
            "labels": {"kubevirt.io/vm": "vm-a"},
            "annotations": {
                "kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1",
                "kubevirt.io/vm-generation": "2"
            },
            "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"]
        },
        "spec": {"domain": domain()},
        "status": status
    }))
    .expect("vmi")
}

/// The launcher pod KubeVirt renders for `vmi`, with a status.
fn pod_for(vmi: &VirtualMachineInstance, phase: &str, conditions: Value) -> Pod {
    let mut pod =
        render_pod_with(&ClusterSettings::default(), &Default::default(), vmi).expect("render");
    pod.metadata.name = Some("virt-launcher-vm-a-abcde".into());
    pod.metadata.namespace = Some("demo".into());
    if let (Some(spec), Some(node)) = (
        pod.spec.as_mut(),
        vmi.status.as_ref().and_then(|s| s.node_name.clone()),
    ) {
        spec.node_name = Some(node);
    }
    pod.metadata.uid = Some("pod-uid".into());
    pod.status = Some(
        serde_json::from_value(json!({"phase": phase, "conditions": conditions})).expect("status"),
    );
    pod
}

fn our_lease(renew_offset: i64) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": "virt-controller", "namespace": "kubevirt",
            "annotations": {"virtctl-rs.kubevirt.io/debug-endpoint": "http://127.0.0.1:8182/debug/state"}},
        "spec": {"holderIdentity": "host_1234", "leaseDurationSeconds": 15,
            "renewTime": format!("{}", (now() + chrono::Duration::seconds(renew_offset)).format("%Y-%m-%dT%H:%M:%S%.6fZ")),
            "acquireTime": "2026-12-01T09:00:00.000000Z", "leaseTransitions": 3}
    }))
    .expect("lease")
}

fn kubevirt_lease() -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": "virt-controller", "namespace": "kubevirt"},
        "spec": {"holderIdentity": "virt-controller-7d9f-abcde", "leaseDurationSeconds": 15,
            "renewTime": "2026-12-01T09:59:58.000000Z", "leaseTransitions": 1}
    }))
    .expect("lease")
}

fn entry(key: &str, add: i64, age: f64) -> ExpectationEntry {
    ExpectationEntry {
        key: key.into(),
        add,
        del: 0,
        age_seconds: age,
        fulfilled: add <= 0,
        expired: false,
        satisfied: add <= 0,
        expected_deletions: Vec::new(),
    }
}

fn queue(name: &str, depth: usize) -> QueueSnapshot {
    QueueSnapshot {
        name: name.into(),
        shutting_down: false,
        depth,
        adds_total: 0,
        queued: Vec::new(),
        in_flight: Vec::new(),
        waiting: Vec::new(),
        retries: Vec::new(),
        rate_limiter_wait_seconds: 0.0,
    }
}

/// Our leader's `/debug/state?key=demo/vm-a`, caches holding the given versions.
fn debug_state(
    vm_rv: Option<&str>,
    vmi_rv: Option<&str>,
    vm_vmi: Vec<ExpectationEntry>,
) -> DebugState {
    DebugState {
        generated_at: now(),
        identity: "host_1234".into(),
        leading: true,
        lease: LeaderState {
            identity: "host_1234".into(),
            leading: true,
            holder: Some("host_1234".into()),
            ..Default::default()
        },
        caches: CacheState {
            synced: true,
            ..Default::default()
        },
        queues: BTreeMap::from([
            (VM_QUEUE_NAME.to_string(), Some(queue(VM_QUEUE_NAME, 2))),
            (VMI_QUEUE_NAME.to_string(), Some(queue(VMI_QUEUE_NAME, 0))),
        ]),
        expectations: vec![
            ExpectationsSnapshot {
                name: "vm-vmi".into(),
                entries: vm_vmi,
            },
            ExpectationsSnapshot {
                name: "vmi-pod".into(),
                entries: Vec::new(),
            },
        ],
        reconciles: BTreeMap::from([(
            "vm".to_string(),
            BTreeMap::from([(
                "demo/vm-a".to_string(),
                ReconcileRecord {
                    at: now() - chrono::Duration::seconds(5),
                    duration_seconds: 0.01,
                    result: "ok".into(),
                    error: None,
                    requeue_after_seconds: None,
                    actions: vec![],
                },
            )]),
        )]),
        vmi_endings: BTreeMap::new(),
        key: Some("demo/vm-a".into()),
        cached: Some(CachedObjects {
            vm: vm_rv.map(|rv| ObjectVersion {
                resource_version: Some(rv.into()),
                ..Default::default()
            }),
            vmi: vmi_rv.map(|rv| ObjectVersion {
                resource_version: Some(rv.into()),
                ..Default::default()
            }),
        }),
        settings: None,
    }
}

fn gathered(vm: VirtualMachine) -> Gathered {
    Gathered {
        now: now(),
        namespace: "demo".into(),
        name: "vm-a".into(),
        vm: Some(vm),
        lease_key: "kubevirt/virt-controller".into(),
        ..Default::default()
    }
}

/// The gathered state of a VM without volumes, `status` its status (no VMI, no pods yet).
fn gathered_vm(strategy: &str, status: Value) -> Gathered {
    gathered(vm(strategy, json!([]), status))
}

/// The blocker `is` finds (`what`: which one, for the failure message).
fn blocker<'a>(ins: &'a Inspection, is: impl Fn(&Blocker) -> bool, what: &str) -> &'a Blocker {
    ins.blockers
        .iter()
        .find(|b| is(b))
        .unwrap_or_else(|| panic!("{what}: {:#?}", ins.blockers))
}

fn under_our_controller(mut g: Gathered, state: DebugState) -> Gathered {
    g.lease = Some(our_lease(-2));
    g.controller = ControllerView::DebugState {
        url: "http://127.0.0.1:8182/debug/state?key=demo%2Fvm-a".into(),
        state: Box::new(state),
    };
    g
}

fn running() -> Gathered {
    let vmi = vmi(
        "Running",
        &[
            ("Pending", -10),
            ("Scheduling", -10),
            ("Scheduled", -7),
            ("Running", -6),
        ],
        json!({"nodeName": "node01",
               "activePods": {"pod-uid": "node01"},
               "launcherContainerImageVersion": crate::config::DEFAULT_LAUNCHER_IMAGE,
               "conditions": [{"type": "Ready", "status": "True"}]}),
    );
    let pod = pod_for(
        &vmi,
        "Running",
        json!([{"type": "PodScheduled", "status": "True"},
               {"type": "kubevirt.io/virtual-machine-unpaused", "status": "True",
                "reason": "NotPaused", "message": "the virtual machine is not paused"}]),
    );
    let mut g = gathered_vm(
        "Always",
        json!({"printableStatus": "Running", "observedGeneration": 2, "desiredGeneration": 2,
               "created": true, "ready": true}),
    );
    g.vmi = Some(vmi);
    g.pods = vec![pod];
    g.revisions = vec![
        crate::controller::vm::revision::build_start_revision(g.vm.as_ref().expect("vm"))
            .expect("revision"),
    ];
    under_our_controller(settle(g), debug_state(Some("10"), Some("20"), Vec::new()))
}

/// Write back the statuses the controllers compute until they have nothing left to write (what
/// a running controller does), so the fixture is a steady state, not a hand-written guess.
fn settle(mut g: Gathered) -> Gathered {
    for _ in 0..5 {
        let vm = g.vm.clone().expect("vm");
        let d = decide_next(&g, &vm, &[]);
        let vmi_writes = d
            .vmi
            .as_ref()
            .is_some_and(|v| v.actions().any(|a| a.is_write()));
        if d.vm.actions.is_empty() && !vmi_writes {
            return g;
        }
        if let Some(status) = d.vm.status {
            g.vm.as_mut().expect("vm").status = Some(status);
        }
        if let Some(new) = d.vmi.and_then(|v| v.new_vmi) {
            g.vmi = Some((*new).clone());
        }
    }
    panic!("the fixture does not settle");
}

#[test]
fn a_vm_running_under_our_controller() {
    let ins = analyze(&running());
    let lease = ins.lease.as_ref().expect("lease");
    assert_eq!(lease.holder_kind, HolderKind::VirtctlRs);
    assert!(!lease.stale);
    assert_eq!(lease.renew_age_seconds, Some(2.0));
    assert_eq!(ins.controller.kind, ControllerSourceKind::DebugEndpoint);
    assert!(ins.controller.expectations_exposed);
    assert_eq!(ins.queues.len(), 2);
    assert_eq!(ins.queues[0].name, "virt-controller-vm");
    assert_eq!(ins.queues[0].depth, 2);
    assert_eq!(ins.queues[0].key_state, Some(KeyState::Idle));
    let nd = ins.next_decision.as_ref().expect("decision");
    assert!(
        nd.summary.starts_with("VMI Running: runStrategy Always"),
        "{}",
        nd.summary
    );
    assert!(nd.waiting.is_none());
    // The hand-written status is not byte-for-byte what the controllers compute, so they would
    // rewrite it; nothing else (no VMI or pod created or deleted).
    let kinds: Vec<&str> = nd.actions.iter().map(|a| a.kind.as_str()).collect();
    assert!(
        kinds
            .iter()
            .all(|k| ["UpdateVmStatus", "PatchVmi"].contains(k)),
        "{kinds:?}"
    );
    let p = ins.printable_status_reason.as_ref().expect("printable");
    assert_eq!(p.computed, "Running");
    assert!(p.rule.contains("vm.go:2614-2624"), "{}", p.rule);
    assert_eq!(p.inputs["runStrategy"], "Always");
    assert_eq!(p.inputs["vmi.phase"], "Running");
    let check = ins.overhead_check.as_ref().expect("overhead");
    assert!(check.matches, "{:?}", check.differences);
    assert!(check.pod_request_bytes.is_some() && check.annotation_bytes.is_some());
    // What the Overhead bar draws against: the guest's memory (the request, defaulted into
    // memory.guest) and no limit, rendered or on the pod.
    assert_eq!(check.guest_memory_bytes, Some(128 * 1024 * 1024));
    assert_eq!(
        (check.formula_limit_bytes, check.pod_limit_bytes),
        (None, None)
    );
    assert_eq!(
        check.formula_bytes,
        check.terms.iter().map(|t| t.bytes).sum::<i64>()
    );
    let cpu = check.cpu.as_ref().expect("cpu");
    assert_eq!((cpu.vcpus, cpu.allocation_ratio), (1, 10));
    assert!(cpu.matches);
    assert!(ins.blockers.is_empty(), "{:?}", ins.blockers);
    let timeline = &ins.vmi.as_ref().expect("vmi").phase_transitions;
    let phases: Vec<(&str, f64)> = timeline
        .iter()
        .map(|p| (p.phase.as_str(), p.duration_seconds))
        .collect();
    assert_eq!(
        phases,
        [
            ("Pending", 0.0),
            ("Scheduling", 3.0),
            ("Scheduled", 1.0),
            ("Running", 6.0)
        ]
    );
    let caught = ins.caught_up.as_ref().expect("caught up");
    assert!(caught.generation_observed);
    assert_eq!(caught.vm_cache_current, Some(true));
    assert_eq!(caught.vmi_cache_current, Some(true));
    assert_eq!(ins.last_reconciles.len(), 1);
    assert!(ins.missing.is_empty(), "{:?}", ins.missing);
}

#[test]
fn the_json_has_the_documented_field_names() {
    let json = serde_json::to_value(analyze(&running())).expect("json");
    for pointer in [
        "/lease/holderIdentity",
        "/lease/renewTime",
        "/lease/leaseDurationSeconds",
        "/lease/stale",
        "/queues/0/name",
        "/queues/0/depth",
        "/queues/0/retries",
        "/vmi/phase",
        "/vmi/phaseTransitions/0/phase",
        "/vmi/phaseTransitions/0/timestamp",
        "/vmi/phaseTransitions/0/durationSeconds",
        "/overheadCheck/formulaBytes",
        "/overheadCheck/podRequestBytes",
        "/overheadCheck/annotationBytes",
        "/overheadCheck/match",
        "/overheadCheck/terms/0/name",
        "/nextDecision/summary",
        "/nextDecision/actions",
        "/blockers",
        "/printableStatusReason/rule",
    ] {
        assert!(json.pointer(pointer).is_some(), "no {pointer} in {json:#}");
    }
}

#[test]
fn a_leader_cache_behind_the_server_is_a_disagreement() {
    let mut g = running();
    g.controller = ControllerView::DebugState {
        url: "http://x/debug/state".into(),
        state: Box::new(debug_state(Some("9"), Some("20"), Vec::new())),
    };
    let ins = analyze(&g);
    let d = ins
        .next_decision
        .and_then(|n| n.disagreement)
        .expect("disagreement");
    assert!(
        d.contains("resourceVersion 9 while the server has 10"),
        "{d}"
    );
    assert_eq!(ins.caught_up.and_then(|c| c.vm_cache_current), Some(false));
}

#[test]
fn halted_with_no_vmi_does_nothing_and_is_stopped() {
    let g = under_our_controller(
        gathered_vm("Halted", json!({"printableStatus": "Stopped"})),
        debug_state(Some("10"), None, Vec::new()),
    );
    let ins = analyze(&g);
    let nd = ins.next_decision.as_ref().expect("decision");
    assert_eq!(
        nd.summary,
        "no VMI: runStrategy Halted and no VMI: nothing to do"
    );
    assert_eq!(ins.printable_status_reason.expect("p").computed, "Stopped");
    assert!(ins.vmi.is_none());
    assert!(
        ins.overhead_check.is_some(),
        "the formula still applies to the template"
    );
}

#[test]
fn halted_with_a_running_vmi_would_delete_it() {
    let mut g = running();
    let mut v = g.vm.take().expect("vm");
    v.spec.run_strategy = Some("Halted".into());
    g.vm = Some(v);
    let nd = analyze(&g).next_decision.expect("decision");
    eprintln!("{nd:#?}");
    assert_eq!(nd.summary, "Halted: would delete VMI vm-a");
    assert!(
        nd.actions
            .iter()
            .any(|a| a.kind == "DeleteVmi" && a.why.contains("vm.go"))
    );
}

#[test]
fn crash_loop_backoff_says_when_the_next_start_is() {
    let g = under_our_controller(
        gathered_vm(
            "Always",
            json!({"printableStatus": "CrashLoopBackOff",
                   "startFailure": {"consecutiveFailCount": 3, "retryAfterTimestamp": at(42)}}),
        ),
        debug_state(Some("10"), None, Vec::new()),
    );
    let ins = analyze(&g);
    let nd = ins.next_decision.as_ref().expect("decision");
    assert_eq!(nd.summary, "CrashLoopBackOff: next start in 42 s");
    assert!(nd.actions.iter().any(|a| a.kind == "RequeueAfter"));
    assert_eq!(
        ins.printable_status_reason.as_ref().expect("p").computed,
        "CrashLoopBackOff"
    );
    assert_eq!(
        ins.vm
            .as_ref()
            .and_then(|v| v.start_failure.as_ref())
            .and_then(|f| f.retry_in_seconds),
        Some(42.0)
    );
    let b = &ins.blockers[0];
    assert_eq!((b.reason.as_str(), b.depth), ("CrashLoopBackOff", 0));
    assert!(b.message.contains("3 consecutive"), "{}", b.message);
}

/// `running()` with the key parked in `queue` after `failures` failed reconciles: due in `due`
/// seconds, that queue's shared rate limit reserved `shared` seconds ahead.
fn running_with_key_parked(queue: &str, failures: usize, due: f64, shared: f64) -> Gathered {
    let mut g = running();
    let ControllerView::DebugState { state, .. } = &mut g.controller else {
        panic!("our controller");
    };
    let q = state
        .queues
        .get_mut(queue)
        .and_then(Option::as_mut)
        .expect("queue");
    q.waiting = vec![crate::runtime::queue::WaitingKey {
        key: "demo/vm-a".into(),
        ready_at: now() + chrono::Duration::milliseconds((due * 1000.0) as i64),
        ready_in_seconds: due,
    }];
    q.retries = vec![crate::runtime::queue::KeyRetries {
        key: "demo/vm-a".into(),
        num_requeues: failures,
    }];
    q.rate_limiter_wait_seconds = shared;
    g
}

fn waiting_line(g: &Gathered) -> Option<String> {
    analyze(g).next_decision.and_then(|d| d.waiting)
}

#[test]
fn a_key_parked_behind_the_shared_rate_limit_says_when_and_why() {
    let quiet = analyze(&running());
    let ins = analyze(&running_with_key_parked(VM_QUEUE_NAME, 1, 469.0, 471.0));
    let q = &ins.queues[0];
    assert_eq!(q.key_state, Some(KeyState::Waiting));
    assert_eq!(q.rate_limiter_wait_seconds, Some(471.0));
    let nd = ins.next_decision.as_ref().expect("decision");
    assert_eq!(
        nd.waiting.as_deref(),
        Some(
            "retry after 1 failed reconcile: virt-controller-vm runs this key again in 7 m 49 s; \
             the queue's shared rate limit is reserved 7 m 51 s ahead (10 retries a second after \
             a burst of 100, for all keys); a change to the VM, its VMI or its DataVolumes runs \
             it sooner"
        )
    );
    // The summary is still what the controllers would do.
    assert_eq!(
        nd.summary,
        quiet.next_decision.as_ref().expect("decision").summary
    );

    // Ten failures in a row, the bucket not reserved: the key's own backoff, 5 ms × 2^9.
    assert_eq!(
        waiting_line(&running_with_key_parked(VM_QUEUE_NAME, 10, 2.5, 0.0)).as_deref(),
        Some(
            "retry after 10 failed reconciles: virt-controller-vm runs this key again in 3 s; its \
             own backoff after 10 failed reconciles is 3 s (5 ms doubling per failure); a change \
             to the VM, its VMI or its DataVolumes runs it sooner"
        )
    );
    // The bucket reserved less far ahead than the key waits is not its cause, and one failure's
    // 5 ms backoff is not either: when, without a cause.
    assert_eq!(
        waiting_line(&running_with_key_parked(VM_QUEUE_NAME, 1, 60.0, 3.0)).as_deref(),
        Some(
            "retry after 1 failed reconcile: virt-controller-vm runs this key again in 1 m 0 s; \
             a change to the VM, its VMI or its DataVolumes runs it sooner"
        )
    );
    // The VMI queue is woken by the VMI and its launcher pod.
    let line = waiting_line(&running_with_key_parked(VMI_QUEUE_NAME, 1, 30.0, 31.0))
        .expect("a line for the VMI queue");
    assert!(
        line.starts_with("retry after 1 failed reconcile: virt-controller-vmi runs this key")
            && line.ends_with("; a change to the VMI or its launcher pod runs it sooner"),
        "{line}"
    );
    // An ordinary 5 ms retry is not worth a line.
    assert_eq!(
        waiting_line(&running_with_key_parked(VM_QUEUE_NAME, 1, 0.005, 0.0)),
        None
    );
}

#[test]
fn pending_expectations_make_the_controller_wait() {
    let g = under_our_controller(
        gathered_vm("Always", json!({"printableStatus": "Starting"})),
        debug_state(Some("10"), None, vec![entry("demo/vm-a", 1, 3.0)]),
    );
    let ins = analyze(&g);
    assert_eq!(ins.expectations.len(), 1);
    let e = &ins.expectations[0];
    assert_eq!(
        (e.store.as_str(), e.key.as_str(), e.adds, e.dels),
        ("vm-vmi", "demo/vm-a", 1, 0)
    );
    assert_eq!(e.expires_in_seconds, 297.0);
    assert!(!e.satisfied);
    let nd = ins.next_decision.as_ref().expect("decision");
    assert_eq!(
        nd.summary,
        "waiting: VMI creation expected 3 s ago, expectations expire in 4 m 57 s"
    );
    assert!(
        !nd.actions.iter().any(|a| a.kind == "CreateVmi"),
        "no second VMI while one is expected: {:?}",
        nd.actions
    );
    assert_eq!(
        ins.printable_status_reason.as_ref().expect("p").computed,
        "Starting"
    );
}

#[test]
fn a_pod_memory_request_off_the_formula_is_reported_in_bytes() {
    let mut g = running();
    let pod = &mut g.pods[0];
    let compute = pod
        .spec
        .as_mut()
        .and_then(|s| s.containers.iter_mut().find(|c| c.name == "compute"))
        .expect("compute");
    let requests = compute
        .resources
        .as_mut()
        .and_then(|r| r.requests.as_mut())
        .expect("requests");
    let before = quantity_bytes(&requests["memory"].0).expect("bytes");
    requests.insert(
        "memory".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity((before + 1_048_576).to_string()),
    );
    let check = analyze(&g).overhead_check.expect("overhead");
    assert!(!check.matches);
    assert_eq!(check.pod_request_bytes, Some(before + 1_048_576));
    assert_eq!(check.formula_request_bytes, Some(before));
    assert_eq!(check.differences.len(), 1, "{:?}", check.differences);
    assert!(
        check.differences[0].starts_with("pod compute memory request is 1048576 bytes more"),
        "{}",
        check.differences[0]
    );
}

#[test]
fn a_lease_held_by_kubevirt_reads_its_metrics_and_no_expectations() {
    let mut g = running();
    g.lease = Some(kubevirt_lease());
    g.holder_is_pod = Some(true);
    g.controller = ControllerView::Metrics {
        url: "/api/v1/namespaces/kubevirt/pods/https:virt-controller-7d9f-abcde:8443/proxy/metrics"
            .into(),
        text: "# HELP kubevirt_workqueue_depth Current depth of workqueue\n\
               # TYPE kubevirt_workqueue_depth gauge\n\
               kubevirt_workqueue_depth{name=\"virt-controller-vm\"} 3\n\
               kubevirt_workqueue_depth{name=\"virt-controller-vmi\"} 0\n\
               kubevirt_workqueue_depth{name=\"virt-controller-migration\"} 9\n\
               kubevirt_workqueue_retries_total{name=\"virt-controller-vm\"} 7\n\
               kubevirt_workqueue_adds_total{name=\"virt-controller-vm\"} 12\n\
               kubevirt_workqueue_longest_running_processor_seconds{name=\"virt-controller-vm\"} 0.5\n"
            .into(),
    };
    let ins = analyze(&g);
    assert_eq!(
        ins.lease.as_ref().expect("lease").holder_kind,
        HolderKind::KubeVirt
    );
    assert_eq!(ins.controller.kind, ControllerSourceKind::Metrics);
    assert!(!ins.controller.expectations_exposed);
    assert!(ins.expectations.is_empty());
    assert_eq!(ins.queues.len(), 2, "only the VM and VMI queues");
    let vm_q = &ins.queues[0];
    assert_eq!(
        (
            vm_q.name.as_str(),
            vm_q.depth,
            vm_q.retries,
            vm_q.longest_running_processor_seconds
        ),
        ("virt-controller-vm", 3, 7, Some(0.5))
    );
    assert_eq!(vm_q.adds_total, Some(12));
    assert_eq!(
        ins.queues[1].adds_total, None,
        "the VMI queue's adds are not in the text"
    );
    assert!(vm_q.key_state.is_none());
    assert!(
        ins.missing
            .iter()
            .any(|m| m.what == "expectations"
                && m.reason.starts_with("not exposed by this controller")),
        "{:?}",
        ins.missing
    );
    assert!(ins.caught_up.expect("caught up").vm_cache_current.is_none());
}

#[test]
fn a_stale_lease_is_flagged_with_its_age() {
    let mut g = running();
    g.lease = Some(our_lease(-60));
    let ins = analyze(&g);
    let lease = ins.lease.expect("lease");
    assert!(lease.stale);
    assert_eq!(lease.renew_age_seconds, Some(60.0));
    let m = ins
        .missing
        .iter()
        .find(|m| m.what == "leader")
        .expect("stale Lease reported");
    assert!(
        m.reason
            .starts_with("stale Lease kubevirt/virt-controller: renewed 1 m 0 s ago"),
        "{}",
        m.reason
    );
}

#[test]
fn no_controller_is_a_blocker_whatever_the_objects_say() {
    // A stale Lease: its holder stopped renewing, nobody acts.
    let mut g = running();
    g.lease = Some(our_lease(-60));
    let ins = analyze(&g);
    let b = ins
        .blockers
        .iter()
        .find(|b| b.reason == "ControllerNotRenewing")
        .unwrap_or_else(|| panic!("{:#?}", ins.blockers));
    assert_eq!(b.object, format!("Lease/{}", g.lease_key));
    assert!(
        b.message
            .contains("host_1234 last renewed the Lease 1 m 0 s ago"),
        "{}",
        b.message
    );
    // No Lease at all: no controller has ever run here (a fresh cluster without virt-controller,
    // or a run-controller that was never started).
    let mut g = running();
    g.lease = None;
    g.controller = ControllerView::None;
    g.missing.push(Missing {
        what: "lease".into(),
        reason: format!("Lease {} not found: no controller has run", g.lease_key),
    });
    let ins = analyze(&g);
    assert!(
        ins.blockers
            .iter()
            .any(|b| b.reason == "NoController" && b.depth == 0),
        "{:#?}",
        ins.blockers
    );
    // With a live Lease there is no such blocker.
    assert!(analyze(&running()).blockers.is_empty());
}

fn node(name: &str, memory: &str, kvm: Option<&str>) -> Node {
    let mut alloc = json!({"cpu": "4", "memory": memory});
    if let Some(k) = kvm {
        alloc["devices.kubevirt.io/kvm"] = k.into();
    }
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"allocatable": alloc, "conditions": [{"type": "Ready", "status": "True"}]}
    }))
    .expect("node")
}

#[test]
fn an_unschedulable_pod_names_the_scheduler_message_and_what_no_node_has() {
    let vmi = vmi(
        "Scheduling",
        &[("Pending", -30), ("Scheduling", -30)],
        json!({"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/2 nodes are available: 2 Insufficient memory."}]}),
    );
    let pod = pod_for(
        &vmi,
        "Pending",
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/2 nodes are available: 2 Insufficient memory."}]),
    );
    let mut g = gathered_vm("Always", json!({"printableStatus": "ErrorUnschedulable"}));
    g.vmi = Some(vmi);
    g.pods = vec![pod];
    g.candidate_nodes = vec![
        node("node01", "100Mi", Some("1k")),
        node("node02", "64Mi", None),
    ];
    let g = under_our_controller(g, debug_state(Some("10"), Some("20"), Vec::new()));
    let ins = analyze(&g);
    let reasons: Vec<(&str, &str, u8)> = ins
        .blockers
        .iter()
        .map(|b| (b.object.as_str(), b.reason.as_str(), b.depth))
        .collect();
    assert_eq!(
        reasons,
        [
            ("Node/*", "InsufficientMemory", 4),
            ("Pod/virt-launcher-vm-a-abcde", "Unschedulable", 2)
        ]
    );
    assert!(ins.blockers[1].message.contains("Insufficient memory"));
    assert!(
        ins.blockers[0]
            .message
            .contains("the largest node has 100Mi"),
        "{}",
        ins.blockers[0].message
    );
    assert_eq!(
        ins.printable_status_reason.expect("p").computed,
        "ErrorUnschedulable"
    );
}

#[test]
fn no_node_with_kvm_is_a_blocker() {
    let vmi = vmi("Scheduling", &[("Scheduling", -5)], json!({}));
    let pod = pod_for(
        &vmi,
        "Pending",
        json!([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient devices.kubevirt.io/kvm."}]),
    );
    let mut g = gathered_vm("Always", json!({}));
    g.vmi = Some(vmi);
    g.pods = vec![pod];
    g.candidate_nodes = vec![node("node01", "64Gi", None)];
    let ins = analyze(&g);
    assert_eq!(ins.blockers[0].reason, "NoKvmDevice");
    assert_eq!(ins.blockers[0].depth, 4);
}

/// lifecycle.go:152-154: a DataVolume waiting for its first consumer holds the VM until the
/// temporary pod gets its claim bound; the blocker says so.
/// A VM whose root disk is DataVolume `dv-a` in `phase`, the VM showing `printable`.
fn with_data_volume(phase: &str, printable: &str) -> Gathered {
    let mut g = gathered(vm(
        "Always",
        json!([{"name": "rootdisk", "dataVolume": {"name": "dv-a"}}]),
        json!({"printableStatus": printable}),
    ));
    g.data_volumes = vec![
        serde_json::from_value(json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": "dv-a", "namespace": "demo", "uid": "dv-uid"},
            "spec": {}, "status": {"phase": phase}
        }))
        .expect("dv"),
    ];
    g
}

#[test]
fn a_data_volume_waiting_for_its_first_consumer_is_named() {
    let ins = analyze(&with_data_volume(
        "WaitForFirstConsumer",
        "WaitingForVolumeBinding",
    ));
    let b = blocker(
        &ins,
        |b| b.object == "DataVolume/dv-a",
        "DataVolume blocker",
    );
    assert_eq!((b.reason.as_str(), b.depth), ("WaitForFirstConsumer", 3));
    assert!(b.message.contains("temporary pod"), "{}", b.message);
}

#[test]
fn a_pending_data_volume_blocks_the_start() {
    let ins = analyze(&with_data_volume("ImportInProgress", "Provisioning"));
    let b = blocker(
        &ins,
        |b| b.object == "DataVolume/dv-a",
        "DataVolume blocker",
    );
    assert_eq!((b.reason.as_str(), b.depth), ("DataVolumeNotReady", 3));
    assert!(b.message.contains("ImportInProgress"));
    assert_eq!(ins.volumes[0].phase.as_deref(), Some("ImportInProgress"));
    let p = ins.printable_status_reason.expect("p");
    assert_eq!(p.inputs["dataVolume/dv-a"], "ImportInProgress");
    assert_eq!(p.computed, "Provisioning");
}

#[test]
fn a_missing_priority_class_is_a_blocker() {
    let mut v = vmi("Pending", &[("Pending", -5)], json!({}));
    v.spec.priority_class_name = Some("high".into());
    let mut g = gathered_vm("Always", json!({}));
    g.vmi = Some(v);
    g.priority_class = Some(("high".into(), false));
    let ins = analyze(&g);
    let b = blocker(&ins, |b| b.reason == "PriorityClassNotFound", "blocker");
    assert_eq!(b.object, "PriorityClass/high");
    assert!(b.message.contains("no PriorityClass with name high"));
    assert!(
        ins.next_decision
            .expect("decision")
            .explanation
            .iter()
            .any(|l| l.starts_with("expectations unknown")),
        "no controller view: the decision says so"
    );
}

#[test]
fn events_are_merged_oldest_first() {
    let mut g = running();
    g.events = vec![
        crate::inspect::gather::RawEvent {
            view: crate::inspect::model::EventView {
                time: Some(now()),
                type_: "Normal".into(),
                reason: "Started".into(),
                object: "Pod/p".into(),
                message: "started".into(),
                count: 1,
                api: "events.k8s.io/v1".into(),
            },
            ..Default::default()
        },
        crate::inspect::gather::RawEvent {
            view: crate::inspect::model::EventView {
                time: Some(now() - chrono::Duration::seconds(9)),
                type_: "Normal".into(),
                reason: "SuccessfulCreate".into(),
                object: "VirtualMachine/vm-a".into(),
                message:
                    "Started the virtual machine by creating the new virtual machine instance vm-a"
                        .into(),
                count: 1,
                api: "core/v1".into(),
            },
            ..Default::default()
        },
    ];
    let ins = analyze(&g);
    let reasons: Vec<&str> = ins.events.iter().map(|e| e.reason.as_str()).collect();
    assert_eq!(reasons, ["SuccessfulCreate", "Started"]);
}

#[test]
fn the_text_has_every_section() {
    let text = crate::inspect::text::render_vm(&analyze(&running()));
    for section in [
        "NEXT DECISION",
        "BLOCKERS",
        "PRINTABLE STATUS",
        "LEADER",
        "QUEUES",
        "EXPECTATIONS",
        "PHASE TIMELINE",
        "OVERHEAD CHECK",
        "EVENTS",
    ] {
        assert!(text.contains(section), "no {section} in\n{text}");
    }
    assert!(text.contains("Pending 09:59:50 (0 s) → Scheduling 09:59:50 (3 s) → Scheduled 09:59:53 (1 s) → Running 09:59:54 (6 s)"), "{text}");
    assert!(text.contains("MATCH"));
    assert!(
        text.contains("  last vm reconcile ") && text.contains(": ok; no actions"),
        "{text}"
    );
}

#[test]
fn the_fleet_puts_problems_first() {
    let running_g = running();
    let mut crash = vm(
        "Always",
        json!([]),
        json!({"printableStatus": "CrashLoopBackOff",
               "startFailure": {"consecutiveFailCount": 2, "retryAfterTimestamp": at(10)}}),
    );
    crash.metadata.name = Some("vm-z".into());
    // Its own firmware UUID (a copy keeping vm-a's would be a problem of both).
    crash
        .spec
        .template
        .as_mut()
        .expect("template")
        .spec
        .as_mut()
        .expect("spec")
        .domain
        .firmware = None;
    let mut ok = running_g.vm.clone().expect("vm");
    ok.metadata.name = Some("vm-a".into());
    let single = analyze(&running_g);
    let f = GatheredFleet {
        namespace: Some("demo".into()),
        vms: vec![ok, crash],
        vmis: vec![running_g.vmi.clone().expect("vmi")],
        pods: running_g.pods.clone(),
        settings: ClusterSettings::default(),
        controller: running_g,
        missing: Vec::new(),
    };
    let fleet = analyze_fleet(&f);
    let names: Vec<&str> = fleet.rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["vm-z", "vm-a"]);
    assert_eq!(
        fleet.rows[0].problem.as_deref(),
        Some("printableStatus CrashLoopBackOff")
    );
    assert_eq!(fleet.rows[1].overhead_match, Some(true));
    let check = single.overhead_check.as_ref().expect("overhead check");
    assert_eq!(
        (
            fleet.rows[1].memory_request_bytes,
            fleet.rows[1].memory_limit_bytes
        ),
        (check.pod_request_bytes, check.pod_limit_bytes),
        "the headroom bar's inputs"
    );
    assert!(fleet.rows[1].memory_request_bytes.is_some());
    assert_eq!(fleet.rows[1].vmi_phase.as_deref(), Some("Running"));
    assert_eq!(fleet.rows[1].phase_seconds, Some(6.0));
    assert_eq!(fleet.queues.len(), 2);
    // The Lease is judged on the same clock as for one VM (it once used the epoch: a renew age of
    // minus 56 years, and never stale).
    let lease = fleet.lease.as_ref().expect("lease");
    assert_eq!(
        lease.renew_age_seconds,
        single.lease.as_ref().and_then(|l| l.renew_age_seconds)
    );
    assert!(
        lease
            .renew_age_seconds
            .is_some_and(|a| (0.0..60.0).contains(&a))
    );
    assert_eq!(fleet.generated_at, now());
    let text = crate::inspect::text::render_fleet(&fleet);
    assert!(
        text.lines().nth(1).is_some_and(|l| l.contains("vm-z")),
        "{text}"
    );
}

#[test]
fn human_durations() {
    for (seconds, want) in [
        (3.2, "3 s"),
        (297.0, "4 m 57 s"),
        (3700.0, "1 h 1 m"),
        (-5.0, "0 s"),
    ] {
        assert_eq!(human_duration(seconds), want, "{seconds}");
    }
}

/// `running()` with the VMI started from an earlier template: the start revision is built from
/// the VM as `edit` leaves it, and the VM's status says generation 1 is the one observed.
fn started_from(edit: impl FnOnce(&mut Value)) -> Gathered {
    let mut g = running();
    let vm = g.vm.as_mut().expect("vm");
    let mut earlier = serde_json::to_value(&*vm).expect("vm json");
    edit(&mut earlier);
    let earlier: VirtualMachine = serde_json::from_value(earlier).expect("earlier vm");
    g.revisions =
        vec![crate::controller::vm::revision::build_start_revision(&earlier).expect("revision")];
    vm.status.as_mut().expect("status").observed_generation = Some(1);
    g
}

#[test]
fn a_generation_behind_only_for_the_persisted_firmware_uuid_is_explained_as_such() {
    // The VMI was created from a template without a firmware UUID; the firmware synchronizer
    // then persisted it (generation bump). KubeVirt never bumps the VMI's generation
    // annotation for that (the start revision differs from the template), so the inspector
    // must not say the VMI runs an old spec: it runs with that very UUID.
    let g = started_from(|vm| {
        vm["spec"]["template"]["spec"]["domain"]
            .as_object_mut()
            .expect("domain")
            .remove("firmware");
    });
    let caught = analyze(&g).caught_up.expect("caught up");
    assert!(!caught.generation_observed);
    let paths: Vec<&str> = caught
        .template_changes
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    assert_eq!(paths, ["spec.template.spec.domain.firmware.uuid"]);
    assert!(
        caught
            .summary
            .contains("behind only because the controller persisted the firmware UUID"),
        "{}",
        caught.summary
    );
    assert!(
        !caught.summary.contains("does not reflect"),
        "{}",
        caught.summary
    );
}

#[test]
fn a_generation_behind_for_a_real_template_change_names_the_fields() {
    let g = started_from(|vm| {
        vm["spec"]["template"]["spec"]["domain"]["resources"]["requests"]["memory"] = json!("64Mi");
    });
    let caught = analyze(&g).caught_up.expect("caught up");
    assert!(!caught.generation_observed);
    assert!(
        caught.summary.contains(
            "does not reflect the latest spec: changed since it started: \
             spec.template.spec.domain.resources.requests.memory"
        ),
        "{}",
        caught.summary
    );
    let change = &caught.template_changes[0];
    assert_eq!(change.before, Some(json!("64Mi")));
    assert_eq!(change.after, Some(json!("128Mi")));
}

// ------------------------------------------------------------------------------------------
// The diagnostics of `diagnose.rs`
// ------------------------------------------------------------------------------------------

/// [`running`] with a hand-made copy of its launcher pod (`name`, created `created` seconds from
/// now, phase `phase`) beside the real one, created a minute ago.
fn running_with_pod_copy(name: &str, created: i64, phase: &str) -> Gathered {
    let mut g = running();
    let time = |offset: i64| serde_json::from_value(json!(at(offset))).expect("time");
    g.pods[0].metadata.creation_timestamp = Some(time(-60));
    let mut copy = g.pods[0].clone();
    copy.metadata.name = Some(name.into());
    copy.metadata.uid = Some("copy-uid".into());
    copy.metadata.creation_timestamp = Some(time(created));
    copy.status.as_mut().expect("status").phase = Some(phase.into());
    g.pods.insert(0, copy);
    g
}

#[test]
fn two_live_launcher_pods_of_one_vmi_are_a_blocker_naming_both() {
    let ins = analyze(&running_with_pod_copy(
        "virt-launcher-vm-a-copy",
        -5,
        "Pending",
    ));
    let b = blocker(
        &ins,
        |b| b.reason == "DuplicateLauncherPod",
        "duplicate launcher pod",
    );
    // KubeVirt acts on the newest pod on the VMI's node (the copy); the original is the extra.
    assert_eq!(b.object, "Pod/virt-launcher-vm-a-abcde");
    assert_eq!(b.depth, 2);
    for part in [
        "2 live launcher pods are controlled by VMI vm-a",
        "virt-launcher-vm-a-copy (Pending on node01)",
        "virt-launcher-vm-a-abcde (Running on node01)",
        "acts on virt-launcher-vm-a-copy only",
        "controller.go:323-358",
    ] {
        assert!(b.message.contains(part), "{part:?} not in {}", b.message);
    }
}

#[test]
fn a_finished_or_deleted_second_pod_or_a_migration_target_is_no_duplicate() {
    let finished = analyze(&running_with_pod_copy(
        "virt-launcher-vm-a-old",
        -5,
        "Failed",
    ));
    let mut deleting = running_with_pod_copy("virt-launcher-vm-a-old", -5, "Running");
    deleting.pods[0].metadata.deletion_timestamp =
        serde_json::from_value(json!(at(-1))).expect("time");
    let mut migrating = running_with_pod_copy("virt-launcher-vm-a-target", -5, "Running");
    migrating
        .vmi
        .as_mut()
        .expect("vmi")
        .status
        .as_mut()
        .expect("status")
        .migration_state = Some(Box::new(
        json!({"sourceNode": "node01", "targetNode": "node02"}),
    ));
    for ins in [finished, analyze(&deleting), analyze(&migrating)] {
        assert!(
            !ins.blockers
                .iter()
                .any(|b| b.reason == "DuplicateLauncherPod"),
            "{:#?}",
            ins.blockers
        );
    }
}

/// [`running`] with its VM deleted `ago` seconds before now, still holding `finalizers`, and
/// `managed` as its `metadata.managedFields`.
fn deleted_vm_with(finalizers: &[&str], ago: i64, managed: Value) -> Gathered {
    let mut g = running();
    let vm = g.vm.as_mut().expect("vm");
    vm.metadata.deletion_timestamp = serde_json::from_value(json!(at(-ago))).expect("time");
    vm.metadata.finalizers = Some(finalizers.iter().map(|f| f.to_string()).collect());
    vm.metadata.managed_fields = serde_json::from_value(managed).expect("managedFields");
    g
}

#[test]
fn a_foreign_finalizer_on_a_terminating_vm_names_it_its_manager_and_the_time() {
    let managed = json!([
        {"manager": "kubectl-create", "operation": "Update", "apiVersion": "kubevirt.io/v1",
         "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}},
        {"manager": "backup-operator", "operation": "Update", "apiVersion": "kubevirt.io/v1",
         "time": "2026-12-01T09:00:00Z", "fieldsType": "FieldsV1",
         "fieldsV1": {"f:metadata": {"f:finalizers": {".": {}, "v:\"backup.example.com/protect\"": {}}}}}
    ]);
    let g = deleted_vm_with(
        &[
            "kubevirt.io/virtualMachineControllerFinalize",
            "backup.example.com/protect",
        ],
        300,
        managed,
    );
    let ins = analyze(&g);
    let foreign: Vec<&Blocker> = ins
        .blockers
        .iter()
        .filter(|b| b.reason == "ForeignFinalizer")
        .collect();
    assert_eq!(
        foreign.len(),
        1,
        "KubeVirt's own finalizer is not foreign: {foreign:#?}"
    );
    let b = foreign[0];
    assert_eq!(b.object, "VirtualMachine/vm-a");
    for part in [
        "terminating for 5 m 0 s",
        "finalizer backup.example.com/protect",
        "added by manager \"backup-operator\" (Update at 2026-12-01T09:00:00Z)",
    ] {
        assert!(b.message.contains(part), "{part:?} not in {}", b.message);
    }
    assert!(!b.message.contains("kubectl-create"), "{}", b.message);
    let fix = b.fix.as_deref().expect("fix");
    assert!(
        fix.contains("kubectl patch vm vm-a -n demo --type json")
            && fix.contains(
                "\"path\":\"/metadata/finalizers/1\",\"value\":\"backup.example.com/protect\""
            ),
        "{fix}"
    );
}

#[test]
fn without_managed_fields_the_finalizer_prefix_says_whose_it_is() {
    let ins = analyze(&deleted_vm_with(
        &["backup.example.com/protect"],
        30,
        json!(null),
    ));
    let b = blocker(
        &ins,
        |b| b.reason == "ForeignFinalizer",
        "foreign finalizer",
    );
    assert!(
        b.message.contains("terminating for 30 s")
            && b.message
                .contains("the controller of backup.example.com added it"),
        "{}",
        b.message
    );
    // KubeVirt's and the garbage collector's own finalizers are not foreign; nor is anything on
    // a VM that is not being deleted.
    let own = deleted_vm_with(
        &[
            "kubevirt.io/virtualMachineControllerFinalize",
            "foregroundDeletion",
            "orphan",
        ],
        30,
        json!(null),
    );
    let mut live = running();
    live.vm.as_mut().expect("vm").metadata.finalizers =
        Some(vec!["backup.example.com/protect".into()]);
    for g in [own, live] {
        let ins = analyze(&g);
        assert!(
            !ins.blockers.iter().any(|b| b.reason == "ForeignFinalizer"),
            "{:#?}",
            ins.blockers
        );
    }
}

#[test]
fn a_foreign_finalizer_on_the_vmi_is_named_too() {
    let mut g = running();
    let vmi = g.vmi.as_mut().expect("vmi");
    vmi.metadata.deletion_timestamp = serde_json::from_value(json!(at(-10))).expect("time");
    vmi.metadata.finalizers = Some(vec![
        "kubevirt.io/foregroundDeleteVirtualMachine".into(),
        "storage.example.io/detach".into(),
    ]);
    let ins = analyze(&g);
    let b = blocker(&ins, |b| b.reason == "ForeignFinalizer", "VMI finalizer");
    assert_eq!(b.object, "VirtualMachineInstance/vm-a");
    assert_eq!(b.depth, 1);
    assert!(
        b.fix
            .as_deref()
            .is_some_and(|f| f.contains("kubectl patch vmi vm-a -n demo"))
    );
}

#[test]
fn another_vm_with_the_same_firmware_uuid_is_named() {
    let mut g = running();
    let me = g.vm.clone().expect("vm");
    let mut twin = me.clone();
    twin.metadata.name = Some("vm-copy".into());
    twin.metadata.uid = Some("copy-uid".into());
    let mut other = me.clone();
    other.metadata.name = Some("vm-other".into());
    other
        .spec
        .template
        .as_mut()
        .expect("template")
        .spec
        .as_mut()
        .expect("spec")
        .domain
        .firmware = None;
    g.namespace_vms = vec![me, twin, other];
    g.namespace_vmis = vec![g.vmi.clone().expect("vmi")];
    let ins = analyze(&g);
    let b = blocker(
        &ins,
        |b| b.reason == "DuplicateFirmwareUUID",
        "duplicate UUID",
    );
    assert_eq!(b.object, "VirtualMachine/vm-a");
    assert!(
        b.message.contains("firmware UUID 0d2a2043-41c0-59c3-9b17-025022203668 is also that of VirtualMachine demo/vm-copy:"),
        "{}",
        b.message
    );
    assert!(
        !b.message.contains("vm-other") && !b.message.contains("VirtualMachineInstance"),
        "{}",
        b.message
    );
    assert!(
        b.fix.as_deref().is_some_and(
            |f| f.contains("kubectl patch vm vm-a -n demo") && f.contains("$(uuidgen)")
        )
    );
}

#[test]
fn a_firmware_uuid_derived_from_the_name_collides_across_namespaces_in_the_fleet() {
    let g = running();
    let mut a = g.vm.clone().expect("vm");
    a.spec
        .template
        .as_mut()
        .expect("template")
        .spec
        .as_mut()
        .expect("spec")
        .domain
        .firmware = None;
    let mut b = a.clone();
    b.metadata.namespace = Some("other".into());
    b.metadata.uid = Some("other-uid".into());
    assert_eq!(
        crate::inspect::diagnose::vm_firmware_uuid(&a),
        crate::controller::vm::firmware::calculate_legacy_uuid("vm-a")
    );
    let f = GatheredFleet {
        vms: vec![a, b],
        controller: g,
        ..Default::default()
    };
    let fleet = analyze_fleet(&f);
    for row in &fleet.rows {
        let problem = row.problem.as_deref().unwrap_or("");
        assert!(
            problem.starts_with("VirtualMachine/vm-a DuplicateFirmwareUUID:")
                && problem.contains("derived from the name"),
            "{problem}"
        );
    }
    assert!(
        fleet.rows[0]
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("VirtualMachine other/vm-a"))
    );
}

/// [`running`] whose leader reports `leading` and its last renewal `last_renew` seconds from
/// now (the Lease was renewed 2 s ago).
fn leader_reporting(leading: bool, last_renew: Option<i64>) -> Gathered {
    let mut g = running();
    if let ControllerView::DebugState { state, .. } = &mut g.controller {
        state.leading = leading;
        state.lease.leading = leading;
        state.lease.phase = if leading {
            crate::runtime::lease::ElectionPhase::Leading
        } else {
            crate::runtime::lease::ElectionPhase::Acquiring
        };
        state.lease.last_renew = last_renew.map(|s| {
            crate::runtime::lease::record::truncate_to_micros(now() + chrono::Duration::seconds(s))
        });
    }
    g
}

#[test]
fn a_lease_renewed_under_the_leaders_identity_by_another_process_is_a_blocker() {
    // A standby with the holder's identity (it never renewed), and a leader whose last renewal
    // is older than the Lease's: someone else renews under the identity.
    for g in [
        leader_reporting(false, None),
        leader_reporting(true, Some(-9)),
    ] {
        let ins = analyze(&g);
        let b = blocker(
            &ins,
            |b| b.reason == "DuplicateControllerIdentity",
            "same identity",
        );
        assert_eq!(b.object, "Lease/kubevirt/virt-controller");
        assert!(
            b.message.contains("the Lease names holder host_1234")
                && b.message
                    .contains("http://127.0.0.1:8182/debug/state?key=demo%2Fvm-a")
                && b.message
                    .contains("a second instance with the same identity renews it"),
            "{}",
            b.message
        );
        assert!(b.fix.as_deref().is_some_and(|f| f.contains("--identity")));
    }
    // The leader wrote the Lease's renewTime itself: one instance.
    let ins = analyze(&leader_reporting(true, Some(-2)));
    assert!(
        !ins.blockers
            .iter()
            .any(|b| b.reason == "DuplicateControllerIdentity"),
        "{:#?}",
        ins.blockers
    );
}

/// A VMI whose launcher pod Pod Security admission refused at `policy` with `violations`, as the
/// VMI controller reports it (lifecycle.go:174-183).
fn refused_by_pod_security(policy: &str, violations: &str) -> Gathered {
    let msg = format!(
        "failed to create pod for vmi demo/vm-a, it needs a privileged namespace to run: pods \
         \"virt-launcher-vm-a-x7k2p\" is forbidden: violates PodSecurity \"{policy}\": {violations}"
    );
    let vmi = vmi(
        "Pending",
        &[("Pending", -30)],
        json!({"conditions": [{"type": "Synchronized", "status": "False",
               "reason": "FailedCreate", "message": msg}]}),
    );
    let mut g = gathered_vm("Always", json!({"printableStatus": "Starting"}));
    g.vmi = Some(vmi);
    g.namespace_object = Some(
        serde_json::from_value(json!({"metadata": {"name": "demo",
            "labels": {"pod-security.kubernetes.io/enforce": policy.split(':').next()}}}))
        .expect("namespace"),
    );
    g
}

#[test]
fn a_pod_security_refusal_names_the_label_that_admits_the_launcher() {
    // Only restricted-level checks fail: baseline admits the pod.
    let restricted_only = refused_by_pod_security(
        "restricted:latest",
        "allowPrivilegeEscalation != false (container \"compute\" must set \
         securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \
         \"compute\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true \
         (pod or containers \"compute\", \"guest-console-log\" must set \
         securityContext.runAsNonRoot=true), seccompProfile (pod or container \"compute\" must \
         set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
    );
    // A baseline check fails too: only privileged admits it.
    let privileged = refused_by_pod_security(
        "restricted:latest",
        "privileged (container \"compute\" must not set securityContext.privileged=true), \
         runAsNonRoot != true (pod or container \"compute\" must set securityContext.runAsNonRoot=true)",
    );
    let baseline_refused = refused_by_pod_security(
        "baseline:v1.36",
        "non-default capabilities (container \"compute\" must not include \"SYS_NICE\" in \
         securityContext.capabilities.add)",
    );
    for (g, level) in [
        (restricted_only, "baseline"),
        (privileged, "privileged"),
        (baseline_refused, "privileged"),
    ] {
        let ins = analyze(&g);
        let b = blocker(&ins, |b| b.reason == "PodSecurityRejected", "PodSecurity");
        assert_eq!(b.object, "Namespace/demo");
        assert_eq!(
            b.fix.as_deref(),
            Some(format!("kubectl label namespace demo pod-security.kubernetes.io/enforce={level} --overwrite").as_str())
        );
        assert!(
            b.message.contains(&format!(
                "the namespace label pod-security.kubernetes.io/enforce={level} admits it"
            )),
            "{}",
            b.message
        );
    }
}

#[test]
fn a_pod_security_refusal_is_found_in_the_events_too() {
    let mut g = gathered_vm("Always", json!({}));
    g.vmi = Some(vmi("Pending", &[("Pending", -30)], json!({})));
    g.events = vec![crate::inspect::gather::RawEvent {
        uid: Some("e1".into()),
        view: EventView {
            type_: "Warning".into(),
            reason: "FailedCreate".into(),
            object: "VirtualMachineInstance/vm-a".into(),
            message: "failed to render launch manifest: failed to create pod for vmi demo/vm-a, \
                      it needs a privileged namespace to run: pods \"virt-launcher-vm-a-x\" is \
                      forbidden: violates PodSecurity \"restricted:latest\": runAsUser=0 (pod \
                      must not set runAsUser=0)"
                .into(),
            count: 3,
            api: "core/v1".into(),
            time: None,
        },
    }];
    let ins = analyze(&g);
    let b = blocker(
        &ins,
        |b| b.reason == "PodSecurityRejected",
        "PodSecurity event",
    );
    assert!(
        b.message.contains("(enforce restricted:latest) refused the launcher pod: runAsUser=0 (pod must not set runAsUser=0);"),
        "{}",
        b.message
    );
    assert!(
        b.fix
            .as_deref()
            .is_some_and(|f| f.ends_with("enforce=baseline --overwrite"))
    );
    let text = crate::inspect::text::render_vm(&ins);
    assert!(
        text.contains("[2] Namespace/demo PodSecurityRejected: Pod Security admission")
            && text.contains("\n      fix: kubectl label namespace demo pod-security.kubernetes.io/enforce=baseline --overwrite\n"),
        "{text}"
    );
}

#[test]
fn the_text_names_a_duplicate_launcher_pod_as_a_blocker() {
    let ins = analyze(&running_with_pod_copy(
        "virt-launcher-vm-a-copy",
        -5,
        "Running",
    ));
    let text = crate::inspect::text::render_vm(&ins);
    let section = text
        .split("BLOCKERS (deepest first)\n")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap_or("");
    assert!(
        section.starts_with(
            "  [2] Pod/virt-launcher-vm-a-abcde DuplicateLauncherPod: 2 live launcher pods"
        ),
        "{text}"
    );
}

/// A leader that renders with other settings than the KubeVirt CR's says so, field by field,
/// in the model and the text (issue 38 item 4: its own pods looked like drift otherwise); a
/// leader whose settings were fixed at start (`--kubevirt-cr FILE`) is not said to run with
/// KubeVirt's defaults.
#[test]
fn a_leader_behind_the_kubevirt_cr_is_named() {
    use crate::controller::cluster_config::ClusterConfig;
    let mut g = running();
    g.settings.memory_overcommit = 150;
    let ControllerView::DebugState { state, .. } = &mut g.controller else {
        panic!("under our controller");
    };
    state.settings = Some(ClusterConfig::fixed(ClusterSettings::default()).state());
    let ins = analyze(&g);
    let check = ins.settings.as_ref().expect("settings");
    assert_eq!(
        check.differences,
        ["memoryOvercommit: controller 100, KubeVirt CR 150"]
    );
    let text = crate::inspect::text::render_vm(&ins);
    assert!(
        text.contains(
            "settings: the controller's (fixed at start) DIFFER from the KubeVirt CR's: \
             memoryOvercommit: controller 100, KubeVirt CR 150"
        ),
        "{text}"
    );
}

/// The inspector's VMI decision reads the claims it gathered through the controller's own
/// storage rule (controller::vmi::storage, datavolumes.go:116-141): without the claim the VMI
/// waits with FailedPvcNotFound; with it the launcher pod is created.
#[test]
fn the_next_vmi_decision_waits_for_a_missing_claim() {
    let volumes = json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-claim"}}]);
    let vm = vm("Always", volumes.clone(), json!({"created": true}));
    let mut pending = vmi("Pending", &[("Pending", -5)], json!({}));
    pending.spec.volumes = Some(serde_json::from_value(volumes).expect("volumes"));
    let mut g = gathered(vm.clone());
    g.vmi = Some(pending);
    let d = decide_next(&g, &vm, &[]).vmi.expect("VMI decision");
    let err = d.sync_error.as_ref().expect("sync error");
    assert_eq!(err.reason, "FailedPvcNotFound");
    assert_eq!(
        err.message,
        "PVC demo/data-claim does not exist, waiting for it to appear"
    );
    assert!(
        !d.sync_actions
            .iter()
            .any(|a| matches!(a, crate::controller::vmi::VmiAction::CreatePod { .. }))
    );

    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data-claim", "namespace": "demo"},
        "spec": {"accessModes": ["ReadWriteOnce"]},
        "status": {"phase": "Pending"}
    }))
    .expect("claim");
    g.pvcs.insert("data-claim".into(), claim);
    let d = decide_next(&g, &vm, &[]).vmi.expect("VMI decision");
    assert!(d.sync_error.is_none(), "{:?}", d.sync_error);
    assert!(
        d.sync_actions
            .iter()
            .any(|a| matches!(a, crate::controller::vmi::VmiAction::CreatePod { .. })),
        "{:?}",
        d.explanation
    );
}

#[test]
fn another_release_s_overhead_is_that_release_s_formula_for_the_same_vm() {
    let g = running();
    assert_eq!(analyze(&g).kubevirt_version_overhead, None);
    let now = analyze(&g).overhead_check.expect("overhead");
    // The cluster really at v1.3.0: what the comparison must show.
    let mut at_v13 = g.clone();
    at_v13.settings.kubevirt_version = KubeVirtVersion::V1_3;
    let then = analyze(&at_v13).overhead_check.expect("overhead at v1.3.0");
    assert_ne!(then.formula_bytes, now.formula_bytes);

    let mut compared = g.clone();
    compared.compare_version = Some(KubeVirtVersion::V1_3);
    let ins = analyze(&compared);
    let v = ins.kubevirt_version_overhead.expect("v1.3.0 overhead");
    assert_eq!(v.kubevirt_version, KubeVirtVersion::V1_3);
    assert_eq!(v.formula_bytes, then.formula_bytes);
    assert_eq!(v.terms, then.terms);
    assert_eq!(v.formula_request_bytes, then.formula_request_bytes);
    // The check itself stays the current release's.
    assert_eq!(ins.overhead_check, Some(now.clone()));
    let delta = (now.formula_bytes - then.formula_bytes) / 1_048_576;
    assert!(
        v.comparison(now.formula_bytes)
            .starts_with(&format!("under v1.3.0: overhead −{delta} Mi = ")),
        "{}",
        v.comparison(now.formula_bytes)
    );
}

/// A memory dump in progress: the VM's request, and the dump volume's VMI status and
/// attachment pod beside its claim (where the volumes are shown).
#[test]
fn a_memory_dump_shows_its_request_and_its_volume_on_the_vmi() {
    let mut g = running();
    let dump = json!({"name": "dump", "memoryDump": {"claimName": "dump", "hotpluggable": true}});
    let vm = g.vm.as_mut().expect("vm");
    crate::controller::vm::template_spec_mut(vm)
        .volumes
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(dump.clone()).expect("volume"));
    vm.status.as_mut().expect("status").extra.insert(
        "memoryDumpRequest".into(),
        json!({"claimName": "dump", "phase": "InProgress"}),
    );
    let vmi = g.vmi.as_mut().expect("vmi");
    vmi.status.as_mut().expect("status").volume_status = Some(
        vec![json!({
            "name": "dump", "target": "", "phase": "MemoryDumpInProgress",
            "memoryDumpVolume": {"claimName": "dump", "targetFileName": "vm-a-dump.memory.dump"},
            "hotplugVolume": {"attachPodName": "hp-volume-abcde", "attachPodUID": "u"}
        })]
        .into(),
    );
    g.pvcs.insert(
        "dump".into(),
        serde_json::from_value(json!({"metadata": {"name": "dump", "namespace": "demo"},
                                      "status": {"phase": "Bound"}}))
        .expect("claim"),
    );
    let ins = analyze(&g);
    let d = ins
        .vm
        .as_ref()
        .and_then(|v| v.memory_dump.as_ref())
        .expect("dump");
    assert_eq!(
        (d.claim_name.as_str(), d.phase.as_str()),
        ("dump", "InProgress")
    );
    let v = ins
        .volumes
        .iter()
        .find(|v| v.volume == "dump")
        .expect("volume");
    assert_eq!(v.vmi_phase.as_deref(), Some("MemoryDumpInProgress"));
    assert_eq!(v.attachment_pod.as_deref(), Some("hp-volume-abcde"));
    let text = crate::inspect::text::render_vm(&ins);
    assert!(
        text.contains(
            "PersistentVolumeClaim dump (volume dump) Bound, on the VMI MemoryDumpInProgress via \
             attachment pod hp-volume-abcde"
        ),
        "{text}"
    );
    assert!(
        text.contains("Memory dump to claim dump InProgress"),
        "{text}"
    );
}
