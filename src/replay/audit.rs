//! `replay AUDIT_LOG`: a Kubernetes audit log (`audit.k8s.io/v1` Events, one a line) replayed
//! through the shadow's comparison ([`crate::shadow::replay_audit`]): per VM, each write the
//! controller made, which of our actions it is and whether our decision from the state just
//! before it writes the same (docs/replay.md).

use crate::shadow::{AuditOptions, Part, ShadowReport, Verdict, replay_audit};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Whether the first line of `text` is an `audit.k8s.io/v1` Event.
pub(crate) fn is_audit_log(text: &str) -> bool {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    serde_json::from_str::<Value>(first)
        .is_ok_and(|v| v["apiVersion"] == "audit.k8s.io/v1" && v["kind"] == "Event")
}

/// The Events of the audit log at `path`; a line that is not one is an error naming it (the
/// last line cut short, as a server stopped while writing it leaves, is left out).
pub(crate) fn read_audit_log(path: &Path, text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v["apiVersion"] == "audit.k8s.io/v1" && v["kind"] == "Event" => out.push(v),
            Ok(_) => {
                return Err(format!(
                    "{}:{}: not an audit.k8s.io/v1 Event",
                    path.display(),
                    i + 1
                ));
            }
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => {}
            Err(e) => return Err(format!("{}:{}: {e}", path.display(), i + 1)),
        }
    }
    Ok(out)
}

/// One compared write of the controller.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditStep {
    /// The audit event's line in the log (from 1).
    pub line: usize,
    /// When the server received it.
    pub at: DateTime<Utc>,
    /// The written object's kind.
    pub kind: &'static str,
    /// Its `namespace/name`.
    pub key: String,
    /// `main` or `status`.
    pub part: &'static str,
    /// How our decision compares.
    pub verdict: Verdict,
    /// Our action it is (absent: we would not write it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub action: Option<&'static str>,
    /// The request's verb.
    #[serde(skip)]
    pub verb: String,
    /// Where our write and the controller's differ, `PATH: ours VALUE, theirs VALUE`.
    #[serde(skip)]
    pub paths: Vec<String>,
    /// The VM's objects before the write (kept for a write that does not agree),
    /// `KIND namespace/name rv RV`.
    #[serde(skip)]
    pub state: Vec<String>,
    /// The object the server answered, `KIND namespace/name rv RV` (`accepted`: none).
    #[serde(skip)]
    pub answer: String,
}

/// A write of the controller the server refused (not compared: it changed nothing).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditRefused {
    /// The audit event's line in the log (from 1).
    pub line: usize,
    /// When the server answered.
    pub at: DateTime<Utc>,
    /// The VM key whose reconcile made it.
    pub vm_key: String,
    /// The request's verb.
    pub verb: String,
    /// The object's kind.
    pub kind: &'static str,
    /// Its `namespace/name` (no name: one the server was to generate).
    pub key: String,
    /// The answer's `responseStatus.code`.
    pub code: u16,
    /// Its `reason` (empty when the log has none).
    pub reason: String,
    /// Its `message`, the error as the controller's client gave it.
    pub message: String,
    /// One of our actions makes this write: the rest of its reconcile was decided from the
    /// error, as the controller decided it.
    pub decided_from_error: bool,
}

/// The compared writes of one VM key.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct AuditVm {
    /// `namespace/name`.
    pub key: String,
    /// In the order they were decided.
    pub writes: Vec<AuditStep>,
}

/// `replay` of an audit log.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct AuditReplay {
    /// Events read.
    pub events: usize,
    /// Writes of the kinds rebuilt (VMs, VMIs, pods, ControllerRevisions, DataVolumes, PVCs,
    /// Leases, KubeVirt CRs), anyone's.
    pub writes: usize,
    /// The users taken as the controller, `USERNAME (USER-AGENT)`, in the order they led.
    pub controllers: Vec<String>,
    /// The controller's writes the server refused (they changed nothing; not compared).
    pub failed_writes: usize,
    /// Writes whose event holds no object (logged below `RequestResponse`): not rebuilt.
    pub without_object: usize,
    /// The controller's writes not compared: they changed nothing, deleted an object already
    /// being deleted, wrote an object of no VM, or were logged after a newer write of it.
    pub uncompared_writes: usize,
    /// The first VMI created came back without virt-api's finalizer: the cluster runs no
    /// virt-api, and our decisions add that finalizer as the controller then does.
    pub without_virt_api: bool,
    /// The shadow's summary of the compared writes.
    pub comparison: ShadowReport,
    /// Per VM key.
    pub vms: Vec<AuditVm>,
    /// The controller's refused writes of a VM, in log order.
    pub refused_writes: Vec<AuditRefused>,
}

