//! The VMI controller's executor: build a [`VmiSnapshot`] from the caches (rendering the launcher
//! pod when the decision needs one), run the pure decision, and apply its actions in the order
//! and with the expectations the protocol on [`VmiDecision`](super::VmiDecision) prescribes.
//!
//! KubeVirt: `Execute`/`execute` (pkg/virt-controller/watch/vmi/vmi.go:297-368).
//!
//! Modelled inputs: the VMI, its pods, the owner VM, expectations, the DataVolumes and
//! PersistentVolumeClaims of its volumes ([`super::storage`]) and the rendered pod, whose
//! automatic CPU/memory limits come from the namespace and ResourceQuota caches
//! ([`Caches::namespace_context`](crate::controller::context::Caches::namespace_context)).

use super::action::{ApiFailure, SyncError, SyncOutcome, VmiAction, VmiDecision};
use super::launcher_cache::{CONTROLLER_UID, CachedPod};
use super::snapshot::{ExpectationsState, RenderFailure, VmiSnapshot};
use super::{decide_after_sync, decide_sync, needs_rendered_pod};
use crate::api::defaults::apply_admission_defaults;
use crate::api::key::split_key;
use crate::api::{DataVolume, Time, VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterSettings;
use crate::controller::common::ReconcileError;
use crate::controller::common::protocol::{ActionRun, AfterFailure};
use crate::controller::context::{Context, VmiEnding, object_ref};
use crate::controller::manager::reconciler;
use crate::launcher::lookups::Wanted;
use crate::launcher::network::RESOURCE_NAME_ANNOTATION;
use crate::launcher::resources::{NamespaceContext, PvcInfo, RenderLookups};
use crate::launcher::{RenderError, render_launch_manifest};
use crate::runtime::apicall::{
    api, create_read_as, json_patch_unread, replace_unread, strategic_status_patch_unread,
};
use crate::runtime::queue::Requeue;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod};
use kube::Resource as _;
use kube::api::DeleteParams;
use kube::runtime::reflector::ObjectRef;
use std::sync::Arc;
use std::time::Instant;

reconciler!(
    /// The VMI controller as a [`Reconciler`](crate::controller::manager::Reconciler) for
    /// the manager.
    VmiReconciler ("virtualmachineinstance") => reconcile
);

/// Render the launcher pod for `vmi` with the cluster settings and what the renderer knows of
/// its namespace (the controller's caches, or the inspector's reads), applying virt-api's
/// admission defaults to a copy first (a VMI in a real cluster already has them; the embedded
/// cluster has no webhooks).
pub fn render_pod_with(
    settings: &ClusterSettings,
    ns: &NamespaceContext,
    vmi: &VirtualMachineInstance,
) -> Result<Pod, RenderFailure> {
    let mut copy = vmi.clone();
    apply_admission_defaults(&mut copy.spec, &settings.admission())
        .map_err(|e| RenderFailure::from(e.to_string()))?;
    render_launch_manifest(&copy, settings, ns, &mut rand::rng()).map_err(|e| RenderFailure {
        pvc_not_found: matches!(e, RenderError::PvcNotFound { .. }),
        message: e.to_string(),
    })
}

