//! The real control plane under the tests ("envtest" for Rust): etcd, kube-apiserver and
//! kube-controller-manager of Kubernetes v1.36, built from the Go module proxy by
//! `scripts/envtest.sh`, with KubeVirt v1.9.0's and CDI's CRDs installed as generated from their
//! API modules.
//!
//! One control plane serves the whole test binary: [`shared`] starts it on first use (free
//! loopback ports, a temporary data folder, kube-apiserver's self-signed serving certificate, a
//! static admin token, RBAC, ServiceAccount token signing, an audit log; then the CRDs; then
//! kube-controller-manager, ready once its garbage collector has synced) and it lives until the
//! process ends. Its processes are started by a supervisor thread that never ends and carry
//! `PR_SET_PDEATHSIG`, so they die with the test process, also after a panic or a kill; the
//! data folders of dead runs are removed by the next run.
//!
//! The binaries are found through `VIRTCTL_ENVTEST_BIN` (a folder with `etcd`,
//! `kube-apiserver`, `kube-controller-manager` and `kubectl`, with `../crds` and the
//! ServiceAccount keys beside it, as the script lays them out) or in the script's cache
//! (`target/envtest/<version>/`). With neither, [`shared`] prints one `SKIP real-apiserver: …`
//! line and returns `None`, and the test passes: `cargo test` runs on a machine without Go.
//! `.ci/run` always builds them, so CI never skips.
//!
//! The module stands alone (no other test support), so that the controller benchmark can
//! include it too (`benches/controller_start.rs`, `CONTROLLER_BENCH_SERVER=real`).
//!
//! What the control plane deliberately lacks, and who stands in: no scheduler, kubelet or
//! virt-handler (the project's simulated nodes, `NodeSimulator`, point at it), no virt-api
//! (the controller runs with `without_virt_api`; the differential suite starts KubeVirt's own
//! on the dedicated plane, `tests/reference_virt_api.rs`, and writes as
//! [`KUBEVIRT_CONTROLLER_USER`] behind it), no CDI (tests play CDI by writing a
//! DataVolume's status), no node-lifecycle controller (so the `TaintNodesByCondition` admission
//! plugin, whose taints that controller removes, is off).

use std::io::Write;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use virtctl_rs::sim::AuditEntry;

/// Environment variable naming the folder of the control plane's binaries.
pub const BIN_ENV: &str = "VIRTCTL_ENVTEST_BIN";
/// Environment variable moving the script's cache (default `target/envtest`).
pub const CACHE_ENV: &str = "VIRTCTL_ENVTEST_CACHE";
/// The admin's bearer token (group `system:masters`).
const ADMIN_TOKEN: &str = "virtctl-envtest-admin";
/// The bearer token of [`KUBEVIRT_CONTROLLER_USER`] (also in `system:masters`: no RBAC to set
/// up).
const KUBEVIRT_TOKEN: &str = "virtctl-envtest-kubevirt-controller";
/// The user name of KubeVirt's `kubevirt-controller` ServiceAccount in the `kubevirt`
/// namespace: virt-api's webhooks let its writes through where they refuse or revert the same
/// write from other users (a VMI's status and spec, `kubevirt.io/` labels:
/// pkg/virt-api/webhooks/serviceaccounts.go:28-37, mutators/vmi-mutator.go:142-147,
/// admitters/vmi-update-admitter.go:101-118). A static token can carry that name.
pub const KUBEVIRT_CONTROLLER_USER: &str = "system:serviceaccount:kubevirt:kubevirt-controller";
/// How long the control plane may take to become ready (two cores shared with test builds).
const READY_DEADLINE: Duration = Duration::from_secs(180);

/// What `scripts/envtest.sh` built.
#[derive(Debug, Clone)]
pub struct Assets {
    pub bin: PathBuf,
    pub crds: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

impl Assets {
    /// The assets of `bin` (a folder with the binaries; CRDs and keys beside it), when complete.
    fn at(bin: &Path) -> Result<Assets, String> {
        let home = bin.parent().unwrap_or(bin);
        let assets = Assets {
            bin: bin.to_path_buf(),
            crds: home.join("crds"),
            sa_key: home.join("service-account.key"),
            sa_pub: home.join("service-account.pub"),
        };
        for binary in [
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "kubectl",
        ] {
            if !bin.join(binary).is_file() {
                return Err(format!("{} has no {binary}", bin.display()));
            }
        }
        for file in [&assets.crds, &assets.sa_key, &assets.sa_pub] {
            if !file.exists() {
                return Err(format!("{} is missing", file.display()));
            }
        }
        Ok(assets)
    }

