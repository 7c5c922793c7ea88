//! The VM controller's executor: build a [`VmSnapshot`] from the caches, run the pure decision,
//! apply its actions through the API, and replay the decision with the failures it met (the
//! contract in [`super::action`]).
//!
//! KubeVirt: `Execute`/`execute` (pkg/virt-controller/watch/vm/vm.go:336-458).
//!
//! Not watched, so not in the snapshot: PersistentVolumeClaims (the `WaitingForVolumeBinding`
//! printable status needs them; it is never shown).

use super::action::{ApiFailure, ApiFailures, ResourceVersionFrom, SyncOutcome, VmAction};
use super::decide_with_failures;
use super::revision::{VM_INDEX, in_vm_index};
use super::snapshot::{
    ExpectationCounts, ExpectationsView, PvcInfo, VmControllerConfig, VmSnapshot,
};
use crate::api::key::split_key;
use crate::api::{DataVolume, VirtualMachine, VirtualMachineInstance};
use crate::controller::common::ReconcileError;
use crate::controller::common::protocol::{ActionRun, AfterFailure};
use crate::controller::context::{Context, object_ref};
use crate::controller::manager::reconciler;
use crate::runtime::apicall::{
    api, create_unread, json_patch, json_patch_unread, put_unread, replace,
};
use crate::runtime::expectations::UidTrackingControllerExpectations;
use crate::runtime::queue::Requeue;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

reconciler!(
    /// The VM controller as a [`Reconciler`](crate::controller::manager::Reconciler) for
    /// the manager.
    VmReconciler ("virtualmachine") => reconcile
);

fn counts(store: &UidTrackingControllerExpectations, key: &str) -> Option<ExpectationCounts> {
    let (adds, dels) = store.get_expectations(key)?;
    let fulfilled = adds <= 0 && dels <= 0;
    Some(ExpectationCounts {
        adds,
        dels,
        expired: !fulfilled && store.satisfied_expectations(key),
    })
}

fn get<K>(store: &crate::runtime::store::Store<K>, ns: &str, name: &str) -> Option<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .get(&ObjectRef::new(name).within(ns))
        .map(|o| (*o).clone())
}

/// Build the snapshot for `key` from the caches, or `None` when the VM is not cached.
pub(crate) fn snapshot(ctx: &Context, key: &str) -> Option<VmSnapshot> {
    let (ns, name) = split_key(key);
    let cached = ctx
        .caches
        .vms
        .store()
        .get(&ObjectRef::new(name).within(ns))?;
    // The VM our last write returned while the cache has not caught up with it: KubeVirt's
    // sync goes on with the VM each write returns (vm.go:3250-3255, 3379-3387); across syncs
    // the mutation cache carries it (not in KubeVirt, whose next sync of a key may start from
    // the older cached copy and lose its status write to a 409; issue 38 item 7).
    let vm = ctx.vm_mutations.newer(key, cached);
    let vmi = ctx
        .caches
        .vmis
        .store()
        .get(&ObjectRef::new(name).within(ns));
    let expectations = ExpectationsView {
        vmi: counts(&ctx.expectations.vmi, key),
        data_volumes: counts(&ctx.expectations.data_volume, key),
    };
    // The candidates `vm_revisions` keeps: the VM's `vm` index entries and the revision the
    // VMI names, not every cached revision.
    let mut revisions = match vm.metadata.uid.as_deref() {
        Some(uid) => ctx.caches.revisions.by_index(&VM_INDEX, uid),
        None => Vec::new(),
    };
    if let Some(named) = vmi
        .as_ref()
        .and_then(|v| v.status.as_ref())
        .and_then(|s| s.virtual_machine_revision_name.as_deref())
        .and_then(|n| {
            ctx.caches
                .revisions
                .store()
                .get(&ObjectRef::new(n).within(ns))
        })
        && !revisions
            .iter()
            .any(|r| r.metadata.name == named.metadata.name)
    {
        revisions.push(named);
    }
    let mut snap = snapshot_from_objects(
        vm,
        vmi,
        |dv| get::<DataVolume>(ctx.caches.data_volumes.store(), ns, dv),
        revisions,
        expectations,
        &ctx.cluster_config.settings(),
        chrono::Utc::now(),
    );
    snap.pvcs = template_pvcs(&snap.vm, |claim| {
        get::<PersistentVolumeClaim>(ctx.caches.pvcs.store(), ns, claim)
    });
    if super::volume_snapshot::vm_needs_backend_storage(&snap.vm) {
        let claims = ctx.caches.pvcs.store().state();
        snap.backend_claim =
            super::volume_snapshot::find_backend_claim(&snap.vm, claims.iter().map(|c| &**c));
        if let Some(Ok(claim)) = &snap.backend_claim
            && let Some(c) = claims.iter().find(|c| {
                c.metadata.name.as_ref() == Some(claim)
                    && c.metadata.namespace.as_deref() == Some(ns)
            })
        {
            snap.pvcs.insert(claim.clone(), PvcInfo::of(c));
        }
    }
    snap.instancetypes = instancetype_objects(&ctx.caches, &snap.vm);
    snap.storage = Some(Arc::new(ctx.caches.storage.view()));
    snap.backoff_jitter = rand::random::<f64>();
    Some(snap)
}

