//! The leader-election record stored in a `coordination.k8s.io/v1` Lease's `spec`, and its
//! conversion to and from [`LeaseSpec`].
//!
//! Mirrors client-go `tools/leaderelection/resourcelock/interface.go` (`LeaderElectionRecord`)
//! and `leaselock.go` (`LeaseSpecToLeaderElectionRecord` / `LeaderElectionRecordToLeaseSpec`):
//! absent fields read as zero values (`""`, `0`, no time); every field we own is written.

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff;
use serde::Serialize;

/// One observation of a Lease's election fields.
///
/// Two records are compared field by field (client-go compares the raw JSON of the record) to
/// decide whether the holder renewed; the times are *never* compared with the local clock.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRecord {
    /// `spec.holderIdentity`; the empty string means nobody holds the lease (released).
    pub holder_identity: String,
    /// `spec.leaseDurationSeconds`, in seconds; `0` when absent.
    pub lease_duration_seconds: i32,
    /// `spec.acquireTime` (microsecond precision, wall clock of the writer).
    pub acquire_time: Option<DateTime<Utc>>,
    /// `spec.renewTime` (microsecond precision, wall clock of the writer).
    pub renew_time: Option<DateTime<Utc>>,
    /// `spec.leaseTransitions`; `0` when absent.
    pub lease_transitions: i32,
    /// `spec.strategy` (coordinated leader election, alpha). Read for comparison only; this
    /// elector never writes it, so a write by us clears it (as client-go's non-coordinated path).
    pub strategy: Option<String>,
    /// `spec.preferredHolder` (coordinated leader election, alpha). Read for comparison only.
    pub preferred_holder: Option<String>,
}

impl LeaseRecord {
    /// Reads the record out of a Lease spec; a missing spec reads as the empty record.
    pub(crate) fn from_spec(spec: Option<&LeaseSpec>) -> Self {
        let Some(spec) = spec else {
            return Self::default();
        };
        Self {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or(0),
            acquire_time: spec.acquire_time.as_ref().and_then(micro_time_to_chrono),
            renew_time: spec.renew_time.as_ref().and_then(micro_time_to_chrono),
            lease_transitions: spec.lease_transitions.unwrap_or(0),
            strategy: spec.strategy.clone(),
            preferred_holder: spec.preferred_holder.clone(),
        }
    }

    /// Writes the record as a Lease spec. `holderIdentity`, `leaseDurationSeconds` and
    /// `leaseTransitions` are always written (an empty holder is written as `""`, as client-go
    /// does on release); times are written when present.
    pub(crate) fn to_spec(&self) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.holder_identity.clone()),
            lease_duration_seconds: Some(self.lease_duration_seconds),
            acquire_time: self.acquire_time.and_then(chrono_to_micro_time),
            renew_time: self.renew_time.and_then(chrono_to_micro_time),
            lease_transitions: Some(self.lease_transitions),
            strategy: self.strategy.clone(),
            preferred_holder: self.preferred_holder.clone(),
        }
    }

    /// The holder, or `None` when the lease is free (empty holder).
    pub(crate) fn holder(&self) -> Option<&str> {
        (!self.holder_identity.is_empty()).then_some(self.holder_identity.as_str())
    }
}

/// Truncates a wall-clock time to the microsecond precision a `MicroTime` carries, so that a
/// record we write compares equal to the same record read back.
pub(crate) fn truncate_to_micros(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// `MicroTime` (jiff) → chrono; `None` if out of chrono's range (cannot happen for jiff's range).
pub(crate) fn micro_time_to_chrono(t: &MicroTime) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_micros(t.0.as_microsecond())
}

/// chrono → `MicroTime` (jiff), truncated to microseconds; `None` if outside jiff's range
/// (years -9999..=9999).
pub(crate) fn chrono_to_micro_time(t: DateTime<Utc>) -> Option<MicroTime> {
    jiff::Timestamp::from_microsecond(t.timestamp_micros())
        .ok()
        .map(MicroTime)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s)
            .map(|d| d.with_timezone(&Utc))
            .unwrap_or_else(|e| panic!("bad test time {s}: {e}"))
    }

    #[test]
    fn missing_spec_and_fields_read_as_zero_values() {
        assert_eq!(LeaseRecord::from_spec(None), LeaseRecord::default());
        assert_eq!(
            LeaseRecord::from_spec(Some(&LeaseSpec::default())),
            LeaseRecord::default()
        );
        assert_eq!(LeaseRecord::default().holder(), None);
    }

    #[test]
    fn round_trips_through_spec_at_microsecond_precision() {
        let rec = LeaseRecord {
            holder_identity: "virt-controller-abc_1234".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(t("2026-01-02T03:04:05.123456Z")),
            renew_time: Some(t("2026-01-02T03:04:07.654321Z")),
            lease_transitions: 7,
            strategy: None,
            preferred_holder: None,
        };
        let spec = rec.to_spec();
        assert_eq!(
            spec.holder_identity.as_deref(),
            Some("virt-controller-abc_1234")
        );
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(7));
        assert_eq!(LeaseRecord::from_spec(Some(&spec)), rec);
        assert_eq!(rec.holder(), Some("virt-controller-abc_1234"));
    }

    #[test]
    fn released_record_writes_empty_holder() {
        let rec = LeaseRecord {
            lease_duration_seconds: 1,
            ..LeaseRecord::default()
        };
        assert_eq!(rec.to_spec().holder_identity.as_deref(), Some(""));
    }

    #[test]
    fn serialized_micro_time_matches_kubernetes_format() {
        let rec = LeaseRecord {
            renew_time: Some(t("2026-01-02T03:04:05.1234567Z")),
            ..LeaseRecord::default()
        };
        let json = serde_json::to_value(rec.to_spec()).unwrap_or_default();
        assert_eq!(json["renewTime"], "2026-01-02T03:04:05.123456Z");
    }

    #[test]
    fn truncation_makes_written_and_read_times_equal() {
        let now = t("2026-01-02T03:04:05.123456789Z");
        let truncated = truncate_to_micros(now);
        let back = chrono_to_micro_time(truncated)
            .as_ref()
            .and_then(micro_time_to_chrono);
        assert_eq!(back, Some(truncated));
        assert_eq!(truncated.timestamp_subsec_nanos(), 123_456_000);
    }
}
