//! From the gathered objects to the verdicts (pure: no cluster, no clock, no randomness that
//! reaches the output).
//!
//! Every KubeVirt rule comes from the controllers' own code: the next decision is
//! [`crate::controller::vm::decide`] and [`crate::controller::vmi::decide`] on snapshots built by
//! the executors' [`snapshot_from_objects`](crate::controller::vm::executor::snapshot_from_objects)
//! constructors, the printableStatus rule is [`printable_status`], the overhead is
//! [`memory_overhead`] and [`compute_resources`], start-failure backoff is
//! [`start_failure_backoff_time_left`]. This module only reads their answers and phrases them.

use super::gather::{ControllerView, Gathered, GatheredFleet, volume_claims};
use super::model::human_duration;
use super::model::*;
use crate::api::annotations::MEMORY_OVERHEAD_BYTES;
use crate::api::common::{Condition, ObjectVersion};
use crate::api::key::ObjectKey;
use crate::api::labels::CREATED_BY;
use crate::api::manifest::KubeVirtObject;
use crate::api::quantity::ParsedQuantity;
use crate::api::{Time, VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterSettings;
use crate::controller::debug_state::{DebugState, VM_CONTROLLER, VMI_CONTROLLER};
use crate::controller::vm::QUEUE_NAME as VM_QUEUE_NAME;
use crate::controller::vm::backoff::start_failure_backoff_time_left;
use crate::controller::vm::executor::{snapshot_from_objects as vm_snapshot, template_pvcs};
use crate::controller::vm::printable::{PrintableContext, printable_status};
use crate::controller::vm::run_strategy::vm_strategy;
use crate::controller::vm::{ExpectationCounts, ExpectationsView, PvcInfo, VmAction, VmDecision};
use crate::controller::vmi::QUEUE_NAME as VMI_QUEUE_NAME;
use crate::controller::vmi::executor::{owner_vm_name, snapshot_from_objects as vmi_snapshot};
use crate::controller::vmi::{ExpectationsState, SkipReason, VmiAction, VmiDecision};
use crate::kubevirt_version::KubeVirtVersion;
use crate::launcher::compute_resources;
use crate::launcher::explain::effective_vmi;
use crate::launcher::overhead::{memory_overhead, overhead_vcpus};
use crate::launcher::resources::NamespaceContext;
use crate::runtime::expectations::EXPECTATIONS_TIMEOUT;
use crate::runtime::lease::LeaseRecord;
use crate::runtime::queue::rate_limiter::{
    DEFAULT_BASE_DELAY, DEFAULT_BUCKET_BURST, DEFAULT_BUCKET_QPS, DEFAULT_MAX_DELAY,
};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::Value;
use std::collections::BTreeMap;

/// Store names of the expectations (`vm-vmi`, `vm-datavolume`, `vmi-pod`, `vmi-self`).
const STORE_VM_VMI: &str = "vm-vmi";
const STORE_VM_DV: &str = "vm-datavolume";
const STORE_VMI_POD: &str = "vmi-pod";
const STORE_VMI_SELF: &str = "vmi-self";
/// The KVM device resource of virt-handler's device plugin.
const KVM_RESOURCE: &str = "devices.kubevirt.io/kvm";

fn k8s_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
}

fn seconds(from: DateTime<Utc>, to: DateTime<Utc>) -> f64 {
    (to - from).num_milliseconds() as f64 / 1000.0
}

/// A VM's or VMI's `status.conditions` as shown.
fn condition_views(conditions: Option<&Vec<Condition>>) -> Vec<ConditionView> {
    conditions
        .into_iter()
        .flatten()
        .map(|c| ConditionView {
            type_: c.type_.to_string(),
            status: c.status.to_string(),
            reason: c
                .reason
                .as_deref()
                .filter(|r| !r.is_empty())
                .map(str::to_string),
            message: c
                .message
                .as_deref()
                .filter(|m| !m.is_empty())
                .map(str::to_string),
            last_transition_time: c.last_transition_time.map(|t| t.0),
        })
        .collect()
}

fn quantity_bytes(text: &str) -> Option<i64> {
    ParsedQuantity::parse(text).ok().map(|q| q.value())
}

fn quantity_millis(text: &str) -> Option<i64> {
    ParsedQuantity::parse(text).ok().map(|q| q.milli_value())
}

// ------------------------------------------------------------------------------------------
// Object views
// ------------------------------------------------------------------------------------------

fn vm_view(vm: &VirtualMachine, now: DateTime<Utc>) -> VmView {
    let status = vm.status.as_ref();
    VmView {
        object: ObjectVersion::of(&vm.metadata),
        run_strategy: vm_strategy(vm).ok().map(|s| s.as_str().to_string()),
        printable_status: status.and_then(|s| s.printable_status.clone()),
        observed_generation: status.and_then(|s| s.observed_generation),
        desired_generation: status.and_then(|s| s.desired_generation),
        start_failure: status.and_then(|s| s.start_failure.as_ref()).map(|f| {
            let retry_after = f.retry_after_timestamp.map(|t| t.0);
            StartFailureView {
                consecutive_fail_count: f.consecutive_fail_count,
                retry_after,
                retry_in_seconds: retry_after.map(|t| seconds(now, t)),
            }
        }),
        conditions: condition_views(status.and_then(|s| s.conditions.as_ref())),
        created: vm.metadata.creation_timestamp.as_ref().and_then(k8s_time),
        memory_dump: status.and_then(memory_dump_view),
    }
}

fn memory_dump_view(status: &crate::api::vm::VirtualMachineStatus) -> Option<MemoryDumpView> {
    status.extra.read(|m| {
        let r = m.get("memoryDumpRequest")?;
        let text = |k: &str| r.get(k).and_then(|v| v.as_str()).map(str::to_string);
        Some(MemoryDumpView {
            claim_name: text("claimName").unwrap_or_default(),
            phase: text("phase").unwrap_or_default(),
            file_name: text("fileName"),
            message: text("message"),
        })
    })
}

/// The VMI's `volumeStatus` phase and attachment pod of each view's volume.
fn with_vmi_volume_status(views: &mut [VolumeView], vmi: Option<&VirtualMachineInstance>) {
    let entries = vmi.map(VirtualMachineInstance::volume_status_entries);
    for view in views {
        let Some(e) = entries
            .iter()
            .flatten()
            .find(|e| e.get("name").and_then(|n| n.as_str()) == Some(view.volume.as_str()))
        else {
            continue;
        };
        let text = |v: Option<&serde_json::Value>| {
            v.and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        view.vmi_phase = text(e.get("phase"));
        view.attachment_pod = text(e.pointer("/hotplugVolume/attachPodName"));
    }
}

/// The phase timeline: each `phaseTransitionTimestamps` entry, oldest first, with the time spent
/// in it (until the next entry, or until `now` for the last one).
pub(crate) fn phase_timeline(
    vmi: &VirtualMachineInstance,
    now: DateTime<Utc>,
) -> Vec<PhaseTransition> {
    let mut entries: Vec<(String, DateTime<Utc>)> = vmi
        .status
        .as_ref()
        .and_then(|s| s.phase_transition_timestamps.as_ref())
        .into_iter()
        .flatten()
        .map(|p| (p.phase.as_str().to_string(), p.phase_transition_timestamp.0))
        .collect();
    entries.sort_by_key(|(_, t)| *t);
    let ends: Vec<DateTime<Utc>> = entries
        .iter()
        .skip(1)
        .map(|(_, t)| *t)
        .chain(std::iter::once(now))
        .collect();
    entries
        .into_iter()
        .zip(ends)
        .map(|((phase, timestamp), end)| PhaseTransition {
            phase: if phase.is_empty() {
                "Unset".into()
            } else {
                phase
            },
            timestamp,
            duration_seconds: seconds(timestamp, end).max(0.0),
        })
        .collect()
}

fn vmi_view(vmi: &VirtualMachineInstance, now: DateTime<Utc>) -> VmiView {
    let status = vmi.status.as_ref();
    VmiView {
        uid: vmi.metadata.uid.clone(),
        resource_version: vmi.metadata.resource_version.clone(),
        phase: vmi.phase().as_str().to_string(),
        phase_transitions: phase_timeline(vmi, now),
        node_name: status
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty()),
        conditions: condition_views(status.and_then(|s| s.conditions.as_ref())),
        status_memory_overhead_bytes: status_overhead_bytes(vmi),
        deletion_timestamp: vmi.metadata.deletion_timestamp.as_ref().and_then(k8s_time),
    }
}

use crate::inspect::overhead::reported_overhead as status_overhead_bytes;
use crate::launcher::containers::compute_container;

