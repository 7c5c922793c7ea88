//! Declarative volume hotplug end to end (KubeVirt v1.9, gate `DeclarativeHotplugVolumes` on by
//! default): a hotpluggable claim added to a running VM's template reaches its VMI without a
//! restart (pkg/storage/hotplug/hotplug.go), the VMI controller creates the `hp-volume-`
//! attachment pod owned by the launcher pod and pinned to its node
//! (watch/vmi/volume-hotplug.go, services/template.go:1077-1209) and reports the volume
//! `AttachedToNode` (watch/vmi/storage.go:137-192), which the simulated virt-handler mounts
//! and attaches (`MountedToPod`, then `Ready` with a target; pkg/virt-handler/vm.go:498-531);
//! removing it from the template removes it from the VMI, the simulated virt-handler unmounts
//! it, the attachment pod is deleted and, once it is gone, the volume's status entry.

use crate::common;

use common::env::{Env, Server};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{ListParams, Patch, PatchParams};
use serde_json::{Value, json};
use virtctl_rs::kubevirt_version::KubeVirtVersion;

const VM: &str = "demo-vm";

fn entry<'a>(vmi: &'a Value, name: &str) -> Option<&'a Value> {
    vmi["status"]["volumeStatus"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The VMI once volume `hp` left its spec and its status entry is gone.
async fn wait_unplugged(env: &Env) -> virtctl_rs::api::VirtualMachineInstance {
    env.wait_vmi(VM, "volume hp unplugged, its status entry gone", |vmi| {
        let v = serde_json::to_value(vmi).expect("json");
        entry(&v, "hp").is_none()
            && v["spec"]["volumes"]
                .as_array()
                .is_some_and(|vs| vs.iter().all(|v| v["name"] != "hp"))
    })
    .await
}

async fn attachment_pods(env: &Env) -> Vec<Pod> {
    env.pods()
        .list(&ListParams::default().labels("kubevirt.io=hotplug-disk"))
        .await
        .expect("list pods")
        .items
}

async fn a_hotplugged_claim_gets_an_attachment_pod_and_leaves_with_it(server: Server) {
    hotplug_and_unplug(server, KubeVirtVersion::V1_9).await;
}

/// `run-controller --kubevirt-version main` (PR 18222): the attachment pod also records its VMI's
/// name and UID in two annotations.
async fn on_main_the_attachment_pod_records_its_vmi(server: Server) {
    hotplug_and_unplug(server, KubeVirtVersion::Main).await;
}

async fn hotplug_and_unplug(server: Server, version: KubeVirtVersion) {
    let mut config = common::env::EnvConfig::new("ctrl-e2e");
    config.settings.kubevirt_version = version;
    let env = Env::start_on_with(server, config).await;
    env.create_claim("hp-data", "1Gi").await;
    env.create_vm(&common::example_vm_with("vm-containerdisk", "Always"))
        .await;
    let (vm, first) = env.wait_running(VM).await;
    let node = first
        .status
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("node");
    let template = serde_json::to_value(&vm).expect("json")["spec"]["template"]["spec"].clone();
    let (volumes, disks) = (
        template["volumes"].clone(),
        template["domain"]["devices"]["disks"].clone(),
    );
    let mut plugged_volumes = volumes.as_array().cloned().unwrap_or_default();
    plugged_volumes.push(
        json!({"name": "hp", "persistentVolumeClaim": {"claimName": "hp-data", "hotpluggable": true}}),
    );
    let mut plugged_disks = disks.as_array().cloned().unwrap_or_default();
    plugged_disks.push(json!({"name": "hp", "disk": {"bus": "scsi"}}));
    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {"volumes": plugged_volumes,
            "domain": {"devices": {"disks": plugged_disks}}}}}}),
    )
    .await;

    let vmi = env
        .wait_vmi(VM, "volume hp Ready", |vmi| {
            let v = serde_json::to_value(vmi).expect("json");
            entry(&v, "hp").is_some_and(|e| {
                e["phase"] == "Ready"
                    && e["hotplugVolume"]["attachPodName"]
                        .as_str()
                        .is_some_and(|n| n.starts_with("hp-volume-"))
            })
        })
        .await;
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart");
    let v = serde_json::to_value(&vmi).expect("json");
    assert!(
        v["spec"]["domain"]["devices"]["disks"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["name"] == "hp")),
        "the disk reached the VMI: {v}"
    );
    let hp = entry(&v, "hp").expect("entry");
    assert_eq!(hp["reason"], "VolumeReady");
    assert_eq!(
        hp["target"], "sda",
        "the simulated domain attached the disk"
    );
    assert_eq!(hp["persistentVolumeClaimInfo"]["claimName"], "hp-data");
    let pods = attachment_pods(&env).await;
    assert_eq!(pods.len(), 1, "one attachment pod");
    let pod = serde_json::to_value(&pods[0]).expect("json");
    let launcher = &env
        .launcher_pods(first.metadata.uid.as_deref().unwrap())
        .await[0];
    assert_eq!(
        pod["metadata"]["name"],
        hp["hotplugVolume"]["attachPodName"]
    );
    assert_eq!(
        pod["metadata"]["ownerReferences"][0]["uid"].as_str(),
        launcher.metadata.uid.as_deref(),
        "owned by the launcher pod"
    );
    assert_eq!(
        pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"],
        json!([node])
    );
    let owner = match version {
        KubeVirtVersion::Main => json!({"kubevirt.io/owner-vmi-name": VM,
                                        "kubevirt.io/owner-vmi-uid": first.metadata.uid}),
        _ => Value::Null,
    };
    assert_eq!(pod["metadata"]["annotations"], owner, "{version}");
    assert!(pod["spec"]["volumes"].as_array().is_some_and(|vs| {
        vs.iter()
            .any(|v| v["persistentVolumeClaim"]["claimName"] == "hp-data")
    }));
    let vm = env.vm(VM).await.expect("VM");
    assert!(vm.condition("RestartRequired").is_none(), "{:?}", vm.status);
    assert!(vm.condition("Failure").is_none(), "{:?}", vm.status);

    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {"volumes": volumes,
            "domain": {"devices": {"disks": disks}}}}}}),
    )
    .await;
    let vmi = wait_unplugged(&env).await;
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart");
    env.wait_for("the attachment pod deleted", || async {
        attachment_pods(&env)
            .await
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;

    env.shutdown().await;
}

/// Set the VM's `status.volumeRequests`, as virt-api's VM `addvolume`/`removevolume` do with the
/// `HotplugVolumes` gate (volumes.go:279-304, a JSON patch; this is the equivalent merge patch).
async fn set_volume_requests(env: &Env, requests: Value) {
    env.vms()
        .patch_status(
            VM,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"volumeRequests": requests}})),
        )
        .await
        .expect("patch the VM status");
}

