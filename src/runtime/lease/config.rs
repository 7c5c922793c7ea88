//! Leader-election configuration, KubeVirt's defaults, and client-go's validation.
//!
//! Defaults: KubeVirt `pkg/virt-controller/leaderelectionconfig` (lease `virt-controller`,
//! 15 s / 10 s / 2 s) and `pkg/virt-controller/watch/application.go:1132-1177`.
//! Validation: client-go `tools/leaderelection/leaderelection.go` (`NewLeaderElector`).

use std::collections::BTreeMap;
use std::time::Duration;

/// Lease name KubeVirt's virt-controller elects on (`leaderelectionconfig.DefaultLeaseName`).
pub const DEFAULT_LEASE_NAME: &str = "virt-controller";
/// Namespace of the Lease when the install namespace is unknown (KubeVirt falls back to
/// `kubevirt`).
pub const DEFAULT_NAMESPACE: &str = "kubevirt";
/// KubeVirt's `--leader-elect-lease-duration` default.
pub(crate) const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// KubeVirt's `--leader-elect-renew-deadline` default.
pub(crate) const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// KubeVirt's `--leader-elect-retry-period` default.
pub(crate) const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// client-go `leaderelection.JitterFactor`: acquire retries wait `retryPeriod * (1 + r * 1.2)`
/// with `r` uniform in `[0, 1)`, and `renewDeadline` must exceed `retryPeriod * 1.2`.
pub const JITTER_FACTOR: f64 = 1.2;
/// Annotation the controller stamps on the Lease while leading, whose value is the address of
/// the leader's debug endpoint (e.g. `http://10.0.0.7:8443/debug/state`). virtctl-rs only, not
/// KubeVirt.
pub const DEBUG_ENDPOINT_ANNOTATION: &str = "virtctl-rs.kubevirt.io/debug-endpoint";

/// Everything a [`super::LeaderElector`] needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// `metadata.name` of the Lease (default [`DEFAULT_LEASE_NAME`]).
    pub lease_name: String,
    /// `metadata.namespace` of the Lease (default [`DEFAULT_NAMESPACE`]).
    pub namespace: String,
    /// This candidate's `holderIdentity`; must be unique among candidates and non-empty
    /// (default [`default_identity`]).
    pub identity: String,
    /// How long a candidate waits, measured on its own monotonic clock from the last observed
    /// change of the record, before taking the lease over. Written to `leaseDurationSeconds`
    /// truncated to whole seconds, so it must be at least 1 s.
    pub lease_duration: Duration,
    /// How long the leader keeps retrying a failed renewal before it stops leading; measured
    /// from the start of its last successful renewal.
    pub renew_deadline: Duration,
    /// Pause between attempts (acquire attempts are jittered up to `JITTER_FACTOR` more).
    pub retry_period: Duration,
    /// On graceful cancellation (and after losing the lease, as client-go does), hand the lease
    /// back by writing an empty holder so another candidate can take over at once instead of
    /// waiting `lease_duration`. KubeVirt does not set client-go's `ReleaseOnCancel` (it exits
    /// fatally instead); virtctl-rs defaults to `true` so a restarting controller hands over
    /// promptly.
    pub release_on_cancel: bool,
    /// Annotations stamped on the Lease on every write while we lead (e.g.
    /// [`DEBUG_ENDPOINT_ANNOTATION`]); other annotations on the Lease are kept. On release,
    /// those still carrying our values are removed.
    pub annotations: BTreeMap<String, String>,
}

