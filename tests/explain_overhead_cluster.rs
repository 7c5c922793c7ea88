//! `explain-overhead` against the embedded cluster, through the built binary: cluster mode
//! (`vm/NAME`, `vmi/NAME`, `pod/NAME`) on pods our controller rendered, the namespace's
//! ResourceQuotas and ratio label in the controller's rendering and in the explanation, and the
//! fleet audit (`-A`) with drift, OOM risk, an earlier OOM kill, Prometheus' resident memory,
//! and reads the client may not make.

use crate::common;

use common::env::{CONTROLLER_AGENT, Env};
use k8s_openapi::api::core::v1::{Namespace, Pod, ResourceQuota};
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use tokio::process::Command;
use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
use virtctl_rs::config::ClusterSettings;
use virtctl_rs::controller::vmi::executor::render_pod_with;
use virtctl_rs::launcher::resources::NamespaceContext;
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};
use virtctl_rs::sim::faults::{FaultRule, Verb};

/// `explain-overhead ARGS` against a kubeconfig: (exit code, stdout, stderr).
async fn explain(kubeconfig: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
        .arg("explain-overhead")
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output()
        .await
        .expect("run explain-overhead");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn explain_json(kubeconfig: &Path, args: &[&str], code: i32) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let (got, stdout, stderr) = explain(kubeconfig, &all).await;
    assert_eq!(
        got,
        Some(code),
        "explain-overhead {args:?}: {stderr}\n{stdout}"
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

fn vm(name: &str, namespace: &str, resources: Value) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runStrategy": "Always", "template": {"spec": {
            "domain": {"devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                       "resources": resources},
            "volumes": [{"name": "root", "containerDisk": {"image": "quay.io/containerdisks/fedora:41"}}]
        }}}
    }))
    .expect("static VM")
}

fn compute_memory(pod: &Pod, side: &str) -> Option<i64> {
    virtctl_rs::launcher::containers::compute_quantity(pod, side, "memory")
}

