//! A client-go-faithful rate-limited work queue of object keys (`namespace/name`).
//!
//! Semantics follow client-go `util/workqueue` (queue.go, delaying_queue.go,
//! rate_limiting_queue.go, metrics.go):
//!
//! - **dirty set**: a key added while queued is not queued twice;
//! - **processing set**: a key handed out by [`WorkQueue::get`] is never handed to a second
//!   worker until [`WorkQueue::done`]; a key added meanwhile is remembered and queued again on
//!   `done`;
//! - **delaying**: [`WorkQueue::add_after`] parks the key until its ready time; parking an
//!   already-parked key keeps the earlier of the two times (`waitingForQueue`/`insert`);
//! - **rate limiting**: [`WorkQueue::add_rate_limited`] = `add_after(key, limiter.when(key))`,
//!   [`WorkQueue::forget`] and [`WorkQueue::num_requeues`] delegate to the [`RateLimiter`];
//! - **shutdown**: new adds are ignored, parked keys are dropped, workers keep getting the keys
//!   still queued and get `None` once the queue is empty; [`WorkQueue::shut_down_with_drain`]
//!   also waits until no key is in flight.
//!
//! Unlike client-go there is no background goroutine moving parked keys: the queue promotes
//! ready keys whenever it is touched (`get`, `len`, `snapshot`, metric refresh) and waiting
//! getters sleep until the earliest ready time. A promoted key counts as added at its ready
//! time, so the queue-duration metric is unaffected. Time is `tokio::time::Instant`, so tests
//! run under tokio's paused clock; the add and start stamps come from the time-stamp counter
//! mapped onto it (`clock.rs`), ready times and sleeps from tokio's clock.
//!
//! Cost of the hot path (docs/performance.md "Work queue"): the three client-go collections
//! are one key table (`keys.rs`: one hash per add, each key stored once); a `get` that finds a
//! key takes the lock once and touches no `Notify`; wake-ups go only to getters that sleep,
//! one at a time (the woken getter wakes the next if keys remain, like client-go's
//! `cond.Signal` per add but without a wake-up per add while a woken worker is on its way).
//!
//! [`run_workers`] runs KubeVirt's worker loop (vm.go:336-355) over a queue.

mod clock;
mod keys;
pub(crate) mod rate_limiter;
mod workers;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Display;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;
use tokio::time::Instant;

pub(crate) use rate_limiter::{BucketRateLimiter, RateLimiter, default_controller_rate_limiter};
pub(crate) use workers::{Requeue, run_workers};

use crate::runtime::metrics::{QueueMetrics, UnfinishedWork, WorkqueueMetrics};
use clock::StampClock;
use keys::{Added, KeyTable};
use rate_limiter::lock;

/// What a queue key must be: `String` (`namespace/name`) in practice.
pub trait QueueKey: Clone + Eq + Hash + Ord + Display + Send + Sync + 'static {}
impl<T: Clone + Eq + Hash + Ord + Display + Send + Sync + 'static> QueueKey for T {}

/// A rate-limited delaying work queue (client-go `TypedRateLimitingInterface`). Cloning is
/// cheap and every clone is the same queue.
pub struct WorkQueue<K = String> {
    inner: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<K: QueueKey> std::fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.inner.state();
        f.debug_struct("WorkQueue")
            .field("name", &self.inner.name)
            .field("queued", &st.keys.queued_len())
            .field("processing", &st.keys.in_flight_len())
            .field("waiting", &st.waiting.len())
            .field("shutting_down", &st.shutting_down)
            .finish()
    }
}

/// Builder for a [`WorkQueue`]: name, rate limiter (default: client-go's default controller
/// rate limiter) and optional metrics.
pub struct WorkQueueBuilder<K> {
    name: String,
    rate_limiter: Option<Box<dyn RateLimiter<K>>>,
    metrics: Option<WorkqueueMetrics>,
}