    pub fn binary(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }
}

/// A path inside the repository.
fn repo_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The Kubernetes version `tests/envtest/go.mod` builds (`v1.36.3`).
pub fn kubernetes_version() -> String {
    let gomod = repo_path("tests/envtest/go.mod");
    let text =
        std::fs::read_to_string(&gomod).unwrap_or_else(|e| panic!("{}: {e}", gomod.display()));
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("k8s.io/kubernetes "))
        .filter_map(|v| v.split_whitespace().next().map(str::to_string))
        .next()
        .unwrap_or_else(|| panic!("{} names no k8s.io/kubernetes version", gomod.display()))
}

/// Where the assets are: `VIRTCTL_ENVTEST_BIN` (which must then be complete), else the script's
/// cache when its build finished, else `Err` with the reason they are not there.
pub fn locate_assets() -> Result<Assets, String> {
    if let Some(bin) = std::env::var_os(BIN_ENV).filter(|v| !v.is_empty()) {
        // Named on purpose, so incomplete is an error, not a reason to skip.
        return match Assets::at(Path::new(&bin)) {
            Ok(assets) => Ok(assets),
            Err(e) => panic!("{BIN_ENV}={}: {e}", PathBuf::from(&bin).display()),
        };
    }
    let cache = std::env::var_os(CACHE_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target/envtest"));
    let cache = if cache.is_absolute() {
        cache
    } else {
        repo_path(&cache.to_string_lossy())
    };
    let home = cache.join(kubernetes_version());
    if !home.join("stamp").is_file() {
        return Err(format!(
            "no control plane built in {}; run scripts/envtest.sh (needs Go 1.26) or set {BIN_ENV}",
            home.display()
        ));
    }
    Assets::at(&home.join("bin"))
}

/// The running control plane.
#[derive(Debug)]
pub struct ControlPlane {
    /// An admin kubeconfig (token of group `system:masters`).
    pub kubeconfig: PathBuf,
    /// A kubeconfig of [`KUBEVIRT_CONTROLLER_USER`] (also `system:masters`).
    pub kubevirt_kubeconfig: PathBuf,
    /// `https://127.0.0.1:PORT`.
    pub server: String,
    /// kube-apiserver's audit log (JSON lines; see [`ControlPlane::audit`]).
    pub audit_log: PathBuf,
    pub assets: Assets,
    /// The run's data folder.
    pub dir: PathBuf,
    supervisor: Supervisor,
}

static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
static DEDICATED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();
static NAMESPACES: AtomicU32 = AtomicU32::new(0);

/// The test binary's control plane, started on first use; `None` (after one `SKIP` line naming
/// `test`) when the binaries are not built. Panics when they are but it does not start.
pub fn shared(test: &str) -> Option<&'static ControlPlane> {
    started(&PLANE, test, "")
}

/// A second control plane, apart from [`shared`], for a test whose controller watches every
/// namespace and reads the cluster-wide KubeVirt settings (the reference controller of
/// `tests/reference_conformance.rs`), so that it meets no other test's objects. Started on
/// first use; `None` (after one `SKIP` line) as for [`shared`].
pub fn dedicated(test: &str) -> Option<&'static ControlPlane> {
    started(&DEDICATED, test, "-dedicated")
}

/// The control plane in `cell`, started on first use with its run folder's `suffix`.
fn started(
    cell: &'static OnceLock<Result<ControlPlane, String>>,
    test: &str,
    suffix: &str,
) -> Option<&'static ControlPlane> {
    let assets = match locate_assets() {
        Ok(a) => a,
        Err(reason) => {
            let _ = writeln!(
                std::io::stderr().lock(),
                "SKIP real-apiserver: {test}: {reason}"
            );
            return None;
        }
    };
    match cell.get_or_init(|| start(assets, suffix)) {
        Ok(plane) => Some(plane),
        Err(e) => panic!("the real control plane{suffix} did not start: {e}"),
    }
}

