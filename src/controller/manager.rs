//! The controller manager: starts the informers (always, so a standby keeps warm caches), the
//! HTTP endpoints, and the leader election loop; while leading, runs the VM and VMI work queues
//! with their workers; on losing the Lease, cancels in-flight work and either exits (KubeVirt's
//! behaviour: "leaderelection lost" is fatal) or goes back to standby.
//!
//! KubeVirt: pkg/virt-controller/watch/application.go (`Execute`, `onStartedLeading`:609-677,
//! `setupLeaderElector`:1132-1177, worker defaults:125-128).

use super::cluster_config::ClusterConfig;
use super::common::ReconcileError;
use super::common::record::ChangedKeys;
use super::context::{Caches, Context, EventSink, Expectations, QueueSlot, ReconcileLog};
use super::debug_state::DebugStateSource;
use super::discovery::Served;
use super::handlers::{
    PodStoreCell, VmStoreCell, VmiStoreCell, changed_keys_handler, dv_to_vm_handler,
    dv_to_vmi_handler, launcher_pod_vm_key, pod_to_vmi_handler, pvc_snapshot_status_handler,
    pvc_to_vm_handler, pvc_to_vmi_handler, snapshot_class_to_vm_handler, vm_handler, vmi_handler,
    vmi_relist_marker, vmi_to_vm_handler,
};
use crate::api::{DataVolume, KubeVirt, VirtualMachine, VirtualMachineInstance};
use crate::config::{ClusterSettings, TokenBucket};
use crate::controller::vmi::launcher_cache::{CONTROLLER_UID, CachedPod};
use crate::runtime::informer::{Gate, Handler, Informer, InformerState, key_of};
use crate::runtime::lease::{
    DEBUG_ENDPOINT_ANNOTATION, ElectionPhase, LeaderElectionConfig, LeaderElector, LeaderState,
    LostReason, RunOutcome, TermFence, fenced_client, fenced_client_from_config,
};
use crate::runtime::metrics::Metrics;
use crate::runtime::queue::{Requeue, WorkQueue, run_workers};
use crate::runtime::rest_limiter::{ReloadableRateLimiter, rate_limited_client};
use futures::future::BoxFuture;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Namespace, Node, PersistentVolumeClaim, ResourceQuota};
use kube::Api;
use kube::api::ListParams;
use kube::runtime::watcher;
use prometheus_client::metrics::gauge::Gauge;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Instant;
use tokio_util::sync::CancellationToken;

/// What to do when the Lease is lost while leading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnLostLease {
    /// Exit non-zero, as KubeVirt's virt-controller does.
    #[default]
    Exit,
    /// Cancel in-flight work, keep the caches warm, and compete for the Lease again.
    Standby,
}

/// Manager settings.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Watch one namespace, or all (`None`).
    pub namespace: Option<String>,
    /// VM controller workers (KubeVirt default 3).
    pub vm_workers: usize,
    /// VMI controller workers (KubeVirt default 10).
    pub vmi_workers: usize,
    /// Cluster settings for the launcher renderer: the process's own, and the configuration
    /// used until (or without) a KubeVirt CR.
    pub settings: ClusterSettings,
    /// Follow the KubeVirt CR of this namespace ([`ClusterConfig`]); `None`: `settings` are
    /// fixed (`--kubevirt-cr FILE`).
    pub kubevirt_namespace: Option<String>,
    /// Leader election.
    pub lease: LeaderElectionConfig,
    /// Behaviour when the Lease is lost.
    pub on_lost_lease: OnLostLease,
    /// HTTP endpoints address (`None`: no endpoints).
    pub listen: Option<SocketAddr>,
    /// How long expectations hold a key back (KubeVirt's `ExpectationsTimeout`, five minutes;
    /// tests shorten it to see an expiry).
    pub expectations_timeout: std::time::Duration,
    /// The rate limit of the controllers' API client (informers and writes; never the Lease's).
    pub client_rate_limit: ClientRateLimit,
    /// Record what the controllers see and do here (`run-controller --record`).
    pub record: Option<crate::flight::FlightRecorder>,
}

/// How the controllers' API client is rate-limited ([`crate::runtime::rest_limiter`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum ClientRateLimit {
    /// KubeVirt's: the settings' `controllerConfiguration.restClient.rateLimiter.
    /// tokenBucketRateLimiter` (200/400 by default), applied again on every KubeVirt CR change.
    #[default]
    FromSettings,
    /// This bucket, whatever the CR says (`run-controller --client-qps/--client-burst`).
    Fixed(TokenBucket),
    /// No limit (client-go's negative QPS).
    Unlimited,
}

