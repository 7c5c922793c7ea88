//! Scenario tests of the elector against the in-memory store, on tokio's paused clock (all
//! sleeps below are virtual time).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::config::ConfigError;
use chrono::{DateTime, Utc};
use pretty_assertions::assert_eq;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout};
use tokio_util::sync::CancellationToken;

use super::fake::{FakeLeaseApi, FakeLeaseStore, Fault, Op};
use super::*;

const NAME: &str = DEFAULT_LEASE_NAME;
const LEASE: Duration = DEFAULT_LEASE_DURATION;
const RENEW: Duration = DEFAULT_RENEW_DEADLINE;
const RETRY: Duration = DEFAULT_RETRY_PERIOD;
/// Longest acquire-retry wait: `retryPeriod * (1 + 1.2)`.
const MAX_JITTERED_RETRY: Duration = Duration::from_millis(4400);

fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_225_600, 0).unwrap_or_default() // 2026-01-01T00:00:00Z
}

/// Wall clock = epoch + `skew` + virtual time elapsed since `origin`.
fn wall_clock(origin: Instant, skew: chrono::Duration) -> WallClock {
    Arc::new(move || {
        epoch() + skew + chrono::Duration::from_std(origin.elapsed()).unwrap_or_default()
    })
}

/// Terms started, by identity, with their tokens; a start while another term's token is live
/// is a split brain.
#[derive(Clone, Default)]
struct Ledger {
    terms: Arc<Mutex<Vec<(String, CancellationToken, Instant)>>>,
    violations: Arc<Mutex<Vec<String>>>,
    cancelled_at: Arc<Mutex<Vec<(String, Instant)>>>,
}

impl Ledger {
    fn start(&self, id: &str, term: &CancellationToken) {
        let mut terms = self.terms.lock().unwrap();
        for (other, token, since) in terms.iter() {
            if !token.is_cancelled() {
                self.violations.lock().unwrap().push(format!(
                    "{id} started leading while {other} (since {since:?}) still leads"
                ));
            }
        }
        terms.push((id.to_owned(), term.clone(), Instant::now()));
    }

    fn violations(&self) -> Vec<String> {
        self.violations.lock().unwrap().clone()
    }

    /// Asserts that no two terms overlapped.
    fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(violations.is_empty(), "{violations:?}");
    }

    fn term_count(&self) -> usize {
        self.terms.lock().unwrap().len()
    }

    fn last_term(&self, id: &str) -> Option<CancellationToken> {
        let terms = self.terms.lock().unwrap();
        terms
            .iter()
            .rev()
            .find(|(i, _, _)| i == id)
            .map(|(_, t, _)| t.clone())
    }

    fn cancelled_at(&self, id: &str) -> Option<Instant> {
        let c = self.cancelled_at.lock().unwrap();
        c.iter().rev().find(|(i, _)| i == id).map(|(_, t)| *t)
    }
}

struct Candidate {
    id: String,
    api: FakeLeaseApi,
    state: watch::Receiver<LeaderState>,
    cancel: CancellationToken,
    handle: JoinHandle<RunOutcome>,
}

impl Candidate {
    async fn outcome(self) -> RunOutcome {
        timeout(Duration::from_secs(120), self.handle)
            .await
            .expect("run did not finish")
            .expect("run panicked")
    }
}

struct Opts {
    skew: chrono::Duration,
    seed: u64,
    latency: Option<Duration>,
    /// How long the worker takes to stop after its term is cancelled.
    worker_stop: Duration,
    config: Option<LeaderElectionConfig>,
}

impl Opts {
    fn seeded(seed: u64) -> Self {
        Self {
            seed,
            ..Self::default()
        }
    }

    /// Workers that take `secs` seconds to stop.
    fn stopping_in(secs: u64) -> Self {
        Self {
            worker_stop: Duration::from_secs(secs),
            ..Self::default()
        }
    }
}

/// Cancelled while leading, lease handed back.
const RELEASED: RunOutcome = RunOutcome::Cancelled {
    was_leading: true,
    released: true,
};
/// Cancelled while leading, lease left as it was.
const KEPT: RunOutcome = RunOutcome::Cancelled {
    was_leading: true,
    released: false,
};
/// Cancelled while standing by.
const STOOD_BY: RunOutcome = RunOutcome::Cancelled {
    was_leading: false,
    released: false,
};

fn setup() -> (FakeLeaseStore, Ledger) {
    (FakeLeaseStore::new(), Ledger::default())
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            skew: chrono::Duration::zero(),
            seed: 1,
            latency: None,
            worker_stop: Duration::ZERO,
            config: None,
        }
    }
}

fn config(id: &str) -> LeaderElectionConfig {
    let mut c = LeaderElectionConfig::new(id);
    c.annotations = BTreeMap::from([(
        DEBUG_ENDPOINT_ANNOTATION.to_owned(),
        format!("http://{id}:8443/debug/state"),
    )]);
    c
}

