//! `replay FILE|DIR`: a flight recording ([`crate::flight`]) replayed through the controllers'
//! pure decisions. The cluster state is rebuilt line by line ([`state`]); at each recorded
//! reconcile the objects its snapshot held (by resourceVersion) go into a shadow [`Mirror`]
//! and the same decision the shadow runs is made again, with the expectations the reconcile
//! saw. The report says per VM what was decided and why, whether the recorded decision is the
//! one the decision functions make, and how the recorded writes went (docs/replay.md).

mod audit;
mod state;
mod text;

pub(crate) use audit::{AuditReplay, render_audit_text};
pub use text::render_text;

use crate::flight::{Body, Decided, Line, Reconcile, Write};
use crate::inspect::model::ExpectationView;
use crate::shadow::Mirror;
use chrono::{DateTime, Utc};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// [`Step::controller`] of a step that is a write of an audit log's controller.
pub(crate) const AUDIT_WRITE: &str = "audit";

/// How a replayed reconcile compares with the recorded one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The decision functions decide the recorded actions.
    Same,
    /// They decide other actions.
    Differ,
    /// The reconcile's inputs could not be rebuilt from the recording.
    NotReplayed,
}

/// One recorded reconcile, replayed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// The reconcile line's sequence number.
    pub seq: u64,
    /// The decision's clock.
    pub at: DateTime<Utc>,
    /// `vm` or `vmi`.
    pub controller: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The recorded decision's actions.
    pub recorded: Vec<String>,
    /// The replayed decision's actions (empty when not replayed).
    pub replayed: Vec<String>,
    /// Why, as the replayed decision says.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub why: Vec<String>,
    /// The objects the reconcile's snapshot held, `KIND namespace/name rv RV`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// The writes the reconcile made, `ACTION` or `ACTION (failed: ERROR)`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub writes: Vec<String>,
    /// The API server's answer to each of [`Step::writes`], in the same order: the object it
    /// returned (`KIND namespace/name rv RV`), `failed: ERROR`, or `accepted` (no object).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub answers: Vec<String>,
    /// The recorded writes are not the replayed decision's writes, in order (a failed write
    /// makes the controller decide again, so the rest differs).
    pub writes_differ: bool,
    /// What could not be rebuilt, or what was not compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The replayed reconciles of one VM key.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmReplay {
    /// `namespace/name`.
    pub key: String,
    /// In recorded order.
    pub steps: Vec<Step>,
}

/// The whole replay.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplayReport {
    /// Lines read.
    pub lines: usize,
    /// Reconciles replayed.
    pub reconciles: usize,
    /// Of those, decided the same.
    pub same: usize,
    /// Decided otherwise.
    pub differ: usize,
    /// Not replayed (inputs missing from the recording).
    pub not_replayed: usize,
    /// Lines whose object change could not be applied (its earlier version is missing).
    pub broken_versions: usize,
    /// The leadership terms and Events recorded, in order (`TIME WHAT`).
    pub timeline: Vec<String>,
    /// Per VM key.
    pub vms: Vec<VmReplay>,
}

/// A replayed file: a flight recording or an audit log.
pub(crate) enum Loaded {
    /// A flight recording (`run-controller --record DIR`), replayed.
    Recording(ReplayReport),
    /// A Kubernetes audit log, replayed.
    Audit(AuditReplay),
}

impl Loaded {
    /// Per VM key, its replayed steps: a recording's reconciles, or an audit log's compared
    /// and refused writes of the controller ([`AuditReplay::steps`]), in order.
    pub(crate) fn into_vms(self) -> Vec<VmReplay> {
        match self {
            Loaded::Recording(r) => r.vms,
            Loaded::Audit(a) => a.steps(),
        }
    }
}

/// Whose writes an audit log's replay compares (unused for a recording).
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuditSource<'a> {
    /// The controller Lease, `namespace/name`: its writer with a holder is the controller.
    pub lease: &'a str,
    /// A username or the start of a user agent naming the controller instead.
    pub controller: Option<&'a str>,
}

/// Read `path` and replay it, the one loader of `replay` and `inspect --replay`: a file whose
/// first line is an `audit.k8s.io/v1` Event is an audit log, anything else (a directory or one
/// segment) a flight recording. An error names the path and what is wrong with it.
pub(crate) fn load(path: &std::path::Path, source: AuditSource<'_>) -> Result<Loaded, String> {
    if !path.is_dir() {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        if audit::is_audit_log(&text) {
            let events = audit::read_audit_log(path, &text)?;
            let report = audit::replay_audit_log(&events, source.lease, source.controller);
            return Ok(Loaded::Audit(report));
        }
    }
    let lines = crate::flight::read_recording(path).map_err(|e| e.to_string())?;
    Ok(Loaded::Recording(replay(&lines)))
}

