//! The virt-launcher pod for a VirtualMachineInstance: KubeVirt v1.9.0's `RenderLaunchManifest`
//! (pkg/virt-controller/services/template.go:338-352, 368-1007) as a pure function.
//!
//! What is rendered (facts §4): metadata (generateName, labels, annotations, controller owner
//! reference), hostname/subdomain, pod security context (and the CR's SELinux launcher type:
//! [`super::selinux`]), grace periods, the `compute` container
//! (command and flags in KubeVirt's order, resources from [`super::resources`], security context,
//! env, probes, ports, mounts), the `guest-console-log` native sidecar, container-disk containers
//! (ImageVolume off) or image-volume init containers (ImageVolume on, the v1.9 default), volumes
//! ([`super::volumes`]), node selector ([`super::node_selector`], with the Hyper-V strict-check
//! labels of the Alpha gate `HypervStrictCheck` and the TSC-frequency label of a VMI whose
//! `status.topologyHints` carries one), affinity (+ the obsolete-host-model and forbidden CPU
//! feature terms, the persistent-reservation claim labels and pod anti-affinity), scheduling
//! passthrough (tolerations, DNS, scheduler, priority class, topology
//! spread, resource claims), service account.
//!
//! Decisions where KubeVirt depends on something we do not have:
//! - **Non-root**: KubeVirt's `vmitrait.IsNonRoot` is "annotation `kubevirt.io/nonroot` present or
//!   `status.runtimeUser != 0`". virt-api's mutating webhook sets `status.runtimeUser = 107` on
//!   every new VMI unless the Root feature gate is on, so a VMI read from a manifest (no status)
//!   is treated as runtimeUser 107 → non-root. Set `status.runtimeUser: 0` to render a root pod.
//! - The KubeVirt CR's image pull policy, launcher log verbosity, default runtime class and VMI
//!   seccomp profile come from [`ClusterSettings`], and so do `--disk-memory-limit`
//!   (`developerConfiguration.diskVerification.memoryLimit`, template.go:471) and `--hypervisor`
//!   with its device (`hypervisors[0].name` under the Alpha gate `ConfigurableHypervisor`,
//!   template.go:472, 1025, 1039-1041: `devices.kubevirt.io/mshv` for `hyperv-direct`).
//!   KubeVirt picks the device once, when virt-controller starts (template.go:1432), and the flag
//!   on every render; here both follow the CR. `--ovmf-path` is the CR's (`GetOVMFPath`,
//!   virt-config.go:290-304), by default `/usr/share/edk2/ovmf` (amd64), `/usr/share/AAVMF`
//!   (arm64), `""` (s390x). The launcher pull secret is virt-controller's `--image-pull-secret`
//!   flag, not the CR: none here.
//!
//! The CR's `permittedHostDevices` refuses a VMI whose GPU or host device it does not list: no
//! pod, a [`RenderError::Input`] with KubeVirt's text (renderresources.go:493-531), which the VMI
//! controller reports as `FailedCreate` "failed to render launch manifest: …" like any render
//! error.
//!
//! Also rendered: hook sidecars and network binding plugin sidecars ([`super::sidecars`]; a
//! hook's ConfigMap and, with `ExternalNetResourceInjection` disabled, a Multus network's
//! NetworkAttachmentDefinition are read by the caller: `NamespaceContext::lookups`), the Multus
//! annotations ([`super::network`]), virtiofsd containers ([`super::virtiofs`]) and the
//! backend-storage `vm-state` claim ([`super::backend_storage`]).
//!
//! The temporary ("doppelganger") pod of a VMI whose DataVolume waits for its first consumer
//! is this pod with another compute command and one more annotation ([`make_temporary`],
//! `RenderLaunchManifestNoVm`, template.go:311-322).
//!
//! Not modelled (docs/comparison.md): migration target pods. The VMI controller writes the
//! `status.topologyHints` the TSC node selector reads before it asks for the pod
//! (vmi/lifecycle.go:106-109, 615-626; `crate::controller::vmi::topology`). v1.9 renders no
//! SEV / TDX / Secure Execution pod labels beyond the node selectors and the
//! `devices.kubevirt.io/sev` / `tdx` requests (template.go:834-856, 1666-1667), which are
//! rendered.

use super::containers::{
    ENV_VIRT_LAUNCHER_LOG_VERBOSITY, NON_ROOT_UID, compute_capabilities, compute_probe,
    console_log_container, container_disk_binary_container, container_disk_container,
    container_ports, image_volume_init_container, security_context, xdg_env,
};
use super::error::RenderError;
use super::network::{multus_annotations, needs_network_info, network_to_resource};
use super::node_selector::{ARCH_LABEL, CPU_FEATURE_LABEL, cpu_features, node_selector};
use super::overhead::memory_overhead_with;
use super::renderer::render_admissible_compute_resources;
use super::resources::{NamespaceContext, Support};
use super::sidecars::{
    compute_shared_mounts, requested_sidecars, sidecar_container, sidecar_volumes,
};
use super::volumes::{
    CONTAINER_DISK_DIR, EPHEMERAL_DISK_DIR, KERNEL_BOOT_VOLUME, VIRT_SHARE_DIR, VolumeOptions,
    image_pull_secrets, kernel_boot_container, render_volumes, service_account_volume,
};
use crate::api::SmallMap;
use crate::api::resources::VmiResources;
use crate::api::vmi::VirtualMachineInstance;
use crate::api::{API_VERSION, annotations, labels};
use crate::config::{
    ClusterSettings, DEFAULT_GRACE_PERIOD_SECONDS, DEFAULT_LAUNCHER_LOG_VERBOSITY,
    QEMU_TIMEOUT_JITTER_RANGE,
};
use k8s_openapi::api::core::v1::{
    Affinity, Container, EnvVar, EnvVarSource, LocalObjectReference, NodeAffinity, NodeSelector,
    NodeSelectorRequirement, NodeSelectorTerm, ObjectFieldSelector, Pod, PodAntiAffinity,
    PodDNSConfig, PodReadinessGate, PodResourceClaim, PodSecurityContext, PodSpec,
    PreferredSchedulingTerm, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::collections::BTreeMap;

/// Verbosity above which libvirt / virtiofsd debug logs are switched on (util.go:37).
pub const EXT_LOG_VERBOSITY_THRESHOLD: u64 = 5;
/// Padding added to the VMI grace period for `--grace-period-seconds`, and again for the pod's
/// `terminationGracePeriodSeconds` (template.go:405-413).
pub const GRACE_PERIOD_PADDING_SECONDS: i64 = 15;
/// Pod readiness gate maintained by the VMI controller (types.go:1330).
pub const VIRTUAL_MACHINE_UNPAUSED: &str = "kubevirt.io/virtual-machine-unpaused";
/// Node label of nodes whose host-model CPU is obsolete (types.go:1287).
pub const NODE_HOST_MODEL_IS_OBSOLETE_LABEL: &str = "node-labeller.kubevirt.io/obsolete-host-model";
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

/// Marks a temporary pod, one that only gets a WaitForFirstConsumer claim bound
/// (`EphemeralProvisioningObject`, kubevirt.io/api core/v1/types.go:1229).
pub const EPHEMERAL_PROVISIONING_ANNOTATION: &str = "kubevirt.io/ephemeral-provisioning";

/// The compute command of a temporary pod (template.go:453-457): bash runs `echo` with
/// `$0 = "bound PVCs"`, so the container prints an empty line and exits 0.
pub const TEMPORARY_POD_COMMAND: [&str; 4] = ["/bin/bash", "-c", "echo", "bound PVCs"];

/// Turn a rendered launcher pod into the temporary pod KubeVirt's `RenderLaunchManifestNoVm`
/// renders (template.go:311-322: `renderLaunchManifest` with `tempPod` true): the `compute`
/// container runs [`TEMPORARY_POD_COMMAND`] instead of virt-launcher-monitor
/// (template.go:453-457; no `args`: the release rules that move launcher flags to `args` only
/// concern virt-launcher-monitor's), and the pod carries
/// [`EPHEMERAL_PROVISIONING_ANNOTATION`]`: "true"` (template.go:626-629). Everything else — name
/// prefix, labels, owner reference, volumes, resources, scheduling — is the launcher pod's, so
/// the scheduler places it as it would place the VMI. KubeVirt renders it without container-disk
/// image digests (`imageIDs` nil); the renderer never has those.
pub fn make_temporary(pod: &mut Pod) {
    let compute = pod
        .spec
        .as_mut()
        .and_then(|s| s.containers.iter_mut().find(|c| c.name == "compute"));
    if let Some(c) = compute {
        c.command = Some(TEMPORARY_POD_COMMAND.map(String::from).to_vec());
        c.args = None;
    }
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(EPHEMERAL_PROVISIONING_ANNOTATION.into(), "true".into());
}

/// Render the virt-launcher pod of `vmi` (KubeVirt `RenderLaunchManifest`).
///
/// Pure apart from `rng`, which draws the `--qemu-timeout` jitter: `settings.qemu_timeout_seconds
/// + rng.random_range(0..120)` seconds (template.go:101, 368-372), so with the defaults a value in
/// [240, 359]. The memory overhead comes from
/// [`memory_overhead`](super::overhead::memory_overhead); the namespace facts (quota,
/// labels, PVCs) from `ns`.
///
/// Errors ([`RenderError`]): empty `metadata.name`/`metadata.namespace`, invalid quantities,
/// malformed passthrough fields (affinity, tolerations, ...), a non-integer `logVerbosity`
/// label, a sysprep volume without source, a PVC missing from `ns.pvcs`, a GPU or host device
/// the CR's `permittedHostDevices` does not list.
pub fn render_launch_manifest(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    ns: &NamespaceContext,
    rng: &mut impl rand::Rng,
) -> Result<Pod, RenderError> {
    let jitter = rng.random_range(0..QEMU_TIMEOUT_JITTER_RANGE);
    let resources = parse_resources(vmi)?;
    let overhead = memory_overhead_with(&vmi.spec, &resources, settings);
    render_pod(
        vmi,
        &resources,
        settings,
        ns,
        overhead.total_bytes,
        settings.qemu_timeout_seconds.saturating_add(jitter),
    )
}

/// The VMI's quantities, parsed once for both the overhead and the compute resources.
fn parse_resources(vmi: &VirtualMachineInstance) -> Result<VmiResources, RenderError> {
    VmiResources::parse(&vmi.spec).map_err(|source| RenderError::Resources {
        vmi: object_key(vmi),
        source,
    })
}

fn object_key(vmi: &VirtualMachineInstance) -> String {
    crate::api::key::meta_key(&vmi.metadata)
}

/// `vmitrait.IsNonRoot` with an absent `status.runtimeUser` read as 107 (see module docs).
pub(crate) fn is_non_root(vmi: &VirtualMachineInstance) -> bool {
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
pub(crate) fn pod_hostname(vmi: &VirtualMachineInstance) -> String {
    if let Some(h) = vmi.spec.hostname.as_deref().filter(|h| !h.is_empty()) {
        return h.to_string();
    }
    let name = vmi.metadata.name.as_deref().unwrap_or_default();
    let first = name.split('.').next().unwrap_or_default();
    first.chars().take(63).collect()
}

/// `CalculateVirtualMachineInstanceID` (pkg/apimachinery/labels.go:31-48): the name if ≤ 63
/// characters, else its first 54 characters, `-`, and the first 8 hex digits of SHA-1(name).
pub(crate) fn vmi_id_label(name: &str) -> String {
    if name.len() <= 63 {
        return name.to_string();
    }
    let hash = sha1_smol::Sha1::from(name.as_bytes()).digest().to_string();
    let prefix: String = name.chars().take(54).collect();
    format!("{prefix}-{}", &hash[..8])
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
        Some(na) => match na
            .required_during_scheduling_ignored_during_execution
            .as_mut()
        {
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

fn env_value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.into(),
        value: Some(value.into()),
        value_from: None,
    }
}

/// [`render_launch_manifest`] with the memory overhead (bytes) and the final `--qemu-timeout`
/// (seconds) given, for callers that already have them (the upgrade rehearsal's two
/// renderings, deterministic tests).
pub(crate) fn render_launch_manifest_with(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    ns: &NamespaceContext,
    overhead_bytes: i64,
    qemu_timeout_seconds: u32,
) -> Result<Pod, RenderError> {
    let resources = parse_resources(vmi)?;
    render_pod(
        vmi,
        &resources,
        settings,
        ns,
        overhead_bytes,
        qemu_timeout_seconds,
    )
}

/// What every part of the pod is rendered from, read once from the VMI and the settings
/// (template.go:368-425).
struct PodInputs<'a> {
    vmi: &'a VirtualMachineInstance,
    settings: &'a ClusterSettings,
    /// `namespace/name`, for errors.
    object: String,
    name: String,
    namespace: String,
    uid: String,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    non_root: bool,
    user_id: i64,
    /// Dedicated CPUs or Guaranteed QoS wanted: support containers get requests = limits.
    guaranteed: bool,
    image: &'a str,
    image_volume: bool,
    cross_arch: bool,
    arch: &'a str,
}

impl<'a> PodInputs<'a> {
    fn read(
        vmi: &'a VirtualMachineInstance,
        resources: &VmiResources,
        settings: &'a ClusterSettings,
    ) -> Result<Self, RenderError> {
        let object = object_key(vmi);
        let required = |value: &Option<String>, field: &str| {
            value
                .clone()
                .filter(|v| !v.is_empty())
                .ok_or_else(|| RenderError::Field {
                    vmi: object.clone(),
                    field: field.to_string(),
                    message: "must not be empty".into(),
                })
        };
        let name = required(&vmi.metadata.name, "metadata.name")?;
        let namespace = required(&vmi.metadata.namespace, "metadata.namespace")?;
        let non_root = is_non_root(vmi);
        Ok(Self {
            vmi,
            settings,
            name,
            namespace,
            uid: vmi.metadata.uid.clone().unwrap_or_default(),
            labels: vmi
                .metadata
                .labels
                .as_ref()
                .map(SmallMap::to_btree_map)
                .unwrap_or_default(),
            annotations: vmi
                .metadata
                .annotations
                .as_ref()
                .map(SmallMap::to_btree_map)
                .unwrap_or_default(),
            non_root,
            user_id: if non_root { NON_ROOT_UID } else { 0 },
            guaranteed: vmi.spec.is_cpu_dedicated() || resources.wants_guaranteed_qos(),
            image: settings.launcher_image.as_str(),
            image_volume: settings.gate_enabled("ImageVolume", true),
            cross_arch: settings.gate_enabled("CrossArchitectureVirtualization", false),
            arch: vmi.spec.architecture.as_deref().unwrap_or_default(),
            object,
        })
    }

    fn gate(&self, gate: &str, beta: bool) -> bool {
        self.settings.gate_enabled(gate, beta)
    }

    /// What the support containers' resources follow: the CR's `supportContainerResources`
    /// and dedicated CPUs or Guaranteed QoS.
    fn support(&self) -> Support<'a> {
        Support {
            entries: &self.settings.support_container_resources,
            guaranteed: self.guaranteed,
        }
    }

    fn input_error(&self, message: String) -> RenderError {
        RenderError::Input {
            vmi: self.object.clone(),
            message,
        }
    }

    /// `--grace-period-seconds`: the VMI's grace period plus padding (template.go:405-413).
    fn grace_period(&self) -> i64 {
        self.vmi
            .spec
            .termination_grace_period_seconds
            .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
            .saturating_add(GRACE_PERIOD_PADDING_SECONDS)
    }

    /// The `logVerbosity` label, or the default (template.go:487-500).
    fn log_verbosity(&self) -> Result<Option<(u64, &str)>, RenderError> {
        let Some(v) = self.labels.get("logVerbosity") else {
            return Ok(None);
        };
        let parsed: i64 = v
            .trim_start_matches('+')
            .parse()
            .map_err(|e| RenderError::Field {
                vmi: self.object.clone(),
                field: "metadata.labels.logVerbosity".into(),
                message: format!("verbosity {v} cannot cast to int: {e}"),
            })?;
        Ok(Some((parsed as u64, v.as_str())))
    }

    fn verbosity(&self) -> Result<u64, RenderError> {
        Ok(self
            .log_verbosity()?
            .map_or(self.settings.virt_launcher_verbosity, |(v, _)| v))
    }
}