/// The running launcher pod of VM `name` in `namespace`, once its VMI runs.
async fn running_pod(env: &Env, namespace: &str, name: &str) -> Pod {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(env.client.clone(), namespace);
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), namespace);
    env.wait_for(
        &format!("{namespace}/{name} Running with its pod"),
        || async {
            let vmi = vmis.get_opt(name).await.ok()??;
            if vmi.phase() != virtctl_rs::api::vmi::Phase::Running {
                return None;
            }
            let uid = vmi.metadata.uid.clone()?;
            pods.list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
                .await
                .ok()?
                .items
                .into_iter()
                .find(|p| {
                    p.metadata.deletion_timestamp.is_none()
                        && p.metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|r| r.uid == uid)
                })
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_mode_matches_the_controllers_pods_and_both_apply_the_namespace_quota() {
    let env = Env::start().await;
    // The controller renders a launcher pod from what its namespace and ResourceQuota caches
    // hold at that moment, as KubeVirt's TemplateService does (template.go
    // `doesVMIRequireAutoResourceLimits`). Those watches lag here on purpose, so that the
    // test must wait until the controller has seen the quotas and the label before it creates
    // the VMs: without that wait it raced the watches (CI failed on it once).
    let faults = env.cluster().api().faults();
    for resource in ["resourcequotas", "namespaces"] {
        faults.add(
            FaultRule::delay_watch_events(std::time::Duration::from_millis(700))
                .resource(resource)
                .user_agent(CONTROLLER_AGENT),
        );
    }
    faults.drop_watches();
    let client = env.client.clone();
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for (ns, labels) in [
        ("quota-default", json!({})),
        (
            "quota-label",
            json!({"alpha.kubevirt.io/auto-memory-limits-ratio": "3.2"}),
        ),
    ] {
        let n: Namespace =
            serde_json::from_value(json!({"metadata": {"name": ns, "labels": labels}})).unwrap();
        namespaces
            .create(&PostParams::default(), &n)
            .await
            .expect("namespace");
        let q: ResourceQuota = serde_json::from_value(json!({
            "metadata": {"name": "limits", "namespace": ns},
            "spec": {"hard": {"limits.memory": "100Gi", "requests.memory": "100Gi"}}
        }))
        .unwrap();
        Api::<ResourceQuota>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &q)
            .await
            .expect("quota");
    }
    env.wait_for(
        "the controller's caches to hold the quotas and the ratio label",
        || async {
            let caches = &env.manager.context().caches;
            let settings = ClusterSettings::default();
            let two = caches.namespace_context("quota-default", &settings);
            let three = caches.namespace_context("quota-label", &settings);
            (two.quota_limits_memory
                && three.quota_limits_memory
                && three
                    .labels
                    .contains_key(virtctl_rs::launcher::resources::AUTO_MEMORY_LIMITS_RATIO_LABEL))
            .then_some(())
        },
    )
    .await;
    let requests = json!({"requests": {"memory": "1Gi"}});
    for ns in ["default", "quota-default", "quota-label"] {
        Api::<VirtualMachine>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &vm("vm-q", ns, requests.clone()))
            .await
            .expect("create VM");
    }
    let plain = running_pod(&env, "default", "vm-q").await;
    let two = running_pod(&env, "quota-default", "vm-q").await;
    let three = running_pod(&env, "quota-label", "vm-q").await;

    // The controller renders the automatic memory limit: trunc(request × ratio).
    let request = compute_memory(&plain, "requests").expect("memory request");
    assert_eq!(compute_memory(&plain, "limits"), None, "no quota: no limit");
    assert_eq!(compute_memory(&two, "requests"), Some(request));
    assert_eq!(compute_memory(&two, "limits"), Some(request * 2));
    assert_eq!(
        compute_memory(&three, "limits"),
        Some((request as f64 * 3.2).trunc() as i64)
    );

    // explain-overhead says the same, and the pods MATCH; every way of naming the object works.
    let kubeconfig = env.cluster().kubeconfig_path().to_path_buf();
    for (ns, pod, limit) in [
        ("default", &plain, None),
        ("quota-default", &two, Some(request * 2)),
        (
            "quota-label",
            &three,
            Some((request as f64 * 3.2).trunc() as i64),
        ),
    ] {
        let pod_ref = format!("pod/{}", pod.metadata.name.as_deref().unwrap());
        for target in ["vm/vm-q", "vmi/vm-q", pod_ref.as_str()] {
            let v = explain_json(&kubeconfig, &[target, "-n", ns], 0).await;
            let e = &v[0];
            assert_eq!(e["podCheck"]["match"], true, "{ns} {target}: {e:#}");
            assert_eq!(
                e["podCheck"]["pod"],
                format!("{ns}/{}", pod.metadata.name.as_deref().unwrap())
            );
            let rendered = e["computeResources"]["limits"]["memory"].as_str().map(|q| {
                virtctl_rs::api::quantity::ParsedQuantity::parse(q)
                    .unwrap()
                    .value()
            });
            assert_eq!(rendered, limit, "{ns} {target}");
            assert_eq!(
                e["cluster"]["namespaceContext"]["quotaLimitsMemory"],
                ns != "default"
            );
            assert_eq!(e["reportedOverheadBytes"], e["overhead"]["totalBytes"]);
        }
    }
    let (code, table, _) = explain(&kubeconfig, &["vm/vm-q", "-n", "quota-label"]).await;
    assert_eq!(code, Some(0));
    assert!(table.contains(": MATCH"), "{table}");
    assert!(
        table.contains("automatic memory limit × 3.2 (label)"),
        "{table}"
    );

    // A VM that runs no VMI is explained from its template, with no pod to compare.
    let mut halted = vm("vm-halted", "default", requests.clone());
    halted.spec.run_strategy = Some("Halted".into());
    env.create_vm(&halted).await;
    let v = explain_json(&kubeconfig, &["vm/vm-halted"], 0).await;
    assert_eq!(v[0]["kind"], "VirtualMachine");
    assert!(v[0]["noPod"].as_str().unwrap().contains("no VMI runs"));

    // Names that do not exist, and types that are none of ours.
    let (code, _, err) = explain(&kubeconfig, &["vm/nope"]).await;
    assert_eq!(code, Some(1));
    assert!(
        err.contains("VirtualMachine default/nope not found"),
        "{err}"
    );
    let (code, _, err) = explain(&kubeconfig, &["deployment/x"]).await;
    assert_eq!(code, Some(2));
    assert!(err.contains("resource type \"deployment\""), "{err}");
    let (code, _, err) = explain(&kubeconfig, &["vm/vm-q", "--pod", "x.yaml"]).await;
    assert_eq!(code, Some(2), "{err}");
    env.shutdown().await;
}

