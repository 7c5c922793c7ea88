//! [`Gather`] from a cluster: [`crate::inspect::gather_vm`] and [`crate::inspect::gather_fleet`]
//! through one `kube::Client` (by-name reads for the VM view; one list per kind for the fleet).

use super::live::Gather;
use crate::inspect::model::{Fleet, Inspection};
use crate::inspect::{GatherOptions, gather_fleet, gather_vm};

/// Gathers from the cluster behind `client`.
#[derive(Clone)]
pub struct ClusterGather {
    /// The client.
    pub client: kube::Client,
    /// The fleet's scope (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Where the controller Lease is, read timeouts.
    pub options: GatherOptions,
}

impl Gather for ClusterGather {
    async fn vm(&self, namespace: &str, name: &str) -> Result<Inspection, String> {
        gather_vm(&self.client, namespace, name, &self.options)
            .await
            .map_err(|e| e.to_string())
    }

    async fn fleet(&self) -> Result<Fleet, String> {
        gather_fleet(&self.client, self.namespace.as_deref(), &self.options)
            .await
            .map_err(|e| e.to_string())
    }
}
