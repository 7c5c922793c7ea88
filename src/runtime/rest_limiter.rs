//! KubeVirt's client rate limiter: every request of virt-controller's API client (reads,
//! watches and writes alike, it is the rest client's) waits for a token of one token bucket,
//! 200 requests/s with a burst of 400 unless the KubeVirt CR says otherwise, replaced when the
//! CR changes.
//!
//! KubeVirt: `ratelimiter.NewReloadableRateLimiter(flowcontrol.NewTokenBucketRateLimiter(
//! DefaultVirtControllerQPS, DefaultVirtControllerBurst))` set as the client config's
//! `RateLimiter` (pkg/virt-controller/watch/application.go:315-321; 200 and 400,
//! pkg/virt-config/virt-config.go:101-102), and on every configuration change
//! `shouldChangeRateLimiter` sets a new bucket from
//! `controllerConfiguration.restClient.rateLimiter.tokenBucketRateLimiter` (application.go:
//! 371, 557-563; pkg/util/ratelimiter/ratelimiter.go: `Set` swaps the limiter, so the new one
//! starts with a full burst). client-go's rest client waits for it before each request,
//! retries included (k8s.io/client-go/rest/request.go `tryThrottle`), and reports the wait as
//! `kubevirt_rest_client_rate_limiter_duration_seconds`
//! (pkg/monitoring/metrics/common/client/rest_metrics.go:57-65).
//!
//! The bucket is [`BucketRateLimiter`], `golang.org/x/time/rate`'s reservation semantics as
//! client-go's `tokenBucketRateLimiter.Wait` uses them: a request takes a token or reserves
//! the next one and sleeps until it is due, so waiting requests are served in order at the
//! rate. tower's `RateLimit` is not that: it admits a fixed number of requests per fixed
//! window (no burst, no refill between windows) and cannot be reconfigured in place.
//!
//! Leader election does not use this client: KubeVirt builds its elector a client of its own
//! with a fixed 200/400 bucket (application.go:1132-1146), so Lease renewals never queue
//! behind the controllers' requests. The Manager keeps the Lease calls on their own client.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::http::Method;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::gate::gated_client;
use super::metrics::Metrics;
use super::queue::BucketRateLimiter;

/// virt-controller's client rate (`DefaultVirtControllerQPS`, virt-config.go:101).
pub(crate) const DEFAULT_QPS: f32 = 200.0;
/// virt-controller's client burst (`DefaultVirtControllerBurst`, virt-config.go:102).
pub(crate) const DEFAULT_BURST: u32 = 400;

/// The metric of the waits (rest_metrics.go:57-65).
pub(crate) const WAIT_METRIC: &str = "kubevirt_rest_client_rate_limiter_duration_seconds";

/// Labels of [`WAIT_METRIC`]: the request's verb (`get`, `list`, `watch`, `create`, `update`,
/// `patch`, `delete`) and its URL as a template (`/api/v1/namespaces/{namespace}/pods`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WaitLabels {
    verb: String,
    url: String,
}

type WaitFamily = Family<WaitLabels, Histogram, fn() -> Histogram>;

/// Buckets 1 ms × 2^i, i = 0..10 (`prometheus.ExponentialBuckets(0.001, 2, 10)`,
/// rest_metrics.go:27-30).
fn wait_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 10))
}

/// A token bucket that can be replaced while requests use it (KubeVirt's
/// `ReloadableRateLimiter`). Cheap to clone: clones share the bucket.
#[derive(Clone)]
pub(crate) struct ReloadableRateLimiter {
    current: Arc<Mutex<Limit>>,
    waits: Option<WaitFamily>,
}

struct Limit {
    qps: f32,
    burst: u32,
    bucket: Arc<BucketRateLimiter>,
}

impl ReloadableRateLimiter {
    /// A full bucket of `burst` tokens refilled at `qps` per second.
    pub(crate) fn new(qps: f32, burst: u32) -> Self {
        ReloadableRateLimiter {
            current: Arc::new(Mutex::new(Limit::new(qps, burst))),
            waits: None,
        }
    }

    /// Record every wait in `metrics` as [`WAIT_METRIC`].
    pub(crate) fn with_metrics(mut self, metrics: &Metrics) -> Self {
        let family = WaitFamily::new_with_constructor(wait_histogram);
        metrics.register(
            WAIT_METRIC,
            "Client side rate limiter latency in seconds. Broken down by verb and URL",
            family.clone(),
        );
        self.waits = Some(family);
        self
    }

