//! What-if: the controllers' decisions and the launcher pod for a change to a VM, before it is
//! applied. Nothing is written anywhere: the change is applied to a copy of the gathered VM and
//! the same pure functions `inspect` uses run on both states.
//!
//! - The change ([`Change`]): JSON merge patches (RFC 7386, `json_patch::merge`), `--set
//!   path=value` edits, and a start/stop/restart request applied as virt-api's subresources
//!   would ([`apply_request`]: the handlers' decision is [`crate::lifecycle::decide`], the same
//!   `start`/`stop`/`restart` use). A spec change bumps `metadata.generation`, as the API server
//!   does for a resource with a status subresource.
//! - The decisions: [`super::analyze::analyze`] (and so [`super::analyze::decide_next`], the VM
//!   and VMI controllers' own `decide`) on the gathered state and on the changed one; the
//!   `RestartRequired` condition is the one the VM decision writes
//!   ([`crate::controller::vm::restart_required`], vm.go:2989-3065), with the cluster's
//!   `vmRolloutStrategy` ([`ClusterSettings::vm_rollout_strategy_live_update`]).
//! - The launcher pod: [`setup_vmi_from_vm`] on the changed VM, rendered by
//!   [`render_pod_with`], its overhead by [`explain`], compared with the running pod.
//! - The fit: the rendered pod's requests against each node's allocatable resources.
//!
//! [`what_if`] is pure (the terminal UI can call it on the `Gathered` it holds);
//! [`gather_what_if`] does the reads; [`render_text`] is the plain-text form.

use super::analyze::{analyze, changed_paths, current_pod, decide_next};
use super::gather::{GatherError, GatherOptions, Gathered, describe_error, gather_raw};
use super::model::{FieldChange, Inspection, Missing, PlannedActionView};
use crate::api::annotations::{MEMORY_OVERHEAD_BYTES, VM_GENERATION};
use crate::api::manifest::{KubeVirtObject, from_value_with_path};
use crate::api::quantity::ParsedQuantity;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterSettings;
use crate::controller::common::semantic_eq;
use crate::controller::vm::restart_required::restart_required;
use crate::controller::vm::setup_vmi_from_vm;
use crate::controller::vmi::executor::render_pod_with;
use crate::launcher::explain::{Explanation, explain};
use crate::lifecycle::decide::{Observed, decide};
use crate::lifecycle::{Options, Refusal, Verb, Write};
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

// ------------------------------------------------------------------------------------------
// The change
// ------------------------------------------------------------------------------------------

/// One step of a `--set` path: an object key or an array index (`disks[0]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathStep {
    /// An object key.
    Key(String),
    /// An array index.
    Index(usize),
}

/// One `--set path=value`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetOp {
    /// The path as given (`spec.runStrategy`).
    pub path: String,
    /// The parsed path.
    pub steps: Vec<PathStep>,
    /// The value: JSON when the text parses as JSON, else the text as a string; `null` removes
    /// the key (as in a merge patch).
    pub value: Value,
}

/// A change to a VM: merge patches, then `--set` edits (each in the order given), then a
/// lifecycle request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Change {
    /// JSON merge patches (RFC 7386), applied in order.
    pub patches: Vec<Value>,
    /// `--set` edits, applied in order after the patches.
    pub sets: Vec<SetOp>,
    /// A start/stop/restart request (as `virtctl start|stop|restart` sends it, no options),
    /// applied last.
    pub request: Option<Verb>,
}

/// Why a change could not be evaluated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChangeError {
    /// A `--what-if` patch is not a JSON/YAML object.
    #[error("--what-if: {0}")]
    Patch(String),
    /// A `--set` is malformed or cannot be applied.
    #[error("--set {0}")]
    Set(String),
    /// A `--what-if-request` value is unknown.
    #[error("--what-if-request {0}")]
    Request(String),
    /// A line of the terminal UI's what-if input is not a change ([`parse_change_line`]).
    #[error("{0}")]
    Line(String),
    /// The changed object is not a valid VirtualMachine.
    #[error("{object}: after the change, field {field}: {message}")]
    Invalid {
        /// `VirtualMachine ns/name`.
        object: String,
        /// The field path.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The change touches what it may not (name, namespace, status).
    #[error("{object}: {message}")]
    Refused {
        /// `VirtualMachine ns/name`.
        object: String,
        /// Why.
        message: String,
    },
    /// virt-api would answer the request with an error (its HTTP code, reason and message).
    #[error(
        "{object}: virt-api would refuse the {} request with {} {}: {} (pkg/virt-api/rest/lifecycle.go {})",
        verb.as_str(), refusal.code, refusal.reason, refusal.message, verb.handler()
    )]
    VirtApi {
        /// `VirtualMachine ns/name`.
        object: String,
        /// The request.
        verb: Verb,
        /// virt-api's answer.
        refusal: Refusal,
    },
    /// There is no VM to change.
    #[error("VirtualMachine {0} was not gathered: nothing to change")]
    NoVm(String),
}

/// Parse a `--what-if` merge patch (JSON or YAML); it must be an object (a VM is an object).
pub(crate) fn parse_patch(text: &str) -> Result<Value, ChangeError> {
    let value: Value = serde_yaml::from_str(text)
        .map_err(|e| ChangeError::Patch(format!("not JSON or YAML: {e}")))?;
    if !value.is_object() {
        return Err(ChangeError::Patch(format!(
            "a merge patch of a VirtualMachine must be an object, got {value}"
        )));
    }
    Ok(value)
}

/// Parse a dotted path: `a.b[0].c`, with `\.` for a dot inside a key
/// (`metadata.labels.example\.com/tier`).
pub(crate) fn parse_path(path: &str) -> Result<Vec<PathStep>, String> {
    let mut steps = Vec::new();
    let mut key = String::new();
    let mut chars = path.chars().peekable();
    let mut after_index = false;
    let flush = |key: &mut String, steps: &mut Vec<PathStep>| -> Result<(), String> {
        if key.is_empty() {
            return Err(format!("{path:?}: empty path segment"));
        }
        steps.push(PathStep::Key(std::mem::take(key)));
        Ok(())
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'.') => {
                key.push('.');
                chars.next();
            }
            '.' => {
                if after_index && key.is_empty() {
                    after_index = false;
                    continue;
                }
                flush(&mut key, &mut steps)?;
            }
            '[' => {
                if !key.is_empty() {
                    flush(&mut key, &mut steps)?;
                } else if !after_index {
                    return Err(format!("{path:?}: an index needs a field before it"));
                }
                let mut digits = String::new();
                for d in chars.by_ref() {
                    if d == ']' {
                        break;
                    }
                    digits.push(d);
                }
                let i = digits
                    .parse::<usize>()
                    .map_err(|_| format!("{path:?}: [{digits}] is not an array index"))?;
                steps.push(PathStep::Index(i));
                after_index = true;
            }
            c => {
                if after_index && key.is_empty() && !steps.is_empty() {
                    return Err(format!("{path:?}: expected '.' or '[' after ']'"));
                }
                key.push(c);
            }
        }
    }
    if !key.is_empty() {
        flush(&mut key, &mut steps)?;
    } else if !after_index {
        return Err(format!("{path:?}: empty path segment"));
    }
    Ok(steps)
}

