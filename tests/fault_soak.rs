//! The fault soak (issues 13 and 38): property-based. A seed draws a fault plan
//! ([`plan::Plan`]): a random subset of the fault families (late watch events, watch streams
//! dropped, tombstoned deletions, stale lists, dropped pod events, 409 and 5xx on writes) with
//! random parameters, the run-strategy changes per VM in each round (Always ↔ Halted ↔ Manual
//! with start/stop requests) and how far the fleet gets between rounds, writes to the Lease by
//! a client other than the controller (a `kubectl patch` of its `renewTime` and annotations),
//! and leader kills (the manager's task aborted without releasing the Lease, another instance
//! with another identity and user agent started). The plan is printed first; `FAULT_SOAK_SEED=N`
//! runs that seed alone. The fault draws are reproducible up to request ordering.
//!
//! Pass means, for every seed:
//! * **never two**: the audit log shows no launcher pod or VMI created for a VM while its
//!   previous one had not been deleted ([`invariants::one_live_per_vm`]), and an observer
//!   watching through a client the faults do not touch never sees two live launcher pods or
//!   VMIs for one VM at any instant;
//! * **convergence**: once the faults are removed (after the last round), every VM gets to the
//!   state its last step asks for (Running with a Running VMI and one live launcher pod, or
//!   Stopped with neither), with no VM behind left unchanged for twice the bound and within
//!   four times the bound in all (`stalled`: a busy machine slows the simulated nodes, a lost
//!   request stops a VM for good);
//! * **one leader at a time**: the instances' leadership terms (from their Lease writes in the
//!   audit log) never overlap and each instance wrote only inside its own terms
//!   ([`invariants::one_leader_at_a_time`]);
//! * **no finalizer left behind**: after convergence every VM is deleted, and every VM, VMI and
//!   launcher pod is gone within the bound (no VMI stuck Terminating);
//! * **no field lost**: every field of each running VM's template (`spec.template.spec`, and
//!   its labels) is in its VMI, including one the controller does not model;
//! * **no panic**, and the last instance still runs and leads.
//!
//! A *VM event* is one of: a run-strategy change, a start or stop request written (the
//! soak's user, as virtctl), a VMI created by the controller (a start), a VMI deleted (a stop).
//! The long run goes on in rounds until it has counted `FAULT_SOAK_EVENTS` of them.
//!
//! ```sh
//! cargo test --test integration fault_soak::      # CI: seeds 1..=20, 20 VMs, 3 rounds each
//! FAULT_SOAK_SEED=7 cargo test --test integration fault_soak::fault_soak_seeds -- --nocapture
//! FAULT_SOAK_VMS=200 FAULT_SOAK_EVENTS=10000 FAULT_SOAK_SEED=1 \
//!   cargo test --test integration fault_soak::fault_soak_long -- --ignored --nocapture
//! ```
//!
//! (`scripts/fault-soak.sh` runs the last one with those defaults and the machine's load.)
//!
//! `FAULT_SOAK_STRAGGLERS=1` prints the writes to the last VMs to converge. Figures from runs
//! are in docs/performance.md ("Property-based fault soak (issue 38)").

mod invariants;
mod plan;

use crate::common;

use common::env::{CONTROLLER_AGENT, Env, EnvConfig, printable};
use futures::{FutureExt, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use plan::{Length, Plan};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use virtctl_rs::api::{Phase, VirtualMachine, VirtualMachineInstance};
use virtctl_rs::flight::{FlightRecorder, read_recording};
use virtctl_rs::replay::replay;
use virtctl_rs::sim::{AuditQuery, FaultId};

/// What a VM's run strategy step asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Always,
    Halted,
    /// `runStrategy: Manual` and, unless a VMI runs, a Start request (virtctl start).
    ManualStart,
    /// `runStrategy: Manual` and, if a VMI runs, a Stop request for it (virtctl stop).
    ManualStop,
}

impl Step {
    const ALL: [Step; 4] = [
        Step::Always,
        Step::Halted,
        Step::ManualStart,
        Step::ManualStop,
    ];

    fn wants_running(self) -> bool {
        matches!(self, Step::Always | Step::ManualStart)
    }

    fn strategy(self) -> &'static str {
        match self {
            Step::Always => "Always",
            Step::Halted => "Halted",
            Step::ManualStart | Step::ManualStop => "Manual",
        }
    }
}

/// A VM of the soak: demo-vm's template, smaller, with labels and a field the controller does
/// not model (`domain.devices.autoattachSerialConsole`), which must reach the VMI untouched.
fn soak_vm(name: &str, namespace: &str) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "runStrategy": "Always",
            "template": {
                "metadata": {"labels": {"soak": name, "app": "fault-soak"}},
                "spec": {
                    "terminationGracePeriodSeconds": 30,
                    "domain": {
                        "memory": {"guest": "128Mi"},
                        "devices": {
                            "autoattachSerialConsole": false,
                            "disks": [{"name": "root", "disk": {"bus": "virtio"}}]
                        }
                    },
                    "volumes": [{"name": "root",
                                 "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}]
                }
            }
        }
    }))
    .expect("soak VM")
}

/// Paths under `expected` whose value `actual` lacks or differs in (objects: recursively;
/// arrays: element by element).
fn missing_fields(expected: &Value, actual: &Value, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, v) in e {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    Some(av) => missing_fields(v, av, &p, out),
                    None => out.push(p),
                }
            }
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => {
            for (i, (ev, av)) in e.iter().zip(a).enumerate() {
                missing_fields(ev, av, &format!("{path}[{i}]"), out);
            }
        }
        (e, a) if e == a => {}
        (e, a) => out.push(format!("{path}: {e} became {a}")),
    }
}

/// Live objects per VM as the observer last saw them.
#[derive(Default)]
struct Observed {
    /// VMI name (= VM name) → (uid, live).
    vmis: BTreeMap<String, (String, bool)>,
    /// Pod name → (VM name, live).
    pods: BTreeMap<String, (String, bool)>,
    /// Every instant at which a VM had two live VMIs or two live launcher pods.
    violations: Vec<String>,
    events: usize,
}

