//! The VMI's `status.interfaces` as virt-controller writes them when it hands the VMI to
//! virt-handler and while it runs (`UpdateVMIStatus`, pkg/network/controllers/vmi.go:36-60,
//! called at lifecycle.go:415 and 498): the primary network's entry with the pod interface
//! that Multus reported as default (`eth0` without a report), then each secondary Multus
//! network the pod's `k8s.v1.cni.cncf.io/network-status` lists (or that has an entry already),
//! with its pod interface name (KubeVirt's hashed `pod<sha256[:11]>` names, or `net<N>` when the
//! pod's interfaces use the older ordinal scheme: pkg/network/namescheme); entries of
//! resource-claim (DRA) networks and of interfaces not in the spec are kept.

use crate::api::VirtualMachineInstance;
use crate::api::vmi::Network;
use crate::launcher::network::{
    hashed_interface_name, is_multus_default, is_ordinal_interface, is_secondary_multus,
};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// `networkv1.NetworkStatusAnnot`.
pub(crate) const NETWORK_STATUS_ANNOTATION: &str = "k8s.v1.cni.cncf.io/network-status";
/// `namescheme.PrimaryPodInterfaceName`.
pub(crate) const PRIMARY_POD_INTERFACE: &str = "eth0";
/// `vmispec.InfoSourceMultusStatus`.
const INFO_SOURCE_MULTUS: &str = "multus-status";

/// One entry of the pod's network-status annotation: the NAD (`namespace/name`), its pod
/// interface and whether it is the default network.
pub(crate) struct NetworkStatus {
    pub name: String,
    pub interface: String,
    pub default: bool,
}

/// `multus.NetworkStatusesFromPod` (multus/status.go:43-53): an annotation that does not parse
/// counts as none (KubeVirt logs it).
pub(crate) fn network_statuses(pod: &Pod) -> Vec<NetworkStatus> {
    let raw = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(NETWORK_STATUS_ANNOTATION));
    let Some(list) = raw.and_then(|r| serde_json::from_str::<Vec<Value>>(r).ok()) else {
        return Vec::new();
    };
    list.iter()
        .map(|s| NetworkStatus {
            name: s["name"].as_str().unwrap_or("").to_string(),
            interface: s["interface"].as_str().unwrap_or("").to_string(),
            default: s["default"].as_bool().unwrap_or(false),
        })
        .collect()
}

/// `namescheme.CreateFromNetworkStatuses` (networknamescheme.go:129-136) for one secondary
/// network: `net<N>` (N counting the secondary Multus networks from 1) when a pod interface
/// has an ordinal name (`^net\d+$`), the hashed name otherwise.
fn secondary_interface_name(networks: &[Network], name: &str, ordinal: bool) -> String {
    if !ordinal {
        return hashed_interface_name(name);
    }
    let n = networks
        .iter()
        .filter(|n| is_secondary_multus(n))
        .position(|n| n.name == name)
        .map_or(0, |i| i + 1);
    format!("net{n}")
}

/// `vmispec.AddInfoSource` / `RemoveInfoSource` (infosource.go:32-55): a `", "`-separated list.
fn with_info_source(entry: &mut Value, add: bool) {
    let current = entry["infoSource"].as_str().unwrap_or("").to_string();
    let mut sources: Vec<&str> = if current.is_empty() && add {
        Vec::new()
    } else {
        current.split(", ").collect()
    };
    if add {
        if sources.contains(&INFO_SOURCE_MULTUS) {
            return;
        }
        sources.push(INFO_SOURCE_MULTUS);
    } else {
        sources.retain(|s| *s != INFO_SOURCE_MULTUS);
    }
    let joined = sources.join(", ");
    match entry.as_object_mut() {
        Some(o) if joined.is_empty() => {
            o.remove("infoSource");
        }
        Some(o) => {
            o.insert("infoSource".into(), json!(joined));
        }
        None => {}
    }
}

