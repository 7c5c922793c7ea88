//! `kubectl virtctl-rs run-controller --embedded` end to end, through the built binary: the
//! endpoints (`/metrics`, `/leader`, `/healthz`, `/debug/state`), the debug-endpoint annotation
//! on the Lease, a graceful SIGTERM that releases the Lease and exits 0, and
//! `--exit-when-ready` (success, and a timeout naming the VM that is not Running).
//!
//! Output lines are read with deadlines, endpoints are polled until they answer; no fixed
//! sleeps. Every instance listens on `127.0.0.1:0`, so tests can run in parallel.

use crate::common;

use common::wait_for;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::Value;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

const DEADLINE: Duration = Duration::from_secs(60);
const DEBUG_ENDPOINT_ANNOTATION: &str = "virtctl-rs.kubevirt.io/debug-endpoint";

/// A running `run-controller` process with its stdout lines and its collected stderr.
struct RunController {
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    seen: Vec<String>,
    stderr: JoinHandle<String>,
}

impl RunController {
    /// Starts `kubectl-virtctl_rs run-controller ARGS` in the crate directory (so
    /// `docs/examples/...` paths resolve). The process is killed if the test fails first.
    fn spawn(args: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
            .arg("run-controller")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn run-controller");
        let stdout = child.stdout.take().expect("stdout piped");
        let mut stderr = child.stderr.take().expect("stderr piped");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        RunController {
            child,
            lines,
            seen: Vec::new(),
            stderr,
        }
    }

    /// Reads stdout lines until `pick` returns `Some`, or panics at the deadline / on EOF.
    async fn wait_line<T>(&mut self, what: &str, mut pick: impl FnMut(&str) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    let found = pick(&line);
                    self.seen.push(line);
                    if let Some(v) = found {
                        return v;
                    }
                }
                Ok(None) => panic!(
                    "run-controller closed stdout before {what}; stdout: {:#?}",
                    self.seen
                ),
                Err(_) => panic!(
                    "no {what} within {DEADLINE:?}; stdout so far: {:#?}",
                    self.seen
                ),
            }
        }
    }

    /// Waits for the process to exit; returns its status, all its stdout lines and its stderr.
    async fn finish(mut self) -> (ExitStatus, Vec<String>, String) {
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("run-controller still running after {DEADLINE:?}"))
            .expect("wait for run-controller");
        while let Ok(Some(line)) = tokio::time::timeout(DEADLINE, self.lines.recv()).await {
            self.seen.push(line);
        }
        let stderr = tokio::time::timeout(DEADLINE, self.stderr)
            .await
            .expect("stderr closed")
            .unwrap_or_default();
        (status, self.seen, stderr)
    }

    fn sigterm(&self) {
        let pid = self.child.id().expect("process still running");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid} delivered");
    }
}

/// A minimal HTTP/1.1 GET over a raw connection: `(status, body)`.
async fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((text.as_str(), ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .lines()
        .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, body))
}

/// Decodes a chunked transfer-encoded body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

async fn client_for(kubeconfig: &str) -> Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("read printed kubeconfig");
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube config from the printed kubeconfig");
    Client::try_from(config).expect("kube client")
}

