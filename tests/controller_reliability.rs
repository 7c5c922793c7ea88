//! The controller against a lagging watch cache and a flaky API server.
//!
//! Eight copies of the project's `demo-vm` (docs/examples/vm-containerdisk.yaml, runStrategy
//! Always) are started while every watch of
//! the controller delivers its events 300-800 ms late (a different lag per resource: the VMI
//! cache trails the VM cache, so the controller reacts to its own VM writes before it sees the
//! VMI it created) and a seeded fraction of the
//! controller's writes to VMs, VMIs, pods and ControllerRevisions fail with 500, 503, 429 or an
//! injected 409 Conflict. Faults are scoped to the controller's user agent, so the simulated
//! scheduler, kubelet and virt-handler are unaffected.
//!
//! What must hold: every VM gets exactly one VMI and exactly one virt-launcher pod — counted
//! from the API server's audit log (successful creates, per VM name), and no VMI create is ever
//! answered `409 AlreadyExists` (that is the controller creating a VMI its stale cache did not
//! show yet) — and every VM reaches `printableStatus: Running`.
//!
//! This is what the expectations are for (KubeVirt pkg/controller/expectations.go; VM controller
//! vm.go:3225-3227 and 3303-3308, VMI controller vmi.go:320-327): with the VM controller's
//! expectations gate bypassed, this scenario shows duplicate VMI create attempts in the audit log.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::env::{CONTROLLER_AGENT, Env, EnvConfig};
use common::one_per_vm::{assert_one_at_a_time, pod_vm};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::sim::cluster::EmbeddedCluster;
use virtctl_rs::sim::{ApiServerConfig, AuditQuery, FaultRule, Verb};

const NAMESPACE: &str = "default";
const VMS: usize = 8;
const FAULT_SEED: u64 = 0x5eed_1a66;
const DEADLINE: Duration = Duration::from_secs(120);
const POLL: Duration = Duration::from_millis(50);
/// Consecutive polls with the controller idle and its caches current before counting.
const QUIET_POLLS: u32 = 10;

/// Watch lag of the controller's informers, per resource.
/// The VMI cache trails the VM cache, so the VM controller's reaction to its own VM writes
/// comes before the VMI it created is visible (the revision cache is the quickest: a lagging
/// revision would make a second start fail early on the revision's AlreadyExists instead); the
/// pod cache trails the VMI cache likewise for the VMI controller.
const WATCH_LAG: [(&str, u64); 4] = [
    ("virtualmachines", 400),
    ("virtualmachineinstances", 800),
    ("pods", 700),
    ("controllerrevisions", 300),
];
/// Resources whose controller writes get injected failures.
const FAULTED: [&str; 4] = [
    "virtualmachines",
    "virtualmachineinstances",
    "pods",
    "controllerrevisions",
];

fn vm_name(i: usize) -> String {
    format!("demo-vm-{i}")
}

/// `demo-vm` from docs/examples/vm-containerdisk.yaml, renamed.
fn demo_vm(name: &str) -> VirtualMachine {
    let mut vm = common::example_vm("vm-containerdisk.yaml");
    vm.metadata.name = Some(name.to_string());
    if let Some(labels) = vm.metadata.labels.as_mut() {
        labels.insert("app.kubernetes.io/name", name.to_string());
    }
    if let Some(labels) = vm
        .spec
        .template
        .as_mut()
        .and_then(|t| t.metadata.as_mut())
        .and_then(|m| m.maps.labels.as_mut())
    {
        labels.insert("app.kubernetes.io/name", name.to_string());
    }
    vm
}

fn install_faults(cluster: &EmbeddedCluster) {
    let faults = cluster.api().faults();
    for (resource, lag_ms) in WATCH_LAG {
        faults.add(
            FaultRule::delay_watch_events(Duration::from_millis(lag_ms))
                .resource(resource)
                .user_agent(CONTROLLER_AGENT),
        );
    }
    let writes = [Verb::Create, Verb::Update, Verb::Patch];
    for resource in FAULTED {
        let scoped = |rule: FaultRule| rule.resource(resource).user_agent(CONTROLLER_AGENT);
        faults.add(scoped(FaultRule::conflict().probability(0.10)));
        faults.add(scoped(
            FaultRule::error(500).verbs(&writes).probability(0.08),
        ));
        faults.add(scoped(
            FaultRule::error(503).verbs(&writes).probability(0.05),
        ));
        faults.add(scoped(
            FaultRule::too_many_requests(1)
                .verbs(&writes)
                .probability(0.03),
        ));
    }
}

