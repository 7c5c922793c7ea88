//! Informer event handlers: map each changed object to the *name* of the object whose controller
//! must look again, and lower expectations. Nothing else happens here (no decisions, no writes).
//!
//! KubeVirt: VM controller handlers pkg/virt-controller/watch/vm/vm.go:1985-2134 (VMI add →
//! resolve the owning VM by name + UID, `CreationObserved`, enqueue; orphan VMI → enqueue the
//! same-named VM; VMI update with a deletionTimestamp counts as a delete; VMI delete →
//! `DeletionObserved(vmKey, vmiKey)`; periodic resyncs with the same resourceVersion are
//! ignored); VMI controller handlers pkg/virt-controller/watch/vmi/vmi.go (pod add/update/delete
//! → owning VMI; VMI events reset the VMI self-expectation).

use super::common::record::ChangedKeys;
use super::context::{Expectations, QueueSlot};
use crate::api::key::controller_of;
use crate::api::key::join_key;
use crate::api::storage::VolumeSnapshotClass;
use crate::api::{DataVolume, VirtualMachine, VirtualMachineInstance};
use crate::controller::vmi::launcher_cache::CachedPod;
use crate::runtime::informer::{Handler, Notification, key_of};
use crate::runtime::store::Store;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use std::sync::{Arc, OnceLock};

/// The VM cache, bound after the VM informer starts (handlers of other informers need it to
/// resolve owner references).
pub(crate) type VmStoreCell = Arc<OnceLock<Store<VirtualMachine>>>;

fn same_rv<K: Resource>(old: &K, new: &K) -> bool {
    old.meta().resource_version.is_some()
        && old.meta().resource_version == new.meta().resource_version
}

/// Owner (kind, name, uid) of an object if its controller reference has that kind.
fn controller_named<K: Resource>(obj: &K, kind: &str) -> Option<(String, String)> {
    controller_of(obj.meta())
        .filter(|r| r.kind == kind)
        .map(|r| (r.name.clone(), r.uid.clone()))
}

/// Resolve a VM controller reference against the cache: the VM with that name **and** UID
/// (`resolveControllerRef`, vm.go).
fn resolve_vm(vms: &VmStoreCell, namespace: Option<&str>, name: &str, uid: &str) -> Option<String> {
    let store = vms.get()?;
    let mut r = ObjectRef::<VirtualMachine>::new(name);
    if let Some(ns) = namespace {
        r = r.within(ns);
    }
    let vm = store.get(&r)?;
    (vm.metadata.uid.as_deref() == Some(uid)).then(|| join_key(namespace, name))
}

/// The key of the cached VM that controls `obj` (an owner reference of kind `VirtualMachine`
/// whose UID matches the cached VM's).
fn controlling_vm<K: Resource>(vms: &VmStoreCell, obj: &K) -> Option<String> {
    let (name, uid) = controller_named(obj, "VirtualMachine")?;
    resolve_vm(vms, obj.meta().namespace.as_deref(), &name, &uid)
}

/// Informer → [`ChangedKeys`]: marks the key `key` gives for the object (before and after an
/// update), while a reader follows the keys; otherwise one atomic load per change.
pub(crate) fn changed_keys_handler<K>(
    changed: ChangedKeys,
    key: fn(&K) -> Option<String>,
) -> Handler<K>
where
    K: Send + Sync + 'static,
{
    Arc::new(move |n: &Notification<K>| {
        if !changed.followed() {
            return;
        }
        let (first, second) = match n {
            Notification::Add(obj) | Notification::Delete { obj, .. } => (key(obj), None),
            Notification::Update { old, new } => (key(new), key(old)),
        };
        for k in [first, second].into_iter().flatten() {
            changed.mark(&k);
        }
    })
}

/// The VM key a launcher pod's progress belongs to: its controller VMI's (a VM's VMI has the
/// VM's name).
pub(crate) fn launcher_pod_vm_key(pod: &CachedPod) -> Option<String> {
    let (name, _) = controller_named(pod, "VirtualMachineInstance")?;
    Some(join_key(pod.meta().namespace.as_deref(), &name))
}

/// VM informer → VM queue: every add/update/delete enqueues the VM's key.
pub(crate) fn vm_handler(vm_queue: QueueSlot) -> Handler<VirtualMachine> {
    Arc::new(move |n: &Notification<VirtualMachine>| match n {
        Notification::Add(vm) | Notification::Delete { obj: vm, .. } => {
            vm_queue.add(key_of(vm.as_ref()))
        }
        Notification::Update { old, new } => {
            if !same_rv(old.as_ref(), new.as_ref()) {
                vm_queue.add(key_of(new.as_ref()));
            }
        }
    })
}

/// VMI informer observer (called *before* the cache applies a change,
/// [`crate::runtime::informer::InformerState::observed_by`]): marks the VM of a VMI that a
/// relist lost ([`crate::controller::context::UnverifiedAbsences`]). Marked after the cache
/// dropped the VMI, a VM worker reading the cache in between would find neither the VMI nor
/// the mark and create a second VMI, which the API server refuses (`AlreadyExists`). The
/// handler ([`vmi_to_vm_handler`]) clears the mark once the VMI is cached again.
pub(crate) fn vmi_relist_marker(
    expectations: Expectations,
    vms: VmStoreCell,
) -> Handler<VirtualMachineInstance> {
    Arc::new(move |n: &Notification<VirtualMachineInstance>| {
        let Notification::Delete {
            obj: vmi,
            relisted: true,
        } = n
        else {
            return;
        };
        if let Some(vm_key) = controlling_vm(&vms, vmi.as_ref()) {
            expectations.vmi_relisted_away.mark(&vm_key);
        }
    })
}

