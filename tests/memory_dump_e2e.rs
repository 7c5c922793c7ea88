//! A memory dump end to end (KubeVirt v1.9, pkg/storage/memorydump/memorydump.go): virt-api's
//! `memorydump` subresource writes `status.memoryDumpRequest` (`Associating`; written directly
//! here, as the test servers have no virt-api); the VM controller adds the `memoryDump` volume
//! to the template and the running VMI (`InProgress`), the VMI controller attaches it with an
//! attachment pod, the simulated virt-handler takes the dump (pkg/virt-handler/vm.go:891-928),
//! the VM controller moves the request to `Unmounting`, writes the dump's file name into the
//! claim's `kubevirt.io/memory-dump` annotation and takes the volume out of the VMI; once the
//! VMI's status has no entry for it (the attachment pod gone) the request is `Completed`.
//! Dissociating (`remove`) then takes the volume out of the template and drops the request.

use crate::common;

use common::env::{Env, Server};
use futures::{StreamExt, TryStreamExt};
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const VM: &str = "demo-vm";
const CLAIM: &str = "dump-pvc";

/// Each distinct value `pick` reads from the objects `watch` sees, in order; returns once the
/// watch's initial list is in, so that no change written after the call is missed (the real
/// server's first "Associating" was).
async fn record<K>(
    api: kube::Api<K>,
    name: &str,
    pick: fn(&Value) -> Option<String>,
) -> Arc<Mutex<Vec<String>>>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + serde::Serialize
        + Send
        + 'static,
{
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let out = seen.clone();
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let (listed, listed_rx) = tokio::sync::oneshot::channel();
    let mut listed = Some(listed);
    tokio::spawn(async move {
        let mut stream = watcher(api, config).boxed();
        while let Ok(Some(event)) = stream.try_next().await {
            if matches!(event, watcher::Event::InitDone)
                && let Some(tx) = listed.take()
            {
                let _ = tx.send(());
            }
            if let watcher::Event::Apply(o) | watcher::Event::InitApply(o) = event
                && let Some(v) = pick(&serde_json::to_value(&o).unwrap_or_default())
            {
                let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                if s.last() != Some(&v) {
                    s.push(v);
                }
            }
        }
    });
    listed_rx.await.expect("the recorder's watch lists");
    out
}

fn request_phase(vm: &Value) -> Option<String> {
    vm["status"]["memoryDumpRequest"]["phase"]
        .as_str()
        .map(str::to_string)
}

fn dump_volume_phase(vmi: &Value) -> Option<String> {
    let e = vmi["status"]["volumeStatus"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == CLAIM)?;
    Some(format!(
        "{} {}",
        e["phase"].as_str().unwrap_or(""),
        e["hotplugVolume"]["attachPodName"].as_str().unwrap_or("")
    ))
}

fn has_dump_volume(spec: &Value) -> bool {
    spec["volumes"]
        .as_array()
        .is_some_and(|vs| vs.iter().any(|v| v["name"] == CLAIM))
}

/// Write `status.memoryDumpRequest` as virt-api's subresource does.
async fn request(env: &Env, body: Value) {
    env.vms()
        .patch_status(
            VM,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"memoryDumpRequest": body}})),
        )
        .await
        .expect("write the memory dump request");
}

/// Whether `seen` holds `want` in this order (others may come between).
fn in_order(seen: &[String], want: &[&str]) -> bool {
    let mut it = seen.iter();
    want.iter().all(|w| it.any(|s| s.starts_with(w)))
}

/// What `recorded` holds once it has `want` in order, or after 30 s. The recorder's watch can
/// trail the read that saw the last phase: asserting at once failed CI with "Completed" not
/// yet recorded.
async fn seen_in_order(recorded: &Mutex<Vec<String>>, want: &[&str]) -> Vec<String> {
    let seen = || recorded.lock().unwrap_or_else(|e| e.into_inner()).clone();
    common::poll_until(Duration::from_secs(30), || async {
        in_order(&seen(), want).then_some(())
    })
    .await;
    seen()
}

async fn a_memory_dump_request_completes_and_its_volume_leaves(server: Server) {
    let env = Env::start_on(server).await;
    env.create_claim(CLAIM, "2Gi").await;
    env.create_vm(&common::example_vm_with("vm-containerdisk", "Always"))
        .await;
    let (_, first) = env.wait_running(VM).await;
    let vm_phases = record(env.vms(), VM, request_phase).await;
    let vmi_phases = record(env.vmis(), VM, dump_volume_phase).await;

    request(&env, json!({"claimName": CLAIM, "phase": "Associating"})).await;
    let vm = env
        .wait_vm(VM, "memory dump Completed", |vm| {
            request_phase(&serde_json::to_value(vm).expect("json")).as_deref() == Some("Completed")
        })
        .await;
    let v = serde_json::to_value(&vm).expect("json");
    let req = &v["status"]["memoryDumpRequest"];
    let file = req["fileName"].as_str().expect("fileName").to_string();
    assert!(
        file.starts_with(&format!("{VM}-{CLAIM}-")) && file.ends_with(".memory.dump"),
        "{req}"
    );
    assert!(
        req["startTimestamp"].is_string() && req["endTimestamp"].is_string(),
        "{req}"
    );
    assert!(vm.condition("Failure").is_none(), "{:?}", vm.status);
    assert!(
        has_dump_volume(&v["spec"]["template"]["spec"]),
        "the template keeps the volume until dissociation"
    );
    let want = ["Associating", "InProgress", "Unmounting", "Completed"];
    let seen = seen_in_order(&vm_phases, &want).await;
    assert!(in_order(&seen, &want), "{seen:?}");
    let want = [
        "AttachedToNode hp-volume-",
        "MemoryDumpInProgress hp-volume-",
        "MemoryDumpCompleted hp-volume-",
        "Detaching hp-volume-",
    ];
    let seen = seen_in_order(&vmi_phases, &want).await;
    assert!(
        in_order(&seen, &want),
        "the dump volume's status through its attachment pod: {seen:?}"
    );
    let pvc = env.pvcs().get(CLAIM).await.expect("the claim");
    assert_eq!(
        pvc.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubevirt.io/memory-dump")),
        Some(&file)
    );
    let vmi = env
        .wait_vmi(VM, "the dump volume gone from spec and status", |vmi| {
            let v = serde_json::to_value(vmi).expect("json");
            !has_dump_volume(&v["spec"]) && dump_volume_phase(&v).is_none()
        })
        .await;
    assert_eq!(vmi.metadata.uid, first.metadata.uid, "no restart");
    env.wait_for("the attachment pod gone", || async {
        env.pods()
            .list(&kube::api::ListParams::default().labels("kubevirt.io=hotplug-disk"))
            .await
            .expect("list pods")
            .items
            .iter()
            .all(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;

    request(
        &env,
        json!({"claimName": CLAIM, "phase": "Dissociating", "remove": true}),
    )
    .await;
    env.wait_vm(VM, "the request and the template volume gone", |vm| {
        let v = serde_json::to_value(vm).expect("json");
        v["status"]["memoryDumpRequest"].is_null()
            && !has_dump_volume(&v["spec"]["template"]["spec"])
    })
    .await;

    env.shutdown().await;
}

on_both_servers!(a_memory_dump_request_completes_and_its_volume_leaves,);
