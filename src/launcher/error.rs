//! [`RenderError`]: why a virt-launcher pod could not be rendered. A leaf module: the pod,
//! container and volume renderers all return it and none of them owns it.

use crate::api::resources::FieldError;

/// Why a launcher pod could not be rendered. Every variant names the VMI (`namespace/name`).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A VMI field is missing or invalid.
    #[error("VirtualMachineInstance {vmi}: {field}: {message}")]
    Field {
        /// `namespace/name`.
        vmi: String,
        /// Field path, e.g. `spec.affinity`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A PVC/DataVolume volume names a claim missing from
    /// [`NamespaceContext::pvcs`](super::resources::NamespaceContext::pvcs) (KubeVirt's
    /// `PvcNotFoundError`, which the VMI controller reports as `FailedPvcNotFound`).
    #[error("VirtualMachineInstance {vmi}: didn't find PVC {claim}")]
    PvcNotFound {
        /// `namespace/name`.
        vmi: String,
        /// Claim name.
        claim: String,
    },
    /// Something KubeVirt's renderer reads besides the VMI is missing or rejects it: a hook
    /// sidecar's ConfigMap, a NetworkAttachmentDefinition, a network binding plugin of the
    /// KubeVirt CR, a device its `permittedHostDevices` does not list. Displayed as KubeVirt's text alone (`configmaps "NAME" not found`), which the
    /// VMI controller's `FailedCreate` event on the VMI carries after `failed to render launch
    /// manifest: `.
    #[error("{message}")]
    Input {
        /// `namespace/name`.
        vmi: String,
        /// KubeVirt's error text.
        message: String,
    },
    /// A quantity of the VMI (requests, limits, guest memory, reserved overhead) is invalid, so
    /// neither the memory overhead nor the compute container's resources can be computed.
    #[error("VirtualMachineInstance {vmi}: {source}")]
    Resources {
        /// `namespace/name`.
        vmi: String,
        /// Names the field.
        source: FieldError,
    },
}