/// A VMI created through the API (no controller runs in the audit test), and its launcher pod
/// as KubeVirt renders it with `settings`, changed by `edit`, created through the API too.
async fn vmi_with_pod(
    client: &kube::Client,
    name: &str,
    domain: Value,
    settings: &ClusterSettings,
    edit: impl FnOnce(&mut Value),
) -> Pod {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), "default");
    let vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"domain": domain}
    }))
    .unwrap();
    let vmi = vmis
        .create(&PostParams::default(), &vmi)
        .await
        .expect("create VMI");
    let pod = render_pod_with(settings, &NamespaceContext::default(), &vmi).expect("render");
    let mut value = serde_json::to_value(&pod).unwrap();
    value["metadata"]["name"] = json!(format!("virt-launcher-{name}-x1y2z"));
    value["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("generateName");
    edit(&mut value);
    let pod: Pod = serde_json::from_value(value).unwrap();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &pod)
        .await
        .expect("create pod")
}

fn set_compute(value: &mut Value, pointer: &str, q: &str) {
    let containers = value["spec"]["containers"].as_array_mut().unwrap();
    let compute = containers
        .iter_mut()
        .find(|c| c["name"] == "compute")
        .unwrap();
    *compute
        .pointer_mut(pointer)
        .unwrap_or_else(|| panic!("{pointer}")) = json!(q);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_flags_drift_oom_risk_and_oom_kills_worst_first_and_survives_forbidden_reads() {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: 0,
        ..Default::default()
    })
    .await
    .expect("embedded cluster");
    let client = cluster.client().await.expect("client");
    // The cluster's KubeVirt: cpuAllocationRatio 20, version v1.9.0.
    let kv = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {"configuration": {"developerConfiguration": {"cpuAllocationRatio": 20}}}
    });
    let ar = kube::core::ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt"),
        "kubevirts",
    );
    let kvs: Api<kube::core::DynamicObject> = Api::namespaced_with(client.clone(), "kubevirt", &ar);
    kvs.create(&PostParams::default(), &serde_json::from_value(kv).unwrap())
        .await
        .expect("KubeVirt CR");
    kvs.patch_status(
        "kubevirt",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"observedKubeVirtVersion": "v1.9.0"}})),
    )
    .await
    .expect("KubeVirt status");
    let now = ClusterSettings {
        cpu_allocation_ratio: 20,
        ..Default::default()
    };
    let domain = json!({"devices": {}, "resources": {"requests": {"memory": "1Gi"}}});
    // As KubeVirt renders today: not flagged (unless Prometheus says otherwise).
    vmi_with_pod(&client, "ok", domain.clone(), &now, |_| {}).await;
    // Rendered when the cluster had the default cpuAllocationRatio (10).
    vmi_with_pod(
        &client,
        "old-ratio",
        domain.clone(),
        &ClusterSettings::default(),
        |_| {},
    )
    .await;
    // Its memory request changed after rendering (the annotation says what was rendered).
    vmi_with_pod(&client, "edited", domain.clone(), &now, |p| {
        set_compute(p, "/resources/requests/memory", "2000Mi")
    })
    .await;
    // A memory limit the guest and the overhead do not fit in.
    let limited = json!({"devices": {}, "resources": {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}});
    vmi_with_pod(&client, "tight", limited, &now, |p| {
        set_compute(p, "/resources/limits/memory", "1100Mi")
    })
    .await;
    // Guest memory only: v1.9 sizes no page tables for it (16Mi short at 8Gi).
    vmi_with_pod(
        &client,
        "guest-only",
        json!({"devices": {}, "memory": {"guest": "8Gi"}}),
        &now,
        |_| {},
    )
    .await;
    // ... while a 512Mi guest misses only 1 MiB: below the audit's threshold.
    vmi_with_pod(
        &client,
        "small-guest-only",
        json!({"devices": {}, "memory": {"guest": "512Mi"}}),
        &now,
        |_| {},
    )
    .await;
    // OOM-killed before.
    let killed = vmi_with_pod(&client, "killed", domain.clone(), &now, |_| {}).await;
    Api::<Pod>::namespaced(client.clone(), "default")
        .patch_status(
            killed.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"containerStatuses": [{
                "name": "compute", "image": "x", "imageID": "", "ready": true, "restartCount": 1,
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}
            }]}})),
        )
        .await
        .expect("pod status");

    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let report = explain_json(&kubeconfig, &["-A"], 3).await;
    assert_eq!(report["podsChecked"], 7, "{report:#}");
    assert_eq!(report["kubevirtVersion"], "v1.9.0");
    let findings = report["findings"].as_array().expect("findings");
    let of = |vmi: &str| -> Vec<String> {
        findings
            .iter()
            .filter(|f| f["vmi"] == vmi)
            .map(|f| f["kind"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(of("ok"), Vec::<String>::new(), "{report:#}");
    assert_eq!(of("old-ratio"), ["drift"]);
    assert_eq!(of("edited"), ["drift"]);
    assert_eq!(of("killed"), ["oomKilled"]);
    assert_eq!(of("guest-only"), ["upstreamDefect"]);
    assert_eq!(of("small-guest-only"), Vec::<String>::new());
    let defect = &findings.iter().find(|f| f["vmi"] == "guest-only").unwrap();
    assert_eq!(defect["bytes"], 8 * 1024 * 1024 * 1024i64 / 512);
    assert!(
        defect["message"].as_str().unwrap().contains("PR 15896"),
        "{defect}"
    );
    assert_eq!(of("tight"), ["oomRisk", "drift"]);
    assert_eq!(findings[0]["kind"], "oomKilled", "worst first");
    let message = |vmi: &str, kind: &str| -> String {
        findings
            .iter()
            .find(|f| f["vmi"] == vmi && f["kind"] == kind)
            .and_then(|f| f["message"].as_str())
            .unwrap_or_default()
            .to_string()
    };
    let old = message("old-ratio", "drift");
    assert!(
        old.contains("requests.cpu 100m (KubeVirt renders 50m)"),
        "{old}"
    );
    assert!(
        old.contains("fits cpuAllocationRatio 10, today's is 20"),
        "{old}"
    );
    let edited = message("edited", "drift");
    assert!(edited.contains("requests.memory 2000Mi"), "{edited}");
    assert!(edited.contains("changed at admission"), "{edited}");
    let tight = message("tight", "oomRisk");
    assert!(tight.contains("short"), "{tight}");
    // The same in one namespace (-n alone is the audit of that namespace), and as a table.
    let (code, table, _) = explain(&kubeconfig, &["-n", "default"]).await;
    assert_eq!(code, Some(3));
    assert!(
        table.starts_with("Checked 7 virt-launcher pod(s) in namespace default · KubeVirt v1.9.0"),
        "{table}"
    );
    assert!(table.contains("\n6 finding(s): exit code 3\n"), "{table}");

    // Prometheus: the guest of "ok" uses 95% of its request.
    let request = compute_memory(
        &Api::<Pod>::namespaced(client.clone(), "default")
            .get("virt-launcher-ok-x1y2z")
            .await
            .unwrap(),
        "requests",
    )
    .unwrap();
    let answer = json!({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "kubevirt_vmi_memory_resident_bytes", "namespace": "default", "name": "ok"},
         "value": [1764590000.0, (request * 95 / 100).to_string()]}
    ]}});
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().route(
        "/api/v1/query",
        axum::routing::get(move || {
            let a = answer.clone();
            async move { axum::Json(a) }
        }),
    );
    let server = tokio::spawn(async move { axum::serve(listener, app).await });
    let report = explain_json(&kubeconfig, &["-A", "--prometheus", &url], 3).await;
    assert_eq!(report["prometheus"], true);
    let ok: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["vmi"] == "ok")
        .collect();
    assert_eq!(ok.len(), 1, "{report:#}");
    assert_eq!(ok[0]["kind"], "residentNearLimit");
    let text = ok[0]["message"].as_str().unwrap();
    assert!(text.contains("% of the pod's memory request"), "{text}");
    assert_eq!(ok[0]["bytes"], request * 95 / 100 - request);
    server.abort();

    // Reads the client may not make are named, not fatal.
    cluster.api().faults().add(
        FaultRule::error(403)
            .verbs(&[Verb::List])
            .resource("resourcequotas")
            .user_agent("explain-overhead"),
    );
    let report = explain_json(&kubeconfig, &["-A"], 3).await;
    let missing = report["missing"].as_array().expect("missing");
    assert!(
        missing.iter().any(|m| m["what"] == "resourceQuotas"
            && m["reason"].as_str().unwrap().contains("forbidden")),
        "{missing:?}"
    );
    let v = explain_json(&kubeconfig, &["vmi/ok"], 0).await;
    assert!(
        v[0]["missing"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["what"] == "resourceQuotas/default"),
        "{v:#}"
    );
    cluster.shutdown().await;
}

