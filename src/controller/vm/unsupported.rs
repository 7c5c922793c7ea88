//! Features of KubeVirt's VM controller that virtctl-rs does not model, detected so that the sync
//! stops with a clear `Failure` condition instead of silently doing something else. Each check
//! fires only where KubeVirt would act; the reasons are the ones KubeVirt uses for that step.
//!
//! Not modelled: `WaitAsReceiver` (decentralized live migration),
//! network interface hotplug/unplug, volume migration (`updateVolumesStrategy: Migration`).
//! Live updates of CPU sockets, memory, node selector/affinity and tolerations
//! ([`super::live_update`]), declarative volume hotplug ([`super::volume_hotplug`]), legacy
//! volume requests ([`super::volume_requests`]) and memory dumps ([`super::memory_dump`]) are
//! modelled.

use super::action::SyncError;
use super::reasons::sync as reason;
use crate::api::vm::VirtualMachine;
use crate::api::vmi::VirtualMachineInstance;
use serde_json::Value;

const SUFFIX: &str = "is not supported by virtctl-rs yet";

/// `WaitAsReceiver` without a VMI: creating a receiver VMI for a decentralized live migration
/// (vm.go:1166-1172).
pub(crate) fn wait_as_receiver() -> SyncError {
    SyncError::new(
        reason::FAILED_CREATE,
        format!("runStrategy WaitAsReceiver (decentralized live migration receiver) {SUFFIX}"),
    )
}

/// The network synchronizer (pkg/network/controllers/vm.go:68-104) would hotplug/unplug an
/// interface or change a VMI's multus network name: an interface with a `state` other than the
/// VMI's, a new bridge/SR-IOV interface missing from the VMI, a multus `networkName` differing
/// from the VMI's, or (without VMI) an `absent` interface to clear from the VM.
pub(crate) fn network_hotplug(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
) -> Option<SyncError> {
    let spec = vm.template_spec()?;
    let ifaces = spec.domain.devices.interfaces.as_deref().unwrap_or(&[]);
    let state = |extra: &crate::api::Extra| {
        extra.read(|m| {
            m.get("state")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
    };
    let err = |what: String| {
        Some(SyncError::new(
            reason::HOTPLUG_NETWORK_INTERFACE_ERROR,
            format!("network interface hotplug/unplug ({what}) {SUFFIX}"),
        ))
    };
    let Some(vmi) = vmi.filter(|v| !v.is_deleting()) else {
        if vmi.is_none()
            && let Some(i) = ifaces.iter().find(|i| state(&i.extra) == "absent")
        {
            return err(format!("interface {} is absent", i.name));
        }
        return None;
    };
    let vmi_ifaces = vmi.spec.domain.devices.interfaces.as_deref().unwrap_or(&[]);
    for i in ifaces {
        match vmi_ifaces.iter().find(|v| v.name == i.name) {
            None => {
                if state(&i.extra) != "absent" && (i.bridge.is_some() || i.sriov.is_some()) {
                    return err(format!("interface {} would be hotplugged", i.name));
                }
            }
            Some(v) => {
                let (want, have) = (state(&i.extra), state(&v.extra));
                if want != have && have != "absent" {
                    return err(format!("interface {} state {want:?}", i.name));
                }
            }
        }
    }
    let nad = |n: &crate::api::vmi::Network| {
        n.multus
            .as_ref()
            .and_then(|m| m.get("networkName"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    for n in vmi.spec.networks.iter().flatten() {
        if let Some(d) = spec.networks.iter().flatten().find(|d| d.name == n.name)
            && n.multus.is_some()
            && d.multus.is_some()
            && nad(d) != nad(n)
        {
            return err(format!("network {} networkName changed", n.name));
        }
    }
    None
}

/// `handleVolumeUpdateRequest` (vm.go:889-952), the last LiveUpdate handler: with
/// `updateVolumesStrategy: Migration`, volume migration.
pub(crate) fn volume_update(vm: &VirtualMachine) -> Option<SyncError> {
    if !vm
        .spec
        .extra
        .read(|m| m.get("updateVolumesStrategy").and_then(Value::as_str) == Some("Migration"))
    {
        return None;
    }
    Some(SyncError::new(
        reason::VOLUMES_UPDATE_ERROR,
        format!(
            "error encountered while handling volumes update requests: live update of volumes \
             (updateVolumesStrategy Migration) {SUFFIX}"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(spec: Value) -> VirtualMachine {
        serde_json::from_value(json!({"metadata": {"name": "vm"}, "spec": spec})).unwrap()
    }

    fn vmi(spec: Value, status: Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({"metadata": {"name": "vm"}, "spec": spec, "status": status}))
            .unwrap()
    }

    fn tmpl(spec: Value) -> Value {
        json!({"template": {"spec": spec}})
    }

    #[test]
    fn volume_migration_refused() {
        assert!(volume_update(&vm(tmpl(json!({"domain": {"devices": {}}})))).is_none());
        let mut v = vm(tmpl(json!({"domain": {"devices": {}}})));
        v.spec.extra =
            serde_json::from_value(json!({"updateVolumesStrategy": "Migration"})).unwrap();
        assert_eq!(volume_update(&v).unwrap().reason, "VolumesUpdateError");
    }

    #[test]
    fn network_hotplug_detection() {
        let spec = json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
                          "networks": [{"name": "default", "pod": {}}]});
        let v = vmi(spec.clone(), json!({}));
        assert!(network_hotplug(&vm(tmpl(spec.clone())), Some(&v)).is_none());
        let mut added = spec.clone();
        added["domain"]["devices"]["interfaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "n2", "bridge": {}}));
        assert!(network_hotplug(&vm(tmpl(added)), Some(&v)).is_some());
        let mut absent = spec;
        absent["domain"]["devices"]["interfaces"][0]["state"] = json!("absent");
        assert!(network_hotplug(&vm(tmpl(absent.clone())), Some(&v)).is_some());
        assert!(network_hotplug(&vm(tmpl(absent)), None).is_some());
    }
}
