//! A kube client whose every request passes a check before it is sent: the shadow's read-only
//! client (`shadow::watch::read_only`), the write fence at the request
//! ([`super::lease::fenced_client`]) and the client-side rate limit
//! ([`super::rest_limiter::rate_limited_client`]) are each one check.

use axum::http::{Request, Response};
use futures::future::BoxFuture;
use kube::client::Body;
use std::task::{Context, Poll};

/// The error of a gated request: the check's refusal, or the client's own error.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `client` with every request handed to `check` first, which gives it back to be sent or
/// refuses it (the request is then never sent).
pub(crate) fn gated_client<F>(client: kube::Client, check: F) -> kube::Client
where
    F: Fn(Request<Body>) -> BoxFuture<'static, Result<Request<Body>, BoxError>>
        + Send
        + Sync
        + 'static,
{
    let namespace = client.default_namespace().to_string();
    kube::Client::new(Gate { client, check }, namespace)
}

struct Gate<F> {
    client: kube::Client,
    check: F,
}

impl<F> tower::Service<Request<Body>> for Gate<F>
where
    F: Fn(Request<Body>) -> BoxFuture<'static, Result<Request<Body>, BoxError>>,
{
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let client = self.client.clone();
        let checked = (self.check)(request);
        Box::pin(async move {
            let request = checked.await?;
            client
                .send(request)
                .await
                .map_err(|e| Box::new(e) as BoxError)
        })
    }
}
