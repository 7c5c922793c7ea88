//! Starting and stopping: `startVMI` (pkg/virt-controller/watch/vm/vm.go:1257-1345), `stopVMI`
//! (vm.go:1658-1688) and `addStartRequest` (vm.go:954-968).
//!
//! Not modelled in `startVMI`: changed-block tracking (`cbt.SetChangedBlockTrackingOnVMI`) and
//! the network admitter's creation validation (virt-api validates the VMI on create anyway).

use super::{Abort, Engine};
use crate::api::annotations::{CREATE_MIGRATION_TARGET, VM_GENERATION};
use crate::api::finalizers::VM_CONTROLLER;
use crate::api::vm::StateChangeRequest;
use crate::api::vmi::{VirtualMachineInstance, VirtualMachineInstanceStatus};
use crate::controller::common::PatchSet;
use crate::controller::common::patch::path;
use crate::controller::vm::action::{EventType, VmAction};
use crate::controller::vm::conditions::has_condition_with_status;
use crate::controller::vm::patches::meta_key;
use crate::controller::vm::reasons::{condition, event};
use crate::controller::vm::setup_vmi::{
    auto_attach_input_device, set_default_network_interface, setup_vmi_from_vm,
};
use std::sync::Arc;

impl Engine<'_> {
    /// `startVMI` (vm.go:1257-1345). `Err` carries the error text that becomes
    /// `Failure while starting VMI: <err>`.
    pub(super) fn start_vmi(&mut self) -> Result<(), Abort> {
        // 1. DataVolumes must be ready.
        if !self.handle_data_volumes()? {
            self.explain("DataVolumes not ready: delay the start (vm.go:1263-1266)");
            return Ok(());
        }
        // 2. ManualRecoveryRequired blocks starts.
        let recovery = self
            .vm
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .is_some_and(|c| {
                has_condition_with_status(c, condition::MANUAL_RECOVERY_REQUIRED, "True")
            });
        if recovery {
            self.explain(
                "cannot start the VM since it has the manual recovery required condition set \
                 (vm.go:1268-1271)",
            );
            return Ok(());
        }
        // 3. RestartRequired no longer applies to a fresh VMI.
        self.remove_restart_required();

        // 4. SetupVMIFromVM.
        let mut vmi = setup_vmi_from_vm(&self.vm)?;

        // 5. Start revision.
        let revision_name = self.create_vm_revision()?;
        vmi.status = Some(VirtualMachineInstanceStatus {
            virtual_machine_revision_name: Some(revision_name),
            ..Default::default()
        });

        // 6-7. Annotations.
        let generation = self.generation();
        let annotations = vmi
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        annotations.insert(VM_GENERATION.to_string(), generation.to_string());
        if self.vm.spec.run_strategy.as_deref() == Some("WaitAsReceiver") {
            annotations.insert(CREATE_MIGRATION_TARGET.to_string(), "true".to_string());
        }

        // 8. Finalizer.
        vmi.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(VM_CONTROLLER.to_string());

        // 9. Preferred auto-attach devices first (vm.go:1302-1307), then the input device and the
        // default network, then the instancetype and preference (vm.go:1318-1322).
        if let Err(e) = self.auto_attach_preferences(&mut vmi) {
            self.event(
                EventType::Warning,
                event::FAILED_CREATE,
                format!("Error applying device preferences again: {e}"),
                "applying the preference's auto-attach devices failed (vm.go:1303-1306)",
            );
            return Err(Abort::Instancetype(e));
        }
        auto_attach_input_device(&mut vmi.spec);
        set_default_network_interface(&self.snap.config, &mut vmi.spec)?;
        if let Err(e) = self.apply_instancetype_to_vmi(&mut vmi) {
            self.event(
                EventType::Warning,
                event::FAILED_CREATE,
                format!(
                    "Error creating virtual machine instance: Failed to apply instancetype: {e}"
                ),
                "applying the instancetype/preference to the VMI failed (vm.go:1318-1322)",
            );
            return Err(Abort::Instancetype(e));
        }

        // 11. Create.
        self.create_vmi(vmi)
    }

    /// `ApplyAutoAttachPreferences` on the VMI being built.
    fn auto_attach_preferences(&self, vmi: &mut VirtualMachineInstance) -> Result<(), String> {
        if self.vm.spec.preference.is_none() {
            return Ok(());
        }
        let mut spec = serde_json::to_value(&vmi.spec).map_err(|e| e.to_string())?;
        self.apply_auto_attach_preferences(&mut spec)?;
        vmi.spec = serde_json::from_value(spec).map_err(|e| e.to_string())?;
        Ok(())
    }

    fn create_vmi(&mut self, mut vmi: VirtualMachineInstance) -> Result<(), Abort> {
        // Posted as Go marshals it: `spec.domain.resources: {}` when empty (go_encoding).
        crate::controller::vm::go_encoding::vmi_spec(&mut vmi.spec);
        let name = vmi.metadata.name.clone().unwrap_or_default();
        let key = self.key.clone();
        self.local(
            VmAction::ExpectVmiCreations {
                key: key.clone(),
                count: 1,
            },
            "expect the VMI creation before posting it (vm.go:1327)",
        );
        let (_, res) = self.api(
            VmAction::CreateVmi { vmi: Box::new(vmi) },
            "create the VMI from the VM template (vm.go:1328)",
        );
        match res {
            Err(e) => {
                self.local(
                    VmAction::VmiCreationObserved { key },
                    "the create was not accepted: lower the expectation (vm.go:1331)",
                );
                self.event(
                    EventType::Warning,
                    event::FAILED_CREATE,
                    format!("Error creating virtual machine instance: {}", e.message),
                    "VMI create failed (vm.go:1332)",
                );
                Err(e.into())
            }
            Ok(()) => {
                self.event(
                    EventType::Normal,
                    event::SUCCESSFUL_CREATE,
                    format!(
                        "Started the virtual machine by creating the new virtual machine \
                         instance {name}"
                    ),
                    "VMI created (vm.go:1336)",
                );
                Ok(())
            }
        }
    }

    /// `stopVMI` (vm.go:1658-1688): no-op for a VMI already being deleted. `Err` carries the
    /// error text.
    pub(super) fn stop_vmi(&mut self, vmi: &VirtualMachineInstance) -> Result<(), Abort> {
        if vmi.is_deleting() {
            self.explain("the VMI is already being deleted: nothing to do (vm.go:1659-1662)");
            return Ok(());
        }
        let key = self.key.clone();
        let vmi_key = meta_key(&vmi.metadata);
        let name = vmi.metadata.name.clone().unwrap_or_default();
        let uid = vmi.metadata.uid.clone().unwrap_or_default();
        self.local(
            VmAction::ExpectVmiDeletions {
                key: key.clone(),
                deletion_keys: vec![vmi_key.clone()],
            },
            "expect the VMI deletion before issuing it (vm.go:1671)",
        );
        let (_, res) = self.api(
            VmAction::DeleteVmi {
                name: name.clone(),
                uid: uid.clone(),
            },
            "delete the VMI (vm.go:1672)",
        );
        match res {
            Err(e) => {
                self.local(
                    VmAction::VmiDeletionObserved {
                        key,
                        deletion_key: vmi_key,
                    },
                    "the delete was not accepted: lower the expectation (vm.go:1677)",
                );
                self.event(
                    EventType::Warning,
                    event::FAILED_DELETE,
                    format!(
                        "Error deleting virtual machine instance {name}: {}",
                        e.message
                    ),
                    "VMI delete failed (vm.go:1678)",
                );
                Err(e.into())
            }
            Ok(()) => {
                self.remove_restart_required();
                self.event(
                    EventType::Normal,
                    event::SUCCESSFUL_DELETE,
                    format!(
                        "Stopped the virtual machine by deleting the virtual machine instance {uid}"
                    ),
                    "VMI deleted (vm.go:1684)",
                );
                Ok(())
            }
        }
    }

    /// `addStartRequest` (vm.go:954-968): JSON patch `add /status/stateChangeRequests` with the
    /// current list plus `{action: Start}`. On success the working VM's status becomes the
    /// patched server status (in-memory status edits are lost, as in KubeVirt).
    pub(super) fn add_start_request(&mut self) -> Result<(), Abort> {
        let mut requests = self
            .vm
            .status
            .as_ref()
            .and_then(|s| s.state_change_requests.clone())
            .unwrap_or_default();
        requests.push(StateChangeRequest {
            action: "Start".into(),
            ..Default::default()
        });
        let mut patch = PatchSet::new();
        patch.add(path(&["status", "stateChangeRequests"]), &requests);
        let patch = patch.into_value();
        let (_, res) = self.api(
            VmAction::AddStartRequest { patch },
            "RerunOnFailure and the VMI failed: queue a Start request (vm.go:1062-1066)",
        );
        res?;
        let mut server = self.server_status.clone().unwrap_or_default();
        server.state_change_requests = Some(requests);
        self.server_status = Some(server.clone());
        Arc::make_mut(&mut self.vm).status = Some(server);
        Ok(())
    }
}
