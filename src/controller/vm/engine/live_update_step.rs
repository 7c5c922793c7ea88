//! `sync`'s LiveUpdate step (vm.go:3351-3377): the CPU, affinity, tolerations and memory
//! handlers of [`crate::controller::vm::live_update`] in KubeVirt's order, their VMI patches
//! sent as API calls, their `RestartRequired` set on the working copy (`vmCopy`).

use super::Engine;
use crate::api::vm::VirtualMachine;
use crate::api::vmi::VirtualMachineInstanceSpec;
use crate::controller::vm::action::SyncError;
use crate::controller::vm::conditions;
use crate::controller::vm::live_update::{self as lu, Outcome};
use crate::controller::vm::net_sync;
use crate::controller::vm::reasons::sync as reason;
use crate::controller::vm::unsupported;
use std::sync::Arc;

/// One handler: its sync-error reason and message prefix (vm.go:3352-3370).
struct Handler {
    reason: &'static str,
    prefix: &'static str,
}

const CPU: Handler = Handler {
    reason: reason::HOTPLUG_CPU_ERROR,
    prefix: "Error encountered while handling CPU change request",
};
const AFFINITY: Handler = Handler {
    reason: reason::AFFINITY_CHANGE_ERROR,
    prefix: "Error encountered while handling node affinity change request",
};
const TOLERATIONS: Handler = Handler {
    reason: reason::TOLERATIONS_CHANGE_ERROR,
    prefix: "Error encountered while handling tolerations change request",
};
const MEMORY: Handler = Handler {
    reason: reason::HOTPLUG_MEMORY_ERROR,
    prefix: "error encountered while handling memory hotplug requests",
};