fn pod_view(pod: &Pod) -> PodView {
    let compute = compute_container(pod);
    let quantities = |pick: fn(
        &k8s_openapi::api::core::v1::ResourceRequirements,
    ) -> Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| {
        compute
            .and_then(|c| c.resources.as_ref())
            .and_then(pick)
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
            .unwrap_or_default()
    };
    let compute_status = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == "compute"));
    PodView {
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone(),
        phase: pod.status.as_ref().and_then(|s| s.phase.clone()),
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        priority_class_name: pod
            .spec
            .as_ref()
            .and_then(|s| s.priority_class_name.clone()),
        conditions: pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| ConditionView {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time.as_ref().and_then(k8s_time),
            })
            .collect(),
        compute_requests: quantities(|r| r.requests.as_ref()),
        compute_limits: quantities(|r| r.limits.as_ref()),
        compute_waiting_reason: compute_status
            .and_then(|c| c.state.as_ref())
            .and_then(|s| s.waiting.as_ref())
            .and_then(|w| w.reason.clone()),
        compute_last_termination_reason: compute_status
            .and_then(|c| c.last_state.as_ref())
            .and_then(|s| s.terminated.as_ref())
            .and_then(|t| t.reason.clone()),
        created: pod.metadata.creation_timestamp.as_ref().and_then(k8s_time),
        deletion_timestamp: pod.metadata.deletion_timestamp.as_ref().and_then(k8s_time),
    }
}

fn node_view(node: &Node) -> NodeView {
    let status = node.status.as_ref();
    NodeView {
        name: node.metadata.name.clone().unwrap_or_default(),
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone()),
        allocatable: status
            .and_then(|s| s.allocatable.as_ref())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect())
            .unwrap_or_default(),
        unschedulable: node
            .spec
            .as_ref()
            .and_then(|s| s.unschedulable)
            .unwrap_or(false),
    }
}

fn volume_views(g: &Gathered, vm: &VirtualMachine) -> Vec<VolumeView> {
    let mut out = Vec::new();
    for (volume, claim, is_dv) in volume_claims(vm) {
        if is_dv {
            let dv = g
                .data_volumes
                .iter()
                .find(|d| d.metadata.name.as_deref() == Some(&claim));
            out.push(VolumeView {
                kind: "DataVolume".into(),
                name: claim.clone(),
                volume: volume.clone(),
                phase: dv
                    .and_then(|d| d.status.as_ref())
                    .and_then(|s| s.phase.clone()),
                ready: dv
                    .and_then(|d| d.status.as_ref())
                    .and_then(|s| s.extra.get("conditions"))
                    .and_then(|c| c.as_array())
                    .and_then(|cs| {
                        cs.iter()
                            .find(|c| c.get("type").and_then(|t| t.as_str()) == Some("Ready"))
                    })
                    .and_then(|c| c.get("status").and_then(|s| s.as_str()))
                    .map(str::to_string),
                exists: dv.is_some(),
                ..Default::default()
            });
        }
        let pvc = g.pvcs.get(&claim);
        if pvc.is_some() || !is_dv {
            out.push(VolumeView {
                kind: "PersistentVolumeClaim".into(),
                name: claim.clone(),
                volume,
                phase: pvc
                    .and_then(|p| p.status.as_ref())
                    .and_then(|s| s.phase.clone()),
                ready: None,
                exists: pvc.is_some(),
                ..Default::default()
            });
        }
    }
    out
}

// ------------------------------------------------------------------------------------------
// The controller: Lease, queues, expectations
// ------------------------------------------------------------------------------------------

struct ControllerPart {
    lease: Option<LeaseView>,
    source: ControllerSource,
    queues: Vec<QueueView>,
    missing: Vec<Missing>,
}

fn lease_view(g: &Gathered) -> (Option<LeaseView>, Vec<Missing>) {
    let mut missing = Vec::new();
    let Some(lease) = &g.lease else {
        return (None, missing);
    };
    let record = LeaseRecord::from_spec(lease.spec.as_ref());
    let holder = record.holder().map(str::to_string);
    let endpoint = crate::api::annotation(
        &lease.metadata,
        crate::runtime::lease::DEBUG_ENDPOINT_ANNOTATION,
    )
    .map(str::to_owned);
    let holder_kind = match (&holder, &endpoint, g.holder_is_pod) {
        (None, _, _) => HolderKind::None,
        (Some(_), Some(_), _) => HolderKind::VirtctlRs,
        (Some(_), None, Some(true)) => HolderKind::KubeVirt,
        _ => HolderKind::Unknown,
    };
    let renew_age = record.renew_time.map(|t| seconds(t, g.now));
    let duration = lease.spec.as_ref().and_then(|s| s.lease_duration_seconds);
    let stale = holder.is_some()
        && match (record.renew_time, duration) {
            (Some(t), Some(d)) => t + chrono::Duration::seconds(i64::from(d)) < g.now,
            (None, _) => true,
            _ => false,
        };
    if stale {
        missing.push(Missing {
            what: "leader".into(),
            reason: format!(
                "stale Lease {}: renewed {} ago, lease duration {} s: the holder {:?} is probably gone",
                g.lease_key,
                renew_age.map_or("never".into(), human_duration),
                duration.unwrap_or(0),
                holder.as_deref().unwrap_or("")
            ),
        });
    }
    (
        Some(LeaseView {
            lease: g.lease_key.clone(),
            holder_identity: holder,
            holder_kind,
            renew_time: record.renew_time,
            acquire_time: record.acquire_time,
            lease_duration_seconds: duration,
            lease_transitions: lease.spec.as_ref().and_then(|s| s.lease_transitions),
            renew_age_seconds: renew_age,
            stale,
            debug_endpoint: endpoint,
        }),
        missing,
    )
}

/// One sample of a Prometheus text exposition: `(metric, labels, value)`.
fn parse_samples(text: &str) -> Vec<(String, BTreeMap<String, String>, f64)> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let Some(close) = line[open..].find('}').map(|c| open + c) else {
                    continue;
                };
                (&line[..open], &line[open + 1..close], &line[close + 1..])
            }
            None => match line.split_once(char::is_whitespace) {
                Some((n, r)) => (n, "", r),
                None => continue,
            },
        };
        let Some(value) = rest
            .split_whitespace()
            .next()
            .and_then(|v| v.parse::<f64>().ok())
        else {
            continue;
        };
        let mut map = BTreeMap::new();
        for pair in labels.split(',').filter(|p| !p.trim().is_empty()) {
            if let Some((k, v)) = pair.split_once('=') {
                map.insert(k.trim().to_string(), v.trim().trim_matches('"').to_string());
            }
        }
        out.push((name.to_string(), map, value));
    }
    out
}

/// The VM and VMI work queues from KubeVirt's metrics (`kubevirt_workqueue_depth`,
/// `kubevirt_workqueue_adds_total`, `kubevirt_workqueue_retries_total`,
/// `kubevirt_workqueue_longest_running_processor_seconds`,
/// label `name`; pkg/monitoring/metrics/common/workqueue/metrics.go:33-108).
pub(crate) fn queues_from_metrics(text: &str) -> Vec<QueueView> {
    let mut by_name: BTreeMap<String, QueueView> = BTreeMap::new();
    for (metric, labels, value) in parse_samples(text) {
        let Some(queue) = labels.get("name") else {
            continue;
        };
        if queue != VM_QUEUE_NAME && queue != VMI_QUEUE_NAME {
            continue;
        }
        let entry = by_name.entry(queue.clone()).or_insert_with(|| QueueView {
            name: queue.clone(),
            ..Default::default()
        });
        match metric.as_str() {
            "kubevirt_workqueue_depth" => entry.depth = value.max(0.0) as u64,
            "kubevirt_workqueue_retries_total" => entry.retries = value.max(0.0) as u64,
            "kubevirt_workqueue_adds_total" => entry.adds_total = Some(value.max(0.0) as u64),
            "kubevirt_workqueue_longest_running_processor_seconds" => {
                entry.longest_running_processor_seconds = Some(value)
            }
            _ => {}
        }
    }
    by_name.into_values().collect()
}

/// Shorter waits than this are a key's ordinary retry, not worth a line.
const NOTABLE_RETRY_WAIT_SECONDS: f64 = 1.0;

/// This key parked after failed reconciles, when it is due and why so late: each failure
/// re-adds the key through the queue's rate limiter (`AddRateLimited`, vm.go:336-355; the VMI
/// controller's `Execute` does the same), the maximum of its own backoff (5 ms × 2^(failures-1))
/// and a token bucket all keys share (10 a second after a burst of 100; client-go
/// `DefaultTypedControllerRateLimiter`, vm.go:153-156). After a burst of failures the bucket is
/// reserved minutes ahead and a key that failed once waits that long
/// (kubernetes/kubernetes#104554); a watch event for the key queues it at once.
///
/// The bucket is named as the cause only when it is reserved at least as far ahead as the key
/// waits (a key parked by the bucket leaves it reserved past its own ready time); otherwise the
/// key's own backoff is, when it reaches that far.
fn rate_limited_retry(queues: &[QueueView]) -> Option<String> {
    let q = queues.iter().find(|q| {
        q.key_state == Some(KeyState::Waiting)
            && q.retries > 0
            && q.key_seconds.unwrap_or(0.0) >= NOTABLE_RETRY_WAIT_SECONDS
    })?;
    let left = q.key_seconds.unwrap_or(0.0);
    let shared = q.rate_limiter_wait_seconds.unwrap_or(0.0);
    let failures = format!(
        "{} failed reconcile{}",
        q.retries,
        if q.retries == 1 { "" } else { "s" }
    );
    // Its own backoff after `retries` failures: base × 2^(retries-1), capped.
    let own = (DEFAULT_BASE_DELAY.as_secs_f64()
        * 2f64.powi(q.retries.saturating_sub(1).min(40) as i32))
    .min(DEFAULT_MAX_DELAY.as_secs_f64());
    // Reservations and ready times are taken a few ms apart: allow for it.
    let slack = 0.05;
    let why = if shared + slack >= left {
        format!(
            "; the queue's shared rate limit is reserved {} ahead ({DEFAULT_BUCKET_QPS} retries \
             a second after a burst of {DEFAULT_BUCKET_BURST}, for all keys)",
            human_duration(shared)
        )
    } else if own + slack >= left {
        format!(
            "; its own backoff after {failures} is {} (5 ms doubling per failure)",
            human_duration(own)
        )
    } else {
        String::new()
    };
    let wakes = if q.name == VMI_QUEUE_NAME {
        "a change to the VMI or its launcher pod"
    } else {
        "a change to the VM, its VMI or its DataVolumes"
    };
    Some(format!(
        "retry after {failures}: {} runs this key again in {}{why}; {wakes} runs it sooner",
        q.name,
        human_duration(left)
    ))
}

