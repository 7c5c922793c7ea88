//! What virt-api's `start`, `stop` and `restart` subresource handlers decide for one VM
//! (pkg/virt-api/rest/lifecycle.go, KubeVirt v1.9.0): the JSON patches they write, in order,
//! or the error they answer. Pure: the VM and VMI as read go in, a [`Plan`] or a [`Refusal`]
//! comes out; [`super::request`] sends it.

use crate::api::{Phase, RunStrategy, VirtualMachine, VirtualMachineInstance};
use crate::controller::common::patch::{PatchSet, path};
use serde_json::{Value, json};

/// `status.conditions[type=ManualRecoveryRequired]` of a VM (types.go:2343-2344).
const MANUAL_RECOVERY_REQUIRED: &str = "ManualRecoveryRequired";
/// `VirtualMachineInstanceVolumesChange` (types.go:722), which the restart handler looks for
/// on the VM.
const VOLUMES_CHANGE: &str = "VolumesChange";
/// `volumeMigrationManualRecoveryRequiredErr` (subresource.go:61).
const MANUAL_RECOVERY_MESSAGE: &str = "VM recovery required: Volume migration failed, leaving some volumes pointing to non-consistent targets; manual intervention is needed to reassign them to their original volumes.";
/// `vmNotRunning` (subresource.go).
const VM_NOT_RUNNING: &str = "VM is not running";
/// The grace period a force restart sets on the VMI before asking for the restart
/// (lifecycle.go:455-460: "the shortest safe restart period").
pub(crate) const FORCE_RESTART_GRACE_SECONDS: i64 = 1;

/// The three verbs, as `virtctl start|stop|restart` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Start,
    Stop,
    Restart,
}

impl Verb {
    /// `start`, `stop`, `restart`: the subresource and the command.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Verb::Start => "start",
            Verb::Stop => "stop",
            Verb::Restart => "restart",
        }
    }

    /// The virt-api handler whose decision this is.
    pub(crate) fn handler(self) -> &'static str {
        match self {
            Verb::Start => "StartVMRequestHandler",
            Verb::Stop => "StopVMRequestHandler",
            Verb::Restart => "RestartVMRequestHandler",
        }
    }
}

impl std::str::FromStr for Verb {
    type Err = String;
    /// `start`, `stop` or `restart`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "start" => Ok(Verb::Start),
            "stop" => Ok(Verb::Stop),
            "restart" => Ok(Verb::Restart),
            _ => Err("expected start, stop or restart".into()),
        }
    }
}

/// The request body's options (`v1.StartOptions.Paused`, `v1.StopOptions.GracePeriod`,
/// `v1.RestartOptions.GracePeriodSeconds`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options {
    /// Seconds (stop, restart); `None` when the request carries none.
    pub grace_period: Option<i64>,
    /// Start paused (start).
    pub paused: bool,
}

/// The VM as read (its JSON, for the `test` operations, and typed) and its VMI, if any.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    /// The VM exactly as the server answered it: `test` values come from here, so they match
    /// what is stored.
    pub vm_raw: Value,
    pub vm: VirtualMachine,
    pub vmi: Option<VirtualMachineInstance>,
}

/// An error virt-api answers instead of (or after) writing, with its HTTP code and
/// `metav1.Status` reason; `message` is the text client-go shows (`errors.NewConflict` &c.).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
}

impl Refusal {
    /// `errors.NewConflict(v1.Resource("virtualmachine"), name, err)`.
    pub(crate) fn conflict(name: &str, why: &str) -> Self {
        Refusal {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on virtualmachine.kubevirt.io {name:?}: {why}"
            ),
        }
    }

    /// `errors.NewBadRequest(msg)`.
    pub(crate) fn bad_request(why: &str) -> Self {
        Refusal {
            code: 400,
            reason: "BadRequest",
            message: why.to_string(),
        }
    }

    /// `errors.NewInternalError(err)`.
    pub(crate) fn internal(why: &str) -> Self {
        Refusal {
            code: 500,
            reason: "InternalError",
            message: format!("Internal error occurred: {why}"),
        }
    }

    /// `errors.NewNotFound(v1.Resource("virtualmachine"), name)` (`fetchVirtualMachine`).
    pub(crate) fn not_found(name: &str) -> Self {
        Refusal {
            code: 404,
            reason: "NotFound",
            message: format!("virtualmachine.kubevirt.io {name:?} not found"),
        }
    }
}

