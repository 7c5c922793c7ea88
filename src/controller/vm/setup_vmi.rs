//! Building the VMI a VM starts: `SetupVMIFromVM` (pkg/virt-controller/watch/vm/vm.go:1868-1897)
//! and the defaults `startVMI` adds before creating it (vm.go:1296-1325).
//!
//! The VMI gets every field of the template — including fields virtctl-rs does not model, which
//! the typed structs keep in their `extra` maps. Template metadata is a k8s-openapi `ObjectMeta`,
//! which has every metadata field. Unknown siblings of `metadata`/`spec` inside
//! `spec.template` are not VMI fields and are not copied (KubeVirt's typed template drops them).

use super::firmware::calculate_legacy_uuid;
use super::run_strategy::has_start_paused_request;
use super::snapshot::VmControllerConfig;
use crate::api::vm::{TemplateMeta, VirtualMachine};
use crate::api::vmi::{Firmware, VirtualMachineInstance, VirtualMachineInstanceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use serde_json::json;

/// Why a VMI could not be built from a VM.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    /// `spec.template` is absent (the API requires it; KubeVirt would dereference nil).
    #[error("VirtualMachine {vm}: spec.template is required")]
    MissingTemplate {
        /// `namespace/name` of the VM.
        vm: String,
    },
}