impl Observed {
    fn check(&mut self, vm: &str) {
        let pods = self
            .pods
            .iter()
            .filter(|(_, (owner, live))| owner == vm && *live)
            .map(|(name, _)| name.clone())
            .collect::<Vec<_>>();
        if pods.len() > 1 {
            self.violations
                .push(format!("{vm}: two live launcher pods {pods:?}"));
        }
    }
}

/// The VM a launcher pod belongs to: `virt-launcher-<vm>-<5 chars>`.
fn pod_vm(pod: &Pod) -> Option<String> {
    let name = pod.metadata.name.as_deref()?;
    let rest = name.strip_prefix("virt-launcher-")?;
    rest.rsplit_once('-').map(|(vm, _)| vm.to_string())
}

fn pod_live(pod: &Pod) -> bool {
    !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn vmi_live(vmi: &VirtualMachineInstance) -> bool {
    !vmi.phase().is_final()
}

/// Watch VMIs and launcher pods through `client` until the returned handle is aborted.
fn observe(
    client: kube::Client,
    namespace: &str,
    seen: Arc<Mutex<Observed>>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    let s = seen.clone();
    let vmi_task = tokio::spawn(async move {
        let mut stream = watcher(vmis, watcher::Config::default()).boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            let mut o = s.lock().unwrap_or_else(|e| e.into_inner());
            o.events += 1;
            match event {
                watcher::Event::Apply(v) | watcher::Event::InitApply(v) => {
                    let name = v.metadata.name.clone().unwrap_or_default();
                    let uid = v.metadata.uid.clone().unwrap_or_default();
                    if let Some((old_uid, true)) = o.vmis.get(&name)
                        && *old_uid != uid
                        && vmi_live(&v)
                    {
                        let msg = format!("{name}: two live VMIs {old_uid} and {uid}");
                        o.violations.push(msg);
                    }
                    o.vmis.insert(name, (uid, vmi_live(&v)));
                }
                watcher::Event::Delete(v) => {
                    o.vmis
                        .remove(v.metadata.name.as_deref().unwrap_or_default());
                }
                // A relist: deletions during the gap come as no event, so start afresh.
                watcher::Event::Init => o.vmis.clear(),
                watcher::Event::InitDone => {}
            }
        }
    });
    let s = seen;
    let pod_task = tokio::spawn(async move {
        let config = watcher::Config::default().labels("kubevirt.io=virt-launcher");
        let mut stream = watcher(pods, config).boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            let mut o = s.lock().unwrap_or_else(|e| e.into_inner());
            o.events += 1;
            match event {
                watcher::Event::Apply(p) | watcher::Event::InitApply(p) => {
                    if let Some(vm) = pod_vm(&p) {
                        let name = p.metadata.name.clone().unwrap_or_default();
                        o.pods.insert(name, (vm.clone(), pod_live(&p)));
                        o.check(&vm);
                    }
                }
                watcher::Event::Delete(p) => {
                    o.pods
                        .remove(p.metadata.name.as_deref().unwrap_or_default());
                }
                watcher::Event::Init => o.pods.clear(),
                watcher::Event::InitDone => {}
            }
        }
    });
    vec![vmi_task, pod_task]
}

/// Whether VM `name` is in the state `step` asks for: Running with a Running VMI and exactly
/// one live launcher pod, or Stopped with neither.
fn converged(
    step: Step,
    vm: Option<&VirtualMachine>,
    vmi: Option<&VirtualMachineInstance>,
    live_pods: usize,
) -> bool {
    let Some(vm) = vm else { return false };
    if step.wants_running() {
        printable(vm) == "Running"
            && vmi.is_some_and(|v| {
                v.phase() == Phase::Running && v.metadata.deletion_timestamp.is_none()
            })
            && live_pods == 1
    } else {
        printable(vm) == "Stopped" && vmi.is_none() && live_pods == 0
    }
}

/// How many VMs are in their step's state, from one list of each kind.
async fn count_converged(env: &Env, steps: &BTreeMap<String, Step>) -> Convergence {
    let lp = ListParams::default();
    let (Ok(vms), Ok(vmis), Ok(pods)) = (
        env.vms().list(&lp).await,
        env.vmis().list(&lp).await,
        env.pods()
            .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
            .await,
    ) else {
        return Convergence {
            converged: 0,
            behind: steps.keys().cloned().collect(),
            examples: vec!["list failed".into()],
        };
    };
    let vms: BTreeMap<String, VirtualMachine> = vms
        .items
        .into_iter()
        .map(|v| (v.metadata.name.clone().unwrap_or_default(), v))
        .collect();
    let vmis: BTreeMap<String, VirtualMachineInstance> = vmis
        .items
        .into_iter()
        .map(|v| (v.metadata.name.clone().unwrap_or_default(), v))
        .collect();
    let mut live: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods.items.iter().filter(|p| pod_live(p)) {
        if let Some(vm) = pod_vm(p) {
            *live.entry(vm).or_default() += 1;
        }
    }
    let mut c = Convergence {
        converged: 0,
        behind: Vec::new(),
        examples: Vec::new(),
    };
    for (name, step) in steps {
        let (vm, vmi) = (vms.get(name), vmis.get(name));
        let pods = live.get(name).copied().unwrap_or(0);
        if converged(*step, vm, vmi, pods) {
            c.converged += 1;
            continue;
        }
        c.behind.push(name.clone());
        if c.examples.len() < 10 {
            c.examples.push(format!(
                "{name}: wants {step:?}; VM {:?} runStrategy {:?} stateChangeRequests {:?}, \
                 VMI {:?}, {pods} live pod(s)",
                vm.map(printable),
                vm.and_then(|v| v.spec.run_strategy.clone()),
                vm.and_then(|v| v.status.as_ref())
                    .and_then(|s| s.state_change_requests.as_ref())
                    .map(|r| r
                        .iter()
                        .map(|r| (r.action.clone(), r.uid.clone()))
                        .collect::<Vec<_>>()),
                vmi.map(|v| (
                    v.metadata.uid.clone(),
                    v.phase(),
                    v.metadata.deletion_timestamp.is_some()
                ))
            ));
        }
    }
    c
}

