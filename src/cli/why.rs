//! `kubectl virtctl-rs why vm/NAME`: the VM's recent starts and stops, each end with its cause
//! chain and evidence (docs/why.md). Text by default, `-o json` for scripts. Exit codes: 0
//! shown, 1 VM not found, cluster unreachable or `--recording` unreadable, 2 usage.

use super::client::client_from_flags;
use super::{CliError, GlobalArgs};
use crate::inspect::GatherOptions;
use crate::runtime::lease::{DEFAULT_LEASE_NAME, DEFAULT_NAMESPACE};
use clap::Args;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

/// Flags of `why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The VM, kubectl style: `vm/NAME` (or `vm NAME`).
    #[arg(value_name = "TYPE/NAME", num_args = 1..=2, required = true)]
    pub target: Vec<String>,
    /// Print the report as JSON.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<WhyOutput>,
    /// Namespace of the controller Lease.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub lease_namespace: String,
    /// Name of the controller Lease.
    #[arg(long, default_value = DEFAULT_LEASE_NAME)]
    pub lease_name: String,
    #[command(flatten)]
    pub kubevirt: super::KubeVirtNamespaceArg,
    /// A flight recording (`run-controller --record DIR`, a directory or one segment) whose
    /// controller Events about the VM are added to the cluster's: they outlive the API
    /// server's one-hour Event TTL there.
    #[arg(long, value_name = "DIR")]
    pub recording: Option<std::path::PathBuf>,
}

/// `-o` formats of `why`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WhyOutput {
    Json,
}

/// The VM name of `TYPE/NAME` or `TYPE NAME`.
fn vm_name(target: &[String]) -> Result<String, CliError> {
    super::inspect::vm_target(target, "why explains")?
        .ok_or_else(|| CliError::Usage("expected one TYPE/NAME".into()))
}

/// Run `why`.
pub(crate) fn run(global: &GlobalArgs, args: WhyArgs) -> Result<ExitCode, CliError> {
    let name = vm_name(&args.target)?;
    let opts = GatherOptions {
        lease_namespace: args.lease_namespace.clone(),
        lease_name: args.lease_name.clone(),
        kubevirt_namespace: args.kubevirt.kubevirt_namespace.clone(),
        timeout: Duration::from_secs(5),
        compare_version: None,
    };
    let recording = match &args.recording {
        Some(path) => crate::flight::read_recording(path)
            .map_err(|e| CliError::Failed(format!("--recording: {e}")))?,
        None => Vec::new(),
    };
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    let report = runtime.block_on(async {
        let client = client_from_flags(global, "why").await?;
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        crate::why::why_vm(&client, &namespace, &name, &opts, &recording)
            .await
            .map_err(|e| CliError::Failed(e.to_string()))
    })?;
    let text = match args.output {
        Some(WhyOutput::Json) => serde_json::to_string_pretty(&report)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Failed(format!("serialising: {e}")))?,
        None => crate::why::render_text(&report),
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::Failed(format!("writing to stdout: {e}")))
        }
        _ => Ok(ExitCode::SUCCESS),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(args: &[&str]) -> Result<String, String> {
        vm_name(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>()).map_err(|e| e.to_string())
    }

    #[test]
    fn targets_follow_kubectl() {
        assert_eq!(t(&["vm/a"]), Ok("a".into()));
        assert_eq!(t(&["virtualmachines.kubevirt.io", "a"]), Ok("a".into()));
        assert!(t(&["a"]).unwrap_err().contains("TYPE/NAME"));
        assert!(t(&["pod/a"]).unwrap_err().contains("\"pod\""));
        assert!(t(&["vm/"]).is_err());
    }
}
