//! Tests of the VMI decision. Where a KubeVirt unit test covers the same behaviour its name and
//! place in pkg/virt-controller/watch/vmi/vmi_test.go (v1.9.0) are given. Those tests run the
//! controller without virt-api, so the fixtures here set `ensure_vmi_finalizer = false` unless a
//! test is about that stand-in.

use super::*;
use crate::api::vmi::{Cpu, PhaseTransitionTimestamp};
use crate::api::{Condition, Phase, Time, VirtualMachineInstance};
use crate::controller::vmi::action::{ApiFailure, EventType, SkipReason, SyncOutcome, VmiAction};
use crate::controller::vmi::snapshot::{RenderFailure, VmiSnapshot};
use chrono::{TimeZone, Utc};
use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStateWaiting, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};
use std::sync::Arc;

const VMI_UID: &str = "1234";

/// [`super::decide`], checking on every test's snapshot that [`decide_sync`] (the executor's
/// first stage) gives the same skip, sync actions and plan explanation.
fn decide(snap: &VmiSnapshot) -> VmiDecision {
    let full = super::decide(snap);
    let sync = decide_sync(snap);
    assert_eq!(sync.skipped, full.skipped);
    assert_eq!(sync.sync_actions, full.sync_actions);
    assert!(full.explanation.starts_with(&sync.explanation));
    full
}

fn now() -> Time {
    Time(
        Utc.with_ymd_and_hms(2026, 3, 4, 5, 6, 7)
            .single()
            .expect("valid time"),
    )
}

fn k8s_time(secs: i64) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::from_second(secs).expect("valid"),
    )
}

fn cond(type_: &str, status: &str, reason: &str) -> Condition {
    Condition {
        type_: type_.into(),
        status: status.into(),
        reason: (!reason.is_empty()).then(|| reason.into()),
        ..Default::default()
    }
}

/// `newPendingVirtualMachine` (vmi_test.go:5395-5402).
fn pending_vmi() -> VirtualMachineInstance {
    let mut vmi = VirtualMachineInstance::default();
    vmi.metadata.name = Some("testvmi".into());
    vmi.metadata.namespace = Some("default".into());
    vmi.metadata.uid = Some(VMI_UID.into());
    vmi.metadata.annotations = Some(
        [
            (
                LATEST_OBSERVED_API_VERSION_ANNOTATION.to_string(),
                "v1".to_string(),
            ),
            (
                STORAGE_OBSERVED_API_VERSION_ANNOTATION.to_string(),
                "v1".to_string(),
            ),
        ]
        .into(),
    );
    vmi.status = Some(VirtualMachineInstanceStatus {
        phase: Some(Phase::Pending),
        conditions: Some(vec![cond("Ready", "False", "PodNotExists")]),
        ..Default::default()
    });
    vmi
}

fn with_phase(mut vmi: VirtualMachineInstance, phase: Phase) -> VirtualMachineInstance {
    status_mut(&mut vmi).phase = Some(phase);
    vmi
}

/// `setReadyCondition` (vmi_test.go:5404-5411).
fn set_ready(vmi: &mut VirtualMachineInstance, status: &str, reason: &str) {
    conditions::remove(status_mut(vmi), "Ready");
    add_condition(vmi, cond("Ready", status, reason));
}

/// A Scheduling VMI whose guest is not running yet.
fn scheduling_vmi() -> VirtualMachineInstance {
    let mut vmi = with_phase(pending_vmi(), Phase::Scheduling);
    set_ready(&mut vmi, "False", "GuestNotRunning");
    vmi
}

/// A Running VMI with `Ready=True`.
fn ready_running_vmi() -> VirtualMachineInstance {
    let mut vmi = with_phase(pending_vmi(), Phase::Running);
    set_ready(&mut vmi, "True", "");
    vmi
}

/// A Pending launcher pod annotated with the memory overhead `bytes`.
fn pending_pod_with_overhead(bytes: &str) -> Pod {
    let mut pod = kv_pod("Pending");
    annotate(&mut pod, "kubevirt.io/memory-overhead-bytes", Some(bytes));
    pod
}

/// The status of the VMI the decision writes.
fn new_status(d: &VmiDecision) -> VirtualMachineInstanceStatus {
    updated(d).status.clone().unwrap_or_default()
}

/// Appends `c` to the VMI's conditions.
fn add_condition(vmi: &mut VirtualMachineInstance, c: Condition) {
    status_mut(vmi)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(c);
}

/// Sets (`Some`) or removes (`None`) annotation `key` of a pod that has annotations.
fn annotate(pod: &mut Pod, key: &str, value: Option<&str>) {
    if let Some(a) = pod.metadata.annotations.as_mut() {
        match value {
            Some(v) => a.insert(key.into(), v.into()),
            None => a.remove(key),
        };
    }
}

/// A running launcher pod whose own `Ready` condition is `True`.
fn ready_pod() -> Pod {
    let mut pod = kv_pod("Running");
    add_pod_condition(
        &mut pod,
        PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        },
    );
    pod
}

/// Appends `c` to the conditions of a pod that has a status with conditions.
fn add_pod_condition(pod: &mut Pod, c: PodCondition) {
    if let Some(conds) = pod.status.as_mut().and_then(|s| s.conditions.as_mut()) {
        conds.push(c);
    }
}

/// The first pod patch among `actions`, as JSON.
fn pod_patch(actions: &[VmiAction]) -> Option<Value> {
    actions.iter().find_map(|a| match a {
        VmiAction::PatchPod { patch, .. } => serde_json::to_value(patch).ok(),
        _ => None,
    })
}

/// Whether the decision patches the pod's `VirtualMachineUnpaused` readiness gate.
fn patches_readiness_gate(d: &VmiDecision) -> bool {
    d.status_actions
        .iter()
        .any(|a| matches!(a, VmiAction::PatchPodReadinessCondition { .. }))
}

fn running_state() -> Option<ContainerState> {
    Some(ContainerState {
        running: Some(ContainerStateRunning::default()),
        ..Default::default()
    })
}

/// `newPodForVirtualMachine` (vmi_test.go:5426-5458).
/// A Running, Ready launcher pod whose compute container runs `image`.
fn ready_pod_with_compute_image(image: &str) -> Pod {
    let mut pod = ready_pod();
    if let Some(s) = pod.spec.as_mut() {
        s.containers.push(Container {
            name: "compute".into(),
            image: Some(image.into()),
            ..Default::default()
        });
    }
    pod
}

