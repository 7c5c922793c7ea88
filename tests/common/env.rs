//! The `Env` scenario builder: one cluster plus one controller manager with the real
//! reconcilers, leading under a short Lease.
//!
//! The cluster is the one [`Server`] says: the embedded cluster (the project's API server and
//! simulated nodes, with fault rules), or the real control plane (kube-apiserver + etcd +
//! kube-controller-manager, [`super::control_plane`]) with the same simulated nodes pointed at
//! it. Scenarios written against `Env` run on both; [`on_both_servers!`] declares the two tests.
//! On the real server every test has a namespace of its own, the manager watches only that
//! namespace and keeps its Lease there, and the tests run one at a time (the simulated nodes
//! and the `kubectl virtctl-rs` processes act cluster-wide).
//!
//! [`EnvConfig::new`] gives the end-to-end tests' settings; the reliability and writes tests
//! change the cluster (faults, node count) and the Lease timing, and install faults between
//! cluster start and manager start with [`Env::start_with`] (embedded server only).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::labels::CREATED_BY;
use virtctl_rs::api::{Phase, VirtualMachine, VirtualMachineInstance};
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::controller::context::ReconcileRecord;
use virtctl_rs::controller::manager::{Manager, ManagerConfig, ManagerError};
use virtctl_rs::runtime::lease::LeaderElectionConfig;
use virtctl_rs::sim::AuditEntry;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use virtctl_rs::sim::nodes::{NodeSimConfig, NodeSimHandle, NodeSimulator};

use super::control_plane::ControlPlane;

/// The API server a scenario runs against.
#[derive(Debug, Clone, Copy)]
pub enum Server {
    /// The project's embedded cluster, one per test.
    Embedded,
    /// The test binary's real control plane ([`super::control_plane::shared`]), a namespace
    /// per test.
    Real(&'static ControlPlane),
}

impl Server {
    /// Whether virt-api's webhooks run: on the embedded server unless switched off; never on
    /// the real one, whose controller then does the webhook work it depends on itself.
    pub fn is_real(&self) -> bool {
        matches!(self, Server::Real(_))
    }
}

/// Declare each listed `async fn NAME(server: Server)` scenario as two tests,
/// `embedded::NAME` and `real_apiserver::NAME`; the second prints a `SKIP` line and passes when
/// the control plane is not built (`cargo test real_apiserver` runs exactly the second kind).
macro_rules! on_both_servers {
    ($($name:ident),+ $(,)?) => {
        mod embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(crate::common::env::Server::Embedded).await
                }
            )+
        }
        mod real_apiserver {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(plane) = crate::common::control_plane::shared(stringify!($name))
                    else {
                        return;
                    };
                    super::$name(crate::common::env::Server::Real(plane)).await
                }
            )+
        }
    };
}

/// Real-server scenarios run one at a time (a `tokio` mutex works across the tests' runtimes).
static REAL_SERVER_TURN: std::sync::LazyLock<Arc<tokio::sync::Mutex<()>>> =
    std::sync::LazyLock::new(|| Arc::new(tokio::sync::Mutex::new(())));

/// Wait for the real server's turn: the guard ends it when dropped.
pub async fn real_server_turn() -> tokio::sync::OwnedMutexGuard<()> {
    REAL_SERVER_TURN.clone().lock_owned().await
}

/// The real server's side of an [`Env`].
pub struct RealCluster {
    pub plane: &'static ControlPlane,
    nodes: Option<NodeSimulator>,
    _turn: tokio::sync::OwnedMutexGuard<()>,
}

/// User agent of the controller manager's client (the default [`EnvConfig::controller_agent`]).
pub const CONTROLLER_AGENT: &str = "virt-controller";