fn queues_from_debug(state: &DebugState, key: Option<&str>) -> Vec<QueueView> {
    [VM_QUEUE_NAME, VMI_QUEUE_NAME]
        .into_iter()
        .filter_map(|name| {
            let q = state.queue(name)?;
            let mut view = QueueView {
                name: name.to_string(),
                depth: q.depth as u64,
                adds_total: Some(q.adds_total),
                rate_limiter_wait_seconds: Some(q.rate_limiter_wait_seconds),
                ..Default::default()
            };
            match key {
                Some(key) => {
                    view.retries = state.retries(name, key) as u64;
                    let (ks, secs) = if let Some(k) = q.in_flight.iter().find(|k| k.key == key) {
                        (KeyState::InFlight, Some(k.running_seconds))
                    } else if let Some(k) = q.queued.iter().find(|k| k.key == key) {
                        (KeyState::Queued, Some(k.queued_seconds))
                    } else if let Some(k) = q.waiting.iter().find(|k| k.key == key) {
                        (KeyState::Waiting, Some(k.ready_in_seconds))
                    } else {
                        (KeyState::Idle, None)
                    };
                    view.key_state = Some(ks);
                    view.key_seconds = secs;
                }
                None => view.retries = q.retries.iter().map(|r| r.num_requeues as u64).sum(),
            }
            Some(view)
        })
        .collect()
}

fn controller_part(g: &Gathered, key: Option<&str>) -> ControllerPart {
    let (lease, mut missing) = lease_view(g);
    let (source, queues) = match &g.controller {
        ControllerView::None => (ControllerSource::default(), Vec::new()),
        ControllerView::DebugState { url, state } => {
            let queues = queues_from_debug(state, key);
            if queues.is_empty() {
                missing.push(Missing {
                    what: "queues".into(),
                    reason: format!(
                        "the instance behind {url} ({}) does not lead: no work queues",
                        state.identity
                    ),
                });
            }
            (
                ControllerSource {
                    kind: ControllerSourceKind::DebugEndpoint,
                    url: Some(url.clone()),
                    expectations_exposed: true,
                    debug_state: Some((**state).clone()),
                },
                queues,
            )
        }
        ControllerView::Metrics { url, text } => {
            missing.push(Missing {
                what: "expectations".into(),
                reason: "not exposed by this controller (KubeVirt's virt-controller publishes only Prometheus metrics)".into(),
            });
            let queues = queues_from_metrics(text);
            if queues.is_empty() {
                missing.push(Missing {
                    what: "queues".into(),
                    reason: format!("{url}: no kubevirt_workqueue_* samples for the VM/VMI queues"),
                });
            }
            (
                ControllerSource {
                    kind: ControllerSourceKind::Metrics,
                    url: Some(url.clone()),
                    expectations_exposed: false,
                    debug_state: None,
                },
                queues,
            )
        }
    };
    ControllerPart {
        lease,
        source,
        queues,
        missing,
    }
}

fn debug_state(g: &Gathered) -> Option<&DebugState> {
    match &g.controller {
        ControllerView::DebugState { state, .. } => Some(state),
        _ => None,
    }
}

fn expectation_views(state: &DebugState, key: &str) -> Vec<ExpectationView> {
    let timeout = EXPECTATIONS_TIMEOUT.as_secs_f64();
    state
        .expectations
        .iter()
        .flat_map(|store| {
            store
                .entries
                .iter()
                .filter(|e| e.key == key)
                .map(move |e| ExpectationView {
                    store: store.name.clone(),
                    key: e.key.clone(),
                    adds: e.add,
                    dels: e.del,
                    age_seconds: e.age_seconds,
                    expires_in_seconds: (timeout - e.age_seconds).max(0.0),
                    satisfied: e.satisfied,
                    expected_deletions: e.expected_deletions.clone(),
                })
        })
        .collect()
}

fn counts(list: &[ExpectationView], store: &str) -> Option<ExpectationCounts> {
    list.iter()
        .find(|e| e.store == store)
        .map(|e| ExpectationCounts {
            adds: e.adds,
            dels: e.dels,
            // Satisfied although not fulfilled: the entry expired (expectations.go:120-145).
            expired: e.satisfied && !(e.adds <= 0 && e.dels <= 0),
        })
}

// ------------------------------------------------------------------------------------------
// The whole inspection
// ------------------------------------------------------------------------------------------

/// Turn the gathered objects into the [`Inspection`].
pub(crate) fn analyze(g: &Gathered) -> Inspection {
    let key = format!("{}/{}", g.namespace, g.name);
    let now = g.now;
    let mut ins = Inspection {
        generated_at: now,
        namespace: g.namespace.clone(),
        name: g.name.clone(),
        missing: g.missing.clone(),
        ..Default::default()
    };
    let part = controller_part(g, Some(&key));
    ins.lease = part.lease;
    ins.controller = part.source;
    ins.queues = part.queues;
    ins.missing.extend(part.missing);
    let state = debug_state(g);
    ins.settings = Some(super::settings_check::settings_check(&g.settings, state));
    if let Some(state) = state {
        ins.expectations = expectation_views(state, &key);
        for controller in [VM_CONTROLLER, VMI_CONTROLLER] {
            if let Some(r) = state.reconcile(controller, &key) {
                ins.last_reconciles.push(ReconcileView {
                    controller: controller.to_string(),
                    at: r.at,
                    result: r.result.clone(),
                    error: r.error.clone(),
                    actions: r.actions.clone(),
                });
            }
        }
    }
    ins.pods = g.pods.iter().map(pod_view).collect();
    ins.node = g.node.as_ref().map(node_view);
    ins.vmi = g.vmi.as_ref().map(|v| vmi_view(v, now));
    ins.events = events(g);
    let Some(vm) = &g.vm else {
        ins.missing.push(Missing {
            what: "vm".into(),
            reason: "not found".into(),
        });
        return ins;
    };
    ins.vm = Some(vm_view(vm, now));
    ins.volumes = volume_views(g, vm);
    with_vmi_volume_status(&mut ins.volumes, g.vmi.as_ref());

    // The next decision, with the leader's expectations (satisfied when unknown).
    let exp_known = state.is_some();
    let decisions = decide_next(g, vm, &ins.expectations);
    let (vm_decision, vmi_decision) = (&decisions.vm, decisions.vmi.as_ref());
    ins.printable_status_reason = Some(printable_reason(
        g,
        vm,
        &decisions.vm_expectations,
        vm_decision,
    ));
    ins.next_decision = Some(next_decision(
        g,
        &ins,
        vm,
        vm_decision,
        vmi_decision,
        exp_known,
    ));
    ins.caught_up = Some(caught_up(vm, g.vmi.as_ref(), &g.revisions, state));
    match overhead_check(g, vm, &g.settings) {
        Ok(check) => ins.overhead_check = check,
        Err(reason) => ins.missing.push(Missing {
            what: "overheadCheck".into(),
            reason,
        }),
    }
    ins.kubevirt_version_overhead = g.compare_version.and_then(|v| version_overhead(g, vm, v));
    ins.blockers = blockers(g, vm, &ins);
    ins
}

/// Both controllers' decisions on the gathered state.
pub(crate) struct Decisions {
    /// The VM controller's.
    pub vm: VmDecision,
    /// The VMI controller's, when a VMI exists.
    pub vmi: Option<VmiDecision>,
    /// The VM's expectations the VM decision saw.
    pub vm_expectations: ExpectationsView,
}

/// The VMI controller's expectations from the key's entries (`vmi-pod`, `vmi-self`; none:
/// satisfied).
pub(crate) fn vmi_expectations_state(expectations: &[ExpectationView]) -> ExpectationsState {
    let pod_entry = expectations.iter().find(|e| e.store == STORE_VMI_POD);
    let self_entry = expectations.iter().find(|e| e.store == STORE_VMI_SELF);
    let pvc_entry = expectations.iter().find(|e| e.store == "vmi-pvc");
    ExpectationsState {
        pods_satisfied: pod_entry.is_none_or(|e| e.satisfied),
        pending_pod_creations: pod_entry.map_or(0, |e| e.adds),
        pending_pod_deletions: pod_entry.map_or(0, |e| e.dels),
        vmi_satisfied: self_entry.is_none_or(|e| e.satisfied),
        pvcs_satisfied: pvc_entry.is_none_or(|e| e.satisfied),
    }
}

