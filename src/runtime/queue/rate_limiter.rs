//! Rate limiters deciding how long a failed key waits before it is queued again.
//!
//! Behaviour follows client-go `util/workqueue/default_rate_limiters.go`:
//! [`default_controller_rate_limiter`] is `DefaultTypedControllerRateLimiter` = the maximum of a
//! per-key exponential backoff (5 ms × 2^failures, capped at 1000 s) and an overall token bucket
//! (10 qps, burst 100, `golang.org/x/time/rate` reservation semantics).
//!
//! All limiters read time from `tokio::time::Instant`, so tests can drive them with tokio's
//! paused clock.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

/// Decides how long a key must wait before it is retried (client-go `TypedRateLimiter`).
///
/// Implementations must be thread-safe: the queue calls them from any worker.
pub(crate) trait RateLimiter<K>: Send + Sync {
    /// How long `key` should wait before being added again. Counts as one failure for
    /// limiters that track failures (client-go `When`).
    fn when(&self, key: &K) -> Duration;
    /// Stop tracking `key` (success or permanent failure) (client-go `Forget`).
    fn forget(&self, key: &K);
    /// How many failures `key` has had since it was last forgotten (client-go `NumRequeues`).
    fn num_requeues(&self, key: &K) -> usize;
    /// How long any key would wait if it failed now, for reasons all keys share (a token bucket
    /// reserved ahead by earlier failures), without reserving anything. client-go has no such
    /// call; the debug endpoint and the inspector report it, because after a burst of failures
    /// it, not the key's own backoff, is how long a key that failed once waits
    /// (kubernetes/kubernetes#104554).
    fn shared_wait(&self) -> Duration {
        Duration::ZERO
    }
}

impl<K, R: RateLimiter<K> + ?Sized> RateLimiter<K> for Box<R> {
    fn when(&self, key: &K) -> Duration {
        (**self).when(key)
    }
    fn forget(&self, key: &K) {
        (**self).forget(key)
    }
    fn num_requeues(&self, key: &K) -> usize {
        (**self).num_requeues(key)
    }
    fn shared_wait(&self) -> Duration {
        (**self).shared_wait()
    }
}

/// Per-key base delay of the default controller rate limiter: 5 ms (client-go
/// default_rate_limiters.go, `DefaultTypedControllerRateLimiter`).
pub(crate) const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(5);
/// Per-key maximum delay of the default controller rate limiter: 1000 s.
pub(crate) const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(1000);
/// Overall token-bucket refill rate of the default controller rate limiter: 10 tokens per second.
pub(crate) const DEFAULT_BUCKET_QPS: f64 = 10.0;
/// Overall token-bucket size of the default controller rate limiter: 100 tokens.
pub(crate) const DEFAULT_BUCKET_BURST: u32 = 100;

/// Lock a mutex, recovering the data if another thread panicked while holding it (the state
/// kept here stays consistent after every statement, so a poisoned lock is still usable).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Per-key exponential backoff: `base × 2^failures`, capped at `max`
/// (client-go `TypedItemExponentialFailureRateLimiter`).
///
/// Each [`RateLimiter::when`] counts one failure; the first call returns `base`.
#[derive(Debug)]
pub(crate) struct ItemExponentialFailureRateLimiter<K> {
    base: Duration,
    max: Duration,
    failures: Mutex<HashMap<K, u32, foldhash::fast::RandomState>>,
    /// `failures.len()`, readable without the lock: `forget` and `num_requeues` of a key when
    /// no key has failed (a worker's every success) do not take the lock.
    tracked: AtomicUsize,
}

impl<K> ItemExponentialFailureRateLimiter<K> {
    /// A limiter starting at `base` and never exceeding `max`.
    pub(crate) fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            failures: Mutex::new(HashMap::default()),
            tracked: AtomicUsize::new(0),
        }
    }
}

