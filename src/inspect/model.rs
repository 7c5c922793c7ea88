//! The `Inspection`: everything `inspect vm/NAME` knows about one VM, gathered first and rendered
//! later (the kdash/k9s pattern). `-o json|yaml` prints it as is, the terminal UI draws it panel by
//! panel, so the JSON field names below are a stable interface (docs/inspect.md documents each).
//!
//! Nothing here talks to a cluster: [`super::gather`] fills it from the API server and the
//! controller, [`super::analyze`] derives the verdicts (blockers, next decision, overhead check)
//! from the gathered objects with the controllers' own pure decision functions.
//!
//! Every piece that could not be had is recorded in [`Inspection::missing`] with its reason (no
//! VMI yet, RBAC forbidden, endpoint unreachable, stale Lease): never a blank, never a crash.

use crate::api::common::ObjectVersion;
use crate::config::ClusterSettings;
use crate::controller::cluster_config::SettingsSource;
use crate::controller::debug_state::DebugState;
use crate::launcher::overhead::OverheadTerm;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// One VM, inspected.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Inspection {
    /// When the gathering finished (the clock every age and "in 42 s" is relative to).
    pub generated_at: DateTime<Utc>,
    /// The VM's namespace.
    pub namespace: String,
    /// The VM's name.
    pub name: String,
    /// The VM, if it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmView>,
    /// The VMI of the same name, if it exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi: Option<VmiView>,
    /// The VMI's virt-launcher pods (label `kubevirt.io/created-by=<vmi uid>`), newest first.
    #[serde(default)]
    pub pods: Vec<PodView>,
    /// The node the VMI runs on or its pod is bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeView>,
    /// DataVolumes and PVCs the VM's volumes use.
    #[serde(default)]
    pub volumes: Vec<VolumeView>,
    /// The controller Lease and who holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseView>,
    /// Where the controller's view came from (our `/debug/state`, KubeVirt's metrics, nothing).
    pub controller: ControllerSource,
    /// The work queues (depth, retries of this key, whether this key is queued/in flight/waiting).
    #[serde(default)]
    pub queues: Vec<QueueView>,
    /// This VM's and VMI's expectations entries; empty when none are pending or not exposed
    /// (see [`ControllerSource::expectations_exposed`]).
    #[serde(default)]
    pub expectations: Vec<ExpectationView>,
    /// The leader's last reconcile of this key, per controller.
    #[serde(default)]
    pub last_reconciles: Vec<ReconcileView>,
    /// Is the controller caught up with this VM (generations, cache resourceVersions)?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caught_up: Option<CaughtUp>,
    /// Which printableStatus rule fired and on which inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status_reason: Option<PrintableStatusReason>,
    /// The formula vs the pod (memory overhead term by term, CPU request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_check: Option<OverheadCheck>,
    /// The same VM's overhead under another release's formula (`inspect --kubevirt-version`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubevirt_version_overhead: Option<VersionOverhead>,
    /// The settings the controller renders with against the KubeVirt CR's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<SettingsCheck>,
    /// What the VM and VMI controllers would do next on the gathered state, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_decision: Option<NextDecision>,
    /// What keeps the VM from running, deepest failure first.
    #[serde(default)]
    pub blockers: Vec<Blocker>,
    /// Events of the VM, VMI, pods and DataVolumes, merged, oldest first.
    #[serde(default)]
    pub events: Vec<EventView>,
    /// Whether the shadow agreed with the leader's last writes for this VM
    /// (`inspect --shadow FILE`, the file `shadow --verdicts FILE` publishes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowView>,
    /// Everything that could not be read or derived, with the reason.
    #[serde(default)]
    pub missing: Vec<Missing>,
}

