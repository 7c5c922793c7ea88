//! The virt-launcher pod: the memory overhead formula, the compute container's resources and
//! the pod renderer (KubeVirt `pkg/virt-controller/services/template.go` and friends). The cluster
//! settings they read are [`crate::config`].
//!
//! Module tree: see docs/architecture.md ("The launcher"); there is no import cycle between the
//! modules below.

pub mod annotations;
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
pub use pod::render_launch_manifest;
pub use renderer::{
    compute_resources, render_admissible_compute_resources, render_compute_resources,
};
pub use resources::{ComputeResources, NamespaceContext};

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    /// The launcher's modules and the siblings each one `use`s (outside its tests).
    fn module_uses() -> BTreeMap<&'static str, BTreeSet<String>> {
        let sources = [
            ("annotations", include_str!("annotations.rs")),
            ("containers", include_str!("containers.rs")),
            ("defects", include_str!("defects.rs")),
            ("error", include_str!("error.rs")),
            ("explain", include_str!("explain.rs")),
            ("lookups", include_str!("lookups.rs")),
            ("network", include_str!("network.rs")),
            ("overhead", include_str!("overhead.rs")),
            ("pod", include_str!("pod.rs")),
            ("pod_changes", include_str!("pod_changes.rs")),
            ("renderer", include_str!("renderer.rs")),
            ("resources", include_str!("resources.rs")),
            ("sidecars", include_str!("sidecars.rs")),
            ("virtiofs", include_str!("virtiofs.rs")),
            ("volumes", include_str!("volumes.rs")),
        ];
        let names: BTreeSet<&str> = sources.iter().map(|(n, _)| *n).collect();
        sources
            .iter()
            .map(|(name, text)| {
                let code = text.split("#[cfg(test)]").next().unwrap_or_default();
                let uses = names
                    .iter()
                    .filter(|other| {
                        *other != name
                            && (code.contains(&format!("super::{other}::"))
                                || code.contains(&format!("crate::launcher::{other}::")))
                    })
                    .map(|s| s.to_string())
                    .collect();
                (*name, uses)
            })
            .collect()
    }

    /// The module tree in docs/architecture.md has no cycle: every module can be ordered after
    /// the modules it uses.
    #[test]
    fn no_import_cycle_between_launcher_modules() {
        let mut uses = module_uses();
        assert!(uses["pod"].contains("renderer") && uses["renderer"].contains("resources"));
        while !uses.is_empty() {
            let leaf = uses
                .iter()
                .find(|(_, deps)| deps.is_empty())
                .map(|(name, _)| *name);
            let Some(leaf) = leaf else {
                panic!("import cycle among {:?}", uses);
            };
            uses.remove(leaf);
            for deps in uses.values_mut() {
                deps.remove(leaf);
            }
        }
    }
}
