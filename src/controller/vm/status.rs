//! `updateStatus` (pkg/virt-controller/watch/vm/vm.go:2457-2514) and the state-change-request
//! trimming it does (`isTrimFirstChangeRequestNeeded`, vm.go:2811-2853).
//!
//! Not modelled (their status fields are left as they are): volume-request trimming and the
//! memory-dump request (VMs using them are refused by `sync`), `syncVolumeMigration`
//! (`status.volumeUpdateState`), changed-block-tracking state.

use super::action::{SyncError, VmAction};
use super::backoff::sync_start_failure_status;
use super::conditions::sync_conditions;
use super::decide::{Abort, Engine, strategy_or_none};
use super::patches::{finalizers_patch, has_finalizer, without_vm_controller_finalizer};
use super::printable::{PrintableContext, printable_status};
use super::reasons::condition::READY;
use crate::api::finalizers::VM_CONTROLLER;
use crate::api::vm::VirtualMachineStatus;
use crate::api::vmi::{Phase, VirtualMachineInstance};

/// `isTrimFirstChangeRequestNeeded` (vm.go:2811-2853): only the first request is looked at.
/// `Stop` is done when there is no VMI, the request has no UID, or the UID is another VMI's;
/// `Start` is done when a VMI exists, is not being deleted and is not final.
pub fn trim_first_change_request_needed(
    status: &VirtualMachineStatus,
    vmi: Option<&VirtualMachineInstance>,
) -> bool {
    let Some(first) = status
        .state_change_requests
        .as_ref()
        .and_then(|r| r.first())
    else {
        return false;
    };
    match first.action.as_str() {
        "Stop" => match vmi {
            None => true,
            Some(v) => match first.uid.as_deref() {
                None => true,
                Some(uid) => uid != v.metadata.uid.as_deref().unwrap_or(""),
            },
        },
        "Start" => vmi.is_some_and(|v| !v.is_deleting() && !v.is_final()),
        _ => false,
    }
}

/// Make a status comparable the way Go's omitempty/semantic equality sees it: empty lists, `false`
/// booleans, zero generations and empty strings become absent.
pub fn normalize_status(status: &mut VirtualMachineStatus) {
    if status.conditions.as_ref().is_some_and(|c| c.is_empty()) {
        status.conditions = None;
    }
    if status
        .state_change_requests
        .as_ref()
        .is_some_and(|r| r.is_empty())
    {
        status.state_change_requests = None;
    }
    if status.created == Some(false) {
        status.created = None;
    }
    if status.ready == Some(false) {
        status.ready = None;
    }
    if status.observed_generation == Some(0) {
        status.observed_generation = None;
    }
    if status.desired_generation == Some(0) {
        status.desired_generation = None;
    }
    if status.printable_status.as_deref() == Some("") {
        status.printable_status = None;
    }
    if status.run_strategy.as_deref() == Some("") {
        status.run_strategy = None;
    }
}

