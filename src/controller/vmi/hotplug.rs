//! The VMI controller's part of a CPU or memory hotplug on a Running VMI (watch/vmi/
//! lifecycle.go:502-508): once the VM controller has patched the VMI's spec
//! ([`crate::controller::vm::live_update`]), the spec's vCPUs differ from
//! `status.currentCPUTopology`, or its guest memory from `status.memory.guestRequested`, and the
//! VMI gets `HotVCPUChange` / `HotMemoryChange` = True. That condition is v1.9's request for the
//! live migration that completes the hotplug (workload-updater.go:320-325); virt-handler
//! removes it on the migration target once the guest has the new CPUs or memory
//! (migration-target.go:1130-1208). Neither the migration nor that removal is modelled.
//!
//! With the KubeVirt CR's `additionalGuestMemoryOverheadRatio` set, `syncMemoryHotplug` also
//! labels the VMI `kubevirt.io/memory-hotplug-overhead-ratio` with it (lifecycle.go:1185-1195):
//! the ratio virt-handler multiplies the launcher's memory overhead by when it checks, on the
//! migration target, that the target pod's memory request covers the hotplugged guest memory
//! plus that overhead (`hotplugMemory`, migration-target.go:1152-1186, when the VMI reports no
//! `migrationState.targetMemoryOverhead`); it removes the label afterwards.

use crate::api::Condition;
use crate::api::vmi::{Cpu, VirtualMachineInstance};
use crate::controller::vm::live_update::{HOT_MEMORY_CHANGE, HOT_VCPU_CHANGE, memory_status};
use serde_json::Value;

/// `requireCPUHotplug` (lifecycle.go:1146-1156): a current topology in the status, a CPU with
/// `maxSockets` in the spec, and a different vCPU count.
fn require_cpu_hotplug(vmi: &VirtualMachineInstance) -> bool {
    let Some(cpu) = vmi.spec.domain.cpu.as_ref() else {
        return false;
    };
    if cpu.max_sockets.unwrap_or(0) == 0 {
        return false;
    }
    let topology = vmi.status.as_ref().and_then(|s| {
        s.extra
            .field("currentCPUTopology", |t| (!t.is_null()).then(|| t.clone()))
    });
    let Some(topology) = topology else {
        return false;
    };
    let field = |k: &str| {
        topology
            .get(k)
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
    };
    let current = Cpu {
        cores: field("cores"),
        sockets: field("sockets"),
        threads: field("threads"),
        ..Default::default()
    };
    cpu.vcpus() != current.vcpus()
}

/// `requireMemoryHotplug` (lifecycle.go:1158-1163): a memory status, a guest size and
/// `maxGuest` in the spec, and a guest size other than `guestRequested` (absent counts as 0,
/// where Go would dereference nil; virt-api always sets it).
fn require_memory_hotplug(vmi: &VirtualMachineInstance) -> bool {
    let has_status = vmi.status.as_ref().is_some_and(|s| s.memory.is_some());
    let memory = vmi.spec.domain.memory.as_ref();
    let guest = memory
        .and_then(|m| m.guest.as_ref())
        .and_then(|q| crate::api::quantity::parse(q).ok());
    let (Some(guest), true, true) = (
        guest,
        has_status,
        memory.is_some_and(|m| m.max_guest.is_some()),
    ) else {
        return false;
    };
    let requested = memory_status(vmi, "guestRequested").map_or(0, |q| q.value());
    guest.value() != requested
}

/// `syncHotplugCondition` (volume-hotplug.go:269-279): `type=True` unless the VMI has a
/// condition of that type (whatever its status).
fn sync_hotplug_condition(vmi: &mut VirtualMachineInstance, type_: &str) -> bool {
    let conds = vmi
        .status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new);
    if conds.iter().any(|c| c.type_ == type_) {
        return false;
    }
    conds.push(Condition {
        type_: type_.into(),
        status: "True".into(),
        ..Default::default()
    });
    true
}

/// `v1.MemoryHotplugOverheadRatioLabel`.
pub(crate) const MEMORY_HOTPLUG_OVERHEAD_RATIO_LABEL: &str =
    "kubevirt.io/memory-hotplug-overhead-ratio";

/// The label part of `syncMemoryHotplug` (lifecycle.go:1185-1195): the configured ratio, when
/// there is one.
fn label_overhead_ratio(
    new: &mut VirtualMachineInstance,
    ratio: Option<&str>,
    expl: &mut Vec<String>,
) {
    let Some(ratio) = ratio else {
        return;
    };
    let labels = new.metadata.labels.get_or_insert_with(Default::default);
    if labels
        .get(MEMORY_HOTPLUG_OVERHEAD_RATIO_LABEL)
        .map(String::as_str)
        != Some(ratio)
    {
        labels.insert(MEMORY_HOTPLUG_OVERHEAD_RATIO_LABEL, ratio.into());
        expl.push(format!(
            "label {MEMORY_HOTPLUG_OVERHEAD_RATIO_LABEL}={ratio}: the additionalGuestMemoryOverheadRatio \
             virt-handler applies to the memory overhead when it checks the target pod's memory \
             for the hotplug (lifecycle.go:1189-1194, migration-target.go:1175-1186)"
        ));
    }
}

