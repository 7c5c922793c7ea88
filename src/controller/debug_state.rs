//! What the controller is thinking, as one typed document: `GET /debug/state` (everything) and
//! `GET /debug/state?key=NAMESPACE/NAME` (one VM and its VMI: constant size whatever the fleet).
//!
//! The controller owns the state (leader election state, work queues, expectations, reconcile
//! log, informer caches); [`DebugStateSource`] is a cheap handle that assembles a [`DebugState`]
//! from them on demand. The HTTP endpoint, `run-controller`'s progress lines and the inspector all
//! read this one type, so they cannot disagree about what the controller knows.
//!
//! KubeVirt has no such endpoint: its virt-controller exposes only Prometheus metrics
//! (pkg/monitoring/metrics/virt-controller/workqueue.go). The queue and expectations views mirror
//! client-go's `workqueue` and pkg/controller/expectations.go.
//!
//! The JSON field names are stable (documented in docs/run-controller.md and docs/inspect.md).

use super::cluster_config::ConfigState;
use super::context::{Context, QueueSlot, ReconcileRecord, VmiEnding};
use crate::api::common::ObjectVersion;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::controller::vm::QUEUE_NAME as VM_QUEUE_NAME;
use crate::controller::vmi::QUEUE_NAME as VMI_QUEUE_NAME;
use crate::runtime::expectations::ExpectationsSnapshot;
use crate::runtime::lease::LeaderState;
use crate::runtime::queue::QueueSnapshot;
use chrono::{DateTime, Utc};
use kube::runtime::reflector::ObjectRef;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// Reconcile-log controller names (keys of [`DebugState::reconciles`]).
pub(crate) const VM_CONTROLLER: &str = "vm";
/// See [`VM_CONTROLLER`].
pub(crate) const VMI_CONTROLLER: &str = "vmi";

/// The `/debug/state` document.
///
/// In key mode (`?key=`), every list holds only that key's entries (the VM's and the VMI's: both
/// controllers key by `namespace/name`), the cache counts are omitted and [`DebugState::cached`]
/// tells which versions of the VM and VMI the leader's caches hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DebugState {
    /// When the document was assembled (this process's clock).
    pub generated_at: DateTime<Utc>,
    /// This instance's Lease identity.
    pub identity: String,
    /// Whether this instance leads (holds the Lease and runs the controllers).
    pub leading: bool,
    /// The leader election as this instance sees it (holder, transitions, last renew, error).
    pub lease: LeaderState,
    /// The informer caches.
    pub caches: CacheState,
    /// The work queues of the current leadership term by queue name (`virt-controller-vm`,
    /// `virt-controller-vmi`); `null` while standing by (no term, no queue).
    pub queues: BTreeMap<String, Option<QueueSnapshot>>,
    /// The expectations stores (`vm-vmi`, `vm-datavolume`, `vmi-pod`, `vmi-self`).
    pub expectations: Vec<ExpectationsSnapshot>,
    /// The last reconcile of each key, by controller (`vm`, `vmi`) then key.
    pub reconciles: BTreeMap<String, BTreeMap<String, ReconcileRecord>>,
    /// By key, how its last VMI ended when the VMI controller moved it to a final phase (kept
    /// after the VMI is gone, until the VM is).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vmi_endings: BTreeMap<String, VmiEnding>,
    /// The key this document is restricted to (`namespace/name`); absent for the full document.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Key mode only: the VM and VMI as the leader's caches hold them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached: Option<CachedObjects>,
    /// The cluster settings the controllers render with and where they came from (the
    /// KubeVirt CR's resourceVersion, when loaded, a refused version); in both modes. Absent
    /// from the documents of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<ConfigState>,
}

/// The informer caches: whether they finished their first list, and how many objects each holds
/// (full document only).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CacheState {
    /// Every cache completed its first list (client-go `WaitForCacheSync`).
    pub synced: bool,
    /// Cached VirtualMachines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualmachines: Option<usize>,
    /// Cached VirtualMachineInstances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub virtualmachineinstances: Option<usize>,
    /// Cached pods with the `kubevirt.io` label (virt-launcher and hotplug attachment pods).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<usize>,
    /// Cached ControllerRevisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub controllerrevisions: Option<usize>,
    /// Cached DataVolumes (0 when the cluster serves no CDI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datavolumes: Option<usize>,
    /// Cached nodes, what the VMI controller's topology hinter reads (0 when the controller
    /// may not list nodes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<usize>,
}

/// The versions of one key's objects in the leader's caches.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CachedObjects {
    /// The VM, if cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<ObjectVersion>,
    /// The VMI, if cached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi: Option<ObjectVersion>,
}