/// What a running shadow (`shadow --verdicts FILE`) says about this VM: how the leader's last
/// writes compared with our decisions (docs/shadow.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ShadowView {
    /// The file read.
    pub source: String,
    /// When the shadow last wrote it (it does at least every 10 s while it runs).
    pub written_at: DateTime<Utc>,
    /// Seconds from `writtenAt` to `generatedAt`.
    pub age_seconds: f64,
    /// The file is older than 30 s: the shadow has probably stopped.
    pub stale: bool,
    /// When the shadow started comparing.
    pub since: DateTime<Utc>,
    /// The leader's writes for this VM the shadow compared.
    pub decisions: usize,
    /// Of those, how many our decisions wrote the same.
    pub agreed: usize,
    /// Whether every one of `last` agreed (absent: no write compared yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_agreed: Option<bool>,
    /// The last classified writes, oldest first.
    #[serde(default)]
    pub last: Vec<crate::shadow::LastVerdict>,
    /// The last write that did not agree, also when it is older than `last`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_difference: Option<crate::shadow::LastVerdict>,
    /// One line: "agreed with the leader's last 5 writes (12 of 12 since 10:00:00)".
    pub summary: String,
}

/// The VirtualMachine.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmView {
    /// `metadata.uid`, `metadata.resourceVersion`, `metadata.generation` (flattened: `uid`,
    /// `resourceVersion`, `generation`).
    #[serde(flatten)]
    pub object: ObjectVersion,
    /// The effective run strategy (`spec.runStrategy`, or derived from `spec.running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<String>,
    /// `status.printableStatus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    /// `status.observedGeneration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `status.desiredGeneration`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_generation: Option<i64>,
    /// `status.startFailure` (CrashLoopBackOff bookkeeping).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<StartFailureView>,
    /// `status.memoryDumpRequest` (a memory dump in progress or done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_dump: Option<MemoryDumpView>,
    /// `status.conditions`.
    #[serde(default)]
    pub conditions: Vec<ConditionView>,
    /// `metadata.creationTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<DateTime<Utc>>,
}

/// `status.memoryDumpRequest` of a VM (pkg/storage/memorydump/memorydump.go:116-197).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryDumpView {
    /// The claim the memory is dumped to.
    pub claim_name: String,
    /// `Associating`, `InProgress`, `Unmounting`, `Completed`, `Dissociating` or `Failed`.
    pub phase: String,
    /// The dump's file on the claim, once taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_name: Option<String>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `status.startFailure` of a VM.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartFailureView {
    /// `consecutiveFailCount`.
    pub consecutive_fail_count: i64,
    /// `retryAfterTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<DateTime<Utc>>,
    /// Seconds from [`Inspection::generated_at`] to `retry_after` (negative: passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_in_seconds: Option<f64>,
}

/// A status condition (VM, VMI or pod).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False`, `Unknown`.
    pub status: String,
    /// `reason`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `message`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// `lastTransitionTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<DateTime<Utc>>,
}

/// The VirtualMachineInstance.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiView {
    /// `metadata.uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `metadata.resourceVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// `status.phase` (empty string before the first phase).
    pub phase: String,
    /// `status.phaseTransitionTimestamps` with the time spent in each phase.
    #[serde(default)]
    pub phase_transitions: Vec<PhaseTransition>,
    /// `status.nodeName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `status.conditions`.
    #[serde(default)]
    pub conditions: Vec<ConditionView>,
    /// `status.memory.memoryOverhead` in bytes (VmiMemoryOverheadReport), if reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_memory_overhead_bytes: Option<i64>,
    /// `metadata.deletionTimestamp`, if being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<DateTime<Utc>>,
}

/// One entry of the phase timeline.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseTransition {
    /// The phase entered.
    pub phase: String,
    /// When it was entered.
    pub timestamp: DateTime<Utc>,
    /// Seconds spent in it: until the next transition, or until [`Inspection::generated_at`] for
    /// the current phase.
    pub duration_seconds: f64,
}

/// A virt-launcher pod.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodView {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `status.phase`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// `spec.nodeName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `spec.priorityClassName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    /// `status.conditions` (PodScheduled carries the scheduler's message).
    #[serde(default)]
    pub conditions: Vec<ConditionView>,
    /// The `compute` container's requests (resource name → quantity as written).
    #[serde(default)]
    pub compute_requests: BTreeMap<String, String>,
    /// The `compute` container's limits.
    #[serde(default)]
    pub compute_limits: BTreeMap<String, String>,
    /// Why the `compute` container is waiting (`ErrImagePull`, `CrashLoopBackOff`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_waiting_reason: Option<String>,
    /// The `compute` container's last termination reason (`OOMKilled`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_last_termination_reason: Option<String>,
    /// `metadata.creationTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<DateTime<Utc>>,
    /// `metadata.deletionTimestamp`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<DateTime<Utc>>,
}

