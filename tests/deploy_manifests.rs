//! deploy/: the in-cluster manifests of run-controller are consistent — one namespace, the
//! Deployment's ServiceAccount bound to the roles of deploy/rbac/, args that are real flags of
//! the binary (parsed by its own command line), ports that match `--listen`, probes on
//! `/healthz`, the Lease Role in the `--lease-namespace` — and they apply to the embedded
//! cluster where it serves the kinds (the rest are reported as skipped).

use crate::common;

use clap::Parser;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use virtctl_rs::cli::{Cli, Command};
use virtctl_rs::sim::cluster::{EmbeddedCluster, EmbeddedClusterConfig};

const FILES: [&str; 3] = [
    "deploy/controller.yaml",
    "deploy/rbac/controller.yaml",
    "deploy/rbac/inspect.yaml",
];

fn documents(rel: &str) -> Vec<Value> {
    let path = common::repo_path(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{rel}: {e}"));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}")))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn all() -> Vec<Value> {
    FILES.iter().flat_map(|f| documents(f)).collect()
}

fn one<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {kind} {name}, found {}",
        found.len()
    );
    found[0]
}

fn s(v: &Value) -> &str {
    v.as_str()
        .unwrap_or_else(|| panic!("expected a string, got {v}"))
}

#[test]
fn manifests_are_consistent() {
    let docs = all();
    let ns = s(&one(&docs, "Namespace", "virtctl-rs")["metadata"]["name"]).to_string();
    for d in &docs {
        let kind = s(&d["kind"]);
        let cluster_scoped = ["Namespace", "ClusterRole", "ClusterRoleBinding"].contains(&kind);
        assert_eq!(
            d["metadata"]["namespace"].as_str(),
            (!cluster_scoped).then_some(ns.as_str()),
            "{kind} {}: namespace",
            d["metadata"]["name"]
        );
    }
    let deploy = one(&docs, "Deployment", "virtctl-rs-controller");
    let spec = &deploy["spec"];
    assert_eq!(spec["replicas"], 2, "two replicas sharing one Lease");
    let pod_labels = &spec["template"]["metadata"]["labels"];
    for (k, v) in spec["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels")
    {
        assert_eq!(&pod_labels[k], v, "the selector matches the pod template");
    }
    let pod = &spec["template"]["spec"];
    let sa = s(&pod["serviceAccountName"]);
    one(&docs, "ServiceAccount", sa);

    // The ServiceAccount is bound to the controller's roles.
    let bound = |binding_kind: &str, role_kind: &str, role: &str| {
        let b = docs
            .iter()
            .find(|d| d["kind"] == binding_kind && d["roleRef"]["name"] == role)
            .unwrap_or_else(|| panic!("no {binding_kind} for {role_kind} {role}"));
        assert_eq!(b["roleRef"]["kind"], role_kind);
        assert_eq!(b["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
        let subjects = b["subjects"].as_array().expect("subjects");
        assert!(
            subjects.iter().any(|x| x["kind"] == "ServiceAccount"
                && x["name"] == sa
                && x["namespace"] == ns.as_str()),
            "{binding_kind} {role} does not bind ServiceAccount {ns}/{sa}"
        );
        b
    };
    one(&docs, "ClusterRole", "virtctl-rs-controller");
    bound("ClusterRoleBinding", "ClusterRole", "virtctl-rs-controller");
    let lease_role = one(&docs, "Role", "virtctl-rs-controller-lease");
    let lease_binding = bound("RoleBinding", "Role", "virtctl-rs-controller-lease");
    assert_eq!(
        lease_binding["metadata"]["namespace"],
        lease_role["metadata"]["namespace"]
    );

    // The container's args are a command line the binary accepts.
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let env_names: Vec<&str> = c["env"]
        .as_array()
        .map(|e| e.iter().map(|v| s(&v["name"])).collect())
        .unwrap_or_default();
    let mut argv = vec!["kubectl-virtctl_rs".to_string()];
    for a in c["args"].as_array().expect("args") {
        let mut a = s(a).to_string();
        // Kubernetes expands $(VAR) from the container's env.
        while let Some(start) = a.find("$(") {
            let end = a[start..].find(')').expect("closing )") + start;
            let var = &a[start + 2..end];
            assert!(
                env_names.contains(&var),
                "arg uses $({var}), which the container does not define"
            );
            a.replace_range(start..=end, "pod-0");
        }
        argv.push(a);
    }
    let cli = Cli::try_parse_from(&argv).unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    let Command::RunController(args) = cli.command else {
        panic!("the Deployment does not run run-controller: {argv:?}");
    };
    assert!(args.all_namespaces || cli.global.namespace.is_some());
    assert!(!args.embedded, "no --embedded in the cluster");
    virtctl_rs::cli::run_controller::manager_config(&cli.global, &args)
        .unwrap_or_else(|e| panic!("{argv:?}: {e}"));
    assert_eq!(
        lease_role["metadata"]["namespace"].as_str(),
        Some(args.lease_namespace.as_str()),
        "the Lease Role is in --lease-namespace"
    );
    let listen: std::net::SocketAddr = args.listen.parse().expect("--listen is an address");
    assert!(
        listen.ip().is_unspecified(),
        "--listen must accept the kubelet's probes: {listen}"
    );

    // Ports: the container port is --listen's; probes and the Service use it.
    let ports = c["ports"].as_array().expect("ports");
    let metrics = ports
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("a metrics port");
    assert_eq!(metrics["containerPort"], u64::from(listen.port()));
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &c[probe]["httpGet"];
        assert_eq!(get["path"], "/healthz", "{probe}");
        assert!(
            get["port"] == metrics["name"] || get["port"] == metrics["containerPort"],
            "{probe} port {}",
            get["port"]
        );
    }
    for r in ["cpu", "memory"] {
        assert!(
            c["resources"]["requests"][r].is_string(),
            "resource request {r}"
        );
    }
    let svc = one(&docs, "Service", "virtctl-rs-controller-metrics");
    for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&pod_labels[k], v, "the Service selects the pods");
    }
    let sp = &svc["spec"]["ports"][0];
    assert!(sp["targetPort"] == metrics["name"] || sp["targetPort"] == metrics["containerPort"]);

    // The image's entrypoint is the binary; it exposes the same port.
    let containerfile =
        std::fs::read_to_string(common::repo_path("Containerfile")).expect("Containerfile");
    assert!(
        containerfile.contains("ENTRYPOINT [\"/usr/local/bin/kubectl-virtctl_rs\"]"),
        "the Deployment passes args only: the image's ENTRYPOINT must be the binary"
    );
    assert!(containerfile.contains(&format!("EXPOSE {}", listen.port())));
    assert!(containerfile.contains("--bin kubectl-virtctl_rs"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_apply_to_the_embedded_cluster_where_served() {
    let cluster = EmbeddedCluster::start(EmbeddedClusterConfig {
        nodes: 1,
        kubelet_delay: Duration::from_millis(50),
        ..Default::default()
    })
    .await
    .expect("embedded cluster starts");
    let mut created = Vec::new();
    let mut skipped = Vec::new();
    for f in FILES {
        let summary = cluster
            .apply_path(Path::new(&common::repo_path(f)))
            .await
            .unwrap_or_else(|e| panic!("apply {f}: {e}"));
        created.extend(summary.created);
        skipped.extend(summary.skipped);
    }
    let kinds = |list: &[String]| -> Vec<String> {
        let mut k: Vec<String> = list
            .iter()
            .map(|o| o.split(' ').next().unwrap_or("").to_string())
            .collect();
        k.sort();
        k.dedup();
        k
    };
    assert_eq!(
        kinds(&created),
        ["Namespace", "Service", "ServiceAccount"],
        "{created:?}"
    );
    // The embedded cluster does not serve RBAC or Deployments (docs/embedded-cluster.md).
    assert_eq!(
        kinds(&skipped),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "Role",
            "RoleBinding"
        ],
        "{skipped:?}"
    );
    let client = cluster.client().await.expect("client");
    let sas: Api<ServiceAccount> = Api::namespaced(client, "virtctl-rs");
    sas.get("virtctl-rs-controller")
        .await
        .expect("the ServiceAccount was created");
    cluster.shutdown().await;
}