/// VMI informer → VM queue, lowering the VM controller's VMI expectations.
pub(crate) fn vmi_to_vm_handler(
    vm_queue: QueueSlot,
    expectations: Expectations,
    vms: VmStoreCell,
) -> Handler<VirtualMachineInstance> {
    Arc::new(move |n: &Notification<VirtualMachineInstance>| {
        let deletion_observed = |vmi: &VirtualMachineInstance| {
            if let Some(vm_key) = controlling_vm(&vms, vmi) {
                expectations.vmi.deletion_observed(&vm_key, &key_of(vmi));
                vm_queue.add(vm_key);
            }
        };
        // A VMI event of a VM's VMI: its cache entry is current again.
        let seen = |vmi: &VirtualMachineInstance| {
            let ns = vmi.metadata.namespace.as_deref();
            if let Some((name, _)) = controller_named(vmi, "VirtualMachine") {
                expectations.vmi_relisted_away.clear(&join_key(ns, &name));
            }
        };
        // Owned → the owner; orphan → the same-named VM, if any (it may adopt it).
        let enqueue_owner_or_namesake = |vmi: &VirtualMachineInstance, observe_creation: bool| {
            let ns = vmi.metadata.namespace.as_deref();
            match controller_named(vmi, "VirtualMachine") {
                Some((name, uid)) => {
                    if let Some(vm_key) = resolve_vm(&vms, ns, &name, &uid) {
                        if observe_creation {
                            expectations.vmi.creation_observed(&vm_key);
                        }
                        vm_queue.add(vm_key);
                    }
                }
                None if controller_of(&vmi.metadata).is_none() => {
                    let name = vmi.metadata.name.as_deref().unwrap_or("");
                    if let Some(store) = vms.get() {
                        let mut r = ObjectRef::<VirtualMachine>::new(name);
                        if let Some(ns) = ns {
                            r = r.within(ns);
                        }
                        if store.get(&r).is_some() {
                            vm_queue.add(join_key(ns, name));
                        }
                    }
                }
                None => {}
            }
        };
        match n {
            Notification::Add(vmi) => {
                seen(vmi);
                if vmi.metadata.deletion_timestamp.is_some() {
                    deletion_observed(vmi);
                } else {
                    enqueue_owner_or_namesake(vmi, true);
                }
            }
            Notification::Update { old, new } => {
                if same_rv(old.as_ref(), new.as_ref()) {
                    return;
                }
                seen(new);
                if new.metadata.deletion_timestamp.is_some()
                    && old.metadata.deletion_timestamp.is_none()
                {
                    deletion_observed(new);
                }
                if controller_of(old.meta()).map(|r| &r.uid)
                    != controller_of(new.meta()).map(|r| &r.uid)
                {
                    enqueue_owner_or_namesake(old, false);
                }
                enqueue_owner_or_namesake(new, false);
            }
            Notification::Delete { obj, .. } => deletion_observed(obj),
        }
    })
}

/// DataVolume informer → VM queue, lowering DataVolume creation expectations.
pub(crate) fn dv_to_vm_handler(
    vm_queue: QueueSlot,
    expectations: Expectations,
    vms: VmStoreCell,
) -> Handler<DataVolume> {
    Arc::new(move |n: &Notification<DataVolume>| {
        let (dv, added) = match n {
            Notification::Add(dv) => (dv, true),
            Notification::Update { old, new } => {
                if same_rv(old.as_ref(), new.as_ref()) {
                    return;
                }
                (new, false)
            }
            Notification::Delete { obj, .. } => (obj, false),
        };
        if let Some(vm_key) = controlling_vm(&vms, dv.as_ref()) {
            if added {
                expectations.data_volume.creation_observed(&vm_key);
            }
            vm_queue.add(vm_key);
        }
    })
}

/// The VMI cache, bound after the VMI informer starts (the PVC handler finds the VMIs that use
/// a claim in it).
pub(crate) type VmiStoreCell = Arc<OnceLock<Store<VirtualMachineInstance>>>;

/// Whether a volume list names `claim` as a `dataVolume` or a `persistentVolumeClaim`: KubeVirt's
/// `dv` and `pvc` informer indexes (pkg/controller/virtinformers.go:449-480, 603-630).
fn uses_claim(volumes: Option<&[crate::api::vmi::Volume]>, claim: &str) -> bool {
    volumes.unwrap_or_default().iter().any(|v| {
        v.data_volume.as_ref().and_then(|d| d.name.as_deref()) == Some(claim)
            || v.persistent_volume_claim
                .as_ref()
                .and_then(|p| p.claim_name.as_deref())
                == Some(claim)
    })
}

