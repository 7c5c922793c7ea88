//! `kubectl virtctl-rs inspect vm/NAME`: what the controller thinks about one VM, and what it
//! will do next (`-o json|yaml` for scripts, `--once` for text); `inspect` with no name: the
//! fleet. Exit codes: 0 shown, 1 VM not found or cluster unreachable (reason on stderr), 2 usage.

use super::client::client_from_flags;
use super::{CliError, GlobalArgs};
use crate::inspect::text::{render_fleet, render_vm};
use crate::inspect::tui::cluster::ClusterGather;
use crate::inspect::tui::replay::ReplayView;
use crate::inspect::whatif::{self, Change};
use crate::inspect::{GatherError, GatherOptions, gather_fleet, gather_vm};
use crate::runtime::lease::{DEFAULT_LEASE_NAME, DEFAULT_NAMESPACE};
use clap::Args;
use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

/// Flags of `inspect`.
#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The VM, kubectl style: `vm/NAME` (or `vm NAME`); leave out for the fleet view.
    #[arg(value_name = "TYPE/NAME", num_args = 0..=2)]
    pub target: Vec<String>,
    /// Print the Inspection (or the Fleet) as JSON or YAML.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<Output>,
    /// Print one plain-text snapshot and exit (the default when stdout is not a terminal).
    #[arg(long)]
    pub once: bool,
    /// Fleet view: every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Namespace of the controller Lease.
    #[arg(long, default_value = DEFAULT_NAMESPACE)]
    pub lease_namespace: String,
    /// Name of the controller Lease.
    #[arg(long, default_value = DEFAULT_LEASE_NAME)]
    pub lease_name: String,
    #[command(flatten)]
    pub kubevirt: super::KubeVirtNamespaceArg,
    /// Timeout of the debug-endpoint and metrics reads, seconds.
    #[arg(long, default_value_t = 5)]
    pub timeout_seconds: u64,
    /// What-if: a JSON merge patch (RFC 7386, JSON or YAML) of the VM; nothing is written
    /// (repeatable, applied in order; docs/inspect.md "What-if").
    #[arg(long = "what-if", value_name = "PATCH")]
    pub what_if: Vec<String>,
    /// What-if: set one field, `path=value` (e.g. `spec.runStrategy=Halted`; the value is JSON
    /// when it parses, else a string; repeatable, applied after --what-if).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// What-if: a start/stop/restart request, as virtctl sends it (applied last).
    #[arg(long = "what-if-request", value_name = "start|stop|restart")]
    pub what_if_request: Option<String>,
    /// What-if on a manifest instead of the cluster: its VM (and the VMI, pods, nodes, KubeVirt
    /// CR it holds).
    #[arg(short = 'f', long = "filename", value_name = "FILE")]
    pub filename: Option<String>,
    /// Compare the VM's memory overhead with another release's formula (e.g. v1.4.1): a second
    /// bar in the Overhead check, a line in the text, `kubevirtVersionOverhead` in -o json.
    #[arg(long = "kubevirt-version", value_name = "VERSION")]
    pub kubevirt_version: Option<String>,
    /// Step through the VM's reconciles in a flight recording (`run-controller --record DIR`),
    /// or the controller's writes in a Kubernetes audit log (`replay FILE` reads the same),
    /// instead of reading the cluster: each one's time, inputs, decision and writes, and
    /// whether the replayed decision is the recorded one (docs/inspect.md "Replay").
    #[arg(long, value_name = "DIR|FILE")]
    pub replay: Option<std::path::PathBuf>,
    /// Upgrade rehearsal of the fleet (with -A or -n): every running launcher pod rendered
    /// again under this KubeVirt release, per VM the memory request delta, its causes (PR
    /// numbers) and whether it still fits on its node, and per node what it needs
    /// (docs/inspect.md "Upgrade rehearsal"; `explain-overhead -A --upgrade-to` prints it).
    #[arg(long, value_name = "VERSION", conflicts_with = "replay")]
    pub upgrade_to: Option<String>,
    /// Show whether a running shadow agreed with the leader's last writes for this VM: the
    /// file `shadow --verdicts FILE` keeps up to date (docs/shadow.md "What inspect shows").
    #[arg(long, value_name = "FILE", conflicts_with_all = ["replay", "upgrade_to"])]
    pub shadow: Option<std::path::PathBuf>,
}

/// `-o` formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    Json,
    Yaml,
}

/// Resource names `inspect` accepts for a VM (kubectl's: plural, singular, short, with group).
pub(crate) const VM_TYPES: &[&str] = &[
    "vm",
    "vms",
    "virtualmachine",
    "virtualmachines",
    "virtualmachine.kubevirt.io",
    "virtualmachines.kubevirt.io",
];

