//! The error types both controllers share: the sync error a reconcile reports in the object's
//! conditions (`common.SyncError`, pkg/virt-controller/watch/common/error.go), a failed API call
//! as the executors saw it (client-go's `*errors.StatusError`, classified like
//! `k8s.io/apimachinery/pkg/api/errors`), and why a reconcile failed ([`ReconcileError`], with
//! how it is retried).

use serde::Serialize;
use std::fmt;

/// A sync error (`common.SyncError`, pkg/virt-controller/watch/common/error.go). The VM
/// controller writes it as the `Failure` condition (vm.go:2457-2514); the VMI controller as
/// `Synchronized=False` on the full-update path and, when `requeue` is true and it came from
/// `sync`, returns it from `execute` so the key is re-added with rate limiting (vmi.go:361-365).
/// The VM controller only makes requeueing sync errors (`common.NewSyncError`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncError {
    /// Condition reason, e.g. `FailedCreate`.
    pub reason: String,
    /// Condition message (`err.Error()`, the wrapped error text).
    pub message: String,
    /// False for "informal" sync errors (`informalSyncError`, vmi.go:165-180), which only
    /// update the condition.
    pub requeue: bool,
}

impl SyncError {
    /// A sync error that requests a requeue (`common.NewSyncError`).
    pub(crate) fn new(reason: impl Into<String>, message: impl Into<String>) -> Self {
        SyncError {
            reason: reason.into(),
            message: message.into(),
            requeue: true,
        }
    }

    /// An informal sync error: condition only, no requeue.
    pub(crate) fn informal(reason: impl Into<String>, message: impl Into<String>) -> Self {
        SyncError {
            reason: reason.into(),
            message: message.into(),
            requeue: false,
        }
    }
}

impl fmt::Display for SyncError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.reason, self.message)
    }
}

impl std::error::Error for SyncError {}

/// A failed API call as the executor saw it (a `metav1.Status`): enough to reproduce
/// `k8serrors.IsNotFound` / `IsForbidden` / `IsConflict` / ... and `err.Error()`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiFailure {
    /// HTTP status code (403, 404, 409, 500...); 0 when the request never got an answer.
    pub code: u16,
    /// `metav1.Status.reason` (`Forbidden`, `NotFound`, `Conflict`...); may be empty.
    pub reason: String,
    /// `metav1.Status.message`, which is what Go's `err.Error()` prints for API errors; for
    /// transport errors and local checks, the error text.
    pub message: String,
}

impl From<&kube::Error> for ApiFailure {
    /// An API answer keeps its status code, reason and message; any other client error
    /// (transport, serialisation) becomes code 0 with the error's text.
    fn from(e: &kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => ApiFailure {
                code: status.code,
                reason: status.reason.clone(),
                message: status.message.clone(),
            },
            other => ApiFailure::other(other.to_string()),
        }
    }
}

/// The reason kube's client gives an error answer whose body is not a `metav1.Status` (a
/// plain-text `404 page not found` for a group the server does not serve, a proxy's HTML page).
const UNPARSED_REASON: &str = "Failed to parse error data";

