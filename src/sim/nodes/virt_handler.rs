//! The virt-handler stand-in's decisions for kubevirt.io/v1 VirtualMachineInstances, on plain
//! JSON (`serde_json::Value` of the whole object).
//!
//! What real virt-handler does (pkg/virt-handler/vm.go, KubeVirt v1.9.0): once the domain is up
//! it moves a `Scheduled` VMI to `Running` (lifecycle table in the facts file, section 3.3); the
//! phase follows the domain state (`calculateVmPhaseForStatusReason`: Shutoff/Shutdown →
//! Succeeded, Crashed/Panicked → Failed, no status reason is set); a VMI with a deletion
//! timestamp gets its domain shut down gracefully and ends `Succeeded`. Each phase change
//! appends `{"phase", "phaseTransitionTimestamp"}` to `status.phaseTransitionTimestamps` unless
//! that phase is already recorded (pkg/controller/controller.go:389-404).
//!
//! The VMI CRD has **no status subresource** (pkg/virt-operator/resource/generate/components/
//! crds.go `NewVirtualMachineInstanceCrd`), so status writes are a PUT of the whole object.

use super::kubelet::find_condition;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value, json};

/// VMI phase `Scheduled`.
pub(crate) const PHASE_SCHEDULED: &str = "Scheduled";
/// VMI phase `Running`.
pub(crate) const PHASE_RUNNING: &str = "Running";
/// VMI phase `Succeeded`.
pub(crate) const PHASE_SUCCEEDED: &str = "Succeeded";
/// VMI phase `Failed`.
pub(crate) const PHASE_FAILED: &str = "Failed";

/// Label on virt-launcher pods holding the VMI's UID (KubeVirt `v1.CreatedByLabel`).
pub(crate) const LABEL_CREATED_BY: &str = "kubevirt.io/created-by";
/// Annotation on virt-launcher pods holding the VMI's name (KubeVirt `v1.DomainAnnotation`).
pub(crate) const ANNOTATION_DOMAIN: &str = "kubevirt.io/domain";

/// `status.phase` of a VMI ("" when unset).
pub(crate) fn vmi_phase(vmi: &Value) -> &str {
    vmi.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// `status.nodeName` of a VMI.
pub(crate) fn vmi_node(vmi: &Value) -> Option<&str> {
    vmi.pointer("/status/nodeName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The event virt-handler records on a VMI whose phase it changed (`recordPhaseChangeEvent`,
/// pkg/virt-handler/vm.go:1147-1149, 1185-1194; texts controller.go:75-79): `(type, reason,
/// message)`, `None` when the phase did not change or is another one.
pub(crate) fn phase_change_event(
    old_phase: &str,
    new_phase: &str,
) -> Option<(&'static str, &'static str, &'static str)> {
    if old_phase == new_phase {
        return None;
    }
    match new_phase {
        PHASE_RUNNING => Some(("Normal", "Started", "VirtualMachineInstance started.")),
        PHASE_SUCCEEDED => Some((
            "Normal",
            "Stopped",
            "The VirtualMachineInstance was shut down.",
        )),
        PHASE_FAILED => Some(("Warning", "Stopped", "The VirtualMachineInstance crashed.")),
        _ => None,
    }
}

/// Whether the VMI is Succeeded or Failed.
pub(crate) fn vmi_is_final(vmi: &Value) -> bool {
    matches!(vmi_phase(vmi), PHASE_SUCCEEDED | PHASE_FAILED)
}

/// Whether the VMI has `metadata.deletionTimestamp`.
pub(crate) fn vmi_is_deleting(vmi: &Value) -> bool {
    vmi.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

fn uid(v: &Value) -> Option<&str> {
    v.pointer("/metadata/uid").and_then(Value::as_str)
}

/// Whether `pod` is a virt-launcher pod of `vmi`: label `kubevirt.io/created-by=<VMI UID>`, or a
/// controller owner reference to the VMI's UID.
pub(crate) fn is_launcher_of(pod: &Pod, vmi: &Value) -> bool {
    let Some(vmi_uid) = uid(vmi) else {
        return false;
    };
    let by_label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_CREATED_BY))
        .is_some_and(|v| v == vmi_uid);
    let by_owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && o.uid == vmi_uid);
    by_label || by_owner
}

/// The VMI UIDs `pod` may be the launcher of (its `kubevirt.io/created-by` label and controller
/// owner reference), for indexing pods by VMI once per pass instead of scanning every pod for
/// every VMI.
pub(crate) fn launcher_owner_uids(pod: &Pod) -> impl Iterator<Item = &str> {
    let by_label = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_CREATED_BY))
        .map(String::as_str);
    let by_owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str());
    by_label.into_iter().chain(by_owner)
}

/// The VMI's current launcher pod among `pods`: a launcher pod on the VMI's node, not being
/// deleted, preferring the newest (by creation timestamp).
pub(crate) fn find_launcher_pod<'a>(
    vmi: &Value,
    pods: impl IntoIterator<Item = &'a Pod>,
) -> Option<&'a Pod> {
    let ns = vmi.pointer("/metadata/namespace").and_then(Value::as_str);
    let node = vmi_node(vmi);
    pods.into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == ns)
        .filter(|p| is_launcher_of(p, vmi))
        .filter(|p| node.is_none() || p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == node)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .max_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        })
}