/// How a scenario's cluster and controller are set up.
pub struct EnvConfig {
    /// The embedded cluster (default: 2 nodes, 50 ms kubelet delay, grace periods × 0.01).
    pub cluster: EmbeddedClusterConfig,
    /// User agent of the controller manager's client, so that faults and audit entries can
    /// be told apart from the test's own requests.
    pub controller_agent: &'static str,
    /// User agent of the test's client (`None`: the server's default client).
    pub user_agent: Option<&'static str>,
    /// The controller's Lease (default: [`e2e_lease`]).
    pub lease: LeaderElectionConfig,
    /// Namespace of the test's objects.
    pub namespace: String,
    /// Deadline of [`Env::wait_for`].
    pub deadline: Duration,
    /// Controller settings (default: KubeVirt's).
    pub settings: ClusterSettings,
    /// How long expectations hold a key back (default: KubeVirt's five minutes).
    pub expectations_timeout: Duration,
    /// The manager's HTTP endpoints (default: none); with an address, the Lease names its
    /// `/debug/state` and `inspect` reads it.
    pub listen: Option<std::net::SocketAddr>,
    /// Namespace of the KubeVirt CR the controller follows (default `None`: beside its Lease).
    pub kubevirt_namespace: Option<String>,
    /// The controller's flight recorder (default: none).
    pub record: Option<virtctl_rs::flight::FlightRecorder>,
    /// On the real server: KubeVirt's own virt-api serves the server's webhooks (started by the
    /// test, `tests/reference_virt_api.rs`), so the controller does not stand in for them, and
    /// the controller and the simulated nodes authenticate as KubeVirt's controller
    /// ServiceAccount, whose VMI writes virt-api lets through ([`KUBEVIRT_CONTROLLER_USER`]).
    /// Default `false`: no virt-api, `without_virt_api`.
    ///
    /// [`KUBEVIRT_CONTROLLER_USER`]: super::control_plane::KUBEVIRT_CONTROLLER_USER
    pub behind_virt_api: bool,
}

impl EnvConfig {
    /// A cluster without virt-api: the API server runs no admission and the controller does
    /// the webhook work it depends on itself (`ClusterSettings::without_virt_api`).
    pub fn without_virt_api(mut self) -> Self {
        self.cluster.api.admission = false;
        self.settings.without_virt_api = true;
        self
    }

    /// The end-to-end tests' settings, with Lease holder `identity`.
    pub fn new(identity: &str) -> EnvConfig {
        let lease = e2e_lease(identity);
        EnvConfig {
            cluster: EmbeddedClusterConfig {
                nodes: 2,
                kubelet_delay: Duration::from_millis(50),
                grace_scale: 0.01,
                // The tests check invariants over the whole run's log (the fault soak's
                // "never two"): keep every entry.
                api: virtctl_rs::sim::ApiServerConfig {
                    audit_capacity: None,
                    ..Default::default()
                },
                ..Default::default()
            },
            controller_agent: CONTROLLER_AGENT,
            user_agent: None,
            lease,
            namespace: "default".into(),
            deadline: Duration::from_secs(40),
            settings: ClusterSettings::default(),
            expectations_timeout: virtctl_rs::runtime::expectations::EXPECTATIONS_TIMEOUT,
            listen: None,
            kubevirt_namespace: None,
            record: None,
            behind_virt_api: false,
        }
    }

    /// A 15 s Lease with a 10 s renew deadline and the given retry period: no renewal falls
    /// inside a short test, and no other candidate competes.
    pub fn long_lease(mut self, retry: Duration) -> Self {
        self.lease.lease_duration = Duration::from_secs(15);
        self.lease.renew_deadline = Duration::from_secs(10);
        self.lease.retry_period = retry;
        self
    }
}

/// One cluster plus one leading controller manager.
pub struct Env {
    /// The embedded cluster ([`Server::Embedded`]).
    pub cluster: Option<EmbeddedCluster>,
    /// The real server's namespace and simulated nodes ([`Server::Real`]).
    pub real: Option<RealCluster>,
    /// The test's client.
    pub client: Client,
    pub manager: Arc<Manager>,
    pub cancel: CancellationToken,
    pub run: Option<JoinHandle<Result<(), ManagerError>>>,
    /// Namespace of the test's objects ([`EnvConfig::namespace`]).
    pub namespace: String,
    /// Deadline of [`Env::wait_for`].
    pub deadline: Duration,
    /// Namespace of the manager's Lease.
    lease_namespace: String,
    /// The namespace of the KubeVirt CR the manager follows.
    kubevirt_namespace: String,
    /// What [`Env::start_manager_again`] starts a new manager with.
    restart: (Client, ManagerConfig),
}

impl Env {
    /// [`EnvConfig::new`]`("ctrl-e2e")`, nothing installed before the manager starts.
    pub async fn start() -> Env {
        Env::start_with(EnvConfig::new("ctrl-e2e"), |_| {}).await
    }

    /// [`Env::start`] on a cluster without virt-api ([`EnvConfig::without_virt_api`]).
    pub async fn start_without_virt_api() -> Env {
        Env::start_with(EnvConfig::new("ctrl-e2e").without_virt_api(), |_| {}).await
    }

    /// [`EnvConfig::new`]`("ctrl-e2e")` on `server` (on the real server, without virt-api).
    pub async fn start_on(server: Server) -> Env {
        Env::start_on_with(server, EnvConfig::new("ctrl-e2e")).await
    }

