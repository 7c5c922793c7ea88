//! Start 1 000 VMs: copies of `demo-vm` (docs/examples/vm-containerdisk.yaml) on the embedded
//! cluster with 20 simulated nodes, run by the real controller (3 VM / 10 VMI workers).
//!
//! A plain `fn main` bench (`harness = false`): one 1 000-VM start is a scenario, not a loop
//! criterion could sample. It reports
//! - time from the first VM create to every VM `printableStatus: Running` (read from the
//!   controller's VM cache every 50 ms), and to "controller idle" (queues empty, no write);
//! - VM create → VMI create / launcher pod create / VMI Running percentiles, for the bulk start
//!   and for paced starts on the idle controller;
//! - writes per VM from the API server's audit log, by user agent and `verb resource/sub`;
//! - CPU time (user + system, from `/proc/<pid>/stat`) and peak resident memory (`VmHWM` in
//!   `/proc/<pid>/status`) of the controller process and of the cluster process, and the
//!   controller's share of its process's CPU: the VM-creating client runs on a thread of its
//!   own and the polling on the main thread, and both threads' CPU (`/proc/<pid>/task/<tid>/stat`)
//!   is taken off;
//! - the controller process's heap (jemalloc's statistics), and the controller's own part of it:
//!   every arena but those of the main thread (which also keeps the bench's copy of the audit
//!   log) and of the VM-creating client.
//!
//! By default the embedded cluster (API server + simulated nodes) runs in a **child process**
//! (this bench executable re-executed with `CONTROLLER_BENCH_ROLE=cluster`, writing its
//! kubeconfig and a JSON-lines audit file into a temp dir), so the bench process holds only the
//! controller, the client that creates the VMs and the bench's own polling.
//! `CONTROLLER_BENCH_IN_PROCESS=1` runs everything in one process instead.
//!
//! `CONTROLLER_BENCH_SERVER=real` runs the same start on the real control plane instead
//! (kube-apiserver, etcd and kube-controller-manager of Kubernetes v1.36 with KubeVirt's CRDs,
//! built by `scripts/envtest.sh` and started as the tests start it,
//! tests/common/control_plane.rs) with the simulated nodes in a child process pointed at it;
//! the controller runs without virt-api (`without_virt_api`), and the cluster's figures are
//! those processes' together. Writes come from kube-apiserver's audit log.
//!
//! Knobs: `CONTROLLER_BENCH_VMS` (default 1000), `CONTROLLER_BENCH_NODES` (20),
//! `CONTROLLER_BENCH_KUBELET_DELAY_MS` (10), `CONTROLLER_BENCH_PACED` (100 VMs started one at a
//! time after the bulk start, for the idle-controller latency), `CONTROLLER_BENCH_WORKER_THREADS`
//! (the controller's tokio worker threads, `run-controller --worker-threads`; default 1, or one
//! per CPU in-process), `CONTROLLER_BENCH_EVENT_HISTORY` (the embedded server's watch window
//! per resource, default 200,000 events; the run prints the relists it caused), `CONTROLLER_BENCH_CLIENT_LIMIT=none` (the controller's API client
//! unlimited; by default KubeVirt's 200 requests/s, burst 400), `CONTROLLER_BENCH_RECORD=DIR`
//! (the controller keeps a flight recording there, as `run-controller --record DIR`; the
//! bench prints its size), `CONTROLLER_BENCH_RECORD_COMPARE=ROUNDS` (the recorder's cost: each
//! round starts the VMs without and with a recording, in alternating order, and a summary gives
//! the controller's CPU per VM start of both and the recording's bytes per VM start, with the
//! load average; docs/performance.md). Under `cargo test --benches` /
//! `--test`, 20 VMs and 5 paced.
//!
//! Run: `cargo bench --bench controller_start`. Figures: docs/performance.md ("Controller start,
//! 1,000 and 10,000 VMs", and "1,000-VM start on the real API server").

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::VirtualMachine;
use virtctl_rs::controller::manager::{ClientRateLimit, Manager, ManagerConfig};
use virtctl_rs::runtime::lease::LeaderElectionConfig;
use virtctl_rs::sim::ApiServerConfig;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};

/// The tests' real control plane, shared with them (it depends on nothing else of the tests).
#[path = "../tests/common/control_plane.rs"]
#[allow(dead_code)]
mod control_plane;
/// CPU time and memory of a process, shared with `controller_vs_kubevirt`.
#[path = "common/procfs.rs"]
mod procfs;
use procfs::{stat_cpu_seconds, status_kib};

/// The product binary's allocator (src/main.rs), so both processes allocate as
/// `kubectl virtctl-rs run-controller` and `cluster serve` do.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

