//! The VMI controller's `execute` → `sync` → `updateStatus` (pkg/virt-controller/watch/vmi/vmi.go
//! 297-368, lifecycle.go 66-612) as pure functions of a [`VmiSnapshot`].

use super::action::{ApiFailure, SkipReason, SyncError, SyncOutcome, VmiAction, VmiDecision};
use super::conditions::{self, types};
use super::events::{self, reasons as ev_reasons};
use super::patch;
use super::podutil::{self, pod_name};
use super::snapshot::VmiSnapshot;
use crate::api::quantity::{Format, ParsedQuantity};
use crate::api::vmi::{MemoryStatus, VirtualMachineInstanceStatus};
use crate::api::{
    Condition, JsonList, Phase, VirtualMachineInstance, annotations, finalizers, labels,
};
use crate::controller::common::record::VmiEnding;
use crate::controller::common::semantic::values_semantic_eq;
use crate::controller::common::{ReconcileError, semantic_eq};
use crate::launcher::network::{
    MULTUS_NETWORKS, NETWORK_INFO, hotplug_multus_annotation, network_info_annotation,
};
use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeMap;
use std::sync::Arc;

/// `kubevirt.io/latest-observed-api-version` (`ControllerAPILatestVersionObservedAnnotation`,
/// types.go:1141).
pub(crate) const LATEST_OBSERVED_API_VERSION_ANNOTATION: &str =
    "kubevirt.io/latest-observed-api-version";
/// `kubevirt.io/storage-observed-api-version` (types.go:1142).
pub(crate) const STORAGE_OBSERVED_API_VERSION_ANNOTATION: &str =
    "kubevirt.io/storage-observed-api-version";
/// `ApiLatestVersion` and `ApiStorageVersion` (register.go:35-37).
pub(crate) const API_VERSION_V1: &str = "v1";
/// Added to every ready launcher pod by `sync` (`EvictOnlyAnnotation`, descheduler.go:38).
pub(crate) const EVICT_ONLY_ANNOTATION: &str = "descheduler.alpha.kubernetes.io/request-evict-only";
/// Marks a pod whose eviction is in progress (`EvictionInProgressAnnotation`, descheduler.go:41).
pub(crate) const EVICTION_IN_PROGRESS_ANNOTATION: &str =
    "descheduler.alpha.kubernetes.io/eviction-in-progress";
/// Stands for the 5 characters the API server appends to `generateName` in the pod that
/// [`decide`] predicts (not a valid name on purpose).
pub(crate) const PREDICTED_NAME_SUFFIX: &str = "<generated>";

fn has_finalizer(vmi: &VirtualMachineInstance, f: &str) -> bool {
    vmi.metadata
        .finalizers
        .as_deref()
        .unwrap_or_default()
        .iter()
        .any(|x| x == f)
}

/// `controller.RemoveFinalizer`: rebuilds the list (an empty result stays an empty list).
fn remove_finalizer(vmi: &mut VirtualMachineInstance, f: &str) {
    let kept: Vec<String> = vmi
        .metadata
        .finalizers
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|x| x != f)
        .collect();
    vmi.metadata.finalizers = Some(kept);
}

/// `controller.AddFinalizer`: append unless present.
fn add_finalizer(vmi: &mut VirtualMachineInstance, f: &str) {
    if !has_finalizer(vmi, f) {
        vmi.metadata
            .finalizers
            .get_or_insert_with(Vec::new)
            .push(f.to_string());
    }
}

/// Running or Scheduled: without a launcher pod the VMI fails; with one, virt-handler owns it.
fn fail_without_pod(
    new: &mut VirtualMachineInstance,
    expl: &mut Vec<String>,
    phase_reason: &mut Option<String>,
    has_pod: bool,
    failed: &str,
    kept: &str,
) {
    if has_pod {
        expl.push(kept.into());
    } else {
        status_mut(new).phase = Some(Phase::Failed);
        *phase_reason = Some(POD_VANISHED.into());
        expl.push(failed.into());
    }
}

/// The backend-storage entry `updateVolumeStatus` keeps (storage.go:253-266): the entry named
/// `persistent-state-for-this-vm`, or the legacy one named after the claim (renamed), when the
/// VMI has a backend-storage claim.
fn backend_storage_entry(
    new: &VirtualMachineInstance,
    snap: &VmiSnapshot,
) -> Option<serde_json::Value> {
    use crate::launcher::backend_storage::STATUS_VOLUME_NAME;
    let claim = snap.backend_storage.claim.as_ref()?;
    let entries = new.volume_status_entries();
    let named = |n: &str| {
        entries
            .iter()
            .find(|e| e.get("name").and_then(|v| v.as_str()) == Some(n))
    };
    if let Some(e) = named(STATUS_VOLUME_NAME) {
        return Some(e.clone());
    }
    let mut e = named(&claim.name)?.clone();
    e["name"] = serde_json::json!(STATUS_VOLUME_NAME);
    Some(e)
}

/// `updateVolumeStatus` (vmi/storage.go:231-340) into the new VMI's `status.volumeStatus`
/// ([`super::storage::volume_status`]); `at` is the lifecycle.go line that calls it.
fn update_volume_status(
    snap: &VmiSnapshot,
    (new, pod): (&mut VirtualMachineInstance, &Pod),
    (expl, actions): (&mut Vec<String>, &mut Vec<VmiAction>),
    at: &str,
) {
    let backend = backend_storage_entry(new, snap);
    let mut statuses = super::storage::volume_status(new, &snap.storage.claims).unwrap_or_default();
    if let Some(entry) = backend {
        statuses.push(entry);
        statuses.sort_by(|a, b| {
            let name =
                |v: &serde_json::Value| v.get("name").and_then(|n| n.as_str()).map(str::to_string);
            name(a).cmp(&name(b))
        });
    }
    for (reason, message) in
        super::volume_hotplug::hotplug_volume_status(snap, new, pod, &mut statuses)
    {
        actions.push(VmiAction::Event {
            type_: super::action::EventType::Normal,
            reason,
            message,
            why: "a hotplug volume's attachment state changed (vmi/storage.go:165-170, 327-331)"
                .into(),
        });
    }
    let statuses = (!statuses.is_empty()).then_some(statuses);
    let current = new.status.as_ref().and_then(|s| s.volume_status.as_ref());
    if statuses != current.map(JsonList::entries) {
        expl.push(format!(
            "status.volumeStatus: one entry per volume, claims' persistentVolumeClaimInfo ({at}, vmi/storage.go:231-340)"
        ));
    }
    status_mut(new).volume_status = statuses.map(JsonList::from);
}

/// `updateNetworkStatus` (pkg/network/controllers/vmi.go:36-60) into the new VMI's
/// `status.interfaces` ([`super::network_status::interface_status`]); `at` is the lifecycle.go
/// line that calls it.
fn update_interface_status(
    new: &mut VirtualMachineInstance,
    pod: &Pod,
    expl: &mut Vec<String>,
    at: &str,
) {
    let interfaces = super::network_status::interface_status(new, pod);
    let current = new.status.as_ref().and_then(|s| s.interfaces.as_ref());
    if interfaces != current.map(JsonList::entries) {
        expl.push(format!(
            "status.interfaces: the networks' pod interface names ({at}, pkg/network/controllers/vmi.go:36-60)"
        ));
    }
    status_mut(new).interfaces = interfaces.map(JsonList::from);
}

/// [`VmiDecision::phase_reason`] of a VMI failed because its launcher pod is gone from the
/// cache (deleted, or force-deleted with its node).
pub(crate) const POD_VANISHED: &str = "its launcher pod vanished";

/// Why a VMI that some other writer (virt-handler) put in a final phase ended, as far as the
/// VMI controller can tell from its launcher pod: deleted, ended in a phase, or still there.
/// For the progress lines and the inspector ([`crate::controller::context::VmiEnding`]).
pub(crate) fn observed_ending_reason(snap: &VmiSnapshot) -> String {
    let who = reported_by_handler(&snap.vmi);
    if deleted_before_it_ended(&snap.vmi) {
        return format!("{who} after the VMI was deleted");
    }
    match podutil::current_vmi_pod(&snap.vmi, &snap.pods) {
        None => format!("{who}; its launcher pod is gone"),
        Some(p) if podutil::is_pod_deleting(p) => {
            format!("{who}; its launcher pod {} was deleted", pod_name(p))
        }
        Some(p) if podutil::pod_is_down(p) => format!(
            "{who}; its launcher pod {} ended {}",
            pod_name(p),
            podutil::pod_phase(p)
        ),
        Some(_) => who,
    }
}

/// [`observed_ending_reason`] when the launcher pod still looks alive in the controller's cache:
/// virt-handler's word only, no cause. The pod's own update (its deletion, its end) can reach
/// the pod informer after virt-handler's VMI write reaches the VMI informer, so a later
/// reconcile of the same VMI may see the cause ([`observed_ending`] then fills it in).
pub(crate) fn reported_by_handler(vmi: &VirtualMachineInstance) -> String {
    format!("virt-handler reported it {}", vmi.phase().as_str())
}

