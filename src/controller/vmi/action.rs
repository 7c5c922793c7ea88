//! The output of the VMI decision: intended API writes and events, each with the reason KubeVirt
//! would do it, plus the sync error and the VMI as `updateStatus` computed it.

use crate::api::{Phase, VirtualMachineInstance};
use k8s_openapi::api::core::v1::{Pod, PodCondition};
use serde::Serialize;
use std::sync::Arc;

pub use crate::controller::context::EventType;

/// An event on the VMI (the recorder's involved object is always the VMI).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VmiEvent {
    /// Normal or Warning.
    pub type_: EventType,
    /// Machine-readable reason, e.g. `SuccessfulCreate`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
}

pub(crate) use crate::controller::common::{ApiFailure, ReconcileError, SyncError};

/// One intended action. The pod namespace is always the VMI's namespace.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action")]
pub enum VmiAction {
    /// Create the launcher pod (lifecycle.go:174-185, 1076-1083). Executor: `ExpectCreations(key,
    /// 1)` on the pod expectations before the call, `CreationObserved(key)` if it fails. The
    /// pod usually has only `generateName`; the API server picks the name. Success and failure
    /// events come from [`super::decide_after_sync`] (Normal `SuccessfulCreate`
    /// `Created virtual machine pod <name>`, or see [`super::map_pod_create_error`]).
    CreatePod {
        /// The rendered pod, unchanged: the snapshot's [`super::VmiSnapshot::rendered_pod`]
        /// itself, shared (a launcher pod is some 8 KB of strings; the two decisions of a
        /// creating reconcile copied it five times).
        pod: Arc<Pod>,
        /// Why, with the KubeVirt source line.
        why: String,
    },
    /// Delete a pod controlled by the VMI with default options (lifecycle.go:994-1011,
    /// 1064-1074). Executor: `ExpectDeletions(key, ["<ns>/<name>"])` before, `DeletionObserved`
    /// on failure; a NotFound answer counts as success. Do not use `uid` as a precondition
    /// (KubeVirt sends none); it identifies the pod for logs and the inspector.
    DeletePod {
        /// Pod name.
        name: String,
        /// Pod UID (informational).
        uid: String,
        /// Why.
        why: String,
    },
    /// Delete a WaitForFirstConsumer temporary pod with grace period 0 once no DataVolume of the
    /// VMI waits for its first consumer (lifecycle.go:188-193, 1095-1122): the pod expectations
    /// of [`VmiAction::DeletePod`], a NotFound answer counts as success; events Normal
    /// `SuccessfulDelete` `Deleted WaitForFirstConsumer temporary pod <name>` or Warning
    /// `FailedDelete` `Failed to delete WaitForFirstConsumer temporary pod <name>` (sync error
    /// `FailedHotplugSync`).
    DeleteTemporaryPod {
        /// Pod name.
        name: String,
        /// Pod UID (informational).
        uid: String,
        /// Why.
        why: String,
    },
    /// Create a hotplug attachment pod (volume-hotplug.go:229-241, `createPod(vmiKey, …)`):
    /// the same pod expectations as [`VmiAction::CreatePod`]; events Normal `SuccessfulCreate`
    /// `Created attachment pod <name>` or Warning `FailedCreate` `Error creating attachment
    /// pod: <error>`.
    CreateAttachmentPod {
        /// The rendered pod ([`crate::launcher::attachment_pod`]).
        pod: Arc<Pod>,
        /// Why.
        why: String,
    },
    /// Create the trigger pod of a hotplugged volume whose DataVolume waits for its first
    /// consumer (volume-hotplug.go:192-200, 252-268): the pod expectations of
    /// [`VmiAction::CreatePod`]; events Normal `SuccessfulCreate` `Created hotplug trigger pod
    /// for volume <volume>` or Warning `FailedCreate` `Error creating hotplug population trigger
    /// pod for volume <volume>: <error>`.
    CreateTriggerPod {
        /// The hotplug volume's name.
        volume: String,
        /// The rendered pod ([`crate::launcher::attachment_pod::render_trigger_pod`]).
        pod: Arc<Pod>,
        /// Why.
        why: String,
    },
    /// Delete an attachment pod with grace period 0 (volume-hotplug.go:366-385), the pod
    /// expectations of [`VmiAction::DeletePod`]; events `SuccessfulDelete` `Deleted attachment
    /// pod <name>` or `FailedDelete` `Failed to delete attachment pod <name>`.
    DeleteAttachmentPod {
        /// Pod name.
        name: String,
        /// Pod UID (informational).
        uid: String,
        /// Why.
        why: String,
    },
    /// Create the VMI's backend-storage claim (storage.go:126-133, backend-storage.go:509-557).
    /// Executor: `ExpectCreations(key, 1)` on the claim expectations before the call,
    /// `CreationObserved(key)` if it fails (SyncError `FailedBackendStorageCreate`).
    CreateBackendStoragePvc {
        /// The claim, with `generateName` ([`super::backend_storage::new_claim`]).
        pvc: Arc<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
        /// Why.
        why: String,
    },
    /// Delete the backend-storage claim of a VMI that no longer needs one (storage.go:117-124);
    /// a failure is the SyncError `Failed deleting backend storage`.
    DeleteBackendStoragePvc {
        /// Claim name.
        name: String,
        /// Why.
        why: String,
    },
    /// RFC 6902 JSON patch on the pod's metadata (annotations/labels), sent with content type
    /// `application/json-patch+json` (lifecycle.go:207-229, 724-844; controller.go:575-597).
    PatchPod {
        /// Pod name.
        name: String,
        /// The operations, in order.
        patch: json_patch::Patch,
        /// Why.
        why: String,
    },
    /// Set the pod readiness-gate condition `kubevirt.io/virtual-machine-unpaused` with a
    /// strategic-merge patch on the pod's `status` subresource (lifecycle.go:926-976).
    PatchPodReadinessCondition {
        /// Pod name.
        pod: String,
        /// `"True"` or `"False"`.
        status: String,
        /// `NotPaused` or `Paused`.
        reason: String,
        /// "the virtual machine is not paused" / "the virtual machine is paused".
        message: String,
        /// The whole condition as written (timestamps = snapshot `now`).
        condition: Box<PodCondition>,
        /// Body for `PATCH .../pods/<pod>/status` with content type
        /// `application/strategic-merge-patch+json`: `{"status":{"conditions":[<condition>]}}`.
        /// (KubeVirt computes a two-way merge diff; sending the whole list element keyed by
        /// `type` has the same effect.)
        patch: serde_json::Value,
        /// Why.
        why: String,
    },
    /// Full `Update` of the VMI (lifecycle.go:594-610): used unless the VMI *was* Running or
    /// Scheduled. Executor: `vmiExpectations.SetExpectations(key, 1, 0)` before, `(key, 0, 0)`
    /// on failure. The object keeps the cached `resourceVersion` (optimistic concurrency).
    UpdateVmi {
        /// The VMI to write (shared with the decision's `new_vmi`).
        vmi: Arc<VirtualMachineInstance>,
        /// Why.
        why: String,
    },
    /// RFC 6902 JSON patch (test + replace/add) of the VMI (lifecycle.go:570-591, 627-721):
    /// used when the VMI was Running or Scheduled (virt-handler owns it then). No expectations.
    PatchVmi {
        /// The operations, in order.
        patch: json_patch::Patch,
        /// Why.
        why: String,
    },
    /// Record an event on the VMI.
    Event {
        /// Normal or Warning.
        type_: EventType,
        /// Event reason.
        reason: String,
        /// Event message.
        message: String,
        /// Why.
        why: String,
    },
}

