//! PersistentVolumeClaim- and DataVolume-driven status end to end (KubeVirt v1.9's VMI
//! controller `areDataVolumesReady`, pkg/virt-controller/watch/vmi/datavolumes.go:116-141,
//! lifecycle.go:91-114, 361-368; the VM's printableStatus, vm.go:2516-2690): a missing claim
//! holds the start (`ErrorPvcNotFound`) until it appears, an unbound one shows
//! `WaitingForVolumeBinding`, a failing DataVolume `DataVolumeError`; each clears.
//!
//! The real API server has no PersistentVolume controller and no CDI: the tests write the
//! claim's and the DataVolume's status themselves, as those controllers would. On the embedded
//! cluster the claims carry the binder's hold annotation so that only the test binds them.

use crate::common;

use common::env::{Env, EnvConfig, Server, printable};
use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use virtctl_rs::api::{DataVolume, Phase, VirtualMachine};
use virtctl_rs::kubevirt_version::KubeVirtVersion;
use virtctl_rs::sim::nodes::Matcher;
use virtctl_rs::sim::pvbinder::HOLD_ANNOTATION;

/// The claim docs/examples/vm-pvc.yaml's VM uses.
const CLAIM: &str = "demo-pvc-data";

fn example_vm() -> VirtualMachine {
    common::example_vm_with("vm-pvc", "Always")
}

/// The example's claim, held Pending on the embedded cluster.
async fn create_held_claim(env: &Env, name: &str, owner: Option<&DataVolume>) {
    let mut claim = json!({
        "metadata": {"name": name, "annotations": {HOLD_ANNOTATION: "true"}},
        "spec": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem",
                 "resources": {"requests": {"storage": "2Gi"}}}
    });
    if let Some(dv) = owner {
        claim["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "name": dv.metadata.name, "uid": dv.metadata.uid,
            "controller": true, "blockOwnerDeletion": true
        }]);
    }
    let claim: PersistentVolumeClaim = serde_json::from_value(claim).expect("claim");
    env.pvcs()
        .create(&PostParams::default(), &claim)
        .await
        .expect("create the claim");
}

/// What the PersistentVolume controller writes when it binds a claim.
async fn bind(env: &Env, name: &str) {
    env.pvcs()
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Bound", "accessModes": ["ReadWriteOnce"],
                "capacity": {"storage": "2Gi"}
            }})),
        )
        .await
        .expect("bind the claim");
}

fn condition_of(
    vmi: &virtctl_rs::api::VirtualMachineInstance,
    type_: &str,
) -> Option<(String, String, String)> {
    vmi.condition(type_).map(|c| {
        (
            c.status.to_string(),
            c.reason.as_deref().unwrap_or_default().to_string(),
            c.message.as_deref().unwrap_or_default().to_string(),
        )
    })
}

