//! `run-controller`: flags, the embedded cluster option, signal handling and the progress lines
//! printed for each VM. The controller itself is [`crate::controller::manager`].
//!
//! Exit codes: 0 on a graceful stop (SIGINT/SIGTERM) or `--exit-when-ready` success; 1 on
//! errors, when the Lease is lost (unless `--on-lost-lease=standby`), or when
//! `--exit-when-ready` times out (the message lists the VMs that are not Running).

use super::{CliError, GlobalArgs};
use crate::config::{ClusterSettings, TokenBucket};
use crate::controller::manager::{ClientRateLimit, Manager, ManagerConfig, OnLostLease};
use crate::runtime::lease::{
    DEFAULT_LEASE_DURATION, DEFAULT_LEASE_NAME, DEFAULT_NAMESPACE, DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD, LeaderElectionConfig, default_identity,
};
use clap::Args;

/// `--on-lost-lease`: the CLI's spelling of [`OnLostLease`] (the manager knows nothing of clap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LostLeaseArg {
    /// Exit non-zero, as KubeVirt's virt-controller does.
    Exit,
    /// Cancel in-flight work, keep the caches warm, and compete for the Lease again.
    Standby,
}

impl From<LostLeaseArg> for OnLostLease {
    fn from(arg: LostLeaseArg) -> Self {
        match arg {
            LostLeaseArg::Exit => OnLostLease::Exit,
            LostLeaseArg::Standby => OnLostLease::Standby,
        }
    }
}
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Flags of `run-controller`.
#[derive(Debug, Args)]
pub struct RunControllerArgs {
    /// Watch VMs in every namespace (the default when -n is not given), kubectl's -A.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Start the embedded cluster (API server + simulated nodes) in-process and run against it.
    #[arg(long)]
    pub embedded: bool,
    /// Simulated nodes of the embedded cluster.
    #[arg(long, default_value_t = 2, requires = "embedded")]
    pub nodes: usize,
    /// Apply a YAML file or a directory of YAML files before starting (repeatable).
    #[arg(long, value_name = "FILE|DIR")]
    pub apply: Vec<PathBuf>,
    /// Exit 0 once every VM applied with --apply is Running; non-zero on timeout.
    #[arg(long)]
    pub exit_when_ready: bool,
    /// Deadline for --exit-when-ready, in seconds.
    #[arg(long, default_value_t = 300)]
    pub ready_timeout_seconds: u64,
    /// VM controller workers (KubeVirt default 3).
    #[arg(long, default_value_t = crate::controller::vm::WORKERS)]
    pub vm_workers: usize,
    /// VMI controller workers (KubeVirt default 10).
    #[arg(long, default_value_t = crate::controller::vmi::WORKERS)]
    pub vmi_workers: usize,
    /// Threads the controller runs on (tokio worker threads). Default: 1 against a cluster,
    /// where the controller mostly waits on the API server (with a second thread a VM start
    /// cost about 12 % more CPU at 10,000 VMs; docs/performance.md "Controller start, 1,000 and
    /// 10,000 VMs"); one per CPU with --embedded, whose API server and nodes run on the same
    /// threads.
    #[arg(long, value_name = "N")]
    pub worker_threads: Option<usize>,
    /// Address of /metrics, /healthz, /leader and /debug/state (`none` to disable).
    #[arg(long, default_value = "127.0.0.1:8182")]
    pub listen: String,
    /// Lease name (KubeVirt's: virt-controller).
    #[arg(long, default_value = DEFAULT_LEASE_NAME)]
    pub lease_name: String,
    /// Lease namespace (KubeVirt's install namespace: kubevirt).
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub lease_namespace: String,
    /// Leader election identity (default `<hostname>_<random>`).
    #[arg(long)]
    pub identity: Option<String>,
    /// Lease duration, seconds.
    #[arg(long, default_value_t = DEFAULT_LEASE_DURATION.as_secs_f64())]
    pub leader_elect_lease_duration: f64,
    /// Renew deadline, seconds.
    #[arg(long, default_value_t = DEFAULT_RENEW_DEADLINE.as_secs_f64())]
    pub leader_elect_renew_deadline: f64,
    /// Retry period, seconds.
    #[arg(long, default_value_t = DEFAULT_RETRY_PERIOD.as_secs_f64())]
    pub leader_elect_retry_period: f64,
    /// What to do when the Lease is lost: exit non-zero (KubeVirt) or go back to standby.
    #[arg(long, value_enum, default_value_t = LostLeaseArg::Exit)]
    pub on_lost_lease: LostLeaseArg,
    /// Cluster settings from this KubeVirt custom resource (YAML/JSON) instead of the
    /// cluster's: fixed for the whole run, nothing watched.
    #[arg(long, value_name = "FILE", conflicts_with = "kubevirt_namespace")]
    pub kubevirt_cr: Option<PathBuf>,
    #[command(flatten)]
    pub kubevirt: super::KubeVirtNamespaceArg,
    /// Do not print a line per VM change (logs only).
    #[arg(long)]
    pub quiet: bool,
    /// The cluster has no virt-api: add the `kubevirt.io/foregroundDeleteVirtualMachine`
    /// finalizer to new VMIs as virt-api's mutating webhook would.
    #[arg(long)]
    pub without_virt_api: bool,
    /// Run the embedded cluster without admission (no virt-api webhooks, no Pod Security);
    /// implies --without-virt-api.
    #[arg(long, requires = "embedded")]
    pub no_admission: bool,
    /// Requests per second of the controller's API client, whatever the KubeVirt CR's
    /// `controllerConfiguration.restClient.rateLimiter.tokenBucketRateLimiter` says (default:
    /// the CR's, KubeVirt's 200 without one); negative: no limit.
    #[arg(long, value_name = "QPS", allow_negative_numbers = true)]
    pub qps: Option<f32>,
    /// Burst of the controller's API client (default: the CR's, KubeVirt's 400 without one).
    #[arg(long, value_name = "N")]
    pub burst: Option<u32>,
    /// Shadow mode: never take the Lease, write nothing; compare the leader's writes with our
    /// decisions and print a summary on Ctrl-C (as `shadow`; docs/shadow.md).
    #[arg(long, conflicts_with_all = ["embedded", "apply", "exit_when_ready"])]
    pub shadow: bool,
    /// With --shadow: keep this local file up to date with the per-VM verdicts, for `inspect
    /// vm/NAME --shadow FILE` (as `shadow --verdicts`).
    #[arg(long, value_name = "FILE", requires = "shadow")]
    pub verdicts: Option<PathBuf>,
    /// Keep a flight recording in this directory: what the controllers saw and did, for
    /// `replay` and `why` (docs/replay.md).
    #[arg(long, value_name = "DIR", conflicts_with = "shadow")]
    pub record: Option<PathBuf>,
    /// The size limit of the --record directory (bytes, or a quantity: 64Mi, 1Gi); its oldest
    /// segment is deleted when a new one would pass it.
    #[arg(
        long,
        value_name = "SIZE",
        default_value = "256Mi",
        requires = "record"
    )]
    pub record_max_bytes: String,
    /// KubeVirt release to behave as: its VM controller rules (docs/run-controller.md "KubeVirt
    /// versions") and its launcher pod memory formula; v1.0.0 … v1.9.0 or main. Default
    /// v1.9.0; with --shadow, the KubeVirt CR's status.observedKubeVirtVersion first.
    #[arg(long, value_name = "VERSION")]
    pub kubevirt_version: Option<crate::kubevirt_version::KubeVirtVersion>,
}

