//! Least privilege, derived not guessed: the rules of `deploy/rbac/` are compared with the
//! (API group, resource[/subresource], verb) triples the embedded API server's audit log shows
//! in an end-to-end run — the controller (`run-controller`: informers, reconciles, events, the
//! Lease) through a VM's whole life, and the inspector's reads (`inspect vm/NAME` and the fleet
//! view, `src/inspect/gather.rs`; `explain-overhead`'s cluster mode and audit,
//! `src/inspect/overhead.rs`). A rule nobody used fails the test, and so does a request no
//! rule grants. Discovery (non-resource URLs) is granted to every authenticated user by
//! Kubernetes' `system:discovery` and is left out.

use crate::common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use common::env::{CONTROLLER_AGENT, Env};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::{Value, json};
use virtctl_rs::api::{DataVolume, VirtualMachine};
use virtctl_rs::inspect::{GatherOptions, gather_fleet, gather_vm};
use virtctl_rs::sim::audit::AuditEntry;

/// (apiGroup, resource or resource/subresource, verb).
type Grant = (String, String, String);

const INSPECT_AGENT: &str = "virtctl-rs-inspect";
/// The VMs of docs/examples (README.md there).
const EXAMPLE_VMS: [&str; 4] = ["demo-vm", "demo-sata", "demo-priority", "demo-pvc"];

fn grant(e: &AuditEntry) -> Grant {
    let resource = if e.subresource.is_empty() {
        e.resource.clone()
    } else {
        format!("{}/{}", e.resource, e.subresource)
    };
    (e.group.clone(), resource, e.verb.clone())
}

/// The (group, resource, verb) triples of `agent`'s resource requests in the audit log.
fn used(entries: &[AuditEntry], agent: &str) -> BTreeSet<Grant> {
    entries
        .iter()
        .filter(|e| e.user_agent.starts_with(agent) && !e.resource.is_empty())
        .map(grant)
        .collect()
}

/// Every document of a YAML file.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The rules of the Role/ClusterRole `kind`/`name` in `file`, expanded to triples; also the
/// Role's namespace. Rules must not name resources (see [`role_with_names`]).
fn role(file: &str, kind: &str, name: &str) -> (BTreeSet<Grant>, Option<String>) {
    let (grants, ns, names) = role_with_names(file, kind, name);
    assert!(names.is_empty(), "{file}: resourceNames are not compared");
    (grants, ns)
}

/// [`role`], also returning the `resourceNames` its rules are limited to.
fn role_with_names(
    file: &str,
    kind: &str,
    name: &str,
) -> (BTreeSet<Grant>, Option<String>, BTreeSet<String>) {
    let path = common::repo_path(file);
    let doc = documents(&path)
        .into_iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{file} has no {kind} {name}"));
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap_or_else(|| panic!("{file}: {kind} {name}: expected a list, got {v}"))
            .iter()
            .map(|s| s.as_str().expect("a string").to_string())
            .collect()
    };
    let mut out = BTreeSet::new();
    let mut names = BTreeSet::new();
    for rule in doc["rules"].as_array().expect("rules") {
        if let Some(n) = rule.get("resourceNames") {
            names.extend(strings(n));
        }
        for g in strings(&rule["apiGroups"]) {
            for r in strings(&rule["resources"]) {
                for v in strings(&rule["verbs"]) {
                    assert!(
                        g != "*" && r != "*" && v != "*",
                        "{file}: wildcards grant everything"
                    );
                    out.insert((g.clone(), r.clone(), v));
                }
            }
        }
    }
    let ns = doc["metadata"]["namespace"].as_str().map(str::to_string);
    (out, ns, names)
}

/// `Ok` when the granted rules are exactly what was used; otherwise what is missing and unused.
fn compare(what: &str, granted: &BTreeSet<Grant>, used: &BTreeSet<Grant>) -> Result<(), String> {
    let missing: Vec<_> = used.difference(granted).collect();
    let unused: Vec<_> = granted.difference(used).collect();
    if missing.is_empty() && unused.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{what}: used but not granted (group, resource, verb): {missing:?}\n\
         granted but never used: {unused:?}"
    ))
}

