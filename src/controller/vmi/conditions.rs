//! VMI and pod condition bookkeeping with KubeVirt's exact semantics
//! (`pkg/controller/conditions.go`, `SetVMIPhaseTransitionTimestamp` in controller.go:389-404,
//! and the Ready / readiness-gate syncs of lifecycle.go:874-976).

use super::action::SyncError;
use super::podutil;
use crate::api::vmi::{PhaseTransitionTimestamp, VirtualMachineInstanceStatus};
use crate::api::{Condition, KnownStr, Phase, Time};
use k8s_openapi::api::core::v1::{Pod, PodCondition};

/// VMI condition types (types.go:680-740).
pub(crate) mod types {
    /// `Ready`.
    pub(crate) const READY: &str = "Ready";
    /// `Synchronized`: False while the controller has a sync error.
    pub(crate) const SYNCHRONIZED: &str = "Synchronized";
    /// `Paused` (set by virt-handler).
    pub(crate) const PAUSED: &str = "Paused";
    /// `PodScheduled`, copied from the launcher pod while Scheduling.
    pub(crate) const POD_SCHEDULED: &str = "PodScheduled";
    /// `Provisioning` (WaitForFirstConsumer DataVolumes), removed once Scheduling.
    pub(crate) const PROVISIONING: &str = "Provisioning";
    /// `EvictionRequested`.
    pub(crate) const EVICTION_REQUESTED: &str = "EvictionRequested";
    /// Pod readiness gate condition (`VirtualMachineUnpaused`, types.go:1330).
    pub(crate) const VIRTUAL_MACHINE_UNPAUSED: &str = "kubevirt.io/virtual-machine-unpaused";
    /// Pod condition `Ready`.
    pub(crate) const POD_READY: &str = "Ready";
}

/// Ready-condition reasons (types.go:791-801).
pub(crate) mod reasons {
    /// No launcher pod (or only a temporary one).
    pub(crate) const POD_NOT_EXISTS: &str = "PodNotExists";
    /// The launcher pod is down or being deleted.
    pub(crate) const POD_TERMINATING: &str = "PodTerminating";
    /// The VMI is not Running yet.
    pub(crate) const GUEST_NOT_RUNNING: &str = "GuestNotRunning";
    /// The launcher pod has no Ready condition.
    pub(crate) const POD_CONDITION_MISSING: &str = "PodConditionMissing";
    /// `EvictionRequested` condition reason.
    pub(crate) const EVICTION_REQUESTED: &str = "EvictionRequested";
    /// Pod scheduling failed (`k8sv1.PodReasonUnschedulable`).
    pub(crate) const UNSCHEDULABLE: &str = "Unschedulable";
    /// Readiness gate: VMI paused.
    pub(crate) const PAUSED: &str = "Paused";
    /// Readiness gate: VMI not paused.
    pub(crate) const NOT_PAUSED: &str = "NotPaused";
}

/// Ready-condition messages (lifecycle.go:874-924).
pub(crate) mod messages {
    /// With [`super::reasons::POD_NOT_EXISTS`].
    pub(crate) const POD_NOT_EXISTS: &str = "virt-launcher pod has not yet been scheduled";
    /// With [`super::reasons::POD_TERMINATING`].
    pub(crate) const POD_TERMINATING: &str = "virt-launcher pod is terminating";
    /// With [`super::reasons::GUEST_NOT_RUNNING`].
    pub(crate) const GUEST_NOT_RUNNING: &str = "Guest VM is not reported as running";
    /// With [`super::reasons::POD_CONDITION_MISSING`].
    pub(crate) const POD_CONDITION_MISSING: &str =
        "virt-launcher pod is missing the Ready condition";
    /// Readiness gate False.
    pub(crate) const PAUSED: &str = "the virtual machine is paused";
    /// Readiness gate True.
    pub(crate) const NOT_PAUSED: &str = "the virtual machine is not paused";
    /// EvictionRequested condition.
    pub(crate) const EVICTION_REQUESTED: &str = "VMI is marked for eviction";
}

use crate::controller::common::conditions as manager;

/// A condition by type.
pub(crate) fn get<'a>(
    status: &'a VirtualMachineInstanceStatus,
    type_: &str,
) -> Option<&'a Condition> {
    manager::condition(status.conditions.as_deref().unwrap_or_default(), type_)
}

