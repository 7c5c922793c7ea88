//! The `execute` → `sync` step of the VM engine (vm.go:357-458, 3215-3390): expectations gate,
//! api-version annotations, claiming, deletion and finalizers, then the other steps in order.

use super::{Abort, Engine};
use crate::api::finalizers::{ORPHAN, VM_CONTROLLER};
use crate::api::vm::{VirtualMachine, VirtualMachineSpec};
use crate::controller::common::ReconcileError;
use crate::controller::vm::action::{
    ResourceVersionFrom, SyncError, SyncOutcome, VmAction, VmUpdatePurpose,
};
use crate::controller::vm::claim::{VmiClaim, claim_data_volume, claim_vmi};
use crate::controller::vm::conditions;
use crate::controller::vm::patches::{
    self, adopt_patch, finalizers_patch, has_finalizer, with_vm_controller_finalizer,
    without_vm_controller_finalizer,
};
use crate::controller::vm::reasons::{annotation, message, sync as reason};
use crate::controller::vm::run_strategy::Strategy;
use crate::controller::vm::run_strategy::vm_strategy;
use crate::controller::vm::{metadata_sync, restart_required};
use std::borrow::Cow;
use std::sync::Arc;

impl Engine<'_> {
    // ------------------------------------------------------------------------------------
    // execute (vm.go:357-458)
    // ------------------------------------------------------------------------------------

    pub(super) fn execute(&mut self) -> SyncOutcome {
        if self.vm.metadata.name.as_deref().unwrap_or("").is_empty() {
            return SyncOutcome::Error(ReconcileError::invalid_object(
                "VirtualMachine",
                self.key.clone(),
                "metadata.name",
                "is empty",
            ));
        }
        if self.vm.spec.template.is_none() {
            let error = ReconcileError::invalid_object(
                "VirtualMachine",
                self.key.clone(),
                "spec.template",
                "is required; not syncing",
            );
            self.explain(error.to_string());
            return SyncOutcome::Error(error);
        }

        // Step 2: the api-version annotations are always the first write (vm.go:374-386).
        let observed =
            crate::api::annotation(&self.vm.metadata, annotation::LATEST_OBSERVED_API_VERSION)
                == Some(annotation::API_VERSION_V1);
        if !observed {
            let mut updated = (*self.vm).clone();
            let ann = updated
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            ann.insert(
                annotation::LATEST_OBSERVED_API_VERSION,
                annotation::API_VERSION_V1.into(),
            );
            ann.insert(
                annotation::STORAGE_OBSERVED_API_VERSION,
                annotation::API_VERSION_V1.into(),
            );
            // Go writes `domain.resources: {}` into the template: a spec change (go_encoding).
            crate::controller::vm::go_encoding::vm(&mut updated);
            self.explain(
                "the VM lacks the observed api-version annotations: set them with a full Update \
                 and stop; the write triggers the next sync (vm.go:374-386)",
            );
            let (_, res) = self.api(
                VmAction::UpdateVm {
                    vm: Box::new(updated),
                    purpose: VmUpdatePurpose::ApiVersionAnnotations,
                    resource_version_from: ResourceVersionFrom::Snapshot,
                },
                "set kubevirt.io/latest-observed-api-version and storage-observed-api-version \
                 (vm.go:376-386)",
            );
            return match res {
                Ok(()) => SyncOutcome::Done,
                Err(e) => SyncOutcome::Error(ReconcileError::api(
                    "update",
                    "virtualmachines",
                    self.key.clone(),
                    e,
                )),
            };
        }

        // Step 4: claim the same-named VMI (vm.go:409-425).
        if let Err(e) = self.claim_vmi() {
            return SyncOutcome::Error(e.into());
        }
        // Step 5: claim DataVolumes of the templates (vm.go:427-438).
        if let Err(e) = self.claim_data_volumes() {
            return SyncOutcome::Error(e.into());
        }

        // Step 6: sync, then updateStatus (vm.go:440-457).
        let sync_error = match self.sync() {
            Ok(e) => e,
            Err(abort) => {
                self.explain(format!(
                    "sync stopped with an error, status not updated, key requeued with rate \
                     limit: {abort}"
                ));
                return SyncOutcome::Error(abort.into());
            }
        };
        self.sync_error = sync_error.clone();
        if let Some(e) = &sync_error {
            self.explain(format!("sync error {}: {}", e.reason, e.message));
        }
        if let Err(abort) = self.update_status(sync_error.as_ref()) {
            self.explain(format!("updateStatus failed: {abort}"));
            return SyncOutcome::Error(abort.into());
        }
        match sync_error {
            Some(e) => SyncOutcome::Error(ReconcileError::Sync(e)),
            None => SyncOutcome::Done,
        }
    }

    fn claim_vmi(&mut self) -> Result<(), Abort> {
        let Some(vmi) = self.snap.vmi.clone() else {
            self.explain("no VMI with the VM's name in the cache");
            return Ok(());
        };
        match claim_vmi(&self.vm, &vmi) {
            VmiClaim::Owned => {
                self.vmi = Some(vmi);
            }
            VmiClaim::Adopt => {
                let name = vmi.metadata.name.clone().unwrap_or_default();
                let uid = vmi.metadata.uid.clone().unwrap_or_default();
                let patch = adopt_patch(
                    self.vm.metadata.name.as_deref().unwrap_or(""),
                    self.vm.metadata.uid.as_deref().unwrap_or(""),
                    &uid,
                );
                self.explain(format!(
                    "VMI {name} has no controller: adopt it (controller_ref_manager.go:167-186)"
                ));
                let (_, res) = self.api(
                    VmAction::AdoptVmi { name, uid, patch },
                    "orphan VMI with the VM's name: adopt it (controller_ref_manager.go:381-427)",
                );
                match res {
                    Ok(()) => self.vmi = Some(vmi),
                    Err(e) if e.is_not_found() => {
                        self.explain("the VMI disappeared while adopting it: treated as absent");
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            VmiClaim::Release => {
                let name = vmi.metadata.name.clone().unwrap_or_default();
                let (_, res) = self.api(
                    VmAction::ReleaseVmi {
                        name,
                        patch: patches::release_patch(),
                    },
                    "owned VMI no longer matches: release it (controller_ref_manager.go:109-132)",
                );
                if let Err(e) = res
                    && !(e.is_not_found() || e.is_invalid())
                {
                    return Err(e.into());
                }
            }
            VmiClaim::NotClaimed(why) => {
                self.explain(format!("VMI not claimed, treated as absent: {why}"));
            }
        }
        Ok(())
    }

    fn claim_data_volumes(&mut self) -> Result<(), Abort> {
        let names = crate::controller::vm::datavolume::template_names(&self.vm);
        let mut errors = Vec::new();
        for name in names {
            let Some(dv) = self
                .snap
                .data_volumes
                .iter()
                .find(|d| d.metadata.name.as_deref() == Some(name.as_str()))
            else {
                continue;
            };
            if !claim_data_volume(&self.vm, dv) {
                continue;
            }
            let uid = dv.metadata.uid.clone().unwrap_or_default();
            let patch = adopt_patch(
                self.vm.metadata.name.as_deref().unwrap_or(""),
                self.vm.metadata.uid.as_deref().unwrap_or(""),
                &uid,
            );
            let (_, res) = self.api(
                VmAction::AdoptDataVolume {
                    name: name.clone(),
                    uid,
                    patch,
                },
                "orphan DataVolume of a dataVolumeTemplate: adopt it \
                 (controller_ref_manager.go:338-362, 508-519)",
            );
            if let Err(e) = res
                && !e.is_not_found()
            {
                errors.push(e);
            }
        }
        if errors.is_empty() {
            Ok(())
        } else if errors.len() == 1 {
            Err(errors.remove(0).into())
        } else {
            Err(Abort::Aggregate(errors))
        }
    }

    // ------------------------------------------------------------------------------------
    // sync (vm.go:3215-3390)
    // ------------------------------------------------------------------------------------

    fn sync(&mut self) -> Result<Option<SyncError>, Abort> {
        // 1. Expectations.
        if !self.expectations.satisfied() {
            self.explain(format!(
                "expectations not satisfied ({:?}): wait for the informer to observe earlier \
                 creates/deletes (vm.go:3225-3227)",
                self.expectations
            ));
            return Ok(None);
        }

        // 2. The spec of the newest start revision, for RestartRequired.
        let start_spec: Option<VirtualMachineSpec> = if self.vmi.is_some() {
            crate::controller::vm::revision::last_revision_spec(&self.vm, &self.snap.revisions)?
        } else {
            None
        };

        // 3. Deletion.
        if self.vm.metadata.deletion_timestamp.is_some() {
            return self.sync_deletion();
        }
        self.add_vm_finalizer()?;

        // 5. Generation annotation bump.
        self.conditionally_bump_generation()?;

        // 6. Run strategy.
        let strategy = match vm_strategy(&self.vm) {
            Ok(s) => s,
            Err(e) => {
                // KubeVirt returns both a SyncError and the error; execute returns before
                // updateStatus, so the Failure condition is never written (vm.go:3263-3266,
                // 442-445).
                self.sync_error = Some(SyncError::new(
                    reason::FAILED_CREATE,
                    format!("{}{e}", message::FETCHING_RUN_STRATEGY),
                ));
                return Err(e.into());
            }
        };
        self.explain(format!("run strategy: {}", strategy.as_str()));

        // 7. Instancetypes: stash the referenced specs in ControllerRevisions, or expand them
        // into the VM (vm.go:3268-3282). Under `reference` the working VM is the one the
        // synchronizer returns, so no early return: its spec and status compare equal to
        // themselves. An expanded VM differs: the sync ends there without error.
        match self.sync_instancetype() {
            super::instancetype::InstancetypeSync::Continue => {}
            super::instancetype::InstancetypeSync::Expanded => return Ok(None),
            super::instancetype::InstancetypeSync::Failed(e) => return Ok(Some(e)),
        }

        // 8. DataVolumes.
        if let Err(e) = self.sync_data_volumes(&strategy) {
            return Ok(e);
        }

        // 9. Run strategy.
        let orig_run_strategy = self.vm.spec.run_strategy.clone();
        if let Some(e) = self.sync_run_strategy(&strategy) {
            return Ok(Some(e));
        }

        // 10. RestartRequired.
        let restart_required = self.sync_restart_required(start_spec.as_ref());

        // 11. Expectations again.
        if !self.expectations.satisfied() {
            self.explain(
                "a VMI create/delete was just issued: stop here until it is observed \
                 (vm.go:3303-3308)",
            );
            return Ok(None);
        }
        // KubeVirt's `vmCopy := vm.DeepCopy()`, copied on the first change (`Arc::make_mut`):
        // most syncs change nothing, and then both are the same object.
        let mut vm_copy = self.vm.clone();
        if self.vm.spec.run_strategy != orig_run_strategy {
            Arc::make_mut(&mut self.vm).spec.run_strategy = orig_run_strategy;
        }
        let mut copy_rv = self.vm_rv;

        // 12. Synchronizers.
        if let Some(e) = self.sync_network(&mut vm_copy) {
            return Ok(Some(e));
        }
        if let Some(e) = self.sync_firmware_uuid(&mut vm_copy, &mut copy_rv) {
            return Ok(Some(e));
        }
        if let Some(e) = self
            .sync_volume_requests(&mut vm_copy)
            .or_else(|| self.sync_declarative_hotplug(&vm_copy))
            .or_else(|| self.sync_memory_dump(&mut vm_copy))
        {
            return Ok(Some(e));
        }
        if let Some(e) = self.sync_dynamic_metadata(&vm_copy) {
            return Ok(Some(e));
        }
        metadata_sync::sync_pci_topology_annotations_to_vm(&mut vm_copy, self.vmi.as_deref());

        // 13. Live updates (vm.go:3350-3377): only with LiveUpdate and no restart pending.
        let has_restart_required = self.has_restart_required();
        if self.snap.config.rollout_strategy_live_update
            && !restart_required
            && !has_restart_required
            && let Some(e) = self.sync_live_updates(&mut vm_copy)
        {
            return Ok(Some(e));
        }

        // 14. Persist spec/metadata changes (none when the copy was never written to).
        let changed = !Arc::ptr_eq(&self.vm, &vm_copy)
            && (!crate::controller::common::semantic::semantic_eq(&self.vm.spec, &vm_copy.spec)
                || !crate::controller::common::semantic::semantic_eq(
                    &self.vm.metadata,
                    &vm_copy.metadata,
                ));
        if changed || copy_rv != self.vm_rv {
            self.explain(
                "spec or metadata changed during the sync: Update the VM (vm.go:3379-3387)",
            );
            let (index, res) = self.api(
                VmAction::UpdateVm {
                    vm: Box::new({
                        let mut body = (*vm_copy).clone();
                        crate::controller::vm::go_encoding::vm(&mut body);
                        body
                    }),
                    purpose: VmUpdatePurpose::SyncedSpec,
                    resource_version_from: copy_rv,
                },
                "persist the VM spec/metadata changed by the synchronizers (vm.go:3379-3387)",
            );
            if let Err(e) = res {
                return Ok(Some(SyncError::new(
                    reason::FAILED_UPDATE_ERROR,
                    format!(
                        "Error encountered when trying to update vm according to add volume \
                         and/or memory dump requests: {e}"
                    ),
                )));
            }
            // `vm = updatedVm`: the returned object carries the stored status, so in-memory
            // status changes of this sync are dropped.
            self.vm = vm_copy;
            Arc::make_mut(&mut self.vm).status = self.server_status.clone();
            self.vm_rv = ResourceVersionFrom::Action(index);
        } else {
            self.vm = vm_copy;
        }
        Ok(None)
    }

    /// A VM being deleted (vm.go:3236-3248): its VMI is stopped first, then the finalizer goes.
    fn sync_deletion(&mut self) -> Result<Option<SyncError>, Abort> {
        let vmi = self.vmi.clone();
        if vmi.is_none() || has_finalizer(&self.vm.metadata, ORPHAN) {
            self.explain(
                "the VM is being deleted and its VMI is gone (or orphan deletion): remove the \
                 VM finalizer (vm.go:3236-3241)",
            );
            self.remove_vm_finalizer()?;
            return Ok(None);
        }
        self.explain("the VM is being deleted: stop its VMI first (vm.go:3242-3248)");
        if let Some(vmi) = vmi
            && let Err(e) = self.stop_vmi(&vmi)
        {
            return Ok(Some(SyncError::new(
                reason::FAILED_DELETE,
                format!("{}{e}", message::FAILURE_DELETING_VMI),
            )));
        }
        Ok(None)
    }

    /// DataVolumes, unless `immediate-data-volume-creation` is off (vm.go:3284-3294). `Err`
    /// ends the sync with that sync error (`None`: wait for the DataVolumes).
    fn sync_data_volumes(&mut self, strategy: &Strategy) -> Result<(), Option<SyncError>> {
        let immediate = crate::api::annotation(
            &self.vm.metadata,
            crate::api::annotations::IMMEDIATE_DATA_VOLUME_CREATION,
        ) != Some("false");
        if immediate {
            match self.handle_data_volumes() {
                Err(e) => {
                    return Err(Some(SyncError::new(
                        reason::FAILED_CREATE,
                        format!("Error encountered while creating DataVolumes: {e}"),
                    )));
                }
                Ok(false) if strategy.known() != Some(crate::api::RunStrategy::Halted) => {
                    self.explain("DataVolumes not ready yet: wait (vm.go:3290-3294)");
                    return Err(None);
                }
                Ok(_) => {}
            }
        }
        Ok(())
    }

    /// The firmware UUID synchronizer (firmware.go:48-81): a template without a UUID gets the
    /// legacy one persisted, and the copy carries it with the generation the server bumps.
    fn sync_firmware_uuid(
        &mut self,
        vm_copy: &mut Arc<VirtualMachine>,
        copy_rv: &mut ResourceVersionFrom,
    ) -> Option<SyncError> {
        if let Some((patch, firmware)) =
            crate::controller::vm::firmware::firmware_uuid_patch(vm_copy)
        {
            self.explain(
                "the template has no firmware UUID: persist the legacy UUID (firmware.go:48-66)",
            );
            let (index, res) = self.api(
                VmAction::PatchVmFirmware { patch },
                "persist CalculateLegacyUUID(vm name) into spec.template (firmware.go:48-81)",
            );
            if let Err(e) = res {
                return Some(SyncError::new(
                    reason::FIRMWARE_UUID_ERROR,
                    format!("error encountered when trying to patch VM firmware: {e}"),
                ));
            }
            let copy = Arc::make_mut(vm_copy);
            if let Some(spec) = copy
                .spec
                .template
                .as_mut()
                .map(|t| t.spec.get_or_insert_with(Default::default))
            {
                spec.domain.firmware = Some(firmware);
            }
            // `sync` copies the synchronizer's returned VM's ObjectMeta into vmCopy
            // (`vmCopy.ObjectMeta = syncedVM.ObjectMeta`, vm.go sync step 12): the server bumped
            // metadata.generation for the spec change, and updateStatus reports that generation
            // as status.desiredGeneration in the same status write.
            copy.metadata.generation = copy.metadata.generation.map(|g| g + 1);
            *copy_rv = ResourceVersionFrom::Action(index);
        }
        None
    }

    /// `removeVMFinalizer` (vm.go:2338-2360). A failure aborts the sync.
    fn remove_vm_finalizer(&mut self) -> Result<(), Abort> {
        if !has_finalizer(&self.vm.metadata, VM_CONTROLLER) {
            return Ok(());
        }
        let new = without_vm_controller_finalizer(self.vm.metadata.finalizers.as_ref());
        let patch = finalizers_patch(self.vm.metadata.finalizers.as_ref(), &new);
        let (index, res) = self.api(
            VmAction::RemoveVmFinalizer { patch },
            "VM deleted and VMI gone: drop kubevirt.io/virtualMachineControllerFinalize \
             (vm.go:2338-2360)",
        );
        res?;
        let vm = Arc::make_mut(&mut self.vm);
        vm.metadata.finalizers = Some(new);
        vm.status = self.server_status.clone();
        self.vm_rv = ResourceVersionFrom::Action(index);
        Ok(())
    }

    /// `addVMFinalizer` (vm.go:2362-2382). A failure aborts the sync.
    fn add_vm_finalizer(&mut self) -> Result<(), Abort> {
        if has_finalizer(&self.vm.metadata, VM_CONTROLLER) {
            return Ok(());
        }
        let new = with_vm_controller_finalizer(self.vm.metadata.finalizers.as_ref());
        let patch = finalizers_patch(self.vm.metadata.finalizers.as_ref(), &new);
        self.explain("add the VM controller finalizer (vm.go:3250-3255)");
        let (index, res) = self.api(
            VmAction::AddVmFinalizer { patch },
            "ensure kubevirt.io/virtualMachineControllerFinalize on the VM (vm.go:2362-2382)",
        );
        res?;
        let vm = Arc::make_mut(&mut self.vm);
        vm.metadata.finalizers = Some(new);
        vm.status = self.server_status.clone();
        self.vm_rv = ResourceVersionFrom::Action(index);
        Ok(())
    }

    /// `syncRestartRequired` (vm.go:2989-3065) on the working VM.
    fn sync_restart_required(&mut self, start_spec: Option<&VirtualMachineSpec>) -> bool {
        let (Some(last_seen), Some(vmi)) = (start_spec, self.vmi.clone()) else {
            return false;
        };
        let live = self.snap.config.rollout_strategy_live_update;
        // Both sides with their instancetype and preference expanded; an expansion error leaves
        // the condition as it is (vm.go:2994-3007). Without any, both are used as they are.
        let uses = |s: &VirtualMachineSpec| s.instancetype.is_some() || s.preference.is_some();
        let (current, seen) = if uses(&self.vm.spec) || uses(last_seen) {
            let current = match self.expanded(&self.vm) {
                Ok(vm) => vm,
                Err(e) => {
                    self.explain(format!(
                        "RestartRequired not evaluated: {e} (vm.go:2996-2998)"
                    ));
                    return false;
                }
            };
            let mut seen_vm = (*self.vm).clone();
            seen_vm.spec = last_seen.clone();
            match self.expanded(&seen_vm) {
                Ok(vm) => (Cow::Owned(current), Cow::Owned(vm.spec)),
                Err(e) => {
                    self.explain(format!(
                        "RestartRequired not evaluated: {e} (vm.go:3004-3006)"
                    ));
                    return false;
                }
            }
        } else {
            (Cow::Borrowed(&*self.vm), Cow::Borrowed(last_seen))
        };
        let rules = &self.snap.config.rules;
        let nad_live = crate::controller::vm::net_sync::nad_live_update(rules, &vmi);
        let required = restart_required::restart_required(&seen, &current, &vmi, live, nad_live);
        let now = self.snap.now;
        if required {
            self.explain(
                "the template differs from the start revision in a non-live-updatable field: \
                 RestartRequired=True (vm.go:3052-3055)",
            );
            conditions::set_restart_required(
                self.vm_conditions_mut(),
                message::RESTART_REQUIRED,
                now,
            );
        } else {
            self.remove_restart_required();
        }
        required
    }

    /// `syncDynamicAnnotationsAndLabelsToVMI` (vm.go:3067-3188) on the working VMI.
    fn sync_dynamic_metadata(&mut self, vm_copy: &VirtualMachine) -> Option<SyncError> {
        let vmi = self.vmi.clone()?;
        let cfg = &self.snap.config;
        let result = metadata_sync::dynamic_metadata_patch(
            vm_copy,
            &vmi,
            &cfg.additional_launcher_labels_sync,
            &cfg.additional_launcher_annotations_sync,
        )?;
        let name = vmi.metadata.name.clone().unwrap_or_default();
        self.explain("sync dynamic labels/annotations onto the VMI (vm.go:3067-3188)");
        let (_, res) = self.api(
            VmAction::PatchVmiMetadata {
                name,
                patch: result.patch,
            },
            "copy dynamic labels/annotations from the VM to the VMI (vm.go:3067-3188)",
        );
        match res {
            Ok(()) => {
                if let Some(v) = self.vmi.as_mut().map(Arc::make_mut) {
                    v.metadata.labels = result.labels;
                    v.metadata.annotations = result.annotations;
                }
                None
            }
            Err(e) => Some(SyncError::new(
                reason::ANNOTATIONS_LABELS_CHANGE_ERROR,
                format!("Error encountered while handling annotation and labels sync request: {e}"),
            )),
        }
    }
}
