//! The "start revision": a ControllerRevision holding the VM spec a VMI was started from
//! (pkg/virt-controller/watch/vm/vm.go:1694-1866, 2384-2404).

use super::error::VmSyncError;
use super::setup_vmi::vm_controller_ref;
use crate::api::vm::{VirtualMachine, VirtualMachineSpec};
use crate::runtime::index::IndexFn;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use serde::Deserialize;
use std::borrow::Borrow;

/// `vmRevisionName(uid)` (vm.go:1694-1696): `revision-start-vm-<uid>`.
pub(crate) fn revision_prefix(vm_uid: &str) -> String {
    format!("revision-start-vm-{vm_uid}")
}

/// `getVMRevisionName(uid, generation)` (vm.go:1698-1700): `revision-start-vm-<uid>-<generation>`.
pub(crate) fn revision_name(vm_uid: &str, generation: i64) -> String {
    format!("{}-{generation}", revision_prefix(vm_uid))
}

/// `parseGeneration` (vm.go:2384-2404): the integer after the last `-`, or `None`.
pub(crate) fn parse_generation(revision_name: &str) -> Option<i64> {
    let idx = revision_name.rfind('-')?;
    revision_name[idx + 1..].parse().ok()
}

/// `genFromKey` (vm.go:1798-1802) on a cache key `namespace/name`.
fn gen_from_key(key: &str) -> Result<i64, VmSyncError> {
    key.rsplit('-')
        .next()
        .and_then(|g| g.parse().ok())
        .ok_or_else(|| VmSyncError::Revision(format!("invalid key: {key}")))
}

/// The ControllerRevisions in the `vm` index for this UID (pkg/controller/virtinformers.go:
/// 1175-1189: the first owner reference of kind `VirtualMachine` decides), sorted by name.
pub(crate) fn indexed_revisions<'r, R: Borrow<ControllerRevision>>(
    vm_uid: &str,
    revisions: &'r [R],
) -> Vec<&'r ControllerRevision> {
    let mut out: Vec<&ControllerRevision> = revisions
        .iter()
        .map(Borrow::borrow)
        .filter(|cr| in_vm_index(cr, vm_uid))
        .collect();
    out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    out
}

/// Whether `cr` is in the `vm` index under `vm_uid`: its first owner reference of kind
/// `VirtualMachine` has that UID (pkg/controller/virtinformers.go:1175-1189).
pub(crate) fn in_vm_index(cr: &ControllerRevision, vm_uid: &str) -> bool {
    VM_INDEX.matches(cr, vm_uid)
}

/// The ControllerRevision informer's `vm` index (pkg/controller/virtinformers.go:1175-1189):
/// the UID of the first owner reference of kind `VirtualMachine`.
pub static VM_INDEX: IndexFn<ControllerRevision> = IndexFn {
    name: "vm",
    value: |cr| {
        cr.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.kind == "VirtualMachine")
            .map(|r| r.uid.clone())
    },
};

pub(super) fn cr_key(cr: &ControllerRevision) -> String {
    crate::api::key::meta_key(&cr.metadata)
}

#[derive(Deserialize)]
struct RevisionData {
    spec: VirtualMachineSpec,
}

/// Decode `data` of a start revision (`VirtualMachineRevisionData`, vm.go:1432-1436): the
/// `spec` member. Errors name the revision. Reads both forms of `data`: the object the API
/// serves and the compact text the controllers' cache keeps ([`revision_for_cache`]).
pub(crate) fn revision_spec(cr: &ControllerRevision) -> Result<VirtualMachineSpec, VmSyncError> {
    let name = cr.metadata.name.as_deref().unwrap_or("");
    let data = cr.data.as_ref().ok_or_else(|| {
        VmSyncError::Revision(format!("ControllerRevision {name}: data is empty"))
    })?;
    let decoded = match &data.0 {
        serde_json::Value::String(text) => serde_json::from_str::<RevisionData>(text),
        other => RevisionData::deserialize(other),
    };
    decoded
        .map(|d| d.spec)
        .map_err(|e| VmSyncError::Revision(format!("ControllerRevision {name}: data: {e}")))
}

/// `data` as the API serves it, whichever form the revision is in (see [`revision_spec`]);
/// `None` without data or when the cached text does not parse.
pub(crate) fn revision_data(
    cr: &ControllerRevision,
) -> Option<std::borrow::Cow<'_, serde_json::Value>> {
    let data = &cr.data.as_ref()?.0;
    match data {
        serde_json::Value::String(text) => {
            serde_json::from_str(text).ok().map(std::borrow::Cow::Owned)
        }
        other => Some(std::borrow::Cow::Borrowed(other)),
    }
}

/// The controllers' ControllerRevision cache transform: [`strip_for_cache`], and `data` kept
/// as its compact JSON text instead of a `serde_json::Value` tree (9.7 KiB of heap per cached
/// revision for 1.2 KB of JSON, `benches/cache_memory.rs`; the VM controller decodes `data`
/// only for its start revision, `getLastVMRevisionSpec`). A VM revision's `data` is always an
/// object on the server (`{"spec": …}`), so a string there is this form. Revisions are never
/// written back from the cache (the controller creates and deletes them), so the text never
/// reaches the server.
///
/// [`strip_for_cache`]: crate::runtime::informer::strip_for_cache
pub fn revision_for_cache(cr: &mut ControllerRevision) {
    crate::runtime::informer::strip_for_cache(cr);
    if let Some(data) = cr.data.as_mut()
        && !data.0.is_null()
    {
        data.0 = serde_json::Value::String(data.0.to_string());
    }
}

