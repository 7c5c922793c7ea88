//! Leader election on a `coordination.k8s.io/v1` Lease with client-go's algorithm
//! (`k8s.io/client-go/tools/leaderelection`), as KubeVirt's virt-controller uses it
//! (`pkg/virt-controller/watch/application.go:1132-1177`: lease `virt-controller` in the
//! install namespace, 15 s / 10 s / 2 s, "leaderelection lost" is fatal).
//!
//! * [`config`]: [`LeaderElectionConfig`], KubeVirt defaults, validation, [`default_identity`].
//! * [`record`]: the election fields of a Lease spec ([`LeaseRecord`]).
//! * [`api`]: the [`LeaseApi`] trait (get/create/replace) and its `kube` implementation.
//! * [`elector`]: [`LeaderElector`], the algorithm and the tokio run loop.
//! * [`state`]: the published [`LeaderState`] and the [`RunOutcome`].
//! * `fake` (test code only): an in-memory Lease store with scripted faults.
//! * [`fence`]: [`TermFence`] and the client whose writes it fences.
//!
//! Typical use:
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> anyhow::Result<()> {
//! use virtctl_rs::runtime::lease::{LeaderElectionConfig, LeaderElector, default_identity};
//! use tokio_util::sync::CancellationToken;
//!
//! let config = LeaderElectionConfig::new(default_identity());
//! let elector = LeaderElector::from_client(client, config)?;
//! let state = elector.subscribe(); // for /leader, /debug/state and metrics
//! let outcome = elector
//!     .run_with(CancellationToken::new(), |term| async move {
//!         // start controllers; they must stop when `term` is cancelled
//!         term.cancelled().await;
//!     })
//!     .await;
//! if outcome.is_lost() {
//!     anyhow::bail!("leaderelection lost");
//! }
//! # drop(state);
//! # Ok(())
//! # }
//! ```

pub(crate) mod api;
pub(crate) mod config;
pub(crate) mod elector;
#[cfg(test)]
mod fake;
pub(crate) mod fence;
pub(crate) mod record;
pub(crate) mod state;

#[cfg(test)]
mod tests;

pub use api::{KubeLeaseApi, LeaseApi, LeaseError};
pub use config::{
    DEBUG_ENDPOINT_ANNOTATION, DEFAULT_LEASE_NAME, DEFAULT_NAMESPACE, JITTER_FACTOR,
    LeaderElectionConfig, default_identity,
};
pub(crate) use config::{DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD};
pub use elector::{LeaderElector, WallClock};
pub use fence::{TermFence, fenced_client, fenced_client_from_config};
pub use record::LeaseRecord;
pub use state::{ElectionPhase, LeaderState, LostReason, RunOutcome};
