//! The audit log: every request the embedded API server answers, the most recent
//! [`DEFAULT_AUDIT_CAPACITY`] kept in memory and queryable from tests (a ring: the oldest entry
//! goes when a new one would exceed the capacity; [`AuditLog::dropped`] counts them), and
//! every one optionally appended to a JSON-lines file.
//!
//! Verbs are the Kubernetes request verbs (`k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`):
//! `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The leader-election fields of a Lease as a successful create or update wrote it (from the
/// request body, as a `RequestResponse`-level audit policy of a real API server would show
/// them). Present only on Lease writes, so tests can derive leadership terms from the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseAudit {
    /// `spec.holderIdentity` (`""` when released or absent).
    pub holder_identity: String,
    /// `spec.renewTime` as written, on the writer's clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
    /// `spec.leaseDurationSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i64>,
}

impl LeaseAudit {
    /// The fields of a Lease request body, `None` when it is not JSON with a `spec`.
    pub(crate) fn from_body(body: &[u8]) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_slice(body).ok()?;
        let spec = v.get("spec")?;
        Some(LeaseAudit {
            holder_identity: spec
                .get("holderIdentity")
                .and_then(|h| h.as_str())
                .unwrap_or_default()
                .to_string(),
            renew_time: spec
                .get("renewTime")
                .and_then(|t| t.as_str())
                .map(str::to_string),
            lease_duration_seconds: spec.get("leaseDurationSeconds").and_then(|d| d.as_i64()),
        })
    }
}

/// One answered request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Position in the log, from 0.
    pub seq: u64,
    /// When the request arrived.
    pub time: DateTime<Utc>,
    /// Kubernetes verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
    /// `deletecollection`); for non-resource paths (discovery) `get`.
    pub verb: String,
    /// API group (`""` for core).
    pub group: String,
    /// Resource plural (`pods`); `""` for non-resource requests.
    pub resource: String,
    /// Subresource (`status`, `binding`) or `""`.
    pub subresource: String,
    /// Namespace or `""`.
    pub namespace: String,
    /// Object name or `""` (for create: the name in the body, as created).
    pub name: String,
    /// `User-Agent` header (`""` when absent).
    pub user_agent: String,
    /// HTTP status code of the response (200 for an accepted watch).
    pub code: u16,
    /// Request path.
    pub path: String,
    /// For a successful Lease create/update: the leader-election fields written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseAudit>,
}

impl AuditEntry {
    /// Whether the verb changes state (`create`, `update`, `patch`, `delete`, `deletecollection`).
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }
}

/// A filter over audit entries; unset fields match anything.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Verbs to keep.
    pub verbs: Option<Vec<String>>,
    /// Only writes.
    pub writes_only: bool,
    /// Resource plural.
    pub resource: Option<String>,
    /// Subresource (`Some("")` = main resource only).
    pub subresource: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// Object name.
    pub name: Option<String>,
    /// Substring of the user agent.
    pub user_agent: Option<String>,
    /// Only successful (2xx) responses.
    pub success_only: bool,
    /// Only entries with `seq >= since`.
    pub since: Option<u64>,
}

impl AuditQuery {
    /// Whether `e` passes the filter.
    pub(crate) fn matches(&self, e: &AuditEntry) -> bool {
        self.verbs.as_ref().is_none_or(|v| v.contains(&e.verb))
            && (!self.writes_only || e.is_write())
            && self.resource.as_ref().is_none_or(|r| *r == e.resource)
            && self
                .subresource
                .as_ref()
                .is_none_or(|s| *s == e.subresource)
            && self.namespace.as_ref().is_none_or(|n| *n == e.namespace)
            && self.name.as_ref().is_none_or(|n| *n == e.name)
            && self
                .user_agent
                .as_ref()
                .is_none_or(|u| e.user_agent.contains(u.as_str()))
            && (!self.success_only || (200..300).contains(&e.code))
            && self.since.is_none_or(|s| e.seq >= s)
    }
}

/// What the audit file holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum AuditFormat {
    /// Every request as an [`AuditEntry`] (camelCase keys), as tests and benches read it.
    #[default]
    Entries,
    /// `audit.k8s.io/v1` `Event`s as kube-apiserver writes them under the policy
    /// [`EVENTS_POLICY`] describes: writes only, with the request and response objects for
    /// the kinds `replay` rebuilds.
    Events,
}