/// A write of the reconcile the API server refused, with the error the controller got: the
/// decision is made as the executor makes it after that answer (the VM controller's
/// `decide_with_failures`, the VMI controller's `decide_after_sync`), so what the reconcile
/// writes next is decided from the error (a VMI's `Synchronized=False` `FailedCreate`, a VM's
/// `Failure` condition).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Refused {
    /// The VM decision's action at this index (of `VmDecision::actions`) failed.
    Vm(usize, crate::controller::common::ApiFailure),
    /// The VMI decision's sync action at this index (of `VmiDecision::sync_actions`) failed.
    VmiSync(usize, crate::controller::common::ApiFailure),
}

/// Run the VM and VMI controllers' pure decisions on the gathered objects, on snapshots built
/// by the executors' own constructors, with the given expectations entries of this key (none:
/// satisfied).
pub(crate) fn decide_next(
    g: &Gathered,
    vm: &VirtualMachine,
    expectations: &[ExpectationView],
) -> Decisions {
    decide_next_refused(g, vm, expectations, None)
}

/// [`decide_next`] when a write of the reconcile was `refused` (`None`: every write succeeds).
pub(crate) fn decide_next_refused(
    g: &Gathered,
    vm: &VirtualMachine,
    expectations: &[ExpectationView],
    refused: Option<&Refused>,
) -> Decisions {
    let now = g.now;
    let vm_exp = ExpectationsView {
        vmi: counts(expectations, STORE_VM_VMI),
        data_volumes: counts(expectations, STORE_VM_DV),
    };
    let data_volume = |name: &str| {
        g.data_volumes
            .iter()
            .find(|d| d.metadata.name.as_deref() == Some(name))
            .cloned()
    };
    let mut vm_snap = vm_snapshot(
        vm.clone(),
        g.vmi.clone().map(std::sync::Arc::new),
        data_volume,
        g.revisions.iter().cloned().map(std::sync::Arc::new),
        vm_exp,
        &g.settings,
        now,
    );
    // The claims the inspector read, as the VM controller's PVC cache would give them.
    vm_snap.pvcs = template_pvcs(vm, |claim| g.pvcs.get(claim).cloned());
    vm_snap.storage = g.storage.clone().map(std::sync::Arc::new);
    // The template's claims and the backend-storage ones, each once.
    let claims: BTreeMap<&str, &k8s_openapi::api::core::v1::PersistentVolumeClaim> = g
        .pvcs
        .values()
        .chain(&g.backend_storage.claims)
        .filter_map(|c| Some((c.metadata.name.as_deref()?, c)))
        .collect();
    if crate::controller::vm::volume_snapshot::vm_needs_backend_storage(vm) {
        vm_snap.backend_claim = crate::controller::vm::volume_snapshot::find_backend_claim(
            vm,
            claims.values().copied(),
        );
        if let Some(Ok(name)) = &vm_snap.backend_claim
            && let Some(c) = claims.get(name.as_str())
        {
            vm_snap
                .pvcs
                .insert(name.clone(), crate::controller::vm::PvcInfo::of(c));
        }
    }
    let classes: Vec<_> = g.backend_storage.storage_classes.iter().collect();
    let vm_decision = match refused {
        Some(Refused::Vm(index, error)) => {
            let mut failures = crate::controller::vm::ApiFailures::none();
            failures.insert(*index, error.clone());
            crate::controller::vm::decide_with_failures(&vm_snap, &failures)
        }
        _ => crate::controller::vm::decide(&vm_snap),
    };
    let vmi_decision = g.vmi.as_ref().map(|vmi| {
        let state = vmi_expectations_state(expectations);
        let owner_uid = owner_vm_name(vmi)
            .filter(|n| Some(n) == vm.metadata.name.as_ref())
            .and(vm.metadata.uid.clone());
        let mut snap = vmi_snapshot(
            vmi.clone(),
            g.pods.iter().cloned().map(std::sync::Arc::new),
            owner_uid,
            state,
            (
                data_volume,
                |claim: &str| g.pvcs.get(claim).cloned(),
                &Default::default(),
                // The claims, StorageClasses and StorageProfiles read for backend storage,
                // as the VMI executor reads its caches.
                crate::controller::vmi::backend_storage::state(
                    vmi,
                    claims.values().copied(),
                    &classes,
                    |class| g.backend_storage.profile_sets.get(class).cloned(),
                    g.settings.vm_state_storage_class.as_deref(),
                ),
            ),
            (&g.settings, || g.namespace_context()),
            Time::from_datetime(now),
        );
        snap.topology = g.topology.clone();
        decide_vmi(&snap, refused)
    });
    Decisions {
        vm: vm_decision,
        vmi: vmi_decision,
        vm_expectations: vm_exp,
    }
}

/// The VMI decision on `snap`, after the sync action `refused` names failed when it does.
pub(crate) fn decide_vmi(
    snap: &crate::controller::vmi::VmiSnapshot,
    refused: Option<&Refused>,
) -> VmiDecision {
    match refused {
        Some(Refused::VmiSync(index, error)) => {
            let outcome = crate::controller::vmi::SyncOutcome::Failed {
                index: *index,
                error: error.clone(),
            };
            crate::controller::vmi::decide_after_sync(snap, &outcome)
        }
        _ => crate::controller::vmi::decide(snap),
    }
}

fn events(g: &Gathered) -> Vec<EventView> {
    let mut out: Vec<EventView> = g.events.iter().map(|e| e.view.clone()).collect();
    out.sort_by(|a, b| a.time.cmp(&b.time).then(a.object.cmp(&b.object)));
    out
}

/// The gathered PVCs as the VM rules see them.
fn pvc_infos(g: &Gathered) -> BTreeMap<String, PvcInfo> {
    g.pvcs
        .iter()
        .map(|(n, p)| (n.clone(), PvcInfo::of(p)))
        .collect()
}

fn printable_reason(
    g: &Gathered,
    vm: &VirtualMachine,
    expectations: &ExpectationsView,
    decision: &VmDecision,
) -> PrintableStatusReason {
    // The rules read the VM as the sync left it (its new status), as KubeVirt's
    // setPrintableStatus does at the end of updateStatus.
    let after = decision.status.as_ref().or(vm.status.as_ref());
    let pvcs: BTreeMap<String, PvcInfo> = pvc_infos(g);
    let (status, rule) = printable_status(&PrintableContext {
        vm,
        status: after,
        vmi: g.vmi.as_ref(),
        expectations,
        data_volumes: &g.data_volumes,
        pvcs: &pvcs,
        now: g.now,
        rules: &g.settings.kubevirt_version.controller_rules(),
    });
    let mut inputs = BTreeMap::new();
    inputs.insert(
        "runStrategy".to_string(),
        vm_strategy(vm).map_or_else(|e| format!("invalid: {e}"), |s| s.as_str().to_string()),
    );
    inputs.insert(
        "vmi.phase".to_string(),
        g.vmi
            .as_ref()
            .map_or("no VMI".to_string(), |v| v.phase().as_str().to_string()),
    );
    if let Some(vmi) = &g.vmi {
        for c in ["Synchronized", "PodScheduled", "Paused", "Ready"] {
            if let Some(cond) = vmi.condition(c) {
                inputs.insert(
                    format!("vmi.{c}"),
                    match &cond.reason {
                        Some(r) if !r.is_empty() => format!("{} ({r})", cond.status),
                        _ => cond.status.to_string(),
                    },
                );
            }
        }
        if vmi.is_deleting() {
            inputs.insert("vmi.deletionTimestamp".into(), "set".into());
        }
    }
    if let Some(pod) = g.pods.first() {
        inputs.insert(
            "pod.phase".into(),
            pod.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default(),
        );
        if let Some(c) = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        {
            inputs.insert(
                "pod.PodScheduled".into(),
                format!("{} {}", c.status, c.reason.clone().unwrap_or_default())
                    .trim()
                    .to_string(),
            );
        }
    }
    for dv in &g.data_volumes {
        inputs.insert(
            format!("dataVolume/{}", dv.metadata.name.as_deref().unwrap_or("")),
            dv.status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_else(|| "no phase".into()),
        );
    }
    for (name, pvc) in &pvcs {
        inputs.insert(
            format!("pvc/{name}"),
            pvc.phase.clone().unwrap_or_else(|| "no phase".into()),
        );
    }
    inputs.insert(
        "expectations.vmiStartExpected".into(),
        expectations.vmi_start_expected().to_string(),
    );
    inputs.insert(
        "expectations.vmiStopExpected".into(),
        expectations.vmi_stop_expected().to_string(),
    );
    if let Some(f) = after.and_then(|s| s.start_failure.as_ref()) {
        inputs.insert(
            "startFailure.consecutiveFailCount".into(),
            f.consecutive_fail_count.to_string(),
        );
    }
    PrintableStatusReason {
        computed: status.as_str().to_string(),
        stored: vm.status.as_ref().and_then(|s| s.printable_status.clone()),
        rule: rule.to_string(),
        inputs,
    }
}