const ROLE_ENV: &str = "CONTROLLER_BENCH_ROLE";
const DIR_ENV: &str = "CONTROLLER_BENCH_DIR";
const KUBECONFIG_ENV: &str = "CONTROLLER_BENCH_KUBECONFIG";
const CONTROLLER_AGENT: &str = "virt-controller";
/// VM creates in flight.
const IN_FLIGHT: usize = 16;
/// Give up after this long.
const DEADLINE: Duration = Duration::from_secs(1800);

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn cluster_config(dir: Option<&Path>) -> EmbeddedClusterConfig {
    EmbeddedClusterConfig {
        nodes: env_usize("CONTROLLER_BENCH_NODES", 20),
        kubelet_delay: Duration::from_millis(
            env_usize("CONTROLLER_BENCH_KUBELET_DELAY_MS", 10) as u64
        ),
        api: ApiServerConfig {
            // The watch window per resource. A watcher that falls further behind than this
            // (its watch ends and it resumes from an older resourceVersion) gets 410 and
            // relists; the run prints how often that happened.
            event_history: env_usize("CONTROLLER_BENCH_EVENT_HISTORY", 200_000),
            audit_file: dir.map(|d| d.join("audit.jsonl")),
            // The run's writes are counted from the whole log at the end.
            audit_capacity: None,
            kubeconfig_path: dir.map(|d| d.join("kubeconfig")),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// CPU seconds (user + system) and peak RSS (KiB) of a process, from procfs.
#[derive(Debug, Clone, Copy, Default)]
struct Usage {
    cpu_seconds: f64,
    peak_rss_kib: u64,
}

fn usage(pid: &str) -> Usage {
    Usage {
        cpu_seconds: stat_cpu_seconds(&format!("/proc/{pid}/stat")),
        peak_rss_kib: status_kib(pid, "VmHWM"),
    }
}

/// jemalloc's view of this process's heap in KiB: (allocated, resident). `allocated` is the
/// bytes live in allocations; `resident` also counts the pages jemalloc keeps mapped (freed
/// memory not yet returned, metadata). `None` if the statistics cannot be read.
fn jemalloc_kib() -> Option<(u64, u64)> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    let allocated = stats::allocated::read().ok()? as u64 / 1024;
    let resident = stats::resident::read().ok()? as u64 / 1024;
    Some((allocated, resident))
}

/// jemalloc's arena of the calling thread (`thread.arena`). Each thread allocates from its arena
/// and a freed block goes back to the arena it came from, so an arena's statistics belong to
/// the threads that use it.
fn thread_arena() -> Option<u32> {
    // SAFETY: `thread.arena` is an `unsigned`.
    unsafe { tikv_jemalloc_ctl::raw::read::<u32>(b"thread.arena\0") }.ok()
}

/// Every jemalloc arena's (allocated, resident) KiB, by arena index, as of the last
/// `epoch::advance` (`jemalloc_kib`). The bench's own threads (the main thread: polling and
/// the copy of the audit log; the VM-creating client's) allocate from arenas of their own,
/// which tells their heap from the controller's.
fn arenas_kib() -> Vec<(u64, u64)> {
    let stat = |i: u32, what: &str| {
        let name = format!("stats.arenas.{i}.{what}\0");
        // SAFETY: these three statistics are `size_t`s.
        unsafe { tikv_jemalloc_ctl::raw::read::<usize>(name.as_bytes()) }
            .ok()
            .map_or(0, |b| b as u64 / 1024)
    };
    let count = tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0);
    (0..count)
        .map(|i| {
            let allocated = stat(i, "small.allocated") + stat(i, "large.allocated");
            (allocated, stat(i, "resident"))
        })
        .collect()
}

/// The sum of `arenas` over the given indices.
fn sum_arenas(stats: &[(u64, u64)], arenas: &[u32]) -> (u64, u64) {
    arenas
        .iter()
        .filter_map(|&i| stats.get(i as usize))
        .fold((0, 0), |(a, r), (a2, r2)| (a + a2, r + r2))
}

/// Per-VM start latencies in milliseconds, from the API server's audit log (arrival times,
/// one clock): the bench's VM create → the controller's VMI create, → its launcher pod create,
/// → the simulated virt-handler's first VMI write (the one that sets `Running`).
#[derive(Debug, Default)]
struct Latencies {
    vmi_created: Vec<f64>,
    pod_created: Vec<f64>,
    running: Vec<f64>,
}

fn start_latencies(entries: &[Audited]) -> Latencies {
    use std::collections::HashMap;
    type Time = chrono::DateTime<chrono::Utc>;
    let mut vm: HashMap<&str, Time> = HashMap::new();
    let mut vmi: HashMap<&str, Time> = HashMap::new();
    let mut pod: HashMap<&str, Time> = HashMap::new();
    let mut running: HashMap<&str, Time> = HashMap::new();
    for a in entries.iter().filter(|a| a.ok()) {
        let (map, key): (&mut HashMap<&str, Time>, &str) =
            match (a.verb.as_str(), a.res.as_str(), agent(&a.ua)) {
                ("create", "virtualmachines", "bench-user") => (&mut vm, &a.name),
                ("create", "virtualmachineinstances", CONTROLLER_AGENT) => (&mut vmi, &a.name),
                // virt-launcher-<vm>-<5 random characters>
                ("create", "pods", CONTROLLER_AGENT) => match a
                    .name
                    .strip_prefix("virt-launcher-")
                    .and_then(|r| r.rsplit_once('-'))
                {
                    Some((owner, _)) => (&mut pod, owner),
                    None => continue,
                },
                ("update" | "patch", r, "sim-virt-handler")
                    if r.starts_with("virtualmachineinstances") =>
                {
                    (&mut running, &a.name)
                }
                _ => continue,
            };
        map.entry(key).or_insert(a.time);
    }
    let since_vm = |m: &HashMap<&str, Time>| {
        let mut v: Vec<f64> = m
            .iter()
            .filter_map(|(name, t)| vm.get(name).map(|c| (*t - *c).num_microseconds()))
            .flatten()
            .map(|us| us as f64 / 1000.0)
            .collect();
        v.sort_by(f64::total_cmp);
        v
    };
    Latencies {
        vmi_created: since_vm(&vmi),
        pod_created: since_vm(&pod),
        running: since_vm(&running),
    }
}

impl Latencies {
    fn print(&self) {
        for (what, v) in [
            ("VM create -> VMI create", &self.vmi_created),
            ("VM create -> launcher pod create", &self.pod_created),
            ("VM create -> VMI Running", &self.running),
        ] {
            println!(
                "  {what:<34} p50 {:>9.1} ms  p99 {:>9.1} ms  max {:>9.1} ms  ({} VMs)",
                percentile(v, 0.5),
                percentile(v, 0.99),
                v.last().copied().unwrap_or(f64::NAN),
                v.len()
            );
        }
    }
}

/// `p` (0..=1) percentile of sorted `v` (nearest rank).
fn percentile(v: &[f64], p: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// A child's side of [`start_child`]: say `ready`, then wait until the parent closes our stdin
/// (or dies).
async fn ready_until_stdin_closes() {
    println!("ready");
    let _ = std::io::stdout().flush();
    let _ = tokio::task::spawn_blocking(|| {
        let mut sink = String::new();
        while std::io::stdin().read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    })
    .await;
}

/// The child role: run the embedded cluster until stdin closes.
fn serve_cluster(dir: PathBuf) {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(async move {
        let cluster = EmbeddedCluster::start(cluster_config(Some(&dir)))
            .await
            .expect("embedded cluster starts");
        ready_until_stdin_closes().await;
        cluster.shutdown().await;
    });
}

/// The simulated nodes alone, against the real control plane (`ROLE=nodes`), until stdin
/// closes.
fn serve_nodes(kubeconfig: PathBuf) {
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(async move {
        let cluster = cluster_config(None);
        let nodes = virtctl_rs::sim::nodes::NodeSimulator::start_from_kubeconfig(
            &kubeconfig,
            virtctl_rs::sim::nodes::NodeSimConfig {
                nodes: cluster.nodes,
                kubelet_delay: cluster.kubelet_delay,
                grace_scale: cluster.grace_scale,
                capacity: cluster.capacity,
                labels: cluster.labels,
                // The benchmark's VMs use no claims.
                bind_claims: false,
            },
        )
        .await
        .expect("simulated nodes start");
        ready_until_stdin_closes().await;
        nodes.shutdown().await;
    });
}

/// Re-execute this bench in `role` with `envs`, and wait for its `ready` line.
async fn start_child(role: &str, envs: &[(&str, &std::ffi::OsStr)]) -> Child {
    let mut cmd = Command::new(std::env::current_exe().expect("bench executable"));
    cmd.env(ROLE_ENV, role);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("child process starts");
    let stdout = child.stdout.take().expect("child stdout");
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        line
    })
    .await
    .unwrap_or_default();
    assert_eq!(line.trim(), "ready", "{role} child did not start");
    child
}

