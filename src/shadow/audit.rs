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
use super::tracker::{Author, Change, LATER_WAIT, Record, Refusal, Tracker, as_write};
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
            Target::Claim => match obj {
                Some(o) => {
                    mirror.pvcs.insert(a.key.clone(), o);
                }
                None => {
                    mirror.pvcs.remove(&a.key);
                }
            },
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

/// How many lines after a write the write that made the object it was answered with is looked
/// for ([`answered_ahead`]).
const AHEAD: usize = 64;

/// The writes answered with an object whose own write is logged later, each with that later
/// line: a write that changes nothing is answered with the object as the server holds it, and
/// when another client's write made that version just before, the two answers race to the log
/// (a launcher pod's readiness patch, already applied, answered with the kubelet's status
/// update logged after it). Both answers carry the same resourceVersion; the later line, when
/// its request was received first, is read first, and the write that changed nothing compares
/// as such. Before, it was compared as
/// a write of the other client's changes (`we-would-not-write`, after an OOM kill's restart).
fn answered_ahead(events: &[Value]) -> BTreeMap<usize, usize> {
    fn version(e: &Value) -> Option<(&str, &str, &str, &str)> {
        let code = e.pointer("/responseStatus/code").and_then(Value::as_u64);
        let answer = e.get("responseObject")?;
        let rv = str_at(answer, "/metadata/resourceVersion");
        let written = matches!(str_at(e, "/verb"), "create" | "update" | "patch");
        (written && code.is_some_and(|c| (200..300).contains(&c)) && !rv.is_empty()).then(|| {
            (
                str_at(e, "/objectRef/resource"),
                str_at(answer, "/metadata/namespace"),
                str_at(answer, "/metadata/name"),
                rv,
            )
        })
    }
    let mut out = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let Some(v) = version(e) else {
            continue;
        };
        // The one received first made the version (the store applies one object's writes in
        // order); a later line received after this one is the no-op.
        let stamp = |e: &Value| str_at(e, "/stageTimestamp").to_string();
        let later = (i + 1..events.len().min(i + 1 + AHEAD))
            .find(|&j| version(&events[j]) == Some(v) && stamp(&events[j]) < stamp(e));
        if let Some(j) = later
            && !out.values().any(|&k| k == j)
        {
            out.insert(i, j);
        }
    }
    out
}