impl ApiFailure {
    /// What client-go makes of an error answer that is not a `metav1.Status`
    /// (rest/request.go `newUnstructuredResponseError` → apimachinery's
    /// `NewGenericServerResponse`, pkg/api/errors/errors.go:437-519): a reason and a fixed text by
    /// status code, then `(verb group.resource[ name])`. kube's client keeps the body as the
    /// message instead, so `err.Error()` differs from KubeVirt's unless this is applied where
    /// the request is known. An answer that was a `Status` is returned unchanged.
    pub(crate) fn for_request(self, verb: &str, group_resource: &str, name: &str) -> Self {
        if self.reason != UNPARSED_REASON {
            return self;
        }
        let server = self.message;
        let (reason, text) = match self.code {
            409 if verb == "POST" => ("AlreadyExists", "the server reported a conflict".into()),
            409 => ("Conflict", "the server reported a conflict".into()),
            404 => (
                "NotFound",
                "the server could not find the requested resource".into(),
            ),
            400 => (
                "BadRequest",
                "the server rejected our request for an unknown reason".into(),
            ),
            401 => (
                "Unauthorized",
                "the server has asked for the client to provide credentials".into(),
            ),
            403 => ("Forbidden", server.clone()),
            405 => (
                "MethodNotAllowed",
                "the server does not allow this method on the requested resource".into(),
            ),
            422 => (
                "Invalid",
                "the server rejected our request due to an error in our request".into(),
            ),
            503 => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request".into(),
            ),
            429 => (
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later"
                    .into(),
            ),
            code if code >= 500 => (
                "InternalError",
                format!(
                    "an error on the server ({server:?}) has prevented the request from succeeding"
                ),
            ),
            code => (
                "",
                format!(
                    "the server responded with the status code {code} but did not return more information"
                ),
            ),
        };
        let target = if name.is_empty() {
            group_resource.to_string()
        } else {
            format!("{group_resource} {name}")
        };
        ApiFailure {
            code: self.code,
            reason: reason.to_string(),
            message: format!("{text} ({} {target})", verb.to_lowercase()),
        }
    }
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiFailure {}

/// Status reasons apimachinery knows (`knownReasons` in k8s.io/apimachinery/pkg/api/errors);
/// a code only counts when the reason is not one of these.
const KNOWN_STATUS_REASONS: &[&str] = &[
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "AlreadyExists",
    "Conflict",
    "Gone",
    "Invalid",
    "ServerTimeout",
    "StoreReadError",
    "Timeout",
    "TooManyRequests",
    "BadRequest",
    "MethodNotAllowed",
    "NotAcceptable",
    "RequestEntityTooLarge",
    "UnsupportedMediaType",
    "InternalError",
    "Expired",
    "ServiceUnavailable",
];

impl ApiFailure {
    /// An API answer with this status code, reason and message.
    pub(crate) fn new(code: u16, reason: impl Into<String>, message: impl Into<String>) -> Self {
        ApiFailure {
            code,
            reason: reason.into(),
            message: message.into(),
        }
    }

    /// A failure that is not an API answer (a transport error, or a local check such as the
    /// `CanAdopt` recheck): code 0, no reason.
    pub(crate) fn other(message: impl Into<String>) -> Self {
        ApiFailure {
            code: 0,
            reason: String::new(),
            message: message.into(),
        }
    }

    /// `ReasonForError(err) == reason`, or an unknown reason with this code
    /// (apimachinery errors.go `reasonAndCodeForError`).
    fn reason_or_code(&self, reason: &str, code: u16) -> bool {
        self.reason == reason
            || (!KNOWN_STATUS_REASONS.contains(&self.reason.as_str()) && self.code == code)
    }

    /// `k8serrors.IsForbidden`: reason `Forbidden`, or an unknown reason with code 403.
    pub(crate) fn is_forbidden(&self) -> bool {
        self.reason_or_code("Forbidden", 403)
    }

    /// `k8serrors.IsNotFound`: reason `NotFound`, or an unknown reason with code 404.
    pub(crate) fn is_not_found(&self) -> bool {
        self.reason_or_code("NotFound", 404)
    }

    /// `k8serrors.IsAlreadyExists`: reason `AlreadyExists` (409 with an unknown reason is a
    /// Conflict, as in apimachinery).
    pub(crate) fn is_already_exists(&self) -> bool {
        self.reason == "AlreadyExists"
    }

    /// `k8serrors.IsInvalid`: reason `Invalid`, or an unknown reason with code 422.
    pub(crate) fn is_invalid(&self) -> bool {
        self.reason_or_code("Invalid", 422)
    }
}

