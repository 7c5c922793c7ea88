//! Our decisions as writes: each API action of a [`VmDecision`] or [`VmiDecision`] becomes an
//! [`Intended`] write (which object, which part, what it does to the object), applied to the
//! object as it was to give the object our write would have left.

use crate::controller::vm::{VmAction, VmDecision};
use crate::controller::vmi::{VmiAction, VmiDecision};
use serde::Serialize;
use serde_json::{Value, json};

/// The kinds whose writes the shadow compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum Kind {
    VirtualMachine,
    VirtualMachineInstance,
    Pod,
    ControllerRevision,
    DataVolume,
}

impl Kind {
    /// The kind's name as the API writes it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Kind::VirtualMachine => "VirtualMachine",
            Kind::VirtualMachineInstance => "VirtualMachineInstance",
            Kind::Pod => "Pod",
            Kind::ControllerRevision => "ControllerRevision",
            Kind::DataVolume => "DataVolume",
        }
    }
}

/// Which part of an object a write changes: the status subresource, or the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Part {
    Main,
    Status,
}

/// What a write does to the object.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect {
    /// POST this object.
    Create(Value),
    /// DELETE.
    Delete,
    /// PUT this object.
    Replace(Value),
    /// PUT the status subresource with this status.
    ReplaceStatus(Value),
    /// RFC 6902 JSON patch.
    JsonPatch(Value),
    /// RFC 7386 merge patch.
    MergePatch(Value),
    /// Set this pod condition (by `type`) in `status.conditions`.
    PodCondition(Value),
}

/// One API write our decision makes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Intended {
    /// The object's kind.
    pub kind: Kind,
    /// Its name; `None` for a creation whose name the server generates.
    pub name: Option<String>,
    /// The part written; `None`: either (a full VMI update writes both).
    pub part: Option<Part>,
    /// The action (`CreateVmi`, `PatchPod`, …), for the report.
    pub action: &'static str,
    /// What it does.
    pub effect: Effect,
}

impl Intended {
    /// The object this write leaves when applied to `before` (`None`: absent); `None` after a
    /// deletion. A patch that does not apply is an error naming the action.
    pub(crate) fn apply(&self, before: Option<&Value>) -> Result<Option<Value>, String> {
        let base = || {
            before
                .cloned()
                .ok_or_else(|| format!("{}: the object is gone", self.action))
        };
        Ok(match &self.effect {
            Effect::Create(obj) => Some(obj.clone()),
            Effect::Delete => None,
            Effect::Replace(obj) => Some(obj.clone()),
            Effect::ReplaceStatus(status) => {
                let mut obj = base()?;
                obj["status"] = status.clone();
                Some(obj)
            }
            Effect::JsonPatch(patch) => {
                let mut obj = base()?;
                let patch: json_patch::Patch = serde_json::from_value(patch.clone())
                    .map_err(|e| format!("{}: not a JSON patch: {e}", self.action))?;
                // As the API server applies it: KubeVirt's `test null` of an absent path.
                crate::sim::patch::apply_json_patch(&mut obj, patch)
                    .map_err(|e| format!("{}: the patch does not apply: {e}", self.action))?;
                Some(obj)
            }
            Effect::MergePatch(patch) => {
                let mut obj = base()?;
                json_patch::merge(&mut obj, patch);
                Some(obj)
            }
            Effect::PodCondition(cond) => {
                // The strategic merge patch `{"status":{"conditions":[cond]}}` the controller
                // sends, merged as the API server merges it (its list order too).
                let patch = json!({"status": {"conditions": [cond]}});
                let obj = crate::sim::patch::strategic_merge(&base()?, &patch, "")
                    .map_err(|e| format!("{}: the patch does not apply: {e}", self.action))?;
                Some(obj)
            }
        })
    }
}

fn to_value<T: Serialize>(obj: &T) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

fn write(
    kind: Kind,
    name: &str,
    part: Option<Part>,
    action: &'static str,
    effect: Effect,
) -> Intended {
    Intended {
        kind,
        name: Some(name.to_string()),
        part,
        action,
        effect,
    }
}

/// The writes of one VM decision, in order. `vm_name` is the VM's name.
pub(crate) fn vm_writes(decision: &VmDecision, vm_name: &str) -> Vec<Intended> {
    vm_writes_at(decision, vm_name)
        .into_iter()
        .map(|(_, w)| w)
        .collect()
}

