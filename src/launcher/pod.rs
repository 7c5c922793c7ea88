//! The virt-launcher pod for a VirtualMachineInstance: KubeVirt v1.9.0's `RenderLaunchManifest`
//! (pkg/virt-controller/services/template.go:338-352, 368-1007) as a pure function.
//!
//! What is rendered (facts §4): metadata (generateName, labels, annotations, controller owner
//! reference), hostname/subdomain, pod security context, grace periods, the `compute` container
//! (command and flags in KubeVirt's order, resources from [`super::resources`], security context,
//! env, probes, ports, mounts), the `guest-console-log` native sidecar, container-disk containers
//! (ImageVolume off) or image-volume init containers (ImageVolume on, the v1.9 default), volumes
//! ([`super::volumes`]), node selector, affinity (+ the obsolete-host-model and forbidden CPU
//! feature terms), scheduling passthrough (tolerations, DNS, scheduler, priority class, topology
//! spread, resource claims), service account.
//!
//! Decisions where KubeVirt depends on something we do not have:
//! - **Non-root**: KubeVirt's `vmitrait.IsNonRoot` is "annotation `kubevirt.io/nonroot` present or
//!   `status.runtimeUser != 0`". virt-api's mutating webhook sets `status.runtimeUser = 107` on
//!   every new VMI unless the Root feature gate is on, so a VMI read from a manifest (no status)
//!   is treated as runtimeUser 107 → non-root. Set `status.runtimeUser: 0` to render a root pod.
//! - Cluster-level values that [`ClusterSettings`] does not carry take KubeVirt's defaults:
//!   image pull policy `IfNotPresent`, launcher log verbosity 2, hypervisor `kvm`, no launcher
//!   pull secret, no runtime class, no SELinux launcher type, no seccomp profile, OVMF paths
//!   `/usr/share/edk2/ovmf` (amd64), `/usr/share/AAVMF` (arm64), `""` (s390x).
//!
//! Not modelled (the rendered pod lacks them; KubeVirt would add them):
//! - hook sidecars (`hooks.kubevirt.io/hookSidecars`; `--hook-sidecars` is always `0`),
//!   virtiofs containers and volumes (`devices.filesystems`), the backend-storage PVC
//!   (`vm-state`: persistent TPM/EFI/CBT state);
//! - network annotations from the network/storage annotation generators (multus
//!   `k8s.v1.cni.cncf.io/networks`, `kubevirt.io/network-info` content, SR-IOV resource names —
//!   the SR-IOV downward-API volume itself is rendered), binding-plugin sidecars;
//! - TSC-frequency node labels, Hyper-V strict-check node labels (Alpha gate), SEV/TDX pod
//!   labels beyond the node selectors, persistent-reservation PVC labels and pod anti-affinity,
//!   `permittedHostDevices` validation, `supportContainerResources` overrides, temporary
//!   ("doppelganger") pods and migration target pods.

use super::containers::{
    ENV_VIRT_LAUNCHER_LOG_VERBOSITY, NON_ROOT_UID, compute_capabilities, compute_probe,
    console_log_container, container_disk_binary_container, container_disk_container,
    container_ports, image_volume_init_container, security_context, xdg_env,
};
use super::overhead::{OverheadError, memory_overhead};
use super::resources::{
    NamespaceContext, ResourceError, compute_resources, is_cpu_dedicated, is_sev, is_tdx,
    wants_guaranteed_qos,
};
use super::settings::{
    ClusterSettings, DEFAULT_DISK_MEMORY_LIMIT_BYTES, DEFAULT_GRACE_PERIOD_SECONDS,
    QEMU_TIMEOUT_JITTER_RANGE,
};
use super::volumes::{
    CONTAINER_DISK_DIR, EPHEMERAL_DISK_DIR, KERNEL_BOOT_VOLUME, VIRT_SHARE_DIR, VolumeOptions,
    image_pull_secrets, kernel_boot_container, render_volumes, service_account_volume,
};
use crate::api::vmi::VirtualMachineInstance;
use crate::api::{API_VERSION, annotations, labels};
use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, EnvVarSource, LocalObjectReference, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector, Pod, PodDNSConfig,
    PodReadinessGate, PodResourceClaim, PodSecurityContext, PodSpec, PreferredSchedulingTerm,
    Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;

