//! Write fencing by the leadership term: the controllers' writes go through a client that
//! refuses every write (other than the Lease's own) once the term is over by this process's
//! monotonic clock, whatever the tasks that would notice it have got round to.
//!
//! Why: the elector cancels the term when no renewal succeeded within the renew deadline, but
//! cancelling is a task that must run. A process paused past its deadline (SIGSTOP, a VM or
//! container freeze, a long GC-like stall) wakes with its worker and event-publisher tasks as
//! runnable as the elector's; any of them may send a write before the term is cancelled, while
//! another instance already leads. The monotonic clock kept running during the pause, so a
//! check of `now < last successful renewal + renew deadline` at the moment of each write closes
//! that window (down to the instant between the check and the send). client-go and KubeVirt
//! have no such fence: a virt-controller resumed from a pause can write once more before its
//! `OnStoppedLeading` exits the process.
//!
//! The fence is published by the elector ([`super::LeaderElector::with_term_fence`]): valid
//! until `start of the last successful acquire/renew + renewDeadline`, closed when the term
//! ends.

use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use axum::http::{Method, Request};
use futures::future::BoxFuture;
use kube::client::Body;
use tokio::time::Instant;

/// Until when the current leadership term entitles this process to write. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct TermFence {
    valid_until: Arc<Mutex<Option<Instant>>>,
}

impl TermFence {
    /// The term is valid until `until` (an acquire or renewal succeeded).
    pub fn extend(&self, until: Instant) {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
    }

    /// The term ended.
    pub fn close(&self) {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether a write sent now falls inside the term.
    pub fn is_open(&self) -> bool {
        self.valid_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }
}

/// Why a fenced write was refused (the error a reconcile sees).
#[derive(Debug, thiserror::Error)]
#[error(
    "write refused: this instance's leadership term is over (no Lease renewal within the renew deadline); {method} {path}"
)]
pub struct OutsideTerm {
    method: Method,
    path: String,
}

/// A Lease request (`coordination.k8s.io` leases): the elector's own calls, never fenced.
fn is_lease_request(path: &str) -> bool {
    path.starts_with("/apis/coordination.k8s.io/")
}

fn is_write(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

/// `client` with its writes fenced by `fence`: reads, watches and Lease calls pass; any other
/// write while the fence is closed fails with [`OutsideTerm`] without being sent.
pub fn fenced_client(client: kube::Client, fence: TermFence) -> kube::Client {
    let namespace = client.default_namespace().to_string();
    kube::Client::new(FencedService { client, fence }, namespace)
}

#[derive(Clone)]
struct FencedService {
    client: kube::Client,
    fence: TermFence,
}

impl tower::Service<Request<Body>> for FencedService {
    type Response = axum::http::Response<Body>;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (client, fence) = (self.client.clone(), self.fence.clone());
        Box::pin(async move {
            if is_write(request.method())
                && !is_lease_request(request.uri().path())
                && !fence.is_open()
            {
                return Err(Box::new(OutsideTerm {
                    method: request.method().clone(),
                    path: request.uri().path().to_string(),
                }) as Self::Error);
            }
            client
                .send(request)
                .await
                .map_err(|e| Box::new(e) as Self::Error)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{ApiServer, ApiServerConfig};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use std::time::Duration;

    #[tokio::test]
    async fn writes_pass_only_while_the_term_is_open() {
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        let fence = TermFence::default();
        let client = fenced_client(server.client().await.expect("client"), fence.clone());
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let cm = |name: &str| ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let refused = maps.create(&PostParams::default(), &cm("a")).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("leadership term is over")),
            "{refused:?}"
        );
        assert!(maps.list(&Default::default()).await.is_ok(), "reads pass");
        fence.extend(Instant::now() + Duration::from_secs(60));
        maps.create(&PostParams::default(), &cm("b"))
            .await
            .expect("a write inside the term");
        // A deadline in the past (a process that slept through it) closes the fence at once.
        fence.extend(Instant::now() - Duration::from_millis(1));
        assert!(!fence.is_open());
        assert!(maps.create(&PostParams::default(), &cm("c")).await.is_err());
        // Lease calls always pass (the elector must be able to acquire).
        let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
            Api::namespaced(client, "default");
        let lease = k8s_openapi::api::coordination::v1::Lease {
            metadata: kube::api::ObjectMeta {
                name: Some("l".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        leases
            .create(&PostParams::default(), &lease)
            .await
            .expect("Lease writes are not fenced");
        let created: Vec<String> = server
            .audit()
            .entries()
            .into_iter()
            .filter(|e| e.verb == "create" && (200..300).contains(&e.code))
            .map(|e| e.name)
            .collect();
        assert_eq!(
            created,
            ["b", "l"],
            "refused writes never reached the server"
        );
    }
}
