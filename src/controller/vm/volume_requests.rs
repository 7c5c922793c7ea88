//! Legacy volume hotplug requests, the VM controller's part (`handleVolumeRequests`,
//! pkg/virt-controller/watch/vm/vm.go:808-847, and `trimDoneVolumeRequests`, vm.go:2855-2900).
//!
//! With the deprecated `HotplugVolumes` gate, virt-api's VM `addvolume`/`removevolume`
//! subresources append a request to `status.volumeRequests` (pkg/virt-api/rest/volumes.go:
//! 279-304). Each sync then applies every request to the VM template
//! (`ApplyVolumeRequestOnVMISpec`, pkg/controller/controller.go:264-321) and, for a running
//! VMI that does not have (add) or still has (remove) the volume, calls virt-api's VMI
//! `addvolume`/`removevolume` subresource, which patches the VMI spec. The status update drops a
//! request once the template shows it done. KubeVirt's controller runs this whatever the gates
//! say; only virt-api refuses requests without a hotplug gate.

use crate::api::vm::{AddVolumeOptions, RemoveVolumeOptions, VirtualMachineStatus, VolumeRequest};
use crate::api::vmi::{ClaimSource, VirtualMachineInstance, VirtualMachineInstanceSpec, Volume};
use serde_json::Value;

/// A call to virt-api's VMI volume subresource (`VirtualMachineInstance(ns).AddVolume` /
/// `RemoveVolume`, vm.go:829-843).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum VmiVolumeCall {
    Add(AddVolumeOptions),
    Remove(RemoveVolumeOptions),
}

impl VmiVolumeCall {
    /// The volume the call is about.
    pub(crate) fn volume(&self) -> &str {
        match self {
            VmiVolumeCall::Add(o) => &o.name,
            VmiVolumeCall::Remove(o) => &o.name,
        }
    }
}

/// A hotplug claim source: `hotpluggable: true` set on a copy (controller.go:280-286).
fn hotpluggable(source: &ClaimSource) -> ClaimSource {
    let mut s = source.clone();
    s.extra
        .insert("hotpluggable".to_string(), Value::Bool(true));
    s
}

/// `ApplyVolumeRequestOnVMISpec` (controller.go:264-321): an add appends the volume (its claim
/// made hotpluggable) and its disk unless a volume of that name exists; a remove drops the
/// volume and the disk of that name.
pub(crate) fn apply_on_spec(spec: &mut VirtualMachineInstanceSpec, request: &VolumeRequest) {
    if let Some(add) = &request.add_volume_options {
        let volumes = spec.volumes.get_or_insert_with(Vec::new);
        if volumes.iter().any(|v| v.name == add.name) {
            return;
        }
        let source = add.volume_source.as_ref();
        volumes.push(Volume {
            name: add.name.clone(),
            persistent_volume_claim: source
                .and_then(|s| s.persistent_volume_claim.as_ref())
                .map(hotpluggable),
            data_volume: source
                .and_then(|s| s.data_volume.as_ref())
                .map(hotpluggable),
            ..Default::default()
        });
        if let Some(disk) = &add.disk {
            let mut disk = disk.clone();
            disk.name = add.name.clone();
            spec.domain
                .devices
                .disks
                .get_or_insert_with(Vec::new)
                .push(disk);
        }
    } else if let Some(remove) = &request.remove_volume_options {
        // Go assigns the filtered (possibly empty, non-nil) lists back.
        let volumes = spec.volumes.take().unwrap_or_default();
        spec.volumes = Some(
            volumes
                .into_iter()
                .filter(|v| v.name != remove.name)
                .collect(),
        );
        let disks = spec.domain.devices.disks.take().unwrap_or_default();
        spec.domain.devices.disks = Some(
            disks
                .into_iter()
                .filter(|d| d.name != remove.name)
                .collect(),
        );
    }
}

/// `handleVolumeRequests` (vm.go:808-847) on the VM copy: every request applied to its template,
/// and the subresource calls the VMI needs, in request order (none without a VMI or for one being
/// deleted). `None` when there is no request.
pub(crate) fn handle(
    template: Option<&mut VirtualMachineInstanceSpec>,
    requests: &[VolumeRequest],
    vmi: Option<&VirtualMachineInstance>,
) -> Option<Vec<VmiVolumeCall>> {
    if requests.is_empty() {
        return None;
    }
    if let Some(spec) = template {
        for r in requests {
            apply_on_spec(spec, r);
        }
    }
    let Some(vmi) = vmi.filter(|v| !v.is_deleting()) else {
        return Some(Vec::new());
    };
    let has = |name: &str| vmi.spec.volumes.iter().flatten().any(|v| v.name == name);
    let calls = requests
        .iter()
        .filter_map(|r| {
            if let Some(add) = &r.add_volume_options {
                (!has(&add.name)).then(|| VmiVolumeCall::Add(add.clone()))
            } else if let Some(remove) = &r.remove_volume_options {
                has(&remove.name).then(|| VmiVolumeCall::Remove(remove.clone()))
            } else {
                None
            }
        })
        .collect();
    Some(calls)
}