/// [`vm_writes`], each with the index of its action in `decision.actions`.
pub(crate) fn vm_writes_at(decision: &VmDecision, vm_name: &str) -> Vec<(usize, Intended)> {
    use Kind::{
        ControllerRevision as Cr, DataVolume as Dv, VirtualMachine as Vm,
        VirtualMachineInstance as Vmi,
    };
    let main = Some(Part::Main);
    let status = Some(Part::Status);
    let mut out = Vec::new();
    for (index, planned) in decision.actions.iter().enumerate() {
        let a = &planned.action;
        let kind = a.kind();
        let w = match a {
            VmAction::UpdateVm { vm, .. } => {
                write(Vm, vm_name, main, kind, Effect::Replace(to_value(vm)))
            }
            VmAction::AddVmFinalizer { patch }
            | VmAction::RemoveVmFinalizer { patch }
            | VmAction::PatchVmFirmware { patch } => {
                write(Vm, vm_name, main, kind, Effect::JsonPatch(patch.clone()))
            }
            VmAction::AddStartRequest { patch } | VmAction::PatchVmInstancetypeRefs { patch } => {
                write(Vm, vm_name, status, kind, Effect::JsonPatch(patch.clone()))
            }
            VmAction::UpdateVmStatus { status: s, .. } => write(
                Vm,
                vm_name,
                status,
                kind,
                Effect::ReplaceStatus(to_value(s)),
            ),
            VmAction::CreateVmi { vmi } => {
                write(Vmi, vm_name, None, kind, Effect::Create(to_value(vmi)))
            }
            VmAction::DeleteVmi { name, .. } => write(Vmi, name, None, kind, Effect::Delete),
            VmAction::PatchVmiGenerationAnnotation { name, patch }
            | VmAction::PatchVmiMetadata { name, patch }
            | VmAction::RemoveVmiFinalizer { name, patch } => {
                write(Vmi, name, None, kind, Effect::JsonPatch(patch.clone()))
            }
            VmAction::AdoptVmi { name, patch, .. } | VmAction::ReleaseVmi { name, patch } => {
                write(Vmi, name, None, kind, Effect::MergePatch(patch.clone()))
            }
            VmAction::AdoptDataVolume { name, patch, .. } => {
                write(Dv, name, None, kind, Effect::MergePatch(patch.clone()))
            }
            VmAction::CreateDataVolume { data_volume } => {
                let obj = to_value(data_volume);
                let name = obj
                    .pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                write(Dv, name, None, kind, Effect::Create(obj.clone()))
            }
            VmAction::CreateControllerRevision { revision }
            | VmAction::CreateInstancetypeRevision { revision } => {
                let name = revision.metadata.name.clone().unwrap_or_default();
                write(Cr, &name, None, kind, Effect::Create(to_value(revision)))
            }
            VmAction::DeleteControllerRevision { name } => {
                write(Cr, name, None, kind, Effect::Delete)
            }
            _ => continue,
        };
        out.push((index, w));
    }
    out
}

/// The writes of one VMI decision (stage 1, then stage 2), in order.
pub(crate) fn vmi_writes(decision: &VmiDecision, vmi_name: &str) -> Vec<Intended> {
    vmi_writes_at(decision, vmi_name)
        .into_iter()
        .map(|(_, w)| w)
        .collect()
}

