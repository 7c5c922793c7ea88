//! API errors rendered as `metav1.Status` bodies, shaped like
//! `k8s.io/apimachinery/pkg/api/errors/errors.go` (`NewNotFound`, `NewConflict`, ...).

use serde_json::{Map, Value, json};

use super::resources::ResourceDef;

/// One `metav1.StatusCause`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cause {
    /// `reason` (e.g. `FieldValueInvalid`, `FieldValueRequired`).
    pub reason: String,
    /// Human readable message.
    pub message: String,
    /// Field path (`metadata.name`).
    pub field: String,
}

/// An API failure: HTTP code plus the `Status` body the real API server would send.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code (also `Status.code`).
    pub code: u16,
    /// `Status.reason` (`NotFound`, `Conflict`, ...); empty for `Unknown`.
    pub reason: String,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, when the real server sends one (boxed to keep the error small).
    pub details: Option<Box<Map<String, Value>>>,
    /// Seconds for a `Retry-After` header (and `details.retryAfterSeconds`).
    pub retry_after: Option<u32>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}: {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

fn details(group: &str, kind: &str, name: &str) -> Map<String, Value> {
    let mut d = Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        d.insert("kind".into(), json!(kind));
    }
    d
}

impl ApiError {
    fn new(code: u16, reason: &str, message: String) -> Self {
        Self {
            code,
            reason: reason.to_string(),
            message,
            details: None,
            retry_after: None,
        }
    }

    /// The error with an empty `Status.details` object, as the server writes for errors about
    /// no particular object.
    fn empty_details(code: u16, reason: &str, message: impl Into<String>) -> Self {
        Self::new(code, reason, message.into()).with_details(Map::new())
    }

    /// The error with `Status.details` set to `d`.
    fn with_details(mut self, d: Map<String, Value>) -> Self {
        self.details = Some(Box::new(d));
        self
    }

    /// `NewInvalid` with a single cause.
    fn invalid_cause(
        def: &ResourceDef,
        name: &str,
        reason: &str,
        field: &str,
        message: String,
    ) -> Self {
        Self::invalid(
            def,
            name,
            vec![Cause {
                reason: reason.into(),
                message,
                field: field.into(),
            }],
        )
    }

