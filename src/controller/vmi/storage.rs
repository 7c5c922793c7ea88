//! What the VMI controller reads from PersistentVolumeClaims and DataVolumes before it creates a
//! launcher pod, as pure functions of the VMI and two cache lookups:
//!
//! - `areDataVolumesReady` (pkg/virt-controller/watch/vmi/datavolumes.go:116-141) over
//!   `VolumeReadyToAttachToNode` (pkg/storage/types/pvc.go:223-251): every non-hotplug
//!   `dataVolume` / `persistentVolumeClaim` volume needs its claim in the cache; a claim a
//!   DataVolume controls is ready once that DataVolume is `Succeeded` or `PendingPopulation`
//!   (CDI's `IsSucceededOrPendingPopulation`), any other claim is ready as it is (Pending or
//!   Bound alike); a claim whose DataVolume is not ready but in phase `WaitForFirstConsumer`
//!   (CDI's `IsWaitForFirstConsumerBeforePopulating`) counts as ready and makes the VMI wait for
//!   its first consumer: the controller then creates a temporary pod (lifecycle.go:152-156,
//!   datavolumes.go:133-136);
//! - the DataVolumes of the VMI (`ListDataVolumesFromVolumes`, pkg/storage/types/dv.go:255-292:
//!   `dataVolume` volumes by name, `persistentVolumeClaim` volumes whose claim a DataVolume
//!   controls), which decide `HasFailedDataVolumes` (dv.go:58-70) and the `DataVolumesReady`
//!   condition (`aggregateDataVolumesConditions`, datavolumes.go:143-178).
//!
//! Not modelled: the error of a claim whose controlling DataVolume is missing from the cache
//! (datavolumes.go:128-131; here such a claim is not ready).

use super::snapshot::{ClaimFacts, StorageState};
use crate::api::vmi::Volume;
use crate::api::{Condition, DataVolume, VirtualMachineInstance};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;

/// CDI's DataVolume phase `WaitForFirstConsumer`: the claim's StorageClass binds late and CDI
/// waits for a pod that uses it before populating it.
pub(crate) const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

/// `DataVolumesReady` (`VirtualMachineInstanceDataVolumesReady`, types.go).
pub(crate) const DATA_VOLUMES_READY: &str = "DataVolumesReady";
/// `VirtualMachineInstanceReasonAllDVsReady`.
pub(crate) const ALL_DVS_READY: &str = "AllDVsReady";
/// `VirtualMachineInstanceReasonNotAllDVsReady`.
pub(crate) const NOT_ALL_DVS_READY: &str = "NotAllDVsReady";

/// `PVCNameFromVirtVolume` (pvc.go:111-122) for the two kinds the readiness check reads: the
/// DataVolume's name (its claim has the same name) or the claim name.
pub(crate) fn claim_name(volume: &Volume) -> Option<&str> {
    if let Some(dv) = &volume.data_volume {
        return dv.name.as_deref();
    }
    volume
        .persistent_volume_claim
        .as_ref()?
        .claim_name
        .as_deref()
}

fn hotpluggable(volume: &Volume) -> bool {
    let source = volume
        .data_volume
        .as_ref()
        .or(volume.persistent_volume_claim.as_ref());
    source.is_some_and(|s| {
        s.extra
            .read(|m| m.get("hotpluggable").and_then(|h| h.as_bool()))
            .unwrap_or(false)
    })
}

/// The name of the DataVolume that controls `pvc` (`metav1.GetControllerOf` with kind
/// `DataVolume`).
fn controlling_data_volume(pvc: &PersistentVolumeClaim) -> Option<&str> {
    pvc.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .filter(|r| r.kind == "DataVolume")
        .map(|r| r.name.as_str())
}

fn dv_phase(dv: &DataVolume) -> &str {
    dv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// `statusOfReadyCondition` (datavolumes.go:180-187): the DataVolume's `Ready` condition status,
/// `Unknown` without one.
fn ready_condition_status(dv: &DataVolume) -> String {
    crate::controller::vm::datavolume::dv_condition(dv, "Ready")
        .map(|c| c.status)
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "Unknown".to_string())
}

/// `storagetypes.DefaultFSOverhead` (pkg/storage/types/cdi.go:36): the filesystem overhead
/// `getFilesystemOverhead` reports without exactly one CDI instance (vmi/storage.go:353-362).
pub(crate) const DEFAULT_FS_OVERHEAD: &str = "0.055";

