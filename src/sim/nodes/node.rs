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
pub(crate) const SIMULATED_NODE_ANNOTATION: &str = "virtctl-rs.io/simulated-node";

/// Label virt-handler sets on nodes that can run VMIs (KubeVirt `v1.NodeSchedulable`).
pub(crate) const LABEL_SCHEDULABLE: &str = "kubevirt.io/schedulable";

/// Kubelet version reported in `status.nodeInfo.kubeletVersion`.
pub(crate) const KUBELET_VERSION: &str = "v1.33.0-sim";

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

impl NodeCapacity {
    /// Set the capacity (= allocatable) of `resource` to `amount`. Errors: a resource name
    /// that is not a qualified name, an amount that is not a quantity or is negative.
    pub(crate) fn set(&mut self, resource: &str, amount: &str) -> Result<(), String> {
        crate::sim::selector::validate_label_key(resource)
            .map_err(|e| format!("resource name {resource:?}: {e}"))?;
        check_amount(amount)?;
        self.resources
            .insert(resource.to_string(), amount.to_string());
        Ok(())
    }

    /// Check every amount. Errors name the resource.
    pub(crate) fn validate(&self) -> Result<(), String> {
        self.resources
            .iter()
            .try_for_each(|(r, a)| check_amount(a).map_err(|e| format!("{r}: {e}")))
    }
}

fn check_amount(amount: &str) -> Result<(), String> {
    match super::quantity::parse_quantity(amount) {
        Ok(q) if q.0 >= 0 => Ok(()),
        Ok(_) => Err(format!("{amount:?} is negative")),
        Err(e) => Err(format!("{amount:?} is not a quantity: {e}")),
    }
}

/// Name of the simulated node with the given index: `sim-node-<index>`.
pub(crate) fn node_name(index: usize) -> String {
    format!("sim-node-{index}")
}

/// Index of a simulated node from its name (`sim-node-3` → 3); `None` for any other name.
pub(crate) fn node_index(name: &str) -> Option<usize> {
    name.strip_prefix("sim-node-")?.parse().ok()
}

/// The node's InternalIP: `10.89.<index / 250>.<index % 250 + 2>` (a label only: nothing listens).
pub(crate) fn node_internal_ip(index: usize) -> String {
    format!("10.89.{}.{}", (index / 250) % 256, index % 250 + 2)
}

/// The first two octets of the node's pod CIDR: `10.<244 + index / 256>.<index % 256>`, one
/// `/24` per node in 10.244.0.0/14 and 10.248.0.0/14 (distinct for up to 2,048 nodes).
fn pod_net(index: usize) -> String {
    format!("10.{}.{}", 244 + (index / 256) % 12, index % 256)
}

/// The node's pod CIDR: `10.<244 + index / 256>.<index % 256>.0/24`.
pub(crate) fn node_pod_cidr(index: usize) -> String {
    format!("{}.0/24", pod_net(index))
}

/// The `seq`-th pod IP handed out on a node: `<its pod CIDR's net>.<seq % 252 + 2>` (wraps after
/// 252 pods; only used as a status value).
pub(crate) fn pod_ip(node_index: usize, seq: u64) -> String {
    format!("{}.{}", pod_net(node_index), seq % 252 + 2)
}

/// Machine-type label of the `q35` alias libvirt reports on x86 hosts
/// (`v1.SupportedMachineTypeLabel`, set by virt-handler's node labeller,
/// pkg/virt-handler/node-labeller/node_labeller.go): launcher pods of a VMI with
/// `machine.type: q35` (what virt-api's mutator defaults) select it.
pub(crate) const LABEL_MACHINE_TYPE_Q35: &str = "machine-type.node.kubevirt.io/q35";

