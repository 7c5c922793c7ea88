//! `kubevirt.io/v1` VirtualMachine.
//! Fields kept as raw JSON are `Option<Box<Value>>`: mostly absent, and an inline `Value` is
//! 80 bytes in every cached copy (docs/performance.md "Bytes per cached VM").
//!
//! Schema: KubeVirt `staging/src/kubevirt.io/api/core/v1/types.go` (v1.9.0).

use super::common::{Condition, Extra, MetaMaps, Time};
use super::vmi::VirtualMachineInstanceSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// A VirtualMachine: the desired, persistent VM from which VMIs are started.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachine {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: super::Meta,
    pub spec: VirtualMachineSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VirtualMachineStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

namespaced_resource!(
    VirtualMachine,
    kind = "VirtualMachine",
    group = super::GROUP,
    version = super::VERSION,
    plural = "virtualmachines"
);

/// `spec` of a VM (`v1.VirtualMachineSpec`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSpec {
    /// Deprecated boolean form of the run strategy; mutually exclusive with `runStrategy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    /// Required by the schema; `None` only for invalid input (reported as an error by users of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<VirtualMachineInstanceTemplateSpec>,
    /// CDI DataVolume templates, kept raw except name (`metadata.name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume_templates: Option<Vec<serde_json::Value>>,
    /// Instancetype matcher (`{kind, name}`), kept raw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instancetype: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preference: Option<Box<serde_json::Value>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.template` (`v1.VirtualMachineInstanceTemplateSpec`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceTemplateSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMeta>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<VirtualMachineInstanceSpec>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.template.metadata` (`metav1.ObjectMeta`), laid out for the VM cache: the labels and
/// annotations as [`SmallMap`]s (a `BTreeMap` allocates a 544-byte node for its first entry, and
/// every VM's template has both once the controller wrote its PCI topology annotation), every
/// other field boxed and absent when none is set (a template's metadata rarely holds more), so
/// 56 bytes inline where an `ObjectMeta` is 360. Read and written as an `ObjectMeta` is, field
/// for field ([`TemplateMeta::to_object_meta`]); docs/performance.md "Bytes per cached VM".
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TemplateMeta {
    /// The labels and annotations.
    pub maps: MetaMaps,
    /// The other fields (`name`, `finalizers`, a template's own `managedFields`, ...); `None`
    /// when all are unset.
    rest: Option<Box<ObjectMeta>>,
}

impl TemplateMeta {
    /// The metadata as k8s-openapi's type (a VMI's metadata starts as a copy of it, vm.go
    /// `setupVMIFromVM`).
    pub fn to_object_meta(&self) -> ObjectMeta {
        self.maps
            .restored(self.rest.as_deref().cloned().unwrap_or_default())
    }

    /// The fields other than the labels and annotations, as k8s-openapi's type (labels and
    /// annotations unset).
    pub fn rest(&self) -> Option<&ObjectMeta> {
        self.rest.as_deref()
    }
}

impl From<ObjectMeta> for TemplateMeta {
    fn from(mut meta: ObjectMeta) -> Self {
        let maps = MetaMaps::take_from(&mut meta);
        let rest = (meta != ObjectMeta::default()).then(|| Box::new(meta));
        TemplateMeta { maps, rest }
    }
}

/// Written as the `ObjectMeta` it stands for: the same fields in the same order.
impl Serialize for TemplateMeta {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.to_object_meta().serialize(serializer)
    }
}

/// Read as an `ObjectMeta` is, so what it accepts, rejects and ignores is unchanged.
impl<'de> Deserialize<'de> for TemplateMeta {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        ObjectMeta::deserialize(deserializer).map(TemplateMeta::from)
    }
}