impl AuditReplay {
    /// Whether a compared write is not the one our decision makes.
    pub(crate) fn differs(&self) -> bool {
        let c = &self.comparison;
        c.decisions > c.agree + c.agree_later + c.agree_earlier
    }
}

/// Replay `events`; `controller` names the controller's user (username or user-agent
/// prefix), else the writer of Lease `lease` (`namespace/name`) with a holder is taken.
pub(crate) fn replay_audit_log(
    events: &[Value],
    lease: &str,
    controller: Option<&str>,
) -> AuditReplay {
    let opts = AuditOptions {
        lease,
        controller,
        settings: Default::default(),
    };
    let run = replay_audit(events, &opts);
    let mut vms: BTreeMap<String, Vec<AuditStep>> = BTreeMap::new();
    for r in &run.run.records {
        let index = usize::try_from(r.change)
            .ok()
            .and_then(|c| run.changes.get(c.wrapping_sub(1)))
            .copied();
        let event = index.and_then(|i| events.get(i));
        vms.entry(r.vm_key.clone()).or_default().push(AuditStep {
            line: index.map_or(0, |i| i + 1),
            at: r.seen,
            kind: r.kind.as_str(),
            key: r.key.clone(),
            part: match r.part {
                Part::Main => "main",
                Part::Status => "status",
            },
            verdict: r.verdict,
            action: r.action,
            verb: event
                .map_or("", |e| e["verb"].as_str().unwrap_or(""))
                .to_string(),
            paths: r.paths.iter().map(path_text).collect(),
            state: r.state_before.iter().map(version_of).collect(),
            answer: event
                .and_then(|e| e.get("responseObject"))
                .filter(|o| o.get("metadata").is_some() && o["kind"] != "Status")
                .map_or_else(|| "accepted".to_string(), version_of),
        });
    }
    let refused_writes = run
        .refused
        .iter()
        .map(|r| AuditRefused {
            line: r.event + 1,
            at: r.at,
            vm_key: r.vm_key.clone(),
            verb: r.verb.clone(),
            kind: r.kind.as_str(),
            key: r.key.clone(),
            code: r.error.code,
            reason: r.error.reason.clone(),
            message: r.error.message.clone(),
            decided_from_error: r.ours,
        })
        .collect();
    AuditReplay {
        events: events.len(),
        writes: run.writes,
        controllers: run.controllers.iter().map(ToString::to_string).collect(),
        failed_writes: run.failed,
        without_object: run.without_object,
        uncompared_writes: run.uncompared,
        without_virt_api: run.without_virt_api,
        comparison: run.run.report,
        vms: vms
            .into_iter()
            .map(|(key, writes)| AuditVm { key, writes })
            .collect(),
        refused_writes,
    }
}

/// `KIND namespace/name rv RV` of an object.
fn version_of(obj: &Value) -> String {
    let meta = |f: &str| obj["metadata"][f].as_str().unwrap_or("").to_string();
    format!(
        "{} {}/{} rv {}",
        obj["kind"].as_str().unwrap_or("?"),
        meta("namespace"),
        meta("name"),
        meta("resourceVersion")
    )
}

/// One differing path, `PATH: ours VALUE, theirs VALUE` (a long value cut).
fn path_text(d: &crate::shadow::PathDiff) -> String {
    let value = |v: &Option<Value>| {
        let s = v.as_ref().map_or("absent".to_string(), Value::to_string);
        match s.char_indices().nth(160) {
            Some((cut, _)) => format!("{}…", &s[..cut]),
            None => s,
        }
    };
    format!(
        "{}: ours {}, theirs {}",
        d.path,
        value(&d.ours),
        value(&d.theirs)
    )
}

/// What a verdict says of a write of the controller.
fn verdict_why(v: Verdict) -> &'static str {
    match v {
        Verdict::Agree => "agree: our decision from the state just before it makes this write",
        Verdict::AgreeLater => {
            "agree-later: our decision makes it once the next changes of the VM's objects are in (the controller saw them first)"
        }
        Verdict::AgreeEarlier => {
            "agree-earlier: our decision from a state a few changes before it makes it (the controller's cache was behind the server)"
        }
        Verdict::Differ => "differ: our decision writes this object otherwise",
        Verdict::WeWouldWriteMore => "we-would-write-more: our write of this object changes more",
        Verdict::WeWouldNotWrite => "we-would-not-write: no decision of ours makes this write",
    }
}

