//! `cdi.kubevirt.io/v1beta1` DataVolume: only what the VM controller needs (phase), the rest raw.

use super::common::Extra;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A CDI DataVolume.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolume {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<DataVolumeStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `status` of a DataVolume.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeStatus {
    /// `Pending`, `ImportInProgress`, `Succeeded`, `Failed`, `WaitForFirstConsumer`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

namespaced_resource!(
    DataVolume,
    kind = "DataVolume",
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    plural = "datavolumes"
);

impl DataVolume {
    /// Ready for the VM controller: phase Succeeded, WaitForFirstConsumer or PendingPopulation
    /// (pkg/virt-controller/watch/util/util.go:106-118).
    pub(crate) fn is_ready(&self) -> bool {
        matches!(
            self.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "WaitForFirstConsumer" | "PendingPopulation")
        )
    }
}