impl<K: QueueKey> WorkQueueBuilder<K> {
    /// Use `limiter` instead of [`default_controller_rate_limiter`].
    #[cfg(test)]
    pub(crate) fn rate_limiter(mut self, limiter: impl RateLimiter<K> + 'static) -> Self {
        self.rate_limiter = Some(Box::new(limiter));
        self
    }

    /// Report KubeVirt's `kubevirt_workqueue_*` metrics with label `name` = the queue name.
    pub(crate) fn metrics(mut self, metrics: &WorkqueueMetrics) -> Self {
        self.metrics = Some(metrics.clone());
        self
    }

    /// Build the queue.
    pub fn build(self) -> WorkQueue<K> {
        let queue_metrics = self.metrics.as_ref().map(|m| m.for_queue(&self.name));
        let inner = Arc::new(Inner {
            name: self.name,
            state: Mutex::new(State::default()),
            items: Notify::new(),
            idle: Notify::new(),
            rate_limiter: self
                .rate_limiter
                .unwrap_or_else(|| Box::new(default_controller_rate_limiter())),
            metrics: queue_metrics,
            rate_limited: AtomicUsize::new(0),
            stamps: StampClock::new(),
        });
        if let Some(m) = &self.metrics {
            let weak: Weak<Inner<K>> = Arc::downgrade(&inner);
            m.track(weak);
        }
        WorkQueue { inner }
    }
}

struct Inner<K> {
    name: String,
    state: Mutex<State<K>>,
    /// Wakes getters: a key was queued, a parked key got an earlier ready time, or shutdown.
    items: Notify,
    /// Wakes `shut_down_with_drain`: the processing set became empty, or drain was cancelled.
    idle: Notify,
    rate_limiter: Box<dyn RateLimiter<K>>,
    metrics: Option<QueueMetrics>,
    /// `State::rate_limited.len()`, readable without the lock: `forget` of a key that was never
    /// rate-limited (the common case) does not take the lock.
    rate_limited: AtomicUsize,
    /// The add and start stamps' clock (`clock.rs`).
    stamps: StampClock,
}

/// The hasher of the queue's maps (see Cargo.toml on foldhash).
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

struct State<K> {
    /// client-go's `queue`, `dirty` and `processing`, with each key's add and start times.
    keys: KeyTable<K>,
    /// Parked keys ordered by (ready time, insertion sequence).
    waiting: BTreeMap<(Instant, u64), K>,
    waiting_by_key: FastMap<K, (Instant, u64)>,
    seq: u64,
    /// Keys passed to `add_rate_limited` since their last `forget` (for the snapshot).
    rate_limited: BTreeSet<K>,
    /// Getters that found nothing and sleep on `Inner::items` (or are about to), until they
    /// look at the state again.
    sleepers: usize,
    /// Wake-ups (`notify_one`) sent to sleepers that have not looked at the state again yet:
    /// 0 or 1 (a lower bound: every sleeper that looks again takes one off). At most one
    /// sleeper is woken at a time; whoever takes a key and leaves more queued wakes the next
    /// (a chain), so a burst of adds costs one wake-up per worker actually needed rather than
    /// one per add, and an add with nobody asleep costs none. A key is never queued with a
    /// sleeper and no wake-up on its way: see `wake_needed`.
    woken: usize,
    /// Accepted adds since the queue was made (client-go's `adds_total` for this queue, kept
    /// whether or not metrics are registered; for the snapshot).
    adds: u64,
    shutting_down: bool,
    drain: bool,
}

impl<K> Default for State<K> {
    fn default() -> Self {
        Self {
            keys: KeyTable::default(),
            waiting: BTreeMap::new(),
            waiting_by_key: FastMap::default(),
            seq: 0,
            rate_limited: BTreeSet::new(),
            sleepers: 0,
            woken: 0,
            adds: 0,
            shutting_down: false,
            drain: false,
        }
    }
}