/// The guest of a Scheduled or Running VMI (not being deleted itself) whose launcher pod is
/// being deleted, with no other launcher pod. `None` when that is not the case.
///
/// - A Running VMI whose pod got a grace period: the kubelet's SIGTERM makes virt-launcher mark
///   the domain for graceful shutdown (cmd/virt-launcher/virt-launcher.go:484-487, 504-517),
///   virt-handler shuts the guest down (pkg/virt-handler/vm.go:1474-1482, `processVmShutdown`),
///   the domain goes Shutoff with reason Shutdown and the VMI `Succeeded` (vm.go:2372-2373).
///   The guest is taken to shut down within the grace period.
/// - A Scheduled VMI (no domain yet), or a pod deleted with grace period 0 (killed before the
///   guest can shut down): virt-handler finds no domain for a VMI that is not final and reports
///   it `Failed` (`calculateVmPhaseForStatusReason`, vm.go:2319-2352).
pub(crate) fn decide_launcher_deleted<'a>(
    vmi: &Value,
    pods: impl IntoIterator<Item = &'a Pod>,
    now_rfc3339: &str,
) -> Option<VmiDecision> {
    let phase = vmi_phase(vmi);
    if vmi_is_final(vmi)
        || vmi_is_deleting(vmi)
        || !matches!(phase, PHASE_SCHEDULED | PHASE_RUNNING)
    {
        return None;
    }
    let ns = vmi.pointer("/metadata/namespace").and_then(Value::as_str);
    let pods: Vec<&Pod> = pods
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == ns && is_launcher_of(p, vmi))
        .collect();
    if pods.iter().any(|p| p.metadata.deletion_timestamp.is_none()) {
        return None;
    }
    let deleting: Vec<&Pod> = pods
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .collect();
    if deleting.is_empty() {
        return None;
    }
    let graceful = deleting
        .iter()
        .all(|p| p.metadata.deletion_grace_period_seconds.unwrap_or(0) > 0);
    let ends = if phase == PHASE_RUNNING && graceful {
        PHASE_SUCCEEDED
    } else {
        PHASE_FAILED
    };
    Some(VmiDecision::Stop {
        vmi: final_vmi(vmi, ends, now_rfc3339),
        launcher_exit: None,
    })
}

/// The VMI with its hotplug volumes' status moved on as virt-handler's
/// `updateVolumeStatusesFromDomain` does (pkg/virt-handler/vm.go:631-683), or `None` when
/// nothing changes. A volume whose attachment pod is ready (the VMI controller set
/// `attachPodUID`) counts as mounted into the launcher pod.
pub(crate) fn hotplug_volumes_vmi(vmi: &Value, now_rfc3339: &str) -> Option<Value> {
    let in_spec: Vec<&str> = names_at(vmi, "/spec/volumes");
    let disks: Vec<&str> = names_at(vmi, "/spec/domain/devices/disks");
    let entries = vmi.pointer("/status/volumeStatus")?.as_array()?;
    let mut taken: Vec<String> = entries
        .iter()
        .filter_map(|e| e.get("target").and_then(Value::as_str))
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect();
    let vmi_name = vmi
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut changed = false;
    let mut out = Vec::with_capacity(entries.len());
    for entry in entries {
        let mut e = entry.clone();
        if e.get("hotplugVolume").is_some_and(|h| h.is_object()) {
            let name = e
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let ctx = VolumeCtx {
                in_spec: in_spec.contains(&name.as_str()),
                has_disk: disks.contains(&name.as_str()),
                vmi_name,
                now: now_rfc3339,
            };
            hotplug_volume_step(&mut e, &name, &ctx, &mut taken);
            if e.get("memoryDumpVolume").is_some_and(|m| m.is_object()) {
                memory_dump_step(&mut e, &name, &ctx);
            }
        }
        changed |= e != *entry;
        out.push(e);
    }
    if !changed {
        return None;
    }
    let mut new = vmi.clone();
    new["status"]["volumeStatus"] = Value::Array(out);
    Some(new)
}

/// What one volume's step reads besides its entry.
struct VolumeCtx<'a> {
    in_spec: bool,
    has_disk: bool,
    vmi_name: &'a str,
    now: &'a str,
}

fn names_at<'a>(v: &'a Value, ptr: &str) -> Vec<&'a str> {
    v.pointer(ptr)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|x| x.get("name").and_then(Value::as_str))
        .collect()
}

fn set_phase(e: &mut Value, phase: &str, reason: &str, message: String) {
    e["phase"] = json!(phase);
    e["reason"] = json!(reason);
    e["message"] = json!(message);
}

