//! What the elector publishes (for metrics, `/leader` and `/debug/state`) and how a run ends.

use std::fmt;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize, Serializer};

/// Where the elector is in its life (`acquiring → leading → stopping → released/stopped`, or
/// `leading → lost`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ElectionPhase {
    /// Created, `run` not called yet.
    #[default]
    Idle,
    /// Trying to acquire every `retryPeriod` (jittered); standing by.
    Acquiring,
    /// Holding the lease and renewing it.
    Leading,
    /// Cancelled while leading: the term token is cancelled, workers are draining, the lease
    /// is still renewed until they finish, then released.
    Stopping,
    /// Renewal failed for `renewDeadline` (or another holder took the lease): leadership lost.
    Lost,
    /// Run finished after cancellation.
    Stopped,
}

/// Snapshot of the election as seen by this candidate, published on a `tokio::sync::watch`
/// channel on every change. Serialized in camelCase for `/debug/state`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaderState {
    /// `namespace/name` of the Lease.
    pub lease: String,
    /// Our identity.
    pub identity: String,
    /// Phase of this elector.
    pub phase: ElectionPhase,
    /// True from a successful acquire until we stop leading (renewal gave up, or release /
    /// end of run). client-go's `IsLeader()` plus "still inside our term".
    pub leading: bool,
    /// Last observed `holderIdentity` (`None` when the lease is free or not yet observed).
    pub holder: Option<String>,
    /// Wall-clock time at which we last observed the record change (or wrote it). Expiry is
    /// judged on a monotonic clock; this is only for display.
    pub observed_at: Option<DateTime<Utc>>,
    /// `leaseTransitions` of the last observed record.
    pub lease_transitions: Option<i32>,
    /// `acquireTime` of the last observed record.
    pub acquire_time: Option<DateTime<Utc>>,
    /// `renewTime` of our last successful acquire/renew (our wall clock).
    pub last_renew: Option<DateTime<Utc>>,
    /// Last failed attempt's error, cleared on the next success.
    pub last_error: Option<String>,
}

/// How [`super::LeaderElector::run`] ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum RunOutcome {
    /// We were leading and could not renew within `renewDeadline`, or saw another holder.
    /// KubeVirt exits fatally ("leaderelection lost"); the caller should exit non-zero.
    Lost {
        /// What ended the term.
        reason: LostReason,
    },
    /// The cancellation token fired.
    #[serde(rename_all = "camelCase")]
    Cancelled {
        /// Whether we were leading when cancelled.
        was_leading: bool,
        /// Whether the lease was handed back (holder cleared).
        released: bool,
    },
}

impl RunOutcome {
    /// True for [`RunOutcome::Lost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, RunOutcome::Lost { .. })
    }
}

/// Why a leader stopped leading ([`RunOutcome::Lost`]). Its `Display` continues "the Lease
/// kubevirt/virt-controller …", e.g. "… was taken over by \"b\"".
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "cause")]
pub enum LostReason {
    /// No renewal succeeded within the renew deadline.
    #[serde(rename_all = "camelCase")]
    NotRenewed {
        /// The configured renew deadline.
        #[serde(serialize_with = "millis")]
        renew_deadline: Duration,
        /// The error of the last renewal request that failed since the last success; `None`
        /// when none failed (no attempt was made in time: the process was paused or starved).
        last_error: Option<String>,
    },
    /// A renewal request was still unanswered at the renew deadline.
    #[serde(rename_all = "camelCase")]
    RenewalUnanswered {
        /// The configured renew deadline.
        #[serde(serialize_with = "millis")]
        renew_deadline: Duration,
        /// The error of an earlier renewal request that failed since the last success.
        last_error: Option<String>,
    },
    /// Another candidate holds the Lease (and it has not expired by our observation).
    HeldBy {
        /// Its `holderIdentity`.
        holder: String,
    },
    /// Another process with our identity acquired the Lease (see
    /// [`super::LeaderElector`]'s module docs: one identity, one leader).
    #[serde(rename_all = "camelCase")]
    SameIdentity {
        /// The shared identity.
        identity: String,
        /// The `acquireTime` it wrote.
        acquire_time: Option<DateTime<Utc>>,
        /// The `leaseTransitions` it wrote.
        lease_transitions: i32,
    },
}

