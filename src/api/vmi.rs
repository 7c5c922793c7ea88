//! `kubevirt.io/v1` VirtualMachineInstance, with the fields the controller, the launcher renderer
//! and the inspector read. Everything else is kept verbatim in `extra` maps.
//! Fields kept as raw JSON are `Option<Box<Value>>`: mostly absent, and an inline `Value` is
//! 80 bytes in every cached copy (docs/performance.md "Bytes per cached VM").
//!
//! Schema: KubeVirt `staging/src/kubevirt.io/api/core/v1/types.go` and `schema.go` (v1.9.0).

use super::common::{Condition, Extra, JsonList, SmallMap, Time};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A VirtualMachineInstance: one running (or about to run) guest.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstance {
    /// Always `kubevirt.io/v1` when written by us; kept as read otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `VirtualMachineInstance`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: super::Meta,
    pub spec: VirtualMachineInstanceSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<VirtualMachineInstanceStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

namespaced_resource!(
    VirtualMachineInstance,
    kind = "VirtualMachineInstance",
    group = super::GROUP,
    version = super::VERSION,
    plural = "virtualmachineinstances"
);

/// `spec` of a VMI (`v1.VirtualMachineInstanceSpec`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceSpec {
    pub domain: DomainSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<Volume>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub networks: Option<Vec<Network>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<Box<BTreeMap<String, String>>>,
    /// Seconds; KubeVirt defaults it to 30 when absent (`v1.DefaultGracePeriodSeconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub liveness_probe: Option<Box<Probe>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness_probe: Option<Box<Probe>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subdomain: Option<String>,
    /// `amd64`, `arm64`, `s390x`; empty means the cluster's default architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    /// `Paused` to start the guest paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_strategy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_strategy: Option<String>,
    /// Kept as raw JSON (core/v1 Affinity); copied to the pod unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Box<serde_json::Value>>,
    /// Kept as raw JSON (core/v1 Tolerations); copied to the pod unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `spec.domain` (`v1.DomainSpec`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Firmware>,
    /// Boxed: rare, and 40 bytes inline in every spec, which would put a cached VM (two specs'
    /// worth of fields) into jemalloc's next size class (`a_cached_vm_fits_2_kib`, vm.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch_security: Option<Box<LaunchSecurity>>,
    /// `shared` or `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_threads_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_threads: Option<Box<IoThreads>>,
    /// Required by the schema; absent in some manifests (KubeVirt defaults it to `{}`).
    #[serde(default)]
    pub devices: Devices,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `domain.resources` (`v1.ResourceRequirements`). Quantities stay as text; parse them with
/// [`crate::api::quantity`]. The lists are [`SmallMap`]s: a spec that sets either (a memory
/// request, CPU limits for dedicated CPUs) has one or two entries, for which a `BTreeMap` takes a
/// 544-byte node, twice per VM (its template and its VMI).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRequirements {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests: Option<SmallMap<Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<SmallMap<Quantity>>,
    /// Do not add the launcher overhead to the memory request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overcommit_guest_overhead: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `domain.cpu` (`v1.CPU`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedicated_cpu_placement: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolate_emulator_thread: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `domain.memory` (`v1.Memory`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// Memory visible to the guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Quantity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_guest: Option<Box<Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hugepages: Option<Box<Hugepages>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_overhead: Option<Box<ReservedOverhead>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `memory.hugepages`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hugepages {
    /// `2Mi` or `1Gi`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_size: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `memory.reservedOverhead` (`v1.ReservedOverhead`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservedOverhead {
    /// Added verbatim to the launcher overhead (hypervisorbackend.go:161-163).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_overhead: Option<Quantity>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `domain.firmware` (`v1.Firmware`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Firmware {
    /// SMBIOS UUID seen by the guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `domain.launchSecurity` (`v1.LaunchSecurity`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LaunchSecurity {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sev: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snp: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tdx: Option<Box<serde_json::Value>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `domain.ioThreads`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IoThreads {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supplemental_pool_thread_count: Option<u32>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `domain.devices` (`v1.Devices`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Devices {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disks: Option<Vec<Disk>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interfaces: Option<Vec<Interface>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<Box<Vec<NamedDevice>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_devices: Option<Box<Vec<NamedDevice>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Box<Vec<serde_json::Value>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpm: Option<Box<Tpm>>,
    /// nil means "attach a graphics device".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_graphics_device: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_pod_interface: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_serial_console: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_input_device: Option<bool>,
    #[serde(
        default,
        rename = "autoattachVSOCK",
        skip_serializing_if = "Option::is_none"
    )]
    pub autoattach_vsock: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_serial_console: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_hotplug: Option<bool>,
    /// The downwardMetrics *device* (not the volume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downward_metrics: Option<Box<serde_json::Value>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A disk (`v1.Disk`); the target (`disk`, `cdrom`, `lun`) is kept raw.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A network interface (`v1.Interface`); binding methods (`masquerade`, `bridge`, `sriov`,
