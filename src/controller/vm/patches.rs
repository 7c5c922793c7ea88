//! JSON patch documents the VM controller sends, built with the shared
//! [`PatchSet`], and the merge patches of adoption.

use crate::api::finalizers::VM_CONTROLLER;
use crate::controller::common::PatchSet;
use crate::controller::common::patch::path;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Value, json};

/// `getPatchFinalizerOps(old, new)` (vm.go:2307-2312): test+replace of `/metadata/finalizers`.
pub(crate) fn finalizers_patch(old: Option<&Vec<String>>, new: &[String]) -> Value {
    let at = || path(&["metadata", "finalizers"]);
    let mut patch = PatchSet::new();
    patch.test(at(), &old).replace(at(), new);
    patch.into_value()
}

/// The finalizer list with the VM controller finalizer appended (vm.go:2371-2373).
pub(crate) fn with_vm_controller_finalizer(old: Option<&Vec<String>>) -> Vec<String> {
    let mut new = old.cloned().unwrap_or_default();
    new.push(VM_CONTROLLER.to_string());
    new
}

/// The finalizer list without the VM controller finalizer (vm.go:2347-2353).
pub(crate) fn without_vm_controller_finalizer(old: Option<&Vec<String>>) -> Vec<String> {
    old.map(|f| {
        f.iter()
            .filter(|x| x.as_str() != VM_CONTROLLER)
            .cloned()
            .collect()
    })
    .unwrap_or_default()
}

/// True when `metadata.finalizers` contains `name` (`controller.HasFinalizer`).
pub(crate) fn has_finalizer(meta: &ObjectMeta, name: &str) -> bool {
    meta.finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == name))
}

/// The adoption merge patch (controller_ref_manager.go:414-427, 508-519): a single controller
/// owner reference to the VM plus a `metadata.uid` precondition on the adopted object.
pub(crate) fn adopt_patch(vm_name: &str, vm_uid: &str, object_uid: &str) -> Value {
    json!({"metadata": {
        "ownerReferences": [{
            "apiVersion": crate::api::API_VERSION,
            "kind": "VirtualMachine",
            "name": vm_name,
            "uid": vm_uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }],
        "uid": object_uid,
    }})
}

/// The release merge patch (controller_ref_manager.go:429-455).
pub(crate) fn release_patch() -> Value {
    json!({"metadata": {"ownerReferences": []}})
}

/// `controller.VirtualMachineInstanceKey`: `namespace/name` of an object.
pub(crate) use crate::api::key::meta_key;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizer_patch_is_test_then_replace() {
        let old = vec!["a".to_string()];
        let new = with_vm_controller_finalizer(Some(&old));
        assert_eq!(
            finalizers_patch(Some(&old), &new),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": ["a"]},
                {"op": "replace", "path": "/metadata/finalizers", "value": ["a", VM_CONTROLLER]},
            ])
        );
        assert_eq!(
            finalizers_patch(None, &with_vm_controller_finalizer(None)),
            json!([
                {"op": "test", "path": "/metadata/finalizers", "value": null},
                {"op": "replace", "path": "/metadata/finalizers", "value": [VM_CONTROLLER]},
            ])
        );
        assert_eq!(without_vm_controller_finalizer(Some(&new)), vec!["a"]);
    }
}