/// Where the cluster runs.
enum ClusterHandle {
    InProcess(EmbeddedCluster),
    /// The real control plane, the simulated nodes in a child process.
    Real {
        plane: &'static control_plane::ControlPlane,
        nodes: Child,
        /// Audit entries parsed so far and the file offset they end at (kube-apiserver's log
        /// of a 1,000-VM start is tens of MB: it is read incrementally, as the child's).
        audit: Vec<Audited>,
        offset: u64,
    },
    Child {
        child: Child,
        dir: tempfile::TempDir,
        /// Audit entries parsed so far and the file offset they end at.
        audit: Vec<Audited>,
        offset: u64,
    },
}

/// One audited request, as far as the bench reads it.
#[derive(Debug, Clone)]
struct Audited {
    verb: String,
    /// `resource` or `resource/subresource`.
    res: String,
    /// Object name (for a create: the name as created).
    name: String,
    /// User agent.
    ua: String,
    code: u16,
    /// Arrival time at the API server (one clock for every agent).
    time: chrono::DateTime<chrono::Utc>,
}

impl Audited {
    fn new(
        verb: &str,
        res: &str,
        sub: &str,
        name: &str,
        ua: &str,
        code: u16,
        time: chrono::DateTime<chrono::Utc>,
    ) -> Audited {
        let res = if sub.is_empty() {
            res.to_string()
        } else {
            format!("{res}/{sub}")
        };
        Audited {
            verb: verb.to_string(),
            res,
            name: name.to_string(),
            ua: ua.to_string(),
            code,
            time,
        }
    }

    /// From an audit entry of the embedded server or of kube-apiserver.
    fn from_entry(e: &virtctl_rs::sim::AuditEntry) -> Audited {
        Audited::new(
            &e.verb,
            &e.resource,
            &e.subresource,
            &e.name,
            &e.user_agent,
            e.code,
            e.time,
        )
    }

    fn ok(&self) -> bool {
        (200..300).contains(&self.code)
    }
}

