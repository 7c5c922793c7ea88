//! KubeVirt v1.9.0's own virt-api beside the real kube-apiserver (issue 41): the webhooks the
//! differential conformance suite (`tests/reference_conformance.rs`) puts both controllers
//! behind, so that neither meets a VM or VMI virt-api never saw.
//!
//! `scripts/reference-controller.sh` builds `cmd/virt-api` beside `cmd/virt-controller` (in
//! `target/reference/<version>/bin`); `VIRTCTL_REFERENCE_VIRT_API` names another binary, or
//! `off` to run the suite without virt-api. What this module sets up on the dedicated control
//! plane, once per test process ([`serving`]):
//!
//! - a CA and a serving certificate for `127.0.0.1` (openssl, in the run folder), which virt-api
//!   reads from files (`--tls-cert-file`/`--tls-key-file`, pkg/virt-api/api.go:1312-1315;
//!   virt-operator would mount the `kubevirt-virt-api-certs` Secret there,
//!   pkg/virt-operator/resource/generate/components/secrets.go:36). The same pair stands in for
//!   the virt-handler client certificate it watches (`--handler-cert-file`, api.go:1316-1319;
//!   pkg/certificates/bootstrap/cert-manager.go:107-119 logs a missing folder as fatal);
//! - the `requestheader-client-ca-file` of `kube-system/extension-apiserver-authentication`,
//!   without which virt-api does not start (api.go:933-945) and refuses TLS handshakes
//!   (pkg/util/tls/tls.go:112-116, ca-manager.go:106-117). kube-apiserver's own controller keeps
//!   what is there and adds its own (cluster_authentication_trust_controller.go:140-179,
//!   222-242 in k8s.io/kubernetes v1.36.3);
//! - the open-schema CRDs of the kinds virt-api lists before it serves (api.go:1203-1216:
//!   presets, restores, backups; the reference's stubs, `common::reference::stub_crds`);
//! - virt-api itself, as the `kubevirt-controller` ServiceAccount user, on a free loopback port;
//!   its namespace is `kubevirt` outside a pod (kubevirt.io/client-go util/util.go:13-22);
//! - the `virt-api-mutator` MutatingWebhookConfiguration and `virt-api-validator`
//!   ValidatingWebhookConfiguration virt-operator installs (webhooks.go:171-293, 296-935),
//!   written here for the kinds the suite writes (VMs, VMIs, VM status, migrations) with
//!   `clientConfig.url` on that port instead of the `virt-api` Service. Not installed: the
//!   validators of kinds the suite never writes, the eviction interceptors, and
//!   `virt-launcher-pod-mutator`, which virt-operator installs only with the
//!   ContainerPathVolumes gate (pkg/virt-operator/resource/apply/admissionregistration.go:266-270).
//!
//! It is ready once a server-side dry-run VMI create comes back mutated.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::{Value, json};

use crate::common;
use common::control_plane::{self, ControlPlane};

/// Names the virt-api binary, or `off`.
pub const VIRT_API_ENV: &str = "VIRTCTL_REFERENCE_VIRT_API";
/// How long virt-api may take to serve (a 110 MB Go binary listing six kinds on shared cores).
const READY: Duration = Duration::from_secs(180);
/// The finalizer virt-api's VMI mutator adds on create (vmi-mutator.go:128).
pub const VMI_FINALIZER: &str = "kubevirt.io/foregroundDeleteVirtualMachine";

/// virt-api's binary: `VIRTCTL_REFERENCE_VIRT_API`, else `virt-api` beside the reference
/// controller; `Err` with the reason the suite runs without it.
pub fn locate(controller: Option<&Path>) -> Result<PathBuf, String> {
    match std::env::var(VIRT_API_ENV) {
        Ok(v) if v == "off" => Err(format!("{VIRT_API_ENV}=off")),
        Ok(v) if !v.is_empty() => {
            let bin = PathBuf::from(v);
            if bin.is_file() {
                Ok(bin)
            } else {
                panic!("{VIRT_API_ENV}={}: no such file", bin.display())
            }
        }
        _ => {
            let Some(controller) = controller else {
                return Err("no reference controller, so no virt-api beside it".into());
            };
            let bin = controller.with_file_name("virt-api");
            if bin.is_file() {
                Ok(bin)
            } else {
                Err(format!(
                    "no {} (scripts/reference-controller.sh builds it) and {VIRT_API_ENV} unset",
                    bin.display()
                ))
            }
        }
    }
}