fn kv_pod(phase: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("test".into()),
            namespace: Some("default".into()),
            uid: Some("virt-launch-uid".into()),
            creation_timestamp: Some(k8s_time(1_000)),
            labels: Some(
                [
                    ("kubevirt.io".to_string(), "virt-launcher".to_string()),
                    ("kubevirt.io/created-by".to_string(), VMI_UID.to_string()),
                ]
                .into(),
            ),
            // As rendered for `pending_vmi` (with its Velero hooks, which the sync keeps).
            annotations: Some({
                let mut a = crate::launcher::annotations::velero(&pending_vmi(), None);
                a.insert("kubevirt.io/domain".to_string(), "testvmi".to_string());
                a.insert(EVICT_ONLY_ANNOTATION.to_string(), String::new());
                a
            }),
            owner_references: Some(vec![OwnerReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachineInstance".into(),
                name: "testvmi".into(),
                uid: VMI_UID.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec::default()),
        status: Some(PodStatus {
            phase: Some(phase.into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "compute".into(),
                ready: false,
                state: running_state(),
                ..Default::default()
            }]),
            conditions: Some(vec![PodCondition {
                type_: conditions::types::VIRTUAL_MACHINE_UNPAUSED.into(),
                status: "True".into(),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

fn rendered_pod() -> Pod {
    let mut pod = kv_pod("");
    pod.metadata.name = None;
    pod.metadata.uid = None;
    pod.metadata.creation_timestamp = None;
    pod.metadata.generate_name = Some("virt-launcher-testvmi-".into());
    annotate(
        &mut pod,
        "kubevirt.io/memory-overhead-bytes",
        Some(&(256u64 * 1024 * 1024).to_string()),
    );
    pod.spec = Some(PodSpec {
        containers: vec![Container {
            name: "compute".into(),
            image: Some("quay.io/kubevirt/virt-launcher:v1.9.0".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    pod.status = None;
    pod
}

fn created_pod() -> Pod {
    let mut pod = rendered_pod();
    pod.metadata.name = Some("virt-launcher-testvmi-abcde".into());
    pod.metadata.uid = Some("new-pod-uid".into());
    pod
}

fn snap(vmi: VirtualMachineInstance) -> VmiSnapshot {
    let mut s = VmiSnapshot::new(vmi, now());
    s.ensure_vmi_finalizer = false;
    s
}

fn snap_with_pod(vmi: VirtualMachineInstance, pod: Pod) -> VmiSnapshot {
    let mut s = snap(vmi);
    s.pods = vec![pod.into()];
    s
}

fn updated(d: &VmiDecision) -> &VirtualMachineInstance {
    d.status_actions
        .iter()
        .find_map(|a| match a {
            VmiAction::UpdateVmi { vmi, .. } => Some(&**vmi),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected an UpdateVmi, got {:#?}", d.status_actions))
}

fn patch_ops(d: &VmiDecision) -> Value {
    d.status_actions
        .iter()
        .find_map(|a| match a {
            VmiAction::PatchVmi { patch, .. } => serde_json::to_value(patch).ok(),
            _ => None,
        })
        .unwrap_or_else(|| panic!("expected a PatchVmi, got {:#?}", d.status_actions))
}

fn replaced(ops: &Value, path: &str) -> Option<Value> {
    ops.as_array()?
        .iter()
        .find(|o| o["path"] == path && (o["op"] == "replace" || o["op"] == "add"))
        .map(|o| o["value"].clone())
}

fn phase_of(vmi: &VirtualMachineInstance) -> Phase {
    vmi.phase()
}

fn condition<'a>(vmi: &'a VirtualMachineInstance, t: &str) -> Option<&'a Condition> {
    vmi.condition(t)
}

fn events(d: &VmiDecision) -> Vec<(EventType, String, String)> {
    d.status_actions
        .iter()
        .filter_map(|a| match a {
            VmiAction::Event {
                type_,
                reason,
                message,
                ..
            } => Some((*type_, reason.clone(), message.clone())),
            _ => None,
        })
        .collect()
}

fn no_writes(d: &VmiDecision) -> bool {
    d.actions().all(|a| !a.is_write())
}

// ---------------------------------------------------------------------------------------------
// execute preamble

#[test]
fn missing_api_version_annotation_is_written_first() {
    let mut vmi = pending_vmi();
    vmi.metadata.annotations = None;
    let d = decide(&snap(vmi));
    assert!(d.sync_actions.is_empty());
    assert_eq!(d.status_actions.len(), 1);
    let a = updated(&d).metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        a.get("kubevirt.io/latest-observed-api-version")
            .map(String::as_str),
        Some("v1")
    );
    assert_eq!(
        a.get("kubevirt.io/storage-observed-api-version")
            .map(String::as_str),
        Some("v1")
    );
    assert_eq!(updated(&d).phase(), Phase::Pending);
}

#[test]
fn unsatisfied_expectations_skip_the_sync() {
    let mut s = snap(pending_vmi());
    s.expectations.pods_satisfied = false;
    s.expectations.pending_pod_creations = 1;
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let d = decide(&s);
    assert!(
        matches!(d.skipped, Some(SkipReason::ExpectationsPending(ref t)) if t.contains("creations 1"))
    );
    assert_eq!(d.actions().count(), 0);
    assert!(!needs_rendered_pod(&s));
    assert_eq!(d.requeue_after, None, "v1.9.0 waits for the next event");
}

/// PR 18206 (main): the skipped sync asks for the key again after the expectations timeout.
#[test]
fn unsatisfied_expectations_requeue_after_the_timeout_on_main_only() {
    use crate::kubevirt_version::KubeVirtVersion;
    for (version, want) in [
        (KubeVirtVersion::V1_8, None),
        (KubeVirtVersion::V1_9, None),
        (
            KubeVirtVersion::Main,
            Some(std::time::Duration::from_secs(300)),
        ),
    ] {
        let mut s = snap(pending_vmi());
        s.expectations.vmi_satisfied = false;
        s.rules = version.controller_rules();
        let d = decide(&s);
        assert!(matches!(
            d.skipped,
            Some(SkipReason::ExpectationsPending(_))
        ));
        assert_eq!(d.requeue_after, want, "{version}");
        assert_eq!(
            d.explanation.iter().any(|l| l.contains("PR 18206")),
            want.is_some(),
            "{version}: {:?}",
            d.explanation
        );
    }
}

// ---------------------------------------------------------------------------------------------
// pod creation

#[test]
fn needs_rendered_pod_only_when_creating() {
    let s = snap(pending_vmi());
    assert!(needs_rendered_pod(&s));
    let d = decide(&s);
    assert_eq!(d.skipped, Some(SkipReason::RenderedPodMissing));
    assert_eq!(d.actions().count(), 0);

    assert!(!needs_rendered_pod(&snap_with_pod(
        with_phase(pending_vmi(), Phase::Scheduling),
        kv_pod("Pending")
    )));
    assert!(!needs_rendered_pod(&snap(with_phase(
        pending_vmi(),
        Phase::Scheduling
    ))));
    let mut waiting = snap(pending_vmi());
    waiting.storage.volumes_ready = false;
    assert!(!needs_rendered_pod(&waiting));
}

// vmi_test.go:1002-1016 "should create a corresponding Pod on VirtualMachineInstance creation"
// and 1219-1238 "should remove the error condition if the sync finally succeeds"
#[test]
fn creates_pod_then_moves_to_scheduling() {
    let mut vmi = pending_vmi();
    add_condition(&mut vmi, cond("Synchronized", "False", "FailedCreate"));
    let mut s = snap(vmi);
    s.rendered_pod = Some(Ok(rendered_pod().into()));

    let d = decide(&s);
    assert_eq!(d.sync_actions.len(), 1);
    assert!(
        matches!(&d.sync_actions[0], VmiAction::CreatePod { pod, .. } if **pod == rendered_pod())
    );
    // The action carries the snapshot's rendered pod itself, not a copy.
    let Some(Ok(rendered)) = &s.rendered_pod else {
        panic!("the snapshot has a rendered pod");
    };
    assert!(
        matches!(&d.sync_actions[0], VmiAction::CreatePod { pod, .. } if Arc::ptr_eq(pod, rendered))
    );

    let d = decide_after_sync(
        &s,
        &SyncOutcome::Succeeded {
            created_pod: Some(Box::new(created_pod())),
        },
    );
    assert_eq!(
        events(&d),
        vec![(
            EventType::Normal,
            "SuccessfulCreate".to_string(),
            "Created virtual machine pod virt-launcher-testvmi-abcde".to_string()
        )]
    );
    // the new pod has no readiness-gate condition yet: set it True
    assert!(d.status_actions.iter().any(|a| matches!(a,
        VmiAction::PatchPodReadinessCondition { pod, status, reason, .. }
            if pod == "virt-launcher-testvmi-abcde" && status == "True" && reason == "NotPaused")));
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Scheduling);
    assert_eq!(d.to_phase, Phase::Scheduling);
    assert!(condition(w, "Synchronized").is_none());
    assert_eq!(
        condition(w, "Ready").and_then(|c| c.reason.as_deref()),
        Some("GuestNotRunning")
    );
    let st = w.status.clone().unwrap_or_default();
    assert_eq!(
        st.launcher_container_image_version.as_deref(),
        Some("quay.io/kubevirt/virt-launcher:v1.9.0")
    );
    assert_eq!(
        st.memory.and_then(|m| m.memory_overhead).map(|q| q.0),
        Some("256Mi".to_string())
    );
    assert_eq!(
        st.phase_transition_timestamps,
        Some(vec![PhaseTransitionTimestamp {
            phase: Phase::Scheduling,
            phase_transition_timestamp: now(),
            extra: Default::default(),
        }])
    );
    // the informer has not seen the new pod: activePods stays unset (lifecycle.go:1030-1049)
    assert_eq!(st.active_pods, None);
    assert!(!d.requeue());
    // the write is last
    assert!(matches!(
        d.status_actions.last(),
        Some(VmiAction::UpdateVmi { .. })
    ));
}

#[test]
fn optimistic_decision_predicts_the_generated_name() {
    let mut s = snap(with_phase(pending_vmi(), Phase::Unset));
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let d = decide(&s);
    assert_eq!(
        events(&d)[0].2,
        format!("Created virtual machine pod virt-launcher-testvmi-{PREDICTED_NAME_SUFFIX}")
    );
    assert_eq!(d.from_phase, Phase::Unset);
    assert_eq!(phase_of(updated(&d)), Phase::Scheduling);
}

// vmi_test.go:1177-1196 "should set an error condition if creating the pod fails" and 1197-1218
// "should back-off if a sync error occurs"
#[test]
fn failed_create_sets_synchronized_false_and_requeues() {
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let d = decide_after_sync(
        &s,
        &SyncOutcome::Failed {
            index: 0,
            error: ApiFailure::new(0, String::new(), "random error"),
        },
    );
    assert_eq!(
        events(&d),
        vec![(
            EventType::Warning,
            "FailedCreate".to_string(),
            "Error creating pod: random error".to_string()
        )]
    );
    assert!(d.requeue());
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Pending);
    let c = condition(w, "Synchronized").cloned().expect("Synchronized");
    assert_eq!(c.status, "False");
    assert_eq!(c.reason.as_deref(), Some("FailedCreate"));
    assert_eq!(
        c.message.as_deref(),
        Some("failed to create virtual machine pod: random error")
    );
    assert!(!patches_readiness_gate(&d));
}

#[test]
fn pod_security_rejection_uses_the_privileged_namespace_message() {
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let api = "pods \"virt-launcher-testvmi-x\" is forbidden: violates PodSecurity \"baseline:latest\": privileged";
    let d = decide_after_sync(
        &s,
        &SyncOutcome::Failed {
            index: 0,
            error: ApiFailure::new(403, "Forbidden", api),
        },
    );
    let expected = format!(
        "failed to create pod for vmi default/testvmi, it needs a privileged namespace to run: {api}"
    );
    assert_eq!(
        events(&d),
        vec![(
            EventType::Warning,
            "FailedCreate".to_string(),
            format!("failed to render launch manifest: {expected}")
        )]
    );
    assert_eq!(
        d.sync_error
            .as_ref()
            .map(|e| (e.reason.as_str(), e.message.as_str())),
        Some(("FailedCreate", expected.as_str()))
    );
    assert_eq!(
        condition(updated(&d), "Synchronized")
            .and_then(|c| c.message.as_deref().map(str::to_string)),
        Some(expected)
    );
}

#[test]
fn render_failure_is_a_failed_create_sync_error_without_event() {
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Err(RenderFailure::from("vmi has no memory")));
    let d = decide(&s);
    assert!(d.sync_actions.is_empty());
    assert!(events(&d).is_empty());
    let e = d.sync_error.clone().expect("sync error");
    assert_eq!(
        (e.reason.as_str(), e.message.as_str(), e.requeue),
        (
            "FailedCreate",
            "failed to render launch manifest: vmi has no memory",
            true
        )
    );
    assert!(d.requeue());
    assert_eq!(
        condition(updated(&d), "Synchronized").and_then(|c| c.reason.as_deref()),
        Some("FailedCreate")
    );
}

// vmi_test.go:1240-1318 "should never proceed to creating the launcher pod if not all PVCs are there"
#[test]
fn render_pvc_not_found_is_informal_and_unschedulable() {
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Err(RenderFailure {
        message: "PVC default/disk not found".into(),
        pvc_not_found: true,
    }));
    let d = decide(&s);
    assert!(!d.requeue());
    assert_eq!(
        events(&d),
        vec![(
            EventType::Warning,
            "FailedPvcNotFound".to_string(),
            "failed to render launch manifest: PVC default/disk not found".to_string()
        )]
    );
    let w = updated(&d);
    let c = condition(w, "PodScheduled").cloned().expect("PodScheduled");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        (
            "False",
            Some("Unschedulable"),
            Some("failed to render launch manifest: PVC default/disk not found")
        )
    );
    assert_eq!(
        condition(w, "Synchronized").and_then(|c| c.reason.as_deref()),
        Some("FailedPvcNotFound")
    );
}

#[test]
fn missing_pvc_waits_with_informal_error() {
    let mut s = snap(pending_vmi());
    s.storage.missing_pvc = Some("disk".into());
    let d = decide(&s);
    assert!(d.sync_actions.is_empty());
    assert!(!d.requeue());
    assert_eq!(
        events(&d),
        vec![(
            EventType::Normal,
            "FailedPvcNotFound".to_string(),
            "PVC default/disk does not exist, waiting for it to appear".to_string()
        )]
    );
    assert!(condition(updated(&d), "PodScheduled").is_some());
}

#[test]
fn no_second_pod_once_past_pending() {
    // vmi_test.go:1413-1420 "should move the vmi to failed state if the pod disappears and the vmi
    // is in scheduling state"
    let d = decide(&snap(with_phase(pending_vmi(), Phase::Scheduling)));
    assert!(d.sync_actions.is_empty());
    assert_eq!(phase_of(updated(&d)), Phase::Failed);
}

// ---------------------------------------------------------------------------------------------
// deletion

fn second_pod(name: &str, uid: &str) -> Pod {
    let mut p = kv_pod("Running");
    p.metadata.name = Some(name.into());
    p.metadata.uid = Some(uid.into());
    p
}

// vmi_test.go:1033-1094 "should delete the corresponding Pods on VirtualMachineInstance deletion with vmi"
#[test]
fn deleting_vmi_deletes_its_pods_in_every_phase() {
    for phase in [
        Phase::Running,
        Phase::Unset,
        Phase::Pending,
        Phase::Succeeded,
        Phase::Failed,
        Phase::Scheduled,
        Phase::Scheduling,
    ] {
        let mut vmi = with_phase(pending_vmi(), phase);
        vmi.metadata.deletion_timestamp = Some(k8s_time(2_000));
        let mut foreign = second_pod("test3", "789-789-789");
        if let Some(r) = foreign.metadata.owner_references.as_mut() {
            r[0].uid = "another-vmi-uid".into();
        }
        let mut s = snap(vmi);
        s.pods = vec![
            second_pod("test", "456-456-456").into(),
            second_pod("test2", "123-123-123").into(),
            foreign.into(),
        ];
        let d = decide(&s);
        let deleted: Vec<&str> = d
            .sync_actions
            .iter()
            .filter_map(|a| match a {
                VmiAction::DeletePod { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deleted, vec!["test", "test2"], "phase {phase:?}");
        let ev = events(&d);
        assert_eq!(ev.len(), 2);
        assert!(
            ev.iter()
                .all(|(t, r, _)| *t == EventType::Normal && r == "SuccessfulDelete")
        );
        if matches!(phase, Phase::Unset | Phase::Pending) {
            // the pod still exists in the cache: expectVMISchedulingState
            assert_eq!(phase_of(updated(&d)), Phase::Scheduling, "phase {phase:?}");
        }
    }
}

// vmi_test.go:1096-1115 "should delete finalized pods on VMI deletion"
#[test]
fn terminating_pods_are_skipped_unless_final() {
    let mut vmi = with_phase(pending_vmi(), Phase::Failed);
    vmi.metadata.deletion_timestamp = Some(k8s_time(2_000));
    let mut finalized = kv_pod("Succeeded");
    finalized.metadata.name = Some("finalized-pod".into());
    finalized.metadata.deletion_timestamp = Some(k8s_time(1_500));
    let mut terminating = kv_pod("Running");
    terminating.metadata.name = Some("terminating".into());
    terminating.metadata.deletion_timestamp = Some(k8s_time(1_500));
    let mut s = snap(vmi);
    s.pods = vec![finalized.into(), terminating.into()];
    let d = decide(&s);
    assert_eq!(d.sync_actions.len(), 1);
    assert!(
        matches!(&d.sync_actions[0], VmiAction::DeletePod { name, .. } if name == "finalized-pod")
    );
}

// vmi_test.go:1117-1145 "should not try to delete a pod again, which is already marked for
// deletion and go to failed state, when in scheduling state"
#[test]
fn terminating_pod_of_deleted_scheduling_vmi_leads_to_failed() {
    let mut vmi = scheduling_vmi();
    vmi.metadata.deletion_timestamp = Some(k8s_time(2_000));
    let mut pod = kv_pod("Running");
    pod.metadata.deletion_timestamp = Some(k8s_time(2_001));
    let d = decide(&snap_with_pod(vmi, pod));
    assert!(d.sync_actions.is_empty());
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Failed);
    assert_eq!(
        condition(w, "Ready").and_then(|c| c.reason.as_deref()),
        Some("PodTerminating")
    );
}

// vmi_test.go:1580-1603 "should set an error condition if deleting the virtual machine pod fails"
#[test]
fn failed_delete_sets_error_condition() {
    let mut vmi = pending_vmi();
    set_ready(&mut vmi, "False", "GuestNotRunning");
    vmi.metadata.deletion_timestamp = Some(k8s_time(2_000));
    let s = snap_with_pod(vmi, kv_pod("Running"));
    let d = decide_after_sync(
        &s,
        &SyncOutcome::Failed {
            index: 0,
            error: ApiFailure::new(500, "InternalError", "random error"),
        },
    );
    assert_eq!(
        events(&d),
        vec![(
            EventType::Warning,
            "FailedDelete".to_string(),
            "Failed to delete virtual machine pod test".to_string()
        )]
    );
    assert!(d.requeue());
    let c = condition(updated(&d), "Synchronized")
        .cloned()
        .expect("cond");
    assert_eq!(c.reason.as_deref(), Some("FailedDelete"));
    assert_eq!(
        c.message.as_deref(),
        Some("failed to delete pod: random error")
    );
}

// vmi_test.go:1146-1162 "should not delete the corresponding Pod if the vmi is in" final states
#[test]
fn final_vmi_keeps_its_pods() {
    for phase in [Phase::Failed, Phase::Succeeded] {
        let mut vmi = with_phase(pending_vmi(), phase);
        set_ready(&mut vmi, "False", "GuestNotRunning");
        let d = decide(&snap_with_pod(vmi, kv_pod("Running")));
        assert!(d.sync_actions.is_empty(), "{phase:?}");
    }
}

// vmi_test.go:1163-1175 "should do nothing if the vmi is in final state"
#[test]
fn final_vmi_without_pods_or_finalizers_is_left_alone() {
    let mut vmi = with_phase(pending_vmi(), Phase::Failed);
    vmi.metadata.finalizers = Some(vec![]);
    let mut s = snap(vmi);
    s.ensure_vmi_finalizer = true; // never added to final VMIs
    let d = decide(&s);
    assert_eq!(d.actions().count(), 0, "{:#?}", d.status_actions);
}

// vmi_test.go:1422-1430 "should move the vmi to failed state if the vmi is pending, no pod exists
// yet and gets deleted"
#[test]
fn pending_deleted_vmi_without_pod_fails() {
    let mut vmi = pending_vmi();
    vmi.metadata.deletion_timestamp = Some(k8s_time(2_000));
    let d = decide(&snap(vmi));
    assert!(d.sync_actions.is_empty());
    assert_eq!(phase_of(updated(&d)), Phase::Failed);
}

#[test]
fn pending_with_failed_data_volume_fails() {
    let mut s = snap(pending_vmi());
    s.storage.has_failed_data_volume = true;
    s.storage.volumes_ready = false;
    assert_eq!(phase_of(updated(&decide(&s))), Phase::Failed);
}

// ---------------------------------------------------------------------------------------------
// Pending / Scheduling

// vmi_test.go:1319-1347 "should move the vmi to scheduling state if a pod exists"
#[test]
fn pending_with_pod_moves_to_scheduling_whatever_the_pod_state() {
    for phase in ["Running", "Unknown", "Succeeded", "Failed", "Pending"] {
        for ready in [false, true] {
            let mut vmi = pending_vmi();
            let unready = if matches!(phase, "Succeeded" | "Failed") {
                "PodTerminating"
            } else {
                "GuestNotRunning"
            };
            set_ready(&mut vmi, "False", unready);
            let mut pod = kv_pod(phase);
            if let Some(cs) = pod
                .status
                .as_mut()
                .and_then(|s| s.container_statuses.as_mut())
            {
                cs[0].ready = ready;
            }
            let d = decide(&snap_with_pod(vmi, pod));
            let w = updated(&d);
            assert_eq!(phase_of(w), Phase::Scheduling, "{phase} ready={ready}");
            assert_eq!(
                condition(w, "Ready").and_then(|c| c.reason.as_deref()),
                Some(unready)
            );
        }
    }
}

// vmi_test.go:1349-1377 "should set scheduling pod condition on the VirtualMachineInstance"
#[test]
fn unschedulable_pod_condition_is_copied() {
    let vmi = scheduling_vmi();
    let mut pod = kv_pod("Pending");
    add_pod_condition(
        &mut pod,
        PodCondition {
            type_: "PodScheduled".into(),
            status: "False".into(),
            reason: Some("Unschedulable".into()),
            message: Some("Insufficient memory".into()),
            ..Default::default()
        },
    );
    let d = decide(&snap_with_pod(vmi, pod));
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Scheduling);
    let c = condition(w, "PodScheduled").cloned().expect("PodScheduled");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("False", Some("Unschedulable"), Some("Insufficient memory"))
    );
}

// vmi_test.go:1379-1411 "it should remove scheduling pod condition from the VirtualMachineInstance if the pod"
#[test]
fn scheduling_condition_removed_when_pod_recovers() {
    for phase in ["Running", "Pending"] {
        let mut vmi = with_phase(pending_vmi(), Phase::Scheduling);
        set_ready(&mut vmi, "False", "PodConditionMissing");
        add_condition(
            &mut vmi,
            Condition {
                message: Some("Insufficient memory".into()),
                ..cond("PodScheduled", "False", "Unschedulable")
            },
        );
        let d = decide(&snap_with_pod(vmi, kv_pod(phase)));
        assert!(condition(updated(&d), "PodScheduled").is_none(), "{phase}");
    }
}

// vmi_test.go:1432-1462 "should hand over pod to virt-handler if pod is ready and running" and
// 1659-1669 "should update the virtual machine to scheduled if pod is ready, runnning and handed
// over to virt-handler"
#[test]
fn ready_pod_hands_over_to_virt_handler() {
    let mut vmi = scheduling_vmi();
    status_mut(&mut vmi).phase_transition_timestamps = Some(vec![PhaseTransitionTimestamp {
        phase: Phase::Scheduling,
        phase_transition_timestamp: Time(Utc.timestamp_opt(100, 0).single().expect("t")),
        extra: Default::default(),
    }]);
    let mut pod = kv_pod("Running");
    if let Some(spec) = pod.spec.as_mut() {
        spec.node_name = Some("node01".into());
    }
    let d = decide(&snap_with_pod(vmi, pod));
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Scheduled);
    assert_eq!(
        crate::api::label(&w.metadata, "kubevirt.io/nodeName"),
        Some("node01")
    );
    let st = w.status.clone().unwrap_or_default();
    assert_eq!(st.node_name.as_deref(), Some("node01"));
    assert_eq!(st.migration_transport, None);
    assert_eq!(
        st.active_pods,
        Some(
            [("virt-launch-uid".to_string(), "node01".to_string())]
                .into_iter()
                .collect()
        )
    );
    let ts = st.phase_transition_timestamps.unwrap_or_default();
    assert_eq!(
        ts.iter().map(|t| t.phase).collect::<Vec<_>>(),
        vec![Phase::Scheduling, Phase::Scheduled]
    );
    assert_eq!(ts[1].phase_transition_timestamp, now());
}

// vmi_test.go:1463-1486 "should not hand over pod to virt-handler if pod is ready and running"
#[test]
fn unready_infra_container_keeps_scheduling() {
    let vmi = scheduling_vmi();
    let mut pod = kv_pod("Running");
    if let Some(st) = pod.status.as_mut() {
        st.container_statuses = Some(vec![
            ContainerStatus {
                name: "compute".into(),
                state: None,
                ..Default::default()
            },
            ContainerStatus {
                name: "infra".into(),
                ready: false,
                state: running_state(),
                ..Default::default()
            },
        ]);
    }
    let d = decide(&snap_with_pod(vmi, pod));
    assert!(d.vmi_write().is_none() || phase_of(updated(&d)) == Phase::Scheduling);
    assert_eq!(d.to_phase, Phase::Scheduling);
}

// vmi_test.go:1605-1637 "should set an error condition if when pod cannot guarantee resources
// when cpu pinning has been requested"
#[test]
fn dedicated_cpus_need_guaranteed_qos() {
    let mut vmi = scheduling_vmi();
    vmi.spec.domain.cpu = Some(Cpu {
        dedicated_cpu_placement: Some(true),
        ..Default::default()
    });
    let d = decide(&snap_with_pod(vmi, kv_pod("Running")));
    assert_eq!(
        events(&d),
        vec![(
            EventType::Warning,
            "FailedGuaranteeResources".to_string(),
            "failed to guarantee pod resources".to_string()
        )]
    );
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Scheduling);
    assert_eq!(
        condition(w, "Synchronized").and_then(|c| c.reason.as_deref()),
        Some("FailedGuaranteeResources")
    );
    // an updateStatus-local error: recorded, not requeued
    assert!(!d.requeue());
    assert!(d.sync_error.is_none());
}

#[test]
fn dedicated_cpus_with_guaranteed_qos_are_scheduled() {
    let mut vmi = with_phase(pending_vmi(), Phase::Scheduling);
    vmi.spec.domain.cpu = Some(Cpu {
        dedicated_cpu_placement: Some(true),
        ..Default::default()
    });
    let mut pod = kv_pod("Running");
    if let Some(st) = pod.status.as_mut() {
        st.qos_class = Some("Guaranteed".into());
    }
    assert_eq!(
        phase_of(updated(&decide(&snap_with_pod(vmi, pod)))),
        Phase::Scheduled
    );
}

// vmi_test.go:1671-1685 "should update the virtual machine QOS class if the pod finally has a QOS
// class assigned"
#[test]
fn qos_class_copied_from_pod() {
    let vmi = scheduling_vmi();
    let mut pod = kv_pod("Running");
    if let Some(st) = pod.status.as_mut() {
        st.qos_class = Some("Guaranteed".into());
    }
    let d = decide(&snap_with_pod(vmi, pod));
    assert_eq!(new_status(&d).qos_class.as_deref(), Some("Guaranteed"));
}

// vmi_test.go:1711-1730 "should update the virtual machine to failed if pod was not ready,
// triggered by pod delete", 1732-1743 "... if compute container is terminated while still
// scheduling", 2018-2032 "should move the vmi to failed if pod is not handed over"
#[test]
fn scheduling_fails_when_pod_goes_down() {
    let mut terminated = kv_pod("Pending");
    if let Some(st) = terminated.status.as_mut() {
        st.container_statuses = Some(vec![ContainerStatus {
            name: "compute".into(),
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated::default()),
                ..Default::default()
            }),
            ..Default::default()
        }]);
    }
    for pod in [kv_pod("Succeeded"), kv_pod("Failed"), terminated] {
        let mut vmi = with_phase(pending_vmi(), Phase::Scheduling);
        set_ready(&mut vmi, "False", "PodTerminating");
        let d = decide(&snap_with_pod(vmi, pod));
        assert_eq!(phase_of(updated(&d)), Phase::Failed);
        assert_eq!(d.to_phase, Phase::Failed);
    }
}

