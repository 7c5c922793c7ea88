//! What-if: the controllers' decisions and the launcher pod for a change to a VM, before it is
//! applied. Nothing is written anywhere: the change is applied to a copy of the gathered VM and
//! the same pure functions `inspect` uses run on both states.
//!
//! - The change ([`Change`]): JSON merge patches (RFC 7386, `json_patch::merge`), `--set
//!   path=value` edits, and a start/stop/restart request applied as virt-api's subresources
//!   would (`parse::apply_request`: the handlers' decision is [`crate::lifecycle::decide`], the same
//!   `start`/`stop`/`restart` use). A spec change bumps `metadata.generation`, as the API server
//!   does for a resource with a status subresource.
//! - The decisions: [`super::analyze::analyze`] (and so [`super::analyze::decide_next`], the VM
//!   and VMI controllers' own `decide`) on the gathered state and on the changed one; the
//!   `RestartRequired` condition is the one the VM decision writes
//!   ([`crate::controller::vm::restart_required`], vm.go:2989-3065), with the cluster's
//!   `vmRolloutStrategy` ([`crate::config::ClusterSettings::vm_rollout_strategy_live_update`]).
//! - The launcher pod: [`crate::controller::vm::setup_vmi_from_vm`] on the changed VM, rendered by
//!   [`crate::controller::vmi::executor::render_pod_with`], its overhead by
//!   [`crate::launcher::explain::explain`], compared with the running pod.
//! - The fit: the rendered pod's requests against each node's allocatable resources.
//!
//! Split as `inspect` is: `parse.rs` reads the change and applies it to a copy of the VM,
//! `gather.rs` does the reads ([`gather_what_if`], or a manifest), `analyze.rs` is the pure
//! evaluation ([`what_if`], which the terminal UI calls on the `Gathered` it holds), this file
//! holds the result ([`WhatIf`]), and `text.rs` is its view model: kinded lines per section
//! ([`text_lines`]), printed by [`render_text`] and styled by the terminal UI.

mod analyze;
mod gather;
mod parse;
mod text;

pub(crate) use analyze::{term_changes, what_if};
pub(crate) use gather::{gather_what_if, gathered_from_manifest};
pub(crate) use parse::{Change, ChangeError};
pub(crate) use parse::{apply_change, parse_change_line, parse_patch, parse_request, parse_set};
pub(crate) use text::TextKind;
pub(crate) use text::{render_text, text_lines};

pub(crate) use crate::api::quantity::human_bytes;

use crate::inspect::model::{FieldChange, Missing, PlannedActionView};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What-if of one change to one VM.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WhatIf {
    /// The clock of the gathered state.
    pub generated_at: DateTime<Utc>,
    /// The VM's namespace.
    pub namespace: String,
    /// The VM's name.
    pub name: String,
    /// The change, one line per step.
    pub change: Vec<String>,
    /// Every field the change moves: `path`, value before, value after.
    pub changed_fields: Vec<FieldChange>,
    /// The controllers now and after the change.
    pub before: DecisionSide,
    /// The controllers after the change.
    pub after: DecisionSide,
    /// What the change leads to, one line each (`would delete VMI vm-a`, `RestartRequired`, ...).
    pub outcome: Vec<String>,
    /// The cluster's rollout strategy and what it means for this change.
    pub rollout: Rollout,
    /// The launcher pod the changed VM renders, against the running pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodDiff>,
    /// Whether that pod fits a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fit: Option<FitCheck>,
    /// What could not be had or derived.
    #[serde(default)]
    pub missing: Vec<Missing>,
}

/// The controllers' decision on one side.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DecisionSide {
    /// One line (the `inspect` next-decision summary).
    pub summary: String,
    /// The planned actions of both controllers, with KubeVirt source lines.
    pub actions: Vec<PlannedActionView>,
    /// The VM status the sync writes has `RestartRequired=True`.
    pub restart_required: bool,
    /// That condition's message: the template comparison's, or a live-update handler's (a
    /// socket count above `maxSockets`, memory not hot-pluggable, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_required_message: Option<String>,
    /// The sync error (`reason: message`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_error: Option<String>,
    /// `printableStatus` the rules give.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
}

/// The rollout strategy and this change.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// `LiveUpdate` or `Stage` (KubeVirt CR `spec.configuration.vmRolloutStrategy`).
    pub strategy: String,
    /// Changed template fields that `LiveUpdate` applies to a running VMI (CPU sockets,
    /// `memory.guest`, nodeSelector, affinity, tolerations).
    #[serde(default)]
    pub live_updatable_changes: Vec<String>,
    /// Compared with the running VMI's spec, the change alone needs a restart under the
    /// cluster's strategy (`None`: no VMI runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change_needs_restart: Option<bool>,
    /// One line: which of live update or RestartRequired applies, and why.
    pub summary: String,
}

/// One value that differs between the running and the rendered pod.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ValueChange {
    /// `requests.memory` (compute container), a label or annotation key.
    pub name: String,
    /// Before (absent: not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    /// After (absent: not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
    /// After − before, for quantities (bytes, or millicores for `cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<i64>,
}

/// One overhead term before and after.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TermChange {
    /// Term name (`videoRam`).
    pub name: String,
    /// Bytes before.
    pub before_bytes: i64,
    /// Bytes after.
    pub after_bytes: i64,
    /// After − before.
    pub delta_bytes: i64,
    /// Why the term has its value after the change.
    pub reason: String,
}

/// The launcher pod the changed VM renders, against the running pod.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodDiff {
    /// What "before" is: `pod/NAME` (running), or `rendered from the current VM`.
    pub before_source: String,
    /// `compute` memory request before, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_request_before_bytes: Option<i64>,
    /// `compute` memory request of the rendered pod, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_request_after_bytes: Option<i64>,
    /// Compute container requests/limits that differ.
    pub resources: Vec<ValueChange>,
    /// Overhead total before (the running VMI's formula), bytes.
    pub overhead_before_bytes: i64,
    /// Overhead total after, bytes.
    pub overhead_after_bytes: i64,
    /// Overhead terms that moved.
    pub terms: Vec<TermChange>,
    /// Labels that differ.
    pub labels: Vec<ValueChange>,
    /// Annotations that differ.
    pub annotations: Vec<ValueChange>,
}

/// One node against the rendered pod.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFit {
    /// Node name.
    pub name: String,
    /// Every request is within allocatable and nothing else rules the node out.
    pub fits: bool,
    /// Why not (`memory: needs 549755813888, allocatable 137438953472`, `cordoned`, ...).
    #[serde(default)]
    pub problems: Vec<String>,
    /// Problems that are not a resource shortfall (cordoned, not Ready, nodeSelector).
    pub hard_problems: usize,
    /// The largest resource shortfall as a fraction of the request (0 when it fits); with
    /// `hardProblems` it ranks "closest".
    pub shortfall: f64,
}

/// The rendered pod against the nodes.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FitCheck {
    /// The pod's effective requests (containers, init containers, pod overhead).
    pub requests: BTreeMap<String, String>,
    /// Some node fits.
    pub fits: bool,
    /// Nodes that fit.
    pub fitting_nodes: Vec<String>,
    /// When none fits: the one that comes closest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closest_node: Option<String>,
    /// Every node.
    pub nodes: Vec<NodeFit>,
    /// One line.
    pub summary: String,
}

#[cfg(test)]
pub(crate) mod tests;
