//! The virt-launcher pod: the memory overhead formula, the compute container's resources and
//! the pod renderer (KubeVirt `pkg/virt-controller/services/template.go` and friends). The cluster
//! settings they read are [`crate::config`].
//!
//! Module tree: see docs/architecture.md ("The launcher"); there is no import cycle between the
//! modules below (tests/module_graph.rs checks it for all of src/).

pub mod annotations;
pub mod attachment_pod;
pub mod containers;
pub mod defects;
pub mod error;
pub mod explain;
pub mod lookups;
pub mod network;
pub mod overhead;
pub mod pod;
mod pod_changes;
pub mod renderer;
pub mod resources;
pub mod sidecars;
pub mod virtiofs;
pub mod volumes;

pub use error::RenderError;
pub(crate) use pod::render_launch_manifest;
pub use renderer::compute_resources;
pub use resources::{ComputeResources, NamespaceContext};