fn spawn(store: &FakeLeaseStore, ledger: &Ledger, id: &str, opts: Opts) -> Candidate {
    let api = store.client();
    if let Some(max) = opts.latency {
        api.set_random_latency(opts.seed ^ 0x5eed, max);
    }
    let cfg = opts.config.unwrap_or_else(|| config(id));
    let elector = LeaderElector::new(api.clone(), cfg)
        .expect("valid config")
        .with_wall_clock(wall_clock(Instant::now(), opts.skew))
        .with_jitter_seed(opts.seed);
    let state = elector.subscribe();
    let cancel = CancellationToken::new();
    let ledger = ledger.clone();
    let who = id.to_owned();
    let run_cancel = cancel.clone();
    let worker_stop = opts.worker_stop;
    let handle = tokio::spawn(async move {
        elector
            .run_with(run_cancel, move |term| {
                ledger.start(&who, &term);
                async move {
                    term.cancelled().await;
                    ledger
                        .cancelled_at
                        .lock()
                        .unwrap()
                        .push((who, Instant::now()));
                    sleep(worker_stop).await;
                }
            })
            .await
    });
    Candidate {
        id: id.to_owned(),
        api,
        state,
        cancel,
        handle,
    }
}

/// Waits (virtual time) until `pred` holds for the candidate's state.
async fn wait_state(
    c: &mut Candidate,
    limit: Duration,
    pred: impl FnMut(&LeaderState) -> bool,
) -> Option<LeaderState> {
    match timeout(limit, c.state.wait_for(pred)).await {
        Ok(Ok(s)) => Some(s.clone()),
        _ => None,
    }
}

async fn wait_leading(c: &mut Candidate, limit: Duration) -> bool {
    wait_state(c, limit, |s| s.leading).await.is_some()
}

/// A candidate that must lead within a second (an absent or free lease).
async fn leader(store: &FakeLeaseStore, ledger: &Ledger, id: &str, opts: Opts) -> Candidate {
    let mut c = spawn(store, ledger, id, opts);
    assert!(
        wait_leading(&mut c, Duration::from_secs(1)).await,
        "{id} leads"
    );
    c
}

fn record(store: &FakeLeaseStore) -> LeaseRecord {
    store.record(NAME).expect("lease exists")
}

fn other_record(holder: &str, renew: DateTime<Utc>, transitions: i32) -> LeaseRecord {
    LeaseRecord {
        holder_identity: holder.into(),
        lease_duration_seconds: 15,
        acquire_time: Some(renew),
        renew_time: Some(renew),
        lease_transitions: transitions,
        strategy: None,
        preferred_holder: None,
    }
}

/// The reason of a [`RunOutcome::Lost`].
fn lost(outcome: RunOutcome) -> LostReason {
    match outcome {
        RunOutcome::Lost { reason } => reason,
        other => panic!("expected a lost lease, got {other:?}"),
    }
}

fn secs(s: i64) -> chrono::Duration {
    chrono::Duration::seconds(s)
}

// ---------------------------------------------------------------------------------------------

#[tokio::test(start_paused = true)]
async fn acquires_by_creating_an_absent_lease_and_renews_on_the_fast_path() {
    let (store, ledger) = setup();
    let t0 = Instant::now();
    let a = leader(&store, &ledger, "a", Opts::default()).await;
    assert_eq!(
        t0.elapsed(),
        Duration::ZERO,
        "acquired on the first attempt"
    );

    let rec = record(&store);
    assert_eq!(rec.holder_identity, "a");
    assert_eq!(rec.lease_duration_seconds, 15);
    assert_eq!(rec.lease_transitions, 0);
    assert_eq!(rec.acquire_time, Some(epoch()));
    assert_eq!(rec.renew_time, Some(epoch()));
    let lease = store.lease(NAME).expect("lease");
    assert_eq!(lease.metadata.namespace.as_deref(), Some("kubevirt"));
    assert_eq!(
        lease
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(DEBUG_ENDPOINT_ANNOTATION))
            .map(String::as_str),
        Some("http://a:8443/debug/state")
    );
    assert_eq!(a.api.calls(Op::Create), 1);

    sleep(Duration::from_secs(11)).await;
    let rec = record(&store);
    assert_eq!(rec.holder_identity, "a");
    assert_eq!(rec.acquire_time, Some(epoch()), "renewal keeps acquireTime");
    assert_eq!(rec.lease_transitions, 0, "renewal keeps transitions");
    assert_eq!(rec.renew_time, Some(epoch() + secs(10)), "renewed every 2s");
    assert_eq!(a.api.calls(Op::Replace), 5);
    assert_eq!(
        a.api.calls(Op::Get),
        1,
        "renewals use the fast path (no GET)"
    );
    let s = a.state.borrow().clone();
    assert_eq!(s.phase, ElectionPhase::Leading);
    assert_eq!(s.holder.as_deref(), Some("a"));
    assert_eq!(s.last_renew, Some(epoch() + secs(10)));
    assert_eq!(s.lease_transitions, Some(0));
    assert_eq!(s.lease, "kubevirt/virt-controller");
    ledger.assert_no_violations();
}