/// Why one reconcile of one key failed: what KubeVirt's `execute` returns, after which `Execute`
/// logs `re-enqueuing VirtualMachine <key>` (or `reenqueuing VirtualMachineInstance <key>`) and
/// re-adds the key with rate limiting (vm.go:347-353, vmi.go:287-295). The text is KubeVirt's
/// `err.Error()` where KubeVirt returns the same error, and names the object (and the field or
/// request) where KubeVirt has no such error.
///
/// A reconcile never fails on unmet expectations: KubeVirt skips the sync then and returns nil
/// (vm.go:388-392, vmi.go:335-338), and so do the executors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReconcileError {
    /// A request the executor made on its own account failed (the VMI's status-stage writes, a
    /// read to confirm a cache absence).
    #[error("{verb} {resource} {key}: {failure}")]
    Api {
        /// The HTTP verb, as client-go's errors print it (`get`, `update`, `patch`, ...).
        verb: &'static str,
        /// The resource, with its subresource (`virtualmachineinstances`, `pods/status`).
        resource: &'static str,
        /// `namespace/name` of the object.
        key: String,
        /// The API's answer.
        failure: ApiFailure,
    },
    /// A step of the sync stopped (the VM controller's `sync`/`updateStatus` aborts and failed
    /// claims): KubeVirt's text, and the API answer when the step stopped on one.
    #[error("{message}")]
    Step {
        /// KubeVirt's error text.
        message: String,
        /// The failed API call the step stopped on, if it did.
        failure: Option<ApiFailure>,
    },
    /// `sync` returned a requeueing sync error (`common.NewSyncError`): its `Error()` is the
    /// wrapped error's text, without the reason (watch/common/error.go:35-37).
    #[error("{}", .0.message)]
    Sync(SyncError),
    /// The launcher pod could not be rendered (lifecycle.go:158-163): the `FailedCreate` sync
    /// error KubeVirt returns for it.
    #[error("{}", .0.message)]
    Render(SyncError),
    /// `updateStatus` met a VMI phase it has no case for (lifecycle.go:608-610).
    #[error("unknown vmi phase {0}")]
    UnknownPhase(String),
    /// The cluster holds an object the controller cannot sync (not in KubeVirt, whose API
    /// validation keeps such objects out).
    #[error("{kind} {key}: {field} {problem}")]
    InvalidObject {
        /// The object's kind.
        kind: &'static str,
        /// `namespace/name` of the object.
        key: String,
        /// The field at fault (`spec.template`).
        field: &'static str,
        /// What is wrong with it (`is required; not syncing`).
        problem: String,
    },
}

/// Serialised as its text, what the reconcile records and `/debug/state` show.
impl Serialize for ReconcileError {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl ReconcileError {
    /// A request of the executor's own that failed.
    pub(crate) fn api(
        verb: &'static str,
        resource: &'static str,
        key: impl Into<String>,
        failure: ApiFailure,
    ) -> Self {
        ReconcileError::Api {
            verb,
            resource,
            key: key.into(),
            failure,
        }
    }

