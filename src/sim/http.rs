//! The HTTP layer: path parsing (`/api/v1/...`, `/apis/<g>/<v>/...`), verbs, query parameters,
//! request bodies, faults, the audit log, and JSON responses.
//!
//! Request-info rules follow `k8s.io/apiserver/pkg/endpoints/request/requestinfo.go`
//! (`GET` collection → `list`, `?watch=true` → `watch`, `DELETE` collection →
//! `deletecollection`, ...). Response codes follow the generic REST handlers: 201 on create,
//! 200 otherwise; a watch that cannot start from its resourceVersion answers 200 with one
//! `ERROR` event (`handlers/watch.go`, `newErrWatcher`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::admission;
use super::audit::{AuditLog, AuditRecord};
use super::convert;
use super::discovery;
use super::faults::{Faults, Verb};
use super::object;
use super::openapi;
use super::patch::{self, PatchKind};
use super::protobuf;
use super::resources::{ResId, ResourceDef};
use super::selector::{FieldSelector, Filter, LabelSelector};
use super::status::{self, ApiError};
use super::store::{DeleteOpts, Deleted, Propagation, Store, Sub, WatchFrom};
use super::table::{self, IncludeObject};
use super::watch::{self, WatchOptions};

/// Largest request body accepted (bytes).
const MAX_BODY: usize = 64 * 1024 * 1024;

/// Shared state of the HTTP handlers.
pub(crate) struct App {
    /// Object store.
    pub store: Arc<Store>,
    /// Audit log.
    pub audit: Arc<AuditLog>,
    /// Fault injection.
    pub faults: Arc<Faults>,
    /// Bearer token (`None` = no authentication).
    pub token: Option<String>,
    /// Reject requests without `Authorization` (breaks kubectl, which sends no token over HTTP).
    pub strict_auth: bool,
    /// Period of watch bookmarks.
    pub bookmark_interval: Duration,
    /// `host:port` the server listens on (for `/api` `serverAddressByClientCIDRs`).
    pub addr: String,
    /// Run virt-api's webhooks and Pod Security admission ([`super::admission`]).
    pub admission: bool,
}

/// The router: every path goes through [`handle`].
pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new().fallback(handle).with_state(app)
}

#[derive(Debug, Clone)]
struct ResReq {
    res: ResId,
    ns: Option<String>,
    name: Option<String>,
    sub: Option<String>,
}

#[derive(Debug)]
enum Target {
    Version,
    Health,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    Resource(ResReq),
    OpenApiRoot,
    OpenApiGv(String),
    /// virt-api's VMI volume subresource (`addvolume`/`removevolume`, [`super::virt_api`]).
    VirtApiVolume {
        ns: String,
        name: String,
        verb: String,
    },
    NotFound,
}

fn parse_path(store: &Store, path: &str) -> Target {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let reg = store.registry();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["version"] => return Target::Version,
        ["healthz"] | ["livez"] | ["readyz"] => return Target::Health,
        ["api"] => return Target::Api,
        ["apis"] => return Target::Apis,
        ["apis", g] => return Target::Group(g.to_string()),
        ["openapi", "v3"] => return Target::OpenApiRoot,
        ["openapi", "v3", rest @ ..] => return Target::OpenApiGv(rest.join("/")),
        [
            "apis",
            "subresources.kubevirt.io",
            "v1",
            "namespaces",
            ns,
            "virtualmachineinstances",
            name,
            verb,
        ] if super::virt_api::serves(verb) => {
            return Target::VirtApiVolume {
                ns: ns.to_string(),
                name: name.to_string(),
                verb: verb.to_string(),
            };
        }
        ["api", v, rest @ ..] => ("", *v, rest),
        ["apis", g, v, rest @ ..] => (*g, *v, rest),
        _ => return Target::NotFound,
    };
    if !reg.serves_group_version(group, version) {
        return Target::NotFound;
    }
    if rest.is_empty() {
        return Target::GroupVersion(group.to_string(), version.to_string());
    }
    let find = |plural: &str| reg.find(group, version, plural);
    let sub_ok = |res: ResId, sub: &str| {
        let d = reg.get(res);
        (sub == "status" && d.status_subresource)
            || (sub == "binding" && d.group.is_empty() && d.plural == "pods")
    };
    let is_ns_sub = |s: &str| group.is_empty() && (s == "status" || s == "finalize");
    let rr = |res, ns: Option<&str>, name: Option<&str>, sub: Option<&str>| {
        Target::Resource(ResReq {
            res,
            ns: ns.map(str::to_string),
            name: name.map(str::to_string),
            sub: sub.map(str::to_string),
        })
    };
    match rest {
        ["namespaces", ns, r, tail @ ..] if !is_ns_sub(r) => {
            let Some(res) = find(r) else {
                return Target::NotFound;
            };
            if !reg.get(res).namespaced {
                return Target::NotFound;
            }
            match tail {
                [] => rr(res, Some(ns), None, None),
                [name] => rr(res, Some(ns), Some(name), None),
                [name, sub] if sub_ok(res, sub) => rr(res, Some(ns), Some(name), Some(sub)),
                _ => Target::NotFound,
            }
        }
        [r, tail @ ..] => {
            let Some(res) = find(r) else {
                return Target::NotFound;
            };
            let namespaced = reg.get(res).namespaced;
            match tail {
                [] => rr(res, None, None, None),
                [name] if !namespaced => rr(res, None, Some(name), None),
                [name, sub] if !namespaced && sub_ok(res, sub) => {
                    rr(res, None, Some(name), Some(sub))
                }
                _ => Target::NotFound,
            }
        }
        [] => Target::NotFound,
    }
}

