//! The input of one VM sync: everything `execute(key)` reads from informer caches and the
//! expectation stores (pkg/virt-controller/watch/vm/vm.go:357-458), frozen at one instant.

use crate::api::{DataVolume, VirtualMachine, VirtualMachineInstance};
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::ControllerRevision;
use std::collections::BTreeMap;
use std::sync::Arc;

/// One entry of a `ControllerExpectations` store for the VM's key (pkg/controller/expectations.go).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpectationCounts {
    /// Outstanding creations (`add`); may be negative.
    pub adds: i64,
    /// Outstanding deletions (`del`); may be negative.
    pub dels: i64,
    /// The entry is older than `ExpectationsTimeout` (5 minutes, expectations.go:48) at snapshot
    /// time, so `SatisfiedExpectations` treats it as satisfied.
    pub expired: bool,
}

impl ExpectationCounts {
    /// A fresh entry (`SetExpectations(key, adds, dels)`): not expired.
    pub(crate) fn pending(adds: i64, dels: i64) -> Self {
        ExpectationCounts {
            adds,
            dels,
            expired: false,
        }
    }

    /// `SatisfiedExpectations` for an existing entry (expectations.go:120-145): fulfilled
    /// (`adds <= 0 && dels <= 0`) or expired.
    pub(crate) fn satisfied(&self) -> bool {
        self.expired || (self.adds <= 0 && self.dels <= 0)
    }
}

/// The VM's entries in the controller's two expectation stores (vm.go:167-168). `None` = no entry
/// for the key (satisfied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExpectationsView {
    /// VMI expectations (`c.expectations`, a `UIDTrackingControllerExpectations`).
    pub vmi: Option<ExpectationCounts>,
    /// DataVolume expectations (`c.dataVolumeExpectations`).
    pub data_volumes: Option<ExpectationCounts>,
}

impl ExpectationsView {
    /// `satisfiedExpectations(key)` (vm.go:330-332): both stores satisfied.
    pub(crate) fn satisfied(&self) -> bool {
        self.vmi.is_none_or(|e| e.satisfied()) && self.data_volumes.is_none_or(|e| e.satisfied())
    }

    /// `isVMIStartExpected` (vm.go:1181-1196): a VMI entry exists with `adds > 0` (expiry is not
    /// consulted).
    pub(crate) fn vmi_start_expected(&self) -> bool {
        self.vmi.is_some_and(|e| e.adds > 0)
    }

    /// `isVMIStopExpected` (vm.go:1198-1213): a VMI entry exists with `dels > 0`.
    pub(crate) fn vmi_stop_expected(&self) -> bool {
        self.vmi.is_some_and(|e| e.dels > 0)
    }
}

/// A PersistentVolumeClaim as far as the VM controller looks at it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PvcInfo {
    /// `status.phase`: `Pending`, `Bound`, `Lost`; `None` when unset.
    pub phase: Option<String>,
    /// `spec.storageClassName`; `None` when unset (the volume snapshot status reads it).
    pub storage_class_name: Option<String>,
    /// Whether `metadata.annotations` has any entry (a memory dump's annotation patch adds the
    /// whole map when not, memorydump.go:292-299).
    pub has_annotations: bool,
    /// The `kubevirt.io/memory-dump` annotation (a memory dump's file name).
    pub memory_dump_annotation: Option<String>,
}

impl PvcInfo {
    /// A PVC with the given phase.
    #[cfg(test)]
    pub(crate) fn with_phase(phase: &str) -> Self {
        PvcInfo {
            phase: Some(phase.to_string()),
            ..PvcInfo::default()
        }
    }

