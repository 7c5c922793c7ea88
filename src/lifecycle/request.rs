//! Sending a start/stop/restart request: to virt-api's subresource endpoint when the cluster
//! serves `subresources.kubevirt.io/v1` (what `virtctl` calls, client-go
//! `virtualmachine_expansion.go` `Start`/`Stop`/`Restart`), otherwise the writes virt-api would
//! make ([`super::decide`]) sent directly to the VM and VMI. Either way a `test` operation that
//! fails because the VM changed between read and write is retried on a fresh read, a bounded
//! number of times.

use super::decide::{Observed, Options, Plan, Refusal, Verb, Write, decide};
use crate::api::manifest::from_value_with_path;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::runtime::apicall::json_patch_unread;
use kube::Resource;
use serde_json::{Value, json};

/// The subresource API group and version virt-api serves.
pub(crate) const SUBRESOURCE_GROUP_VERSION: &str = "subresources.kubevirt.io/v1";
/// Attempts before a request that keeps meeting a changed VM gives up.
pub(crate) const MAX_ATTEMPTS: u32 = 5;
/// virt-api's text for a failed `test` operation (`jsonpatchTestErr`, subresource.go:52).
const JSONPATCH_TEST_ERR: &str = "jsonpatch test operation does not apply";
/// The API server's message for a JSON patch that does not apply (a failed `test` included):
/// `NewGenericServerResponse(422)`, k8s.io/apiserver handlers/patch.go:414.
const PATCH_REJECTED: &str = "the server rejected our request due to an error in our request";

/// One request for one VM.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    pub verb: Verb,
    pub namespace: String,
    pub name: String,
    pub options: Options,
    /// virt-api: `dryRun: [All]`; directly: decide and report, send nothing.
    pub dry_run: bool,
}

impl Request {
    /// `starting`, `force stopping`, … (virtctl's error prefixes, pkg/virtctl/vm/*.go).
    fn doing(&self) -> &'static str {
        match (self.verb, self.options.grace_period.is_some()) {
            (Verb::Start, _) => "starting",
            (Verb::Stop, false) => "stopping",
            (Verb::Stop, true) => "force stopping",
            (Verb::Restart, false) => "restarting",
            (Verb::Restart, true) => "force restarting",
        }
    }

    /// The path of the subresource endpoint.
    pub(crate) fn subresource_path(&self) -> String {
        format!(
            "/apis/{SUBRESOURCE_GROUP_VERSION}/namespaces/{}/virtualmachines/{}/{}",
            self.namespace,
            self.name,
            self.verb.as_str()
        )
    }

    /// The body virt-api decodes (`v1.StartOptions`, `v1.StopOptions`, `v1.RestartOptions`).
    pub(crate) fn body(&self) -> Value {
        let mut body = json!({});
        if let Some(g) = self.options.grace_period {
            let field = match self.verb {
                Verb::Restart => "gracePeriodSeconds",
                _ => "gracePeriod",
            };
            body[field] = json!(g);
        }
        if self.options.paused {
            body["paused"] = json!(true);
        }
        if self.dry_run {
            body["dryRun"] = json!(["All"]);
        }
        body
    }
}

/// How the request was carried out.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Route {
    /// PUT to virt-api's subresource endpoint.
    Subresource,
    /// The writes sent directly; `why` says why not through virt-api.
    Direct { why: String },
}

/// A request carried out (or, with `dry_run`, decided).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Outcome {
    pub route: Route,
    /// Attempts made (more than one when the VM changed between read and write).
    pub attempts: u32,
    /// The direct route's writes, in order (sent unless `dry_run`).
    pub writes: Vec<Write>,
    pub dry_run: bool,
}

/// Why a request was not carried out, naming the VM (`starting VirtualMachine ns/name: …`).
#[derive(Debug, thiserror::Error)]
#[error("{doing} VirtualMachine {namespace}/{name}: {cause}")]
pub(crate) struct LifecycleError {
    /// virtctl's word for the request (`starting`, `force restarting`, …).
    pub doing: &'static str,
    pub namespace: String,
    pub name: String,
    pub cause: Box<Cause>,
}

/// What stopped a request.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Cause {
    /// virt-api's answer (or, directly, what it would answer): 404, a run strategy that does
    /// not allow the verb, a bad grace period, a request already underway.
    #[error("{refusal}{after}")]
    Refused {
        refusal: Refusal,
        /// Written before the refusal, as virt-api does (a Halted VM's stop).
        after: String,
    },
    /// Every attempt met a VM or VMI that had changed since it was read.
    #[error(
        "conflict: the VM changed between read and write on each of {attempts} attempts (a \
         JSON-patch `test` failed); try again"
    )]
    Conflict { attempts: u32 },
    /// A read or write failed for another reason (unreachable, forbidden, …).
    #[error("{what}: {source}")]
    Api { what: String, source: kube::Error },
    /// The VM or VMI read does not decode.
    #[error("the {kind} read does not decode: field {field}: {message}")]
    BadObject {
        kind: &'static str,
        field: String,
        message: String,
    },
}