fn json_bytes(code: u16, body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn json_response(code: u16, v: &Value) -> Response {
    json_bytes(code, serde_json::to_vec(v).unwrap_or_default())
}

fn error_response(e: &ApiError) -> Response {
    let mut r = json_response(e.code, &e.to_status());
    if let Some(s) = e.retry_after
        && let Ok(h) = HeaderValue::from_str(&s.to_string())
    {
        r.headers_mut().insert(header::RETRY_AFTER, h);
    }
    r
}

fn query_map(uri: &Uri) -> Result<HashMap<String, String>, ApiError> {
    Query::<HashMap<String, String>>::try_from_uri(uri)
        .map(|q| q.0)
        .map_err(|e| ApiError::bad_request(format!("invalid query: {e}")))
}

fn user_agent(h: &HeaderMap) -> String {
    h.get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string()
}

/// Bearer-token check. client-go (kubectl) never sends credentials over plain HTTP, so a
/// request *without* `Authorization` is accepted; one carrying a wrong token gets 401. With
/// `strict` set, the token is mandatory (kube-rs does send it over HTTP).
fn authorized(app: &App, h: &HeaderMap) -> bool {
    let Some(token) = &app.token else {
        return true;
    };
    match h.get(header::AUTHORIZATION) {
        None => !app.strict_auth,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| t.trim() == token),
    }
}

/// Decode a request body into a JSON object (JSON, or YAML when the content type says so).
fn decode_body(def: &ResourceDef, headers: &HeaderMap, body: &[u8]) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json");
    let v: Value = if ct.contains("yaml") {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else if ct.starts_with(protobuf::CONTENT_TYPE) {
        protobuf::decode(def, body)?
    } else if ct.contains("protobuf") || ct.contains("cbor") {
        return Err(ApiError::unsupported_media_type(format!(
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml (got {ct})"
        )));
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?
    };
    if !v.is_object() {
        return Err(ApiError::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: json: cannot unmarshal {} into Go value of type {}",
            def.kind,
            def.version,
            def.kind,
            match v {
                Value::Array(_) => "array",
                Value::String(_) => "string",
                Value::Number(_) => "number",
                Value::Bool(_) => "bool",
                _ => "null",
            },
            def.kind
        )));
    }
    if let Some(m) = v.get("metadata")
        && !m.is_object()
        && !m.is_null()
    {
        return Err(ApiError::bad_request(format!(
            "{} in version {:?} cannot be handled as a {}: json: cannot unmarshal into Go struct field {}.metadata of type v1.ObjectMeta",
            def.kind, def.version, def.kind, def.kind
        )));
    }
    let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if !kind.is_empty() && kind != def.kind {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {:?} cannot be handled as a {}: the object kind {kind:?} does not match the kind {:?} of the endpoint",
            def.version, def.kind, def.kind
        )));
    }
    if !api_version.is_empty() && api_version != def.api_version() {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({})",
            def.api_version()
        )));
    }
    Ok(v)
}

fn parse_filter(def: &ResourceDef, q: &HashMap<String, String>) -> Result<Filter, ApiError> {
    let labels = match q.get("labelSelector") {
        Some(s) => LabelSelector::parse(s).map_err(ApiError::bad_request)?,
        None => LabelSelector::default(),
    };
    let mut fields = match q.get("fieldSelector") {
        Some(s) => FieldSelector::parse(s, def).map_err(ApiError::bad_request)?,
        None => FieldSelector::default(),
    };
    // Selectors on an alias (events.k8s.io) name the served fields; match the stored ones.
    for r in &mut fields.reqs {
        r.field = convert::storage_field(def, &r.field);
    }
    Ok(Filter { labels, fields })
}

