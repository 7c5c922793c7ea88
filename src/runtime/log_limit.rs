//! Rate limit for log lines that repeat, by *kind* of line rather than by text.
//!
//! A condition that keeps recurring (a watch that fails after every relist, a standby that
//! finds the Lease held under its own identity at every retry) logs a line each time, and the
//! lines differ in details (a resourceVersion, a timestamp), so deduplicating by text does not
//! help. Here each call site names the kind of its line (`"watch failed: pods"`, `"same-identity
//! standby: kubevirt/virt-controller"`): at most one line of a kind is logged per interval, and
//! that line says how many of its kind were not logged since the previous one. Whatever happens
//! in between (a recovery, another error text) does not reset the kind's interval.
//!
//! Time is tokio's [`Instant`], so tests drive the limiter with the paused clock.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

/// At most one line of a kind per this interval, in [`LogLimiter::shared`].
pub(crate) const REPEAT_INTERVAL: Duration = Duration::from_secs(60);

/// Remembers, per kind of log line, when one was last logged and how many were held back since.
/// Clones share the record. Kinds are never forgotten: name them from a small set (per resource,
/// per Lease), not per object or per error text.
#[derive(Clone, Debug)]
pub(crate) struct LogLimiter {
    interval: Duration,
    kinds: Arc<Mutex<HashMap<String, Kind>>>,
}

#[derive(Debug)]
struct Kind {
    last_logged: Instant,
    suppressed: u64,
}

/// Permission to log one line of a kind now. Its `Display` is a note for the end of that line:
/// the rate limit, and how many lines of the kind were not logged since the previous one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Allowed {
    /// Lines of this kind held back since the previous one was logged.
    pub suppressed: u64,
    interval: Duration,
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "(at most one such line every {:?}", self.interval)?;
        if self.suppressed > 0 {
            write!(f, "; {} not logged since the last one", self.suppressed)?;
        }
        f.write_str(")")
    }
}

impl LogLimiter {
    /// A limiter allowing one line of each kind per `interval`.
    pub(crate) fn new(interval: Duration) -> Self {
        Self {
            interval,
            kinds: Arc::default(),
        }
    }

    /// The process-wide limiter ([`REPEAT_INTERVAL`]), so that one kind is limited however many
    /// tasks log it.
    pub(crate) fn shared() -> &'static LogLimiter {
        static SHARED: OnceLock<LogLimiter> = OnceLock::new();
        SHARED.get_or_init(|| LogLimiter::new(REPEAT_INTERVAL))
    }

    /// Whether a line of `kind` may be logged now: `Some` for the first line of the kind and
    /// for the first one at least an interval after the previous logged one (carrying the count
    /// of lines held back in between), else `None` (the line is counted as held back; log it at
    /// debug level at most).
    pub(crate) fn allow(&self, kind: &str) -> Option<Allowed> {
        let now = Instant::now();
        let mut kinds = self.kinds.lock().unwrap_or_else(|e| e.into_inner());
        let suppressed = match kinds.get_mut(kind) {
            None => {
                kinds.insert(
                    kind.to_owned(),
                    Kind {
                        last_logged: now,
                        suppressed: 0,
                    },
                );
                0
            }
            Some(k) if now.saturating_duration_since(k.last_logged) >= self.interval => {
                k.last_logged = now;
                std::mem::take(&mut k.suppressed)
            }
            Some(k) => {
                k.suppressed += 1;
                return None;
            }
        };
        Some(Allowed {
            suppressed,
            interval: self.interval,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use tokio::time::advance;

    const MINUTE: Duration = Duration::from_secs(60);

    fn allowed(suppressed: u64) -> Option<Allowed> {
        Some(Allowed {
            suppressed,
            interval: MINUTE,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn one_line_per_kind_and_interval_the_next_counts_the_rest() {
        let limiter = LogLimiter::new(MINUTE);
        assert_eq!(limiter.allow("watch failed: pods"), allowed(0));
        for _ in 0..59 {
            advance(Duration::from_secs(1)).await;
            assert_eq!(limiter.allow("watch failed: pods"), None);
        }
        advance(Duration::from_secs(1)).await;
        assert_eq!(
            limiter.allow("watch failed: pods"),
            allowed(59),
            "a minute after the last logged line, with the count of those held back"
        );
        assert_eq!(limiter.allow("watch failed: pods"), None);
        // Long quiet: the next line is logged at once, with the one held back meanwhile.
        advance(Duration::from_secs(3600)).await;
        assert_eq!(limiter.allow("watch failed: pods"), allowed(1));
        advance(MINUTE).await;
        assert_eq!(limiter.allow("watch failed: pods"), allowed(0));
    }

    #[tokio::test(start_paused = true)]
    async fn kinds_are_limited_separately_and_clones_share_the_record() {
        let limiter = LogLimiter::new(MINUTE);
        let clone = limiter.clone();
        assert_eq!(limiter.allow("watch failed: pods"), allowed(0));
        assert_eq!(
            limiter.allow("watch failed: virtualmachines"),
            allowed(0),
            "another resource is another kind"
        );
        assert_eq!(
            clone.allow("watch failed: pods"),
            None,
            "shared with clones"
        );
        advance(Duration::from_secs(30)).await;
        assert_eq!(limiter.allow("watch recovered: pods"), allowed(0));
        assert_eq!(
            limiter.allow("watch failed: pods"),
            None,
            "a line of another kind in between does not reset the interval"
        );
        advance(Duration::from_secs(30)).await;
        assert_eq!(clone.allow("watch failed: pods"), allowed(2));
    }

    #[test]
    fn the_note_says_the_limit_and_the_count() {
        let first = Allowed {
            suppressed: 0,
            interval: MINUTE,
        };
        assert_eq!(first.to_string(), "(at most one such line every 60s)");
        let later = Allowed {
            suppressed: 17,
            interval: MINUTE,
        };
        assert_eq!(
            later.to_string(),
            "(at most one such line every 60s; 17 not logged since the last one)"
        );
    }

    #[test]
    fn the_shared_limiter_is_one_per_process() {
        assert!(std::ptr::eq(LogLimiter::shared(), LogLimiter::shared()));
        assert_eq!(LogLimiter::shared().interval, REPEAT_INTERVAL);
    }
}
