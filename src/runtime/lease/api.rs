//! The three Lease calls leader election needs, behind a small trait so the election logic can
//! be driven by a scripted fake in tests ([`super::fake`]) and by `kube::Api<Lease>` in the
//! binary ([`KubeLeaseApi`]).
//!
//! Corresponds to client-go `tools/leaderelection/resourcelock/leaselock.go` (`LeaseLock.Get`,
//! `Create`, `Update`): `Update` is a full PUT carrying the `metadata.resourceVersion` last read,
//! so the API server rejects it with 409 Conflict if anybody wrote in between.

use std::future::Future;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};

/// Error of one Lease call, classified the way the election algorithm needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The Lease does not exist (HTTP 404): the elector creates it.
    #[error("lease not found: {0}")]
    NotFound(String),
    /// Optimistic-concurrency failure (HTTP 409: `Conflict` on update, `AlreadyExists` on
    /// create): somebody else wrote first, this attempt lost the race.
    #[error("lease conflict: {0}")]
    Conflict(String),
    /// Anything else (transport error, 5xx, forbidden, timeout...): the attempt failed.
    #[error("lease API error: {0}")]
    Other(String),
}

impl LeaseError {
    /// Classifies a kube client error: 404 → `NotFound`, 409 (any reason) → `Conflict`.
    pub(crate) fn from_kube(err: kube::Error) -> Self {
        match &err {
            kube::Error::Api(status) if status.is_not_found() => {
                LeaseError::NotFound(status.message.clone())
            }
            kube::Error::Api(status)
                if status.code == 409 || status.is_conflict() || status.is_already_exists() =>
            {
                LeaseError::Conflict(status.message.clone())
            }
            // The status without kube's debug dump of it: this text ends up in the exit message
            // of a lost Lease.
            kube::Error::Api(status) => LeaseError::Other(format!(
                "{} {}: {}",
                status.code, status.reason, status.message
            )),
            // Transport errors with their cause ("client error (Connect): Connection refused").
            _ => LeaseError::Other(crate::runtime::error_chain(&err)),
        }
    }
}

/// Get / create / replace of `coordination.k8s.io/v1` Leases in one namespace.
///
/// Implementations must be cheap to call concurrently and must honour
/// `metadata.resourceVersion` on `replace` (optimistic concurrency), returning
/// [`LeaseError::Conflict`] when it is stale.
pub trait LeaseApi: Send + Sync + 'static {
    /// GET the Lease `name`.
    fn get(&self, name: &str) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
    /// POST a new Lease; [`LeaseError::Conflict`] if it already exists.
    fn create(&self, lease: &Lease) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
    /// PUT the Lease `name` (whole object, including the `resourceVersion` it was read at).
    fn replace(
        &self,
        name: &str,
        lease: &Lease,
    ) -> impl Future<Output = Result<Lease, LeaseError>> + Send;
}

/// A client for the elector's Lease calls: `config` without kube's default retry layer.
///
/// client-go's elector makes one request per attempt and retries on its own schedule (every
/// retry period, 2 s with jitter). kube's default client instead retries 429/503/504 with
/// backoff inside one call, so during an API outage one "attempt" of a standby took tens of
/// seconds and it took over about 40 s after the outage ended (issue 13 item 2). The
/// controllers keep the default client.
///
/// # Errors
/// What `kube::Client::try_from` returns for the configuration.
pub(crate) fn lease_client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    kube::Client::try_from(config)
}

/// [`LeaseApi`] over a namespaced `kube::Api<Lease>`; every call is bounded by a timeout of
/// its own (an attempt never outlives it, whatever the transport does).
#[derive(Clone)]
pub struct KubeLeaseApi {
    api: Api<Lease>,
    call_timeout: Option<std::time::Duration>,
}

impl KubeLeaseApi {
    /// Leases in `namespace`, through `client` (no call timeout: see
    /// [`KubeLeaseApi::with_call_timeout`]).
    pub(crate) fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
            call_timeout: None,
        }
    }

    /// Fail each call that takes longer than `timeout`.
    pub(crate) fn with_call_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, LeaseError> {
        match self.call_timeout {
            None => call.await.map_err(LeaseError::from_kube),
            Some(limit) => match tokio::time::timeout(limit, call).await {
                Ok(r) => r.map_err(LeaseError::from_kube),
                Err(_) => Err(LeaseError::Other(format!(
                    "no answer within {} ms",
                    limit.as_millis()
                ))),
            },
        }
    }
}