impl ControlPlane {
    /// A `kube::Config` for the admin, sending `agent` as its user agent.
    pub async fn kube_config(&self, agent: &str) -> kube::Config {
        Self::kube_config_of(&self.kubeconfig, agent).await
    }

    /// A `kube::Config` for [`KUBEVIRT_CONTROLLER_USER`], sending `agent` as its user agent.
    pub async fn kubevirt_kube_config(&self, agent: &str) -> kube::Config {
        Self::kube_config_of(&self.kubevirt_kubeconfig, agent).await
    }

    async fn kube_config_of(kubeconfig: &Path, agent: &str) -> kube::Config {
        let kc = kube::config::Kubeconfig::read_from(kubeconfig).expect("kubeconfig");
        let mut config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .expect("kube config from the envtest kubeconfig");
        config.headers.push((
            http::header::USER_AGENT,
            http::HeaderValue::from_str(agent).expect("user agent"),
        ));
        config
    }

    /// An admin client sending `agent` as its user agent.
    pub async fn client(&self, agent: &str) -> kube::Client {
        kube::Client::try_from(self.kube_config(agent).await).expect("client")
    }

    /// A client of [`KUBEVIRT_CONTROLLER_USER`] sending `agent` as its user agent.
    pub async fn kubevirt_client(&self, agent: &str) -> kube::Client {
        kube::Client::try_from(self.kubevirt_kube_config(agent).await).expect("client")
    }

    /// Start `cmd` beside the control plane, its output in `<dir>/<name>.log`; it ends with the
    /// test process, as the control plane's own processes do.
    pub fn spawn(&self, name: &'static str, cmd: Command) -> Result<u32, String> {
        self.supervisor.spawn(name, cmd)?;
        Ok(self
            .processes()
            .iter()
            .rev()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, pid)| *pid))
    }

    /// Name and process ID of etcd, kube-apiserver and kube-controller-manager (for the
    /// benchmark's CPU and memory figures).
    pub fn processes(&self) -> Vec<(&'static str, u32)> {
        self.supervisor
            .pids
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// A fresh namespace name for one test (`<prefix>-<n>`).
    pub fn fresh_namespace(prefix: &str) -> String {
        let n = NAMESPACES.fetch_add(1, Ordering::Relaxed);
        format!("{prefix}-{}-{n}", std::process::id() % 100_000)
    }

    /// The built kubectl against this control plane as the admin.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.assets.binary("kubectl"));
        cmd.arg("--kubeconfig").arg(&self.kubeconfig);
        cmd
    }

    /// Run the built kubectl with `args`; panics with its output when it fails.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl().args(args).output().expect("run kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Every write request in the audit log (and the files it was rotated into), in the order
    /// the server answered them.
    pub fn audit_all(&self) -> Vec<AuditEntry> {
        audit_log_events(&self.audit_log)
            .into_iter()
            .enumerate()
            .filter_map(|(seq, event)| audit_entry(seq as u64, &event))
            .collect()
    }

    /// The audit log's events (`audit.k8s.io/v1`, as kube-apiserver wrote them, the rotated
    /// files' first) of `namespace`'s objects and of cluster-scoped ones: what `replay` reads of
    /// one scenario.
    pub fn audit_events(&self, namespace: &str) -> Vec<serde_json::Value> {
        audit_log_events(&self.audit_log)
            .into_iter()
            .filter(|e| {
                let ns = e.pointer("/objectRef/namespace").and_then(|n| n.as_str());
                ns.is_none_or(|ns| ns == namespace)
            })
            .collect()
    }

    /// The audit log's write requests of `namespace` (and cluster-scoped ones when
    /// `namespace` is empty), as [`AuditEntry`]s in the order the server answered them.
    pub fn audit(&self, namespace: &str) -> Vec<AuditEntry> {
        self.audit_all()
            .into_iter()
            .filter(|e| e.namespace == namespace)
            .collect()
    }
}

