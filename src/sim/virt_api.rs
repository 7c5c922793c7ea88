//! virt-api's VMI volume subresources, `PUT /apis/subresources.kubevirt.io/v1/namespaces/NS/
//! virtualmachineinstances/NAME/{addvolume,removevolume}` (pkg/virt-api/rest/volumes.go:54-244),
//! which KubeVirt's VM controller calls for the legacy hotplug requests in a VM's
//! `status.volumeRequests` (vm.go:808-847). Served only with admission on (a cluster with
//! virt-api). The checks are virt-api's, in its order; the VMI spec change is one atomic update,
//! as its `test` + `replace` JSON patch is.

use serde_json::Value;

use super::status::ApiError;
use super::store::{Store, Sub};
use crate::api::vm::{AddVolumeOptions, RemoveVolumeOptions, VolumeRequest};
use crate::api::vmi::{VirtualMachineInstanceSpec, Volume};
use crate::config::ClusterSettings;
use crate::controller::vm::volume_requests::apply_on_spec;

/// `hotplugVolumeNotEnabledError` (volumes.go:40).
const NOT_ENABLED: &str =
    "Enable DeclarativeHotplugVolumes or HotplugVolumes feature gate to use this API.";
/// `vmiNotRunning` (subresource.go:54).
const NOT_RUNNING: &str = "VMI is not running";

/// The verbs served, `addvolume` and `removevolume`.
pub(crate) fn serves(verb: &str) -> bool {
    matches!(verb, "addvolume" | "removevolume")
}

/// The feature gates of the cluster's KubeVirt CR (the first one; defaults without one).
fn settings(store: &Store) -> ClusterSettings {
    let reg = store.registry();
    let Some(res) = reg.find("kubevirt.io", "v1", "kubevirts") else {
        return ClusterSettings::default();
    };
    let filter = super::selector::Filter::default();
    store
        .list(reg.storage_id(res), None, &filter, 1, None)
        .ok()
        .and_then(|page| page.items.into_iter().next())
        .and_then(|cr| ClusterSettings::from_kubevirt_cr(&cr).ok())
        .unwrap_or_default()
}

fn vmi_conflict(name: &str, why: &str) -> ApiError {
    ApiError::conflict_raw("kubevirt.io", "virtualmachineinstance", name, why)
}

/// The request body decoded and checked as `addVolumeRequestHandler` /
/// `removeVolumeRequestHandler` do (volumes.go:71-132, 134-178).
fn request(verb: &str, body: &[u8]) -> Result<VolumeRequest, ApiError> {
    let decode_error = |e: serde_json::Error| ApiError::bad_request(format!("{e}"));
    if verb == "addvolume" {
        // virt-api names the disk after the volume (volumes.go:102) before anything reads it.
        let mut raw: Value = serde_json::from_slice(body).map_err(decode_error)?;
        if let (Some(name), Some(disk)) = (
            raw.get("name").cloned(),
            raw.get_mut("disk").and_then(Value::as_object_mut),
        ) {
            disk.insert("name".into(), name);
        }
        let mut opts: AddVolumeOptions = serde_json::from_value(raw).map_err(decode_error)?;
        if opts.name.is_empty() {
            return Err(ApiError::bad_request(
                "AddVolumeOptions requires name to be set",
            ));
        }
        let Some(disk) = opts.disk.as_mut() else {
            return Err(ApiError::bad_request(
                "AddVolumeOptions requires disk to not be nil",
            ));
        };
        disk.name = opts.name.clone();
        if opts.volume_source.is_none() {
            return Err(ApiError::bad_request(
                "AddVolumeOptions requires VolumeSource to not be nil",
            ));
        }
        Ok(VolumeRequest {
            add_volume_options: Some(opts),
            ..Default::default()
        })
    } else {
        let opts: RemoveVolumeOptions = serde_json::from_slice(body).map_err(decode_error)?;
        if opts.name.is_empty() {
            return Err(ApiError::bad_request(
                "RemoveVolumeOptions requires name to be set",
            ));
        }
        Ok(VolumeRequest {
            remove_volume_options: Some(opts),
            ..Default::default()
        })
    }
}

fn claim_of(v: &Volume) -> Option<&str> {
    v.data_volume
        .as_ref()
        .and_then(|s| s.name.as_deref())
        .or_else(|| {
            v.persistent_volume_claim
                .as_ref()
                .and_then(|s| s.claim_name.as_deref())
        })
}