/// `updateHotplugVolumeStatus` (pkg/virt-handler/vm.go:498-531, `canUpdateToMounted` /
/// `canUpdateToUnmounted` 467-473) with the domain's part: a mounted volume still in the spec
/// becomes `MountedToPod`; a mounted disk is then attached (the next free `sdX` target) and
/// `Ready`; a volume gone from the spec is detached and unmounted (`UnMountedFromPod`).
fn hotplug_volume_step(e: &mut Value, name: &str, ctx: &VolumeCtx, taken: &mut Vec<String>) {
    let phase = e
        .get("phase")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mounted = e
        .pointer("/hotplugVolume/attachPodUID")
        .and_then(Value::as_str)
        .is_some_and(|u| !u.is_empty());
    let is_dump = e.get("memoryDumpVolume").is_some_and(|m| m.is_object());
    if !ctx.in_spec {
        if matches!(phase.as_str(), "Ready" | "MountedToPod" | "AttachedToNode") {
            e["target"] = json!("");
            let message = format!("Volume {name} has been unmounted from virt-launcher pod");
            set_phase(e, "UnMountedFromPod", "VolumeUnMountedFromPod", message);
        }
        return;
    }
    if mounted && matches!(phase.as_str(), "Bound" | "Pending" | "AttachedToNode") {
        let message = format!("Volume {name} has been mounted in virt-launcher pod");
        set_phase(e, "MountedToPod", "VolumeMountedToPod", message);
    }
    if ctx.has_disk && !is_dump && e["phase"] == "MountedToPod" {
        let target = (b'a'..=b'z')
            .map(|c| format!("sd{}", c as char))
            .find(|t| !taken.contains(t))
            .unwrap_or_default();
        taken.push(target.clone());
        e["target"] = json!(target);
        let message = format!("Successfully attach hotplugged volume {name} to VM");
        set_phase(e, "Ready", "VolumeReady", message);
    }
}

/// `updateMemoryDumpInfo` (pkg/virt-handler/vm.go:891-928) with the dump itself: a mounted
/// dump volume gets its target file (`dumpTargetFile`, 886-889) and `MemoryDumpInProgress`;
/// on the next pass the dump has been taken and the volume is `MemoryDumpCompleted`.
fn memory_dump_step(e: &mut Value, name: &str, ctx: &VolumeCtx) {
    match e.get("phase").and_then(Value::as_str) {
        Some("MountedToPod") => {
            let stamp = chrono::DateTime::parse_from_rfc3339(ctx.now)
                .map(|t| t.format("%Y%m%d-%H%M%S").to_string())
                .unwrap_or_default();
            e["memoryDumpVolume"]["targetFileName"] =
                json!(format!("{}-{name}-{stamp}.memory.dump", ctx.vmi_name));
            let message = format!("Memory dump Volume {name} is attached, getting memory dump");
            set_phase(e, "MemoryDumpInProgress", "VolumeMountedToPod", message);
        }
        Some("MemoryDumpInProgress") => {
            e["memoryDumpVolume"]["startTimestamp"] = json!(ctx.now);
            e["memoryDumpVolume"]["endTimestamp"] = json!(ctx.now);
            let message = format!("Memory dump to Volume {name} has completed successfully");
            set_phase(e, "MemoryDumpCompleted", "VolumeReady", message);
        }
        _ => {}
    }
}

/// Whether the launcher pod runs: phase Running and container `compute` running.
pub(crate) fn launcher_running(pod: &Pod) -> bool {
    let Some(status) = pod.status.as_ref() else {
        return false;
    };
    status.phase.as_deref() == Some("Running")
        && status.container_statuses.iter().flatten().any(|c| {
            c.name == "compute" && c.state.as_ref().and_then(|s| s.running.as_ref()).is_some()
        })
}

fn status_mut(vmi: &mut Value) -> Option<&mut Map<String, Value>> {
    let obj = vmi.as_object_mut()?;
    let status = obj.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    status.as_object_mut()
}

/// Append `{"phase": phase, "phaseTransitionTimestamp": now}` to
/// `status.phaseTransitionTimestamps` unless an entry for `phase` exists. Returns whether it
/// appended.
pub(crate) fn append_phase_transition(
    status: &mut Map<String, Value>,
    phase: &str,
    now_rfc3339: &str,
) -> bool {
    let list = status
        .entry("phaseTransitionTimestamps")
        .or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(items) = list.as_array_mut() else {
        return false;
    };
    if items
        .iter()
        .any(|e| e.get("phase").and_then(Value::as_str) == Some(phase))
    {
        return false;
    }
    items.push(json!({"phase": phase, "phaseTransitionTimestamp": now_rfc3339}));
    true
}

fn set_vmi_condition(status: &mut Map<String, Value>, cond: Value) {
    let list = status.entry("conditions").or_insert_with(|| json!([]));
    if !list.is_array() {
        *list = json!([]);
    }
    let Some(items) = list.as_array_mut() else {
        return;
    };
    let type_ = cond.get("type").cloned();
    match items.iter_mut().find(|c| c.get("type") == type_.as_ref()) {
        Some(existing) => {
            let same_status = existing.get("status") == cond.get("status");
            let ltt = existing.get("lastTransitionTime").cloned();
            *existing = cond;
            if same_status && let (Some(ltt), Some(obj)) = (ltt, existing.as_object_mut()) {
                obj.insert("lastTransitionTime".into(), ltt);
            }
        }
        None => items.push(cond),
    }
}

