//! A Kubernetes audit log (`audit.k8s.io/v1` `Event`s, `RequestResponse` level for the kinds
//! the decisions read) fed to the shadow's [`Tracker`]: the cluster state is rebuilt write by
//! write from each answered object (`responseObject`; a deletion removes it), and each write of
//! the controller is compared with our decision from the state just before it, as `shadow`
//! compares a live leader's writes. `replay` runs it after the fact (docs/replay.md).
//!
//! Whose write: the user (username and user agent) who last wrote the controller Lease with a
//! holder is the controller, unless the caller names one (`--controller-user`).

use super::mirror::vm_key;
use super::mirror::{Mirror, StorageObjects};
use super::predict::Kind;
use super::predict::Part;
use super::tracker::{Author, Change, Record, Refusal, Tracker, as_write};
use super::{ShadowReport, ShadowRun};
use crate::config::ClusterSettings;
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::Value;
use std::collections::BTreeMap;

/// What an audited write is to the replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Compared(Kind),
    Claim,
    Lease,
    KubeVirt,
    /// A StorageClass, StorageProfile or VolumeSnapshotClass (the VM's
    /// `status.volumeSnapshotStatuses` reads them).
    Storage(Storage),
}

/// The storage kinds the VM controller reads for `status.volumeSnapshotStatuses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Storage {
    Class,
    Profile,
    SnapshotClass,
}

impl Storage {
    fn kind(self) -> &'static str {
        match self {
            Storage::Class => "StorageClass",
            Storage::Profile => "StorageProfile",
            Storage::SnapshotClass => "VolumeSnapshotClass",
        }
    }
}

/// The resource an event's `objectRef` names, when the replay rebuilds it.
fn target(group: &str, resource: &str) -> Option<Target> {
    Some(match (group, resource) {
        ("kubevirt.io", "virtualmachines") => Target::Compared(Kind::VirtualMachine),
        ("kubevirt.io", "virtualmachineinstances") => {
            Target::Compared(Kind::VirtualMachineInstance)
        }
        ("kubevirt.io", "kubevirts") => Target::KubeVirt,
        ("", "pods") => Target::Compared(Kind::Pod),
        ("apps", "controllerrevisions") => Target::Compared(Kind::ControllerRevision),
        ("cdi.kubevirt.io", "datavolumes") => Target::Compared(Kind::DataVolume),
        ("", "persistentvolumeclaims") => Target::Claim,
        ("coordination.k8s.io", "leases") => Target::Lease,
        ("storage.k8s.io", "storageclasses") => Target::Storage(Storage::Class),
        ("cdi.kubevirt.io", "storageprofiles") => Target::Storage(Storage::Profile),
        ("snapshot.storage.k8s.io", "volumesnapshotclasses") => {
            Target::Storage(Storage::SnapshotClass)
        }
        _ => return None,
    })
}

/// Who sent a request: username and user agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct User {
    pub username: String,
    pub user_agent: String,
}

impl std::fmt::Display for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.username, self.user_agent)
    }
}

/// One audited write of a rebuilt kind.
struct Audited<'a> {
    at: DateTime<Utc>,
    verb: &'a str,
    subresource: &'a str,
    target: Target,
    key: String,
    code: u64,
    user: User,
    answer: Option<&'a Value>,
    /// The event: the request object and the answer's `responseStatus` are read from it.
    event: &'a Value,
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The write `event` records, `None` for reads, other stages and kinds not rebuilt.
fn audited(event: &Value) -> Option<Audited<'_>> {
    let verb = str_at(event, "/verb");
    if !matches!(verb, "create" | "update" | "patch" | "delete")
        || str_at(event, "/stage") != "ResponseComplete"
    {
        return None;
    }
    let target = target(
        str_at(event, "/objectRef/apiGroup"),
        str_at(event, "/objectRef/resource"),
    )?;
    let mut answer = event.get("responseObject");
    if str_at(event, "/objectRef/subresource") == "binding" {
        // A binding answers a `Status`; what it changes is in the request.
        answer = event.get("requestObject");
    }
    let mut name = str_at(event, "/objectRef/name");
    if name.is_empty() {
        name = answer.map_or("", |a| str_at(a, "/metadata/name"));
    }
    let at = ["/stageTimestamp", "/requestReceivedTimestamp"]
        .iter()
        .find_map(|p| DateTime::parse_from_rfc3339(str_at(event, p)).ok())?
        .with_timezone(&Utc);
    Some(Audited {
        at,
        verb,
        subresource: str_at(event, "/objectRef/subresource"),
        target,
        key: format!("{}/{name}", str_at(event, "/objectRef/namespace")),
        code: event
            .pointer("/responseStatus/code")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        user: User {
            username: str_at(event, "/user/username").to_string(),
            user_agent: str_at(event, "/userAgent").to_string(),
        },
        answer,
        event,
    })
}

/// A write of the controller the server refused, as the replay saw it.
#[derive(Debug, Clone)]
pub(crate) struct RefusedWrite {
    /// The VM key whose reconcile made it.
    pub vm_key: String,
    /// When the server answered.
    pub at: DateTime<Utc>,
    /// The audit event's index in the log.
    pub event: usize,
    /// The verb (`create`, `update`, `patch`, `delete`).
    pub verb: String,
    /// The object's kind.
    pub kind: Kind,
    /// Its `namespace/name` (no name: a creation whose name the server was to generate).
    pub key: String,
    /// The error, from the event's `responseStatus`.
    pub error: crate::controller::common::ApiFailure,
    /// Whether one of our actions makes the refused write (then the rest of its reconcile was
    /// decided from the error).
    pub ours: bool,
}

/// What a successful write left: `Ok(Some(object))`, `Ok(None)` when the object is gone
/// (a deletion that completed: a `Status`, or the object marked deleted with no finalizer and
/// no grace period left), `Err` when the event holds no object (not `RequestResponse` level).
fn left(a: &Audited<'_>, kind: &str) -> Result<Option<Value>, ()> {
    let Some(obj) = a.answer.filter(|o| o["kind"] == kind) else {
        return if a.verb == "delete" {
            Ok(None)
        } else {
            Err(())
        };
    };
    let meta = &obj["metadata"];
    let marked = meta.get("deletionTimestamp").is_some_and(|t| !t.is_null());
    let finalizers = meta
        .get("finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    let grace = meta
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if marked && !finalizers && grace == 0 {
        return Ok(None);
    }
    Ok(Some(obj.clone()))
}

/// Bind `pod` as kube-apiserver binds it ([`crate::sim::object::bind_pod`]: `spec.nodeName` the
/// Binding's `target.name`, its annotations, `PodScheduled=True` at the binding's time, kept in
/// the logged Binding as `stageTimestamp`).
fn bind(pod: &mut Value, binding: &Value) {
    let node = str_at(binding, "/target/name");
    let annotations = binding.pointer("/metadata/annotations");
    let at = str_at(binding, "/stageTimestamp");
    crate::sim::object::bind_pod(pod, node, annotations, at);
}

/// `metadata.resourceVersion` as a number.
fn rv(obj: &Value) -> Option<u64> {
    str_at(obj, "/metadata/resourceVersion").parse().ok()
}

/// An audit log replayed through the shadow.
pub(crate) struct AuditRun {
    /// The shadow's summary and classified writes.
    pub run: ShadowRun,
    /// Writes of rebuilt kinds read.
    pub writes: usize,
    /// The users taken as the controller, in the order they took over.
    pub controllers: Vec<User>,
    /// The controller's writes the server refused (not compared: they changed nothing).
    pub failed: usize,
    /// Writes whose event holds no object (logged below `RequestResponse`): not rebuilt.
    pub without_object: usize,
    /// The controller's writes not compared: they left the object as it was, deleted one
    /// already being deleted, wrote an object of no VM, or were logged after a newer write of
    /// the same object.
    pub uncompared: usize,
    /// The first VMI created came back without virt-api's finalizer: the cluster has no
    /// virt-api, and our decisions add it as the controller then does.
    pub without_virt_api: bool,
    /// The controller's refused writes of a VM key, in log order.
    pub refused: Vec<RefusedWrite>,
    /// For each change the tracker observed (its [`Record::change`] less one), the index of
    /// the audit event that made it.
    pub changes: Vec<usize>,
}

/// How the controller's writes are told apart.
pub(crate) struct AuditOptions<'a> {
    /// The controller Lease, `namespace/name`.
    pub lease: &'a str,
    /// A username or user-agent prefix naming the controller; `None`: the Lease holder's.
    pub controller: Option<&'a str>,
    /// The settings the decisions render with until a KubeVirt CR is written.
    pub settings: ClusterSettings,
}