impl VmiAction {
    /// The `why` of any action.
    pub(crate) fn why(&self) -> &str {
        match self {
            VmiAction::CreatePod { why, .. }
            | VmiAction::DeletePod { why, .. }
            | VmiAction::DeleteTemporaryPod { why, .. }
            | VmiAction::CreateAttachmentPod { why, .. }
            | VmiAction::CreateTriggerPod { why, .. }
            | VmiAction::DeleteAttachmentPod { why, .. }
            | VmiAction::CreateBackendStoragePvc { why, .. }
            | VmiAction::DeleteBackendStoragePvc { why, .. }
            | VmiAction::PatchPod { why, .. }
            | VmiAction::PatchPodReadinessCondition { why, .. }
            | VmiAction::UpdateVmi { why, .. }
            | VmiAction::PatchVmi { why, .. }
            | VmiAction::Event { why, .. } => why,
        }
    }

    /// True for API writes (everything but events).
    pub(crate) fn is_write(&self) -> bool {
        !matches!(self, VmiAction::Event { .. })
    }

    pub(crate) fn event(ev: VmiEvent, why: impl Into<String>) -> Self {
        VmiAction::Event {
            type_: ev.type_,
            reason: ev.reason,
            message: ev.message,
            why: why.into(),
        }
    }
}

/// What happened when the executor applied a decision's `sync_actions` (in order, stopping at
/// the first failure, as `sync` returns on the first error).
#[derive(Debug, Clone, PartialEq)]
pub enum SyncOutcome {
    /// Every sync action succeeded (or there were none). `created_pod` is the pod returned by
    /// the API server for a [`VmiAction::CreatePod`] (it has the generated name).
    Succeeded {
        /// The created pod, when a pod was created.
        created_pod: Option<Box<Pod>>,
    },
    /// `sync_actions[index]` failed with `error`; earlier ones succeeded, later ones were not
    /// attempted.
    Failed {
        /// Index into `sync_actions`.
        index: usize,
        /// The API error.
        error: ApiFailure,
    },
}