    /// `config` on `server`. On the real server the cluster's node settings apply, its API
    /// server settings (faults, admission) do not, and there is no virt-api.
    pub async fn start_on_with(server: Server, config: EnvConfig) -> Env {
        match server {
            Server::Embedded => Env::start_with(config, |_| {}).await,
            Server::Real(plane) => Env::start_real(plane, config).await,
        }
    }

    /// Start the cluster, call `before_manager` with it (to install faults, say), start the
    /// manager and wait until it leads with synced caches and both work queues exist.
    pub async fn start_with(
        config: EnvConfig,
        before_manager: impl FnOnce(&EmbeddedCluster),
    ) -> Env {
        let cluster = EmbeddedCluster::start(config.cluster.clone())
            .await
            .expect("embedded cluster starts");
        before_manager(&cluster);
        let client = match config.user_agent {
            Some(agent) => cluster
                .api()
                .client_with_agent(agent)
                .await
                .expect("user client"),
            None => cluster.client().await.expect("client"),
        };
        let controller_client = cluster
            .api()
            .client_with_agent(config.controller_agent)
            .await
            .expect("controller client");
        let mut env = Env::start_manager(controller_client, client, config, None).await;
        env.cluster = Some(cluster);
        env.wait_manager_ready().await;
        env
    }

    async fn start_real(plane: &'static ControlPlane, mut config: EnvConfig) -> Env {
        let turn = real_server_turn().await;
        let namespace = ControlPlane::fresh_namespace("e2e");
        plane.create_namespace(&namespace).await;
        // The simulated nodes play virt-handler, whose ServiceAccount virt-api's VMI update
        // admitter holds to its own node through the token's node name
        // (vmi-update-admitter.go:62-97, NodeRestriction is a Beta gate, on by default); a static
        // token carries none, so behind virt-api they write as the controller's ServiceAccount.
        let nodes_config = if config.behind_virt_api {
            plane.kubevirt_kube_config("sim-nodes").await
        } else {
            plane.kube_config("sim-nodes").await
        };
        let nodes = NodeSimulator::start(
            nodes_config,
            NodeSimConfig {
                nodes: config.cluster.nodes,
                kubelet_delay: config.cluster.kubelet_delay,
                grace_scale: config.cluster.grace_scale,
                capacity: config.cluster.capacity.clone(),
                labels: config.cluster.labels.clone(),
                // kube-apiserver alone binds no claim: the nodes play the volume binder.
                bind_claims: true,
            },
        )
        .await
        .expect("simulated nodes on the real server");
        let client = plane
            .client(config.user_agent.unwrap_or("virtctl-rs-e2e"))
            .await;
        let controller_client = if config.behind_virt_api {
            plane.kubevirt_client(config.controller_agent).await
        } else {
            plane.client(config.controller_agent).await
        };
        config.namespace = namespace.clone();
        config.settings.without_virt_api = !config.behind_virt_api;
        config.lease.namespace = namespace.clone();
        let real = RealCluster {
            plane,
            nodes: Some(nodes),
            _turn: turn,
        };
        let mut env = Env::start_manager(controller_client, client, config, Some(namespace)).await;
        env.real = Some(real);
        env.wait_manager_ready().await;
        env
    }

    async fn start_manager(
        controller_client: Client,
        client: Client,
        config: EnvConfig,
        watch_namespace: Option<String>,
    ) -> Env {
        let lease_namespace = config.lease.namespace.clone();
        let kubevirt_namespace = config
            .kubevirt_namespace
            .unwrap_or_else(|| lease_namespace.clone());
        let manager_config = ManagerConfig {
            settings: config.settings,
            namespace: watch_namespace,
            expectations_timeout: config.expectations_timeout,
            listen: config.listen,
            // The KubeVirt CR is the scenario's, beside its Lease unless the config says
            // otherwise (`kubevirt` on the embedded server, the scenario's namespace on the real
            // one); `inspect --kubevirt-namespace` reads it there.
            kubevirt_namespace: Some(kubevirt_namespace.clone()),
            record: config.record,
            ..ManagerConfig::new(config.lease)
        };
        let restart = (controller_client.clone(), manager_config.clone());
        let (manager, cancel, run) = Env::spawn_manager(controller_client, manager_config).await;
        Env {
            cluster: None,
            real: None,
            client,
            manager,
            cancel,
            run: Some(run),
            namespace: config.namespace,
            deadline: config.deadline,
            lease_namespace,
            kubevirt_namespace,
            restart,
        }
    }

