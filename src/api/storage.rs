//! The cluster-scoped storage objects the controllers read beside the core StorageClass:
//! `snapshot.storage.k8s.io/v1` VolumeSnapshotClass (external-snapshotter's CRD), CDI's
//! `cdi.kubevirt.io/v1beta1` StorageProfile and CDIConfig, and the CDI CR. Only the fields
//! KubeVirt reads are typed; the rest is kept in `extra`.

use super::common::Extra;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// `impl kube::Resource` for a cluster-scoped type with `metadata: ObjectMeta`.
macro_rules! cluster_resource {
    ($ty:ty, kind = $kind:literal, group = $group:literal, version = $version:literal, plural = $plural:literal) => {
        impl kube::Resource for $ty {
            type DynamicType = ();
            type Scope = k8s_openapi::ClusterResourceScope;
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
            fn meta(&self) -> &ObjectMeta {
                &self.metadata
            }
            fn meta_mut(&mut self) -> &mut ObjectMeta {
                &mut self.metadata
            }
        }
    };
}

/// A VolumeSnapshotClass (`snapshot.storage.k8s.io/v1`): the CSI `driver` it snapshots with.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeSnapshotClass {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The CSI driver; KubeVirt matches it against a StorageClass's `provisioner`.
    #[serde(default)]
    pub driver: String,
    #[serde(flatten)]
    pub extra: Extra,
}

cluster_resource!(
    VolumeSnapshotClass,
    kind = "VolumeSnapshotClass",
    group = "snapshot.storage.k8s.io",
    version = "v1",
    plural = "volumesnapshotclasses"
);

/// A CDI StorageProfile (one per StorageClass, same name): `status.snapshotClass` is the
/// VolumeSnapshotClass CDI chose for that StorageClass.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageProfile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

cluster_resource!(
    StorageProfile,
    kind = "StorageProfile",
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    plural = "storageprofiles"
);

impl StorageProfile {
    /// `status.snapshotClass`, when set.
    pub(crate) fn snapshot_class(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.get("snapshotClass"))
            .and_then(|c| c.as_str())
    }
}

/// CDI's CDIConfig (one, named `config`): `status.filesystemOverhead` has the overhead CDI
/// reserves on Filesystem-mode claims, `global` and per StorageClass.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdiConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

cluster_resource!(
    CdiConfig,
    kind = "CDIConfig",
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    plural = "cdiconfigs"
);

/// The CDI CR (`cdi.kubevirt.io/v1beta1` CDI): KubeVirt only counts them.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cdi {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(flatten)]
    pub extra: Extra,
}

cluster_resource!(
    Cdi,
    kind = "CDI",
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    plural = "cdis"
);
