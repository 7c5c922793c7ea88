//! CRUD, metadata semantics, conflicts, status subresource, patches, selectors, pagination and
//! error shapes of the embedded API server, driven through the real `kube::Client`.

use crate::common;

use common::objects::{api_err, pod, vm, vm_resource, vmi, vmi_resource};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, Preconditions,
};
use serde_json::{Value, json};
use virtctl_rs::sim::{ApiServer, ApiServerConfig};

async fn server() -> (ApiServer, kube::Client) {
    let s = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let c = s.client().await.unwrap();
    (s, c)
}

fn rv(o: &impl kube::Resource) -> u64 {
    o.meta()
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn create_get_list_delete_pod() {
    let (server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let created = pods
        .create(&PostParams::default(), &pod("p1", None))
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
    // An unbound pod is deleted at once (the real server sets grace 0 for it).
    let r = pods.delete("p1", &DeleteParams::default()).await.unwrap();
    assert!(r.is_right());
    let s = api_err(pods.get("p1").await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (404, "NotFound"));
    assert_eq!(s.message, "pods \"p1\" not found");
    server.shutdown().await;
}

#[tokio::test]
async fn initial_namespaces_exist() {
    let (server, client) = server().await;
    let ns: Api<Namespace> = Api::all(client);
    let names: Vec<String> = ns
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    for want in ["default", "kube-system", "kubevirt"] {
        assert!(names.contains(&want.to_string()), "{want} missing");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn generate_name_uid_and_global_resource_version() {
    let (server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "cfg-"}})).unwrap();
    let a = cms.create(&PostParams::default(), &cm).await.unwrap();
    let b = cms.create(&PostParams::default(), &cm).await.unwrap();
    let an = a.metadata.name.clone().unwrap();
    assert!(an.starts_with("cfg-") && an.len() == 9, "{an}");
    assert_ne!(a.metadata.name, b.metadata.name);
    assert_ne!(a.metadata.uid, b.metadata.uid);
    // One counter across resources.
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vm_resource());
    let v = vms
        .create(&PostParams::default(), &vm("vm1"))
        .await
        .unwrap();
    assert!(rv(&b) > rv(&a));
    assert!(rv(&v) > rv(&b));
    // ConfigMaps carry no generation; custom resources do.
    assert_eq!(a.metadata.generation, None);
    assert_eq!(v.metadata.generation, Some(1));
    cm.metadata.generate_name = None;
    let s = api_err(cms.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!(s.code, 422);
    assert_eq!(s.reason, "Invalid");
    server.shutdown().await;
}

#[tokio::test]
async fn already_exists_and_conflict_statuses() {
    let (server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "c"}, "data": {"k": "1"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let s = api_err(cms.create(&PostParams::default(), &cm).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (409, "AlreadyExists"));
    assert_eq!(s.message, "configmaps \"c\" already exists");
    let mut upd = created.clone();
    upd.data = Some([("k".to_string(), "2".to_string())].into());
    cms.replace("c", &PostParams::default(), &upd)
        .await
        .unwrap();
    // Same (now stale) resourceVersion again: 409 Conflict with the real server's text.
    let s = api_err(
        cms.replace("c", &PostParams::default(), &upd)
            .await
            .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        s.message,
        "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
    );
    assert_eq!(s.status, Some(kube::core::response::StatusSummary::Failure));
    let d = s.details.unwrap();
    assert_eq!((d.name.as_str(), d.kind.as_str()), ("c", "configmaps"));
    // A custom resource update without resourceVersion is Invalid (built-ins allow it).
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vm_resource());
    vms.create(&PostParams::default(), &vm("v")).await.unwrap();
    let s = api_err(
        vms.replace("v", &PostParams::default(), &vm("v"))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    let mut no_rv = cms.get("c").await.unwrap();
    no_rv.metadata.resource_version = None;
    cms.replace("c", &PostParams::default(), &no_rv)
        .await
        .unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn generation_bumps_only_on_spec_changes() {
    let (server, client) = server().await;
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vm_resource());
    let v = vms.create(&PostParams::default(), &vm("g")).await.unwrap();
    assert_eq!(v.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let v = vms
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(v.metadata.generation, Some(1));
    let v = vms
        .patch_status(
            "g",
            &pp,
            &Patch::Merge(json!({"status": {"printableStatus": "Stopped"}})),
        )
        .await
        .unwrap();
    assert_eq!(v.metadata.generation, Some(1));
    let v = vms
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"spec": {"runStrategy": "Always"}})),
        )
        .await
        .unwrap();
    assert_eq!(v.metadata.generation, Some(2));
    // A no-op patch changes nothing, not even the resourceVersion.
    let before = rv(&v);
    let v = vms
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"spec": {"runStrategy": "Always"}})),
        )
        .await
        .unwrap();
    assert_eq!(rv(&v), before);
    server.shutdown().await;
}

