//! The VMI controller's backend storage: the `persistent-state-for-<VMI>` claim of a VMI with
//! a persistent TPM, persistent EFI or changed-block tracking. KubeVirt v1.9.0:
//! pkg/storage/backend-storage/backend-storage.go (`PVCForVMI`, `createPVC`, `getStorageClass`,
//! `getAccessMode`, `IsPVCReady`, `UpdateVolumeStatus`, `CreatePVCForVMI`, `labelLegacyPVC`) as used by
//! pkg/virt-controller/watch/vmi/lifecycle.go:126-141, 308-311 and storage.go:112-136.
//!
//! Pure: the executor reads the namespace's claims and the cluster's StorageClasses and
//! StorageProfiles into a [`BackendStorageState`]; [`plan`] decides; the claim is created or
//! deleted through [`super::VmiAction::CreateBackendStoragePvc`] /
//! [`super::VmiAction::DeleteBackendStoragePvc`].
//!
//! A claim found by its legacy name alone (no `persistent-state-for` label) is used as found:
//! `handleBackendStorage` calls `CreatePVCForVMI` only when `PVCForVMI` found no claim
//! (storage.go:126-133), and only `CreatePVCForVMI` relabels one (backend-storage.go:563-574).
//! So v1.9.0 labels a legacy claim only when its second look at the claim cache, at creation
//! time, finds one the decision's look did not: the executor does the same ([`at_create`],
//! [`legacy_label_patch`]; a failed label is only logged, backend-storage.go:253-257).
//!
//! Not modelled: everything migration does with these claims (target claims, hand-off,
//! recovery jobs).

use crate::api::vmi::VirtualMachineInstance;
use crate::launcher::backend_storage::{
    PVC_PREFIX, PVC_SIZE, STATUS_VOLUME_NAME, base_claim_name, is_needed,
};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimSpec, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// `controller.FailedBackendStorageCreateReason` (pkg/controller/controller.go:71).
pub(crate) const FAILED_CREATE: &str = "FailedBackendStorageCreate";
/// `controller.FailedBackendStorageProbeReason` (controller.go:73).
pub(crate) const FAILED_PROBE: &str = "FailedBackendStorageProbe";
/// `controller.BackendStorageNotReadyReason` (controller.go:75).
pub(crate) const NOT_READY: &str = "BackendStorageNotReady";
/// The SyncError reason of a failed delete (storage.go:121).
pub(crate) const FAILED_DELETE: &str = "Failed deleting backend storage";
/// `storagetypes.LabelApplyStorageProfile` (pkg/storage/types/cdi.go:41): lets CDI's PVC
/// mutating webhook size the claim from its StorageProfile (backend-storage.go:527-533).
const APPLY_STORAGE_PROFILE: &str = "cdi.kubevirt.io/applyStorageProfile";
/// KubeVirt's default-virt-class annotation on a StorageClass (backend-storage.go:422).
const KUBEVIRT_DEFAULT_CLASS: &str = "storageclass.kubevirt.io/is-default-virt-class";
/// Kubernetes' default-class annotation (backend-storage.go:425).
const K8S_DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";

/// What the decision needs of the cluster, read by the executor.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendStorageState {
    /// `IsBackendStorageNeeded(vmi)`.
    pub needed: bool,
    /// `PVCForVMI`: the claim of the VMI's namespace labelled `persistent-state-for=<VMI>`,
    /// else one named `persistent-state-for-<VMI>`; claims being deleted are skipped.
    pub claim: Option<Claim>,
    /// What `createPVC` would send (`Err`: `getStorageClass`'s error), built only when the VMI
    /// needs a claim and has none.
    pub new_claim: Result<PersistentVolumeClaim, String>,
}

impl Default for BackendStorageState {
    /// A VMI that needs no backend storage and has no claim.
    fn default() -> Self {
        BackendStorageState {
            needed: false,
            claim: None,
            new_claim: Err("no default storage class found".into()),
        }
    }
}

