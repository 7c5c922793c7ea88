//! The input of the VMI decision: everything `execute` (vmi.go:297-368) reads from the informer
//! caches and expectation stores for one VMI key, frozen at one instant.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::api::{Condition, Time, VirtualMachineInstance};
use k8s_openapi::api::core::v1::Pod;

/// Why the launcher pod could not be rendered (the caller ran
/// `crate::launcher::pod::render_launch_manifest` and it failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderFailure {
    /// The render error's text (without the `failed to render launch manifest: ` prefix).
    pub message: String,
    /// True when the error is KubeVirt's `PvcNotFoundError`: a volume's PVC is absent. That
    /// becomes an *informal* sync error (no requeue) with reason `FailedPvcNotFound`, a Warning
    /// event, and a `PodScheduled=False/Unschedulable` condition (lifecycle.go:158-161, 361-368).
    pub pvc_not_found: bool,
}

impl From<String> for RenderFailure {
    fn from(message: String) -> Self {
        RenderFailure {
            message,
            pvc_not_found: false,
        }
    }
}

impl From<&str> for RenderFailure {
    fn from(message: &str) -> Self {
        RenderFailure::from(message.to_string())
    }
}

/// State of the expectation stores for this VMI's key (facts §2;
/// `pkg/controller/expectations.go`). The executor computes the booleans with
/// `SatisfiedExpectations` (which already treats entries older than 5 minutes as satisfied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectationsState {
    /// Pod expectations satisfied (no pending pod creations/deletions).
    pub pods_satisfied: bool,
    /// Pod creations still expected (the `add` counter), for explanations only.
    pub pending_pod_creations: i64,
    /// Pod deletions still expected (the `del` counter), for explanations only.
    pub pending_pod_deletions: i64,
    /// VMI self-update expectation satisfied (the controller's own last `Update` of this VMI has
    /// been observed by the informer).
    pub vmi_satisfied: bool,
    /// Backend-storage PVC expectations satisfied (vmi.go:96, lifecycle.go:130-133).
    pub pvcs_satisfied: bool,
}

impl Default for ExpectationsState {
    fn default() -> Self {
        ExpectationsState {
            pods_satisfied: true,
            pending_pod_creations: 0,
            pending_pod_deletions: 0,
            vmi_satisfied: true,
            pvcs_satisfied: true,
        }
    }
}

impl ExpectationsState {
    /// `needsSync` of vmi.go:332-337: all three stores satisfied.
    pub(crate) fn all_satisfied(&self) -> bool {
        self.pods_satisfied && self.vmi_satisfied && self.pvcs_satisfied
    }
}

/// What the caller found out about the VMI's DataVolumes and PersistentVolumeClaims
/// ([`super::storage::storage_state`]: `areDataVolumesReady`, datavolumes.go:116-141;
/// `HasFailedDataVolumes`; `HasWFFCDataVolumes`; `aggregateDataVolumesConditions`).
#[derive(Debug, Clone, PartialEq)]
pub struct StorageState {
    /// Every non-hotplug DataVolume/PVC volume is ready to attach or waits for its first
    /// consumer: pod creation waits otherwise (lifecycle.go:110-114, no error).
    pub volumes_ready: bool,
    /// A non-hotplug volume's DataVolume is in phase `WaitForFirstConsumer` (the second result
    /// of `areDataVolumesReady`, datavolumes.go:116-141): the pod `sync` creates is the
    /// temporary one (lifecycle.go:152-154), and temporary pods are not cleaned up
    /// (lifecycle.go:188-193).
    pub wffc: bool,
    /// A DataVolume of the VMI (hotplugged ones too) is in phase `WaitForFirstConsumer` and none
    /// failed (`HasWFFCDataVolumes`, lifecycle.go:262): a Pending VMI gets the `Provisioning`
    /// condition (lifecycle.go:337-357).
    pub has_wffc_data_volume: bool,
    /// A DataVolume of the VMI is in phase `Failed`: a Pending VMI without pod goes `Failed`
    /// (lifecycle.go:324-325).
    pub has_failed_data_volume: bool,
    /// Name of a volume's PVC that does not exist. Informal sync error `FailedPvcNotFound`
    /// `PVC <ns>/<name> does not exist, waiting for it to appear` plus a Normal event
    /// (datavolumes.go:120-126).
    pub missing_pvc: Option<String>,
    /// The `DataVolumesReady` condition `updateStatus` sets (lifecycle.go:306,
    /// datavolumes.go:143-178); `None` when the VMI uses no DataVolume.
    pub data_volumes_ready: Option<Condition>,
    /// `persistentVolumeClaimInfo` of each volume claim found in the cache, by claim name
    /// ([`super::storage::claim_info`]), for `status.volumeStatus`.
    pub claims: BTreeMap<String, serde_json::Value>,
    /// What hotplug reads of each volume claim found in the cache, by claim name
    /// ([`super::storage::claim_facts`]).
    pub claim_facts: BTreeMap<String, ClaimFacts>,
}