/// Replay `events` (an audit log's lines, in order) through the shadow's tracker.
pub(crate) fn replay_audit(events: &[Value], opts: &AuditOptions<'_>) -> AuditRun {
    // The log is taken to hold every storage object the controller read (none written: none
    // there), as it holds the VMs: `volumeSnapshotStatuses` are decided from them.
    let mirror = Mirror {
        settings: opts.settings.clone(),
        storage: Some(StorageObjects::default()),
        ..Mirror::default()
    };
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
    let ahead = answered_ahead(events);
    let mut fed_ahead = std::collections::BTreeSet::new();
    let order = (0..events.len())
        .filter(|i| !ahead.values().any(|j| j == i))
        .flat_map(|i| {
            ahead
                .get(&i)
                .map(|&j| vec![j, i])
                .unwrap_or_else(|| vec![i])
        });
    for (index, a) in order.filter_map(|i| Some((i, audited(&events[i])?))) {
        if !fed_ahead.insert(index) {
            continue;
        }
        r.tracker.settle_held_before(a.at - LATER_WAIT);
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

    /// A log where the controller, on the state `state` (created by a user), makes the write
    /// of our action `refused` and the server refuses it (500), and the same reconcile then
    /// makes the write of our action `follow` as our decision makes it after that error. The
    /// object `follow` wrote and the verdicts of the controller's compared writes.
    fn refused_then(
        state: &[(Kind, &str, Value)],
        refused: &str,
        follow: &[&str],
    ) -> (Value, Vec<(super::super::Verdict, Option<&'static str>)>) {
        use super::super::predict::{Effect, vm_writes_at, vmi_writes_at};
        use crate::inspect::analyze::Refused;
        let at: DateTime<Utc> = "2026-12-05T10:00:00Z".parse().unwrap();
        let error = crate::controller::common::ApiFailure {
            code: 500,
            reason: "InternalError".into(),
            message: "Internal error occurred: injected fault".into(),
        };
        // As the replay's: the log holds every storage object (none).
        let mut m = Mirror {
            storage: Some(StorageObjects::default()),
            ..Mirror::default()
        };
        let mut events = vec![lease("ctl/1.0", "ctl-0")];
        for &(kind, plural, ref obj) in state {
            m.set(kind, &super::super::mirror::key_of(obj), Some(obj.clone()));
            let name = str_at(obj, "/metadata/name").to_string();
            let group = obj["apiVersion"]
                .as_str()
                .map_or("", |v| v.split('/').next().unwrap_or(""));
            let group = if group == "v1" { "" } else { group };
            events.push(event(
                "create",
                "kubectl",
                (group, plural, &name),
                201,
                obj.clone(),
            ));
        }
        let (vm, vmi) = m.decisions("ns/a", at, &[]).unwrap();
        let in_vm = vm.as_ref().and_then(|d| {
            let w = vm_writes_at(d, "a")
                .into_iter()
                .find(|(_, w)| w.action == refused);
            w.map(|(i, w)| (Refused::Vm(i, error.clone()), w))
        });
        let (failed, write) = in_vm
            .or_else(|| {
                let w = vmi_writes_at(vmi.as_ref()?, "a").into_iter();
                let mut w = w.filter(|(_, w)| w.action == refused);
                w.next()
                    .map(|(i, w)| (Refused::VmiSync(i, error.clone()), w))
            })
            .expect("our decision makes the refused write");
        let Effect::Create(request) = &write.effect else {
            panic!("{refused} is not a creation");
        };
        let plural = match write.kind {
            Kind::Pod => ("", "pods"),
            _ => ("kubevirt.io", "virtualmachineinstances"),
        };
        let name = str_at(request, "/metadata/name");
        let mut no = event(
            "create",
            "ctl/1.0",
            (plural.0, plural.1, name),
            500,
            json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
            "reason": error.reason, "message": error.message}),
        );
        no["requestObject"] = request.clone();
        no["responseStatus"] = json!({"metadata": {}, "code": 500, "status": "Failure",
            "reason": error.reason, "message": error.message});
        events.push(no);
        let (vm, vmi) = m.decisions_refused("ns/a", at, &[], Some(&failed)).unwrap();
        let mut next = vm.map(|d| vm_writes_at(&d, "a")).unwrap_or_default();
        next.extend(vmi.map(|d| vmi_writes_at(&d, "a")).unwrap_or_default());
        let (_, follows) = next
            .into_iter()
            .find(|(_, w)| follow.contains(&w.action))
            .expect("the decision after the error writes it");
        let before = m.get(follows.kind, "ns/a").cloned();
        let mut written = follows.apply(before.as_ref()).unwrap().unwrap();
        written["metadata"]["resourceVersion"] = json!("9");
        let (plural, sub) = match follows.kind {
            Kind::VirtualMachine => ("virtualmachines", "status"),
            _ => ("virtualmachineinstances", ""),
        };
        let verb = if matches!(follows.effect, Effect::JsonPatch(_)) {
            "patch"
        } else {
            "update"
        };
        let mut e = event(
            verb,
            "ctl/1.0",
            ("kubevirt.io", plural, "a"),
            200,
            written.clone(),
        );
        e["objectRef"]["subresource"] = json!(sub);
        events.push(e);
        let run = replay_audit(&events, &opts());
        assert_eq!(run.failed, 1);
        assert_eq!(run.refused.len(), 1);
        assert!(run.refused[0].ours, "{:?}", run.refused);
        let verdicts = run
            .run
            .records
            .iter()
            .map(|r| (r.verdict, r.action))
            .collect();
        (written, verdicts)
    }

    /// Issue 42: the controller's launcher pod creation is refused, and the same reconcile
    /// writes the VMI's status from that error (`Synchronized=False`, `FailedCreate`, the
    /// error's message; vmi.go:355-357). The replay gives our decision the error the log's
    /// `responseStatus` holds: the status write agrees. Before, our decision wrote the status
    /// of a pod created, and the write differed at `status.conditions`.
    #[test]
    fn a_vmi_status_written_after_a_refused_pod_creation_is_decided_from_its_error() {
        let pending = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "a", "namespace": "ns", "uid": "vmi-uid", "resourceVersion": "3",
                "finalizers": ["kubevirt.io/foregroundDeleteVirtualMachine"],
                "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                    "kubevirt.io/storage-observed-api-version": "v1"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "a", "uid": "u1", "controller": true}]},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}},
            "status": {"phase": "Pending"}});
        let state = [
            (Kind::VirtualMachine, "virtualmachines", always_vm()),
            (
                Kind::VirtualMachineInstance,
                "virtualmachineinstances",
                pending,
            ),
        ];
        let (written, verdicts) = refused_then(&state, "CreatePod", &["UpdateVmi", "PatchVmi"]);
        let synchronized = written["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Synchronized"))
            .cloned()
            .unwrap_or_default();
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
        let failure = written["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == "Failure"))
            .cloned()
            .unwrap_or_default();
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
        let mut binding = event("create", "sched", pods, 201, json!({"kind": "Status"}));
        binding["objectRef"]["subresource"] = json!("binding");
        binding["requestObject"] = json!({"kind": "Binding", "target": {"name": "node-1"}});
        let mut patched = pod.clone();
        patched["metadata"]["resourceVersion"] = json!("3");
        patched["status"] = json!({"conditions": [{"type": "kubevirt.io/virtual-machine-unpaused",
            "status": "True"}]});
        let mut patch = event("patch", "ctl/1.0", pods, 200, patched);
        patch["objectRef"]["subresource"] = json!("status");
        let mut r = Replayer {
            opts: &opts(),
            tracker: Tracker::new(Mirror::default(), Vec::new(), None),
            out: replay_audit(&[], &opts()),
            virt_api: None,
            bindings: BTreeMap::new(),
        };
        for e in [event("create", "x", pods, 201, pod), binding, patch] {
            r.feed(&audited(&e).unwrap(), 0);
        }
        let p = r.tracker.mirror.get(Kind::Pod, "ns/p").unwrap();
        assert_eq!(str_at(p, "/spec/nodeName"), "node-1", "{p}");
        assert_eq!(str_at(p, "/metadata/resourceVersion"), "3");
        let types: Vec<&str> = p["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
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
        assert!(answered_ahead(&normal).is_empty());
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
        let mut binding = event("create", "sched", pods, 201, json!({"kind": "Status"}));
        binding["objectRef"]["subresource"] = json!("binding");
        binding["requestObject"] = json!({"kind": "Binding", "target": {"name": "node-1"}});
        let graceful = pod(
            "5",
            json!({"deletionTimestamp": "t", "deletionGracePeriodSeconds": 30}),
        );
        let mut r = Replayer {
            opts: &opts(),
            tracker: Tracker::new(Mirror::default(), Vec::new(), None),
            out: replay_audit(&[], &opts()),
            virt_api: None,
            bindings: BTreeMap::new(),
        };
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
