//! Run strategies: folding `spec.running`/`spec.runStrategy`, the state-change-request predicates,
//! and `syncRunStrategy` (pkg/virt-controller/watch/vm/vm.go:970-1178, 1215-1246, 1899-1931).

use super::action::{SyncError, VmAction};
use super::backoff::start_failure_backoff_time_left;
use super::decide::Engine;
use super::reasons::{annotation, message, sync as reason};
use super::unsupported;
use crate::api::vm::{RunStrategy, RunStrategyError, VirtualMachine, VirtualMachineStatus};
use crate::api::vmi::{Phase, VirtualMachineInstance};

/// A run strategy as `VirtualMachine.RunStrategy()` returns it: KubeVirt passes unknown strings
/// through (they fail later in `syncRunStrategy` with "unknown runstrategy: X").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    /// One of the six strategies.
    Known(RunStrategy),
    /// Any other `spec.runStrategy` value.
    Unknown(String),
}

impl Strategy {
    /// The known strategy, if any.
    pub fn known(&self) -> Option<RunStrategy> {
        match self {
            Strategy::Known(s) => Some(*s),
            Strategy::Unknown(_) => None,
        }
    }

    /// The wire value.
    pub fn as_str(&self) -> &str {
        match self {
            Strategy::Known(s) => s.as_str(),
            Strategy::Unknown(s) => s,
        }
    }
}