/// A locally administered unicast MAC derived from the VMI UID and interface name.
pub(crate) fn mac_for(vmi_uid: &str, iface: &str) -> String {
    let id = uuid::Uuid::new_v5(
        &uuid::Uuid::NAMESPACE_OID,
        format!("{vmi_uid}/{iface}").as_bytes(),
    );
    let b = id.as_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4]
    )
}

/// The VMI after the guest started: phase `Running`, the `Running` phase-transition timestamp
/// (once), condition `Ready` copied from the launcher pod's `Ready` condition, and
/// `status.interfaces` (the first interface, or `default`, gets the pod IP).
pub(crate) fn running_vmi(vmi: &Value, launcher: &Pod, now_rfc3339: &str) -> Value {
    let mut out = vmi.clone();
    let vmi_uid = uid(vmi).unwrap_or_default().to_string();
    let spec_ifaces: Vec<String> = vmi
        .pointer("/spec/domain/devices/interfaces")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|i| i.get("name").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let pod_ip = launcher.status.as_ref().and_then(|s| s.pod_ip.clone());
    let ready = find_condition(launcher.status.as_ref(), "Ready").cloned();
    let Some(status) = status_mut(&mut out) else {
        return out;
    };
    status.insert("phase".into(), json!(PHASE_RUNNING));
    append_phase_transition(status, PHASE_RUNNING, now_rfc3339);
    // `updateSELinuxContext` on a node without SELinux (pkg/virt-handler/vm.go:1033-1048); the
    // hotplug attachment pod needs a context (template.go:1502-1511).
    status
        .entry("selinuxContext")
        .or_insert_with(|| json!("none"));
    let mut cond = json!({
        "type": "Ready",
        "status": ready.as_ref().map_or("False", |c| c.status.as_str()),
        "lastProbeTime": null,
        "lastTransitionTime": now_rfc3339,
    });
    if let (Some(c), Some(obj)) = (ready.as_ref(), cond.as_object_mut()) {
        if let Some(r) = &c.reason {
            obj.insert("reason".into(), json!(r));
        }
        if let Some(m) = &c.message {
            obj.insert("message".into(), json!(m));
        }
    }
    set_vmi_condition(status, cond);
    let names = if spec_ifaces.is_empty() {
        vec!["default".to_string()]
    } else {
        spec_ifaces
    };
    let existing: Vec<Value> = status
        .get("interfaces")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let interfaces: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let mut entry = existing
                .iter()
                .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
                .cloned()
                .unwrap_or_else(|| json!({"name": name}));
            if let Some(obj) = entry.as_object_mut() {
                obj.insert("mac".into(), json!(mac_for(&vmi_uid, name)));
                obj.insert("infoSource".into(), json!("domain, guest-agent"));
                obj.insert("queueCount".into(), json!(1));
                obj.insert("interfaceName".into(), json!(format!("eth{i}")));
                if i == 0
                    && let Some(ip) = &pod_ip
                {
                    obj.insert("ipAddress".into(), json!(ip));
                    obj.insert("ipAddresses".into(), json!([ip]));
                    obj.insert("podInterfaceName".into(), json!("eth0"));
                }
            }
            entry
        })
        .collect();
    status.insert("interfaces".into(), Value::Array(interfaces));
    set_hotplug_status(status, vmi, now_rfc3339);
    out
}

/// What a running domain reports for CPU and memory hotplug, filled where absent: the
/// current CPU topology and `status.memory` with `guestAtBoot`/`guestRequested` (virt-api sets
/// them when the VMI is created, pkg/defaults/defaults.go:137-158; the real kube-apiserver of
/// the tests has no virt-api), `guestCurrent` (virt-handler's `updateMemoryInfo`, the domain's
/// current memory: the boot size until a hotplug completes, pkg/virt-handler/vm.go:1050-1060),
/// and `LiveMigratable`, from the pod network's binding only (`IsPodNetworkWithMigratableBinding`,
/// pkg/network/vmispec/interface.go:55-88; storage and other reasons are not modelled).
fn set_hotplug_status(status: &mut Map<String, Value>, vmi: &Value, now_rfc3339: &str) {
    if let Some(cpu) = vmi.pointer("/spec/domain/cpu").filter(|c| c.is_object()) {
        status.entry("currentCPUTopology").or_insert_with(|| {
            let f = |k: &str| cpu.get(k).cloned().unwrap_or(json!(0));
            json!({"sockets": f("sockets"), "cores": f("cores"), "threads": f("threads")})
        });
    }
    if let Some(guest) = vmi
        .pointer("/spec/domain/memory/guest")
        .filter(|g| g.is_string())
    {
        let memory = status.entry("memory").or_insert_with(|| json!({}));
        if let Some(m) = memory.as_object_mut() {
            for key in ["guestAtBoot", "guestCurrent", "guestRequested"] {
                m.entry(key).or_insert_with(|| guest.clone());
            }
        }
    }
    let (migratable, reason, message) = match pod_network_not_migratable(vmi) {
        None => ("True", None, None),
        Some(m) => ("False", Some("InterfaceNotLiveMigratable"), Some(m)),
    };
    let mut cond = json!({"type": "LiveMigratable", "status": migratable,
                          "lastProbeTime": null, "lastTransitionTime": now_rfc3339});
    if let (Some(r), Some(m), Some(o)) = (reason, message, cond.as_object_mut()) {
        o.insert("reason".into(), json!(r));
        o.insert("message".into(), json!(m));
    }
    set_vmi_condition(status, cond);
}

