//! The output of one VM sync: the ordered list of things KubeVirt's controller would do, what the
//! executor must do when an API call fails, and the resulting status.
//!
//! ## Executor contract
//!
//! Apply `VmDecision::actions` in order. Local actions (expectations, events, requeues) cannot
//! fail. When an API action (see [`VmAction::is_api_call`]) fails with error `e` at index `i`:
//! record `(i, e)` in an [`ApiFailures`], call
//! [`decide_with_failures`](super::decide_with_failures) with the same snapshot and all failures so
//! far, and continue with the new decision's actions from index `i + 1`. The new decision has the
//! same actions up to and including `i` (decisions are deterministic), followed by what KubeVirt
//! does after that error (undo an expectation, emit a Warning event, record a sync error, or stop
//! the sync). At the end, act on [`VmDecision::outcome`]: [`SyncOutcome::Done`] → `Forget(key)`,
//! [`SyncOutcome::Error`] → `AddRateLimited(key)` (vm.go:336-355).
//!
//! Every object named by an action lives in the VM's namespace. Writes of the whole VM
//! ([`VmAction::UpdateVm`], [`VmAction::UpdateVmStatus`]) take `metadata.resourceVersion` from
//! their [`ResourceVersionFrom`]; for `UpdateVmStatus` send the snapshot VM with that
//! resourceVersion and the given status. Patches are sent as given (JSON patch for the `patch`
//! of finalizer/annotation/firmware/start-request actions, merge patch for adopt/release).
//! The informer event handlers, not this module, observe creations/deletions in the
//! expectation stores (vm.go:1985-2134).

use crate::api::DataVolume;
use crate::api::vm::{AddVolumeOptions, RemoveVolumeOptions, VirtualMachine, VirtualMachineStatus};
use crate::api::vmi::VirtualMachineInstance;
use k8s_openapi::api::apps::v1::ControllerRevision;
use std::collections::BTreeMap;

/// Where the `metadata.resourceVersion` of a full-object VM write comes from.
///
/// KubeVirt keeps working on the VM object it read from the cache and replaces it only with the
/// objects some writes return; a write made with a stale resourceVersion fails with a Conflict
/// (e.g. the `UpdateStatus` after `addStartRequest`, vm.go:954-968, or after the Halted
/// start-request `Update`, vm.go:1120-1131). The executor reproduces that by taking the
/// resourceVersion from the named source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceVersionFrom {
    /// The VM in the snapshot (the cache).
    Snapshot,
    /// The VM returned by the API action at this index of `VmDecision::actions`.
    Action(usize),
}

/// Why a full VM `Update` is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmUpdatePurpose {
    /// Set the `kubevirt.io/latest-observed-api-version` / `storage-observed-api-version`
    /// annotations; always the first write on a VM, after which the sync stops (vm.go:376-386).
    ApiVersionAnnotations,
    /// Halted + Start request ("start paused"): rewrite `spec.runStrategy: Always` (or
    /// `spec.running: true` if the VM uses `running`) (vm.go:1115-1131).
    HaltedStartRequest,
    /// End of `sync`: the spec or metadata changed in memory (firmware UUID persisted, restored
    /// run strategy, PCI topology annotations) (vm.go:3379-3387).
    SyncedSpec,
    /// The `expand`/`expandAll` instancetype reference policies: the VM with its instancetype
    /// and preference written into the template and its matchers cleared, followed by an
    /// `UpdateStatus` clearing the status refs (instancetype/controller/vm/controller.go:
    /// 177-191).
    ExpandInstancetype,
}

pub use crate::controller::context::EventType;

/// One thing the controller does. Patches are RFC 6902 JSON Patch documents (a JSON array) or
/// RFC 7386 merge patches (a JSON object), as noted per variant.
#[derive(Debug, Clone, PartialEq)]
pub enum VmAction {
    // ----- expectation bookkeeping (local, never fails) -----
    /// `expectations.ExpectCreations(key, count)`: overwrite the VMI entry with (count, 0).
    ExpectVmiCreations { key: String, count: i64 },
    /// `expectations.CreationObserved(key)`: undo after a failed VMI create.
    VmiCreationObserved { key: String },
    /// `expectations.ExpectDeletions(key, deletion_keys)` (UID-tracking): overwrite the entry
    /// with (0, len) and remember the VMI keys (`namespace/name`).
    ExpectVmiDeletions {
        key: String,
        deletion_keys: Vec<String>,
    },
    /// `expectations.DeletionObserved(key, deletion_key)`: undo after a failed VMI delete.
    VmiDeletionObserved { key: String, deletion_key: String },
    /// `dataVolumeExpectations.ExpectCreations(key, count)`.
    ExpectDataVolumeCreations { key: String, count: i64 },
    /// `dataVolumeExpectations.CreationObserved(key)`.
    DataVolumeCreationObserved { key: String },