/// Every event of the audit log at `log`, oldest first: first the files kube-apiserver rotated
/// it into when it grew past `--audit-log-maxsize` (`audit-<time>.log` beside it, the time in
/// the name, so sorted by name is oldest first; a run of hundreds of VMs fills more than one),
/// then `log` itself. Lines that are not JSON (a line cut by a crash) are skipped.
pub fn audit_log_events(log: &Path) -> Vec<serde_json::Value> {
    let stem = log
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("audit")
        .to_string();
    let extension = log
        .extension()
        .and_then(|s| s.to_str())
        .map_or(String::new(), |e| format!(".{e}"));
    let prefix = format!("{stem}-");
    let mut files: Vec<PathBuf> = log
        .parent()
        .and_then(|dir| std::fs::read_dir(dir).ok())
        .into_iter()
        .flatten()
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(&extension))
        })
        .collect();
    files.sort();
    files.push(log.to_path_buf());
    files
        .iter()
        .filter_map(|file| std::fs::read_to_string(file).ok())
        .flat_map(|text| {
            text.lines()
                .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The complete lines appended to the file at `path` since `offset`, which moves past them
/// (a line still being written is left for the next call); none when the file cannot be read.
/// How the audit log's readers follow it (kube-apiserver runs with `--audit-log-maxsize` large
/// enough that it never rotates the file).
pub fn read_new_lines(path: &Path, offset: &mut u64) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = std::fs::File::open(path) else {
        return Vec::new();
    };
    let mut text = String::new();
    if file.seek(SeekFrom::Start(*offset)).is_err() || file.read_to_string(&mut text).is_err() {
        return Vec::new();
    }
    let complete = text.rfind('\n').map_or(0, |i| i + 1);
    *offset += complete as u64;
    text[..complete].lines().map(str::to_string).collect()
}

/// An [`AuditEntry`] from one of kube-apiserver's audit events (`audit.k8s.io/v1` `Event`).
pub fn audit_entry(seq: u64, event: &serde_json::Value) -> Option<AuditEntry> {
    let object = event.get("objectRef")?;
    let text = |v: &serde_json::Value, key: &str| {
        v.get(key)
            .and_then(|s| s.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let mut name = text(object, "name");
    if name.is_empty() {
        // A create of a generated name: the name is in the object answered.
        name = event
            .pointer("/responseObject/metadata/name")
            .and_then(|n| n.as_str())
            .unwrap_or_default()
            .to_string();
    }
    let time: DateTime<Utc> = event
        .get("requestReceivedTimestamp")
        .and_then(|t| t.as_str())
        .and_then(|t| t.parse().ok())?;
    Some(AuditEntry {
        seq,
        time,
        verb: text(event, "verb"),
        group: text(object, "apiGroup"),
        resource: text(object, "resource"),
        subresource: text(object, "subresource"),
        namespace: text(object, "namespace"),
        name,
        user_agent: text(event, "userAgent"),
        code: event
            .pointer("/responseStatus/code")
            .and_then(|c| c.as_u64())
            .unwrap_or(0) as u16,
        path: text(event, "requestURI"),
        lease: None,
    })
}

/// A free loopback port (bound, read and released: another process could take it before the
/// server binds it, which the readiness wait then reports).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// Run folders live here, one per test process: `envtest-<pid>`.
fn runs_root() -> PathBuf {
    std::env::temp_dir().join("virtctl-envtest")
}

/// Remove the folders of runs whose process is gone.
fn remove_stale_runs(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|p| p.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The commands of the three processes, in start order.
fn commands(
    assets: &Assets,
    dir: &Path,
    etcd: (u16, u16),
    apiserver: u16,
) -> Vec<(&'static str, Command)> {
    let etcd_url = format!("http://127.0.0.1:{}", etcd.0);
    let peer_url = format!("http://127.0.0.1:{}", etcd.1);
    let mut etcd_cmd = Command::new(assets.binary("etcd"));
    etcd_cmd.args([
        "--name=envtest",
        &format!("--data-dir={}", dir.join("etcd").display()),
        &format!("--listen-client-urls={etcd_url}"),
        &format!("--advertise-client-urls={etcd_url}"),
        &format!("--listen-peer-urls={peer_url}"),
        &format!("--initial-advertise-peer-urls={peer_url}"),
        &format!("--initial-cluster=envtest={peer_url}"),
        "--unsafe-no-fsync",
        "--log-level=warn",
    ]);

    let mut api = Command::new(assets.binary("kube-apiserver"));
    api.args([
        &format!("--etcd-servers={etcd_url}"),
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        &format!("--secure-port={apiserver}"),
        &format!("--cert-dir={}", dir.join("certs").display()),
        &format!("--token-auth-file={}", dir.join("tokens.csv").display()),
        "--authorization-mode=RBAC",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        &format!("--service-account-key-file={}", assets.sa_pub.display()),
        &format!(
            "--service-account-signing-key-file={}",
            assets.sa_key.display()
        ),
        "--service-cluster-ip-range=10.0.0.0/24",
        "--allow-privileged=true",
        // Its taints are lifted by the node-lifecycle controller, which the simulated nodes
        // replace (see the module documentation).
        "--disable-admission-plugins=TaintNodesByCondition",
        &format!(
            "--audit-policy-file={}",
            dir.join("audit-policy.yaml").display()
        ),
        &format!("--audit-log-path={}", dir.join("audit.log").display()),
        "--audit-log-mode=blocking",
        // Never rotated (the default rotates at 100 MB, a 1,000-VM start): readers follow the
        // one file by offset.
        "--audit-log-maxsize=1000000",
        "--v=0",
    ]);

    let mut kcm = Command::new(assets.binary("kube-controller-manager"));
    kcm.args([
        &format!("--kubeconfig={}", dir.join("kubeconfig").display()),
        "--controllers=garbagecollector,namespace,serviceaccount",
        "--leader-elect=false",
        "--secure-port=0",
        "--v=0",
    ]);
    vec![
        ("etcd", etcd_cmd),
        ("kube-apiserver", api),
        ("kube-controller-manager", kcm),
    ]
}

fn write_run_files(dir: &Path, apiserver: u16) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir.join("certs"))?;
    std::fs::write(
        dir.join("tokens.csv"),
        format!(
            "{ADMIN_TOKEN},envtest-admin,envtest-admin,\"system:masters\"\n\
             {KUBEVIRT_TOKEN},{KUBEVIRT_CONTROLLER_USER},kubevirt-controller,\"system:masters\"\n"
        ),
    )?;
    // The policy `replay` documents (docs/replay.md): every write; the request and answered
    // objects of the kinds it rebuilds; no reads.
    std::fs::write(
        dir.join("audit-policy.yaml"),
        virtctl_rs::sim::EVENTS_POLICY,
    )?;
    // The serving certificate kube-apiserver generates is written before it serves; the
    // kubeconfig names the file, which kube reads when a client is built.
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(&kubeconfig, kubeconfig_text(dir, apiserver, ADMIN_TOKEN))?;
    std::fs::write(
        dir.join("kubeconfig-kubevirt"),
        kubeconfig_text(dir, apiserver, KUBEVIRT_TOKEN),
    )?;
    Ok(kubeconfig)
}

/// A kubeconfig of the control plane on `apiserver` with bearer `token`.
fn kubeconfig_text(dir: &Path, apiserver: u16, token: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: envtest
  cluster:
    server: https://127.0.0.1:{apiserver}
    certificate-authority: {ca}
contexts:
- name: envtest
  context: {{cluster: envtest, user: admin, namespace: default}}
current-context: envtest
users:
- name: admin
  user: {{token: {token}}}
",
        ca = dir.join("certs").join("apiserver.crt").display()
    )
}

type SpawnRequest = (
    &'static str,
    Command,
    std::sync::mpsc::Sender<Result<u32, String>>,
);

/// Starts the control plane's processes from one thread that lives as long as the test
/// process: their parent-death signal is tied to the thread that forked them.
struct Supervisor {
    requests: std::sync::Mutex<std::sync::mpsc::Sender<SpawnRequest>>,
    dir: PathBuf,
    /// Name and process ID of each process started.
    pids: std::sync::Mutex<Vec<(&'static str, u32)>>,
}

impl std::fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervisor")
            .field("dir", &self.dir)
            .finish()
    }
}

