//! `inspect`: what the controller is thinking about one VM (or the whole fleet).
//!
//! Data flows one way: gather (API server + the controller's `/debug/state?key=` or KubeVirt's
//! metrics, [`gather`]) → analyse with the controllers' own pure functions ([`analyze`]) →
//! [`model::Inspection`] → render (`-o json|yaml`, plain text [`text`], the terminal UI).

pub(crate) mod analyze;
mod diagnose;
pub mod gather;
pub(crate) mod history;
pub(crate) mod model;
pub mod overhead;
pub(crate) mod rehearsal;
mod settings_check;
pub(crate) mod shadow_view;
#[cfg(test)]
pub(crate) mod test_support;
pub(crate) mod text;
pub mod tui;
pub(crate) mod whatif;

pub use gather::{GatherError, GatherOptions};

/// Gather one VM and the controller's view of it ([`gather::gather_raw`]), then analyse it
/// ([`analyze::analyze`]).
pub async fn gather_vm(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    opts: &GatherOptions,
) -> Result<model::Inspection, GatherError> {
    let g = gather::gather_raw(client, namespace, name, opts).await?;
    Ok(analyze::analyze(&g))
}

/// One list each of VMs, VMIs and launcher pods in scope plus the controller's view
/// ([`gather::gather_fleet_raw`]), analysed into fleet rows, problems first.
pub async fn gather_fleet(
    client: &kube::Client,
    namespace: Option<&str>,
    opts: &GatherOptions,
) -> Result<model::Fleet, GatherError> {
    let f = gather::gather_fleet_raw(client, namespace, opts).await?;
    Ok(analyze::analyze_fleet(&f))
}