/// The claims of the VM's template volumes found by `pvc`, as the printableStatus rules read
/// them ([`VmSnapshot::pvcs`]; KubeVirt's VM controller reads its PVC cache,
/// vm.go:2596-2603, and `handleDataVolumes` the claims of its templates, vm.go:524-528): the
/// claim of each `dataVolume` (same name), `persistentVolumeClaim` and `memoryDump` volume and
/// of each `dataVolumeTemplates` entry; and the claim of `status.memoryDumpRequest`, whose
/// annotation the memory dump writes (memorydump.go:264-274).
pub(crate) fn template_pvcs(
    vm: &VirtualMachine,
    pvc: impl Fn(&str) -> Option<PersistentVolumeClaim>,
) -> BTreeMap<String, PvcInfo> {
    let mut out = BTreeMap::new();
    let claims = super::printable::template_claim_names(vm)
        .chain(
            super::datavolume::template_names(vm)
                .into_iter()
                .filter(|n| !n.is_empty()),
        )
        .chain(super::memory_dump::requested_claim(vm));
    for claim in claims {
        if let Some(p) = pvc(&claim) {
            out.insert(claim, PvcInfo::of(&p));
        }
    }
    out
}

/// The instancetypes and preferences `vm` names, from the instancetype informer stores.
fn instancetype_objects(
    caches: &crate::controller::context::Caches,
    vm: &VirtualMachine,
) -> crate::instancetype::Objects {
    let ns = vm.metadata.namespace.as_deref().unwrap_or("");
    let mut objects = crate::instancetype::Objects::default();
    for (resource, name) in crate::instancetype::Objects::wanted(vm) {
        if let Some(object) = caches.instancetypes.get(resource, ns, &name) {
            objects.0.insert((resource, name), object);
        }
    }
    objects
}

/// The DataVolume names a VM sync reads ([`VmSnapshot::data_volumes`]): the
/// `spec.dataVolumeTemplates` names, then the template volumes' `dataVolume.name`.
pub(crate) fn snapshot_data_volume_names(vm: &VirtualMachine) -> Vec<String> {
    vm.spec
        .data_volume_templates
        .iter()
        .flatten()
        .filter_map(|t| {
            t.pointer("/metadata/name")
                .and_then(|n| n.as_str())
                .map(str::to_string)
        })
        .chain(
            vm.template_volumes()
                .iter()
                .filter_map(|v| v.data_volume.as_ref().and_then(|d| d.name.clone())),
        )
        .collect()
}

