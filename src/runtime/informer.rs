//! Informers: a kube-runtime `watcher` feeding a [`Store`] (ours, [`super::store`]: one `Arc`
//! per object, shared with the notifications) and client-go style event handlers (add / update
//! / delete notifications).
//!
//! Differences from using kube's `reflector()` directly, and why:
//! - Handlers see the store *after* it was updated, as client-go's shared informer guarantees.
//!   Observers ([`InformerState::observed_by`]: the flight recorder, the VM controller's mark of
//!   a VMI a relist lost) see each change *before* it, so no reader of the cache can hold a
//!   version an observer has not seen.
//! - After a relist (`Init` … `InitDone`, e.g. when the watch was down or got 410 Gone), objects
//!   that were in the store but are not in the new list are reported as **deletions**, and
//!   objects that are listed again are reported as updates (client-go's `DeltaFIFO.Replace` with
//!   `DeletedFinalStateUnknown`). kube's watcher only swaps the store, so without this a VMI
//!   deleted while the watch was down would never lower the VM controller's deletion
//!   expectation and the VM would stall until the 5-minute expectation timeout.
//! - "Synced" (client-go `HasSynced`) becomes true after the first complete list.
//!
//! Source of the semantics: client-go `tools/cache/shared_informer.go`, `delta_fifo.go`
//! (`Replace`), `controller.go` (`processDeltas`).

use futures::StreamExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::index::{Index, IndexFn};
use super::log_limit::LogLimiter;
pub use super::store::Store;
use super::store::{Key, KeyRef};
use super::wire::{WithoutManagedFields, lean_api};

/// A change an informer reports to its handlers. Objects are the store's copies: never mutate
/// them, clone first (KubeVirt's `DeepCopy()` rule).
#[derive(Debug, Clone)]
pub enum Notification<K> {
    /// A new object.
    Add(Arc<K>),
    /// A known object changed (or was listed again after a relist).
    Update { old: Arc<K>, new: Arc<K> },
    /// An object was deleted, or vanished while the watch was down (`relisted` = true: the last
    /// state known to us is given, like client-go's `DeletedFinalStateUnknown`).
    Delete { obj: Arc<K>, relisted: bool },
}

/// A handler callback. Called on the informer's task: keep it cheap (enqueue a key, lower an
/// expectation) and never block.
pub type Handler<K> = Arc<dyn Fn(&Notification<K>) + Send + Sync>;

/// The pure part of an informer: applies watcher events to its [`Store`] and says which
/// notifications they produce.
pub struct InformerState<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    store: Store<K>,
    relist_buffer: Vec<Arc<K>>,
    synced: bool,
    /// Applied to every object before it is cached or handed to handlers (client-go's
    /// `SetTransform`); [`strip_for_cache`] unless set with [`InformerState::with_transform`].
    transform: fn(&mut K),
    /// Secondary indexes kept with the store ([`InformerState::with_index`]).
    indexes: Vec<Arc<Index<K>>>,
    /// UIDs of objects the API server said are gone ([`InformerState::forget_gone`]): a watch
    /// event of one of them that arrives later (a delayed one) is stale and not applied.
    gone: GoneUids,
    /// Called with each change before the store applies it ([`InformerState::observed_by`]).
    observers: Vec<Handler<K>>,
}