/// Parse one `--set path=value` (the value is JSON when it parses as JSON, else a string).
pub(crate) fn parse_set(text: &str) -> Result<SetOp, ChangeError> {
    let (path, raw) = text
        .split_once('=')
        .ok_or_else(|| ChangeError::Set(format!("{text:?}: expected path=value")))?;
    let path = path.trim();
    let steps = parse_path(path).map_err(ChangeError::Set)?;
    let value = serde_json::from_str::<Value>(raw).unwrap_or_else(|_| Value::String(raw.into()));
    Ok(SetOp {
        path: path.to_string(),
        steps,
        value,
    })
}

/// Split a line of changes at spaces and `;` outside brackets, braces and double quotes, so a
/// JSON value (`a={"b": 1}`) or a patch stays one item.
fn split_items(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut start = None;
    for (i, c) in text.char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        let separator = depth == 0 && (c.is_whitespace() || c == ';');
        if separator {
            if let Some(s) = start.take() {
                items.push(&text[s..i]);
            }
            continue;
        }
        start.get_or_insert(i);
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if let Some(s) = start {
        items.push(&text[s..]);
    }
    items
}

/// Parse one line of changes, as the terminal UI's what-if input takes it: items separated by
/// spaces or `;`, each a `path=value` (as `--set`), a JSON merge patch starting with `{` (as
/// `--what-if`), or `start`, `stop`, `restart` (as `--what-if-request`, at most one). They
/// apply as the flags do: patches, then edits, then the request.
pub(crate) fn parse_change_line(text: &str) -> Result<Change, ChangeError> {
    let mut change = Change::default();
    for item in split_items(text) {
        if item.starts_with('{') {
            change.patches.push(parse_patch(item)?);
        } else if let Ok(request) = parse_request(item) {
            if let Some(first) = change.request {
                return Err(ChangeError::Line(format!(
                    "{}: only one of start, stop, restart (got {} already)",
                    request.as_str(),
                    first.as_str()
                )));
            }
            change.request = Some(request);
        } else if item.contains('=') {
            change.sets.push(parse_set(item)?);
        } else {
            return Err(ChangeError::Line(format!(
                "{item:?}: expected path=value, a JSON merge patch {{…}}, or start, stop, restart"
            )));
        }
    }
    if change.is_empty() {
        return Err(ChangeError::Line(
            "nothing to change: type path=value, a JSON merge patch {…}, or start, stop, restart"
                .into(),
        ));
    }
    Ok(change)
}

fn apply_set(target: &mut Value, op: &SetOp) -> Result<(), ChangeError> {
    let err = |m: String| ChangeError::Set(format!("{}: {m}", op.path));
    let mut cur = target;
    let (last, parents) = op
        .steps
        .split_last()
        .ok_or_else(|| err("empty path".into()))?;
    for (i, step) in parents.iter().enumerate() {
        let next_is_index = matches!(op.steps.get(i + 1), Some(PathStep::Index(_)));
        cur = match step {
            PathStep::Key(k) => {
                if cur.is_null() {
                    *cur = Value::Object(Default::default());
                }
                let obj = cur
                    .as_object_mut()
                    .ok_or_else(|| err(format!("{k:?} is inside a value that is not an object")))?;
                obj.entry(k.clone()).or_insert_with(|| {
                    if next_is_index {
                        Value::Array(Vec::new())
                    } else {
                        Value::Object(Default::default())
                    }
                })
            }
            PathStep::Index(n) => {
                let arr = cur
                    .as_array_mut()
                    .ok_or_else(|| err(format!("[{n}] indexes a value that is not a list")))?;
                let len = arr.len();
                arr.get_mut(*n)
                    .ok_or_else(|| err(format!("[{n}] is past the end of a list of {len}")))?
            }
        };
    }
    match last {
        PathStep::Key(k) => {
            if cur.is_null() {
                *cur = Value::Object(Default::default());
            }
            let obj = cur
                .as_object_mut()
                .ok_or_else(|| err(format!("{k:?} is inside a value that is not an object")))?;
            if op.value.is_null() {
                obj.remove(k);
            } else {
                obj.insert(k.clone(), op.value.clone());
            }
        }
        PathStep::Index(n) => {
            let arr = cur
                .as_array_mut()
                .ok_or_else(|| err(format!("[{n}] indexes a value that is not a list")))?;
            let len = arr.len();
            match n.cmp(&len) {
                std::cmp::Ordering::Less => arr[*n] = op.value.clone(),
                std::cmp::Ordering::Equal => arr.push(op.value.clone()),
                std::cmp::Ordering::Greater => {
                    return Err(err(format!("[{n}] is past the end of a list of {len}")));
                }
            }
        }
    }
    Ok(())
}

impl Change {
    /// Nothing to change.
    pub(crate) fn is_empty(&self) -> bool {
        self.patches.is_empty() && self.sets.is_empty() && self.request.is_none()
    }

    /// Apply the patches and `--set` edits (not the request) to a JSON document.
    pub(crate) fn apply_to_value(&self, doc: &mut Value) -> Result<(), ChangeError> {
        for p in &self.patches {
            json_patch::merge(doc, p);
        }
        for s in &self.sets {
            apply_set(doc, s)?;
        }
        Ok(())
    }

    /// One line per step, for humans.
    pub(crate) fn describe(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .patches
            .iter()
            .map(|p| format!("merge patch {p}"))
            .collect();
        out.extend(
            self.sets
                .iter()
                .map(|s| format!("set {}={}", s.path, s.value)),
        );
        if let Some(r) = self.request {
            out.push(format!(
                "{} request (as virtctl {} sends it)",
                r.as_str(),
                r.as_str()
            ));
        }
        out
    }
}

fn object_name(vm: &VirtualMachine) -> String {
    format!(
        "VirtualMachine {}/{}",
        vm.metadata.namespace.as_deref().unwrap_or(""),
        vm.metadata.name.as_deref().unwrap_or("")
    )
}

