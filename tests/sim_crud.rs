//! CRUD, conflicts, status subresource and error shapes of the embedded API server, driven
//! through the real `kube::Client`.

use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;
use virtctl_rs::sim::{ApiServer, ApiServerConfig};

fn pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}
    }))
    .unwrap()
}

#[tokio::test]
async fn create_get_list_delete_pod() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("p1"))
        .await
        .unwrap();
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.metadata.generation, Some(1));
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    let got = pods.get("p1").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    let list = pods.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert!(list.metadata.resource_version.is_some());
    let all: Api<Pod> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    // unbound pod: deleted immediately
    let r = pods.delete("p1", &DeleteParams::default()).await.unwrap();
    assert!(r.is_right());
    let err = pods.get("p1").await.unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 404);
            assert_eq!(s.reason, "NotFound");
            assert_eq!(s.message, "pods \"p1\" not found");
        }
        other => panic!("unexpected {other:?}"),
    }
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    assert!(
        cms.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    server.shutdown().await;
}
