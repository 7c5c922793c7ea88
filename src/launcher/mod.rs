//! The virt-launcher pod: cluster settings, the memory overhead formula, compute resources and
//! the pod renderer (KubeVirt `pkg/virt-controller/services/template.go` and friends).

pub mod containers;
pub mod explain;
pub mod overhead;
pub mod pod;
pub mod resources;
pub mod settings;
pub mod volumes;

pub use pod::{RenderError, render_launch_manifest};
pub use resources::{ComputeResources, NamespaceContext, compute_resources};
pub use settings::ClusterSettings;
