//! The controller against a lagging watch cache and a flaky API server.
//!
//! Eight copies of KubeVirt's `vm-cirros` (runStrategy Always) are started while every watch of
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

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use tokio_util::sync::CancellationToken;
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::controller::manager::{Manager, ManagerConfig, OnLostLease};
use virtctl_rs::runtime::lease::LeaderElectionConfig;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use virtctl_rs::sim::{ApiServerConfig, AuditEntry, AuditQuery, FaultRule, Verb};

const CONTROLLER_AGENT: &str = "virt-controller";
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
    format!("vm-cirros-{i}")
}

/// `vm-cirros` from KubeVirt's examples, renamed.
fn vm_cirros(name: &str) -> VirtualMachine {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/examples/vm-cirros.yaml"
    ))
    .expect("docs/examples/vm-cirros.yaml is readable");
    let mut vm: VirtualMachine =
        serde_yaml::from_str(&text).expect("vm-cirros.yaml is a VirtualMachine");
    vm.metadata.name = Some(name.to_string());
    for labels in [
        vm.metadata.labels.as_mut(),
        vm.spec
            .template
            .as_mut()
            .and_then(|t| t.metadata.as_mut())
            .and_then(|m| m.labels.as_mut()),
    ]
    .into_iter()
    .flatten()
    {
        labels.insert("kubevirt.io/vm".into(), name.to_string());
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

fn manager_config() -> ManagerConfig {
    let mut lease = LeaderElectionConfig::new("reliability-test");
    lease.lease_duration = Duration::from_secs(15);
    lease.renew_deadline = Duration::from_secs(10);
    lease.retry_period = Duration::from_millis(500);
    ManagerConfig {
        namespace: None,
        vm_workers: 3,
        vmi_workers: 10,
        settings: ClusterSettings::default(),
        lease,
        on_lost_lease: OnLostLease::Exit,
        listen: None,
    }
}

/// Both work queues exist (leading) and hold no queued, in-flight or parked key.
fn queues_idle(manager: &Manager) -> bool {
    let ctx = manager.context();
    [&ctx.vm_queue, &ctx.vmi_queue].iter().all(|slot| {
        slot.get().is_some_and(|q| {
            let s = q.snapshot();
            s.depth == 0 && s.in_flight.is_empty() && s.waiting.is_empty()
        })
    })
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
                        vm.metadata.name.unwrap_or_default(),
                        vm.status
                            .and_then(|s| s.printable_status)
                            .unwrap_or_default(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// True when the controller's VM, VMI and pod caches hold exactly the server's objects at the
/// server's resourceVersions.
async fn caches_current(manager: &Manager, client: &kube::Client) -> bool {
    let caches = &manager.context().caches;
    let lp = ListParams::default();
    let (Ok(vms), Ok(vmis), Ok(pods)) = (
        Api::<VirtualMachine>::namespaced(client.clone(), NAMESPACE)
            .list(&lp)
            .await,
        Api::<VirtualMachineInstance>::namespaced(client.clone(), NAMESPACE)
            .list(&lp)
            .await,
        Api::<Pod>::namespaced(client.clone(), NAMESPACE)
            .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
            .await,
    ) else {
        return false;
    };
    fn same<K>(store: &kube::runtime::reflector::Store<K>, items: &[K]) -> bool
    where
        K: kube::Resource<DynamicType = ()> + Clone + 'static,
    {
        store.state().len() == items.len()
            && items.iter().all(|o| {
                let meta = o.meta();
                let key = ObjectRef::<K>::new(meta.name.as_deref().unwrap_or(""))
                    .within(meta.namespace.as_deref().unwrap_or(""));
                store.get(&key).map(|c| c.meta().resource_version.clone())
                    == Some(meta.resource_version.clone())
            })
    }
    same(caches.vms.store(), &vms.items)
        && same(caches.vmis.store(), &vmis.items)
        && same(caches.pods.store(), &pods.items)
}

/// VM name of a launcher pod name `virt-launcher-<vm>-<5 chars>`.
fn pod_vm(pod: &str) -> Option<&str> {
    let rest = pod.strip_prefix("virt-launcher-")?;
    let cut = rest.len().checked_sub(6)?;
    rest[cut..].starts_with('-').then(|| &rest[..cut])
}

fn controller_creates(audit: &[AuditEntry], resource: &str) -> Vec<AuditEntry> {
    audit
        .iter()
        .filter(|e| e.verb == "create" && e.resource == resource && e.subresource.is_empty())
        .filter(|e| e.user_agent.contains(CONTROLLER_AGENT))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_vmi_and_one_pod_per_vm_under_lagging_cache_and_api_errors() {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: 2,
        kubelet_delay: Duration::from_millis(50),
        api: ApiServerConfig {
            fault_seed: FAULT_SEED,
            ..Default::default()
        },
        ..Default::default()
    })
    .await
    .expect("embedded cluster starts");
    install_faults(&cluster);
    let api = cluster.api();
    let ctrl = api
        .client_with_agent(CONTROLLER_AGENT)
        .await
        .expect("controller client");
    let user = api
        .client_with_agent("test-user")
        .await
        .expect("user client");
    let (vm_rec, vmi_rec) = virtctl_rs::controller::reconcilers();
    let manager = Arc::new(
        Manager::start(ctrl, manager_config(), vm_rec, vmi_rec)
            .await
            .expect("manager starts"),
    );
    let cancel = CancellationToken::new();
    let run_task = {
        let (m, c) = (manager.clone(), cancel.clone());
        tokio::spawn(async move { m.run(c).await })
    };
    let started = Instant::now();
    while !(manager.leader_state().leading && queues_idle(&manager)) {
        assert!(started.elapsed() < DEADLINE, "the manager never led");
        tokio::time::sleep(POLL).await;
    }

    let vms: Api<VirtualMachine> = Api::namespaced(user.clone(), NAMESPACE);
    for i in 0..VMS {
        vms.create(&PostParams::default(), &vm_cirros(&vm_name(i)))
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
        let idle = all_running && queues_idle(&manager) && caches_current(&manager, &user).await;
        quiet = if idle { quiet + 1 } else { 0 };
        if quiet >= QUIET_POLLS {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "not converged after {DEADLINE:?}: printable statuses {statuses:?}\nqueues idle: {}",
            queues_idle(&manager)
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

    // VMIs: exactly one successful create per VM, and no create refused as AlreadyExists.
    let vmi_creates = controller_creates(&audit, "virtualmachineinstances");
    let mut vmi_ok: BTreeMap<String, usize> = BTreeMap::new();
    for e in vmi_creates.iter().filter(|e| (200..300).contains(&e.code)) {
        *vmi_ok.entry(e.name.clone()).or_default() += 1;
    }
    let already_exists: Vec<&AuditEntry> = vmi_creates.iter().filter(|e| e.code == 409).collect();
    assert!(
        already_exists.is_empty(),
        "VMI creates refused with 409 AlreadyExists (created from a stale cache): {already_exists:#?}"
    );
    // Launcher pods: exactly one successful create per VM (pods use generateName, so a
    // duplicate would succeed).
    let mut pod_ok: BTreeMap<String, usize> = BTreeMap::new();
    for e in controller_creates(&audit, "pods")
        .iter()
        .filter(|e| (200..300).contains(&e.code))
    {
        let vm = pod_vm(&e.name).unwrap_or(&e.name).to_string();
        *pod_ok.entry(vm).or_default() += 1;
    }
    let want: BTreeMap<String, usize> = (0..VMS).map(|i| (vm_name(i), 1)).collect();
    assert_eq!(vmi_ok, want, "successful VMI creates per VM");
    assert_eq!(pod_ok, want, "successful launcher pod creates per VM");

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

    cancel.cancel();
    let _ = run_task.await;
    drop(manager);
    cluster.shutdown().await;
}

#[test]
fn pod_vm_names() {
    assert_eq!(
        pod_vm("virt-launcher-vm-cirros-1-abcde"),
        Some("vm-cirros-1")
    );
    assert_eq!(
        pod_vm("virt-launcher-vm-cirros-10-x7k2p"),
        Some("vm-cirros-10")
    );
    assert_eq!(pod_vm("virt-launcher-x"), None);
    assert_eq!(pod_vm("something-else"), None);
}