/// Build the snapshot for `key` from the caches, or `None` when the VMI is not cached. A pod is
/// rendered with `lookups` (what [`read_lookups`] read; `None`: not read, see
/// [`NamespaceContext::lookups`]).
pub(crate) fn snapshot(
    ctx: &Context,
    key: &str,
    lookups: Option<RenderLookups>,
) -> Option<VmiSnapshot> {
    let (ns, name) = split_key(key);
    let vmi = ctx
        .caches
        .vmis
        .store()
        .get(&ObjectRef::new(name).within(ns))?;
    let owner_vm_uid = owner_vm_name(&vmi).and_then(|n| {
        ctx.caches
            .vms
            .store()
            .get(&ObjectRef::<VirtualMachine>::new(&n).within(ns))
            .and_then(|vm| vm.metadata.uid.clone())
    });
    let pods = &ctx.expectations.pod;
    let (adds, dels) = pods.get_expectations(key).unwrap_or((0, 0));
    let expectations = ExpectationsState {
        pods_satisfied: pods.satisfied_expectations(key),
        pending_pod_creations: adds,
        pending_pod_deletions: dels,
        vmi_satisfied: ctx.expectations.vmi_self.satisfied_expectations(key),
        pvcs_satisfied: ctx.expectations.pvc.satisfied_expectations(key),
    };
    // The pods the VMI controls, from the pod informer's controller-UID index (the filter in
    // `snapshot_from_objects` keeps the same pods from the whole cache).
    let mut cached = match vmi.metadata.uid.as_deref() {
        Some(uid) => ctx.caches.pods.by_index(&CONTROLLER_UID, uid),
        None => Vec::new(),
    };
    // And the hotplug attachment pods those pods control (`AttachmentPods`,
    // controller.go:474-488).
    let attachment: Vec<Arc<CachedPod>> = cached
        .iter()
        .filter_map(|p| p.meta().uid.as_deref())
        .flat_map(|uid| ctx.caches.pods.by_index(&CONTROLLER_UID, uid))
        .collect();
    cached.extend(attachment);
    // Read as the `Pod`s every pod reader takes (launcher_cache.rs).
    let own_pods: Vec<Arc<Pod>> = cached.iter().map(|p| Arc::new(p.to_pod())).collect();
    // One configuration for the whole reconcile, even if the KubeVirt CR changes meanwhile.
    let settings = ctx.cluster_config.settings();
    let backend = backend_storage_state(ctx, &vmi, ns, &settings);
    let topology = topology_state(ctx, &vmi, &settings);
    let mut snap = snapshot_from_objects(
        vmi,
        own_pods,
        owner_vm_uid,
        expectations,
        (
            |dv: &str| {
                ctx.caches
                    .data_volumes
                    .store()
                    .get(&ObjectRef::<DataVolume>::new(dv).within(ns))
                    .map(|d| (*d).clone())
            },
            |claim: &str| {
                ctx.caches
                    .pvcs
                    .store()
                    .get(&ObjectRef::<PersistentVolumeClaim>::new(claim).within(ns))
                    .map(|p| (*p).clone())
            },
            &cdi_overhead(&ctx.caches.storage),
            backend,
        ),
        (&settings, || NamespaceContext {
            lookups,
            ..ctx.caches.namespace_context(ns, &settings)
        }),
        Time::now(),
    );
    snap.topology = Some(topology);
    Some(snap)
}

/// What the topology hinter reads (hinter.go:49-67): the CR's minimum TSC frequency and, when
/// the VMI's hint step can run (no hint yet, a TSC requirement), the node cache, each node
/// marked when a cached VMI runs on it (`IsNodeRunningVmis`, filter.go:109-123; KubeVirt's
/// hinter lists the VMI cache per node, this one once and only for nodes that are not
/// schedulable but carry a frequency).
fn topology_state(
    ctx: &Context,
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
) -> super::topology::TopologyState {
    use super::topology::{NodeTsc, TopologyState, has_topology_hints, tsc_requirement};
    let mut state = TopologyState {
        minimum_cluster_tsc_frequency: settings.minimum_cluster_tsc_frequency,
        nodes: Vec::new(),
    };
    // Only an unprocessed VMI's updateStatus adds hints (lifecycle.go:320-334).
    let unprocessed = matches!(
        vmi.phase(),
        crate::api::Phase::Unset | crate::api::Phase::Pending
    );
    let needed = unprocessed
        && !has_topology_hints(vmi)
        && tsc_requirement(vmi) != super::topology::TscRequirement::NotRequired;
    if !needed || state.minimum_cluster_tsc_frequency.is_some() {
        return state;
    }
    let nodes = ctx.caches.nodes.store().state();
    state.nodes = nodes.iter().map(|n| NodeTsc::from_node(n)).collect();
    if state
        .nodes
        .iter()
        .any(|n| !n.schedulable && n.frequency_label.is_some())
    {
        let vmis = ctx.caches.vmis.store().state();
        let running: std::collections::HashSet<&str> = vmis
            .iter()
            .filter_map(|v| v.status.as_ref()?.node_name.as_deref())
            .collect();
        for n in &mut state.nodes {
            n.runs_vmis = running.contains(n.name.as_str());
        }
    }
    state
}

/// The VMI's backend-storage claim and what a new one would be, from the claim, StorageClass
/// and StorageProfile caches ([`super::backend_storage::state`]).
fn backend_storage_state(
    ctx: &Context,
    vmi: &VirtualMachineInstance,
    ns: &str,
    settings: &ClusterSettings,
) -> super::backend_storage::BackendStorageState {
    let claims = ctx.caches.pvcs.store().state();
    let classes = ctx.caches.storage.storage_classes.store().state();
    let classes: Vec<_> = classes.iter().map(|c| c.as_ref()).collect();
    let profiles = &ctx.caches.storage.storage_profiles;
    super::backend_storage::state(
        vmi,
        claims
            .iter()
            .map(|c| c.as_ref())
            .filter(|c| c.metadata.namespace.as_deref() == Some(ns)),
        &classes,
        |class| {
            let p = profiles.store().get(&ObjectRef::new(class))?;
            let sets = p.status.as_ref()?.get("claimPropertySets")?.as_array()?;
            Some(sets.clone())
        },
        settings.vm_state_storage_class.as_deref(),
    )
}