/// `--record-max-bytes`: a byte count as a Kubernetes quantity (`256Mi`), at least 4 KiB.
fn record_max_bytes(text: &str) -> Result<u64, CliError> {
    let bad = |why: String| CliError::Failed(format!("--record-max-bytes {text}: {why}"));
    let q = crate::api::quantity::ParsedQuantity::parse(text).map_err(|e| bad(e.to_string()))?;
    let bytes = u64::try_from(q.nanos / 1_000_000_000).map_err(|_| bad("negative".into()))?;
    if bytes < 4096 {
        return Err(bad("a recording needs at least 4Ki".into()));
    }
    Ok(bytes)
}

/// The flight recorder of `--record`, for the controller `identity`.
fn open_recorder(
    args: &RunControllerArgs,
    identity: &str,
) -> Result<Option<crate::flight::FlightRecorder>, CliError> {
    let Some(dir) = &args.record else {
        return Ok(None);
    };
    let max = record_max_bytes(&args.record_max_bytes)?;
    crate::flight::FlightRecorder::open(dir, max, identity)
        .map(Some)
        .map_err(|e| CliError::Failed(format!("--record {}: {e}", dir.display())))
}

/// `--qps`/`--burst`: the CR's limit unless either is given; a missing one is the CR default.
fn client_rate_limit(qps: Option<f32>, burst: Option<u32>) -> Result<ClientRateLimit, CliError> {
    if qps.is_none() && burst.is_none() {
        return Ok(ClientRateLimit::FromSettings);
    }
    let default = TokenBucket::default();
    let qps = qps.unwrap_or(default.qps);
    if qps < 0.0 {
        return Ok(ClientRateLimit::Unlimited);
    }
    if qps == 0.0 || !qps.is_finite() || burst == Some(0) {
        return Err(CliError::Failed(format!(
            "--qps must be positive (negative: no limit) and --burst at least 1, found {qps} and {}",
            burst.unwrap_or(default.burst)
        )));
    }
    Ok(ClientRateLimit::Fixed(TokenBucket {
        qps,
        burst: burst.unwrap_or(default.burst),
    }))
}