/// Enqueue every VM of the claim's namespace whose template uses it (`listVMsMatchingPVC`,
/// vm.go:2150-2165; the snapshot controller's `handlePVC` the same way).
fn enqueue_vms_using(vm_queue: &QueueSlot, vms: &VmStoreCell, pvc: &PersistentVolumeClaim) {
    let (Some(store), Some(claim)) = (vms.get(), pvc.metadata.name.as_deref()) else {
        return;
    };
    let ns = pvc.metadata.namespace.as_deref();
    for vm in store.state() {
        if vm.metadata.namespace.as_deref() == ns && uses_claim(Some(vm.template_volumes()), claim)
        {
            vm_queue.add(key_of(vm.as_ref()));
        }
    }
}

/// PersistentVolumeClaim informer → VM queue: a claim that appears (not being deleted) enqueues
/// every VM of its namespace whose template uses it (`addPVC` / `listVMsMatchingPVC`,
/// vm.go:2136-2165). Updates and deletions enqueue nothing: the VM controller registers only
/// an add handler (vm.go:213-215).
pub(crate) fn pvc_to_vm_handler(
    vm_queue: QueueSlot,
    vms: VmStoreCell,
) -> Handler<PersistentVolumeClaim> {
    Arc::new(move |n: &Notification<PersistentVolumeClaim>| {
        let Notification::Add(pvc) = n else { return };
        if pvc.metadata.deletion_timestamp.is_some() {
            return;
        }
        enqueue_vms_using(&vm_queue, &vms, pvc);
    })
}

/// PersistentVolumeClaim informer → VM queue for `status.volumeSnapshotStatuses`: a claim
/// deleted, or whose `spec.storageClassName` changed, enqueues every VM of its namespace whose
/// template uses it. KubeVirt's snapshot controller enqueues those VMs on every claim event
/// (`handlePVC`, pkg/storage/snapshot/snapshot_base.go:590-607); these are the events that can
/// change the VM's entries (additions are [`pvc_to_vm_handler`]'s).
pub(crate) fn pvc_snapshot_status_handler(
    vm_queue: QueueSlot,
    vms: VmStoreCell,
) -> Handler<PersistentVolumeClaim> {
    Arc::new(move |n: &Notification<PersistentVolumeClaim>| {
        let pvc = match n {
            Notification::Delete { obj, .. } => obj,
            Notification::Update { old, new } => {
                let class = |p: &PersistentVolumeClaim| {
                    p.spec.as_ref().and_then(|s| s.storage_class_name.clone())
                };
                if class(old) == class(new) {
                    return;
                }
                new
            }
            _ => return,
        };
        enqueue_vms_using(&vm_queue, &vms, pvc);
    })
}

/// VolumeSnapshotClass informer → VM queue: any add, update or deletion enqueues every cached
/// VM, as KubeVirt's snapshot controller does (`handleVolumeSnapshotClass`,
/// snapshot_base.go:500-510); the class decides every VM's `volumeSnapshotStatuses`.
pub(crate) fn snapshot_class_to_vm_handler(
    vm_queue: QueueSlot,
    vms: VmStoreCell,
) -> Handler<VolumeSnapshotClass> {
    Arc::new(move |_: &Notification<VolumeSnapshotClass>| {
        let Some(store) = vms.get() else { return };
        for vm in store.state() {
            vm_queue.add(key_of(vm.as_ref()));
        }
    })
}

/// PersistentVolumeClaim informer → VMI queue (`addPVC` / `updatePVC` / `listVMIsMatchingDV`,
/// pkg/virt-controller/watch/vmi/storage.go:43-109): a claim that appears, or whose
/// `status.capacity` or `spec.resources.requests` changes, enqueues every VMI of its namespace
/// that uses it; claims being deleted and resyncs enqueue nothing. A backend-storage claim that
/// appears (label `persistent-state-for=<VMI>`) settles that VMI's claim-creation expectation
/// and enqueues it (storage.go:48-53).
pub(crate) fn pvc_to_vmi_handler(
    vmi_queue: QueueSlot,
    vmis: VmiStoreCell,
    expectations: Expectations,
) -> Handler<PersistentVolumeClaim> {
    Arc::new(move |n: &Notification<PersistentVolumeClaim>| {
        let pvc = match n {
            Notification::Add(pvc) => {
                let backend = pvc
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(crate::launcher::backend_storage::PVC_PREFIX));
                if let Some(vmi) = backend.filter(|_| pvc.metadata.deletion_timestamp.is_none()) {
                    let key = join_key(pvc.metadata.namespace.as_deref(), vmi);
                    expectations.pvc.creation_observed(&key);
                    vmi_queue.add(key);
                    return;
                }
                pvc
            }
            Notification::Update { old, new } => {
                let size = |p: &PersistentVolumeClaim| {
                    (
                        p.status.as_ref().and_then(|s| s.capacity.clone()),
                        p.spec
                            .as_ref()
                            .and_then(|s| s.resources.as_ref())
                            .and_then(|r| r.requests.clone()),
                    )
                };
                if same_rv(old.as_ref(), new.as_ref()) || size(old) == size(new) {
                    return;
                }
                new
            }
            Notification::Delete { .. } => return,
        };
        if pvc.metadata.deletion_timestamp.is_some() {
            return;
        }
        let (Some(store), Some(claim)) = (vmis.get(), pvc.metadata.name.as_deref()) else {
            return;
        };
        let ns = pvc.metadata.namespace.as_deref();
        for vmi in store.state() {
            if vmi.metadata.namespace.as_deref() == ns
                && uses_claim(vmi.spec.volumes.as_deref(), claim)
            {
                vmi_queue.add(key_of(vmi.as_ref()));
            }
        }
    })
}

