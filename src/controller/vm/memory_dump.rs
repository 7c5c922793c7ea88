//! Memory dumps, the VM controller's part (pkg/storage/memorydump/memorydump.go, called from
//! vm.go:3340-3342 in `sync` and vm.go:2483 in `updateStatus`). virt-api's `memorydump`
//! subresource writes `status.memoryDumpRequest` (`claimName`, phase `Associating`); the VM
//! controller then
//! - adds a hotpluggable `memoryDump` volume named after the claim to the VM template and to
//!   the Running VMI (the VMI controller attaches it with an attachment pod,
//!   [`crate::controller::vmi::volume_hotplug`]), and moves the request to `InProgress`;
//! - once virt-handler reports the volume `MemoryDumpCompleted` (or `MemoryDumpFailed`), moves
//!   it to `Unmounting` (`Failed`) with the dump's file name and times, writes the file name
//!   (or "Memory dump failed") into the claim's `kubevirt.io/memory-dump` annotation and takes
//!   the volume out of the VMI;
//! - once the VMI has no status for the volume any more, moves it to `Completed`;
//! - on `remove` (`Dissociating`), takes the volume out of the VMI and the template and then
//!   drops the request.

use super::live_update::VmiPatch;
use super::snapshot::PvcInfo;
use crate::api::vm::{VirtualMachine, VirtualMachineStatus};
use crate::api::vmi::{VirtualMachineInstance, Volume};
use crate::controller::common::patch::{PatchSet, path};
use serde_json::{Map, Value, json};

pub(crate) use crate::api::annotations::MEMORY_DUMP as CLAIM_ANNOTATION;
/// The annotation's value after a failed dump (memorydump.go:41).
const FAILED_VALUE: &str = "Memory dump failed";

/// `status.memoryDumpRequest`, when the VM has one.
fn request(vm: &VirtualMachine) -> Option<Map<String, Value>> {
    vm.status
        .as_ref()?
        .extra
        .field("memoryDumpRequest", |r| r.as_object().cloned())
}

/// The claim of `status.memoryDumpRequest`, for the snapshot's claims.
pub(crate) fn requested_claim(vm: &VirtualMachine) -> Option<String> {
    request(vm)
        .map(|r| field(&r, "claimName").to_string())
        .filter(|c| !c.is_empty())
}

fn field<'a>(req: &'a Map<String, Value>, key: &str) -> &'a str {
    req.get(key).and_then(Value::as_str).unwrap_or("")
}

/// `applyMemoryDumpVolumeRequestOnVMISpec` (memorydump.go:238-262): a hotpluggable
/// `memoryDump` volume named after the claim, unless a volume of that name exists.
fn add_dump_volume(volumes: &mut Option<Vec<Volume>>, claim: &str) {
    let list = volumes.get_or_insert_with(Vec::new);
    if list.iter().any(|v| v.name == claim) {
        return;
    }
    let volume: Volume = serde_json::from_value(
        json!({"name": claim, "memoryDump": {"claimName": claim, "hotpluggable": true}}),
    )
    .expect("a volume with a name deserializes");
    list.push(volume);
}

/// `RemoveMemoryDumpVolumeFromVMISpec` (memorydump.go:48-57): every volume named `claim`.
fn remove_dump_volume(volumes: &mut Option<Vec<Volume>>, claim: &str) {
    if let Some(list) = volumes.as_mut() {
        list.retain(|v| v.name != claim);
    }
}

fn has_volume(volumes: Option<&Vec<Volume>>, claim: &str) -> bool {
    volumes.is_some_and(|l| l.iter().any(|v| v.name == claim))
}

/// The claim annotation patch `patchMemoryDumpPVCAnnotation` sends (memorydump.go:264-312).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ClaimPatch {
    /// The claim, in the VM's namespace.
    pub claim: String,
    /// The RFC 6902 document.
    pub patch: Value,
    /// The value written.
    pub value: String,
}

