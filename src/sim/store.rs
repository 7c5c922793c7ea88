//! The object store: generic JSON objects keyed by resource/namespace/name, one global
//! monotonically increasing `resourceVersion`, a bounded per-resource event history for
//! watches, and the bookkeeping the garbage collector needs (uid and owner indexes).
//!
//! Semantics follow `k8s.io/apiserver/pkg/registry/generic/registry/store.go` (create, update,
//! graceful deletion and finalizers) and `k8s.io/apiserver/pkg/storage/cacher/watch_cache.go`
//! (the history window and "too old resource version").
//!
//! One `std::sync::Mutex` guards everything; it is never held across an `.await`.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use super::kinds;
use super::object::{self, meta_mut};
use super::resources::{Registry, ResId, ResourceDef};
use super::selector::Filter;
use super::status::ApiError;
use super::stored::Stored;

/// `ADDED` / `MODIFIED` / `DELETED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// `ADDED`.
    Added,
    /// `MODIFIED`.
    Modified,
    /// `DELETED`.
    Deleted,
}

impl EventKind {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One change to one object. The versions are the stored ones (shared with the store and with
/// the event before and after), serialised once at commit; every watcher sends those bytes.
#[derive(Debug)]
pub struct Event {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub kind: EventKind,
    /// Namespace of the object (`""` for cluster-scoped).
    pub(crate) ns: String,
    /// The object after the change (for `DELETED`: the last state, with the delete's RV).
    pub(crate) object: Arc<Stored>,
    /// The object before the change (for selector transitions), if any.
    pub(crate) prev: Option<Arc<Stored>>,
    /// When the change was committed (for delayed-delivery faults).
    pub at: Instant,
}

impl Event {
    /// The serialised object.
    pub(crate) fn object_json(&self) -> &[u8] {
        self.object.json()
    }

    /// The object, decoded.
    pub(crate) fn object_value(&self) -> Value {
        self.object.decode()
    }
}

/// Identity of a stored object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjKey {
    /// Resource index in the registry.
    pub res: ResId,
    /// Namespace (`""` for cluster-scoped).
    pub ns: String,
    /// Name.
    pub name: String,
}

/// Which endpoint an update came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// The object itself: `.status` is ignored for status-subresource kinds.
    Main,
    /// `/status`: only `.status` is taken.
    Status,
    /// `pods/<name>/binding`: taken like [`Sub::Main`], but written by the registry itself
    /// (`assignPod` in `pkg/registry/core/pod/storage/storage.go` updates storage directly,
    /// not through the update strategy), so `metadata.generation` stays as it was.
    Binding,
}

/// `propagationPolicy` of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Owner goes now, the GC deletes dependents afterwards.
    Background,
    /// Owner waits (finalizer `foregroundDeletion`) until blocking dependents are gone.
    Foreground,
    /// Dependents lose their owner reference (finalizer `orphan`).
    Orphan,
}

/// Parsed `DeleteOptions`.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    /// `gracePeriodSeconds`.
    pub grace_period_seconds: Option<i64>,
    /// `propagationPolicy` (or `orphanDependents`).
    pub propagation: Option<Propagation>,
    /// `preconditions.uid`.
    pub precondition_uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub precondition_rv: Option<String>,
}

/// What a delete did.
#[derive(Debug, Clone)]
pub enum Deleted {
    /// The object is gone; its last state.
    Gone(Arc<Value>),
    /// The object is terminating (grace period or finalizers); its current state.
    Pending(Arc<Value>),
}

/// A page of a list.
#[derive(Debug, Clone)]
pub struct ListPage {
    /// Matching objects, sorted by namespace then name.
    pub items: Vec<Arc<Value>>,
    /// `metadata.resourceVersion` of the list.
    pub rv: u64,
    /// `metadata.continue`, when more items remain.
    pub continue_token: Option<String>,
    /// `metadata.remainingItemCount`, when more items remain.
    pub remaining: Option<u64>,
}

/// Where a watch starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFrom {
    /// `resourceVersion` unset or `"0"`: synthetic `ADDED` for the current state, then changes.
    Current,
    /// Changes after this resourceVersion (410 Expired when outside the history window).
    After(u64),
}

/// A registered watch: events to send first, then the live channel.
pub struct WatchReg {
    /// Initial events (synthetic `ADDED` or history backlog), in order.
    pub initial: Vec<Arc<Event>>,
    /// Store resourceVersion at registration.
    pub rv: u64,
    /// Live events for this resource (namespace-filtered; selectors are applied by the reader).
    pub rx: mpsc::UnboundedReceiver<Arc<Event>>,
}

struct WatchSlot {
    ns: Option<String>,
    tx: mpsc::UnboundedSender<Arc<Event>>,
}

#[derive(Default)]
struct Collection {
    objects: BTreeMap<(String, String), Arc<Stored>>,
    history: VecDeque<Arc<Event>>,
    /// Every event with rv > floor is in `history`.
    floor: u64,
    watchers: Vec<WatchSlot>,
}

/// Work for the garbage collector / namespace controller.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GcItem {
    /// An object with a deletionTimestamp and an `orphan`/`foregroundDeletion` finalizer.
    Owner(ObjKey),
    /// An object whose owners may be gone.
    Dependent(ObjKey),
    /// A namespace being deleted.
    Namespace(String),
}

struct Inner {
    rv: u64,
    cols: Vec<Collection>,
    uids: HashMap<String, ObjKey>,
    /// owner uid → dependents referencing it.
    dependents: HashMap<String, HashSet<ObjKey>>,
    gc_queue: VecDeque<GcItem>,
}