/// The comparison catches a removed rule and an added one.
fn assert_comparison_is_strict(granted: &BTreeSet<Grant>, used: &BTreeSet<Grant>) {
    let mut fewer = granted.clone();
    let first = fewer.iter().next().cloned().expect("a rule");
    fewer.remove(&first);
    let err = compare("fewer", &fewer, used).expect_err("a removed rule must fail");
    assert!(err.contains(&format!("{first:?}")), "{err}");
    let mut more = granted.clone();
    let extra: Grant = ("".into(), "secrets".into(), "get".into());
    more.insert(extra.clone());
    let err = compare("more", &more, used).expect_err("an unused rule must fail");
    assert!(err.contains("\"secrets\""), "{err}");
}

/// A memory dump of the running `vm` to a new claim, as virt-api's subresource asks for it:
/// the controller writes the claim's annotation (memorydump.go:264-312) and the attachment pod.
async fn memory_dump(env: &Env, vm: &str) {
    use kube::api::{Patch, PatchParams};
    env.create_claim("rbac-dump", "1Gi").await;
    let request = json!({"status": {"memoryDumpRequest":
        {"claimName": "rbac-dump", "phase": "Associating"}}});
    env.vms()
        .patch_status(vm, &PatchParams::default(), &Patch::Merge(request))
        .await
        .expect("request a memory dump");
    env.wait_vm(vm, "memory dump Completed", |v| {
        v.status.as_ref().is_some_and(|s| {
            s.extra
                .get("memoryDumpRequest")
                .is_some_and(|r| r["phase"] == "Completed")
        })
    })
    .await;
}

/// A legacy hotplug request (gate `HotplugVolumes`) in the running `vm`'s status: the
/// controller sends it to virt-api's VMI `addvolume` subresource (vm.go:808-847).
async fn legacy_volume_request(env: &Env, vm: &str) {
    use kube::api::{Patch, PatchParams};
    env.enable_feature_gates(&["HotplugVolumes"]).await;
    env.create_claim("rbac-legacy", "1Gi").await;
    let request = json!({"status": {"volumeRequests": [{"addVolumeOptions": {"name": "legacy",
        "disk": {"name": "legacy", "disk": {"bus": "scsi"}},
        "volumeSource": {"persistentVolumeClaim": {"claimName": "rbac-legacy"}}}}]}});
    let remove =
        json!({"status": {"volumeRequests": [{"removeVolumeOptions": {"name": "legacy"}}]}});
    for (request, what) in [(request, "added"), (remove, "removed")] {
        env.vms()
            .patch_status(vm, &PatchParams::default(), &Patch::Merge(request))
            .await
            .expect("request a volume");
        env.wait_vmi(vm, &format!("volume legacy {what}"), |vmi| {
            let has = vmi
                .spec
                .volumes
                .iter()
                .flatten()
                .any(|v| v.name == "legacy");
            has == (what == "added")
        })
        .await;
        env.wait_vm(vm, "the volume request done", |v| {
            v.status
                .as_ref()
                .is_some_and(|s| s.volume_requests.is_none())
        })
        .await;
    }
}

