//! The lines `run-controller` prints as VMs move: one per change of a VM's printableStatus, its
//! VMI's phase, or its launcher pod.
//!
//! ```text
//! 21:40:01 default/vm-cirros  Starting  vmi Scheduling since 21:40:01Z  pod virt-launcher-vm-cirros-x7k2p (memory request 396Mi)
//! ```
//!
//! Read from the controller's informer caches and its typed [`DebugState`] (no extra API calls),
//! for the VMs whose objects or records changed since the last look
//! ([`crate::controller::common::record::ChangedKeys`]).

use crate::api::key::split_key;
use crate::api::{Phase, VirtualMachine, VirtualMachineInstance, labels};
use crate::controller::context::{Context, VmiEnding};
use crate::controller::debug_state::{DebugState, DebugStateSource, VM_CONTROLLER, VMI_CONTROLLER};
use crate::controller::vm::QUEUE_NAME as VM_QUEUE_NAME;
use crate::controller::vmi::QUEUE_NAME as VMI_QUEUE_NAME;
use crate::controller::vmi::launcher_cache::{CONTROLLER_UID, CachedPod};
use crate::runtime::informer::key_of;
use crate::runtime::lease::LeaderState;
use k8s_openapi::api::core::v1::Pod;
use kube::Resource as _;
use kube::runtime::reflector::ObjectRef;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What one progress line says about a VM.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VmProgress {
    /// `status.printableStatus` (empty until the controller wrote one).
    pub printable_status: String,
    /// VMI phase and the time it was entered, if a VMI exists.
    pub vmi_phase: Option<(String, Option<String>)>,
    /// Launcher pod name and its `compute` memory request, human-readable
    /// ([`crate::cli::output::human_memory`]: `4.36Gi`, not `4680843265`).
    pub pod: Option<(String, Option<String>)>,
    /// Why the VM is stuck, if the controller knows: the VM's `Failure` condition, the VMI's
    /// `Synchronized=False` or `PodScheduled=False` condition (reason: message), or else the last
    /// failed reconcile of the VM or VMI with its retry count (see [`reconcile_problem`]).
    pub problem: Option<String>,
    /// Requeues after failures of the key (VM and VMI queues), shown after the problem.
    pub retries: usize,
    /// How the VM's last VMI ended, while that is the news: the ended VMI is still there, or
    /// no newer VMI runs yet (see [`ending_note`]).
    pub ended: Option<String>,
}

impl VmProgress {
    /// What a new line is printed for: everything but the retry count of a failing reconcile
    /// (it grows with every backoff step; a line shows the count when anything else changes).
    fn unchanged_part(&self) -> VmProgress {
        VmProgress {
            retries: 0,
            ..self.clone()
        }
    }

    /// The line for `key` (without the clock prefix).
    pub fn line(&self, key: &str) -> String {
        let mut s = format!(
            "{key}  {}",
            if self.printable_status.is_empty() {
                "-"
            } else {
                &self.printable_status
            }
        );
        match &self.vmi_phase {
            Some((phase, Some(since))) => s.push_str(&format!("  vmi {phase} since {since}")),
            Some((phase, None)) => s.push_str(&format!(
                "  vmi {}",
                if phase.is_empty() {
                    "(no phase yet)"
                } else {
                    phase
                }
            )),
            None => s.push_str("  no vmi"),
        }
        if let Some((name, memory)) = &self.pod {
            s.push_str(&format!("  pod {name}"));
            if let Some(m) = memory {
                s.push_str(&format!(" (memory request {m})"));
            }
        }
        if let Some(e) = &self.ended {
            s.push_str(&format!("  {e}"));
        }
        if let Some(p) = &self.problem {
            s.push_str(&format!("  problem: {p}"));
            match self.retries {
                0 => {}
                1 => s.push_str(" (1 retry)"),
                n => s.push_str(&format!(" ({n} retries)")),
            }
        }
        s
    }
}

