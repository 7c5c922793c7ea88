//! Expanding a VM's instancetype and preference into the VM itself (`expander.Expand`,
//! pkg/instancetype/expand/expand.go:75-121), what the VM controller does under the `expand` and
//! `expandAll` reference policies (pkg/instancetype/controller/vm/controller.go:160-216).

use super::{Objects, find_spec};
use crate::api::defaults::{AdmissionSettings, SpecDefaultSettings};
use crate::api::vm::VirtualMachine;
use k8s_openapi::api::apps::v1::ControllerRevision;
use std::sync::Arc;

/// The VM with its instancetype and preference written into `spec.template` and its matchers
/// and status refs cleared, as `Expand` returns it:
/// 1. the referenced specs found as the controller finds them (a stashed revision first);
/// 2. `SetDefaultVolumeDisk` and `SetDefaultNetworkInterface` on the template (expand.go:92-96);
/// 3. the instancetype then the preference applied to the template and its metadata, conflicts
///    reported under `spec.template.spec` (expand.go:98-107);
/// 4. `SetDefaultVirtualMachineInstanceSpec` on the template (expand.go:109-112);
/// 5. `spec.instancetype`, `spec.preference`, `status.instancetypeRef`, `status.preferenceRef`
///    removed (expand.go:114-118).
///
/// Unlike `ApplyToVMI` at start, no name annotations are added. A VM without matchers is
/// returned as it is. `Err` is the text of KubeVirt's error (a find error, "VM field(s) … conflicts
/// with selected instance type", a network default refused).
pub(crate) fn expand(
    vm: &VirtualMachine,
    objects: &Objects,
    revisions: &[Arc<ControllerRevision>],
    admission: &AdmissionSettings,
    defaults: &SpecDefaultSettings,
) -> Result<VirtualMachine, String> {
    if vm.spec.instancetype.is_none() && vm.spec.preference.is_none() {
        return Ok(vm.clone());
    }
    let instancetype = find_spec(vm, false, objects, revisions)?;
    let preference = find_spec(vm, true, objects, revisions)?;

    let mut out = vm.clone();
    let template = out.spec.template.get_or_insert_with(Default::default);
    let mut spec = template.spec.take().unwrap_or_default();
    crate::api::defaults::set_default_volume_disk(&mut spec);
    crate::api::defaults::set_default_network_interface(&mut spec, admission)
        .map_err(|e| e.to_string())?;

    let mut spec_json = serde_json::to_value(&spec).map_err(|e| e.to_string())?;
    let mut annotations = template
        .metadata
        .as_ref()
        .and_then(|m| m.maps.annotations.clone())
        .unwrap_or_default();
    let conflicts = super::apply::apply_to_vmi(
        "spec.template.spec",
        instancetype.as_ref(),
        preference.as_ref(),
        &mut spec_json,
        &mut annotations,
    );
    if !conflicts.is_empty() {
        return Err(conflicts.to_string());
    }
    if !annotations.is_empty() {
        template
            .metadata
            .get_or_insert_with(Default::default)
            .maps
            .annotations = Some(annotations);
    }
    let mut spec: crate::api::vmi::VirtualMachineInstanceSpec =
        serde_json::from_value(spec_json).map_err(|e| e.to_string())?;
    crate::api::defaults::set_default_instance_spec(&mut spec, admission, defaults)
        .map_err(|e| e.to_string())?;
    template.spec = Some(spec);

    out.spec.instancetype = None;
    out.spec.preference = None;
    if let Some(status) = out.status.as_mut() {
        status.extra.remove("instancetypeRef");
        status.extra.remove("preferenceRef");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instancetype::Resource;
    use pretty_assertions::assert_eq;
    use serde_json::{Value, json};

    fn vm(spec: Value) -> VirtualMachine {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "shaped", "namespace": "lab", "uid": "shaped-uid"},
            "spec": spec
        }))
        .unwrap()
    }

    fn object(kind: &str, name: &str, spec: Value) -> Arc<Value> {
        Arc::new(json!({
            "apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": kind,
            "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 1},
            "spec": spec
        }))
    }

    /// A cluster instancetype of 2 vCPUs and 128Mi and a cluster preference for cores on the
    /// virtio disk bus, as in expand_test.go's "should expand instancetype and preference within
    /// VM" (values re-derived here), plus a namespaced pair.
    fn objects() -> Objects {
        let sized = json!({"cpu": {"guest": 2}, "memory": {"guest": "128Mi"}});
        let shaped = json!({"cpu": {"preferredCPUTopology": "cores"},
                            "devices": {"preferredDiskBus": "virtio"}});
        let mut o = Objects::default();
        for (r, kind, name, spec) in [
            (
                Resource::ClusterInstancetype,
                "VirtualMachineClusterInstancetype",
                "two-small",
                &sized,
            ),
            (
                Resource::ClusterPreference,
                "VirtualMachineClusterPreference",
                "cores-virtio",
                &shaped,
            ),
            (
                Resource::Instancetype,
                "VirtualMachineInstancetype",
                "two-small",
                &sized,
            ),
            (
                Resource::Preference,
                "VirtualMachinePreference",
                "cores-virtio",
                &shaped,
            ),
        ] {
            o.0.insert((r, name.into()), object(kind, name, spec.clone()));
        }
        o
    }

    fn template(extra: Value) -> Value {
        let mut t = json!({"spec": {"domain": {}, "volumes": [{"name": "data", "emptyDisk": {"capacity": "1Gi"}}]}});
        if let Some(m) = extra.as_object() {
            for (k, v) in m {
                t["spec"]["domain"][k] = v.clone();
            }
        }
        t
    }

    /// `v` expanded with [`objects`], no revisions and the default settings.
    fn expand_with_objects(v: &VirtualMachine) -> Result<VirtualMachine, String> {
        let (admission, defaults) = (AdmissionSettings::default(), SpecDefaultSettings::default());
        expand(v, &objects(), &[], &admission, &defaults)
    }

    fn expanded(kinds: (&str, &str), extra: Value) -> Result<Value, String> {
        let v = vm(json!({
            "instancetype": {"name": "two-small", "kind": kinds.0},
            "preference": {"name": "cores-virtio", "kind": kinds.1},
            "template": template(extra)
        }));
        expand_with_objects(&v).map(|vm| serde_json::to_value(vm).unwrap())
    }

    /// expand_test.go "should expand instancetype and preference within VM" and its namespaced
    /// twin, for every kind spelling: matchers gone, no template annotations, 2 vCPUs as cores,
    /// 128Mi of guest memory, the volume's disk on virtio, the default pod network; and what
    /// `SetDefaultVirtualMachineInstanceSpec` adds after (expand.go:109-112).
    #[test]
    fn instancetype_and_preference_are_written_into_the_template() {
        for kinds in [
            ("", ""),
            (
                "VirtualMachineClusterInstancetype",
                "VirtualMachineClusterPreference",
            ),
            (
                "virtualmachineclusterinstancetypes",
                "virtualmachineclusterpreferences",
            ),
            ("VirtualMachineInstancetype", "VirtualMachinePreference"),
            ("virtualmachineinstancetypes", "virtualmachinepreferences"),
        ] {
            let vm = expanded(kinds, json!({})).unwrap();
            assert_eq!(vm["spec"].get("instancetype"), None, "{kinds:?}");
            assert_eq!(vm["spec"].get("preference"), None);
            let t = &vm["spec"]["template"];
            assert_eq!(t.get("metadata"), None, "no annotations: {t}");
            assert_eq!(
                t["spec"],
                json!({
                    "architecture": "amd64",
                    "evictionStrategy": "None",
                    "domain": {
                        "cpu": {"sockets": 1, "cores": 2, "threads": 1},
                        "memory": {"guest": "128Mi"},
                        "machine": {"type": "q35"},
                        "devices": {
                            "disks": [{"name": "data", "disk": {"bus": "virtio"}}],
                            "interfaces": [{"name": "default", "bridge": {}}]
                        }
                    },
                    "networks": [{"name": "default", "pod": {}}],
                    "volumes": [{"name": "data", "emptyDisk": {"capacity": "1Gi"}}]
                }),
                "{kinds:?}"
            );
        }
    }

    /// expand_test.go "should fail, if there is a conflict when applying instancetype": a
    /// template with 4 sockets under a 2-vCPU instancetype.
    #[test]
    fn a_template_that_sets_what_the_instancetype_sets_is_refused() {
        for kinds in [
            ("", ""),
            ("VirtualMachineInstancetype", "VirtualMachinePreference"),
        ] {
            assert_eq!(
                expanded(kinds, json!({"cpu": {"sockets": 4}})),
                Err(
                    "VM field(s) spec.template.spec.domain.cpu.sockets conflicts with selected \
                     instance type"
                        .to_string()
                )
            );
        }
    }

    /// expand_test.go "should fail if VM points to nonexistent instancetype/preference": the
    /// finder's NotFound text.
    #[test]
    fn a_missing_object_is_the_finders_error() {
        let v = vm(json!({"instancetype": {"name": "gone"}, "template": template(json!({}))}));
        let e = expand_with_objects(&v);
        assert_eq!(
            e.unwrap_err(),
            "virtualmachineclusterinstancetypes.instancetype.kubevirt.io \"gone\" not found"
        );
        let v = vm(
            json!({"preference": {"name": "gone", "kind": "VirtualMachinePreference"},
                          "template": template(json!({}))}),
        );
        let e = expand_with_objects(&v);
        assert_eq!(
            e.unwrap_err(),
            "virtualmachinepreferences.instancetype.kubevirt.io \"gone\" not found"
        );
    }

    /// expand_test.go "should return unchanged VM, if no instancetype and preference is assigned".
    #[test]
    fn a_vm_without_matchers_is_unchanged() {
        let v = vm(json!({"template": template(json!({}))}));
        let out = expand_with_objects(&v).unwrap();
        assert_eq!(
            serde_json::to_value(out).unwrap(),
            serde_json::to_value(&v).unwrap()
        );
    }

    /// `SetDefaultVirtualMachineInstanceSpec`'s cluster inputs (defaults.go:193-283): the
    /// top-level machine type over the architecture's, a cluster `cpuRequest`, the eviction
    /// strategy; a set value is kept; pull policies by tag; the status refs cleared.
    #[test]
    fn cluster_defaults_and_status_refs() {
        let mut v = vm(json!({
            "preference": {"name": "cores-virtio"},
            "template": {"spec": {
                "evictionStrategy": "External",
                "domain": {"resources": {"limits": {"cpu": "3"}}},
                "volumes": [
                    {"name": "a", "containerDisk": {"image": "reg.example/os"}},
                    {"name": "b", "containerDisk": {"image": "reg.example/os:latest"}},
                    {"name": "c", "containerDisk": {"image": "reg.example/os:41"}},
                    {"name": "d", "containerDisk": {"image": "reg.example/os@sha256:00",
                                                   "imagePullPolicy": "Never"}}
                ]
            }}
        }));
        // The preference as stashed by an earlier `reference` policy: found through the ref.
        let o = objects();
        let stashed = crate::instancetype::revision::build(
            &v,
            Resource::ClusterPreference,
            o.get(Resource::ClusterPreference, "cores-virtio").unwrap(),
        );
        let name = stashed.metadata.name.clone().unwrap();
        v.status = Some(
            serde_json::from_value(json!({
                "printableStatus": "Stopped",
                "preferenceRef": {"name": "cores-virtio", "controllerRevisionRef": {"name": name}}
            }))
            .unwrap(),
        );
        let defaults = SpecDefaultSettings {
            machine_type: Some("pc-q35-rhel9.6.0".into()),
            cpu_request: Some("250m".into()),
            eviction_strategy: "LiveMigrate".into(),
            ..Default::default()
        };
        let revisions = [Arc::new(stashed)];
        let out = expand(&v, &o, &revisions, &Default::default(), &defaults).unwrap();
        let out = serde_json::to_value(out).unwrap();
        let spec = &out["spec"]["template"]["spec"];
        assert_eq!(
            spec["domain"]["machine"],
            json!({"type": "pc-q35-rhel9.6.0"})
        );
        // The CPU limit is copied to the request first; the cluster's request only fills a gap.
        assert_eq!(spec["domain"]["resources"]["requests"], json!({"cpu": "3"}));
        // No instancetype: the topology comes from the limit, as cores (the preference).
        assert_eq!(
            spec["domain"]["cpu"],
            json!({"sockets": 3, "cores": 1, "threads": 1})
        );
        assert_eq!(spec["evictionStrategy"], "External");
        let policies: Vec<&Value> = spec["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| &v["containerDisk"]["imagePullPolicy"])
            .collect();
        assert_eq!(policies, ["Always", "Always", "IfNotPresent", "Never"]);
        assert_eq!(out["status"], json!({"printableStatus": "Stopped"}));

        let bare = vm(json!({"preference": {"name": "cores-virtio"},
                             "template": template(json!({}))}));
        let out = expand(&bare, &objects(), &[], &Default::default(), &defaults).unwrap();
        let spec = serde_json::to_value(out).unwrap()["spec"]["template"]["spec"].clone();
        assert_eq!(
            spec["domain"]["resources"],
            json!({"requests": {"cpu": "250m"}})
        );
        assert_eq!(spec["evictionStrategy"], "LiveMigrate");
    }

    /// The architecture written into the template is the cluster's `GetDefaultArchitecture`
    /// (defaults.go:327-331): from a KubeVirt CR that `ClusterConfig` applies (it has a
    /// `status.phase`), its `status.defaultArchitecture`, and none at all when that is empty
    /// (configuration.go:316-320); the machine type is then amd64's (virt-config.go:199-212).
    /// The expanded template said `amd64` there.
    #[test]
    fn the_architecture_comes_from_the_crs_status() {
        let cr = |status: Value| {
            crate::config::ClusterSettings::from_kubevirt_cr(&json!({
                "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
                "spec": {"configuration": {"architectureConfiguration":
                    {"defaultArchitecture": "s390x"}}},
                "status": status}))
            .unwrap()
        };
        let v = vm(json!({"instancetype": {"name": "two-small"},
                          "preference": {"name": "cores-virtio"},
                          "template": template(json!({}))}));
        let spec_of = |settings: crate::config::ClusterSettings| {
            let out = expand(
                &v,
                &objects(),
                &[],
                &settings.admission(),
                &settings.spec_defaults,
            )
            .unwrap();
            serde_json::to_value(out).unwrap()["spec"]["template"]["spec"].clone()
        };
        let spec = spec_of(cr(json!({"phase": "Deployed"})));
        assert_eq!(spec.get("architecture"), None, "{spec}");
        assert_eq!(spec["domain"]["machine"], json!({"type": "q35"}));
        let spec = spec_of(cr(
            json!({"phase": "Deployed", "defaultArchitecture": "arm64"}),
        ));
        assert_eq!(spec["architecture"], "arm64");
        assert_eq!(spec["domain"]["machine"], json!({"type": "virt"}));
        // Not applied by KubeVirt yet (no phase): what virt-operator will copy from the spec.
        let spec = spec_of(cr(json!({})));
        assert_eq!(spec["architecture"], "s390x");
    }
}
