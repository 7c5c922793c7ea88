//! The VMI controller's part of volume hotplug (pkg/virt-controller/watch/vmi/
//! volume-hotplug.go, storage.go:137-192, 231-351): the VMI volumes its launcher pod lacks are
//! hotplug volumes; once their claims are ready, one attachment pod (`hp-volume-…`,
//! [`crate::launcher::attachment_pod`]) owned by the launcher pod mounts them on its node;
//! when the set changes a new pod replaces the old one, which is deleted (grace period 0) once
//! none of its volumes is still in use. The VMI's `status.volumeStatus` follows: `Bound` /
//! `Pending` from the claim, `AttachedToNode` once the pod exists, `Detaching` after an unplug
//! until the pod is gone. virt-handler's part (`MountedToPod`, `Ready`, the memory dump phases)
//! is the embedded cluster's (`crate::sim::nodes::virt_handler::hotplug_volumes_vmi`).
//!
//! A hotplugged volume whose DataVolume waits for its first consumer gets a trigger pod instead
//! (a temporary `hp-volume-` pod owned by the launcher pod so the claim binds,
//! volume-hotplug.go:192-200, 252-268, 327-343; [`trigger_population`]); the VMI's temporary-pod
//! cleanup deletes it once it runs (`decide.rs`).
//!
//! Not modelled: utility volumes, and the requeue delay between attachment pods
//! (`requeueAfter` with a threshold of `len(volumes)/-10` ns, zero below ten volumes).

use super::action::VmiAction;
use super::events::reasons as ev_reasons;
use super::podutil;
use super::snapshot::VmiSnapshot;
use crate::api::VirtualMachineInstance;
use crate::api::vmi::Volume;
use crate::controller::common::SyncError;
use crate::launcher::attachment_pod::{
    AttachmentClaim, claim_of, record_owner_vmi, render_attachment_pod,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// `GetHotplugVolumes` (pkg/storage/types/volume.go:77-106): the VMI's claim, DataVolume and
/// memory-dump volumes the launcher pod has no volume for (utility volumes not modelled).
pub(crate) fn hotplug_volumes<'a>(
    vmi: &'a VirtualMachineInstance,
    launcher: &Pod,
) -> Vec<&'a Volume> {
    let on_pod: BTreeSet<&str> = launcher
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    vmi.spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| !on_pod.contains(v.name.as_str()))
        .filter(|v| {
            v.persistent_volume_claim.is_some()
                || v.data_volume.is_some()
                || v.extra.field("memoryDump", |d| Some(!d.is_null())) == Some(true)
        })
        .collect()
}

/// `AttachmentPods` (pkg/controller/controller.go:474-488): the pods the launcher pod controls.
pub(crate) fn attachment_pods<'a>(launcher: &Pod, pods: &'a [Arc<Pod>]) -> Vec<&'a Pod> {
    let uid = podutil::pod_uid(launcher);
    pods.iter()
        .map(AsRef::as_ref)
        .filter(|p| !uid.is_empty() && podutil::is_controlled_by(p, uid))
        .collect()
}

fn pod_volumes(pod: &Pod) -> &[k8s_openapi::api::core::v1::Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or_default()
}

/// `podVolumesMatchesReadyVolumes` (volume-hotplug.go:394-410): the pod has two volumes besides
/// the claims (the emptyDir and the service-account token kube-apiserver adds) and a claim
/// volume for exactly these volumes.
fn pod_volumes_match(pod: &Pod, volumes: &[&Volume]) -> bool {
    let all = pod_volumes(pod);
    if all.len() as i64 - 2 != volumes.len() as i64 {
        return false;
    }
    let wanted: BTreeSet<&str> = volumes.iter().map(|v| v.name.as_str()).collect();
    all.iter()
        .filter(|v| v.persistent_volume_claim.is_some())
        .all(|v| wanted.contains(v.name.as_str()))
}

