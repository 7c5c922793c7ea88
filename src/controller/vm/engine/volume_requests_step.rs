//! `sync`'s legacy hotplug step (`handleVolumeRequests`, vm.go:3332-3334): the requests of
//! [`crate::controller::vm::volume_requests`] applied to the working copy's template, and the
//! VMI subresource calls sent in order; the first failure ends the step as a
//! `HotPlugVolumeError` sync error.

use super::Engine;
use crate::api::vm::VirtualMachine;
use crate::controller::vm::action::{SyncError, VmAction};
use crate::controller::vm::reasons::sync as reason;
use crate::controller::vm::volume_requests::{self, VmiVolumeCall};
use std::sync::Arc;

impl Engine<'_> {
    /// The `status.volumeRequests` of `vm_copy`, if any.
    pub(super) fn sync_volume_requests(
        &mut self,
        vm_copy: &mut Arc<VirtualMachine>,
    ) -> Option<SyncError> {
        let requests = vm_copy.status.as_ref()?.volume_requests.clone()?;
        if requests.is_empty() {
            return None;
        }
        let vmi = self.vmi.clone();
        let template = Arc::make_mut(vm_copy)
            .spec
            .template
            .as_mut()
            .and_then(|t| t.spec.as_mut());
        let calls = volume_requests::handle(template, &requests, vmi.as_deref())?;
        self.explain(format!(
            "{} volume request(s) in the VM status: applied to the template \
             (controller.go:264-321, vm.go:820-821)",
            requests.len()
        ));
        let vmi_name = vmi
            .as_ref()
            .and_then(|v| v.metadata.name.clone())
            .unwrap_or_default();
        for call in calls {
            let why = format!(
                "the VMI {} volume {}: call virt-api's VMI {} subresource (vm.go:825-843)",
                if matches!(call, VmiVolumeCall::Add(_)) {
                    "lacks"
                } else {
                    "still has"
                },
                call.volume(),
                if matches!(call, VmiVolumeCall::Add(_)) {
                    "addvolume"
                } else {
                    "removevolume"
                },
            );
            self.explain(why.clone());
            let action = match call {
                VmiVolumeCall::Add(options) => VmAction::AddVmiVolume {
                    name: vmi_name.clone(),
                    options: Box::new(options),
                },
                VmiVolumeCall::Remove(options) => VmAction::RemoveVmiVolume {
                    name: vmi_name.clone(),
                    options: Box::new(options),
                },
            };
            if let (_, Err(e)) = self.api(action, why) {
                return Some(SyncError::new(
                    reason::HOTPLUG_VOLUME_ERROR,
                    format!("Error encountered while handling volume hotplug requests: {e}"),
                ));
            }
        }
        None
    }
}