/// DataVolume informer → VMI queue (`addDataVolume` / `updateDataVolume` / `deleteDataVolume`,
/// pkg/virt-controller/watch/vmi/datavolumes.go:38-113, `listVMIsMatchingDV`,
/// vmi/storage.go:95-109): every VMI of the DataVolume's namespace with a `dataVolume` or
/// `persistentVolumeClaim` volume of that name, on any change but a resync. A VMI waits on its
/// DataVolumes: for the import to finish, or, while one waits for its first consumer, with a
/// temporary pod (lifecycle.go:110-114, 188-193).
pub(crate) fn dv_to_vmi_handler(vmi_queue: QueueSlot, vmis: VmiStoreCell) -> Handler<DataVolume> {
    Arc::new(move |n: &Notification<DataVolume>| {
        let dv = match n {
            Notification::Add(dv) | Notification::Delete { obj: dv, .. } => dv,
            Notification::Update { old, new } => {
                if same_rv(old.as_ref(), new.as_ref()) {
                    return;
                }
                new
            }
        };
        let (Some(store), Some(name)) = (vmis.get(), dv.metadata.name.as_deref()) else {
            return;
        };
        let ns = dv.metadata.namespace.as_deref();
        for vmi in store.state() {
            if vmi.metadata.namespace.as_deref() == ns
                && uses_claim(vmi.spec.volumes.as_deref(), name)
            {
                vmi_queue.add(key_of(vmi.as_ref()));
            }
        }
    })
}

/// VMI informer → VMI queue; any event for a VMI settles its self-update expectation.
pub(crate) fn vmi_handler(
    vmi_queue: QueueSlot,
    expectations: Expectations,
) -> Handler<VirtualMachineInstance> {
    Arc::new(move |n: &Notification<VirtualMachineInstance>| {
        let vmi = match n {
            Notification::Add(v) | Notification::Delete { obj: v, .. } => v,
            Notification::Update { old, new } => {
                if same_rv(old.as_ref(), new.as_ref()) {
                    return;
                }
                new
            }
        };
        let key = key_of(vmi.as_ref());
        expectations.vmi_self.set_expectations(&key, 0, 0);
        vmi_queue.add(key);
    })
}

/// The pod cache, bound after the pod informer starts (its own handler resolves an attachment
/// pod through the launcher pod that owns it).
pub(crate) type PodStoreCell = Arc<OnceLock<Store<CachedPod>>>;

/// The VMI key of a pod: its controller VMI, or for a hotplug attachment pod (controlled by a
/// pod) the VMI of that launcher pod, found in the cache by name and UID
/// (`resolveControllerRef`, vmi.go:539-560).
fn pod_owner_vmi_key(pods: &PodStoreCell, pod: &CachedPod) -> Option<String> {
    let ns = pod.meta().namespace.as_deref();
    let vmi_of = |p: &CachedPod| {
        controller_named(p, "VirtualMachineInstance").map(|(name, _)| join_key(ns, &name))
    };
    if let Some(key) = vmi_of(pod) {
        return Some(key);
    }
    let (owner, uid) = controller_named(pod, "Pod")?;
    let mut r = ObjectRef::<CachedPod>::new(&owner);
    if let Some(ns) = ns {
        r = r.within(ns);
    }
    let launcher = pods.get()?.get(&r)?;
    (launcher.meta().uid.as_deref() == Some(uid.as_str()))
        .then(|| vmi_of(&launcher))
        .flatten()
}

/// KubeVirt main's fallback for a deleted pod whose owner chain cannot be resolved (PR 18222,
/// `onPodDelete` in pkg/virt-controller/watch/vmi/vmi.go): the VMI that the pod's
/// `kubevirt.io/owner-vmi-name` annotation names in the pod's namespace, if the cache holds it
/// with the UID of `kubevirt.io/owner-vmi-uid`. The annotations are a hint, never trusted
/// alone: a VMI not in the cache, or of another UID, is not enqueued.
fn vmi_key_from_owner_annotations(vmis: &VmiStoreCell, pod: &CachedPod) -> Option<String> {
    use crate::api::annotations::{OWNER_VMI_NAME, OWNER_VMI_UID};
    let (name, uid) = (
        pod.annotation(OWNER_VMI_NAME)?,
        pod.annotation(OWNER_VMI_UID)?,
    );
    let ns = pod.meta().namespace.as_deref();
    let mut r = ObjectRef::<VirtualMachineInstance>::new(name);
    if let Some(ns) = ns {
        r = r.within(ns);
    }
    let vmi = vmis.get()?.get(&r)?;
    (vmi.metadata.uid.as_deref() == Some(uid)).then(|| join_key(ns, name))
}