fn is_hotpluggable(v: &Volume) -> bool {
    [&v.data_volume, &v.persistent_volume_claim]
        .into_iter()
        .flatten()
        .any(|s| {
            s.extra
                .read(|m| m.get("hotpluggable") == Some(&Value::Bool(true)))
        })
}

/// `verifyVolumeOption` (volumes.go:282-309).
fn verify(volumes: &[Volume], request: &VolumeRequest) -> Result<(), String> {
    if let Some(add) = &request.add_volume_options {
        let source = add
            .volume_source
            .as_ref()
            .and_then(|s| {
                s.data_volume
                    .as_ref()
                    .and_then(|d| d.name.clone())
                    .or_else(|| {
                        s.persistent_volume_claim
                            .as_ref()
                            .and_then(|c| c.claim_name.clone())
                    })
            })
            .unwrap_or_default();
        for v in volumes {
            if v.name == add.name {
                return Err(format!(
                    "Unable to add volume [{}] because volume with that name already exists",
                    add.name
                ));
            }
            if claim_of(v) == Some(source.as_str()) {
                return Err(format!(
                    "Unable to add volume source [{source}] because it already exists"
                ));
            }
        }
        return Ok(());
    }
    let Some(remove) = &request.remove_volume_options else {
        return Ok(());
    };
    match volumes
        .iter()
        .find(|v| v.name == remove.name || claim_of(v) == Some(remove.name.as_str()))
    {
        Some(v) if !is_hotpluggable(v) => Err(format!(
            "Unable to remove volume [{}] because it is not hotpluggable",
            v.name
        )),
        Some(_) => Ok(()),
        None => Err(format!(
            "Unable to remove volume [{}] because it does not exist",
            remove.name
        )),
    }
}

/// `ownedByVirtualMachine` (volumes.go:454-461).
fn owned_by_vm(vmi: &Value) -> bool {
    vmi.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|r| {
            r["controller"] == Value::Bool(true)
                && r["kind"] == "VirtualMachine"
                && r["apiVersion"] == "kubevirt.io/v1"
        })
}

/// `getDryRunOption` (volumes.go:262-271): the request's `dryRun` is `["All"]`.
fn dry_run(request: &VolumeRequest) -> bool {
    let extra = match (&request.add_volume_options, &request.remove_volume_options) {
        (Some(a), _) => &a.extra,
        (None, Some(r)) => &r.extra,
        (None, None) => return false,
    };
    extra.read(|m| {
        m.get("dryRun")
            .and_then(|d| d.get(0))
            .and_then(Value::as_str)
            == Some("All")
    })
}

/// `vmiVolumePatch`'s checks on the stored VMI `cur` (volumes.go:214-231), then the request
/// applied to its spec: the VMI as virt-api's patch leaves it.
fn patched(
    cur: &Value,
    ns: &str,
    name: &str,
    legacy_gate: bool,
    request: &VolumeRequest,
) -> Result<Value, ApiError> {
    if owned_by_vm(cur) && !legacy_gate {
        return Err(ApiError::bad_request(format!(
            "VMI {ns}/{name} is owned by a VM"
        )));
    }
    if cur.pointer("/status/phase").and_then(Value::as_str) != Some("Running") {
        return Err(vmi_conflict(name, NOT_RUNNING));
    }
    let spec_value = cur.get("spec").cloned().unwrap_or(Value::Null);
    let mut spec: VirtualMachineInstanceSpec = serde_json::from_value(spec_value)
        .map_err(|e| ApiError::internal(format!("VMI {ns}/{name}: field spec: {e}")))?;
    verify(spec.volumes.as_deref().unwrap_or(&[]), request)
        .map_err(|why| vmi_conflict(name, &why))?;
    apply_on_spec(&mut spec, request);
    let mut new = cur.clone();
    let encode = |e: serde_json::Error| ApiError::internal(format!("VMI {ns}/{name}: {e}"));
    new["spec"]["volumes"] = serde_json::to_value(&spec.volumes).map_err(encode)?;
    new["spec"]["domain"]["devices"]["disks"] =
        serde_json::to_value(&spec.domain.devices.disks).map_err(encode)?;
    Ok(new)
}