impl Inner {
    /// The key and stored object `res`/`ns`/`name`, or `404 NotFound` for `def`.
    fn existing(
        &self,
        def: &ResourceDef,
        res: ResId,
        ns: &str,
        name: &str,
    ) -> Result<(ObjKey, Arc<Value>, Arc<Stored>), ApiError> {
        let key = ObjKey {
            res,
            ns: ns.to_string(),
            name: name.to_string(),
        };
        let stored = self.cols[res]
            .objects
            .get(&(key.ns.clone(), key.name.clone()))
            .cloned()
            .ok_or_else(|| ApiError::not_found(def, name))?;
        Ok((key, Arc::new(stored.decode()), stored))
    }
}

/// The store. Cheap to share behind an `Arc`.
pub struct Store {
    reg: Arc<Registry>,
    inner: Mutex<Inner>,
    history_size: usize,
    gc_wake: Notify,
}

/// One entry of a collection: ((namespace, name), object).
type ObjEntry<'a> = (&'a (String, String), &'a Arc<Stored>);

/// A mutation decided under the lock: the new version as a tree (for the indexes) and
/// serialised (what is kept), and the version it replaces.
struct Commit<'a> {
    key: ObjKey,
    kind: EventKind,
    object: &'a Value,
    stored: Arc<Stored>,
    prev: Option<(&'a Value, Arc<Stored>)>,
}

/// One page of a list over `objects` (sorted by namespace then name): those in `ns` matching
/// `filter`, at most `limit` (0 = all), after `start` (a decoded continue token), at `list_rv`.
fn page(
    objects: &BTreeMap<(String, String), Arc<Stored>>,
    start: Option<&(u64, String, String)>,
    ns: Option<&str>,
    filter: &Filter,
    limit: usize,
    list_rv: u64,
) -> ListPage {
    let lower: (String, String) = match (start, ns) {
        (Some((_, k_ns, k_name)), _) => (k_ns.clone(), k_name.clone()),
        (None, Some(ns)) => (ns.to_string(), String::new()),
        (None, None) => (String::new(), String::new()),
    };
    let mut items = Vec::new();
    let mut more = false;
    let mut remaining = 0u64;
    let mut last: Option<(String, String)> = None;
    for ((k_ns, k_name), stored) in objects.range(lower.clone()..) {
        if start.is_some() && (k_ns, k_name) == (&lower.0, &lower.1) {
            continue;
        }
        if let Some(ns) = ns
            && k_ns != ns
        {
            break;
        }
        let full = limit > 0 && items.len() >= limit;
        if filter.is_empty() && full {
            more = true;
            remaining += 1;
            continue;
        }
        let obj = stored.decode();
        if !filter.matches(&obj) {
            continue;
        }
        if full {
            more = true;
            remaining += 1;
            continue;
        }
        last = Some((k_ns.clone(), k_name.clone()));
        items.push(Arc::new(obj));
    }
    let (continue_token, remaining) = match (more, last) {
        (true, Some((l_ns, l_name))) => (
            Some(encode_continue(list_rv, &l_ns, &l_name)),
            Some(remaining),
        ),
        _ => (None, None),
    };
    ListPage {
        items,
        rv: list_rv,
        continue_token,
        remaining,
    }
}

impl Store {
    /// An empty store over `reg`, keeping `history_size` events per resource for watches.
    pub(crate) fn new(reg: Arc<Registry>, history_size: usize) -> Self {
        let cols = (0..reg.defs().len())
            .map(|_| Collection::default())
            .collect();
        Self {
            reg,
            inner: Mutex::new(Inner {
                rv: 1,
                cols,
                uids: HashMap::new(),
                dependents: HashMap::new(),
                gc_queue: VecDeque::new(),
            }),
            history_size: history_size.max(1),
            gc_wake: Notify::new(),
        }
    }

    /// The resource table.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.reg
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock would poison it; the data is still consistent
        // because every mutation is applied in one step.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest resourceVersion handed out.
    pub(crate) fn current_rv(&self) -> u64 {
        self.lock().rv
    }

    /// Wait until the GC has work (or a spurious wake).
    pub(crate) async fn gc_notified(&self) {
        self.gc_wake.notified().await
    }

    /// Take queued GC work.
    pub(crate) fn take_gc_work(&self) -> Vec<GcItem> {
        let mut inner = self.lock();
        let mut seen = HashSet::new();
        inner
            .gc_queue
            .drain(..)
            .filter(|i| seen.insert(i.clone()))
            .collect()
    }

    /// Dependents currently referencing `uid` as owner.
    pub(crate) fn dependents_of(&self, uid: &str) -> Vec<ObjKey> {
        let inner = self.lock();
        let mut v: Vec<ObjKey> = inner
            .dependents
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        v.sort();
        v
    }

    /// Get by key.
    pub(crate) fn get_key(&self, key: &ObjKey) -> Option<Arc<Value>> {
        let stored = self.stored(key.res, &key.ns, &key.name)?;
        Some(Arc::new(stored.decode()))
    }

    /// The object at `key` with only its `metadata` (`{"metadata": …}`), read without decoding
    /// the rest ([`object::read_metadata`]): what the garbage collector asks of most objects
    /// (uid, owners, finalizers, deletion), for which decoding each new object and its owners
    /// whole was 2 % of the embedded cluster's CPU in a 10,000-VM start.
    pub(crate) fn get_key_metadata(&self, key: &ObjKey) -> Option<Value> {
        let stored = self.stored(key.res, &key.ns, &key.name)?;
        // Stored bytes are always a JSON object, so the read fails on none.
        let meta = object::read_metadata::<Value>(stored.json()).unwrap_or_default();
        Some(json!({ "metadata": meta }))
    }