    async fn spawn_manager(
        client: Client,
        config: ManagerConfig,
    ) -> (
        Arc<Manager>,
        CancellationToken,
        JoinHandle<Result<(), ManagerError>>,
    ) {
        let (vm, vmi) = virtctl_rs::controller::reconcilers();
        let manager = Arc::new(
            Manager::start(client, config, vm, vmi)
                .await
                .expect("manager starts"),
        );
        let cancel = CancellationToken::new();
        let run = {
            let m = manager.clone();
            let c = cancel.clone();
            tokio::spawn(async move { m.run(c).await })
        };
        (manager, cancel, run)
    }

    /// Stop the manager (it releases its Lease); the cluster goes on without a controller.
    pub async fn stop_manager(&mut self) {
        self.cancel.cancel();
        if let Some(run) = self.run.take() {
            let r = run.await.expect("manager task");
            assert!(r.is_ok(), "manager stopped with an error: {r:?}");
        }
    }

    /// Start a new manager with the first one's settings, as a restarted controller process
    /// would, and wait until it leads with synced caches.
    pub async fn start_manager_again(&mut self) {
        let (client, config) = self.restart.clone();
        let (manager, cancel, run) = Env::spawn_manager(client, config).await;
        self.manager = manager;
        self.cancel = cancel;
        self.run = Some(run);
        self.wait_manager_ready().await;
    }

    /// Kill the manager as a crashed process dies: its task is aborted, so the Lease is not
    /// released and stays held until it expires; its term's work and write fence end with it.
    pub async fn kill_manager(&mut self) {
        if let Some(run) = self.run.take() {
            run.abort();
            let _ = run.await;
        }
        self.cancel.cancel();
    }

    /// Start a new manager with the first one's settings but another Lease identity and client
    /// user agent (an instance on another host), on the embedded cluster, and wait until it
    /// leads with synced caches.
    pub async fn start_manager_as(&mut self, agent: &str, identity: &str) {
        let client = self
            .cluster()
            .api()
            .client_with_agent(agent)
            .await
            .expect("controller client");
        let mut config = self.restart.1.clone();
        config.lease.identity = identity.to_string();
        let (manager, cancel, run) = Env::spawn_manager(client, config).await;
        self.manager = manager;
        self.cancel = cancel;
        self.run = Some(run);
        self.wait_manager_ready().await;
    }

    /// The namespace of the manager's Lease (`kubevirt`; the scenario's namespace on the real
    /// server), for `inspect --lease-namespace`.
    pub fn manager_lease_namespace(&self) -> String {
        self.lease_namespace.clone()
    }

    /// The namespace of the KubeVirt CR the manager follows, for `inspect
    /// --kubevirt-namespace`.
    pub fn manager_kubevirt_namespace(&self) -> String {
        self.kubevirt_namespace.clone()
    }

    /// The KubeVirt CRs of `namespace`.
    pub fn kubevirts(&self, namespace: &str) -> Api<kube::api::DynamicObject> {
        use kube::api::{ApiResource, GroupVersionKind};
        let gvk = GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt");
        let ar = ApiResource::from_gvk_with_plural(&gvk, "kubevirts");
        Api::namespaced_with(self.client.clone(), namespace, &ar)
    }