// vmi_test.go:2034-2064 "should set a Synchronized=False condition when pod runs into image pull errors"
#[test]
fn image_pull_errors_become_synchronized_false() {
    for init in [true, false] {
        for reason in ["ErrImagePull", "ImagePullBackOff"] {
            let vmi = with_phase(pending_vmi(), Phase::Scheduling);
            let mut pod = kv_pod("Pending");
            let waiting = ContainerStatus {
                name: if init { "init" } else { "compute" }.into(),
                state: Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(reason.into()),
                        message: Some(format!("cannot pull: {reason}")),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            };
            if let Some(st) = pod.status.as_mut() {
                if init {
                    st.init_container_statuses = Some(vec![waiting]);
                } else {
                    st.container_statuses = Some(vec![waiting]);
                }
            }
            let d = decide(&snap_with_pod(vmi, pod));
            let c = condition(updated(&d), "Synchronized")
                .cloned()
                .expect("cond");
            assert_eq!(
                (
                    c.status.as_str(),
                    c.reason.as_deref(),
                    c.message.as_deref().map(str::to_string)
                ),
                (
                    "False",
                    Some(reason),
                    Some(format!("cannot pull: {reason}"))
                ),
                "init={init}"
            );
            assert_eq!(d.to_phase, Phase::Scheduling);
            assert!(!d.requeue());
        }
    }
}