fn parse_bool(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

fn reject_dry_run(q: &HashMap<String, String>, body: Option<&Value>) -> Result<(), ApiError> {
    let in_body = body
        .and_then(|b| b.get("dryRun"))
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    if q.get("dryRun").is_some_and(|v| !v.is_empty()) || in_body {
        return Err(ApiError::bad_request(
            "dryRun is not supported by the embedded API server",
        ));
    }
    Ok(())
}

fn parse_delete_opts(q: &HashMap<String, String>, body: &[u8]) -> Result<DeleteOpts, ApiError> {
    let b: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?
    };
    reject_dry_run(q, Some(&b))?;
    let mut o = DeleteOpts {
        grace_period_seconds: b.get("gracePeriodSeconds").and_then(Value::as_i64),
        ..Default::default()
    };
    if let Some(g) = q.get("gracePeriodSeconds") {
        o.grace_period_seconds = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}")))?,
        );
    }
    let policy = q.get("propagationPolicy").cloned().or_else(|| {
        b.get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    o.propagation = match policy.as_deref() {
        None | Some("") => None,
        Some("Background") => Some(Propagation::Background),
        Some("Foreground") => Some(Propagation::Foreground),
        Some("Orphan") => Some(Propagation::Orphan),
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: {other:?}: supported values: \"Foreground\", \"Background\", \"Orphan\", \"nil\""
            )));
        }
    };
    let orphan = q
        .get("orphanDependents")
        .map(|v| v == "true")
        .or_else(|| b.get("orphanDependents").and_then(Value::as_bool));
    if o.propagation.is_none()
        && let Some(orphan) = orphan
    {
        o.propagation = Some(if orphan {
            Propagation::Orphan
        } else {
            Propagation::Background
        });
    }
    if let Some(p) = b.get("preconditions") {
        o.precondition_uid = p.get("uid").and_then(Value::as_str).map(str::to_string);
        o.precondition_rv = p
            .get("resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string);
    }
    Ok(o)
}

fn list_body(def: &ResourceDef, page: &super::store::ListPage) -> Vec<u8> {
    let converted: Vec<Value>;
    let items: Vec<&Value> = if def.storage.is_some() {
        converted = page
            .items
            .iter()
            .map(|o| convert::from_storage(def, o).unwrap_or_else(|| (**o).clone()))
            .collect();
        converted.iter().collect()
    } else {
        page.items.iter().map(|o| o.as_ref()).collect()
    };
    let mut meta = serde_json::Map::new();
    meta.insert("resourceVersion".into(), json!(page.rv.to_string()));
    if let Some(c) = &page.continue_token {
        meta.insert("continue".into(), json!(c));
    }
    if let Some(r) = page.remaining {
        meta.insert("remainingItemCount".into(), json!(r));
    }
    let head = json!({"kind": def.list_kind(), "apiVersion": def.api_version(), "metadata": meta});
    let mut out = serde_json::to_vec(&head).unwrap_or_default();
    out.pop(); // drop the closing brace
    out.extend_from_slice(b",\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Serialising a Value cannot fail.
        let _ = serde_json::to_writer(&mut out, *item);
    }
    out.extend_from_slice(b"]}");
    out
}

/// Entry point for every request.
pub(crate) async fn handle(State(app): State<Arc<App>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let time = chrono::Utc::now();
    let method = parts.method.clone();
    let uri = parts.uri.clone();
    let headers = parts.headers;
    let ua = user_agent(&headers);
    let path = uri.path().to_string();
    let target = parse_path(&app.store, &path);
    // Non-resource requests (and paths that resolve to nothing) are audited by method.
    let method_verb = match method {
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "get",
    };
    let mut rec = AuditRecord {
        verb: method_verb.into(),
        user_agent: ua.clone(),
        path: path.clone(),
        ..Default::default()
    };
    let public = matches!(target, Target::Version | Target::Health);
    if !public && !authorized(&app, &headers) {
        let e = ApiError::unauthorized();
        app.audit.record(time, rec, e.code);
        return error_response(&e);
    }
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            let e = ApiError::bad_request("request body too large or unreadable");
            app.audit.record(time, rec, e.code);
            return error_response(&e);
        }
    };
    let rr = match target {
        Target::Resource(rr) => rr,
        Target::VirtApiVolume { ns, name, verb } => {
            let resp = virt_api_volume(&app, &method, &ns, &name, &verb, &body, &mut rec);
            app.audit.record(time, rec, resp.status().as_u16());
            return resp;
        }
        other => {
            let resp = non_resource(&app, other, &method);
            app.audit.record(time, rec, resp.status().as_u16());
            return resp;
        }
    };
    let def = app.store.registry().get(rr.res).clone();
    let q = match query_map(&uri) {
        Ok(q) => q,
        Err(e) => {
            app.audit.record(time, rec, e.code);
            return error_response(&e);
        }
    };
    let verb = verb_of(&method, &rr, &q);
    rec.group = def.group.to_string();
    rec.resource = def.plural.to_string();
    rec.subresource = rr.sub.clone().unwrap_or_default();
    rec.namespace = rr.ns.clone().unwrap_or_default();
    rec.name = rr.name.clone().unwrap_or_default();
    let Some(verb) = verb else {
        let e = ApiError::method_not_allowed();
        app.audit.record(time, rec, e.code);
        return error_response(&e);
    };
    rec.verb = verb.as_str().to_string();
    let decision = app.faults.decide(verb, def.plural, &ua);
    if !decision.latency.is_zero() {
        tokio::time::sleep(decision.latency).await;
    }
    if let Some(e) = decision.error {
        return refused(&app, time, rec, (def.group, def.plural), &body, &e);
    }
    if decision.conflict {
        let e = ApiError::stale(&def, rr.name.as_deref().unwrap_or(""));
        return refused(&app, time, rec, (def.group, def.plural), &body, &e);
    }
    let ctx = Ctx {
        app: &app,
        def: &def,
        sres: app.store.registry().storage_id(rr.res),
        rr: &rr,
        q: &q,
        headers: &headers,
        body: &body,
    };
    let result = match verb {
        Verb::Get => ctx.get(),
        Verb::List => ctx.list(decision.stale_list),
        Verb::Watch => ctx.watch(&decision),
        Verb::Create if rr.sub.as_deref() == Some("binding") => ctx.bind(),
        Verb::Create => ctx.create(&mut rec),
        Verb::Update => ctx.update(),
        Verb::Patch => ctx.patch(&mut rec),
        Verb::Delete => ctx.delete(),
        Verb::DeleteCollection => ctx.delete_collection(),
    };
    let mut resp = match result {
        Ok(r) => r,
        Err(e) => {
            rec.status = Some(e.to_status());
            error_response(&e)
        }
    };
    if verb.is_write() && resp.status().is_success() {
        add_finalizer_warnings(&mut resp, &def).await;
    }
    if def.plural == "leases"
        && matches!(verb, Verb::Create | Verb::Update)
        && resp.status().is_success()
    {
        rec.lease = super::audit::LeaseAudit::from_body(&body);
    }
    if verb.is_write() && app.audit.wants_objects(def.group, def.plural) {
        rec.request_object = serde_json::from_slice(&body).ok();
        let (parts, answer) = resp.into_parts();
        let answer = axum::body::to_bytes(answer, usize::MAX)
            .await
            .unwrap_or_default();
        rec.response_object = serde_json::from_slice(&answer).ok();
        resp = Response::from_parts(parts, Body::from(answer));
    }
    app.audit.record(time, rec, resp.status().as_u16());
    resp
}