/// The last failed reconcile of `key` (the VM controller's first, then the VMI controller's) as
/// `vm reconcile failed: <error>`, from the controller's own state; `None` for a key whose last
/// reconciles succeeded.
///
/// An optimistic-concurrency conflict (HTTP 409 "the object has been modified", client-go's
/// `IsConflict`) is routine: two writers raced, the key is requeued and the next sync reads the
/// newer object. KubeVirt logs it at info level; it is a problem here only once it repeats
/// ([`PERSISTENT_CONFLICT_RETRIES`] requeues of the key).
pub(crate) fn reconcile_problem(state: &DebugState, key: &str) -> Option<String> {
    let retried = retries(state, key);
    [VM_CONTROLLER, VMI_CONTROLLER]
        .into_iter()
        .find_map(|controller| {
            let record = state.reconcile(controller, key)?;
            let error = record
                .error
                .as_deref()
                .filter(|_| record.result == "error")
                .filter(|e| !is_conflict(e) || retried >= PERSISTENT_CONFLICT_RETRIES)?;
            Some(format!("{controller} reconcile failed: {error}"))
        })
}

/// What a progress line says about how the VM's last VMI ended (`last vmi Failed (was Running):
/// its launcher pod vanished`), given the VMI in the cache now (`uid`, phase): shown while the
/// ended VMI is still cached, and while its replacement has not reached Running. Without it a
/// VM whose launcher pod is deleted goes from Running to Starting with no word why: the VMI
/// controller fails the VMI without a condition (lifecycle.go:480-485) and the VM controller
/// replaces it within a tick of the progress printer.
pub(crate) fn ending_note(ending: &VmiEnding, current: Option<(&str, Phase)>) -> Option<String> {
    let news = match current {
        None => true,
        Some((uid, _)) if uid == ending.uid => true,
        Some((_, phase)) => !matches!(phase, Phase::Running) && !phase.is_final(),
    };
    news.then(|| {
        format!(
            "last vmi {} (was {}): {}",
            ending.phase, ending.from_phase, ending.reason
        )
    })
}

/// How many requeues make a conflict worth reporting.
pub const PERSISTENT_CONFLICT_RETRIES: usize = 3;

/// The API server's text for a 409 Conflict on an update
/// (apimachinery `NewConflict`: "Operation cannot be fulfilled on …: the object has been
/// modified; please apply your changes to the latest version and try again").
fn is_conflict(error: &str) -> bool {
    error.contains("the object has been modified")
}

/// Requeues after failures of `key` in both work queues (the rate limiters' `NumRequeues`).
pub(crate) fn retries(state: &DebugState, key: &str) -> usize {
    state.retries(VM_QUEUE_NAME, key) + state.retries(VMI_QUEUE_NAME, key)
}

/// The `compute` container's memory request of a launcher pod, human-readable
/// (`4.36Gi` for `4680843265`, exact as `524Mi` when whole).
pub(crate) fn compute_memory_request(pod: &Pod) -> Option<String> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == "compute")?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("memory")
        .map(|q| crate::cli::output::human_memory(&q.0))
}

/// The progress of every cached VM.
pub fn collect(ctx: &Context, debug: &DebugStateSource) -> BTreeMap<String, VmProgress> {
    ctx.caches
        .vms
        .store()
        .state()
        .iter()
        .filter_map(|vm| {
            let key = key_of(vm.as_ref());
            let progress = progress_of(ctx, debug, &key)?.progress;
            Some((key, progress))
        })
        .collect()
}

/// A VM's progress and whether its key is failing (see [`progress_of`]).
struct KeyProgress {
    progress: VmProgress,
    /// A reconcile of the key failed last or the key waits in a queue's backoff: its retry
    /// count grows, and a conflict becomes a problem after some retries, without a change
    /// being marked (the queues requeue after the failed reconcile was recorded).
    failing: bool,
}