impl<K: QueueKey> Inner<K> {
    fn state(&self) -> MutexGuard<'_, State<K>> {
        lock(&self.state)
    }

    fn set_depth(&self, st: &State<K>) {
        if let Some(m) = &self.metrics {
            // client-go: +1 per accepted add, -1 per get, i.e. the size of the dirty set.
            m.depth
                .set(i64::try_from(st.keys.dirty_len()).unwrap_or(i64::MAX));
        }
    }

    /// client-go `Add` under the lock; `added_at` is the logical add time. Returns whether the
    /// key was pushed onto the queue (a getter should be woken).
    fn add_locked(&self, st: &mut State<K>, key: K, added_at: Instant) -> bool {
        if st.shutting_down {
            return false;
        }
        let added = st.keys.add(key, added_at);
        if added == Added::AlreadyDirty {
            return false;
        }
        st.adds += 1;
        if let Some(m) = &self.metrics {
            m.adds.inc();
        }
        self.set_depth(st);
        added == Added::Queued
    }

    /// Whether the caller, having queued a key (`pushed`), must wake a sleeper: some getter
    /// sleeps and no wake-up is on its way (the woken getter takes a key and, if more are
    /// queued, wakes the next itself). Counts the wake-up the caller must then send.
    fn wake_needed(st: &mut State<K>, pushed: bool) -> bool {
        let needed = pushed && st.woken == 0 && st.sleepers > 0;
        if needed {
            st.woken += 1;
        }
        needed
    }

    /// Move parked keys whose ready time has come onto the queue (client-go `waitingLoop`).
    /// `now` is tokio's clock, read here when the caller has not and a key is parked. A
    /// promoted key's add stamp is its ready time, on the stamps' clock.
    fn promote_ready(&self, st: &mut State<K>, now: Option<Instant>) -> bool {
        if st.waiting.is_empty() {
            return false;
        }
        let now = now.unwrap_or_else(Instant::now);
        let mut stamp_now = None;
        let mut pushed = false;
        while let Some(entry) = st.waiting.first_entry() {
            let (ready_at, _) = *entry.key();
            if ready_at > now {
                break;
            }
            let key = entry.remove();
            st.waiting_by_key.remove(&key);
            let stamp_now = *stamp_now.get_or_insert_with(|| self.stamps.now());
            let added_at = stamp_now.checked_sub(now - ready_at).unwrap_or(stamp_now);
            pushed |= self.add_locked(st, key, added_at);
        }
        pushed
    }

    fn earliest_ready(st: &State<K>) -> Option<Instant> {
        st.waiting.first_key_value().map(|((t, _), _)| *t)
    }

    fn pop_locked(&self, st: &mut State<K>, now: Instant) -> Option<K> {
        let (key, added) = st.keys.pop(now)?;
        if let Some(m) = &self.metrics {
            m.latency
                .observe(now.saturating_duration_since(added).as_secs_f64());
        }
        self.set_depth(st);
        Some(key)
    }

    /// One attempt of `get` under the lock: `Some(Some(key))` when a key is ready,
    /// `Some(None)` when shutting down with nothing queued, `None` when the getter must wait.
    /// Wakes the next sleeper when keys remain queued (see `State::woken`).
    /// `stamp` is the stamps' clock, for the start time.
    fn try_take(&self, st: &mut State<K>, stamp: Instant) -> Option<Option<K>> {
        self.promote_ready(st, None);
        if let Some(key) = self.pop_locked(st, stamp) {
            if st.keys.queued_len() > 0 && Self::wake_needed(st, true) {
                // More keys are queued and getters sleep: pass the baton to one of them.
                self.items.notify_one();
            }
            return Some(Some(key));
        }
        st.shutting_down.then_some(None)
    }
}