fn template_has(vm: &Value, name: &str) -> (bool, bool) {
    let t = &vm["spec"]["template"]["spec"];
    let named = |list: &Value| {
        list.as_array()
            .is_some_and(|l| l.iter().any(|x| x["name"] == name))
    };
    (
        named(&t["volumes"]),
        named(&t["domain"]["devices"]["disks"]),
    )
}

/// The legacy hotplug path (gate `HotplugVolumes`): a request in the VM's
/// `status.volumeRequests` is applied to the VM template and sent to virt-api's VMI
/// `addvolume` subresource, which puts the volume in the running VMI; the VMI controller
/// attaches it as for declarative hotplug, and the VM status drops the request once the template
/// shows it (vm.go:808-847, 2855-2900). A remove request takes it out again. Without virt-api
/// (the real kube-apiserver here) the subresource does not exist: the VM reports KubeVirt's
/// `HotPlugVolumeError` and its template is left as it was.
async fn a_volume_request_goes_through_virt_apis_vmi_subresource(server: Server) {
    let env = Env::start_on(server).await;
    env.enable_feature_gates(&["HotplugVolumes"]).await;
    env.create_claim("hp-data", "1Gi").await;
    env.create_vm(&common::example_vm_with("vm-containerdisk", "Always"))
        .await;
    let (_, first) = env.wait_running(VM).await;
    set_volume_requests(
        &env,
        json!([{"addVolumeOptions": {"name": "hp", "disk": {"name": "hp", "disk": {"bus": "scsi"}},
            "volumeSource": {"persistentVolumeClaim": {"claimName": "hp-data"}}}}]),
    )
    .await;

    if env.server().is_real() {
        let vm = env
            .wait_vm(VM, "HotPlugVolumeError", |vm| {
                vm.condition("Failure")
                    .is_some_and(|c| c.reason.as_deref() == Some("HotPlugVolumeError"))
            })
            .await;
        let message = vm.condition("Failure").and_then(|c| c.message.clone());
        assert!(
            message.as_deref().is_some_and(
                |m| m.starts_with("Error encountered while handling volume hotplug requests: ")
            ),
            "{message:?}"
        );
        let v = serde_json::to_value(&vm).expect("json");
        assert_eq!(template_has(&v, "hp"), (false, false), "template unchanged");
        assert!(
            !v["status"]["volumeRequests"].is_null(),
            "the request stays"
        );
        env.shutdown().await;
        return;
    }

    let vmi = env
        .wait_vmi(VM, "volume hp Ready through the legacy path", |vmi| {
            let v = serde_json::to_value(vmi).expect("json");
            entry(&v, "hp").is_some_and(|e| e["phase"] == "Ready")
        })
        .await;
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart");
    let v = serde_json::to_value(&vmi).expect("json");
    let hp = v["spec"]["volumes"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["name"] == "hp"))
        .cloned();
    assert_eq!(
        hp,
        Some(
            json!({"name": "hp", "persistentVolumeClaim": {"claimName": "hp-data", "hotpluggable": true}})
        ),
        "virt-api made the claim hotpluggable"
    );
    let vm = env
        .wait_vm(VM, "the request trimmed from the VM status", |vm| {
            let v = serde_json::to_value(vm).expect("json");
            v["status"]["volumeRequests"].is_null()
        })
        .await;
    let v = serde_json::to_value(&vm).expect("json");
    assert_eq!(template_has(&v, "hp"), (true, true), "in the template: {v}");
    assert!(vm.condition("Failure").is_none(), "{:?}", vm.status);
    assert_eq!(attachment_pods(&env).await.len(), 1, "one attachment pod");

    set_volume_requests(&env, json!([{"removeVolumeOptions": {"name": "hp"}}])).await;
    let vmi = wait_unplugged(&env).await;
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart");
    let vm = env
        .wait_vm(VM, "the remove request trimmed", |vm| {
            serde_json::to_value(vm).expect("json")["status"]["volumeRequests"].is_null()
        })
        .await;
    let v = serde_json::to_value(&vm).expect("json");
    assert_eq!(
        template_has(&v, "hp"),
        (false, false),
        "out of the template"
    );
    env.shutdown().await;
}