/// Apply `change` to a copy of `vm` (with the VMI of the same name, for the request rules).
pub(crate) fn apply_change(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    change: &Change,
) -> Result<VirtualMachine, ChangeError> {
    let object = object_name(vm);
    let before = serde_json::to_value(vm).map_err(|e| ChangeError::Refused {
        object: object.clone(),
        message: format!("cannot serialise the VM: {e}"),
    })?;
    let mut doc = before.clone();
    change.apply_to_value(&mut doc)?;
    for (field, pointer) in [
        ("metadata.name", "/metadata/name"),
        ("metadata.namespace", "/metadata/namespace"),
        ("metadata.uid", "/metadata/uid"),
    ] {
        if doc.pointer(pointer) != before.pointer(pointer) {
            return Err(ChangeError::Refused {
                object,
                message: format!("the change may not touch {field}"),
            });
        }
    }
    if doc.get("status") != before.get("status") {
        return Err(ChangeError::Refused {
            object,
            message: "the change may not touch status (the API server ignores it outside the status subresource); use --what-if-request start|stop|restart for state change requests".into(),
        });
    }
    let mut after: VirtualMachine =
        from_value_with_path(doc).map_err(|(field, message)| ChangeError::Invalid {
            object: object.clone(),
            field,
            message,
        })?;
    if let Some(r) = change.request {
        apply_request(&mut after, vmi, r)?;
    }
    if !semantic_eq(&vm.spec, &after.spec) {
        after.metadata.generation = Some(vm.metadata.generation.unwrap_or(0) + 1);
    }
    Ok(after)
}

/// Parse a request (`start`, `stop`, `restart`), as `--what-if-request` and the terminal UI's
/// what-if line give it.
pub(crate) fn parse_request(text: &str) -> Result<Verb, ChangeError> {
    text.parse::<Verb>()
        .map_err(|e| ChangeError::Request(format!("{text:?}: {e}")))
}

/// Apply a start/stop/restart request to `vm` as virt-api's subresource handler would: the
/// handler's decision is [`decide`] (pkg/virt-api/rest/lifecycle.go `StartVMRequestHandler`,
/// `StopVMRequestHandler`, `RestartVMRequestHandler`), its VM patches (`getRunningPatch`,
/// `getChangeRequestJson`) are applied to the VM as read, and an error virt-api would answer
/// is [`ChangeError::VirtApi`] with its code. The request carries no options (no paused start,
/// no grace period), so no VMI write arises.
pub(crate) fn apply_request(
    vm: &mut VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    verb: Verb,
) -> Result<(), ChangeError> {
    let object = object_name(vm);
    let refused = |refusal: Refusal| ChangeError::VirtApi {
        object: object.clone(),
        verb,
        refusal,
    };
    let mut doc = serde_json::to_value(&*vm).map_err(|e| ChangeError::Refused {
        object: object.clone(),
        message: format!("cannot serialise the VM: {e}"),
    })?;
    let observed = Observed {
        vm_raw: doc.clone(),
        vm: vm.clone(),
        vmi: vmi.cloned(),
    };
    let plan = decide(verb, &observed, Options::default()).map_err(refused)?;
    for write in &plan.writes {
        let (Write::Vm { patch, .. } | Write::VmStatus { patch, .. }) = write else {
            // The VMI's grace period: only with a grace period, which the what-if does not
            // offer; the what-if changes the VM alone.
            continue;
        };
        // The patch tests what it replaces against the VM it was made from; what fails to
        // apply is what the API server would refuse, and virt-api answers with a 500
        // (lifecycle.go:150-156).
        apply_json_patch(&mut doc, patch)
            .map_err(|e| refused(Refusal::internal(&format!("{}: {e}", write.summary()))))?;
    }
    if let Some(refusal) = plan.refusal {
        return Err(refused(refusal));
    }
    *vm = from_value_with_path(doc).map_err(|(field, message)| ChangeError::Invalid {
        object: object.clone(),
        field,
        message,
    })?;
    Ok(())
}

/// Apply an RFC 6902 JSON patch to `doc` as the API server does
/// ([`crate::sim::patch::apply_json_patch`]: a `test` of `null` passes on an absent path).
fn apply_json_patch(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let patch: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| format!("not a JSON patch: {e}"))?;
    crate::sim::patch::apply_json_patch(doc, patch).map_err(|e| e.to_string())
}

// ------------------------------------------------------------------------------------------
// The result
// ------------------------------------------------------------------------------------------

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

// ------------------------------------------------------------------------------------------
// Evaluation
// ------------------------------------------------------------------------------------------

/// The template fields `LiveUpdate` applies to a running VMI (vm.go:3358-3377; the same list
/// [`restart_required`] neutralises).
const LIVE_UPDATABLE: &[&str] = &[
    "spec.template.spec.domain.cpu.sockets",
    "spec.template.spec.domain.memory.guest",
    "spec.template.spec.nodeSelector",
    "spec.template.spec.affinity",
    "spec.template.spec.tolerations",
];

/// The fields `after` changes in `before` (spec, metadata labels/annotations, status requests).
pub(crate) fn changed_fields(before: &VirtualMachine, after: &VirtualMachine) -> Vec<FieldChange> {
    let a = serde_json::to_value(before).unwrap_or_default();
    let b = serde_json::to_value(after).unwrap_or_default();
    let mut out = Vec::new();
    for part in ["metadata", "spec", "status"] {
        changed_paths(part, a.get(part), b.get(part), &mut out);
    }
    out.retain(|c| c.path != "metadata.generation");
    out
}

/// One side of the comparison. The printableStatus is the one the VM decision writes at the
/// end of this sync when it writes a status (KubeVirt's `updateStatus` runs after the sync's
/// actions, with the expectations they raised: a VMI being deleted makes it `Stopping`,
/// vm.go `isVirtualMachineStatusStopping`), else the one the rules give on the state as it is.
fn side(
    ins: &Inspection,
    d: &crate::controller::vm::VmDecision,
    sync_error: Option<String>,
) -> DecisionSide {
    let nd = ins.next_decision.clone().unwrap_or_default();
    let written = d.status.as_ref().and_then(|s| s.printable_status.clone());
    DecisionSide {
        summary: nd.summary,
        actions: nd.actions,
        restart_required: restart_required_in(d).is_some(),
        restart_required_message: restart_required_in(d).flatten(),
        sync_error,
        printable_status: written.or_else(|| {
            ins.printable_status_reason
                .as_ref()
                .map(|p| p.computed.clone())
        }),
    }
}

