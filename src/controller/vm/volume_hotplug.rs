//! Declarative volume hotplug, the VM controller's part (`handleDeclarativeVolumeHotplug`,
//! pkg/virt-controller/watch/vm/vm.go:3568-3575, over pkg/storage/hotplug/hotplug.go): with the
//! Beta gate `DeclarativeHotplugVolumes` on (the default in v1.9) and the deprecated
//! `HotplugVolumes` gate off, the hotpluggable `persistentVolumeClaim` / `dataVolume` volumes of
//! the VM template, with their disks, are carried into the running VMI's spec by one JSON patch;
//! the VMI controller then attaches them (`crate::controller::vmi::volume_hotplug`).
//!
//! The legacy path (`status.volumeRequests`, with the deprecated gate) is
//! [`super::volume_requests`].

use super::live_update::VmiPatch;
use super::restart_required::is_declarative_hotplug_volume;
use crate::api::vm::VirtualMachine;
use crate::api::vmi::{Disk, Phase, VirtualMachineInstance, Volume};
use crate::controller::common::patch::{PatchSet, path};
use crate::controller::common::semantic_eq;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

fn is_cdrom(d: &Disk) -> bool {
    d.extra
        .read(|m| m.get("cdrom").is_some_and(|c| !c.is_null()))
}

/// `filterHotplugVMIVolumes` (hotplug.go:96-121): the VMI's volumes, without the declarative
/// hotplug volumes the template no longer has or has changed.
fn kept_vmi_volumes(template: &[Volume], vmi: &[Volume]) -> Vec<Volume> {
    let wanted: BTreeMap<&str, &Volume> = template.iter().map(|v| (v.name.as_str(), v)).collect();
    vmi.iter()
        .filter(|v| {
            if !is_declarative_hotplug_volume(v) {
                return true;
            }
            match wanted.get(v.name.as_str()) {
                None => false,
                Some(t) => !is_declarative_hotplug_volume(t) || semantic_eq(*t, *v),
            }
        })
        .cloned()
        .collect()
}