/// `explain-overhead -A --upgrade-to VERSION`: three VMs rendered by v1.9.0, two on a roomy node
/// and one on a node with 10Mi left beside a database pod. `main` adds 20Mi (the QEMU estimate,
/// PR 18388) to every launcher pod, passes the launcher's flags as `args` (PR 18237) without
/// `--libvirt-hook-server-and-client` (PR 18687), and adds the owner annotations to VM a's
/// hotplug attachment pod (PR 18222): the VM on the full node no longer fits (exit 3); v1.9.0
/// changes nothing (exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_rehearsal_lists_each_vms_change_and_the_vms_that_no_longer_fit() {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: 0,
        ..Default::default()
    })
    .await
    .expect("embedded cluster");
    let client = cluster.client().await.expect("client");
    let settings = ClusterSettings::default();
    let mut on_full = 0;
    let mut launchers = BTreeMap::new();
    for (name, memory, node) in [
        ("a", "2Gi", "roomy"),
        ("b", "4Gi", "roomy"),
        ("c", "1Gi", "full"),
    ] {
        let domain = json!({"devices": {}, "resources": {"requests": {"memory": memory}}});
        let pod = vmi_with_pod(&client, name, domain, &settings, |p| {
            p["spec"]["nodeName"] = json!(node);
        })
        .await;
        if node == "full" {
            on_full += compute_memory(&pod, "requests").expect("compute memory request");
        }
        launchers.insert(name, pod);
    }
    // VM a has a hotplug attachment pod as v1.9.0 renders it: no owner annotations.
    let a = &launchers["a"].metadata;
    let attachment: Pod = serde_json::from_value(json!({
        "metadata": {"name": "hp-volume-a1b2c", "namespace": "default",
            "labels": {"kubevirt.io": "hotplug-disk"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": a.name,
                                 "uid": a.uid, "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"nodeName": "roomy", "containers": [{"name": "hotplug-disk", "image": "x"}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &attachment)
        .await
        .expect("create the attachment pod");
    let db: Pod = serde_json::from_value(json!({
        "metadata": {"name": "db", "namespace": "default"},
        "spec": {"nodeName": "full", "containers": [{"name": "db", "image": "postgres",
                 "resources": {"requests": {"memory": "512Mi"}}}]}
    }))
    .unwrap();
    Api::<Pod>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &db)
        .await
        .expect("create the db pod");
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for (name, allocatable) in [
        ("roomy", 64i64 << 30),
        ("full", on_full + (512 << 20) + (10 << 20)),
    ] {
        let node = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
        nodes
            .create(&PostParams::default(), &node)
            .await
            .expect("create node");
        nodes
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"status": {"allocatable": {"memory": allocatable.to_string()}}}),
                ),
            )
            .await
            .expect("node allocatable");
    }
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();

    let r = explain_json(&kubeconfig, &["-A", "--upgrade-to", "main"], 3).await;
    assert_eq!(
        (r["from"].as_str(), r["to"].as_str()),
        (Some("v1.9.0"), Some("main")),
        "{r:#}"
    );
    let vms = r["vms"].as_array().expect("vms");
    assert_eq!(vms.len(), 3, "{r:#}");
    for vm in vms {
        assert_eq!(vm["memoryRequestDeltaBytes"], 20 << 20, "{vm:#}");
        let qemu = vm["causes"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["term"] == "qemu"))
            .unwrap_or_else(|| panic!("no qemu cause: {vm:#}"));
        assert!(
            qemu["source"].as_str().unwrap().contains("PR 18388"),
            "{qemu}"
        );
        // Beyond the formula, the two renderings differ only by PR 18237 and PR 18687, and
        // VM a's attachment pod by PR 18222.
        let pod_changes = vm["podChanges"].as_array().expect("podChanges");
        if vm["vmi"] == "a" {
            assert_eq!(pod_changes.len(), 3, "{vm:#}");
            assert_eq!(
                pod_changes[2]["cause"],
                "PR 18222: hotplug attachment pods record their VMI's name and UID"
            );
            assert_eq!(
                pod_changes[2]["paths"],
                json!([
                    "attachmentPod[hp-volume-a1b2c].metadata.annotations.kubevirt.io/owner-vmi-name",
                    "attachmentPod[hp-volume-a1b2c].metadata.annotations.kubevirt.io/owner-vmi-uid"
                ])
            );
        } else {
            assert_eq!(pod_changes.len(), 2, "{vm:#}");
        }
        assert_eq!(
            pod_changes[0]["cause"],
            "PR 18237: the launcher flags move from command to args"
        );
        assert_eq!(
            pod_changes[1]["cause"],
            "PR 18687: --libvirt-hook-server-and-client is dropped \
             (LibvirtHooksServerAndClient is GA)"
        );
    }
    let fits: Vec<(String, bool)> = vms
        .iter()
        .map(|v| {
            (
                v["vmi"].as_str().unwrap().to_string(),
                v["fitsAfter"].as_bool().unwrap(),
            )
        })
        .collect();
    assert!(fits.contains(&("c".into(), false)), "{fits:?}");
    assert!(fits.contains(&("a".into(), true)) && fits.contains(&("b".into(), true)));
    let full = r["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["node"] == "full"))
        .expect("the full node");
    assert_eq!(
        full["requestedAfterBytes"].as_i64().unwrap() - full["allocatableBytes"].as_i64().unwrap(),
        10 << 20,
        "{full:#}"
    );

    let (code, table, err) = explain(&kubeconfig, &["-A", "--upgrade-to", "main"]).await;
    assert_eq!(code, Some(3), "{err}");
    assert!(
        table.contains(
            "Upgrade rehearsal v1.9.0 → main in every namespace: 3 virt-launcher pod(s), 3 change"
        ),
        "{table}"
    );
    assert!(
        table.contains("1 VM(s) no longer fit on their node after their next restart: default/c"),
        "{table}"
    );
    assert!(table.contains("node full is 10Mi short"), "{table}");
    assert!(
        table.contains(
            "  PR 18237: the launcher flags move from command to args: 3 VM(s): \
             spec.containers[compute].args, spec.containers[compute].command"
        ),
        "{table}"
    );
    assert!(
        table.contains(
            "  PR 18222: hotplug attachment pods record their VMI's name and UID: 1 VM(s): \
             attachmentPod[hp-volume-a1b2c].metadata.annotations.kubevirt.io/owner-vmi-name"
        ),
        "{table}"
    );

    // The same rehearsal in inspect's view (`--once`: its text), and its data with -o json.
    let inspect = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
            .arg("inspect")
            .args(args)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .env_remove("KUBECONFIG")
            .kill_on_drop(true)
            .output()
    };
    let out = inspect(&["-A", "--upgrade-to", "main", "--once"])
        .await
        .expect("run inspect");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(
            "Upgrade rehearsal v1.9.0 → main in every namespace: 3 VM(s), 3 change, \
             1 no longer fit · full 10Mi short"
        ),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("default/c") && l.contains(" NO ") && l.contains("PR 18388")),
        "{text}"
    );
    let out = inspect(&["-A", "--upgrade-to", "main", "-o", "json"])
        .await
        .expect("run inspect");
    let json: Value = serde_json::from_slice(&out.stdout).expect("inspect -o json");
    assert_eq!(json["to"], "main", "{json:#}");
    let out = inspect(&["vm/a", "--upgrade-to", "main"])
        .await
        .expect("run inspect");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rehearses the fleet"));

    let same = explain_json(&kubeconfig, &["-A", "--upgrade-to", "v1.9.0"], 0).await;
    assert!(
        same["vms"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["memoryRequestDeltaBytes"] == 0),
        "{same:#}"
    );
    for (args, what) in [
        (vec!["-A", "--upgrade-to", "v9.9.9"], "--upgrade-to"),
        (vec!["vmi/a", "--upgrade-to", "main"], "goes with the audit"),
    ] {
        let (code, _, err) = explain(&kubeconfig, &args).await;
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
    }
}