/// `Some(message)` when the status the sync writes has `RestartRequired=True`.
fn restart_required_in(d: &crate::controller::vm::VmDecision) -> Option<Option<String>> {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())?
        .iter()
        .find(|c| c.type_ == "RestartRequired" && c.status == "True")
        .map(|c| c.message.clone())
}

fn quantity(text: &str) -> Option<i64> {
    ParsedQuantity::parse(text).ok().map(|q| q.value())
}

fn quantity_millis(text: &str) -> Option<i64> {
    ParsedQuantity::parse(text).ok().map(|q| q.milli_value())
}

pub use crate::api::quantity::human_bytes;

use crate::launcher::containers::compute_container as compute;

fn compute_quantities(pod: &Pod) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(r) = compute(pod).and_then(|c| c.resources.as_ref()) {
        for (kind, map) in [("requests", &r.requests), ("limits", &r.limits)] {
            for (k, v) in map.iter().flatten() {
                out.insert(format!("{kind}.{k}"), v.0.clone());
            }
        }
    }
    out
}

fn diff_maps(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    quantities: bool,
) -> Vec<ValueChange> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for k in keys {
        let (b, a) = (before.get(k), after.get(k));
        let parse = |v: Option<&String>| {
            v.and_then(|t| {
                if k.ends_with(".cpu") {
                    quantity_millis(t)
                } else {
                    quantity(t)
                }
            })
        };
        let equal = match (quantities, parse(b), parse(a)) {
            (true, Some(x), Some(y)) => x == y,
            _ => b == a,
        };
        if equal {
            continue;
        }
        let delta = match (quantities, parse(b), parse(a)) {
            (true, Some(x), Some(y)) => Some(y - x),
            _ => None,
        };
        out.push(ValueChange {
            name: k.clone(),
            before: b.cloned(),
            after: a.cloned(),
            delta,
        });
    }
    out
}

fn meta_map(m: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    m.cloned().unwrap_or_default()
}

/// The VMI the VM starts (`SetupVMIFromVM`), with the running VMI's uid when one runs (so the
/// diff shows what the change moves, not the new identity).
///
/// A VM naming an instancetype or preference is expanded first (`ApplyToVM`,
/// pkg/instancetype/apply/vm.go:67-87) from the stashed ControllerRevisions in `revisions`,
/// and the VMI gets the name annotations (annotations/annotations.go:28-44).
fn vmi_for(
    vm: &VirtualMachine,
    running: Option<&VirtualMachineInstance>,
    namespace: &str,
    revisions: &[ControllerRevision],
) -> Result<VirtualMachineInstance, String> {
    let shared: Vec<std::sync::Arc<ControllerRevision>> =
        revisions.iter().cloned().map(std::sync::Arc::new).collect();
    let expanded =
        crate::instancetype::apply_to_vm(vm, &crate::instancetype::Objects::default(), &shared)?;
    let mut vmi = setup_vmi_from_vm(&expanded).map_err(|e| e.to_string())?;
    if vm.spec.instancetype.is_some() || vm.spec.preference.is_some() {
        let annotations = vmi
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        crate::instancetype::set_name_annotations(vm, annotations);
    }
    if vmi.metadata.namespace.is_none() {
        vmi.metadata.namespace = Some(namespace.to_string());
    }
    vmi.metadata.uid = running
        .and_then(|v| v.metadata.uid.clone())
        .or_else(|| Some("new-vmi-uid".into()));
    // startVMI stamps the VM generation the VMI starts from (vm.go:1438-1475).
    if let Some(generation) = vm.metadata.generation {
        vmi.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(VM_GENERATION.to_string(), generation.to_string());
    }
    Ok(vmi)
}

fn explain_vmi(
    vmi: &VirtualMachineInstance,
    namespace: &str,
    settings: &ClusterSettings,
) -> Result<Explanation, String> {
    explain(
        &KubeVirtObject::Vmi(Box::new(vmi.clone())),
        namespace,
        settings,
    )
    .map_err(|e| e.to_string())
}

/// Term-by-term difference of two explanations (terms in the after order, then vanished ones).
pub(crate) fn term_changes(before: &Explanation, after: &Explanation) -> Vec<TermChange> {
    let mut out = Vec::new();
    let bytes = |e: &Explanation, name: &str| {
        e.overhead
            .terms
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.bytes)
    };
    for t in &after.overhead.terms {
        let b = bytes(before, &t.name).unwrap_or(0);
        out.push(TermChange {
            name: t.name.clone(),
            before_bytes: b,
            after_bytes: t.bytes,
            delta_bytes: t.bytes - b,
            reason: t.reason.clone(),
        });
    }
    for t in &before.overhead.terms {
        if bytes(after, &t.name).is_none() {
            out.push(TermChange {
                name: t.name.clone(),
                before_bytes: t.bytes,
                after_bytes: 0,
                delta_bytes: -t.bytes,
                reason: "no longer applies".into(),
            });
        }
    }
    out
}

