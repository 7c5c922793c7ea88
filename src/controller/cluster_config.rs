//! The cluster settings the controllers render with, kept current from the KubeVirt CR:
//! KubeVirt's `ClusterConfig` (pkg/virt-config/configuration.go).
//!
//! The manager watches the KubeVirt CRs of one namespace (`--kubevirt-namespace`, KubeVirt's
//! install namespace `kubevirt` by default) and hands every change of that cache to
//! [`ClusterConfig::observe`]. The rule is KubeVirt's `GetConfig` (329-359):
//! - the CR is [`select_kubevirt_cr`]'s (one, not being deleted, in the namespace);
//! - a resourceVersion already applied or already refused changes nothing;
//! - a valid CR replaces the settings at once (one swap of an `Arc`; a reconcile reads the
//!   settings once, so it renders with one configuration throughout), logged at info with what
//!   changed and counted;
//! - an invalid CR is refused with an error naming the field, and the last good settings stay
//!   (KubeVirt: "Invalid cluster config using KubeVirt resource version …, falling back to last
//!   good resource version …", 350-352);
//! - no CR (none yet, or deleted) keeps the last good settings: KubeVirt's defaults (with the
//!   process's own fields) until a CR was applied.
//!
//! With `--kubevirt-cr FILE` the settings are fixed: [`ClusterConfig::fixed`], nothing watched.

use crate::api::KubeVirt;
use crate::config::{ClusterSettings, select_kubevirt_cr};
use crate::runtime::metrics::Metrics;
use chrono::{DateTime, Utc};
use prometheus_client::metrics::counter::Counter;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

/// Where the settings in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SettingsSource {
    /// Given at start and never reloaded (`--kubevirt-cr FILE`, or a caller's settings).
    Fixed,
    /// Watching, but no KubeVirt CR applied yet: KubeVirt's defaults.
    Defaults,
    /// The KubeVirt CR named in [`ConfigState::kubevirt`].
    #[serde(rename = "kubevirtCR")]
    KubevirtCr,
}

/// One version of a KubeVirt CR.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CrVersion {
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
}

/// A CR version that was refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
    /// The error, naming the field (`KubeVirt CR: field spec.configuration.… : …`).
    pub error: String,
    pub at: DateTime<Utc>,
}

/// The settings in use and where they came from: `/debug/state`'s `settings`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigState {
    pub source: SettingsSource,
    /// The namespace whose KubeVirt CR is watched; absent when the settings are fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watch_namespace: Option<String>,
    /// The CR version the settings come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubevirt: Option<CrVersion>,
    /// When the settings in use were loaded.
    pub loaded_at: DateTime<Utc>,
    /// CR versions applied since start.
    pub reloads: u64,
    /// The CR's current version, if it was refused (cleared when a later one is applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,
    /// Why no CR is applied now (none in the namespace, several), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The settings in use.
    pub current: ClusterSettings,
}

/// What one [`ClusterConfig::observe`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Observed {
    /// Nothing new (a version already applied or refused, or still no CR).
    Unchanged,
    /// A new CR version was applied; the settings that changed (`memoryOvercommit 100 → 150`).
    Applied(Vec<String>),
    /// A new CR version was refused; the error.
    Refused(String),
    /// No CR can be applied now (none, or several); the last good settings stay.
    NoCr(String),
}

/// The settings in use, swapped atomically on a reload. Cheap to read: one `Arc` clone.
pub struct ClusterConfig {
    current: RwLock<Arc<ClusterSettings>>,
    /// What `current` is swapped with, and the record behind [`ConfigState`].
    state: Mutex<Inner>,
}

struct Inner {
    /// The process's settings: what a CR is merged with.
    base: ClusterSettings,
    view: ConfigState,
    /// The refused version (`lastInvalidConfigResourceVersion`).
    refused_version: Option<String>,
    reloads: Option<Counter>,
    refusals: Option<Counter>,
}