/// One write, in the order virt-api sends them.
#[derive(Debug, Clone, PartialEq)]
pub enum Write {
    /// PATCH the VMI's `spec.terminationGracePeriodSeconds` (`patchVMITerminationGracePeriod`,
    /// lifecycle.go:575-592): `test` the current value, `replace` it with `to`.
    VmiGracePeriod {
        patch: Value,
        from: Option<i64>,
        to: i64,
    },
    /// PATCH the VM (`getRunningPatch`: `spec.runStrategy` or `spec.running`).
    Vm { patch: Value, summary: String },
    /// PATCH the VM's `status` subresource (`getChangeRequestJson`:
    /// `status.stateChangeRequests`).
    VmStatus { patch: Value, summary: String },
}

impl Write {
    /// The JSON patch.
    pub(crate) fn patch(&self) -> &Value {
        match self {
            Write::VmiGracePeriod { patch, .. }
            | Write::Vm { patch, .. }
            | Write::VmStatus { patch, .. } => patch,
        }
    }

    /// One line: what the write changes.
    pub(crate) fn summary(&self) -> String {
        match self {
            Write::VmiGracePeriod { from, to, .. } => format!(
                "VMI spec.terminationGracePeriodSeconds {} -> {to}",
                from.map_or("(unset)".to_string(), |f| f.to_string())
            ),
            Write::Vm { summary, .. } | Write::VmStatus { summary, .. } => summary.clone(),
        }
    }
}

/// What one handler does for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub verb: Verb,
    /// Sent in order; empty when virt-api accepts and writes nothing (`WaitAsReceiver`).
    pub writes: Vec<Write>,
    /// Answered after the writes: a Halted VM's stop, whose grace-period patch virt-api sends
    /// before it refuses (lifecycle.go:201-219).
    pub refusal: Option<Refusal>,
    /// Sent when the last write fails: a force restart sets the VMI's grace period back
    /// (lifecycle.go:476-481).
    pub rollback: Option<Value>,
}

/// The decision of `verb`'s handler for `observed` with `options`.
pub(crate) fn decide(verb: Verb, observed: &Observed, options: Options) -> Result<Plan, Refusal> {
    match verb {
        Verb::Start => decide_start(observed, options.paused),
        Verb::Stop => decide_stop(observed, options),
        Verb::Restart => decide_restart(observed, options),
    }
}

fn name(observed: &Observed) -> &str {
    observed.vm.metadata.name.as_deref().unwrap_or_default()
}

fn plan(verb: Verb, writes: Vec<Write>) -> Plan {
    Plan {
        verb,
        writes,
        refusal: None,
        rollback: None,
    }
}

fn has_true_condition(vm: &VirtualMachine, type_: &str) -> bool {
    vm.condition(type_).is_some_and(|c| c.status == "True")
}

/// `vm.RunStrategy()`; an error is virt-api's 500 (a strategy it does not know is refused
/// here too, naming the field, where virt-api would pass it through its switches).
fn run_strategy(observed: &Observed) -> Result<RunStrategy, Refusal> {
    observed
        .vm
        .run_strategy()
        .map_err(|e| Refusal::internal(&format!("spec.runStrategy/spec.running: {e}")))
}

/// The `Start` state change request, with `data: {paused: "true"}` for a paused start.
fn start_request(paused: bool) -> Value {
    if paused {
        json!({"action": "Start", "data": {"paused": "true"}})
    } else {
        json!({"action": "Start"})
    }
}

/// `StartVMRequestHandler` (lifecycle.go:43-160).
fn decide_start(observed: &Observed, paused: bool) -> Result<Plan, Refusal> {
    let name = name(observed);
    if let Some(vmi) = &observed.vmi
        && !vmi.is_final()
        && !matches!(vmi.phase(), Phase::Unknown | Phase::Unset)
    {
        return Err(Refusal::conflict(name, "VM is already running"));
    }
    if has_true_condition(&observed.vm, MANUAL_RECOVERY_REQUIRED) {
        return Err(Refusal::conflict(name, MANUAL_RECOVERY_MESSAGE));
    }
    let strategy = run_strategy(observed)?;
    let vmi = observed.vmi.as_ref();
    let write = match strategy {
        // A paused start of a Halted VM is a Start request the VM controller turns into
        // `runStrategy: Always` (lifecycle.go:93-106; its check of the template's
        // startStrategy compares pointers, so it always sends the request).
        RunStrategy::Halted if paused => change_request_patch(observed, vec![start_request(true)])?,
        RunStrategy::Halted => running_patch(observed, true),
        RunStrategy::RerunOnFailure | RunStrategy::Manual => {
            let phase = vmi.map(|v| v.phase());
            if strategy == RunStrategy::RerunOnFailure && phase == Some(Phase::Failed) {
                return Err(Refusal::conflict(
                    name,
                    "RerunOnFailure does not support starting VM from failed state",
                ));
            }
            let needs_restart = (strategy == RunStrategy::RerunOnFailure
                && phase == Some(Phase::Succeeded))
                || (strategy == RunStrategy::Manual && vmi.is_some_and(|v| v.is_final()));
            let changes = if needs_restart {
                vec![stop_request(vmi), start_request(paused)]
            } else {
                vec![start_request(paused)]
            };
            change_request_patch(observed, changes)?
        }
        RunStrategy::Always | RunStrategy::Once => {
            return Err(Refusal::conflict(
                name,
                &format!("{strategy} does not support manual start requests"),
            ));
        }
        RunStrategy::WaitAsReceiver => return Ok(plan(Verb::Start, Vec::new())),
    };
    Ok(plan(Verb::Start, vec![write]))
}