    /// `NewNotFound`: 404 `pods "x" not found`.
    pub(crate) fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::not_found_raw(def.group, def.plural, name)
    }

    /// `NewNotFound` for an arbitrary group/resource (e.g. the namespace of a request).
    pub(crate) fn not_found_raw(group: &str, plural: &str, name: &str) -> Self {
        let gr = if group.is_empty() {
            plural.to_string()
        } else {
            format!("{plural}.{group}")
        };
        Self::new(404, "NotFound", format!("{gr} {name:?} not found"))
            .with_details(details(group, plural, name))
    }

    /// The 404 for an unknown path or resource: go-restful's
    /// "the server could not find the requested resource" with empty details.
    pub(crate) fn unknown_resource() -> Self {
        Self::empty_details(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
    }

    /// `NewAlreadyExists`: 409 `pods "x" already exists`.
    pub(crate) fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} {name:?} already exists", def.group_resource()),
        )
        .with_details(details(def.group, def.plural, name))
    }

    /// `NewConflict`: 409 `Operation cannot be fulfilled on pods "x": <why>`.
    pub(crate) fn conflict(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                def.group_resource()
            ),
        )
        .with_details(details(def.group, def.plural, name))
    }

    /// `NewConflict` for an arbitrary group/resource (virt-api's `v1.Resource("virtualmachineinstance")`).
    pub(crate) fn conflict_raw(group: &str, resource: &str, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!("Operation cannot be fulfilled on {resource}.{group} {name:?}: {why}"),
        )
        .with_details(details(group, resource, name))
    }

    /// The optimistic-concurrency conflict (`storage.NewResourceVersionConflictsError` text).
    pub(crate) fn stale(def: &ResourceDef, name: &str) -> Self {
        Self::conflict(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// `NewInvalid`: 422 `Pod "x" is invalid: <field>: <detail>` with causes.
    pub(crate) fn invalid(def: &ResourceDef, name: &str, causes: Vec<Cause>) -> Self {
        let summary: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let summary = if summary.len() == 1 {
            summary[0].clone()
        } else {
            format!("[{}]", summary.join(", "))
        };
        let mut d = details(def.group, def.kind, name);
        d.insert(
            "causes".into(),
            Value::Array(
                causes
                    .iter()
                    .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                    .collect(),
            ),
        );
        Self::new(
            422,
            "Invalid",
            format!("{} {name:?} is invalid: {summary}", def.group_kind()),
        )
        .with_details(d)
    }

    /// One `field.Invalid` cause: `Invalid value: "v": detail`.
    pub(crate) fn invalid_field(
        def: &ResourceDef,
        name: &str,
        field: &str,
        value: &str,
        detail: &str,
    ) -> Self {
        Self::invalid_cause(
            def,
            name,
            "FieldValueInvalid",
            field,
            format!("Invalid value: {value:?}: {detail}"),
        )
    }

    /// One `field.Required` cause.
    pub(crate) fn required_field(def: &ResourceDef, name: &str, field: &str, detail: &str) -> Self {
        Self::invalid_cause(
            def,
            name,
            "FieldValueRequired",
            field,
            format!("Required value: {detail}"),
        )
    }

    /// One `field.Forbidden` cause.
    pub(crate) fn forbidden_field(
        def: &ResourceDef,
        name: &str,
        field: &str,
        detail: &str,
    ) -> Self {
        Self::invalid_cause(
            def,
            name,
            "FieldValueForbidden",
            field,
            format!("Forbidden: {detail}"),
        )
    }

    /// The 422 a failed JSON patch (including a failed `test` op) gets:
    /// `NewGenericServerResponse(422, ...)` in `handlers/patch.go`.
    pub(crate) fn patch_unprocessable() -> Self {
        Self::empty_details(
            422,
            "Invalid",
            "the server rejected our request due to an error in our request",
        )
    }

    /// `NewBadRequest`: 400 with the message only.
    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message.into())
    }

    /// `NewForbidden`: 403 `pods "x" is forbidden: <why>`.
    pub(crate) fn forbidden(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{} {name:?} is forbidden: {why}", def.group_resource()),
        )
        .with_details(details(def.group, def.plural, name))
    }

    /// `NewUnauthorized`: 401.
    pub(crate) fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized".into())
    }

    /// 405 for a verb a path does not serve at all.
    pub(crate) fn method_not_allowed() -> Self {
        Self::empty_details(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    /// `NewResourceExpired`: 410 reason `Expired`.
    pub(crate) fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message.into())
    }

    /// 415 for a patch/content type the resource does not accept.
    pub(crate) fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message.into())
    }

    /// 504 `Timeout` (e.g. a list with a resourceVersion from the future).
    pub(crate) fn timeout(message: impl Into<String>) -> Self {
        Self::empty_details(504, "Timeout", format!("Timeout: {}", message.into()))
    }

    /// `NewInternalError`: 500.
    pub(crate) fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        let mut d = Map::new();
        d.insert("causes".into(), json!([{ "message": message }]));
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(d)
    }

    /// An injected failure with an arbitrary code, shaped like
    /// `NewGenericServerResponse` (429 `TooManyRequests`, 503 `ServiceUnavailable`, 5xx
    /// `InternalError`), with `retry_after` seconds when given.
    pub(crate) fn injected(code: u16, retry_after: Option<u32>) -> Self {
        let (reason, message) = match code {
            429 => (
                "TooManyRequests",
                "the server has received too many requests and has asked us to try again later"
                    .to_string(),
            ),
            503 => (
                "ServiceUnavailable",
                "the server is currently unable to handle the request".to_string(),
            ),
            409 => ("Conflict", "the server reported a conflict".to_string()),
            404 => (
                "NotFound",
                "the server could not find the requested resource".to_string(),
            ),
            504 => (
                "Timeout",
                "the server was unable to return a response in the time allotted, but may still be processing the request".to_string(),
            ),
            c if c >= 500 => (
                "InternalError",
                format!(
                    "an error on the server ({:?}) has prevented the request from succeeding",
                    "injected fault"
                ),
            ),
            _ => ("", format!("injected fault with status code {code}")),
        };
        let mut d = Map::new();
        if let Some(s) = retry_after {
            d.insert("retryAfterSeconds".into(), json!(s));
        }
        let mut e = Self::new(code, reason, message).with_details(d);
        e.retry_after = retry_after;
        e
    }

    /// The `metav1.Status` JSON body.
    pub(crate) fn to_status(&self) -> Value {
        let mut m = Map::new();
        m.insert("kind".into(), json!("Status"));
        m.insert("apiVersion".into(), json!("v1"));
        m.insert("metadata".into(), json!({}));
        m.insert("status".into(), json!("Failure"));
        m.insert("message".into(), json!(self.message));
        if !self.reason.is_empty() {
            m.insert("reason".into(), json!(self.reason));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), Value::Object((**d).clone()));
        }
        m.insert("code".into(), json!(self.code));
        Value::Object(m)
    }
}

/// The `Status` a successful immediate delete returns (`finalizeDelete` in the generic registry).
pub(crate) fn delete_success(def: &ResourceDef, name: &str, uid: &str) -> Value {
    let mut d = details(def.group, def.plural, name);
    if !uid.is_empty() {
        d.insert("uid".into(), json!(uid));
    }
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": d,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{Registry, builtin_resources};

    fn pods() -> ResourceDef {
        let r = Registry::new(builtin_resources());
        r.get(r.core("pods").unwrap()).clone()
    }

    #[test]
    fn not_found_matches_real_server() {
        let s = ApiError::not_found(&pods(), "x").to_status();
        assert_eq!(
            s,
            json!({"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",
                   "message":"pods \"x\" not found","reason":"NotFound",
                   "details":{"name":"x","kind":"pods"},"code":404})
        );
    }

    #[test]
    fn conflict_text() {
        let e = ApiError::stale(&pods(), "p");
        assert_eq!(e.code, 409);
        assert_eq!(
            e.message,
            "Operation cannot be fulfilled on pods \"p\": the object has been modified; please apply your changes to the latest version and try again"
        );
    }

    #[test]
    fn invalid_has_causes() {
        let e = ApiError::invalid_field(&pods(), "p", "metadata.name", "P", "bad");
        let s = e.to_status();
        assert_eq!(s["code"], 422);
        assert_eq!(s["reason"], "Invalid");
        assert_eq!(s["details"]["kind"], "Pod");
        assert_eq!(s["details"]["causes"][0]["field"], "metadata.name");
        assert_eq!(
            s["message"],
            "Pod \"p\" is invalid: metadata.name: Invalid value: \"P\": bad"
        );
    }

    #[test]
    fn injected_429_carries_retry_after() {
        let s = ApiError::injected(429, Some(2)).to_status();
        assert_eq!(s["reason"], "TooManyRequests");
        assert_eq!(s["details"]["retryAfterSeconds"], 2);
    }
}