/// VM name → printableStatus, from the server.
async fn printable_statuses(client: &kube::Client) -> BTreeMap<String, String> {
    Api::<VirtualMachine>::namespaced(client.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .map(|vm| {
                    (
                        vm.metadata.name.clone().unwrap_or_default(),
                        vm.status
                            .and_then(|s| s.printable_status)
                            .unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_vmi_and_one_pod_per_vm_under_lagging_cache_and_api_errors() {
    let mut config = EnvConfig::new("reliability-test").long_lease(Duration::from_millis(500));
    config.cluster.api = ApiServerConfig {
        fault_seed: FAULT_SEED,
        ..Default::default()
    };
    config.user_agent = Some("test-user");
    config.namespace = NAMESPACE.into();
    config.deadline = DEADLINE;
    let env = Env::start_with(config, install_faults).await;
    let user = env.client.clone();
    let api = env.cluster().api();
    env.wait_leading_and_idle().await;

    let vms: Api<VirtualMachine> = Api::namespaced(user.clone(), NAMESPACE);
    for i in 0..VMS {
        vms.create(&PostParams::default(), &demo_vm(&vm_name(i)))
            .await
            .expect("VM created");
    }

    // Converge: every VM Running, then the controller idle with current caches for a while (a
    // late duplicate create would show up in that window).
    let started = Instant::now();
    let mut quiet = 0;
    loop {
        let statuses = printable_statuses(&user).await;
        let all_running = statuses.len() == VMS && statuses.values().all(|s| s == "Running");
        let idle = all_running && env.queues_idle() && env.caches_current().await;
        quiet = if idle { quiet + 1 } else { 0 };
        if quiet >= QUIET_POLLS {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "not converged after {DEADLINE:?}: printable statuses {statuses:?}\nqueues idle: {}",
            env.queues_idle()
        );
        tokio::time::sleep(POLL).await;
    }

    let audit = api.audit().entries();
    // The faults did fire (otherwise this test proves nothing).
    let injected = api.audit().query(&AuditQuery {
        writes_only: true,
        user_agent: Some(CONTROLLER_AGENT.into()),
        ..Default::default()
    });
    let failed_writes = injected
        .iter()
        .filter(|e| matches!(e.code, 409 | 429 | 500 | 503))
        .count();
    assert!(
        failed_writes >= 10,
        "only {failed_writes} controller writes failed: the faults did not bite"
    );

    // Exactly one successful VMI create and one launcher pod create per VM, no VMI create
    // refused as AlreadyExists, never two launcher pods of one VM.
    let want: BTreeMap<String, usize> = (0..VMS).map(|i| (vm_name(i), 1)).collect();
    assert_one_at_a_time(&audit, CONTROLLER_AGENT, &want);

    // And the live objects agree: one VMI per VM, one pod per VMI (by controller owner UID).
    let vmis = Api::<VirtualMachineInstance>::namespaced(user.clone(), NAMESPACE)
        .list(&ListParams::default())
        .await
        .expect("list VMIs");
    assert_eq!(vmis.items.len(), VMS);
    let pods = Api::<Pod>::namespaced(user.clone(), NAMESPACE)
        .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
        .await
        .expect("list pods");
    for vmi in &vmis.items {
        let owned = pods
            .items
            .iter()
            .filter(|p| {
                p.metadata.owner_references.iter().flatten().any(|r| {
                    r.controller == Some(true) && Some(&r.uid) == vmi.metadata.uid.as_ref()
                })
            })
            .count();
        assert_eq!(owned, 1, "pods owned by VMI {:?}", vmi.metadata.name);
    }
    println!(
        "converged in {:.1} s with {failed_writes} failed controller writes ({} writes, {} requests in all)",
        started.elapsed().as_secs_f64(),
        injected.len(),
        audit.len()
    );

    env.shutdown().await;
}

#[test]
fn pod_vm_names() {
    assert_eq!(pod_vm("virt-launcher-demo-vm-1-abcde"), Some("demo-vm-1"));
    assert_eq!(pod_vm("virt-launcher-demo-vm-10-x7k2p"), Some("demo-vm-10"));
    assert_eq!(pod_vm("virt-launcher-x"), None);
    assert_eq!(pod_vm("something-else"), None);
}

/// A controller started before its API server answers: `Manager::start` returns at once (so
/// `run-controller` binds its endpoints and obeys SIGTERM), and the optional APIs it asks
/// discovery about are watched once the server comes up. Before, a failed discovery request
/// switched its informer off for good: DataVolumes (and snapshot classes, instancetypes, the
/// KubeVirt CR) were never seen by a controller that started first.
#[tokio::test]
async fn a_controller_started_before_its_api_server_watches_the_optional_apis() {
    use virtctl_rs::controller::manager::{Manager, ManagerConfig};
    use virtctl_rs::runtime::lease::LeaderElectionConfig;
    use virtctl_rs::sim::ApiServer;

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}").parse().expect("url");
    let client = kube::Client::try_from(kube::Config::new(url)).expect("client");
    let (vm, vmi) = virtctl_rs::controller::reconcilers();
    let config = ManagerConfig::new(LeaderElectionConfig::new("early-bird"));
    let manager = tokio::time::timeout(DEADLINE, Manager::start(client, config, vm, vmi))
        .await
        .expect("Manager::start does not wait for the API server")
        .expect("manager starts");
    let server = ApiServer::start(ApiServerConfig {
        port,
        require_token: false,
        ..Default::default()
    })
    .await
    .expect("the API server comes up on the port the controller was given");
    let dv: virtctl_rs::api::DataVolume = serde_json::from_value(serde_json::json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "late-dv", "namespace": NAMESPACE},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}}
    }))
    .expect("DataVolume");
    let client = server.client().await.expect("client");
    Api::<virtctl_rs::api::DataVolume>::namespaced(client, NAMESPACE)
        .create(&PostParams::default(), &dv)
        .await
        .expect("create the DataVolume");
    let cached = common::poll_until(DEADLINE, || async {
        let dvs = manager.context().caches.data_volumes.store().state();
        (!dvs.is_empty()).then_some(dvs.len())
    })
    .await;
    assert_eq!(cached, Some(1), "the DataVolume informer never started");
    server.shutdown().await;
}