fn seconds(v: f64, flag: &str) -> Result<Duration, CliError> {
    Duration::try_from_secs_f64(v)
        .map_err(|_| CliError::Failed(format!("--{flag}: {v} is not a valid number of seconds")))
}

/// Build the manager configuration from the flags.
pub fn manager_config(
    global: &GlobalArgs,
    args: &RunControllerArgs,
) -> Result<ManagerConfig, CliError> {
    let mut lease =
        LeaderElectionConfig::new(args.identity.clone().unwrap_or_else(default_identity));
    lease.lease_name = args.lease_name.clone();
    lease.namespace = args.lease_namespace.clone();
    lease.lease_duration = seconds(
        args.leader_elect_lease_duration,
        "leader-elect-lease-duration",
    )?;
    lease.renew_deadline = seconds(
        args.leader_elect_renew_deadline,
        "leader-elect-renew-deadline",
    )?;
    lease.retry_period = seconds(args.leader_elect_retry_period, "leader-elect-retry-period")?;
    lease
        .validate()
        .map_err(|e| CliError::Failed(format!("leader election flags: {e}")))?;
    let listen = if args.listen == "none" {
        None
    } else {
        Some(
            args.listen
                .parse::<SocketAddr>()
                .map_err(|e| CliError::Failed(format!("--listen {}: {e}", args.listen)))?,
        )
    };
    if args.worker_threads == Some(0) {
        return Err(CliError::Failed(
            "--worker-threads must be at least 1".into(),
        ));
    }
    if args.vm_workers == 0 || args.vmi_workers == 0 {
        return Err(CliError::Failed(
            "--vm-workers and --vmi-workers must be at least 1".into(),
        ));
    }
    let record = open_recorder(args, &lease.identity)?;
    Ok(ManagerConfig {
        namespace: if args.all_namespaces {
            None
        } else {
            global.namespace.clone()
        },
        vm_workers: args.vm_workers,
        vmi_workers: args.vmi_workers,
        settings: ClusterSettings {
            without_virt_api: args.without_virt_api || args.no_admission,
            kubevirt_version: args.kubevirt_version.unwrap_or_default(),
            launcher_image: launcher_image(args.kubevirt_version.unwrap_or_default()),
            ..super::kubevirt_cr_settings(&args.kubevirt_cr)?
        },
        // A file wins: its settings are fixed, the cluster's CR is not watched.
        kubevirt_namespace: match args.kubevirt_cr {
            Some(_) => None,
            None => Some(args.kubevirt.kubevirt_namespace.clone()),
        },
        lease,
        on_lost_lease: args.on_lost_lease.into(),
        listen,
        expectations_timeout: crate::runtime::expectations::EXPECTATIONS_TIMEOUT,
        client_rate_limit: client_rate_limit(args.qps, args.burst)?,
        record,
    })
}

/// The launcher image a `version` install sets: its release tag, so that the pods carry the
/// release that rendered them (`explain-overhead -A` reads it); `main` has no release tag and
/// keeps the default image.
fn launcher_image(version: crate::kubevirt_version::KubeVirtVersion) -> String {
    use crate::config::DEFAULT_LAUNCHER_IMAGE;
    match version {
        crate::kubevirt_version::KubeVirtVersion::Main => DEFAULT_LAUNCHER_IMAGE.to_string(),
        v => match DEFAULT_LAUNCHER_IMAGE.rsplit_once(':') {
            Some((repository, _)) => format!("{repository}:{}", v.name()),
            None => DEFAULT_LAUNCHER_IMAGE.to_string(),
        },
    }
}