impl ClusterConfig {
    /// Settings that never change (`--kubevirt-cr FILE`, tests, offline contexts).
    pub(crate) fn fixed(settings: ClusterSettings) -> Self {
        Self::new(settings, SettingsSource::Fixed, None)
    }

    /// `base` until a KubeVirt CR of `namespace` is observed; then the CR over KubeVirt's
    /// defaults, with `base`'s process fields ([`ClusterSettings::with_kubevirt_cr`]).
    pub(crate) fn watching(base: ClusterSettings, namespace: &str) -> Self {
        Self::new(base, SettingsSource::Defaults, Some(namespace.to_string()))
    }

    fn new(base: ClusterSettings, source: SettingsSource, watch: Option<String>) -> Self {
        ClusterConfig {
            current: RwLock::new(Arc::new(base.clone())),
            state: Mutex::new(Inner {
                view: ConfigState {
                    source,
                    watch_namespace: watch,
                    kubevirt: None,
                    loaded_at: Utc::now(),
                    reloads: 0,
                    refused: None,
                    note: None,
                    current: base.clone(),
                },
                base,
                refused_version: None,
                reloads: None,
                refusals: None,
            }),
        }
    }

    /// Count reloads and refusals in `metrics`: `virtctl_rs_kubevirt_config_reloads_total`,
    /// `virtctl_rs_kubevirt_config_refused_total`.
    pub(crate) fn register_metrics(&self, metrics: &Metrics) {
        let (reloads, refusals) = (Counter::default(), Counter::default());
        metrics.register(
            "virtctl_rs_kubevirt_config_reloads",
            "KubeVirt CR versions applied to the controller's settings",
            reloads.clone(),
        );
        metrics.register(
            "virtctl_rs_kubevirt_config_refused",
            "KubeVirt CR versions refused as invalid (the last good settings stay)",
            refusals.clone(),
        );
        let mut inner = self.lock();
        inner.reloads = Some(reloads);
        inner.refusals = Some(refusals);
    }

    /// The settings in use. A reconcile reads them once.
    pub(crate) fn settings(&self) -> Arc<ClusterSettings> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The settings in use and where they came from.
    pub(crate) fn state(&self) -> ConfigState {
        self.lock().view.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Apply the watched namespace's KubeVirt CRs as they are now (the informer's cache after a
    /// change); logs what it did. Fixed settings ignore it.
    pub(crate) fn observe<K: std::borrow::Borrow<KubeVirt>>(
        &self,
        crs: &[K],
        now: DateTime<Utc>,
    ) -> Observed {
        let mut inner = self.lock();
        let Some(namespace) = inner.view.watch_namespace.clone() else {
            return Observed::Unchanged;
        };
        let cr = match select_kubevirt_cr(crs, &namespace) {
            Ok(Some(cr)) => cr,
            Ok(None) => {
                let note = match &inner.view.kubevirt {
                    Some(v) => format!(
                        "no KubeVirt CR in namespace {namespace}: keeping the settings of {}/{} resourceVersion {}",
                        v.namespace, v.name, v.resource_version
                    ),
                    None => format!("no KubeVirt CR in namespace {namespace}: KubeVirt's defaults"),
                };
                return inner.no_cr(note, false);
            }
            Err(e) => return inner.no_cr(format!("{e}; keeping the last good settings"), true),
        };
        let version = CrVersion {
            namespace: namespace.clone(),
            name: cr.metadata.name.clone().unwrap_or_default(),
            resource_version: cr.metadata.resource_version.clone().unwrap_or_default(),
        };
        inner.view.note = None;
        let rv = Some(&version.resource_version);
        if inner.view.kubevirt.as_ref().map(|v| &v.resource_version) == rv
            || inner.refused_version.as_ref() == rv
        {
            return Observed::Unchanged;
        }
        match inner.base.with_kubevirt_cr(&cr.to_cr_value()) {
            Ok(settings) => {
                let changes: Vec<String> = (inner.view.current.cr_changes_to(&settings))
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                *self.current.write().unwrap_or_else(PoisonError::into_inner) =
                    Arc::new(settings.clone());
                inner.applied(version, settings, &changes, now);
                Observed::Applied(changes)
            }
            Err(e) => {
                let error = e.to_string();
                inner.refused(version, &error, now);
                Observed::Refused(error)
            }
        }
    }
}

impl Inner {
    fn applied(
        &mut self,
        version: CrVersion,
        settings: ClusterSettings,
        changes: &[String],
        now: DateTime<Utc>,
    ) {
        let what = format!(
            "{}/{} resourceVersion {}",
            version.namespace, version.name, version.resource_version
        );
        if changes.is_empty() {
            tracing::debug!("KubeVirt configuration reloaded from {what}: no setting changed");
        } else {
            tracing::info!(
                "KubeVirt configuration reloaded from {what}: {}",
                changes.join(", ")
            );
        }
        if let Some(c) = &self.reloads {
            c.inc();
        }
        self.refused_version = None;
        let view = &mut self.view;
        view.source = SettingsSource::KubevirtCr;
        view.kubevirt = Some(version);
        view.loaded_at = now;
        view.reloads += 1;
        view.refused = None;
        view.current = settings;
    }