/// Build a [`VmSnapshot`] from objects already read: the executor's caches, or the inspector's
/// GETs. `data_volume` looks a DataVolume of the VM's namespace up by name; `revisions` are
/// candidate ControllerRevisions (filtered here as [`vm_revisions`] does). The jitter is 0.
pub(crate) fn snapshot_from_objects(
    vm: impl Into<Arc<VirtualMachine>>,
    vmi: Option<Arc<VirtualMachineInstance>>,
    data_volume: impl Fn(&str) -> Option<DataVolume>,
    revisions: impl IntoIterator<Item = Arc<ControllerRevision>>,
    expectations: ExpectationsView,
    settings: &crate::config::ClusterSettings,
    now: chrono::DateTime<chrono::Utc>,
) -> VmSnapshot {
    let vm = vm.into();
    let ns = vm.metadata.namespace.clone().unwrap_or_default();
    let mut snap = VmSnapshot::new(vm, now);
    snap.vmi = vmi;
    snap.data_volumes = snapshot_data_volume_names(&snap.vm)
        .iter()
        .filter_map(|dv| data_volume(dv))
        .collect();
    let vmi_revision = snap
        .vmi
        .as_ref()
        .and_then(|v| v.status.as_ref())
        .and_then(|s| s.virtual_machine_revision_name.clone());
    snap.revisions = vm_revisions(
        snap.vm.metadata.uid.as_deref().unwrap_or(""),
        &ns,
        vmi_revision.as_deref(),
        revisions,
    );
    snap.expectations = expectations;
    snap.config = VmControllerConfig {
        default_network_interface: settings.default_network_interface.clone(),
        permit_bridge_interface_on_pod_network: settings.permit_bridge_interface_on_pod_network,
        rollout_strategy_live_update: settings.vm_rollout_strategy_live_update,
        cpu_allocation_ratio: settings.cpu_allocation_ratio,
        declarative_hotplug_volumes: settings.gate_enabled("DeclarativeHotplugVolumes", true)
            && !settings.gate_enabled("HotplugVolumes", false),
        rules: settings.kubevirt_version.controller_rules(),
        reference_policy: settings.instancetype_reference_policy,
        expand_defaults: (settings.admission(), settings.spec_defaults.clone()),
        ..Default::default()
    };
    snap
}

/// The ControllerRevisions of namespace `ns` a VM sync may read ([`VmSnapshot::revisions`]):
/// those in the `vm` index under `vm_uid` and the one named `vmi_revision` (the VMI's
/// `status.virtualMachineRevisionName`). Only these are kept (shared with the cache): copying
/// every revision of the namespace made each VM reconcile O(number of VMs).
pub(crate) fn vm_revisions(
    vm_uid: &str,
    ns: &str,
    vmi_revision: Option<&str>,
    all: impl IntoIterator<Item = Arc<ControllerRevision>>,
) -> Vec<Arc<ControllerRevision>> {
    all.into_iter()
        .filter(|r| r.metadata.namespace.as_deref() == Some(ns))
        .filter(|r| {
            (!vm_uid.is_empty() && in_vm_index(r, vm_uid))
                || (vmi_revision.is_some() && r.metadata.name.as_deref() == vmi_revision)
        })
        .collect()
}

/// What a VM whose VMI was not in the cache when its snapshot was taken knows of that absence.
#[derive(Debug, PartialEq)]
enum VmiAbsence {
    /// Nothing says otherwise: act on it.
    Sure,
    /// The VMI is cached again since the snapshot (its mark, if it had one, cleared): the
    /// snapshot is behind, and the VMI's event queued the key again.
    SnapshotBehind,
    /// The VMI left the cache in a relist ([`crate::controller::context::UnverifiedAbsences`]):
    /// ask the server.
    Unverified,
}

/// [`VmiAbsence`] of `key`'s VMI from its relist mark and the cache as they are now.
fn vmi_absence(
    marks: &crate::controller::context::UnverifiedAbsences,
    vmis: &crate::runtime::store::Store<VirtualMachineInstance>,
    key: &str,
) -> VmiAbsence {
    let (ns, name) = split_key(key);
    if marks.contains(key) {
        VmiAbsence::Unverified
    } else if vmis.get(&ObjectRef::new(name).within(ns)).is_some() {
        VmiAbsence::SnapshotBehind
    } else {
        VmiAbsence::Sure
    }
}

