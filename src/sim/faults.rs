//! Runtime fault injection for reliability tests: error responses (500/503/429 with
//! `Retry-After`), added latency, injected 409 conflicts on update/patch, watch streams closed
//! mid-way and watch events delivered late (a lagging informer), and the three ways a client
//! loses events: a deletion seen only on relist (a tombstone), a stale list, a dropped event.
//!
//! Everything is off by default. Decisions come from one seeded RNG (`StdRng::seed_from_u64`),
//! so a run is reproducible as long as requests arrive in the same order; rules with
//! probability 1.0 draw nothing from it. Rules can be scoped by verb, resource and user agent.

use std::sync::Mutex;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::watch;

use super::status::ApiError;
use super::store::EventKind;

/// A Kubernetes request verb, for scoping faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `get`
    Get,
    /// `list`
    List,
    /// `watch`
    Watch,
    /// `create`
    Create,
    /// `update`
    Update,
    /// `patch`
    Patch,
    /// `delete`
    Delete,
    /// `deletecollection`
    DeleteCollection,
}

impl Verb {
    /// The audit name (`get`, `deletecollection`, ...).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }

    /// Whether the verb writes.
    pub(crate) fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

/// What a matching rule does.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultAction {
    /// Answer with this HTTP status (a `Status` body like the real server's for that code),
    /// plus a `Retry-After` header when `retry_after_seconds` is set. Nothing is stored.
    Error {
        /// HTTP status code (500, 503, 429, ...).
        code: u16,
        /// `Retry-After` seconds.
        retry_after_seconds: Option<u32>,
    },
    /// Delay the response by this long before handling it.
    Latency(Duration),
    /// Answer an update/patch with a 409 Conflict ("the object has been modified") without
    /// applying it.
    Conflict,
    /// Close a matching watch stream after it has delivered this many events (0 = right after
    /// the initial events). Decided once per watch request.
    DropWatchAfter(u64),
    /// Deliver every event of a matching watch stream this long after it was committed.
    DelayWatchEvents(Duration),
    /// Close a matching watch stream after a number of events drawn uniformly from
    /// `0..=max` (decided once per watch request): streams dropped at random points.
    DropWatchAfterRandom(u64),
    /// A *tombstone deletion*: when a matching watch stream reaches a `DELETED` event, it sends
    /// an `ERROR` event with `410 Expired` ("too old resource version") instead and ends, so the
    /// client relists and learns of the deletion only because the object is missing from the
    /// list. This is what happens when the watch cache's window has moved past a client's
    /// resourceVersion (k8s.io/apiserver `pkg/storage/cacher/watch_cache.go`,
    /// `getAllEventsSinceLocked` → `NewResourceExpired`); client-go's reflector relists on it
    /// (`tools/cache/reflector.go`, `isExpiredError`) and its `DeltaFIFO.Replace` reports the
    /// object as `DeletedFinalStateUnknown` (`tools/cache/delta_fifo.go`). Decided once per
    /// watch request.
    TombstoneDeletes,
    /// A *stale list*: a matching list answers the resource as it was this many of its events
    /// ago, with that older `resourceVersion` (never older than a `resourceVersion` the request
    /// asked for: `NotOlderThan`), as a list served by a lagging watch cache does
    /// (`resourceVersion=0` lists, k8s.io/apiserver `pkg/storage/cacher/cacher.go`
    /// `GetList`; kubernetes/kubernetes#59848). A watch from that resourceVersion then replays
    /// the events the list lacked. Applies to every matching list, also a consistent one
    /// (`resourceVersion` unset) that a real server would answer from etcd: a harsher fault.
    StaleList(u64),
    /// A *dropped event*: a matching watch stream silently skips its `nth` event (1-based,
    /// counting only events of `kind` when set) and carries on. Nothing tells the client: it
    /// holds the old state until a later event of the object or a relist.
    DropEvent {
        /// Which event (1 = the first the stream would send).
        nth: u64,
        /// Count only `ADDED` / `MODIFIED` / `DELETED` events (as the client would see them).
        kind: Option<EventKind>,
    },
}

