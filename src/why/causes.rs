//! The first cause of an end, one function per kind of evidence, each `None` when its evidence
//! is absent: [`oom`], [`disruption`], [`node`], [`guest`], [`stop`].

use super::evidence::{
    bytes, container_ends, container_evidence, event_time, is_crash_event, is_shutdown_event,
    k8s_time, pod_condition, quote_event, stamp,
};
use super::gather::WhyGathered;
use super::model::{Cause, Defect, End, Link};
use super::trace::RunTrace;
use crate::api::manifest::KubeVirtObject;
use crate::api::quantity::ParsedQuantity;
use crate::launcher::explain::{Explanation, explain_in};
use crate::launcher::resources::NamespaceContext;
use k8s_openapi::api::core::v1::Pod;

fn end(at: Option<chrono::DateTime<chrono::Utc>>, cause: Cause, chain: Vec<Link>) -> End {
    End {
        at,
        cause,
        chain,
        ..Default::default()
    }
}

/// A launcher container terminated with reason `OOMKilled`: the kill, then the formula's
/// overhead against the pod's memory (`explain-overhead`'s data).
pub(crate) fn oom(g: &WhyGathered, t: &RunTrace<'_>) -> Option<End> {
    let (pod, container, term) = t.pods.iter().find_map(|p| {
        container_ends(p)
            .filter(|(_, s)| s.reason.as_deref() == Some("OOMKilled"))
            .min_by_key(|(c, _)| *c != "compute")
            .map(|(c, s)| (*p, c, s))
    })?;
    let at = term.finished_at.as_ref().and_then(k8s_time);
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let (memory_link, memory_sentence, defects) = memory(g, t, pod);
    let kill = Link {
        claim: oom_claim(&pod_name, container, term.exit_code, &memory_sentence),
        evidence: container_evidence(pod),
    };
    let mut e = end(at, Cause::OomKilled, vec![kill, memory_link]);
    e.defects = defects;
    e.unknown.push(format!(
        "the memory the pod used when it was killed: Kubernetes keeps no usage in Pod/{pod_name} \
         (read it from the node's metrics)"
    ));
    Some(e)
}

fn compute_memory(pod: &Pod, side: &str) -> Option<i64> {
    let c = crate::launcher::containers::compute_container(pod)?;
    let r = c.resources.as_ref()?;
    let m = if side == "requests" {
        r.requests.as_ref()
    } else {
        r.limits.as_ref()
    }?;
    ParsedQuantity::parse(&m.get("memory")?.0)
        .ok()
        .map(|q| q.value())
}

/// The formula's explanation of the run's VMI (the VMI while it exists, else the VM's
/// template: the closest that survives).
fn explanation(g: &WhyGathered, t: &RunTrace<'_>) -> Result<(Explanation, &'static str), String> {
    let (object, what) = match t.vmi {
        Some(v) => (KubeVirtObject::Vmi(Box::new(v.clone())), "the VMI"),
        None => (
            KubeVirtObject::Vm(Box::new(g.vm.clone())),
            "the VM's template (the VMI is gone)",
        ),
    };
    explain_in(
        &object,
        &g.namespace,
        &g.settings,
        &NamespaceContext::default(),
    )
    .map(|e| (e, what))
    .map_err(|e| format!("the formula cannot be computed for {what}: {e}"))
}

