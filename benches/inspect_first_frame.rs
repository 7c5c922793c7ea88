//! First frame of the inspector on a 10,000-VM embedded cluster: the time from connecting
//! (building a fresh client) to the first frame drawn, for the VM view (`inspect vm/NAME`:
//! by-name reads, the leader's `/debug/state?key=`) and for the fleet view's first page
//! (`inspect`: one list each of VMs, VMIs and launcher pods, the leader's `/debug/state`).
//!
//! A plain `fn main` bench (`harness = false`): the setup (10,000 VMs, the controller leading
//! and idle) is a scenario, not something criterion can loop. The VMs are `runStrategy: Halted`
//! copies of one small VM, created through the API (64 in flight) on a cluster with no nodes;
//! the real controller (our `run-controller`, KubeVirt's Lease) reconciles them all to
//! `Stopped` before the measurement starts. Each view is then measured `ROUNDS` times: new
//! client → gather → `draw` into a 140x44 ratatui `TestBackend` (the same draw the terminal
//! runs). Reported: min / median / max, and how many rounds were within 200 ms.
//!
//! Knobs: `INSPECT_BENCH_VMS` (default 10000). Under `cargo test --benches`, 50 VMs.
//! Run: `cargo bench --bench inspect_first_frame`. Figures: docs/performance.md ("Inspector
//! first frame, 10,000 VMs").

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::Api;
use kube::api::PostParams;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::VirtualMachine;
use virtctl_rs::controller::manager::{Manager, ManagerConfig};
use virtctl_rs::inspect::tui::cluster::ClusterGather;
use virtctl_rs::inspect::tui::{App, Gather, app_for_fleet, app_for_vm, capture};
use virtctl_rs::inspect::{GatherOptions, gather_fleet, gather_vm};
use virtctl_rs::runtime::lease::LeaderElectionConfig;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};

const ROUNDS: usize = 15;
const IN_FLIGHT: usize = 64;
const BUDGET: Duration = Duration::from_millis(200);

fn vm(i: usize) -> VirtualMachine {
    let name = format!("vm-{i:05}");
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": "default", "labels": {"kubevirt.io/vm": name}},
        "spec": {
            "runStrategy": "Halted",
            "template": {
                "metadata": {"labels": {"kubevirt.io/vm": name}},
                "spec": {
                    "domain": {"memory": {"guest": "128Mi"}, "devices": {}},
                    "volumes": [{"name": "rootdisk",
                                 "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}]
                }
            }
        }
    }))
    .expect("a valid VirtualMachine")
}

fn stopped(manager: &Manager) -> usize {
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
                == Some("Stopped")
        })
        .count()
}

fn queues_idle(manager: &Manager) -> bool {
    let ctx = manager.context();
    [&ctx.vm_queue, &ctx.vmi_queue].iter().all(|slot| {
        slot.get().is_some_and(|q| {
            let s = q.snapshot();
            s.depth == 0 && s.in_flight.is_empty() && s.waiting.is_empty()
        })
    })
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let within = times.iter().filter(|t| **t <= BUDGET).count();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "{what}: min {:.1} ms, median {:.1} ms, max {:.1} ms; {within}/{} rounds within {} ms",
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1]),
        times.len(),
        BUDGET.as_millis()
    );
}