/// The ending to record for a VMI found in a final phase that the controller did not write
/// (virt-handler did), given the key's last recorded ending: `None` when nothing changes.
/// Recorded once per VMI (by UID); an ending recorded while the launcher pod still looked alive
/// ([`reported_by_handler`]) gets its cause when a later reconcile sees the pod deleted, ended
/// or gone, keeping when and from which phase it ended.
pub(crate) fn observed_ending(
    snap: &VmiSnapshot,
    known: Option<&VmiEnding>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<VmiEnding> {
    let uid = snap.vmi.metadata.uid.as_ref()?;
    if !snap.vmi.phase().is_final() {
        return None;
    }
    let reason = observed_ending_reason(snap);
    match known.filter(|e| &e.uid == uid) {
        Some(e) if e.reason == reported_by_handler(&snap.vmi) && reason != e.reason => {
            Some(VmiEnding {
                reason,
                ..e.clone()
            })
        }
        Some(_) => None,
        None => Some(VmiEnding {
            uid: uid.clone(),
            phase: snap.vmi.phase().as_str().to_string(),
            from_phase: phase_before_final(&snap.vmi).as_str().to_string(),
            reason,
            at: now,
        }),
    }
}

/// Whether the VMI was deleted before it reached its final phase. A VMI the VM controller
/// deletes *because* it failed (run strategy Always, vm.go:979-1037) carries a deletionTimestamp
/// by the time the VMI controller sees it too, but it ended first: its final phase's transition
/// timestamp is not later than the deletion (both have second precision; the same second counts
/// as ended first). Without a transition timestamp, a deletionTimestamp counts as first.
fn deleted_before_it_ended(vmi: &VirtualMachineInstance) -> bool {
    let Some(deleted) = &vmi.metadata.deletion_timestamp else {
        return false;
    };
    let phase = vmi.phase();
    let ended = vmi
        .status
        .as_ref()
        .and_then(|s| s.phase_transition_timestamps.as_ref())
        .and_then(|t| t.iter().rev().find(|e| e.phase == phase))
        .map(|e| e.phase_transition_timestamp.0.timestamp());
    ended.is_none_or(|ended| deleted.0.as_second() < ended)
}

/// The last phase a VMI was in before its final one, from `status.phaseTransitionTimestamps`
/// (`Running` when they say nothing else).
pub(crate) fn phase_before_final(vmi: &VirtualMachineInstance) -> Phase {
    vmi.status
        .as_ref()
        .and_then(|s| s.phase_transition_timestamps.as_ref())
        .and_then(|t| t.iter().rev().map(|e| e.phase).find(|p| !p.is_final()))
        .unwrap_or(Phase::Running)
}

fn status_mut(vmi: &mut VirtualMachineInstance) -> &mut VirtualMachineInstanceStatus {
    vmi.status.get_or_insert_with(Default::default)
}

fn nonempty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

fn is_unprocessed(p: Phase) -> bool {
    matches!(p, Phase::Unset | Phase::Pending)
}

fn marked_for_eviction(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.evacuation_node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// `hasOwnerVM` (lifecycle.go:861-872).
fn has_owner_vm(snap: &VmiSnapshot) -> bool {
    let Some(r) = snap
        .vmi
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
        .iter()
        .find(|r| r.controller == Some(true))
    else {
        return false;
    };
    r.kind == "VirtualMachine" && snap.owner_vm_uid.as_deref() == Some(r.uid.as_str())
}

/// What `sync` intends, before any API call.
#[derive(Default)]
struct SyncPlan {
    actions: Vec<VmiAction>,
    /// Events `sync` emits regardless of API outcomes (they precede its API calls).
    events: Vec<VmiAction>,
    /// An error decided without API calls (render failure, missing PVC).
    error: Option<SyncError>,
    /// `sync` reached the pod creation point (whether or not a rendered pod is present).
    wants_pod: bool,
    /// It reached it but the snapshot has no rendered pod.
    render_missing: bool,
    explanation: Vec<String>,
}

/// `sync` (lifecycle.go:66-253) for the modelled cases.
fn plan_sync(snap: &VmiSnapshot, current: Option<&Pod>) -> SyncPlan {
    let vmi = &snap.vmi;
    let ns = vmi.metadata.namespace.as_deref().unwrap_or("");
    let mut plan = SyncPlan::default();

    if vmi.is_deleting() {
        plan_deletion(snap, &mut plan);
        return plan;
    }

    if vmi.is_final() {
        plan.explanation.push(format!(
            "sync: VMI is {}; only hotplug attachment pods would be deleted (not modelled) (lifecycle.go:78-84)",
            vmi.phase().as_str()
        ));
        return plan;
    }

    if let Some(pvc) = &snap.storage.missing_pvc {
        let msg = format!("PVC {ns}/{pvc} does not exist, waiting for it to appear");
        plan.events.push(VmiAction::Event {
            type_: super::action::EventType::Normal,
            reason: ev_reasons::FAILED_PVC_NOT_FOUND.into(),
            message: msg.clone(),
            why: "a volume's PVC is missing (datavolumes.go areDataVolumesReady)".into(),
        });
        plan.error = Some(SyncError::informal(ev_reasons::FAILED_PVC_NOT_FOUND, &msg));
        plan.explanation.push(format!(
            "sync: {msg}; informal sync error FailedPvcNotFound, no requeue (lifecycle.go:91-94)"
        ));
        return plan;
    }

    let Some(pod) = current else {
        plan_pod_creation(snap, &mut plan);
        return plan;
    };

    if !snap.storage.wffc {
        plan_temporary_pod_cleanup(snap, pod, &mut plan);
    }
    if !podutil::is_temp_pod(pod) && podutil::is_pod_ready(pod) {
        plan_ready_pod(snap, pod, &mut plan);
        // lifecycle.go:231-249: hotplug volumes and their attachment pods.
        let hp = super::volume_hotplug::plan_hotplug(snap, pod);
        plan.actions.extend(hp.actions);
        plan.explanation.extend(hp.explanation);
        plan.error = plan.error.take().or(hp.error);
    }
    plan.explanation.push(format!(
        "sync: launcher pod {} exists (phase {:?}, ready for hand-over: {}); nothing to create",
        pod_name(pod),
        podutil::pod_phase(pod),
        podutil::is_pod_ready(pod)
    ));
    plan
}

/// A VMI being deleted: every pod it controls is deleted, unless already terminating
/// (lifecycle.go:70-75, 994-1011).
fn plan_deletion(snap: &VmiSnapshot, plan: &mut SyncPlan) {
    let vmi = &snap.vmi;
    for pod in podutil::pods_controlled_by(vmi, &snap.pods) {
        if podutil::is_pod_deleting(pod) && !podutil::pod_is_down(pod) {
            plan.explanation.push(format!(
                "pod {} is already terminating; not deleted again (lifecycle.go:1001)",
                pod_name(pod)
            ));
            continue;
        }
        plan.actions.push(VmiAction::DeletePod {
            name: pod_name(pod).to_string(),
            uid: podutil::pod_uid(pod).to_string(),
            why: format!(
                "the VMI has a deletionTimestamp: delete every pod it controls that is not already terminating{} (lifecycle.go:70-75, 994-1011)",
                if podutil::is_pod_deleting(pod) {
                    "; this one is terminating but already final, so it is deleted again"
                } else {
                    ""
                }
            ),
        });
    }
    plan.explanation.push(format!(
        "sync: VMI is being deleted; {} pod deletion(s) (lifecycle.go:70-75)",
        plan.actions.len()
    ));
}

/// No DataVolume of the VMI waits for its first consumer any more: delete the temporary pods
/// the VMI or its current pod controls (`cleanupWaitForFirstConsumerTemporaryPods`,
/// lifecycle.go:188-193, 1095-1143), those Running, Succeeded or Failed only; the others stay
/// until they get there, but KubeVirt records its `Deleted WaitForFirstConsumer temporary pod`
/// event for them all the same, at every sync (lifecycle.go:1104-1111).
fn plan_temporary_pod_cleanup(snap: &VmiSnapshot, current: &Pod, plan: &mut SyncPlan) {
    let vmi_uid = snap.vmi.metadata.uid.as_deref().unwrap_or("");
    let current_uid = podutil::pod_uid(current);
    let temporary = snap.pods.iter().filter(|p| {
        podutil::is_temp_pod(p)
            && ((!vmi_uid.is_empty() && podutil::is_controlled_by(p, vmi_uid))
                || (!current_uid.is_empty() && podutil::is_controlled_by(p, current_uid)))
    });
    for pod in temporary {
        let name = pod_name(pod);
        let phase = podutil::pod_phase(pod);
        if matches!(
            phase,
            podutil::POD_RUNNING | podutil::POD_SUCCEEDED | podutil::POD_FAILED
        ) {
            plan.actions.push(VmiAction::DeleteTemporaryPod {
                name: name.to_string(),
                uid: podutil::pod_uid(pod).to_string(),
                why: format!(
                    "no DataVolume waits for its first consumer any more and temporary pod {name} is {phase}: delete it with grace period 0 (lifecycle.go:188-193, 1095-1122)"
                ),
            });
            plan.explanation.push(format!(
                "sync: temporary pod {name} ({phase}) is no longer needed → delete it (lifecycle.go:188-193)"
            ));
        } else {
            plan.events.push(VmiAction::event(
                events::temporary_pod_deleted(name),
                format!(
                    "KubeVirt records the deletion event even for a temporary pod it leaves alone because it is {:?}, not Running, Succeeded or Failed (lifecycle.go:1104-1121)",
                    phase
                ),
            ));
            plan.explanation.push(format!(
                "sync: temporary pod {name} is {phase:?}: left until it runs or ends (lifecycle.go:1115-1121)"
            ));
        }
    }
}

/// No launcher pod: create it when the VMI is unprocessed and its volumes are ready
/// (lifecycle.go:100-185); the temporary pod instead while a DataVolume waits for its first
/// consumer (lifecycle.go:152-154).
fn plan_pod_creation(snap: &VmiSnapshot, plan: &mut SyncPlan) {
    let vmi = &snap.vmi;
    if !is_unprocessed(vmi.phase()) {
        plan.explanation.push(format!(
            "sync: no launcher pod, but the phase is {} so a pod was created before; KubeVirt never creates a second one (lifecycle.go:100-105)",
            vmi.phase().as_str()
        ));
        return;
    }
    if super::topology::pod_waits_for_hints(vmi) {
        plan.explanation.push(
            "sync: no launcher pod yet; the VMI needs a TSC frequency and its status has no topologyHints: delaying pod creation until they are set (lifecycle.go:106-109)"
                .into(),
        );
        return;
    }
    if !snap.storage.volumes_ready {
        plan.explanation.push(
            "sync: no launcher pod yet; delaying pod creation while DataVolumes populate or PVCs appear (lifecycle.go:110-114)"
                .into(),
        );
        return;
    }
    if !plan_backend_storage(snap, plan) {
        return;
    }
    plan.wants_pod = true;
    match &snap.rendered_pod {
        None => {
            plan.render_missing = true;
            plan.explanation.push(
                "sync: the launcher pod must be created but the snapshot carries no rendered pod"
                    .into(),
            );
        }
        Some(Err(f)) => {
            let msg = format!("{}{}", events::FAILED_TO_RENDER_PREFIX, f.message);
            if f.pvc_not_found {
                plan.events.push(VmiAction::Event {
                    type_: super::action::EventType::Warning,
                    reason: ev_reasons::FAILED_PVC_NOT_FOUND.into(),
                    message: msg.clone(),
                    why: "rendering the launcher pod found a missing PVC (lifecycle.go:158-160)"
                        .into(),
                });
                plan.error = Some(SyncError::informal(ev_reasons::FAILED_PVC_NOT_FOUND, &msg));
            } else {
                plan.error = Some(SyncError::new(ev_reasons::FAILED_CREATE, &msg));
            }
            plan.explanation.push(format!(
                "sync: rendering the launcher pod failed: {msg} (lifecycle.go:158-163)"
            ));
        }
        Some(Ok(rendered)) => {
            let state = if vmi.phase() == Phase::Unset {
                "unprocessed (phase \"\")"
            } else {
                "Pending"
            };
            let (why, explanation) = if snap.storage.wffc {
                (
                    format!(
                        "no pod exists, the VMI is {state} and a DataVolume waits for its first consumer: create the temporary pod, whose scheduling binds the claim (lifecycle.go:152-154, template.go:311-322)"
                    ),
                    "sync: a DataVolume is WaitForFirstConsumer → create the temporary pod (lifecycle.go:152-154)",
                )
            } else {
                (
                    format!(
                        "no launcher pod exists and the VMI is {state}: create it (lifecycle.go:100-185)"
                    ),
                    "sync: no launcher pod yet → create one (lifecycle.go:100-185)",
                )
            };
            plan.actions.push(VmiAction::CreatePod {
                pod: rendered.clone(),
                why,
            });
            plan.explanation.push(explanation.into());
        }
    }
}

/// The backend-storage claim before the pod (lifecycle.go:126-141): create it and stop, delete
/// an unneeded one, or hold the pod with a SyncError until the claim is bound (or Pending on a
/// WaitForFirstConsumer class). True when the pod may be created.
fn plan_backend_storage(snap: &VmiSnapshot, plan: &mut SyncPlan) -> bool {
    use super::backend_storage::Step;
    match super::backend_storage::plan(&snap.backend_storage) {
        Step::Ready(None) => true,
        Step::Ready(Some(claim)) => {
            plan.explanation.push(format!(
                "sync: backend-storage claim {claim} is ready (backend-storage.go:592-629)"
            ));
            true
        }
        Step::Create(pvc) => {
            plan.actions.push(VmiAction::CreateBackendStoragePvc {
                pvc: Arc::new(*pvc),
                why: "the VMI needs backend storage (persistent TPM/EFI, CBT) and has no claim: create it (storage.go:126-133)".into(),
            });
            plan.explanation.push(
                "sync: no launcher pod until the new backend-storage claim is seen (lifecycle.go:130-133)"
                    .into(),
            );
            false
        }
        Step::Delete(name) => {
            plan.actions.push(VmiAction::DeleteBackendStoragePvc {
                why: format!("the VMI needs no backend storage but claim {name} exists: delete it (storage.go:117-124)"),
                name,
            });
            true
        }
        Step::Error(reason, message) => {
            plan.explanation.push(format!(
                "sync: backend storage not ready: {reason} {message}; no pod (lifecycle.go:134-141)"
            ));
            plan.error = Some(SyncError::new(reason, message));
            false
        }
    }
}

/// A ready launcher pod: its eviction, network-info and (while an interface is hot(un)plugged)
/// Multus networks annotations (lifecycle.go:207-228, generator.go:116-128).
fn plan_ready_pod(snap: &VmiSnapshot, pod: &Pod, plan: &mut SyncPlan) {
    let vmi = &snap.vmi;
    let mut wanted: BTreeMap<String, String> =
        [(EVICT_ONLY_ANNOTATION.to_string(), String::new())].into();
    let annotations = pod.metadata.annotations.as_ref();
    if let Some(info) = network_info_annotation(vmi, &snap.network_bindings, annotations) {
        wanted.insert(NETWORK_INFO.to_string(), info);
    }
    let hotplug = hotplug_multus_annotation(vmi, &snap.network_bindings, annotations);
    if let Some(networks) = hotplug {
        wanted.insert(MULTUS_NETWORKS.to_string(), networks);
    }
    let p = patch::sync_pod_annotations_patch(pod, &wanted);
    if !p.0.is_empty() {
        plan.actions.push(VmiAction::PatchPod {
            name: pod_name(pod).to_string(),
            patch: p,
            why: format!(
                "the launcher pod is ready: ensure annotation {EVICT_ONLY_ANNOTATION}: \"\", the network-info annotation from Multus' network status and, while an interface is hot(un)plugged, {MULTUS_NETWORKS} (lifecycle.go:207-214, generator.go:116-162)"
            ),
        });
    }
    let marked = marked_for_eviction(vmi);
    let has_mark = podutil::has_annotation(pod, EVICTION_IN_PROGRESS_ANNOTATION);
    if marked != has_mark {
        plan.actions.push(VmiAction::PatchPod {
            name: pod_name(pod).to_string(),
            patch: patch::eviction_in_progress_patch(pod, marked),
            why: if marked {
                format!("the VMI is marked for eviction (status.evacuationNodeName): add {EVICTION_IN_PROGRESS_ANNOTATION} to the pod (lifecycle.go:216-221)")
            } else {
                format!("the VMI is no longer marked for eviction: remove {EVICTION_IN_PROGRESS_ANNOTATION} from the pod (lifecycle.go:223-228)")
            },
        });
    }
}

/// Result of `updateStatus`.
struct StatusResult {
    actions: Vec<VmiAction>,
    new_vmi: Option<Arc<VirtualMachineInstance>>,
    condition_error: Option<SyncError>,
    update_status_error: Option<ReconcileError>,
    to_phase: Phase,
    phase_reason: Option<String>,
    explanation: Vec<String>,
    requeue_after: Option<std::time::Duration>,
}

/// `v1.SetDefaults_Probe` (kubevirt.io/api core/v1/defaults.go:137-157): timeout, period,
/// success and failure thresholds below 1 become 1, 10, 1 and 3.
fn default_probe(probe: &mut crate::api::vmi::Probe) {
    for (field, default) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        let value = probe
            .extra
            .get(field)
            .and_then(serde_json::Value::as_i64)
            .unwrap_or(0);
        if value < 1 {
            probe.extra.insert(field.into(), default.into());
        }
    }
}

/// `updateStatus` (lifecycle.go:256-612) with `pod` = the pod `sync` returned. `rendered`:
/// this sync rendered the launcher pod, which defaults the VMI's own probes in place
/// (`WithLivelinessProbe`/`WithReadinessProbe` call `SetDefaults_Probe` on `vmi.Spec`,
/// rendercontainer.go:167-181); `execute` hands that same VMI to `updateStatus`
/// (vmi.go:355-357), so its write carries them.
fn update_status(
    snap: &VmiSnapshot,
    pod: Option<&Pod>,
    sync_error: Option<&SyncError>,
    rendered: bool,
) -> StatusResult {
    let mut u = StatusUpdate::new(snap, pod, sync_error);
    if rendered {
        let spec = &mut u.new.spec;
        for probe in [&mut spec.liveness_probe, &mut spec.readiness_probe]
            .into_iter()
            .flatten()
        {
            default_probe(probe);
        }
    }
    u.finalizers();
    u.active_pods();
    u.ready_condition();
    if let Some(p) = u.vmi_pod {
        u.pod_sync(p);
    }
    u.data_volumes_ready();
    match u.old_phase {
        Phase::Unset | Phase::Pending => u.pending(),
        Phase::Scheduling => u.scheduling(),
        Phase::Succeeded | Phase::Failed => u.finished(),
        Phase::Running => u.running(),
        Phase::Scheduled => u.scheduled(),
        Phase::WaitingForSync => u.waiting_for_sync(),
        Phase::Unknown => {
            u.expl.push("phase Unknown is not handled by updateStatus: error, requeue, no write (lifecycle.go:550-551)".into());
            return StatusResult {
                actions: u.actions,
                new_vmi: None,
                condition_error: u.condition_error,
                update_status_error: Some(ReconcileError::UnknownPhase(
                    u.old_phase.as_str().to_string(),
                )),
                to_phase: u.old_phase,
                phase_reason: None,
                explanation: u.expl,
                requeue_after: None,
            };
        }
    }
    if let Some(e) = u.stop.take() {
        return StatusResult {
            actions: u.actions,
            new_vmi: None,
            condition_error: u.condition_error,
            update_status_error: Some(e),
            to_phase: u.old_phase,
            phase_reason: None,
            explanation: u.expl,
            requeue_after: None,
        };
    }
    u.eviction_requested();
    u.write()
}

/// One `updateStatus`: the VMI as it is, the copy being changed, and what the steps decide.
struct StatusUpdate<'a> {
    snap: &'a VmiSnapshot,
    vmi: &'a VirtualMachineInstance,
    /// The pod `sync` returned, unless it is a temporary pod.
    vmi_pod: Option<&'a Pod>,
    pod: Option<&'a Pod>,
    sync_error: Option<&'a SyncError>,
    /// The phase before this sync: the phase machine is keyed on it.
    old_phase: Phase,
    new: VirtualMachineInstance,
    actions: Vec<VmiAction>,
    expl: Vec<String>,
    /// What changed, for the write's explanation.
    changes: Vec<String>,
    condition_error: Option<SyncError>,
    phase_reason: Option<String>,
    requeue_after: Option<std::time::Duration>,
    /// `updateStatus` returned this error before its write (`addTopologyHints`).
    stop: Option<ReconcileError>,
}