struct Replayer<'a> {
    opts: &'a AuditOptions<'a>,
    tracker: Tracker,
    out: AuditRun,
    /// Whether the first VMI created came back with virt-api's finalizer (`None`: none seen).
    virt_api: Option<bool>,
    /// The `pods/binding` requests logged, by pod key.
    bindings: BTreeMap<String, Value>,
}

impl Replayer<'_> {
    fn is_controller(&self, user: &User) -> bool {
        match self.opts.controller {
            Some(c) => user.username == c || user.user_agent.starts_with(c),
            None => self.out.controllers.last() == Some(user),
        }
    }

    fn lease(&mut self, a: &Audited<'_>) {
        let holder = a.answer.map_or("", |o| str_at(o, "/spec/holderIdentity"));
        if a.key == self.opts.lease
            && !holder.is_empty()
            && self.out.controllers.last() != Some(&a.user)
        {
            self.out.controllers.push(a.user.clone());
        }
    }

    /// The first VMI created tells whether the cluster runs virt-api: its VMI mutator adds
    /// `kubevirt.io/foregroundDeleteVirtualMachine` to every VMI created (KubeVirt v1.9.0
    /// pkg/virt-api/webhooks/mutating-webhook/mutators/vmi-mutator.go:127-128). Without it the
    /// controller adds the finalizer itself (`run-controller --without-virt-api`, as on a bare
    /// kube-apiserver), and our decision must too.
    fn saw_created_vmi(&mut self, vmi: &Value) {
        if self.virt_api.is_some() {
            return;
        }
        let finalizers = vmi
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array);
        let mutated = finalizers.is_some_and(|f| {
            f.iter().any(|x| {
                x == crate::api::finalizers::FOREGROUND_DELETE_VM
                    || x == crate::api::finalizers::LEGACY_FOREGROUND_DELETE_VM
            })
        });
        self.virt_api = Some(mutated);
        if !mutated {
            self.tracker.mirror.settings.without_virt_api = true;
            self.out.without_virt_api = true;
        }
    }

    /// The pod a `pods/binding` left: the current one bound as kube-apiserver binds it
    /// ([`crate::sim::object::bind_pod`]: `spec.nodeName` the Binding's `target.name`, its
    /// annotations, `PodScheduled=True` at the event's time); the server's answer is a `Status`.
    fn bound(&mut self, a: &Audited<'_>) -> Option<Value> {
        let mut pod = self.tracker.mirror.get(Kind::Pod, &a.key)?.clone();
        let binding = a.answer?.clone();
        let mut at = binding.clone();
        at["stageTimestamp"] = Value::String(a.at.to_rfc3339_opts(SecondsFormat::Secs, true));
        bind(&mut pod, &at);
        self.bindings.insert(a.key.clone(), at);
        Some(pod)
    }

    /// A pod answer without `spec.nodeName` after the pod's binding was logged: that write was
    /// made before the binding (a bound pod's node never changes; the two answers raced to the
    /// log), so the binding is applied to it as well, leaving the pod as the server holds it
    /// after both. Before, the answer took the binding back out, and the readiness patch of a
    /// launcher pod logged after its binding was compared with an unbound pod
    /// (`we-would-not-write`: a patch of the pod's spec, not of its status).
    fn with_binding(&self, key: &str, mut pod: Value) -> Value {
        if str_at(&pod, "/spec/nodeName").is_empty()
            && let Some(b) = self.bindings.get(key)
        {
            bind(&mut pod, b);
        }
        pod
    }

    /// The controller's write `a` of `kind` was refused: the tracker decides the rest of its
    /// reconcile from the error (a creation's object, for its name or its owner, from the
    /// request the log holds).
    fn refused(&mut self, a: &Audited<'_>, kind: Kind, index: usize) {
        let request = a
            .event
            .get("requestObject")
            .filter(|o| o["kind"] == kind.as_str());
        let mut key = a.key.clone();
        if key.ends_with('/') {
            key.push_str(request.map_or("", |o| str_at(o, "/metadata/name")));
        }
        let held = self.tracker.mirror.get(kind, &key);
        let Some(vm_key) = held.or(request).and_then(|o| vm_key(kind, o)) else {
            return;
        };
        let error = crate::controller::common::ApiFailure {
            code: u16::try_from(a.code).unwrap_or(0),
            reason: str_at(a.event, "/responseStatus/reason").to_string(),
            message: str_at(a.event, "/responseStatus/message").to_string(),
        };
        let refusal = Refusal {
            kind,
            key: key.clone(),
            part: if a.subresource == "status" {
                Part::Status
            } else {
                Part::Main
            },
            creation: a.verb == "create",
            deletion: a.verb == "delete",
            patch: a.verb == "patch",
            request: request.filter(|_| a.verb == "create").cloned(),
            error: error.clone(),
        };
        let ours = self.tracker.refused(&vm_key, &refusal, a.at);
        self.out.refused.push(RefusedWrite {
            vm_key,
            at: a.at,
            event: index,
            verb: a.verb.to_string(),
            kind,
            key,
            error,
            ours,
        });
    }

    fn feed(&mut self, a: &Audited<'_>, index: usize) {
        self.out.writes += 1;
        let ok = (200..300).contains(&a.code);
        let leader = self.is_controller(&a.user);
        if !ok {
            if let (true, Target::Compared(kind)) = (leader, a.target) {
                self.out.failed += 1;
                self.refused(a, kind, index);
            }
            return;
        }
        if a.target == Target::Lease {
            return self.lease(a);
        }
        let kind = match a.target {
            Target::Compared(k) => k.as_str(),
            Target::Claim => "PersistentVolumeClaim",
            Target::Storage(s) => s.kind(),
            _ => "KubeVirt",
        };
        let obj = if a.subresource == "binding" {
            Ok(self.bound(a))
        } else {
            left(a, kind)
        };
        let Ok(mut obj) = obj else {
            self.out.without_object += 1;
            return;
        };
        if a.target == Target::Compared(Kind::Pod) {
            obj = obj.map(|o| self.with_binding(&a.key, o));
            if obj.is_none() {
                self.bindings.remove(&a.key);
            }
        }
        if let (Target::Compared(Kind::VirtualMachineInstance), "create", Some(o)) =
            (a.target, a.verb, &obj)
        {
            self.saw_created_vmi(o);
        }
        let mirror = &mut self.tracker.mirror;
        match a.target {
            Target::Compared(k) => {
                // A line written after a newer one of the same object (answers race to the log).
                let older = match (
                    mirror.get(k, &a.key).and_then(rv),
                    obj.as_ref().and_then(rv),
                ) {
                    (Some(cur), Some(new)) => new < cur,
                    _ => false,
                };
                let before = mirror.get(k, &a.key);
                let owner = obj.as_ref().or(before).and_then(|o| vm_key(k, o));
                if leader && (older || owner.is_none() || as_write(before, obj.as_ref()).is_none())
                {
                    self.out.uncompared += 1;
                }
                if older {
                    return;
                }
                let author = if leader {
                    Author::Leader
                } else {
                    Author::Other
                };
                let change = Change {
                    kind: k,
                    key: a.key.clone(),
                    object: obj,
                };
                self.out.changes.push(index);
                self.tracker.observe_by(change, Some(author), a.at);
            }
            Target::Claim => mirror.set_pvc(&a.key, obj),
            Target::Storage(s) => {
                let stored = mirror.storage.get_or_insert_with(Default::default);
                let map = match s {
                    Storage::Class => &mut stored.storage_classes,
                    Storage::Profile => &mut stored.storage_profiles,
                    Storage::SnapshotClass => &mut stored.snapshot_classes,
                };
                // Cluster-scoped: the key is `/NAME`.
                let name = a.key.trim_start_matches('/').to_string();
                match obj {
                    Some(o) => map.insert(name, o),
                    None => map.remove(&name),
                };
            }
            _ => {
                if let Some(s) = obj.and_then(|o| self.opts.settings.with_kubevirt_cr(&o).ok()) {
                    mirror.settings = s;
                    mirror.settings.without_virt_api |= self.out.without_virt_api;
                }
            }
        }
    }
}

