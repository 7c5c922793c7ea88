//! The controller follows the cluster's KubeVirt CR, as virt-controller's `ClusterConfig` does
//! (pkg/virt-config/configuration.go:329-359): a CR that appears or changes while the controller
//! runs changes the launcher pods it renders next, `inspect` then finds no mismatch between the
//! pod and the CR, and an invalid update is refused with the last good settings kept.
//!
//! The CR lives in the namespace the scenario's controller reads it from: `kubevirt` on the
//! embedded server, the scenario's own namespace on the real one (as its Lease does); in the
//! deploy layout (deploy/controller.yaml) the Lease is elsewhere and `inspect` still reads the
//! CR the controller follows.

use crate::cli_on_both_servers::run_json;
use crate::common;

use common::env::{Env, EnvConfig, Server};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use virtctl_rs::api::manifest::KubeVirtObject;
use virtctl_rs::api::quantity::ParsedQuantity;
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::launcher::explain::explain;

/// Merge `configuration` into the `spec.configuration` of the CR `kubevirt`; its new
/// resourceVersion.
async fn patch_configuration(api: &Api<DynamicObject>, configuration: serde_json::Value) -> String {
    let patch = json!({"spec": {"configuration": configuration}});
    api.patch("kubevirt", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch the KubeVirt CR")
        .metadata
        .resource_version
        .expect("a resourceVersion")
}

/// The `compute` container's memory request, bytes.
fn compute_memory_request(pod: &Pod) -> i64 {
    let spec = pod.spec.as_ref().expect("pod spec");
    let compute = spec
        .containers
        .iter()
        .find(|c| c.name == "compute")
        .expect("compute container");
    let q = compute
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("memory"))
        .expect("compute memory request");
    ParsedQuantity::parse(&q.0).expect("a quantity").value()
}

/// The memory request KubeVirt renders for `vm` with `memoryOvercommit` `percent`.
fn formula_memory_request(vm: &virtctl_rs::api::VirtualMachine, ns: &str, percent: u32) -> i64 {
    let settings = ClusterSettings {
        memory_overcommit: percent,
        ..Default::default()
    };
    let explained =
        explain(&KubeVirtObject::Vm(Box::new(vm.clone())), ns, &settings).expect("explain the VM");
    let q = &explained.compute_resources.requests["memory"];
    ParsedQuantity::parse(&q.0).expect("a quantity").value()
}

async fn a_kubevirt_cr_change_reaches_the_next_launcher_pod(server: Server) {
    let config = EnvConfig {
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        ..EnvConfig::new("kv-config")
    };
    let env = Env::start_on_with(server, config).await;
    let ns = env.namespace.clone();
    let kv_ns = env.manager_kubevirt_namespace();
    let lease_ns = env.manager_lease_namespace();
    let api = env.kubevirts(&kv_ns);
    // The controller started before the CR existed; the CR appears, then memoryOvercommit is
    // set to 150.
    let cr = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": kv_ns},
        "spec": {"configuration": {"developerConfiguration": {}}}
    });
    api.create(
        &PostParams::default(),
        &serde_json::from_value(cr).expect("a KubeVirt CR"),
    )
    .await
    .expect("create the KubeVirt CR");
    let overcommit = json!({"developerConfiguration": {"memoryOvercommit": 150}});
    let rv = patch_configuration(&api, overcommit).await;
    let settings = env
        .wait_for("the controller to load the KubeVirt CR", || async {
            let s = env.manager.debug_state()["settings"].clone();
            (s["kubevirt"]["resourceVersion"] == json!(rv)).then_some(s)
        })
        .await;
    assert_eq!(settings["current"]["memoryOvercommit"], 150, "{settings:#}");
    assert_eq!(settings["source"], "kubevirtCR", "{settings:#}");

    // The next VM started gets a launcher pod rendered at 150 %.
    let vm = common::example_vm_with("vm-containerdisk", "Always");
    env.create_vm(&vm).await;
    let (_, vmi) = env.wait_running("demo-vm").await;
    let uid = vmi.metadata.uid.clone().expect("VMI uid");
    let pods = env.launcher_pods(&uid).await;
    assert_eq!(pods.len(), 1, "one launcher pod");
    let at_150 = formula_memory_request(&vm, &ns, 150);
    assert_ne!(
        at_150,
        formula_memory_request(&vm, &ns, 100),
        "the overcommit changes the request"
    );
    assert_eq!(compute_memory_request(&pods[0]), at_150);

    // The inspector finds the pod as the CR says it should be, and the controller's settings
    // the same as the CR's.
    let json = env
        .wait_for("inspect to see demo-vm Running and steady", || async {
            let args = [
                "inspect",
                "vm/demo-vm",
                "-n",
                &ns,
                "--lease-namespace",
                &lease_ns,
                "--kubevirt-namespace",
                &kv_ns,
            ];
            let json = run_json(&env, &args, 0).await;
            (json["vmi"]["phase"] == "Running" && json["nextDecision"]["actions"] == json!([]))
                .then_some(json)
        })
        .await;
    let check = &json["overheadCheck"];
    assert_eq!(check["match"], true, "{check:#}");
    assert_eq!(check["differences"], json!([]), "{check:#}");
    let view = &json["settings"];
    assert_eq!(view["controller"]["memoryOvercommit"], 150, "{view:#}");
    assert_eq!(view["cluster"]["memoryOvercommit"], 150, "{view:#}");
    assert_eq!(view["differences"], json!([]), "{view:#}");
    assert_eq!(view["controllerResourceVersion"], json!(rv), "{view:#}");

    // An invalid update is refused, naming the field; the last good settings stay. (A ratio
    // below 1.0 passes the CRD's schema; KubeVirt's webhook, absent here, would refuse it.)
    let ratio = json!({"additionalGuestMemoryOverheadRatio": "0.5"});
    let bad = patch_configuration(&api, ratio).await;
    let settings = env
        .wait_for("the controller to refuse the invalid CR", || async {
            let s = env.manager.debug_state()["settings"].clone();
            (s["refused"]["resourceVersion"] == json!(bad)).then_some(s)
        })
        .await;
    let error = settings["refused"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("spec.configuration.additionalGuestMemoryOverheadRatio"),
        "{settings:#}"
    );
    assert_eq!(settings["current"]["memoryOvercommit"], 150, "{settings:#}");
    assert!(
        settings["current"]["additionalGuestMemoryOverheadRatio"].is_null(),
        "{settings:#}"
    );
    assert_eq!(settings["kubevirt"]["resourceVersion"], json!(rv));
    env.shutdown().await;
}