/// The memory link of an OOM kill: the formula's overhead and its largest terms, the pod's
/// request, limit and overhead annotation; the sentence's memory clause; launcher defects.
fn memory(g: &WhyGathered, t: &RunTrace<'_>, pod: &Pod) -> (Link, String, Vec<Defect>) {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("?");
    let request = compute_memory(pod, "requests");
    let limit = compute_memory(pod, "limits");
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::api::annotations::MEMORY_OVERHEAD_BYTES))
        .and_then(|v| v.parse::<i64>().ok());
    let mut evidence = vec![format!(
        "Pod/{pod_name} container compute: requests.memory {}, limits.memory {}, annotation {} {}",
        request.map_or_else(|| "none".into(), bytes),
        limit.map_or_else(|| "none".into(), bytes),
        crate::api::annotations::MEMORY_OVERHEAD_BYTES,
        annotated.map_or_else(|| "absent".into(), bytes),
    )];
    let (e, what) = match explanation(g, t) {
        Ok(x) => x,
        Err(why) => {
            evidence.push(why.clone());
            let link = Link {
                claim: "the launcher overhead could not be checked".into(),
                evidence,
            };
            return (link, why, Vec::new());
        }
    };
    let total = e.overhead.total_bytes;
    let mut terms = e.overhead.terms.clone();
    terms.sort_by_key(|t| std::cmp::Reverse(t.bytes));
    let largest: Vec<String> = terms
        .iter()
        .take(3)
        .map(|t| format!("{} {}", t.name, bytes(t.bytes)))
        .collect();
    evidence.push(format!(
        "explain-overhead of {what} (KubeVirt {}): overhead {} = {} terms, the largest {}",
        e.kubevirt_version,
        bytes(total),
        e.overhead.terms.len(),
        largest.join(", ")
    ));
    let mut clause = format!(
        "the formula's launcher overhead for this VM is {}",
        bytes(total)
    );
    match limit {
        Some(l) => clause.push_str(&format!(" within a {} memory limit", bytes(l))),
        None => clause.push_str(&format!(
            " on a {} request with no memory limit (the kill came from the node's memory, not the pod's limit)",
            request.map_or_else(|| "unknown".into(), bytes)
        )),
    }
    if let Some(a) = annotated.filter(|a| *a != total) {
        clause.push_str(&format!(
            "; the pod was rendered with {} ({:+} bytes against the formula)",
            bytes(a),
            a - total
        ));
    }
    let defects: Vec<Defect> = e
        .warnings
        .iter()
        .map(|w| Defect {
            id: w.id.clone(),
            message: w.message.clone(),
            upstream: w.upstream.clone(),
            fixed_in: launcher_fixed_in(&w.id).into(),
        })
        .collect();
    if let Some(short) = e.warnings.iter().find_map(|w| w.shortfall_bytes) {
        clause.push_str(&format!("; the formula is {} short", bytes(short)));
    }
    clause.push_str(" (see explain-overhead)");
    let link = Link {
        claim: format!(
            "the launcher's memory: overhead {} by the formula, request {}, limit {}",
            bytes(total),
            request.map_or_else(|| "none".into(), bytes),
            limit.map_or_else(|| "none".into(), bytes)
        ),
        evidence,
    };
    (link, clause, defects)
}

/// The pod's `DisruptionTarget` condition or `status.reason: Evicted`: PodGC (node gone),
/// the taint manager (node not ready), an eviction.
pub(crate) fn disruption(t: &RunTrace<'_>) -> Option<End> {
    for pod in &t.pods {
        let name = pod.metadata.name.as_deref().unwrap_or("?");
        let evicted = pod.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted");
        let cond = pod_condition(pod, "DisruptionTarget").filter(|c| c.status == "True");
        let cause = match cond.and_then(|c| c.reason.as_deref()) {
            Some("DeletionByPodGC") => Cause::NodeLost,
            Some("DeletionByTaintManager") => Cause::NodeNotReady,
            Some(_) => Cause::Evicted,
            None if evicted => Cause::Evicted,
            None => continue,
        };
        let at = cond.and_then(|c| c.last_transition_time.as_ref().and_then(k8s_time));
        let claim = match cause {
            Cause::NodeLost => format!("its node is gone: PodGC failed its launcher pod {name}"),
            Cause::NodeNotReady => {
                format!("its node was not Ready: the taint manager evicted {name}")
            }
            _ => format!("its launcher pod {name} was evicted"),
        };
        let mut evidence = container_evidence(pod);
        if evicted {
            evidence.push(format!("Pod/{name} status.reason Evicted"));
        }
        evidence.extend(t.pod_events.iter().map(|e| quote_event(e)));
        return Some(end(at, cause, vec![Link { claim, evidence }]));
    }
    None
}

/// The node the VMI ran on no longer exists, or is not Ready.
pub(crate) fn node(g: &WhyGathered, t: &RunTrace<'_>) -> Option<End> {
    let name = t.node()?;
    let read = g.nodes.get(&name)?;
    let (cause, claim, evidence) = match read {
        None => (
            Cause::NodeLost,
            format!("its node {name} was lost: the Node no longer exists"),
            vec![format!("GET Node/{name}: not found")],
        ),
        Some(n) => {
            let ready = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "Ready")?;
            if ready.status == "True" {
                return None;
            }
            (
                Cause::NodeNotReady,
                format!("its node {name} is not Ready ({})", ready.status),
                vec![format!(
                    "Node/{name} condition Ready={} reason {} since {}",
                    ready.status,
                    ready.reason.as_deref().unwrap_or("-"),
                    stamp(ready.last_transition_time.as_ref().and_then(k8s_time))
                )],
            )
        }
    };
    let mut evidence = evidence;
    evidence.push(format!(
        "VirtualMachineInstance/{} ran on {name}{}",
        g.name,
        if t.vmi.is_some() {
            " (status.nodeName)"
        } else {
            ""
        }
    ));
    if t.vmi.is_some() && t.pods.is_empty() {
        evidence.push(format!(
            "no launcher pod of VMI {} exists any more",
            t.uid.as_deref().unwrap_or("?")
        ));
    }
    Some(end(None, cause, vec![Link { claim, evidence }]))
}