/// Answer `e` to a request refused before it reached storage (an injected fault), audited as
/// kube-apiserver audits a refused write: the request object it decoded before the failure and
/// the error's `Status` as the response (k8s.io/apiserver v0.36.3 pkg/audit/context.go:158-175
/// copies the Status's code, reason and message into `responseStatus`).
fn refused(
    app: &App,
    time: chrono::DateTime<chrono::Utc>,
    mut rec: AuditRecord,
    (group, resource): (&str, &str),
    body: &[u8],
    e: &ApiError,
) -> Response {
    let status = e.to_status();
    if app.audit.wants_objects(group, resource) {
        rec.request_object = serde_json::from_slice(body).ok();
        rec.response_object = Some(status.clone());
    }
    rec.status = Some(status);
    app.audit.record(time, rec, e.code);
    error_response(e)
}

/// A PUT to virt-api's VMI volume subresource, audited as an `update` of
/// `virtualmachineinstances/VERB` in `subresources.kubevirt.io` (what RBAC grants). Without
/// admission (no virt-api) the path does not exist.
fn virt_api_volume(
    app: &App,
    method: &Method,
    ns: &str,
    name: &str,
    verb: &str,
    body: &[u8],
    rec: &mut AuditRecord,
) -> Response {
    rec.group = "subresources.kubevirt.io".into();
    rec.resource = "virtualmachineinstances".into();
    rec.subresource = verb.into();
    rec.namespace = ns.into();
    rec.name = name.into();
    if !app.admission {
        return error_response(&ApiError::unknown_resource());
    }
    if *method != Method::PUT {
        return error_response(&ApiError::method_not_allowed());
    }
    rec.verb = "update".into();
    let reg = app.store.registry();
    let Some(res) = reg.find("kubevirt.io", "v1", "virtualmachineinstances") else {
        return error_response(&ApiError::unknown_resource());
    };
    let res = reg.storage_id(res);
    match super::virt_api::vmi_volume(&app.store, res, ns, name, verb, body) {
        Ok(()) => {
            let mut r = Response::new(Body::empty());
            *r.status_mut() = StatusCode::ACCEPTED;
            r
        }
        Err(e) => error_response(&e),
    }
}

/// A request for something other than a resource: discovery, OpenAPI, version, health, or a
/// path that resolves to nothing.
fn non_resource(app: &App, target: Target, method: &Method) -> Response {
    if matches!(target, Target::NotFound) {
        error_response(&ApiError::unknown_resource())
    } else if *method != Method::GET {
        error_response(&ApiError::method_not_allowed())
    } else {
        let reg = app.store.registry();
        match target {
            Target::Version => json_response(200, &discovery::version()),
            Target::Health => {
                let mut r = Response::new(Body::from("ok"));
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
                r
            }
            Target::Api => json_response(200, &discovery::api_versions(&app.addr)),
            Target::Apis => json_response(200, &discovery::api_group_list(reg)),
            Target::Group(g) => match discovery::api_group(reg, &g) {
                Some(v) => json_response(200, &v),
                None => error_response(&ApiError::unknown_resource()),
            },
            Target::OpenApiRoot => json_response(200, &openapi::root(reg)),
            Target::OpenApiGv(p) => match openapi::group_version(reg, &p) {
                Some(v) => json_response(200, &v),
                None => error_response(&ApiError::unknown_resource()),
            },
            Target::GroupVersion(g, v) => match discovery::resource_list(reg, &g, &v) {
                Some(v) => json_response(200, &v),
                None => error_response(&ApiError::unknown_resource()),
            },
            _ => error_response(&ApiError::unknown_resource()),
        }
    }
}

