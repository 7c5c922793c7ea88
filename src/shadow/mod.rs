//! Shadow mode: our VM and VMI controllers beside the controller that holds the Lease, with
//! warm caches and no way to write. Every write the leader makes to a VM, VMI, launcher pod,
//! ControllerRevision or DataVolume is compared with what our decision from the state just
//! before it would have written (docs/shadow.md).
//!
//! ```text
//! read-only client ─► watch.rs (list+watch per kind, one stream) ─► tracker.rs
//!                                                                    │ state before the write
//!                             mirror.rs (the caches; our decisions) ◄┘
//!                             predict.rs (decisions as writes) ─► compare.rs (normalise, diff)
//!                                                                    │
//!                                                 report.rs (counts, differences, reproductions)
//! ```
//!
//! Nothing here can write: the only client is [`read_only`] (GET requests only), the Lease is
//! never read for an election, and there is no executor: our decisions are data.

mod audit;
mod compare;
mod mirror;
mod predict;
mod report;
mod tracker;
mod verdicts;
mod watch;

pub(crate) use audit::{AuditOptions, replay_audit};
pub(crate) use compare::PathDiff;
pub use compare::Verdict;
pub(crate) use mirror::Mirror;
pub use predict::Kind;
pub(crate) use predict::Part;
pub use report::{Difference, ShadowReport, write_reproductions};
pub use tracker::{Perturbation, Record};
pub use verdicts::{LAST_PER_VM, LastVerdict, STALE_AFTER_SECONDS, ShadowVerdicts, VmVerdicts};
pub(crate) use watch::read_only;

use crate::config::ClusterSettings;
use futures::StreamExt;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// The field managers of the controllers the shadow compares with by default: KubeVirt's
/// virt-controller, and this project's `run-controller` (the API server names a manager after
/// the client's User-Agent up to its first `/`).
pub const DEFAULT_LEADER_MANAGERS: [&str; 2] = ["virt-controller", "virtctl-rs"];

/// Shadow settings.
#[derive(Debug, Clone)]
pub struct ShadowConfig {
    /// Watch one namespace, or all (`None`).
    pub namespace: Option<String>,
    /// Stop after this long (`None`: when cancelled).
    pub duration: Option<Duration>,
    /// The field managers whose writes are the leader's.
    pub leader_managers: Vec<String>,
    /// The settings our decisions render with (the KubeVirt CR's, as the leader's).
    pub settings: ClusterSettings,
    /// Where `settings.kubevirt_version` was read, said in the report (`None`: "the settings
    /// given").
    pub kubevirt_version_source: Option<String>,
    /// Publish the per-VM verdicts to this local file for `inspect --shadow FILE`
    /// ([`ShadowVerdicts`]), rewritten when a write has been classified.
    pub verdicts_file: Option<std::path::PathBuf>,
    /// Test only: change our decisions, to show a wrong one is reported ([`Perturbation`]).
    #[doc(hidden)]
    pub perturbation: Option<Perturbation>,
}

impl ShadowConfig {
    /// Every namespace, until cancelled, the default managers, KubeVirt's default settings.
    pub fn new() -> Self {
        ShadowConfig {
            namespace: None,
            duration: None,
            leader_managers: DEFAULT_LEADER_MANAGERS.map(String::from).to_vec(),
            settings: ClusterSettings::default(),
            kubevirt_version_source: None,
            verdicts_file: None,
            perturbation: None,
        }
    }
}

impl Default for ShadowConfig {
    fn default() -> Self {
        ShadowConfig::new()
    }
}

/// What a shadow run produced: the summary and the classified writes it counts.
#[derive(Debug, Clone)]
pub struct ShadowRun {
    /// The summary.
    pub report: ShadowReport,
    /// Every classified write (the reproductions are written from these).
    pub records: Vec<Record>,
}