impl ClusterHandle {
    async fn start(in_process: bool) -> ClusterHandle {
        if real_server() {
            let Some(plane) = control_plane::shared("controller_start") else {
                eprintln!(
                    "CONTROLLER_BENCH_SERVER=real needs the control plane: scripts/envtest.sh"
                );
                std::process::exit(2);
            };
            // The Lease's namespace and the VMs' (with its ServiceAccount, for the pods).
            plane.create_namespace("kubevirt").await;
            plane.create_namespace("default").await;
            let nodes =
                start_child("nodes", &[(KUBECONFIG_ENV, plane.kubeconfig.as_os_str())]).await;
            return ClusterHandle::Real {
                plane,
                nodes,
                audit: Vec::new(),
                offset: 0,
            };
        }
        if in_process {
            return ClusterHandle::InProcess(
                EmbeddedCluster::start(cluster_config(None))
                    .await
                    .expect("embedded cluster starts"),
            );
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let child = start_child("cluster", &[(DIR_ENV, dir.path().as_os_str())]).await;
        ClusterHandle::Child {
            child,
            dir,
            audit: Vec::new(),
            offset: 0,
        }
    }

    /// The client configuration for `agent` (its User-Agent).
    async fn config(&self, agent: &str) -> kube::Config {
        use axum::http;
        let mut config = match self {
            ClusterHandle::InProcess(c) => c.api().kube_config().await.expect("client config"),
            ClusterHandle::Real { plane, .. } => plane.kube_config(agent).await,
            ClusterHandle::Child { dir, .. } => {
                let kc = kube::config::Kubeconfig::read_from(dir.path().join("kubeconfig"))
                    .expect("child kubeconfig");
                kube::Config::from_custom_kubeconfig(
                    kc,
                    &kube::config::KubeConfigOptions::default(),
                )
                .await
                .expect("client config")
            }
        };
        config
            .headers
            .retain(|(name, _)| name != http::header::USER_AGENT);
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_str(agent).expect("agent"),
        ));
        config
    }

    async fn client(&self, agent: &str) -> kube::Client {
        kube::Client::try_from(self.config(agent).await).expect("client")
    }

    /// Every audited request from index `from` on (the child's audit file is read
    /// incrementally: only lines added since the last call are parsed).
    fn audit_since(&mut self, from: usize) -> Vec<Audited> {
        match self {
            ClusterHandle::InProcess(c) => c
                .api()
                .audit()
                .query(&virtctl_rs::sim::AuditQuery {
                    since: Some(from as u64),
                    ..Default::default()
                })
                .iter()
                .map(Audited::from_entry)
                .collect(),
            ClusterHandle::Real {
                plane,
                audit,
                offset,
                ..
            } => {
                for line in control_plane::read_new_lines(&plane.audit_log, offset) {
                    let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) else {
                        continue;
                    };
                    if let Some(e) = control_plane::audit_entry(audit.len() as u64, &event) {
                        audit.push(Audited::from_entry(&e));
                    }
                }
                audit.iter().skip(from).cloned().collect()
            }
            ClusterHandle::Child {
                dir, audit, offset, ..
            } => {
                for line in control_plane::read_new_lines(&dir.path().join("audit.jsonl"), offset) {
                    if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
                        audit.push(Audited::new(
                            &s("verb"),
                            &s("resource"),
                            &s("subresource"),
                            &s("name"),
                            &s("userAgent"),
                            v["code"].as_u64().unwrap_or(0) as u16,
                            s("time").parse().unwrap_or_default(),
                        ));
                    }
                }
                audit.iter().skip(from).cloned().collect()
            }
        }
    }

    /// Number of audited requests so far.
    fn audit_len(&mut self) -> usize {
        match self {
            ClusterHandle::InProcess(c) => c.api().audit().len(),
            ClusterHandle::Real { .. } | ClusterHandle::Child { .. } => {
                let _ = self.audit_since(usize::MAX);
                match self {
                    ClusterHandle::Child { audit, .. } | ClusterHandle::Real { audit, .. } => {
                        audit.len()
                    }
                    ClusterHandle::InProcess(_) => 0,
                }
            }
        }
    }

    fn usage(&self) -> Option<Usage> {
        match self {
            ClusterHandle::InProcess(_) => None,
            ClusterHandle::Child { child, .. } => Some(usage(&child.id().to_string())),
            // Every process of the cluster together: CPU added up, peak RSS added up.
            ClusterHandle::Real { plane, nodes, .. } => {
                let mut pids: Vec<String> = plane
                    .processes()
                    .iter()
                    .map(|(_, p)| p.to_string())
                    .collect();
                pids.push(nodes.id().to_string());
                Some(
                    pids.iter()
                        .map(|p| usage(p))
                        .fold(Usage::default(), |a, u| Usage {
                            cpu_seconds: a.cpu_seconds + u.cpu_seconds,
                            peak_rss_kib: a.peak_rss_kib + u.peak_rss_kib,
                        }),
                )
            }
        }
    }

    async fn shutdown(self) {
        match self {
            ClusterHandle::InProcess(c) => c.shutdown().await,
            ClusterHandle::Real { mut nodes, .. } => {
                drop(nodes.stdin.take());
                let _ = tokio::task::spawn_blocking(move || nodes.wait()).await;
            }
            ClusterHandle::Child { mut child, dir, .. } => {
                drop(child.stdin.take());
                let _ = tokio::task::spawn_blocking(move || child.wait()).await;
                drop(dir);
            }
        }
    }
}

/// Copies of demo-vm named `<prefix>-<i>` for `i` in `range`, each labelled with its own name.
fn vm_copies(prefix: &str, range: std::ops::Range<usize>) -> Vec<VirtualMachine> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/examples/vm-containerdisk.yaml"
    ))
    .expect("docs/examples/vm-containerdisk.yaml");
    let base: VirtualMachine = serde_yaml::from_str(&text).expect("vm-containerdisk.yaml");
    range
        .map(|i| {
            let mut vm = base.clone();
            let name = format!("{prefix}-{i:04}");
            vm.metadata.name = Some(name.clone());
            vm.metadata.namespace = Some("default".into());
            vm.metadata
                .labels
                .get_or_insert_with(Default::default)
                .insert("app.kubernetes.io/name", name.clone());
            if let Some(t) = vm.spec.template.as_mut() {
                t.metadata
                    .get_or_insert_with(Default::default)
                    .maps
                    .labels
                    .get_or_insert_with(Default::default)
                    .insert("app.kubernetes.io/name", name);
            }
            vm
        })
        .collect()
}

/// Both work queues exist (leading) and hold no queued, in-flight or parked key. Reads the
/// queues directly: `debug_state()` serialises every reconcile record, too costly to poll at
/// 1 000 VMs.
fn queues_idle(manager: &Manager) -> bool {
    let ctx = manager.context();
    [&ctx.vm_queue, &ctx.vmi_queue].iter().all(|slot| {
        slot.get().is_some_and(|q| {
            let s = q.snapshot();
            s.depth == 0 && s.in_flight.is_empty() && s.waiting.is_empty()
        })
    })
}

