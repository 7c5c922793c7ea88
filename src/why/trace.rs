//! What survives of one VMI: [`RunTrace`], built from the VMI (while it exists), the Events
//! that carry its uid or name its launcher pods, the pods, and the VM controller's
//! `SuccessfulDelete` event naming its uid.

use super::evidence::{
    STOPPED_PREFIX, created_pod_name, event_first_time, event_time, is_crash_event,
    is_shutdown_event, k8s_time, pod_uid_label,
};
use super::gather::WhyGathered;
use crate::api::VirtualMachineInstance;
use crate::api::vmi::Phase;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Event, Pod};

/// The surviving trace of one VMI.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunTrace<'a> {
    pub uid: Option<String>,
    /// The VMI, while it exists.
    pub vmi: Option<&'a VirtualMachineInstance>,
    /// Events about this VMI (by uid), oldest first.
    pub events: Vec<&'a Event>,
    /// Its launcher pods that still exist.
    pub pods: Vec<&'a Pod>,
    /// Names of its launcher pods (existing or named by its events).
    pub pod_names: Vec<String>,
    /// Events about those pods, oldest first.
    pub pod_events: Vec<&'a Event>,
    /// The VM controller's event that deleted it.
    pub deleted_by_vm: Option<&'a Event>,
    /// When it started, as closely as known.
    pub started: Option<DateTime<Utc>>,
}

/// Every VMI uid the cluster still names, in first-seen order.
fn uids(g: &WhyGathered) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut add = |u: Option<&str>| {
        if let Some(u) = u.filter(|u| !u.is_empty())
            && !out.iter().any(|o| o == u)
        {
            out.push(u.to_string());
        }
    };
    add(g.vmi.as_ref().and_then(|v| v.metadata.uid.as_deref()));
    for e in &g.events {
        match e.involved_object.kind.as_deref() {
            Some("VirtualMachineInstance") => add(e.involved_object.uid.as_deref()),
            Some("VirtualMachine") => add(e
                .message
                .as_deref()
                .and_then(|m| m.strip_prefix(STOPPED_PREFIX))),
            _ => {}
        }
    }
    for p in &g.pods {
        add(pod_uid_label(p));
    }
    add(g
        .vm
        .status
        .as_ref()
        .and_then(|s| s.start_failure.as_ref())
        .and_then(|f| f.last_failed_vmi_uid.as_deref()));
    out
}

/// One trace per VMI uid, oldest first.
pub(crate) fn traces(g: &WhyGathered) -> Vec<RunTrace<'_>> {
    let mut out: Vec<RunTrace<'_>> = uids(g).into_iter().map(|u| trace(g, u)).collect();
    out.sort_by_key(|t| (t.started.or_else(|| t.deleted_at()), t.vmi.is_some()));
    out
}

fn sorted(mut events: Vec<&Event>) -> Vec<&Event> {
    events.sort_by_key(|e| event_first_time(e));
    events
}

fn trace(g: &WhyGathered, uid: String) -> RunTrace<'_> {
    let vmi = g
        .vmi
        .as_ref()
        .filter(|v| v.metadata.uid.as_deref() == Some(uid.as_str()));
    let events = sorted(
        g.events
            .iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("VirtualMachineInstance")
                    && e.involved_object.uid.as_deref() == Some(uid.as_str())
            })
            .collect(),
    );
    let mut pod_names: Vec<String> = events.iter().filter_map(|e| created_pod_name(e)).collect();
    let pods: Vec<&Pod> = g
        .pods
        .iter()
        .filter(|p| {
            pod_uid_label(p) == Some(uid.as_str())
                || p.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| pod_names.contains(n))
        })
        .collect();
    for p in &pods {
        if let Some(n) = &p.metadata.name
            && !pod_names.contains(n)
        {
            pod_names.push(n.clone());
        }
    }
    let pod_events = sorted(
        g.events
            .iter()
            .filter(|e| {
                e.involved_object.kind.as_deref() == Some("Pod")
                    && e.involved_object
                        .name
                        .as_ref()
                        .is_some_and(|n| pod_names.contains(n))
            })
            .collect(),
    );
    let deleted_by_vm = g.events.iter().find(|e| {
        e.involved_object.kind.as_deref() == Some("VirtualMachine")
            && e.message
                .as_deref()
                .and_then(|m| m.strip_prefix(STOPPED_PREFIX))
                == Some(uid.as_str())
    });
    let started = vmi
        .and_then(|v| v.metadata.creation_timestamp.as_ref().and_then(k8s_time))
        .or_else(|| events.first().and_then(|e| event_first_time(e)))
        .or_else(|| {
            pods.iter()
                .filter_map(|p| p.metadata.creation_timestamp.as_ref().and_then(k8s_time))
                .min()
        });
    RunTrace {
        uid: Some(uid),
        vmi,
        events,
        pods,
        pod_names,
        pod_events,
        deleted_by_vm,
        started,
    }
}

impl RunTrace<'_> {
    /// When the VM controller deleted the VMI.
    pub(crate) fn deleted_at(&self) -> Option<DateTime<Utc>> {
        self.deleted_by_vm.and_then(event_time)
    }

    /// The node the VMI ran on: its status, else its launcher pod's.
    pub(crate) fn node(&self) -> Option<String> {
        self.vmi
            .and_then(|v| v.status.as_ref()?.node_name.clone())
            .or_else(|| {
                self.pods
                    .iter()
                    .find_map(|p| p.spec.as_ref()?.node_name.clone())
            })
            .or_else(|| {
                self.events.iter().find_map(|e| {
                    (e.source.as_ref()?.component.as_deref() == Some("virt-handler"))
                        .then(|| e.source.as_ref()?.host.clone())
                        .flatten()
                })
            })
            .filter(|n| !n.is_empty())
    }

    /// The final phase virt-handler's events report for a VMI that is gone.
    pub(crate) fn phase_from_events(&self) -> Option<&'static str> {
        self.events.iter().rev().find_map(|e| {
            if is_crash_event(e) {
                Some("Failed")
            } else if is_shutdown_event(e) {
                Some("Succeeded")
            } else {
                None
            }
        })
    }

    /// `status.phase` while the VMI exists, else what the events say.
    pub(crate) fn final_phase(&self) -> Option<&'static str> {
        match self.vmi {
            Some(v) => match v.phase() {
                Phase::Failed => Some("Failed"),
                Phase::Succeeded => Some("Succeeded"),
                _ => None,
            },
            None => self.phase_from_events(),
        }
    }

    /// Whether the VMI reached Running: its phase timestamps, or virt-handler's `Started` event.
    pub(crate) fn was_running(&self) -> bool {
        let by_status = self
            .vmi
            .and_then(|v| v.status.as_ref()?.phase_transition_timestamps.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.phase == Phase::Running));
        by_status
            || self
                .events
                .iter()
                .any(|e| e.reason.as_deref() == Some("Started"))
    }

    /// Whether the VMI ended without ever running: its status says so, or the VM's
    /// `status.startFailure` names it.
    pub(crate) fn never_ran(&self, g: &WhyGathered) -> bool {
        let named =
            g.vm.status
                .as_ref()
                .and_then(|s| s.start_failure.as_ref())
                .and_then(|f| f.last_failed_vmi_uid.as_deref())
                .is_some_and(|u| Some(u) == self.uid.as_deref());
        let by_status = self.vmi.is_some_and(|v| v.is_final()) && !self.was_running();
        named || by_status
    }
}