/// The node of the VMI or its pod.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeView {
    /// `metadata.name`.
    pub name: String,
    /// The `Ready` condition's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// `status.allocatable` (resource name → quantity).
    #[serde(default)]
    pub allocatable: BTreeMap<String, String>,
    /// `spec.unschedulable`.
    #[serde(default)]
    pub unschedulable: bool,
}

/// A DataVolume or PersistentVolumeClaim a VM volume uses.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeView {
    /// `DataVolume` or `PersistentVolumeClaim`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The VM volume that refers to it.
    pub volume: String,
    /// `status.phase` (`Pending`, `Bound`, `Succeeded`, ...); `None` when the object is missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// DataVolume `Ready` condition status, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<String>,
    /// Whether the object exists.
    pub exists: bool,
    /// The VMI's `volumeStatus` phase of the volume (hotplug: `AttachedToNode`, `Ready`,
    /// `MemoryDumpInProgress`, `Detaching`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi_phase: Option<String>,
    /// The attachment pod that mounts a hotplugged volume on the VMI's node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachment_pod: Option<String>,
}

/// The controller Lease (coordination.k8s.io/v1).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseView {
    /// `namespace/name` of the Lease.
    pub lease: String,
    /// `spec.holderIdentity` (`None`: nobody holds it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder_identity: Option<String>,
    /// Who the holder is.
    pub holder_kind: HolderKind,
    /// `spec.renewTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<DateTime<Utc>>,
    /// `spec.acquireTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<DateTime<Utc>>,
    /// `spec.leaseDurationSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_duration_seconds: Option<i32>,
    /// `spec.leaseTransitions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_transitions: Option<i32>,
    /// Seconds since `renewTime`, at [`Inspection::generated_at`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_age_seconds: Option<f64>,
    /// `renewTime + leaseDurationSeconds` has passed: the holder is probably gone.
    pub stale: bool,
    /// Our leader's debug endpoint (annotation `virtctl-rs.kubevirt.io/debug-endpoint`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_endpoint: Option<String>,
}

/// Who holds the Lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum HolderKind {
    /// Nobody.
    #[default]
    None,
    /// A virtctl-rs `run-controller` (it annotated the Lease with its debug endpoint).
    VirtctlRs,
    /// KubeVirt's virt-controller (the holder is a pod of the Lease namespace).
    KubeVirt,
    /// Neither could be established.
    Unknown,
}

/// Where the controller's view came from.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerSource {
    /// How it was read.
    pub kind: ControllerSourceKind,
    /// The URL read (debug endpoint, or the pod proxy path of the metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Whether expectations could be read (KubeVirt's controller does not expose them).
    pub expectations_exposed: bool,
    /// The leader's `/debug/state?key=` document, as read (our controller only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_state: Option<DebugState>,
}

/// How the controller's view was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ControllerSourceKind {
    /// Our run-controller's `/debug/state?key=`.
    DebugEndpoint,
    /// KubeVirt's virt-controller's Prometheus metrics through the API server's pod proxy.
    Metrics,
    /// Nothing could be read (see [`Inspection::missing`]).
    #[default]
    Unavailable,
}