impl<K: QueueKey> UnfinishedWork for Inner<K> {
    fn update_unfinished_work(&self) {
        let now = self.stamps.now();
        let pushed = {
            let mut st = self.state();
            if st.shutting_down {
                return;
            }
            let pushed = self.promote_ready(&mut st, None);
            if let Some(m) = &self.metrics {
                let mut total = 0.0;
                let mut oldest: f64 = 0.0;
                for started in st.keys.in_flight().filter_map(|e| e.started) {
                    let age = now.saturating_duration_since(started).as_secs_f64();
                    total += age;
                    oldest = oldest.max(age);
                }
                m.unfinished_work.set(total);
                m.longest_running.set(oldest);
            }
            Self::wake_needed(&mut st, pushed)
        };
        if pushed {
            self.items.notify_one();
        }
    }
}

impl WorkQueue<String> {
    /// A queue of `namespace/name` keys named `name` with the default controller rate limiter
    /// and no metrics.
    pub fn new(name: impl Into<String>) -> Self {
        Self::builder(name).build()
    }
}

impl<K: QueueKey> WorkQueue<K> {
    /// Start building a queue named `name` (the `name` metric label, e.g. `virt-controller-vm`).
    pub fn builder(name: impl Into<String>) -> WorkQueueBuilder<K> {
        WorkQueueBuilder {
            name: name.into(),
            rate_limiter: None,
            metrics: None,
        }
    }

    /// The queue name.
    pub(crate) fn name(&self) -> &str {
        &self.inner.name
    }

    /// Mark `key` as needing processing (client-go `Add`). Ignored while shutting down or when
    /// the key is already queued; a key currently being processed is queued again on `done`.
    pub fn add(&self, key: K) {
        let now = self.inner.stamps.now();
        let wake = {
            let mut st = self.inner.state();
            let pushed = self.inner.add_locked(&mut st, key, now);
            Inner::wake_needed(&mut st, pushed)
        };
        if wake {
            self.inner.items.notify_one();
        }
    }

    /// Add `key` once `delay` has passed (client-go `AddAfter`). A zero delay adds now. If the
    /// key is already parked, the earlier ready time wins. Counts one
    /// `kubevirt_workqueue_retries_total`. Ignored while shutting down.
    pub(crate) fn add_after(&self, key: K, delay: Duration) {
        let now = Instant::now();
        let mut st = self.inner.state();
        if st.shutting_down {
            return;
        }
        if let Some(m) = &self.inner.metrics {
            m.retries.inc();
        }
        if delay.is_zero() {
            let pushed = self.inner.add_locked(&mut st, key, self.inner.stamps.now());
            let wake = Inner::wake_needed(&mut st, pushed);
            drop(st);
            if wake {
                self.inner.items.notify_one();
            }
            return;
        }
        let ready_at = now.checked_add(delay).unwrap_or_else(far_future);
        if let Some(&(existing, seq)) = st.waiting_by_key.get(&key) {
            if existing <= ready_at {
                return;
            }
            st.waiting.remove(&(existing, seq));
        }
        let seq = st.seq;
        st.seq += 1;
        st.waiting.insert((ready_at, seq), key.clone());
        st.waiting_by_key.insert(key, (ready_at, seq));
        let is_earliest = Inner::earliest_ready(&st) == Some(ready_at);
        drop(st);
        if is_earliest {
            // Sleeping getters must recompute their deadline.
            self.inner.items.notify_waiters();
        }
    }

    /// Add `key` after the rate limiter's delay for it (client-go `AddRateLimited`); counts a
    /// failure in the limiter.
    pub(crate) fn add_rate_limited(&self, key: K) {
        let delay = self.inner.rate_limiter.when(&key);
        {
            let mut st = self.inner.state();
            if !st.shutting_down {
                st.rate_limited.insert(key.clone());
                self.inner
                    .rate_limited
                    .store(st.rate_limited.len(), Ordering::Release);
            }
        }
        self.add_after(key, delay);
    }