impl LifecycleError {
    /// The refusal, when virt-api's rules refused the request (read by the tests).
    #[cfg(test)]
    pub(crate) fn refusal(&self) -> Option<&Refusal> {
        match &*self.cause {
            Cause::Refused { refusal, .. } => Some(refusal),
            _ => None,
        }
    }
}

impl Request {
    fn error(&self, cause: Cause) -> LifecycleError {
        LifecycleError {
            doing: self.doing(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            cause: Box::new(cause),
        }
    }
}

/// Carry out `request`: through virt-api when the cluster serves the subresource, else
/// directly.
pub(crate) async fn send(
    client: &kube::Client,
    request: &Request,
) -> Result<Outcome, LifecycleError> {
    match route(client, request.verb).await {
        Route::Subresource => via_subresource(client, request).await,
        Route::Direct { why } => direct(client, request, why).await,
    }
}

/// Which route: discovery of `subresources.kubevirt.io/v1` listing `virtualmachines/VERB`.
pub(crate) async fn route(client: &kube::Client, verb: Verb) -> Route {
    let wanted = format!("virtualmachines/{}", verb.as_str());
    match client
        .list_api_group_resources(SUBRESOURCE_GROUP_VERSION)
        .await
    {
        Ok(list) if list.resources.iter().any(|r| r.name == wanted) => Route::Subresource,
        Ok(_) => Route::Direct {
            why: format!("{SUBRESOURCE_GROUP_VERSION} does not list {wanted}"),
        },
        Err(kube::Error::Api(s)) if s.code == 404 => Route::Direct {
            why: format!("the cluster serves no {SUBRESOURCE_GROUP_VERSION} (no virt-api)"),
        },
        Err(e) => Route::Direct {
            why: format!("{SUBRESOURCE_GROUP_VERSION} discovery failed ({e})"),
        },
    }
}

fn refused(request: &Request, refusal: Refusal, after: String) -> LifecycleError {
    request.error(Cause::Refused { refusal, after })
}

fn api_error(request: &Request, what: String, source: kube::Error) -> LifecycleError {
    request.error(Cause::Api { what, source })
}

fn conflict(request: &Request) -> LifecycleError {
    request.error(Cause::Conflict {
        attempts: MAX_ATTEMPTS,
    })
}

/// PUT the subresource; a 409 from a failed `test` (virt-api re-reads on each call) is
/// retried, any other error answer is virt-api's refusal.
async fn via_subresource(
    client: &kube::Client,
    request: &Request,
) -> Result<Outcome, LifecycleError> {
    let body = serde_json::to_vec(&request.body()).unwrap_or_default();
    for attempt in 1..=MAX_ATTEMPTS {
        let put = http::Request::put(request.subresource_path())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.clone())
            .map_err(|e| {
                api_error(
                    request,
                    "building the request".into(),
                    kube::Error::HttpError(e),
                )
            })?;
        match client.request_text(put).await {
            Ok(_) => {
                return Ok(Outcome {
                    route: Route::Subresource,
                    attempts: attempt,
                    writes: Vec::new(),
                    dry_run: request.dry_run,
                });
            }
            Err(kube::Error::Api(s)) if s.code == 409 && s.message.contains(JSONPATCH_TEST_ERR) => {
                tracing::info!(attempt, "virt-api met a changed VM; asking again");
            }
            Err(kube::Error::Api(s)) => {
                let refusal = Refusal {
                    code: s.code,
                    reason: known_reason(&s.reason),
                    message: s.message.clone(),
                };
                return Err(refused(request, refusal, String::new()));
            }
            Err(e) => {
                return Err(api_error(
                    request,
                    format!("PUT {}", request.subresource_path()),
                    e,
                ));
            }
        }
    }
    Err(conflict(request))
}

/// The `metav1.StatusReason` as a static string (the common ones; others `Failure`).
fn known_reason(reason: &str) -> &'static str {
    [
        "Conflict",
        "NotFound",
        "BadRequest",
        "InternalError",
        "Forbidden",
        "Unauthorized",
        "Invalid",
        "ServiceUnavailable",
    ]
    .into_iter()
    .find(|r| *r == reason)
    .unwrap_or("Failure")
}