/// The VM name of `TYPE/NAME` or `TYPE NAME`; `None` for no target (the fleet).
pub(crate) fn parse_target(target: &[String]) -> Result<Option<String>, CliError> {
    vm_target(target, "inspect shows")
}

/// [`parse_target`] for any command about one VM: `purpose` opens the refusal of another
/// resource type ("inspect shows", "why explains").
pub(crate) fn vm_target(target: &[String], purpose: &str) -> Result<Option<String>, CliError> {
    let (kind, name) = match target {
        [] => return Ok(None),
        [one] => match one.split_once('/') {
            Some((k, n)) => (k.to_string(), n.to_string()),
            None => {
                return Err(CliError::Usage(format!(
                    "expected TYPE/NAME (e.g. vm/{one}), got {one:?}"
                )));
            }
        },
        [k, n] => (k.clone(), n.clone()),
        _ => return Err(CliError::Usage("expected one TYPE/NAME".into())),
    };
    if !VM_TYPES.contains(&kind.to_ascii_lowercase().as_str()) {
        return Err(CliError::Usage(format!(
            "{purpose} VirtualMachines: resource type {kind:?} is not one (use vm/NAME)"
        )));
    }
    if name.is_empty() || name.contains('/') {
        return Err(CliError::Usage(format!("invalid VM name {name:?}")));
    }
    Ok(Some(name))
}

/// The client and the namespace in scope: `-n`, else the kubeconfig context's.
async fn connect_in_namespace(global: &GlobalArgs) -> Result<(kube::Client, String), CliError> {
    let client = client_from_flags(global, "inspect").await?;
    let namespace = global
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    Ok((client, namespace))
}

impl InspectArgs {
    /// The Lease to read, the per-request timeout and the release to compare, from the flags;
    /// an unknown `--kubevirt-version` is a usage error.
    fn gather_options(&self) -> Result<GatherOptions, CliError> {
        let compare_version = self
            .kubevirt_version
            .as_deref()
            .map(crate::kubevirt_version::KubeVirtVersion::parse)
            .transpose()
            .map_err(|e| CliError::Usage(format!("--kubevirt-version: {e}")))?;
        Ok(GatherOptions {
            lease_namespace: self.lease_namespace.clone(),
            lease_name: self.lease_name.clone(),
            kubevirt_namespace: self.kubevirt.kubevirt_namespace.clone(),
            timeout: Duration::from_secs(self.timeout_seconds.max(1)),
            compare_version,
        })
    }
}

/// Write to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Failed(format!("writing to stdout: {e}"))),
    }
}

fn serialise<T: serde::Serialize>(value: &T, output: Output) -> Result<String, CliError> {
    match output {
        Output::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| CliError::Failed(format!("serialising: {e}"))),
        Output::Yaml => {
            serde_yaml::to_string(value).map_err(|e| CliError::Failed(format!("serialising: {e}")))
        }
    }
}

fn gather_failed(e: GatherError) -> CliError {
    CliError::Failed(e.to_string())
}