/// The backend-storage claim the pod mounts (template.go:356-365): `None` for a VMI that needs
/// none; the claim found by the caller; KubeVirt's error when the caller knows the claims and
/// found none; the legacy name when the claims are not known (see
/// [`NamespaceContext::backend_storage_claim`]).
fn backend_storage_claim(
    vmi: &VirtualMachineInstance,
    ns: &NamespaceContext,
    input: &PodInputs<'_>,
) -> Result<Option<String>, RenderError> {
    if !super::backend_storage::is_needed(vmi) {
        return Ok(None);
    }
    match (&ns.backend_storage_claim, &ns.pvcs) {
        (Some(claim), _) => Ok(Some(claim.clone())),
        (None, Some(_)) => Err(input.input_error(
            "can't generate manifest without backend-storage PVC, waiting for the PVC to be created"
                .into(),
        )),
        (None, None) => Ok(Some(super::backend_storage::base_claim_name(vmi))),
    }
}

fn render_pod(
    vmi: &VirtualMachineInstance,
    resources: &VmiResources,
    settings: &ClusterSettings,
    ns: &NamespaceContext,
    overhead_bytes: i64,
    qemu_timeout_seconds: u32,
) -> Result<Pod, RenderError> {
    let input = PodInputs::read(vmi, resources, settings)?;
    // The networks' NADs, read while rendering (template.go:427-433): a missing one fails the
    // render; their resources are the renderer's `WithNetworkResources`.
    network_to_resource(vmi, settings, ns).map_err(|m| input.input_error(m))?;
    // The CR's permittedHostDevices, checked before any resource (template.go:1031-1033).
    if let Some(refused) = super::renderer::unpermitted_host_devices(vmi, settings) {
        return Err(input.input_error(refused));
    }
    // A pod that will be created: fix what the API server would reject (docs/run-controller.md).
    let compute_resources =
        render_admissible_compute_resources(vmi, resources, settings, overhead_bytes, ns).map_err(
            |source| RenderError::Resources {
                vmi: input.object.clone(),
                source,
            },
        )?;
    // The sidecars (template.go:443-450).
    let sidecars = requested_sidecars(vmi, settings, &input.object)?;
    let backend_claim = backend_storage_claim(vmi, ns, &input)?;
    let vols = render_volumes(
        vmi,
        ns,
        &VolumeOptions {
            image_volume: input.image_volume,
            hook_sidecars: !sidecars.is_empty(),
            plugins: input.gate("Plugins", false),
            network_info: needs_network_info(vmi, settings),
            virtiofs: super::virtiofs::is_enabled(vmi),
            launcher_image: input.image,
            image_pull_policy: &settings.image_pull_policy,
            backend_storage_claim: backend_claim.as_deref(),
            non_root: input.non_root,
        },
        &input.object,
    )?;
    let mut compute = compute_container(
        &input,
        compute_command(&input, qemu_timeout_seconds, sidecars.len()),
        &vols,
        compute_resources.to_resource_requirements(),
    )?;
    // Hook sidecars, their ConfigMap (read while rendering) and PVC volumes (template.go:578-620).
    let sidecar_volumes = sidecar_volumes(&sidecars, ns, &input.object)?;
    if let Some(mounts) = compute.volume_mounts.as_mut() {
        mounts.extend(compute_shared_mounts(&sidecars));
    }
    // Containers and init containers (template.go:522-711).
    let mut containers = vec![compute];
    if !input.image_volume {
        containers.extend(disk_containers(&input, false));
    }
    containers.extend(super::virtiofs::containers(
        vmi,
        input.image,
        input.support(),
    ));
    for (i, sidecar) in sidecars.iter().enumerate() {
        containers.push(sidecar_container(
            i,
            sidecar,
            settings,
            input.non_root,
            input.guaranteed,
        ));
    }
    let init_containers = init_containers(&input)?;
    // Persistent reservation: the reserved claims as pod labels (template.go:164-193).
    let reserved = super::reservation::claim_labels(vmi, ns);
    let mut metadata = pod_metadata(&input, overhead_bytes)?;
    metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(reserved.clone());
    let volumes = vols.volumes.into_iter().chain(sidecar_volumes).collect();
    let mut spec = pod_spec(&input, containers, init_containers, volumes, &reserved)?;
    apply_pod_rules(&mut spec, settings.kubevirt_version.pod_rules());
    Ok(Pod {
        metadata,
        spec: Some(spec),
        status: None,
    })
}

/// The flag the `LibvirtHooksServerAndClient` gate adds to `compute` up to v1.9.0
/// (template.go:480-482).
pub(crate) const LIBVIRT_HOOKS_FLAG: &str = "--libvirt-hook-server-and-client";

/// The release's rendering rules beyond the formula
/// ([`PodRules`](crate::kubevirt_version::PodRules)), applied to the v1.9.0 rendering: without
/// `libvirt_hooks_flag` (PR 18687) `compute` has no [`LIBVIRT_HOOKS_FLAG`]; with
/// `launcher_flags_in_args` (PR 18237) `compute` and `container-disk-binary` keep their
/// executable in `command` and pass their flags as `args`.
fn apply_pod_rules(spec: &mut PodSpec, rules: crate::kubevirt_version::PodRules) {
    if !rules.libvirt_hooks_flag.value {
        let compute = spec.containers.iter_mut().find(|c| c.name == "compute");
        if let Some(command) = compute.and_then(|c| c.command.as_mut()) {
            command.retain(|a| a != LIBVIRT_HOOKS_FLAG);
        }
    }
    if !rules.launcher_flags_in_args.value {
        return;
    }
    let split = ["compute", "container-disk-binary"];
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers.filter(|c| split.contains(&c.name.as_str())) {
        if let Some(command) = c.command.as_mut().filter(|c| c.len() > 1) {
            let flags = command.split_off(1);
            c.args.get_or_insert_with(Vec::new).splice(0..0, flags);
        }
    }
}

/// The compute container's command: virt-launcher-monitor and its flags in KubeVirt's order
/// (template.go:426-485).
fn compute_command(
    input: &PodInputs<'_>,
    qemu_timeout_seconds: u32,
    sidecars: usize,
) -> Vec<String> {
    let mut command: Vec<String> = [
        "/usr/bin/virt-launcher-monitor",
        "--qemu-timeout",
        &format!("{qemu_timeout_seconds}s"),
        "--name",
        &input.name,
        "--uid",
        &input.uid,
        "--namespace",
        &input.namespace,
        "--kubevirt-share-dir",
        VIRT_SHARE_DIR,
        "--ephemeral-disk-dir",
        EPHEMERAL_DISK_DIR,
        "--container-disk-dir",
        CONTAINER_DISK_DIR,
        "--grace-period-seconds",
        &input.grace_period().to_string(),
        "--hook-sidecars",
        &sidecars.to_string(),
        "--ovmf-path",
        input.settings.ovmf_path(input.arch),
        "--disk-memory-limit",
        &input.settings.disk_memory_limit_bytes.to_string(),
        "--hypervisor",
        input.settings.hypervisor_name(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let annotations = &input.annotations;
    let keep = annotations.iter().any(|(k, v)| {
        k.starts_with(KEEP_LAUNCHER_AFTER_FAILURE) && (v.is_empty() || v.starts_with("true"))
    });
    let flags = [
        (input.non_root, "--run-as-nonroot"),
        (input.image_volume, "--image-volume"),
        (
            input.gate("LibvirtHooksServerAndClient", true),
            LIBVIRT_HOOKS_FLAG,
        ),
        (
            input.gate("PodSecondaryInterfaceNamingUpgrade", true),
            "--upgrade-ordinal-ifaces",
        ),
        (
            input.gate("VGPULiveMigration", false),
            "--vgpu-dedicated-hook",
        ),
        (
            input.gate("VMStatsCollector", false),
            "--vm-stats-collector",
        ),
        (
            input.gate("FirmwareAutoSelection", false),
            "--firmware-auto-selection",
        ),
    ];
    command.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| f.to_string()),
    );
    if let Some(filters) = annotations.get(CUSTOM_LIBVIRT_LOG_FILTERS) {
        command.push("--libvirt-log-filters".into());
        command.push(filters.clone());
    }
    let tail = [
        (input.settings.use_emulation, "--allow-emulation"),
        (input.cross_arch, "--allow-cross-arch-emulation"),
        (keep, "--keep-after-failure"),
        (
            annotations.contains_key(FUNC_TEST_LAUNCHER_FAIL_FAST),
            "--simulate-crash",
        ),
    ];
    command.extend(
        tail.iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| f.to_string()),
    );
    command
}

/// The compute container's env (rendercontainer.go:74-94, template.go:487-520).
fn compute_env(input: &PodInputs<'_>, shared_paths: &[String]) -> Result<Vec<EnvVar>, RenderError> {
    let mut env: Vec<EnvVar> = Vec::new();
    if input.non_root {
        env.extend(xdg_env());
    }
    if !shared_paths.is_empty() {
        env.push(env_value(
            "SHARED_FILESYSTEM_PATHS",
            &shared_paths.join(":"),
        ));
    }
    // The VMI's `logVerbosity` label, else the cluster's when not the default
    // (template.go:525-541).
    let cluster = input.settings.virt_launcher_verbosity;
    let mut verbosity = cluster;
    if let Some((parsed, raw)) = input.log_verbosity()? {
        verbosity = parsed;
        env.push(env_value(ENV_VIRT_LAUNCHER_LOG_VERBOSITY, raw));
    } else if cluster != DEFAULT_LAUNCHER_LOG_VERBOSITY {
        env.push(env_value(
            ENV_VIRT_LAUNCHER_LOG_VERBOSITY,
            &cluster.to_string(),
        ));
    }
    let label_true = |k: &str| {
        input
            .labels
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
    Ok(env)
}

/// The `compute` container (template.go:522-560).
fn compute_container(
    input: &PodInputs<'_>,
    command: Vec<String>,
    vols: &super::volumes::RenderedVolumes,
    resources: ResourceRequirements,
) -> Result<Container, RenderError> {
    let (vmi, object) = (input.vmi, input.object.as_str());
    let env = compute_env(input, &vols.shared_paths)?;
    let probe = |p: &Option<Box<crate::api::vmi::Probe>>, field: &str| match p {
        Some(p) => compute_probe(vmi, p, field, object).map(Some),
        None => Ok(None),
    };
    let readiness_probe = probe(&vmi.spec.readiness_probe, "spec.readinessProbe")?;
    let liveness_probe = probe(&vmi.spec.liveness_probe, "spec.livenessProbe")?;
    let ports = container_ports(vmi, object)?;
    Ok(Container {
        name: "compute".into(),
        image: Some(input.image.into()),
        image_pull_policy: Some(input.settings.image_pull_policy.clone()),
        security_context: Some(security_context(
            input.user_id,
            Some(compute_capabilities(input.non_root)),
        )),
        command: Some(command),
        volume_devices: (!vols.devices.is_empty()).then(|| vols.devices.clone()),
        volume_mounts: Some(vols.mounts.clone()),
        resources: Some(resources),
        ports: (!ports.is_empty()).then_some(ports),
        env: Some(env),
        liveness_probe,
        readiness_probe,
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    })
}

/// A container disk to pull: the volume's name, image and pull policy.
struct DiskImage<'v> {
    volume: &'v str,
    image: String,
    pull_policy: Option<String>,
}