/// The running virt-api of the dedicated control plane.
#[derive(Debug)]
pub struct VirtApi {
    pub port: u16,
    pub pid: u32,
    pub log: PathBuf,
}

static SERVING: OnceLock<Result<VirtApi, String>> = OnceLock::new();

/// virt-api behind `plane`'s webhooks, started on first use (the same one for every test of the
/// process: webhook configurations are cluster-wide). `plane` must be the dedicated control
/// plane, with the `kubevirt` namespace and its KubeVirt CR. Panics when it does not serve.
pub fn serving(plane: &'static ControlPlane, bin: &Path) -> &'static VirtApi {
    match SERVING.get_or_init(|| start(plane, bin)) {
        Ok(api) => api,
        Err(e) => panic!("virt-api did not serve: {e}"),
    }
}

fn start(plane: &'static ControlPlane, bin: &Path) -> Result<VirtApi, String> {
    let dir = plane.dir.join("virt-api");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let certs = Certs::make(&dir)?;
    trust_request_headers(plane, &certs.ca)?;
    crate::common::reference::install_stub_crds(plane);
    let port = free_port();
    let mut cmd = Command::new(bin);
    // Flags: service.Setup's --listen and --port (pkg/service/service.go), kubecli's
    // --kubeconfig, the certificate files (api.go:1301-1321).
    cmd.arg("--kubeconfig")
        .arg(&plane.kubevirt_kubeconfig)
        .args(["--listen", "127.0.0.1", "--port", &port.to_string()])
        .arg("--tls-cert-file")
        .arg(&certs.crt)
        .arg("--tls-key-file")
        .arg(&certs.key)
        .arg("--handler-cert-file")
        .arg(&certs.crt)
        .arg("--handler-key-file")
        .arg(&certs.key);
    let pid = plane.spawn("virt-api", cmd)?;
    install_webhooks(plane, &dir, port, &certs.ca)?;
    let api = VirtApi {
        port,
        pid,
        log: plane.dir.join("virt-api.log"),
    };
    wait_serving(plane, &api)?;
    Ok(api)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The CA and virt-api's serving pair, in PEM files.
struct Certs {
    ca: PathBuf,
    crt: PathBuf,
    key: PathBuf,
}

/// openssl's configuration: the CA's and the serving certificate's extensions (Go's verifier
/// wants a CA marked as one and the address as a subjectAltName).
const OPENSSL_CONFIG: &str = "[req]
distinguished_name = dn
prompt = no
[dn]
CN = virt-api.kubevirt.svc
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[serving_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth,clientAuth
subjectAltName = IP:127.0.0.1,DNS:virt-api.kubevirt.svc,DNS:localhost
";

impl Certs {
    fn make(dir: &Path) -> Result<Certs, String> {
        let config = dir.join("openssl.cnf");
        std::fs::write(&config, OPENSSL_CONFIG).map_err(|e| format!("openssl.cnf: {e}"))?;
        let p = |name: &str| dir.join(name).display().to_string();
        let files = [
            config.display().to_string(),
            p("ca.key"),
            p("ca.crt"),
            p("tls.key"),
            p("tls.csr"),
            p("tls.crt"),
        ];
        let [cnf, ca_key, ca_crt, key, csr, crt] = files.each_ref().map(String::as_str);
        let steps: [&[&str]; 3] = [
            &[
                "req",
                "-x509",
                "-new",
                "-config",
                cnf,
                "-extensions",
                "ca_ext",
                "-subj",
                "/CN=virtctl-envtest-virt-api-ca",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "2",
                "-keyout",
                ca_key,
                "-out",
                ca_crt,
            ],
            &[
                "req", "-new", "-config", cnf, "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                "-out", csr,
            ],
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-extfile",
                cnf,
                "-extensions",
                "serving_ext",
                "-CAcreateserial",
                "-in",
                csr,
                "-CA",
                ca_crt,
                "-CAkey",
                ca_key,
                "-out",
                crt,
            ],
        ];
        for args in steps {
            let out = Command::new("openssl")
                .args(args)
                .output()
                .map_err(|e| format!("run openssl (needed for virt-api's certificate): {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "openssl {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(Certs {
            ca: dir.join("ca.crt"),
            crt: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        })
    }
}

/// Give `kube-system/extension-apiserver-authentication` a `requestheader-client-ca-file`
/// (`ca`) unless it has one: the test control plane runs without front-proxy authentication.
fn trust_request_headers(plane: &ControlPlane, ca: &Path) -> Result<(), String> {
    const NAME: &str = "extension-apiserver-authentication";
    const KEY: &str = "requestheader-client-ca-file";
    let pem = std::fs::read_to_string(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
    let existing = plane
        .kubectl()
        .args(["get", "configmap", NAME, "-n", "kube-system", "-o", "json"])
        .output()
        .map_err(|e| format!("run kubectl: {e}"))?;
    if existing.status.success() {
        let cm: Value = serde_json::from_slice(&existing.stdout)
            .map_err(|e| format!("configmap {NAME}: {e}"))?;
        if cm.pointer(&format!("/data/{KEY}")).is_some() {
            return Ok(());
        }
        let patch = json!({"data": {KEY: pem}}).to_string();
        plane.kubectl_ok(&[
            "patch",
            "configmap",
            NAME,
            "-n",
            "kube-system",
            "--type=merge",
            "-p",
            &patch,
        ]);
    } else {
        plane.kubectl_ok(&[
            "create",
            "configmap",
            NAME,
            "-n",
            "kube-system",
            &format!("--from-file={KEY}={}", ca.display()),
        ]);
    }
    Ok(())
}

/// One webhook of virt-operator's configurations (webhooks.go: `AdmissionReviewVersions` v1,
/// failure policy Fail, 10 s timeout, no side effects, `kubevirt.io` `v1alpha3` and `v1`)
/// calling `path` on virt-api's port.
fn webhook(
    name: &str,
    path: &str,
    operations: &[&str],
    resources: &[&str],
    port: u16,
    ca: &str,
) -> Value {
    json!({
        "name": name,
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 10,
        "rules": [{
            "operations": operations,
            "apiGroups": ["kubevirt.io"],
            "apiVersions": ["v1alpha3", "v1"],
            "resources": resources,
        }],
        "clientConfig": {"url": format!("https://127.0.0.1:{port}{path}"), "caBundle": ca},
    })
}

/// The two configurations, as a List (names: webhooks.go:979-983).
fn webhook_configurations(port: u16, ca_pem: &[u8]) -> Value {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let hook = |name: &str, path: &str, ops: &[&str], res: &[&str]| {
        webhook(name, path, ops, res, port, &ca)
    };
    let cu: &[&str] = &["CREATE", "UPDATE"];
    // webhooks.go:193-265.
    let mutating = vec![
        hook(
            "virtualmachines-mutator.kubevirt.io",
            "/virtualmachines-mutate",
            cu,
            &["virtualmachines"],
        ),
        hook(
            "virtualmachineinstances-mutator.kubevirt.io",
            "/virtualmachineinstances-mutate",
            cu,
            &["virtualmachineinstances"],
        ),
        hook(
            "migrations-mutator.kubevirt.io",
            "/migration-mutate-create",
            &["CREATE"],
            &["virtualmachineinstancemigrations"],
        ),
    ];
    // webhooks.go:400-472, 548-595, 829-857.
    let validating = vec![
        hook(
            "virtualmachineinstances-create-validator.kubevirt.io",
            "/virtualmachineinstances-validate-create",
            &["CREATE"],
            &["virtualmachineinstances"],
        ),
        hook(
            "virtualmachineinstances-update-validator.kubevirt.io",
            "/virtualmachineinstances-validate-update",
            &["UPDATE"],
            &["virtualmachineinstances"],
        ),
        hook(
            "virtualmachine-validator.kubevirt.io",
            "/virtualmachines-validate",
            cu,
            &["virtualmachines"],
        ),
        hook(
            "migration-create-validator.kubevirt.io",
            "/migration-validate-create",
            &["CREATE"],
            &["virtualmachineinstancemigrations"],
        ),
        hook(
            "migration-update-validator.kubevirt.io",
            "/migration-validate-update",
            &["UPDATE"],
            &["virtualmachineinstancemigrations"],
        ),
        hook(
            "kubevirt-crd-status-validator.kubevirt.io",
            "/status-validate",
            cu,
            &[
                "virtualmachines/status",
                "virtualmachineinstancereplicasets/status",
                "virtualmachineinstancemigrations/status",
            ],
        ),
    ];
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "virt-api-mutator"},
            "webhooks": mutating,
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "virt-api-validator"},
            "webhooks": validating,
        },
    ]})
}

fn install_webhooks(plane: &ControlPlane, dir: &Path, port: u16, ca: &Path) -> Result<(), String> {
    let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
    let file = dir.join("webhooks.json");
    std::fs::write(&file, webhook_configurations(port, &pem).to_string())
        .map_err(|e| format!("{}: {e}", file.display()))?;
    plane.kubectl_ok(&["apply", "-f", &file.display().to_string()]);
    Ok(())
}

/// A VMI as a user would create it, for a server-side dry run.
fn probe_vmi() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": "virt-api-probe", "namespace": "default"},
        "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "64Mi"}}}}
    })
}

