//! The change of a what-if: `--set` paths and values, merge patches, start/stop/restart
//! requests (virt-api's subresource rules), parsed and applied to a copy of the VM.

use crate::api::manifest::from_value_with_path;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::controller::common::semantic_eq;
use crate::lifecycle::decide::{Observed, decide};
use crate::lifecycle::{Options, Refusal, Verb, Write};
use serde_json::Value;
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