/// What the controller reads of the found claim.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub name: String,
    /// `status.phase` (`Pending`, `Bound`, `Lost`; empty when not yet written).
    pub phase: String,
    /// `spec.accessModes`, for the volume status.
    pub access_modes: Vec<String>,
    /// For a `Pending` claim, its StorageClass's binding: `Ok(true)` WaitForFirstConsumer,
    /// `Ok(false)` another mode, `Err` IsPVCReady's error (no class name, class not found).
    pub class_wffc: Result<bool, String>,
}

/// `PVCForVMI` (backend-storage.go:61-83) over the namespace's claims.
pub(crate) fn find_claim<'a>(
    vmi: &VirtualMachineInstance,
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
) -> Option<&'a PersistentVolumeClaim> {
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let legacy = base_claim_name(vmi);
    let mut found = None;
    for c in claims {
        if c.metadata.namespace != vmi.metadata.namespace || c.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let label = c.metadata.labels.as_ref().and_then(|l| l.get(PVC_PREFIX));
        if label.map(String::as_str) == Some(name) {
            return Some(c);
        }
        if c.metadata.name.as_deref() == Some(legacy.as_str()) {
            found = Some(c);
        }
    }
    found
}

/// What `CreatePVCForVMI` (backend-storage.go:563-574) does when the executor is about to
/// create the claim: it looks the claim up again in the (possibly newer) cache.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AtCreate {
    /// Still no claim: create the new one.
    Create,
    /// A claim appeared meanwhile: use it, no creation. `label` is the patch that labels it
    /// when it has no `persistent-state-for` label.
    Found {
        name: String,
        label: Option<json_patch::Patch>,
    },
}

/// `CreatePVCForVMI` over the namespace's claims as they are now.
pub(crate) fn at_create<'a>(
    vmi: &VirtualMachineInstance,
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
) -> AtCreate {
    let Some(claim) = find_claim(vmi, claims) else {
        return AtCreate::Create;
    };
    let labelled = claim
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(PVC_PREFIX));
    AtCreate::Found {
        name: claim.metadata.name.clone().unwrap_or_default(),
        label: (!labelled)
            .then(|| legacy_label_patch(claim, vmi.metadata.name.as_deref().unwrap_or_default())),
    }
}

/// The JSON patch of `labelLegacyPVC` (backend-storage.go:245-251), sent as
/// `application/json-patch+json`: a claim with no labels gets `add /metadata/labels` with the
/// one label; a claim with other labels gets `replace /metadata/labels/persistent-state-for`.
/// The API server's JSON patch (evanphx/json-patch v4) treats a `replace` of a key missing
/// from an existing object as an `add`, so both succeed on a claim that still exists.
pub(crate) fn legacy_label_patch(
    claim: &PersistentVolumeClaim,
    vmi_name: &str,
) -> json_patch::Patch {
    use crate::controller::common::patch::{PatchSet, path};
    let mut p = PatchSet::new();
    if claim
        .metadata
        .labels
        .as_ref()
        .is_none_or(BTreeMap::is_empty)
    {
        p.add(
            path(&["metadata", "labels"]),
            &BTreeMap::from([(PVC_PREFIX, vmi_name)]),
        );
    } else {
        p.replace(path(&["metadata", "labels", PVC_PREFIX]), vmi_name);
    }
    p.into_patch()
}