/// KubeVirt's default `imagePullPolicy` (virt-config.go:74).
pub const DEFAULT_IMAGE_PULL_POLICY: &str = "IfNotPresent";
/// KubeVirt's default virt-launcher log verbosity (virt-config.go:93).
pub const DEFAULT_LAUNCHER_LOG_VERBOSITY: u64 = 2;
/// Verbosity above which libvirt / virtiofsd debug logs are switched on (util.go:37).
pub const EXT_LOG_VERBOSITY_THRESHOLD: u64 = 5;
/// Padding added to the VMI grace period for `--grace-period-seconds`, and again for the pod's
/// `terminationGracePeriodSeconds` (template.go:405-413).
pub const GRACE_PERIOD_PADDING_SECONDS: i64 = 15;
/// Pod readiness gate maintained by the VMI controller (types.go:1330).
pub const VIRTUAL_MACHINE_UNPAUSED: &str = "kubevirt.io/virtual-machine-unpaused";
/// Node label of nodes whose host-model CPU is obsolete (types.go:1287).
pub const NODE_HOST_MODEL_IS_OBSOLETE_LABEL: &str = "node-labeller.kubevirt.io/obsolete-host-model";
/// Node label prefix of CPU features (types.go:1269).
pub const CPU_FEATURE_LABEL: &str = "cpu-feature.node.kubevirt.io/";
/// Node label prefix of CPU models (types.go:1271).
pub const CPU_MODEL_LABEL: &str = "cpu-model.node.kubevirt.io/";
/// Node label prefix of machine types (types.go:1279).
pub const MACHINE_TYPE_LABEL: &str = "machine-type.node.kubevirt.io/";
/// Node selector for dedicated CPUs (types.go:1246).
pub const CPU_MANAGER_LABEL: &str = "kubevirt.io/cpumanager";
/// Node label prefix for cross-architecture capable nodes (types.go:1348).
pub const VM_ARCH_LABEL: &str = "kubevirt.io/vm-arch-";
/// `kubernetes.io/arch`.
pub const ARCH_LABEL: &str = "kubernetes.io/arch";
/// Istio sidecar injection annotation/label.
pub const ISTIO_INJECT: &str = "sidecar.istio.io/inject";
/// Pod annotation: migrations of this pod use unix sockets (types.go:1306).
pub const MIGRATION_TRANSPORT_UNIX: &str = "kubevirt.io/migrationTransportUnix";
/// Pod annotation asking the descheduler to only request evictions (descheduler.go:38).
pub const EVICT_ONLY: &str = "descheduler.alpha.kubernetes.io/request-evict-only";
/// VMI annotation prefix: keep the launcher after a failure (types.go:1303).
pub const KEEP_LAUNCHER_AFTER_FAILURE: &str = "kubevirt.io/keep-launcher-alive-after-failure";
/// VMI annotation making the launcher crash on purpose (functional tests, types.go:1152).
pub const FUNC_TEST_LAUNCHER_FAIL_FAST: &str = "kubevirt.io/func-test-virt-launcher-fail-fast";
/// VMI annotation with custom libvirt log filters (types.go:1323).
pub const CUSTOM_LIBVIRT_LOG_FILTERS: &str = "kubevirt.io/libvirt-log-filters";

/// Why a launcher pod could not be rendered. Every variant names the VMI (`namespace/name`).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A VMI field is missing or invalid.
    #[error("VirtualMachineInstance {vmi}: {field}: {message}")]
    Field {
        /// `namespace/name`.
        vmi: String,
        /// Field path, e.g. `spec.affinity`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// A PVC/DataVolume volume names a claim missing from [`NamespaceContext::pvcs`]
    /// (KubeVirt's `PvcNotFoundError`, which the VMI controller reports as `FailedPvcNotFound`).
    #[error("VirtualMachineInstance {vmi}: didn't find PVC {claim}")]
    PvcNotFound {
        /// `namespace/name`.
        vmi: String,
        /// Claim name.
        claim: String,
    },
    /// The memory overhead could not be computed.
    #[error("VirtualMachineInstance {vmi}: {source}")]
    Overhead {
        /// `namespace/name`.
        vmi: String,
        /// The overhead calculator's error (names the field).
        source: OverheadError,
    },
    /// The compute container's resources could not be computed.
    #[error("VirtualMachineInstance {vmi}: {source}")]
    Resources {
        /// `namespace/name`.
        vmi: String,
        /// Names the field.
        source: ResourceError,
    },
}