/// Whether the pod is a WaitForFirstConsumer temporary pod (lifecycle.go:1085-1088).
fn is_temporary(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| {
        a.contains_key(virtctl_rs::launcher::pod::EPHEMERAL_PROVISIONING_ANNOTATION)
    })
}

/// A hotplugged DataVolume whose claim's StorageClass binds on first consumer: the VMI
/// controller creates trigger pods owned by the launcher pod (volume-hotplug.go:192-200,
/// 252-268) until the claim binds and CDI (the test) reports the import done; then the volume
/// gets its attachment pod and the trigger pods are deleted (lifecycle.go:188-193).
async fn a_hotplugged_wait_for_first_consumer_data_volume_gets_trigger_pods(server: Server) {
    let env = Env::start_on(server).await;
    let class_name = format!("{}-hp-wffc", env.namespace);
    let classes: kube::Api<k8s_openapi::api::storage::v1::StorageClass> =
        kube::Api::all(env.client.clone());
    let class = serde_json::from_value(json!({"metadata": {"name": class_name},
        "provisioner": "e2e.invalid", "volumeBindingMode": "WaitForFirstConsumer"}))
    .expect("class");
    match classes.create(&Default::default(), &class).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("create the StorageClass: {e}"),
    }
    // CDI's objects: the DataVolume, its claim on the late-binding class, its phase.
    let dvs: kube::Api<virtctl_rs::api::DataVolume> =
        kube::Api::namespaced(env.client.clone(), &env.namespace);
    let dv: virtctl_rs::api::DataVolume = serde_json::from_value(json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "hp-dv"},
        "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}}
    }))
    .expect("DataVolume");
    let dv = dvs
        .create(&Default::default(), &dv)
        .await
        .expect("create the DataVolume");
    let claim: k8s_openapi::api::core::v1::PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "hp-dv", "ownerReferences": [{
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume", "name": "hp-dv",
            "uid": dv.metadata.uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class_name,
                 "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .expect("claim");
    env.pvcs()
        .create(&Default::default(), &claim)
        .await
        .expect("create the claim");
    let set_phase = |phase: &'static str| {
        let dvs = dvs.clone();
        async move {
            dvs.patch_status(
                "hp-dv",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"phase": phase}})),
            )
            .await
            .expect("DataVolume status");
        }
    };
    set_phase("WaitForFirstConsumer").await;

    env.create_vm(&common::example_vm_with("vm-containerdisk", "Always"))
        .await;
    let (vm, first) = env.wait_running(VM).await;
    let template = serde_json::to_value(&vm).expect("json")["spec"]["template"]["spec"].clone();
    let mut volumes = template["volumes"].as_array().cloned().unwrap_or_default();
    volumes.push(json!({"name": "hp", "dataVolume": {"name": "hp-dv", "hotpluggable": true}}));
    let mut disks = template["domain"]["devices"]["disks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    disks.push(json!({"name": "hp", "disk": {"bus": "scsi"}}));
    env.merge_patch_vm(
        VM,
        json!({"spec": {"template": {"spec": {"volumes": volumes,
            "domain": {"devices": {"disks": disks}}}}}}),
    )
    .await;

    let trigger = env
        .wait_for("a trigger pod for volume hp", || async {
            attachment_pods(&env).await.into_iter().find(is_temporary)
        })
        .await;
    let launcher = &env
        .launcher_pods(first.metadata.uid.as_deref().unwrap())
        .await[0];
    let owner = trigger
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.clone());
    assert_eq!(owner, launcher.metadata.uid, "owned by the launcher pod");
    env.wait_for("the claim bound by a trigger pod's scheduling", || async {
        let c = env.pvcs().get("hp-dv").await.ok()?;
        (c.status?.phase.as_deref() == Some("Bound")).then_some(())
    })
    .await;

    set_phase("Succeeded").await;
    let vmi = env
        .wait_vmi(VM, "volume hp Ready", |vmi| {
            let v = serde_json::to_value(vmi).expect("json");
            entry(&v, "hp").is_some_and(|e| e["phase"] == "Ready")
        })
        .await;
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart");
    env.wait_for("the trigger pods deleted", || async {
        attachment_pods(&env)
            .await
            .iter()
            .all(|p| !is_temporary(p) || p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    env.shutdown().await;
}

on_both_servers!(
    a_hotplugged_wait_for_first_consumer_data_volume_gets_trigger_pods,
    a_hotplugged_claim_gets_an_attachment_pod_and_leaves_with_it,
    on_main_the_attachment_pod_records_its_vmi,
    a_volume_request_goes_through_virt_apis_vmi_subresource,
);