    /// What the VM controller reads of a cached claim.
    pub(crate) fn of(pvc: &k8s_openapi::api::core::v1::PersistentVolumeClaim) -> Self {
        PvcInfo {
            phase: pvc.status.as_ref().and_then(|s| s.phase.clone()),
            storage_class_name: pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()),
            has_annotations: pvc
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| !a.is_empty()),
            memory_dump_annotation: pvc
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::api::annotations::MEMORY_DUMP).cloned()),
        }
    }

    /// `status.phase == Bound`.
    pub(crate) fn is_bound(&self) -> bool {
        self.phase.as_deref() == Some("Bound")
    }
}

/// Cluster configuration the VM controller consults (KubeVirt CR `spec.configuration` and
/// virt-controller flags). Defaults are KubeVirt v1.9's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmControllerConfig {
    /// `network.defaultNetworkInterface` (pkg/virt-config/virt-config.go:73, default `bridge`):
    /// `bridge`, `masquerade` or `slirp`; any other value adds the pod network but no
    /// interface, as KubeVirt's switch does (pkg/network/vmispec/defaults.go:33-57).
    pub default_network_interface: String,
    /// `network.permitBridgeInterfaceOnPodNetwork` (virt-config.go:81, default true).
    pub permit_bridge_interface_on_pod_network: bool,
    /// `--additional-launcher-labels-sync` (keys or `prefix*` patterns).
    pub additional_launcher_labels_sync: Vec<String>,
    /// `--additional-launcher-annotations-sync` (keys or `prefix*` patterns).
    pub additional_launcher_annotations_sync: Vec<String>,
    /// `vmRolloutStrategy == LiveUpdate` (virt-config.go:514-517; nil counts as LiveUpdate, the
    /// default since v1.9 sets `LiveUpdate`). Changes which template fields need a restart.
    pub rollout_strategy_live_update: bool,
    /// `developerConfiguration.cpuAllocationRatio` (virt-config.go, default 10): a hotplugged
    /// vCPU adds `1000 / ratio` millicores to the VMI's CPU request and limit (vm.go:581-582).
    pub cpu_allocation_ratio: u32,
    /// Declarative volume hotplug runs (vm.go:3568-3575): the Beta gate
    /// `DeclarativeHotplugVolumes` on (the default) and the deprecated `HotplugVolumes` off.
    pub declarative_hotplug_volumes: bool,
    /// The rules of the KubeVirt release the controller reproduces (`run-controller
    /// --kubevirt-version`, default v1.9.0).
    pub(crate) rules: crate::kubevirt_version::ControllerRules,
    /// `instancetype.referencePolicy` (virt-config.go:536-543): `reference` stashes, `expand`
    /// and `expandAll` write the instancetype and preference into the VM
    /// (instancetype/controller/vm/controller.go:124-134).
    pub reference_policy: crate::config::ReferencePolicy,
    /// What the expansion's `SetDefaultVirtualMachineInstanceSpec` reads: the admission
    /// settings and the machine types, `cpuRequest`, `evictionStrategy`.
    pub(crate) expand_defaults: (
        crate::api::defaults::AdmissionSettings,
        crate::api::defaults::SpecDefaultSettings,
    ),
}

impl Default for VmControllerConfig {
    fn default() -> Self {
        VmControllerConfig {
            default_network_interface: "bridge".to_string(),
            permit_bridge_interface_on_pod_network: true,
            additional_launcher_labels_sync: Vec::new(),
            additional_launcher_annotations_sync: Vec::new(),
            rollout_strategy_live_update: true,
            cpu_allocation_ratio: crate::config::DEFAULT_CPU_ALLOCATION_RATIO,
            declarative_hotplug_volumes: true,
            rules: Default::default(),
            reference_policy: Default::default(),
            expand_defaults: Default::default(),
        }
    }
}

