//! The VM decision engine: KubeVirt's `execute` → `sync` → `updateStatus`
//! (pkg/virt-controller/watch/vm/vm.go:357-458, 3215-3390, 2457-2514) replayed on a snapshot.
//!
//! Every API call goes through [`Engine::api`], which records the action and answers with the
//! outcome the executor reported for that action index (success unless listed in
//! [`ApiFailures`]). KubeVirt's in-memory bookkeeping (the working VM object, the VMI it patched,
//! the expectation counters) is simulated so that later steps see what KubeVirt's would.

mod datavolume_step;
mod generation_step;
mod instancetype;
mod lifecycle;
mod live_update_step;
mod memory_dump_step;
mod revision_step;
mod run_strategy_step;
mod status_step;
mod sync;
mod volume_requests_step;

use crate::api::vm::{VirtualMachine, VirtualMachineStatus};
use crate::api::vmi::VirtualMachineInstance;
use crate::controller::vm::action::{
    ApiFailure, ApiFailures, PlannedAction, ResourceVersionFrom, SyncError, VmAction, VmDecision,
};
use crate::controller::vm::conditions;
use crate::controller::vm::reasons::condition;
use crate::controller::vm::snapshot::{ExpectationCounts, ExpectationsView, VmSnapshot};
use std::sync::Arc;

/// Decide what one sync of the VM does, assuming every API call succeeds.
pub(crate) fn decide(snapshot: &VmSnapshot) -> VmDecision {
    decide_with_failures(snapshot, &ApiFailures::none())
}

/// Decide what one sync does when the API calls at the indices in `failures` fail (see the
/// executor contract in [`crate::controller::vm::action`]). Deterministic: the same inputs give the same
/// decision, and adding a failure at index `i` leaves actions `0..=i` unchanged.
pub(crate) fn decide_with_failures(snapshot: &VmSnapshot, failures: &ApiFailures) -> VmDecision {
    let mut engine = Engine::new(snapshot, failures);
    let outcome = engine.execute();
    VmDecision {
        actions: engine.actions,
        sync_error: engine.sync_error,
        status: engine.status,
        outcome,
        explanation: engine.explanation,
    }
}

/// Stop the sync: `execute` returns this error (→ rate-limited requeue), no status update.
type Abort = crate::controller::vm::error::VmSyncError;

/// The replay state of one sync.
pub(super) struct Engine<'a> {
    snap: &'a VmSnapshot,
    failures: &'a ApiFailures,
    actions: Vec<PlannedAction>,
    explanation: Vec<String>,
    /// `namespace/name` of the VM.
    key: String,
    /// Expectation counters as they evolve during the sync.
    expectations: ExpectationsView,
    /// KubeVirt's working `vm` object: shared with the snapshot until the sync changes it
    /// (copied then, `Arc::make_mut`; most syncs only read it).
    vm: Arc<VirtualMachine>,
    /// Where `vm`'s resourceVersion comes from.
    vm_rv: ResourceVersionFrom,
    /// The VM status as stored on the server (changed only by status patches).
    server_status: Option<VirtualMachineStatus>,
    /// The claimed VMI as KubeVirt holds it: shared with the snapshot until a VMI patch
    /// changes it in memory (copied then, `Arc::make_mut`).
    vmi: Option<Arc<VirtualMachineInstance>>,
    sync_error: Option<SyncError>,
    status: Option<VirtualMachineStatus>,
    /// Instancetype/preference ControllerRevisions created in this sync (the finders read them
    /// back, as KubeVirt's GET does).
    created_revisions: Vec<Arc<k8s_openapi::api::apps::v1::ControllerRevision>>,
}

impl<'a> Engine<'a> {
    fn new(snap: &'a VmSnapshot, failures: &'a ApiFailures) -> Self {
        Engine {
            snap,
            failures,
            actions: Vec::new(),
            explanation: Vec::new(),
            key: snap.key(),
            expectations: snap.expectations,
            vm: snap.vm.clone(),
            vm_rv: ResourceVersionFrom::Snapshot,
            server_status: snap.vm.status.clone(),
            vmi: None,
            sync_error: None,
            status: None,
            created_revisions: Vec::new(),
        }
    }