/// `--exit-when-ready` would wait forever for a VM whose run strategy never starts it on its own
/// (Halted, Manual, or both `running` and `runStrategy` set): say so at once.
async fn never_running(client: &kube::Client, vms: &[String]) -> Result<(), CliError> {
    use crate::api::{RunStrategy, VirtualMachine};
    for key in vms {
        let (ns, name) = key.split_once('/').unwrap_or(("default", key));
        let api: kube::Api<VirtualMachine> = kube::Api::namespaced(client.clone(), ns);
        let vm = api
            .get(name)
            .await
            .map_err(|e| CliError::Failed(format!("reading VirtualMachine {key}: {e}")))?;
        match vm.run_strategy() {
            Ok(RunStrategy::Halted) | Ok(RunStrategy::Manual) => {
                let strategy = vm.run_strategy().map(|s| s.to_string()).unwrap_or_default();
                return Err(CliError::Failed(format!(
                    "--exit-when-ready: VirtualMachine {key} has runStrategy {strategy}, so it will not start by itself \
                     (set spec.runStrategy: Always in the manifest)"
                )));
            }
            Err(e) => {
                return Err(CliError::Failed(format!(
                    "--exit-when-ready: VirtualMachine {key}: {e}"
                )));
            }
            Ok(_) => {}
        }
    }
    Ok(())
}

/// The controllers' client and the Lease's: same server, user and User-Agent; the Lease's has
/// no hidden retries ([`crate::runtime::lease::api::lease_client`]). The controllers' writes get
/// a third, fenced client built by the manager from `config`.
#[derive(Clone)]
pub struct Clients {
    /// Informers, reads, `--apply`.
    pub controllers: kube::Client,
    /// The elector's Lease calls.
    pub lease: kube::Client,
    /// The configuration both were built from: the manager builds the controllers' write
    /// client (its own connection pool, fenced by the leadership term) from it.
    pub config: kube::Config,
}

impl Clients {
    /// Both clients from one configuration (User-Agent already set).
    pub(crate) fn from_config(config: kube::Config) -> Result<Self, CliError> {
        let built = |r: Result<kube::Client, kube::Error>| {
            r.map_err(|e| CliError::Failed(format!("cannot build a Kubernetes client: {e}")))
        };
        Ok(Clients {
            controllers: built(kube::Client::try_from(config.clone()))?,
            lease: built(crate::runtime::lease::api::lease_client(config.clone()))?,
            config,
        })
    }
}

/// Start the embedded cluster (API server + simulated nodes) and the clients for it: what
/// `run-controller --embedded` and `demo` run against. The caller shuts the cluster down.
pub(crate) async fn start_embedded(
    config: crate::sim::cluster::EmbeddedClusterConfig,
    user_agent: &str,
) -> Result<(crate::sim::cluster::EmbeddedCluster, Clients), CliError> {
    let cluster = crate::sim::cluster::EmbeddedCluster::start(config)
        .await
        .map_err(|e| CliError::Failed(format!("starting the embedded cluster: {e}")))?;
    let clients = match cluster.api().kube_config().await {
        Ok(config) => {
            super::client::with_user_agent(config, user_agent).and_then(Clients::from_config)
        }
        Err(e) => Err(CliError::Failed(format!(
            "connecting to the embedded cluster: {e}"
        ))),
    };
    match clients {
        Ok(clients) => Ok((cluster, clients)),
        Err(e) => {
            cluster.shutdown().await;
            Err(e)
        }
    }
}

/// Start the VM and VMI controllers, competing for their Lease: `run-controller` and `demo`.
/// Nothing runs until [`Manager::run`]; cancelling that releases the Lease.
pub(crate) async fn start_manager(
    clients: &Clients,
    config: &ManagerConfig,
) -> Result<Manager, CliError> {
    let reconcilers = crate::controller::reconcilers();
    Manager::start_with_write_pool(
        clients.controllers.clone(),
        clients.config.clone(),
        config.clone(),
        reconcilers.0,
        reconcilers.1,
    )
    .await
    .map(|m| m.with_lease_client(clients.lease.clone()))
    .map_err(|e| CliError::Failed(e.to_string()))
}

