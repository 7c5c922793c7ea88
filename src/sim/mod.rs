//! The embedded cluster: an in-process Kubernetes API server on loopback plus simulated nodes.
//!
//! [`ApiServer`] speaks the real REST + watch protocol over plain HTTP on `127.0.0.1` (like
//! envtest), so every test and the `--embedded` mode drive it through the real
//! [`kube::Client`], and `kubectl` works against its generated kubeconfig. What is and is not
//! modelled is listed in `docs/embedded-cluster.md`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), virtctl_rs::sim::SimError> {
//! use virtctl_rs::sim::{ApiServer, ApiServerConfig};
//! let server = ApiServer::start(ApiServerConfig::default()).await?;
//! let client = server.client().await?;
//! // ... kube::Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client, "default") ...
//! println!("{} writes", server.audit().writes().len());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod admin;
pub(crate) mod admission;
pub mod audit;
pub mod cluster;
pub(crate) mod convert;
pub(crate) mod discovery;
pub mod faults;
pub(crate) mod faultspec;
pub mod gc;
pub(crate) mod http;
pub(crate) mod kinds;
pub(crate) mod kubeconfig;
pub mod nodes;
pub(crate) mod object;
pub(crate) mod openapi;
pub(crate) mod patch;
mod pod_admission;
pub(crate) mod protobuf;
pub mod pvbinder;
pub(crate) mod resources;
pub(crate) mod selector;
pub(crate) mod status;
pub mod store;
mod stored;
pub(crate) mod table;
mod virt_api;
pub(crate) mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use audit::{
    AuditEntry, AuditFormat, AuditLog, AuditQuery, DEFAULT_AUDIT_CAPACITY, EVENTS_POLICY,
    LeaseAudit,
};
pub use faults::{FaultAction, FaultId, FaultRule, Faults, Verb};
pub use resources::ResourceDef;
pub use status::ApiError;

/// Errors starting or talking to the embedded API server.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Binding the loopback listener failed.
    #[error("binding the embedded API server to 127.0.0.1: {0}")]
    Bind(#[source] std::io::Error),
    /// Writing the kubeconfig (or creating its directory) failed.
    #[error("writing kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The kubeconfig path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Opening the audit file failed.
    #[error("opening audit file {path}: {source}")]
    Audit {
        /// The audit file path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Building a `kube::Client` for the server failed.
    #[error("building a kube client for the embedded API server: {0}")]
    Client(String),
    /// Seeding an initial object failed.
    #[error("seeding {what}: {source}")]
    Seed {
        /// What was being created.
        what: String,
        /// The API error.
        #[source]
        source: ApiError,
    },
}

/// Settings of an [`ApiServer`]. All faults start off.
#[derive(Debug, Clone)]
pub struct ApiServerConfig {
    /// Watch events kept per resource (the watch-cache window). A watch from an older
    /// resourceVersion gets `410 Expired` ("too old resource version"). Default 10 000.
    pub event_history: usize,
    /// Period of `BOOKMARK` events on watches that allow them. Default 60 s (about what the
    /// real server does).
    pub bookmark_interval: Duration,
    /// Seed of the fault-injection RNG. Default 0.
    pub fault_seed: u64,
    /// Fault rules installed at start (more can be added at runtime through
    /// [`ApiServer::faults`]). Default none.
    pub faults: Vec<FaultRule>,
    /// Also write the audit log as JSON lines to this file (appended).
    pub audit_file: Option<PathBuf>,
    /// What the audit file holds: [`AuditEntry`]s (default) or `audit.k8s.io/v1` Events.
    pub audit_format: AuditFormat,
    /// Audit entries kept in memory ([`ApiServer::audit`]): the most recent this many
    /// (`None`: every one, for a run that reads its whole log at the end). Default
    /// [`DEFAULT_AUDIT_CAPACITY`] (100,000). The file gets every entry.
    pub audit_capacity: Option<usize>,
    /// Where to write the kubeconfig; default: `kubeconfig` in a private temp dir owned (and
    /// removed at shutdown) by the server.
    pub kubeconfig_path: Option<PathBuf>,
    /// Generate a random bearer token (written into the kubeconfig) and reject requests that
    /// carry a different one. Default `true`. `/version` and `/healthz` stay public as on a
    /// real server.
    pub require_token: bool,
    /// Also reject requests that carry no `Authorization` header at all. Default `false`,
    /// because client-go (hence `kubectl`) never sends bearer tokens over plain HTTP; kube-rs
    /// does, so kube-only setups can turn this on.
    pub strict_auth: bool,
    /// Namespaces created at start. Default `default`, `kube-system`, `kubevirt`.
    pub namespaces: Vec<String>,
    /// Bind to this port on 127.0.0.1 (0 = pick a free one). Default 0.
    pub port: u16,
    /// Run virt-api's admission webhooks and Pod Security admission (`src/sim/admission.rs`).
    /// Default `true`; `false` is a cluster without virt-api (`cluster serve --no-admission`).
    pub admission: bool,
    /// How long a bindable PersistentVolumeClaim stays Pending before the binder
    /// (`src/sim/pvbinder.rs`) marks it Bound; `None`: claims are never bound. Default 1 s
    /// (a quick dynamic provisioner); `cluster serve --pvc-bind-delay`.
    pub pvc_bind_delay: Option<Duration>,
}

impl Default for ApiServerConfig {
    fn default() -> Self {
        Self {
            event_history: 10_000,
            bookmark_interval: Duration::from_secs(60),
            fault_seed: 0,
            faults: Vec::new(),
            audit_file: None,
            audit_format: AuditFormat::Entries,
            audit_capacity: Some(DEFAULT_AUDIT_CAPACITY),
            kubeconfig_path: None,
            require_token: true,
            strict_auth: false,
            namespaces: vec!["default".into(), "kube-system".into(), "kubevirt".into()],
            port: 0,
            admission: true,
            pvc_bind_delay: Some(Duration::from_secs(1)),
        }
    }
}

/// The user agent [`ApiServer::client`] sends.
pub const DEFAULT_USER_AGENT: &str = "virtctl-rs-test";

/// A running embedded API server. Dropping it without [`ApiServer::shutdown`] also stops the
/// listener (the tasks are cancelled) but leaves the temp dir to the OS.
pub struct ApiServer {
    url: String,
    token: Option<String>,
    kubeconfig_path: PathBuf,
    temp_dir: Option<PathBuf>,
    store: Arc<store::Store>,
    audit: Arc<AuditLog>,
    faults: Arc<Faults>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ApiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiServer")
            .field("url", &self.url)
            .field("kubeconfig_path", &self.kubeconfig_path)
            .finish()
    }
}

