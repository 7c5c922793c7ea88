//! KubeVirt v1.9's VirtualMachine controller (pkg/virt-controller/watch/vm/vm.go) as a pure
//! decision.
//!
//! One sync of one VM is [`decide`]: a [`VmSnapshot`] (the VM, the same-named VMI, DataVolumes,
//! PVCs, start ControllerRevisions, expectation counters, "now", a pre-drawn random number and
//! the cluster configuration) goes in; a [`VmDecision`] comes out — the ordered [`VmAction`]s
//! KubeVirt would perform (each with a `why` citing vm.go), the sync error, the status
//! `updateStatus` computes, and how the work-queue item ends. Nothing here talks to an API
//! server, reads a clock or draws random numbers, so the same function drives the controller's
//! executor and lets the inspector explain what the controller would do next.
//!
//! API failures are replayed, not guessed: the executor applies the actions in order and, when
//! one fails, calls [`decide_with_failures`] with the failures so far to learn what KubeVirt does
//! after that error (see [`action`] for the contract).
//!
//! Modelled: expectations gate; api-version annotations; VMI/DataVolume claiming (adoption);
//! deletion (stop VMI, remove or keep finalizers, orphan); the VM finalizer; run-strategy folding
//! (both `running` and `runStrategy` set → the sync stops with "running and runstrategy are
//! mutually exclusive" and, as in KubeVirt, no status is written); `syncRunStrategy` for Always,
//! RerunOnFailure, Manual, Halted, Once (and the VMI-side checks of WaitAsReceiver); state change
//! requests and their trimming; start-failure backoff and `status.startFailure`; `startVMI`
//! (`SetupVMIFromVM`, default disks, default pod network, input device, firmware UUID, start
//! revision, generation annotation, finalizer); `stopVMI`; generation tracking; RestartRequired;
//! the firmware UUID synchronizer; dynamic label/annotation sync; PCI topology annotations;
//! DataVolume templates; instancetypes and preferences (`engine/instancetype.rs` over
//! [`crate::instancetype`], the `Reference` policy); `updateStatus` with conditions and `printableStatus` (all 16 rules);
//! the snapshot controller's `volumeSnapshotStatuses` ([`volume_snapshot`]), written with the status;
//! live updates ([`live_update`]), interface hotplug/unplug and NAD references ([`net_sync`]),
//! declarative volume hotplug ([`volume_hotplug`]) and memory dumps ([`memory_dump`]).
//!
//! Not modelled — refused with a `Failure` condition where ignoring would be wrong (see
//! [`unsupported`]): WaitAsReceiver VMI creation, the legacy
//! `status.volumeRequests` volume hotplug, volume migration, DataSource/clone DataVolumes. Silently not modelled: changed-block tracking, volume-migration status
//! (`syncVolumeMigration`), network validation of the new VMI (virt-api does it on create).

pub(crate) mod action;
pub(crate) mod backoff;
pub(crate) mod claim;
pub(crate) mod conditions;
pub(crate) mod datavolume;
mod engine;
pub(crate) mod error;
pub mod executor;
pub(crate) mod firmware;
pub(crate) mod flight;
pub(crate) mod generation;
pub(crate) mod go_encoding;
pub(crate) mod live_update;
pub(crate) mod memory_dump;
pub(crate) mod metadata_sync;
pub(crate) mod net_sync;
pub(crate) mod patches;
pub(crate) mod printable;
pub(crate) mod reasons;
pub(crate) mod restart_required;
pub(crate) mod returned;
pub mod revision;
pub(crate) mod run_strategy;
pub mod setup_vmi;
pub(crate) mod snapshot;
pub(crate) mod status;
pub(crate) mod unsupported;
pub(crate) mod volume_hotplug;
pub(crate) mod volume_requests;
pub(crate) mod volume_snapshot;

#[cfg(test)]
mod tests;

/// The VMI spec of a VM's template, for tests that edit it in place.
#[cfg(test)]
pub(crate) fn template_spec_mut(
    vm: &mut crate::api::vm::VirtualMachine,
) -> &mut crate::api::vmi::VirtualMachineInstanceSpec {
    vm.spec
        .template
        .as_mut()
        .and_then(|t| t.spec.as_mut())
        .expect("the VM has spec.template.spec")
}

pub use action::{
    ApiFailures, EventType, PlannedAction, ResourceVersionFrom, SyncOutcome, VmAction, VmDecision,
    VmUpdatePurpose,
};
pub(crate) use engine::{decide, decide_with_failures};
pub use error::VmSyncError;
pub use printable::PrintableStatus;
pub(crate) use setup_vmi::setup_vmi_from_vm;
pub use snapshot::{ExpectationCounts, ExpectationsView, PvcInfo, VmControllerConfig, VmSnapshot};

/// The work-queue name (`virt-controller-vm`, vm.go:153-156), also the `name` label of the
/// work-queue metrics.
pub const QUEUE_NAME: &str = "virt-controller-vm";

/// Default number of VM controller workers (`--vm-threads`, application.go:125-128).
pub const WORKERS: usize = 3;
