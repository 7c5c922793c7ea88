//! Simulator behaviours that differed from a real cluster (issue 14), each seen end to end.

mod common;

use k8s_openapi::api::core::v1::Node;
use kube::Api;
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
