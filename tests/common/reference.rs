//! KubeVirt v1.9.0's own virt-controller beside the real control plane: where its binary is
//! (`scripts/reference-controller.sh`'s cache or `VIRTCTL_REFERENCE_CONTROLLER`), the cluster
//! state it needs to start (the KubeVirt CR as virt-operator leaves it, open CRDs for the kinds
//! it lists that the control plane does not serve), starting it and waiting until it leads.
//!
//! Used by the differential conformance test (`tests/reference_conformance.rs`), KubeVirt's
//! virt-api beside it (`tests/reference_virt_api.rs`) and the side-by-side benchmark
//! (`benches/controller_vs_kubevirt.rs`, which includes this file and
//! [`super::control_plane`] by path): like the control plane module it uses nothing else of
//! the tests.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::control_plane::ControlPlane;

/// How long the reference may take to lead (two shared cores, a 97 MB Go binary starting).
pub const SETTLE: Duration = Duration::from_secs(120);

/// A path inside the repository.
fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Names the reference virt-controller binary.
pub const REFERENCE_ENV: &str = "VIRTCTL_REFERENCE_CONTROLLER";
/// Moves the script's cache (default `target/reference`).
pub const CACHE_ENV: &str = "VIRTCTL_REFERENCE_CACHE";

/// The reference binary: `VIRTCTL_REFERENCE_CONTROLLER`, else the script's cache; `Err` with
/// the reason it is not there.
pub fn locate_reference() -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os(REFERENCE_ENV).filter(|v| !v.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            panic!("{REFERENCE_ENV}={}: no such file", bin.display())
        };
    }
    let gomod = repo_path("tests/reference/go.mod");
    let text = std::fs::read_to_string(&gomod).map_err(|e| format!("{}: {e}", gomod.display()))?;
    let version = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("require kubevirt.io/kubevirt "))
        .chain(
            text.lines()
                .filter_map(|l| l.trim().strip_prefix("kubevirt.io/kubevirt ")),
        )
        .filter_map(|v| v.split_whitespace().next())
        .find(|v| v.starts_with('v'))
        .ok_or_else(|| format!("{} names no kubevirt.io/kubevirt version", gomod.display()))?
        .to_string();
    let cache = std::env::var_os(CACHE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/reference"));
    let cache = if cache.is_absolute() {
        cache
    } else {
        repo_path(&cache.to_string_lossy())
    };
    let home = cache.join(&version);
    if !home.join("stamp").is_file() {
        return Err(format!(
            "no reference controller built in {}; run scripts/reference-controller.sh (needs Go 1.26) or set {REFERENCE_ENV}",
            home.display()
        ));
    }
    Ok(home.join("bin").join("virt-controller"))
}

/// A CRD with an open schema for a kind the reference lists but the test control plane does
/// not serve (its informers would otherwise never sync). No object of these kinds is created.
fn stub_crd(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(),
                      "listKind": format!("{kind}List")},
            "versions": [{
                "name": version, "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object",
                                               "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    })
}

/// The kinds KubeVirt v1.9.0's virt-controller lists at start beyond the test control plane's
/// CRDs (pkg/controller/virtinformers.go: the informers application.go:385-463 creates), and
/// the presets virt-api lists (pkg/virt-api/api.go:1206).
fn stub_crds() -> Vec<Value> {
    vec![
        stub_crd(
            "kubevirt.io",
            "v1",
            "VirtualMachineInstancePreset",
            "virtualmachineinstancepresets",
            true,
        ),
        stub_crd(
            "kubevirt.io",
            "v1",
            "VirtualMachineInstanceReplicaSet",
            "virtualmachineinstancereplicasets",
            true,
        ),
        stub_crd(
            "pool.kubevirt.io",
            "v1beta1",
            "VirtualMachinePool",
            "virtualmachinepools",
            true,
        ),
        stub_crd(
            "backup.kubevirt.io",
            "v1alpha1",
            "VirtualMachineBackup",
            "virtualmachinebackups",
            true,
        ),
        stub_crd(
            "backup.kubevirt.io",
            "v1alpha1",
            "VirtualMachineBackupTracker",
            "virtualmachinebackuptrackers",
            true,
        ),
        stub_crd(
            "export.kubevirt.io",
            "v1",
            "VirtualMachineExport",
            "virtualmachineexports",
            true,
        ),
        stub_crd(
            "snapshot.kubevirt.io",
            "v1beta1",
            "VirtualMachineSnapshot",
            "virtualmachinesnapshots",
            true,
        ),
        stub_crd(
            "snapshot.kubevirt.io",
            "v1beta1",
            "VirtualMachineSnapshotContent",
            "virtualmachinesnapshotcontents",
            true,
        ),
        stub_crd(
            "snapshot.kubevirt.io",
            "v1beta1",
            "VirtualMachineRestore",
            "virtualmachinerestores",
            true,
        ),
        stub_crd(
            "migrations.kubevirt.io",
            "v1alpha1",
            "MigrationPolicy",
            "migrationpolicies",
            false,
        ),
        stub_crd(
            "clone.kubevirt.io",
            "v1beta1",
            "VirtualMachineClone",
            "virtualmachineclones",
            true,
        ),
        stub_crd("cdi.kubevirt.io", "v1beta1", "CDI", "cdis", false),
        stub_crd(
            "cdi.kubevirt.io",
            "v1beta1",
            "CDIConfig",
            "cdiconfigs",
            false,
        ),
        stub_crd(
            "cdi.kubevirt.io",
            "v1beta1",
            "DataSource",
            "datasources",
            true,
        ),
        stub_crd(
            "cdi.kubevirt.io",
            "v1beta1",
            "StorageProfile",
            "storageprofiles",
            false,
        ),
    ]
}

/// Install [`stub_crds`] (once per control plane) and wait until they are served.
pub fn install_stub_crds(plane: &ControlPlane) {
    let file = plane.dir.join("reference-stub-crds.json");
    let list = json!({"apiVersion": "v1", "kind": "List", "items": stub_crds()});
    std::fs::write(&file, list.to_string()).expect("write the stub CRDs");
    let file = file.display().to_string();
    plane.kubectl_ok(&["apply", "-f", &file]);
    plane.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=120s",
        "-f",
        &file,
    ]);
}

