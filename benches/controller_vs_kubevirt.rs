//! Our controller against KubeVirt v1.9.0's own virt-controller, side by side, on the real API
//! server (issue 46, item 2): the same VMs through the same simulated nodes, each controller
//! alone under KubeVirt's client rate limit (200 requests/s, burst 400), rounds interleaved
//! (ours, KubeVirt's, ours, …), medians and ratios printed with the machine's load average.
//!
//! Each side of each round runs in a child process of this bench (`CONTROLLER_VS_KUBEVIRT_ROLE=
//! round`) that starts a control plane of its own (etcd, kube-apiserver, kube-controller-manager
//! and the CRDs, as the tests start it: tests/common/control_plane.rs), so etcd, the API server's
//! caches and its audit log are fresh in every round and the previous side's objects, watches
//! and Lease are gone; the control plane dies with that process. In it:
//!
//! 1. the `kubevirt` namespace with the KubeVirt CR as virt-operator leaves it, and open CRDs for
//!    the kinds KubeVirt's controller lists beyond the control plane's (tests/common/reference.rs,
//!    shared with the differential conformance test), on both sides;
//! 2. the simulated nodes: the product's `cluster nodes` (20 nodes, kubelet delay 10 ms), a
//!    process of its own;
//! 3. one controller, a process of its own, without virt-api on either side (KubeVirt's
//!    webhooks are not there; ours adds the VMI finalizer they would, `--without-virt-api`):
//!    - ours: the product binary, `run-controller -A --without-virt-api --qps 200 --burst 400`
//!      (KubeVirt's defaults, pkg/virt-config/virt-config.go:101-102, spelled out);
//!    - KubeVirt's: the binary `scripts/reference-controller.sh` built, started as the
//!      conformance test starts it (its client limit is the CR's, defaulting to the same
//!      200/400: pkg/virt-config/configuration.go:236-240);
//! 4. once it leads, N copies of `demo-vm` (docs/examples/vm-containerdisk.yaml) created, 16
//!    in flight, by an unlimited client of the bench.
//!
//! Measured per side, the same way for both:
//! - **all Running**: from the first VM create to every VM `status.printableStatus: Running`,
//!   seen by a watch of the bench's own on the API server (no controller's cache);
//! - **CPU per VM start**: the controller process's user + system time (`/proc/<pid>/stat`, all
//!   its threads) from leading with no VM to all Running and no write in the namespace for
//!   1.5 s, over N;
//! - **RSS per VM**: its peak resident memory then (`VmHWM`) less its resident memory when
//!   leading with no VM (`VmRSS`), over N; the peak itself is printed too;
//! - **writes per VM**: kube-apiserver's audit log, the successful writes in the VMs'
//!   namespace by the controller's user agent (ours `virtctl-rs-run-controller`, KubeVirt's
//!   `virt-controller/…`, client-go's default agent: kubecli/kubecli.go:334-335), over N;
//!   failed writes (conflicts) apart. The rate limit allows at least `(writes − 400) / 200`
//!   seconds before all are Running (reads are not audited): printed as the floor.
//!
//! Knobs: `CONTROLLER_VS_KUBEVIRT_VMS` (1000), `_ROUNDS` (3 rounds of each side), `_NODES`
//! (20), `_KUBELET_DELAY_MS` (10), `_PLUGIN` (our side's product binary; default the one cargo
//! built beside this bench, with the dev-dependencies' features: the script passes the one of
//! `cargo build --release`). Under `cargo test --benches` (no `--bench` argument): 5 VMs, 1 round.
//! Without the control plane (`scripts/envtest.sh`) or the reference
//! (`scripts/reference-controller.sh`) it prints one `SKIP controller_vs_kubevirt: …` line and
//! passes. `scripts/bench-controllers.sh` builds everything and runs it. Figures:
//! docs/performance.md, "Our controller against KubeVirt's, side by side".

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

/// The tests' real control plane and KubeVirt's controller beside it, shared with them.
#[path = "../tests/common/control_plane.rs"]
#[allow(dead_code)]
mod control_plane;
/// CPU time and memory of a process, shared with `controller_start`.
#[path = "common/procfs.rs"]
mod procfs;
use procfs::{stat_cpu_seconds, status_kib};
#[path = "../tests/common/reference.rs"]
#[allow(dead_code)]
mod reference;