fn vmi_action_kind(a: &VmiAction) -> &'static str {
    match a {
        VmiAction::CreatePod { .. } => "CreatePod",
        VmiAction::DeletePod { .. } => "DeletePod",
        VmiAction::DeleteTemporaryPod { .. } => "DeleteTemporaryPod",
        VmiAction::CreateAttachmentPod { .. } => "CreateAttachmentPod",
        VmiAction::CreateTriggerPod { .. } => "CreateTriggerPod",
        VmiAction::DeleteAttachmentPod { .. } => "DeleteAttachmentPod",
        VmiAction::CreateBackendStoragePvc { .. } => "CreateBackendStoragePvc",
        VmiAction::DeleteBackendStoragePvc { .. } => "DeleteBackendStoragePvc",
        VmiAction::PatchPod { .. } => "PatchPod",
        VmiAction::PatchPodReadinessCondition { .. } => "PatchPodReadinessCondition",
        VmiAction::UpdateVmi { .. } => "UpdateVmi",
        VmiAction::PatchVmi { .. } => "PatchVmi",
        VmiAction::Event { .. } => "Event",
    }
}

fn next_decision(
    g: &Gathered,
    ins: &Inspection,
    vm: &VirtualMachine,
    vm_d: &VmDecision,
    vmi_d: Option<&VmiDecision>,
    exp_known: bool,
) -> NextDecision {
    let mut nd = NextDecision::default();
    for a in &vm_d.actions {
        nd.actions.push(PlannedActionView {
            controller: "vm".into(),
            kind: a.action.kind().to_string(),
            why: a.why.clone(),
        });
    }
    if let Some(d) = vmi_d {
        for a in d.actions() {
            nd.actions.push(PlannedActionView {
                controller: "vmi".into(),
                kind: vmi_action_kind(a).to_string(),
                why: a.why().to_string(),
            });
        }
    }
    nd.explanation = vm_d
        .explanation
        .iter()
        .map(|l| format!("vm: {l}"))
        .chain(
            vmi_d
                .into_iter()
                .flat_map(|d| d.explanation.iter().map(|l| format!("vmi: {l}"))),
        )
        .collect();
    if !exp_known {
        nd.explanation.push(
            "expectations unknown (no debug endpoint): decided as if every expectation were satisfied"
                .into(),
        );
    }
    let strategy =
        vm_strategy(vm).map_or_else(|_| "invalid".to_string(), |s| s.as_str().to_string());
    let vmi_phase = g.vmi.as_ref().map(|v| {
        let p = v.phase().as_str();
        if p.is_empty() {
            "Unset".to_string()
        } else {
            p.to_string()
        }
    });

    // A wait: expectations (VM or VMI controller), or start-failure backoff.
    let vm_entry = ins
        .expectations
        .iter()
        .find(|e| e.store == STORE_VM_VMI && !e.satisfied);
    let backoff_left = start_failure_backoff_time_left(vm.status.as_ref(), g.now);
    if let Some(e) = vm_entry {
        let what = if e.adds > 0 {
            "VMI creation"
        } else {
            "VMI deletion"
        };
        nd.waiting = Some(format!(
            "waiting: {what} expected {} ago, expectations expire in {}",
            human_duration(e.age_seconds),
            human_duration(e.expires_in_seconds)
        ));
    } else if let Some(SkipReason::ExpectationsPending(text)) =
        vmi_d.and_then(|d| d.skipped.as_ref())
    {
        let age = ins
            .expectations
            .iter()
            .find(|e| e.store == STORE_VMI_POD && !e.satisfied)
            .map(|e| {
                format!(
                    " (set {} ago, expire in {})",
                    human_duration(e.age_seconds),
                    human_duration(e.expires_in_seconds)
                )
            })
            .unwrap_or_default();
        nd.waiting = Some(format!("waiting: {text}{age}"));
    } else if backoff_left > 0 {
        nd.waiting = Some(format!(
            "CrashLoopBackOff: next start in {}",
            human_duration(backoff_left as f64)
        ));
    }
    // A parked retry is not a wait of the decision itself: the summary below stays what the
    // controllers would do.
    let decision_wait = nd.waiting.clone();
    nd.waiting = decision_wait
        .clone()
        .or_else(|| rate_limited_retry(&ins.queues));

    let find_vm = |kind: &str| vm_d.actions.iter().find(|a| a.action.kind() == kind);
    nd.summary = if let (Some(w), Some(_)) = (&nd.waiting, vm_entry) {
        w.clone()
    } else if let Some(VmAction::DeleteVmi { name, .. }) = find_vm("DeleteVmi").map(|a| &a.action) {
        format!("{strategy}: would delete VMI {name}")
    } else if let Some(a) = find_vm("CreateVmi") {
        format!("{strategy}: would create VMI {} ({})", g.name, a.why)
    } else if backoff_left > 0 {
        nd.waiting.clone().unwrap_or_default()
    } else if let Some(w) = &decision_wait {
        w.clone()
    } else {
        let vmi_write = vmi_d.and_then(|d| d.actions().find(|a| a.is_write()));
        let strategy_line = vm_d
            .explanation
            .iter()
            .rev()
            .find(|l| l.starts_with("runStrategy"))
            .cloned();
        let prefix = vmi_phase
            .as_ref()
            .map_or("no VMI".to_string(), |p| format!("VMI {p}"));
        let vm_part = match strategy_line {
            Some(line) => format!("{prefix}: {line}"),
            None => match vm_d.explanation.last() {
                Some(l) => format!("{prefix}: {l}"),
                None => format!("{prefix}: nothing to do"),
            },
        };
        match vmi_write {
            Some(w) => format!(
                "{vm_part}; the VMI controller would {}: {}",
                vmi_action_kind(w),
                w.why()
            ),
            None => vm_part,
        }
    };
    nd.disagreement = disagreement(g, ins, vm, vm_d, vmi_d);
    nd
}