impl<'a> StatusUpdate<'a> {
    fn new(snap: &'a VmiSnapshot, pod: Option<&'a Pod>, sync_error: Option<&'a SyncError>) -> Self {
        let vmi: &VirtualMachineInstance = &snap.vmi;
        StatusUpdate {
            snap,
            vmi,
            vmi_pod: pod.filter(|p| !podutil::is_temp_pod(p)),
            pod,
            sync_error,
            old_phase: vmi.phase(),
            new: vmi.clone(),
            actions: Vec::new(),
            expl: Vec::new(),
            changes: Vec::new(),
            condition_error: sync_error.cloned(),
            phase_reason: None,
            requeue_after: None,
            stop: None,
        }
    }

    /// Finalizer migration (lifecycle.go:268-276) and the virt-api stand-in.
    fn finalizers(&mut self) {
        let snap = self.snap;
        let vmi = self.vmi;
        // Finalizer migration (lifecycle.go:268-276) and the virt-api stand-in.
        if has_finalizer(&self.new, finalizers::LEGACY_FOREGROUND_DELETE_VM) {
            remove_finalizer(&mut self.new, finalizers::LEGACY_FOREGROUND_DELETE_VM);
            add_finalizer(&mut self.new, finalizers::FOREGROUND_DELETE_VM);
            self.changes.push(format!(
                "replace legacy finalizer {} with {} (lifecycle.go:268-276)",
                finalizers::LEGACY_FOREGROUND_DELETE_VM,
                finalizers::FOREGROUND_DELETE_VM
            ));
        }
        if snap.ensure_vmi_finalizer
            && !vmi.is_final()
            && !vmi.is_deleting()
            && !has_finalizer(&self.new, finalizers::FOREGROUND_DELETE_VM)
        {
            add_finalizer(&mut self.new, finalizers::FOREGROUND_DELETE_VM);
            self.changes.push(format!(
                "add finalizer {} as virt-api's mutating webhook would (vmi-mutator.go:127-128)",
                finalizers::FOREGROUND_DELETE_VM
            ));
        }
    }