/// The audit policy the `events` format follows, as kube-apiserver's `--audit-policy-file`
/// would say it (`replay` reads such a log; docs/replay.md), and the one the tests' real
/// control plane runs with. A subresource is named as kube-apiserver matches it: a pod's
/// binding is logged with its request, which `replay` binds the pod from.
pub const EVENTS_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  verbs: [get, list, watch]
- level: RequestResponse
  resources:
  - group: \"\"
    resources: [pods, pods/status, pods/binding, persistentvolumeclaims,
      persistentvolumeclaims/status]
  - group: kubevirt.io
  - group: apps
    resources: [controllerrevisions]
  - group: cdi.kubevirt.io
  - group: coordination.k8s.io
    resources: [leases]
  - group: storage.k8s.io
    resources: [storageclasses]
  - group: snapshot.storage.k8s.io
    resources: [volumesnapshotclasses]
- level: Metadata
";

/// Whether a write of `group`/`resource` is logged at `RequestResponse` level by
/// [`EVENTS_POLICY`].
fn with_objects(group: &str, resource: &str) -> bool {
    match group {
        "" => matches!(resource, "pods" | "persistentvolumeclaims"),
        "kubevirt.io" | "cdi.kubevirt.io" => true,
        "apps" => resource == "controllerrevisions",
        "coordination.k8s.io" => resource == "leases",
        "storage.k8s.io" => resource == "storageclasses",
        "snapshot.storage.k8s.io" => resource == "volumesnapshotclasses",
        _ => false,
    }
}

/// Entries [`AuditLog`] keeps in memory by default ([`crate::sim::ApiServerConfig::audit_capacity`]):
/// the requests of a few thousand VM starts (the heap an entry holds: docs/performance.md).
/// Before the bound the log kept every request of the server's life.
pub const DEFAULT_AUDIT_CAPACITY: usize = 100_000;

/// The in-memory log (plus optional JSON-lines file).
#[derive(Debug)]
pub struct AuditLog {
    entries: Mutex<Ring>,
    file: Option<Mutex<BufWriter<File>>>,
    format: AuditFormat,
}

/// The entries kept, oldest first, and how many were recorded in all.
#[derive(Debug)]
struct Ring {
    kept: VecDeque<AuditEntry>,
    /// Entries recorded so far, the dropped ones included: the next `seq`.
    recorded: u64,
    /// At most this many are kept; `None`: all.
    capacity: Option<usize>,
}

impl Ring {
    /// The kept entries with `seq >= since`.
    fn since(&self, since: u64) -> impl Iterator<Item = &AuditEntry> {
        let first = self.kept.front().map_or(self.recorded, |e| e.seq);
        let skip = since.saturating_sub(first).min(self.kept.len() as u64);
        self.kept.range(skip as usize..)
    }

    fn push(&mut self, entry: AuditEntry) {
        if self.capacity == Some(0) {
            return;
        }
        if self.capacity.is_some_and(|c| self.kept.len() >= c) {
            self.kept.pop_front();
        }
        self.kept.push_back(entry);
    }
}

/// Fields of an entry before it gets its sequence number.
#[derive(Debug, Clone, Default)]
pub struct AuditRecord {
    /// See [`AuditEntry::verb`].
    pub verb: String,
    /// See [`AuditEntry::group`].
    pub group: String,
    /// See [`AuditEntry::resource`].
    pub resource: String,
    /// See [`AuditEntry::subresource`].
    pub subresource: String,
    /// See [`AuditEntry::namespace`].
    pub namespace: String,
    /// See [`AuditEntry::name`].
    pub name: String,
    /// See [`AuditEntry::user_agent`].
    pub user_agent: String,
    /// See [`AuditEntry::path`].
    pub path: String,
    /// See [`AuditEntry::lease`].
    pub lease: Option<LeaseAudit>,
    /// The request body as JSON (the `events` format's `requestObject`).
    pub request_object: Option<serde_json::Value>,
    /// The response body as JSON (the `events` format's `responseObject`).
    pub response_object: Option<serde_json::Value>,
    /// The `metav1.Status` of an error answer (its bounded fields go to the `events` format's
    /// `responseStatus` at every level, as kube-apiserver logs them).
    pub status: Option<serde_json::Value>,
}

/// The user every request of the embedded server is authenticated as (one bearer token).
const EMBEDDED_USER: &str = "virtctl-rs:embedded-admin";

/// The event's `responseStatus`: the code, and of an answer that is a `Status` (an error, a
/// completed deletion) its `status`, `message`, `reason` and `details`, the fields kube-apiserver
/// copies (k8s.io/apiserver v0.36.3 pkg/audit/context.go:158-169). A refused write's error is
/// what the controller decided the rest of its reconcile from: `replay` reads it there.
fn response_status(r: &AuditRecord, code: u16) -> serde_json::Value {
    let mut out = serde_json::json!({"metadata": {}, "code": code});
    let answered = r.response_object.as_ref().filter(|o| o["kind"] == "Status");
    if let Some(s) = r.status.as_ref().or(answered) {
        for field in ["status", "message", "reason", "details"] {
            if let Some(v) = s.get(field) {
                out[field] = v.clone();
            }
        }
    }
    out
}