use control_plane::ControlPlane;

const ROLE_ENV: &str = "CONTROLLER_VS_KUBEVIRT_ROLE";
const SIDE_ENV: &str = "CONTROLLER_VS_KUBEVIRT_SIDE";
const PLUGIN_ENV: &str = "CONTROLLER_VS_KUBEVIRT_PLUGIN";
/// Our controller's user agent (`--user-agent`), to tell its writes in the audit log.
const OUR_AGENT: &str = "virtctl-rs-run-controller";
/// KubeVirt's: client-go's default, `<binary>/<version> (…)` (kubecli/kubecli.go:334-335).
const KUBEVIRT_AGENT: &str = "virt-controller/";
/// The VMs' namespace.
const NAMESPACE: &str = "bench";
/// VM creates in flight.
const IN_FLIGHT: usize = 16;
/// A side is done once its namespace has had no write for this long after all are Running.
const QUIET: Duration = Duration::from_millis(1500);
/// The prefix of a round's result line on its standard output.
const RESULT: &str = "result ";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Ours,
    KubeVirt,
}

impl Side {
    fn name(self) -> &'static str {
        match self {
            Side::Ours => "virtctl-rs",
            Side::KubeVirt => "kubevirt",
        }
    }

    fn parse(text: &str) -> Option<Side> {
        [Side::Ours, Side::KubeVirt]
            .into_iter()
            .find(|s| s.name() == text)
    }

    fn writes_as(self, agent: &str) -> bool {
        match self {
            Side::Ours => agent == OUR_AGENT,
            Side::KubeVirt => agent.starts_with(KUBEVIRT_AGENT),
        }
    }
}

/// The run's shape, from the environment.
#[derive(Debug, Clone)]
struct Shape {
    vms: usize,
    rounds: usize,
    nodes: usize,
    kubelet_delay_ms: u64,
    plugin: PathBuf,
}

fn env_number(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v:?}: {e}")),
        Err(_) => default,
    }
}

impl Shape {
    fn from_env() -> Shape {
        let (vms, rounds) = if benching() { (1000, 3) } else { (5, 1) };
        Shape {
            vms: env_number("CONTROLLER_VS_KUBEVIRT_VMS", vms) as usize,
            rounds: env_number("CONTROLLER_VS_KUBEVIRT_ROUNDS", rounds) as usize,
            nodes: env_number("CONTROLLER_VS_KUBEVIRT_NODES", 20) as usize,
            kubelet_delay_ms: env_number("CONTROLLER_VS_KUBEVIRT_KUBELET_DELAY_MS", 10),
            plugin: std::env::var_os(PLUGIN_ENV)
                .filter(|v| !v.is_empty())
                .map_or_else(
                    || PathBuf::from(env!("CARGO_BIN_EXE_kubectl-virtctl_rs")),
                    PathBuf::from,
                ),
        }
    }
}

/// `cargo test --benches` passes no `--bench`; `cargo bench` does.
fn benching() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test")
}

/// What one side of one round measured (one JSON line from the round's process).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct Figures {
    side: String,
    vms: usize,
    /// First VM create → every VM Running, seconds.
    running_s: f64,
    /// The controller's CPU seconds, leading with none → all Running and quiet.
    cpu_s: f64,
    /// Its `VmRSS` leading with no VM, and its `VmHWM` at the end, KiB.
    rss_leading_kib: u64,
    peak_rss_kib: u64,
    /// Its successful writes in the namespace, all and those until every VM was Running;
    /// its failed ones; its writes elsewhere (Leases aside).
    writes: usize,
    writes_until_running: usize,
    failed_writes: usize,
    writes_elsewhere: usize,
    /// Successful writes per `verb resource[/subresource]`.
    by_kind: BTreeMap<String, usize>,
    /// Failed writes in the namespace per `verb resource[/subresource] code`.
    #[serde(default)]
    failed_by_kind: BTreeMap<String, usize>,
    /// kube-apiserver's and etcd's CPU seconds over the same span.
    apiserver_cpu_s: f64,
    etcd_cpu_s: f64,
}