/// `passt`, `binding`...) are kept raw.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    pub name: String,
    /// NIC model; `""`/absent means virtio.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sriov: Option<Box<serde_json::Value>>,
    /// Deprecated `passt` binding method (not counted by the v1.9 overhead formula).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passt: Option<Box<serde_json::Value>>,
    /// Core passt binding (`passtBinding: {}`): +250Mi network overhead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passt_binding: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masquerade: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<Box<serde_json::Value>>,
    /// Network binding plugin (`{"name": "passt"}` etc.).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<Box<serde_json::Value>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A GPU or host device (`v1.GPU`, `v1.HostDevice`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamedDevice {
    pub name: String,
    /// Device-plugin resource name, e.g. `nvidia.com/GP102GL_Tesla_P40`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `devices.tpm`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tpm {
    /// nil means enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A volume (`v1.Volume`); the sources the controller looks at are typed, the rest raw.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_disk: Option<ContainerDiskSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<ClaimSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume: Option<ClaimSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downward_metrics: Option<Box<serde_json::Value>>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Volume {}

/// `containerDisk` volume source.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerDiskSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `persistentVolumeClaim` (`claimName`) or `dataVolume` (`name`) volume source.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSource {
    /// Set for `persistentVolumeClaim`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Set for `dataVolume`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A network (`v1.Network`): `pod: {}` or `multus: {networkName}`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<Box<serde_json::Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multus: Option<Box<serde_json::Value>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A liveness/readiness probe (`v1.Probe`); handlers kept raw, only their presence matters.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Probe {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<Box<serde_json::Value>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// VMI phases (`v1.VirtualMachineInstancePhase`, types.go).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, Default,
)]
pub enum Phase {
    /// `""`: not yet processed.
    #[default]
    #[serde(rename = "")]
    Unset,
    Pending,
    Scheduling,
    Scheduled,
    Running,
    Succeeded,
    Failed,
    WaitingForSync,
    Unknown,
}

impl Phase {
    /// Succeeded or Failed (`IsFinal`).
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }

    /// The wire name (`""` for [`Phase::Unset`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Unset => "",
            Phase::Pending => "Pending",
            Phase::Scheduling => "Scheduling",
            Phase::Scheduled => "Scheduled",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::WaitingForSync => "WaitingForSync",
            Phase::Unknown => "Unknown",
        }
    }
}