/// What a running shadow has seen so far (for waiting on it).
#[derive(Debug, Clone, Default)]
pub struct Progress {
    /// Every watch has listed: the comparison runs.
    pub synced: bool,
    /// The last resourceVersion seen per `Kind namespace/name` (deleted: removed).
    pub resource_versions: std::collections::BTreeMap<String, String>,
    /// Writes classified so far.
    pub decisions: usize,
    /// Writes waiting for our next reconcile.
    pub held: usize,
    /// The summary so far (renewed about twice a second once the watches have listed): what
    /// the live view shows.
    pub report: Option<ShadowReport>,
}

/// A running shadow ([`spawn`]).
pub struct ShadowHandle {
    /// Cancel to stop the shadow (the report is then complete).
    pub stop: CancellationToken,
    /// What it has seen so far.
    pub progress: tokio::sync::watch::Receiver<Progress>,
    /// Its result.
    pub done: tokio::task::JoinHandle<ShadowRun>,
}

impl ShadowHandle {
    /// Stop and return the result.
    pub async fn finish(self) -> ShadowRun {
        self.stop.cancel();
        self.done
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }
}

/// Start [`run`] on a task.
pub fn spawn(client: kube::Client, config: ShadowConfig) -> ShadowHandle {
    let stop = CancellationToken::new();
    let (tx, rx) = tokio::sync::watch::channel(Progress::default());
    let done = tokio::spawn(run(client, config, stop.clone(), tx));
    ShadowHandle {
        stop,
        progress: rx,
        done,
    }
}

/// The `Kind namespace/name` a compared object's change is about, and the resourceVersion it
/// leaves (`None`: deleted), for [`Progress::resource_versions`].
fn seen_version(item: &watch::Item) -> Option<(String, Option<String>)> {
    let watch::Item::Changed(watch::Source::Compared(kind), key, obj) = item else {
        return None;
    };
    let rv = obj
        .as_ref()
        .and_then(|o| o.pointer("/metadata/resourceVersion"))
        .map(|rv| rv.as_str().unwrap_or("").to_string());
    Some((format!("{} {key}", kind.as_str()), rv))
}

/// Publish a fed change: the resourceVersion it left ([`seen_version`]) and the counts.
fn track_progress(
    progress: &tokio::sync::watch::Sender<Progress>,
    seen: Option<(String, Option<String>)>,
    t: &tracker::Tracker,
) {
    progress.send_modify(|p| {
        match seen {
            Some((id, Some(rv))) => {
                p.resource_versions.insert(id, rv);
            }
            Some((id, None)) => {
                p.resource_versions.remove(&id);
            }
            None => {}
        }
        p.decisions = t.records.len();
        p.held = t.held();
    });
}

/// What a running shadow publishes as it goes: the summary so far on the [`Progress`] channel
/// (for the live view) and, with a file, the per-VM verdicts for `inspect --shadow FILE`,
/// rewritten only when a write was classified since.
struct Publisher {
    file: Option<std::path::PathBuf>,
    since: chrono::DateTime<chrono::Utc>,
    /// How many classified writes the file holds and when it was written (`None`: not yet).
    published: Option<(usize, Instant)>,
    /// The last write of the file failed (said once in the log, tried again next time).
    failed: bool,
}

impl Publisher {
    fn new(file: Option<std::path::PathBuf>) -> Self {
        Publisher {
            file,
            since: chrono::Utc::now(),
            published: None,
            failed: false,
        }
    }

    /// Publish the state of `tracker` once the watches have listed (`synced`); before that,
    /// only the counts.
    fn publish(
        &mut self,
        tracker: &tracker::Tracker,
        progress: &tokio::sync::watch::Sender<Progress>,
        compared_for: f64,
        synced: bool,
    ) {
        let count = tracker.records.len();
        progress.send_modify(|p| {
            p.decisions = count;
            p.held = tracker.held();
            if synced {
                p.report = Some(ShadowReport::new(
                    &tracker.records,
                    compared_for,
                    tracker.errors.clone(),
                ));
            }
        });
        let Some(file) = self.file.as_ref().filter(|_| synced) else {
            return;
        };
        // Rewritten unchanged every HEARTBEAT, so a reader can tell a shadow that stopped.
        if self
            .published
            .is_some_and(|(n, at)| n == count && at.elapsed() < verdicts::HEARTBEAT)
        {
            return;
        }
        let doc = report::verdicts(&tracker.records, self.since, chrono::Utc::now());
        match doc.write(file) {
            Ok(()) => {
                self.published = Some((count, Instant::now()));
                self.failed = false;
            }
            Err(e) => {
                if !self.failed {
                    tracing::warn!(error = %e, "shadow: cannot publish the verdicts");
                }
                self.failed = true;
            }
        }
    }
}