/// `getNewHotplugVMVolumes` (hotplug.go:123-149): the template's declarative hotplug volumes
/// the VMI has neither in its spec nor in its volume status (a volume still being unplugged
/// keeps its status entry until its attachment pod is gone).
fn new_template_volumes(template: &[Volume], vmi: &VirtualMachineInstance) -> Vec<Volume> {
    let in_spec: BTreeSet<&str> = vmi
        .spec
        .volumes
        .iter()
        .flatten()
        .map(|v| v.name.as_str())
        .collect();
    let with_status: BTreeSet<String> = vmi
        .volume_status_entries()
        .iter()
        .filter_map(|e| e.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    template
        .iter()
        .filter(|v| {
            is_declarative_hotplug_volume(v)
                && !in_spec.contains(v.name.as_str())
                && !with_status.contains(&v.name)
        })
        .cloned()
        .collect()
}

/// `filterHotplugVMIDisks` (hotplug.go:159-190): the VMI's disks, without those whose volume
/// is no longer in the new volume list and whose disk left the template, or whose template
/// volume exists but changed (a CD-ROM on both sides stays: an ejected tray).
fn kept_vmi_disks(
    template_disks: &[Disk],
    template_volumes: &[Volume],
    vmi_disks: &[Disk],
    new_volumes: &[Volume],
) -> Vec<Disk> {
    let new_names: BTreeSet<&str> = new_volumes.iter().map(|v| v.name.as_str()).collect();
    let t_disks: BTreeMap<&str, bool> = template_disks
        .iter()
        .map(|d| (d.name.as_str(), is_cdrom(d)))
        .collect();
    let t_volumes: BTreeSet<&str> = template_volumes.iter().map(|v| v.name.as_str()).collect();
    vmi_disks
        .iter()
        .filter(|d| {
            if new_names.contains(d.name.as_str()) {
                return true;
            }
            let Some(&t_cdrom) = t_disks.get(d.name.as_str()) else {
                return false;
            };
            !(t_volumes.contains(d.name.as_str()) && (!t_cdrom || !is_cdrom(d)))
        })
        .cloned()
        .collect()
}

/// `getNewHotplugVMDisks` (hotplug.go:192-209): the template's disks whose volume is a
/// declarative hotplug volume of the new list and that the VMI lacks.
fn new_template_disks(
    template_disks: &[Disk],
    vmi_disks: &[Disk],
    new_volumes: &[Volume],
) -> Vec<Disk> {
    let vmi_names: BTreeSet<&str> = vmi_disks.iter().map(|d| d.name.as_str()).collect();
    template_disks
        .iter()
        .filter(|d| {
            new_volumes
                .iter()
                .find(|v| v.name == d.name)
                .is_some_and(is_declarative_hotplug_volume)
                && !vmi_names.contains(d.name.as_str())
        })
        .cloned()
        .collect()
}

/// `HandleDeclarativeVolumes` / `patchHotplugVolumes` (hotplug.go:36-94): the patch that makes
/// a Running VMI's volumes and disks follow the template's hotplug volumes, or `None` (not
/// running, `updateVolumesStrategy: Migration`, or nothing to change). The patch tests both
/// lists and replaces them (`add` where the VMI had none).
pub(crate) fn declarative_hotplug_patch(
    vm: &VirtualMachine,
    vmi: &VirtualMachineInstance,
) -> Option<VmiPatch> {
    let migration = vm
        .spec
        .extra
        .read(|m| m.get("updateVolumesStrategy").and_then(Value::as_str) == Some("Migration"));
    if migration || vmi.phase() != Phase::Running {
        return None;
    }
    let template = vm.template_spec()?;
    let t_volumes = template.volumes.as_deref().unwrap_or_default();
    let t_disks = template.domain.devices.disks.as_deref().unwrap_or_default();
    let vmi_volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    let vmi_disks = vmi.spec.domain.devices.disks.as_deref().unwrap_or_default();

    let mut volumes = kept_vmi_volumes(t_volumes, vmi_volumes);
    volumes.extend(new_template_volumes(t_volumes, vmi));
    let mut disks = kept_vmi_disks(t_disks, t_volumes, vmi_disks, &volumes);
    disks.extend(new_template_disks(t_disks, vmi_disks, &volumes));
    if semantic_eq(&volumes, &vmi_volumes.to_vec()) && semantic_eq(&disks, &vmi_disks.to_vec()) {
        return None;
    }
    let mut p = PatchSet::new();
    let vol_path = path(&["spec", "volumes"]);
    let disk_path = path(&["spec", "domain", "devices", "disks"]);
    p.test(vol_path.clone(), &vmi.spec.volumes)
        .test(disk_path.clone(), &vmi.spec.domain.devices.disks);
    if vmi_volumes.is_empty() {
        p.add(vol_path, &volumes);
    } else {
        p.replace(vol_path, &volumes);
    }
    if vmi_disks.is_empty() {
        p.add(disk_path, &disks);
    } else {
        p.replace(disk_path, &disks);
    }
    let names = |vs: &[Volume]| vs.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
    Some(VmiPatch {
        patch: p.into_value(),
        why: format!(
            "declarative volume hotplug: the VMI's volumes become {:?} (hotplug.go:51-94, vm.go:3336-3338)",
            names(&volumes)
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hp_dv(name: &str) -> Value {
        json!({"name": name, "dataVolume": {"name": format!("{name}-dv"), "hotpluggable": true}})
    }

    fn hp_pvc(name: &str) -> Value {
        json!({"name": name, "persistentVolumeClaim": {"claimName": format!("{name}-pvc"), "hotpluggable": true}})
    }

    fn disk(name: &str) -> Value {
        json!({"name": name, "disk": {"bus": "scsi"}})
    }

    fn root() -> (Value, Value) {
        (
            json!({"name": "root", "containerDisk": {"image": "img"}}),
            json!({"name": "root", "disk": {"bus": "virtio"}}),
        )
    }

    fn vm(volumes: Vec<Value>, disks: Vec<Value>) -> VirtualMachine {
        serde_json::from_value(json!({"metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"template": {"spec": {"domain": {"devices": {"disks": disks}},
                                           "volumes": volumes}}}}))
        .unwrap()
    }

    fn vmi(
        phase: &str,
        volumes: Vec<Value>,
        disks: Vec<Value>,
        status: Value,
    ) -> VirtualMachineInstance {
        let mut s = json!({"phase": phase});
        if let Some(o) = status.as_object() {
            s.as_object_mut().unwrap().extend(o.clone());
        }
        serde_json::from_value(json!({"metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"domain": {"devices": {"disks": disks}}, "volumes": volumes},
            "status": s}))
        .unwrap()
    }

    /// The patched VMI's volume and disk names.
    fn applied(v: &VirtualMachineInstance, p: &VmiPatch) -> (Vec<String>, Vec<String>) {
        let mut doc = serde_json::to_value(v).unwrap();
        let patch: json_patch::Patch = serde_json::from_value(p.patch.clone()).unwrap();
        json_patch::patch(&mut doc, &patch).expect("the tests hold");
        let names = |ptr: &str| {
            doc.pointer(ptr)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|e| e["name"].as_str().unwrap().to_string())
                        .collect()
                })
                .unwrap_or_default()
        };
        (names("/spec/volumes"), names("/spec/domain/devices/disks"))
    }

    // hotplug_test.go:75 "should do nothing if VMI not running".
    #[test]
    fn nothing_unless_the_vmi_runs() {
        let (rv, rd) = root();
        let vm = vm(vec![rv.clone(), hp_dv("hp")], vec![rd.clone(), disk("hp")]);
        assert!(
            declarative_hotplug_patch(&vm, &vmi("Scheduled", vec![rv], vec![rd], json!({})))
                .is_none()
        );
    }

    // hotplug_test.go:89 "should do nothing if non hotplug volume added".
    #[test]
    fn a_plain_volume_is_not_hotplugged() {
        let (rv, rd) = root();
        let plain = json!({"name": "p", "persistentVolumeClaim": {"claimName": "c"}});
        let vm = vm(vec![rv.clone(), plain], vec![rd.clone(), disk("p")]);
        assert!(
            declarative_hotplug_patch(&vm, &vmi("Running", vec![rv], vec![rd], json!({})))
                .is_none()
        );
    }

    // hotplug_test.go:104-124 "should add hotplug volumes to VMI" (1 and 5, DVs and PVCs).
    #[test]
    fn hotplug_volumes_and_their_disks_are_added() {
        for make in [hp_dv as fn(&str) -> Value, hp_pvc] {
            for n in [1, 5] {
                let (rv, rd) = root();
                let names: Vec<String> = (0..n).map(|i| format!("hp{i}")).collect();
                let mut vols = vec![rv.clone()];
                let mut disks = vec![rd.clone()];
                for name in &names {
                    vols.push(make(name));
                    disks.push(disk(name));
                }
                let running = vmi("Running", vec![rv.clone()], vec![rd.clone()], json!({}));
                let p = declarative_hotplug_patch(&vm(vols, disks), &running).expect("a patch");
                let mut want = vec!["root".to_string()];
                want.extend(names.clone());
                assert_eq!(applied(&running, &p), (want.clone(), want));
                assert_eq!(p.patch[0]["op"], "test");
                assert_eq!(p.patch[2]["op"], "replace");
            }
        }
    }

    // hotplug_test.go:127-152 "should remove hotplug volumes from VMI" (3 volumes, each index).
    #[test]
    fn a_hotplug_volume_gone_from_the_template_is_removed_with_its_disk() {
        for index in 0..3 {
            let (rv, rd) = root();
            let names: Vec<String> = (0..3).map(|i| format!("hp{i}")).collect();
            let all_v: Vec<Value> = std::iter::once(rv.clone())
                .chain(names.iter().map(|n| hp_pvc(n)))
                .collect();
            let all_d: Vec<Value> = std::iter::once(rd.clone())
                .chain(names.iter().map(|n| disk(n)))
                .collect();
            let mut t_v = all_v.clone();
            let mut t_d = all_d.clone();
            t_v.remove(index + 1);
            t_d.remove(index + 1);
            let running = vmi("Running", all_v, all_d, json!({}));
            let p = declarative_hotplug_patch(&vm(t_v.clone(), t_d), &running).expect("a patch");
            let want: Vec<String> = t_v
                .iter()
                .map(|v| v["name"].as_str().unwrap().to_string())
                .collect();
            assert_eq!(applied(&running, &p), (want.clone(), want));
        }
    }

    // hotplug_test.go:155 "should not remove perm volume when deleted from VM".
    #[test]
    fn a_permanent_volume_stays_when_the_template_drops_it() {
        let (rv, rd) = root();
        let running = vmi("Running", vec![rv], vec![rd], json!({}));
        assert!(declarative_hotplug_patch(&vm(vec![], vec![]), &running).is_none());
    }

    // hotplug_test.go:173 "should not add hotplug volume to VMI if vmi has status for the volume".
    #[test]
    fn a_volume_still_unplugging_is_not_added_again() {
        let (rv, rd) = root();
        let running = vmi(
            "Running",
            vec![rv.clone()],
            vec![rd.clone()],
            json!({"volumeStatus": [{"name": "hp", "target": "", "phase": "Detaching"}]}),
        );
        let vm = vm(vec![rv, hp_dv("hp")], vec![rd, disk("hp")]);
        assert!(declarative_hotplug_patch(&vm, &running).is_none());
    }

    // hotplug_test.go:197 "should remove volume when volume changes": the changed volume leaves
    // the VMI first (with its disk) and comes back on a later sync.
    #[test]
    fn a_changed_hotplug_volume_is_removed_first() {
        let (rv, rd) = root();
        let running = vmi(
            "Running",
            vec![rv.clone(), hp_dv("hp")],
            vec![rd.clone(), disk("hp")],
            json!({}),
        );
        let mut changed = hp_dv("hp");
        changed["dataVolume"]["name"] = json!("other-dv");
        let p = declarative_hotplug_patch(&vm(vec![rv, changed], vec![rd, disk("hp")]), &running)
            .expect("a patch");
        assert_eq!(
            applied(&running, &p),
            (vec!["root".to_string()], vec!["root".to_string()])
        );
    }

    // hotplug_test.go:214 "should not add hotplug volume to VMI with migration updatestrategy".
    #[test]
    fn nothing_with_the_migration_update_strategy() {
        let (rv, rd) = root();
        let mut vm = vm(vec![rv.clone(), hp_dv("hp")], vec![rd.clone(), disk("hp")]);
        vm.spec.extra =
            serde_json::from_value(json!({"updateVolumesStrategy": "Migration"})).unwrap();
        assert!(
            declarative_hotplug_patch(&vm, &vmi("Running", vec![rv], vec![rd], json!({})))
                .is_none()
        );
    }

    // hotplug_test.go:229-291 "should inject / eject CD-ROM": the CD-ROM disk stays, its
    // volume comes and goes.
    #[test]
    fn a_cdrom_keeps_its_disk_while_its_volume_comes_and_goes() {
        let (rv, rd) = root();
        let cd = json!({"name": "cd", "cdrom": {"bus": "sata"}});
        let empty = vmi(
            "Running",
            vec![rv.clone()],
            vec![rd.clone(), cd.clone()],
            json!({}),
        );
        let inserted = vm(vec![rv.clone(), hp_dv("cd")], vec![rd.clone(), cd.clone()]);
        let p = declarative_hotplug_patch(&inserted, &empty).expect("inject");
        assert_eq!(
            applied(&empty, &p),
            (
                vec!["root".into(), "cd".into()],
                vec!["root".into(), "cd".into()]
            )
        );
        let full = vmi(
            "Running",
            vec![rv.clone(), hp_dv("cd")],
            vec![rd.clone(), cd.clone()],
            json!({}),
        );
        let ejected = vm(vec![rv], vec![rd, cd]);
        let p = declarative_hotplug_patch(&ejected, &full).expect("eject");
        assert_eq!(
            applied(&full, &p),
            (vec!["root".into()], vec!["root".into(), "cd".into()])
        );
    }

    #[test]
    fn a_vmi_without_volumes_gets_add_operations() {
        let vm = vm(vec![hp_pvc("hp")], vec![disk("hp")]);
        let running = vmi("Running", vec![], vec![], json!({}));
        let p = declarative_hotplug_patch(&vm, &running).expect("a patch");
        let ops: Vec<&str> = p
            .patch
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["op"].as_str().unwrap())
            .collect();
        assert_eq!(ops, ["test", "test", "add", "add"]);
        assert_eq!(
            applied(&running, &p),
            (vec!["hp".to_string()], vec!["hp".to_string()])
        );
    }
}