/// A condition of that type exists.
pub(crate) fn has(status: &VirtualMachineInstanceStatus, type_: &str) -> bool {
    get(status, type_).is_some()
}

/// A condition of that type with that status exists (`HasConditionWithStatus`).
pub(crate) fn has_with_status(
    status: &VirtualMachineInstanceStatus,
    type_: &str,
    value: &str,
) -> bool {
    get(status, type_).is_some_and(|c| c.status == value)
}

/// `RemoveCondition` (conditions.go:192-201): drop every condition of that type. Like Go's
/// re-built slice, an empty result becomes `None`.
pub(crate) fn remove(status: &mut VirtualMachineInstanceStatus, type_: &str) {
    let mut kept = status.conditions.take().unwrap_or_default();
    manager::remove_condition(&mut kept, type_);
    status.conditions = if kept.is_empty() { None } else { Some(kept) };
}

fn push(status: &mut VirtualMachineInstanceStatus, cond: Condition) {
    status.conditions.get_or_insert_with(Vec::new).push(cond);
}

/// `UpdateCondition` (conditions.go:203-218), see [`manager::update_condition`].
pub(crate) fn update(status: &mut VirtualMachineInstanceStatus, cond: Condition) {
    manager::update_condition(status.conditions.get_or_insert_with(Vec::new), cond);
}

fn nonempty(s: Option<&String>) -> Option<KnownStr> {
    s.filter(|s| !s.is_empty()).map(|s| s.as_str().into())
}

/// A pod condition as a VMI condition (same type, status, reason, message, timestamps).
pub(crate) fn from_pod_condition(pc: &PodCondition) -> Condition {
    Condition {
        type_: pc.type_.as_str().into(),
        status: pc.status.as_str().into(),
        reason: nonempty(pc.reason.as_ref()),
        message: nonempty(pc.message.as_ref()),
        last_probe_time: pc.last_probe_time.as_ref().and_then(Time::from_k8s),
        last_transition_time: pc.last_transition_time.as_ref().and_then(Time::from_k8s),
        extra: Default::default(),
    }
}

/// `AddPodCondition` (conditions.go:220-232): append a copy of the pod condition unless the VMI
/// already has a condition of that type (an existing one is *not* refreshed).
pub(crate) fn add_pod_condition(status: &mut VirtualMachineInstanceStatus, pc: &PodCondition) {
    if !has(status, &pc.type_) {
        push(status, from_pod_condition(pc));
    }
}

/// `ConditionsEqual` (conditions.go:243-255): same length and every condition of `a` has a
/// counterpart in `b` with the same type, status and reason (messages and times ignored).
pub(crate) fn conditions_equal(
    a: &VirtualMachineInstanceStatus,
    b: &VirtualMachineInstanceStatus,
) -> bool {
    let ca = a.conditions.as_deref().unwrap_or_default();
    let cb = b.conditions.as_deref().unwrap_or_default();
    ca.len() == cb.len()
        && ca
            .iter()
            .all(|c| get(b, &c.type_).is_some_and(|d| d.status == c.status && d.reason == c.reason))
}

/// `CheckFailure` (conditions.go:143-164). With an error: unless `Synchronized` is already
/// False with the same reason, replace it with `Synchronized=False` (reason, message,
/// `lastTransitionTime = now`, appended at the end). Without: remove `Synchronized`. Returns
/// whether the conditions changed.
pub(crate) fn check_failure(
    status: &mut VirtualMachineInstanceStatus,
    error: Option<&SyncError>,
    now: Time,
) -> bool {
    match error {
        Some(e) => {
            let reason = nonempty(Some(&e.reason));
            if get(status, types::SYNCHRONIZED)
                .is_some_and(|c| c.status == "False" && c.reason == reason)
            {
                return false;
            }
            remove(status, types::SYNCHRONIZED);
            push(
                status,
                Condition {
                    type_: types::SYNCHRONIZED.into(),
                    status: "False".into(),
                    reason,
                    message: nonempty(Some(&e.message)),
                    last_probe_time: None,
                    last_transition_time: Some(now),
                    extra: Default::default(),
                },
            );
            true
        }
        None => {
            if has(status, types::SYNCHRONIZED) {
                remove(status, types::SYNCHRONIZED);
                true
            } else {
                false
            }
        }
    }
}

