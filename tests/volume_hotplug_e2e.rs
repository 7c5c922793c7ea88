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
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{ListParams, PostParams};
use serde_json::{Value, json};

const VM: &str = "demo-vm";

fn entry<'a>(vmi: &'a Value, name: &str) -> Option<&'a Value> {
    vmi["status"]["volumeStatus"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

async fn attachment_pods(env: &Env) -> Vec<Pod> {
    env.pods()
        .list(&ListParams::default().labels("kubevirt.io=hotplug-disk"))
        .await
        .expect("list pods")
        .items
}

async fn a_hotplugged_claim_gets_an_attachment_pod_and_leaves_with_it(server: Server) {
    let env = Env::start_on(server).await;
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "hp-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .expect("claim");
    env.pvcs()
        .create(&PostParams::default(), &claim)
        .await
        .expect("create the claim");
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
    let vmi = env
        .wait_vmi(VM, "volume hp unplugged, its status entry gone", |vmi| {
            let v = serde_json::to_value(vmi).expect("json");
            entry(&v, "hp").is_none()
                && v["spec"]["volumes"]
                    .as_array()
                    .is_some_and(|vs| vs.iter().all(|v| v["name"] != "hp"))
        })
        .await;
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

on_both_servers!(a_hotplugged_claim_gets_an_attachment_pod_and_leaves_with_it,);
