//! Start-failure ("crash loop") backoff: `calculateStartBackoffTime`, `startFailureBackoffTimeLeft`
//! and `syncStartFailureStatus` (pkg/virt-controller/watch/vm/vm.go:1477-1603).

use super::run_strategy::Strategy;
use crate::api::Time;
use crate::api::vm::{RunStrategy, StartFailure, VirtualMachineStatus};
use crate::api::vmi::{Phase, VirtualMachineInstance};
use chrono::{DateTime, Duration, Utc};

/// `defaultMaxCrashLoopBackoffDelaySeconds` (vm.go:132), seconds.
pub(crate) const DEFAULT_MAX_CRASH_LOOP_BACKOFF_DELAY_SECONDS: i64 = 300;

/// Minimum backoff interval in seconds (`minInterval`, vm.go:1480).
pub(crate) const MIN_BACKOFF_INTERVAL_SECONDS: i64 = 10;

/// `calculateStartBackoffTime(failCount, maxDelay)` (vm.go:1477-1504), in seconds:
/// `interval = max(maxDelay/30, 10)`; `delay = interval × max(failCount,1)²`;
/// `delay += rand.Intn(delay/2 + 1)`; capped at `maxDelay`.
///
/// `jitter` is the uniform random number in `[0, 1)` that stands for `rand.Intn`: the random
/// term is `floor(jitter × (delay/2 + 1))` (values outside `[0, 1)` are clamped).
pub(crate) fn calculate_start_backoff_time(fail_count: i64, max_delay: i64, jitter: f64) -> i64 {
    let fail_count = fail_count.max(1);
    let interval = (max_delay / 30).max(MIN_BACKOFF_INTERVAL_SECONDS);
    let mut delay = interval.saturating_mul(fail_count.saturating_mul(fail_count));
    let range = delay / 2 + 1;
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let random = ((jitter * range as f64).floor() as i64).clamp(0, range - 1);
    delay = delay.saturating_add(random);
    delay.min(max_delay)
}

/// `startFailureBackoffTimeLeft` (vm.go:1558-1573): whole seconds until
/// `status.startFailure.retryAfterTimestamp`, or 0. (KubeVirt dereferences a missing timestamp;
/// here it counts as 0.)
pub(crate) fn start_failure_backoff_time_left(
    status: Option<&VirtualMachineStatus>,
    now: DateTime<Utc>,
) -> i64 {
    let Some(retry_after) = status
        .and_then(|s| s.start_failure.as_ref())
        .and_then(|f| f.retry_after_timestamp)
    else {
        return 0;
    };
    (retry_after.0.timestamp() - now.timestamp()).max(0)
}

/// `wasVMIInRunningPhase` (vm.go:1507-1520): a `Running` entry in `phaseTransitionTimestamps`.
pub(crate) fn was_vmi_in_running_phase(vmi: Option<&VirtualMachineInstance>) -> bool {
    vmi.and_then(|v| v.status.as_ref())
        .and_then(|s| s.phase_transition_timestamps.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.phase == Phase::Running))
}

/// `vmiFailedEarly` (vm.go:1522-1535): final and never Running.
pub(crate) fn vmi_failed_early(vmi: Option<&VirtualMachineInstance>) -> bool {
    match vmi {
        Some(v) if v.is_final() => !was_vmi_in_running_phase(Some(v)),
        _ => false,
    }
}

/// `shouldClearStartFailure` (vm.go:1537-1556): the VMI reached Running, or the strategy does not
/// restart failed VMIs (anything but Always, RerunOnFailure, Once). A run-strategy error keeps it.
pub(crate) fn should_clear_start_failure(
    strategy: Option<&Strategy>,
    vmi: Option<&VirtualMachineInstance>,
) -> bool {
    if was_vmi_in_running_phase(vmi) {
        return true;
    }
    match strategy {
        None => false,
        Some(s) => !matches!(
            s.known(),
            Some(RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once)
        ),
    }
}