/// Why a `?key=` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("query parameter key={0:?}: expected NAMESPACE/NAME")]
pub struct BadKey(pub String);

/// Check a `namespace/name` key: two non-empty parts separated by one `/`.
pub(crate) fn parse_key(key: &str) -> Result<(&str, &str), BadKey> {
    match key.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns, name))
        }
        _ => Err(BadKey(key.to_string())),
    }
}

impl DebugState {
    /// The queue named `name`, if the instance leads.
    pub(crate) fn queue(&self, name: &str) -> Option<&QueueSnapshot> {
        self.queues.get(name).and_then(Option::as_ref)
    }

    /// The last reconcile of `key` by `controller` ([`VM_CONTROLLER`] / [`VMI_CONTROLLER`]).
    pub(crate) fn reconcile(&self, controller: &str, key: &str) -> Option<&ReconcileRecord> {
        self.reconciles.get(controller).and_then(|m| m.get(key))
    }

    /// How the last VMI of `key` ended, if the VMI controller ended it.
    pub fn vmi_ending(&self, key: &str) -> Option<&VmiEnding> {
        self.vmi_endings.get(key)
    }

    /// How often `key` was requeued after a failure in the queue `name` (the rate limiter's
    /// `NumRequeues`), 0 when it has no failures or the instance does not lead.
    pub(crate) fn retries(&self, name: &str, key: &str) -> usize {
        self.queue(name)
            .and_then(|q| q.retries.iter().find(|r| r.key == key))
            .map_or(0, |r| r.num_requeues)
    }
}

/// Assembles [`DebugState`] documents from the controller's live state. Cheap to clone.
#[derive(Clone)]
pub struct DebugStateSource {
    ctx: Context,
    leader: Arc<RwLock<LeaderState>>,
}

impl DebugStateSource {
    /// A source over a controller context and its published leader election state.
    pub(crate) fn new(ctx: Context, leader: Arc<RwLock<LeaderState>>) -> Self {
        DebugStateSource { ctx, leader }
    }