impl LeaseApi for KubeLeaseApi {
    async fn get(&self, name: &str) -> Result<Lease, LeaseError> {
        self.bounded(self.api.get(name)).await
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.bounded(self.api.create(&PostParams::default(), lease))
            .await
    }

    async fn replace(&self, name: &str, lease: &Lease) -> Result<Lease, LeaseError> {
        self.bounded(self.api.replace(name, &PostParams::default(), lease))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_lease_call_that_hangs_fails_at_its_timeout() {
        use crate::sim::faults::{FaultRule, Verb};
        use crate::sim::{ApiServer, ApiServerConfig};
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        server.faults().add(
            FaultRule::latency(std::time::Duration::from_secs(120))
                .verbs(&[Verb::Get])
                .resource("leases"),
        );
        let client = lease_client(server.kube_config().await.expect("config")).expect("client");
        let api = KubeLeaseApi::new(client, "default")
            .with_call_timeout(std::time::Duration::from_millis(200));
        match api.get("virt-controller").await {
            Err(LeaseError::Other(m)) => assert_eq!(m, "no answer within 200 ms"),
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    /// Issue 13 item 2: one elector attempt is one request. With the Lease API answering 503,
    /// kube's default client retries inside the call (the attempt takes seconds); the Lease
    /// client answers the first 503 at once, so the elector's own schedule decides.
    #[tokio::test]
    async fn the_lease_client_makes_one_request_per_call_where_the_default_client_retries() {
        use crate::sim::faults::{FaultRule, Verb};
        use crate::sim::{ApiServer, ApiServerConfig};
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        let gets = |agent: &str| {
            server
                .audit()
                .by_user_agent(agent)
                .into_iter()
                .filter(|e| e.verb == "get" && e.resource == "leases")
                .count()
        };
        for (agent, no_retries) in [("default-client", false), ("lease-client", true)] {
            server.faults().add(
                FaultRule::error(503)
                    .verbs(&[Verb::Get])
                    .resource("leases")
                    .user_agent(agent)
                    .times(2),
            );
            let config = server.kube_config().await.expect("config");
            let mut config = config;
            config.headers.push((
                axum::http::header::USER_AGENT,
                axum::http::HeaderValue::from_str(agent).expect("agent"),
            ));
            let client = if no_retries {
                lease_client(config).expect("lease client")
            } else {
                kube::Client::try_from(config).expect("client")
            };
            let api = KubeLeaseApi::new(client, "default")
                .with_call_timeout(std::time::Duration::from_secs(30));
            let result = api.get("virt-controller").await;
            if no_retries {
                assert!(
                    matches!(result, Err(LeaseError::Other(_))),
                    "the 503 is the attempt's answer: {result:?}"
                );
                assert_eq!(gets(agent), 1, "one request, no hidden retry");
            } else {
                // Retried past both 503s to the real answer (no such Lease).
                assert!(matches!(result, Err(LeaseError::NotFound(_))), "{result:?}");
                assert_eq!(gets(agent), 3, "kube's default client retried twice");
            }
        }
    }

    fn api_error(code: u16, reason: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure",
            "message": format!("{reason} happened"),
            "reason": reason,
            "code": code,
        }))
        .unwrap_or_default();
        kube::Error::Api(Box::new(status))
    }

    #[test]
    fn classifies_kube_errors() {
        assert!(matches!(
            LeaseError::from_kube(api_error(404, "NotFound")),
            LeaseError::NotFound(m) if m == "NotFound happened"
        ));
        for (code, reason, conflict) in [
            (409, "Conflict", true),
            (409, "AlreadyExists", true),
            (500, "InternalError", false),
            (403, "Forbidden", false),
        ] {
            let e = LeaseError::from_kube(api_error(code, reason));
            if conflict {
                assert!(
                    matches!(e, LeaseError::Conflict(_)),
                    "{code} {reason}: {e:?}"
                );
            } else {
                assert_eq!(
                    e,
                    LeaseError::Other(format!("{code} {reason}: {reason} happened")),
                    "the status in a line, for the lost-Lease message"
                );
            }
        }
    }
}
