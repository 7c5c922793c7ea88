//! Backend storage end to end (KubeVirt v1.9.0's VMI controller: watch/vmi/lifecycle.go:126-141,
//! 309-311, storage.go:112-136; pkg/storage/backend-storage/backend-storage.go): a VM with a
//! persistent TPM and EFI (docs/examples/more/vm-persistent-tpm.yaml) gets its
//! `persistent-state-for-<VM>-…` claim from the class the KubeVirt CR names; the launcher pod
//! waits for the claim to be bound, then mounts it as `vm-state`, and the VMI's `volumeStatus`
//! lists it as `persistent-state-for-this-vm`. A claim there before the VM under the legacy
//! name is used as found, and the patches that label such a claim when it is found at creation
//! time apply on both servers alike.
//!
//! The real API server binds no claim (no PersistentVolume controller): the test binds it as
//! that controller would, after seeing the VMI held with `BackendStorageNotReady`. The embedded
//! cluster's binder binds it by itself.

use crate::common;

use common::env::{Env, Server};
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const VM: &str = "demo-persistent-tpm";
const CLASS: &str = "e2e-vm-state";

async fn backend_claim(env: &Env) -> Option<PersistentVolumeClaim> {
    let lp = ListParams::default().labels(&format!("persistent-state-for={VM}"));
    env.pvcs().list(&lp).await.ok()?.items.into_iter().next()
}

/// The claim, the hold and the pod's `vm-state` volume (storage.go:126-133,
/// backend-storage.go:509-557, 592-629; rendervolumes.go:386-463).
async fn a_persistent_tpm_vm_gets_its_state_claim_before_its_pod(server: Server) {
    let env = Env::start_on(server).await;
    let classes: Api<StorageClass> = Api::all(env.client.clone());
    let class = serde_json::from_value(json!({"metadata": {"name": CLASS},
        "provisioner": "e2e.invalid", "volumeBindingMode": "Immediate"}))
    .expect("class");
    match classes.create(&PostParams::default(), &class).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create the StorageClass: {e}"),
    }
    env.create_kubevirt_cr(json!({"vmStateStorageClass": CLASS}))
        .await;
    env.wait_for(
        "the controller to follow the CR and see the class",
        || async {
            let s = env.manager.debug_state()["settings"]["current"].clone();
            let ctx = env.manager.context();
            let seen = ctx
                .caches
                .storage
                .storage_classes
                .store()
                .state()
                .iter()
                .any(|c| c.metadata.name.as_deref() == Some(CLASS));
            (s["vmStateStorageClass"] == json!(CLASS) && seen).then_some(())
        },
    )
    .await;
    let vm = env
        .create_vm(&common::example_vm("more/vm-persistent-tpm.yaml"))
        .await;

    let claim = env
        .wait_for("the backend-storage claim", || backend_claim(&env))
        .await;
    let name = claim.metadata.name.clone().expect("name");
    assert!(
        name.starts_with("persistent-state-for-demo-persistent-tpm-"),
        "{name}"
    );
    let owner = &claim.metadata.owner_references.clone().expect("owner")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("VirtualMachine", vm.metadata.uid.as_deref().expect("uid"))
    );
    let spec = serde_json::to_value(claim.spec.clone().expect("spec")).expect("json");
    assert_eq!(
        spec["accessModes"],
        json!(["ReadWriteMany"]),
        "configured class: RWX"
    );
    assert_eq!(spec["resources"]["requests"]["storage"], json!("10Mi"));
    assert_eq!(spec["storageClassName"], json!(CLASS));
    assert_eq!(spec["volumeMode"], json!("Filesystem"));
    assert_eq!(
        claim.metadata.labels.clone().expect("labels")["cdi.kubevirt.io/applyStorageProfile"],
        "true"
    );

    if env.server().is_real() {
        // Pending with an Immediate class: no pod, BackendStorageNotReady (lifecycle.go:138-141).
        let vmi = env
            .wait_vmi_condition(VM, "Synchronized=False BackendStorageNotReady", |c| {
                c.type_ == "Synchronized"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("BackendStorageNotReady")
            })
            .await;
        let uid = vmi.metadata.uid.clone().expect("uid");
        assert!(env.launcher_pods(&uid).await.is_empty(), "held");
        env.pvcs()
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Bound",
                    "accessModes": ["ReadWriteMany"], "capacity": {"storage": "10Mi"}}})),
            )
            .await
            .expect("bind the claim");
    }

    let (_, vmi) = env.wait_running(VM).await;
    let uid = vmi.metadata.uid.clone().expect("uid");
    let pods = env.launcher_pods(&uid).await;
    let pod = serde_json::to_value(&pods[0]).expect("pod");
    let volumes = pod["spec"]["volumes"].as_array().expect("volumes");
    assert!(
        volumes
            .contains(&json!({"name": "vm-state", "persistentVolumeClaim": {"claimName": name}})),
        "{volumes:?}"
    );
    let compute = &pod["spec"]["containers"][0];
    let sub_paths: Vec<&str> = compute["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .filter(|m| m["name"] == "vm-state")
        .filter_map(|m| m["subPath"].as_str())
        .collect();
    assert_eq!(sub_paths, ["meta", "swtpm", "swtpm-localca", "nvram"]);

    let vmi = env
        .wait_vmi(VM, "the backend-storage volumeStatus entry", |vmi| {
            vmi.volume_status_entries()
                .iter()
                .any(|e| e["name"] == "persistent-state-for-this-vm")
        })
        .await;
    let (statuses, names) = common::volume_statuses(vmi);
    assert_eq!(names, ["persistent-state-for-this-vm", "root"]);
    assert_eq!(
        statuses[0]["persistentVolumeClaimInfo"]["claimName"],
        json!(name)
    );
    assert_eq!(
        statuses[0]["persistentVolumeClaimInfo"]["accessModes"],
        json!(["ReadWriteMany"])
    );

    // The VM's volumeSnapshotStatuses list the claim after the template's volumes, under the
    // volume name the snapshot controller's enumeration gives it (volumes.go:81-131,
    // snapshot.go:969-992): no VolumeSnapshotClass here, so not snapshottable.
    let vm = env
        .wait_vm(
            VM,
            "the backend-storage volumeSnapshotStatuses entry",
            |vm| {
                common::env::vm_status(vm)["volumeSnapshotStatuses"]
                    .as_array()
                    .is_some_and(|a| a.len() == 2)
            },
        )
        .await;
    assert_eq!(
        common::env::vm_status(&vm)["volumeSnapshotStatuses"][1],
        json!({"name": format!("persistent-state-for-{VM}"), "enabled": false,
               "reason": format!("No VolumeSnapshotClass: Volume snapshots are not configured \
                                  for this StorageClass [{CLASS}] [persistent-state-for-{VM}]")})
    );
    env.shutdown().await;
}

