//! The record of the last reconcile of every key, for `/debug/state` and the inspector, and the
//! one place that writes it ([`ReconcileLog::finish`]): both executors at the end of a sync, and
//! the manager for a reconcile that failed before its executor could record anything. Beside
//! it, [`ChangedKeys`]: which keys' VM, VMI, launcher pod or records changed, for readers that
//! follow every VM without walking them all (`run-controller`'s progress lines).

use super::ReconcileError;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The outcome of one reconcile of one key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileRecord {
    /// When the reconcile finished.
    pub at: DateTime<Utc>,
    /// How long it took, seconds.
    pub duration_seconds: f64,
    /// `ok` or `error`.
    pub result: String,
    /// The error, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Requeue requested by the decision, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after_seconds: Option<f64>,
    /// Short descriptions of the actions applied.
    pub actions: Vec<String>,
}

impl ReconcileRecord {
    /// The record of a reconcile that started at `started` and ends now: `result` is `error`
    /// exactly when `error` is set.
    pub(crate) fn finished(
        started: Instant,
        error: Option<String>,
        requeue_after: Option<Duration>,
        actions: Vec<String>,
    ) -> Self {
        ReconcileRecord {
            at: Utc::now(),
            duration_seconds: started.elapsed().as_secs_f64(),
            result: if error.is_some() { "error" } else { "ok" }.into(),
            error,
            requeue_after_seconds: requeue_after.map(|d| d.as_secs_f64()),
            actions,
        }
    }
}

/// How a VMI of a key last ended, as the VMI controller decided it: the write that moved it into
/// a final phase and why. Kept after the VMI is gone (a restarted VM gets a new VMI under the
/// same key), so that the progress lines and the inspector can say why a Running VM went back
/// to Starting (KubeVirt logs the reason only; it records no condition when a pod vanishes,
/// lifecycle.go:480-485).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiEnding {
    /// `metadata.uid` of the VMI that ended.
    pub uid: String,
    /// The final phase written (`Failed`, `Succeeded`).
    pub phase: String,
    /// The phase it left.
    pub from_phase: String,
    /// Why, in a few words (`its launcher pod vanished`).
    pub reason: String,
    /// When the write succeeded.
    pub at: DateTime<Utc>,
}

/// One controller's last records by key: hashed, since every reconcile writes one (a sorted
/// map of 10,000 keys compared a dozen key strings per write); [`ReconcileLog::snapshot`]
/// sorts.
type Records = hashbrown::HashMap<String, ReconcileRecord, foldhash::fast::RandomState>;

/// The VM keys (`namespace/name`) whose VM, VMI, launcher pod, reconcile record or VMI ending
/// changed since a reader last took them. Nothing is kept until a reader calls
/// [`ChangedKeys::follow`] (the controller alone pays one atomic load per change); from then on
/// the informers' handlers ([`crate::controller::handlers::changed_keys_handler`]) and the
/// [`ReconcileLog`] mark keys, and the reader takes them, so it reads only what changed: the
/// progress printer walked every cached VM five times a second, half a core on an idle
/// controller with 10,000 VMs. A key is marked after its change is in place, so a reader that
/// takes it reads the change.
#[derive(Clone, Default)]
pub(crate) struct ChangedKeys {
    inner: Arc<ChangedInner>,
}

#[derive(Default)]
struct ChangedInner {
    following: AtomicBool,
    keys: Mutex<BTreeSet<String>>,
}

impl ChangedKeys {
    /// Keep the keys marked from now on.
    pub(crate) fn follow(&self) {
        self.inner.following.store(true, Ordering::SeqCst);
    }

    /// Whether a reader follows (marking is wasted otherwise).
    pub(crate) fn followed(&self) -> bool {
        self.inner.following.load(Ordering::Relaxed)
    }