/// A VM whose claim does not exist: no launcher pod, the VMI `Synchronized=False` and
/// `PodScheduled=False` with KubeVirt's message, a Normal `FailedPvcNotFound` event, the VM
/// `ErrorPvcNotFound`; the claim appears and the VM starts (datavolumes.go:120-126,
/// lifecycle.go:361-368, vm.go:2673-2679; the claim's add enqueues the VMI, vmi/storage.go:43-63)
/// with the claim in the VMI's `volumeStatus`.
async fn a_missing_claim_holds_the_start_until_it_appears(server: Server) {
    let env = Env::start_on(server).await;
    env.create_vm(&example_vm()).await;
    env.wait_vm("demo-pvc", "ErrorPvcNotFound", |vm| {
        printable(vm) == "ErrorPvcNotFound"
    })
    .await;
    let message = format!(
        "PVC {}/{CLAIM} does not exist, waiting for it to appear",
        env.namespace
    );
    let vmi = env.vmi("demo-pvc").await.expect("VMI");
    assert_eq!(vmi.phase(), Phase::Pending);
    assert_eq!(
        condition_of(&vmi, "Synchronized"),
        Some(("False".into(), "FailedPvcNotFound".into(), message.clone()))
    );
    assert_eq!(
        condition_of(&vmi, "PodScheduled"),
        Some(("False".into(), "Unschedulable".into(), message.clone()))
    );
    let vmi_uid = vmi.metadata.uid.clone().expect("uid");
    assert!(env.launcher_pods(&vmi_uid).await.is_empty(), "no pod");
    env.wait_for("the Normal FailedPvcNotFound event", || async {
        let events: Api<Event> = Api::namespaced(env.client.clone(), &env.namespace);
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("FailedPvcNotFound")
                    && e.type_.as_deref() == Some("Normal")
                    && e.message.as_deref() == Some(message.as_str())
                    && e.involved_object.kind.as_deref() == Some("VirtualMachineInstance")
                    && e.involved_object.name.as_deref() == Some("demo-pvc")
            })
            .then_some(())
    })
    .await;

    env.create_example_claims("vm-pvc.yaml").await;
    let (vm, vmi) = env.wait_running("demo-pvc").await;
    assert_eq!(printable(&vm), "Running");
    assert_eq!(
        vmi.metadata.uid.as_deref(),
        Some(vmi_uid.as_str()),
        "same VMI"
    );
    assert_eq!(condition_of(&vmi, "Synchronized"), None, "cleared");
    assert_eq!(env.launcher_pods(&vmi_uid).await.len(), 1);

    // volumeStatus, written at the hand-over to virt-handler (lifecycle.go:410,
    // vmi/storage.go:231-340): every volume by name, the claim's info for the claim.
    let vmi = env
        .wait_vmi("demo-pvc", "volumeStatus", |vmi| {
            vmi.volume_status_entries().len() == 2
        })
        .await;
    let (statuses, names) = common::volume_statuses(vmi);
    assert_eq!(names, ["data", "root"]);
    let info = &statuses[0]["persistentVolumeClaimInfo"];
    assert_eq!(info["claimName"], json!(CLAIM));
    assert_eq!(info["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(info["volumeMode"], json!("Filesystem"));
    assert_eq!(info["requests"], json!({"storage": "2Gi"}));
    assert_eq!(info["filesystemOverhead"], json!("0.055"));
    assert!(statuses[1].get("persistentVolumeClaimInfo").is_none());
    env.shutdown().await;
}

/// A claim that exists but is not Bound: KubeVirt creates the launcher pod (a claim no
/// DataVolume controls is ready as it is, pvc.go:233-235) and shows `WaitingForVolumeBinding`
/// while the VMI has not started (vm.go:2596-2603; the launcher's image pull is held so that it
/// does not). Once the claim is Bound the VM's next sync shows what follows in the precedence
/// (`Starting`, or the image pull once the kubelet reported it); the VM
/// controller hears only of claims that appear (vm.go:213-215), so the test asks for that sync.
async fn an_unbound_claim_shows_waiting_for_volume_binding_until_it_binds(server: Server) {
    let env = Env::start_on(server).await;
    env.nodes().stick_image_pull(Matcher::vmi("demo-pvc"));
    create_held_claim(&env, CLAIM, None).await;
    env.create_vm(&example_vm()).await;
    env.wait_vm("demo-pvc", "WaitingForVolumeBinding", |vm| {
        printable(vm) == "WaitingForVolumeBinding"
    })
    .await;
    let vmi = env.vmi("demo-pvc").await.expect("VMI");
    let vmi_uid = vmi.metadata.uid.clone().expect("uid");
    env.wait_for("the launcher pod", || async {
        (env.launcher_pods(&vmi_uid).await.len() == 1).then_some(())
    })
    .await;

    bind(&env, CLAIM).await;
    env.wait_for("the claim Bound in the controller's cache", || async {
        let store = env.manager.context().caches.pvcs.store().clone();
        store
            .state()
            .iter()
            .any(|c| {
                c.metadata.name.as_deref() == Some(CLAIM)
                    && c.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
            })
            .then_some(())
    })
    .await;
    env.resync_and_settle("demo-pvc").await;
    let vm = env.vm("demo-pvc").await.expect("VM");
    // The rules after WaitingForVolumeBinding: the image pull, or Starting before the kubelet
    // reported it.
    assert!(
        matches!(
            printable(&vm).as_str(),
            "ErrImagePull" | "ImagePullBackOff" | "Starting"
        ),
        "{}",
        printable(&vm)
    );
    env.nodes().clear_image_pull_faults();
    env.wait_running("demo-pvc").await;
    env.shutdown().await;
}

/// demo-vm-like VM with a `dataVolumeTemplates` entry `demo-dve-disk` as its disk.
fn vm_with_data_volume() -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "demo-dve"},
        "spec": {
            "runStrategy": "Always",
            "dataVolumeTemplates": [{
                "metadata": {"name": "demo-dve-disk"},
                "spec": {"source": {"http": {"url": "http://images.invalid/disk.img"}},
                         "storage": {"resources": {"requests": {"storage": "2Gi"}}}}
            }],
            "template": {"spec": {
                "domain": {"devices": {"disks": [{"name": "disk", "disk": {"bus": "virtio"}}]},
                           "resources": {"requests": {"memory": "128Mi"}}},
                "volumes": [{"name": "disk", "dataVolume": {"name": "demo-dve-disk"}}]
            }}
        }
    }))
    .expect("static VM")
}

