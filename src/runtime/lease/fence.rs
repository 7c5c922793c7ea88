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
//!
//! Checked where: a check at the request ([`fenced_client`]) leaves the path from the check to
//! the socket open: the request crosses kube's buffer task, the connection pool (perhaps a new
//! connection and its TLS handshake) and hyper's connection task, and a process stopped on that
//! path writes the request when it wakes, past its term. [`fenced_client_from_config`] closes
//! that path too: the write client gets a connection pool of its own whose sockets refuse
//! every write once the fence is closed ([`FencedIo`]; the connection fails and is dropped).
//! What remains is the instant between that check and the `write(2)` right after it. With a
//! proxy (`proxy-url` in the kubeconfig) kube's own stack is kept and the check moves up to
//! each poll of the pool's connection tasks ([`FencedExecutor`]): hyper reads and writes a
//! connection in one task, so that check is one task poll away from the socket.
//!
//! The price: a response still being read when the term ends may be lost with its connection
//! (the write may have been applied; the reconcile sees a connection error, as after a
//! timeout), and every request of that pool is refused outside a term, reads included, so
//! nothing but the controllers' writes (and Events) goes through it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};

use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;

use crate::runtime::gate::{BoxError, gated_client};
use axum::http::Method;
use futures::future::BoxFuture;
use tokio::time::Instant;

/// Until when the current leadership term entitles this process to write. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct TermFence {
    valid_until: Arc<Mutex<Option<Instant>>>,
}

impl TermFence {
    /// The term is valid until `until` (an acquire or renewal succeeded).
    pub(crate) fn extend(&self, until: Instant) {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
    }

    /// The term ended.
    pub(crate) fn close(&self) {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Whether a write sent now falls inside the term.
    pub(crate) fn is_open(&self) -> bool {
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
pub(crate) struct OutsideTerm {
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
    gated_client(client, move |request| {
        let fence = fence.clone();
        Box::pin(async move {
            if is_write(request.method())
                && !is_lease_request(request.uri().path())
                && !fence.is_open()
            {
                tracing::debug!(method = %request.method(), path = request.uri().path(), "write fence closed: write refused");
                return Err(Box::new(OutsideTerm {
                    method: request.method().clone(),
                    path: request.uri().path().to_string(),
                }) as BoxError);
            }
            Ok(request)
        })
    })
}

/// A client built from `config` with a connection pool of its own, its writes fenced by
/// `fence` at the request (as [`fenced_client`]) and at every write to its sockets (see the
/// module docs): once the fence is closed nothing more is written on any of its connections,
/// whatever was already on its way to them.
pub fn fenced_client_from_config(
    config: kube::Config,
    fence: TermFence,
) -> Result<kube::Client, kube::Error> {
    let pool = if config.proxy_url.is_some() {
        connection_fenced_client(config, fence.clone())?
    } else {
        socket_fenced_client(config, fence.clone())?
    };
    Ok(fenced_client(pool, fence))
}

/// The pool alone, every socket write fenced, no request check: kube's stack for a config
/// without proxy (`kube_client::client::builder::make_generic_builder`: HTTP connector, TLS,
/// timeouts, base URI, kube's retry of 429/503/504 answers when `Config::default_retry`,
/// authentication, extra headers, in kube's order) over [`FencedConnector`]. Left out: kube's
/// tracing spans and gzip decompression (no feature here enables it). A retried attempt is a
/// new write to a socket, so the fence checks it too.
fn socket_fenced_client(
    config: kube::Config,
    fence: TermFence,
) -> Result<kube::Client, kube::Error> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https =
        config.rustls_https_connector_with_connector(FencedConnector { inner: http, fence })?;
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let pool: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
        .service(pool);
    Ok(kube::Client::new(service, config.default_namespace))
}

/// hyper-util's HTTP connector, its sockets wrapped in [`FencedIo`].
#[derive(Clone)]
struct FencedConnector {
    inner: HttpConnector,
    fence: TermFence,
}

impl tower::Service<axum::http::Uri> for FencedConnector {
    type Response = FencedIo<<HttpConnector as tower::Service<axum::http::Uri>>::Response>;
    type Error = <HttpConnector as tower::Service<axum::http::Uri>>::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: axum::http::Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let fence = self.fence.clone();
        Box::pin(async move {
            Ok(FencedIo {
                io: connecting.await?,
                fence,
            })
        })
    }
}

/// A socket that refuses every write while the fence is closed: the check sits right before
/// the `write(2)` (below TLS, so handshakes and alerts are refused too).
struct FencedIo<T> {
    io: T,
    fence: TermFence,
}

impl<T> FencedIo<T> {
    fn refused(&self) -> Option<io::Error> {
        (!self.fence.is_open()).then(|| {
            tracing::debug!("write fence closed: a socket write of the write client refused");
            io::Error::other("write refused: this instance's leadership term is over")
        })
    }
}

impl<T: hyper::rt::Read + Unpin> hyper::rt::Read for FencedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: hyper::rt::Write + Unpin> hyper::rt::Write for FencedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.refused() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Some(e) = this.refused() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for FencedIo<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

/// The pool alone with kube's own stack (proxies included), every connection task fenced, no
/// request check.
fn connection_fenced_client(
    config: kube::Config,
    fence: TermFence,
) -> Result<kube::Client, kube::Error> {
    let builder = kube::client::ClientBuilder::try_from((config, FencedExecutor { fence }))?;
    Ok(builder.build())
}

/// What hyper's client hands its executor: connection tasks, background connects, idle
/// watchers (`hyper_util::client::legacy`).
type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Spawns hyper's tasks on tokio, each wrapped in [`Fenced`].
#[derive(Clone)]
struct FencedExecutor {
    fence: TermFence,
}

impl hyper::rt::Executor<Task> for FencedExecutor {
    fn execute(&self, task: Task) {
        tokio::spawn(Fenced {
            task,
            fence: self.fence.clone(),
        });
    }
}

/// A task that ends (and drops what it drives, closing its connection) at its first poll with
/// the fence closed.
struct Fenced {
    task: Task,
    fence: TermFence,
}

impl Future for Fenced {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<()> {
        if !self.fence.is_open() {
            tracing::debug!("write fence closed: a connection task of the write client ends");
            return Poll::Ready(());
        }
        self.task.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{ApiServer, ApiServerConfig};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::{Api, PostParams};
    use std::time::Duration;

