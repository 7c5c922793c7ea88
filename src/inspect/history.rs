//! What the inspector remembers while it runs: a sample of the leader's state per gather
//! (about one a second) for the last few minutes, and the VMIs of the VM shown, so the terminal
//! UI can draw a queue burst that just passed, a Lease handover, and the runs before a restart.
//!
//! Pure and bounded: [`History::record_vm`] and [`History::record_fleet`] take what a gather
//! returned; at most [`SAMPLES_KEPT`] samples and [`RUNS_KEPT`] VMIs are kept. The render only
//! reads it.

use crate::inspect::model::{Fleet, Inspection, LeaseView, PhaseTransition, QueueView};
use chrono::{DateTime, Utc};
use std::collections::{BTreeMap, VecDeque};

/// Samples kept: five minutes at one a second.
pub(crate) const SAMPLES_KEPT: usize = 300;
/// VMIs of the VM shown kept (the current one and those before it).
pub(crate) const RUNS_KEPT: usize = 8;
/// Start backoffs kept.
pub(crate) const BACKOFFS_KEPT: usize = 8;
/// Gathers closer than this to the last sample are merged into it (`r` pressed twice).
const MERGE_WITHIN_SECONDS: f64 = 0.5;

/// One work queue at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct QueueSample {
    /// Keys waiting for a worker.
    pub depth: u64,
    /// Adds since the sample before (absent on the first sample or when the source does not
    /// count adds).
    pub adds: Option<u64>,
    /// The retries the Queues panel shows (this key's requeues in the VM view, the queue's
    /// in the fleet view); absent from samples taken for another VM or view.
    pub retries: Option<u64>,
}

/// The controller Lease at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) enum LeaseMark {
    /// Not read.
    #[default]
    Unknown,
    /// Held by the same holder as at the sample before.
    Held,
    /// Nobody holds it, or the holder's renewTime + leaseDurationSeconds has passed.
    Leaderless,
    /// Another holder than at the sample before (or `leaseTransitions` went up).
    Handover,
}

/// What the leader said at one gather.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Sample {
    /// When the gather finished.
    pub at: DateTime<Utc>,
    /// The VM and VMI queues by name.
    pub queues: BTreeMap<String, QueueSample>,
    /// Reconciles of the VM shown since the sample before, VM and VMI controller together (the
    /// leader keeps the last one per key: more than one in a second counts once); absent in the
    /// fleet view and on samples taken for another VM.
    pub reconciles: Option<u64>,
    /// Seconds since the Lease was last renewed.
    pub renew_age_seconds: Option<f64>,
    /// The Lease's holder, compared with the sample before.
    pub lease: LeaseMark,
}

/// One VMI of the VM shown, as last seen.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VmiRun {
    /// `metadata.uid` (empty when the VMI had none).
    pub uid: String,
    /// Its `status.phaseTransitionTimestamps`.
    pub transitions: Vec<PhaseTransition>,
    /// The last gather that saw it.
    pub last_seen: DateTime<Utc>,
}

impl VmiRun {
    /// When its first phase began.
    pub(crate) fn start(&self) -> Option<DateTime<Utc>> {
        self.transitions.iter().map(|t| t.timestamp).min()
    }
}

/// A start backoff the VM waited out (`status.startFailure`, vm.go:3361).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Backoff {
    /// When the failed start was seen: the failed VMI's final phase, else the gather.
    pub from: DateTime<Utc>,
    /// `retryAfterTimestamp`.
    pub until: DateTime<Utc>,
    /// `consecutiveFailCount`.
    pub failures: i64,
}

/// The inspector's memory (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct History {
    samples: VecDeque<Sample>,
    /// `namespace/name` of the VM the key-scoped parts are about; `None` for the fleet.
    scope: Option<String>,
    /// Samples taken in this scope.
    scope_samples: usize,
    last_adds: BTreeMap<String, u64>,
    last_reconciles: BTreeMap<String, DateTime<Utc>>,
    last_lease: Option<(Option<String>, Option<i32>)>,
    runs: Vec<VmiRun>,
    current_run: Option<String>,
    backoffs: Vec<Backoff>,
}

impl History {
    /// The samples, oldest first.
    pub(crate) fn samples(&self) -> &VecDeque<Sample> {
        &self.samples
    }

    /// The VMIs seen of the VM shown, oldest first; the last is the current one when
    /// [`History::current_run`] says so.
    pub(crate) fn runs(&self) -> &[VmiRun] {
        &self.runs
    }

    /// The uid of the VMI that exists now, if one does.
    pub(crate) fn current_run(&self) -> Option<&str> {
        self.current_run.as_deref()
    }

    /// The start backoffs seen, oldest first.
    pub(crate) fn backoffs(&self) -> &[Backoff] {
        &self.backoffs
    }

    /// A gather of one VM: a sample, and its VMI and start backoff.
    pub(crate) fn record_vm(&mut self, insp: &Inspection) {
        self.enter_scope(Some(format!("{}/{}", insp.namespace, insp.name)));
        self.record_runs(insp);
        let reconciles = self.reconciles_since_last(insp);
        self.push(
            insp.generated_at,
            &insp.queues,
            insp.lease.as_ref(),
            reconciles,
        );
    }

    /// A gather of the fleet: a sample of the queues and the Lease.
    pub(crate) fn record_fleet(&mut self, fleet: &Fleet) {
        self.enter_scope(None);
        self.push(
            fleet.generated_at,
            &fleet.queues,
            fleet.lease.as_ref(),
            None,
        );
    }