impl<K> InformerState<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// An empty, not yet synced state.
    pub(crate) fn new() -> Self {
        InformerState {
            store: Store::default(),
            relist_buffer: Vec::new(),
            synced: false,
            transform: strip_for_cache::<K>,
            indexes: Vec::new(),
            gone: GoneUids::default(),
            observers: Vec::new(),
        }
    }

    /// The same state also calling `observer` with each change *before* the store applies it
    /// (the handlers are called after): a reader of the cache, e.g. a worker's snapshot, can
    /// then only hold versions the observer has seen. The flight recorder observes this way, so
    /// a recorded reconcile never names an input whose change is recorded after it; so does
    /// the VM controller's mark of a VMI a relist lost, so no VM reconcile finds the VMI gone
    /// from the cache and not marked.
    pub(crate) fn observed_by(mut self, observer: Handler<K>) -> Self {
        self.observers.push(observer);
        self
    }

    fn observe(&self, changes: &[Notification<K>]) {
        for observer in &self.observers {
            for n in changes {
                observer(n);
            }
        }
    }

    /// The same state with another transform (which should call [`strip_for_cache`] too).
    pub(crate) fn with_transform(mut self, transform: fn(&mut K)) -> Self {
        self.transform = transform;
        self
    }

    /// The same state keeping one more secondary index (client-go `AddIndexers`), read with
    /// [`Informer::by_index`].
    pub(crate) fn with_index(mut self, func: &'static IndexFn<K>) -> Self {
        self.indexes.push(Arc::new(Index::new(func)));
        self
    }

    /// A reader of the cache.
    pub(crate) fn store(&self) -> Store<K> {
        self.store.clone()
    }

    /// True after the first complete list.
    pub(crate) fn synced(&self) -> bool {
        self.synced
    }

    /// Apply one watcher event; returns the notifications to deliver (after the store update;
    /// the observers, if any, have seen them before it).
    /// Objects pass through the transform first (by default: without `metadata.managedFields`,
    /// see [`strip_for_cache`]). Each object is cached as one `Arc` ([`cache_copy`]) that the
    /// store and the notification share.
    pub(crate) fn apply(&mut self, event: watcher::Event<K>) -> Vec<Notification<K>> {
        let mut out = Vec::new();
        match event {
            watcher::Event::Init => self.relist_buffer.clear(),
            watcher::Event::InitApply(mut obj) => {
                (self.transform)(&mut obj);
                self.relist_buffer.push(cache_copy(obj));
            }
            watcher::Event::InitDone => {
                let mut listed = super::store::Map::with_capacity_and_hasher(
                    self.relist_buffer.len(),
                    Default::default(),
                );
                for new in self.relist_buffer.drain(..) {
                    let key = Key::of(new.as_ref());
                    match self.store.lookup(KeyRef::of(new.as_ref())) {
                        Some(old) => out.push(Notification::Update {
                            old,
                            new: new.clone(),
                        }),
                        None => out.push(Notification::Add(new.clone())),
                    }
                    listed.insert(key, new);
                }
                for old in self.store.state() {
                    if !listed.contains_key(&KeyRef::of(old.as_ref())) {
                        out.push(Notification::Delete {
                            obj: old,
                            relisted: true,
                        });
                    }
                }
                self.observe(&out);
                self.store.replace(listed);
                if !self.indexes.is_empty() {
                    let all = self.store.state();
                    for index in &self.indexes {
                        index.rebuild(all.iter().map(|o| o.as_ref()));
                    }
                }
                self.synced = true;
            }
            watcher::Event::Apply(mut obj) => {
                if self.gone.contains(obj.meta().uid.as_deref()) {
                    return out;
                }
                (self.transform)(&mut obj);
                let key = Key::of(&obj);
                let new = cache_copy(obj);
                // This task is the store's only writer: the copy read here is the one the
                // insert replaces.
                let n = match self.store.lookup(KeyRef::of(new.as_ref())) {
                    Some(old) => Notification::Update {
                        old,
                        new: new.clone(),
                    },
                    None => Notification::Add(new.clone()),
                };
                self.observe(std::slice::from_ref(&n));
                self.store.insert(key, new);
                self.update_indexes(&n, None);
                out.push(n);
            }
            watcher::Event::Delete(mut obj) => {
                (self.transform)(&mut obj);
                // The cached copy a deletion removes: its index value is the one listed (the
                // deleted object's final state may differ from it when an update was missed).
                let obj = Arc::new(obj);
                let n = Notification::Delete {
                    obj: obj.clone(),
                    relisted: false,
                };
                self.observe(std::slice::from_ref(&n));
                let cached = self.store.remove(KeyRef::of(obj.as_ref()));
                self.update_indexes(&n, cached.as_deref());
                out.push(n);
            }
        }
        out
    }

    /// The API server answered 404 for the object `key` (a delete or a read by name), so the
    /// object with `uid` is gone although the cache still holds it: its `DELETED` was lost or
    /// is still on its way. Remove it and report a relisted deletion (the last state known, as
    /// a relist would), if the cached object is that one; later watch events of `uid` are
    /// ignored. client-go has no counterpart: its caches agree with the server again only
    /// through a relist (issue 38 item 2).
    pub(crate) fn forget_gone(&mut self, key: &ObjectRef<K>, uid: &str) -> Vec<Notification<K>> {
        self.gone.insert(uid);
        let Some(cached) = self.store.get(key) else {
            return Vec::new();
        };
        if cached.meta().uid.as_deref() != Some(uid) {
            return Vec::new();
        }
        let n = Notification::Delete {
            obj: cached,
            relisted: true,
        };
        self.observe(std::slice::from_ref(&n));
        self.store.remove(KeyRef::from_ref(key));
        self.update_indexes(&n, None);
        vec![n]
    }

    /// Bring the indexes up to date with the store after a watch event's notification `n`
    /// (the store first: a lookup in between finds a candidate the store no longer has, or
    /// misses an object whose notification is still to come, never a wrong one, see
    /// [`Informer::by_index`]).
    fn update_indexes(&self, n: &Notification<K>, deleted_copy: Option<&K>) {
        let (old, new) = match n {
            Notification::Add(new) => (None, Some(new.as_ref())),
            Notification::Update { old, new } => (Some(old.as_ref()), Some(new.as_ref())),
            Notification::Delete { obj, .. } => (Some(obj.as_ref()), None),
        };
        for index in &self.indexes {
            index.update(old, new);
            if let Some(copy) = deleted_copy {
                index.update(Some(copy), None);
            }
        }
    }
}

/// A bounded set of UIDs the API server said are gone. UIDs are never reused, so forgetting
/// the oldest only gives up the guard against an event delayed past that many later 404s.
#[derive(Default)]
struct GoneUids {
    order: std::collections::VecDeque<String>,
    set: std::collections::HashSet<String>,
}

impl GoneUids {
    const CAPACITY: usize = 4096;

