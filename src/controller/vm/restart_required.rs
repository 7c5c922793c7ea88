//! `RestartRequired`: does the VM template differ from the spec the running VMI was started from
//! in a field that cannot be applied live? (`syncRestartRequired`, `validLiveUpdateVolumes`,
//! `validLiveUpdateDisks`, pkg/virt-controller/watch/vm/vm.go:2902-3065; network part
//! `IsRestartRequired`, pkg/network/vmliveupdate/restart.go).
//!
//! Both sides arrive with their instancetype and preference expanded (`ApplyToVM`, done by the
//! engine before calling [`restart_required`], vm.go:2994-3007).

use crate::api::vm::{VirtualMachine, VirtualMachineSpec};
use crate::api::vmi::{
    Disk, Interface, Network, VirtualMachineInstance, VirtualMachineInstanceSpec, Volume,
};
use crate::controller::common::semantic_eq;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// `spec.template.spec`, borrowed; an empty spec when the template or its spec is absent (Go's
/// zero value, which is what KubeVirt compares then).
fn template_spec(spec: &VirtualMachineSpec) -> Cow<'_, VirtualMachineInstanceSpec> {
    match spec.template.as_ref().and_then(|t| t.spec.as_ref()) {
        Some(s) => Cow::Borrowed(s),
        None => Cow::Owned(VirtualMachineInstanceSpec::default()),
    }
}

fn claim_hotpluggable(v: &Option<crate::api::vmi::ClaimSource>) -> bool {
    v.as_ref().is_some_and(|c| {
        c.extra
            .read(|m| m.get("hotpluggable").and_then(Value::as_bool))
            .unwrap_or(false)
    })
}

/// `IsDeclarativeHotplugVolume` (pkg/storage/types/volume.go:33-46): a `persistentVolumeClaim`
/// or `dataVolume` with `hotpluggable: true`.
pub(crate) fn is_declarative_hotplug_volume(v: &Volume) -> bool {
    claim_hotpluggable(&v.persistent_volume_claim) || claim_hotpluggable(&v.data_volume)
}

/// `IsHotplugVolume` (pkg/storage/types/volume.go:53-66): a declarative hotplug volume or a
/// hotpluggable `memoryDump`.
pub(crate) fn is_hotplug_volume(v: &Volume) -> bool {
    is_declarative_hotplug_volume(v)
        || v.extra
            .field("memoryDump", |m| m.get("hotpluggable")?.as_bool())
            .unwrap_or(false)
}

fn volumes_by_name(spec: &VirtualMachineInstanceSpec) -> BTreeMap<&str, &Volume> {
    spec.volumes
        .iter()
        .flatten()
        .map(|v| (v.name.as_str(), v))
        .collect()
}

fn disks_by_name(spec: &VirtualMachineInstanceSpec) -> BTreeMap<&str, &Disk> {
    spec.domain
        .devices
        .disks
        .iter()
        .flatten()
        .map(|d| (d.name.as_str(), d))
        .collect()
}

fn update_volumes_strategy_is_migration(vm: &VirtualMachine) -> bool {
    vm.spec
        .extra
        .read(|m| m.get("updateVolumesStrategy").and_then(Value::as_str) == Some("Migration"))
}

/// `validLiveUpdateVolumes` (vm.go:2902-2935): only hotplug volumes were added/removed/changed
/// (or, with `updateVolumesStrategy: Migration`, PVC/DataVolume volumes changed).
pub(crate) fn valid_live_update_volumes(old: &VirtualMachineSpec, vm: &VirtualMachine) -> bool {
    let old_spec = template_spec(old);
    let mut old_vols = volumes_by_name(&old_spec);
    let new_spec = template_spec(&vm.spec);
    for v in new_spec.volumes.iter().flatten() {
        if is_hotplug_volume(v) {
            old_vols.remove(v.name.as_str());
            continue;
        }
        let Some(old_v) = old_vols.get(v.name.as_str()) else {
            return false;
        };
        if (v.persistent_volume_claim.is_some() || v.data_volume.is_some())
            && update_volumes_strategy_is_migration(vm)
        {
            old_vols.remove(v.name.as_str());
            continue;
        }
        if !semantic_eq(*old_v, v) {
            return false;
        }
        old_vols.remove(v.name.as_str());
    }
    old_vols.values().all(|v| is_hotplug_volume(v))
}

