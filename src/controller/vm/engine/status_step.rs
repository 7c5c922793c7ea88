//! Status step of the VM engine: `updateStatus` (vm.go:2457-2514).

use super::{Abort, Engine};
use crate::api::finalizers::VM_CONTROLLER;
use crate::api::vm::VirtualMachineStatus;
use crate::api::vmi::Phase;
use crate::controller::vm::action::{SyncError, VmAction};
use crate::controller::vm::backoff::sync_start_failure_status;
use crate::controller::vm::conditions::sync_conditions;
use crate::controller::vm::patches::{
    finalizers_patch, has_finalizer, without_vm_controller_finalizer,
};
use crate::controller::vm::printable::{PrintableContext, printable_status};
use crate::controller::vm::reasons::condition::READY;
use crate::controller::vm::run_strategy::strategy_or_none;
use crate::controller::vm::status::{normalize_status, trim_first_change_request_needed};
use crate::controller::vm::volume_snapshot::{SnapshotInputs, volume_snapshot_statuses};

impl Engine<'_> {
    /// `status.volumeSnapshotStatuses` from the VM in the cache, as KubeVirt's snapshot
    /// controller writes it (snapshot.go:969-992); left as it is when the snapshot carries no
    /// storage objects.
    fn sync_volume_snapshot_statuses(&mut self, status: &mut VirtualMachineStatus) {
        let Some(storage) = self.snap.storage.as_deref() else {
            return;
        };
        let claim_classes = self
            .snap
            .pvcs
            .iter()
            .map(|(name, pvc)| (name.clone(), pvc.storage_class_name.clone()))
            .collect();
        let inputs = SnapshotInputs {
            claim_classes: &claim_classes,
            backend_claim: self.snap.backend_claim.as_ref(),
            data_volumes: &self.snap.data_volumes,
            storage,
        };
        let statuses = match volume_snapshot_statuses(&self.snap.vm, &inputs) {
            Ok(s) => s,
            Err(e) => {
                self.explain(format!(
                    "volume snapshot statuses not updated: {e} (snapshot.go:973-976)"
                ));
                return;
            }
        };
        if statuses != status.volume_snapshot_statuses {
            self.explain(
                "volume snapshot statuses changed: written with the status (snapshot.go:969-992)",
            );
        }
        status.volume_snapshot_statuses = statuses;
    }

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

        // Legacy volume requests the template shows done (vm.go:2482).
        let trimmed =
            crate::controller::vm::volume_requests::trim_done(&mut status, self.vm.template_spec());
        if trimmed > 0 {
            self.explain(format!(
                "{trimmed} volume request(s) done in the template: drop them (vm.go:2855-2900)"
            ));
        }

        // Memory dump request (memorydump.UpdateRequest, vm.go:2483).
        let vmi_now = self.vmi.clone();
        if let Some(change) = crate::controller::vm::memory_dump::update_request(
            &mut status,
            &self.vm,
            vmi_now.as_deref(),
        ) {
            self.explain(format!(
                "memory dump request: {change} (memorydump.go:116-197)"
            ));
        }

        // State change requests.
        if trim_first_change_request_needed(&status, vmi_now.as_deref())
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
            vmi_now.as_deref(),
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
        sync_conditions(&mut conds, vmi_now.as_deref(), sync_error, self.snap.now);
        status.conditions = Some(conds);

        self.sync_volume_snapshot_statuses(&mut status);

        // Printable status.
        let ctx = PrintableContext {
            vm: &self.vm,
            status: Some(&status),
            vmi: vmi_now.as_deref(),
            expectations: &self.expectations,
            data_volumes: &self.snap.data_volumes,
            pvcs: &self.snap.pvcs,
            now: self.snap.now,
            rules: &self.snap.config.rules,
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
            res?;
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
                res?;
            }
        }
        Ok(())
    }
}
