//! Command-line interface: one file per subcommand, flags and output formatting only.
//!
//! Every subcommand returns a [`CliError`]; [`run`] prints it on stderr and maps it to the
//! process exit code (1 for errors, 2 for usage errors and "not available yet"). Each
//! subcommand's `--help` ends with examples and its exit codes (the `*_HELP` constants). Output
//! goes through [`output`], so `| head` ends the process quietly with exit code 0.

pub(crate) mod client;
pub(crate) mod cluster;
pub(crate) mod completion;
pub(crate) mod demo;
pub(crate) mod explain_overhead;
pub(crate) mod inspect;
pub(crate) mod lifecycle;
pub(crate) mod output;
pub mod progress;
pub(crate) mod replay;
pub mod run_controller;
pub(crate) mod shadow;
pub(crate) mod signals;
mod upgrade_rehearsal;
pub(crate) mod version;
pub(crate) mod why;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// `kubectl virtctl-rs`: KubeVirt's virt-controller, re-implemented, and an inspector for it.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl virtctl-rs",
    bin_name = "kubectl virtctl-rs",
    version,
    about
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// `--kubevirt-namespace`: where the KubeVirt CR that configures the cluster lives. One
/// definition for `run-controller` (the CR it follows), `inspect` (the settings it compares
/// with the controller's) and `explain-overhead` (the settings of the formula), so all three
/// read the same CR (`crate::config::select_kubevirt_cr`).
#[derive(Debug, Clone, Args)]
pub struct KubeVirtNamespaceArg {
    /// Namespace of the KubeVirt CR that configures the cluster (KubeVirt's install namespace;
    /// the controller follows it, inspect and explain-overhead read it).
    #[arg(long, default_value = crate::runtime::lease::DEFAULT_NAMESPACE, value_name = "NS")]
    pub kubevirt_namespace: String,
}