// vmi_test.go:2066-2101 "should override Synchronized=False condition reason when it's already set"
#[test]
fn image_pull_reason_overrides_previous_reason() {
    for (prev, next) in [
        ("ErrImagePull", "ImagePullBackOff"),
        ("ImagePullBackOff", "ErrImagePull"),
    ] {
        let mut vmi = with_phase(pending_vmi(), Phase::Scheduling);
        status_mut(&mut vmi).conditions = Some(vec![cond("Synchronized", "False", prev)]);
        let mut pod = kv_pod("Pending");
        if let Some(st) = pod.status.as_mut() {
            st.init_container_statuses = Some(vec![ContainerStatus {
                state: Some(ContainerState {
                    waiting: Some(ContainerStateWaiting {
                        reason: Some(next.into()),
                        message: None,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }]);
        }
        let d = decide(&snap_with_pod(vmi, pod));
        assert_eq!(
            condition(updated(&d), "Synchronized").and_then(|c| c.reason.as_deref()),
            Some(next)
        );
    }
}

// vmi_test.go:2103-2117 "should add MigrationTransport to VMI status if
// MigrationTransportUnixAnnotation was set"
#[test]
fn migration_transport_unix_from_pod_annotation() {
    let vmi = with_phase(pending_vmi(), Phase::Scheduling);
    let mut pod = kv_pod("Running");
    annotate(&mut pod, "kubevirt.io/migrationTransportUnix", Some("true"));
    let d = decide(&snap_with_pod(vmi, pod));
    assert_eq!(new_status(&d).migration_transport.as_deref(), Some("Unix"));
}

#[test]
fn waiting_for_sync_with_pod_goes_scheduling() {
    let vmi = with_phase(pending_vmi(), Phase::WaitingForSync);
    let d = decide(&snap_with_pod(vmi, kv_pod("Pending")));
    assert_eq!(phase_of(updated(&d)), Phase::Scheduling);
}

#[test]
fn waiting_for_sync_deleted_drops_finalizers() {
    let mut vmi = with_phase(pending_vmi(), Phase::WaitingForSync);
    vmi.metadata.deletion_timestamp = Some(k8s_time(5));
    vmi.metadata.finalizers = Some(vec![
        "kubevirt.io/foregroundDeleteVirtualMachine".into(),
        "kubevirt.io/virtualMachineControllerFinalize".into(),
    ]);
    let d = decide(&snap(vmi));
    assert_eq!(updated(&d).metadata.finalizers, Some(vec![]));
}

#[test]
fn unknown_phase_is_an_update_status_error() {
    let vmi = with_phase(pending_vmi(), Phase::Unknown);
    let d = decide(&snap_with_pod(vmi, kv_pod("Running")));
    assert_eq!(
        d.update_status_error
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("unknown vmi phase Unknown")
    );
    assert!(d.requeue());
    assert!(d.vmi_write().is_none());
    assert!(d.new_vmi.is_none());
}

// ---------------------------------------------------------------------------------------------
// phase transition timestamps, patch vs update

#[test]
fn phase_transition_timestamp_recorded_once() {
    // Scheduling was already recorded (e.g. an earlier WaitingForSync → Scheduling): not again.
    let mut vmi = with_phase(pending_vmi(), Phase::WaitingForSync);
    let earlier = Time(Utc.timestamp_opt(100, 0).single().expect("t"));
    status_mut(&mut vmi).phase_transition_timestamps = Some(vec![PhaseTransitionTimestamp {
        phase: Phase::Scheduling,
        phase_transition_timestamp: earlier,
        extra: Default::default(),
    }]);
    let d = decide(&snap_with_pod(vmi, kv_pod("Pending")));
    let ts = updated(&d)
        .status
        .clone()
        .and_then(|s| s.phase_transition_timestamps)
        .unwrap_or_default();
    assert_eq!(ts.len(), 1);
    assert_eq!(ts[0].phase_transition_timestamp, earlier);
    let json = serde_json::to_value(&ts[0]).expect("json");
    assert_eq!(json["phaseTransitionTimestamp"], "1970-01-01T00:01:40Z");
}

#[test]
fn no_timestamp_when_phase_unchanged() {
    let vmi = with_phase(pending_vmi(), Phase::Scheduling);
    let d = decide(&snap_with_pod(vmi, kv_pod("Pending")));
    let st = d
        .new_vmi
        .as_ref()
        .and_then(|v| v.status.clone())
        .unwrap_or_default();
    assert_eq!(st.phase_transition_timestamps.unwrap_or_default().len(), 0);
}

#[test]
fn update_path_for_scheduling_patch_path_for_running_and_scheduled() {
    // Scheduling → full Update
    let vmi = with_phase(pending_vmi(), Phase::Scheduling);
    let d = decide(&snap_with_pod(vmi, kv_pod("Running")));
    assert!(matches!(d.vmi_write(), Some(VmiAction::UpdateVmi { .. })));

    // Running / Scheduled, pod gone → JSON patch with test+replace of the phase
    for phase in [Phase::Running, Phase::Scheduled] {
        let d = decide(&snap(with_phase(pending_vmi(), phase)));
        let ops = patch_ops(&d);
        let arr = ops.as_array().cloned().unwrap_or_default();
        let phase_ops: Vec<&Value> = arr
            .iter()
            .filter(|o| o["path"] == "/status/phase")
            .collect();
        assert_eq!(
            phase_ops,
            vec![
                &json!({"op": "test", "path": "/status/phase", "value": phase.as_str()}),
                &json!({"op": "replace", "path": "/status/phase", "value": "Failed"})
            ]
        );
        // no phaseTransitionTimestamps or Synchronized handling on the patch path
        assert!(
            arr.iter()
                .all(|o| o["path"] != "/status/phaseTransitionTimestamps")
        );
        assert_eq!(d.to_phase, Phase::Failed);
    }
}

// vmi_test.go:1987-2003 "should not remove sync conditions from virt-handler if it is in
// scheduled state"
#[test]
fn patch_path_keeps_synchronized_condition() {
    let mut vmi = with_phase(pending_vmi(), Phase::Scheduled);
    set_ready(&mut vmi, "False", "GuestNotRunning");
    add_condition(&mut vmi, cond("Synchronized", "False", ""));
    status_mut(&mut vmi).active_pods =
        Some([("virt-launch-uid", String::new())].into_iter().collect());
    let pod = ready_pod();
    let d = decide(&snap_with_pod(vmi, pod));
    let nv = d.new_vmi.clone().expect("computed");
    assert!(condition(&nv, "Synchronized").is_some());
    assert!(d.vmi_write().is_none(), "{:#?}", d.status_actions);
}

// vmi_test.go:1837-1865 "should do nothing if pod is handed to virt-handler"
#[test]
fn scheduled_vmi_with_pod_needs_no_write() {
    for phase in ["Running", "Unknown", "Succeeded", "Failed", "Pending"] {
        let mut vmi = with_phase(pending_vmi(), Phase::Scheduled);
        let unready = if matches!(phase, "Succeeded" | "Failed") {
            "PodTerminating"
        } else {
            "GuestNotRunning"
        };
        set_ready(&mut vmi, "False", unready);
        status_mut(&mut vmi).active_pods =
            Some([("virt-launch-uid", String::new())].into_iter().collect());
        let d = decide(&snap_with_pod(vmi, kv_pod(phase)));
        assert!(
            no_writes(&d),
            "pod phase {phase}: {:#?}",
            d.actions().collect::<Vec<_>>()
        );
    }
}

// vmi_test.go:2005-2016 "should mark the vmi as Failed if launcher-pod does not exist"
#[test]
fn running_or_scheduled_without_pod_fails() {
    for phase in [Phase::Running, Phase::Scheduled] {
        let d = decide(&snap(with_phase(pending_vmi(), phase)));
        assert_eq!(
            replaced(&patch_ops(&d), "/status/phase"),
            Some(json!("Failed"))
        );
    }
}

// vmi_test.go:1926-1945 "should add a ready condition if it is present on the pod and the VMI is
// in running state"
#[test]
fn running_vmi_copies_pod_ready_condition() {
    let mut vmi = with_phase(pending_vmi(), Phase::Running);
    status_mut(&mut vmi).conditions = None;
    let pod = ready_pod();
    let d = decide(&snap_with_pod(vmi, pod));
    let conds = replaced(&patch_ops(&d), "/status/conditions").expect("conditions patched");
    // unset times are written as null, as Go writes a zero metav1.Time
    assert_eq!(
        conds,
        json!([{"type": "Ready", "status": "True", "lastProbeTime": null, "lastTransitionTime": null}])
    );
}

// vmi_test.go:1947-1967 "should indicate on the ready condition if the pod is terminating"
#[test]
fn running_vmi_with_terminating_pod() {
    let mut vmi = with_phase(pending_vmi(), Phase::Running);
    status_mut(&mut vmi).conditions = None;
    let mut pod = kv_pod("Running");
    pod.metadata.deletion_timestamp = Some(k8s_time(3_000));
    let d = decide(&snap_with_pod(vmi, pod));
    let conds = replaced(&patch_ops(&d), "/status/conditions").expect("conditions patched");
    let arr = conds.as_array().cloned().unwrap_or_default();
    assert_eq!(arr.len(), 1);
    assert_eq!(arr[0]["reason"], "PodTerminating");
    assert_eq!(arr[0]["status"], "False");
    assert_eq!(arr[0]["message"], "virt-launcher pod is terminating");
    assert_eq!(arr[0]["lastTransitionTime"], "2026-03-04T05:06:07Z");
}

// vmi_test.go:1969-1985 "should add active pods to status if VMI is in running state"
#[test]
fn running_vmi_active_pods() {
    let mut vmi = with_phase(pending_vmi(), Phase::Running);
    set_ready(&mut vmi, "False", "PodConditionMissing");
    let mut pod = kv_pod("Running");
    pod.metadata.uid = Some("someUID".into());
    if let Some(s) = pod.spec.as_mut() {
        s.node_name = Some("someHost".into());
    }
    let d = decide(&snap_with_pod(vmi, pod));
    assert_eq!(
        replaced(&patch_ops(&d), "/status/activePods"),
        Some(json!({"someUID": "someHost"}))
    );
}

/// The decision on `vmi` with a ready pod running `pod_image`, the configured launcher image
/// being `a`.
fn decide_with_launcher_image(vmi: VirtualMachineInstance, pod_image: &str) -> VmiDecision {
    let mut s = snap_with_pod(vmi, ready_pod_with_compute_image(pod_image));
    s.launcher_image = Some("a".into());
    decide(&s)
}

// vmi_test.go:1867-1894 "should add outdated label if pod's image is outdated and VMI is in
// running state"
#[test]
fn outdated_launcher_label_added_and_synced_to_pod() {
    let d = decide_with_launcher_image(ready_running_vmi(), "madeup");
    let ops = patch_ops(&d);
    assert_eq!(
        replaced(&ops, "/status/launcherContainerImageVersion"),
        Some(json!("madeup"))
    );
    assert_eq!(
        replaced(&ops, "/metadata/labels"),
        Some(json!({"kubevirt.io/outdatedLauncherImage": ""}))
    );
    let pod_patch = pod_patch(&d.status_actions).expect("pod label patch");
    assert_eq!(
        replaced(&pod_patch, "/metadata/labels"),
        Some(json!({
            "kubevirt.io": "virt-launcher",
            "kubevirt.io/created-by": "1234",
            "kubevirt.io/outdatedLauncherImage": ""
        }))
    );
}

// vmi_test.go:1896-1924 "should remove outdated label if pod's image up-to-date and VMI is in
// running state"
#[test]
fn outdated_launcher_label_removed_when_up_to_date() {
    let mut vmi = ready_running_vmi();
    vmi.metadata.labels =
        Some([("kubevirt.io/outdatedLauncherImage".into(), String::new())].into());
    let d = decide_with_launcher_image(vmi, "a");
    let ops = patch_ops(&d);
    assert_eq!(
        replaced(&ops, "/status/launcherContainerImageVersion"),
        Some(json!("a"))
    );
    assert_eq!(replaced(&ops, "/metadata/labels"), Some(json!({})));
}

/// The failed `patch pods` of a rate-limited start (docs/performance.md, "With KubeVirt's
/// client rate limit"). The label patch tests the pod's whole label map as the pod cache holds
/// it (lifecycle.go:789-796, with the cached pod of vmi.go:342). The sync after the one that
/// sent it (for virt-handler's `Running` write, which arrived while the patch waited for the
/// client's token bucket) can read the cache before the patched pod's watch event: it builds
/// the same patch again, and its `test` no longer holds on the server (422). KubeVirt v1.9.0
/// does the same; once the cache has the patched pod nothing is sent.
#[test]
fn a_pod_cache_behind_the_label_patch_repeats_it_and_its_test_fails() {
    let label_patch = |vmi: &VirtualMachineInstance, pod: &Pod| {
        let d = decide(&snap_with_pod(vmi.clone(), pod.clone()));
        d.status_actions.into_iter().find_map(|a| match a {
            VmiAction::PatchPod { patch, why, .. } if why.contains("lifecycle.go:724") => {
                Some(patch)
            }
            _ => None,
        })
    };
    let mut scheduled = with_phase(pending_vmi(), Phase::Scheduled);
    scheduled.metadata.labels = Some([(labels::NODE_NAME.into(), "node01".into())].into());
    let cached = ready_pod();
    let sent = label_patch(&scheduled, &cached).expect("the node label patch");
    assert_eq!(
        serde_json::to_value(&sent).expect("patch json"),
        json!([
            {"op": "test", "path": "/metadata/labels",
             "value": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "1234"}},
            {"op": "replace", "path": "/metadata/labels",
             "value": {"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": "1234",
                       "kubevirt.io/nodeName": "node01"}}
        ])
    );
    let stored = apply_json_patch(&cached, &sent);

    // virt-handler wrote the VMI Running; the pod cache still holds the pod before the patch.
    let running = with_phase(scheduled, Phase::Running);
    let again = label_patch(&running, &cached).expect("the label patch again");
    assert_eq!(again, sent);
    let mut on_server = serde_json::to_value(&stored).expect("pod json");
    let refused = json_patch::patch(&mut on_server, &again).expect_err("the test op fails");
    assert!(
        matches!(refused.kind, json_patch::PatchErrorKind::TestFailed),
        "{refused}"
    );
    // With the patched pod in the cache the labels are in sync.
    assert_eq!(label_patch(&running, &stored), None);
}

// vmi_test.go:1018-1031 "should add request-evict-only annotation to the virt-launcher pod if
// annotation does not exist"
#[test]
fn ready_pod_gets_request_evict_only_annotation() {
    let vmi = ready_running_vmi();
    let mut pod = kv_pod("Running");
    annotate(&mut pod, EVICT_ONLY_ANNOTATION, None);
    let d = decide(&snap_with_pod(vmi, pod));
    let p = pod_patch(&d.sync_actions).expect("annotation patch");
    assert_eq!(
        p,
        json!([{"op": "add",
                "path": "/metadata/annotations/descheduler.alpha.kubernetes.io~1request-evict-only",
                "value": ""}])
    );
}

// lifecycle.go:207-214 with generator.go:116-165: a ready pod of a VMI with an SR-IOV interface
// gets `kubevirt.io/network-info` from Multus' network status of the interface's hashed pod
// interface (`pod` + SHA-256 prefix of `fast`).
#[test]
fn ready_pod_gets_the_network_info_annotation() {
    let mut vmi = ready_running_vmi();
    vmi.spec.domain.devices.interfaces = Some(vec![
        serde_json::from_value(json!({"name": "fast", "sriov": {}})).unwrap(),
    ]);
    vmi.spec.networks = Some(vec![
        serde_json::from_value(json!({"name": "fast", "multus": {"networkName": "sriov-net"}}))
            .unwrap(),
    ]);
    let mut pod = kv_pod("Running");
    annotate(&mut pod, EVICT_ONLY_ANNOTATION, Some(""));
    let status = r#"[{"name":"default/sriov-net","interface":"pod115dc3606fb","mac":"02:00:00:00:00:01",
        "device-info":{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:65:00.3"}}}]"#;
    annotate(&mut pod, "k8s.v1.cni.cncf.io/network-status", Some(status));
    let d = decide(&snap_with_pod(vmi, pod));
    let p = pod_patch(&d.sync_actions).expect("annotation patch");
    assert_eq!(
        p,
        json!([{"op": "add", "path": "/metadata/annotations/kubevirt.io~1network-info",
                "value": r#"{"interfaces":[{"network":"fast","deviceInfo":{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:65:00.3"}},"mac":"02:00:00:00:00:01"}]}"#}])
    );
}

#[test]
fn failed_pod_patch_in_sync_is_failed_pod_patch_error() {
    let vmi = scheduling_vmi();
    let mut pod = kv_pod("Running");
    annotate(&mut pod, EVICT_ONLY_ANNOTATION, None);
    let s = snap_with_pod(vmi, pod);
    let d = decide_after_sync(
        &s,
        &SyncOutcome::Failed {
            index: 0,
            error: ApiFailure::new(409, "Conflict", "the object has been modified"),
        },
    );
    assert!(d.requeue());
    let w = updated(&d);
    assert_eq!(
        condition(w, "Synchronized").and_then(|c| c.reason.as_deref()),
        Some("FailedPodPatch")
    );
    // updateStatus still ran with the pod: hand-over happens in the same sync
    assert_eq!(phase_of(w), Phase::Scheduled);
}

// vmi_test.go:2721-2781 "Eviction condition"
#[test]
fn eviction_requested_condition_and_pod_mark() {
    let mut vmi = with_phase(pending_vmi(), Phase::Running);
    status_mut(&mut vmi).evacuation_node_name = Some("test".into());
    status_mut(&mut vmi).node_name = Some("test".into());
    let mut pod = kv_pod("Running");
    if let Some(s) = pod.spec.as_mut() {
        s.node_name = Some("test".into());
    }
    let d = decide(&snap_with_pod(vmi, pod));
    let conds = replaced(&patch_ops(&d), "/status/conditions").expect("conditions");
    assert!(
        conds
            .as_array()
            .is_some_and(|a| a.iter().any(|c| c["type"] == "EvictionRequested"
                && c["status"] == "True"
                && c["reason"] == "EvictionRequested"))
    );
    assert!(d.sync_actions.iter().any(
        |a| matches!(a, VmiAction::PatchPod { why, .. } if why.contains("eviction-in-progress"))
    ));

    let mut vmi = with_phase(pending_vmi(), Phase::Running);
    add_condition(
        &mut vmi,
        cond("EvictionRequested", "True", "EvictionRequested"),
    );
    let d = decide(&snap_with_pod(vmi, kv_pod("Running")));
    let conds = replaced(&patch_ops(&d), "/status/conditions").expect("conditions");
    assert!(
        conds
            .as_array()
            .is_some_and(|a| a.iter().all(|c| c["type"] != "EvictionRequested"))
    );
}

// ---------------------------------------------------------------------------------------------
// readiness gate

// vmi_test.go:2783-2809 "should set VirtualMachineUnpaused=False pod condition when VMI is paused"
#[test]
fn paused_vmi_sets_gate_false() {
    let mut vmi = with_phase(pending_vmi(), Phase::Running);
    add_condition(&mut vmi, cond("Paused", "True", ""));
    let d = decide(&snap_with_pod(vmi, kv_pod("Running")));
    let (status, reason, message, body) = d
        .status_actions
        .iter()
        .find_map(|a| match a {
            VmiAction::PatchPodReadinessCondition {
                pod,
                status,
                reason,
                message,
                patch,
                ..
            } if pod == "test" => Some((
                status.clone(),
                reason.clone(),
                message.clone(),
                patch.clone(),
            )),
            _ => None,
        })
        .expect("gate patch");
    assert_eq!(
        (status.as_str(), reason.as_str(), message.as_str()),
        ("False", "Paused", "the virtual machine is paused")
    );
    assert_eq!(
        body,
        json!({"status": {"conditions": [{
            "type": "kubevirt.io/virtual-machine-unpaused",
            "status": "False",
            "reason": "Paused",
            "message": "the virtual machine is paused",
            "lastProbeTime": "2026-03-04T05:06:07Z",
            "lastTransitionTime": "2026-03-04T05:06:07Z"
        }]}})
    );
}

// vmi_test.go:2811-2834 "should set VirtualMachineUnpaused=True pod condition when VMI is not paused"
#[test]
fn unpaused_vmi_sets_gate_true_only_when_needed() {
    let vmi = with_phase(pending_vmi(), Phase::Running);
    let mut pod = kv_pod("Running");
    if let Some(st) = pod.status.as_mut() {
        st.conditions = None;
    }
    let d = decide(&snap_with_pod(vmi.clone(), pod));
    assert!(d.status_actions.iter().any(|a| matches!(a,
        VmiAction::PatchPodReadinessCondition { status, reason, message, .. }
            if status == "True" && reason == "NotPaused" && message == "the virtual machine is not paused")));

    let d = decide(&snap_with_pod(vmi, kv_pod("Running")));
    assert!(!patches_readiness_gate(&d));
}

// ---------------------------------------------------------------------------------------------
// memory overhead

// vmi_test.go:2891-2905 "should update memory overhead in VMI status from pod annotation"
#[test]
fn memory_overhead_from_pod_annotation() {
    let vmi = with_phase(pending_vmi(), Phase::Scheduling);
    let pod = pending_pod_with_overhead(&(256u64 * 1024 * 1024).to_string());
    let d = decide(&snap_with_pod(vmi.clone(), pod.clone()));
    let st = updated(&d).status.clone().unwrap_or_default();
    assert_eq!(
        st.memory.and_then(|m| m.memory_overhead).map(|q| q.0),
        Some("256Mi".to_string())
    );
    let mut off = snap_with_pod(vmi, pod);
    off.memory_overhead_report = false;
    let d = decide(&off);
    let st = d.new_vmi.and_then(|v| v.status.clone()).unwrap_or_default();
    assert_eq!(st.memory, None);
}

// vmi_test.go:2907-2917 "should not update memory overhead if pod annotation is missing"
#[test]
fn memory_overhead_absent_without_annotation() {
    let vmi = with_phase(pending_vmi(), Phase::Scheduling);
    let d = decide(&snap_with_pod(vmi, kv_pod("Pending")));
    let st = d.new_vmi.and_then(|v| v.status.clone()).unwrap_or_default();
    assert_eq!(st.memory, None);
}

#[test]
fn memory_overhead_not_divisible_by_1024_is_plain_bytes() {
    let vmi = with_phase(pending_vmi(), Phase::Scheduling);
    let pod = pending_pod_with_overhead("282971493");
    let d = decide(&snap_with_pod(vmi, pod));
    let st = updated(&d).status.clone().unwrap_or_default();
    assert_eq!(
        st.memory.and_then(|m| m.memory_overhead).map(|q| q.0),
        Some("282971493".to_string())
    );
}

// ---------------------------------------------------------------------------------------------
// finalizers

// vmi_test.go:1745-1761 "should replace the deprecated finalizer with the domain-qualified one
// during reconciliation"
#[test]
fn legacy_finalizer_migrated_on_running_vmi() {
    let mut vmi = with_phase(pending_vmi(), Phase::Running);
    vmi.metadata.finalizers = Some(vec!["foregroundDeleteVirtualMachine".into()]);
    let d = decide(&snap_with_pod(vmi, kv_pod("Running")));
    let ops = patch_ops(&d);
    assert!(ops.as_array().is_some_and(|a| {
        a.contains(&json!({
        "op": "test", "path": "/metadata/finalizers", "value": ["foregroundDeleteVirtualMachine"]}))
    }));
    assert_eq!(
        replaced(&ops, "/metadata/finalizers"),
        Some(json!(["kubevirt.io/foregroundDeleteVirtualMachine"]))
    );
}

// vmi_test.go:1763-1787 "should remove the fore ground finalizer if no pod is present and the vmi is in"
#[test]
fn foreground_finalizer_removed_from_final_vmi_without_pods() {
    for phase in [Phase::Succeeded, Phase::Failed] {
        for finalizer in [
            "foregroundDeleteVirtualMachine",
            "kubevirt.io/foregroundDeleteVirtualMachine",
        ] {
            let mut vmi = with_phase(pending_vmi(), phase);
            status_mut(&mut vmi).launcher_container_image_version = Some("madeup".into());
            vmi.metadata.labels =
                Some([("kubevirt.io/outdatedLauncherImage".into(), String::new())].into());
            vmi.metadata.finalizers = Some(vec![finalizer.into()]);
            let d = decide(&snap(vmi));
            let w = updated(&d);
            assert!(
                !w.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key("kubevirt.io/outdatedLauncherImage"))
            );
            assert_eq!(
                w.status
                    .as_ref()
                    .and_then(|s| s.launcher_container_image_version.clone()),
                None
            );
            assert_eq!(phase_of(w), phase);
            assert_eq!(w.metadata.finalizers, Some(vec![]), "{phase:?} {finalizer}");
        }
    }
}

#[test]
fn foreground_finalizer_kept_while_pods_remain() {
    let mut vmi = with_phase(pending_vmi(), Phase::Failed);
    vmi.metadata.finalizers = Some(vec!["kubevirt.io/foregroundDeleteVirtualMachine".into()]);
    let d = decide(&snap_with_pod(vmi, kv_pod("Failed")));
    let nv = d.new_vmi.clone().expect("computed");
    assert_eq!(
        nv.metadata.finalizers,
        Some(vec![
            "kubevirt.io/foregroundDeleteVirtualMachine".to_string()
        ])
    );
}

// vmi_test.go:1789-1835 "VM controller finalizer"
#[test]
fn vm_controller_finalizer_stripped_when_owner_vm_gone() {
    for (has_owner, vm_exists, expect_finalizer) in [
        (false, false, false),
        (false, true, false),
        (true, true, true),
    ] {
        let mut vmi = with_phase(pending_vmi(), Phase::Succeeded);
        vmi.metadata.finalizers = Some(vec![
            "kubevirt.io/virtualMachineControllerFinalize".into(),
            "foregroundDeleteVirtualMachine".into(),
            "kubevirt.io/foregroundDeleteVirtualMachine".into(),
        ]);
        if has_owner {
            vmi.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachine".into(),
                name: "testvmi".into(),
                uid: "123".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]);
        }
        let mut s = snap(vmi);
        s.owner_vm_uid = vm_exists.then(|| "123".to_string());
        let d = decide(&s);
        let f = updated(&d).metadata.finalizers.clone().unwrap_or_default();
        assert!(
            !f.iter()
                .any(|x| x.contains("foregroundDeleteVirtualMachine"))
        );
        assert_eq!(
            f.iter()
                .any(|x| x == "kubevirt.io/virtualMachineControllerFinalize"),
            expect_finalizer,
            "owner={has_owner} vm={vm_exists}"
        );
    }
}

#[test]
fn owner_vm_with_other_uid_does_not_count() {
    let mut vmi = with_phase(pending_vmi(), Phase::Failed);
    vmi.metadata.finalizers = Some(vec!["kubevirt.io/virtualMachineControllerFinalize".into()]);
    vmi.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "kubevirt.io/v1".into(),
        kind: "VirtualMachine".into(),
        name: "testvmi".into(),
        uid: "old".into(),
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    let mut s = snap(vmi);
    s.owner_vm_uid = Some("recreated".into());
    assert_eq!(updated(&decide(&s)).metadata.finalizers, Some(vec![]));
}

#[test]
fn virt_api_finalizer_stand_in() {
    // added to a live VMI
    let mut s = snap(pending_vmi());
    s.ensure_vmi_finalizer = true;
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let d = decide(&s);
    assert_eq!(
        updated(&d).metadata.finalizers,
        Some(vec![
            "kubevirt.io/foregroundDeleteVirtualMachine".to_string()
        ])
    );
    // also on the patch path
    let mut s = snap_with_pod(with_phase(pending_vmi(), Phase::Running), kv_pod("Running"));
    s.ensure_vmi_finalizer = true;
    assert_eq!(
        replaced(&patch_ops(&decide(&s)), "/metadata/finalizers"),
        Some(json!(["kubevirt.io/foregroundDeleteVirtualMachine"]))
    );
    // not on a VMI being deleted
    let mut vmi = pending_vmi();
    vmi.metadata.deletion_timestamp = Some(k8s_time(1));
    let mut s = snap(vmi);
    s.ensure_vmi_finalizer = true;
    assert_eq!(updated(&decide(&s)).metadata.finalizers, None);
    // off: the controller alone never adds it
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    assert_eq!(updated(&decide(&s)).metadata.finalizers, None);
}

// ---------------------------------------------------------------------------------------------
// explanation

#[test]
fn every_action_says_why_with_a_source_line() {
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let d = decide(&s);
    assert!(d.actions().count() >= 3);
    for a in d.actions() {
        assert!(a.why().contains(".go:"), "{a:?}");
    }
    assert!(d.explanation.iter().any(|l| l.contains("Scheduling")));
}

#[test]
fn decision_serialises_for_the_inspector() {
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let v = serde_json::to_value(decide(&s)).expect("serialises");
    assert_eq!(v["sync_actions"][0]["action"], "CreatePod");
    assert_eq!(v["to_phase"], "Scheduling");
}

// ---------------------------------------------------------------------------------------------
// a whole lifecycle through a toy executor (applies JSON patches for real, so the `test` ops
// must match the objects the decision itself wrote)

fn apply_json_patch<T: serde::Serialize + serde::de::DeserializeOwned>(
    obj: &T,
    p: &json_patch::Patch,
) -> T {
    let mut v = serde_json::to_value(obj).expect("serialise");
    json_patch::patch(&mut v, p).unwrap_or_else(|e| panic!("patch {p} failed: {e}"));
    serde_json::from_value(v).expect("deserialise")
}

fn execute(s: &mut VmiSnapshot) -> VmiDecision {
    let d = decide(s);
    let mut created = None;
    for a in &d.sync_actions {
        match a {
            VmiAction::CreatePod { pod, .. } => {
                let mut p = (**pod).clone();
                p.metadata.name = Some("virt-launcher-testvmi-abcde".into());
                p.metadata.uid = Some("pod-uid-1".into());
                created = Some(Box::new(p));
            }
            VmiAction::DeletePod { name, .. } => {
                s.pods.retain(|p| p.metadata.name.as_deref() != Some(name));
            }
            VmiAction::PatchPod { name, patch, .. } => {
                for p in s
                    .pods
                    .iter_mut()
                    .filter(|p| p.metadata.name.as_deref() == Some(name))
                {
                    *p = Arc::new(apply_json_patch(p.as_ref(), patch));
                }
            }
            other => panic!("unexpected sync action {other:?}"),
        }
    }
    let after = decide_after_sync(
        s,
        &SyncOutcome::Succeeded {
            created_pod: created.clone(),
        },
    );
    if let Some(p) = created {
        s.pods.push(Arc::new(*p));
    }
    for a in &after.status_actions {
        match a {
            VmiAction::UpdateVmi { vmi, .. } => s.vmi = Arc::new((**vmi).clone()),
            VmiAction::PatchVmi { patch, .. } => {
                s.vmi = Arc::new(apply_json_patch(s.vmi.as_ref(), patch))
            }
            VmiAction::PatchPod { name, patch, .. } => {
                for p in s
                    .pods
                    .iter_mut()
                    .filter(|p| p.metadata.name.as_deref() == Some(name))
                {
                    *p = Arc::new(apply_json_patch(p.as_ref(), patch));
                }
            }
            VmiAction::PatchPodReadinessCondition { pod, condition, .. } => {
                for p in s
                    .pods
                    .iter_mut()
                    .filter(|p| p.metadata.name.as_deref() == Some(pod))
                {
                    let st = Arc::make_mut(p).status.get_or_insert_with(Default::default);
                    let conds = st.conditions.get_or_insert_with(Vec::new);
                    conds.retain(|c| c.type_ != condition.type_);
                    conds.push((**condition).clone());
                }
            }
            VmiAction::Event { .. } => {}
            other => panic!("unexpected status action {other:?}"),
        }
    }
    after
}

#[test]
fn lifecycle_from_creation_to_finalizer_removal() {
    let mut vmi = with_phase(pending_vmi(), Phase::Unset);
    vmi.status = None;
    let mut s = VmiSnapshot::new(vmi, now());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    s.launcher_image = Some("quay.io/kubevirt/virt-launcher:v1.9.0".into());

    // 1. "" → pod created, Scheduling, finalizer added (virt-api stand-in)
    execute(&mut s);
    assert_eq!(s.vmi.phase(), Phase::Scheduling);
    assert_eq!(s.pods.len(), 1);
    assert!(has_finalizer(
        &s.vmi,
        "kubevirt.io/foregroundDeleteVirtualMachine"
    ));

    // 2. the informer now has the pod: status.activePods is filled in, then nothing changes
    let d = execute(&mut s);
    assert!(
        matches!(d.vmi_write(), Some(VmiAction::UpdateVmi { why, .. }) if why.starts_with("status.activePods changed"))
    );
    assert_eq!(
        s.vmi.status.as_ref().and_then(|st| st.active_pods.clone()),
        Some(
            [("pod-uid-1".to_string(), String::new())]
                .into_iter()
                .collect()
        )
    );
    let d = execute(&mut s);
    assert!(no_writes(&d), "{:#?}", d.status_actions);

    // 3. the pod is scheduled and running → Scheduled, node label synced to the pod next time
    if let Some(p) = s.pods.first_mut().map(Arc::make_mut) {
        p.spec.get_or_insert_with(Default::default).node_name = Some("node01".into());
        let st = p.status.get_or_insert_with(Default::default);
        st.phase = Some("Running".into());
        st.qos_class = Some("Burstable".into());
        st.container_statuses = Some(vec![ContainerStatus {
            name: "compute".into(),
            state: running_state(),
            ..Default::default()
        }]);
    }
    execute(&mut s);
    assert_eq!(s.vmi.phase(), Phase::Scheduled);
    execute(&mut s); // Scheduled: patch path; syncs kubevirt.io/nodeName to the pod
    assert_eq!(
        crate::api::label(&s.pods[0].metadata, "kubevirt.io/nodeName"),
        Some("node01")
    );

    // 4. virt-handler reports Running and the pod becomes Ready
    status_mut(Arc::make_mut(&mut s.vmi)).phase = Some(Phase::Running);
    if let Some(c) = Arc::make_mut(&mut s.pods[0])
        .status
        .as_mut()
        .and_then(|st| st.conditions.as_mut())
    {
        c.push(PodCondition {
            type_: "Ready".into(),
            status: "True".into(),
            last_transition_time: Some(k8s_time(5_000)),
            ..Default::default()
        });
    }
    execute(&mut s);
    assert_eq!(
        s.vmi.condition("Ready").map(|c| c.status.as_str()),
        Some("True")
    );
    let d = execute(&mut s);
    assert!(no_writes(&d), "{:#?}", d.status_actions);

    // 5. the pod vanishes → Failed (patch path), then the finalizer goes (update path)
    s.pods.clear();
    execute(&mut s);
    assert_eq!(s.vmi.phase(), Phase::Failed);
    execute(&mut s);
    assert!(!has_finalizer(
        &s.vmi,
        "kubevirt.io/foregroundDeleteVirtualMachine"
    ));
    let ts: Vec<Phase> = s
        .vmi
        .status
        .as_ref()
        .and_then(|st| st.phase_transition_timestamps.clone())
        .unwrap_or_default()
        .iter()
        .map(|t| t.phase)
        .collect();
    // Running and Failed were reached on the patch path / by virt-handler: no timestamps
    assert_eq!(ts, vec![Phase::Scheduling, Phase::Scheduled]);
    let d = execute(&mut s);
    assert!(no_writes(&d));
}

/// A VMI the VM controller deleted because it had failed carries a deletionTimestamp when the
/// VMI controller first sees it: its ending is the pod's story, not "after the VMI was deleted"
/// (which read as if the deletion had caused the failure: a flaky progress line in
/// controller_e2e `a_deleted_launcher_pod_says_why_the_vm_starts_again`).
#[test]
fn an_ending_is_after_the_deletion_only_when_the_deletion_came_first() {
    let at = |secs: i64| Utc.timestamp_opt(secs, 0).single().expect("t");
    let failed_at = |ended: i64, deleted: Option<i64>| {
        let mut vmi = scheduling_vmi();
        status_mut(&mut vmi).phase = Some(Phase::Failed);
        status_mut(&mut vmi).phase_transition_timestamps = Some(vec![
            PhaseTransitionTimestamp {
                phase: Phase::Running,
                phase_transition_timestamp: Time(at(100)),
                extra: Default::default(),
            },
            PhaseTransitionTimestamp {
                phase: Phase::Failed,
                phase_transition_timestamp: Time(at(ended)),
                extra: Default::default(),
            },
        ]);
        vmi.metadata.deletion_timestamp = deleted.map(|d| {
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(d).expect("t"),
            )
        });
        observed_ending_reason(&snap(vmi))
    };
    let after = "virt-handler reported it Failed after the VMI was deleted";
    assert_eq!(failed_at(200, Some(150)), after, "deleted first");
    for (ended, deleted) in [(200, Some(200)), (200, Some(201)), (200, None)] {
        let reason = failed_at(ended, deleted);
        assert_ne!(reason, after, "ended at {ended}, deleted at {deleted:?}");
        assert!(
            reason.starts_with("virt-handler reported it Failed"),
            "{reason}"
        );
    }
}

/// An ending virt-handler wrote while the controller's pod cache still held the launcher pod as
/// running says only "virt-handler reported it Failed"; the pod's deletion reaches the pod
/// informer a moment later and the next reconcile names it. The first cause seen stays (the pod
/// vanishing later does not replace "was deleted"), and a new VMI under the key starts afresh.
/// (The flaky progress line of controller_e2e `a_deleted_launcher_pod_says_why_the_vm_starts_again`
/// was the first case left as it was.)
#[test]
fn an_observed_ending_gets_its_cause_when_the_pod_cache_catches_up() {
    let at = |secs: i64| Utc.timestamp_opt(secs, 0).single().expect("t");
    let mut vmi = scheduling_vmi();
    vmi.metadata.uid = Some(VMI_UID.into());
    status_mut(&mut vmi).phase = Some(Phase::Failed);
    status_mut(&mut vmi).phase_transition_timestamps = Some(vec![
        PhaseTransitionTimestamp {
            phase: Phase::Running,
            phase_transition_timestamp: Time(at(100)),
            extra: Default::default(),
        },
        PhaseTransitionTimestamp {
            phase: Phase::Failed,
            phase_transition_timestamp: Time(at(200)),
            extra: Default::default(),
        },
    ]);
    let alive = kv_pod("Running");
    let mut deleting = alive.clone();
    deleting.metadata.deletion_timestamp = Some(k8s_time(199));

    let first = observed_ending(&snap_with_pod(vmi.clone(), alive.clone()), None, at(201))
        .expect("a first ending is recorded");
    assert_eq!(first.reason, "virt-handler reported it Failed");
    assert_eq!(
        (first.uid.as_str(), first.from_phase.as_str()),
        (VMI_UID, "Running")
    );
    assert_eq!(
        observed_ending(&snap_with_pod(vmi.clone(), alive), Some(&first), at(202)),
        None,
        "nothing new"
    );

    let refined = observed_ending(&snap_with_pod(vmi.clone(), deleting), Some(&first), at(203))
        .expect("the cause is filled in");
    assert_eq!(
        refined.reason,
        "virt-handler reported it Failed; its launcher pod test was deleted"
    );
    assert_eq!(refined.at, first.at, "when it ended stays");
    assert_eq!(refined.from_phase, first.from_phase);

    assert_eq!(
        observed_ending(&snap(vmi.clone()), Some(&refined), at(204)),
        None,
        "a cause once seen stays"
    );

    let mut next = vmi;
    next.metadata.uid = Some("another-vmi".into());
    let fresh = observed_ending(&snap(next), Some(&refined), at(205)).expect("a new VMI");
    assert_eq!(fresh.uid, "another-vmi");
    assert_eq!(
        fresh.reason,
        "virt-handler reported it Failed; its launcher pod is gone"
    );
    assert_eq!(fresh.at, at(205));
}

/// The statuses serialised once answer both questions as the two serialisations did: whether
/// the VMI changed (`equality.Semantic.DeepEqual`, where a nil `migrationState` differs from
/// a pointer to an empty one) and which top-level status fields changed.
#[test]
fn changed_status_fields_are_named_from_one_serialisation() {
    let old = VirtualMachineInstance {
        status: Some(VirtualMachineInstanceStatus {
            phase: Some(Phase::Pending),
            active_pods: Some(Default::default()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut new = old.clone();
    let status = new.status.as_mut().expect("status");
    status.phase = Some(Phase::Scheduling);
    status.active_pods = None;
    status.node_name = Some("node-1".into());
    let values = StatusValues::of(&old, &new);
    assert!(!values.equal());
    assert_eq!(
        changed_fields(Some(&values), &old, &new),
        ["status.nodeName", "status.phase"]
    );
    assert!(changed_fields(None, &old, &old).is_empty());

    // An empty list and no list are the same; a pointer to an empty struct is not nothing.
    let mut emptied = old.clone();
    emptied.status.as_mut().expect("status").conditions = Some(vec![]);
    assert!(StatusValues::of(&old, &emptied).equal());
    assert!(changed_fields(Some(&StatusValues::of(&old, &emptied)), &old, &emptied).is_empty());
    let mut migrating = old.clone();
    migrating.status.as_mut().expect("status").migration_state = Some(Box::new(json!({})));
    assert!(!StatusValues::of(&old, &migrating).equal());
    assert!(!semantic_eq(&old.status, &migrating.status));
    // Labels are named with the metadata maps.
    migrating.metadata.labels = Some([("a".to_string(), "1".to_string())].into());
    assert_eq!(changed_fields(None, &old, &migrating), ["metadata.labels"]);
}

/// lifecycle.go:306 with datavolumes.go:143-178: updateStatus writes the aggregated
/// `DataVolumesReady` condition, and leaves an equal status and reason alone (UpdateCondition).
#[test]
fn data_volumes_ready_condition_is_written() {
    let cond = |status: &str, reason: &str, message: &str| Condition {
        type_: "DataVolumesReady".into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        ..Default::default()
    };
    let mut s = snap(pending_vmi());
    s.storage.volumes_ready = false;
    s.storage.data_volumes_ready = Some(cond(
        "Unknown",
        "NotAllDVsReady",
        "Not all of the VMI's DVs are ready",
    ));
    let d = decide(&s);
    let c = condition(updated(&d), "DataVolumesReady")
        .cloned()
        .expect("DataVolumesReady");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("Unknown", Some("NotAllDVsReady"))
    );
}

/// lifecycle.go:404-411: at the hand-over to virt-handler (pod ready) updateStatus writes
/// `volumeStatus`, one entry per volume with the claims' `persistentVolumeClaimInfo`.
#[test]
fn the_hand_over_writes_volume_status() {
    let mut vmi = with_phase(pending_vmi(), Phase::Scheduling);
    vmi.spec.volumes = Some(
        serde_json::from_value(json!([
            {"name": "root", "containerDisk": {"image": "img"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "c"}}
        ]))
        .expect("volumes"),
    );
    let mut s = snap(vmi);
    // The launcher pod has the claim's volume: it is no hotplug volume.
    let mut pod = kv_pod("Running");
    pod.spec.get_or_insert_with(Default::default).volumes = Some(
        serde_json::from_value(
            json!([{"name": "data", "persistentVolumeClaim": {"claimName": "c"}}]),
        )
        .unwrap(),
    );
    s.pods = vec![Arc::new(pod)];
    s.storage.claims.insert(
        "c".into(),
        json!({"claimName": "c", "filesystemOverhead": "0.055"}),
    );
    let d = decide(&s);
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Scheduled, "{:?}", d.explanation);
    assert_eq!(
        w.volume_status_entries(),
        vec![
            json!({"name": "data", "target": "",
                   "persistentVolumeClaimInfo": {"claimName": "c", "filesystemOverhead": "0.055"}}),
            json!({"name": "root", "target": ""}),
        ]
    );
}

/// lifecycle.go:415 (pkg/network/controllers/vmi.go:81-104): at the hand-over the pod
/// network's interface status gets its pod interface, `eth0` without a Multus report.
#[test]
fn the_hand_over_writes_interface_status() {
    let mut vmi = with_phase(pending_vmi(), Phase::Scheduling);
    vmi.spec.networks =
        Some(serde_json::from_value(json!([{"name": "default", "pod": {}}])).expect("networks"));
    let mut s = snap(vmi);
    s.pods = vec![Arc::new(kv_pod("Running"))];
    let d = decide(&s);
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Scheduled);
    assert_eq!(
        w.interface_status_entries(),
        vec![json!({"name": "default", "podInterfaceName": "eth0"})]
    );
}

/// lifecycle.go:502-508: a Running VMI whose spec the VM controller hot-plugged (a socket and
/// guest memory beyond the status) gets HotVCPUChange and HotMemoryChange in its status patch.
#[test]
fn running_vmi_gets_the_hotplug_conditions() {
    let mut vmi = ready_running_vmi();
    vmi.spec.domain.cpu =
        Some(serde_json::from_value(json!({"sockets": 2, "cores": 1, "maxSockets": 4})).unwrap());
    vmi.spec.domain.memory =
        Some(serde_json::from_value(json!({"guest": "2Gi", "maxGuest": "4Gi"})).unwrap());
    let status = vmi.status.as_mut().unwrap();
    status.memory = Some(serde_json::from_value(json!({"guestRequested": "1Gi"})).unwrap());
    status.extra =
        serde_json::from_value(json!({"currentCPUTopology": {"sockets": 1, "cores": 1}})).unwrap();
    let d = decide(&snap_with_pod(vmi, ready_pod()));
    let conds = replaced(&patch_ops(&d), "/status/conditions").expect("conditions patched");
    let status = |t: &str| {
        conds
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == t)
            .map(|c| c["status"].clone())
    };
    assert_eq!(status("HotVCPUChange"), Some(json!("True")));
    assert_eq!(status("HotMemoryChange"), Some(json!("True")));
}

/// Backend storage at the pod-creation point (lifecycle.go:126-141, storage.go:112-136): no
/// claim → create it and no pod; a Pending claim → no pod, `BackendStorageNotReady`; a Bound
/// claim → the pod, and the claim's `volumeStatus` entry.
#[test]
fn backend_storage_holds_the_pod_until_its_claim_is_bound() {
    use crate::controller::vmi::backend_storage::{BackendStorageState, Claim, new_claim};
    let mut vmi = pending_vmi();
    vmi.spec.domain.devices.tpm = serde_json::from_value(json!({"persistent": true})).ok();
    let mut s = snap(vmi);
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let new_claim = new_claim(&s.vmi, "sc", "ReadWriteOnce");
    s.backend_storage = BackendStorageState {
        needed: true,
        claim: None,
        new_claim: Ok(new_claim.clone()),
    };
    let d = decide(&s);
    assert!(
        matches!(&d.sync_actions[..], [VmiAction::CreateBackendStoragePvc { pvc, .. }] if **pvc == new_claim),
        "{:?}",
        d.sync_actions
    );
    assert!(!needs_rendered_pod(&s));

    let claim = |phase: &str| Claim {
        name: "persistent-state-for-testvmi-x1".into(),
        phase: phase.into(),
        access_modes: vec!["ReadWriteOnce".into()],
        class_wffc: Ok(false),
    };
    s.backend_storage.claim = Some(claim("Pending"));
    let d = decide(&s);
    assert!(d.sync_actions.is_empty());
    let new = d.new_vmi.expect("status written");
    let c = new.condition("Synchronized").expect("Synchronized");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
        ("False", Some("BackendStorageNotReady"), Some("PVC pending"))
    );

    s.backend_storage.claim = Some(claim("Bound"));
    assert!(needs_rendered_pod(&s));
    let d = decide(&s);
    assert!(matches!(&d.sync_actions[..], [VmiAction::CreatePod { .. }]));
    let new = d.new_vmi.expect("status written");
    let entries = new.volume_status_entries();
    assert_eq!(
        entries,
        vec![
            json!({"name": "persistent-state-for-this-vm", "target": "", "persistentVolumeClaimInfo":
            {"claimName": "persistent-state-for-testvmi-x1", "accessModes": ["ReadWriteOnce"]}})
        ]
    );
}

/// Rendering the launcher pod defaults the VMI's own probes (rendercontainer.go:167-181), and
/// the write of that sync carries them (vmi.go:355-357); measured against KubeVirt v1.9.0's
/// virt-controller by tests/reference_conformance.rs. A sync that renders nothing leaves them.
#[test]
fn the_sync_that_renders_the_pod_writes_the_probe_defaults() {
    let mut vmi = pending_vmi();
    vmi.spec.readiness_probe = Some(
        serde_json::from_value(json!({"tcpSocket": {"port": 22}, "periodSeconds": 5})).unwrap(),
    );
    vmi.spec.liveness_probe =
        Some(serde_json::from_value(json!({"httpGet": {"port": 80}})).unwrap());
    let mut s = snap(vmi.clone());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let d = decide_after_sync(
        &s,
        &SyncOutcome::Succeeded {
            created_pod: Some(Box::new(created_pod())),
        },
    );
    let spec = serde_json::to_value(&updated(&d).spec).unwrap();
    assert_eq!(
        spec["readinessProbe"],
        json!({"tcpSocket": {"port": 22}, "periodSeconds": 5, "timeoutSeconds": 1,
               "successThreshold": 1, "failureThreshold": 3})
    );
    assert_eq!(
        spec["livenessProbe"],
        json!({"httpGet": {"port": 80}, "periodSeconds": 10, "timeoutSeconds": 1,
               "successThreshold": 1, "failureThreshold": 3})
    );
    // Scheduling, pod present: no render, the probes stay as they are.
    let mut v = with_phase(vmi, Phase::Scheduling);
    v.spec.readiness_probe =
        Some(serde_json::from_value(json!({"tcpSocket": {"port": 22}})).unwrap());
    let d = decide(&snap_with_pod(v, kv_pod("Pending")));
    if let Some(VmiAction::UpdateVmi { vmi, .. }) = d
        .status_actions
        .iter()
        .find(|a| matches!(a, VmiAction::UpdateVmi { .. }))
    {
        assert_eq!(
            serde_json::to_value(&vmi.spec).unwrap()["readinessProbe"],
            json!({"tcpSocket": {"port": 22}})
        );
    }
}

// ---------------------------------------------------------------------------------------------
// WaitForFirstConsumer: the temporary pod (lifecycle.go:152-154, 188-193, 337-359, 1085-1143)

/// The storage of a VMI whose DataVolume `test1` is in phase WaitForFirstConsumer: it lets the
/// (temporary) pod go, and its `DataVolumesReady` is False.
fn wffc_storage(s: &mut VmiSnapshot) {
    s.storage.volumes_ready = true;
    s.storage.wffc = true;
    s.storage.has_wffc_data_volume = true;
    s.storage.data_volumes_ready = Some(cond("DataVolumesReady", "False", "NotAllDVsReady"));
}

/// A temporary pod of `testvmi` in `phase`, as [`crate::launcher::pod::make_temporary`] marks it.
fn temp_pod(phase: &str) -> Pod {
    let mut pod = kv_pod(phase);
    crate::launcher::pod::make_temporary(&mut pod);
    pod
}

fn deleted_temporary_pods(d: &VmiDecision) -> Vec<&str> {
    d.sync_actions
        .iter()
        .filter_map(|a| match a {
            VmiAction::DeleteTemporaryPod { name, .. } => Some(name.as_str()),
            _ => None,
        })
        .collect()
}

// vmi_test.go:337-376 "should create a doppleganger Pod on VMI creation when DataVolume is in
// WaitForFirstConsumer state"
#[test]
fn a_wffc_data_volume_gets_the_temporary_pod_and_the_vmi_stays_pending_provisioning() {
    let mut s = snap(pending_vmi());
    wffc_storage(&mut s);
    let mut rendered = rendered_pod();
    crate::launcher::pod::make_temporary(&mut rendered);
    s.rendered_pod = Some(Ok(rendered.into()));
    let d = decide(&s);
    let [VmiAction::CreatePod { pod, why }] = d.sync_actions.as_slice() else {
        panic!("one pod creation, got {:#?}", d.sync_actions);
    };
    let compute = &pod.spec.as_ref().expect("spec").containers[0];
    assert_eq!(
        compute.command.as_deref().map(|c| c.join(" ")).as_deref(),
        Some("/bin/bash -c echo bound PVCs")
    );
    assert!(why.contains("lifecycle.go:152-154"), "{why}");
    assert_eq!(events(&d)[0].1, "SuccessfulCreate");
    let w = updated(&d);
    assert_eq!(
        phase_of(w),
        Phase::Pending,
        "a temporary pod is no launcher pod"
    );
    assert_eq!(
        condition(w, "Provisioning").map(|c| c.status.as_str()),
        Some("True")
    );
    assert_eq!(
        condition(w, "DataVolumesReady").map(|c| c.status.as_str()),
        Some("False")
    );
    assert_eq!(
        condition(w, "Ready").and_then(|c| c.reason.as_deref()),
        Some("PodNotExists")
    );
}

// vmi_test.go:378-408 "should not delete a doppleganger Pod on VMI creation when DataVolume is in
// WaitForFirstConsumer state"
#[test]
fn the_temporary_pod_stays_while_the_data_volume_waits() {
    let mut s = snap_with_pod(pending_vmi(), temp_pod("Running"));
    wffc_storage(&mut s);
    let d = decide(&s);
    assert!(d.sync_actions.is_empty(), "{:#?}", d.sync_actions);
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Pending);
    assert_eq!(
        condition(w, "Provisioning").map(|c| c.status.as_str()),
        Some("True")
    );
}

// vmi_test.go:410-435 "should delete a doppleganger Pod on VMI creation when DataVolume is no
// longer in WaitForFirstConsumer state"
#[test]
fn the_temporary_pod_is_deleted_once_the_data_volume_no_longer_waits() {
    let mut s = snap_with_pod(pending_vmi(), temp_pod("Running"));
    s.storage.data_volumes_ready = Some(cond("DataVolumesReady", "True", "AllDVsReady"));
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let d = decide(&s);
    assert_eq!(deleted_temporary_pods(&d), ["test"]);
    assert!(
        !d.sync_actions
            .iter()
            .any(|a| matches!(a, VmiAction::CreatePod { .. })),
        "the launcher pod waits for the next sync, once the temporary pod is gone"
    );
    assert_eq!(
        events(&d)[0],
        (
            EventType::Normal,
            "SuccessfulDelete".to_string(),
            "Deleted WaitForFirstConsumer temporary pod test".to_string()
        )
    );
    let w = updated(&d);
    assert_eq!(phase_of(w), Phase::Pending);
    assert_eq!(
        condition(w, "DataVolumesReady").map(|c| c.status.as_str()),
        Some("True")
    );

    // Once it is gone, the launcher pod (lifecycle.go:100-185).
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    let d = decide(&s);
    assert!(matches!(
        d.sync_actions.as_slice(),
        [VmiAction::CreatePod { pod, .. }] if !podutil::is_temp_pod(pod)
    ));
    assert_eq!(phase_of(updated(&d)), Phase::Scheduling);
}

// vmi_test.go:437-461 "should only get WFFC pods that are associated with current VMI"; the
// hotplug trigger pods the current pod controls count too (lifecycle.go:1133-1140).
#[test]
fn only_temporary_pods_of_the_vmi_or_of_its_pod_are_cleaned_up() {
    let mut unowned = temp_pod("Running");
    unowned.metadata.name = Some("unowned-test-pod".into());
    unowned.metadata.uid = Some("unowned-uid".into());
    unowned.metadata.owner_references = None;
    let mut trigger = temp_pod("Succeeded");
    trigger.metadata.name = Some("hp-volume-trigger".into());
    trigger.metadata.uid = Some("trigger-uid".into());
    trigger.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: "test".into(),
        uid: "virt-launch-uid".into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let mut s = snap_with_pod(pending_vmi(), temp_pod("Running"));
    s.pods.push(unowned.into());
    s.pods.push(trigger.into());
    let d = decide(&s);
    assert_eq!(deleted_temporary_pods(&d), ["test", "hp-volume-trigger"]);
}

// vmi_test.go:463-504 "VMI should handle doppleganger Pod status while DV is in
// WaitForFirstConsumer phase"
#[test]
fn the_temporary_pod_status_shows_on_the_pending_vmi() {
    let unschedulable = PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some("Unschedulable".into()),
        message: Some("0/2 nodes are available".into()),
        ..Default::default()
    };
    for (phase, scheduled, expected) in [
        ("Failed", None, Phase::Failed),
        ("Succeeded", None, Phase::Pending),
        ("Pending", Some(unschedulable.clone()), Phase::Pending),
    ] {
        let mut pod = temp_pod(phase);
        if let Some(c) = scheduled.clone() {
            add_pod_condition(&mut pod, c);
        }
        let mut s = snap_with_pod(pending_vmi(), pod);
        wffc_storage(&mut s);
        let d = decide(&s);
        let w = updated(&d);
        assert_eq!(phase_of(w), expected, "temporary pod {phase}");
        assert_eq!(
            condition(w, "PodScheduled").and_then(|c| c.reason.as_deref()),
            scheduled.as_ref().and_then(|c| c.reason.as_deref()),
            "temporary pod {phase}"
        );
    }
    // A temporary pod being deleted fails the VMI too (IsPodFailedOrGoingDown).
    let mut pod = temp_pod("Running");
    pod.metadata.deletion_timestamp = Some(k8s_time(2_000));
    let mut s = snap_with_pod(pending_vmi(), pod);
    wffc_storage(&mut s);
    assert_eq!(phase_of(updated(&decide(&s))), Phase::Failed);
}