    // ----- local queue / recorder operations (never fail) -----
    /// `Queue.AddAfter(key, seconds)`.
    RequeueAfter { seconds: i64 },
    /// `recorder.Eventf(vm, type, reason, message)`.
    Event {
        type_: EventType,
        reason: String,
        message: String,
    },

    // ----- API writes on the VM -----
    /// PUT the whole VM (`Update`). The object is the intended VM; take `metadata.resourceVersion`
    /// from `resource_version_from`.
    UpdateVm {
        vm: Box<VirtualMachine>,
        purpose: VmUpdatePurpose,
        resource_version_from: ResourceVersionFrom,
    },
    /// JSON patch test+replace of `/metadata/finalizers` adding
    /// `kubevirt.io/virtualMachineControllerFinalize` (vm.go:2362-2382). Returns the VM.
    AddVmFinalizer { patch: serde_json::Value },
    /// JSON patch test+replace of `/metadata/finalizers` without the finalizer (vm.go:2338-2360).
    /// Returns the VM.
    RemoveVmFinalizer { patch: serde_json::Value },
    /// JSON patch test+add of `/spec/template/spec/domain/firmware` persisting the legacy
    /// firmware UUID (firmware.go:48-81). Returns the VM.
    PatchVmFirmware { patch: serde_json::Value },
    /// JSON patch on the status subresource: `add /status/stateChangeRequests` with the current
    /// list plus `{action: Start}` (`addStartRequest`, vm.go:954-968).
    AddStartRequest { patch: serde_json::Value },
    /// JSON patch on the status subresource adding (`add`) or moving (`test` + `replace`)
    /// `status.instancetypeRef` / `status.preferenceRef` (revision/patch.go:30-75,
    /// upgrade/handler.go:76-86). Returns the VM.
    PatchVmInstancetypeRefs { patch: serde_json::Value },
    /// PUT the status subresource (`UpdateStatus`) with this status; only emitted when the status
    /// changed (vm.go:2495-2500).
    UpdateVmStatus {
        status: Box<VirtualMachineStatus>,
        resource_version_from: ResourceVersionFrom,
    },

    // ----- API writes on the VMI -----
    /// POST the VMI, fully built (`SetupVMIFromVM` + `startVMI`, vm.go:1257-1345).
    CreateVmi { vmi: Box<VirtualMachineInstance> },
    /// DELETE the VMI with default options (vm.go:1658-1688).
    DeleteVmi { name: String, uid: String },
    /// JSON patch test+replace of `/metadata/annotations` setting `kubevirt.io/vm-generation`
    /// (vm.go:1361-1382). Returns the VMI.
    PatchVmiGenerationAnnotation {
        name: String,
        patch: serde_json::Value,
    },
    /// JSON patch syncing the dynamic labels/annotations to the VMI (vm.go:3067-3188).
    PatchVmiMetadata {
        name: String,
        patch: serde_json::Value,
    },
    /// JSON patch of the VMI's spec carrying a live update from the template (CPU sockets and
    /// resources, guest memory, affinity, node selector, tolerations; vm.go:575-806,
    /// 3444-3566; see [`super::live_update`]).
    PatchVmiSpec {
        name: String,
        patch: serde_json::Value,
    },
    /// PUT virt-api's VMI `addvolume` subresource with these options (a legacy hotplug request,
    /// vm.go:829-835; virt-api patches the VMI spec, volumes.go:214-244).
    AddVmiVolume {
        name: String,
        options: Box<AddVolumeOptions>,
    },
    /// PUT virt-api's VMI `removevolume` subresource (vm.go:836-843).
    RemoveVmiVolume {
        name: String,
        options: Box<RemoveVolumeOptions>,
    },
    /// JSON patch test+replace of `/metadata/finalizers` dropping the VM controller finalizer
    /// from a final VMI (vm.go:2314-2336).
    RemoveVmiFinalizer {
        name: String,
        patch: serde_json::Value,
    },
    /// Adopt an orphan VMI: first the `CanAdopt` recheck — an uncached GET of the VM, failing with
    /// "original VirtualMachine ns/name is gone: got uid X, wanted Y" or "ns/name has just been
    /// deleted at T" (vm.go:394-407, controller_ref_manager.go:581-593); then this merge patch
    /// (`ownerReferences` + `metadata.uid` precondition). Report a failure as
    /// `can't adopt VirtualMachineInstance ns/name (uid): <err>` (controller_ref_manager.go:414-427).
    AdoptVmi {
        name: String,
        uid: String,
        patch: serde_json::Value,
    },
    /// Release a VMI (merge patch `{"metadata":{"ownerReferences":[]}}`). Not reachable through
    /// the by-name claim (the name always matches); kept for completeness. NotFound and Invalid
    /// errors are to be reported as success (controller_ref_manager.go:429-455).
    ReleaseVmi {
        name: String,
        patch: serde_json::Value,
    },