/// The VMI's container disks, in volume order, then the kernel-boot image (template.go:562-576).
fn disk_images(
    vmi: &VirtualMachineInstance,
) -> (Vec<(usize, DiskImage<'_>)>, Option<DiskImage<'_>>) {
    let policy = |v: Option<&Value>| {
        v.and_then(|p| p.as_str())
            .filter(|p| !p.is_empty())
            .map(str::to_string)
    };
    let volumes = vmi.spec.volumes.as_deref().unwrap_or_default();
    let disks = volumes
        .iter()
        .enumerate()
        .filter_map(|(i, v)| {
            let cd = v.container_disk.as_ref()?;
            (v.name != KERNEL_BOOT_VOLUME).then(|| {
                let disk = DiskImage {
                    volume: &v.name,
                    image: cd.image.clone().unwrap_or_default(),
                    pull_policy: policy(cd.extra.get("imagePullPolicy")),
                };
                (i, disk)
            })
        })
        .collect();
    let kernel = kernel_boot_container(vmi).map(|k| DiskImage {
        volume: KERNEL_BOOT_VOLUME,
        image: k
            .get("image")
            .and_then(|i| i.as_str())
            .unwrap_or_default()
            .to_string(),
        pull_policy: policy(k.get("imagePullPolicy")),
    });
    (disks, kernel)
}

/// Container-disk containers (ImageVolume off), as sidecars or as init containers.
fn disk_containers(input: &PodInputs<'_>, init: bool) -> Vec<Container> {
    let (disks, kernel) = disk_images(input.vmi);
    let named = disks
        .into_iter()
        .map(|(i, d)| (d, format!("disk_{i}")))
        .chain(kernel.map(|k| (k, "kernel-boot".to_string())));
    named
        .map(|(d, binary)| {
            container_disk_container(
                &input.uid,
                d.volume,
                &d.image,
                d.pull_policy,
                &binary,
                init,
                input.support(),
            )
        })
        .collect()
}

/// Init containers: the serial console log, then the container-disk binary and disks, or the
/// image-volume init containers (template.go:622-711).
fn init_containers(input: &PodInputs<'_>) -> Result<Vec<Container>, RenderError> {
    let mut out = Vec::new();
    let devices = &input.vmi.spec.domain.devices;
    let console_log = devices.autoattach_serial_console != Some(false)
        && devices
            .log_serial_console
            .unwrap_or(input.settings.serial_console_log);
    if console_log {
        out.push(console_log_container(
            &input.uid,
            input.image,
            &input.settings.image_pull_policy,
            input.verbosity()?,
            input.support(),
        ));
    }
    let volumes = input.vmi.spec.volumes.as_deref().unwrap_or_default();
    let has_container_disk = volumes.iter().any(|v| v.container_disk.is_some());
    let (_, kernel) = disk_images(input.vmi);
    if !input.image_volume && (has_container_disk || kernel.is_some()) {
        out.push(container_disk_binary_container(
            input.image,
            &input.settings.image_pull_policy,
            input.user_id,
            input.support(),
        ));
        out.extend(disk_containers(input, true));
    } else if input.image_volume {
        // Every container disk here, the kernel-boot volume's too, then the kernel image.
        for v in volumes {
            if let Some(cd) = v.container_disk.as_ref() {
                out.push(image_volume_init_container(
                    &v.name,
                    &cd.image.clone().unwrap_or_default(),
                    cd.extra
                        .get("imagePullPolicy")
                        .and_then(|p| p.as_str())
                        .filter(|p| !p.is_empty())
                        .map(str::to_string),
                    input.support(),
                ));
            }
        }
        if let Some(k) = kernel {
            out.push(image_volume_init_container(
                k.volume,
                &k.image,
                k.pull_policy,
                input.support(),
            ));
        }
    }
    Ok(out)
}

/// The pod's metadata: labels, annotations (the VMI's, then the generators'), the controller
/// owner reference (template.go:1539-1575, 1726-1740).
fn pod_metadata(input: &PodInputs<'_>, overhead_bytes: i64) -> Result<ObjectMeta, RenderError> {
    let mut pod_labels = input.labels.clone();
    pod_labels.insert(labels::APP.into(), labels::APP_VIRT_LAUNCHER.into());
    pod_labels.insert(labels::CREATED_BY.into(), input.uid.clone());
    pod_labels.insert(labels::VM_NAME.into(), pod_hostname(input.vmi));
    pod_labels.insert(labels::VMI_ID.into(), vmi_id_label(&input.name));
    if let Some(v) = input.annotations.get(ISTIO_INJECT) {
        pod_labels.insert(ISTIO_INJECT.into(), v.clone());
    }
    let mut pod_annotations = BTreeMap::new();
    pod_annotations.insert(annotations::DOMAIN.to_string(), input.name.clone());
    let skipped = [
        "kubectl.kubernetes.io",
        "kubevirt.io/storage-observed-api-version",
        "kubevirt.io/latest-observed-api-version",
    ];
    for (k, v) in &input.annotations {
        if !skipped.iter().any(|p| k.starts_with(p)) {
            pod_annotations.insert(k.clone(), v.clone());
        }
    }
    pod_annotations.insert(annotations::DEFAULT_CONTAINER.into(), "compute".into());
    pod_annotations.insert(MIGRATION_TRANSPORT_UNIX.into(), "true".into());
    pod_annotations.insert(EVICT_ONLY.into(), String::new());
    // The network generator, then the storage one, over what is there (template.go:1552-1559).
    let multus = multus_annotations(input.vmi, &input.settings.network_bindings)
        .map_err(|m| input.input_error(m))?;
    pod_annotations.extend(multus);
    pod_annotations.extend(super::annotations::istio(input.vmi));
    pod_annotations.extend(super::annotations::velero(input.vmi, None));
    if input.gate("VmiMemoryOverheadReport", true) {
        pod_annotations.insert(
            annotations::MEMORY_OVERHEAD_BYTES.into(),
            overhead_bytes.to_string(),
        );
    }
    Ok(ObjectMeta {
        generate_name: Some(format!("virt-launcher-{}-", input.name)),
        namespace: Some(input.namespace.clone()),
        labels: Some(pod_labels),
        annotations: Some(pod_annotations),
        owner_references: Some(vec![OwnerReference {
            api_version: API_VERSION.into(),
            kind: "VirtualMachineInstance".into(),
            name: input.name.clone(),
            uid: input.uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]),
        ..Default::default()
    })
}

/// The VMI's affinity plus the obsolete-host-model and forbidden-feature terms, the
/// persistent-reservation anti-affinity for the `reserved` claim labels, and the
/// cross-architecture preference (template.go:164-193, 228-234, 760-777).
fn pod_affinity(
    input: &PodInputs<'_>,
    reserved: &BTreeMap<String, String>,
) -> Result<Option<Affinity>, RenderError> {
    let spec = &input.vmi.spec;
    let mut affinity: Option<Affinity> =
        typed(spec.affinity.as_deref(), "spec.affinity", &input.object)?;
    let model = spec.cpu_model();
    if model.is_empty() || model == "host-model" {
        affinity = Some(reject_label(affinity, NODE_HOST_MODEL_IS_OBSOLETE_LABEL));
    }
    for (feature, policy) in cpu_features(input.vmi) {
        if policy == "forbid" {
            let label = format!("{CPU_FEATURE_LABEL}{feature}");
            affinity = Some(reject_label(affinity, &label));
        }
    }
    let terms = super::reservation::anti_affinity_terms(reserved);
    if !terms.is_empty() {
        let mut a = affinity.unwrap_or_default();
        a.pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .extend(terms);
        affinity = Some(a);
    }
    if input.cross_arch && !input.arch.is_empty() {
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
                        values: Some(vec![input.arch.to_lowercase()]),
                    }]),
                    match_fields: None,
                },
            });
        affinity = Some(a);
    }
    Ok(affinity)
}