/// The verb of a resource request, as the real server's request-info resolver names it; `None`
/// for a method the path does not serve.
fn verb_of(method: &Method, rr: &ResReq, q: &HashMap<String, String>) -> Option<Verb> {
    match (method, rr.name.is_some(), rr.sub.as_deref()) {
        (&Method::GET, false, _) if parse_bool(q, "watch") => Some(Verb::Watch),
        (&Method::GET, false, _) => Some(Verb::List),
        (&Method::GET, true, None | Some("status")) => Some(Verb::Get),
        (&Method::POST, false, None) => Some(Verb::Create),
        (&Method::POST, true, Some("binding")) => Some(Verb::Create),
        (&Method::PUT, true, None | Some("status")) => Some(Verb::Update),
        (&Method::PATCH, true, None | Some("status")) => Some(Verb::Patch),
        (&Method::DELETE, true, None) => Some(Verb::Delete),
        (&Method::DELETE, false, None) => Some(Verb::DeleteCollection),
        _ => None,
    }
}

/// `Warning: 299 - "<text>"` headers for unqualified finalizer names of the written object
/// ([`super::kinds::finalizer_warnings`]).
async fn add_finalizer_warnings(resp: &mut Response, def: &ResourceDef) {
    if def.plural.contains('/') {
        return;
    }
    // Write answers are small JSON objects already in memory.
    let body = std::mem::replace(resp.body_mut(), Body::empty());
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .unwrap_or_default();
    // Only the finalizers are read: decoding every write's answer whole for them was a
    // twelfth of the embedded cluster's CPU in a 10,000-VM start.
    if let Some(finalizers) = super::object::read_finalizers(&bytes) {
        for w in super::kinds::finalizer_warnings(&finalizers) {
            let text = format!("299 - {}", serde_json::Value::String(w));
            if let Ok(h) = HeaderValue::from_str(&text) {
                resp.headers_mut().append(header::WARNING, h);
            }
        }
    }
    *resp.body_mut() = Body::from(bytes);
}

struct Ctx<'a> {
    app: &'a Arc<App>,
    def: &'a ResourceDef,
    /// Where the objects live (differs from `rr.res` for an alias such as events.k8s.io).
    sres: ResId,
    rr: &'a ResReq,
    q: &'a HashMap<String, String>,
    headers: &'a HeaderMap,
    body: &'a Bytes,
}