impl<K: Eq + Hash + Clone + Send> RateLimiter<K> for ItemExponentialFailureRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        let exp = {
            let mut failures = lock(&self.failures);
            let count = failures.entry(key.clone()).or_insert(0);
            let exp = *count;
            *count = count.saturating_add(1);
            self.tracked.store(failures.len(), Ordering::Release);
            exp
        };
        // Computed in floating point like client-go so that huge exponents cannot overflow.
        let exp = i32::try_from(exp).unwrap_or(i32::MAX);
        let backoff = self.base.as_nanos() as f64 * 2f64.powi(exp);
        if !backoff.is_finite() || backoff > i64::MAX as f64 {
            return self.max;
        }
        let calculated = Duration::from_nanos(backoff as u64);
        calculated.min(self.max)
    }

    fn forget(&self, key: &K) {
        // Zero: no key had failed when we looked, so there is nothing to remove; a concurrent
        // `when` is then ordered after this `forget`, as if it had taken the lock after us.
        if self.tracked.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut failures = lock(&self.failures);
        failures.remove(key);
        self.tracked.store(failures.len(), Ordering::Release);
    }

    fn num_requeues(&self, key: &K) -> usize {
        if self.tracked.load(Ordering::Acquire) == 0 {
            return 0;
        }
        lock(&self.failures).get(key).map_or(0, |n| *n as usize)
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    /// Time of the last reservation; `None` = never used (the bucket starts full).
    last: Option<Instant>,
}

/// An overall token bucket shared by all keys (client-go `TypedBucketRateLimiter` over
/// `rate.NewLimiter(qps, burst)`).
///
/// `when` reserves one token: while tokens remain the delay is zero; once the burst is spent,
/// reservations borrow future tokens and the delay grows by `1/qps` per reservation. It tracks
/// no keys: `forget` does nothing and `num_requeues` is always 0.
#[derive(Debug)]
pub(crate) struct BucketRateLimiter {
    qps: f64,
    burst: u32,
    bucket: Mutex<Bucket>,
}

impl BucketRateLimiter {
    /// A bucket refilled at `qps` tokens per second holding at most `burst` tokens; it starts
    /// full.
    pub(crate) fn new(qps: f64, burst: u32) -> Self {
        Self {
            qps,
            burst,
            bucket: Mutex::new(Bucket {
                tokens: f64::from(burst),
                last: None,
            }),
        }
    }

    /// Reserve one token now and return how long the caller must wait for it
    /// (`rate.Limiter.Reserve().Delay()`).
    pub(crate) fn reserve(&self) -> Duration {
        if !(self.qps.is_finite()) {
            return Duration::ZERO;
        }
        let now = Instant::now();
        let mut b = lock(&self.bucket);
        let tokens = self.tokens_at(&b, now) - 1.0;
        let Some(wait) = self.wait_for(tokens) else {
            // A zero rate never refills: x/time/rate reports an infinite delay; cap it.
            return Duration::MAX;
        };
        b.tokens = tokens;
        b.last = Some(now);
        wait
    }

    /// How long a reservation made now would wait, without making it.
    pub(crate) fn reserved_ahead(&self) -> Duration {
        if !(self.qps.is_finite()) {
            return Duration::ZERO;
        }
        let b = lock(&self.bucket);
        self.wait_for(self.tokens_at(&b, Instant::now()) - 1.0)
            .unwrap_or(Duration::MAX)
    }

    /// The tokens in `b` at `now`: refilled at `qps` since the last reservation, at most
    /// `burst`.
    fn tokens_at(&self, b: &Bucket, now: Instant) -> f64 {
        let burst = f64::from(self.burst);
        match b.last {
            None => burst,
            Some(last) => {
                // A clock going backwards counts as no time elapsed (like x/time/rate).
                let elapsed = now.saturating_duration_since(last).as_secs_f64();
                (b.tokens + elapsed * self.qps).min(burst)
            }
        }
    }

    /// The wait for a reservation leaving `tokens` in the bucket; `None` if it never refills.
    fn wait_for(&self, tokens: f64) -> Option<Duration> {
        if tokens >= 0.0 {
            return Some(Duration::ZERO);
        }
        if self.qps <= 0.0 {
            return None;
        }
        Some(Duration::from_nanos(((-tokens / self.qps) * 1e9) as u64))
    }
}

