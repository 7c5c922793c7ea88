//! The VM controller's network synchronizer (KubeVirt v1.9.0 pkg/network/controllers/vm.go,
//! `VMController.Sync`, called by `sync` at pkg/virt-controller/watch/vm/vm.go:3312-3319 on
//! every sync, whatever the rollout strategy): interface hotplug and unplug, and the live update
//! of a Multus network's NAD reference (`LiveUpdateNADRef`, GA in v1.9).
//!
//! With a running VMI (not being deleted):
//! - a template interface missing from the VMI, not `state: absent`, with `bridge` or `sriov`
//!   binding is appended to the VMI's interfaces, its network to the VMI's networks
//!   (`applyDynamicIfaceRequestOnVMI`, vm.go:149-181);
//! - an interface whose `state` differs from the VMI's gets the template's state, unless the VMI's
//!   is already `absent`, and not `absent` when the VMI's pod may use ordinal interface names
//!   (`HasOrdinalSecondaryIfaces`, networknamescheme.go:180-200: unknown counts as ordinal);
//! - interfaces of the VMI that are `absent` and gone from `status.interfaces` are dropped with
//!   their networks (`clearDetachedIfacesFromVMI`, vm.go:200-214);
//! - a Multus network's `networkName` is taken from the template (`syncNetworks`,
//!   vm.go:183-198);
//! - the VMI is patched once (`test` and `add` of both lists, vm.go:128-147).
//!
//! Then the VM's own template drops the `absent` interfaces the VMI no longer has in its spec or
//! status (`clearDetachedIfacesFromVM`, vm.go:216-234), which `sync` persists with its Update.
//! Whether a network change needs a restart instead is [`super::restart_required`]'s
//! `network_restart_required` (pkg/network/vmliveupdate/restart.go); the migration that
//! completes a hotplug is requested by the VMI controller's `MigrationRequired` condition
//! ([`crate::controller::vmi::migration_required`]).
//!
//! Under `--kubevirt-version main` (KubeVirt PR 18194, "Restart required for NAD hotswap on non
//! migratable VMs") a NAD reference is synced only to a VMI with `LiveMigratable=True`; for any
//! other the change needs a restart.

use super::live_update::VmiPatch;
use crate::api::vm::VirtualMachine;
use crate::api::vmi::{Interface, Network, VirtualMachineInstance};
use crate::controller::common::PatchSet;
use crate::controller::common::patch::path;
use crate::controller::common::semantic_eq;
use crate::kubevirt_version::ControllerRules;
use crate::launcher::network::{is_ordinal_interface, is_secondary_multus, multus_network_name};
use serde_json::{Value, json};

/// `v1.InterfaceStateAbsent`.
const ABSENT: &str = "absent";

/// What the synchronizer does for one VM.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NetSync {
    /// The VMI's interfaces and networks patch (`vmiInterfacesPatch`), when either changes.
    pub vmi_patch: Option<VmiPatch>,
    /// The template's interfaces and networks once the unplugged ones are cleared, when that
    /// removes any.
    pub template: Option<(Vec<Interface>, Vec<Network>)>,
}

/// Can a NAD reference change reach `vmi` live? Always in v1.9; under PR 18194's rule
/// ([`ControllerRules::nad_ref_update_needs_migratable`]) only with `LiveMigratable=True`
/// (`IsMigratable`, which counts a missing condition as not migratable).
pub(crate) fn nad_live_update(rules: &ControllerRules, vmi: &VirtualMachineInstance) -> bool {
    !rules.nad_ref_update_needs_migratable.value
        || vmi
            .condition("LiveMigratable")
            .is_some_and(|c| c.status == "True")
}