/// What `getFilesystemOverhead` reads of the caches, now: the number of CDI CRs and the
/// CDIConfig `config` (`storagetypes.ConfigName`, pkg/storage/types/cdi.go:35).
fn cdi_overhead(
    storage: &crate::controller::storage_cache::StorageCaches,
) -> super::storage::CdiOverhead {
    let config = storage
        .cdi_configs
        .store()
        .get(&ObjectRef::new("config"))
        .map(|c| super::storage::CdiConfigOverhead {
            filesystem_overhead: c
                .status
                .as_ref()
                .and_then(|s| s.get("filesystemOverhead"))
                .cloned(),
        });
    super::storage::CdiOverhead {
        cdi_instances: storage.cdis.store().state().len(),
        config,
    }
}

/// [`snapshot`], with the objects KubeVirt's renderer GETs itself (hook-sidecar ConfigMaps,
/// NetworkAttachmentDefinitions: template.go:427-433, 583-587) read when the snapshot renders a
/// pod that needs them, so a missing one fails the render as in KubeVirt.
async fn snapshot_reading_lookups(ctx: &Context, key: &str) -> Option<VmiSnapshot> {
    let snap = snapshot(ctx, key, None)?;
    if snap.rendered_pod.is_none() {
        return Some(snap);
    }
    let wanted = crate::launcher::lookups::wanted(&snap.vmi, &ctx.cluster_config.settings());
    if wanted.is_empty() {
        return Some(snap);
    }
    let (ns, _) = split_key(key);
    let lookups = read_lookups(&ctx.client, ns, &wanted).await;
    snapshot(ctx, key, Some(lookups))
}

/// GET the objects `wanted` names: a ConfigMap's error is the API's text (`configmaps "NAME"
/// not found`, what client-go's error prints); a NAD's annotation
/// `k8s.v1.cni.cncf.io/resourceName`, or `None` when the GET failed.
pub(crate) async fn read_lookups(
    client: &kube::Client,
    namespace: &str,
    wanted: &Wanted,
) -> RenderLookups {
    let mut lookups = RenderLookups::default();
    let config_maps: kube::Api<ConfigMap> = kube::Api::namespaced(client.clone(), namespace);
    for name in &wanted.config_maps {
        let read = match config_maps.get(name).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) => Err(status.message),
            Err(e) => Err(e.to_string()),
        };
        lookups.config_maps.insert(name.clone(), read);
    }
    let gvk =
        kube::core::GroupVersionKind::gvk("k8s.cni.cncf.io", "v1", "NetworkAttachmentDefinition");
    let resource =
        kube::core::ApiResource::from_gvk_with_plural(&gvk, "network-attachment-definitions");
    for (nad_ns, name) in &wanted.network_attachment_definitions {
        let nads: kube::Api<kube::core::DynamicObject> =
            kube::Api::namespaced_with(client.clone(), nad_ns, &resource);
        let read = nads.get(name).await.ok().map(|nad| {
            nad.metadata
                .annotations
                .and_then(|a| a.get(RESOURCE_NAME_ANNOTATION).cloned())
                .unwrap_or_default()
        });
        lookups
            .network_attachment_definitions
            .insert(format!("{nad_ns}/{name}"), read);
    }
    lookups
}

/// The name of the VirtualMachine in the VMI's controller owner reference, if any.
pub(crate) fn owner_vm_name(vmi: &VirtualMachineInstance) -> Option<String> {
    vmi.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == "VirtualMachine")
        .map(|r| r.name.clone())
}

