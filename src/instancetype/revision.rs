//! The ControllerRevisions that stash an instancetype or preference for a VM
//! (pkg/instancetype/revision/store.go:232-276, compatibility/compatibility.go, revision/compare.go,
//! upgrade/handler.go:163-168).

use super::json::canonical_quantity;
use super::{Resource, labels};
use crate::api::vm::VirtualMachine;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde_json::Value;
use std::collections::BTreeMap;

/// `GenerateName` (revision/store.go:232-234): `VM-OBJECT-VERSION-UID-GENERATION`.
pub(crate) fn name(vm: &str, object: &str, version: &str, uid: &str, generation: i64) -> String {
    format!("{vm}-{object}-{version}-{uid}-{generation}")
}

/// `CreateControllerRevision` (revision/store.go:236-276): the revision stashing `object` (an
/// instancetype or preference as read from the API, `kind` its kind) for `vm`: named by
/// [`name`], owned by the VM (controller ref), labelled with the object's generation, kind,
/// name, UID and version, `data` = the object with `apiVersion`/`kind` set and its labels,
/// annotations, finalizers, owner references and managed fields removed. Quantities in the spec
/// are written in canonical form, as KubeVirt's Go encoding writes them.
pub(crate) fn build(vm: &VirtualMachine, kind: Resource, object: &Value) -> ControllerRevision {
    let meta = object.get("metadata").cloned().unwrap_or(Value::Null);
    let s = |k: &str| {
        meta.get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (obj_name, uid) = (s("name"), s("uid"));
    let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(0);
    let version = crate::api::instancetype::VERSION;
    let mut data = object.clone();
    if let Some(m) = data.as_object_mut() {
        m.insert(
            "apiVersion".into(),
            crate::api::instancetype::API_VERSION.into(),
        );
        m.insert("kind".into(), kind.kind().into());
    }
    if let Some(m) = data.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in [
            "labels",
            "annotations",
            "finalizers",
            "ownerReferences",
            "managedFields",
        ] {
            m.remove(k);
        }
    }
    for path in [["memory", "guest"], ["memory", "maxGuest"]] {
        if let Some(q) = data
            .get_mut("spec")
            .and_then(|s| s.get_mut(path[0]))
            .and_then(|m| m.get_mut(path[1]))
        {
            *q = canonical_quantity(q);
        }
    }
    let vm_name = vm.metadata.name.clone().unwrap_or_default();
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(name(&vm_name, &obj_name, version, &uid, generation)),
            namespace: vm.metadata.namespace.clone(),
            owner_references: Some(vec![crate::controller::vm::setup_vmi::vm_controller_ref(
                vm,
            )]),
            labels: Some(BTreeMap::from([
                (labels::OBJECT_GENERATION.into(), generation.to_string()),
                (labels::OBJECT_KIND.into(), kind.kind().into()),
                (labels::OBJECT_NAME.into(), obj_name.clone()),
                (labels::OBJECT_UID.into(), uid),
                (labels::OBJECT_VERSION.into(), version.into()),
            ])),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: 0,
    }
}

/// `data` as the API serves it (the controllers' cache keeps it as JSON text).
fn data(cr: &ControllerRevision) -> Option<Value> {
    crate::controller::vm::revision::revision_data(cr).map(std::borrow::Cow::into_owned)
}

/// `compatibility.Decode` + the kind switch of `GetInstancetypeSpec` / `GetPreferenceSpec`
/// (compatibility/compatibility.go:30-79): the stashed object's spec, when `data` is a v1beta1
/// object of one of `kinds`.
pub(crate) fn stashed_spec(cr: &ControllerRevision, preference: bool) -> Result<Value, String> {
    let Some(data) = data(cr).filter(|d| !d.is_null()) else {
        return Err("unexpected type in ControllerRevision: <nil>".into());
    };
    let api_version = data.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or("");
    let known = Resource::ALL.iter().any(|r| r.kind() == kind);
    if api_version != crate::api::instancetype::API_VERSION || !known {
        return Err(format!(
            "failed to decode object in ControllerRevision: no kind \"{kind}\" is registered \
             for version \"{api_version}\" in scheme \"pkg/runtime/scheme.go:100\""
        ));
    }
    let is_pref = matches!(
        kind,
        "VirtualMachinePreference" | "VirtualMachineClusterPreference"
    );
    if is_pref != preference {
        return Err(format!(
            "unexpected type in ControllerRevision: *v1beta1.{kind}"
        ));
    }
    Ok(data
        .get("spec")
        .cloned()
        .unwrap_or(Value::Object(Default::default())))
}

/// `Compare` (revision/compare.go:30-52): the two revisions stash semantically equal specs.
pub(crate) fn same_spec(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    let spec = |cr| {
        data(cr)
            .and_then(|d| d.get("spec").cloned())
            .map(|s| crate::controller::common::semantic::normalize(&s))
    };
    spec(a).is_some() && spec(a) == spec(b)
}

/// `IsObjectLatestVersion` (upgrade/handler.go:163-168): labelled with object version `v1beta1`.
pub(crate) fn is_latest_version(cr: &ControllerRevision) -> bool {
    cr.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::OBJECT_VERSION))
        .is_some_and(|v| v == crate::api::instancetype::VERSION)
}

/// The object a stashed revision holds, for [`build`] when upgrading it (upgrade/handler.go:140-150).
pub(crate) fn stashed_object(cr: &ControllerRevision) -> Result<(Resource, Value), String> {
    let data = data(cr).unwrap_or(Value::Null);
    let kind = data.get("kind").and_then(Value::as_str).unwrap_or("");
    let preference = matches!(
        kind,
        "VirtualMachinePreference" | "VirtualMachineClusterPreference"
    );
    stashed_spec(cr, preference)?;
    let resource = Resource::ALL
        .into_iter()
        .find(|r| r.kind() == kind)
        .ok_or_else(|| format!("unexpected type in ControllerRevision: {kind}"))?;
    Ok((resource, data))
}
