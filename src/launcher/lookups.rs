//! What the caller of the renderer has to read through the API before rendering: the objects
//! KubeVirt's `renderLaunchManifest` GETs itself (template.go:427-433, 583-587). The VMI
//! controller reads them when it is about to create a pod and passes them in
//! [`NamespaceContext::lookups`](super::resources::NamespaceContext::lookups).

use super::network::wanted_nads;
use super::sidecars::wanted_config_maps;
use crate::api::vmi::VirtualMachineInstance;
use crate::config::ClusterSettings;

/// The objects to read for one VMI.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Wanted {
    /// Hook-sidecar ConfigMaps, in the VMI's namespace.
    pub config_maps: Vec<String>,
    /// NetworkAttachmentDefinitions as `(namespace, name)` (gate `ExternalNetResourceInjection`
    /// disabled only).
    pub network_attachment_definitions: Vec<(String, String)>,
}

impl Wanted {
    /// Nothing to read: the render needs no lookups.
    pub(crate) fn is_empty(&self) -> bool {
        self.config_maps.is_empty() && self.network_attachment_definitions.is_empty()
    }
}

/// What rendering `vmi` with `settings` reads besides the caches.
pub(crate) fn wanted(vmi: &VirtualMachineInstance, settings: &ClusterSettings) -> Wanted {
    Wanted {
        config_maps: wanted_config_maps(vmi),
        network_attachment_definitions: wanted_nads(vmi, settings),
    }
}
