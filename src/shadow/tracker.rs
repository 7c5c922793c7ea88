//! The shadow's state machine: each change seen on the watches is, if it is a write of the
//! leading controller, compared with our decision from the state just before it; then the
//! change goes into the [`Mirror`].
//!
//! - A write that matches one of our intended writes is `agree`. The writes of one reconcile
//!   arrive one by one: the intended writes of the decision that matched stay expected for the
//!   next writes of the same VM key.
//! - A write that does not is held: at each of the next [`LATER_TRIES`] changes of the same VM
//!   key's other objects (for at most [`LATER_WAIT`]) we decide again, from the newer state with the written object as it was before the
//!   write (the leader may have seen a change our watches deliver later). A match then is
//!   `agree-later`; otherwise the write is `differ` / `we-would-write-more` (our closest
//!   write to the object) or `we-would-not-write` (none). While an active watch has not yet
//!   delivered the write's resourceVersion, neither tries nor time count ([`Tracker::behind`]);
//!   a write still waiting so when the comparison ends is left out and counted in the errors.
//!
//! Attribution: a write is the leader's when the `managedFields` entry it stamped names one of
//! the leader's field managers ([`author`]). A server that keeps no `managedFields` (the embedded
//! one), and every deletion (a DELETE leaves no author on the object), gives no author: such a
//! change counts when our decision makes the same write (now or on the next reconcile), and,
//! when it does not, only if it creates an owned object (no one but the controllers creates a
//! VM's VMI or a VMI's launcher pod); otherwise it may be another writer's and is left out.

use super::compare::{Comparison, PathDiff, Verdict, compare, normalise};
use super::mirror::{Mirror, vm_key};
use super::predict::{Effect, Intended, Kind, Part, vm_writes_at, vmi_writes_at};
use crate::inspect::analyze::Refused;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::BTreeMap;

/// How many later changes of the same VM key's other objects a held write waits for its
/// `agree-later`.
pub(super) const LATER_TRIES: u8 = 8;

/// How long a held write waits for its `agree-later` at most.
pub(super) const LATER_WAIT: chrono::TimeDelta = chrono::TimeDelta::seconds(5);

/// How many earlier changes of its VM key a write that agrees with no decision from the state
/// before it is decided again without ([`Tracker::look_back`]): how far a cache may be behind.
pub(super) const EARLIER_TRIES: usize = 16;

/// How many writes of a VM key may come between a refused write of its reconcile and the
/// next write of that reconcile ([`Tracker::refused`]).
const AFTER_REFUSED_TRIES: u8 = 4;

/// The changes kept per VM key for looking back.
const HISTORY: usize = 64;

/// The controller whose reconcile made a refused write: the VM and the VMI controller reconcile
/// the same VM key at once, each going on from its own errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Reconciler {
    Vm,
    Vmi,
}

/// One change seen on a watch.
#[derive(Debug, Clone)]
pub(super) struct Change {
    /// The object's kind.
    pub kind: Kind,
    /// `namespace/name`.
    pub key: String,
    /// The object now; `None`: deleted.
    pub object: Option<Value>,
}

/// Who wrote a change, as far as the object tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Author {
    /// The newest `managedFields` entry is one of the leader's managers.
    Leader,
    /// It is someone else's.
    Other,
    /// The object names no author.
    Unknown,
}

/// Who made the write that turned `before` into `after`: the manager of the one
/// `managedFields` entry the write stamped (new, or with a new time: the API server sets the
/// writer's entry's time on every write that changes its fields; fields another manager
/// loses change its entry but not its time); checked against `leader_managers`. No entry, or
/// no single stamped one (a write in the same second as the last one of that manager):
/// [`Author::Unknown`].
pub(crate) fn author(before: Option<&Value>, after: &Value, leader_managers: &[String]) -> Author {
    let entries = |v: &Value| {
        v.pointer("/metadata/managedFields")
            .and_then(Value::as_array)
            .cloned()
    };
    let Some(now) = entries(after) else {
        return Author::Unknown;
    };
    let was = before.and_then(entries).unwrap_or_default();
    let id = |e: &Value| {
        (
            e["manager"].clone(),
            e["operation"].clone(),
            e["subresource"].clone(),
        )
    };
    let stamped: Vec<&Value> = now
        .iter()
        .filter(|e| !was.iter().any(|w| id(w) == id(e) && w["time"] == e["time"]))
        .collect();
    match stamped.as_slice() {
        [one] => match one["manager"].as_str() {
            Some(m) if leader_managers.iter().any(|l| l == m) => Author::Leader,
            _ => Author::Other,
        },
        _ => Author::Unknown,
    }
}

/// A test-only change to our decision: set `pointer` to `value` in every object of `kind`
/// our decision writes. It exists to show that a wrong decision is reported; nothing but
/// tests sets it.
#[derive(Debug, Clone, PartialEq)]
pub struct Perturbation {
    /// The kind whose intended objects are changed.
    pub kind: Kind,
    /// RFC 6901 pointer (`/metadata/labels/x`); missing parents are created.
    pub pointer: String,
    /// The value set.
    pub value: Value,
}

impl Perturbation {
    fn apply(&self, kind: Kind, obj: &mut Value) {
        if kind != self.kind {
            return;
        }
        let mut cur = obj;
        let steps: Vec<&str> = self.pointer.split('/').skip(1).collect();
        for (i, step) in steps.iter().enumerate() {
            if !cur.is_object() {
                *cur = Value::Object(Default::default());
            }
            let Some(map) = cur.as_object_mut() else {
                return;
            };
            if i + 1 == steps.len() {
                map.insert((*step).to_string(), self.value.clone());
                return;
            }
            cur = map.entry((*step).to_string()).or_insert(Value::Null);
        }
    }
}

/// One classified write.
#[derive(Debug, Clone)]
pub struct Record {
    /// The VM key whose reconcile wrote it.
    pub vm_key: String,
    /// The written object's kind.
    pub kind: Kind,
    /// The written object's `namespace/name`.
    pub key: String,
    /// The part written.
    pub part: Part,
    /// The verdict.
    pub verdict: Verdict,
    /// Our action compared (`None`: we would not write).
    pub action: Option<&'static str>,
    /// Where ours and theirs differ.
    pub paths: Vec<PathDiff>,
    /// The VM key's objects (VM, VMI, pods) as they were before the write, for a verdict other
    /// than agreement.
    pub state_before: Vec<Value>,
    /// When the write was seen.
    pub seen: DateTime<Utc>,
    /// The number of the change that was the write, counting every change the tracker
    /// observed from 1 (an audit log's replay maps it back to the log's line).
    pub change: u64,
}

/// A write of the leader the API server refused: what it tried and the error it got back.
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    /// The object's kind.
    pub kind: Kind,
    /// Its `namespace/name` (the name empty for a creation whose name the server generates).
    pub key: String,
    /// The part written.
    pub part: Part,
    /// A creation (POST).
    pub creation: bool,
    /// A deletion.
    pub deletion: bool,
    /// A patch (else a replacement, when neither a creation nor a deletion).
    pub patch: bool,
    /// The object sent with a creation, when the log holds it (its `generateName`).
    pub request: Option<Value>,
    /// The error, as the leader's client got it.
    pub error: crate::controller::common::ApiFailure,
}

