//! The work-queue scenario side by side with client-go: this is the Rust half,
//! `benches/clientgo-queue/` the Go half over client-go v0.36's rate-limiting queue, and
//! `scripts/bench-queue.sh` builds both, runs them interleaved and prints the ratio.
//!
//! The scenario (issue 15, issue 46; the same as `benches/queue.rs`'s
//! `workqueue_client_go_scenario`): 100,000 objects `ns-<i%100>/vm-<i>`; one producer task adds
//! every object's key 5 rounds, yielding every 1,000 adds; N worker tasks loop `get` → `forget`
//! → `done` until `get` returns `None`; the producer shuts the queue down after its last add;
//! a tokio runtime with 2 worker threads (the Go side runs with GOMAXPROCS=2). Time: first add
//! until every worker has returned. Default controller rate limiter, no metrics (as the Go side).
//!
//! Keys (`--keys`):
//! - `string`: built per add from the object's metadata by [`meta_key`], the key function the
//!   informer handlers call (src/controller/handlers.rs, through `key_of`): a `String` per add,
//!   as client-go's `MetaNamespaceKeyFunc` allocates a Go string per add.
//! - `shared`: `Arc<str>` built once per object before the clock starts; an add clones the
//!   `Arc` (what passing a Go string is: the bytes are shared).
//!
//! Allocator: jemalloc, the product binary's (src/main.rs).
//!
//! Output, one line per worker count (`--workers 1,3,10`): `workers=N adds_per_sec=X`,
//! measured over at least `--min-seconds` (default 1) of repeated scenarios after one warm-up.
//!
//! Run: `scripts/bench-queue.sh` (both queues), or
//! `cargo bench --bench queue_vs_client_go -- --keys string`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use virtctl_rs::api::key::meta_key;
use virtctl_rs::runtime::queue::{QueueKey, WorkQueue};

/// The product binary's allocator (src/main.rs), as benches/controller_start.rs uses it: the
/// Go side allocates its keys with Go's runtime as KubeVirt does, so ours allocate as
/// `kubectl virtctl-rs run-controller` does (glibc malloc and free were 16 % of this bench's
/// samples with `--keys string`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// The producer yields to the runtime after this many adds.
const YIELD_EVERY: usize = 1_000;

/// How the producer makes the key of object `i`.
trait MakeKey: Send + Sync + 'static {
    type Key: QueueKey;
    fn key(&self, i: usize) -> Self::Key;
}

/// `--keys string`: the handlers' key function, per add.
struct BuiltPerAdd(Vec<ObjectMeta>);

impl MakeKey for BuiltPerAdd {
    type Key = String;
    fn key(&self, i: usize) -> String {
        meta_key(&self.0[i])
    }
}

/// `--keys shared`: one `Arc<str>` per object, cloned per add.
struct Shared(Vec<Arc<str>>);

impl MakeKey for Shared {
    type Key = Arc<str>;
    fn key(&self, i: usize) -> Arc<str> {
        Arc::clone(&self.0[i])
    }
}

struct Options {
    keys: String,
    objects: usize,
    rounds: usize,
    workers: Vec<usize>,
    min_seconds: f64,
}

fn parse_args() -> Result<Options, String> {
    let mut o = Options {
        keys: "string".into(),
        objects: 100_000,
        rounds: 5,
        workers: vec![1, 3, 10],
        min_seconds: 1.0,
    };
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        if flag == "--bench" {
            continue; // added by `cargo bench`
        }
        let value = args.next().ok_or(format!("{flag}: missing value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--keys" => o.keys = value,
            "--n" => o.objects = value.parse().map_err(|e| bad(&e))?,
            "--rounds" => o.rounds = value.parse().map_err(|e| bad(&e))?,
            "--min-seconds" => o.min_seconds = value.parse().map_err(|e| bad(&e))?,
            "--workers" => {
                o.workers = value
                    .split(',')
                    .map(|w| w.parse().map_err(|e| bad(&e)))
                    .collect::<Result<_, _>>()?;
            }
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    Ok(o)
}

/// One scenario with `workers` workers: the time from the first add until every worker has
/// returned, and how many keys the workers processed.
async fn scenario<M: MakeKey>(
    keys: Arc<M>,
    objects: usize,
    rounds: usize,
    workers: usize,
) -> (Duration, usize) {
    let q: WorkQueue<M::Key> = WorkQueue::builder("bench").build();
    let tasks: Vec<_> = (0..workers)
        .map(|_| {
            let q = q.clone();
            tokio::spawn(async move {
                let mut n = 0usize;
                while let Some(key) = q.get().await {
                    q.forget(&key);
                    q.done(&key);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let producer = tokio::spawn(async move {
        let start = Instant::now();
        let mut since_yield = 0;
        for _ in 0..rounds {
            for i in 0..objects {
                q.add(keys.key(i));
                since_yield += 1;
                if since_yield == YIELD_EVERY {
                    since_yield = 0;
                    tokio::task::yield_now().await;
                }
            }
        }
        q.shut_down();
        start
    });
    let start = producer.await.expect("producer");
    let mut processed = 0;
    for t in tasks {
        processed += t.await.expect("worker");
    }
    (start.elapsed(), processed)
}

/// Every worker count of `o` with keys from `keys`: one line each.
async fn measure<M: MakeKey>(keys: M, o: &Options) -> Result<(), String> {
    let keys = Arc::new(keys);
    let adds = o.objects * o.rounds;
    for &n in &o.workers {
        scenario(Arc::clone(&keys), o.objects, o.rounds, n).await; // warm-up
        let (mut elapsed, mut scenarios) = (Duration::ZERO, 0);
        while elapsed.as_secs_f64() < o.min_seconds {
            let (d, processed) = scenario(Arc::clone(&keys), o.objects, o.rounds, n).await;
            // Every key is processed at least once; dedup makes it at most once per round.
            if !(o.objects..=adds).contains(&processed) {
                return Err(format!(
                    "workers={n} processed {processed} keys, want {}..={adds}",
                    o.objects
                ));
            }
            elapsed += d;
            scenarios += 1;
        }
        println!(
            "workers={n} adds_per_sec={:.0}",
            (adds * scenarios) as f64 / elapsed.as_secs_f64()
        );
    }
    Ok(())
}

fn main() {
    let result = parse_args().and_then(|o| {
        let metas: Vec<ObjectMeta> = (0..o.objects)
            .map(|i| ObjectMeta {
                namespace: Some(format!("ns-{}", i % 100)),
                name: Some(format!("vm-{i}")),
                ..ObjectMeta::default()
            })
            .collect();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| format!("tokio runtime: {e}"))?;
        match o.keys.as_str() {
            "string" => rt.block_on(measure(BuiltPerAdd(metas), &o)),
            "shared" => {
                let shared = metas.iter().map(|m| Arc::from(meta_key(m))).collect();
                rt.block_on(measure(Shared(shared), &o))
            }
            other => Err(format!("--keys: want string or shared, got {other}")),
        }
    });
    if let Err(e) = result {
        eprintln!("queue_vs_client_go: {e}");
        std::process::exit(2);
    }
}