/// The VMI kube-apiserver answers a server-side dry-run create of [`probe_vmi`] with, or the
/// error.
pub fn dry_run_vmi(plane: &ControlPlane) -> Result<Value, String> {
    let file = plane.dir.join("virt-api").join("probe-vmi.json");
    std::fs::write(&file, probe_vmi().to_string()).map_err(|e| format!("probe VMI: {e}"))?;
    let out = plane
        .kubectl()
        .args(["create", "--dry-run=server", "-o", "json", "-f"])
        .arg(&file)
        .output()
        .map_err(|e| format!("run kubectl: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).trim().to_string());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("dry-run VMI: {e}"))
}

/// Wait until a dry-run VMI create comes back with virt-api's finalizer (until then the
/// webhooks fail: virt-api lists its kinds before it listens).
fn wait_serving(plane: &ControlPlane, api: &VirtApi) -> Result<(), String> {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < READY {
        if !Path::new(&format!("/proc/{}", api.pid)).exists() {
            return Err(format!("virt-api exited; see {}", api.log.display()));
        }
        match dry_run_vmi(plane) {
            Ok(vmi) if has_finalizer(&vmi) => return Ok(()),
            Ok(vmi) => last = format!("not mutated: {vmi}"),
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    Err(format!(
        "no mutated VMI after {READY:?} ({last}); see {}",
        api.log.display()
    ))
}

fn has_finalizer(vmi: &Value) -> bool {
    vmi.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|f| f.as_str() == Some(VMI_FINALIZER)))
}

/// The reference controller's binary, when there is one (the virt-api binary sits beside it).
fn reference_controller() -> Option<PathBuf> {
    crate::common::reference::locate_reference().ok()
}

/// virt-api, started by the test on the real kube-apiserver behind the configurations above,
/// mutates a VMI created through it as KubeVirt's does: the foreground-delete finalizer
/// (vmi-mutator.go:128), phase Pending (vmi-mutator.go:131), the non-root runtime user 107
/// (vmi-mutator.go:87, 184-186) and the cluster's default architecture
/// (pkg/defaults/defaults.go:327-331).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virt_api_mutates_a_vmi_created_through_the_real_apiserver() {
    let bin = match locate(reference_controller().as_deref()) {
        Ok(bin) => bin,
        Err(reason) => {
            eprintln!("SKIP reference-virt-api: {reason}");
            return;
        }
    };
    let Some(plane) = control_plane::dedicated("reference-virt-api") else {
        return;
    };
    plane.create_namespace("kubevirt").await;
    crate::common::reference::install_kubevirt_cr(plane);
    let api = serving(plane, &bin);
    let vmi = dry_run_vmi(plane).unwrap_or_else(|e| panic!("dry-run VMI create: {e}"));
    assert!(has_finalizer(&vmi), "no {VMI_FINALIZER} in {vmi}");
    assert_eq!(
        vmi.pointer("/status/phase"),
        Some(&json!("Pending")),
        "{vmi}"
    );
    assert_eq!(
        vmi.pointer("/status/runtimeUser"),
        Some(&json!(107)),
        "{vmi}"
    );
    assert_eq!(
        vmi.pointer("/spec/architecture"),
        Some(&json!("amd64")),
        "{vmi}"
    );
    assert!(api.port > 0);
}

#[test]
fn the_webhooks_call_virt_api_on_loopback_with_the_ca() {
    let list = webhook_configurations(4443, b"PEM");
    let mutating = &list["items"][0];
    assert_eq!(mutating["kind"], "MutatingWebhookConfiguration");
    let vmi = mutating["webhooks"]
        .as_array()
        .and_then(|w| {
            w.iter()
                .find(|w| w["name"] == "virtualmachineinstances-mutator.kubevirt.io")
        })
        .expect("the VMI mutator");
    assert_eq!(
        vmi["clientConfig"]["url"],
        "https://127.0.0.1:4443/virtualmachineinstances-mutate"
    );
    assert_eq!(vmi["clientConfig"]["caBundle"], "UEVN");
    assert_eq!(vmi["rules"][0]["operations"], json!(["CREATE", "UPDATE"]));
    let validating = &list["items"][1];
    assert_eq!(validating["metadata"]["name"], "virt-api-validator");
    assert_eq!(validating["webhooks"].as_array().map(Vec::len), Some(6));
}
