//! Admission on the embedded API server (src/sim/admission.rs): what virt-api's webhooks and
//! Pod Security admission do, seen through a kube client and with the controller running; and
//! `admission: false`, a cluster without virt-api.

use crate::common;

use common::env::{Env, EnvConfig};
use common::objects::{api_err, vm, vm_resource, vmi, vmi_resource};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use virtctl_rs::api::Phase;
use virtctl_rs::sim::{ApiServer, ApiServerConfig};

fn to_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).expect("serialisable")
}

#[tokio::test]
async fn a_new_vmi_is_pending_with_its_timestamp_and_the_foreground_finalizer() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let vmis: Api<DynamicObject> =
        Api::namespaced_with(server.client().await.unwrap(), "default", &vmi_resource());
    let created = to_value(
        &vmis
            .create(&PostParams::default(), &vmi("a"))
            .await
            .unwrap(),
    );
    assert_eq!(created["status"]["phase"], "Pending", "{created}");
    let stamps = created["status"]["phaseTransitionTimestamps"]
        .as_array()
        .expect("timestamps");
    assert_eq!(stamps.len(), 1);
    assert_eq!(stamps[0]["phase"], "Pending");
    assert!(stamps[0]["phaseTransitionTimestamp"].is_string());
    assert_eq!(
        created["metadata"]["finalizers"],
        json!(["kubevirt.io/foregroundDeleteVirtualMachine"])
    );
    server.shutdown().await;
}

#[tokio::test]
async fn without_admission_a_new_vmi_is_stored_as_sent() {
    let server = common::server_without_admission().await;
    let client = server.client().await.unwrap();
    let vmis: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vmi_resource());
    let created = to_value(
        &vmis
            .create(&PostParams::default(), &vmi("a"))
            .await
            .unwrap(),
    );
    assert!(created.get("status").is_none(), "{created}");
    assert!(created["metadata"].get("finalizers").is_none(), "{created}");
    // Nothing validates VMs either.
    let vms: Api<DynamicObject> = Api::namespaced_with(client, "default", &vm_resource());
    let mut both = vm("both");
    both.data["spec"]["running"] = json!(true);
    vms.create(&PostParams::default(), &both).await.unwrap();
    server.shutdown().await;
}

#[tokio::test]
async fn vm_validation_refuses_what_virt_api_refuses_and_leaves_the_store_alone() {
    let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
    let client = server.client().await.unwrap();
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vm_resource());
    let before = server.snapshot();

    let mut both = vm("both");
    both.data["spec"]["running"] = json!(true);
    both.data["spec"]["runStrategy"] = json!("Always");
    let s = api_err(vms.create(&PostParams::default(), &both).await.unwrap_err());
    assert_eq!(s.code, 422);
    assert_eq!(
        s.message,
        "admission webhook \"virtualmachine-validator.kubevirt.io\" denied the request: Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead"
    );

    let mut unknown = vm("unknown");
    unknown.data["spec"]["runStrategy"] = json!("Sometimes");
    let s = api_err(
        vms.create(&PostParams::default(), &unknown)
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    assert!(
        s.message.ends_with("Invalid RunStrategy (Sometimes)"),
        "{}",
        s.message
    );

    let mut quantity = vm("quantity");
    quantity.data["spec"]["template"]["spec"]["domain"]["resources"] =
        json!({"requests": {"memory": "1Gx"}});
    let s = api_err(
        vms.create(&PostParams::default(), &quantity)
            .await
            .unwrap_err(),
    );
    assert_eq!(s.code, 400);
    assert!(
        s.message.starts_with("admission webhook \"virtualmachines-mutator.kubevirt.io\" denied the request: quantities must match the regular expression"),
        "{}",
        s.message
    );
    assert_eq!(
        server.snapshot(),
        before,
        "a refused request stores nothing"
    );

    // Updates are validated too: a merge patch adding `running` to a runStrategy VM.
    vms.create(&PostParams::default(), &vm("ok")).await.unwrap();
    let s = api_err(
        vms.patch(
            "ok",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"running": true}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(s.code, 422);
    assert!(s.message.contains("mutually exclusive"), "{}", s.message);
    server.shutdown().await;
}

#[tokio::test]
async fn same_name_vms_in_two_namespaces_get_different_firmware_uuids() {
    let server = ApiServer::start(ApiServerConfig {
        namespaces: vec!["default".into(), "other".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let client = server.client().await.unwrap();
    let mut uuids = Vec::new();
    for ns in ["default", "other"] {
        let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &vm_resource());
        let created = to_value(
            &vms.create(&PostParams::default(), &vm("same"))
                .await
                .unwrap(),
        );
        let domain = &created["spec"]["template"]["spec"]["domain"];
        assert!(domain["firmware"]["serial"].is_string(), "{created}");
        assert_eq!(domain["machine"]["type"], "q35");
        uuids.push(domain["firmware"]["uuid"].as_str().unwrap().to_string());
    }
    assert_ne!(uuids[0], uuids[1]);
    server.shutdown().await;
}

/// With admission, the controller's VMI timeline starts at `Pending` and it adds no finalizer of
/// virt-api's itself; the VMI carries the mutator's one exactly once.
#[tokio::test]
async fn the_controller_runs_on_admitted_vmis() {
    let env = Env::start().await;
    let created = env
        .create_vm(&common::example_vm_with("vm-containerdisk", "Always"))
        .await;
    let template_uuid = created
        .spec
        .template
        .as_ref()
        .and_then(|t| t.spec.as_ref())
        .and_then(|s| s.domain.firmware.as_ref())
        .and_then(|f| f.uuid.clone())
        .expect("virt-api's mutator set a firmware UUID");
    let (_, vmi) = env.wait_running("demo-vm").await;
    let phases: Vec<Phase> = vmi
        .status
        .as_ref()
        .and_then(|s| s.phase_transition_timestamps.clone())
        .unwrap_or_default()
        .iter()
        .map(|t| t.phase)
        .collect();
    assert_eq!(phases.first(), Some(&Phase::Pending), "{phases:?}");
    assert!(phases.contains(&Phase::Running), "{phases:?}");
    let foreground = vmi
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f == "kubevirt.io/foregroundDeleteVirtualMachine")
        .count();
    assert_eq!(foreground, 1);
    assert_eq!(
        vmi.spec
            .domain
            .firmware
            .as_ref()
            .and_then(|f| f.uuid.as_deref()),
        Some(template_uuid.as_str())
    );
    env.shutdown().await;
}

/// A namespace enforcing `restricted`: the launcher pod is refused by Pod Security admission and
/// the controller reports that the VMI needs a privileged namespace (lifecycle.go:174-183).
#[tokio::test]
async fn pod_security_refuses_the_launcher_pod_in_a_restricted_namespace() {
    let mut config = EnvConfig::new("ctrl-psa");
    config.namespace = "locked".into();
    let env = Env::start_with(config, |_| {}).await;
    let namespaces: Api<Namespace> = Api::all(env.client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "locked", "labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}}))
            .unwrap(),
        )
        .await
        .expect("create namespace");
    let mut vm = common::example_vm_with("vm-containerdisk", "Always");
    vm.metadata.namespace = Some("locked".into());
    env.create_vm(&vm).await;
    env.wait_vmi_condition(
        "demo-vm",
        "a FailedCreate condition naming PodSecurity",
        |c| {
            c.message.as_deref().is_some_and(|m| {
                m.contains("it needs a privileged namespace to run")
                    && m.contains("violates PodSecurity \"restricted:latest\"")
            })
        },
    )
    .await;
    assert!(
        env.pods()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    env.shutdown().await;
}
