//! Run strategies: folding `spec.running`/`spec.runStrategy`, the state-change-request predicates,
//! and `syncRunStrategy` (pkg/virt-controller/watch/vm/vm.go:970-1178, 1215-1246, 1899-1931).

use super::action::SyncError;
use super::reasons::{message, sync as reason};
use crate::api::vm::{RunStrategy, RunStrategyError, VirtualMachine, VirtualMachineStatus};
use crate::api::vmi::{Phase, VirtualMachineInstance};
use crate::kubevirt_version::ControllerRules;

/// A run strategy as `VirtualMachine.RunStrategy()` returns it: KubeVirt passes unknown strings
/// through (they fail later in `syncRunStrategy` with "unknown runstrategy: X").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Strategy {
    /// One of the six strategies.
    Known(RunStrategy),
    /// Any other `spec.runStrategy` value.
    Unknown(String),
}

impl Strategy {
    /// The known strategy, if any.
    pub(crate) fn known(&self) -> Option<RunStrategy> {
        match self {
            Strategy::Known(s) => Some(*s),
            Strategy::Unknown(_) => None,
        }
    }

    /// The wire value.
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Strategy::Known(s) => s.as_str(),
            Strategy::Unknown(s) => s,
        }
    }
}

/// `VirtualMachine.RunStrategy()` (staging/src/kubevirt.io/api/core/v1/types.go:1957-1970): only
/// "both set" is an error.
pub(crate) fn vm_strategy(vm: &VirtualMachine) -> Result<Strategy, RunStrategyError> {
    match vm.run_strategy() {
        Ok(s) => Ok(Strategy::Known(s)),
        Err(RunStrategyError::Unknown(s)) => Ok(Strategy::Unknown(s)),
        Err(e) => Err(e),
    }
}

fn first_request(
    status: Option<&VirtualMachineStatus>,
) -> Option<&crate::api::vm::StateChangeRequest> {
    status?.state_change_requests.as_ref()?.first()
}

/// `hasStartRequest` (vm.go:1911-1918): the first state change request is `Start`.
pub(crate) fn has_start_request(status: Option<&VirtualMachineStatus>) -> bool {
    first_request(status).is_some_and(|r| r.action == "Start")
}

/// `hasStartPausedRequest` (vm.go:1899-1909): the first request is `Start` with data
/// `paused: "true"`.
pub(crate) fn has_start_paused_request(status: Option<&VirtualMachineStatus>) -> bool {
    first_request(status).is_some_and(|r| {
        r.action == "Start"
            && r.data
                .as_ref()
                .and_then(|d| d.get("paused"))
                .is_some_and(|v| v == "true")
    })
}

/// `hasStopRequestForVMI` (vm.go:1920-1931): the first request is `Stop` with `uid` equal to the
/// VMI's UID.
pub(crate) fn has_stop_request_for_vmi(
    status: Option<&VirtualMachineStatus>,
    vmi: &VirtualMachineInstance,
) -> bool {
    first_request(status).is_some_and(|r| {
        r.action == "Stop"
            && r.uid.is_some()
            && r.uid.as_deref() == Some(vmi.metadata.uid.as_deref().unwrap_or(""))
    })
}

/// `isSetToStart` (vm.go:1215-1246): Always → true; Halted → false; Manual → (VMI: no matching
/// stop request; else: a start request); RerunOnFailure → (VMI: phase ≠ Succeeded; else true);
/// Once → no VMI; anything else (or a run-strategy error) → false.
#[cfg(test)]
fn is_set_to_start(vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>) -> bool {
    is_set_to_start_with(vm, vm.status.as_ref(), vmi, &ControllerRules::default())
}

