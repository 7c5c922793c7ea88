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
    pub fn from_kube(err: kube::Error) -> Self {
        match &err {
            kube::Error::Api(status) if status.is_not_found() => {
                LeaseError::NotFound(status.message.clone())
            }
            kube::Error::Api(status)
                if status.code == 409 || status.is_conflict() || status.is_already_exists() =>
            {
                LeaseError::Conflict(status.message.clone())
            }
            _ => LeaseError::Other(err.to_string()),
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

/// [`LeaseApi`] over a namespaced `kube::Api<Lease>`.
#[derive(Clone)]
pub struct KubeLeaseApi {
    api: Api<Lease>,
}

impl KubeLeaseApi {
    /// Leases in `namespace`, through `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: Api::namespaced(client, namespace),
        }
    }

    /// Wraps an existing (namespaced) `Api<Lease>`.
    pub fn from_api(api: Api<Lease>) -> Self {
        Self { api }
    }
}

impl LeaseApi for KubeLeaseApi {
    async fn get(&self, name: &str) -> Result<Lease, LeaseError> {
        self.api.get(name).await.map_err(LeaseError::from_kube)
    }

    async fn create(&self, lease: &Lease) -> Result<Lease, LeaseError> {
        self.api
            .create(&PostParams::default(), lease)
            .await
            .map_err(LeaseError::from_kube)
    }

    async fn replace(&self, name: &str, lease: &Lease) -> Result<Lease, LeaseError> {
        self.api
            .replace(name, &PostParams::default(), lease)
            .await
            .map_err(LeaseError::from_kube)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
                assert!(matches!(e, LeaseError::Other(_)), "{code} {reason}: {e:?}");
            }
        }
    }
}