/// `metav1.NewControllerRef(vm, VirtualMachineGroupVersionKind)`: apiVersion `kubevirt.io/v1`,
/// kind `VirtualMachine`, controller and blockOwnerDeletion true.
pub(crate) fn vm_controller_ref(vm: &VirtualMachine) -> OwnerReference {
    OwnerReference {
        api_version: crate::api::API_VERSION.to_string(),
        kind: "VirtualMachine".to_string(),
        name: vm.metadata.name.clone().unwrap_or_default(),
        uid: vm.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// `memorydump.HasCompleted` (pkg/storage/memorydump/memorydump.go:44-46) and the claim name:
/// `status.memoryDumpRequest` exists with a phase other than `Associating`/`InProgress`.
fn completed_memory_dump_claim(vm: &VirtualMachine) -> Option<String> {
    vm.status.as_ref()?.extra.field("memoryDumpRequest", |req| {
        let phase = req.get("phase").and_then(|p| p.as_str()).unwrap_or("");
        if matches!(phase, "Associating" | "InProgress") {
            return None;
        }
        Some(
            req.get("claimName")
                .and_then(|c| c.as_str())
                .unwrap_or("")
                .to_string(),
        )
    })
}

/// `SetupVMIFromVM` (vm.go:1868-1897):
/// - metadata = deep copy of `spec.template.metadata`; name = VM name; `generateName` cleared;
///   namespace = VM namespace; labels = template labels;
/// - spec = deep copy of the template spec; `startStrategy: Paused` when the first state change
///   request is `Start` with `paused: "true"` (vm.go:1899-1909); a completed memory-dump volume
///   removed;
/// - `domain.firmware.uuid` = `CalculateLegacyUUID(VM name)` when empty (vm.go:1933-1950);
/// - ownerReferences = the VM controller reference only;
/// - `SetDefaultVolumeDisk` (pkg/util/util.go:131-152): every volume without a disk or
///   filesystem of the same name gets a disk `{name}` (no target: virt-api's admission defaults
///   it later).
///
/// `apiVersion`/`kind` are set (`libvmi.New`). Status is left empty.
pub fn setup_vmi_from_vm(vm: &VirtualMachine) -> Result<VirtualMachineInstance, SetupError> {
    let template = vm
        .spec
        .template
        .as_ref()
        .ok_or_else(|| SetupError::MissingTemplate {
            vm: super::patches::meta_key(&vm.metadata),
        })?;
    // The labels come with the copy (vm.go sets them from the template again).
    let mut metadata = template
        .metadata
        .as_ref()
        .map(TemplateMeta::to_object_meta)
        .unwrap_or_default();
    metadata.name = vm.metadata.name.clone();
    metadata.generate_name = None;
    metadata.namespace = vm.metadata.namespace.clone();
    let mut spec = template.spec.clone().unwrap_or_default();

    if has_start_paused_request(vm.status.as_ref()) {
        spec.start_strategy = Some("Paused".to_string());
    }
    if let Some(claim) = completed_memory_dump_claim(vm)
        && let Some(volumes) = spec.volumes.as_mut()
    {
        volumes.retain(|v| v.name != claim);
    }

    let firmware = spec.domain.firmware.get_or_insert_with(Firmware::default);
    if firmware.uuid.as_deref().unwrap_or("").is_empty() {
        firmware.uuid = Some(calculate_legacy_uuid(
            metadata.name.as_deref().unwrap_or(""),
        ));
    }

    metadata.owner_references = Some(vec![vm_controller_ref(vm)]);

    set_default_volume_disk(&mut spec);

    Ok(VirtualMachineInstance {
        api_version: Some(crate::api::API_VERSION.to_string()),
        kind: Some("VirtualMachineInstance".to_string()),
        metadata: metadata.into(),
        spec,
        status: None,
        extra: Default::default(),
    })
}

pub(crate) use crate::api::defaults::set_default_volume_disk;

/// `AutoAttachInputDevice` (vm.go:3428-3442): with `autoattachInputDevice: true` and no inputs,
/// add an input `{name: default-0}` (bus and type are defaulted later by virt-api).
pub(crate) fn auto_attach_input_device(spec: &mut VirtualMachineInstanceSpec) {
    let devices = &mut spec.domain.devices;
    if devices.autoattach_input_device != Some(true)
        || devices.inputs.as_ref().is_some_and(|i| !i.is_empty())
    {
        return;
    }
    devices
        .inputs
        .get_or_insert_with(Box::default)
        .push(json!({"name": "default-0"}));
}

/// `SetDefaultNetworkInterface` (pkg/network/vmispec/defaults.go:33-57). Unless
/// `autoattachPodInterface: false`, and only when the spec has neither networks nor interfaces:
/// add the default interface for the cluster's `defaultNetworkInterface` (`bridge` → `{name:
/// default, bridge: {}}`, error when bridge on the pod network is not permitted; `masquerade` →
/// `{name: default, masquerade: {}}`; `slirp` → error; anything else → no interface) and the
/// network `{name: default, pod: {}}`. The error text is KubeVirt's.
pub(crate) fn set_default_network_interface(
    config: &VmControllerConfig,
    spec: &mut VirtualMachineInstanceSpec,
) -> Result<(), crate::api::defaults::DefaultsError> {
    let admission = crate::api::defaults::AdmissionSettings {
        default_network_interface: config.default_network_interface.clone(),
        permit_bridge_interface_on_pod_network: config.permit_bridge_interface_on_pod_network,
        ..Default::default()
    };
    crate::api::defaults::set_default_network_interface(spec, &admission)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::manifest::{KubeVirtObject, read_manifest};
    use crate::api::vmi::Network;
    use serde_json::Value;

    /// The project's main example VM (docs/examples/vm-containerdisk.yaml, `demo-vm`): a
    /// container disk `root` and a cloud-init disk `seed`, 256Mi of guest memory.
    pub(crate) fn demo_vm_text() -> &'static str {
        include_str!("../../../docs/examples/vm-containerdisk.yaml")
    }

    pub(crate) fn demo_vm() -> VirtualMachine {
        let m = read_manifest("vm-containerdisk.yaml", demo_vm_text()).unwrap();
        match m.objects.into_iter().next().unwrap().object {
            KubeVirtObject::Vm(vm) => *vm,
            other => panic!("unexpected {}", other.kind()),
        }
    }

    /// Every leaf path of a JSON value, with its value.
    fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, v) in m {
                    leaves(&format!("{prefix}/{k}"), v, out);
                }
            }
            Value::Array(a) if !a.is_empty() => {
                for (i, v) in a.iter().enumerate() {
                    leaves(&format!("{prefix}/{i}"), v, out);
                }
            }
            other => out.push((prefix.to_string(), other.clone())),
        }
    }

    /// Mirrors the intent of vm_test.go:3145 "should copy annotations from spec.template to vmi"
    /// and the brief's requirement: a VM from docs/examples/vm-containerdisk.yaml with unknown
    /// fields at every level of the template arrives in the VMI with all of them.
    #[test]
    fn setup_keeps_every_template_field_including_unknown_ones() {
        let mut vm_json = serde_json::to_value(demo_vm()).unwrap();
        vm_json["metadata"]["namespace"] = "default".into();
        vm_json["metadata"]["uid"] = "vm-uid".into();
        let t = &mut vm_json["spec"]["template"];
        t["metadata"]["annotations"] = json!({"a.example/x": "1"});
        t["spec"]["futureSpecField"] = json!({"nested": [1, 2, {"deep": true}]});
        t["spec"]["domain"]["futureDomainField"] = json!("x");
        t["spec"]["domain"]["devices"]["futureDevice"] = json!([{"name": "q"}]);
        t["spec"]["domain"]["devices"]["disks"][0]["futureDiskField"] = json!(7);
        t["spec"]["volumes"][1]["cloudInitNoCloud"]["futureCloudInit"] = json!("y");
        t["spec"]["volumes"][0]["containerDisk"]["imagePullPolicy"] = json!("Always");
        t["spec"]["domain"]["memory"]["futureMemory"] = json!(null);
        let vm: VirtualMachine = serde_json::from_value(vm_json.clone()).unwrap();

        let vmi = setup_vmi_from_vm(&vm).unwrap();
        let vmi_json = serde_json::to_value(&vmi).unwrap();

        let mut template_leaves = vec![];
        leaves(
            "",
            &vm_json["spec"]["template"]["spec"],
            &mut template_leaves,
        );
        for (path, value) in template_leaves {
            if value.is_null() {
                continue;
            }
            let got = vmi_json["spec"].pointer(&path);
            assert_eq!(got, Some(&value), "spec{path} lost");
        }
        assert_eq!(
            vmi_json["metadata"]["annotations"],
            json!({"a.example/x": "1"})
        );
        assert_eq!(
            vmi_json["metadata"]["labels"],
            json!({"app.kubernetes.io/name": "demo-vm"})
        );
        assert_eq!(vmi.metadata.name.as_deref(), Some("demo-vm"));
        assert_eq!(vmi.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(vmi.api_version.as_deref(), Some("kubevirt.io/v1"));
        assert_eq!(vmi.kind.as_deref(), Some("VirtualMachineInstance"));
        // Firmware UUID added (vm_test.go:2596 "should have stable firmware UUIDs").
        assert_eq!(
            vmi.spec.domain.firmware.as_ref().unwrap().uuid.as_deref(),
            Some("c35fca7a-6445-5a56-a696-fcfdf46cd1be")
        );
        let owner = &vmi.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("VirtualMachine", "demo-vm", "vm-uid")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    /// Mirrors vm_test.go:2611 "should honour any firmware UUID present in the template".
    #[test]
    fn existing_firmware_uuid_is_kept() {
        let mut vm = demo_vm();
        crate::controller::vm::template_spec_mut(&mut vm)
            .domain
            .firmware = Some(Firmware {
            uuid: Some("my-uuid".into()),
            ..Default::default()
        });
        let vmi = setup_vmi_from_vm(&vm).unwrap();
        assert_eq!(
            vmi.spec.domain.firmware.unwrap().uuid.as_deref(),
            Some("my-uuid")
        );
    }

    /// Mirrors vm_test.go:2536 "should ignore the name of a VirtualMachineInstance templates".
    #[test]
    fn template_name_and_generate_name_are_replaced() {
        let mut vm = demo_vm();
        let meta = vm
            .spec
            .template
            .as_mut()
            .unwrap()
            .metadata
            .as_mut()
            .unwrap();
        let mut whole = meta.to_object_meta();
        whole.name = Some("other".into());
        whole.generate_name = Some("gen-".into());
        *meta = whole.into();
        let vmi = setup_vmi_from_vm(&vm).unwrap();
        assert_eq!(vmi.metadata.name.as_deref(), Some("demo-vm"));
        assert_eq!(vmi.metadata.generate_name, None);
    }

    /// Mirrors vm_test.go:5298 "should add a missing volume disk".
    #[test]
    fn default_disk_for_volumes_without_disk_or_filesystem() {
        let mut spec: VirtualMachineInstanceSpec = serde_json::from_value(json!({
            "domain": {"devices": {
                "disks": [{"name": "a", "disk": {}}],
                "filesystems": [{"name": "fs", "virtiofs": {}}]
            }},
            "volumes": [
                {"name": "a", "containerDisk": {"image": "x"}},
                {"name": "b", "cloudInitNoCloud": {}},
                {"name": "fs", "persistentVolumeClaim": {"claimName": "c"}}
            ]
        }))
        .unwrap();
        set_default_volume_disk(&mut spec);
        let disks = serde_json::to_value(&spec.domain.devices.disks).unwrap();
        assert_eq!(disks, json!([{"name": "a", "disk": {}}, {"name": "b"}]));
    }

    /// Mirrors vm_test.go:5172-5250: default interface per cluster setting, none when interfaces
    /// or networks exist or autoattachPodInterface is false, slirp rejected.
    #[test]
    fn default_network_interface() {
        let mut cfg = VmControllerConfig::default();
        let mut spec = VirtualMachineInstanceSpec::default();
        set_default_network_interface(&cfg, &mut spec).unwrap();
        assert_eq!(
            serde_json::to_value(&spec.domain.devices.interfaces).unwrap(),
            json!([{"name": "default", "bridge": {}}])
        );
        assert_eq!(
            serde_json::to_value(&spec.networks).unwrap(),
            json!([{"name": "default", "pod": {}}])
        );

        cfg.default_network_interface = "masquerade".into();
        let mut spec = VirtualMachineInstanceSpec::default();
        set_default_network_interface(&cfg, &mut spec).unwrap();
        assert_eq!(
            serde_json::to_value(&spec.domain.devices.interfaces).unwrap(),
            json!([{"name": "default", "masquerade": {}}])
        );

        cfg.default_network_interface = "slirp".into();
        let mut spec = VirtualMachineInstanceSpec::default();
        assert_eq!(
            set_default_network_interface(&cfg, &mut spec).map_err(|e| e.to_string()),
            Err("slirp interface is deprecated as of v1.3".to_string())
        );

        cfg.default_network_interface = "bridge".into();
        cfg.permit_bridge_interface_on_pod_network = false;
        let mut spec = VirtualMachineInstanceSpec::default();
        assert!(set_default_network_interface(&cfg, &mut spec).is_err());

        let cfg = VmControllerConfig::default();
        let mut spec = VirtualMachineInstanceSpec::default();
        spec.domain.devices.autoattach_pod_interface = Some(false);
        set_default_network_interface(&cfg, &mut spec).unwrap();
        assert!(spec.networks.is_none() && spec.domain.devices.interfaces.is_none());

        let mut spec = VirtualMachineInstanceSpec {
            networks: Some(vec![Network {
                name: "n".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        set_default_network_interface(&cfg, &mut spec).unwrap();
        assert!(spec.domain.devices.interfaces.is_none());
    }

    /// Mirrors vm_test.go:5331 "AutoattachInputDevice should".
    #[test]
    fn auto_attach_input() {
        let mut spec = VirtualMachineInstanceSpec::default();
        auto_attach_input_device(&mut spec);
        assert!(spec.domain.devices.inputs.is_none());
        spec.domain.devices.autoattach_input_device = Some(true);
        auto_attach_input_device(&mut spec);
        assert_eq!(
            spec.domain.devices.inputs,
            Some(Box::new(vec![json!({"name": "default-0"})]))
        );
        auto_attach_input_device(&mut spec);
        assert_eq!(spec.domain.devices.inputs.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn start_paused_request_sets_start_strategy() {
        let mut vm = demo_vm();
        vm.status = Some(
            serde_json::from_value(json!({
                "stateChangeRequests": [{"action": "Start", "data": {"paused": "true"}}]
            }))
            .unwrap(),
        );
        assert_eq!(
            setup_vmi_from_vm(&vm)
                .unwrap()
                .spec
                .start_strategy
                .as_deref(),
            Some("Paused")
        );
    }

    /// Mirrors vm_test.go:3892 "should remove memory dump volume from vm volumes list" (the part
    /// done by SetupVMIFromVM) and 3926 (no removal while the dump is in progress).
    #[test]
    fn completed_memory_dump_volume_is_removed() {
        let mut vm = demo_vm();
        vm.status = Some(
            serde_json::from_value(json!({
                "memoryDumpRequest": {"claimName": "root", "phase": "Completed"}
            }))
            .unwrap(),
        );
        let vmi = setup_vmi_from_vm(&vm).unwrap();
        let names: Vec<_> = vmi
            .spec
            .volumes
            .unwrap()
            .into_iter()
            .map(|v| v.name)
            .collect();
        assert_eq!(names, vec!["seed"]);

        vm.status = Some(
            serde_json::from_value(json!({
                "memoryDumpRequest": {"claimName": "root", "phase": "InProgress"}
            }))
            .unwrap(),
        );
        assert_eq!(
            setup_vmi_from_vm(&vm).unwrap().spec.volumes.unwrap().len(),
            2
        );
    }

    #[test]
    fn missing_template_is_an_error() {
        let vm: VirtualMachine = serde_json::from_value(json!({
            "metadata": {"name": "x", "namespace": "ns"}, "spec": {}
        }))
        .unwrap();
        assert_eq!(
            setup_vmi_from_vm(&vm).unwrap_err().to_string(),
            "VirtualMachine ns/x: spec.template is required"
        );
    }
}
