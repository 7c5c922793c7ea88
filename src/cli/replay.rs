//! `kubectl virtctl-rs replay FILE|DIR`: a flight recording (`run-controller --record`)
//! replayed through the controllers' decisions (docs/replay.md). Exit codes: 0 every replayed
//! decision is the recorded one, 3 one differs, 1 the recording cannot be read, 2 usage.

use super::CliError;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags of `replay`.
#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// A recording directory (`run-controller --record DIR`) or one of its segment files, or
    /// a Kubernetes audit log (`audit.k8s.io/v1` Events, one a line).
    #[arg(value_name = "FILE|DIR")]
    pub path: PathBuf,
    /// Audit log: the controller's user, a username or the start of a user agent (default:
    /// whoever writes the controller Lease with a holder).
    #[arg(long, value_name = "USER")]
    pub controller_user: Option<String>,
    /// Audit log: the controller Lease, `NAMESPACE/NAME`.
    #[arg(
        long,
        value_name = "NAMESPACE/NAME",
        default_value = "kubevirt/virt-controller"
    )]
    pub lease: String,
    /// Print the report as JSON.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<ReplayOutput>,
}

/// `-o` formats of `replay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReplayOutput {
    Json,
}

/// Run `replay`.
pub(crate) fn run(args: ReplayArgs) -> Result<ExitCode, CliError> {
    let source = crate::replay::AuditSource {
        lease: &args.lease,
        controller: args.controller_user.as_deref(),
    };
    match crate::replay::load(&args.path, source).map_err(CliError::Failed)? {
        crate::replay::Loaded::Recording(report) => {
            let text = match args.output {
                Some(ReplayOutput::Json) => to_json(&report)?,
                None => crate::replay::render_text(&report),
            };
            print(&text, report.differ > 0)
        }
        crate::replay::Loaded::Audit(report) => {
            let text = match args.output {
                Some(ReplayOutput::Json) => to_json(&report)?,
                None => crate::replay::render_audit_text(&report),
            };
            print(&text, report.differs())
        }
    }
}

/// `v` as pretty JSON with a final newline.
fn to_json<T: serde::Serialize>(v: &T) -> Result<String, CliError> {
    serde_json::to_string_pretty(v)
        .map(|s| s + "\n")
        .map_err(|e| CliError::Failed(format!("serialising: {e}")))
}

/// Print `text`; exit code 3 when `differs`. A closed stdout is not an error.
fn print(text: &str, differs: bool) -> Result<ExitCode, CliError> {
    let code = if differs {
        ExitCode::from(3)
    } else {
        ExitCode::SUCCESS
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(CliError::Failed(format!("writing to stdout: {e}")))
        }
        _ => Ok(code),
    }
}
