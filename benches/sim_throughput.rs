//! Create + watch-delivery throughput of the embedded API server: N pods (default 10 000,
//! `SIM_BENCH_PODS` overrides) are created through `kube::Client` with 16 requests in flight
//! while one watch consumes the events; reports objects/s (criterion throughput) and the
//! p50/p99 latency from "create sent" to "ADDED received on the watch".

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use virtctl_rs::sim::{ApiServer, ApiServerConfig};

const IN_FLIGHT: usize = 16;

fn pods() -> usize {
    std::env::var("SIM_BENCH_PODS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

struct Run {
    total: Duration,
    latencies: Vec<Duration>,
}

async fn run_once(n: usize) -> Run {
    let server = ApiServer::start(ApiServerConfig {
        event_history: n + 1_000,
        ..Default::default()
    })
    .await
    .expect("server");
    let client = server.client().await.expect("client");
    let api: Api<Pod> = Api::namespaced(client.clone(), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    let mut stream = api
        .watch(&WatchParams::default().disable_bookmarks(), &rv)
        .await
        .expect("watch")
        .boxed();
    let sent: Arc<Vec<std::sync::OnceLock<Instant>>> =
        Arc::new((0..n).map(|_| std::sync::OnceLock::new()).collect());
    let watcher = tokio::spawn(async move {
        let mut got = vec![None; n];
        let mut seen = 0;
        while seen < n {
            match stream.try_next().await {
                Ok(Some(WatchEvent::Added(p))) => {
                    let name = p.metadata.name.unwrap_or_default();
                    if let Some(i) = name
                        .strip_prefix("bench-")
                        .and_then(|s| s.parse::<usize>().ok())
                        && got[i].is_none()
                    {
                        got[i] = Some(Instant::now());
                        seen += 1;
                    }
                }
                Ok(Some(_)) => {}
                other => panic!("watch ended early: {other:?}"),
            }
        }
        got
    });
    let start = Instant::now();
    let sent2 = sent.clone();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let sent = sent2.clone();
            async move {
                let p: Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("bench-{i}"), "labels": {"app": "bench"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}
                }))
                .expect("pod");
                let _ = sent[i].set(Instant::now());
                api.create(&PostParams::default(), &p)
                    .await
                    .expect("create");
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
    let received = watcher.await.expect("watcher");
    let total = start.elapsed();
    let mut latencies: Vec<Duration> = received
        .iter()
        .zip(sent.iter())
        .filter_map(|(r, s)| Some(r.as_ref()?.duration_since(*s.get()?)))
        .collect();
    latencies.sort();
    server.shutdown().await;
    Run { total, latencies }
}

fn pct(v: &[Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[idx.min(v.len() - 1)]
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let n = pods();
    let mut group = c.benchmark_group("sim_throughput");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    group.throughput(Throughput::Elements(n as u64));
    let mut last: Option<Run> = None;
    group.bench_function(format!("create_and_watch_{n}_pods"), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let r = rt.block_on(run_once(n));
                total += r.total;
                last = Some(r);
            }
            total
        })
    });
    group.finish();
    if let Some(r) = last {
        println!(
            "sim_throughput: {n} pods in {:.2?} = {:.0} objects/s; create→watch latency p50 {:.2?}, p99 {:.2?} ({} in flight)",
            r.total,
            n as f64 / r.total.as_secs_f64(),
            pct(&r.latencies, 0.50),
            pct(&r.latencies, 0.99),
            IN_FLIGHT
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