async fn dv_status(dvs: &Api<DataVolume>, status: serde_json::Value) {
    dvs.patch_status(
        "demo-dve-disk",
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .expect("DataVolume status");
}

/// A DataVolume whose importer stopped with an error shows `DataVolumeError` on the VM
/// (`HasDataVolumeErrors`, dv.go:171-196; vm.go:2681-2690); once CDI reports the import done and
/// its claim exists, the VM starts and the VMI carries `DataVolumesReady=True`
/// (datavolumes.go:143-178).
async fn a_failing_data_volume_shows_data_volume_error_until_it_recovers(server: Server) {
    let env = Env::start_on(server).await;
    env.create_vm(&vm_with_data_volume()).await;
    let dvs: Api<DataVolume> = Api::namespaced(env.client.clone(), &env.namespace);
    let dv = env
        .wait_for("the DataVolume of demo-dve", || async {
            dvs.get_opt("demo-dve-disk").await.ok().flatten()
        })
        .await;
    dv_status(
        &dvs,
        json!({"phase": "ImportInProgress", "conditions": [
            {"type": "Running", "status": "False", "reason": "Error",
             "message": "Unable to connect to http data source"}
        ]}),
    )
    .await;
    env.wait_vm("demo-dve", "DataVolumeError", |vm| {
        printable(vm) == "DataVolumeError"
    })
    .await;
    assert!(env.vmi("demo-dve").await.is_none(), "no VMI");

    create_held_claim(&env, "demo-dve-disk", Some(&dv)).await;
    bind(&env, "demo-dve-disk").await;
    dv_status(
        &dvs,
        json!({"phase": "Succeeded", "progress": "100.0%", "conditions": [
            {"type": "Running", "status": "False", "reason": "Completed"},
            {"type": "Ready", "status": "True"},
            {"type": "Bound", "status": "True"}
        ]}),
    )
    .await;
    let (vm, _) = env.wait_running("demo-dve").await;
    assert_eq!(printable(&vm), "Running");
    let vmi = env
        .wait_vmi("demo-dve", "DataVolumesReady", |vmi| {
            vmi.condition("DataVolumesReady").is_some()
        })
        .await;
    assert_eq!(
        condition_of(&vmi, "DataVolumesReady"),
        Some((
            "True".into(),
            "AllDVsReady".into(),
            "All of the VMI's DVs are bound and ready".into()
        ))
    );
    env.shutdown().await;
}

on_both_servers!(
    a_missing_claim_holds_the_start_until_it_appears,
    an_unbound_claim_shows_waiting_for_volume_binding_until_it_binds,
    a_failing_data_volume_shows_data_volume_error_until_it_recovers,
);

/// A running `RerunOnFailure` VM stopped (a Stop request for its VMI, as virt-api's stop handler
/// writes it) while its claim is Pending (the simulated node runs the VMI regardless): with `--kubevirt-version v1.9.0` (the default) it reports
/// `WaitingForVolumeBinding` although nothing starts it (`isSetToStart` is true without a VMI,
/// vm.go:1232-1236; kubevirt/kubevirt#18424); with `main` (PR 18787) it reports `Stopped`.
/// Neither creates a new VMI. Embedded only: the version is the manager's setting.
async fn stopped_rerun_on_failure_status(version: KubeVirtVersion) -> String {
    let mut config = EnvConfig::new("ctrl-e2e");
    config.settings.kubevirt_version = version;
    let env = Env::start_with(config, |_| {}).await;
    create_held_claim(&env, CLAIM, None).await;
    env.create_vm(&common::example_vm_with("vm-pvc", "RerunOnFailure"))
        .await;
    // Running first, so that the stop records no start failure (a VMI stopped before it ever
    // ran counts as one, and the VM would report CrashLoopBackOff).
    let (_, vmi) = env.wait_running("demo-pvc").await;
    let uid = vmi.metadata.uid.clone().expect("uid");
    env.vms()
        .patch_status(
            "demo-pvc",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "stateChangeRequests": [{"action": "Stop", "uid": uid}]
            }})),
        )
        .await
        .expect("add the Stop request");
    env.wait_vmi_gone("demo-pvc").await;
    env.wait_vm("demo-pvc", "no state change request left", |vm| {
        vm.status
            .as_ref()
            .and_then(|s| s.state_change_requests.as_ref())
            .is_none_or(|r| r.is_empty())
    })
    .await;
    env.resync_and_settle("demo-pvc").await;
    assert!(env.vmi("demo-pvc").await.is_none(), "{version}: restarted");
    let vm = env.vm("demo-pvc").await.expect("VM");
    env.shutdown().await;
    printable(&vm)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_rerun_on_failure_vm_reports_its_releases_status() {
    assert_eq!(
        stopped_rerun_on_failure_status(KubeVirtVersion::V1_9).await,
        "WaitingForVolumeBinding"
    );
    assert_eq!(
        stopped_rerun_on_failure_status(KubeVirtVersion::Main).await,
        "Stopped"
    );
}