/// Render the virt-launcher pod of `vmi` (KubeVirt `RenderLaunchManifest`).
///
/// Pure apart from `rng`, which draws the `--qemu-timeout` jitter: `settings.qemu_timeout_seconds
/// + rng.random_range(0..120)` seconds (template.go:101, 368-372), so with the defaults a value in
/// [240, 359]. The memory overhead comes from [`memory_overhead`]; the namespace facts (quota,
/// labels, PVCs) from `ns`.
///
/// Errors ([`RenderError`]): empty `metadata.name`/`metadata.namespace`, invalid quantities,
/// malformed passthrough fields (affinity, tolerations, ...), a non-integer `logVerbosity`
/// label, a sysprep volume without source, a PVC missing from `ns.pvcs`.
pub fn render_launch_manifest(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    ns: &NamespaceContext,
    rng: &mut impl rand::Rng,
) -> Result<Pod, RenderError> {
    let jitter = rng.random_range(0..QEMU_TIMEOUT_JITTER_RANGE);
    let overhead = memory_overhead(&vmi.spec, settings).map_err(|source| RenderError::Overhead {
        vmi: object_key(vmi),
        source,
    })?;
    render_launch_manifest_with(
        vmi,
        settings,
        ns,
        overhead.total_bytes,
        settings.qemu_timeout_seconds.saturating_add(jitter),
    )
}

fn object_key(vmi: &VirtualMachineInstance) -> String {
    format!(
        "{}/{}",
        vmi.metadata.namespace.as_deref().unwrap_or_default(),
        vmi.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `vmitrait.IsNonRoot` with an absent `status.runtimeUser` read as 107 (see module docs).
pub fn is_non_root(vmi: &VirtualMachineInstance) -> bool {
    let annotated = vmi
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotations::NON_ROOT));
    let runtime_user = vmi
        .status
        .as_ref()
        .and_then(|s| s.runtime_user)
        .unwrap_or(NON_ROOT_UID as u64);
    annotated || runtime_user != 0
}

/// `SanitizeHostname` (pkg/util/net/dns/sanitize.go:33-44): `spec.hostname`, else the name up to
/// the first `.`, truncated to 63 characters.
pub fn pod_hostname(vmi: &VirtualMachineInstance) -> String {
    if let Some(h) = vmi.spec.hostname.as_deref().filter(|h| !h.is_empty()) {
        return h.to_string();
    }
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let first = name.split('.').next().unwrap_or_default();
    first.chars().take(63).collect()
}

/// `CalculateVirtualMachineInstanceID` (pkg/apimachinery/labels.go:31-48): the name if ≤ 63
/// characters, else its first 54 characters, `-`, and the first 8 hex digits of SHA-1(name).
pub fn vmi_id_label(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let hash = sha1_smol::Sha1::from(name.as_bytes()).digest().to_string();
    let prefix: String = name.chars().take(54).collect();
    format!("{prefix}-{}", &hash[..8])
}

/// The OVMF firmware directory passed as `--ovmf-path` (virt-config.go:84-86, 290-304).
pub fn ovmf_path(arch: &str) -> &'static str {
    match arch {
        "arm64" => "/usr/share/AAVMF",
        "s390x" => "",
        _ => "/usr/share/edk2/ovmf",
    }
}

fn typed<T: DeserializeOwned>(
    v: Option<&Value>,
    field: &str,
    object: &str,
) -> Result<Option<T>, RenderError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => serde_json::from_value(v.clone())
            .map(Some)
            .map_err(|e| RenderError::Field {
                vmi: object.to_string(),
                field: field.to_string(),
                message: e.to_string(),
            }),
    }
}