    /// The stored version `rv` of `res`/`ns`/`name`, if it is the current one: its bytes are
    /// what a response carrying that version sends.
    pub(crate) fn current_version(
        &self,
        res: ResId,
        ns: &str,
        name: &str,
        rv: u64,
    ) -> Option<Arc<Stored>> {
        self.stored(res, ns, name).filter(|s| s.rv() == rv)
    }

    /// The current version of `res`/`ns`/`name`.
    fn stored(&self, res: ResId, ns: &str, name: &str) -> Option<Arc<Stored>> {
        self.lock().cols[res]
            .objects
            .get(&(ns.to_string(), name.to_string()))
            .cloned()
    }

    /// Whether the object `res`/`ns`/`name` exists with `uid`.
    pub(crate) fn holds_uid(&self, res: ResId, ns: &str, name: &str, uid: &str) -> bool {
        self.lock()
            .uids
            .get(uid)
            .is_some_and(|k| k.res == res && k.ns == ns && k.name == name)
    }

    /// Keys of every object in namespace `ns` (namespaced resources only).
    pub(crate) fn keys_in_namespace(&self, ns: &str) -> Vec<ObjKey> {
        let inner = self.lock();
        let mut out = Vec::new();
        for (res, col) in inner.cols.iter().enumerate() {
            if !self.reg.get(res).namespaced {
                continue;
            }
            for (k_ns, k_name) in col
                .objects
                .range((ns.to_string(), String::new())..)
                .map(|(k, _)| k)
                .take_while(|(n, _)| n == ns)
            {
                out.push(ObjKey {
                    res,
                    ns: k_ns.clone(),
                    name: k_name.clone(),
                });
            }
        }
        out
    }

    /// Get one object.
    pub(crate) fn get(&self, res: ResId, ns: &str, name: &str) -> Result<Arc<Value>, ApiError> {
        let stored = self
            .stored(res, ns, name)
            .ok_or_else(|| ApiError::not_found(self.reg.get(res), name))?;
        Ok(Arc::new(stored.decode()))
    }

    /// List objects of `res` in `ns` (all namespaces when `None`) matching `filter`, at most
    /// `limit` (0 = all) starting after the `continue` token.
    pub(crate) fn list(
        &self,
        res: ResId,
        ns: Option<&str>,
        filter: &Filter,
        limit: usize,
        continue_token: Option<&str>,
    ) -> Result<ListPage, ApiError> {
        let start = match continue_token {
            Some(t) if !t.is_empty() => Some(decode_continue(t)?),
            _ => None,
        };
        let inner = self.lock();
        let list_rv = start.as_ref().map(|s| s.0).unwrap_or(inner.rv);
        Ok(page(
            &inner.cols[res].objects,
            start.as_ref(),
            ns,
            filter,
            limit,
            list_rv,
        ))
    }

    /// A first page of [`Store::list`] as the resource was `events_behind` of its events ago
    /// (the stale-list fault, `super::faults::FaultAction::StaleList`): the newest events of
    /// `res` are undone (an `ADDED` object removed, a `MODIFIED` or `DELETED` one put back as
    /// it was before), and the page carries the resourceVersion just before the oldest event
    /// undone, so that a watch from it replays them. Never older than `not_older_than` (a
    /// `resourceVersion` the request asked for) nor than the event history reaches.
    pub(crate) fn list_stale(
        &self,
        res: ResId,
        ns: Option<&str>,
        filter: &Filter,
        limit: usize,
        events_behind: u64,
        not_older_than: u64,
    ) -> ListPage {
        let inner = self.lock();
        let col = &inner.cols[res];
        let undo: Vec<&Arc<Event>> = col
            .history
            .iter()
            .rev()
            .take(usize::try_from(events_behind).unwrap_or(usize::MAX))
            .take_while(|e| e.rv > not_older_than)
            .collect();
        let Some(oldest) = undo.last() else {
            return page(&col.objects, None, ns, filter, limit, inner.rv);
        };
        let list_rv = oldest.rv - 1;
        let in_scope = |ns_of: &str| ns.is_none_or(|n| n == ns_of);
        let mut snapshot: BTreeMap<(String, String), Arc<Stored>> = col
            .objects
            .iter()
            .filter(|((n, _), _)| in_scope(n))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for ev in &undo {
            let key = (ev.ns.clone(), object::name(&ev.object_value()).to_string());
            if !in_scope(&key.0) {
                continue;
            }
            match (ev.kind, &ev.prev) {
                (EventKind::Added, _) => {
                    snapshot.remove(&key);
                }
                (_, Some(prev)) => {
                    snapshot.insert(key, prev.clone());
                }
                (_, None) => {}
            }
        }
        page(&snapshot, None, ns, filter, limit, list_rv)
    }