fn pod_diff(
    g: &Gathered,
    before_vm: &VirtualMachine,
    after_vm: &VirtualMachine,
    missing: &mut Vec<Missing>,
) -> Option<(PodDiff, Pod)> {
    let mut note = |what: &str, reason: String| {
        missing.push(Missing {
            what: what.into(),
            reason,
        })
    };
    let running_vmi = g.vmi.as_ref();
    let after_vmi = vmi_for(after_vm, running_vmi, &g.namespace, &g.revisions)
        .map_err(|e| note("renderedPod", format!("the changed VM: {e}")))
        .ok()?;
    let after_pod = render_pod_with(&g.settings, &g.namespace_context(), &after_vmi)
        .map_err(|e| note("renderedPod", format!("the changed VM: {}", e.message)))
        .ok()?;
    let after_explained = explain_vmi(&after_vmi, &g.namespace, &g.settings)
        .map_err(|e| note("renderedPod", format!("the changed VM's overhead: {e}")))
        .ok()?;
    let before_vmi = match running_vmi {
        Some(v) => v.clone(),
        None => vmi_for(before_vm, None, &g.namespace, &g.revisions)
            .map_err(|e| note("renderedPod", format!("the current VM: {e}")))
            .ok()?,
    };
    let before_explained = explain_vmi(&before_vmi, &g.namespace, &g.settings)
        .map_err(|e| note("renderedPod", format!("the current VM's overhead: {e}")))
        .ok()?;
    let (before_pod, before_source) = match current_pod(&g.pods) {
        Some(p) => (
            p.clone(),
            format!("pod/{}", p.metadata.name.as_deref().unwrap_or("")),
        ),
        None => (
            render_pod_with(&g.settings, &g.namespace_context(), &before_vmi)
                .map_err(|e| note("renderedPod", format!("the current VM: {}", e.message)))
                .ok()?,
            "rendered from the current VM (no launcher pod runs)".to_string(),
        ),
    };
    let mem = |p: &Pod| {
        compute(p)
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("memory"))
            .and_then(|q| quantity(&q.0))
    };
    let mut terms = term_changes(&before_explained, &after_explained);
    terms.retain(|t| t.delta_bytes != 0);
    let mut annotations_before = meta_map(before_pod.metadata.annotations.as_ref());
    let mut annotations_after = meta_map(after_pod.metadata.annotations.as_ref());
    // The overhead annotation is compared as a number below; keep it in the list too.
    for m in [&mut annotations_before, &mut annotations_after] {
        m.retain(|k, _| !k.is_empty());
    }
    let mut annotations = diff_maps(&annotations_before, &annotations_after, false);
    for a in annotations.iter_mut() {
        if a.name == MEMORY_OVERHEAD_BYTES
            && let (Some(b), Some(x)) = (
                a.before.as_deref().and_then(|v| v.parse::<i64>().ok()),
                a.after.as_deref().and_then(|v| v.parse::<i64>().ok()),
            )
        {
            a.delta = Some(x - b);
        }
    }
    Some((
        PodDiff {
            before_source,
            memory_request_before_bytes: mem(&before_pod),
            memory_request_after_bytes: mem(&after_pod),
            resources: diff_maps(
                &compute_quantities(&before_pod),
                &compute_quantities(&after_pod),
                true,
            ),
            overhead_before_bytes: before_explained.overhead.total_bytes,
            overhead_after_bytes: after_explained.overhead.total_bytes,
            terms,
            labels: diff_maps(
                &meta_map(before_pod.metadata.labels.as_ref()),
                &meta_map(after_pod.metadata.labels.as_ref()),
                false,
            ),
            annotations,
        },
        after_pod,
    ))
}

/// The pod's effective requests as the scheduler sums them: each container's requests (its
/// limits where it sets no request), the larger of that sum and any init container, plus
/// `spec.overhead`. Values in base units (bytes; millicores for `cpu`).
pub(crate) fn pod_requests(pod: &Pod) -> BTreeMap<String, i64> {
    let value = |name: &str, q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        if name == "cpu" {
            quantity_millis(&q.0)
        } else {
            quantity(&q.0)
        }
    };
    let container = |c: &k8s_openapi::api::core::v1::Container| {
        let mut m: BTreeMap<String, i64> = BTreeMap::new();
        if let Some(r) = &c.resources {
            for (k, q) in r.limits.iter().flatten() {
                if let Some(v) = value(k, q) {
                    m.insert(k.clone(), v);
                }
            }
            for (k, q) in r.requests.iter().flatten() {
                if let Some(v) = value(k, q) {
                    m.insert(k.clone(), v);
                }
            }
        }
        m
    };
    let Some(spec) = &pod.spec else {
        return BTreeMap::new();
    };
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for c in &spec.containers {
        for (k, v) in container(c) {
            *sum.entry(k).or_default() += v;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in container(c) {
            let e = sum.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    for (k, q) in spec.overhead.iter().flatten() {
        if let Some(v) = value(k, q) {
            *sum.entry(k.clone()).or_default() += v;
        }
    }
    sum.retain(|_, v| *v > 0);
    sum
}

fn show(resource: &str, v: i64) -> String {
    if resource == "cpu" {
        format!("{v}m")
    } else if resource == "memory" || resource.contains("storage") {
        human_bytes(v)
    } else {
        v.to_string()
    }
}

/// The rendered pod against each node: cordoned, not Ready, nodeSelector, and every request
/// within the node's allocatable. Other pods' requests are not subtracted (the inspector reads
/// no other workload): "fits" means the node is large enough.
pub(crate) fn fit_check(pod: &Pod, nodes: &[Node]) -> FitCheck {
    let requests = pod_requests(pod);
    let selector = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default();
    let mut out = FitCheck {
        requests: requests
            .iter()
            .map(|(k, v)| (k.clone(), show(k, *v)))
            .collect(),
        ..Default::default()
    };
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut problems = Vec::new();
        let mut shortfall: f64 = 0.0;
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            problems.push("cordoned (spec.unschedulable)".to_string());
        }
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        if ready.as_deref() != Some("True") {
            problems.push(format!("Ready={}", ready.as_deref().unwrap_or("Unknown")));
        }
        let labels = node.metadata.labels.clone().unwrap_or_default();
        for (k, v) in &selector {
            if labels.get(k) != Some(v) {
                problems.push(format!("nodeSelector {k}={v} does not match"));
            }
        }
        let hard_problems = problems.len();
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        for (resource, want) in &requests {
            let have = allocatable
                .get(resource)
                .and_then(|q| {
                    if resource == "cpu" {
                        quantity_millis(&q.0)
                    } else {
                        quantity(&q.0)
                    }
                })
                .unwrap_or(0);
            if *want > have {
                problems.push(format!(
                    "{resource}: needs {}, allocatable {} (short by {})",
                    show(resource, *want),
                    show(resource, have),
                    show(resource, want - have)
                ));
                shortfall = shortfall.max((want - have) as f64 / *want as f64);
            }
        }
        out.nodes.push(NodeFit {
            fits: problems.is_empty(),
            name,
            problems,
            hard_problems,
            shortfall,
        });
    }
    out.fitting_nodes = out
        .nodes
        .iter()
        .filter(|n| n.fits)
        .map(|n| n.name.clone())
        .collect();
    out.fits = !out.fitting_nodes.is_empty();
    if out.nodes.is_empty() {
        out.summary = "no node was read: the fit is unknown".into();
    } else if out.fits {
        out.summary = format!(
            "fits {} of {} node(s): {} (against allocatable; other pods' requests not subtracted)",
            out.fitting_nodes.len(),
            out.nodes.len(),
            out.fitting_nodes.join(", ")
        );
    } else {
        let closest = out
            .nodes
            .iter()
            .min_by(|a, b| {
                a.hard_problems
                    .cmp(&b.hard_problems)
                    .then(a.shortfall.total_cmp(&b.shortfall))
                    .then(a.problems.len().cmp(&b.problems.len()))
            })
            .cloned();
        if let Some(c) = closest {
            out.summary = format!(
                "unschedulable: fits none of {} node(s); closest {}: {}",
                out.nodes.len(),
                c.name,
                c.problems.join("; ")
            );
            out.closest_node = Some(c.name);
        }
    }
    out
}

