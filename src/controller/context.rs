//! What the VM and VMI controllers share: the client, the informer caches, the work queues of
//! the current leadership term, the expectations stores, the event sink, and the record of the
//! last reconcile of every key (for `/debug/state` and the inspector).
//!
//! KubeVirt equivalent: the fields of `VMController` / `Controller` in
//! pkg/virt-controller/watch/vm/vm.go:140-180 and watch/vmi/vmi.go:80-110.

use super::cluster_config::ClusterConfig;
use crate::api::{DataVolume, KubeVirt, VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterSettings;
use crate::launcher::resources::NamespaceContext;
use crate::runtime::expectations::{ControllerExpectations, UidTrackingControllerExpectations};
use crate::runtime::informer::Informer;
use crate::runtime::metrics::Metrics;
use crate::runtime::mutation_cache::MutationCache;
use crate::runtime::queue::WorkQueue;
use crate::runtime::recorder::{COMPONENT, Event, Recorder};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{
    Namespace, Node, ObjectReference, PersistentVolumeClaim, ResourceQuota,
};
use kube::runtime::reflector::ObjectRef;
use serde::Serialize;
use std::sync::{Arc, RwLock};
use tokio::sync::mpsc;

/// The informer caches the controllers read (never write) from.
#[derive(Clone)]
pub struct Caches {
    pub vms: Informer<VirtualMachine>,
    pub vmis: Informer<VirtualMachineInstance>,
    /// Pods with the `kubevirt.io` label: virt-launcher and hotplug attachment pods.
    pub pods: Informer<crate::controller::vmi::launcher_cache::CachedPod>,
    pub revisions: Informer<ControllerRevision>,
    /// Empty and synced when the cluster has no CDI (DataVolume CRD absent).
    pub data_volumes: Informer<DataVolume>,
    /// Namespaces (every one, or only `--namespace`'s): their labels decide the automatic
    /// limits of launcher pods (KubeVirt's TemplateService `namespaceStore`).
    pub namespaces: Informer<Namespace>,
    /// ResourceQuotas: one with `limits.cpu` / `limits.memory` in a VMI's namespace makes the
    /// launcher pod carry that limit (TemplateService `resourceQuotaStore`).
    pub resource_quotas: Informer<ResourceQuota>,
    /// PersistentVolumeClaims: what the VMI controller waits for before it creates a launcher
    /// pod, and what the VM's printableStatus reads (KubeVirt's `pvcInformer`,
    /// pkg/controller/virtinformers.go:1167-1173).
    pub pvcs: Informer<PersistentVolumeClaim>,
    /// The KubeVirt CRs of KubeVirt's namespace, whose configuration the controllers render
    /// with ([`ClusterConfig`]); disabled when the settings are fixed or the CRD is not served.
    /// KubeVirt waits for this cache before it starts (application.go:358).
    pub kubevirts: Informer<KubeVirt>,
    /// The instancetypes and preferences VMs name (`instancetype.kubevirt.io/v1beta1`).
    pub instancetypes: super::instancetype_cache::InstancetypeCaches,
    /// StorageClasses, StorageProfiles, VolumeSnapshotClasses (the VMs' volume snapshot
    /// statuses).
    pub storage: super::storage_cache::StorageCaches,
    /// Nodes, each reduced to its name and the two labels the topology hinter reads
    /// ([`super::vmi::topology::node_for_cache`]): virt-controller's node informer
    /// (application.go:387, virtinformers.go:597-602), read by the VMI controller's hinter
    /// (application.go:723). Disabled (empty, synced) when the controller may not list nodes.
    pub nodes: Informer<Node>,
}

impl Caches {
    /// True when every cache completed its first list (client-go `WaitForCacheSync`).
    pub fn all_synced(&self) -> bool {
        self.vms.has_synced()
            && self.vmis.has_synced()
            && self.pods.has_synced()
            && self.revisions.has_synced()
            && self.data_volumes.has_synced()
            && self.namespaces.has_synced()
            && self.resource_quotas.has_synced()
            && self.pvcs.has_synced()
            && self.kubevirts.has_synced()
            && self.instancetypes.has_synced()
            && self.storage.has_synced()
            && self.nodes.has_synced()
    }

    /// Wait for every cache's first list.
    pub(crate) async fn wait_synced(&self) {
        self.vms.wait_synced().await;
        self.vmis.wait_synced().await;
        self.pods.wait_synced().await;
        self.revisions.wait_synced().await;
        self.data_volumes.wait_synced().await;
        self.namespaces.wait_synced().await;
        self.resource_quotas.wait_synced().await;
        self.pvcs.wait_synced().await;
        self.kubevirts.wait_synced().await;
        self.instancetypes.wait_synced().await;
        self.storage.wait_synced().await;
        self.nodes.wait_synced().await;
    }

    /// Caches that never watch: empty and synced (unit tests, dry runs).
    pub fn disabled() -> Self {
        Caches {
            vms: Informer::disabled("virtualmachines"),
            vmis: Informer::disabled("virtualmachineinstances"),
            pods: Informer::disabled("pods"),
            revisions: Informer::disabled("controllerrevisions"),
            data_volumes: Informer::disabled("datavolumes"),
            namespaces: Informer::disabled("namespaces"),
            resource_quotas: Informer::disabled("resourcequotas"),
            pvcs: Informer::disabled("persistentvolumeclaims"),
            kubevirts: Informer::disabled("kubevirts"),
            instancetypes: super::instancetype_cache::InstancetypeCaches::disabled(),
            storage: super::storage_cache::StorageCaches::disabled(),
            nodes: Informer::disabled("nodes"),
        }
    }

    /// What the launcher renderer knows of `namespace` from the caches: its labels, its
    /// ResourceQuotas' limits, the auto-CPU-limit selector ([`NamespaceContext::from_cluster`]).
    pub fn namespace_context(
        &self,
        namespace: &str,
        settings: &ClusterSettings,
    ) -> NamespaceContext {
        let ns = self
            .namespaces
            .store()
            .get(&kube::runtime::reflector::ObjectRef::new(namespace));
        let quotas = self.resource_quotas.store().state();
        NamespaceContext::from_cluster(
            ns.as_deref(),
            quotas
                .iter()
                .map(|q| q.as_ref())
                .filter(|q| q.metadata.namespace.as_deref() == Some(namespace)),
            settings,
        )
    }
}

/// The work queue of the current leadership term, or none while standing by. Event handlers
/// add keys through it; on standby the keys are dropped (the next term enqueues every object
/// from the caches anyway, as KubeVirt's informers do when they start on leadership).
#[derive(Clone, Default)]
pub struct QueueSlot {
    inner: Arc<RwLock<Option<WorkQueue>>>,
}

impl QueueSlot {
    /// Install the queue of a new term (or `None` when the term ends).
    pub(crate) fn set(&self, queue: Option<WorkQueue>) {
        *self.inner.write().unwrap_or_else(|e| e.into_inner()) = queue;
    }

    /// The current queue, if leading.
    pub fn get(&self) -> Option<WorkQueue> {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Enqueue a key if leading.
    pub fn add(&self, key: String) {
        if let Some(q) = self.get() {
            q.add(key);
        }
    }
}

/// The expectations stores, named as in KubeVirt.
#[derive(Clone)]
pub struct Expectations {
    /// VM controller: VMI creations/deletions per VM key (vm.go:167).
    pub vmi: UidTrackingControllerExpectations,
    /// VM controller: DataVolume creations per VM key (vm.go:168).
    pub data_volume: UidTrackingControllerExpectations,
    /// VMI controller: pod creations/deletions per VMI key (vmi.go:94).
    pub pod: UidTrackingControllerExpectations,
    /// VMI controller: its own VMI updates (vmi.go:95).
    pub vmi_self: ControllerExpectations,
    /// VMI controller: backend-storage claim creations per VMI key (vmi.go:96).
    pub pvc: ControllerExpectations,
    /// VM controller: VM keys whose VMI left the cache in a relist ([`UnverifiedAbsences`]).
    pub vmi_relisted_away: UnverifiedAbsences,
    /// Cached pods and VMIs still being deleted long after they should be gone
    /// ([`OverdueDeletions`]).
    pub(crate) overdue: OverdueDeletions,
}

impl Default for Expectations {
    fn default() -> Self {
        Expectations {
            vmi: UidTrackingControllerExpectations::new("vm-vmi"),
            data_volume: UidTrackingControllerExpectations::new("vm-datavolume"),
            pod: UidTrackingControllerExpectations::new("vmi-pod"),
            vmi_self: ControllerExpectations::new("vmi-self"),
            pvc: ControllerExpectations::new("vmi-pvc"),
            vmi_relisted_away: UnverifiedAbsences::default(),
            overdue: OverdueDeletions::new(crate::runtime::expectations::EXPECTATIONS_TIMEOUT),
        }
    }
}

/// Keys whose object the cache lost in a relist rather than through a `DELETED` event.
///
/// A relist reports every cached object it does not list as deleted (client-go's
/// `DeletedFinalStateUnknown`); a list older than the cache (a lagging watch cache, the
/// embedded server's `stale-list` fault) lacks objects that exist, and the watch from its
/// resourceVersion brings them back moments later. The VM controller must not create a VMI in
/// that moment (the API server would refuse it as AlreadyExists): it reads the VMI from the
/// server first ([`crate::controller::vm`]'s reconcile). The mark is set before the cache drops
/// the VMI ([`crate::controller::handlers::vmi_relist_marker`]). Not in KubeVirt, whose consistent
/// relists after a `410` do not lack existing objects.
#[derive(Clone, Default)]
pub struct UnverifiedAbsences(Arc<std::sync::Mutex<std::collections::HashSet<String>>>);

impl UnverifiedAbsences {
    fn lock(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `key`'s object left the cache in a relist.
    pub(crate) fn mark(&self, key: &str) {
        self.lock().insert(key.to_string());
    }

    /// `key`'s object was seen again, or the server confirmed it is gone.
    pub(crate) fn clear(&self, key: &str) {
        self.lock().remove(key);
    }

    /// Whether `key` is marked.
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.lock().contains(key)
    }
}

/// Cached objects still being deleted `after` (the expectations timeout) after the cache first
/// showed their deletionTimestamp.
///
/// KubeVirt counts a pod deletion done once the pod shows a deletionTimestamp (vmi.go
/// `updatePod` → `deletePod` → `DeletionObserved`) and then waits for its `DELETED`, without
/// ever deleting it again while it is not final (lifecycle.go:1001). If that `DELETED` is lost
/// (a pod that never ran is deleted at once, its last cached state Pending), the cache keeps
/// the terminating pod and its VMI stays Terminating until a relist that nothing forces. The
/// manager therefore lists each such object by name from the API server, once per `after`, and drops
/// the cached copy if the server no longer has it, as a 404 to a delete does
/// ([`Context::pod_gone`]). A pod terminating through a long grace period costs one read per
/// `after`. Not in KubeVirt, whose informers do not lose events.
#[derive(Clone)]
pub(crate) struct OverdueDeletions {
    after: std::time::Duration,
    /// UID → when its deletion was first seen, or it was last read from the server.
    since: Arc<std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>>,
}

impl OverdueDeletions {
    fn new(after: std::time::Duration) -> Self {
        OverdueDeletions {
            after,
            since: Arc::default(),
        }
    }

    /// The `(ns/name, uid)` of the `objects` that have a deletionTimestamp.
    fn deleting<K: kube::Resource>(objects: &[Arc<K>]) -> Vec<(String, String)> {
        objects
            .iter()
            .filter_map(|o| {
                let m = o.meta();
                m.deletion_timestamp.as_ref()?;
                let (ns, name) = (m.namespace.as_deref(), m.name.as_deref());
                let key = format!("{}/{}", ns.unwrap_or_default(), name.unwrap_or_default());
                Some((key, m.uid.clone()?))
            })
            .collect()
    }

    /// Of the `deleting` UIDs, those seen deleting (or last read) at least `after` ago, marked
    /// read now; starts the clock of the new ones and forgets every UID not in `deleting`.
    fn due(&self, deleting: &[&str]) -> Vec<String> {
        let now = tokio::time::Instant::now();
        let current: std::collections::HashSet<&str> = deleting.iter().copied().collect();
        let mut since = self.since.lock().unwrap_or_else(|e| e.into_inner());
        since.retain(|uid, _| current.contains(uid.as_str()));
        let mut due = Vec::new();
        for uid in deleting {
            let t = since.entry(uid.to_string()).or_insert(now);
            if now.duration_since(*t) >= self.after {
                *t = now;
                due.push(uid.to_string());
            }
        }
        due
    }
}

impl Expectations {
    /// Fresh stores honouring entries for `timeout` (KubeVirt: five minutes, the default).
    pub(crate) fn with_timeout(timeout: std::time::Duration) -> Self {
        let d = Expectations::default();
        Expectations {
            vmi: d.vmi.with_timeout(timeout),
            data_volume: d.data_volume.with_timeout(timeout),
            pod: d.pod.with_timeout(timeout),
            vmi_self: d.vmi_self.with_timeout(timeout),
            pvc: d.pvc.with_timeout(timeout),
            vmi_relisted_away: d.vmi_relisted_away,
            overdue: OverdueDeletions::new(timeout),
        }
    }

    /// Add to its queue every key whose expectations expired unfulfilled since the last call
    /// (VM keys of `vmi`/`data_volume` to `vm_queue`, VMI keys of `pod`/`vmi_self` to
    /// `vmi_queue`); the number of keys added. Not in KubeVirt (see
    /// [`ControllerExpectations::take_newly_expired`]): the manager calls this about once a
    /// second while leading.
    pub(crate) fn requeue_expired(&self, vm_queue: &WorkQueue, vmi_queue: &WorkQueue) -> usize {
        let mut n = 0;
        for (store, keys, queue) in [
            ("vm-vmi", self.vmi.take_newly_expired(), vm_queue),
            (
                "vm-datavolume",
                self.data_volume.take_newly_expired(),
                vm_queue,
            ),
            ("vmi-pod", self.pod.take_newly_expired(), vmi_queue),
            ("vmi-self", self.vmi_self.take_newly_expired(), vmi_queue),
            ("vmi-pvc", self.pvc.take_newly_expired(), vmi_queue),
        ] {
            for key in keys {
                tracing::info!(
                    expectations = store,
                    key = %key,
                    "expectations expired before the expected watch event came: requeueing the key"
                );
                queue.add(key);
                n += 1;
            }
        }
        n
    }
}

pub use crate::controller::common::record::{ReconcileLog, ReconcileRecord, VmiEnding};

/// Kubernetes Events, published in the background so a reconcile never waits for them. Writes
/// core/v1 Events through [`Recorder`] as client-go's recorder does, source component
/// `virtualmachine-controller` ([`crate::runtime::recorder::COMPONENT`]).
///
/// Like KubeVirt, which gives the VM and the VMI controller a recorder each, every one with its
/// own client-go broadcaster (pkg/virt-controller/watch/application.go:392, 819, 681-685):
/// events about VirtualMachines and events about anything else are published by two
/// independent tasks, each from a queue of [`EVENT_QUEUE`] that drops what does not fit, as the
/// broadcaster's does (client-go `maxQueuedEvents`, `watch.DropIfChannelFull`).
#[derive(Clone)]
pub struct EventSink {
    vm: mpsc::Sender<(Event, ObjectReference, k8s_openapi::jiff::Timestamp)>,
    other: mpsc::Sender<(Event, ObjectReference, k8s_openapi::jiff::Timestamp)>,
    flight: Option<crate::flight::FlightRecorder>,
}

/// Events each publisher queues before dropping (client-go's `maxQueuedEvents` is 1,000).
pub const EVENT_QUEUE: usize = 1024;

impl EventSink {
    /// Start the background publishers. KubeVirt's recorders have no host: the Events carry
    /// no instance (`reportingInstance` is empty).
    pub(crate) fn spawn(client: kube::Client) -> Self {
        let publisher = |client: kube::Client| {
            let (tx, mut rx) =
                mpsc::channel::<(Event, ObjectReference, k8s_openapi::jiff::Timestamp)>(
                    EVENT_QUEUE,
                );
            let mut recorder = Recorder::new(client, COMPONENT.into());
            tokio::spawn(async move {
                while let Some((event, reference, recorded)) = rx.recv().await {
                    let published = recorder.publish_recorded(&event, &reference, recorded);
                    if let Err(e) = published.await {
                        tracing::debug!(error = %e, reason = %event.reason, "could not publish event");
                    }
                }
            });
            tx
        };
        let vm = publisher(client.clone());
        EventSink {
            vm,
            other: publisher(client),
            flight: None,
        }
    }

    /// The same sink, also recording every Event in `flight`.
    pub(crate) fn with_flight(mut self, flight: Option<crate::flight::FlightRecorder>) -> Self {
        self.flight = flight;
        self
    }

    /// An event sink that drops everything (tests, dry runs).
    pub(crate) fn disabled() -> Self {
        let (tx, _rx) = mpsc::channel(1);
        EventSink {
            vm: tx.clone(),
            other: tx,
            flight: None,
        }
    }

    /// Queue an event about `reference`; dropped (with a debug log) if its queue is full.
    pub(crate) fn emit(
        &self,
        reference: ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let event = Event {
            type_: type_.as_str(),
            reason: reason.to_string(),
            message: message.to_string(),
        };
        if let Some(f) = &self.flight {
            f.record(crate::flight::Body::Event(crate::flight::EventLine {
                kind: reference.kind.clone().unwrap_or_default(),
                namespace: reference.namespace.clone().unwrap_or_default(),
                name: reference.name.clone().unwrap_or_default(),
                uid: reference.uid.clone().unwrap_or_default(),
                event_type: event.type_.to_string(),
                reason: event.reason.clone(),
                message: event.message.clone(),
            }));
        }
        let queue = if reference.kind.as_deref() == Some("VirtualMachine") {
            &self.vm
        } else {
            &self.other
        };
        // Stamped now, as client-go's recorder stamps it, not when its publisher gets to it.
        if queue
            .try_send((event, reference, k8s_openapi::jiff::Timestamp::now()))
            .is_err()
        {
            tracing::debug!(reason, "event dropped: sink full or closed");
        }
    }
}

/// Kubernetes event type of the events the VM and VMI controllers record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

impl EventType {
    /// `"Normal"` or `"Warning"`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Everything a controller needs. Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub client: kube::Client,
    /// The cluster settings in use (the KubeVirt CR's, reloaded when it changes): read them
    /// once per reconcile with [`ClusterConfig::settings`].
    pub cluster_config: Arc<ClusterConfig>,
    pub caches: Caches,
    pub vm_queue: QueueSlot,
    pub vmi_queue: QueueSlot,
    pub expectations: Expectations,
    pub events: EventSink,
    pub reconciles: ReconcileLog,
    pub metrics: Arc<Metrics>,
    /// The VMs the VM controller's own writes returned, until the VM cache catches up: a sync
    /// decides from the newer of the two, so its status write carries the resourceVersion of
    /// the controller's last write (issue 38 item 7).
    pub vm_mutations: Arc<MutationCache<VirtualMachine>>,
    /// The flight recorder (`run-controller --record`), when recording.
    pub flight: Option<crate::flight::FlightRecorder>,
}

/// Drop the cached `ns/name` of `informer` (the one cached now, by its UID) as gone.
fn forget_cached<K>(informer: &Informer<K>, ns: &str, name: &str)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let key = ObjectRef::<K>::new(name).within(ns);
    if let Some(uid) = informer
        .store()
        .get(&key)
        .and_then(|o| o.meta().uid.clone())
    {
        informer.forget_gone(key, &uid);
    }
}

/// [`Context::confirm_overdue_deletions`] for the cached `ns/name` with `uid` of `informer`.
async fn confirm_gone<K>(client: &kube::Client, informer: &Informer<K>, key: &str, uid: &str)
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + 'static,
{
    let (ns, name) = crate::api::key::split_key(key);
    // A list by name, not a GET: the controller's role grants list and watch on pods and VMIs
    // (deploy/rbac/controller.yaml), as its informers need, and no get.
    let by_name = kube::api::ListParams::default().fields(&format!("metadata.name={name}"));
    let listed = crate::runtime::apicall::api::<K>(client, ns)
        .list(&by_name)
        .await
        .map(|l| l.items.into_iter().next());
    match listed {
        Ok(found) if found.as_ref().and_then(|o| o.meta().uid.as_deref()) != Some(uid) => {
            tracing::info!(
                key,
                uid,
                "the deletion is overdue and the server no longer has the object: its DELETED was lost; dropping the cached copy"
            );
            informer.forget_gone(ObjectRef::<K>::new(name).within(ns), uid);
        }
        Ok(_) => {}
        Err(e) => {
            tracing::debug!(key, error = %e, "could not read an object whose deletion is overdue")
        }
    }
}

impl Context {
    /// A context that is not part of a running manager: the given caches, default settings, no
    /// work queue installed (not leading), fresh expectations, a reconcile log and metrics of its
    /// own, events dropped. For tests and tools that run single reconciles against `client`.
    pub fn offline(client: kube::Client, caches: Caches) -> Self {
        Context {
            client,
            cluster_config: Arc::new(ClusterConfig::fixed(ClusterSettings::default())),
            caches,
            vm_queue: QueueSlot::default(),
            vmi_queue: QueueSlot::default(),
            expectations: Expectations::default(),
            events: EventSink::disabled(),
            reconciles: ReconcileLog::default(),
            metrics: Arc::new(Metrics::new()),
            flight: None,
            vm_mutations: Arc::default(),
        }
    }
}

impl Context {
    /// The API server answered 404 to a delete of the launcher pod `ns/name`: the pod is gone,
    /// so the pod cache must not hold it ([`Informer::forget_gone`]; issue 38 item 2).
    pub(crate) fn pod_gone(&self, ns: &str, name: &str) {
        forget_cached(&self.caches.pods, ns, name);
    }

    /// The API server answered 404 to a delete of the VMI `ns/name` ([`Context::pod_gone`]).
    pub(crate) fn vmi_gone(&self, ns: &str, name: &str) {
        forget_cached(&self.caches.vmis, ns, name);
    }

    /// Read from the API server the cached pods and VMIs whose deletion is overdue
    /// ([`OverdueDeletions`]), and drop from the cache those the server no longer has (404, or
    /// another object under the same name). The manager calls this about once a second.
    pub(crate) async fn confirm_overdue_deletions(&self) {
        let pods = OverdueDeletions::deleting(&self.caches.pods.store().state());
        let vmis = OverdueDeletions::deleting(&self.caches.vmis.store().state());
        let uids: Vec<&str> = pods.iter().chain(&vmis).map(|(_, u)| u.as_str()).collect();
        let due = self.expectations.overdue.due(&uids);
        for (key, uid) in pods.iter().filter(|(_, u)| due.contains(u)) {
            confirm_gone(&self.client, &self.caches.pods, key, uid).await;
        }
        for (key, uid) in vmis.iter().filter(|(_, u)| due.contains(u)) {
            confirm_gone(&self.client, &self.caches.vmis, key, uid).await;
        }
    }

    /// The object of `key` is gone from the cache: drop the key's expectations of that
    /// `controller` (`"vm"`: VMI and DataVolume, vm.go:362-366; `"vmi"`: pod and own-VMI,
    /// vmi.go:305-311) and forget its reconcile record.
    ///
    /// Unlike KubeVirt, an unfulfilled, unexpired expectation is kept: the object may have left
    /// the cache in a relist that lacked it and come back a moment later (a stale list), and
    /// then its creations still on their way must hold it back, or it creates a second launcher
    /// pod (issue 38 item 1). A truly gone key's entry goes at its expiry requeue.
    pub(crate) fn forget_gone(&self, controller: &str, key: &str) {
        if controller == "vm" {
            self.vm_mutations.forget(key);
            self.expectations.vmi.delete_expectations_if_satisfied(key);
            self.expectations
                .data_volume
                .delete_expectations_if_satisfied(key);
        } else {
            self.expectations.pod.delete_expectations_if_satisfied(key);
            self.expectations
                .vmi_self
                .delete_expectations_if_satisfied(key);
            self.expectations.pvc.delete_expectations_if_satisfied(key);
        }
        self.reconciles.forget(controller, key);
    }
}

/// An `ObjectReference` for events about a kubevirt.io object.
pub(crate) fn object_ref(
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> ObjectReference {
    ObjectReference {
        api_version: Some(crate::api::API_VERSION.into()),
        kind: Some(kind.into()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::expectations::EXPECTATIONS_TIMEOUT;
    use std::time::Duration;

    #[test]
    fn vm_events_and_vmi_events_queue_for_separate_publishers_and_overflow_drops() {
        let (vm_tx, mut vm_rx) = mpsc::channel(EVENT_QUEUE);
        let (other_tx, mut other_rx) = mpsc::channel(1);
        let sink = EventSink {
            vm: vm_tx,
            other: other_tx,
            flight: None,
        };
        let reference = |kind: &str, name: &str| ObjectReference {
            kind: Some(kind.into()),
            name: Some(name.into()),
            namespace: Some("default".into()),
            ..Default::default()
        };
        sink.emit(
            reference("VirtualMachine", "vm-1"),
            EventType::Normal,
            "SuccessfulCreate",
            "Started the virtual machine by creating the new virtual machine instance vm-1",
        );
        sink.emit(
            reference("VirtualMachineInstance", "vm-1"),
            EventType::Normal,
            "SuccessfulCreate",
            "Created virtual machine pod virt-launcher-vm-1-abcde",
        );
        // The VMI queue (capacity 1 here) is full: dropped, and emit does not wait.
        sink.emit(
            reference("VirtualMachineInstance", "vm-2"),
            EventType::Warning,
            "FailedCreate",
            "x",
        );
        let (vm_event, vm_ref, _) = vm_rx.try_recv().expect("the VM event");
        assert_eq!(vm_ref.kind.as_deref(), Some("VirtualMachine"));
        assert_eq!(vm_event.type_, "Normal");
        assert!(vm_rx.try_recv().is_err());
        let (_, vmi_ref, _) = other_rx.try_recv().expect("the VMI event");
        assert_eq!(vmi_ref.name.as_deref(), Some("vm-1"));
        assert!(other_rx.try_recv().is_err(), "the overflow was dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn an_object_deleting_for_longer_than_the_timeout_is_due_once_per_timeout() {
        let overdue = OverdueDeletions::new(Duration::from_secs(5));
        assert!(overdue.due(&["a"]).is_empty(), "the clock of a starts");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(overdue.due(&["a", "b"]).is_empty(), "b's clock starts");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(overdue.due(&["a", "b"]), ["a"]);
        assert!(overdue.due(&["a", "b"]).is_empty(), "a was just read");
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(overdue.due(&["a", "b"]), ["b"]);
        // a is no longer deleting (gone): forgotten, so its clock starts again if it comes back.
        assert!(overdue.due(&["b"]).is_empty());
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(overdue.due(&["a"]).is_empty(), "a's clock restarted");
    }

    #[test]
    fn only_objects_with_a_deletion_timestamp_are_deleting() {
        let pod = |name: &str, deleting: bool| {
            let mut p = k8s_openapi::api::core::v1::Pod::default();
            p.metadata.name = Some(name.into());
            p.metadata.namespace = Some("ns".into());
            p.metadata.uid = Some(format!("uid-{name}"));
            if deleting {
                p.metadata.deletion_timestamp =
                    Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                    ));
            }
            Arc::new(p)
        };
        assert_eq!(
            OverdueDeletions::deleting(&[pod("a", false), pod("b", true)]),
            [("ns/b".to_string(), "uid-b".to_string())]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn expired_expectations_requeue_their_key_on_the_owning_controllers_queue() {
        let e = Expectations::default();
        let vm_queue: WorkQueue = WorkQueue::builder("vm").build();
        let vmi_queue: WorkQueue = WorkQueue::builder("vmi").build();
        e.vmi.expect_creations("ns/vm-a", 1);
        e.pod.expect_creations("ns/vmi-b", 1);
        e.vmi_self.expect_creations("ns/vmi-c", 1);
        e.data_volume.expect_creations("ns/vm-d", 1);
        e.data_volume.creation_observed("ns/vm-d");
        assert_eq!(e.requeue_expired(&vm_queue, &vmi_queue), 0);
        assert_eq!((vm_queue.len(), vmi_queue.len()), (0, 0));
        tokio::time::advance(EXPECTATIONS_TIMEOUT + Duration::from_secs(1)).await;
        assert_eq!(e.requeue_expired(&vm_queue, &vmi_queue), 3);
        assert_eq!(
            vm_queue.len(),
            1,
            "ns/vm-a; ns/vm-d's expectation was fulfilled"
        );
        assert_eq!(vmi_queue.len(), 2);
        assert_eq!(
            e.requeue_expired(&vm_queue, &vmi_queue),
            0,
            "once per expiry"
        );
    }
}