impl AuditReplay {
    /// Per VM key, the controller's compared and refused writes as replay steps, in log order
    /// (the view `inspect --replay` steps through): a compared write is `same` when it agrees
    /// (now, later or earlier), else `differ`, with the differing paths and the state before
    /// it; a refused one is `same` when our decision makes it (the rest of its reconcile is then
    /// decided from its error), else `not-replayed`.
    pub(crate) fn steps(&self) -> Vec<super::VmReplay> {
        let mut by_vm: BTreeMap<String, Vec<super::Step>> = BTreeMap::new();
        for vm in &self.vms {
            let steps = by_vm.entry(vm.key.clone()).or_default();
            steps.extend(vm.writes.iter().map(compared_step));
        }
        for r in &self.refused_writes {
            by_vm
                .entry(r.vm_key.clone())
                .or_default()
                .push(refused_step(r));
        }
        by_vm
            .into_iter()
            .map(|(key, mut steps)| {
                steps.sort_by_key(|s| s.seq);
                super::VmReplay { key, steps }
            })
            .collect()
    }
}

fn compared_step(w: &AuditStep) -> super::Step {
    let agrees = matches!(
        w.verdict,
        Verdict::Agree | Verdict::AgreeLater | Verdict::AgreeEarlier
    );
    let write = format!("{} {} {}", w.verb, w.kind, w.key);
    let mut why = vec![verdict_why(w.verdict).to_string()];
    why.extend(w.paths.iter().cloned());
    super::Step {
        seq: w.line as u64,
        at: w.at,
        controller: super::AUDIT_WRITE.into(),
        verdict: if agrees {
            super::Verdict::Same
        } else {
            super::Verdict::Differ
        },
        recorded: vec![format!("{write} ({})", w.part)],
        replayed: w.action.map(|a| vec![a.to_string()]).unwrap_or_default(),
        why,
        inputs: w.state.clone(),
        writes: vec![write],
        answers: vec![w.answer.clone()],
        writes_differ: false,
        note: None,
    }
}

fn refused_step(r: &AuditRefused) -> super::Step {
    let write = format!("{} {} {}", r.verb, r.kind, r.key);
    let error = format!("{} {}: {}", r.code, r.reason, r.message);
    let then = if r.decided_from_error {
        "one of our actions makes this write: the rest of its reconcile is decided from this error, as the controller's is"
    } else {
        "none of our actions makes this write: the writes after it are decided without its error"
    };
    super::Step {
        seq: r.line as u64,
        at: r.at,
        controller: super::AUDIT_WRITE.into(),
        verdict: if r.decided_from_error {
            super::Verdict::Same
        } else {
            super::Verdict::NotReplayed
        },
        recorded: vec![write.clone()],
        replayed: Vec::new(),
        why: vec![format!("refused: {error}"), then.to_string()],
        inputs: Vec::new(),
        writes: vec![write],
        answers: vec![format!("failed: {error}")],
        writes_differ: false,
        note: Some("refused by the API server: not compared (it changed nothing)".into()),
    }
}