impl ManagerConfig {
    /// KubeVirt's defaults under `lease`: every namespace, 3 VM and 10 VMI workers, the
    /// settings of the KubeVirt CR in `kubevirt` (KubeVirt's defaults without one), exit when
    /// the Lease is lost, no HTTP endpoints. Callers change what
    /// differs with struct update syntax (`ManagerConfig { listen, ..ManagerConfig::new(lease) }`).
    pub fn new(lease: LeaderElectionConfig) -> Self {
        ManagerConfig {
            namespace: None,
            vm_workers: crate::controller::vm::WORKERS,
            vmi_workers: crate::controller::vmi::WORKERS,
            settings: ClusterSettings::default(),
            kubevirt_namespace: Some(crate::runtime::lease::DEFAULT_NAMESPACE.to_string()),
            lease,
            on_lost_lease: OnLostLease::Exit,
            listen: None,
            expectations_timeout: crate::runtime::expectations::EXPECTATIONS_TIMEOUT,
            client_rate_limit: ClientRateLimit::FromSettings,
            record: None,
        }
    }
}

/// One reconcile of one key. Implemented by the VM and VMI controllers.
pub trait Reconciler: Send + Sync + 'static {
    /// Reconcile `key` (`namespace/name`) from the caches in `ctx`: the workers' one shared
    /// context (a [`Context`] clone is a few dozen reference counts and a dozen small
    /// allocations, once per reconcile it was 1.8 % of the controller's CPU).
    fn reconcile(
        &self,
        ctx: Arc<Context>,
        key: String,
    ) -> BoxFuture<'static, Result<Requeue, ReconcileError>>;
}

