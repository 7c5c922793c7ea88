//! The embedded API server against kube-apiserver v1.36 (tests/common/control_plane.rs): the
//! same controller starts the same example VMs on both, and what each server stores is compared
//! field by field. A difference fails the test with its JSON paths; each one found so far was
//! fixed in the embedded server (docs/embedded-cluster.md lists what it still simplifies).

use crate::common;

use std::collections::BTreeMap;

use common::env::{Env, EnvConfig, Server};
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

/// The example VMs of docs/examples that start on both servers, with what they need.
const EXAMPLES: [&str; 4] = [
    "vm-containerdisk.yaml",
    "vm-sata.yaml",
    "vm-priorityclass.yaml",
    "vm-pvc.yaml",
];

/// Apply the examples in the scenario's namespace, as `run-controller -n NS --apply` does
/// (a cluster-scoped PriorityClass already there is replaced: the real server is shared).
async fn create_examples(env: &Env) {
    for file in EXAMPLES {
        let path = common::repo_path("docs/examples").join(file);
        virtctl_rs::api::apply::apply_path_in(&env.client, &path, Some(&env.namespace))
            .await
            .unwrap_or_else(|e| panic!("apply {file}: {e}"));
    }
}

/// Bind every claim of the scenario's namespace as the embedded cluster's binder does
/// (src/sim/pvbinder.rs: `Bound`, access modes and the requested size as capacity). A bare
/// kube-apiserver runs no PV controller, so its claims would stay Pending while the embedded
/// ones bind, and the VMI's `volumeStatus` capacity would differ by when it was read.
async fn bind_claims(env: &Env) {
    use kube::api::{ListParams, Patch, PatchParams};
    let claims = env
        .pvcs()
        .list(&ListParams::default())
        .await
        .expect("list claims");
    for claim in claims.items {
        let name = claim.metadata.name.clone().expect("claim name");
        let spec = claim.spec.expect("claim spec");
        let size = spec
            .resources
            .and_then(|r| r.requests)
            .and_then(|r| r.get("storage").cloned());
        let status = json!({"status": {"phase": "Bound", "accessModes": spec.access_modes,
            "capacity": {"storage": size}}});
        env.pvcs()
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(status))
            .await
            .unwrap_or_else(|e| panic!("bind claim {name}: {e}"));
    }
}

/// What is left of a stored object once what differs between any two stores is removed:
/// names and UIDs generated (the VM's and VMI's appear in names and paths too), times, versions,
/// the node it was bound to, the status, and the qemu timeout KubeVirt draws at random
/// (`--qemu-timeout`, template.go). The namespace is written as `default`.
fn comparable(mut obj: Value, namespace: &str, uids: &[(&str, &str)]) -> Value {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in [
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "managedFields",
            "ownerReferences",
        ] {
            meta.remove(key);
        }
        if let Some(labels) = meta.get_mut("labels").and_then(Value::as_object_mut) {
            labels.remove(virtctl_rs::api::labels::CREATED_BY);
            labels.remove(virtctl_rs::api::labels::NODE_NAME);
        }
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("nodeName");
    }
    let kind = obj["kind"].as_str().unwrap_or_default().to_string();
    if kind == "VirtualMachineInstance" {
        // Every status write counts here (no status subresource), and how many writes a
        // start takes depends on timing: tests/sim_crud.rs pins the rule itself.
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("generation");
        }
    }
    if kind == "VirtualMachine" || kind == "VirtualMachineInstance" {
        if let Some(status) = obj.get_mut("status") {
            drop_volatile_status(status);
        }
    } else if let Some(o) = obj.as_object_mut() {
        o.remove("status");
    }
    for list in ["containers", "initContainers"] {
        for c in obj
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(command) = c.get_mut("command").and_then(Value::as_array_mut) else {
                continue;
            };
            if let Some(i) = command.iter().position(|a| a == "--qemu-timeout")
                && let Some(v) = command.get_mut(i + 1)
            {
                *v = json!("TIMEOUT");
            }
        }
    }
    let mut text = serde_json::to_string(&obj).expect("json");
    for (uid, placeholder) in uids {
        text = text.replace(uid, placeholder);
    }
    if namespace != "default" {
        text = text.replace(namespace, "default");
    }
    serde_json::from_str(&text).expect("json")
}

/// Remove from a VM's or VMI's status what depends on the moment and the node: times, the
/// node and its addresses, the pod UIDs.
fn drop_volatile_status(status: &mut Value) {
    let Some(s) = status.as_object_mut() else {
        return;
    };
    for key in ["nodeName", "activePods"] {
        s.remove(key);
    }
    for c in s
        .get_mut("conditions")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        c.remove("lastProbeTime");
        c.remove("lastTransitionTime");
    }
    for t in s
        .get_mut("phaseTransitionTimestamps")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        t.remove("phaseTransitionTimestamp");
    }
    for i in s
        .get_mut("interfaces")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
        .filter_map(Value::as_object_mut)
    {
        for key in ["ipAddress", "ipAddresses", "mac"] {
            i.remove(key);
        }
    }
}