/// lifecycle.go:502-508 on the new VMI of a Running phase; one explanation line per condition
/// added. `overhead_ratio` is the KubeVirt CR's `additionalGuestMemoryOverheadRatio`.
pub(crate) fn sync_hotplug_conditions(
    new: &mut VirtualMachineInstance,
    overhead_ratio: Option<&str>,
    expl: &mut Vec<String>,
) {
    if require_cpu_hotplug(new) && sync_hotplug_condition(new, HOT_VCPU_CHANGE) {
        expl.push(
            "HotVCPUChange=True: the spec's vCPUs differ from status.currentCPUTopology; a live \
             migration completes the hotplug (lifecycle.go:502-504, 1146-1156)"
                .into(),
        );
    }
    if require_memory_hotplug(new) {
        if sync_hotplug_condition(new, HOT_MEMORY_CHANGE) {
            expl.push(
                "HotMemoryChange=True: the spec's guest memory differs from \
                 status.memory.guestRequested; a live migration completes the hotplug \
                 (lifecycle.go:506-508, 1158-1163, 1185-1195)"
                    .into(),
            );
        }
        label_overhead_ratio(new, overhead_ratio, expl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(spec: Value, status: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"metadata": {"name": "v"}, "spec": spec, "status": status}))
            .unwrap()
    }

    fn types(v: &VirtualMachineInstance) -> Vec<(String, String)> {
        v.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.type_.to_string(), c.status.to_string()))
            .collect()
    }

    /// vmi_test.go "CPU hotplug": the condition appears when the spec's sockets grew past the
    /// current topology, only with maxSockets, and is never added twice.
    #[test]
    fn hot_vcpu_change_follows_the_current_topology() {
        let spec = json!({"domain": {"cpu": {"sockets": 2, "cores": 1, "maxSockets": 4},
                                     "devices": {}}});
        let mut v = vmi(
            spec.clone(),
            json!({"currentCPUTopology": {"sockets": 1, "cores": 1}}),
        );
        let mut expl = Vec::new();
        sync_hotplug_conditions(&mut v, None, &mut expl);
        assert_eq!(types(&v), vec![("HotVCPUChange".into(), "True".into())]);
        assert_eq!(expl.len(), 1);
        sync_hotplug_conditions(&mut v, None, &mut expl);
        assert_eq!(types(&v).len(), 1);
        assert_eq!(expl.len(), 1);

        let mut same = vmi(
            spec,
            json!({"currentCPUTopology": {"sockets": 2, "cores": 1}}),
        );
        sync_hotplug_conditions(&mut same, None, &mut expl);
        assert!(types(&same).is_empty());
        let mut no_max = vmi(
            json!({"domain": {"cpu": {"sockets": 2}, "devices": {}}}),
            json!({"currentCPUTopology": {"sockets": 1}}),
        );
        sync_hotplug_conditions(&mut no_max, None, &mut expl);
        assert!(types(&no_max).is_empty());
    }

    /// vmi_test.go "memory hotplug": guest differs from guestRequested, with maxGuest only.
    #[test]
    fn hot_memory_change_follows_guest_requested() {
        let spec = json!({"domain": {"memory": {"guest": "2Gi", "maxGuest": "4Gi"},
                                     "devices": {}}});
        let mut v = vmi(spec.clone(), json!({"memory": {"guestRequested": "1Gi"}}));
        sync_hotplug_conditions(&mut v, None, &mut Vec::new());
        assert_eq!(types(&v), vec![("HotMemoryChange".into(), "True".into())]);
        let mut done = vmi(spec, json!({"memory": {"guestRequested": "2048Mi"}}));
        sync_hotplug_conditions(&mut done, None, &mut Vec::new());
        assert!(types(&done).is_empty());
        let mut no_max = vmi(
            json!({"domain": {"memory": {"guest": "2Gi"}, "devices": {}}}),
            json!({"memory": {"guestRequested": "1Gi"}}),
        );
        sync_hotplug_conditions(&mut no_max, None, &mut Vec::new());
        assert!(types(&no_max).is_empty());
    }

    /// vmi_test.go "should add the memory hotplug overhead ratio label": the label carries the
    /// configured ratio with a memory hotplug only.
    #[test]
    fn overhead_ratio_label_follows_the_configuration() {
        let spec = json!({"domain": {"memory": {"guest": "3Gi", "maxGuest": "6Gi"},
                                     "devices": {}}});
        let label = |v: &VirtualMachineInstance| {
            v.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(MEMORY_HOTPLUG_OVERHEAD_RATIO_LABEL).cloned())
        };
        let mut v = vmi(spec.clone(), json!({"memory": {"guestRequested": "2Gi"}}));
        let mut expl = Vec::new();
        sync_hotplug_conditions(&mut v, Some("2.25"), &mut expl);
        assert_eq!(label(&v).as_deref(), Some("2.25"));
        assert_eq!(expl.len(), 2);
        let mut unset = vmi(spec.clone(), json!({"memory": {"guestRequested": "2Gi"}}));
        sync_hotplug_conditions(&mut unset, None, &mut Vec::new());
        assert_eq!(label(&unset), None);
        let mut done = vmi(spec, json!({"memory": {"guestRequested": "3Gi"}}));
        sync_hotplug_conditions(&mut done, Some("2.25"), &mut Vec::new());
        assert_eq!(label(&done), None);
    }
}
