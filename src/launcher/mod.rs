//! The virt-launcher pod: the memory overhead formula, the compute container's resources and
//! the pod renderer (KubeVirt `pkg/virt-controller/services/template.go` and friends). The cluster
//! settings they read are [`crate::config`].
//!
//! Module tree: see docs/architecture.md ("The launcher"); there is no import cycle between the
//! modules below (tests/module_graph.rs checks it for all of src/).

pub(crate) mod annotations;
pub(crate) mod attachment_pod;
pub mod backend_storage;
pub mod containers;
pub(crate) mod defects;
pub(crate) mod error;
pub mod explain;
pub(crate) mod lookups;
pub(crate) mod network;
mod node_selector;
pub mod overhead;
pub mod pod;
mod pod_changes;
pub(crate) mod renderer;
mod reservation;
pub mod resources;
pub(crate) mod selinux;
pub(crate) mod sidecars;
pub(crate) mod virtiofs;
pub(crate) mod volumes;

pub use error::RenderError;
pub(crate) use pod::render_launch_manifest;
pub use renderer::compute_resources;
pub use resources::{ComputeResources, NamespaceContext};

/// The VMI KubeVirt's launcher tests render (`testvmi` in `default`, uid `1234`) with `spec`.
#[cfg(test)]
pub(crate) fn test_vmi(spec: serde_json::Value) -> crate::api::VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "testvmi", "namespace": "default", "uid": "1234"},
        "spec": spec,
    }))
    .expect("a test VMI")
}
