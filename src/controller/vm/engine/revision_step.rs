//! Revision step of the VM engine: `createVMRevision` / `deleteOlderVMRevision` (vm.go:1726-1866).

use super::{Abort, Engine};
use crate::controller::vm::action::VmAction;
use crate::controller::vm::revision::{
    build_start_revision, cr_key, indexed_revisions, revision_name, revision_prefix,
};

impl Engine<'_> {
    /// `createVMRevision` (vm.go:1840-1866) with `deleteOlderVMRevision` (vm.go:1726-1761): delete
    /// every start revision of the VM whose `revision` is not the current generation; create the
    /// current one unless it exists. Returns its name; `Err` carries the API error.
    pub(super) fn create_vm_revision(&mut self) -> Result<String, Abort> {
        let uid = self.vm.metadata.uid.clone().unwrap_or_default();
        let generation = self.generation();
        let name = revision_name(&uid, generation);
        let prefix = revision_prefix(&uid);
        let mut exists = false;
        let stale: Vec<String> = indexed_revisions(&uid, &self.snap.revisions)
            .into_iter()
            .filter(|cr| cr_key(cr).contains(&prefix))
            .filter_map(|cr| {
                if cr.revision == generation {
                    exists = true;
                    None
                } else {
                    cr.metadata.name.clone()
                }
            })
            .collect();
        for old in stale {
            let (_, res) = self.api(
                VmAction::DeleteControllerRevision { name: old.clone() },
                format!(
                    "start revision {old} is for another generation than {generation}: delete it \
                     (vm.go:1726-1761)"
                ),
            );
            res?;
        }
        if exists {
            self.explain(format!(
                "start revision {name} already exists (vm.go:1842-1845)"
            ));
            return Ok(name);
        }
        let revision = build_start_revision(&self.vm)?;
        let (_, res) = self.api(
            VmAction::CreateControllerRevision {
                revision: Box::new(revision),
            },
            format!("record the spec this VMI starts from as {name} (vm.go:1855-1865)"),
        );
        res?;
        Ok(name)
    }
}