/// One work queue as the leader sees it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct QueueView {
    /// `virt-controller-vm` or `virt-controller-vmi`.
    pub name: String,
    /// Keys waiting for a worker (`kubevirt_workqueue_depth`).
    pub depth: u64,
    /// Our debug endpoint: this key's requeue count; KubeVirt's metrics: the queue's
    /// `kubevirt_workqueue_retries_total`.
    pub retries: u64,
    /// Accepted adds since the queue was made (`kubevirt_workqueue_adds_total`; our debug
    /// endpoint's `addsTotal`); absent when the source does not say. The inspector's history
    /// turns it into adds a second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub adds_total: Option<u64>,
    /// `kubevirt_workqueue_longest_running_processor_seconds` (metrics source only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_running_processor_seconds: Option<f64>,
    /// Where this key is in the queue (debug endpoint only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_state: Option<KeyState>,
    /// Seconds this key has been in [`QueueView::key_state`] (queued/in flight), or until it is
    /// ready (waiting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_seconds: Option<f64>,
    /// How long a key that fails now waits for the limit all the queue's keys share (client-go's
    /// token bucket: 10 retries a second after a burst of 100), whatever its own backoff (debug
    /// endpoint only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limiter_wait_seconds: Option<f64>,
}

/// Where a key is in a work queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum KeyState {
    /// Not in the queue.
    #[default]
    Idle,
    /// Waiting for a worker.
    Queued,
    /// A worker is reconciling it.
    InFlight,
    /// Parked by `AddAfter`/`AddRateLimited` until a ready time.
    Waiting,
}

/// One expectations entry of this VM/VMI.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpectationView {
    /// The store (`vm-vmi`, `vm-datavolume`, `vmi-pod`, `vmi-self`).
    pub store: String,
    /// Controller key `namespace/name`.
    pub key: String,
    /// Creations still expected.
    pub adds: i64,
    /// Deletions still expected.
    pub dels: i64,
    /// Seconds since the entry was set.
    pub age_seconds: f64,
    /// Seconds until it expires (5 min after it was set; 0 when expired).
    pub expires_in_seconds: f64,
    /// What `SatisfiedExpectations` answers (fulfilled or expired).
    pub satisfied: bool,
    /// Deletion keys still expected (UID-tracking stores).
    #[serde(default)]
    pub expected_deletions: Vec<String>,
}

/// The leader's last reconcile of this key.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileView {
    /// `vm` or `vmi`.
    pub controller: String,
    /// When it finished.
    pub at: DateTime<Utc>,
    /// `ok` or `error`.
    pub result: String,
    /// The error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The actions applied.
    #[serde(default)]
    pub actions: Vec<String>,
}

/// Is the controller caught up with this VM?
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CaughtUp {
    /// `metadata.generation == status.observedGeneration`.
    pub generation_observed: bool,
    /// The leader's cached VM resourceVersion equals the server's (debug endpoint only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_cache_current: Option<bool>,
    /// The leader's cached VMI resourceVersion equals the server's (debug endpoint only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi_cache_current: Option<bool>,
    /// When the generation is not observed: the template fields that differ between the VMI's
    /// start ControllerRevision and the VM (what keeps `observedGeneration` behind).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template_changes: Vec<FieldChange>,
    /// One line for humans.
    pub summary: String,
}

/// Why the VM shows its printableStatus.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrintableStatusReason {
    /// The status the rules give on the gathered state.
    pub computed: String,
    /// The status stored on the VM (they differ when the controller is behind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<String>,
    /// The rule that fired, with KubeVirt's source line.
    pub rule: String,
    /// The inputs the rules read (run strategy, VMI phase, pod conditions, volume phases, ...).
    #[serde(default)]
    pub inputs: BTreeMap<String, String>,
}

/// The cluster settings the leader renders with against the cluster's KubeVirt CR: a pod the
/// leader renders with other settings than the CR's differs from the overhead check's formula.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SettingsCheck {
    /// The KubeVirt CR's settings as read now (KubeVirt's defaults when there is none); what
    /// the overhead check uses.
    pub cluster: ClusterSettings,
    /// The leader's settings, from its `/debug/state` (our controller only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller: Option<ClusterSettings>,
    /// Where the leader's settings came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_source: Option<SettingsSource>,
    /// The KubeVirt CR resourceVersion the leader's settings come from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_resource_version: Option<String>,
    /// When the leader loaded them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_loaded_at: Option<DateTime<Utc>>,
    /// The CR version the leader refused, and why (it keeps its last good settings).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controller_refused: Option<String>,
    /// Each CR setting where the leader's differ: `memoryOvercommit: controller 100, KubeVirt
    /// CR 150`. Empty when they agree or the leader's are unknown.
    #[serde(default)]
    pub differences: Vec<String>,
}