    /// `status.activePods` (lifecycle.go:1030-1049): every pod controlled by the VMI in the cache.
    fn active_pods(&mut self) {
        let snap = self.snap;
        let vmi = self.vmi;
        let controlled: Vec<&Pod> = podutil::pods_controlled_by(vmi, &snap.pods).collect();
        let status = status_mut(&mut self.new);
        if !(controlled.is_empty() && status.active_pods.is_none()) {
            status.active_pods = Some(
                controlled
                    .iter()
                    .map(|p| {
                        (
                            podutil::pod_uid(p).to_string(),
                            podutil::pod_node_name(p).to_string(),
                        )
                    })
                    .collect(),
            );
        }
    }

    /// The Ready condition (lifecycle.go:286, 874-924).
    fn ready_condition(&mut self) {
        let old_phase = self.old_phase;
        let now = self.snap.now;
        let desired =
            conditions::desired_ready_condition(self.pod, old_phase == Phase::Running, now);
        self.expl.push(format!(
            "Ready condition → {} {} (lifecycle.go:874-924)",
            desired.status,
            desired
                .reason
                .as_deref()
                .unwrap_or("(pod's Ready condition has no reason)")
        ));
        conditions::update(status_mut(&mut self.new), desired);
    }

    /// What the launcher pod gives the VMI and the VMI the pod: image, readiness gate, dynamic metadata, memory overhead (lifecycle.go:287-315).
    fn pod_sync(&mut self, p: &Pod) {
        let snap = self.snap;
        let now = self.snap.now;
        // Launcher image (lifecycle.go:287-295, 846-858).
        let image = podutil::compute_container_image(p);
        if let Some(configured) = &snap.launcher_image {
            let outdated = !image.is_empty() && image != configured;
            if outdated {
                self.new
                    .metadata
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert(labels::OUTDATED_LAUNCHER_IMAGE.to_string(), String::new());
            } else if let Some(l) = self.new.metadata.labels.as_mut() {
                l.remove(labels::OUTDATED_LAUNCHER_IMAGE);
            }
        }
        status_mut(&mut self.new).launcher_container_image_version = nonempty(image);

        // Readiness gate (lifecycle.go:297-299, 926-976).
        let paused = self
            .new
            .status
            .as_ref()
            .is_some_and(|s| conditions::has_with_status(s, types::PAUSED, "True"));
        if let Some(cond) = conditions::readiness_gate_update(paused, p, now) {
            let body = serde_json::json!({ "status": { "conditions": [cond] } });
            self.actions.push(VmiAction::PatchPodReadinessCondition {
                pod: pod_name(p).to_string(),
                status: cond.status.clone(),
                reason: cond.reason.clone().unwrap_or_default(),
                message: cond.message.clone().unwrap_or_default(),
                condition: Box::new(cond),
                patch: body,
                why: if paused {
                    "the VMI is Paused: set the pod readiness gate kubevirt.io/virtual-machine-unpaused to False (lifecycle.go:926-942)".into()
                } else {
                    "the VMI is not paused and the pod readiness gate kubevirt.io/virtual-machine-unpaused is not True: set it True (lifecycle.go:943-955)".into()
                },
            });
        }

        // Dynamic labels/annotations VMI → pod (lifecycle.go:301-303, 724-844).
        let dynamic = patch::dynamic_pod_metadata_patch(
            &self.new,
            p,
            snap.cluster_skip_backup_hooks.as_deref(),
        );
        if !dynamic.0.is_empty() {
            self.actions.push(VmiAction::PatchPod {
                name: pod_name(p).to_string(),
                patch: dynamic,
                why: "sync the VMI's kubevirt.io/nodeName, kubevirt.io/outdatedLauncherImage labels, descheduler annotations and Velero backup hooks to the launcher pod (lifecycle.go:724-844)".into(),
            });
        }

        // Memory overhead report (lifecycle.go:313-315, 1165-1183).
        if snap.memory_overhead_report
            && let Some(raw) = podutil::annotation(p, annotations::MEMORY_OVERHEAD_BYTES)
        {
            match raw.parse::<i64>() {
                Ok(bytes) => {
                    let q = ParsedQuantity::from_units(bytes, Format::BinarySI).to_quantity();
                    status_mut(&mut self.new)
                        .memory
                        .get_or_insert_with(MemoryStatus::default)
                        .memory_overhead = Some(q);
                }
                Err(_) => self.expl.push(format!(
                    "pod annotation {}={raw:?} is not an integer; status.memory.memoryOverhead left alone (lifecycle.go:1174-1177)",
                    annotations::MEMORY_OVERHEAD_BYTES
                )),
            }
        }
    }

