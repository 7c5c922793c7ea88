//! Command-line interface: one file per subcommand, flags and output formatting only.
//!
//! Every subcommand returns a [`CliError`]; [`run`] prints it on stderr and maps it to the
//! process exit code (1 for errors, 2 for usage errors and "not available yet").

pub mod client;
pub mod cluster;
pub mod demo;
pub mod explain_overhead;
pub mod inspect;
pub mod progress;
pub mod run_controller;

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

/// kubectl-style flags shared by every subcommand.
#[derive(Debug, Clone, Args, Default)]
pub struct GlobalArgs {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, env = "KUBECONFIG")]
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
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the VM and VMI controllers out of cluster, acting only while holding the Lease.
    RunController(run_controller::RunControllerArgs),
    /// What the controller thinks about one VM (`inspect vm/NAME`), and what it will do next.
    Inspect(inspect::InspectArgs),
    /// Explain the virt-launcher memory overhead of a VM or VMI, term by term.
    ExplainOverhead(explain_overhead::ExplainOverheadArgs),
    /// Run an embedded cluster (API server + simulated nodes) for local experiments.
    Cluster(cluster::ClusterArgs),
    /// The whole story: embedded cluster, controller under its Lease, a VM, the inspector on it.
    Demo(demo::DemoArgs),
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

/// Set up logging on stderr according to the global flags.
pub fn init_logging(global: &GlobalArgs) {
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
        Command::ExplainOverhead(args) => explain_overhead::run(&cli.global, args),
        Command::Cluster(args) => cluster::run(&cli.global, args),
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