    fn insert(&mut self, uid: &str) {
        if !self.set.insert(uid.to_string()) {
            return;
        }
        self.order.push_back(uid.to_string());
        if self.order.len() > Self::CAPACITY
            && let Some(oldest) = self.order.pop_front()
        {
            self.set.remove(&oldest);
        }
    }

    fn contains(&self, uid: Option<&str>) -> bool {
        uid.is_some_and(|u| self.set.contains(u))
    }
}

/// A watcher event of wire objects (read without `managedFields`) as one of the cached type.
fn event_into<W, K: From<W>>(event: watcher::Event<WithoutManagedFields<W>>) -> watcher::Event<K> {
    match event {
        watcher::Event::Apply(o) => watcher::Event::Apply(o.0.into()),
        watcher::Event::Delete(o) => watcher::Event::Delete(o.0.into()),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(o.0.into()),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The copy the cache keeps: a clone of the decoded object, dropping the decoded one.
///
/// serde grows every `Vec` by doubling while it decodes, so a decoded object carries unused
/// capacity; a clone allocates each `Vec` and `String` at its length. At 1,000 VMs caching the
/// decoded objects themselves cost about 12 KiB more RSS per VM than caching clones
/// (docs/performance.md "Bytes per cached VM"), for a clone that is about 1 % of the
/// controller's CPU.
pub fn cache_copy<K: Clone>(decoded: K) -> Arc<K> {
    Arc::new(decoded.clone())
}

/// What the caches drop from every object before storing it: `metadata.managedFields`, the
/// server-side-apply bookkeeping no controller decision reads, often the largest part of a
/// small object's metadata on a real API server (a client-go `TransformFunc` doing the same
/// is the usual remedy; KubeVirt v1.9's informers keep it). Everything else is kept: the
/// decisions copy unmodelled fields through. A watched object arrives without it already
/// ([`WithoutManagedFields`] skips it while decoding); this covers objects handed to the state
/// otherwise (fixed informers, tests).
pub fn strip_for_cache<K: Resource>(obj: &mut K) {
    obj.meta_mut().managed_fields = None;
}

impl<K> Default for InformerState<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    fn default() -> Self {
        Self::new()
    }
}

/// Whether an informer's resource is served, answered once ([`Informer::spawn_decoding`]).
pub(crate) type Gate = futures::future::BoxFuture<'static, bool>;

/// A running informer: its cache and its sync state.
#[derive(Clone)]
pub struct Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// Human name for logs (`virtualmachineinstances`).
    pub name: String,
    store: Store<K>,
    indexes: Vec<Arc<Index<K>>>,
    synced: watch::Receiver<bool>,
    /// To the informer's task: objects the API server said are gone ([`Informer::forget_gone`]).
    gone: mpsc::UnboundedSender<(ObjectRef<K>, String)>,
}

