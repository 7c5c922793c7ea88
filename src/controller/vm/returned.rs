//! Whether the VM a patch answered with is the VM the decision assumed.
//!
//! KubeVirt's VM sync keeps going on the object a finalizer or firmware patch returns
//! (`vm, err = c.addVMFinalizer(vm)`, vm.go:3250-3255; `removeVMFinalizer`, vm.go:2338-2360;
//! the firmware synchronizer's returned VM, vm.go sync step 12), so every later decision of
//! that sync, and the final `UpdateStatus`/`Update`, see what the server holds, including a
//! change someone else made after the cache copy was taken.
//!
//! Our decision is made once, from the cache copy, and *predicts* the patch's result (the copy
//! with the patch applied); the executor sends the later full-object writes with the
//! resourceVersion the patch returned ([`ResourceVersionFrom::Action`]). A JSON patch carries no
//! resourceVersion, so when another writer changed the VM between the cache copy and the patch
//! (a user's `runStrategy` patch, virt-api's `stateChangeRequests`), the prediction is wrong and
//! those writes would put the stale spec or status back under a fresh resourceVersion: a lost
//! update the API server cannot refuse. [`foreign_change`] finds that case; the executor then
//! refuses those writes locally as a Conflict, and the key is retried with the newer VM, which
//! is where KubeVirt's sync would have gone in one pass.
//!
//! [`ResourceVersionFrom::Action`]: super::action::ResourceVersionFrom::Action

use crate::api::VirtualMachine;
use serde_json::Value;

/// What of `returned` differs from `base` with `patch` applied, ignoring what the server
/// maintains by itself (`resourceVersion`, `generation`, `managedFields`). `None` when the
/// answer is exactly the predicted VM.
///
/// Only the patch's effects are predicted: its `test` operations were checked by the server
/// against what it held, and `replace` is applied as `add` (the same for a present member; the
/// API server's JSON patch, like Go's evanphx/json-patch that KubeVirt's patches are written
/// for, also accepts a `test` of `null` or a `replace` on a missing `metadata.finalizers`). A
/// patch whose effects cannot be applied to `base` means `base` was not what the server held:
/// reported as a change.
pub(crate) fn foreign_change(
    base: &VirtualMachine,
    patch: &Value,
    returned: &VirtualMachine,
) -> Option<String> {
    if finalizers_only_as_predicted(base, patch, returned) {
        return None;
    }
    compare_as_json(base, patch, returned)
}

/// [`foreign_change`] by serialising the cached VM, applying the patch's effects to it and
/// comparing the parts with the serialised answer.
fn compare_as_json(
    base: &VirtualMachine,
    patch: &Value,
    returned: &VirtualMachine,
) -> Option<String> {
    let mut predicted = match serde_json::to_value(base) {
        Ok(v) => v,
        Err(e) => return Some(format!("cannot serialise the cached VM: {e}")),
    };
    let ops = match effects(patch) {
        Ok(p) => p,
        Err(e) => return Some(format!("not a JSON patch: {e}")),
    };
    if let Err(e) = json_patch::patch(&mut predicted, &ops) {
        return Some(format!("the patch does not apply to the cached VM: {e}"));
    }
    let actual = match serde_json::to_value(returned) {
        Ok(v) => v,
        Err(e) => return Some(format!("cannot serialise the returned VM: {e}")),
    };
    let mut changed = Vec::new();
    for part in ["spec", "status"] {
        if predicted.get(part) != actual.get(part) {
            changed.push(part.to_string());
        }
    }
    let (pm, am) = (&predicted["metadata"], &actual["metadata"]);
    for field in [
        "labels",
        "annotations",
        "finalizers",
        "ownerReferences",
        "deletionTimestamp",
        "uid",
    ] {
        if pm.get(field) != am.get(field) {
            changed.push(format!("metadata.{field}"));
        }
    }
    (!changed.is_empty()).then(|| changed.join(", "))
}

