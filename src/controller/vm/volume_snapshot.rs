//! `status.volumeSnapshotStatuses`: whether each volume of the VM can be snapshotted, as
//! KubeVirt v1.9's snapshot controller writes it (`updateVolumeSnapshotStatuses`,
//! pkg/storage/snapshot/snapshot.go:969-1121). KubeVirt runs it in its own work queue
//! (`virt-controller-snapshot-vmsnashotstatus`) on every VM, PVC and DataVolume change; here the
//! VM controller's `updateStatus` computes it and writes it with the rest of the status.

use crate::api::vm::{VirtualMachine, VolumeSnapshotStatus};
use crate::api::vmi::Volume;
use crate::api::{DataVolume, Extra};
use std::collections::BTreeMap;

/// The annotation that makes a VolumeSnapshotClass its driver's default (snapshot.go:58).
pub(crate) const DEFAULT_SNAPSHOT_CLASS_ANNOTATION: &str =
    "snapshot.storage.kubernetes.io/is-default-class";

/// A VolumeSnapshotClass as the rule reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotClassInfo {
    pub name: String,
    /// `driver`, matched against the StorageClass's `provisioner`.
    pub driver: String,
    /// Carries the [`DEFAULT_SNAPSHOT_CLASS_ANNOTATION`] (any value counts, snapshot.go:765-771).
    pub is_default: bool,
}

/// The cluster-scoped objects the rule reads: KubeVirt's StorageClass and StorageProfile
/// informers and its dynamic VolumeSnapshotClass informer (empty while
/// `snapshot.storage.k8s.io` is not served, snapshot_base.go:626-643).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StorageView {
    /// StorageClass name → `provisioner`.
    pub storage_classes: BTreeMap<String, String>,
    /// StorageProfile name (its StorageClass's) → `status.snapshotClass`, when set.
    pub profile_snapshot_classes: BTreeMap<String, String>,
    pub snapshot_classes: Vec<SnapshotClassInfo>,
}

impl StorageView {
    /// The view of the three stores' objects: a StorageClass's `provisioner`, a StorageProfile's
    /// `status.snapshotClass` (CDI names the profile after its StorageClass), a
    /// VolumeSnapshotClass's `driver` and default annotation (snapshot.go:724-774). The
    /// controller's caches and `replay` of an audit log both build it here.
    pub(crate) fn from_objects<'a>(
        storage_classes: impl IntoIterator<Item = &'a k8s_openapi::api::storage::v1::StorageClass>,
        storage_profiles: impl IntoIterator<Item = &'a crate::api::storage::StorageProfile>,
        snapshot_classes: impl IntoIterator<Item = &'a crate::api::storage::VolumeSnapshotClass>,
    ) -> Self {
        StorageView {
            storage_classes: storage_classes
                .into_iter()
                .filter_map(|sc| Some((sc.metadata.name.clone()?, sc.provisioner.clone())))
                .collect(),
            profile_snapshot_classes: storage_profiles
                .into_iter()
                .filter_map(|p| Some((p.metadata.name.clone()?, p.snapshot_class()?.to_string())))
                .collect(),
            snapshot_classes: snapshot_classes
                .into_iter()
                .map(|c| SnapshotClassInfo {
                    name: c.metadata.name.clone().unwrap_or_default(),
                    driver: c.driver.clone(),
                    is_default: c
                        .metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(DEFAULT_SNAPSHOT_CLASS_ANNOTATION)),
                })
                .collect(),
        }
    }

    /// `getVolumeSnapshotClassName` (snapshot.go:724-774): the VolumeSnapshotClass for a
    /// StorageClass; `Ok("")` when there is none, `Err` when several match and none is default.
    fn snapshot_class_for(&self, storage_class: &str) -> Result<String, String> {
        let Some(provisioner) = self.storage_classes.get(storage_class) else {
            return Ok(String::new());
        };
        // CDI's StorageProfile names the class first (snapshot.go:732-745): taken when that
        // class exists, otherwise nothing.
        if let Some(class) = self
            .profile_snapshot_classes
            .get(storage_class)
            .filter(|c| !c.is_empty())
        {
            let exists = self.snapshot_classes.iter().any(|c| &c.name == class);
            return Ok(if exists { class.clone() } else { String::new() });
        }
        let matches: Vec<&SnapshotClassInfo> = self
            .snapshot_classes
            .iter()
            .filter(|c| &c.driver == provisioner)
            .collect();
        match matches.as_slice() {
            [] => Ok(String::new()),
            [one] => Ok(one.name.clone()),
            several => several
                .iter()
                .find(|c| c.is_default)
                .map(|c| c.name.clone())
                .ok_or_else(|| {
                    format!(
                        "{} matching VolumeSnapshotClasses for {storage_class}",
                        several.len()
                    )
                }),
        }
    }
}

