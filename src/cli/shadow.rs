//! `shadow` (and `run-controller --shadow`): our controllers' decisions beside the leader's
//! writes, nothing written ([`crate::shadow`]); the live view on a terminal, a summary at the
//! end.

use super::{CliError, GlobalArgs};
use crate::kubevirt_version::{DecidedVersion, KubeVirtVersion, OBSERVED_VERSION};
use crate::shadow::{DEFAULT_LEADER_MANAGERS, ShadowConfig, ShadowReport, write_reproductions};
use clap::Args;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `-o` formats of `shadow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// "agreed on N of M decisions over D; K differ: …"
    Text,
    /// The report as JSON.
    Json,
}

/// Flags of `shadow`.
#[derive(Debug, Args)]
pub struct ShadowArgs {
    /// Compare for this long (`90s`, `10m`, `1h`; a bare number is seconds), then print the
    /// summary (default: until Ctrl-C).
    #[arg(long = "for", value_name = "DURATION", value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Every namespace (the default when -n is not given), kubectl's -A.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    pub all_namespaces: bool,
    /// Output format of the summary (default: the live view when stdout is a terminal, as
    /// `inspect` decides, then the text summary; else the text summary).
    #[arg(short = 'o', long, value_enum)]
    pub output: Option<Output>,
    /// Keep this local file up to date with the per-VM verdicts, for `inspect vm/NAME --shadow
    /// FILE` (docs/shadow.md "What inspect shows"); nothing is written to the cluster.
    #[arg(long, value_name = "FILE")]
    pub verdicts: Option<PathBuf>,
    /// Write each difference's reproduction (the VM, VMI and pods before the write, YAML) here.
    #[arg(long, value_name = "DIR")]
    pub reproductions: Option<PathBuf>,
    /// A field manager whose writes are the leader's (repeatable; default: virt-controller and
    /// virtctl-rs).
    #[arg(long = "leader-manager", value_name = "NAME")]
    pub leader_managers: Vec<String>,
    /// Render with this KubeVirt custom resource (YAML/JSON) instead of the cluster's.
    #[arg(long, value_name = "FILE", conflicts_with = "kubevirt_namespace")]
    pub kubevirt_cr: Option<PathBuf>,
    #[command(flatten)]
    pub kubevirt: super::KubeVirtNamespaceArg,
    /// The cluster has no virt-api (the leader adds the VMI finalizer virt-api would).
    #[arg(long)]
    pub without_virt_api: bool,
    /// Decide as this KubeVirt release (its controller rules and launcher pod; docs/run-controller.md
    /// "KubeVirt versions"); default: the KubeVirt CR's status.observedKubeVirtVersion, else
    /// v1.9.0.
    #[arg(long, value_name = "VERSION")]
    pub kubevirt_version: Option<crate::kubevirt_version::KubeVirtVersion>,
}

/// `90s`, `10m`, `1h`, `1h30m`, or a bare number of seconds.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    if let Ok(secs) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).map_err(|e| format!("{text:?}: {e}"));
    }
    let mut total = 0f64;
    let mut number = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() || c == '.' {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1.0,
            'm' => 60.0,
            'h' => 3600.0,
            _ => return Err(format!("{text:?}: unknown unit {c:?} (use s, m or h)")),
        };
        let n: f64 = number
            .parse()
            .map_err(|_| format!("{text:?}: a number must come before {c:?}"))?;
        total += n * unit;
        number.clear();
    }
    if !number.is_empty() {
        return Err(format!("{text:?}: {number} has no unit (s, m or h)"));
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("{text:?}: {e}"))
}

/// Run `shadow`.
pub(crate) fn run(global: &GlobalArgs, args: ShadowArgs) -> Result<ExitCode, CliError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| CliError::Failed(format!("cannot start the async runtime: {e}")))?;
    runtime.block_on(run_async(global, args))
}