/// The controller's threads against a cluster when `--worker-threads` is not given.
///
/// The controller spends most of a VM start waiting on the API server: at 10,000 VMs its one
/// thread was busy 37–45 % of the wall time. With two, each wake-up that hands work to the
/// other thread costs a futex and a context switch: over four back-to-back pairs of
/// 10,000-VM starts a VM start cost 2.49 ms of CPU on one thread against 2.80 ms on two, and
/// one thread was lower in every pair (docs/performance.md "Controller start, 1,000 and 10,000
/// VMs"). One thread still keeps up with the API server: all 10,000 VMs were Running in
/// 52.9–75.4 s, against 50.5–67.6 s with two, within the spread between runs.
pub const DEFAULT_WORKER_THREADS: usize = 1;

/// The tokio worker threads for `run-controller`: `--worker-threads`, else
/// [`DEFAULT_WORKER_THREADS`] against a cluster, or `None` (tokio's default, one per CPU) with
/// `--embedded`, whose API server and simulated nodes share the runtime.
pub(crate) fn worker_threads(args: &RunControllerArgs) -> Option<usize> {
    threads_for(args.worker_threads, args.embedded)
}

/// [`worker_threads`] from its two inputs: the threads asked for (`--worker-threads`) and
/// whether the cluster shares the runtime (`--embedded`). The controller bench calls this too.
pub fn threads_for(requested: Option<usize>, cluster_in_process: bool) -> Option<usize> {
    match (requested, cluster_in_process) {
        (Some(n), _) => Some(n),
        (None, true) => None,
        (None, false) => Some(DEFAULT_WORKER_THREADS),
    }
}

/// The runtime the controller runs on: `threads` tokio worker threads (`None`: one per CPU),
/// with I/O and timers. The controller bench builds its controller's runtime here too, so that
/// it measures what `run-controller` runs.
pub fn controller_runtime(threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = threads {
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "a runtime needs at least one worker thread",
            ));
        }
        builder.worker_threads(n);
    }
    builder.enable_all().build()
}

/// Run `run-controller`.
pub(crate) fn run(global: &GlobalArgs, args: RunControllerArgs) -> Result<ExitCode, CliError> {
    if args.shadow {
        return super::shadow::run(global, shadow_args(args));
    }
    let config = manager_config(global, &args)?;
    let runtime = controller_runtime(worker_threads(&args))
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(run_async(global, args, config))
}

/// `run-controller --shadow`: `shadow` with the run's scope and settings, until Ctrl-C.
fn shadow_args(args: RunControllerArgs) -> super::shadow::ShadowArgs {
    super::shadow::ShadowArgs {
        duration: None,
        all_namespaces: args.all_namespaces,
        output: None,
        verdicts: args.verdicts,
        reproductions: None,
        leader_managers: Vec::new(),
        kubevirt_cr: args.kubevirt_cr,
        kubevirt: args.kubevirt,
        without_virt_api: args.without_virt_api,
        kubevirt_version: args.kubevirt_version,
    }
}

/// What can be checked before anything starts: `--exit-when-ready` needs `--apply`, the files
/// exist, the `--listen` port is free.
fn check_before_start(args: &RunControllerArgs, config: &ManagerConfig) -> Result<(), CliError> {
    if args.exit_when_ready && args.apply.is_empty() {
        return Err(CliError::Failed(
            "--exit-when-ready needs --apply with at least one VirtualMachine".into(),
        ));
    }
    for path in &args.apply {
        if !path.exists() {
            return Err(CliError::Failed(format!(
                "--apply {}: no such file or directory",
                path.display()
            )));
        }
    }
    if let Some(addr) = config.listen
        && addr.port() != 0
        && let Err(e) = std::net::TcpListener::bind(addr)
    {
        return Err(CliError::Failed(format!(
            "cannot listen on {addr}: {e} (is another run-controller running? use --listen 127.0.0.1:0 for any free port, or --listen none)"
        )));
    }
    Ok(())
}

