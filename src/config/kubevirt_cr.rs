//! Which KubeVirt CR configures the cluster, how its `spec.configuration` is merged with the
//! settings that do not come from it, and what changed between two configurations: the one rule
//! `run-controller`, `inspect` and `explain-overhead` share.
//!
//! KubeVirt: pkg/virt-config/configuration.go. `GetConfigFromKubeVirtCR` (361-385) takes the
//! KubeVirt CR of the install namespace that is not being deleted; `GetConfig` (329-359) merges
//! its `spec.configuration` over the defaults (`defaultClusterConfig`, `setConfigFromKubeVirt`)
//! and keeps the last valid configuration when there is no CR or the CR is invalid.

use super::{ClusterSettings, SettingsError};
use crate::api::KubeVirt;
use std::borrow::Borrow;

/// [`ClusterSettings`] fields (as serialised) set by the process, not by the KubeVirt CR: a
/// reload keeps them, and a comparison with the CR leaves them out.
const NOT_FROM_THE_CR: [&str; 4] = [
    "launcherImage",
    "qemuTimeoutSeconds",
    "kubevirtVersion",
    "withoutVirtApi",
];

/// The KubeVirt CR that configures the cluster: the one in `namespace` that is not being
/// deleted (configuration.go:361-372). `None` when there is none. Several are refused:
/// KubeVirt's config reader would take whichever its cache lists last, and its operator works
/// with only one ("more than one KubeVirt custom resource detected",
/// pkg/virt-operator/kubevirt.go:621-626).
///
/// KubeVirt also skips a CR whose `status.phase` is empty (one virt-operator has not yet
/// processed); this reader does not, so a CR written by hand (the embedded cluster has no
/// operator) configures the controller too.
pub(crate) fn select_kubevirt_cr<'a, K: Borrow<KubeVirt>>(
    crs: &'a [K],
    namespace: &str,
) -> Result<Option<&'a KubeVirt>, SettingsError> {
    let live: Vec<&KubeVirt> = crs
        .iter()
        .map(Borrow::borrow)
        .filter(|kv| kv.metadata.namespace.as_deref() == Some(namespace))
        .filter(|kv| kv.metadata.deletion_timestamp.is_none())
        .collect();
    match live.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one)),
        several => {
            let mut names: Vec<&str> = several
                .iter()
                .map(|kv| kv.metadata.name.as_deref().unwrap_or_default())
                .collect();
            names.sort_unstable();
            Err(SettingsError::Document(format!(
                "{} in namespace {namespace} ({}): KubeVirt works with only one",
                several.len(),
                names.join(", ")
            )))
        }
    }
}

impl ClusterSettings {
    /// These settings with `cr`'s configuration: every field the CR configures is read from it
    /// over KubeVirt's defaults ([`ClusterSettings::from_kubevirt_cr`]; a field the CR leaves
    /// out is the default, not this value), the fields the process sets (launcher image, qemu
    /// timeout, KubeVirt version, no virt-api) are kept. Errors name the field.
    pub(crate) fn with_kubevirt_cr(&self, cr: &serde_json::Value) -> Result<Self, SettingsError> {
        let mut s = ClusterSettings::from_kubevirt_cr(cr)?;
        s.launcher_image = self.launcher_image.clone();
        s.qemu_timeout_seconds = self.qemu_timeout_seconds;
        s.kubevirt_version = self.kubevirt_version;
        s.without_virt_api = self.without_virt_api;
        Ok(s)
    }

    /// What differs in the fields the KubeVirt CR configures, in field order; empty when they
    /// agree. Displayed `memoryOvercommit 100 → 150`.
    pub(crate) fn cr_changes_to(&self, new: &ClusterSettings) -> Vec<SettingChange> {
        let (old, new) = (as_map(self), as_map(new));
        let mut fields: Vec<&String> = new.keys().collect();
        fields.extend(old.keys().filter(|k| !new.contains_key(*k)));
        fields
            .into_iter()
            .filter(|f| !NOT_FROM_THE_CR.contains(&f.as_str()))
            .filter_map(|f| {
                let (a, b) = (old.get(f), new.get(f));
                (a != b).then(|| SettingChange {
                    field: f.clone(),
                    from: shown(a),
                    to: shown(b),
                })
            })
            .collect()
    }
}

