//! KubeVirt's controller expectations (pkg/controller/expectations.go, a copy of the
//! Kubernetes controller_utils expectations).
//!
//! A controller that creates or deletes objects records how many create/delete events it
//! expects to observe for its key before it syncs that key again, so that it does not act on a
//! stale informer cache (double creates, double deletes). A key's expectations are
//! *satisfied* when they were never set, when every expected event was observed, or when they
//! are older than [`EXPECTATIONS_TIMEOUT`] (5 minutes; the entry is then kept but ignored).
//!
//! Both stores are thread-safe and cheap to clone (all clones share the store). Time is
//! `tokio::time::Instant`, so expiry can be tested under tokio's paused clock.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Lock a mutex, recovering the data if a thread panicked while holding it (every update here
/// leaves the data consistent, so a poisoned lock is still usable).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How long expectations are honoured before a sync proceeds anyway: 5 minutes
/// (expectations.go:48, `ExpectationsTimeout`).
pub const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(5 * 60);

#[derive(Debug, Clone, Copy)]
struct Entry {
    add: i64,
    del: i64,
    timestamp: Instant,
    /// The store's timeout when the entry was set ([`ControllerExpectations::with_timeout`]).
    timeout: Duration,
    /// [`ControllerExpectations::take_newly_expired`] has returned this entry already.
    expiry_reported: bool,
}

impl Entry {
    fn fulfilled(&self) -> bool {
        self.add <= 0 && self.del <= 0
    }
    fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.timestamp)
    }
    fn expired(&self, now: Instant) -> bool {
        // expectations.go `isExpired`: strictly older than the timeout.
        self.age(now) > self.timeout
    }
}

/// Expected creations/deletions per controller key (`ControllerExpectations`).
///
/// Keys are controller keys, `namespace/name` of the owning object.
#[derive(Debug, Clone)]
pub struct ControllerExpectations {
    name: Arc<str>,
    store: Arc<Mutex<HashMap<String, Entry>>>,
    timeout: Duration,
}

impl ControllerExpectations {
    /// An empty store; `name` identifies it in logs and snapshots (e.g. `vmi`, `dataVolume`).
    pub(crate) fn new(name: impl Into<String>) -> Self {
        let name: String = name.into();
        Self {
            name: name.into(),
            store: Arc::new(Mutex::new(HashMap::new())),
            timeout: EXPECTATIONS_TIMEOUT,
        }
    }

    /// The same store honouring entries for `timeout` instead of [`EXPECTATIONS_TIMEOUT`]
    /// (for tests that wait for an expiry; entries set before keep theirs).
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Current `(add, del)` counters of `key`, if an entry exists (`GetExpectations`).
    pub(crate) fn get_expectations(&self, key: &str) -> Option<(i64, i64)> {
        lock(&self.store).get(key).map(|e| (e.add, e.del))
    }

    /// Whether the controller may sync `key` (`SatisfiedExpectations`, expectations.go:120-145):
    /// true when there is no entry, when add ≤ 0 and del ≤ 0, or when the entry is older than
    /// [`EXPECTATIONS_TIMEOUT`] (the expired entry is kept); false otherwise.
    pub(crate) fn satisfied_expectations(&self, key: &str) -> bool {
        let now = Instant::now();
        let store = lock(&self.store);
        match store.get(key) {
            None => true,
            Some(e) if e.fulfilled() => true,
            Some(e) if e.expired(now) => {
                tracing::debug!(expectations = %self.name, key, add = e.add, del = e.del, "expectations expired");
                true
            }
            Some(e) => {
                tracing::trace!(expectations = %self.name, key, add = e.add, del = e.del, "still waiting on expectations");
                false
            }
        }
    }

    /// The keys whose expectations expired unfulfilled since the last call (each expiry is
    /// returned once; a new `set_expectations` re-arms it).
    ///
    /// Not in KubeVirt: there, a key whose expected event never comes is synced again only by
    /// the informer resync (12–24 h). This project requeues it when the expectation expires
    /// (the manager polls this), so a lost or long-delayed watch event delays the key by five
    /// minutes, not by hours. docs/run-controller.md lists the difference.
    pub(crate) fn take_newly_expired(&self) -> Vec<String> {
        let now = Instant::now();
        let mut store = lock(&self.store);
        let mut keys: Vec<String> = store
            .iter_mut()
            .filter(|(_, e)| !e.fulfilled() && e.expired(now) && !e.expiry_reported)
            .map(|(k, e)| {
                e.expiry_reported = true;
                k.clone()
            })
            .collect();
        keys.sort();
        keys
    }