/// Build a [`VmiSnapshot`] from objects already read: the executor's caches, or the inspector's
/// GETs. `pods` are candidates (only those controlled by the VMI are kept); `data_volume` and
/// `pvc` look a DataVolume / PersistentVolumeClaim of the VMI's namespace up by name (the
/// storage facts: [`super::storage`]; the claims' volume mode and access modes are the
/// renderer's too, as KubeVirt's TemplateService reads its PVC cache,
/// rendervolumes.go:501-531); the renderer's inputs are the cluster settings
/// and what it knows of the VMI's namespace (asked for only when a pod is rendered: most
/// reconciles render none). Renders the launcher pod when the decision needs one.
pub(crate) fn snapshot_from_objects(
    vmi: impl Into<Arc<VirtualMachineInstance>>,
    pods: impl IntoIterator<Item = Arc<Pod>>,
    owner_vm_uid: Option<String>,
    expectations: ExpectationsState,
    (data_volume, pvc, cdi, backend): (
        impl Fn(&str) -> Option<DataVolume>,
        impl Fn(&str) -> Option<PersistentVolumeClaim>,
        &super::storage::CdiOverhead,
        super::backend_storage::BackendStorageState,
    ),
    (settings, namespace): (&ClusterSettings, impl FnOnce() -> NamespaceContext),
    now: Time,
) -> VmiSnapshot {
    let vmi = vmi.into();
    let uid = vmi.metadata.uid.clone();
    let ns = vmi.metadata.namespace.clone();
    let mut snap = VmiSnapshot::new(vmi, now);
    let controller_uid = |p: &Pod| {
        p.metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .map(|r| r.uid.clone())
    };
    let candidates: Vec<Arc<Pod>> = pods
        .into_iter()
        .filter(|p| p.metadata.namespace == ns)
        .collect();
    // The VMI's pods, then the attachment pods they control.
    let own: std::collections::BTreeSet<String> = candidates
        .iter()
        .filter(|p| uid.is_some() && controller_uid(p) == uid)
        .filter_map(|p| p.metadata.uid.clone())
        .collect();
    snap.pods = candidates
        .into_iter()
        .filter(|p| {
            let owner = controller_uid(p);
            (uid.is_some() && owner == uid) || owner.is_some_and(|o| own.contains(&o))
        })
        .collect();
    snap.owner_vm_uid = owner_vm_uid;
    snap.expectations = expectations;
    snap.storage = super::storage::storage_state(&snap.vmi, &pvc, &data_volume, cdi);
    snap.launcher_image = Some(settings.launcher_image.clone());
    snap.memory_overhead_report = settings.gate_enabled("VmiMemoryOverheadReport", true);
    // virt-api's mutator adds the foreground finalizer; stand in only without virt-api.
    snap.ensure_vmi_finalizer = settings.without_virt_api;
    snap.cluster_skip_backup_hooks = settings.skip_backup_hooks.clone();
    snap.network_bindings = settings.network_bindings.clone();
    snap.rules = settings.kubevirt_version.controller_rules();
    snap.additional_guest_memory_overhead_ratio =
        settings.additional_guest_memory_overhead_ratio.clone();
    snap.support_container_resources = settings.support_container_resources.clone();
    snap.selinux_launcher_type = settings.selinux_launcher_type.clone();
    snap.backend_storage = backend;
    if needs_rendered_pod(&snap) {
        let mut ns = namespace();
        ns.pvcs = Some(render_pvcs(&snap.vmi, &pvc));
        ns.backend_storage_claim = snap.backend_storage.claim.as_ref().map(|c| c.name.clone());
        // A DataVolume waiting for its first consumer: the temporary pod instead
        // (`RenderLaunchManifestNoVm`, lifecycle.go:152-154).
        let temporary = snap.storage.wffc;
        let rendered = render_pod_with(settings, &ns, &snap.vmi).map(|mut pod| {
            if temporary {
                crate::launcher::pod::make_temporary(&mut pod);
            }
            Arc::new(pod)
        });
        snap.rendered_pod = Some(rendered);
    }
    snap
}

/// What the pod renderer knows of the VMI's claims (block volume mode, shared access): every
/// `persistentVolumeClaim`, `dataVolume` and `ephemeral` volume's claim found by `pvc`. A claim
/// not found makes the renderer fail with KubeVirt's `PvcNotFoundError`
/// (rendervolumes.go:501-531).
fn render_pvcs(
    vmi: &VirtualMachineInstance,
    pvc: impl Fn(&str) -> Option<PersistentVolumeClaim>,
) -> std::collections::BTreeMap<String, PvcInfo> {
    let mut out = std::collections::BTreeMap::new();
    for v in vmi.spec.volumes.iter().flatten() {
        let claim = match super::storage::claim_name(v) {
            Some(c) => Some(c.to_string()),
            None => v.extra.field("ephemeral", |e| {
                e.pointer("/persistentVolumeClaim/claimName")?
                    .as_str()
                    .map(str::to_string)
            }),
        };
        if let Some(claim) = claim
            && let Some(p) = pvc(&claim)
        {
            out.insert(claim, pvc_render_info(&p));
        }
    }
    out
}

/// `IsPVCBlock` (pvc.go:64-70) and `HasSharedAccessMode` (pvc.go:72-79) of a claim, and its
/// UID for the persistent-reservation label (template.go:164-193).
fn pvc_render_info(pvc: &PersistentVolumeClaim) -> PvcInfo {
    let spec = pvc.spec.as_ref();
    PvcInfo {
        block: spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block"),
        shared: spec
            .and_then(|s| s.access_modes.as_ref())
            .is_some_and(|m| m.iter().any(|m| m == "ReadWriteMany")),
        uid: pvc.metadata.uid.clone(),
    }
}