/// `getActiveAndOldAttachmentPods` (volume-hotplug.go:51-67): the pod whose volumes match (not
/// being deleted), and the others, newest first.
fn active_and_old<'a>(volumes: &[&Volume], pods: &[&'a Pod]) -> (Option<&'a Pod>, Vec<&'a Pod>) {
    let mut current = None;
    let mut old = Vec::new();
    for pod in pods {
        if !pod_volumes_match(pod, volumes) {
            old.push(*pod);
        } else if !podutil::is_pod_deleting(pod) {
            current = Some(*pod);
        }
    }
    old.sort_by_key(|p| std::cmp::Reverse(created(p)));
    (current, old)
}

fn created(p: &Pod) -> Option<i64> {
    p.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.as_second())
}

fn phase_of(pod: &Pod) -> &str {
    podutil::pod_phase(pod)
}

/// `volumeReadyForPodDelete` (volume-hotplug.go:132-140).
fn ready_for_pod_delete(phase: &str) -> bool {
    !matches!(phase, "Ready" | "MountedToPod")
}

/// The sync part of hotplug: the attachment pod to create and the old ones to delete.
#[derive(Default)]
pub(crate) struct HotplugPlan {
    pub actions: Vec<VmiAction>,
    pub error: Option<SyncError>,
    pub explanation: Vec<String>,
}

fn entry_str<'a>(e: &'a Value, k: &str) -> &'a str {
    e.get(k).and_then(Value::as_str).unwrap_or("")
}

/// `needsHandleHotplug` + `handleHotplugVolumes` (lifecycle.go:231-249,
/// volume-hotplug.go:40-49, 180-227) for the running launcher pod `launcher`.
pub(crate) fn plan_hotplug(snap: &VmiSnapshot, launcher: &Pod) -> HotplugPlan {
    let mut plan = HotplugPlan::default();
    let vmi = &snap.vmi;
    let volumes = hotplug_volumes(vmi, launcher);
    let pods = attachment_pods(launcher, &snap.pods);
    // needsHandleHotplug (volume-hotplug.go:40-49).
    let matching = pods.len() == 1 && pod_volumes_match(pods[0], &volumes);
    let nothing = volumes.is_empty() && pods.is_empty();
    let needed = pods.len() > 1 || !(matching || nothing);
    if podutil::is_pod_deleting(launcher) || !needed {
        return plan;
    }
    let facts = &snap.storage.claim_facts;
    let mut ready: Vec<&Volume> = Vec::new();
    for v in &volumes {
        let claim = claim_of(v).unwrap_or_default();
        match facts.get(&claim) {
            None => {
                plan.error = Some(SyncError::new(
                    "PVCNotReady",
                    format!("Error determining volume status didn't find PVC {claim}"),
                ));
                plan.explanation.push(format!(
                    "hotplug: the claim {claim} of volume {} is not in the cache (volume-hotplug.go:195-198)",
                    v.name
                ));
                return plan;
            }
            Some(f) if f.wffc => {
                // volume-hotplug.go:197-199: a failed trigger ends the hotplug sync.
                if !trigger_population(snap, launcher, v, (&claim, f.block), &mut plan) {
                    return plan;
                }
            }
            Some(f) if f.populated => ready.push(v),
            Some(_) => plan.explanation.push(format!(
                "hotplug: volume {} waits for its DataVolume to populate (volume-hotplug.go:208-212)",
                v.name
            )),
        }
    }
    let (current, old) = active_and_old(&ready, &pods);
    let pending = old
        .iter()
        .any(|p| !matches!(phase_of(p), "Running" | "Succeeded" | "Failed"));
    if current.is_none() && !pending && !ready.is_empty() {
        // A new pod does not run yet: for the cleanup it counts as no running pod.
        create_attachment_pod(snap, launcher, &ready, &mut plan);
    }
    cleanup_attachment_pods(vmi, current, &old, ready.len(), &mut plan);
    plan
}