on_both_servers!(a_kubevirt_cr_change_reaches_the_next_launcher_pod);

/// deploy/controller.yaml's layout: the controller's Lease in `virtctl-rs`, the KubeVirt CR in
/// KubeVirt's install namespace `kubevirt`. `inspect --lease-namespace virtctl-rs` reads the CR
/// from `--kubevirt-namespace` (default `kubevirt`), where the controller follows it: the CR's
/// settings, and no difference from the controller's.
#[tokio::test]
async fn inspect_reads_the_kubevirt_cr_where_the_controller_does_not_beside_the_lease() {
    const LEASE_NS: &str = "virtctl-rs";
    let mut config = EnvConfig {
        listen: Some(std::net::SocketAddr::from(([127, 0, 0, 1], 0))),
        kubevirt_namespace: Some("kubevirt".into()),
        ..EnvConfig::new("kv-deploy")
    };
    config.cluster.api.namespaces.push(LEASE_NS.into());
    config.lease.namespace = LEASE_NS.into();
    let env = Env::start_on_with(Server::Embedded, config).await;
    let cr = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"memoryOvercommit": 150}}}
    });
    let created = env
        .kubevirts("kubevirt")
        .create(
            &PostParams::default(),
            &serde_json::from_value(cr).expect("a KubeVirt CR"),
        )
        .await
        .expect("create the KubeVirt CR");
    let rv = created
        .metadata
        .resource_version
        .expect("a resourceVersion");
    env.wait_for("the controller to load the KubeVirt CR", || async {
        let s = env.manager.debug_state()["settings"].clone();
        (s["kubevirt"]["resourceVersion"] == json!(rv)).then_some(())
    })
    .await;
    env.create_vm(&common::example_vm_with("vm-containerdisk", "Halted"))
        .await;

    let ns = env.namespace.clone();
    let args = [
        "inspect",
        "vm/demo-vm",
        "-n",
        &ns,
        "--lease-namespace",
        LEASE_NS,
    ];
    let json = run_json(&env, &args, 0).await;
    let view = &json["settings"];
    assert_eq!(view["controller"]["memoryOvercommit"], 150, "{view:#}");
    assert_eq!(view["cluster"]["memoryOvercommit"], 150, "{view:#}");
    assert_eq!(view["differences"], json!([]), "{view:#}");
    assert_eq!(view["controllerResourceVersion"], json!(rv), "{view:#}");
    let missing = json["missing"].as_array().cloned().unwrap_or_default();
    assert!(
        !missing.iter().any(|m| m["what"] == "kubevirt"),
        "{missing:?}"
    );
    env.shutdown().await;
}