    /// Stop tracking `key`'s failures in the rate limiter (client-go `Forget`). It does not
    /// remove the key from the queue; `done` must still be called.
    pub fn forget(&self, key: &K) {
        self.inner.rate_limiter.forget(key);
        // Zero means no key was rate-limited when we looked: nothing to remove. A concurrent
        // `add_rate_limited` of this key is then ordered after this `forget`, as if it had
        // taken the lock after us.
        if self.inner.rate_limited.load(Ordering::Acquire) > 0 {
            let mut st = self.inner.state();
            st.rate_limited.remove(key);
            self.inner
                .rate_limited
                .store(st.rate_limited.len(), Ordering::Release);
        }
    }

    /// How many times `key` was rate-limited since its last `forget` (client-go `NumRequeues`).
    #[cfg(test)]
    pub(crate) fn num_requeues(&self, key: &K) -> usize {
        self.inner.rate_limiter.num_requeues(key)
    }

    /// Wait for the next key (client-go `Get`). Returns `None` once the queue is shutting down
    /// and empty. The caller owns the key until it calls [`WorkQueue::done`].
    ///
    /// Cancel-safe: dropping the future before it completes loses nothing.
    pub async fn get(&self) -> Option<K> {
        // Counted in `State::sleepers` from finding nothing until the next look at the state;
        // dropping the future (cancellation) uncounts it.
        let mut sleeper = Sleeper {
            inner: &self.inner,
            counted: false,
        };
        loop {
            // Made before looking at the state, so it completes on any `notify_waiters`
            // (shutdown, a parked key with an earlier ready time) after the look, even before
            // it is first polled. Cheap: nothing is registered until it is polled.
            let notified = self.inner.items.notified();
            let deadline = {
                let now = self.inner.stamps.now();
                let mut st = self.inner.state();
                sleeper.uncount(&mut st);
                if let Some(taken) = self.inner.try_take(&mut st, now) {
                    return taken;
                }
                // Counted before registering on `items`: an `add` from now on sends a
                // `notify_one`, which wakes a registered getter or leaves a permit for the
                // next one to poll (only counted getters ever poll `items`).
                st.sleepers += 1;
                sleeper.counted = true;
                Inner::earliest_ready(&st)
            };
            match deadline {
                Some(at) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// The next key if one is ready now, without waiting. `None` also when shutting down.
    #[cfg(test)]
    pub(crate) fn try_get(&self) -> Option<K> {
        let now = self.inner.stamps.now();
        let mut st = self.inner.state();
        self.inner.try_take(&mut st, now).flatten()
    }

    /// Mark `key` as processed (client-go `Done`); if it was added again meanwhile it is queued
    /// again. A key that is not in flight is ignored (client-go would queue it a second time).
    pub fn done(&self, key: &K) {
        let mut st = self.inner.state();
        let Some((started, requeued)) = st.keys.done(key) else {
            drop(st);
            tracing::warn!(queue = %self.inner.name, %key, "done() for a key that is not being processed");
            return;
        };
        if let Some(m) = &self.inner.metrics {
            m.work_duration.observe(
                self.inner
                    .stamps
                    .now()
                    .saturating_duration_since(started)
                    .as_secs_f64(),
            );
        }
        let wake = Inner::wake_needed(&mut st, requeued);
        // Only `shut_down_with_drain` waits for idleness, and it sets `drain` first.
        let idle = st.drain && st.keys.in_flight_len() == 0;
        drop(st);
        if wake {
            self.inner.items.notify_one();
        }
        if idle {
            self.inner.idle.notify_waiters();
        }
    }

    /// Number of keys queued and not in flight (client-go `Len`). Keys re-added while in flight
    /// are not counted until `done`; the depth metric counts them.
    pub fn len(&self) -> usize {
        let mut st = self.inner.state();
        let pushed = self.inner.promote_ready(&mut st, None);
        let n = st.keys.queued_len();
        let wake = Inner::wake_needed(&mut st, pushed);
        drop(st);
        if wake {
            self.inner.items.notify_one();
        }
        n
    }

    /// Whether [`WorkQueue::len`] is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stop accepting keys (client-go `ShutDown`): adds are ignored, parked keys are dropped,
    /// workers get the keys still queued and then `None`. Also stops a pending
    /// `shut_down_with_drain` from waiting.
    pub fn shut_down(&self) {
        self.begin_shut_down(false);
        self.inner.idle.notify_waiters();
    }

    /// Marks the queue shutting down (`drain`: `shut_down_with_drain` waits for the keys in
    /// flight), drops the parked keys and wakes the workers.
    fn begin_shut_down(&self, drain: bool) {
        {
            let mut st = self.inner.state();
            st.drain = drain;
            st.shutting_down = true;
            st.waiting.clear();
            st.waiting_by_key.clear();
        }
        self.inner.items.notify_waiters();
    }

    /// Like [`WorkQueue::shut_down`] but waits until no key is in flight (client-go
    /// `ShutDownWithDrain`). Workers must call `done` for every key they got, or this waits
    /// forever; a later `shut_down` stops the wait.
    #[cfg(test)]
    pub(crate) async fn shut_down_with_drain(&self) {
        self.begin_shut_down(true);
        loop {
            let idle = self.inner.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            {
                let st = self.inner.state();
                if st.keys.in_flight_len() == 0 || !st.drain {
                    return;
                }
            }
            idle.await;
        }
    }

    /// Whether `shut_down` or `shut_down_with_drain` was called (client-go `ShuttingDown`).
    #[cfg(test)]
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.inner.state().shutting_down
    }

    /// The view of [`WorkQueue::snapshot`] restricted to one key: `depth` is still the whole
    /// queue's, the lists hold at most this key's entry. Constant cost whatever the queue's size
    /// (hash lookups only), for `/debug/state?key=`.
    pub(crate) fn key_snapshot(&self, key: &K) -> QueueSnapshot {
        let clock = SnapshotClock::now(&self.inner.stamps);
        let (snap, pushed, rate_limited) = {
            let mut st = self.inner.state();
            let pushed = self.inner.promote_ready(&mut st, Some(clock.now));
            let entry = st.keys.get(key);
            let queued = match entry {
                Some(e) if e.dirty && e.started.is_none() => vec![clock.queued(key, e.added_at)],
                _ => Vec::new(),
            };
            let in_flight = entry
                .and_then(|e| {
                    e.started
                        .map(|started| clock.in_flight(key, started, e.dirty))
                })
                .into_iter()
                .collect();
            let waiting = st
                .waiting_by_key
                .get(key)
                .map(|(ready, _)| clock.waiting(key, *ready))
                .into_iter()
                .collect();
            let snap = self.snapshot_of(&st, queued, in_flight, waiting);
            let wake = Inner::wake_needed(&mut st, pushed);
            (snap, wake, st.rate_limited.contains(key))
        };
        self.with_retries(snap, pushed, rate_limited.then_some(key))
    }

    /// Per-key view of the queue for the debug endpoint and the inspector.
    pub fn snapshot(&self) -> QueueSnapshot {
        let clock = SnapshotClock::now(&self.inner.stamps);
        let (snap, pushed, rate_limited) = {
            let mut st = self.inner.state();
            let pushed = self.inner.promote_ready(&mut st, Some(clock.now));
            let queued = st
                .keys
                .queued()
                .map(|e| clock.queued(&e.key, e.added_at))
                .collect();
            let mut in_flight: Vec<InFlightKey> = st
                .keys
                .in_flight()
                .filter_map(|e| {
                    e.started
                        .map(|started| clock.in_flight(&e.key, started, e.dirty))
                })
                .collect();
            in_flight.sort_by(|a, b| a.key.cmp(&b.key));
            let waiting = st
                .waiting
                .iter()
                .map(|((ready, _), k)| clock.waiting(k, *ready))
                .collect();
            let snap = self.snapshot_of(&st, queued, in_flight, waiting);
            let rate_limited: Vec<K> = st.rate_limited.iter().cloned().collect();
            let wake = Inner::wake_needed(&mut st, pushed);
            (snap, wake, rate_limited)
        };
        self.with_retries(snap, pushed, &rate_limited)
    }

    /// A snapshot of the queue as `st` says, with these lists and no retries (nor rate-limiter
    /// wait) yet.
    fn snapshot_of(
        &self,
        st: &State<K>,
        queued: Vec<QueuedKey>,
        in_flight: Vec<InFlightKey>,
        waiting: Vec<WaitingKey>,
    ) -> QueueSnapshot {
        QueueSnapshot {
            name: self.inner.name.clone(),
            shutting_down: st.shutting_down,
            depth: st.keys.queued_len(),
            adds_total: st.adds,
            queued,
            in_flight,
            waiting,
            retries: Vec::new(),
            rate_limiter_wait_seconds: 0.0,
        }
    }

    /// `snap` with the failure counts of the `rate_limited` keys and the rate limiter's shared
    /// wait, read once the state lock is released (waking a worker first when promoting parked
    /// keys `pushed` some for a sleeping getter).
    fn with_retries<'k>(
        &self,
        snap: QueueSnapshot,
        pushed: bool,
        rate_limited: impl IntoIterator<Item = &'k K>,
    ) -> QueueSnapshot {
        if pushed {
            self.inner.items.notify_one();
        }
        let retries = rate_limited
            .into_iter()
            .filter_map(|k| {
                let n = self.inner.rate_limiter.num_requeues(k);
                (n > 0).then(|| KeyRetries {
                    key: k.to_string(),
                    num_requeues: n,
                })
            })
            .collect();
        QueueSnapshot {
            retries,
            rate_limiter_wait_seconds: self.inner.rate_limiter.shared_wait().as_secs_f64(),
            ..snap
        }
    }
}

/// A getter's place in `State::sleepers` (see [`WorkQueue::get`]).
struct Sleeper<'q, K: QueueKey> {
    inner: &'q Inner<K>,
    counted: bool,
}

