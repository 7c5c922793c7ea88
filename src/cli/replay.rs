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
    /// A recording directory (`run-controller --record DIR`) or one of its segment files.
    #[arg(value_name = "FILE|DIR")]
    pub path: PathBuf,
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
    let lines =
        crate::flight::read_recording(&args.path).map_err(|e| CliError::Failed(e.to_string()))?;
    let report = crate::replay::replay(&lines);
    let text = match args.output {
        Some(ReplayOutput::Json) => serde_json::to_string_pretty(&report)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Failed(format!("serialising: {e}")))?,
        None => crate::replay::render_text(&report),
    };
    let code = if report.differ > 0 {
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