    // ----- other objects -----
    /// JSON patch of a claim's `metadata.annotations` recording a memory dump's file name or
    /// failure (`patchMemoryDumpPVCAnnotation`, memorydump.go:264-312). KubeVirt only logs its
    /// failure: the sync goes on.
    PatchClaimAnnotations {
        name: String,
        patch: serde_json::Value,
    },
    /// Adopt an orphan DataVolume (same `CanAdopt` recheck, then this merge patch).
    AdoptDataVolume {
        name: String,
        uid: String,
        patch: serde_json::Value,
    },
    /// POST a DataVolume built from a `dataVolumeTemplates` entry, in the VM's namespace.
    CreateDataVolume { data_volume: Box<DataVolume> },
    /// POST the start ControllerRevision.
    CreateControllerRevision { revision: Box<ControllerRevision> },
    /// DELETE a stale start ControllerRevision (or an upgraded instancetype one).
    DeleteControllerRevision { name: String },
    /// POST a ControllerRevision stashing an instancetype or preference
    /// (revision/store.go:278-320). On AlreadyExists, GET the existing one: success when it
    /// stashes the same spec, else "found existing ControllerRevision with unexpected data:
    /// NAME"; any other failure is "failed to create ControllerRevision: <err>".
    CreateInstancetypeRevision { revision: Box<ControllerRevision> },
}

impl VmAction {
    /// True for actions that talk to the API server (and so can fail).
    pub(crate) fn is_api_call(&self) -> bool {
        !matches!(
            self,
            VmAction::ExpectVmiCreations { .. }
                | VmAction::VmiCreationObserved { .. }
                | VmAction::ExpectVmiDeletions { .. }
                | VmAction::VmiDeletionObserved { .. }
                | VmAction::ExpectDataVolumeCreations { .. }
                | VmAction::DataVolumeCreationObserved { .. }
                | VmAction::RequeueAfter { .. }
                | VmAction::Event { .. }
        )
    }

    /// For a full-object VM write, where its resourceVersion comes from.
    pub(crate) fn resource_version_from(&self) -> Option<ResourceVersionFrom> {
        match self {
            VmAction::UpdateVm {
                resource_version_from,
                ..
            }
            | VmAction::UpdateVmStatus {
                resource_version_from,
                ..
            } => Some(*resource_version_from),
            _ => None,
        }
    }

    /// For a JSON patch of the VM (or its status), the patch: it carries no resourceVersion,
    /// so the VM it returns may hold changes the decision did not see (see
    /// [`super::returned`]).
    pub(crate) fn vm_patch(&self) -> Option<&serde_json::Value> {
        match self {
            VmAction::AddVmFinalizer { patch }
            | VmAction::RemoveVmFinalizer { patch }
            | VmAction::PatchVmFirmware { patch }
            | VmAction::AddStartRequest { patch }
            | VmAction::PatchVmInstancetypeRefs { patch } => Some(patch),
            _ => None,
        }
    }

