//! The pure analysis of `why`: what was read ([`WhyGathered`]) → the VM's runs and the cause
//! chain of each end ([`WhyReport`]). No I/O; the unit tests (`analyze_tests.rs`) build the
//! input by hand.
//!
//! One run per VMI uid that any surviving trace names: the VMI itself, the Events about VMIs of
//! the VM's name (each carries the VMI's uid), the VM controller's `SuccessfulDelete` events
//! (their message names the deleted VMI's uid, vm.go `stopVMI`), launcher pods (label
//! `kubevirt.io/created-by`) and `status.startFailure.lastFailedVMIUID`.

use super::defects;
use super::evidence::{k8s_time, pod_running, stamp};
use super::gather::WhyGathered;
use super::model::{Cause, End, Link, PhaseAt, Run, WhyReport};
use super::trace::RunTrace;

/// Analyse what was read.
pub(crate) fn analyze(g: &WhyGathered) -> WhyReport {
    let traces = super::trace::traces(g);
    let mut runs = Vec::new();
    let mut unknown = Vec::new();
    for (i, t) in traces.iter().enumerate() {
        let next = traces.get(i + 1);
        runs.push(run_of(g, t, next));
    }
    if traces.iter().any(|t| t.vmi.is_none()) {
        unknown.push(
            "VMIs that were deleted are known only from the Events that name them (the \
             API server keeps Events for an hour by default) and the VM's status; their \
             phase timestamps and launcher pods are gone"
                .into(),
        );
    }
    if runs.is_empty() {
        unknown.push("no VMI of this VM and no Event naming one survives".into());
    }
    let mut defects = Vec::new();
    defects.extend(defects::rerun_on_failure_stopped_status(
        &g.vm,
        g.vmi.is_some(),
        g.kubevirt_version.as_ref(),
    ));
    WhyReport {
        namespace: g.namespace.clone(),
        name: g.name.clone(),
        now: g.now,
        run_strategy: g
            .vm
            .run_strategy()
            .map_or_else(|e| format!("invalid: {e}"), |s| s.to_string()),
        printable_status: g
            .vm
            .status
            .as_ref()
            .and_then(|s| s.printable_status.clone()),
        leader: super::present::leader_sentence(g),
        runs,
        now_chain: super::present::now_chain(g),
        defects,
        unknown,
        missing: g.missing.clone(),
    }
}

fn run_of(g: &WhyGathered, t: &RunTrace<'_>, next: Option<&RunTrace<'_>>) -> Run {
    let phases: Vec<PhaseAt> = t
        .vmi
        .and_then(|v| v.status.as_ref()?.phase_transition_timestamps.as_ref())
        .into_iter()
        .flatten()
        .map(|p| PhaseAt {
            phase: p.phase.as_str().to_string(),
            at: p.phase_transition_timestamp.0,
        })
        .collect();
    let final_phase = match t.vmi {
        Some(v) => Some(v.phase().as_str().to_string()).filter(|p| !p.is_empty()),
        None => t.phase_from_events().map(str::to_string),
    };
    Run {
        vmi_uid: t.uid.clone(),
        vmi_exists: t.vmi.is_some(),
        started: t.started,
        pods: t.pod_names.clone(),
        node: t.node(),
        phases,
        final_phase,
        end: end_of(g, t, next),
    }
}

/// How a run ended; `None` while its VMI is there and not final nor being deleted.
fn end_of(g: &WhyGathered, t: &RunTrace<'_>, next: Option<&RunTrace<'_>>) -> Option<End> {
    if let Some(v) = t.vmi
        && !v.is_final()
        && v.metadata.deletion_timestamp.is_none()
    {
        return None;
    }
    let mut end = first_cause(g, t);
    if t.never_ran(g)
        && !matches!(
            end.cause,
            Cause::OomKilled | Cause::NodeLost | Cause::Evicted
        )
    {
        end.cause = Cause::StartFailure;
        end.chain.push(start_failure_link(g, t));
    }
    if matches!(end.cause, Cause::GuestCrashed)
        && let Some(d) = defects::handler_restart_fails_running_vmi(
            t.was_running(),
            t.final_phase() == Some("Failed"),
            t.pods.iter().any(|p| pod_running(p)),
        )
    {
        end.defects.push(d);
    }
    let end_at = end.at.or_else(|| t.deleted_at()).unwrap_or(g.now);
    end.chain
        .extend(super::present::handover_within(g, t.started, end_at));
    let (after, restarted) = super::aftermath::link(g, t, next);
    end.chain.extend(after);
    end.sentence = sentence(&end, restarted);
    Some(end)
}