    /// Replace the bucket with a new, full one unless the limits are the same ones
    /// (`shouldChangeRateLimiter` runs on every configuration change; a new bucket with equal
    /// limits would hand out a fresh burst each time, which `Set` does in KubeVirt; keeping the
    /// bucket here is the only difference, and it never lets more through).
    pub(crate) fn set(&self, qps: f32, burst: u32) {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if (current.qps, current.burst) == (qps, burst) {
            return;
        }
        tracing::info!(qps, burst, "setting the API client's rate limiter");
        *current = Limit::new(qps, burst);
    }

    /// The limits in use: (qps, burst).
    #[cfg(test)]
    pub(crate) fn limits(&self) -> (f32, u32) {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        (current.qps, current.burst)
    }

    /// Take a token, waiting for it if there is none (`Wait`); returns how long it waited.
    pub(crate) async fn wait(&self) -> Duration {
        let bucket = self
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .bucket
            .clone();
        let delay = bucket.reserve();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        delay
    }

    fn observe(&self, method: &Method, uri: &axum::http::Uri, waited: Duration) {
        if let Some(waits) = &self.waits {
            let labels = WaitLabels {
                verb: verb(method, uri),
                url: url_template(uri),
            };
            waits.get_or_create(&labels).observe(waited.as_secs_f64());
        }
    }
}

impl Limit {
    fn new(qps: f32, burst: u32) -> Self {
        Limit {
            qps,
            burst,
            bucket: Arc::new(BucketRateLimiter::new(f64::from(qps), burst)),
        }
    }
}

/// `client` with every request waiting for `limiter` first.
pub(crate) fn rate_limited_client(
    client: kube::Client,
    limiter: ReloadableRateLimiter,
) -> kube::Client {
    gated_client(client, move |request| {
        let limiter = limiter.clone();
        Box::pin(async move {
            let waited = limiter.wait().await;
            limiter.observe(request.method(), request.uri(), waited);
            if waited > Duration::from_secs(1) {
                tracing::debug!(
                    waited_ms = waited.as_millis() as u64,
                    method = %request.method(),
                    path = request.uri().path(),
                    "waited for the client-side rate limiter"
                );
            }
            Ok(request)
        })
    })
}

/// The metric's verb (KubeVirt's `getVerbFromHTTPVerb`, rt_wrapper.go:86-117): PUT `update`,
/// POST `create`, a GET `watch`, `list` (of a collection) or `get`.
fn verb(method: &Method, uri: &axum::http::Uri) -> String {
    let verb = match *method {
        Method::PUT => "update",
        Method::POST => "create",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        Method::GET => {
            let watch = uri.path().contains("/watch/")
                || uri
                    .query()
                    .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
            if watch {
                "watch"
            } else if resource_position(uri.path()).is_some_and(|(at, n)| at + 1 == n) {
                "list"
            } else {
                "get"
            }
        }
        ref other => return other.as_str().to_string(),
    };
    verb.to_string()
}

/// Where the resource is among the path's segments (after `/api/v1` or `/apis/GROUP/VERSION`
/// and `namespaces/NAME`), and how many segments there are.
fn resource_position(path: &str) -> Option<(usize, usize)> {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let start = match segments.first() {
        Some(&"api") => 2,
        Some(&"apis") => 3,
        _ => return None,
    };
    let at = if segments.get(start) == Some(&"namespaces") && segments.len() > start + 2 {
        start + 2
    } else {
        start
    };
    (at < segments.len()).then_some((at, segments.len()))
}

/// The URL with the namespace and name replaced by `{namespace}` and `{name}` and every query
/// value by `{value}` (client-go's `finalURLTemplate`, rest/request.go:589-660); the server's
/// address is left out.
fn url_template(uri: &axum::http::Uri) -> String {
    let path = uri.path();
    let mut segments: Vec<String> = path
        .trim_start_matches('/')
        .split('/')
        .map(str::to_string)
        .collect();
    if let Some((at, n)) = resource_position(path) {
        if at >= 2 && segments[at - 2] == "namespaces" {
            segments[at - 1] = "{namespace}".into();
        }
        if at + 1 < n {
            segments[at + 1] = "{name}".into();
        }
    }
    let mut url = format!("/{}", segments.join("/"));
    if let Some(query) = uri.query() {
        let mut keys: Vec<&str> = query
            .split('&')
            .filter_map(|p| p.split('=').next())
            .filter(|k| !k.is_empty())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if !keys.is_empty() {
            let params: Vec<String> = keys.iter().map(|k| format!("{k}={{value}}")).collect();
            url.push('?');
            url.push_str(&params.join("&"));
        }
    }
    url
}

#[cfg(test)]
mod tests;