/// `status` of a VM (`v1.VirtualMachineStatus`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_change_requests: Option<Box<Vec<StateChangeRequest>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<StartFailure>,
    /// `volumeSnapshotStatuses` (types.go:2132-2134): written by the snapshot rule
    /// (`crate::controller::vm::volume_snapshot`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_statuses: Option<Vec<VolumeSnapshotStatus>>,
    /// `volumeRequests` (types.go): the legacy hotplug requests virt-api writes with the
    /// `HotplugVolumes` gate (`crate::controller::vm::volume_requests`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_requests: Option<Box<Vec<VolumeRequest>>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One `status.volumeRequests` entry (`v1.VirtualMachineVolumeRequest`): an add or a remove.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_volume_options: Option<AddVolumeOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remove_volume_options: Option<RemoveVolumeOptions>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1.AddVolumeOptions`: the volume's name, its disk and its claim (`dryRun` kept raw).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AddVolumeOptions {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<super::vmi::Disk>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_source: Option<HotplugVolumeSource>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1.HotplugVolumeSource`: a `persistentVolumeClaim` or a `dataVolume`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HotplugVolumeSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<super::vmi::ClaimSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume: Option<super::vmi::ClaimSource>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `v1.RemoveVolumeOptions`: the volume's name (`dryRun` kept raw).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoveVolumeOptions {
    #[serde(default)]
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One `status.volumeSnapshotStatuses` entry (`v1.VolumeSnapshotStatus`, api core/v1
/// types.go:2286-2293): `enabled` is always written, `reason` only when set.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotStatus {
    pub name: String,
    #[serde(default)]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One `status.stateChangeRequests` entry (`v1.VirtualMachineStateChangeRequest`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateChangeRequest {
    /// `Start` or `Stop`.
    pub action: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<std::collections::BTreeMap<String, String>>,
    /// The VMI UID a Stop refers to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `status.startFailure` (`v1.VirtualMachineStartFailure`, types.go:2102-2106).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartFailure {
    #[serde(
        default,
        rename = "lastFailedVMIUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_failed_vmi_uid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_timestamp: Option<Time>,
    #[serde(default)]
    pub consecutive_fail_count: i64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Run strategies (types.go:1985-1995).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RunStrategy {
    Always,
    Halted,
    Manual,
    RerunOnFailure,
    Once,
    WaitAsReceiver,
}

impl RunStrategy {
    /// Parse the wire name; `None` for unknown values.
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "Always" => RunStrategy::Always,
            "Halted" => RunStrategy::Halted,
            "Manual" => RunStrategy::Manual,
            "RerunOnFailure" => RunStrategy::RerunOnFailure,
            "Once" => RunStrategy::Once,
            "WaitAsReceiver" => RunStrategy::WaitAsReceiver,
            _ => return None,
        })
    }

    /// The wire name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            RunStrategy::Always => "Always",
            RunStrategy::Halted => "Halted",
            RunStrategy::Manual => "Manual",
            RunStrategy::RerunOnFailure => "RerunOnFailure",
            RunStrategy::Once => "Once",
            RunStrategy::WaitAsReceiver => "WaitAsReceiver",
        }
    }
}

impl fmt::Display for RunStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why `spec.running`/`spec.runStrategy` could not be folded into one strategy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunStrategyError {
    /// Both fields set (types.go:1957-1970).
    #[error("running and runstrategy are mutually exclusive")]
    MutuallyExclusive,
    /// `runStrategy` has a value KubeVirt does not know.
    #[error("unknown runstrategy: {0}")]
    Unknown(String),
}

impl VirtualMachine {
    /// `VirtualMachine.RunStrategy()` (types.go:1957-1970): `running: true` → Always,
    /// `running: false` → Halted, only `runStrategy` → that value, neither → Halted; both →
    /// [`RunStrategyError::MutuallyExclusive`].
    pub(crate) fn run_strategy(&self) -> Result<RunStrategy, RunStrategyError> {
        match (self.spec.running, self.spec.run_strategy.as_deref()) {
            (Some(_), Some(_)) => Err(RunStrategyError::MutuallyExclusive),
            (Some(true), None) => Ok(RunStrategy::Always),
            (Some(false), None) | (None, None) => Ok(RunStrategy::Halted),
            (None, Some(s)) => {
                RunStrategy::parse(s).ok_or_else(|| RunStrategyError::Unknown(s.to_string()))
            }
        }
    }

    /// `spec.template.spec`, the VMI spec the VM starts from.
    pub(crate) fn template_spec(&self) -> Option<&VirtualMachineInstanceSpec> {
        self.spec.template.as_ref()?.spec.as_ref()
    }

    /// `spec.template.spec.volumes` (empty when unset).
    pub(crate) fn template_volumes(&self) -> &[super::vmi::Volume] {
        self.template_spec()
            .and_then(|s| s.volumes.as_deref())
            .unwrap_or(&[])
    }