#[tokio::test(start_paused = true)]
async fn acquires_an_unrenewed_lease_after_lease_duration_of_own_observation() {
    let (store, ledger) = setup();
    store.write_record(NAME, &other_record("old", epoch() - secs(3600), 3));
    let t0 = Instant::now();
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    let seen = wait_state(&mut a, Duration::from_secs(1), |s| s.holder.is_some()).await;
    assert_eq!(seen.and_then(|s| s.holder).as_deref(), Some("old"));
    assert!(!a.state.borrow().leading);

    assert!(wait_leading(&mut a, Duration::from_secs(60)).await);
    let took = t0.elapsed();
    assert!(
        took >= LEASE,
        "took over after {took:?}, before leaseDuration"
    );
    assert!(took <= LEASE + MAX_JITTERED_RETRY, "took {took:?}");
    let rec = record(&store);
    assert_eq!(rec.holder_identity, "a");
    assert_eq!(rec.lease_transitions, 4);
    let acquired = epoch() + chrono::Duration::from_std(took).unwrap_or_default();
    assert_eq!(rec.acquire_time, Some(acquired));
    assert_eq!(rec.renew_time, Some(acquired));
}

#[tokio::test(start_paused = true)]
async fn does_not_acquire_while_another_holder_renews() {
    let (store, ledger) = setup();
    store.write_record(NAME, &other_record("b", epoch(), 0));
    let contender = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 1..=30 {
                sleep(RETRY).await;
                store.write_record(NAME, &other_record("b", epoch() + secs(2 * i), 0));
            }
        })
    };
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    assert!(
        !wait_leading(&mut a, Duration::from_secs(60)).await,
        "must not take a lease that keeps being renewed"
    );
    assert_eq!(record(&store).holder_identity, "b");
    contender.await.expect("contender");
    let last_write = Instant::now();
    assert!(wait_leading(&mut a, Duration::from_secs(60)).await);
    // Noticed the last write at the next attempt, then waited a full leaseDuration.
    assert!(last_write.elapsed() >= LEASE);
    assert!(last_write.elapsed() <= LEASE + MAX_JITTERED_RETRY * 2);
    assert_eq!(record(&store).lease_transitions, 1);
}

#[tokio::test(start_paused = true)]
async fn remote_renew_time_in_the_future_does_not_delay_takeover() {
    let (store, ledger) = setup();
    // A holder whose clock runs an hour ahead, then died.
    store.write_record(NAME, &other_record("b", epoch() + secs(3600), 0));
    let t0 = Instant::now();
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    assert!(wait_leading(&mut a, Duration::from_secs(60)).await);
    assert!(t0.elapsed() >= LEASE);
    assert!(t0.elapsed() <= LEASE + MAX_JITTERED_RETRY);
}

#[tokio::test(start_paused = true)]
async fn remote_renew_time_in_the_past_does_not_allow_takeover_while_it_changes() {
    let (store, ledger) = setup();
    // A live holder whose clock runs an hour behind: its renewTime is always "expired" by
    // our wall clock, but it keeps changing.
    let behind = epoch() - secs(3600);
    store.write_record(NAME, &other_record("b", behind, 0));
    let contender = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 1..=40 {
                sleep(RETRY).await;
                store.write_record(NAME, &other_record("b", behind + secs(2 * i), 0));
            }
        })
    };
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    assert!(!wait_leading(&mut a, Duration::from_secs(75)).await);
    assert_eq!(record(&store).holder_identity, "b");
    contender.abort();
}

#[tokio::test(start_paused = true)]
async fn renew_failures_end_the_term_before_the_renew_deadline() {
    let (store, ledger) = setup();
    let t0 = Instant::now();
    let mut a = leader(&store, &ledger, "a", Opts::default()).await;
    sleep(Duration::from_secs(5)).await;
    let mut b = spawn(&store, &ledger, "b", Opts::seeded(2));
    sleep(Duration::from_millis(500)).await;

    a.api.set_down(true);
    let s = wait_state(&mut a, Duration::from_secs(30), |s| {
        s.phase == ElectionPhase::Lost
    })
    .await
    .expect("a stops leading");
    let term = ledger.last_term("a").expect("a had a term");
    assert!(term.is_cancelled(), "term cancelled when state says lost");
    assert!(!s.leading);
    assert!(s.last_error.is_some());

    // The term ended exactly renewDeadline after the start of the last successful renewal
    // (whose renewTime is in the state, on the same virtual clock).
    let cancelled = ledger.cancelled_at("a").expect("worker saw cancellation");
    let last_renew = s.last_renew.expect("renewed before");
    let cancelled_wall = epoch() + chrono::Duration::from_std(cancelled - t0).unwrap_or_default();
    let since_renew = (cancelled_wall - last_renew).to_std().unwrap_or_default();
    assert!(
        since_renew <= RENEW,
        "term ended {since_renew:?} after last renew"
    );
    assert!(
        since_renew > RENEW - RETRY,
        "gave up too early: {since_renew:?}"
    );

    assert_eq!(
        lost(a.outcome().await),
        LostReason::NotRenewed {
            renew_deadline: RENEW,
            last_error: Some(
                "lease API error: connection refused (fake API server unreachable)".into()
            ),
        },
        "the last renewal's error is the reason"
    );
    // b takes over only after a's record stopped changing for a full leaseDuration.
    assert!(wait_leading(&mut b, Duration::from_secs(60)).await);
    assert_eq!(record(&store).holder_identity, "b");
    assert_eq!(record(&store).lease_transitions, 1);
    ledger.assert_no_violations();
}