/// The cluster to run against: the embedded one (started here, with its address said), or the
/// kubeconfig's, said before anything is written to it and with a warning when it cannot be
/// reached yet.
async fn connect(
    global: &GlobalArgs,
    args: &RunControllerArgs,
) -> Result<(Option<crate::sim::cluster::EmbeddedCluster>, Clients), CliError> {
    if args.embedded {
        let (cluster, clients) = start_embedded(
            crate::sim::cluster::EmbeddedClusterConfig {
                nodes: args.nodes,
                api: crate::sim::ApiServerConfig {
                    admission: !args.no_admission,
                    ..Default::default()
                },
                ..Default::default()
            },
            &super::client::user_agent(global, "run-controller"),
        )
        .await?;
        let path = cluster.kubeconfig_path().display().to_string();
        crate::say!(
            "embedded cluster: {} ({} simulated nodes)",
            cluster.api().url(),
            args.nodes
        );
        crate::say!("kubeconfig: {path}");
        crate::say!(
            "  export KUBECONFIG={path}    # in another shell, then: kubectl get vm,vmi,pods -A"
        );
        Ok((Some(cluster), clients))
    } else {
        let (config, target) = super::client::load_config(global, "run-controller").await?;
        let clients = Clients::from_config(config)?;
        let client = &clients.controllers;
        // Say which cluster before writing to it (--apply, and the controllers once leading).
        let doing = if args.apply.is_empty() {
            "running against"
        } else {
            "applying to and running against"
        };
        crate::say!("cluster: {doing} {}", target.describe());
        // Say once, clearly, when the server cannot be reached; the informers and the Lease
        // elector keep retrying with backoff (their repeats are logged once a minute) and
        // /healthz answers 500 with the reason until it is reachable.
        match tokio::time::timeout(Duration::from_secs(10), client.apiserver_version()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => crate::say!(
                "cannot reach the API server {}: {}; retrying with backoff (see /healthz)",
                target.server,
                crate::runtime::error_chain(&e)
            ),
            Err(_) => crate::say!(
                "cannot reach the API server {}: no answer in 10 s; retrying with backoff (see /healthz)",
                target.server
            ),
        }
        Ok((None, clients))
    }
}

async fn run_async(
    global: &GlobalArgs,
    args: RunControllerArgs,
    config: ManagerConfig,
) -> Result<ExitCode, CliError> {
    // Listen first: a signal during start-up then stops the run once it is up instead of
    // killing the process (src/cli/signals.rs).
    let mut signals = super::signals::ShutdownSignals::listen()?;
    check_before_start(&args, &config)?;
    // The embedded cluster lives as long as this function.
    let (embedded, clients) = connect(global, &args).await?;
    let client = clients.controllers.clone();

    let mut applied_vms = Vec::new();
    for path in &args.apply {
        let summary = crate::api::apply::apply_path_in(&client, path, global.namespace.as_deref())
            .await
            .map_err(|e| CliError::Failed(format!("--apply {}: {e}", path.display())))?;
        crate::say!("applied {}: {}", path.display(), summary.describe());
        applied_vms.extend(summary.virtual_machines());
    }
    if args.exit_when_ready {
        if applied_vms.is_empty() {
            return Err(CliError::Failed(
                "--exit-when-ready: the applied files hold no VirtualMachine".into(),
            ));
        }
        never_running(&client, &applied_vms).await?;
    }

    let manager = start_manager(&clients, &config).await?;
    if let Some(addr) = manager.listen_addr() {
        crate::say!("endpoints: http://{addr}/metrics /healthz /leader /debug/state");
    }
    crate::say!(
        "identity {} competing for Lease {} ({} VM / {} VMI workers)",
        config.lease.identity,
        config.lease.describe(),
        config.vm_workers,
        config.vmi_workers
    );

    let cancel = CancellationToken::new();
    // One printer for the Lease and the VM lines, so their order is the order things happened.
    let progress = if args.quiet {
        tokio::spawn(super::progress::print_leadership(
            manager.leader_state_handle(),
            cancel.clone(),
        ))
    } else {
        tokio::spawn(super::progress::print_progress(
            manager.context().clone(),
            manager.debug_source(),
            manager.leader_state_handle(),
            cancel.clone(),
        ))
    };
    let ready = {
        let ctx = manager.context().clone();
        let debug = manager.debug_source();
        let vms = applied_vms.clone();
        let timeout = Duration::from_secs(args.ready_timeout_seconds);
        let wanted = args.exit_when_ready;
        async move {
            if !wanted {
                return std::future::pending::<Result<(), String>>().await;
            }
            super::progress::wait_all_running(&ctx, &debug, &vms, timeout).await
        }
    };
    let result = {
        let run = manager.run(cancel.clone());
        tokio::pin!(run);
        tokio::select! {
            r = &mut run => r.map(|_| ExitCode::SUCCESS).map_err(|e| CliError::Failed(e.to_string())),
            sig = signals.recv() => {
                if manager.leader_state().leading {
                crate::say!("{sig}: stopping (finishing in-flight work, then releasing the Lease)");
            } else {
                crate::say!("{sig}: stopping");
            }
                cancel.cancel();
                (&mut run).await.map(|_| ExitCode::SUCCESS).map_err(|e| CliError::Failed(e.to_string()))
            }
            r = ready => {
                cancel.cancel();
                let stopped = (&mut run).await;
                match (r, stopped) {
                    (Ok(()), Ok(())) => {
                        crate::say!("all {} VM(s) are Running", applied_vms.len());
                        Ok(ExitCode::SUCCESS)
                    }
                    (Err(why), _) => Err(CliError::Failed(why)),
                    (Ok(()), Err(e)) => Err(CliError::Failed(e.to_string())),
                }
            }
        }
    };
    cancel.cancel();
    let _ = progress.await;
    drop(manager);
    if let Some(cluster) = embedded {
        cluster.shutdown().await;
    }
    result
}