/// `StopVMRequestHandler` (lifecycle.go:162-258).
fn decide_stop(observed: &Observed, options: Options) -> Result<Plan, Refusal> {
    let name = name(observed);
    let strategy = run_strategy(observed)?;
    let running = observed.vmi.as_ref().filter(|v| !v.is_final());
    let mut writes = Vec::new();
    // The grace period is patched first, whatever the strategy (lifecycle.go:193-201).
    let mut old_grace = 0;
    if let (Some(vmi), Some(grace)) = (running, options.grace_period) {
        let (write, old) = grace_period_patch(vmi, grace);
        old_grace = old;
        writes.push(write);
    }
    match strategy {
        RunStrategy::Halted => {
            let Some(vmi) = running else {
                return Err(Refusal::conflict(name, VM_NOT_RUNNING));
            };
            let shorter = match options.grace_period {
                None => false,
                Some(grace) => {
                    vmi.spec.termination_grace_period_seconds.is_none() || grace < old_grace
                }
            };
            if !shorter {
                return Ok(Plan {
                    refusal: Some(Refusal::conflict(
                        name,
                        "Halted only supports manual stop requests with a shorter graceperiod",
                    )),
                    ..plan(Verb::Stop, writes)
                });
            }
            writes.push(change_request_patch(
                observed,
                vec![stop_request(Some(vmi))],
            )?);
        }
        RunStrategy::RerunOnFailure | RunStrategy::Manual => {
            let Some(vmi) = running else {
                return Err(Refusal::conflict(name, VM_NOT_RUNNING));
            };
            writes.push(change_request_patch(
                observed,
                vec![stop_request(Some(vmi))],
            )?);
        }
        RunStrategy::Always | RunStrategy::Once => writes.push(running_patch(observed, false)),
        RunStrategy::WaitAsReceiver => {}
    }
    Ok(plan(Verb::Stop, writes))
}

/// `RestartVMRequestHandler` (lifecycle.go:395-496).
fn decide_restart(observed: &Observed, options: Options) -> Result<Plan, Refusal> {
    let name = name(observed);
    match options.grace_period {
        Some(g) if g > 0 => {
            return Err(Refusal::bad_request(
                "For force restart, only gracePeriod=0 is supported for now",
            ));
        }
        Some(g) if g < 0 => {
            return Err(Refusal::bad_request(
                "gracePeriod has to be greater or equal to 0",
            ));
        }
        _ => {}
    }
    if has_true_condition(&observed.vm, VOLUMES_CHANGE) {
        return Err(Refusal::conflict(name, MANUAL_RECOVERY_MESSAGE));
    }
    let strategy = run_strategy(observed)?;
    if matches!(strategy, RunStrategy::Halted | RunStrategy::Once) {
        return Err(Refusal::conflict(
            name,
            &format!("RunStategy {strategy} does not support manual restart requests"),
        ));
    }
    let Some(vmi) = &observed.vmi else {
        return Err(Refusal::conflict(name, "VM is not running: Halted"));
    };
    let mut writes = Vec::new();
    let mut rollback = None;
    if options.grace_period == Some(0) {
        let (write, old) = grace_period_patch(vmi, FORCE_RESTART_GRACE_SECONDS);
        writes.push(write);
        // The rollback tests the value just written and restores the old one (0 when there
        // was none, as virt-api does).
        let mut back = PatchSet::new();
        back.test(grace_path(), &FORCE_RESTART_GRACE_SECONDS)
            .replace(grace_path(), &old);
        rollback = Some(back.into_value());
    }
    writes.push(change_request_patch(
        observed,
        vec![stop_request(Some(vmi)), json!({"action": "Start"})],
    )?);
    Ok(Plan {
        rollback,
        ..plan(Verb::Restart, writes)
    })
}

fn grace_path() -> json_patch::jsonptr::PointerBuf {
    path(&["spec", "terminationGracePeriodSeconds"])
}