/// How many lines after a line the lines read before it are looked for ([`server_order`]).
const AHEAD: usize = 64;

/// A successful write's answer: (resource, namespace, name, resourceVersion).
fn version(e: &Value) -> Option<(&str, &str, &str, u64)> {
    let answer = e.get("responseObject")?;
    let written = matches!(str_at(e, "/verb"), "create" | "update" | "patch");
    let rv = str_at(answer, "/metadata/resourceVersion").parse().ok()?;
    (written && succeeded(e)).then(|| {
        (
            str_at(e, "/objectRef/resource"),
            str_at(answer, "/metadata/namespace"),
            str_at(answer, "/metadata/name"),
            rv,
        )
    })
}

/// The pod a `pods/binding` line binds: (resource, namespace, name) as [`version`] names it.
fn bound(binding: &Value) -> (&str, &str, &str) {
    let at = |p: &str| str_at(binding, p);
    ("pods", at("/objectRef/namespace"), at("/objectRef/name"))
}

fn succeeded(e: &Value) -> bool {
    let code = e.pointer("/responseStatus/code").and_then(Value::as_u64);
    code.is_some_and(|c| (200..300).contains(&c))
}

/// Whether line `later`, logged after line `line`, shows the server made its change before
/// `line`'s (the log is written as answers are sent, not as the store applies writes, so two
/// answers race to it):
/// - both are answers of one object, `later`'s at an older resourceVersion (the store applies
///   one object's writes in resourceVersion order; the newer answer holds `later`'s change
///   too: a VMI's finalizer patch answered with the status the VMI controller wrote just
///   before, logged after it);
/// - both at the same resourceVersion, `later` received first: `line` changed nothing and was
///   answered with the version `later` made (a launcher pod's readiness patch, already
///   applied, answered with the kubelet's status update logged after it);
/// - `line` is a refused write and `later` a successful one answered before `line` was
///   received: the refused write was decided on a cache that may hold `later`'s change (the
///   VM controller's VMI creation, refused, logged before the old VMI's last finalizer
///   removal it followed);
/// - `line` binds a pod that `later` creates (the scheduler bound the launcher pod it saw
///   created before the creation's answer was logged), or `later` binds the pod `line`
///   answered bound already (a pod is bound once: the controller's readiness patch applied
///   after the binding, logged before it).
fn made_before(line: &Value, later: &Value) -> bool {
    let time = |e: &Value, pointer: &str| DateTime::parse_from_rfc3339(str_at(e, pointer)).ok();
    let stamp = |e: &Value| time(e, "/stageTimestamp");
    let binding = |e: &Value| str_at(e, "/objectRef/subresource") == "binding" && succeeded(e);
    if binding(later) {
        let answered_bound = line
            .get("responseObject")
            .is_some_and(|o| !str_at(o, "/spec/nodeName").is_empty());
        return answered_bound && version(line).is_some_and(|w| (w.0, w.1, w.2) == bound(later));
    }
    let Some(v) = version(later) else {
        return false;
    };
    if binding(line) {
        return str_at(later, "/verb") == "create" && (v.0, v.1, v.2) == bound(line);
    }
    match version(line) {
        Some(w) if (w.0, w.1, w.2) == (v.0, v.1, v.2) => {
            v.3 < w.3 || (v.3 == w.3 && stamp(later) < stamp(line) && stamp(later).is_some())
        }
        Some(_) => false,
        None => {
            let received = time(line, "/requestReceivedTimestamp").or_else(|| stamp(line));
            let refused = matches!(
                str_at(line, "/verb"),
                "create" | "update" | "patch" | "delete"
            ) && line.pointer("/responseStatus/code").is_some()
                && !succeeded(line);
            refused && stamp(later).zip(received).is_some_and(|(s, r)| s < r)
        }
    }
}

/// The order the log's lines are read in: the log's, except that a line the server made
/// before an earlier line ([`made_before`], up to [`AHEAD`] lines later) is read just before
/// the first line it precedes. Before, such a line was read after: a write answered with a
/// version it did not make was compared as a write of the other change (`we-would-not-write`,
/// `differ` at `status.conditions`), or the older line was left out, and a refused write was
/// decided on a state its controller no longer had (one write in about a third of the runs of
/// the embedded cluster with faults).
fn server_order(events: &[Value]) -> Vec<usize> {
    // Each moved line, with the line it is read before.
    let mut before: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        for (j, later) in events.iter().enumerate().skip(i + 1).take(AHEAD) {
            if !before.contains_key(&j) && made_before(e, later) {
                before.insert(j, i);
            }
        }
    }
    let mut ahead: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (&j, &i) in &before {
        ahead.entry(i).or_default().push(j);
    }
    fn read(i: usize, ahead: &BTreeMap<usize, Vec<usize>>, out: &mut Vec<usize>) {
        for &j in ahead.get(&i).into_iter().flatten() {
            read(j, ahead, out);
        }
        out.push(i);
    }
    let mut out = Vec::with_capacity(events.len());
    for i in (0..events.len()).filter(|i| !before.contains_key(i)) {
        read(i, &ahead, &mut out);
    }
    out
}

