//! `completion bash|zsh|fish|powershell`: a shell completion script on stdout (clap_complete),
//! for the plugin binary `kubectl-virtctl_rs`. Exit code 0; 2 for an unknown shell.

use super::{Cli, CliError};
use clap::{Args, CommandFactory};
use clap_complete::Shell;
use std::process::ExitCode;

/// The binary the completion scripts complete (what krew and `cargo install` put on PATH).
pub(crate) const BIN_NAME: &str = "kubectl-virtctl_rs";

/// Flags of `completion`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell to write the script for.
    #[arg(value_enum)]
    pub shell: CompletionShell,
}

/// Shells `completion` supports (kubectl's list).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
    Powershell,
}

impl From<CompletionShell> for Shell {
    fn from(s: CompletionShell) -> Shell {
        match s {
            CompletionShell::Bash => Shell::Bash,
            CompletionShell::Zsh => Shell::Zsh,
            CompletionShell::Fish => Shell::Fish,
            CompletionShell::Powershell => Shell::PowerShell,
        }
    }
}

/// The completion script for `shell`.
pub(crate) fn script(shell: CompletionShell) -> String {
    let mut cmd = Cli::command();
    let mut buf = Vec::new();
    clap_complete::generate(Shell::from(shell), &mut cmd, BIN_NAME, &mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

/// Run `completion`.
pub(crate) fn run(args: CompletionArgs) -> Result<ExitCode, CliError> {
    super::output::out(&script(args.shell));
    Ok(ExitCode::SUCCESS)
}