/// `r` as an `audit.k8s.io/v1` `Event` at stage `ResponseComplete`, `None` when
/// [`EVENTS_POLICY`] logs no event for it (reads).
fn k8s_event(
    seq: u64,
    time: DateTime<Utc>,
    r: &AuditRecord,
    code: u16,
) -> Option<serde_json::Value> {
    use serde_json::json;
    if matches!(r.verb.as_str(), "get" | "list" | "watch") {
        return None;
    }
    let objects = with_objects(&r.group, &r.resource);
    let mut object_ref = serde_json::Map::new();
    for (k, v) in [
        ("resource", &r.resource),
        ("namespace", &r.namespace),
        ("name", &r.name),
        ("apiGroup", &r.group),
        ("subresource", &r.subresource),
    ] {
        if !v.is_empty() {
            object_ref.insert(k.into(), json!(v));
        }
    }
    let stamp = time.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let mut e = json!({
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": if objects { "RequestResponse" } else { "Metadata" },
        "auditID": format!("embedded-{seq}"),
        "stage": "ResponseComplete",
        "requestURI": r.path,
        "verb": r.verb,
        "user": {"username": EMBEDDED_USER, "groups": ["system:masters", "system:authenticated"]},
        "sourceIPs": ["127.0.0.1"],
        "userAgent": r.user_agent,
        "objectRef": object_ref,
        "responseStatus": response_status(r, code),
        "requestReceivedTimestamp": stamp,
        "stageTimestamp": stamp,
    });
    if objects {
        if let Some(o) = &r.request_object {
            e["requestObject"] = o.clone();
        }
        if let Some(o) = &r.response_object {
            e["responseObject"] = o.clone();
        }
    }
    Some(e)
}