struct Held {
    since: DateTime<Utc>,
    record: Record,
    before: Option<Value>,
    after: Option<Value>,
    author: Author,
    best: Option<(&'static str, Comparison)>,
    tries: u8,
    /// The change's number ([`Tracker::seq`]).
    seq: u64,
}

/// One change of a VM key's objects, with the object as it was before it.
struct Past {
    seq: u64,
    /// The change's resourceVersion (a deletion's: the object's last; 0: not known).
    rv: u64,
    kind: Kind,
    key: String,
    /// Shared with the mirror while it held it.
    before: Option<std::sync::Arc<Value>>,
}

/// The state machine (see the module docs).
pub(super) struct Tracker {
    /// The watched objects.
    pub mirror: Mirror,
    leader_managers: Vec<String>,
    perturbation: Option<Perturbation>,
    /// Per VM key, the intended writes of the decision that last matched, not yet seen.
    expected: BTreeMap<String, Vec<Intended>>,
    /// Per VM key and controller, the writes our decision makes after that controller's last
    /// refused write (from its error), and how many more of the key's writes may come before
    /// them: the other controller's writes of the same VM come between (the VM controller's
    /// status while the VMI controller's reconcile goes on after its refused pod creation), and
    /// its refused writes too, which leave the first controller's reconcile as it was.
    after_refused: BTreeMap<(String, Reconciler), (Vec<Intended>, u8)>,
    held: Vec<Held>,
    /// Classified writes, in the order they were decided.
    pub records: Vec<Record>,
    /// Decisions that could not be computed (an object that does not decode), with the reason.
    pub errors: Vec<String>,
    /// The resourceVersion each object was created at, for objects whose creation was seen.
    created_at: BTreeMap<(Kind, String), u64>,
    /// Whether a write that agrees with no decision from the state before it (nor later) is
    /// decided again from the states up to [`EARLIER_TRIES`] changes of its VM key before it:
    /// a match is `agree-earlier`, the controller decided from a cache behind the server.
    /// Only where every change is known in order (an audit log).
    pub look_back: bool,
    /// The comparison window has closed: changes still go into the mirror and give the held
    /// writes their later tries, but new writes are not classified.
    pub closing: bool,
    /// Changes observed so far.
    seq: u64,
    /// Per VM key, its last [`HISTORY`] changes, oldest first.
    history: BTreeMap<String, std::collections::VecDeque<Past>>,
    /// Per watched kind, the newest resourceVersion its watch delivered and when
    /// ([`Tracker::delivered`]); empty where every change comes in the server's order (an
    /// audit log).
    delivered: BTreeMap<Kind, (u64, DateTime<Utc>)>,
}

/// `metadata.resourceVersion` as a number (etcd's revision, the embedded server's counter).
pub(super) fn resource_version(obj: &Value) -> Option<u64> {
    obj.pointer("/metadata/resourceVersion")?
        .as_str()?
        .parse()
        .ok()
}

/// What a change is as a write.
pub(super) struct Write {
    part: Part,
    deletion: bool,
    creation: bool,
}

pub(super) fn as_write(before: Option<&Value>, after: Option<&Value>) -> Option<Write> {
    let deleting = |v: &Value| {
        v.pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null())
    };
    match (before, after) {
        (None, None) => None,
        (None, Some(_)) => Some(Write {
            part: Part::Main,
            deletion: false,
            creation: true,
        }),
        // The server removing an object whose deletion was already seen is no write.
        (Some(b), None) if deleting(b) => None,
        (Some(_), None) => Some(Write {
            part: Part::Main,
            deletion: true,
            creation: false,
        }),
        (Some(b), Some(a)) => {
            if !deleting(b) && deleting(a) {
                return Some(Write {
                    part: Part::Main,
                    deletion: true,
                    creation: false,
                });
            }
            let changes = super::compare::diff(&normalise(a), &normalise(b));
            if changes.is_empty() {
                return None;
            }
            let status = changes
                .iter()
                .all(|c| c.path == "status" || c.path.starts_with("status."));
            Some(Write {
                part: if status { Part::Status } else { Part::Main },
                deletion: false,
                creation: false,
            })
        }
    }
}

fn generate_name(obj: Option<&Value>) -> Option<&str> {
    obj?.pointer("/metadata/generateName")?.as_str()
}

/// Does `w` write the object `name` of `kind` the way the change does?
fn targets(w: &Intended, kind: Kind, name: &str, write: &Write, after: Option<&Value>) -> bool {
    if w.kind != kind || w.part.is_some_and(|p| p != write.part) {
        return false;
    }
    let op_matches = match &w.effect {
        Effect::Create(_) => write.creation,
        Effect::Delete => write.deletion,
        _ => !write.creation && !write.deletion,
    };
    let name_matches = match (&w.name, &w.effect) {
        (Some(n), _) => n == name,
        (None, Effect::Create(obj)) => generate_name(Some(obj)) == generate_name(after),
        (None, _) => false,
    };
    op_matches && name_matches
}

impl Tracker {
    /// A tracker over `mirror` (the watches' initial lists), attributing writes to
    /// `leader_managers`.
    pub(crate) fn new(
        mirror: Mirror,
        leader_managers: Vec<String>,
        perturbation: Option<Perturbation>,
    ) -> Self {
        Tracker {
            mirror,
            leader_managers,
            perturbation,
            expected: BTreeMap::new(),
            after_refused: BTreeMap::new(),
            held: Vec::new(),
            records: Vec::new(),
            errors: Vec::new(),
            created_at: BTreeMap::new(),
            look_back: false,
            closing: false,
            seq: 0,
            history: BTreeMap::new(),
            delivered: BTreeMap::new(),
        }
    }

    /// Classify `change` (if it is a write of the leader) against the state before it, store
    /// it, then give the held writes of its VM key their next try.
    pub(crate) fn observe(&mut self, change: Change, now: DateTime<Utc>) {
        self.observe_by(change, None, now);
    }

    /// [`Tracker::observe`] for a source that knows who wrote the change (an audit log):
    /// `Some(author)` is taken instead of the object's `managedFields`.
    pub(crate) fn observe_by(&mut self, change: Change, known: Option<Author>, now: DateTime<Utc>) {
        let before = self.mirror.shared(change.kind, &change.key);
        let vm_key = change
            .object
            .as_ref()
            .or(before.as_deref())
            .and_then(|o| vm_key(change.kind, o));
        let id = (change.kind, change.key.clone());
        match (&before, &change.object) {
            (None, Some(created)) => {
                if let Some(rv) = resource_version(created) {
                    self.created_at.insert(id, rv);
                }
            }
            (_, None) => {
                self.created_at.remove(&id);
            }
            _ => {}
        }
        self.seq += 1;
        if let Some(vm_key) = &vm_key {
            self.finish_held_on(change.kind, &change.key);
            if !self.closing {
                self.classify(vm_key, &change, before.as_deref(), known, now);
            }
            let rv = (change.object.as_ref().or(before.as_deref()))
                .and_then(resource_version)
                .unwrap_or(0);
            let past = self.history.entry(vm_key.clone()).or_default();
            if past.len() == HISTORY {
                past.pop_front();
            }
            past.push_back(Past {
                seq: self.seq,
                rv,
                kind: change.kind,
                key: change.key.clone(),
                before,
            });
        }
        self.mirror.set(change.kind, &change.key, change.object);
        if let Some(vm_key) = vm_key {
            self.retry_held(&vm_key, (change.kind, &change.key), now);
        }
    }