/// `triggerHotplugPopulation` (volume-hotplug.go:192-200, 252-268, 327-343): a hotplugged
/// volume whose DataVolume waits for its first consumer gets a trigger pod whenever the
/// hotplug sync runs (no pod of the launcher pod has exactly the hotplug volumes); once it runs
/// or ends, the temporary-pod cleanup deletes it (lifecycle.go:188-193, `decide.rs`) and, while
/// the DataVolume still waits, the next sync creates another, as v1.9 does. A pod that cannot be rendered is the sync error
/// `FailedCreate` `Error creating trigger pod template <error>` (false: the sync stops there).
fn trigger_population(
    snap: &VmiSnapshot,
    launcher: &Pod,
    volume: &Volume,
    claim: (&str, bool),
    plan: &mut HotplugPlan,
) -> bool {
    let image = snap.launcher_image.clone().unwrap_or_default();
    let support = &snap.support_container_resources;
    match crate::launcher::attachment_pod::render_trigger_pod(
        volume, launcher, &snap.vmi, claim, &image, support,
    ) {
        Ok(pod) => {
            plan.explanation.push(format!(
                "hotplug: volume {} waits for its first consumer: create a trigger pod so its claim binds (volume-hotplug.go:192-200)",
                volume.name
            ));
            plan.actions.push(VmiAction::CreateTriggerPod {
                volume: volume.name.clone(),
                pod: Arc::new(pod),
                why: format!(
                    "hotplug volume {}'s DataVolume is WaitForFirstConsumer: a temporary pod next to the launcher pod gets its claim bound (volume-hotplug.go:192-200, 252-268)",
                    volume.name
                ),
            });
            true
        }
        Err(e) => {
            plan.error = Some(SyncError::new(
                ev_reasons::FAILED_CREATE,
                format!("Error creating trigger pod template {e}"),
            ));
            plan.explanation.push(format!(
                "hotplug: the trigger pod of volume {} cannot be rendered: {e} (volume-hotplug.go:253-256)",
                volume.name
            ));
            false
        }
    }
}

fn create_attachment_pod(
    snap: &VmiSnapshot,
    launcher: &Pod,
    ready: &[&Volume],
    plan: &mut HotplugPlan,
) {
    let claims: BTreeMap<String, AttachmentClaim> = ready
        .iter()
        .filter_map(|v| {
            let f = snap.storage.claim_facts.get(&claim_of(v)?)?;
            Some((
                v.name.clone(),
                AttachmentClaim {
                    uid: f.uid.clone(),
                    block: f.block,
                },
            ))
        })
        .collect();
    let image = snap.launcher_image.clone().unwrap_or_default();
    let support = &snap.support_container_resources;
    let selinux = snap.selinux_launcher_type.as_deref();
    match render_attachment_pod(ready, launcher, &snap.vmi, &claims, &image, support, selinux) {
        Ok(mut pod) => {
            if snap.rules.attachment_pod_owner_annotations.value {
                // PR 18222 (main): the pod names its VMI for the pod-delete handler.
                record_owner_vmi(&mut pod, &snap.vmi);
            }
            let names: Vec<&str> = ready.iter().map(|v| v.name.as_str()).collect();
            plan.explanation.push(format!(
                "hotplug: no attachment pod has exactly the ready volumes {names:?}: create one on the launcher pod's node (volume-hotplug.go:214-227)"
            ));
            plan.actions.push(VmiAction::CreateAttachmentPod {
                pod: Arc::new(pod),
                why: format!("hotplug volumes {names:?} are ready (volume-hotplug.go:229-241)"),
            });
        }
        // volume-hotplug.go:230-233 drops the template error: no pod, no error.
        Err(e) => plan.explanation.push(format!(
            "hotplug: the attachment pod cannot be rendered ({e}); KubeVirt creates none (volume-hotplug.go:230-233)"
        )),
    }
}