    /// DataVolumesReady (lifecycle.go:306, datavolumes.go:143-178).
    fn data_volumes_ready(&mut self) {
        let snap = self.snap;
        // DataVolumesReady (lifecycle.go:306, datavolumes.go:143-178).
        if let Some(cond) = &snap.storage.data_volumes_ready {
            self.expl.push(format!(
                "DataVolumesReady → {} {} (datavolumes.go:143-178)",
                cond.status,
                cond.reason.as_deref().unwrap_or("")
            ));
            conditions::update(status_mut(&mut self.new), cond.clone());
        }
        // The backend-storage claim's entry (lifecycle.go:309-311, backend-storage.go:485-507).
        if let Some(claim) = &snap.backend_storage.claim {
            let status = status_mut(&mut self.new);
            let mut entries = status
                .volume_status
                .as_ref()
                .map(JsonList::entries)
                .unwrap_or_default();
            super::backend_storage::update_volume_status(&mut entries, claim);
            status.volume_status = Some(entries.into());
            self.expl.push(format!(
                "status.volumeStatus: the backend-storage entry names claim {} (lifecycle.go:309-311)",
                claim.name
            ));
        }
    }

    /// Unset/Pending: the launcher pod appears, or the VMI fails or waits (lifecycle.go:320-369).
    fn pending(&mut self) {
        let snap = self.snap;
        let vmi = self.vmi;
        let vmi_pod = self.vmi_pod;
        let old_phase = self.old_phase;
        if vmi_pod.is_some() {
            status_mut(&mut self.new).phase = Some(Phase::Scheduling);
            self.expl.push(format!(
                "phase {} → Scheduling: the launcher pod exists (lifecycle.go:321-323)",
                old_phase.as_str()
            ));
        } else if vmi.is_deleting() || snap.storage.has_failed_data_volume {
            status_mut(&mut self.new).phase = Some(Phase::Failed);
            self.phase_reason = Some(
                if vmi.is_deleting() {
                    "it was deleted before its launcher pod existed"
                } else {
                    "a DataVolume it uses failed"
                }
                .to_string(),
            );
            self.expl.push(format!(
                "phase {} → Failed: {} and no launcher pod exists (lifecycle.go:324-325)",
                old_phase.as_str(),
                if vmi.is_deleting() {
                    "the VMI is being deleted"
                } else {
                    "a DataVolume failed"
                }
            ));
        } else {
            status_mut(&mut self.new).phase = Some(Phase::Pending);
            self.expl.push(
                "phase stays/becomes Pending: no launcher pod yet (lifecycle.go:331-332)".into(),
            );
            self.topology_hints();
            if self.stop.is_some() {
                return;
            }
            if snap.storage.has_wffc_data_volume {
                self.waiting_for_first_consumer();
            }
            if let Some(e) = self
                .sync_error
                .filter(|e| e.reason == ev_reasons::FAILED_PVC_NOT_FOUND)
            {
                let status = status_mut(&mut self.new);
                conditions::remove(status, types::POD_SCHEDULED);
                status
                    .conditions
                    .get_or_insert_with(Vec::new)
                    .push(Condition {
                        type_: types::POD_SCHEDULED.into(),
                        status: "False".into(),
                        reason: Some(conditions::reasons::UNSCHEDULABLE.into()),
                        message: Some(e.message.as_str().into()),
                        ..Default::default()
                    });
                self.expl.push("PodScheduled=False/Unschedulable with the missing-PVC message (lifecycle.go:361-368)".into());
            }
        }
    }
    /// A Pending VMI with a DataVolume waiting for its first consumer (lifecycle.go:337-359):
    /// `Provisioning=True`; while the temporary pod exists, its `PodScheduled=False` copied to
    /// the VMI (or the VMI's removed), and the VMI fails with it.
    fn waiting_for_first_consumer(&mut self) {
        let status = status_mut(&mut self.new);
        if !conditions::has(status, types::PROVISIONING) {
            status
                .conditions
                .get_or_insert_with(Vec::new)
                .push(Condition {
                    type_: types::PROVISIONING.into(),
                    status: "True".into(),
                    ..Default::default()
                });
            self.expl.push(
                "Provisioning=True: a DataVolume waits for its first consumer (lifecycle.go:337-344)"
                    .into(),
            );
        }
        let Some(temp) = self.pod.filter(|p| podutil::is_temp_pod(p)) else {
            return;
        };
        match podutil::pod_condition(temp, types::POD_SCHEDULED).filter(|c| c.status == "False") {
            Some(pc) => {
                conditions::add_pod_condition(status, pc);
                self.expl.push(format!(
                    "the temporary pod's PodScheduled=False ({}) copied to the VMI (lifecycle.go:346-348)",
                    pc.reason.as_deref().unwrap_or("")
                ));
            }
            None => conditions::remove(status, types::POD_SCHEDULED),
        }
        if podutil::is_pod_failed_or_going_down(temp) {
            status.phase = Some(Phase::Failed);
            self.phase_reason = Some(format!(
                "its temporary pod {} failed or is going down",
                pod_name(temp)
            ));
            self.expl.push(format!(
                "phase → Failed: the temporary pod {} failed or is going down (lifecycle.go:353-355)",
                pod_name(temp)
            ));
        }
    }

    /// `addTopologyHints` (lifecycle.go:615-626) for a VMI without `status.topologyHints`: the
    /// hinter's TSC frequency ([`super::topology::hint_step`]), or, when it cannot be found for
    /// a VMI that needs it to boot, a Warning event and the sync error that ends `updateStatus`
    /// before its write (lifecycle.go:333-335).
    fn topology_hints(&mut self) {
        use super::topology::{FAILED_GATHERING_HINTS, HintStep, has_topology_hints, hint_step};
        if has_topology_hints(self.vmi) {
            return;
        }
        let Some(state) = &self.snap.topology else {
            if super::topology::is_tsc_frequency_required(self.vmi) {
                self.expl.push("topology hints: the VMI needs a TSC frequency, but the node state was not gathered here: the hint virt-controller writes is not predicted (lifecycle.go:615-626)".into());
            }
            return;
        };
        let mut excluded = Vec::new();
        let step = hint_step(self.vmi, state, &mut excluded);
        for e in excluded {
            self.expl.push(format!(
                "topology hints: excluding a node with an invalid tsc-frequency: {e} (filter.go:29-41)"
            ));
        }
        match step {
            HintStep::NotNeeded => {}
            HintStep::Set(freq) => {
                status_mut(&mut self.new).extra.insert(
                    "topologyHints".into(),
                    serde_json::json!({ "tscFrequency": freq }),
                );
                self.changes.push(format!(
                    "status.topologyHints.tscFrequency = {freq} (lifecycle.go:615-626, hinter.go:34-67)"
                ));
                self.expl.push(format!(
                    "topology hints: TSC frequency {freq} ({}) (hinter.go:49-67)",
                    if state.minimum_cluster_tsc_frequency.is_some() {
                        "the KubeVirt CR's minimumClusterTSCFrequency"
                    } else if freq == 0 {
                        "no schedulable node or node running VMIs has a tsc-frequency label"
                    } else {
                        "the lowest tsc-frequency label of the nodes that are schedulable or run VMIs"
                    }
                ));
            }
            HintStep::Skip(message) => self.expl.push(format!(
                "topology hints: {message}; the VMI needs it only to migrate, so no hint and no error (lifecycle.go:617-621); its pod keeps waiting (lifecycle.go:106-109)"
            )),
            HintStep::Fail(message) => {
                self.actions.push(VmiAction::Event {
                    type_: super::action::EventType::Warning,
                    reason: FAILED_GATHERING_HINTS.into(),
                    message: message.clone(),
                    why: "the VMI needs a TSC frequency to boot and the topology hinter found none (lifecycle.go:617-618)".into(),
                });
                self.expl.push(format!(
                    "topology hints: {message}: Warning event and sync error {FAILED_GATHERING_HINTS}; updateStatus returns before its write, the key is requeued with backoff (lifecycle.go:617-619, 333-335)"
                ));
                self.stop = Some(ReconcileError::Sync(SyncError::new(
                    FAILED_GATHERING_HINTS,
                    message,
                )));
            }
        }
    }