/// One fault rule.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultRule {
    /// What happens.
    pub action: FaultAction,
    /// Verbs it applies to (empty = all).
    pub verbs: Vec<Verb>,
    /// Resource plural it applies to (`None` = all).
    pub resource: Option<String>,
    /// Resource plurals it never applies to (e.g. `leases`, to fault everything but the
    /// leader election).
    pub except_resources: Vec<String>,
    /// Substring of the user agent it applies to (`None` = all).
    pub user_agent: Option<String>,
    /// Chance per matching request, 0.0..=1.0.
    pub probability: f64,
    /// Fire at most this many times (`None` = unlimited).
    pub times: Option<u64>,
}

impl FaultRule {
    fn new(action: FaultAction) -> Self {
        Self {
            action,
            verbs: Vec::new(),
            resource: None,
            except_resources: Vec::new(),
            user_agent: None,
            probability: 1.0,
            times: None,
        }
    }

    /// Fail matching requests with `code` (e.g. 500, 503).
    pub fn error(code: u16) -> Self {
        Self::new(FaultAction::Error {
            code,
            retry_after_seconds: None,
        })
    }

    /// 429 TooManyRequests with `Retry-After: seconds`.
    pub fn too_many_requests(retry_after_seconds: u32) -> Self {
        Self::new(FaultAction::Error {
            code: 429,
            retry_after_seconds: Some(retry_after_seconds),
        })
    }

    /// Add latency.
    pub fn latency(d: Duration) -> Self {
        Self::new(FaultAction::Latency(d))
    }

    /// 409 Conflict on update/patch (scoped to those verbs).
    pub fn conflict() -> Self {
        let mut r = Self::new(FaultAction::Conflict);
        r.verbs = vec![Verb::Update, Verb::Patch];
        r
    }

    /// Close watch streams after `n` events.
    pub fn drop_watch_after(n: u64) -> Self {
        let mut r = Self::new(FaultAction::DropWatchAfter(n));
        r.verbs = vec![Verb::Watch];
        r
    }

    /// Close watch streams after a random number of events in `0..=max`.
    pub fn drop_watch_randomly(max: u64) -> Self {
        let mut r = Self::new(FaultAction::DropWatchAfterRandom(max));
        r.verbs = vec![Verb::Watch];
        r
    }

    /// Watches end with `410 Expired` instead of delivering a `DELETED` event (a tombstone
    /// deletion, see [`FaultAction::TombstoneDeletes`]).
    pub fn tombstone_deletes() -> Self {
        let mut r = Self::new(FaultAction::TombstoneDeletes);
        r.verbs = vec![Verb::Watch];
        r
    }

    /// Lists answer the state of `events_behind` events ago ([`FaultAction::StaleList`]).
    pub fn stale_list(events_behind: u64) -> Self {
        let mut r = Self::new(FaultAction::StaleList(events_behind));
        r.verbs = vec![Verb::List];
        r
    }

    /// Watches silently skip their `nth` event, of `kind` when set ([`FaultAction::DropEvent`]).
    pub fn drop_event(nth: u64, kind: Option<EventKind>) -> Self {
        let mut r = Self::new(FaultAction::DropEvent { nth, kind });
        r.verbs = vec![Verb::Watch];
        r
    }

    /// Delay watch event delivery.
    pub fn delay_watch_events(d: Duration) -> Self {
        let mut r = Self::new(FaultAction::DelayWatchEvents(d));
        r.verbs = vec![Verb::Watch];
        r
    }

    /// Restrict to these verbs.
    pub fn verbs(mut self, verbs: &[Verb]) -> Self {
        self.verbs = verbs.to_vec();
        self
    }

    /// Restrict to a resource plural (`pods`, `virtualmachineinstances`).
    pub fn resource(mut self, resource: &str) -> Self {
        self.resource = Some(resource.to_string());
        self
    }

