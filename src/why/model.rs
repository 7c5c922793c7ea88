//! What `why vm/NAME` reports: the VM's recent runs (one per VMI), how each ended and why,
//! each link of the chain with its evidence. `-o json` prints [`WhyReport`] as it is; the text
//! output draws the same value.

use crate::inspect::model::Missing;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The causal timeline of one VM.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhyReport {
    /// The VM's namespace.
    pub namespace: String,
    /// The VM's name.
    pub name: String,
    /// When the reads finished.
    pub now: DateTime<Utc>,
    /// `spec.runStrategy` as KubeVirt folds it (`running: true` is `Always`), or the error.
    pub run_strategy: String,
    /// `status.printableStatus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    /// The controller Lease as read, in a sentence (holder, last renewal, expired or not).
    pub leader: String,
    /// The VM's runs, oldest first: one per VMI whose trace survives.
    pub runs: Vec<Run>,
    /// What holds now and what the controller does next, each with its evidence.
    pub now_chain: Vec<Link>,
    /// Known upstream defects that match the VM's present state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defects: Vec<Defect>,
    /// What could not be known from what survives in the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
    /// Reads that failed, with the reason.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

/// One VMI of the VM: its start, phases and end.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    /// The VMI's uid, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi_uid: Option<String>,
    /// Whether the VMI still exists.
    pub vmi_exists: bool,
    /// When it started (its creation, or the first trace of it), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<DateTime<Utc>>,
    /// Its virt-launcher pods, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pods: Vec<String>,
    /// The node it ran on, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `status.phaseTransitionTimestamps` (only while the VMI exists).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phases: Vec<PhaseAt>,
    /// The last phase known (`status.phase`, or from the events that survive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub final_phase: Option<String>,
    /// How the run ended; `None` while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<End>,
}

/// One phase transition.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseAt {
    /// The phase.
    pub phase: String,
    /// When the VMI entered it.
    pub at: DateTime<Utc>,
}

/// What ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Cause {
    /// The launcher pod's container was OOM-killed.
    OomKilled,
    /// The node is gone (PodGC failed the pod, or the Node object no longer exists).
    NodeLost,
    /// The node is not Ready (taint eviction, NotReady).
    NodeNotReady,
    /// The launcher pod was evicted (Eviction API, node pressure).
    Evicted,
    /// virt-handler reported the guest crashed (VMI `Failed`).
    GuestCrashed,
    /// The guest shut down by itself (VMI `Succeeded`).
    GuestShutdown,
    /// The launcher pod failed (a non-zero exit that is not an OOM kill).
    LauncherFailed,
    /// The VMI failed before it ever ran (`status.startFailure`).
    StartFailure,
    /// The VM controller deleted a VMI that had not ended: a stop was asked for.
    StopRequested,
    /// The VMI is being deleted now.
    Deleting,
    /// Nothing that survives says.
    #[default]
    Unknown,
}

/// How one run ended, with the chain of causes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct End {
    /// When, as closely as known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<DateTime<Utc>>,
    /// The first cause.
    pub cause: Cause,
    /// The chain, first cause first, each link with its evidence.
    pub chain: Vec<Link>,
    /// The whole chain in one plain sentence.
    pub sentence: String,
    /// Known upstream defects that match this end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub defects: Vec<Defect>,
    /// What could not be known about this end.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

/// One link of a chain: a claim and what shows it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Link {
    /// What happened.
    pub claim: String,
    /// The fields and events that show it (`Pod/x status…: …`, `Event …`).
    pub evidence: Vec<String>,
}

/// A known upstream defect that matches.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Defect {
    /// Stable machine name.
    pub id: String,
    /// What matches here.
    pub message: String,
    /// The upstream issue or change.
    pub upstream: String,
    /// Where it is fixed.
    pub fixed_in: String,
}
