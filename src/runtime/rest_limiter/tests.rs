use super::*;
use axum::http::Request;
use kube::client::Body;
use std::sync::Mutex as StdMutex;
use tokio::time::Instant;

/// A client whose every request is answered `{}` at once, recording when each arrived.
fn recording_client() -> (kube::Client, Arc<StdMutex<Vec<Instant>>>) {
    let arrivals = Arc::new(StdMutex::new(Vec::new()));
    let seen = arrivals.clone();
    let service = tower::service_fn(move |_: Request<Body>| {
        seen.lock().expect("lock").push(Instant::now());
        async move {
            Ok::<_, std::convert::Infallible>(
                axum::http::Response::builder()
                    .status(200)
                    .body(Body::from(b"{}".to_vec()))
                    .expect("response"),
            )
        }
    });
    (kube::Client::new(service, "default"), arrivals)
}

/// `n` GETs through `client` at once; returns when the last was answered.
async fn send_all(client: &kube::Client, n: usize) {
    let requests = (0..n).map(|i| {
        let client = client.clone();
        async move {
            let request = Request::get(format!("/api/v1/namespaces/default/configmaps/c{i}"))
                .body(Vec::new())
                .expect("request");
            client.request_text(request).await.expect("answer");
        }
    });
    futures::future::join_all(requests).await;
}

/// With KubeVirt's defaults the first 400 requests go at once and the next ones at 200 per
/// second: 400 + 200 requests take one second, 400 + 400 two.
#[tokio::test(start_paused = true)]
async fn kubevirts_defaults_let_400_through_then_200_a_second() {
    let limiter = ReloadableRateLimiter::new(DEFAULT_QPS, DEFAULT_BURST);
    let (inner, arrivals) = recording_client();
    let client = rate_limited_client(inner, limiter.clone());
    let start = Instant::now();
    send_all(&client, 400).await;
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "the burst waits for nothing"
    );
    send_all(&client, 200).await;
    let after_one_more_second = start.elapsed();
    assert!(
        (Duration::from_millis(995)..=Duration::from_millis(1005)).contains(&after_one_more_second),
        "{after_one_more_second:?}"
    );
    send_all(&client, 200).await;
    let elapsed = start.elapsed();
    assert!(
        (Duration::from_millis(1995)..=Duration::from_millis(2005)).contains(&elapsed),
        "{elapsed:?}"
    );
    // At no point did more than 400 + 200/s arrive: in every window [t, t + 1 s) after the
    // burst, at most 200 (+1 for the window's edge).
    let arrivals = arrivals.lock().expect("lock").clone();
    assert_eq!(arrivals.len(), 800);
    let after_burst: Vec<Duration> = arrivals[400..].iter().map(|t| *t - start).collect();
    for (i, t) in after_burst.iter().enumerate() {
        let in_window = after_burst[i..]
            .iter()
            .take_while(|u| **u < *t + Duration::from_secs(1))
            .count();
        assert!(in_window <= 201, "{in_window} requests within 1 s of {t:?}");
    }
}

/// A new limit is a new, full bucket (KubeVirt's `Set` of a new `TokenBucketRateLimiter`),
/// taking effect for the next request; the same limit again keeps the bucket.
#[tokio::test(start_paused = true)]
async fn set_swaps_in_a_new_full_bucket() {
    let limiter = ReloadableRateLimiter::new(5.0, 10);
    let (inner, _) = recording_client();
    let client = rate_limited_client(inner, limiter.clone());
    let start = Instant::now();
    send_all(&client, 10 + 5).await;
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    limiter.set(5.0, 10);
    let again = Instant::now();
    send_all(&client, 5).await;
    assert_eq!(
        again.elapsed(),
        Duration::from_secs(1),
        "the same bucket, empty"
    );
    limiter.set(50.0, 20);
    assert_eq!(limiter.limits(), (50.0, 20));
    let raised = Instant::now();
    send_all(&client, 20 + 50).await;
    assert_eq!(raised.elapsed(), Duration::from_secs(1));
}

/// The waits are exported as KubeVirt's histogram, by verb and URL template.
#[tokio::test(start_paused = true)]
async fn waits_are_exported_as_kubevirts_metric() {
    let metrics = Metrics::new();
    let limiter = ReloadableRateLimiter::new(1.0, 1).with_metrics(&metrics);
    let (inner, _) = recording_client();
    let client = rate_limited_client(inner, limiter);
    send_all(&client, 2).await;
    let text = metrics.encode().expect("encode");
    let bucket = format!(
        "{WAIT_METRIC}_count{{verb=\"get\",url=\"/api/v1/namespaces/{{namespace}}/configmaps/{{name}}\"}} 2"
    );
    assert!(text.contains(&bucket), "{text}");
    let sum = format!(
        "{WAIT_METRIC}_sum{{verb=\"get\",url=\"/api/v1/namespaces/{{namespace}}/configmaps/{{name}}\"}} 1.0"
    );
    assert!(text.contains(&sum), "{text}");
}

#[test]
fn verbs_and_url_templates_are_client_gos() {
    let cases = [
        (
            "GET",
            "/api/v1/namespaces/ns/pods?labelSelector=a&limit=500",
            "list",
            "/api/v1/namespaces/{namespace}/pods?labelSelector={value}&limit={value}",
        ),
        (
            "GET",
            "/api/v1/namespaces/ns/pods?watch=true&resourceVersion=1",
            "watch",
            "/api/v1/namespaces/{namespace}/pods?resourceVersion={value}&watch={value}",
        ),
        (
            "GET",
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm-1",
            "get",
            "/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}",
        ),
        (
            "PUT",
            "/apis/kubevirt.io/v1/namespaces/ns/virtualmachines/vm-1/status",
            "update",
            "/apis/kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/status",
        ),
        (
            "POST",
            "/api/v1/namespaces/ns/events",
            "create",
            "/api/v1/namespaces/{namespace}/events",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/ns/pods/p/status",
            "patch",
            "/api/v1/namespaces/{namespace}/pods/{name}/status",
        ),
        (
            "DELETE",
            "/apis/apps/v1/namespaces/ns/controllerrevisions/r",
            "delete",
            "/apis/apps/v1/namespaces/{namespace}/controllerrevisions/{name}",
        ),
        (
            "GET",
            "/api/v1/namespaces?fieldSelector=x",
            "list",
            "/api/v1/namespaces?fieldSelector={value}",
        ),
        (
            "GET",
            "/api/v1/namespaces/ns",
            "get",
            "/api/v1/namespaces/{name}",
        ),
        (
            "GET",
            "/apis/kubevirt.io/v1/virtualmachines",
            "list",
            "/apis/kubevirt.io/v1/virtualmachines",
        ),
    ];
    for (method, uri, want_verb, want_url) in cases {
        let method: Method = method.parse().expect("method");
        let uri: axum::http::Uri = uri.parse().expect("uri");
        assert_eq!(verb(&method, &uri), want_verb, "{method} {uri}");
        assert_eq!(url_template(&uri), want_url, "{method} {uri}");
    }
}