/// A label added to the simulated nodes: to every node, or to the one named.
///
/// Written `KEY=VALUE` (every node) or `NODE=KEY=VALUE` (one node), e.g.
/// `kubevirt.io/cpumanager=true`, the label virt-handler's CPU manager check puts on nodes
/// whose kubelet runs the static CPU manager policy and that launcher pods of
/// dedicated-CPU VMIs select (pkg/virt-controller/services/template.go:
/// `v1.CPUManager`; pkg/virt-handler/heartbeat/heartbeat.go).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLabel {
    /// The node it is added to (`sim-node-<i>`); `None`: every node.
    pub node: Option<String>,
    /// Label key (`[prefix/]name`).
    pub key: String,
    /// Label value (may be empty).
    pub value: String,
}

impl NodeLabel {
    /// Parse `KEY=VALUE` or `NODE=KEY=VALUE`. Errors name what is wrong (the caller adds the
    /// flag or field).
    pub fn parse(text: &str) -> Result<NodeLabel, String> {
        let parts: Vec<&str> = text.split('=').collect();
        let label = match parts.as_slice() {
            [key, value] => NodeLabel {
                node: None,
                key: key.to_string(),
                value: value.to_string(),
            },
            [node, key, value] => NodeLabel {
                node: Some(node.to_string()),
                key: key.to_string(),
                value: value.to_string(),
            },
            _ => {
                return Err(format!(
                    "{text:?} is not KEY=VALUE or NODE=KEY=VALUE (e.g. kubevirt.io/cpumanager=true, sim-node-0=kubevirt.io/cpumanager=true)"
                ));
            }
        };
        label.validate()?;
        Ok(label)
    }

    /// Check the key, the value and the node name as the API server and this simulator would.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Some(node) = &self.node
            && node_index(node).is_none()
        {
            return Err(format!(
                "{node:?} is not a simulated node name (sim-node-0, sim-node-1, ...)"
            ));
        }
        crate::sim::selector::validate_label_key(&self.key)
            .map_err(|e| format!("label key {:?}: {e}", self.key))?;
        crate::sim::selector::validate_label_value(&self.value)
            .map_err(|e| format!("label value {:?} of {}: {e}", self.value, self.key))
    }

    /// Check that the node it names is among the first `nodes` simulated nodes.
    pub(crate) fn validate_node_count(&self, nodes: usize) -> Result<(), String> {
        match self.node.as_deref().and_then(node_index) {
            Some(index) if index >= nodes => Err(format!(
                "{} is not one of the {nodes} simulated node(s){}",
                self.node.as_deref().unwrap_or_default(),
                if nodes > 0 {
                    format!(" (sim-node-0 to sim-node-{})", nodes - 1)
                } else {
                    String::new()
                }
            )),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for NodeLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(node) = &self.node {
            write!(f, "{node}=")?;
        }
        write!(f, "{}={}", self.key, self.value)
    }
}