impl Engine<'_> {
    /// The network synchronizer (vm.go:3312-3319; [`crate::controller::vm::net_sync`]): the
    /// VMI's interfaces and networks patched, then the template's unplugged interfaces cleared
    /// on the working copy, which `sync` persists with its Update.
    pub(super) fn sync_network(&mut self, vm_copy: &mut Arc<VirtualMachine>) -> Option<SyncError> {
        let vmi = self.vmi.clone();
        let rules = &self.snap.config.rules;
        let nad_live = vmi
            .as_deref()
            .is_none_or(|v| net_sync::nad_live_update(rules, v));
        let out = net_sync::sync(vm_copy, vmi.as_deref(), nad_live);
        if let (Some(p), Some(vmi)) = (out.vmi_patch, vmi) {
            self.explain(p.why.clone());
            let name = vmi.metadata.name.clone().unwrap_or_default();
            if let Err(e) = self.patch_vmi_spec(name, p) {
                return Some(SyncError::new(
                    reason::HOTPLUG_NETWORK_INTERFACE_ERROR,
                    format!("error encountered when trying to patch vmi: {e}"),
                ));
            }
        }
        if let Some((ifaces, nets)) = out.template {
            self.explain(
                "the template's unplugged interfaces are gone from the VMI: clear them and \
                 their networks from the VM (clearDetachedIfacesFromVM, \
                 pkg/network/controllers/vm.go:216-234)",
            );
            let spec = Arc::make_mut(vm_copy)
                .spec
                .template
                .as_mut()
                .and_then(|t| t.spec.as_mut());
            if let Some(spec) = spec {
                spec.domain.devices.interfaces = (!ifaces.is_empty()).then_some(ifaces);
                spec.networks = (!nets.is_empty()).then_some(nets);
            }
        }
        None
    }

    /// `handleDeclarativeVolumeHotplug` (vm.go:3336-3338, 3568-3575): the template's hotplug
    /// volumes carried into the running VMI ([`crate::controller::vm::volume_hotplug`]).
    pub(super) fn sync_declarative_hotplug(
        &mut self,
        vm_copy: &VirtualMachine,
    ) -> Option<SyncError> {
        if !self.snap.config.declarative_hotplug_volumes {
            return None;
        }
        let vmi = self.vmi.clone()?;
        let p = crate::controller::vm::volume_hotplug::declarative_hotplug_patch(vm_copy, &vmi)?;
        self.explain(p.why.clone());
        let name = vmi.metadata.name.clone().unwrap_or_default();
        self.patch_vmi_spec(name, p).err().map(|e| {
            SyncError::new(
                reason::HOTPLUG_VOLUME_ERROR,
                format!("Error encountered while handling declarative hotplug volumes: {e}"),
            )
        })
    }

    /// The handlers on `vm_copy` and the claimed VMI (not being deleted). Each reads the
    /// template with its instancetype expanded (`vmCopyWithInstancetype`, vm.go:627-631);
    /// an expansion error is the CPU handler's, the first to expand.
    pub(super) fn sync_live_updates(
        &mut self,
        vm_copy: &mut Arc<VirtualMachine>,
    ) -> Option<SyncError> {
        let vmi = self.vmi.clone().filter(|v| !v.is_deleting())?;
        let expanded = if vm_copy.spec.instancetype.is_some() || vm_copy.spec.preference.is_some() {
            match self.expanded(vm_copy) {
                Ok(vm) => Arc::new(vm),
                Err(e) => {
                    return Some(SyncError::new(CPU.reason, format!("{}: {e}", CPU.prefix)));
                }
            }
        } else {
            vm_copy.clone()
        };
        let want = expanded
            .template_spec()
            .cloned()
            .unwrap_or_else(VirtualMachineInstanceSpec::default);
        let architecture = vm_copy
            .template_spec()
            .and_then(|s| s.architecture.clone())
            .unwrap_or_default();
        let now = self.snap.now;
        let ratio = self.snap.config.cpu_allocation_ratio;
        let name = vmi.metadata.name.clone().unwrap_or_default();
        let steps: [(&Handler, &dyn Fn() -> Outcome); 4] = [
            (&CPU, &|| {
                lu::cpu_change(&want, &architecture, &vmi, now, ratio)
            }),
            (&AFFINITY, &|| lu::affinity_change(&want, &vmi, now)),
            (&TOLERATIONS, &|| lu::tolerations_change(&want, &vmi, now)),
            (&MEMORY, &|| lu::memory_change(&want, &vmi, now)),
        ];
        for (handler, run) in steps {
            if let Some(e) = self.apply_live_update(handler, run(), &name, vm_copy) {
                return Some(e);
            }
        }
        // handleVolumeUpdateRequest (vm.go:3372-3375): volume migration is not modelled.
        unsupported::volume_update(vm_copy)
    }

    /// Act on one handler's outcome: patches as API calls (the first failure is the handler's
    /// error), `setRestartRequired` on `vm_copy` (vm.go:2978-2986), or the handler's error.
    fn apply_live_update(
        &mut self,
        handler: &Handler,
        outcome: Outcome,
        vmi_name: &str,
        vm_copy: &mut Arc<VirtualMachine>,
    ) -> Option<SyncError> {
        let error = |msg: &dyn std::fmt::Display| {
            Some(SyncError::new(
                handler.reason,
                format!("{}: {msg}", handler.prefix),
            ))
        };
        match outcome {
            Outcome::Unchanged => None,
            Outcome::Refused(msg) => {
                self.explain(format!("live update refused: {msg} (vm.go:3351-3377)"));
                error(&msg)
            }
            Outcome::RestartRequired(msg) => {
                self.explain(format!(
                    "the change cannot be applied live: RestartRequired=True, \"{msg}\" \
                     (setRestartRequired, vm.go:2978-2986)"
                ));
                let now = self.snap.now;
                let conds = Arc::make_mut(vm_copy)
                    .status
                    .get_or_insert_with(Default::default)
                    .conditions
                    .get_or_insert_with(Vec::new);
                conditions::set_restart_required(conds, &msg, now);
                None
            }
            Outcome::Patch(patches) => {
                for p in patches {
                    self.explain(format!("live update: {}", p.why));
                    if let Err(e) = self.patch_vmi_spec(vmi_name.to_string(), p) {
                        return error(&e);
                    }
                }
                None
            }
        }
    }
}