/// What `getFilesystemOverhead` reads of CDI (vmi/storage.go:374-394): how many CDI CRs exist
/// and, when it is cached, the `status.filesystemOverhead` of the CDIConfig named `config`
/// (`{global, storageClass: {NAME: PERCENT}}`; `None` while CDI has not initialised it).
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct CdiOverhead {
    pub cdi_instances: usize,
    pub config: Option<CdiConfigOverhead>,
}

/// The CDIConfig `config` as `getFilesystemOverhead` reads it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct CdiConfigOverhead {
    /// `status.filesystemOverhead`, when set.
    pub filesystem_overhead: Option<serde_json::Value>,
}

impl CdiOverhead {
    /// The filesystem overhead of `pvc` (vmi/storage.go:374-394, pkg/storage/types/cdi.go:
    /// 47-62): the default 5.5 % unless exactly one CDI exists; then `"0"` for a Block claim,
    /// the claim's StorageClass's entry, else `global`. `Err` (KubeVirt's sync error) when CDI
    /// exists but its CDIConfig is missing or not initialised.
    pub(crate) fn for_claim(&self, pvc: &PersistentVolumeClaim) -> Result<String, String> {
        if self.cdi_instances != 1 {
            return Ok(DEFAULT_FS_OVERHEAD.to_string());
        }
        let Some(config) = &self.config else {
            return Err("Failed to find CDIConfig but CDI exists: <nil>".to_string());
        };
        let spec = pvc.spec.as_ref();
        if spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block") {
            return Ok("0".to_string());
        }
        let Some(overhead) = &config.filesystem_overhead else {
            return Err("CDI config not initialized".to_string());
        };
        let percent =
            |v: Option<&serde_json::Value>| v.and_then(|p| p.as_str()).unwrap_or("").to_string();
        let global = || percent(overhead.get("global"));
        Ok(match spec.and_then(|s| s.storage_class_name.as_deref()) {
            None => global(),
            Some(class) => match overhead.get("storageClass").and_then(|m| m.get(class)) {
                Some(v) => percent(Some(v)),
                None => global(),
            },
        })
    }
}

/// The claim of a `memoryDump` volume (`PVCNameFromVirtVolume`, pvc.go:117-119).
fn memory_dump_claim(volume: &Volume) -> Option<String> {
    if !volume.extra.may_have_key("memoryDump") {
        return None;
    }
    volume.extra.read(|m| {
        m.get("memoryDump")?
            .get("claimName")?
            .as_str()
            .map(str::to_string)
    })
}

/// `PersistentVolumeClaimInfo` of a claim as `processPVCInfo` fills it (vmi/storage.go:193-228):
/// its name, `spec.accessModes`, `spec.volumeMode`, `status.capacity`,
/// `spec.resources.requests`, `preallocated` (`IsPreallocated`, pvc.go:99-109) and the
/// filesystem overhead ([`CdiOverhead::for_claim`]).
pub(crate) fn claim_info(pvc: &PersistentVolumeClaim, overhead: &str) -> serde_json::Value {
    use serde_json::{Map, Value, json};
    let mut info = Map::new();
    let spec = pvc.spec.as_ref();
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v.filter(|v| match v {
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            Value::String(s) => !s.is_empty(),
            _ => true,
        }) {
            info.insert(k.to_string(), v);
        }
    };
    put("claimName", pvc.metadata.name.clone().map(Value::String));
    put(
        "accessModes",
        spec.and_then(|s| s.access_modes.as_ref()).map(|m| json!(m)),
    );
    put(
        "volumeMode",
        spec.and_then(|s| s.volume_mode.clone()).map(Value::String),
    );
    put(
        "capacity",
        pvc.status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .map(|c| json!(c)),
    );
    put(
        "requests",
        spec.and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .map(|r| json!(r)),
    );
    let preallocated = pvc.metadata.annotations.iter().flatten().any(|(k, v)| {
        (k.contains("/storage.preallocation") || k.contains("/storage.thick-provisioned"))
            && v == "true"
    });
    put("preallocated", preallocated.then_some(Value::Bool(true)));
    put("filesystemOverhead", Some(json!(overhead)));
    Value::Object(info)
}