/// What `HandleRequest` (memorydump.go:59-114) does in one sync. The VM template change is
/// made on the VM passed in (KubeVirt's `vmCopy`, persisted by the sync's final `Update`).
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Handling {
    /// The annotation patch of the dump claim, sent first; its failure is only logged
    /// (memorydump.go:306-311).
    pub claim_patch: Option<ClaimPatch>,
    /// The VMI volume patch (`generateVMIMemoryDumpVolumePatch`, memorydump.go:199-236).
    pub vmi_patch: Option<VmiPatch>,
    /// The error `HandleRequest` returns (the claim is not in the cache).
    pub error: Option<String>,
}

/// `HandleRequest` (memorydump.go:59-114) on the VM copy `vm`, its VMI and the cached claims
/// (`None`: the claim is not in the cache).
pub(crate) fn handle_request<'a>(
    vm: &mut VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    claim: impl Fn(&str) -> Option<&'a PvcInfo>,
) -> Handling {
    let mut out = Handling::default();
    let Some(req) = request(vm) else {
        return out;
    };
    let cached = claim;
    let claim = field(&req, "claimName").to_string();
    let in_vmi = vmi.is_some_and(|v| has_volume(v.spec.volumes.as_ref(), &claim));
    let template = vm.spec.template.as_mut().and_then(|t| t.spec.as_mut());
    match field(&req, "phase") {
        "Associating" => {
            let Some(vmi) = vmi.filter(|v| !v.is_deleting() && v.phase().as_str() == "Running")
            else {
                return out;
            };
            if let Some(t) = template {
                add_dump_volume(&mut t.volumes, &claim);
            }
            if !in_vmi {
                out.vmi_patch = Some(vmi_volume_patch(vmi, &claim, true));
            }
        }
        phase @ ("Unmounting" | "Failed") => {
            match cached(&claim) {
                None => {
                    out.error = Some(format!(
                        "Error when trying to update memory dump annotation, pvc {claim} not found"
                    ));
                    return out;
                }
                Some(pvc) => {
                    let value = if phase == "Failed" {
                        Some(FAILED_VALUE.to_string())
                    } else {
                        req.get("fileName")
                            .and_then(Value::as_str)
                            .map(str::to_string)
                    };
                    out.claim_patch = value.and_then(|v| claim_patch(&claim, pvc, v));
                }
            }
            if let Some(vmi) = vmi.filter(|_| in_vmi) {
                out.vmi_patch = Some(vmi_volume_patch(vmi, &claim, false));
            }
        }
        "Dissociating" => {
            if let Some(vmi) = vmi.filter(|_| in_vmi) {
                out.vmi_patch = Some(vmi_volume_patch(vmi, &claim, false));
            }
            if let Some(t) = template {
                remove_dump_volume(&mut t.volumes, &claim);
            }
        }
        _ => {}
    }
    out
}

/// The annotation patch (memorydump.go:292-304): `add` of the whole map on a claim without
/// annotations, nothing when the value is already there, else `replace` of the key.
fn claim_patch(claim: &str, pvc: &PvcInfo, value: String) -> Option<ClaimPatch> {
    let mut p = PatchSet::new();
    if !pvc.has_annotations {
        p.add(
            path(&["metadata", "annotations"]),
            &json!({ CLAIM_ANNOTATION: value }),
        );
    } else if pvc.memory_dump_annotation.as_deref() == Some(value.as_str()) {
        return None;
    } else {
        p.replace(path(&["metadata", "annotations", CLAIM_ANNOTATION]), &value);
    }
    Some(ClaimPatch {
        claim: claim.to_string(),
        patch: p.into_value(),
        value,
    })
}

