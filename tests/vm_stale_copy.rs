//! A VM sync that starts from a cache copy older than the server's VM must not write the old
//! spec or status back (the lost update the 500-VM fault soak of issue 13 looked for).
//!
//! KubeVirt continues its sync on the VM its finalizer patch returns (vm.go:3250-3255), so a
//! Start request virt-api wrote after the cache copy is still there when `updateStatus` runs.
//! Our decision is made from the cache copy once; these tests freeze the controller's VM cache
//! at the copy before the request and run one VM reconcile against the embedded API server.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::controller::context::{Caches, Context};
use virtctl_rs::controller::vm::executor;
use virtctl_rs::runtime::informer::Informer;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};

/// A Manual VM past its first sync (api-version annotations set) that lacks the controller's
/// finalizer, so its next sync patches the finalizer and then writes the status.
fn manual_vm() -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": "late", "namespace": "default",
            "annotations": {
                "kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"
            }
        },
        "spec": {
            "runStrategy": "Manual",
            "template": {"spec": {
                "domain": {"memory": {"guest": "128Mi"}, "devices": {}},
                "volumes": [{"name": "root",
                             "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}]
            }}
        }
    }))
    .expect("VM")
}

/// An embedded cluster (with or without virt-api's admission) holding [`manual_vm`], a client,
/// and the VM as created: the copy the tests freeze the controller's cache at.
async fn cluster_with_vm(
    admission: bool,
) -> (
    EmbeddedCluster,
    kube::Client,
    Api<VirtualMachine>,
    VirtualMachine,
) {
    let mut config = EmbeddedClusterConfig::default();
    config.api.admission = admission;
    let cluster = EmbeddedCluster::start(config).await.expect("cluster");
    let client = cluster.client().await.expect("client");
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), "default");
    let cached = vms
        .create(&PostParams::default(), &manual_vm())
        .await
        .expect("create VM");
    (cluster, client, vms, cached)
}

/// A controller context whose VM cache holds exactly `cached`, every other cache empty.
fn context(client: kube::Client, cached: VirtualMachine) -> Context {
    let mut caches = Caches::disabled();
    caches.vms = Informer::fixed("virtualmachines", [cached]);
    Context::offline(client, caches)
}

#[tokio::test]
async fn a_start_request_written_after_the_cache_copy_survives_the_sync() {
    let (cluster, client, vms, cached) = cluster_with_vm(true).await;
    // virt-api's start subresource (lifecycle.go:43-160) after the controller's cache copy.
    vms.patch_status(
        "late",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"stateChangeRequests": [{"action": "Start"}]}})),
    )
    .await
    .expect("start request");

    let ctx = context(client.clone(), cached);
    let result = executor::reconcile(&ctx, "default/late").await;

    let vm = vms.get("late").await.expect("VM");
    let requests = vm
        .status
        .as_ref()
        .and_then(|s| s.state_change_requests.clone())
        .unwrap_or_default();
    assert_eq!(
        requests
            .iter()
            .map(|r| r.action.as_str())
            .collect::<Vec<_>>(),
        vec!["Start"],
        "the Start request must survive a sync from an older cache copy; reconcile: {result:?}"
    );
    // The finalizer patch itself went through, and the status write was refused locally (a
    // Conflict naming the VM), so the key is retried with the newer copy.
    assert!(
        vm.metadata.finalizers.as_ref().is_some_and(|f| f
            .iter()
            .any(|f| f == "kubevirt.io/virtualMachineControllerFinalize")),
        "finalizer added"
    );
    let err = result.expect_err("the sync ends in a retry");
    assert!(
        err.to_string().contains("modified since the cache copy"),
        "names why: {err}"
    );
    // Nothing was started from the old copy: no VMI, no pod.
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), "default");
    assert!(vmis.get_opt("late").await.expect("get VMI").is_none());
    let pods: Api<Pod> = Api::namespaced(client, "default");
    assert!(
        pods.list(&Default::default())
            .await
            .expect("pods")
            .items
            .is_empty()
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_run_strategy_changed_after_the_cache_copy_survives_the_sync() {
    // Without virt-api no firmware UUID is set at creation, so the sync patches one into the
    // template (firmware.go:48-81) and then Updates the whole VM (vm.go:3379-3387) with the
    // resourceVersion that patch returned: the write that would put `Manual` back.
    let (cluster, client, vms, cached) = cluster_with_vm(false).await;
    vms.patch(
        "late",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"runStrategy": "Halted"}})),
    )
    .await
    .expect("patch runStrategy");

    let ctx = context(client.clone(), cached);
    let _ = executor::reconcile(&ctx, "default/late").await;

    let vm = vms.get("late").await.expect("VM");
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Halted"));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_sync_from_a_current_copy_writes_its_status() {
    // The same sync with a current cache copy: the finalizer patch's answer is the predicted
    // VM, so the status write goes through (the check must not refuse every write).
    let (cluster, client, vms, cached) = cluster_with_vm(true).await;
    let ctx = context(client.clone(), cached);
    let result = executor::reconcile(&ctx, "default/late").await;
    assert!(result.is_ok(), "{result:?}");
    let vm = vms.get("late").await.expect("VM");
    assert_eq!(
        vm.status.and_then(|s| s.printable_status).as_deref(),
        Some("Stopped"),
        "the status write went through"
    );
    cluster.shutdown().await;
}