/// One look at the fleet: how many VMs are in their step's state, which are not, and a few
/// of those described.
struct Convergence {
    converged: usize,
    behind: Vec<String>,
    examples: Vec<String>,
}

/// What a Manual step's request found and wrote, per VM.
#[derive(Debug, Clone, Default)]
struct Applied {
    /// A request was written (Start, or Stop for `live`).
    wrote: bool,
    /// The live VMI's UID when the step was applied.
    live: Option<String>,
    /// The VMI changed so shortly before the request that the controller's VMI cache, under the
    /// plan's watch delays, may not have had the change when it next wrote the VM status
    /// ([`vmi_changed_just_now`]).
    cache_race: bool,
}

/// How long after a VMI change the controller's VMI cache may still miss it: the plan's
/// watch delay (under 0.5 s) and a slow machine's processing, with margin.
const CACHE_LAG: chrono::TimeDelta = chrono::TimeDelta::seconds(3);

/// Whether `vmi` changed within [`CACHE_LAG`] before now in the way that decides KubeVirt's
/// trimming of the first state-change request, which its status update does on every sync
/// against its VMI cache (vm.go:451, 2485-2487, 2811-2853): created (a `Stop` naming it is
/// trimmed by a cache without it), or gone final or deleting (a `Start` is trimmed by a cache
/// that still shows it live). A request written then can be dropped by a faithful controller,
/// as by KubeVirt's; the soak's user then asks again, as a virtctl user would.
fn vmi_changed_just_now(vmi: &VirtualMachineInstance) -> bool {
    // Seconds since the epoch: the API's timestamps have whole seconds.
    let now = chrono::Utc::now().timestamp();
    let recent = |t: Option<i64>| t.is_some_and(|t| now - t <= CACHE_LAG.num_seconds());
    let meta = &vmi.metadata;
    let created = meta.creation_timestamp.as_ref().map(|t| t.0.as_second());
    let deleted = meta.deletion_timestamp.as_ref().map(|t| t.0.as_second());
    let last_phase = vmi
        .status
        .as_ref()
        .and_then(|s| s.phase_transition_timestamps.as_ref())
        .and_then(|ts| ts.last())
        .map(|t| t.phase_transition_timestamp.0.timestamp());
    recent(created) || recent(deleted) || (vmi.phase().is_final() && recent(last_phase))
}

/// The soak's user retrying virtctl, for the one race KubeVirt has by design: a controller
/// whose cache still holds the previous run strategy (or a request the step cleared) may create
/// or stop a VMI after the step's request was decided. A Manual "stop" VM then runs a VMI that
/// did not exist (or was not the one stopped) at the step, or a Manual "start" VM that had a
/// live VMI (so no Start was written) lost it. And a written request dropped while the
/// controller's VMI cache could not yet hold the VMI change just before it
/// ([`Applied::cache_race`]). Only those cases are retried: any other written request that was
/// dropped without effect is not, so a controller losing requests still fails the soak.
/// Returns how many requests were written again.
async fn reassert(
    env: &Env,
    steps: &BTreeMap<String, Step>,
    behind: &[String],
    applied: &Mutex<BTreeMap<String, Applied>>,
) -> usize {
    let mut again = 0;
    for name in behind {
        let Some(step) = steps.get(name).copied() else {
            continue;
        };
        if !matches!(step, Step::ManualStart | Step::ManualStop) {
            continue;
        }
        let pending = has_requests(env, name).await;
        if pending {
            continue;
        }
        let live = live_vmi(env, name)
            .await
            .and_then(|v| v.metadata.uid.clone());
        let before = applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .unwrap_or_default();
        let raced = before.wrote && before.cache_race
            || match step {
                Step::ManualStop => live.is_some() && live != before.live,
                _ => !before.wrote && live.is_none(),
            };
        if raced {
            let now = request_for_step(env, name, step).await;
            again += usize::from(now.wrote);
            applied
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.clone(), now);
        }
    }
    again
}

/// How the fleet converged after the last flip, from the polls of [`until_converged`]: the
/// converged count per poll and when each VM was last seen out of its step's state.
struct Timeline {
    start: Instant,
    polls: Vec<(Duration, usize)>,
    last_behind: BTreeMap<String, Duration>,
}

impl Timeline {
    fn new(start: Instant) -> Self {
        Timeline {
            start,
            polls: Vec::new(),
            last_behind: BTreeMap::new(),
        }
    }

    fn record(&mut self, c: &Convergence) {
        let at = self.start.elapsed();
        self.polls.push((at, c.converged));
        for name in &c.behind {
            self.last_behind.insert(name.clone(), at);
        }
    }

    /// When the converged count first reached each share of `vms`, e.g.
    /// `50 %: 12.3 s`.
    fn shares(&self, vms: usize) -> Vec<String> {
        [50, 90, 99, 100]
            .into_iter()
            .filter_map(|pct| {
                let want = (vms * pct).div_ceil(100);
                let (at, _) = self.polls.iter().find(|(_, n)| *n >= want)?;
                Some(format!("{pct} %: {:.1} s", at.as_secs_f64()))
            })
            .collect()
    }

    /// The `n` VMs that were out of their state last, latest first.
    fn stragglers(&self, n: usize) -> Vec<(String, Duration)> {
        let mut all: Vec<_> = self
            .last_behind
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        all.sort_by_key(|(_, at)| std::cmp::Reverse(*at));
        all.truncate(n);
        all
    }
}