impl SettingsCheck {
    /// Where the leader's settings come from, for a line (`KubeVirt CR resourceVersion 812`,
    /// `fixed at start`, `KubeVirt's defaults`); `None` when the leader's are unknown.
    pub(crate) fn controller_origin(&self) -> Option<String> {
        self.controller.as_ref()?;
        Some(
            match (&self.controller_resource_version, self.controller_source) {
                (Some(rv), _) => format!("KubeVirt CR resourceVersion {rv}"),
                (None, Some(SettingsSource::Fixed)) => "fixed at start".to_string(),
                (None, _) => "KubeVirt's defaults".to_string(),
            },
        )
    }
}

/// The overhead formula against the pod.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverheadCheck {
    /// The formula's total overhead, bytes.
    pub formula_bytes: i64,
    /// The overhead terms in KubeVirt's order.
    pub terms: Vec<OverheadTerm>,
    /// The `compute` memory request KubeVirt would render, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula_request_bytes: Option<i64>,
    /// The pod's `compute` memory request, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_request_bytes: Option<i64>,
    /// The `compute` memory limit KubeVirt would render, bytes (none unless the VMI has one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula_limit_bytes: Option<i64>,
    /// The pod's `compute` memory limit, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_limit_bytes: Option<i64>,
    /// The guest's memory, bytes: `spec.domain.memory.guest` after virt-api's defaults (which set
    /// it from the memory request or limit, defaults.rs), else the memory request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_memory_bytes: Option<i64>,
    /// The pod's `kubevirt.io/memory-overhead-bytes` annotation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotation_bytes: Option<i64>,
    /// The VMI's `status.memory.memoryOverhead`, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_bytes: Option<i64>,
    /// Every value present agrees with the formula.
    #[serde(rename = "match")]
    pub matches: bool,
    /// Each disagreement, e.g. "pod request is 1048576 bytes more than the formula".
    #[serde(default)]
    pub differences: Vec<String>,
    /// The CPU check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<CpuCheck>,
}

/// The overhead another KubeVirt release's formula gives the same VM with the same settings
/// (`inspect --kubevirt-version`; the releases are [`crate::kubevirt_version`]'s).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VersionOverhead {
    /// The release, e.g. `v1.4.1`.
    pub kubevirt_version: crate::kubevirt_version::KubeVirtVersion,
    /// Its formula's total overhead, bytes.
    pub formula_bytes: i64,
    /// Its overhead terms in KubeVirt's order.
    pub terms: Vec<OverheadTerm>,
    /// The `compute` memory request it would render, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula_request_bytes: Option<i64>,
}

impl VersionOverhead {
    /// `under v1.4.1: overhead −32 Mi = 1288 Mi, request 3336 Mi`: this release's overhead
    /// against `now_bytes`, the current formula's, and the request it would render.
    pub(crate) fn comparison(&self, now_bytes: i64) -> String {
        let mi = |b: i64| {
            let v = b as f64 / 1_048_576.0;
            if b % 1_048_576 == 0 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        };
        let delta = self.formula_bytes - now_bytes;
        let sign = if delta < 0 { "−" } else { "+" };
        let request = self
            .formula_request_bytes
            .map_or_else(|| "-".to_string(), |b| format!("{} Mi", mi(b)));
        format!(
            "under {}: overhead {sign}{} Mi = {} Mi, request {request}",
            self.kubevirt_version,
            mi(delta.abs()),
            mi(self.formula_bytes)
        )
    }
}

/// CPU request vs vCPUs ÷ cpuAllocationRatio.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CpuCheck {
    /// vCPUs of the VMI.
    pub vcpus: i64,
    /// The cluster's `cpuAllocationRatio`.
    pub allocation_ratio: i64,
    /// The CPU request KubeVirt would render (millicores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub formula_request_millis: Option<i64>,
    /// The pod's `compute` CPU request (millicores).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_request_millis: Option<i64>,
    /// They agree.
    #[serde(rename = "match")]
    pub matches: bool,
}