fn millis<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LostReason::NotRenewed {
                renew_deadline,
                last_error: Some(e),
            } => write!(
                f,
                "was not renewed within the renew deadline ({renew_deadline:?}): the renewal \
                 requests failed, the last one with: {e}"
            ),
            LostReason::NotRenewed {
                renew_deadline,
                last_error: None,
            } => write!(
                f,
                "was not renewed within the renew deadline ({renew_deadline:?}): no renewal was \
                 attempted in time (the process was paused or starved of CPU)"
            ),
            LostReason::RenewalUnanswered {
                renew_deadline,
                last_error,
            } => {
                write!(
                    f,
                    "was not renewed within the renew deadline ({renew_deadline:?}): a renewal \
                     request was still unanswered at the deadline"
                )?;
                match last_error {
                    Some(e) => write!(f, " (an earlier one failed with: {e})"),
                    None => Ok(()),
                }
            }
            LostReason::HeldBy { holder } => write!(f, "was taken over by {holder:?}"),
            LostReason::SameIdentity {
                identity,
                acquire_time,
                lease_transitions,
            } => write!(
                f,
                "was acquired by another process with this instance's identity {identity:?} \
                 (acquireTime {}, leaseTransitions {lease_transitions}); give each instance its \
                 own --identity",
                acquire_time.map_or_else(|| "-".to_owned(), |t| t.to_rfc3339())
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn state_serializes_in_camel_case() {
        let s = LeaderState {
            lease: "kubevirt/virt-controller".into(),
            identity: "a".into(),
            phase: ElectionPhase::Leading,
            leading: true,
            holder: Some("a".into()),
            lease_transitions: Some(3),
            ..LeaderState::default()
        };
        let v = serde_json::to_value(&s).unwrap_or_default();
        assert_eq!(v["phase"], "leading");
        assert_eq!(v["leading"], true);
        assert_eq!(v["leaseTransitions"], 3);
        assert_eq!(v["observedAt"], serde_json::Value::Null);
        assert_eq!(v["lastRenew"], serde_json::Value::Null);
    }

    #[test]
    fn outcome_serializes_and_classifies() {
        let v = serde_json::to_value(RunOutcome::Cancelled {
            was_leading: true,
            released: true,
        })
        .unwrap_or_default();
        assert_eq!(
            v,
            serde_json::json!({"outcome": "cancelled", "wasLeading": true, "released": true})
        );
        let lost = RunOutcome::Lost {
            reason: LostReason::HeldBy { holder: "b".into() },
        };
        assert!(lost.is_lost());
        assert_eq!(
            serde_json::to_value(&lost).unwrap_or_default(),
            serde_json::json!({"outcome": "lost", "reason": {"cause": "heldBy", "holder": "b"}})
        );
        assert!(
            !RunOutcome::Cancelled {
                was_leading: false,
                released: false
            }
            .is_lost()
        );
    }

    #[test]
    fn lost_reasons_say_what_happened() {
        let deadline = Duration::from_secs(10);
        let failed = LostReason::NotRenewed {
            renew_deadline: deadline,
            last_error: Some("lease API error: 500 Internal Server Error".into()),
        };
        assert_eq!(
            failed.to_string(),
            "was not renewed within the renew deadline (10s): the renewal requests failed, \
             the last one with: lease API error: 500 Internal Server Error"
        );
        assert_eq!(
            serde_json::to_value(&failed).unwrap_or_default(),
            serde_json::json!({
                "cause": "notRenewed",
                "renewDeadline": 10000,
                "lastError": "lease API error: 500 Internal Server Error"
            })
        );
        let stalled = LostReason::NotRenewed {
            renew_deadline: deadline,
            last_error: None,
        };
        assert!(
            stalled
                .to_string()
                .contains("no renewal was attempted in time"),
            "{stalled}"
        );
        let unanswered = LostReason::RenewalUnanswered {
            renew_deadline: Duration::from_millis(1500),
            last_error: None,
        };
        assert_eq!(
            unanswered.to_string(),
            "was not renewed within the renew deadline (1.5s): a renewal request was still \
             unanswered at the deadline"
        );
        assert_eq!(
            LostReason::HeldBy { holder: "b".into() }.to_string(),
            "was taken over by \"b\""
        );
        let twin = LostReason::SameIdentity {
            identity: "me".into(),
            acquire_time: DateTime::from_timestamp(1_767_225_600, 0),
            lease_transitions: 3,
        };
        assert_eq!(
            twin.to_string(),
            "was acquired by another process with this instance's identity \"me\" (acquireTime \
             2026-01-01T00:00:00+00:00, leaseTransitions 3); give each instance its own \
             --identity"
        );
    }
}