impl<K: QueueKey> Sleeper<'_, K> {
    /// Leave the count, under the lock the caller holds, taking one wake-up off `woken` (the
    /// one meant for us, or for another sleeper who then counts as not woken: at worst one
    /// wake-up too many later, never one too few).
    fn uncount(&mut self, st: &mut State<K>) {
        if self.counted {
            st.sleepers -= 1;
            st.woken = st.woken.saturating_sub(1);
            self.counted = false;
        }
    }
}

impl<K: QueueKey> Drop for Sleeper<'_, K> {
    fn drop(&mut self) {
        if self.counted {
            let inner = self.inner;
            self.uncount(&mut inner.state());
        }
    }
}

/// The clocks a snapshot is taken on, and its entries' times: tokio's for ready times, the
/// stamps' for add and start times.
struct SnapshotClock {
    now: Instant,
    stamp_now: Instant,
    wall_now: DateTime<Utc>,
}

impl SnapshotClock {
    fn now(stamps: &StampClock) -> Self {
        Self {
            now: Instant::now(),
            stamp_now: stamps.now(),
            wall_now: Utc::now(),
        }
    }

    fn wall(&self, t: Instant) -> DateTime<Utc> {
        wall_clock(self.now, self.wall_now, t)
    }

    fn stamp_wall(&self, t: Instant) -> DateTime<Utc> {
        wall_clock(self.stamp_now, self.wall_now, t)
    }