/// `cleanupAttachmentPods` (volume-hotplug.go:69-130): delete the old pods, except the newest
/// running one while the new pod does not run yet, and any whose volumes are still in use.
fn cleanup_attachment_pods(
    vmi: &VirtualMachineInstance,
    current: Option<&Pod>,
    old: &[&Pod],
    ready_count: usize,
    plan: &mut HotplugPlan,
) {
    let spec_hotplug: BTreeSet<&str> = vmi
        .spec
        .volumes
        .iter()
        .flatten()
        .filter(|v| crate::controller::vm::restart_required::is_hotplug_volume(v))
        .map(|v| v.name.as_str())
        .collect();
    let entries = vmi.volume_status_entries();
    let unplugged: BTreeMap<&str, &str> = entries
        .iter()
        .filter(|e| e.get("hotplugVolume").is_some_and(|h| !h.is_null()))
        .filter(|e| !spec_hotplug.contains(entry_str(e, "name")))
        .map(|e| (entry_str(e, "name"), entry_str(e, "phase")))
        .collect();
    let current_not_running = current.is_none_or(|p| phase_of(p) != "Running");
    let mut found_running = false;
    for pod in old {
        let vols = pod_volumes(pod);
        let preserve = vols.iter().any(|v| {
            spec_hotplug.contains(v.name.as_str())
                || unplugged
                    .get(v.name.as_str())
                    .is_some_and(|p| !ready_for_pod_delete(p))
        });
        if !found_running
            && phase_of(pod) == "Running"
            && !podutil::is_pod_deleting(pod)
            && ready_count > 0
            && current_not_running
            && preserve
        {
            found_running = true;
            continue;
        }
        let busy = vols
            .iter()
            .filter(|v| {
                unplugged
                    .get(v.name.as_str())
                    .is_some_and(|p| !ready_for_pod_delete(p))
            })
            .count();
        if busy > 0 || podutil::is_pod_deleting(pod) {
            continue;
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        plan.actions.push(VmiAction::DeleteAttachmentPod {
            uid: podutil::pod_uid(pod).to_string(),
            why: format!(
                "attachment pod {name} no longer has the VMI's hotplug volumes: delete it with grace period 0 (volume-hotplug.go:98-127, 366-385)"
            ),
            name,
        });
    }
}

/// The event after an attachment pod action succeeded (volume-hotplug.go:240, 383); a created
/// pod is named from the executor's answer when it has one.
pub(crate) fn success_event(action: &VmiAction, outcome: &super::SyncOutcome) -> VmiAction {
    let (reason, message, why) = match action {
        VmiAction::CreateAttachmentPod { pod, .. } => {
            let pod = match outcome {
                super::SyncOutcome::Succeeded {
                    created_pod: Some(p),
                } => p.as_ref(),
                _ => pod.as_ref(),
            };
            let name = pod
                .metadata
                .name
                .as_deref()
                .or(pod.metadata.generate_name.as_deref())
                .unwrap_or("");
            (
                ev_reasons::SUCCESSFUL_CREATE,
                format!("Created attachment pod {name}"),
                "the attachment pod was created (volume-hotplug.go:240)",
            )
        }
        VmiAction::DeleteAttachmentPod { name, .. } => (
            ev_reasons::SUCCESSFUL_DELETE,
            format!("Deleted attachment pod {name}"),
            "an old attachment pod was deleted (volume-hotplug.go:383)",
        ),
        VmiAction::CreateTriggerPod { volume, .. } => (
            ev_reasons::SUCCESSFUL_CREATE,
            format!("Created hotplug trigger pod for volume {volume}"),
            "the trigger pod of a WaitForFirstConsumer hotplug volume was created (volume-hotplug.go:265)",
        ),
        _ => unreachable!("only attachment pod actions"),
    };
    VmiAction::Event {
        type_: super::action::EventType::Normal,
        reason: reason.into(),
        message,
        why: why.into(),
    }
}

/// An attachment pod action that failed: the sync error, the Warning event, why, and the
/// explanation's words (volume-hotplug.go:234-238, 118-120, 377-380).
pub(crate) fn failure(
    action: &VmiAction,
    error: &crate::controller::common::ApiFailure,
) -> (
    SyncError,
    super::action::VmiEvent,
    &'static str,
    (&'static str, &'static str),
) {
    let warning = |reason: &str, message: String| super::action::VmiEvent {
        type_: super::action::EventType::Warning,
        reason: reason.into(),
        message,
    };
    match action {
        VmiAction::DeleteAttachmentPod { name, .. } => (
            SyncError::new(
                ev_reasons::FAILED_DELETE,
                format!("Error deleting attachment pod {}", error.message),
            ),
            warning(
                ev_reasons::FAILED_DELETE,
                format!("Failed to delete attachment pod {name}"),
            ),
            "deleting an attachment pod failed (volume-hotplug.go:377-380)",
            (
                "attachment pod deletion failed",
                "volume-hotplug.go:118-120",
            ),
        ),
        VmiAction::CreateTriggerPod { volume, .. } => (
            SyncError::new(
                ev_reasons::FAILED_CREATE,
                format!(
                    "Error creating hotplug population trigger pod {}",
                    error.message
                ),
            ),
            warning(
                ev_reasons::FAILED_CREATE,
                format!(
                    "Error creating hotplug population trigger pod for volume {volume}: {}",
                    error.message
                ),
            ),
            "creating the trigger pod of a WaitForFirstConsumer hotplug volume failed (volume-hotplug.go:260-263)",
            ("trigger pod creation failed", "volume-hotplug.go:260-263"),
        ),
        _ => (
            SyncError::new(
                ev_reasons::FAILED_CREATE,
                format!("Error creating attachment pod {}", error.message),
            ),
            warning(
                ev_reasons::FAILED_CREATE,
                format!("Error creating attachment pod: {}", error.message),
            ),
            "creating the attachment pod failed (volume-hotplug.go:234-238)",
            (
                "attachment pod creation failed",
                "volume-hotplug.go:234-238",
            ),
        ),
    }
}

/// `processHotplugVolumeStatus` (storage.go:137-192) on one entry; returns the event it records.
fn process_entry(
    entry: &mut Value,
    pod: Option<&Pod>,
    claim: Option<&super::snapshot::ClaimFacts>,
    claim_name: &str,
) -> Option<(String, String)> {
    let volume = entry_str(entry, "name").to_string();
    let phase = entry_str(entry, "phase").to_string();
    if entry.get("hotplugVolume").is_none_or(Value::is_null) {
        entry["hotplugVolume"] = json!({});
    }
    let mut from_claim = false;
    let mut event = None;
    match pod {
        None => {
            if phase != "Ready" {
                remove(&mut entry["hotplugVolume"], "attachPodUID");
                from_claim = true;
            }
        }
        Some(p) => {
            let name = p.metadata.name.clone().unwrap_or_default();
            entry["hotplugVolume"]["attachPodName"] = json!(name);
            let statuses = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_deref())
                .unwrap_or_default();
            if statuses.len() == 1 && statuses[0].ready {
                entry["hotplugVolume"]["attachPodUID"] = json!(podutil::pod_uid(p));
            } else {
                remove(&mut entry["hotplugVolume"], "attachPodUID");
            }
            if matches!(phase.as_str(), "" | "Bound" | "Pending") {
                let message = format!("Created hotplug attachment pod {name}, for volume {volume}");
                entry["phase"] = json!("AttachedToNode");
                entry["message"] = json!(message);
                entry["reason"] = json!(ev_reasons::SUCCESSFUL_CREATE);
                event = Some((ev_reasons::SUCCESSFUL_CREATE.to_string(), message));
            }
            from_claim = phase == "Detaching";
        }
    }
    if from_claim {
        // getVolumePhaseMessageReason (storage.go:373-385).
        let (phase, reason, message) = match claim {
            None => (
                "Pending",
                "FailedPvcNotFound",
                format!("PVC {claim_name} not found"),
            ),
            Some(c) if c.phase == "Pending" => (
                "Pending",
                "PVCNotReady",
                "PVC is in phase ClaimPending".into(),
            ),
            Some(c) if c.phase == "Bound" => {
                ("Bound", "PVCNotReady", "PVC is in phase Bound".into())
            }
            Some(_) => ("Pending", "PVCNotReady", "PVC is in phase Lost".into()),
        };
        entry["phase"] = json!(phase);
        entry["reason"] = json!(reason);
        entry["message"] = json!(message);
    }
    event
}