#[tokio::test(start_paused = true)]
async fn a_hanging_renewal_is_abandoned_at_the_deadline() {
    let (store, ledger) = setup();
    let a = leader(&store, &ledger, "a", Opts::default()).await;
    let acquired = Instant::now();
    a.api
        .push_fault(Op::Replace, Fault::Delay(Duration::from_secs(3600)));
    assert_eq!(
        lost(a.outcome().await),
        LostReason::RenewalUnanswered {
            renew_deadline: RENEW,
            last_error: None,
        }
    );
    let cancelled = ledger.cancelled_at("a").expect("term cancelled");
    assert_eq!(cancelled - acquired, RENEW);
}

#[tokio::test(start_paused = true)]
async fn seeing_another_holder_while_renewing_ends_the_term_at_once() {
    let (store, ledger) = setup();
    let a = leader(&store, &ledger, "a", Opts::default()).await;
    sleep(Duration::from_millis(100)).await;
    let stolen_at = Instant::now();
    store.write_record(NAME, &other_record("thief", epoch(), 7));
    assert_eq!(
        lost(a.outcome().await),
        LostReason::HeldBy {
            holder: "thief".into()
        }
    );
    let cancelled = ledger.cancelled_at("a").expect("term cancelled");
    assert!(cancelled - stolen_at <= RETRY);
    // With release-on-cancel, a must not clear the thief's lease.
    assert_eq!(record(&store).holder_identity, "thief");
}

#[tokio::test(start_paused = true)]
async fn release_on_cancel_hands_over_within_one_retry() {
    let (store, ledger) = setup();
    let a = leader(&store, &ledger, "a", Opts::default()).await;
    // Somebody else's annotation must survive all our writes.
    let mut lease = store.lease(NAME).expect("lease");
    lease
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert("team".into(), "virt".into());
    store.put(lease);
    let mut b = spawn(&store, &ledger, "b", Opts::seeded(7));
    sleep(Duration::from_secs(3)).await;
    assert!(!b.state.borrow().leading);

    a.cancel.cancel();
    let cancelled_at = Instant::now();
    let a_api = a.api.clone();
    assert_eq!(a.outcome().await, RELEASED);
    let rec = record(&store);
    assert_eq!(rec.holder_identity, "");
    assert_eq!(rec.lease_duration_seconds, 1);
    assert_eq!(rec.lease_transitions, 0);
    assert!(a_api.calls(Op::Get) >= 2, "release reads the lease first");

    assert!(wait_leading(&mut b, Duration::from_secs(60)).await);
    assert!(
        cancelled_at.elapsed() <= MAX_JITTERED_RETRY,
        "handover took {:?}",
        cancelled_at.elapsed()
    );
    let rec = record(&store);
    assert_eq!(rec.holder_identity, "b");
    assert_eq!(rec.lease_transitions, 1);
    let annotations = store
        .lease(NAME)
        .and_then(|l| l.metadata.annotations)
        .unwrap_or_default();
    assert_eq!(annotations.get("team").map(String::as_str), Some("virt"));
    assert_eq!(
        annotations
            .get(DEBUG_ENDPOINT_ANNOTATION)
            .map(String::as_str),
        Some("http://b:8443/debug/state")
    );
    ledger.assert_no_violations();
}

#[tokio::test(start_paused = true)]
async fn release_writes_client_go_fields_and_drops_our_annotation() {
    let (store, ledger) = setup();
    store.write_record(NAME, &other_record("old", epoch(), 5));
    let t0 = Instant::now();
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    assert!(wait_leading(&mut a, Duration::from_secs(60)).await);
    sleep(Duration::from_millis(300)).await;
    a.cancel.cancel();
    let cancelled = Instant::now();
    assert_eq!(a.outcome().await, RELEASED);
    let released = epoch() + chrono::Duration::from_std(cancelled - t0).unwrap_or_default();
    let rec = record(&store);
    assert_eq!(rec.holder_identity, "");
    assert_eq!(rec.lease_duration_seconds, 1);
    assert_eq!(rec.lease_transitions, 6, "transitions kept on release");
    assert_eq!(rec.acquire_time, Some(released));
    assert_eq!(rec.renew_time, Some(released));
    let lease = store.lease(NAME).expect("lease");
    assert_eq!(lease.metadata.annotations, None);
}

#[tokio::test(start_paused = true)]
async fn release_does_not_clear_a_lease_someone_else_took_meanwhile() {
    let (store, ledger) = setup();
    let a = leader(&store, &ledger, "a", Opts::default()).await;
    sleep(Duration::from_millis(100)).await;
    // Between renewals (a still believes it leads) another writer takes the lease.
    let thief = other_record("thief", epoch(), 9);
    store.write_record(NAME, &thief);
    a.cancel.cancel();
    assert_eq!(a.outcome().await, KEPT);
    assert_eq!(record(&store), thief);
}

