//! The embedded cluster: the in-process API server plus simulated nodes. Manifests are applied
//! to it with [`crate::api::apply`], like to any cluster.

use super::nodes::{
    NodeCapacity, NodeLabel, NodeSimConfig, NodeSimError, NodeSimHandle, NodeSimulator,
};
use super::{ApiServer, ApiServerConfig, SimError};
use crate::api::apply::{ApplyError, ApplySummary, apply_path};
use kube::Client;
use std::path::Path;
use std::time::Duration;

/// Settings of an [`EmbeddedCluster`].
#[derive(Debug, Clone)]
pub struct EmbeddedClusterConfig {
    /// Number of simulated nodes (default 2).
    pub nodes: usize,
    /// Delay between binding and a pod running (default 200 ms).
    pub kubelet_delay: Duration,
    /// Factor applied to grace periods (default 0.01).
    pub grace_scale: f64,
    /// Capacity of every node.
    pub capacity: NodeCapacity,
    /// Labels added to the nodes ([`NodeSimConfig::labels`]).
    pub labels: Vec<NodeLabel>,
    /// API server settings.
    pub api: ApiServerConfig,
}

impl Default for EmbeddedClusterConfig {
    fn default() -> Self {
        let nodes = NodeSimConfig::default();
        EmbeddedClusterConfig {
            nodes: nodes.nodes,
            kubelet_delay: nodes.kubelet_delay,
            grace_scale: nodes.grace_scale,
            capacity: nodes.capacity,
            labels: nodes.labels,
            api: ApiServerConfig::default(),
        }
    }
}

/// Errors of the embedded cluster.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The API server failed.
    #[error("embedded API server: {0}")]
    Server(#[source] Box<SimError>),
    /// The node simulator failed.
    #[error("simulated nodes: {0}")]
    Nodes(#[from] NodeSimError),
    /// A manifest could not be applied.
    #[error(transparent)]
    Apply(#[from] ApplyError),
}

impl From<SimError> for ClusterError {
    fn from(e: SimError) -> Self {
        ClusterError::Server(Box::new(e))
    }
}

/// An embedded API server plus a node simulator registered against it.
pub struct EmbeddedCluster {
    api: ApiServer,
    nodes: NodeSimulator,
}

impl EmbeddedCluster {
    /// Start the API server, then register the nodes and start their simulation.
    ///
    /// Errors: [`ClusterError::Server`] when the server cannot start, [`ClusterError::Nodes`]
    /// when the simulator cannot (the server is shut down again).
    pub async fn start(config: EmbeddedClusterConfig) -> Result<Self, ClusterError> {
        let api = ApiServer::start(config.api).await?;
        let node_config = NodeSimConfig {
            nodes: config.nodes,
            kubelet_delay: config.kubelet_delay,
            grace_scale: config.grace_scale,
            capacity: config.capacity,
            labels: config.labels,
            // The embedded server's own binder binds claims (src/sim/pvbinder.rs).
            bind_claims: false,
        };
        match NodeSimulator::start_from_kubeconfig(api.kubeconfig_path(), node_config).await {
            Ok(nodes) => Ok(EmbeddedCluster { api, nodes }),
            Err(e) => {
                api.shutdown().await;
                Err(e.into())
            }
        }
    }

    /// The API server (audit log, faults, URL).
    pub fn api(&self) -> &ApiServer {
        &self.api
    }

    /// The node simulator's control handle.
    pub fn nodes(&self) -> &NodeSimHandle {
        self.nodes.handle()
    }

    /// A kube client for the server. Errors: [`ClusterError::Server`].
    pub async fn client(&self) -> Result<Client, ClusterError> {
        Ok(self.api.client().await?)
    }

    /// Path of the server's kubeconfig file.
    pub fn kubeconfig_path(&self) -> &Path {
        self.api.kubeconfig_path()
    }

    /// Apply a manifest file or directory to this cluster ([`crate::api::apply::apply_path`]).
    ///
    /// Errors: [`ClusterError::Apply`], [`ClusterError::Server`].
    pub async fn apply_path(&self, path: &Path) -> Result<ApplySummary, ClusterError> {
        let client = self.client().await?;
        Ok(apply_path(&client, path).await?)
    }

    /// Stop the node simulation, then the server.
    pub async fn shutdown(self) {
        self.nodes.shutdown().await;
        self.api.shutdown().await;
    }
}
