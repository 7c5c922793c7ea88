//! `explain-overhead -A` on a 10,000-VMI embedded cluster: the time of the whole audit (one
//! list each of launcher pods, VMIs, namespaces and ResourceQuotas, the KubeVirt CR, then the
//! formula and the renderer for every pod), the number of API requests it made (it must not
//! grow with the fleet), and its cost per pod.
//!
//! A plain `fn main` bench (`harness = false`). The set-up is a cluster with no nodes and no
//! controller: VMIs created through the API (64 in flight), each with the launcher pod our
//! renderer makes for it (every 10th with its memory request changed by hand, so the audit has
//! findings to sort). Measured `ROUNDS` times with a fresh client each: min / median / max.
//!
//! Knobs: `OVERHEAD_AUDIT_VMS` (default 10000). Under `cargo test --benches`, 50 VMIs.
//! Run: `cargo bench --bench overhead_audit`. Figures: docs/performance.md ("`explain-overhead
//! -A`, 10,000 launcher pods").

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::PostParams;
use virtctl_rs::api::VirtualMachineInstance;
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::controller::vmi::executor::render_pod_with;
use virtctl_rs::inspect::GatherOptions;
use virtctl_rs::inspect::overhead::gather_audit;
use virtctl_rs::launcher::resources::NamespaceContext;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};

const ROUNDS: usize = 5;
const IN_FLIGHT: usize = 64;
const AGENT: &str = "overhead-audit-bench";

fn vmi(i: usize) -> VirtualMachineInstance {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": format!("vmi-{i:05}"), "namespace": format!("ns-{}", i % 10)},
        "spec": {"domain": {"devices": {}, "cpu": {"cores": 1 + (i % 4) as u32},
                             "resources": {"requests": {"memory": "1Gi"}}}}
    }))
    .expect("a valid VMI")
}

async fn create_one(client: kube::Client, i: usize) {
    let v = vmi(i);
    let ns = v.metadata.namespace.clone().unwrap_or_default();
    let created = Api::<VirtualMachineInstance>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &v)
        .await
        .expect("create VMI");
    let pod = render_pod_with(
        &ClusterSettings::default(),
        &NamespaceContext::default(),
        &created,
    )
    .expect("render");
    let mut value = serde_json::to_value(&pod).expect("pod JSON");
    value["metadata"]["name"] = serde_json::json!(format!("virt-launcher-vmi-{i:05}-abcde"));
    if i.is_multiple_of(10) {
        for c in value["spec"]["containers"]
            .as_array_mut()
            .expect("containers")
        {
            if c["name"] == "compute" {
                c["resources"]["requests"]["memory"] = serde_json::json!("3Gi");
            }
        }
    }
    let pod: Pod = serde_json::from_value(value).expect("pod");
    Api::<Pod>::namespaced(client, &ns)
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod");
}

async fn run(n: usize) {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: 0,
        ..Default::default()
    })
    .await
    .expect("embedded cluster");
    let client = cluster.client().await.expect("client");
    for i in 0..10 {
        let ns: k8s_openapi::api::core::v1::Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": format!("ns-{i}")}}))
                .expect("namespace");
        let _ = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await;
    }
    let started = Instant::now();
    futures::stream::iter(0..n)
        .map(|i| create_one(client.clone(), i))
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
    println!(
        "set-up: {n} VMIs with their launcher pods in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let opts = GatherOptions::default();
    let mut times = Vec::new();
    let mut flagged = 0;
    let mut checked = 0;
    let before = cluster.api().audit().len() as u64;
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let auditor = cluster
            .api()
            .client_with_agent(AGENT)
            .await
            .expect("audit client");
        let report = gather_audit(&auditor, None, &opts, None, &mut |_| {})
            .await
            .expect("audit");
        times.push(t.elapsed());
        flagged = report.findings.len();
        checked = report.pods_checked;
    }
    let requests = cluster
        .api()
        .audit()
        .query(&virtctl_rs::sim::AuditQuery {
            since: Some(before),
            ..Default::default()
        })
        .iter()
        .filter(|e| e.user_agent.starts_with(AGENT))
        .count();
    assert_eq!(checked, n, "every pod checked");
    assert_eq!(flagged, n.div_ceil(10), "every edited pod flagged");
    times.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "explain-overhead -A over {n} launcher pods: min {:.0} ms, median {:.0} ms, max {:.0} ms \
         ({:.1} µs per pod at the median); {} API requests per audit; {flagged} findings",
        ms(times[0]),
        ms(times[times.len() / 2]),
        ms(times[times.len() - 1]),
        times[times.len() / 2].as_secs_f64() * 1e6 / n as f64,
        requests / ROUNDS,
    );
    cluster.shutdown().await;
}

fn main() {
    // `cargo test --benches` passes no `--bench`; `cargo bench` does.
    let args: Vec<String> = std::env::args().collect();
    let benching = args.iter().any(|a| a == "--bench") && !args.iter().any(|a| a == "--test");
    let n = if benching {
        std::env::var("OVERHEAD_AUDIT_VMS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(10_000)
    } else {
        50
    };
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    runtime.block_on(run(n));
}
