//! Work-queue throughput.
//!
//! - `workqueue_client_go_scenario/workers/N`: the scenario of issue 15, where client-go's
//!   rate-limiting queue measured 2.56 M adds/s on this machine class: 100,000 distinct keys
//!   `ns-<i%100>/vm-<i>`, added 5 rounds each (500,000 `add` calls) by one producer task while N
//!   worker tasks loop `get` → `forget` → `done`; N = 1, 3, 10; a tokio runtime with 2 worker
//!   threads (client-go's figure: GOMAXPROCS=2). The producer is a task on that runtime and
//!   yields every 1,000 adds (as an informer's handler task yields between watch events);
//!   after the last add it shuts the queue down. Time: first add → queue drained and every
//!   worker returned. Throughput is reported in adds per second (criterion's elem/s).
//!   Keys are `Arc<str>` (what a Go `string` is: shared and immutable, so handing one to the
//!   queue does not copy it); `.../string_keys/workers/N` is the same with `String` keys, one
//!   allocation per add in the producer.
//! - `workqueue_add_get_done_100k/workers/N`: add 100k distinct keys, shut down, then N workers
//!   loop get → done until the queue is drained.
//! - `workqueue_add_duplicate_100k/already_queued`: 100k adds of keys already queued (the dedup
//!   path hit by informer resyncs).
//!
//! Run: `cargo bench --bench queue`. Figures: docs/performance.md ("Work queue").

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::measurement::WallTime;
use criterion::{
    BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group,
    criterion_main,
};
use virtctl_rs::runtime::queue::{QueueKey, WorkQueue};

const KEYS: usize = 100_000;
/// Rounds of the client-go scenario: every key is added this many times.
const ROUNDS: usize = 5;
/// The producer yields to the runtime after this many adds.
const YIELD_EVERY: usize = 1_000;

/// `workers` tasks looping `get` → (`forget` →) `done` until `get` returns `None`; each returns
/// how many keys it processed.
fn spawn_workers<K: QueueKey>(
    q: &WorkQueue<K>,
    workers: usize,
    forget: bool,
) -> Vec<tokio::task::JoinHandle<usize>> {
    (0..workers)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut n = 0usize;
                while let Some(key) = q.get().await {
                    if forget {
                        q.forget(&key);
                    }
                    q.done(&key);
                    n += 1;
                }
                n
            })
        })
        .collect()
}

/// The keys processed by all of `tasks`.
async fn join_workers(tasks: Vec<tokio::task::JoinHandle<usize>>) -> usize {
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("worker");
    }
    total
}

/// The client-go scenario once; returns the time from the first add until the queue is
/// drained and every worker has returned.
async fn client_go_scenario<K: QueueKey>(keys: Arc<Vec<K>>, workers: usize) -> Duration {
    let q: WorkQueue<K> = WorkQueue::builder("bench").build();
    let tasks = spawn_workers(&q, workers, true);
    let producer = {
        let q = q.clone();
        tokio::spawn(async move {
            let start = Instant::now();
            let mut since_yield = 0;
            for _ in 0..ROUNDS {
                for key in keys.iter() {
                    q.add(key.clone());
                    since_yield += 1;
                    if since_yield == YIELD_EVERY {
                        since_yield = 0;
                        tokio::task::yield_now().await;
                    }
                }
            }
            q.shut_down();
            start
        })
    };
    let start = producer.await.expect("producer");
    let processed = join_workers(tasks).await;
    let elapsed = start.elapsed();
    // Every key is processed at least once; dedup makes it at most once per round.
    assert!((KEYS..=KEYS * ROUNDS).contains(&processed), "{processed}");
    elapsed
}

async fn add_get_done(keys: &[String], workers: usize) -> usize {
    let q = WorkQueue::new("bench");
    for key in keys {
        q.add(key.clone());
    }
    q.shut_down();
    let total = join_workers(spawn_workers(&q, workers, false)).await;
    assert_eq!(total, keys.len());
    total
}

/// The client-go scenario at 1, 3 and 10 workers with `keys`, as `label/N`.
fn bench_client_go_scenario<K: QueueKey>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    rt: &tokio::runtime::Runtime,
    label: &str,
    keys: Arc<Vec<K>>,
) {
    for workers in [1usize, 3, 10] {
        group.bench_with_input(BenchmarkId::new(label, workers), &workers, |b, &n| {
            b.to_async(rt).iter_custom(|iters| {
                let keys = Arc::clone(&keys);
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += client_go_scenario(Arc::clone(&keys), n).await;
                    }
                    total
                }
            });
        });
    }
}

fn bench_queue(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");

    let names: Vec<String> = (0..KEYS)
        .map(|i| format!("ns-{}/vm-{i}", i % 100))
        .collect();
    let arc_keys: Vec<Arc<str>> = names.iter().map(|s| Arc::from(s.as_str())).collect();
    let mut group = c.benchmark_group("workqueue_client_go_scenario");
    group.throughput(Throughput::Elements((KEYS * ROUNDS) as u64));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    bench_client_go_scenario(&mut group, &rt, "workers", Arc::new(arc_keys));
    bench_client_go_scenario(&mut group, &rt, "string_keys/workers", Arc::new(names));
    group.finish();

    let keys: Vec<String> = (0..KEYS).map(|i| format!("default/vm-{i:06}")).collect();
    let mut group = c.benchmark_group("workqueue_add_get_done_100k");
    group.throughput(Throughput::Elements(KEYS as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(5));
    for workers in [1usize, 3, 10] {
        group.bench_with_input(BenchmarkId::new("workers", workers), &workers, |b, &n| {
            b.to_async(&rt).iter(|| add_get_done(&keys, n));
        });
    }
    group.finish();

    // Dedup path: 100k adds of keys that are already queued (informer resync storms).
    let mut group = c.benchmark_group("workqueue_add_duplicate_100k");
    group.throughput(Throughput::Elements(KEYS as u64));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("already_queued", |b| {
        let q = WorkQueue::new("bench");
        for key in &keys {
            q.add(key.clone());
        }
        b.iter(|| {
            for key in &keys {
                q.add(key.clone());
            }
        });
    });
    group.finish();
}

criterion_group!(benches, bench_queue);
criterion_main!(benches);
