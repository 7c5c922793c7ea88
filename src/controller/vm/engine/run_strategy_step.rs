//! Run-strategy step of the VM engine: `syncRunStrategy` (vm.go:990-1180), one method per run
//! strategy. Add a run-strategy branch here (an arm of `sync_run_strategy` and its method); the
//! pure predicates live in `vm::run_strategy`.

use super::Engine;
use crate::api::vm::RunStrategy;
use crate::api::vm::VirtualMachineStatus;
use crate::api::vmi::{Phase, VirtualMachineInstance};
use crate::controller::vm::action::{SyncError, VmAction};
use crate::controller::vm::backoff::start_failure_backoff_time_left;
use crate::controller::vm::reasons::{annotation, message, sync as reason};
use crate::controller::vm::run_strategy::{
    Strategy, delete_error, has_start_request, has_stop_request_for_vmi,
    is_decentralized_migration, is_migration_completed, start_error,
};
use crate::controller::vm::unsupported;
use std::sync::Arc;

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

    /// `syncRunStrategy` (vm.go:970-1178): one method per run strategy. Returns the sync error,
    /// if any.
    pub(super) fn sync_run_strategy(&mut self, strategy: &Strategy) -> Option<SyncError> {
        let status = self.vm.status.clone();
        let status = status.as_ref();
        let vmi = self.vmi.clone();
        match strategy {
            Strategy::Known(RunStrategy::Always) => self.run_always(status, vmi),
            Strategy::Known(RunStrategy::RerunOnFailure) => self.run_rerun_on_failure(status, vmi),
            Strategy::Known(RunStrategy::Manual) => self.run_manual(status, vmi),
            Strategy::Known(RunStrategy::Halted) => self.run_halted(status, vmi),
            Strategy::Known(RunStrategy::Once) => self.run_once(vmi),
            Strategy::Known(RunStrategy::WaitAsReceiver) => self.run_wait_as_receiver(vmi),
            Strategy::Unknown(s) => Some(SyncError::new(
                reason::FAILED_CREATE,
                format!("unknown runstrategy: {s}"),
            )),
        }
    }

    /// `runStrategy: Always` (vm.go:984-1037): a final or stop-requested VMI is deleted, a missing one started after the backoff.
    fn run_always(
        &mut self,
        status: Option<&VirtualMachineStatus>,
        vmi: Option<Arc<VirtualMachineInstance>>,
    ) -> Option<SyncError> {
        if let Some(vmi) = vmi {
            let force = has_stop_request_for_vmi(status, &vmi);
            if force || vmi.is_final() {
                if is_decentralized_migration(&vmi) {
                    if is_migration_completed(&vmi) {
                        self.explain(
                            "decentralized migration completed: set runStrategy Halted \
                             (vm.go:988-996)",
                        );
                        Arc::make_mut(&mut self.vm).spec.run_strategy =
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
            self.explain("runStrategy Always: the VMI exists and is not final: nothing to do");
            return None;
        }
        if self.backoff_delays_start("Always", "vm.go:1026-1031") {
            return None;
        }
        self.explain("runStrategy Always and no VMI: start one (vm.go:1033-1037)");
        self.start_vmi().err().map(start_error)
    }

    /// `runStrategy: RerunOnFailure` (vm.go:1038-1089): a failed VMI is deleted and restarted, a succeeded one stays stopped.
    fn run_rerun_on_failure(
        &mut self,
        status: Option<&VirtualMachineStatus>,
        vmi: Option<Arc<VirtualMachineInstance>>,
    ) -> Option<SyncError> {
        if let Some(vmi) = vmi {
            let force = has_stop_request_for_vmi(status, &vmi);
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
        if !has_start_request(status) && status_strategy == "RerunOnFailure" {
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

    /// `runStrategy: Manual` (vm.go:1090-1113): only start and stop requests act.
    fn run_manual(
        &mut self,
        status: Option<&VirtualMachineStatus>,
        vmi: Option<Arc<VirtualMachineInstance>>,
    ) -> Option<SyncError> {
        if let Some(vmi) = vmi {
            if has_stop_request_for_vmi(status, &vmi) {
                self.explain(
                    "runStrategy Manual: stop request for the VMI: delete it (vm.go:1095-1104)",
                );
                if let Err(e) = self.stop_vmi(&vmi) {
                    return Some(delete_error(e));
                }
            } else {
                self.explain("runStrategy Manual: the VMI exists, no stop request: nothing to do");
            }
        } else if has_start_request(status) {
            self.explain(
                "runStrategy Manual: start request and no VMI: start one (vm.go:1106-1112)",
            );
            return self.start_vmi().err().map(start_error);
        } else {
            self.explain("runStrategy Manual: no VMI and no start request: nothing to do");
        }
        None
    }

    /// `runStrategy: Halted` (vm.go:1114-1139): a VMI is deleted; a start request is KubeVirt's "start paused" quirk.
    fn run_halted(
        &mut self,
        status: Option<&VirtualMachineStatus>,
        vmi: Option<Arc<VirtualMachineInstance>>,
    ) -> Option<SyncError> {
        let Some(vmi) = vmi else {
            if has_start_request(status) {
                return Some(self.halted_start_request());
            }
            self.explain("runStrategy Halted and no VMI: nothing to do");
            return None;
        };
        self.explain("runStrategy Halted and a VMI exists: delete it (vm.go:1134-1139)");
        self.stop_vmi(&vmi).err().map(delete_error)
    }

    /// `runStrategy: Once` (vm.go:1140-1148): started once, never restarted nor deleted.
    fn run_once(&mut self, vmi: Option<Arc<VirtualMachineInstance>>) -> Option<SyncError> {
        if vmi.is_none() {
            self.explain("runStrategy Once and no VMI: start one (vm.go:1140-1146)");
            return self.start_vmi().err().map(start_error);
        }
        self.explain(
            "runStrategy Once: a VMI exists (any phase): never restarted nor deleted (vm.go:1148)",
        );
        None
    }

    /// `runStrategy: WaitAsReceiver` (vm.go:1150-1165): the receiver side of a decentralized migration.
    fn run_wait_as_receiver(
        &mut self,
        vmi: Option<Arc<VirtualMachineInstance>>,
    ) -> Option<SyncError> {
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
            self.explain("runStrategy WaitAsReceiver: the receiver VMI exists: nothing to do");
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
            Arc::make_mut(&mut self.vm).spec.run_strategy = Some(restore);
        }
        None
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
        let mut copy = (*self.vm).clone();
        if copy.spec.run_strategy.is_some() {
            copy.spec.run_strategy = Some(RunStrategy::Always.as_str().to_string());
        } else {
            copy.spec.running = Some(true);
        }
        crate::controller::vm::go_encoding::vm(&mut copy);
        self.explain(
            "runStrategy Halted with a start request: rewrite the VM to runStrategy Always \
             (or running: true); the sync reports 'Failure while starting VMI: <nil>' \
             (vm.go:1117-1131)",
        );
        let (_, res) = self.api(
            VmAction::UpdateVm {
                vm: Box::new(copy),
                purpose: crate::controller::vm::action::VmUpdatePurpose::HaltedStartRequest,
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
