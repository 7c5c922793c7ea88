//! A VM with a cluster instancetype and a cluster preference (docs/examples/more/vm-instancetype.yaml),
//! on both API servers: it starts with the instancetype and preference expanded into its VMI as
//! KubeVirt v1.9 expands them (pkg/instancetype/apply, preference/apply), both specs are stashed
//! in ControllerRevisions named, labelled and owned as KubeVirt's (revision/store.go:232-276) and
//! recorded in the VM's status refs, and pointing the VM at another instancetype gives
//! RestartRequired (vm.go:2978-3055); and, under the KubeVirt CR's `referencePolicy: expand`,
//! the instancetype and preference written into the VM itself.

use crate::common;

use common::env::{Env, Server, printable};
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::Api;
use kube::api::PostParams;
use serde_json::{Value, json};
use virtctl_rs::api::VirtualMachine;
use virtctl_rs::api::instancetype::{
    VirtualMachineClusterInstancetype, VirtualMachineClusterPreference, VirtualMachineInstancetype,
    VirtualMachinePreference,
};

/// The documents of the example, with the cluster-scoped names made unique to `suffix` (the real
/// server's cluster-scoped objects outlive a test's namespace).
fn example(suffix: &str) -> Vec<Value> {
    let path = common::repo_path("docs/examples/more/vm-instancetype.yaml");
    let text = std::fs::read_to_string(&path).expect("example");
    let docs = virtctl_rs::api::manifest::split_documents(&path.display().to_string(), &text)
        .expect("parse");
    let rename = |v: &Value| format!("{}-{suffix}", v.as_str().unwrap());
    docs.into_iter()
        .map(|(_, mut doc)| {
            if doc["kind"] == "VirtualMachine" {
                for m in ["instancetype", "preference"] {
                    doc["spec"][m]["name"] = json!(rename(&doc["spec"][m]["name"]));
                }
            } else {
                doc["metadata"]["name"] = json!(rename(&doc["metadata"]["name"]));
            }
            doc
        })
        .collect()
}

async fn create_cluster_objects(env: &Env, docs: &[Value]) {
    let pp = PostParams::default();
    let its: Api<VirtualMachineClusterInstancetype> = Api::all(env.client.clone());
    let prefs: Api<VirtualMachineClusterPreference> = Api::all(env.client.clone());
    for doc in docs {
        match doc["kind"].as_str() {
            Some("VirtualMachineClusterInstancetype") => {
                its.create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .expect("create instancetype");
            }
            Some("VirtualMachineClusterPreference") => {
                prefs
                    .create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .expect("create preference");
            }
            _ => {}
        }
    }
}

fn status_ref(vm: &VirtualMachine, key: &str) -> Value {
    common::env::vm_status(vm)[key].clone()
}