/// A claim as the hotplug code reads it (vmi/volume-hotplug.go, vmi/storage.go:373-385).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimFacts {
    /// `metadata.uid`.
    pub uid: String,
    /// `spec.volumeMode: Block`.
    pub block: bool,
    /// `status.phase` (`Pending`, `Bound`, `Lost`).
    pub phase: String,
    /// `IsSucceededOrPendingPopulation`: no controlling DataVolume, or one `Succeeded` /
    /// `PendingPopulation` (`VolumeReadyToAttachToNode`, pvc.go:223-251).
    pub populated: bool,
    /// Not populated, and the controlling DataVolume is `WaitForFirstConsumer`
    /// (`IsWaitForFirstConsumerBeforePopulating`, pvc.go:238-246): a hotplugged volume gets a
    /// trigger pod (volume-hotplug.go:192-200).
    pub wffc: bool,
}

impl Default for StorageState {
    fn default() -> Self {
        StorageState {
            volumes_ready: true,
            wffc: false,
            has_wffc_data_volume: false,
            has_failed_data_volume: false,
            missing_pvc: None,
            data_volumes_ready: None,
            claims: BTreeMap::new(),
            claim_facts: BTreeMap::new(),
        }
    }
}

/// Everything the VMI controller's `execute(key)` reads, for one VMI.
///
/// Build it with [`VmiSnapshot::new`] and set the fields that differ from the defaults.
#[derive(Debug, Clone)]
pub struct VmiSnapshot {
    /// The VMI as in the informer cache (a VMI absent from the cache needs no decision: the
    /// executor deletes the key's pod and VMI expectations, vmi.go:305-311). Shared with the
    /// cache, never copied: the decision reads it and writes a new object.
    pub vmi: Arc<VirtualMachineInstance>,
    /// Pods from the VMI's namespace (at least all pods controlled by the VMI), shared with the
    /// cache. The decision keeps only those whose controller owner reference has the VMI's UID,
    /// and picks the current pod itself ([`super::podutil::current_vmi_pod`]).
    pub pods: Vec<Arc<Pod>>,
    /// UID of the VirtualMachine found in the VM cache under the name of the VMI's controller
    /// reference; `None` when no such VM is cached. `hasOwnerVM` (lifecycle.go:861-872) is true
    /// when the VMI's controller reference has kind `VirtualMachine` and this UID equals the
    /// reference's UID. Used to strip `kubevirt.io/virtualMachineControllerFinalize` from final
    /// VMIs whose VM is gone (lifecycle.go:475-478).
    pub owner_vm_uid: Option<String>,
    /// Expectation stores for this key.
    pub expectations: ExpectationsState,
    /// DataVolume/PVC facts.
    pub storage: StorageState,
    /// The launcher pod rendered for this VMI, needed only when the decision creates a pod
    /// (see [`super::needs_rendered_pod`]). Rendering stays outside so that the decision is
    /// pure: `None` = not rendered; `Some(Err)` = rendering failed.
    pub rendered_pod: Option<Result<Arc<Pod>, RenderFailure>>,
    /// The configured virt-launcher image (`templateService.GetLauncherImage()`); a pod whose
    /// compute image differs gets the VMI label `kubevirt.io/outdatedLauncherImage: ""`
    /// (lifecycle.go:846-858). `None`: unknown, the label is left as it is.
    pub launcher_image: Option<String>,
    /// Feature gate `VmiMemoryOverheadReport` (Beta, on by default): copy the pod annotation
    /// `kubevirt.io/memory-overhead-bytes` to `status.memory.memoryOverhead`
    /// (lifecycle.go:313-315, 1165-1183).
    pub memory_overhead_report: bool,
    /// Stand in for virt-api's mutating webhook, which adds
    /// `kubevirt.io/foregroundDeleteVirtualMachine` to every new VMI
    /// (pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator.go:127-128): when true,
    /// the decision adds it to non-final VMIs that are not being deleted. KubeVirt's controller
    /// itself only migrates the legacy un-prefixed finalizer (lifecycle.go:268-276); set this to
    /// false to reproduce the controller alone (as KubeVirt's unit tests do).
    pub ensure_vmi_finalizer: bool,
    /// The KubeVirt CR's `kubevirt.io/skip-backup-hooks` annotation, for the sync of a running
    /// pod's Velero hooks (lifecycle.go:804; [`crate::config::ClusterSettings::skip_backup_hooks`]).
    pub cluster_skip_backup_hooks: Option<String>,
    /// The KubeVirt CR's network binding plugins, for the `kubevirt.io/network-info` annotation
    /// of a ready pod (generator.go:116-165; [`crate::config::ClusterSettings::network_bindings`]).
    pub network_bindings: std::collections::BTreeMap<String, crate::config::NetworkBindingPlugin>,
    /// The controllers' rules of the KubeVirt release reproduced (`--kubevirt-version`).
    pub(crate) rules: crate::kubevirt_version::ControllerRules,
    /// The KubeVirt CR's `additionalGuestMemoryOverheadRatio`, copied to a VMI's
    /// `kubevirt.io/memory-hotplug-overhead-ratio` label when its memory hotplug starts
    /// (lifecycle.go:1185-1195; [`crate::config::ClusterSettings::additional_guest_memory_overhead_ratio`]).
    pub additional_guest_memory_overhead_ratio: Option<String>,
    /// The KubeVirt CR's `supportContainerResources`, for the hotplug attachment pod's
    /// container (renderresources.go:627-662; [`crate::config::ClusterSettings::support_container_resources`]).
    pub support_container_resources: Vec<crate::config::SupportContainerResources>,
    /// The KubeVirt CR's `selinuxLauncherType`, the SELinux type of the hotplug attachment
    /// pod's container (template.go:1122-1126; [`crate::config::ClusterSettings::selinux_launcher_type`]).
    pub selinux_launcher_type: Option<String>,
    /// The backend-storage claim and what a new one would be ([`super::backend_storage`]).
    pub backend_storage: super::backend_storage::BackendStorageState,
    /// What the topology hinter reads (the CR's minimum TSC frequency, the node cache), for the
    /// `status.topologyHints` of a Pending VMI that needs a TSC frequency (lifecycle.go:326-334,
    /// 615-626). `None`: not gathered (the inspector and the shadow read no nodes): the
    /// decision then predicts no hint and says so.
    pub topology: Option<super::topology::TopologyState>,
    /// The instant of the decision; every timestamp the decision writes uses it (whole seconds).
    pub now: Time,
}