fn disagreement(
    g: &Gathered,
    ins: &Inspection,
    vm: &VirtualMachine,
    vm_d: &VmDecision,
    vmi_d: Option<&VmiDecision>,
) -> Option<String> {
    let state = debug_state(g)?;
    if let Some(cached) = state.cached.as_ref() {
        let versions = [
            (
                "VM",
                cached
                    .vm
                    .as_ref()
                    .and_then(|c| c.resource_version.as_deref()),
                vm.metadata.resource_version.as_deref(),
                ": its last reconcile saw an older VM",
            ),
            (
                "VMI",
                cached
                    .vmi
                    .as_ref()
                    .and_then(|c| c.resource_version.as_deref()),
                g.vmi
                    .as_ref()
                    .and_then(|v| v.metadata.resource_version.as_deref()),
                "",
            ),
        ];
        for (kind, cached, server, consequence) in versions {
            if cached != server {
                return Some(format!(
                    "the leader's cache holds {kind} resourceVersion {} while the server has {}{consequence}",
                    cached.unwrap_or("(none)"),
                    server.unwrap_or("(none)")
                ));
            }
        }
    }
    let idle = ins
        .queues
        .iter()
        .all(|q| q.key_state.is_none_or(|s| s == KeyState::Idle));
    let satisfied = ins.expectations.iter().all(|e| e.satisfied);
    let writes: Vec<&str> = vm_d
        .actions
        .iter()
        .filter(|a| a.action.is_api_call())
        .map(|a| a.action.kind())
        .chain(
            vmi_d
                .into_iter()
                .flat_map(|d| d.actions().filter(|a| a.is_write()).map(vmi_action_kind)),
        )
        .collect();
    if idle && satisfied && !writes.is_empty() && !ins.queues.is_empty() {
        let last = ins
            .last_reconciles
            .iter()
            .map(|r| {
                format!(
                    "{} at {}: {} [{}]",
                    r.controller,
                    r.at.format("%H:%M:%S"),
                    r.result,
                    r.actions.join(", ")
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Some(format!(
            "on this state the controllers would {}, but the key is not queued and the leader's last reconcile ({}) left nothing to do",
            writes.join(", "),
            if last.is_empty() {
                "none recorded".to_string()
            } else {
                last
            }
        ));
    }
    None
}

/// The firmware UUID path the firmware synchronizer writes (firmware.go:48-81).
const FIRMWARE_UUID_PATH: &str = "spec.template.spec.domain.firmware.uuid";

/// The template fields that differ between the VMI's start ControllerRevision and the VM, or
/// `None` when there is no VMI or its revision was not read. KubeVirt bumps the VMI's
/// `kubevirt.io/vm-generation` annotation (and so `status.observedGeneration`) only when the
/// two templates are semantically equal (vm.go:1438-1475,
/// `conditionallyBumpGenerationAnnotationOnVmi`).
fn template_changes_since_start(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    revisions: &[k8s_openapi::api::apps::v1::ControllerRevision],
) -> Option<Vec<FieldChange>> {
    let name = vmi?
        .status
        .as_ref()?
        .virtual_machine_revision_name
        .as_deref()?;
    let revision = revisions
        .iter()
        .find(|r| r.metadata.name.as_deref() == Some(name))?;
    let started = crate::controller::vm::revision::revision_data(revision)?
        .pointer("/spec/template")?
        .clone();
    let current = serde_json::to_value(&vm.spec)
        .ok()?
        .get("template")?
        .clone();
    // Semantic equality first: nil and empty collections are the same to KubeVirt.
    if crate::controller::common::semantic_eq(&started, &current) {
        return Some(Vec::new());
    }
    let mut out = Vec::new();
    changed_paths("spec.template", Some(&started), Some(&current), &mut out);
    Some(out)
}

fn caught_up(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    revisions: &[k8s_openapi::api::apps::v1::ControllerRevision],
    state: Option<&DebugState>,
) -> CaughtUp {
    let generation = vm.metadata.generation;
    let observed = vm.status.as_ref().and_then(|s| s.observed_generation);
    let desired = vm.status.as_ref().and_then(|s| s.desired_generation);
    let generation_observed = generation.is_some() && generation == observed;
    let cached = state.and_then(|s| s.cached.as_ref());
    let vm_cache_current = cached.map(|c| {
        c.vm.as_ref().and_then(|o| o.resource_version.as_deref())
            == vm.metadata.resource_version.as_deref()
    });
    let vmi_cache_current = cached.map(|c| {
        c.vmi.as_ref().and_then(|o| o.resource_version.as_deref())
            == vmi.and_then(|v| v.metadata.resource_version.as_deref())
    });
    let mut parts = vec![format!(
        "generation {} / observedGeneration {} / desiredGeneration {}",
        generation.map_or("-".into(), |g| g.to_string()),
        observed.map_or("-".into(), |g| g.to_string()),
        desired.map_or("-".into(), |g| g.to_string()),
    )];
    let template_changes = if generation_observed || vmi.is_none() {
        Vec::new()
    } else {
        template_changes_since_start(vm, vmi, revisions).unwrap_or_default()
    };
    let vmi_uuid = vmi
        .and_then(|v| v.spec.domain.firmware.as_ref())
        .and_then(|f| f.uuid.as_deref());
    let only_persisted_uuid = !template_changes.is_empty()
        && template_changes.iter().all(|c| {
            c.path == FIRMWARE_UUID_PATH
                && c.after.as_ref().and_then(|v| v.as_str()).is_some()
                && c.after.as_ref().and_then(|v| v.as_str()) == vmi_uuid
        });
    parts.push(if generation_observed {
        "the VMI runs the current spec".into()
    } else if vmi.is_none() {
        "no VMI is running".into()
    } else if only_persisted_uuid {
        // The firmware synchronizer persists the UUID after the VMI was created from the
        // template without it (vm.go sync, firmware.go:48-81), which bumps the generation; the
        // start revision then never equals the template, so KubeVirt does not bump the VMI's
        // generation annotation until the next start. The VMI already runs with that UUID.
        "behind only because the controller persisted the firmware UUID after creating the VMI \
         (the VMI already has that UUID; KubeVirt leaves observedGeneration behind until the \
         next start, vm.go:1438-1475)"
            .into()
    } else if template_changes.is_empty() {
        "the running VMI does not reflect the latest spec yet".into()
    } else {
        let paths: Vec<&str> = template_changes.iter().map(|c| c.path.as_str()).collect();
        format!(
            "the running VMI does not reflect the latest spec: changed since it started: {}",
            paths.join(", ")
        )
    });
    match (vm_cache_current, vmi_cache_current) {
        (Some(true), Some(true)) => parts.push("the leader's caches are current".into()),
        (Some(a), Some(b)) => parts.push(format!(
            "the leader's cache is behind for the{}{}",
            if a { "" } else { " VM" },
            if b { "" } else { " VMI" }
        )),
        _ => parts.push("the leader's caches are unknown".into()),
    }
    CaughtUp {
        generation_observed,
        vm_cache_current,
        vmi_cache_current,
        template_changes,
        summary: parts.join("; "),
    }
}

/// The overhead `version`'s formula gives the VM with the cluster's other settings; `None` when
/// the formula cannot be computed (the overhead check names why).
fn version_overhead(
    g: &Gathered,
    vm: &VirtualMachine,
    version: KubeVirtVersion,
) -> Option<VersionOverhead> {
    let settings = ClusterSettings {
        kubevirt_version: version,
        ..g.settings.clone()
    };
    let check = overhead_check(g, vm, &settings).ok()??;
    Some(VersionOverhead {
        kubevirt_version: version,
        formula_bytes: check.formula_bytes,
        terms: check.terms,
        formula_request_bytes: check.formula_request_bytes,
    })
}

/// The formula (with `settings`) against the newest live pod (and the VMI's reported overhead).
fn overhead_check(
    g: &Gathered,
    vm: &VirtualMachine,
    settings: &ClusterSettings,
) -> Result<Option<OverheadCheck>, String> {
    let object = match &g.vmi {
        Some(vmi) => KubeVirtObject::Vmi(Box::new(vmi.clone())),
        None => KubeVirtObject::Vm(Box::new(vm.clone())),
    };
    formula_against(
        &object,
        &g.namespace,
        settings,
        &g.namespace_context(),
        current_pod(&g.pods),
        g.vmi.as_ref(),
    )
    .map(Some)
}

/// The gathered pod the VMI runs in: the first (newest) one not being deleted, else the newest.
pub(crate) fn current_pod(pods: &[Pod]) -> Option<&Pod> {
    pods.iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .or(pods.first())
}

fn formula_against(
    object: &KubeVirtObject,
    namespace: &str,
    settings: &ClusterSettings,
    ns_ctx: &NamespaceContext,
    pod: Option<&Pod>,
    vmi: Option<&VirtualMachineInstance>,
) -> Result<OverheadCheck, String> {
    let eff = effective_vmi(object, namespace, settings).map_err(|e| e.to_string())?;
    let breakdown = memory_overhead(&eff.spec, settings).map_err(|e| format!("field {e}"))?;
    let resources = compute_resources(&eff, settings, breakdown.total_bytes, ns_ctx)
        .map_err(|e| format!("field {e}"))?;
    let formula_request = resources.request_value("memory");
    let compute = pod.and_then(compute_container);
    let requests = compute
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.requests.as_ref());
    let pod_request = requests
        .and_then(|r| r.get("memory"))
        .and_then(|q| quantity_bytes(&q.0));
    let pod_limit = compute
        .and_then(|c| c.resources.as_ref())
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"))
        .and_then(|q| quantity_bytes(&q.0));
    let annotation = pod
        .and_then(|p| p.metadata.annotations.as_ref())
        .and_then(|a| a.get(MEMORY_OVERHEAD_BYTES))
        .and_then(|v| v.trim().parse::<i64>().ok());
    let status = vmi.and_then(status_overhead_bytes);
    let mut differences = Vec::new();
    let mut compare = |what: &str, value: Option<i64>, formula: Option<i64>| {
        if let (Some(v), Some(f)) = (value, formula)
            && v != f
        {
            let d = v - f;
            differences.push(format!(
                "{what} is {} bytes {} than the formula ({v} vs {f})",
                d.abs(),
                if d > 0 { "more" } else { "less" }
            ));
        }
    };
    compare("pod compute memory request", pod_request, formula_request);
    compare(
        &format!("pod annotation {MEMORY_OVERHEAD_BYTES}"),
        annotation,
        Some(breakdown.total_bytes),
    );
    compare(
        "VMI status.memory.memoryOverhead",
        status,
        Some(breakdown.total_bytes),
    );
    let parsed = crate::api::resources::VmiResources::parse(&eff.spec).ok();
    let vcpus = parsed
        .as_ref()
        .map(|res| overhead_vcpus(&eff.spec, res).0)
        .unwrap_or(1);
    let guest_memory = parsed
        .as_ref()
        .and_then(|r| r.guest.or_else(|| r.request("memory")))
        .map(|q| q.value());
    let formula_cpu = resources
        .requests
        .get("cpu")
        .and_then(|q| quantity_millis(&q.0));
    let pod_cpu = requests
        .and_then(|r| r.get("cpu"))
        .and_then(|q| quantity_millis(&q.0));
    let cpu_match = match (formula_cpu, pod_cpu) {
        (Some(f), Some(p)) => f == p,
        _ => true,
    };
    if !cpu_match {
        differences.push(format!(
            "pod compute CPU request is {}m, the formula {}m ({vcpus} vCPUs ÷ cpuAllocationRatio {})",
            pod_cpu.unwrap_or(0),
            formula_cpu.unwrap_or(0),
            settings.cpu_allocation_ratio
        ));
    }
    Ok(OverheadCheck {
        formula_bytes: breakdown.total_bytes,
        terms: breakdown.terms,
        formula_request_bytes: formula_request,
        pod_request_bytes: pod_request,
        formula_limit_bytes: resources.limit_value("memory"),
        pod_limit_bytes: pod_limit,
        guest_memory_bytes: guest_memory,
        annotation_bytes: annotation,
        status_bytes: status,
        matches: differences.is_empty(),
        differences,
        cpu: Some(CpuCheck {
            vcpus,
            allocation_ratio: i64::from(settings.cpu_allocation_ratio),
            formula_request_millis: formula_cpu,
            pod_request_millis: pod_cpu,
            matches: cpu_match,
        }),
    })
}

/// What keeps the VM from running, deepest object first: the controller (0), the VM (0), its
/// VMI (1), the launcher pod (2), volumes (3), nodes (4), then the diagnostics.
fn blockers(g: &Gathered, vm: &VirtualMachine, ins: &Inspection) -> Vec<Blocker> {
    let mut out = Blockers(Vec::new());
    lease_blockers(&mut out, g, ins);
    vm_blockers(&mut out, g, vm);
    vmi_blockers(&mut out, g);
    let unschedulable = pod_blockers(&mut out, g);
    volume_blockers(&mut out, g, ins);
    node_blockers(&mut out, ins);
    if unschedulable {
        capacity_blockers(&mut out, g, ins);
    }
    let mut out = out.0;
    out.extend(diagnostics(g, vm, ins));
    out.sort_by_key(|b| std::cmp::Reverse(b.depth));
    out
}

struct Blockers(Vec<Blocker>);

impl Blockers {
    fn add(&mut self, object: String, reason: &str, message: String, depth: u8) {
        self.0.push(Blocker {
            object,
            reason: reason.to_string(),
            message,
            depth,
            fix: None,
        })
    }
}

/// The controller itself (0): with no Lease, or a Lease nobody renews, nothing acts on the VM,
/// whatever its objects say.
fn lease_blockers(out: &mut Blockers, g: &Gathered, ins: &Inspection) {
    let lease_object = format!("Lease/{}", g.lease_key);
    match &ins.lease {
        None if g
            .missing
            .iter()
            .any(|m| m.what == "lease" && m.reason.contains("not found")) =>
        {
            out.add(
                lease_object,
                "NoController",
                format!(
                    "Lease {} not found: no virt-controller (or run-controller) has run against \
                     this cluster, so nothing will create, stop or update this VM's objects",
                    g.lease_key
                ),
                0,
            );
        }
        Some(lease) if lease.stale => out.add(
            lease_object,
            "ControllerNotRenewing",
            format!(
                "holder {} last renewed the Lease {} ago (duration {} s): no controller is \
                 acting until another one takes the Lease over",
                lease.holder_identity.as_deref().unwrap_or("(none)"),
                lease
                    .renew_age_seconds
                    .map_or_else(|| "long".to_string(), human_duration),
                lease.lease_duration_seconds.unwrap_or(0)
            ),
            0,
        ),
        _ => {}
    }
}

/// The VM's Failure condition and start backoff (0).
fn vm_blockers(out: &mut Blockers, g: &Gathered, vm: &VirtualMachine) {
    let vm_name = format!("VirtualMachine/{}", g.name);
    if let Some(c) = vm
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Failure" && c.is_true()))
    {
        out.add(
            vm_name.clone(),
            c.reason.as_deref().unwrap_or("Failure"),
            c.message.as_deref().unwrap_or_default().to_string(),
            0,
        );
    }
    let backoff_left = start_failure_backoff_time_left(vm.status.as_ref(), g.now);
    if backoff_left > 0 {
        let fails = vm
            .status
            .as_ref()
            .and_then(|s| s.start_failure.as_ref())
            .map_or(0, |f| f.consecutive_fail_count);
        out.add(
            vm_name.clone(),
            "CrashLoopBackOff",
            format!(
                "{fails} consecutive start failure(s): next start in {} (vm.go:1477-1504)",
                human_duration(backoff_left as f64)
            ),
            0,
        );
    }
}

/// The VMI's Synchronized=False condition and its failure (1).
fn vmi_blockers(out: &mut Blockers, g: &Gathered) {
    if let Some(vmi) = &g.vmi {
        let vmi_name = format!("VirtualMachineInstance/{}", g.name);
        if let Some(c) = vmi
            .condition("Synchronized")
            .filter(|c| c.status == "False")
        {
            out.add(
                vmi_name.clone(),
                c.reason.as_deref().unwrap_or("NotSynchronized"),
                c.message.as_deref().unwrap_or_default().to_string(),
                1,
            );
        }
        if vmi.phase() == crate::api::Phase::Failed {
            out.add(
                vmi_name,
                "Failed",
                vmi.status
                    .as_ref()
                    .and_then(|s| s.reason.clone())
                    .unwrap_or_else(|| "the VMI failed".into()),
                1,
            );
        }
    }
}

/// The launcher pod (2): its PriorityClass, scheduling, the compute container's waits and
/// OOM kills. True when the pod is unschedulable.
fn pod_blockers(out: &mut Blockers, g: &Gathered) -> bool {
    if let Some((pc, false)) = &g.priority_class {
        out.add(
            format!("PriorityClass/{pc}"),
            "PriorityClassNotFound",
            format!(
                "no PriorityClass with name {pc} was found: the API server rejects the virt-launcher pod"
            ),
            2,
        );
    }
    let mut unschedulable = false;
    if let Some(pod) = current_pod(&g.pods) {
        let pod_name = format!("Pod/{}", pod.metadata.name.as_deref().unwrap_or(""));
        if let Some(c) = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            })
        {
            unschedulable = true;
            out.add(
                pod_name.clone(),
                c.reason.as_deref().unwrap_or("Unschedulable"),
                c.message.clone().unwrap_or_default(),
                2,
            );
        }
        let view = pod_view(pod);
        if let Some(r) = view
            .compute_waiting_reason
            .filter(|r| r != "ContainerCreating")
        {
            out.add(
                pod_name.clone(),
                &r,
                "the compute container is waiting".into(),
                2,
            );
        }
        if let Some(r) = view
            .compute_last_termination_reason
            .filter(|r| r == "OOMKilled")
        {
            out.add(
                pod_name,
                &r,
                "the compute container was OOM-killed".into(),
                2,
            );
        }
    }
    unschedulable
}