/// A claim with `spec` enough for both servers, `labels` as given (`None`: no labels).
fn plain_claim(name: &str, labels: Option<serde_json::Value>) -> PersistentVolumeClaim {
    let mut meta = json!({"name": name});
    if let Some(l) = labels {
        meta["labels"] = l;
    }
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": meta,
        "spec": {"accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "10Mi"}}}}))
    .expect("claim")
}

/// The claim as the API server has it, bound: the real server binds nothing, so the test
/// writes the status the PV controller would; the embedded binder binds a class-less claim.
async fn bound(env: &Env, name: &str) -> PersistentVolumeClaim {
    if env.server().is_real() {
        env.pvcs()
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": "Bound",
                    "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Mi"}}})),
            )
            .await
            .expect("bind the claim");
    }
    env.wait_for("the claim to be Bound", || async {
        let c = env.pvcs().get(name).await.ok()?;
        let phase = c.status.as_ref().and_then(|s| s.phase.as_deref());
        (phase == Some("Bound")).then_some(c)
    })
    .await
}

/// The two JSON patches `labelLegacyPVC` sends (backend-storage.go:245-258), as the controller
/// builds them (`backend_storage::legacy_label_patch`'s unit test): `add /metadata/labels` on a
/// claim without labels, `replace /metadata/labels/persistent-state-for` on one with other
/// labels. Both succeed on kube-apiserver: its JSON patch (evanphx/json-patch v4) sets a key
/// that a `replace` finds missing in an existing object, and the embedded server does the same.
async fn the_legacy_label_patches_succeed(server: Server) {
    let env = Env::start_on(server).await;
    let pp = PostParams::default();
    let bare = "legacy-no-labels";
    let other = "legacy-other-labels";
    env.pvcs()
        .create(&pp, &plain_claim(bare, None))
        .await
        .expect("create");
    env.pvcs()
        .create(&pp, &plain_claim(other, Some(json!({"team": "db"}))))
        .await
        .expect("create");
    // Sent as the controller sends it: `application/json-patch+json`.
    let send = |name: &'static str, ops: serde_json::Value| {
        let env = &env;
        async move {
            let path = format!(
                "/api/v1/namespaces/{}/persistentvolumeclaims/{name}",
                env.namespace
            );
            let req = http::Request::patch(path)
                .header("content-type", "application/json-patch+json")
                .body(serde_json::to_vec(&ops).expect("body"))
                .expect("request");
            env.client.request::<PersistentVolumeClaim>(req).await
        }
    };
    let add = json!([{"op": "add", "path": "/metadata/labels",
                      "value": {"persistent-state-for": VM}}]);
    let labels = |c: PersistentVolumeClaim| serde_json::to_value(c.metadata.labels).expect("json");
    let c = send(bare, add).await.expect("add the labels");
    assert_eq!(labels(c), json!({"persistent-state-for": VM}));
    let replace = json!([{"op": "replace", "path": "/metadata/labels/persistent-state-for",
                          "value": VM}]);
    let c = send(other, replace.clone())
        .await
        .expect("replace a missing key of an existing map");
    assert_eq!(labels(c), json!({"persistent-state-for": VM, "team": "db"}));
    // What makes it fail is what makes any write fail: the claim is gone (only logged).
    let gone = send("legacy-gone", replace)
        .await
        .expect_err("no such claim");
    assert!(
        matches!(&gone, kube::Error::Api(e) if e.code == 404),
        "{gone}"
    );
    env.shutdown().await;
}