    /// Scheduling: the pod scheduled, ready, failing or gone (lifecycle.go:370-457).
    fn scheduling(&mut self) {
        let snap = self.snap;
        let vmi = self.vmi;
        let vmi_pod = self.vmi_pod;
        conditions::remove(status_mut(&mut self.new), types::PROVISIONING);
        match vmi_pod {
            Some(p) => {
                status_mut(&mut self.new).qos_class = podutil::pod_qos_class(p).map(str::to_string);
                match podutil::pod_condition(p, types::POD_SCHEDULED)
                    .filter(|c| c.status == "False")
                {
                    Some(pc) => {
                        conditions::add_pod_condition(status_mut(&mut self.new), pc);
                        self.expl.push(format!(
                            "pod PodScheduled=False ({}: {}) copied to the VMI (lifecycle.go:383-386)",
                            pc.reason.as_deref().unwrap_or(""),
                            pc.message.as_deref().unwrap_or("")
                        ));
                    }
                    None => conditions::remove(status_mut(&mut self.new), types::POD_SCHEDULED),
                }
                if let Some(ie) = podutil::container_image_error(p) {
                    self.expl.push(format!(
                        "container {:?} cannot pull its image ({}): recorded as Synchronized=False (lifecycle.go:391-394)",
                        ie.container, ie.reason
                    ));
                    self.condition_error = Some(SyncError::new(ie.reason, ie.message));
                }
                if podutil::is_pod_ready(p) && !vmi.is_deleting() {
                    if podutil::pod_qos_class(p) != Some(podutil::QOS_GUARANTEED)
                        && vmi.spec.is_cpu_dedicated()
                    {
                        self.actions.push(VmiAction::Event {
                            type_: super::action::EventType::Warning,
                            reason: ev_reasons::FAILED_GUARANTEE_RESOURCES.into(),
                            message: "failed to guarantee pod resources".into(),
                            why: "dedicated CPUs were requested but the pod's QoS class is not Guaranteed (lifecycle.go:397-402)".into(),
                        });
                        self.condition_error = Some(SyncError::new(
                            ev_reasons::FAILED_GUARANTEE_RESOURCES,
                            "failed to guarantee pod resources",
                        ));
                        self.expl.push("pod ready but not Guaranteed while dedicated CPUs are requested: stays Scheduling (lifecycle.go:397-402)".into());
                    } else {
                        let node = podutil::pod_node_name(p).to_string();
                        self.new
                            .metadata
                            .labels
                            .get_or_insert_with(Default::default)
                            .insert(labels::NODE_NAME.to_string(), node.clone());
                        let status = status_mut(&mut self.new);
                        status.phase = Some(Phase::Scheduled);
                        status.node_name = nonempty(&node);
                        if podutil::should_set_migration_transport(p) {
                            status.migration_transport = Some("Unix".into());
                        }
                        self.expl.push(format!(
                            "phase Scheduling → Scheduled: pod {} is ready on node {node:?}; label kubevirt.io/nodeName and status.nodeName set (lifecycle.go:396-441; VSOCK not modelled)",
                            pod_name(p)
                        ));
                        update_volume_status(
                            snap,
                            (&mut self.new, p),
                            (&mut self.expl, &mut self.actions),
                            "lifecycle.go:410",
                        );
                        update_interface_status(
                            &mut self.new,
                            p,
                            &mut self.expl,
                            "lifecycle.go:415",
                        );
                    }
                } else if podutil::is_pod_down_or_going_down(p) {
                    status_mut(&mut self.new).phase = Some(Phase::Failed);
                    self.phase_reason = Some(format!(
                        "its launcher pod {} is down or going down",
                        pod_name(p)
                    ));
                    self.expl.push(format!(
                        "phase Scheduling → Failed: pod {} is down or going down (lifecycle.go:442-448)",
                        pod_name(p)
                    ));
                } else {
                    self.expl.push(
                        "phase stays Scheduling: the pod is not ready yet (lifecycle.go:370-449)"
                            .into(),
                    );
                }
            }
            None => {
                status_mut(&mut self.new).phase = Some(Phase::Failed);
                self.phase_reason = Some(POD_VANISHED.into());
                self.expl.push(
                    "phase Scheduling → Failed: the launcher pod vanished (lifecycle.go:450-457)"
                        .into(),
                );
            }
        }
    }
    /// Succeeded/Failed: finalizers once every pod is gone (lifecycle.go:459-478).
    fn finished(&mut self) {
        let snap = self.snap;
        let vmi = self.vmi;
        let all_deleted = podutil::pods_controlled_by(vmi, &snap.pods)
            .next()
            .is_none();
        if all_deleted {
            remove_finalizer(&mut self.new, finalizers::LEGACY_FOREGROUND_DELETE_VM);
            remove_finalizer(&mut self.new, finalizers::FOREGROUND_DELETE_VM);
            if let Some(l) = self.new.metadata.labels.as_mut() {
                l.remove(labels::OUTDATED_LAUNCHER_IMAGE);
            }
            status_mut(&mut self.new).launcher_container_image_version = None;
            self.expl.push(format!(
                "VMI is final and all its pods are gone: remove finalizer {}, the outdated-image label and launcherContainerImageVersion (lifecycle.go:459-473)",
                finalizers::FOREGROUND_DELETE_VM
            ));
        } else {
            self.expl
                .push("VMI is final but pods remain: finalizer kept (lifecycle.go:459-465)".into());
        }
        strip_vm_controller_finalizer(snap, &mut self.new, &mut self.expl);
    }
    /// Running: owned by virt-handler; the pod vanishing fails it (lifecycle.go:480-514).
    fn running(&mut self) {
        let snap = self.snap;
        let vmi_pod = self.vmi_pod;
        fail_without_pod(
            &mut self.new,
            &mut self.expl,
            &mut self.phase_reason,
            vmi_pod.is_some(),
            "phase Running → Failed: the launcher pod vanished (lifecycle.go:480-485)",
            "phase Running: owned by virt-handler (lifecycle.go:480-514)",
        );
        if let Some(p) = vmi_pod {
            update_volume_status(
                snap,
                (&mut self.new, p),
                (&mut self.expl, &mut self.actions),
                "lifecycle.go:493",
            );
            update_interface_status(&mut self.new, p, &mut self.expl, "lifecycle.go:498");
            let ratio = self.snap.additional_guest_memory_overhead_ratio.as_deref();
            super::hotplug::sync_hotplug_conditions(&mut self.new, ratio, &mut self.expl);
            self.requeue_after = super::migration_required::sync_migration_required(
                &mut self.new,
                p,
                self.snap.now,
                &mut self.expl,
            );
        }
    }
    /// Scheduled: waiting for virt-handler (lifecycle.go:516-534).
    fn scheduled(&mut self) {
        let snap = self.snap;
        let vmi_pod = self.vmi_pod;
        fail_without_pod(
            &mut self.new,
            &mut self.expl,
            &mut self.phase_reason,
            vmi_pod.is_some(),
            "phase Scheduled → Failed: the launcher pod vanished (lifecycle.go:516-530)",
            "phase Scheduled: waiting for virt-handler to start the domain (lifecycle.go:516-534)",
        );
        if let Some(p) = vmi_pod {
            update_volume_status(
                snap,
                (&mut self.new, p),
                (&mut self.expl, &mut self.actions),
                "lifecycle.go:533",
            );
        }
    }
    /// WaitingForSync (lifecycle.go:536-549).
    fn waiting_for_sync(&mut self) {
        let snap = self.snap;
        let vmi = self.vmi;
        let vmi_pod = self.vmi_pod;
        if vmi.is_deleting() {
            remove_finalizer(&mut self.new, finalizers::LEGACY_FOREGROUND_DELETE_VM);
            remove_finalizer(&mut self.new, finalizers::FOREGROUND_DELETE_VM);
            self.expl.push(
                "VMI deleted while WaitingForSync: finalizers removed (lifecycle.go:536-546)"
                    .into(),
            );
            strip_vm_controller_finalizer(snap, &mut self.new, &mut self.expl);
        } else if vmi_pod.is_some() {
            status_mut(&mut self.new).phase = Some(Phase::Scheduling);
            self.expl.push("phase WaitingForSync → Scheduling: a pod exists (lifecycle.go:547-549; migration state not modelled)".into());
        }
    }

    /// EvictionRequested (lifecycle.go:554-568).
    fn eviction_requested(&mut self) {
        let now = self.snap.now;
        // EvictionRequested (lifecycle.go:554-568).
        if marked_for_eviction(&self.new) {
            let status = status_mut(&mut self.new);
            if !conditions::has_with_status(status, types::EVICTION_REQUESTED, "True") {
                conditions::update(
                    status,
                    Condition {
                        type_: types::EVICTION_REQUESTED.into(),
                        status: "True".into(),
                        reason: Some(conditions::reasons::EVICTION_REQUESTED.into()),
                        message: Some(conditions::messages::EVICTION_REQUESTED.into()),
                        last_probe_time: Some(now),
                        last_transition_time: Some(now),
                        extra: Default::default(),
                    },
                );
            }
        } else {
            conditions::remove(status_mut(&mut self.new), types::EVICTION_REQUESTED);
        }
    }

