//! `explain-overhead`: flags and output formatting.

use super::{CliError, GlobalArgs};
use clap::Args;
use std::process::ExitCode;

/// Flags of `explain-overhead`.
#[derive(Debug, Args)]
pub struct ExplainOverheadArgs {
    /// Manifest file with VirtualMachine/VirtualMachineInstance documents (`-` for stdin).
    #[arg(short = 'f', long = "filename")]
    pub filename: Option<String>,
}

/// Run `explain-overhead`.
pub fn run(_global: &GlobalArgs, _args: ExplainOverheadArgs) -> Result<ExitCode, CliError> {
    Err(CliError::NotAvailable("explain-overhead"))
}