/// Wait until at least `n` VMs are in their step's state; `false` after `bound`. Polled every
/// 250 ms, not every 20 ms: each poll lists every VM, VMI and launcher pod.
///
/// With `applied`, every 5 s the VMs still behind get [`reassert`]ed; the count of requests
/// written again is added to `reasserted`. With `timeline`, every poll is recorded in it.
async fn until_converged(
    env: &Env,
    steps: &BTreeMap<String, Step>,
    n: usize,
    (bound, wait): (Duration, Wait),
    applied: Option<(&Mutex<BTreeMap<String, Applied>>, &AtomicUsize)>,
    mut timeline: Option<&mut Timeline>,
) -> bool {
    let start = tokio::time::Instant::now();
    let mut last_change = (start, String::new());
    let mut polls = 0u32;
    loop {
        let c = count_converged(env, steps).await;
        if let Some(t) = timeline.as_deref_mut() {
            t.record(&c);
        }
        if c.converged >= n {
            return true;
        }
        let now = tokio::time::Instant::now();
        let seen = format!("{:?} {:?}", c.behind, c.examples);
        if seen != last_change.1 {
            last_change = (now, seen);
        }
        let over = match wait {
            Wait::Fixed => now >= start + bound,
            Wait::WhileMoving => stalled(start, last_change.0, now, bound),
        };
        if over {
            return false;
        }
        polls += 1;
        if let Some((applied, reasserted)) = applied
            && polls.is_multiple_of(20)
        {
            let again = reassert(env, steps, &c.behind, applied).await;
            reasserted.fetch_add(again, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// How [`until_converged`] bounds its wait.
#[derive(Clone, Copy)]
enum Wait {
    /// At most the bound (between rounds: the fleet need not get there).
    Fixed,
    /// Until [`stalled`].
    WhileMoving,
}

/// Whether a wait for convergence has failed: nothing changed in the VMs behind for twice
/// `bound` (a lost request or a stuck object stays as it is), or four times `bound` went by.
/// A slow machine stretches the wait while the VMs still move (a scheduled VMI goes Running, a
/// pod goes away): at load 14-16 on 2 cores, with four seeds in one process, the embedded API
/// server answered about 6 requests a second, a launcher pod waited 32 s to be bound and 84 s
/// more to run.
fn stalled(
    start: tokio::time::Instant,
    last_change: tokio::time::Instant,
    now: tokio::time::Instant,
    bound: Duration,
) -> bool {
    now >= last_change + 2 * bound || now >= start + 4 * bound
}

/// Whether VM `name` has unconsumed `status.stateChangeRequests`.
async fn has_requests(env: &Env, name: &str) -> bool {
    env.vm(name)
        .await
        .and_then(|vm| vm.status)
        .and_then(|s| s.state_change_requests)
        .is_some_and(|r| !r.is_empty())
}

/// VM `name`'s VMI if it is live: not final and not being deleted.
async fn live_vmi(env: &Env, name: &str) -> Option<VirtualMachineInstance> {
    env.vmi(name)
        .await
        .filter(|v| !v.phase().is_final() && v.metadata.deletion_timestamp.is_none())
}

/// Apply one step to VM `name` as a user with virtctl would, except that a step first clears
/// the requests an earlier step left unconsumed.
///
/// Why the clearing: KubeVirt acts on a leftover request whatever the run strategy became, and
/// virt-api refuses the request that would cancel it. A `Start` still queued from a Manual
/// step makes a later `Halted` VM rewrite itself to `Always` (vm.go:1115-1131) and a later
/// Manual "stop" VM start anyway; a queued `Stop` stops a later Manual "start" VM. Those are
/// KubeVirt's rules, not lost writes, so the soak's user clears what it no longer wants before
/// it changes the run strategy (in that order, so that no cache can hold the new strategy with
/// the old requests).
async fn apply_step(env: &Env, name: &str, step: Step) -> Applied {
    let pending = has_requests(env, name).await;
    if pending {
        env.set_state_change_requests(name, json!([])).await;
    }
    let vms = env.vms();
    vms.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"runStrategy": step.strategy()}})),
    )
    .await
    .expect("patch runStrategy");
    request_for_step(env, name, step).await
}

/// The virtctl-like request of a Manual step, if it applies now: start only when nothing runs,
/// stop naming the running VMI (virt-api's start/stop subresources, lifecycle.go:43-248, are
/// not served by the embedded cluster; they write these requests).
async fn request_for_step(env: &Env, name: &str, step: Step) -> Applied {
    let any = env.vmi(name).await;
    let cache_race = any.as_ref().is_some_and(vmi_changed_just_now);
    let vmi = any.filter(|v| !v.phase().is_final() && v.metadata.deletion_timestamp.is_none());
    let requests = match (step, &vmi) {
        (Step::ManualStart, None) => Some(json!([{"action": "Start"}])),
        (Step::ManualStop, Some(v)) => {
            Some(json!([{"action": "Stop", "uid": v.metadata.uid.clone()}]))
        }
        _ => None,
    };
    let wrote = requests.is_some();
    if let Some(requests) = requests {
        env.set_state_change_requests(name, requests).await;
    }
    Applied {
        wrote,
        live: vmi.and_then(|v| v.metadata.uid.clone()),
        cache_race,
    }
}

/// The figures of one run.
#[derive(Debug, Default)]
struct Figures {
    seed: u64,
    vms: usize,
    rounds: usize,
    /// Run-strategy changes.
    changes: usize,
    /// Start and stop requests written (also again, by [`reassert`]).
    requests: usize,
    /// VMIs the controllers created, VMIs deleted (before the final deletion of the VMs).
    vmi_creates: usize,
    vmi_deletes: usize,
    kills: usize,
    lease_writes: usize,
    /// How often each family's rules fired ([`Faults::fired`]).
    fired: BTreeMap<&'static str, u64>,
    /// From the first VM's create until the faults were removed.
    fault_phase: Duration,
    converged_after_faults: Duration,
    /// When 50/90/99/100 % of the VMs were in their state after the faults were removed.
    shares: Vec<String>,
    /// From the deletion of every VM until all VMs, VMIs and launcher pods were gone.
    deleted_within: Duration,
    total: Duration,
    controller_writes: usize,
    failed_writes: usize,
    /// The most frequent failed writes, by request and code.
    failed_by_request: Vec<(String, usize)>,
    /// VMI creates refused as AlreadyExists (from a stale cache; the server kept it to one).
    vmi_already_exists: usize,
    leadership_terms: usize,
    observer_events: usize,
    reasserted: usize,
}