/// `modifyNodeAffintyToRejectLabel` (template.go:236-272): AND a `DoesNotExist` requirement into
/// every required node selector term, or create the required term.
fn reject_label(affinity: Option<Affinity>, label: &str) -> Affinity {
    let requirement = NodeSelectorRequirement {
        key: label.to_string(),
        operator: "DoesNotExist".into(),
        values: None,
    };
    let fresh = || NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: Some(vec![requirement.clone()]),
            match_fields: None,
        }],
    };
    let mut affinity = affinity.unwrap_or_default();
    match affinity.node_affinity.as_mut() {
        Some(na) => match na.required_during_scheduling_ignored_during_execution.as_mut() {
            Some(required) => {
                for term in &mut required.node_selector_terms {
                    term.match_expressions
                        .get_or_insert_with(Vec::new)
                        .push(requirement.clone());
                }
            }
            None => na.required_during_scheduling_ignored_during_execution = Some(fresh()),
        },
        None => {
            affinity.node_affinity = Some(NodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(fresh()),
                ..Default::default()
            })
        }
    }
    affinity
}

fn cpu_features(vmi: &VirtualMachineInstance) -> Vec<(String, String)> {
    vmi.spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.extra.get("features"))
        .and_then(|f| f.as_array())
        .map(|fs| {
            fs.iter()
                .map(|f| {
                    let s = |k: &str| {
                        f.get(k)
                            .and_then(|v| v.as_str())
                            .unwrap_or_default()
                            .to_string()
                    };
                    (s("name"), s("policy"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The pod's node selector (nodeselectorrenderer.go:33-99 and template.go:1066-1132).
fn node_selector(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    cross_arch: bool,
) -> BTreeMap<String, String> {
    let spec = &vmi.spec;
    let arch = spec.architecture.as_deref().unwrap_or_default();
    let mut sel = BTreeMap::new();
    sel.insert(labels::SCHEDULABLE.to_string(), "true".to_string());
    if !arch.is_empty() {
        sel.insert(ARCH_LABEL.to_string(), arch.to_lowercase());
    }
    sel.extend(settings.node_selectors.clone());
    sel.extend(spec.node_selector.clone().unwrap_or_default());
    if cross_arch && !arch.is_empty() {
        sel.remove(ARCH_LABEL);
    }
    let mut enable = |label: String| {
        sel.insert(label, "true".to_string());
    };
    if is_cpu_dedicated(spec) {
        enable(CPU_MANAGER_LABEL.into());
    }
    let model = spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.model.as_deref())
        .unwrap_or_default();
    if !model.is_empty() {
        if model != "host-model" && model != "host-passthrough" {
            enable(format!("{CPU_MODEL_LABEL}{model}"));
        }
        for (name, policy) in cpu_features(vmi) {
            if policy.is_empty() || policy == "require" {
                enable(format!("{CPU_FEATURE_LABEL}{name}"));
            }
        }
    }
    let machine = vmi
        .status
        .as_ref()
        .and_then(|s| s.extra.get("machine"))
        .and_then(|m| m.get("type"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .or_else(|| {
            spec.domain
                .extra
                .get("machine")
                .and_then(|m| m.get("type"))
                .and_then(|t| t.as_str())
                .filter(|t| !t.is_empty())
        });
    if let Some(m) = machine {
        enable(format!("{MACHINE_TYPE_LABEL}{m}"));
    }
    if spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.extra.get("realtime"))
        .is_some_and(|r| !r.is_null())
    {
        enable("kubevirt.io/realtime".into());
    }
    let ls = spec.domain.launch_security.as_ref();
    if is_sev(spec) {
        enable("kubevirt.io/sev".into());
    }
    let sev_es = ls
        .and_then(|l| l.sev.as_ref())
        .and_then(|s| s.get("policy"))
        .and_then(|p| p.get("encryptedState"))
        .and_then(|e| e.as_bool())
        .unwrap_or(false);
    if sev_es {
        enable("kubevirt.io/sev-es".into());
    }
    if ls.is_some_and(|l| l.snp.is_some()) {
        enable("kubevirt.io/sev-snp".into());
    }
    if ls.is_some() && arch == "s390x" {
        enable("kubevirt.io/s390-pv".into());
    }
    if is_tdx(spec) {
        enable("kubevirt.io/tdx".into());
    }
    if cross_arch && !arch.is_empty() {
        enable(format!("{VM_ARCH_LABEL}{arch}"));
    }
    sel
}

fn env_value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// [`render_launch_manifest`] with the memory overhead (bytes) and the final `--qemu-timeout`
/// (seconds) given, for callers that already have them (and for deterministic tests).
pub fn render_launch_manifest_with(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    ns: &NamespaceContext,
    overhead_bytes: i64,
    qemu_timeout_seconds: u32,
) -> Result<Pod, RenderError> {
    let object = object_key(vmi);
    let field_err = |field: &str, message: String| RenderError::Field {
        vmi: object.clone(),
        field: field.to_string(),
        message,
    };
    let name = vmi
        .metadata
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| field_err("metadata.name", "must not be empty".into()))?;
    let namespace = vmi
        .metadata
        .namespace
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| field_err("metadata.namespace", "must not be empty".into()))?;
    let uid = vmi.metadata.uid.clone().unwrap_or_default();
    let vmi_labels = vmi.metadata.labels.clone().unwrap_or_default();
    let vmi_annotations = vmi.metadata.annotations.clone().unwrap_or_default();
    let spec = &vmi.spec;

    let non_root = is_non_root(vmi);
    let user_id = if non_root { NON_ROOT_UID } else { 0 };
    let grace = spec
        .termination_grace_period_seconds
        .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
        .saturating_add(GRACE_PERIOD_PADDING_SECONDS);
    let kill_after = grace.saturating_add(GRACE_PERIOD_PADDING_SECONDS);
    let dedicated = is_cpu_dedicated(spec);
    let resources_err = |source| RenderError::Resources {
        vmi: object.clone(),
        source,
    };
    let guaranteed = dedicated || wants_guaranteed_qos(spec).map_err(resources_err)?;
    let resources =
        compute_resources(vmi, settings, overhead_bytes, ns).map_err(resources_err)?;

    let image = settings.launcher_image.as_str();
    let pull_policy = DEFAULT_IMAGE_PULL_POLICY;
    let gate = |g: &str, beta: bool| settings.gate_enabled(g, beta);
    let image_volume = gate("ImageVolume", true);
    let cross_arch = gate("CrossArchitectureVirtualization", false);
    let arch = spec.architecture.as_deref().unwrap_or_default();

    // The compute command (template.go:426-485).
    let mut command: Vec<String> = [
        "/usr/bin/virt-launcher-monitor",
        "--qemu-timeout",
        &format!("{qemu_timeout_seconds}s"),
        "--name",
        &name,
        "--uid",
        &uid,
        "--namespace",
        &namespace,
        "--kubevirt-share-dir",
        VIRT_SHARE_DIR,
        "--ephemeral-disk-dir",
        EPHEMERAL_DISK_DIR,
        "--container-disk-dir",
        CONTAINER_DISK_DIR,
        "--grace-period-seconds",
        &grace.to_string(),
        "--hook-sidecars",
        "0",
        "--ovmf-path",
        ovmf_path(arch),
        "--disk-memory-limit",
        &DEFAULT_DISK_MEMORY_LIMIT_BYTES.to_string(),
        "--hypervisor",
        "kvm",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut flag = |on: bool, f: &str| {
        if on {
            command.push(f.to_string());
        }
    };
    flag(non_root, "--run-as-nonroot");
    flag(image_volume, "--image-volume");
    flag(
        gate("LibvirtHooksServerAndClient", true),
        "--libvirt-hook-server-and-client",
    );
    flag(
        gate("PodSecondaryInterfaceNamingUpgrade", true),
        "--upgrade-ordinal-ifaces",
    );
    flag(gate("VGPULiveMigration", false), "--vgpu-dedicated-hook");
    flag(gate("VMStatsCollector", false), "--vm-stats-collector");
    flag(
        gate("FirmwareAutoSelection", false),
        "--firmware-auto-selection",
    );
    if let Some(filters) = vmi_annotations.get(CUSTOM_LIBVIRT_LOG_FILTERS) {
        command.push("--libvirt-log-filters".into());
        command.push(filters.clone());
    }
    if settings.use_emulation {
        command.push("--allow-emulation".into());
    }
    if cross_arch {
        command.push("--allow-cross-arch-emulation".into());
    }
    let keep = vmi_annotations.iter().any(|(k, v)| {
        k.starts_with(KEEP_LAUNCHER_AFTER_FAILURE) && (v.is_empty() || v.starts_with("true"))
    });
    if keep {
        command.push("--keep-after-failure".into());
    }
    if vmi_annotations.contains_key(FUNC_TEST_LAUNCHER_FAIL_FAST) {
        command.push("--simulate-crash".into());
    }

    let vols = render_volumes(
        vmi,
        ns,
        &VolumeOptions {
            image_volume,
            plugins: gate("Plugins", false),
            launcher_image: image,
            image_pull_policy: pull_policy,
        },
        &object,
    )?;

    // Env (rendercontainer.go:74-94, template.go:487-520).
    let mut env: Vec<EnvVar> = Vec::new();
    if non_root {
        env.extend(xdg_env());
    }
    if !vols.shared_paths.is_empty() {
        env.push(env_value(
            "SHARED_FILESYSTEM_PATHS",
            &vols.shared_paths.join(":"),
        ));
    }
    let mut verbosity = DEFAULT_LAUNCHER_LOG_VERBOSITY;
    if let Some(v) = vmi_labels.get("logVerbosity") {
        let parsed: i64 = v.trim_start_matches('+').parse().map_err(|e| {
            field_err(
                "metadata.labels.logVerbosity",
                format!("verbosity {v} cannot cast to int: {e}"),
            )
        })?;
        verbosity = parsed as u64;
        env.push(env_value(ENV_VIRT_LAUNCHER_LOG_VERBOSITY, v));
    }
    let label_true = |k: &str| {
        vmi_labels
            .get(k)
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    };
    if label_true("debugLogs") || verbosity > EXT_LOG_VERBOSITY_THRESHOLD {
        env.push(env_value("LIBVIRT_DEBUG_LOGS", "1"));
    }
    if label_true("virtiofsdDebugLogs") || verbosity > EXT_LOG_VERBOSITY_THRESHOLD {
        env.push(env_value("VIRTIOFSD_DEBUG_LOGS", "1"));
    }
    env.push(EnvVar {
        name: "POD_NAME".into(),
        value: None,
        value_from: Some(EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: "metadata.name".into(),
                api_version: None,
            }),
            ..Default::default()
        }),
    });

    let readiness_probe = match &spec.readiness_probe {
        Some(p) => Some(compute_probe(vmi, p, "spec.readinessProbe", &object)?),
        None => None,
    };
    let liveness_probe = match &spec.liveness_probe {
        Some(p) => Some(compute_probe(vmi, p, "spec.livenessProbe", &object)?),
        None => None,
    };
    let ports = container_ports(vmi, &object)?;
    let compute = Container {
        name: "compute".into(),
        image: Some(image.into()),
        image_pull_policy: Some(pull_policy.into()),
        security_context: Some(security_context(
            user_id,
            Some(compute_capabilities(non_root)),
        )),
        command: Some(command),
        volume_devices: (!vols.devices.is_empty()).then(|| vols.devices.clone()),
        volume_mounts: Some(vols.mounts.clone()),
        resources: Some(resources.to_resource_requirements()),
        ports: (!ports.is_empty()).then_some(ports),
        env: Some(env),
        liveness_probe,
        readiness_probe,
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };

    // Containers and init containers (template.go:522-711).
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    let kernel = kernel_boot_container(vmi);
    let kernel_image = kernel
        .and_then(|k| k.get("image"))
        .and_then(|i| i.as_str())
        .unwrap_or_default()
        .to_string();
    let kernel_pull = kernel
        .and_then(|k| k.get("imagePullPolicy"))
        .and_then(|i| i.as_str())
        .filter(|p| !p.is_empty())
        .map(str::to_string);
    let disk_pull = |v: &crate::api::vmi::Volume| {
        v.container_disk.as_ref().and_then(|cd| {
            cd.extra
                .get("imagePullPolicy")
                .and_then(|p| p.as_str())
                .filter(|p| !p.is_empty())
                .map(str::to_string)
        })
    };
    let disk_image = |v: &crate::api::vmi::Volume| {
        v.container_disk
            .as_ref()
            .and_then(|cd| cd.image.clone())
            .unwrap_or_default()
    };
    let mut containers = vec![compute];
    let disk_containers = |init: bool| -> Vec<Container> {
        let mut out: Vec<Container> = volumes
            .iter()
            .enumerate()
            .filter(|(_, v)| v.container_disk.is_some() && v.name != KERNEL_BOOT_VOLUME)
            .map(|(i, v)| {
                container_disk_container(
                    &uid,
                    &v.name,
                    &disk_image(v),
                    disk_pull(v),
                    &format!("disk_{i}"),
                    init,
                    guaranteed,
                )
            })
            .collect();
        if kernel.is_some() {
            out.push(container_disk_container(
                &uid,
                KERNEL_BOOT_VOLUME,
                &kernel_image,
                kernel_pull.clone(),
                "kernel-boot",
                init,
                guaranteed,
            ));
        }
        out
    };
    if !image_volume {
        containers.extend(disk_containers(false));
    }

    let mut init_containers = Vec::new();
    let devices = &spec.domain.devices;
    let console_log = devices.autoattach_serial_console != Some(false)
        && devices
            .log_serial_console
            .unwrap_or(settings.serial_console_log);
    if console_log {
        init_containers.push(console_log_container(
            &uid,
            image,
            pull_policy,
            verbosity,
            guaranteed,
        ));
    }
    let has_container_disk = volumes.iter().any(|v| v.container_disk.is_some());
    if !image_volume && (has_container_disk || kernel.is_some()) {
        init_containers.push(container_disk_binary_container(
            image,
            pull_policy,
            user_id,
            guaranteed,
        ));
        init_containers.extend(disk_containers(true));
    } else if image_volume {
        for v in volumes.iter().filter(|v| v.container_disk.is_some()) {
            init_containers.push(image_volume_init_container(
                &v.name,
                &disk_image(v),
                disk_pull(v),
                guaranteed,
            ));
        }
        if kernel.is_some() {
            init_containers.push(image_volume_init_container(
                KERNEL_BOOT_VOLUME,
                &kernel_image,
                kernel_pull.clone(),
                guaranteed,
            ));
        }
    }

    // Metadata (template.go:1539-1575, 1726-1740).
    let hostname = pod_hostname(vmi);
    let mut pod_labels = vmi_labels.clone();
    pod_labels.insert(labels::APP.into(), labels::APP_VIRT_LAUNCHER.into());
    pod_labels.insert(labels::CREATED_BY.into(), uid.clone());
    pod_labels.insert(labels::VM_NAME.into(), hostname.clone());
    pod_labels.insert(labels::VMI_ID.into(), vmi_id_label(&name));
    if let Some(v) = vmi_annotations.get(ISTIO_INJECT) {
        pod_labels.insert(ISTIO_INJECT.into(), v.clone());
    }
    let mut pod_annotations = BTreeMap::new();
    pod_annotations.insert(annotations::DOMAIN.to_string(), name.clone());
    for (k, v) in &vmi_annotations {
        if k.starts_with("kubectl.kubernetes.io")
            || k.starts_with("kubevirt.io/storage-observed-api-version")
            || k.starts_with("kubevirt.io/latest-observed-api-version")
        {
            continue;
        }
        pod_annotations.insert(k.clone(), v.clone());
    }
    pod_annotations.insert(annotations::DEFAULT_CONTAINER.into(), "compute".into());
    pod_annotations.insert(MIGRATION_TRANSPORT_UNIX.into(), "true".into());
    pod_annotations.insert(EVICT_ONLY.into(), String::new());
    if gate("VmiMemoryOverheadReport", true) {
        pod_annotations.insert(
            annotations::MEMORY_OVERHEAD_BYTES.into(),
            overhead_bytes.to_string(),
        );
    }

    // Affinity (template.go:228-234, 956-975).
    let mut affinity: Option<Affinity> = typed(spec.affinity.as_ref(), "spec.affinity", &object)?;
    let model = spec
        .domain
        .cpu
        .as_ref()
        .and_then(|c| c.model.as_deref())
        .unwrap_or_default();
    if model.is_empty() || model == "host-model" {
        affinity = Some(reject_label(affinity, NODE_HOST_MODEL_IS_OBSOLETE_LABEL));
    }
    for (feature, policy) in cpu_features(vmi) {
        if policy == "forbid" {
            affinity = Some(reject_label(
                affinity,
                &format!("{CPU_FEATURE_LABEL}{feature}"),
            ));
        }
    }
    if cross_arch && !arch.is_empty() {
        let mut a = affinity.unwrap_or_default();
        let na = a.node_affinity.get_or_insert_with(NodeAffinity::default);
        na.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm {
                weight: 100,
                preference: NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: ARCH_LABEL.into(),
                        operator: "In".into(),
                        values: Some(vec![arch.to_lowercase()]),
                    }]),
                    match_fields: None,
                },
            });
        affinity = Some(a);
    }

    // Service account (template.go:977-992).
    let sa_volume = service_account_volume(vmi);
    let service_account_name = spec
        .extra
        .get("serviceAccountName")
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .or_else(|| sa_volume.clone().filter(|s| !s.is_empty()));
    let istio = vmi_annotations
        .get(ISTIO_INJECT)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let automount = sa_volume.as_deref().is_some_and(|s| !s.is_empty()) || istio;

    let tolerations: Option<Vec<Toleration>> =
        typed(spec.tolerations.as_ref(), "spec.tolerations", &object)?;
    let topology: Option<Vec<TopologySpreadConstraint>> = typed(
        spec.topology_spread_constraints.as_ref(),
        "spec.topologySpreadConstraints",
        &object,
    )?;
    let dns_config: Option<PodDNSConfig> =
        typed(spec.dns_config.as_ref(), "spec.dnsConfig", &object)?;
    let resource_claims: Option<Vec<PodResourceClaim>> = typed(
        spec.extra.get("resourceClaims"),
        "spec.resourceClaims",
        &object,
    )?
    .map(|claims: Vec<PodResourceClaim>| {
        claims
            .into_iter()
            .map(|c| PodResourceClaim {
                name: c.name,
                resource_claim_name: c.resource_claim_name,
                resource_claim_template_name: c.resource_claim_template_name,
            })
            .collect::<Vec<_>>()
    })
    .filter(|c| !c.is_empty());
    let pull_secrets = image_pull_secrets(vmi);
    let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());

    Ok(Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("virt-launcher-{name}-")),
            namespace: Some(namespace.clone()),
            labels: Some(pod_labels),
            annotations: Some(pod_annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: API_VERSION.into(),
                kind: "VirtualMachineInstance".into(),
                name: name.clone(),
                uid: uid.clone(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: Some(PodSpec {
            hostname: Some(hostname),
            subdomain: non_empty(&spec.subdomain),
            security_context: Some(PodSecurityContext {
                fs_group: Some(NON_ROOT_UID),
                run_as_user: Some(user_id),
                run_as_group: non_root.then_some(NON_ROOT_UID),
                run_as_non_root: non_root.then_some(true),
                ..Default::default()
            }),
            termination_grace_period_seconds: Some(kill_after),
            restart_policy: Some("Never".into()),
            containers,
            init_containers: (!init_containers.is_empty()).then_some(init_containers),
            node_selector: Some(node_selector(vmi, settings, cross_arch)),
            volumes: Some(vols.volumes),
            image_pull_secrets: (!pull_secrets.is_empty()).then(|| {
                pull_secrets
                    .into_iter()
                    .map(|n| LocalObjectReference { name: n })
                    .collect()
            }),
            dns_config,
            dns_policy: non_empty(&spec.dns_policy),
            readiness_gates: Some(vec![PodReadinessGate {
                condition_type: VIRTUAL_MACHINE_UNPAUSED.into(),
            }]),
            enable_service_links: Some(false),
            scheduler_name: non_empty(&spec.scheduler_name),
            tolerations,
            topology_spread_constraints: topology,
            resource_claims,
            priority_class_name: non_empty(&spec.priority_class_name),
            affinity,
            service_account_name,
            automount_service_account_token: Some(automount),
            ..Default::default()
        }),
        status: None,
    })
}