    /// A field of `kind` `key` the controller cannot sync with.
    pub(crate) fn invalid_object(
        kind: &'static str,
        key: impl Into<String>,
        field: &'static str,
        problem: impl Into<String>,
    ) -> Self {
        ReconcileError::InvalidObject {
            kind,
            key: key.into(),
            field,
            problem: problem.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: u16, reason: &str) -> ApiFailure {
        ApiFailure::new(code, reason, "m")
    }

    #[test]
    fn forbidden_by_reason_or_unknown_reason_and_code() {
        assert!(failure(403, "Forbidden").is_forbidden());
        assert!(failure(0, "Forbidden").is_forbidden());
        assert!(failure(403, "").is_forbidden());
        assert!(!failure(403, "Conflict").is_forbidden());
        assert!(!failure(500, "InternalError").is_forbidden());
    }

    #[test]
    fn not_found_by_reason_or_code() {
        assert!(failure(404, "NotFound").is_not_found());
        assert!(failure(404, "").is_not_found());
        assert!(!failure(409, "Conflict").is_not_found());
    }

    #[test]
    fn already_exists_and_invalid() {
        assert!(failure(409, "AlreadyExists").is_already_exists());
        assert!(failure(422, "Invalid").is_invalid());
        assert!(failure(422, "").is_invalid());
        assert!(!ApiFailure::other("timeout").is_invalid());
        assert!(!ApiFailure::other("timeout").is_not_found());
    }

    #[test]
    fn from_kube_api_error() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 403, "reason": "Forbidden",
            "message": "pods \"x\" is forbidden: violates PodSecurity \"restricted:latest\""
        }))
        .expect("valid status");
        let f = ApiFailure::from(&kube::Error::Api(Box::new(status)));
        assert!(f.is_forbidden());
        assert!(f.message.contains("violates PodSecurity"));
        assert_eq!(f.to_string(), f.message);
    }

    #[test]
    fn sync_error_requeue_flag() {
        assert!(SyncError::new("FailedCreate", "x").requeue);
        assert!(!SyncError::informal("FailedPvcNotFound", "x").requeue);
        assert_eq!(SyncError::new("R", "m").to_string(), "R: m");
    }

    #[test]
    fn reconcile_errors_name_the_object_and_field_or_request() {
        let invalid = ReconcileError::invalid_object(
            "VirtualMachine",
            "ns/vm1",
            "spec.template",
            "is required; not syncing",
        );
        assert_eq!(
            invalid.to_string(),
            "VirtualMachine ns/vm1: spec.template is required; not syncing"
        );
        let read = ReconcileError::api(
            "get",
            "virtualmachineinstances",
            "ns/vm1",
            ApiFailure::other("connection refused"),
        );
        assert_eq!(
            read.to_string(),
            "get virtualmachineinstances ns/vm1: connection refused"
        );
        assert_eq!(
            serde_json::to_value(&read).expect("serialises"),
            serde_json::json!(read.to_string())
        );
    }

    /// KubeVirt's texts: a sync error's `Error()` is its message alone (error.go:35-37).
    #[test]
    fn reconcile_errors_from_kubevirt_keep_its_text() {
        let sync = SyncError::new("FailedCreate", "Failure while starting VMI: boom");
        assert_eq!(
            ReconcileError::Sync(sync.clone()).to_string(),
            "Failure while starting VMI: boom"
        );
        assert_eq!(
            ReconcileError::Render(sync).to_string(),
            "Failure while starting VMI: boom"
        );
        assert_eq!(
            ReconcileError::UnknownPhase("Unknown".into()).to_string(),
            "unknown vmi phase Unknown"
        );
        let step = ReconcileError::Step {
            message: "running and runstrategy are mutually exclusive".into(),
            failure: None,
        };
        assert_eq!(
            step.to_string(),
            "running and runstrategy are mutually exclusive"
        );
    }

    /// A DataVolume create against a cluster without CDI: kube-apiserver answers
    /// `404 page not found` as text; KubeVirt's client reports the generic NotFound.
    #[test]
    fn an_answer_that_is_not_a_status_reads_as_client_go_reports_it() {
        let unparsed = |code, body: &str| ApiFailure {
            code,
            reason: UNPARSED_REASON.into(),
            message: body.into(),
        };
        let a = unparsed(404, "404 page not found").for_request(
            "POST",
            "datavolumes.cdi.kubevirt.io",
            "",
        );
        assert_eq!(
            a.message,
            "the server could not find the requested resource (post datavolumes.cdi.kubevirt.io)"
        );
        assert!(a.is_not_found());
        let b =
            unparsed(502, "bad gateway").for_request("PATCH", "virtualmachines.kubevirt.io", "vm1");
        assert_eq!(
            b.message,
            "an error on the server (\"bad gateway\") has prevented the request from succeeding \
             (patch virtualmachines.kubevirt.io vm1)"
        );
        let status = ApiFailure {
            code: 404,
            reason: "NotFound".into(),
            message: "datavolumes.cdi.kubevirt.io \"x\" not found".into(),
        };
        assert_eq!(
            status
                .clone()
                .for_request("POST", "datavolumes.cdi.kubevirt.io", ""),
            status
        );
    }
}
