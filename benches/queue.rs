//! Work-queue throughput: add 100k distinct `namespace/name` keys, then N workers (tokio tasks
//! on a 2-thread runtime) loop get → done until the shut-down queue is drained.
//!
//! Run: `cargo bench --bench queue`. Figures are recorded in docs/performance.md.

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use virtctl_rs::runtime::queue::WorkQueue;

const KEYS: usize = 100_000;

async fn add_get_done(keys: &[String], workers: usize) -> usize {
    let q = WorkQueue::new("bench");
    for key in keys {
        q.add(key.clone());
    }
    q.shut_down();
    let mut tasks = Vec::with_capacity(workers);
    for _ in 0..workers {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0usize;
            while let Some(key) = q.get().await {
                q.done(&key);
                n += 1;
            }
            n
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.unwrap_or(0);
    }
    assert_eq!(total, keys.len());
    total
}

fn bench_queue(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
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
