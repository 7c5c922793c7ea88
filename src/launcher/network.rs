//! The launcher pod's network side that KubeVirt's network packages add: the Multus annotations
//! of the network annotation generator, the pod interface names they ask for, the network
//! binding plugins registered in the KubeVirt CR, and the device-plugin resources of Multus
//! networks read from their NetworkAttachmentDefinitions.
//!
//! KubeVirt v1.9.0:
//! - `Generator.Generate` (pkg/network/pod/annotations/generator.go:52-88): interfaces whose
//!   `state` is `absent` and their networks are left out; `k8s.v1.cni.cncf.io/networks` lists,
//!   in interface order, each secondary Multus network and each binding plugin with a
//!   `networkAttachmentDefinition`; the first Multus network marked `default: true` becomes
//!   `v1.multus-cni.io/default-network`.
//! - `GenerateCNIAnnotationFromNameScheme` (pkg/network/multus/annotation.go:51-160): the JSON
//!   of `NetworkSelectionElement`s (`name`, `namespace`, `mac`, `interface`, `cni-args`, in the
//!   field order of network-attachment-definition-client v1.7.7 types.go:140-171).
//! - `CreateHashedNetworkNameScheme` (pkg/network/namescheme/networknamescheme.go:38-81): a
//!   secondary network's pod interface is `pod` + the first 11 hex digits of SHA-256(network
//!   name); the default Multus network is `eth0`.
//! - `NetAttachDefNamespacedName` (pkg/network/multus/nad.go:32-46): `ns/name` or the VMI's
//!   namespace; `NetworkToResource` (nad.go:48-70): a GET of every Multus network's NAD, its
//!   `k8s.v1.cni.cncf.io/resourceName` annotation, only when the Beta gate
//!   `ExternalNetResourceInjection` is disabled (template.go:427-433).
//! - `GenerateFromActivePod` (generator.go:116-165): the `kubevirt.io/network-info` annotation
//!   the VMI controller keeps on a ready pod, from Multus' `network-status`
//!   ([`network_info_annotation`]).

use super::resources::{NamespaceContext, RenderLookups};
use crate::api::vmi::{Interface, Network, VirtualMachineInstance};
use crate::config::{ClusterSettings, NetworkBindingPlugin};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// The Multus network selection annotation (`networkv1.NetworkAttachmentAnnot`).
pub(crate) const MULTUS_NETWORKS: &str = "k8s.v1.cni.cncf.io/networks";
/// The Multus default-network override (`multus.DefaultNetworkCNIAnnotation`, annotation.go:33).
pub(crate) const MULTUS_DEFAULT_NETWORK: &str = "v1.multus-cni.io/default-network";
/// The NAD annotation naming its device-plugin resource (`multus.ResourceNameAnnotation`).
pub(crate) const RESOURCE_NAME_ANNOTATION: &str = "k8s.v1.cni.cncf.io/resourceName";
/// The Beta gate that stops the VMI controller from reading NADs (featuregate/active.go:160-164).
pub(crate) const EXTERNAL_NET_RESOURCE_INJECTION: &str = "ExternalNetResourceInjection";
/// `downwardAPI: device-info` of a binding plugin (`v1.DeviceInfo`).
pub(crate) const DEVICE_INFO: &str = "device-info";

/// One element of the Multus annotation (`NetworkSelectionElement`), fields in its JSON order.
#[derive(Debug, Serialize)]
struct SelectionElement<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    mac: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    interface: &'a str,
    #[serde(rename = "cni-args", skip_serializing_if = "Option::is_none")]
    cni_args: Option<BTreeMap<&'static str, &'a str>>,
}

fn multus_field<'a>(net: &'a Network, key: &str) -> Option<&'a Value> {
    net.multus.as_deref().and_then(|m| m.get(key))
}