    /// Remove `key`'s entry (`DeleteExpectations`; used when the owner object is gone).
    pub(crate) fn delete_expectations(&self, key: &str) {
        lock(&self.store).remove(key);
    }

    /// Remove `key`'s entry if it is satisfied (fulfilled or expired); true if no entry is left.
    /// For an owner that left the cache: a relist can drop an owner that still exists, and its
    /// unfulfilled entry must keep holding it back until the awaited event (or the expiry).
    pub(crate) fn delete_expectations_if_satisfied(&self, key: &str) -> bool {
        let now = Instant::now();
        let mut store = lock(&self.store);
        match store.get(key) {
            Some(e) if !e.fulfilled() && !e.expired(now) => false,
            _ => {
                store.remove(key);
                true
            }
        }
    }

    /// Replace `key`'s entry with `(add, del)` and a fresh timestamp (`SetExpectations`,
    /// expectations.go:161-168).
    pub(crate) fn set_expectations(&self, key: &str, add: i64, del: i64) {
        let entry = Entry {
            add,
            del,
            timestamp: Instant::now(),
            timeout: self.timeout,
            expiry_reported: false,
        };
        tracing::trace!(expectations = %self.name, key, add, del, "setting expectations");
        lock(&self.store).insert(key.to_string(), entry);
    }

    /// `set_expectations(key, adds, 0)` (`ExpectCreations`): overwrites any pending deletions.
    pub(crate) fn expect_creations(&self, key: &str, adds: i64) {
        self.set_expectations(key, adds, 0);
    }

    /// `set_expectations(key, 0, dels)` (`ExpectDeletions`): overwrites any pending creations.
    pub(crate) fn expect_deletions(&self, key: &str, dels: i64) {
        self.set_expectations(key, 0, dels);
    }

    /// Subtract `add`/`del` from an existing entry (`LowerExpectations`); no entry → no-op.
    /// Counters may go negative. The timestamp is not refreshed.
    pub(crate) fn lower_expectations(&self, key: &str, add: i64, del: i64) {
        if let Some(e) = lock(&self.store).get_mut(key) {
            e.add = e.add.saturating_sub(add);
            e.del = e.del.saturating_sub(del);
        }
    }

    /// Add `add`/`del` to an existing entry (`RaiseExpectations`); no entry → no-op. The
    /// timestamp is not refreshed.
    #[cfg(test)]
    pub(crate) fn raise_expectations(&self, key: &str, add: i64, del: i64) {
        if let Some(e) = lock(&self.store).get_mut(key) {
            e.add = e.add.saturating_add(add);
            e.del = e.del.saturating_add(del);
        }
    }

    /// One expected creation was observed (`CreationObserved`): add −= 1.
    pub(crate) fn creation_observed(&self, key: &str) {
        self.lower_expectations(key, 1, 0);
    }

    /// One expected deletion was observed (`DeletionObserved`): del −= 1.
    pub(crate) fn deletion_observed(&self, key: &str) {
        self.lower_expectations(key, 0, 1);
    }

    /// Sum of the `add` counters of all entries (`AllPendingCreations`).
    #[cfg(test)]
    pub(crate) fn all_pending_creations(&self) -> i64 {
        lock(&self.store).values().map(|e| e.add).sum()
    }

    /// Every entry, sorted by key.
    pub(crate) fn snapshot(&self) -> ExpectationsSnapshot {
        self.snapshot_with(&HashMap::new())
    }

    /// The entry of one key only (zero or one entry), for `/debug/state?key=`.
    pub(crate) fn key_snapshot(&self, key: &str) -> ExpectationsSnapshot {
        self.key_snapshot_with(key, None)
    }

    fn key_snapshot_with(
        &self,
        key: &str,
        uids: Option<&BTreeSet<String>>,
    ) -> ExpectationsSnapshot {
        let now = Instant::now();
        let entry = lock(&self.store).get(key).copied();
        ExpectationsSnapshot {
            name: self.name.to_string(),
            entries: entry
                .map(|e| entry_view(key.to_string(), e, now, uids))
                .into_iter()
                .collect(),
        }
    }