/// The progress of the VM at `key` (`namespace/name`), read from the caches (VM, VMI and the
/// VMI's newest launcher pod: a pod the VMI controls that carries its `kubevirt.io/created-by`
/// UID, found by the pod cache's controller index) and the controller's state for the key;
/// `None` when no VM is cached there.
fn progress_of(ctx: &Context, debug: &DebugStateSource, key: &str) -> Option<KeyProgress> {
    let (namespace, name) = split_key(key);
    let caches = &ctx.caches;
    let vm = caches
        .vms
        .store()
        .get(&ObjectRef::<VirtualMachine>::new(name).within(namespace))?;
    let vmi = caches
        .vmis
        .store()
        .get(&ObjectRef::<VirtualMachineInstance>::new(name).within(namespace));
    let vmi = vmi.as_deref();
    let vmi_phase = vmi.map(|v| {
        let phase = v.phase();
        let since = v
            .status
            .as_ref()
            .and_then(|s| s.phase_transition_timestamps.as_ref())
            .and_then(|t| t.iter().rev().find(|e| e.phase == phase))
            .map(|e| e.phase_transition_timestamp.to_rfc3339());
        (phase.as_str().to_string(), since)
    });
    let pod = vmi.and_then(|v| {
        let uid = v.metadata.uid.as_deref()?;
        let pod = newest_launcher_pod(ctx, uid)?;
        let memory = compute_memory_request(&pod);
        Some((pod.metadata.name.clone().unwrap_or_default(), memory))
    });
    let describe = |c: &crate::api::Condition| {
        format!(
            "{}: {}",
            c.reason.as_deref().unwrap_or(&c.type_),
            c.message.as_deref().unwrap_or("")
        )
    };
    let problem = vm
        .condition("Failure")
        .filter(|c| c.is_true())
        .map(describe)
        .or_else(|| {
            vmi.and_then(|v| {
                ["Synchronized", "PodScheduled"]
                    .into_iter()
                    .filter_map(|t| v.condition(t))
                    .find(|c| c.status == "False")
            })
            .map(describe)
        });
    let state = debug.for_key(key).ok();
    let problem = problem.or_else(|| reconcile_problem(state.as_ref()?, key));
    let requeues = state.as_ref().map_or(0, |s| retries(s, key));
    let ended = state
        .as_ref()
        .and_then(|s| s.vmi_ending(key))
        .and_then(|e| {
            ending_note(
                e,
                vmi.map(|v| (v.metadata.uid.as_deref().unwrap_or(""), v.phase())),
            )
        });
    let failing = requeues > 0
        || state.as_ref().is_some_and(|s| {
            [VM_CONTROLLER, VMI_CONTROLLER]
                .into_iter()
                .any(|c| s.reconcile(c, key).is_some_and(|r| r.result == "error"))
        });
    let retries = if problem.is_some() { requeues } else { 0 };
    let progress = VmProgress {
        printable_status: vm
            .status
            .as_ref()
            .and_then(|s| s.printable_status.clone())
            .unwrap_or_default(),
        vmi_phase,
        pod,
        problem,
        retries,
        ended,
    };
    Some(KeyProgress { progress, failing })
}

/// The newest launcher pod of the VMI with `uid`.
fn newest_launcher_pod(ctx: &Context, uid: &str) -> Option<Pod> {
    ctx.caches
        .pods
        .by_index(&CONTROLLER_UID, uid)
        .into_iter()
        .filter(|p| p.label(labels::CREATED_BY) == Some(uid))
        .max_by(|a, b| {
            let created = |p: &CachedPod| p.meta().creation_timestamp.as_ref().map(|t| t.0);
            (created(a), &a.meta().name).cmp(&(created(b), &b.meta().name))
        })
        .map(|p| p.to_pod())
}

