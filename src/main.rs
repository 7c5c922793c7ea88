//! `kubectl-virtctl_rs`: parse the command line and hand over to the library.

#![warn(clippy::too_many_lines)]

use clap::Parser;
use std::process::ExitCode;

/// jemalloc instead of glibc malloc: reconciles and watch decoding allocate and free many small
/// objects; docs/performance.md "Controller start, 1,000 and 10,000 VMs" has the figures.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let cli = virtctl_rs::cli::Cli::parse();
    virtctl_rs::cli::run(cli)
}