impl<K> Informer<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// Start watching `api` with `config`, delivering notifications to `handlers` in order,
    /// until `cancel`. Watch errors are logged and retried with kube's default backoff.
    pub fn spawn(
        name: &str,
        api: Api<K>,
        config: watcher::Config,
        handlers: Vec<Handler<K>>,
        cancel: CancellationToken,
    ) -> Self {
        Self::spawn_with(InformerState::new(), name, api, config, handlers, cancel)
    }

    /// [`Informer::spawn`] from a configured state: a transform
    /// ([`InformerState::with_transform`]), indexes ([`InformerState::with_index`]).
    pub(crate) fn spawn_with(
        state: InformerState<K>,
        name: &str,
        api: Api<K>,
        config: watcher::Config,
        handlers: Vec<Handler<K>>,
        cancel: CancellationToken,
    ) -> Self {
        Self::spawn_decoding(None, state, name, api, config, handlers, cancel)
    }

    /// [`Informer::spawn_with`] watching `api` as the wire type `W` and caching each object as
    /// the `K` it converts into: a `W` narrower than `K` skips, while decoding, the fields a
    /// transform would drop (client-go has no counterpart: its informers decode whole objects
    /// and `SetTransform` trims them after). The transform and indexes still apply to the `K`.
    /// Every informer reads its objects without `metadata.managedFields`, skipped unread
    /// ([`WithoutManagedFields`]).
    ///
    /// With a `gate`, the watch starts once the gate says the resource is served: until then
    /// the informer is empty and not synced; when the gate says it is not, it stays empty and
    /// counts as synced (as [`Informer::disabled`]). Starting does not wait for the gate, so a
    /// controller started before its API server answers still binds its endpoints and stops
    /// on a signal.
    pub(crate) fn spawn_decoding<W>(
        gate: Option<Gate>,
        mut state: InformerState<K>,
        name: &str,
        api: Api<W>,
        config: watcher::Config,
        handlers: Vec<Handler<K>>,
        cancel: CancellationToken,
    ) -> Self
    where
        W: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
        W::DynamicType: Eq + std::hash::Hash + Clone + Default,
        K: From<W>,
    {
        let store = state.store();
        let indexes = state.indexes.clone();
        let (tx, rx) = watch::channel(false);
        let (gone_tx, mut gone_rx) = mpsc::unbounded_channel::<(ObjectRef<K>, String)>();
        let task_name = name.to_string();
        tokio::spawn(async move {
            use futures::TryStreamExt;
            use kube::runtime::WatchStreamExt;
            if let Some(gate) = gate {
                let served = tokio::select! {
                    _ = cancel.cancelled() => return,
                    served = gate => served,
                };
                if !served {
                    let _ = tx.send(true);
                    return;
                }
            }
            let mut stream = watcher(lean_api(api), config)
                .default_backoff()
                .map_ok(|event| event_into::<W, K>(event))
                .boxed();
            // One line per kind and minute: a watch that fails after every relist (e.g. 410
            // "too old resource version" each time) recovers in between, so counting only
            // consecutive failures logged it about once a second (issue 38 item 8).
            let limiter = LogLimiter::shared();
            let failed_kind = format!("watch failed: {task_name}");
            let recovered_kind = format!("watch recovered: {task_name}");
            // Failures since the last success.
            let mut failures: u64 = 0;
            loop {
                let next = tokio::select! {
                    _ = cancel.cancelled() => break,
                    Some((key, uid)) = gone_rx.recv() => {
                        for n in state.forget_gone(&key, &uid) {
                            tracing::debug!(informer = %task_name, key = %key, uid, "the API server says it is gone; dropped from the cache");
                            for h in &handlers {
                                h(&n);
                            }
                        }
                        continue;
                    }
                    next = stream.next() => next,
                };
                match next {
                    None => break,
                    Some(Err(err)) => {
                        failures += 1;
                        match limiter.allow(&failed_kind) {
                            Some(note) => tracing::warn!(
                                informer = %task_name, error = %err, failures,
                                suppressed = note.suppressed,
                                "watch failed; retrying with backoff {note}"
                            ),
                            None => tracing::debug!(
                                informer = %task_name, error = %err, failures,
                                "watch failed; retrying"
                            ),
                        }
                    }
                    Some(Ok(event)) => {
                        // `Init` starts every list attempt, also those that then fail: only
                        // what the server sent counts as a success.
                        if !matches!(event, watcher::Event::Init) && failures > 0 {
                            let n = std::mem::take(&mut failures);
                            match limiter.allow(&recovered_kind) {
                                Some(note) => tracing::info!(
                                    informer = %task_name, failures = n,
                                    suppressed = note.suppressed, "watch recovered {note}"
                                ),
                                None => tracing::debug!(
                                    informer = %task_name, failures = n, "watch recovered"
                                ),
                            }
                        }
                        for n in state.apply(event) {
                            for h in &handlers {
                                h(&n);
                            }
                        }
                        if state.synced() && !*tx.borrow() {
                            tracing::debug!(informer = %task_name, "cache synced");
                            let _ = tx.send(true);
                        }
                    }
                }
            }
        });
        Informer {
            name: name.to_string(),
            store,
            indexes,
            synced: rx,
            gone: gone_tx,
        }
    }

    /// An informer that never watches and holds exactly `objects`, synced: a cache frozen at
    /// one instant, for tests that need a controller to act on a copy older than the server's.
    pub fn fixed(name: &str, objects: impl IntoIterator<Item = K>) -> Self {
        let mut state = InformerState::<K>::new();
        state.apply(watcher::Event::Init);
        for object in objects {
            state.apply(watcher::Event::InitApply(object));
        }
        state.apply(watcher::Event::InitDone);
        let (_tx, rx) = watch::channel(true);
        Informer {
            name: name.to_string(),
            store: state.store(),
            indexes: state.indexes.clone(),
            synced: rx,
            gone: mpsc::unbounded_channel().0,
        }
    }

    /// An informer that never watches (the resource is not served): empty and synced.
    pub(crate) fn disabled(name: &str) -> Self {
        let state = InformerState::<K>::new();
        let (_tx, rx) = watch::channel(true);
        Informer {
            name: name.to_string(),
            store: state.store(),
            indexes: state.indexes.clone(),
            synced: rx,
            gone: mpsc::unbounded_channel().0,
        }
    }
}

impl<K> Informer<K>
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    /// The cache.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// The API server answered 404 for `key`: drop the cached object with `uid` and notify the
    /// handlers of its deletion ([`InformerState::forget_gone`]), on the informer's task, in
    /// order with its watch events. Does nothing for an informer that does not watch.
    pub(crate) fn forget_gone(&self, key: ObjectRef<K>, uid: &str) {
        let _ = self.gone.send((key, uid.to_string()));
    }

    /// The cached objects `func` indexes under `value` (client-go `ByIndex`), from the index
    /// the informer keeps for `func`, or by filtering the whole cache when it keeps none. Every
    /// candidate is checked with `func` again, so the answer is the filter's either way.
    pub(crate) fn by_index(&self, func: &IndexFn<K>, value: &str) -> Vec<Arc<K>>
    where
        K::DynamicType: Default,
    {
        match self.indexes.iter().find(|i| i.func.name == func.name) {
            Some(index) => index
                .refs(value)
                .iter()
                .filter_map(|r| self.store.lookup(r.borrowed()))
                .filter(|o| func.matches(o, value))
                .collect(),
            None => self
                .store
                .state()
                .into_iter()
                .filter(|o| func.matches(o, value))
                .collect(),
        }
    }

    /// True once the first list completed.
    pub(crate) fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Wait until the first list completed (or the informer task ended).
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.clone();
        let _ = rx.wait_for(|s| *s).await;
    }
}

