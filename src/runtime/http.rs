//! The controller's HTTP endpoints (plain HTTP, loopback by default `127.0.0.1:8182`):
//!
//! - `GET /metrics`: Prometheus text exposition (workqueue metrics with KubeVirt's names,
//!   leader status, reconcile counters).
//! - `GET /healthz`: 200 with `{"apiserver":{"connectivity":"ok","version":"vX.Y.Z"}}` when the API
//!   server answers `/version`, 500 with the error otherwise (KubeVirt's
//!   `KubeConnectionHealthzFuncFactory`, pkg/healthz).
//! - `GET /leader`: always 200 with `{"apiserver":{"leader":"true"|"false"}}`
//!   (pkg/virt-controller/watch/application.go:1017-1034).
//! - `GET /debug/state`: JSON snapshot of what the controller is thinking (identity, leading,
//!   Lease observation, queues, in-flight keys, retries, expectations, last reconcile results);
//!   `GET /debug/state?key=NAMESPACE/NAME` the same for one key only (400 on a malformed key).
//!
//! The endpoints read state through [`EndpointSources`]; nothing here knows about VMs.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::future::BoxFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Where the endpoints get their answers from.
#[derive(Clone)]
pub(crate) struct EndpointSources {
    /// Prometheus text for `/metrics`.
    pub metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// Whether this instance currently leads, for `/leader`.
    pub leading: Arc<dyn Fn() -> bool + Send + Sync>,
    /// JSON for `/debug/state`, or for `/debug/state?key=KEY` (one key only); `Err` is a bad key
    /// (answered 400 with the message).
    #[allow(clippy::type_complexity)]
    pub debug_state: Arc<dyn Fn(Option<&str>) -> Result<serde_json::Value, String> + Send + Sync>,
    /// API server check for `/healthz`: the server's git version, or an error text.
    pub healthz: Arc<dyn Fn() -> BoxFuture<'static, Result<String, String>> + Send + Sync>,
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn metrics(State(s): State<EndpointSources>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, crate::runtime::metrics::CONTENT_TYPE)],
        (s.metrics)(),
    )
        .into_response()
}

async fn leader(State(s): State<EndpointSources>) -> Response {
    let leading = if (s.leading)() { "true" } else { "false" };
    json(
        StatusCode::OK,
        serde_json::json!({"apiserver": {"leader": leading}}),
    )
}

async fn healthz(State(s): State<EndpointSources>) -> Response {
    match (s.healthz)().await {
        Ok(version) => json(
            StatusCode::OK,
            serde_json::json!({"apiserver": {"connectivity": "ok", "version": version}}),
        ),
        Err(e) => json(
            StatusCode::INTERNAL_SERVER_ERROR,
            serde_json::json!({"apiserver": {"connectivity": "failed", "error": e}}),
        ),
    }
}

/// The query of `/debug/state`.
#[derive(Debug, serde::Deserialize)]
struct DebugQuery {
    key: Option<String>,
}

async fn debug_state(State(s): State<EndpointSources>, Query(q): Query<DebugQuery>) -> Response {
    match (s.debug_state)(q.key.as_deref()) {
        Ok(body) => json(StatusCode::OK, body),
        Err(e) => json(StatusCode::BAD_REQUEST, serde_json::json!({"error": e})),
    }
}

/// The router with all four endpoints.
pub(crate) fn router(sources: EndpointSources) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/leader", get(leader))
        .route("/debug/state", get(debug_state))
        .with_state(sources)
}

/// Bind `addr` and serve until `cancel`. Returns the bound address (useful with port 0) and the
/// server task. Errors: the address cannot be bound.
pub(crate) async fn serve(
    addr: SocketAddr,
    sources: EndpointSources,
    cancel: CancellationToken,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let app = router(sources);
    let task = tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move { cancel.cancelled().await })
            .await;
        if let Err(e) = result {
            tracing::error!(error = %e, "HTTP endpoint server failed");
        }
    });
    Ok((local, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    async fn get_text(addr: SocketAddr, path: &str) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut buf = String::new();
        s.read_to_string(&mut buf).await.unwrap();
        let code = buf[9..12].parse().unwrap();
        let body = buf.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
        (code, body)
    }

    #[tokio::test]
    async fn endpoints_answer_like_kubevirt() {
        let leading = Arc::new(AtomicBool::new(false));
        let l2 = leading.clone();
        let healthy = Arc::new(AtomicBool::new(true));
        let h2 = healthy.clone();
        let sources = EndpointSources {
            metrics: Arc::new(|| {
                "kubevirt_workqueue_depth{name=\"virt-controller-vm\"} 0\n".to_string()
            }),
            leading: Arc::new(move || l2.load(Ordering::SeqCst)),
            debug_state: Arc::new(|key: Option<&str>| match key {
                None => Ok(serde_json::json!({"identity": "me"})),
                Some("demo/vm-a") => Ok(serde_json::json!({"key": "demo/vm-a"})),
                Some(other) => Err(format!("bad key {other}")),
            }),
            healthz: Arc::new(move || {
                let ok = h2.load(Ordering::SeqCst);
                Box::pin(async move {
                    if ok {
                        Ok("v1.33.0".to_string())
                    } else {
                        Err("connection refused".to_string())
                    }
                })
            }),
        };
        let cancel = CancellationToken::new();
        let (addr, task) = serve("127.0.0.1:0".parse().unwrap(), sources, cancel.clone())
            .await
            .unwrap();

        let (code, body) = get_text(addr, "/leader").await;
        assert_eq!(
            (code, body.as_str()),
            (200, r#"{"apiserver":{"leader":"false"}}"#)
        );
        leading.store(true, Ordering::SeqCst);
        assert_eq!(
            get_text(addr, "/leader").await.1,
            r#"{"apiserver":{"leader":"true"}}"#
        );

        let (code, body) = get_text(addr, "/metrics").await;
        assert_eq!(code, 200);
        assert!(body.contains("kubevirt_workqueue_depth"));

        assert_eq!(
            get_text(addr, "/debug/state").await.1,
            r#"{"identity":"me"}"#
        );
        assert_eq!(
            get_text(addr, "/debug/state?key=demo%2Fvm-a").await,
            (200, r#"{"key":"demo/vm-a"}"#.to_string())
        );
        assert_eq!(
            get_text(addr, "/debug/state?key=demo/vm-a").await,
            (200, r#"{"key":"demo/vm-a"}"#.to_string())
        );
        assert_eq!(
            get_text(addr, "/debug/state?key=x").await,
            (400, r#"{"error":"bad key x"}"#.to_string())
        );

        let (code, body) = get_text(addr, "/healthz").await;
        assert_eq!(code, 200);
        assert!(body.contains("\"connectivity\":\"ok\""));
        healthy.store(false, Ordering::SeqCst);
        let (code, body) = get_text(addr, "/healthz").await;
        assert_eq!(code, 500);
        assert!(body.contains("connection refused"));

        assert_eq!(get_text(addr, "/nope").await.0, 404);
        cancel.cancel();
        task.await.unwrap();
    }
}