/// `generateVMIMemoryDumpVolumePatch` (memorydump.go:199-236): test the VMI's volumes, then
/// replace them (`add` where it has none) with the dump volume added or removed.
fn vmi_volume_patch(vmi: &VirtualMachineInstance, claim: &str, add: bool) -> VmiPatch {
    let mut volumes = vmi.spec.volumes.clone();
    if add {
        add_dump_volume(&mut volumes, claim);
    } else {
        remove_dump_volume(&mut volumes, claim);
    }
    let volumes = volumes.unwrap_or_default();
    let mut p = PatchSet::new();
    let vol_path = path(&["spec", "volumes"]);
    p.test(vol_path.clone(), &vmi.spec.volumes);
    if vmi.spec.volumes.as_ref().is_some_and(|v| !v.is_empty()) {
        p.replace(vol_path, &volumes);
    } else {
        p.add(vol_path, &volumes);
    }
    let what = if add {
        "add the memory dump volume to the running VMI (memorydump.go:75-85)"
    } else {
        "take the memory dump volume out of the VMI so that it is unmounted (memorydump.go:90-108)"
    };
    VmiPatch {
        patch: p.into_value(),
        why: format!("memory dump to claim {claim}: {what}"),
    }
}

/// The VMI's `volumeStatus` entry for `name`.
fn volume_status(vmi: Option<&VirtualMachineInstance>, name: &str) -> Option<Value> {
    vmi?.volume_status_entries()
        .into_iter()
        .find(|e| e.get("name").and_then(Value::as_str) == Some(name))
}

/// `UpdateRequest` (memorydump.go:116-197): the request's next phase in `status`, from the VM
/// (after the sync: its template) and the VMI's volume status. Returns what changed, for the
/// explanation.
pub(crate) fn update_request(
    status: &mut VirtualMachineStatus,
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
) -> Option<String> {
    let req = status
        .extra
        .field("memoryDumpRequest", |r| r.as_object().cloned())?;
    let claim = field(&req, "claimName").to_string();
    let mut updated = req.clone();
    if req.get("remove").and_then(Value::as_bool) == Some(true) {
        updated.insert("phase".into(), json!("Dissociating"));
    }
    let in_template = has_volume(vm.template_spec().and_then(|t| t.volumes.as_ref()), &claim);
    let entry = volume_status(vmi, &claim);
    let next = match field(&req, "phase") {
        "Completed" => return None,
        "Associating" => {
            if in_template {
                updated.insert("phase".into(), json!("InProgress"));
            }
            Some(updated)
        }
        "InProgress" => {
            if let Some(e) = &entry {
                in_progress(e, &mut updated);
            }
            Some(updated)
        }
        "Unmounting" => {
            if entry.is_some() {
                return None;
            }
            updated.insert("phase".into(), json!("Completed"));
            Some(updated)
        }
        // Still unmounting or still in the template: nothing yet; else the request goes.
        "Dissociating" if entry.is_some() || in_template => return None,
        "Dissociating" => None,
        _ => Some(updated),
    };
    let before = field(&req, "phase").to_string();
    let change = match &next {
        Some(n) if field(n, "phase") == before => None,
        Some(n) => Some(format!("phase {before} -> {}", field(n, "phase"))),
        None => Some("the request is done and removed".to_string()),
    };
    match next {
        Some(n) => {
            status
                .extra
                .insert("memoryDumpRequest".into(), Value::Object(n));
        }
        None => {
            status.extra.remove("memoryDumpRequest");
        }
    }
    change
}

