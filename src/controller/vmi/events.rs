//! Event and sync-error texts of the VMI controller, and the mapping of API failures of its pod
//! writes to them (lifecycle.go:69-75, 158-185, 994-1011; reasons from
//! pkg/controller/controller.go:55-117).

use super::action::{ApiFailure, EventType, SyncError, VmiEvent};

/// Reasons used in events and in the `Synchronized` condition.
pub(crate) mod reasons {
    /// Pod creation failed (`FailedCreatePodReason`).
    pub(crate) const FAILED_CREATE: &str = "FailedCreate";
    /// Pod created (`SuccessfulCreatePodReason`).
    pub(crate) const SUCCESSFUL_CREATE: &str = "SuccessfulCreate";
    /// Pod deletion failed (`FailedDeletePodReason`).
    pub(crate) const FAILED_DELETE: &str = "FailedDelete";
    /// Pod deleted (`SuccessfulDeletePodReason`).
    pub(crate) const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
    /// Dedicated CPUs without Guaranteed QoS (`FailedGuaranteePodResourcesReason`).
    pub(crate) const FAILED_GUARANTEE_RESOURCES: &str = "FailedGuaranteeResources";
    /// A volume's PVC is missing (`FailedPvcNotFoundReason`).
    pub(crate) const FAILED_PVC_NOT_FOUND: &str = "FailedPvcNotFound";
    /// A pod metadata patch failed (`FailedPodPatchReason`).
    pub(crate) const FAILED_POD_PATCH: &str = "FailedPodPatch";
}

/// `services.FailedToRenderLaunchManifestErrFormat` (template.go:122) without the `%v`.
pub(crate) const FAILED_TO_RENDER_PREFIX: &str = "failed to render launch manifest: ";

/// Normal `SuccessfulCreate` `Created virtual machine pod <name>` (lifecycle.go:184).
pub(crate) fn pod_created(pod_name: &str) -> VmiEvent {
    VmiEvent {
        type_: EventType::Normal,
        reason: reasons::SUCCESSFUL_CREATE.into(),
        message: format!("Created virtual machine pod {pod_name}"),
    }
}

/// Normal `SuccessfulDelete` `Deleted virtual machine pod <name>` (lifecycle.go:1008).
pub(crate) fn pod_deleted(pod_name: &str) -> VmiEvent {
    VmiEvent {
        type_: EventType::Normal,
        reason: reasons::SUCCESSFUL_DELETE.into(),
        message: format!("Deleted virtual machine pod {pod_name}"),
    }
}

/// `FailedHotplugSyncReason` (controller.go:106-107): the reason of the sync error when the
/// temporary pods cannot be cleaned up (lifecycle.go:188-193).
pub(crate) const FAILED_HOTPLUG_SYNC: &str = "FailedHotplugSync";

/// Normal `SuccessfulDelete` `Deleted WaitForFirstConsumer temporary pod <name>`
/// (lifecycle.go:1110).
pub(crate) fn temporary_pod_deleted(pod_name: &str) -> VmiEvent {
    VmiEvent {
        type_: EventType::Normal,
        reason: reasons::SUCCESSFUL_DELETE.into(),
        message: format!("Deleted WaitForFirstConsumer temporary pod {pod_name}"),
    }
}

/// A failed temporary-pod delete (lifecycle.go:188-193, 1106-1108): Warning `FailedDelete`
/// `Failed to delete WaitForFirstConsumer temporary pod <name>` and sync error
/// `FailedHotplugSync` `failed to clean up temporary pods: <error>`.
pub(crate) fn map_temporary_pod_delete_error(
    pod_name: &str,
    error: &ApiFailure,
) -> (SyncError, VmiEvent) {
    (
        SyncError::new(
            FAILED_HOTPLUG_SYNC,
            format!("failed to clean up temporary pods: {}", error.message),
        ),
        VmiEvent {
            type_: EventType::Warning,
            reason: reasons::FAILED_DELETE.into(),
            message: format!("Failed to delete WaitForFirstConsumer temporary pod {pod_name}"),
        },
    )
}

/// A failed pod delete (lifecycle.go:70-74, 1004-1006): Warning `FailedDelete`
/// `Failed to delete virtual machine pod <name>` and sync error `FailedDelete`
/// `failed to delete pod: <error>`.
pub(crate) fn map_pod_delete_error(pod_name: &str, error: &ApiFailure) -> (SyncError, VmiEvent) {
    (
        SyncError::new(
            reasons::FAILED_DELETE,
            format!("failed to delete pod: {}", error.message),
        ),
        VmiEvent {
            type_: EventType::Warning,
            reason: reasons::FAILED_DELETE.into(),
            message: format!("Failed to delete virtual machine pod {pod_name}"),
        },
    )
}