/// `updateVolumeStatus` (vmi/storage.go:231-340) for the modelled volumes: one entry per spec
/// volume, sorted by name, each the VMI's existing entry of that name (what virt-handler wrote
/// is kept) or a new `{name, target: ""}` (`target` has no omitempty), with
/// `persistentVolumeClaimInfo` replaced for `persistentVolumeClaim`, `dataVolume` and
/// `memoryDump` volumes whose claim is in `claims` (left as it was otherwise), and
/// `memoryDumpVolume.claimName` (the volume's name, as KubeVirt writes it) added to a memory
/// dump volume that has none. Entries of volumes gone from the spec are dropped (KubeVirt keeps
/// them while a hotplug attachment pod exists; hotplug is not modelled, nor are utility volumes
/// and the backend-storage entry). `None` for no volumes (the field is omitempty).
pub(crate) fn volume_status(
    vmi: &VirtualMachineInstance,
    claims: &std::collections::BTreeMap<String, serde_json::Value>,
) -> Option<Vec<serde_json::Value>> {
    use serde_json::{Value, json};
    let old = vmi.volume_status_entries();
    let mut out: Vec<Value> = Vec::new();
    for volume in vmi.spec.volumes.iter().flatten() {
        let mut entry = old
            .iter()
            .find(|e| e.get("name").and_then(|n| n.as_str()) == Some(volume.name.as_str()))
            .cloned()
            .unwrap_or_else(|| json!({"name": volume.name, "target": ""}));
        let dump_claim = memory_dump_claim(volume);
        if dump_claim.is_some() && entry.get("memoryDumpVolume").is_none() {
            entry["memoryDumpVolume"] = json!({"claimName": volume.name});
        }
        let claim = claim_name(volume).map(str::to_string).or(dump_claim);
        if let Some(info) = claim.and_then(|c| claims.get(&c)) {
            entry["persistentVolumeClaimInfo"] = info.clone();
        }
        out.push(entry);
    }
    out.sort_by(|a, b| {
        let name = |v: &Value| {
            v.get("name")
                .and_then(|n| n.as_str())
                .unwrap_or("")
                .to_string()
        };
        name(a).cmp(&name(b))
    });
    (!out.is_empty()).then_some(out)
}

/// What hotplug reads of a claim ([`ClaimFacts`]).
fn claim_facts(
    pvc: &PersistentVolumeClaim,
    data_volume: impl Fn(&str) -> Option<DataVolume>,
) -> ClaimFacts {
    ClaimFacts {
        uid: pvc.metadata.uid.clone().unwrap_or_default(),
        block: pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref()) == Some("Block"),
        phase: pvc
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default(),
        populated: controlling_data_volume(pvc).is_none_or(|owner| {
            data_volume(owner)
                .is_some_and(|dv| matches!(dv_phase(&dv), "Succeeded" | "PendingPopulation"))
        }),
        wffc: controlling_data_volume(pvc).is_some_and(|owner| {
            data_volume(owner).is_some_and(|dv| dv_phase(&dv) == WAIT_FOR_FIRST_CONSUMER)
        }),
    }
}