    /// Never apply to the resource plural `resource` (repeatable).
    pub fn except_resource(mut self, resource: &str) -> Self {
        self.except_resources.push(resource.to_string());
        self
    }

    /// Restrict to user agents containing `ua`.
    pub fn user_agent(mut self, ua: &str) -> Self {
        self.user_agent = Some(ua.to_string());
        self
    }

    /// Fire with probability `p` (clamped to 0..=1).
    pub fn probability(mut self, p: f64) -> Self {
        self.probability = p.clamp(0.0, 1.0);
        self
    }

    /// Fire at most `n` times.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    /// Set `Retry-After` on an error rule.
    pub(crate) fn retry_after(mut self, seconds: u32) -> Self {
        if let FaultAction::Error {
            retry_after_seconds,
            ..
        } = &mut self.action
        {
            *retry_after_seconds = Some(seconds);
        }
        self
    }

    fn applies(&self, verb: Verb, resource: &str, ua: &str) -> bool {
        (self.verbs.is_empty() || self.verbs.contains(&verb))
            && self.resource.as_deref().is_none_or(|r| r == resource)
            && !self.except_resources.iter().any(|r| r == resource)
            && self.user_agent.as_deref().is_none_or(|u| ua.contains(u))
            && self.times != Some(0)
    }
}

/// Handle of an installed rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FaultId(u64);

impl FaultId {
    /// The number behind the handle (what the admin endpoint shows).
    pub(crate) fn get(self) -> u64 {
        self.0
    }

    /// The handle with this number (from [`FaultId::get`]).
    pub(crate) fn from_raw(n: u64) -> Self {
        FaultId(n)
    }
}

impl Faults {
    /// The installed rules with their handles, in evaluation order.
    pub fn installed(&self) -> Vec<(FaultId, FaultRule)> {
        self.lock().rules.clone()
    }
}

struct State {
    rng: StdRng,
    rules: Vec<(FaultId, FaultRule)>,
    next: u64,
    /// How often each rule fired, kept after the rule is removed.
    fired: std::collections::HashMap<FaultId, u64>,
}

/// What the server does to one request.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    /// Sleep this long first.
    pub latency: Duration,
    /// Then fail with this, if set.
    pub error: Option<ApiError>,
    /// For a watch: close after this many events.
    pub drop_watch_after: Option<u64>,
    /// For a watch: delay each event by this long.
    pub watch_delay: Duration,
    /// For update/patch: answer 409 Conflict.
    pub conflict: bool,
    /// For a watch: end with `410 Expired` instead of sending a `DELETED` event.
    pub tombstone_deletes: bool,
    /// For a list: answer the state of this many events of the resource ago.
    pub stale_list: Option<u64>,
    /// For a watch: skip these events (`nth`, counted among events of `kind` when set).
    pub drop_events: Vec<(u64, Option<EventKind>)>,
    /// For a watch: the [`Faults::drop_watches`] signal, subscribed while deciding, so a drop
    /// that lands between the decision and the stream's start still closes the stream.
    pub drop_signal: Option<watch::Receiver<u64>>,
}

/// Runtime fault-injection control (see the module docs).
pub struct Faults {
    state: Mutex<State>,
    drop_epoch: watch::Sender<u64>,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("rules", &self.rules())
            .finish()
    }
}