/// Whether a VM whose VMI was not in the cache when its snapshot was taken may act on that
/// absence ([`vmi_absence`]): an unverified one is checked on the server, and an existing VMI
/// means the cache is behind (no sync until it catches up). Not in KubeVirt (issue 38 item 1).
async fn vmi_absence_confirmed(ctx: &Context, key: &str) -> Result<bool, ReconcileError> {
    let marks = &ctx.expectations.vmi_relisted_away;
    match vmi_absence(marks, ctx.caches.vmis.store(), key) {
        VmiAbsence::Sure => return Ok(true),
        VmiAbsence::SnapshotBehind => return Ok(false),
        VmiAbsence::Unverified => {}
    }
    let (ns, name) = split_key(key);
    match api::<VirtualMachineInstance>(&ctx.client, ns)
        .get_metadata_opt(name)
        .await
    {
        Ok(None) => {
            marks.clear(key);
            Ok(true)
        }
        Ok(Some(_)) => {
            tracing::debug!(
                key,
                "the VMI left the cache in a relist but exists; waiting for the watch"
            );
            Ok(false)
        }
        Err(e) => Err(ReconcileError::api(
            "get",
            "virtualmachineinstances",
            key,
            ApiFailure::from(&e),
        )),
    }
}

/// Reconcile one VM key: snapshot, decide, apply, replay failures.
pub async fn reconcile(ctx: &Context, key: &str) -> Result<Requeue, ReconcileError> {
    let started = Instant::now();
    let Some(snap) = snapshot(ctx, key) else {
        // vm.go:362-366: the VM is gone.
        ctx.forget_gone("vm", key);
        return Ok(Requeue::NONE);
    };
    let (ns, _) = split_key(key);
    if snap.vmi.is_none() && !vmi_absence_confirmed(ctx, key).await? {
        // The watch brings the VMI back (and requeues the key); the requeue is a fallback.
        return Ok(Requeue::after(Duration::from_secs(1)));
    }
    let mut failures = ApiFailures::none();
    let mut decision = decide_with_failures(&snap, &failures);
    let decided = ctx.flight.as_ref().map(|_| decision.actions.clone());
    let mut returned_vms: std::collections::BTreeMap<usize, VirtualMachine> = Default::default();
    let mut requeue_after: Option<Duration> = None;
    // The VM as the server holds it after the last write whose answer matched the decision's
    // prediction, and the first write whose answer did not (super::returned).
    let mut server_vm = snap.vm.clone();
    let mut foreign: Option<(usize, String)> = None;
    let mut run = ActionRun::new(std::mem::take(&mut decision.actions));
    while let Some((i, planned)) = run.next() {
        let action = &planned.action;
        let kind = action.kind();
        let result = match (action.resource_version_from(), &foreign) {
            (Some(ResourceVersionFrom::Action(k)), Some((first, change))) if k >= *first => {
                Err(changed_since_cache_copy(key, change))
            }
            _ => apply(ctx, ns, &snap, action, &returned_vms, &mut requeue_after).await,
        };
        match result {
            Ok(returned) => {
                if let Some(vm) = returned {
                    ctx.vm_mutations.mutation(key, Arc::new(vm.clone()));
                    match action.vm_patch() {
                        Some(patch) if foreign.is_none() => {
                            match super::returned::foreign_change(&server_vm, patch, &vm) {
                                None => server_vm = Arc::new(vm.clone()),
                                Some(change) => {
                                    tracing::debug!(key, %change, "VM changed since the cache copy");
                                    foreign = Some((i, change));
                                }
                            }
                        }
                        Some(_) => {}
                        None => server_vm = Arc::new(vm.clone()),
                    }
                    returned_vms.insert(i, vm);
                }
                if action.is_api_call() {
                    super::flight::write(ctx, key, kind, Ok(returned_vms.get(&i)));
                }
                run.succeeded(kind.to_string());
            }
            Err(e) => run.failed(kind.to_string(), e, |i, e| {
                super::flight::write(ctx, key, kind, Err(&e.message));
                tracing::debug!(key, action = kind, error = %e.message, "VM action failed");
                failures.insert(i, e.clone());
                decision = decide_with_failures(&snap, &failures);
                AfterFailure::Continue(std::mem::take(&mut decision.actions))
            }),
        }
    }
    let applied = run.finish().lines;
    let error = match decision.outcome {
        SyncOutcome::Done => None,
        SyncOutcome::Error(e) => Some(e),
    };
    if let Some(decided) = &decided {
        let text = error.as_ref().map(ToString::to_string);
        super::flight::reconcile(ctx, key, &snap, decided, &applied, text.as_ref());
    }
    ctx.reconciles
        .finish("vm", key, started, error.as_ref(), requeue_after, applied);
    match error {
        None => Ok(requeue_after.map_or(Requeue::NONE, Requeue::after)),
        Some(e) => Err(e),
    }
}