impl ApiServer {
    /// Bind `127.0.0.1:<port>` (0 = any free port), write the kubeconfig, create the initial
    /// namespaces and start serving.
    ///
    /// # Errors
    /// [`SimError::Bind`], [`SimError::Kubeconfig`], [`SimError::Audit`].
    pub async fn start(config: ApiServerConfig) -> Result<ApiServer, SimError> {
        let reg = Arc::new(resources::Registry::new(resources::builtin_resources()));
        let store = Arc::new(store::Store::new(reg.clone(), config.event_history));
        let audit = Arc::new(
            AuditLog::new(
                config.audit_file.as_deref(),
                config.audit_format,
                config.audit_capacity,
            )
            .map_err(|source| SimError::Audit {
                path: config.audit_file.clone().unwrap_or_default(),
                source,
            })?,
        );
        let faults = Arc::new(Faults::new(config.fault_seed));
        for rule in &config.faults {
            faults.add(rule.clone());
        }
        let ns_res = reg.core("namespaces").unwrap_or(0);
        for ns in &config.namespaces {
            store
                .create(
                    ns_res,
                    "",
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
                )
                .map_err(|source| SimError::Seed {
                    what: format!("namespace {ns}"),
                    source,
                })?;
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", config.port))
            .await
            .map_err(SimError::Bind)?;
        let addr = listener.local_addr().map_err(SimError::Bind)?;
        let url = format!("http://{addr}");
        let token = config.require_token.then(kubeconfig::random_token);
        let (kubeconfig_path, temp_dir) = match &config.kubeconfig_path {
            Some(p) => (p.clone(), None),
            None => {
                let dir =
                    kubeconfig::private_temp_dir().map_err(|source| SimError::Kubeconfig {
                        path: std::env::temp_dir(),
                        source,
                    })?;
                (dir.join("kubeconfig"), Some(dir))
            }
        };
        kubeconfig::write_private(
            &kubeconfig_path,
            &kubeconfig::render(&url, token.as_deref().unwrap_or("")),
        )
        .map_err(|source| SimError::Kubeconfig {
            path: kubeconfig_path.clone(),
            source,
        })?;
        let app = Arc::new(http::App {
            store: store.clone(),
            audit: audit.clone(),
            faults: faults.clone(),
            token: token.clone(),
            strict_auth: config.strict_auth,
            bookmark_interval: config.bookmark_interval,
            addr: addr.to_string(),
            admission: config.admission,
        });
        let stop = CancellationToken::new();
        let router = http::router(app);
        let serve_stop = stop.clone();
        let server_task = tokio::spawn(async move {
            let serve = axum::serve(listener, router)
                .with_graceful_shutdown(async move { serve_stop.cancelled().await });
            if let Err(e) = serve.await {
                tracing::error!(error = %e, "embedded API server stopped");
            }
        });
        let gc_task = tokio::spawn(gc::run(store.clone(), audit.clone(), stop.clone()));
        let binder_task = config.pvc_bind_delay.map(|delay| {
            tokio::spawn(pvbinder::run(
                store.clone(),
                audit.clone(),
                delay,
                stop.clone(),
            ))
        });
        Ok(ApiServer {
            url,
            token,
            kubeconfig_path,
            temp_dir,
            store,
            audit,
            faults,
            stop,
            tasks: [server_task, gc_task]
                .into_iter()
                .chain(binder_task)
                .collect(),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The generated kubeconfig (mode 0600).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// The bearer token clients must send (`None` when `require_token` is off).
    pub fn token(&self) -> Option<&str> {
        self.token.as_deref()
    }

    /// A `kube::Client` for this server with user agent [`DEFAULT_USER_AGENT`].
    ///
    /// # Errors
    /// [`SimError::Client`] when kube rejects the generated configuration.
    pub async fn client(&self) -> Result<kube::Client, SimError> {
        self.client_with_agent(DEFAULT_USER_AGENT).await
    }

    /// A `kube::Client` sending `User-Agent: <agent>` (audit entries and faults can be scoped
    /// by it). Built from the generated kubeconfig. kube's default retry layer (429/503/504)
    /// stays on, as for a real cluster.
    ///
    /// # Errors
    /// [`SimError::Client`] when kube rejects the configuration or the agent string.
    pub async fn client_with_agent(&self, agent: &str) -> Result<kube::Client, SimError> {
        let config = self.kube_config().await?;
        let mut config = config;
        let value = axum::http::HeaderValue::from_str(agent)
            .map_err(|e| SimError::Client(format!("user agent {agent:?}: {e}")))?;
        config.headers.push((axum::http::header::USER_AGENT, value));
        kube::Client::try_from(config).map_err(|e| SimError::Client(e.to_string()))
    }

    /// The `kube::Config` the generated kubeconfig yields.
    ///
    /// # Errors
    /// [`SimError::Client`] when kube rejects the kubeconfig.
    pub async fn kube_config(&self) -> Result<kube::Config, SimError> {
        let kc = kube::config::Kubeconfig::read_from(&self.kubeconfig_path)
            .map_err(|e| SimError::Client(e.to_string()))?;
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| SimError::Client(e.to_string()))
    }

    /// The audit log.
    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// Runtime fault injection.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// A shared handle on [`ApiServer::faults`] (for the admin endpoint, [`admin`]).
    pub fn faults_handle(&self) -> Arc<Faults> {
        self.faults.clone()
    }

    /// The newest resourceVersion handed out.
    pub fn current_resource_version(&self) -> u64 {
        self.store.current_rv()
    }

    /// A deep copy of every stored object keyed by (group-qualified resource, namespace,
    /// name), e.g. `("pods", "default", "p")`, `("virtualmachines.kubevirt.io", "ns", "vm")`.
    /// Meant for tests proving a rejected request left the store unchanged.
    pub fn snapshot(&self) -> BTreeMap<(String, String, String), Value> {
        self.store.snapshot()
    }

    /// Stop serving (open watches end), stop the garbage collector, and remove the temp dir.
    pub async fn shutdown(mut self) {
        self.stop.cancel();
        // End open watch streams so the graceful shutdown does not wait for them.
        self.faults.drop_watches();
        for t in self.tasks.drain(..) {
            // Watch streams can keep a graceful shutdown waiting; don't wait forever.
            let abort = t.abort_handle();
            if tokio::time::timeout(Duration::from_secs(2), t)
                .await
                .is_err()
            {
                abort.abort();
            }
        }
        if let Some(dir) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.cancel();
        self.faults.drop_watches();
        for t in &self.tasks {
            t.abort();
        }
        if let Some(dir) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}
