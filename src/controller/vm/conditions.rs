//! VM conditions: the shared condition manager (`controller::common::conditions`) and
//! `syncConditions` / `syncReadyConditionFromVMI` / `processFailureCondition`
//! (pkg/virt-controller/watch/vm/vm.go:2701-2809).

use super::action::SyncError;
use super::reasons::condition::{FAILURE, READY, RESTART_REQUIRED};
use crate::api::Time;
use crate::api::common::{Condition, KnownStr};
use crate::api::vmi::VirtualMachineInstance;
use chrono::{DateTime, Utc};

pub(crate) use crate::controller::common::conditions::{
    has_condition, has_condition_with_status, remove_condition, update_condition,
};

fn non_empty(s: &str) -> Option<KnownStr> {
    (!s.is_empty()).then(|| s.into())
}

/// `setRestartRequired` (vm.go:2978-2987): `RestartRequired=True` with a message, no reason,
/// lastTransitionTime now.
pub(crate) fn set_restart_required(
    conditions: &mut Vec<Condition>,
    message: &str,
    now: DateTime<Utc>,
) {
    update_condition(
        conditions,
        Condition {
            type_: RESTART_REQUIRED.into(),
            status: "True".into(),
            reason: None,
            message: non_empty(message),
            last_probe_time: None,
            last_transition_time: Some(Time::from_datetime(now)),
            extra: Default::default(),
        },
    );
}

/// `syncReadyConditionFromVMI` (vm.go:2701-2737): no VMI → `Ready=False`, reason `VMINotExists`;
/// VMI without Ready → `Ready=False`, reason `VMIConditionMissing`; else a copy of the VMI's Ready
/// condition.
pub(crate) fn sync_ready_condition(
    conditions: &mut Vec<Condition>,
    vmi: Option<&VirtualMachineInstance>,
    now: DateTime<Utc>,
) {
    let now = Some(Time::from_datetime(now));
    let not_ready = |reason: &str, message: &str| Condition {
        type_: READY.into(),
        status: "False".into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_probe_time: now,
        last_transition_time: now,
        extra: Default::default(),
    };
    let cond = match vmi {
        None => not_ready("VMINotExists", "VMI does not exist"),
        Some(vmi) => match vmi.condition(READY) {
            None => not_ready("VMIConditionMissing", "VMI is missing the Ready condition"),
            Some(c) => mirror(c),
        },
    };
    update_condition(conditions, cond);
}

/// A VM condition copied from a VMI condition: type, status, reason, message and both times.
fn mirror(c: &Condition) -> Condition {
    Condition {
        type_: c.type_.clone(),
        status: c.status.clone(),
        reason: c.reason.clone(),
        message: c.message.clone(),
        last_probe_time: c.last_probe_time,
        last_transition_time: c.last_transition_time,
        extra: Default::default(),
    }
}

/// `processFailureCondition` (vm.go:2790-2809): no sync error → remove `Failure`; else
/// `Failure=True` with the error's reason and message.
pub(crate) fn process_failure_condition(
    conditions: &mut Vec<Condition>,
    sync_error: Option<&SyncError>,
    now: DateTime<Utc>,
) {
    match sync_error {
        None => remove_condition(conditions, FAILURE),
        Some(e) => update_condition(
            conditions,
            Condition {
                type_: FAILURE.into(),
                status: "True".into(),
                reason: non_empty(&e.reason),
                message: non_empty(&e.message),
                last_probe_time: None,
                last_transition_time: Some(Time::from_datetime(now)),
                extra: Default::default(),
            },
        ),
    }
}

/// Condition types `syncConditions` never mirrors from the VMI (vm.go:2754-2758).
pub(crate) const NOT_MIRRORED: [&str; 3] = [READY, FAILURE, RESTART_REQUIRED];