    /// `key` changed.
    pub(crate) fn mark(&self, key: &str) {
        if !self.followed() {
            return;
        }
        let mut keys = self.inner.keys.lock().unwrap_or_else(|e| e.into_inner());
        if !keys.contains(key) {
            keys.insert(key.to_string());
        }
    }

    /// The keys marked since the last take, sorted.
    pub(crate) fn take(&self) -> BTreeSet<String> {
        std::mem::take(&mut *self.inner.keys.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Last reconcile per controller and key, and the last VMI ending per key.
#[derive(Clone, Default)]
pub struct ReconcileLog {
    inner: Arc<Mutex<BTreeMap<String, Records>>>,
    endings: Arc<Mutex<BTreeMap<String, VmiEnding>>>,
    changed: ChangedKeys,
}

impl ReconcileLog {
    /// The keys changed since a reader last took them; the log marks each key it records.
    pub(crate) fn changed_keys(&self) -> &ChangedKeys {
        &self.changed
    }

    /// Record the outcome of a reconcile of `key` by `controller` (`vm` / `vmi`).
    pub(crate) fn record(&self, controller: &str, key: &str, record: ReconcileRecord) {
        {
            let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
            if !g.contains_key(controller) {
                g.insert(controller.to_string(), Records::default());
            }
            if let Some(records) = g.get_mut(controller) {
                // The key's text is copied only for a key without a record yet.
                records.entry_ref(key).insert(record);
            }
        }
        // Marked once written: a reader that takes the key reads this record.
        self.changed.mark(key);
    }

    /// Record a reconcile that started at `started` and ends now, failed with `error` or not
    /// (see [`ReconcileRecord::finished`]; the record keeps the error's text).
    pub(crate) fn finish(
        &self,
        controller: &str,
        key: &str,
        started: Instant,
        error: Option<&ReconcileError>,
        requeue_after: Option<Duration>,
        actions: Vec<String>,
    ) {
        let error = error.map(ToString::to_string);
        let record = ReconcileRecord::finished(started, error, requeue_after, actions);
        self.record(controller, key, record);
    }

    /// Forget a key whose object is gone. The VM controller's `forget` (the VM is gone) also
    /// drops the key's [`VmiEnding`]; the VMI controller's keeps it for the VMI that follows.
    pub(crate) fn forget(&self, controller: &str, key: &str) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = g.get_mut(controller) {
            m.remove(key);
        }
        if controller == "vm" {
            self.endings
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
        }
        drop(g);
        self.changed.mark(key);
    }

    /// Record that the VMI of `key` ended (replacing the key's previous ending).
    pub(crate) fn record_ending(&self, key: &str, ending: VmiEnding) {
        self.endings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.to_string(), ending);
        self.changed.mark(key);
    }

    /// The last VMI ending of `key`.
    pub(crate) fn ending(&self, key: &str) -> Option<VmiEnding> {
        self.endings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// Every key's last VMI ending, for `/debug/state`.
    pub(crate) fn endings(&self) -> BTreeMap<String, VmiEnding> {
        self.endings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The last record of one key.
    pub fn get(&self, controller: &str, key: &str) -> Option<ReconcileRecord> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.get(controller).and_then(|m| m.get(key)).cloned()
    }

    /// Whether the last record of one key was made at `since` or later (without copying it).
    pub(crate) fn recorded_since(&self, controller: &str, key: &str, since: DateTime<Utc>) -> bool {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.get(controller)
            .and_then(|m| m.get(key))
            .is_some_and(|r| r.at >= since)
    }

    /// Everything, sorted by controller and key, for `/debug/state`.
    pub fn snapshot(&self) -> BTreeMap<String, BTreeMap<String, ReconcileRecord>> {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .map(|(controller, records)| {
                let sorted = records
                    .iter()
                    .map(|(key, r)| (key.clone(), r.clone()))
                    .collect();
                (controller.clone(), sorted)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changed_keys_are_kept_only_while_followed_and_taken_once() {
        let log = ReconcileLog::default();
        let changed = log.changed_keys().clone();
        log.record_ending(
            "ns/before",
            VmiEnding {
                uid: "u".into(),
                phase: "Failed".into(),
                from_phase: "Running".into(),
                reason: "r".into(),
                at: Utc::now(),
            },
        );
        assert!(changed.take().is_empty(), "not followed yet");
        changed.follow();
        log.finish("vm", "ns/b", Instant::now(), None, None, vec![]);
        changed.mark("ns/a");
        log.forget("vmi", "ns/c");
        changed.mark("ns/a");
        let taken: Vec<String> = changed.take().into_iter().collect();
        assert_eq!(taken, ["ns/a", "ns/b", "ns/c"]);
        assert!(changed.take().is_empty(), "taken once");
        log.finish("vmi", "ns/b", Instant::now(), None, None, vec![]);
        assert_eq!(changed.take().len(), 1);
    }

    #[test]
    fn finish_writes_result_from_error_and_forget_drops_it() {
        let log = ReconcileLog::default();
        let started = Instant::now();
        log.finish(
            "vm",
            "ns/a",
            started,
            None,
            Some(Duration::from_secs(3)),
            vec![],
        );
        let ok = log.get("vm", "ns/a").expect("recorded");
        assert_eq!(ok.result, "ok");
        assert_eq!(ok.requeue_after_seconds, Some(3.0));
        log.finish(
            "vm",
            "ns/a",
            started,
            Some(&ReconcileError::UnknownPhase("boom".into())),
            None,
            vec!["X".into()],
        );
        let err = log.get("vm", "ns/a").expect("recorded");
        assert_eq!(
            (err.result.as_str(), err.error.as_deref()),
            ("error", Some("unknown vmi phase boom"))
        );
        let json = serde_json::to_value(&err).expect("serialises");
        assert_eq!(
            json["durationSeconds"],
            serde_json::json!(err.duration_seconds)
        );
        assert!(json.get("requeueAfterSeconds").is_none());
        let ending = VmiEnding {
            uid: "u1".into(),
            phase: "Failed".into(),
            from_phase: "Running".into(),
            reason: "its launcher pod vanished".into(),
            at: Utc::now(),
        };
        log.record_ending("ns/a", ending.clone());
        log.forget("vmi", "ns/a");
        assert_eq!(log.ending("ns/a"), Some(ending), "outlives the VMI");
        log.forget("vm", "ns/a");
        assert!(log.get("vm", "ns/a").is_none());
        assert!(log.snapshot()["vm"].is_empty());
        assert!(log.ending("ns/a").is_none(), "not the VM");
    }

    #[test]
    fn snapshot_is_sorted_and_recorded_since_reads_the_last_record() {
        let log = ReconcileLog::default();
        let record = |at: DateTime<Utc>| ReconcileRecord {
            at,
            ..ReconcileRecord::finished(Instant::now(), None, None, vec![])
        };
        let t0 = Utc::now();
        let later = t0 + chrono::Duration::seconds(5);
        for key in ["ns/c", "ns/a", "other/b"] {
            log.record("vmi", key, record(t0));
        }
        log.record("vm", "ns/a", record(t0));
        log.record("vmi", "ns/a", record(later));
        let snap = log.snapshot();
        assert_eq!(snap.keys().collect::<Vec<_>>(), ["vm", "vmi"]);
        assert_eq!(
            snap["vmi"].keys().collect::<Vec<_>>(),
            ["ns/a", "ns/c", "other/b"]
        );
        assert_eq!(snap["vmi"]["ns/a"].at, later, "replaced, not added");
        assert!(log.recorded_since("vmi", "ns/a", later));
        assert!(!log.recorded_since("vmi", "ns/c", later));
        assert!(log.recorded_since("vm", "ns/a", t0));
        assert!(!log.recorded_since("vm", "ns/c", t0), "no record");
        assert!(!log.recorded_since("x", "ns/a", t0), "no controller");
    }
}