/// The rollout line of a live update: the VMI patches the VM decision sends, or the handler's
/// refusal (a hotplug or migration in progress) that keeps it from being applied now.
fn live_update_summary(strategy: &str, changes: &[String], after: &DecisionSide) -> String {
    let mut s = format!(
        "rollout strategy {strategy}: live update of {} on the running VMI, no RestartRequired (vm.go:3351-3377)",
        changes.join(", ")
    );
    let patches = after
        .actions
        .iter()
        .filter(|a| a.kind == "PatchVmiSpec")
        .count();
    if patches > 0 {
        let _ = write!(
            s,
            ": the VM controller patches the VMI's spec ({patches} patch"
        );
        s.push_str(if patches == 1 { ")" } else { "es)" });
    }
    if let Some(e) = after.sync_error.as_ref().filter(|e| {
        [
            "HotPlugCPUError",
            "HotPlugMemoryError",
            "AffinityChangeError",
            "TolerationsChangeError",
        ]
        .iter()
        .any(|r| e.starts_with(r))
    }) {
        let _ = write!(s, "; not now: {e}");
    }
    s
}

fn rollout(
    g: &Gathered,
    before: &VirtualMachine,
    after: &VirtualMachine,
    fields: &[FieldChange],
    after_side: &DecisionSide,
) -> Rollout {
    let live = g.settings.vm_rollout_strategy_live_update;
    let strategy = if live { "LiveUpdate" } else { "Stage" };
    let live_changes: Vec<String> = fields
        .iter()
        .filter(|f| {
            LIVE_UPDATABLE
                .iter()
                .any(|l| f.path == *l || f.path.starts_with(&format!("{l}.")))
        })
        .map(|f| f.path.clone())
        .collect();
    let template_changed = fields.iter().any(|f| f.path.starts_with("spec.template."));
    let vmi = g.vmi.as_ref().filter(|v| !v.is_final());
    let change_needs_restart = vmi.map(|v| restart_required(&before.spec, after, v, live));
    let summary = match (vmi, template_changed) {
        (None, _) => format!(
            "rollout strategy {strategy}: no VMI runs, so the next VMI starts from the changed template"
        ),
        (Some(_), false) => format!("rollout strategy {strategy}: the template does not change"),
        (Some(_), true) => {
            let needs = change_needs_restart.unwrap_or(false);
            if needs || after_side.restart_required {
                let handler_message = after_side
                    .restart_required_message
                    .as_ref()
                    .filter(|_| !needs);
                let why = if let Some(m) = handler_message {
                    format!("the live update cannot be applied: {m} (vm.go:622-673, 3444-3566)")
                } else if !live && !live_changes.is_empty() {
                    format!(
                        "under Stage every template change waits for a restart, including {}",
                        live_changes.join(", ")
                    )
                } else {
                    "a field that is never live-updated changed".to_string()
                };
                format!(
                    "rollout strategy {strategy}: RestartRequired: {why}; the running VMI keeps its spec until restarted (vm.go:3052-3055)"
                )
            } else if !live_changes.is_empty() {
                live_update_summary(strategy, &live_changes, after_side)
            } else {
                format!(
                    "rollout strategy {strategy}: the change needs no restart (hotplug or neutral fields)"
                )
            }
        }
    };
    Rollout {
        strategy: strategy.to_string(),
        live_updatable_changes: live_changes,
        change_needs_restart,
        summary,
    }
}

fn outcome(w: &WhatIf, g: &Gathered) -> Vec<String> {
    let mut out = Vec::new();
    let kinds = |s: &DecisionSide| -> Vec<String> {
        s.actions
            .iter()
            .map(|a| format!("{}:{}", a.controller, a.kind))
            .collect()
    };
    let has = |s: &DecisionSide, k: &str| s.actions.iter().any(|a| a.kind == k);
    let find = |s: &DecisionSide, k: &str| s.actions.iter().find(|a| a.kind == k).cloned();
    let (b, a) = (&w.before, &w.after);
    if let Some(act) = find(a, "DeleteVmi").filter(|_| !has(b, "DeleteVmi")) {
        let restarts = w.change.iter().any(|c| c.starts_with("restart"))
            || (w
                .changed_fields
                .iter()
                .all(|f| !f.path.contains("runStrategy"))
                && a.summary.starts_with("Always"));
        if restarts {
            out.push(format!(
                "would restart: delete VMI {}, then create a new one once the deletion is observed ({})",
                g.name, act.why
            ));
        } else {
            out.push(format!("would delete VMI {} ({})", g.name, act.why));
        }
    }
    if let Some(act) = find(a, "CreateVmi").filter(|_| !has(b, "CreateVmi")) {
        out.push(format!("would create VMI {} ({})", g.name, act.why));
    }
    if a.restart_required && !b.restart_required {
        out.push(
            "RestartRequired: the VM gets condition RestartRequired=True; the change applies at the next restart (vm.go:3052-3055)"
                .into(),
        );
    } else if !a.restart_required && b.restart_required {
        out.push("RestartRequired would be cleared (vm.go:3056-3058)".into());
    }
    if let Some(e) = a
        .sync_error
        .as_ref()
        .filter(|e| Some(*e) != b.sync_error.as_ref())
    {
        out.push(format!("the VM sync would fail: {e}"));
    }
    if w.rollout.change_needs_restart == Some(false) && !w.rollout.live_updatable_changes.is_empty()
    {
        out.push(w.rollout.summary.clone());
    }
    if let Some(f) = w.fit.as_ref().filter(|f| !f.fits && !f.nodes.is_empty()) {
        out.push(format!("the rendered launcher pod is {}", f.summary));
    }
    if out.is_empty() {
        if kinds(a) == kinds(b) && a.restart_required == b.restart_required {
            out.push("no change: the controllers would do the same as now".into());
        } else {
            out.push(format!("the controllers would: {}", a.summary));
        }
    }
    out
}