#[tokio::test]
async fn a_vmi_status_write_bumps_its_generation() {
    // KubeVirt's VMI CRD has no status subresource, so kube-apiserver counts a status change
    // as a change of the object (apiextensions strategy.go PrepareForUpdate); found by
    // comparing the VMIs both servers store (tests/server_conformance.rs).
    let (server, client) = server().await;
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vmi_resource());
    let v = vmis
        .create(&PostParams::default(), &vmi("g"))
        .await
        .unwrap();
    assert_eq!(v.metadata.generation, Some(1));
    let pp = PatchParams::default();
    let v = vmis
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"status": {"phase": "Scheduling"}})),
        )
        .await
        .unwrap();
    assert_eq!(v.metadata.generation, Some(2));
    let v = vmis
        .patch(
            "g",
            &pp,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        v.metadata.generation,
        Some(2),
        "metadata alone is not counted"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn status_subresource_separation() {
    let (server, client) = server().await;
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vm_resource());
    let mut with_status = vm("v1");
    with_status.data["status"] = json!({"printableStatus": "Running"});
    let created = vms
        .create(&PostParams::default(), &with_status)
        .await
        .unwrap();
    assert!(
        created.data.get("status").is_none(),
        "status dropped on create"
    );
    // Main endpoint ignores status.
    let mut upd = created.clone();
    upd.data["status"] = json!({"printableStatus": "Running"});
    upd.data["spec"]["x"] = json!(1);
    let after = vms
        .replace("v1", &PostParams::default(), &upd)
        .await
        .unwrap();
    assert!(after.data.get("status").is_none());
    assert_eq!(after.data["spec"]["x"], 1);
    // /status ignores everything but status.
    let mut st = after.clone();
    st.data["status"] = json!({"printableStatus": "Starting"});
    st.data["spec"]["x"] = json!(2);
    st.metadata.labels = Some([("l".to_string(), "v".to_string())].into());
    let after = vms
        .replace_status("v1", &PostParams::default(), &st)
        .await
        .unwrap();
    assert_eq!(after.data["status"]["printableStatus"], "Starting");
    assert_eq!(after.data["spec"]["x"], 1);
    assert!(after.metadata.labels.is_none());
    // VMIs have no status subresource (KubeVirt's CRD): the main endpoint keeps their status.
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vmi_resource());
    let mut vmi_with_status = vmi("i1");
    vmi_with_status.data["status"] = json!({"phase": "Pending"});
    let created = vmis
        .create(&PostParams::default(), &vmi_with_status)
        .await
        .unwrap();
    assert_eq!(created.data["status"]["phase"], "Pending");
    let mut upd = created.clone();
    upd.data["status"]["phase"] = json!("Scheduling");
    let after_vmi = vmis
        .replace("i1", &PostParams::default(), &upd)
        .await
        .unwrap();
    assert_eq!(after_vmi.data["status"]["phase"], "Scheduling");
    // Stale resourceVersion on /status conflicts too.
    let s = api_err(
        vms.replace_status("v1", &PostParams::default(), &st)
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 409);
    // Pods: status patch via /status, spec untouched.
    let pods: Api<Pod> = Api::namespaced(client, "default");
    pods.create(&PostParams::default(), &pod("p", None))
        .await
        .unwrap();
    let p = pods
        .patch_status(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}, "spec": {"nodeName": "x"}})),
        )
        .await
        .unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(p.spec.unwrap().node_name, None);
    server.shutdown().await;
}

