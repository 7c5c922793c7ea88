//! `kubectl virtctl-rs cluster serve` end to end: the built binary runs the embedded cluster,
//! prints its kubeconfig, serves clients (kube-rs and, when installed, kubectl) and exits
//! cleanly on SIGTERM. No fixed sleeps: output lines and exit are awaited with deadlines.

use crate::common;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node};
use kube::{Api, ResourceExt};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const DEADLINE: Duration = Duration::from_secs(60);

struct Serve {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Drop for Serve {
    fn drop(&mut self) {
        // Only reached on a failing test: do not leave the server running.
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn serve(args: &[&str]) -> Serve {
    cluster_command("serve", args)
}

/// `cluster <sub> <args>` with stdout read line by line.
fn cluster_command(sub: &str, args: &[&str]) -> Serve {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
        .args(["cluster", sub])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn cluster serve");
    let stdout = child.stdout.take().expect("stdout piped");
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Serve { child, lines }
}

impl Serve {
    /// Wait for the `export KUBECONFIG=...` line and return the path.
    fn kubeconfig(&mut self) -> PathBuf {
        let deadline = Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(path) = line.strip_prefix("export KUBECONFIG=") {
                        assert!(
                            seen.iter().any(|l: &String| l.starts_with("kubeconfig: ")),
                            "kubeconfig line printed first: {seen:?}"
                        );
                        return PathBuf::from(path);
                    }
                    seen.push(line);
                }
                Err(e) => panic!("no `export KUBECONFIG=` line ({e}); output so far: {seen:?}"),
            }
        }
    }

    /// Wait for a stdout line containing `text` and return it.
    fn line_containing(&mut self, text: &str) -> String {
        let deadline = Instant::now() + DEADLINE;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(text) => return line,
                Ok(line) => seen.push(line),
                Err(e) => panic!("no line with {text:?} ({e}); output so far: {seen:?}"),
            }
        }
    }

    /// Send SIGTERM and wait for a clean exit.
    fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM delivered");
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().expect("wait for serve") {
                assert!(status.success(), "clean exit on SIGTERM, got {status}");
                return;
            }
            assert!(
                Instant::now() < deadline,
                "cluster serve did not exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

async fn client_for(path: &Path) -> kube::Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(path).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig usable");
    kube::Client::try_from(config).expect("client")
}

#[tokio::test]
async fn serve_prints_kubeconfig_serves_clients_and_stops_on_sigterm() {
    let mut server = serve(&[
        "--nodes",
        "3",
        "--node-label",
        "kubevirt.io/cpumanager=true",
        "--node-memory",
        "16Gi",
    ]);
    let path = server.kubeconfig();
    assert!(path.is_file(), "{} exists", path.display());
    let client = client_for(&path).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = namespaces
        .list(&Default::default())
        .await
        .expect("list namespaces");
    assert!(
        ns.items.iter().any(|n| n.name_any() == "default"),
        "default namespace listed"
    );
    let nodes: Api<Node> = Api::all(client);
    let listed = nodes.list(&Default::default()).await.expect("list nodes");
    let mut names: Vec<String> = listed.items.iter().map(|n| n.name_any()).collect();
    names.sort();
    assert_eq!(names, ["sim-node-0", "sim-node-1", "sim-node-2"]);
    for node in &listed.items {
        assert_eq!(
            node.labels()
                .get("kubevirt.io/cpumanager")
                .map(String::as_str),
            Some("true"),
            "{}",
            node.name_any()
        );
        let status = node.status.clone().unwrap_or_default();
        for amounts in [status.capacity, status.allocatable] {
            let memory = amounts.unwrap_or_default().get("memory").cloned();
            assert_eq!(memory.map(|q| q.0).as_deref(), Some("16Gi"));
        }
    }
    server.terminate();
}