/// Labels of the simulated node `name`: what a kubelet and virt-handler put there, then the
/// `extra` labels for every node, then those for this node (later ones win).
pub(crate) fn node_labels(name: &str, extra: &[NodeLabel]) -> BTreeMap<String, String> {
    let mut labels: BTreeMap<String, String> = [
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
    .collect();
    let every = extra.iter().filter(|l| l.node.is_none());
    let this = extra.iter().filter(|l| l.node.as_deref() == Some(name));
    for l in every.chain(this) {
        labels.insert(l.key.clone(), l.value.clone());
    }
    labels
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
pub(crate) fn build_node(
    index: usize,
    capacity: &NodeCapacity,
    labels: &[NodeLabel],
    now: &Time,
) -> Node {
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
            labels: Some(node_labels(&name, labels)),
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
#[cfg(test)]
pub(crate) fn node_is_ready(node: &Node) -> bool {
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
        let node = build_node(1, &NodeCapacity::default(), &[], &now());
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
    fn extra_labels_go_to_every_node_or_the_one_named() {
        let extra = [
            NodeLabel::parse("kubevirt.io/cpumanager=true").unwrap(),
            NodeLabel::parse("sim-node-1=kubevirt.io/cpumanager=false").unwrap(),
            NodeLabel::parse("sim-node-1=zone=").unwrap(),
        ];
        let label = |index: usize, key: &str| {
            let node = build_node(index, &NodeCapacity::default(), &extra, &now());
            node.metadata.labels.unwrap_or_default().get(key).cloned()
        };
        assert_eq!(label(0, "kubevirt.io/cpumanager").as_deref(), Some("true"));
        assert_eq!(label(1, "kubevirt.io/cpumanager").as_deref(), Some("false"));
        assert_eq!(label(1, "zone").as_deref(), Some(""));
        assert_eq!(label(0, "zone"), None);
        // The simulator's own labels stay unless overridden.
        assert_eq!(label(1, LABEL_SCHEDULABLE).as_deref(), Some("true"));
        assert_eq!(
            extra[1].to_string(),
            "sim-node-1=kubevirt.io/cpumanager=false"
        );
    }

    #[test]
    fn bad_node_labels_say_what_is_wrong() {
        for (text, says) in [
            ("cpumanager", "is not KEY=VALUE or NODE=KEY=VALUE"),
            ("a=b=c=d", "is not KEY=VALUE or NODE=KEY=VALUE"),
            ("worker-1=k=v", "\"worker-1\" is not a simulated node name"),
            ("=true", "label key \"\": name part must be non-empty"),
            ("-bad=true", "label key \"-bad\""),
            ("k=not ok", "label value \"not ok\" of k"),
        ] {
            let e = NodeLabel::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }

    #[test]
    fn capacity_amounts_are_checked() {
        let mut c = NodeCapacity::default();
        c.set("cpu", "4").unwrap();
        c.set("nvidia.com/gpu", "2").unwrap();
        assert_eq!(c.resources.get("cpu").map(String::as_str), Some("4"));
        assert!(
            c.set("memory", "lots")
                .unwrap_err()
                .contains("\"lots\" is not a quantity")
        );
        assert!(c.set("memory", "-1Gi").unwrap_err().contains("is negative"));
        assert!(
            c.set("bad name", "1")
                .unwrap_err()
                .contains("resource name \"bad name\"")
        );
        assert!(c.validate().is_ok());
        c.resources.insert("pods".into(), "many".into());
        assert!(c.validate().unwrap_err().starts_with("pods: "));
        let label = NodeLabel::parse("sim-node-2=k=v").unwrap();
        assert!(label.validate_node_count(3).is_ok());
        let e = label.validate_node_count(2).unwrap_err();
        assert!(
            e.contains(
                "sim-node-2 is not one of the 2 simulated node(s) (sim-node-0 to sim-node-1)"
            ),
            "{e}"
        );
    }

    #[test]
    fn names_and_addresses_are_derived_from_the_index() {
        assert_eq!(node_name(0), "sim-node-0");
        assert_eq!(node_index("sim-node-12"), Some(12));
        assert_eq!(node_index("worker-1"), None);
        assert_eq!(node_internal_ip(0), "10.89.0.2");
        assert_eq!(pod_ip(1, 0), "10.244.1.2");
        assert_eq!(pod_ip(1, 252), "10.244.1.2");
        assert_eq!(node_pod_cidr(255), "10.244.255.0/24");
        assert_eq!(node_pod_cidr(256), "10.245.0.0/24");
        assert_eq!(pod_ip(999, 0), "10.247.231.2");
        let cidrs: std::collections::HashSet<String> = (0..crate::sim::nodes::MAX_NODES)
            .map(node_pod_cidr)
            .collect();
        assert_eq!(
            cidrs.len(),
            crate::sim::nodes::MAX_NODES,
            "one /24 per node"
        );
        let ips: std::collections::HashSet<String> = (0..crate::sim::nodes::MAX_NODES)
            .map(node_internal_ip)
            .collect();
        assert_eq!(
            ips.len(),
            crate::sim::nodes::MAX_NODES,
            "one InternalIP per node"
        );
    }
}