/// `SetVMIPhaseTransitionTimestamp` (controller.go:389-404): when the phase changed, append
/// `{phase, now}` unless an entry for the new phase already exists (first occurrence wins).
pub(crate) fn set_phase_transition_timestamp(
    old_phase: Phase,
    status: &mut VirtualMachineInstanceStatus,
    now: Time,
) -> bool {
    let new_phase = status.phase.unwrap_or_default();
    if old_phase == new_phase {
        return false;
    }
    let list = status
        .phase_transition_timestamps
        .get_or_insert_with(Vec::new);
    if list.iter().any(|t| t.phase == new_phase) {
        return false;
    }
    list.push(PhaseTransitionTimestamp {
        phase: new_phase,
        phase_transition_timestamp: now,
        extra: Default::default(),
    });
    true
}

fn ready_false(reason: &str, message: &str, now: Time) -> Condition {
    Condition {
        type_: types::READY.into(),
        status: "False".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: Some(now),
        last_transition_time: Some(now),
        extra: Default::default(),
    }
}

/// The Ready condition `syncReadyConditionFromPod` (lifecycle.go:874-924) wants, before
/// `UpdateCondition` semantics: no pod or a temporary pod → False `PodNotExists`; pod down or
/// going down → False `PodTerminating`; VMI not Running → False `GuestNotRunning`; pod has a
/// Ready condition → a copy of it; else False `PodConditionMissing`. Times of the False ones are
/// `now`.
pub(crate) fn desired_ready_condition(
    pod: Option<&Pod>,
    vmi_running: bool,
    now: Time,
) -> Condition {
    match pod {
        None => ready_false(reasons::POD_NOT_EXISTS, messages::POD_NOT_EXISTS, now),
        Some(p) if podutil::is_temp_pod(p) => {
            ready_false(reasons::POD_NOT_EXISTS, messages::POD_NOT_EXISTS, now)
        }
        Some(p) if podutil::is_pod_down_or_going_down(p) => {
            ready_false(reasons::POD_TERMINATING, messages::POD_TERMINATING, now)
        }
        Some(_) if !vmi_running => {
            ready_false(reasons::GUEST_NOT_RUNNING, messages::GUEST_NOT_RUNNING, now)
        }
        Some(p) => match podutil::pod_condition(p, types::POD_READY) {
            Some(pc) => {
                let mut c = from_pod_condition(pc);
                c.type_ = types::READY.into();
                c
            }
            None => ready_false(
                reasons::POD_CONDITION_MISSING,
                messages::POD_CONDITION_MISSING,
                now,
            ),
        },
    }
}