/// The JSON paths where `a` and `b` differ, with both values.
fn differences(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let (va, vb) = (
                    x.get(k).unwrap_or(&Value::Null),
                    y.get(k).unwrap_or(&Value::Null),
                );
                differences(&format!("{path}.{k}"), va, vb, out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                differences(&format!("{path}[{i}]"), va, vb, out);
            }
        }
        _ if a != b => out.push(format!("{path}: embedded {a} / kube-apiserver {b}")),
        _ => {}
    }
}

/// What each server stores for one example: the VM, its VMI and its launcher pod.
#[derive(Debug, Default)]
struct Stored {
    vms: BTreeMap<String, Value>,
    vmis: BTreeMap<String, Value>,
    pods: BTreeMap<String, Value>,
}

/// Start the examples on `server` and return each VM, VMI and launcher pod as stored.
async fn stored_objects(server: Server) -> Stored {
    let env = Env::start_on_with(server, EnvConfig::new("conformance").without_virt_api()).await;
    create_examples(&env).await;
    if server.is_real() {
        bind_claims(&env).await;
    }
    let mut stored = Stored::default();
    for name in ["demo-vm", "demo-sata", "demo-priority", "demo-pvc"] {
        env.wait_running(name).await;
        // A claim may bind after the VMI runs; its capacity then reaches the VMI's volumeStatus
        // on a later sync. Compare once every claim's capacity is there.
        env.wait_vmi(name, "every claim's capacity in volumeStatus", |vmi| {
            let v = serde_json::to_value(vmi).expect("vmi json");
            v["status"]["volumeStatus"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e.get("persistentVolumeClaimInfo"))
                .all(|info| !info["capacity"].is_null())
        })
        .await;
        // Settled: the controllers have nothing left to write.
        env.wait_leading_and_idle().await;
        let (vm, vmi) = env.wait_running(name).await;
        let uid = vmi.metadata.uid.clone().unwrap_or_default();
        let vm_uid = vm.metadata.uid.clone().unwrap_or_default();
        let uids = [(uid.as_str(), "VMI-UID"), (vm_uid.as_str(), "VM-UID")];
        let found: Vec<Pod> = env.launcher_pods(&uid).await;
        assert_eq!(found.len(), 1, "{name}: one launcher pod");
        let pod = serde_json::to_value(&found[0]).expect("pod json");
        let ns = &env.namespace;
        stored
            .pods
            .insert(name.to_string(), comparable(pod, ns, &uids));
        let vm = serde_json::to_value(&vm).expect("vm json");
        stored
            .vms
            .insert(name.to_string(), comparable(vm, ns, &uids));
        let vmi = serde_json::to_value(&vmi).expect("vmi json");
        stored
            .vmis
            .insert(name.to_string(), comparable(vmi, ns, &uids));
    }
    env.shutdown().await;
    stored
}

/// The launcher-pod label patch of the VMI controller (`test` of the whole label map, then
/// `replace`; lifecycle.go:789-796) sent twice, as a sync whose pod cache has not seen the
/// first one sends it again (docs/performance.md, "With KubeVirt's client rate limit"): the
/// second one's refusal as a JSON Status, after checking that it changed nothing.
async fn repeated_label_patch(client: kube::Client, namespace: &str) -> Value {
    use kube::api::{Api, Patch, PatchParams, PostParams};
    let pods: Api<Pod> = Api::namespaced(client, namespace);
    pods.create(
        &PostParams::default(),
        &common::objects::pod("launcher", None),
    )
    .await
    .expect("create the pod");
    // kube's own `json_patch` version (the crate's is another).
    let patch = || {
        Patch::<()>::Json(
            serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/labels", "value": {"app": "web"}},
                {"op": "replace", "path": "/metadata/labels",
                 "value": {"app": "web", "kubevirt.io/nodeName": "node01"}}
            ]))
            .expect("patch"),
        )
    };
    let pp = PatchParams::default();
    let first = pods
        .patch("launcher", &pp, &patch())
        .await
        .expect("the first patch applies");
    let stored = first.metadata.resource_version.clone();
    let refused = pods
        .patch("launcher", &pp, &patch())
        .await
        .expect_err("the second patch's test fails");
    let after = pods.get("launcher").await.expect("get the pod");
    assert_eq!(after.metadata.resource_version, stored, "nothing changed");
    serde_json::to_value(common::objects::api_err(refused)).expect("status json")
}