/// Pod informer → VMI queue, lowering pod expectations of the owning VMI (attachment pods
/// count for the VMI of their launcher pod, as KubeVirt's `createPod(vmiKey, …)` expects them).
/// `owner_annotations`: the VMI cache on releases with PR 18222
/// ([`ControllerRules::attachment_pod_owner_annotations`]), where a deleted pod whose owner
/// chain is gone is matched by its owner annotations ([`vmi_key_from_owner_annotations`]);
/// `None` up to v1.9.0, which drops that delete (vmi.go:457-461).
///
/// [`ControllerRules::attachment_pod_owner_annotations`]: crate::kubevirt_version::ControllerRules
pub(crate) fn pod_to_vmi_handler(
    vmi_queue: QueueSlot,
    expectations: Expectations,
    pods: PodStoreCell,
    owner_annotations: Option<VmiStoreCell>,
) -> Handler<CachedPod> {
    Arc::new(move |n: &Notification<CachedPod>| {
        let owner_key = |pod: &CachedPod| pod_owner_vmi_key(&pods, pod);
        match n {
            Notification::Add(pod) => {
                if let Some(vmi_key) = owner_key(pod) {
                    if pod.meta().deletion_timestamp.is_some() {
                        expectations
                            .pod
                            .deletion_observed(&vmi_key, &key_of(pod.as_ref()));
                    } else {
                        expectations.pod.creation_observed(&vmi_key);
                    }
                    vmi_queue.add(vmi_key);
                }
            }
            Notification::Update { old, new } => {
                if same_rv(old.as_ref(), new.as_ref()) {
                    return;
                }
                if let Some(vmi_key) = owner_key(new) {
                    if new.meta().deletion_timestamp.is_some()
                        && old.meta().deletion_timestamp.is_none()
                    {
                        expectations
                            .pod
                            .deletion_observed(&vmi_key, &key_of(new.as_ref()));
                    }
                    vmi_queue.add(vmi_key);
                }
                if let Some(old_key) = owner_key(old)
                    && Some(&old_key) != owner_key(new).as_ref()
                {
                    vmi_queue.add(old_key);
                }
            }
            Notification::Delete { obj, .. } => {
                let recovered = || {
                    let vmis = owner_annotations.as_ref()?;
                    vmi_key_from_owner_annotations(vmis, obj)
                };
                if let Some(vmi_key) = owner_key(obj).or_else(recovered) {
                    expectations
                        .pod
                        .deletion_observed(&vmi_key, &key_of(obj.as_ref()));
                    vmi_queue.add(vmi_key);
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::runtime::queue::WorkQueue;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use kube::runtime::watcher;

    /// A term's queue in its slot (the controller leads), and fresh expectations.
    fn leading() -> (WorkQueue, QueueSlot, Expectations) {
        let q = WorkQueue::new("t");
        let slot = QueueSlot::default();
        slot.set(Some(q.clone()));
        (q, slot, Expectations::default())
    }

    fn meta(name: &str, uid: &str, rv: &str, owner: Option<(&str, &str, &str)>) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("ns".into()),
            uid: Some(uid.into()),
            resource_version: Some(rv.into()),
            owner_references: owner.map(|(kind, name, uid)| {
                vec![OwnerReference {
                    api_version: "kubevirt.io/v1".into(),
                    kind: kind.into(),
                    name: name.into(),
                    uid: uid.into(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                }]
            }),
            ..Default::default()
        }
    }

    fn drain(q: &WorkQueue) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(k) = q.try_get() {
            q.done(&k);
            out.push(k);
        }
        out
    }

    fn vm_store(vms: &[VirtualMachine]) -> VmStoreCell {
        let mut state = crate::runtime::informer::InformerState::<VirtualMachine>::new();
        state.apply(watcher::Event::Init);
        for vm in vms {
            state.apply(watcher::Event::InitApply(vm.clone()));
        }
        state.apply(watcher::Event::InitDone);
        let cell = VmStoreCell::default();
        let _ = cell.set(state.store());
        cell
    }

    fn vm(name: &str, uid: &str) -> VirtualMachine {
        VirtualMachine {
            metadata: meta(name, uid, "1", None).into(),
            ..Default::default()
        }
    }

    fn vmi(name: &str, rv: &str, owner: Option<(&str, &str, &str)>) -> VirtualMachineInstance {
        VirtualMachineInstance {
            metadata: meta(name, "vmi-uid", rv, owner).into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn vmi_add_lowers_creation_expectation_of_the_owner_with_matching_uid() {
        let (q, slot, exp) = leading();
        let h = vmi_to_vm_handler(slot, exp.clone(), vm_store(&[vm("a", "uid-a")]));
        exp.vmi.expect_creations("ns/a", 1);
        assert!(!exp.vmi.satisfied_expectations("ns/a"));
        // Owner with a different UID (a recreated VM): not resolved.
        h(&Notification::Add(Arc::new(vmi(
            "a",
            "1",
            Some(("VirtualMachine", "a", "old-uid")),
        ))));
        assert!(!exp.vmi.satisfied_expectations("ns/a"));
        assert!(drain(&q).is_empty());
        h(&Notification::Add(Arc::new(vmi(
            "a",
            "2",
            Some(("VirtualMachine", "a", "uid-a")),
        ))));
        assert!(exp.vmi.satisfied_expectations("ns/a"));
        assert_eq!(drain(&q), ["ns/a"]);
    }

    #[tokio::test]
    async fn orphan_vmi_enqueues_the_namesake_vm_and_deletes_are_observed() {
        let (q, slot, exp) = leading();
        let h = vmi_to_vm_handler(slot, exp.clone(), vm_store(&[vm("a", "uid-a")]));
        h(&Notification::Add(Arc::new(vmi("a", "1", None))));
        h(&Notification::Add(Arc::new(vmi("b", "1", None))));
        assert_eq!(drain(&q), ["ns/a"]);

        exp.vmi.expect_deletions("ns/a", vec!["ns/a".into()]);
        let owned = Arc::new(vmi("a", "3", Some(("VirtualMachine", "a", "uid-a"))));
        // Same resourceVersion: a resync, ignored.
        h(&Notification::Update {
            old: owned.clone(),
            new: owned.clone(),
        });
        assert!(drain(&q).is_empty());
        h(&Notification::Delete {
            obj: owned,
            relisted: true,
        });
        assert!(exp.vmi.satisfied_expectations("ns/a"));
        assert_eq!(drain(&q), ["ns/a"]);
    }

    #[tokio::test]
    async fn a_vmi_lost_in_a_relist_is_marked_until_it_is_seen_again() {
        let (q, slot, exp) = leading();
        let vms = vm_store(&[vm("a", "uid-a")]);
        let mark = vmi_relist_marker(exp.clone(), vms.clone());
        let h = vmi_to_vm_handler(slot, exp.clone(), vms);
        let owned = |rv: &str| Arc::new(vmi("a", rv, Some(("VirtualMachine", "a", "uid-a"))));
        let deleted = |relisted| Notification::Delete {
            obj: owned("1"),
            relisted,
        };
        mark(&deleted(false));
        h(&deleted(false));
        assert!(!exp.vmi_relisted_away.contains("ns/a"), "a DELETED is sure");
        mark(&deleted(true));
        assert!(exp.vmi_relisted_away.contains("ns/a"));
        h(&deleted(true));
        mark(&Notification::Add(owned("2")));
        assert!(exp.vmi_relisted_away.contains("ns/a"), "not cached yet");
        h(&Notification::Add(owned("2")));
        assert!(!exp.vmi_relisted_away.contains("ns/a"), "seen again");
        assert_eq!(drain(&q), ["ns/a"]);
    }

    /// The mark is set while the cache still holds the VMI a relist lost, not after: a VM
    /// worker reading the cache between the relist and the handlers would otherwise find
    /// neither and create a second VMI (`lost_events`' stale-relist test did, under load).
    #[tokio::test]
    async fn a_vmi_a_relist_loses_is_marked_before_the_cache_drops_it() {
        use crate::runtime::informer::InformerState;
        let (_q, _slot, exp) = leading();
        let vms = vm_store(&[vm("a", "uid-a")]);
        let cache: Arc<std::sync::OnceLock<crate::runtime::store::Store<VirtualMachineInstance>>> =
            Arc::default();
        let seen: Arc<std::sync::Mutex<Vec<(bool, bool)>>> = Arc::default();
        let check: Handler<VirtualMachineInstance> = {
            let (cache, seen, exp) = (cache.clone(), seen.clone(), exp.clone());
            Arc::new(move |_: &Notification<VirtualMachineInstance>| {
                let cached = cache
                    .get()
                    .is_some_and(|s| s.get(&ObjectRef::new("a").within("ns")).is_some());
                let marked = exp.vmi_relisted_away.contains("ns/a");
                seen.lock().unwrap().push((marked, cached));
            })
        };
        let mut state = InformerState::<VirtualMachineInstance>::new()
            .observed_by(vmi_relist_marker(exp.clone(), vms))
            .observed_by(check);
        let _ = cache.set(state.store());
        let owned = vmi("a", "1", Some(("VirtualMachine", "a", "uid-a")));
        state.apply(watcher::Event::Init);
        state.apply(watcher::Event::InitApply(owned));
        state.apply(watcher::Event::InitDone);
        // A relist without it; no handler has run when `apply` returns.
        state.apply(watcher::Event::Init);
        let lost = state.apply(watcher::Event::InitDone);
        assert_eq!(lost.len(), 1);
        assert!(exp.vmi_relisted_away.contains("ns/a"));
        assert_eq!(*seen.lock().unwrap(), [(false, false), (true, true)]);
    }

    #[tokio::test]
    async fn standby_drops_keys() {
        let slot = QueueSlot::default();
        let h = vm_handler(slot.clone());
        h(&Notification::Add(Arc::new(vm("a", "u"))));
        let q = WorkQueue::new("t");
        slot.set(Some(q.clone()));
        assert!(drain(&q).is_empty());
        h(&Notification::Add(Arc::new(vm("a", "u"))));
        assert_eq!(drain(&q), ["ns/a"]);
    }

    fn claim(
        ns: &str,
        name: &str,
        rv: &str,
        phase: &str,
        size: &str,
    ) -> Arc<PersistentVolumeClaim> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": ns, "resourceVersion": rv},
                "spec": {"resources": {"requests": {"storage": "1Gi"}}},
                "status": {"phase": phase, "capacity": {"storage": size}}
            }))
            .expect("PVC"),
        )
    }

    fn vmi_store(vmis: &[VirtualMachineInstance]) -> VmiStoreCell {
        let mut state = crate::runtime::informer::InformerState::new();
        state.apply(watcher::Event::Init);
        for vmi in vmis {
            state.apply(watcher::Event::InitApply(vmi.clone()));
        }
        state.apply(watcher::Event::InitDone);
        let cell = VmiStoreCell::default();
        let _ = cell.set(state.store());
        cell
    }

    /// vm.go:2136-2165, 213-215: a new claim enqueues the VMs of its namespace whose template
    /// names it (as a dataVolume or a claim); updates and deletions enqueue nothing.
    #[tokio::test]
    async fn a_new_claim_enqueues_the_vms_that_use_it() {
        let (q, slot, _) = leading();
        let with_volumes = |name: &str, volumes: serde_json::Value| -> VirtualMachine {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name},
                "spec": {"template": {"spec": {"domain": {}, "volumes": volumes}}}
            }))
            .expect("VM")
        };
        let vms = vm_store(&[
            with_volumes(
                "a",
                serde_json::json!([{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]),
            ),
            with_volumes(
                "b",
                serde_json::json!([{"name": "d", "dataVolume": {"name": "c"}}]),
            ),
            with_volumes(
                "other",
                serde_json::json!([{"name": "d", "dataVolume": {"name": "x"}}]),
            ),
        ]);
        let h = pvc_to_vm_handler(slot, vms);
        h(&Notification::Add(claim(
            "elsewhere",
            "c",
            "1",
            "Pending",
            "1Gi",
        )));
        assert!(drain(&q).is_empty(), "another namespace");
        h(&Notification::Add(claim("ns", "c", "1", "Pending", "1Gi")));
        let mut keys = drain(&q);
        keys.sort();
        assert_eq!(keys, ["ns/a", "ns/b"]);
        h(&Notification::Update {
            old: claim("ns", "c", "1", "Pending", "1Gi"),
            new: claim("ns", "c", "2", "Bound", "2Gi"),
        });
        h(&Notification::Delete {
            obj: claim("ns", "c", "2", "Bound", "2Gi"),
            relisted: false,
        });
        assert!(drain(&q).is_empty(), "only adds enqueue VMs");
    }

    /// vmi/storage.go:43-109: a new claim, or a change of its capacity or requests, enqueues
    /// the VMIs that use it; a phase change alone, a resync or a deletion does not.
    #[tokio::test]
    async fn claim_changes_of_size_enqueue_the_vmis_that_use_it() {
        let (q, slot, exp) = leading();
        let user: VirtualMachineInstance = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "v", "namespace": "ns"},
            "spec": {"domain": {}, "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]}
        }))
        .expect("VMI");
        let h = pvc_to_vmi_handler(
            slot,
            vmi_store(&[user, vmi("unrelated", "1", None)]),
            exp.clone(),
        );
        h(&Notification::Add(claim("ns", "c", "1", "Pending", "1Gi")));
        assert_eq!(drain(&q), ["ns/v"]);
        h(&Notification::Update {
            old: claim("ns", "c", "1", "Pending", "1Gi"),
            new: claim("ns", "c", "2", "Bound", "1Gi"),
        });
        assert!(drain(&q).is_empty(), "same size");
        h(&Notification::Update {
            old: claim("ns", "c", "2", "Bound", "1Gi"),
            new: claim("ns", "c", "3", "Bound", "2Gi"),
        });
        assert_eq!(drain(&q), ["ns/v"]);
        h(&Notification::Delete {
            obj: claim("ns", "c", "3", "Bound", "2Gi"),
            relisted: false,
        });
        assert!(drain(&q).is_empty());
        // A backend-storage claim names its VMI by label and settles the creation
        // expectation (storage.go:48-53).
        exp.pvc.expect_creations("ns/tpm-vm", 1);
        let mut backend = (*claim(
            "ns",
            "persistent-state-for-tpm-vm-x1",
            "4",
            "Pending",
            "10Mi",
        ))
        .clone();
        backend.metadata.labels =
            Some([("persistent-state-for".to_string(), "tpm-vm".to_string())].into());
        h(&Notification::Add(std::sync::Arc::new(backend)));
        assert_eq!(drain(&q), ["ns/tpm-vm"]);
        assert!(exp.pvc.satisfied_expectations("ns/tpm-vm"));
    }

    #[tokio::test]
    async fn pods_map_to_their_vmi_and_lower_pod_expectations() {
        let (q, slot, exp) = leading();
        let h = pod_to_vmi_handler(slot, exp.clone(), PodStoreCell::default(), None);
        let pod = |rv: &str, deleting: bool| {
            let mut m = meta(
                "virt-launcher-a-xyz",
                "pod-uid",
                rv,
                Some(("VirtualMachineInstance", "a", "vmi-uid")),
            );
            if deleting {
                m.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            }
            Arc::new(CachedPod::from_metadata(m))
        };
        exp.pod.expect_creations("ns/a", 1);
        h(&Notification::Add(pod("1", false)));
        assert!(exp.pod.satisfied_expectations("ns/a"));
        exp.pod
            .expect_deletions("ns/a", vec!["ns/virt-launcher-a-xyz".into()]);
        h(&Notification::Update {
            old: pod("1", false),
            new: pod("2", true),
        });
        assert!(exp.pod.satisfied_expectations("ns/a"));
        assert_eq!(drain(&q), ["ns/a"]);
    }

    /// PR 18222 (main): a deleted attachment pod whose launcher pod already left the cache is
    /// matched to its VMI by its owner annotations, if the cached VMI of that name has that UID
    /// (the delete is then observed and the VMI enqueued); v1.9.0 drops the delete.
    #[tokio::test]
    async fn a_deleted_attachment_pod_without_its_launcher_is_found_by_its_annotations() {
        let attachment = |vmi_uid: &str| {
            let mut m = meta(
                "hp-volume-x",
                "hp-uid",
                "3",
                Some(("Pod", "virt-launcher-a-xyz", "launcher-uid")),
            );
            m.annotations = Some(
                [
                    ("kubevirt.io/owner-vmi-name".to_string(), "a".to_string()),
                    ("kubevirt.io/owner-vmi-uid".to_string(), vmi_uid.to_string()),
                ]
                .into(),
            );
            Arc::new(CachedPod::from_metadata(m))
        };
        let delete = |pod: Arc<CachedPod>| Notification::Delete {
            obj: pod,
            relisted: false,
        };
        for (fallback, uid, found) in [
            (false, "vmi-uid", false),
            (true, "vmi-uid", true),
            (true, "another-uid", false),
        ] {
            let (q, slot, exp) = leading();
            // An empty pod cache: the launcher pod is gone.
            let pods = PodStoreCell::default();
            let vmis = fallback.then(|| vmi_store(&[vmi("a", "1", None)]));
            let h = pod_to_vmi_handler(slot, exp.clone(), pods, vmis);
            exp.pod
                .expect_deletions("ns/a", vec!["ns/hp-volume-x".into()]);
            h(&delete(attachment(uid)));
            let keys: Vec<String> = if found { vec!["ns/a".into()] } else { vec![] };
            assert_eq!(drain(&q), keys, "fallback {fallback}, uid {uid}");
            assert_eq!(exp.pod.satisfied_expectations("ns/a"), found);
        }
    }

    /// datavolumes.go:38-113, vmi/storage.go:95-109: a DataVolume's add, change and deletion
    /// enqueue the VMIs of its namespace that use it by name; a resync does not.
    #[tokio::test]
    async fn a_data_volume_change_enqueues_the_vmis_that_use_it() {
        let (q, slot, _) = leading();
        let with_volumes = |name: &str, volumes: serde_json::Value| -> VirtualMachineInstance {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name},
                "spec": {"domain": {}, "volumes": volumes}
            }))
            .expect("VMI")
        };
        let vmis = vmi_store(&[
            with_volumes(
                "a",
                serde_json::json!([{"name": "d", "dataVolume": {"name": "dv"}}]),
            ),
            with_volumes(
                "b",
                serde_json::json!([{"name": "d", "persistentVolumeClaim": {"claimName": "dv"}}]),
            ),
            with_volumes(
                "other",
                serde_json::json!([{"name": "d", "dataVolume": {"name": "x"}}]),
            ),
        ]);
        let h = dv_to_vmi_handler(slot, vmis);
        let dv = |rv: &str| -> Arc<DataVolume> {
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "dv", "namespace": "ns", "resourceVersion": rv},
                    "spec": {}
                }))
                .expect("DataVolume"),
            )
        };
        h(&Notification::Add(dv("1")));
        let mut keys = drain(&q);
        keys.sort();
        assert_eq!(keys, ["ns/a", "ns/b"]);
        h(&Notification::Update {
            old: dv("1"),
            new: dv("1"),
        });
        assert!(drain(&q).is_empty(), "a resync enqueues nothing");
        h(&Notification::Update {
            old: dv("1"),
            new: dv("2"),
        });
        assert_eq!(drain(&q).len(), 2);
        h(&Notification::Delete {
            obj: dv("2"),
            relisted: false,
        });
        assert_eq!(drain(&q).len(), 2);
    }

    #[test]
    fn changed_keys_follow_vms_vmis_and_launcher_pods_once_followed() {
        use crate::controller::common::record::ChangedKeys;
        let changed = ChangedKeys::default();
        let vm_handler =
            changed_keys_handler(changed.clone(), |vm: &VirtualMachine| Some(key_of(vm)));
        let pod_handler = changed_keys_handler(changed.clone(), launcher_pod_vm_key);
        let vm: VirtualMachine = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "a", "namespace": "ns"}, "spec": {}
        }))
        .unwrap();
        let pod = |owner_kind: &str| -> CachedPod {
            serde_json::from_value(serde_json::json!({"metadata": {
                "name": "virt-launcher-b-x", "namespace": "ns",
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": owner_kind,
                    "name": "b", "uid": "u", "controller": true}]
            }}))
            .unwrap()
        };
        vm_handler(&Notification::Add(Arc::new(vm.clone())));
        assert!(
            changed.take().is_empty(),
            "nothing kept before a reader follows"
        );
        changed.follow();
        vm_handler(&Notification::Update {
            old: Arc::new(vm.clone()),
            new: Arc::new(vm.clone()),
        });
        pod_handler(&Notification::Delete {
            obj: Arc::new(pod("VirtualMachineInstance")),
            relisted: false,
        });
        pod_handler(&Notification::Add(Arc::new(pod("ReplicaSet"))));
        let taken: Vec<String> = changed.take().into_iter().collect();
        assert_eq!(taken, ["ns/a", "ns/b"]);
    }
}