/// How often the main thread counts the Running VMs: every 50 ms, or less often at scale,
/// where one count reads every cached VM (about 2.4 ms at 20,000 VMs on this machine) and the
/// polling would otherwise take a visible share of the two cores.
fn poll_interval(n: usize) -> Duration {
    Duration::from_micros((n as u64 * 5).max(50_000))
}

fn running(manager: &Manager) -> usize {
    manager
        .context()
        .caches
        .vms
        .store()
        .state()
        .iter()
        .filter(|vm| {
            vm.status
                .as_ref()
                .and_then(|s| s.printable_status.as_deref())
                == Some("Running")
        })
        .count()
}

fn agent(ua: &str) -> &str {
    [
        CONTROLLER_AGENT,
        "sim-scheduler",
        "sim-kubelet",
        "sim-virt-handler",
        "garbage-collector",
        "bench-user",
    ]
    .into_iter()
    .find(|a| ua.contains(a))
    .unwrap_or("other")
}

/// Lists made during the run, by agent and resource: every informer lists once before the run
/// starts, so a list here is a relist (a watch resumed from a resourceVersion older than the
/// server's window, answered 410).
fn print_relists(audited: &[Audited]) {
    let mut lists: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    let mut gone = 0;
    for a in audited {
        if a.verb == "list" {
            *lists.entry((agent(&a.ua), a.res.as_str())).or_default() += 1;
        }
        gone += usize::from(a.code == 410);
    }
    let total: usize = lists.values().sum();
    println!("  lists during the run (relists): {total}; requests answered 410: {gone}");
    for ((agent, res), count) in &lists {
        println!("      {agent:<20} {res:<36} {count:>7}");
    }
}

/// What one run measured, for `CONTROLLER_BENCH_RECORD_COMPARE`.
struct Figures {
    /// The controller's CPU seconds during the bulk start.
    controller_cpu: f64,
    /// The flight recording's bytes (0 without one) and the VM starts it covers.
    record: (u64, usize),
}

