//! `sync`'s memory-dump step (`memorydump.HandleRequest`, vm.go:3340-3342): the plan of
//! [`crate::controller::vm::memory_dump`] sent as API calls, the template change made on the
//! working copy (`vmCopy`).

use super::Engine;
use crate::api::vm::VirtualMachine;
use crate::controller::vm::action::{SyncError, VmAction};
use crate::controller::vm::memory_dump;
use crate::controller::vm::reasons::sync as reason;
use std::sync::Arc;

const PREFIX: &str = "Error encountered while handling memory dump request";

impl Engine<'_> {
    /// The memory dump request of `vm_copy`, if any: the claim annotation, then the VMI volume
    /// patch; the error `HandleRequest` returns becomes a `MemoryDumpError` sync error.
    pub(super) fn sync_memory_dump(
        &mut self,
        vm_copy: &mut Arc<VirtualMachine>,
    ) -> Option<SyncError> {
        memory_dump::requested_claim(vm_copy)?;
        let vmi = self.vmi.clone();
        let pvcs = &self.snap.pvcs;
        let plan =
            memory_dump::handle_request(Arc::make_mut(vm_copy), vmi.as_deref(), |c| pvcs.get(c));
        if let Some(msg) = plan.error {
            self.explain(format!("memory dump: {msg} (memorydump.go:264-274)"));
            return Some(SyncError::new(
                reason::MEMORY_DUMP_ERROR,
                format!("{PREFIX}: {msg}"),
            ));
        }
        if let Some(c) = plan.claim_patch {
            let why = format!(
                "memory dump: annotate claim {} with {}={:?} (memorydump.go:276-306)",
                c.claim,
                memory_dump::CLAIM_ANNOTATION,
                c.value
            );
            self.explain(why.clone());
            let (_, res) = self.api(
                VmAction::PatchClaimAnnotations {
                    name: c.claim,
                    patch: c.patch,
                },
                why,
            );
            if let Err(e) = res {
                self.explain(format!(
                    "the claim annotation patch failed ({e}): KubeVirt only logs it (memorydump.go:306-311)"
                ));
            }
        }
        let p = plan.vmi_patch?;
        self.explain(p.why.clone());
        let name = vmi
            .and_then(|v| v.metadata.name.clone())
            .unwrap_or_default();
        self.patch_vmi_spec(name, p)
            .err()
            .map(|e| SyncError::new(reason::MEMORY_DUMP_ERROR, format!("{PREFIX}: {e}")))
    }
}