/// An interface's `state` (`""` when unset).
pub(crate) fn iface_state(i: &Interface) -> String {
    i.extra
        .read(|m| m.get("state").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default()
}

fn set_state(i: &mut Interface, state: &str) {
    if state.is_empty() {
        i.extra.remove("state");
    } else {
        i.extra.insert("state".into(), json!(state));
    }
}

/// The names of the VMI's `status.interfaces` entries, with their pod interface names.
fn status_entries(vmi: &VirtualMachineInstance) -> Vec<(String, String)> {
    vmi.interface_status_entries()
        .iter()
        .map(|e| {
            let field = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            (field("name"), field("podInterfaceName"))
        })
        .collect()
}

/// `namescheme.HasOrdinalSecondaryIfaces` (networknamescheme.go:180-200): the first secondary
/// Multus network whose status has a pod interface name decides; with none, assume ordinal.
fn has_ordinal_secondary_ifaces(networks: &[Network], statuses: &[(String, String)]) -> bool {
    let secondary: Vec<&Network> = networks.iter().filter(|n| is_secondary_multus(n)).collect();
    if secondary.is_empty() {
        return false;
    }
    for net in secondary {
        if let Some((_, pod_iface)) = statuses
            .iter()
            .find(|(n, p)| *n == net.name && !p.is_empty())
        {
            return is_ordinal_interface(pod_iface);
        }
    }
    true
}

/// `FilterNetworksByInterfaces` (vmispec/network.go:110-119): in interface order.
fn networks_of(nets: &[Network], ifaces: &[Interface]) -> Vec<Network> {
    ifaces
        .iter()
        .filter_map(|i| nets.iter().find(|n| n.name == i.name).cloned())
        .collect()
}

/// `applyDynamicIfaceRequestOnVMI` (vm.go:149-181).
fn apply_dynamic_requests(
    tmpl_ifaces: &[Interface],
    tmpl_nets: &[Network],
    ifaces: &mut Vec<Interface>,
    nets: &mut Vec<Network>,
    ordinal: bool,
) {
    for want in tmpl_ifaces {
        let want_state = iface_state(want);
        match ifaces.iter_mut().find(|i| i.name == want.name) {
            None => {
                if want_state != ABSENT && (want.bridge.is_some() || want.sriov.is_some()) {
                    // A template interface without its network appends Go's zero Network.
                    let net = tmpl_nets.iter().find(|n| n.name == want.name);
                    nets.push(net.cloned().unwrap_or_default());
                    ifaces.push(want.clone());
                }
            }
            Some(have) => {
                let have_state = iface_state(have);
                if want_state != have_state
                    && have_state != ABSENT
                    && !(ordinal && want_state == ABSENT)
                {
                    set_state(have, &want_state);
                }
            }
        }
    }
}

/// `syncNetworks` (vm.go:183-198): a Multus network of the VMI takes the template's
/// `networkName`.
fn sync_nad_names(tmpl_nets: &[Network], nets: &mut [Network]) {
    for net in nets.iter_mut() {
        let Some(want) = tmpl_nets.iter().find(|n| n.name == net.name) else {
            continue;
        };
        let name = multus_network_name(want).to_string();
        if let (Some(_), Some(m)) = (want.multus.as_ref(), net.multus.as_mut())
            && let Some(obj) = m.as_object_mut()
            && obj.get("networkName").and_then(Value::as_str) != Some(name.as_str())
        {
            obj.insert("networkName".into(), json!(name));
        }
    }
}

/// `VMController.Sync` (vm.go:69-107) on `vm` and its VMI. `sync_nad` is false where the NAD
/// reference must not reach the VMI (PR 18194 on a VMI that is not `LiveMigratable`).
pub(crate) fn sync(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    sync_nad: bool,
) -> NetSync {
    let Some(spec) = vm.template_spec() else {
        return NetSync::default();
    };
    if vmi.is_some_and(VirtualMachineInstance::is_deleting) {
        return NetSync::default();
    }
    let tmpl_ifaces = spec.interfaces();
    let tmpl_nets = spec.networks.as_deref().unwrap_or_default();
    let mut out = NetSync::default();
    let mut statuses = Vec::new();
    let mut vmi_ifaces: Vec<Interface> = Vec::new();
    if let Some(vmi) = vmi {
        statuses = status_entries(vmi);
        let have_nets = vmi.spec.networks.as_deref().unwrap_or_default();
        let have_ifaces = vmi.spec.interfaces();
        let mut ifaces = have_ifaces.to_vec();
        let mut nets = have_nets.to_vec();
        let ordinal = has_ordinal_secondary_ifaces(have_nets, &statuses);
        apply_dynamic_requests(tmpl_ifaces, tmpl_nets, &mut ifaces, &mut nets, ordinal);
        let in_status = |name: &str| statuses.iter().any(|(n, _)| n == name);
        ifaces.retain(|i| iface_state(i) != ABSENT || in_status(&i.name));
        let mut nets = networks_of(&nets, &ifaces);
        if sync_nad {
            sync_nad_names(tmpl_nets, &mut nets);
        }
        if !semantic_eq(&ifaces[..], have_ifaces) || !semantic_eq(&nets[..], have_nets) {
            out.vmi_patch = Some(interfaces_patch(vmi, &ifaces, &nets));
        }
        vmi_ifaces = ifaces;
    }
    // clearDetachedIfacesFromVM (vm.go:216-234).
    let keep = |i: &&Interface| {
        iface_state(i) != ABSENT
            || vmi_ifaces.iter().any(|v| v.name == i.name)
            || statuses.iter().any(|(n, _)| *n == i.name)
    };
    let kept: Vec<Interface> = tmpl_ifaces.iter().filter(keep).cloned().collect();
    if kept.len() != tmpl_ifaces.len() {
        let nets = networks_of(tmpl_nets, &kept);
        out.template = Some((kept, nets));
    }
    out
}

/// `vmiInterfacesPatch` (vm.go:128-147): test and add of `/spec/networks`, then of
/// `/spec/domain/devices/interfaces`.
fn interfaces_patch(
    vmi: &VirtualMachineInstance,
    ifaces: &[Interface],
    nets: &[Network],
) -> VmiPatch {
    let nets_at = path(&["spec", "networks"]);
    let ifaces_at = path(&["spec", "domain", "devices", "interfaces"]);
    let mut p = PatchSet::new();
    p.test(nets_at.clone(), &vmi.spec.networks)
        .add(nets_at, &nets)
        .test(ifaces_at.clone(), &vmi.spec.domain.devices.interfaces)
        .add(ifaces_at, &ifaces);
    let have = vmi.spec.interfaces();
    let mut what = Vec::new();
    for i in ifaces {
        match have.iter().find(|h| h.name == i.name) {
            None => what.push(format!("hotplug interface {}", i.name)),
            Some(h) if iface_state(h) != iface_state(i) => {
                what.push(format!("interface {} state {:?}", i.name, iface_state(i)));
            }
            Some(_) => {}
        }
    }
    for h in have {
        if !ifaces.iter().any(|i| i.name == h.name) {
            what.push(format!("drop unplugged interface {}", h.name));
        }
    }
    let old_nets = vmi.spec.networks.as_deref().unwrap_or_default();
    for n in nets {
        if let Some(o) = old_nets.iter().find(|o| o.name == n.name)
            && o.multus.is_some()
            && multus_network_name(o) != multus_network_name(n)
        {
            what.push(format!(
                "network {} NAD {} → {}",
                n.name,
                multus_network_name(o),
                multus_network_name(n)
            ));
        }
    }
    VmiPatch {
        patch: p.into_value(),
        why: format!(
            "network synchronizer: {} (vmiInterfacesPatch, pkg/network/controllers/vm.go:128-147)",
            what.join(", ")
        ),
    }
}

#[cfg(test)]
#[path = "net_sync_tests.rs"]
mod tests;