async fn an_instancetype_vm_starts_expanded_and_restarts_on_a_new_reference(server: Server) {
    let env = Env::start_on(server).await;
    let suffix = env.namespace.clone();
    let docs = example(&suffix);
    create_cluster_objects(&env, &docs).await;
    let vm_doc = docs.iter().find(|d| d["kind"] == "VirtualMachine").unwrap();
    let vm: VirtualMachine = serde_json::from_value(vm_doc.clone()).unwrap();
    env.create_vm(&vm).await;
    let (vm, vmi) = env.wait_running("demo-instancetype").await;
    for e in env.audit() {
        if e.resource == "controllerrevisions" || e.resource == "virtualmachines" {
            eprintln!(
                "AUDIT {} {} {}/{} {} {}",
                e.seq, e.verb, e.resource, e.subresource, e.name, e.code
            );
        }
    }

    // The VMI: KubeVirt's expansion of demo-cx-medium + demo-linux-virtio.
    let vmi = serde_json::to_value(&vmi).unwrap();
    let spec = &vmi["spec"];
    assert_eq!(
        spec["domain"]["cpu"],
        json!({"sockets": 1, "cores": 2, "threads": 1}),
        "2 guest vCPUs as cores (preferredCPUTopology: cores)"
    );
    assert_eq!(spec["domain"]["memory"]["guest"], "2Gi");
    assert_eq!(spec["domain"]["machine"], json!({"type": "q35"}));
    assert_eq!(spec["domain"]["features"]["smm"], json!({}));
    assert_eq!(
        spec["domain"]["firmware"]["bootloader"]["efi"]["secureBoot"],
        json!(null)
    );
    assert!(spec["domain"]["firmware"]["bootloader"]["efi"].is_object());
    assert_eq!(spec["terminationGracePeriodSeconds"], 120);
    let devices = &spec["domain"]["devices"];
    for disk in devices["disks"].as_array().unwrap() {
        assert_eq!(disk["disk"]["bus"], "virtio", "{disk}");
    }
    assert_eq!(devices["interfaces"][0]["model"], "virtio");
    assert_eq!(
        devices["inputs"],
        json!([{"name": "default-0", "bus": "virtio", "type": "tablet"}])
    );
    let ann = &vmi["metadata"]["annotations"];
    assert_eq!(
        ann["kubevirt.io/cluster-instancetype-name"],
        format!("demo-cx-medium-{suffix}")
    );
    assert_eq!(
        ann["kubevirt.io/cluster-preference-name"],
        format!("demo-linux-virtio-{suffix}")
    );

    // The ControllerRevisions and the status refs.
    let it_name = format!("demo-cx-medium-{suffix}");
    let it_ref = status_ref(&vm, "instancetypeRef");
    let cr_name = it_ref["controllerRevisionRef"]["name"]
        .as_str()
        .expect("instancetypeRef.controllerRevisionRef.name")
        .to_string();
    let its: Api<VirtualMachineClusterInstancetype> = Api::all(env.client.clone());
    let it = its.get(&it_name).await.unwrap();
    let uid = it.metadata.uid.clone().unwrap();
    let generation = it.metadata.generation.unwrap_or(0);
    assert_eq!(
        cr_name,
        format!("demo-instancetype-{it_name}-v1beta1-{uid}-{generation}")
    );
    assert_eq!(
        it_ref,
        json!({"name": it_name, "kind": "VirtualMachineClusterInstancetype",
               "controllerRevisionRef": {"name": cr_name}})
    );
    let cr: ControllerRevision = env.revisions().get(&cr_name).await.unwrap();
    let labels = serde_json::to_value(&cr.metadata.labels).unwrap();
    assert_eq!(
        labels,
        json!({
            "instancetype.kubevirt.io/object-generation": generation.to_string(),
            "instancetype.kubevirt.io/object-kind": "VirtualMachineClusterInstancetype",
            "instancetype.kubevirt.io/object-name": it_name,
            "instancetype.kubevirt.io/object-uid": uid,
            "instancetype.kubevirt.io/object-version": "v1beta1"})
    );
    let owner = &cr.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, vm.metadata.uid.clone().unwrap());
    assert_eq!(owner.controller, Some(true));
    let data = &cr.data.as_ref().unwrap().0;
    assert_eq!(data["kind"], "VirtualMachineClusterInstancetype");
    assert_eq!(
        data["spec"],
        json!({"cpu": {"guest": 2}, "memory": {"guest": "2Gi"}})
    );
    let pref_ref = status_ref(&vm, "preferenceRef");
    assert_eq!(pref_ref["name"], format!("demo-linux-virtio-{suffix}"));
    assert!(pref_ref["controllerRevisionRef"]["name"].is_string());
    // The start revision pins both stashes.
    let start_name = vmi["status"]["virtualMachineRevisionName"]
        .as_str()
        .unwrap();
    let start: ControllerRevision = env.revisions().get(start_name).await.unwrap();
    let start_spec = &start.data.as_ref().unwrap().0["spec"];
    assert_eq!(start_spec["instancetype"]["revisionName"], cr_name);
    assert_eq!(
        start_spec["preference"]["revisionName"],
        pref_ref["controllerRevisionRef"]["name"]
    );

    // Another instancetype: a new stash, and RestartRequired (4 cores differ from 2).
    let large = format!("demo-cx-large-{suffix}");
    env.merge_patch_vm(
        "demo-instancetype",
        json!({"spec": {"instancetype": {"name": large}}}),
    )
    .await;
    let vm = env
        .wait_vm("demo-instancetype", "RestartRequired=True", |vm| {
            vm.condition("RestartRequired")
                .is_some_and(|c| c.status == "True")
        })
        .await;
    assert_eq!(
        vm.condition("RestartRequired").unwrap().message.as_deref(),
        Some("a non-live-updatable field was changed in the template spec")
    );
    assert_eq!(printable(&vm), "Running");
    let new_ref = status_ref(&vm, "instancetypeRef");
    assert_eq!(new_ref["name"], large);
    assert!(
        new_ref["controllerRevisionRef"]["name"]
            .as_str()
            .unwrap()
            .starts_with(&format!("demo-instancetype-{large}-v1beta1-"))
    );
    env.shutdown().await;
}

