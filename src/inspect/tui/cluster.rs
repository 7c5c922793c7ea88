//! [`Gather`] from a cluster: [`crate::inspect::gather_vm`] and [`crate::inspect::gather_fleet`]
//! through one `kube::Client` (by-name reads for the VM view; one list per kind for the fleet),
//! a quick first page of the fleet for the first frame, and the what-if of a change
//! ([`crate::inspect::whatif::gather_what_if`], then [`crate::inspect::whatif::what_if`]).

use super::live::Gather;
use super::state::WhatIfError;
use crate::api::key::ObjectKey;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::inspect::analyze::analyze_fleet;
use crate::inspect::gather::{GatheredFleet, describe_error};
use crate::inspect::model::{Fleet, Inspection};
use crate::inspect::whatif::{Change, WhatIf, gather_what_if, what_if};
use crate::inspect::{GatherOptions, gather_fleet, gather_vm};
use futures::StreamExt;
use kube::Api;
use kube::api::ListParams;

/// Gathers from the cluster behind `client`.
#[derive(Clone)]
pub struct ClusterGather {
    /// The client.
    pub client: kube::Client,
    /// The fleet's scope (`None`: all namespaces).
    pub namespace: Option<String>,
    /// Where the controller Lease is, read timeouts.
    pub options: GatherOptions,
    /// The verdicts file of a running shadow, read at each gather of a VM
    /// ([`crate::inspect::shadow_view`]).
    pub shadow: Option<std::path::PathBuf>,
}

impl Gather for ClusterGather {
    async fn vm(&self, namespace: &str, name: &str) -> Result<Inspection, String> {
        let mut insp = gather_vm(&self.client, namespace, name, &self.options)
            .await
            .map_err(|e| e.to_string())?;
        if let Some(file) = &self.shadow {
            crate::inspect::shadow_view::attach(&mut insp, file);
        }
        Ok(insp)
    }

    async fn fleet(&self) -> Result<Fleet, String> {
        gather_fleet(&self.client, self.namespace.as_deref(), &self.options)
            .await
            .map_err(|e| e.to_string())
    }

    /// A fresh gather of the VM (plus every node, for the fit), the change applied to a copy:
    /// only reads.
    async fn what_if(
        &self,
        namespace: &str,
        name: &str,
        change: Change,
    ) -> Result<WhatIf, WhatIfError> {
        let g = gather_what_if(&self.client, namespace, name, &self.options)
            .await
            .map_err(|e| WhatIfError::Gather(e.to_string()))?;
        what_if(&g, &change).map_err(WhatIfError::Change)
    }

    /// One page of VMs (`limit`, in the API server's namespace/name order) and their VMIs by
    /// name: the rows' printableStatus, VMI phase and time in it, and the VM's own problems.
    /// Pods, retries and expectations come with the whole fleet.
    async fn fleet_page(&self, limit: usize) -> Result<Fleet, String> {
        let vms: Api<VirtualMachine> = match &self.namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let limit = u32::try_from(limit).unwrap_or(u32::MAX).max(1);
        let page = vms
            .list(&ListParams::default().limit(limit))
            .await
            .map_err(|e| format!("list VirtualMachines: {}", describe_error(&e)))?;
        let keys: Vec<ObjectKey> = page.items.iter().map(ObjectKey::of).collect();
        let client = self.client.clone();
        let vmis: Vec<VirtualMachineInstance> = futures::stream::iter(keys)
            .map(
                move |ObjectKey {
                          namespace: ns,
                          name,
                      }| {
                    let api: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns);
                    async move { api.get_opt(&name).await.ok().flatten() }
                },
            )
            .buffer_unordered(16)
            .filter_map(|v| async move { v })
            .collect()
            .await;
        let mut gathered = GatheredFleet {
            namespace: self.namespace.clone(),
            vms: page.items,
            vmis,
            ..Default::default()
        };
        // The fleet's clock is its controller view's (no controller view on a first page).
        gathered.controller.now = chrono::Utc::now();
        let mut fleet = analyze_fleet(&gathered);
        // What this page did not read is not missing: the whole fleet reads it.
        fleet.missing.clear();
        Ok(fleet)
    }
}