fn holder(lease: &Lease) -> Option<&str> {
    lease.spec.as_ref()?.holder_identity.as_deref()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_endpoints_and_releases_the_lease_on_sigterm() {
    let mut rc = RunController::spawn(&[
        "--embedded",
        "--listen",
        "127.0.0.1:0",
        "--apply",
        "docs/examples/vm-containerdisk.yaml",
    ]);
    let kubeconfig = rc
        .wait_line("the kubeconfig line", |l| {
            l.strip_prefix("kubeconfig: ").map(str::to_string)
        })
        .await;
    let addr = rc
        .wait_line("the endpoints line", |l| {
            let rest = l.strip_prefix("endpoints: http://")?;
            assert!(
                rest.ends_with("/metrics /healthz /leader /debug/state"),
                "{l}"
            );
            rest.split_once('/').map(|(addr, _)| addr.to_string())
        })
        .await;
    let identity = rc
        .wait_line("the identity line", |l| {
            let rest = l.strip_prefix("identity ")?;
            let (id, tail) = rest.split_once(' ')?;
            assert!(
                tail.starts_with("competing for Lease kubevirt/virt-controller"),
                "{l}"
            );
            Some(id.to_string())
        })
        .await;
    // The controller brings the VM to Running (progress lines) once it leads.
    rc.wait_line("demo-vm Running", |l| {
        l.contains("default/demo-vm  Running").then_some(())
    })
    .await;

    let leader: Value = wait_for("/leader to say true", || async {
        let (code, body) = http_get(&addr, "/leader").await.ok()?;
        let v: Value = serde_json::from_str(&body).ok()?;
        (code == 200 && v["apiserver"]["leader"] == "true").then_some(v)
    })
    .await;
    assert_eq!(leader, serde_json::json!({"apiserver": {"leader": "true"}}));

    let (code, metrics) = http_get(&addr, "/metrics").await.expect("GET /metrics");
    assert_eq!(code, 200, "{metrics}");
    assert!(
        metrics.contains("kubevirt_workqueue_depth{name=\"virt-controller-vm\"}"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "kubevirt_virt_controller_leading_status 1"),
        "{metrics}"
    );

    let (code, healthz) = http_get(&addr, "/healthz").await.expect("GET /healthz");
    assert_eq!(code, 200, "{healthz}");
    let healthz: Value = serde_json::from_str(&healthz).expect("healthz JSON");
    assert_eq!(healthz["apiserver"]["connectivity"], "ok", "{healthz}");

    let (code, state) = http_get(&addr, "/debug/state")
        .await
        .expect("GET /debug/state");
    assert_eq!(code, 200, "{state}");
    let state: Value = serde_json::from_str(&state).expect("debug state JSON");
    assert_eq!(state["identity"], identity.as_str(), "{state:#}");
    assert_eq!(state["leading"], true, "{state:#}");
    assert_eq!(state["lease"]["holder"], identity.as_str(), "{state:#}");
    for queue in ["virt-controller-vm", "virt-controller-vmi"] {
        assert_eq!(state["queues"][queue]["name"], queue, "{state:#}");
    }
    let expectations = state["expectations"].as_array().expect("expectations list");
    assert!(
        expectations.iter().any(|e| e["name"] == "vm-vmi"
            && e["entries"]
                .as_array()
                .is_some_and(|es| es.iter().any(|x| x["key"] == "default/demo-vm"))),
        "{state:#}"
    );
    for controller in ["vm", "vmi"] {
        assert_eq!(
            state["reconciles"][controller]["default/demo-vm"]["result"], "ok",
            "{state:#}"
        );
    }

    // The Lease names us and points at our debug endpoint.
    let client = client_for(&kubeconfig).await;
    let leases: Api<Lease> = Api::namespaced(client, "kubevirt");
    let lease = leases.get("virt-controller").await.expect("get the Lease");
    assert_eq!(holder(&lease), Some(identity.as_str()));
    assert_eq!(
        lease.annotations().get(DEBUG_ENDPOINT_ANNOTATION),
        Some(&format!("http://{addr}/debug/state"))
    );

    // Watch the Lease, then SIGTERM: the process releases it and exits 0. The embedded
    // cluster dies with the process, so the release is observed on the watch.
    let rv = lease.resource_version().expect("resourceVersion");
    let mut stream = leases
        .watch(
            &WatchParams::default().fields("metadata.name=virt-controller"),
            &rv,
        )
        .await
        .expect("watch the Lease")
        .boxed();
    let released = tokio::spawn(async move {
        while let Some(Ok(event)) = stream.next().await {
            if let WatchEvent::Modified(lease) = event
                && holder(&lease).is_none_or(str::is_empty)
            {
                return Some(lease);
            }
        }
        None
    });
    rc.sigterm();
    let (status, stdout, stderr) = rc.finish().await;
    assert!(
        status.success(),
        "exit status {status:?}; stdout {stdout:#?}; stderr {stderr}"
    );
    assert!(
        stdout
            .iter()
            .any(|l| l == "SIGTERM: stopping (finishing in-flight work, then releasing the Lease)"),
        "{stdout:#?}"
    );
    let released = tokio::time::timeout(DEADLINE, released)
        .await
        .expect("the Lease watch ends with the process")
        .expect("watch task")
        .unwrap_or_else(|| panic!("no release of the Lease was observed; stderr {stderr}"));
    assert_eq!(
        released
            .spec
            .as_ref()
            .and_then(|s| s.lease_duration_seconds),
        Some(1),
        "released as client-go does"
    );
    assert_eq!(
        released.annotations().get(DEBUG_ENDPOINT_ANNOTATION),
        None,
        "our debug endpoint annotation goes with the release"
    );
}

/// The README's main job with `--exit-when-ready`: every VM of docs/examples (the main folder;
/// docs/examples/more/ holds the ones that cannot run in the embedded cluster) reaches Running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_when_ready_exits_zero_once_the_examples_run() {
    let rc = RunController::spawn(&[
        "--embedded",
        "--listen",
        "127.0.0.1:0",
        "--apply",
        "docs/examples",
        "--exit-when-ready",
    ]);
    let (status, stdout, stderr) = rc.finish().await;
    assert!(
        status.success(),
        "exit status {status:?}; stdout {stdout:#?}; stderr {stderr}"
    );
    assert_eq!(
        stdout.last().map(String::as_str),
        Some("all 4 VM(s) are Running"),
        "{stdout:#?}"
    );
    let leading = stdout
        .iter()
        .position(|l| {
            l.ends_with(
                " leading: acquired the Lease kubevirt/virt-controller; the controllers are running",
            )
        })
        .unwrap_or_else(|| panic!("no leading line: {stdout:#?}"));
    // Nothing is written before the Lease is held, and the lines say so in their order: no
    // VMI or launcher pod appears before "leading" (one printer prints both, Lease first).
    let first_vmi = stdout
        .iter()
        .position(|l| l.contains("  vmi ") || l.contains(" pod virt-launcher-"));
    assert!(
        first_vmi.is_some_and(|i| i > leading),
        "a VMI line came before the leading line: {stdout:#?}"
    );
}