/// `trimDoneVolumeRequests` (vm.go:2855-2900): drop the adds whose volume and disk are in the
/// template and the removes whose volume and disk are both gone. Returns how many were dropped.
pub(crate) fn trim_done(
    status: &mut VirtualMachineStatus,
    template: Option<&VirtualMachineInstanceSpec>,
) -> usize {
    let Some(requests) = status.volume_requests.as_mut() else {
        return 0;
    };
    let volume = |name: &str| {
        template
            .and_then(|t| t.volumes.as_ref())
            .is_some_and(|vs| vs.iter().any(|v| v.name == name))
    };
    let disk = |name: &str| {
        template
            .and_then(|t| t.domain.devices.disks.as_ref())
            .is_some_and(|ds| ds.iter().any(|d| d.name == name))
    };
    let before = requests.len();
    requests.retain(|r| {
        // A request with neither option is Go's `added == false` with an empty name.
        let (added, name) = match (&r.add_volume_options, &r.remove_volume_options) {
            (Some(a), _) => (true, a.name.as_str()),
            (None, Some(rm)) => (false, rm.name.as_str()),
            (None, None) => (false, ""),
        };
        let (v, d) = (volume(name), disk(name));
        let done = if added { v && d } else { !v && !d };
        !done
    });
    before - requests.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(v: Value) -> VirtualMachineInstanceSpec {
        serde_json::from_value(v).unwrap()
    }

    fn requests(v: Value) -> Vec<VolumeRequest> {
        serde_json::from_value(v).unwrap()
    }

    fn add(name: &str, claim: &str) -> Value {
        json!({"addVolumeOptions": {"name": name, "disk": {"name": name, "disk": {"bus": "scsi"}},
            "volumeSource": {"persistentVolumeClaim": {"claimName": claim}}}})
    }

    fn remove(name: &str) -> Value {
        json!({"removeVolumeOptions": {"name": name}})
    }

    fn vmi(volumes: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {"domain": {"devices": {}}, "volumes": volumes}
        }))
        .unwrap()
    }

    fn base() -> VirtualMachineInstanceSpec {
        spec(json!({
            "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
            "volumes": [{"name": "root", "containerDisk": {"image": "img"}}]
        }))
    }

    /// vm_test.go "should add/remove volumes from the template" cases, re-derived: the add puts
    /// a hotpluggable claim and its disk (named after the volume) in the template.
    #[test]
    fn an_add_goes_into_the_template_hotpluggable_with_its_disk() {
        let mut s = base();
        let reqs = requests(json!([add("data", "data-pvc")]));
        handle(Some(&mut s), &reqs, None);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["volumes"][1],
            json!({"name": "data", "persistentVolumeClaim": {"claimName": "data-pvc", "hotpluggable": true}})
        );
        assert_eq!(
            v["domain"]["devices"]["disks"][1],
            json!({"name": "data", "disk": {"bus": "scsi"}})
        );
        // Applying it again changes nothing (a volume of that name exists).
        let once = s.clone();
        handle(Some(&mut s), &reqs, None);
        assert_eq!(s, once);
    }

    #[test]
    fn a_remove_drops_the_volume_and_its_disk() {
        let mut s = base();
        handle(Some(&mut s), &requests(json!([add("data", "c")])), None);
        handle(Some(&mut s), &requests(json!([remove("data")])), None);
        assert_eq!(s.volumes.as_ref().unwrap().len(), 1);
        assert_eq!(s.domain.devices.disks.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn a_data_volume_source_is_made_hotpluggable_too() {
        let mut s = base();
        let reqs = requests(json!([{"addVolumeOptions": {"name": "dv",
            "disk": {"name": "dv", "disk": {}}, "volumeSource": {"dataVolume": {"name": "dv-1"}}}}]));
        handle(Some(&mut s), &reqs, None);
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["volumes"][1]["dataVolume"],
            json!({"name": "dv-1", "hotpluggable": true})
        );
    }

    /// vm.go:825-843: the VMI is called only for an add it lacks and a remove it still has.
    #[test]
    fn the_vmi_is_called_only_where_it_differs() {
        let reqs = requests(json!([
            add("a", "ca"),
            add("b", "cb"),
            remove("c"),
            remove("d")
        ]));
        let running = vmi(
            json!([{"name": "b", "persistentVolumeClaim": {"claimName": "cb"}},
                                {"name": "c", "persistentVolumeClaim": {"claimName": "cc"}}]),
        );
        let calls = handle(Some(&mut base()), &reqs, Some(&running)).unwrap();
        let names: Vec<_> = calls
            .iter()
            .map(|c| match c {
                VmiVolumeCall::Add(o) => format!("add {}", o.name),
                VmiVolumeCall::Remove(o) => format!("remove {}", o.name),
            })
            .collect();
        assert_eq!(names, ["add a", "remove c"]);
        assert!(handle(None, &[], Some(&running)).is_none());
        assert_eq!(handle(None, &reqs, None), Some(vec![]));
    }

    #[test]
    fn done_requests_are_trimmed_and_pending_ones_kept() {
        let mut s = base();
        let reqs = json!([
            add("data", "c"),
            remove("root"),
            remove("gone"),
            add("later", "l")
        ]);
        handle(Some(&mut s), &requests(json!([add("data", "c")])), None);
        let mut status = VirtualMachineStatus {
            volume_requests: Some(Box::new(requests(reqs))),
            ..Default::default()
        };
        // "data" is in the template: done; "root" still there: kept; "gone" is gone: done;
        // "later" not applied: kept.
        assert_eq!(trim_done(&mut status, Some(&s)), 2);
        let left: Vec<_> = status
            .volume_requests
            .unwrap()
            .iter()
            .map(|r| serde_json::to_value(r).unwrap())
            .collect();
        assert_eq!(left, [remove("root"), add("later", "l")]);
    }

    /// An add whose volume is in the template but whose disk is not is not done (vm.go:2890).
    #[test]
    fn an_add_without_its_disk_in_the_template_stays() {
        let mut s = base();
        s.volumes.as_mut().unwrap().push(Volume {
            name: "data".into(),
            ..Default::default()
        });
        let mut status = VirtualMachineStatus {
            volume_requests: Some(Box::new(requests(json!([add("data", "c")])))),
            ..Default::default()
        };
        assert_eq!(trim_done(&mut status, Some(&s)), 0);
    }
}