/// Reconcile one VMI key.
pub(crate) async fn reconcile(ctx: &Context, key: &str) -> Result<Requeue, ReconcileError> {
    let started = Instant::now();
    let Some(snap) = snapshot_reading_lookups(ctx, key).await else {
        // vmi.go:305-311: the VMI is gone.
        ctx.forget_gone("vmi", key);
        return Ok(Requeue::NONE);
    };
    record_observed_ending(ctx, key, &snap);
    let mut first = decide_sync(&snap);
    if first.skipped.is_some() {
        super::flight::reconcile(ctx, key, &snap, &first, None, false, &[], None);
        return Ok(skipped_requeue(&first));
    }
    // The recorder keeps the decision's actions, which the run below takes.
    let recorded_first = ctx.flight.as_ref().map(|_| first.clone());
    // Stage 1: sync, which returns on its first error.
    let mut created_pod = None;
    let mut run = ActionRun::new(std::mem::take(&mut first.sync_actions));
    while let Some((_, action)) = run.next() {
        match apply(ctx, key, &snap, action).await {
            Ok(created) => {
                super::flight::write(ctx, key, action, None);
                created_pod = created.map(Box::new).or(created_pod);
                run.succeeded(describe(action));
            }
            Err(e) => {
                super::flight::write(ctx, key, action, Some(&e.message));
                run.failed(describe(action), e, |_, _| AfterFailure::Stop)
            }
        }
    }
    let stage1 = run.finish();
    let outcome = match stage1.stopped_at {
        Some((index, error)) => SyncOutcome::Failed { index, error },
        None => SyncOutcome::Succeeded { created_pod },
    };
    // Stage 2: events about stage 1, then updateStatus; a failed write ends it.
    let mut second = decide_after_sync(&snap, &outcome);
    let sync_failed = matches!(outcome, SyncOutcome::Failed { .. });
    let recorded_second = ctx.flight.as_ref().map(|_| second.clone());
    let writes_vmi = second.vmi_write().is_some();
    let mut status_error = None;
    let mut run = ActionRun::new(std::mem::take(&mut second.status_actions));
    while let Some((_, action)) = run.next() {
        match apply(ctx, key, &snap, action).await {
            Ok(_) => {
                super::flight::write(ctx, key, action, None);
                run.succeeded(describe(action))
            }
            Err(e) => {
                super::flight::write(ctx, key, action, Some(&e.message));
                let (verb, resource, object) = request(key, action);
                status_error = Some(ReconcileError::api(verb, resource, object, e.clone()));
                run.failed(describe(action), e, |_, _| AfterFailure::Stop)
            }
        }
    }
    let stage2 = run.finish();
    if stage2.stopped_at.is_none() && writes_vmi {
        record_ending(ctx, key, &snap, &second);
    }
    let mut applied = stage1.lines;
    applied.extend(stage2.lines);
    // vmi.go:352-365: updateStatus's error first, then a sync error that asks for a requeue.
    let error = status_error
        .or_else(|| second.update_status_error.take())
        .or_else(|| {
            let sync_error = second.sync_error.take().filter(|e| e.requeue)?;
            Some(if is_render_failure(&snap, &sync_error) {
                ReconcileError::Render(sync_error)
            } else {
                ReconcileError::Sync(sync_error)
            })
        });
    if let (Some(first), Some(second)) = (&recorded_first, &recorded_second) {
        let text = error.as_ref().map(ToString::to_string);
        let (e, a) = (text.as_ref(), &applied);
        super::flight::reconcile(ctx, key, &snap, first, Some(second), sync_failed, a, e);
    }
    let requeue_after = second.requeue_after;
    ctx.reconciles
        .finish("vmi", key, started, error.as_ref(), requeue_after, applied);
    match error {
        Some(e) => Err(e),
        None => Ok(requeue_after.map_or(Requeue::NONE, Requeue::after)),
    }
}

/// What a skipped decision asks of the queue: `execute` returns `nil`, so the key is forgotten,
/// and added again after [`VmiDecision::requeue_after`] when the release does (PR 18206).
fn skipped_requeue(d: &VmiDecision) -> Requeue {
    d.requeue_after.map_or(Requeue::NONE, Requeue::after)
}