impl Faults {
    /// No rules, RNG seeded with `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            state: Mutex::new(State {
                rng: StdRng::seed_from_u64(seed),
                rules: Vec::new(),
                next: 0,
                fired: std::collections::HashMap::new(),
            }),
            drop_epoch: watch::Sender::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Restart the RNG from `seed`.
    pub fn reseed(&self, seed: u64) {
        self.lock().rng = StdRng::seed_from_u64(seed);
    }

    /// Install a rule; rules are evaluated in installation order.
    pub fn add(&self, rule: FaultRule) -> FaultId {
        let mut s = self.lock();
        s.next += 1;
        let id = FaultId(s.next);
        s.rules.push((id, rule));
        id
    }

    /// Remove a rule; `false` if it was not installed.
    pub fn remove(&self, id: FaultId) -> bool {
        let mut s = self.lock();
        let before = s.rules.len();
        s.rules.retain(|(i, _)| *i != id);
        s.rules.len() != before
    }

    /// Remove every rule.
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// The installed rules (with remaining `times`).
    pub fn rules(&self) -> Vec<FaultRule> {
        self.lock().rules.iter().map(|(_, r)| r.clone()).collect()
    }

    /// How many requests rule `id` fired on so far (also after it was removed): answers it
    /// failed, or for the watch and list actions the requests it was applied to (a watch whose
    /// drop point or dropped event it never reached still counts).
    pub fn fired(&self, id: FaultId) -> u64 {
        self.lock().fired.get(&id).copied().unwrap_or(0)
    }

    /// Close every watch stream open right now (clients see the connection end and re-watch).
    pub fn drop_watches(&self) {
        self.drop_epoch.send_modify(|e| *e += 1);
    }

    /// Decide what happens to one request.
    pub(crate) fn decide(&self, verb: Verb, resource: &str, user_agent: &str) -> Decision {
        let mut d = Decision {
            drop_signal: (verb == Verb::Watch).then(|| self.drop_epoch.subscribe()),
            ..Decision::default()
        };
        let mut s = self.lock();
        let State {
            rng, rules, fired, ..
        } = &mut *s;
        for (id, rule) in rules.iter_mut() {
            if !rule.applies(verb, resource, user_agent) {
                continue;
            }
            let fire = rule.probability >= 1.0
                || (rule.probability > 0.0 && rng.random::<f64>() < rule.probability);
            if !fire {
                continue;
            }
            if let Some(t) = rule.times.as_mut() {
                *t -= 1;
            }
            *fired.entry(*id).or_default() += 1;
            match &rule.action {
                FaultAction::Error {
                    code,
                    retry_after_seconds,
                } => {
                    if d.error.is_none() {
                        d.error = Some(ApiError::injected(*code, *retry_after_seconds));
                    }
                }
                FaultAction::Latency(l) => d.latency += *l,
                FaultAction::Conflict => {
                    if matches!(verb, Verb::Update | Verb::Patch) {
                        d.conflict = true;
                    }
                }
                FaultAction::DropWatchAfter(n) => {
                    if verb == Verb::Watch {
                        d.drop_watch_after = Some(d.drop_watch_after.map_or(*n, |m| m.min(*n)));
                    }
                }
                FaultAction::DelayWatchEvents(l) => {
                    if verb == Verb::Watch {
                        d.watch_delay += *l;
                    }
                }
                FaultAction::DropWatchAfterRandom(max) => {
                    if verb == Verb::Watch {
                        let n = rng.random_range(0..=*max);
                        d.drop_watch_after = Some(d.drop_watch_after.map_or(n, |m| m.min(n)));
                    }
                }
                FaultAction::TombstoneDeletes => d.tombstone_deletes |= verb == Verb::Watch,
                FaultAction::StaleList(n) => {
                    if verb == Verb::List {
                        d.stale_list = Some(d.stale_list.map_or(*n, |m| m.max(*n)));
                    }
                }
                FaultAction::DropEvent { nth, kind } => {
                    if verb == Verb::Watch {
                        d.drop_events.push((*nth, *kind));
                    }
                }
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_by_default() {
        let f = Faults::new(1);
        let d = f.decide(Verb::Create, "pods", "x");
        assert!(d.error.is_none() && !d.conflict && d.latency.is_zero());
    }

    #[test]
    fn scoped_rules() {
        let f = Faults::new(1);
        f.add(
            FaultRule::error(503)
                .verbs(&[Verb::Create])
                .resource("pods")
                .user_agent("ctrl"),
        );
        assert!(f.decide(Verb::Create, "pods", "ctrl/1").error.is_some());
        assert!(f.decide(Verb::Create, "pods", "other").error.is_none());
        assert!(f.decide(Verb::Get, "pods", "ctrl").error.is_none());
        assert!(f.decide(Verb::Create, "nodes", "ctrl").error.is_none());
    }

    #[test]
    fn excepted_resources_and_random_watch_drops() {
        let f = Faults::new(3);
        f.add(FaultRule::error(500).except_resource("leases"));
        assert!(f.decide(Verb::Update, "pods", "").error.is_some());
        assert!(f.decide(Verb::Update, "leases", "").error.is_none());
        let f = Faults::new(3);
        f.add(FaultRule::drop_watch_randomly(10));
        let drops: Vec<u64> = (0..64)
            .map(|_| f.decide(Verb::Watch, "pods", "").drop_watch_after.unwrap())
            .collect();
        assert!(drops.iter().all(|n| *n <= 10));
        assert!(drops.iter().any(|n| *n != drops[0]), "{drops:?}");
        assert_eq!(f.decide(Verb::Get, "pods", "").drop_watch_after, None);
    }

    #[test]
    fn lost_event_rules_reach_their_verbs_only() {
        let f = Faults::new(0);
        f.add(FaultRule::tombstone_deletes().resource("pods"));
        f.add(FaultRule::stale_list(3).resource("pods"));
        f.add(FaultRule::stale_list(5).resource("pods"));
        f.add(FaultRule::drop_event(2, Some(EventKind::Modified)).resource("pods"));
        f.add(FaultRule::drop_event(4, None).resource("pods"));
        let w = f.decide(Verb::Watch, "pods", "");
        assert!(w.tombstone_deletes);
        assert_eq!(
            w.drop_events,
            vec![(2, Some(EventKind::Modified)), (4, None)]
        );
        assert_eq!(w.stale_list, None);
        let l = f.decide(Verb::List, "pods", "");
        assert_eq!(l.stale_list, Some(5), "the stalest rule wins");
        assert!(!l.tombstone_deletes && l.drop_events.is_empty());
        let other = f.decide(Verb::Watch, "nodes", "");
        assert!(!other.tombstone_deletes && other.drop_events.is_empty());
    }

    #[test]
    fn times_and_remove() {
        let f = Faults::new(1);
        let id = f.add(FaultRule::conflict().times(1));
        assert!(f.decide(Verb::Patch, "pods", "").conflict);
        assert!(!f.decide(Verb::Patch, "pods", "").conflict);
        assert!(f.remove(id));
        assert!(!f.remove(id));
    }

    #[test]
    fn fired_counts_survive_removal() {
        let f = Faults::new(5);
        let always = f.add(FaultRule::error(503).verbs(&[Verb::Create]));
        let half = f.add(FaultRule::conflict().probability(0.5));
        for _ in 0..3 {
            f.decide(Verb::Create, "pods", "");
        }
        let conflicts = (0..40)
            .filter(|_| f.decide(Verb::Patch, "pods", "").conflict)
            .count() as u64;
        f.clear();
        f.decide(Verb::Create, "pods", "");
        assert_eq!(f.fired(always), 3);
        assert_eq!(f.fired(half), conflicts);
        assert!(conflicts > 0 && conflicts < 40, "{conflicts}");
        assert_eq!(f.fired(FaultId::from_raw(99)), 0);
    }

    #[test]
    fn seeded_reproducible() {
        let run = |seed| {
            let f = Faults::new(seed);
            f.add(FaultRule::error(500).probability(0.5));
            (0..64)
                .map(|_| f.decide(Verb::Get, "pods", "").error.is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
        let hits = run(7).iter().filter(|b| **b).count();
        assert!(hits > 10 && hits < 54);
    }

    #[test]
    fn retry_after_on_429() {
        let f = Faults::new(0);
        f.add(FaultRule::too_many_requests(3));
        let e = f.decide(Verb::List, "pods", "").error.unwrap();
        assert_eq!(e.code, 429);
        assert_eq!(e.retry_after, Some(3));
    }
}