/// The local Conflict for a full-object write that would put the decision's stale view over a
/// change another writer made after the cache copy (see [`super::returned`]).
fn changed_since_cache_copy(key: &str, change: &str) -> ApiFailure {
    ApiFailure::new(
        409,
        "Conflict",
        format!(
            "Operation cannot be fulfilled on virtualmachines.kubevirt.io \"{key}\": the object \
             has been modified since the cache copy this sync started from ({change} changed); \
             not writing over it, retrying with the newer object"
        ),
    )
}

/// The VM with `resourceVersion` taken from the named source.
fn with_resource_version(
    mut vm: VirtualMachine,
    from: ResourceVersionFrom,
    snap: &VmSnapshot,
    returned: &std::collections::BTreeMap<usize, VirtualMachine>,
) -> VirtualMachine {
    vm.metadata.resource_version = match from {
        ResourceVersionFrom::Snapshot => snap.vm.metadata.resource_version.clone(),
        ResourceVersionFrom::Action(i) => returned
            .get(&i)
            .and_then(|v| v.metadata.resource_version.clone())
            .or_else(|| snap.vm.metadata.resource_version.clone()),
    };
    vm
}

/// Apply one action. API writes on the VM return the VM the server answered with.
/// The bookkeeping actions: expectations, the requeue, events (never fail).
fn apply_local(
    ctx: &Context,
    snap: &VmSnapshot,
    action: &VmAction,
    requeue_after: &mut Option<Duration>,
) {
    match action {
        VmAction::ExpectVmiCreations { key, count } => {
            ctx.expectations.vmi.expect_creations(key, *count)
        }
        VmAction::VmiCreationObserved { key } => ctx.expectations.vmi.creation_observed(key),
        VmAction::ExpectVmiDeletions { key, deletion_keys } => ctx
            .expectations
            .vmi
            .expect_deletions(key, deletion_keys.clone()),
        VmAction::VmiDeletionObserved { key, deletion_key } => {
            ctx.expectations.vmi.deletion_observed(key, deletion_key)
        }
        VmAction::ExpectDataVolumeCreations { key, count } => {
            ctx.expectations.data_volume.expect_creations(key, *count)
        }
        VmAction::DataVolumeCreationObserved { key } => {
            ctx.expectations.data_volume.creation_observed(key)
        }
        VmAction::RequeueAfter { seconds } => {
            let d = Duration::from_secs(u64::try_from(*seconds).unwrap_or(0));
            *requeue_after = Some(requeue_after.map_or(d, |r| r.min(d)));
        }
        VmAction::Event {
            type_,
            reason,
            message,
        } => {
            ctx.events.emit(
                object_ref("VirtualMachine", &snap.vm.metadata),
                *type_,
                reason,
                message,
            );
        }
        _ => {}
    }
}