    /// The write (lifecycle.go:570-610): a JSON patch of a Running/Scheduled VMI, else a full
    /// Update when anything changed.
    fn write(mut self) -> StatusResult {
        let (vmi, old_phase, now) = (self.vmi, self.old_phase, self.snap.now);
        let mut shared: Option<Arc<VirtualMachineInstance>> = None;
        let to_phase = self.new.phase();
        if old_phase != to_phase {
            self.changes.push(format!(
                "phase {} → {}",
                old_phase.as_str(),
                to_phase.as_str()
            ));
        }
        // Write (lifecycle.go:570-610).
        if matches!(old_phase, Phase::Running | Phase::Scheduled) {
            let p = patch::prepare_vmi_patch(vmi, &self.new);
            if p.0.is_empty() {
                self.expl.push(format!(
                    "VMI was {}: nothing changed in the patched fields, no write (lifecycle.go:571-575)",
                    old_phase.as_str()
                ));
            } else {
                let fields = patched_fields(&p);
                self.expl.push(format!(
                    "VMI was {}: JSON patch (test+replace) of {} (lifecycle.go:570-591)",
                    old_phase.as_str(),
                    fields.join(", ")
                ));
                self.actions.push(VmiAction::PatchVmi {
                    patch: p,
                    why: format!(
                        "the VMI was {} (owned by virt-handler), so only {} are patched; no phaseTransitionTimestamps, no Synchronized condition (lifecycle.go:570-591, 627-721){}",
                        old_phase.as_str(),
                        fields.join(", "),
                        if self.changes.is_empty() {
                            String::new()
                        } else {
                            format!("; {}", self.changes.join("; "))
                        }
                    ),
                });
            }
        } else {
            let status = status_mut(&mut self.new);
            if conditions::check_failure(status, self.condition_error.as_ref(), now) {
                self.changes.push(match &self.condition_error {
                    Some(e) => format!("Synchronized=False {}: {}", e.reason, e.message),
                    None => "remove the Synchronized condition (sync succeeded)".into(),
                });
            }
            if conditions::set_phase_transition_timestamp(old_phase, status, now) {
                self.changes.push(format!(
                    "record phaseTransitionTimestamp {} at {}",
                    to_phase.as_str(),
                    now.to_rfc3339()
                ));
            }
            // Both statuses serialised once, for the comparison and for naming the changed fields.
            let statuses =
                (vmi.status != self.new.status).then(|| StatusValues::of(vmi, &self.new));
            let changed = statuses.as_ref().is_some_and(|s| !s.equal())
                || !semantic_eq(&vmi.metadata.finalizers, &self.new.metadata.finalizers)
                || !semantic_eq(&vmi.metadata.annotations, &self.new.metadata.annotations)
                || !semantic_eq(&vmi.metadata.labels, &self.new.metadata.labels);
            if changed {
                self.expl.push(format!(
                    "full Update of the VMI (was {}) (lifecycle.go:594-610)",
                    if old_phase == Phase::Unset {
                        "unprocessed"
                    } else {
                        old_phase.as_str()
                    }
                ));
                // The object written and the decision's `new_vmi` are one copy.
                let written = Arc::new(std::mem::take(&mut self.new));
                self.actions.push(VmiAction::UpdateVmi {
                    vmi: written.clone(),
                    why: format!(
                        "{} changed{}: full Update with a VMI self-expectation (lifecycle.go:594-610)",
                        changed_fields(statuses.as_ref(), vmi, &written).join(", "),
                        if self.changes.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", self.changes.join("; "))
                        }
                    ),
                });
                shared = Some(written);
            } else {
                self.expl
                    .push("VMI unchanged: no write (lifecycle.go:600-602)".into());
            }
        }
        StatusResult {
            actions: self.actions,
            new_vmi: Some(shared.unwrap_or_else(|| Arc::new(self.new))),
            condition_error: self.condition_error,
            update_status_error: None,
            to_phase,
            phase_reason: self.phase_reason,
            explanation: self.expl,
            requeue_after: self.requeue_after,
        }
    }
}

/// The old and new VMI statuses as JSON; `None` for one that cannot be serialised.
struct StatusValues {
    old: Option<serde_json::Value>,
    new: Option<serde_json::Value>,
}

impl StatusValues {
    fn of(old: &VirtualMachineInstance, new: &VirtualMachineInstance) -> Self {
        let value = |v: &VirtualMachineInstance| serde_json::to_value(&v.status).ok();
        StatusValues {
            old: value(old),
            new: value(new),
        }
    }

    /// `equality.Semantic.DeepEqual` of the statuses (see `semantic_eq`: a status that cannot
    /// be serialised is unequal to everything).
    fn equal(&self) -> bool {
        match (&self.old, &self.new) {
            (Some(a), Some(b)) => values_semantic_eq(a, b),
            _ => false,
        }
    }
}

/// Names of the top-level status fields and of the metadata maps/lists that differ
/// (semantically) between the two VMIs, e.g. `status.activePods`, `metadata.finalizers`.
/// `statuses` is `None` when the statuses are equal.
fn changed_fields(
    statuses: Option<&StatusValues>,
    old: &VirtualMachineInstance,
    new: &VirtualMachineInstance,
) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(s) = statuses {
        let om = s.old.as_ref().and_then(serde_json::Value::as_object);
        let nm = s.new.as_ref().and_then(serde_json::Value::as_object);
        let mut keys: Vec<&String> = om.into_iter().chain(nm).flat_map(|m| m.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            if !semantic_eq(&om.and_then(|m| m.get(k)), &nm.and_then(|m| m.get(k))) {
                out.push(format!("status.{k}"));
            }
        }
    }
    if !semantic_eq(&old.metadata.labels, &new.metadata.labels) {
        out.push("metadata.labels".into());
    }
    if !semantic_eq(&old.metadata.annotations, &new.metadata.annotations) {
        out.push("metadata.annotations".into());
    }
    if !semantic_eq(&old.metadata.finalizers, &new.metadata.finalizers) {
        out.push("metadata.finalizers".into());
    }
    out
}

fn strip_vm_controller_finalizer(
    snap: &VmiSnapshot,
    new: &mut VirtualMachineInstance,
    expl: &mut Vec<String>,
) {
    let any = !new
        .metadata
        .finalizers
        .as_deref()
        .unwrap_or_default()
        .is_empty();
    if !has_owner_vm(snap) && any {
        if has_finalizer(new, finalizers::VM_CONTROLLER) {
            expl.push(format!(
                "the owning VirtualMachine is gone: remove finalizer {} (lifecycle.go:475-478)",
                finalizers::VM_CONTROLLER
            ));
        }
        remove_finalizer(new, finalizers::VM_CONTROLLER);
    }
}