/// virt-handler's report: the VMI `Failed` (its `Stopped` "crashed" event, or the phase) or
/// `Succeeded` (shut down), with the launcher's exit as further evidence.
pub(crate) fn guest(t: &RunTrace<'_>) -> Option<End> {
    let phase = t.final_phase()?;
    let report = t
        .events
        .iter()
        .find(|e| is_crash_event(e) || is_shutdown_event(e));
    let phase_at = t
        .vmi
        .and_then(|v| v.status.as_ref()?.phase_transition_timestamps.as_ref())
        .and_then(|ts| ts.iter().rev().find(|p| p.phase.as_str() == phase))
        .map(|p| p.phase_transition_timestamp.0);
    let at = phase_at.or_else(|| report.and_then(|e| event_time(e)));
    // A guest shut down after the VM controller deleted its VMI is the stop, not its cause.
    if phase == "Succeeded"
        && let (Some(d), Some(a)) = (t.deleted_at(), at)
        && d <= a
    {
        return None;
    }
    let mut evidence = Vec::new();
    if t.vmi.is_some() {
        evidence.push(format!(
            "VirtualMachineInstance status.phase {phase} since {}",
            stamp(at)
        ));
    }
    evidence.extend(report.map(|e| quote_event(e)));
    let mut unknown = Vec::new();
    if phase == "Failed" && t.vmi.is_none() && t.pods.is_empty() {
        unknown.push(
            "what made the guest stop: virt-handler reports an OOM-killed or failed launcher \
             as a crash too, and the launcher pod that would say is gone"
                .to_string(),
        );
    }
    let mut cause = if phase == "Failed" {
        Cause::GuestCrashed
    } else {
        Cause::GuestShutdown
    };
    let mut claim = if phase == "Failed" {
        "virt-handler reported the VMI Failed: the guest crashed or its domain disappeared"
            .to_string()
    } else {
        "the guest shut down: virt-handler reported the VMI Succeeded".to_string()
    };
    for pod in &t.pods {
        evidence.extend(container_evidence(pod));
        let failed_first = container_ends(pod)
            .filter(|(_, s)| s.exit_code != 0)
            .filter_map(|(_, s)| s.finished_at.as_ref().and_then(k8s_time))
            .min()
            .zip(at)
            .is_some_and(|(f, a)| f < a);
        if phase == "Failed" && failed_first {
            cause = Cause::LauncherFailed;
            claim = format!(
                "its launcher pod {} failed before virt-handler reported the VMI Failed",
                pod.metadata.name.as_deref().unwrap_or("?")
            );
        }
    }
    let mut e = end(at, cause, vec![Link { claim, evidence }]);
    e.unknown = unknown;
    Some(e)
}

/// The VM controller deleted the VMI with no failure reported first: a stop was asked for
/// (runStrategy Halted, a Stop or Restart request, RestartRequired with a restart).
pub(crate) fn stop(t: &RunTrace<'_>) -> Option<End> {
    let deleted = t.deleted_by_vm?;
    let claim = "the VM controller deleted the VMI while it had not ended: a stop was asked for \
                 (runStrategy Halted or Manual with a stop, or a stop/restart request; vm.go stopVMI)"
        .to_string();
    let mut evidence = vec![quote_event(deleted)];
    evidence.extend(t.events.iter().filter(|e| is_shutdown_event(e)).map(|e| {
        format!(
            "{} (after the deletion: the guest shut down as asked)",
            quote_event(e)
        )
    }));
    Some(end(
        t.deleted_at(),
        Cause::StopRequested,
        vec![Link { claim, evidence }],
    ))
}

/// The OOM kill's sentence: which pod, container and exit code, and the formula's overhead.
fn oom_claim(pod: &str, container: &str, exit: i32, memory: &str) -> String {
    format!(
        "its launcher pod {pod} was OOM-killed (container {container}, exit code {exit}); {memory}"
    )
}

/// Where a launcher sizing defect (`crate::launcher::defects`) is fixed.
fn launcher_fixed_in(id: &str) -> &'static str {
    match id {
        crate::launcher::defects::HUGEPAGES_OVERCOMMITTED => "PR 18880, after v1.9.0",
        crate::launcher::defects::GUEST_ONLY_NO_PAGE_TABLES => "not fixed upstream",
        _ => "see explain-overhead",
    }
}