/// Print a line whenever a VM's progress changes, until `cancel`. Starts once the caches have
/// synced (so a standby does not report VMs without their VMIs). After one pass over every
/// cached VM, each tick reads only the VMs whose objects or records changed
/// ([`crate::controller::common::record::ChangedKeys`]) and those still failing.
pub(crate) async fn print_progress(
    ctx: Context,
    debug: DebugStateSource,
    leader: impl Fn() -> LeaderState,
    cancel: CancellationToken,
) {
    let mut leadership = LeadershipLines::default();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    // Until the caches are synced there are no VM lines, but the Lease lines still come.
    let synced = ctx.caches.wait_synced();
    tokio::pin!(synced);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = &mut synced => break,
            _ = tick.tick() => {
                if let Some(line) = leadership.next(&leader()) {
                    crate::say!("{} {line}", chrono::Local::now().format("%H:%M:%S"));
                }
            }
        }
    }
    let changed = ctx.reconciles.changed_keys().clone();
    // Followed before the first pass: a change during it is read again on the next tick.
    changed.follow();
    let mut lines = ProgressLines::default();
    let mut first = true;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        // The Lease first: a VM line printed after "leading" in the same tick must not appear
        // to come from before it.
        let state = leader();
        let keys: BTreeSet<String> = if std::mem::take(&mut first) {
            changed.take();
            collect_keys(&ctx)
        } else {
            let mut keys = changed.take();
            keys.extend(lines.failing.iter().cloned());
            keys
        };
        let clock = chrono::Local::now().format("%H:%M:%S");
        if let Some(line) = leadership.next(&state) {
            crate::say!("{clock} {line}");
        }
        let now = keys
            .into_iter()
            .map(|key| {
                let p = progress_of(&ctx, &debug, &key);
                (key, p)
            })
            .collect();
        for line in lines.update(now) {
            crate::say!("{clock} {line}");
        }
    }
}

/// The key of every cached VM.
fn collect_keys(ctx: &Context) -> BTreeSet<String> {
    ctx.caches
        .vms
        .store()
        .state()
        .iter()
        .map(|vm| key_of(vm.as_ref()))
        .collect()
}

/// The last progress printed per VM, and the keys to read on every tick.
#[derive(Default)]
struct ProgressLines {
    last: BTreeMap<String, VmProgress>,
    failing: BTreeSet<String>,
}

impl ProgressLines {
    /// Take the progress of the keys read this tick (`None`: the VM is gone) and return the
    /// lines to print: the changed VMs in key order, then the deleted ones.
    fn update(&mut self, now: BTreeMap<String, Option<KeyProgress>>) -> Vec<String> {
        let mut changed = Vec::new();
        let mut deleted = Vec::new();
        for (key, p) in now {
            match p {
                Some(KeyProgress { progress, failing }) => {
                    if failing {
                        self.failing.insert(key.clone());
                    } else {
                        self.failing.remove(&key);
                    }
                    let same = self
                        .last
                        .get(&key)
                        .is_some_and(|l| l.unchanged_part() == progress.unchanged_part());
                    if !same {
                        changed.push(progress.line(&key));
                    }
                    self.last.insert(key, progress);
                }
                None => {
                    self.failing.remove(&key);
                    if self.last.remove(&key).is_some() {
                        deleted.push(format!("{key}  deleted"));
                    }
                }
            }
        }
        changed.extend(deleted);
        changed
    }
}

/// The leadership lines: one when this instance starts or stops leading, or the observed
/// holder changes.
#[derive(Debug, Default)]
pub struct LeadershipLines {
    was_leading: bool,
    last_holder: Option<String>,
}

impl LeadershipLines {
    /// The line `state` calls for, if any.
    pub(crate) fn next(&mut self, state: &LeaderState) -> Option<String> {
        let line = if state.leading && !self.was_leading {
            Some(format!(
                "leading: acquired the Lease {}; the controllers are running",
                state.lease
            ))
        } else if !state.leading && self.was_leading {
            Some(format!("stopped leading the Lease {}", state.lease))
        } else if !state.leading && state.holder != self.last_holder {
            state
                .holder
                .as_deref()
                .filter(|h| *h != state.identity)
                .map(|holder| {
                    format!(
                        "standby: the Lease {} is held by {holder}; not writing",
                        state.lease
                    )
                })
        } else {
            None
        };
        self.was_leading = state.leading;
        self.last_holder = state.holder.clone();
        line
    }
}