/// `getLastVMRevisionSpec` (vm.go:1804-1838): among the VM's indexed revisions whose key contains
/// `revision-start-vm-<uid>`, the one with the highest generation (> 0) parsed from the key.
/// Errors (an unparsable generation, undecodable data) stop the sync, as in KubeVirt.
pub(crate) fn last_revision_spec<R: Borrow<ControllerRevision>>(
    vm: &VirtualMachine,
    revisions: &[R],
) -> Result<Option<VirtualMachineSpec>, VmSyncError> {
    let uid = vm.metadata.uid.as_deref().unwrap_or("");
    let prefix = revision_prefix(uid);
    let mut best: Option<(i64, &ControllerRevision)> = None;
    for cr in indexed_revisions(uid, revisions) {
        let key = cr_key(cr);
        if !key.contains(&prefix) {
            continue;
        }
        let generation = gen_from_key(&key)?;
        if generation > best.map(|b| b.0).unwrap_or(0) {
            best = Some((generation, cr));
        }
    }
    best.map(|(_, cr)| revision_spec(cr)).transpose()
}

/// `patchVMRevision` + `createVMRevision`'s object (vm.go:1702-1724, 1855-1864): named
/// [`revision_name`], in the VM's namespace, controlled by the VM, `revision` = generation, `data`
/// = `{"spec": <VM spec>}` with `spec.instancetype.revisionName` / `spec.preference.revisionName`
/// filled from `status.instancetypeRef` / `status.preferenceRef` controller-revision refs.
pub(crate) fn build_start_revision(vm: &VirtualMachine) -> Result<ControllerRevision, VmSyncError> {
    let generation = vm.metadata.generation.unwrap_or(0);
    let uid = vm.metadata.uid.as_deref().unwrap_or("");
    let mut spec = serde_json::to_value(&vm.spec).map_err(|e| {
        VmSyncError::Revision(format!("VirtualMachine spec cannot be serialised: {e}"))
    })?;
    let status_extra = vm.status.as_ref().map(|s| &s.extra);
    for (field, reference) in [
        ("instancetype", "instancetypeRef"),
        ("preference", "preferenceRef"),
    ] {
        let revision = status_extra.and_then(|e| {
            e.read(|m| {
                m.get(reference)
                    .and_then(|r| r.get("controllerRevisionRef"))
                    .and_then(|r| r.get("name"))
                    .and_then(|n| n.as_str())
                    .filter(|n| !n.is_empty())
                    .map(str::to_string)
            })
        });
        if let (Some(revision), Some(matcher)) = (
            revision,
            spec.get_mut(field).and_then(|m| m.as_object_mut()),
        ) {
            matcher.insert("revisionName".into(), revision.into());
        }
    }
    Ok(ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(uid, generation)),
            namespace: vm.metadata.namespace.clone(),
            owner_references: Some(vec![vm_controller_ref(vm)]),
            ..Default::default()
        },
        // Members sorted as `getVMRevisionData`'s map writes them (vm.go:1702-1724): the API
        // server keeps these bytes and refuses any later change of them (runtime::gojson).
        data: Some(RawExtension(crate::runtime::gojson::sorted(
            serde_json::json!({ "spec": spec }),
        ))),
        revision: generation,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(generation: i64) -> VirtualMachine {
        serde_json::from_value(json!({
            "metadata": {"name": "testvmi", "namespace": "default", "uid": "uid1",
                         "generation": generation},
            "spec": {"runStrategy": "Always",
                     "template": {"spec": {"domain": {"devices": {}}, "futureField": 1}}},
        }))
        .unwrap()
    }

    #[test]
    fn naming_and_generation_parsing() {
        assert_eq!(revision_name("abc", 3), "revision-start-vm-abc-3");
        assert_eq!(parse_generation("revision-start-vm-abc-3"), Some(3));
        assert_eq!(parse_generation("revision-start-vm-abc-x"), None);
        assert_eq!(parse_generation("nodash"), None);
        assert_eq!(gen_from_key("ns/revision-start-vm-a-b-12"), Ok(12));
        assert!(gen_from_key("ns/revision-start-vm-a-b").is_err());
    }

    /// Mirrors vm_test.go:1887 "should create VMI with vmRevision": the revision object.
    #[test]
    fn start_revision_object() {
        let cr = build_start_revision(&vm(2)).unwrap();
        assert_eq!(
            cr.metadata.name.as_deref(),
            Some("revision-start-vm-uid1-2")
        );
        assert_eq!(cr.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(cr.revision, 2);
        let owner = &cr.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(owner.uid, "uid1");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(
            cr.data.as_ref().unwrap().0,
            json!({"spec": {"runStrategy": "Always",
                            "template": {"spec": {"domain": {"devices": {}}, "futureField": 1}}}})
        );
        assert!(cr.metadata.labels.is_none());
        // It decodes back to the same spec.
        assert_eq!(revision_spec(&cr).unwrap(), vm(2).spec);
    }

    /// kube-apiserver keeps `data` as the bytes sent and refuses a change of them, so they must
    /// be what Go's re-encoding in a merge patch writes: members sorted, HTML-safe escapes
    /// (found on kube-apiserver v1.36: the garbage collector could not orphan the revision of a
    /// VM deleted with orphan propagation, "data: field is immutable").
    #[test]
    fn revision_data_is_written_as_go_writes_a_map() {
        let vm: VirtualMachine = serde_json::from_value(json!({
            "metadata": {"name": "v", "namespace": "default", "uid": "u", "generation": 1},
            "spec": {"runStrategy": "Always", "template": {"spec": {
                "volumes": [{"name": "seed", "cloudInitNoCloud": {"userData": "a && b"}}],
                "domain": {"resources": {}, "memory": {"guest": "1Gi"}, "devices": {}}
            }}}
        }))
        .unwrap();
        let cr = build_start_revision(&vm).unwrap();
        let body = String::from_utf8(crate::runtime::gojson::to_vec(&cr).unwrap()).unwrap();
        let data = &body[body.find("\"data\":").unwrap() + 7..];
        assert!(
            data.starts_with(
                r#"{"spec":{"runStrategy":"Always","template":{"spec":{"domain":{"devices":{},"memory":{"guest":"1Gi"},"resources":{}},"volumes":[{"cloudInitNoCloud":{"userData":"a \u0026\u0026 b"},"name":"seed"}]}}}}"#
            ),
            "{data}"
        );
    }

    /// The cached form keeps `data` as text: it decodes to the same spec and the same `data`
    /// as the served object, and drops managedFields only.
    #[test]
    fn the_cached_revision_reads_as_the_served_one() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let mut served = build_start_revision(&vm(2)).unwrap();
        served.metadata.managed_fields = Some(vec![ManagedFieldsEntry::default()]);
        let mut cached = served.clone();
        revision_for_cache(&mut cached);
        assert!(cached.data.as_ref().unwrap().0.is_string());
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(
            revision_spec(&cached).unwrap(),
            revision_spec(&served).unwrap()
        );
        assert_eq!(
            revision_data(&cached).as_deref(),
            Some(&served.data.as_ref().unwrap().0)
        );
        let mut rest = served.clone();
        rest.metadata.managed_fields = None;
        rest.data = None;
        cached.data = None;
        assert_eq!(cached, rest);
        // A revision without data stays without data, and says so when decoded.
        let mut empty = served;
        empty.data = None;
        revision_for_cache(&mut empty);
        assert_eq!(empty.data, None);
        assert!(revision_spec(&empty).is_err());
    }

    #[test]
    fn instancetype_revision_names_are_filled() {
        let mut v = vm(1);
        v.spec.instancetype = Some(json!({"name": "u1.small"}).into());
        v.status = Some(
            serde_json::from_value(json!({
                "instancetypeRef": {"controllerRevisionRef": {"name": "rev-it"}},
                "preferenceRef": {"controllerRevisionRef": {"name": "rev-pref"}},
            }))
            .unwrap(),
        );
        let cr = build_start_revision(&v).unwrap();
        let spec = &cr.data.unwrap().0["spec"];
        assert_eq!(spec["instancetype"]["revisionName"], "rev-it");
        assert!(spec.get("preference").is_none());
    }

    /// Mirrors vm_test.go:1913 "should delete older vmRevision and create VMI with new one": the
    /// index and the newest-generation choice.
    #[test]
    fn last_revision_is_the_highest_generation_of_this_vm() {
        let mut old = build_start_revision(&vm(1)).unwrap();
        let mut new = build_start_revision(&vm(3)).unwrap();
        let mut other = build_start_revision(&vm(7)).unwrap();
        other.metadata.owner_references.as_mut().unwrap()[0].uid = "someone-else".into();
        if let Some(d) = new.data.as_mut() {
            d.0["spec"]["runStrategy"] = json!("Manual");
        }
        old.metadata.namespace = Some("default".into());
        let spec = last_revision_spec(&vm(3), &[old.clone(), new.clone(), other])
            .unwrap()
            .unwrap();
        assert_eq!(spec.run_strategy.as_deref(), Some("Manual"));
        assert_eq!(
            last_revision_spec(&vm(3), &[] as &[ControllerRevision]).unwrap(),
            None
        );
        // A revision with an unparsable generation is an error, as in KubeVirt.
        let mut bad = old;
        bad.metadata.name = Some("revision-start-vm-uid1-x".into());
        assert_eq!(
            last_revision_spec(&vm(3), &[bad]).unwrap_err().to_string(),
            "invalid key: default/revision-start-vm-uid1-x"
        );
        // Generation 0 is never chosen.
        let zero = build_start_revision(&vm(0)).unwrap();
        assert_eq!(last_revision_spec(&vm(3), &[zero]).unwrap(), None);
    }
}