/// The KubeVirt CR's `instancetype.referencePolicy: expand` (pkg/instancetype/controller/vm/
/// controller.go:124-216) with docs/examples/more/vm-instancetype-expand.yaml: the VM
/// controller writes the namespaced instancetype and preference into the VM itself (template,
/// matchers cleared, no status refs, nothing stashed), and the VM then starts from its own
/// template.
async fn an_expand_policy_writes_the_instancetype_into_the_vm(server: Server) {
    let env = Env::start_on(server).await;
    env.create_kubevirt_cr(json!({"instancetype": {"referencePolicy": "expand"}}))
        .await;
    env.wait_for("the controller to load referencePolicy expand", || async {
        let s = env.manager.debug_state()["settings"]["current"].clone();
        (s["instancetypeReferencePolicy"] == "expand").then_some(())
    })
    .await;
    let path = common::repo_path("docs/examples/more/vm-instancetype-expand.yaml");
    let text = std::fs::read_to_string(&path).expect("example");
    let docs = virtctl_rs::api::manifest::split_documents(&path.display().to_string(), &text)
        .expect("parse");
    let pp = PostParams::default();
    let ns = env.namespace.as_str();
    for (_, doc) in &docs {
        match doc["kind"].as_str() {
            Some("VirtualMachineInstancetype") => {
                let its: Api<VirtualMachineInstancetype> = Api::namespaced(env.client.clone(), ns);
                its.create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .expect("create instancetype");
            }
            Some("VirtualMachinePreference") => {
                let prefs: Api<VirtualMachinePreference> = Api::namespaced(env.client.clone(), ns);
                prefs
                    .create(&pp, &serde_json::from_value(doc.clone()).unwrap())
                    .await
                    .expect("create preference");
            }
            Some("VirtualMachine") => {
                env.create_vm(&serde_json::from_value(doc.clone()).unwrap())
                    .await;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    let (vm, vmi) = env.wait_running("demo-expanded").await;

    let vm = serde_json::to_value(&vm).unwrap();
    assert_eq!(vm["spec"].get("instancetype"), None, "{vm}");
    assert_eq!(vm["spec"].get("preference"), None);
    assert_eq!(vm["status"].get("instancetypeRef"), None);
    assert_eq!(vm["status"].get("preferenceRef"), None);
    let template = &vm["spec"]["template"]["spec"];
    let cores = json!({"sockets": 1, "cores": 4, "threads": 1});
    assert_eq!(template["domain"]["cpu"], cores);
    assert_eq!(template["domain"]["memory"], json!({"guest": "3Gi"}));
    assert_eq!(template["domain"]["machine"], json!({"type": "q35"}));
    assert_eq!(template["architecture"], "amd64");
    assert_eq!(template["evictionStrategy"], "None");
    assert_eq!(template["terminationGracePeriodSeconds"], 60);
    assert_eq!(
        template["networks"],
        json!([{"name": "default", "pod": {}}])
    );
    let devices = &template["domain"]["devices"];
    assert_eq!(
        devices["interfaces"],
        json!([{"name": "default", "bridge": {}, "model": "virtio"}])
    );
    assert_eq!(
        devices["disks"],
        json!([{"name": "root", "disk": {"bus": "virtio"}},
               {"name": "cloudinit", "disk": {"bus": "virtio"}}])
    );
    assert_eq!(
        template["volumes"][0]["containerDisk"]["imagePullPolicy"],
        "IfNotPresent"
    );

    // The VMI is the template as written, without instancetype annotations: the VM names none.
    let vmi = serde_json::to_value(&vmi).unwrap();
    assert_eq!(vmi["spec"]["domain"]["cpu"], cores);
    assert_eq!(vmi["spec"]["domain"]["memory"]["guest"], "3Gi");
    let ann = &vmi["metadata"]["annotations"];
    assert_eq!(ann.get("kubevirt.io/instancetype-name"), None, "{ann}");

    // Nothing was stashed: no revision carries the instancetype labels.
    let revisions = env.revisions().list(&Default::default()).await.unwrap();
    let stashes: Vec<_> = revisions
        .items
        .iter()
        .filter(|r| {
            r.metadata
                .labels
                .as_ref()
                .is_some_and(|l| l.contains_key("instancetype.kubevirt.io/object-kind"))
        })
        .filter_map(|r| r.metadata.name.clone())
        .collect();
    assert!(stashes.is_empty(), "stashed: {stashes:?}");
    env.shutdown().await;
}

on_both_servers!(
    an_instancetype_vm_starts_expanded_and_restarts_on_a_new_reference,
    an_expand_policy_writes_the_instancetype_into_the_vm
);