/// Print the leadership lines alone (`--quiet`: no VM lines).
pub(crate) async fn print_leadership(leader: impl Fn() -> LeaderState, cancel: CancellationToken) {
    let mut leadership = LeadershipLines::default();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Some(line) = leadership.next(&leader()) {
            crate::say!("{} {line}", chrono::Local::now().format("%H:%M:%S"));
        }
    }
}

/// Wait until every VM in `vms` (`namespace/name`) has printableStatus `Running`; on timeout,
/// an error listing the VMs that are not, with their status.
pub(crate) async fn wait_all_running(
    ctx: &Context,
    debug: &DebugStateSource,
    vms: &[String],
    timeout: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let waiting: Vec<String> = vms
            .iter()
            .filter_map(|k| match progress_of(ctx, debug, k) {
                Some(p) if p.progress.printable_status == "Running" => None,
                Some(p) => Some(p.progress.line(k)),
                None => Some(format!("{k}  not found in the cache")),
            })
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "timed out after {}s waiting for {} VM(s) to be Running:\n  {}",
                timeout.as_secs(),
                waiting.len(),
                waiting.join("\n  ")
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `/debug/state` of a leader with nothing queued or recorded.
    fn leading_state() -> DebugState {
        serde_json::from_value(serde_json::json!({
            "generatedAt": "2026-12-01T10:00:00Z", "identity": "me", "leading": true,
            "lease": {"lease": "kubevirt/virt-controller", "identity": "me", "phase": "leading",
                      "leading": true, "holder": "me", "observedAt": null, "leaseTransitions": null,
                      "acquireTime": null, "lastRenew": null, "lastError": null},
            "caches": {"synced": true}, "queues": {}, "expectations": [], "reconciles": {}
        }))
        .unwrap()
    }

    fn lease_state(leading: bool, holder: Option<&str>) -> LeaderState {
        LeaderState {
            lease: "kubevirt/virt-controller".into(),
            identity: "me".into(),
            leading,
            holder: holder.map(str::to_string),
            ..Default::default()
        }
    }

    #[test]
    fn leadership_lines_once_per_change() {
        let mut l = LeadershipLines::default();
        assert_eq!(l.next(&lease_state(false, None)), None);
        assert_eq!(
            l.next(&lease_state(false, Some("other"))).as_deref(),
            Some("standby: the Lease kubevirt/virt-controller is held by other; not writing")
        );
        assert_eq!(l.next(&lease_state(false, Some("other"))), None);
        assert_eq!(
            l.next(&lease_state(true, Some("me"))).as_deref(),
            Some(
                "leading: acquired the Lease kubevirt/virt-controller; the controllers are running"
            )
        );
        assert_eq!(l.next(&lease_state(true, Some("me"))), None);
        assert_eq!(
            l.next(&lease_state(false, Some("me"))).as_deref(),
            Some("stopped leading the Lease kubevirt/virt-controller")
        );
        // Our own name as holder after we stopped is not "held by" someone else.
        assert_eq!(l.next(&lease_state(false, Some("me"))), None);
    }
    use crate::controller::context::ReconcileRecord;
    use crate::runtime::queue::{KeyRetries, QueueSnapshot};

    fn failed(error: &str) -> ReconcileRecord {
        ReconcileRecord {
            at: "2026-12-01T10:00:00Z".parse().unwrap(),
            duration_seconds: 0.01,
            result: "error".into(),
            error: Some(error.into()),
            requeue_after_seconds: None,
            actions: Vec::new(),
        }
    }

    fn queue(name: &str, retries: &[(&str, usize)]) -> Option<QueueSnapshot> {
        Some(QueueSnapshot {
            name: name.into(),
            shutting_down: false,
            depth: 0,
            adds_total: 0,
            queued: Vec::new(),
            in_flight: Vec::new(),
            waiting: Vec::new(),
            retries: retries
                .iter()
                .map(|(key, n)| KeyRetries {
                    key: key.to_string(),
                    num_requeues: *n,
                })
                .collect(),
            rate_limiter_wait_seconds: 0.0,
        })
    }

    #[test]
    fn a_tick_prints_what_changed_then_what_was_deleted_and_keeps_failing_keys() {
        let status = |s: &str| VmProgress {
            printable_status: s.into(),
            ..Default::default()
        };
        let read = |entries: Vec<(&str, Option<(VmProgress, bool)>)>| {
            entries
                .into_iter()
                .map(|(k, p)| {
                    let p = p.map(|(progress, failing)| KeyProgress { progress, failing });
                    (k.to_string(), p)
                })
                .collect::<BTreeMap<_, _>>()
        };
        let mut lines = ProgressLines::default();
        let printed = lines.update(read(vec![
            ("ns/b", Some((status("Starting"), false))),
            ("ns/a", Some((status("Stopped"), true))),
        ]));
        assert_eq!(printed, ["ns/a  Stopped  no vmi", "ns/b  Starting  no vmi"]);
        assert_eq!(lines.failing, BTreeSet::from(["ns/a".to_string()]));
        // Read again unchanged: nothing; a retry count alone is no news either.
        let retried = VmProgress {
            retries: 3,
            ..status("Stopped")
        };
        assert!(
            lines
                .update(read(vec![
                    ("ns/a", Some((retried, true))),
                    ("ns/b", Some((status("Starting"), false))),
                ]))
                .is_empty()
        );
        // A deleted VM comes after the changed ones; an unknown key that is gone prints nothing.
        let printed = lines.update(read(vec![
            ("ns/a", None),
            ("ns/b", Some((status("Running"), false))),
            ("ns/c", None),
        ]));
        assert_eq!(printed, ["ns/b  Running  no vmi", "ns/a  deleted"]);
        assert!(lines.failing.is_empty());
        assert_eq!(lines.last.keys().collect::<Vec<_>>(), ["ns/b"]);
    }

    #[test]
    fn a_growing_retry_count_prints_no_new_line() {
        let at = |problem: &str| VmProgress {
            problem: Some(problem.into()),
            ..Default::default()
        };
        let (a, b) = (
            VmProgress {
                retries: 1,
                ..at("vm reconcile failed: boom")
            },
            VmProgress {
                retries: 7,
                ..at("vm reconcile failed: boom")
            },
        );
        assert_eq!(a.unchanged_part(), b.unchanged_part());
        assert_ne!(
            a.unchanged_part(),
            at("vm reconcile failed: other").unchanged_part()
        );
        assert_eq!(
            a.line("ns/a"),
            "ns/a  -  no vmi  problem: vm reconcile failed: boom (1 retry)"
        );
        assert_eq!(
            b.line("ns/a"),
            "ns/a  -  no vmi  problem: vm reconcile failed: boom (7 retries)"
        );
    }

    #[test]
    fn a_failing_reconcile_is_the_problem_with_its_retries() {
        let key = "demo/both";
        let mut state = leading_state();
        assert_eq!(reconcile_problem(&state, key), None);
        state.reconciles.insert(
            VMI_CONTROLLER.into(),
            BTreeMap::from([(key.to_string(), failed("pod create refused"))]),
        );
        assert_eq!(
            reconcile_problem(&state, key).as_deref(),
            Some("vmi reconcile failed: pod create refused")
        );
        state.reconciles.insert(
            VM_CONTROLLER.into(),
            BTreeMap::from([(
                key.to_string(),
                failed("Running and RunStrategy are mutually exclusive"),
            )]),
        );
        state
            .queues
            .insert(VM_QUEUE_NAME.into(), queue(VM_QUEUE_NAME, &[(key, 4)]));
        assert_eq!(
            reconcile_problem(&state, key).as_deref(),
            Some("vm reconcile failed: Running and RunStrategy are mutually exclusive")
        );
        assert_eq!(retries(&state, key), 4);
        // A later successful reconcile clears it.
        state
            .reconciles
            .get_mut(VM_CONTROLLER)
            .unwrap()
            .get_mut(key)
            .unwrap()
            .result = "ok".into();
        assert_eq!(
            reconcile_problem(&state, key).as_deref(),
            Some("vmi reconcile failed: pod create refused")
        );
    }

    #[test]
    fn a_routine_conflict_is_not_a_problem_until_it_repeats() {
        let key = "demo/vm";
        let mut state = leading_state();
        let conflict = "Operation cannot be fulfilled on virtualmachines.kubevirt.io \"vm\": \
                        the object has been modified; please apply your changes to the latest \
                        version and try again";
        state.reconciles.insert(
            VM_CONTROLLER.into(),
            BTreeMap::from([(key.to_string(), failed(conflict))]),
        );
        state
            .queues
            .insert(VM_QUEUE_NAME.into(), queue(VM_QUEUE_NAME, &[(key, 1)]));
        assert_eq!(
            reconcile_problem(&state, key),
            None,
            "one conflict is routine"
        );
        state.queues.insert(
            VM_QUEUE_NAME.into(),
            queue(VM_QUEUE_NAME, &[(key, PERSISTENT_CONFLICT_RETRIES)]),
        );
        assert_eq!(
            reconcile_problem(&state, key),
            Some(format!("vm reconcile failed: {conflict}")),
            "a conflict that keeps coming back is reported"
        );
    }

    #[test]
    fn a_vmi_that_lost_its_pod_says_so_until_its_replacement_runs() {
        let ending = VmiEnding {
            uid: "old".into(),
            phase: "Failed".into(),
            from_phase: "Running".into(),
            reason: crate::controller::vmi::decide::POD_VANISHED.into(),
            at: "2026-12-01T10:00:00Z".parse().unwrap(),
        };
        let note = "last vmi Failed (was Running): its launcher pod vanished";
        for current in [
            None,
            Some(("old", Phase::Failed)),
            Some(("new", Phase::Pending)),
            Some(("new", Phase::Scheduled)),
        ] {
            assert_eq!(
                ending_note(&ending, current).as_deref(),
                Some(note),
                "{current:?}"
            );
        }
        assert_eq!(ending_note(&ending, Some(("new", Phase::Running))), None);
        let line = VmProgress {
            printable_status: "Starting".into(),
            vmi_phase: Some(("Pending".into(), None)),
            ended: ending_note(&ending, Some(("new", Phase::Pending))),
            ..Default::default()
        }
        .line("ns/a");
        assert_eq!(line, format!("ns/a  Starting  vmi Pending  {note}"));
    }

    #[test]
    fn the_pod_memory_request_is_human_readable() {
        let pod = |memory: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "virt-launcher-a-x"},
                "spec": {"containers": [
                    {"name": "volumecontainerdisk", "resources": {"requests": {"memory": "1"}}},
                    {"name": "compute", "resources": {"requests": {"memory": memory}}}
                ]}
            }))
            .unwrap()
        };
        assert_eq!(
            compute_memory_request(&pod("4680843265")).as_deref(),
            Some("4.36Gi")
        );
        assert_eq!(
            compute_memory_request(&pod("549453824")).as_deref(),
            Some("524Mi")
        );
        assert_eq!(compute_memory_request(&pod("2Gi")).as_deref(), Some("2Gi"));
        assert_eq!(compute_memory_request(&Pod::default()), None);
    }

    #[test]
    fn lines() {
        let p = VmProgress {
            printable_status: "Starting".into(),
            vmi_phase: Some(("Scheduling".into(), Some("2026-11-29T21:40:01Z".into()))),
            pod: Some(("virt-launcher-a-x".into(), Some("396Mi".into()))),
            problem: None,
            retries: 0,
            ended: None,
        };
        assert_eq!(
            p.line("default/a"),
            "default/a  Starting  vmi Scheduling since 2026-11-29T21:40:01Z  pod virt-launcher-a-x (memory request 396Mi)"
        );
        assert_eq!(VmProgress::default().line("ns/b"), "ns/b  -  no vmi");
        let stuck = VmProgress {
            printable_status: "Stopped".into(),
            problem: Some("FailedCreate: instancetypes are not supported".into()),
            ..Default::default()
        };
        assert_eq!(
            stuck.line("ns/c"),
            "ns/c  Stopped  no vmi  problem: FailedCreate: instancetypes are not supported"
        );
    }
}