impl Figures {
    /// VM events (module docs).
    fn events(&self) -> usize {
        self.changes + self.requests + self.vmi_creates + self.vmi_deletes
    }
}

impl std::fmt::Display for Figures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {}: {} VMs, {} rounds, {} VM events ({} run-strategy changes, {} requests, {} \
             VMI creates, {} VMI deletes), {} leader kills, {} foreign Lease writes; faults \
             fired {:?} over {:.1} s; converged {:.1} s after the faults were removed ({}); all \
             deleted within {:.1} s; {:.1} s in all; {} controller writes, {} failed ({:?}); {} VMI \
             creates refused AlreadyExists; {} leadership terms; observer saw {} events; {} \
             requests written again",
            self.seed,
            self.vms,
            self.rounds,
            self.events(),
            self.changes,
            self.requests,
            self.vmi_creates,
            self.vmi_deletes,
            self.kills,
            self.lease_writes,
            self.fired,
            self.fault_phase.as_secs_f64(),
            self.converged_after_faults.as_secs_f64(),
            self.shares.join(", "),
            self.deleted_within.as_secs_f64(),
            self.total.as_secs_f64(),
            self.controller_writes,
            self.failed_writes,
            self.failed_by_request,
            self.vmi_already_exists,
            self.leadership_terms,
            self.observer_events,
            self.reasserted
        )
    }
}

/// Panics on any thread of the test binary since [`count_panics`] (other tests' too: the
/// soak's callers compare it before and after).
static PANICS: AtomicUsize = AtomicUsize::new(0);

/// Count every panic in [`PANICS`] (installed once, before the default hook).
fn count_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
    });
}

/// User agent of the `generation`th controller instance (the first is 0). All contain
/// [`CONTROLLER_AGENT`], which the faults are scoped to; the trailing dot keeps one from
/// containing another (`gen1.` is not in `gen11.`).
fn agent(generation: usize) -> String {
    format!("{CONTROLLER_AGENT}-gen{generation}.")
}
const FIRST_AGENT: &str = "virt-controller-gen0.";

/// User agent of the client that writes the Lease besides the controllers.
const FOREIGN_AGENT: &str = "kubectl-fault-soak";

/// The cluster with the plan's faults on and the first instance leading; returns the rules'
/// family names and handles.
async fn start_env(
    plan: &Plan,
    bound: Duration,
    recorder: &FlightRecorder,
) -> (Env, Vec<(&'static str, FaultId)>) {
    assert_eq!(FIRST_AGENT, agent(0));
    let mut config = EnvConfig::new("fault-soak-gen0");
    // Every instance records (the restarted ones share the recorder): a VM that does not
    // converge is explained by its replayed reconciles (`recorded_steps`).
    config.record = Some(recorder.clone());
    config.controller_agent = FIRST_AGENT;
    config.namespace = "soak".into();
    config.cluster.nodes = (plan.vms / 90 + 2).max(2);
    config.deadline = bound;
    // Four soaks share the test's two runtime threads, on a machine that may be busy: with the
    // end-to-end tests' 2 s Lease, a renewal starved for a second lost it (the manager exits,
    // as KubeVirt's does). KubeVirt's ratios (15 s / 10 s), shorter, so a kill costs 6 s.
    config.lease.lease_duration = Duration::from_secs(6);
    config.lease.renew_deadline = Duration::from_secs(4);
    config.lease.retry_period = Duration::from_millis(500);
    // A dropped pod DELETED is made good when the pod expectation expires (issue 38 item 2).
    config.expectations_timeout = Duration::from_secs(5);
    let mut rules = Vec::new();
    let env = Env::start_with(config, |c| rules = plan.install(c.api().faults())).await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": env.namespace}}))
                .expect("namespace"),
        )
        .await;
    (env, rules)
}

/// A `kubectl patch` of the election Lease by another client: its `renewTime` and an
/// annotation, the holder untouched. The leader's next renewal then meets a newer
/// resourceVersion; a candidate sees the record change and waits a full Lease duration more.
async fn foreign_lease_write(env: &Env, round: usize) {
    let client = env
        .cluster()
        .api()
        .client_with_agent(FOREIGN_AGENT)
        .await
        .expect("foreign client");
    let leases: Api<Lease> = Api::namespaced(client, invariants::LEASE.0);
    let now = chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string();
    leases
        .patch(
            invariants::LEASE.1,
            &PatchParams::default(),
            &Patch::Merge(json!({
                "metadata": {"annotations": {"fault-soak/round": round.to_string()}},
                "spec": {"renewTime": now}
            })),
        )
        .await
        .expect("foreign Lease write");
}

/// What the rounds leave behind for the checks.
struct Rounds {
    steps: BTreeMap<String, Step>,
    applied: Mutex<BTreeMap<String, Applied>>,
    /// User agents of every controller instance started, in order.
    agents: Vec<String>,
}

/// Apply the step of each VM in `changed`; returns how many requests were written.
async fn apply_steps(env: &Env, rounds: &Rounds, changed: &[String]) -> usize {
    let wrote = AtomicUsize::new(0);
    futures::stream::iter(changed)
        .for_each_concurrent(16, |name| {
            let (wrote, rounds) = (&wrote, rounds);
            async move {
                let a = apply_step(env, name, rounds.steps[name]).await;
                wrote.fetch_add(usize::from(a.wrote), Ordering::SeqCst);
                rounds
                    .applied
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.clone(), a);
            }
        })
        .await;
    wrote.into_inner()
}

/// VMI creates by the controllers and VMI deletes so far.
fn vmi_lifecycles_so_far(env: &Env) -> (usize, usize) {
    let entries = env.cluster().api().audit().query(&AuditQuery {
        resource: Some("virtualmachineinstances".into()),
        subresource: Some(String::new()),
        verbs: Some(vec!["create".into(), "delete".into()]),
        success_only: true,
        ..Default::default()
    });
    invariants::vmi_lifecycles(&entries)
}