/// One entry of `status.phaseTransitionTimestamps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseTransitionTimestamp {
    pub phase: Phase,
    pub phase_transition_timestamp: Time,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `status.memory` (`v1.MemoryStatus`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStatus {
    /// Launcher overhead in bytes, from the pod annotation `kubevirt.io/memory-overhead-bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_overhead: Option<Quantity>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `status` of a VMI (`v1.VirtualMachineInstanceStatus`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_transition_timestamps: Option<Vec<PhaseTransitionTimestamp>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Pod UID → node name: usually one pair.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_pods: Option<SmallMap<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos_class: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_container_image_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtual_machine_revision_name: Option<String>,
    /// UID the guest runs as; 107 means non-root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_user: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interfaces: Option<JsonList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_status: Option<JsonList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_state: Option<Box<serde_json::Value>>,
    /// `Unix` when the launcher pod announced unix-socket migrations (annotation
    /// `kubevirt.io/migrationTransportUnix`); set by the VMI controller at Scheduled
    /// (lifecycle.go:432-434).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_transport: Option<String>,
    /// Node the VMI is being evacuated from; non-empty means "marked for eviction"
    /// (`IsMarkedForEviction`, types.go:533-535).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evacuation_node_name: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl VirtualMachineInstance {
    /// A new VMI (`apiVersion: kubevirt.io/v1`, `kind: VirtualMachineInstance`, no status), as the
    /// VM controller creates one from a template.
    pub(crate) fn new(metadata: ObjectMeta, spec: VirtualMachineInstanceSpec) -> Self {
        let metadata = metadata.into();
        VirtualMachineInstance {
            api_version: Some(super::API_VERSION.into()),
            kind: Some("VirtualMachineInstance".into()),
            metadata,
            spec,
            status: None,
            extra: Default::default(),
        }
    }

    /// The phase, `Unset` when there is no status.
    pub fn phase(&self) -> Phase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or_default()
    }

    /// True when the VMI is Succeeded or Failed.
    pub fn is_final(&self) -> bool {
        self.phase().is_final()
    }

    /// A VMI condition by type.
    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        super::common::find_condition(
            self.status.as_ref().and_then(|s| s.conditions.as_ref()),
            type_,
        )
    }

    /// True when `metadata.deletionTimestamp` is set.
    pub fn is_deleting(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(v: serde_json::Value) -> Result<VirtualMachineInstanceStatus, serde_json::Error> {
        serde_json::from_value(v)
    }

    #[test]
    fn active_pods_round_trip_as_a_json_map_in_key_order() {
        let st = status(json!({"activePods": {"uid-b": "node-2", "uid-a": "node-1"}})).unwrap();
        let pods = st.active_pods.as_ref().unwrap();
        assert_eq!(pods.get("uid-a").map(String::as_str), Some("node-1"));
        assert_eq!(pods.get("uid-b").map(String::as_str), Some("node-2"));
        // Written as a map, keys sorted (as Go's encoding/json writes a map).
        let text = serde_json::to_string(&st).unwrap();
        assert_eq!(
            text,
            r#"{"activePods":{"uid-a":"node-1","uid-b":"node-2"}}"#
        );
        // The empty map stays a map, and an absent one absent.
        let empty = status(json!({"activePods": {}})).unwrap();
        assert_eq!(
            serde_json::to_value(&empty).unwrap(),
            json!({"activePods": {}})
        );
        assert_eq!(
            serde_json::to_value(status(json!({})).unwrap()).unwrap(),
            json!({})
        );
    }

    #[test]
    fn active_pods_keep_one_slot_per_pod_once_cached() {
        // The informer caches a clone of what it decoded (`cache_copy`), so the list holds
        // exactly its pairs: 48 bytes per pod, where a `BTreeMap` allocated an eleven-slot node.
        let st = status(json!({"activePods": {"uid-a": "node-1"}})).unwrap();
        let cached = st.clone().active_pods.unwrap().into_pairs();
        assert_eq!((cached.len(), cached.capacity()), (1, 1));
    }

    #[test]
    fn active_pods_are_read_as_a_map_and_nothing_else() {
        let err = status(json!({"activePods": "uid-a"})).unwrap_err();
        assert!(
            err.to_string()
                .contains("invalid type: string \"uid-a\", expected a map of string keys"),
            "{err}"
        );
        // A list of pairs is not a map.
        assert!(status(json!({"activePods": [["uid-a", "node-1"]]})).is_err());
        // A later duplicate wins, as it did in a `BTreeMap`; null is absent.
        let dup = r#"{"activePods": {"uid-a": "node-1", "uid-a": "node-2"}}"#;
        let st: VirtualMachineInstanceStatus = serde_json::from_str(dup).unwrap();
        assert_eq!(st.active_pods.unwrap().get("uid-a").unwrap(), "node-2");
        assert_eq!(
            status(json!({"activePods": null})).unwrap().active_pods,
            None
        );
    }
}