impl Engine<'_> {
    /// `updateStatus` (vm.go:2457-2514). Sets `self.status`; `Err` aborts (the status write or
    /// a VMI patch failed).
    pub(super) fn update_status(&mut self, sync_error: Option<&SyncError>) -> Result<(), Abort> {
        let vmi = self.vmi.clone();
        let mut status = self.vm.status.clone().unwrap_or_default();

        // created / ready / generations.
        let created = vmi.is_some();
        status.created = Some(created);
        let ready = vmi
            .as_ref()
            .and_then(|v| v.condition(READY))
            .is_some_and(|c| c.is_true());
        if created {
            self.sync_generation_info(&mut status)?;
        }
        status.ready = Some(ready);

        // runStrategy: vmOrig.RunStrategy(), once a VMI was created at least once.
        let orig_strategy = strategy_or_none(&self.snap.vm)
            .map(|s| s.as_str().to_string())
            .unwrap_or_default();
        if status
            .run_strategy
            .as_deref()
            .is_some_and(|s| !s.is_empty())
            || created
        {
            status.run_strategy = Some(orig_strategy);
        }

        // State change requests.
        let vmi_now = self.vmi.clone();
        if trim_first_change_request_needed(&status, vmi_now.as_ref())
            && let Some(reqs) = status.state_change_requests.as_mut()
        {
            let popped = reqs.remove(0);
            self.explain(format!(
                "state change request {} is done: remove it (vm.go:2811-2853)",
                popped.action
            ));
        }

        // Start failures.
        let strategy = strategy_or_none(&self.vm);
        if let Some(delay) = sync_start_failure_status(
            &mut status,
            strategy.as_ref(),
            vmi_now.as_ref(),
            self.snap.now,
            self.snap.backoff_jitter,
        ) {
            let count = status
                .start_failure
                .as_ref()
                .map(|f| f.consecutive_fail_count)
                .unwrap_or(0);
            self.explain(format!(
                "the VMI failed before ever running: start failure #{count}, next start not \
                 before {delay}s from now (vm.go:1575-1603)"
            ));
        }

        // Conditions.
        let mut conds = status.conditions.take().unwrap_or_default();
        sync_conditions(&mut conds, vmi_now.as_ref(), sync_error, self.snap.now);
        status.conditions = Some(conds);

        // Printable status.
        let mut vm_view = self.vm.clone();
        vm_view.status = Some(status.clone());
        let ctx = PrintableContext {
            vm: &vm_view,
            vmi: vmi_now.as_ref(),
            expectations: &self.expectations,
            data_volumes: &self.snap.data_volumes,
            pvcs: &self.snap.pvcs,
            now: self.snap.now,
        };
        let (printable, rule) = printable_status(&ctx);
        self.explain(format!("printableStatus {} ({rule})", printable.as_str()));
        status.printable_status = Some(printable.as_str().to_string());

        normalize_status(&mut status);
        let mut orig = self.snap.vm.status.clone().unwrap_or_default();
        normalize_status(&mut orig);
        if status != orig {
            self.explain("status changed: UpdateStatus (vm.go:2495-2500)");
            let (_, res) = self.api(
                VmAction::UpdateVmStatus {
                    status: Box::new(status.clone()),
                    resource_version_from: self.vm_rv,
                },
                "write the recomputed status (vm.go:2495-2500)",
            );
            res.map_err(|e| e.message)?;
        } else {
            self.explain("status unchanged: no write");
        }
        self.status = Some(status);

        // VMI finalizer once its final state has been recorded.
        if let Some(vmi) = vmi_now {
            let sync_deleted = vmi.phase() == Phase::WaitingForSync && vmi.is_deleting();
            let has_finalizers = vmi
                .metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty());
            if (vmi.is_final() || sync_deleted)
                && has_finalizers
                && has_finalizer(&vmi.metadata, VM_CONTROLLER)
            {
                let new = without_vm_controller_finalizer(vmi.metadata.finalizers.as_ref());
                let patch = finalizers_patch(vmi.metadata.finalizers.as_ref(), &new);
                self.explain(
                    "the VMI is final and its state is recorded: drop the VM controller \
                     finalizer from it (vm.go:2502-2511)",
                );
                let (_, res) = self.api(
                    VmAction::RemoveVmiFinalizer {
                        name: vmi.metadata.name.clone().unwrap_or_default(),
                        patch,
                    },
                    "VMI final: remove kubevirt.io/virtualMachineControllerFinalize \
                     (vm.go:2314-2336)",
                );
                res.map_err(|e| e.message)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(reqs: serde_json::Value) -> VirtualMachineStatus {
        serde_json::from_value(json!({ "stateChangeRequests": reqs })).unwrap()
    }

    fn vmi(uid: &str, phase: &str, deleting: bool) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "vm", "uid": uid},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase},
        }))
        .unwrap();
        if deleting {
            v.metadata.deletion_timestamp =
                crate::api::Time::from_datetime(chrono::DateTime::from_timestamp(1, 0).unwrap())
                    .to_k8s();
        }
        v
    }

    /// Facts §1.5 / vm.go:2811-2853, and the trimming seen in vm_test.go:7016 "when issuing a
    /// restart a VM with Always should get restarted".
    #[test]
    fn trimming_rules() {
        let stop = status(json!([{"action": "Stop", "uid": "u1"}, {"action": "Start"}]));
        assert!(trim_first_change_request_needed(&stop, None));
        assert!(!trim_first_change_request_needed(
            &stop,
            Some(&vmi("u1", "Running", false))
        ));
        assert!(trim_first_change_request_needed(
            &stop,
            Some(&vmi("u2", "Running", false))
        ));
        let stop_no_uid = status(json!([{"action": "Stop"}]));
        assert!(trim_first_change_request_needed(
            &stop_no_uid,
            Some(&vmi("u1", "Running", false))
        ));

        let start = status(json!([{"action": "Start"}, {"action": "Stop", "uid": "u9"}]));
        assert!(!trim_first_change_request_needed(&start, None));
        assert!(trim_first_change_request_needed(
            &start,
            Some(&vmi("u1", "Scheduling", false))
        ));
        assert!(!trim_first_change_request_needed(
            &start,
            Some(&vmi("u1", "Running", true))
        ));
        assert!(!trim_first_change_request_needed(
            &start,
            Some(&vmi("u1", "Failed", false))
        ));
        assert!(!trim_first_change_request_needed(&status(json!([])), None));
    }

    #[test]
    fn normalization_treats_empty_as_absent() {
        let mut s = VirtualMachineStatus {
            conditions: Some(vec![]),
            state_change_requests: Some(vec![]),
            created: Some(false),
            ready: Some(false),
            observed_generation: Some(0),
            ..Default::default()
        };
        normalize_status(&mut s);
        assert_eq!(s, VirtualMachineStatus::default());
    }
}
