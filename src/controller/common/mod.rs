//! What the VM and VMI controllers share, as KubeVirt shares it in
//! `pkg/virt-controller/watch/common`: the sync error, API-failure and reconcile error types ([`error`]),
//! `equality.Semantic.DeepEqual` ([`semantic`]), the condition manager ([`conditions`]), the
//! JSON-patch builder ([`patch`]), and the
//! record of the last reconcile of every key ([`record`]).
//!
//! ## The failure protocol (both controllers)
//!
//! A decision is pure: it lists the API writes KubeVirt would make, in order, assuming each
//! succeeds. The executor applies them in order; when the write at index `i` fails with an
//! [`ApiFailure`], it asks the decision again *with the failures so far* and
//! continues with what that answer lists after `i`. The answer keeps actions `0..=i` unchanged
//! (decisions are deterministic) and then says what KubeVirt does after that error: undo an
//! expectation, emit a Warning event, record a [`SyncError`], or stop.
//!
//! - VM controller: `vm::decide_with_failures(snapshot, failures)` is that question, asked after
//!   every failure (vm/action.rs has the details).
//! - VMI controller: KubeVirt's `sync` returns on its first error, so the question has one
//!   possible failure and is asked once, after stage 1 (`sync`'s writes):
//!   `vmi::decide_after_sync(snapshot, outcome)` answers with stage 2 (events about stage 1,
//!   then `updateStatus`). A failed stage-2 write ends the sync (`updateStatus` returned an
//!   error). vmi/action.rs (`VmiDecision`) has the details.
//!
//! Both executors run this loop through [`protocol::ActionRun`]: the VM executor answers a
//! failure with the re-decided list, the VMI executor with "stop" (twice, once per stage).
//!
//! Either way the reconcile ends with one [`ReconcileRecord`] written
//! through [`ReconcileLog::finish`], and a requeueing sync error or
//! a failed write makes the work queue re-add the key with rate limiting.

pub(crate) mod conditions;
pub(crate) mod error;
pub(crate) mod patch;
pub(crate) mod protocol;
pub(crate) mod record;
pub(crate) mod semantic;

pub(crate) use error::{ApiFailure, ReconcileError, SyncError};
pub(crate) use patch::PatchSet;
pub(crate) use semantic::semantic_eq;