/// `syncConditions` (vm.go:2739-2788): Ready from the VMI, Failure from the sync error, then (when
/// a VMI exists) every other VMI condition mirrored and VM conditions whose type the VMI lacks
/// removed (Ready, Failure and RestartRequired excepted).
pub(crate) fn sync_conditions(
    conditions: &mut Vec<Condition>,
    vmi: Option<&VirtualMachineInstance>,
    sync_error: Option<&SyncError>,
    now: DateTime<Utc>,
) {
    sync_ready_condition(conditions, vmi, now);
    process_failure_condition(conditions, sync_error, now);
    let Some(vmi) = vmi else { return };
    let vmi_conds: &[Condition] = vmi
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[]);
    for c in vmi_conds {
        if NOT_MIRRORED.contains(&c.type_.as_str()) {
            continue;
        }
        update_condition(conditions, mirror(c));
    }
    conditions.retain(|c| {
        NOT_MIRRORED.contains(&c.type_.as_str()) || vmi_conds.iter().any(|v| v.type_ == c.type_)
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::vmi::VirtualMachineInstanceStatus;

    use crate::controller::common::conditions::test_condition as cond;

    fn vmi_with(conds: Vec<Condition>) -> VirtualMachineInstance {
        VirtualMachineInstance {
            status: Some(VirtualMachineInstanceStatus {
                conditions: Some(conds),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_700_000_000, 0).unwrap()
    }

    #[test]
    fn update_only_on_status_or_reason_change() {
        let mut conds = vec![Condition {
            message: Some("old".into()),
            ..cond("X", "True", Some("R"))
        }];
        update_condition(
            &mut conds,
            Condition {
                message: Some("new".into()),
                ..cond("X", "True", Some("R"))
            },
        );
        assert_eq!(conds[0].message.as_deref(), Some("old"));
        update_condition(&mut conds, cond("X", "False", Some("R")));
        assert_eq!(conds[0].status, "False");
        update_condition(&mut conds, cond("X", "False", Some("Q")));
        assert_eq!(conds[0].reason.as_deref(), Some("Q"));
        update_condition(&mut conds, cond("Y", "True", None));
        assert_eq!(conds.len(), 2);
    }

    /// Mirrors vm_test.go:7163 "should set ready to false when VMI is nil".
    #[test]
    fn ready_false_without_vmi() {
        let mut conds = vec![];
        sync_conditions(&mut conds, None, None, now());
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].type_, "Ready");
        assert_eq!(conds[0].status, "False");
        assert_eq!(conds[0].reason.as_deref(), Some("VMINotExists"));
        assert_eq!(conds[0].message.as_deref(), Some("VMI does not exist"));
    }

    /// Mirrors vm_test.go:7170 and 7177: no Ready on the VMI / Ready=False on the VMI.
    #[test]
    fn ready_false_when_vmi_lacks_or_has_false_ready() {
        let mut conds = vec![];
        sync_conditions(&mut conds, Some(&vmi_with(vec![])), None, now());
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].reason.as_deref(), Some("VMIConditionMissing"));

        let mut conds = vec![];
        let v = vmi_with(vec![cond("Ready", "False", None)]);
        sync_conditions(&mut conds, Some(&v), None, now());
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].status, "False");
        assert_eq!(conds[0].reason, None);
    }

    /// Mirrors vm_test.go:7188 "should sync appropriate conditions and ignore others".
    #[test]
    fn mirrors_vmi_conditions_except_ignored_ones() {
        let v = vmi_with(
            ["Ready", "Failure", "Paused", "RestartRequired"]
                .iter()
                .map(|t| cond(t, "True", None))
                .collect(),
        );
        let mut conds = vec![];
        sync_conditions(&mut conds, Some(&v), None, now());
        let types: Vec<_> = conds.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, vec!["Ready", "Paused"]);
    }

    /// Mirrors vm_test.go:2928 "should sync VMI conditions" and 3087 "should remove paused
    /// condition": conditions gone from the VMI disappear from the VM, the kept ones stay.
    #[test]
    fn removes_conditions_gone_from_the_vmi() {
        let mut conds = vec![
            cond("Paused", "True", None),
            cond("RestartRequired", "True", None),
            cond("Failure", "True", Some("FailedCreate")),
            cond("AgentConnected", "True", None),
        ];
        let v = vmi_with(vec![
            cond("Ready", "True", None),
            cond("AgentConnected", "True", None),
        ]);
        let err = SyncError::new("FailedCreate", "boom");
        sync_conditions(&mut conds, Some(&v), Some(&err), now());
        let types: Vec<_> = conds.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            vec!["RestartRequired", "Failure", "AgentConnected", "Ready"]
        );
        // Same reason: the Failure condition keeps its old message.
        assert_eq!(
            conds.iter().find(|c| c.type_ == "Failure").unwrap().message,
            None
        );
        // No sync error: Failure removed.
        sync_conditions(&mut conds, Some(&v), None, now());
        assert!(!has_condition(&conds, "Failure"));
    }

    #[test]
    fn failure_condition_carries_reason_and_message() {
        let mut conds = vec![];
        let err = SyncError::new("FailedDelete", "Failure attempting to delete VMI: x");
        process_failure_condition(&mut conds, Some(&err), now());
        assert_eq!(conds[0].type_, "Failure");
        assert_eq!(conds[0].status, "True");
        assert_eq!(conds[0].reason.as_deref(), Some("FailedDelete"));
        assert_eq!(
            conds[0].message.as_deref(),
            Some("Failure attempting to delete VMI: x")
        );
        assert_eq!(conds[0].last_transition_time, Some(Time(now())));
    }
}