/// [`is_set_to_start`] of `vm`'s spec with the start and stop requests of `status` (the status
/// a sync is computing, which `vm` does not carry yet), under the `rules` of the release
/// reproduced: with [`ControllerRules::rerun_on_failure_start_needs_request`] (PR 18787) a
/// `RerunOnFailure` VM without a VMI is set to start only on a start request or when `status`
/// still records another run strategy, as `syncRunStrategy` starts it (vm.go:1069-1072).
pub(crate) fn is_set_to_start_with(
    vm: &VirtualMachine,
    status: Option<&VirtualMachineStatus>,
    vmi: Option<&VirtualMachineInstance>,
    rules: &ControllerRules,
) -> bool {
    let Ok(Strategy::Known(s)) = vm_strategy(vm) else {
        return false;
    };
    match s {
        RunStrategy::Always => true,
        RunStrategy::Halted => false,
        RunStrategy::Manual => match vmi {
            Some(v) => !has_stop_request_for_vmi(status, v),
            None => has_start_request(status),
        },
        RunStrategy::RerunOnFailure => match vmi {
            Some(v) => v.phase() != Phase::Succeeded,
            None if rules.rerun_on_failure_start_needs_request.value => {
                let recorded = status.and_then(|st| st.run_strategy.as_deref());
                has_start_request(status) || recorded != Some(s.as_str())
            }
            None => true,
        },
        RunStrategy::Once => vmi.is_none(),
        RunStrategy::WaitAsReceiver => false,
    }
}

/// `IsDecentralizedMigration` (types.go:676-682): migration state with source and target state,
/// exactly one of which has a sync address.
pub(crate) fn is_decentralized_migration(vmi: &VirtualMachineInstance) -> bool {
    let Some(ms) = vmi.status.as_ref().and_then(|s| s.migration_state.as_ref()) else {
        return false;
    };
    let addr = |side: &str| {
        ms.get(side)
            .filter(|v| !v.is_null())
            .map(|s| s.get("syncAddress").is_some_and(|a| !a.is_null()))
    };
    match (addr("sourceState"), addr("targetState")) {
        (Some(src), Some(tgt)) => src != tgt,
        _ => false,
    }
}

/// `IsMigrationCompleted` (types.go:645-647): `status.migrationState.completed`.
pub(crate) fn is_migration_completed(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|m| m.get("completed"))
        .and_then(|c| c.as_bool())
        .unwrap_or(false)
}

pub(super) fn start_error(e: impl std::fmt::Display) -> SyncError {
    SyncError::new(
        reason::FAILED_CREATE,
        format!("{}{e}", message::STARTING_VMI_FAILURE),
    )
}

pub(super) fn delete_error(e: impl std::fmt::Display) -> SyncError {
    SyncError::new(
        reason::FAILED_DELETE,
        format!("{}{e}", message::FAILURE_DELETING_VMI),
    )
}