/// The patch's effects as [`foreign_change`] predicts them: its `test` operations dropped (the
/// server checked them) and `replace` applied as `add`. Not an array: no effects.
fn effects(patch: &Value) -> Result<json_patch::Patch, serde_json::Error> {
    let ops: Vec<Value> = patch
        .as_array()
        .map(|ops| {
            ops.iter()
                .filter(|op| op["op"] != "test")
                .map(|op| {
                    let mut op = op.clone();
                    if op["op"] == "replace" {
                        op["op"] = "add".into();
                    }
                    op
                })
                .collect()
        })
        .unwrap_or_default();
    serde_json::from_value(Value::Array(ops))
}

/// The common case without serialising either VM: a patch of `metadata.finalizers` only (the
/// finalizer patches, once per VM start) whose answer equals the cached VM in every compared
/// part and holds the finalizers the patch writes. Typed equality implies equal JSON, so a
/// `true` here is [`foreign_change`]'s `None`; anything else goes the whole way.
fn finalizers_only_as_predicted(
    base: &VirtualMachine,
    patch: &Value,
    returned: &VirtualMachine,
) -> bool {
    let Some(ops) = patch.as_array() else {
        return false;
    };
    let on_finalizers = |op: &Value| {
        op["path"]
            .as_str()
            .is_some_and(|p| p == "/metadata/finalizers" || p.starts_with("/metadata/finalizers/"))
    };
    if ops.is_empty() || !ops.iter().all(on_finalizers) {
        return false;
    }
    let Ok(ops) = effects(patch) else {
        return false;
    };
    let mut doc = serde_json::json!({ "metadata": {} });
    if let Some(f) = &base.metadata.finalizers {
        doc["metadata"]["finalizers"] = f.iter().map(|s| Value::from(s.as_str())).collect();
    }
    if json_patch::patch(&mut doc, &ops).is_err() {
        return false;
    }
    let predicted: Option<Vec<String>> = match doc["metadata"].get("finalizers") {
        None => None,
        Some(v) => match serde_json::from_value(v.clone()) {
            Ok(f) => Some(f),
            Err(_) => return false,
        },
    };
    let (b, r) = (&base.metadata, &returned.metadata);
    base.spec == returned.spec
        && base.status == returned.status
        && b.labels == r.labels
        && b.annotations == r.annotations
        && b.owner_references == r.owner_references
        && b.deletion_timestamp == r.deletion_timestamp
        && b.uid == r.uid
        && predicted == r.finalizers
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(value: Value) -> VirtualMachine {
        serde_json::from_value(value).unwrap()
    }

    fn base() -> Value {
        json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a", "namespace": "d", "uid": "u1", "resourceVersion": "10",
                         "generation": 1, "finalizers": ["other"]},
            "spec": {"runStrategy": "Manual", "template": {"spec": {"domain": {"devices": {}}}}},
            "status": {"printableStatus": "Stopped"}
        })
    }

    fn finalizer_patch() -> Value {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
            {"op": "replace", "path": "/metadata/finalizers",
             "value": ["other", "kubevirt.io/virtualMachineControllerFinalize"]},
        ])
    }

    /// A new VM's cached copy: no finalizers yet.
    fn without_finalizers() -> Value {
        let mut cached = base();
        cached["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("finalizers");
        cached
    }

    /// The first sync's finalizer patch: `test` of null, `replace` of a missing list.
    fn first_finalizer_patch() -> Value {
        json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "replace", "path": "/metadata/finalizers",
             "value": ["kubevirt.io/virtualMachineControllerFinalize"]},
        ])
    }

    /// `server` with the finalizer `first_finalizer_patch` writes.
    fn first_finalizer_added(mut server: Value) -> Value {
        server["metadata"]["finalizers"] = json!(["kubevirt.io/virtualMachineControllerFinalize"]);
        server
    }

    /// The server's answer to `finalizer_patch` on `server`.
    fn answer(mut server: Value) -> VirtualMachine {
        server["metadata"]["finalizers"] =
            json!(["other", "kubevirt.io/virtualMachineControllerFinalize"]);
        server["metadata"]["resourceVersion"] = json!("12");
        vm(server)
    }

    /// The typed shortcut answers "no change" only where the JSON comparison does, and it is
    /// the path the usual finalizer patch takes.
    #[test]
    fn the_typed_shortcut_agrees_with_the_json_comparison() {
        let mut with_label = base();
        with_label["metadata"]["labels"] = json!({"x": "y"});
        let mut with_status = base();
        with_status["status"]["printableStatus"] = json!("Starting");
        let no_finalizers = without_finalizers();
        let added = first_finalizer_added(no_finalizers.clone());
        let firmware = json!([{"op": "add", "path": "/spec/template/spec/domain/firmware",
                               "value": {"uuid": "u"}}]);
        let cases = [
            (
                base(),
                finalizer_patch(),
                serde_json::to_value(answer(base())).unwrap(),
                true,
            ),
            (no_finalizers, first_finalizer_patch(), added, true),
            (
                base(),
                finalizer_patch(),
                serde_json::to_value(answer(with_label)).unwrap(),
                false,
            ),
            (
                base(),
                finalizer_patch(),
                serde_json::to_value(answer(with_status)).unwrap(),
                false,
            ),
            (base(), finalizer_patch(), base(), false),
            (base(), firmware, base(), false),
        ];
        for (i, (cached, patch, server, shortcut)) in cases.into_iter().enumerate() {
            let (cached, server) = (vm(cached), vm(server));
            let fast = finalizers_only_as_predicted(&cached, &patch, &server);
            assert_eq!(fast, shortcut, "case {i}");
            if fast {
                assert_eq!(compare_as_json(&cached, &patch, &server), None, "case {i}");
            }
            assert_eq!(
                foreign_change(&cached, &patch, &server),
                compare_as_json(&cached, &patch, &server),
                "case {i}"
            );
        }
    }

    #[test]
    fn the_predicted_answer_is_no_change() {
        let returned = answer(base());
        assert_eq!(
            foreign_change(&vm(base()), &finalizer_patch(), &returned),
            None
        );
    }

    #[test]
    fn a_request_written_after_the_cache_copy_is_a_status_change() {
        // virt-api wrote a Stop request (status subresource) after the cache copy.
        let mut server = base();
        server["status"]["stateChangeRequests"] = json!([{"action": "Stop", "uid": "i1"}]);
        server["metadata"]["resourceVersion"] = json!("11");
        let change = foreign_change(&vm(base()), &finalizer_patch(), &answer(server));
        assert_eq!(change.as_deref(), Some("status"));
    }

    #[test]
    fn a_run_strategy_patched_after_the_cache_copy_is_a_spec_change() {
        let mut server = base();
        server["spec"]["runStrategy"] = json!("Halted");
        server["metadata"]["generation"] = json!(2);
        let change = foreign_change(&vm(base()), &finalizer_patch(), &answer(server));
        assert_eq!(change.as_deref(), Some("spec"));
    }

    #[test]
    fn a_label_added_after_the_cache_copy_is_a_metadata_change() {
        let mut server = base();
        server["metadata"]["labels"] = json!({"team": "x"});
        let change = foreign_change(&vm(base()), &finalizer_patch(), &answer(server));
        assert_eq!(change.as_deref(), Some("metadata.labels"));
    }

    #[test]
    fn a_patch_that_cannot_apply_to_the_cached_copy_is_a_change() {
        let patch = json!([{"op": "remove", "path": "/metadata/labels/gone"}]);
        let change = foreign_change(&vm(base()), &patch, &vm(base()));
        assert!(
            change.is_some_and(|c| c.starts_with("the patch does not apply")),
            "the server removed a label the cache copy does not have"
        );
    }

    #[test]
    fn a_finalizer_patch_on_a_vm_without_finalizers_is_predicted() {
        // The first sync of a new VM: `test` of null, `replace` of a missing list.
        let cached = without_finalizers();
        let server = first_finalizer_added(cached.clone());
        assert_eq!(
            foreign_change(&vm(cached), &first_finalizer_patch(), &vm(server)),
            None
        );
    }

    #[test]
    fn a_firmware_patch_predicts_the_spec_it_writes() {
        let patch = json!([{"op": "add", "path": "/spec/template/spec/domain/firmware",
                            "value": {"uuid": "5f0c..."}}]);
        let mut server = base();
        server["spec"]["template"]["spec"]["domain"]["firmware"] = json!({"uuid": "5f0c..."});
        server["metadata"]["generation"] = json!(2);
        assert_eq!(foreign_change(&vm(base()), &patch, &vm(server)), None);
    }
}