async fn run(n: usize, in_process: bool, record: Option<PathBuf>) -> Figures {
    let me = std::process::id().to_string();
    let mut cluster = ClusterHandle::start(in_process).await;
    let ctrl = cluster.client(CONTROLLER_AGENT).await;
    let user = cluster.client("bench-user").await;
    let lease = LeaderElectionConfig::new("controller-start-bench");
    let mut config = ManagerConfig::new(lease);
    // No virt-api on the real control plane: the controller adds its VMI finalizer itself.
    config.settings.without_virt_api = real_server();
    if unlimited_client() {
        config.client_rate_limit = ClientRateLimit::Unlimited;
    }
    if let Some(dir) = &record {
        let recorder = virtctl_rs::flight::FlightRecorder::open(dir, 1 << 30, "bench");
        config.record = Some(recorder.expect("CONTROLLER_BENCH_RECORD: open the recording"));
    }
    let (vm_rec, vmi_rec) = virtctl_rs::controller::reconcilers();
    // As `run-controller` starts it: writes through their own fenced connection pool.
    let manager = Arc::new(
        Manager::start_with_write_pool(
            ctrl,
            cluster.config(CONTROLLER_AGENT).await,
            config,
            vm_rec,
            vmi_rec,
        )
        .await
        .expect("manager starts"),
    );
    let cancel = CancellationToken::new();
    let run_task = {
        let (m, c) = (manager.clone(), cancel.clone());
        tokio::spawn(async move { m.run(c).await })
    };
    let setup = Instant::now();
    while !(manager.leader_state().leading && queues_idle(&manager)) {
        assert!(setup.elapsed() < Duration::from_secs(60), "no leadership");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let audit_mark = cluster.audit_len();
    // The controller's runtime thread's arena (a task runs on a worker, not on this thread;
    // with more than one worker thread, on one of them).
    let controller_arena = tokio::spawn(async { thread_arena() }).await.ok().flatten();
    let main_arena = thread_arena();
    let rss_before = status_kib(&me, "VmRSS");
    let heap_before = jemalloc_kib();
    let arenas_before = arenas_kib();
    let ctrl_before = usage(&me);
    let cluster_before = cluster.usage();
    let vms: Api<VirtualMachine> = Api::namespaced(user.clone(), "default");
    let user_config = cluster.config("bench-user").await;
    let main_thread_before = stat_cpu_seconds(&format!("/proc/{me}/task/{me}/stat"));
    let started = Instant::now();
    // The VM-creating client runs on a thread and a runtime of its own, so that its CPU
    // (serialising the VMs, its HTTP connection, decoding the answers) can be told apart from
    // the controller's. The thread reports its CPU time when it is done.
    let creating = std::thread::Builder::new()
        .name("bench-client".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("client runtime");
            let failed = runtime.block_on(async move {
                let vms: Api<VirtualMachine> = Api::namespaced(
                    kube::Client::try_from(user_config).expect("client"),
                    "default",
                );
                futures::stream::iter(vm_copies("demo-vm", 0..n))
                    .map(|vm| {
                        let vms = vms.clone();
                        async move { vms.create(&PostParams::default(), &vm).await }
                    })
                    .buffer_unordered(IN_FLIGHT)
                    .filter(|r| std::future::ready(r.is_err()))
                    .count()
                    .await
            });
            // Its connection task stops with the runtime, on this thread.
            drop(runtime);
            (
                failed,
                stat_cpu_seconds("/proc/thread-self/stat"),
                thread_arena(),
            )
        })
        .expect("client thread");
    let mut client_cpu = 0.0;
    let mut client_arena = None;
    let mut created_at = None;
    let mut creating = Some(creating);
    let mut progress = Instant::now();
    // Until every VM is Running, or the manager stops (Lease lost: KubeVirt's behaviour is to
    // exit, and so does the manager with `OnLostLease::Exit`).
    let mut stopped: Option<String> = None;
    let all_running = loop {
        if let Some(thread) = creating.as_ref()
            && thread.is_finished()
        {
            let (failed, cpu, arena) = creating
                .take()
                .expect("thread")
                .join()
                .expect("client thread");
            assert_eq!(failed, 0, "{failed} VM creates failed");
            client_cpu = cpu;
            client_arena = arena;
            created_at = Some(started.elapsed());
        }
        let r = running(&manager);
        if r == n && creating.is_none() {
            break started.elapsed();
        }
        if run_task.is_finished() {
            stopped = Some(format!(
                "the manager stopped at {:.1} s with {r}/{n} VMs Running",
                started.elapsed().as_secs_f64()
            ));
            break started.elapsed();
        }
        if progress.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "  {:>6.1}s: {r}/{n} Running",
                started.elapsed().as_secs_f64()
            );
            progress = Instant::now();
        }
        assert!(started.elapsed() < DEADLINE, "only {r}/{n} VMs Running");
        tokio::time::sleep(poll_interval(n)).await;
    };
    // Idle: queues empty and no new write (other than Lease renewals) over 40 polls of 50 ms.
    let is_write = |a: &Audited| {
        matches!(a.verb.as_str(), "create" | "update" | "patch" | "delete")
            && !a.res.starts_with("leases")
    };
    let writes = |cluster: &mut ClusterHandle, from: usize| {
        cluster
            .audit_since(from)
            .into_iter()
            .filter(is_write)
            .collect::<Vec<_>>()
    };
    // Each poll reads only the requests audited since the previous one: this process's CPU
    // is reported as the controller's, and copying the whole audit log every 50 ms (220,000
    // entries at 10,000 VMs) was a visible share of it.
    let mut quiet = 0;
    let mut seen = cluster.audit_len();
    while quiet < 40 && stopped.is_none() {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let new = cluster.audit_since(seen);
        seen += new.len();
        quiet = if !new.iter().any(is_write) && queues_idle(&manager) {
            quiet + 1
        } else {
            0
        };
        assert!(started.elapsed() < DEADLINE, "controller never idle");
    }
    let idle_at = if stopped.is_some() {
        all_running
    } else {
        started.elapsed() - Duration::from_millis(50 * 40)
    };
    let ctrl_after = usage(&me);
    let main_thread_cpu =
        stat_cpu_seconds(&format!("/proc/{me}/task/{me}/stat")) - main_thread_before;
    let rss_after = status_kib(&me, "VmRSS");
    let heap_after = jemalloc_kib();
    let arenas_after = arenas_kib();
    let mut bench_arenas: Vec<u32> = main_arena.into_iter().chain(client_arena).collect();
    bench_arenas.dedup();
    let cluster_after = cluster.usage();

    let mut by_agent: BTreeMap<&str, BTreeMap<String, (usize, usize)>> = BTreeMap::new();
    let all = writes(&mut cluster, audit_mark);
    for a in &all {
        let slot = by_agent
            .entry(agent(&a.ua))
            .or_default()
            .entry(format!("{} {}", a.verb, a.res))
            .or_default();
        if a.ok() {
            slot.0 += 1;
        } else {
            slot.1 += 1;
        }
    }
    let total_requests = cluster.audit_len() - audit_mark;
    // Lease renewals: the longest gap between two successful controller Lease writes.
    let renewals: Vec<chrono::DateTime<chrono::Utc>> = cluster
        .audit_since(audit_mark)
        .into_iter()
        .filter(|a| {
            a.verb == "update"
                && a.res == "leases"
                && a.ua.contains(CONTROLLER_AGENT)
                && a.code == 200
        })
        .map(|a| a.time)
        .collect();
    let longest_gap = renewals
        .windows(2)
        .map(|w| (w[1] - w[0]).num_milliseconds())
        .max()
        .unwrap_or(0);

    println!(
        "\ncontroller_start: {n} VMs, {} nodes, kubelet delay {} ms, client limit {}, cluster {}",
        env_usize("CONTROLLER_BENCH_NODES", 20),
        env_usize("CONTROLLER_BENCH_KUBELET_DELAY_MS", 10),
        if unlimited_client() {
            "none"
        } else {
            "200/s burst 400"
        },
        if real_server() {
            "real (kube-apiserver v1.36 + etcd; simulated nodes in a child process)"
        } else if in_process {
            "in the bench process"
        } else {
            "in a child process"
        }
    );
    if let Some(c) = created_at {
        println!("  all {n} VM creates answered: {:.2} s", c.as_secs_f64());
    }
    match &stopped {
        Some(why) => println!("  NOT CONVERGED: {why}"),
        None => println!(
            "  all Running: {:.2} s   controller idle: {:.2} s",
            all_running.as_secs_f64(),
            idle_at.as_secs_f64()
        ),
    }
    println!(
        "  Lease renewals: {}, longest gap between two: {:.1} s (renew deadline 10 s)",
        renewals.len(),
        longest_gap as f64 / 1000.0
    );
    println!(
        "  API requests (all agents, incl. reads/watches): {total_requests} ({:.1} per VM)",
        total_requests as f64 / n as f64
    );
    print_relists(&cluster.audit_since(audit_mark));
    for (a, kinds) in &by_agent {
        let ok: usize = kinds.values().map(|v| v.0).sum();
        let failed: usize = kinds.values().map(|v| v.1).sum();
        println!(
            "  writes by {a}: {ok} ok ({:.2} per VM), {failed} failed ({:.2} per VM)",
            ok as f64 / n as f64,
            failed as f64 / n as f64
        );
        for (k, (ok, failed)) in kinds {
            println!(
                "      {k:<36} {:>7.2} ok/VM {:>7.2} failed/VM",
                *ok as f64 / n as f64,
                *failed as f64 / n as f64
            );
        }
    }
    let label = if in_process {
        "bench process (controller + cluster + client)"
    } else {
        "controller process (controller + VM-creating client)"
    };
    let process_cpu = ctrl_after.cpu_seconds - ctrl_before.cpu_seconds;
    println!(
        "  {label}: CPU {process_cpu:.2} s during the run, peak RSS {:.1} MiB",
        ctrl_after.peak_rss_kib as f64 / 1024.0
    );
    // Every thread but the client's and the main one (this function: the polling) is the
    // runtime the manager runs on, and jemalloc's.
    let controller_cpu = process_cpu - client_cpu - main_thread_cpu;
    println!(
        "    of which the {}: {controller_cpu:.2} s ({:.2} ms per VM); the VM-creating client's \
         thread {client_cpu:.2} s, the bench's polling (main thread) {main_thread_cpu:.2} s",
        if in_process {
            "controller's and the cluster's threads"
        } else {
            "controller's threads"
        },
        1000.0 * controller_cpu / n as f64
    );
    if !in_process {
        println!(
            "  controller process RSS: {:.1} MiB leading with no VM, {:.1} MiB idle with {n}: \
             {:.1} KiB per VM (VM + VMI + launcher pod cached, queues, expectations, records)",
            rss_before as f64 / 1024.0,
            rss_after as f64 / 1024.0,
            rss_after.saturating_sub(rss_before) as f64 / n as f64
        );
        if let (Some((alloc_b, res_b)), Some((alloc_a, res_a))) = (heap_before, heap_after) {
            println!(
                "  controller process heap (jemalloc): {:.1} → {:.1} MiB allocated ({:.1} KiB per \
                 VM live), {:.1} → {:.1} MiB resident ({:.1} KiB per VM)",
                alloc_b as f64 / 1024.0,
                alloc_a as f64 / 1024.0,
                alloc_a.saturating_sub(alloc_b) as f64 / n as f64,
                res_b as f64 / 1024.0,
                res_a as f64 / 1024.0,
                res_a.saturating_sub(res_b) as f64 / n as f64
            );
            let bench_before = sum_arenas(&arenas_before, &bench_arenas);
            let bench_after = sum_arenas(&arenas_after, &bench_arenas);
            let per_vm = |after: u64, before: u64| after.saturating_sub(before) as f64 / n as f64;
            if controller_arena.is_some_and(|a| bench_arenas.contains(&a)) || main_arena.is_none() {
                println!("    (the bench's threads share an arena with the controller: no split)");
            } else {
                println!(
                    "    of which the controller's arenas: {:.1} KiB per VM live, {:.1} KiB per \
                     VM resident; the bench's own (arenas {bench_arenas:?}: the audit log's copy, \
                     polling, the VM-creating client) {:.1} live, {:.1} resident",
                    per_vm(
                        alloc_a.saturating_sub(bench_after.0),
                        alloc_b.saturating_sub(bench_before.0)
                    ),
                    per_vm(
                        res_a.saturating_sub(bench_after.1),
                        res_b.saturating_sub(bench_before.1)
                    ),
                    per_vm(bench_after.0, bench_before.0),
                    per_vm(bench_after.1, bench_before.1),
                );
            }
        }
    }
    start_latencies(&cluster.audit_since(audit_mark)).print();
    if let (Some(b), Some(a)) = (cluster_before, cluster_after) {
        println!(
            "  cluster processes (API server, etcd and controller-manager when real; simulated nodes): CPU {:.2} s during the run, peak RSS {:.1} MiB",
            a.cpu_seconds - b.cpu_seconds,
            a.peak_rss_kib as f64 / 1024.0
        );
    }

    let mut starts = n;
    if stopped.is_none() {
        paced_starts(&manager, &mut cluster, &vms).await;
        starts += paced_count();
    }

    cancel.cancel();
    if let Ok(Err(e)) = run_task.await {
        println!("  manager: {e}");
    }
    drop(manager);
    let mut bytes = 0;
    if let Some(dir) = &record {
        let mut files = 0;
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            bytes += entry.metadata().map_or(0, |m| m.len());
            files += 1;
        }
        println!(
            "  flight recording: {bytes} bytes in {files} segment(s), {:.0} bytes per VM start \
             ({starts} starts: bulk and paced)",
            bytes as f64 / starts as f64
        );
    }
    cluster.shutdown().await;
    Figures {
        controller_cpu,
        record: (bytes, starts),
    }
}

