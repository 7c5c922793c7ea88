//! KubeVirt's worker loop over a [`WorkQueue`] (pkg/virt-controller/watch/vm/vm.go:308-355 and
//! the identical loop in watch/vmi/vmi.go).

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::{QueueKey, WorkQueue};

/// What a successful handler asks for besides forgetting the key's failures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Requeue {
    /// Process the key again after this delay (KubeVirt controllers call `AddAfter` from their
    /// sync, e.g. the VM start-failure backoff). `None`: wait for the next event.
    pub after: Option<Duration>,
}

impl Requeue {
    /// Nothing more to do until the next event.
    pub const NONE: Requeue = Requeue { after: None };

    /// Process the key again after `delay`.
    pub(crate) fn after(delay: Duration) -> Self {
        Requeue { after: Some(delay) }
    }
}

/// Run `workers` concurrent workers over `queue` until `cancel` fires or the queue is shut down
/// and drained; returns when every worker has stopped.
///
/// Each worker loops like KubeVirt's `Execute` (vm.go:336-355): `get` a key, run
/// `handler(key)`, then
/// - `Ok(requeue)` → `forget(key)` (reset its backoff), plus `add_after(key, d)` if
///   `requeue.after` is `Some(d)`;
/// - `Err(e)` → log at info level and `add_rate_limited(key)` (exponential per-key backoff);
/// - a panicking handler is logged and treated as an error;
///
/// and always `done(key)` last. A key is never handled by two workers at once.
///
/// On `cancel` the queue is shut down (KubeVirt's `defer c.Queue.ShutDown()`); workers finish
/// the key in hand, call `done`, and stop without taking further keys. (KubeVirt's workers
/// would keep draining the queued keys; here cancellation means leadership is gone, so nothing
/// more is started.) If the queue is shut down by someone else, workers drain the queued keys
/// and stop when `get` returns `None`.
pub(crate) async fn run_workers<K, F, Fut, E>(
    queue: WorkQueue<K>,
    workers: usize,
    handler: F,
    cancel: CancellationToken,
) where
    K: QueueKey,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Requeue, E>> + Send + 'static,
    E: Display + Send + 'static,
{
    let handler = Arc::new(handler);
    let mut set = JoinSet::new();
    for worker in 0..workers.max(1) {
        let queue = queue.clone();
        let handler = Arc::clone(&handler);
        let cancel = cancel.clone();
        set.spawn(async move {
            worker_loop(worker, queue, handler, cancel).await;
        });
    }
    let watcher = {
        let queue = queue.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            cancel.cancelled().await;
            queue.shut_down();
        })
    };
    while let Some(res) = set.join_next().await {
        if let Err(e) = res {
            tracing::error!(queue = %queue.name(), error = %e, "work queue worker task failed");
        }
    }
    watcher.abort();
}

/// One worker of [`run_workers`]; the `Send + 'static` bounds are checked there, where the
/// loop is spawned.
async fn worker_loop<K, F, Fut, E>(
    worker: usize,
    queue: WorkQueue<K>,
    handler: Arc<F>,
    cancel: CancellationToken,
) where
    K: QueueKey,
    F: Fn(K) -> Fut,
    Fut: Future<Output = Result<Requeue, E>>,
    E: Display,
{
    loop {
        let key = tokio::select! {
            biased;
            _ = cancel.cancelled() => return,
            key = queue.get() => match key {
                Some(key) => key,
                None => return,
            },
        };
        let outcome = AssertUnwindSafe(handler(key.clone())).catch_unwind().await;
        match outcome {
            Ok(Ok(requeue)) => {
                tracing::trace!(queue = %queue.name(), worker, %key, "processed");
                queue.forget(&key);
                if let Some(after) = requeue.after {
                    queue.add_after(key.clone(), after);
                }
            }
            Ok(Err(e)) => {
                tracing::info!(queue = %queue.name(), worker, %key, error = %e, "re-enqueuing");
                queue.add_rate_limited(key.clone());
            }
            Err(_) => {
                tracing::error!(queue = %queue.name(), worker, %key, "handler panicked; re-enqueuing");
                queue.add_rate_limited(key.clone());
            }
        }
        queue.done(&key);
    }
}