impl Supervisor {
    fn start(dir: &Path) -> Result<Supervisor, String> {
        let (tx, rx) = std::sync::mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("envtest-supervisor".into())
            .spawn(move || {
                // The children are owned here and never waited for: they end with the process.
                let mut children: Vec<Child> = Vec::new();
                while let Ok((name, mut cmd, reply)) = rx.recv() {
                    die_with_parent(&mut cmd);
                    let result = cmd
                        .spawn()
                        .map(|child| {
                            let pid = child.id();
                            children.push(child);
                            pid
                        })
                        .map_err(|e| format!("start {name}: {e}"));
                    let _ = reply.send(result);
                }
                loop {
                    std::thread::park();
                }
            })
            .map_err(|e| format!("supervisor thread: {e}"))?;
        Ok(Supervisor {
            requests: std::sync::Mutex::new(tx),
            dir: dir.to_path_buf(),
            pids: std::sync::Mutex::new(Vec::new()),
        })
    }

    /// Start `cmd`, its output in `<dir>/<name>.log`.
    fn spawn(&self, name: &'static str, mut cmd: Command) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .map_err(|e| format!("{name}.log: {e}"))?;
        let err = log.try_clone().map_err(|e| format!("{name}.log: {e}"))?;
        cmd.stdin(Stdio::null()).stdout(log).stderr(err);
        let (reply, answer) = std::sync::mpsc::channel();
        self.requests
            .lock()
            .map_err(|_| "supervisor lock poisoned".to_string())?
            .send((name, cmd, reply))
            .map_err(|e| format!("supervisor: {e}"))?;
        let pid = answer.recv().map_err(|e| format!("supervisor: {e}"))??;
        if let Ok(mut pids) = self.pids.lock() {
            pids.push((name, pid));
        }
        Ok(())
    }
}