/// The VM's volumes (3): missing, failed or not ready DataVolumes, unbound PVCs.
fn volume_blockers(out: &mut Blockers, g: &Gathered, ins: &Inspection) {
    for v in &ins.volumes {
        let object = format!("{}/{}", v.kind, v.name);
        if !v.exists {
            out.add(
                object,
                "NotFound",
                format!(
                    "volume {} refers to a {} that does not exist",
                    v.volume, v.kind
                ),
                3,
            );
            continue;
        }
        match (v.kind.as_str(), v.phase.as_deref()) {
            ("DataVolume", Some("Failed")) => out.add(
                object,
                "DataVolumeFailed",
                "the DataVolume failed".into(),
                3,
            ),
            ("DataVolume", Some("WaitForFirstConsumer")) => out.add(
                object,
                "WaitForFirstConsumer",
                "the DataVolume's claim binds only once a pod using it is scheduled: the VMI controller creates a temporary pod for that and deletes it once the DataVolume moves on (lifecycle.go:152-154, 188-193)".into(),
                3,
            ),
            ("DataVolume", phase) => {
                let ready = g
                    .data_volumes
                    .iter()
                    .find(|d| d.metadata.name.as_deref() == Some(&v.name))
                    .is_some_and(|d| d.is_ready());
                if !ready {
                    out.add(
                        object,
                        "DataVolumeNotReady",
                        format!(
                            "DataVolume phase {}: the VMI waits for it (util.go:106-118)",
                            phase.unwrap_or("(none)")
                        ),
                        3,
                    );
                }
            }
            ("PersistentVolumeClaim", Some("Bound")) => {}
            ("PersistentVolumeClaim", phase) => out.add(
                object,
                "PvcNotBound",
                format!("PVC phase {}", phase.unwrap_or("(none)")),
                3,
            ),
            _ => {}
        }
    }
}

/// The VMI's node (4).
fn node_blockers(out: &mut Blockers, ins: &Inspection) {
    if let Some(node) = &ins.node {
        let object = format!("Node/{}", node.name);
        if node.ready.as_deref() != Some("True") {
            out.add(
                object.clone(),
                "NodeNotReady",
                format!("node Ready={}", node.ready.as_deref().unwrap_or("Unknown")),
                4,
            );
        }
        if node.unschedulable {
            out.add(object, "NodeUnschedulable", "node is cordoned".into(), 4);
        }
    }
}

/// An unschedulable pod against the candidate nodes (4): no KVM device, not enough memory.
fn capacity_blockers(out: &mut Blockers, g: &Gathered, ins: &Inspection) {
    if g.candidate_nodes.is_empty() {
        return;
    }
    let request = ins
        .overhead_check
        .as_ref()
        .and_then(|o| o.formula_request_bytes);
    let alloc = |n: &Node, r: &str| {
        n.status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .and_then(|a| a.get(r))
            .and_then(|q| quantity_bytes(&q.0))
    };
    let needs_kvm = !g.settings.use_emulation;
    let kvm_nodes = g
        .candidate_nodes
        .iter()
        .filter(|n| alloc(n, KVM_RESOURCE).is_some_and(|v| v > 0))
        .count();
    if needs_kvm && kvm_nodes == 0 {
        out.add(
            "Node/*".into(),
            "NoKvmDevice",
            format!(
                "none of {} node(s) has allocatable {KVM_RESOURCE} (is virt-handler running, or is useEmulation needed?)",
                g.candidate_nodes.len()
            ),
            4,
        );
    }
    if let Some(req) = request {
        let largest = g
            .candidate_nodes
            .iter()
            .filter_map(|n| alloc(n, "memory"))
            .max()
            .unwrap_or(0);
        if largest < req {
            out.add(
                "Node/*".into(),
                "InsufficientMemory",
                format!(
                    "no node has {} of allocatable memory for the guest request + overhead ({req} bytes; the largest node has {})",
                    crate::api::quantity::human_bytes(req),
                    crate::api::quantity::human_bytes(largest)
                ),
                4,
            );
        }
    }
}