#[test]
fn differences_name_each_path() {
    let mut out = Vec::new();
    differences(
        "p",
        &json!({"a": 1, "b": [1, 2], "c": {"d": "x"}}),
        &json!({"a": 1, "b": [1, 3], "c": {"e": "x"}}),
        &mut out,
    );
    assert_eq!(
        out,
        vec![
            "p.b[1]: embedded 2 / kube-apiserver 3",
            "p.c.d: embedded \"x\" / kube-apiserver null",
            "p.c.e: embedded null / kube-apiserver \"x\"",
        ]
    );
}
mod real_apiserver {
    use super::*;

    /// The same controller writes the same objects to both servers. What kube-apiserver adds
    /// (defaults, admission) the embedded server must add too, and what kube-apiserver drops
    /// (fields outside KubeVirt's CRD schema: pruning) the controller must not write: the
    /// embedded server keeps every field, so a pruned one shows as a difference.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn examples_are_stored_as_kube_apiserver_stores_them() {
        let Some(plane) = common::control_plane::shared("examples_are_stored_alike") else {
            return;
        };
        let embedded = stored_objects(Server::Embedded).await;
        let real = stored_objects(Server::Real(plane)).await;
        let mut found = Vec::new();
        for (what, ours, theirs) in [
            ("pod", &embedded.pods, &real.pods),
            ("vm", &embedded.vms, &real.vms),
            ("vmi", &embedded.vmis, &real.vmis),
        ] {
            for (name, object) in ours {
                differences(&format!("{what} {name}"), object, &theirs[name], &mut found);
            }
        }
        assert!(
            found.is_empty(),
            "the servers store the examples differently:\n{}",
            found.join("\n")
        );
    }

    /// Pruning is on: a VMI field outside KubeVirt's schema is dropped by kube-apiserver (and
    /// refused under strict field validation), while the embedded server keeps it. A field the
    /// controller wrote outside the schema would therefore fail the comparison above.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_vmi_field_outside_the_schema_is_pruned() {
        let Some(plane) = common::control_plane::shared("a_vmi_field_outside_the_schema") else {
            return;
        };
        let namespace = common::control_plane::ControlPlane::fresh_namespace("prune");
        plane.create_namespace(&namespace).await;
        let client = plane.client("virtctl-rs-e2e").await;
        let vmis: kube::Api<kube::api::DynamicObject> =
            kube::Api::namespaced_with(client, &namespace, &common::objects::vmi_resource());
        let mut vmi = common::objects::vmi("pruned");
        vmi.metadata.namespace = Some(namespace.clone());
        vmi.data["spec"]["domain"]["notAKubeVirtField"] = json!(true);
        vmi.data["status"] = json!({"phase": "Pending", "notAStatusField": "x"});

        let strict = kube::api::PatchParams::apply("virtctl-rs-e2e")
            .validation(kube::api::ValidationDirective::Strict);
        let refused = vmis
            .patch("pruned", &strict, &kube::api::Patch::Apply(&vmi))
            .await
            .unwrap_err();
        assert!(
            refused.to_string().contains("notAKubeVirtField"),
            "strict validation names the field: {refused}"
        );

        let stored = vmis
            .create(&kube::api::PostParams::default(), &vmi)
            .await
            .expect("create");
        assert!(
            stored.data["spec"]["domain"]
                .get("notAKubeVirtField")
                .is_none(),
            "{}",
            stored.data["spec"]["domain"]
        );
        assert!(stored.data["status"].get("notAStatusField").is_none());
        assert_eq!(
            stored.data["status"]["phase"], "Pending",
            "known fields stay"
        );
        plane.remove_namespace(&namespace).await;
    }

    /// A failed JSON-patch `test` gets kube-apiserver's `NewGenericServerResponse(422, ...)`
    /// (k8s.io/apiserver handlers/patch.go:412-415, k8s.io/apimachinery
    /// pkg/api/errors/errors.go:476-478, 500-523: reason `Invalid`, a fixed message, empty
    /// details), word for word on the embedded server: the failed `patch pods` of a
    /// rate-limited start look alike on both.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repeated_label_patch_is_refused_as_kube_apiserver_refuses_it() {
        let Some(plane) = common::control_plane::shared("a_repeated_label_patch") else {
            return;
        };
        let namespace = common::control_plane::ControlPlane::fresh_namespace("label-patch");
        plane.create_namespace(&namespace).await;
        let real = repeated_label_patch(plane.client("virtctl-rs-e2e").await, &namespace).await;
        plane.remove_namespace(&namespace).await;
        let server = virtctl_rs::sim::ApiServer::start(Default::default())
            .await
            .expect("embedded server");
        let client = server.client().await.expect("embedded client");
        let embedded = repeated_label_patch(client, "default").await;
        assert_eq!(embedded, real, "embedded / kube-apiserver");
        assert_eq!(
            real,
            json!({"status": "Failure", "code": 422, "reason": "Invalid", "details": {},
                   "message": "the server rejected our request due to an error in our request",
                   "metadata": {}})
        );
    }
}