/// lifecycle.go:1104-1121: a temporary pod that is not Running, Succeeded or Failed is left
/// alone, yet KubeVirt records its deletion event.
#[test]
fn a_pending_temporary_pod_is_left_but_its_deletion_event_is_recorded() {
    let s = snap_with_pod(pending_vmi(), temp_pod("Pending"));
    let d = decide(&s);
    assert!(deleted_temporary_pods(&d).is_empty());
    assert_eq!(
        events(&d),
        [(
            EventType::Normal,
            "SuccessfulDelete".to_string(),
            "Deleted WaitForFirstConsumer temporary pod test".to_string()
        )]
    );
}

/// lifecycle.go:188-193, 1106-1108: a failed delete is a Warning event and the sync error
/// `FailedHotplugSync`, which requeues.
#[test]
fn a_failed_temporary_pod_delete_is_a_hotplug_sync_error() {
    let s = snap_with_pod(pending_vmi(), temp_pod("Succeeded"));
    let d = decide_after_sync(
        &s,
        &SyncOutcome::Failed {
            index: 0,
            error: ApiFailure {
                code: 500,
                reason: "InternalError".into(),
                message: "boom".into(),
            },
        },
    );
    assert_eq!(
        events(&d),
        [(
            EventType::Warning,
            "FailedDelete".to_string(),
            "Failed to delete WaitForFirstConsumer temporary pod test".to_string()
        )]
    );
    let e = d.sync_error.clone().expect("a sync error");
    assert_eq!(
        (e.reason.as_str(), e.message.as_str()),
        (
            "FailedHotplugSync",
            "failed to clean up temporary pods: boom"
        )
    );
    assert!(d.requeue());
}

