//! The strings the VM controller writes: sync-error reasons (the `reason` of the VM's `Failure`
//! condition), event reasons, condition types and message formats, spelled as KubeVirt v1.9 does.

/// Sync-error reasons (pkg/virt-controller/watch/vm/vm.go:119-130).
pub(crate) mod sync {
    /// `failedCreateReason`: VMI/DataVolume creation, run-strategy errors.
    pub(crate) const FAILED_CREATE: &str = "FailedCreate";
    /// `vmiFailedDeleteReason`.
    pub(crate) const FAILED_DELETE: &str = "FailedDelete";
    /// `hotplugVolumeErrorReason`.
    pub(crate) const HOTPLUG_VOLUME_ERROR: &str = "HotPlugVolumeError";
    /// `hotplugCPUErrorReason`.
    pub(crate) const HOTPLUG_CPU_ERROR: &str = "HotPlugCPUError";
    /// `failedUpdateErrorReason`: the final VM `Update` of `sync` failed.
    pub(crate) const FAILED_UPDATE_ERROR: &str = "FailedUpdateError";
    /// `affinityChangeErrorReason`.
    pub(crate) const AFFINITY_CHANGE_ERROR: &str = "AffinityChangeError";
    /// `hotplugMemoryErrorReason`.
    pub(crate) const HOTPLUG_MEMORY_ERROR: &str = "HotPlugMemoryError";
    /// `volumesUpdateErrorReason`.
    pub(crate) const VOLUMES_UPDATE_ERROR: &str = "VolumesUpdateError";
    /// `tolerationsChangeErrorReason`.
    pub(crate) const TOLERATIONS_CHANGE_ERROR: &str = "TolerationsChangeError";
    /// `annotationsLabelsChangeErrorReason`.
    pub(crate) const ANNOTATIONS_LABELS_CHANGE_ERROR: &str = "AnnotationsLabelsChangeError";
    /// `firmwareUUIDErrorReason` (pkg/virt-controller/watch/vm/firmware.go:39).
    pub(crate) const FIRMWARE_UUID_ERROR: &str = "FirmwareUUIDError";
    /// `hotPlugNetworkInterfaceErrorReason` (pkg/network/controllers/vm.go:60).
    pub(crate) const HOTPLUG_NETWORK_INTERFACE_ERROR: &str = "HotPlugNetworkInterfaceError";
    /// `memorydump.ErrorReason` (pkg/storage/memorydump/memorydump.go:40).
    pub(crate) const MEMORY_DUMP_ERROR: &str = "MemoryDumpError";
}

/// Event reasons (pkg/virt-controller/watch/common/events.go:22-29, vm.go:105-116,
/// pkg/controller/controller.go:81).
pub(crate) mod event {
    /// Normal: a VMI was created.
    pub(crate) const SUCCESSFUL_CREATE: &str = "SuccessfulCreate";
    /// Warning: creating a VMI failed.
    pub(crate) const FAILED_CREATE: &str = "FailedCreate";
    /// Normal: a VMI was deleted.
    pub(crate) const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
    /// Warning: deleting a VMI failed.
    pub(crate) const FAILED_DELETE: &str = "FailedDelete";
    /// Warning: creating a DataVolume failed.
    pub(crate) const FAILED_DATA_VOLUME_CREATE: &str = "FailedDataVolumeCreate";
    /// Normal: a DataVolume was created.
    pub(crate) const SUCCESSFUL_DATA_VOLUME_CREATE: &str = "SuccessfulDataVolumeCreate";
    /// Warning: a DataVolume failed to import or exceeds its quota.
    pub(crate) const FAILED_DATA_VOLUME_IMPORT: &str = "FailedDataVolumeImport";
}

/// VM / VMI condition types (staging/src/kubevirt.io/api/core/v1/types.go).
pub(crate) mod condition {
    /// `Ready`: copied from the VMI.
    pub(crate) const READY: &str = "Ready";
    /// `Failure`: the last sync error.
    pub(crate) const FAILURE: &str = "Failure";
    /// `RestartRequired`: the template changed in a way that needs a new VMI.
    pub(crate) const RESTART_REQUIRED: &str = "RestartRequired";
    /// `ManualRecoveryRequired`: set after an interrupted volume migration.
    pub(crate) const MANUAL_RECOVERY_REQUIRED: &str = "ManualRecoveryRequired";
    /// VMI conditions the VM controller reads: `Paused`, `Synchronized`, `PodScheduled` (copied
    /// from the pod).
    pub(crate) use crate::controller::vmi::conditions::types::{
        PAUSED, POD_SCHEDULED, SYNCHRONIZED,
    };
}