/// The checks of [`super::diagnose`] on one VM: its launcher pods, finalizers, firmware UUID
/// against the namespace's other machines, the Lease against the leader's own view, and a
/// Pod Security refusal.
fn diagnostics(g: &Gathered, vm: &VirtualMachine, ins: &Inspection) -> Vec<Blocker> {
    use super::diagnose;
    let mut out = diagnose::foreign_finalizers("VirtualMachine", &vm.metadata, 0, g.now);
    if let Some(vmi) = &g.vmi {
        out.extend(diagnose::foreign_finalizers(
            "VirtualMachineInstance",
            &vmi.metadata,
            1,
            g.now,
        ));
        out.extend(diagnose::duplicate_launcher_pods(vmi, &g.pods));
    }
    out.extend(diagnose::duplicate_firmware_uuid(
        vm,
        &g.namespace_vms,
        &g.namespace_vmis,
    ));
    if let (Some(lease), ControllerView::DebugState { url, state }) = (&g.lease, &g.controller) {
        out.extend(diagnose::duplicate_identity(
            &g.lease_key,
            lease,
            url,
            state,
        ));
    }
    let enforced = g
        .namespace_object
        .as_ref()
        .and_then(|n| crate::api::label(&n.metadata, diagnose::PSA_ENFORCE_LABEL));
    out.extend(diagnose::pod_security_rejection(
        &g.namespace,
        g.vmi.as_ref(),
        &ins.events,
        enforced,
    ));
    out
}

// ------------------------------------------------------------------------------------------
// The fleet
// ------------------------------------------------------------------------------------------

/// Printable statuses that mean "something is wrong".
const PROBLEM_STATUSES: &[&str] = &[
    "CrashLoopBackOff",
    "ErrorUnschedulable",
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrorPvcNotFound",
    "DataVolumeError",
    "Unknown",
];

/// Turn the gathered fleet into rows, problems first.
pub(crate) fn analyze_fleet(f: &GatheredFleet) -> Fleet {
    let part = controller_part(&f.controller, None);
    let mut missing = f.missing.clone();
    missing.extend(part.missing);
    let state = debug_state(&f.controller);
    let vmis: BTreeMap<ObjectKey, &VirtualMachineInstance> =
        f.vmis.iter().map(|v| (ObjectKey::of(v), v)).collect();
    let mut pods_by_vmi: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    for p in &f.pods {
        if let Some(uid) = crate::api::label(&p.metadata, CREATED_BY) {
            pods_by_vmi
                .entry(uid.to_string())
                .or_default()
                .push(p.clone());
        }
    }
    for pods in pods_by_vmi.values_mut() {
        pods.sort_by(|a, b| {
            b.metadata
                .creation_timestamp
                .cmp(&a.metadata.creation_timestamp)
        });
    }
    let uuid_peers = firmware_uuid_groups(&f.vms);
    let mut rows: Vec<FleetRow> = f
        .vms
        .iter()
        .map(|vm| {
            let id = ObjectKey::of(vm);
            let vmi = vmis.get(&id).copied();
            let ObjectKey {
                namespace: ns,
                name,
            } = id;
            let key = format!("{ns}/{name}");
            let mut row = FleetRow {
                namespace: ns.clone(),
                name,
                printable_status: vm.status.as_ref().and_then(|s| s.printable_status.clone()),
                vmi_phase: vmi.map(|v| v.phase().as_str().to_string()),
                phase_seconds: vmi.and_then(|v| {
                    phase_timeline(v, f.controller.now)
                        .last()
                        .map(|p| p.duration_seconds)
                }),
                ..Default::default()
            };
            if let Some(state) = state {
                row.retries = (state.retries(VM_QUEUE_NAME, &key)
                    + state.retries(VMI_QUEUE_NAME, &key)) as u64;
                row.pending_expectations = state
                    .expectations
                    .iter()
                    .flat_map(|s| s.entries.iter())
                    .filter(|e| e.key == key && !e.satisfied)
                    .count() as u64;
            }
            let pods = vmi
                .and_then(|v| v.metadata.uid.as_ref())
                .and_then(|u| pods_by_vmi.get(u));
            if let (Some(vmi), Some(pod)) = (vmi, pods.and_then(|p| current_pod(p))) {
                let object = KubeVirtObject::Vmi(Box::new(vmi.clone()));
                if let Ok(check) = formula_against(
                    &object,
                    &ns,
                    &f.settings,
                    &NamespaceContext::default(),
                    Some(pod),
                    Some(vmi),
                ) {
                    row.overhead_match = Some(check.matches);
                    row.memory_request_bytes = check.pod_request_bytes;
                    row.memory_limit_bytes = check.pod_limit_bytes;
                    if let (Some(p), Some(fr)) =
                        (check.pod_request_bytes, check.formula_request_bytes)
                        && p != fr
                    {
                        row.overhead_difference_bytes = Some(p - fr);
                    }
                }
            }
            let no_pods = Vec::new();
            let peers = uuid_peers.get(&super::diagnose::vm_firmware_uuid(vm));
            row.problem = fleet_diagnostic(
                vm,
                vmi,
                pods.unwrap_or(&no_pods),
                peers.map_or(&[][..], Vec::as_slice),
                f.controller.now,
            )
            .or_else(|| {
                vm.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .and_then(|cs| cs.iter().find(|c| c.type_ == "Failure" && c.is_true()))
                    .map(|c| {
                        format!(
                            "{}: {}",
                            c.reason.as_deref().unwrap_or("Failure"),
                            c.message.as_deref().unwrap_or("")
                        )
                    })
            })
            .or_else(|| {
                row.printable_status
                    .as_deref()
                    .filter(|s| PROBLEM_STATUSES.contains(s))
                    .map(|s| format!("printableStatus {s}"))
            })
            .or_else(|| {
                state.and_then(|s| {
                    [VM_CONTROLLER, VMI_CONTROLLER].into_iter().find_map(|c| {
                        s.reconcile(c, &key)
                            .and_then(|r| r.error.clone())
                            .map(|e| format!("{c} reconcile failed: {e}"))
                    })
                })
            })
            .or_else(|| {
                row.overhead_difference_bytes
                    .map(|d| format!("pod memory request differs from the formula by {d} bytes"))
            });
            row
        })
        .collect();
    rows.sort_by(|a, b| {
        b.problem
            .is_some()
            .cmp(&a.problem.is_some())
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    Fleet {
        generated_at: f.controller.now,
        namespace: f.namespace.clone(),
        lease: part.lease,
        controller: part.source,
        queues: part.queues,
        rows,
        missing,
    }
}

/// The VMs that share a firmware UUID with another VM of the list, by UUID (one pass: a fleet
/// of 10,000 VMs is not compared pairwise).
fn firmware_uuid_groups(vms: &[VirtualMachine]) -> BTreeMap<String, Vec<VirtualMachine>> {
    let mut groups: BTreeMap<String, Vec<&VirtualMachine>> = BTreeMap::new();
    for vm in vms {
        groups
            .entry(super::diagnose::vm_firmware_uuid(vm))
            .or_default()
            .push(vm);
    }
    groups
        .into_iter()
        .filter(|(_, g)| g.len() > 1)
        .map(|(u, g)| (u, g.into_iter().cloned().collect()))
        .collect()
}

/// A fleet row's problem from [`super::diagnose`]: the first finding, as `reason: message`.
fn fleet_diagnostic(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    pods: &[Pod],
    uuid_peers: &[VirtualMachine],
    now: DateTime<Utc>,
) -> Option<String> {
    use super::diagnose;
    let ns = vm.metadata.namespace.as_deref().unwrap_or("");
    diagnose::foreign_finalizers("VirtualMachine", &vm.metadata, 0, now)
        .into_iter()
        .chain(vmi.into_iter().flat_map(|v| {
            diagnose::foreign_finalizers("VirtualMachineInstance", &v.metadata, 1, now)
                .into_iter()
                .chain(diagnose::duplicate_launcher_pods(v, pods))
        }))
        .chain(diagnose::pod_security_rejection(ns, vmi, &[], None))
        .chain(
            (!uuid_peers.is_empty())
                .then(|| diagnose::duplicate_firmware_uuid(vm, uuid_peers, &[]))
                .flatten(),
        )
        .next()
        .map(|b| format!("{} {}: {}", b.object, b.reason, b.message))
}

/// The dotted paths at which `b` differs from `a` (leaves only; an object present on one side
/// only is listed leaf by leaf), in key order.
pub(crate) fn changed_paths(
    prefix: &str,
    a: Option<&Value>,
    b: Option<&Value>,
    out: &mut Vec<FieldChange>,
) {
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                changed_paths(&path, x.get(k), y.get(k), out);
            }
        }
        (Some(Value::Object(x)), None) | (None, Some(Value::Object(x))) if !x.is_empty() => {
            let present_before = a.is_some();
            for (k, v) in x {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if present_before {
                    changed_paths(&path, Some(v), None, out);
                } else {
                    changed_paths(&path, None, Some(v), out);
                }
            }
        }
        (a, b) if a != b => out.push(FieldChange {
            path: prefix.to_string(),
            before: a.cloned(),
            after: b.cloned(),
        }),
        _ => {}
    }
}

#[cfg(test)]
#[path = "analyze_tests.rs"]
mod tests;