/// What one VM's rule reads besides the VM: its claims and DataVolumes from the caches
/// ([`super::VmSnapshot::pvcs`], [`super::VmSnapshot::data_volumes`]) and the storage objects.
pub(crate) struct SnapshotInputs<'a> {
    /// The cached claims the VM names (and its backend-storage claim) → their
    /// `spec.storageClassName`.
    pub claim_classes: &'a BTreeMap<String, Option<String>>,
    /// The VM's backend-storage claim ([`super::VmSnapshot::backend_claim`]).
    pub backend_claim: Option<&'a Result<String, String>>,
    pub data_volumes: &'a [DataVolume],
    pub storage: &'a StorageView,
}

/// `updateVolumeSnapshotStatuses` (snapshot.go:969-992): one entry per template volume, in
/// order, then one for the backend-storage claim the volume enumeration lists
/// (`GetVolumes(vm, WithAllVolumes)`, pkg/storage/utils/volumes.go:81-100: a claim volume
/// named [`backend_volume_name`]); `Ok(None)` for a VM without volumes (KubeVirt's nil list,
/// omitted). `Err`: the enumeration failed (several claims, all being deleted), and KubeVirt
/// writes nothing.
pub(crate) fn volume_snapshot_statuses(
    vm: &VirtualMachine,
    inputs: &SnapshotInputs<'_>,
) -> Result<Option<Vec<VolumeSnapshotStatus>>, String> {
    let mut statuses: Vec<VolumeSnapshotStatus> = vm
        .template_volumes()
        .iter()
        .map(|v| volume_status(vm, v, inputs))
        .collect();
    match inputs.backend_claim {
        None => {}
        Some(Err(e)) => return Err(e.clone()),
        Some(Ok(claim)) => {
            let volume: Volume = serde_json::from_value(serde_json::json!({
                "name": backend_volume_name(vm.metadata.name.as_deref().unwrap_or("")),
                "persistentVolumeClaim": {"claimName": claim}
            }))
            .map_err(|e| e.to_string())?;
            statuses.push(volume_status(vm, &volume, inputs));
        }
    }
    Ok((!statuses.is_empty()).then_some(statuses))
}