/// The plan's rounds: run-strategy changes, foreign Lease writes and leader kills, each round
/// waiting (at most `round_wait`, not asserted) until the plan's share of VMs is in its state.
async fn run_rounds(
    env: &mut Env,
    plan: &mut Plan,
    round_wait: Duration,
    f: &mut Figures,
) -> Rounds {
    let mut rounds = Rounds {
        steps: (0..plan.vms)
            .map(|i| (format!("soak-{i:04}"), Step::Always))
            .collect(),
        applied: Mutex::default(),
        agents: vec![agent(0)],
    };
    loop {
        let done = match plan.length {
            Length::Rounds(n) => f.rounds >= n,
            Length::Events(n) => f.events() >= n,
        };
        if done {
            return rounds;
        }
        let (changed, share) = plan.next_round(&mut rounds.steps);
        f.changes += changed.len();
        f.requests += apply_steps(env, &rounds, &changed).await;
        if plan.lease_writes.contains(&f.rounds) {
            foreign_lease_write(env, f.rounds).await;
            f.lease_writes += 1;
        }
        if plan.kills.contains(&f.rounds) {
            env.kill_manager().await;
            let generation = rounds.agents.len();
            rounds.agents.push(agent(generation));
            env.start_manager_as(
                &rounds.agents[generation],
                &format!("fault-soak-gen{generation}"),
            )
            .await;
            f.kills += 1;
        }
        let want = (share * plan.vms as f64).ceil() as usize;
        until_converged(
            env,
            &rounds.steps,
            want,
            (round_wait, Wait::Fixed),
            None,
            None,
        )
        .await;
        (f.vmi_creates, f.vmi_deletes) = vmi_lifecycles_so_far(env);
        f.rounds += 1;
    }
}

/// Paths of running VMs' template fields (and labels) their VMI lacks or changed.
async fn lost_template_fields(env: &Env, steps: &BTreeMap<String, Step>) -> Vec<String> {
    let mut lost = Vec::new();
    for name in steps
        .iter()
        .filter(|(_, s)| s.wants_running())
        .map(|(n, _)| n)
    {
        let (Some(vm), Some(vmi)) = (env.vm(name).await, env.vmi(name).await) else {
            lost.push(format!("{name}: VM or VMI gone"));
            continue;
        };
        let template = vm.spec.template.as_ref().expect("template");
        let expected = serde_json::to_value(&template.spec).expect("template spec");
        let actual = serde_json::to_value(&vmi.spec).expect("VMI spec");
        missing_fields(&expected, &actual, &format!("{name} spec"), &mut lost);
        let labels = serde_json::to_value(
            template
                .metadata
                .as_ref()
                .and_then(|m| m.maps.labels.clone()),
        )
        .expect("labels");
        let vmi_labels = serde_json::to_value(&vmi.metadata.labels).expect("labels");
        missing_fields(&labels, &vmi_labels, &format!("{name} labels"), &mut lost);
    }
    lost
}

/// Delete every VM and wait until no VM, VMI or launcher pod is left: a finalizer left behind
/// (the VM's, the VMI's) or a VMI stuck Terminating keeps one. Returns how long it took.
async fn delete_all(env: &Env, bound: Duration) -> Duration {
    let started = Instant::now();
    let names: Vec<String> = env
        .vms()
        .list(&ListParams::default())
        .await
        .expect("list VMs")
        .items
        .into_iter()
        .filter_map(|v| v.metadata.name.clone())
        .collect();
    for name in &names {
        env.vms()
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete VM");
    }
    env.wait_for_within(
        "every VM, VMI and launcher pod gone after deleting the VMs",
        bound,
        || async {
            let lp = ListParams::default();
            let pods = ListParams::default().labels("kubevirt.io=virt-launcher");
            let (vms, vmis, pods) = (
                env.vms().list(&lp).await.ok()?,
                env.vmis().list(&lp).await.ok()?,
                env.pods().list(&pods).await.ok()?,
            );
            (vms.items.is_empty() && vmis.items.is_empty() && pods.items.is_empty()).then_some(())
        },
    )
    .await;
    started.elapsed()
}

/// The invariants of the module docs over the audit log and the observer; panics with every
/// violation. Fills the audit's figures.
fn check_audit(env: &Env, rounds: &Rounds, f: &mut Figures) {
    let entries = env.cluster().api().audit().entries();
    let (two_live, already_exists) = invariants::one_live_per_vm(&entries);
    assert!(
        two_live.is_empty(),
        "two live objects for one VM (audit):\n{}",
        two_live.join("\n")
    );
    f.vmi_already_exists = already_exists;
    f.leadership_terms = invariants::one_leader_at_a_time(&entries, &rounds.agents).len();
    let writes: Vec<_> = entries
        .iter()
        .filter(|e| {
            e.is_write() && e.resource != "leases" && e.user_agent.contains(CONTROLLER_AGENT)
        })
        .collect();
    f.controller_writes = writes.len();
    f.failed_writes = writes.iter().filter(|e| e.code >= 400).count();
    f.failed_by_request = invariants::failed_writes(&entries);
    f.failed_by_request.truncate(6);
}

