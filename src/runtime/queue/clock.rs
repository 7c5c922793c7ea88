//! The clock the queue stamps keys with: when a key was added (the queue-duration metric,
//! `queued_seconds`) and when a worker got it (the work-duration and unfinished-work metrics,
//! `running_seconds`). client-go reads `time.Now()` for the same stamps when it has a metrics
//! provider (util/workqueue/metrics.go, `defaultQueueMetrics.add` / `get` / `done`).
//!
//! Two reads per key handed out made `Instant::now()` (39 ns a read on this machine class:
//! `clock_gettime` through the vDSO) about a quarter of a worker's time in the queue bench.
//! [`StampClock::Counter`] reads the CPU's time-stamp counter instead (quanta, about 15 ns),
//! scaled to nanoseconds by a calibration against the monotonic clock, and maps it onto
//! tokio's [`Instant`] through one anchor taken when the queue is built, so the stamps keep
//! their type and can be compared with ready times and snapshot times. They measure durations
//! only; scheduling (parked keys' ready times, the getters' sleeps) stays on tokio's clock.
//! The counter runs at its own rate, so over long spans it may differ from the monotonic clock
//! by the NTP slew rate (parts per million: microseconds on the second-long waits measured
//! here). Without an invariant counter quanta reads the monotonic clock.
//!
//! Unit tests build their queues with [`StampClock::Runtime`] (tokio's clock), which follows
//! tokio's paused clock, so a test that advances time by 1.5 s sees 1.5 s queued.

use tokio::time::Instant;

/// Where the queue's stamps come from.
#[derive(Clone)]
pub(super) enum StampClock {
    /// `tokio::time::Instant::now()`: follows tokio's paused clock (unit tests).
    Runtime,
    /// The time-stamp counter, anchored to tokio's clock at `anchor`.
    Counter {
        clock: quanta::Clock,
        anchor: Instant,
        anchor_counter: quanta::Instant,
    },
}

impl StampClock {
    /// The counter in a normal build; tokio's clock in this crate's unit tests, where time is
    /// paused and moved by hand.
    pub(super) fn new() -> Self {
        if cfg!(test) {
            StampClock::Runtime
        } else {
            StampClock::counter(quanta::Clock::new())
        }
    }

    /// Stamps from `clock`, anchored now.
    pub(super) fn counter(clock: quanta::Clock) -> Self {
        let anchor_counter = clock.now();
        StampClock::Counter {
            clock,
            anchor: Instant::now(),
            anchor_counter,
        }
    }

    /// The current stamp.
    #[inline]
    pub(super) fn now(&self) -> Instant {
        match self {
            StampClock::Runtime => Instant::now(),
            StampClock::Counter {
                clock,
                anchor,
                anchor_counter,
            } => *anchor + clock.now().saturating_duration_since(*anchor_counter),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn counter_stamps_move_with_the_counter_not_with_the_runtime_clock() {
        let (clock, mock) = quanta::Clock::mock();
        mock.increment(Duration::from_secs(5));
        let stamps = StampClock::counter(clock);
        let first = stamps.now();
        mock.increment(Duration::from_millis(1500));
        let second = stamps.now();
        assert_eq!(second - first, Duration::from_millis(1500));
        mock.increment(Duration::from_nanos(7));
        assert_eq!(stamps.now() - second, Duration::from_nanos(7));
        // The anchor maps the counter onto tokio's clock: a stamp is never before the anchor.
        let StampClock::Counter { anchor, .. } = &stamps else {
            unreachable!()
        };
        assert_eq!(first, *anchor);
    }

    #[tokio::test(start_paused = true)]
    async fn runtime_stamps_follow_the_paused_clock() {
        let stamps = StampClock::Runtime;
        let first = stamps.now();
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(stamps.now() - first, Duration::from_millis(1500));
    }

    #[test]
    fn unit_tests_get_the_runtime_clock() {
        assert!(matches!(StampClock::new(), StampClock::Runtime));
    }
}