/// `multus.networkName` of a Multus network (`""` for any other).
pub(crate) fn multus_network_name(net: &Network) -> &str {
    multus_field(net, "networkName")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

pub(crate) fn is_multus_default(net: &Network) -> bool {
    multus_field(net, "default")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// `vmispec.IsSecondaryMultusNetwork`: a Multus network not marked `default`.
pub(crate) fn is_secondary_multus(net: &Network) -> bool {
    net.multus.is_some() && !is_multus_default(net)
}

/// `namescheme.GenerateHashedInterfaceName`: `pod` + 11 hex digits of SHA-256(network name).
pub(crate) fn hashed_interface_name(network: &str) -> String {
    let digest = Sha256::digest(network.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("pod{}", &hex[..11])
}

/// `namescheme.OrdinalSecondaryInterfaceName`'s pattern: `net` and digits, the pod interface
/// names of the scheme before hashed names.
pub(crate) fn is_ordinal_interface(interface: &str) -> bool {
    interface
        .strip_prefix("net")
        .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// `NetAttachDefNamespacedName`: `(namespace, name)` of `ns/name`, or `name` in `namespace`.
pub(crate) fn nad_namespaced_name(namespace: &str, full_name: &str) -> (String, String) {
    match full_name.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (namespace.to_string(), full_name.to_string()),
    }
}

/// The binding plugin an interface names (`binding.name`; `""` for a `binding` without one,
/// which no registration matches, as in KubeVirt).
pub(crate) fn binding_name(iface: &Interface) -> Option<&str> {
    iface
        .binding
        .as_deref()
        .map(|b| b.get("name").and_then(Value::as_str).unwrap_or_default())
}

fn interfaces(vmi: &VirtualMachineInstance) -> &[Interface] {
    vmi.spec.interfaces()
}

fn networks(vmi: &VirtualMachineInstance) -> &[Network] {
    vmi.spec.networks.as_deref().unwrap_or_default()
}

/// The interfaces that are not `state: absent` and their networks, in interface order
/// (`FilterInterfacesSpec`, `FilterNetworksByInterfaces`, generator.go:53-56).
fn present(vmi: &VirtualMachineInstance) -> Vec<(&Interface, &Network)> {
    interfaces(vmi)
        .iter()
        .filter(|i| i.extra.get("state").and_then(Value::as_str) != Some("absent"))
        .filter_map(|i| {
            networks(vmi)
                .iter()
                .find(|n| n.name == i.name)
                .map(|n| (i, n))
        })
        .collect()
}

/// `GenerateCNIAnnotationFromNameScheme` (annotation.go:60-101) for the interface/network
/// pairs: each secondary Multus network with its pod interface from `names`, each binding
/// plugin with a NAD; `None` when there is none.
fn selection_annotation(
    vmi: &VirtualMachineInstance,
    pairs: &[(&Interface, &Network)],
    names: &BTreeMap<String, String>,
    bindings: &BTreeMap<String, NetworkBindingPlugin>,
) -> Result<Option<String>, String> {
    let namespace = vmi.metadata.namespace.as_deref().unwrap_or_default();
    let mut elements = Vec::new();
    for (iface, net) in pairs {
        if is_secondary_multus(net) {
            let nad = nad_namespaced_name(namespace, multus_network_name(net));
            let interface = names.get(&net.name).cloned().unwrap_or_default();
            elements.push((nad, iface.extra.get("macAddress"), interface, None));
        }
        if let Some(plugin) = binding_name(iface) {
            let Some(registered) = bindings.get(plugin) else {
                return Err(format!(
                    "unable to find the network binding plugin '{plugin}' in Kubevirt configuration"
                ));
            };
            if let Some(nad) = registered.network_attachment_definition.as_deref() {
                let nad = nad_namespaced_name(namespace, nad);
                elements.push((nad, None, String::new(), Some(net.name.as_str())));
            }
        }
    }
    if elements.is_empty() {
        return Ok(None);
    }
    let json: Vec<SelectionElement> = elements
        .iter()
        .map(|((ns, name), mac, interface, logic)| SelectionElement {
            name,
            namespace: ns,
            mac: mac.and_then(|m| m.as_str()).unwrap_or_default(),
            interface,
            cni_args: logic.map(|l| BTreeMap::from([("logicNetworkName", l)])),
        })
        .collect();
    serde_json::to_string(&json)
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The network generator's Multus annotations for `vmi` (none without Multus networks or
/// binding plugins with a NAD). Errors with KubeVirt's text when an interface names a binding
/// plugin the KubeVirt CR does not register (annotation.go:138-141).
pub(crate) fn multus_annotations(
    vmi: &VirtualMachineInstance,
    bindings: &BTreeMap<String, NetworkBindingPlugin>,
) -> Result<BTreeMap<String, String>, String> {
    let present = present(vmi);
    let names: BTreeMap<String, String> = present
        .iter()
        .map(|(_, n)| (n.name.clone(), hashed_interface_name(&n.name)))
        .collect();
    let mut out = BTreeMap::new();
    if let Some(text) = selection_annotation(vmi, &present, &names, bindings)? {
        out.insert(MULTUS_NETWORKS.to_string(), text);
    }
    if let Some(default) = networks(vmi).iter().find(|n| is_multus_default(n)) {
        out.insert(
            MULTUS_DEFAULT_NETWORK.to_string(),
            multus_network_name(default).to_string(),
        );
    }
    Ok(out)
}

/// Does the pod get the `network-info-annotation` downward-API volume: an SR-IOV interface, or
/// an interface of a binding plugin with `downwardAPI: device-info` (template.go:994-1000).
pub(crate) fn needs_network_info(vmi: &VirtualMachineInstance, settings: &ClusterSettings) -> bool {
    interfaces(vmi).iter().any(|i| {
        i.sriov.is_some()
            || binding_name(i)
                .and_then(|b| settings.network_bindings.get(b))
                .is_some_and(|p| p.downward_api.as_deref() == Some(DEVICE_INFO))
    })
}

/// The NADs (`(namespace, name)`) KubeVirt GETs while rendering `vmi`: every Multus network's,
/// when the gate `ExternalNetResourceInjection` is disabled; none otherwise.
pub(crate) fn wanted_nads(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
) -> Vec<(String, String)> {
    if settings.gate_enabled(EXTERNAL_NET_RESOURCE_INJECTION, true) {
        return Vec::new();
    }
    let namespace = vmi.metadata.namespace.as_deref().unwrap_or_default();
    networks(vmi)
        .iter()
        .filter(|n| n.multus.is_some())
        .map(|n| nad_namespaced_name(namespace, multus_network_name(n)))
        .collect()
}

/// `NetworkToResource`: network name → its NAD's resource name (`""` without one), read from
/// `ns.lookups`. Empty when the gate is on (KubeVirt reads nothing) or the NADs were not read.
/// Errors with KubeVirt's text for a NAD the GET did not return (nad.go:61-63).
pub(crate) fn network_to_resource(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    ns: &NamespaceContext,
) -> Result<BTreeMap<String, String>, String> {
    let Some(RenderLookups {
        network_attachment_definitions: nads,
        ..
    }) = ns.lookups.as_ref()
    else {
        return Ok(BTreeMap::new());
    };
    if settings.gate_enabled(EXTERNAL_NET_RESOURCE_INJECTION, true) {
        return Ok(BTreeMap::new());
    }
    let namespace = vmi.metadata.namespace.as_deref().unwrap_or_default();
    let mut out = BTreeMap::new();
    for net in networks(vmi).iter().filter(|n| n.multus.is_some()) {
        let (nad_ns, nad_name) = nad_namespaced_name(namespace, multus_network_name(net));
        let key = format!("{nad_ns}/{nad_name}");
        match nads.get(&key) {
            Some(Some(resource)) => {
                out.insert(net.name.clone(), resource.clone());
            }
            _ => {
                return Err(format!(
                    "failed to locate network attachment definition {key}"
                ));
            }
        }
    }
    Ok(out)
}

/// The Multus annotation listing the pod's attachments (`networkv1.NetworkStatusAnnot`).
pub(crate) const MULTUS_NETWORK_STATUS: &str = "k8s.v1.cni.cncf.io/network-status";
/// The annotation the network-info volume exposes (`downwardapi.NetworkInfoAnnot`).
pub(crate) const NETWORK_INFO: &str = "kubevirt.io/network-info";

/// Declares a Multus device-info struct: string fields, each omitted when empty, in Go's order
/// (network-attachment-definition-client v1.7.7 types.go:53-101).
macro_rules! device_struct {
    ($name:ident { $($field:ident => $json:literal),+ $(,)? }) => {
        #[derive(Debug, Default, Serialize, serde::Deserialize)]
        struct $name {
            $(#[serde(rename = $json, default, skip_serializing_if = "String::is_empty")]
            $field: String,)+
        }
    };
}
device_struct!(PciDevice { pci_address => "pci-address", vhost_net => "vhost-net",
    rdma_device => "rdma-device", pf_pci_address => "pf-pci-address",
    representor_device => "representor-device" });
device_struct!(VdpaDevice { parent_device => "parent-device", driver => "driver", path => "path",
    pci_address => "pci-address", pf_pci_address => "pf-pci-address",
    representor_device => "representor-device" });
device_struct!(VhostDevice { mode => "mode", path => "path" });
device_struct!(MemifDevice { role => "role", path => "path", mode => "mode" });

/// Multus' `DeviceInfo`.
#[derive(Debug, Default, Serialize, serde::Deserialize)]
struct DeviceInfo {
    #[serde(rename = "type", default, skip_serializing_if = "String::is_empty")]
    type_: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pci: Option<PciDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    vdpa: Option<VdpaDevice>,
    #[serde(
        rename = "vhost-user",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    vhost_user: Option<VhostDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    memif: Option<MemifDevice>,
}

/// The fields of a Multus `NetworkStatus` the network-info annotation uses.
#[derive(Debug, serde::Deserialize)]
struct NetworkStatus {
    #[serde(default)]
    interface: String,
    #[serde(default)]
    mac: String,
    #[serde(default)]
    mtu: i64,
    #[serde(rename = "device-info", default)]
    device_info: Option<DeviceInfo>,
}

/// One interface of the network-info annotation (pkg/network/downwardapi/types.go).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct InfoInterface<'a> {
    network: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    device_info: Option<&'a DeviceInfo>,
    #[serde(skip_serializing_if = "str::is_empty")]
    mac: &'a str,
    #[serde(skip_serializing_if = "is_zero")]
    mtu: i64,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// `CreateFromNetworkStatuses` (networknamescheme.go:103-109): network name → pod interface
/// name, ordinal (`net1`, `net2`, … for the secondary Multus networks) when the pod's statuses
/// use ordinal names, hashed otherwise; the default Multus network is `eth0`.
fn pod_interface_names(
    networks: &[Network],
    statuses: &[NetworkStatus],
) -> BTreeMap<String, String> {
    let ordinal = statuses.iter().any(|s| is_ordinal_interface(&s.interface));
    let mut names = BTreeMap::new();
    for (i, net) in networks
        .iter()
        .filter(|n| is_secondary_multus(n))
        .enumerate()
    {
        let name = if ordinal {
            format!("net{}", i + 1)
        } else {
            hashed_interface_name(&net.name)
        };
        names.insert(net.name.clone(), name);
    }
    if let Some(default) = networks.iter().find(|n| is_multus_default(n)) {
        names.insert(default.name.clone(), "eth0".to_string());
    }
    names
}

/// The `kubevirt.io/network-info` value the VMI controller keeps on a ready launcher pod
/// (`GenerateFromActivePod`, generator.go:116-165; `CreateNetworkInfoAnnotationValue`,
/// downwardapi/networkinfo.go): for each SR-IOV interface and each interface of a binding
/// plugin with `downwardAPI: device-info`, the Multus network status of its pod interface
/// (`pod_annotations[k8s.v1.cni.cncf.io/network-status]`): device info, MAC, MTU, sorted by
/// network name. `None` when no such interface has a status (or the statuses do not parse, which
/// KubeVirt logs and treats as none).
pub(crate) fn network_info_annotation(
    vmi: &VirtualMachineInstance,
    bindings: &BTreeMap<String, NetworkBindingPlugin>,
    pod_annotations: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    let device_info = |i: &&Interface| {
        i.sriov.is_some()
            || binding_name(i)
                .and_then(|b| bindings.get(b))
                .is_some_and(|p| p.downward_api.as_deref() == Some(DEVICE_INFO))
    };
    let ifaces: Vec<&Interface> = interfaces(vmi).iter().filter(device_info).collect();
    if ifaces.is_empty() {
        return None;
    }
    let text = pod_annotations.and_then(|a| a.get(MULTUS_NETWORK_STATUS))?;
    let statuses: Vec<NetworkStatus> = serde_json::from_str(text).unwrap_or_default();
    let names = pod_interface_names(networks(vmi), &statuses);
    let mut out: Vec<InfoInterface> = ifaces
        .iter()
        .filter_map(|iface| {
            let pod_iface = names
                .get(&iface.name)
                .map(String::as_str)
                .unwrap_or_default();
            let status = statuses.iter().rev().find(|s| s.interface == pod_iface)?;
            Some(InfoInterface {
                network: &iface.name,
                device_info: status.device_info.as_ref(),
                mac: &status.mac,
                mtu: status.mtu,
            })
        })
        .collect();
    if out.is_empty() {
        return None;
    }
    out.sort_by(|a, b| a.network.cmp(b.network));
    #[derive(Serialize)]
    struct NetworkInfo<'a> {
        interfaces: Vec<InfoInterface<'a>>,
    }
    serde_json::to_string(&NetworkInfo { interfaces: out }).ok()
}

/// The Multus networks annotation the VMI controller puts on a ready launcher pod while an
/// interface is hotplugged or unplugged (`generateMultusAnnotation`, generator.go:130-162, with
/// `ifacesAndNetsForMultusAnnotationUpdate`, 190-216): only when some interface is `absent` or
/// some non-absent one has no `status.interfaces` entry; the interfaces that are not `absent`
/// (an SR-IOV one only once it has an entry), pod interface names as the pod's network status
/// uses them (ordinal or hashed). `None` when nothing is to change: no hot(un)plug, a binding
/// plugin missing from the KubeVirt CR (KubeVirt skips the update), or the pod has it already.
pub(crate) fn hotplug_multus_annotation(
    vmi: &VirtualMachineInstance,
    bindings: &BTreeMap<String, NetworkBindingPlugin>,
    pod_annotations: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    let entries = vmi.interface_status_entries();
    let in_status = |i: &Interface| {
        entries
            .iter()
            .any(|e| e["name"].as_str() == Some(i.name.as_str()))
    };
    let is_absent = |i: &Interface| i.extra.get("state").and_then(Value::as_str) == Some("absent");
    let all = interfaces(vmi);
    let unplug = all.iter().any(is_absent);
    let annotate: Vec<&Interface> = all
        .iter()
        .filter(|i| !is_absent(i) && (i.sriov.is_none() || in_status(i)))
        .collect();
    let hotplug = annotate.iter().any(|i| !in_status(i));
    if !hotplug && !unplug {
        return None;
    }
    let pairs: Vec<(&Interface, &Network)> = annotate
        .iter()
        .filter_map(|i| {
            networks(vmi)
                .iter()
                .find(|n| n.name == i.name)
                .map(|n| (*i, n))
        })
        .collect();
    let nets: Vec<Network> = pairs.iter().map(|(_, n)| (*n).clone()).collect();
    let statuses: Vec<NetworkStatus> = pod_annotations
        .and_then(|a| a.get(MULTUS_NETWORK_STATUS))
        .and_then(|t| serde_json::from_str(t).ok())
        .unwrap_or_default();
    let names = pod_interface_names(&nets, &statuses);
    let updated = selection_annotation(vmi, &pairs, &names, bindings)
        .ok()?
        .unwrap_or_default();
    let current = pod_annotations
        .and_then(|a| a.get(MULTUS_NETWORKS))
        .map_or("", String::as_str);
    (updated != current).then_some(updated)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::test_vmi as vmi;
    use serde_json::json;

    fn binding(nad: Option<&str>) -> NetworkBindingPlugin {
        NetworkBindingPlugin {
            network_attachment_definition: nad.map(str::to_string),
            ..Default::default()
        }
    }

    /// networknamescheme_test.go: the hashed names of `blue` and `red` (SHA-256 prefixes).
    #[test]
    fn hashed_names_are_sha256_prefixes() {
        assert_eq!(hashed_interface_name("blue"), "pod16477688c0e");
        assert_eq!(hashed_interface_name("red"), "podb1f51a511f1");
    }

    /// annotation_test.go "should add network binding plugin net-attach-def to multus
    /// annotation": a binding plugin's NAD with the logical network name, then the secondary
    /// networks, another namespace kept.
    #[test]
    fn binding_plugin_nad_and_secondary_networks() {
        let v = vmi(json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "binding": {"name": "test-binding"}},
                {"name": "blue"}, {"name": "red"}]}},
            "networks": [{"name": "default", "pod": {}},
                {"name": "blue", "multus": {"networkName": "test1"}},
                {"name": "red", "multus": {"networkName": "other-namespace/test1"}}]}));
        let bindings = BTreeMap::from([(
            "test-binding".to_string(),
            binding(Some("test-binding-net")),
        )]);
        let got = multus_annotations(&v, &bindings).unwrap();
        let value: Value = serde_json::from_str(&got[MULTUS_NETWORKS]).unwrap();
        assert_eq!(
            value,
            json!([
                {"name": "test-binding-net", "namespace": "default", "cni-args": {"logicNetworkName": "default"}},
                {"name": "test1", "namespace": "default", "interface": "pod16477688c0e"},
                {"name": "test1", "namespace": "other-namespace", "interface": "podb1f51a511f1"}
            ])
        );
        assert!(!got.contains_key(MULTUS_DEFAULT_NETWORK));
    }

    /// annotation_test.go: an unregistered binding plugin is an error.
    #[test]
    fn unregistered_binding_plugin_is_an_error() {
        let v = vmi(json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "binding": {"name": "test-binding"}}]}},
            "networks": [{"name": "default", "pod": {}}]}));
        let bindings = BTreeMap::from([("another".to_string(), binding(Some("x")))]);
        assert_eq!(
            multus_annotations(&v, &bindings).unwrap_err(),
            "unable to find the network binding plugin 'test-binding' in Kubevirt configuration"
        );
        let nameless = vmi(json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "binding": {}}]}},
            "networks": [{"name": "default", "pod": {}}]}));
        assert_eq!(
            multus_annotations(&nameless, &bindings).unwrap_err(),
            "unable to find the network binding plugin '' in Kubevirt configuration"
        );
    }

    /// generator_test.go: the MAC address is requested, absent interfaces are left out, the
    /// default Multus network is the override and not an element; the text is compact JSON in
    /// the element's field order.
    #[test]
    fn mac_absent_interfaces_and_default_network() {
        let v = vmi(json!({"domain": {"devices": {"interfaces": [
                {"name": "primary", "bridge": {}},
                {"name": "blue", "bridge": {}, "macAddress": "de:ad:00:00:be:af"},
                {"name": "gone", "bridge": {}, "state": "absent"}]}},
            "networks": [{"name": "primary", "multus": {"networkName": "infra/primary-net", "default": true}},
                {"name": "blue", "multus": {"networkName": "test1"}},
                {"name": "gone", "multus": {"networkName": "test2"}}]}));
        let got = multus_annotations(&v, &BTreeMap::new()).unwrap();
        assert_eq!(
            got[MULTUS_NETWORKS],
            r#"[{"name":"test1","namespace":"default","mac":"de:ad:00:00:be:af","interface":"pod16477688c0e"}]"#
        );
        assert_eq!(got[MULTUS_DEFAULT_NETWORK], "infra/primary-net");
    }

    #[test]
    fn pod_network_only_gets_no_annotation() {
        let v = vmi(
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}]}},
            "networks": [{"name": "default", "pod": {}}]}),
        );
        assert!(multus_annotations(&v, &BTreeMap::new()).unwrap().is_empty());
    }

    /// nad_test.go: NADs are read only with the gate disabled; a missing one is KubeVirt's error.
    #[test]
    fn network_to_resource_reads_nads_only_with_the_gate_disabled() {
        let v = vmi(
            json!({"domain": {"devices": {"interfaces": [{"name": "sriov", "sriov": {}}]}},
            "networks": [{"name": "sriov", "multus": {"networkName": "other/sriov-net"}}]}),
        );
        let on = ClusterSettings::default();
        let off = ClusterSettings {
            disabled_feature_gates: vec![EXTERNAL_NET_RESOURCE_INJECTION.into()],
            ..Default::default()
        };
        assert!(wanted_nads(&v, &on).is_empty());
        assert_eq!(
            wanted_nads(&v, &off),
            [("other".to_string(), "sriov-net".to_string())]
        );
        let read = |nads: &[(&str, Option<&str>)]| NamespaceContext {
            lookups: Some(RenderLookups {
                network_attachment_definitions: nads
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.map(str::to_string)))
                    .collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let found = read(&[("other/sriov-net", Some("intel.com/sriov"))]);
        assert_eq!(
            network_to_resource(&v, &off, &found).unwrap(),
            BTreeMap::from([("sriov".to_string(), "intel.com/sriov".to_string())])
        );
        assert!(network_to_resource(&v, &on, &found).unwrap().is_empty());
        assert_eq!(
            network_to_resource(&v, &off, &read(&[])).unwrap_err(),
            "failed to locate network attachment definition other/sriov-net"
        );
    }

    /// generator_test.go:366-392 ("Should add mac address ... binding plugin with device info"):
    /// the status of the hashed pod interface of `woo`, device info in Multus' field order.
    #[test]
    fn network_info_from_the_pods_network_status() {
        let v = vmi(json!({"domain": {"devices": {"interfaces": [
                {"name": "woo", "binding": {"name": "deviceinfo"}}]}},
            "networks": [{"name": "woo", "multus": {"networkName": "with-mac-and-device-info"}}]}));
        let bindings = BTreeMap::from([(
            "deviceinfo".to_string(),
            NetworkBindingPlugin {
                downward_api: Some(DEVICE_INFO.into()),
                ..Default::default()
            },
        )]);
        let status = r#"[{"name":"k8s-pod-network","ips":["10.244.196.146"],"default":true,"dns":{}},
            {"name":"default/with-mac-and-device-info","interface":"podb260539511e","mac":"3a:17:d7:e5:0f:08","dns":{},
            "device-info":{"version": "1.0.0","pci": {"pci-address": "0000:65:00.4"},"type": "pci"}}]"#;
        let pod = BTreeMap::from([(MULTUS_NETWORK_STATUS.to_string(), status.to_string())]);
        assert_eq!(
            network_info_annotation(&v, &bindings, Some(&pod)).unwrap(),
            r#"{"interfaces":[{"network":"woo","deviceInfo":{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:65:00.4"}},"mac":"3a:17:d7:e5:0f:08"}]}"#
        );
        // Not a device-info plugin, or no status for the interface yet: no annotation.
        assert_eq!(
            network_info_annotation(&v, &BTreeMap::new(), Some(&pod)),
            None
        );
        assert_eq!(network_info_annotation(&v, &bindings, None), None);
    }

    /// generator_test.go:164-190: a pod whose secondary interfaces have ordinal names (`net1`)
    /// is matched with the ordinal scheme.
    #[test]
    fn network_info_with_ordinal_pod_interface_names() {
        let v = vmi(json!({"domain": {"devices": {"interfaces": [
                {"name": "default", "masquerade": {}}, {"name": "fast", "sriov": {}}]}},
            "networks": [{"name": "default", "pod": {}}, {"name": "fast", "multus": {"networkName": "sriov"}}]}));
        let status = r#"[{"name":"default/sriov","interface":"net1","mtu":9000,
            "device-info":{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:65:00.3"}}}]"#;
        let pod = BTreeMap::from([(MULTUS_NETWORK_STATUS.to_string(), status.to_string())]);
        assert_eq!(
            network_info_annotation(&v, &BTreeMap::new(), Some(&pod)).unwrap(),
            r#"{"interfaces":[{"network":"fast","deviceInfo":{"type":"pci","version":"1.0.0","pci":{"pci-address":"0000:65:00.3"}},"mtu":9000}]}"#
        );
    }

    fn hotplug_vmi(ifaces: Value, entries: Value) -> VirtualMachineInstance {
        let mut v = vmi(json!({
            "domain": {"devices": {"interfaces": ifaces}},
            "networks": [{"name": "default", "pod": {}},
                         {"name": "red", "multus": {"networkName": "red-nad"}},
                         {"name": "blue", "multus": {"networkName": "blue-nad"}}]
        }));
        v.status = serde_json::from_value(json!({"interfaces": entries})).unwrap();
        v
    }

    fn pod_annotations(
        networks: Option<&str>,
        status: &[(&str, &str)],
    ) -> BTreeMap<String, String> {
        let statuses: Vec<Value> = status
            .iter()
            .map(|(name, iface)| json!({"name": name, "interface": iface}))
            .collect();
        let mut a = BTreeMap::from([(
            MULTUS_NETWORK_STATUS.to_string(),
            json!(statuses).to_string(),
        )]);
        if let Some(n) = networks {
            a.insert(MULTUS_NETWORKS.to_string(), n.to_string());
        }
        a
    }

    /// generator_test.go "GenerateFromActivePod": hotplug of one or two bridge interfaces
    /// (hashed and ordinal pod interface names), nothing while every interface has a status
    /// entry, nothing for an SR-IOV interface not yet plugged.
    #[test]
    fn hotplug_annotation_lists_the_interfaces_to_plug() {
        let (red, blue) = (hashed_interface_name("red"), hashed_interface_name("blue"));
        let ifaces = json!([{"name": "default", "bridge": {}}, {"name": "red", "bridge": {}},
                            {"name": "blue", "bridge": {}}]);
        let red_plugged = json!([{"name": "default"}, {"name": "red"}]);
        let v = hotplug_vmi(ifaces.clone(), red_plugged);
        let hashed = pod_annotations(None, &[("default/red-nad", &red)]);
        let got = hotplug_multus_annotation(&v, &BTreeMap::new(), Some(&hashed)).unwrap();
        let want = json!([
            {"name": "red-nad", "namespace": "default", "interface": red},
            {"name": "blue-nad", "namespace": "default", "interface": blue}]);
        assert_eq!(serde_json::from_str::<Value>(&got).unwrap(), want);
        let ordinal = pod_annotations(None, &[("default/red-nad", "net1")]);
        let got = hotplug_multus_annotation(&v, &BTreeMap::new(), Some(&ordinal)).unwrap();
        assert!(got.contains(r#""interface":"net1""#) && got.contains(r#""interface":"net2""#));
        // Already on the pod: nothing to write.
        let on_pod = pod_annotations(Some(&got), &[("default/red-nad", "net1")]);
        assert_eq!(
            hotplug_multus_annotation(&v, &BTreeMap::new(), Some(&on_pod)),
            None
        );
        let all = hotplug_vmi(
            ifaces,
            json!([{"name": "default"}, {"name": "red"}, {"name": "blue"}]),
        );
        assert_eq!(
            hotplug_multus_annotation(&all, &BTreeMap::new(), Some(&hashed)),
            None
        );
        let sriov = hotplug_vmi(
            json!([{"name": "default", "bridge": {}}, {"name": "red", "sriov": {}}]),
            json!([{"name": "default"}]),
        );
        assert_eq!(
            hotplug_multus_annotation(&sriov, &BTreeMap::new(), None),
            None
        );
    }

    /// generator_test.go: unplugging one of two secondary interfaces leaves the other; the last
    /// one leaves an empty annotation.
    #[test]
    fn unplug_annotation_drops_absent_interfaces() {
        let entries = json!([{"name": "default"}, {"name": "red"}, {"name": "blue"}]);
        let v = hotplug_vmi(
            json!([{"name": "default", "bridge": {}},
                   {"name": "red", "bridge": {}, "state": "absent"},
                   {"name": "blue", "bridge": {}}]),
            entries,
        );
        let blue = hashed_interface_name("blue");
        let a = pod_annotations(Some("[]"), &[("default/blue-nad", &blue)]);
        let got = hotplug_multus_annotation(&v, &BTreeMap::new(), Some(&a)).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&got).unwrap(),
            json!([{"name": "blue-nad", "namespace": "default", "interface": blue}])
        );
        let last = hotplug_vmi(
            json!([{"name": "default", "bridge": {}},
                   {"name": "red", "bridge": {}, "state": "absent"}]),
            json!([{"name": "default"}, {"name": "red"}]),
        );
        let a = pod_annotations(Some("[{}]"), &[]);
        let got = hotplug_multus_annotation(&last, &BTreeMap::new(), Some(&a));
        assert_eq!(got.as_deref(), Some(""));
    }
}