#[cfg(test)]
mod lost_lease_tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        global: GlobalArgs,
        #[command(flatten)]
        args: RunControllerArgs,
    }

    #[test]
    fn on_lost_lease_maps_to_the_manager_setting() {
        let exit = Cli::try_parse_from(["x"]).expect("defaults parse");
        assert_eq!(
            OnLostLease::from(exit.args.on_lost_lease),
            OnLostLease::Exit
        );
        let standby =
            Cli::try_parse_from(["x", "--on-lost-lease", "standby"]).expect("standby parses");
        assert_eq!(
            OnLostLease::from(standby.args.on_lost_lease),
            OnLostLease::Standby
        );
        assert!(Cli::try_parse_from(["x", "--on-lost-lease", "retry"]).is_err());
    }

    #[test]
    fn all_namespaces_clears_the_namespace_scope() {
        let cli = Cli::try_parse_from(["x", "-A", "--listen", "none"]).expect("-A parses");
        assert_eq!(
            manager_config(&cli.global, &cli.args).unwrap().namespace,
            None
        );
        let cli = Cli::try_parse_from(["x", "-n", "vms", "--listen", "none"]).expect("-n parses");
        assert_eq!(
            manager_config(&cli.global, &cli.args)
                .unwrap()
                .namespace
                .as_deref(),
            Some("vms")
        );
        assert!(Cli::try_parse_from(["x", "-A", "-n", "vms"]).is_err());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(flags: &[&str]) -> RunControllerArgs {
        let argv = ["kubectl-virtctl_rs", "run-controller"]
            .into_iter()
            .chain(flags.iter().copied());
        match crate::cli::Cli::try_parse_from(argv)
            .expect("flags parse")
            .command
        {
            crate::cli::Command::RunController(args) => args,
            other => panic!("parsed as {other:?}"),
        }
    }

    /// `--shadow` decides as the release `--kubevirt-version` names, as the controller would;
    /// without it, as the KubeVirt CR reports (`shadow`'s own rule, not the controller's
    /// v1.9.0 default).
    #[test]
    fn the_shadow_decides_as_the_selected_release_else_as_the_cr_reports() {
        use crate::kubevirt_version::KubeVirtVersion;
        for (flags, want, source) in [
            (
                &["--shadow"][..],
                KubeVirtVersion::V1_8,
                crate::kubevirt_version::OBSERVED_VERSION,
            ),
            (
                &["--shadow", "--kubevirt-version", "main"][..],
                KubeVirtVersion::Main,
                "--kubevirt-version",
            ),
        ] {
            let shadow = shadow_args(args(flags));
            let mut settings = crate::config::ClusterSettings::default();
            let decided =
                super::super::shadow::own_settings(&mut settings, &shadow, Some("v1.8.1"));
            assert_eq!(settings.kubevirt_version, want, "{flags:?}");
            assert_eq!((decided.version, decided.source.as_str()), (want, source));
        }
    }

    /// `--kubevirt-version` defaults to v1.9.0, takes any modelled release, and refuses others
    /// with the list of known ones.
    #[test]
    fn kubevirt_version_selects_the_release() {
        use crate::kubevirt_version::KubeVirtVersion;
        let default = manager_config(&GlobalArgs::default(), &args(&[])).unwrap();
        assert_eq!(default.settings.kubevirt_version, KubeVirtVersion::V1_9);
        let main = args(&["--kubevirt-version", "main"]).kubevirt_version;
        assert_eq!(main, Some(KubeVirtVersion::Main));
        let v = args(&["--kubevirt-version", "v1.8.2"]).kubevirt_version;
        assert_eq!(v, Some(KubeVirtVersion::V1_8));
        let argv = ["x", "run-controller", "--kubevirt-version", "v0.59.0"];
        let err = crate::cli::Cli::try_parse_from(argv)
            .unwrap_err()
            .to_string();
        assert!(err.contains("known versions are v1.0.0"), "{err}");
        // The launcher image carries the release's tag.
        assert_eq!(
            launcher_image(KubeVirtVersion::V1_9),
            crate::config::DEFAULT_LAUNCHER_IMAGE
        );
        assert_eq!(
            launcher_image(KubeVirtVersion::V1_5),
            "quay.io/kubevirt/virt-launcher:v1.5.0"
        );
        assert_eq!(
            launcher_image(KubeVirtVersion::Main),
            crate::config::DEFAULT_LAUNCHER_IMAGE
        );
    }

    /// No flag: the KubeVirt CR's limit; `--qps`/`--burst` fix it (the other at KubeVirt's
    /// default); a negative rate lifts it; zero is refused.
    #[test]
    fn qps_and_burst_fix_the_clients_limit() {
        let limit = |flags: &[&str]| {
            let a = args(flags);
            client_rate_limit(a.qps, a.burst)
        };
        assert_eq!(limit(&[]).ok(), Some(ClientRateLimit::FromSettings));
        assert_eq!(
            limit(&["--qps", "5"]).ok(),
            Some(ClientRateLimit::Fixed(TokenBucket {
                qps: 5.0,
                burst: 400
            }))
        );
        assert_eq!(
            limit(&["--burst", "10"]).ok(),
            Some(ClientRateLimit::Fixed(TokenBucket {
                qps: 200.0,
                burst: 10
            }))
        );
        assert_eq!(
            limit(&["--qps", "-1"]).ok(),
            Some(ClientRateLimit::Unlimited)
        );
        assert!(limit(&["--qps", "0"]).is_err());
        assert!(limit(&["--burst", "0"]).is_err());
    }

    #[test]
    fn the_controller_runs_on_one_thread_unless_told_or_embedded() {
        assert_eq!(worker_threads(&args(&[])), Some(DEFAULT_WORKER_THREADS));
        assert_eq!(DEFAULT_WORKER_THREADS, 1);
        assert_eq!(worker_threads(&args(&["--embedded"])), None);
        assert_eq!(worker_threads(&args(&["--worker-threads", "3"])), Some(3));
        assert_eq!(
            worker_threads(&args(&["--embedded", "--worker-threads", "2"])),
            Some(2)
        );
    }

    #[test]
    fn the_runtime_has_the_threads_asked_for() {
        for n in [1, 3] {
            let runtime = controller_runtime(Some(n)).expect("runtime");
            assert_eq!(runtime.metrics().num_workers(), n);
            // Timers and I/O are enabled: a sleep completes.
            runtime.block_on(async {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            });
        }
        let err = controller_runtime(Some(0)).expect_err("no threads");
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    }

    #[test]
    fn the_record_size_limit_is_a_quantity_of_at_least_4ki() {
        assert_eq!(record_max_bytes("64Mi").unwrap(), 64 << 20);
        assert_eq!(record_max_bytes("5000").unwrap(), 5000);
        for bad in ["1Ki", "-1Gi", "lots"] {
            let err = record_max_bytes(bad).unwrap_err().to_string();
            assert!(err.contains("--record-max-bytes"), "{err}");
        }
    }

    #[test]
    fn zero_worker_threads_is_refused_naming_the_flag() {
        let global = GlobalArgs::default();
        let err = manager_config(&global, &args(&["--worker-threads", "0"])).expect_err("0");
        assert!(err.to_string().contains("--worker-threads"), "{err}");
    }
}
