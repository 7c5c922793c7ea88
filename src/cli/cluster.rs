//! `cluster serve`: run the embedded cluster (API server + simulated nodes) in the foreground.

use super::{CliError, GlobalArgs};
use crate::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Flags of `cluster`.
#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(subcommand)]
    pub command: ClusterCommand,
}

/// `cluster` subcommands.
#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Run an embedded Kubernetes API server with simulated nodes until Ctrl-C / SIGTERM.
    Serve(ServeArgs),
}

/// Flags of `cluster serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Number of simulated nodes (sim-node-0, sim-node-1, ...).
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// Write the kubeconfig to this file (mode 0600) instead of a private temp dir.
    #[arg(long)]
    pub kubeconfig_out: Option<PathBuf>,
    /// Apply a YAML file or a directory of YAML files after start (repeatable).
    #[arg(long)]
    pub apply: Vec<PathBuf>,
    /// Milliseconds between a pod being bound and it running.
    #[arg(long, default_value_t = 200)]
    pub kubelet_delay_ms: u64,
    /// Factor applied to grace periods (0.01 turns 60 s into 0.6 s).
    #[arg(long, default_value_t = 0.01)]
    pub grace_scale: f64,
    /// Append the API server's audit log to this file, one JSON object a line (every request:
    /// verb, resource, name, user agent, code; the leader-election fields of Lease writes).
    #[arg(long, value_name = "FILE")]
    pub audit_log: Option<PathBuf>,
}

/// Run `cluster ...`.
pub fn run(_global: &GlobalArgs, args: ClusterArgs) -> Result<ExitCode, CliError> {
    match args.command {
        ClusterCommand::Serve(serve_args) => {
            let runtime = tokio::runtime::Runtime::new()
                .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(serve(serve_args))
        }
    }
}

async fn wait_for_signal() -> Result<&'static str, CliError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| CliError::Failed(format!("cannot listen for SIGTERM: {e}")))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| CliError::Failed(format!("cannot listen for SIGINT: {e}")))?;
    Ok(tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = int.recv() => "SIGINT",
    })
}

async fn serve(args: ServeArgs) -> Result<ExitCode, CliError> {
    let mut config = EmbeddedClusterConfig {
        nodes: args.nodes,
        kubelet_delay: Duration::from_millis(args.kubelet_delay_ms),
        grace_scale: args.grace_scale,
        ..Default::default()
    };
    if let Some(out) = &args.kubeconfig_out {
        let out = std::path::absolute(out).map_err(|e| {
            CliError::Failed(format!("invalid --kubeconfig-out {}: {e}", out.display()))
        })?;
        config.api.kubeconfig_path = Some(out);
    }
    config.api.audit_file = args.audit_log.clone();
    // Listen before starting so a signal during start-up is not lost.
    let signal = tokio::spawn(wait_for_signal());
    let cluster = EmbeddedCluster::start(config)
        .await
        .map_err(|e| CliError::Failed(e.to_string()))?;
    let path = cluster.kubeconfig_path().to_path_buf();
    let prepared = async {
        for p in &args.apply {
            let summary = cluster
                .apply_path(p)
                .await
                .map_err(|e| CliError::Failed(e.to_string()))?;
            eprintln!(
                "applied {}: {} created, {} replaced, {} skipped",
                p.display(),
                summary.created.len(),
                summary.replaced.len(),
                summary.skipped.len()
            );
        }
        Ok::<(), CliError>(())
    }
    .await;
    if let Err(e) = prepared {
        cluster.shutdown().await;
        return Err(e);
    }
    crate::say!(
        "embedded cluster at {} with {} simulated node(s): {}",
        cluster.api().url(),
        cluster.nodes().node_names().len(),
        cluster.nodes().node_names().join(", ")
    );
    crate::say!("kubeconfig: {}", path.display());
    crate::say!("export KUBECONFIG={}", path.display());
    let outcome = signal
        .await
        .map_err(|e| CliError::Failed(format!("signal listener failed: {e}")));
    let name = match outcome {
        Ok(Ok(name)) => name,
        Ok(Err(e)) | Err(e) => {
            cluster.shutdown().await;
            return Err(e);
        }
    };
    eprintln!("{name} received, shutting down");
    cluster.shutdown().await;
    Ok(ExitCode::SUCCESS)
}