    /// Create the KubeVirt CR the manager follows, with this `spec.configuration`.
    pub async fn create_kubevirt_cr(&self, configuration: Value) {
        let kubevirts = self.kubevirts(&self.kubevirt_namespace);
        let cr = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
            "metadata": {"name": "kubevirt"}, "spec": {"configuration": configuration}});
        kubevirts
            .create(
                &PostParams::default(),
                &serde_json::from_value(cr).expect("a KubeVirt CR"),
            )
            .await
            .expect("create the KubeVirt CR");
    }

    /// Turn KubeVirt feature gates on through the KubeVirt CR and wait until the controller
    /// follows them.
    pub async fn enable_feature_gates(&self, gates: &[&str]) {
        self.create_kubevirt_cr(json!({"developerConfiguration": {"featureGates": gates}}))
            .await;
        self.wait_for("the controller to load the feature gates", || async {
            let s = self.manager.debug_state()["settings"]["current"].clone();
            (s["featureGates"] == json!(gates)).then_some(())
        })
        .await;
    }

    async fn wait_manager_ready(&self) {
        self.wait_for("the manager to lead with synced caches", || async {
            let ctx = self.manager.context();
            (self.manager.leader_state().leading
                && ctx.caches.all_synced()
                && ctx.vm_queue.get().is_some()
                && ctx.vmi_queue.get().is_some())
            .then_some(())
        })
        .await;
    }

    /// Which server this scenario runs on.
    pub fn server(&self) -> Server {
        match &self.real {
            Some(real) => Server::Real(real.plane),
            None => Server::Embedded,
        }
    }

    /// The simulated nodes' control handle (crash a guest, remove a node, …), on either server.
    pub fn nodes(&self) -> &NodeSimHandle {
        match (&self.cluster, &self.real) {
            (Some(cluster), _) => cluster.nodes(),
            (None, Some(real)) => real.nodes.as_ref().expect("nodes running").handle(),
            (None, None) => panic!("no cluster"),
        }
    }

    /// The server's record of write requests in this scenario's namespace (the embedded
    /// server's audit log, or kube-apiserver's; reads are only in the embedded one).
    pub fn audit(&self) -> Vec<AuditEntry> {
        match (&self.cluster, &self.real) {
            (Some(cluster), _) => cluster.api().audit().entries(),
            (None, Some(real)) => real.plane.audit(&self.namespace),
            (None, None) => panic!("no cluster"),
        }
    }

    /// Path of a kubeconfig for the cluster (the admin's, on the real server).
    pub fn kubeconfig_path(&self) -> std::path::PathBuf {
        match (&self.cluster, &self.real) {
            (Some(cluster), _) => cluster.kubeconfig_path().to_path_buf(),
            (None, Some(real)) => real.plane.kubeconfig.clone(),
            (None, None) => panic!("no cluster"),
        }
    }

    /// Wait until this instance leads and both work queues are empty.
    pub async fn wait_leading_and_idle(&self) {
        self.wait_for("leadership and idle queues", || async {
            (self.manager.leader_state().leading && self.queues_idle()).then_some(())
        })
        .await;
    }

    /// Both work queues exist (leading) and hold no queued, in-flight or parked key.
    pub fn queues_idle(&self) -> bool {
        let ctx = self.manager.context();
        [&ctx.vm_queue, &ctx.vmi_queue].iter().all(|slot| {
            slot.get().is_some_and(|q| {
                let s = q.snapshot();
                s.depth == 0 && s.in_flight.is_empty() && s.waiting.is_empty()
            })
        })
    }

    /// True when the controller's VM, VMI and launcher-pod caches hold exactly the server's
    /// objects of the namespace, at the server's resourceVersions.
    pub async fn caches_current(&self) -> bool {
        let caches = &self.manager.context().caches;
        let lp = ListParams::default();
        let (Ok(vms), Ok(vmis), Ok(pods)) = (
            self.vms().list(&lp).await,
            self.vmis().list(&lp).await,
            self.pods()
                .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
                .await,
        ) else {
            return false;
        };
        fn same<K>(store: &virtctl_rs::runtime::store::Store<K>, items: &[K]) -> bool
        where
            K: Resource<DynamicType = ()> + Clone + 'static,
        {
            store.state().len() == items.len()
                && items.iter().all(|o| {
                    let meta = o.meta();
                    let key = ObjectRef::<K>::new(meta.name.as_deref().unwrap_or(""))
                        .within(meta.namespace.as_deref().unwrap_or(""));
                    store.get(&key).map(|c| c.meta().resource_version.clone())
                        == Some(meta.resource_version.clone())
                })
        }
        same(caches.vms.store(), &vms.items)
            && same(caches.vmis.store(), &vmis.items)
            && same(
                caches.pods.store(),
                &pods
                    .items
                    .iter()
                    .map(|p| serde_json::from_value(serde_json::json!(p)).expect("a pod"))
                    .collect::<Vec<_>>(),
            )
    }

    pub fn cluster(&self) -> &EmbeddedCluster {
        self.cluster.as_ref().expect("cluster running")
    }

    pub fn vms(&self) -> Api<VirtualMachine> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn vmis(&self) -> Api<VirtualMachineInstance> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub fn revisions(&self) -> Api<ControllerRevision> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Create `vm` in the scenario's namespace (whatever namespace it names).
    pub async fn create_vm(&self, vm: &VirtualMachine) -> VirtualMachine {
        let mut vm = vm.clone();
        vm.metadata.namespace = Some(self.namespace.clone());
        self.vms()
            .create(&PostParams::default(), &vm)
            .await
            .expect("create VM")
    }

    /// Create docs/examples/vm-priorityclass.yaml's PriorityClass (once: it is cluster-scoped
    /// and the real server is shared).
    pub async fn create_example_priority_class(&self) {
        use k8s_openapi::api::scheduling::v1::PriorityClass;
        let path = super::repo_path("docs/examples/vm-priorityclass.yaml");
        let text = std::fs::read_to_string(&path).expect("example");
        let doc = virtctl_rs::api::manifest::split_documents("vm-priorityclass.yaml", &text)
            .expect("documents")
            .into_iter()
            .map(|(_, d)| d)
            .find(|d| d["kind"] == "PriorityClass")
            .expect("the example's PriorityClass");
        let class: PriorityClass = serde_json::from_value(doc).expect("PriorityClass");
        match Api::<PriorityClass>::all(self.client.clone())
            .create(&PostParams::default(), &class)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create the example PriorityClass: {e}"),
        }
    }

    /// Create a ReadWriteOnce claim `name` of `size` in the test namespace.
    pub async fn create_claim(&self, name: &str, size: &str) {
        let claim = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}}}
        }))
        .expect("claim");
        self.pvcs()
            .create(&PostParams::default(), &claim)
            .await
            .unwrap_or_else(|e| panic!("create claim {name}: {e}"));
    }

    pub fn pvcs(&self) -> Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Create the PersistentVolumeClaims of `docs/examples/<file>` in the test namespace.
    pub async fn create_example_claims(&self, file: &str) {
        use k8s_openapi::api::core::v1::PersistentVolumeClaim;
        let path = super::repo_path("docs/examples").join(file);
        let text = std::fs::read_to_string(&path).expect("example");
        let docs = virtctl_rs::api::manifest::split_documents(file, &text).expect("documents");
        for doc in docs.into_iter().map(|(_, d)| d) {
            if doc["kind"] != "PersistentVolumeClaim" {
                continue;
            }
            let claim: PersistentVolumeClaim = serde_json::from_value(doc).expect("claim");
            self.pvcs()
                .create(&PostParams::default(), &claim)
                .await
                .expect("create the example's claim");
        }
    }

    pub async fn vm(&self, name: &str) -> Option<VirtualMachine> {
        self.vms().get_opt(name).await.expect("get VM")
    }

    pub async fn vmi(&self, name: &str) -> Option<VirtualMachineInstance> {
        self.vmis().get_opt(name).await.expect("get VMI")
    }

    /// The UID of the VMI `name`, once it exists.
    pub async fn vmi_uid(&self, name: &str) -> Option<String> {
        self.vmi(name).await?.metadata.uid.clone()
    }

    /// Launcher pods of the VMI with this UID (label `kubevirt.io/created-by`).
    pub async fn launcher_pods(&self, vmi_uid: &str) -> Vec<Pod> {
        self.pods()
            .list(&ListParams::default().labels(&format!("{CREATED_BY}={vmi_uid}")))
            .await
            .expect("list pods")
            .items
    }

    /// The VMI as the controllers' cache holds it.
    pub fn cached_vmi(&self, name: &str) -> Option<Arc<VirtualMachineInstance>> {
        self.manager
            .context()
            .caches
            .vmis
            .store()
            .get(&ObjectRef::new(name).within(&self.namespace))
    }

    /// Successful VMI creations recorded by the API server's audit log for `name`.
    pub fn vmi_creations(&self, name: &str) -> Vec<DateTime<Utc>> {
        self.audit()
            .into_iter()
            .filter(|e| {
                e.verb == "create"
                    && e.resource == "virtualmachineinstances"
                    && e.subresource.is_empty()
                    && e.namespace == self.namespace
                    && e.name == name
                    && (200..300).contains(&e.code)
            })
            .map(|e| e.time)
            .collect()
    }

    pub fn last_vm_reconcile(&self, name: &str) -> Option<ReconcileRecord> {
        self.manager
            .context()
            .reconciles
            .get("vm", &format!("{}/{name}", self.namespace))
    }

    /// The VM key is neither queued nor being processed.
    pub fn vm_key_idle(&self, name: &str) -> bool {
        let key = format!("{}/{name}", self.namespace);
        match self.manager.context().vm_queue.get() {
            Some(q) => {
                let s = q.snapshot();
                !s.queued.iter().any(|k| k.key == key) && !s.in_flight.iter().any(|k| k.key == key)
            }
            None => false,
        }
    }

    /// Enqueue the VM (as a periodic resync would) and wait until a reconcile that started
    /// after now has finished without error and nothing is queued or running for the key. Any
    /// VMI create/delete the controller wants to make from its current caches has then been
    /// made.
    pub async fn resync_and_settle(&self, name: &str) {
        let since = Utc::now();
        self.manager
            .context()
            .vm_queue
            .add(format!("{}/{name}", self.namespace));
        self.wait_for(
            "the VM controller to reconcile the VM and go idle",
            || async {
                let rec = self.last_vm_reconcile(name)?;
                (rec.at > since && rec.result == "ok" && self.vm_key_idle(name)).then_some(())
            },
        )
        .await;
    }

    /// Poll `check` until it yields a value; panic with a dump of the cluster state after
    /// the scenario's deadline ([`EnvConfig::deadline`]).
    pub async fn wait_for<T, F, Fut>(&self, what: &str, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        self.wait_for_within(what, self.deadline, check).await
    }

    pub async fn wait_for_within<T, F, Fut>(&self, what: &str, deadline: Duration, check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        match super::poll_until(deadline, check).await {
            Some(v) => v,
            None => panic!(
                "timed out after {deadline:?} waiting for {what}\n{}",
                self.dump().await
            ),
        }
    }

    pub async fn wait_vm(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(&VirtualMachine) -> bool,
    ) -> VirtualMachine {
        self.wait_for(&format!("VM {name}: {what}"), || async {
            self.vm(name).await.filter(|vm| pred(vm))
        })
        .await
    }

    pub async fn wait_vmi(
        &self,
        name: &str,
        what: &str,
        pred: impl Fn(&VirtualMachineInstance) -> bool,
    ) -> VirtualMachineInstance {
        self.wait_for(&format!("VMI {name}: {what}"), || async {
            self.vmi(name).await.filter(|vmi| pred(vmi))
        })
        .await
    }

    /// Wait until the VM is Running (printable status, ready) and its VMI Running; returns both.
    /// Wait until VMI `name` has a condition for which `pick` holds.
    pub async fn wait_vmi_condition(
        &self,
        name: &str,
        what: &str,
        pick: impl Fn(&virtctl_rs::api::Condition) -> bool,
    ) -> VirtualMachineInstance {
        self.wait_vmi(name, what, |vmi| {
            vmi.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .any(&pick)
        })
        .await
    }

    pub async fn wait_running(&self, name: &str) -> (VirtualMachine, VirtualMachineInstance) {
        self.wait_for(&format!("VM {name} and its VMI Running"), || async {
            let vm = self.vm(name).await?;
            let vmi = self.vmi(name).await?;
            (printable(&vm) == "Running"
                && vm_status(&vm)["ready"] == json!(true)
                && vmi.phase() == Phase::Running
                && !vmi.is_deleting())
            .then_some((vm, vmi))
        })
        .await
    }

    pub async fn wait_vmi_gone(&self, name: &str) {
        self.wait_for(&format!("VMI {name} to be gone"), || async {
            self.vmi(name).await.is_none().then_some(())
        })
        .await
    }

    pub async fn wait_pods_gone(&self, vmi_uid: &str) {
        self.wait_for(
            &format!("launcher pods of VMI {vmi_uid} to be gone"),
            || async { self.launcher_pods(vmi_uid).await.is_empty().then_some(()) },
        )
        .await
    }

    /// Replace `status.stateChangeRequests` through the VM `status` subresource, as virt-api's
    /// start/stop subresources do (pkg/virt-api/rest/lifecycle.go; they send a JSON patch, this
    /// sends the equivalent merge patch).
    pub async fn set_state_change_requests(&self, name: &str, requests: Value) {
        self.vms()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"stateChangeRequests": requests}})),
            )
            .await
            .expect("patch VM status");
    }

    pub async fn merge_patch_vm(&self, name: &str, patch: Value) -> VirtualMachine {
        self.vms()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch VM")
    }

    /// VMs, VMIs, launcher pods and the reconcile log, for timeout messages.
    pub async fn dump(&self) -> String {
        let mut out = String::new();
        if let Ok(list) = self.vms().list(&ListParams::default()).await {
            for vm in list.items {
                out.push_str(&format!(
                    "VM {} gen={:?} deleting={} finalizers={:?} runStrategy={:?} status={}\n",
                    vm.name_any(),
                    vm.metadata.generation,
                    vm.metadata.deletion_timestamp.is_some(),
                    vm.metadata.finalizers,
                    vm.spec.run_strategy,
                    serde_json::to_string(&vm.status).unwrap_or_default()
                ));
            }
        }
        if let Ok(list) = self.vmis().list(&ListParams::default()).await {
            for vmi in list.items {
                out.push_str(&format!(
                    "VMI {} uid={:?} phase={:?} deleting={} finalizers={:?} owners={} status={}\n",
                    vmi.name_any(),
                    vmi.metadata.uid,
                    vmi.phase(),
                    vmi.is_deleting(),
                    vmi.metadata.finalizers,
                    serde_json::to_string(&vmi.metadata.owner_references).unwrap_or_default(),
                    serde_json::to_string(&vmi.status).unwrap_or_default()
                ));
            }
        }
        if let Ok(list) = self.pods().list(&ListParams::default()).await {
            for p in list.items {
                out.push_str(&format!(
                    "Pod {} phase={:?} node={:?} deleting={}\n",
                    p.name_any(),
                    p.status.as_ref().and_then(|s| s.phase.clone()),
                    p.spec.as_ref().and_then(|s| s.node_name.clone()),
                    p.metadata.deletion_timestamp.is_some()
                ));
            }
        }
        out.push_str(&format!(
            "reconciles: {}\nqueues/expectations: {}\n",
            serde_json::to_string(&self.manager.context().reconciles.snapshot())
                .unwrap_or_default(),
            serde_json::to_string(&json!({
                "queues": self.manager.debug_state()["queues"],
                "expectations": self.manager.debug_state()["expectations"],
                "caches": self.manager.debug_state()["caches"],
                "leading": self.manager.leader_state().leading,
            }))
            .unwrap_or_default()
        ));
        out
    }

    pub async fn shutdown(mut self) {
        self.cancel.cancel();
        if let Some(run) = self.run.take() {
            let r = run.await.expect("manager task");
            assert!(r.is_ok(), "manager stopped with an error: {r:?}");
        }
        if let Some(cluster) = self.cluster.take() {
            cluster.shutdown().await;
        }
        if let Some(mut real) = self.real.take() {
            if let Some(nodes) = real.nodes.take() {
                nodes.shutdown().await;
            }
            real.plane.remove_namespace(&self.namespace).await;
        }
    }
}