/// The readiness-gate condition to write on the pod, if any (`syncPausedConditionToPod`,
/// lifecycle.go:926-976): VMI `Paused=True` and pod gate `True` → False `Paused`; VMI not
/// paused and pod gate not `True` (absent, False, Unknown) → True `NotPaused`; otherwise
/// nothing. Times are `now`.
pub(crate) fn readiness_gate_update(
    vmi_paused: bool,
    pod: &Pod,
    now: Time,
) -> Option<PodCondition> {
    let gate_true = podutil::pod_condition(pod, types::VIRTUAL_MACHINE_UNPAUSED)
        .is_some_and(|c| c.status == "True");
    let (status, reason, message) = match (vmi_paused, gate_true) {
        (true, true) => ("False", reasons::PAUSED, messages::PAUSED),
        (false, false) => ("True", reasons::NOT_PAUSED, messages::NOT_PAUSED),
        _ => return None,
    };
    let t = now.to_k8s();
    let cond = PodCondition {
        type_: types::VIRTUAL_MACHINE_UNPAUSED.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: t.clone(),
        last_transition_time: t,
        observed_generation: None,
    };
    // `UpdateCondition` on a pod replaces only on a status/reason change, then the patch is sent
    // only if `ConditionsEqual` (type/status/reason) differs: an existing gate with the same
    // status and reason yields no patch.
    let unchanged = podutil::pod_condition(pod, types::VIRTUAL_MACHINE_UNPAUSED)
        .is_some_and(|c| c.status == cond.status && c.reason == cond.reason);
    if unchanged { None } else { Some(cond) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::vmi::podutil::tests::{launcher_pod, ts};
    use chrono::{TimeZone, Utc};

    fn now() -> Time {
        Time(
            Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5)
                .single()
                .expect("valid"),
        )
    }

    use crate::controller::common::conditions::test_condition as cond;

    #[test]
    fn update_keeps_times_when_status_and_reason_match() {
        let mut st = VirtualMachineInstanceStatus::default();
        let mut first = ready_false(reasons::GUEST_NOT_RUNNING, "a", now());
        first.last_transition_time = Some(Time(Utc.timestamp_opt(1, 0).single().expect("t")));
        update(&mut st, first.clone());
        update(&mut st, ready_false(reasons::GUEST_NOT_RUNNING, "b", now()));
        assert_eq!(st.conditions.as_deref(), Some(&[first][..]));
        update(&mut st, ready_false(reasons::POD_TERMINATING, "c", now()));
        assert_eq!(
            get(&st, "Ready").and_then(|c| c.reason.as_deref()),
            Some("PodTerminating")
        );
    }

    #[test]
    fn remove_last_condition_leaves_none() {
        let mut st = VirtualMachineInstanceStatus {
            conditions: Some(vec![cond("Synchronized", "False", Some("x"))]),
            ..Default::default()
        };
        remove(&mut st, "Synchronized");
        assert_eq!(st.conditions, None);
    }

    // vmi_test.go:1177-1238: set on error, removed once the sync succeeds.
    #[test]
    fn check_failure_sets_and_clears_synchronized() {
        let mut st = VirtualMachineInstanceStatus::default();
        let e = SyncError::new("FailedCreate", "failed to create virtual machine pod: boom");
        assert!(check_failure(&mut st, Some(&e), now()));
        let c = get(&st, "Synchronized").cloned().expect("condition");
        assert_eq!(c.status, "False");
        assert_eq!(c.reason.as_deref(), Some("FailedCreate"));
        assert_eq!(
            c.message.as_deref(),
            Some("failed to create virtual machine pod: boom")
        );
        assert_eq!(c.last_transition_time, Some(now()));
        // same reason, other message: unchanged
        let e2 = SyncError::new("FailedCreate", "other");
        assert!(!check_failure(&mut st, Some(&e2), now()));
        assert_eq!(
            get(&st, "Synchronized").and_then(|c| c.message.as_deref()),
            Some("failed to create virtual machine pod: boom")
        );
        assert!(check_failure(&mut st, None, now()));
        assert!(!has(&st, "Synchronized"));
        assert!(!check_failure(&mut st, None, now()));
    }

    // vmi_test.go:2066-2101 "should override Synchronized=False condition reason when it's already set"
    #[test]
    fn check_failure_overrides_other_reason() {
        let mut st = VirtualMachineInstanceStatus {
            conditions: Some(vec![
                cond("Synchronized", "False", Some("ErrImagePull")),
                cond("Ready", "False", Some("GuestNotRunning")),
            ]),
            ..Default::default()
        };
        let e = SyncError::new("ImagePullBackOff", "back-off");
        assert!(check_failure(&mut st, Some(&e), now()));
        let cs = st.conditions.as_deref().unwrap_or_default();
        assert_eq!(cs.len(), 2);
        assert_eq!(cs[1].type_, "Synchronized");
        assert_eq!(cs[1].reason.as_deref(), Some("ImagePullBackOff"));
    }

    #[test]
    fn phase_timestamp_appended_once_per_phase() {
        let mut st = VirtualMachineInstanceStatus {
            phase: Some(Phase::Scheduling),
            ..Default::default()
        };
        assert!(set_phase_transition_timestamp(
            Phase::Pending,
            &mut st,
            now()
        ));
        assert!(!set_phase_transition_timestamp(
            Phase::Scheduling,
            &mut st,
            now()
        ));
        let later = Time(
            Utc.with_ymd_and_hms(2026, 1, 2, 4, 0, 0)
                .single()
                .expect("t"),
        );
        // the phase comes back (e.g. WaitingForSync → Scheduling): first entry is kept
        assert!(!set_phase_transition_timestamp(
            Phase::WaitingForSync,
            &mut st,
            later
        ));
        let list = st.phase_transition_timestamps.clone().unwrap_or_default();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].phase, Phase::Scheduling);
        assert_eq!(list[0].phase_transition_timestamp, now());
        let json = serde_json::to_value(&list[0]).expect("serialises");
        assert_eq!(json["phaseTransitionTimestamp"], "2026-01-02T03:04:05Z");
    }

    #[test]
    fn conditions_equal_ignores_message_and_order() {
        let a = VirtualMachineInstanceStatus {
            conditions: Some(vec![
                cond("Ready", "False", Some("x")),
                cond("Paused", "True", None),
            ]),
            ..Default::default()
        };
        let mut b = a.clone();
        if let Some(cs) = b.conditions.as_mut() {
            cs.reverse();
            cs[0].message = Some("m".into());
        }
        assert!(conditions_equal(&a, &b));
        if let Some(cs) = b.conditions.as_mut() {
            cs[0].status = "False".into();
        }
        assert!(!conditions_equal(&a, &b));
    }

    #[test]
    fn ready_condition_reasons() {
        let pod = launcher_pod("Running");
        let r = |p: Option<&Pod>, running: bool| {
            let c = desired_ready_condition(p, running, now());
            (
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
            )
        };
        assert_eq!(
            r(None, true),
            (
                "False".into(),
                "PodNotExists".into(),
                "virt-launcher pod has not yet been scheduled".into()
            )
        );
        let mut temp = pod.clone();
        temp.metadata.annotations = Some(
            [(
                podutil::EPHEMERAL_PROVISIONING_ANNOTATION.to_string(),
                "true".to_string(),
            )]
            .into(),
        );
        assert_eq!(r(Some(&temp), true).1, "PodNotExists");
        let mut deleting = pod.clone();
        deleting.metadata.deletion_timestamp = Some(ts(5));
        assert_eq!(
            r(Some(&deleting), true),
            (
                "False".into(),
                "PodTerminating".into(),
                "virt-launcher pod is terminating".into()
            )
        );
        assert_eq!(
            r(Some(&pod), false),
            (
                "False".into(),
                "GuestNotRunning".into(),
                "Guest VM is not reported as running".into()
            )
        );
        assert_eq!(
            r(Some(&pod), true),
            (
                "False".into(),
                "PodConditionMissing".into(),
                "virt-launcher pod is missing the Ready condition".into()
            )
        );
        let mut ready = pod.clone();
        if let Some(s) = ready.status.as_mut() {
            s.conditions = Some(vec![PodCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_transition_time: Some(ts(1_700_000_000)),
                ..Default::default()
            }]);
        }
        let c = desired_ready_condition(Some(&ready), true, now());
        assert_eq!((c.status.as_str(), c.reason.as_deref()), ("True", None));
        assert_eq!(
            c.last_transition_time.map(|t| t.to_rfc3339()),
            Some("2023-11-14T22:13:20Z".into())
        );
    }

    fn with_gate(status: Option<&str>) -> Pod {
        let mut pod = launcher_pod("Running");
        if let (Some(st), Some(s)) = (pod.status.as_mut(), status) {
            st.conditions = Some(vec![PodCondition {
                type_: types::VIRTUAL_MACHINE_UNPAUSED.into(),
                status: s.into(),
                ..Default::default()
            }]);
        }
        pod
    }

    // vmi_test.go:2783-2834 readiness gate tables
    #[test]
    fn readiness_gate_false_when_paused() {
        let c = readiness_gate_update(true, &with_gate(Some("True")), now()).expect("patch");
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
            (
                "False",
                Some("Paused"),
                Some("the virtual machine is paused")
            )
        );
        // paused, gate absent or already False: KubeVirt leaves it alone
        assert_eq!(readiness_gate_update(true, &with_gate(None), now()), None);
        assert_eq!(
            readiness_gate_update(true, &with_gate(Some("False")), now()),
            None
        );
    }

    #[test]
    fn readiness_gate_true_when_not_paused() {
        for gate in [None, Some("Unknown"), Some("False")] {
            let c = readiness_gate_update(false, &with_gate(gate), now()).expect("patch");
            assert_eq!(
                (c.status.as_str(), c.reason.as_deref(), c.message.as_deref()),
                (
                    "True",
                    Some("NotPaused"),
                    Some("the virtual machine is not paused")
                ),
                "gate {gate:?}"
            );
            assert!(c.last_transition_time.is_some());
        }
        assert_eq!(
            readiness_gate_update(false, &with_gate(Some("True")), now()),
            None
        );
    }
}