    fn snapshot_with(&self, uids: &HashMap<String, BTreeSet<String>>) -> ExpectationsSnapshot {
        let now = Instant::now();
        let entries: BTreeMap<String, Entry> = lock(&self.store)
            .iter()
            .map(|(k, e)| (k.clone(), *e))
            .collect();
        ExpectationsSnapshot {
            name: self.name.to_string(),
            entries: entries
                .into_iter()
                .map(|(key, e)| {
                    let uids = uids.get(&key);
                    entry_view(key, e, now, uids)
                })
                .collect(),
        }
    }
}

fn entry_view(
    key: String,
    e: Entry,
    now: Instant,
    uids: Option<&BTreeSet<String>>,
) -> ExpectationEntry {
    ExpectationEntry {
        add: e.add,
        del: e.del,
        age_seconds: e.age(now).as_secs_f64(),
        fulfilled: e.fulfilled(),
        expired: e.expired(now),
        satisfied: e.fulfilled() || e.expired(now),
        expected_deletions: uids
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default(),
        key,
    }
}

/// [`ControllerExpectations`] that also remembers *which* deletions it expects
/// (`UIDTrackingControllerExpectations`, expectations.go:271-368), so that an object seen
/// first with a deletionTimestamp and later deleted is counted once.
///
/// The tracked "UIDs" are object keys `namespace/name` in KubeVirt (pkg/controller/
/// controller.go:182-196).
#[derive(Debug, Clone)]
pub struct UidTrackingControllerExpectations {
    expectations: ControllerExpectations,
    uids: Arc<Mutex<HashMap<String, BTreeSet<String>>>>,
}