/// `VirtualMachine.RunStrategy()` (staging/src/kubevirt.io/api/core/v1/types.go:1957-1970): only
/// "both set" is an error.
pub fn vm_strategy(vm: &VirtualMachine) -> Result<Strategy, RunStrategyError> {
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
pub fn has_start_request(status: Option<&VirtualMachineStatus>) -> bool {
    first_request(status).is_some_and(|r| r.action == "Start")
}

/// `hasStartPausedRequest` (vm.go:1899-1909): the first request is `Start` with data
/// `paused: "true"`.
pub fn has_start_paused_request(status: Option<&VirtualMachineStatus>) -> bool {
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
pub fn has_stop_request_for_vmi(
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
pub fn is_set_to_start(vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>) -> bool {
    let Ok(Strategy::Known(s)) = vm_strategy(vm) else {
        return false;
    };
    match s {
        RunStrategy::Always => true,
        RunStrategy::Halted => false,
        RunStrategy::Manual => match vmi {
            Some(v) => !has_stop_request_for_vmi(vm.status.as_ref(), v),
            None => has_start_request(vm.status.as_ref()),
        },
        RunStrategy::RerunOnFailure => vmi.is_none_or(|v| v.phase() != Phase::Succeeded),
        RunStrategy::Once => vmi.is_none(),
        RunStrategy::WaitAsReceiver => false,
    }
}

/// `IsDecentralizedMigration` (types.go:676-682): migration state with source and target state,
/// exactly one of which has a sync address.
pub fn is_decentralized_migration(vmi: &VirtualMachineInstance) -> bool {
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
pub fn is_migration_completed(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.migration_state.as_ref())
        .and_then(|m| m.get("completed"))
        .and_then(|c| c.as_bool())
        .unwrap_or(false)
}

fn start_error(e: String) -> SyncError {
    SyncError::new(
        reason::FAILED_CREATE,
        format!("{}{e}", message::STARTING_VMI_FAILURE),
    )
}

fn delete_error(e: String) -> SyncError {
    SyncError::new(
        reason::FAILED_DELETE,
        format!("{}{e}", message::FAILURE_DELETING_VMI),
    )
}

impl Engine<'_> {
    /// Honour the start-failure backoff (vm.go:1026-1031, 1073-1078): `true` when the start must
    /// wait; then `Queue.AddAfter(key, timeLeft)`.
    fn backoff_delays_start(&mut self, strategy: &str, line: &str) -> bool {
        let left = start_failure_backoff_time_left(self.vm.status.as_ref(), self.snap.now);
        if left <= 0 {
            return false;
        }
        self.explain(format!(
            "runStrategy {strategy}: start-failure backoff has {left}s left: requeue after \
             {left}s ({line})"
        ));
        self.local(
            VmAction::RequeueAfter { seconds: left },
            format!("start failure backoff, {left}s left ({line})"),
        );
        true
    }

    /// `syncRunStrategy` (vm.go:970-1178). Returns the sync error, if any.
    pub(super) fn sync_run_strategy(&mut self, strategy: &Strategy) -> Option<SyncError> {
        let status = self.vm.status.clone();
        let vmi = self.vmi.clone();
        match strategy {
            Strategy::Known(RunStrategy::Always) => {
                if let Some(vmi) = vmi {
                    let force = has_stop_request_for_vmi(status.as_ref(), &vmi);
                    if force || vmi.is_final() {
                        if is_decentralized_migration(&vmi) {
                            if is_migration_completed(&vmi) {
                                self.explain(
                                    "decentralized migration completed: set runStrategy Halted \
                                     (vm.go:988-996)",
                                );
                                self.vm.spec.run_strategy =
                                    Some(RunStrategy::Halted.as_str().to_string());
                                return None;
                            }
                            self.explain(
                                "decentralized migration not completed yet: requeue after 2s \
                                 (vm.go:997-1003)",
                            );
                            self.local(
                                VmAction::RequeueAfter { seconds: 2 },
                                "wait for the decentralized migration to complete (vm.go:1001)",
                            );
                            return None;
                        }
                        self.explain(format!(
                            "runStrategy Always: VMI {} ({}): delete it; a new one is started \
                             once the deletion is observed (vm.go:1005-1017)",
                            if force {
                                "has a stop request"
                            } else {
                                "is final"
                            },
                            vmi.phase().as_str()
                        ));
                        if let Err(e) = self.stop_vmi(&vmi) {
                            return Some(delete_error(e));
                        }
                        return None;
                    }
                    self.explain(
                        "runStrategy Always: the VMI exists and is not final: nothing to do",
                    );
                    return None;
                }
                if self.backoff_delays_start("Always", "vm.go:1026-1031") {
                    return None;
                }
                self.explain("runStrategy Always and no VMI: start one (vm.go:1033-1037)");
                self.start_vmi().err().map(start_error)
            }
            Strategy::Known(RunStrategy::RerunOnFailure) => {
                if let Some(vmi) = vmi {
                    let force = has_stop_request_for_vmi(status.as_ref(), &vmi);
                    let failed = vmi.phase() == Phase::Failed;
                    let succeeded = vmi.phase() == Phase::Succeeded;
                    if !vmi.is_deleting() && (force || failed || succeeded) {
                        self.explain(format!(
                            "runStrategy RerunOnFailure: VMI {}: delete it{} (vm.go:1050-1067)",
                            if force {
                                "has a stop request".to_string()
                            } else {
                                format!("is {}", vmi.phase().as_str())
                            },
                            if failed {
                                " and add a Start request so it is restarted"
                            } else {
                                ""
                            }
                        ));
                        if let Err(e) = self.stop_vmi(&vmi) {
                            return Some(delete_error(e));
                        }
                        if failed && let Err(e) = self.add_start_request() {
                            return Some(SyncError::new(
                                reason::FAILED_DELETE,
                                format!("failed to patch VM with start action: {e}"),
                            ));
                        }
                    } else {
                        self.explain("runStrategy RerunOnFailure: the VMI stays (vm.go:1069-1070)");
                    }
                    return None;
                }
                let status_strategy = status
                    .as_ref()
                    .and_then(|s| s.run_strategy.as_deref())
                    .unwrap_or("");
                if !has_start_request(status.as_ref()) && status_strategy == "RerunOnFailure" {
                    self.explain(
                        "runStrategy RerunOnFailure, no VMI, no start request: stay stopped \
                         (vm.go:1072-1075)",
                    );
                    return None;
                }
                if self.backoff_delays_start("RerunOnFailure", "vm.go:1077-1082") {
                    return None;
                }
                self.explain(
                    "runStrategy RerunOnFailure and no VMI, with a start request or just switched \
                     to it: start one (vm.go:1084-1089)",
                );
                self.start_vmi().err().map(start_error)
            }
            Strategy::Known(RunStrategy::Manual) => {
                if let Some(vmi) = vmi {
                    if has_stop_request_for_vmi(status.as_ref(), &vmi) {
                        self.explain("runStrategy Manual: stop request for the VMI: delete it (vm.go:1095-1104)");
                        if let Err(e) = self.stop_vmi(&vmi) {
                            return Some(delete_error(e));
                        }
                    } else {
                        self.explain(
                            "runStrategy Manual: the VMI exists, no stop request: nothing to do",
                        );
                    }
                } else if has_start_request(status.as_ref()) {
                    self.explain(
                        "runStrategy Manual: start request and no VMI: start one (vm.go:1106-1112)",
                    );
                    return self.start_vmi().err().map(start_error);
                } else {
                    self.explain("runStrategy Manual: no VMI and no start request: nothing to do");
                }
                None
            }
            Strategy::Known(RunStrategy::Halted) => {
                let Some(vmi) = vmi else {
                    if has_start_request(status.as_ref()) {
                        return Some(self.halted_start_request());
                    }
                    self.explain("runStrategy Halted and no VMI: nothing to do");
                    return None;
                };
                self.explain("runStrategy Halted and a VMI exists: delete it (vm.go:1134-1139)");
                self.stop_vmi(&vmi).err().map(delete_error)
            }
            Strategy::Known(RunStrategy::Once) => {
                if vmi.is_none() {
                    self.explain("runStrategy Once and no VMI: start one (vm.go:1140-1146)");
                    return self.start_vmi().err().map(start_error);
                }
                self.explain("runStrategy Once: a VMI exists (any phase): never restarted nor deleted (vm.go:1148)");
                None
            }
            Strategy::Known(RunStrategy::WaitAsReceiver) => {
                // The VMI-side checks are KubeVirt's (vm.go:1152-1165); creating a receiver VMI
                // is not modelled.
                let Some(vmi) = &vmi else {
                    return Some(unsupported::wait_as_receiver());
                };
                let receiver = vmi
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(crate::api::annotations::CREATE_MIGRATION_TARGET))
                    .is_some_and(|v| v == "true");
                if receiver {
                    self.explain(
                        "runStrategy WaitAsReceiver: the receiver VMI exists: nothing to do",
                    );
                    return None;
                }
                if !is_migration_completed(vmi) {
                    return Some(SyncError::new(
                        reason::FAILED_CREATE,
                        message::NON_RECEIVER_VMI,
                    ));
                }
                if let Some(restore) = self.restore_run_strategy() {
                    self.explain(format!(
                        "receiver VMI migrated: restore runStrategy {restore} (vm.go:1155-1162)"
                    ));
                    self.vm.spec.run_strategy = Some(restore);
                }
                None
            }
            Strategy::Unknown(s) => Some(SyncError::new(
                reason::FAILED_CREATE,
                format!("unknown runstrategy: {s}"),
            )),
        }
    }

    fn restore_run_strategy(&self) -> Option<String> {
        self.vm
            .metadata
            .annotations
            .as_ref()?
            .get(annotation::RESTORE_RUN_STRATEGY)
            .cloned()
    }

    /// Halted with a start request and no VMI ("start paused", vm.go:1117-1131): rewrite the VM
    /// to `runStrategy: Always` (or `running: true`) with a full Update whose result is
    /// discarded, and report a FailedCreate sync error `Failure while starting VMI: <err>` — with
    /// `<nil>` when the update worked (KubeVirt's quirk).
    fn halted_start_request(&mut self) -> SyncError {
        let mut copy = self.vm.clone();
        if copy.spec.run_strategy.is_some() {
            copy.spec.run_strategy = Some(RunStrategy::Always.as_str().to_string());
        } else {
            copy.spec.running = Some(true);
        }
        self.explain(
            "runStrategy Halted with a start request: rewrite the VM to runStrategy Always \
             (or running: true); the sync reports 'Failure while starting VMI: <nil>' \
             (vm.go:1117-1131)",
        );
        let (_, res) = self.api(
            VmAction::UpdateVm {
                vm: Box::new(copy),
                purpose: super::action::VmUpdatePurpose::HaltedStartRequest,
                resource_version_from: self.vm_rv,
            },
            "Halted + start request: switch the VM to Always/running so it starts \
             (vm.go:1117-1131)",
        );
        let err = match res {
            Ok(()) => message::NIL_ERROR.to_string(),
            Err(e) => e.message,
        };
        start_error(err)
    }
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
        v.status.as_mut().unwrap().migration_state = Some(json!({
            "completed": true,
            "targetState": {},
            "sourceState": {"syncAddress": "127.0.0.1:5900"}
        }));
        assert!(is_decentralized_migration(&v));
        assert!(is_migration_completed(&v));
        v.status.as_mut().unwrap().migration_state = Some(json!({
            "targetState": {"syncAddress": "a"},
            "sourceState": {"syncAddress": "b"}
        }));
        assert!(!is_decentralized_migration(&v));
        v.status.as_mut().unwrap().migration_state = Some(json!({"completed": true}));
        assert!(!is_decentralized_migration(&v));
    }
}