/// Checks a new-user trial asked for: a VM that never starts by itself is reported at once
/// instead of after the timeout, and bad arguments fail before the embedded cluster starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hopeless_runs_fail_fast_with_the_reason() {
    // The Halted example (docs/examples/more/, kept out of the main folder for this reason).
    let rc = RunController::spawn(&[
        "--embedded",
        "--listen",
        "127.0.0.1:0",
        "--apply",
        "docs/examples/more/vm-halted.yaml",
        "--exit-when-ready",
    ]);
    let (status, _stdout, stderr) = rc.finish().await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("has runStrategy Halted, so it will not start by itself"),
        "{stderr}"
    );

    let rc = RunController::spawn(&["--embedded", "--apply", "/nonexistent/vm.yaml"]);
    let (status, stdout, stderr) = rc.finish().await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("--apply /nonexistent/vm.yaml: no such file or directory"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "nothing started: {stdout:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_when_ready_times_out_naming_the_vm_that_cannot_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("vm-nowhere.yaml");
    std::fs::write(
        &manifest,
        r#"apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm-nowhere
spec:
  runStrategy: Always
  template:
    spec:
      nodeSelector:
        virtctl-rs.test/no-such-node: "true"
      domain:
        devices: {}
        memory:
          guest: 128Mi
        resources: {}
      terminationGracePeriodSeconds: 0
"#,
    )
    .expect("write manifest");
    let manifest = manifest.display().to_string();
    let rc = RunController::spawn(&[
        "--embedded",
        "--listen",
        "127.0.0.1:0",
        "--apply",
        &manifest,
        "--exit-when-ready",
        "--ready-timeout-seconds",
        "0",
    ]);
    let (status, stdout, stderr) = rc.finish().await;
    assert!(
        !status.success(),
        "exit status {status:?}; stdout {stdout:#?}; stderr {stderr}"
    );
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("timed out after 0s waiting for 1 VM(s) to be Running"),
        "{stderr}"
    );
    assert!(stderr.contains("default/vm-nowhere"), "{stderr}");
    assert!(
        !stdout.iter().any(|l| l.contains("are Running")),
        "{stdout:#?}"
    );
}