/// Replay `events` (an audit log's lines, in order) through the shadow's tracker.
pub(crate) fn replay_audit(events: &[Value], opts: &AuditOptions<'_>) -> AuditRun {
    // The log is taken to hold every storage object the controller read (none written: none
    // there), as it holds the VMs: `volumeSnapshotStatuses` are decided from them.
    let mut mirror = Mirror::new(opts.settings.clone());
    mirror.storage = Some(StorageObjects::default());
    let mut r = Replayer {
        opts,
        tracker: Tracker::new(mirror, Vec::new(), None),
        out: AuditRun {
            run: ShadowRun {
                report: ShadowReport::new(&[], 0.0, Vec::new()),
                records: Vec::new(),
            },
            writes: 0,
            controllers: Vec::new(),
            failed: 0,
            without_object: 0,
            uncompared: 0,
            without_virt_api: false,
            refused: Vec::new(),
            changes: Vec::new(),
        },
        virt_api: None,
        bindings: BTreeMap::new(),
    };
    // Every change is in the log, in order: a write made from a cache behind the server is
    // found in the states before it.
    r.tracker.look_back = true;
    let (mut first, mut last) = (None, None);
    let order = server_order(events);
    for (index, a) in order
        .into_iter()
        .filter_map(|i| Some((i, audited(&events[i])?)))
    {
        r.tracker.settle_held(a.at);
        r.feed(&a, index);
        first.get_or_insert(a.at);
        last = Some(a.at);
    }
    r.tracker.finish();
    let seconds = match (first, last) {
        (Some(f), Some(l)) => (l - f).num_milliseconds() as f64 / 1000.0,
        _ => 0.0,
    };
    let records: Vec<Record> = std::mem::take(&mut r.tracker.records);
    let errors = std::mem::take(&mut r.tracker.errors);
    r.out.run = ShadowRun {
        report: ShadowReport::new(&records, seconds, errors),
        records,
    };
    r.out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(
        verb: &str,
        ua: &str,
        resource: (&str, &str, &str),
        code: u64,
        answer: Value,
    ) -> Value {
        let (group, plural, name) = resource;
        json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete",
            "verb": verb, "userAgent": ua, "user": {"username": "u"},
            "objectRef": {"apiGroup": group, "resource": plural, "namespace": "ns", "name": name},
            "responseStatus": {"code": code}, "stageTimestamp": "2026-12-05T10:00:00.000000Z",
            "responseObject": answer})
    }

    fn lease(ua: &str, holder: &str) -> Value {
        let obj = json!({"kind": "Lease", "spec": {"holderIdentity": holder}});
        event(
            "update",
            ua,
            ("coordination.k8s.io", "leases", "ctl"),
            200,
            obj,
        )
    }

    fn vm(rv: &str, extra: Value) -> Value {
        let mut v = json!({"kind": "VirtualMachine", "apiVersion": "kubevirt.io/v1",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": rv,
                "generation": 1},
            "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}}});
        json_patch::merge(&mut v, &extra);
        v
    }

    /// The scheduler's `pods/binding` of pod `ns/NAME` to `node-1`.
    fn binding_of(name: &str) -> Value {
        let pod = ("", "pods", name);
        let mut binding = event("create", "sched", pod, 201, json!({"kind": "Status"}));
        binding["objectRef"]["subresource"] = json!("binding");
        binding["requestObject"] = json!({"kind": "Binding", "target": {"name": "node-1"}});
        binding
    }

    /// A replayer of no line yet, fed line by line.
    fn replayer<'a>(opts: &'a AuditOptions<'a>) -> Replayer<'a> {
        Replayer {
            opts,
            tracker: Tracker::new(Mirror::default(), Vec::new(), None),
            out: replay_audit(&[], opts),
            virt_api: None,
            bindings: BTreeMap::new(),
        }
    }

    fn opts<'a>() -> AuditOptions<'a> {
        AuditOptions {
            lease: "ns/ctl",
            controller: None,
            settings: ClusterSettings::default(),
        }
    }

    #[test]
    fn the_lease_holders_writes_are_compared_and_a_users_are_not() {
        let annotated = json!({"metadata": {"labels": {"x": "y"}, "annotations": {
            "kubevirt.io/latest-observed-api-version": "v1",
            "kubevirt.io/storage-observed-api-version": "v1"}}});
        let mut written = annotated;
        json_patch::merge(
            &mut written,
            &json!({"spec": {"template": {"spec": {"domain": {"resources": {}}}}}}),
        );
        let vms = ("kubevirt.io", "virtualmachines", "a");
        let events = [
            event("create", "kubectl", vms, 201, vm("1", json!({}))),
            // Before any Lease write: not the controller's.
            event(
                "update",
                "ctl/1.0",
                vms,
                200,
                vm("2", json!({"metadata": {"labels": {"x": "y"}}})),
            ),
            lease("ctl/1.0", "ctl-0"),
            // The controller's first write: the api-version annotations, as we decide (and, as
            // Go writes the VM, `domain.resources: {}`: controller::vm::go_encoding).
            event("update", "ctl/1.0", vms, 200, vm("3", written)),
            // A write we would not make: a revision of the Halted VM.
            event(
                "create",
                "ctl/1.0",
                ("apps", "controllerrevisions", "r"),
                201,
                json!({"kind": "ControllerRevision", "metadata": {"name": "r", "namespace": "ns",
                    "resourceVersion": "4", "ownerReferences": [{"kind": "VirtualMachine",
                        "name": "a", "uid": "u1", "controller": true}]}}),
            ),
            event("update", "ctl/1.0", vms, 500, json!({"kind": "Status"})),
        ];
        let run = replay_audit(&events, &opts());
        assert_eq!(run.controllers.len(), 1);
        assert_eq!(run.controllers[0].user_agent, "ctl/1.0");
        assert_eq!(run.failed, 1);
        let verdicts: Vec<_> = run
            .run
            .records
            .iter()
            .map(|r| (r.verdict, r.action))
            .collect();
        assert_eq!(
            verdicts,
            [
                (super::super::Verdict::Agree, Some("UpdateVm")),
                (super::super::Verdict::WeWouldNotWrite, None)
            ]
        );
        assert_eq!(run.run.report.decisions, 2);
    }

    /// The controller writes `volumeSnapshotStatuses` from the StorageClasses and
    /// VolumeSnapshotClasses it caches: those the log holds are fed to our decision, which then
    /// writes the same status (before, ours left the field out: `differ`).
    #[test]
    fn the_logs_storage_objects_decide_the_volume_snapshot_statuses() {
        let claim = json!({"metadata": {"labels": {"x": "y"},
            "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"},
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]},
            "spec": {"template": {"spec": {"volumes": [
                {"name": "disk", "persistentVolumeClaim": {"claimName": "c"}}]}}}});
        let cluster_scoped = |mut e: Value| {
            e["objectRef"]["namespace"] = Value::Null;
            e
        };
        let events = [
            lease("ctl/1.0", "ctl-0"),
            cluster_scoped(event(
                "create",
                "admin",
                ("storage.k8s.io", "storageclasses", "sc"),
                201,
                json!({"kind": "StorageClass", "apiVersion": "storage.k8s.io/v1",
                    "metadata": {"name": "sc"}, "provisioner": "csi.example"}),
            )),
            cluster_scoped(event(
                "create",
                "admin",
                ("snapshot.storage.k8s.io", "volumesnapshotclasses", "snap"),
                201,
                json!({"kind": "VolumeSnapshotClass", "metadata": {"name": "snap"},
                    "driver": "csi.example", "deletionPolicy": "Delete"}),
            )),
            event(
                "create",
                "admin",
                ("", "persistentvolumeclaims", "c"),
                201,
                json!({"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                    "metadata": {"name": "c", "namespace": "ns", "resourceVersion": "2"},
                    "spec": {"storageClassName": "sc"}}),
            ),
            event(
                "create",
                "kubectl",
                ("kubevirt.io", "virtualmachines", "a"),
                201,
                vm("3", claim),
            ),
        ];
        let mut run = Replayer {
            opts: &opts(),
            tracker: Tracker::new(Mirror::default(), Vec::new(), None),
            out: replay_audit(&[], &opts()),
            virt_api: None,
            bindings: BTreeMap::new(),
        };
        run.tracker.mirror.storage = Some(StorageObjects::default());
        for e in &events {
            run.feed(&audited(e).unwrap(), 0);
        }
        let before = run
            .tracker
            .mirror
            .get(Kind::VirtualMachine, "ns/a")
            .cloned();
        let ours = run.tracker.mirror.decide("ns/a", Utc::now()).unwrap();
        let mut status = ours
            .iter()
            .find(|w| w.action == "UpdateVmStatus")
            .and_then(|w| w.apply(before.as_ref()).ok().flatten())
            .expect("a status write");
        assert_eq!(
            status["status"]["volumeSnapshotStatuses"],
            json!([{"name": "disk", "enabled": true}])
        );
        status["metadata"]["resourceVersion"] = json!("4");
        let mut log = events.to_vec();
        log.push(event(
            "update",
            "ctl/1.0",
            ("kubevirt.io", "virtualmachines", "a"),
            200,
            status,
        ));
        let replayed = replay_audit(&log, &opts());
        let verdicts: Vec<_> = replayed.run.records.iter().map(|r| r.verdict).collect();
        assert_eq!(verdicts, [super::super::Verdict::Agree]);
    }

    /// On a cluster without virt-api (a bare kube-apiserver) the controller adds the VMI
    /// finalizer virt-api's mutator would have; the replay sees the VMI created without it and
    /// decides the same (before: `differ` at `metadata.finalizers` on every such VMI).
    #[test]
    fn a_vmi_created_without_virt_apis_finalizer_is_decided_as_without_virt_api() {
        let vm_obj = vm(
            "2",
            json!({"metadata": {"annotations": {
                "kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"},
                "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]},
                "spec": {"runStrategy": "Always"}}),
        );
        let vmi = |rv: &str, finalizers: Value| {
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                "metadata": {"name": "a", "namespace": "ns", "uid": "vmi-uid",
                    "resourceVersion": rv, "finalizers": finalizers,
                    "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                        "kubevirt.io/storage-observed-api-version": "v1"},
                    "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                        "kind": "VirtualMachine", "name": "a", "uid": "u1", "controller": true}]},
                "spec": {"domain": {"devices": {},
                    "resources": {"requests": {"memory": "128Mi"}}}}})
        };
        let vmis = ("kubevirt.io", "virtualmachineinstances", "a");
        let verdicts = |created: Value| {
            // The controller's next VMI write, as our controller decides it without virt-api.
            let mut m = Mirror::default();
            m.settings.without_virt_api = true;
            m.set(Kind::VirtualMachine, "ns/a", Some(vm_obj.clone()));
            m.set(Kind::VirtualMachineInstance, "ns/a", Some(created.clone()));
            let mut update = m
                .decide("ns/a", Utc::now())
                .unwrap()
                .iter()
                .rfind(|w| w.action == "UpdateVmi")
                .and_then(|w| w.apply(Some(&created)).ok().flatten())
                .expect("a VMI update");
            update["metadata"]["resourceVersion"] = json!("4");
            let events = [
                lease("ctl/1.0", "ctl-0"),
                event(
                    "create",
                    "kubectl",
                    ("kubevirt.io", "virtualmachines", "a"),
                    201,
                    vm_obj.clone(),
                ),
                event("create", "ctl/1.0", vmis, 201, created),
                event("update", "ctl/1.0", vmis, 200, update),
            ];
            let run = replay_audit(&events, &opts());
            let updated = run
                .run
                .records
                .iter()
                .find(|r| r.action == Some("UpdateVmi"));
            (run.without_virt_api, updated.map(|r| r.verdict))
        };
        let plain = vmi("3", json!(["kubevirt.io/virtualMachineControllerFinalize"]));
        assert_eq!(verdicts(plain), (true, Some(super::super::Verdict::Agree)));
        // With virt-api the created VMI has the finalizer: decided as KubeVirt's controller.
        let mutated = vmi(
            "3",
            json!([
                "kubevirt.io/virtualMachineControllerFinalize",
                "kubevirt.io/foregroundDeleteVirtualMachine"
            ]),
        );
        assert!(!verdicts(mutated).0);
    }

    /// A VM `a` in namespace `ns` with runStrategy Always, as the controller has it once it
    /// added its finalizer and annotations.
    fn always_vm() -> Value {
        vm(
            "2",
            json!({"metadata": {"annotations": {
                "kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"},
                "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]},
                "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {
                    "resources": {"requests": {"memory": "128Mi"}}}}}}}),
        )
    }

    /// VM `ns/a` (`Always`) and its VMI in `phase` (virt-api's finalizer on it), as a user
    /// created them.
    fn vm_and_vmi(phase: &str) -> [(Kind, &'static str, Value); 2] {
        let vmi = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "a", "namespace": "ns", "uid": "vmi-uid", "resourceVersion": "3",
                "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"],
                "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                    "kubevirt.io/storage-observed-api-version": "v1"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "a", "uid": "u1", "controller": true}]},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}},
            "status": {"phase": phase}});
        [
            (Kind::VirtualMachine, "virtualmachines", always_vm()),
            (Kind::VirtualMachineInstance, "virtualmachineinstances", vmi),
        ]
    }

    /// The condition of `type` in `obj`'s status (`null` when it has none).
    fn condition(obj: &Value, type_: &str) -> Value {
        let conditions = obj["status"]["conditions"].as_array();
        let found = conditions.and_then(|c| c.iter().find(|c| c["type"] == type_));
        found.cloned().unwrap_or_default()
    }

    /// A log of the controller's writes of VM `ns/a` on a state a user created, some of them
    /// refused (500): each write is our decision's from the state (`mirror`, which the refused
    /// writes leave as it was), stamped 10 ms after the line before it, answered at the next
    /// resourceVersion.
    struct RefusalLog {
        mirror: Mirror,
        events: Vec<Value>,
        error: crate::controller::common::ApiFailure,
        rv: u64,
    }

    /// The resource of `kind`: (group, plural).
    fn resource(kind: Kind) -> (&'static str, &'static str) {
        match kind {
            Kind::Pod => ("", "pods"),
            Kind::VirtualMachine => ("kubevirt.io", "virtualmachines"),
            Kind::ControllerRevision => ("apps", "controllerrevisions"),
            _ => ("kubevirt.io", "virtualmachineinstances"),
        }
    }

    impl RefusalLog {
        const AT: &'static str = "2026-12-05T10:00:00Z";

        /// The controller leads; a user creates `state` (the decisions' state too).
        fn new(state: &[(Kind, &str, Value)]) -> Self {
            // As the replay's: the log holds every storage object (none).
            let mut mirror = Mirror::default();
            mirror.storage = Some(StorageObjects::default());
            let mut log = RefusalLog {
                mirror,
                events: Vec::new(),
                error: crate::controller::common::ApiFailure {
                    code: 500,
                    reason: "InternalError".into(),
                    message: "Internal error occurred: injected fault".into(),
                },
                rv: 10,
            };
            log.push(lease("ctl/1.0", "ctl-0"));
            for &(kind, _, ref obj) in state {
                log.user("create", kind, obj.clone(), Some(obj.clone()));
            }
            log
        }

        /// Append `e`, stamped 10 ms after the line before it.
        fn push(&mut self, mut e: Value) {
            let at: DateTime<Utc> = Self::AT.parse().unwrap();
            let n = i64::try_from(self.events.len()).unwrap();
            let stamp = at + chrono::TimeDelta::milliseconds(10 * n);
            let stamp = json!(stamp.to_rfc3339_opts(SecondsFormat::Micros, true));
            e["stageTimestamp"] = stamp.clone();
            e["requestReceivedTimestamp"] = stamp;
            self.events.push(e);
        }

        fn next_rv(&mut self) -> String {
            self.rv += 1;
            self.rv.to_string()
        }

        /// A user's `verb` of `kind` answered with `answer`, leaving `now` in the state.
        fn user(&mut self, verb: &str, kind: Kind, answer: Value, now: Option<Value>) {
            let (group, plural) = resource(kind);
            let name = str_at(&answer, "/metadata/name").to_string();
            let key = super::super::mirror::key_of(&answer);
            self.mirror.set(kind, &key, now);
            self.push(event(verb, "kubectl", (group, plural, &name), 200, answer));
        }

        /// The controller's write of our action `action`, decided from the state: the object
        /// it left (a created VMI as virt-api's mutator leaves it, with
        /// `kubevirt.io/foregroundDeleteVirtualMachine`: vmi-mutator.go:127-128).
        fn write(&mut self, action: &str) -> Value {
            use super::super::predict::Effect;
            let at = Self::AT.parse().unwrap();
            let decided = self.mirror.decide("ns/a", at).unwrap().into_iter();
            let w = { decided }
                .find(|w| w.action == action)
                .unwrap_or_else(|| panic!("our decision makes no {action}"));
            let name = w.name.clone().unwrap_or_default();
            let before = self.mirror.get(w.kind, &format!("ns/{name}")).cloned();
            let mut obj = w.apply(before.as_ref()).unwrap().expect("not a deletion");
            let verb = match &w.effect {
                Effect::Create(_) => {
                    let mut name = str_at(&obj, "/metadata/name").to_string();
                    if name.is_empty() {
                        name = format!("{}x", str_at(&obj, "/metadata/generateName"));
                        obj["metadata"]["name"] = json!(name);
                    }
                    obj["metadata"]["uid"] = json!(format!("{name}-uid"));
                    "create"
                }
                Effect::Replace(_) | Effect::ReplaceStatus(_) => "update",
                _ => "patch",
            };
            if (w.kind, verb) == (Kind::VirtualMachineInstance, "create") {
                let finalizers = obj["metadata"]["finalizers"].as_array_mut().unwrap();
                finalizers.push(json!(crate::api::finalizers::FOREGROUND_DELETE_VM));
            }
            obj["metadata"]["resourceVersion"] = json!(self.next_rv());
            let (group, plural) = resource(w.kind);
            let name = str_at(&obj, "/metadata/name").to_string();
            let mut e = event(verb, "ctl/1.0", (group, plural, &name), 200, obj.clone());
            if w.part == Some(Part::Status) && w.kind != Kind::VirtualMachineInstance {
                e["objectRef"]["subresource"] = json!("status");
            }
            self.push(e);
            let key = super::super::mirror::key_of(&obj);
            self.mirror.set(w.kind, &key, Some(obj.clone()));
            obj
        }

        /// Our decision's write of `action` from the state, refused: the action failed with
        /// the error, for deciding what the reconcile writes after it.
        fn refuse(&mut self, action: &str) -> crate::inspect::analyze::Refused {
            use super::super::predict::{Effect, vm_writes_at, vmi_writes_at};
            use crate::inspect::analyze::Refused;
            let at = Self::AT.parse().unwrap();
            let (vm, vmi) = self.mirror.decisions("ns/a", at, &[]).unwrap();
            let error = self.error.clone();
            let in_vm = vm.as_ref().and_then(|d| {
                let mut w = vm_writes_at(d, "a").into_iter();
                let w = w.find(|(_, w)| w.action == action);
                w.map(|(i, w)| (Refused::Vm(i, error.clone()), w))
            });
            let (failed, write) = in_vm
                .or_else(|| {
                    let mut w = vmi_writes_at(vmi.as_ref()?, "a").into_iter();
                    let w = w.find(|(_, w)| w.action == action);
                    w.map(|(i, w)| (Refused::VmiSync(i, error.clone()), w))
                })
                .unwrap_or_else(|| panic!("our decision makes no {action}"));
            let (group, plural) = resource(write.kind);
            let (verb, name, request) = match &write.effect {
                Effect::Create(request) => ("create", str_at(request, "/metadata/name"), request),
                Effect::JsonPatch(_) => ("patch", "a", &Value::Null),
                _ => ("update", "a", &Value::Null),
            };
            let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "code": 500, "reason": error.reason, "message": error.message});
            let mut no = event(verb, "ctl/1.0", (group, plural, name), 500, status);
            if write.part == Some(Part::Status) && write.kind == Kind::VirtualMachine {
                no["objectRef"]["subresource"] = json!("status");
            }
            no["requestObject"] = request.clone();
            no["responseStatus"] = json!({"metadata": {}, "code": 500, "status": "Failure",
                "reason": error.reason, "message": error.message});
            self.push(no);
            failed
        }

        /// The reconcile goes on after `failed`: the write of the first of `follow` our
        /// decision makes after that error. The object written.
        fn follow(&mut self, failed: &crate::inspect::analyze::Refused, follow: &[&str]) -> Value {
            use super::super::predict::{Effect, vm_writes_at, vmi_writes_at};
            let at = Self::AT.parse().unwrap();
            let decided = self.mirror.decisions_refused("ns/a", at, &[], Some(failed));
            let (vm, vmi) = decided.unwrap();
            let mut next = vm.map(|d| vm_writes_at(&d, "a")).unwrap_or_default();
            next.extend(vmi.map(|d| vmi_writes_at(&d, "a")).unwrap_or_default());
            let (_, follows) = next
                .into_iter()
                .find(|(_, w)| follow.contains(&w.action))
                .expect("the decision after the error writes it");
            let before = self.mirror.get(follows.kind, "ns/a").cloned();
            let mut written = follows.apply(before.as_ref()).unwrap().unwrap();
            written["metadata"]["resourceVersion"] = json!(self.next_rv());
            let (plural, sub) = match follows.kind {
                Kind::VirtualMachine => ("virtualmachines", "status"),
                _ => ("virtualmachineinstances", ""),
            };
            let verb = if matches!(follows.effect, Effect::JsonPatch(_)) {
                "patch"
            } else {
                "update"
            };
            let ours = ("kubevirt.io", plural, "a");
            let mut e = event(verb, "ctl/1.0", ours, 200, written.clone());
            e["objectRef"]["subresource"] = json!(sub);
            self.push(e);
            written
        }

        /// Replay the log: each of its `refused` writes is one our decision makes; the verdicts
        /// of the controller's compared writes.
        fn verdicts(&self, refused: usize) -> Vec<(super::super::Verdict, Option<&'static str>)> {
            let run = replay_audit(&self.events, &opts());
            assert_eq!(run.failed, refused);
            assert_eq!(run.refused.len(), refused);
            assert!(run.refused.iter().all(|r| r.ours), "{:?}", run.refused);
            let records = run.run.records.iter();
            records.map(|r| (r.verdict, r.action)).collect()
        }
    }

    /// A log where the controller, on the state `state` (created by a user), makes the write
    /// of our action `refused` and the server refuses it (500), and the same reconcile then
    /// makes the write of our action `follow` as our decision makes it after that error. The
    /// object `follow` wrote and the verdicts of the controller's compared writes.
    fn refused_then(
        state: &[(Kind, &str, Value)],
        refused: &str,
        follow: &[&str],
    ) -> (Value, Vec<(super::super::Verdict, Option<&'static str>)>) {
        let mut log = RefusalLog::new(state);
        let failed = log.refuse(refused);
        let written = log.follow(&failed, follow);
        (written, log.verdicts(1))
    }

    /// Issue 42: the controller's launcher pod creation is refused, and the same reconcile
    /// writes the VMI's status from that error (`Synchronized=False`, `FailedCreate`, the
    /// error's message; vmi.go:355-357). The replay gives our decision the error the log's
    /// `responseStatus` holds: the status write agrees. Before, our decision wrote the status
    /// of a pod created, and the write differed at `status.conditions`.
    #[test]
    fn a_vmi_status_written_after_a_refused_pod_creation_is_decided_from_its_error() {
        let (written, verdicts) = refused_then(
            &vm_and_vmi("Pending"),
            "CreatePod",
            &["UpdateVmi", "PatchVmi"],
        );
        let synchronized = condition(&written, "Synchronized");
        assert_eq!(synchronized["status"], "False", "{written:#}");
        assert_eq!(synchronized["reason"], "FailedCreate");
        assert!(
            synchronized["message"]
                .as_str()
                .is_some_and(|m| m.contains("injected fault")),
            "{synchronized}"
        );
        assert_eq!(verdicts.len(), 1, "{verdicts:?}");
        assert_eq!(verdicts[0].0, super::super::Verdict::Agree, "{verdicts:?}");
    }

    /// Issue 42: the controller's VMI creation is refused, and the same reconcile writes the
    /// VM's status with the `Failure` condition "Failure while starting VMI: …"
    /// (vm.go:1033-1035, 441-451): decided from the error, the status write agrees.
    #[test]
    fn a_vm_status_written_after_a_refused_vmi_creation_is_decided_from_its_error() {
        let state = [(Kind::VirtualMachine, "virtualmachines", always_vm())];
        let (written, verdicts) = refused_then(&state, "CreateVmi", &["UpdateVmStatus"]);
        let failure = condition(&written, "Failure");
        assert!(
            failure["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("Failure while starting VMI: ")
                    && m.contains("injected fault")),
            "{written:#}"
        );
        assert_eq!(
            verdicts,
            [(super::super::Verdict::Agree, Some("UpdateVmStatus"))]
        );
    }

    /// The controller starts VM `ns/a` (`Always`): its ControllerRevision and VMI written.
    fn started() -> RefusalLog {
        let mut log = RefusalLog::new(&[(Kind::VirtualMachine, "virtualmachines", always_vm())]);
        log.write("CreateControllerRevision");
        log.write("CreateVmi");
        log
    }

    /// Whether every compared write agrees, the last one being our action `last`.
    fn all_agree(
        verdicts: &[(super::super::Verdict, Option<&'static str>)],
        last: &[&str],
    ) -> bool {
        let agree = verdicts
            .iter()
            .all(|(v, _)| *v == super::super::Verdict::Agree);
        agree
            && verdicts
                .last()
                .and_then(|(_, a)| *a)
                .is_some_and(|a| last.contains(&a))
    }

    /// Issue 42: between the VMI controller's refused launcher pod creation and that
    /// reconcile's status write, the VM controller's status write of the same VM is refused
    /// too (the two controllers reconcile one VM at once). Each goes on from its own error: the
    /// VMI's status write, `Synchronized=False` `FailedCreate`, agrees. Before, the second
    /// refusal replaced what the first one's reconcile was to write, and the VMI's status
    /// write differed at `status.conditions` and `status.phase` (in 2 of 10 runs of the
    /// embedded cluster with faults).
    #[test]
    fn a_refused_write_of_the_other_controller_leaves_the_first_ones_writes_expected() {
        let mut log = started();
        // The VMI controller's first sync: the VMI Pending.
        log.write("UpdateVmi");
        let failed = log.refuse("CreatePod");
        log.refuse("UpdateVmStatus");
        let follow = ["UpdateVmi", "PatchVmi"];
        let written = log.follow(&failed, &follow);
        assert_eq!(
            condition(&written, "Synchronized")["reason"],
            "FailedCreate"
        );
        let verdicts = log.verdicts(2);
        assert!(all_agree(&verdicts, &follow), "{verdicts:?}");
    }

    /// Issue 42: the VM controller's VMI creation is refused; its line comes before the line
    /// of the old VMI's last finalizer removal (the old VMI gone), which the server answered
    /// before it received the creation (answers race to the log). Read in the server's order,
    /// the creation is one our decision makes, and the VM's status written from its error
    /// agrees. Before, the creation was decided with the old VMI still there, being deleted:
    /// none of our actions, and the status write differed at `status.conditions` and
    /// `status.printableStatus` (in 1 of 10 runs of the embedded cluster with faults).
    #[test]
    fn a_refused_write_is_decided_after_the_lines_answered_before_it_was_received() {
        let mut log = started();
        let mut old = log
            .mirror
            .get(Kind::VirtualMachineInstance, "ns/a")
            .unwrap()
            .clone();
        old["status"]["phase"] = json!("Failed");
        old["metadata"]["deletionTimestamp"] = json!("2026-12-05T09:59:59Z");
        old["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        old["metadata"]["finalizers"] = json!([crate::api::finalizers::FOREGROUND_DELETE_VM]);
        old["metadata"]["resourceVersion"] = json!(log.next_rv());
        let vmi = Kind::VirtualMachineInstance;
        log.user("update", vmi, old.clone(), Some(old.clone()));
        // Its last finalizer removed: gone (the decisions' state now), answered 5 ms before
        // the refused creation was received, logged after it.
        log.mirror.set(vmi, "ns/a", None);
        let failed = log.refuse("CreateVmi");
        old["metadata"]["finalizers"] = json!([]);
        old["metadata"]["resourceVersion"] = json!(log.next_rv());
        log.user("update", vmi, old, None);
        let received = log.events[log.events.len() - 2]["requestReceivedTimestamp"].clone();
        let received: DateTime<Utc> = received.as_str().unwrap().parse().unwrap();
        let gone = received - chrono::TimeDelta::milliseconds(5);
        let gone = gone.to_rfc3339_opts(SecondsFormat::Micros, true);
        log.events.last_mut().unwrap()["stageTimestamp"] = json!(gone);
        let written = log.follow(&failed, &["UpdateVmStatus"]);
        let failure = condition(&written, "Failure");
        assert_eq!(failure["reason"], "FailedCreate", "{written:#}");
        let verdicts = log.verdicts(1);
        assert!(all_agree(&verdicts, &["UpdateVmStatus"]), "{verdicts:?}");
    }

    /// Issue 42: the VMI controller's status write and the VM controller's finalizer patch of
    /// one failed VMI, decided on the same state; the patch's line comes first, although its
    /// answer, at the newer resourceVersion, holds the status write too. Read in
    /// resourceVersion order, both agree. Before, the status write's line was left out as
    /// older, and the patch was compared with the state without it: `differ` at
    /// `status.conditions` (in 1 of 10 runs of the embedded cluster with faults).
    #[test]
    fn one_objects_lines_are_read_in_resource_version_order() {
        use super::super::predict::{vm_writes_at, vmi_writes_at};
        let mut log = started();
        let vmi = Kind::VirtualMachineInstance;
        let mut failed = log.mirror.get(vmi, "ns/a").unwrap().clone();
        failed["status"]["phase"] = json!("Failed");
        failed["metadata"]["resourceVersion"] = json!(log.next_rv());
        log.user("update", vmi, failed.clone(), Some(failed.clone()));
        let at = RefusalLog::AT.parse().unwrap();
        let (vm, vmi_decision) = log.mirror.decisions("ns/a", at, &[]).unwrap();
        let status = vmi_writes_at(&vmi_decision.unwrap(), "a").into_iter();
        let (_, status) = { status }
            .find(|(_, w)| w.kind == vmi)
            .expect("the VMI controller writes the failed VMI");
        let (_, finalizer) = vm_writes_at(&vm.unwrap(), "a")
            .into_iter()
            .find(|(_, w)| w.action == "RemoveVmiFinalizer")
            .expect("the VM controller removes its finalizer from the failed VMI");
        let mut first = status.apply(Some(&failed)).unwrap().unwrap();
        first["metadata"]["resourceVersion"] = json!(log.next_rv());
        let mut second = finalizer.apply(Some(&first)).unwrap().unwrap();
        second["metadata"]["resourceVersion"] = json!(log.next_rv());
        let vmis = ("kubevirt.io", "virtualmachineinstances", "a");
        log.push(event("patch", "ctl/1.0", vmis, 200, second));
        log.push(event("update", "ctl/1.0", vmis, 200, first));
        let verdicts = log.verdicts(0);
        assert!(
            all_agree(&verdicts, &["RemoveVmiFinalizer"]),
            "{verdicts:?}"
        );
        assert_eq!(verdicts.len(), 4, "{verdicts:?}");
        assert_eq!(replay_audit(&log.events, &opts()).uncompared, 0);
    }

    /// Issue 42: the controller patched a new launcher pod's readiness condition just before
    /// the scheduler bound it, but the binding's line came first in the log. The patch's answer
    /// has no `spec.nodeName`; the pod stays bound, with the patch's condition (before, the
    /// answer unbound it, and the patch was compared as a write of the pod's spec:
    /// `we-would-not-write`, about one run in three on the embedded cluster).
    #[test]
    fn a_pod_answer_logged_after_its_binding_keeps_the_binding() {
        let pods = ("", "pods", "p");
        let pod = json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
            "resourceVersion": "2"}, "spec": {}});
        let binding = binding_of("p");
        let mut patched = pod.clone();
        patched["metadata"]["resourceVersion"] = json!("3");
        patched["status"] = json!({"conditions": [{"type": "kubevirt.io/virtual-machine-unpaused",
            "status": "True"}]});
        let mut patch = event("patch", "ctl/1.0", pods, 200, patched);
        patch["objectRef"]["subresource"] = json!("status");
        let opts = opts();
        let mut r = replayer(&opts);
        for e in [event("create", "x", pods, 201, pod), binding, patch] {
            r.feed(&audited(&e).unwrap(), 0);
        }
        let p = r.tracker.mirror.get(Kind::Pod, "ns/p").unwrap();
        assert_eq!(str_at(p, "/spec/nodeName"), "node-1", "{p}");
        assert_eq!(str_at(p, "/metadata/resourceVersion"), "3");
        assert_eq!(
            crate::sim::patch::condition_types(p),
            ["kubevirt.io/virtual-machine-unpaused", "PodScheduled"]
        );
    }

    /// Issue 42: the controller's readiness patch changed nothing (its cache was behind its own
    /// earlier patch) and was answered with the kubelet's newer status update, whose line
    /// comes after it although the kubelet's request was received first. Both answers carry
    /// the same resourceVersion: the kubelet's change is read first and the controller's
    /// write changed nothing. Before, it was compared as a write of the kubelet's changes:
    /// `we-would-not-write`, in about one run in three after the OOM kill's restart.
    #[test]
    fn a_write_answered_with_a_newer_line_of_another_client_changed_nothing() {
        let pods = ("", "pods", "p");
        let pod = |rv: &str, phase: &str| {
            json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
                "resourceVersion": rv, "ownerReferences": [{"kind": "VirtualMachineInstance",
                    "name": "a", "uid": "u", "controller": true}]},
                "spec": {"nodeName": "n"}, "status": {"phase": phase}})
        };
        let at = |mut e: Value, t: &str| {
            e["stageTimestamp"] = json!(format!("2026-12-05T10:00:00.{t}Z"));
            e["objectRef"]["subresource"] = json!("status");
            e
        };
        let events = [
            lease("ctl/1.0", "ctl-0"),
            event("create", "x", pods, 201, pod("2", "Pending")),
            at(
                event("patch", "ctl/1.0", pods, 200, pod("3", "Running")),
                "503",
            ),
            at(
                event("update", "kubelet", pods, 200, pod("3", "Running")),
                "497",
            ),
        ];
        let run = replay_audit(&events, &opts());
        assert!(run.run.records.is_empty(), "{:?}", run.run.records);
        assert_eq!(run.uncompared, 1);
        // In the other order, nothing is moved: the later line is the write that changed nothing.
        let mut normal = events.clone();
        normal[2]["stageTimestamp"] = json!("2026-12-05T10:00:00.490Z");
        assert_eq!(server_order(&normal), [0, 1, 2, 3]);
    }

    /// Issue 42: the scheduler bound a launcher pod it saw created before the creation's answer
    /// was logged: the binding's line comes first. The creation is read before it and the pod
    /// is bound. Before, the binding found no pod and was lost, and the controller's readiness
    /// patch, answered with the bound pod, was compared as a write of the pod's spec
    /// (`we-would-not-write`, in 3 of 12 runs of the embedded cluster with faults).
    #[test]
    fn a_pods_binding_logged_before_its_creation_is_read_after_it() {
        let pods = ("", "pods", "p");
        let pod = json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
            "resourceVersion": "2"}, "spec": {}});
        let binding = binding_of("p");
        let events = [
            lease("ctl/1.0", "ctl-0"),
            binding,
            event("create", "x", pods, 201, pod),
        ];
        let order = server_order(&events);
        assert_eq!(order, [0, 2, 1]);
        let opts = opts();
        let mut r = replayer(&opts);
        for i in order {
            r.feed(&audited(&events[i]).unwrap(), i);
        }
        let p = r.tracker.mirror.get(Kind::Pod, "ns/p").unwrap();
        assert_eq!(str_at(p, "/spec/nodeName"), "node-1", "{p}");
    }

    /// Issue 42: the scheduler bound a new launcher pod just before the controller's
    /// readiness patch reached the server, but the binding's line comes after the patch's. The
    /// patch's answer is the bound pod: the binding is read first, and the patch agrees.
    /// Before, the patch was compared with the unbound pod, as a write of its spec
    /// (`we-would-not-write`, in 2 of 12 runs of the embedded cluster with faults).
    #[test]
    fn a_pod_answered_bound_is_bound_before_its_write_is_compared() {
        let mut log = started();
        log.write("UpdateVmi");
        let pod = log.write("CreatePod");
        let at = RefusalLog::AT.parse().unwrap();
        let decided = log.mirror.decide("ns/a", at).unwrap().into_iter();
        let readiness = { decided }
            .find(|w| w.action == "PatchPodReadinessCondition")
            .expect("the controller patches the new pod's readiness condition");
        let mut bound = pod.clone();
        crate::sim::object::bind_pod(&mut bound, "node-1", None, "2026-12-05T10:00:00Z");
        let mut patched = readiness.apply(Some(&bound)).unwrap().unwrap();
        patched["metadata"]["resourceVersion"] = json!(log.next_rv());
        let name = str_at(&pod, "/metadata/name");
        let mut patch = event("patch", "ctl/1.0", ("", "pods", name), 200, patched);
        patch["objectRef"]["subresource"] = json!("status");
        log.push(patch);
        log.push(binding_of(name));
        let verdicts = log.verdicts(0);
        assert!(
            all_agree(&verdicts, &["PatchPodReadinessCondition"]),
            "{verdicts:?}"
        );
    }

    #[test]
    fn deletions_bindings_and_older_lines_rebuild_the_state_as_the_server_held_it() {
        let pods = ("", "pods", "p");
        let pod = |rv: &str, meta: Value| {
            let mut p = json!({"kind": "Pod", "metadata": {"name": "p", "namespace": "ns",
                "resourceVersion": rv}, "spec": {}});
            json_patch::merge(&mut p, &json!({ "metadata": meta }));
            p
        };
        let binding = binding_of("p");
        let graceful = pod(
            "5",
            json!({"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30}),
        );
        let opts = opts();
        let mut r = replayer(&opts);
        let held = |r: &Replayer<'_>| r.tracker.mirror.get(Kind::Pod, "ns/p").cloned();
        for (e, (rv, node)) in [
            (
                event("create", "x", pods, 201, pod("2", json!({}))),
                ("2", ""),
            ),
            (binding, ("2", "node-1")),
            // Answered after the line above: older, left out.
            (
                event("update", "x", pods, 200, pod("1", json!({}))),
                ("2", "node-1"),
            ),
            // Terminating with a grace period: still there (and still bound: the answer,
            // written without the node, was made before the binding).
            (event("delete", "x", pods, 200, graceful), ("5", "node-1")),
        ] {
            r.feed(&audited(&e).unwrap(), 0);
            let p = held(&r).unwrap();
            assert_eq!(str_at(&p, "/metadata/resourceVersion"), rv);
            assert_eq!(str_at(&p, "/spec/nodeName"), node);
            // kube-apiserver's binding sets PodScheduled=True (the launcher's readiness patch
            // is written on a pod that has it).
            let scheduled = p
                .pointer("/status/conditions/0")
                .filter(|_| !node.is_empty());
            assert_eq!(
                scheduled.map(|c| (&c["type"], &c["status"])),
                (!node.is_empty()).then_some((&json!("PodScheduled"), &json!("True"))),
                "{p}"
            );
        }
        let gone = pod(
            "6",
            json!({"deletionTimestamp": "t", "deletionGracePeriodSeconds": 0}),
        );
        r.feed(&audited(&event("delete", "x", pods, 200, gone)).unwrap(), 0);
        assert_eq!(held(&r), None);
        let update = event("update", "x", pods, 200, Value::Null);
        r.feed(&audited(&update).unwrap(), 0);
        assert_eq!(r.out.without_object, 1);
    }
}