// topology hints (vmi_test.go:4520-4625 "topology hints"; lifecycle.go:106-109, 326-334, 615-626)

/// `getVmiWithInvTsc` (vmi_test.go:4522-4535): a Pending amd64 VMI requiring `invtsc`.
fn invtsc_vmi() -> VirtualMachineInstance {
    let mut vmi = pending_vmi();
    vmi.spec.architecture = Some("amd64".into());
    vmi.spec.domain.cpu = Some(
        serde_json::from_value(json!({"features": [{"name": "invtsc", "policy": "require"}]}))
            .unwrap(),
    );
    vmi
}

/// `getVmiWithReenlightenment` (vmi_test.go:4537-4547).
fn reenlightenment_vmi() -> VirtualMachineInstance {
    let mut vmi = pending_vmi();
    vmi.spec.architecture = Some("amd64".into());
    vmi.spec.domain.extra.insert(
        "features".into(),
        json!({"hyperv": {"reenlightenment": {"enabled": true}}}),
    );
    vmi
}

fn topology(
    min: Option<i64>,
    nodes: &[(&str, &str, bool)],
) -> super::super::topology::TopologyState {
    super::super::topology::TopologyState {
        minimum_cluster_tsc_frequency: min,
        nodes: nodes
            .iter()
            .map(
                |(name, freq, schedulable)| super::super::topology::NodeTsc {
                    name: (*name).into(),
                    frequency_label: Some((*freq).into()),
                    schedulable: *schedulable,
                    runs_vmis: false,
                },
            )
            .collect(),
    }
}