    fn leader(&self) -> LeaderState {
        self.leader
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The full document: every queued key, expectation and reconcile record. Its size grows
    /// with the fleet; ask for one key with [`DebugStateSource::for_key`].
    pub(crate) fn full(&self) -> DebugState {
        let leader = self.leader();
        let caches = &self.ctx.caches;
        let e = &self.ctx.expectations;
        let queue = |slot: &QueueSlot| slot.get().map(|q| q.snapshot());
        DebugState {
            generated_at: Utc::now(),
            identity: leader.identity.clone(),
            leading: leader.leading,
            caches: CacheState {
                synced: caches.all_synced(),
                virtualmachines: Some(caches.vms.store().state().len()),
                virtualmachineinstances: Some(caches.vmis.store().state().len()),
                pods: Some(caches.pods.store().state().len()),
                controllerrevisions: Some(caches.revisions.store().state().len()),
                datavolumes: Some(caches.data_volumes.store().state().len()),
                nodes: Some(caches.nodes.store().state().len()),
            },
            lease: leader,
            queues: BTreeMap::from([
                (VM_QUEUE_NAME.to_string(), queue(&self.ctx.vm_queue)),
                (VMI_QUEUE_NAME.to_string(), queue(&self.ctx.vmi_queue)),
            ]),
            expectations: vec![
                e.vmi.snapshot(),
                e.data_volume.snapshot(),
                e.pod.snapshot(),
                e.vmi_self.snapshot(),
                e.pvc.snapshot(),
            ],
            reconciles: self.ctx.reconciles.snapshot(),
            vmi_endings: self.ctx.reconciles.endings(),
            key: None,
            cached: None,
            settings: Some(self.ctx.cluster_config.state()),
        }
    }

    /// The document restricted to one `namespace/name` key (the VM's and the VMI's entries).
    /// Hash lookups only: its cost and size do not depend on how many other VMs exist.
    pub fn for_key(&self, key: &str) -> Result<DebugState, BadKey> {
        let (namespace, name) = parse_key(key)?;
        let leader = self.leader();
        let caches = &self.ctx.caches;
        let e = &self.ctx.expectations;
        let owned = key.to_string();
        let queue = |slot: &QueueSlot| slot.get().map(|q| q.key_snapshot(&owned));
        let vm = caches
            .vms
            .store()
            .get(&ObjectRef::<VirtualMachine>::new(name).within(namespace))
            .map(|o| ObjectVersion::of(&o.metadata));
        let vmi = caches
            .vmis
            .store()
            .get(&ObjectRef::<VirtualMachineInstance>::new(name).within(namespace))
            .map(|o| ObjectVersion::of(&o.metadata));
        let reconciles = [VM_CONTROLLER, VMI_CONTROLLER]
            .into_iter()
            .map(|c| {
                let records = self
                    .ctx
                    .reconciles
                    .get(c, key)
                    .map(|r| BTreeMap::from([(owned.clone(), r)]))
                    .unwrap_or_default();
                (c.to_string(), records)
            })
            .collect();
        Ok(DebugState {
            generated_at: Utc::now(),
            identity: leader.identity.clone(),
            leading: leader.leading,
            caches: CacheState {
                synced: caches.all_synced(),
                ..CacheState::default()
            },
            lease: leader,
            queues: BTreeMap::from([
                (VM_QUEUE_NAME.to_string(), queue(&self.ctx.vm_queue)),
                (VMI_QUEUE_NAME.to_string(), queue(&self.ctx.vmi_queue)),
            ]),
            expectations: vec![
                e.vmi.key_snapshot(key),
                e.data_volume.key_snapshot(key),
                e.pod.key_snapshot(key),
                e.vmi_self.key_snapshot(key),
                e.pvc.key_snapshot(key),
            ],
            reconciles,
            vmi_endings: self
                .ctx
                .reconciles
                .ending(key)
                .map(|e| BTreeMap::from([(owned.clone(), e)]))
                .unwrap_or_default(),
            key: Some(owned),
            cached: Some(CachedObjects { vm, vmi }),
            settings: Some(self.ctx.cluster_config.state()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::context::Caches;
    use crate::runtime::queue::WorkQueue;
    use std::time::Duration;

    /// A controller context with no cluster behind it, leading, whose queues, expectations and
    /// reconcile log hold `vms` keys: every key is queued in the VM queue and rate-limited
    /// in the VMI queue, has a pending VMI creation and a reconcile record.
    async fn busy_source(vms: usize) -> DebugStateSource {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("url"),
        ))
        .expect("client");
        let ctx = Context::offline(client, Caches::disabled());
        let vm_queue: WorkQueue = WorkQueue::builder(VM_QUEUE_NAME).build();
        let vmi_queue: WorkQueue = WorkQueue::builder(VMI_QUEUE_NAME).build();
        for i in 0..vms {
            let key = format!("ns-{}/vm-{i:05}", i % 10);
            vm_queue.add(key.clone());
            vmi_queue.add_rate_limited(key.clone());
            ctx.expectations.vmi.expect_creations(&key, 1);
            ctx.reconciles.record(
                VM_CONTROLLER,
                &key,
                ReconcileRecord {
                    at: "2026-12-01T10:00:00Z".parse().expect("time"),
                    duration_seconds: 0.5,
                    result: "error".into(),
                    error: Some("boom".into()),
                    requeue_after_seconds: None,
                    actions: vec!["CreateVmi".into()],
                },
            );
        }
        ctx.vm_queue.set(Some(vm_queue));
        ctx.vmi_queue.set(Some(vmi_queue));
        let leader = LeaderState {
            identity: "me".into(),
            leading: true,
            holder: Some("me".into()),
            ..LeaderState::default()
        };
        DebugStateSource::new(ctx, Arc::new(RwLock::new(leader)))
    }

    /// The document as text with every timestamp replaced by one fixed value (wall-clock times
    /// differ in length by their fractional digits) and every queue depth, adds count and
    /// rate-limiter wait by 0 (all are the whole queue's, by design).
    fn normalised(state: &DebugState) -> String {
        fn walk(v: &mut serde_json::Value) {
            match v {
                serde_json::Value::String(s) if DateTime::parse_from_rfc3339(s).is_ok() => {
                    *s = "T".into();
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(walk),
                serde_json::Value::Object(o) => {
                    for whole_queue in ["depth", "addsTotal", "rateLimiterWaitSeconds"] {
                        if let Some(v) = o.get_mut(whole_queue) {
                            *v = 0.into();
                        }
                    }
                    o.values_mut().for_each(walk)
                }
                _ => {}
            }
        }
        let mut v = serde_json::to_value(state).expect("serialise");
        walk(&mut v);
        v.to_string()
    }

    #[tokio::test(start_paused = true)]
    async fn one_key_costs_the_same_with_1_and_with_1000_vms() {
        let key = "ns-0/vm-00000";
        let (small, large) = (busy_source(1).await, busy_source(1000).await);
        tokio::time::advance(Duration::from_millis(1500)).await;
        for source in [&small, &large] {
            let vm_queue = source.ctx.vm_queue.get().expect("vm queue");
            vm_queue.add_after(key.to_string(), Duration::from_secs(60));
        }
        let (one, thousand) = (
            small.for_key(key).expect("key"),
            large.for_key(key).expect("key"),
        );
        // Only the key's entries: queued in the VM queue, rate limited in the VMI queue, one
        // expectation, one reconcile record.
        let vm_q = thousand.queue(VM_QUEUE_NAME).expect("vm queue");
        assert_eq!(vm_q.queued.len(), 1);
        assert_eq!(vm_q.queued[0].key, key);
        assert_eq!(vm_q.queued[0].queued_seconds, 1.5);
        assert_eq!(vm_q.depth, 1000, "depth stays the whole queue's");
        assert_eq!(thousand.retries(VMI_QUEUE_NAME, key), 1);
        assert_eq!(vm_q.waiting.len(), 1);
        assert_eq!(vm_q.waiting[0].ready_in_seconds, 60.0);
        let vmi_q = thousand.queue(VMI_QUEUE_NAME).expect("vmi queue");
        assert_eq!(vmi_q.queued.len(), 1, "queued once its 5 ms backoff passed");
        // 1,000 keys rate limited at once spent the bucket's burst of 100: a key failing now
        // waits for the 900th refill at 10 a second, less the 1.5 s gone by.
        assert_eq!(vmi_q.rate_limiter_wait_seconds, 88.6);
        let one_vmi_q = one.queue(VMI_QUEUE_NAME).expect("vmi queue");
        assert_eq!(one_vmi_q.rate_limiter_wait_seconds, 0.0);
        assert_eq!(thousand.expectations[0].entries.len(), 1);
        assert_eq!(thousand.expectations[0].entries[0].add, 1);
        assert_eq!(
            thousand
                .reconcile(VM_CONTROLLER, key)
                .map(|r| r.result.as_str()),
            Some("error")
        );
        assert_eq!(thousand.key.as_deref(), Some(key));
        // The same body, byte for byte, but for timestamps and the whole queues' figures.
        let (a, b) = (normalised(&one), normalised(&thousand));
        assert_eq!(a, b, "key-mode bodies differ");
        // The full document, by contrast, holds every key.
        let full = large.full();
        assert_eq!(full.queue(VM_QUEUE_NAME).expect("q").queued.len(), 1000);
        assert!(normalised(&full).len() > 100 * b.len());
    }

    #[tokio::test]
    async fn a_malformed_key_is_refused() {
        let source = busy_source(1).await;
        assert_eq!(source.for_key("vm-a"), Err(BadKey("vm-a".into())));
    }

    #[test]
    fn keys_are_namespace_slash_name() {
        assert_eq!(parse_key("demo/vm-a"), Ok(("demo", "vm-a")));
        for bad in ["", "vm-a", "/vm-a", "demo/", "a/b/c"] {
            assert_eq!(parse_key(bad), Err(BadKey(bad.to_string())), "{bad:?}");
        }
        assert_eq!(
            BadKey("x".into()).to_string(),
            "query parameter key=\"x\": expected NAMESPACE/NAME"
        );
    }

    #[test]
    fn the_document_round_trips_and_keeps_its_field_names() {
        let state = DebugState {
            generated_at: "2026-12-01T10:00:00Z".parse().unwrap(),
            identity: "me".into(),
            leading: true,
            lease: LeaderState {
                identity: "me".into(),
                holder: Some("me".into()),
                ..LeaderState::default()
            },
            caches: CacheState {
                synced: true,
                ..CacheState::default()
            },
            queues: BTreeMap::from([(VM_QUEUE_NAME.to_string(), None)]),
            expectations: Vec::new(),
            reconciles: BTreeMap::new(),
            vmi_endings: BTreeMap::new(),
            key: Some("demo/vm-a".into()),
            cached: Some(CachedObjects::default()),
            settings: Some(
                crate::controller::cluster_config::ClusterConfig::fixed(Default::default()).state(),
            ),
        };
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(json["settings"]["source"], "fixed");
        assert_eq!(json["settings"]["current"]["memoryOvercommit"], 100);
        assert!(json["settings"]["loadedAt"].is_string());
        assert_eq!(json["generatedAt"], "2026-12-01T10:00:00Z");
        assert_eq!(json["lease"]["holder"], "me");
        assert!(json["queues"]["virt-controller-vm"].is_null());
        assert!(json["caches"].get("virtualmachines").is_none());
        assert_eq!(json["key"], "demo/vm-a");
        let back: DebugState = serde_json::from_value(json).unwrap();
        assert_eq!(back, state);
    }
}