#[tokio::test(start_paused = true)]
async fn release_retries_on_conflict() {
    let (store, ledger) = setup();
    let a = leader(&store, &ledger, "a", Opts::default()).await;
    sleep(Duration::from_millis(100)).await;
    a.api.push_fault(
        Op::Replace,
        Fault::Fail(LeaseError::Conflict("in-flight renew won".into())),
    );
    a.cancel.cancel();
    let api = a.api.clone();
    assert_eq!(a.outcome().await, RELEASED);
    assert_eq!(api.conflicts(), 1);
    assert_eq!(record(&store).holder_identity, "");
}

#[tokio::test(start_paused = true)]
async fn without_release_on_cancel_the_lease_stays_held() {
    let (store, ledger) = setup();
    let mut cfg = config("a");
    cfg.release_on_cancel = false;
    let a = leader(
        &store,
        &ledger,
        "a",
        Opts {
            config: Some(cfg),
            ..Opts::default()
        },
    )
    .await;
    a.cancel.cancel();
    assert_eq!(a.outcome().await, KEPT);
    assert_eq!(record(&store).holder_identity, "a");
}

#[tokio::test(start_paused = true)]
async fn graceful_stop_keeps_renewing_until_workers_finish() {
    let (store, ledger) = setup();
    let mut a = leader(&store, &ledger, "a", Opts::stopping_in(7)).await;
    let renewals_before = a.api.calls(Op::Replace);
    a.cancel.cancel();
    let s = wait_state(&mut a, Duration::from_secs(1), |s| {
        s.phase == ElectionPhase::Stopping
    })
    .await
    .expect("stopping");
    assert!(s.leading, "still holds the lease while draining");
    let term = ledger.last_term("a").expect("term");
    assert!(term.is_cancelled(), "workers are told to stop at once");
    sleep(Duration::from_secs(6)).await;
    assert_eq!(
        record(&store).holder_identity,
        "a",
        "not released while draining"
    );
    let api = a.api.clone();
    let outcome = a.outcome().await;
    assert_eq!(outcome, RELEASED);
    // Renewed 3 times during the 7 s drain, then one release PUT.
    assert_eq!(api.calls(Op::Replace) - renewals_before, 4);
}

