//! The evidence vocabulary `why` shares: times of Kubernetes objects and Events, how evidence
//! quotes an Event or a container's end, the texts KubeVirt's components write that `why`
//! recognises. A leaf: it uses no other module of `why`.

use crate::api::labels::CREATED_BY;
use crate::api::quantity::human_bytes;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{ContainerStateTerminated, Event, Pod, PodCondition};

/// `Stopped the virtual machine by deleting the virtual machine instance UID`
/// (pkg/virt-controller/watch/vm/vm.go `stopVMI`).
pub(crate) const STOPPED_PREFIX: &str =
    "Stopped the virtual machine by deleting the virtual machine instance ";
/// `Started the virtual machine by creating the new virtual machine instance NAME`
/// (vm.go `startVMI`).
pub(crate) const STARTED_PREFIX: &str =
    "Started the virtual machine by creating the new virtual machine instance ";
/// virt-handler's texts (pkg/virt-handler/controller.go:75-79).
const VMI_CRASHED: &str = "The VirtualMachineInstance crashed.";
const VMI_SHUT_DOWN: &str = "The VirtualMachineInstance was shut down.";

pub(crate) fn k8s_time(
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

fn micro_time(
    t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

/// An event's last occurrence.
pub(crate) fn event_time(e: &Event) -> Option<DateTime<Utc>> {
    e.last_timestamp
        .as_ref()
        .and_then(k8s_time)
        .or_else(|| e.event_time.as_ref().and_then(micro_time))
        .or_else(|| e.first_timestamp.as_ref().and_then(k8s_time))
        .or_else(|| e.metadata.creation_timestamp.as_ref().and_then(k8s_time))
}

/// An event's first occurrence.
pub(crate) fn event_first_time(e: &Event) -> Option<DateTime<Utc>> {
    e.first_timestamp
        .as_ref()
        .and_then(k8s_time)
        .or_else(|| event_time(e))
}

/// The pod a VMI event `SuccessfulCreate` `Created virtual machine pod NAME` names
/// (pkg/virt-controller/watch/vmi/lifecycle.go:184).
pub(crate) fn created_pod_name(e: &Event) -> Option<String> {
    (e.reason.as_deref() == Some("SuccessfulCreate"))
        .then_some(())
        .and(e.message.as_deref())
        .and_then(|m| m.strip_prefix("Created virtual machine pod "))
        .map(str::to_string)
}

/// `Event Kind/name REASON "message" (×N, at T)`: how evidence quotes an event.
pub(crate) fn quote_event(e: &Event) -> String {
    let count = e.count.unwrap_or(1);
    let times = if count > 1 {
        format!("×{count}, last ")
    } else {
        String::new()
    };
    format!(
        "Event {} {}/{} {} \"{}\" ({times}{})",
        e.type_.as_deref().unwrap_or("?"),
        e.involved_object.kind.as_deref().unwrap_or("?"),
        e.involved_object.name.as_deref().unwrap_or("?"),
        e.reason.as_deref().unwrap_or(""),
        e.message.as_deref().unwrap_or(""),
        stamp(event_time(e)),
    )
}

/// A time as evidence shows it.
pub(crate) fn stamp(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "time unknown".into(),
        |t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string(),
    )
}

/// `N bytes` as `4.29Gi`.
pub(crate) fn bytes(b: i64) -> String {
    human_bytes(b)
}

/// Quotes of every container that ended, for evidence.
pub(crate) fn container_evidence(pod: &k8s_openapi::api::core::v1::Pod) -> Vec<String> {
    let name = pod.metadata.name.as_deref().unwrap_or("?");
    let mut out: Vec<String> = container_ends(pod)
        .map(|(c, t)| {
            format!(
                "Pod/{name} container {c} terminated: exit code {}, reason {}, finished {}",
                t.exit_code,
                t.reason.as_deref().unwrap_or("-"),
                stamp(t.finished_at.as_ref().and_then(k8s_time))
            )
        })
        .collect();
    if let Some(c) = pod_condition(pod, "DisruptionTarget") {
        out.push(format!(
            "Pod/{name} condition DisruptionTarget={} reason {} \"{}\"",
            c.status,
            c.reason.as_deref().unwrap_or("-"),
            c.message.as_deref().unwrap_or("")
        ));
    }
    out
}

/// Whether an event is virt-handler's crash report.
pub(crate) fn is_crash_event(e: &Event) -> bool {
    e.reason.as_deref() == Some("Stopped") && e.message.as_deref() == Some(VMI_CRASHED)
}

/// Whether an event is virt-handler's shutdown report.
pub(crate) fn is_shutdown_event(e: &Event) -> bool {
    e.reason.as_deref() == Some("Stopped") && e.message.as_deref() == Some(VMI_SHUT_DOWN)
}

/// `(container, terminated state)` of every container that ended (current state, else the last).
pub(crate) fn container_ends(pod: &Pod) -> impl Iterator<Item = (&str, &ContainerStateTerminated)> {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let t = c
                .state
                .as_ref()
                .and_then(|s| s.terminated.as_ref())
                .or_else(|| c.last_state.as_ref()?.terminated.as_ref())?;
            Some((c.name.as_str(), t))
        })
}

/// A pod condition by type.
pub(crate) fn pod_condition<'a>(pod: &'a Pod, type_: &str) -> Option<&'a PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether the pod runs: phase Running, no container ended, not being deleted.
pub(crate) fn pod_running(pod: &Pod) -> bool {
    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
        && container_ends(pod).next().is_none()
        && pod.metadata.deletion_timestamp.is_none()
}

/// The VMI uid a launcher pod carries (label `kubevirt.io/created-by`).
pub(crate) fn pod_uid_label(p: &Pod) -> Option<&str> {
    p.metadata
        .labels
        .as_ref()?
        .get(CREATED_BY)
        .map(String::as_str)
}
