//! DataVolume templates: `handleDataVolumes` (pkg/virt-controller/watch/vm/vm.go:460-573), the
//! manifest (`CreateDataVolumeManifest`, pkg/virt-controller/watch/util/util.go:106-118;
//! `GenerateDataVolumeFromTemplate`, pkg/storage/types/dv.go:116-150) and the DataVolume state
//! helpers used by the printable status (dv.go:171-236).
//!
//! Not modelled, refused with a sync error: `sourceRef` DataSource resolution (needs a live GET)
//! and clone sources (`source.pvc` / `source.snapshot`), whose SubjectAccessReview-based clone
//! authorisation on behalf of the VM's service account is not reproduced.

use super::error::VmSyncError;
use super::reasons::annotation;
use super::setup_vmi::vm_controller_ref;
use crate::api::DataVolume;
use crate::api::labels::CREATED_BY;
use crate::api::vm::VirtualMachine;
use crate::api::vmi::Volume;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;

/// `metadata.name` of each `spec.dataVolumeTemplates` entry (empty string when missing).
pub(crate) fn template_names(vm: &VirtualMachine) -> Vec<String> {
    vm.spec
        .data_volume_templates
        .iter()
        .flatten()
        .map(|t| {
            t.get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(|n| n.as_str())
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// A DataVolume condition (`status.conditions[]`): status, reason, message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct DvCondition {
    /// `True` / `False` / `Unknown`.
    pub status: String,
    /// Reason, `""` when absent.
    pub reason: String,
    /// Message, `""` when absent.
    pub message: String,
}

/// The DataVolume condition of this type (`Bound`, `Running`, `Ready`).
pub(crate) fn dv_condition(dv: &DataVolume, type_: &str) -> Option<DvCondition> {
    let conds = dv.status.as_ref()?.extra.get("conditions")?.as_array()?;
    let c = conds
        .iter()
        .find(|c| c.get("type").and_then(|t| t.as_str()) == Some(type_))?;
    let s = |k: &str| c.get(k).and_then(|v| v.as_str()).unwrap_or("").to_string();
    Some(DvCondition {
        status: s("status"),
        reason: s("reason"),
        message: s("message"),
    })
}

/// `status.phase` of a DataVolume (`""` when unset).
pub(crate) fn dv_phase(dv: &DataVolume) -> &str {
    dv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub(super) fn find<'d>(dvs: &'d [DataVolume], name: &str) -> Option<&'d DataVolume> {
    dvs.iter()
        .find(|d| d.metadata.name.as_deref() == Some(name))
}

fn data_volume_names(volumes: &[Volume]) -> impl Iterator<Item = &str> {
    volumes
        .iter()
        .filter_map(|v| v.data_volume.as_ref())
        .map(|d| d.name.as_deref().unwrap_or(""))
}

/// `HasDataVolumeErrors` (dv.go:171-196): for template volumes of kind `dataVolume` with a
/// DataVolume in the cache: phase `Failed`, or condition `Running=False` with reason `Error` or
/// `ImagePullFailed`. Returns KubeVirt's error text.
pub(crate) fn data_volume_error(volumes: &[Volume], dvs: &[DataVolume]) -> Option<String> {
    for name in data_volume_names(volumes) {
        let Some(dv) = find(dvs, name) else { continue };
        if dv_phase(dv) == "Failed" {
            return Some(format!("DataVolume {name} is in Failed phase"));
        }
        if let Some(c) = dv_condition(dv, "Running")
            && c.status == "False"
            && (c.reason == "Error" || c.reason == "ImagePullFailed")
        {
            return Some(format!(
                "DataVolume {name} importer has stopped running due to an error: {}",
                c.message
            ));
        }
    }
    None
}

/// `HasDataVolumeProvisioning` (dv.go:212-236): a template-volume DataVolume in the cache that is
/// neither `Succeeded` nor `PendingPopulation`, and is bound or not `WaitForFirstConsumer`.
pub(crate) fn data_volume_provisioning(volumes: &[Volume], dvs: &[DataVolume]) -> bool {
    data_volume_names(volumes).any(|name| {
        let Some(dv) = find(dvs, name) else {
            return false;
        };
        let phase = dv_phase(dv);
        if phase == "Succeeded" || phase == "PendingPopulation" {
            return false;
        }
        let bound = dv_condition(dv, "Bound").is_some_and(|c| c.status == "True");
        bound || phase != "WaitForFirstConsumer"
    })
}

/// `HasDataVolumeExceededQuotaError` (dv.go:198-206): `Bound` not True with reason
/// `ErrExceededQuota`; returns the condition message.
pub(super) fn exceeded_quota(dv: &DataVolume) -> Option<String> {
    dv_condition(dv, "Bound")
        .filter(|c| c.status != "True" && c.reason == "ErrExceededQuota")
        .map(|c| c.message)
}

/// The DataVolume the controller creates for a `dataVolumeTemplates` entry: metadata and spec
/// from the template; labels + `kubevirt.io/created-by: <VM UID>`; annotations +
/// `cdi.kubevirt.io/allowClaimAdoption: "true"`; `spec.priorityClassName` from the VM template
/// when the DataVolume has none; a single controller owner reference to the VM; namespace = the
/// VM's when the template has none. Errors name the template field.
pub(crate) fn build_data_volume(
    vm: &VirtualMachine,
    template: &Value,
) -> Result<DataVolume, VmSyncError> {
    let mut metadata: ObjectMeta = serde_json::from_value(
        template.get("metadata").cloned().unwrap_or(Value::Null),
    )
    .map_err(|e| VmSyncError::DataVolumeManifest(format!("dataVolumeTemplates[].metadata: {e}")))?;
    let mut spec = template.get("spec").cloned().unwrap_or(Value::Null);
    if spec.is_null() {
        spec = Value::Object(Default::default());
    }
    metadata.labels.get_or_insert_with(Default::default).insert(
        CREATED_BY.to_string(),
        vm.metadata.uid.clone().unwrap_or_default(),
    );
    metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(
            annotation::CDI_ALLOW_CLAIM_ADOPTION.to_string(),
            "true".to_string(),
        );
    if metadata.namespace.as_deref().unwrap_or("").is_empty() {
        metadata.namespace = vm.metadata.namespace.clone();
    }
    metadata.owner_references = Some(vec![vm_controller_ref(vm)]);
    let vm_priority = vm
        .template_spec()
        .and_then(|s| s.priority_class_name.clone())
        .filter(|p| !p.is_empty());
    if let (Some(p), Some(obj)) = (vm_priority, spec.as_object_mut()) {
        let has = obj
            .get("priorityClassName")
            .and_then(|v| v.as_str())
            .is_some_and(|s| !s.is_empty());
        if !has {
            obj.insert("priorityClassName".into(), Value::String(p));
        }
    }
    Ok(DataVolume {
        api_version: Some("cdi.kubevirt.io/v1beta1".into()),
        kind: Some("DataVolume".into()),
        metadata,
        spec,
        status: None,
        extra: Default::default(),
    })
}

/// The refusals and KubeVirt errors of `GetResolvedCloneSource` + `handleCloneDataVolume`
/// (dv.go:73-114, vm.go:460-489) for a DataVolume about to be created.
pub(super) fn check_clone_source(dv: &DataVolume) -> Result<(), VmSyncError> {
    let name = dv.metadata.name.as_deref().unwrap_or("");
    if let Some(source_ref) = dv.spec.get("sourceRef").filter(|v| !v.is_null()) {
        if source_ref.get("kind").and_then(|k| k.as_str()) == Some("DataSource") {
            return Err(VmSyncError::DataVolumeManifest(format!(
                "DataVolume {name}: resolving a DataSource sourceRef is not supported by virtctl-rs"
            )));
        }
        return Err(VmSyncError::Unsupported(
            "DataVolume sourceRef not supported".into(),
        ));
    }
    let source = dv.spec.get("source").filter(|v| !v.is_null());
    if source.is_some_and(|s| {
        s.get("pvc").is_some_and(|v| !v.is_null())
            || s.get("snapshot").is_some_and(|v| !v.is_null())
    }) {
        return Err(VmSyncError::Unsupported(format!(
            "clone DataVolume {name} is not supported by virtctl-rs: clone authorization for \
             the VM's service account is not modelled"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dv(name: &str, phase: Option<&str>, conds: Value) -> DataVolume {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"phase": phase, "conditions": conds},
        }))
        .unwrap()
    }

    fn dv_volume(name: &str) -> Volume {
        serde_json::from_value(json!({"name": "v", "dataVolume": {"name": name}})).unwrap()
    }

    /// Mirrors vm_test.go:4237 "Should set a DataVolumeError status when DataVolume reports an
    /// error" (both entries).
    #[test]
    fn errors() {
        let vols = [dv_volume("dv1")];
        assert_eq!(
            data_volume_error(&vols, &[dv("dv1", Some("Failed"), json!([]))]),
            Some("DataVolume dv1 is in Failed phase".into())
        );
        let running_err = json!([{"type": "Running", "status": "False", "reason": "Error",
                                  "message": "boom"}]);
        assert_eq!(
            data_volume_error(&vols, &[dv("dv1", None, running_err)]),
            Some("DataVolume dv1 importer has stopped running due to an error: boom".into())
        );
        assert_eq!(
            data_volume_error(&vols, &[dv("dv1", Some("ImportInProgress"), json!([]))]),
            None
        );
        assert_eq!(data_volume_error(&vols, &[]), None);
    }

    /// Mirrors vm_test.go:4204 "Should set a Provisioning status when DataVolume bound but not
    /// ready" and the WFFC entries of 4161.
    #[test]
    fn provisioning() {
        let vols = [dv_volume("dv1")];
        let bound = json!([{"type": "Bound", "status": "True"}]);
        for phase in [
            "ImportScheduled",
            "ImportInProgress",
            "WaitForFirstConsumer",
        ] {
            assert!(
                data_volume_provisioning(&vols, &[dv("dv1", Some(phase), bound.clone())]),
                "{phase}"
            );
        }
        assert!(!data_volume_provisioning(
            &vols,
            &[dv("dv1", Some("WaitForFirstConsumer"), json!([]))]
        ));
        assert!(!data_volume_provisioning(
            &vols,
            &[dv("dv1", Some("PendingPopulation"), bound.clone())]
        ));
        assert!(!data_volume_provisioning(
            &vols,
            &[dv("dv1", Some("Succeeded"), bound)]
        ));
        assert!(!data_volume_provisioning(&vols, &[]));
    }

    /// Mirrors vm_test.go:370 "should create missing DataVolume" and 1436 "should properly set
    /// priority class": the manifest.
    #[test]
    fn manifest() {
        let vm: VirtualMachine = serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns", "uid": "vm-uid"},
            "spec": {
                "template": {"spec": {"domain": {"devices": {}}, "priorityClassName": "high"}},
                "dataVolumeTemplates": [{
                    "metadata": {"name": "dv1", "labels": {"l": "1"}},
                    "spec": {"source": {"http": {"url": "http://x"}}, "storage": {}}
                }]
            }
        }))
        .unwrap();
        let template = &vm.spec.data_volume_templates.as_ref().unwrap()[0];
        let dv = build_data_volume(&vm, template).unwrap();
        let v = serde_json::to_value(&dv).unwrap();
        assert_eq!(v["apiVersion"], "cdi.kubevirt.io/v1beta1");
        assert_eq!(v["kind"], "DataVolume");
        assert_eq!(v["metadata"]["namespace"], "ns");
        assert_eq!(
            v["metadata"]["labels"],
            json!({"l": "1", "kubevirt.io/created-by": "vm-uid"})
        );
        assert_eq!(
            v["metadata"]["annotations"],
            json!({"cdi.kubevirt.io/allowClaimAdoption": "true"})
        );
        assert_eq!(v["metadata"]["ownerReferences"][0]["uid"], "vm-uid");
        assert_eq!(v["spec"]["priorityClassName"], "high");
        assert_eq!(v["spec"]["source"], json!({"http": {"url": "http://x"}}));
        assert!(check_clone_source(&dv).is_ok());

        let mut with_own = template.clone();
        with_own["spec"]["priorityClassName"] = json!("low");
        let dv = build_data_volume(&vm, &with_own).unwrap();
        assert_eq!(dv.spec["priorityClassName"], "low");

        let mut clone = template.clone();
        clone["spec"]["source"] = json!({"pvc": {"name": "src", "namespace": "other"}});
        assert!(
            check_clone_source(&build_data_volume(&vm, &clone).unwrap())
                .unwrap_err()
                .to_string()
                .contains("clone")
        );
        let mut source_ref = template.clone();
        source_ref["spec"]["sourceRef"] = json!({"kind": "Other", "name": "x"});
        assert_eq!(
            check_clone_source(&build_data_volume(&vm, &source_ref).unwrap())
                .unwrap_err()
                .to_string(),
            "DataVolume sourceRef not supported"
        );
    }
}
