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
    /// The shadow's summary of the compared writes.
    pub comparison: ShadowReport,
    /// Per VM key.
    pub vms: Vec<AuditVm>,
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
        vms.entry(r.vm_key.clone()).or_default().push(AuditStep {
            at: r.seen,
            kind: r.kind.as_str(),
            key: r.key.clone(),
            part: match r.part {
                Part::Main => "main",
                Part::Status => "status",
            },
            verdict: r.verdict,
            action: r.action,
        });
    }
    AuditReplay {
        events: events.len(),
        writes: run.writes,
        controllers: run.controllers.iter().map(ToString::to_string).collect(),
        failed_writes: run.failed,
        without_object: run.without_object,
        uncompared_writes: run.uncompared,
        comparison: run.run.report,
        vms: vms
            .into_iter()
            .map(|(key, writes)| AuditVm { key, writes })
            .collect(),
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
        let _ = writeln!(
            out,
            "{} of the controller's writes failed (not compared)",
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