/// What the controllers would do, and the launcher pod they would render, after `change`:
/// pure, on the gathered state (the clock is `g.now`; nothing is read or written).
pub(crate) fn what_if(g: &Gathered, change: &Change) -> Result<WhatIf, ChangeError> {
    let key = format!("{}/{}", g.namespace, g.name);
    let before_vm =
        g.vm.as_ref()
            .ok_or_else(|| ChangeError::NoVm(key.clone()))?;
    let after_vm = apply_change(before_vm, g.vmi.as_ref(), change)?;
    let mut after_g = g.clone();
    after_g.vm = Some(after_vm.clone());
    let before_ins = analyze(g);
    let after_ins = analyze(&after_g);
    let before_d = decide_next(g, before_vm, &before_ins.expectations);
    let after_d = decide_next(&after_g, &after_vm, &before_ins.expectations);
    let err = |d: &crate::controller::vm::VmDecision| {
        d.sync_error
            .as_ref()
            .map(|e| format!("{}: {}", e.reason, e.message))
    };
    let before = side(&before_ins, &before_d.vm, err(&before_d.vm));
    let after = side(&after_ins, &after_d.vm, err(&after_d.vm));
    let fields = changed_fields(before_vm, &after_vm);
    let mut missing = Vec::new();
    let rendered = pod_diff(g, before_vm, &after_vm, &mut missing);
    let nodes: Vec<Node> = if g.candidate_nodes.is_empty() {
        g.node.iter().cloned().collect()
    } else {
        g.candidate_nodes.clone()
    };
    let fit = rendered.as_ref().map(|(_, pod)| fit_check(pod, &nodes));
    let rollout = rollout(g, before_vm, &after_vm, &fields, &after);
    let mut w = WhatIf {
        generated_at: g.now,
        namespace: g.namespace.clone(),
        name: g.name.clone(),
        change: change.describe(),
        changed_fields: fields,
        before,
        after,
        outcome: Vec::new(),
        rollout,
        pod: rendered.map(|(d, _)| d),
        fit,
        missing,
    };
    w.outcome = outcome(&w, g);
    Ok(w)
}

// ------------------------------------------------------------------------------------------
// Reads
// ------------------------------------------------------------------------------------------

/// Gather as `inspect` does, plus every node (for the fit check of the rendered pod). Reads
/// only; the VM is not touched.
pub(crate) async fn gather_what_if(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    opts: &GatherOptions,
) -> Result<Gathered, GatherError> {
    let mut g = gather_raw(client, namespace, name, opts).await?;
    if g.candidate_nodes.is_empty() {
        let nodes: kube::Api<Node> = kube::Api::all(client.clone());
        match nodes.list(&kube::api::ListParams::default()).await {
            Ok(list) => g.candidate_nodes = list.items,
            Err(e) => g.missing.push(Missing {
                what: "nodes".into(),
                reason: format!("{}; the fit check is skipped", describe_error(&e)),
            }),
        }
    }
    Ok(g)
}

/// A [`Gathered`] from a manifest alone (`inspect -f FILE --what-if`): its first VM, the VMI of
/// the same name, that VMI's launcher pods, Nodes, a KubeVirt CR (settings), the
/// ControllerRevisions, DataVolumes and PVCs it holds. No cluster is read.
pub(crate) fn gathered_from_manifest(
    source: &str,
    text: &str,
    default_namespace: &str,
    now: DateTime<Utc>,
) -> Result<Gathered, String> {
    let docs = crate::api::manifest::split_documents(source, text).map_err(|e| e.to_string())?;
    let mut g = Gathered {
        now,
        ..Default::default()
    };
    let mut vmis = Vec::new();
    let mut pods: Vec<Pod> = Vec::new();
    let mut kubevirt = None;
    for (index, doc) in docs {
        let kind = doc
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let at = |field: String, message: String| {
            format!("{source}: document {index} ({kind}): field {field}: {message}")
        };
        match kind.as_str() {
            "VirtualMachine" if g.vm.is_none() => {
                let vm: VirtualMachine = from_value_with_path(doc).map_err(|(f, m)| at(f, m))?;
                g.vm = Some(vm);
            }
            "VirtualMachineInstance" => {
                vmis.push(
                    from_value_with_path::<VirtualMachineInstance>(doc)
                        .map_err(|(f, m)| at(f, m))?,
                );
            }
            "Pod" => pods.push(from_value_with_path(doc).map_err(|(f, m)| at(f, m))?),
            "Node" => g
                .candidate_nodes
                .push(from_value_with_path(doc).map_err(|(f, m)| at(f, m))?),
            "KubeVirt" => kubevirt = Some(doc),
            "ControllerRevision" => g
                .revisions
                .push(from_value_with_path(doc).map_err(|(f, m)| at(f, m))?),
            "DataVolume" => g
                .data_volumes
                .push(from_value_with_path(doc).map_err(|(f, m)| at(f, m))?),
            "PersistentVolumeClaim" => {
                let pvc: k8s_openapi::api::core::v1::PersistentVolumeClaim =
                    from_value_with_path(doc).map_err(|(f, m)| at(f, m))?;
                g.pvcs
                    .insert(pvc.metadata.name.clone().unwrap_or_default(), pvc);
            }
            _ => {}
        }
    }
    let mut vm =
        g.vm.take()
            .ok_or_else(|| format!("{source}: no VirtualMachine in the file"))?;
    if vm.metadata.namespace.is_none() {
        vm.metadata.namespace = Some(default_namespace.to_string());
    }
    g.namespace = vm.metadata.namespace.clone().unwrap_or_default();
    g.name = vm.metadata.name.clone().unwrap_or_default();
    g.vmi = vmis
        .into_iter()
        .find(|v| v.metadata.name.as_deref() == Some(g.name.as_str()));
    if let Some(v) = g.vmi.as_mut()
        && v.metadata.namespace.is_none()
    {
        v.metadata.namespace = Some(g.namespace.clone());
    }
    let uid = g.vmi.as_ref().and_then(|v| v.metadata.uid.clone());
    g.pods = pods
        .into_iter()
        .filter(|p| {
            uid.is_some()
                && crate::api::label(&p.metadata, crate::api::labels::CREATED_BY) == uid.as_deref()
        })
        .collect();
    g.settings = match kubevirt {
        Some(cr) => ClusterSettings::from_kubevirt_cr(&cr).map_err(|e| format!("{source}: {e}"))?,
        None => {
            g.missing.push(Missing {
                what: "kubevirt".into(),
                reason: format!("no KubeVirt CR in {source}; KubeVirt's default settings assumed"),
            });
            ClusterSettings::default()
        }
    };
    if g.vmi.is_none() {
        g.missing.push(Missing {
            what: "vmi".into(),
            reason: format!("no VirtualMachineInstance {} in {source}", g.name),
        });
    }
    if g.candidate_nodes.is_empty() {
        g.missing.push(Missing {
            what: "nodes".into(),
            reason: format!("no Node in {source}; the fit check is skipped"),
        });
    }
    g.missing.push(Missing {
        what: "controller".into(),
        reason: "read from a file: no controller to ask; expectations taken as satisfied".into(),
    });
    g.vm = Some(vm);
    Ok(g)
}

// ------------------------------------------------------------------------------------------
// Text
// ------------------------------------------------------------------------------------------