pub use crate::api::key::key_of;

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, rv: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn kinds(ns: &[Notification<Pod>]) -> Vec<String> {
        ns.iter()
            .map(|n| match n {
                Notification::Add(p) => format!("add {}", key_of(p.as_ref())),
                Notification::Update { new, .. } => format!("update {}", key_of(new.as_ref())),
                Notification::Delete { obj, relisted } => {
                    format!("delete {} relisted={relisted}", key_of(obj.as_ref()))
                }
            })
            .collect()
    }

    fn pod_with_uid(name: &str, rv: &str, uid: &str) -> Pod {
        let mut p = pod(name, rv);
        p.metadata.uid = Some(uid.into());
        p
    }

    #[test]
    fn an_object_the_server_says_is_gone_leaves_the_cache_once_and_stays_out() {
        let mut s = InformerState::<Pod>::new();
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(pod_with_uid("a", "1", "uid-a")));
        s.apply(watcher::Event::InitDone);
        let key = ObjectRef::new("a").within("ns");
        // Another object of that name (a newer one) is not forgotten for the old UID.
        assert!(s.forget_gone(&key, "uid-older").is_empty());
        assert!(s.store().get(&key).is_some());
        assert_eq!(
            kinds(&s.forget_gone(&key, "uid-a")),
            ["delete ns/a relisted=true"]
        );
        assert!(s.store().get(&key).is_none());
        assert!(s.forget_gone(&key, "uid-a").is_empty(), "reported once");
        // A delayed event of the gone object does not bring it back; a new one of the name
        // is cached.
        assert!(
            s.apply(watcher::Event::Apply(pod_with_uid("a", "2", "uid-a")))
                .is_empty()
        );
        assert!(s.store().get(&key).is_none());
        assert_eq!(
            kinds(&s.apply(watcher::Event::Apply(pod_with_uid("a", "3", "uid-new")))),
            ["add ns/a"]
        );
    }

    #[test]
    fn the_gone_uids_are_bounded() {
        let mut g = GoneUids::default();
        for i in 0..=GoneUids::CAPACITY {
            g.insert(&format!("u{i}"));
        }
        assert!(!g.contains(Some("u0")), "the oldest was forgotten");
        assert!(g.contains(Some("u1")));
        assert!(g.contains(Some(&format!("u{}", GoneUids::CAPACITY))));
        assert_eq!(g.set.len(), GoneUids::CAPACITY);
        assert!(!g.contains(None));
    }

    #[test]
    fn notifications_hand_over_the_cached_object_itself() {
        let mut s = InformerState::<Pod>::new();
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(pod("a", "1")));
        let listed = s.apply(watcher::Event::InitDone);
        let key = ObjectRef::new("a").within("ns");
        let Notification::Add(added) = &listed[0] else {
            panic!("expected an add, got {listed:?}");
        };
        assert!(Arc::ptr_eq(added, &s.store().get(&key).expect("cached")));
        let updated = s.apply(watcher::Event::Apply(pod("a", "2")));
        let Notification::Update { old, new } = &updated[0] else {
            panic!("expected an update, got {updated:?}");
        };
        assert!(Arc::ptr_eq(old, added), "old is the copy that was cached");
        assert!(Arc::ptr_eq(new, &s.store().get(&key).expect("cached")));
    }

    #[test]
    fn cached_objects_and_notifications_carry_no_managed_fields_and_keep_the_rest() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;
        let mut p = pod("a", "1");
        p.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            operation: Some("Apply".into()),
            ..Default::default()
        }]);
        p.metadata.labels = Some([("app".to_string(), "x".to_string())].into());
        let mut s = InformerState::<Pod>::new();
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(p.clone()));
        let listed = s.apply(watcher::Event::InitDone);
        let mut changed = p.clone();
        changed.metadata.resource_version = Some("2".into());
        let watched = s.apply(watcher::Event::Apply(changed));
        for n in listed.iter().chain(&watched) {
            let (Notification::Add(obj) | Notification::Update { new: obj, .. }) = n else {
                panic!("unexpected {}", kinds(std::slice::from_ref(n)).join(""));
            };
            assert_eq!(obj.metadata.managed_fields, None);
            assert_eq!(obj.metadata.labels, p.metadata.labels);
        }
        let cached = s.store().get(&ObjectRef::from_obj(&p)).expect("cached");
        assert_eq!(cached.metadata.managed_fields, None);
        assert_eq!(cached.metadata.resource_version.as_deref(), Some("2"));
        assert_eq!(cached.metadata.labels, p.metadata.labels);
    }

    #[test]
    fn handlers_see_the_store_updated_and_old_new_pairs() {
        let mut s = InformerState::<Pod>::new();
        assert!(!s.synced());
        assert!(s.apply(watcher::Event::Init).is_empty());
        assert!(s.apply(watcher::Event::InitApply(pod("a", "1"))).is_empty());
        assert_eq!(kinds(&s.apply(watcher::Event::InitDone)), ["add ns/a"]);
        assert!(s.synced());
        assert_eq!(s.store().state().len(), 1);
        let n = s.apply(watcher::Event::Apply(pod("a", "2")));
        match &n[0] {
            Notification::Update { old, new } => {
                assert_eq!(old.metadata.resource_version.as_deref(), Some("1"));
                assert_eq!(new.metadata.resource_version.as_deref(), Some("2"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            kinds(&s.apply(watcher::Event::Apply(pod("b", "3")))),
            ["add ns/b"]
        );
        assert_eq!(
            kinds(&s.apply(watcher::Event::Delete(pod("b", "4")))),
            ["delete ns/b relisted=false"]
        );
        assert!(s.store().get(&ObjectRef::new("b").within("ns")).is_none());
    }

    /// The flight recorder observes: a worker that reads the cache while a change is being
    /// delivered must not find a version the recording does not hold yet (the reconcile line,
    /// written when the reconcile ends, would name an input recorded after it: issue 42's
    /// replay flake). So the observer sees every change while the store still holds the
    /// version before it, for watch events, relists and forgotten objects alike.
    #[test]
    fn the_observer_sees_each_change_before_the_store_applies_it() {
        type Seen = Arc<std::sync::Mutex<Vec<String>>>;
        let seen: Seen = Arc::default();
        let cache: Arc<std::sync::OnceLock<Store<Pod>>> = Arc::default();
        let observer: Handler<Pod> = {
            let (seen, cache) = (seen.clone(), cache.clone());
            Arc::new(move |n: &Notification<Pod>| {
                let (Notification::Add(obj)
                | Notification::Update { new: obj, .. }
                | Notification::Delete { obj, .. }) = n;
                let cached = cache
                    .get()
                    .and_then(|s| s.get(&ObjectRef::from_obj(obj.as_ref())));
                let rv = |p: Option<&Pod>| {
                    p.and_then(|p| p.metadata.resource_version.clone())
                        .unwrap_or_else(|| "-".into())
                };
                let line = format!(
                    "{} cached {}",
                    kinds(std::slice::from_ref(n))[0],
                    rv(cached.as_deref())
                );
                seen.lock().unwrap().push(line);
            })
        };
        let mut s = InformerState::<Pod>::new().observed_by(observer);
        let _ = cache.set(s.store());
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(pod_with_uid("a", "1", "uid-a")));
        s.apply(watcher::Event::InitDone);
        s.apply(watcher::Event::Apply(pod_with_uid("a", "2", "uid-a")));
        s.apply(watcher::Event::Apply(pod_with_uid("b", "3", "uid-b")));
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(pod_with_uid("a", "4", "uid-a")));
        s.apply(watcher::Event::InitDone);
        s.apply(watcher::Event::Apply(pod_with_uid("c", "5", "uid-c")));
        s.apply(watcher::Event::Delete(pod_with_uid("c", "6", "uid-c")));
        s.forget_gone(&ObjectRef::new("a").within("ns"), "uid-a");
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "add ns/a cached -",
                "update ns/a cached 1",
                "add ns/b cached -",
                "update ns/a cached 2",
                "delete ns/b relisted=true cached 3",
                "add ns/c cached -",
                "delete ns/c relisted=false cached 5",
                "delete ns/a relisted=true cached 4",
            ]
        );
        assert!(
            s.store().state().is_empty(),
            "every change was applied after"
        );
    }

    /// client-go reports objects that vanished during a watch outage as deletions on relist;
    /// kube's watcher does not. Without this, VM deletion expectations stall.
    #[test]
    fn relist_reports_vanished_objects_as_deletions() {
        let mut s = InformerState::<Pod>::new();
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(pod("a", "1")));
        s.apply(watcher::Event::InitApply(pod("b", "2")));
        s.apply(watcher::Event::InitDone);
        // Watch dropped; meanwhile b was deleted and c created. Relist:
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(pod("a", "5")));
        s.apply(watcher::Event::InitApply(pod("c", "6")));
        let mut got = kinds(&s.apply(watcher::Event::InitDone));
        got.sort();
        assert_eq!(
            got,
            ["add ns/c", "delete ns/b relisted=true", "update ns/a"]
        );
        let mut names: Vec<_> = s
            .store()
            .state()
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "c"]);
    }

    fn owned(name: &str, rv: &str, owner_uid: Option<&str>) -> Pod {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
        let mut p = pod(name, rv);
        p.metadata.owner_references = owner_uid.map(|uid| {
            vec![OwnerReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachineInstance".into(),
                name: "vmi".into(),
                uid: uid.into(),
                controller: Some(true),
                ..Default::default()
            }]
        });
        p
    }

    /// A pod's controller UID (the controllers index their cached pods so).
    static CONTROLLER_UID: crate::runtime::index::IndexFn<Pod> = crate::runtime::index::IndexFn {
        name: "controller-uid",
        value: |pod| crate::api::key::controller_of(&pod.metadata).map(|r| r.uid.clone()),
    };

    fn informer_of(s: &InformerState<Pod>) -> Informer<Pod> {
        let (_tx, rx) = watch::channel(true);
        Informer {
            name: "pods".into(),
            store: s.store(),
            indexes: s.indexes.clone(),
            synced: rx,
            gone: mpsc::unbounded_channel().0,
        }
    }

    fn names(pods: Vec<Arc<Pod>>) -> Vec<String> {
        let mut n: Vec<String> = pods
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect();
        n.sort();
        n
    }

    /// The index follows every change the store sees: a listed object, a new one, one whose
    /// controller changed, a deleted one (by its cached copy), and a relist that drops one.
    #[test]
    fn the_controller_uid_index_follows_adds_moves_deletes_and_relists() {
        let mut s = InformerState::<Pod>::new().with_index(&CONTROLLER_UID);
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(owned("a", "1", Some("u1"))));
        s.apply(watcher::Event::InitApply(owned("b", "2", Some("u2"))));
        s.apply(watcher::Event::InitApply(owned("free", "3", None)));
        s.apply(watcher::Event::InitDone);
        let i = informer_of(&s);
        assert_eq!(names(i.by_index(&CONTROLLER_UID, "u1")), ["a"]);
        assert_eq!(names(i.by_index(&CONTROLLER_UID, "u2")), ["b"]);

        s.apply(watcher::Event::Apply(owned("c", "4", Some("u1"))));
        assert_eq!(names(i.by_index(&CONTROLLER_UID, "u1")), ["a", "c"]);
        // b is re-owned (a controller reference replaced): it moves.
        s.apply(watcher::Event::Apply(owned("b", "5", Some("u1"))));
        assert_eq!(names(i.by_index(&CONTROLLER_UID, "u1")), ["a", "b", "c"]);
        assert!(i.by_index(&CONTROLLER_UID, "u2").is_empty());
        // The final state of a deletion lost its owner reference: the cached copy's entry goes.
        s.apply(watcher::Event::Delete(owned("c", "6", None)));
        assert_eq!(names(i.by_index(&CONTROLLER_UID, "u1")), ["a", "b"]);
        assert_eq!(
            s.indexes[0].refs("u1").len(),
            2,
            "c's entry is gone, not filtered"
        );
        // A relist without a: rebuilt from the list.
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(owned("b", "7", Some("u1"))));
        s.apply(watcher::Event::InitApply(owned("free", "3", Some("u3"))));
        s.apply(watcher::Event::InitDone);
        assert_eq!(names(i.by_index(&CONTROLLER_UID, "u1")), ["b"]);
        assert_eq!(names(i.by_index(&CONTROLLER_UID, "u3")), ["free"]);
        assert_eq!(s.indexes[0].values(), 2, "no empty value is kept");
    }

    /// Without the index (a test's fixed informer) a lookup filters the whole cache, and with
    /// it an entry the store has moved past is not returned.
    #[test]
    fn a_lookup_without_the_index_filters_the_cache_and_never_returns_a_wrong_object() {
        use crate::runtime::index::IndexFn;
        let plain = Informer::fixed(
            "pods",
            [owned("a", "1", Some("u1")), owned("b", "2", Some("u2"))],
        );
        assert_eq!(names(plain.by_index(&CONTROLLER_UID, "u1")), ["a"]);

        static BY_NAME: IndexFn<Pod> = IndexFn {
            name: "name",
            value: |p| p.metadata.name.clone(),
        };
        let mut s = InformerState::<Pod>::new().with_index(&CONTROLLER_UID);
        s.apply(watcher::Event::Init);
        s.apply(watcher::Event::InitApply(owned("a", "1", Some("u1"))));
        s.apply(watcher::Event::InitDone);
        let i = informer_of(&s);
        // An index the informer does not keep: the fallback, same answer.
        assert_eq!(names(i.by_index(&BY_NAME, "a")), ["a"]);
        // The store moved on without the index (as between the two updates): the stale entry
        // is checked against the stored object and dropped.
        s.store.insert(
            super::super::store::Key::from_ref(&ObjectRef::<Pod>::new("a").within("ns")),
            Arc::new(owned("a", "2", Some("u9"))),
        );
        assert!(i.by_index(&CONTROLLER_UID, "u1").is_empty());
    }

    /// Create an empty ConfigMap `name` through `cms`.
    async fn create_config_map(cms: &Api<k8s_openapi::api::core::v1::ConfigMap>, name: &str) {
        let cm = k8s_openapi::api::core::v1::ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.to_string()),
                ..Default::default()
            },
            ..Default::default()
        };
        cms.create(&kube::api::PostParams::default(), &cm)
            .await
            .expect("create");
    }

    /// Issue 38 item 8: a watch that ends in an error after each successful relist (here `410
    /// Expired`, "too old resource version: N (M)", instead of each DELETED event) failed and
    /// recovered about once a second, and each failure was logged as a new outage. The
    /// failure is reported once a minute per informer, however often it recovers in between.
    #[tokio::test]
    async fn a_watch_failing_after_every_relist_is_reported_once_a_minute() {
        use crate::sim::faults::FaultRule;
        use crate::sim::{ApiServer, ApiServerConfig};
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::DeleteParams;

        let (captured, _guard) = crate::runtime::log_capture::capture();
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        server
            .faults()
            .add(FaultRule::tombstone_deletes().resource("configmaps"));
        let cms: Api<ConfigMap> =
            Api::namespaced(server.client().await.expect("client"), "default");
        let names: Vec<String> = (0..4).map(|i| format!("cm-{i}")).collect();
        for name in &names {
            create_config_map(&cms, name).await;
        }
        let cancel = CancellationToken::new();
        // A name of its own: no other test shares the rate limit's key.
        let informer = Informer::spawn(
            "configmaps-failing-after-every-relist",
            cms.clone(),
            watcher::Config::default(),
            Vec::new(),
            cancel.clone(),
        );
        let deadline = Duration::from_secs(60);
        tokio::time::timeout(deadline, informer.wait_synced())
            .await
            .expect("synced");
        for name in &names {
            cms.delete(name, &DeleteParams::default())
                .await
                .expect("delete");
            // The watch ends with 410 instead of the DELETED event; the relist drops the object.
            let key = ObjectRef::new(name).within("default");
            tokio::time::timeout(deadline, async {
                while informer.store().get(&key).is_some() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("the relist dropped the deleted object");
        }
        let failed = captured.matching("WARN", "watch failed");
        assert_eq!(failed.len(), 1, "{:#?}", captured.lines());
        let recovered = captured.matching("INFO", "watch recovered");
        assert!(recovered.len() <= 1, "{:#?}", captured.lines());
        cancel.cancel();
    }

    /// A gated informer is empty and not synced until its gate answers; "not served" leaves it
    /// empty and synced, "served" starts the watch. (Before, the manager
    /// awaited discovery before starting: an API server unreachable at start-up kept
    /// `run-controller` from binding its endpoints and from stopping on SIGTERM.)
    #[tokio::test]
    async fn a_gated_informer_waits_for_its_gate_and_starts_or_stays_empty() {
        use crate::sim::{ApiServer, ApiServerConfig};
        use futures::FutureExt;
        use k8s_openapi::api::core::v1::ConfigMap;
        use tokio::sync::oneshot;

        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        let cms: Api<ConfigMap> =
            Api::namespaced(server.client().await.expect("client"), "default");
        create_config_map(&cms, "cm").await;
        let cancel = CancellationToken::new();
        let gated = |answer: oneshot::Receiver<bool>| {
            Informer::<ConfigMap>::spawn_decoding(
                Some(answer.map(|a| a.unwrap_or(false)).boxed()),
                InformerState::new(),
                "configmaps-gated",
                cms.clone(),
                watcher::Config::default(),
                Vec::new(),
                cancel.clone(),
            )
        };
        let deadline = Duration::from_secs(60);
        for served in [false, true] {
            let (tx, rx) = oneshot::channel();
            let informer = gated(rx);
            tokio::task::yield_now().await;
            assert!(!informer.has_synced(), "synced before its gate answered");
            tx.send(served).expect("gate");
            tokio::time::timeout(deadline, informer.wait_synced())
                .await
                .expect("synced once the gate answered");
            let cached = informer.store().state().len();
            assert_eq!(cached, usize::from(served), "served={served}");
        }
        cancel.cancel();
    }

    /// The informer reads what the server lists through `WithoutManagedFields`: a list whose
    /// object carries a `managedFields` that is no list of entries (so decoding it whole fails)
    /// syncs with the object. A fake API server answers the list; its watches end at once.
    #[tokio::test]
    async fn an_informer_skips_managed_fields_unread() {
        use k8s_openapi::api::core::v1::ConfigMap;
        let list = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMapList", "metadata": {"resourceVersion": "5"},
            "items": [{"metadata": {"name": "cm", "namespace": "default",
                "resourceVersion": "5", "managedFields": {"not": ["a list of entries"]}},
                "data": {"k": "v"}}]
        })
        .to_string();
        let server = tower::service_fn(move |req: axum::http::Request<kube::client::Body>| {
            let watch = req.uri().query().is_some_and(|q| q.contains("watch=true"));
            let body = if watch {
                Vec::new()
            } else {
                list.clone().into_bytes()
            };
            async move {
                Ok::<_, std::convert::Infallible>(
                    axum::http::Response::builder()
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body))
                        .expect("response"),
                )
            }
        });
        let cms: Api<ConfigMap> = Api::namespaced(kube::Client::new(server, "default"), "default");
        let cancel = CancellationToken::new();
        let informer = Informer::spawn(
            "configmaps",
            cms,
            watcher::Config::default(),
            Vec::new(),
            cancel.clone(),
        );
        tokio::time::timeout(Duration::from_secs(30), informer.wait_synced())
            .await
            .expect("the list decodes: managedFields is skipped, not decoded");
        let cached = informer.store().state();
        assert_eq!(cached.len(), 1);
        assert_eq!(cached[0].metadata.managed_fields, None);
        assert_eq!(
            cached[0]
                .data
                .as_ref()
                .and_then(|d| d.get("k"))
                .map(String::as_str),
            Some("v")
        );
        cancel.cancel();
    }
}