/// `getStorageClass` (backend-storage.go:412-437): the CR's `vmStateStorageClass`, else the
/// class annotated KubeVirt's default, else Kubernetes' default (the last one listed wins
/// each), else `no default storage class found`.
pub(crate) fn storage_class(
    configured: Option<&str>,
    classes: &[&StorageClass],
) -> Result<String, String> {
    if let Some(c) = configured.filter(|c| !c.is_empty()) {
        return Ok(c.to_string());
    }
    let (mut kv, mut k8s) = (None, None);
    for sc in classes {
        let a = sc.metadata.annotations.as_ref();
        let is = |key: &str| a.and_then(|a| a.get(key)).map(String::as_str) == Some("true");
        if is(KUBEVIRT_DEFAULT_CLASS) {
            kv = sc.metadata.name.clone();
        }
        if is(K8S_DEFAULT_CLASS) {
            k8s = sc.metadata.name.clone();
        }
    }
    kv.or(k8s)
        .ok_or_else(|| "no default storage class found".to_string())
}

/// `getAccessMode` (backend-storage.go:439-483) for filesystem mode: `ReadWriteMany` when the
/// class was configured, else `ReadWriteOnce`; a StorageProfile (`profile_sets`: its
/// `status.claimPropertySets`) with a Filesystem set offering RWX gives RWX, one offering only
/// RWO gives RWO.
pub(crate) fn access_mode(configured: bool, profile_sets: Option<&[Value]>) -> &'static str {
    let default = if configured {
        "ReadWriteMany"
    } else {
        "ReadWriteOnce"
    };
    let mut rwo = false;
    for set in profile_sets.unwrap_or_default() {
        if set.get("volumeMode").and_then(Value::as_str) != Some("Filesystem") {
            continue;
        }
        for mode in set
            .get("accessModes")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match mode.as_str() {
                Some("ReadWriteMany") => return "ReadWriteMany",
                Some("ReadWriteOnce") => rwo = true,
                _ => {}
            }
        }
    }
    if rwo { "ReadWriteOnce" } else { default }
}

/// The claim `createPVC` sends (backend-storage.go:509-557): `generateName`
/// `persistent-state-for-<VMI>-`, the VMI's owner references (the VMI itself as controller when
/// it has none), labels `persistent-state-for=<VMI>` and the apply-storage-profile label, one
/// access mode, 10Mi, the class, Filesystem mode.
pub(crate) fn new_claim(
    vmi: &VirtualMachineInstance,
    class: &str,
    mode: &str,
) -> PersistentVolumeClaim {
    let owners = match vmi.metadata.owner_references.as_deref() {
        Some(o) if !o.is_empty() => o.to_vec(),
        _ => vec![OwnerReference {
            api_version: crate::api::API_VERSION.into(),
            kind: "VirtualMachineInstance".into(),
            name: vmi.metadata.name.clone().unwrap_or_default(),
            uid: vmi.metadata.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }],
    };
    let labels = BTreeMap::from([
        (
            PVC_PREFIX.to_string(),
            vmi.metadata.name.clone().unwrap_or_default(),
        ),
        (APPLY_STORAGE_PROFILE.to_string(), "true".to_string()),
    ]);
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", base_claim_name(vmi))),
            namespace: vmi.metadata.namespace.clone(),
            owner_references: Some(owners),
            labels: Some(labels),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![mode.to_string()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_string(),
                    Quantity(PVC_SIZE.into()),
                )])),
                ..Default::default()
            }),
            storage_class_name: Some(class.to_string()),
            volume_mode: Some("Filesystem".into()),
            ..Default::default()
        }),
        status: None,
    }
}