/// The run strategy used for `status.runStrategy` and the printable status: `vmOrig.RunStrategy()`
/// with errors ignored (vm.go:2475).
pub(crate) fn strategy_or_none(vm: &VirtualMachine) -> Option<Strategy> {
    vm_strategy(vm).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(spec: serde_json::Value, status: serde_json::Value) -> VirtualMachine {
        serde_json::from_value(json!({
            "metadata": {"name": "vm"},
            "spec": spec,
            "status": status,
        }))
        .unwrap()
    }

    fn vmi(uid: &str, phase: &str) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "vm", "uid": uid},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase},
        }))
        .unwrap()
    }

    #[test]
    fn folding() {
        let s = |spec| vm_strategy(&vm(spec, json!({})));
        assert_eq!(
            s(json!({"running": true})),
            Ok(Strategy::Known(RunStrategy::Always))
        );
        assert_eq!(
            s(json!({"running": false})),
            Ok(Strategy::Known(RunStrategy::Halted))
        );
        assert_eq!(s(json!({})), Ok(Strategy::Known(RunStrategy::Halted)));
        assert_eq!(
            s(json!({"runStrategy": "Manual"})),
            Ok(Strategy::Known(RunStrategy::Manual))
        );
        assert_eq!(
            s(json!({"runStrategy": "Sometimes"})),
            Ok(Strategy::Unknown("Sometimes".into()))
        );
        assert_eq!(
            s(json!({"running": true, "runStrategy": "Always"})),
            Err(RunStrategyError::MutuallyExclusive)
        );
    }

    #[test]
    fn request_predicates_look_at_the_first_request_only() {
        let st = |reqs| -> Option<VirtualMachineStatus> {
            serde_json::from_value(json!({"stateChangeRequests": reqs})).ok()
        };
        let v = vmi("u1", "Running");
        assert!(has_start_request(st(json!([{"action": "Start"}])).as_ref()));
        assert!(!has_start_request(
            st(json!([{"action": "Stop", "uid": "u1"}, {"action": "Start"}])).as_ref()
        ));
        assert!(has_stop_request_for_vmi(
            st(json!([{"action": "Stop", "uid": "u1"}])).as_ref(),
            &v
        ));
        assert!(!has_stop_request_for_vmi(
            st(json!([{"action": "Stop", "uid": "u2"}])).as_ref(),
            &v
        ));
        assert!(!has_stop_request_for_vmi(
            st(json!([{"action": "Stop"}])).as_ref(),
            &v
        ));
        assert!(has_start_paused_request(
            st(json!([{"action": "Start", "data": {"paused": "true"}}])).as_ref()
        ));
        assert!(!has_start_paused_request(
            st(json!([{"action": "Start", "data": {"paused": "false"}}])).as_ref()
        ));
        assert!(!has_start_request(None));
    }

    #[test]
    fn set_to_start_table() {
        let start = json!({"stateChangeRequests": [{"action": "Start"}]});
        let stop = json!({"stateChangeRequests": [{"action": "Stop", "uid": "u1"}]});
        let rs = |s: &str| json!({"runStrategy": s});
        let running = vmi("u1", "Running");
        let succeeded = vmi("u1", "Succeeded");
        let cases: Vec<(VirtualMachine, Option<&VirtualMachineInstance>, bool)> = vec![
            (vm(rs("Always"), json!({})), None, true),
            (vm(rs("Halted"), json!({})), None, false),
            (vm(rs("Manual"), json!({})), None, false),
            (vm(rs("Manual"), start.clone()), None, true),
            (vm(rs("Manual"), json!({})), Some(&running), true),
            (vm(rs("Manual"), stop.clone()), Some(&running), false),
            (vm(rs("RerunOnFailure"), json!({})), None, true),
            (vm(rs("RerunOnFailure"), json!({})), Some(&running), true),
            (vm(rs("RerunOnFailure"), json!({})), Some(&succeeded), false),
            (vm(rs("Once"), json!({})), None, true),
            (vm(rs("Once"), json!({})), Some(&running), false),
            (vm(rs("WaitAsReceiver"), json!({})), None, false),
            (
                vm(json!({"running": true, "runStrategy": "Always"}), json!({})),
                None,
                false,
            ),
        ];
        for (i, (vm, vmi, expected)) in cases.into_iter().enumerate() {
            assert_eq!(is_set_to_start(&vm, vmi), expected, "case {i}");
        }
    }

    #[test]
    fn decentralized_migration_detection() {
        let mut v = vmi("u", "Succeeded");
        v.status.as_mut().unwrap().migration_state = Some(
            json!({
                "completed": true,
                "targetState": {},
                "sourceState": {"syncAddress": "127.0.0.1:5900"}
            })
            .into(),
        );
        assert!(is_decentralized_migration(&v));
        assert!(is_migration_completed(&v));
        v.status.as_mut().unwrap().migration_state = Some(
            json!({
                "targetState": {"syncAddress": "a"},
                "sourceState": {"syncAddress": "b"}
            })
            .into(),
        );
        assert!(!is_decentralized_migration(&v));
        v.status.as_mut().unwrap().migration_state = Some(json!({"completed": true}).into());
        assert!(!is_decentralized_migration(&v));
    }
}