/// `spec.resourceClaims`, as the pod's claims (template.go:990-1005).
fn resource_claims(input: &PodInputs<'_>) -> Result<Option<Vec<PodResourceClaim>>, RenderError> {
    let claims: Option<Vec<PodResourceClaim>> = typed(
        input.vmi.spec.extra.get("resourceClaims"),
        "spec.resourceClaims",
        &input.object,
    )?;
    Ok(claims
        .map(|claims| {
            claims
                .into_iter()
                .map(|c| PodResourceClaim {
                    name: c.name,
                    resource_claim_name: c.resource_claim_name,
                    resource_claim_template_name: c.resource_claim_template_name,
                })
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty()))
}

/// The service account and whether its token is mounted (template.go:977-992).
fn service_account(input: &PodInputs<'_>) -> (Option<String>, bool) {
    let sa_volume = service_account_volume(input.vmi);
    let name = input
        .vmi
        .spec
        .extra
        .get("serviceAccountName")
        .and_then(|s| s.as_str())
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .or_else(|| sa_volume.clone().filter(|s| !s.is_empty()));
    let istio = input
        .annotations
        .get(ISTIO_INJECT)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let automount = sa_volume.as_deref().is_some_and(|s| !s.is_empty()) || istio;
    (name, automount)
}

/// The pod spec around the containers and volumes (template.go:713-1007).
fn pod_spec(
    input: &PodInputs<'_>,
    containers: Vec<Container>,
    init_containers: Vec<Container>,
    volumes: Vec<k8s_openapi::api::core::v1::Volume>,
    reserved: &BTreeMap<String, String>,
) -> Result<PodSpec, RenderError> {
    let (spec, object) = (&input.vmi.spec, input.object.as_str());
    let non_empty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    let (service_account_name, automount) = service_account(input);
    let pull_secrets = image_pull_secrets(input.vmi);
    let non_root = input.non_root;
    // Read in KubeVirt's order, so the first malformed field is the one reported.
    let affinity = pod_affinity(input, reserved)?;
    let tolerations: Option<Vec<Toleration>> =
        typed(spec.tolerations.as_deref(), "spec.tolerations", object)?;
    let topology: Option<Vec<TopologySpreadConstraint>> = typed(
        spec.topology_spread_constraints.as_deref(),
        "spec.topologySpreadConstraints",
        object,
    )?;
    let dns_config: Option<PodDNSConfig> =
        typed(spec.dns_config.as_deref(), "spec.dnsConfig", object)?;
    let resource_claims = resource_claims(input)?;
    let mut pod_spec = PodSpec {
        hostname: Some(pod_hostname(input.vmi)),
        subdomain: non_empty(&spec.subdomain),
        security_context: Some(PodSecurityContext {
            fs_group: Some(NON_ROOT_UID),
            run_as_user: Some(input.user_id),
            run_as_group: non_root.then_some(NON_ROOT_UID),
            run_as_non_root: non_root.then_some(true),
            seccomp_profile: input.settings.vmi_seccomp_profile.clone(),
            ..Default::default()
        }),
        termination_grace_period_seconds: Some(
            input
                .grace_period()
                .saturating_add(GRACE_PERIOD_PADDING_SECONDS),
        ),
        restart_policy: Some("Never".into()),
        containers,
        init_containers: (!init_containers.is_empty()).then_some(init_containers),
        node_selector: Some(node_selector(
            input.vmi,
            input.settings,
            input.cross_arch,
            &input.object,
        )?),
        volumes: Some(volumes),
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
        runtime_class_name: input.settings.default_runtime_class.clone(),
        priority_class_name: non_empty(&spec.priority_class_name),
        affinity,
        service_account_name,
        automount_service_account_token: Some(automount),
        ..Default::default()
    };
    super::selinux::align_pod_multi_category_security(&mut pod_spec, input.settings);
    Ok(pod_spec)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::resources::PvcInfo;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use serde_json::json;

    fn vmi(meta: serde_json::Value, spec: serde_json::Value) -> VirtualMachineInstance {
        let mut m = json!({"name": "testvmi", "namespace": "testns", "uid": "1234"});
        if let (Some(m), Some(extra)) = (m.as_object_mut(), meta.as_object()) {
            m.extend(extra.clone());
        }
        serde_json::from_value(
            json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": m, "spec": spec}),
        )
        .unwrap()
    }

    /// A VMI as KubeVirt's template tests build it: no status, so runtimeUser 0 → root.
    fn root(mut v: VirtualMachineInstance) -> VirtualMachineInstance {
        v.status = Some(crate::api::vmi::VirtualMachineInstanceStatus {
            runtime_user: Some(0),
            ..Default::default()
        });
        v
    }

    /// template_test.go:92-131: serial console log disabled, defaults otherwise.
    fn test_settings() -> ClusterSettings {
        ClusterSettings {
            serial_console_log: false,
            launcher_image: "kubevirt/virt-launcher".into(),
            ..ClusterSettings::default()
        }
    }

    fn render(v: &VirtualMachineInstance, s: &ClusterSettings) -> Pod {
        let mut rng = StdRng::seed_from_u64(1);
        render_launch_manifest(v, s, &NamespaceContext::default(), &mut rng).unwrap()
    }

    fn spec(p: &Pod) -> &PodSpec {
        p.spec.as_ref().unwrap()
    }

    /// `affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`.
    fn required_terms(p: &Pod) -> Vec<NodeSelectorTerm> {
        let affinity = spec(p).affinity.clone().unwrap();
        let node = affinity.node_affinity.unwrap();
        node.required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms
    }

    fn compute(p: &Pod) -> &Container {
        &spec(p).containers[0]
    }

    fn command(p: &Pod) -> Vec<String> {
        compute(p).command.clone().unwrap()
    }

    fn flag_value(p: &Pod, flag: &str) -> Option<String> {
        let c = command(p);
        c.iter()
            .position(|a| a == flag)
            .and_then(|i| c.get(i + 1).cloned())
    }

    /// template_test.go:530-620 ("should work"), with ImageVolume and
    /// PodSecondaryInterfaceNamingUpgrade disabled as in the test, and its hook sidecar.
    #[test]
    fn launch_template_should_work_template_test_530() {
        for (arch, ovmf) in [
            ("amd64", "/usr/share/edk2/ovmf"),
            ("arm64", "/usr/share/AAVMF"),
        ] {
            let s = ClusterSettings {
                disabled_feature_gates: vec![
                    "ImageVolume".into(),
                    "PodSecondaryInterfaceNamingUpgrade".into(),
                ],
                ..test_settings()
            };
            let v = root(vmi(
                json!({"annotations": {"test": "shouldBeInPod",
                    "hooks.kubevirt.io/hookSidecars": r#"[{"image": "some-image:v1", "imagePullPolicy": "IfNotPresent"}]"#}}),
                json!({"domain": {"devices": {"disableHotplug": true}}, "architecture": arch}),
            ));
            let pod = render(&v, &s);
            let meta = &pod.metadata;
            assert_eq!(
                meta.labels.clone().unwrap(),
                BTreeMap::from([
                    ("kubevirt.io".to_string(), "virt-launcher".to_string()),
                    ("kubevirt.io/created-by".into(), "1234".into()),
                    ("vm.kubevirt.io/name".into(), "testvmi".into()),
                    ("vmi.kubevirt.io/id".into(), "testvmi".into()),
                ])
            );
            let ann = meta.annotations.clone().unwrap();
            assert_eq!(ann["kubevirt.io/domain"], "testvmi");
            assert_eq!(ann["test"], "shouldBeInPod");
            assert_eq!(ann["kubevirt.io/migrationTransportUnix"], "true");
            assert_eq!(ann["kubectl.kubernetes.io/default-container"], "compute");
            assert_eq!(
                ann["descheduler.alpha.kubernetes.io/request-evict-only"],
                ""
            );
            assert!(ann.contains_key("kubevirt.io/memory-overhead-bytes"));
            let owner = &meta.owner_references.as_ref().unwrap()[0];
            assert_eq!(
                (
                    owner.api_version.as_str(),
                    owner.kind.as_str(),
                    owner.name.as_str(),
                    owner.uid.as_str()
                ),
                (
                    "kubevirt.io/v1",
                    "VirtualMachineInstance",
                    "testvmi",
                    "1234"
                )
            );
            assert_eq!(
                (owner.controller, owner.block_owner_deletion),
                (Some(true), Some(true))
            );
            assert_eq!(
                meta.generate_name.as_deref(),
                Some("virt-launcher-testvmi-")
            );
            assert_eq!(
                spec(&pod).node_selector.clone().unwrap(),
                BTreeMap::from([
                    ("kubevirt.io/schedulable".to_string(), "true".to_string()),
                    ("kubernetes.io/arch".into(), arch.into()),
                ])
            );
            let timeout = flag_value(&pod, "--qemu-timeout").unwrap();
            let expected: Vec<String> = [
                "/usr/bin/virt-launcher-monitor",
                "--qemu-timeout",
                &timeout,
                "--name",
                "testvmi",
                "--uid",
                "1234",
                "--namespace",
                "testns",
                "--kubevirt-share-dir",
                "/var/run/kubevirt",
                "--ephemeral-disk-dir",
                "/var/run/kubevirt-ephemeral-disks",
                "--container-disk-dir",
                "/var/run/kubevirt/container-disks",
                "--grace-period-seconds",
                "45",
                "--hook-sidecars",
                "1",
                "--ovmf-path",
                ovmf,
                "--disk-memory-limit",
                "2097152000",
                "--hypervisor",
                "kvm",
                "--libvirt-hook-server-and-client",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            assert_eq!(command(&pod), expected);
            assert_eq!(spec(&pod).containers[1].name, "hook-sidecar-0");
            assert_eq!(
                spec(&pod).containers[1].image.as_deref(),
                Some("some-image:v1")
            );
            assert_eq!(spec(&pod).termination_grace_period_seconds, Some(60));
            assert!(spec(&pod).init_containers.is_none());
            assert_eq!(spec(&pod).hostname.as_deref(), Some("testvmi"));
            assert!(spec(&pod).subdomain.is_none());
            let env = compute(&pod).env.clone().unwrap();
            let pod_name = env.iter().find(|e| e.name == "POD_NAME").unwrap();
            assert_eq!(
                pod_name
                    .value_from
                    .as_ref()
                    .unwrap()
                    .field_ref
                    .as_ref()
                    .unwrap()
                    .field_path,
                "metadata.name"
            );
            assert_eq!(
                compute(&pod).image.as_deref(),
                Some("kubevirt/virt-launcher")
            );
            assert_eq!(spec(&pod).restart_policy.as_deref(), Some("Never"));
            assert_eq!(spec(&pod).enable_service_links, Some(false));
            assert_eq!(
                spec(&pod).readiness_gates.as_ref().unwrap()[0].condition_type,
                "kubevirt.io/virtual-machine-unpaused"
            );
            assert_eq!(spec(&pod).automount_service_account_token, Some(false));
        }
    }

    /// template_test.go:6492-6517 (`validateAndExtractQemuTimeoutArg`): 240 + rand.Intn(120).
    /// template.go:453-457 and 626-629: the temporary pod is the launcher pod with bash's
    /// `echo` as the compute command, no flags, and the ephemeral-provisioning annotation.
    #[test]
    fn the_temporary_pod_is_the_launcher_pod_with_another_command_and_a_mark() {
        let v = vmi(json!({}), json!({"domain": {"devices": {}}}));
        let launcher = render(&v, &test_settings());
        let mut temporary = launcher.clone();
        make_temporary(&mut temporary);
        let compute = |p: &Pod| {
            spec(p)
                .containers
                .iter()
                .find(|c| c.name == "compute")
                .cloned()
                .unwrap()
        };
        assert_eq!(
            compute(&temporary).command.unwrap(),
            ["/bin/bash", "-c", "echo", "bound PVCs"]
        );
        assert_eq!(compute(&temporary).args, None);
        assert_eq!(
            temporary.metadata.annotations.as_ref().unwrap()[EPHEMERAL_PROVISIONING_ANNOTATION],
            "true"
        );
        // Everything else is the launcher pod's: same owner, labels, volumes, resources.
        let mut back = temporary.clone();
        let c = back.spec.as_mut().unwrap().containers.iter_mut();
        c.filter(|c| c.name == "compute")
            .for_each(|c| c.command = compute(&launcher).command);
        back.metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(EPHEMERAL_PROVISIONING_ANNOTATION);
        assert_eq!(back, launcher);
    }

    #[test]
    fn qemu_timeout_is_jittered_within_range() {
        let v = vmi(json!({}), json!({"domain": {}}));
        let s = test_settings();
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200 {
            let mut rng = StdRng::seed_from_u64(seed);
            let pod =
                render_launch_manifest(&v, &s, &NamespaceContext::default(), &mut rng).unwrap();
            let t = flag_value(&pod, "--qemu-timeout").unwrap();
            let n: u32 = t.strip_suffix('s').unwrap().parse().unwrap();
            assert!((240..=359).contains(&n), "{t}");
            seen.insert(n);
        }
        assert!(seen.len() > 20, "the jitter varies: {seen:?}");
        // Exact with a fixed rng: one draw of random_range(0..120).
        let mut rng = StdRng::seed_from_u64(42);
        let expected = 240 + rand::Rng::random_range(&mut StdRng::seed_from_u64(42), 0..120u32);
        let pod = render_launch_manifest(&v, &s, &NamespaceContext::default(), &mut rng).unwrap();
        assert_eq!(
            flag_value(&pod, "--qemu-timeout").unwrap(),
            format!("{expected}s")
        );
        let pod =
            render_launch_manifest_with(&v, &s, &NamespaceContext::default(), 0, 300).unwrap();
        assert_eq!(flag_value(&pod, "--qemu-timeout").as_deref(), Some("300s"));
    }

    /// template_test.go:584-606: grace period flag G+15 and pod terminationGracePeriodSeconds
    /// G+30 (60/45 by default).
    #[test]
    fn grace_periods_template_test_584() {
        let s = test_settings();
        for (g, flag, pod_grace) in [
            (None, "45", 60),
            (Some(0), "15", 30),
            (Some(120), "135", 150),
        ] {
            let mut domain = json!({"domain": {}});
            if let Some(g) = g {
                domain["terminationGracePeriodSeconds"] = json!(g);
            }
            let pod = render(&vmi(json!({}), domain), &s);
            assert_eq!(
                flag_value(&pod, "--grace-period-seconds").as_deref(),
                Some(flag)
            );
            assert_eq!(spec(&pod).termination_grace_period_seconds, Some(pod_grace));
        }
    }

    /// template_test.go:626-641: a long (74-character) name → 54 characters + `-` + 8 hex of SHA-1.
    #[test]
    fn vmi_id_label_template_test_626() {
        let long = "a-very-very-long-virtual-machine-instance-name-used-for-testing-this-logic";
        // 74 bytes (the facts call it "73-char"; the rule only needs > 63).
        assert_eq!(long.len(), 74);
        assert_eq!(
            vmi_id_label(long),
            "a-very-very-long-virtual-machine-instance-name-used-fo-88ed080c"
        );
        assert_eq!(vmi_id_label("testvmi"), "testvmi");
        let pod = render(
            &vmi(
                json!({"name": long, "namespace": "test"}),
                json!({"domain": {}}),
            ),
            &test_settings(),
        );
        assert_eq!(
            pod.metadata.labels.unwrap()["vmi.kubevirt.io/id"],
            "a-very-very-long-virtual-machine-instance-name-used-fo-88ed080c"
        );
    }

    /// pkg/util/net/dns/sanitize.go:33-44 and template_test.go:5006-5071.
    #[test]
    fn hostname_and_vm_name_label() {
        let s = test_settings();
        let pod = render(
            &vmi(json!({"name": "my.dotted.vmi"}), json!({"domain": {}})),
            &s,
        );
        assert_eq!(spec(&pod).hostname.as_deref(), Some("my"));
        assert_eq!(pod.metadata.labels.unwrap()["vm.kubevirt.io/name"], "my");
        let pod = render(
            &vmi(
                json!({"labels": {"vm.kubevirt.io/name": "user"}}),
                json!({"domain": {}, "hostname": "custom", "subdomain": "sub"}),
            ),
            &s,
        );
        assert_eq!(spec(&pod).hostname.as_deref(), Some("custom"));
        assert_eq!(spec(&pod).subdomain.as_deref(), Some("sub"));
        assert_eq!(
            pod.metadata.labels.unwrap()["vm.kubevirt.io/name"],
            "custom"
        );
        let long = "x".repeat(70);
        let pod = render(&vmi(json!({"name": long}), json!({"domain": {}})), &s);
        assert_eq!(spec(&pod).hostname.as_ref().unwrap().len(), 63);
    }

    /// The CR's `selinuxLauncherType` in the rendered pod (template_test.go:643-746 re-derived):
    /// the pod security context keeps fsGroup/runAs* and gains only the type; with the
    /// deprecated Docker workaround listed, the hook sidecar gets level `s0` and the type,
    /// compute nothing, and the console-log init container (an init container since
    /// template.go:637-639) is left alone.
    #[test]
    fn selinux_launcher_type_in_the_pod() {
        let hooks = json!({"annotations": {"hooks.kubevirt.io/hookSidecars": "[{\"image\": \"some-image:v1\"}]"}});
        let v = vmi(hooks, json!({"domain": {}}));
        let mut s = ClusterSettings {
            serial_console_log: true,
            ..test_settings()
        };
        let pod = render(&v, &s);
        assert!(
            spec(&pod)
                .security_context
                .clone()
                .unwrap()
                .se_linux_options
                .is_none()
        );
        s.selinux_launcher_type = Some("spc_t".into());
        let pod = render(&v, &s);
        let psc = serde_json::to_value(spec(&pod).security_context.clone().unwrap()).unwrap();
        assert_eq!(
            psc,
            json!({"fsGroup": 107, "runAsGroup": 107, "runAsNonRoot": true, "runAsUser": 107,
                   "seLinuxOptions": {"type": "spc_t"}})
        );
        s.feature_gates = vec!["DockerSELinuxMCSWorkaround".into()];
        let pod = render(&v, &s);
        let options = |containers: &[Container]| -> Vec<(String, Option<Value>)> {
            containers
                .iter()
                .map(|c| {
                    let o = c
                        .security_context
                        .clone()
                        .and_then(|sc| sc.se_linux_options);
                    (c.name.clone(), o.map(|o| serde_json::to_value(o).unwrap()))
                })
                .collect()
        };
        assert_eq!(
            options(&spec(&pod).containers),
            vec![
                ("compute".to_string(), None),
                (
                    "hook-sidecar-0".to_string(),
                    Some(json!({"level": "s0", "type": "spc_t"}))
                ),
            ]
        );
        let init = spec(&pod).init_containers.clone().unwrap_or_default();
        assert!(options(&init).iter().all(|(_, o)| o.is_none()), "{init:?}");
    }

    /// Non-root: no status means virt-api's default runtimeUser 107; root needs runtimeUser 0
    /// (template.go:374-393, rendercontainer.go:207-221, 285-295; template_test.go:1736-1746).
    #[test]
    fn root_and_non_root_security() {
        let s = test_settings();
        let pod = render(&vmi(json!({}), json!({"domain": {}})), &s);
        assert!(command(&pod).contains(&"--run-as-nonroot".to_string()));
        let psc = spec(&pod).security_context.clone().unwrap();
        assert_eq!(
            (
                psc.fs_group,
                psc.run_as_user,
                psc.run_as_group,
                psc.run_as_non_root
            ),
            (Some(107), Some(107), Some(107), Some(true))
        );
        let sc = compute(&pod).security_context.clone().unwrap();
        assert_eq!(
            (
                sc.run_as_user,
                sc.run_as_group,
                sc.run_as_non_root,
                sc.allow_privilege_escalation
            ),
            (Some(107), Some(107), Some(true), Some(false))
        );
        let caps = sc.capabilities.unwrap();
        assert_eq!(caps.add.unwrap(), vec!["NET_BIND_SERVICE"]);
        assert_eq!(caps.drop.unwrap(), vec!["ALL"]);
        let env: Vec<String> = compute(&pod)
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(
            env,
            vec![
                "XDG_CACHE_HOME",
                "XDG_CONFIG_HOME",
                "XDG_RUNTIME_DIR",
                "POD_NAME"
            ]
        );

        let pod = render(&root(vmi(json!({}), json!({"domain": {}}))), &s);
        assert!(!command(&pod).contains(&"--run-as-nonroot".to_string()));
        let psc = spec(&pod).security_context.clone().unwrap();
        assert_eq!(
            (psc.fs_group, psc.run_as_user, psc.run_as_non_root),
            (Some(107), Some(0), None)
        );
        let sc = compute(&pod).security_context.clone().unwrap();
        assert_eq!(
            (sc.run_as_user, sc.run_as_non_root, sc.run_as_group),
            (Some(0), Some(false), None)
        );
        assert_eq!(
            sc.capabilities.unwrap().add.unwrap(),
            vec!["NET_BIND_SERVICE", "SYS_NICE"]
        );

        // The deprecated annotation makes even runtimeUser 0 non-root.
        let pod = render(
            &root(vmi(
                json!({"annotations": {"kubevirt.io/nonroot": ""}}),
                json!({"domain": {}}),
            )),
            &s,
        );
        assert!(command(&pod).contains(&"--run-as-nonroot".to_string()));
    }

    /// serialconsolelog.go:16-93 and template_test.go:5909-5936.
    #[test]
    fn serial_console_log_sidecar() {
        let on = ClusterSettings {
            serial_console_log: true,
            ..test_settings()
        };
        let pod = render(&vmi(json!({}), json!({"domain": {}})), &on);
        let init = spec(&pod).init_containers.clone().unwrap();
        let c = &init[0];
        assert_eq!(c.name, "guest-console-log");
        assert_eq!(c.restart_policy.as_deref(), Some("Always"));
        assert_eq!(c.command.clone().unwrap(), vec!["/usr/bin/virt-tail"]);
        assert_eq!(
            c.args.clone().unwrap(),
            vec![
                "--logfile",
                "/var/run/kubevirt-private/1234/virt-serial0-log"
            ]
        );
        let r = c.resources.clone().unwrap();
        assert_eq!(
            r.requests.unwrap(),
            BTreeMap::from([
                ("cpu".into(), Quantity("5m".into())),
                ("memory".into(), Quantity("35M".into()))
            ])
        );
        assert_eq!(
            r.limits.unwrap(),
            BTreeMap::from([
                ("cpu".into(), Quantity("15m".into())),
                ("memory".into(), Quantity("60M".into()))
            ])
        );
        assert_eq!(c.env.clone().unwrap()[0].value.as_deref(), Some("2"));
        // Dedicated CPUs → requests = limits.
        let pod = render(
            &vmi(
                json!({}),
                json!({"domain": {"cpu": {"cores": 1, "dedicatedCpuPlacement": true}}}),
            ),
            &on,
        );
        let r = spec(&pod).init_containers.clone().unwrap()[0]
            .resources
            .clone()
            .unwrap();
        assert_eq!(r.requests, r.limits);
        // Per-VMI switches.
        for devices in [
            json!({"logSerialConsole": false}),
            json!({"autoattachSerialConsole": false}),
        ] {
            let pod = render(
                &vmi(json!({}), json!({"domain": {"devices": devices}})),
                &on,
            );
            assert!(spec(&pod).init_containers.is_none(), "{devices}");
        }
        let pod = render(
            &vmi(
                json!({}),
                json!({"domain": {"devices": {"logSerialConsole": true}}}),
            ),
            &test_settings(),
        );
        assert_eq!(
            spec(&pod).init_containers.clone().unwrap()[0].name,
            "guest-console-log"
        );
    }

    fn names<T>(list: &[T], f: impl Fn(&T) -> &str) -> Vec<String> {
        list.iter().map(|x| f(x).to_string()).collect()
    }

    /// ImageVolume (Beta, on by default): container disks are image volumes mounted read-only at
    /// `/var/run/kubevirt-image-volume/disk_<i>`, pulled by `volume<name>` init containers
    /// running the container-disk binary from the launcher image volume (rendervolumes.go:235-257,
    /// container-disk.go:479-503); no container-disk containers (template.go:535-545).
    #[test]
    fn container_disks_as_image_volumes() {
        let v = vmi(
            json!({}),
            json!({"domain": {"devices": {"disableHotplug": true}}, "volumes": [
            {"name": "cloudinit", "cloudInitNoCloud": {"userData": "x"}},
            {"name": "containerdisk", "containerDisk": {"image": "my-image-1", "imagePullPolicy": "Always", "imagePullSecret": "s1"}}]}),
        );
        let pod = render(&v, &test_settings());
        assert!(command(&pod).contains(&"--image-volume".to_string()));
        assert_eq!(spec(&pod).containers.len(), 1);
        let vols = spec(&pod).volumes.clone().unwrap();
        assert_eq!(
            names(&vols, |v| &v.name),
            vec![
                "private",
                "public",
                "sockets",
                "virt-bin-share-dir",
                "libvirt-runtime",
                "ephemeral-disks",
                "containerdisk",
                "launcher-volume"
            ]
        );
        let img = vols[6].image.clone().unwrap();
        assert_eq!(
            (img.reference.as_deref(), img.pull_policy.as_deref()),
            (Some("my-image-1"), Some("Always"))
        );
        assert_eq!(
            vols[7].image.clone().unwrap().reference.as_deref(),
            Some("kubevirt/virt-launcher")
        );
        let mounts = compute(&pod).volume_mounts.clone().unwrap();
        let disk = mounts.iter().find(|m| m.name == "containerdisk").unwrap();
        assert_eq!(
            (disk.mount_path.as_str(), disk.read_only),
            ("/var/run/kubevirt-image-volume/disk_1", Some(true))
        );
        let init = spec(&pod).init_containers.clone().unwrap();
        assert_eq!(names(&init, |c| &c.name), vec!["volumecontainerdisk"]);
        assert_eq!(
            init[0].command.clone().unwrap(),
            vec!["/container-disk-binary/usr/bin/container-disk"]
        );
        assert_eq!(init[0].args.clone().unwrap(), vec!["--no-op"]);
        assert_eq!(spec(&pod).image_pull_secrets.clone().unwrap()[0].name, "s1");
    }

    /// ImageVolume disabled: `container-disks` emptyDir, `container-disk-binary` and
    /// `volume<name>-init` init containers, a `volume<name>` container serving the disk
    /// (template.go:530-545, 676-711; template_test.go:1061-1115).
    #[test]
    fn container_disks_without_image_volume() {
        let s = ClusterSettings {
            disabled_feature_gates: vec!["ImageVolume".into()],
            ..test_settings()
        };
        let v = root(vmi(
            json!({}),
            json!({"domain": {}, "volumes": [
            {"name": "containerdisk", "containerDisk": {"image": "my-image-1"}}]}),
        ));
        let pod = render(&v, &s);
        assert!(!command(&pod).contains(&"--image-volume".to_string()));
        assert_eq!(
            names(&spec(&pod).containers, |c| &c.name),
            vec!["compute", "volumecontainerdisk"]
        );
        let disk = &spec(&pod).containers[1];
        assert_eq!(
            disk.args.clone().unwrap(),
            vec![
                "--copy-path",
                "/var/run/kubevirt-ephemeral-disks/container-disk-data/1234/disk_0"
            ]
        );
        let init = spec(&pod).init_containers.clone().unwrap();
        assert_eq!(
            names(&init, |c| &c.name),
            vec!["container-disk-binary", "volumecontainerdisk-init"]
        );
        let r = init[0].resources.clone().unwrap();
        assert_eq!(r.requests.unwrap()["memory"].0, "1M");
        assert_eq!(r.limits.unwrap()["cpu"].0, "100m");
        let vols = names(spec(&pod).volumes.as_ref().unwrap(), |v| &v.name);
        assert!(vols.contains(&"container-disks".to_string()));
        let mounts = compute(&pod).volume_mounts.clone().unwrap();
        let cd = mounts.iter().find(|m| m.name == "container-disks").unwrap();
        assert_eq!(cd.mount_propagation.as_deref(), Some("HostToContainer"));
    }

    /// PR 18687 (main): `LibvirtHooksServerAndClient` is GA and `compute` has no
    /// `--libvirt-hook-server-and-client`; v1.9.0 passes it while the gate is on (its default)
    /// and not once the CR disables it (template.go:480-482).
    #[test]
    fn main_drops_the_libvirt_hooks_flag() {
        let v = root(vmi(json!({}), json!({"domain": {}})));
        let with = |version, disabled: &[&str]| ClusterSettings {
            kubevirt_version: version,
            disabled_feature_gates: disabled.iter().map(|g| g.to_string()).collect(),
            ..test_settings()
        };
        let flags = |p: &Pod| {
            let c = compute(p);
            let mut all = c.command.clone().unwrap_or_default();
            all.extend(c.args.clone().unwrap_or_default());
            all
        };
        use crate::kubevirt_version::KubeVirtVersion::{Main, V1_9};
        let has = |s: &ClusterSettings| {
            flags(&render(&v, s))
                .iter()
                .any(|a| a == LIBVIRT_HOOKS_FLAG)
        };
        assert!(has(&with(V1_9, &[])));
        assert!(!has(&with(V1_9, &["LibvirtHooksServerAndClient"])));
        assert!(!has(&with(Main, &[])));
        // Everything else stays: main's flags are v1.9.0's without it.
        let mut old = flags(&render(&v, &with(V1_9, &[])));
        old.retain(|a| a != LIBVIRT_HOOKS_FLAG);
        let new = flags(&render(&v, &with(Main, &[])));
        let names = |f: &[String]| -> Vec<String> {
            f.iter().filter(|a| a.starts_with("--")).cloned().collect()
        };
        assert_eq!(names(&old), names(&new));
    }

    /// PR 18237 (main): the executables stay in `command`, their flags move to `args`, in the
    /// same order; every earlier release renders them all in `command`.
    #[test]
    fn main_passes_the_launcher_flags_as_args() {
        let v = root(vmi(
            json!({}),
            json!({"domain": {}, "volumes": [
            {"name": "containerdisk", "containerDisk": {"image": "my-image-1"}}]}),
        ));
        let with = |version| ClusterSettings {
            kubevirt_version: version,
            disabled_feature_gates: vec!["ImageVolume".into()],
            ..test_settings()
        };
        let (old, new) = (
            render(&v, &with(crate::kubevirt_version::KubeVirtVersion::V1_9)),
            render(&v, &with(crate::kubevirt_version::KubeVirtVersion::Main)),
        );
        let cp = |p: &Pod| spec(p).init_containers.clone().unwrap()[0].clone();
        assert_eq!(cp(&old).name, "container-disk-binary");
        for (before, after) in [
            (compute(&old).clone(), compute(&new).clone()),
            (cp(&old), cp(&new)),
        ] {
            let mut whole = before.command.clone().unwrap();
            assert!(whole.len() > 2 && before.args.is_none(), "{whole:?}");
            // PR 18687: main drops the hooks flag (below).
            whole.retain(|a| a != LIBVIRT_HOOKS_FLAG);
            assert_eq!(after.command.clone().unwrap(), whole[..1]);
            assert_eq!(after.args.clone().unwrap(), whole[1..]);
        }
        assert_eq!(
            compute(&new).command.clone().unwrap(),
            ["/usr/bin/virt-launcher-monitor"]
        );
    }

    /// template_test.go:2584-2660: with hugepages (ImageVolume off, hotplug disabled) the pod has
    /// 9 volumes and the compute container 8 mounts.
    #[test]
    fn hugepages_volumes_template_test_2584() {
        let s = ClusterSettings {
            disabled_feature_gates: vec!["ImageVolume".into()],
            ..test_settings()
        };
        let v = vmi(
            json!({}),
            json!({"domain": {"devices": {"disableHotplug": true},
            "memory": {"hugepages": {"pageSize": "2Mi"}},
            "resources": {"requests": {"memory": "64M"}, "limits": {"memory": "64M"}}}}),
        );
        let pod = render(&v, &s);
        let vols = spec(&pod).volumes.clone().unwrap();
        assert_eq!(vols.len(), 9);
        let hp = vols.iter().find(|v| v.name == "hugepages").unwrap();
        assert_eq!(
            hp.empty_dir.clone().unwrap().medium.as_deref(),
            Some("HugePages")
        );
        let mounts = compute(&pod).volume_mounts.clone().unwrap();
        assert_eq!(mounts.len(), 8);
        assert!(mounts.iter().any(|m| m.name == "hugetblfs-dir" && m.mount_path == "/dev/hugepages/libvirt/qemu"));
    }

    #[test]
    fn hotplug_disks_volume_unless_disabled() {
        let pod = render(&vmi(json!({}), json!({"domain": {}})), &test_settings());
        let mounts = compute(&pod).volume_mounts.clone().unwrap();
        let hp = mounts.iter().find(|m| m.name == "hotplug-disks").unwrap();
        assert_eq!(hp.mount_path, "/var/run/kubevirt/hotplug-disks");
        assert_eq!(hp.mount_propagation.as_deref(), Some("HostToContainer"));
    }

    /// template.go:441, 470-472, 1025, 1039-1041 (template_test.go:597-600 with other values):
    /// the CR's disk-verification limit, hypervisor and OVMF path reach `--disk-memory-limit`,
    /// `--hypervisor` and `--ovmf-path`; `hyperv-direct` asks for the `mshv` device, not `kvm`.
    #[test]
    fn disk_memory_limit_hypervisor_and_ovmf_path_come_from_the_cr() {
        let cr = |extra: serde_json::Value| {
            let mut cfg = json!({"developerConfiguration": {
                "diskVerification": {"memoryLimit": "1Gi"}, "featureGates": ["ConfigurableHypervisor"]}});
            if let Some(h) = extra.get("hypervisors") {
                cfg["hypervisors"] = h.clone();
            }
            ClusterSettings {
                launcher_image: "kubevirt/virt-launcher".into(),
                ..ClusterSettings::from_kubevirt_cr(&json!({"kind": "KubeVirt",
                    "spec": {"configuration": cfg}}))
                .unwrap()
            }
        };
        let flag = |pod: &Pod, name: &str| {
            let c = command(pod);
            let at = c.iter().position(|a| a == name).unwrap();
            c[at + 1].clone()
        };
        let v = vmi(json!({}), json!({"domain": {}}));
        let pod = render(&v, &cr(json!({})));
        assert_eq!(flag(&pod, "--disk-memory-limit"), "1073741824");
        assert_eq!(flag(&pod, "--hypervisor"), "kvm");
        let pod = render(&v, &cr(json!({"hypervisors": [{"name": "hyperv-direct"}]})));
        assert_eq!(flag(&pod, "--hypervisor"), "hyperv-direct");
        let limits = compute(&pod).resources.clone().unwrap().limits.unwrap();
        assert_eq!(limits["devices.kubevirt.io/mshv"].0, "1");
        assert!(!limits.contains_key("devices.kubevirt.io/kvm"));
        let defaults = render(&v, &test_settings());
        assert_eq!(flag(&defaults, "--disk-memory-limit"), "2097152000");
        // template.go:441, 470: the CR's OVMF path for the VMI's architecture.
        let ovmf = ClusterSettings::from_kubevirt_cr(&json!({"kind": "KubeVirt", "spec": {
            "configuration": {"architectureConfiguration": {"arm64": {"ovmfPath": "/opt/aavmf"}}}}}))
        .unwrap();
        let arm = vmi(json!({}), json!({"architecture": "arm64", "domain": {}}));
        assert_eq!(flag(&render(&arm, &ovmf), "--ovmf-path"), "/opt/aavmf");
        assert_eq!(
            flag(&render(&v, &ovmf), "--ovmf-path"),
            "/usr/share/edk2/ovmf"
        );
    }

    /// template.go:1031-1033: a device the CR's `permittedHostDevices` does not list gets no
    /// pod but an input error carrying KubeVirt's text alone; a listed one renders its request.
    #[test]
    fn unpermitted_host_device_gets_no_pod() {
        let v = vmi(
            json!({}),
            json!({"domain": {"devices": {"gpus": [{"name": "g", "deviceName": "example.com/gpu"}]}}}),
        );
        let s = ClusterSettings {
            permitted_host_devices: Some(vec!["example.com/fpga".into()]),
            ..test_settings()
        };
        let mut rng = StdRng::seed_from_u64(1);
        let e = render_launch_manifest(&v, &s, &NamespaceContext::default(), &mut rng).unwrap_err();
        assert!(matches!(e, RenderError::Input { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "GPU example.com/gpu is not permitted in permittedHostDevices configuration"
        );
        let s = ClusterSettings {
            permitted_host_devices: Some(vec!["example.com/gpu".into()]),
            ..s
        };
        let limits = compute(&render(&v, &s))
            .resources
            .clone()
            .unwrap()
            .limits
            .unwrap();
        assert_eq!(limits["example.com/gpu"].0, "1");
    }

    /// nodeselectorrenderer.go:33-99, template_test.go:1154-1360, 1748.
    #[test]
    fn node_selectors() {
        let s = ClusterSettings {
            node_selectors: BTreeMap::from([
                ("cluster".into(), "wide".into()),
                ("both".into(), "cluster".into()),
            ]),
            ..test_settings()
        };
        let v = vmi(
            json!({}),
            json!({"domain": {"cpu": {"cores": 2, "dedicatedCpuPlacement": true, "model": "Conroe",
            "features": [{"name": "lahf_lm", "policy": "require"}, {"name": "vmx", "policy": "forbid"}, {"name": "pdpe1gb"}]},
            "launchSecurity": {"sev": {}}},
            "nodeSelector": {"both": "vmi", "kubernetes.io/hostname": "master"}}),
        );
        let pod = render(&v, &s);
        let sel = spec(&pod).node_selector.clone().unwrap();
        let expect = |k: &str, v: &str| assert_eq!(sel.get(k).map(String::as_str), Some(v), "{k}");
        expect("kubevirt.io/schedulable", "true");
        expect("cluster", "wide");
        expect("both", "vmi");
        expect("kubernetes.io/hostname", "master");
        expect("kubevirt.io/cpumanager", "true");
        expect("cpu-model.node.kubevirt.io/Conroe", "true");
        expect("cpu-feature.node.kubevirt.io/lahf_lm", "true");
        expect("cpu-feature.node.kubevirt.io/pdpe1gb", "true");
        expect("kubevirt.io/sev", "true");
        assert!(!sel.contains_key("cpu-feature.node.kubevirt.io/vmx"));
        assert!(
            !sel.contains_key("kubernetes.io/arch"),
            "no spec.architecture"
        );
        // The forbidden feature becomes a DoesNotExist affinity term; a named model does not
        // add the obsolete-host-model term.
        let terms = required_terms(&pod);
        let keys: Vec<String> = terms[0]
            .match_expressions
            .clone()
            .unwrap()
            .into_iter()
            .map(|r| r.key)
            .collect();
        assert_eq!(keys, vec!["cpu-feature.node.kubevirt.io/vmx"]);
        // host-model and host-passthrough get no model label.
        let pod = render(
            &vmi(
                json!({}),
                json!({"domain": {"cpu": {"model": "host-passthrough"}}}),
            ),
            &s,
        );
        assert!(
            !spec(&pod)
                .node_selector
                .clone()
                .unwrap()
                .keys()
                .any(|k| k.starts_with(crate::launcher::node_selector::CPU_MODEL_LABEL))
        );
    }

    /// `supportContainerResources` (renderresources.go:535-625, serialconsolelog.go:68-92,
    /// container-disk.go:445-477): a hook sidecar gets only what the CR sets for `sidecar`; the
    /// console log and the image-volume init container keep the defaults the CR leaves out;
    /// with Guaranteed QoS the sidecar's limits default to 200m / 64M and requests follow.
    #[test]
    fn support_container_resources_size_the_support_containers() {
        let entry = |kind: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]| {
            let map = |l: &[(&str, &str)]| {
                l.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            };
            crate::config::SupportContainerResources {
                container_type: kind.into(),
                requests: map(requests),
                limits: map(limits),
            }
        };
        let settings = ClusterSettings {
            serial_console_log: true,
            support_container_resources: vec![
                entry("sidecar", &[("memory", "30Mi")], &[("cpu", "300m")]),
                entry("guest-console-log", &[("cpu", "20m")], &[("memory", "90M")]),
                entry("container-disk", &[], &[("memory", "64Mi")]),
            ],
            ..test_settings()
        };
        let hook = json!({"annotations": {"hooks.kubevirt.io/hookSidecars":
            r#"[{"image": "hook:1", "args": ["--version", "v1alpha2"]}]"#}});
        let spec_of = |resources: serde_json::Value| {
            json!({"domain": {"resources": resources},
                "volumes": [{"name": "root", "containerDisk": {"image": "disk:1"}}]})
        };
        let pod = render(&vmi(hook.clone(), spec_of(json!({}))), &settings);
        let res = |containers: &[Container], name: &str| {
            let c = containers.iter().find(|c| c.name == name).unwrap();
            let r = c.resources.clone().unwrap_or_default();
            let text = |m: Option<BTreeMap<String, Quantity>>| -> Vec<(String, String)> {
                m.unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect()
            };
            (text(r.requests), text(r.limits))
        };
        let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
        let plain = spec(&pod);
        assert_eq!(
            res(&plain.containers, "hook-sidecar-0"),
            (vec![pair("memory", "30Mi")], vec![pair("cpu", "300m")])
        );
        let init = plain.init_containers.clone().unwrap();
        assert_eq!(
            res(&init, "guest-console-log"),
            (
                vec![pair("cpu", "20m"), pair("memory", "35M")],
                vec![pair("cpu", "15m"), pair("memory", "90M")]
            )
        );
        assert_eq!(
            res(&init, "volumeroot").1,
            vec![pair("cpu", "10m"), pair("memory", "64Mi")]
        );
        let guaranteed = spec_of(json!({"requests": {"cpu": "1", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "1Gi"}}));
        let pod = render(&vmi(hook, guaranteed), &settings);
        let both = vec![pair("cpu", "300m"), pair("memory", "64M")];
        assert_eq!(
            res(&spec(&pod).containers, "hook-sidecar-0"),
            (both.clone(), both)
        );
    }

    /// The KubeVirt CR's launcher settings (template.go:525-547, 700-754, 937, 963;
    /// serialconsolelog.go:26; rendervolumes.go:780): the pull policy of the launcher image's
    /// containers and image volume, the cluster verbosity in the env (a VMI label still wins),
    /// the runtime class and the pod's seccomp profile; KubeVirt's defaults write none of them.
    #[test]
    fn launcher_settings_from_the_cr() {
        let cr = json!({"kind": "KubeVirt", "spec": {"configuration": {
            "imagePullPolicy": "Always", "defaultRuntimeClass": "kata",
            "developerConfiguration": {"logVerbosity": {"virtLauncher": 6}},
            "seccompConfiguration": {"virtualMachineInstanceProfile": {
                "customProfile": {"localhostProfile": "kubevirt/kubevirt.json"}}}}}});
        let settings = ClusterSettings {
            serial_console_log: true,
            launcher_image: "kubevirt/virt-launcher".into(),
            ..ClusterSettings::from_kubevirt_cr(&cr).unwrap()
        };
        let v = vmi(json!({}), json!({"domain": {}}));
        let pod = render(&v, &settings);
        let s = spec(&pod);
        assert_eq!(s.containers[0].image_pull_policy.as_deref(), Some("Always"));
        let init = s.init_containers.clone().unwrap();
        assert_eq!(init[0].image_pull_policy.as_deref(), Some("Always"));
        assert_eq!(s.runtime_class_name.as_deref(), Some("kata"));
        let seccomp = s.security_context.clone().unwrap().seccomp_profile.unwrap();
        assert_eq!(
            (seccomp.type_.as_str(), seccomp.localhost_profile.as_deref()),
            ("Localhost", Some("kubevirt/kubevirt.json"))
        );
        let env = |p: &Pod| -> Vec<(String, String)> {
            spec(p).containers[0]
                .env
                .iter()
                .flatten()
                .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
                .collect()
        };
        let e = env(&pod);
        assert!(e.contains(&(ENV_VIRT_LAUNCHER_LOG_VERBOSITY.into(), "6".into())));
        assert!(e.contains(&("LIBVIRT_DEBUG_LOGS".into(), "1".into())));
        // A VMI label overrides the cluster's verbosity (template.go:527-539).
        let labelled = vmi(
            json!({"labels": {"logVerbosity": "3"}}),
            json!({"domain": {}}),
        );
        let e = env(&render(&labelled, &settings));
        assert!(e.contains(&(ENV_VIRT_LAUNCHER_LOG_VERBOSITY.into(), "3".into())));
        assert!(!e.iter().any(|(k, _)| k == "LIBVIRT_DEBUG_LOGS"));
        // The defaults: no env, no runtime class, no seccomp profile, IfNotPresent.
        let plain = render(&v, &test_settings());
        assert!(
            !env(&plain)
                .iter()
                .any(|(k, _)| k == ENV_VIRT_LAUNCHER_LOG_VERBOSITY)
        );
        let s = spec(&plain);
        assert_eq!(
            s.containers[0].image_pull_policy.as_deref(),
            Some("IfNotPresent")
        );
        assert!(s.runtime_class_name.is_none());
        assert!(
            s.security_context
                .clone()
                .unwrap()
                .seccomp_profile
                .is_none()
        );
    }

    /// template_test.go:1926-1984: a reserving LUN's claim UID becomes a pod label and a
    /// required hostname anti-affinity term, appended to the VMI's own pod anti-affinity.
    #[test]
    fn persistent_reservation_template_test_1926() {
        let own = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"topologyKey": "zone"}}]}});
        let v = vmi(
            json!({}),
            json!({"domain": {"devices": {"disks": [
                    {"name": "lun0", "lun": {"bus": "scsi", "reservation": true}}]}},
                "affinity": own,
                "volumes": [{"name": "lun0", "persistentVolumeClaim": {"claimName": "shared-pvc"}}]}),
        );
        let ns = NamespaceContext {
            pvcs: Some(BTreeMap::from([(
                "shared-pvc".into(),
                PvcInfo {
                    uid: Some("pvc-uid-5678".into()),
                    ..PvcInfo::default()
                },
            )])),
            ..Default::default()
        };
        let pod = render_launch_manifest_with(&v, &test_settings(), &ns, 0, 240).unwrap();
        let key = "pr.kubevirt.io/pvc-uid-5678";
        assert_eq!(pod.metadata.labels.as_ref().unwrap()[key], "");
        let anti = spec(&pod)
            .affinity
            .clone()
            .unwrap()
            .pod_anti_affinity
            .unwrap();
        assert_eq!(
            anti.preferred_during_scheduling_ignored_during_execution
                .map(|t| t.len()),
            Some(1)
        );
        let required = anti
            .required_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(required.len(), 1);
        assert_eq!(required[0].topology_key, "kubernetes.io/hostname");
        let expr = &required[0]
            .label_selector
            .as_ref()
            .unwrap()
            .match_expressions
            .as_ref()
            .unwrap()[0];
        assert_eq!((expr.key.as_str(), expr.operator.as_str()), (key, "Exists"));
        // No reserving disk: no term (template_test.go:1986-2004).
        let plain = render(&vmi(json!({}), json!({"domain": {}})), &test_settings());
        assert!(
            spec(&plain)
                .affinity
                .as_ref()
                .and_then(|a| a.pod_anti_affinity.as_ref())
                .is_none()
        );
    }

    /// template_test.go:2156-2188: nil, "" and "host-model" CPU models get the
    /// `node-labeller.kubevirt.io/obsolete-host-model DoesNotExist` term, ANDed into user terms.
    #[test]
    fn host_model_affinity_template_test_2156() {
        let s = test_settings();
        for cpu in [None, Some(""), Some("host-model")] {
            let mut domain = json!({"devices": {"disableHotplug": true}});
            if let Some(m) = cpu {
                domain["cpu"] = json!({"model": m});
            }
            let pod = render(&vmi(json!({}), json!({"domain": domain})), &s);
            let terms = required_terms(&pod);
            let req = &terms[0].match_expressions.clone().unwrap()[0];
            assert_eq!(
                (req.key.as_str(), req.operator.as_str()),
                (NODE_HOST_MODEL_IS_OBSOLETE_LABEL, "DoesNotExist")
            );
        }
        let user = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]},
            {"matchExpressions": [{"key": "b", "operator": "Exists"}]}]}},
            "podAffinity": {}});
        let pod = render(&vmi(json!({}), json!({"domain": {}, "affinity": user})), &s);
        let a = spec(&pod).affinity.clone().unwrap();
        assert!(a.pod_affinity.is_some());
        let terms = a
            .node_affinity
            .unwrap()
            .required_during_scheduling_ignored_during_execution
            .unwrap()
            .node_selector_terms;
        for t in terms {
            let last = t.match_expressions.unwrap().pop().unwrap();
            assert_eq!(last.key, NODE_HOST_MODEL_IS_OBSOLETE_LABEL);
        }
        // A named model with a user affinity keeps it unchanged (template_test.go:1882-1903).
        let na = json!({"nodeAffinity": {}});
        let pod = render(
            &vmi(
                json!({}),
                json!({"domain": {"cpu": {"model": "Conroe"}}, "affinity": na}),
            ),
            &s,
        );
        assert_eq!(
            spec(&pod).affinity.clone().unwrap().node_affinity,
            Some(NodeAffinity::default())
        );
    }

    /// template_test.go:480-528: kubectl and api-version annotations are not copied.
    #[test]
    fn annotation_filtering_template_test_480() {
        let v = vmi(
            json!({"annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": "open",
            "kubevirt.io/latest-observed-api-version": "source",
            "kubevirt.io/storage-observed-api-version": ".com",
            "keep": "me"}}),
            json!({"domain": {}}),
        );
        let ann = render(&v, &test_settings()).metadata.annotations.unwrap();
        assert!(!ann.contains_key("kubectl.kubernetes.io/last-applied-configuration"));
        assert!(!ann.contains_key("kubevirt.io/latest-observed-api-version"));
        assert!(!ann.contains_key("kubevirt.io/storage-observed-api-version"));
        assert_eq!(ann["keep"], "me");
        assert_eq!(ann["kubectl.kubernetes.io/default-container"], "compute");
    }

    /// The overhead annotation is the decimal byte count the resources were computed with.
    #[test]
    fn memory_overhead_annotation() {
        let v = vmi(
            json!({}),
            json!({"domain": {"cpu": {"cores": 1}, "resources": {"requests": {"memory": "1Gi"}}}}),
        );
        let pod = render(&v, &test_settings());
        assert_eq!(
            pod.metadata.annotations.clone().unwrap()["kubevirt.io/memory-overhead-bytes"],
            "283115520"
        );
        let req = compute(&pod).resources.clone().unwrap().requests.unwrap();
        assert_eq!(req["memory"].0, "1294Mi");
        let off = ClusterSettings {
            disabled_feature_gates: vec!["VmiMemoryOverheadReport".into()],
            ..test_settings()
        };
        assert!(
            !render(&v, &off)
                .metadata
                .annotations
                .unwrap()
                .contains_key("kubevirt.io/memory-overhead-bytes")
        );
    }

    /// template_test.go:3567-3647: probes copied with initialDelay + 10; exec wrapped in
    /// virt-probe (rendercontainer.go:242-283), guest-agent ping likewise.
    #[test]
    fn probes_template_test_3567() {
        let v = vmi(
            json!({}),
            json!({"domain": {"devices": {"disableHotplug": true}},
            "readinessProbe": {"initialDelaySeconds": 2, "timeoutSeconds": 3, "periodSeconds": 4, "successThreshold": 5,
                "failureThreshold": 6, "tcpSocket": {"port": 80, "host": "123"}, "httpGet": {"path": "test", "port": 80}},
            "livenessProbe": {"initialDelaySeconds": 12, "exec": {"command": ["cat", "/tmp/healthy"]}}}),
        );
        let pod = render(&v, &test_settings());
        let r = compute(&pod).readiness_probe.clone().unwrap();
        assert_eq!(
            (
                r.initial_delay_seconds,
                r.timeout_seconds,
                r.period_seconds,
                r.success_threshold,
                r.failure_threshold
            ),
            (Some(12), Some(3), Some(4), Some(5), Some(6))
        );
        assert_eq!(r.tcp_socket.unwrap().host.as_deref(), Some("123"));
        assert_eq!(r.http_get.unwrap().path.as_deref(), Some("test"));
        let l = compute(&pod).liveness_probe.clone().unwrap();
        assert_eq!(
            l.exec.unwrap().command.unwrap(),
            vec![
                "virt-probe",
                "--domainName",
                "testns_testvmi",
                "--timeoutSeconds",
                "1",
                "--command",
                "cat",
                "--",
                "/tmp/healthy"
            ]
        );
        assert_eq!(
            (
                l.initial_delay_seconds,
                l.timeout_seconds,
                l.period_seconds,
                l.failure_threshold
            ),
            (Some(22), Some(2), Some(10), Some(3))
        );
        let v = vmi(
            json!({}),
            json!({"domain": {}, "readinessProbe": {"guestAgentPing": {}, "timeoutSeconds": 5}}),
        );
        let r = compute(&render(&v, &test_settings()))
            .readiness_probe
            .clone()
            .unwrap();
        assert_eq!(
            r.exec.unwrap().command.unwrap(),
            vec![
                "virt-probe",
                "--domainName",
                "testns_testvmi",
                "--timeoutSeconds",
                "5",
                "--guestAgentPing"
            ]
        );
        assert_eq!(r.timeout_seconds, Some(6));
        let v = vmi(json!({}), json!({"domain": {}}));
        assert!(
            compute(&render(&v, &test_settings()))
                .readiness_probe
                .is_none()
        );
    }

    /// template_test.go:3118-3170: interface ports become container ports (TCP by default).
    #[test]
    fn ports_template_test_3118() {
        let v = vmi(
            json!({}),
            json!({"domain": {"devices": {"interfaces": [{"name": "testnet", "masquerade": {},
            "ports": [{"name": "http", "port": 80}, {"protocol": "UDP", "port": 80}, {"port": 90}, {"name": "other-http", "port": 80}]}]}}}),
        );
        let ports = compute(&render(&v, &test_settings()))
            .ports
            .clone()
            .unwrap();
        let got: Vec<(Option<String>, i32, Option<String>)> = ports
            .into_iter()
            .map(|p| (p.name, p.container_port, p.protocol))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("http".into()), 80, Some("TCP".into())),
                (None, 80, Some("UDP".into())),
                (None, 90, Some("TCP".into())),
                (Some("other-http".into()), 80, Some("TCP".into())),
            ]
        );
        let v = vmi(
            json!({}),
            json!({"domain": {"devices": {"interfaces": [{"name": "testnet", "masquerade": {}}]}}}),
        );
        assert!(compute(&render(&v, &test_settings())).ports.is_none());
    }

    /// rendervolumes.go:144-193, 501-600: PVC / DataVolume / config volumes.
    #[test]
    fn claim_and_config_volumes() {
        let v = vmi(
            json!({}),
            json!({"domain": {"devices": {"disks": [{"name": "cm"}, {"name": "sec"}]}},
            "volumes": [
                {"name": "pvc", "persistentVolumeClaim": {"claimName": "claim1", "readOnly": true}},
                {"name": "dv", "dataVolume": {"name": "dv1"}},
                {"name": "hot", "dataVolume": {"name": "dv2", "hotpluggable": true}},
                {"name": "cm", "configMap": {"name": "my-cm"}},
                {"name": "sec", "secret": {"secretName": "my-secret"}},
                {"name": "sa", "serviceAccount": {"serviceAccountName": "robot"}},
                {"name": "ci", "cloudInitNoCloud": {"userDataSecretRef": {"name": "ud"}}}]}),
        );
        let ns = NamespaceContext {
            pvcs: Some(BTreeMap::from([
                (
                    "claim1".into(),
                    PvcInfo {
                        block: false,
                        shared: true,
                        uid: None,
                    },
                ),
                (
                    "dv1".into(),
                    PvcInfo {
                        block: true,
                        shared: false,
                        uid: None,
                    },
                ),
            ])),
            ..Default::default()
        };
        let pod = render_launch_manifest_with(&v, &test_settings(), &ns, 0, 240).unwrap();
        let vols = spec(&pod).volumes.clone().unwrap();
        let names = names(&vols, |v| &v.name);
        assert_eq!(
            &names[6..],
            ["cm", "sec", "pvc", "dv", "ci-udata", "hotplug-disks"]
        );
        let pvc = vols
            .iter()
            .find(|v| v.name == "pvc")
            .unwrap()
            .persistent_volume_claim
            .clone()
            .unwrap();
        assert_eq!(
            (pvc.claim_name.as_str(), pvc.read_only),
            ("claim1", Some(true))
        );
        let mounts = compute(&pod).volume_mounts.clone().unwrap();
        let paths: Vec<(String, String)> = mounts
            .iter()
            .map(|m| (m.name.clone(), m.mount_path.clone()))
            .collect();
        assert!(paths.contains(&(
            "pvc".into(),
            "/var/run/kubevirt-private/vmi-disks/pvc".into()
        )));
        assert!(paths.contains(&(
            "cm".into(),
            "/var/run/kubevirt-private/config-map/cm".into()
        )));
        assert!(paths.contains(&("sec".into(), "/var/run/kubevirt-private/secret/sec".into())));
        assert!(paths.contains(&(
            "ci-udata".into(),
            "/var/run/kubevirt-private/secret/ci/userdata".into()
        )));
        let devices = compute(&pod).volume_devices.clone().unwrap();
        assert_eq!(
            (devices[0].name.as_str(), devices[0].device_path.as_str()),
            ("dv", "/dev/dv")
        );
        let env = compute(&pod).env.clone().unwrap();
        let shared = env
            .iter()
            .find(|e| e.name == "SHARED_FILESYSTEM_PATHS")
            .unwrap();
        assert_eq!(
            shared.value.as_deref(),
            Some("/var/run/kubevirt-private/vmi-disks/pvc")
        );
        assert_eq!(spec(&pod).service_account_name.as_deref(), Some("robot"));
        assert_eq!(spec(&pod).automount_service_account_token, Some(true));

        // A claim missing from a known PVC list is KubeVirt's PvcNotFoundError.
        let ns = NamespaceContext {
            pvcs: Some(BTreeMap::new()),
            ..Default::default()
        };
        let e = render_launch_manifest_with(&v, &test_settings(), &ns, 0, 240).unwrap_err();
        assert!(
            matches!(&e, RenderError::PvcNotFound { claim, .. } if claim == "claim1"),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "VirtualMachineInstance testns/testvmi: didn't find PVC claim1"
        );
    }

    #[test]
    fn passthrough_fields() {
        let v = vmi(
            json!({"annotations": {"sidecar.istio.io/inject": "true"}}),
            json!({"domain": {},
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
            "dnsPolicy": "None", "dnsConfig": {"nameservers": ["1.1.1.1"]}, "schedulerName": "sched",
            "priorityClassName": "high", "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}],
            "resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}]}),
        );
        let pod = render(&v, &test_settings());
        let s = spec(&pod);
        assert_eq!(s.tolerations.clone().unwrap()[0].key.as_deref(), Some("k"));
        assert_eq!(s.dns_policy.as_deref(), Some("None"));
        assert_eq!(
            s.dns_config.clone().unwrap().nameservers.unwrap(),
            vec!["1.1.1.1"]
        );
        assert_eq!(s.scheduler_name.as_deref(), Some("sched"));
        assert_eq!(s.priority_class_name.as_deref(), Some("high"));
        assert_eq!(
            s.topology_spread_constraints.clone().unwrap()[0].topology_key,
            "zone"
        );
        assert_eq!(
            s.resource_claims.clone().unwrap()[0]
                .resource_claim_template_name
                .as_deref(),
            Some("t")
        );
        assert_eq!(
            pod.metadata.labels.clone().unwrap()["sidecar.istio.io/inject"],
            "true"
        );
        assert_eq!(s.automount_service_account_token, Some(true));
    }

    #[test]
    fn command_flags_from_settings_and_annotations() {
        let s = ClusterSettings {
            use_emulation: true,
            feature_gates: vec![
                "VMStatsCollector".into(),
                "CrossArchitectureVirtualization".into(),
            ],
            ..test_settings()
        };
        let v = vmi(
            json!({"annotations": {"kubevirt.io/libvirt-log-filters": "3:remote",
            "kubevirt.io/keep-launcher-alive-after-failure": "true"}}),
            json!({"domain": {}, "architecture": "arm64"}),
        );
        let pod = render(&v, &s);
        let c = command(&pod);
        let tail: Vec<&str> = c[c.iter().position(|a| a == "--run-as-nonroot").unwrap()..]
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(
            tail,
            vec![
                "--run-as-nonroot",
                "--image-volume",
                "--libvirt-hook-server-and-client",
                "--upgrade-ordinal-ifaces",
                "--vm-stats-collector",
                "--libvirt-log-filters",
                "3:remote",
                "--allow-emulation",
                "--allow-cross-arch-emulation",
                "--keep-after-failure"
            ]
        );
        let sel = spec(&pod).node_selector.clone().unwrap();
        assert!(!sel.contains_key("kubernetes.io/arch"));
        assert_eq!(sel["kubevirt.io/vm-arch-arm64"], "true");
        let pref = spec(&pod)
            .affinity
            .clone()
            .unwrap()
            .node_affinity
            .unwrap()
            .preferred_during_scheduling_ignored_during_execution
            .unwrap();
        assert_eq!(pref[0].weight, 100);
        assert_eq!(
            flag_value(&pod, "--ovmf-path").as_deref(),
            Some("/usr/share/AAVMF")
        );
    }

    #[test]
    fn log_verbosity_label() {
        let v = vmi(
            json!({"labels": {"logVerbosity": "6"}}),
            json!({"domain": {}}),
        );
        let on = ClusterSettings {
            serial_console_log: true,
            ..test_settings()
        };
        let pod = render(&v, &on);
        let env: Vec<(String, Option<String>)> = compute(&pod)
            .env
            .clone()
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.value))
            .collect();
        assert!(env.contains(&("VIRT_LAUNCHER_LOG_VERBOSITY".into(), Some("6".into()))));
        assert!(env.contains(&("LIBVIRT_DEBUG_LOGS".into(), Some("1".into()))));
        assert!(env.contains(&("VIRTIOFSD_DEBUG_LOGS".into(), Some("1".into()))));
        let console = &spec(&pod).init_containers.clone().unwrap()[0];
        assert_eq!(console.env.clone().unwrap()[0].value.as_deref(), Some("6"));
        let bad = vmi(
            json!({"labels": {"logVerbosity": "loud"}}),
            json!({"domain": {}}),
        );
        let e = render_launch_manifest_with(&bad, &on, &NamespaceContext::default(), 0, 240)
            .unwrap_err();
        assert!(
            e.to_string().contains("metadata.labels.logVerbosity"),
            "{e}"
        );
    }

    #[test]
    fn errors_name_object_and_field() {
        let s = test_settings();
        let ns = NamespaceContext::default();
        let error = |v: &VirtualMachineInstance| {
            render_launch_manifest_with(v, &s, &ns, 0, 240)
                .unwrap_err()
                .to_string()
        };
        let mut v = vmi(json!({}), json!({"domain": {}}));
        v.metadata.namespace = None;
        let e = error(&v);
        assert!(e.contains("metadata.namespace: must not be empty"), "{e}");
        let v = vmi(
            json!({}),
            json!({"domain": {}, "affinity": {"nodeAffinity": "nope"}}),
        );
        let e = error(&v);
        assert!(
            e.starts_with("VirtualMachineInstance testns/testvmi: spec.affinity: "),
            "{e}"
        );
        let v = vmi(
            json!({}),
            json!({"domain": {"resources": {"requests": {"memory": "2Gx"}}}}),
        );
        let mut rng = StdRng::seed_from_u64(1);
        let e = render_launch_manifest(&v, &s, &ns, &mut rng).unwrap_err();
        assert_eq!(
            e.to_string(),
            "VirtualMachineInstance testns/testvmi: spec.domain.resources.requests.memory: quantity \"2Gx\" does not match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
    }

    fn with_lookups(cms: &[&str], nads: &[(&str, &str)]) -> NamespaceContext {
        NamespaceContext {
            lookups: Some(crate::launcher::resources::RenderLookups {
                config_maps: cms.iter().map(|c| (c.to_string(), Ok(()))).collect(),
                network_attachment_definitions: nads
                    .iter()
                    .map(|(k, r)| (k.to_string(), Some(r.to_string())))
                    .collect(),
            }),
            ..Default::default()
        }
    }

    fn render_in(
        v: &VirtualMachineInstance,
        s: &ClusterSettings,
        ns: &NamespaceContext,
    ) -> Result<Pod, RenderError> {
        render_launch_manifest_with(v, s, ns, 0, 240)
    }

    fn container<'a>(p: &'a Pod, name: &str) -> &'a Container {
        spec(p).containers.iter().find(|c| c.name == name).unwrap()
    }

    fn mounts(c: &Container) -> Vec<(String, String, Option<String>)> {
        c.volume_mounts
            .iter()
            .flatten()
            .map(|m| (m.name.clone(), m.mount_path.clone(), m.sub_path.clone()))
            .collect()
    }

    const CM_HOOK: &str = r#"[{"image": "test:test", "configMap": {"name": "test-cm",
