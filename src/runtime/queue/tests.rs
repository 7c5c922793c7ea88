//! Unit tests of the work queue. Time-dependent tests use tokio's paused clock; the
//! concurrency test uses a multi-threaded runtime and waits on conditions with a deadline.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use proptest::prelude::*;
use tokio::time::{Instant, advance, timeout};
use tokio_util::sync::CancellationToken;

use super::*;

/// Queue names as the controllers use them (the `name` label of the work-queue metrics).
const VM_QUEUE_NAME: &str = "virt-controller-vm";
const VMI_QUEUE_NAME: &str = "virt-controller-vmi";
/// Worker counts as the controllers default them (`--vm-threads`, `--vmi-threads`).
const VM_WORKERS: usize = 3;
const VMI_WORKERS: usize = 10;
use crate::runtime::metrics::{Metrics, assert_has_lines};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn k(s: &str) -> String {
    s.to_string()
}

/// Awaits `task`, which must end within 30 s (virtual time where paused) without panicking.
async fn finish<T>(task: tokio::task::JoinHandle<T>) -> T {
    timeout(Duration::from_secs(30), task)
        .await
        .expect("task did not finish in time")
        .expect("task panicked")
}

/// A task blocked in `get` on (a clone of) `q`.
fn spawn_get(q: &WorkQueue) -> tokio::task::JoinHandle<Option<String>> {
    let q = q.clone();
    tokio::spawn(async move { q.get().await })
}

/// A task in `shut_down_with_drain` on (a clone of) `q`.
fn spawn_drain(q: &WorkQueue) -> tokio::task::JoinHandle<()> {
    let q = q.clone();
    tokio::spawn(async move { q.shut_down_with_drain().await })
}

/// `run_workers` spawned on a queue, with the token that stops it.
struct Workers {
    cancel: CancellationToken,
    runner: tokio::task::JoinHandle<()>,
}

impl Workers {
    fn spawn<F, Fut, E>(q: &WorkQueue, n: usize, handler: F) -> Self
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Requeue, E>> + Send + 'static,
        E: std::fmt::Display + Send + 'static,
    {
        let cancel = CancellationToken::new();
        let runner = tokio::spawn(run_workers(q.clone(), n, handler, cancel.clone()));
        Self { cancel, runner }
    }

    /// Cancels the workers and waits (at most `limit`) for `run_workers` to return.
    async fn stop(self, limit: Duration) {
        self.cancel.cancel();
        timeout(limit, self.runner)
            .await
            .expect("run_workers did not return")
            .expect("run_workers panicked");
    }
}

/// A limiter that always answers the same delay and counts calls per key.
struct FixedLimiter {
    delay: Duration,
    counts: Mutex<HashMap<String, usize>>,
}

impl RateLimiter<String> for FixedLimiter {
    fn when(&self, key: &String) -> Duration {
        *self.counts.lock().unwrap().entry(key.clone()).or_default() += 1;
        self.delay
    }
    fn forget(&self, key: &String) {
        self.counts.lock().unwrap().remove(key);
    }
    fn num_requeues(&self, key: &String) -> usize {
        self.counts.lock().unwrap().get(key).copied().unwrap_or(0)
    }
}

#[test]
fn dedup_while_queued_and_fifo_order() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    q.add(k("ns/b"));
    q.add(k("ns/a"));
    assert_eq!(q.len(), 2);
    assert_eq!(q.try_get(), Some(k("ns/a")));
    assert_eq!(q.try_get(), Some(k("ns/b")));
    assert_eq!(q.try_get(), None);
    assert!(q.is_empty());
}

#[test]
fn adds_total_counts_accepted_adds_like_client_go() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    q.add(k("ns/a")); // already queued: not an add
    let a = q.try_get().unwrap();
    q.add(k("ns/a")); // in flight, not dirty: an add
    q.add(k("ns/a")); // dirty again: not
    q.add(k("ns/b"));
    assert_eq!(q.snapshot().adds_total, 3);
    q.done(&a);
}