/// The `status.topologyHints` the decision writes (`None` without a write).
fn hints(d: &VmiDecision) -> Option<Value> {
    d.status_actions.iter().find_map(|a| match a {
        VmiAction::UpdateVmi { vmi, .. } => {
            vmi.status.as_ref()?.extra.get("topologyHints").cloned()
        }
        _ => None,
    })
}

/// "invtsc feature exists": no pod yet, the hint written with the phase (the cluster's
/// lowest schedulable frequency here; KubeVirt's fixture uses the CR's minimum).
#[test]
fn an_invtsc_vmi_gets_its_hint_before_its_pod() {
    let mut s = snap(invtsc_vmi());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    s.topology = Some(topology(
        None,
        &[
            ("a", "2800000000", true),
            ("b", "2400000000", true),
            ("c", "1", false),
        ],
    ));
    assert!(!needs_rendered_pod(&s), "the pod waits for the hint");
    let d = decide(&s);
    assert!(d.sync_actions.is_empty(), "{:#?}", d.sync_actions);
    assert_eq!(hints(&d), Some(json!({"tscFrequency": 2_400_000_000_i64})));
    assert_eq!(new_status(&d).phase, Some(Phase::Pending));
    // The CR's minimum wins over the nodes (hinter.go:50-57).
    s.topology = Some(topology(Some(3_000_000_000), &[("a", "2800000000", true)]));
    assert_eq!(
        hints(&decide(&s)),
        Some(json!({"tscFrequency": 3_000_000_000_i64}))
    );
}