impl Ctx<'_> {
    /// A JSON response with a stored object in the served form.
    fn obj_response(&self, code: u16, obj: &Value) -> Response {
        if let Some(served) = convert::from_storage(self.def, obj) {
            return json_response(code, &served);
        }
        // A version just committed (or read) is stored serialised: send those bytes instead of
        // encoding the tree again (about 2 % of the embedded cluster's CPU in a 10,000-VM start).
        let current = object::resource_version(obj).parse().ok().and_then(|rv| {
            self.app
                .store
                .current_version(self.sres, self.ns(), object::name(obj), rv)
        });
        match current {
            Some(stored) => json_bytes(code, stored.json().to_vec()),
            None => json_response(code, obj),
        }
    }

    fn ns(&self) -> &str {
        self.rr.ns.as_deref().unwrap_or("")
    }

    /// The `meta.k8s.io` Table version the client asked for, if it asked for one.
    fn table_version(&self) -> Option<&'static str> {
        self.headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .and_then(table::wants_table)
    }

    fn include_object(&self) -> IncludeObject {
        IncludeObject::parse(self.q.get("includeObject").map(String::as_str))
    }

    fn served(&self, obj: &Value) -> Value {
        convert::from_storage(self.def, obj).unwrap_or_else(|| obj.clone())
    }

    fn name(&self) -> &str {
        self.rr.name.as_deref().unwrap_or("")
    }

    fn sub(&self) -> Sub {
        if self.rr.sub.as_deref() == Some("status") {
            Sub::Status
        } else {
            Sub::Main
        }
    }

    fn get(&self) -> Result<Response, ApiError> {
        let obj = self.app.store.get(self.sres, self.ns(), self.name())?;
        if let Some(tv) = self.table_version() {
            let served = self.served(&obj);
            let rv = object::resource_version(&served).to_string();
            let t = table::table(
                self.def,
                tv,
                &[&served],
                Some(rv),
                None,
                self.include_object(),
            );
            return Ok(json_response(200, &t));
        }
        Ok(self.obj_response(200, &obj))
    }

    /// A list; `stale`: the stale-list fault's number of events behind.
    fn list(&self, stale: Option<u64>) -> Result<Response, ApiError> {
        let filter = parse_filter(self.def, self.q)?;
        let limit = match self.q.get("limit") {
            Some(l) if !l.is_empty() => l
                .parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?
                .max(0) as usize,
            _ => 0,
        };
        if let Some(rv) = self.q.get("resourceVersion")
            && !rv.is_empty()
        {
            let n: u64 = rv
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv:?}")))?;
            let cur = self.app.store.current_rv();
            let exact = self.q.get("resourceVersionMatch").map(String::as_str) == Some("Exact");
            if exact && n < cur {
                // No historical snapshots: an exact read of the past is as unavailable as a
                // compacted one on a real server.
                return Err(ApiError::expired(format!(
                    "too old resource version: {n} ({cur})"
                )));
            }
            if n > cur {
                let mut e =
                    ApiError::timeout(format!("Too large resource version: {n}, current: {cur}"));
                if let Some(d) = e.details.as_mut() {
                    d.insert(
                        "causes".into(),
                        json!([{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}]),
                    );
                    d.insert("retryAfterSeconds".into(), json!(1));
                }
                return Err(e);
            }
        }
        let continue_token = self
            .q
            .get("continue")
            .map(String::as_str)
            .filter(|c| !c.is_empty());
        let page = match stale {
            // A continued list resumes at its first page's resourceVersion already.
            Some(behind) if continue_token.is_none() => {
                let not_older_than = self
                    .q
                    .get("resourceVersion")
                    .and_then(|rv| rv.parse().ok())
                    .unwrap_or(0);
                self.app.store.list_stale(
                    self.sres,
                    self.rr.ns.as_deref(),
                    &filter,
                    limit,
                    behind,
                    not_older_than,
                )
            }
            _ => self.app.store.list(
                self.sres,
                self.rr.ns.as_deref(),
                &filter,
                limit,
                continue_token,
            )?,
        };
        if let Some(tv) = self.table_version() {
            let served: Vec<Value> = page.items.iter().map(|o| self.served(o)).collect();
            let refs: Vec<&Value> = served.iter().collect();
            let t = table::table(
                self.def,
                tv,
                &refs,
                Some(page.rv.to_string()),
                page.continue_token.clone(),
                self.include_object(),
            );
            return Ok(json_response(200, &t));
        }
        Ok(json_bytes(200, list_body(self.def, &page)))
    }

    fn watch(&self, faults: &super::faults::Decision) -> Result<Response, ApiError> {
        let filter = parse_filter(self.def, self.q)?;
        let send_initial = parse_bool(self.q, "sendInitialEvents");
        let rv = self
            .q
            .get("resourceVersion")
            .map(String::as_str)
            .unwrap_or("");
        let from =
            if send_initial || rv.is_empty() || rv == "0" {
                WatchFrom::Current
            } else {
                WatchFrom::After(rv.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid resource version: {rv:?}"))
                })?)
            };
        let timeout = match self.q.get("timeoutSeconds") {
            Some(t) => Duration::from_secs(
                t.parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
            ),
            None => Duration::from_secs(1800),
        };
        // Named watches (`fieldSelector=metadata.name=x` is how clients do it) need nothing
        // special; `/pods/<name>?watch=true` is not routed here.
        let drop_rx = faults
            .drop_signal
            .clone()
            .ok_or_else(|| ApiError::internal("a watch decided without its drop signal"))?;
        let reg = match self.app.store.watch(self.sres, self.rr.ns.as_deref(), from) {
            Ok(r) => r,
            Err(e) if e.code == 410 => {
                let body = watch::error_line(&e.to_status());
                let mut r = Response::new(Body::from(body));
                r.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                return Ok(r);
            }
            Err(e) => return Err(e),
        };
        let opts = WatchOptions {
            filter,
            bookmarks: parse_bool(self.q, "allowWatchBookmarks"),
            initial_events_end: send_initial,
            timeout,
            bookmark_interval: self.app.bookmark_interval,
            drop_after: faults.drop_watch_after,
            delay: faults.watch_delay,
            tombstone_deletes: faults.tombstone_deletes,
            drop_events: faults.drop_events.clone(),
            kind: self.def.kind.to_string(),
            api_version: self.def.api_version(),
            convert: self.def.storage.is_some().then(|| self.def.clone()),
            table: self
                .table_version()
                .map(|tv| (self.def.clone(), tv, self.include_object())),
        };
        let s = watch::stream(
            self.app.store.clone(),
            reg.initial,
            reg.rv,
            reg.rx,
            drop_rx,
            opts,
        );
        let mut r = Response::new(Body::from_stream(s));
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        Ok(r)
    }

    fn create(&self, rec: &mut AuditRecord) -> Result<Response, ApiError> {
        reject_dry_run(self.q, None)?;
        let obj = decode_body(self.def, self.headers, self.body)?;
        if !object::name(&obj).is_empty() {
            rec.name = object::name(&obj).to_string();
        }
        let body_ns = object::namespace(&obj);
        if self.def.namespaced {
            if self.rr.ns.is_none() {
                return Err(ApiError::method_not_allowed());
            }
            if !body_ns.is_empty() && body_ns != self.ns() {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
        }
        self.store_new(obj, rec)
    }

    /// Stores `obj` as a new object of this resource (its `apiVersion` and `kind` set from the
    /// resource, converted to the storage version) and answers `201 Created`; the audit record
    /// gets the created name (a `generateName` may have chosen it).
    fn store_new(&self, mut obj: Value, rec: &mut AuditRecord) -> Result<Response, ApiError> {
        if self.def.group.is_empty() && self.def.plural == "pods" {
            self.admit_pod(&mut obj)?;
        }
        if self.app.admission {
            self.admit_create(&mut obj)?;
        }
        if let Some(m) = obj.as_object_mut() {
            m.insert("apiVersion".into(), json!(self.def.api_version()));
            m.insert("kind".into(), json!(self.def.kind));
        }
        let obj = convert::to_storage(self.def, obj);
        let created = self.app.store.create(self.sres, self.ns(), obj)?;
        rec.name = object::name(&created).to_string();
        Ok(self.obj_response(201, &created))
    }

    /// Kubernetes' own admission plugins for a new pod ([`super::pod_admission`]), which run
    /// with or without virt-api's webhooks.
    fn admit_pod(&self, obj: &mut Value) -> Result<(), ApiError> {
        let name = match object::name(obj) {
            "" => object::meta_str(obj, "generateName").to_string(),
            n => n.to_string(),
        };
        let store = &self.app.store;
        let classes = store
            .registry()
            .find("scheduling.k8s.io", "v1", "priorityclasses");
        super::pod_admission::admit_pod(self.def, &name, obj, |class| {
            let res = classes?;
            store.get(res, "", class).ok().map(|pc| (*pc).clone())
        })
    }

    /// Mutating then validating admission of a new object ([`admission`]).
    fn admit_create(&self, obj: &mut Value) -> Result<(), ApiError> {
        admission::mutate_create(self.def, obj)?;
        admission::validate(self.def, obj)?;
        if self.def.group.is_empty() && self.def.plural == "pods" {
            let reg = self.app.store.registry();
            let ns_res = reg.core("namespaces").unwrap_or(0);
            if let Ok(ns) = self.app.store.get(ns_res, "", self.ns()) {
                // Pod Security runs after the name is generated.
                let name = match object::name(obj) {
                    "" => format!(
                        "{}{}",
                        object::meta_str(obj, "generateName"),
                        object::random_suffix()
                    ),
                    n => n.to_string(),
                };
                admission::pod_security(self.def, &ns, &name, obj)?;
            }
        }
        Ok(())
    }

    fn update(&self) -> Result<Response, ApiError> {
        reject_dry_run(self.q, None)?;
        let obj = decode_body(self.def, self.headers, self.body)?;
        if self.app.admission && self.sub() == Sub::Main {
            admission::validate(self.def, &obj)?;
        }
        let obj = convert::to_storage(self.def, obj);
        let updated = self.app.store.update(
            self.sres,
            self.ns(),
            self.name(),
            obj,
            self.sub(),
            !self.def.builtin,
        )?;
        Ok(self.obj_response(200, &updated))
    }

    fn patch(&self, rec: &mut AuditRecord) -> Result<Response, ApiError> {
        reject_dry_run(self.q, None)?;
        let ct = self
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let Some(kind) = PatchKind::from_content_type(ct) else {
            return Err(patch::unsupported_patch(self.def));
        };
        if kind == PatchKind::Strategic && !self.def.builtin {
            return Err(patch::unsupported_patch(self.def));
        }
        if kind == PatchKind::Apply {
            if self.q.get("fieldManager").is_none_or(String::is_empty) {
                return Err(ApiError::invalid_field(
                    self.def,
                    self.name(),
                    "fieldManager",
                    "",
                    "is required for apply patch",
                ));
            }
            // Apply creates the object when it does not exist.
            if self.sub() == Sub::Main
                && self
                    .app
                    .store
                    .get(self.sres, self.ns(), self.name())
                    .is_err()
            {
                let mut cfg = patch::parse_apply(self.body)?;
                let m = object::meta_mut(&mut cfg);
                m.insert("name".into(), json!(self.name()));
                return self.store_new(cfg, rec);
            }
        }
        let def = self.def;
        let body = self.body.clone();
        let validate = self.app.admission && self.sub() == Sub::Main;
        let admit = move |patched: Value| {
            if validate {
                admission::validate(def, &patched)?;
            }
            Ok(patched)
        };
        let patched = self.app.store.mutate(
            self.sres,
            self.ns(),
            self.name(),
            self.sub(),
            false,
            true,
            |cur| match convert::from_storage(def, cur) {
                Some(served) => patch::apply(def, kind, &served, &body)
                    .and_then(admit)
                    .map(|p| convert::to_storage(def, p)),
                None => patch::apply(def, kind, cur, &body).and_then(admit),
            },
        )?;
        Ok(self.obj_response(200, &patched))
    }

    fn delete(&self) -> Result<Response, ApiError> {
        let opts = parse_delete_opts(self.q, self.body)?;
        match self
            .app
            .store
            .delete(self.sres, self.ns(), self.name(), &opts)?
        {
            Deleted::Pending(obj) => Ok(self.obj_response(200, &obj)),
            Deleted::Gone(obj) => Ok(json_response(
                200,
                &status::delete_success(self.def, self.name(), object::uid(&obj)),
            )),
        }
    }

    fn delete_collection(&self) -> Result<Response, ApiError> {
        let opts = parse_delete_opts(self.q, self.body)?;
        let filter = parse_filter(self.def, self.q)?;
        let page = self
            .app
            .store
            .list(self.sres, self.rr.ns.as_deref(), &filter, 0, None)?;
        let mut items = Vec::new();
        for obj in &page.items {
            let ns = object::namespace(obj).to_string();
            let name = object::name(obj).to_string();
            match self.app.store.delete(self.sres, &ns, &name, &opts) {
                Ok(Deleted::Pending(o)) | Ok(Deleted::Gone(o)) => items.push(o),
                Err(e) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let out = super::store::ListPage {
            items,
            rv: self.app.store.current_rv(),
            continue_token: None,
            remaining: None,
        };
        Ok(json_bytes(200, list_body(self.def, &out)))
    }

    /// `POST pods/<name>/binding` (`pkg/registry/core/pod/storage/storage.go`, `assignPod`).
    fn bind(&self) -> Result<Response, ApiError> {
        let b: Value = serde_json::from_slice(self.body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?;
        let node = b
            .pointer("/target/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let pod = self.name().to_string();
        if node.is_empty() {
            return Err(ApiError::required_field(
                self.def,
                &pod,
                "target.name",
                "name is required",
            ));
        }
        let binding_def = ResourceDef {
            plural: "pods/binding",
            ..self.def.clone()
        };
        self.app.store.mutate(
            self.rr.res,
            self.ns(),
            &pod,
            Sub::Binding,
            false,
            false,
            |cur| {
                if object::is_deleting(cur) {
                    return Err(ApiError::conflict(
                        &binding_def,
                        &pod,
                        &format!("pod {pod} is being deleted, cannot be assigned to a host"),
                    ));
                }
                let current = cur
                    .pointer("/spec/nodeName")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if !current.is_empty() {
                    return Err(ApiError::conflict(
                        &binding_def,
                        &pod,
                        &format!("pod {pod} is already assigned to node {current:?}"),
                    ));
                }
                let mut next = cur.clone();
                let annotations = b.pointer("/metadata/annotations");
                object::bind_pod(&mut next, &node, annotations, &object::now_rfc3339());
                Ok(next)
            },
        )?;
        Ok(json_response(
            201,
            &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
        ))
    }
}

/// Status code for an [`IntoResponse`] conversion of an [`ApiError`].
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        error_response(&self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::resources::{Registry, builtin_resources};

    fn store() -> Store {
        Store::new(Arc::new(Registry::new(builtin_resources())), 10)
    }

    fn res(t: Target) -> ResReq {
        match t {
            Target::Resource(r) => r,
            other => panic!("not a resource: {other:?}"),
        }
    }

    #[test]
    fn paths() {
        let s = store();
        let r = res(parse_path(&s, "/api/v1/namespaces/default/pods/p1/status"));
        assert_eq!(r.ns.as_deref(), Some("default"));
        assert_eq!(r.name.as_deref(), Some("p1"));
        assert_eq!(r.sub.as_deref(), Some("status"));
        let r = res(parse_path(&s, "/api/v1/namespaces/default"));
        assert_eq!(r.name.as_deref(), Some("default"));
        assert!(r.ns.is_none());
        let r = res(parse_path(&s, "/api/v1/namespaces/foo/status"));
        assert_eq!(r.sub.as_deref(), Some("status"));
        let r = res(parse_path(&s, "/api/v1/pods"));
        assert!(r.ns.is_none() && r.name.is_none());
        let r = res(parse_path(
            &s,
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances",
        ));
        assert!(r.name.is_none());
        assert!(matches!(parse_path(&s, "/api/v1/pods/x"), Target::NotFound));
        assert!(matches!(
            parse_path(&s, "/api/v1/namespaces/d/widgets"),
            Target::NotFound
        ));
        assert!(matches!(parse_path(&s, "/apis/nope/v1"), Target::NotFound));
        assert!(matches!(
            parse_path(&s, "/api/v1/namespaces/d/configmaps/x/status"),
            Target::NotFound
        ));
        assert!(matches!(
            parse_path(&s, "/apis/kubevirt.io/v1"),
            Target::GroupVersion(..)
        ));
    }
}