    /// Another VM (or the fleet): what was about the last one goes; the controller's history
    /// stays.
    fn enter_scope(&mut self, scope: Option<String>) {
        if self.scope == scope {
            return;
        }
        self.scope = scope;
        self.scope_samples = 0;
        for s in &mut self.samples {
            s.reconciles = None;
            for q in s.queues.values_mut() {
                q.retries = None;
            }
        }
        self.last_reconciles.clear();
        self.runs.clear();
        self.current_run = None;
        self.backoffs.clear();
    }

    fn reconciles_since_last(&mut self, insp: &Inspection) -> Option<u64> {
        let mut n = 0;
        for r in &insp.last_reconciles {
            let before = self.last_reconciles.insert(r.controller.clone(), r.at);
            // The first gather's records happened before the inspector started.
            if self.scope_samples > 0 && before != Some(r.at) {
                n += 1;
            }
        }
        Some(n)
    }

    fn lease_mark(&mut self, lease: Option<&LeaseView>) -> LeaseMark {
        let Some(l) = lease else {
            return LeaseMark::Unknown;
        };
        let now = (l.holder_identity.clone(), l.lease_transitions);
        let before = self.last_lease.replace(now.clone());
        if l.holder_identity.is_none() || l.stale {
            return LeaseMark::Leaderless;
        }
        match before {
            Some((holder, transitions)) if holder != now.0 || now.1 > transitions => {
                LeaseMark::Handover
            }
            _ => LeaseMark::Held,
        }
    }

    fn push(
        &mut self,
        at: DateTime<Utc>,
        queues: &[QueueView],
        lease: Option<&LeaseView>,
        reconciles: Option<u64>,
    ) {
        let mut sample = Sample {
            at,
            queues: BTreeMap::new(),
            reconciles,
            renew_age_seconds: lease.and_then(|l| l.renew_age_seconds),
            lease: self.lease_mark(lease),
        };
        for q in queues {
            let adds = q.adds_total.and_then(|total| {
                let before = self.last_adds.insert(q.name.clone(), total)?;
                // Fewer than before: a new queue (a new leadership term) counting from 0.
                Some(if total >= before {
                    total - before
                } else {
                    total
                })
            });
            sample.queues.insert(
                q.name.clone(),
                QueueSample {
                    depth: q.depth,
                    adds,
                    retries: Some(q.retries),
                },
            );
        }
        self.scope_samples += 1;
        match self.samples.back_mut() {
            Some(last) if seconds(at - last.at).abs() < MERGE_WITHIN_SECONDS => merge(last, sample),
            _ => {
                self.samples.push_back(sample);
                while self.samples.len() > SAMPLES_KEPT {
                    self.samples.pop_front();
                }
            }
        }
    }

    fn record_runs(&mut self, insp: &Inspection) {
        self.current_run = None;
        if let Some(vmi) = &insp.vmi {
            let uid = vmi.uid.clone().unwrap_or_default();
            match self.runs.iter_mut().find(|r| r.uid == uid) {
                Some(run) => {
                    run.transitions = vmi.phase_transitions.clone();
                    run.last_seen = insp.generated_at;
                }
                None => {
                    self.runs.push(VmiRun {
                        uid: uid.clone(),
                        transitions: vmi.phase_transitions.clone(),
                        last_seen: insp.generated_at,
                    });
                    if self.runs.len() > RUNS_KEPT {
                        self.runs.remove(0);
                    }
                }
            }
            self.current_run = Some(uid);
        }
        let failure = insp.vm.as_ref().and_then(|vm| vm.start_failure.as_ref());
        if let Some((f, until)) = failure.and_then(|f| f.retry_after.map(|u| (f, u))) {
            if self.backoffs.last().is_some_and(|b| b.until == until) {
                return;
            }
            let from = self
                .runs
                .last()
                .and_then(|r| r.transitions.last())
                .filter(|t| is_final(&t.phase))
                .map(|t| t.timestamp)
                .unwrap_or(insp.generated_at);
            self.backoffs.push(Backoff {
                from: from.min(until),
                until,
                failures: f.consecutive_fail_count,
            });
            if self.backoffs.len() > BACKOFFS_KEPT {
                self.backoffs.remove(0);
            }
        }
    }
}

/// Whether a VMI phase is final (`Succeeded`, `Failed`).
pub(crate) fn is_final(phase: &str) -> bool {
    matches!(phase, "Succeeded" | "Failed")
}

fn seconds(d: chrono::TimeDelta) -> f64 {
    d.num_milliseconds() as f64 / 1000.0
}

/// `next`, taken within [`MERGE_WITHIN_SECONDS`] of `last`, folded into it: the counts add
/// up, the levels are the newer, the Lease keeps the more notable mark.
fn merge(last: &mut Sample, next: Sample) {
    let add = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    for (name, q) in next.queues {
        let before = last.queues.get(&name).and_then(|b| b.adds);
        last.queues.insert(
            name,
            QueueSample {
                adds: add(before, q.adds),
                ..q
            },
        );
    }
    last.reconciles = add(last.reconciles, next.reconciles);
    last.renew_age_seconds = next.renew_age_seconds;
    last.lease = last.lease.max(next.lease);
    last.at = next.at;
}

#[cfg(test)]
#[path = "history_tests.rs"]
mod tests;