/// Run `inspect`.
pub(crate) fn run(global: &GlobalArgs, args: InspectArgs) -> Result<ExitCode, CliError> {
    if let Some(path) = &args.replay {
        return run_replay(global, &args, path);
    }
    let opts = args.gather_options()?;
    if let Some(version) = &args.upgrade_to {
        return run_rehearsal(global, &args, version, &opts);
    }
    if !args.what_if.is_empty()
        || !args.set.is_empty()
        || args.what_if_request.is_some()
        || args.filename.is_some()
    {
        return run_what_if(global, args);
    }
    let name = parse_target(&args.target)?;
    if args.once && args.output.is_some() {
        return Err(CliError::Usage("--once and -o are exclusive".into()));
    }
    if name.is_some() && args.all_namespaces {
        return Err(CliError::Usage(
            "-A/--all-namespaces is for the fleet view (inspect with no name)".into(),
        ));
    }
    if name.is_none() && args.shadow.is_some() {
        return Err(CliError::Usage(
            "--shadow shows the shadow's verdicts on one VM: give vm/NAME".into(),
        ));
    }
    let interactive = args.output.is_none() && !args.once && std::io::stdout().is_terminal();
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async move {
        let (client, namespace) = connect_in_namespace(global).await?;
        if interactive {
            let scope = match &name {
                Some(_) => Some(namespace.clone()),
                None => (!args.all_namespaces).then(|| namespace.clone()),
            };
            // The first gather decides the exit code (1: VM not found, cluster unreachable);
            // after that, errors are shown in the UI's status line.
            match &name {
                Some(name) => {
                    gather_vm(&client, &namespace, name, &opts)
                        .await
                        .map_err(gather_failed)?;
                }
                None => {
                    gather_fleet(&client, scope.as_deref(), &opts)
                        .await
                        .map_err(gather_failed)?;
                }
            }
            let gather = ClusterGather {
                client,
                namespace: scope,
                options: opts,
                shadow: args.shadow.clone(),
            };
            let shown = match &name {
                Some(name) => crate::inspect::tui::run_vm(&gather, &namespace, name).await,
                None => crate::inspect::tui::run_fleet(&gather).await,
            };
            shown.map_err(|e| CliError::Failed(format!("terminal: {e}")))?;
            return Ok(ExitCode::SUCCESS);
        }
        match name {
            Some(name) => {
                let mut ins = gather_vm(&client, &namespace, &name, &opts)
                    .await
                    .map_err(gather_failed)?;
                if let Some(file) = &args.shadow {
                    crate::inspect::shadow_view::attach(&mut ins, file);
                }
                match args.output {
                    Some(o) => emit(&serialise(&ins, o)?)?,
                    None => emit(&render_vm(&ins))?,
                }
            }
            None => {
                let scope = (!args.all_namespaces).then_some(namespace.as_str());
                let fleet = gather_fleet(&client, scope, &opts)
                    .await
                    .map_err(gather_failed)?;
                match args.output {
                    Some(o) => emit(&serialise(&fleet, o)?)?,
                    None => emit(&render_fleet(&fleet))?,
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// `inspect --replay PATH vm/NAME`: the VM's recorded reconciles (a flight recording) or the
/// controller's writes (an audit log, its controller the writer of the `--lease-*` Lease),
/// replayed, stepped through in the terminal; `--once` (or not a terminal) prints every step,
/// `-o` the steps as data.
fn run_replay(
    global: &GlobalArgs,
    args: &InspectArgs,
    path: &std::path::Path,
) -> Result<ExitCode, CliError> {
    if !args.what_if.is_empty()
        || !args.set.is_empty()
        || args.what_if_request.is_some()
        || args.filename.is_some()
        || args.all_namespaces
        || args.kubevirt_version.is_some()
    {
        return Err(CliError::Usage(
            "--replay reads a recording of one VM: no what-if, -f, -A or --kubevirt-version".into(),
        ));
    }
    if args.once && args.output.is_some() {
        return Err(CliError::Usage("--once and -o are exclusive".into()));
    }
    let Some(name) = parse_target(&args.target)? else {
        return Err(CliError::Usage(
            "--replay steps through one VM's reconciles: give vm/NAME".into(),
        ));
    };
    let namespace = global.namespace.clone().unwrap_or_else(|| "default".into());
    let source = path.display().to_string();
    // An audit log's controller is the writer of the Lease `--lease-namespace/--lease-name`.
    let lease = format!("{}/{}", args.lease_namespace, args.lease_name);
    let audit = crate::replay::AuditSource {
        lease: &lease,
        controller: None,
    };
    let loaded = crate::replay::load(path, audit).map_err(CliError::Failed)?;
    let view = ReplayView::of(loaded.into_vms(), &source, &format!("{namespace}/{name}"))
        .map_err(CliError::Failed)?;
    if let Some(o) = args.output {
        emit(&serialise(&view.vm, o)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    if args.once || !std::io::stdout().is_terminal() {
        emit(&crate::inspect::tui::replay::text(&view))?;
        return Ok(ExitCode::SUCCESS);
    }
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime
        .block_on(crate::inspect::tui::live::run_replay(
            crate::inspect::tui::App::replay(view),
        ))
        .map_err(|e| CliError::Failed(format!("terminal: {e}")))?;
    Ok(ExitCode::SUCCESS)
}

/// `inspect --upgrade-to VERSION` (`-A` or `-n NS`): the fleet's upgrade rehearsal, gathered
/// once ([`crate::inspect::rehearsal::gather_rehearsal`], as `explain-overhead -A
/// --upgrade-to`), in the terminal; `--once` (or not a terminal) prints it as text, `-o` the
/// rehearsal as data. Exit 0 when shown, 1 when the cluster cannot be read, 2 on bad flags.
fn run_rehearsal(
    global: &GlobalArgs,
    args: &InspectArgs,
    version: &str,
    opts: &GatherOptions,
) -> Result<ExitCode, CliError> {
    if !args.target.is_empty()
        || !args.what_if.is_empty()
        || !args.set.is_empty()
        || args.what_if_request.is_some()
        || args.filename.is_some()
        || args.kubevirt_version.is_some()
    {
        return Err(CliError::Usage(
            "--upgrade-to rehearses the fleet (-A or -n NS): no vm/NAME, what-if, -f or \
             --kubevirt-version"
                .into(),
        ));
    }
    if args.once && args.output.is_some() {
        return Err(CliError::Usage("--once and -o are exclusive".into()));
    }
    let target = crate::kubevirt_version::KubeVirtVersion::parse(version)
        .map_err(|e| CliError::Usage(format!("--upgrade-to: {e}")))?;
    let runtime = tokio::runtime::Runtime::new()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(async {
        let (client, namespace) = connect_in_namespace(global).await?;
        let scope = (!args.all_namespaces).then_some(namespace.as_str());
        let rehearsal =
            crate::inspect::rehearsal::gather_rehearsal(&client, scope, opts, target, &mut |_| {})
                .await
                .map_err(|e| CliError::Failed(e.to_string()))?;
        if let Some(o) = args.output {
            return emit(&serialise(&rehearsal, o)?).map(|()| ExitCode::SUCCESS);
        }
        let view = crate::inspect::tui::rehearsal::RehearsalView::of(&rehearsal);
        if args.once || !std::io::stdout().is_terminal() {
            return emit(&crate::inspect::tui::rehearsal::text(&view)).map(|()| ExitCode::SUCCESS);
        }
        crate::inspect::tui::live::run_replay(crate::inspect::tui::App::rehearsal(view))
            .await
            .map_err(|e| CliError::Failed(format!("terminal: {e}")))?;
        Ok(ExitCode::SUCCESS)
    })
}

/// The what-if flags as a [`Change`] (bad syntax is a usage error).
pub(crate) fn change_from_args(args: &InspectArgs) -> Result<Change, CliError> {
    let usage = |e: crate::inspect::whatif::ChangeError| CliError::Usage(e.to_string());
    let mut change = Change::default();
    for p in &args.what_if {
        change.patches.push(whatif::parse_patch(p).map_err(usage)?);
    }
    for s in &args.set {
        change.sets.push(whatif::parse_set(s).map_err(usage)?);
    }
    if let Some(r) = &args.what_if_request {
        change.request = Some(whatif::parse_request(r).map_err(usage)?);
    }
    if change.is_empty() {
        return Err(CliError::Usage(
            "-f is for a what-if: give --what-if PATCH, --set PATH=VALUE or --what-if-request"
                .into(),
        ));
    }
    Ok(change)
}

/// `inspect vm/NAME --what-if …` (or `-f FILE --what-if …`): the decisions and the launcher pod
/// after the change; only reads.
fn run_what_if(global: &GlobalArgs, args: InspectArgs) -> Result<ExitCode, CliError> {
    if args.once && args.output.is_some() {
        return Err(CliError::Usage("--once and -o are exclusive".into()));
    }
    if args.kubevirt_version.is_some() {
        return Err(CliError::Usage(
            "--kubevirt-version compares the inspection's overhead, not a what-if's: give one"
                .into(),
        ));
    }
    let change = change_from_args(&args)?;
    let gathered = match &args.filename {
        Some(file) => {
            if !args.target.is_empty() {
                return Err(CliError::Usage("give vm/NAME or -f FILE, not both".into()));
            }
            let text = if file == "-" {
                let mut s = String::new();
                std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                    .map_err(|e| CliError::Failed(format!("reading stdin: {e}")))?;
                s
            } else {
                std::fs::read_to_string(file)
                    .map_err(|e| CliError::Failed(format!("reading {file}: {e}")))?
            };
            let namespace = global.namespace.clone().unwrap_or_else(|| "default".into());
            whatif::gathered_from_manifest(file, &text, &namespace, chrono::Utc::now())
                .map_err(CliError::Failed)?
        }
        None => {
            let Some(name) = parse_target(&args.target)? else {
                return Err(CliError::Usage(
                    "a what-if needs a VM: vm/NAME, or -f FILE".into(),
                ));
            };
            let opts = args.gather_options()?;
            let runtime = tokio::runtime::Runtime::new()
                .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
            runtime.block_on(async move {
                let (client, namespace) = connect_in_namespace(global).await?;
                whatif::gather_what_if(&client, &namespace, &name, &opts)
                    .await
                    .map_err(gather_failed)
            })?
        }
    };
    let result =
        whatif::what_if(&gathered, &change).map_err(|e| CliError::Failed(e.to_string()))?;
    match args.output {
        Some(o) => emit(&serialise(&result, o)?)?,
        None => emit(&whatif::render_text(&result))?,
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(args: &[&str]) -> Result<Option<String>, String> {
        parse_target(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn targets_follow_kubectl() {
        assert_eq!(t(&[]), Ok(None));
        assert_eq!(t(&["vm/a"]), Ok(Some("a".into())));
        assert_eq!(t(&["VirtualMachine/a"]), Ok(Some("a".into())));
        assert_eq!(t(&["virtualmachines.kubevirt.io/a"]), Ok(Some("a".into())));
        assert_eq!(t(&["vm", "a"]), Ok(Some("a".into())));
        assert!(t(&["a"]).unwrap_err().contains("TYPE/NAME"));
        assert!(t(&["pod/a"]).unwrap_err().contains("\"pod\""));
        assert!(t(&["vm/"]).is_err());
        assert!(t(&["vm/a/b"]).is_err());
    }
}