/// After a convergence timeout: the VMs behind and the shared rate limiter's reservation.
async fn not_converged(env: &mut Env, rounds: &Rounds, bound: Duration, plan: &str) -> String {
    let ended = match env.run.take_if(|r| r.is_finished()) {
        Some(run) => format!("{:?}", run.await),
        None => "no".into(),
    };
    let lease_writes: Vec<String> = env
        .cluster()
        .api()
        .audit()
        .query(&AuditQuery {
            resource: Some("leases".into()),
            writes_only: true,
            ..Default::default()
        })
        .iter()
        .rev()
        .take(8)
        .map(|e| {
            format!(
                "#{} {} {} {} {} {:?}",
                e.seq, e.time, e.user_agent, e.verb, e.code, e.lease
            )
        })
        .collect();
    let c = count_converged(env, &rounds.steps).await;
    // A key still parked behind the shared token bucket is the rate limit at work, not a lost
    // request: say how far ahead it is reserved.
    let ctx = env.manager.context();
    let reserved: Vec<String> = [ctx.vm_queue.get(), ctx.vmi_queue.get()]
        .into_iter()
        .flatten()
        .map(|q| {
            let s = q.snapshot();
            format!("{} {:.1} s", s.name, s.rate_limiter_wait_seconds)
        })
        .collect();
    // The writes to the first stuck VM, its VMI and its launcher pods, oldest first: who
    // wrote what, and what the server answered.
    let stuck = c
        .examples
        .first()
        .and_then(|e| e.split_once(':'))
        .map(|(name, _)| name.to_string())
        .unwrap_or_default();
    let pod_prefix = format!("virt-launcher-{stuck}-");
    let all_writes = env.cluster().api().audit().query(&AuditQuery {
        writes_only: true,
        namespace: Some(env.namespace.clone()),
        ..Default::default()
    });
    let stuck_writes: Vec<String> = all_writes
        .iter()
        .filter(|e| !stuck.is_empty() && (e.name == stuck || e.name.starts_with(&pod_prefix)))
        .map(|e| {
            format!(
                "#{} {} {} {} {}/{} {} {}",
                e.seq, e.time, e.user_agent, e.verb, e.resource, e.subresource, e.name, e.code
            )
        })
        .collect();
    let from = stuck_writes.len().saturating_sub(30);
    format!(
        "{plan}\n{}/{} VMs converged after the faults were removed (none behind changed for \
         twice {bound:?}, or 4 × that went by; shared rate limit reserved ahead: {}; manager task \
         ended: {ended}; leader state: {:?}; last Lease writes: {lease_writes:#?}); for \
         example:\n{}\nlast writes to {stuck}, its VMI and pods:\n{}",
        c.converged,
        rounds.steps.len(),
        reserved.join(", "),
        env.manager.leader_state(),
        c.examples.join("\n"),
        stuck_writes[from..].join("\n")
    )
}

/// The last reconciles of the first VM [`not_converged`] names, replayed from the flight
/// recording: what each controller saw (the versions it read), decided and why, and what its
/// writes were answered. This is what tells a lost request from a stale cache.
fn recorded_steps(dir: &std::path::Path, not_converged: &str) -> String {
    let Some(stuck) = not_converged
        .lines()
        .find_map(|l| l.split_once(": wants ").map(|(name, _)| name.to_string()))
    else {
        return "no VM named in the report".into();
    };
    let lines = match read_recording(dir) {
        Ok(l) => l,
        Err(e) => return format!("the recording cannot be read: {e}"),
    };
    let report = replay(&lines);
    let key = format!("soak/{stuck}");
    let Some(vm) = report.vms.iter().find(|v| v.key == key) else {
        return format!("no reconcile of {key} recorded");
    };
    let from = vm.steps.len().saturating_sub(12);
    let steps: Vec<String> = vm.steps[from..]
        .iter()
        .map(|s| {
            format!(
                "#{} {} {} {:?}\n  inputs: {}\n  why: {}\n  recorded: {}\n  writes: {}\n  \
                 answers: {}",
                s.seq,
                s.at.format("%H:%M:%S%.3f"),
                s.controller,
                s.verdict,
                s.inputs.join("; "),
                s.why.join(" | "),
                s.recorded.join(", "),
                s.writes.join("; "),
                s.answers.join("; ")
            )
        })
        .collect();
    format!(
        "the last {} of {} recorded reconciles of {key}:\n{}",
        steps.len(),
        vm.steps.len(),
        steps.join("\n")
    )
}

/// One soak run of `plan` (module docs): the VMs are created under the plan's faults, go
/// through its rounds, must converge within `bound` once the faults are removed, and then
/// pass every check.
async fn run_soak(mut plan: Plan, bound: Duration, round_wait: Duration) -> Figures {
    let started = Instant::now();
    let plan_text = plan.to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let recorder = FlightRecorder::open(dir.path(), 64 << 20, "fault-soak").expect("recorder");
    let (mut env, rules) = start_env(&plan, bound, &recorder).await;
    let seen = Arc::new(Mutex::new(Observed::default()));
    let observers = observe(
        env.cluster().client().await.expect("observer client"),
        &env.namespace,
        seen.clone(),
    );
    let mut f = Figures {
        seed: plan.seed,
        vms: plan.vms,
        ..Default::default()
    };
    futures::stream::iter((0..plan.vms).map(|i| format!("soak-{i:04}")))
        .for_each_concurrent(16, |name| {
            let env = &env;
            async move {
                env.vms()
                    .create(&PostParams::default(), &soak_vm(&name, &env.namespace))
                    .await
                    .expect("create VM");
            }
        })
        .await;
    let rounds = run_rounds(&mut env, &mut plan, round_wait, &mut f).await;

    // A watch never loses an event and stays open: a lost event comes with a broken stream and
    // the informer's relist recovers it (tombstones). The faults drop single events from open
    // streams, so once they stop every stream is broken once, as a real API server's restart
    // would; without it a dropped pod DELETED stayed in the VMI controller's cache until the
    // watch timed out (minutes), holding a Failed VMI's finalizer past the bound.
    env.cluster().api().faults().clear();
    env.cluster().api().faults().drop_watches();
    f.fault_phase = started.elapsed();
    for (family, id) in &rules {
        *f.fired.entry(family).or_default() += env.cluster().api().faults().fired(*id);
    }
    let off = Instant::now();
    let mut timeline = Timeline::new(off);
    let reasserted = AtomicUsize::new(0);
    let all = until_converged(
        &env,
        &rounds.steps,
        plan.vms,
        (bound, Wait::WhileMoving),
        Some((&rounds.applied, &reasserted)),
        Some(&mut timeline),
    )
    .await;
    if !all {
        let text = not_converged(&mut env, &rounds, bound, &plan_text).await;
        recorder.flush();
        panic!("{text}\n{}", recorded_steps(dir.path(), &text));
    }
    f.converged_after_faults = off.elapsed();
    f.shares = timeline.shares(plan.vms);
    f.reasserted = reasserted.load(Ordering::SeqCst);
    f.requests += f.reasserted;
    print_stragglers(
        &env,
        &rounds.steps,
        &timeline,
        chrono::Utc::now() - off.elapsed(),
    );

    let lost = lost_template_fields(&env, &rounds.steps).await;
    assert!(
        lost.is_empty(),
        "template fields lost:\n{}",
        lost.join("\n")
    );
    assert!(
        env.run.as_ref().is_some_and(|r| !r.is_finished()) && env.manager.leader_state().leading,
        "the last instance still runs and leads"
    );
    check_audit(&env, &rounds, &mut f);
    f.deleted_within = delete_all(&env, bound).await;
    for o in &observers {
        o.abort();
    }
    let violations = {
        let o = seen.lock().unwrap_or_else(|e| e.into_inner());
        f.observer_events = o.events;
        o.violations.clone()
    };
    assert!(
        f.observer_events > plan.vms,
        "the observer saw the VMIs and pods"
    );
    assert!(
        violations.is_empty(),
        "two live objects for one VM (observer):\n{}",
        violations.join("\n")
    );
    env.shutdown().await;
    f.total = started.elapsed();
    f
}