/// The progress line says why a VM is stuck whenever the controller knows: a VM whose sync keeps
/// failing (both `running` and `runStrategy`: KubeVirt writes no status for it, so only the
/// controller's own reconcile record knows) and a VMI whose pod cannot be scheduled (the VMI's
/// `PodScheduled=False` condition).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_lines_name_the_reason_a_vm_is_stuck() {
    let dir = tempfile::tempdir().expect("tempdir");
    let manifest = dir.path().join("stuck.yaml");
    std::fs::write(
        &manifest,
        r#"apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm-both
spec:
  running: true
  runStrategy: Always
  template:
    spec:
      domain:
        devices: {}
        memory:
          guest: 128Mi
---
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm-nowhere
spec:
  runStrategy: Always
  template:
    spec:
      nodeSelector:
        virtctl-rs.test/no-such-node: "true"
      domain:
        devices: {}
        memory:
          guest: 128Mi
"#,
    )
    .expect("write manifest");
    let manifest = manifest.display().to_string();
    // virt-api refuses vm-both at create: only a cluster without it stores such a VM.
    let mut rc = RunController::spawn(&[
        "--embedded",
        "--no-admission",
        "--listen",
        "127.0.0.1:0",
        "--apply",
        &manifest,
    ]);
    let line = rc
        .wait_line("a problem for vm-both", |l| {
            (l.contains("default/vm-both") && l.contains("problem: ")).then(|| l.to_string())
        })
        .await;
    assert!(
        line.contains(
            "no vmi  problem: vm reconcile failed: running and runstrategy are mutually exclusive"
        ),
        "{line}"
    );
    let line = rc
        .wait_line("a problem for vm-nowhere", |l| {
            (l.contains("default/vm-nowhere") && l.contains("problem: ")).then(|| l.to_string())
        })
        .await;
    assert!(line.contains("problem: Unschedulable: "), "{line}");
    assert!(line.contains("node(s) didn't match"), "{line}");
}

/// A SIGTERM that comes while the controller is still starting (here: right after it names the
/// cluster, before it has tried to reach it) stops the run cleanly once it is up. Before the
/// handlers were registered first thing (src/cli/signals.rs), the default action of SIGTERM
/// killed the process in that window, without a chance to release a Lease it might hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_during_start_up_stops_the_run_cleanly() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n    server: https://127.0.0.1:{port}\n\
             contexts:\n- name: dead\n  context:\n    cluster: dead\n    user: u\ncurrent-context: dead\n\
             users:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .expect("write kubeconfig");
    let mut rc = RunController::spawn(&[
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8 path"),
        "--listen",
        "none",
    ]);
    rc.wait_line("the cluster line", |l| {
        l.starts_with("cluster: ").then_some(())
    })
    .await;
    rc.sigterm();
    let (status, stdout, stderr) = rc.finish().await;
    assert!(
        status.success(),
        "a SIGTERM during start-up ends the run cleanly: {status:?} {stdout:#?} {stderr}"
    );
    assert!(
        stdout.iter().any(|l| l == "SIGTERM: stopping"),
        "it says why it stopped: {stdout:#?}"
    );
}

/// Issue 13 item 6: an unreachable API server is said once, on stdout, naming the server and
/// the cause; `/healthz` reports it; the informers' repeated failures are not a WARN each
/// (one per informer, then at most one a minute); SIGTERM still stops it with exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_named_once_and_reported_on_healthz() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: dead\n  cluster:\n    server: https://127.0.0.1:{port}\n\
             contexts:\n- name: dead\n  context:\n    cluster: dead\n    user: u\ncurrent-context: dead\n\
             users:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .expect("write kubeconfig");
    let mut rc = RunController::spawn(&[
        "--kubeconfig",
        kubeconfig.to_str().expect("utf-8 path"),
        "--listen",
        "127.0.0.1:0",
    ]);
    let server = format!("https://127.0.0.1:{port}/");
    let said = rc
        .wait_line("the unreachable-server line", |l| {
            l.starts_with("cannot reach the API server")
                .then(|| l.to_string())
        })
        .await;
    assert!(said.contains(&server), "{said}");
    assert!(
        said.contains("Connection refused"),
        "the cause is named: {said}"
    );
    let addr = rc
        .wait_line("the endpoints line", |l| {
            l.strip_prefix("endpoints: http://")
                .and_then(|r| r.split('/').next())
                .map(str::to_string)
        })
        .await;
    let (code, body) = http_get(&addr, "/healthz").await.expect("GET /healthz");
    assert_eq!(code, 500, "{body}");
    assert!(body.contains("\"connectivity\":\"failed\""), "{body}");
    rc.sigterm();
    let (status, stdout, stderr) = rc.finish().await;
    assert!(status.success(), "{status:?} {stdout:#?} {stderr}");
    assert_eq!(
        stdout
            .iter()
            .filter(|l| l.starts_with("cannot reach"))
            .count(),
        1,
        "{stdout:#?}"
    );
    for informer in ["virtualmachines", "virtualmachineinstances", "pods"] {
        let warns = stderr
            .lines()
            .filter(|l| l.contains(" WARN ") && l.contains(&format!("informer={informer} ")))
            .count();
        assert!(
            warns <= 1,
            "{informer}: {warns} WARN lines in a run shorter than a minute:\n{stderr}"
        );
    }
}