/// With CDI installed (one CDI CR) the claims' `filesystemOverhead` is CDIConfig's: its
/// StorageClass's entry, else `global` (vmi/storage.go:374-394, pkg/storage/types/cdi.go:47-62),
/// instead of the 5.5 % KubeVirt writes without CDI. Embedded only: the real server has no CDI
/// CRDs but DataVolumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filesystem_overhead_is_cdis() {
    use virtctl_rs::api::storage::{Cdi, CdiConfig};
    let env = Env::start().await;
    let cdis: Api<Cdi> = Api::all(env.client.clone());
    let cdi: Cdi = serde_json::from_value(json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDI", "metadata": {"name": "cdi"}
    }))
    .expect("CDI");
    cdis.create(&PostParams::default(), &cdi)
        .await
        .expect("create the CDI");
    let configs: Api<CdiConfig> = Api::all(env.client.clone());
    let config: CdiConfig = serde_json::from_value(json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "CDIConfig",
        "metadata": {"name": "config"}, "spec": {}
    }))
    .expect("CDIConfig");
    configs
        .create(&PostParams::default(), &config)
        .await
        .expect("create the CDIConfig");
    configs
        .patch_status(
            "config",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"filesystemOverhead": {
                "global": "0.08", "storageClass": {"other": "0.2"}}}})),
        )
        .await
        .expect("CDI's status of its config");
    let storage = &env.manager.context().caches.storage;
    env.wait_for("the controller's CDI caches", || async {
        let configs = storage.cdi_configs.store().state();
        (storage.cdis.store().state().len() == 1
            && configs.iter().any(|c| {
                c.status
                    .as_ref()
                    .is_some_and(|s| s.get("filesystemOverhead").is_some())
            }))
        .then_some(())
    })
    .await;

    env.create_example_claims("vm-pvc.yaml").await;
    env.create_vm(&example_vm()).await;
    let vmi = env
        .wait_vmi("demo-pvc", "the claim in volumeStatus", |vmi| {
            vmi.volume_status_entries()
                .iter()
                .any(|e| e.get("persistentVolumeClaimInfo").is_some())
        })
        .await;
    let statuses = vmi.volume_status_entries();
    let info = &statuses[0]["persistentVolumeClaimInfo"];
    assert_eq!(info["claimName"], json!(CLAIM));
    assert_eq!(info["filesystemOverhead"], json!("0.08"), "{info}");
    env.shutdown().await;
}