/// Serve `verb` on VMI `ns/name`: virt-api's checks, then the VMI spec's volumes and disks
/// replaced with the request applied (`vmiVolumePatch`, volumes.go:214-244), unless the request
/// is a dry run. 202 on success.
pub(crate) fn vmi_volume(
    store: &Store,
    res: super::resources::ResId,
    ns: &str,
    name: &str,
    verb: &str,
    body: &[u8],
) -> Result<(), ApiError> {
    let settings = settings(store);
    let legacy_gate = settings.gate_enabled("HotplugVolumes", false);
    if !legacy_gate && !settings.gate_enabled("DeclarativeHotplugVolumes", true) {
        return Err(ApiError::bad_request(NOT_ENABLED));
    }
    let request = request(verb, body)?;
    let vmi_not_found = |e: ApiError| {
        if e.code == 404 {
            ApiError::not_found_raw("kubevirt.io", "virtualmachineinstance", name)
        } else {
            e
        }
    };
    if dry_run(&request) {
        let cur = store.get(res, ns, name).map_err(vmi_not_found)?;
        return patched(&cur, ns, name, legacy_gate, &request).map(drop);
    }
    store
        .mutate(res, ns, name, Sub::Main, false, true, |cur| {
            patched(cur, ns, name, legacy_gate, &request)
        })
        .map_err(vmi_not_found)
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn running(volumes: Value) -> Value {
        json!({"metadata": {"name": "v", "namespace": "ns"}, "status": {"phase": "Running"},
            "spec": {"domain": {"devices": {"disks": []}}, "volumes": volumes}})
    }

    fn add(body: Value) -> VolumeRequest {
        request("addvolume", body.to_string().as_bytes()).unwrap()
    }

    /// volumes_test.go's add cases, re-derived: the disk is named after the volume, the claim
    /// made hotpluggable; a name or a claim already there is a conflict.
    #[test]
    fn an_add_is_checked_then_applied() {
        let r = add(json!({"name": "hp", "disk": {"disk": {"bus": "scsi"}},
            "volumeSource": {"persistentVolumeClaim": {"claimName": "c"}}}));
        let vmi = patched(&running(json!([])), "ns", "v", true, &r).unwrap();
        assert_eq!(vmi["spec"]["domain"]["devices"]["disks"][0]["name"], "hp");
        assert_eq!(
            vmi["spec"]["volumes"][0]["persistentVolumeClaim"]["hotpluggable"],
            true
        );
        let taken = running(json!([{"name": "x", "persistentVolumeClaim": {"claimName": "c"}}]));
        let e = patched(&taken, "ns", "v", true, &r).unwrap_err();
        assert_eq!(e.code, 409);
        assert!(
            e.message
                .contains("volume source [c] because it already exists"),
            "{}",
            e.message
        );
        let mut pending = running(json!([]));
        pending["status"]["phase"] = json!("Scheduling");
        assert!(
            patched(&pending, "ns", "v", true, &r)
                .unwrap_err()
                .message
                .contains(NOT_RUNNING)
        );
    }

    #[test]
    fn bad_bodies_and_removes_name_what_is_wrong() {
        let missing_disk = request("addvolume", br#"{"name": "hp"}"#).unwrap_err();
        assert_eq!(
            missing_disk.message,
            "AddVolumeOptions requires disk to not be nil"
        );
        let unnamed = request("removevolume", b"{}").unwrap_err();
        assert_eq!(
            unnamed.message,
            "RemoveVolumeOptions requires name to be set"
        );
        let remove = request("removevolume", br#"{"name": "root"}"#).unwrap();
        let fixed = running(json!([{"name": "root", "containerDisk": {"image": "i"}}]));
        let e = patched(&fixed, "ns", "v", true, &remove).unwrap_err();
        assert!(
            e.message.contains("because it is not hotpluggable"),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_dry_run_is_recognised() {
        let r = add(json!({"name": "hp", "disk": {}, "dryRun": ["All"],
            "volumeSource": {"persistentVolumeClaim": {"claimName": "c"}}}));
        assert!(dry_run(&r));
        let r = add(json!({"name": "hp", "disk": {},
            "volumeSource": {"persistentVolumeClaim": {"claimName": "c"}}}));
        assert!(!dry_run(&r));
    }
}
