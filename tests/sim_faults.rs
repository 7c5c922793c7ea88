//! Fault injection and the audit log of the embedded API server.

use crate::common;

use std::time::{Duration, Instant};

use common::objects::{api_err, pod};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use serde_json::json;
use virtctl_rs::sim::{ApiServer, ApiServerConfig, AuditQuery, FaultRule, Verb};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"v": "0"}})).unwrap()
}

#[tokio::test]
async fn injected_errors_are_scoped_and_leave_the_store_alone() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    server.faults().add(
        FaultRule::error(500)
            .verbs(&[Verb::Create])
            .resource("configmaps")
            .user_agent("victim"),
    );
    let victim: Api<ConfigMap> = Api::namespaced(
        server.client_with_agent("victim/1.0").await.unwrap(),
        "default",
    );
    let other: Api<ConfigMap> = Api::namespaced(
        server.client_with_agent("bystander").await.unwrap(),
        "default",
    );
    let before = server.snapshot();
    let s = api_err(
        victim
            .create(&PostParams::default(), &cm("a"))
            .await
            .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (500, "InternalError"));
    assert_eq!(server.snapshot(), before);
    // Other agents, verbs and resources are untouched.
    other
        .create(&PostParams::default(), &cm("a"))
        .await
        .unwrap();
    victim.get("a").await.unwrap();
    let pods: Api<Pod> =
        Api::namespaced(server.client_with_agent("victim").await.unwrap(), "default");
    pods.create(&PostParams::default(), &pod("p", None))
        .await
        .unwrap();
    server.faults().clear();
    victim
        .create(&PostParams::default(), &cm("b"))
        .await
        .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn too_many_requests_carries_retry_after_and_kube_retries() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    server.faults().add(
        FaultRule::too_many_requests(1)
            .verbs(&[Verb::Create])
            .times(1),
    );
    let cms: Api<ConfigMap> = Api::namespaced(
        server.client_with_agent("retrier").await.unwrap(),
        "default",
    );
    // kube's default retry policy retries 429 and the second attempt succeeds.
    cms.create(&PostParams::default(), &cm("r")).await.unwrap();
    let creates: Vec<u16> = server
        .audit()
        .query(&AuditQuery {
            verbs: Some(vec!["create".into()]),
            user_agent: Some("retrier".into()),
            ..Default::default()
        })
        .into_iter()
        .map(|e| e.code)
        .collect();
    assert_eq!(creates, vec![429, 201]);
    // The raw response has the header and the Status details.
    server
        .faults()
        .add(FaultRule::too_many_requests(7).verbs(&[Verb::Get]).times(1));
    let resp = reqwest_like_get(&server, "/api/v1/namespaces/default/configmaps/r").await;
    assert_eq!(resp.0, 429);
    assert_eq!(resp.1.as_deref(), Some("7"));
    assert_eq!(resp.2["reason"], "TooManyRequests");
    assert_eq!(resp.2["details"]["retryAfterSeconds"], 7);
    server.shutdown().await;
}

/// GET through a kube client without retries: (code, Retry-After, body).
async fn reqwest_like_get(
    server: &ApiServer,
    path: &str,
) -> (u16, Option<String>, serde_json::Value) {
    let mut config = server.kube_config().await.unwrap();
    config.default_retry = false;
    let client = kube::Client::try_from(config).unwrap();
    let req = axum::http::Request::builder()
        .uri(path)
        .body(Vec::new())
        .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let ra = resp
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), 1 << 20)
        .await
        .unwrap();
    (code, ra, serde_json::from_slice(&bytes).unwrap())
}