/// Whether `sync_error` is the one `sync` returns for the snapshot's failed render
/// (lifecycle.go:158-163).
fn is_render_failure(snap: &VmiSnapshot, sync_error: &SyncError) -> bool {
    matches!(&snap.rendered_pod, Some(Err(f))
        if sync_error.message.strip_prefix(super::events::FAILED_TO_RENDER_PREFIX)
            == Some(f.message.as_str()))
}

/// The request a status-stage action sends: verb, resource and the object's `namespace/name`
/// (`key` is the VMI's).
fn request(key: &str, action: &VmiAction) -> (&'static str, &'static str, String) {
    let (ns, _) = split_key(key);
    let pod = |name: &str| format!("{ns}/{name}");
    match action {
        VmiAction::CreatePod { .. }
        | VmiAction::CreateAttachmentPod { .. }
        | VmiAction::CreateTriggerPod { .. } => ("create", "pods", ns.to_string()),
        VmiAction::DeletePod { name, .. }
        | VmiAction::DeleteTemporaryPod { name, .. }
        | VmiAction::DeleteAttachmentPod { name, .. } => ("delete", "pods", pod(name)),
        VmiAction::CreateBackendStoragePvc { .. } => {
            ("create", "persistentvolumeclaims", ns.to_string())
        }
        VmiAction::DeleteBackendStoragePvc { name, .. } => {
            ("delete", "persistentvolumeclaims", pod(name))
        }
        VmiAction::PatchPod { name, .. } => ("patch", "pods", pod(name)),
        VmiAction::PatchPodReadinessCondition { pod: name, .. } => {
            ("patch", "pods/status", pod(name))
        }
        VmiAction::UpdateVmi { .. } => ("update", "virtualmachineinstances", key.to_string()),
        VmiAction::PatchVmi { .. } => ("patch", "virtualmachineinstances", key.to_string()),
        VmiAction::Event { .. } => ("create", "events", ns.to_string()),
    }
}

/// After a successful VMI write: if it moved the VMI into a final phase for a reason the
/// decision knows, remember it ([`crate::controller::context::VmiEnding`]).
fn record_ending(ctx: &Context, key: &str, snap: &VmiSnapshot, decision: &VmiDecision) {
    let (Some(reason), Some(uid)) = (&decision.phase_reason, &snap.vmi.metadata.uid) else {
        return;
    };
    if decision.to_phase.is_final() && !decision.from_phase.is_final() {
        ctx.reconciles.record_ending(
            key,
            VmiEnding {
                uid: uid.clone(),
                phase: decision.to_phase.as_str().to_string(),
                from_phase: decision.from_phase.as_str().to_string(),
                reason: reason.clone(),
                at: chrono::Utc::now(),
            },
        );
    }
}

/// A VMI found in a final phase that the controller did not write (virt-handler did): remember
/// how it ended ([`super::decide::observed_ending`]).
fn record_observed_ending(ctx: &Context, key: &str, snap: &VmiSnapshot) {
    if !snap.vmi.phase().is_final() {
        return;
    }
    let known = ctx.reconciles.ending(key);
    if let Some(ending) = super::decide::observed_ending(snap, known.as_ref(), chrono::Utc::now()) {
        ctx.reconciles.record_ending(key, ending);
    }
}

fn describe(action: &VmiAction) -> String {
    match action {
        VmiAction::CreatePod { pod, .. } => format!(
            "CreatePod {}",
            pod.metadata
                .name
                .as_deref()
                .or(pod.metadata.generate_name.as_deref())
                .unwrap_or("")
        ),
        VmiAction::DeletePod { name, .. } => format!("DeletePod {name}"),
        VmiAction::DeleteTemporaryPod { name, .. } => format!("DeleteTemporaryPod {name}"),
        VmiAction::CreateAttachmentPod { .. } => "CreateAttachmentPod hp-volume-".to_string(),
        VmiAction::CreateTriggerPod { volume, .. } => {
            format!("CreateTriggerPod hp-volume- {volume}")
        }
        VmiAction::DeleteAttachmentPod { name, .. } => format!("DeleteAttachmentPod {name}"),
        VmiAction::CreateBackendStoragePvc { pvc, .. } => format!(
            "CreateBackendStoragePvc {}",
            pvc.metadata.generate_name.as_deref().unwrap_or_default()
        ),
        VmiAction::DeleteBackendStoragePvc { name, .. } => {
            format!("DeleteBackendStoragePvc {name}")
        }
        VmiAction::PatchPod { name, .. } => format!("PatchPod {name}"),
        VmiAction::PatchPodReadinessCondition { pod, status, .. } => {
            format!("PatchPodReadinessCondition {pod} {status}")
        }
        VmiAction::UpdateVmi { vmi, .. } => format!("UpdateVmi phase={}", vmi.phase().as_str()),
        VmiAction::PatchVmi { .. } => "PatchVmi".to_string(),
        VmiAction::Event { reason, .. } => format!("Event {reason}"),
    }
}