async fn apply(
    ctx: &Context,
    ns: &str,
    snap: &VmSnapshot,
    action: &VmAction,
    returned: &std::collections::BTreeMap<usize, VirtualMachine>,
    requeue_after: &mut Option<Duration>,
) -> Result<Option<VirtualMachine>, ApiFailure> {
    let client = &ctx.client;
    let vm_name = snap.vm.metadata.name.clone().unwrap_or_default();
    // Built in the arms that write: most actions are bookkeeping, and an `Api` is a client
    // clone and a formatted URL path.
    let vms = || api::<VirtualMachine>(client, ns);
    let vmis = || api::<VirtualMachineInstance>(client, ns);
    let e = |e: kube::Error| ApiFailure::from(&e);
    let pp = PostParams::default();
    match action {
        VmAction::ExpectVmiCreations { .. }
        | VmAction::VmiCreationObserved { .. }
        | VmAction::ExpectVmiDeletions { .. }
        | VmAction::VmiDeletionObserved { .. }
        | VmAction::ExpectDataVolumeCreations { .. }
        | VmAction::DataVolumeCreationObserved { .. }
        | VmAction::RequeueAfter { .. }
        | VmAction::Event { .. } => apply_local(ctx, snap, action, requeue_after),
        VmAction::UpdateVm {
            vm,
            resource_version_from,
            ..
        } => {
            let vm = with_resource_version((**vm).clone(), *resource_version_from, snap, returned);
            return replace(client, ns, &vm_name, None, &vm)
                .await
                .map(Some)
                .map_err(e);
        }
        VmAction::UpdateVmStatus {
            status,
            resource_version_from,
        } => {
            let mut vm =
                with_resource_version((*snap.vm).clone(), *resource_version_from, snap, returned);
            vm.status = Some((**status).clone());
            return replace(client, ns, &vm_name, Some("status"), &vm)
                .await
                .map(Some)
                .map_err(e);
        }
        VmAction::AddVmFinalizer { patch }
        | VmAction::RemoveVmFinalizer { patch }
        | VmAction::PatchVmFirmware { patch } => {
            return json_patch::<VirtualMachine>(client, ns, &vm_name, None, patch)
                .await
                .map(Some)
                .map_err(e);
        }
        VmAction::AddStartRequest { patch } | VmAction::PatchVmInstancetypeRefs { patch } => {
            return json_patch::<VirtualMachine>(client, ns, &vm_name, Some("status"), patch)
                .await
                .map(Some)
                .map_err(e);
        }
        VmAction::CreateVmi { vmi } => {
            create_unread(client, ns, vmi.as_ref()).await.map_err(e)?;
        }
        VmAction::DeleteVmi { name, .. } => {
            if let Err(err) = vmis().delete(name, &DeleteParams::default()).await {
                let failure = e(err);
                // vm.go:1672-1680 reports the failure; a 404 also means the cached VMI is gone
                // (its DELETED was lost), which the next sync must see (issue 38 item 2).
                if failure.is_not_found() {
                    ctx.vmi_gone(ns, name);
                }
                return Err(failure);
            }
        }
        VmAction::PatchVmiGenerationAnnotation { name, patch }
        | VmAction::PatchVmiMetadata { name, patch }
        | VmAction::PatchVmiSpec { name, patch }
        | VmAction::RemoveVmiFinalizer { name, patch } => {
            json_patch_unread::<VirtualMachineInstance>(client, ns, name, None, patch)
                .await
                .map_err(e)?;
        }
        VmAction::AddVmiVolume { name, options } => {
            put_vmi_volume(client, ns, name, "addvolume", options)
                .await
                .map_err(e)?
        }
        VmAction::RemoveVmiVolume { name, options } => {
            put_vmi_volume(client, ns, name, "removevolume", options)
                .await
                .map_err(e)?
        }
        VmAction::AdoptVmi { name, patch, .. } => {
            can_adopt(&vms(), snap).await?;
            vmis()
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(e)?;
        }
        VmAction::ReleaseVmi { name, patch } => release_vmi(&vmis(), name, patch).await?,
        VmAction::PatchClaimAnnotations { name, patch } => {
            json_patch_unread::<PersistentVolumeClaim>(client, ns, name, None, patch)
                .await
                .map_err(e)?;
        }
        VmAction::AdoptDataVolume { name, patch, .. } => {
            can_adopt(&vms(), snap).await?;
            api::<DataVolume>(client, ns)
                .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(e)?;
        }
        VmAction::CreateDataVolume { data_volume } => {
            api::<DataVolume>(client, ns)
                .create(&pp, data_volume)
                .await
                .map_err(|err| e(err).for_request("POST", "datavolumes.cdi.kubevirt.io", ""))?;
        }
        VmAction::CreateControllerRevision { revision } => {
            create_unread(client, ns, revision.as_ref())
                .await
                .map_err(e)?;
        }
        VmAction::CreateInstancetypeRevision { revision } => {
            return create_instancetype_revision(client, ns, revision).await;
        }
        VmAction::DeleteControllerRevision { name } => {
            api::<ControllerRevision>(client, ns)
                .delete(name, &DeleteParams::default())
                .await
                .map_err(e)?;
        }
    }
    Ok(None)
}