/// A fleet the controller rendered as v1.5.0 (`run-controller --kubevirt-version v1.5.0` and a
/// v1.5.0 launcher image: video 16Mi, the Guaranteed 100Mi after the ratio), audited with the
/// cluster's KubeVirt CR at v1.9.0: every pod agrees with its own release, so the audit lists
/// it as an older rendering that changes on its next restart, not as drift. A fleet rendered
/// as v1.8.0 renders as v1.9.0 does (the same rows), so it is neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_rendered_by_an_older_release_is_an_older_rendering_not_drift() {
    use virtctl_rs::kubevirt_version::KubeVirtVersion;
    for (version, tag, older) in [
        (KubeVirtVersion::V1_5, "v1.5.0", 2),
        (KubeVirtVersion::V1_8, "v1.8.0", 0),
    ] {
        let mut config = common::env::EnvConfig::new("ctrl-e2e");
        config.settings.kubevirt_version = version;
        config.settings.launcher_image = format!("quay.io/kubevirt/virt-launcher:{tag}");
        let env = Env::start_with(config, |_| {}).await;
        let ar = kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt"),
            "kubevirts",
        );
        let kvs: Api<kube::core::DynamicObject> =
            Api::namespaced_with(env.client.clone(), "kubevirt", &ar);
        let kv = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
                        "metadata": {"name": "kubevirt", "namespace": "kubevirt"}, "spec": {}});
        kvs.create(&PostParams::default(), &serde_json::from_value(kv).unwrap())
            .await
            .expect("KubeVirt CR");
        kvs.patch_status(
            "kubevirt",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observedKubeVirtVersion": "v1.9.0"}})),
        )
        .await
        .expect("KubeVirt status");
        let ns = env.namespace.clone();
        for (name, resources) in [
            ("plain", json!({"requests": {"memory": "2Gi"}})),
            (
                "guaranteed",
                json!({"requests": {"memory": "2Gi", "cpu": "2"},
                       "limits": {"memory": "2Gi", "cpu": "2"}}),
            ),
        ] {
            env.create_vm(&vm(name, &ns, resources)).await;
        }
        for name in ["plain", "guaranteed"] {
            running_pod(&env, &ns, name).await;
        }
        let report = explain_json(&env.kubeconfig_path(), &["-A"], 0).await;
        assert_eq!(report["kubevirtVersion"], "v1.9.0", "{report:#}");
        assert_eq!(report["podsChecked"], 2, "{report:#}");
        let drift = report["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f["kind"] == "drift")
            .count();
        assert_eq!(drift, 0, "{tag}: {report:#}");
        let renderings = report["olderRenderings"].as_array().cloned();
        let renderings = renderings.unwrap_or_default();
        assert_eq!(renderings.len(), older, "{tag}: {report:#}");
        for f in &renderings {
            let message = f["message"].as_str().unwrap_or_default();
            assert!(message.contains("rendered by KubeVirt v1.5.0"), "{f}");
        }
        env.shutdown().await;
    }
}