async fn run(n: usize) {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: 0,
        ..Default::default()
    })
    .await
    .expect("embedded cluster");
    let user = cluster.client().await.expect("client");
    let setup = Instant::now();
    let vms: Api<VirtualMachine> = Api::namespaced(user.clone(), "default");
    let failures = futures::stream::iter(0..n)
        .map(|i| {
            let vms = vms.clone();
            async move { vms.create(&PostParams::default(), &vm(i)).await.err() }
        })
        .buffer_unordered(IN_FLIGHT)
        .filter_map(|e| async move { e })
        .collect::<Vec<_>>()
        .await;
    assert!(
        failures.is_empty(),
        "VM creates failed: {:?}",
        failures.first()
    );
    println!("{n} VMs created in {:.1} s", setup.elapsed().as_secs_f64());

    let config = ManagerConfig {
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..ManagerConfig::new(LeaderElectionConfig::new("inspect-bench"))
    };
    let (vm_rec, vmi_rec) = virtctl_rs::controller::reconcilers();
    let manager = Arc::new(
        Manager::start(user.clone(), config, vm_rec, vmi_rec)
            .await
            .expect("manager starts"),
    );
    let cancel = CancellationToken::new();
    let run_task = {
        let (m, c) = (manager.clone(), cancel.clone());
        tokio::spawn(async move { m.run(c).await })
    };
    let reconciling = Instant::now();
    while !(manager.leader_state().leading && stopped(&manager) == n && queues_idle(&manager)) {
        assert!(
            reconciling.elapsed() < Duration::from_secs(1800),
            "the controller did not reconcile every VM to Stopped"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "controller leading, {n} VMs Stopped, queues idle after {:.1} s",
        reconciling.elapsed().as_secs_f64()
    );

    let opts = GatherOptions::default();
    let target = format!("vm-{:05}", n / 2);
    let mut vm_times = Vec::new();
    let mut fleet_times = Vec::new();
    let mut fleet_gather = Vec::new();
    let mut fleet_draw = Vec::new();
    let mut page_times = Vec::new();
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let client = cluster.client().await.expect("client");
        let insp = gather_vm(&client, "default", &target, &opts)
            .await
            .expect("gather vm");
        let frame = capture(&app_for_vm(insp), 140, 44);
        vm_times.push(start.elapsed());
        assert!(frame.contains(&target), "the frame shows the VM");

        let start = Instant::now();
        let client = cluster.client().await.expect("client");
        let fleet = gather_fleet(&client, None, &opts)
            .await
            .expect("gather fleet");
        let gathered = start.elapsed();
        let rows = fleet.rows.len();
        let frame = capture(&app_for_fleet(fleet), 140, 44);
        fleet_times.push(start.elapsed());
        fleet_gather.push(gathered);
        fleet_draw.push(start.elapsed() - gathered);
        assert_eq!(rows, n, "every VM is a row");
        assert!(
            frame.contains("VirtualMachines 1-"),
            "the first page is drawn"
        );
    }
    // Where gather_fleet's time goes: its two largest reads, alone.
    let mut list_times = Vec::new();
    let mut state_times = Vec::new();
    let state_url = format!(
        "http://{}/debug/state",
        manager.listen_addr().expect("the debug endpoint listens")
    );
    for _ in 0..ROUNDS {
        let client = cluster.client().await.expect("client");
        let start = Instant::now();
        let all: Api<VirtualMachine> = Api::all(client);
        let listed = all.list(&Default::default()).await.expect("list VMs");
        list_times.push(start.elapsed());
        assert_eq!(listed.items.len(), n);
        let start = Instant::now();
        let (code, body) =
            virtctl_rs::inspect::gather::http_get(&state_url, Duration::from_secs(10))
                .await
                .expect("GET /debug/state");
        state_times.push(start.elapsed());
        assert_eq!(code, 200, "{}", &body[..body.len().min(200)]);
    }
    // The fleet view's real first frame: a page (38 rows at 44 lines) while the whole fleet
    // is gathered.
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let gather = ClusterGather {
            client: cluster.client().await.expect("client"),
            namespace: None,
            options: opts.clone(),
            shadow: None,
        };
        let page = gather
            .fleet_page(virtctl_rs::inspect::tui::state::fleet_page(44))
            .await
            .expect("gather the first page");
        let mut app = App::fleet();
        app.resize(140, 44);
        app.set_fleet_page(page, chrono::Utc::now());
        let frame = capture(&app, 140, 44);
        page_times.push(start.elapsed());
        assert!(
            frame.contains("vm-00000"),
            "the first page is drawn:\n{frame}"
        );
    }
    report(&format!("VM view, {n} VMs"), vm_times);
    report(
        &format!("fleet view first frame (first page), {n} VMs"),
        page_times,
    );
    report(
        &format!("fleet view, whole fleet problems first, {n} VMs"),
        fleet_times,
    );
    report("  of which gather_fleet", fleet_gather);
    report("  of which the App and its first frame", fleet_draw);
    report("list of every VirtualMachine alone", list_times);
    report("GET /debug/state (full document) alone", state_times);

    cancel.cancel();
    let _ = run_task.await;
    cluster.shutdown().await;
}

fn main() {
    // `cargo test --benches` passes no `--bench`; `cargo bench` does.
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let n = if benching {
        std::env::var("INSPECT_BENCH_VMS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000)
    } else {
        50
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(run(n));
}
