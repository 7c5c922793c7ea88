//! The fault soak (issue 13): many VMs on the embedded cluster, the controller's writes failing
//! at random, its watch streams dropped at random and its watch events delivered late, and
//! every VM's run strategy flipped several times (Always ↔ Halted ↔ Manual with start/stop
//! requests) while that goes on.
//!
//! Pass means:
//! * **convergence**: within [`Soak::bound`] after the last flip, every VM is in the state its
//!   last run strategy asks for (Running with a Running VMI and one live launcher pod, or
//!   Stopped with neither);
//! * **never two**: an observer watching the server (through a client the faults do not touch)
//!   never sees two live VMIs, or two live launcher pods, for one VM at any instant;
//! * **no field lost**: every field of each running VM's template (`spec.template.spec`, and
//!   its labels) is in its VMI, including one the controller does not model;
//! * **no panic**: no thread panicked, and the manager still runs and leads.
//!
//! Faults (all scoped to the controller's user agent, none on the Lease): 5xx on 5 % of its
//! non-Lease writes (500 and 503), 409 Conflict on 5 % of its non-Lease updates and patches,
//! every watch stream of its closed after a random number of events (0–40), a quarter of them
//! delivering every event 250 ms late. The seed is fixed, so the fault draws are reproducible
//! up to request ordering.
//!
//! `cargo test --test integration fault_soak::` runs the small variant (20 VMs, 3 flips). The
//! full soak is ignored by default:
//!
//! ```sh
//! cargo test --release --test integration fault_soak:: -- --ignored --nocapture
//! FAULT_SOAK_VMS=1000 cargo test --release --test integration fault_soak:: -- --ignored --nocapture
//! ```
//!
//! (`FAULT_SOAK_VMS`, default 500; `FAULT_SOAK_FLIPS`, default 4.) Figures from a run are in
//! docs/performance.md.

use crate::common;

use common::env::{CONTROLLER_AGENT, Env, EnvConfig, printable};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use virtctl_rs::api::{Phase, VirtualMachine, VirtualMachineInstance};
use virtctl_rs::sim::{FaultRule, Verb};

/// One soak run's settings.
struct Soak {
    vms: usize,
    flips: usize,
    seed: u64,
    /// Convergence bound after the last flip.
    bound: Duration,
}

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

const WRITES: [Verb; 4] = [Verb::Create, Verb::Update, Verb::Patch, Verb::Delete];

/// The soak's fault rules, `write_failure` being the share of non-Lease writes refused.
fn install_faults(env: &virtctl_rs::sim::cluster::EmbeddedCluster) {
    let faults = env.api().faults();
    faults.reseed(13);
    for code in [500, 503] {
        faults.add(
            FaultRule::error(code)
                .verbs(&WRITES)
                .except_resource("leases")
                .user_agent(CONTROLLER_AGENT)
                .probability(0.025),
        );
    }
    faults.add(
        FaultRule::conflict()
            .except_resource("leases")
            .user_agent(CONTROLLER_AGENT)
            .probability(0.05),
    );
    faults.add(FaultRule::drop_watch_randomly(40).user_agent(CONTROLLER_AGENT));
    faults.add(
        FaultRule::delay_watch_events(Duration::from_millis(250))
            .user_agent(CONTROLLER_AGENT)
            .probability(0.25),
    );
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
}

