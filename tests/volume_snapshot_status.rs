//! VM `status.volumeSnapshotStatuses` end to end, as KubeVirt v1.9's snapshot controller
//! writes it (pkg/storage/snapshot/snapshot.go:969-1121): an entry per volume with KubeVirt's
//! reason texts, following the claims and the VolumeSnapshotClasses. The real API server
//! serves no `snapshot.storage.k8s.io`, so there every claim reads "No VolumeSnapshotClass", as
//! KubeVirt's does without the CRD; the VolumeSnapshotClass that enables a claim is tried on the
//! embedded cluster, which serves the kind.

use crate::common;

use common::env::{Env, Server};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use virtctl_rs::api::VirtualMachine;
use virtctl_rs::api::storage::VolumeSnapshotClass;

const DRIVER: &str = "csi.snapshots.example.com";

/// A Halted VM with a container disk, the claim `data` and the claim `later` (created by the
/// test when it wants it).
fn vm() -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "snap-vm"},
        "spec": {"runStrategy": "Halted", "template": {"spec": {
            "domain": {"devices": {"disks": [
                {"name": "root", "disk": {}}, {"name": "data", "disk": {}},
                {"name": "later", "disk": {}}]},
                "resources": {"requests": {"memory": "128Mi"}}},
            "volumes": [
                {"name": "root", "containerDisk": {"image": "quay.io/kubevirt/cirros-container-disk-demo"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "snap-data"}},
                {"name": "later", "persistentVolumeClaim": {"claimName": "snap-later"}},
            ]}}}
    }))
    .expect("VM")
}

async fn create_class(env: &Env, name: &str) {
    let class: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": name}, "provisioner": DRIVER,
        "volumeBindingMode": "WaitForFirstConsumer"
    }))
    .expect("class");
    Api::<StorageClass>::all(env.client.clone())
        .create(&PostParams::default(), &class)
        .await
        .expect("create the StorageClass");
}

async fn create_claim(env: &Env, name: &str, class: &str) {
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .expect("claim");
    env.pvcs()
        .create(&PostParams::default(), &claim)
        .await
        .expect("create the claim");
}

fn statuses(vm: &VirtualMachine) -> Value {
    common::env::vm_status(vm)["volumeSnapshotStatuses"].clone()
}

fn no_class(class: &str, volume: &str) -> Value {
    json!({"name": volume, "enabled": false, "reason": format!(
        "No VolumeSnapshotClass: Volume snapshots are not configured for this StorageClass \
         [{class}] [{volume}]")})
}

async fn wait_statuses(env: &Env, what: &str, want: &Value) {
    env.wait_vm("snap-vm", what, |vm| &statuses(vm) == want)
        .await;
}

/// The container disk is never snapshottable; a missing claim reads "PVC not found" until it
/// appears; a claim on a class without a VolumeSnapshotClass reads "No VolumeSnapshotClass";
/// a deleted claim goes back to "PVC not found" (snapshot.go:994-1044; the claim events
/// enqueue the VM, snapshot_base.go:590-607).
async fn volume_snapshot_statuses_follow_the_claims(server: Server) {
    let env = Env::start_on(server).await;
    let class = format!("snap-{}", env.namespace);
    create_class(&env, &class).await;
    create_claim(&env, "snap-data", &class).await;
    env.create_vm(&vm()).await;
    let root = json!({"name": "root", "enabled": false,
        "reason": "Snapshot is not supported for this volumeSource type [root]"});
    let not_found = json!({"name": "later", "enabled": false, "reason": "PVC not found"});
    wait_statuses(
        &env,
        "a missing claim",
        &json!([root, no_class(&class, "data"), not_found]),
    )
    .await;
    create_claim(&env, "snap-later", &class).await;
    wait_statuses(
        &env,
        "the claim appeared",
        &json!([root, no_class(&class, "data"), no_class(&class, "later")]),
    )
    .await;
    env.pvcs()
        .delete("snap-later", &DeleteParams::default())
        .await
        .expect("delete the claim");
    // The real server has no pvc-protection controller: drop its finalizer as it would once
    // no pod uses the claim (on the embedded cluster the claim is already gone).
    let _ = env
        .pvcs()
        .patch(
            "snap-later",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    wait_statuses(
        &env,
        "the claim is gone",
        &json!([root, no_class(&class, "data"), not_found]),
    )
    .await;
}

on_both_servers!(volume_snapshot_statuses_follow_the_claims);

/// A VolumeSnapshotClass whose driver is the claims' StorageClass's provisioner enables them
/// (snapshot.go:747-763); its deletion disables them again (every VM is enqueued on a class
/// event, snapshot_base.go:500-510).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_volume_snapshot_class_enables_the_claims() {
    let env = Env::start().await;
    create_class(&env, "snap-ceph").await;
    create_claim(&env, "snap-data", "snap-ceph").await;
    create_claim(&env, "snap-later", "snap-ceph").await;
    env.create_vm(&vm()).await;
    let root = json!({"name": "root", "enabled": false,
        "reason": "Snapshot is not supported for this volumeSource type [root]"});
    wait_statuses(
        &env,
        "no VolumeSnapshotClass",
        &json!([
            root,
            no_class("snap-ceph", "data"),
            no_class("snap-ceph", "later")
        ]),
    )
    .await;
    let classes: Api<VolumeSnapshotClass> = Api::all(env.client.clone());
    let vsc: VolumeSnapshotClass = serde_json::from_value(json!({
        "apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
        "metadata": {"name": "snap-ceph-snapclass"}, "driver": DRIVER, "deletionPolicy": "Delete"
    }))
    .expect("VolumeSnapshotClass");
    classes
        .create(&PostParams::default(), &vsc)
        .await
        .expect("create the VolumeSnapshotClass");
    let enabled = |v: &str| json!({"name": v, "enabled": true});
    wait_statuses(
        &env,
        "the VolumeSnapshotClass enables the claims",
        &json!([root, enabled("data"), enabled("later")]),
    )
    .await;
    classes
        .delete("snap-ceph-snapclass", &DeleteParams::default())
        .await
        .expect("delete the VolumeSnapshotClass");
    wait_statuses(
        &env,
        "the VolumeSnapshotClass is gone",
        &json!([
            root,
            no_class("snap-ceph", "data"),
            no_class("snap-ceph", "later")
        ]),
    )
    .await;
}