#[tokio::test]
async fn serve_applies_manifests_and_writes_the_kubeconfig_where_asked() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("mkdir");
    std::fs::write(
        manifests.join("00-namespace.yaml"),
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: demo\n",
    )
    .expect("write");
    std::fs::write(
        manifests.join("10-things.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: demo\ndata:\n  a: \"1\"\n\
         ---\n\
         apiVersion: example.com/v1\nkind: Gadget\nmetadata:\n  name: unknown-kind\n",
    )
    .expect("write");
    let out = dir.path().join("kubeconfig");
    let out_arg = out.to_string_lossy().into_owned();
    let manifests_arg = manifests.to_string_lossy().into_owned();
    let mut server = serve(&["--kubeconfig-out", &out_arg, "--apply", &manifests_arg]);
    let path = server.kubeconfig();
    assert_eq!(
        std::fs::canonicalize(&path).expect("printed path exists"),
        std::fs::canonicalize(&out).expect("requested path exists")
    );
    let client = client_for(&path).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "demo");
    let cm = cms.get("settings").await.expect("applied ConfigMap");
    assert_eq!(
        cm.data.unwrap_or_default().get("a").map(String::as_str),
        Some("1")
    );

    if let Some(kubectl) = find_on_path("kubectl") {
        let output = Command::new(kubectl)
            .args(["--kubeconfig", &out_arg, "get", "nodes", "-o", "name"])
            .output()
            .expect("run kubectl");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "kubectl get nodes failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.contains("node/sim-node-0") && stdout.contains("node/sim-node-1"),
            "{stdout}"
        );
    }
    server.terminate();
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })
}

/// `cluster serve` starts its own cluster: `--kubeconfig`, `--context` and `-n` are refused
/// (exit 2) rather than ignored; a `--fault`, `--pvc-bind-delay`, `--node-label`, `--node-cpu`
/// or `--node-capacity` that does not parse is a usage error naming the flag and its value.
#[test]
fn serve_rejects_flags_it_does_not_use_and_bad_faults() {
    for args in [
        &["--kubeconfig", "/nonexistent"][..],
        &["--context", "x"][..],
        &["-n", "prod"][..],
        &["--fault", "explode"][..],
        &["--pvc-bind-delay", "soon"][..],
        &["--node-label", "cpumanager"][..],
        &["--node-label", "sim-node-2=k=v"][..],
        &["--node-cpu", "lots"][..],
        &["--node-capacity", "nvidia.com/gpu"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
            .args(["cluster", "serve"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run cluster serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains("does not use")
                || err.contains("unknown fault")
                || err.contains("--pvc-bind-delay: invalid duration")
                || err.contains(&format!("{} {:?}: ", args[0], args[1])),
            "{args:?}: {err}"
        );
    }
}

/// `cluster nodes --kubeconfig FILE` runs the simulated scheduler, kubelet and virt-handler
/// against another API server: here a second embedded cluster started without nodes.
#[tokio::test]
async fn cluster_nodes_runs_simulated_nodes_against_another_api_server() {
    use k8s_openapi::api::core::v1::Pod;
    let mut server = serve(&["--nodes", "0"]);
    let path = server.kubeconfig();
    let client = client_for(&path).await;
    let nodes: Api<Node> = Api::all(client.clone());
    assert!(
        nodes
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    let path_arg = path.display().to_string();
    let mut sim = cluster_command(
        "nodes",
        &[
            "--kubeconfig",
            &path_arg,
            "--nodes",
            "2",
            "--node-label",
            "sim-node-1=kubevirt.io/cpumanager=true",
            "--node-cpu",
            "4",
        ],
    );
    let line = sim.line_containing("simulated node(s) running against");
    assert!(line.contains("sim-node-0, sim-node-1"), "{line}");
    let listed = nodes.list(&Default::default()).await.unwrap().items;
    let names: Vec<String> = listed.iter().map(|n| n.name_any()).collect();
    assert_eq!(names, ["sim-node-0", "sim-node-1"]);
    let cpu_manager: Vec<Option<&String>> = listed
        .iter()
        .map(|n| n.labels().get("kubevirt.io/cpumanager"))
        .collect();
    assert_eq!(cpu_manager, [None, Some(&"true".to_string())]);
    for node in &listed {
        let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
        let cpu = allocatable.and_then(|a| a.get("cpu")).map(|q| q.0.as_str());
        assert_eq!(cpu, Some("4"), "{}", node.name_any());
    }

    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox:1"}]}
    }))
    .unwrap();
    pods.create(&Default::default(), &pod).await.unwrap();
    common::wait_for("the pod to run on a simulated node", || async {
        let p = pods.get("p").await.ok()?;
        (p.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
    sim.terminate();
    server.terminate();
}