/// `IsPodNetworkWithMigratableBinding` (pkg/network/vmispec/interface.go:55-88): the error
/// text when the pod network's interface is neither masquerade nor passt (nor a bridge the
/// VMI's `kubevirt.io/allow-pod-bridge-network-live-migration` annotation allows, nor a
/// binding plugin, which counts as migratable here).
fn pod_network_not_migratable(vmi: &Value) -> Option<String> {
    let ifaces = vmi.pointer("/spec/domain/devices/interfaces")?.as_array()?;
    if ifaces.is_empty() {
        return None;
    }
    let networks = vmi.pointer("/spec/networks").and_then(Value::as_array)?;
    let pod = networks.iter().find(|n| n.get("pod").is_some())?;
    let name = pod.get("name");
    let Some(primary) = ifaces.iter().find(|i| i.get("name") == name) else {
        let name = name.and_then(Value::as_str).unwrap_or_default();
        return Some(format!("no primary interface found for network {name}"));
    };
    let allowed_bridge = primary.get("bridge").is_some()
        && vmi
            .pointer("/metadata/annotations")
            .and_then(|a| a.get("kubevirt.io/allow-pod-bridge-network-live-migration"))
            .is_some();
    let migratable = ["masquerade", "passt", "binding"]
        .iter()
        .any(|k| primary.get(*k).is_some())
        || allowed_bridge;
    (!migratable).then(|| {
        "cannot migrate VMI which does not use masquerade or a migratable plugin to connect to \
         the pod network"
            .to_string()
    })
}

/// The VMI after the guest stopped: phase `Succeeded` (shutdown) or `Failed` (crash), the
/// phase's transition timestamp (once), and condition `Ready=False` reason `GuestNotRunning`.
/// No `status.reason` is set (virt-handler sets none).
pub(crate) fn final_vmi(vmi: &Value, phase: &str, now_rfc3339: &str) -> Value {
    let mut out = vmi.clone();
    if let Some(status) = status_mut(&mut out) {
        status.insert("phase".into(), json!(phase));
        append_phase_transition(status, phase, now_rfc3339);
        set_vmi_condition(
            status,
            json!({
                "type": "Ready",
                "status": "False",
                "reason": "GuestNotRunning",
                "message": "Guest VM is not reported as running",
                "lastProbeTime": null,
                "lastTransitionTime": now_rfc3339,
            }),
        );
    }
    out
}

/// What virt-handler does next for one VMI on one of our nodes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum VmiDecision {
    /// Nothing to do.
    Nothing,
    /// Guest started: PUT this VMI (phase Running).
    Start(Value),
    /// A Running VMI's hotplug volumes moved on: PUT this VMI.
    Volumes(Value),
    /// Guest gone: PUT this VMI (final phase); then, when `launcher_exit` is set, the launcher
    /// pod ends with that exit code (0 → Succeeded, else Failed).
    Stop {
        vmi: Value,
        launcher_exit: Option<i32>,
    },
}