/// `validLiveUpdateDisks` (vm.go:2937-2976): only disks of hotplug volumes changed; a removed
/// CD-ROM needs a restart.
pub(crate) fn valid_live_update_disks(old: &VirtualMachineSpec, vm: &VirtualMachine) -> bool {
    let old_spec = template_spec(old);
    let new_spec = template_spec(&vm.spec);
    let mut old_disks = disks_by_name(&old_spec);
    let old_vols = volumes_by_name(&old_spec);
    let vols = volumes_by_name(&new_spec);
    let new_disks = disks_by_name(&new_spec);
    for d in new_spec.domain.devices.disks.iter().flatten() {
        if vols
            .get(d.name.as_str())
            .is_some_and(|v| is_hotplug_volume(v))
        {
            old_disks.remove(d.name.as_str());
            continue;
        }
        let Some(old_d) = old_disks.get(d.name.as_str()) else {
            return false;
        };
        if !semantic_eq(*old_d, d) {
            return false;
        }
        old_disks.remove(d.name.as_str());
    }
    for (name, old_d) in &old_disks {
        if old_vols.get(name).is_some_and(|v| !is_hotplug_volume(v)) {
            return false;
        }
        let is_cdrom = old_d
            .extra
            .read(|m| m.get("cdrom").is_some_and(|c| !c.is_null()));
        if is_cdrom && !new_disks.contains_key(name) {
            return false;
        }
    }
    true
}

fn iface_without_state(i: &Interface) -> Value {
    let mut v = serde_json::to_value(i).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.remove("state");
    }
    crate::controller::common::semantic::normalize(&v)
}

fn net_without_nad_name(n: &Network) -> Value {
    let mut v = serde_json::to_value(n).unwrap_or(Value::Null);
    if let Some(m) = v.get_mut("multus").and_then(Value::as_object_mut) {
        m.remove("networkName");
    }
    crate::controller::common::semantic::normalize(&v)
}

/// `vmliveupdate.IsRestartRequired` (pkg/network/vmliveupdate/restart.go:30-44): interfaces of the
/// VMI removed from or changed in the VM (ignoring `state`), the pod network added, or networks of
/// the VMI removed or changed (ignoring multus `networkName` when `nad_live`: the NAD reference
/// can be updated live; under PR 18194 not on a VMI that is not `LiveMigratable`, see
/// [`super::net_sync::nad_live_update`]).
pub(crate) fn network_restart_required(
    vm: &VirtualMachine,
    vmi: &VirtualMachineInstance,
    nad_live: bool,
) -> bool {
    let desired = template_spec(&vm.spec);
    let desired: &VirtualMachineInstanceSpec = &desired;
    let desired_ifaces: BTreeMap<&str, &Interface> = desired
        .domain
        .devices
        .interfaces
        .iter()
        .flatten()
        .map(|i| (i.name.as_str(), i))
        .collect();
    for cur in vmi.spec.domain.devices.interfaces.iter().flatten() {
        match desired_ifaces.get(cur.name.as_str()) {
            None => return true,
            Some(d) if iface_without_state(d) != iface_without_state(cur) => return true,
            _ => {}
        }
    }
    let is_pod = |n: &&Network| n.pod.is_some();
    let desired_nets: Vec<&Network> = desired.networks.iter().flatten().collect();
    let current_nets: Vec<&Network> = vmi.spec.networks.iter().flatten().collect();
    if desired_nets.iter().any(is_pod) && !current_nets.iter().any(is_pod) {
        return true;
    }
    for cur in &current_nets {
        match desired_nets.iter().find(|d| d.name == cur.name) {
            None => return true,
            Some(d) if net_without_nad_name(d) != net_without_nad_name(cur) => return true,
            Some(d) if !nad_live && !semantic_eq(d, cur) => return true,
            _ => {}
        }
    }
    false
}

