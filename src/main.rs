//! `kubectl-virtctl_rs`: parse the command line and hand over to the library.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = virtctl_rs::cli::Cli::parse();
    virtctl_rs::cli::run(cli)
}