    /// The leader's write `r` of VM key `vm_key` was refused. It changed nothing, but the rest
    /// of its reconcile is decided from the error, as the controllers' executors do (KubeVirt
    /// v1.9.0 pkg/virt-controller/watch/vmi/vmi.go:355-357 hands `sync`'s error to
    /// `updateStatus`; vm/vm.go:1033-1035 makes a refused VMI creation the sync error that
    /// `updateStatus`, vm.go:441-451, turns into the `Failure` condition). Our decision from the state now, with
    /// the action that makes the refused write failed with its error: its writes after that
    /// action are what the VM key's next writes are expected to be. `false` when none of our
    /// actions makes the refused write (the expected writes are left as they were).
    pub(crate) fn refused(&mut self, vm_key: &str, r: &Refusal, now: DateTime<Utc>) -> bool {
        let vm_name = vm_key.split_once('/').map_or(vm_key, |(_, n)| n);
        let failed = match self.refused_action(vm_key, r, now) {
            Ok(Some(f)) => f,
            Ok(None) => return false,
            Err(e) => {
                self.errors.push(e);
                return false;
            }
        };
        // A write of the VMI controller's status part: `updateStatus` returns at its first
        // failed write, nothing follows in that reconcile.
        self.expected.remove(vm_key);
        let Some(failed) = failed else {
            self.after_refused
                .remove(&(vm_key.to_string(), Reconciler::Vmi));
            return true;
        };
        let reconciler = match &failed {
            Refused::Vm(..) => Reconciler::Vm,
            Refused::VmiSync(..) => Reconciler::Vmi,
        };
        let rest = match self
            .mirror
            .decisions_refused(vm_key, now, &[], Some(&failed))
        {
            Ok((vm, vmi)) => match &failed {
                // The VM controller goes on after the failed action (decide_with_failures).
                Refused::Vm(at, _) => vm
                    .map(|d| vm_writes_at(&d, vm_name))
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|(i, _)| i > at)
                    .map(|(_, w)| w)
                    .collect(),
                // The VMI controller's sync stops there; its status part follows.
                Refused::VmiSync(..) => vmi
                    .map(|d| {
                        let sync = d.sync_actions.len();
                        vmi_writes_at(&d, vm_name)
                            .into_iter()
                            .filter(|(i, _)| *i >= sync)
                            .map(|(_, w)| w)
                            .collect()
                    })
                    .unwrap_or_default(),
            },
            Err(e) => {
                self.errors.push(e);
                Vec::new()
            }
        };
        self.after_refused.insert(
            (vm_key.to_string(), reconciler),
            (rest, AFTER_REFUSED_TRIES),
        );
        true
    }

    /// Which of our actions, decided from the state now, makes the refused write `r`:
    /// `Some(Some(refused))` an action of the VM decision or of the VMI decision's sync part,
    /// `Some(None)` one of the VMI decision's status part, `None` none.
    fn refused_action(
        &self,
        vm_key: &str,
        r: &Refusal,
        now: DateTime<Utc>,
    ) -> Result<Option<Option<Refused>>, String> {
        let write = Write {
            part: r.part,
            deletion: r.deletion,
            creation: r.creation,
        };
        let name = r.key.split_once('/').map_or(r.key.as_str(), |(_, n)| n);
        let vm_name = vm_key.split_once('/').map_or(vm_key, |(_, n)| n);
        // A creation logged without its object (below `RequestResponse`) is our creation of
        // that kind.
        let same_verb = |w: &Intended| match w.effect {
            Effect::Replace(_) | Effect::ReplaceStatus(_) => !r.patch,
            Effect::JsonPatch(_) | Effect::MergePatch(_) | Effect::PodCondition(_) => r.patch,
            Effect::Create(_) | Effect::Delete => true,
        };
        let hits = |w: &Intended| {
            (same_verb(w) && targets(w, r.kind, name, &write, r.request.as_ref()))
                || (r.creation
                    && r.request.is_none()
                    && w.kind == r.kind
                    && matches!(w.effect, Effect::Create(_)))
        };
        let (vm, vmi) = self.mirror.decisions(vm_key, now, &[])?;
        if let Some(d) = vm
            && let Some((i, _)) = vm_writes_at(&d, vm_name).into_iter().find(|(_, w)| hits(w))
        {
            return Ok(Some(Some(Refused::Vm(i, r.error.clone()))));
        }
        let Some(d) = vmi else {
            return Ok(None);
        };
        let sync = d.sync_actions.len();
        let found = vmi_writes_at(&d, vm_name)
            .into_iter()
            .find(|(_, w)| hits(w));
        Ok(found.map(|(i, _)| (i < sync).then(|| Refused::VmiSync(i, r.error.clone()))))
    }

    /// Writes waiting for our next reconcile.
    pub(crate) fn held(&self) -> usize {
        self.held.len()
    }

    /// Decide the held writes whose [`LATER_WAIT`] has passed at `now`: no change of their VM
    /// key came to agree with them. A write a watch is still behind ([`Tracker::behind`])
    /// waits, and its wait starts again.
    pub(crate) fn settle_held(&mut self, now: DateTime<Utc>) {
        for mut h in std::mem::take(&mut self.held) {
            if self.behind(&h, now) {
                h.since = now;
                self.held.push(h);
            } else if h.since < now - LATER_WAIT {
                self.settle(h);
            } else {
                self.held.push(h);
            }
        }
    }

    /// Forget the remembered changes no state taken back can need any more (each holds a whole
    /// object): those at or below every resourceVersion a write still to come or still held
    /// can have. A write still to come is newer than what every active watch delivered (with
    /// none active, than what any did); a held one waits at its own. Kept whole where the
    /// history is looked back over ([`Tracker::look_back`]). Without this a shadow kept the
    /// last 64 versions of every VM's objects for as long as it ran.
    pub(crate) fn forget_history(&mut self, now: DateTime<Utc>) {
        if self.look_back {
            return;
        }
        let active = self
            .delivered
            .values()
            .filter(|(_, at)| now - *at < LATER_WAIT);
        let next = match active.map(|(rv, _)| *rv).min() {
            Some(rv) => rv,
            None => self
                .delivered
                .values()
                .map(|(rv, _)| *rv)
                .max()
                .unwrap_or(0),
        };
        let held = self.held.iter().map(|h| {
            let obj = h.after.as_ref().or(h.before.as_ref());
            obj.and_then(resource_version).unwrap_or(0)
        });
        let floor = held.fold(next, u64::min);
        self.history.retain(|_, past| {
            while past.front().is_some_and(|p| p.rv <= floor) {
                past.pop_front();
            }
            !past.is_empty()
        });
    }

    /// Note that the watch of `kind` delivered a change at resourceVersion `rv` at `now`.
    pub(crate) fn delivered(&mut self, kind: Kind, rv: u64, now: DateTime<Utc>) {
        let seen = self.delivered.entry(kind).or_insert((rv, now));
        *seen = (seen.0.max(rv), now);
    }

    /// Whether a watch that delivered a change within [`LATER_WAIT`] of `now` has not yet
    /// delivered the held write's resourceVersion: it may still bring changes the leader saw
    /// before it wrote. The watches of different kinds are separate streams; in a bulk start
    /// the VMs' fell seconds behind the revisions' (it carries about ten times their changes),
    /// and a revision waited its `LATER_WAIT` before the VM it was made from arrived.
    fn behind(&self, h: &Held, now: DateTime<Utc>) -> bool {
        let Some(rv) = h
            .after
            .as_ref()
            .or(h.before.as_ref())
            .and_then(resource_version)
        else {
            return false;
        };
        (self.delivered.values()).any(|(seen, at)| *seen < rv && now - *at < LATER_WAIT)
    }

    /// Leave out the held writes a watch is still behind at `now` ([`Tracker::behind`]): the
    /// comparison ends before their state arrived, so no verdict on them would be fair. Said in
    /// [`Tracker::errors`], with how many.
    pub(crate) fn leave_out_behind(&mut self, now: DateTime<Utc>) {
        let held = std::mem::take(&mut self.held);
        let (behind, keep): (Vec<Held>, Vec<Held>) =
            held.into_iter().partition(|h| self.behind(h, now));
        self.held = keep;
        if !behind.is_empty() {
            self.errors.push(format!(
                "{} writes not compared: the watches had not delivered the changes before them \
                 when the comparison ended (the shadow was behind the API server)",
                behind.len()
            ));
        }
    }

    /// Decide every held write (the watches ended).
    pub(crate) fn finish(&mut self) {
        for h in std::mem::take(&mut self.held) {
            self.settle(h);
        }
    }

    fn decide(&mut self, mirror: &Mirror, vm_key: &str, now: DateTime<Utc>) -> Vec<Intended> {
        match mirror.decide(vm_key, now) {
            Ok(list) => list,
            Err(e) => {
                self.errors.push(e);
                Vec::new()
            }
        }
    }

    /// The first of `list` that writes what the change wrote, else the closest one to the
    /// object: (index, our action, comparison).
    fn best_match(
        &self,
        list: &[Intended],
        change: &Change,
        write: &Write,
        before: Option<&Value>,
    ) -> Option<(usize, &'static str, Comparison)> {
        let name = change
            .key
            .split_once('/')
            .map_or(change.key.as_str(), |(_, n)| n);
        // A deletion leaves no object, whether the server removed it or marked it.
        let after = if write.deletion {
            None
        } else {
            change.object.as_ref()
        };
        let mut best: Option<(usize, &'static str, Comparison)> = None;
        for (i, w) in list.iter().enumerate() {
            if !targets(w, change.kind, name, write, change.object.as_ref()) {
                continue;
            }
            let ours = match w.apply(before) {
                Ok(mut ours) => {
                    if let (Some(p), Some(o)) = (&self.perturbation, ours.as_mut()) {
                        p.apply(change.kind, o);
                    }
                    ours
                }
                Err(_) => continue,
            };
            let c = compare(before, ours.as_ref(), after);
            if c.verdict == Verdict::Agree {
                return Some((i, w.action, c));
            }
            if best
                .as_ref()
                .is_none_or(|(_, _, b)| c.paths.len() < b.paths.len())
            {
                best = Some((i, w.action, c));
            }
        }
        best
    }

    fn classify(
        &mut self,
        vm_key: &str,
        change: &Change,
        before: Option<&Value>,
        known: Option<Author>,
        now: DateTime<Utc>,
    ) {
        let Some(write) = as_write(before, change.object.as_ref()) else {
            return;
        };
        let author = known.unwrap_or_else(|| match (&change.object, write.deletion) {
            (Some(obj), false) => author(before, obj, &self.leader_managers),
            _ => Author::Unknown,
        });
        if author == Author::Other {
            return;
        }
        // The writes still expected from the decision that matched last, then a fresh one.
        let expected = self.expected.remove(vm_key).unwrap_or_default();
        if let Some((i, action, _)) = self
            .best_match(&expected, change, &write, before)
            .filter(|(_, _, c)| c.verdict == Verdict::Agree)
        {
            self.agree(vm_key, change, &write, expected, (i, action), now);
            return;
        }
        // Then what follows either controller's last refused write, decided from its error.
        if self.agrees_after_refused(vm_key, change, &write, before, now) {
            return;
        }
        let fresh = if write.creation {
            let mirror = self.before_creation(vm_key, change.object.as_ref());
            self.decide(&mirror, vm_key, now)
        } else {
            let mirror = std::mem::take(&mut self.mirror);
            let fresh = self.decide(&mirror, vm_key, now);
            self.mirror = mirror;
            fresh
        };
        let found = self.best_match(&fresh, change, &write, before);
        match found {
            Some((i, action, c)) if c.verdict == Verdict::Agree => {
                self.agree(vm_key, change, &write, fresh, (i, action), now);
            }
            // No author, nothing of ours on it: another writer's, unless it creates an owned
            // object (our caches may lag behind the leader's: wait for our next reconcile).
            None if author == Author::Unknown && !write.creation => {}
            best => self.hold(vm_key, change, &write, before, author, best, now),
        }
    }

    /// Whether `change` is a write our decision makes after the last refused write of the VM
    /// or the VMI controller's reconcile of `vm_key` (recorded as `agree`). Each list waits
    /// for [`AFTER_REFUSED_TRIES`] writes of the key.
    fn agrees_after_refused(
        &mut self,
        vm_key: &str,
        change: &Change,
        write: &Write,
        before: Option<&Value>,
        now: DateTime<Utc>,
    ) -> bool {
        for reconciler in [Reconciler::Vm, Reconciler::Vmi] {
            let id = (vm_key.to_string(), reconciler);
            let Some((list, left)) = self.after_refused.remove(&id) else {
                continue;
            };
            let found = self.best_match(&list, change, write, before);
            if let Some((i, action, _)) = found.filter(|(_, _, c)| c.verdict == Verdict::Agree) {
                self.agree(vm_key, change, write, list, (i, action), now);
                return true;
            }
            if left > 1 {
                self.after_refused.insert(id, (list, left - 1));
            }
        }
        false
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        vm_key: &str,
        change: &Change,
        part: Part,
        verdict: Verdict,
        action: Option<&'static str>,
        paths: Vec<PathDiff>,
        now: DateTime<Utc>,
    ) {
        self.records.push(Record {
            vm_key: vm_key.to_string(),
            kind: change.kind,
            key: change.key.clone(),
            part,
            verdict,
            action,
            paths,
            state_before: Vec::new(),
            seen: now,
            change: self.seq,
        });
    }

    /// Record `change` as agreeing with `list[matched.0]`; the rest of `list` is what the VM
    /// key's decision still expects to see.
    fn agree(
        &mut self,
        vm_key: &str,
        change: &Change,
        write: &Write,
        mut list: Vec<Intended>,
        matched: (usize, &'static str),
        now: DateTime<Utc>,
    ) {
        list.remove(matched.0);
        self.expected.insert(vm_key.to_string(), list);
        let (part, action) = (write.part, Some(matched.1));
        self.push(
            vm_key,
            change,
            part,
            Verdict::Agree,
            action,
            Vec::new(),
            now,
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn hold(
        &mut self,
        vm_key: &str,
        change: &Change,
        write: &Write,
        before: Option<&Value>,
        author: Author,
        best: Option<(usize, &'static str, Comparison)>,
        now: DateTime<Utc>,
    ) {
        let record = Record {
            vm_key: vm_key.to_string(),
            kind: change.kind,
            key: change.key.clone(),
            part: write.part,
            verdict: Verdict::WeWouldNotWrite,
            action: None,
            paths: Vec::new(),
            state_before: self.state_of(vm_key),
            seen: now,
            change: self.seq,
        };
        self.held.push(Held {
            since: now,
            record,
            before: before.cloned(),
            after: change.object.clone(),
            author,
            best: best.map(|(_, a, c)| (a, c)),
            tries: 0,
            seq: self.seq,
        });
    }

    /// The VM, VMI and launcher pods of `vm_key`, as stored now.
    fn state_of(&self, vm_key: &str) -> Vec<Value> {
        let m = &self.mirror;
        let mut out: Vec<Value> = [Kind::VirtualMachine, Kind::VirtualMachineInstance]
            .iter()
            .filter_map(|k| m.get(*k, vm_key).cloned())
            .collect();
        let pods = m.of_vm_key(vm_key).filter(|(k, _)| *k == Kind::Pod);
        out.extend(pods.filter_map(|(k, n)| m.get(k, n)).cloned());
        out
    }

    /// The mirror as it was when `created` was created, as far as the VM key's changes tell:
    /// its objects created after it (at a newer resourceVersion) are taken out, and those
    /// changed after it are taken back to their version before that. Watches of different
    /// kinds are not ordered with each other, so the VMI a start created can be seen before
    /// the ControllerRevision created just before it, and the VMI's `Scheduled` update before
    /// the launcher pod created while it was `Pending`; deciding from either newer state would
    /// answer "nothing to create".
    fn before_creation(&self, vm_key: &str, created: Option<&Value>) -> Mirror {
        let mut mirror = self.mirror.scope(vm_key, &self.past_versions(vm_key));
        let Some(at) = created.and_then(resource_version) else {
            return mirror;
        };
        // Newest change first: while an object's stored version is newer than the creation,
        // the change that made it is undone.
        for p in self.history.get(vm_key).into_iter().flatten().rev() {
            let newer = mirror
                .get(p.kind, &p.key)
                .and_then(resource_version)
                .is_some_and(|rv| rv > at);
            if newer {
                mirror.set_shared(p.kind, &p.key, p.before.clone());
            }
        }
        let later: Vec<(Kind, String)> = mirror
            .of_vm_key(vm_key)
            .filter(|(kind, key)| {
                self.created_at
                    .get(&(*kind, key.to_string()))
                    .is_some_and(|rv| *rv > at)
            })
            .map(|(kind, key)| (kind, key.to_string()))
            .collect();
        for (kind, key) in later {
            mirror.set(kind, &key, None);
        }
        mirror
    }

    /// The VM key's VM and VMI as they were before its remembered changes: what a mirror
    /// [`Mirror::scope`]d to the key may be taken back to.
    fn past_versions(&self, vm_key: &str) -> Vec<&Value> {
        let past = self.history.get(vm_key).into_iter().flatten();
        past.filter(|p| matches!(p.kind, Kind::VirtualMachine | Kind::VirtualMachineInstance))
            .filter_map(|p| p.before.as_deref())
            .collect()
    }

    /// The VM key's objects as known now, with the held write's object as it was before it.
    fn state_before(&self, h: &Held) -> Vec<Value> {
        let written = |o: &Value| {
            o["kind"] == h.record.kind.as_str() && super::mirror::key_of(o) == h.record.key
        };
        let mut out: Vec<Value> = self
            .state_of(&h.record.vm_key)
            .into_iter()
            .filter(|o| !written(o))
            .collect();
        out.extend(h.before.clone());
        out
    }

    /// A newer write to the object of a held update: its "before" is gone, decide it now.
    fn finish_held_on(&mut self, kind: Kind, key: &str) {
        let (done, keep): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            // A creation's "before" (no object) stays valid: it keeps waiting.
            .partition(|h| h.record.kind == kind && h.record.key == key && h.before.is_some());
        self.held = keep;
        for h in done {
            self.settle(h);
        }
    }

    /// Decide the held writes of `vm_key` again after `changed` (kind, key) changed. A change
    /// of the written object itself (a created pod's own updates) tells nothing the leader
    /// knew: it is no try.
    fn retry_held(&mut self, vm_key: &str, changed: (Kind, &str), now: DateTime<Utc>) {
        for mut h in std::mem::take(&mut self.held) {
            if h.record.vm_key != vm_key {
                self.held.push(h);
                continue;
            }
            let mut mirror = match &h.before {
                None => self.before_creation(vm_key, h.after.as_ref()),
                Some(before) => self.mirror.scope(vm_key, &[before]),
            };
            mirror.set(h.record.kind, &h.record.key, h.before.clone());
            let fresh = self.decide(&mirror, vm_key, now);
            let write = as_write(h.before.as_ref(), h.after.as_ref());
            let change = Change {
                kind: h.record.kind,
                key: h.record.key.clone(),
                object: h.after.clone(),
            };
            let found = write.and_then(|w| self.best_match(&fresh, &change, &w, h.before.as_ref()));
            if let Some((_, action, c)) = &found
                && c.verdict == Verdict::Agree
            {
                h.record.verdict = Verdict::AgreeLater;
                h.record.action = Some(action);
                h.record.state_before.clear();
                self.records.push(h.record);
                continue;
            }
            if let Some((_, action, c)) = found
                && h.best
                    .as_ref()
                    .is_none_or(|(_, b)| c.paths.len() < b.paths.len())
            {
                h.best = Some((action, c));
            }
            if self.behind(&h, now) {
                h.since = now;
            } else if (h.record.kind, h.record.key.as_str()) != changed {
                h.tries += 1;
            }
            if h.tries >= LATER_TRIES {
                self.settle(h);
            } else {
                self.held.push(h);
            }
        }
    }

    /// Our action that writes what held write `h` wrote when decided from a state before the
    /// one just before it: the VM key's objects taken back change by change, up to
    /// [`EARLIER_TRIES`] changes (the written object stays as it was before the write: the
    /// controller's write was made on that version). `None` without [`Tracker::look_back`].
    fn earlier_match(&self, h: &Held) -> Option<&'static str> {
        if !self.look_back {
            return None;
        }
        let past = self.history.get(&h.record.vm_key)?;
        let write = as_write(h.before.as_ref(), h.after.as_ref())?;
        let change = Change {
            kind: h.record.kind,
            key: h.record.key.clone(),
            object: h.after.clone(),
        };
        let written = |p: &Past| p.kind == h.record.kind && p.key == h.record.key;
        let mut also = self.past_versions(&h.record.vm_key);
        also.extend(&h.before);
        let mut mirror = self.mirror.scope(&h.record.vm_key, &also);
        let mut tries = 0;
        for p in past.iter().rev() {
            if p.seq < h.seq && written(p) {
                continue;
            }
            mirror.set_shared(p.kind, &p.key, p.before.clone());
            if p.seq >= h.seq {
                continue;
            }
            let Ok(list) = mirror.decide(&h.record.vm_key, h.since) else {
                continue;
            };
            let found = self.best_match(&list, &change, &write, h.before.as_ref());
            if let Some((_, action, c)) = found
                && c.verdict == Verdict::Agree
            {
                return Some(action);
            }
            tries += 1;
            if tries >= EARLIER_TRIES {
                break;
            }
        }
        None
    }

    fn settle(&mut self, mut h: Held) {
        // The VM's own watch event may arrive after the write it caused (the VM and VMI
        // watches are separate streams): without the VM in the state held, take the VM key's
        // objects now, the written one as it was before the write.
        let has_vm = h
            .record
            .state_before
            .iter()
            .any(|o| o["kind"] == "VirtualMachine");
        if !has_vm {
            h.record.state_before = self.state_before(&h);
        }
        match h.best.take() {
            Some((action, c)) => {
                h.record.verdict = c.verdict;
                h.record.action = Some(action);
                h.record.paths = c.paths;
            }
            None => h.record.verdict = Verdict::WeWouldNotWrite,
        }
        if let Some(action) = self.earlier_match(&h) {
            h.record.verdict = Verdict::AgreeEarlier;
            h.record.action = Some(action);
            h.record.paths.clear();
        }
        // Without an author only a creation of an owned object is surely the leader's (no
        // one else creates a VM's VMI or a VMI's pod); any other write that never agreed may
        // be another writer's (virt-handler, a user) and is not counted.
        let owned_creation = h.before.is_none()
            && h.after.as_ref().is_some_and(|a| {
                a.pointer("/metadata/ownerReferences")
                    .and_then(Value::as_array)
                    .is_some_and(|refs| refs.iter().any(|r| r["controller"] == Value::Bool(true)))
            });
        if h.author == Author::Unknown && !owned_creation {
            return;
        }
        self.records.push(h.record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shadow::mirror::key_of;
    use serde_json::json;

    fn managed(entries: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns", "managedFields": entries}})
    }

    #[test]
    fn the_author_is_the_manager_whose_entry_the_write_stamped() {
        let leader = vec!["virt-controller".to_string()];
        let before = managed(json!([
            {"manager": "virt-controller", "time": "2026-12-01T08:00:01Z", "fieldsV1": {"a": 1}},
            {"manager": "sim-nodes", "time": "2026-12-01T08:00:01Z", "fieldsV1": {"b": 1}}]));
        // The controller writes in the same second as its last write.
        let after = managed(json!([
            {"manager": "virt-controller", "time": "2026-12-01T08:00:01Z", "fieldsV1": {"a": 2}},
            {"manager": "sim-nodes", "time": "2026-12-01T08:00:01Z", "fieldsV1": {"b": 1}}]));
        // Only fields changed, no new time: no single stamped entry.
        assert_eq!(author(Some(&before), &after, &leader), Author::Unknown);
        let stamped = managed(json!([
            {"manager": "virt-controller", "time": "2026-12-01T08:00:02Z", "fieldsV1": {"a": 2}},
            {"manager": "sim-nodes", "time": "2026-12-01T08:00:01Z", "fieldsV1": {}}]));
        assert_eq!(author(Some(&before), &stamped, &leader), Author::Leader);
        let by_node = managed(json!([
            {"manager": "virt-controller", "time": "2026-12-01T08:00:01Z", "fieldsV1": {"a": 1}},
            {"manager": "sim-nodes", "time": "2026-12-01T08:00:02Z", "fieldsV1": {"b": 1}}]));
        assert_eq!(author(Some(&before), &by_node, &leader), Author::Other);
        assert_eq!(
            author(None, &json!({"metadata": {}}), &leader),
            Author::Unknown
        );
    }

    fn vm(strategy: &str, status: Value) -> Value {
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a", "namespace": "ns", "uid": "vm-uid",
                "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
                "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                    "kubevirt.io/storage-observed-api-version": "v1"}},
            "spec": {"runStrategy": strategy, "template": {"spec": {"domain": {"devices": {},
                "resources": {"requests": {"memory": "128Mi"}}}}}},
            "status": status})
    }

    #[test]
    fn a_write_our_decision_makes_agrees_and_an_unattributed_other_one_is_ignored() {
        let mut t = Tracker::new(Mirror::default(), vec![], None);
        let before = vm("Halted", json!({}));
        t.mirror
            .set(Kind::VirtualMachine, "ns/a", Some(before.clone()));
        let ours = t.mirror.decide("ns/a", Utc::now()).expect("decides");
        let status = ours
            .iter()
            .find(|w| w.action == "UpdateVmStatus")
            .and_then(|w| w.apply(Some(&before)).ok().flatten())
            .expect("our decision writes the VM status");
        t.observe(
            Change {
                kind: Kind::VirtualMachine,
                key: "ns/a".into(),
                object: Some(status),
            },
            Utc::now(),
        );
        assert_eq!(t.records.len(), 1);
        assert_eq!(t.records[0].verdict, Verdict::Agree);
        // A label a user adds: no author, nothing of ours: not counted.
        let mut labelled = t.mirror.get(Kind::VirtualMachine, "ns/a").cloned().unwrap();
        labelled["metadata"]["labels"] = json!({"team": "x"});
        t.observe(
            Change {
                kind: Kind::VirtualMachine,
                key: "ns/a".into(),
                object: Some(labelled),
            },
            Utc::now(),
        );
        t.finish();
        assert_eq!(t.records.len(), 1);
    }

    #[test]
    fn a_perturbed_decision_differs_at_its_path() {
        let p = Perturbation {
            kind: Kind::VirtualMachine,
            pointer: "/status/printableStatus".into(),
            value: json!("Perturbed"),
        };
        let leader = vec!["virt-controller".to_string()];
        let mut t = Tracker::new(Mirror::default(), leader, Some(p));
        let before = vm("Halted", json!({}));
        t.mirror
            .set(Kind::VirtualMachine, "ns/a", Some(before.clone()));
        let ours = t.mirror.decide("ns/a", Utc::now()).expect("decides");
        let status = ours
            .iter()
            .find(|w| w.action == "UpdateVmStatus")
            .and_then(|w| w.apply(Some(&before)).ok().flatten())
            .expect("status");
        // The leader's write, as the API server stamps it.
        let mut status = status;
        status["metadata"]["managedFields"] = json!([{"manager": "virt-controller",
            "operation": "Update", "subresource": "status", "time": "2026-12-01T08:00:01Z"}]);
        t.observe(
            Change {
                kind: Kind::VirtualMachine,
                key: "ns/a".into(),
                object: Some(status),
            },
            Utc::now(),
        );
        t.finish();
        assert_eq!(t.records.len(), 1);
        let r = &t.records[0];
        assert_eq!(r.verdict, Verdict::Differ);
        assert_eq!(r.paths[0].path, "status.printableStatus");
        assert_eq!(r.paths[0].ours, Some(json!("Perturbed")));
        assert_eq!(r.paths[0].theirs, Some(json!("Stopped")));
        assert!(
            !r.state_before.is_empty(),
            "a reproduction has the VM as it was"
        );
    }
    /// The VMI's watch event can come before its VM's: the reproduction of the VMI's creation
    /// still holds the VM (taken when it arrives), and not the created VMI.
    #[test]
    fn a_write_seen_before_its_vm_gets_the_vm_in_its_reproduction() {
        let mut t = Tracker::new(Mirror::default(), vec![], None);
        let vmi = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "a", "namespace": "ns", "uid": "vmi-uid",
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "a", "uid": "vm-uid", "controller": true}]},
            "spec": {"domain": {"devices": {}}}});
        t.observe(
            Change {
                kind: Kind::VirtualMachineInstance,
                key: "ns/a".into(),
                object: Some(vmi),
            },
            Utc::now(),
        );
        t.mirror
            .set(Kind::VirtualMachine, "ns/a", Some(vm("Always", json!({}))));
        t.finish();
        let r = t
            .records
            .iter()
            .find(|r| r.kind == Kind::VirtualMachineInstance)
            .expect("the VMI creation is recorded");
        assert_ne!(r.verdict, Verdict::Agree);
        let kinds: Vec<&Value> = r.state_before.iter().map(|o| &o["kind"]).collect();
        assert_eq!(kinds, [&json!("VirtualMachine")], "{:#?}", r.state_before);
    }
    /// A start creates the ControllerRevision, then the VMI; their watches are separate, so the
    /// VMI can be seen first. The revision's creation is still decided from the state before
    /// it (the later VMI taken out by resourceVersion) and agrees.
    #[test]
    fn a_creation_seen_after_a_later_one_is_decided_without_it() {
        let mut t = Tracker::new(Mirror::default(), vec![], None);
        let vm = vm("Always", json!({}));
        t.mirror.set(Kind::VirtualMachine, "ns/a", Some(vm));
        let ours = t.mirror.decide("ns/a", Utc::now()).expect("decides");
        let created = |action: &str, rv: &str| {
            let mut obj = ours
                .iter()
                .find(|w| w.action == action)
                .and_then(|w| w.apply(None).ok().flatten())
                .unwrap_or_else(|| panic!("our start has {action}"));
            obj["metadata"]["resourceVersion"] = json!(rv);
            if obj["metadata"]["name"].is_null() {
                obj["metadata"]["name"] = obj["metadata"]["generateName"].clone();
            }
            obj
        };
        let revision = created("CreateControllerRevision", "10");
        let vmi = created("CreateVmi", "11");
        let observe = |t: &mut Tracker, kind: Kind, obj: Value| {
            let key = crate::shadow::mirror::key_of(&obj);
            let change = Change {
                kind,
                key,
                object: Some(obj),
            };
            t.observe(change, Utc::now());
        };
        observe(&mut t, Kind::VirtualMachineInstance, vmi);
        // The VM status written once the VMI exists: a decision from a state with the VMI,
        // which no longer creates the revision.
        let now_vm = t.mirror.get(Kind::VirtualMachine, "ns/a").cloned().unwrap();
        let mut status = t
            .mirror
            .decide("ns/a", Utc::now())
            .expect("decides")
            .iter()
            .find(|w| w.action == "UpdateVmStatus")
            .and_then(|w| w.apply(Some(&now_vm)).ok().flatten())
            .expect("a VM status write with the VMI");
        status["metadata"]["resourceVersion"] = json!("12");
        observe(&mut t, Kind::VirtualMachine, status);
        observe(&mut t, Kind::ControllerRevision, revision);
        t.finish();
        let r = t
            .records
            .iter()
            .find(|r| r.kind == Kind::ControllerRevision)
            .expect("the revision's creation is recorded");
        assert!(
            matches!(r.verdict, Verdict::Agree | Verdict::AgreeLater),
            "{:?} {:?}",
            r.verdict,
            r.paths
        );
    }

    /// Our own writes for a start of VM `ns/a`: the revision (resourceVersion 10), the VMI
    /// (11), the VMI marked `Pending` (12) and the launcher pod (13), each as our decision from
    /// the state before it writes it. The tracker has seen none of them.
    fn start_writes() -> (Tracker, [Value; 4]) {
        let mut t = Tracker::new(Mirror::default(), vec![], None);
        t.mirror
            .set(Kind::VirtualMachine, "ns/a", Some(vm("Always", json!({}))));
        let named = |mut obj: Value, rv: &str| {
            obj["metadata"]["resourceVersion"] = json!(rv);
            if obj["metadata"]["name"].is_null() {
                let name = format!("{}x1", obj["metadata"]["generateName"].as_str().unwrap());
                obj["metadata"]["name"] = json!(name);
            }
            obj
        };
        // Our decision's `action`, applied to `before` (`None`: a creation).
        let write = |m: &Mirror, action: &str, before: Option<&Value>| {
            let list = m.decide("ns/a", Utc::now()).expect("decides");
            let found = list.iter().find(|w| w.action == action);
            let names: Vec<&str> = list.iter().map(|w| w.action).collect();
            found
                .and_then(|w| w.apply(before).ok().flatten())
                .unwrap_or_else(|| panic!("our decision has {action}: {names:?}"))
        };
        let mut m = t.mirror.clone();
        let revision = named(write(&m, "CreateControllerRevision", None), "10");
        m.set(
            Kind::ControllerRevision,
            &key_of(&revision),
            Some(revision.clone()),
        );
        let vmi = named(write(&m, "CreateVmi", None), "11");
        m.set(Kind::VirtualMachineInstance, "ns/a", Some(vmi.clone()));
        let pending = named(write(&m, "UpdateVmi", Some(&vmi)), "12");
        m.set(Kind::VirtualMachineInstance, "ns/a", Some(pending.clone()));
        let pod = named(write(&m, "CreatePod", None), "13");
        (t, [revision, vmi, pending, pod])
    }

    fn observe(t: &mut Tracker, kind: Kind, obj: Value) {
        let key = key_of(&obj);
        let object = Some(obj);
        t.observe(Change { kind, key, object }, Utc::now());
    }

    /// The record of the pod's creation.
    fn pod_record(t: &Tracker) -> &Record {
        let found = t.records.iter().find(|r| r.kind == Kind::Pod);
        found.expect("the pod's creation is recorded")
    }

    /// The VMI controller creates the launcher pod of a `Pending` VMI, then marks the VMI
    /// `Scheduled`; the pod and VMI watches are separate, so the VMI's update can be seen
    /// first. The pod's creation is decided from the VMI as it was then, and agrees (with the
    /// VMI as seen, `Scheduled` and no pod, no decision creates a pod: it was
    /// `we-would-not-write` on restarts under `shadow`).
    #[test]
    fn a_pod_creation_seen_after_its_vmis_later_update_is_decided_from_the_vmi_before_it() {
        let (mut t, [revision, vmi, pending, pod]) = start_writes();
        observe(&mut t, Kind::ControllerRevision, revision);
        observe(&mut t, Kind::VirtualMachineInstance, vmi);
        observe(&mut t, Kind::VirtualMachineInstance, pending.clone());
        let mut scheduled = pending;
        scheduled["metadata"]["resourceVersion"] = json!("14");
        scheduled["status"]["phase"] = json!("Scheduled");
        scheduled["status"]["nodeName"] = json!("node-1");
        scheduled["status"]["activePods"] = json!({"pod-uid": "node-1"});
        observe(&mut t, Kind::VirtualMachineInstance, scheduled);
        observe(&mut t, Kind::Pod, pod);
        t.finish();
        let r = pod_record(&t);
        assert!(
            matches!(r.verdict, Verdict::Agree | Verdict::AgreeLater),
            "{:?} {:?}",
            r.verdict,
            r.paths
        );
    }

    /// The VMs' watch is behind the others (in a bulk start it carries about ten times the
    /// revisions' changes): a revision arrives before the VM it was made from, and the VMI's
    /// updates after it, while the VMs' watch, active, has delivered resourceVersion 3. The
    /// tracker after a `LATER_WAIT`, and the VM it has not seen.
    fn revision_before_its_vm() -> (Tracker, Value, DateTime<Utc>) {
        let (mut t, [revision, vmi, pending, _]) = start_writes();
        let mut vm = t.mirror.get(Kind::VirtualMachine, "ns/a").unwrap().clone();
        vm["metadata"]["resourceVersion"] = json!("9");
        t.mirror.set(Kind::VirtualMachine, "ns/a", None);
        let later = Utc::now() + chrono::TimeDelta::seconds(6);
        t.delivered(Kind::VirtualMachine, 3, later);
        observe(&mut t, Kind::ControllerRevision, revision);
        observe(&mut t, Kind::VirtualMachineInstance, vmi);
        for rv in 12..12 + u64::from(LATER_TRIES) * 2 {
            let mut update = pending.clone();
            update["metadata"]["resourceVersion"] = json!(rv.to_string());
            update["metadata"]["annotations"]["update"] = json!(rv.to_string());
            observe(&mut t, Kind::VirtualMachineInstance, update);
        }
        t.settle_held(later);
        (t, vm, later)
    }

    /// While an active watch has not reached a held write's resourceVersion, the write waits,
    /// however many changes and seconds pass; the VM then makes the revision agree. It was
    /// `we-would-not-write` for 380 of 1,000 VMs started at once.
    #[test]
    fn a_write_waits_while_an_active_watch_is_behind_it() {
        let (mut t, vm, _) = revision_before_its_vm();
        let waits = t
            .held
            .iter()
            .any(|h| h.record.kind == Kind::ControllerRevision);
        assert!(waits, "the revision still waits for its VM");
        observe(&mut t, Kind::VirtualMachine, vm);
        t.finish();
        let r = t
            .records
            .iter()
            .find(|r| r.kind == Kind::ControllerRevision);
        assert_eq!(r.map(|r| r.verdict), Some(Verdict::AgreeLater));
    }

    /// A comparison that ends while a watch is behind a held write leaves the write out and
    /// says so, instead of calling it a difference.
    #[test]
    fn a_write_a_watch_is_behind_at_the_end_is_left_out_and_said() {
        let (mut t, _, later) = revision_before_its_vm();
        t.leave_out_behind(later);
        t.finish();
        let revision = t
            .records
            .iter()
            .find(|r| r.kind == Kind::ControllerRevision);
        assert!(revision.is_none(), "{revision:?}");
        assert!(
            t.errors[0].contains("writes not compared"),
            "{:?}",
            t.errors
        );
    }

    /// The history keeps what a write still to come or still held may be taken back over, and
    /// forgets the rest: nothing while the VMs' watch is at 3; once it is at 40, the changes
    /// up to the held revision's resourceVersion, 10; the held writes settled, all of them.
    #[test]
    fn the_history_forgets_what_no_write_to_come_or_held_can_need() {
        let (mut t, _, later) = revision_before_its_vm();
        let rvs =
            |t: &Tracker| -> Vec<u64> { t.history.values().flatten().map(|p| p.rv).collect() };
        t.forget_history(later);
        assert_eq!(rvs(&t).first(), Some(&10), "{:?}", rvs(&t));
        t.delivered(Kind::VirtualMachine, 40, later);
        t.forget_history(later);
        assert_eq!(rvs(&t).first(), Some(&11), "{:?}", rvs(&t));
        t.finish();
        t.forget_history(later);
        assert!(t.history.is_empty(), "{:?}", rvs(&t));
        let mut audit = revision_before_its_vm().0;
        audit.look_back = true;
        audit.finish();
        audit.forget_history(later + chrono::TimeDelta::seconds(60));
        assert!(
            !audit.history.is_empty(),
            "an audit log's history is looked back over"
        );
    }

    /// A created pod's own updates (the kubelet's) arrive fast; they tell nothing about what
    /// the leader saw, so they do not use up the tries of its creation waiting for the VMI.
    #[test]
    fn a_created_objects_own_updates_do_not_use_up_its_later_tries() {
        let (mut t, [revision, vmi, pending, pod]) = start_writes();
        observe(&mut t, Kind::ControllerRevision, revision);
        observe(&mut t, Kind::Pod, pod.clone());
        for rv in 0..u64::from(LATER_TRIES) * 2 {
            let mut update = pod.clone();
            update["metadata"]["resourceVersion"] = json!((20 + rv).to_string());
            update["metadata"]["annotations"]["update"] = json!(rv.to_string());
            observe(&mut t, Kind::Pod, update);
        }
        assert_eq!(t.held(), 1, "the creation still waits for its VMI");
        observe(&mut t, Kind::VirtualMachineInstance, vmi);
        observe(&mut t, Kind::VirtualMachineInstance, pending);
        t.finish();
        assert_eq!(pod_record(&t).verdict, Verdict::AgreeLater);
    }

    /// `shadow --for`: a write held when the window closes still gets its later tries from the
    /// changes that follow (here the VMI its pod was created for, seen after the pod), while
    /// writes after the window are not compared.
    #[test]
    fn a_write_held_when_the_window_closes_still_gets_its_later_tries() {
        let (mut t, [revision, vmi, pending, pod]) = start_writes();
        observe(&mut t, Kind::ControllerRevision, revision);
        observe(&mut t, Kind::Pod, pod);
        assert_eq!(t.held(), 1, "no VMI yet: the pod's creation waits");
        t.closing = true;
        observe(&mut t, Kind::VirtualMachineInstance, vmi);
        observe(&mut t, Kind::VirtualMachineInstance, pending);
        t.finish();
        assert_eq!(pod_record(&t).verdict, Verdict::AgreeLater);
        let kinds: Vec<Kind> = t.records.iter().map(|r| r.kind).collect();
        assert_eq!(
            kinds,
            [Kind::ControllerRevision, Kind::Pod],
            "the VMI's writes came after"
        );
    }
}
