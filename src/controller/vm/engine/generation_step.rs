//! Generation step of the VM engine: `conditionallyBumpGenerationAnnotationOnVmi` and the observed/desired generation (vm.go:1361-1460, 3282-3300).

use super::{Abort, Engine};
use crate::api::vm::VirtualMachineStatus;
use crate::controller::common::semantic_eq;
use crate::controller::vm::action::VmAction;
use crate::controller::vm::generation::{generation_annotation, generation_annotation_patch};
use crate::controller::vm::revision::{parse_generation, revision_spec};
use k8s_openapi::api::apps::v1::ControllerRevision;
use std::sync::Arc;

impl Engine<'_> {
    /// `getControllerRevision(ns, name)` (vm.go:1763-1773), answered from the snapshot: `Ok(None)`
    /// for NotFound; an empty name is client-go's "resource name may not be empty" error.
    fn get_revision(&self, name: &str) -> Result<Option<&ControllerRevision>, Abort> {
        if name.is_empty() {
            return Err(Abort::EmptyResourceName);
        }
        Ok(self
            .snap
            .revisions
            .iter()
            .map(|cr| cr.as_ref())
            .find(|cr| cr.metadata.name.as_deref() == Some(name)))
    }

    fn vmi_revision_name(&self) -> String {
        self.vmi
            .as_ref()
            .and_then(|v| v.status.as_ref())
            .and_then(|s| s.virtual_machine_revision_name.clone())
            .unwrap_or_default()
    }

    /// Patch the generation annotation on the working VMI; `Err` aborts the sync.
    fn patch_generation(&mut self, generation: i64, why: String) -> Result<(), Abort> {
        let Some(vmi) = self.vmi.clone() else {
            return Ok(());
        };
        let (patch, new) = generation_annotation_patch(&vmi, generation);
        let (_, res) = self.api(
            VmAction::PatchVmiGenerationAnnotation {
                name: vmi.metadata.name.clone().unwrap_or_default(),
                patch,
            },
            why,
        );
        res?;
        if let Some(v) = self.vmi.as_mut().map(Arc::make_mut) {
            v.metadata.annotations = Some(new);
        }
        Ok(())
    }

    /// `conditionallyBumpGenerationAnnotationOnVmi` (vm.go:1438-1475): when the VMI's annotation
    /// is not the VM generation and the VMI's start revision has the same `spec.template` as the
    /// VM, move the annotation to the current generation (e.g. only the run strategy changed).
    pub(super) fn conditionally_bump_generation(&mut self) -> Result<(), Abort> {
        let Some(vmi) = self.vmi.clone() else {
            return Ok(());
        };
        let generation = self.generation();
        if generation_annotation(&vmi) == Some(generation.to_string().as_str()) {
            return Ok(());
        }
        let name = self.vmi_revision_name();
        let Some(revision) = self.get_revision(&name)? else {
            return Ok(());
        };
        let spec = revision_spec(revision)?;
        if semantic_eq(&spec.template, &self.vm.spec.template) {
            self.explain(format!(
                "the VMI's start revision has the current template: bump its generation \
                 annotation to {generation} (vm.go:1466-1472)"
            ));
            self.patch_generation(
                generation,
                format!(
                    "template unchanged since {name}: VMI kubevirt.io/vm-generation → \
                     {generation} (vm.go:1438-1475)"
                ),
            )?;
        }
        Ok(())
    }

    /// `syncGenerationInfo` (vm.go:2428-2455): `observedGeneration` from the VMI annotation
    /// (back-filled from the start revision's name when missing or unparsable, with a patch),
    /// `desiredGeneration` = VM generation.
    pub(super) fn sync_generation_info(
        &mut self,
        status: &mut VirtualMachineStatus,
    ) -> Result<(), Abort> {
        let Some(vmi) = self.vmi.clone() else {
            return Ok(());
        };
        let mut observed = generation_annotation(&vmi).and_then(|g| g.parse::<i64>().ok());
        if observed.is_none() {
            let name = self.vmi_revision_name();
            let Some(revision) = self.get_revision(&name)? else {
                return Ok(());
            };
            let Some(generation) =
                parse_generation(revision.metadata.name.as_deref().unwrap_or(""))
            else {
                return Ok(());
            };
            self.patch_generation(
                generation,
                format!(
                    "the VMI has no generation annotation: back-fill {generation} from {name} \
                     (vm.go:2406-2426)"
                ),
            )?;
            observed = Some(generation);
        }
        status.observed_generation = observed;
        status.desired_generation = Some(self.generation());
        Ok(())
    }
}