impl LeaderElectionConfig {
    /// KubeVirt's defaults with the given identity.
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            lease_name: DEFAULT_LEASE_NAME.to_owned(),
            namespace: DEFAULT_NAMESPACE.to_owned(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_cancel: true,
            annotations: BTreeMap::new(),
        }
    }

    /// `namespace/name`, as client-go's `LeaseLock.Describe()` (used in log lines).
    pub(crate) fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.lease_name)
    }

    /// `leaseDurationSeconds` we write: `lease_duration` truncated to whole seconds (as
    /// client-go's `int(LeaseDuration / time.Second)`), saturating at `i32::MAX`.
    pub(crate) fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// client-go's `NewLeaderElector` checks, in its order, plus the checks that make sense for
    /// a Lease (names present, whole-second duration).
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        let retry_jittered =
            Duration::try_from_secs_f64(self.retry_period.as_secs_f64() * JITTER_FACTOR)
                .unwrap_or(Duration::MAX);
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseDurationNotAboveRenewDeadline {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
            });
        }
        if self.renew_deadline <= retry_jittered {
            return Err(ConfigError::RenewDeadlineNotAboveJitteredRetry {
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
                retry_jittered,
            });
        }
        if self.lease_duration.is_zero() {
            return Err(ConfigError::Zero("leaseDuration"));
        }
        if self.renew_deadline.is_zero() {
            return Err(ConfigError::Zero("renewDeadline"));
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::Zero("retryPeriod"));
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(ConfigError::LeaseDurationBelowOneSecond(
                self.lease_duration,
            ));
        }
        if self.lease_duration.as_secs() > i32::MAX as u64 {
            return Err(ConfigError::LeaseDurationTooLong(self.lease_duration));
        }
        if self.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        if self.lease_name.is_empty() {
            return Err(ConfigError::EmptyLeaseName);
        }
        if self.namespace.is_empty() {
            return Err(ConfigError::EmptyNamespace);
        }
        Ok(())
    }
}

/// Why a [`LeaderElectionConfig`] was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `lease_duration <= renew_deadline`: a leader could still believe it leads after others
    /// may take over.
    #[error(
        "leaseDuration must be greater than renewDeadline (leaseDuration {lease_duration:?}, renewDeadline {renew_deadline:?})"
    )]
    LeaseDurationNotAboveRenewDeadline {
        /// Configured lease duration.
        lease_duration: Duration,
        /// Configured renew deadline.
        renew_deadline: Duration,
    },
    /// `renew_deadline <= retry_period * 1.2`: not even one jittered retry fits.
    #[error(
        "renewDeadline must be greater than retryPeriod*JitterFactor (renewDeadline {renew_deadline:?}, retryPeriod {retry_period:?}, retryPeriod*1.2 = {retry_jittered:?})"
    )]
    RenewDeadlineNotAboveJitteredRetry {
        /// Configured renew deadline.
        renew_deadline: Duration,
        /// Configured retry period.
        retry_period: Duration,
        /// `retry_period * JITTER_FACTOR`.
        retry_jittered: Duration,
    },
    /// A duration is zero; the payload is its client-go name.
    #[error("{0} must be greater than zero")]
    Zero(&'static str),
    /// `leaseDurationSeconds` is whole seconds; a sub-second duration would be written as 0
    /// and every other candidate would consider the lease expired at once.
    #[error("leaseDuration must be at least 1s (it is written in whole seconds), got {0:?}")]
    LeaseDurationBelowOneSecond(Duration),
    /// `leaseDurationSeconds` is an int32; longer durations cannot be written.
    #[error("leaseDuration must fit leaseDurationSeconds (int32 seconds), got {0:?}")]
    LeaseDurationTooLong(Duration),
    /// Empty identity (client-go: "Lock identity is empty").
    #[error("lock identity is empty")]
    EmptyIdentity,
    /// Empty lease name.
    #[error("lease name is empty")]
    EmptyLeaseName,
    /// Empty namespace.
    #[error("lease namespace is empty")]
    EmptyNamespace,
}

/// A unique candidate identity `<hostname>_<8 hex digits>`.
///
/// KubeVirt uses the bare hostname (the pod name, unique per pod); the random suffix keeps two
/// processes on one host (e.g. two `run-controller` instances in tests) apart, as client-go's
/// examples do. The hostname comes from `$HOSTNAME`, else `/proc/sys/kernel/hostname`, else
/// `/etc/hostname`, else `virtctl-rs`.
pub fn default_identity() -> String {
    format!("{}_{:08x}", hostname(), rand::random::<u32>())
}