/// `CreatePVCForVMI`'s second look (backend-storage.go:563-574): true when the claim cache now
/// holds the VMI's claim, which is then used instead of creating one. A claim found by its
/// legacy name alone is labelled first (`labelLegacyPVC`, backend-storage.go:245-258), and a
/// failed label is only logged. As in v1.9.0 the claim expectation raised before stays
/// raised: no creation follows, and a legacy claim's arrival observed none (storage.go:43-53),
/// so the VMI waits for the expectation to expire. One difference: v1.9.0 goes on in the same
/// sync with the found claim (lifecycle.go:126-141), where this sync's decision already stopped.
async fn adopt_claim_found_at_creation(ctx: &Context, ns: &str, snap: &VmiSnapshot) -> bool {
    use super::backend_storage::{AtCreate, at_create};
    let claims = ctx.caches.pvcs.store().state();
    let now = at_create(
        &snap.vmi,
        claims
            .iter()
            .map(|c| c.as_ref())
            .filter(|c| c.metadata.namespace.as_deref() == Some(ns)),
    );
    let AtCreate::Found { name, label } = now else {
        return false;
    };
    if let Some(patch) = label {
        let body = serde_json::to_value(&patch).unwrap_or_default();
        if let Err(e) =
            json_patch_unread::<PersistentVolumeClaim>(&ctx.client, ns, &name, None, &body).await
        {
            tracing::warn!(error = %e, "failed to label legacy PVC {ns}/{name}");
        }
    }
    true
}