    /// A VM condition by type.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        super::common::find_condition(
            self.status.as_ref().and_then(|s| s.conditions.as_ref()),
            type_,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::VirtualMachineInstance;

    /// Fails unless an informer's `Arc<K>` (the object and the two reference counts) fits the
    /// jemalloc size class of `class` bytes.
    fn assert_fits<K>(class: usize) {
        let bytes = size_of::<K>() + 2 * size_of::<usize>();
        assert!(bytes <= class, "{bytes} bytes, over {class}");
    }

    /// jemalloc (the product's allocator, src/main.rs) gives a block of 1,537-1,792 bytes a
    /// 1,792-byte slot (and one of 2,049-2,560 a 2,560-byte slot: a cached VM was once 8 bytes
    /// over 2 KiB and held 504 bytes it never used). A field added to the VM, its template or
    /// the VMI spec must keep it within 1,536 (box what is rare, as the VMI spec's probes,
    /// hugepages, reserved overhead, `maxGuest`, GPUs, host devices, inputs, TPM, I/O threads
    /// and node selector are; not `domain.resources`, which Go writes as `{}` on every VMI) or
    /// be worth the 256 bytes per VM.
    #[test]
    fn a_cached_vm_fits_1_5_kib() {
        assert_fits::<VirtualMachine>(1536);
    }

    /// The same for the VMI, in the same class.
    #[test]
    fn a_cached_vmi_fits_1_5_kib() {
        assert_fits::<VirtualMachineInstance>(1536);
    }

    /// A template's metadata as kube-apiserver serves it: Go writes `creationTimestamp: null`,
    /// and a template may carry fields no template needs.
    fn served_template_meta() -> serde_json::Value {
        serde_json::json!({
            "creationTimestamp": null,
            "name": "ignored-by-setup",
            "finalizers": ["example.com/keep"],
            "labels": {"kubevirt.io/size": "small", "app.kubernetes.io/name": "demo-vm"},
            "annotations": {"kubevirt.io/pci-topology-version": "v3"},
            "managedFields": [{"manager": "kubectl", "operation": "Update"}],
            "somethingNew": {"a": 1}
        })
    }

    #[test]
    fn template_meta_reads_and_writes_as_object_meta_does() {
        let served = served_template_meta();
        let as_meta: ObjectMeta = serde_json::from_value(served.clone()).unwrap();
        let ours: TemplateMeta = serde_json::from_value(served).unwrap();
        assert_eq!(ours.to_object_meta(), as_meta);
        assert_eq!(
            serde_json::to_string(&ours).unwrap(),
            serde_json::to_string(&as_meta).unwrap(),
            "the same fields, in the same order"
        );
        let labels = ours.maps.labels.as_ref().unwrap();
        assert_eq!(
            labels.get("kubevirt.io/size").map(String::as_str),
            Some("small")
        );
        let rest = ours.rest().unwrap();
        assert_eq!(
            (rest.labels.as_ref(), rest.annotations.as_ref()),
            (None, None)
        );
        assert_eq!(
            rest.finalizers.as_deref(),
            Some(&["example.com/keep".to_string()][..])
        );
        assert_eq!(rest.managed_fields.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn template_meta_boxes_nothing_for_labels_and_annotations_alone() {
        let ours: TemplateMeta = serde_json::from_value(serde_json::json!({
            "labels": {"a": "1"},
            "annotations": {}
        }))
        .unwrap();
        assert!(ours.rest().is_none());
        // An empty map stays a present, empty map, as in `ObjectMeta`.
        assert_eq!(ours.maps.annotations.as_ref().map(|a| a.len()), Some(0));
        assert_eq!(
            serde_json::to_value(&ours).unwrap(),
            serde_json::json!({"annotations": {}, "labels": {"a": "1"}})
        );
        assert_eq!(
            TemplateMeta::from(ObjectMeta::default()),
            TemplateMeta::default()
        );
    }

    #[test]
    fn a_bad_template_meta_is_refused_as_object_meta_refuses_it() {
        let err = serde_json::from_value::<TemplateMeta>(serde_json::json!({"labels": {"a": 1}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid type"), "{err}");
    }
}