/// With a hint in the status the pod is created, and the hint is never recomputed.
#[test]
fn a_vmi_with_a_hint_gets_its_pod() {
    let mut vmi = invtsc_vmi();
    status_mut(&mut vmi).extra.insert(
        "topologyHints".into(),
        json!({"tscFrequency": 2_400_000_000_i64}),
    );
    let mut s = snap(vmi);
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    s.topology = Some(topology(None, &[("a", "1000", true)]));
    assert!(needs_rendered_pod(&s));
    let d = decide(&s);
    assert!(matches!(&d.sync_actions[..], [VmiAction::CreatePod { .. }]));
    assert_eq!(hints(&d), Some(json!({"tscFrequency": 2_400_000_000_i64})));
}

/// No frequency anywhere: KubeVirt writes a zero hint (hinter.go:58-66 returns 0, no error),
/// so the pod follows in the next sync, without the TSC selector.
#[test]
fn no_frequency_anywhere_writes_a_zero_hint() {
    let mut s = snap(invtsc_vmi());
    s.topology = Some(topology(None, &[]));
    let d = decide(&s);
    assert_eq!(hints(&d), Some(json!({"tscFrequency": 0})));
    assert!(d.update_status_error.is_none());
}

/// A minimum not above 0 for a VMI that needs the frequency to boot: Warning event
/// `FailedGatherhingClusterTopologyHints`, `updateStatus` returns the sync error before any
/// write, the key is requeued (lifecycle.go:617-619).
#[test]
fn a_hint_that_cannot_be_gathered_holds_the_vmi_with_kubevirts_reason() {
    let mut s = snap(invtsc_vmi());
    s.topology = Some(topology(Some(0), &[("a", "2400000000", true)]));
    let d = decide(&s);
    let msg = "failed to determine the lowest tsc frequency on the cluster: the configured minimumClusterTSCFrequency must be greater 0, but got 0";
    assert!(d.sync_actions.is_empty());
    assert!(
        matches!(&d.status_actions[..], [VmiAction::Event { type_: EventType::Warning, reason, message, .. }]
            if reason == "FailedGatherhingClusterTopologyHints" && message == msg),
        "{:#?}",
        d.status_actions
    );
    assert!(d.vmi_write().is_none());
    assert_eq!(
        d.update_status_error
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some(msg)
    );
    assert!(d.requeue());
}

/// "topology hints don't need to be set": a VMI that needs the frequency only to migrate gets
/// no hint and no error; with the real hinter (`IsTscFrequencyRequired` is true for it,
/// hinter.go:30-32) its pod keeps waiting.
#[test]
fn a_migration_only_requirement_gets_no_hint_and_no_error() {
    let mut s = snap(reenlightenment_vmi());
    s.topology = Some(topology(Some(-1), &[]));
    let d = decide(&s);
    assert!(d.update_status_error.is_none());
    assert!(d.sync_actions.is_empty());
    assert_eq!(hints(&d), None);
    // "does not need to happen if tsc requirement is of type RequiredForMigration": with a
    // frequency it gets the hint.
    s.topology = Some(topology(None, &[("a", "2400000000", true)]));
    assert_eq!(
        hints(&decide(&s)),
        Some(json!({"tscFrequency": 2_400_000_000_i64}))
    );
}

/// "does not need to happen if tsc requirement is of type NotRequired": the pod at once, no
/// hint; and a node state not gathered (inspector, shadow) predicts no hint, saying so.
#[test]
fn no_requirement_no_hint_and_ungathered_state_is_said() {
    let mut s = snap(pending_vmi());
    s.rendered_pod = Some(Ok(rendered_pod().into()));
    s.topology = Some(topology(None, &[("a", "2400000000", true)]));
    let d = decide(&s);
    assert!(matches!(&d.sync_actions[..], [VmiAction::CreatePod { .. }]));
    let mut s = snap(invtsc_vmi());
    s.topology = None;
    let d = decide(&s);
    assert_eq!(hints(&d), None);
    assert!(
        d.explanation.iter().any(|e| e.contains("not predicted")),
        "{:#?}",
        d.explanation
    );
}