impl UidTrackingControllerExpectations {
    /// An empty store named `name`.
    pub(crate) fn new(name: impl Into<String>) -> Self {
        Self {
            expectations: ControllerExpectations::new(name),
            uids: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The same store honouring entries for `timeout` ([`ControllerExpectations::with_timeout`]).
    pub(crate) fn with_timeout(mut self, timeout: Duration) -> Self {
        self.expectations = self.expectations.with_timeout(timeout);
        self
    }

    /// The counters without the deletion-key tracking.
    #[cfg(test)]
    pub(crate) fn expectations(&self) -> &ControllerExpectations {
        &self.expectations
    }

    /// The deletion keys still expected for `key` (`GetUIDs`), if any were recorded.
    #[cfg(test)]
    pub(crate) fn get_uids(&self, key: &str) -> Option<BTreeSet<String>> {
        lock(&self.uids).get(key).cloned()
    }

    /// Expect the deletion of exactly `delete_keys` (`ExpectDeletions`): replaces the tracked set
    /// and sets the entry to (0, set size) with a fresh timestamp. Replacing a non-empty set is
    /// logged as an error, as in KubeVirt.
    pub(crate) fn expect_deletions(&self, key: &str, delete_keys: Vec<String>) {
        let mut uids = lock(&self.uids);
        if let Some(existing) = uids.get(key).filter(|s| !s.is_empty()) {
            tracing::error!(expectations = %self.expectations.name, key, ?existing, "clobbering existing delete keys");
        }
        let set: BTreeSet<String> = delete_keys.into_iter().collect();
        let n = i64::try_from(set.len()).unwrap_or(i64::MAX);
        uids.insert(key.to_string(), set);
        self.expectations.expect_deletions(key, n);
    }

    /// Add one expected deletion key (`AddExpectedDeletion`): the entry becomes (0, set size)
    /// with a fresh timestamp — pending creations are overwritten, as in KubeVirt.
    #[cfg(test)]
    pub(crate) fn add_expected_deletion(&self, key: &str, delete_key: String) {
        let mut uids = lock(&self.uids);
        let set = uids.entry(key.to_string()).or_default();
        set.insert(delete_key);
        let n = i64::try_from(set.len()).unwrap_or(i64::MAX);
        self.expectations.expect_deletions(key, n);
    }

    /// `delete_key` was deleted (`DeletionObserved`): decrements del and forgets the key only
    /// if it was expected; otherwise nothing happens.
    pub(crate) fn deletion_observed(&self, key: &str, delete_key: &str) {
        let mut uids = lock(&self.uids);
        if let Some(set) = uids.get_mut(key)
            && set.remove(delete_key)
        {
            self.expectations.deletion_observed(key);
        }
    }

    /// Remove the counters and the tracked keys of `key` (`DeleteExpectations`).
    pub(crate) fn delete_expectations(&self, key: &str) {
        let mut uids = lock(&self.uids);
        self.expectations.delete_expectations(key);
        uids.remove(key);
    }

    /// [`ControllerExpectations::delete_expectations_if_satisfied`], with the tracked keys.
    pub(crate) fn delete_expectations_if_satisfied(&self, key: &str) -> bool {
        let mut uids = lock(&self.uids);
        let deleted = self.expectations.delete_expectations_if_satisfied(key);
        if deleted {
            uids.remove(key);
        }
        deleted
    }

    /// See [`ControllerExpectations::take_newly_expired`].
    pub(crate) fn take_newly_expired(&self) -> Vec<String> {
        self.expectations.take_newly_expired()
    }

    /// See [`ControllerExpectations::satisfied_expectations`].
    pub(crate) fn satisfied_expectations(&self, key: &str) -> bool {
        self.expectations.satisfied_expectations(key)
    }

    /// See [`ControllerExpectations::get_expectations`].
    pub(crate) fn get_expectations(&self, key: &str) -> Option<(i64, i64)> {
        self.expectations.get_expectations(key)
    }

    /// See [`ControllerExpectations::expect_creations`] (the tracked keys are untouched).
    pub(crate) fn expect_creations(&self, key: &str, adds: i64) {
        self.expectations.expect_creations(key, adds);
    }

    /// See [`ControllerExpectations::creation_observed`].
    pub(crate) fn creation_observed(&self, key: &str) {
        self.expectations.creation_observed(key);
    }

    /// See [`ControllerExpectations::lower_expectations`] (the tracked keys are untouched).
    #[cfg(test)]
    pub(crate) fn lower_expectations(&self, key: &str, add: i64, del: i64) {
        self.expectations.lower_expectations(key, add, del);
    }

    /// Every entry with its still-expected deletion keys, sorted by key.
    pub(crate) fn snapshot(&self) -> ExpectationsSnapshot {
        let uids = lock(&self.uids).clone();
        self.expectations.snapshot_with(&uids)
    }

    /// The entry of one key with its still-expected deletion keys, for `/debug/state?key=`.
    pub(crate) fn key_snapshot(&self, key: &str) -> ExpectationsSnapshot {
        let uids = lock(&self.uids).get(key).cloned();
        self.expectations.key_snapshot_with(key, uids.as_ref())
    }
}

/// Serializable view of an expectations store.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectationsSnapshot {
    /// Store name.
    pub name: String,
    /// Entries sorted by key.
    pub entries: Vec<ExpectationEntry>,
}

/// One controller key's expectations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectationEntry {
    /// Controller key `namespace/name`.
    pub key: String,
    /// Creations still expected (may be negative).
    pub add: i64,
    /// Deletions still expected (may be negative).
    pub del: i64,
    /// Seconds since the entry was last set.
    pub age_seconds: f64,
    /// add ≤ 0 and del ≤ 0.
    pub fulfilled: bool,
    /// Older than [`EXPECTATIONS_TIMEOUT`].
    pub expired: bool,
    /// `fulfilled || expired`: what `satisfied_expectations` answers for this key.
    pub satisfied: bool,
    /// Deletion keys still expected (UID-tracking stores only), sorted.
    pub expected_deletions: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn only_satisfied_entries_go_with_their_owner() {
        let u = UidTrackingControllerExpectations::new("t");
        u.expect_creations("ns/a", 1);
        assert!(
            !u.delete_expectations_if_satisfied("ns/a"),
            "a creation is awaited"
        );
        assert_eq!(u.expectations().get_expectations("ns/a"), Some((1, 0)));
        u.creation_observed("ns/a");
        assert!(u.delete_expectations_if_satisfied("ns/a"));
        assert_eq!(u.expectations().get_expectations("ns/a"), None);
        u.expect_deletions("ns/b", vec!["ns/p".into()]);
        tokio::time::advance(EXPECTATIONS_TIMEOUT + Duration::from_millis(1)).await;
        assert!(u.delete_expectations_if_satisfied("ns/b"), "expired");
        assert_eq!(u.get_uids("ns/b"), None);
        assert!(u.delete_expectations_if_satisfied("ns/none"));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unfulfilled_expectation_is_reported_once_when_it_expires() {
        let e = ControllerExpectations::new("vmi-pod");
        e.expect_creations("ns/a", 1);
        e.expect_creations("ns/b", 1);
        e.creation_observed("ns/b");
        assert!(e.take_newly_expired().is_empty(), "nothing expired yet");
        tokio::time::advance(EXPECTATIONS_TIMEOUT).await;
        assert!(
            e.take_newly_expired().is_empty(),
            "expiry is strictly after the timeout"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(
            e.take_newly_expired(),
            ["ns/a"],
            "fulfilled ns/b is not requeued"
        );
        assert!(e.take_newly_expired().is_empty(), "reported once");
        // A new expectation re-arms the report.
        e.expect_creations("ns/a", 1);
        tokio::time::advance(EXPECTATIONS_TIMEOUT + Duration::from_millis(1)).await;
        assert_eq!(e.take_newly_expired(), ["ns/a"]);
        let u = UidTrackingControllerExpectations::new("vm-vmi");
        u.expect_creations("ns/c", 1);
        tokio::time::advance(EXPECTATIONS_TIMEOUT + Duration::from_millis(1)).await;
        assert_eq!(u.take_newly_expired(), ["ns/c"]);
    }
    use tokio::time::advance;

    const K: &str = "default/vm1";

    #[test]
    fn no_entry_is_satisfied() {
        let e = ControllerExpectations::new("vmi");
        assert!(e.satisfied_expectations(K));
        assert_eq!(e.get_expectations(K), None);
        // Observations without an entry are ignored.
        e.creation_observed(K);
        e.raise_expectations(K, 1, 1);
        assert_eq!(e.get_expectations(K), None);
    }

    #[test]
    fn creations_count_down_and_can_go_negative() {
        let e = ControllerExpectations::new("vmi");
        e.expect_creations(K, 2);
        assert!(!e.satisfied_expectations(K));
        e.creation_observed(K);
        assert!(!e.satisfied_expectations(K));
        e.creation_observed(K);
        assert!(e.satisfied_expectations(K));
        e.creation_observed(K);
        assert_eq!(e.get_expectations(K), Some((-1, 0)));
        assert!(e.satisfied_expectations(K));
        // Negative counts absorb a later raise.
        e.raise_expectations(K, 1, 0);
        assert_eq!(e.get_expectations(K), Some((0, 0)));
        assert!(e.satisfied_expectations(K));
    }

    #[test]
    fn expect_overwrites_and_set_lower_raise() {
        let e = ControllerExpectations::new("vmi");
        e.expect_creations(K, 3);
        e.expect_deletions(K, 1);
        assert_eq!(e.get_expectations(K), Some((0, 1)));
        e.set_expectations(K, 1, 0);
        assert_eq!(e.get_expectations(K), Some((1, 0)));
        e.raise_expectations(K, 2, 3);
        assert_eq!(e.get_expectations(K), Some((3, 3)));
        e.lower_expectations(K, 3, 2);
        assert_eq!(e.get_expectations(K), Some((0, 1)));
        assert!(!e.satisfied_expectations(K));
        e.deletion_observed(K);
        assert!(e.satisfied_expectations(K));
        e.expect_creations("other/x", 4);
        assert_eq!(e.all_pending_creations(), 4);
        e.delete_expectations(K);
        assert_eq!(e.get_expectations(K), None);
        assert!(e.satisfied_expectations(K));
    }

    #[tokio::test(start_paused = true)]
    async fn expire_after_five_minutes_but_entry_kept() {
        let e = ControllerExpectations::new("vmi");
        e.expect_creations(K, 1);
        advance(EXPECTATIONS_TIMEOUT).await;
        // Exactly 5 minutes is not yet expired (strictly greater).
        assert!(!e.satisfied_expectations(K));
        advance(Duration::from_millis(1)).await;
        assert!(e.satisfied_expectations(K));
        assert_eq!(e.get_expectations(K), Some((1, 0)));
        let snap = e.snapshot();
        assert_eq!(snap.entries.len(), 1);
        assert!(snap.entries[0].expired);
        assert!(!snap.entries[0].fulfilled);
        assert!(snap.entries[0].satisfied);
        // Lowering does not refresh the timestamp; setting does.
        e.raise_expectations(K, 1, 0);
        assert!(e.satisfied_expectations(K));
        e.expect_creations(K, 1);
        assert!(!e.satisfied_expectations(K));
    }

    #[test]
    fn clones_share_the_store() {
        let a = ControllerExpectations::new("vmi");
        let b = a.clone();
        a.expect_creations(K, 1);
        assert!(!b.satisfied_expectations(K));
        b.creation_observed(K);
        assert!(a.satisfied_expectations(K));
    }

    #[test]
    fn uid_tracking_counts_each_key_once() {
        let e = UidTrackingControllerExpectations::new("vmi");
        e.expect_deletions(K, vec!["default/vm1".into(), "default/vm1-extra".into()]);
        assert_eq!(e.get_expectations(K), Some((0, 2)));
        assert!(!e.satisfied_expectations(K));
        // Seen with a deletionTimestamp, then actually deleted: counted once.
        e.deletion_observed(K, "default/vm1");
        e.deletion_observed(K, "default/vm1");
        assert_eq!(e.get_expectations(K), Some((0, 1)));
        // Unknown keys are ignored.
        e.deletion_observed(K, "default/unrelated");
        assert_eq!(e.get_expectations(K), Some((0, 1)));
        e.deletion_observed(K, "default/vm1-extra");
        assert!(e.satisfied_expectations(K));
        assert_eq!(e.get_uids(K), Some(BTreeSet::new()));
    }

    #[test]
    fn uid_tracking_add_expected_deletion_and_delete() {
        let e = UidTrackingControllerExpectations::new("vmi");
        e.expect_creations(K, 1);
        e.add_expected_deletion(K, "default/a".into());
        // AddExpectedDeletion goes through ExpectDeletions: pending creations are overwritten.
        assert_eq!(e.get_expectations(K), Some((0, 1)));
        e.add_expected_deletion(K, "default/b".into());
        assert_eq!(e.get_expectations(K), Some((0, 2)));
        let snap = e.snapshot();
        assert_eq!(
            snap.entries[0].expected_deletions,
            vec!["default/a".to_string(), "default/b".to_string()]
        );
        // Plain lower does not touch the tracked keys.
        e.lower_expectations(K, 0, 2);
        assert!(e.satisfied_expectations(K));
        assert_eq!(e.get_uids(K).map(|s| s.len()), Some(2));
        e.delete_expectations(K);
        assert_eq!(e.get_expectations(K), None);
        assert_eq!(e.get_uids(K), None);
        // After deletion, observing is a no-op.
        e.deletion_observed(K, "default/a");
        assert_eq!(e.get_expectations(K), None);
    }

    #[test]
    fn expect_deletions_dedups_and_replaces_set() {
        let e = UidTrackingControllerExpectations::new("pods");
        e.expect_deletions(K, vec!["a".into(), "a".into()]);
        assert_eq!(e.get_expectations(K), Some((0, 1)));
        e.expect_deletions(K, vec!["b".into(), "c".into()]);
        assert_eq!(e.get_expectations(K), Some((0, 2)));
        e.deletion_observed(K, "a");
        assert_eq!(e.get_expectations(K), Some((0, 2)));
    }

    #[tokio::test(start_paused = true)]
    async fn snapshot_serializes_camel_case_sorted() {
        let e = UidTrackingControllerExpectations::new("vmi");
        e.expect_creations("ns/b", 1);
        advance(Duration::from_secs(2)).await;
        e.expect_deletions("ns/a", vec!["ns/a".into()]);
        let v = serde_json::to_value(e.snapshot()).unwrap();
        assert_eq!(v["name"], "vmi");
        assert_eq!(v["entries"][0]["key"], "ns/a");
        assert_eq!(v["entries"][0]["expectedDeletions"][0], "ns/a");
        assert_eq!(v["entries"][1]["key"], "ns/b");
        assert_eq!(v["entries"][1]["ageSeconds"], 2.0);
        assert_eq!(v["entries"][1]["add"], 1);
        assert_eq!(v["entries"][1]["expired"], false);
    }
}