impl AuditLog {
    /// A log keeping the last `capacity` entries in memory (`None`: all), appending JSON lines
    /// to `file` when given (every entry: the file is not bounded).
    ///
    /// # Errors
    /// The file cannot be created.
    pub(crate) fn new(
        file: Option<&Path>,
        format: AuditFormat,
        capacity: Option<usize>,
    ) -> std::io::Result<Self> {
        let file = match file {
            Some(p) => Some(Mutex::new(BufWriter::new(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)?,
            ))),
            None => None,
        };
        Ok(Self {
            entries: Mutex::new(Ring {
                kept: VecDeque::new(),
                recorded: 0,
                capacity,
            }),
            file,
            format,
        })
    }

    /// Whether the file wants the request and response objects of a write of
    /// `group`/`resource` (the caller reads them only then).
    pub(crate) fn wants_objects(&self, group: &str, resource: &str) -> bool {
        self.file.is_some() && self.format == AuditFormat::Events && with_objects(group, resource)
    }

    /// Append one entry.
    pub(crate) fn record(&self, time: DateTime<Utc>, r: AuditRecord, code: u16) {
        // The file's lock is held across the numbering so its lines are in `seq` order.
        let mut file = self
            .file
            .as_ref()
            .map(|f| f.lock().unwrap_or_else(|e| e.into_inner()));
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let seq = entries.recorded;
        entries.recorded += 1;
        let line = match (&file, self.format) {
            (None, _) => None,
            (Some(_), AuditFormat::Events) => k8s_event(seq, time, &r, code).map(|e| e.to_string()),
            (Some(_), AuditFormat::Entries) => None,
        };
        let entry = AuditEntry {
            seq,
            time,
            verb: r.verb,
            group: r.group,
            resource: r.resource,
            subresource: r.subresource,
            namespace: r.namespace,
            name: r.name,
            user_agent: r.user_agent,
            code,
            path: r.path,
            lease: r.lease,
        };
        let line = match self.format {
            AuditFormat::Entries if file.is_some() => serde_json::to_string(&entry).ok(),
            _ => line,
        };
        entries.push(entry);
        drop(entries);
        if let (Some(f), Some(line)) = (file.as_mut(), line) {
            // The audit file is best effort; a full disk must not fail API requests.
            let _ = writeln!(f, "{line}");
            let _ = f.flush();
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entries kept in memory, oldest first (the last `capacity` recorded).
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.ring().kept.iter().cloned().collect()
    }

    /// Kept entries matching `q` (with `since`, only the entries from there are looked at).
    pub fn query(&self, q: &AuditQuery) -> Vec<AuditEntry> {
        self.ring()
            .since(q.since.unwrap_or(0))
            .filter(|e| q.matches(e))
            .cloned()
            .collect()
    }

    /// Writes (create/update/patch/delete/deletecollection), any outcome.
    pub fn writes(&self) -> Vec<AuditEntry> {
        self.query(&AuditQuery {
            writes_only: true,
            ..Default::default()
        })
    }

    /// Entries whose user agent contains `ua`.
    pub fn by_user_agent(&self, ua: &str) -> Vec<AuditEntry> {
        self.query(&AuditQuery {
            user_agent: Some(ua.to_string()),
            ..Default::default()
        })
    }

    /// Number of entries recorded so far, dropped ones included: the `seq` of the next one
    /// (use as a `since` mark).
    pub fn len(&self) -> usize {
        self.ring().recorded as usize
    }

    /// Entries recorded but no longer kept in memory (the oldest, beyond the capacity).
    pub fn dropped(&self) -> u64 {
        let ring = self.ring();
        ring.recorded - ring.kept.len() as u64
    }

    /// No entry yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(verb: &str, ua: &str) -> AuditRecord {
        AuditRecord {
            verb: verb.into(),
            resource: "pods".into(),
            user_agent: ua.into(),
            ..Default::default()
        }
    }

    #[test]
    fn query_and_writes() {
        let log = AuditLog::new(None, AuditFormat::Entries, None).unwrap();
        log.record(Utc::now(), rec("get", "a"), 200);
        log.record(Utc::now(), rec("create", "b/1.0"), 201);
        log.record(Utc::now(), rec("patch", "a"), 409);
        assert_eq!(log.writes().len(), 2);
        assert_eq!(log.by_user_agent("b/").len(), 1);
        let q = AuditQuery {
            writes_only: true,
            success_only: true,
            ..Default::default()
        };
        assert_eq!(log.query(&q).len(), 1);
        assert_eq!(log.entries()[2].seq, 2);
    }

    #[test]
    fn file_gets_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        let log = AuditLog::new(Some(&p), AuditFormat::Entries, Some(1)).unwrap();
        log.record(Utc::now(), rec("delete", "x"), 200);
        let text = std::fs::read_to_string(&p).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(v["verb"], "delete");
        assert_eq!(v["userAgent"], "x");
    }

    /// A refused write's event carries the error as kube-apiserver logs it: the Status's
    /// code, reason and message in `responseStatus` (at any level), the request object at
    /// `RequestResponse`. Before, `responseStatus` held the code alone, and `replay` could not
    /// give the controller's decision the error it got.
    #[test]
    fn a_refused_writes_event_carries_its_error_and_request() {
        let status = serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": "Internal error occurred: injected fault",
            "reason": "InternalError", "code": 500});
        let pod =
            serde_json::json!({"kind": "Pod", "metadata": {"generateName": "virt-launcher-a-"}});
        let r = AuditRecord {
            group: String::new(),
            request_object: Some(pod.clone()),
            response_object: Some(status.clone()),
            status: Some(status),
            ..rec("create", "virt-controller")
        };
        let e = k8s_event(0, Utc::now(), &r, 500).expect("a write is logged");
        assert_eq!(e["level"], "RequestResponse");
        assert_eq!(
            e["responseStatus"],
            serde_json::json!({"metadata": {}, "code": 500, "status": "Failure",
                "message": "Internal error occurred: injected fault", "reason": "InternalError"})
        );
        assert_eq!(e["requestObject"], pod);
        let ok = k8s_event(1, Utc::now(), &rec("create", "x"), 201).expect("logged");
        assert_eq!(
            ok["responseStatus"],
            serde_json::json!({"metadata": {}, "code": 201})
        );
    }

    /// The memory keeps the last `capacity` entries; `seq`, `len` and `since` still count
    /// every request, the file gets every one.
    #[test]
    fn memory_keeps_the_last_capacity_entries_and_the_file_all() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("audit.jsonl");
        let log = AuditLog::new(Some(&p), AuditFormat::Entries, Some(3)).unwrap();
        for i in 0..10 {
            log.record(
                Utc::now(),
                rec(if i % 2 == 0 { "get" } else { "patch" }, "a"),
                200,
            );
        }
        let seqs = |es: Vec<AuditEntry>| es.iter().map(|e| e.seq).collect::<Vec<_>>();
        assert_eq!(seqs(log.entries()), [7, 8, 9]);
        assert_eq!((log.len(), log.dropped()), (10, 7));
        assert_eq!(seqs(log.writes()), [7, 9]);
        let since = |s: u64| {
            seqs(log.query(&AuditQuery {
                since: Some(s),
                ..Default::default()
            }))
        };
        assert_eq!(since(2), [7, 8, 9], "older marks get what is kept");
        assert_eq!(since(9), [9]);
        assert!(since(10).is_empty());
        assert_eq!(std::fs::read_to_string(&p).unwrap().lines().count(), 10);
        let none = AuditLog::new(None, AuditFormat::Entries, Some(0)).unwrap();
        none.record(Utc::now(), rec("get", "a"), 200);
        assert_eq!(
            (none.len(), none.entries().len(), none.dropped()),
            (1, 0, 1)
        );
    }
}