impl Figures {
    fn cpu_ms_per_vm(&self) -> f64 {
        self.cpu_s * 1000.0 / self.vms.max(1) as f64
    }

    fn rss_kib_per_vm(&self) -> f64 {
        self.peak_rss_kib.saturating_sub(self.rss_leading_kib) as f64 / self.vms.max(1) as f64
    }

    fn writes_per_vm(&self) -> f64 {
        self.writes as f64 / self.vms.max(1) as f64
    }

    /// The least time KubeVirt's limit allows for the writes made until all were Running.
    fn rate_floor_s(&self) -> f64 {
        self.writes_until_running.saturating_sub(400) as f64 / 200.0
    }
}

/// The product binary against `plane`, as `args` say.
fn plugin(shape: &Shape, plane: &ControlPlane, args: &[&str]) -> Command {
    let mut cmd = Command::new(&shape.plugin);
    cmd.arg("--kubeconfig").arg(&plane.kubeconfig).args(args);
    cmd
}

/// Start `side`'s controller beside the control plane (it dies with the round's process) and
/// wait until it leads; its process ID.
async fn start_controller(side: Side, shape: &Shape, plane: &ControlPlane) -> u32 {
    let pid = match side {
        Side::Ours => {
            let cmd = plugin(
                shape,
                plane,
                &[
                    "--user-agent",
                    OUR_AGENT,
                    "run-controller",
                    "-A",
                    "--without-virt-api",
                    "--qps",
                    "200",
                    "--burst",
                    "400",
                    "--listen",
                    "none",
                    "--quiet",
                ],
            );
            plane.spawn("run-controller", cmd)
        }
        Side::KubeVirt => {
            let bin = reference::locate_reference().unwrap_or_else(|e| panic!("{e}"));
            // The log's name is the one `wait_reference_leading` reads.
            plane.spawn(
                "reference-virt-controller",
                reference::reference_command(plane, &bin, false),
            )
        }
    }
    .unwrap_or_else(|e| panic!("start {}: {e}", side.name()));
    match side {
        // Ours logs nothing with --quiet: it leads once it holds KubeVirt's Lease.
        Side::Ours => wait_lease_held(plane).await,
        Side::KubeVirt => reference::wait_reference_leading(plane).await,
    }
    pid
}