/// virt-api's VMI volume subresource (`kubecli`'s `AddVolume`/`RemoveVolume`: a PUT to
/// `subresources.kubevirt.io/v1`).
async fn put_vmi_volume<B: serde::Serialize>(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    verb: &str,
    options: &B,
) -> Result<(), kube::Error> {
    let path = format!(
        "/apis/{}/namespaces/{namespace}/virtualmachineinstances/{name}/{verb}",
        crate::lifecycle::request::SUBRESOURCE_GROUP_VERSION
    );
    put_unread(client, &path, options).await
}

/// Release a VMI: controller_ref_manager.go:429-455 ignores NotFound and Invalid.
async fn release_vmi(
    vmis: &kube::Api<VirtualMachineInstance>,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), ApiFailure> {
    match vmis
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(err) => {
            let a = ApiFailure::from(&err);
            if a.is_not_found() || a.is_invalid() {
                Ok(())
            } else {
                Err(a)
            }
        }
    }
}

/// `storeControllerRevision` (pkg/instancetype/revision/store.go:278-320): create; on
/// AlreadyExists GET the existing revision and accept it when it stashes the same spec.
async fn create_instancetype_revision(
    client: &kube::Client,
    ns: &str,
    revision: &ControllerRevision,
) -> Result<Option<VirtualMachine>, ApiFailure> {
    let Err(err) = create_unread(client, ns, revision).await else {
        return Ok(None);
    };
    let failure = ApiFailure::from(&err);
    if !failure.is_already_exists() {
        return Err(ApiFailure::other(format!(
            "failed to create ControllerRevision: {}",
            failure.message
        )));
    }
    let name = revision.metadata.name.clone().unwrap_or_default();
    let existing = api::<ControllerRevision>(client, ns)
        .get(&name)
        .await
        .map_err(|e| {
            ApiFailure::other(format!(
                "failed to get ControllerRevision: {}",
                ApiFailure::from(&e).message
            ))
        })?;
    if crate::instancetype::revision::same_spec(revision, &existing) {
        Ok(None)
    } else {
        Err(ApiFailure::other(format!(
            "found existing ControllerRevision with unexpected data: {name}"
        )))
    }
}