#[tokio::test]
async fn injected_conflicts_and_latency() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    cms.create(&PostParams::default(), &cm("c")).await.unwrap();
    let id = server
        .faults()
        .add(FaultRule::conflict().resource("configmaps"));
    let before = server.snapshot();
    let s = api_err(
        cms.patch(
            "c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"v": "1"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    let mut cur = cms.get("c").await.unwrap();
    cur.data = Some([("v".to_string(), "2".to_string())].into());
    assert_eq!(
        api_err(
            cms.replace("c", &PostParams::default(), &cur)
                .await
                .unwrap_err()
        )
        .code,
        409
    );
    assert_eq!(server.snapshot(), before);
    assert!(server.faults().remove(id));
    cms.replace("c", &PostParams::default(), &cur)
        .await
        .unwrap();
    server
        .faults()
        .add(FaultRule::latency(Duration::from_millis(300)).verbs(&[Verb::Get]));
    let t = Instant::now();
    cms.get("c").await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "latency is a lower bound"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn faults_are_reproducible_from_the_seed() {
    async fn pattern(seed: u64) -> Vec<u16> {
        let server = ApiServer::start(ApiServerConfig {
            fault_seed: seed,
            faults: vec![FaultRule::error(500).probability(0.5).verbs(&[Verb::Get])],
            ..Default::default()
        })
        .await
        .unwrap();
        let mut config = server.kube_config().await.unwrap();
        config.default_retry = false;
        let cms: Api<ConfigMap> =
            Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
        cms.create(&PostParams::default(), &cm("x")).await.unwrap();
        let mut out = Vec::new();
        for _ in 0..40 {
            out.push(match cms.get("x").await {
                Ok(_) => 200,
                Err(kube::Error::Api(s)) => s.code,
                Err(e) => panic!("{e}"),
            });
        }
        server.shutdown().await;
        out
    }
    let a = pattern(42).await;
    assert_eq!(a, pattern(42).await);
    assert_ne!(a, pattern(43).await);
    assert!(a.contains(&500) && a.contains(&200));
}

#[tokio::test]
async fn audit_log_records_every_verb() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("audit.jsonl");
    let server = ApiServer::start(ApiServerConfig {
        audit_file: Some(file.clone()),
        ..Default::default()
    })
    .await
    .unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(
        server.client_with_agent("auditor").await.unwrap(),
        "default",
    );
    let mark = server.audit().len() as u64;
    cms.create(&PostParams::default(), &cm("a")).await.unwrap();
    let a = cms.get("a").await.unwrap();
    cms.list(&ListParams::default()).await.unwrap();
    cms.replace("a", &PostParams::default(), &a).await.unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"v": "9"}})),
    )
    .await
    .unwrap();
    cms.patch_status("a", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap_err();
    drop(
        cms.watch(&WatchParams::default().timeout(1), "0")
            .await
            .unwrap(),
    );
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    cms.delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let entries = server.audit().query(&AuditQuery {
        user_agent: Some("auditor".into()),
        since: Some(mark),
        ..Default::default()
    });
    let verbs: Vec<&str> = entries.iter().map(|e| e.verb.as_str()).collect();
    assert_eq!(
        verbs,
        [
            "create",
            "get",
            "list",
            "update",
            "patch",
            "patch",
            "watch",
            "delete",
            "deletecollection"
        ]
    );
    let e = &entries[0];
    assert_eq!(
        (
            e.resource.as_str(),
            e.namespace.as_str(),
            e.name.as_str(),
            e.code
        ),
        ("configmaps", "default", "a", 201)
    );
    assert_eq!(
        entries[5].code, 404,
        "configmaps have no status subresource"
    );
    assert_eq!(entries[5].subresource, "");
    let writes = server.audit().query(&AuditQuery {
        user_agent: Some("auditor".into()),
        writes_only: true,
        ..Default::default()
    });
    assert_eq!(writes.len(), 6);
    let lines = std::fs::read_to_string(&file).unwrap();
    assert!(lines.lines().count() >= entries.len());
    let first: serde_json::Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert!(
        first.get("verb").is_some()
            && first.get("userAgent").is_some()
            && first.get("code").is_some()
    );
    server.shutdown().await;
}
