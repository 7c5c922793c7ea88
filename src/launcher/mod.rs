//! The virt-launcher pod: the memory overhead formula, the compute container's resources and
//! the pod renderer (KubeVirt `pkg/virt-controller/services/template.go` and friends). The cluster
//! settings they read are [`crate::config`].
//!
//! Module tree (arrows are `use`; no cycles):
//!
//! ```text
//! pod ──► containers ──► volumes ──► resources      (types, device names)
//!  │  ╲        │             │
//!  │   ╲       └──────┬──────┴──► error             (RenderError)
//!  │    ╲             │
//!  │     ► renderer ──┴─► resources                 (ResourceRenderer + With* rules)
//!  └────► overhead                                  (GetMemoryOverhead, term by term)
//! explain ──► overhead, renderer, resources         (explain-overhead's data)
//! ```

pub mod containers;
pub mod error;
pub mod explain;
pub mod overhead;
pub mod pod;
pub mod renderer;
pub mod resources;
pub mod volumes;

pub use error::RenderError;
pub use pod::render_launch_manifest;
pub use renderer::{compute_resources, render_compute_resources};
pub use resources::{ComputeResources, NamespaceContext};