/// `CONTROLLER_BENCH_RECORD_COMPARE=ROUNDS`: the recorder's cost, side by side. Each round
/// runs the start without and with a flight recording (in alternating order, so a drift of the
/// machine's load falls on both), and the summary gives the controller's CPU per VM start of
/// each, and the recording's bytes per VM start, with the load average before and after.
async fn compare_recording(n: usize, in_process: bool, rounds: usize) {
    let load = || std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load_before = load();
    let (mut without, mut with, mut bytes) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for recording in order {
            println!(
                "round {}: {}",
                round + 1,
                if recording {
                    "with --record"
                } else {
                    "without"
                }
            );
            let dir = tempfile::tempdir().expect("tempdir");
            let f = run(n, in_process, recording.then(|| dir.path().to_path_buf())).await;
            let ms_per_vm = 1000.0 * f.controller_cpu / n as f64;
            if recording {
                with.push(ms_per_vm);
                bytes.push(f.record.0 as f64 / f.record.1 as f64);
            } else {
                without.push(ms_per_vm);
            }
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let list = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "\nrecorder cost, {rounds} round(s) of {n} VMs (controller CPU during the bulk start):"
    );
    println!(
        "  without --record: {:.2} ms per VM start ({})",
        mean(&without),
        list(&without)
    );
    println!(
        "  with --record:    {:.2} ms per VM start ({})",
        mean(&with),
        list(&with)
    );
    println!(
        "  difference: {:+.2} ms per VM start ({:+.0}%); recording {:.0} bytes per VM start",
        mean(&with) - mean(&without),
        100.0 * (mean(&with) / mean(&without) - 1.0),
        mean(&bytes)
    );
    println!(
        "  load average before: {}  after: {}",
        load_before.trim(),
        load().trim()
    );
}

