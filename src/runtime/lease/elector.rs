//! The leader elector: client-go's `tools/leaderelection/leaderelection.go` algorithm on a
//! Lease (`resourcelock/leaselock.go`), driven by tokio.
//!
//! * `tryAcquireOrRenew`: fast path (the leader PUTs its cached Lease while its own observation
//!   is still valid), else GET (CREATE when absent); if the record differs from the one last
//!   read, note it with *our monotonic* observation time; if someone else holds it and
//!   `observedTime + leaseDurationSeconds > now`, fail; otherwise PUT our record with the
//!   resourceVersion just read (409 → this attempt lost). Remote `renewTime` is never compared
//!   with our clock, so clock skew between candidates cannot cause two leaders.
//! * acquire: attempt, then wait `retryPeriod * (1 + rand * 1.2)`, until success or cancel.
//! * renew: attempt every `retryPeriod`; stop leading when no attempt succeeded within
//!   `renewDeadline`.
//! * release (`ReleaseOnCancel`): write holder `""`, `leaseDurationSeconds: 1`, times now,
//!   transitions kept; retry on 409; bounded by `renewDeadline`.
//!
//! Deliberate differences from client-go, all towards fewer simultaneous leaders:
//! * the renew deadline is measured from the start of the last *successful* renewal (client-go
//!   starts it at each renew round, i.e. up to `retryPeriod` later), so the term token is
//!   cancelled no later than `renewDeadline` after the last renewal others could have seen;
//! * seeing another holder while renewing ends the term at once (client-go keeps retrying
//!   until the deadline);
//! * release never overwrites a Lease that another candidate now holds (client-go decides
//!   from its last observation only);
//! * a record naming our identity whose acquisition (acquireTime, leaseTransitions) is not one
//!   this elector wrote was acquired by another process started with the same identity: a
//!   leader that sees it steps down, a candidate waits for it to expire. Any other write that
//!   keeps our identity as holder (a `kubectl patch` of renewTime, leaseDurationSeconds or
//!   annotations) is renewed over, as client-go does.
//! * the term's validity is published to a [`TermFence`] that the controllers' client checks
//!   at every write ([`super::fence`]), so a process paused past its renew deadline cannot
//!   write once more before the term is cancelled.
//!   client-go takes any record with its identity as its own, so two processes started with
//!   one `--identity` both lead; here a restarted process waits up to one lease duration
//!   instead of renewing its predecessor's record at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ObjectMeta;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::api::{KubeLeaseApi, LeaseApi, LeaseError};
use super::config::{ConfigError, JITTER_FACTOR, LeaderElectionConfig};
use super::fence::TermFence;
use super::record::{LeaseRecord, truncate_to_micros};
use super::state::{ElectionPhase, LeaderState, LostReason, RunOutcome};
use crate::runtime::log_limit::LogLimiter;

/// Source of wall-clock time for the `acquireTime`/`renewTime` we write (display only; expiry
/// uses tokio's monotonic clock). Tests inject one derived from tokio's paused clock.
pub type WallClock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

/// Upper bound on 409-retries while releasing (client-go retries until its timeout).
const MAX_RELEASE_CONFLICTS: usize = 10;

/// Result of one `tryAcquireOrRenew`.
#[derive(Debug)]
enum Attempt {
    /// We hold the lease now (created, acquired or renewed).
    Success,
    /// Someone else holds it and it has not expired by our observation.
    HeldBy(String),
    /// Another process with our identity acquired it (this record) and it has not expired by
    /// our observation.
    Twin(LeaseRecord),
    /// An API call failed (including 409 Conflict: another writer won).
    Failed(LeaseError),
}

/// Result of a release attempt.
#[derive(Debug, PartialEq, Eq)]
enum Release {
    Released,
    NotHolder,
    Failed,
}

/// How the renew loop ended.
enum RenewEnd {
    Lost(LostReason),
    Cancelled,
}