fn vm_with_data_volume(name: &str) -> VirtualMachine {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": "Always",
            "dataVolumeTemplates": [{
                "metadata": {"name": format!("{name}-disk")},
                "spec": {"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "1Gi"}}}}
            }],
            "template": {"spec": {
                "domain": {"devices": {"disks": [{"name": "disk", "disk": {"bus": "virtio"}}]},
                           "resources": {"requests": {"memory": "128Mi"}}},
                "volumes": [{"name": "disk", "dataVolume": {"name": format!("{name}-disk")}}]
            }}
        }
    }))
    .expect("static VM")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roles_grant_exactly_what_the_controller_and_the_inspector_use() {
    let env = Env::start().await;
    let ns = env.namespace.clone();
    // A backend-storage claim left for a VM that needs none: the VMI controller deletes it
    // (storage.go:117-124), in a sync before the launcher pod exists (lifecycle.go:126-141), so
    // its claim cache must hold the claim before the VM starts.
    let stale = serde_json::from_value(json!({"metadata": {"name": "rbac-vm-stale-state",
            "labels": {"persistent-state-for": "rbac-vm"}},
        "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "10Mi"}}}}))
    .expect("claim");
    env.pvcs()
        .create(&PostParams::default(), &stale)
        .await
        .expect("create the stale backend-storage claim");
    env.wait_for("the controller to see the stale claim", || async {
        let claims = env.manager.context().caches.pvcs.store().state();
        claims
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("rbac-vm-stale-state"))
            .then_some(())
    })
    .await;
    // A VM's life: start, run, stop, delete; and a VM with a DataVolume template.
    let mut vm = common::example_vm("vm-containerdisk.yaml");
    vm.metadata.name = Some("rbac-vm".into());
    env.create_vm(&vm).await;
    env.wait_running("rbac-vm").await;
    env.wait_for("the stale backend-storage claim to go", || async {
        let claim = env.pvcs().get_opt("rbac-vm-stale-state").await.ok()?;
        claim
            .is_none_or(|c| c.metadata.deletion_timestamp.is_some())
            .then_some(())
    })
    .await;
    env.create_vm(&vm_with_data_volume("rbac-dv")).await;
    let dvs: Api<DataVolume> = Api::namespaced(env.client.clone(), &ns);
    env.wait_for("the DataVolume of rbac-dv", || async {
        dvs.get_opt("rbac-dv-disk").await.ok().flatten()
    })
    .await;

    // The project's examples: a PriorityClass, a PVC, the SATA disk.
    env.cluster()
        .apply_path(&common::repo_path("docs/examples"))
        .await
        .expect("apply docs/examples");
    for name in EXAMPLE_VMS {
        env.wait_running(name).await;
    }
    // A VM with a cluster instancetype and preference: the instancetype informers, the
    // ControllerRevisions stashing them, the status patch recording them.
    env.cluster()
        .apply_path(&common::repo_path(
            "docs/examples/more/vm-instancetype.yaml",
        ))
        .await
        .expect("apply vm-instancetype.yaml");
    env.wait_running("demo-instancetype").await;

    // A hook sidecar whose ConfigMap the VMI controller reads while rendering the pod.
    env.cluster()
        .apply_path(&common::repo_path(
            "docs/examples/more/vm-hook-sidecar.yaml",
        ))
        .await
        .expect("apply the hook-sidecar example");
    env.wait_running("demo-hook-sidecar").await;

    // A persistent TPM: the backend-storage claim the controllers create (in the default
    // StorageClass), and the claims, StorageClasses and StorageProfiles the inspector reads
    // to decide as they do.
    let classes: Api<StorageClass> = Api::all(env.client.clone());
    let class = serde_json::from_value(json!({"metadata": {"name": "rbac-default",
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rbac.invalid", "volumeBindingMode": "Immediate"}))
    .expect("class");
    classes
        .create(&PostParams::default(), &class)
        .await
        .expect("create the default StorageClass");
    env.cluster()
        .apply_path(&common::repo_path(
            "docs/examples/more/vm-persistent-tpm.yaml",
        ))
        .await
        .expect("apply the persistent-TPM example");
    env.wait_running("demo-persistent-tpm").await;

    // A VM no node can take: its launcher pod stays unschedulable (the inspector then lists
    // the nodes to say which resource none has).
    let mut huge = common::example_vm("vm-containerdisk.yaml");
    huge.metadata.name = Some("rbac-huge".into());
    let mut value = serde_json::to_value(&huge).unwrap();
    value["spec"]["template"]["spec"]["domain"]["resources"] =
        json!({"requests": {"memory": "4000Gi"}});
    value["spec"]["template"]["spec"]["domain"]
        .as_object_mut()
        .unwrap()
        .remove("memory");
    let huge: VirtualMachine = serde_json::from_value(value).unwrap();
    env.create_vm(&huge).await;
    env.wait_for("rbac-huge's launcher pod to be unschedulable", || async {
        let vmi = env.vmi("rbac-huge").await?;
        let cond = vmi.condition("PodScheduled")?;
        (cond.status == "False").then_some(())
    })
    .await;

    // The inspector, while the controller leads (Lease held, VMs in every state).
    let inspector = env
        .cluster()
        .api()
        .client_with_agent(INSPECT_AGENT)
        .await
        .expect("inspector client");
    let opts = GatherOptions {
        lease_namespace: virtctl_rs::runtime::lease::DEFAULT_NAMESPACE.into(),
        lease_name: virtctl_rs::runtime::lease::DEFAULT_LEASE_NAME.into(),
        timeout: Duration::from_secs(5),
        ..GatherOptions::default()
    };
    gather_vm(&inspector, &ns, "rbac-vm", &opts)
        .await
        .expect("inspect vm/rbac-vm");
    gather_vm(&inspector, &ns, "rbac-huge", &opts)
        .await
        .expect("inspect vm/rbac-huge");
    gather_vm(&inspector, &ns, "rbac-dv", &opts)
        .await
        .expect("inspect vm/rbac-dv");
    gather_vm(&inspector, &ns, "demo-persistent-tpm", &opts)
        .await
        .expect("inspect vm/demo-persistent-tpm");
    for name in EXAMPLE_VMS {
        gather_vm(&inspector, &ns, name, &opts)
            .await
            .expect("inspect an example");
    }
    gather_fleet(&inspector, Some(&ns), &opts)
        .await
        .expect("fleet, one namespace");
    gather_fleet(&inspector, None, &opts)
        .await
        .expect("fleet, -A");
    // explain-overhead's cluster mode and audit read with the same role.
    use virtctl_rs::inspect::overhead::{Target, explain_target, gather_audit};
    explain_target(&inspector, &ns, &Target::Vm("rbac-vm".into()), &opts)
        .await
        .expect("explain-overhead vm/rbac-vm");
    gather_audit(&inspector, Some(&ns), &opts, None, &mut |_| {})
        .await
        .expect("explain-overhead -n");
    gather_audit(&inspector, None, &opts, None, &mut |_| {})
        .await
        .expect("explain-overhead -A");

    let vmi_uid = env
        .vmi("rbac-vm")
        .await
        .and_then(|v| v.metadata.uid.clone())
        .expect("VMI uid");
    env.merge_patch_vm("rbac-vm", json!({"spec": {"runStrategy": "Halted"}}))
        .await;
    env.wait_vmi_gone("rbac-vm").await;
    env.wait_pods_gone(&vmi_uid).await;
    // Started again at a newer generation: the controller deletes the older start revision
    // (vm.go:1726-1757 deleteOlderVMRevision). The real API server's RBAC found this one.
    env.merge_patch_vm("rbac-vm", json!({"spec": {"runStrategy": "Always"}}))
        .await;
    let (_, vmi) = env.wait_running("rbac-vm").await;
    let vmi_uid = vmi.metadata.uid.clone().expect("VMI uid");
    memory_dump(&env, "rbac-vm").await;
    legacy_volume_request(&env, "rbac-vm").await;
    env.merge_patch_vm("rbac-vm", json!({"spec": {"runStrategy": "Halted"}}))
        .await;
    env.wait_vmi_gone("rbac-vm").await;
    env.wait_pods_gone(&vmi_uid).await;
    env.vms()
        .delete("rbac-vm", &DeleteParams::default())
        .await
        .expect("delete rbac-vm");
    env.wait_for("rbac-vm to be gone", || async {
        env.vm("rbac-vm").await.is_none().then_some(())
    })
    .await;
    env.wait_leading_and_idle().await;

    let entries = env.cluster().api().audit().entries();
    for e in &entries {
        if (e.resource == "controllerrevisions"
            || (e.resource == "virtualmachines" && e.name == "demo-instancetype"))
            && e.user_agent.contains("controller")
        {
            eprintln!(
                "AUDIT {} {} {}/{} {} {}",
                e.seq, e.verb, e.resource, e.subresource, e.name, e.code
            );
        }
    }
    let controller_used = used(&entries, CONTROLLER_AGENT);
    let inspector_used = used(&entries, INSPECT_AGENT);
    env.shutdown().await;

    let rbac = "deploy/rbac/controller.yaml";
    // Cluster-wide objects: the ClusterRole; the Lease: a Role in the Lease namespace.
    let (cluster_role, _) = role(rbac, "ClusterRole", "virtctl-rs-controller");
    let (lease_role, lease_ns) = role(rbac, "Role", "virtctl-rs-controller-lease");
    assert!(lease_ns.is_some(), "the Lease Role is namespaced");
    let granted: BTreeSet<Grant> = cluster_role.union(&lease_role).cloned().collect();
    assert!(
        lease_role.iter().all(|(_, r, _)| r == "leases")
            && cluster_role.iter().all(|(_, r, _)| r != "leases"),
        "leases are granted in the Lease namespace only"
    );
    compare("run-controller", &granted, &controller_used).unwrap_or_else(|e| panic!("{e}"));
    assert_comparison_is_strict(&granted, &controller_used);
    // The `-n` scope: the same rules as a Role.
    let (ns_role, ns_role_ns) = role(
        "deploy/rbac/controller-namespaced.yaml",
        "Role",
        "virtctl-rs-controller",
    );
    // ... plus the one cluster-scoped object, the namespace itself, in a ClusterRole limited to
    // that namespace by name.
    let (ns_itself, _, ns_names) = role_with_names(
        "deploy/rbac/controller-namespaced.yaml",
        "ClusterRole",
        "virtctl-rs-controller-my-vms-namespace",
    );
    assert_eq!(
        ns_names.into_iter().collect::<Vec<_>>(),
        [ns_role_ns.clone().expect("the Role is namespaced")],
        "the namespace ClusterRole names the Role's namespace"
    );
    assert!(ns_itself.iter().all(|(_, r, _)| r == "namespaces"));
    // ... and the KubeVirt CR, in KubeVirt's namespace.
    let (kubevirt_config, kubevirt_ns) = role(
        "deploy/rbac/controller-namespaced.yaml",
        "Role",
        "virtctl-rs-controller-kubevirt-config",
    );
    assert_eq!(kubevirt_ns.as_deref(), Some("kubevirt"));
    assert!(kubevirt_config.iter().all(|(_, r, _)| r == "kubevirts"));
    // ... and the cluster-wide instancetypes and preferences, in a ClusterRole.
    let (cluster_instancetypes, _) = role(
        "deploy/rbac/controller-namespaced.yaml",
        "ClusterRole",
        "virtctl-rs-controller-cluster-instancetypes",
    );
    assert!(
        cluster_instancetypes
            .iter()
            .all(|(g, _, _)| g == "instancetype.kubevirt.io")
    );
    // ... and the cluster-scoped storage kinds, in a ClusterRole.
    let (cluster_storage, _) = role(
        "deploy/rbac/controller-namespaced.yaml",
        "ClusterRole",
        "virtctl-rs-controller-cluster-storage",
    );
    assert!(cluster_storage.iter().all(|(g, _, _)| {
        [
            "storage.k8s.io",
            "cdi.kubevirt.io",
            "snapshot.storage.k8s.io",
        ]
        .contains(&g.as_str())
    }));
    // ... and the nodes the topology hinter reads, in a ClusterRole.
    let (cluster_nodes, _) = role(
        "deploy/rbac/controller-namespaced.yaml",
        "ClusterRole",
        "virtctl-rs-controller-cluster-nodes",
    );
    assert!(
        !cluster_nodes.is_empty()
            && cluster_nodes
                .iter()
                .all(|(g, r, _)| g.is_empty() && r == "nodes")
    );
    let ns_scope: BTreeSet<Grant> = ns_role
        .union(&ns_itself)
        .chain(&kubevirt_config)
        .chain(&cluster_instancetypes)
        .chain(&cluster_storage)
        .chain(&cluster_nodes)
        .cloned()
        .collect();
    compare("run-controller -n (Role)", &ns_scope, &cluster_role).unwrap_or_else(|e| panic!("{e}"));

    let (inspect_role, _) = role(
        "deploy/rbac/inspect.yaml",
        "ClusterRole",
        "virtctl-rs-inspect",
    );
    assert!(
        inspect_role
            .iter()
            .all(|(_, _, v)| ["get", "list", "watch"].contains(&v.as_str())),
        "the inspector's role is read-only: {inspect_role:?}"
    );
    compare("inspect", &inspect_role, &inspector_used).unwrap_or_else(|e| panic!("{e}"));
    assert_comparison_is_strict(&inspect_role, &inspector_used);
}

/// On the real API server, where RBAC is enforced (the embedded one serves no RBAC API).
mod real_apiserver {
    use crate::cli_on_both_servers::{
        env_without_controller, run, run_controller, run_json, running_demo_vm,
    };
    use crate::common;
    use crate::common::env::{Env, Server, printable};
    use kube::Api;
    use kube::api::{DynamicObject, Patch, PatchParams};
    use serde_json::{Value, json};

    /// Apply (server-side) `doc`, in `namespace` when the kind is namespaced.
    async fn apply_doc(env: &Env, mut doc: Value, namespace: &str) {
        let api_version = doc["apiVersion"].as_str().unwrap_or("").to_string();
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let kind = doc["kind"].as_str().unwrap_or("").to_string();
        let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
        let (resource, caps) = kube::discovery::pinned_kind(&env.client, &gvk)
            .await
            .unwrap_or_else(|e| panic!("discovery of {kind}: {e}"));
        let name = doc["metadata"]["name"].as_str().unwrap_or("").to_string();
        let api: Api<DynamicObject> = if caps.scope == kube::discovery::Scope::Namespaced {
            doc["metadata"]["namespace"] = json!(namespace);
            Api::namespaced_with(env.client.clone(), namespace, &resource)
        } else {
            Api::all_with(env.client.clone(), &resource)
        };
        api.patch(
            &name,
            &PatchParams::apply("virtctl-rs-e2e").force(),
            &Patch::Apply(&doc),
        )
        .await
        .unwrap_or_else(|e| panic!("apply {kind} {name}: {e}"));
    }

    /// [`apply_doc`] every document of the repository's `file`.
    async fn apply_file(env: &Env, file: &str, namespace: &str) {
        let text = std::fs::read_to_string(common::repo_path(file)).expect("manifest");
        for (_, doc) in virtctl_rs::api::manifest::split_documents(file, &text).expect("yaml") {
            apply_doc(env, doc, namespace).await;
        }
    }

    /// Bind `role` (a ClusterRole, cluster-wide; a Role, in `namespace`) to the user `user`.
    async fn bind(env: &Env, kind: &str, role: &str, namespace: &str, user: &str) {
        let (binding, name) = if kind == "ClusterRole" {
            ("ClusterRoleBinding", format!("{role}-{namespace}"))
        } else {
            ("RoleBinding", role.to_string())
        };
        let doc = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding,
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
        });
        apply_doc(env, doc, namespace).await;
    }

    /// The RBAC of deploy/rbac, enforced: run-controller and inspect impersonate ServiceAccounts
    /// bound to exactly those roles (`--as`) through a VM's start, stop and restart (a restart at a
    /// newer generation deletes the older start revision: the `delete` this found missing).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn deploy_rbac_suffices_for_run_controller_and_inspect() {
        let Some(plane) = common::control_plane::shared("deploy_rbac_suffices") else {
            return;
        };
        let env = env_without_controller(Server::Real(plane)).await;
        let ns = env.namespace.clone();
        let controller = format!("system:serviceaccount:{ns}:virtctl-rs-controller");
        let inspector = format!("system:serviceaccount:{ns}:virtctl-rs-inspect");
        apply_file(&env, "deploy/rbac/controller.yaml", &ns).await;
        apply_file(&env, "deploy/rbac/inspect.yaml", &ns).await;
        bind(
            &env,
            "ClusterRole",
            "virtctl-rs-controller",
            &ns,
            &controller,
        )
        .await;
        bind(
            &env,
            "Role",
            "virtctl-rs-controller-lease",
            &ns,
            &controller,
        )
        .await;
        bind(&env, "ClusterRole", "virtctl-rs-inspect", &ns, &inspector).await;

        let mut proc = run_controller(&env, "rbac", &["--as", &controller]);
        running_demo_vm(&env).await;
        env.merge_patch_vm("demo-vm", json!({"spec": {"runStrategy": "Halted"}}))
            .await;
        env.wait_vm("demo-vm", "Stopped", |vm| printable(vm) == "Stopped")
            .await;
        env.merge_patch_vm("demo-vm", json!({"spec": {"runStrategy": "Always"}}))
            .await;
        env.wait_running("demo-vm").await;

        let json = run_json(
            &env,
            &[
                "inspect",
                "vm/demo-vm",
                "-n",
                &ns,
                "--lease-namespace",
                &ns,
                "--as",
                &inspector,
            ],
            0,
        )
        .await;
        assert_eq!(json["vmi"]["phase"], "Running");
        let text = json.to_string();
        assert!(
            !text.contains("forbidden"),
            "the inspect role misses a read: {text}"
        );
        let (code, audit, stderr) = run(
            &env,
            &["explain-overhead", "-n", &ns, "-A", "--as", &inspector],
        )
        .await;
        assert_eq!(code, Some(0), "{audit}\n{stderr}");
        assert!(
            !audit.contains("forbidden") && !stderr.contains("forbidden"),
            "{audit}\n{stderr}"
        );

        // Nothing either sent was refused (the real server's audit log has each answer).
        let refused: Vec<_> = env.audit().into_iter().filter(|e| e.code == 403).collect();
        assert!(refused.is_empty(), "refused by RBAC: {refused:#?}");
        proc.kill().await.expect("kill");
        env.shutdown().await;
    }
}