/// Watch through a [`read_only`] copy of `client` and compare until `config.duration` passed
/// (then for at most [`tracker::LATER_WAIT`] more, only for the writes still held to agree
/// later) or `stop` is cancelled, publishing [`Progress`]. The comparison starts once every watch
/// has listed. A watch that fails is retried with back-off; its errors go to the log.
pub(crate) async fn run(
    client: kube::Client,
    config: ShadowConfig,
    stop: CancellationToken,
    progress: tokio::sync::watch::Sender<Progress>,
) -> ShadowRun {
    let client = read_only(client);
    let mut stream = watch::watch_all(&client, config.namespace.as_deref());
    let mirror = mirror::Mirror::new(config.settings.clone());
    let mut tracker = tracker::Tracker::new(mirror, config.leader_managers, config.perturbation);
    let mut pending: Vec<watch::Source> = watch::Source::ALL.to_vec();
    let started = Instant::now();
    let mut publisher = Publisher::new(config.verdicts_file.clone());
    let deadline = async {
        match config.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    // When `config.duration` has passed: how long the comparison took, and until when the
    // writes still held may wait for their `agree-later` (new writes are no longer compared).
    let mut closed: Option<(f64, Instant)> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    loop {
        let item = tokio::select! {
            _ = stop.cancelled() => break,
            _ = &mut deadline, if closed.is_none() => {
                let wait = tracker::LATER_WAIT.to_std().unwrap_or_default();
                closed = Some((started.elapsed().as_secs_f64(), Instant::now() + wait));
                tracker.closing = true;
                continue;
            }
            _ = tick.tick() => {
                tracker.settle_held(chrono::Utc::now());
                tracker.forget_history(chrono::Utc::now());
                if closed.is_some_and(|(_, until)| tracker.held() == 0 || Instant::now() >= until) {
                    break;
                }
                let compared_for = closed.map_or_else(|| started.elapsed().as_secs_f64(), |(d, _)| d);
                publisher.publish(&tracker, &progress, compared_for, pending.is_empty());
                continue;
            }
            item = stream.next() => match item { Some(i) => i, None => break },
        };
        let listed = match &item {
            watch::Item::Synced(s) => Some(*s),
            // A kind the cluster does not serve (no CDI: no DataVolumes) is not waited for, nor
            // StorageClasses a shadow bound to one namespace may not list (decided without).
            watch::Item::Failed(s, e) => {
                tracing::warn!(source = ?s, error = %e, "shadow: watch failed");
                let refused = *s == watch::Source::StorageClasses && e.contains("forbidden");
                (e.contains("404") || e.contains("not found") || refused).then_some(*s)
            }
            watch::Item::Changed(..) => None,
        };
        if let Some(s) = listed {
            pending.retain(|p| *p != s);
            if pending.is_empty() {
                progress.send_modify(|p| p.synced = true);
            }
        }
        let seen = seen_version(&item);
        watch::feed(&mut tracker, item, pending.is_empty(), chrono::Utc::now());
        track_progress(&progress, seen, &tracker);
    }
    tracker.leave_out_behind(chrono::Utc::now());
    tracker.finish();
    let compared_for = closed.map_or_else(|| started.elapsed().as_secs_f64(), |(d, _)| d);
    publisher.publish(&tracker, &progress, compared_for, pending.is_empty());
    let mut report = ShadowReport::new(
        &tracker.records,
        compared_for,
        std::mem::take(&mut tracker.errors),
    );
    report.decided_as = Some(crate::kubevirt_version::DecidedVersion {
        version: config.settings.kubevirt_version,
        source: config
            .kubevirt_version_source
            .unwrap_or_else(|| "the settings given".into()),
    });
    ShadowRun {
        report,
        records: tracker.records,
    }
}