"key": "script.sh", "hookPath": "/usr/bin/onDefineDomain"}}]"#;

    /// template_test.go:5072-5124: the ConfigMap read while rendering becomes a 0755 volume
    /// (after every other volume) mounted at `hookPath` with `key` as subPath; a missing one
    /// fails the render with the GET's error, which the VMI controller puts in its event.
    #[test]
    fn hook_sidecar_config_map_template_test_5072() {
        let v = root(vmi(
            json!({"annotations": {"hooks.kubevirt.io/hookSidecars": CM_HOOK}}),
            json!({"domain": {}}),
        ));
        let s = test_settings();
        let pod = render_in(&v, &s, &with_lookups(&["test-cm"], &[])).unwrap();
        let volumes = spec(&pod).volumes.clone().unwrap();
        let last = volumes.last().unwrap();
        assert_eq!(last.name, "test-cm");
        let cm = last.config_map.clone().unwrap();
        assert_eq!(
            (cm.name.as_str(), cm.default_mode),
            ("test-cm", Some(0o755))
        );
        assert!(
            volumes
                .iter()
                .any(|v| v.name == "hook-sidecar-sockets" && v.empty_dir.is_some())
        );
        let sidecar = container(&pod, "hook-sidecar-0");
        assert_eq!(
            mounts(sidecar),
            [
                (
                    "hook-sidecar-sockets".into(),
                    "/var/run/kubevirt-hooks".into(),
                    Some("hook-sidecar-0".into())
                ),
                (
                    "test-cm".into(),
                    "/usr/bin/onDefineDomain".into(),
                    Some("script.sh".into())
                ),
            ]
        );
        assert!(mounts(compute(&pod)).contains(&(
            "hook-sidecar-sockets".into(),
            "/var/run/kubevirt-hooks".into(),
            None
        )));
        assert_eq!(
            sidecar.env.clone().unwrap()[0].value.as_deref(),
            Some("hook-sidecar-0")
        );
        let sc = sidecar.security_context.clone().unwrap();
        assert_eq!(
            (sc.run_as_user, sc.run_as_non_root, sc.capabilities),
            (Some(0), Some(false), None)
        );
        assert_eq!(
            sidecar.resources, None,
            "no support container resources without dedicated CPUs"
        );
        assert_eq!(flag_value(&pod, "--hook-sidecars").as_deref(), Some("1"));

        let e = render_in(&v, &s, &with_lookups(&[], &[])).unwrap_err();
        assert_eq!(e.to_string(), r#"configmaps "test-cm" not found"#);
        assert!(matches!(e, RenderError::Input { ref vmi, .. } if vmi == "testns/testvmi"));
        // Not read (explain-overhead, inspect): rendered as if present.
        assert!(render_in(&v, &s, &NamespaceContext::default()).is_ok());
    }

    /// template_test.go:5127-5175: a PVC hook is a pod volume mounted in the sidecar at
    /// `volumePath` and in `compute` at `sharedComputePath`.
    #[test]
    fn hook_sidecar_pvc_template_test_5127() {
        let hook = r#"[{"image": "test:test", "pvc": {"name": "test-pvc", "volumePath": "/debug", "sharedComputePath": "/var/run/debug"}}]"#;
        let v = root(vmi(
            json!({"annotations": {"hooks.kubevirt.io/hookSidecars": hook}}),
            json!({"domain": {}}),
        ));
        let pod = render(&v, &test_settings());
        let last = spec(&pod).volumes.clone().unwrap().pop().unwrap();
        assert_eq!(last.persistent_volume_claim.unwrap().claim_name, "test-pvc");
        assert_eq!(
            mounts(compute(&pod)).last().unwrap(),
            &("test-pvc".into(), "/var/run/debug".into(), None)
        );
        assert!(mounts(container(&pod, "hook-sidecar-0")).contains(&(
            "test-pvc".into(),
            "/debug".into(),
            None
        )));
    }

    /// template_test.go:4636-4641: a non-root sidecar drops every capability and gets the XDG
    /// variables before `CONTAINER_NAME`; with dedicated CPUs it gets 200m / 64M
    /// (renderresources.go:549-559). A bad annotation names the field.
    #[test]
    fn non_root_and_dedicated_sidecar_template_test_4636() {
        let hook = r#"[{"args": ["--version", "v1alpha2"],"image": "test/test:test", "imagePullPolicy": "IfNotPresent"}]"#;
        let v = vmi(
            json!({"annotations": {"hooks.kubevirt.io/hookSidecars": hook}}),
            json!({"domain": {"cpu": {"cores": 2, "dedicatedCpuPlacement": true}, "resources": {"requests": {"memory": "64M"}}}}),
        );
        let pod = render(&v, &test_settings());
        let sidecar = container(&pod, "hook-sidecar-0");
        let sc = sidecar.security_context.clone().unwrap();
        assert_eq!(sc.capabilities.unwrap().drop, Some(vec!["ALL".to_string()]));
        assert_eq!((sc.run_as_user, sc.run_as_group), (Some(107), Some(107)));
        let env: Vec<String> = sidecar
            .env
            .iter()
            .flatten()
            .map(|e| e.name.clone())
            .collect();
        assert_eq!(
            env,
            [
                "XDG_CACHE_HOME",
                "XDG_CONFIG_HOME",
                "XDG_RUNTIME_DIR",
                "CONTAINER_NAME"
            ]
        );
        assert_eq!(sidecar.args.clone().unwrap(), ["--version", "v1alpha2"]);
        assert_eq!(sidecar.image_pull_policy.as_deref(), Some("IfNotPresent"));
        let r = sidecar.resources.clone().unwrap();
        assert_eq!(r.requests, r.limits);
        assert_eq!(r.limits.unwrap()["memory"].0, "64M");

        let bad = vmi(
            json!({"annotations": {"hooks.kubevirt.io/hookSidecars": "{"}}),
            json!({"domain": {}}),
        );
        let e = render_in(&bad, &test_settings(), &NamespaceContext::default())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("VirtualMachineInstance testns/testvmi: metadata.annotations[hooks.kubevirt.io/hookSidecars]: "), "{e}");
    }

    /// netbinding_test.go and template.go:994-1000: a registered plugin with a sidecar image
    /// gets `hook-sidecar-0` (after the annotation's) with its name in the environment and the
    /// network-info volume for `device-info`; its NAD joins the Multus annotation with the
    /// logical network name. An unregistered plugin fails the render with KubeVirt's text.
    #[test]
    fn binding_plugin_sidecar_and_network_info() {
        let mut s = test_settings();
        s.network_bindings.insert(
            "mybind".into(),
            crate::config::NetworkBindingPlugin {
                sidecar_image: Some("registry.example/mybind-sidecar:1".into()),
                network_attachment_definition: Some("mybind-nad".into()),
                downward_api: Some("device-info".into()),
                migration_method: None,
            },
        );
        let v = root(vmi(
            json!({}),
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "binding": {"name": "mybind"}}]}},
                "networks": [{"name": "default", "pod": {}}]}),
        ));
        let pod = render(&v, &s);
        let sidecar = container(&pod, "hook-sidecar-0");
        assert_eq!(
            sidecar.image.as_deref(),
            Some("registry.example/mybind-sidecar:1")
        );
        assert_eq!(sidecar.image_pull_policy.as_deref(), Some("IfNotPresent"));
        let env: Vec<(String, String)> = sidecar
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            env,
            [
                ("CONTAINER_NAME".to_string(), "hook-sidecar-0".to_string()),
                ("NETWORK_BINDING_PLUGIN_NAME".into(), "mybind".into())
            ]
        );
        assert!(mounts(sidecar).contains(&(
            "network-info-annotation".into(),
            "/etc/podinfo".into(),
            None
        )));
        assert!(mounts(compute(&pod)).contains(&(
            "network-info-annotation".into(),
            "/etc/podinfo".into(),
            None
        )));
        let ann = pod.metadata.annotations.clone().unwrap();
        assert_eq!(
            ann["k8s.v1.cni.cncf.io/networks"],
            r#"[{"name":"mybind-nad","namespace":"testns","cni-args":{"logicNetworkName":"default"}}]"#
        );

        let unknown = root(vmi(
            json!({}),
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "binding": {"name": "other"}}]}},
                "networks": [{"name": "default", "pod": {}}]}),
        ));
        let e = render_in(&unknown, &s, &NamespaceContext::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "couldn't find configuration for network binding: other"
        );
    }

    /// template.go:427-433 with nad.go:48-70 and renderresources.go:363-374: with the gate
    /// `ExternalNetResourceInjection` disabled, each Multus network's NAD resource is requested
    /// once (limits too); a NAD that could not be read fails the render. With the gate on
    /// (KubeVirt's default) no NAD is read and no resource requested.
    #[test]
    fn sriov_resource_from_the_nad() {
        let v = root(vmi(
            json!({}),
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}, {"name": "fast", "sriov": {}}]}},
                "networks": [{"name": "default", "pod": {}}, {"name": "fast", "multus": {"networkName": "infra/sriov-net"}}]}),
        ));
        let off = ClusterSettings {
            disabled_feature_gates: vec!["ExternalNetResourceInjection".into()],
            ..test_settings()
        };
        let ns = with_lookups(&[], &[("infra/sriov-net", "intel.com/sriov_vf")]);
        let pod = render_in(&v, &off, &ns).unwrap();
        let r = compute(&pod).resources.clone().unwrap();
        assert_eq!(r.requests.unwrap()["intel.com/sriov_vf"].0, "1");
        assert_eq!(r.limits.unwrap()["intel.com/sriov_vf"].0, "1");
        let e = render_in(&v, &off, &with_lookups(&[], &[])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "failed to locate network attachment definition infra/sriov-net"
        );
        let on = render_in(&v, &test_settings(), &ns).unwrap();
        let requests = compute(&on).resources.clone().unwrap().requests.unwrap();
        assert!(!requests.contains_key("intel.com/sriov_vf"));
        assert_eq!(
            on.metadata.annotations.unwrap()["k8s.v1.cni.cncf.io/networks"],
            r#"[{"name":"sriov-net","namespace":"infra","interface":"pod115dc3606fb"}]"#
        );
    }

    /// template.go:573-576, 1002-1004: virtiofsd containers after the container-disk ones and
    /// before the hook sidecars; the sockets emptyDir mounted in `compute`, last.
    #[test]
    fn virtiofs_containers_in_the_pod() {
        let hook = r#"[{"image": "some-image:v1"}]"#;
        let v = root(vmi(
            json!({"annotations": {"hooks.kubevirt.io/hookSidecars": hook}}),
            json!({"domain": {"devices": {"filesystems": [{"name": "shared", "virtiofs": {}}]}},
                "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "shared-pvc"}}]}),
        ));
        let pod = render(&v, &test_settings());
        let names: Vec<&str> = spec(&pod)
            .containers
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(names, ["compute", "virtiofs-shared", "hook-sidecar-0"]);
        assert_eq!(
            mounts(compute(&pod)).last().unwrap(),
            &(
                "virtiofs-containers".into(),
                "/var/run/kubevirt/virtiofs-containers".into(),
                None
            )
        );
        let volumes: Vec<String> = spec(&pod)
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.clone())
            .collect();
        assert_eq!(
            volumes.last().map(String::as_str),
            Some("virtiofs-containers")
        );
    }
}
