//! `kubectl virtctl-rs start|stop|restart vm/NAME`: virtctl's verbs (pkg/virtctl/vm/start.go,
//! stop.go, restart.go). Through virt-api's subresource endpoint when the cluster serves
//! `subresources.kubevirt.io/v1`, else the same writes made directly ([`crate::lifecycle`]);
//! the output says which. Exit codes: 0 scheduled, 1 refused (KubeVirt's message) or failed,
//! 2 usage.

use super::client::client_from_flags;
use super::inspect::VM_TYPES;
use super::{CliError, GlobalArgs};
use crate::lifecycle::{Options, Outcome, Request, Route, Verb, Write, send};
use crate::say;
use clap::Args;
use std::process::ExitCode;

/// Flags of `start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// The VM: `vm/NAME`, `virtualmachine/NAME` or `NAME`.
    #[arg(value_name = "VM")]
    pub target: String,
    /// Start the VM paused (a Start request with `paused: "true"`; the VMI gets
    /// `startStrategy: Paused`).
    #[arg(long)]
    pub paused: bool,
    /// Decide, show and write nothing (virt-api gets `dryRun: [All]`).
    #[arg(long)]
    pub dry_run: bool,
}

/// Flags of `stop` and `restart`.
#[derive(Debug, Args)]
pub struct StopArgs {
    /// The VM: `vm/NAME`, `virtualmachine/NAME` or `NAME`.
    #[arg(value_name = "VM")]
    pub target: String,
    /// Seconds the VMI is given to shut down, set on it before the stop is asked for; only
    /// with --force (restart: only 0, which sets the VMI's grace period to 1 s).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub grace_period: Option<i64>,
    /// Force: with --grace-period, lower the VMI's grace period before stopping it.
    #[arg(long)]
    pub force: bool,
    /// Decide, show and write nothing (virt-api gets `dryRun: [All]`).
    #[arg(long)]
    pub dry_run: bool,
}

/// The VM name of `TYPE/NAME` (a VirtualMachine type, kubectl's names) or `NAME`.
pub(crate) fn parse_vm(target: &str) -> Result<String, CliError> {
    let name = match target.split_once('/') {
        Some((kind, name)) => {
            if !VM_TYPES.contains(&kind.to_ascii_lowercase().as_str()) {
                return Err(CliError::Usage(format!(
                    "start, stop and restart act on VirtualMachines: resource type {kind:?} is \
                     not one (use vm/NAME)"
                )));
            }
            name
        }
        None => target,
    };
    if name.is_empty() || name.contains('/') {
        return Err(CliError::Usage(format!("invalid VM name {name:?}")));
    }
    Ok(name.to_string())
}

/// Run `start`.
pub(crate) fn run_start(global: &GlobalArgs, args: StartArgs) -> Result<ExitCode, CliError> {
    let name = parse_vm(&args.target)?;
    let options = Options {
        paused: args.paused,
        ..Options::default()
    };
    run(global, Verb::Start, name, options, args.dry_run)
}

/// Run `stop` or `restart`.
pub(crate) fn run_stop(
    global: &GlobalArgs,
    verb: Verb,
    args: StopArgs,
) -> Result<ExitCode, CliError> {
    let name = parse_vm(&args.target)?;
    // virtctl: `gracePeriodChanged != forceRestart` (stop.go, restart.go).
    if args.grace_period.is_some() != args.force {
        return Err(CliError::Usage(
            "Must both use --force=true and set --grace-period.".into(),
        ));
    }
    let options = Options {
        grace_period: args.grace_period,
        ..Options::default()
    };
    run(global, verb, name, options, args.dry_run)
}

fn run(
    global: &GlobalArgs,
    verb: Verb,
    name: String,
    options: Options,
    dry_run: bool,
) -> Result<ExitCode, CliError> {
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        let client = client_from_flags(global, verb.as_str()).await?;
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_string());
        let request = Request {
            verb,
            namespace,
            name,
            options,
            dry_run,
        };
        if dry_run {
            // virtctl's line (pkg/virtctl/vm/common.go `setDryRunOption`).
            say!("Dry Run execution");
        }
        let outcome = send(&client, &request)
            .await
            .map_err(|e| CliError::Failed(e.to_string()))?;
        report(&request, &outcome);
        Ok(ExitCode::SUCCESS)
    })
}

/// virtctl's line, then the route and what was written.
fn report(request: &Request, outcome: &Outcome) {
    let nothing = if outcome.dry_run {
        " (dry run: nothing written)"
    } else {
        ""
    };
    say!(
        "VM {} was scheduled to {}{nothing}",
        request.name,
        request.verb.as_str()
    );
    match &outcome.route {
        Route::Subresource => say!("via virt-api: PUT {}", request.subresource_path()),
        Route::Direct { why } => {
            say!(
                "via direct writes, as virt-api's {} makes them: {why}",
                request.verb.handler()
            );
            if outcome.writes.is_empty() {
                say!("  nothing to write (virt-api accepts this request and changes nothing)");
            }
            for write in &outcome.writes {
                say!(
                    "  PATCH {}: {}",
                    target(write, &request.name),
                    write.summary()
                );
                say!("    {}", write.patch());
            }
        }
    }
    if outcome.attempts > 1 {
        say!(
            "the VM changed between read and write; accepted on attempt {} of {}",
            outcome.attempts,
            crate::lifecycle::request::MAX_ATTEMPTS
        );
    }
}

fn target(write: &Write, name: &str) -> String {
    match write {
        Write::VmiGracePeriod { .. } => format!("virtualmachineinstances/{name}"),
        Write::Vm { .. } => format!("virtualmachines/{name}"),
        Write::VmStatus { .. } => format!("virtualmachines/{name}/status"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_are_a_vm_type_and_name_or_a_bare_name() {
        let ok = |t: &str| parse_vm(t).map_err(|e| e.to_string());
        assert_eq!(ok("vm/a"), Ok("a".into()));
        assert_eq!(ok("virtualmachine/a"), Ok("a".into()));
        assert_eq!(ok("VirtualMachines.kubevirt.io/a"), Ok("a".into()));
        assert_eq!(ok("a"), Ok("a".into()));
        assert!(ok("pod/a").unwrap_err().contains("\"pod\""));
        assert!(ok("vm/").is_err());
        assert!(ok("vm/a/b").is_err());
    }
}