/// The reference virt-controller, killed when dropped.
pub struct Reference(Child);

impl Reference {
    /// Its process ID (for the benchmark's CPU and memory figures, read from procfs).
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Reference {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The command that starts the reference (its output not yet directed); `behind_virt_api`: as
/// KubeVirt's controller ServiceAccount, whose writes virt-api lets through.
pub fn reference_command(plane: &ControlPlane, bin: &Path, behind_virt_api: bool) -> Command {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    // Flags: service.Setup's --kubeconfig, --listen and --port (pkg/service/service.go); its
    // namespace is `kubevirt` outside a pod (client-go util.GetNamespace), where it takes the
    // `virt-controller` Lease (application.go:599-604).
    let kubeconfig = if behind_virt_api {
        &plane.kubevirt_kubeconfig
    } else {
        &plane.kubeconfig
    };
    let mut cmd = Command::new(bin);
    cmd.arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["--listen", "127.0.0.1", "--port", &port.to_string()])
        // The launcher image virt-operator passes to its deployment; the flag's own default is
        // the bare name `virt-launcher` (application.go:1047).
        .args(["--launcher-image", "quay.io/kubevirt/virt-launcher:v1.9.0"]);
    cmd
}

/// Start the reference ([`reference_command`]), its output in
/// `<run folder>/reference-virt-controller.log`, where [`wait_reference_leading`] reads it.
pub fn start_reference(plane: &ControlPlane, bin: &Path, behind_virt_api: bool) -> Reference {
    let log = plane.dir.join("reference-virt-controller.log");
    let out = std::fs::File::create(&log).expect("reference log");
    let err = out.try_clone().expect("reference log");
    let child = reference_command(plane, bin, behind_virt_api)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("start the reference virt-controller");
    Reference(child)
}

/// Wait until the reference leads with its controllers started (it logs that line once,
/// application.go:614); panics naming its log after [`SETTLE`].
pub async fn wait_reference_leading(plane: &ControlPlane) {
    let log = plane.dir.join("reference-virt-controller.log");
    let until = Instant::now() + SETTLE;
    while !std::fs::read_to_string(&log).is_ok_and(|t| t.contains("STARTING controllers")) {
        assert!(
            Instant::now() < until,
            "the reference virt-controller did not lead within {SETTLE:?}; see {}",
            log.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The KubeVirt CR a cluster has: `kubevirt` in the `kubevirt` namespace, configured as
/// virt-operator's release manifest installs it, with the status virt-operator writes once the
/// install is done. KubeVirt's virt-controller takes its configuration from a CR of its own
/// namespace only once that CR has a `status.phase` (pkg/virt-config/configuration.go:361-372);
/// ours reads the same CR (`EnvConfig::kubevirt_namespace`). The `Sidecar` gate is on so that
/// virt-api admits the hook-sidecar annotation of `more/vm-launcher-settings.yaml`
/// (pkg/virt-api/webhooks/validating-webhook/admitters/vmi-create-admitter.go:1272-1280); only
/// virt-api reads it (pkg/virt-config/feature-gates.go:66).
///
/// Once per control plane: the tests that share the dedicated plane call this concurrently,
/// and two `kubectl apply`s racing to create the CR (each reads it absent, then creates) made
/// one fail with AlreadyExists.
pub fn install_kubevirt_cr(plane: &ControlPlane) {
    static INSTALLED: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let mut installed = INSTALLED.lock().unwrap_or_else(|e| e.into_inner());
    if installed.contains(&plane.dir) {
        return;
    }
    let cr = json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "KubeVirt",
        "metadata": {"name": "kubevirt", "namespace": "kubevirt"},
        "spec": {
            "certificateRotateStrategy": {},
            "configuration": {"developerConfiguration": {"featureGates": ["Sidecar"]}},
            "customizeComponents": {},
            "imagePullPolicy": "IfNotPresent",
            "workloadUpdateStrategy": {}
        }
    });
    let file = plane.dir.join("reference-kubevirt-cr.json");
    std::fs::write(&file, cr.to_string()).expect("write the KubeVirt CR");
    plane.kubectl_ok(&["apply", "-f", &file.display().to_string()]);
    let status = json!({"status": {
        "phase": "Deployed",
        "observedKubeVirtVersion": "v1.9.0",
        "targetKubeVirtVersion": "v1.9.0",
        "observedKubeVirtRegistry": "quay.io/kubevirt",
        "targetKubeVirtRegistry": "quay.io/kubevirt",
        "defaultArchitecture": "amd64",
        "conditions": [{"type": "Available", "status": "True", "reason": "AllComponentsReady",
                        "message": "All components are ready."}]
    }});
    plane.kubectl_ok(&[
        "patch",
        "kubevirt",
        "kubevirt",
        "-n",
        "kubevirt",
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
    installed.push(plane.dir.clone());
}