fn remove(obj: &mut Value, key: &str) {
    if let Some(o) = obj.as_object_mut() {
        o.remove(key);
    }
}

/// The hotplug part of `updateVolumeStatus` (storage.go:231-351) on `statuses` (the entries
/// [`super::storage::volume_status`] made for the spec's volumes): hotplug volumes get their
/// attachment state; an unplugged volume keeps its entry while an attachment pod still has it.
/// Returns the events (reason, message) KubeVirt records.
pub(crate) fn hotplug_volume_status(
    snap: &VmiSnapshot,
    vmi: &VirtualMachineInstance,
    launcher: &Pod,
    statuses: &mut Vec<Value>,
) -> Vec<(String, String)> {
    let volumes = hotplug_volumes(vmi, launcher);
    let pods = attachment_pods(launcher, &snap.pods);
    let (active, _) = active_and_old(&volumes, &pods);
    let mut events = Vec::new();
    for v in &volumes {
        let claim = claim_of(v).unwrap_or_default();
        if let Some(entry) = statuses.iter_mut().find(|e| entry_str(e, "name") == v.name) {
            events.extend(process_entry(
                entry,
                active,
                snap.storage.claim_facts.get(&claim),
                &claim,
            ));
        }
    }
    let in_spec: BTreeSet<&str> = vmi
        .spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    let entries = vmi.volume_status_entries();
    for old in entries
        .iter()
        .filter(|e| !in_spec.contains(entry_str(e, "name")))
    {
        let name = entry_str(old, "name");
        let Some(pod) = pods
            .iter()
            .find(|p| pod_volumes(p).iter().any(|v| v.name == name))
        else {
            continue;
        };
        let mut entry = old.clone();
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        if entry.get("hotplugVolume").is_none_or(Value::is_null) {
            entry["hotplugVolume"] = json!({});
        }
        entry["hotplugVolume"]["attachPodName"] = json!(pod_name);
        entry["hotplugVolume"]["attachPodUID"] = json!(podutil::pod_uid(pod));
        // phaseForUnpluggedVolume (storage.go:340-348).
        if ready_for_pod_delete(entry_str(&entry, "phase")) {
            entry["phase"] = json!("Detaching");
            if podutil::is_pod_deleting(pod) {
                let message =
                    format!("Deleted hotplug attachment pod {pod_name}, for volume {name}");
                entry["message"] = json!(message);
                entry["reason"] = json!(ev_reasons::SUCCESSFUL_DELETE);
                events.push((ev_reasons::SUCCESSFUL_DELETE.to_string(), message));
            }
        }
        statuses.push(entry);
    }
    statuses.sort_by(|a, b| entry_str(a, "name").cmp(entry_str(b, "name")));
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Time;
    use crate::controller::vmi::snapshot::ClaimFacts;

    fn vmi(volumes: Value, status: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {}}, "volumes": volumes},
            "status": status
        }))
        .unwrap()
    }

    fn pod(name: &str, uid: &str, owner: &str, volumes: Value, phase: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": uid,
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "o",
                                         "uid": owner, "controller": true}]},
                "spec": {"nodeName": "node-1", "containers": [], "volumes": volumes},
                "status": {"phase": phase}
            }))
            .unwrap(),
        )
    }

    fn hp() -> Value {
        json!({"name": "hp", "persistentVolumeClaim": {"claimName": "c", "hotpluggable": true}})
    }

    fn snap(vmi: VirtualMachineInstance, pods: Vec<Arc<Pod>>) -> VmiSnapshot {
        let mut s = VmiSnapshot::new(vmi, Time::now());
        s.pods = pods;
        s.storage.claim_facts.insert(
            "c".into(),
            ClaimFacts {
                uid: "c-uid".into(),
                block: false,
                phase: "Bound".into(),
                populated: true,
                wffc: false,
            },
        );
        s
    }

    fn launcher() -> Arc<Pod> {
        pod(
            "launcher",
            "l-uid",
            "vmi-uid",
            json!([{"name": "root", "emptyDir": {}}]),
            "Running",
        )
    }

    fn attachment(name: &str, claim_volumes: &[&str], phase: &str) -> Arc<Pod> {
        let mut vs = vec![
            json!({"name": "hotplug-disks", "emptyDir": {}}),
            json!({"name": "kube-api-access-abcde", "projected": {}}),
        ];
        vs.extend(
            claim_volumes
                .iter()
                .map(|v| json!({"name": v, "persistentVolumeClaim": {"claimName": "c"}})),
        );
        pod(
            name,
            &format!("{name}-uid"),
            "l-uid",
            Value::Array(vs),
            phase,
        )
    }

    /// volume-hotplug.go:214-227: a ready hotplug volume without a matching pod gets one; a
    /// matching pod (its claims plus the emptyDir and token volumes) needs nothing; a volume
    /// whose DataVolume still populates waits.
    #[test]
    fn a_ready_volume_gets_one_attachment_pod() {
        let v = vmi(
            json!([{"name": "root", "emptyDir": {}}, hp()]),
            json!({"phase": "Running", "selinuxContext": "none"}),
        );
        let l = launcher();
        let plan = plan_hotplug(&snap(v.clone(), vec![l.clone()]), &l);
        assert!(matches!(
            plan.actions.as_slice(),
            [VmiAction::CreateAttachmentPod { .. }]
        ));
        let plan = plan_hotplug(
            &snap(
                v.clone(),
                vec![l.clone(), attachment("hp-volume-a", &["hp"], "Running")],
            ),
            &l,
        );
        assert!(plan.actions.is_empty(), "{:?}", plan.explanation);
        let mut s = snap(v, vec![l.clone()]);
        s.storage.claim_facts.get_mut("c").unwrap().populated = false;
        assert!(plan_hotplug(&s, &l).actions.is_empty());
    }

    /// volume-hotplug.go:192-200, 252-268: a hotplug volume whose DataVolume waits for its first
    /// consumer gets a trigger pod (no attachment pod) whenever the launcher pod has no pod with
    /// exactly the hotplug volumes (`needsHandleHotplug`, volume-hotplug.go:40-49: the trigger
    /// pod itself counts as one); one that cannot be rendered stops the hotplug sync with
    /// `FailedCreate`.
    #[test]
    fn a_wffc_volume_gets_a_trigger_pod_while_none_matches() {
        let v = vmi(
            json!([{"name": "root", "emptyDir": {}}, hp()]),
            json!({"phase": "Running", "selinuxContext": "none"}),
        );
        let l = launcher();
        let mut s = snap(v, vec![l.clone()]);
        let facts = s.storage.claim_facts.get_mut("c").unwrap();
        facts.populated = false;
        facts.wffc = true;
        let plan = plan_hotplug(&s, &l);
        let [VmiAction::CreateTriggerPod { volume, pod, .. }] = plan.actions.as_slice() else {
            panic!("one trigger pod, got {:?}", plan.actions);
        };
        assert_eq!(volume, "hp");
        assert!(podutil::is_temp_pod(pod));
        assert_eq!(plan.error, None);
        // The trigger pod as stored (with the token volume kube-apiserver adds) matches the
        // hotplug volumes: no second one while it exists.
        let mut trigger = (**pod).clone();
        trigger.metadata.name = Some("hp-volume-t".into());
        trigger.metadata.uid = Some("t-uid".into());
        let token =
            serde_json::from_value(json!({"name": "kube-api-access-abcde", "projected": {}}));
        if let Some(vs) = trigger.spec.as_mut().and_then(|s| s.volumes.as_mut()) {
            vs.push(token.unwrap());
        }
        s.pods.push(Arc::new(trigger));
        assert!(plan_hotplug(&s, &l).actions.is_empty());
        // No SELinux context: KubeVirt's render error.
        s.pods.truncate(1);
        s.vmi = Arc::new(vmi(
            json!([{"name": "root", "emptyDir": {}}, hp()]),
            json!({"phase": "Running"}),
        ));
        let plan = plan_hotplug(&s, &l);
        assert!(
            !plan
                .actions
                .iter()
                .any(|a| matches!(a, VmiAction::CreateTriggerPod { .. }))
        );
        assert_eq!(
            plan.error.map(|e| (e.reason, e.message)),
            Some((
                "FailedCreate".to_string(),
                "Error creating trigger pod template VMI is missing SELinux context".to_string()
            ))
        );
    }

    /// PR 18222 (main): the attachment pod the plan creates names its VMI; v1.9.0's does not.
    #[test]
    fn on_main_the_new_attachment_pod_names_its_vmi() {
        use crate::kubevirt_version::KubeVirtVersion;
        let v = vmi(
            json!([{"name": "root", "emptyDir": {}}, hp()]),
            json!({"phase": "Running", "selinuxContext": "none"}),
        );
        let l = launcher();
        for (version, want) in [
            (KubeVirtVersion::V1_9, None),
            (
                KubeVirtVersion::Main,
                Some(BTreeMap::from([
                    ("kubevirt.io/owner-vmi-name".to_string(), "vm".to_string()),
                    (
                        "kubevirt.io/owner-vmi-uid".to_string(),
                        "vmi-uid".to_string(),
                    ),
                ])),
            ),
        ] {
            let mut s = snap(v.clone(), vec![l.clone()]);
            s.rules = version.controller_rules();
            let plan = plan_hotplug(&s, &l);
            let [VmiAction::CreateAttachmentPod { pod, .. }] = plan.actions.as_slice() else {
                panic!("{version}: {:?}", plan.explanation);
            };
            assert_eq!(pod.metadata.annotations, want, "{version}");
        }
    }

    /// An unplugged volume: the old pod is deleted once the volume is not in use (an
    /// `AttachedToNode` volume is ready for the delete, volume-hotplug.go:132-140), not while it
    /// is `Ready`; its status entry stays `Detaching` while the pod exists (storage.go:316-338).
    #[test]
    fn an_unplugged_volume_is_detached_and_its_pod_deleted() {
        let l = launcher();
        let old = attachment("hp-volume-a", &["hp"], "Running");
        let status = |phase: &str| {
            json!({"phase": "Running", "volumeStatus": [
            {"name": "hp", "target": "", "phase": phase, "hotplugVolume": {"attachPodName": "hp-volume-a"}}]})
        };
        let s = snap(
            vmi(
                json!([{"name": "root", "emptyDir": {}}]),
                status("AttachedToNode"),
            ),
            vec![l.clone(), old.clone()],
        );
        let plan = plan_hotplug(&s, &l);
        assert!(
            matches!(plan.actions.as_slice(), [VmiAction::DeleteAttachmentPod { name, .. }] if name == "hp-volume-a")
        );
        let mut statuses = vec![json!({"name": "root", "target": ""})];
        hotplug_volume_status(&s, &s.vmi, &l, &mut statuses);
        assert_eq!(statuses[0]["name"], "hp");
        assert_eq!(statuses[0]["phase"], "Detaching");
        assert_eq!(
            statuses[0]["hotplugVolume"]["attachPodUID"],
            "hp-volume-a-uid"
        );

        let s = snap(
            vmi(json!([{"name": "root", "emptyDir": {}}]), status("Ready")),
            vec![l.clone(), old],
        );
        assert!(plan_hotplug(&s, &l).actions.is_empty());
    }

    /// storage.go:137-192: a plugged volume is `Bound` from its claim before the pod exists,
    /// `AttachedToNode` with the pod's name once it does (with an event), and the pod's UID once
    /// its container is ready.
    #[test]
    fn a_plugged_volume_moves_from_its_claim_phase_to_attached() {
        let l = launcher();
        let v = vmi(
            json!([{"name": "root", "emptyDir": {}}, hp()]),
            json!({"phase": "Running"}),
        );
        let mut statuses = vec![
            json!({"name": "hp", "target": ""}),
            json!({"name": "root", "target": ""}),
        ];
        let events =
            hotplug_volume_status(&snap(v.clone(), vec![l.clone()]), &v, &l, &mut statuses);
        assert!(events.is_empty());
        assert_eq!(
            (statuses[0]["phase"].clone(), statuses[0]["message"].clone()),
            (json!("Bound"), json!("PVC is in phase Bound"))
        );

        let mut ready = (*attachment("hp-volume-a", &["hp"], "Running")).clone();
        ready.status.as_mut().unwrap().container_statuses =
            Some(vec![k8s_openapi::api::core::v1::ContainerStatus {
                ready: true,
                ..Default::default()
            }]);
        let events = hotplug_volume_status(
            &snap(v.clone(), vec![l.clone(), Arc::new(ready)]),
            &v,
            &l,
            &mut statuses,
        );
        assert_eq!(statuses[0]["phase"], "AttachedToNode");
        assert_eq!(
            statuses[0]["hotplugVolume"],
            json!({"attachPodName": "hp-volume-a", "attachPodUID": "hp-volume-a-uid"})
        );
        assert_eq!(
            events,
            [(
                "SuccessfulCreate".to_string(),
                "Created hotplug attachment pod hp-volume-a, for volume hp".to_string()
            )]
        );
    }
}