fn patched_fields(p: &json_patch::Patch) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for op in &p.0 {
        let path = match op {
            json_patch::PatchOperation::Replace(o) => o.path.to_string(),
            json_patch::PatchOperation::Add(o) => o.path.to_string(),
            _ => continue,
        };
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

fn api_version_observed(vmi: &VirtualMachineInstance) -> bool {
    crate::api::annotation(&vmi.metadata, LATEST_OBSERVED_API_VERSION_ANNOTATION)
        == Some(API_VERSION_V1)
}

fn empty_decision(snap: &VmiSnapshot) -> VmiDecision {
    let phase = snap.vmi.phase();
    VmiDecision {
        key: snap.key(),
        skipped: None,
        requeue_after: None,
        sync_actions: Vec::new(),
        status_actions: Vec::new(),
        sync_error: None,
        condition_error: None,
        update_status_error: None,
        new_vmi: None,
        from_phase: phase,
        to_phase: phase,
        phase_reason: None,
        explanation: Vec::new(),
    }
}

/// The pre-sync steps of `execute` (vmi.go:316-337): the api-version annotation write and the
/// expectations gate. `Some` when the decision ends there.
fn pre_sync(snap: &VmiSnapshot) -> Option<VmiDecision> {
    if !api_version_observed(&snap.vmi) {
        let mut d = empty_decision(snap);
        let mut vmi = (*snap.vmi).clone();
        let a = vmi
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        a.insert(
            LATEST_OBSERVED_API_VERSION_ANNOTATION,
            API_VERSION_V1.into(),
        );
        a.insert(
            STORAGE_OBSERVED_API_VERSION_ANNOTATION,
            API_VERSION_V1.into(),
        );
        d.explanation.push(format!(
            "the VMI lacks {LATEST_OBSERVED_API_VERSION_ANNOTATION}=v1: write the api-version annotations first and stop (vmi.go:316-330)"
        ));
        let vmi = Arc::new(vmi);
        d.status_actions.push(VmiAction::UpdateVmi {
            vmi: vmi.clone(),
            why: "first step of every sync: record the observed API versions (vmi.go:316-330)"
                .into(),
        });
        d.new_vmi = Some(vmi);
        return Some(d);
    }
    let e = &snap.expectations;
    if !e.all_satisfied() {
        let mut d = empty_decision(snap);
        let mut waiting = Vec::new();
        if !e.pods_satisfied {
            waiting.push(format!(
                "pod creations {} / deletions {} still expected",
                e.pending_pod_creations, e.pending_pod_deletions
            ));
        }
        if !e.vmi_satisfied {
            waiting.push("the controller's own VMI update has not been observed yet".into());
        }
        if !e.pvcs_satisfied {
            waiting.push("a backend-storage PVC creation has not been observed yet".into());
        }
        let text = waiting.join("; ");
        d.explanation.push(format!(
            "expectations not satisfied ({text}): nothing to do until the informers catch up (vmi.go:332-337)"
        ));
        d.skipped = Some(SkipReason::ExpectationsPending(text));
        if snap.rules.vmi_requeue_after_expectations_timeout.value {
            let timeout = crate::runtime::expectations::EXPECTATIONS_TIMEOUT;
            d.explanation.push(format!(
                "the key is added again in {} s, the expectations timeout, in case no event comes (PR 18206)",
                timeout.as_secs()
            ));
            d.requeue_after = Some(timeout);
        }
        return Some(d);
    }
    None
}

/// True when [`decide`] on this snapshot would create the launcher pod, i.e. the caller must
/// render it (into `rendered_pod`) first.
pub(crate) fn needs_rendered_pod(snap: &VmiSnapshot) -> bool {
    if pre_sync(snap).is_some() {
        return false;
    }
    let current = podutil::current_vmi_pod(&snap.vmi, &snap.pods);
    plan_sync(snap, current).wants_pod
}

/// The whole decision for one VMI key, assuming every sync action succeeds (a created pod is
/// the rendered pod with a predicted name, see [`PREDICTED_NAME_SUFFIX`]). Pure: same snapshot,
/// same decision.
///
/// Not modelled (the decision behaves as if absent): live migration (source and target,
/// decentralized); docs/comparison.md lists what else the VMI controller does here and not.
pub(crate) fn decide(snap: &VmiSnapshot) -> VmiDecision {
    decide_inner(snap, Some(None))
}

/// The part of [`decide`] the executor's first stage needs: the same `skipped`,
/// `sync_actions` and the plan's explanation, without the optimistic `updateStatus`
/// ([`decide_after_sync`] computes the real one once the sync has run). Saves computing the
/// status twice per reconcile.
pub(crate) fn decide_sync(snap: &VmiSnapshot) -> VmiDecision {
    decide_inner(snap, None)
}

/// The decision once the executor has applied `decide(snap).sync_actions` and observed
/// `outcome`: `sync_actions` are the same; `status_actions` start with the events about the
/// outcome (SuccessfulCreate/FailedCreate/SuccessfulDelete/FailedDelete), followed by what
/// `updateStatus` does given the real created pod and sync error.
pub(crate) fn decide_after_sync(snap: &VmiSnapshot, outcome: &SyncOutcome) -> VmiDecision {
    decide_inner(snap, Some(Some(outcome)))
}

fn predicted_pod(snap: &VmiSnapshot, rendered: &Pod) -> Pod {
    let mut pod = rendered.clone();
    if pod.metadata.name.as_deref().unwrap_or("").is_empty() {
        pod.metadata.name = Some(format!(
            "{}{PREDICTED_NAME_SUFFIX}",
            pod.metadata.generate_name.as_deref().unwrap_or("")
        ));
    }
    if pod.metadata.namespace.is_none() {
        pod.metadata.namespace = snap.vmi.metadata.namespace.clone();
    }
    pod
}

/// What [`failed_sync_action`] returns.
type FailedSyncAction = (
    SyncError,
    Option<(super::action::VmiEvent, &'static str)>,
    (&'static str, &'static str),
);

/// The SyncError of a failed sync action, the event it records (pod writes only) and the
/// explanation's words for it (what failed, the KubeVirt lines).
fn failed_sync_action(
    action: &VmiAction,
    (ns, name): (&str, &str),
    error: &ApiFailure,
) -> FailedSyncAction {
    match action {
        VmiAction::CreatePod { .. } => {
            let (e, ev) = events::map_pod_create_error(ns, name, error);
            let why = "creating the launcher pod failed (lifecycle.go:175-183)";
            (
                e,
                Some((ev, why)),
                ("pod creation failed", "lifecycle.go:175-183"),
            )
        }
        VmiAction::DeletePod { name, .. } => {
            let (e, ev) = events::map_pod_delete_error(name, error);
            let why = "deleting a pod of the deleted VMI failed (lifecycle.go:1004-1006)";
            (
                e,
                Some((ev, why)),
                ("pod deletion failed", "lifecycle.go:70-74"),
            )
        }
        VmiAction::DeleteTemporaryPod { name, .. } => {
            let (e, ev) = events::map_temporary_pod_delete_error(name, error);
            let why = "deleting a temporary pod failed (lifecycle.go:1106-1108)";
            (
                e,
                Some((ev, why)),
                ("temporary pod deletion failed", "lifecycle.go:188-193"),
            )
        }
        a @ (VmiAction::CreateAttachmentPod { .. }
        | VmiAction::CreateTriggerPod { .. }
        | VmiAction::DeleteAttachmentPod { .. }) => {
            let (e, ev, why, failed) = super::volume_hotplug::failure(a, error);
            (e, Some((ev, why)), failed)
        }
        VmiAction::CreateBackendStoragePvc { .. } => (
            SyncError::new(super::backend_storage::FAILED_CREATE, error.message.clone()),
            None,
            (
                "backend-storage claim creation failed",
                "storage.go:129-132",
            ),
        ),
        VmiAction::DeleteBackendStoragePvc { .. } => (
            SyncError::new(super::backend_storage::FAILED_DELETE, error.message.clone()),
            None,
            (
                "backend-storage claim deletion failed",
                "storage.go:120-122",
            ),
        ),
        _ => (
            events::map_pod_patch_error(error),
            None,
            ("pod patch failed", "lifecycle.go:210-227"),
        ),
    }
}

/// `outcome`: `None` = stop after planning the sync ([`decide_sync`]); `Some(None)` = assume
/// the sync succeeds ([`decide`]); `Some(Some(o))` = what the executor observed.
fn decide_inner(snap: &VmiSnapshot, outcome: Option<Option<&SyncOutcome>>) -> VmiDecision {
    if let Some(d) = pre_sync(snap) {
        return d;
    }
    let mut d = empty_decision(snap);
    let current = podutil::current_vmi_pod(&snap.vmi, &snap.pods);
    let plan = plan_sync(snap, current);
    d.explanation.extend(plan.explanation.iter().cloned());
    if plan.render_missing {
        d.skipped = Some(SkipReason::RenderedPodMissing);
        return d;
    }
    d.sync_actions = plan.actions.clone();
    let Some(outcome) = outcome else {
        return d;
    };
    d.status_actions.extend(plan.events.iter().cloned());
    let mut sync_error = plan.error.clone();

    let optimistic;
    let outcome = match outcome {
        Some(o) => o,
        None => {
            let created = plan.actions.iter().find_map(|a| match a {
                VmiAction::CreatePod { pod, .. } => Some(Box::new(predicted_pod(snap, pod))),
                _ => None,
            });
            optimistic = SyncOutcome::Succeeded {
                created_pod: created,
            };
            &optimistic
        }
    };

    let (succeeded_upto, failure) = match outcome {
        SyncOutcome::Succeeded { .. } => (plan.actions.len(), None),
        SyncOutcome::Failed { index, error } if *index < plan.actions.len() => {
            (*index, Some((*index, error)))
        }
        SyncOutcome::Failed { index, .. } => {
            d.explanation.push(format!(
                "the executor reported a failure of sync action #{index}, which does not exist; treated as success"
            ));
            (plan.actions.len(), None)
        }
    };

    let ns = snap.vmi.metadata.namespace.as_deref().unwrap_or("");
    let name = snap.vmi.metadata.name.as_deref().unwrap_or("");
    // Borrowed from the executor's outcome when it has the created pod, else predicted.
    let mut created_pod: Option<std::borrow::Cow<'_, Pod>> = None;
    let mut create_failed = false;
    for action in &plan.actions[..succeeded_upto] {
        match action {
            VmiAction::CreatePod { pod, .. } => {
                let created = match outcome {
                    SyncOutcome::Succeeded {
                        created_pod: Some(p),
                    } => std::borrow::Cow::Borrowed(&**p),
                    _ => std::borrow::Cow::Owned(predicted_pod(snap, pod)),
                };
                d.status_actions.push(VmiAction::event(
                    events::pod_created(pod_name(&created)),
                    "the launcher pod was created (lifecycle.go:184)",
                ));
                created_pod = Some(created);
            }
            VmiAction::DeletePod { name, .. } => d.status_actions.push(VmiAction::event(
                events::pod_deleted(name),
                "a pod of the deleted VMI was deleted (lifecycle.go:1008)",
            )),
            VmiAction::DeleteTemporaryPod { name, .. } => d.status_actions.push(VmiAction::event(
                events::temporary_pod_deleted(name),
                "a temporary pod was deleted (lifecycle.go:1110)",
            )),
            a @ (VmiAction::CreateAttachmentPod { .. }
            | VmiAction::CreateTriggerPod { .. }
            | VmiAction::DeleteAttachmentPod { .. }) => d
                .status_actions
                .push(super::volume_hotplug::success_event(a, outcome)),
            _ => {}
        }
    }
    if let Some((index, error)) = failure {
        create_failed = matches!(plan.actions[index], VmiAction::CreatePod { .. });
        let (e, event, failed) = failed_sync_action(&plan.actions[index], (ns, name), error);
        if let Some((ev, why)) = event {
            d.status_actions.push(VmiAction::event(ev, why));
        }
        let (what, cite) = failed;
        d.explanation
            .push(format!("{what}: {} ({cite})", e.message));
        sync_error = Some(e);
    }

    // The pod `sync` hands to `updateStatus`: the created pod, nil after a failed create, else
    // the current pod.
    let status_pod: Option<&Pod> = if created_pod.is_some() {
        created_pod.as_deref()
    } else if create_failed {
        None
    } else {
        current
    };

    let st = update_status(snap, status_pod, sync_error.as_ref(), plan.wants_pod);
    d.status_actions.extend(st.actions);
    d.explanation.extend(st.explanation);
    d.sync_error = sync_error;
    d.condition_error = st.condition_error;
    d.update_status_error = st.update_status_error;
    d.new_vmi = st.new_vmi;
    d.to_phase = st.to_phase;
    d.phase_reason = st.phase_reason;
    d.requeue_after = st.requeue_after;
    d
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