/// The storage facts of `vmi` from the caches: `pvc` and `data_volume` look an object of the
/// VMI's namespace up by name.
pub(crate) fn storage_state(
    vmi: &VirtualMachineInstance,
    pvc: impl Fn(&str) -> Option<PersistentVolumeClaim>,
    data_volume: impl Fn(&str) -> Option<DataVolume>,
    cdi: &CdiOverhead,
) -> StorageState {
    let mut state = StorageState::default();
    // A claim whose overhead cannot be read keeps the info it had: KubeVirt's sync fails there
    // and writes nothing (vmi/storage.go:209-213); that failure is not modelled.
    let info = |p: &PersistentVolumeClaim| cdi.for_claim(p).ok().map(|o| claim_info(p, &o));
    let mut dvs: Vec<DataVolume> = Vec::new();
    for volume in vmi.spec.volumes.iter().flatten() {
        if let Some(dump) = memory_dump_claim(volume)
            && let Some(p) = pvc(&dump)
        {
            // A hotplug volume: its attachment pod and volume status read the claim too
            // (`GetHotplugVolumes` includes memoryDump volumes, pkg/storage/types/volume.go:77-106).
            state
                .claim_facts
                .insert(dump.clone(), claim_facts(&p, &data_volume));
            if let Some(i) = info(&p) {
                state.claims.insert(dump, i);
            }
        }
        let Some(claim) = claim_name(volume) else {
            continue;
        };
        let claim_obj = pvc(claim);
        if let Some(p) = &claim_obj {
            if let Some(i) = info(p) {
                state.claims.insert(claim.to_string(), i);
            }
            state
                .claim_facts
                .insert(claim.to_string(), claim_facts(p, &data_volume));
        }
        // ListDataVolumesFromVolumes (dv.go:255-292).
        let dv_name = if volume.data_volume.is_some() {
            Some(claim.to_string())
        } else {
            claim_obj
                .as_ref()
                .and_then(controlling_data_volume)
                .map(str::to_string)
        };
        if let Some(dv) = dv_name.as_deref().and_then(&data_volume) {
            dvs.push(dv);
        }
        if hotpluggable(volume) {
            continue;
        }
        // VolumeReadyToAttachToNode (pvc.go:223-251); the first missing claim ends the check
        // (datavolumes.go:120-126).
        let Some(claim_obj) = claim_obj else {
            if state.missing_pvc.is_none() {
                state.missing_pvc = Some(claim.to_string());
                state.volumes_ready = false;
            }
            continue;
        };
        if state.missing_pvc.is_some() {
            continue;
        }
        if let Some(owner) = controlling_data_volume(&claim_obj) {
            let phase = data_volume(owner).map(|dv| dv_phase(&dv).to_string());
            let ready = matches!(phase.as_deref(), Some("Succeeded" | "PendingPopulation"));
            // pvc.go:238-246: only a claim that is not ready can wait for its first consumer;
            // datavolumes.go:133-136: such a volume does not hold the pod back.
            let wffc = !ready && phase.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER);
            state.wffc |= wffc;
            state.volumes_ready &= ready || wffc;
        }
    }
    state.has_failed_data_volume = dvs.iter().any(|dv| dv_phase(dv) == "Failed");
    // `HasWFFCDataVolumes` (dv.go:49-56) over every DataVolume of the VMI, hotplugged ones
    // too, and only without a failed one (lifecycle.go:259-262).
    state.has_wffc_data_volume = !state.has_failed_data_volume
        && dvs.iter().any(|dv| dv_phase(dv) == WAIT_FOR_FIRST_CONSUMER);
    state.data_volumes_ready = aggregate_data_volumes_ready(&dvs);
    state
}