/// The last VMs to converge, with every write to their objects since the faults were removed:
/// shows whether the tail is the work queue's backoff, a stale cache or something else.
fn print_stragglers(
    env: &Env,
    steps: &BTreeMap<String, Step>,
    timeline: &Timeline,
    since: chrono::DateTime<chrono::Utc>,
) {
    if std::env::var_os("FAULT_SOAK_STRAGGLERS").is_none() {
        return;
    }
    let entries = env.cluster().api().audit().entries();
    for (name, at) in timeline.stragglers(3) {
        let launcher = format!("virt-launcher-{name}-");
        let history: Vec<String> = entries
            .iter()
            .filter(|e| e.time >= since && e.is_write() && e.resource != "leases")
            .filter(|e| e.name == name || e.name.starts_with(&launcher))
            .take(120)
            .map(|e| {
                format!(
                    "  {:>8.3} s {} {} {}/{} {}",
                    (e.time - since).num_milliseconds() as f64 / 1000.0,
                    e.user_agent.split('/').next().unwrap_or_default(),
                    e.verb,
                    e.resource,
                    e.subresource,
                    e.code
                )
            })
            .collect();
        println!(
            "fault soak: {name} ({:?}) was out of its state until {:.1} s; its writes since the \
             faults were removed:\n{}",
            steps.get(&name),
            at.as_secs_f64(),
            history.join("\n")
        );
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The text of a caught panic.
fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// The seeds `FAULT_SOAK_SEED` names: `N`, or `A-B` (both included); 1..=20 without it.
fn seeds(var: Option<&str>) -> Vec<u64> {
    let number = |s: &str| -> u64 { s.trim().parse().expect("FAULT_SOAK_SEED: N or A-B") };
    match var.map(|v| v.split_once('-')) {
        None => (1..=20).collect(),
        Some(Some((a, b))) => (number(a)..=number(b)).collect(),
        Some(None) => vec![number(var.unwrap_or_default())],
    }
}

/// CI: seeds 1..=20 (`FAULT_SOAK_SEED=N` or `A-B`: those), `FAULT_SOAK_VMS` VMs (20),
/// `FAULT_SOAK_ROUNDS` rounds (3), `FAULT_SOAK_PARALLEL` seeds at a time (4). Every seed runs;
/// the failures are reported together, each with its plan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_soak_seeds() {
    let seeds = seeds(std::env::var("FAULT_SOAK_SEED").ok().as_deref());
    let (vms, rounds) = (
        env_usize("FAULT_SOAK_VMS", 20),
        env_usize("FAULT_SOAK_ROUNDS", 3),
    );
    count_panics();
    let panics_before = PANICS.load(Ordering::SeqCst);
    let results: Vec<(u64, String, Result<Figures, String>)> = futures::stream::iter(seeds)
        .map(|seed| async move {
            let plan = Plan::new(seed, vms, Length::Rounds(rounds), rounds);
            let text = plan.to_string();
            println!("fault soak plan: {text}");
            let run = run_soak(plan, Duration::from_secs(60), Duration::from_secs(20));
            let result = AssertUnwindSafe(run)
                .catch_unwind()
                .await
                .map_err(|p| panic_text(p.as_ref()));
            (seed, text, result)
        })
        .buffer_unordered(env_usize("FAULT_SOAK_PARALLEL", 4))
        .collect()
        .await;
    let mut failed = Vec::new();
    for (seed, plan, result) in results {
        match result {
            Ok(f) => {
                println!("fault soak: {f}");
                let fired: u64 = f.fired.values().sum();
                assert!(
                    f.events() > 0 && fired > 0,
                    "seed {seed}: no VM event or no fault: {f}"
                );
            }
            Err(e) => failed.push(format!("seed {seed} failed: {plan}\n{e}")),
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        panics_before,
        "no thread panicked"
    );
}

/// The long soak: `FAULT_SOAK_VMS` VMs (200) and rounds until `FAULT_SOAK_EVENTS` VM events
/// (10,000), seed `FAULT_SOAK_SEED` (1), converging within 10 minutes of the faults' removal.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes of work: see the module docs"]
async fn fault_soak_long() {
    let seed = env_usize("FAULT_SOAK_SEED", 1) as u64;
    let vms = env_usize("FAULT_SOAK_VMS", 200);
    let events = env_usize("FAULT_SOAK_EVENTS", 10_000);
    // About 1.5 VM events per VM and round: the kills and Lease writes are spread over that.
    let rounds_hint = (events * 2 / (vms * 3)).max(1);
    let plan = Plan::new(seed, vms, Length::Events(events), rounds_hint);
    println!("fault soak plan: {plan}");
    count_panics();
    let panics_before = PANICS.load(Ordering::SeqCst);
    let f = run_soak(plan, Duration::from_secs(600), Duration::from_secs(120)).await;
    println!("fault soak: {f}");
    assert!(f.events() >= events, "{f}");
    assert_eq!(
        PANICS.load(Ordering::SeqCst),
        panics_before,
        "no thread panicked"
    );
}