/// The controller's writes of `default/late` in the audit log from `since` on.
fn controller_writes(cluster: &EmbeddedCluster, since: u64) -> Vec<String> {
    cluster
        .api()
        .audit()
        .entries()
        .into_iter()
        .filter(|e| e.seq >= since && e.is_write() && e.name == "late")
        .map(|e| format!("{} {}/{} → {}", e.verb, e.resource, e.subresource, e.code))
        .collect()
}

#[tokio::test]
async fn a_sync_before_the_cache_has_our_last_write_starts_from_that_write() {
    // Issue 38 item 7: the next sync of a key used to start from the cache copy older than the
    // controller's own last write (its watch event not in yet), so it patched the finalizer
    // again, found the answer unlike its prediction and refused its status write (against the
    // server: a 409 Conflict). It now starts from the VM that write returned.
    let (cluster, client, _vms, cached) = cluster_with_vm(true).await;
    let ctx = context(client.clone(), cached);
    executor::reconcile(&ctx, "default/late")
        .await
        .expect("first sync: finalizer and status");
    let mark = cluster.api().audit().len() as u64;
    // The cache still holds the VM as created.
    let second = executor::reconcile(&ctx, "default/late").await;
    assert!(second.is_ok(), "{second:?}");
    assert_eq!(
        controller_writes(&cluster, mark),
        Vec::<String>::new(),
        "nothing left to write"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_later_foreign_write_still_conflicts_with_our_last_write() {
    // The VM our last write returned is newer than the cache's, but virt-api wrote a Start
    // request after it: the status write made from our copy carries its resourceVersion, the
    // server answers 409 and the request survives (the mutation cache masks no conflict).
    let (cluster, client, vms, cached) = cluster_with_vm(true).await;
    let mut ours = cached.clone();
    ours.metadata.finalizers = Some(vec![
        "kubevirt.io/virtualMachineControllerFinalize".to_string(),
    ]);
    let ours = vms
        .replace("late", &PostParams::default(), &ours)
        .await
        .expect("our finalizer write");
    let ctx = context(client.clone(), cached);
    ctx.vm_mutations
        .mutation("default/late", std::sync::Arc::new(ours));
    vms.patch_status(
        "late",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"stateChangeRequests": [{"action": "Start"}]}})),
    )
    .await
    .expect("start request");
    let mark = cluster.api().audit().len() as u64;

    let result = executor::reconcile(&ctx, "default/late").await;

    assert!(result.is_err(), "the sync stops: {result:?}");
    assert_eq!(
        controller_writes(&cluster, mark),
        vec!["update virtualmachines/status → 409".to_string()]
    );
    let vm = vms.get("late").await.expect("VM");
    let requests = vm
        .status
        .and_then(|s| s.state_change_requests)
        .unwrap_or_default();
    assert_eq!(requests.len(), 1, "the Start request survives");
    cluster.shutdown().await;
}