/// Why a decision did nothing at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum SkipReason {
    /// Pod, VMI or PVC expectations are not satisfied yet: `execute` returns without syncing
    /// (vmi.go:332-337). The text names the pending counts.
    ExpectationsPending(String),
    /// The decision would create the launcher pod but the snapshot has no rendered pod; render it
    /// and decide again (see [`super::needs_rendered_pod`]).
    RenderedPodMissing,
}

/// The decision for one VMI key.
///
/// Executor protocol:
/// 1. `let d = decide(&snap)`; if `d.skipped` is set, stop (nothing to do; the key is added
///    again after `d.requeue_after` when set, else waits for an event).
/// 2. Apply `d.sync_actions` in order, stopping at the first failure → a [`SyncOutcome`].
/// 3. `let s = decide_after_sync(&snap, &outcome)`; apply `s.status_actions` in order. A failed
///    write there aborts the rest and requeues the key with rate limiting (`updateStatus`
///    returned an error); events never fail.
/// 4. If `s.requeue()`, requeue with rate limiting; otherwise `Forget` the key.
///
/// `decide` alone assumes every sync action succeeds (for a created pod it uses the rendered pod,
/// whose name is only predicted), which is what the inspector shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmiDecision {
    /// `namespace/name`.
    pub key: String,
    /// Set when the decision did nothing at all.
    pub skipped: Option<SkipReason>,
    /// Sync the key again after this delay, whatever happens meanwhile (`AddAfter`): under
    /// [`ControllerRules::vmi_requeue_after_expectations_timeout`](crate::kubevirt_version::ControllerRules)
    /// a decision skipped for pending expectations asks for the expectations timeout; a pending
    /// `MigrationRequired` is re-evaluated after 10 seconds (lifecycle.go:1225-1231).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeue_after: Option<std::time::Duration>,
    /// Stage 1, `sync` (lifecycle.go:66-253): pod creations, deletions and pod patches.
    pub sync_actions: Vec<VmiAction>,
    /// Stage 2, events about stage 1's outcome, then `updateStatus` (lifecycle.go:256-612): pod
    /// condition/label patches, events, and the VMI write (at most one `UpdateVmi`/`PatchVmi`,
    /// always last).
    pub status_actions: Vec<VmiAction>,
    /// The error `sync` returned (drives the requeue).
    pub sync_error: Option<SyncError>,
    /// The error recorded in the `Synchronized` condition on the full-update path: the sync error,
    /// replaced by an image-pull or `FailedGuaranteeResources` error found while Scheduling
    /// (lifecycle.go:391-402). Those replacements never cause a requeue.
    pub condition_error: Option<SyncError>,
    /// `updateStatus` failed before writing anything (only `unknown vmi phase <phase>`): requeue.
    pub update_status_error: Option<ReconcileError>,
    /// The VMI as `updateStatus` computed it (`vmiCopy`), whether or not it differs.
    pub new_vmi: Option<Arc<VirtualMachineInstance>>,
    /// Phase before the decision.
    pub from_phase: Phase,
    /// Phase after the decision's VMI write.
    pub to_phase: Phase,
    /// Why `updateStatus` moves the VMI to a final phase, in a few words (`its launcher pod
    /// vanished`); `None` when it does not.
    pub phase_reason: Option<String>,
    /// Human-readable reasoning, in the order the controller went through it.
    pub explanation: Vec<String>,
}

impl VmiDecision {
    /// All actions, stage 1 then stage 2.
    pub(crate) fn actions(&self) -> impl Iterator<Item = &VmiAction> {
        self.sync_actions.iter().chain(self.status_actions.iter())
    }

    /// True when `execute` would return an error (→ `AddRateLimited`): a requeueing sync error
    /// or an `updateStatus` failure.
    #[cfg(test)]
    pub(crate) fn requeue(&self) -> bool {
        self.update_status_error.is_some() || self.sync_error.as_ref().is_some_and(|e| e.requeue)
    }

    /// The VMI write, if any.
    pub(crate) fn vmi_write(&self) -> Option<&VmiAction> {
        self.status_actions
            .iter()
            .find(|a| matches!(a, VmiAction::UpdateVmi { .. } | VmiAction::PatchVmi { .. }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requeue_follows_sync_error_and_update_failure() {
        let mut d = VmiDecision {
            key: "ns/a".into(),
            skipped: None,
            requeue_after: None,
            sync_actions: vec![],
            status_actions: vec![],
            sync_error: Some(SyncError::informal("FailedPvcNotFound", "x")),
            condition_error: None,
            update_status_error: None,
            new_vmi: None,
            from_phase: Phase::Pending,
            to_phase: Phase::Pending,
            phase_reason: None,
            explanation: vec![],
        };
        assert!(!d.requeue());
        d.sync_error = Some(SyncError::new("FailedCreate", "x"));
        assert!(d.requeue());
        d.sync_error = None;
        d.update_status_error = Some(ReconcileError::UnknownPhase("Unknown".into()));
        assert!(d.requeue());
    }
}