/// A candidate in the election on one Lease. Create with [`LeaderElector::new`] (any
/// [`LeaseApi`]) or [`LeaderElector::from_client`], grab [`LeaderElector::subscribe`], then
/// drive it with [`LeaderElector::run`] / [`LeaderElector::run_with`] (which consume it: one
/// elector runs at most one leadership term, as client-go's `Run`).
pub struct LeaderElector<A: LeaseApi = KubeLeaseApi> {
    api: A,
    config: LeaderElectionConfig,
    desc: String,
    wall_clock: WallClock,
    rng: StdRng,
    /// Last record we observed or wrote (client-go `observedRecord`).
    observed_record: LeaseRecord,
    /// Last record read by GET (client-go `observedRawRecord`), the change detector.
    observed_raw: Option<LeaseRecord>,
    /// Monotonic time of the last change of `observed_record` (client-go `observedTime`).
    observed_time: Option<Instant>,
    /// The Lease object as last read or written; its resourceVersion guards the next PUT.
    cached: Option<Lease>,
    /// The record of the last Lease this elector wrote, as the server returned it. A record
    /// naming our identity with another acquisition (acquireTime, leaseTransitions) was
    /// acquired by another process with the same identity (not in client-go, which would take
    /// it as its own: two leaders); see [`LeaderElector::acquired_by_a_twin`].
    written_record: Option<LeaseRecord>,
    /// Last holder reported in the "new leader elected" log (client-go `reportedLeader`).
    reported_leader: String,
    /// Failed Lease reads since the last successful one. client-go logs each at ERROR; here
    /// at most one a minute is (see [`LogLimiter`]), with this count.
    get_failures: u64,
    state: watch::Sender<LeaderState>,
    /// Published term validity for fenced writes (see [`super::fence`]); a private one when
    /// none is given.
    fence: TermFence,
}

impl LeaderElector<KubeLeaseApi> {
    /// An elector on the Lease `config.namespace/config.lease_name`, through `client`.
    pub fn from_client(
        client: kube::Client,
        config: LeaderElectionConfig,
    ) -> Result<Self, ConfigError> {
        // An attempt never outlives the renew deadline (client-go bounds each renewal by it).
        let api =
            KubeLeaseApi::new(client, &config.namespace).with_call_timeout(config.renew_deadline);
        Self::new(api, config)
    }
}

impl<A: LeaseApi> LeaderElector<A> {
    /// Validates `config` (see [`LeaderElectionConfig::validate`]) and builds an idle elector.
    pub(crate) fn new(api: A, config: LeaderElectionConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        let desc = config.describe();
        let (state, _) = watch::channel(LeaderState {
            lease: desc.clone(),
            identity: config.identity.clone(),
            ..LeaderState::default()
        });
        Ok(Self {
            api,
            config,
            desc,
            wall_clock: Arc::new(Utc::now),
            rng: StdRng::from_os_rng(),
            observed_record: LeaseRecord::default(),
            observed_raw: None,
            observed_time: None,
            cached: None,
            written_record: None,
            reported_leader: String::new(),
            get_failures: 0,
            state,
            fence: TermFence::default(),
        })
    }

    /// Publish the term's validity to `fence` (open until the start of the last successful
    /// acquire or renewal + renewDeadline, closed when the term ends), for
    /// [`super::fence::fenced_client`].
    pub(crate) fn with_term_fence(mut self, fence: TermFence) -> Self {
        self.fence = fence;
        self
    }

    /// Replaces the wall clock used for written timestamps (default `Utc::now`).
    pub(crate) fn with_wall_clock(mut self, clock: WallClock) -> Self {
        self.wall_clock = clock;
        self
    }

    /// Seeds the acquire-retry jitter (default: from the OS), for reproducible tests.
    #[cfg(test)]
    pub(crate) fn with_jitter_seed(mut self, seed: u64) -> Self {
        self.rng = StdRng::seed_from_u64(seed);
        self
    }

    /// A receiver of [`LeaderState`] updates; valid after `run` finished (last state kept).
    pub fn subscribe(&self) -> watch::Receiver<LeaderState> {
        self.state.subscribe()
    }

