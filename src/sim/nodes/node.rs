//! The core/v1 Node objects of the simulated nodes (what a kubelet registers, plus what
//! virt-handler's device plugins and node labeller add).
//!
//! Shape follows what a real kubelet posts on registration
//! (kubernetes pkg/kubelet/kubelet_node_status.go: `initialNode`, `setNodeStatus`) and the
//! labels KubeVirt's scheduling relies on: `kubevirt.io/schedulable=true` (set by virt-handler's
//! heartbeat, pkg/virt-handler/heartbeat/heartbeat.go) and the `devices.kubevirt.io/*` extended
//! resources of its device plugins (pkg/virt-handler/device-manager).

use k8s_openapi::api::core::v1::{
    DaemonEndpoint, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec, NodeStatus,
    NodeSystemInfo,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use std::collections::BTreeMap;

/// Annotation put on every simulated Node so a reader can tell it from a real one.
pub const SIMULATED_NODE_ANNOTATION: &str = "virtctl-rs.io/simulated-node";

/// Label virt-handler sets on nodes that can run VMIs (KubeVirt `v1.NodeSchedulable`).
pub const LABEL_SCHEDULABLE: &str = "kubevirt.io/schedulable";

/// Kubelet version reported in `status.nodeInfo.kubeletVersion`.
pub const KUBELET_VERSION: &str = "v1.33.0-sim";

/// Capacity (= allocatable) of one simulated node, as Kubernetes quantity strings.
///
/// Defaults: 32 CPUs, 128Gi memory, 110 pods, 500Gi ephemeral storage, and 1k (1000) each of
/// `devices.kubevirt.io/kvm`, `devices.kubevirt.io/tun`, `devices.kubevirt.io/vhost-net`
/// (virt-handler's device plugins advertise 1000 of each by default), plus `hugepages-2Mi: 4Gi`
/// and `hugepages-1Gi: 8Gi`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeCapacity {
    /// Resource name → quantity string (e.g. `"cpu" → "32"`).
    pub resources: BTreeMap<String, String>,
}

