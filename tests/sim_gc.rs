//! Garbage collection through ownerReferences (background, foreground with
//! `blockOwnerDeletion`, orphan) and namespace deletion in the embedded API server.

use crate::common;

use common::objects::{pod, vmi, vmi_resource};
use common::wait_for_within;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, PropagationPolicy,
};
use serde_json::json;
use std::time::Duration;
use virtctl_rs::sim::{ApiServer, gc::GC_USER_AGENT};

/// Deadline of every wait for the garbage collector.
const GC_DEADLINE: Duration = Duration::from_secs(10);

struct Fixture {
    server: ApiServer,
    vmis: Api<DynamicObject>,
    pods: Api<Pod>,
}

async fn fixture() -> Fixture {
    // The garbage collector alone: without admission, whose VMI mutator would add the
    // foreground-delete finalizer to the owners.
    let server = common::server_without_admission().await;
    let client = server.client().await.unwrap();
    Fixture {
        vmis: Api::namespaced_with(client.clone(), "default", &vmi_resource()),
        pods: Api::namespaced(client, "default"),
        server,
    }
}

/// Create VMI `owner` and a launcher pod owned by it (controller ref, blockOwnerDeletion).
async fn owner_and_pod(f: &Fixture, owner: &str, pod_name: &str, block: bool) -> (String, Pod) {
    let o = f
        .vmis
        .create(&PostParams::default(), &vmi(owner))
        .await
        .unwrap();
    let uid = o.metadata.uid.clone().unwrap();
    let mut p = pod(pod_name, None);
    p.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": owner,
            "uid": uid, "controller": true, "blockOwnerDeletion": block
        }))
        .unwrap(),
    ]);
    let p = f.pods.create(&PostParams::default(), &p).await.unwrap();
    (uid, p)
}

async fn gone<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    matches!(api.get(name).await, Err(kube::Error::Api(s)) if s.code == 404)
}

#[tokio::test]
async fn background_deletion_removes_dependents_after_the_owner() {
    let f = fixture().await;
    owner_and_pod(&f, "bg", "bg-pod", true).await;
    let r = f
        .vmis
        .delete("bg", &DeleteParams::background())
        .await
        .unwrap();
    assert!(r.is_right(), "owner removed at once");
    wait_for_within("dependent pod collected", GC_DEADLINE, || async {
        gone(&f.pods, "bg-pod").await.then_some(())
    })
    .await;
    let gc_deletes = f
        .server
        .audit()
        .by_user_agent(GC_USER_AGENT)
        .into_iter()
        .filter(|e| e.verb == "delete" && e.resource == "pods")
        .count();
    assert_eq!(gc_deletes, 1);
    f.server.shutdown().await;
}

#[tokio::test]
async fn foreground_deletion_waits_for_blocking_dependents() {
    let f = fixture().await;
    // A dependent with its own finalizer keeps the owner waiting.
    owner_and_pod(&f, "fg", "fg-pod", true).await;
    let p = f
        .pods
        .patch(
            "fg-pod",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["test.io/hold"]}})),
        )
        .await
        .unwrap();
    assert!(p.metadata.finalizers.is_some());
    let r = f
        .vmis
        .delete("fg", &DeleteParams::foreground())
        .await
        .unwrap();
    let owner = r.left().expect("owner waits in the foreground");
    assert!(
        owner
            .metadata
            .finalizers
            .unwrap()
            .contains(&"foregroundDeletion".to_string())
    );
    assert!(owner.metadata.deletion_timestamp.is_some());
    // The GC deletes the dependent (which sticks on its finalizer) ...
    wait_for_within("dependent marked for deletion", GC_DEADLINE, || async {
        f.pods
            .get("fg-pod")
            .await
            .ok()
            .and_then(|p| p.metadata.deletion_timestamp)
    })
    .await;
    // ... and the owner stays while the blocking dependent exists.
    assert!(!gone(&f.vmis, "fg").await);
    f.pods
        .patch(
            "fg-pod",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    wait_for_within("owner removed after its dependent", GC_DEADLINE, || async {
        gone(&f.vmis, "fg").await.then_some(())
    })
    .await;
    assert!(gone(&f.pods, "fg-pod").await);
    f.server.shutdown().await;
}

#[tokio::test]
async fn foreground_deletion_does_not_wait_for_non_blocking_dependents() {
    let f = fixture().await;
    owner_and_pod(&f, "nb", "nb-pod", false).await;
    f.pods
        .patch(
            "nb-pod",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["test.io/hold"]}})),
        )
        .await
        .unwrap();
    f.vmis
        .delete("nb", &DeleteParams::foreground())
        .await
        .unwrap();
    wait_for_within("owner removed", GC_DEADLINE, || async {
        gone(&f.vmis, "nb").await.then_some(())
    })
    .await;
    let p = f.pods.get("nb-pod").await.unwrap();
    assert!(
        p.metadata.deletion_timestamp.is_some(),
        "dependent deleted too"
    );
    f.server.shutdown().await;
}

#[tokio::test]
async fn orphan_deletion_strips_owner_references() {
    let f = fixture().await;
    let (uid, _) = owner_and_pod(&f, "or", "or-pod", true).await;
    let dp = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Orphan),
        ..Default::default()
    };
    let r = f.vmis.delete("or", &dp).await.unwrap();
    let owner = r.left().expect("owner waits for orphaning");
    assert!(
        owner
            .metadata
            .finalizers
            .unwrap()
            .contains(&"orphan".to_string())
    );
    wait_for_within("owner removed", GC_DEADLINE, || async {
        gone(&f.vmis, "or").await.then_some(())
    })
    .await;
    let p = f.pods.get("or-pod").await.unwrap();
    assert!(p.metadata.deletion_timestamp.is_none());
    assert!(
        p.metadata
            .owner_references
            .unwrap_or_default()
            .iter()
            .all(|r| r.uid != uid)
    );
    f.server.shutdown().await;
}

#[tokio::test]
async fn dangling_owner_references_are_collected() {
    let f = fixture().await;
    let mut p = pod("orphaned-at-birth", None);
    p.metadata.owner_references = Some(vec![serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance", "name": "ghost", "uid": "no-such-uid"
    }))
    .unwrap()]);
    f.pods.create(&PostParams::default(), &p).await.unwrap();
    wait_for_within(
        "pod with a missing owner collected",
        GC_DEADLINE,
        || async { gone(&f.pods, "orphaned-at-birth").await.then_some(()) },
    )
    .await;
    f.server.shutdown().await;
}

#[tokio::test]
async fn namespace_deletion_empties_then_removes_it() {
    let f = fixture().await;
    let client = f.server.client().await.unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "scratch"}})).unwrap();
    let created = nss.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Active"));
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "scratch");
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();
    nss.delete("scratch", &DeleteParams::default())
        .await
        .unwrap();
    let s = cms
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "d"}})).unwrap(),
        )
        .await;
    match s {
        Err(kube::Error::Api(s)) => assert!(s.code == 403 || s.code == 404, "{s:?}"),
        other => panic!("create in a terminating namespace succeeded: {other:?}"),
    }
    wait_for_within("namespace removed", GC_DEADLINE, || async {
        gone(&nss, "scratch").await.then_some(())
    })
    .await;
    assert!(gone(&cms, "c").await);
    f.server.shutdown().await;
}