/// The first cause of an end, strongest evidence first: an OOM kill, the pod's disruption,
/// the node, virt-handler's report, the launcher's exit, a stop, a deletion.
fn first_cause(g: &WhyGathered, t: &RunTrace<'_>) -> End {
    if let Some(end) = super::causes::oom(g, t) {
        return end;
    }
    if let Some(end) = super::causes::disruption(t) {
        return end;
    }
    if let Some(end) = super::causes::node(g, t) {
        return end;
    }
    if let Some(end) = super::causes::guest(t) {
        return end;
    }
    if let Some(end) = super::causes::stop(t) {
        return end;
    }
    let mut end = End {
        at: t.deleted_at(),
        cause: Cause::Unknown,
        ..Default::default()
    };
    if let Some(v) = t.vmi
        && v.metadata.deletion_timestamp.is_some()
    {
        end.cause = Cause::Deleting;
        end.chain.push(Link {
            claim: "the VMI is being deleted".into(),
            evidence: vec![format!(
                "VirtualMachineInstance/{} metadata.deletionTimestamp {}",
                g.name,
                stamp(v.metadata.deletion_timestamp.as_ref().and_then(k8s_time))
            )],
        });
        return end;
    }
    end.unknown.push(format!(
        "what ended VMI {}: {}",
        t.uid.as_deref().unwrap_or("(uid unknown)"),
        if t.vmi.is_some() {
            "its status, its launcher pods and their events name no cause"
        } else {
            "the VMI and its launcher pods are deleted and no surviving event names a cause"
        }
    ));
    end
}

fn start_failure_link(g: &WhyGathered, t: &RunTrace<'_>) -> Link {
    let mut evidence = Vec::new();
    if let Some(f) = g.vm.status.as_ref().and_then(|s| s.start_failure.as_ref())
        && f.last_failed_vmi_uid.is_some()
        && f.last_failed_vmi_uid == t.uid
    {
        evidence.push(format!(
            "VirtualMachine/{} status.startFailure: consecutiveFailCount {}, lastFailedVMIUID {}, retryAfterTimestamp {}",
            g.name,
            f.consecutive_fail_count,
            f.last_failed_vmi_uid.as_deref().unwrap_or(""),
            stamp(f.retry_after_timestamp.as_ref().map(|t| t.0)),
        ));
    }
    if t.vmi.is_some() {
        evidence.push(format!(
            "VirtualMachineInstance/{} status.phaseTransitionTimestamps has no Running entry",
            g.name
        ));
    }
    Link {
        claim: "the VMI ended before it ever ran: a start failure, which the VM controller \
                backs off (vm.go:1477-1603)"
            .into(),
        evidence,
    }
}

/// The chain in one sentence: "the VM restarted because …".
fn sentence(end: &End, restarted: Option<bool>) -> String {
    let verb = match (restarted, end.cause) {
        (Some(true), Cause::StopRequested) => "stopped",
        (Some(true), _) => "restarted",
        (Some(false), _) => "stopped",
        (None, _) => "stopped (and is to restart)",
    };
    let because = match end.cause {
        Cause::OomKilled => end.chain.first().map_or_else(
            || "its launcher pod was OOM-killed".into(),
            |l| l.claim.clone(),
        ),
        Cause::NodeLost => "its node was lost".into(),
        Cause::NodeNotReady => "its node was not Ready".into(),
        Cause::Evicted => "its launcher pod was evicted".into(),
        Cause::GuestCrashed => "virt-handler reported the guest crashed (VMI Failed)".into(),
        Cause::GuestShutdown => "the guest shut down (VMI Succeeded)".into(),
        Cause::LauncherFailed => "its launcher pod failed".into(),
        Cause::StartFailure => "its VMI failed before it ever ran (a start failure)".into(),
        Cause::StopRequested => {
            "it was asked to stop: the VM controller deleted the VMI before it had ended".into()
        }
        Cause::Deleting => "its VMI is being deleted".into(),
        Cause::Unknown => "of something nothing left in the cluster records".into(),
    };
    let mut s = format!("the VM {verb} because {because}");
    if restarted == Some(true) && end.cause == Cause::StopRequested {
        s.push_str(", then started again");
    }
    if let Some(d) = end.defects.first() {
        s.push_str(&format!(
            "; this matches the known defect {} (fixed: {})",
            d.id, d.fixed_in
        ));
    }
    s
}
