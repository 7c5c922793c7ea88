//! Generation tracking: the `kubevirt.io/vm-generation` annotation on the VMI and
//! `status.observedGeneration` / `status.desiredGeneration` (pkg/virt-controller/watch/vm/vm.go:
//! 1347-1475, 2384-2455).

use crate::api::SmallMap;
use crate::api::annotations::VM_GENERATION;
use crate::api::vmi::VirtualMachineInstance;
use crate::controller::common::PatchSet;
use crate::controller::common::patch::path;

/// `patchVmGenerationAnnotationOnVmi` (vm.go:1361-1382): JSON patch test+replace of
/// `/metadata/annotations` with the generation annotation set; also returns the new map.
pub(crate) fn generation_annotation_patch(
    vmi: &VirtualMachineInstance,
    generation: i64,
) -> (serde_json::Value, SmallMap<String>) {
    let old = vmi.metadata.annotations.as_ref();
    let mut new = old.cloned().unwrap_or_default();
    new.insert(VM_GENERATION.to_string(), generation.to_string());
    let mut patch = PatchSet::new();
    patch
        .test(path(&["metadata", "annotations"]), &old)
        .replace(path(&["metadata", "annotations"]), &new);
    (patch.into_value(), new)
}

/// The `kubevirt.io/vm-generation` annotation of a VMI, as text.
pub(crate) fn generation_annotation(vmi: &VirtualMachineInstance) -> Option<&str> {
    vmi.metadata
        .annotations
        .as_ref()?
        .get(VM_GENERATION)
        .map(String::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Mirrors vm_test.go:1996 "should patch the generation annotation onto the vmi".
    #[test]
    fn annotation_patch() {
        let mut vmi = VirtualMachineInstance::default();
        let (patch, new) = generation_annotation_patch(&vmi, 3);
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/metadata/annotations", "value": null},
                {"op": "replace", "path": "/metadata/annotations",
                 "value": {"kubevirt.io/vm-generation": "3"}},
            ])
        );
        vmi.metadata.annotations = Some(new);
        assert_eq!(generation_annotation(&vmi), Some("3"));
        let (patch, _) = generation_annotation_patch(&vmi, 4);
        assert_eq!(patch[0]["value"], json!({"kubevirt.io/vm-generation": "3"}));
        assert_eq!(patch[1]["value"], json!({"kubevirt.io/vm-generation": "4"}));
    }
}