/// The soak's user retrying virtctl, for the one race KubeVirt has by design: a controller
/// whose cache still holds the previous run strategy (or a request the step cleared) may create
/// or stop a VMI after the step's request was decided. A Manual "stop" VM then runs a VMI that
/// did not exist (or was not the one stopped) at the step, or a Manual "start" VM that had a
/// live VMI (so no Start was written) lost it. Only those cases are retried: a written request
/// that was dropped without effect is not, so a controller losing requests still fails the soak.
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
        let live = live_vmi(env, name).await.and_then(|v| v.metadata.uid);
        let before = applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
            .unwrap_or_default();
        let raced = match step {
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
    bound: Duration,
    applied: Option<(&Mutex<BTreeMap<String, Applied>>, &AtomicUsize)>,
    mut timeline: Option<&mut Timeline>,
) -> bool {
    let deadline = tokio::time::Instant::now() + bound;
    let mut polls = 0u32;
    loop {
        let c = count_converged(env, steps).await;
        if let Some(t) = timeline.as_deref_mut() {
            t.record(&c);
        }
        if c.converged >= n {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
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
    let vmi = live_vmi(env, name).await;
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
        live: vmi.and_then(|v| v.metadata.uid),
    }
}

/// The figures of one run.
#[derive(Debug)]
struct Figures {
    vms: usize,
    flips: usize,
    converge_after_last_flip: Duration,
    total: Duration,
    controller_writes: usize,
    failed_writes: usize,
    injected_5xx: usize,
    injected_409: usize,
    watches: usize,
    observer_events: usize,
    /// Manual requests written again by [`reassert`].
    reasserted: usize,
}

async fn run_soak(soak: Soak) -> Figures {
    let panics = Arc::new(AtomicUsize::new(0));
    {
        let panics = panics.clone();
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            panics.fetch_add(1, Ordering::SeqCst);
            default(info);
        }));
    }
    let started = Instant::now();
    let mut config = EnvConfig::new("fault-soak");
    config.namespace = "soak".into();
    config.cluster.nodes = (soak.vms / 90 + 2).max(2);
    config.deadline = soak.bound;
    let env = Env::start_with(config, install_faults).await;
    let ns = env.namespace.clone();
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(env.client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace"),
        )
        .await;
    let seen = Arc::new(Mutex::new(Observed::default()));
    let observers = observe(
        env.cluster().client().await.expect("observer client"),
        &ns,
        seen.clone(),
    );

    let names: Vec<String> = (0..soak.vms).map(|i| format!("soak-{i:04}")).collect();
    futures::stream::iter(names.iter())
        .for_each_concurrent(16, |name| {
            let env = &env;
            let ns = &ns;
            async move {
                env.vms()
                    .create(&PostParams::default(), &soak_vm(name, ns))
                    .await
                    .expect("create VM");
            }
        })
        .await;

    // Each round moves every VM to another step, then waits until half of them got there
    // (so the next round lands on VMs in every stage of starting and stopping).
    let mut rng = StdRng::seed_from_u64(soak.seed);
    let mut steps: BTreeMap<String, Step> =
        names.iter().map(|n| (n.clone(), Step::Always)).collect();
    let mut last_flip = Instant::now();
    let mut last_flip_utc = chrono::Utc::now();
    let applied: Mutex<BTreeMap<String, Applied>> = Mutex::default();
    let reasserted = AtomicUsize::new(0);
    for round in 0..soak.flips {
        for step in steps.values_mut() {
            let others: Vec<Step> = Step::ALL.into_iter().filter(|s| s != step).collect();
            *step = others[rng.random_range(0..others.len())];
        }
        futures::stream::iter(steps.iter())
            .for_each_concurrent(16, |(name, step)| {
                let (env, applied) = (&env, &applied);
                async move {
                    let a = apply_step(env, name, *step).await;
                    applied
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(name.clone(), a);
                }
            })
            .await;
        last_flip = Instant::now();
        last_flip_utc = chrono::Utc::now();
        if round + 1 < soak.flips {
            let half = soak.vms / 2;
            let reached = until_converged(&env, &steps, half, soak.bound, None, None).await;
            assert!(reached, "round {round}: half the VMs in their state");
        }
    }
    let mut timeline = Timeline::new(last_flip);
    let all = until_converged(
        &env,
        &steps,
        soak.vms,
        soak.bound,
        Some((&applied, &reasserted)),
        Some(&mut timeline),
    )
    .await;
    if !all {
        let c = count_converged(&env, &steps).await;
        // A key still parked behind the shared token bucket is the rate limit at work (see the
        // retries line of the printout), not a lost request: say how far ahead it is reserved.
        let ctx = env.manager.context();
        let reserved: Vec<String> = [ctx.vm_queue.get(), ctx.vmi_queue.get()]
            .into_iter()
            .flatten()
            .map(|q| {
                let s = q.snapshot();
                format!("{} {:.1} s", s.name, s.rate_limiter_wait_seconds)
            })
            .collect();
        panic!(
            "{}/{} VMs converged {:?} after the last flip ({} requests written again; shared \
             rate limit reserved ahead: {}); for example:\n{}",
            c.converged,
            soak.vms,
            soak.bound,
            reasserted.load(Ordering::SeqCst),
            reserved.join(", "),
            c.examples.join("\n")
        );
    }
    let converge_after_last_flip = last_flip.elapsed();

    // No field of a running VM's template lost in its VMI.
    let mut lost = Vec::new();
    for (name, step) in &steps {
        if !step.wants_running() {
            continue;
        }
        let (Some(vm), Some(vmi)) = (env.vm(name).await, env.vmi(name).await) else {
            lost.push(format!("{name}: VM or VMI gone"));
            continue;
        };
        let template = vm.spec.template.as_ref().expect("template");
        let expected = serde_json::to_value(&template.spec).expect("template spec");
        let actual = serde_json::to_value(&vmi.spec).expect("VMI spec");
        missing_fields(&expected, &actual, &format!("{name} spec"), &mut lost);
        let labels =
            serde_json::to_value(template.metadata.as_ref().and_then(|m| m.labels.clone()))
                .expect("labels");
        let vmi_labels = serde_json::to_value(&vmi.metadata.labels).expect("labels");
        missing_fields(&labels, &vmi_labels, &format!("{name} labels"), &mut lost);
    }
    assert!(
        lost.is_empty(),
        "template fields lost:\n{}",
        lost.join("\n")
    );

    for o in &observers {
        o.abort();
    }
    let (observer_events, violations) = {
        let o = seen.lock().unwrap_or_else(|e| e.into_inner());
        (o.events, o.violations.clone())
    };
    assert!(
        observer_events > soak.vms,
        "the observer saw the VMIs and pods"
    );
    assert!(
        violations.is_empty(),
        "two live objects for one VM:\n{}",
        violations.join("\n")
    );
    assert_eq!(panics.load(Ordering::SeqCst), 0, "a thread panicked");
    assert!(
        env.run.as_ref().is_some_and(|r| !r.is_finished()) && env.manager.leader_state().leading,
        "the manager still runs and leads"
    );

    let entries = env.cluster().api().audit().entries();
    let controller: Vec<_> = entries
        .iter()
        .filter(|e| e.user_agent.contains(CONTROLLER_AGENT) && e.resource != "leases")
        .collect();
    let writes: Vec<_> = controller.iter().filter(|e| e.is_write()).collect();
    let figures = Figures {
        vms: soak.vms,
        flips: soak.flips,
        converge_after_last_flip,
        total: started.elapsed(),
        controller_writes: writes.len(),
        failed_writes: writes.iter().filter(|e| e.code >= 400).count(),
        injected_5xx: writes.iter().filter(|e| e.code >= 500).count(),
        injected_409: writes.iter().filter(|e| e.code == 409).count(),
        watches: controller.iter().filter(|e| e.verb == "watch").count(),
        observer_events,
        reasserted: reasserted.load(Ordering::SeqCst),
    };
    println!(
        "fault soak: {} VMs, {} flips each: converged {:.1} s after the last flip ({:.1} s in all); \
         {} controller writes ({:.1} per VM), {} failed ({:.1} %: {} 5xx, {} 409); {} watch requests; \
         the observer saw {} events; {} Manual requests written again",
        figures.vms,
        figures.flips,
        figures.converge_after_last_flip.as_secs_f64(),
        figures.total.as_secs_f64(),
        figures.controller_writes,
        figures.controller_writes as f64 / figures.vms as f64,
        figures.failed_writes,
        100.0 * figures.failed_writes as f64 / figures.controller_writes.max(1) as f64,
        figures.injected_5xx,
        figures.injected_409,
        figures.watches,
        figures.observer_events,
        figures.reasserted
    );
    // Which writes failed, and how: tells injected faults from real conflicts.
    let mut failed: std::collections::BTreeMap<String, usize> = Default::default();
    for e in writes.iter().filter(|e| e.code >= 400) {
        let sub = if e.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", e.subresource)
        };
        *failed
            .entry(format!("{} {}{sub} {}", e.verb, e.resource, e.code))
            .or_default() += 1;
    }
    let mut failed: Vec<_> = failed.into_iter().collect();
    failed.sort_by_key(|b| std::cmp::Reverse(b.1));
    println!("fault soak: failed writes by request and code: {failed:?}");
    println!(
        "fault soak: converged after the last flip: {}",
        timeline.shares(soak.vms).join(", ")
    );
    // Every failed reconcile is re-added through the queue's rate limiter, whose token bucket
    // (10 per second, burst 100) all keys share: N retries reserve it about (N - 100) / 10 s
    // ahead, which is how long a key that failed last, with no watch event to wake it, waits.
    let metrics = env.manager.context().metrics.encode().unwrap_or_default();
    let retries: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("kubevirt_workqueue_retries_total"))
        .collect();
    println!("fault soak: work queue retries: {retries:?}");
    // The last VMs to converge, with every write to their objects since the last flip: shows
    // whether the tail is the work queue's backoff, a stale cache or something else.
    for (name, at) in timeline.stragglers(3) {
        let launcher = format!("virt-launcher-{name}-");
        let history: Vec<String> = entries
            .iter()
            .filter(|e| e.time >= last_flip_utc && e.is_write() && e.resource != "leases")
            .filter(|e| e.name == name || e.name.starts_with(&launcher))
            .map(|e| {
                let sub = if e.subresource.is_empty() {
                    String::new()
                } else {
                    format!("/{}", e.subresource)
                };
                let who = e.user_agent.split('/').next().unwrap_or_default();
                format!(
                    "  {:>8.3} s {who} {} {}{sub} {}",
                    (e.time - last_flip_utc).num_milliseconds() as f64 / 1000.0,
                    e.verb,
                    e.resource,
                    e.code
                )
            })
            .collect();
        println!(
            "fault soak: {name} ({:?}) was out of its state until {:.1} s; its writes since the \
             last flip ({}):\n{}",
            steps.get(&name),
            at.as_secs_f64(),
            history.len(),
            history
                .iter()
                .take(120)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
    env.shutdown().await;
    figures
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The CI variant: 20 VMs, 3 flips each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_soak_small() {
    let f = run_soak(Soak {
        vms: 20,
        flips: 3,
        seed: 13,
        bound: Duration::from_secs(120),
    })
    .await;
    assert!(f.failed_writes > 0, "faults were injected: {f:?}");
}

/// The full soak: `FAULT_SOAK_VMS` VMs (500), `FAULT_SOAK_FLIPS` flips (4), converging within
/// 10 minutes of the last flip.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes of work: cargo test --release --test integration fault_soak:: -- --ignored"]
async fn fault_soak() {
    let f = run_soak(Soak {
        vms: env_usize("FAULT_SOAK_VMS", 500),
        flips: env_usize("FAULT_SOAK_FLIPS", 4),
        seed: 13,
        bound: Duration::from_secs(600),
    })
    .await;
    assert!(f.failed_writes > 0, "faults were injected: {f:?}");
}