/// Best-effort hostname without extra dependencies (see [`default_identity`]).
pub(crate) fn hostname() -> String {
    let from_env = std::env::var("HOSTNAME").ok();
    let from_files = || {
        ["/proc/sys/kernel/hostname", "/etc/hostname"]
            .iter()
            .find_map(|p| std::fs::read_to_string(p).ok())
    };
    from_env
        .or_else(from_files)
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "virtctl-rs".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    fn cfg(lease: f64, renew: f64, retry: f64) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_duration: secs(lease),
            renew_deadline: secs(renew),
            retry_period: secs(retry),
            ..LeaderElectionConfig::new("me")
        }
    }

    #[test]
    fn kubevirt_defaults_are_valid() {
        let c = LeaderElectionConfig::new("me");
        assert_eq!(c.validate(), Ok(()));
        assert_eq!(c.describe(), "kubevirt/virt-controller");
        assert_eq!(c.lease_duration_seconds(), 15);
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
    }

    #[test]
    fn lease_duration_must_exceed_renew_deadline() {
        let err = cfg(10.0, 10.0, 2.0).validate();
        assert!(matches!(
            err,
            Err(ConfigError::LeaseDurationNotAboveRenewDeadline { .. })
        ));
        let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.starts_with("leaseDuration must be greater than renewDeadline"),
            "{msg}"
        );
    }

    #[test]
    fn renew_deadline_must_exceed_jittered_retry() {
        // 2.4 == 2 * 1.2 is rejected (client-go uses <=), 2.5 passes.
        assert!(matches!(
            cfg(15.0, 2.4, 2.0).validate(),
            Err(ConfigError::RenewDeadlineNotAboveJitteredRetry { .. })
        ));
        assert_eq!(cfg(15.0, 2.5, 2.0).validate(), Ok(()));
        let msg = cfg(15.0, 2.0, 2.0)
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            msg.starts_with("renewDeadline must be greater than retryPeriod*JitterFactor"),
            "{msg}"
        );
    }

    #[test]
    fn zero_and_sub_second_durations_are_rejected() {
        assert_eq!(
            cfg(15.0, 10.0, 0.0).validate(),
            Err(ConfigError::Zero("retryPeriod"))
        );
        assert_eq!(
            cfg(0.9, 0.5, 0.1).validate(),
            Err(ConfigError::LeaseDurationBelowOneSecond(secs(0.9)))
        );
        let huge = Duration::from_secs(u64::MAX / 2);
        assert_eq!(
            LeaderElectionConfig {
                lease_duration: huge,
                ..LeaderElectionConfig::new("me")
            }
            .validate(),
            Err(ConfigError::LeaseDurationTooLong(huge))
        );
        // renewDeadline 0 fails the jitter check first, as in client-go.
        assert!(matches!(
            cfg(15.0, 0.0, 0.0).validate(),
            Err(ConfigError::RenewDeadlineNotAboveJitteredRetry { .. })
        ));
    }

    #[test]
    fn names_and_identity_must_be_present() {
        let mut c = LeaderElectionConfig::new("");
        assert_eq!(c.validate(), Err(ConfigError::EmptyIdentity));
        c.identity = "me".into();
        c.lease_name.clear();
        assert_eq!(c.validate(), Err(ConfigError::EmptyLeaseName));
        c.lease_name = "x".into();
        c.namespace.clear();
        assert_eq!(c.validate(), Err(ConfigError::EmptyNamespace));
    }

    #[test]
    fn default_identity_is_hostname_plus_suffix_and_unique() {
        let a = default_identity();
        let b = default_identity();
        let (host, suffix) = a.rsplit_once('_').unwrap_or_default();
        assert_eq!(host, hostname());
        assert_eq!(suffix.len(), 8);
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