/// `syncStartFailureStatus` (vm.go:1575-1603) on `status`: clear `startFailure` when
/// [`should_clear_start_failure`]; otherwise, for a VMI that failed early and was not counted yet
/// (`lastFailedVMIUID` differs), count it and set `retryAfterTimestamp = now + backoff`.
/// Returns the backoff in seconds when a failure was recorded.
pub(crate) fn sync_start_failure_status(
    status: &mut VirtualMachineStatus,
    strategy: Option<&Strategy>,
    vmi: Option<&VirtualMachineInstance>,
    now: DateTime<Utc>,
    jitter: f64,
) -> Option<i64> {
    if should_clear_start_failure(strategy, vmi) {
        status.start_failure = None;
        return None;
    }
    let vmi = vmi.filter(|v| vmi_failed_early(Some(v)))?;
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    if let Some(prev) = &status.start_failure
        && prev.last_failed_vmi_uid.as_deref().unwrap_or("") == uid
    {
        return None;
    }
    let count = status
        .start_failure
        .as_ref()
        .map(|f| f.consecutive_fail_count + 1)
        .unwrap_or(1);
    let delay =
        calculate_start_backoff_time(count, DEFAULT_MAX_CRASH_LOOP_BACKOFF_DELAY_SECONDS, jitter);
    let now = Time::from_datetime(now);
    status.start_failure = Some(StartFailure {
        last_failed_vmi_uid: Some(uid),
        retry_after_timestamp: Some(Time(now.0 + Duration::seconds(delay))),
        consecutive_fail_count: count,
        extra: Default::default(),
    });
    Some(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::vmi::{PhaseTransitionTimestamp, VirtualMachineInstanceStatus};

    /// Mirrors vm_test.go:1634-1652 "should calculated expected backoff delay": the range over
    /// all jitter values must be exactly KubeVirt's.
    #[test]
    fn backoff_ranges_match_kubevirt_table() {
        let table = [
            (0, 10, 15),
            (1, 10, 15),
            (2, 40, 60),
            (3, 90, 135),
            (4, 160, 240),
            (5, 250, 300),
            (6, 300, 300),
        ];
        for (count, min, max) in table {
            let lo = calculate_start_backoff_time(count, 300, 0.0);
            let hi = calculate_start_backoff_time(count, 300, 0.999_999_9);
            assert_eq!((lo, hi), (min, max), "failCount {count}");
            for i in 0..1000 {
                let d = calculate_start_backoff_time(count, 300, i as f64 / 1000.0);
                assert!((min..=max).contains(&d), "failCount {count}: {d}");
            }
        }
    }

    #[test]
    fn jitter_outside_unit_interval_is_clamped() {
        assert_eq!(calculate_start_backoff_time(1, 300, -3.0), 10);
        assert_eq!(calculate_start_backoff_time(1, 300, 7.0), 15);
        assert_eq!(calculate_start_backoff_time(1, 300, f64::NAN), 10);
    }

    fn ts(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(secs, 0).unwrap()
    }

    /// Mirrors vm_test.go:1653-1698 "has start failure backoff expired".
    #[test]
    fn time_left() {
        let now = ts(1_000_000);
        assert_eq!(start_failure_backoff_time_left(None, now), 0);
        let mut status = VirtualMachineStatus {
            start_failure: Some(StartFailure {
                retry_after_timestamp: Some(Time(ts(1_000_300))),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(start_failure_backoff_time_left(Some(&status), now), 300);
        status.start_failure.as_mut().unwrap().retry_after_timestamp = Some(Time(ts(999_700)));
        assert_eq!(start_failure_backoff_time_left(Some(&status), now), 0);
        status.start_failure.as_mut().unwrap().retry_after_timestamp = None;
        assert_eq!(start_failure_backoff_time_left(Some(&status), now), 0);
    }

    fn vmi(uid: &str, phase: Phase, was_running: bool) -> VirtualMachineInstance {
        let mut v = VirtualMachineInstance::default();
        v.metadata.uid = Some(uid.into());
        v.status = Some(VirtualMachineInstanceStatus {
            phase: Some(phase),
            phase_transition_timestamps: was_running.then(|| {
                vec![PhaseTransitionTimestamp {
                    phase: Phase::Running,
                    phase_transition_timestamp: Time(ts(5)),
                    extra: Default::default(),
                }]
            }),
            ..Default::default()
        });
        v
    }

    fn always() -> Strategy {
        Strategy::Known(RunStrategy::Always)
    }

    /// Mirrors vm_test.go:1477 "should track start failures when VMIs fail without hitting
    /// running state".
    #[test]
    fn first_failure_is_counted() {
        let mut status = VirtualMachineStatus::default();
        let v = vmi("123", Phase::Failed, false);
        let d = sync_start_failure_status(&mut status, Some(&always()), Some(&v), ts(1000), 0.0);
        assert_eq!(d, Some(10));
        let f = status.start_failure.unwrap();
        assert_eq!(f.consecutive_fail_count, 1);
        assert_eq!(f.last_failed_vmi_uid.as_deref(), Some("123"));
        assert_eq!(f.retry_after_timestamp, Some(Time(ts(1010))));
    }

    /// Mirrors vm_test.go:1504 "should track a new start failures when a new VMI fails".
    #[test]
    fn new_failure_increments_and_same_vmi_is_not_counted_twice() {
        let mut status = VirtualMachineStatus {
            start_failure: Some(StartFailure {
                last_failed_vmi_uid: Some("123".into()),
                consecutive_fail_count: 1,
                retry_after_timestamp: Some(Time(ts(700))),
                ..Default::default()
            }),
            ..Default::default()
        };
        let v = vmi("456", Phase::Failed, false);
        sync_start_failure_status(&mut status, Some(&always()), Some(&v), ts(1000), 0.0);
        let f = status.start_failure.clone().unwrap();
        assert_eq!(f.consecutive_fail_count, 2);
        assert_eq!(f.retry_after_timestamp, Some(Time(ts(1040))));
        // Same VMI again: unchanged.
        let d = sync_start_failure_status(&mut status, Some(&always()), Some(&v), ts(2000), 0.5);
        assert_eq!(d, None);
        assert_eq!(status.start_failure, Some(f));
    }

    /// Mirrors vm_test.go:1541 "should clear start failures when VMI hits running state" and
    /// vm_test.go:1579 "should clear existing start failures when runStrategy is halted or manual".
    #[test]
    fn cleared_when_running_or_strategy_does_not_restart() {
        let failure = Some(StartFailure {
            last_failed_vmi_uid: Some("123".into()),
            consecutive_fail_count: 1,
            ..Default::default()
        });
        let mut status = VirtualMachineStatus {
            start_failure: failure.clone(),
            ..Default::default()
        };
        let running = vmi("456", Phase::Running, true);
        sync_start_failure_status(&mut status, Some(&always()), Some(&running), ts(1), 0.0);
        assert!(status.start_failure.is_none());

        for (strategy, cleared) in [
            (RunStrategy::Halted, true),
            (RunStrategy::Manual, true),
            (RunStrategy::Always, false),
            (RunStrategy::RerunOnFailure, false),
            (RunStrategy::Once, false),
        ] {
            let mut status = VirtualMachineStatus {
                start_failure: failure.clone(),
                ..Default::default()
            };
            let failed = vmi("456", Phase::Failed, false);
            sync_start_failure_status(
                &mut status,
                Some(&Strategy::Known(strategy)),
                Some(&failed),
                ts(1),
                0.0,
            );
            assert_eq!(status.start_failure.is_none(), cleared, "{strategy}");
        }
    }

    #[test]
    fn failed_after_running_is_not_a_start_failure() {
        let mut status = VirtualMachineStatus::default();
        let v = vmi("1", Phase::Failed, true);
        assert_eq!(
            sync_start_failure_status(&mut status, Some(&always()), Some(&v), ts(1), 0.0),
            None
        );
        assert!(status.start_failure.is_none());
    }
}