/// Reasons read from VMI conditions by the printable status (pkg/controller/controller.go:89-112,
/// k8s `PodReasonUnschedulable`).
pub(crate) mod vmi_reason {
    /// PodScheduled=False.
    pub(crate) use crate::controller::vmi::conditions::reasons::UNSCHEDULABLE;
    /// Synchronized=False: a PVC is missing.
    pub(crate) use crate::controller::vmi::events::reasons::FAILED_PVC_NOT_FOUND;
    /// Synchronized=False: image pull error, image pull back-off.
    pub(crate) use crate::controller::vmi::podutil::{
        ERR_IMAGE_PULL_REASON as ERR_IMAGE_PULL, IMAGE_PULL_BACK_OFF_REASON as IMAGE_PULL_BACK_OFF,
    };
}

/// Message formats (vm.go:86-102).
pub(crate) mod message {
    /// `fetchingRunStrategyErrFmt`, followed by the error.
    pub(crate) const FETCHING_RUN_STRATEGY: &str = "Error fetching RunStrategy: ";
    /// `startingVMIFailureFmt`, followed by the error.
    pub(crate) const STARTING_VMI_FAILURE: &str = "Failure while starting VMI: ";
    /// `failureDeletingVmiErrFormat`, followed by the error.
    pub(crate) const FAILURE_DELETING_VMI: &str = "Failure attempting to delete VMI: ";
    /// `nonReceiverVMI`.
    pub(crate) const NON_RECEIVER_VMI: &str = "Found non receiver VMI while VM is receiver";
    /// RestartRequired message (vm.go:3053).
    pub(crate) const RESTART_REQUIRED: &str =
        "a non-live-updatable field was changed in the template spec";
    /// Go's `%v` of a nil error, as it appears in the Halted start-request quirk (vm.go:1130).
    pub(crate) const NIL_ERROR: &str = "<nil>";
}

/// Annotation keys only the VM controller uses.
pub(crate) mod annotation {
    /// `ControllerAPILatestVersionObservedAnnotation` (types.go:1141).
    pub(crate) const LATEST_OBSERVED_API_VERSION: &str = "kubevirt.io/latest-observed-api-version";
    /// `ControllerAPIStorageVersionObservedAnnotation` (types.go:1142).
    pub(crate) const STORAGE_OBSERVED_API_VERSION: &str =
        "kubevirt.io/storage-observed-api-version";
    /// Value of both api-version annotations (`ApiLatestVersion`, `ApiStorageVersion`).
    pub(crate) const API_VERSION_V1: &str = "v1";
    /// `RestoreRunStrategy` (types.go:1295).
    pub(crate) const RESTORE_RUN_STRATEGY: &str = "kubevirt.io/restore-run-strategy";
    /// `PciTopologyVersionAnnotation` (types.go:1254).
    pub(crate) const PCI_TOPOLOGY_VERSION: &str = "kubevirt.io/pci-topology-version";
    /// `PciInterfaceSlotCountAnnotation` (types.go:1260).
    pub(crate) const PCI_INTERFACE_SLOT_COUNT: &str = "kubevirt.io/pci-interface-slot-count";
    /// Descheduler `EvictPodAnnotationKeyAlpha` (pkg/virt-controller/watch/descheduler/descheduler.go:45).
    pub(crate) const DESCHEDULER_EVICT: &str = "descheduler.alpha.kubernetes.io/evict";
    /// Descheduler `EvictPodAnnotationKeyAlphaPreferNoEviction` (descheduler.go:49).
    pub(crate) const DESCHEDULER_PREFER_NO_EVICTION: &str =
        "descheduler.alpha.kubernetes.io/prefer-no-eviction";
    /// Velero `SkipHooksAnnotation` (pkg/storage/velero/annotations.go:41), synced from the VM's
    /// own metadata.
    pub(crate) const VELERO_SKIP_HOOKS: &str = "kubevirt.io/skip-backup-hooks";
    /// CDI claim adoption, set on every DataVolume the controller creates
    /// (pkg/storage/types/dv.go:42).
    pub(crate) const CDI_ALLOW_CLAIM_ADOPTION: &str = "cdi.kubevirt.io/allowClaimAdoption";
}