    /// Register a watch on `res` in `ns` (all when `None`).
    pub(crate) fn watch(
        &self,
        res: ResId,
        ns: Option<&str>,
        from: WatchFrom,
    ) -> Result<WatchReg, ApiError> {
        let mut inner = self.lock();
        let rv = inner.rv;
        let col = &mut inner.cols[res];
        let initial: Vec<Arc<Event>> = match from {
            WatchFrom::Current => {
                let range: Box<dyn Iterator<Item = ObjEntry<'_>>> = match ns {
                    Some(ns) => Box::new(
                        col.objects
                            .range((ns.to_string(), String::new())..)
                            .take_while(move |((n, _), _)| n == ns),
                    ),
                    None => Box::new(col.objects.iter()),
                };
                let now = Instant::now();
                range
                    .map(|((o_ns, _), o)| {
                        Arc::new(Event {
                            rv: o.rv(),
                            kind: EventKind::Added,
                            ns: o_ns.clone(),
                            object: o.clone(),
                            prev: None,
                            at: now,
                        })
                    })
                    .collect()
            }
            WatchFrom::After(after) => {
                if after < col.floor {
                    return Err(ApiError::expired(format!(
                        "too old resource version: {after} ({})",
                        col.floor
                    )));
                }
                let first = col.history.partition_point(|e| e.rv <= after);
                col.history
                    .iter()
                    .skip(first)
                    .filter(|e| ns.is_none_or(|ns| e.ns == ns))
                    .cloned()
                    .collect()
            }
        };
        let (tx, rx) = mpsc::unbounded_channel();
        col.watchers.push(WatchSlot {
            ns: ns.map(str::to_string),
            tx,
        });
        Ok(WatchReg { initial, rv, rx })
    }

    fn commit(&self, inner: &mut Inner, c: Commit<'_>) {
        let Commit {
            key,
            kind,
            object: obj,
            stored,
            prev,
        } = c;
        let (prev, prev_stored) = match prev {
            Some((v, s)) => (Some(v), Some(s)),
            None => (None, None),
        };
        let rv = inner.rv;
        // indexes
        let old_refs: Vec<String> = prev
            .map(|p| object::owner_refs(p).into_iter().map(|r| r.uid).collect())
            .unwrap_or_default();
        let new_refs: Vec<String> = if kind == EventKind::Deleted {
            Vec::new()
        } else {
            object::owner_refs(obj).into_iter().map(|r| r.uid).collect()
        };
        for u in old_refs.iter().filter(|u| !new_refs.contains(u)) {
            if let Some(set) = inner.dependents.get_mut(u) {
                set.remove(&key);
                if set.is_empty() {
                    inner.dependents.remove(u);
                }
            }
        }
        for u in new_refs.iter().filter(|u| !old_refs.contains(u)) {
            inner
                .dependents
                .entry(u.clone())
                .or_default()
                .insert(key.clone());
        }
        let uid = object::uid(obj).to_string();
        let mut wake = false;
        match kind {
            EventKind::Deleted => {
                inner.cols[key.res]
                    .objects
                    .remove(&(key.ns.clone(), key.name.clone()));
                inner.uids.remove(&uid);
                // Dependents of a removed owner may now be garbage.
                if let Some(deps) = inner.dependents.get(&uid) {
                    let deps: Vec<ObjKey> = deps.iter().cloned().collect();
                    for d in deps {
                        inner.gc_queue.push_back(GcItem::Dependent(d));
                    }
                    wake = true;
                }
                // A terminating namespace may now be empty.
                if !key.ns.is_empty()
                    && let Some(ns_res) = self.reg.core("namespaces")
                    && inner.cols[ns_res]
                        .objects
                        .get(&(String::new(), key.ns.clone()))
                        .is_some_and(|n| n.is_deleting())
                {
                    inner.gc_queue.push_back(GcItem::Namespace(key.ns.clone()));
                    wake = true;
                }
                // An owner waiting in the foreground may be unblocked.
                for o in &old_refs {
                    if let Some(owner) = inner.uids.get(o).cloned() {
                        inner.gc_queue.push_back(GcItem::Owner(owner));
                        wake = true;
                    }
                }
            }
            _ => {
                inner.cols[key.res]
                    .objects
                    .insert((key.ns.clone(), key.name.clone()), stored.clone());
                if kind == EventKind::Added {
                    inner.uids.insert(uid, key.clone());
                }
                let fins = object::finalizers(obj);
                if object::is_deleting(obj)
                    && fins
                        .iter()
                        .any(|f| f == "orphan" || f == "foregroundDeletion")
                {
                    inner.gc_queue.push_back(GcItem::Owner(key.clone()));
                    wake = true;
                }
                if !new_refs.is_empty() && new_refs != old_refs {
                    inner.gc_queue.push_back(GcItem::Dependent(key.clone()));
                    wake = true;
                }
                let def = self.reg.get(key.res);
                if def.group.is_empty() && def.plural == "namespaces" && object::is_deleting(obj) {
                    inner
                        .gc_queue
                        .push_back(GcItem::Namespace(key.name.clone()));
                    wake = true;
                }
            }
        }
        let ev = Arc::new(Event {
            rv,
            kind,
            ns: key.ns.clone(),
            object: stored,
            prev: prev_stored,
            at: Instant::now(),
        });
        let col = &mut inner.cols[key.res];
        col.history.push_back(ev.clone());
        while col.history.len() > self.history_size {
            if let Some(old) = col.history.pop_front() {
                col.floor = old.rv;
            }
        }
        col.watchers.retain(|w| {
            if w.ns.as_deref().is_some_and(|ns| ns != key.ns) {
                return !w.tx.is_closed();
            }
            w.tx.send(ev.clone()).is_ok()
        });
        if wake {
            self.gc_wake.notify_one();
        }
    }

    /// Create an object. `obj` must already be validated JSON of the right kind; name,
    /// namespace and server-owned metadata are set here.
    pub(crate) fn create(
        &self,
        res: ResId,
        ns: &str,
        mut obj: Value,
    ) -> Result<Arc<Value>, ApiError> {
        let def = self.reg.get(res);
        // generateName: pick a name now (collisions are retried below).
        let generate = object::meta_str(&obj, "generateName").to_string();
        let explicit = object::name(&obj).to_string();
        if explicit.is_empty() && generate.is_empty() {
            return Err(ApiError::required_field(
                def,
                "",
                "metadata.name",
                "name or generateName is required",
            ));
        }
        {
            let m = meta_mut(&mut obj);
            if def.namespaced {
                m.insert("namespace".into(), json!(ns));
            } else {
                m.remove("namespace");
            }
            for k in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "selfLink",
                "managedFields",
            ] {
                m.remove(k);
            }
        }
        if explicit.is_empty() {
            meta_mut(&mut obj).insert("name".into(), json!(format!("{generate}xxxxx")));
        }
        kinds::validate_meta(def, &obj)?;
        kinds::prepare_create(def, &mut obj);
        let mut inner = self.lock();
        self.check_namespace(&inner, def, ns, &explicit)?;
        let mut name = explicit.clone();
        if name.is_empty() {
            for _ in 0..8 {
                let candidate = format!("{generate}{}", object::random_suffix());
                if !inner.cols[res]
                    .objects
                    .contains_key(&(ns.to_string(), candidate.clone()))
                {
                    name = candidate;
                    break;
                }
            }
            if name.is_empty() {
                return Err(ApiError::already_exists(def, &generate));
            }
        }
        let key_ns = if def.namespaced {
            ns.to_string()
        } else {
            String::new()
        };
        if inner.cols[res]
            .objects
            .contains_key(&(key_ns.clone(), name.clone()))
        {
            return Err(ApiError::already_exists(def, &name));
        }
        inner.rv += 1;
        let rv = inner.rv;
        {
            let m = meta_mut(&mut obj);
            m.insert("name".into(), json!(name));
            m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
            m.insert("resourceVersion".into(), json!(rv.to_string()));
            m.insert("creationTimestamp".into(), json!(object::now_rfc3339()));
            if def.generation {
                m.insert("generation".into(), json!(1));
            }
        }
        let stored = Stored::encode(&obj);
        self.commit(
            &mut inner,
            Commit {
                key: ObjKey {
                    res,
                    ns: key_ns,
                    name,
                },
                kind: EventKind::Added,
                object: &obj,
                stored,
                prev: None,
            },
        );
        Ok(Arc::new(obj))
    }

    fn check_namespace(
        &self,
        inner: &Inner,
        def: &ResourceDef,
        ns: &str,
        name: &str,
    ) -> Result<(), ApiError> {
        if !def.namespaced {
            return Ok(());
        }
        let Some(ns_res) = self.reg.core("namespaces") else {
            return Ok(());
        };
        match inner.cols[ns_res]
            .objects
            .get(&(String::new(), ns.to_string()))
        {
            None => Err(ApiError::not_found_raw("", "namespaces", ns)),
            Some(n) if n.is_deleting() => Err(ApiError::forbidden(
                def,
                name,
                &format!(
                    "unable to create new content in namespace {ns} because it is being terminated"
                ),
            )),
            Some(_) => Ok(()),
        }
    }

    /// Replace an object (PUT). `require_rv` models custom resources, which reject an update
    /// without `metadata.resourceVersion`.
    pub(crate) fn update(
        &self,
        res: ResId,
        ns: &str,
        name: &str,
        new: Value,
        sub: Sub,
        require_rv: bool,
    ) -> Result<Arc<Value>, ApiError> {
        self.mutate(res, ns, name, sub, require_rv, true, |_| Ok(new))
    }

    /// Read-modify-write under the lock: `f` gets the current object and returns the desired
    /// one, which then goes through the same rules as an update. Used by PATCH and internal
    /// writers (GC, binding).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn mutate(
        &self,
        res: ResId,
        ns: &str,
        name: &str,
        sub: Sub,
        require_rv: bool,
        validate: bool,
        f: impl FnOnce(&Value) -> Result<Value, ApiError>,
    ) -> Result<Arc<Value>, ApiError> {
        let def = self.reg.get(res);
        let mut inner = self.lock();
        let (key, old, old_stored) = inner.existing(def, res, ns, name)?;
        let new = f(&old)?;
        if !new.is_object() {
            return Err(ApiError::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: the object must be a JSON object",
                def.kind, def.version, def.kind
            )));
        }
        // identity checks
        let new_name = object::name(&new);
        if !new_name.is_empty() && new_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({new_name}) does not match the name on the URL ({name})"
            )));
        }
        let new_ns = object::namespace(&new);
        if def.namespaced && !new_ns.is_empty() && new_ns != ns {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        let sent_rv = object::resource_version(&new).to_string();
        if sent_rv.is_empty() {
            if require_rv {
                return Err(ApiError::invalid_field(
                    def,
                    name,
                    "metadata.resourceVersion",
                    "0x0",
                    "must be specified for an update",
                ));
            }
        } else if sent_rv != object::resource_version(&old) {
            return Err(ApiError::stale(def, name));
        }
        let sent_uid = object::uid(&new);
        if !sent_uid.is_empty() && sent_uid != object::uid(&old) {
            return Err(ApiError::conflict(
                def,
                name,
                &format!(
                    "Precondition failed: UID in precondition: {}, UID in object meta: {}",
                    sent_uid,
                    object::uid(&old)
                ),
            ));
        }
        // Build the object to store.
        let mut merged = match sub {
            Sub::Status => {
                let mut m = (*old).clone();
                if let Some(o) = m.as_object_mut() {
                    match new.get("status") {
                        Some(s) => {
                            o.insert("status".into(), s.clone());
                        }
                        None => {
                            o.remove("status");
                        }
                    }
                }
                m
            }
            Sub::Main | Sub::Binding => {
                let mut m = new;
                if let Some(o) = m.as_object_mut() {
                    o.insert("apiVersion".into(), json!(def.api_version()));
                    o.insert("kind".into(), json!(def.kind));
                    // A binding sets the pod's PodScheduled condition too (object::bind_pod).
                    if def.status_subresource && sub != Sub::Binding {
                        match old.get("status") {
                            Some(s) => {
                                o.insert("status".into(), s.clone());
                            }
                            None => {
                                o.remove("status");
                            }
                        }
                    }
                }
                let old_meta = object::meta(&old).cloned().unwrap_or_default();
                let mm = meta_mut(&mut m);
                for k in [
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                ] {
                    match old_meta.get(k) {
                        Some(v) => {
                            mm.insert(k.into(), v.clone());
                        }
                        None => {
                            mm.remove(k);
                        }
                    }
                }
                mm.remove("selfLink");
                m
            }
        };
        meta_mut(&mut merged).insert(
            "resourceVersion".into(),
            json!(object::resource_version(&old)),
        );
        if object::same_ignoring_rv(&merged, &old) {
            return Ok(old);
        }
        if sub == Sub::Main {
            if validate {
                kinds::validate_meta(def, &merged)?;
                kinds::validate_update(def, &old, &merged)?;
            }
            if object::is_deleting(&old) {
                // New finalizers cannot be added to an object being deleted.
                let old_f = object::finalizers(&old);
                let new_f = object::finalizers(&merged);
                if let Some(added) = new_f.iter().find(|f| !old_f.contains(f)) {
                    return Err(ApiError::forbidden_field(
                        def,
                        name,
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{added:?}}}"
                        ),
                    ));
                }
            }
        }
        let changed = if def.status_subresource || def.builtin {
            !object::same_spec_part(&merged, &old)
        } else {
            !object::same_ignoring_metadata(&merged, &old)
        };
        if def.generation && sub != Sub::Binding && changed {
            let g = object::generation(&old) + 1;
            meta_mut(&mut merged).insert("generation".into(), json!(g));
        }
        let remove = object::is_deleting(&merged)
            && object::finalizers(&merged).is_empty()
            && object::deletion_grace(&merged).unwrap_or(0) == 0
            && !kinds::blocks_removal(def, &merged);
        let kind = if remove {
            EventKind::Deleted
        } else {
            EventKind::Modified
        };
        Ok(self.commit_next_rv(&mut inner, key, kind, merged, (old, old_stored)))
    }

    /// Delete an object (`DELETE`), honouring preconditions, graceful deletion (pods), and
    /// finalizers including the propagation finalizers `orphan` / `foregroundDeletion`.
    pub(crate) fn delete(
        &self,
        res: ResId,
        ns: &str,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        let def = self.reg.get(res);
        let mut inner = self.lock();
        let (key, old, old_stored) = inner.existing(def, res, ns, name)?;
        let preconditions = [
            ("UID", &opts.precondition_uid, object::uid(&old)),
            (
                "ResourceVersion",
                &opts.precondition_rv,
                object::resource_version(&old),
            ),
        ];
        for (field, want, have) in preconditions {
            check_precondition(def, name, field, want.as_ref(), have)?;
        }
        let grace = kinds::grace_period(def, &old, opts.grace_period_seconds);
        let mut fins = object::finalizers(&old);
        // The propagation finalizer to add and the ones to drop.
        let (add, drop): (Option<&str>, &[&str]) = match opts.propagation {
            Some(Propagation::Orphan) => (Some("orphan"), &["foregroundDeletion"]),
            Some(Propagation::Foreground) => (Some("foregroundDeletion"), &["orphan"]),
            Some(Propagation::Background) => (None, &["orphan", "foregroundDeletion"]),
            None => (None, &[]),
        };
        fins.retain(|f| !drop.contains(&f.as_str()));
        if let Some(add) = add
            && !fins.iter().any(|f| f == add)
        {
            fins.push(add.into());
        }
        let already = object::is_deleting(&old);
        let mut new = (*old).clone();
        object::set_finalizers(&mut new, &fins);
        if already {
            // A second delete can only shorten a pending grace period.
            let cur = object::deletion_grace(&old).unwrap_or(0);
            if grace < cur {
                let m = meta_mut(&mut new);
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
                m.insert("deletionTimestamp".into(), json!(object::rfc3339_in(grace)));
            }
        } else {
            let m = meta_mut(&mut new);
            m.insert("deletionTimestamp".into(), json!(object::rfc3339_in(grace)));
            m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
            if g > 0 {
                m.insert("generation".into(), json!(g + 1));
            }
        }
        let remove = fins.is_empty()
            && object::deletion_grace(&new).unwrap_or(0) == 0
            && !kinds::blocks_removal(def, &new);
        if !remove && already && object::same_ignoring_rv(&new, &old) {
            return Ok(Deleted::Pending(old));
        }
        if remove {
            // The DELETED event carries the last stored state with the delete's RV.
            let last = (*old).clone();
            let last =
                self.commit_next_rv(&mut inner, key, EventKind::Deleted, last, (old, old_stored));
            Ok(Deleted::Gone(last))
        } else {
            let new =
                self.commit_next_rv(&mut inner, key, EventKind::Modified, new, (old, old_stored));
            Ok(Deleted::Pending(new))
        }
    }

    /// Commits `obj` as `kind` (replacing `old`) under the next resourceVersion, which it
    /// stamps on `obj`; returns the committed object.
    fn commit_next_rv(
        &self,
        inner: &mut Inner,
        key: ObjKey,
        kind: EventKind,
        mut obj: Value,
        (old, old_stored): (Arc<Value>, Arc<Stored>),
    ) -> Arc<Value> {
        inner.rv += 1;
        meta_mut(&mut obj).insert("resourceVersion".into(), json!(inner.rv.to_string()));
        let stored = Stored::encode(&obj);
        self.commit(
            inner,
            Commit {
                key,
                kind,
                object: &obj,
                stored,
                prev: Some((&old, old_stored)),
            },
        );
        Arc::new(obj)
    }

    /// A deep snapshot of every stored object (for tests proving a rejected request changed
    /// nothing), keyed by resource plural, namespace and name.
    pub(crate) fn snapshot(&self) -> BTreeMap<(String, String, String), Value> {
        let inner = self.lock();
        let mut out = BTreeMap::new();
        for (res, col) in inner.cols.iter().enumerate() {
            let def = self.reg.get(res);
            for ((ns, name), obj) in &col.objects {
                out.insert(
                    (def.group_resource(), ns.clone(), name.clone()),
                    obj.decode(),
                );
            }
        }
        out
    }
}