/// Whether a write failed on its `test` operation (the object changed since it was read): a
/// 409, or the API server's 422 for a JSON patch that does not apply.
pub(crate) fn is_test_failure(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 409 || (s.code == 422 && s.reason == "Invalid" && s.message == PATCH_REJECTED)
        }
        _ => false,
    }
}

/// Read, decide and write, again from a fresh read when a `test` fails.
async fn direct(
    client: &kube::Client,
    request: &Request,
    why: String,
) -> Result<Outcome, LifecycleError> {
    for attempt in 1..=MAX_ATTEMPTS {
        let observed = observe(client, request).await?;
        let plan = decide(request.verb, &observed, request.options)
            .map_err(|r| refused(request, r, String::new()))?;
        if request.dry_run {
            return finish(request, plan, why, attempt, true);
        }
        match write_all(client, request, &plan).await {
            Ok(()) => return finish(request, plan, why, attempt, false),
            Err(e) if is_test_failure(&e) => {
                tracing::info!(attempt, error = %e, "the VM changed since it was read; re-reading");
            }
            Err(e) => return Err(api_error(request, "writing".into(), e)),
        }
    }
    Err(conflict(request))
}

/// The outcome, or the refusal virt-api answers after its writes.
fn finish(
    request: &Request,
    plan: Plan,
    why: String,
    attempts: u32,
    dry_run: bool,
) -> Result<Outcome, LifecycleError> {
    if let Some(refusal) = plan.refusal {
        let written: Vec<String> = plan.writes.iter().map(Write::summary).collect();
        let after = if written.is_empty() {
            String::new()
        } else {
            let verb = if dry_run { "would write" } else { "wrote" };
            format!(" (virt-api {verb} {} first)", written.join(", "))
        };
        return Err(refused(request, refusal, after));
    }
    Ok(Outcome {
        route: Route::Direct { why },
        attempts,
        writes: plan.writes,
        dry_run,
    })
}

/// Send the plan's writes in order; when the VM status write fails after a force restart
/// lowered the grace period, set it back first (lifecycle.go:476-481).
async fn write_all(
    client: &kube::Client,
    request: &Request,
    plan: &Plan,
) -> Result<(), kube::Error> {
    let (ns, name) = (request.namespace.as_str(), request.name.as_str());
    for write in &plan.writes {
        let sent = match write {
            Write::VmiGracePeriod { patch, .. } => {
                json_patch_unread::<VirtualMachineInstance>(client, ns, name, None, patch).await
            }
            Write::Vm { patch, .. } => {
                json_patch_unread::<VirtualMachine>(client, ns, name, None, patch).await
            }
            Write::VmStatus { patch, .. } => {
                json_patch_unread::<VirtualMachine>(client, ns, name, Some("status"), patch).await
            }
        };
        if let Err(e) = sent {
            if let (Write::VmStatus { .. }, Some(rollback)) = (write, &plan.rollback) {
                let back =
                    json_patch_unread::<VirtualMachineInstance>(client, ns, name, None, rollback)
                        .await;
                if let Err(b) = back {
                    tracing::warn!(error = %b, "could not set the VMI's grace period back");
                }
            }
            return Err(e);
        }
    }
    Ok(())
}

/// GET the VM (404: virt-api's not-found answer) and its VMI (absent on 404).
async fn observe(client: &kube::Client, request: &Request) -> Result<Observed, LifecycleError> {
    let vm_raw = get_raw::<VirtualMachine>(client, request)
        .await?
        .ok_or_else(|| refused(request, Refusal::not_found(&request.name), String::new()))?;
    let vm = decode(request, "VirtualMachine", vm_raw.clone())?;
    let vmi = match get_raw::<VirtualMachineInstance>(client, request).await? {
        Some(raw) => Some(decode(request, "VirtualMachineInstance", raw)?),
        None => None,
    };
    Ok(Observed { vm_raw, vm, vmi })
}

async fn get_raw<K: Resource<DynamicType = ()>>(
    client: &kube::Client,
    request: &Request,
) -> Result<Option<Value>, LifecycleError> {
    let what = || format!("reading {} {}", K::kind(&()), request.name);
    let get = kube::core::Request::new(K::url_path(&(), Some(&request.namespace)))
        .get(&request.name, &Default::default())
        .map_err(|e| api_error(request, what(), kube::Error::BuildRequest(e)))?;
    match client.request::<Value>(get).await {
        Ok(v) => Ok(Some(v)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(api_error(request, what(), e)),
    }
}

fn decode<T: serde::de::DeserializeOwned>(
    request: &Request,
    kind: &'static str,
    raw: Value,
) -> Result<T, LifecycleError> {
    from_value_with_path(raw).map_err(|(field, message)| {
        request.error(Cause::BadObject {
            kind,
            field,
            message,
        })
    })
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