    /// Record an explanation line.
    pub(super) fn explain(&mut self, line: impl Into<String>) {
        self.explanation.push(line.into());
    }

    /// Record a local action (expectations, events, requeues) and apply its effect on the
    /// simulated expectation counters.
    pub(super) fn local(&mut self, action: VmAction, why: impl Into<String>) {
        match &action {
            VmAction::ExpectVmiCreations { count, .. } => {
                self.expectations.vmi = Some(ExpectationCounts::pending(*count, 0));
            }
            VmAction::VmiCreationObserved { .. } => {
                if let Some(e) = self.expectations.vmi.as_mut() {
                    e.adds -= 1;
                }
            }
            VmAction::ExpectVmiDeletions { deletion_keys, .. } => {
                let dels = deletion_keys.len() as i64;
                self.expectations.vmi = Some(ExpectationCounts::pending(0, dels));
            }
            VmAction::VmiDeletionObserved { .. } => {
                if let Some(e) = self.expectations.vmi.as_mut() {
                    e.dels -= 1;
                }
            }
            VmAction::ExpectDataVolumeCreations { count, .. } => {
                self.expectations.data_volumes = Some(ExpectationCounts::pending(*count, 0));
            }
            VmAction::DataVolumeCreationObserved { .. } => {
                if let Some(e) = self.expectations.data_volumes.as_mut() {
                    e.adds -= 1;
                }
            }
            _ => {}
        }
        self.actions.push(PlannedAction {
            action,
            why: why.into(),
        });
    }

    /// Record an API call; returns its index and the outcome the executor reported.
    pub(super) fn api(
        &mut self,
        action: VmAction,
        why: impl Into<String>,
    ) -> (usize, Result<(), ApiFailure>) {
        let index = self.actions.len();
        self.actions.push(PlannedAction {
            action,
            why: why.into(),
        });
        match self.failures.get(index) {
            None => (index, Ok(())),
            Some(e) => {
                self.explanation
                    .push(format!("action {index} failed: {}", e.message));
                (index, Err(e.clone()))
            }
        }
    }

    /// `PatchVmiSpec`: one JSON patch of VMI `name`'s spec, sent with its reason.
    pub(super) fn patch_vmi_spec(
        &mut self,
        name: String,
        p: crate::controller::vm::live_update::VmiPatch,
    ) -> Result<(), ApiFailure> {
        self.api(
            VmAction::PatchVmiSpec {
                name,
                patch: p.patch,
            },
            p.why,
        )
        .1
    }

    /// A Normal/Warning event on the VM.
    pub(super) fn event(
        &mut self,
        type_: crate::controller::vm::action::EventType,
        reason: &str,
        message: String,
        why: &str,
    ) {
        self.local(
            VmAction::Event {
                type_,
                reason: reason.to_string(),
                message,
            },
            why,
        );
    }

    /// The working VM's conditions, created on demand.
    pub(super) fn vm_conditions_mut(&mut self) -> &mut Vec<crate::api::Condition> {
        Arc::make_mut(&mut self.vm)
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new)
    }

    /// Whether the working VM has the RestartRequired condition.
    pub(super) fn has_restart_required(&self) -> bool {
        self.vm
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .is_some_and(|c| conditions::has_condition(c, condition::RESTART_REQUIRED))
    }

    /// `cleanupRestartRequired` (vm.go:1248-1255).
    pub(super) fn remove_restart_required(&mut self) {
        // Copied only when there is a condition to remove.
        if self.has_restart_required()
            && let Some(conds) = Arc::make_mut(&mut self.vm)
                .status
                .as_mut()
                .and_then(|s| s.conditions.as_mut())
        {
            conditions::remove_condition(conds, condition::RESTART_REQUIRED);
        }
    }

    /// The VM generation (`metadata.generation`, 0 when unset).
    pub(super) fn generation(&self) -> i64 {
        self.vm.metadata.generation.unwrap_or(0)
    }
}