fn paced_count() -> usize {
    if benching() {
        env_usize("CONTROLLER_BENCH_PACED", 100)
    } else {
        5
    }
}

/// Start-latency on an idle controller: `CONTROLLER_BENCH_PACED` (default 100; 5 under test)
/// more VMs, each created once the previous one is Running and both queues are idle, so no
/// VM waits behind another in a queue. The bulk start's percentiles measure the backlog; these
/// measure one VM's path (watch event, queue, reconcile, create) on loopback. Timestamps come
/// from the API server's audit log, as for the bulk start.
async fn paced_starts(manager: &Manager, cluster: &mut ClusterHandle, vms: &Api<VirtualMachine>) {
    let count = paced_count();
    if count == 0 {
        return;
    }
    let mark = cluster.audit_len();
    let started = Instant::now();
    let store = manager.context().caches.vms.store().clone();
    for (i, vm) in vm_copies("paced-vm", 0..count).into_iter().enumerate() {
        vms.create(&PostParams::default(), &vm)
            .await
            .expect("paced VM create");
        // This VM only: counting every cached VM each millisecond would take CPU from the
        // controller whose latency is measured.
        let key = kube::runtime::reflector::ObjectRef::from_obj(&vm);
        let vm_running = || {
            store.get(&key).is_some_and(|v| {
                v.status
                    .as_ref()
                    .and_then(|s| s.printable_status.as_deref())
                    == Some("Running")
            })
        };
        while !(vm_running() && queues_idle(manager)) {
            assert!(started.elapsed() < DEADLINE, "paced VM {i} never Running");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    println!("  paced starts ({count} VMs, one at a time on the idle controller):");
    start_latencies(&cluster.audit_since(mark)).print();
}

/// `cargo test --benches` passes no `--bench`; `cargo bench` does.
fn benching() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test")
}

/// `CONTROLLER_BENCH_CLIENT_LIMIT=none`: the controller's API client is not rate-limited
/// (otherwise KubeVirt's 200 requests/s, burst 400).
fn unlimited_client() -> bool {
    std::env::var("CONTROLLER_BENCH_CLIENT_LIMIT").is_ok_and(|v| v == "none")
}

/// `CONTROLLER_BENCH_SERVER=real`: the run is on the real control plane.
fn real_server() -> bool {
    std::env::var("CONTROLLER_BENCH_SERVER").is_ok_and(|v| v == "real")
}

fn main() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("nodes") {
        let kubeconfig = std::env::var_os(KUBECONFIG_ENV).expect("CONTROLLER_BENCH_KUBECONFIG");
        serve_nodes(PathBuf::from(kubeconfig));
        return;
    }
    if std::env::var(ROLE_ENV).as_deref() == Ok("cluster") {
        let dir = std::env::var_os(DIR_ENV).expect("CONTROLLER_BENCH_DIR");
        serve_cluster(PathBuf::from(dir));
        return;
    }
    let n = if benching() {
        env_usize("CONTROLLER_BENCH_VMS", 1000)
    } else {
        20
    };
    let in_process = std::env::var("CONTROLLER_BENCH_IN_PROCESS").is_ok_and(|v| v == "1");
    // The controller's runtime as `run-controller` builds it: against a cluster (here the
    // child process) its default threads; in-process the cluster shares the runtime, as
    // with `run-controller --embedded`. `CONTROLLER_BENCH_WORKER_THREADS` is
    // `--worker-threads`.
    let requested = std::env::var("CONTROLLER_BENCH_WORKER_THREADS")
        .ok()
        .map(|v| {
            v.parse::<usize>()
                .unwrap_or_else(|e| panic!("CONTROLLER_BENCH_WORKER_THREADS={v:?}: {e}"))
        });
    let threads = virtctl_rs::cli::run_controller::threads_for(requested, in_process);
    eprintln!(
        "controller runtime: {} worker thread(s)",
        threads.map_or_else(|| "one per CPU".to_string(), |n| n.to_string())
    );
    let runtime = virtctl_rs::cli::run_controller::controller_runtime(threads)
        .unwrap_or_else(|e| panic!("controller runtime with {threads:?} worker threads: {e}"));
    let rounds = std::env::var("CONTROLLER_BENCH_RECORD_COMPARE")
        .ok()
        .map(|v| {
            v.parse::<usize>()
                .unwrap_or_else(|e| panic!("CONTROLLER_BENCH_RECORD_COMPARE={v:?}: {e}"))
        });
    match rounds {
        Some(rounds) => runtime.block_on(compare_recording(n, in_process, rounds)),
        None => {
            let record = std::env::var_os("CONTROLLER_BENCH_RECORD").map(PathBuf::from);
            runtime.block_on(run(n, in_process, record));
        }
    }
}
