//! Backend storage end to end (KubeVirt v1.9.0's VMI controller: watch/vmi/lifecycle.go:126-141,
//! 309-311, storage.go:112-136; pkg/storage/backend-storage/backend-storage.go): a VM with a
//! persistent TPM and EFI (docs/examples/more/vm-persistent-tpm.yaml) gets its
//! `persistent-state-for-<VM>-…` claim from the class the KubeVirt CR names; the launcher pod
//! waits for the claim to be bound, then mounts it as `vm-state`, and the VMI's `volumeStatus`
//! lists it as `persistent-state-for-this-vm`.
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
/// backend-storage.go:470-512, 580-616; rendervolumes.go:386-463).
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
            vmi.status
                .as_ref()
                .and_then(|s| s.volume_status.as_ref())
                .is_some_and(|v| {
                    v.iter()
                        .any(|e| e["name"] == "persistent-state-for-this-vm")
                })
        })
        .await;
    let statuses = vmi
        .status
        .and_then(|s| s.volume_status)
        .expect("volumeStatus");
    let names: Vec<&str> = statuses.iter().filter_map(|v| v["name"].as_str()).collect();
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

on_both_servers!(a_persistent_tpm_vm_gets_its_state_claim_before_its_pod);