/// `aggregateDataVolumesConditions` (datavolumes.go:143-178): no condition without DataVolumes;
/// `True`/`AllDVsReady` when every one is `Ready=True`; otherwise `NotAllDVsReady`, `False`
/// if one is `Ready=False`, else `Unknown`.
pub(crate) fn aggregate_data_volumes_ready(dvs: &[DataVolume]) -> Option<Condition> {
    if dvs.is_empty() {
        return None;
    }
    let mut status = "True".to_string();
    let mut reason = ALL_DVS_READY;
    for dv in dvs {
        let s = ready_condition_status(dv);
        if s != "True" {
            reason = NOT_ALL_DVS_READY;
            if s == "False" || status == "True" {
                status = s;
            }
        }
    }
    let message = if status == "True" {
        "All of the VMI's DVs are bound and ready"
    } else {
        "Not all of the VMI's DVs are ready"
    };
    Some(Condition {
        type_: DATA_VOLUMES_READY.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(volumes: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"domain": {}, "volumes": volumes}
        }))
        .expect("VMI")
    }

    fn pvc(name: &str, phase: &str, dv_owner: Option<&str>) -> PersistentVolumeClaim {
        let owners = dv_owner.map(|o| {
            json!([{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                    "name": o, "uid": "dv-uid", "controller": true}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "ownerReferences": owners},
            "status": {"phase": phase}
        }))
        .expect("PVC")
    }

    fn dv(name: &str, phase: &str, ready: Option<&str>) -> DataVolume {
        let conditions = ready.map(|s| json!([{"type": "Ready", "status": s}]));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {},
            "status": {"phase": phase, "conditions": conditions}
        }))
        .expect("DV")
    }

    fn lookup<T: Clone>(objs: Vec<(&str, T)>) -> impl Fn(&str) -> Option<T> {
        move |n| objs.iter().find(|(k, _)| *k == n).map(|(_, o)| o.clone())
    }

    /// datavolumes.go:120-126: a claim missing from the cache is `PvcNotFoundError`, whether
    /// the volume names the claim or a DataVolume.
    #[test]
    fn a_missing_claim_is_named() {
        for volumes in [
            json!([{"name": "d", "persistentVolumeClaim": {"claimName": "gone"}}]),
            json!([{"name": "d", "dataVolume": {"name": "gone"}}]),
        ] {
            let s = storage_state(
                &vmi(volumes.clone()),
                lookup::<PersistentVolumeClaim>(vec![]),
                lookup(vec![("gone", dv("gone", "Succeeded", Some("True")))]),
                &CdiOverhead::default(),
            );
            assert_eq!(s.missing_pvc.as_deref(), Some("gone"), "{volumes}");
            assert!(!s.volumes_ready);
        }
    }

    /// A memory dump volume is a hotplug volume (`GetHotplugVolumes`, volume.go:77-106): its
    /// claim's facts are there for the attachment pod, and it never holds the VMI back.
    #[test]
    fn a_memory_dump_claim_has_hotplug_facts() {
        let v = vmi(json!([{"name": "c", "memoryDump": {"claimName": "c", "hotpluggable": true}}]));
        let s = storage_state(
            &v,
            lookup(vec![("c", claim(None, None))]),
            lookup::<DataVolume>(vec![]),
            &CdiOverhead::default(),
        );
        assert!(s.claim_facts.get("c").is_some_and(|f| f.populated));
        assert!(s.claims.contains_key("c"));
        assert!(s.volumes_ready && s.missing_pvc.is_none());
    }

    /// pvc.go:233-235 with CDI's IsSucceededOrPendingPopulation: a claim no DataVolume controls
    /// is ready whatever its phase; one a DataVolume controls waits for that DataVolume.
    #[test]
    fn a_plain_claim_is_ready_even_unbound_and_a_dv_claim_waits_for_its_import() {
        let v = vmi(json!([
            {"name": "a", "persistentVolumeClaim": {"claimName": "plain"}},
            {"name": "b", "dataVolume": {"name": "imported"}}
        ]));
        let pvcs = || {
            lookup(vec![
                ("plain", pvc("plain", "Pending", None)),
                ("imported", pvc("imported", "Bound", Some("imported"))),
            ])
        };
        for (phase, ready) in [
            ("ImportInProgress", false),
            ("Succeeded", true),
            ("PendingPopulation", true),
            ("Failed", false),
        ] {
            let s = storage_state(
                &v,
                pvcs(),
                lookup(vec![("imported", dv("imported", phase, None))]),
                &CdiOverhead::default(),
            );
            assert_eq!(s.missing_pvc, None);
            assert_eq!(s.volumes_ready, ready, "{phase}");
            assert_eq!(s.has_failed_data_volume, phase == "Failed", "{phase}");
        }
    }

    /// pvc.go:238-246 with CDI's IsWaitForFirstConsumerBeforePopulating, datavolumes.go:133-136:
    /// a DataVolume waiting for its first consumer does not hold the pod back but marks the
    /// VMI as WaitForFirstConsumer; a plain claim never does, whatever its phase.
    #[test]
    fn a_data_volume_waiting_for_its_first_consumer_lets_the_temporary_pod_go() {
        let v = vmi(json!([
            {"name": "a", "persistentVolumeClaim": {"claimName": "plain"}},
            {"name": "b", "dataVolume": {"name": "late"}}
        ]));
        let pvcs = || {
            lookup(vec![
                ("plain", pvc("plain", "Pending", None)),
                ("late", pvc("late", "Pending", Some("late"))),
            ])
        };
        // (phase of `late`, volumes ready, wffc, has a WFFC DataVolume)
        for (phase, ready, wffc) in [
            ("WaitForFirstConsumer", true, true),
            ("ImportScheduled", false, false),
            ("Succeeded", true, false),
            ("Failed", false, false),
        ] {
            let s = storage_state(
                &v,
                pvcs(),
                lookup(vec![("late", dv("late", phase, None))]),
                &CdiOverhead::default(),
            );
            assert_eq!((s.volumes_ready, s.wffc), (ready, wffc), "{phase}");
            assert_eq!(s.has_wffc_data_volume, wffc, "{phase}");
        }
    }

    /// lifecycle.go:259-262 and dv.go:49-56: a hotplugged DataVolume waiting for its first
    /// consumer counts for `Provisioning` (not for the temporary pod), and a failed DataVolume
    /// cancels it.
    #[test]
    fn a_hotplugged_wffc_data_volume_counts_for_provisioning_unless_one_failed() {
        let v = vmi(json!([
            {"name": "h", "dataVolume": {"name": "hp", "hotpluggable": true}},
            {"name": "b", "dataVolume": {"name": "boot"}}
        ]));
        let pvcs = || {
            lookup(vec![
                ("hp", pvc("hp", "Pending", Some("hp"))),
                ("boot", pvc("boot", "Bound", Some("boot"))),
            ])
        };
        for (boot, provisioning) in [("Succeeded", true), ("Failed", false)] {
            let s = storage_state(
                &v,
                pvcs(),
                lookup(vec![
                    ("hp", dv("hp", "WaitForFirstConsumer", None)),
                    ("boot", dv("boot", boot, None)),
                ]),
                &CdiOverhead::default(),
            );
            assert!(!s.wffc, "a hotplug volume never asks for the temporary pod");
            assert!(
                s.claim_facts["hp"].wffc,
                "it gets a trigger pod (volume-hotplug.go:197)"
            );
            assert!(!s.claim_facts["boot"].wffc);
            assert_eq!(
                s.has_wffc_data_volume, provisioning,
                "boot DataVolume {boot}"
            );
        }
    }

    /// datavolumes.go:118-119: hotpluggable volumes are not checked.
    #[test]
    fn hotpluggable_volumes_do_not_hold_the_start() {
        let v = vmi(json!([
            {"name": "h", "persistentVolumeClaim": {"claimName": "later", "hotpluggable": true}}
        ]));
        let s = storage_state(
            &v,
            lookup::<PersistentVolumeClaim>(vec![]),
            lookup(vec![]),
            &CdiOverhead::default(),
        );
        assert_eq!(s.missing_pvc, None);
        assert!(s.volumes_ready);
    }

    /// dv.go:277-292: a `persistentVolumeClaim` volume counts its claim's DataVolume.
    #[test]
    fn a_claim_volume_counts_the_data_volume_that_controls_it() {
        let v = vmi(json!([{"name": "a", "persistentVolumeClaim": {"claimName": "c"}}]));
        let s = storage_state(
            &v,
            lookup(vec![("c", pvc("c", "Bound", Some("c-dv")))]),
            lookup(vec![("c-dv", dv("c-dv", "Failed", Some("False")))]),
            &CdiOverhead::default(),
        );
        assert!(s.has_failed_data_volume);
        let cond = s.data_volumes_ready.expect("condition");
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_deref()),
            ("False", Some(NOT_ALL_DVS_READY))
        );
    }

    /// datavolumes.go:143-178: the aggregate over every DataVolume's Ready condition.
    #[test]
    fn data_volumes_ready_aggregates_the_ready_conditions() {
        let cond = |dvs: &[DataVolume]| {
            aggregate_data_volumes_ready(dvs).map(|c| {
                (
                    c.status.to_string(),
                    c.reason.unwrap_or_default().to_string(),
                    c.message.unwrap_or_default().to_string(),
                )
            })
        };
        assert_eq!(cond(&[]), None);
        let ready = dv("a", "Succeeded", Some("True"));
        let unknown = dv("b", "ImportInProgress", None);
        let failed = dv("c", "Failed", Some("False"));
        let all = "All of the VMI's DVs are bound and ready".to_string();
        let not_all = "Not all of the VMI's DVs are ready".to_string();
        assert_eq!(
            cond(std::slice::from_ref(&ready)),
            Some(("True".into(), ALL_DVS_READY.into(), all))
        );
        assert_eq!(
            cond(&[ready.clone(), unknown.clone()]),
            Some(("Unknown".into(), NOT_ALL_DVS_READY.into(), not_all.clone()))
        );
        assert_eq!(
            cond(&[failed, unknown, ready]),
            Some(("False".into(), NOT_ALL_DVS_READY.into(), not_all))
        );
    }

    /// vmi/storage.go:193-228: the claim's modes, sizes and the overhead given.
    #[test]
    fn claim_info_reads_the_claim_as_process_pvc_info_does() {
        let mut p: PersistentVolumeClaim = serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns",
                         "annotations": {"cdi.kubevirt.io/storage.preallocation": "true"}},
            "spec": {"accessModes": ["ReadWriteMany"], "volumeMode": "Block",
                     "resources": {"requests": {"storage": "2Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "3Gi"}}
        }))
        .expect("PVC");
        assert_eq!(
            claim_info(&p, DEFAULT_FS_OVERHEAD),
            json!({"claimName": "c", "accessModes": ["ReadWriteMany"], "volumeMode": "Block",
                   "capacity": {"storage": "3Gi"}, "requests": {"storage": "2Gi"},
                   "preallocated": true, "filesystemOverhead": "0.055"})
        );
        // Pending, no volume mode, not preallocated: those fields are omitted (omitempty).
        p.metadata.annotations = None;
        p.spec.as_mut().expect("spec").volume_mode = None;
        p.status = None;
        assert_eq!(
            claim_info(&p, "0.1"),
            json!({"claimName": "c", "accessModes": ["ReadWriteMany"],
                   "requests": {"storage": "2Gi"}, "filesystemOverhead": "0.1"})
        );
    }

    /// vmi/storage.go:231-340: every spec volume, sorted by name; existing entries keep what
    /// virt-handler wrote; claims get their info; a memory dump its claim; gone volumes go.
    #[test]
    fn volume_status_has_an_entry_per_volume_sorted_by_name() {
        let mut v = vmi(json!([
            {"name": "root", "containerDisk": {"image": "img"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "c"}},
            {"name": "dump", "memoryDump": {"claimName": "d"}},
            {"name": "absent", "dataVolume": {"name": "nowhere"}}
        ]));
        v.status = Some(
            serde_json::from_value(json!({"volumeStatus": [
                {"name": "root", "target": "vda", "phase": "Ready"},
                {"name": "removed", "target": "vdz"}
            ]}))
            .expect("status"),
        );
        let claims = std::collections::BTreeMap::from([
            ("c".to_string(), json!({"claimName": "c"})),
            ("d".to_string(), json!({"claimName": "d"})),
        ]);
        assert_eq!(
            volume_status(&v, &claims),
            Some(vec![
                json!({"name": "absent", "target": ""}),
                json!({"name": "data", "target": "", "persistentVolumeClaimInfo": {"claimName": "c"}}),
                json!({"name": "dump", "target": "", "memoryDumpVolume": {"claimName": "dump"},
                       "persistentVolumeClaimInfo": {"claimName": "d"}}),
                json!({"name": "root", "target": "vda", "phase": "Ready"}),
            ])
        );
        assert_eq!(volume_status(&vmi(json!([])), &claims), None);
    }

    fn claim(mode: Option<&str>, class: Option<&str>) -> PersistentVolumeClaim {
        let mut spec = json!({"accessModes": ["ReadWriteOnce"]});
        if let Some(m) = mode {
            spec["volumeMode"] = json!(m);
        }
        if let Some(c) = class {
            spec["storageClassName"] = json!(c);
        }
        serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": spec})).expect("PVC")
    }

    /// `getFilesystemOverhead` (vmi/storage.go:374-394) and `GetFilesystemOverhead`
    /// (pkg/storage/types/cdi.go:47-62), cases as storage_test.go and cdi_test.go draw them: no
    /// or several CDIs → the default; one CDI → Block "0", the class's entry, else `global`;
    /// CDI without an initialised CDIConfig → the error.
    #[test]
    fn filesystem_overhead_comes_from_cdis_config() {
        let fs = claim(Some("Filesystem"), Some("fast"));
        let config = |overhead: Option<serde_json::Value>| {
            Some(CdiConfigOverhead {
                filesystem_overhead: overhead,
            })
        };
        let overhead = json!({"global": "0.08", "storageClass": {"fast": "0.12"}});
        let one = |config| CdiOverhead {
            cdi_instances: 1,
            config,
        };
        assert_eq!(CdiOverhead::default().for_claim(&fs), Ok("0.055".into()));
        let two = CdiOverhead {
            cdi_instances: 2,
            config: config(Some(overhead.clone())),
        };
        assert_eq!(two.for_claim(&fs), Ok("0.055".into()));
        let cdi = one(config(Some(overhead)));
        assert_eq!(cdi.for_claim(&fs), Ok("0.12".into()));
        assert_eq!(cdi.for_claim(&claim(None, Some("slow"))), Ok("0.08".into()));
        assert_eq!(cdi.for_claim(&claim(None, None)), Ok("0.08".into()));
        assert_eq!(
            cdi.for_claim(&claim(Some("Block"), Some("fast"))),
            Ok("0".into())
        );
        assert_eq!(
            one(config(None)).for_claim(&fs),
            Err("CDI config not initialized".into())
        );
        assert!(one(None).for_claim(&fs).is_err());
    }
}