/// `UpdateVMIStatus` (pkg/network/controllers/vmi.go:36-60) on `vmi` with its launcher `pod`:
/// the new `status.interfaces`, `None` when empty (the field is omitempty).
pub(crate) fn interface_status(vmi: &VirtualMachineInstance, pod: &Pod) -> Option<Vec<Value>> {
    let networks: &[Network] = vmi.spec.networks.as_deref().unwrap_or_default();
    let old = vmi.interface_status_entries();
    let old_entry = |name: &str| {
        old.iter()
            .find(|e| e["name"].as_str() == Some(name))
            .cloned()
    };
    let statuses = network_statuses(pod);
    let mut out = Vec::new();
    // calculatePrimaryIfaceStatus (vmi.go:81-104).
    if let Some(primary) = networks
        .iter()
        .find(|n| n.pod.is_some() || is_multus_default(n))
    {
        let pod_iface = statuses
            .iter()
            .find(|s| s.default && !s.interface.is_empty())
            .map_or(PRIMARY_POD_INTERFACE, |s| s.interface.as_str());
        let mut entry = old_entry(&primary.name).unwrap_or_else(|| json!({"name": primary.name}));
        entry["podInterfaceName"] = json!(pod_iface);
        out.push(entry);
    }
    // calculateSecondaryIfaceStatuses (vmi.go:106-144).
    let ordinal = statuses.iter().any(|s| is_ordinal_interface(&s.interface));
    for net in networks.iter().filter(|n| is_secondary_multus(n)) {
        let pod_iface = secondary_interface_name(networks, &net.name, ordinal);
        let reported = statuses.iter().any(|s| s.interface == pod_iface);
        let entry = match (reported, old_entry(&net.name)) {
            (true, None) => json!({
                "name": net.name, "infoSource": INFO_SOURCE_MULTUS, "podInterfaceName": pod_iface
            }),
            (reported, Some(mut e)) => {
                with_info_source(&mut e, reported);
                e["podInterfaceName"] = json!(pod_iface);
                e
            }
            (false, None) => continue,
        };
        out.push(entry);
    }
    // filterDRAIfaceStatuses and filterUnspecifiedSpecIfaces (vmi.go:62-79, 146-160).
    for e in old {
        let name = e["name"].as_str().unwrap_or("");
        match networks.iter().find(|n| n.name == name) {
            Some(n) if n.extra.read(|m| m.contains_key("resourceClaim")) => out.push(e.clone()),
            None => out.push(e.clone()),
            Some(_) => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vmi(networks: Value, interfaces: Option<Value>) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"domain": {}, "networks": networks},
            "status": {"interfaces": interfaces}
        }))
        .expect("VMI")
    }

    fn pod(network_status: Option<Value>) -> Pod {
        let annotations = network_status.map(|s| json!({NETWORK_STATUS_ANNOTATION: s.to_string()}));
        serde_json::from_value(json!({"metadata": {"name": "p", "annotations": annotations}}))
            .expect("pod")
    }

    /// networknamescheme.go:80-85: "pod" + the first 11 hex digits of sha256(name).
    #[test]
    fn hashed_names_are_sha256_prefixes() {
        // sha256("blue") = 16477688c0e00699c6cfa4497a3612d7e83c532062b64b250fed8908128ed548
        assert_eq!(hashed_interface_name("blue"), "pod16477688c0e");
    }

    /// vmi.go:81-104: the pod network's entry gets eth0 without a Multus report; existing
    /// fields (virt-handler's) are kept.
    #[test]
    fn the_pod_network_is_eth0_and_keeps_what_virt_handler_wrote() {
        let v = vmi(json!([{"name": "default", "pod": {}}]), None);
        assert_eq!(
            interface_status(&v, &pod(None)),
            Some(vec![json!({"name": "default", "podInterfaceName": "eth0"})])
        );
        let v = vmi(
            json!([{"name": "default", "pod": {}}]),
            Some(
                json!([{"name": "default", "ipAddress": "10.0.0.5", "mac": "02:00:00:00:00:01"},
                         {"name": "guest-only", "interfaceName": "eth9"}]),
            ),
        );
        assert_eq!(
            interface_status(&v, &pod(None)),
            Some(vec![
                json!({"name": "default", "ipAddress": "10.0.0.5", "mac": "02:00:00:00:00:01",
                       "podInterfaceName": "eth0"}),
                json!({"name": "guest-only", "interfaceName": "eth9"}),
            ])
        );
        assert_eq!(interface_status(&vmi(json!([]), None), &pod(None)), None);
    }

    /// vmi.go:106-144 with namescheme.CreateFromNetworkStatuses: a secondary network Multus
    /// reported gets its hashed (or, on an ordinal pod, `net<N>`) name and the multus source.
    #[test]
    fn secondary_networks_reported_by_multus_get_their_pod_interface() {
        let nets = json!([
            {"name": "default", "pod": {}},
            {"name": "blue", "multus": {"networkName": "blue-nad"}},
            {"name": "red", "multus": {"networkName": "red-nad"}}
        ]);
        let hashed = pod(Some(json!([
            {"name": "k8s-pod-network", "interface": "eth0", "default": true},
            {"name": "ns/blue-nad", "interface": "pod16477688c0e"}
        ])));
        assert_eq!(
            interface_status(&vmi(nets.clone(), None), &hashed),
            Some(vec![
                json!({"name": "default", "podInterfaceName": "eth0"}),
                json!({"name": "blue", "infoSource": "multus-status", "podInterfaceName": "pod16477688c0e"}),
            ])
        );
        let ordinal = pod(Some(json!([
            {"name": "k8s-pod-network", "interface": "eth0", "default": true},
            {"name": "ns/blue-nad", "interface": "net1"},
            {"name": "ns/red-nad", "interface": "net2"}
        ])));
        let with_old = vmi(
            nets,
            Some(json!([{"name": "red", "infoSource": "domain, multus-status", "mac": "m"}])),
        );
        assert_eq!(
            interface_status(&with_old, &ordinal).expect("interfaces")[1..],
            [
                json!({"name": "blue", "infoSource": "multus-status", "podInterfaceName": "net1"}),
                json!({"name": "red", "infoSource": "domain, multus-status", "mac": "m",
                       "podInterfaceName": "net2"}),
            ]
        );
    }
}