fn opt_json(v: &Option<Value>) -> String {
    match v {
        None => "(unset)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn delta_text(name: &str, d: Option<i64>) -> String {
    match d {
        Some(0) => "  (unchanged)".to_string(),
        Some(d) if name.ends_with(".cpu") => format!("  ({d:+}m)"),
        Some(d) if d > 0 => format!("  (+{})", human_bytes(d)),
        Some(d) => format!("  ({})", human_bytes(d)),
        None => String::new(),
    }
}

/// What a line of the what-if text is: the terminal UI styles it by this, the plain text
/// ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextKind {
    /// The first line (`WHAT-IF ns/name`).
    Title,
    /// A section heading (`DECISION`); a blank line comes before it.
    Heading,
    /// An ordinary line.
    Plain,
    /// A line that says nothing happens (`no actions`, `none`, `RestartRequired=False`).
    Quiet,
    /// Good news (the pod fits).
    Good,
    /// Bad news (a sync error, an unschedulable pod).
    Bad,
    /// What the change leads to (OUTCOME, `RestartRequired=True`).
    Notice,
}

/// One line of the what-if text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextLine {
    /// What the line is.
    pub kind: TextKind,
    /// The text, indented as in [`render_text`].
    pub text: String,
}

fn push(out: &mut Vec<TextLine>, kind: TextKind, text: impl Into<String>) {
    out.push(TextLine {
        kind,
        text: text.into(),
    });
}

fn side_lines(out: &mut Vec<TextLine>, label: &str, s: &DecisionSide) {
    push(out, TextKind::Plain, format!("  {label:<6} {}", s.summary));
    if s.actions.is_empty() {
        push(out, TextKind::Quiet, "         no actions");
    }
    for a in &s.actions {
        push(
            out,
            TextKind::Plain,
            format!("         {} {}: {}", a.controller, a.kind, a.why),
        );
    }
    push(
        out,
        if s.restart_required {
            TextKind::Notice
        } else {
            TextKind::Quiet
        },
        format!(
            "         RestartRequired={}{}",
            if s.restart_required { "True" } else { "False" },
            s.printable_status
                .as_ref()
                .map(|p| format!("  printableStatus {p}"))
                .unwrap_or_default()
        ),
    );
    if let Some(e) = &s.sync_error {
        push(out, TextKind::Bad, format!("         sync error: {e}"));
    }
}

/// The what-if text line by line, each with its [`TextKind`]: [`render_text`] joins them, the
/// terminal UI's What-if panel styles them.
pub(crate) fn text_lines(w: &WhatIf) -> Vec<TextLine> {
    use TextKind::*;
    let mut out = Vec::new();
    push(
        &mut out,
        Title,
        format!("WHAT-IF {}/{}  (nothing is written)", w.namespace, w.name),
    );
    for c in &w.change {
        push(&mut out, Plain, format!("  {c}"));
    }
    push(&mut out, Heading, "CHANGED FIELDS");
    if w.changed_fields.is_empty() {
        push(&mut out, Quiet, "  none");
    }
    for f in &w.changed_fields {
        push(
            &mut out,
            Plain,
            format!(
                "  {}: {} → {}",
                f.path,
                opt_json(&f.before),
                opt_json(&f.after)
            ),
        );
    }
    push(&mut out, Heading, "DECISION");
    side_lines(&mut out, "now:", &w.before);
    side_lines(&mut out, "after:", &w.after);
    push(&mut out, Heading, "OUTCOME");
    for o in &w.outcome {
        push(&mut out, Notice, format!("  {o}"));
    }
    push(&mut out, Heading, "ROLLOUT");
    push(&mut out, Plain, format!("  {}", w.rollout.summary));
    if let Some(p) = &w.pod {
        push(
            &mut out,
            Heading,
            format!(
                "LAUNCHER POD  {} → rendered from the changed VM",
                p.before_source
            ),
        );
        if let (Some(b), Some(a)) = (p.memory_request_before_bytes, p.memory_request_after_bytes) {
            push(
                &mut out,
                if a == b { Quiet } else { Plain },
                format!(
                    "  compute memory request: {} → {}{}",
                    human_bytes(b),
                    human_bytes(a),
                    if a == b {
                        "  (unchanged)".to_string()
                    } else {
                        delta_text("memory", Some(a - b))
                    }
                ),
            );
        }
        push(
            &mut out,
            Plain,
            format!(
                "  overhead: {} → {}{}",
                human_bytes(p.overhead_before_bytes),
                human_bytes(p.overhead_after_bytes),
                delta_text(
                    "memory",
                    Some(p.overhead_after_bytes - p.overhead_before_bytes)
                )
            ),
        );
        for t in &p.terms {
            push(
                &mut out,
                Plain,
                format!(
                    "    term {}: {} → {}{}  {}",
                    t.name,
                    human_bytes(t.before_bytes),
                    human_bytes(t.after_bytes),
                    delta_text("memory", Some(t.delta_bytes)),
                    t.reason
                ),
            );
        }
        for (title, list) in [
            ("compute", &p.resources),
            ("label", &p.labels),
            ("annotation", &p.annotations),
        ] {
            for c in list {
                push(
                    &mut out,
                    Plain,
                    format!(
                        "  {title} {}: {} → {}{}",
                        c.name,
                        c.before.as_deref().unwrap_or("(unset)"),
                        c.after.as_deref().unwrap_or("(unset)"),
                        if title == "compute" {
                            delta_text(&c.name, c.delta)
                        } else {
                            String::new()
                        }
                    ),
                );
            }
        }
    }
    if let Some(f) = &w.fit {
        push(&mut out, Heading, "FIT");
        push(
            &mut out,
            if f.fits { Good } else { Bad },
            format!("  {}", f.summary),
        );
        for n in f.nodes.iter().filter(|n| !n.fits) {
            push(
                &mut out,
                Plain,
                format!("  {}: {}", n.name, n.problems.join("; ")),
            );
        }
    }
    if !w.missing.is_empty() {
        push(&mut out, Heading, "MISSING");
        for m in &w.missing {
            push(&mut out, Quiet, format!("  {}: {}", m.what, m.reason));
        }
    }
    out
}

/// The plain-text what-if (`inspect vm/NAME --what-if …` without `-o`): [`text_lines`], a
/// blank line before each heading.
pub(crate) fn render_text(w: &WhatIf) -> String {
    let mut out = String::new();
    for line in text_lines(w) {
        if line.kind == TextKind::Heading {
            out.push('\n');
        }
        out.push_str(&line.text);
        out.push('\n');
    }
    out
}

#[cfg(test)]
#[path = "whatif_tests.rs"]
pub(crate) mod tests;