    fn queued(&self, key: &impl std::fmt::Display, added: Instant) -> QueuedKey {
        QueuedKey {
            key: key.to_string(),
            added_at: self.stamp_wall(added),
            queued_seconds: self
                .stamp_now
                .saturating_duration_since(added)
                .as_secs_f64(),
        }
    }

    fn in_flight(
        &self,
        key: &impl std::fmt::Display,
        started: Instant,
        added_again: bool,
    ) -> InFlightKey {
        InFlightKey {
            key: key.to_string(),
            started_at: self.stamp_wall(started),
            running_seconds: self
                .stamp_now
                .saturating_duration_since(started)
                .as_secs_f64(),
            added_again,
        }
    }

    fn waiting(&self, key: &impl std::fmt::Display, ready: Instant) -> WaitingKey {
        WaitingKey {
            key: key.to_string(),
            ready_at: self.wall(ready),
            ready_in_seconds: ready.saturating_duration_since(self.now).as_secs_f64(),
        }
    }
}

/// The wall-clock time of monotonic instant `t`, given that `now` is `wall_now`.
fn wall_clock(now: Instant, wall_now: DateTime<Utc>, t: Instant) -> DateTime<Utc> {
    let (earlier, d) = if t <= now {
        (true, now - t)
    } else {
        (false, t - now)
    };
    let d = chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX);
    if earlier {
        wall_now.checked_sub_signed(d).unwrap_or(wall_now)
    } else {
        wall_now.checked_add_signed(d).unwrap_or(wall_now)
    }
}