/// Everything one sync of one VM reads.
///
/// The executor builds it from its caches right after popping the key; `decide` never reads
/// anything else (no clock, no randomness, no API server).
#[derive(Debug, Clone, PartialEq)]
pub struct VmSnapshot {
    /// The VM from the VM cache, shared with it (`decide` works on copies of it).
    pub vm: Arc<VirtualMachine>,
    /// The VMI in the VMI cache with the VM's namespace **and name**, whatever its owner
    /// references say. `decide` claims it itself (`ClaimVirtualMachineInstanceByName`,
    /// pkg/controller/controller_ref_manager.go:381-411): owned by this VM → used; orphan →
    /// adopted (an `AdoptVmi` action) then used; owned by another controller → ignored.
    pub vmi: Option<Arc<VirtualMachineInstance>>,
    /// DataVolumes from the DataVolume cache in the VM's namespace whose names appear in
    /// `spec.dataVolumeTemplates` or in a template volume's `dataVolume.name` (both are read).
    pub data_volumes: Vec<DataVolume>,
    /// PersistentVolumeClaims in the VM's namespace by name, for the names referenced by template
    /// volumes (`persistentVolumeClaim.claimName`, `dataVolume.name`) and by
    /// `dataVolumeTemplates`. Absent = not in the PVC cache.
    pub pvcs: BTreeMap<String, PvcInfo>,
    /// ControllerRevisions of the VM's namespace from the ControllerRevision cache: those whose
    /// first `VirtualMachine` owner reference has the VM's UID (the `vm` index,
    /// pkg/controller/virtinformers.go:1175-1189), plus the one named by the VMI's
    /// `status.virtualMachineRevisionName` if any (KubeVirt GETs that one live). Others are ignored.
    pub revisions: Vec<Arc<ControllerRevision>>,
    /// The instancetypes and preferences the VM's matchers name, from the four instancetype
    /// informer stores (absent = not in the store).
    pub instancetypes: crate::instancetype::Objects,
    /// StorageClasses, StorageProfiles and VolumeSnapshotClasses, for
    /// `status.volumeSnapshotStatuses` ([`super::volume_snapshot`]). `None` = not read (the
    /// inspector and shadow mode): the sync leaves that field as it is.
    pub storage: Option<Arc<super::volume_snapshot::StorageView>>,
    /// The VM's backend-storage claim as the snapshot controller lists it
    /// ([`super::volume_snapshot::find_backend_claim`]): `None` when the VM needs no backend
    /// storage or no claim is labelled for it. Its storage class is in [`Self::pvcs`].
    pub backend_claim: Option<Result<String, String>>,
    /// The VM's entries in the expectation stores.
    pub expectations: ExpectationsView,
    /// "Now" for every timestamp the sync writes (conditions, `startFailure.retryAfterTimestamp`)
    /// and for the backoff time left.
    pub now: DateTime<Utc>,
    /// A uniform random number in `[0, 1)`, used as `rand.Intn(delay/2+1)` in
    /// `calculateStartBackoffTime` (vm.go:1477-1504) when a new start failure is recorded:
    /// jitter seconds = `floor(backoff_jitter × (delay/2 + 1))`.
    pub backoff_jitter: f64,
    /// Cluster configuration.
    pub config: VmControllerConfig,
}

impl VmSnapshot {
    /// A snapshot with no VMI, DataVolumes, PVCs or revisions, no expectations, jitter 0 and the
    /// default configuration.
    pub(crate) fn new(vm: impl Into<Arc<VirtualMachine>>, now: DateTime<Utc>) -> Self {
        VmSnapshot {
            vm: vm.into(),
            vmi: None,
            data_volumes: Vec::new(),
            pvcs: BTreeMap::new(),
            revisions: Vec::new(),
            instancetypes: Default::default(),
            storage: None,
            backend_claim: None,
            expectations: ExpectationsView::default(),
            now,
            backoff_jitter: 0.0,
            config: VmControllerConfig::default(),
        }
    }

    /// The controller key `namespace/name` (`controller.KeyFunc`; just `name` without namespace).
    pub(crate) fn key(&self) -> String {
        crate::api::key::meta_key(&self.vm.metadata)
    }
}