    /// Runs the election; on acquiring, spawns `on_started_leading(term)` as a tokio task
    /// (client-go's `go OnStartedLeading(ctx)`), where `term` is cancelled when leadership
    /// ends:
    ///
    /// * renewal gave up → `term` is cancelled immediately (no later than `renewDeadline`
    ///   after the start of the last successful renewal), state turns `leading: false`,
    ///   the worker gets `leaseDuration - renewDeadline` to finish (then it is aborted), the
    ///   lease is released if configured, and the run returns [`RunOutcome::Lost`];
    /// * `cancel` fired → `term` (a child of `cancel`) is cancelled, the lease keeps being
    ///   renewed while the worker finishes (at most `renewDeadline`, then it is aborted), the
    ///   lease is released if configured, and the run returns [`RunOutcome::Cancelled`].
    ///
    /// If the worker returns early we keep leading (as client-go); it is never restarted.
    ///
    /// Dropping the returned future while leading (e.g. aborting its task) stops renewing
    /// without a release; the term is then cancelled and the worker task aborted at once, so no
    /// leader work survives the renewals (a killed process's work dies with it too).
    pub async fn run_with<F, Fut>(
        mut self,
        cancel: CancellationToken,
        on_started_leading: F,
    ) -> RunOutcome
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Some(acquired_at) = self.acquire(&cancel).await else {
            self.state.send_modify(|s| {
                s.phase = ElectionPhase::Stopped;
                s.leading = false;
            });
            return RunOutcome::Cancelled {
                was_leading: false,
                released: false,
            };
        };
        let term = cancel.child_token();
        self.fence.extend(acquired_at + self.config.renew_deadline);
        self.state.send_modify(|s| {
            s.phase = ElectionPhase::Leading;
            s.leading = true;
        });
        let mut worker = Some(tokio::spawn(on_started_leading(term.clone())));
        let _term_guard = TermGuard {
            term: term.clone(),
            worker: worker.as_ref().map(JoinHandle::abort_handle),
            fence: self.fence.clone(),
        };
        let end = self.renew(&cancel, &mut worker, acquired_at).await;
        self.fence.close();
        match end {
            RenewEnd::Lost(reason) => {
                term.cancel();
                self.state.send_modify(|s| {
                    s.phase = ElectionPhase::Lost;
                    s.leading = false;
                });
                info!(lock = %self.desc, "stopped leading: the lease {} {reason}", self.desc);
                let grace = self
                    .config
                    .lease_duration
                    .saturating_sub(self.config.renew_deadline);
                if let Some(handle) = worker.take() {
                    join_or_abort(handle, grace, &self.desc).await;
                }
                if self.config.release_on_cancel {
                    self.release().await;
                }
                RunOutcome::Lost { reason }
            }
            RenewEnd::Cancelled => {
                let released = if self.config.release_on_cancel {
                    self.release().await == Release::Released
                } else {
                    false
                };
                self.state.send_modify(|s| {
                    s.phase = ElectionPhase::Stopped;
                    s.leading = false;
                });
                info!(lock = %self.desc, released, "stopped leading lease {}", self.desc);
                RunOutcome::Cancelled {
                    was_leading: true,
                    released,
                }
            }
        }
    }

    /// client-go `acquire`: returns the start instant of the successful attempt, or `None`
    /// when cancelled first.
    async fn acquire(&mut self, cancel: &CancellationToken) -> Option<Instant> {
        self.state
            .send_modify(|s| s.phase = ElectionPhase::Acquiring);
        info!(lock = %self.desc, "attempting to acquire leader lease {}...", self.desc);
        loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                biased;
                _ = cancel.cancelled() => return None,
                attempt = self.try_acquire_or_renew() => attempt,
            };
            self.maybe_report_transition();
            match attempt {
                Attempt::Success => {
                    self.note_success();
                    info!(lock = %self.desc, "successfully acquired lease {}", self.desc);
                    return Some(started);
                }
                Attempt::HeldBy(_) => {
                    debug!(lock = %self.desc, "failed to acquire lease {}", self.desc);
                }
                Attempt::Twin(record) => {
                    // Every retry period while the twin leads: rate-limited per Lease.
                    let kind = format!("same-identity standby: {}", self.desc);
                    match LogLimiter::shared().allow(&kind) {
                        Some(note) => warn!(
                            lock = %self.desc, identity = %self.config.identity,
                            acquire_time = ?record.acquire_time, suppressed = note.suppressed,
                            "the lease {} is held under this identity by another process; \
                             standing by until it expires (give each instance its own \
                             --identity) {note}", self.desc
                        ),
                        None => debug!(
                            lock = %self.desc, identity = %self.config.identity,
                            "the lease is held under this identity by another process"
                        ),
                    }
                }
                Attempt::Failed(e) => {
                    debug!(lock = %self.desc, error = %e, "failed to acquire lease {}", self.desc);
                    self.note_error(&e);
                }
            }
            let wait = self.jittered_retry_period();
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return None,
                _ = sleep(wait) => {}
            }
        }
    }

    /// client-go `renew`, with the deadline measured from the last successful renewal. While
    /// draining after cancellation it keeps renewing until the worker finished.
    async fn renew(
        &mut self,
        cancel: &CancellationToken,
        worker: &mut Option<JoinHandle<()>>,
        mut last_success: Instant,
    ) -> RenewEnd {
        let retry = self.config.retry_period;
        let renew_deadline = self.config.renew_deadline;
        let mut next_attempt = Instant::now() + retry;
        let mut drain_until: Option<Instant> = None;
        // The error of the last failed renewal since the last success: why the term ends if
        // none succeeds in time.
        let mut last_error: Option<String> = None;
        loop {
            if drain_until.is_some() && worker.is_none() {
                return RenewEnd::Cancelled;
            }
            let deadline = last_success + renew_deadline;
            let draining = drain_until.is_some();
            let drain_at = drain_until.unwrap_or(deadline);
            tokio::select! {
                biased;
                _ = cancel.cancelled(), if !draining => {
                    info!(lock = %self.desc, "cancelled while leading lease {}; waiting for workers before stepping down", self.desc);
                    drain_until = Some(Instant::now() + renew_deadline);
                    self.state.send_modify(|s| s.phase = ElectionPhase::Stopping);
                    continue;
                }
                _ = join_worker(worker), if draining => continue,
                _ = sleep_until(drain_at), if draining => {
                    warn!(lock = %self.desc, "leader workers still running {renew_deadline:?} after cancellation; aborting them");
                    if let Some(handle) = worker.take() {
                        handle.abort();
                    }
                    continue;
                }
                _ = sleep_until(next_attempt.min(deadline)) => {}
            }
            if Instant::now() >= deadline {
                return RenewEnd::Lost(LostReason::NotRenewed {
                    renew_deadline,
                    last_error,
                });
            }
            let started = Instant::now();
            let attempt = tokio::select! {
                biased;
                attempt = self.try_acquire_or_renew() => Some(attempt),
                _ = sleep_until(deadline) => None,
            };
            self.maybe_report_transition();
            next_attempt = Instant::now() + retry;
            match attempt {
                Some(Attempt::Success) => {
                    last_success = started;
                    last_error = None;
                    self.fence.extend(started + renew_deadline);
                    self.note_success();
                    debug!(lock = %self.desc, "successfully renewed lease {}", self.desc);
                }
                Some(Attempt::HeldBy(holder)) => {
                    return RenewEnd::Lost(LostReason::HeldBy { holder });
                }
                Some(Attempt::Twin(record)) => {
                    error!(
                        lock = %self.desc, identity = %self.config.identity,
                        acquire_time = ?record.acquire_time,
                        lease_transitions = record.lease_transitions,
                        "another process with this identity acquired the lease {}; stepping down \
                         (give each instance its own --identity)", self.desc
                    );
                    return RenewEnd::Lost(LostReason::SameIdentity {
                        identity: record.holder_identity,
                        acquire_time: record.acquire_time,
                        lease_transitions: record.lease_transitions,
                    });
                }
                Some(Attempt::Failed(e)) => {
                    self.note_error(&e);
                    last_error = Some(e.to_string());
                }
                None => {
                    return RenewEnd::Lost(LostReason::RenewalUnanswered {
                        renew_deadline,
                        last_error,
                    });
                }
            }
        }
    }

    /// Remember a Lease this elector wrote (create or replace).
    fn note_written(&mut self, written: Lease) {
        self.written_record = Some(LeaseRecord::from_spec(written.spec.as_ref()));
        self.cached = Some(written);
    }

    /// Whether `record` names our identity but holds an acquisition this elector did not
    /// write: another process runs with the same identity (a restarted instance's record, or
    /// a twin started by mistake) and acquired the Lease itself.
    ///
    /// client-go (`tools/leaderelection/leaderelection.go`, `tryAcquireOrRenew`) compares the
    /// record it reads with the one it observed last (`observedRawRecord`) only to restart its
    /// expiry clock, and decides who holds the Lease by `holderIdentity` alone (`IsLeader`):
    /// any record naming it is its own to renew, whoever wrote its renewTime. So two processes
    /// with one identity both lead. Here a record naming us is ours only while it carries the
    /// acquisition we wrote: an acquirer writes its own `acquireTime` and the next
    /// `leaseTransitions` (the `else` branch of that function's step 3), and a renewal keeps
    /// both. A write that keeps them (a person or tool patching renewTime,
    /// leaseDurationSeconds or annotations) is not a twin's: we renew over it, based on the
    /// record just read, as client-go would.
    fn acquired_by_a_twin(&self, record: &LeaseRecord) -> bool {
        record.holder_identity == self.config.identity
            && !self.written_record.as_ref().is_some_and(|ours| {
                ours.holder_identity == record.holder_identity
                    && ours.acquire_time == record.acquire_time
                    && ours.lease_transitions == record.lease_transitions
            })
    }

    /// client-go `tryAcquireOrRenew` (see the module docs).
    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let now_wall = self.now_wall();
        let now = Instant::now();
        let name = self.config.lease_name.clone();

        // 1. Fast path: the leader updates its cached Lease optimistically.
        // Only over a Lease this elector wrote last: a record read from a twin with our
        // identity is not ours to renew.
        if self.is_leader()
            && self.lease_valid(now)
            && let Some(mut lease) = self.cached.clone()
            && self.written_record.is_some()
            && Some(LeaseRecord::from_spec(lease.spec.as_ref())) == self.written_record
        {
            let mut record = self.our_record(now_wall);
            record.acquire_time = self.observed_record.acquire_time;
            record.lease_transitions = self.observed_record.lease_transitions;
            lease.spec = Some(record.to_spec());
            self.stamp(&mut lease);
            match self.api.replace(&name, &lease).await {
                Ok(written) => {
                    self.wrote(written, record);
                    return Attempt::Success;
                }
                Err(e) => debug!(
                    lock = %self.desc, error = %e,
                    "failed to update lease optimistically, falling back to slow path"
                ),
            }
        }

        // 2. Obtain or create the record.
        let mut record = self.our_record(now_wall);
        let current = match self.api.get(&name).await {
            Ok(lease) => {
                if self.get_failures > 0 {
                    let n = std::mem::take(&mut self.get_failures);
                    let kind = format!("lease readable again: {}", self.desc);
                    match LogLimiter::shared().allow(&kind) {
                        Some(note) => info!(
                            lock = %self.desc, failures = n, suppressed = note.suppressed,
                            "lease lock {} readable again {note}", self.desc
                        ),
                        None => {
                            debug!(lock = %self.desc, failures = n, "lease lock readable again")
                        }
                    }
                }
                lease
            }
            Err(LeaseError::NotFound(_)) => {
                let lease = self.new_lease(&record);
                let created = self.api.create(&lease).await;
                return self.attempted(created, record, "error initially creating lease lock");
            }
            Err(e) => {
                self.get_failures += 1;
                let failures = self.get_failures;
                let kind = format!("lease read failed: {}", self.desc);
                match LogLimiter::shared().allow(&kind) {
                    Some(note) => error!(
                        lock = %self.desc, error = %e, failures, suppressed = note.suppressed,
                        "error retrieving lease lock {} {note}", self.desc
                    ),
                    None => {
                        debug!(lock = %self.desc, error = %e, failures, "error retrieving lease lock")
                    }
                }
                return Attempt::Failed(e);
            }
        };

        // 3. Note a changed record with our own observation time; respect a live holder.
        let old = LeaseRecord::from_spec(current.spec.as_ref());
        self.cached = Some(current.clone());
        if self.observed_raw.as_ref() != Some(&old) {
            self.set_observed(old.clone());
            self.observed_raw = Some(old.clone());
        }
        let twin = self.acquired_by_a_twin(&old);
        if twin && self.lease_valid(now) {
            return Attempt::Twin(old);
        }
        if !old.holder_identity.is_empty() && self.lease_valid(now) && !self.is_leader() && !twin {
            debug!(
                lock = %self.desc, holder = %old.holder_identity,
                "lease is held by {} and has not yet expired", old.holder_identity
            );
            return Attempt::HeldBy(old.holder_identity);
        }

        // 4. Take over or renew, guarded by the resourceVersion just read.
        if self.is_leader() && !twin {
            record.acquire_time = old.acquire_time;
            record.lease_transitions = old.lease_transitions;
        } else {
            record.lease_transitions = old.lease_transitions.saturating_add(1);
        }
        let mut lease = current;
        lease.spec = Some(record.to_spec());
        self.stamp(&mut lease);
        let written = self.api.replace(&name, &lease).await;
        self.attempted(written, record, "failed to update lease")
    }

    /// The Lease as the server wrote it, with `record` in it, is now ours.
    fn wrote(&mut self, written: Lease, record: LeaseRecord) {
        self.note_written(written);
        self.set_observed(record);
    }

    /// The end of an acquire/renew attempt: the write's outcome (`failed`: the log message).
    fn attempted(
        &mut self,
        result: Result<Lease, LeaseError>,
        record: LeaseRecord,
        failed: &str,
    ) -> Attempt {
        match result {
            Ok(written) => {
                self.wrote(written, record);
                Attempt::Success
            }
            Err(e) => {
                log_api_error(&self.desc, failed, &e);
                Attempt::Failed(e)
            }
        }
    }

    /// client-go `release`/`tryRelease`, bounded by `renewDeadline`.
    async fn release(&mut self) -> Release {
        let limit = self.config.renew_deadline;
        match timeout(limit, self.try_release()).await {
            Ok(result) => result,
            Err(_) => {
                error!(lock = %self.desc, "timed out after {limit:?} releasing lease {}", self.desc);
                Release::Failed
            }
        }
    }

    async fn try_release(&mut self) -> Release {
        if !self.is_leader() {
            return Release::NotHolder;
        }
        let name = self.config.lease_name.clone();
        for _ in 0..MAX_RELEASE_CONFLICTS {
            let current = match self.api.get(&name).await {
                Ok(lease) => lease,
                Err(LeaseError::NotFound(_)) => {
                    info!(lock = %self.desc, "lease lock {} not found", self.desc);
                    return Release::Failed;
                }
                Err(e) => {
                    log_api_error(&self.desc, "error retrieving lease lock", &e);
                    return Release::Failed;
                }
            };
            let old = LeaseRecord::from_spec(current.spec.as_ref());
            if self.acquired_by_a_twin(&old) {
                info!(
                    lock = %self.desc,
                    "not releasing lease {}: another process with this identity wrote it last", self.desc
                );
                return Release::NotHolder;
            }
            if old.holder_identity != self.config.identity {
                info!(
                    lock = %self.desc, holder = %old.holder_identity,
                    "not releasing lease {}: it is now held by {:?}", self.desc, old.holder_identity
                );
                self.observed_raw = Some(old.clone());
                self.set_observed(old);
                return Release::NotHolder;
            }
            let now = self.now_wall();
            let record = LeaseRecord {
                holder_identity: String::new(),
                lease_duration_seconds: 1,
                acquire_time: Some(now),
                renew_time: Some(now),
                lease_transitions: old.lease_transitions,
                strategy: None,
                preferred_holder: None,
            };
            let mut lease = current;
            lease.spec = Some(record.to_spec());
            self.unstamp(&mut lease);
            match self.api.replace(&name, &lease).await {
                Ok(written) => {
                    self.wrote(written, record);
                    info!(lock = %self.desc, "released lease {}", self.desc);
                    return Release::Released;
                }
                Err(LeaseError::Conflict(_)) => {
                    debug!(lock = %self.desc, "conflict when releasing lease {}, retrying", self.desc);
                }
                Err(e) => {
                    log_api_error(&self.desc, "failed to release lease", &e);
                    return Release::Failed;
                }
            }
        }
        error!(lock = %self.desc, "giving up releasing lease {} after {MAX_RELEASE_CONFLICTS} conflicts", self.desc);
        Release::Failed
    }

    /// client-go `IsLeader`: the last observed holder is us.
    fn is_leader(&self) -> bool {
        self.observed_record.holder_identity == self.config.identity
    }

    /// client-go `isLeaseValid`: `observedTime + observed leaseDurationSeconds > now`, all on
    /// our monotonic clock.
    fn lease_valid(&self, now: Instant) -> bool {
        let secs = u64::try_from(self.observed_record.lease_duration_seconds).unwrap_or(0);
        self.observed_time
            .is_some_and(|t| t + Duration::from_secs(secs) > now)
    }

    fn set_observed(&mut self, record: LeaseRecord) {
        self.observed_time = Some(Instant::now());
        let wall = self.now_wall();
        self.state.send_modify(|s| {
            s.holder = record.holder().map(str::to_owned);
            s.observed_at = Some(wall);
            s.lease_transitions = Some(record.lease_transitions);
            s.acquire_time = record.acquire_time;
        });
        self.observed_record = record;
    }

    fn note_success(&mut self) {
        let renewed = self.observed_record.renew_time;
        self.state.send_modify(|s| {
            s.last_renew = renewed;
            s.last_error = None;
        });
    }

    fn note_error(&mut self, e: &LeaseError) {
        let msg = e.to_string();
        self.state.send_modify(|s| s.last_error = Some(msg));
    }

    /// client-go `maybeReportTransition` (its `OnNewLeader` callback becomes a log line; the
    /// holder is also in the published state).
    fn maybe_report_transition(&mut self) {
        let holder = &self.observed_record.holder_identity;
        if *holder == self.reported_leader {
            return;
        }
        self.reported_leader = holder.clone();
        if holder.is_empty() {
            info!(lock = %self.desc, "lease {} has no holder", self.desc);
        } else {
            info!(lock = %self.desc, leader = %holder, "new leader elected: {holder}");
        }
    }

    fn now_wall(&self) -> DateTime<Utc> {
        truncate_to_micros((self.wall_clock)())
    }

    fn jittered_retry_period(&mut self) -> Duration {
        let r: f64 = self.rng.random();
        let base = self.config.retry_period;
        base + Duration::try_from_secs_f64(base.as_secs_f64() * r * JITTER_FACTOR)
            .unwrap_or(Duration::ZERO)
    }

    fn our_record(&self, now: DateTime<Utc>) -> LeaseRecord {
        LeaseRecord {
            holder_identity: self.config.identity.clone(),
            lease_duration_seconds: self.config.lease_duration_seconds(),
            acquire_time: Some(now),
            renew_time: Some(now),
            lease_transitions: 0,
            strategy: None,
            preferred_holder: None,
        }
    }

    fn new_lease(&self, record: &LeaseRecord) -> Lease {
        let mut lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.lease_name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(record.to_spec()),
        };
        self.stamp(&mut lease);
        lease
    }

    /// Adds our annotations, keeping everybody else's.
    fn stamp(&self, lease: &mut Lease) {
        if self.config.annotations.is_empty() {
            return;
        }
        let annotations = lease
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        for (k, v) in &self.config.annotations {
            annotations.insert(k.clone(), v.clone());
        }
    }

    /// Removes our annotations where they still carry our values.
    fn unstamp(&self, lease: &mut Lease) {
        let Some(annotations) = lease.metadata.annotations.as_mut() else {
            return;
        };
        for (k, v) in &self.config.annotations {
            if annotations.get(k) == Some(v) {
                annotations.remove(k);
            }
        }
        if annotations.is_empty() {
            lease.metadata.annotations = None;
        }
    }
}

