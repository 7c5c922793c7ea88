//! Support shared by the integration tests (one binary, tests/integration.rs). A test file says
//! `use crate::common;` and uses:
//!
//! - [`wait_for`] / [`wait_for_within`] / [`poll_until`]: poll a condition with a generous
//!   deadline (no test sleeps for a fixed time);
//! - [`repo_path`], [`example_vm`], [`own_manifest_files`]: the repository's own files
//!   (`docs/examples/`, `docs/examples/more/`, `tests/fixtures/`);
//! - [`upstream_examples`]: where KubeVirt's own example manifests are, for the optional
//!   conformance sweeps (`KUBEVIRT_EXAMPLES`, see README "Tests");
//! - [`env`]: the `Env` scenario builder (a cluster + a leading controller manager) and
//!   `on_both_servers!`, which runs a scenario on the embedded server and on the real one;
//! - [`control_plane`]: the real kube-apiserver + etcd the `real_apiserver` tests run on;
//! - [`reference`]: KubeVirt v1.9.0's own virt-controller beside the real control plane (the
//!   differential conformance test and the side-by-side benchmark);
//! - [`objects`]: small objects (audit log entries too) and API helpers for the `sim_*` tests,
//!   and the container-disk VM the CLI tests run;
//! - [`fast_cluster`]: an embedded cluster whose simulated nodes start pods in 50 ms;
//! - [`one_per_vm`]: exactly one VMI and one launcher pod per VM, from the audit log;
//! - [`split_brain`]: leadership terms from the audit log and the check that no two overlap
//!   and nobody writes outside its own.
//!
//! No test file uses all of it.
#![allow(dead_code)]

pub mod control_plane;
#[macro_use]
pub mod env;
pub mod objects;
pub mod one_per_vm;
pub mod reference;
pub mod split_brain;

use std::ffi::OsString;
use std::future::Future;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use virtctl_rs::api::VirtualMachine;

/// An embedded cluster of `nodes` simulated nodes whose kubelets start pods after 50 ms and
/// whose grace periods are scaled to 1 %.
pub async fn fast_cluster(nodes: usize) -> virtctl_rs::sim::cluster::EmbeddedCluster {
    virtctl_rs::sim::cluster::EmbeddedCluster::start(
        virtctl_rs::sim::cluster::EmbeddedClusterConfig {
            nodes,
            kubelet_delay: Duration::from_millis(50),
            grace_scale: 0.01,
            ..Default::default()
        },
    )
    .await
    .expect("embedded cluster starts")
}

/// How often [`poll_until`] asks again.
pub const POLL: Duration = Duration::from_millis(20);
/// Deadline of [`wait_for`]: generous, since six builds may share two cores.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(60);
/// Where the upstream sweeps look for KubeVirt's examples when `KUBEVIRT_EXAMPLES` is unset,
/// relative to the crate root (the layout of the project's own CI; absent in a plain clone).
pub const UPSTREAM_EXAMPLES_DEFAULT: &str = "../shared/reference/kubevirt-v1.9.0/examples";
/// The environment variable naming the folder of KubeVirt's v1.9.0 `examples/`.
pub const UPSTREAM_EXAMPLES_ENV: &str = "KUBEVIRT_EXAMPLES";

/// Poll `check` every [`POLL`] until it yields `Some`; `None` once `deadline` has passed
/// (the condition is asked once more at the deadline).
pub async fn poll_until<T, F, Fut>(deadline: Duration, mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return Some(v);
        }
        if tokio::time::Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Poll `check` until it yields a value; panic naming `what` after `deadline`.
pub async fn wait_for_within<T, F, Fut>(what: &str, deadline: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    match poll_until(deadline, check).await {
        Some(v) => v,
        None => panic!("timed out after {deadline:?} waiting for {what}"),
    }
}

/// [`wait_for_within`] with [`DEFAULT_DEADLINE`].
pub async fn wait_for<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_for_within(what, DEFAULT_DEADLINE, check).await
}