/// Decide for a VMI whose `status.nodeName` is one of our nodes.
///
/// - final → nothing;
/// - deletion timestamp while Scheduled/Running → Succeeded (graceful guest shutdown; the
///   launcher pod is left to its own deletion);
/// - Scheduled/Running and the launcher pod ended (Succeeded/Failed) → Failed (domain gone);
/// - Scheduled and `fail_before_running` → Failed, launcher exits 1;
/// - Scheduled and the launcher pod runs → Running.
pub(crate) fn decide(
    vmi: &Value,
    launcher: Option<&Pod>,
    fail_before_running: bool,
    now_rfc3339: &str,
) -> VmiDecision {
    let phase = vmi_phase(vmi);
    if vmi_is_final(vmi) {
        return VmiDecision::Nothing;
    }
    if vmi_is_deleting(vmi) && matches!(phase, PHASE_SCHEDULED | PHASE_RUNNING) {
        return VmiDecision::Stop {
            vmi: final_vmi(vmi, PHASE_SUCCEEDED, now_rfc3339),
            launcher_exit: None,
        };
    }
    // The launcher died under the guest (its pod ended): the domain is gone, and virt-handler
    // reports the VMI Failed — a Running VMI without a domain, or a Scheduled one whose launcher
    // is unresponsive (`calculateVmPhaseForStatusReason`, pkg/virt-handler/vm.go:2319-2345).
    // virt-controller alone would leave a Running VMI with a Failed pod Running
    // (lifecycle.go:480-485 only handles a vanished pod).
    if matches!(phase, PHASE_SCHEDULED | PHASE_RUNNING)
        && launcher.is_some_and(super::kubelet::is_terminal)
    {
        return VmiDecision::Stop {
            vmi: final_vmi(vmi, PHASE_FAILED, now_rfc3339),
            launcher_exit: None,
        };
    }
    if phase == PHASE_RUNNING && !vmi_is_deleting(vmi) {
        return hotplug_volumes_vmi(vmi, now_rfc3339)
            .map_or(VmiDecision::Nothing, VmiDecision::Volumes);
    }
    if phase != PHASE_SCHEDULED {
        return VmiDecision::Nothing;
    }
    if fail_before_running {
        return VmiDecision::Stop {
            vmi: final_vmi(vmi, PHASE_FAILED, now_rfc3339),
            launcher_exit: Some(1),
        };
    }
    match launcher {
        Some(pod) if launcher_running(pod) => {
            VmiDecision::Start(running_vmi(vmi, pod, now_rfc3339))
        }
        _ => VmiDecision::Nothing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::nodes::kubelet::running_status;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use std::collections::BTreeMap;

    const NOW: &str = "2026-01-02T03:04:05Z";

    fn vmi(phase: &str) -> Value {
        json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "vm-a", "namespace": "default", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}}},
            "status": {
                "phase": phase,
                "nodeName": "sim-node-0",
                "phaseTransitionTimestamps": [
                    {"phase": "Pending", "phaseTransitionTimestamp": "2026-01-02T03:04:00Z"},
                    {"phase": "Scheduling", "phaseTransitionTimestamp": "2026-01-02T03:04:01Z"},
                    {"phase": "Scheduled", "phaseTransitionTimestamp": "2026-01-02T03:04:02Z"}
                ]
            }
        })
    }

    fn launcher(running: bool) -> Pod {
        let mut pod = Pod {
            metadata: ObjectMeta {
                name: Some("virt-launcher-vm-a-x".into()),
                namespace: Some("default".into()),
                uid: Some("pod-uid".into()),
                labels: Some(BTreeMap::from([(
                    LABEL_CREATED_BY.to_string(),
                    "vmi-uid".to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("sim-node-0".into()),
                containers: vec![Container {
                    name: "compute".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        };
        if running {
            let t = Time(k8s_openapi::jiff::Timestamp::from_second(0).expect("epoch"));
            pod.status = Some(running_status(&pod, "10.244.0.7", "10.89.0.2", &t));
        }
        pod
    }

    fn entries(v: &Value, phase: &str) -> usize {
        v.pointer("/status/phaseTransitionTimestamps")
            .and_then(Value::as_array)
            .map_or(0, |a| a.iter().filter(|e| e["phase"] == phase).count())
    }

    /// The final VMI and launcher exit of a `Stop` decision; panics with `expected` otherwise.
    fn stopped(decision: VmiDecision, expected: &str) -> (Value, Option<i32>) {
        match decision {
            VmiDecision::Stop { vmi, launcher_exit } => (vmi, launcher_exit),
            other => panic!("{expected}, got {other:?}"),
        }
    }

    /// A started domain reports its topology, memory sizes and migratability; what virt-api
    /// already set is kept.
    #[test]
    fn running_vmi_reports_hotplug_status() {
        let mut v = vmi("Scheduled");
        v["spec"]["domain"]["cpu"] = json!({"sockets": 1, "cores": 2, "maxSockets": 4});
        v["spec"]["domain"]["memory"] = json!({"guest": "1Gi"});
        v["spec"]["domain"]["devices"]["interfaces"] = json!([{"name": "d", "masquerade": {}}]);
        v["spec"]["networks"] = json!([{"name": "d", "pod": {}}]);
        v["status"]["memory"] = json!({"guestAtBoot": "512Mi", "memoryOverhead": "200Mi"});
        let out = running_vmi(&v, &launcher(true), NOW);
        let st = &out["status"];
        assert_eq!(
            st["currentCPUTopology"],
            json!({"sockets": 1, "cores": 2, "threads": 0})
        );
        assert_eq!(
            st["memory"],
            json!({"guestAtBoot": "512Mi", "memoryOverhead": "200Mi", "guestCurrent": "1Gi",
                   "guestRequested": "1Gi"})
        );
        let migratable = |o: &Value| {
            o["status"]["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "LiveMigratable")
                .map(|c| (c["status"].clone(), c["reason"].clone()))
        };
        assert_eq!(migratable(&out), Some((json!("True"), Value::Null)));
        v["spec"]["domain"]["devices"]["interfaces"] = json!([{"name": "d", "bridge": {}}]);
        let out = running_vmi(&v, &launcher(true), NOW);
        assert_eq!(
            migratable(&out),
            Some((json!("False"), json!("InterfaceNotLiveMigratable")))
        );
    }

    #[test]
    fn scheduled_vmi_with_running_launcher_goes_running_once() {
        let v = vmi("Scheduled");
        let pod = launcher(true);
        assert!(is_launcher_of(&pod, &v));
        // The index key agrees with is_launcher_of.
        let uid = v.pointer("/metadata/uid").and_then(Value::as_str).unwrap();
        assert!(launcher_owner_uids(&pod).any(|u| u == uid));
        assert_eq!(
            find_launcher_pod(&v, [&pod]).map(|p| p.metadata.name.clone()),
            Some(pod.metadata.name.clone())
        );
        let VmiDecision::Start(running) = decide(&v, Some(&pod), false, NOW) else {
            panic!("expected Running");
        };
        assert_eq!(vmi_phase(&running), "Running");
        assert_eq!(entries(&running, "Running"), 1);
        let last = running
            .pointer("/status/phaseTransitionTimestamps/3")
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            last,
            json!({"phase": "Running", "phaseTransitionTimestamp": NOW})
        );
        let ready = running
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .unwrap_or_default();
        // No readiness gate on this pod: Ready copied as True.
        assert_eq!(ready["status"], "True");
        assert_eq!(
            running.pointer("/status/interfaces/0/ipAddress"),
            Some(&json!("10.244.0.7"))
        );
        assert_eq!(
            running.pointer("/status/interfaces/0/name"),
            Some(&json!("default"))
        );
        // A Running VMI is not touched again.
        assert_eq!(
            decide(&running, Some(&pod), false, NOW),
            VmiDecision::Nothing
        );
    }

    #[test]
    fn phase_changes_record_virt_handlers_events() {
        assert_eq!(
            phase_change_event("Scheduled", "Running"),
            Some(("Normal", "Started", "VirtualMachineInstance started."))
        );
        assert_eq!(
            phase_change_event("Running", "Failed").map(|e| (e.0, e.2)),
            Some(("Warning", "The VirtualMachineInstance crashed."))
        );
        assert_eq!(
            phase_change_event("Running", "Succeeded").map(|e| e.2),
            Some("The VirtualMachineInstance was shut down.")
        );
        assert_eq!(phase_change_event("Failed", "Failed"), None);
        assert_eq!(phase_change_event("", "Scheduled"), None);
    }

    #[test]
    fn running_timestamp_is_not_appended_twice() {
        let mut v = vmi("Scheduled");
        if let Some(a) = v
            .pointer_mut("/status/phaseTransitionTimestamps")
            .and_then(Value::as_array_mut)
        {
            a.push(json!({"phase": "Running", "phaseTransitionTimestamp": "2026-01-01T00:00:00Z"}));
        }
        let out = running_vmi(&v, &launcher(true), NOW);
        assert_eq!(entries(&out, "Running"), 1);
        let mut status = Map::new();
        assert!(append_phase_transition(&mut status, "Failed", NOW));
        assert!(!append_phase_transition(&mut status, "Failed", "later"));
    }

    #[test]
    fn waits_for_the_launcher() {
        let v = vmi("Scheduled");
        assert_eq!(
            decide(&v, Some(&launcher(false)), false, NOW),
            VmiDecision::Nothing
        );
        assert_eq!(decide(&v, None, false, NOW), VmiDecision::Nothing);
        assert_eq!(
            decide(&vmi("Scheduling"), Some(&launcher(true)), false, NOW),
            VmiDecision::Nothing
        );
    }

    #[test]
    fn deletion_shuts_the_guest_down() {
        for phase in ["Scheduled", "Running"] {
            let mut v = vmi(phase);
            v["metadata"]["deletionTimestamp"] = json!(NOW);
            let (out, launcher_exit) = stopped(
                decide(&v, Some(&launcher(true)), false, NOW),
                "expected Succeeded",
            );
            assert_eq!(vmi_phase(&out), "Succeeded");
            assert_eq!(entries(&out, "Succeeded"), 1);
            assert_eq!(launcher_exit, None);
        }
    }

    #[test]
    fn a_terminated_launcher_fails_the_guest() {
        for phase in ["Scheduled", "Running"] {
            for pod_phase in ["Failed", "Succeeded"] {
                let mut pod = launcher(true);
                if let Some(st) = pod.status.as_mut() {
                    st.phase = Some(pod_phase.into());
                }
                let (out, launcher_exit) = stopped(
                    decide(&vmi(phase), Some(&pod), false, NOW),
                    &format!("{phase} VMI with a {pod_phase} launcher: expected Failed"),
                );
                assert_eq!(vmi_phase(&out), "Failed");
                assert_eq!(entries(&out, "Failed"), 1);
                assert_eq!(launcher_exit, None, "the pod has ended already");
                assert!(out.pointer("/status/reason").is_none());
            }
        }
    }

    /// A launcher pod being deleted: `deletionTimestamp` and `deletionGracePeriodSeconds`.
    fn deleting_launcher(grace: i64) -> Pod {
        let mut pod = launcher(true);
        pod.metadata.deletion_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(1).expect("time"),
        ));
        pod.metadata.deletion_grace_period_seconds = Some(grace);
        pod
    }

    #[test]
    fn a_deleted_launcher_shuts_a_running_guest_down() {
        // Graceful delete of a Running VMI's pod: the guest shuts down, Succeeded.
        let pod = deleting_launcher(30);
        let (out, launcher_exit) = stopped(
            decide_launcher_deleted(&vmi("Running"), [&pod], NOW).expect("a decision"),
            "expected Succeeded",
        );
        assert_eq!(vmi_phase(&out), "Succeeded");
        assert_eq!(entries(&out, "Succeeded"), 1);
        assert_eq!(launcher_exit, None, "the pod ends by its own deletion");
        // Force delete (grace 0): killed under the guest, Failed.
        let (out, _) = stopped(
            decide_launcher_deleted(&vmi("Running"), [&deleting_launcher(0)], NOW)
                .expect("a decision"),
            "expected Failed",
        );
        assert_eq!(vmi_phase(&out), "Failed");
        // Scheduled (no domain yet): the launcher is gone before the guest ran, Failed.
        let (out, _) = stopped(
            decide_launcher_deleted(&vmi("Scheduled"), [&pod], NOW).expect("a decision"),
            "expected Failed",
        );
        assert_eq!(vmi_phase(&out), "Failed");
        // Another launcher pod still running, or a VMI being deleted itself: not this rule.
        let live = launcher(true);
        assert_eq!(
            decide_launcher_deleted(&vmi("Running"), [&pod, &live], NOW),
            None
        );
        let mut deleting_vmi = vmi("Running");
        deleting_vmi["metadata"]["deletionTimestamp"] = json!(NOW);
        assert_eq!(decide_launcher_deleted(&deleting_vmi, [&pod], NOW), None);
    }

    #[test]
    fn early_failure_and_final_phases() {
        let v = vmi("Scheduled");
        let (out, launcher_exit) = stopped(
            decide(&v, Some(&launcher(true)), true, NOW),
            "expected Failed",
        );
        assert_eq!(vmi_phase(&out), "Failed");
        assert_eq!(entries(&out, "Running"), 0);
        assert_eq!(launcher_exit, Some(1));
        assert!(out.pointer("/status/reason").is_none());
        assert_eq!(
            decide(&out, Some(&launcher(true)), false, NOW),
            VmiDecision::Nothing
        );
    }

    fn hotplug_vmi(spec_volumes: Value, disks: Value, entry: Value) -> Value {
        let mut v = vmi(PHASE_RUNNING);
        v["spec"]["volumes"] = spec_volumes;
        v["spec"]["domain"]["devices"]["disks"] = disks;
        v["status"]["volumeStatus"] = json!([entry]);
        v
    }

    fn step(v: &Value) -> Value {
        match decide(v, Some(&launcher(true)), false, NOW) {
            VmiDecision::Volumes(out) => out["status"]["volumeStatus"][0].clone(),
            other => panic!("expected a volume update, got {other:?}"),
        }
    }

    /// pkg/virt-handler/vm.go:498-531: a disk whose attachment pod is ready is mounted and
    /// attached (`Ready`, target `sda`); unplugged it is unmounted; until the pod is ready
    /// nothing moves.
    #[test]
    fn hotplugged_disks_are_mounted_attached_and_unmounted() {
        let vol = json!([{"name": "hp", "persistentVolumeClaim": {"claimName": "c", "hotpluggable": true}}]);
        let disk = json!([{"name": "hp", "disk": {"bus": "scsi"}}]);
        let attached = json!({"name": "hp", "target": "", "phase": "AttachedToNode",
                              "hotplugVolume": {"attachPodName": "hp-volume-x", "attachPodUID": "u"}});
        let e = step(&hotplug_vmi(vol.clone(), disk.clone(), attached.clone()));
        assert_eq!(
            (e["phase"].as_str(), e["target"].as_str()),
            (Some("Ready"), Some("sda"))
        );
        assert_eq!(e["reason"], "VolumeReady");

        let mut not_ready = attached.clone();
        not_ready["hotplugVolume"] = json!({"attachPodName": "hp-volume-x"});
        let v = hotplug_vmi(vol, disk.clone(), not_ready);
        assert_eq!(
            decide(&v, Some(&launcher(true)), false, NOW),
            VmiDecision::Nothing
        );

        let ready = json!({"name": "hp", "target": "sda", "phase": "Ready",
                           "hotplugVolume": {"attachPodName": "hp-volume-x", "attachPodUID": "u"}});
        let e = step(&hotplug_vmi(json!([]), disk, ready));
        assert_eq!(
            (e["phase"].as_str(), e["target"].as_str()),
            (Some("UnMountedFromPod"), Some(""))
        );
    }

    /// pkg/virt-handler/vm.go:891-928: a mounted memory dump volume gets its target file and
    /// `MemoryDumpInProgress`, then `MemoryDumpCompleted` with its times; once unplugged it
    /// stays `MemoryDumpCompleted` (not a phase `canUpdateToUnmounted` moves).
    #[test]
    fn a_memory_dump_volume_is_dumped() {
        let vol = json!([{"name": "d", "memoryDump": {"claimName": "d", "hotpluggable": true}}]);
        let attached = json!({"name": "d", "target": "", "phase": "AttachedToNode",
                              "memoryDumpVolume": {"claimName": "d"},
                              "hotplugVolume": {"attachPodName": "hp-volume-x", "attachPodUID": "u"}});
        let e = step(&hotplug_vmi(vol.clone(), json!([]), attached));
        assert_eq!(e["phase"], "MemoryDumpInProgress");
        assert_eq!(
            e["memoryDumpVolume"]["targetFileName"],
            "vm-a-d-20260102-030405.memory.dump"
        );
        let e = step(&hotplug_vmi(vol, json!([]), e));
        assert_eq!(e["phase"], "MemoryDumpCompleted");
        assert_eq!(e["memoryDumpVolume"]["startTimestamp"], NOW);
        assert_eq!(e["memoryDumpVolume"]["endTimestamp"], NOW);
        let v = hotplug_vmi(json!([]), json!([]), e);
        assert_eq!(
            decide(&v, Some(&launcher(true)), false, NOW),
            VmiDecision::Nothing
        );
    }
}