/// Declares the unit struct `$name` as the [`Reconciler`] that runs a controller executor's
/// `async fn reconcile(&Context, &str)`, each reconcile in a `reconcile` tracing span with the
/// controller's name and the key (`RUST_LOG=virtctl_rs=debug` shows them on every event).
macro_rules! reconciler {
    ($(#[$meta:meta])* $name:ident ($controller:literal) => $reconcile:path) => {
        $(#[$meta])*
        #[derive(Debug, Default, Clone, Copy)]
        pub struct $name;

        impl $crate::controller::manager::Reconciler for $name {
            fn reconcile(
                &self,
                ctx: std::sync::Arc<$crate::controller::context::Context>,
                key: String,
            ) -> futures::future::BoxFuture<
                'static,
                Result<$crate::runtime::queue::Requeue, $crate::controller::common::ReconcileError>,
            > {
                use tracing::Instrument as _;
                let span = tracing::debug_span!("reconcile", controller = $controller, key = %key);
                Box::pin(async move { $reconcile(&ctx, &key).await }.instrument(span))
            }
        }
    };
}
pub(crate) use reconciler;

/// Errors that stop the manager.
#[derive(Debug, thiserror::Error)]
pub enum ManagerError {
    /// The Lease was lost while leading (exit code non-zero, like KubeVirt); the message says
    /// why (e.g. "… was not renewed within the renew deadline (10s): the renewal requests
    /// failed, the last one with: …", "… was taken over by \"b\"").
    #[error("leaderelection lost: the Lease {lease} {reason}; stopped all work")]
    LeaseLost {
        /// `namespace/name` of the Lease.
        lease: String,
        /// What ended the term.
        reason: LostReason,
    },
    /// Invalid leader election settings.
    #[error("leader election: {0}")]
    Config(String),
    /// The controllers' write client could not be built from its configuration.
    #[error("cannot build the controllers' write client: {0}")]
    WriteClient(String),
    /// The HTTP endpoints could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// A started manager: caches running, endpoints bound, not yet competing for the Lease.
pub struct Manager {
    ctx: Context,
    config: ManagerConfig,
    leader: Arc<RwLock<LeaderState>>,
    listen_addr: Option<SocketAddr>,
    leading_gauge: Gauge,
    stop: CancellationToken,
    vm: Arc<dyn Reconciler>,
    vmi: Arc<dyn Reconciler>,
    /// The client of the Lease calls (default: `client`); see [`Manager::with_lease_client`].
    lease_client: Option<kube::Client>,
    /// The client the manager was started with, without the rate limiter: the Lease calls'
    /// when no Lease client is given. Never the write client, whose own pool refuses
    /// everything outside a term, the Lease acquire included.
    client: kube::Client,
    /// The elector's wall clock (default `Utc::now`); see [`Manager::with_wall_clock`].
    wall_clock: Option<crate::runtime::lease::WallClock>,
    /// The term fence of the controllers' client, published by each elector.
    fence: TermFence,
}

fn api_for<K>(client: &kube::Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Start the informer `name` over every `K` of `namespace` (`None`: all namespaces), from
/// `state` (a new one, or [`recorded`]), feeding `handlers`, until `stop`; once `gate` says the
/// resource is served, when there is one.
fn spawn_state_in<K>(
    gate: Option<Gate>,
    state: InformerState<K>,
    name: &str,
    client: &kube::Client,
    namespace: Option<&str>,
    handlers: Vec<Handler<K>>,
    stop: &CancellationToken,
) -> Informer<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let api = api_for(client, namespace);
    Informer::spawn_decoding(
        gate,
        state,
        name,
        api,
        watcher::Config::default(),
        handlers,
        stop.clone(),
    )
}

/// Start the informer `name` over every cluster-scoped `K`, feeding `handlers`, until `stop`;
/// once `served` says `K` is served, when given.
fn spawn_cluster<K>(
    served: Option<&Served>,
    name: &str,
    client: &kube::Client,
    handlers: Vec<Handler<K>>,
    stop: &CancellationToken,
) -> Informer<K>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    Informer::spawn_decoding(
        served.map(Served::gate),
        InformerState::new(),
        name,
        Api::all(client.clone()),
        watcher::Config::default(),
        handlers,
        stop.clone(),
    )
}

/// The four instancetype informers (namespaced ones limited to `ns`), each once discovery says
/// the cluster serves `instancetype.kubevirt.io/v1beta1` (empty otherwise).
fn spawn_instancetype_caches(
    client: &kube::Client,
    ns: Option<&str>,
    stop: &CancellationToken,
) -> super::instancetype_cache::InstancetypeCaches {
    use super::instancetype_cache::InstancetypeCaches;
    let served = Served::ask(
        client,
        crate::api::instancetype::API_VERSION,
        "virtualmachineclusterinstancetypes",
        "VMs naming instancetypes or preferences cannot find them",
        stop,
    );
    InstancetypeCaches {
        instancetypes: spawn_state_in(
            Some(served.gate()),
            InformerState::new(),
            "virtualmachineinstancetypes",
            client,
            ns,
            vec![],
            stop,
        ),
        cluster_instancetypes: spawn_cluster(
            Some(&served),
            "virtualmachineclusterinstancetypes",
            client,
            vec![],
            stop,
        ),
        preferences: spawn_state_in(
            Some(served.gate()),
            InformerState::new(),
            "virtualmachinepreferences",
            client,
            ns,
            vec![],
            stop,
        ),
        cluster_preferences: spawn_cluster(
            Some(&served),
            "virtualmachineclusterpreferences",
            client,
            vec![],
            stop,
        ),
    }
}

/// The storage informers: StorageClasses always; StorageProfiles, VolumeSnapshotClasses, CDI CRs
/// and CDIConfigs once discovery says they are served (empty otherwise: no CDI, the default
/// filesystem overhead). A VolumeSnapshotClass change enqueues every VM.
fn spawn_storage_caches(
    client: &kube::Client,
    vm_queue: &QueueSlot,
    vms: &VmStoreCell,
    stop: &CancellationToken,
) -> super::storage_cache::StorageCaches {
    use crate::api::storage::{Cdi, CdiConfig, StorageProfile, VolumeSnapshotClass};
    let cdi = "cdi.kubevirt.io/v1beta1";
    let profiles = Served::ask(
        client,
        cdi,
        "storageprofiles",
        "no StorageProfile names a claim's VolumeSnapshotClass",
        stop,
    );
    let cdi_crs = Served::ask(
        client,
        cdi,
        "cdis",
        "claims get the default filesystem overhead (0.055)",
        stop,
    );
    let snapshots = Served::ask(
        client,
        "snapshot.storage.k8s.io/v1",
        "volumesnapshotclasses",
        "no volume can be snapshotted",
        stop,
    );
    let snapshot_handlers = vec![snapshot_class_to_vm_handler(vm_queue.clone(), vms.clone())];
    super::storage_cache::StorageCaches {
        storage_classes: spawn_cluster(None, "storageclasses", client, vec![], stop),
        storage_profiles: spawn_cluster::<StorageProfile>(
            Some(&profiles),
            "storageprofiles",
            client,
            vec![],
            stop,
        ),
        snapshot_classes: spawn_cluster::<VolumeSnapshotClass>(
            Some(&snapshots),
            "volumesnapshotclasses",
            client,
            snapshot_handlers,
            stop,
        ),
        cdis: spawn_cluster::<Cdi>(Some(&cdi_crs), "cdis", client, vec![], stop),
        cdi_configs: spawn_cluster::<CdiConfig>(Some(&cdi_crs), "cdiconfigs", client, vec![], stop),
    }
}

/// virt-controller's node informer (application.go:387; every node, virtinformers.go:597-602),
/// for the VMI controller's topology hinter (application.go:723), each node reduced to what the
/// hinter reads ([`super::vmi::topology::node_for_cache`]). KubeVirt's virt-controller may
/// always list nodes; a user whose RBAC forbids it (HTTP 403 on a first list) gets a disabled,
/// empty cache and one warning, so the controllers do not wait for a cache that never syncs:
/// the hinter then decides as KubeVirt's does with an empty node cache.
async fn spawn_node_cache(
    client: &kube::Client,
    rec: Option<&crate::flight::FlightRecorder>,
    stop: &CancellationToken,
) -> Informer<Node> {
    let api: Api<Node> = Api::all(client.clone());
    if let Err(kube::Error::Api(e)) = api.list(&ListParams::default().limit(1)).await
        && e.code == 403
    {
        tracing::warn!(
            error = %e.message,
            "cannot list nodes: the topology hints of VMIs that need a TSC frequency are decided without nodes (the KubeVirt CR's minimumClusterTSCFrequency, else 0); grant list/watch on nodes (deploy/rbac)"
        );
        return Informer::disabled("nodes");
    }
    Informer::spawn_with(
        recorded(rec, "Node").with_transform(super::vmi::topology::node_for_cache),
        "nodes",
        api,
        watcher::Config::default(),
        Vec::new(),
        stop.clone(),
    )
}

/// The cluster settings and, unless they are fixed, the informer on the KubeVirt CRs of
/// `config.kubevirt_namespace` that reloads them on every change of its cache (KubeVirt's
/// `ClusterConfig` event handlers, configuration.go:90-121).
///
/// `limiter`, when given, follows the settings' client limit: set from the settings in use
/// after every reload, as KubeVirt's `shouldChangeRateLimiter` callback does (application.go:
/// 371, 557-563).
fn spawn_cluster_config(
    client: &kube::Client,
    config: &ManagerConfig,
    limiter: Option<ReloadableRateLimiter>,
    stop: &CancellationToken,
) -> (Informer<KubeVirt>, Arc<ClusterConfig>) {
    let Some(ns) = config.kubevirt_namespace.as_deref() else {
        let fixed = ClusterConfig::fixed(config.settings.clone());
        return (Informer::disabled("kubevirts"), Arc::new(fixed));
    };
    let cluster_config = Arc::new(ClusterConfig::watching(config.settings.clone(), ns));
    let served = Served::ask(
        client,
        crate::api::API_VERSION,
        "kubevirts",
        "KubeVirt's default settings apply",
        stop,
    );
    let state = InformerState::<KubeVirt>::new();
    let store = state.store();
    let reload: Handler<KubeVirt> = {
        let cluster_config = cluster_config.clone();
        Arc::new(move |_| {
            cluster_config.observe(&store.state(), chrono::Utc::now());
            if let Some(limiter) = &limiter {
                let bucket = cluster_config.settings().controller_rate_limiter;
                limiter.set(bucket.qps, bucket.burst);
            }
        })
    };
    let informer = Informer::spawn_decoding(
        Some(served.gate()),
        state,
        "kubevirts",
        Api::namespaced(client.clone(), ns),
        watcher::Config::default(),
        vec![reload],
        stop.clone(),
    );
    (informer, cluster_config)
}

/// An informer state that, when recording, shows the flight recorder each change of `kind`
/// before its cache applies it: a reconcile can then only read versions recorded before its
/// own line ([`InformerState::observed_by`]).
fn recorded<K>(rec: Option<&crate::flight::FlightRecorder>, kind: &'static str) -> InformerState<K>
where
    K: kube::Resource + Clone + serde::Serialize + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    match rec {
        Some(r) => InformerState::new().observed_by(r.handler(kind)),
        None => InformerState::new(),
    }
}

/// The queues, expectations and changed keys the informers' handlers feed.
struct Queues<'a> {
    vm: &'a QueueSlot,
    vmi: &'a QueueSlot,
    expectations: &'a Expectations,
    changed: &'a ChangedKeys,
}

/// Start the controllers' informers (each with its handlers and indexes) and the KubeVirt CR's
/// `ClusterConfig`; `limiter` is reloaded from the CR when the rate limit follows it.
async fn spawn_caches(
    client: &kube::Client,
    config: &ManagerConfig,
    limiter: Option<ReloadableRateLimiter>,
    q: Queues<'_>,
    stop: &CancellationToken,
) -> (Caches, Arc<ClusterConfig>) {
    let ns = config.namespace.as_deref();
    let vm_cell = VmStoreCell::default();
    let rec = config.record.as_ref();
    let vms = spawn_state_in::<VirtualMachine>(
        None,
        recorded(rec, "VirtualMachine"),
        "virtualmachines",
        client,
        ns,
        vec![
            vm_handler(q.vm.clone()),
            changed_keys_handler(q.changed.clone(), |vm| Some(key_of(vm))),
        ],
        stop,
    );
    let _ = vm_cell.set(vms.store().clone());
    let vmi_handlers = vec![
        vmi_to_vm_handler(q.vm.clone(), q.expectations.clone(), vm_cell.clone()),
        vmi_handler(q.vmi.clone(), q.expectations.clone()),
        changed_keys_handler(q.changed.clone(), |vmi| Some(key_of(vmi))),
    ];
    let vmis = spawn_state_in::<VirtualMachineInstance>(
        None,
        recorded(rec, "VirtualMachineInstance")
            .observed_by(vmi_relist_marker(q.expectations.clone(), vm_cell.clone())),
        "virtualmachineinstances",
        client,
        ns,
        vmi_handlers,
        stop,
    );
    let vmi_cell = VmiStoreCell::default();
    let _ = vmi_cell.set(vmis.store().clone());
    // KubeVirt's pod informer watches every pod with the `kubevirt.io` label: launcher pods
    // and hotplug attachment pods (virtinformers.go:584-595).
    let pod_cell = PodStoreCell::default();
    let pods = Informer::<CachedPod>::spawn_decoding(
        None,
        recorded(rec, "Pod").with_index(&CONTROLLER_UID),
        "pods",
        api_for::<CachedPod>(client, ns),
        watcher::Config::default().labels("kubevirt.io"),
        vec![
            pod_to_vmi_handler(
                q.vmi.clone(),
                q.expectations.clone(),
                pod_cell.clone(),
                // PR 18222 (main): a deleted pod found by its owner annotations.
                (config.settings.kubevirt_version.controller_rules())
                    .attachment_pod_owner_annotations
                    .value
                    .then(|| vmi_cell.clone()),
            ),
            changed_keys_handler(q.changed.clone(), launcher_pod_vm_key),
        ],
        stop.clone(),
    );
    let _ = pod_cell.set(pods.store().clone());
    let revisions = Informer::<ControllerRevision>::spawn_with(
        recorded(rec, "ControllerRevision")
            .with_transform(crate::controller::vm::revision::revision_for_cache)
            .with_index(&crate::controller::vm::revision::VM_INDEX),
        "controllerrevisions",
        api_for(client, ns),
        watcher::Config::default(),
        Vec::new(),
        stop.clone(),
    );
    let data_volumes = spawn_state_in::<DataVolume>(
        Some(
            Served::ask(
                client,
                "cdi.kubevirt.io/v1beta1",
                "datavolumes",
                "DataVolume templates cannot be handled",
                stop,
            )
            .gate(),
        ),
        recorded(rec, "DataVolume"),
        "datavolumes",
        client,
        ns,
        vec![
            dv_to_vm_handler(q.vm.clone(), q.expectations.clone(), vm_cell.clone()),
            dv_to_vmi_handler(q.vmi.clone(), vmi_cell.clone()),
        ],
        stop,
    );

    // Namespaces are cluster-scoped: a controller limited to one namespace watches only that
    // one (a field selector), so it needs no cluster-wide read of namespaces.
    let namespaces = Informer::<Namespace>::spawn(
        "namespaces",
        Api::all(client.clone()),
        match ns {
            Some(ns) => watcher::Config::default().fields(&format!("metadata.name={ns}")),
            None => watcher::Config::default(),
        },
        Vec::new(),
        stop.clone(),
    );
    let resource_quotas = spawn_state_in::<ResourceQuota>(
        None,
        InformerState::new(),
        "resourcequotas",
        client,
        ns,
        vec![],
        stop,
    );
    let pvc_handlers = vec![
        pvc_to_vm_handler(q.vm.clone(), vm_cell.clone()),
        pvc_snapshot_status_handler(q.vm.clone(), vm_cell.clone()),
        pvc_to_vmi_handler(q.vmi.clone(), vmi_cell, q.expectations.clone()),
    ];
    let pvcs = spawn_state_in::<PersistentVolumeClaim>(
        None,
        recorded(rec, "PersistentVolumeClaim"),
        "persistentvolumeclaims",
        client,
        ns,
        pvc_handlers,
        stop,
    );
    let following = match config.client_rate_limit {
        ClientRateLimit::FromSettings => limiter,
        ClientRateLimit::Fixed(_) | ClientRateLimit::Unlimited => None,
    };
    let (kubevirts, cluster_config) = spawn_cluster_config(client, config, following, stop);
    let instancetypes = spawn_instancetype_caches(client, ns, stop);
    let storage = spawn_storage_caches(client, q.vm, &vm_cell, stop);
    let nodes = spawn_node_cache(client, rec, stop).await;
    let caches = Caches {
        vms,
        vmis,
        pods,
        revisions,
        data_volumes,
        namespaces,
        resource_quotas,
        pvcs,
        kubevirts,
        instancetypes,
        storage,
        nodes,
    };
    (caches, cluster_config)
}

/// The controllers' client limiter for `limit`, starting from `settings`' bucket, its waits
/// exported in `metrics`; `None` when unlimited.
fn client_limiter(
    limit: ClientRateLimit,
    settings: &ClusterSettings,
    metrics: &Metrics,
) -> Option<ReloadableRateLimiter> {
    let bucket = match limit {
        ClientRateLimit::FromSettings => settings.controller_rate_limiter,
        ClientRateLimit::Fixed(bucket) => bucket,
        ClientRateLimit::Unlimited => return None,
    };
    Some(ReloadableRateLimiter::new(bucket.qps, bucket.burst).with_metrics(metrics))
}

impl Manager {
    /// Start the informers and the HTTP endpoints. Nothing is written to the cluster until
    /// [`Manager::run`] acquires the Lease.
    pub async fn start(
        client: kube::Client,
        config: ManagerConfig,
        vm: Arc<dyn Reconciler>,
        vmi: Arc<dyn Reconciler>,
    ) -> Result<Self, ManagerError> {
        Self::start_inner(client, None, config, vm, vmi).await
    }

    /// [`Manager::start`], with the controllers' writes (and Events) sent through a connection
    /// pool of their own built from `write_config`, fenced at every socket write (every
    /// connection task when the configuration has a proxy) as well as at every request
    /// ([`crate::runtime::lease::fenced_client_from_config`]): a process stopped between a
    /// write's request check and its bytes reaching the socket sends nothing once it wakes past
    /// its term. The Lease calls never use that pool. `run-controller` starts this way.
    pub async fn start_with_write_pool(
        client: kube::Client,
        write_config: kube::Config,
        config: ManagerConfig,
        vm: Arc<dyn Reconciler>,
        vmi: Arc<dyn Reconciler>,
    ) -> Result<Self, ManagerError> {
        Self::start_inner(client, Some(write_config), config, vm, vmi).await
    }

    async fn start_inner(
        client: kube::Client,
        write_config: Option<kube::Config>,
        config: ManagerConfig,
        vm: Arc<dyn Reconciler>,
        vmi: Arc<dyn Reconciler>,
    ) -> Result<Self, ManagerError> {
        config
            .lease
            .validate()
            .map_err(|e| ManagerError::Config(e.to_string()))?;
        let stop = CancellationToken::new();
        let metrics = Arc::new(Metrics::new());
        // One bucket for every request of the controllers, reads, watches and writes (KubeVirt's
        // rest client limiter); the Lease calls keep `client`, unlimited.
        let limiter = client_limiter(config.client_rate_limit, &config.settings, &metrics);
        let unlimited = client.clone();
        let client = match &limiter {
            Some(limiter) => rate_limited_client(client, limiter.clone()),
            None => client,
        };
        let vm_queue = QueueSlot::default();
        let vmi_queue = QueueSlot::default();
        let expectations = Expectations::with_timeout(config.expectations_timeout);
        let reconciles = ReconcileLog::default();

        let (caches, cluster_config) = spawn_caches(
            &client,
            &config,
            limiter.clone(),
            Queues {
                vm: &vm_queue,
                vmi: &vmi_queue,
                expectations: &expectations,
                changed: reconciles.changed_keys(),
            },
            &stop,
        )
        .await;

        // Both queues' series exist from the start, at zero, as in KubeVirt, whose queues exist
        // on a standby too (a dashboard shows 0, not "no data"); the queues themselves are only
        // built while leading.
        for queue in [super::vm::QUEUE_NAME, super::vmi::QUEUE_NAME] {
            metrics.workqueue().for_queue(queue);
        }
        let leading_gauge = metrics.register_gauge(
            "kubevirt_virt_controller_leading_status",
            "Indication for an operating virt-controller (1 while leading the Lease)",
        );
        let ready_gauge = metrics.register_gauge(
            "kubevirt_virt_controller_ready_status",
            "Indication for a virt-controller that is ready to take the lead",
        );
        ready_gauge.set(1);
        cluster_config.register_metrics(&metrics);
        // Every controller write (and event) is fenced by the leadership term: none is sent
        // once the term is over by our monotonic clock (runtime::lease::fence).
        let fence = TermFence::default();
        let writer = match write_config {
            Some(write_config) => fenced_client_from_config(write_config, fence.clone())
                .map_err(|e| ManagerError::WriteClient(e.to_string()))?,
            None => fenced_client(unlimited.clone(), fence.clone()),
        };
        // The limiter first, the fence after it: a write that waited past the term is refused.
        let writer = match &limiter {
            Some(limiter) => rate_limited_client(writer, limiter.clone()),
            None => writer,
        };
        let ctx = Context {
            client: writer.clone(),
            cluster_config,
            caches,
            vm_queue,
            vmi_queue,
            expectations,
            events: EventSink::spawn(writer).with_flight(config.record.clone()),
            reconciles,
            metrics,
            vm_mutations: Default::default(),
            flight: config.record.clone(),
        };
        let leader = Arc::new(RwLock::new(LeaderState {
            lease: config.lease.describe(),
            identity: config.lease.identity.clone(),
            phase: ElectionPhase::Idle,
            leading: false,
            holder: None,
            observed_at: None,
            lease_transitions: None,
            acquire_time: None,
            last_renew: None,
            last_error: None,
        }));
        let mut manager = Manager {
            ctx,
            config,
            leader,
            listen_addr: None,
            leading_gauge,
            stop,
            vm,
            vmi,
            lease_client: None,
            client: unlimited,
            wall_clock: None,
            fence,
        };
        if let Some(addr) = manager.config.listen {
            let (bound, _task) =
                crate::runtime::http::serve(addr, manager.endpoint_sources(), manager.stop.clone())
                    .await
                    .map_err(|source| ManagerError::Listen { addr, source })?;
            manager.listen_addr = Some(bound);
            manager.config.lease.annotations.insert(
                DEBUG_ENDPOINT_ANNOTATION.to_string(),
                format!("http://{bound}/debug/state"),
            );
        }
        Ok(manager)
    }

    /// The shared controller context (caches, expectations, reconcile log).
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Where the HTTP endpoints listen, if enabled.
    pub fn listen_addr(&self) -> Option<SocketAddr> {
        self.listen_addr
    }

    /// A cheap, cloneable reader of the latest leader election state.
    pub(crate) fn leader_state_handle(&self) -> impl Fn() -> LeaderState + Send + Sync + 'static {
        let leader = self.leader.clone();
        move || leader.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The latest leader election state.
    pub fn leader_state(&self) -> LeaderState {
        self.leader
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn endpoint_sources(&self) -> crate::runtime::http::EndpointSources {
        let metrics = self.ctx.metrics.clone();
        let leader = self.leader.clone();
        let debug = self.debug_source();
        let client = self.ctx.client.clone();
        crate::runtime::http::EndpointSources {
            metrics: Arc::new(move || {
                metrics
                    .encode()
                    .unwrap_or_else(|e| format!("# encoding failed: {e}\n"))
            }),
            leading: Arc::new(move || leader.read().map(|l| l.leading).unwrap_or(false)),
            debug_state: Arc::new(move |key: Option<&str>| {
                let state = match key {
                    Some(key) => debug.for_key(key).map_err(|e| e.to_string())?,
                    None => debug.full(),
                };
                serde_json::to_value(state).map_err(|e| e.to_string())
            }),
            healthz: Arc::new(move || {
                let client = client.clone();
                Box::pin(async move {
                    client
                        .apiserver_version()
                        .await
                        .map(|v| v.git_version)
                        .map_err(|e| e.to_string())
                })
            }),
        }
    }

    /// Make the Lease calls through `client`: one built by
    /// [`crate::runtime::lease::api::lease_client`] (no hidden retries) for the same server and
    /// user as the controllers' client.
    pub(crate) fn with_lease_client(mut self, client: kube::Client) -> Self {
        self.lease_client = Some(client);
        self
    }

    /// Write the Lease's `acquireTime`/`renewTime` from `clock` instead of `Utc::now` (tests of
    /// clock skew between instances: expiry never depends on it, see
    /// [`LeaderElector::with_wall_clock`]).
    pub fn with_wall_clock(mut self, clock: crate::runtime::lease::WallClock) -> Self {
        self.wall_clock = Some(clock);
        self
    }

    /// A cheap handle that assembles the typed `/debug/state` document on demand.
    pub fn debug_source(&self) -> DebugStateSource {
        DebugStateSource::new(self.ctx.clone(), self.leader.clone())
    }

    /// The full `/debug/state` document as JSON (see [`DebugStateSource::full`]).
    pub fn debug_state(&self) -> serde_json::Value {
        serde_json::to_value(self.debug_source().full()).unwrap_or_default()
    }

    /// Compete for the Lease and run the controllers while leading, until `cancel` (graceful:
    /// in-flight work finishes, the Lease is released) or until the Lease is lost
    /// (`Err(LeaseLost)` unless `on_lost_lease` is `Standby`).
    pub async fn run(&self, cancel: CancellationToken) -> Result<(), ManagerError> {
        let lease_client = self
            .lease_client
            .clone()
            .unwrap_or_else(|| self.client.clone());
        loop {
            let mut elector =
                LeaderElector::from_client(lease_client.clone(), self.config.lease.clone())
                    .map_err(|e| ManagerError::Config(e.to_string()))?;
            if let Some(clock) = &self.wall_clock {
                elector = elector.with_wall_clock(clock.clone());
            }
            elector = elector.with_term_fence(self.fence.clone());
            let mut rx = elector.subscribe();
            let shared = self.leader.clone();
            let gauge = self.leading_gauge.clone();
            let forward = tokio::spawn(async move {
                loop {
                    {
                        let mut state = rx.borrow_and_update().clone();
                        gauge.set(i64::from(state.leading));
                        let mut published = shared.write().unwrap_or_else(|e| e.into_inner());
                        // A new elector starts with no error: until it leads, keep showing the
                        // error that ended the previous term (why this instance lost the
                        // Lease), in /debug/state, /leader consumers and the inspector.
                        if state.last_error.is_none() && !state.leading {
                            state.last_error = published.last_error.take();
                        }
                        *published = state;
                    }
                    if rx.changed().await.is_err() {
                        break;
                    }
                }
                // The elector is gone. After a normal end its last state already says so; if
                // `run` was dropped while leading (its task aborted), nobody renews for us any
                // more and the leader work was stopped with it: do not keep claiming to lead.
                gauge.set(0);
                let mut state = shared.write().unwrap_or_else(|e| e.into_inner());
                if state.leading {
                    state.leading = false;
                    state.phase = ElectionPhase::Stopped;
                }
            });
            let term_ctx = self.ctx.clone();
            let (vm, vmi) = (self.vm.clone(), self.vmi.clone());
            let (vm_workers, vmi_workers) = (self.config.vm_workers, self.config.vmi_workers);
            let lease = self.config.lease.describe();
            let outcome = elector
                .run_with(cancel.clone(), move |term| async move {
                    let _recorded = RecordedTerm::begin(&term_ctx, lease);
                    run_term(term_ctx, vm, vmi, vm_workers, vmi_workers, term).await;
                })
                .await;
            let _ = forward.await;
            self.leading_gauge.set(0);
            match outcome {
                RunOutcome::Lost { reason } => match self.config.on_lost_lease {
                    OnLostLease::Exit => {
                        return Err(ManagerError::LeaseLost {
                            lease: self.config.lease.describe(),
                            reason,
                        });
                    }
                    OnLostLease::Standby => {
                        let lease = self.config.lease.describe();
                        tracing::warn!(%lease, "lost the Lease: it {reason}; all work cancelled; back to standby");
                        continue;
                    }
                },
                RunOutcome::Cancelled { .. } => {
                    self.stop.cancel();
                    return Ok(());
                }
            }
        }
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// One leadership term: wait for the caches, create fresh queues, enqueue every object, and run
/// the workers until `term` is cancelled.
async fn run_term(
    ctx: Context,
    vm: Arc<dyn Reconciler>,
    vmi: Arc<dyn Reconciler>,
    vm_workers: usize,
    vmi_workers: usize,
    term: CancellationToken,
) {
    tokio::select! {
        _ = ctx.caches.wait_synced() => {}
        _ = term.cancelled() => return,
    }
    // A new term starts from clean expectations, as a freshly started virt-controller does
    // (entries left by an earlier term may describe writes that never happened).
    let e = &ctx.expectations;
    for store in [&e.vmi_self, &e.pvc] {
        for entry in store.snapshot().entries {
            store.delete_expectations(&entry.key);
        }
    }
    for store in [&e.vmi, &e.data_volume, &e.pod] {
        for entry in store.snapshot().entries {
            store.delete_expectations(&entry.key);
        }
    }
    let vm_queue: WorkQueue = WorkQueue::builder(super::vm::QUEUE_NAME)
        .metrics(ctx.metrics.workqueue())
        .build();
    let vmi_queue: WorkQueue = WorkQueue::builder(super::vmi::QUEUE_NAME)
        .metrics(ctx.metrics.workqueue())
        .build();
    ctx.vm_queue.set(Some(vm_queue.clone()));
    ctx.vmi_queue.set(Some(vmi_queue.clone()));
    // Cleared when the term ends, also if this task is aborted (see `LeaderElector::run_with`).
    let _slots = ClearQueueSlots(ctx.vm_queue.clone(), ctx.vmi_queue.clone());
    for obj in ctx.caches.vms.store().state() {
        vm_queue.add(key_of(obj.as_ref()));
    }
    for obj in ctx.caches.vmis.store().state() {
        vmi_queue.add(key_of(obj.as_ref()));
    }
    tracing::info!(
        vm_workers,
        vmi_workers,
        "leading: starting the VM and VMI controllers"
    );
    let run =
        |queue: WorkQueue, workers: usize, reconciler: Arc<dyn Reconciler>, name: &'static str| {
            let ctx = Arc::new(ctx.clone());
            let term = term.clone();
            run_workers(
                queue,
                workers,
                move |key: String| {
                    let ctx = ctx.clone();
                    let reconciler = reconciler.clone();
                    async move {
                        let started = Instant::now();
                        let started_at = chrono::Utc::now();
                        let result = reconciler.reconcile(ctx.clone(), key.clone()).await;
                        // The executors record their own outcome with the actions they applied;
                        // record here only when they did not (a failure before recording).
                        let recorded = ctx.reconciles.recorded_since(name, &key, started_at);
                        if let (Err(e), false) = (&result, recorded) {
                            ctx.reconciles
                                .finish(name, &key, started, Some(e), None, Vec::new());
                        }
                        result
                    }
                },
                term,
            )
        };
    // Keys whose expected watch event never came are synced again when their expectations
    // expire, and cached objects whose deletion is overdue are read from the server (neither
    // in KubeVirt, which waits for the informer resync).
    let requeue_expired = {
        let (ctx, vm_queue, vmi_queue, term) = (
            ctx.clone(),
            vm_queue.clone(),
            vmi_queue.clone(),
            term.clone(),
        );
        async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = term.cancelled() => return,
                    _ = tick.tick() => {
                        ctx.expectations.requeue_expired(&vm_queue, &vmi_queue);
                        ctx.confirm_overdue_deletions().await;
                    }
                }
            }
        }
    };
    tokio::join!(
        run(vm_queue, vm_workers, vm, "vm"),
        run(vmi_queue, vmi_workers, vmi, "vmi"),
        requeue_expired,
    );
    tracing::info!("stopped the VM and VMI controllers");
}

/// A leadership term in the flight recording: `started-leading` and the settings at its start,
/// `stopped-leading` when dropped (also when the term's task is aborted).
struct RecordedTerm(Option<crate::flight::FlightRecorder>, String);

impl RecordedTerm {
    fn begin(ctx: &Context, lease: String) -> Self {
        if let Some(f) = &ctx.flight {
            f.record(crate::flight::Body::Lease {
                event: "started-leading".into(),
                lease: lease.clone(),
            });
            let settings = serde_json::to_value(ctx.cluster_config.settings().as_ref())
                .unwrap_or(serde_json::Value::Null);
            f.record(crate::flight::Body::Settings { settings });
        }
        RecordedTerm(ctx.flight.clone(), lease)
    }
}

impl Drop for RecordedTerm {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            f.record(crate::flight::Body::Lease {
                event: "stopped-leading".into(),
                lease: self.1.clone(),
            });
            f.flush();
        }
    }
}

/// Empties the queue slots of a term when dropped: handlers then drop keys, `/debug/state`
/// shows no queues.
struct ClearQueueSlots(QueueSlot, QueueSlot);

impl Drop for ClearQueueSlots {
    fn drop(&mut self) {
        self.0.set(None);
        self.1.set(None);
    }
}