/// `BackendPVCVolumeName` (volumes.go:178-182): openshift library-go's `naming.GetName(
/// "persistent-state-for", VM, 63)`: `persistent-state-for-VM` when it fits in 63 characters,
/// else the prefix cut short, the 8-hex-digit FNV-1a hash and the VM name, or for a VM name
/// too long even for that, the prefix and the hash of the whole name.
pub(crate) fn backend_volume_name(vm: &str) -> String {
    const BASE: &str = crate::launcher::backend_storage::PVC_PREFIX;
    const MAX: usize = 63;
    let fnv = |s: &str| {
        let h = s.bytes().fold(0x811c_9dc5_u32, |h, b| {
            (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
        });
        format!("{h:08x}")
    };
    let name = format!("{BASE}-{vm}");
    if name.len() <= MAX {
        return name;
    }
    match (MAX - 10).checked_sub(vm.len()).filter(|l| *l > 0) {
        Some(base_len) => format!("{}-{}-{vm}", &BASE[..base_len.min(BASE.len())], fnv(BASE)),
        None => {
            let short = format!("{}-{}", &BASE[..BASE.len().min(MAX - 9)], fnv(&name));
            short[..short.len().min(MAX)].to_string()
        }
    }
}

/// The VM needs backend storage (`IsBackendStorageNeeded` for a VM, backend-storage.go:
/// 285-293): a persistent TPM or persistent EFI in the template, or changed-block tracking
/// initialising or enabled in the VM's status.
pub(crate) fn vm_needs_backend_storage(vm: &VirtualMachine) -> bool {
    let Some(spec) = vm.template_spec() else {
        return false;
    };
    let mut probe = crate::api::vmi::VirtualMachineInstance::default();
    probe.spec.domain.devices.tpm = spec.domain.devices.tpm.clone();
    probe.spec.domain.firmware = spec.domain.firmware.clone();
    let cbt = (vm.status.as_ref())
        .is_some_and(|s| crate::launcher::backend_storage::cbt_state_enabled(&s.extra));
    crate::launcher::backend_storage::has_persistent_tpm(&probe)
        || crate::launcher::backend_storage::has_persistent_efi(&probe)
        || cbt
}

/// `getBackendPVCName` for a VM (volumes.go:105-131): the claims of the VM's namespace
/// labelled `persistent-state-for=<VM>`: none → `None` (`ErrNoBackendPVC`, no entry); one → its
/// name; several → the newest not being deleted, or an error when all are.
pub(crate) fn find_backend_claim<'a>(
    vm: &VirtualMachine,
    claims: impl IntoIterator<Item = &'a k8s_openapi::api::core::v1::PersistentVolumeClaim>,
) -> Option<Result<String, String>> {
    let name = vm.metadata.name.as_deref().unwrap_or("");
    let labelled: Vec<_> = claims
        .into_iter()
        .filter(|c| c.metadata.namespace == vm.metadata.namespace)
        .filter(|c| {
            c.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::launcher::backend_storage::PVC_PREFIX))
                .is_some_and(|v| v == name)
        })
        .collect();
    match labelled.as_slice() {
        [] => None,
        [one] => Some(Ok(one.metadata.name.clone().unwrap_or_default())),
        several => Some(
            several
                .iter()
                .filter(|c| c.metadata.deletion_timestamp.is_none())
                .max_by_key(|c| c.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .map(|c| c.metadata.name.clone().unwrap_or_default())
                .ok_or_else(|| "no non-terminating PVC found".to_string()),
        ),
    }
}

/// `getVolumeSnapshotStatus` (snapshot.go:994-1021) with its reason texts.
fn volume_status(
    vm: &VirtualMachine,
    volume: &Volume,
    inputs: &SnapshotInputs<'_>,
) -> VolumeSnapshotStatus {
    let disabled = |reason: String| VolumeSnapshotStatus {
        name: volume.name.clone(),
        enabled: false,
        reason: Some(reason),
        extra: Extra::default(),
    };
    let Some(source) = snapshottable_source(volume) else {
        return disabled(format!(
            "Snapshot is not supported for this volumeSource type [{}]",
            volume.name
        ));
    };
    let storage_class = match storage_class_of(vm, &source, inputs) {
        Ok(sc) => sc,
        Err(e) => return disabled(e),
    };
    match inputs.storage.snapshot_class_for(&storage_class) {
        Err(e) => disabled(e),
        Ok(class) if class.is_empty() => disabled(format!(
            "No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass \
             [{storage_class}] [{}]",
            volume.name
        )),
        Ok(_) => VolumeSnapshotStatus {
            name: volume.name.clone(),
            enabled: true,
            reason: None,
            extra: Extra::default(),
        },
    }
}

/// The volume sources KubeVirt can snapshot (`isVolumeSnapshottable`, snapshot.go:1023-1027),
/// in the order `getVolumeStorageClass` looks at them (snapshot.go:1046-1076).
enum SnapshottableSource {
    Claim(String),
    MemoryDump(String),
    DataVolume(String),
}