/// A claim named `persistent-state-for-<VM>` without the label, there before the VM: the VMI
/// controller finds it by name (`PVCForVMI`, backend-storage.go:61-83), waits for it and mounts
/// it, and leaves it unlabelled: `handleBackendStorage` only calls `CreatePVCForVMI`, the one
/// caller of `labelLegacyPVC`, when no claim was found (storage.go:126-133).
async fn a_legacy_claim_is_used_as_found(server: Server) {
    let env = Env::start_on(server).await;
    let legacy = format!("persistent-state-for-{VM}");
    env.pvcs()
        .create(
            &PostParams::default(),
            &plain_claim(&legacy, Some(json!({"team": "db"}))),
        )
        .await
        .expect("create the legacy claim");
    bound(&env, &legacy).await;
    env.wait_for("the controller's claim cache to hold it", || async {
        let ctx = env.manager.context();
        let seen = ctx.caches.pvcs.store().state().iter().any(|c| {
            c.metadata.name.as_deref() == Some(legacy.as_str())
                && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
        });
        seen.then_some(())
    })
    .await;
    env.create_vm(&common::example_vm("more/vm-persistent-tpm.yaml"))
        .await;
    let (_, vmi) = env.wait_running(VM).await;
    let uid = vmi.metadata.uid.clone().expect("uid");
    let pod = serde_json::to_value(&env.launcher_pods(&uid).await[0]).expect("pod");
    let volumes = pod["spec"]["volumes"].as_array().expect("volumes");
    assert!(
        volumes
            .contains(&json!({"name": "vm-state", "persistentVolumeClaim": {"claimName": legacy}})),
        "{volumes:?}"
    );
    let claim = env.pvcs().get(&legacy).await.expect("the legacy claim");
    assert_eq!(
        serde_json::to_value(claim.metadata.labels).expect("json"),
        json!({"team": "db"}),
        "not relabelled"
    );
    assert!(backend_claim(&env).await.is_none(), "no new claim");
    env.shutdown().await;
}

on_both_servers!(
    a_persistent_tpm_vm_gets_its_state_claim_before_its_pod,
    the_legacy_label_patches_succeed,
    a_legacy_claim_is_used_as_found,
);