/// What the claim's StorageClass says for `IsPVCReady`'s Pending case
/// (backend-storage.go:611-626).
pub(crate) fn class_wffc(
    claim: &PersistentVolumeClaim,
    class: impl Fn(&str) -> Option<StorageClass>,
) -> Result<bool, String> {
    let Some(name) = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
    else {
        return Err("no storage class name".into());
    };
    let sc = class(name).ok_or_else(|| format!("storage class {name} not found"))?;
    Ok(sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
}

/// The claim as [`Claim`].
pub(crate) fn claim_facts(
    claim: &PersistentVolumeClaim,
    class: impl Fn(&str) -> Option<StorageClass>,
) -> Claim {
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default();
    Claim {
        name: claim.metadata.name.clone().unwrap_or_default(),
        class_wffc: if phase == "Pending" {
            class_wffc(claim, class)
        } else {
            Ok(false)
        },
        phase,
        access_modes: claim
            .spec
            .as_ref()
            .and_then(|s| s.access_modes.clone())
            .unwrap_or_default(),
    }
}

/// The decision at the pod-creation point (lifecycle.go:126-141).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Step {
    /// Go on and render the pod, with this claim (`None`: not needed).
    Ready(Option<String>),
    /// Create the claim; the sync stops (the creation is expected).
    Create(Box<PersistentVolumeClaim>),
    /// Not needed but a claim exists: delete it, then go on (storage.go:117-124).
    Delete(String),
    /// A SyncError: reason, message.
    Error(&'static str, String),
}

/// `handleBackendStorage` then `IsPVCReady` (storage.go:112-136, backend-storage.go:592-629).
pub(crate) fn plan(state: &BackendStorageState) -> Step {
    if !state.needed {
        return match &state.claim {
            Some(c) => Step::Delete(c.name.clone()),
            None => Step::Ready(None),
        };
    }
    let Some(claim) = &state.claim else {
        return match &state.new_claim {
            Ok(pvc) => Step::Create(Box::new(pvc.clone())),
            Err(e) => Step::Error(FAILED_CREATE, e.clone()),
        };
    };
    match claim.phase.as_str() {
        "Bound" => Step::Ready(Some(claim.name.clone())),
        "Lost" => Step::Error(FAILED_PROBE, "backend storage PVC lost".into()),
        "Pending" => match &claim.class_wffc {
            Ok(true) => Step::Ready(Some(claim.name.clone())),
            Ok(false) => Step::Error(NOT_READY, "PVC pending".into()),
            Err(e) => Step::Error(FAILED_PROBE, e.clone()),
        },
        _ => Step::Error(NOT_READY, "PVC pending".into()),
    }
}

/// `UpdateVolumeStatus` (backend-storage.go:485-507), applied to a VMI status' `volumeStatus`:
/// the backend-storage entry (any entry whose name starts with `persistent-state-for`) renamed
/// `persistent-state-for-this-vm` with the claim's name and access modes, or appended.
pub(crate) fn update_volume_status(entries: &mut Vec<Value>, claim: &Claim) {
    let info = |old: Option<&Value>| {
        let mut info = old.cloned().unwrap_or_else(|| json!({}));
        info["claimName"] = json!(claim.name);
        if claim.access_modes.is_empty() {
            if let Some(m) = info.as_object_mut() {
                m.remove("accessModes");
            }
        } else {
            info["accessModes"] = json!(claim.access_modes);
        }
        info
    };
    for e in entries.iter_mut() {
        let is_backend = e
            .get("name")
            .and_then(Value::as_str)
            .is_some_and(|n| n.starts_with(PVC_PREFIX));
        if is_backend {
            e["name"] = json!(STATUS_VOLUME_NAME);
            let new = info(e.get("persistentVolumeClaimInfo"));
            e["persistentVolumeClaimInfo"] = new;
            return;
        }
    }
    // `target` has no omitempty (core/v1 types.go `VolumeStatus.Target`): the API server's
    // schema requires it, so the new entry carries `""` as Go's marshalling writes it.
    entries.push(json!({"name": STATUS_VOLUME_NAME, "target": "",
        "persistentVolumeClaimInfo": info(None)}));
}

/// The state for `vmi` from the namespace's claims, the StorageClasses, the StorageProfiles'
/// `status.claimPropertySets` by class name, and the CR's `vmStateStorageClass`.
pub(crate) fn state<'a>(
    vmi: &VirtualMachineInstance,
    claims: impl IntoIterator<Item = &'a PersistentVolumeClaim>,
    classes: &[&StorageClass],
    profile_sets: impl Fn(&str) -> Option<Vec<Value>>,
    configured: Option<&str>,
) -> BackendStorageState {
    let class = |name: &str| {
        classes
            .iter()
            .find(|c| c.metadata.name.as_deref() == Some(name))
            .map(|c| (*c).clone())
    };
    let needed = is_needed(vmi);
    let claim = find_claim(vmi, claims).map(|c| claim_facts(c, class));
    // Only [`plan`]'s create reads the new claim: built for a VMI that needs one and has none,
    // not on every reconcile of every VMI.
    let new_claim = if needed && claim.is_none() {
        storage_class(configured, classes).map(|sc| {
            let sets = profile_sets(&sc);
            let configured = configured.is_some_and(|c| !c.is_empty());
            new_claim(vmi, &sc, access_mode(configured, sets.as_deref()))
        })
    } else {
        Err("no claim to create: not needed, or one exists".into())
    };
    BackendStorageState {
        needed,
        claim,
        new_claim,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaimStatus;

    fn vmi(spec: Value, owners: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "tpm-vm", "namespace": "ns", "uid": "vmi-uid",
                         "ownerReferences": owners},
            "spec": spec}))
        .unwrap()
    }

    fn tpm() -> Value {
        json!({"domain": {"devices": {"tpm": {"persistent": true}}}})
    }

    fn class(name: &str, annotation: Option<&str>, wffc: bool) -> StorageClass {
        serde_json::from_value(json!({"metadata": {"name": name,
            "annotations": annotation.map(|a| json!({a: "true"})).unwrap_or(json!({}))},
            "provisioner": "x",
            "volumeBindingMode": if wffc { "WaitForFirstConsumer" } else { "Immediate" }}))
        .unwrap()
    }

    fn claim(name: &str, label: Option<&str>, phase: &str, sc: &str) -> PersistentVolumeClaim {
        let mut c = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: label.map(|l| BTreeMap::from([(PVC_PREFIX.to_string(), l.to_string())])),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                storage_class_name: Some(sc.into()),
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                ..Default::default()
            }),
            status: Some(PersistentVolumeClaimStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
        };
        if phase.is_empty() {
            c.status = None;
        }
        c
    }

    /// backend-storage_test.go:75-116 re-derived: the configured class wins; else KubeVirt's
    /// default class, else Kubernetes' default; none is an error.
    #[test]
    fn the_storage_class() {
        let k8s = class("standard", Some(K8S_DEFAULT_CLASS), false);
        let kv = class("virt", Some(KUBEVIRT_DEFAULT_CLASS), false);
        assert_eq!(storage_class(Some("rwx"), &[&k8s]), Ok("rwx".into()));
        assert_eq!(storage_class(None, &[&k8s]), Ok("standard".into()));
        assert_eq!(storage_class(None, &[&k8s, &kv]), Ok("virt".into()));
        assert_eq!(
            storage_class(Some(""), &[]),
            Err("no default storage class found".into())
        );
    }

    /// backend-storage_test.go:118-173 re-derived: RWO by default (cluster default class),
    /// RWX for a configured class, RWX when the profile offers it, RWO when it only offers RWO.
    #[test]
    fn the_access_mode() {
        let sets = |modes: Value| vec![json!({"volumeMode": "Filesystem", "accessModes": modes})];
        assert_eq!(access_mode(false, None), "ReadWriteOnce");
        assert_eq!(access_mode(true, None), "ReadWriteMany");
        assert_eq!(access_mode(false, Some(&[])), "ReadWriteOnce");
        let both = sets(json!(["ReadWriteMany", "ReadWriteOnce"]));
        assert_eq!(access_mode(false, Some(&both)), "ReadWriteMany");
        let rwo = sets(json!(["ReadWriteOnce"]));
        assert_eq!(access_mode(true, Some(&rwo)), "ReadWriteOnce");
        let block = vec![json!({"volumeMode": "Block", "accessModes": ["ReadWriteMany"]})];
        assert_eq!(access_mode(false, Some(&block)), "ReadWriteOnce");
    }

    /// backend-storage.go:509-557 (and backend-storage_test.go:284-306's label): the new
    /// claim of a VM's VMI is owned by the VM; a bare VMI's by the VMI itself.
    #[test]
    fn the_new_claim() {
        let owner = json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "name": "tpm-vm", "uid": "vm-uid", "controller": true, "blockOwnerDeletion": true}]);
        let c = new_claim(&vmi(tpm(), owner.clone()), "standard", "ReadWriteOnce");
        assert_eq!(
            serde_json::to_value(&c).unwrap(),
            json!({
                "apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"generateName": "persistent-state-for-tpm-vm-", "namespace": "ns",
                    "labels": {"cdi.kubevirt.io/applyStorageProfile": "true",
                               "persistent-state-for": "tpm-vm"},
                    "ownerReferences": owner},
                "spec": {"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "10Mi"}},
                    "storageClassName": "standard", "volumeMode": "Filesystem"}
            })
        );
        let bare = new_claim(&vmi(tpm(), json!(null)), "standard", "ReadWriteOnce");
        let o = &bare.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (o.kind.as_str(), o.uid.as_str(), o.controller),
            ("VirtualMachineInstance", "vmi-uid", Some(true))
        );
    }

    /// `PVCForVMI` (backend-storage.go:61-83): the labelled claim wins over the legacy name;
    /// other namespaces and deleting claims are skipped.
    #[test]
    fn finding_the_claim() {
        let v = vmi(tpm(), json!(null));
        let legacy = claim("persistent-state-for-tpm-vm", None, "Bound", "sc");
        let labelled = claim(
            "persistent-state-for-tpm-vm-abc12",
            Some("tpm-vm"),
            "Bound",
            "sc",
        );
        let mut other_ns = labelled.clone();
        other_ns.metadata.namespace = Some("elsewhere".into());
        let name = |c: Option<&PersistentVolumeClaim>| c.and_then(|c| c.metadata.name.clone());
        assert_eq!(name(find_claim(&v, [&legacy])), legacy.metadata.name);
        assert_eq!(
            name(find_claim(&v, [&legacy, &labelled])),
            labelled.metadata.name
        );
        assert_eq!(name(find_claim(&v, [&other_ns])), None);
    }

    /// `CreatePVCForVMI` (backend-storage.go:563-574) at creation time: no claim → create;
    /// a labelled claim → used as it is; a legacy claim without the label → used and labelled
    /// with `labelLegacyPVC`'s patch: `add` of the whole map when it has no labels (none or
    /// empty), `replace` of the one key when it has others (backend-storage.go:245-251).
    #[test]
    fn a_claim_found_at_creation_time() {
        let v = vmi(tpm(), json!(null));
        assert_eq!(at_create(&v, []), AtCreate::Create);
        let name = "persistent-state-for-tpm-vm";
        let labelled = claim(name, Some("tpm-vm"), "Bound", "sc");
        assert_eq!(
            at_create(&v, [&labelled]),
            AtCreate::Found {
                name: name.into(),
                label: None
            }
        );
        let patch_of = |c: &PersistentVolumeClaim| match at_create(&v, [c]) {
            AtCreate::Found { label: Some(p), .. } => serde_json::to_value(p).unwrap(),
            other => panic!("{other:?}"),
        };
        let mut bare = claim(name, None, "Bound", "sc");
        let add = json!([{"op": "add", "path": "/metadata/labels",
                          "value": {"persistent-state-for": "tpm-vm"}}]);
        assert_eq!(patch_of(&bare), add);
        bare.metadata.labels = Some(BTreeMap::new());
        assert_eq!(patch_of(&bare), add);
        bare.metadata.labels = Some(BTreeMap::from([("team".into(), "db".into())]));
        assert_eq!(
            patch_of(&bare),
            json!([{"op": "replace", "path": "/metadata/labels/persistent-state-for",
                    "value": "tpm-vm"}])
        );
    }

    /// `handleBackendStorage` + `IsPVCReady` (storage.go:112-136, backend-storage.go:592-629).
    #[test]
    fn the_plan() {
        let v = vmi(tpm(), json!(null));
        let sc = class("sc", Some(K8S_DEFAULT_CLASS), false);
        let wffc = class("late", None, true);
        let classes = [&sc, &wffc];
        let st = |claims: &[&PersistentVolumeClaim], v: &VirtualMachineInstance| {
            plan(&state(v, claims.iter().copied(), &classes, |_| None, None))
        };
        let Step::Create(c) = st(&[], &v) else {
            panic!("create")
        };
        assert_eq!(c.spec.unwrap().storage_class_name.as_deref(), Some("sc"));
        assert_eq!(
            plan(&state(&v, [], &[], |_| None, None)),
            Step::Error(FAILED_CREATE, "no default storage class found".into())
        );
        let name = "persistent-state-for-tpm-vm-abc12";
        let c = |phase: &str, sc: &str| claim(name, Some("tpm-vm"), phase, sc);
        assert_eq!(st(&[&c("Bound", "sc")], &v), Step::Ready(Some(name.into())));
        assert_eq!(
            st(&[&c("Pending", "sc")], &v),
            Step::Error(NOT_READY, "PVC pending".into())
        );
        assert_eq!(
            st(&[&c("Pending", "late")], &v),
            Step::Ready(Some(name.into()))
        );
        assert_eq!(
            st(&[&c("Pending", "gone")], &v),
            Step::Error(FAILED_PROBE, "storage class gone not found".into())
        );
        assert_eq!(
            st(&[&c("Lost", "sc")], &v),
            Step::Error(FAILED_PROBE, "backend storage PVC lost".into())
        );
        assert_eq!(
            st(&[&c("", "sc")], &v),
            Step::Error(NOT_READY, "PVC pending".into())
        );
        let plain = vmi(json!({"domain": {}}), json!(null));
        assert_eq!(st(&[], &plain), Step::Ready(None));
        assert_eq!(st(&[&c("Bound", "sc")], &plain), Step::Delete(name.into()));
    }

    /// `UpdateVolumeStatus` (backend-storage.go:485-507): appended once, a legacy entry renamed.
    #[test]
    fn the_volume_status_entry() {
        let c = Claim {
            name: "persistent-state-for-tpm-vm-abc12".into(),
            phase: "Bound".into(),
            access_modes: vec!["ReadWriteOnce".into()],
            class_wffc: Ok(false),
        };
        let mut entries = vec![json!({"name": "rootdisk", "target": ""})];
        update_volume_status(&mut entries, &c);
        update_volume_status(&mut entries, &c);
        let want = json!({"name": "persistent-state-for-this-vm", "target": "", "persistentVolumeClaimInfo":
            {"claimName": "persistent-state-for-tpm-vm-abc12", "accessModes": ["ReadWriteOnce"]}});
        assert_eq!(
            entries,
            vec![json!({"name": "rootdisk", "target": ""}), want.clone()]
        );
        let mut legacy = vec![json!({"name": "persistent-state-for-tpm-vm", "target": "",
            "persistentVolumeClaimInfo": {"claimName": "old", "filesystemOverhead": "0.055"}})];
        update_volume_status(&mut legacy, &c);
        assert_eq!(legacy[0]["name"], "persistent-state-for-this-vm");
        assert_eq!(
            legacy[0]["persistentVolumeClaimInfo"]["claimName"],
            "persistent-state-for-tpm-vm-abc12"
        );
        assert_eq!(
            legacy[0]["persistentVolumeClaimInfo"]["filesystemOverhead"],
            "0.055"
        );
    }
}
