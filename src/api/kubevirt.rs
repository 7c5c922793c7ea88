//! `kubevirt.io/v1` KubeVirt, the custom resource that installs KubeVirt and holds its cluster
//! configuration (`spec.configuration`). Only the metadata is typed: the settings are read from
//! the JSON by [`crate::config::ClusterSettings::from_kubevirt_cr`], one parser for every reader.

use super::common::Extra;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Serialize};

/// A KubeVirt custom resource; every field but the metadata is kept as sent.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct KubeVirt {
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// `apiVersion`, `kind`, `spec`, `status`, …
    #[serde(flatten)]
    pub extra: Extra,
}

namespaced_resource!(
    KubeVirt,
    kind = "KubeVirt",
    group = super::GROUP,
    version = super::VERSION,
    plural = "kubevirts"
);

impl KubeVirt {
    /// The whole object as JSON with `kind` set (items of a list may come without one), what
    /// [`crate::config::ClusterSettings::from_kubevirt_cr`] reads.
    pub(crate) fn to_cr_value(&self) -> serde_json::Value {
        let mut value = serde_json::to_value(self).unwrap_or_default();
        value["kind"] = "KubeVirt".into();
        value
    }

    /// `namespace/name`.
    #[cfg(test)]
    pub(crate) fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }
}