/// `patchVMITerminationGracePeriod` (lifecycle.go:575-592): the write and the old value (0
/// when unset).
fn grace_period_patch(vmi: &VirtualMachineInstance, to: i64) -> (Write, i64) {
    let from = vmi.spec.termination_grace_period_seconds;
    let mut set = PatchSet::new();
    set.test(grace_path(), &from).replace(grace_path(), &to);
    let write = Write::VmiGracePeriod {
        patch: set.into_value(),
        from,
        to,
    };
    (write, from.unwrap_or(0))
}

/// A `Stop` state change request for the VMI (`{Action: StopRequest, UID: &vmi.UID}`).
fn stop_request(vmi: Option<&VirtualMachineInstance>) -> Value {
    let uid = vmi.and_then(|v| v.metadata.uid.clone()).unwrap_or_default();
    json!({"action": "Stop", "uid": uid})
}

/// `getChangeRequestJson` (lifecycle.go:606-631): a VM with an empty status gets one holding
/// the requests; otherwise `test` the current list and add to an empty one, replace any list
/// with a single Stop, or refuse (virt-api answers that with a 500). A `startFailure` is removed.
fn change_request_patch(observed: &Observed, changes: Vec<Value>) -> Result<Write, Refusal> {
    let status = observed.vm_raw.get("status").unwrap_or(&Value::Null);
    let current = status.get("stateChangeRequests").unwrap_or(&Value::Null);
    let existing = current.as_array().map_or(0, Vec::len);
    let summary = format!(
        "VM status.stateChangeRequests {} -> {}",
        if existing == 0 {
            "[]".into()
        } else {
            current.to_string()
        },
        Value::Array(changes.clone())
    );
    let mut set = PatchSet::new();
    if status_is_zero(status) {
        set.add(path(&["status"]), &json!({"stateChangeRequests": changes}));
    } else {
        set.test(path(&["status", "stateChangeRequests"]), current);
        let single_stop = changes.len() == 1 && changes[0]["action"] == "Stop";
        if existing == 0 {
            set.add(path(&["status", "stateChangeRequests"]), &changes);
        } else if single_stop {
            set.replace(path(&["status", "stateChangeRequests"]), &changes);
        } else {
            return Err(Refusal::internal(
                "unable to complete request: stop/start already underway",
            ));
        }
    }
    if status.get("startFailure").is_some_and(|f| !f.is_null()) {
        set.remove(path(&["status", "startFailure"]));
    }
    Ok(Write::VmStatus {
        patch: set.into_value(),
        summary,
    })
}

/// `getRunningPatch` (lifecycle.go:633-650): `runStrategy` Always/Halted when the VM has one,
/// else `running`; each tested against the value read.
fn running_patch(observed: &Observed, running: bool) -> Write {
    let spec = observed.vm_raw.get("spec").unwrap_or(&Value::Null);
    let mut set = PatchSet::new();
    let summary = match spec.get("runStrategy").filter(|v| !v.is_null()) {
        Some(current) => {
            let to = if running { "Always" } else { "Halted" };
            set.test(path(&["spec", "runStrategy"]), current)
                .replace(path(&["spec", "runStrategy"]), to);
            format!("VM spec.runStrategy {} -> {to}", display(current))
        }
        None => {
            let current = spec.get("running").unwrap_or(&Value::Null);
            set.test(path(&["spec", "running"]), current)
                .replace(path(&["spec", "running"]), &running);
            format!("VM spec.running {} -> {running}", display(current))
        }
    };
    Write::Vm {
        patch: set.into_value(),
        summary,
    }
}

fn display(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "(unset)".into(),
        other => other.to_string(),
    }
}

/// `equality.Semantic.DeepEqual(vm.Status, VirtualMachineStatus{})` on the status as read:
/// every field decodes to Go's zero value. A pointer field is zero only when absent or `null`
/// (types.go `VirtualMachineStatus`); the others when [`is_zero`].
fn status_is_zero(status: &Value) -> bool {
    const POINTERS: &[&str] = &[
        "snapshotInProgress",
        "restoreInProgress",
        "startFailure",
        "memoryDumpRequest",
        "volumeUpdateState",
        "changedBlockTracking",
        "instancetypeRef",
        "preferenceRef",
    ];
    match status {
        Value::Object(fields) => fields.iter().all(|(k, v)| {
            if POINTERS.contains(&k.as_str()) {
                v.is_null()
            } else {
                is_zero(v)
            }
        }),
        other => is_zero(other),
    }
}

/// Whether a JSON value decodes to Go's zero value (`null`, `false`, `0`, `""`, an empty list,
/// an object of zero values): the semantic equality treats nil and empty lists alike.
fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.values().all(is_zero),
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