/// Wait until the `virt-controller` Lease of `kubevirt` has a holder.
async fn wait_lease_held(plane: &ControlPlane) {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(plane.client("bench-watch").await, "kubevirt");
    let until = Instant::now() + reference::SETTLE;
    loop {
        let held = leases.get_opt("virt-controller").await.ok().flatten();
        if held
            .and_then(|l| l.spec?.holder_identity)
            .is_some_and(|h| !h.is_empty())
        {
            return;
        }
        assert!(
            Instant::now() < until,
            "run-controller did not lead within {:?}; see {}",
            reference::SETTLE,
            plane.dir.join("run-controller.log").display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Start the simulated nodes (`cluster nodes`) and wait until all are registered.
async fn start_nodes(shape: &Shape, plane: &ControlPlane) {
    use k8s_openapi::api::core::v1::Node;
    let delay = shape.kubelet_delay_ms.to_string();
    let nodes = shape.nodes.to_string();
    let cmd = plugin(
        shape,
        plane,
        &[
            "cluster",
            "nodes",
            "--nodes",
            &nodes,
            "--kubelet-delay-ms",
            &delay,
        ],
    );
    plane
        .spawn("sim-nodes", cmd)
        .unwrap_or_else(|e| panic!("start cluster nodes: {e}"));
    let api: Api<Node> = Api::all(plane.client("bench-watch").await);
    let until = Instant::now() + reference::SETTLE;
    loop {
        let listed = api.list(&Default::default()).await.map(|l| l.items.len());
        if listed.as_ref().is_ok_and(|n| *n >= shape.nodes) {
            return;
        }
        assert!(
            Instant::now() < until,
            "{} simulated nodes not registered within {:?} ({listed:?}); see {}",
            shape.nodes,
            reference::SETTLE,
            plane.dir.join("sim-nodes.log").display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn vm_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

/// `n` copies of demo-vm, `vm-0000` …, each labelled with its own name.
fn vm_copies(n: usize) -> Vec<DynamicObject> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/examples/vm-containerdisk.yaml"
    );
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let base: Value = serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    (0..n)
        .map(|i| {
            let name = format!("vm-{i:04}");
            let mut vm = base.clone();
            vm["metadata"]["name"] = json!(name);
            vm["metadata"]["namespace"] = json!(NAMESPACE);
            vm["metadata"]["labels"]["app.kubernetes.io/name"] = json!(name);
            vm["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] = json!(name);
            serde_json::from_value(vm).unwrap_or_else(|e| panic!("{path}: {e}"))
        })
        .collect()
}

/// Watch the namespace's VMs; the receiver says once the watch is listed, the task ends with
/// the instant every one of `n` VMs was first seen `Running` at once.
fn watch_running(
    api: Api<DynamicObject>,
    n: usize,
) -> (
    tokio::sync::oneshot::Receiver<()>,
    tokio::task::JoinHandle<Instant>,
) {
    let (listed_tx, listed) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        let mut running: HashMap<String, bool> = HashMap::new();
        let mut stream = watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = stream.next().await {
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::Apply(vm) | watcher::Event::InitApply(vm) => {
                    let up = vm.data.pointer("/status/printableStatus") == Some(&json!("Running"));
                    running.insert(vm.metadata.name.unwrap_or_default(), up);
                }
                watcher::Event::Delete(vm) => {
                    running.remove(&vm.metadata.name.unwrap_or_default());
                }
                watcher::Event::InitDone => {
                    if let Some(tx) = listed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                watcher::Event::Init => {}
            }
            if running.len() >= n && running.values().all(|up| *up) {
                return Instant::now();
            }
        }
        panic!("the VM watch ended before all {n} VMs were Running")
    });
    (listed, task)
}

/// The audit log followed by offset: the side's writes counted, the last write in the
/// namespace by anyone (Leases aside) timed.
struct Writes {
    offset: u64,
    side: Side,
    figures: Figures,
    last_write: Instant,
}

impl Writes {
    fn read(&mut self, plane: &ControlPlane) {
        for line in control_plane::read_new_lines(&plane.audit_log, &mut self.offset) {
            let Ok(event) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            let text = |p: &str| event.pointer(p).and_then(Value::as_str).unwrap_or_default();
            let verb = text("/verb");
            if matches!(verb, "get" | "list" | "watch") || text("/objectRef/resource") == "leases" {
                continue;
            }
            let here = text("/objectRef/namespace") == NAMESPACE;
            if here {
                self.last_write = Instant::now();
            }
            if !self.side.writes_as(text("/userAgent")) {
                continue;
            }
            let code = event
                .pointer("/responseStatus/code")
                .and_then(Value::as_u64);
            let f = &mut self.figures;
            let sub = text("/objectRef/subresource");
            let resource = text("/objectRef/resource");
            let kind = if sub.is_empty() {
                format!("{verb} {resource}")
            } else {
                format!("{verb} {resource}/{sub}")
            };
            match (here, code.is_some_and(|c| (200..300).contains(&c))) {
                (false, _) => f.writes_elsewhere += 1,
                (true, false) => {
                    f.failed_writes += 1;
                    let code = code.map_or_else(|| "no code".to_string(), |c| c.to_string());
                    *f.failed_by_kind
                        .entry(format!("{kind} {code}"))
                        .or_default() += 1;
                }
                (true, true) => {
                    f.writes += 1;
                    *f.by_kind.entry(kind).or_default() += 1;
                }
            }
        }
    }
}

/// The CPU seconds of the control plane's process `name`.
fn plane_cpu(plane: &ControlPlane, name: &str) -> f64 {
    plane
        .processes()
        .iter()
        .filter(|(n, _)| *n == name)
        .map(|(_, pid)| stat_cpu_seconds(&format!("/proc/{pid}/stat")))
        .sum()
}

/// The cluster a round needs before its controller starts.
async fn prepare(shape: &Shape, plane: &ControlPlane) {
    plane.create_namespace("kubevirt").await;
    reference::install_kubevirt_cr(plane);
    reference::install_stub_crds(plane);
    plane.create_namespace(NAMESPACE).await;
    start_nodes(shape, plane).await;
}

/// One side of one round, on a control plane of this process's own.
async fn round(side: Side, shape: &Shape) -> Figures {
    let Some(plane) = control_plane::shared("controller_vs_kubevirt") else {
        panic!("the control plane is not built (scripts/envtest.sh)");
    };
    prepare(shape, plane).await;
    let pid = start_controller(side, shape, plane).await;
    let (cpu0, rss0) = (
        stat_cpu_seconds(&format!("/proc/{pid}/stat")),
        status_kib(&pid.to_string(), "VmRSS"),
    );
    let (api0, etcd0) = (plane_cpu(plane, "kube-apiserver"), plane_cpu(plane, "etcd"));
    let client = plane.client("bench-user").await;
    let vms: Api<DynamicObject> = Api::namespaced_with(client, NAMESPACE, &vm_resource());
    let (listed, watch) = watch_running(vms.clone(), shape.vms);
    let _ = listed.await;
    let mut writes = Writes {
        offset: 0,
        side,
        figures: Figures::default(),
        last_write: Instant::now(),
    };
    let started = Instant::now();
    futures::stream::iter(vm_copies(shape.vms))
        .map(|vm| {
            let vms = vms.clone();
            async move { vms.create(&PostParams::default(), &vm).await }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await
        .unwrap_or_else(|e| panic!("create the VMs: {e}"));
    let deadline = Duration::from_secs(600 + shape.vms as u64);
    let all_running = tokio::time::timeout(deadline, watch)
        .await
        .unwrap_or_else(|_| panic!("not all {} VMs Running within {deadline:?}", shape.vms))
        .unwrap_or_else(|e| panic!("the VM watch: {e}"));
    writes.read(plane);
    let until_running = writes.figures.writes;
    while writes.last_write.elapsed() < QUIET {
        assert!(started.elapsed() < deadline * 2, "writes never stopped");
        tokio::time::sleep(Duration::from_millis(100)).await;
        writes.read(plane);
    }
    let mut figures = writes.figures;
    figures.side = side.name().to_string();
    figures.vms = shape.vms;
    figures.running_s = all_running.duration_since(started).as_secs_f64();
    figures.cpu_s = stat_cpu_seconds(&format!("/proc/{pid}/stat")) - cpu0;
    figures.rss_leading_kib = rss0;
    figures.peak_rss_kib = status_kib(&pid.to_string(), "VmHWM");
    figures.writes_until_running = until_running;
    figures.apiserver_cpu_s = plane_cpu(plane, "kube-apiserver") - api0;
    figures.etcd_cpu_s = plane_cpu(plane, "etcd") - etcd0;
    figures
}

/// The machine's load average (`/proc/loadavg`'s first three fields).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Run one side of one round in a child process; its figures.
fn run_side(side: Side, shape: &Shape) -> Figures {
    let mut child = Command::new(std::env::current_exe().expect("bench executable"))
        .env(ROLE_ENV, "round")
        .env(SIDE_ENV, side.name())
        .env(PLUGIN_ENV, &shape.plugin)
        .env("CONTROLLER_VS_KUBEVIRT_VMS", shape.vms.to_string())
        .env("CONTROLLER_VS_KUBEVIRT_NODES", shape.nodes.to_string())
        .env(
            "CONTROLLER_VS_KUBEVIRT_KUBELET_DELAY_MS",
            shape.kubelet_delay_ms.to_string(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start a round");
    let stdout = child.stdout.take().expect("round stdout");
    let figures = BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| serde_json::from_str::<Figures>(l.strip_prefix(RESULT)?).ok());
    let status = child.wait().expect("wait for the round");
    figures.unwrap_or_else(|| panic!("the {} round failed ({status})", side.name()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => v[n / 2],
        _ => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn print_round(round: usize, f: &Figures) {
    println!(
        "round {round} {:<10} all Running {:>7.2} s (floor {:>6.2} s)  CPU {:>7.2} ms/VM  RSS \
         {:>7.1} KiB/VM (peak {:>7.1} MiB, leading {:>6.1} MiB)  writes {:>5.2}/VM (+{} failed, \
         {} elsewhere)  kube-apiserver {:.1} s, etcd {:.1} s CPU  load {}",
        f.side,
        f.running_s,
        f.rate_floor_s(),
        f.cpu_ms_per_vm(),
        f.rss_kib_per_vm(),
        f.peak_rss_kib as f64 / 1024.0,
        f.rss_leading_kib as f64 / 1024.0,
        f.writes_per_vm(),
        f.failed_writes,
        f.writes_elsewhere,
        f.apiserver_cpu_s,
        f.etcd_cpu_s,
        load_average()
    );
}

/// Medians per side and KubeVirt's over ours.
fn summary(ours: &[Figures], theirs: &[Figures]) {
    type Measure = (&'static str, fn(&Figures) -> f64);
    let measures: [Measure; 6] = [
        ("all Running, s", |f| f.running_s),
        ("rate-limit floor, s", Figures::rate_floor_s),
        ("CPU per VM start, ms", Figures::cpu_ms_per_vm),
        ("RSS per VM, KiB", Figures::rss_kib_per_vm),
        ("peak RSS, MiB", |f| f.peak_rss_kib as f64 / 1024.0),
        ("writes per VM", Figures::writes_per_vm),
    ];
    println!(
        "{:<22} {:>12} {:>12} {:>16}",
        "median", "virtctl-rs", "kubevirt", "kubevirt / ours"
    );
    for (name, measure) in measures {
        let a = median(ours.iter().map(measure).collect());
        let b = median(theirs.iter().map(measure).collect());
        let ratio = if a > 0.0 {
            format!("{:.2}x", b / a)
        } else {
            "-".to_string()
        };
        println!("{name:<22} {a:>12.2} {b:>12.2} {ratio:>16}");
    }
    for (side, runs) in [("virtctl-rs", ours), ("kubevirt", theirs)] {
        if let Some(last) = runs.last() {
            let kinds: Vec<String> = last
                .by_kind
                .iter()
                .map(|(k, n)| format!("{k} {:.2}", *n as f64 / last.vms.max(1) as f64))
                .collect();
            println!("{side} writes per VM (last round): {}", kinds.join(", "));
            if !last.failed_by_kind.is_empty() {
                let failed: Vec<String> = last
                    .failed_by_kind
                    .iter()
                    .map(|(k, n)| format!("{k}: {n}"))
                    .collect();
                println!("{side} failed writes (last round): {}", failed.join(", "));
            }
        }
    }
}

/// Where a prerequisite is missing, the reason.
fn missing(shape: &Shape) -> Option<String> {
    if let Err(reason) = control_plane::locate_assets() {
        return Some(reason);
    }
    if let Err(reason) = reference::locate_reference() {
        return Some(reason);
    }
    (!shape.plugin.is_file()).then(|| format!("no product binary at {}", shape.plugin.display()))
}

fn main() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("round") {
        let side = std::env::var(SIDE_ENV).ok();
        let side = side
            .as_deref()
            .and_then(Side::parse)
            .unwrap_or_else(|| panic!("{SIDE_ENV}={side:?}: virtctl-rs or kubevirt"));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio runtime");
        let figures = runtime.block_on(round(side, &Shape::from_env()));
        println!(
            "{RESULT}{}",
            serde_json::to_string(&figures).expect("figures")
        );
        return;
    }
    let shape = Shape::from_env();
    if let Some(reason) = missing(&shape) {
        println!("SKIP controller_vs_kubevirt: {reason}");
        return;
    }
    println!(
        "{} VMs, {} nodes (kubelet delay {} ms), {} round(s) of each side, interleaved; {}",
        shape.vms,
        shape.nodes,
        shape.kubelet_delay_ms,
        shape.rounds,
        shape.plugin.display()
    );
    println!("load average before: {}", load_average());
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 1..=shape.rounds {
        for side in [Side::Ours, Side::KubeVirt] {
            let figures = run_side(side, &shape);
            print_round(round, &figures);
            match side {
                Side::Ours => ours.push(figures),
                Side::KubeVirt => theirs.push(figures),
            }
        }
    }
    println!("load average after: {}", load_average());
    summary(&ours, &theirs);
}