impl VmiSnapshot {
    /// A snapshot with no pods, no owner VM in the cache, satisfied expectations, ready storage,
    /// no rendered pod, unknown launcher image, memory-overhead report on, the virt-api
    /// finalizer stand-in on and the default release's controller rules.
    pub(crate) fn new(vmi: impl Into<Arc<VirtualMachineInstance>>, now: Time) -> Self {
        VmiSnapshot {
            vmi: vmi.into(),
            pods: Vec::new(),
            owner_vm_uid: None,
            expectations: ExpectationsState::default(),
            storage: StorageState::default(),
            rendered_pod: None,
            launcher_image: None,
            memory_overhead_report: true,
            ensure_vmi_finalizer: true,
            cluster_skip_backup_hooks: None,
            network_bindings: Default::default(),
            rules: Default::default(),
            additional_guest_memory_overhead_ratio: None,
            support_container_resources: Vec::new(),
            selinux_launcher_type: None,
            backend_storage: Default::default(),
            topology: None,
            now: Time::from_datetime(now.0),
        }
    }

    /// `namespace/name` of the VMI (`VirtualMachineInstanceKey`, controller.go:182-184).
    pub(crate) fn key(&self) -> String {
        crate::api::key::meta_key(&self.vmi.metadata)
    }
}