#[tokio::test(start_paused = true)]
async fn stuck_workers_are_aborted_after_the_renew_deadline_on_stop() {
    let (store, ledger) = setup();
    let a = leader(&store, &ledger, "a", Opts::stopping_in(3600)).await;
    let t = Instant::now();
    a.cancel.cancel();
    assert!(matches!(
        a.outcome().await,
        RunOutcome::Cancelled { released: true, .. }
    ));
    assert_eq!(t.elapsed(), RENEW);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_run_while_leading_ends_the_term_and_its_worker() {
    // A killed leader's work must die with its renewals, or it keeps acting after another
    // candidate took over.
    let (store, ledger) = setup();
    let mut a = leader(&store, &ledger, "a", Opts::stopping_in(3600)).await;
    let term = ledger.last_term("a").expect("term");
    // The worker task holds the only other handle on the ledger.
    assert_eq!(Arc::strong_count(&ledger.cancelled_at), 2);
    a.handle.abort();
    assert!((&mut a.handle).await.is_err_and(|e| e.is_cancelled()));
    assert!(term.is_cancelled(), "the term ends with the run");
    sleep(Duration::from_millis(1)).await;
    assert_eq!(
        Arc::strong_count(&ledger.cancelled_at),
        1,
        "the worker task is aborted, not left draining for an hour"
    );
    let writes = a.api.calls(Op::Replace);
    sleep(LEASE * 2).await;
    assert_eq!(a.api.calls(Op::Replace), writes, "no renewal, no release");
    assert_eq!(record(&store).holder_identity, "a");
}

#[tokio::test(start_paused = true)]
async fn cancel_while_standing_by_leaves_the_lease_alone() {
    let (store, ledger) = setup();
    store.write_record(NAME, &other_record("b", epoch(), 2));
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    let _ = wait_state(&mut a, Duration::from_secs(1), |s| s.holder.is_some()).await;
    sleep(Duration::from_secs(5)).await;
    a.cancel.cancel();
    let state = a.state.clone();
    assert_eq!(a.outcome().await, STOOD_BY);
    assert_eq!(state.borrow().phase, ElectionPhase::Stopped);
    assert_eq!(record(&store), other_record("b", epoch(), 2));
    assert_eq!(ledger.term_count(), 0);
}

#[tokio::test(start_paused = true)]
async fn restarted_process_with_same_identity_waits_for_its_old_lease_to_expire() {
    // Not client-go (which renews at once when the record names it): a record naming our
    // identity that this elector did not write may belong to a live twin, so it is a foreign
    // holder until it expires by our own observation (issue 13 item 1).
    let (store, ledger) = setup();
    store.write_record(NAME, &other_record("a", epoch() - secs(1), 4));
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    assert!(
        !wait_leading(&mut a, LEASE - Duration::from_secs(1)).await,
        "not before expiry"
    );
    assert!(wait_leading(&mut a, Duration::from_secs(2) + MAX_JITTERED_RETRY).await);
    let rec = record(&store);
    assert_eq!(rec.lease_transitions, 5, "a takeover, not a renewal");
    assert_ne!(rec.acquire_time, Some(epoch() - secs(1)));
    ledger.assert_no_violations();
}

#[tokio::test(start_paused = true)]
async fn two_processes_with_one_identity_never_both_lead() {
    let store = FakeLeaseStore::new();
    let ledger = Ledger::default();
    let first = leader(&store, &ledger, "twin", Opts::default()).await;
    let mut second = spawn(
        &store,
        &ledger,
        "twin",
        Opts {
            seed: 7,
            ..Opts::default()
        },
    );
    // Many lease durations: the second sees every renewal of the first as a twin's.
    assert!(!wait_leading(&mut second, LEASE * 4).await);
    assert!(first.state.borrow().leading, "the first keeps leading");
    // The first stops (releasing): the second takes over within one jittered retry.
    first.cancel.cancel();
    let _ = first.outcome().await;
    assert!(wait_leading(&mut second, MAX_JITTERED_RETRY + Duration::from_secs(1)).await);
    ledger.assert_no_violations();
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_sees_a_twin_acquire_under_its_identity_steps_down() {
    // A twin (same identity) that acquired the Lease, e.g. while this leader was paused past
    // the lease duration, writes its own acquireTime and the next leaseTransitions; a leader
    // that sees either steps down, so at most one keeps leading.
    for (what, later, next) in [
        ("acquireTime", true, false),
        ("leaseTransitions", false, true),
        ("both", true, true),
    ] {
        let store = FakeLeaseStore::new();
        let ledger = Ledger::default();
        let mut first = leader(&store, &ledger, "twin", Opts::default()).await;
        let mut rec = record(&store);
        rec.renew_time = rec
            .renew_time
            .map(|t| t + chrono::Duration::milliseconds(500));
        if later {
            rec.acquire_time = rec.renew_time;
        }
        if next {
            rec.lease_transitions += 1;
        }
        store.write_record(NAME, &rec);
        assert!(
            wait_state(&mut first, RETRY * 2, |st| !st.leading)
                .await
                .is_some(),
            "{what}: the first steps down on the twin's acquisition"
        );
        assert_eq!(
            lost(first.outcome().await),
            LostReason::SameIdentity {
                identity: "twin".into(),
                acquire_time: rec.acquire_time,
                lease_transitions: rec.lease_transitions,
            },
            "{what}"
        );
        assert_eq!(
            record(&store),
            rec,
            "{what}: the twin's record is left alone"
        );
    }
}

/// How a person or a tool may rewrite the Lease while we lead, keeping our identity as holder.
fn edit_lease(store: &FakeLeaseStore, edit: &str) {
    let mut lease = store.lease(NAME).expect("lease");
    let mut rec = LeaseRecord::from_spec(lease.spec.as_ref());
    match edit {
        "renewTime" => rec.renew_time = Some(epoch() + secs(3600)),
        "leaseDurationSeconds" => rec.lease_duration_seconds = 3600,
        "annotations" => {
            lease
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert("example.com/patched-by".into(), "kubectl".into());
        }
        other => panic!("unknown edit {other}"),
    }
    lease.spec = Some(rec.to_spec());
    store.put(lease);
}

#[tokio::test(start_paused = true)]
async fn edits_of_our_lease_that_are_no_acquisition_do_not_end_the_term() {
    // Issue 38 item 3: `kubectl patch lease` with a renewTime the leader did not write made it
    // step down and exit. Such a write names our identity and keeps our acquisition
    // (acquireTime, leaseTransitions): the leader renews over it and keeps leading.
    for edit in ["renewTime", "leaseDurationSeconds", "annotations"] {
        let (store, ledger) = setup();
        let a = leader(&store, &ledger, "a", Opts::default()).await;
        let acquired = record(&store);
        for round in 0..3 {
            sleep(RETRY / 2).await;
            edit_lease(&store, edit);
            let edited = record(&store);
            // a's next renewal (within one retry period) is written over the edit.
            sleep(RETRY).await;
            let renewed = record(&store);
            assert_ne!(renewed, edited, "{edit} {round}: a renewed over the edit");
            assert_eq!(renewed.holder_identity, "a", "{edit} {round}");
            assert_eq!(
                renewed.acquire_time, acquired.acquire_time,
                "{edit} {round}"
            );
            assert_eq!(renewed.lease_transitions, 0, "{edit} {round}: no takeover");
            assert_eq!(renewed.lease_duration_seconds, 15, "{edit} {round}");
            assert!(
                renewed.renew_time < Some(epoch() + secs(3600)),
                "{edit} {round}: our own renewTime: {renewed:?}"
            );
        }
        sleep(LEASE * 3).await;
        let s = a.state.borrow().clone();
        assert!(s.leading, "{edit}: still leading: {s:?}");
        assert_eq!(s.phase, ElectionPhase::Leading, "{edit}");
        assert!(!a.handle.is_finished(), "{edit}: the run goes on");
        assert_eq!(
            ledger.term_count(),
            1,
            "{edit}: one term, never interrupted"
        );
        let term = ledger.last_term("a").expect("term");
        assert!(!term.is_cancelled(), "{edit}: the term was never cancelled");
        if edit == "annotations" {
            let lease = store.lease(NAME).expect("lease");
            let annotations = lease.metadata.annotations.unwrap_or_default();
            assert_eq!(
                annotations
                    .get("example.com/patched-by")
                    .map(String::as_str),
                Some("kubectl"),
                "the renewal keeps other writers' annotations"
            );
        }
        a.cancel.cancel();
        let api = a.api.clone();
        assert_eq!(a.outcome().await, RELEASED, "{edit}");
        assert!(api.conflicts() >= 3, "{edit}: renewals raced the edits");
    }
}

#[tokio::test(start_paused = true)]
async fn a_same_identity_standby_says_so_once_a_minute() {
    // Issue 38 item 8: the standby warned at every retry (every 2-4.4 s). The warning is
    // rate-limited per Lease; the next one counts the repeats not logged. The Lease has a name
    // of its own, so no other test shares the rate limit's key.
    let (captured, _guard) = crate::runtime::log_capture::capture();
    let store = FakeLeaseStore::new();
    let ledger = Ledger::default();
    let opts = |seed| {
        let mut cfg = config("twin");
        cfg.lease_name = "same-identity-standby-says-so-once".into();
        Opts {
            seed,
            config: Some(cfg),
            ..Opts::default()
        }
    };
    let first = leader(&store, &ledger, "twin", opts(1)).await;
    let mut second = spawn(&store, &ledger, "twin", opts(7));
    let standing_by = || captured.matching("WARN", "held under this identity by another process");
    assert!(!wait_leading(&mut second, Duration::from_secs(50)).await);
    let calls = second.api.calls(Op::Get);
    assert!(calls >= 10, "the standby kept trying ({calls} reads)");
    assert_eq!(standing_by().len(), 1, "{:#?}", captured.lines());
    // A minute after the first warning: the next attempt warns again, with the count.
    assert!(!wait_leading(&mut second, Duration::from_secs(15)).await);
    let lines = standing_by();
    assert_eq!(lines.len(), 2, "{:#?}", captured.lines());
    assert!(
        lines[1].contains("not logged since the last one"),
        "the second warning counts the repeats: {}",
        lines[1]
    );
    assert!(first.state.borrow().leading);
    first.cancel.cancel();
    second.cancel.cancel();
}

#[tokio::test(start_paused = true)]
async fn transitions_count_each_change_of_holder() {
    let (store, ledger) = setup();
    for (expected, id) in (0..).zip(["a", "b", "a", "c"]) {
        let mut c = spawn(
            &store,
            &ledger,
            id,
            Opts {
                seed: u64::try_from(expected).unwrap_or_default(),
                ..Opts::default()
            },
        );
        assert!(wait_leading(&mut c, Duration::from_secs(10)).await, "{id}");
        assert_eq!(record(&store).lease_transitions, expected, "{id}");
        sleep(Duration::from_secs(4)).await;
        assert_eq!(
            record(&store).lease_transitions,
            expected,
            "renewals keep it"
        );
        c.cancel.cancel();
        assert!(matches!(
            c.outcome().await,
            RunOutcome::Cancelled { released: true, .. }
        ));
    }
    // Takeover after expiry counts too.
    let mut d = spawn(&store, &ledger, "d", Opts::default());
    assert!(wait_leading(&mut d, Duration::from_secs(10)).await);
    assert_eq!(record(&store).lease_transitions, 4);
    d.api.set_down(true);
    assert!(d.outcome().await.is_lost());
    let mut e = spawn(&store, &ledger, "e", Opts::default());
    assert!(wait_leading(&mut e, Duration::from_secs(60)).await);
    assert_eq!(record(&store).lease_transitions, 5);
    ledger.assert_no_violations();
}

#[tokio::test(start_paused = true)]
async fn simultaneous_creates_have_exactly_one_winner() {
    let (store, ledger) = setup();
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    let b = spawn(&store, &ledger, "b", Opts::seeded(2));
    // Both GET (404) before either CREATE lands.
    a.api
        .push_fault(Op::Create, Fault::Delay(Duration::from_millis(100)));
    b.api
        .push_fault(Op::Create, Fault::Delay(Duration::from_millis(200)));
    sleep(Duration::from_secs(1)).await;
    let a_leads = a.state.borrow().leading;
    let b_leads = b.state.borrow().leading;
    assert!(a_leads ^ b_leads, "a {a_leads}, b {b_leads}");
    assert_eq!(a.api.calls(Op::Create) + b.api.calls(Op::Create), 2);
    assert_eq!(b.api.conflicts(), 1);
    assert!(wait_leading(&mut a, Duration::from_secs(1)).await);
    sleep(Duration::from_secs(60)).await;
    assert!(!b.state.borrow().leading);
    assert_eq!(ledger.term_count(), 1);
}

#[tokio::test(start_paused = true)]
async fn simultaneous_takeovers_of_an_expired_lease_have_exactly_one_winner() {
    let (store, ledger) = setup();
    store.write_record(NAME, &other_record("dead", epoch(), 0));
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    let mut b = spawn(&store, &ledger, "b", Opts::default()); // same jitter: same schedule
    // Delay both takeover PUTs so both read the same resourceVersion first.
    for c in [&a, &b] {
        c.api
            .push_fault(Op::Replace, Fault::Delay(Duration::from_millis(50)));
    }
    let a_won = tokio::select! {
        _ = wait_leading(&mut a, Duration::from_secs(60)) => true,
        _ = wait_leading(&mut b, Duration::from_secs(60)) => false,
    };
    sleep(Duration::from_secs(30)).await;
    assert_eq!(a.state.borrow().leading, a_won);
    assert_eq!(b.state.borrow().leading, !a_won);
    assert_eq!(a.api.conflicts() + b.api.conflicts(), 1);
    assert_eq!(record(&store).lease_transitions, 1);
    ledger.assert_no_violations();
}

#[tokio::test(start_paused = true)]
async fn zero_lease_duration_in_the_record_counts_as_expired() {
    // client-go's isLeaseValid uses the observed record's leaseDurationSeconds.
    let (store, ledger) = setup();
    let mut rec = other_record("b", epoch(), 0);
    rec.lease_duration_seconds = 0;
    store.write_record(NAME, &rec);
    let mut a = spawn(&store, &ledger, "a", Opts::default());
    assert!(wait_leading(&mut a, Duration::from_millis(1)).await);
}

#[test]
fn invalid_config_is_rejected_by_the_constructor() {
    let store = FakeLeaseStore::new();
    let mut cfg = LeaderElectionConfig::new("a");
    cfg.renew_deadline = cfg.lease_duration;
    assert!(matches!(
        LeaderElector::new(store.client(), cfg),
        Err(ConfigError::LeaseDurationNotAboveRenewDeadline { .. })
    ));
}

/// Three candidates with skewed wall clocks, random API latency, random partitions and
/// restarts: at no instant do two terms overlap, and the group keeps electing leaders.
#[test]
fn chaos_never_yields_two_leaders() {
    for seed in 0..48u64 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        rt.block_on(chaos_round(seed));
    }
}

async fn chaos_round(seed: u64) {
    let (store, ledger) = setup();
    let mut rng = StdRng::seed_from_u64(seed);
    let skews = [secs(-3600), secs(0), secs(3600)];
    let mut next_id = 0;
    let mut new_candidate = |rng: &mut StdRng, slot: usize| {
        next_id += 1;
        spawn(
            &store,
            &ledger,
            &format!("c{slot}-{next_id}"),
            Opts {
                skew: skews[slot],
                seed: rng.random(),
                latency: Some(Duration::from_millis(rng.random_range(0..=400))),
                worker_stop: Duration::from_millis(rng.random_range(0..=3000)),
                config: None,
            },
        )
    };
    let mut cands: Vec<Candidate> = (0..3).map(|i| new_candidate(&mut rng, i)).collect();
    let mut outcomes = Vec::new();
    let end = Instant::now() + Duration::from_secs(300);
    while Instant::now() < end {
        sleep(Duration::from_millis(rng.random_range(500..=8000))).await;
        let slot = rng.random_range(0..cands.len());
        match rng.random_range(0..10) {
            0..=4 => {
                let down = rng.random_bool(0.5);
                cands[slot].api.set_down(down);
            }
            5 => {
                // Graceful restart.
                let fresh = new_candidate(&mut rng, slot);
                let old = std::mem::replace(&mut cands[slot], fresh);
                old.cancel.cancel();
                outcomes.push((old.id.clone(), old.outcome().await));
            }
            6 => {
                // One-off conflict / lost reply on the next write.
                let fault = if rng.random_bool(0.5) {
                    Fault::Fail(LeaseError::Conflict("injected".into()))
                } else {
                    Fault::FailAfterCommit(LeaseError::Other("reply lost".into()))
                };
                cands[slot].api.push_fault(Op::Replace, fault);
            }
            _ => {}
        }
        // Restart candidates whose run ended (lost leadership → process exit).
        for (slot, c) in cands.iter_mut().enumerate() {
            if c.handle.is_finished() {
                let fresh = new_candidate(&mut rng, slot);
                let old = std::mem::replace(c, fresh);
                outcomes.push((old.id.clone(), old.outcome().await));
            }
        }
        let violations = ledger.violations();
        assert!(violations.is_empty(), "seed {seed}: {violations:?}");
    }
    // Heal everything: someone must lead within one lease duration plus a few retries.
    for c in &cands {
        c.api.set_down(false);
    }
    let healed = Instant::now();
    let mut leaders = 0;
    while healed.elapsed() < LEASE + RENEW + MAX_JITTERED_RETRY * 2 && leaders == 0 {
        sleep(Duration::from_millis(200)).await;
        leaders = cands.iter().filter(|c| c.state.borrow().leading).count();
    }
    assert_eq!(leaders, 1, "seed {seed}: no leader after healing");
    for c in cands {
        c.cancel.cancel();
        outcomes.push((c.id.clone(), c.outcome().await));
    }
    let violations = ledger.violations();
    assert!(violations.is_empty(), "seed {seed}: {violations:?}");
    assert!(ledger.term_count() >= 1, "seed {seed}: nobody ever led");
    assert!(
        outcomes.iter().any(|(_, o)| matches!(
            o,
            RunOutcome::Cancelled {
                was_leading: true,
                ..
            }
        ) || o.is_lost()),
        "seed {seed}: {outcomes:?}"
    );
}
