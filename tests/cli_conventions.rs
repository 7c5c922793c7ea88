//! kubectl's conventions, through the built binary: a closed pipe ends every subcommand quietly
//! with exit code 0 (no `Broken pipe` panic), every subcommand's `--help` has examples and exit
//! codes, `version` and `completion`, and `--apply` against a cluster that is not `--embedded`
//! names the server and context before writing.
//!
//! Processes are waited for with generous deadlines; nothing sleeps for a fixed time.

use crate::common;

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};
use virtctl_rs::sim::cluster::EmbeddedCluster;

const DEADLINE: Duration = Duration::from_secs(120);

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"));
    c.env_remove("KUBECONFIG").env("NO_COLOR", "1");
    c
}

/// How the reader of the child's stdout behaves before closing it.
enum Reader {
    /// Closes the pipe at once, before the child wrote anything (in practice).
    ClosedAtOnce,
    /// Reads this many bytes, then closes (`| head -c N`).
    Bytes(usize),
    /// Reads this many lines, then closes (`| head -n N`).
    Lines(usize),
}

fn wait(mut child: Child, what: &str) -> ExitStatus {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what}: still running {DEADLINE:?} after its stdout was closed");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run the binary with `args`, its stdout read by `reader` and then closed; (status, stderr).
fn with_closed_pipe(args: &[&str], reader: Reader) -> (ExitStatus, String) {
    let mut child = bin()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the binary");
    let stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = BufReader::new(stderr).read_to_string(&mut s);
        s
    });
    let stdout = child.stdout.take().unwrap();
    match reader {
        Reader::ClosedAtOnce => drop(stdout),
        Reader::Bytes(n) => {
            let mut buf = vec![0; n];
            BufReader::new(stdout)
                .read_exact(&mut buf)
                .unwrap_or_else(|e| panic!("{args:?}: fewer than {n} bytes on stdout: {e}"));
        }
        Reader::Lines(n) => {
            let mut lines = BufReader::new(stdout).lines();
            for i in 0..n {
                lines
                    .next()
                    .unwrap_or_else(|| panic!("{args:?}: stdout ended after {i} lines"))
                    .expect("read a line");
            }
        }
    }
    let status = wait(child, &format!("{args:?}"));
    (status, stderr.join().unwrap())
}

fn assert_quiet_success(args: &[&str], reader: Reader) {
    let (status, stderr) = with_closed_pipe(args, reader);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
        "{args:?} panicked on a closed pipe: {stderr}"
    );
    assert_eq!(
        status.code(),
        Some(0),
        "{args:?}: {status:?}; stderr {stderr}"
    );
}

fn example_vm() -> &'static str {
    "docs/examples/vm-containerdisk.yaml"
}

#[test]
fn commands_without_a_cluster_end_quietly_on_a_closed_pipe() {
    let v = example_vm();
    let cases: Vec<Vec<&str>> = vec![
        vec!["--help"],
        vec!["run-controller", "--help"],
        vec!["version"],
        vec!["version", "-o", "json"],
        vec!["completion", "bash"],
        vec!["completion", "zsh"],
        vec!["completion", "fish"],
        vec!["completion", "powershell"],
        vec!["explain-overhead", "-f", v],
        vec!["explain-overhead", "-f", v, "-o", "json"],
        vec!["explain-overhead", "-f", v, "-o", "yaml"],
    ];
    for args in &cases {
        assert_quiet_success(args, Reader::ClosedAtOnce);
        assert_quiet_success(args, Reader::Bytes(10));
    }
}

/// `run-controller --embedded … | head -2`, and the same with the pipe closed before the first
/// line: both exit 0 without a panic, well before the controller would have stopped by itself.
#[test]
fn run_controller_and_cluster_serve_end_quietly_on_a_closed_pipe() {
    let rc = [
        "run-controller",
        "--embedded",
        "--listen",
        "127.0.0.1:0",
        "--apply",
        "docs/examples",
    ];
    assert_quiet_success(&rc, Reader::Lines(2));
    assert_quiet_success(&rc, Reader::ClosedAtOnce);
    assert_quiet_success(&["cluster", "serve", "--nodes", "1"], Reader::ClosedAtOnce);
}