/// kubectl-style flags shared by every subcommand.
#[derive(Debug, Clone, Args, Default)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: the files of $KUBECONFIG merged as kubectl does,
    /// then ~/.kube/config, then the in-cluster service account).
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Namespace scope (default: the context's namespace, or all namespaces where that makes sense).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// Log verbosity: -v info, -vv debug, -vvv trace (default: warnings and errors).
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The User-Agent sent to the API server (default: `virtctl-rs/VERSION (OS/ARCH) COMMAND`,
    /// so audit logs and API Priority and Fairness can tell this tool apart).
    #[arg(long, global = true, value_name = "AGENT")]
    pub user_agent: Option<String>,
    /// Act as this user (kubectl's `--as`: a user, or `system:serviceaccount:NS:NAME`), for
    /// example to check that a ServiceAccount's RBAC suffices.
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Act as a member of this group (kubectl's `--as-group`; repeat for more).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// `run-controller --help`: examples and exit codes.
pub const RUN_CONTROLLER_HELP: &str = "\
Examples:
  # The controller on the embedded cluster, with the project's example VMs
  kubectl virtctl-rs run-controller --embedded --apply docs/examples
  # The same, exiting 0 once every applied VM is Running (for scripts)
  kubectl virtctl-rs run-controller --embedded --apply docs/examples --exit-when-ready
  # Against the current kubeconfig context, VMs of one namespace only
  kubectl virtctl-rs run-controller -n my-vms
  # Every namespace, on a Lease of its own (so it does not wait for KubeVirt's)
  kubectl virtctl-rs run-controller -A --lease-name virtctl-rs --lease-namespace default

Exit codes:
  0  stopped by SIGINT/SIGTERM (Lease released), --exit-when-ready reached, or stdout closed
  1  an error, the Lease lost (--on-lost-lease=exit), or --exit-when-ready timed out
  2  usage error";

/// `inspect --help`: examples and exit codes.
pub const INSPECT_HELP: &str = "\
Examples:
  # One VM: Lease holder, queues, expectations, timeline, overhead check, blockers
  kubectl virtctl-rs inspect vm/my-vm -n my-vms --once
  # The same as JSON, for scripts
  kubectl virtctl-rs inspect vm/my-vm -o json
  # The fleet: every VM of every namespace
  kubectl virtctl-rs inspect -A --once
  # Step through a flight recording's reconciles of one VM (run-controller --record DIR)
  kubectl virtctl-rs inspect --replay /tmp/rec vm/my-vm -n my-vms

Exit codes:
  0  shown (or stdout closed)
  1  VM not found, the cluster unreachable, or the recording unreadable (reason on stderr)
  2  usage error";

/// `why --help`: examples and exit codes.
pub const WHY_HELP: &str = "\
Examples:
  # The VM's recent starts and stops, each end with its cause chain and evidence
  kubectl virtctl-rs why vm/my-vm -n my-vms
  # The same as JSON, for scripts
  kubectl virtctl-rs why vm/my-vm -o json
  # With the controller's Events a flight recording kept past their one-hour TTL
  kubectl virtctl-rs why vm/my-vm --recording /var/lib/virtctl/flight

Exit codes:
  0  shown (or stdout closed)
  1  VM not found, the cluster unreachable, or the recording unreadable (reason on stderr)
  2  usage error";

/// `replay --help`: examples and exit codes.
pub const REPLAY_HELP: &str = "\
Examples:
  # Record a run, then replay it through the decisions
  kubectl virtctl-rs run-controller --embedded --apply docs/examples --record /tmp/rec
  kubectl virtctl-rs replay /tmp/rec
  # The same as JSON, for scripts
  kubectl virtctl-rs replay /tmp/rec -o json

Exit codes:
  0  every replayed decision is the recorded one (or stdout closed)
  1  the recording cannot be read (reason on stderr)
  2  usage error
  3  a replayed decision differs from the recorded one";

/// `explain-overhead --help`: examples and exit codes.
pub const EXPLAIN_OVERHEAD_HELP: &str = "\
Examples:
  kubectl virtctl-rs explain-overhead -f vm.yaml
  kubectl virtctl-rs explain-overhead -f vmi.yaml --pod launcher-pod.yaml
  cat vms.yaml | kubectl virtctl-rs explain-overhead -f - -o json
  # Objects without metadata.namespace are explained in -n (default: default)
  kubectl virtctl-rs explain-overhead -f vm.yaml -n my-vms --kubevirt-cr kubevirt-cr.yaml
  # The cluster: one VM, the fleet audit, an upgrade rehearsal
  kubectl virtctl-rs explain-overhead vm/my-vm -n my-vms
  kubectl virtctl-rs explain-overhead -A
  kubectl virtctl-rs explain-overhead -A --upgrade-to main

Exit codes:
  0  explained (or stdout closed)
  1  bad input (the message names the document, object and field), the object not found, or
     the cluster unreachable
  2  usage error
  3  --pod given (or in cluster mode, the pod) and the pod does not match the formula; the
     audit flagged a pod; the rehearsal found a VM that no longer fits its node";

/// `shadow --help`: examples and exit codes.
pub const SHADOW_HELP: &str = "\
Examples:
  # Ten minutes beside KubeVirt's virt-controller, every namespace, then the summary
  kubectl virtctl-rs shadow -A --for 10m
  # One namespace, as JSON, each difference's objects written to ./repro
  kubectl virtctl-rs shadow -n my-vms --for 1h -o json --reproductions repro

Nothing is written (the client sends GET requests only); read-only RBAC suffices.

Exit codes:
  0  the summary printed (after --for, or on SIGINT/SIGTERM), or stdout closed
  1  the cluster unreachable, or the reproductions could not be written
  2  usage error";

/// `cluster --help`: examples and exit codes.
pub const CLUSTER_HELP: &str = "\
Examples:
  kubectl virtctl-rs cluster serve --kubeconfig-out /tmp/sim.kubeconfig
  KUBECONFIG=/tmp/sim.kubeconfig kubectl get nodes
  kubectl virtctl-rs cluster serve --fault 'error=503,verbs=create,resource=pods,probability=0.2'
  kubectl virtctl-rs cluster nodes --kubeconfig ~/.kube/empty-control-plane --nodes 20

Exit codes:
  0  stopped by SIGINT/SIGTERM (or stdout closed)
  1  the cluster could not start, or --apply failed
  2  usage error";

/// `demo --help`: keys, examples and exit codes.
pub const DEMO_HELP: &str = "\
Keys: Tab panels, ↑↓ scroll, w what-if (a change, nothing written), Esc fleet view,
Enter open a VM, r refresh, ? help, q quit.

Examples:
  # The embedded cluster, the controller under its Lease, vm-demo, the inspector on it
  kubectl virtctl-rs demo
  # The same with the project's example VMs too (the fleet view is one Esc away)
  kubectl virtctl-rs demo --apply docs/examples

Exit codes:
  0  quit (q, Esc on the fleet, Ctrl-C or SIGTERM): the Lease released, the cluster stopped
  1  not a terminal, the cluster or the controller could not start, or --apply failed
  2  usage error";

/// `start --help`: examples and exit codes.
pub const START_HELP: &str = "\
Examples:
  kubectl virtctl-rs start vm/my-vm -n my-vms
  kubectl virtctl-rs start my-vm --dry-run
  # The VMI starts paused (startStrategy: Paused)
  kubectl virtctl-rs start vm/my-vm --paused

Through virt-api's subresource when the cluster serves subresources.kubevirt.io/v1; otherwise
the writes virt-api would make, made directly (the output says which).

Exit codes:
  0  scheduled to start (or --dry-run shown)
  1  refused (KubeVirt's message: VM is already running, Always does not support manual start
     requests, ...), VM not found, a conflict that outlasted the retries, or unreachable
  2  usage error";

/// `stop --help`: examples and exit codes.
pub const STOP_HELP: &str = "\
Examples:
  kubectl virtctl-rs stop vm/my-vm -n my-vms
  # Lower the VMI's grace period to 0 s before stopping it
  kubectl virtctl-rs stop vm/my-vm --force --grace-period=0

Exit codes:
  0  scheduled to stop (or --dry-run shown)
  1  refused (KubeVirt's message: VM is not running, ...), VM not found, a conflict that
     outlasted the retries, or unreachable
  2  usage error (--force and --grace-period go together)";

/// `restart --help`: examples and exit codes.
pub const RESTART_HELP: &str = "\
Examples:
  kubectl virtctl-rs restart vm/my-vm -n my-vms
  # Set the VMI's grace period to 1 s before the restart is asked for, so whichever
  # deletion of the pod comes first shuts the guest down promptly
  kubectl virtctl-rs restart vm/my-vm --force --grace-period=0

Exit codes:
  0  scheduled to restart (a new VMI follows; or --dry-run shown)
  1  refused (KubeVirt's message: RunStategy Halted does not support manual restart requests,
     VM is not running, ...), VM not found, a conflict that outlasted the retries, or
     unreachable
  2  usage error (--force and --grace-period go together)";

/// `version --help`: examples and exit codes.
pub const VERSION_HELP: &str = "\
Examples:
  kubectl virtctl-rs version
  kubectl virtctl-rs version -o json

Exit codes:
  0  printed
  2  usage error";

/// `completion --help`: examples and exit codes.
pub const COMPLETION_HELP: &str = "\
Examples:
  # bash, this shell only
  source <(kubectl virtctl-rs completion bash)
  # zsh, permanently
  kubectl virtctl-rs completion zsh > \"${fpath[1]}/_kubectl-virtctl_rs\"
  kubectl virtctl-rs completion fish > ~/.config/fish/completions/kubectl-virtctl_rs.fish
  kubectl virtctl-rs completion powershell | Out-String | Invoke-Expression
The scripts complete the plugin binary kubectl-virtctl_rs (what krew and cargo install put on PATH).

Exit codes:
  0  printed
  2  usage error (unknown shell)";

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the VM and VMI controllers out of cluster, acting only while holding the Lease.
    #[command(after_help = RUN_CONTROLLER_HELP)]
    RunController(run_controller::RunControllerArgs),
    /// What the controller thinks about one VM (`inspect vm/NAME`), and what it will do next.
    #[command(after_help = INSPECT_HELP)]
    Inspect(inspect::InspectArgs),
    /// Why a VM restarted, stopped or failed: its recent runs, each end with its causes.
    #[command(after_help = WHY_HELP)]
    Why(why::WhyArgs),
    /// Replay a flight recording (`run-controller --record`) through the controllers' decisions.
    #[command(after_help = REPLAY_HELP)]
    Replay(replay::ReplayArgs),
    /// Explain the virt-launcher memory overhead of a VM or VMI, term by term.
    #[command(after_help = EXPLAIN_OVERHEAD_HELP)]
    ExplainOverhead(explain_overhead::ExplainOverheadArgs),
    /// Start a VM (`start vm/NAME`), as `virtctl start` does.
    #[command(after_help = START_HELP)]
    Start(lifecycle::StartArgs),
    /// Stop a VM (`stop vm/NAME`), as `virtctl stop` does.
    #[command(after_help = STOP_HELP)]
    Stop(lifecycle::StopArgs),
    /// Restart a VM (`restart vm/NAME`): a new VMI, as `virtctl restart` does.
    #[command(after_help = RESTART_HELP)]
    Restart(lifecycle::StopArgs),
    /// Compare the Lease holder's writes with our controllers' decisions, writing nothing.
    #[command(after_help = SHADOW_HELP)]
    Shadow(shadow::ShadowArgs),
    /// Run an embedded cluster (API server + simulated nodes) for local experiments.
    #[command(after_help = CLUSTER_HELP)]
    Cluster(cluster::ClusterArgs),
    /// The whole story: embedded cluster, controller under its Lease, a VM, the inspector on it.
    #[command(after_help = DEMO_HELP)]
    Demo(demo::DemoArgs),
    /// Print the version, git commit, Kubernetes API level and KubeVirt behaviour version.
    #[command(after_help = VERSION_HELP)]
    Version(version::VersionArgs),
    /// Print a shell completion script (bash, zsh, fish, powershell).
    #[command(after_help = COMPLETION_HELP)]
    Completion(completion::CompletionArgs),
}

/// Errors a subcommand reports to the user.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The subcommand exists in the CLI but is not implemented in this build.
    #[error("`{0}` is not available yet in this build of virtctl-rs")]
    NotAvailable(&'static str),
    /// A command line that cannot be run (exit code 2).
    #[error("{0}")]
    Usage(String),
    /// Bad input or a failed operation, already phrased for the user.
    #[error("{0}")]
    Failed(String),
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

/// The settings of the KubeVirt CR in the file `path` (`--kubevirt-cr`); KubeVirt's defaults
/// without one.
pub(crate) fn kubevirt_cr_settings(
    path: &Option<PathBuf>,
) -> Result<crate::config::ClusterSettings, CliError> {
    match path {
        None => Ok(Default::default()),
        Some(path) => kubevirt_cr_file(path).map(|(s, _)| s),
    }
}

/// A KubeVirt CR file's settings ([`kubevirt_cr_settings`]) and its
/// `status.observedKubeVirtVersion`, when it has one.
pub(crate) fn kubevirt_cr_file(
    path: &std::path::Path,
) -> Result<(crate::config::ClusterSettings, Option<String>), CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Failed(format!("reading {}: {e}", path.display())))?;
    let value: serde_json::Value = serde_yaml::from_str(&text)
        .map_err(|e| CliError::Failed(format!("{}: invalid YAML: {e}", path.display())))?;
    let settings = crate::config::ClusterSettings::from_kubevirt_cr(&value)
        .map_err(|e| CliError::Failed(format!("{}: {e}", path.display())))?;
    let observed = value
        .pointer("/status/observedKubeVirtVersion")
        .and_then(serde_json::Value::as_str)
        .map(str::to_string);
    Ok((settings, observed))
}

/// Set up logging on stderr according to the global flags.
pub(crate) fn init_logging(global: &GlobalArgs) {
    use std::io::IsTerminal;
    // kube's client logs every failed connection at ERROR; our own informers and executors
    // already report failures once, at WARN, so keep kube's quiet unless asked for (-v).
    let default = match global.verbose {
        0 => "warn,kube_client::client::builder=off",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr);
    let _ = match global.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Run the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    init_logging(&cli.global);
    let result = match cli.command {
        Command::RunController(args) => run_controller::run(&cli.global, args),
        Command::Inspect(args) => inspect::run(&cli.global, args),
        Command::Demo(args) => demo::run(&cli.global, args),
        Command::Why(args) => why::run(&cli.global, args),
        Command::Replay(args) => replay::run(args),
        Command::ExplainOverhead(args) => explain_overhead::run(&cli.global, args),
        Command::Cluster(args) => cluster::run(&cli.global, args),
        Command::Shadow(args) => shadow::run(&cli.global, args),
        Command::Start(args) => lifecycle::run_start(&cli.global, args),
        Command::Stop(args) => lifecycle::run_stop(&cli.global, crate::lifecycle::Verb::Stop, args),
        Command::Restart(args) => {
            lifecycle::run_stop(&cli.global, crate::lifecycle::Verb::Restart, args)
        }
        Command::Version(args) => version::run(args),
        Command::Completion(args) => completion::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err @ (CliError::NotAvailable(_) | CliError::Usage(_))) => {
            eprintln!("error: {err}");
            ExitCode::from(2)
        }
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