/// `syncRestartRequired`'s comparison (vm.go:2989-3065): true when `last_seen`'s
/// `template.spec` still differs from the VM's after neutralising what can change live —
/// hotplug volumes/disks; with `live_update` (rollout strategy LiveUpdate) CPU sockets,
/// `memory.guest`, nodeSelector, affinity and tolerations; interfaces/networks when
/// [`network_restart_required`] says no; the firmware UUID when the VMI runs with the VM's.
/// `nad_live`: whether a NAD reference change can be applied live ([`network_restart_required`]).
pub(crate) fn restart_required(
    last_seen: &VirtualMachineSpec,
    vm: &VirtualMachine,
    vmi: &VirtualMachineInstance,
    live_update: bool,
    nad_live: bool,
) -> bool {
    let current = template_spec(&vm.spec);
    let current: &VirtualMachineInstanceSpec = &current;
    let seen = template_spec(last_seen);
    // Every step below copies a field of `current` into `seen`: when the two are already equal
    // the answer is "no restart", without the copy (the steady state of a running VM).
    if *seen == *current {
        return false;
    }
    let mut seen = seen.into_owned();

    if valid_live_update_volumes(last_seen, vm) {
        seen.volumes = current.volumes.clone();
    }
    if valid_live_update_disks(last_seen, vm) {
        seen.domain.devices.disks = current.domain.devices.disks.clone();
    }
    if live_update {
        if let (Some(seen_cpu), Some(cur_cpu)) =
            (seen.domain.cpu.as_mut(), current.domain.cpu.as_ref())
        {
            seen_cpu.sockets = cur_cpu.sockets;
        }
        if let Some(guest) = current.domain.memory.as_ref().and_then(|m| m.guest.clone()) {
            seen.domain
                .memory
                .get_or_insert_with(Default::default)
                .guest = Some(guest);
        }
        seen.node_selector = current.node_selector.clone();
        seen.affinity = current.affinity.clone();
        seen.tolerations = current.tolerations.clone();
    }
    if !network_restart_required(vm, vmi, nad_live) {
        seen.domain.devices.interfaces = current.domain.devices.interfaces.clone();
        seen.networks = current.networks.clone();
    }
    if let (Some(vmi_fw), Some(cur_fw)) = (
        vmi.spec.domain.firmware.as_ref(),
        current.domain.firmware.as_ref(),
    ) && vmi_fw.uuid.as_deref().unwrap_or("") == cur_fw.uuid.as_deref().unwrap_or("")
    {
        seen.domain
            .firmware
            .get_or_insert_with(Default::default)
            .uuid = cur_fw.uuid.clone();
    }
    !semantic_eq(&seen, current)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(template_spec: Value) -> VirtualMachine {
        serde_json::from_value(json!({
            "metadata": {"name": "vm"},
            "spec": {"template": {"spec": template_spec}},
        }))
        .unwrap()
    }

    fn vmi(spec: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"metadata": {"name": "vm"}, "spec": spec})).unwrap()
    }

    fn base() -> Value {
        json!({
            "domain": {
                "cpu": {"sockets": 1, "cores": 1},
                "memory": {"guest": "1Gi"},
                "devices": {
                    "disks": [{"name": "root", "disk": {"bus": "virtio"}}],
                    "interfaces": [{"name": "default", "masquerade": {}}]
                },
                "firmware": {"uuid": "u-1"}
            },
            "networks": [{"name": "default", "pod": {}}],
            "volumes": [{"name": "root", "containerDisk": {"image": "a"}}]
        })
    }

    fn check(change: impl Fn(&mut Value), live: bool) -> bool {
        let old = vm(base());
        let mut new_spec = base();
        change(&mut new_spec);
        let new = vm(new_spec);
        restart_required(&old.spec, &new, &vmi(base()), live, true)
    }

    /// Mirrors vm_test.go:6388 "should appear when changing a non-live-updatable field" and the
    /// negative: nothing changed.
    #[test]
    fn non_live_updatable_change() {
        assert!(!check(|_| {}, true));
        assert!(check(
            |s| s["volumes"][0]["containerDisk"]["image"] = json!("b"),
            true
        ));
        assert!(check(|s| s["domain"]["cpu"]["cores"] = json!(2), true));
        assert!(check(|s| s["futureField"] = json!(1), true));
    }

    /// Mirrors vm_test.go:6492 "when changing a live-updatable field": only with LiveUpdate.
    #[test]
    fn live_updatable_fields_depend_on_rollout_strategy() {
        type Change = Box<dyn Fn(&mut Value)>;
        let changes: Vec<Change> = vec![
            Box::new(|s| s["domain"]["cpu"]["sockets"] = json!(2)),
            Box::new(|s| s["domain"]["memory"]["guest"] = json!("2Gi")),
            Box::new(|s| s["nodeSelector"] = json!({"a": "b"})),
            Box::new(|s| s["affinity"] = json!({"nodeAffinity": {}})),
            Box::new(|s| s["tolerations"] = json!([{"key": "k"}])),
        ];
        for c in &changes {
            assert!(!check(c, true));
            assert!(check(c, false));
        }
    }

    /// Mirrors vm_test.go:6594/6640 "should NOT appear for hotpluggable DataVolume/PVC" and 6688
    /// "should appear for non-hotpluggable volumes".
    #[test]
    fn hotplug_volumes_do_not_need_restart() {
        assert!(!check(
            |s| {
                s["volumes"].as_array_mut().unwrap().push(
                    json!({"name": "hp", "dataVolume": {"name": "dv", "hotpluggable": true}}),
                );
                s["domain"]["devices"]["disks"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "hp", "disk": {"bus": "scsi"}}));
            },
            false
        ));
        assert!(check(
            |s| {
                s["volumes"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "pvc", "persistentVolumeClaim": {"claimName": "c"}}));
                s["domain"]["devices"]["disks"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "pvc", "disk": {}}));
            },
            false
        ));
    }

    /// Mirrors vm_test.go:6800 "RestartRequired condition based on VM and VMI UUID comparison".
    #[test]
    fn firmware_uuid_persisted_by_synchronizer_is_neutralised() {
        let mut old_spec = base();
        old_spec["domain"]
            .as_object_mut()
            .unwrap()
            .remove("firmware");
        let old = vm(old_spec);
        let new = vm(base());
        assert!(!restart_required(&old.spec, &new, &vmi(base()), true, true));
        let mut other = base();
        other["domain"]["firmware"]["uuid"] = json!("u-2");
        assert!(restart_required(&old.spec, &new, &vmi(other), true, true));
    }

    #[test]
    fn network_changes() {
        // Interface removed from the VM: restart.
        assert!(check(
            |s| {
                s["domain"]["devices"]["interfaces"] = json!([]);
                s["networks"] = json!([]);
            },
            true
        ));
        // Interface state change only: no restart (hot-unplug flow).
        assert!(!check(
            |s| s["domain"]["devices"]["interfaces"][0]["state"] = json!("absent"),
            true
        ));
        // A new bridge interface + multus network is a hotplug: no restart.
        assert!(!check(
            |s| {
                s["domain"]["devices"]["interfaces"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "n2", "bridge": {}}));
                s["networks"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "n2", "multus": {"networkName": "nad"}}));
            },
            true
        ));
    }

    /// restart_test.go "should not require restart when the NAD reference changes" (v1.9), and
    /// PR 18194's non-migratable case: the same change needs a restart when it cannot be live.
    #[test]
    fn nad_reference_change_needs_restart_only_when_not_live() {
        let with_secondary = || {
            let mut s = base();
            s["domain"]["devices"]["interfaces"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "blue", "bridge": {}}));
            s["networks"]
                .as_array_mut()
                .unwrap()
                .push(json!({"name": "blue", "multus": {"networkName": "blue-a"}}));
            s
        };
        let mut changed = with_secondary();
        changed["networks"][1]["multus"]["networkName"] = json!("blue-b");
        let running = vmi(with_secondary());
        for (nad_live, restart) in [(true, false), (false, true)] {
            assert_eq!(
                network_restart_required(&vm(changed.clone()), &running, nad_live),
                restart
            );
            assert_eq!(
                restart_required(
                    &vm(with_secondary()).spec,
                    &vm(changed.clone()),
                    &running,
                    true,
                    nad_live
                ),
                restart
            );
        }
        // Without a NAD change, nad_live does not matter.
        assert!(!network_restart_required(
            &vm(with_secondary()),
            &running,
            false
        ));
    }

    /// The shortcut for an unchanged template gives what the full comparison gives: no restart,
    /// whatever the VMI runs (vm.go:3052, `!equality.Semantic.DeepEqual` of equal specs).
    #[test]
    fn an_unchanged_template_never_needs_restart() {
        let mut other_vmi = base();
        other_vmi["domain"]["firmware"]["uuid"] = json!("u-2");
        other_vmi["domain"]["devices"]["interfaces"] = json!([]);
        for live in [true, false] {
            for running in [
                vmi(base()),
                vmi(other_vmi.clone()),
                vmi(json!({"domain": {}})),
            ] {
                assert!(!restart_required(
                    &vm(base()).spec,
                    &vm(base()),
                    &running,
                    live,
                    true
                ));
            }
        }
        // Neither side has a template: two empty specs.
        let bare: VirtualMachine =
            serde_json::from_value(json!({"metadata": {"name": "vm"}, "spec": {}})).unwrap();
        assert!(!restart_required(
            &bare.spec,
            &bare,
            &vmi(base()),
            false,
            true
        ));
    }

    #[test]
    fn removed_cdrom_needs_restart() {
        let mut old_spec = base();
        old_spec["domain"]["devices"]["disks"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "cd", "cdrom": {}}));
        let old = vm(old_spec);
        assert!(!valid_live_update_disks(&old.spec, &vm(base())));
    }
}