/// Apply one action; returns the created pod for `CreatePod`.
async fn apply(
    ctx: &Context,
    key: &str,
    snap: &VmiSnapshot,
    action: &VmiAction,
) -> Result<Option<Pod>, ApiFailure> {
    let (ns, _) = split_key(key);
    let client = &ctx.client;
    // Built in the arms that write (see the VM executor's `apply`).
    let pods = || api::<Pod>(client, ns);
    let vmi_name = snap.vmi.metadata.name.clone().unwrap_or_default();
    let fail = |e: kube::Error| ApiFailure::from(&e);
    match action {
        VmiAction::CreatePod { pod, .. } => {
            ctx.expectations.pod.expect_creations(key, 1);
            // The answer is read as the pod informer reads pods: the decisions read only that
            // of a pod (launcher_cache.rs), and a full launcher pod is 8 KB to decode.
            match create_read_as::<Pod, CachedPod>(client, ns, pod).await {
                Ok(created) => return Ok(Some(created.into())),
                Err(e) => {
                    ctx.expectations.pod.creation_observed(key);
                    return Err(fail(e));
                }
            }
        }
        VmiAction::CreateAttachmentPod { pod, .. } | VmiAction::CreateTriggerPod { pod, .. } => {
            ctx.expectations.pod.expect_creations(key, 1);
            match create_read_as::<Pod, CachedPod>(client, ns, pod).await {
                Ok(created) => return Ok(Some(created.into())),
                Err(e) => {
                    ctx.expectations.pod.creation_observed(key);
                    return Err(fail(e));
                }
            }
        }
        VmiAction::DeletePod { name, .. }
        | VmiAction::DeleteTemporaryPod { name, .. }
        | VmiAction::DeleteAttachmentPod { name, .. } => {
            let pod_key = format!("{ns}/{name}");
            ctx.expectations
                .pod
                .expect_deletions(key, vec![pod_key.clone()]);
            // Attachment and temporary pods go with grace period 0 (volume-hotplug.go:374-376,
            // lifecycle.go:1116-1119).
            let params = if matches!(
                action,
                VmiAction::DeleteAttachmentPod { .. } | VmiAction::DeleteTemporaryPod { .. }
            ) {
                DeleteParams::default().grace_period(0)
            } else {
                DeleteParams::default()
            };
            if let Err(e) = pods().delete(name, &params).await {
                ctx.expectations.pod.deletion_observed(key, &pod_key);
                let failure = fail(e);
                if !failure.is_not_found() {
                    return Err(failure);
                }
                // lifecycle.go:1069 takes the 404 as done; the cache must agree, or a pod whose
                // DELETED was lost holds the VMI Terminating for good.
                ctx.pod_gone(ns, name);
            }
        }
        VmiAction::CreateBackendStoragePvc { pvc, .. } => {
            ctx.expectations.pvc.expect_creations(key, 1);
            if adopt_claim_found_at_creation(ctx, ns, snap).await {
                return Ok(None);
            }
            if let Err(e) = api::<PersistentVolumeClaim>(client, ns)
                .create(&Default::default(), pvc)
                .await
            {
                ctx.expectations.pvc.creation_observed(key);
                return Err(fail(e));
            }
        }
        VmiAction::DeleteBackendStoragePvc { name, .. } => {
            api::<PersistentVolumeClaim>(client, ns)
                .delete(name, &DeleteParams::default())
                .await
                .map_err(fail)?;
        }
        VmiAction::PatchPod { name, patch, .. } => {
            let body = serde_json::to_value(patch).unwrap_or_default();
            json_patch_unread::<Pod>(client, ns, name, None, &body)
                .await
                .map_err(fail)?;
        }
        VmiAction::PatchPodReadinessCondition { pod, patch, .. } => {
            strategic_status_patch_unread::<Pod>(client, ns, pod, patch)
                .await
                .map_err(fail)?;
        }
        VmiAction::UpdateVmi { vmi, .. } => {
            ctx.expectations.vmi_self.set_expectations(key, 1, 0);
            // vmi.go updateStatus drops the answer too (`_, err := ...Update(...)`).
            if let Err(e) = replace_unread(client, ns, &vmi_name, vmi.as_ref()).await {
                ctx.expectations.vmi_self.set_expectations(key, 0, 0);
                return Err(fail(e));
            }
        }
        VmiAction::PatchVmi { patch, .. } => {
            let body = serde_json::to_value(patch).unwrap_or_default();
            json_patch_unread::<VirtualMachineInstance>(client, ns, &vmi_name, None, &body)
                .await
                .map_err(fail)?;
        }
        VmiAction::Event {
            type_,
            reason,
            message,
            ..
        } => {
            ctx.events.emit(
                object_ref("VirtualMachineInstance", &snap.vmi.metadata),
                *type_,
                reason,
                message,
            );
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubevirt_version::KubeVirtVersion;
    use crate::runtime::expectations::EXPECTATIONS_TIMEOUT;
    use crate::runtime::queue::{WorkQueue, run_workers};
    use std::sync::Mutex;
    use std::time::Duration;
    use tokio::time::Instant;

    /// A VMI whose pod creation is still expected: every sync is skipped.
    fn waiting_snapshot(version: KubeVirtVersion) -> VmiSnapshot {
        let vmi: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "a", "namespace": "ns", "uid": "u1", "annotations": {
                "kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"}},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": "Pending"}
        }))
        .expect("a VMI");
        let mut snap = VmiSnapshot::new(vmi, Time::now());
        snap.expectations.pods_satisfied = false;
        snap.expectations.pending_pod_creations = 1;
        snap.rules = version.controller_rules();
        snap
    }

    /// The instants (since the first sync) at which the VMI workers synced the key within
    /// `horizon` of the paused clock, each sync deciding as the executor does.
    async fn syncs_within(version: KubeVirtVersion, horizon: Duration) -> Vec<Duration> {
        let queue = WorkQueue::new("virt-controller-vmi");
        let start = Instant::now();
        let seen: Arc<Mutex<Vec<Duration>>> = Arc::default();
        let handler = {
            let seen = Arc::clone(&seen);
            move |_key: String| {
                let seen = Arc::clone(&seen);
                async move {
                    seen.lock().unwrap().push(Instant::now() - start);
                    let decision = decide_sync(&waiting_snapshot(version));
                    Ok::<_, String>(skipped_requeue(&decision))
                }
            }
        };
        let cancel = tokio_util::sync::CancellationToken::new();
        let workers = tokio::spawn(run_workers(queue.clone(), 1, handler, cancel.clone()));
        queue.add("ns/a".to_string());
        // The paused clock jumps to each parked key's ready time while the workers are idle.
        tokio::time::sleep(horizon).await;
        cancel.cancel();
        workers.await.expect("the workers stop");
        seen.lock().unwrap().clone()
    }

    #[tokio::test(start_paused = true)]
    async fn pending_expectations_requeue_the_vmi_after_the_timeout_on_main_only() {
        let horizon = EXPECTATIONS_TIMEOUT * 2 + Duration::from_secs(1);
        assert_eq!(
            syncs_within(KubeVirtVersion::V1_9, horizon).await,
            [Duration::ZERO],
            "v1.9.0: the key waits for an event"
        );
        assert_eq!(
            syncs_within(KubeVirtVersion::Main, horizon).await,
            [
                Duration::ZERO,
                EXPECTATIONS_TIMEOUT,
                EXPECTATIONS_TIMEOUT * 2
            ],
            "main (PR 18206): once per timeout while the expectations stay pending"
        );
    }
}
