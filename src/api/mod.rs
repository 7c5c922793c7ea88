//! kubevirt.io types (VirtualMachine, VirtualMachineInstance, DataVolume), quantities, and the
//! names KubeVirt uses for labels, annotations and finalizers.
//!
//! Every typed struct keeps the fields it does not model in an `extra` map, so that reading and
//! writing an object (or copying a VM template into a VMI) never loses a field.

/// `impl kube::Resource` for a namespaced kubevirt.io-style type whose `metadata` is an
/// `ObjectMeta` or derefs to one ([`Meta`]: `meta()` then has no labels or annotations).
macro_rules! namespaced_resource {
    ($ty:ty, kind = $kind:literal, group = $group:expr, version = $version:expr, plural = $plural:literal) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::NamespaceResourceScope;
            fn kind(_: &()) -> std::borrow::Cow<'_, str> {
                $kind.into()
            }
            fn group(_: &()) -> std::borrow::Cow<'_, str> {
                $group.into()
            }
            fn version(_: &()) -> std::borrow::Cow<'_, str> {
                $version.into()
            }
            fn plural(_: &()) -> std::borrow::Cow<'_, str> {
                $plural.into()
            }
            fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &self.metadata
            }
            fn meta_mut(
                &mut self,
            ) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

pub mod apply;
pub(crate) mod common;
pub(crate) mod datavolume;
pub mod defaults;
pub mod instancetype;
pub mod key;
pub(crate) mod kubevirt;
pub mod manifest;
pub(crate) mod meta;
pub mod quantity;
pub(crate) mod resources;
pub mod storage;
pub(crate) mod traits;
pub mod vm;
pub mod vmi;

pub use common::{
    Condition, Extra, JsonList, KnownStr, MetaMaps, ObjectMaps, SmallMap, Time, annotation, label,
};
pub use datavolume::DataVolume;
pub use kubevirt::KubeVirt;
pub use meta::Meta;
pub use vm::{RunStrategy, VirtualMachine};
pub use vmi::{Phase, VirtualMachineInstance};

/// API group of VMs and VMIs.
pub const GROUP: &str = "kubevirt.io";
/// API version of VMs and VMIs.
pub const VERSION: &str = "v1";
/// `apiVersion` string of VMs and VMIs.
pub const API_VERSION: &str = "kubevirt.io/v1";

/// Well-known label keys (KubeVirt `staging/src/kubevirt.io/api/core/v1/types.go`).
pub mod labels {
    /// `kubevirt.io=virt-launcher` marks launcher pods (`AppLabel`).
    pub const APP: &str = "kubevirt.io";
    /// Value of [`APP`] on launcher pods.
    pub const APP_VIRT_LAUNCHER: &str = "virt-launcher";
    /// VMI UID on its launcher pod (`CreatedByLabel`).
    pub const CREATED_BY: &str = "kubevirt.io/created-by";
    /// Node a VMI runs on (`NodeNameLabel`), set when the VMI is Scheduled.
    pub const NODE_NAME: &str = "kubevirt.io/nodeName";
    /// Sanitised VMI hostname on the pod (`VirtualMachineNameLabel`).
    pub const VM_NAME: &str = "vm.kubevirt.io/name";
    /// Short VMI identifier on the pod (`VirtualMachineInstanceIDLabel`).
    pub const VMI_ID: &str = "vmi.kubevirt.io/id";
    /// Nodes that can run VMIs (`NodeSchedulable`).
    pub const SCHEDULABLE: &str = "kubevirt.io/schedulable";
    /// Launcher image differs from the configured one.
    pub const OUTDATED_LAUNCHER_IMAGE: &str = "kubevirt.io/outdatedLauncherImage";
}

/// Well-known annotation keys.
pub mod annotations {
    /// Launcher memory overhead in bytes, decimal (`MemoryOverheadAnnotationBytes`).
    pub const MEMORY_OVERHEAD_BYTES: &str = "kubevirt.io/memory-overhead-bytes";
    /// A memory dump's file name (or failure) on its claim (`PVCMemoryDumpAnnotation`,
    /// kubevirt.io/api core/v1/types.go:1398).
    pub const MEMORY_DUMP: &str = "kubevirt.io/memory-dump";
    /// VMI name on its launcher pod (`DomainAnnotation`).
    pub const DOMAIN: &str = "kubevirt.io/domain";
    /// VM generation a VMI was started from (`VirtualMachineGenerationAnnotation`).
    pub const VM_GENERATION: &str = "kubevirt.io/vm-generation";
    /// Marks a VMI as migration target (`CreateMigrationTarget`).
    pub const CREATE_MIGRATION_TARGET: &str = "kubevirt.io/create-migration-target";
    /// Opt out of immediate DataVolume creation.
    pub const IMMEDIATE_DATA_VOLUME_CREATION: &str = "kubevirt.io/immediate-data-volume-creation";
    /// Default container for `kubectl exec/logs`.
    pub const DEFAULT_CONTAINER: &str = "kubectl.kubernetes.io/default-container";
    /// VMI runs as non-root.
    pub const NON_ROOT: &str = "kubevirt.io/nonroot";
    /// On a VMI or the KubeVirt CR: no Velero backup hooks on the launcher pod
    /// (pkg/storage/velero, `SkipHooksAnnotation`).
    pub const SKIP_BACKUP_HOOKS: &str = "kubevirt.io/skip-backup-hooks";
    /// On a hotplug attachment pod, from KubeVirt main (PR 18222): the name of the VMI it
    /// serves (`OwnerVMINameAnnotation`).
    pub const OWNER_VMI_NAME: &str = "kubevirt.io/owner-vmi-name";
    /// On a hotplug attachment pod, from KubeVirt main (PR 18222): the UID of the VMI it
    /// serves (`OwnerVMIUIDAnnotation`).
    pub const OWNER_VMI_UID: &str = "kubevirt.io/owner-vmi-uid";
}

/// Finalizers.
pub mod finalizers {
    /// On VMs and the VMIs the VM controller creates (`VirtualMachineControllerFinalizer`).
    pub const VM_CONTROLLER: &str = "kubevirt.io/virtualMachineControllerFinalize";
    /// On VMIs, added by virt-api, removed by the VMI controller once final and pods are gone.
    pub const FOREGROUND_DELETE_VM: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
    /// Legacy un-prefixed form of [`FOREGROUND_DELETE_VM`].
    pub const LEGACY_FOREGROUND_DELETE_VM: &str = "foregroundDeleteVirtualMachine";
    /// Kubernetes' orphan finalizer.
    pub const ORPHAN: &str = "orphan";
}