impl Default for NodeCapacity {
    fn default() -> Self {
        let resources = [
            ("cpu", "32"),
            ("memory", "128Gi"),
            ("pods", "110"),
            ("ephemeral-storage", "500Gi"),
            ("devices.kubevirt.io/kvm", "1k"),
            ("devices.kubevirt.io/tun", "1k"),
            ("devices.kubevirt.io/vhost-net", "1k"),
            // Pre-allocated huge pages (a kubelet reports each size the node has).
            ("hugepages-2Mi", "4Gi"),
            ("hugepages-1Gi", "8Gi"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        NodeCapacity { resources }
    }
}

/// Name of the simulated node with the given index: `sim-node-<index>`.
pub fn node_name(index: usize) -> String {
    format!("sim-node-{index}")
}

/// Index of a simulated node from its name (`sim-node-3` → 3); `None` for any other name.
pub fn node_index(name: &str) -> Option<usize> {
    name.strip_prefix("sim-node-")?.parse().ok()
}

/// The node's InternalIP: `10.89.<index / 250>.<index % 250 + 2>` (a label only: nothing listens).
pub fn node_internal_ip(index: usize) -> String {
    format!("10.89.{}.{}", (index / 250) % 256, index % 250 + 2)
}

/// The node's pod CIDR: `10.244.<index % 256>.0/24`.
pub fn node_pod_cidr(index: usize) -> String {
    format!("10.244.{}.0/24", index % 256)
}

/// The `seq`-th pod IP handed out on a node: `10.244.<index % 256>.<seq % 252 + 2>` (wraps after
/// 252 pods; only used as a status value).
pub fn pod_ip(node_index: usize, seq: u64) -> String {
    format!("10.244.{}.{}", node_index % 256, seq % 252 + 2)
}

/// Machine-type label of the `q35` alias libvirt reports on x86 hosts
/// (`v1.SupportedMachineTypeLabel`, set by virt-handler's node labeller,
/// pkg/virt-handler/node-labeller/node_labeller.go): launcher pods of a VMI with
/// `machine.type: q35` (what virt-api's mutator defaults) select it.
pub const LABEL_MACHINE_TYPE_Q35: &str = "machine-type.node.kubevirt.io/q35";

/// Labels of a simulated node.
pub fn node_labels(name: &str) -> BTreeMap<String, String> {
    [
        (LABEL_MACHINE_TYPE_Q35, "true"),
        ("beta.kubernetes.io/arch", "amd64"),
        ("beta.kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("kubernetes.io/hostname", name),
        ("kubernetes.io/os", "linux"),
        (LABEL_SCHEDULABLE, "true"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn condition(type_: &str, status: &str, reason: &str, message: &str, now: &Time) -> NodeCondition {
    NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_heartbeat_time: Some(now.clone()),
        last_transition_time: Some(now.clone()),
    }
}

/// The Node object (metadata, spec and status) for simulated node `index`, as registered at
/// time `now`.
pub fn build_node(index: usize, capacity: &NodeCapacity, now: &Time) -> Node {
    let name = node_name(index);
    let resources: BTreeMap<String, Quantity> = capacity
        .resources
        .iter()
        .map(|(k, v)| (k.clone(), Quantity(v.clone())))
        .collect();
    let id = uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, name.as_bytes());
    Node {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(node_labels(&name)),
            annotations: Some(BTreeMap::from([(
                SIMULATED_NODE_ANNOTATION.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(node_pod_cidr(index)),
            pod_cidrs: Some(vec![node_pod_cidr(index)]),
            ..Default::default()
        }),
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![
                condition(
                    "MemoryPressure",
                    "False",
                    "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available",
                    now,
                ),
                condition(
                    "DiskPressure",
                    "False",
                    "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure",
                    now,
                ),
                condition(
                    "PIDPressure",
                    "False",
                    "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available",
                    now,
                ),
                condition(
                    "Ready",
                    "True",
                    "KubeletReady",
                    "kubelet is posting ready status",
                    now,
                ),
            ]),
            addresses: Some(vec![
                NodeAddress {
                    type_: "InternalIP".to_string(),
                    address: node_internal_ip(index),
                },
                NodeAddress {
                    type_: "Hostname".to_string(),
                    address: name.clone(),
                },
            ]),
            daemon_endpoints: Some(NodeDaemonEndpoints {
                kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
            }),
            node_info: Some(NodeSystemInfo {
                architecture: "amd64".to_string(),
                boot_id: id.to_string(),
                container_runtime_version: "containerd://2.0.0-sim".to_string(),
                kernel_version: "6.1.0-sim".to_string(),
                kube_proxy_version: String::new(),
                kubelet_version: KUBELET_VERSION.to_string(),
                machine_id: id.simple().to_string(),
                operating_system: "linux".to_string(),
                os_image: "virtctl-rs simulated node".to_string(),
                system_uuid: id.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }),
    }
}

/// Whether a Node reports condition `Ready=True`.
pub fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Time {
        Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).expect("valid timestamp"))
    }

    #[test]
    fn node_has_kubevirt_labels_capacity_and_ready_condition() {
        let node = build_node(1, &NodeCapacity::default(), &now());
        assert_eq!(node.metadata.name.as_deref(), Some("sim-node-1"));
        let labels = node.metadata.labels.clone().unwrap_or_default();
        for (key, value) in [
            ("kubevirt.io/schedulable", "true"),
            ("kubernetes.io/arch", "amd64"),
            ("kubernetes.io/os", "linux"),
            ("kubernetes.io/hostname", "sim-node-1"),
            ("machine-type.node.kubevirt.io/q35", "true"),
        ] {
            assert_eq!(labels.get(key).map(String::as_str), Some(value), "{key}");
        }
        let status = node.status.clone().unwrap_or_default();
        let alloc = status.allocatable.unwrap_or_default();
        for device in [
            "devices.kubevirt.io/kvm",
            "devices.kubevirt.io/tun",
            "devices.kubevirt.io/vhost-net",
        ] {
            assert_eq!(alloc.get(device), Some(&Quantity("1k".into())), "{device}");
        }
        assert_eq!(alloc.get("hugepages-2Mi"), Some(&Quantity("4Gi".into())));
        assert_eq!(alloc.get("hugepages-1Gi"), Some(&Quantity("8Gi".into())));
        assert!(node_is_ready(&node));
    }

    #[test]
    fn names_and_addresses_are_derived_from_the_index() {
        assert_eq!(node_name(0), "sim-node-0");
        assert_eq!(node_index("sim-node-12"), Some(12));
        assert_eq!(node_index("worker-1"), None);
        assert_eq!(node_internal_ip(0), "10.89.0.2");
        assert_eq!(pod_ip(1, 0), "10.244.1.2");
        assert_eq!(pod_ip(1, 252), "10.244.1.2");
    }
}
