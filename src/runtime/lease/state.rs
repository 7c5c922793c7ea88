//! What the elector publishes (for metrics, `/leader` and `/debug/state`) and how a run ends.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum RunOutcome {
    /// We were leading and could not renew within `renewDeadline`, or saw another holder.
    /// KubeVirt exits fatally ("leaderelection lost"); the caller should exit non-zero.
    Lost,
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
        matches!(self, RunOutcome::Lost)
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
        assert!(RunOutcome::Lost.is_lost());
        assert!(
            !RunOutcome::Cancelled {
                was_leading: false,
                released: false
            }
            .is_lost()
        );
    }
}