/// The `InProgress` case (memorydump.go:142-163): the dump volume's status carries the start
/// time, and on `MemoryDumpCompleted` / `MemoryDumpFailed` the end.
fn in_progress(entry: &Value, updated: &mut Map<String, Value>) {
    let Some(info) = entry.get("memoryDumpVolume").filter(|i| i.is_object()) else {
        return;
    };
    if let Some(start) = info.get("startTimestamp").filter(|s| !s.is_null()) {
        updated.insert("startTimestamp".into(), start.clone());
    }
    let end = info.get("endTimestamp").cloned().unwrap_or(Value::Null);
    let set_end = |updated: &mut Map<String, Value>| {
        if end.is_null() {
            updated.remove("endTimestamp");
        } else {
            updated.insert("endTimestamp".into(), end.clone());
        }
    };
    match entry.get("phase").and_then(Value::as_str) {
        Some("MemoryDumpCompleted") => {
            updated.insert("phase".into(), json!("Unmounting"));
            set_end(updated);
            let file = info.get("targetFileName").cloned().unwrap_or(json!(""));
            updated.insert("fileName".into(), file);
        }
        Some("MemoryDumpFailed") => {
            updated.insert("phase".into(), json!("Failed"));
            match entry
                .get("message")
                .filter(|m| m.as_str().is_some_and(|s| !s.is_empty()))
            {
                Some(m) => updated.insert("message".into(), m.clone()),
                None => updated.remove("message"),
            };
            set_end(updated);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    //! Cases of pkg/storage/memorydump/memorydump_test.go (values re-derived).
    use super::*;

    const CLAIM: &str = "dump-claim";
    const T: &str = "2026-12-05T10:00:00Z";

    fn dump_volume() -> Value {
        json!({"name": CLAIM, "memoryDump": {"claimName": CLAIM, "hotpluggable": true}})
    }

    fn root() -> Value {
        json!({"name": "root", "containerDisk": {"image": "img"}})
    }

    /// `createVirtualMachineWithMemoryDump` (memorydump_test.go:232-261): the template holds
    /// the dump volume except in `Dissociating`; the VMI too from `InProgress` on.
    fn objects(phase: &str) -> (VirtualMachine, VirtualMachineInstance) {
        let in_template = phase != "Dissociating";
        let in_vmi = matches!(phase, "InProgress" | "Failed" | "Unmounting");
        let mut volumes = vec![root()];
        if in_template {
            volumes.push(dump_volume());
        }
        let mut req = json!({"claimName": CLAIM, "phase": phase});
        if phase == "Unmounting" {
            req["endTimestamp"] = json!(T);
            req["fileName"] = json!("memory.dump");
        }
        let vm: VirtualMachine = serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"template": {"spec": {"domain": {"devices": {}}, "volumes": volumes}}},
            "status": {"memoryDumpRequest": req}
        }))
        .unwrap();
        let vmi_volumes = if in_vmi {
            json!([root(), dump_volume()])
        } else {
            json!([root()])
        };
        let vmi: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}, "volumes": vmi_volumes},
            "status": {"phase": "Running"}
        }))
        .unwrap();
        (vm, vmi)
    }

    fn with_volume_status(mut vmi: VirtualMachineInstance, entry: Value) -> VirtualMachineInstance {
        vmi.status.as_mut().unwrap().volume_status = Some(vec![entry].into());
        vmi
    }

    fn after_update(vm: &VirtualMachine, vmi: Option<&VirtualMachineInstance>) -> Option<Value> {
        let mut status = vm.status.clone().unwrap();
        update_request(&mut status, vm, vmi);
        status.extra.get("memoryDumpRequest").cloned()
    }

    fn names(volumes: &Value) -> Vec<&str> {
        volumes
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["name"].as_str().unwrap())
            .collect()
    }

    // memorydump_test.go:73 "should update memory dump phase to InProgress when memory dump in
    // vm volumes".
    #[test]
    fn associating_becomes_in_progress_once_the_template_has_the_volume() {
        let (vm, vmi) = objects("Associating");
        assert_eq!(
            after_update(&vm, Some(&vmi)),
            Some(json!({"claimName": CLAIM, "phase": "InProgress"}))
        );
        let (mut without, _) = objects("Dissociating");
        without.status = vm.status.clone();
        assert_eq!(
            after_update(&without, Some(&vmi)),
            Some(json!({"claimName": CLAIM, "phase": "Associating"}))
        );
    }

    // memorydump_test.go:87 "should update status to unmounting when memory dump timestamp
    // updated".
    #[test]
    fn a_completed_dump_volume_moves_the_request_to_unmounting() {
        let (vm, vmi) = objects("InProgress");
        let vmi = with_volume_status(
            vmi,
            json!({"name": CLAIM, "target": "", "phase": "MemoryDumpCompleted",
                   "memoryDumpVolume": {"claimName": CLAIM, "startTimestamp": T,
                                        "endTimestamp": T, "targetFileName": "vm-dump.memory.dump"}}),
        );
        assert_eq!(
            after_update(&vm, Some(&vmi)),
            Some(
                json!({"claimName": CLAIM, "phase": "Unmounting", "startTimestamp": T,
                        "endTimestamp": T, "fileName": "vm-dump.memory.dump"})
            )
        );
    }

    // memorydump_test.go:115 "should update status to failed when memory dump failed".
    #[test]
    fn a_failed_dump_volume_fails_the_request_with_its_message() {
        let (vm, vmi) = objects("InProgress");
        let vmi = with_volume_status(
            vmi,
            json!({"name": CLAIM, "target": "", "phase": "MemoryDumpFailed",
                   "message": "Memory dump to pvc dump-claim failed: disk full",
                   "memoryDumpVolume": {"claimName": CLAIM, "endTimestamp": T}}),
        );
        assert_eq!(
            after_update(&vm, Some(&vmi)),
            Some(
                json!({"claimName": CLAIM, "phase": "Failed", "endTimestamp": T,
                        "message": "Memory dump to pvc dump-claim failed: disk full"})
            )
        );
    }

    /// A dump still running leaves the request in `InProgress` (with the start time).
    #[test]
    fn a_running_dump_keeps_in_progress() {
        let (vm, vmi) = objects("InProgress");
        let vmi = with_volume_status(
            vmi,
            json!({"name": CLAIM, "target": "", "phase": "MemoryDumpInProgress",
                   "memoryDumpVolume": {"claimName": CLAIM, "startTimestamp": T}}),
        );
        assert_eq!(
            after_update(&vm, Some(&vmi)),
            Some(json!({"claimName": CLAIM, "phase": "InProgress", "startTimestamp": T}))
        );
    }

    // memorydump_test.go:141 "should update memory dump to completed once memory dump volume
    // unmounted"; while the VMI still has a status for it, it stays Unmounting.
    #[test]
    fn unmounting_completes_once_the_volume_status_is_gone() {
        let (vm, vmi) = objects("Unmounting");
        assert_eq!(
            after_update(&vm, Some(&vmi)),
            Some(
                json!({"claimName": CLAIM, "phase": "Completed", "endTimestamp": T,
                        "fileName": "memory.dump"})
            )
        );
        let mounted = with_volume_status(
            vmi,
            json!({"name": CLAIM, "target": "", "phase": "Detaching"}),
        );
        assert_eq!(
            after_update(&vm, Some(&mounted))
                .unwrap()
                .get("phase")
                .cloned(),
            Some(json!("Unmounting"))
        );
    }

    // memorydump_test.go:158 "should dissociate memory dump request when status is
    // Dissociating and not in vm volumes"; `remove` turns any other phase but Completed into
    // Dissociating.
    #[test]
    fn dissociating_drops_the_request_once_the_volume_is_gone() {
        let (vm, _) = objects("Dissociating");
        assert_eq!(after_update(&vm, None), None);
        let (mut vm, _) = objects("Associating");
        vm.status.as_mut().unwrap().extra["memoryDumpRequest"]["remove"] = json!(true);
        let (without_template, _) = objects("Dissociating");
        vm.spec = without_template.spec;
        assert_eq!(
            after_update(&vm, None).unwrap()["phase"],
            json!("Dissociating")
        );
        let (mut done, _) = objects("Unmounting");
        done.status.as_mut().unwrap().extra["memoryDumpRequest"]["phase"] = json!("Completed");
        done.status.as_mut().unwrap().extra["memoryDumpRequest"]["remove"] = json!(true);
        assert_eq!(
            after_update(&done, None).unwrap()["phase"],
            json!("Completed")
        );
    }

    fn claim(annotations: Option<&str>) -> PvcInfo {
        PvcInfo {
            has_annotations: annotations.is_some(),
            memory_dump_annotation: annotations.map(str::to_string),
            ..PvcInfo::default()
        }
    }

    // memorydump_test.go:168-205 "should remove memory dump volume from vmi volumes and update
    // pvc annotation": Unmounting writes the file name, Failed "Memory dump failed".
    #[test]
    fn unmounting_and_failed_annotate_the_claim_and_unplug_the_volume() {
        for (phase, value) in [("Unmounting", "memory.dump"), ("Failed", FAILED_VALUE)] {
            let (mut vm, vmi) = objects(phase);
            let pvc = claim(None);
            let h = handle_request(&mut vm, Some(&vmi), |_| Some(&pvc));
            assert_eq!(h.error, None);
            let c = h.claim_patch.expect("an annotation patch");
            assert_eq!(
                c.patch,
                json!([{"op": "add", "path": "/metadata/annotations",
                        "value": {CLAIM_ANNOTATION: value}}])
            );
            let p = h.vmi_patch.expect("a VMI patch").patch;
            assert_eq!(p[0]["op"], "test");
            assert_eq!(names(&p[0]["value"]), ["root", CLAIM]);
            assert_eq!(p[1]["op"], "replace");
            assert_eq!(names(&p[1]["value"]), ["root"]);
        }
    }

    /// memorydump.go:292-299: a claim with other annotations gets a `replace` of the key, one
    /// already carrying the value none; a claim missing from the cache is the handler's error.
    #[test]
    fn the_annotation_patch_depends_on_the_claim() {
        let (mut vm, vmi) = objects("Unmounting");
        let other = PvcInfo {
            has_annotations: true,
            ..PvcInfo::default()
        };
        let h = handle_request(&mut vm, Some(&vmi), |_| Some(&other));
        assert_eq!(
            h.claim_patch.unwrap().patch,
            json!([{"op": "replace", "path": "/metadata/annotations/kubevirt.io~1memory-dump",
                    "value": "memory.dump"}])
        );
        let done = claim(Some("memory.dump"));
        assert_eq!(
            handle_request(&mut vm, Some(&vmi), |_| Some(&done)).claim_patch,
            None
        );
        let h = handle_request(&mut vm, Some(&vmi), |_| None);
        assert_eq!(
            h.error.as_deref(),
            Some("Error when trying to update memory dump annotation, pvc dump-claim not found")
        );
        assert_eq!(h.vmi_patch, None);
    }

    // vm_test.go:3863 "should add memory dump volume and update vmi volumes": the template
    // and the running VMI get the volume; a VMI not running gets nothing.
    #[test]
    fn associating_adds_the_volume_to_the_template_and_the_running_vmi() {
        let (mut vm, mut vmi) = objects("Associating");
        vm.spec
            .template
            .as_mut()
            .unwrap()
            .spec
            .as_mut()
            .unwrap()
            .volumes = Some(vec![]);
        let h = handle_request(&mut vm, Some(&vmi), |_| None);
        let template = serde_json::to_value(vm.template_spec().unwrap()).unwrap();
        assert_eq!(template["volumes"], json!([dump_volume()]));
        let p = h.vmi_patch.expect("a VMI patch").patch;
        assert_eq!(names(&p[1]["value"]), ["root", CLAIM]);
        assert_eq!(p[1]["value"][1], dump_volume());

        vmi.status.as_mut().unwrap().phase = serde_json::from_value(json!("Scheduled")).unwrap();
        let (mut vm, _) = objects("Associating");
        let before = vm.clone();
        assert_eq!(
            handle_request(&mut vm, Some(&vmi), |_| None),
            Handling::default()
        );
        assert_eq!(vm, before);
    }

    // vm_test.go:3892 "should remove memory dump volume from vm volumes list" (no VMI).
    #[test]
    fn dissociating_takes_the_volume_out_of_the_template() {
        let (mut vm, _) = objects("Unmounting");
        vm.status.as_mut().unwrap().extra["memoryDumpRequest"]["phase"] = json!("Dissociating");
        let h = handle_request(&mut vm, None, |_| None);
        assert_eq!(h, Handling::default());
        let template = serde_json::to_value(vm.template_spec().unwrap()).unwrap();
        assert_eq!(template["volumes"], json!([root()]));
    }
}