/// The settings our decisions render with, and the release they decide as with where it was
/// read ([`own_settings`]).
async fn settings(
    client: &kube::Client,
    args: &ShadowArgs,
) -> Result<(crate::config::ClusterSettings, DecidedVersion), CliError> {
    let (mut settings, observed, file) = match &args.kubevirt_cr {
        Some(path) => {
            let (s, observed) = super::kubevirt_cr_file(path)?;
            (s, observed, Some(path))
        }
        None => {
            match crate::inspect::gather::read_kubevirt(client, &args.kubevirt.kubevirt_namespace)
                .await
            {
                Ok((s, observed)) => (s, observed, None),
                Err(missing) => {
                    eprintln!("{}: {}", missing.what, missing.reason);
                    (Default::default(), None, None)
                }
            }
        }
    };
    let mut decided = own_settings(&mut settings, args, observed.as_deref());
    if let (Some(path), true) = (file, decided.source == OBSERVED_VERSION) {
        decided.source = format!("{OBSERVED_VERSION} in {}", path.display());
    }
    Ok((settings, decided))
}

/// What the flags set over the KubeVirt CR's settings; the release is `--kubevirt-version`,
/// else the one the CR reports (`observed`), else v1.9.0: [`KubeVirtVersion::decide`], the
/// rule `explain-overhead` and `why` follow.
pub(super) fn own_settings(
    settings: &mut crate::config::ClusterSettings,
    args: &ShadowArgs,
    observed: Option<&str>,
) -> DecidedVersion {
    settings.without_virt_api |= args.without_virt_api;
    let decided = KubeVirtVersion::decide(args.kubevirt_version, observed);
    settings.kubevirt_version = decided.version;
    decided
}

async fn run_async(global: &GlobalArgs, args: ShadowArgs) -> Result<ExitCode, CliError> {
    let mut signals = super::signals::ShutdownSignals::listen()?;
    let (config, target) = super::client::load_config(global, "shadow").await?;
    let client = kube::Client::try_from(config)
        .map_err(|e| CliError::Failed(format!("cannot build a client: {e}")))?;
    let client = crate::shadow::read_only(client);
    let namespace = if args.all_namespaces {
        None
    } else {
        global.namespace.clone()
    };
    let (settings, decided) = settings(&client, &args).await?;
    let config = ShadowConfig {
        namespace: namespace.clone(),
        duration: args.duration,
        leader_managers: if args.leader_managers.is_empty() {
            DEFAULT_LEADER_MANAGERS.map(String::from).to_vec()
        } else {
            args.leader_managers.clone()
        },
        settings,
        kubevirt_version_source: Some(decided.source.clone()),
        verdicts_file: args.verdicts.clone(),
        perturbation: None,
    };
    let header = format!(
        "comparing the writes of {} on {} ({}) as {decided}, writing nothing",
        config.leader_managers.join(", "),
        target.describe(),
        namespace
            .as_deref()
            .map_or("all namespaces".into(), |n| format!("namespace {n}")),
    );
    let live = args.output.is_none() && std::io::stdout().is_terminal();
    if !live {
        eprintln!("shadow: {header}");
    }
    let handle = crate::shadow::spawn(client, config);
    let stop = handle.stop.clone();
    let mut done = handle.done;
    let run = if live {
        let view = crate::inspect::tui::shadow::LiveShadow {
            header,
            for_seconds: args.duration.map(|d| d.as_secs_f64()),
            ..Default::default()
        };
        crate::inspect::tui::live::run_shadow(view, handle.progress.clone())
            .await
            .map_err(|e| CliError::Failed(format!("terminal: {e}")))?;
        stop.cancel();
        done.await
    } else {
        tokio::select! {
            r = &mut done => r,
            _ = signals.recv() => {
                stop.cancel();
                done.await
            }
        }
    }
    .map_err(|e| CliError::Failed(format!("the shadow stopped: {e}")))?;
    let mut report = run.report;
    if let Some(dir) = &args.reproductions {
        write_reproductions(&mut report, &run.records, dir).map_err(CliError::Failed)?;
    }
    print(&report, args.output.unwrap_or(Output::Text))?;
    Ok(ExitCode::SUCCESS)
}

fn print(report: &ShadowReport, output: Output) -> Result<(), CliError> {
    match output {
        Output::Text => crate::cli::output::out(&report.text()),
        Output::Json => {
            let text = serde_json::to_string_pretty(report)
                .map_err(|e| CliError::Failed(format!("cannot print the report: {e}")))?;
            crate::say!("{text}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_kubectl_writes_them() {
        assert_eq!(parse_duration("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("90s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert!(parse_duration("10d").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("10m5").unwrap_err().contains("no unit"));
    }
}