/// One setting that differs between two configurations ([`ClusterSettings::cr_changes_to`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettingChange {
    /// The field as serialised (`memoryOvercommit`).
    pub field: String,
    /// Its value before (`unset` when absent).
    pub from: String,
    /// Its value after.
    pub to: String,
}

impl std::fmt::Display for SettingChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {} → {}", self.field, self.from, self.to)
    }
}

fn as_map(s: &ClusterSettings) -> serde_json::Map<String, serde_json::Value> {
    match serde_json::to_value(s) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => Default::default(),
    }
}

fn shown(v: Option<&serde_json::Value>) -> String {
    match v {
        None | Some(serde_json::Value::Null) => "unset".into(),
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kv(namespace: &str, name: &str, deleting: bool) -> KubeVirt {
        let mut metadata = json!({"name": name, "namespace": namespace});
        if deleting {
            metadata["deletionTimestamp"] = json!("2026-12-01T10:00:00Z");
        }
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": metadata,
            "spec": {"configuration": {}}
        }))
        .unwrap()
    }

    #[test]
    fn the_cr_of_the_namespace_that_is_not_being_deleted() {
        let crs = [
            kv("other", "a", false),
            kv("kubevirt", "old", true),
            kv("kubevirt", "kubevirt", false),
        ];
        let got = select_kubevirt_cr(&crs, "kubevirt").unwrap().unwrap();
        assert_eq!(got.key(), "kubevirt/kubevirt");
        assert_eq!(select_kubevirt_cr(&crs[..2], "kubevirt").unwrap(), None);
        assert_eq!(
            select_kubevirt_cr::<KubeVirt>(&[], "kubevirt").unwrap(),
            None
        );
    }

    #[test]
    fn several_crs_are_refused_naming_them() {
        let crs = [kv("kubevirt", "b", false), kv("kubevirt", "a", false)];
        let e = select_kubevirt_cr(&crs, "kubevirt")
            .unwrap_err()
            .to_string();
        assert!(e.contains("2 in namespace kubevirt (a, b)"), "{e}");
    }

    /// The CR's fields are read over KubeVirt's defaults, not over the previous settings; the
    /// process's own fields stay (configuration.go:339-353, `defaultClusterConfig` then the CR).
    #[test]
    fn a_cr_merges_over_the_defaults_and_keeps_the_process_fields() {
        let base = ClusterSettings {
            cpu_allocation_ratio: 20,
            without_virt_api: true,
            launcher_image: "example/launcher:dev".into(),
            ..Default::default()
        };
        let cr = json!({"kind": "KubeVirt", "spec": {"configuration": {
            "developerConfiguration": {"memoryOvercommit": 150}
        }}});
        let s = base.with_kubevirt_cr(&cr).unwrap();
        assert_eq!(s.memory_overcommit, 150);
        assert_eq!(
            s.cpu_allocation_ratio, 10,
            "KubeVirt's default, not the base's"
        );
        assert!(s.without_virt_api);
        assert_eq!(s.launcher_image, "example/launcher:dev");
        let bad = json!({"kind": "KubeVirt", "spec": {"configuration": {
            "developerConfiguration": {"memoryOvercommit": 0}
        }}});
        let e = base.with_kubevirt_cr(&bad).unwrap_err().to_string();
        assert!(
            e.contains("spec.configuration.developerConfiguration.memoryOvercommit"),
            "{e}"
        );
    }

    #[test]
    fn changes_name_each_cr_field_with_old_and_new() {
        let old = ClusterSettings::default();
        let new = ClusterSettings {
            memory_overcommit: 150,
            additional_guest_memory_overhead_ratio: Some("1.5".into()),
            without_virt_api: true,
            ..Default::default()
        };
        let shown = |a: &ClusterSettings, b: &ClusterSettings| -> Vec<String> {
            a.cr_changes_to(b).iter().map(|c| c.to_string()).collect()
        };
        assert_eq!(
            shown(&old, &new),
            [
                "memoryOvercommit 100 → 150",
                "additionalGuestMemoryOverheadRatio unset → 1.5"
            ]
        );
        assert!(new.cr_changes_to(&new).is_empty());
        let with_selector = ClusterSettings {
            auto_cpu_limit_namespace_label_selector: Some(Default::default()),
            ..Default::default()
        };
        assert_eq!(
            shown(&with_selector, &old),
            ["autoCpuLimitNamespaceLabelSelector {} → unset"]
        );
    }
}