/// A path inside the repository (relative paths are taken from the crate root).
pub fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The repository's own manifest folders: the main job's examples, the examples that do not
/// run in the embedded cluster, and the test fixtures.
pub fn own_manifest_dirs() -> Vec<PathBuf> {
    ["docs/examples", "docs/examples/more", "tests/fixtures"]
        .iter()
        .map(|d| repo_path(d))
        .collect()
}

/// Every `*.yaml` file of [`own_manifest_dirs`].
pub fn own_manifest_files() -> Vec<PathBuf> {
    own_manifest_dirs()
        .iter()
        .flat_map(|d| yaml_files(d))
        .collect()
}

/// The `*.yaml` files of `dir`, sorted.
pub fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .collect();
    files.sort();
    files
}

/// The VirtualMachine document of `docs/examples/<rel>` (`rel` like `vm-containerdisk.yaml`
/// or `more/vm-halted.yaml`; other documents of the file, e.g. a PriorityClass, are skipped).
pub fn example_vm(rel: &str) -> VirtualMachine {
    let path = repo_path("docs/examples").join(rel);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let docs = virtctl_rs::api::manifest::split_documents(&path.display().to_string(), &text)
        .unwrap_or_else(|e| panic!("{e}"));
    let doc = docs
        .into_iter()
        .map(|(_, doc)| doc)
        .find(|doc| doc["kind"] == "VirtualMachine")
        .unwrap_or_else(|| panic!("{} holds no VirtualMachine", path.display()));
    serde_json::from_value(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// [`example_vm`] `docs/examples/<file>.yaml` with `runStrategy` set (and `running` cleared, as
/// virt-api refuses both).
pub fn example_vm_with(file: &str, run_strategy: &str) -> VirtualMachine {
    let mut vm = example_vm(&format!("{file}.yaml"));
    vm.spec.running = None;
    vm.spec.run_strategy = Some(run_strategy.to_string());
    vm
}

/// A VMI's `status.volumeStatus` entries (it must have them) and their names, in order.
pub fn volume_statuses(
    vmi: virtctl_rs::api::VirtualMachineInstance,
) -> (Vec<serde_json::Value>, Vec<String>) {
    let statuses = vmi.volume_status_entries();
    assert!(!statuses.is_empty(), "no volumeStatus");
    let names = statuses.iter().filter_map(|v| v["name"].as_str());
    let names = names.map(str::to_string).collect();
    (statuses, names)
}

/// An embedded API server without admission (no virt-api webhooks, no Pod Security): the
/// server's own behaviour, for tests where no virt-controller removes what virt-api adds.
pub async fn server_without_admission() -> virtctl_rs::sim::ApiServer {
    virtctl_rs::sim::ApiServer::start(virtctl_rs::sim::ApiServerConfig {
        admission: false,
        ..Default::default()
    })
    .await
    .expect("embedded API server starts")
}

/// KubeVirt's v1.9.0 example manifests, for the conformance sweeps: see
/// [`locate_upstream_examples`]. When they are not found, prints one line saying why `test` is
/// skipped (straight to stderr, so that it shows even when the harness captures output) and
/// returns `None`: the caller returns and passes.
pub fn upstream_examples(test: &str) -> Option<PathBuf> {
    let found = locate_upstream_examples(
        std::env::var_os(UPSTREAM_EXAMPLES_ENV),
        &repo_path(UPSTREAM_EXAMPLES_DEFAULT),
    );
    if found.is_none() {
        let _ = writeln!(
            std::io::stderr().lock(),
            "SKIP {test}: KubeVirt's example manifests not found; set {UPSTREAM_EXAMPLES_ENV} to \
             kubevirt/kubevirt v1.9.0's examples/ folder to run this sweep"
        );
    }
    found
}

/// The folder named by `var` (the value of `KUBEVIRT_EXAMPLES`; it must be a directory, an
/// empty value counts as unset), else `default` when it is a directory, else `None`.
pub fn locate_upstream_examples(var: Option<OsString>, default: &Path) -> Option<PathBuf> {
    if let Some(dir) = var.filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        assert!(
            dir.is_dir(),
            "{UPSTREAM_EXAMPLES_ENV}={} is not a directory",
            dir.display()
        );
        return Some(dir);
    }
    default.is_dir().then(|| default.to_path_buf())
}