    fn refused(&mut self, version: CrVersion, error: &str, now: DateTime<Utc>) {
        let keeping = match &self.view.kubevirt {
            Some(v) => format!("resourceVersion {}", v.resource_version),
            None => "KubeVirt's defaults".to_string(),
        };
        tracing::error!(
            "invalid KubeVirt CR {}/{} resourceVersion {}: {error}; keeping the settings of {keeping}",
            version.namespace,
            version.name,
            version.resource_version
        );
        if let Some(c) = &self.refusals {
            c.inc();
        }
        self.refused_version = Some(version.resource_version.clone());
        self.view.refused = Some(Refusal {
            namespace: version.namespace,
            name: version.name,
            resource_version: version.resource_version,
            error: error.to_string(),
            at: now,
        });
    }

    /// No CR applies: keep the settings; log when the reason is new.
    fn no_cr(&mut self, note: String, is_error: bool) -> Observed {
        if self.view.note.as_ref() == Some(&note) {
            return Observed::Unchanged;
        }
        if is_error {
            tracing::error!("KubeVirt CR: {note}");
        } else {
            tracing::info!("{note}");
        }
        self.view.note = Some(note.clone());
        Observed::NoCr(note)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn kv(name: &str, rv: &str, configuration: serde_json::Value) -> KubeVirt {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": name, "namespace": "kubevirt", "resourceVersion": rv},
            "spec": {"configuration": configuration}
        }))
        .unwrap()
    }

    fn overcommit(name: &str, rv: &str, percent: i64) -> KubeVirt {
        kv(
            name,
            rv,
            json!({"developerConfiguration": {"memoryOvercommit": percent}}),
        )
    }

    fn watching() -> ClusterConfig {
        let base = ClusterSettings {
            without_virt_api: true,
            ..Default::default()
        };
        ClusterConfig::watching(base, "kubevirt")
    }

    #[test]
    fn a_valid_cr_replaces_the_settings_and_says_what_changed() {
        let c = watching();
        let before = c.settings();
        assert_eq!(c.state().source, SettingsSource::Defaults);
        let now = Utc::now();
        assert_eq!(
            c.observe(&[overcommit("kubevirt", "7", 150)], now),
            Observed::Applied(vec!["memoryOvercommit 100 → 150".into()])
        );
        assert_eq!(before.memory_overcommit, 100, "a reader keeps its copy");
        let s = c.settings();
        assert_eq!(s.memory_overcommit, 150);
        assert!(s.without_virt_api, "the process's fields stay");
        let state = c.state();
        assert_eq!(state.source, SettingsSource::KubevirtCr);
        assert_eq!(state.kubevirt.unwrap().resource_version, "7");
        assert_eq!((state.reloads, state.loaded_at), (1, now));
        assert_eq!(state.current, *s);
        // The same version again (a relist): nothing.
        assert_eq!(
            c.observe(&[overcommit("kubevirt", "7", 150)], now),
            Observed::Unchanged
        );
        assert_eq!(c.state().reloads, 1);
    }

    #[test]
    fn an_invalid_cr_is_refused_once_and_the_last_good_settings_stay() {
        let c = watching();
        let now = Utc::now();
        c.observe(&[overcommit("kubevirt", "7", 150)], now);
        let Observed::Refused(e) = c.observe(&[overcommit("kubevirt", "8", 0)], now) else {
            panic!("not refused");
        };
        assert!(
            e.contains("spec.configuration.developerConfiguration.memoryOvercommit"),
            "{e}"
        );
        assert_eq!(c.settings().memory_overcommit, 150);
        let state = c.state();
        assert_eq!(state.kubevirt.unwrap().resource_version, "7");
        assert_eq!(state.refused.as_ref().unwrap().resource_version, "8");
        assert_eq!(
            c.observe(&[overcommit("kubevirt", "8", 0)], now),
            Observed::Unchanged,
            "a refused version is not tried again"
        );
        // A later valid version is applied and clears the refusal.
        assert_eq!(
            c.observe(&[overcommit("kubevirt", "9", 200)], now),
            Observed::Applied(vec!["memoryOvercommit 150 → 200".into()])
        );
        assert_eq!(c.state().refused, None);
    }

    #[test]
    fn without_a_cr_the_last_good_settings_stay() {
        let c = watching();
        let now = Utc::now();
        let none: [KubeVirt; 0] = [];
        assert!(
            matches!(c.observe(&none, now), Observed::NoCr(n) if n.contains("KubeVirt's defaults"))
        );
        c.observe(&[overcommit("kubevirt", "7", 150)], now);
        // Deleted: KubeVirt keeps its last valid configuration (configuration.go:333-335).
        let Observed::NoCr(note) = c.observe(&none, now) else {
            panic!("no note");
        };
        assert!(note.contains("keeping the settings of kubevirt/kubevirt resourceVersion 7"));
        assert_eq!(c.settings().memory_overcommit, 150);
        assert_eq!(c.observe(&none, now), Observed::Unchanged, "logged once");
        // Several: refused, the settings stay.
        let two = [overcommit("a", "1", 300), overcommit("b", "2", 400)];
        assert!(matches!(c.observe(&two, now), Observed::NoCr(n) if n.contains("(a, b)")));
        assert_eq!(c.settings().memory_overcommit, 150);
    }

    /// A field the new CR leaves out goes back to KubeVirt's default, not the previous value.
    #[test]
    fn a_removed_field_returns_to_the_default() {
        let c = watching();
        let now = Utc::now();
        c.observe(&[overcommit("kubevirt", "7", 150)], now);
        assert_eq!(
            c.observe(&[kv("kubevirt", "8", json!({}))], now),
            Observed::Applied(vec!["memoryOvercommit 150 → 100".into()])
        );
    }

    #[test]
    fn fixed_settings_ignore_the_cluster() {
        let c = ClusterConfig::fixed(ClusterSettings {
            memory_overcommit: 120,
            ..Default::default()
        });
        assert_eq!(
            c.observe(&[overcommit("kubevirt", "7", 150)], Utc::now()),
            Observed::Unchanged
        );
        assert_eq!(c.settings().memory_overcommit, 120);
        assert_eq!(c.state().source, SettingsSource::Fixed);
    }

    #[test]
    fn metrics_count_reloads_and_refusals() {
        let metrics = Metrics::new();
        let c = watching();
        c.register_metrics(&metrics);
        let now = Utc::now();
        c.observe(&[overcommit("kubevirt", "7", 150)], now);
        c.observe(&[overcommit("kubevirt", "8", 0)], now);
        let text = metrics.encode().unwrap();
        assert!(
            text.contains("virtctl_rs_kubevirt_config_reloads_total 1"),
            "{text}"
        );
        assert!(
            text.contains("virtctl_rs_kubevirt_config_refused_total 1"),
            "{text}"
        );
    }
}