/// What the controllers would do next.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NextDecision {
    /// One line, e.g. "VMI Running: the Always branch does nothing (vm.go:979)".
    pub summary: String,
    /// The planned actions of both controllers, in order.
    #[serde(default)]
    pub actions: Vec<PlannedActionView>,
    /// Why: the decision's explanation lines with KubeVirt source lines.
    #[serde(default)]
    pub explanation: Vec<String>,
    /// A wait the controller is in (expectations pending, backoff), with how long is left.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<String>,
    /// Set when the leader's last reconcile disagrees with this decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disagreement: Option<String>,
}

/// One planned action.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedActionView {
    /// `vm` or `vmi`.
    pub controller: String,
    /// The action's kind (`CreateVmi`, `DeletePod`, `UpdateVmStatus`, ...).
    pub kind: String,
    /// Why, with the KubeVirt source line.
    pub why: String,
}

/// Something that keeps the VM from running.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    /// The object at fault, `Kind/name`.
    pub object: String,
    /// A short reason (`Unschedulable`, `PriorityClassNotFound`, `DataVolumePending`, ...).
    pub reason: String,
    /// The message, as the cluster gave it or as derived.
    pub message: String,
    /// Depth in the chain VM(0) → VMI(1) → pod(2) → volume(3) → node(4); sorted deepest first.
    pub depth: u8,
    /// What would clear it, when one command does (`kubectl label namespace …`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventView {
    /// Last (or only) occurrence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<DateTime<Utc>>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `reason`.
    pub reason: String,
    /// `Kind/name` of the object it is about.
    pub object: String,
    /// `message` / `note`.
    pub message: String,
    /// Occurrences (series count), 1 when not counted.
    pub count: i32,
    /// `core/v1` or `events.k8s.io/v1`.
    pub api: String,
}

/// A piece that could not be had.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Missing {
    /// What (`vmi`, `pods`, `lease`, `debugState`, `kubevirt`, `events`, ...).
    pub what: String,
    /// Why (not found, forbidden, unreachable, stale Lease, ...).
    pub reason: String,
}

/// `inspect` with no name: every VM in scope, problems first.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fleet {
    /// When the gathering finished.
    pub generated_at: DateTime<Utc>,
    /// The namespace in scope, `None` for all namespaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The controller Lease and who holds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<LeaseView>,
    /// Where the controller's view came from.
    pub controller: ControllerSource,
    /// The work queues (depth and the queue-wide retries).
    #[serde(default)]
    pub queues: Vec<QueueView>,
    /// One row per VM, problems first, then by namespace/name.
    pub rows: Vec<FleetRow>,
    /// Everything that could not be read, with the reason.
    #[serde(default)]
    pub missing: Vec<Missing>,
}

/// One VM of the fleet view.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetRow {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `status.printableStatus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<String>,
    /// The VMI's phase, if a VMI exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi_phase: Option<String>,
    /// Seconds in that phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_seconds: Option<f64>,
    /// Requeues after failures (VM and VMI queues together).
    pub retries: u64,
    /// Pending (unsatisfied) expectations entries.
    pub pending_expectations: u64,
    /// Overhead check: `Some(true)` MATCH, `Some(false)` differs, `None` no pod to check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_match: Option<bool>,
    /// Pod request − formula request, bytes, when they differ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead_difference_bytes: Option<i64>,
    /// The launcher pod's `compute` memory request, bytes (the fleet view's headroom bar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_request_bytes: Option<i64>,
    /// The launcher pod's `compute` memory limit, bytes, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit_bytes: Option<i64>,
    /// The first problem found (a Failure condition, a blocker, a reconcile error), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// One changed field.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldChange {
    /// Dotted path (`spec.template.spec.domain.memory.guest`).
    pub path: String,
    /// The value before (absent: not set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<Value>,
    /// The value after (absent: removed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<Value>,
}

/// `4 m 57 s`, `42 s`, `1 h 3 m`.
pub(crate) fn human_duration(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as i64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} m {} s", s / 60, s % 60),
        _ => format!("{} h {} m", s / 3600, (s % 3600) / 60),
    }
}