    /// A short name for logs and the inspector (`CreateVmi`, `Event`, ...).
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            VmAction::ExpectVmiCreations { .. } => "ExpectVmiCreations",
            VmAction::VmiCreationObserved { .. } => "VmiCreationObserved",
            VmAction::ExpectVmiDeletions { .. } => "ExpectVmiDeletions",
            VmAction::VmiDeletionObserved { .. } => "VmiDeletionObserved",
            VmAction::ExpectDataVolumeCreations { .. } => "ExpectDataVolumeCreations",
            VmAction::DataVolumeCreationObserved { .. } => "DataVolumeCreationObserved",
            VmAction::RequeueAfter { .. } => "RequeueAfter",
            VmAction::Event { .. } => "Event",
            VmAction::UpdateVm { .. } => "UpdateVm",
            VmAction::AddVmFinalizer { .. } => "AddVmFinalizer",
            VmAction::RemoveVmFinalizer { .. } => "RemoveVmFinalizer",
            VmAction::PatchVmFirmware { .. } => "PatchVmFirmware",
            VmAction::AddStartRequest { .. } => "AddStartRequest",
            VmAction::PatchVmInstancetypeRefs { .. } => "PatchVmInstancetypeRefs",
            VmAction::UpdateVmStatus { .. } => "UpdateVmStatus",
            VmAction::CreateVmi { .. } => "CreateVmi",
            VmAction::DeleteVmi { .. } => "DeleteVmi",
            VmAction::PatchVmiGenerationAnnotation { .. } => "PatchVmiGenerationAnnotation",
            VmAction::PatchVmiMetadata { .. } => "PatchVmiMetadata",
            VmAction::PatchVmiSpec { .. } => "PatchVmiSpec",
            VmAction::AddVmiVolume { .. } => "AddVmiVolume",
            VmAction::RemoveVmiVolume { .. } => "RemoveVmiVolume",
            VmAction::RemoveVmiFinalizer { .. } => "RemoveVmiFinalizer",
            VmAction::AdoptVmi { .. } => "AdoptVmi",
            VmAction::ReleaseVmi { .. } => "ReleaseVmi",
            VmAction::PatchClaimAnnotations { .. } => "PatchClaimAnnotations",
            VmAction::AdoptDataVolume { .. } => "AdoptDataVolume",
            VmAction::CreateDataVolume { .. } => "CreateDataVolume",
            VmAction::CreateControllerRevision { .. } => "CreateControllerRevision",
            VmAction::DeleteControllerRevision { .. } => "DeleteControllerRevision",
            VmAction::CreateInstancetypeRevision { .. } => "CreateInstancetypeRevision",
        }
    }
}

/// An action plus the reason it is taken, citing the KubeVirt source line (for the inspector).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedAction {
    /// What to do.
    pub action: VmAction,
    /// Why, e.g. "runStrategy Always and no VMI: start it (vm.go:1026-1035)".
    pub why: String,
}

pub(crate) use crate::controller::common::{ApiFailure, ReconcileError, SyncError};

/// API failures observed so far in this sync, by action index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ApiFailures(pub BTreeMap<usize, ApiFailure>);

impl ApiFailures {
    /// No failures: every API call succeeds.
    pub(crate) fn none() -> Self {
        ApiFailures::default()
    }

    /// Record that the action at `index` failed.
    pub(crate) fn insert(&mut self, index: usize, error: ApiFailure) {
        self.0.insert(index, error);
    }

    /// The failure recorded for `index`.
    pub(crate) fn get(&self, index: usize) -> Option<&ApiFailure> {
        self.0.get(&index)
    }
}

/// How `Execute` ends for the key (vm.go:336-355).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncOutcome {
    /// `execute` returned nil: `Queue.Forget(key)`.
    Done,
    /// `execute` returned an error: `Queue.AddRateLimited(key)`. Its text is what KubeVirt logs.
    Error(ReconcileError),
}

/// The decision for one sync of one VM.
#[derive(Debug, Clone, PartialEq)]
pub struct VmDecision {
    /// What to do, in order.
    pub actions: Vec<PlannedAction>,
    /// The sync error `sync` produced (written as the `Failure` condition when the status update
    /// is reached).
    pub sync_error: Option<SyncError>,
    /// The VM status `updateStatus` computed, or `None` when the sync stopped before
    /// `updateStatus` (api-version annotation write, claim errors, run-strategy error, failed
    /// finalizer patches...). An `UpdateVmStatus` action is present only if it differs from the
    /// snapshot's status.
    pub status: Option<VirtualMachineStatus>,
    /// How the work-queue item ends.
    pub outcome: SyncOutcome,
    /// Human-readable trace of the decision, one line per step, with KubeVirt file:line.
    pub explanation: Vec<String>,
}

impl VmDecision {
    /// Kinds of the actions, in order.
    #[cfg(test)]
    pub(crate) fn action_kinds(&self) -> Vec<&'static str> {
        self.actions.iter().map(|a| a.action.kind()).collect()
    }
}