    fn config_map(name: &str) -> ConfigMap {
        ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn writes_pass_only_while_the_term_is_open() {
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        let fence = TermFence::default();
        let client = fenced_client(server.client().await.expect("client"), fence.clone());
        let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let refused = maps.create(&PostParams::default(), &config_map("a")).await;
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.to_string().contains("leadership term is over")),
            "{refused:?}"
        );
        assert!(maps.list(&Default::default()).await.is_ok(), "reads pass");
        fence.extend(Instant::now() + Duration::from_secs(60));
        maps.create(&PostParams::default(), &config_map("b"))
            .await
            .expect("a write inside the term");
        // A deadline in the past (a process that slept through it) closes the fence at once.
        fence.extend(Instant::now() - Duration::from_millis(1));
        assert!(!fence.is_open());
        assert!(
            maps.create(&PostParams::default(), &config_map("c"))
                .await
                .is_err()
        );
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

    /// A task of the fenced pool is not polled once the fence is closed: it ends, dropping
    /// what it drives.
    #[tokio::test]
    async fn a_connection_task_ends_at_its_first_poll_outside_the_term() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let polls = Arc::new(AtomicUsize::new(0));
        let task = |polls: Arc<AtomicUsize>| -> Task {
            Box::pin(futures::future::poll_fn(move |_| {
                polls.fetch_add(1, Ordering::SeqCst);
                Poll::Ready(())
            }))
        };
        let fence = TermFence::default();
        let mut closed = Fenced {
            task: task(polls.clone()),
            fence: fence.clone(),
        };
        assert_eq!(futures::poll!(&mut closed), Poll::Ready(()));
        assert_eq!(
            polls.load(Ordering::SeqCst),
            0,
            "never polled outside the term"
        );
        fence.extend(Instant::now() + Duration::from_secs(60));
        let mut open = Fenced {
            task: task(polls.clone()),
            fence,
        };
        assert_eq!(futures::poll!(&mut open), Poll::Ready(()));
        assert_eq!(polls.load(Ordering::SeqCst), 1, "polled inside the term");
    }

    /// The request check passed (it is left out here, as for a process stopped right after
    /// it): the write still never leaves, on a pooled connection or a new one; and the pool
    /// works again in the next term. Both pools: sockets fenced, connection tasks fenced.
    #[tokio::test]
    async fn the_pool_sends_nothing_outside_the_term_even_past_the_request_check() {
        pool_sends_nothing_outside_the_term(socket_fenced_client).await;
        pool_sends_nothing_outside_the_term(connection_fenced_client).await;
    }

    /// The socket-fenced pool keeps kube's retry of a 503 answer (`Config::default_retry`), as
    /// the writes had through kube's own client.
    #[tokio::test]
    async fn the_write_pool_retries_a_503_as_kubes_client_does() {
        use crate::sim::{FaultRule, Verb};
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        server.faults().add(
            FaultRule::error(503)
                .verbs(&[Verb::Create])
                .resource("configmaps")
                .times(1),
        );
        let fence = TermFence::default();
        fence.extend(Instant::now() + Duration::from_secs(60));
        let client =
            fenced_client_from_config(server.kube_config().await.expect("kube config"), fence)
                .expect("client");
        let maps: Api<ConfigMap> = Api::namespaced(client, "default");
        maps.create(&PostParams::default(), &config_map("retried"))
            .await
            .expect("created on the second attempt");
        let codes: Vec<u16> = server
            .audit()
            .entries()
            .into_iter()
            .filter(|e| e.verb == "create" && e.resource == "configmaps")
            .map(|e| e.code)
            .collect();
        assert_eq!(codes, [503, 201]);
    }

    async fn pool_sends_nothing_outside_the_term(
        build: fn(kube::Config, TermFence) -> Result<kube::Client, kube::Error>,
    ) {
        let server = ApiServer::start(ApiServerConfig::default())
            .await
            .expect("server");
        let fence = TermFence::default();
        fence.extend(Instant::now() + Duration::from_secs(60));
        let pool = build(
            server.kube_config().await.expect("kube config"),
            fence.clone(),
        )
        .expect("client");
        let maps: Api<ConfigMap> = Api::namespaced(pool, "default");
        maps.create(&PostParams::default(), &config_map("in-term"))
            .await
            .expect("a write inside the term; its connection stays pooled");
        fence.extend(Instant::now() - Duration::from_millis(1));
        for name in ["pooled-connection", "new-connection"] {
            let refused = maps.create(&PostParams::default(), &config_map(name)).await;
            assert!(refused.is_err(), "{name}: {refused:?}");
        }
        fence.extend(Instant::now() + Duration::from_secs(60));
        maps.create(&PostParams::default(), &config_map("next-term"))
            .await
            .expect("a write in the next term, on a new connection");
        let created: Vec<String> = server
            .audit()
            .entries()
            .into_iter()
            .filter(|e| e.verb == "create")
            .map(|e| e.name)
            .collect();
        assert_eq!(created, ["in-term", "next-term"]);
    }
}