fn far_future() -> Instant {
    // ~30 years: effectively never, without overflowing Instant arithmetic.
    Instant::now() + Duration::from_secs(86_400 * 365 * 30)
}

/// Serializable view of a queue ([`WorkQueue::snapshot`]). Wall-clock times are derived from
/// the monotonic clock at snapshot time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueSnapshot {
    /// Queue name (`virt-controller-vm`, ...).
    pub name: String,
    /// Whether the queue is shutting down.
    pub shutting_down: bool,
    /// Keys queued and not in flight ([`WorkQueue::len`]).
    pub depth: usize,
    /// Accepted adds since the queue was made (`kubevirt_workqueue_adds_total`; a key added
    /// while already queued is not counted, client-go queue.go `Add`). Absent from documents
    /// of older versions (read as 0).
    #[serde(default)]
    pub adds_total: u64,
    /// Queued keys in processing order.
    pub queued: Vec<QueuedKey>,
    /// Keys handed to a worker and not yet done, sorted by key.
    pub in_flight: Vec<InFlightKey>,
    /// Keys parked by `add_after`/`add_rate_limited`, earliest first.
    pub waiting: Vec<WaitingKey>,
    /// Keys with a non-zero failure count in the rate limiter, sorted by key.
    pub retries: Vec<KeyRetries>,
    /// How long a key that fails now would wait for the limit all keys share (the token bucket
    /// of client-go's default controller rate limiter, 10 per second after a burst of 100),
    /// whatever its own backoff: 0 until retries come faster than that. After a burst of
    /// failures this, not a key's 5 ms backoff, is why a key that failed once waits minutes
    /// (kubernetes/kubernetes#104554). Absent from documents of older versions (read as 0).
    #[serde(default)]
    pub rate_limiter_wait_seconds: f64,
}

/// A queued key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueuedKey {
    /// `namespace/name`.
    pub key: String,
    /// When the key was added.
    pub added_at: DateTime<Utc>,
    /// Seconds since it was added.
    pub queued_seconds: f64,
}

/// A key being processed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InFlightKey {
    /// `namespace/name`.
    pub key: String,
    /// When a worker got it.
    pub started_at: DateTime<Utc>,
    /// Seconds since a worker got it.
    pub running_seconds: f64,
    /// Whether it was added again meanwhile (it will be queued again on `done`).
    pub added_again: bool,
}

/// A key parked until its ready time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WaitingKey {
    /// `namespace/name`.
    pub key: String,
    /// When it will be queued.
    pub ready_at: DateTime<Utc>,
    /// Seconds until then.
    pub ready_in_seconds: f64,
}

/// A key's rate-limiter failure count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyRetries {
    /// `namespace/name`.
    pub key: String,
    /// [`WorkQueue::num_requeues`].
    pub num_requeues: usize,
}

#[cfg(test)]
mod tests;