fn snapshottable_source(volume: &Volume) -> Option<SnapshottableSource> {
    if let Some(pvc) = &volume.persistent_volume_claim {
        return Some(SnapshottableSource::Claim(
            pvc.claim_name.clone().unwrap_or_default(),
        ));
    }
    let memory_dump = volume.extra.field("memoryDump", |md| {
        Some(
            md.get("claimName")
                .and_then(|c| c.as_str())
                .unwrap_or("")
                .to_string(),
        )
    });
    if let Some(claim) = memory_dump {
        return Some(SnapshottableSource::MemoryDump(claim));
    }
    volume
        .data_volume
        .as_ref()
        .map(|dv| SnapshottableSource::DataVolume(dv.name.clone().unwrap_or_default()))
}

/// `getVolumeStorageClass` (snapshot.go:1046-1076).
fn storage_class_of(
    vm: &VirtualMachine,
    source: &SnapshottableSource,
    inputs: &SnapshotInputs<'_>,
) -> Result<String, String> {
    match source {
        SnapshottableSource::Claim(claim) | SnapshottableSource::MemoryDump(claim) => {
            claim_storage_class(claim, inputs)
        }
        SnapshottableSource::DataVolume(name) => data_volume_storage_class(vm, name, inputs),
    }
}

/// `getStorageClassNameForPVC` (snapshot.go:1029-1044): the claim's `spec.storageClassName`
/// (`""` when unset); "PVC not found" when it is not in the cache.
fn claim_storage_class(claim: &str, inputs: &SnapshotInputs<'_>) -> Result<String, String> {
    match inputs.claim_classes.get(claim) {
        Some(class) => Ok(class.clone().unwrap_or_default()),
        None => Err("PVC not found".to_string()),
    }
}