/// The audit replay as text: the counts and controllers, per VM each compared write, then the
/// shadow's summary with every write that did not agree.
pub(crate) fn render_audit_text(r: &AuditReplay) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replayed {} audit events ({} writes of the kinds rebuilt); the controller: {}",
        r.events,
        r.writes,
        if r.controllers.is_empty() {
            "not identified (no Lease write with a holder)".to_string()
        } else {
            r.controllers.join(", then ")
        }
    );
    if r.failed_writes > 0 {
        let from_error = r
            .refused_writes
            .iter()
            .filter(|w| w.decided_from_error)
            .count();
        let _ = writeln!(
            out,
            "{} of the controller's writes failed (not compared); after {from_error} of them, our decision is made from the server's error as the controller's was",
            r.failed_writes
        );
    }
    if r.uncompared_writes > 0 {
        let _ = writeln!(
            out,
            "{} of the controller's writes changed nothing, or were logged after a newer write of the object (not compared)",
            r.uncompared_writes
        );
    }
    if r.without_virt_api {
        let _ = writeln!(
            out,
            "the first VMI created has no kubevirt.io/foregroundDeleteVirtualMachine finalizer: no virt-api, decided as --without-virt-api"
        );
    }
    if r.without_object > 0 {
        let _ = writeln!(
            out,
            "{} writes hold no object (not logged at RequestResponse level): the state may be incomplete",
            r.without_object
        );
    }
    for vm in &r.vms {
        let _ = writeln!(out, "\nVM {}", vm.key);
        for w in &vm.writes {
            let _ = writeln!(
                out,
                "  {} {:<19} {} {} ({}){}",
                w.at.format("%H:%M:%S%.3f"),
                w.verdict.as_str(),
                w.kind,
                w.key,
                w.part,
                w.action.map(|a| format!(": {a}")).unwrap_or_default()
            );
        }
    }
    let _ = write!(out, "\n{}", r.comparison.text());
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shadow::{Kind, Mirror};
    use serde_json::json;

    /// An audit Event: `user` wrote `answer` (a VM or VMI of namespace `ns`) with `verb`.
    fn event(user: &str, verb: &str, answer: &Value) -> Value {
        let (resource, subresource) = match answer["kind"].as_str() {
            Some("VirtualMachineInstance") => ("virtualmachineinstances", ""),
            Some("Lease") => ("leases", ""),
            _ if verb == "update" => ("virtualmachines", "status"),
            _ => ("virtualmachines", ""),
        };
        let group = if resource == "leases" {
            "coordination.k8s.io"
        } else {
            "kubevirt.io"
        };
        json!({"kind": "Event", "apiVersion": "audit.k8s.io/v1", "stage": "ResponseComplete",
            "verb": verb, "userAgent": user, "user": {"username": user},
            "objectRef": {"apiGroup": group, "resource": resource, "subresource": subresource,
                "namespace": "ns", "name": answer["metadata"]["name"]},
            "responseStatus": {"code": 200},
            "stageTimestamp": "2026-12-05T10:00:00.000000Z", "responseObject": answer})
    }

    fn vm() -> Value {
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "a", "namespace": "ns", "uid": "vm-uid", "resourceVersion": "2",
                "generation": 1, "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
                "annotations": {"kubevirt.io/latest-observed-api-version": "v1",
                    "kubevirt.io/storage-observed-api-version": "v1"}},
            "spec": {"runStrategy": "Always", "template": {"spec": {"domain": {"devices": {},
                "resources": {"requests": {"memory": "128Mi"}}}}}}})
    }

    fn vmi(rv: u64, phase: &str, labels: usize) -> Value {
        let labels: serde_json::Map<String, Value> =
            (0..labels).map(|i| (format!("l{i}"), json!("x"))).collect();
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "a", "namespace": "ns", "uid": "vmi-uid",
                "resourceVersion": rv.to_string(), "labels": labels,
                "annotations": {"kubevirt.io/vm-generation": "1"},
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                    "name": "a", "uid": "vm-uid", "controller": true}]},
            "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "128Mi"}}}},
            "status": {"phase": phase, "nodeName": "node-1"}})
    }

    /// The VM status our decision writes when the VM's VMI is `vmi`, at resourceVersion `rv`.
    fn vm_status_from(vmi: &Value, rv: u64) -> Value {
        let mut m = Mirror::default();
        m.set(Kind::VirtualMachine, "ns/a", Some(vm()));
        m.set(Kind::VirtualMachineInstance, "ns/a", Some(vmi.clone()));
        let mut status = m
            .decide("ns/a", Utc::now())
            .expect("decides")
            .iter()
            .find(|w| w.action == "UpdateVmStatus")
            .and_then(|w| w.apply(Some(&vm())).ok().flatten())
            .expect("a VM status write");
        status["metadata"]["resourceVersion"] = json!(rv.to_string());
        status
    }

    /// A log where the controller writes the VM status it decided while the VMI was
    /// `Scheduled`, after the VMI became `Running` and then had `relabels` more changes (its
    /// labels, which the VM status does not read): the verdicts of the controller's writes.
    fn replayed_with_changes_between(relabels: usize) -> Vec<Verdict> {
        let lease = json!({"kind": "Lease", "metadata": {"name": "ctl"},
            "spec": {"holderIdentity": "ctl-0"}});
        let scheduled = vmi(3, "Scheduled", 0);
        let mut events = vec![
            event("ctl", "update", &lease),
            event("kubectl", "create", &vm()),
            event("handler", "create", &scheduled),
            event("handler", "update", &vmi(4, "Running", 0)),
        ];
        let mut rv = 4;
        for i in 1..=relabels {
            rv += 1;
            events.push(event("handler", "update", &vmi(rv, "Running", i)));
        }
        // The controller's cache still held the Scheduled VMI when it decided.
        let status = vm_status_from(&scheduled, rv + 1);
        assert_ne!(
            status,
            vm_status_from(&vmi(rv, "Running", relabels), rv + 1),
            "the VM status depends on the VMI's phase"
        );
        events.push(event("ctl", "update", &status));
        let r = replay_audit_log(&events, "ns/ctl", None);
        r.vms
            .iter()
            .flat_map(|v| v.writes.iter())
            .map(|w| w.verdict)
            .collect()
    }

    /// A write that no decision from the state just before it makes, but one from a state a
    /// few changes before it does (the controller's cache was behind): `agree-earlier`. Without
    /// the look-back it would be `differ`.
    #[test]
    fn a_write_decided_from_a_cache_behind_the_server_agrees_earlier() {
        assert_eq!(replayed_with_changes_between(0), [Verdict::AgreeEarlier]);
        // The state it was decided from is the 16th change back: still found.
        assert_eq!(replayed_with_changes_between(15), [Verdict::AgreeEarlier]);
    }

    /// The look-back goes 16 changes of the VM's objects back, no further: a write decided
    /// from the 17th state back differs.
    #[test]
    fn a_write_that_matches_nothing_within_16_changes_differs() {
        assert_eq!(replayed_with_changes_between(16), [Verdict::Differ]);
    }
}