/// A delete precondition (`preconditions.uid`, `preconditions.resourceVersion`): `409 Conflict`
/// when set and different from the stored object's `have`.
fn check_precondition(
    def: &ResourceDef,
    name: &str,
    field: &str,
    want: Option<&String>,
    have: &str,
) -> Result<(), ApiError> {
    match want {
        Some(want) if want != have => Err(ApiError::conflict(
            def,
            name,
            &format!(
                "Precondition failed: {field} in precondition: {want}, {field} in object meta: {have}"
            ),
        )),
        _ => Ok(()),
    }
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect();
    String::from_utf8(bytes?).ok()
}

fn encode_continue(rv: u64, ns: &str, name: &str) -> String {
    format!("v1.{rv}.{}.{}", hex(ns), hex(name))
}

fn decode_continue(t: &str) -> Result<(u64, String, String), ApiError> {
    let bad = || ApiError::bad_request(format!("invalid continue token: {t:?}"));
    let mut parts = t.split('.');
    if parts.next() != Some("v1") {
        return Err(bad());
    }
    let rv = parts.next().and_then(|p| p.parse().ok()).ok_or_else(bad)?;
    let ns = parts.next().and_then(unhex).ok_or_else(bad)?;
    let name = parts.next().and_then(unhex).ok_or_else(bad)?;
    if parts.next().is_some() {
        return Err(bad());
    }
    Ok((rv, ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::builtin_resources;

    fn store() -> (Store, ResId, ResId) {
        let reg = Arc::new(Registry::new(builtin_resources()));
        let s = Store::new(reg.clone(), 5);
        let ns = reg.core("namespaces").unwrap();
        s.create(ns, "", json!({"metadata": {"name": "default"}}))
            .unwrap();
        (
            s,
            reg.core("configmaps").unwrap(),
            reg.core("pods").unwrap(),
        )
    }

    /// Creates ConfigMap `name` in `default`.
    fn configmap(s: &Store, cm: ResId, name: &str) -> Arc<Value> {
        s.create(cm, "default", json!({"metadata": {"name": name}}))
            .unwrap()
    }

    #[test]
    fn create_sets_server_fields_and_rv_increases() {
        let (s, cm, _) = store();
        let a = configmap(&s, cm, "a");
        let b = s
            .create(cm, "default", json!({"metadata": {"generateName": "b-"}}))
            .unwrap();
        assert!(object::name(&b).starts_with("b-"));
        assert_eq!(object::name(&b).len(), 7);
        let ra: u64 = object::resource_version(&a).parse().unwrap();
        let rb: u64 = object::resource_version(&b).parse().unwrap();
        assert!(rb > ra);
        assert!(!object::uid(&a).is_empty());
        assert_eq!(a["apiVersion"], Value::Null); // kind/apiVersion are added by the HTTP layer
        let e = s
            .create(cm, "default", json!({"metadata": {"name": "a"}}))
            .unwrap_err();
        assert_eq!(e.reason, "AlreadyExists");
        let e = s
            .create(cm, "nope", json!({"metadata": {"name": "a"}}))
            .unwrap_err();
        assert_eq!(e.code, 404);
    }

    #[test]
    fn stale_update_conflicts() {
        let (s, cm, _) = store();
        let a = s
            .create(
                cm,
                "default",
                json!({"metadata": {"name": "a"}, "data": {"k": "1"}}),
            )
            .unwrap();
        let mut upd = (*a).clone();
        upd["data"]["k"] = json!("2");
        s.update(cm, "default", "a", upd.clone(), Sub::Main, false)
            .unwrap();
        let e = s
            .update(cm, "default", "a", upd, Sub::Main, false)
            .unwrap_err();
        assert_eq!(e.reason, "Conflict");
    }

    #[test]
    fn history_window_expires() {
        let (s, cm, _) = store();
        let first = configmap(&s, cm, "x0");
        let rv0: u64 = object::resource_version(&first).parse().unwrap();
        for i in 1..10 {
            configmap(&s, cm, &format!("x{i}"));
        }
        let e = s.watch(cm, None, WatchFrom::After(rv0)).err().unwrap();
        assert_eq!(e.code, 410);
        assert_eq!(e.reason, "Expired");
        let cur = s.current_rv();
        let w = s.watch(cm, None, WatchFrom::After(cur - 2)).unwrap();
        assert_eq!(w.initial.len(), 2);
    }

    #[test]
    fn the_current_version_is_the_committed_objects_bytes() {
        let (s, cm, _) = store();
        let a = configmap(&s, cm, "a");
        let rv: u64 = object::resource_version(&a).parse().unwrap();
        let bytes = |v: &Value| serde_json::to_vec(v).unwrap();
        let current = s.current_version(cm, "default", "a", rv).unwrap();
        assert_eq!(current.json(), bytes(&a).as_slice());
        let mut next = (*a).clone();
        next["data"]["k"] = json!("2");
        let b = s.update(cm, "default", "a", next, Sub::Main, true).unwrap();
        assert!(
            s.current_version(cm, "default", "a", rv).is_none(),
            "no longer current"
        );
        let rv_b: u64 = object::resource_version(&b).parse().unwrap();
        let current = s.current_version(cm, "default", "a", rv_b).unwrap();
        assert_eq!(current.json(), bytes(&b).as_slice());
        assert!(s.current_version(cm, "default", "b", rv_b).is_none());
    }

    #[test]
    fn an_object_is_found_by_its_uid_only_at_its_own_key() {
        let (s, cm, _) = store();
        let a = configmap(&s, cm, "a");
        let uid = object::uid(&a);
        assert!(s.holds_uid(cm, "default", "a", uid));
        assert!(
            !s.holds_uid(cm, "default", "a", "another-uid"),
            "same name, other object"
        );
        assert!(!s.holds_uid(cm, "default", "b", uid));
        assert!(!s.holds_uid(cm, "other", "a", uid));
        s.delete(cm, "default", "a", &DeleteOpts::default())
            .unwrap();
        assert!(!s.holds_uid(cm, "default", "a", uid), "deleted");
    }

    #[test]
    fn a_version_is_stored_once_and_shared_with_its_events() {
        let (s, cm, _) = store();
        let mut w = s.watch(cm, None, WatchFrom::Current).unwrap();
        let a = s
            .create(
                cm,
                "default",
                json!({"metadata": {"name": "a"}, "data": {"k": "1"}}),
            )
            .unwrap();
        let added = w.rx.try_recv().unwrap();
        assert_eq!(added.object_value(), *a);
        assert_eq!(added.ns, "default");
        let key = ("default".to_string(), "a".to_string());
        let same = |ev: &Arc<Stored>| Arc::ptr_eq(&s.lock().cols[cm].objects[&key], ev);
        assert!(same(&added.object));
        let mut upd = (*a).clone();
        upd["data"]["k"] = json!("2");
        s.update(cm, "default", "a", upd, Sub::Main, false).unwrap();
        let modified = w.rx.try_recv().unwrap();
        // The previous version is the ADDED event's allocation, the new one the store's.
        assert!(Arc::ptr_eq(modified.prev.as_ref().unwrap(), &added.object));
        assert!(same(&modified.object));
        assert_eq!(modified.prev.as_deref().unwrap().decode()["data"]["k"], "1");
        assert_eq!(s.get(cm, "default", "a").unwrap()["data"]["k"], "2");
        // A watch from the current state starts from the stored bytes as well.
        let w2 = s.watch(cm, Some("default"), WatchFrom::Current).unwrap();
        assert!(same(&w2.initial[0].object));
        assert_eq!(w2.initial[0].rv, modified.rv);
    }

    #[test]
    fn filtered_pages_count_only_matching_objects() {
        let (s, cm, _) = store();
        for i in 0..6 {
            let labels = if i % 2 == 0 {
                json!({"x": "y"})
            } else {
                json!({})
            };
            s.create(
                cm,
                "default",
                json!({"metadata": {"name": format!("c{i}"), "labels": labels}}),
            )
            .unwrap();
        }
        let f = Filter {
            labels: crate::sim::selector::LabelSelector::parse("x=y").unwrap(),
            ..Default::default()
        };
        let p = s.list(cm, Some("default"), &f, 2, None).unwrap();
        let names: Vec<&str> = p.items.iter().map(|o| object::name(o)).collect();
        assert_eq!(names, ["c0", "c2"]);
        assert_eq!(p.remaining, Some(1));
    }

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "default", "a.b");
        assert_eq!(
            decode_continue(&t).unwrap(),
            (42, "default".into(), "a.b".into())
        );
        assert!(decode_continue("garbage").is_err());
    }

    #[test]
    fn pagination() {
        let (s, cm, _) = store();
        for i in 0..5 {
            configmap(&s, cm, &format!("c{i}"));
        }
        let f = Filter::default();
        let p1 = s.list(cm, Some("default"), &f, 2, None).unwrap();
        assert_eq!(p1.items.len(), 2);
        assert_eq!(p1.remaining, Some(3));
        let p2 = s
            .list(cm, Some("default"), &f, 2, p1.continue_token.as_deref())
            .unwrap();
        assert_eq!(object::name(&p2.items[0]), "c2");
        let p3 = s
            .list(cm, Some("default"), &f, 2, p2.continue_token.as_deref())
            .unwrap();
        assert_eq!(p3.items.len(), 1);
        assert!(p3.continue_token.is_none());
    }
}