impl<K> RateLimiter<K> for BucketRateLimiter {
    fn when(&self, _key: &K) -> Duration {
        self.reserve()
    }
    fn forget(&self, _key: &K) {}
    fn num_requeues(&self, _key: &K) -> usize {
        0
    }
    fn shared_wait(&self) -> Duration {
        self.reserved_ahead()
    }
}

/// Asks every inner limiter and returns the longest delay (client-go `TypedMaxOfRateLimiter`).
/// `num_requeues` is the maximum over the limiters; `forget` forgets in all of them.
pub(crate) struct MaxOfRateLimiter<K> {
    limiters: Vec<Box<dyn RateLimiter<K>>>,
}

impl<K> std::fmt::Debug for MaxOfRateLimiter<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MaxOfRateLimiter")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<K> MaxOfRateLimiter<K> {
    /// Combine `limiters`; every one of them is consulted on each call.
    pub(crate) fn new(limiters: Vec<Box<dyn RateLimiter<K>>>) -> Self {
        Self { limiters }
    }
}

impl<K> RateLimiter<K> for MaxOfRateLimiter<K> {
    fn when(&self, key: &K) -> Duration {
        // Every limiter is called (the bucket must reserve a token even when the per-key
        // backoff is longer), exactly like client-go.
        self.limiters
            .iter()
            .map(|l| l.when(key))
            .fold(Duration::ZERO, Duration::max)
    }
    fn forget(&self, key: &K) {
        for l in &self.limiters {
            l.forget(key);
        }
    }
    fn num_requeues(&self, key: &K) -> usize {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(key))
            .max()
            .unwrap_or(0)
    }
    fn shared_wait(&self) -> Duration {
        self.limiters
            .iter()
            .map(|l| l.shared_wait())
            .fold(Duration::ZERO, Duration::max)
    }
}

