//! Simulator behaviours that differed from a real cluster (issue 14), each seen end to end.

use crate::common;

use common::env::{Env, EnvConfig};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;
use virtctl_rs::api::Phase;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use virtctl_rs::sim::{ApiServer, ApiServerConfig};

/// An unqualified finalizer name is accepted with the API server's warning, not refused (422).
#[tokio::test]
async fn an_unqualified_finalizer_is_accepted_with_a_warning() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "finalizers": ["example-finalizer", "example.com/ok"]}});
    let req = axum::http::Request::post("/api/v1/namespaces/default/configmaps")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .unwrap();
    let resp = client
        .send(req.map(Into::into))
        .await
        .expect("request sent");
    assert_eq!(resp.status(), 201);
    let warnings: Vec<String> = resp
        .headers()
        .get_all("warning")
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .collect();
    assert_eq!(
        warnings,
        vec!["299 - \"metadata.finalizers: \\\"example-finalizer\\\": prefer a domain-qualified finalizer name including a path (/) to avoid accidental conflicts with other finalizer writers\"".to_string()]
    );
    server.shutdown().await;
}

/// Nodes advertise huge pages of both sizes.
#[tokio::test]
async fn nodes_have_hugepages_capacity() {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig::default())
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(cluster.client().await.unwrap());
    for node in nodes.list(&Default::default()).await.unwrap() {
        let cap = node.status.and_then(|s| s.capacity).unwrap_or_default();
        assert!(cap.contains_key("hugepages-2Mi"), "{cap:?}");
        assert!(cap.contains_key("hugepages-1Gi"), "{cap:?}");
    }
    cluster.shutdown().await;
}

/// The simulated kubelet's pod-status write that gets a 409 re-reads the pod and writes again,
/// instead of retrying from the copy its (here: late) watch has not replaced yet.
#[tokio::test]
async fn the_kubelet_retries_a_conflicting_status_write_from_the_current_pod() {
    use virtctl_rs::sim::{AuditQuery, FaultRule};
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        kubelet_delay: std::time::Duration::from_secs(3),
        ..Default::default()
    })
    .await
    .unwrap();
    let client = cluster.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &common::objects::pod("p", None))
        .await
        .unwrap();
    // The node simulator has the pod once the scheduler bound it.
    common::wait_for("the scheduler to bind the pod", || async {
        let bound = cluster.api().audit().query(&AuditQuery {
            subresource: Some("binding".into()),
            user_agent: Some("sim-scheduler".into()),
            success_only: true,
            ..Default::default()
        });
        (!bound.is_empty()).then_some(())
    })
    .await;
    // From now on the kubelet's pod watch lags an hour, and someone else changes the pod: the
    // kubelet's copy is stale when it writes Running.
    cluster.api().faults().add(
        FaultRule::delay_watch_events(std::time::Duration::from_secs(3600))
            .resource("pods")
            .user_agent("sim-kubelet"),
    );
    let mark = cluster.api().audit().len() as u64;
    cluster.api().faults().drop_watches();
    // The kubelet's new (lagging) pod watch is open, so the old one is closed.
    common::wait_for("the kubelet to watch pods again", || async {
        let watches = cluster.api().audit().query(&AuditQuery {
            verbs: Some(vec!["watch".into()]),
            resource: Some("pods".into()),
            user_agent: Some("sim-kubelet".into()),
            since: Some(mark),
            ..Default::default()
        });
        (!watches.is_empty()).then_some(())
    })
    .await;
    pods.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
    )
    .await
    .unwrap();
    common::wait_for("the pod to run", || async {
        let p = pods.get("p").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    let conflicts = cluster.api().audit().query(&AuditQuery {
        subresource: Some("status".into()),
        user_agent: Some("sim-kubelet".into()),
        ..Default::default()
    });
    assert!(
        conflicts.iter().any(|e| e.code == 409),
        "the kubelet's write did conflict: {conflicts:?}"
    );
    cluster.shutdown().await;
}

/// Deleting the launcher pod of a running VMI shuts its guest down: virt-handler reports the
/// VMI `Succeeded` while the pod is still terminating (grace periods at full length here),
/// before virt-controller could notice the pod gone (issue 38 item 6: it reported `Failed`).
#[tokio::test]
async fn deleting_a_running_launcher_pod_shuts_the_guest_down() {
    let mut config = EnvConfig::new("ctrl-launcher-delete");
    config.cluster.grace_scale = 1.0;
    let env = Env::start_with(config, |_| {}).await;
    // Once: the ended VMI stays (no restart replaces it).
    env.create_vm(&common::example_vm_with("vm-containerdisk", "Once"))
        .await;
    let (_, vmi) = env.wait_running("demo-vm").await;
    let uid = vmi.metadata.uid.clone().unwrap();
    let pod = env.launcher_pods(&uid).await.pop().expect("launcher pod");
    let name = pod.metadata.name.clone().unwrap();
    env.pods()
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete the launcher pod");
    let ended = env
        .wait_vmi("demo-vm", "Succeeded or Failed", |v| v.is_final())
        .await;
    assert_eq!(ended.phase(), Phase::Succeeded);
    assert_eq!(ended.metadata.uid.as_deref(), Some(uid.as_str()));
    let still = env.pods().get_opt(&name).await.unwrap();
    assert!(
        still.is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
        "the VMI ended while its pod was still terminating"
    );
    env.shutdown().await;
}

/// A pod that fits no node gets kube-scheduler's `FailedScheduling` Warning event with the
/// scheduler's message (what `kubectl describe pod` lists under Events).
#[tokio::test]
async fn an_unschedulable_pod_gets_a_failed_scheduling_event() {
    use k8s_openapi::api::core::v1::Event;
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig::default())
        .await
        .unwrap();
    let client = cluster.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let mut pod = common::objects::pod("nowhere", None);
    pod.spec.as_mut().unwrap().node_selector =
        Some([("disk".to_string(), "ssd".to_string())].into());
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let events: Api<Event> = Api::namespaced(client, "default");
    let event = common::wait_for("a FailedScheduling event", || async {
        events
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|e| e.involved_object.name.as_deref() == Some("nowhere"))
    })
    .await;
    assert_eq!(event.reason.as_deref(), Some("FailedScheduling"));
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.message.as_deref(),
        Some(
            "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        )
    );
    assert_eq!(
        event.source.and_then(|s| s.component).as_deref(),
        Some("default-scheduler")
    );
    cluster.shutdown().await;
}
