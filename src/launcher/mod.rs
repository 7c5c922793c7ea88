//! The virt-launcher pod: cluster settings, the memory overhead formula, compute resources and
//! the pod renderer (KubeVirt `pkg/virt-controller/services/template.go` and friends).

pub mod overhead;
pub mod settings;

pub use settings::ClusterSettings;