/// SIGKILL the child when the thread that started it ends, which for the supervisor thread is
/// when the test process ends.
#[cfg(target_os = "linux")]
fn die_with_parent(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child's own state.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Elsewhere nothing ties them to the test process: they outlive it (the tests' control
/// plane is built for Linux, where CI runs).
#[cfg(not(target_os = "linux"))]
fn die_with_parent(_cmd: &mut Command) {}

/// Start a control plane in the run folder `run-<pid><suffix>`.
fn start(assets: Assets, suffix: &str) -> Result<ControlPlane, String> {
    let root = runs_root();
    remove_stale_runs(&root);
    let dir = root.join(format!("run-{}{suffix}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let etcd = (free_port(), free_port());
    let apiserver = free_port();
    let kubeconfig =
        write_run_files(&dir, apiserver).map_err(|e| format!("{}: {e}", dir.display()))?;
    let supervisor = Supervisor::start(&dir)?;
    let mut commands = commands(&assets, &dir, etcd, apiserver).into_iter();
    // etcd and kube-apiserver first; kube-controller-manager reads the serving certificate
    // kube-apiserver writes, so it starts once the server is ready.
    for (name, cmd) in commands.by_ref().take(2) {
        supervisor.spawn(name, cmd)?;
    }
    let plane = ControlPlane {
        kubevirt_kubeconfig: dir.join("kubeconfig-kubevirt"),
        kubeconfig,
        server: format!("https://127.0.0.1:{apiserver}"),
        audit_log: dir.join("audit.log"),
        assets,
        dir,
        supervisor,
    };
    plane.wait_ready()?;
    // The CRDs before kube-controller-manager, and its garbage collector synced before any
    // test: it watches only the kinds discovery showed it, so a VMI created earlier would not be
    // in its graph (found when a VM deleted with orphan propagation kept its VMI owned).
    plane.install_crds()?;
    for (name, cmd) in commands {
        plane.supervisor.spawn(name, cmd)?;
    }
    plane.wait_for_log(
        "kube-controller-manager",
        "all resource monitors have synced",
    )?;
    Ok(plane)
}

impl ControlPlane {
    /// Wait for `/readyz` (through the built kubectl), naming the logs when it does not come.
    fn wait_ready(&self) -> Result<(), String> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < READY_DEADLINE {
            if self.dir.join("certs").join("apiserver.crt").exists() {
                let out = self
                    .kubectl()
                    .args(["get", "--raw", "/readyz"])
                    .output()
                    .map_err(|e| format!("run kubectl: {e}"))?;
                if out.status.success() {
                    return Ok(());
                }
                last = String::from_utf8_lossy(&out.stderr).into_owned();
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "kube-apiserver not ready after {READY_DEADLINE:?} ({last}); logs in {}",
            self.dir.display()
        ))
    }

    /// Wait until `<dir>/<name>.log` says `needle` (readiness a component only logs).
    fn wait_for_log(&self, name: &str, needle: &str) -> Result<(), String> {
        let log = self.dir.join(format!("{name}.log"));
        let started = Instant::now();
        while started.elapsed() < READY_DEADLINE {
            if std::fs::read_to_string(&log).is_ok_and(|t| t.contains(needle)) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(format!(
            "{name} did not log {needle:?} within {READY_DEADLINE:?}; see {}",
            log.display()
        ))
    }

    /// Create the CRDs and wait until they are established.
    fn install_crds(&self) -> Result<(), String> {
        let crds = self.assets.crds.display().to_string();
        for args in [
            vec!["create", "-f", crds.as_str()],
            vec![
                "wait",
                "--for=condition=Established",
                "--timeout=120s",
                "-f",
                crds.as_str(),
            ],
        ] {
            let out = self
                .kubectl()
                .args(&args)
                .output()
                .map_err(|e| format!("run kubectl: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "kubectl {}: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
        }
        Ok(())
    }
}

impl ControlPlane {
    /// Create `namespace` (unless it exists) and wait for its `default` ServiceAccount, which pods need (the
    /// ServiceAccount admission plugin refuses pods until kube-controller-manager made it).
    pub async fn create_namespace(&self, namespace: &str) {
        use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
        use kube::api::{Api, PostParams};
        let client = self.client("virtctl-rs-e2e").await;
        let ns: Namespace = serde_json::from_value(serde_json::json!({
            "metadata": {"name": namespace}
        }))
        .expect("namespace");
        match Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => panic!("create namespace {namespace}: {e}"),
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(client, namespace);
        let deadline = Instant::now() + READY_DEADLINE;
        while accounts.get_opt("default").await.ok().flatten().is_none() {
            assert!(
                Instant::now() < deadline,
                "no default ServiceAccount in {namespace} after {READY_DEADLINE:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Remove what a test left in `namespace` once its controller is gone: finalizers of its
    /// VMs and VMIs (nobody is left to release them), its pods at once, then the namespace.
    pub async fn remove_namespace(&self, namespace: &str) {
        use k8s_openapi::api::core::v1::{Namespace, Pod};
        use kube::api::{Api, DeleteParams, ListParams};
        use virtctl_rs::api::{VirtualMachine, VirtualMachineInstance};
        let client = self.client("virtctl-rs-e2e").await;
        strip_finalizers(Api::<VirtualMachine>::namespaced(client.clone(), namespace)).await;
        strip_finalizers(Api::<VirtualMachineInstance>::namespaced(
            client.clone(),
            namespace,
        ))
        .await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let _ = pods
            .delete_collection(
                &DeleteParams::default().grace_period(0),
                &ListParams::default(),
            )
            .await;
        let _ = Api::<Namespace>::all(client)
            .delete(namespace, &DeleteParams::default())
            .await;
    }
}

/// Remove the finalizers of every object `api` lists (best effort: the namespace is going).
async fn strip_finalizers<K>(api: kube::Api<K>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::api::{ListParams, Patch, PatchParams};
    let no_finalizers = Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}}));
    let items = api
        .list(&ListParams::default())
        .await
        .map(|l| l.items)
        .unwrap_or_default();
    for object in items {
        let name = object.meta().name.clone().unwrap_or_default();
        let _ = api
            .patch(&name, &PatchParams::default(), &no_finalizers)
            .await;
    }
}

#[cfg(test)]
mod tests {
    /// kube-apiserver rotates `audit.log` into `audit-<time>.log` files in large runs: the
    /// events of every one are read, oldest file first, the live log last.
    #[test]
    fn rotated_audit_logs_are_read_oldest_first_before_the_live_one() {
        let dir = tempfile::tempdir().expect("temp dir");
        let event = |n: u32| format!("{{\"auditID\": \"{n}\"}}\n");
        let write = |name: &str, text: String| {
            std::fs::write(dir.path().join(name), text).expect("write");
        };
        write("audit-2026-12-06T07-10-00.000.log", event(3) + &event(4));
        write("audit-2026-12-06T07-00-00.000.log", event(1) + &event(2));
        write("audit.log", event(5) + "{\"cut\": ");
        // Not rotated audit logs: another log, the audit policy.
        write("apiserver.log", event(99));
        write("audit-policy.yaml", event(98));
        let ids: Vec<String> = super::audit_log_events(&dir.path().join("audit.log"))
            .iter()
            .map(|e| e["auditID"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(ids, ["1", "2", "3", "4", "5"]);
    }
}