#[test]
fn re_add_while_processing_is_queued_after_done() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    let a = q.try_get().unwrap();
    // Added again while in flight: not handed out, not counted in len.
    q.add(k("ns/a"));
    q.add(k("ns/a"));
    assert_eq!(q.len(), 0);
    assert_eq!(q.try_get(), None);
    let snap = q.snapshot();
    assert_eq!(snap.in_flight.len(), 1);
    assert!(snap.in_flight[0].added_again);
    q.done(&a);
    assert_eq!(q.len(), 1);
    assert_eq!(q.try_get(), Some(k("ns/a")));
    q.done(&k("ns/a"));
    assert_eq!(q.len(), 0);
    // done() of a key that is not in flight is ignored (no duplicate in the queue).
    q.add(k("ns/b"));
    q.done(&k("ns/b"));
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn blocked_get_wakes_on_add_and_on_shutdown() {
    let q = WorkQueue::new("t");
    let getter = spawn_get(&q);
    tokio::task::yield_now().await;
    assert!(!getter.is_finished());
    q.add(k("ns/a"));
    assert_eq!(getter.await.unwrap(), Some(k("ns/a")));

    let getter = spawn_get(&q);
    tokio::task::yield_now().await;
    q.shut_down();
    assert_eq!(getter.await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn add_after_orders_by_ready_time() {
    let q = WorkQueue::new("t");
    let start = Instant::now();
    q.add_after(k("ns/a"), ms(30));
    q.add_after(k("ns/b"), ms(10));
    q.add_after(k("ns/c"), ms(20));
    assert_eq!(q.len(), 0);
    let waiting: Vec<String> = q.snapshot().waiting.into_iter().map(|w| w.key).collect();
    assert_eq!(waiting, vec!["ns/b", "ns/c", "ns/a"]);
    for (key, at) in [("ns/b", 10), ("ns/c", 20), ("ns/a", 30)] {
        assert_eq!(q.get().await, Some(k(key)));
        assert_eq!(Instant::now() - start, ms(at));
        q.done(&k(key));
    }
    // A zero delay adds immediately.
    q.add_after(k("ns/d"), Duration::ZERO);
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn add_after_earlier_time_replaces_later_one() {
    let q = WorkQueue::new("t");
    let start = Instant::now();
    q.add_after(k("ns/a"), Duration::from_secs(10));
    q.add_after(k("ns/a"), Duration::from_secs(1));
    // A later time does not postpone it.
    q.add_after(k("ns/a"), Duration::from_secs(5));
    let snap = q.snapshot();
    assert_eq!(snap.waiting.len(), 1);
    assert_eq!(snap.waiting[0].ready_in_seconds, 1.0);
    assert_eq!(q.get().await, Some(k("ns/a")));
    assert_eq!(Instant::now() - start, Duration::from_secs(1));
    q.done(&k("ns/a"));
    // The replaced 10 s entry is gone: nothing comes back.
    advance(Duration::from_secs(20)).await;
    assert_eq!(q.len(), 0);
}

#[tokio::test(start_paused = true)]
async fn getter_sleeping_on_late_deadline_wakes_for_earlier_one() {
    let q = WorkQueue::new("t");
    let start = Instant::now();
    q.add_after(k("ns/late"), Duration::from_secs(60));
    let q2 = q.clone();
    let getter = tokio::spawn(async move { (q2.get().await, Instant::now()) });
    tokio::task::yield_now().await;
    q.add_after(k("ns/early"), Duration::from_secs(1));
    let (key, at) = getter.await.unwrap();
    assert_eq!(key, Some(k("ns/early")));
    assert_eq!(at - start, Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn parked_key_firing_while_in_flight_is_requeued_after_done() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    q.add_after(k("ns/a"), Duration::from_secs(1));
    let a = q.get().await.unwrap();
    advance(Duration::from_secs(2)).await;
    assert_eq!(q.len(), 0, "in flight: marked dirty, not queued");
    q.done(&a);
    assert_eq!(q.len(), 1);
}

#[tokio::test(start_paused = true)]
async fn rate_limited_backoff_doubles_and_forget_resets() {
    let q = WorkQueue::new("t");
    let key = k("ns/a");
    let mut expected = ms(5);
    for n in 1..=6 {
        let t0 = Instant::now();
        q.add_rate_limited(key.clone());
        assert_eq!(q.num_requeues(&key), n);
        assert_eq!(q.get().await, Some(key.clone()));
        assert_eq!(Instant::now() - t0, expected, "failure {n}");
        q.done(&key);
        expected *= 2;
    }
    let snap = q.snapshot();
    assert_eq!(snap.retries.len(), 1);
    assert_eq!(snap.retries[0].num_requeues, 6);
    q.forget(&key);
    assert_eq!(q.num_requeues(&key), 0);
    assert!(q.snapshot().retries.is_empty());
    let t0 = Instant::now();
    q.add_rate_limited(key.clone());
    assert_eq!(q.get().await, Some(key.clone()));
    assert_eq!(Instant::now() - t0, ms(5));
}

#[tokio::test(start_paused = true)]
async fn rate_limited_backoff_caps_at_1000s() {
    let q = WorkQueue::new("t");
    let key = k("ns/a");
    for _ in 0..30 {
        q.add_rate_limited(key.clone());
    }
    // Only the earliest (first, 5 ms) entry is parked; the limiter's count keeps growing.
    assert_eq!(q.num_requeues(&key), 30);
    assert_eq!(q.snapshot().waiting[0].ready_in_seconds, 0.005);
    assert_eq!(q.get().await, Some(key.clone()));
    q.done(&key);
    q.add_rate_limited(key.clone());
    assert_eq!(q.snapshot().waiting[0].ready_in_seconds, 1000.0);
}

#[tokio::test(start_paused = true)]
async fn bucket_limiter_kicks_in_after_100_rapid_failures() {
    let q = WorkQueue::new("t");
    for i in 0..103 {
        q.add_rate_limited(format!("ns/vm-{i:03}"));
    }
    let waiting = q.snapshot().waiting;
    assert_eq!(waiting.len(), 103);
    let delay_of = |key: &str| {
        waiting
            .iter()
            .find(|w| w.key == key)
            .map(|w| w.ready_in_seconds)
            .unwrap()
    };
    assert_eq!(delay_of("ns/vm-000"), 0.005);
    assert_eq!(delay_of("ns/vm-099"), 0.005);
    assert_eq!(delay_of("ns/vm-100"), 0.1);
    assert_eq!(delay_of("ns/vm-101"), 0.2);
    assert_eq!(delay_of("ns/vm-102"), 0.3);
}

#[tokio::test(start_paused = true)]
async fn injected_rate_limiter_is_used() {
    let q: WorkQueue<String> = WorkQueue::builder("t")
        .rate_limiter(FixedLimiter {
            delay: Duration::from_secs(7),
            counts: Mutex::new(HashMap::new()),
        })
        .build();
    q.add_rate_limited(k("ns/a"));
    q.add_rate_limited(k("ns/a"));
    assert_eq!(q.num_requeues(&k("ns/a")), 2);
    assert_eq!(q.snapshot().waiting[0].ready_in_seconds, 7.0);
}

#[tokio::test(start_paused = true)]
async fn shutdown_ignores_adds_drops_parked_and_drains_queued() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    q.add(k("ns/b"));
    q.add_after(k("ns/parked"), ms(10));
    let a = q.get().await.unwrap();
    q.add(k("ns/a")); // dirty while in flight
    q.shut_down();
    assert!(q.is_shutting_down());
    q.add(k("ns/c"));
    q.add_after(k("ns/d"), ms(1));
    q.add_rate_limited(k("ns/e"));
    // Queued keys are still handed out after shutdown, then None.
    assert_eq!(q.get().await, Some(k("ns/b")));
    q.done(&a);
    // The key dirtied before shutdown is queued again on done, like client-go.
    assert_eq!(q.get().await, Some(k("ns/a")));
    advance(ms(50)).await;
    assert_eq!(q.get().await, None);
    assert!(q.snapshot().waiting.is_empty());
}

#[tokio::test(start_paused = true)]
async fn shut_down_with_drain_waits_for_in_flight() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    q.add(k("ns/b"));
    let a = q.get().await.unwrap();
    let b = q.get().await.unwrap();
    let drain = spawn_drain(&q);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!drain.is_finished());
    assert!(q.is_shutting_down());
    q.done(&a);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(!drain.is_finished());
    q.done(&b);
    finish(drain).await;

    // With nothing in flight it returns at once.
    let q = WorkQueue::new("t");
    timeout(Duration::from_secs(30), q.shut_down_with_drain())
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn shut_down_stops_a_pending_drain() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    let _a = q.get().await.unwrap();
    let drain = spawn_drain(&q);
    tokio::task::yield_now().await;
    q.shut_down();
    finish(drain).await;
}

#[tokio::test(start_paused = true)]
async fn run_workers_forgets_on_success_and_backs_off_on_error() {
    let q = WorkQueue::new(VM_QUEUE_NAME);
    let start = Instant::now();
    let calls: Arc<Mutex<Vec<(Duration, usize)>>> = Arc::default();
    let handler = {
        let calls = Arc::clone(&calls);
        let q = q.clone();
        move |key: String| {
            let calls = Arc::clone(&calls);
            let q = q.clone();
            async move {
                let n = {
                    let mut c = calls.lock().unwrap();
                    c.push((Instant::now() - start, q.num_requeues(&key)));
                    c.len()
                };
                if n <= 3 {
                    Err(format!("attempt {n} failed"))
                } else {
                    Ok(Requeue::NONE)
                }
            }
        }
    };
    let workers = Workers::spawn(&q, VM_WORKERS, handler);
    q.add(k("default/vm1"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while calls.lock().unwrap().len() < 4 {
        assert!(Instant::now() < deadline, "handler not called 4 times");
        tokio::time::sleep(ms(1)).await;
    }
    // Let the worker apply the outcome.
    while q.snapshot().in_flight.len() == 1 {
        tokio::time::sleep(ms(1)).await;
    }
    let calls = calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        vec![(ms(0), 0), (ms(5), 1), (ms(15), 2), (ms(35), 3),]
    );
    assert_eq!(
        q.num_requeues(&k("default/vm1")),
        0,
        "forgotten after success"
    );
    assert_eq!(q.len(), 0);
    workers.stop(Duration::from_secs(30)).await;
    assert!(q.is_shutting_down());
}

#[tokio::test(start_paused = true)]
async fn run_workers_requeue_after_and_panics() {
    let q = WorkQueue::new(VMI_QUEUE_NAME);
    let start = Instant::now();
    let seen: Arc<Mutex<Vec<(String, Duration)>>> = Arc::default();
    let handler = {
        let seen = Arc::clone(&seen);
        move |key: String| {
            let seen = Arc::clone(&seen);
            async move {
                let n = {
                    let mut s = seen.lock().unwrap();
                    s.push((key.clone(), Instant::now() - start));
                    s.iter().filter(|(k2, _)| *k2 == key).count()
                };
                match (key.as_str(), n) {
                    ("ns/again", 1) => Ok(Requeue::after(Duration::from_secs(30))),
                    ("ns/boom", 1) => panic!("handler bug"),
                    _ => Ok::<_, String>(Requeue::NONE),
                }
            }
        }
    };
    let workers = Workers::spawn(&q, VMI_WORKERS, handler);
    q.add(k("ns/again"));
    q.add(k("ns/boom"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while seen.lock().unwrap().len() < 4 {
        assert!(Instant::now() < deadline, "handler not called 4 times");
        tokio::time::sleep(ms(1)).await;
    }
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (k("ns/again"), ms(0)),
            (k("ns/again"), Duration::from_secs(30)),
            (k("ns/boom"), ms(0)),
            (k("ns/boom"), ms(5)),
        ]
    );
    workers.stop(Duration::from_secs(30)).await;
}

#[tokio::test(start_paused = true)]
async fn run_workers_stop_when_queue_shut_down_elsewhere() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    q.add(k("ns/b"));
    q.shut_down();
    let handled = Arc::new(AtomicUsize::new(0));
    let h = Arc::clone(&handled);
    let handler = move |_key: String| {
        let h = Arc::clone(&h);
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            Ok::<_, String>(Requeue::NONE)
        }
    };
    timeout(
        Duration::from_secs(30),
        run_workers(q.clone(), 2, handler, CancellationToken::new()),
    )
    .await
    .unwrap();
    // Shut down by someone else: queued keys are drained first (client-go Get semantics).
    assert_eq!(handled.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_worker_per_key_under_concurrent_workers() {
    const KEYS: usize = 20;
    const ROUNDS: usize = 200;
    /// What the workers record, shared with the test.
    #[derive(Default)]
    struct Seen {
        active: Mutex<HashSet<String>>,
        violation: AtomicBool,
        seq: AtomicU64,
        last_start: Mutex<HashMap<String, u64>>,
        starts: AtomicUsize,
    }
    let q = WorkQueue::new("t");
    let seen = Arc::new(Seen {
        seq: AtomicU64::new(1),
        ..Seen::default()
    });
    let handler = {
        let seen = Arc::clone(&seen);
        move |key: String| {
            let seen = Arc::clone(&seen);
            async move {
                seen.starts.fetch_add(1, Ordering::SeqCst);
                if !seen.active.lock().unwrap().insert(key.clone()) {
                    seen.violation.store(true, Ordering::SeqCst);
                }
                let s = seen.seq.fetch_add(1, Ordering::SeqCst);
                seen.last_start.lock().unwrap().insert(key.clone(), s);
                for _ in 0..20 {
                    tokio::task::yield_now().await;
                }
                seen.active.lock().unwrap().remove(&key);
                Ok::<_, String>(Requeue::NONE)
            }
        }
    };
    let workers = Workers::spawn(&q, VMI_WORKERS, handler);
    let mut last_add: HashMap<String, u64> = HashMap::new();
    for round in 0..ROUNDS {
        for i in 0..KEYS {
            if (round + i) % 3 == 0 {
                continue;
            }
            let key = format!("ns/vm-{i}");
            last_add.insert(key.clone(), seen.seq.fetch_add(1, Ordering::SeqCst));
            q.add(key);
        }
        // Pace the producer on the workers' progress so adds land while keys are in flight.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while seen.starts.load(Ordering::SeqCst) <= round {
            assert!(
                std::time::Instant::now() < deadline,
                "workers made no progress"
            );
            tokio::task::yield_now().await;
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let snap = q.snapshot();
        if snap.depth == 0 && snap.in_flight.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "queue never went idle: {snap:?}"
        );
        tokio::time::sleep(ms(5)).await;
    }
    workers.stop(Duration::from_secs(60)).await;
    assert!(
        !seen.violation.load(Ordering::SeqCst),
        "a key was processed by two workers at once"
    );
    let last_start = seen.last_start.lock().unwrap();
    for (key, added) in &last_add {
        let started = last_start.get(key).copied().unwrap_or(0);
        assert!(
            started > *added,
            "{key}: last add {added} never processed (last start {started})"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_client_go() {
    let metrics = Metrics::new();
    let q: WorkQueue<String> = WorkQueue::builder(VM_QUEUE_NAME)
        .metrics(metrics.workqueue())
        .build();
    q.add(k("ns/a"));
    q.add(k("ns/a")); // deduplicated: not an add
    q.add(k("ns/b"));
    advance(Duration::from_secs(1)).await;
    let a = q.get().await.unwrap();
    q.add(k("ns/a")); // dirty while in flight: counted in depth, not in len
    advance(Duration::from_secs(2)).await;
    q.add_after(k("ns/c"), Duration::from_secs(100));
    q.add_rate_limited(k("ns/d"));
    assert_has_lines(
        &metrics.encode().unwrap(),
        &[
            "kubevirt_workqueue_adds_total{name=\"virt-controller-vm\"} 3",
            "kubevirt_workqueue_depth{name=\"virt-controller-vm\"} 2",
            "kubevirt_workqueue_retries_total{name=\"virt-controller-vm\"} 2",
            "kubevirt_workqueue_queue_duration_seconds_count{name=\"virt-controller-vm\"} 1",
            "kubevirt_workqueue_queue_duration_seconds_sum{name=\"virt-controller-vm\"} 1.0",
            "kubevirt_workqueue_work_duration_seconds_count{name=\"virt-controller-vm\"} 0",
            "kubevirt_workqueue_unfinished_work_seconds{name=\"virt-controller-vm\"} 2.0",
            "kubevirt_workqueue_longest_running_processor_seconds{name=\"virt-controller-vm\"} 2.0",
        ],
    );
    assert_eq!(q.len(), 1);
    q.done(&a);
    let text = metrics.encode().unwrap();
    assert!(
        text.contains(
            "kubevirt_workqueue_work_duration_seconds_sum{name=\"virt-controller-vm\"} 2.0\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "kubevirt_workqueue_unfinished_work_seconds{name=\"virt-controller-vm\"} 0.0\n"
        )
    );
    // The rate-limited key becomes ready after 5 ms; the scrape promotes it into depth.
    advance(ms(5)).await;
    let text = metrics.encode().unwrap();
    assert!(
        text.contains("kubevirt_workqueue_depth{name=\"virt-controller-vm\"} 3\n"),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn snapshot_is_camel_case_json() {
    let q = WorkQueue::new("virt-controller-vm");
    q.add(k("ns/a"));
    q.add(k("ns/b"));
    let _a = q.get().await.unwrap();
    advance(Duration::from_secs(3)).await;
    q.add_after(k("ns/c"), Duration::from_secs(4));
    q.add_rate_limited(k("ns/d"));
    let v = serde_json::to_value(q.snapshot()).unwrap();
    assert_eq!(v["name"], "virt-controller-vm");
    assert_eq!(v["shuttingDown"], false);
    assert_eq!(v["depth"], 1);
    assert_eq!(v["queued"][0]["key"], "ns/b");
    assert_eq!(v["queued"][0]["queuedSeconds"], 3.0);
    assert_eq!(v["inFlight"][0]["key"], "ns/a");
    assert_eq!(v["inFlight"][0]["runningSeconds"], 3.0);
    assert_eq!(v["inFlight"][0]["addedAgain"], false);
    assert!(v["inFlight"][0]["startedAt"].is_string());
    assert_eq!(v["waiting"][0]["key"], "ns/d");
    assert_eq!(v["waiting"][0]["readyInSeconds"], 0.005);
    assert_eq!(v["waiting"][1]["key"], "ns/c");
    assert_eq!(v["retries"][0]["key"], "ns/d");
    assert_eq!(v["retries"][0]["numRequeues"], 1);
}

#[derive(Debug, Clone)]
enum Op {
    Add(u8),
    AddAfterZero(u8),
    Get(u8),
    Done(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..6).prop_map(Op::Add),
        1 => (0u8..6).prop_map(Op::AddAfterZero),
        3 => (0u8..4).prop_map(Op::Get),
        3 => (0u8..4).prop_map(Op::Done),
    ]
}

proptest! {
    /// Random add/get/done sequences by 4 workers over 6 keys never hand a key to two workers,
    /// never hand out a key nobody added, and never lose an added key.
    #[test]
    fn never_two_workers_never_lost(ops in prop::collection::vec(op(), 1..200)) {
        let q = WorkQueue::new("prop");
        // Keys added and not handed out since.
        let mut pending: HashSet<String> = HashSet::new();
        let mut held: HashMap<u8, String> = HashMap::new();
        for op in ops {
            match op {
                Op::Add(i) => {
                    q.add(format!("ns/k{i}"));
                    pending.insert(format!("ns/k{i}"));
                }
                Op::AddAfterZero(i) => {
                    q.add_after(format!("ns/k{i}"), Duration::ZERO);
                    pending.insert(format!("ns/k{i}"));
                }
                Op::Get(w) => {
                    if held.contains_key(&w) {
                        continue;
                    }
                    match q.get().now_or_never() {
                        Some(Some(key)) => {
                            prop_assert!(!held.values().any(|h| *h == key), "{key} handed to two workers");
                            prop_assert!(pending.remove(&key), "{key} handed out without an add");
                            held.insert(w, key);
                        }
                        Some(None) => prop_assert!(false, "None before shutdown"),
                        None => {
                            // Nothing available: every pending key must be in flight.
                            for key in &pending {
                                prop_assert!(held.values().any(|h| h == key), "{key} lost");
                            }
                        }
                    }
                }
                Op::Done(w) => {
                    if let Some(key) = held.remove(&w) {
                        q.done(&key);
                    }
                }
            }
            let available = pending.iter().filter(|p| !held.values().any(|h| h == *p)).count();
            prop_assert_eq!(q.len(), available);
        }
        for key in held.values() {
            q.done(key);
        }
        q.shut_down();
        while let Some(key) = q.try_get() {
            prop_assert!(pending.remove(&key), "{key} handed out twice");
            q.done(&key);
        }
        prop_assert!(pending.is_empty(), "lost keys: {pending:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn parked_keys_all_reach_waiting_workers() {
    // Many keys parked with short, colliding delays while 10 workers block in get(): every key
    // must be handed out (no lost wake-up in the delayed path).
    const N: usize = 500;
    let q = WorkQueue::new("t");
    let handled: Arc<Mutex<HashSet<String>>> = Arc::default();
    let h = Arc::clone(&handled);
    let handler = move |key: String| {
        let h = Arc::clone(&h);
        async move {
            h.lock().unwrap().insert(key);
            Ok::<_, String>(Requeue::NONE)
        }
    };
    let workers = Workers::spawn(&q, VMI_WORKERS, handler);
    for i in 0..N {
        q.add_after(
            format!("ns/vm-{i}"),
            Duration::from_micros((i % 7) as u64 * 700),
        );
        if i % 50 == 0 {
            tokio::task::yield_now().await;
        }
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while handled.lock().unwrap().len() < N {
        assert!(
            std::time::Instant::now() < deadline,
            "only {} of {N} keys handled: {:?}",
            handled.lock().unwrap().len(),
            q.snapshot()
        );
        tokio::time::sleep(ms(5)).await;
    }
    workers.stop(Duration::from_secs(60)).await;
}

/// Lets every spawned task run until it blocks (current-thread runtime: each yield runs the
/// other ready tasks once).
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_sleeping_getter_is_woken_by_a_single_add() {
    let q = WorkQueue::new("t");
    let getter = spawn_get(&q);
    settle().await;
    assert!(!getter.is_finished());
    q.add(k("ns/a"));
    assert_eq!(finish(getter).await, Some(k("ns/a")));
}

#[tokio::test(start_paused = true)]
async fn adds_in_a_burst_wake_every_sleeping_getter() {
    // Three adds with no yield between them: each must wake its own getter (the adds after
    // the first must not assume the first wake-up covers them).
    let q = WorkQueue::new("t");
    let getters: Vec<_> = (0..3).map(|_| spawn_get(&q)).collect();
    settle().await;
    for name in ["ns/a", "ns/b", "ns/c"] {
        q.add(k(name));
    }
    let mut got = Vec::new();
    for g in getters {
        got.push(finish(g).await.expect("a key"));
    }
    got.sort();
    assert_eq!(got, vec![k("ns/a"), k("ns/b"), k("ns/c")]);
}

#[tokio::test(start_paused = true)]
async fn a_woken_getter_cancelled_before_running_passes_the_wake_up_on() {
    let q = WorkQueue::new("t");
    let first = spawn_get(&q);
    settle().await;
    let second = spawn_get(&q);
    settle().await;
    // The add wakes the first sleeper; it is cancelled before it runs.
    q.add(k("ns/a"));
    first.abort();
    assert_eq!(finish(second).await, Some(k("ns/a")));
}

#[tokio::test(start_paused = true)]
async fn a_cancelled_sleeper_does_not_hide_another_one() {
    let q = WorkQueue::new("t");
    let cancelled = spawn_get(&q);
    let waiting = spawn_get(&q);
    settle().await;
    cancelled.abort();
    settle().await;
    q.add(k("ns/a"));
    assert_eq!(finish(waiting).await, Some(k("ns/a")));
}

#[tokio::test(start_paused = true)]
async fn a_getter_woken_for_a_key_taken_by_another_sleeps_again_and_wakes_again() {
    let q = WorkQueue::new("t");
    let getter = spawn_get(&q);
    settle().await;
    q.add(k("ns/a"));
    // Someone else takes the key before the woken getter runs.
    assert_eq!(q.try_get(), Some(k("ns/a")));
    settle().await;
    assert!(!getter.is_finished());
    q.add(k("ns/b"));
    assert_eq!(finish(getter).await, Some(k("ns/b")));
    q.done(&k("ns/a"));
}

#[tokio::test(start_paused = true)]
async fn done_requeue_wakes_a_sleeping_getter() {
    let q = WorkQueue::new("t");
    q.add(k("ns/a"));
    let a = q.try_get().unwrap();
    q.add(k("ns/a"));
    let getter = spawn_get(&q);
    settle().await;
    assert!(!getter.is_finished());
    q.done(&a);
    assert_eq!(finish(getter).await, Some(k("ns/a")));
}

#[tokio::test(start_paused = true)]
async fn forget_without_rate_limited_keys_keeps_other_failures() {
    let q = WorkQueue::new("t");
    q.forget(&k("ns/never-failed"));
    q.add_rate_limited(k("ns/a"));
    q.forget(&k("ns/b"));
    assert_eq!(q.num_requeues(&k("ns/a")), 1);
    assert_eq!(q.snapshot().retries.len(), 1);
    q.forget(&k("ns/a"));
    assert_eq!(q.num_requeues(&k("ns/a")), 0);
    assert!(q.snapshot().retries.is_empty());
}

/// One operation of the model test.
#[derive(Debug, Clone)]
enum ModelOp {
    Add(u8),
    Get,
    Done(u8),
    ShutDown,
}

fn model_op() -> impl Strategy<Value = ModelOp> {
    prop_oneof![
        4 => (0u8..8).prop_map(ModelOp::Add),
        3 => Just(ModelOp::Get),
        3 => (0u8..8).prop_map(ModelOp::Done),
        1 => Just(ModelOp::ShutDown),
    ]
}

/// client-go's queue.go, transcribed as simply as possible: `queue` (a slice), `dirty` and
/// `processing` (sets), `shuttingDown`.
#[derive(Default)]
struct ClientGoModel {
    queue: Vec<String>,
    dirty: HashSet<String>,
    processing: HashSet<String>,
    shutting_down: bool,
}

impl ClientGoModel {
    fn add(&mut self, key: String) {
        if self.shutting_down || self.dirty.contains(&key) {
            return;
        }
        self.dirty.insert(key.clone());
        if self.processing.contains(&key) {
            return;
        }
        self.queue.push(key);
    }

    fn get(&mut self) -> Option<String> {
        if self.queue.is_empty() {
            return None;
        }
        let key = self.queue.remove(0);
        self.processing.insert(key.clone());
        self.dirty.remove(&key);
        Some(key)
    }

    fn done(&mut self, key: &str) {
        // Ours ignores a done for a key not in flight (client-go would queue it again).
        if !self.processing.remove(key) {
            return;
        }
        if self.dirty.contains(key) {
            self.queue.push(key.to_string());
        }
    }
}

proptest! {
    /// The queue hands out exactly what client-go's queue would, in the same order, with the
    /// same length and in-flight set after every step.
    #[test]
    fn matches_client_go_model(ops in prop::collection::vec(model_op(), 1..300)) {
        let q = WorkQueue::new("model");
        let mut model = ClientGoModel::default();
        for op in ops {
            match op {
                ModelOp::Add(i) => {
                    q.add(format!("ns/k{i}"));
                    model.add(format!("ns/k{i}"));
                }
                ModelOp::Get => prop_assert_eq!(q.try_get(), model.get()),
                ModelOp::Done(i) => {
                    q.done(&format!("ns/k{i}"));
                    model.done(&format!("ns/k{i}"));
                }
                ModelOp::ShutDown => {
                    q.shut_down();
                    model.shutting_down = true;
                }
            }
            prop_assert_eq!(q.len(), model.queue.len());
            let snap = q.snapshot();
            let queued: Vec<String> = snap.queued.iter().map(|e| e.key.clone()).collect();
            prop_assert_eq!(&queued, &model.queue);
            let mut in_flight: Vec<(String, bool)> =
                snap.in_flight.iter().map(|e| (e.key.clone(), e.added_again)).collect();
            in_flight.sort();
            let mut expected: Vec<(String, bool)> = model
                .processing
                .iter()
                .map(|key| (key.clone(), model.dirty.contains(key)))
                .collect();
            expected.sort();
            prop_assert_eq!(in_flight, expected);
        }
    }
}