/// The VM status as JSON (`null` when absent).
pub fn vm_status(vm: &VirtualMachine) -> Value {
    serde_json::to_value(&vm.status).unwrap_or(Value::Null)
}

/// `status.printableStatus` (empty when unset).
pub fn printable(vm: &VirtualMachine) -> String {
    vm.status
        .as_ref()
        .and_then(|s| s.printable_status.clone())
        .unwrap_or_default()
}

/// Our controller on `cluster`, with its endpoints on 127.0.0.1:0 (so the Lease carries the
/// debug-endpoint annotation), short Lease timings, client user agent `agent`; returned once it
/// leads with synced caches and its VM queue built. Cancel the token to stop it.
pub async fn start_leading_manager(
    cluster: &EmbeddedCluster,
    agent: &str,
    identity: &str,
) -> (Arc<Manager>, CancellationToken, JoinHandle<()>) {
    let client = cluster
        .api()
        .client_with_agent(agent)
        .await
        .expect("controller client");
    let lease = e2e_lease(identity);
    let config = ManagerConfig {
        vm_workers: 2,
        vmi_workers: 2,
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..ManagerConfig::new(lease)
    };
    let (vm, vmi) = virtctl_rs::controller::reconcilers();
    let manager = Arc::new(
        Manager::start(client, config, vm, vmi)
            .await
            .expect("manager starts"),
    );
    let cancel = CancellationToken::new();
    let run = {
        let (m, c) = (manager.clone(), cancel.clone());
        tokio::spawn(async move {
            let _ = m.run(c).await;
        })
    };
    super::wait_for("the manager to lead with synced caches", || async {
        let ctx = manager.context();
        (manager.leader_state().leading && ctx.caches.all_synced() && ctx.vm_queue.get().is_some())
            .then_some(())
    })
    .await;
    (manager, cancel, run)
}

/// The end-to-end tests' Lease: 6 s duration, 4 s renew deadline, 250 ms retry period. Short
/// enough that a takeover is quick, long enough that a renewal delayed by a busy two-core
/// machine (the whole suite runs in parallel) is not a lost Lease: with 2 s / 1.5 s, leaders
/// exited with `LeaseLost` in loaded runs.
pub fn e2e_lease(identity: &str) -> LeaderElectionConfig {
    let mut lease = LeaderElectionConfig::new(identity);
    lease.lease_duration = Duration::from_secs(6);
    lease.renew_deadline = Duration::from_secs(4);
    lease.retry_period = Duration::from_millis(250);
    lease
}