/// `CanAdopt` (vm.go:394-407, controller_ref_manager.go:581-593): an uncached GET of the VM; adoption
/// is refused when the UID changed or the VM is being deleted.
async fn can_adopt(vms: &kube::Api<VirtualMachine>, snap: &VmSnapshot) -> Result<(), ApiFailure> {
    let name = snap.vm.metadata.name.clone().unwrap_or_default();
    let fresh = vms.get(&name).await.map_err(|e| ApiFailure::from(&e))?;
    if fresh.metadata.uid != snap.vm.metadata.uid {
        return Err(ApiFailure::other(format!(
            "original VirtualMachine {}/{name} is gone: got uid {:?}, wanted {:?}",
            snap.vm.metadata.namespace.as_deref().unwrap_or(""),
            fresh.metadata.uid,
            snap.vm.metadata.uid
        )));
    }
    if fresh.metadata.deletion_timestamp.is_some() {
        return Err(ApiFailure::other(format!(
            "VirtualMachine {}/{name} has just been deleted at {:?}",
            snap.vm.metadata.namespace.as_deref().unwrap_or(""),
            fresh.metadata.deletion_timestamp
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn revision(ns: &str, name: &str, owner_uid: Option<&str>) -> ControllerRevision {
        let owners = owner_uid.map(|uid| {
            json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": "x",
                    "uid": uid, "controller": true}])
        });
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns, "ownerReferences": owners},
            "revision": 1
        }))
        .expect("revision")
    }

    fn names(v: &[Arc<ControllerRevision>]) -> Vec<&str> {
        v.iter()
            .filter_map(|r| r.metadata.name.as_deref())
            .collect()
    }

    /// A VM reconcile that found no VMI: a relisted-away mark sends it to the server; a VMI
    /// cached since its snapshot (the watch brought it back and cleared the mark in between)
    /// means the snapshot is behind, not that the VMI is gone.
    #[test]
    fn a_vmi_absence_is_sure_only_when_unmarked_and_still_uncached() {
        use crate::runtime::informer::InformerState;
        use kube::runtime::watcher;
        let marks = crate::controller::context::UnverifiedAbsences::default();
        let mut state = InformerState::<VirtualMachineInstance>::new();
        state.apply(watcher::Event::Init);
        state.apply(watcher::Event::InitDone);
        let vmis = state.store();
        assert_eq!(vmi_absence(&marks, &vmis, "ns/a"), VmiAbsence::Sure);
        marks.mark("ns/a");
        assert_eq!(vmi_absence(&marks, &vmis, "ns/a"), VmiAbsence::Unverified);
        let mut back = VirtualMachineInstance::default();
        back.metadata.name = Some("a".into());
        back.metadata.namespace = Some("ns".into());
        state.apply(watcher::Event::Apply(back));
        marks.clear("ns/a");
        assert_eq!(
            vmi_absence(&marks, &vmis, "ns/a"),
            VmiAbsence::SnapshotBehind
        );
        assert_eq!(vmi_absence(&marks, &vmis, "ns/b"), VmiAbsence::Sure);
    }

    #[test]
    fn snapshot_revisions_are_the_vms_own_and_the_vmis() {
        let all = [
            revision("ns", "revision-start-vm-uid-a-1", Some("uid-a")),
            revision("ns", "revision-start-vm-uid-b-1", Some("uid-b")),
            revision("other", "revision-start-vm-uid-a-2", Some("uid-a")),
            revision("ns", "adopted-elsewhere", None),
            revision("ns", "revision-start-vm-uid-c-3", Some("uid-c")),
        ];
        assert_eq!(
            names(&vm_revisions(
                "uid-a",
                "ns",
                None,
                all.iter().cloned().map(Arc::new)
            )),
            ["revision-start-vm-uid-a-1"]
        );
        assert_eq!(
            names(&vm_revisions(
                "uid-a",
                "ns",
                Some("revision-start-vm-uid-c-3"),
                all.iter().cloned().map(Arc::new)
            )),
            ["revision-start-vm-uid-a-1", "revision-start-vm-uid-c-3"]
        );
        assert_eq!(
            names(&vm_revisions(
                "",
                "ns",
                Some("adopted-elsewhere"),
                all.iter().cloned().map(Arc::new)
            )),
            ["adopted-elsewhere"]
        );
        assert!(vm_revisions("uid-z", "ns", None, all.iter().cloned().map(Arc::new)).is_empty());
    }
}