#[tokio::test]
async fn patch_flavours() {
    let (server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", None))
        .await
        .unwrap();
    let pp = PatchParams::default();
    // Strategic merge: conditions merge by type.
    pods.patch_status(
        "p",
        &pp,
        &Patch::Strategic(json!({"status": {"conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False"}
        ]}})),
    )
    .await
    .unwrap();
    let p = pods
        .patch_status(
            "p",
            &pp,
            &Patch::Strategic(
                json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            ),
        )
        .await
        .unwrap();
    let conds = p.status.unwrap().conditions.unwrap();
    assert_eq!(conds.len(), 2);
    assert_eq!(
        conds.iter().find(|c| c.type_ == "Ready").unwrap().status,
        "True"
    );
    // Strategic merge: finalizers are a merged set, ownerReferences merge by uid (owners of a
    // kind the server does not serve are left alone by the garbage collector).
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(
                json!({"metadata": {"finalizers": ["a.io/x"], "ownerReferences": [
                {"apiVersion": "example.com/v1", "kind": "Thing", "name": "o1", "uid": "u1"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.finalizers.as_ref().unwrap().len(), 1);
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(
                json!({"metadata": {"finalizers": ["b.io/y"], "ownerReferences": [
                {"apiVersion": "example.com/v1", "kind": "Thing", "name": "o2", "uid": "u2"}]}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.finalizers.unwrap(), vec!["a.io/x", "b.io/y"]);
    assert_eq!(p.metadata.owner_references.unwrap().len(), 2);
    // Containers merge by name (image is one of the mutable fields).
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::Strategic(
                json!({"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}}),
            ),
        )
        .await
        .unwrap();
    let c = &p.spec.unwrap().containers;
    assert_eq!((c.len(), c[0].image.as_deref()), (1, Some("busybox:2")));
    // JSON patch with a passing and a failing test op.
    let p = pods
        .patch(
            "p",
            &pp,
            &Patch::<Value>::Json(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/metadata/labels/app", "value": "web"},
                    {"op": "replace", "path": "/metadata/labels/app", "value": "db"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(p.metadata.labels.unwrap()["app"], "db");
    let before = server.snapshot();
    let s = api_err(
        pods.patch(
            "p",
            &pp,
            &Patch::<Value>::Json(
                serde_json::from_value(json!([
                    {"op": "test", "path": "/metadata/labels/app", "value": "web"},
                    {"op": "replace", "path": "/metadata/labels/app", "value": "x"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "the server rejected our request due to an error in our request"
    );
    assert_eq!(server.snapshot(), before);
    // Custom resources: merge patch works, strategic merge is 415.
    let vms: Api<DynamicObject> = Api::namespaced_with(client, "default", &vm_resource());
    vms.create(&PostParams::default(), &vm("v")).await.unwrap();
    let v = vms
        .patch(
            "v",
            &pp,
            &Patch::Merge(json!({"spec": {"runStrategy": "Always"}})),
        )
        .await
        .unwrap();
    assert_eq!(v.data["spec"]["runStrategy"], "Always");
    let s = api_err(
        vms.patch(
            "v",
            &pp,
            &Patch::Strategic(json!({"spec": {"runStrategy": "Halted"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((s.code, s.reason.as_str()), (415, "UnsupportedMediaType"));
    // Patch carrying a stale resourceVersion conflicts.
    let s = api_err(
        vms.patch(
            "v",
            &pp,
            &Patch::Merge(json!({"metadata": {"resourceVersion": "1"}, "spec": {"a": 1}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(s.code, 409);
    server.shutdown().await;
}

#[tokio::test]
async fn server_side_apply_is_create_or_merge() {
    let (server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let pp = PatchParams::apply("test-manager");
    let cm = cms
        .patch(
            "applied",
            &pp,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["a"], "1");
    let cm = cms
        .patch(
            "applied",
            &pp,
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"b": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap().len(), 2);
    server.shutdown().await;
}

#[tokio::test]
async fn selectors_and_pagination() {
    let (server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for (i, (app, node)) in [("a", "n1"), ("a", "n2"), ("b", "n1"), ("c", "")]
        .iter()
        .enumerate()
    {
        let mut p = pod(&format!("p{i}"), (!node.is_empty()).then_some(*node));
        p.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        if i == 0 {
            p.metadata
                .labels
                .as_mut()
                .unwrap()
                .insert("tier".into(), "fe".into());
        }
        pods.create(&PostParams::default(), &p).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<Pod>| -> Vec<String> {
        l.items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect()
    };
    let q = |s: &str| ListParams::default().labels(s);
    assert_eq!(names(pods.list(&q("app=a")).await.unwrap()), ["p0", "p1"]);
    assert_eq!(names(pods.list(&q("app==b")).await.unwrap()), ["p2"]);
    assert_eq!(names(pods.list(&q("app!=a")).await.unwrap()), ["p2", "p3"]);
    assert_eq!(
        names(pods.list(&q("app in (b,c)")).await.unwrap()),
        ["p2", "p3"]
    );
    assert_eq!(
        names(pods.list(&q("app notin (a)")).await.unwrap()),
        ["p2", "p3"]
    );
    assert_eq!(names(pods.list(&q("tier")).await.unwrap()), ["p0"]);
    assert_eq!(names(pods.list(&q("!tier")).await.unwrap()).len(), 3);
    let f = |s: &str| ListParams::default().fields(s);
    assert_eq!(
        names(pods.list(&f("spec.nodeName=n1")).await.unwrap()),
        ["p0", "p2"]
    );
    assert_eq!(
        names(pods.list(&f("spec.nodeName=")).await.unwrap()),
        ["p3"]
    );
    assert_eq!(
        names(pods.list(&f("metadata.name=p1")).await.unwrap()),
        ["p1"]
    );
    assert_eq!(
        names(
            pods.list(&f("status.phase=Pending,spec.nodeName!=n1"))
                .await
                .unwrap()
        ),
        ["p1", "p3"]
    );
    // limit / continue
    let page1 = pods.list(&ListParams::default().limit(3)).await.unwrap();
    assert_eq!(page1.items.len(), 3);
    assert_eq!(page1.metadata.remaining_item_count, Some(1));
    let token = page1.metadata.continue_.clone().unwrap();
    let page2 = pods
        .list(&ListParams::default().limit(3).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(page2), ["p3"]);
    // Bad selectors are 400 BadRequest.
    for lp in [q("app in (a"), q("a b"), f("spec.bogus=1")] {
        let s = api_err(pods.list(&lp).await.unwrap_err());
        assert_eq!(
            (s.code, s.reason.as_str()),
            (400, "BadRequest"),
            "{}",
            s.message
        );
    }
    server.shutdown().await;
}

/// Raw request through the kube client, returning (code, body).
async fn raw(
    client: &kube::Client,
    method: &str,
    path: &str,
    ct: &str,
    body: &[u8],
) -> (u16, Value) {
    let req = axum::http::Request::builder()
        .method(method)
        .uri(path)
        .header("Content-Type", ct)
        .body(body.to_vec())
        .unwrap();
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap();
    let code = resp.status().as_u16();
    let bytes = axum::body::to_bytes(axum::body::Body::new(resp.into_body()), 1 << 24)
        .await
        .unwrap();
    (code, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// (method, path, content type, body, expected code, expected reason)
type Case = (
    &'static str,
    &'static str,
    &'static str,
    &'static [u8],
    u16,
    &'static str,
);

#[tokio::test]
async fn malformed_requests_get_real_statuses_and_change_nothing() {
    let (server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("keep", None))
        .await
        .unwrap();
    let before = server.snapshot();
    let rv_before = server.current_resource_version();
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            b"{not json",
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            b"[1,2]",
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"x"}}"#,
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            br#"{"metadata":{"name":"x","namespace":"other"}}"#,
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            br#"{"metadata":{"name":"Bad_Name"}}"#,
            422,
            "Invalid",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            br#"{"metadata":{"name":"x","labels":{"a":"b@d"}}}"#,
            422,
            "Invalid",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods",
            "application/json",
            // An unqualified name is accepted with a warning (tests/sim_fixes.rs); a name
            // that is not a qualified name at all is refused.
            br#"{"metadata":{"name":"x","finalizers":["-nope"]}}"#,
            422,
            "Invalid",
        ),
        (
            "POST",
            "/api/v1/namespaces/missing/pods",
            "application/json",
            br#"{"metadata":{"name":"x"}}"#,
            404,
            "NotFound",
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/pods/keep",
            "application/json",
            b"{{{",
            400,
            "BadRequest",
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/pods/keep",
            "application/json",
            br#"{"metadata":{"name":"other"}}"#,
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/keep",
            "application/merge-patch+json",
            b"nope",
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/keep",
            "application/json-patch+json",
            br#"{"op":"add"}"#,
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/keep",
            "application/strategic-merge-patch+json",
            b"[]",
            400,
            "BadRequest",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/keep",
            "text/plain",
            b"{}",
            415,
            "UnsupportedMediaType",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/pods/missing",
            "application/merge-patch+json",
            b"{}",
            404,
            "NotFound",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/default/pods/keep",
            "application/json",
            b"{bad",
            400,
            "BadRequest",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/default/pods/keep",
            "application/json",
            br#"{"propagationPolicy":"Sideways"}"#,
            400,
            "BadRequest",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/widgets",
            "application/json",
            b"",
            404,
            "NotFound",
        ),
        (
            "GET",
            "/apis/nope.io/v1/things",
            "application/json",
            b"",
            404,
            "NotFound",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods?labelSelector=a%20in%20(",
            "application/json",
            b"",
            400,
            "BadRequest",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods?fieldSelector=spec.bogus%3D1",
            "application/json",
            b"",
            400,
            "BadRequest",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods?continue=garbage",
            "application/json",
            b"",
            400,
            "BadRequest",
        ),
        (
            "POST",
            "/api/v1/namespaces/default/pods/keep",
            "application/json",
            b"{}",
            405,
            "MethodNotAllowed",
        ),
    ];
    for (method, path, ct, body, code, reason) in cases {
        let (got, status) = raw(&client, method, path, ct, body).await;
        assert_eq!(
            got,
            code,
            "{method} {path} {}: {status}",
            String::from_utf8_lossy(body)
        );
        assert_eq!(status["kind"], "Status", "{method} {path}");
        assert_eq!(status["apiVersion"], "v1");
        assert_eq!(status["status"], "Failure");
        assert_eq!(status["reason"], reason, "{method} {path}: {status}");
        assert_eq!(status["code"], code);
    }
    let (_, s) = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/widgets",
        "application/json",
        b"",
    )
    .await;
    assert_eq!(
        s["message"],
        "the server could not find the requested resource"
    );
    assert_eq!(
        server.snapshot(),
        before,
        "a rejected request changed the store"
    );
    assert_eq!(server.current_resource_version(), rv_before);
    server.shutdown().await;
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let (server, client) = server().await;
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vm_resource());
    let mut v = vm("f");
    v.metadata.finalizers = Some(vec!["kubevirt.io/virtualMachineControllerFinalize".into()]);
    let created = vms.create(&PostParams::default(), &v).await.unwrap();
    let r = vms.delete("f", &DeleteParams::default()).await.unwrap();
    let pending = r.left().expect("still there");
    assert!(pending.metadata.deletion_timestamp.is_some());
    assert_eq!(pending.metadata.deletion_grace_period_seconds, Some(0));
    assert_eq!(
        pending.metadata.generation,
        Some(2),
        "generation bumps when deletion starts"
    );
    // No new finalizers on a terminating object.
    let s = api_err(
        vms.patch("f", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": ["kubevirt.io/virtualMachineControllerFinalize", "a.io/b"]}})))
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    vms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    let s = api_err(vms.get("f").await.unwrap_err());
    assert_eq!(s.code, 404);
    // Preconditions.
    let created2 = vms.create(&PostParams::default(), &vm("f")).await.unwrap();
    assert_ne!(created.metadata.uid, created2.metadata.uid);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: created.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    let s = api_err(vms.delete("f", &dp).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (409, "Conflict"));
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: None,
            resource_version: Some("1".into()),
        }),
        ..Default::default()
    };
    assert_eq!(api_err(vms.delete("f", &dp).await.unwrap_err()).code, 409);
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: created2.metadata.uid.clone(),
            resource_version: created2.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    assert!(vms.delete("f", &dp).await.unwrap().is_right());
    server.shutdown().await;
}

#[tokio::test]
async fn bound_pods_terminate_gracefully_and_binding_works() {
    let (server, client) = server().await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    pods.create(&PostParams::default(), &pod("p", None))
        .await
        .unwrap();
    // Bind through the binding subresource (spec.nodeName is not updatable).
    let s = api_err(
        pods.patch(
            "p",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"nodeName": "n1"}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}});
    let (code, _) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/pods/p/binding",
        "application/json",
        binding.to_string().as_bytes(),
    )
    .await;
    assert_eq!(code, 201);
    let bound = pods.get("p").await.unwrap();
    assert_eq!(bound.spec.unwrap().node_name.as_deref(), Some("n1"));
    // As kube-apiserver's binding (storage.go:261-264): PodScheduled=True.
    let conditions = bound
        .status
        .unwrap_or_default()
        .conditions
        .unwrap_or_default();
    let scheduled = conditions.iter().find(|c| c.type_ == "PodScheduled");
    assert_eq!(scheduled.map(|c| c.status.as_str()), Some("True"));
    let (code, s) = raw(
        &client,
        "POST",
        "/api/v1/namespaces/default/pods/p/binding",
        "application/json",
        binding.to_string().as_bytes(),
    )
    .await;
    assert_eq!((code, s["reason"].as_str()), (409, Some("Conflict")));
    // Graceful delete: only marked terminating; a kubelet deletes with grace 0.
    let r = pods.delete("p", &DeleteParams::default()).await.unwrap();
    let p = r.left().expect("terminating");
    assert_eq!(p.metadata.deletion_grace_period_seconds, Some(30));
    assert!(pods.get("p").await.is_ok());
    let r = pods
        .delete(
            "p",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(r.is_right());
    assert_eq!(api_err(pods.get("p").await.unwrap_err()).code, 404);
    server.shutdown().await;
}

#[tokio::test]
async fn cluster_scoped_and_new_resources() {
    let (server, client) = server().await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
        "metadata": {"name": "node-1"},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi"}}
    }))
    .unwrap();
    let created = nodes.create(&PostParams::default(), &n).await.unwrap();
    assert_eq!(created.metadata.namespace, None);
    assert!(
        created.status.unwrap().allocatable.is_some(),
        "nodes keep their status on create"
    );
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "kubevirt");
    let l: k8s_openapi::api::coordination::v1::Lease = serde_json::from_value(
        json!({"metadata": {"name": "virt-controller"}, "spec": {"holderIdentity": "a"}}),
    )
    .unwrap();
    leases.create(&PostParams::default(), &l).await.unwrap();
    let dvs: Api<DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &kube::api::ApiResource::from_gvk_with_plural(
            &kube::api::GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
            "datavolumes",
        ),
    );
    let dv: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "dv"}, "spec": {"source": {"blank": {}}}
    }))
    .unwrap();
    dvs.create(&PostParams::default(), &dv).await.unwrap();
    let d = dvs
        .patch_status(
            "dv",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
        )
        .await
        .unwrap();
    assert_eq!(d.data["status"]["phase"], "Succeeded");
    server.shutdown().await;
}

#[tokio::test]
async fn bearer_token_rules() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    assert!(server.token().is_some());
    // kube-rs sends the kubeconfig token: accepted.
    let cms: Api<ConfigMap> = Api::namespaced(server.client().await.unwrap(), "default");
    cms.list(&ListParams::default()).await.unwrap();
    // A wrong token is 401; no token at all is accepted (kubectl sends none over HTTP).
    let mut config = server.kube_config().await.unwrap();
    config.auth_info.token = Some("wrong".to_string().into());
    let wrong: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let s = api_err(wrong.list(&ListParams::default()).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (401, "Unauthorized"));
    let mut config = server.kube_config().await.unwrap();
    config.auth_info.token = None;
    let anonymous: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    anonymous.list(&ListParams::default()).await.unwrap();
    server.shutdown().await;
    // strict_auth: the token is mandatory.
    let strict = ApiServer::start(ApiServerConfig {
        strict_auth: true,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut config = strict.kube_config().await.unwrap();
    config.auth_info.token = None;
    let anonymous: Api<ConfigMap> =
        Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    assert_eq!(
        api_err(anonymous.list(&ListParams::default()).await.unwrap_err()).code,
        401
    );
    let ok: Api<ConfigMap> = Api::namespaced(strict.client().await.unwrap(), "default");
    ok.list(&ListParams::default()).await.unwrap();
    strict.shutdown().await;
}

#[tokio::test]
async fn list_resource_version_semantics() {
    let (server, client) = server().await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "a"}})).unwrap();
    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let created_rv = created.metadata.resource_version.unwrap();
    let any = cms.list(&ListParams::default().match_any()).await.unwrap();
    assert_eq!(any.items.len(), 1);
    let cur = server.current_resource_version().to_string();
    let exact = ListParams {
        resource_version: Some(cur),
        version_match: Some(kube::api::VersionMatch::Exact),
        ..Default::default()
    };
    cms.list(&exact).await.unwrap();
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "b"}})).unwrap(),
    )
    .await
    .unwrap();
    let old = ListParams {
        resource_version: Some(created_rv),
        version_match: Some(kube::api::VersionMatch::Exact),
        ..Default::default()
    };
    assert_eq!(api_err(cms.list(&old).await.unwrap_err()).code, 410);
    let future = ListParams {
        resource_version: Some("999999".into()),
        version_match: Some(kube::api::VersionMatch::NotOlderThan),
        ..Default::default()
    };
    // kube's default retry layer would retry a 504 fifteen times with backoff: ask without it.
    let mut config = server.kube_config().await.unwrap();
    config.default_retry = false;
    let cms: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(config).unwrap(), "default");
    let s = api_err(cms.list(&future).await.unwrap_err());
    assert_eq!((s.code, s.reason.as_str()), (504, "Timeout"));
    server.shutdown().await;
}

#[tokio::test]
async fn events_k8s_io_and_core_events_share_storage() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let (server, client) = server().await;
    let reporter = Reporter {
        controller: "virt-controller".into(),
        instance: Some("virt-controller-1".into()),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let regarding = vmi_1_reference();
    recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "SuccessfulCreate".into(),
                note: Some("Created virtual machine pod virt-launcher-vmi-1".into()),
                action: "Create".into(),
                secondary: None,
            },
            &regarding,
        )
        .await
        .unwrap();
    // A repeat is folded into the same Event (kube's Recorder merge-patches its series).
    recorder
        .publish(
            &Event {
                type_: EventType::Normal,
                reason: "SuccessfulCreate".into(),
                note: Some("Created virtual machine pod virt-launcher-vmi-1".into()),
                action: "Create".into(),
                secondary: None,
            },
            &regarding,
        )
        .await
        .unwrap();
    // kubectl get events (core v1) sees it, with core field names.
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let list = core
        .list(&ListParams::default().fields("involvedObject.name=vmi-1"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    let e = &list.items[0];
    assert_eq!(e.reason.as_deref(), Some("SuccessfulCreate"));
    assert_eq!(
        e.message.as_deref(),
        Some("Created virtual machine pod virt-launcher-vmi-1")
    );
    assert_eq!(e.reporting_component.as_deref(), Some("virt-controller"));
    assert_eq!(e.series.as_ref().and_then(|s| s.count), Some(2));
    // And the events.k8s.io view of the same object, with its field selectors.
    let new: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client, "default");
    let list = new
        .list(&ListParams::default().fields("regarding.name=vmi-1,reason=SuccessfulCreate"))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(
        list.items[0].note.as_deref(),
        Some("Created virtual machine pod virt-launcher-vmi-1")
    );
    assert_eq!(
        list.items[0].regarding.as_ref().unwrap().name.as_deref(),
        Some("vmi-1")
    );
    server.shutdown().await;
}

/// The controller's recorder (src/runtime/recorder.rs) writes what client-go's writes: a repeat
/// patches the first Event's count (through the embedded server's strategic merge patch),
/// another reason is a new Event, and an Event deleted meanwhile is created again.
#[tokio::test]
async fn the_controllers_recorder_counts_a_repeat_on_the_first_event() {
    use k8s_openapi::api::core::v1::Event as CoreEvent;
    use virtctl_rs::runtime::recorder::{COMPONENT, Event, Recorder};
    let (server, client) = server().await;
    let mut recorder = Recorder::new(client.clone(), COMPONENT.into());
    let regarding = vmi_1_reference();
    let created = Event {
        type_: "Normal",
        reason: "SuccessfulCreate".into(),
        message: "Created virtual machine pod virt-launcher-vmi-1-abcde".into(),
    };
    for _ in 0..3 {
        recorder.publish(&created, &regarding).await.unwrap();
    }
    let deleted = Event {
        reason: "SuccessfulDelete".into(),
        message: "Deleted virtual machine pod virt-launcher-vmi-1-abcde".into(),
        ..created.clone()
    };
    recorder.publish(&deleted, &regarding).await.unwrap();
    assert_eq!(recorder.cached(), 2);

    let events: Api<CoreEvent> = Api::namespaced(client, "default");
    let list = |events: Api<CoreEvent>| async move {
        let mut list = events
            .list(&ListParams::default().fields("involvedObject.name=vmi-1"))
            .await
            .unwrap()
            .items;
        list.sort_by(|a, b| a.reason.cmp(&b.reason));
        list
    };
    let items = list(events.clone()).await;
    assert_eq!(items.len(), 2, "{items:?}");
    let (c, d) = (&items[0], &items[1]);
    assert_eq!(c.reason.as_deref(), Some("SuccessfulCreate"));
    assert_eq!(c.count, Some(3));
    assert!(c.last_timestamp >= c.first_timestamp);
    assert_eq!(c.message.as_deref(), Some(created.message.as_str()));
    assert_eq!(c.reporting_component.as_deref(), Some(COMPONENT));
    assert_eq!(
        c.source.as_ref().and_then(|s| s.component.as_deref()),
        Some(COMPONENT)
    );
    assert_eq!(c.type_.as_deref(), Some("Normal"));
    assert!(c.metadata.name.as_deref().unwrap().starts_with("vmi-1."));
    assert_eq!(d.reason.as_deref(), Some("SuccessfulDelete"));
    assert_eq!(d.count, Some(1));

    // Deleted meanwhile: the next repeat's patch gets 404 and creates it again, counted on.
    let name = c.metadata.name.clone().unwrap();
    events.delete(&name, &Default::default()).await.unwrap();
    recorder.publish(&created, &regarding).await.unwrap();
    let again = events.get(&name).await.unwrap();
    assert_eq!(again.count, Some(4));
    assert_eq!(again.first_timestamp, c.first_timestamp);
    server.shutdown().await;
}

/// The events tests' regarding object: VMI `default/vmi-1`.
fn vmi_1_reference() -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("kubevirt.io/v1".into()),
        kind: Some("VirtualMachineInstance".into()),
        name: Some("vmi-1".into()),
        namespace: Some("default".into()),
        uid: Some("u-1".into()),
        ..Default::default()
    }
}