/// A failed launcher pod create (lifecycle.go:174-183).
///
/// - Forbidden and the message contains `violates PodSecurity`: sync error `FailedCreate`
///   `failed to create pod for vmi <ns>/<name>, it needs a privileged namespace to run: <api error>`,
///   and Warning `FailedCreate` `failed to render launch manifest: <that message>`.
/// - Otherwise: sync error `FailedCreate` `failed to create virtual machine pod: <api error>`,
///   and Warning `FailedCreate` `Error creating pod: <api error>`.
///
/// Both sync errors request a requeue.
pub(crate) fn map_pod_create_error(
    vmi_namespace: &str,
    vmi_name: &str,
    error: &ApiFailure,
) -> (SyncError, VmiEvent) {
    if error.is_forbidden() && error.message.contains("violates PodSecurity") {
        let msg = format!(
            "failed to create pod for vmi {vmi_namespace}/{vmi_name}, it needs a privileged namespace to run: {}",
            error.message
        );
        let event = VmiEvent {
            type_: EventType::Warning,
            reason: reasons::FAILED_CREATE.into(),
            message: format!("{FAILED_TO_RENDER_PREFIX}{msg}"),
        };
        return (SyncError::new(reasons::FAILED_CREATE, msg), event);
    }
    (
        SyncError::new(
            reasons::FAILED_CREATE,
            format!("failed to create virtual machine pod: {}", error.message),
        ),
        VmiEvent {
            type_: EventType::Warning,
            reason: reasons::FAILED_CREATE.into(),
            message: format!("Error creating pod: {}", error.message),
        },
    )
}

/// A failed pod metadata patch in `sync` (lifecycle.go:210-227): sync error `FailedPodPatch`
/// with the API error text; no event.
pub(crate) fn map_pod_patch_error(error: &ApiFailure) -> SyncError {
    SyncError::new(reasons::FAILED_POD_PATCH, error.message.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PSA: &str = "pods \"virt-launcher-testvmi-abcde\" is forbidden: violates PodSecurity \"restricted:latest\": privileged (container \"compute\" must not set securityContext.privileged=true)";

    #[test]
    fn pod_security_rejection_maps_to_privileged_namespace_message() {
        let err = ApiFailure::new(403, "Forbidden", PSA);
        let (sync, event) = map_pod_create_error("default", "testvmi", &err);
        assert_eq!(sync.reason, "FailedCreate");
        assert!(sync.requeue);
        assert_eq!(
            sync.message,
            format!(
                "failed to create pod for vmi default/testvmi, it needs a privileged namespace to run: {PSA}"
            )
        );
        assert_eq!(event.type_, EventType::Warning);
        assert_eq!(event.reason, "FailedCreate");
        assert_eq!(
            event.message,
            format!(
                "failed to render launch manifest: failed to create pod for vmi default/testvmi, it needs a privileged namespace to run: {PSA}"
            )
        );
    }

    #[test]
    fn forbidden_without_pod_security_is_a_plain_create_error() {
        let err = ApiFailure::new(403, "Forbidden", "exceeded quota: compute-resources");
        let (sync, event) = map_pod_create_error("default", "testvmi", &err);
        assert_eq!(
            sync.message,
            "failed to create virtual machine pod: exceeded quota: compute-resources"
        );
        assert_eq!(
            event.message,
            "Error creating pod: exceeded quota: compute-resources"
        );
    }

    // The PodSecurity text alone is not enough: it must be a Forbidden error.
    #[test]
    fn pod_security_text_on_other_error_is_plain() {
        let err = ApiFailure::new(500, "InternalError", PSA);
        let (sync, _) = map_pod_create_error("default", "testvmi", &err);
        assert!(
            sync.message
                .starts_with("failed to create virtual machine pod: ")
        );
    }

    // vmi_test.go:1177-1196 "should set an error condition if creating the pod fails"
    #[test]
    fn random_create_error() {
        let err = ApiFailure::new(0, String::new(), "random error");
        let (sync, event) = map_pod_create_error("default", "testvmi", &err);
        assert_eq!(
            (sync.reason.as_str(), sync.message.as_str()),
            (
                "FailedCreate",
                "failed to create virtual machine pod: random error"
            )
        );
        assert_eq!(
            (event.reason.as_str(), event.message.as_str()),
            ("FailedCreate", "Error creating pod: random error")
        );
    }

    #[test]
    fn delete_error_and_success_texts() {
        let err = ApiFailure::new(500, "InternalError", "etcd down");
        let (sync, event) = map_pod_delete_error("virt-launcher-a-xyz", &err);
        assert_eq!(
            (sync.reason.as_str(), sync.message.as_str()),
            ("FailedDelete", "failed to delete pod: etcd down")
        );
        assert_eq!(
            event.message,
            "Failed to delete virtual machine pod virt-launcher-a-xyz"
        );
        assert_eq!(pod_deleted("p").message, "Deleted virtual machine pod p");
        assert_eq!(pod_created("p").message, "Created virtual machine pod p");
        assert_eq!(pod_created("p").type_, EventType::Normal);
    }
}
