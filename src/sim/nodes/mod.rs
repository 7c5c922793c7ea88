//! Simulated nodes: what kwok gives Go controllers, for virtctl-rs.
//!
//! A [`NodeSimulator`] registers `N` core/v1 Nodes (`sim-node-0`, `sim-node-1`, …) and then
//! plays three node-side components against any Kubernetes API server, through real
//! `kube::Client`s whose `User-Agent` names the component (so the embedded server's audit log
//! shows who wrote what):
//!
//! | component | user agent | does |
//! |---|---|---|
//! | scheduler | `sim-scheduler` | binds pending pods (`pods/binding`), or sets `PodScheduled=False`/`Unschedulable` |
//! | kubelet | `sim-kubelet` | registers the Nodes, runs bound pods (`pods/status`), honours readiness gates, deletes terminating pods after their (scaled) grace period |
//! | virt-handler | `sim-virt-handler` | moves `Scheduled` VMIs whose launcher pod runs to `Running`; shuts guests down on VMI deletion |
//! | node lifecycle / PodGC | `sim-node-lifecycle` | deletes a removed Node and fails + force-deletes its pods |
//!
//! Each component is a pure decision function (modules [`scheduler`], [`kubelet`],
//! [`virt_handler`]) applied by one event loop (`runner`) fed by watches on Pods, Nodes and
//! VirtualMachineInstances. A pass decides only for the objects that changed or whose timer is
//! due, and for every pending pod when capacity changed (module `work`). Faults are injected
//! through [`NodeSimHandle`].

pub mod cached_pod;
mod claims;
pub(crate) mod faults;
pub(crate) mod kubelet;
pub(crate) mod node;
pub(crate) mod quantity;
pub(crate) mod resources;
mod runner;
pub(crate) mod scheduler;
pub(crate) mod virt_handler;
mod work;

pub use faults::Matcher;
pub use node::{NodeCapacity, NodeLabel};
pub use runner::{NodeSimHandle, NodeSimulator};

use std::time::Duration;

/// User agent of the scheduler stand-in.
pub const AGENT_SCHEDULER: &str = "sim-scheduler";
/// User agent of the kubelet stand-in.
pub const AGENT_KUBELET: &str = "sim-kubelet";
/// User agent of the virt-handler stand-in.
pub const AGENT_VIRT_HANDLER: &str = "sim-virt-handler";
/// User agent of the node-lifecycle / PodGC stand-in.
pub const AGENT_NODE_LIFECYCLE: &str = "sim-node-lifecycle";

/// Most nodes one simulator registers (each node's pod CIDR and InternalIP are derived from its
/// index and stay distinct up to here; issue 46 asks for 1,000).
pub const MAX_NODES: usize = 2_000;

/// Settings of a [`NodeSimulator`].
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSimConfig {
    /// Number of Nodes to register (default 2, at most [`MAX_NODES`]; 0 is allowed).
    pub nodes: usize,
    /// Time from binding to the pod running (default 200 ms; zero allowed).
    pub kubelet_delay: Duration,
    /// Factor applied to pod and VMI grace periods (default 0.01: a 60 s grace period lasts
    /// 0.6 s). Must be finite and ≥ 0.
    pub grace_scale: f64,
    /// Capacity (= allocatable) of every node.
    pub capacity: NodeCapacity,
    /// Labels added to every node or to one (after the simulator's own, which they can
    /// override), e.g. `kubevirt.io/cpumanager=true` for dedicated-CPU VMs.
    pub labels: Vec<NodeLabel>,
    /// Bind the WaitForFirstConsumer claims of each pod the scheduler places, to its node, as
    /// kube-scheduler's volume binding and the PV controller would (default off: the embedded
    /// server's binder does it there; on for an API server without a PV controller).
    pub bind_claims: bool,
}

impl Default for NodeSimConfig {
    fn default() -> Self {
        NodeSimConfig {
            nodes: 2,
            kubelet_delay: Duration::from_millis(200),
            grace_scale: 0.01,
            capacity: NodeCapacity::default(),
            labels: Vec::new(),
            bind_claims: false,
        }
    }
}

impl NodeSimConfig {
    /// Check the settings. Errors: [`NodeSimError::Config`] naming the bad field.
    pub(crate) fn validate(&self) -> Result<(), NodeSimError> {
        if self.nodes > MAX_NODES {
            return Err(NodeSimError::Config(format!(
                "nodes: {} is more than the maximum of {MAX_NODES}",
                self.nodes
            )));
        }
        validate_grace_scale(self.grace_scale)?;
        self.capacity
            .validate()
            .map_err(|e| NodeSimError::Config(format!("capacity.{e}")))?;
        for label in &self.labels {
            label
                .validate()
                .and_then(|()| label.validate_node_count(self.nodes))
                .map_err(|e| NodeSimError::Config(format!("labels: {label}: {e}")))?;
        }
        Ok(())
    }
}

fn validate_grace_scale(scale: f64) -> Result<(), NodeSimError> {
    if !scale.is_finite() || scale < 0.0 {
        return Err(NodeSimError::Config(format!(
            "grace_scale: {scale} is not a finite number ≥ 0"
        )));
    }
    Ok(())
}

/// Errors of the node simulator.
#[derive(Debug, thiserror::Error)]
pub enum NodeSimError {
    /// Bad settings; the message names the field.
    #[error("invalid node simulator settings: {0}")]
    Config(String),
    /// Building a client from the kubeconfig failed.
    #[error("cannot build a client from kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    /// An API call failed; `what` names the verb and object.
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
    /// The object does not exist.
    #[error("{kind} {key} not found")]
    NotFound { kind: &'static str, key: String },
    /// The object is not in a state the request applies to.
    #[error("{kind} {key}: {message}")]
    InvalidState {
        kind: &'static str,
        key: String,
        message: String,
    },
}