/// Replay `lines` (a recording, oldest first).
pub fn replay(lines: &[Line]) -> ReplayReport {
    let mut st = state::State::default();
    let mut report = ReplayReport {
        lines: lines.len(),
        ..Default::default()
    };
    let mut writes: HashMap<(String, String), Vec<Write>> = HashMap::new();
    let mut vms: BTreeMap<String, Vec<Step>> = BTreeMap::new();
    for line in lines {
        match &line.body {
            Body::Write(w) => {
                st.answer(w);
                writes
                    .entry((w.controller.clone(), w.key.clone()))
                    .or_default()
                    .push(w.as_ref().clone());
            }
            Body::Reconcile(r) => {
                let made = writes
                    .remove(&(r.controller.clone(), r.key.clone()))
                    .unwrap_or_default();
                let step = replay_one(&st, line.seq, r, &made);
                match step.verdict {
                    Verdict::Same => report.same += 1,
                    Verdict::Differ => report.differ += 1,
                    Verdict::NotReplayed => report.not_replayed += 1,
                }
                report.reconciles += 1;
                vms.entry(r.key.clone()).or_default().push(step);
            }
            Body::Lease { event, lease } => report.timeline.push(format!(
                "{} {event} {lease}",
                line.at.format("%H:%M:%S%.3f")
            )),
            Body::Event(e) => report.timeline.push(format!(
                "{} Event {} {} {}/{}: {}",
                line.at.format("%H:%M:%S%.3f"),
                e.reason,
                e.kind,
                e.namespace,
                e.name,
                e.message
            )),
            body => st.apply(body),
        }
    }
    report.broken_versions = st.broken;
    report.vms = vms
        .into_iter()
        .map(|(key, steps)| VmReplay { key, steps })
        .collect();
    report
}

fn expectation_views(r: &Reconcile) -> Vec<ExpectationView> {
    r.expectations
        .iter()
        .map(|e| ExpectationView {
            store: e.store.clone(),
            key: r.key.clone(),
            adds: e.adds,
            dels: e.dels,
            satisfied: e.satisfied,
            ..Default::default()
        })
        .collect()
}

/// The replayed decision's actions: (kind, is a write) and the reasons.
type Replayed = (Vec<(String, bool)>, Vec<String>);

fn decide(mirror: &Mirror, r: &Reconcile) -> Result<Replayed, String> {
    let (vm, vmi) = mirror.decisions(&r.key, r.now, &expectation_views(r))?;
    if r.controller == "vm" {
        let d = vm.ok_or("the VM is not among the inputs")?;
        let actions = d.actions.iter().map(|p| {
            let a = &p.action;
            (a.kind().to_string(), a.is_api_call())
        });
        let why = d.actions.iter().map(|p| p.why.clone()).collect();
        return Ok((actions.collect(), why));
    }
    let d = vmi.ok_or("the VMI is not among the inputs")?;
    if d.skipped.is_some() {
        return Ok((Vec::new(), d.explanation.clone()));
    }
    let name = crate::controller::vmi::flight::action_name;
    let actions = d.sync_actions.iter().map(|a| (name(a), false));
    let status = d.status_actions.iter().map(|a| (name(a), false));
    let sync_len = d.sync_actions.len();
    let mut all: Vec<(String, bool)> = actions.chain(status).collect();
    if r.sync_failed {
        all.truncate(sync_len);
    }
    for (kind, write) in &mut all {
        *write = !kind.starts_with("Event ");
    }
    Ok((all, d.explanation.clone()))
}

/// What the API server answered to a recorded write (see [`Step::answers`]).
fn answer(w: &Write) -> String {
    match (&w.error, &w.answer) {
        (Some(e), _) => format!("failed: {e}"),
        (None, Some(a)) => format!("{} {} rv {}", a.id.kind, a.id.key, a.version.rv),
        (None, None) => "accepted".into(),
    }
}

fn replay_one(st: &state::State, seq: u64, r: &Reconcile, made: &[Write]) -> Step {
    let mut recorded: Vec<String> = r
        .decided
        .iter()
        .map(|d: &Decided| d.action.clone())
        .collect();
    let writes: Vec<String> = made
        .iter()
        .map(|w| match &w.error {
            None => w.action.clone(),
            Some(e) => format!("{} (failed: {e})", w.action),
        })
        .collect();
    let mut step = Step {
        seq,
        at: r.now,
        controller: r.controller.clone(),
        verdict: Verdict::NotReplayed,
        recorded: recorded.clone(),
        replayed: Vec::new(),
        why: Vec::new(),
        inputs: r
            .inputs
            .iter()
            .map(|i| format!("{} {} rv {}", i.id.kind, i.id.key, i.rv))
            .collect(),
        writes,
        answers: made.iter().map(answer).collect(),
        writes_differ: false,
        note: None,
    };
    let mirror = match st.mirror(&r.inputs) {
        Ok(m) => m,
        Err(e) => {
            step.note = Some(e);
            return step;
        }
    };
    let (actions, why) = match decide(&mirror, r) {
        Ok(d) => d,
        Err(e) => {
            step.note = Some(e);
            return step;
        }
    };
    if r.sync_failed {
        recorded.truncate(actions.len());
        step.note = Some("the sync part failed: its status part is not compared".into());
    }
    let replayed: Vec<String> = actions.iter().map(|(k, _)| k.clone()).collect();
    let planned_writes: Vec<&str> = actions
        .iter()
        .filter(|(_, w)| *w)
        .map(|(k, _)| k.as_str())
        .collect();
    let written: Vec<&str> = made.iter().map(|w| w.action.as_str()).collect();
    step.writes_differ = written != planned_writes;
    step.verdict = if recorded == replayed {
        Verdict::Same
    } else {
        Verdict::Differ
    };
    step.replayed = replayed;
    step.why = why.into_iter().filter(|w| !w.is_empty()).collect();
    step
}

#[cfg(test)]
mod tests;