/// client-go's `DefaultTypedControllerRateLimiter`: max of a per-key exponential backoff
/// (5 ms, 1000 s) and an overall token bucket (10 qps, burst 100). This is what KubeVirt's VM
/// and VMI queues use (vm.go:153-156, vmi.go:83-86).
pub(crate) fn default_controller_rate_limiter<K>() -> MaxOfRateLimiter<K>
where
    K: Eq + Hash + Clone + Send + Sync + 'static,
{
    MaxOfRateLimiter::new(vec![
        Box::new(ItemExponentialFailureRateLimiter::new(
            DEFAULT_BASE_DELAY,
            DEFAULT_MAX_DELAY,
        )),
        Box::new(BucketRateLimiter::new(
            DEFAULT_BUCKET_QPS,
            DEFAULT_BUCKET_BURST,
        )),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn exponential_sequence_and_cap() {
        let rl = ItemExponentialFailureRateLimiter::<String>::new(ms(5), Duration::from_secs(1000));
        let k = "ns/a".to_string();
        let got: Vec<Duration> = (0..6).map(|_| rl.when(&k)).collect();
        assert_eq!(got, vec![ms(5), ms(10), ms(20), ms(40), ms(80), ms(160)]);
        assert_eq!(rl.num_requeues(&k), 6);
        // 5 ms × 2^17 = 655.36 s is the last uncapped step; 2^18 would be 1310.72 s.
        for _ in 6..17 {
            rl.when(&k);
        }
        assert_eq!(rl.when(&k), Duration::from_millis(655_360));
        assert_eq!(rl.when(&k), Duration::from_secs(1000));
        // Far beyond f64/i64 range still answers the cap.
        for _ in 0..2000 {
            rl.when(&k);
        }
        assert_eq!(rl.when(&k), Duration::from_secs(1000));
    }

    #[test]
    fn exponential_is_per_key_and_forget_resets() {
        let rl = ItemExponentialFailureRateLimiter::<String>::new(ms(5), Duration::from_secs(1000));
        let (a, b) = ("ns/a".to_string(), "ns/b".to_string());
        rl.when(&a);
        rl.when(&a);
        assert_eq!(rl.when(&b), ms(5));
        assert_eq!(rl.num_requeues(&a), 2);
        rl.forget(&a);
        assert_eq!(rl.num_requeues(&a), 0);
        assert_eq!(rl.when(&a), ms(5));
    }

    #[test]
    fn exponential_counts_survive_forgetting_keys_that_never_failed() {
        let rl = ItemExponentialFailureRateLimiter::<String>::new(ms(5), Duration::from_secs(1000));
        let (a, b) = ("ns/a".to_string(), "ns/b".to_string());
        // Nothing tracked: forget and num_requeues answer without the map.
        rl.forget(&a);
        assert_eq!(rl.num_requeues(&a), 0);
        rl.when(&a);
        rl.forget(&b);
        assert_eq!(rl.num_requeues(&a), 1);
        assert_eq!(rl.num_requeues(&b), 0);
        rl.forget(&a);
        assert_eq!(rl.num_requeues(&a), 0);
        // Tracking starts again after the map emptied.
        assert_eq!(rl.when(&a), ms(5));
        assert_eq!(rl.num_requeues(&a), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_burst_then_spaces_by_one_over_qps() {
        let rl = BucketRateLimiter::new(10.0, 100);
        for i in 0..100 {
            assert_eq!(
                RateLimiter::<String>::when(&rl, &String::new()),
                Duration::ZERO,
                "token {i}"
            );
        }
        assert_eq!(rl.reserve(), ms(100));
        assert_eq!(rl.reserve(), ms(200));
        assert_eq!(rl.reserve(), ms(300));
        // After 1 s, 10 tokens have been refilled: the debt of 3 shrinks to -3 + 10 = 7 tokens left.
        tokio::time::advance(Duration::from_secs(1)).await;
        for _ in 0..7 {
            assert_eq!(rl.reserve(), Duration::ZERO);
        }
        assert_eq!(rl.reserve(), ms(100));
    }

    /// kubernetes/kubernetes#104554: once the burst is spent, every failure pushes the next
    /// one's wait 1/qps further out, for every key; `shared_wait` reports how far without
    /// reserving.
    #[tokio::test(start_paused = true)]
    async fn the_shared_wait_is_how_far_ahead_the_bucket_is_reserved() {
        let rl = default_controller_rate_limiter::<String>();
        assert_eq!(rl.shared_wait(), Duration::ZERO, "a full bucket");
        for i in 0..100 {
            rl.when(&format!("ns/vm-{i}"));
        }
        // The burst is spent: the next reservation would wait one refill.
        assert_eq!(rl.shared_wait(), ms(100));
        assert_eq!(rl.shared_wait(), ms(100), "asking reserves nothing");
        for i in 0..50 {
            rl.when(&format!("ns/other-{i}"));
        }
        assert_eq!(rl.shared_wait(), ms(5_100));
        // A key failing for the first time waits the bucket, not its own 5 ms.
        assert_eq!(rl.when(&"ns/fresh".to_string()), ms(5_100));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(rl.shared_wait(), ms(3_200));
        tokio::time::advance(Duration::from_secs(60)).await;
        assert_eq!(rl.shared_wait(), Duration::ZERO, "refilled");
    }

    #[tokio::test(start_paused = true)]
    async fn default_limiter_takes_the_max() {
        let rl = default_controller_rate_limiter::<String>();
        // 100 distinct keys failing once each: bucket has tokens, per-key says 5 ms.
        for i in 0..100 {
            assert_eq!(rl.when(&format!("ns/vm-{i}")), ms(5));
        }
        // The 101st failure (a fresh key) is held back by the bucket, not by its own backoff.
        assert_eq!(rl.when(&"ns/late".to_string()), ms(100));
        assert_eq!(rl.when(&"ns/later".to_string()), ms(200));
        assert_eq!(rl.num_requeues(&"ns/late".to_string()), 1);
        rl.forget(&"ns/late".to_string());
        assert_eq!(rl.num_requeues(&"ns/late".to_string()), 0);
    }
}