/// `getStorageClassNameForDV` (snapshot.go:1078-1121): the DataVolume's non-empty
/// `spec.pvc.storageClassName`; else, when a VM owns it, that VM's `dataVolumeTemplates` entry
/// of the same name with `spec.pvc.storageClassName` set (even `""`); else its claim's. Only the
/// VM being synced is looked at as an owner (KubeVirt reads any VM of the cache).
fn data_volume_storage_class(
    vm: &VirtualMachine,
    name: &str,
    inputs: &SnapshotInputs<'_>,
) -> Result<String, String> {
    let Some(dv) = inputs
        .data_volumes
        .iter()
        .find(|d| d.metadata.name.as_deref() == Some(name))
    else {
        return claim_storage_class(name, inputs);
    };
    let own = dv
        .spec
        .pointer("/pvc/storageClassName")
        .and_then(|c| c.as_str());
    if let Some(sc) = own.filter(|sc| !sc.is_empty()) {
        return Ok(sc.to_string());
    }
    let owned_by_vm = dv.metadata.owner_references.iter().flatten().any(|o| {
        o.kind == "VirtualMachine" && Some(o.name.as_str()) == vm.metadata.name.as_deref()
    });
    if owned_by_vm {
        let from_template = vm
            .spec
            .data_volume_templates
            .iter()
            .flatten()
            .find_map(|t| {
                let named = t.pointer("/metadata/name").and_then(|n| n.as_str()) == Some(name);
                named
                    .then(|| t.pointer("/spec/pvc/storageClassName"))
                    .flatten()
                    .and_then(|c| c.as_str())
            });
        if let Some(sc) = from_template {
            return Ok(sc.to_string());
        }
    }
    claim_storage_class(name, inputs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use serde_json::json;

    const CEPH: &str = "rook-ceph.rbd.csi.ceph.com";

    fn vm(volumes: serde_json::Value) -> VirtualMachine {
        serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"template": {"spec": {"domain": {"devices": {}}, "volumes": volumes}}},
        }))
        .unwrap()
    }

    fn pvc(class: Option<&str>) -> Option<String> {
        class.map(str::to_string)
    }

    fn dv(name: &str, spec: serde_json::Value) -> DataVolume {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}, "spec": spec}))
            .unwrap()
    }

    fn class(name: &str, driver: &str, is_default: bool) -> SnapshotClassInfo {
        SnapshotClassInfo {
            name: name.into(),
            driver: driver.into(),
            is_default,
        }
    }

    /// snapshot_test.go's StorageClasses (`createStorageClass` and the `local` one) and its two
    /// ceph VolumeSnapshotClasses, the first marked default.
    fn storage(snapshot_classes: Vec<SnapshotClassInfo>) -> StorageView {
        StorageView {
            storage_classes: BTreeMap::from([
                ("rook-ceph-block".into(), CEPH.into()),
                ("local".into(), "kubernetes.io/no-provisioner".into()),
            ]),
            profile_snapshot_classes: BTreeMap::new(),
            snapshot_classes,
        }
    }

    fn two_ceph_classes() -> Vec<SnapshotClassInfo> {
        vec![
            class("csi-rbdplugin-snapclass", CEPH, true),
            class("csi-rbdplugin-snapclass-2", CEPH, false),
        ]
    }

    fn statuses(
        vm: &VirtualMachine,
        claim_classes: &BTreeMap<String, Option<String>>,
        dvs: &[DataVolume],
        storage: &StorageView,
    ) -> Vec<(String, bool, Option<String>)> {
        let inputs = SnapshotInputs {
            claim_classes,
            backend_claim: None,
            data_volumes: dvs,
            storage,
        };
        volume_snapshot_statuses(vm, &inputs)
            .unwrap()
            .unwrap_or_default()
            .into_iter()
            .map(|s| (s.name, s.enabled, s.reason))
            .collect()
    }

    /// snapshot_test.go:2330-2570 "should set volume snapshot status to false for unsupported
    /// volume types": every reason text, in volume order.
    #[test]
    fn unsupported_and_unconfigured_volumes_get_kubevirts_reasons() {
        let vm = vm(json!([
            {"name": "disk1", "persistentVolumeClaim": {"claimName": "pvc-local"}},
            {"name": "disk2", "ephemeral": {"persistentVolumeClaim": {"claimName": "pvc-eph"}}},
            {"name": "disk3", "dataVolume": {"name": "dv-empty-class"}},
            {"name": "disk4", "hostDisk": {"path": "/some/path", "type": "Disk"}},
            {"name": "disk5", "dataVolume": {"name": "dv-local"}},
            {"name": "disk6", "persistentVolumeClaim": {"claimName": "missing"}},
            {"name": "disk7", "persistentVolumeClaim": {"claimName": "pvc-no-class"}},
            {"name": "disk8", "dataVolume": {"name": "dv-no-class"}},
        ]));
        let pvcs = BTreeMap::from([
            ("pvc-local".to_string(), pvc(Some("local"))),
            ("pvc-eph".to_string(), pvc(Some("rook-ceph-block"))),
            ("dv-empty-class".to_string(), pvc(Some("local"))),
            ("pvc-no-class".to_string(), pvc(None)),
            ("dv-no-class".to_string(), pvc(None)),
        ]);
        let dvs = [
            dv("dv-empty-class", json!({"pvc": {"storageClassName": ""}})),
            dv("dv-local", json!({"pvc": {"storageClassName": "local"}})),
            dv("dv-no-class", json!({"pvc": {}})),
        ];
        let no_class = |sc: &str, v: &str| {
            Some(format!(
                "No VolumeSnapshotClass: Volume snapshots are not configured for this \
                 StorageClass [{sc}] [{v}]"
            ))
        };
        let unsupported = |v: &str| {
            Some(format!(
                "Snapshot is not supported for this volumeSource type [{v}]"
            ))
        };
        let got = statuses(&vm, &pvcs, &dvs, &storage(two_ceph_classes()));
        let want = vec![
            ("disk1".to_string(), false, no_class("local", "disk1")),
            ("disk2".to_string(), false, unsupported("disk2")),
            ("disk3".to_string(), false, no_class("local", "disk3")),
            ("disk4".to_string(), false, unsupported("disk4")),
            ("disk5".to_string(), false, no_class("local", "disk5")),
            (
                "disk6".to_string(),
                false,
                Some("PVC not found".to_string()),
            ),
            ("disk7".to_string(), false, no_class("", "disk7")),
            ("disk8".to_string(), false, no_class("", "disk8")),
        ];
        assert_eq!(got, want);
    }

    /// snapshot_test.go:2262-2328 "should set volume snapshot status to true for each supported
    /// volume type" and 2572-2630 "… when a new snapshot class is added": a claim and a
    /// DataVolume on the ceph class are enabled once its VolumeSnapshotClasses exist (two match
    /// the driver: the default one is taken), disabled before.
    #[test]
    fn a_matching_snapshot_class_enables_claims_and_data_volumes() {
        let vm = vm(json!([
            {"name": "disk1", "dataVolume": {"name": "alpine-dv"}},
            {"name": "disk2", "persistentVolumeClaim": {"claimName": "test-pvc"}},
        ]));
        let pvcs = BTreeMap::from([("test-pvc".to_string(), pvc(Some("rook-ceph-block")))]);
        let dvs = [dv(
            "alpine-dv",
            json!({"pvc": {"storageClassName": "rook-ceph-block"}}),
        )];
        let enabled = |n: &str| (n.to_string(), true, None);
        assert_eq!(
            statuses(&vm, &pvcs, &dvs, &storage(two_ceph_classes())),
            vec![enabled("disk1"), enabled("disk2")]
        );
        let before = statuses(&vm, &pvcs, &dvs, &storage(vec![]));
        assert!(before.iter().all(|(_, on, _)| !on), "{before:?}");
    }

    /// snapshot.go:765-774: several classes for the driver and none default is an error, its
    /// text the reason.
    #[test]
    fn several_matching_classes_without_a_default_are_an_error() {
        let vm = vm(json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]));
        let pvcs = BTreeMap::from([("c".to_string(), pvc(Some("rook-ceph-block")))]);
        let classes = vec![class("a", CEPH, false), class("b", CEPH, false)];
        assert_eq!(
            statuses(&vm, &pvcs, &[], &storage(classes)),
            vec![(
                "d".to_string(),
                false,
                Some("2 matching VolumeSnapshotClasses for rook-ceph-block".to_string())
            )]
        );
    }

    /// snapshot.go:732-745: CDI's StorageProfile names the class, whatever the driver; a named
    /// class that does not exist disables.
    #[test]
    fn a_storage_profile_names_the_class() {
        let vm = vm(json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]));
        let pvcs = BTreeMap::from([("c".to_string(), pvc(Some("local")))]);
        let mut view = storage(vec![class("other-driver", "x.csi", false)]);
        view.profile_snapshot_classes
            .insert("local".into(), "other-driver".into());
        assert_eq!(
            statuses(&vm, &pvcs, &[], &view),
            vec![("d".to_string(), true, None)]
        );
        view.profile_snapshot_classes
            .insert("local".into(), "gone".into());
        assert!(!statuses(&vm, &pvcs, &[], &view)[0].1);
    }

    /// snapshot.go:1093-1116: a DataVolume without a class takes its owning VM's template's.
    #[test]
    fn a_data_volume_without_a_class_takes_its_vms_template_class() {
        let mut vm = vm(json!([{"name": "d", "dataVolume": {"name": "vm-disk"}}]));
        vm.spec.data_volume_templates = Some(vec![json!({
            "metadata": {"name": "vm-disk"},
            "spec": {"pvc": {"storageClassName": "rook-ceph-block"}},
        })]);
        let mut owned = dv("vm-disk", json!({"storage": {}}));
        owned.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                kind: "VirtualMachine".into(),
                name: "vm".into(),
                ..Default::default()
            },
        ]);
        let got = statuses(
            &vm,
            &BTreeMap::new(),
            &[owned],
            &storage(two_ceph_classes()),
        );
        assert_eq!(got, vec![("d".to_string(), true, None)]);
    }

    #[test]
    fn a_vm_without_volumes_has_no_entries() {
        let inputs = SnapshotInputs {
            claim_classes: &BTreeMap::new(),
            backend_claim: None,
            data_volumes: &[],
            storage: &StorageView::default(),
        };
        assert_eq!(volume_snapshot_statuses(&vm(json!([])), &inputs), Ok(None));
    }

    fn claim(name: &str, label: &str, created: i64, deleting: bool) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {
                "name": name, "namespace": "default",
                "labels": {"persistent-state-for": label},
                "creationTimestamp": chrono::DateTime::from_timestamp(created, 0).unwrap(),
                "deletionTimestamp": deleting.then(|| chrono::DateTime::from_timestamp(created, 0).unwrap())
            }
        }))
        .unwrap()
    }

    /// volumes.go:81-131 and snapshot.go:969-992: a VM with a persistent TPM gets an entry for
    /// its labelled backend claim after its own volumes, named `persistent-state-for-<VM>`;
    /// snapshottable on a class with a VolumeSnapshotClass. Without a labelled claim, no entry;
    /// several, the newest alive; all being deleted, nothing is written.
    #[test]
    fn the_backend_storage_claim_gets_an_entry() {
        let mut v = vm(json!([{"name": "root", "containerDisk": {"image": "x"}}]));
        v.metadata.namespace = Some("default".into());
        let tpm = json!({"persistent": true});
        v.spec
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .domain
            .devices
            .tpm = Some(serde_json::from_value(tpm).unwrap());
        assert!(vm_needs_backend_storage(&v));
        let name = v.metadata.name.clone().unwrap();
        let claims = [
            claim("old", &name, 100, false),
            claim("new", &name, 200, false),
            claim("gone", &name, 300, true),
            claim("other", "someone-else", 400, false),
        ];
        let found = find_backend_claim(&v, &claims);
        assert_eq!(found, Some(Ok("new".into())));
        assert_eq!(find_backend_claim(&v, &claims[3..]), None);
        assert_eq!(find_backend_claim(&v, &claims[..1]), Some(Ok("old".into())));
        let dying = [claim("a", &name, 1, true), claim("b", &name, 2, true)];
        let all_dying = find_backend_claim(&v, &dying);
        assert_eq!(all_dying, Some(Err("no non-terminating PVC found".into())));

        let classes = BTreeMap::from([("new".to_string(), Some("rook-ceph-block".to_string()))]);
        let storage = storage(two_ceph_classes());
        let inputs = SnapshotInputs {
            claim_classes: &classes,
            backend_claim: found.as_ref(),
            data_volumes: &[],
            storage: &storage,
        };
        let got: Vec<_> = volume_snapshot_statuses(&v, &inputs)
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|s| (s.name, s.enabled))
            .collect();
        assert_eq!(
            got,
            [
                ("root".to_string(), false),
                (format!("persistent-state-for-{name}"), true)
            ]
        );
        let inputs = SnapshotInputs {
            backend_claim: all_dying.as_ref(),
            ..inputs
        };
        assert!(volume_snapshot_statuses(&v, &inputs).is_err());
    }

    /// openshift library-go's naming.GetName as `BackendPVCVolumeName` calls it: joined when
    /// 63 characters fit, else the prefix cut to 63 - 10 - len(name) with the FNV-1a hash of
    /// "persistent-state-for" and the name, or for a name over 52 characters the prefix and the
    /// hash of the whole joined name (hashes worked out separately).
    #[test]
    fn backend_volume_names_follow_get_name() {
        assert_eq!(backend_volume_name("vm"), "persistent-state-for-vm");
        let long = "v".repeat(43);
        assert_eq!(
            backend_volume_name(&long),
            format!("persistent-e807c95a-{long}")
        );
        let very_long = "w".repeat(60);
        assert_eq!(
            backend_volume_name(&very_long),
            "persistent-state-for-64ad5569"
        );
    }
}