/// [`vmi_writes`], each with the index of its action in `decision.actions()` (below
/// `sync_actions.len()`: the index in `sync_actions`).
pub(crate) fn vmi_writes_at(decision: &VmiDecision, vmi_name: &str) -> Vec<(usize, Intended)> {
    let mut out = Vec::new();
    for (index, a) in decision.actions().enumerate() {
        let w = match a {
            VmiAction::CreatePod { pod, .. } => {
                let name = pod.metadata.name.clone().filter(|n| !n.is_empty());
                Intended {
                    kind: Kind::Pod,
                    name,
                    part: None,
                    action: "CreatePod",
                    effect: Effect::Create(to_value(pod.as_ref())),
                }
            }
            VmiAction::DeletePod { name, .. } => {
                write(Kind::Pod, name, None, "DeletePod", Effect::Delete)
            }
            VmiAction::DeleteTemporaryPod { name, .. } => {
                write(Kind::Pod, name, None, "DeleteTemporaryPod", Effect::Delete)
            }
            VmiAction::CreateAttachmentPod { pod, .. } => Intended {
                kind: Kind::Pod,
                name: None,
                part: None,
                action: "CreateAttachmentPod",
                effect: Effect::Create(to_value(pod.as_ref())),
            },
            VmiAction::CreateTriggerPod { pod, .. } => Intended {
                kind: Kind::Pod,
                name: None,
                part: None,
                action: "CreateTriggerPod",
                effect: Effect::Create(to_value(pod.as_ref())),
            },
            VmiAction::DeleteAttachmentPod { name, .. } => {
                write(Kind::Pod, name, None, "DeleteAttachmentPod", Effect::Delete)
            }
            // Claims are not among the kinds the shadow compares.
            VmiAction::CreateBackendStoragePvc { .. }
            | VmiAction::DeleteBackendStoragePvc { .. } => continue,
            VmiAction::PatchPod { name, patch, .. } => write(
                Kind::Pod,
                name,
                Some(Part::Main),
                "PatchPod",
                Effect::JsonPatch(to_value(patch)),
            ),
            VmiAction::PatchPodReadinessCondition { pod, condition, .. } => write(
                Kind::Pod,
                pod,
                Some(Part::Status),
                "PatchPodReadinessCondition",
                Effect::PodCondition(to_value(condition)),
            ),
            VmiAction::UpdateVmi { vmi, .. } => write(
                Kind::VirtualMachineInstance,
                vmi_name,
                None,
                "UpdateVmi",
                Effect::Replace(to_value(vmi.as_ref())),
            ),
            VmiAction::PatchVmi { patch, .. } => write(
                Kind::VirtualMachineInstance,
                vmi_name,
                None,
                "PatchVmi",
                Effect::JsonPatch(to_value(patch)),
            ),
            VmiAction::Event { .. } => continue,
        };
        out.push((index, w));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_and_status_writes_apply_to_the_object_as_it_was() {
        let before = json!({"metadata": {"name": "a", "finalizers": []}, "status": {"x": 1}});
        let w = write(
            Kind::VirtualMachine,
            "a",
            Some(Part::Main),
            "AddVmFinalizer",
            Effect::JsonPatch(json!([{"op": "replace", "path": "/metadata/finalizers",
                "value": ["f"]}])),
        );
        let after = w.apply(Some(&before)).unwrap().unwrap();
        assert_eq!(after["metadata"]["finalizers"], json!(["f"]));
        let s = write(
            Kind::VirtualMachine,
            "a",
            Some(Part::Status),
            "UpdateVmStatus",
            Effect::ReplaceStatus(json!({"ready": true})),
        );
        assert_eq!(
            s.apply(Some(&before)).unwrap().unwrap()["status"],
            json!({"ready": true})
        );
        let bad = write(
            Kind::VirtualMachine,
            "a",
            None,
            "RemoveVmFinalizer",
            Effect::JsonPatch(
                json!([{"op": "test", "path": "/metadata/finalizers", "value": ["g"]}]),
            ),
        );
        assert!(
            bad.apply(Some(&before))
                .unwrap_err()
                .contains("RemoveVmFinalizer")
        );
        assert!(s.apply(None).unwrap_err().contains("gone"));
    }

    #[test]
    fn the_first_finalizer_of_a_vm_applies_as_the_api_server_applies_it() {
        // `test /metadata/finalizers null` + `replace` on a VM without finalizers (vm.go:2362-2382).
        let patch = crate::controller::vm::patches::finalizers_patch(None, &["f".to_string()]);
        let w = write(
            Kind::VirtualMachine,
            "a",
            Some(Part::Main),
            "AddVmFinalizer",
            Effect::JsonPatch(patch),
        );
        let before = json!({"metadata": {"name": "a"}});
        let after = w.apply(Some(&before)).unwrap().unwrap();
        assert_eq!(after["metadata"]["finalizers"], json!(["f"]));
    }

    #[test]
    fn a_pod_condition_replaces_the_one_of_its_type() {
        let before = json!({"status": {"conditions": [{"type": "Ready", "status": "False"},
            {"type": "kubevirt.io/virtual-machine-unpaused", "status": "False"}]}});
        let w = write(
            Kind::Pod,
            "p",
            Some(Part::Status),
            "PatchPodReadinessCondition",
            Effect::PodCondition(json!({"type": "kubevirt.io/virtual-machine-unpaused",
                "status": "True"})),
        );
        let after = w.apply(Some(&before)).unwrap().unwrap();
        assert_eq!(after["status"]["conditions"][1]["status"], "True");
        assert_eq!(after["status"]["conditions"].as_array().unwrap().len(), 2);
        // A new one goes before the pod's others, as kube-apiserver merges the patch (a
        // launcher pod bound before the patch answers `[unpaused, PodScheduled]`).
        let bound = json!({"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}});
        let after = w.apply(Some(&bound)).unwrap().unwrap();
        assert_eq!(
            crate::sim::patch::condition_types(&after),
            ["kubevirt.io/virtual-machine-unpaused", "PodScheduled"]
        );
    }
}