async fn cluster() -> EmbeddedCluster {
    common::fast_cluster(1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_ends_quietly_on_a_closed_pipe() {
    let cluster = cluster().await;
    cluster
        .apply_path(Path::new(example_vm()))
        .await
        .expect("apply the example VM");
    let kubeconfig = cluster.kubeconfig_path().display().to_string();
    tokio::task::spawn_blocking(move || {
        let kc = kubeconfig.as_str();
        let vm = "vm/demo-vm";
        let cases: Vec<Vec<&str>> = vec![
            vec!["inspect", "--once", "--kubeconfig", kc],
            vec!["inspect", "-A", "-o", "json", "--kubeconfig", kc],
            vec!["inspect", vm, "--once", "--kubeconfig", kc],
            vec!["inspect", vm, "-o", "json", "--kubeconfig", kc],
            vec!["inspect", vm, "-o", "yaml", "--kubeconfig", kc],
            vec!["why", vm, "--kubeconfig", kc],
            vec!["why", vm, "-o", "json", "--kubeconfig", kc],
        ];
        for args in &cases {
            assert_quiet_success(args, Reader::ClosedAtOnce);
            assert_quiet_success(args, Reader::Bytes(10));
        }
    })
    .await
    .unwrap();
    cluster.shutdown().await;
}

fn stdout_of(args: &[&str]) -> String {
    let out = bin().args(args).output().expect("run the binary");
    assert!(
        out.status.success(),
        "{args:?}: {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn every_subcommand_help_has_examples_and_exit_codes() {
    let top = stdout_of(&["--help"]);
    assert!(!top.contains("[env: KUBECONFIG"), "{top}");
    for sub in [
        "run-controller",
        "inspect",
        "why",
        "explain-overhead",
        "cluster",
        "version",
        "completion",
    ] {
        let help = stdout_of(&[sub, "--help"]);
        assert!(top.contains(sub), "--help lacks {sub}");
        assert!(
            help.contains("Examples:\n"),
            "{sub} --help lacks examples:\n{help}"
        );
        assert!(
            help.contains("Exit codes:\n  0  "),
            "{sub} --help lacks exit codes:\n{help}"
        );
        assert!(
            help.contains(&format!("kubectl virtctl-rs {sub}")),
            "{sub}'s examples do not run {sub}:\n{help}"
        );
        assert!(!help.contains("[env: KUBECONFIG"), "{sub}: {help}");
    }
    assert!(stdout_of(&["run-controller", "--help"]).contains("-A, --all-namespaces"));
}

#[test]
fn all_namespaces_conflicts_with_namespace() {
    let out = bin()
        .args(["run-controller", "--embedded", "-A", "-n", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

#[test]
fn version_names_the_build() {
    let text = stdout_of(&["version"]);
    assert!(
        text.starts_with(&format!("virtctl-rs {}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
    let json: serde_json::Value = serde_json::from_str(&stdout_of(&["version", "-o", "json"]))
        .expect("version -o json is JSON");
    assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(json["kubernetesApiLevel"], "1.33");
    assert_eq!(json["kubevirtVersion"], "v1.9.0");
    let commit = json["gitCommit"].as_str().expect("gitCommit");
    let head = Command::new("git").args(["rev-parse", "HEAD"]).output();
    match head {
        Ok(out) if out.status.success() => {
            // Built from this checkout: the commit is a full SHA-1 (HEAD may have moved since).
            assert_eq!(commit.len(), 40, "{commit}");
            assert!(commit.chars().all(|c| c.is_ascii_hexdigit()), "{commit}");
        }
        _ => assert_eq!(commit, "unknown"),
    }
    let yaml: serde_json::Value =
        serde_yaml::from_str(&stdout_of(&["version", "-o", "yaml"])).expect("YAML");
    assert_eq!(yaml, json);
}

#[test]
fn completion_scripts_complete_the_plugin_binary() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef kubectl-virtctl_rs"),
        ("fish", "complete -c kubectl-virtctl_rs"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let script = stdout_of(&["completion", shell]);
        assert!(script.contains(marker), "{shell}: no {marker:?}");
        for sub in ["run-controller", "inspect", "explain-overhead", "version"] {
            assert!(script.contains(sub), "{shell} script lacks {sub}");
        }
    }
    let out = bin().args(["completion", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// Against a cluster reached through a kubeconfig (here the embedded one, started by the test),
/// `--apply` first prints which server and context it writes to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_against_a_kubeconfig_cluster_names_server_and_context_first() {
    let cluster = cluster().await;
    let kubeconfig = cluster.kubeconfig_path().to_path_buf();
    let server = cluster.api().url().to_string();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"))
        .env_remove("KUBECONFIG")
        .arg("run-controller")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--apply",
            example_vm(),
            "--exit-when-ready",
        ])
        .args(["--ready-timeout-seconds", "100"])
        .kill_on_drop(true)
        .output()
        .await
        .expect("run run-controller");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let target = lines
        .iter()
        .position(|l| l.starts_with("cluster: applying to and running against "))
        .unwrap_or_else(|| panic!("no cluster line: {stdout}"));
    let applied = lines
        .iter()
        .position(|l| l.starts_with("applied "))
        .unwrap_or_else(|| panic!("no applied line: {stdout}"));
    assert!(target < applied, "{stdout}");
    let line = lines[target];
    assert!(
        line.contains(server.trim_end_matches('/')),
        "{line} lacks {server}"
    );
    assert!(line.contains("(context "), "{line}");
    assert!(
        line.contains(&format!("from --kubeconfig {}", kubeconfig.display())),
        "{line}"
    );
    cluster.shutdown().await;
}
