//! KubeVirt v1.9's VMI controller (`pkg/virt-controller/watch/vmi/lifecycle.go`, `vmi.go`) as a
//! pure decision.
//!
//! One sync of a VMI key is `decide(&VmiSnapshot) -> VmiDecision`: the snapshot holds what the
//! controller reads from its caches (the VMI, its pods, the owner VM's UID, expectation state,
//! storage facts, the pre-rendered launcher pod, `now`); the decision lists the intended API
//! writes and events ([`VmiAction`]), each with a `why` citing the KubeVirt source line, plus the
//! sync error, the VMI as `updateStatus` computed it, and a readable explanation. A thin
//! executor applies the actions (protocol on [`VmiDecision`]); the inspector prints them.
//!
//! The launcher pod is rendered *outside* the decision (it needs randomness and cluster
//! settings): the caller asks [`needs_rendered_pod`], renders with
//! `crate::launcher::pod::render_launch_manifest` and puts the result in
//! [`VmiSnapshot::rendered_pod`]. The decision then emits [`VmiAction::CreatePod`] with that pod.
//!
//! Files: [`snapshot`] (input), [`action`] (output types), [`decide`](mod@decide) (sync + updateStatus),
//! [`conditions`] (condition bookkeeping), [`patch`] (JSON patches),
//! [`events`] (event/sync-error texts, API error mapping), [`podutil`] (pod predicates of
//! pkg/controller/controller.go). The sync error, API-failure type, semantic equality, condition
//! manager and patch builder are shared with the VM controller in `controller::common`.

pub(crate) mod action;
pub(crate) mod backend_storage;
pub(crate) mod conditions;
pub(crate) mod decide;
pub(crate) mod events;
pub mod executor;
pub(crate) mod flight;
mod hotplug;
pub mod launcher_cache;
mod migration_required;
pub(crate) mod network_status;
pub(crate) mod patch;
pub(crate) mod podutil;
pub(crate) mod snapshot;
pub(crate) mod storage;
pub(crate) mod topology;
mod volume_hotplug;

pub use action::{EventType, SkipReason, SyncOutcome, VmiAction, VmiDecision, VmiEvent};
pub(crate) use decide::{decide, decide_after_sync, decide_sync, needs_rendered_pod};
pub use snapshot::{ExpectationsState, RenderFailure, StorageState, VmiSnapshot};

/// The work-queue name (`virt-controller-vmi`, vmi.go:83-86), also the `name` label of the
/// work-queue metrics.
pub const QUEUE_NAME: &str = "virt-controller-vmi";

/// Default number of VMI controller workers (`--vmi-threads`, application.go:125-128).
pub const WORKERS: usize = 10;
