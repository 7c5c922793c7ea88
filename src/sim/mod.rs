//! The embedded cluster: an in-process Kubernetes API server on loopback plus simulated nodes.

pub mod cluster;
pub mod nodes;