/// Ends the leader work when the run future goes away. On the normal paths the term is already
/// cancelled and the worker finished when this drops; it matters when the future is dropped
/// while leading (its task aborted, a losing `select!` branch): nobody renews the lease any
/// more, so the worker (a detached task) must not outlive it and keep acting while another
/// candidate takes over.
struct TermGuard {
    term: CancellationToken,
    worker: Option<AbortHandle>,
    fence: TermFence,
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        self.fence.close();
        self.term.cancel();
        if let Some(worker) = &self.worker {
            worker.abort();
        }
    }
}

/// Awaits the worker task if there is one (clearing it), else never completes.
async fn join_worker(worker: &mut Option<JoinHandle<()>>) {
    match worker.as_mut() {
        Some(handle) => {
            if let Err(e) = handle.await
                && e.is_panic()
            {
                error!("leader worker panicked: {e}");
            }
            *worker = None;
        }
        None => std::future::pending().await,
    }
}

/// Gives the worker `grace` to finish after its term was cancelled, then aborts it.
async fn join_or_abort(mut handle: JoinHandle<()>, grace: Duration, desc: &str) {
    match timeout(grace, &mut handle).await {
        Ok(Err(e)) if e.is_panic() => error!(lock = %desc, "leader worker panicked: {e}"),
        Ok(_) => {}
        Err(_) => {
            warn!(lock = %desc, "leader workers still running {grace:?} after losing lease {desc}; aborting them");
            handle.abort();
        }
    }
}

fn log_api_error(desc: &str, what: &str, e: &LeaseError) {
    match e {
        LeaseError::Conflict(_) => info!(lock = %desc, error = %e, "{what} {desc}"),
        _ => error!(lock = %desc, error = %e, "{what} {desc}"),
    }
}
