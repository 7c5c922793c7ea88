//! Controller and cluster settings (KubeVirt's pkg/virt-config): the cluster-level inputs of the
//! launcher renderer and the overhead formula, with KubeVirt v1.9's defaults
//! (pkg/virt-config/virt-config.go, pkg/virt-controller/watch/application.go).
//!
//! They come from the KubeVirt custom resource (`spec.configuration`), can be read from a file
//! (`--kubevirt-cr FILE`) or, in cluster mode, from the live CR ([`select_kubevirt_cr`]: which
//! one; `run-controller` follows its changes, [`crate::controller::cluster_config`]), and can be
//! overridden by flags.

mod kubevirt_cr;

pub use kubevirt_cr::SettingChange;
pub(crate) use kubevirt_cr::select_kubevirt_cr;

use crate::api::quantity::ParsedQuantity;
use serde::{Deserialize, Serialize};

/// Default `developerConfiguration.cpuAllocationRatio` (virt-config.go).
pub const DEFAULT_CPU_ALLOCATION_RATIO: u32 = 10;
/// Default `developerConfiguration.memoryOvercommit` in percent.
pub const DEFAULT_MEMORY_OVERCOMMIT: u32 = 100;
/// Default `--launcher-qemu-timeout` in seconds (application.go:115).
pub const DEFAULT_QEMU_TIMEOUT_SECONDS: u32 = 240;
/// Range of the random jitter added to the qemu timeout: `rand.Intn(120)` (template.go:101).
pub const QEMU_TIMEOUT_JITTER_RANGE: u32 = 120;
/// Default launcher disk memory limit in bytes: 2000 MiB (virt-config.go:84-89).
pub const DEFAULT_DISK_MEMORY_LIMIT_BYTES: i64 = 2000 * 1024 * 1024;
/// Default VMI termination grace period in seconds (types.go:40).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;
/// Default launcher image (what a KubeVirt install sets; used only for rendering).
pub const DEFAULT_LAUNCHER_IMAGE: &str = "quay.io/kubevirt/virt-launcher:v1.9.0";

/// Cluster settings that change the overhead and the launcher pod.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSettings {
    /// vCPUs per requested physical CPU (`developerConfiguration.cpuAllocationRatio`, default 10).
    pub cpu_allocation_ratio: u32,
    /// Memory overcommit in percent (`developerConfiguration.memoryOvercommit`, default 100).
    pub memory_overcommit: u32,
    /// `additionalGuestMemoryOverheadRatio` as written in the CR (a float in a string); `None`
    /// or unparseable → not applied (hypervisorbackend.go:165-175).
    pub additional_guest_memory_overhead_ratio: Option<String>,
    /// Cluster architecture used when a VMI does not set `spec.architecture` (`amd64`; empty
    /// when the KubeVirt CR's status has none, see `default_architecture`).
    pub architecture: String,
    /// Memory request in bytes of each registered network binding plugin, by plugin name
    /// (`network.binding.<name>.computeResourceOverhead.requests.memory`). `passt` core binding
    /// adds 250Mi regardless (pkg/network/resources/memory.go).
    pub binding_plugin_memory: std::collections::BTreeMap<String, i64>,
    /// The registered network binding plugins (`network.binding`) by name: what the launcher
    /// pod gets for an interface that uses one (sidecar, Multus NAD, network-info volume).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub network_bindings: std::collections::BTreeMap<String, NetworkBindingPlugin>,
    /// Serial console log sidecar enabled cluster-wide (`virtualMachineOptions.disableSerialConsoleLog` unset/false).
    pub serial_console_log: bool,
    /// Launcher image for the `compute` container.
    pub launcher_image: String,
    /// `--launcher-qemu-timeout` base in seconds (default 240).
    pub qemu_timeout_seconds: u32,
    /// Allow software emulation (`developerConfiguration.useEmulation`): no `/dev/kvm` device.
    pub use_emulation: bool,
    /// Feature gates enabled in the CR (`developerConfiguration.featureGates`); Beta gates that are
    /// on by default are assumed on unless listed in `disabled_feature_gates`.
    pub feature_gates: Vec<String>,
    /// `developerConfiguration.disabledFeatureGates`.
    pub disabled_feature_gates: Vec<String>,
    /// Extra node selectors for every launcher pod (`developerConfiguration.nodeSelectors`).
    pub node_selectors: std::collections::BTreeMap<String, String>,
    /// `network.defaultNetworkInterface` (`bridge` by default).
    pub default_network_interface: String,
    /// `network.permitBridgeInterfaceOnPodNetwork` (true by default).
    pub permit_bridge_interface_on_pod_network: bool,
    /// `vmRolloutStrategy` is `LiveUpdate` (or unset: virt-config.go:514-517); `false` for
    /// `Stage`. Decides which template changes of a running VM need a restart.
    #[serde(default = "live_update_default")]
    pub vm_rollout_strategy_live_update: bool,
    /// `autoCPULimitNamespaceLabelSelector`: VMIs in a namespace whose labels match get a CPU
    /// limit without a ResourceQuota (template.go `doesVMIRequireAutoCPULimits`). `None`: unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_cpu_limit_namespace_label_selector:
        Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>,
    /// The KubeVirt release whose formula and renderer to reproduce
    /// ([`crate::kubevirt_version`]); v1.9.0 unless `--kubevirt-version` or, in cluster mode, the
    /// CR's `status.observedKubeVirtVersion` says otherwise.
    #[serde(default)]
    pub kubevirt_version: crate::kubevirt_version::KubeVirtVersion,
    /// The cluster runs without virt-api (not a KubeVirt setting: a cluster without virt-api's
    /// webhooks, such as `cluster serve --no-admission`), so the controller does the webhook
    /// work it depends on itself: the `kubevirt.io/foregroundDeleteVirtualMachine` finalizer
    /// virt-api's VMI mutator adds (vmi-mutator.go). Default `false`, as on a KubeVirt cluster.
    #[serde(default)]
    pub without_virt_api: bool,
    /// The KubeVirt CR's `kubevirt.io/skip-backup-hooks` annotation (`metadata.annotations`):
    /// the VMI controller's sync of a running pod's Velero hooks reads it for a VMI without
    /// its own (pkg/storage/pod/annotations/generator.go:56-63).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skip_backup_hooks: Option<String>,
    /// `controllerConfiguration.restClient.rateLimiter.tokenBucketRateLimiter`: the token bucket
    /// of the controller's API client (virt-config.go:101-102, configuration.go:236-240),
    /// applied again whenever the CR changes (application.go:371, 557-563).
    #[serde(default)]
    pub controller_rate_limiter: TokenBucket,
    /// `supportContainerResources`: requests and limits overriding KubeVirt's defaults for the
    /// support containers (sidecars, virtiofsd, container disks, the console log, hotplug
    /// attachment pods), read through [`support_quantity`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub support_container_resources: Vec<SupportContainerResources>,
    /// `imagePullPolicy` (`GetImagePullPolicy`, virt-config.go:189-191; `IfNotPresent` by
    /// default): the launcher image's containers, its image volume and binding-plugin sidecars.
    #[serde(default = "default_image_pull_policy")]
    pub image_pull_policy: String,
    /// `developerConfiguration.logVerbosity.virtLauncher` (`GetVirtLauncherVerbosity`,
    /// virt-config.go:443-445; 2 by default): the launcher's log verbosity, written to the
    /// compute container's env when it is not the default (template.go:525-547).
    #[serde(default = "default_launcher_verbosity")]
    pub virt_launcher_verbosity: u64,
    /// `defaultRuntimeClass`: the launcher pod's `runtimeClassName` (template.go:750-754).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_runtime_class: Option<String>,
    /// `seccompConfiguration.virtualMachineInstanceProfile.customProfile`: the launcher pod's
    /// seccomp profile, `Localhost` with the profile's path or `RuntimeDefault`
    /// (template.go:700-715, 374-393).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vmi_seccomp_profile: Option<k8s_openapi::api::core::v1::SeccompProfile>,
    /// `selinuxLauncherType` (`GetSELinuxLauncherType`, virt-config.go:82, 278-280; empty by
    /// default): the launcher pod's SELinux type and the hotplug attachment container's
    /// (template.go:748, 1122-1126, 1473-1500; [`crate::launcher::selinux`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selinux_launcher_type: Option<String>,
    /// `vmStateStorageClass` (`GetVMStateStorageClass`, virt-config.go:472-474): the class of
    /// the backend-storage claims (persistent TPM/EFI); unset, the default class is used
    /// (backend-storage.go:412-437).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_state_storage_class: Option<String>,
    /// `instancetype.referencePolicy` (`GetInstancetypeReferencePolicy`, virt-config.go:
    /// 536-543): how the VM controller keeps a VM's instancetype and preference.
    #[serde(default)]
    pub instancetype_reference_policy: ReferencePolicy,
    /// `permittedHostDevices` (`GetPermittedHostDevices`, virt-config.go:314-316): the
    /// `resourceName` of every PCI, mediated and USB entry. `None` when the CR does not set it
    /// (no check); `Some` (even empty) makes the renderer refuse a VMI's GPU or host device
    /// whose `deviceName` is not listed (renderresources.go:493-531).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permitted_host_devices: Option<Vec<String>>,
    /// `developerConfiguration.diskVerification.memoryLimit` in bytes (`GetDiskVerification`,
    /// virt-config.go:222-224; 2000Mi by default, virt-config.go:89, configuration.go:183-197):
    /// the compute container's `--disk-memory-limit` (template.go:471).
    #[serde(default = "default_disk_memory_limit")]
    pub disk_memory_limit_bytes: i64,
    /// The name of the CR's first `hypervisors` entry when it sets one (`kvm` or
    /// `hyperv-direct`); read through [`ClusterSettings::hypervisor_name`], which applies the
    /// Alpha gate `ConfigurableHypervisor`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configured_hypervisor: Option<String>,
    /// The CR's non-empty `ovmfPath` (deprecated, for every architecture) and
    /// `architectureConfiguration.<arch>.ovmfPath`, read through
    /// [`ClusterSettings::ovmf_path`]; empty when the CR sets none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub ovmf_paths: std::collections::BTreeMap<String, String>,
    /// `developerConfiguration.minimumClusterTSCFrequency` (`GetMinimumClusterTSCFrequency`,
    /// virt-config.go:310-312): the TSC frequency the VMI controller's topology hinter gives a
    /// VMI that needs one instead of the nodes' lowest; one not above 0 makes the hinter fail
    /// (topology/hinter.go:49-57). `None`: unset.
    #[serde(
        default,
        rename = "minimumClusterTSCFrequency",
        skip_serializing_if = "Option::is_none"
    )]
    pub minimum_cluster_tsc_frequency: Option<i64>,
    /// The machine types, `cpuRequest` and `evictionStrategy` the full VMI spec defaults read
    /// (the instancetype expansion runs them on the VM template).
    #[serde(default)]
    pub spec_defaults: crate::api::defaults::SpecDefaultSettings,
}

/// `InstancetypeReferencePolicy` (core/v1/types.go:3240-3260).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ReferencePolicy {
    /// Stash the instancetype and preference in ControllerRevisions named in the VM's status
    /// (the default).
    #[default]
    Reference,
    /// Expand them into the VM unless its status already names a stashed revision.
    Expand,
    /// Expand them into every VM.
    ExpandAll,
}

/// `spec.configuration.instancetype.referencePolicy`, `machineType`,
/// `architectureConfiguration.<arch>.machineType`, `cpuRequest` and `evictionStrategy`. The
/// CRD's enum refuses other policies; a bad quantity or a non-string names its field.
fn read_vm_defaults(cfg: &serde_json::Value, s: &mut ClusterSettings) -> Result<(), SettingsError> {
    let text = |v: &serde_json::Value, field: &str| -> Result<Option<String>, SettingsError> {
        match v {
            serde_json::Value::Null => Ok(None),
            serde_json::Value::String(t) => Ok(Some(t.clone()).filter(|t| !t.is_empty())),
            other => Err(cr_field_err(
                field,
                format!("must be a string, found {other}"),
            )),
        }
    };
    if let Some(v) = cfg.pointer("/instancetype/referencePolicy") {
        s.instancetype_reference_policy = match text(v, "instancetype.referencePolicy")?.as_deref()
        {
            None | Some("reference") => ReferencePolicy::Reference,
            Some("expand") => ReferencePolicy::Expand,
            Some("expandAll") => ReferencePolicy::ExpandAll,
            Some(other) => {
                return Err(cr_field_err(
                    "instancetype.referencePolicy",
                    format!("must be reference, expand or expandAll, found {other:?}"),
                ));
            }
        };
    }
    let d = &mut s.spec_defaults;
    if let Some(v) = cfg.get("machineType") {
        d.machine_type = text(v, "machineType")?;
    }
    for arch in ["amd64", "arm64", "s390x"] {
        let field = format!("architectureConfiguration.{arch}.machineType");
        if let Some(v) = cfg.pointer(&format!("/architectureConfiguration/{arch}/machineType")) {
            // Go's JSON decoding over the defaults: an absent field keeps the default, an
            // empty one replaces it.
            let t = text(v, &field)?.unwrap_or_default();
            d.arch_machine_types.insert(arch.to_string(), t);
        }
    }
    if let Some(v) = cfg.get("cpuRequest").filter(|v| !v.is_null()) {
        let raw = v
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| v.to_string());
        let q =
            ParsedQuantity::parse(&raw).map_err(|e| cr_field_err("cpuRequest", e.to_string()))?;
        // Only a request other than KubeVirt's 100m is written into specs (defaults.go:272).
        d.cpu_request = (q.milli_value() != 100).then(|| q.to_canonical());
    }
    if let Some(v) = cfg.get("evictionStrategy")
        && let Some(t) = text(v, "evictionStrategy")?
    {
        d.eviction_strategy = t;
    }
    Ok(())
}

/// KubeVirt's default `imagePullPolicy` (virt-config.go:74).
pub(crate) const DEFAULT_IMAGE_PULL_POLICY: &str = "IfNotPresent";
/// KubeVirt's default virt-launcher log verbosity (virt-config.go:93).
pub(crate) const DEFAULT_LAUNCHER_LOG_VERBOSITY: u64 = 2;

fn default_image_pull_policy() -> String {
    DEFAULT_IMAGE_PULL_POLICY.to_string()
}

fn default_launcher_verbosity() -> u64 {
    DEFAULT_LAUNCHER_LOG_VERBOSITY
}

fn default_disk_memory_limit() -> i64 {
    DEFAULT_DISK_MEMORY_LIMIT_BYTES
}

/// The [`ClusterSettings::ovmf_paths`] key of the deprecated top-level `ovmfPath`.
const OVMF_PATH_ALL_ARCHES: &str = "*";

/// KubeVirt's hypervisor names (core/v1/types.go:3218-3221).
pub(crate) const KVM_HYPERVISOR: &str = "kvm";
/// The Hyper-V direct hypervisor, whose launcher device is `mshv`
/// (pkg/hypervisor/launcherhypervisorresources.go:40-48).
pub(crate) const HYPERV_DIRECT_HYPERVISOR: &str = "hyperv-direct";

/// `developerConfiguration.diskVerification.memoryLimit` and `hypervisors[0].name`. KubeVirt
/// merges the CR over its defaults with Go's JSON decoding (configuration.go:304-323): an
/// absent or null `diskVerification` keeps 2000Mi, but one without `memoryLimit` sets it to
/// nil, which the renderer then dereferences (template.go:471) — refused here, naming the
/// field. `hypervisors[0]` is decoded into the default `{name: kvm}`, so an entry without a
/// name stays `kvm`.
fn read_hypervisor_settings(
    cfg: &serde_json::Value,
    s: &mut ClusterSettings,
) -> Result<(), SettingsError> {
    let field = "developerConfiguration.diskVerification";
    if let Some(dv) = cfg
        .pointer("/developerConfiguration/diskVerification")
        .filter(|v| !v.is_null())
    {
        let limit = dv.get("memoryLimit").filter(|v| !v.is_null());
        let Some(limit) = limit else {
            return Err(cr_field_err(
                &format!("{field}.memoryLimit"),
                "must be set when diskVerification is (KubeVirt's renderer reads it unchecked)"
                    .into(),
            ));
        };
        let text = limit
            .as_str()
            .map_or_else(|| limit.to_string(), str::to_string);
        let q = ParsedQuantity::parse(&text)
            .map_err(|e| cr_field_err(&format!("{field}.memoryLimit"), e.to_string()))?;
        s.disk_memory_limit_bytes = q.value();
    }
    // `ovmfPath` and `architectureConfiguration.<arch>.ovmfPath` (types.go:3095, 3304): Go
    // decodes them over the defaults with `omitempty`, so an empty one keeps the default.
    for (key, pointer) in [
        (OVMF_PATH_ALL_ARCHES, "/ovmfPath".to_string()),
        ("amd64", "/architectureConfiguration/amd64/ovmfPath".into()),
        ("arm64", "/architectureConfiguration/arm64/ovmfPath".into()),
        ("s390x", "/architectureConfiguration/s390x/ovmfPath".into()),
    ] {
        match cfg.pointer(&pointer) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(p)) if p.is_empty() => {}
            Some(serde_json::Value::String(p)) => {
                s.ovmf_paths.insert(key.to_string(), p.clone());
            }
            Some(other) => {
                let field = pointer.trim_start_matches('/').replace('/', ".");
                return Err(cr_field_err(
                    &field,
                    format!("must be a string, found {other}"),
                ));
            }
        }
    }
    if let Some(list) = cfg.get("hypervisors").filter(|v| !v.is_null()) {
        let Some(items) = list.as_array() else {
            return Err(cr_field_err(
                "hypervisors",
                format!("must be a list, found {list}"),
            ));
        };
        s.configured_hypervisor = match items.first().map(|h| h.get("name")) {
            None | Some(None | Some(serde_json::Value::Null)) => None,
            Some(Some(serde_json::Value::String(n))) => Some(n.clone()).filter(|n| !n.is_empty()),
            Some(Some(other)) => {
                return Err(cr_field_err(
                    "hypervisors[0].name",
                    format!("must be a string, found {other}"),
                ));
            }
        };
    }
    Ok(())
}

/// The CR's launcher settings: `imagePullPolicy`, `logVerbosity.virtLauncher`,
/// `defaultRuntimeClass`, the VMI seccomp profile, `developerConfiguration.
/// minimumClusterTSCFrequency`. Errors name the field.
fn read_launcher_settings(
    cfg: &serde_json::Value,
    s: &mut ClusterSettings,
) -> Result<(), SettingsError> {
    if let Some(v) = cfg.get("imagePullPolicy").filter(|v| !v.is_null()) {
        match v.as_str() {
            Some(p @ ("Always" | "IfNotPresent" | "Never")) => s.image_pull_policy = p.into(),
            Some("") => {}
            _ => {
                return Err(cr_field_err(
                    "imagePullPolicy",
                    format!("must be Always, IfNotPresent or Never, found {v}"),
                ));
            }
        }
    }
    if let Some(v) = cfg
        .pointer("/developerConfiguration/logVerbosity/virtLauncher")
        .filter(|v| !v.is_null())
    {
        s.virt_launcher_verbosity = v.as_u64().ok_or_else(|| {
            cr_field_err(
                "developerConfiguration.logVerbosity.virtLauncher",
                format!("must be a non-negative integer, found {v}"),
            )
        })?;
    }
    if let Some(v) = cfg
        .pointer("/developerConfiguration/minimumClusterTSCFrequency")
        .filter(|v| !v.is_null())
    {
        // Any int64, as the CR's schema takes it; the hinter judges it (hinter.go:51-56).
        s.minimum_cluster_tsc_frequency = Some(v.as_i64().ok_or_else(|| {
            cr_field_err(
                "developerConfiguration.minimumClusterTSCFrequency",
                format!("must be an integer, found {v}"),
            )
        })?);
    }
    s.selinux_launcher_type = match cfg.get("selinuxLauncherType") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(t)) => Some(t.clone()).filter(|t| !t.is_empty()),
        Some(v) => {
            return Err(cr_field_err(
                "selinuxLauncherType",
                format!("must be a string, found {v}"),
            ));
        }
    };
    s.vm_state_storage_class = cfg
        .get("vmStateStorageClass")
        .and_then(|v| v.as_str())
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    s.default_runtime_class = cfg
        .get("defaultRuntimeClass")
        .and_then(|v| v.as_str())
        .filter(|v| !v.is_empty())
        .map(str::to_string);
    if let Some(custom) = cfg
        .pointer("/seccompConfiguration/virtualMachineInstanceProfile/customProfile")
        .filter(|v| !v.is_null())
    {
        let localhost = custom.get("localhostProfile").and_then(|v| v.as_str());
        let runtime_default = custom
            .get("runtimeDefaultProfile")
            .and_then(|v| v.as_bool());
        s.vmi_seccomp_profile = match (localhost, runtime_default) {
            (Some(path), _) => Some(k8s_openapi::api::core::v1::SeccompProfile {
                type_: "Localhost".into(),
                localhost_profile: Some(path.into()),
            }),
            (None, Some(true)) => Some(k8s_openapi::api::core::v1::SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            _ => None,
        };
    }
    Ok(())
}

/// One `supportContainerResources` entry (`SupportContainerResources`, core/v1/types.go:3318-3340):
/// the container type (`sidecar`, `virtiofs`, `container-disk`, `guest-console-log`,
/// `hotplug-disk`, `vmexport`) and its quantities in canonical text; zero quantities are left
/// out, as `GetSupportContainerRequest` skips them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SupportContainerResources {
    #[serde(rename = "type")]
    pub container_type: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub requests: std::collections::BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub limits: std::collections::BTreeMap<String, String>,
}

/// `GetSupportContainerRequest` / `GetSupportContainerLimit` (virt-config.go:318-340): the first
/// entry of `container_type` setting a non-zero `resource` among its requests (or limits).
pub(crate) fn support_quantity(
    entries: &[SupportContainerResources],
    container_type: &str,
    limit: bool,
    resource: &str,
) -> Option<k8s_openapi::apimachinery::pkg::api::resource::Quantity> {
    entries
        .iter()
        .filter(|e| e.container_type == container_type)
        .find_map(|e| if limit { &e.limits } else { &e.requests }.get(resource))
        .map(|q| k8s_openapi::apimachinery::pkg::api::resource::Quantity(q.clone()))
}

/// `spec.configuration.supportContainerResources` (`[{type, resources: {requests, limits}}]`)
/// with every quantity parsed; errors name the entry's field.
fn support_container_resources(
    v: &serde_json::Value,
) -> Result<Vec<SupportContainerResources>, (String, String)> {
    let field = "supportContainerResources";
    let Some(items) = v.as_array() else {
        return Err((field.into(), format!("must be a list, found {v}")));
    };
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let at = format!("{field}[{i}]");
        let container_type = item
            .get("type")
            .and_then(|t| t.as_str())
            .ok_or_else(|| (format!("{at}.type"), "must be a string".to_string()))?;
        let list =
            |side: &str| -> Result<std::collections::BTreeMap<String, String>, (String, String)> {
                let mut map = std::collections::BTreeMap::new();
                let Some(v) = item
                    .pointer(&format!("/resources/{side}"))
                    .filter(|v| !v.is_null())
                else {
                    return Ok(map);
                };
                let entries = v.as_object().ok_or_else(|| {
                    (
                        format!("{at}.resources.{side}"),
                        format!("must be an object, found {v}"),
                    )
                })?;
                for (name, q) in entries {
                    let text = q.as_str().map_or_else(|| q.to_string(), str::to_string);
                    let parsed = ParsedQuantity::parse(&text)
                        .map_err(|e| (format!("{at}.resources.{side}.{name}"), e.to_string()))?;
                    if !parsed.is_zero() {
                        map.insert(name.clone(), parsed.to_canonical());
                    }
                }
                Ok(map)
            };
        out.push(SupportContainerResources {
            container_type: container_type.to_string(),
            requests: list("requests")?,
            limits: list("limits")?,
        });
    }
    Ok(out)
}

/// A client's token bucket (KubeVirt's `TokenBucketRateLimiter`, core/v1/types.go:3052-3060).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenBucket {
    /// Requests per second.
    pub qps: f32,
    /// Requests allowed at once.
    pub burst: u32,
}

impl Default for TokenBucket {
    /// virt-controller's: 200 requests/s, burst 400.
    fn default() -> Self {
        TokenBucket {
            qps: crate::runtime::rest_limiter::DEFAULT_QPS,
            burst: crate::runtime::rest_limiter::DEFAULT_BURST,
        }
    }
}

/// One registered network binding plugin (`InterfaceBindingPlugin`,
/// staging/src/kubevirt.io/api/core/v1/types.go): the fields the launcher pod depends on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NetworkBindingPlugin {
    /// `sidecarImage`: a hook sidecar running it is added to the pod (netbinding.go:55-66).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sidecar_image: Option<String>,
    /// `networkAttachmentDefinition` (`name` or `namespace/name`): an entry of the Multus
    /// annotation (multus/annotation.go:131-160).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_attachment_definition: Option<String>,
    /// `downwardAPI`: `device-info` mounts the network-info volume (template.go:994-1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downward_api: Option<String>,
    /// `migration.method` (`link-refresh`): read by migrations, which are not modelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration_method: Option<String>,
}

fn live_update_default() -> bool {
    true
}

impl Default for ClusterSettings {
    fn default() -> Self {
        ClusterSettings {
            cpu_allocation_ratio: DEFAULT_CPU_ALLOCATION_RATIO,
            memory_overcommit: DEFAULT_MEMORY_OVERCOMMIT,
            additional_guest_memory_overhead_ratio: None,
            architecture: "amd64".to_string(),
            binding_plugin_memory: Default::default(),
            network_bindings: Default::default(),
            serial_console_log: true,
            launcher_image: DEFAULT_LAUNCHER_IMAGE.to_string(),
            qemu_timeout_seconds: DEFAULT_QEMU_TIMEOUT_SECONDS,
            use_emulation: false,
            feature_gates: Vec::new(),
            disabled_feature_gates: Vec::new(),
            node_selectors: Default::default(),
            default_network_interface: "bridge".to_string(),
            permit_bridge_interface_on_pod_network: true,
            vm_rollout_strategy_live_update: true,
            auto_cpu_limit_namespace_label_selector: None,
            kubevirt_version: Default::default(),
            without_virt_api: false,
            skip_backup_hooks: None,
            controller_rate_limiter: TokenBucket::default(),
            support_container_resources: Vec::new(),
            image_pull_policy: default_image_pull_policy(),
            virt_launcher_verbosity: DEFAULT_LAUNCHER_LOG_VERBOSITY,
            default_runtime_class: None,
            vmi_seccomp_profile: None,
            selinux_launcher_type: None,
            vm_state_storage_class: None,
            instancetype_reference_policy: ReferencePolicy::Reference,
            permitted_host_devices: None,
            disk_memory_limit_bytes: DEFAULT_DISK_MEMORY_LIMIT_BYTES,
            configured_hypervisor: None,
            ovmf_paths: Default::default(),
            minimum_cluster_tsc_frequency: None,
            spec_defaults: Default::default(),
        }
    }
}

/// KubeVirt's admission check of `additionalGuestMemoryOverheadRatio`
/// (pkg/virt-operator/webhooks/kubevirt-update-admitter.go:482-506): a float, at least 1.0.
/// Returns the message for the rejected value.
pub(crate) fn validate_overhead_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r >= 1.0 && r.is_finite() => Ok(r),
        Ok(r) => Err(format!(
            "{r} is below 1.0 (KubeVirt rejects ratios that would shrink the overhead)"
        )),
        Err(_) => Err(format!("{text:?} is not a number")),
    }
}

/// Where the controller's client limit is in `spec.configuration`, as a JSON pointer and as
/// the field's name.
const CONTROLLER_TOKEN_BUCKET: &str =
    "/controllerConfiguration/restClient/rateLimiter/tokenBucketRateLimiter";
const CONTROLLER_TOKEN_BUCKET_FIELD: &str =
    "controllerConfiguration.restClient.rateLimiter.tokenBucketRateLimiter";

/// A `tokenBucketRateLimiter` over `base`: what it sets replaces `base`'s (Go's JSON decoding
/// into the defaults). A rate or burst that is not positive is refused naming it: client-go's
/// bucket would stop every request once the burst is spent (zero rate) or at once (zero
/// burst); KubeVirt applies it as given.
fn token_bucket(
    v: &serde_json::Value,
    base: TokenBucket,
) -> Result<TokenBucket, (&'static str, String)> {
    if v.is_null() {
        return Ok(base);
    }
    let Some(map) = v.as_object() else {
        return Err(("", format!("must be an object, found {v}")));
    };
    let mut out = base;
    if let Some(q) = map.get("qps") {
        out.qps = q
            .as_f64()
            .filter(|q| *q > 0.0 && q.is_finite())
            .map(|q| q as f32)
            .ok_or_else(|| ("qps", format!("must be a positive number, found {q}")))?;
    }
    if let Some(b) = map.get("burst") {
        out.burst = b
            .as_u64()
            .filter(|b| *b > 0)
            .and_then(|b| u32::try_from(b).ok())
            .ok_or_else(|| ("burst", format!("must be a positive integer, found {b}")))?;
    }
    Ok(out)
}

/// `spec.configuration.permittedHostDevices`: the resource names of its `pciHostDevices`,
/// `mediatedDevices` and `usb` entries (core/v1/types.go:3678-3730); `None` when unset or null.
/// A list or a `resourceName` of the wrong type names its field.
fn permitted_host_devices(cfg: &serde_json::Value) -> Result<Option<Vec<String>>, SettingsError> {
    let field = "permittedHostDevices";
    let Some(v) = cfg.get(field).filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Some(map) = v.as_object() else {
        return Err(cr_field_err(field, format!("must be an object, found {v}")));
    };
    let mut names = Vec::new();
    for kind in ["pciHostDevices", "mediatedDevices", "usb"] {
        let Some(list) = map.get(kind).filter(|l| !l.is_null()) else {
            continue;
        };
        let Some(items) = list.as_array() else {
            return Err(cr_field_err(
                &format!("{field}.{kind}"),
                format!("must be a list, found {list}"),
            ));
        };
        for (i, item) in items.iter().enumerate() {
            let name = item.get("resourceName").and_then(|n| n.as_str());
            let Some(name) = name else {
                return Err(cr_field_err(
                    &format!("{field}.{kind}[{i}].resourceName"),
                    "must be a string".into(),
                ));
            };
            names.push(name.to_string());
        }
    }
    Ok(Some(names))
}

/// `spec.configuration.network.binding`: the registered plugins and their memory overhead.
fn read_network_bindings(
    cfg: &serde_json::Value,
    s: &mut ClusterSettings,
) -> Result<(), SettingsError> {
    if let Some(bindings) = cfg.pointer("/network/binding").and_then(|v| v.as_object()) {
        for (name, binding) in bindings {
            let text = |path: &str| {
                binding
                    .pointer(path)
                    .and_then(|v| v.as_str())
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
            };
            s.network_bindings.insert(
                name.clone(),
                NetworkBindingPlugin {
                    sidecar_image: text("/sidecarImage"),
                    network_attachment_definition: text("/networkAttachmentDefinition"),
                    downward_api: text("/downwardAPI"),
                    migration_method: text("/migration/method"),
                },
            );
            if let Some(mem) = binding.pointer("/computeResourceOverhead/requests/memory") {
                let text = mem.as_str().unwrap_or_default();
                let q = ParsedQuantity::parse(text).map_err(|e| {
                    cr_field_err(
                        &format!("network.binding.{name}.computeResourceOverhead.requests.memory"),
                        e.to_string(),
                    )
                })?;
                s.binding_plugin_memory.insert(name.clone(), q.value());
            }
        }
    }
    Ok(())
}

fn cr_field_err(field: &str, message: String) -> SettingsError {
    SettingsError::Field {
        field: format!("spec.configuration.{field}"),
        message,
    }
}

/// A KubeVirt CR that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    #[error("KubeVirt CR: field {field}: {message}")]
    Field { field: String, message: String },
    #[error("KubeVirt CR: {0}")]
    Document(String),
}

/// The default architecture a KubeVirt CR gives (`GetDefaultArchitecture`): a CR that
/// KubeVirt's `ClusterConfig` applies, one with a `status.phase` (configuration.go:361-372),
/// gives its `status.defaultArchitecture`, empty when that is unset (configuration.go:316-320):
/// VMIs and expanded VMs then get no `spec.architecture` at all. virt-operator writes that
/// status from `spec.configuration.architectureConfiguration.defaultArchitecture`, else its own
/// architecture (pkg/virt-operator/util/config.go:516-526), so a CR with no status yet gives the
/// spec's value, or `None` (the defaults' `amd64`).
fn default_architecture(cr: &serde_json::Value, cfg: &serde_json::Value) -> Option<String> {
    let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_string);
    let applied = text(cr.pointer("/status/phase")).is_some_and(|p| !p.is_empty());
    if applied {
        return Some(text(cr.pointer("/status/defaultArchitecture")).unwrap_or_default());
    }
    text(cfg.pointer("/architectureConfiguration/defaultArchitecture"))
}

impl ClusterSettings {
    /// Read the settings from a `kubevirt.io/v1` KubeVirt custom resource (as JSON), starting from
    /// the defaults. Reads `spec.configuration.developerConfiguration.{cpuAllocationRatio,
    /// memoryOvercommit, useEmulation, featureGates, disabledFeatureGates, nodeSelectors}`,
    /// `spec.configuration.additionalGuestMemoryOverheadRatio`,
    /// `spec.configuration.virtualMachineOptions.disableSerialConsoleLog`,
    /// `spec.configuration.network.binding.<name>.computeResourceOverhead.requests.memory`,
    /// `spec.configuration.supportContainerResources`, `spec.configuration.permittedHostDevices`,
    /// `spec.configuration.developerConfiguration.diskVerification.memoryLimit`,
    /// `spec.configuration.hypervisors[0].name`, `spec.configuration.ovmfPath`,
    /// `spec.configuration.architectureConfiguration.<arch>.ovmfPath`.
    ///
    /// Errors name the field: a ratio ≤ 0, an overcommit ≤ 0, an invalid quantity.
    pub fn from_kubevirt_cr(cr: &serde_json::Value) -> Result<Self, SettingsError> {
        let mut s = ClusterSettings::default();
        let kind = cr.get("kind").and_then(|k| k.as_str()).unwrap_or("");
        if kind != "KubeVirt" {
            return Err(SettingsError::Document(format!(
                "expected kind KubeVirt, found {kind:?}"
            )));
        }
        s.skip_backup_hooks = cr
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(crate::api::annotations::SKIP_BACKUP_HOOKS))
            .and_then(|v| v.as_str())
            .map(str::to_string);
        let cfg = cr
            .pointer("/spec/configuration")
            .cloned()
            .unwrap_or_default();
        let dev = cfg
            .get("developerConfiguration")
            .cloned()
            .unwrap_or_default();
        let field_err = cr_field_err;
        let positive_u32 = |v: &serde_json::Value, field: &str| -> Result<u32, SettingsError> {
            v.as_u64()
                .filter(|n| *n > 0)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| field_err(field, format!("must be a positive integer, found {v}")))
        };
        if let Some(v) = dev.get("cpuAllocationRatio") {
            s.cpu_allocation_ratio = positive_u32(v, "developerConfiguration.cpuAllocationRatio")?;
        }
        if let Some(v) = dev.get("memoryOvercommit") {
            s.memory_overcommit = positive_u32(v, "developerConfiguration.memoryOvercommit")?;
        }
        if let Some(v) = dev.get("useEmulation") {
            s.use_emulation = v.as_bool().unwrap_or(false);
        }
        let strings = |v: Option<&serde_json::Value>| -> Vec<String> {
            v.and_then(|v| v.as_array())
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        s.feature_gates = strings(dev.get("featureGates"));
        s.disabled_feature_gates = strings(dev.get("disabledFeatureGates"));
        if let Some(map) = dev.get("nodeSelectors").and_then(|v| v.as_object()) {
            for (k, v) in map {
                s.node_selectors
                    .insert(k.clone(), v.as_str().unwrap_or_default().to_string());
            }
        }
        if let Some(v) = cfg.get("additionalGuestMemoryOverheadRatio") {
            let text = v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string());
            validate_overhead_ratio(&text)
                .map_err(|m| field_err("additionalGuestMemoryOverheadRatio", m))?;
            s.additional_guest_memory_overhead_ratio = Some(text);
        }
        if let Some(b) = cfg.pointer("/virtualMachineOptions/disableSerialConsoleLog") {
            // Presence of the (empty) struct disables the log sidecar.
            s.serial_console_log = b.is_null();
        }
        read_network_bindings(&cfg, &mut s)?;
        read_launcher_settings(&cfg, &mut s)?;
        read_vm_defaults(&cfg, &mut s)?;
        if let Some(iface) = cfg
            .pointer("/network/defaultNetworkInterface")
            .and_then(|v| v.as_str())
        {
            s.default_network_interface = iface.to_string();
        }
        if let Some(permit) = cfg
            .pointer("/network/permitBridgeInterfaceOnPodNetwork")
            .and_then(|v| v.as_bool())
        {
            s.permit_bridge_interface_on_pod_network = permit;
        }
        match cfg.get("vmRolloutStrategy") {
            None | Some(serde_json::Value::Null) => {}
            Some(v) => match v.as_str() {
                Some("LiveUpdate") => s.vm_rollout_strategy_live_update = true,
                Some("Stage") => s.vm_rollout_strategy_live_update = false,
                _ => {
                    return Err(field_err(
                        "vmRolloutStrategy",
                        format!("must be LiveUpdate or Stage, found {v}"),
                    ));
                }
            },
        }
        match cfg.get("autoCPULimitNamespaceLabelSelector") {
            None | Some(serde_json::Value::Null) => {}
            Some(v) => {
                let selector = serde_json::from_value(v.clone())
                    .map_err(|e| field_err("autoCPULimitNamespaceLabelSelector", e.to_string()))?;
                s.auto_cpu_limit_namespace_label_selector = Some(selector);
            }
        }
        if let Some(bucket) = cfg.pointer(CONTROLLER_TOKEN_BUCKET) {
            s.controller_rate_limiter =
                token_bucket(bucket, s.controller_rate_limiter).map_err(|(f, m)| {
                    let dot = if f.is_empty() { "" } else { "." };
                    field_err(&format!("{CONTROLLER_TOKEN_BUCKET_FIELD}{dot}{f}"), m)
                })?;
        }
        if let Some(v) = cfg
            .get("supportContainerResources")
            .filter(|v| !v.is_null())
        {
            s.support_container_resources =
                support_container_resources(v).map_err(|(f, m)| field_err(&f, m))?;
        }
        s.permitted_host_devices = permitted_host_devices(&cfg)?;
        read_hypervisor_settings(&cfg, &mut s)?;
        s.architecture = default_architecture(cr, &cfg).unwrap_or(s.architecture);
        Ok(s)
    }

    /// What virt-api's admission defaults read (see [`crate::api::defaults`]).
    pub fn admission(&self) -> crate::api::defaults::AdmissionSettings {
        crate::api::defaults::AdmissionSettings {
            architecture: self.architecture.clone(),
            default_network_interface: self.default_network_interface.clone(),
            permit_bridge_interface_on_pod_network: self.permit_bridge_interface_on_pod_network,
            kubevirt_version: self.kubevirt_version,
            memory_overcommit: self.memory_overcommit,
        }
    }

    /// The parsed `additionalGuestMemoryOverheadRatio`, if set and a valid float.
    #[cfg(test)]
    pub(crate) fn overhead_ratio(&self) -> Option<f64> {
        self.additional_guest_memory_overhead_ratio
            .as_deref()
            .and_then(|r| r.trim().parse::<f64>().ok())
    }

    /// `GetOVMFPath` (virt-config.go:290-304): the CR's deprecated `ovmfPath` when set, else
    /// the architecture's `architectureConfiguration.<arch>.ovmfPath` (`amd64` for any other
    /// architecture), else KubeVirt's default for it (virt-config.go:84-86,
    /// configuration.go:254-268). The launcher's `--ovmf-path` (template.go:441, 470).
    pub(crate) fn ovmf_path(&self, arch: &str) -> &str {
        let arch = match arch {
            "arm64" | "s390x" => arch,
            _ => "amd64",
        };
        if let Some(p) = self
            .ovmf_paths
            .get(OVMF_PATH_ALL_ARCHES)
            .or_else(|| self.ovmf_paths.get(arch))
        {
            return p;
        }
        match arch {
            "arm64" => "/usr/share/AAVMF",
            "s390x" => "",
            _ => "/usr/share/edk2/ovmf",
        }
    }

    /// `GetHypervisor().Name` (virt-config.go:557-576): the CR's first `hypervisors` entry
    /// with the Alpha gate `ConfigurableHypervisor` (featuregate/active.go:152, 319) on, else
    /// `kvm`. The launcher's `--hypervisor` flag (template.go:472).
    pub(crate) fn hypervisor_name(&self) -> &str {
        match &self.configured_hypervisor {
            Some(name) if self.gate_enabled("ConfigurableHypervisor", false) => name,
            _ => KVM_HYPERVISOR,
        }
    }

    /// Whether a feature gate is on, with KubeVirt's precedence (pkg/virt-config/featuregate):
    /// listed in `feature_gates` → on (even if also disabled); listed in
    /// `disabled_feature_gates` → off; otherwise its default (Beta/GA gates are on).
    pub(crate) fn gate_enabled(&self, gate: &str, on_by_default: bool) -> bool {
        if self.feature_gates.iter().any(|g| g == gate) {
            return true;
        }
        if self.disabled_feature_gates.iter().any(|g| g == gate) {
            return false;
        }
        on_by_default
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_kubevirts() {
        let s = ClusterSettings::default();
        assert_eq!((s.cpu_allocation_ratio, s.memory_overcommit), (10, 100));
        assert_eq!(s.overhead_ratio(), None);
    }

    /// `instancetype.referencePolicy` (virt-config.go:536-543, the CRD's enum) and what the
    /// VMI spec defaults read: `machineType` over the architecture's, an empty one replacing
    /// the default (Go's decoding), `cpuRequest` kept only when not 100m, `evictionStrategy`.
    #[test]
    fn reads_reference_policy_and_spec_defaults() {
        let cr = |cfg: serde_json::Value| {
            ClusterSettings::from_kubevirt_cr(
                &json!({"kind": "KubeVirt", "spec": {"configuration": cfg}}),
            )
        };
        let s = cr(json!({})).unwrap();
        assert_eq!(s.instancetype_reference_policy, ReferencePolicy::Reference);
        assert_eq!(s.spec_defaults, Default::default());
        for (text, policy) in [
            ("reference", ReferencePolicy::Reference),
            ("expand", ReferencePolicy::Expand),
            ("expandAll", ReferencePolicy::ExpandAll),
        ] {
            let s = cr(json!({"instancetype": {"referencePolicy": text}})).unwrap();
            assert_eq!(s.instancetype_reference_policy, policy);
        }
        let e = cr(json!({"instancetype": {"referencePolicy": "Expand"}})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "KubeVirt CR: field spec.configuration.instancetype.referencePolicy: must be \
             reference, expand or expandAll, found \"Expand\""
        );
        let s = cr(json!({
            "architectureConfiguration": {"arm64": {"machineType": ""},
                                          "amd64": {"machineType": "pc-q35-9.0"}},
            "cpuRequest": "100m",
            "evictionStrategy": "LiveMigrate"
        }))
        .unwrap();
        let d = &s.spec_defaults;
        assert_eq!(d.arch_machine_types["amd64"], "pc-q35-9.0");
        assert_eq!(d.arch_machine_types["arm64"], "");
        assert_eq!(d.arch_machine_types["s390x"], "s390-ccw-virtio");
        assert_eq!(
            (d.cpu_request.as_deref(), d.eviction_strategy.as_str()),
            (None, "LiveMigrate")
        );
        let s = cr(json!({"cpuRequest": "0.5", "machineType": "pc-q35-rhel9.6.0"})).unwrap();
        assert_eq!(s.spec_defaults.cpu_request.as_deref(), Some("500m"));
        assert_eq!(
            s.spec_defaults.machine_type.as_deref(),
            Some("pc-q35-rhel9.6.0")
        );
        assert!(
            cr(json!({"cpuRequest": "lots"}))
                .unwrap_err()
                .to_string()
                .contains("spec.configuration.cpuRequest")
        );
    }

    /// virt-config.go:318-340: per type, the first entry with a non-zero quantity wins; values
    /// are canonical; a bad quantity or a missing type names its field.
    #[test]
    fn reads_support_container_resources() {
        let cr = |entries: serde_json::Value| json!({"kind": "KubeVirt", "spec": {"configuration": {"supportContainerResources": entries}}});
        let s = ClusterSettings::from_kubevirt_cr(&cr(json!([
            {"type": "sidecar", "resources": {"requests": {"cpu": "0", "memory": "0.5Gi"}}},
            {"type": "sidecar", "resources": {"requests": {"cpu": "0.25"}, "limits": {"memory": 100000000}}},
            {"type": "virtiofs", "resources": {}}])))
        .unwrap();
        let q = |kind: &str, limit: bool, res: &str| {
            support_quantity(&s.support_container_resources, kind, limit, res).map(|q| q.0)
        };
        assert_eq!(q("sidecar", false, "memory").as_deref(), Some("512Mi"));
        assert_eq!(q("sidecar", false, "cpu").as_deref(), Some("250m"));
        assert_eq!(q("sidecar", true, "memory").as_deref(), Some("100M"));
        assert_eq!(q("sidecar", true, "cpu"), None);
        assert_eq!(q("virtiofs", false, "cpu"), None);
        let err = |entries| {
            ClusterSettings::from_kubevirt_cr(&cr(entries))
                .unwrap_err()
                .to_string()
        };
        assert!(
            err(json!([{"type": "sidecar", "resources": {"limits": {"cpu": "lots"}}}]))
                .contains("spec.configuration.supportContainerResources[0].resources.limits.cpu"),
        );
        assert!(
            err(json!([{"resources": {}}]))
                .contains("spec.configuration.supportContainerResources[0].type")
        );
    }

    /// The launcher settings' values and their refusals, naming the field.
    #[test]
    fn reads_the_launcher_settings() {
        let cr =
            |cfg: serde_json::Value| json!({"kind": "KubeVirt", "spec": {"configuration": cfg}});
        let s = ClusterSettings::from_kubevirt_cr(&cr(json!({"seccompConfiguration": {
            "virtualMachineInstanceProfile": {"customProfile": {"runtimeDefaultProfile": true}}}})))
        .unwrap();
        assert_eq!(s.vmi_seccomp_profile.unwrap().type_, "RuntimeDefault");
        assert_eq!(s.selinux_launcher_type, None);
        let s = ClusterSettings::from_kubevirt_cr(&cr(json!({"selinuxLauncherType": "spc_t"})))
            .unwrap();
        assert_eq!(s.selinux_launcher_type.as_deref(), Some("spc_t"));
        let s =
            ClusterSettings::from_kubevirt_cr(&cr(json!({"vmStateStorageClass": "rwx"}))).unwrap();
        assert_eq!(s.vm_state_storage_class.as_deref(), Some("rwx"));
        assert_eq!(
            (s.image_pull_policy.as_str(), s.virt_launcher_verbosity),
            ("IfNotPresent", 2)
        );
        let err = |cfg| {
            ClusterSettings::from_kubevirt_cr(&cr(cfg))
                .unwrap_err()
                .to_string()
        };
        assert!(
            err(json!({"selinuxLauncherType": 7}))
                .contains("spec.configuration.selinuxLauncherType")
        );
        assert!(
            err(json!({"imagePullPolicy": "Sometimes"}))
                .contains("spec.configuration.imagePullPolicy")
        );
        assert!(
            err(json!({"developerConfiguration": {"logVerbosity": {"virtLauncher": -1}}}))
                .contains("logVerbosity.virtLauncher")
        );
    }

    #[test]
    fn reads_the_cr() {
        let cr = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "spec": {"configuration": {
            "additionalGuestMemoryOverheadRatio": "1.5",
            "developerConfiguration": {"cpuAllocationRatio": 16, "memoryOvercommit": 150, "featureGates": ["Sidecar"]},
            "network": {"binding": {"mybind": {"computeResourceOverhead": {"requests": {"memory": "10Mi"}},
                "sidecarImage": "registry.example/mybind:1", "networkAttachmentDefinition": "infra/mybind-nad",
                "downwardAPI": "device-info", "migration": {"method": "link-refresh"}}}}
        }}});
        let s = ClusterSettings::from_kubevirt_cr(&cr).unwrap();
        assert_eq!(s.cpu_allocation_ratio, 16);
        assert_eq!(s.memory_overcommit, 150);
        assert_eq!(s.overhead_ratio(), Some(1.5));
        assert_eq!(s.binding_plugin_memory["mybind"], 10 * 1024 * 1024);
        assert_eq!(
            s.network_bindings["mybind"],
            NetworkBindingPlugin {
                sidecar_image: Some("registry.example/mybind:1".into()),
                network_attachment_definition: Some("infra/mybind-nad".into()),
                downward_api: Some("device-info".into()),
                migration_method: Some("link-refresh".into()),
            }
        );
        assert!(s.gate_enabled("Sidecar", false));
        let both = ClusterSettings {
            feature_gates: vec!["G".into()],
            disabled_feature_gates: vec!["G".into(), "H".into()],
            ..Default::default()
        };
        assert!(
            both.gate_enabled("G", false),
            "enabled list wins, as in KubeVirt"
        );
        assert!(!both.gate_enabled("H", true));
        assert!(both.gate_enabled("I", true));
    }

    #[test]
    fn overhead_ratio_below_one_is_rejected_like_kubevirts_webhook() {
        assert_eq!(validate_overhead_ratio("1.5"), Ok(1.5));
        assert!(validate_overhead_ratio("0.5").is_err());
        assert!(validate_overhead_ratio("x").is_err());
        let cr = json!({"kind": "KubeVirt", "spec": {"configuration": {"additionalGuestMemoryOverheadRatio": "0.9"}}});
        let e = ClusterSettings::from_kubevirt_cr(&cr).unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.configuration.additionalGuestMemoryOverheadRatio"),
            "{e}"
        );
    }

    #[test]
    fn bad_cr_names_the_field() {
        let cr = json!({"kind": "KubeVirt", "spec": {"configuration": {"developerConfiguration": {"cpuAllocationRatio": 0}}}});
        let e = ClusterSettings::from_kubevirt_cr(&cr).unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.configuration.developerConfiguration.cpuAllocationRatio"),
            "{e}"
        );
        assert!(ClusterSettings::from_kubevirt_cr(&json!({"kind": "Pod"})).is_err());
    }

    /// The controller's client limit: KubeVirt's 200/400 unless the CR sets it; a field the CR
    /// leaves out keeps its default; a rate or burst that is not positive is refused naming it.
    #[test]
    fn controller_rate_limiter() {
        assert_eq!(
            ClusterSettings::default().controller_rate_limiter,
            TokenBucket {
                qps: 200.0,
                burst: 400
            }
        );
        let cr = |v: serde_json::Value| {
            json!({"kind": "KubeVirt", "spec": {"configuration": {
                "controllerConfiguration": {"restClient": {"rateLimiter": {"tokenBucketRateLimiter": v}}}
            }}})
        };
        let read = |v| ClusterSettings::from_kubevirt_cr(&cr(v)).map(|s| s.controller_rate_limiter);
        assert_eq!(
            read(json!({"qps": 5, "burst": 10})),
            Ok(TokenBucket {
                qps: 5.0,
                burst: 10
            })
        );
        assert_eq!(
            read(json!({"qps": 2.5})),
            Ok(TokenBucket {
                qps: 2.5,
                burst: 400
            })
        );
        for (bad, field) in [
            (json!({"qps": 0, "burst": 10}), "tokenBucketRateLimiter.qps"),
            (
                json!({"qps": 5, "burst": -1}),
                "tokenBucketRateLimiter.burst",
            ),
        ] {
            let e = read(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "spec.configuration.controllerConfiguration.restClient.rateLimiter.{field}"
                )),
                "{e}"
            );
        }
    }

    /// `permittedHostDevices` (types.go:3678-3730): unset or null is no check; set, the
    /// resource names of its three lists, in order; an entry without a string `resourceName`
    /// names its field.
    #[test]
    fn reads_permitted_host_devices() {
        let read = |v: serde_json::Value| {
            ClusterSettings::from_kubevirt_cr(&json!({"kind": "KubeVirt", "spec": {
                "configuration": {"permittedHostDevices": v}}}))
            .map(|s| s.permitted_host_devices)
        };
        assert_eq!(ClusterSettings::default().permitted_host_devices, None);
        assert_eq!(read(json!(null)), Ok(None));
        assert_eq!(read(json!({})), Ok(Some(vec![])));
        assert_eq!(
            read(json!({
                "usb": [{"resourceName": "kubevirt.io/storage",
                         "selectors": [{"vendor": "46f4", "product": "0001"}]}],
                "pciHostDevices": [{"pciVendorSelector": "10DE:1EB8",
                                    "resourceName": "nvidia.com/TU104GL_Tesla_T4"}],
                "mediatedDevices": [{"mdevNameSelector": "GRID T4-1Q",
                                     "resourceName": "nvidia.com/GRID_T4-1Q"}]})),
            Ok(Some(vec![
                "nvidia.com/TU104GL_Tesla_T4".to_string(),
                "nvidia.com/GRID_T4-1Q".to_string(),
                "kubevirt.io/storage".to_string(),
            ]))
        );
        let e = read(json!({"pciHostDevices": [{"pciVendorSelector": "10DE:1EB8"}]}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.configuration.permittedHostDevices.pciHostDevices[0].resourceName"),
            "{e}"
        );
        assert!(read(json!({"usb": {}})).is_err());
        assert!(read(json!([])).is_err());
    }

    /// `minimumClusterTSCFrequency` (virt-config.go:310-312): unset by default, any integer
    /// taken (the hinter refuses one not above 0, hinter.go:51-56), anything else refused
    /// naming the field.
    #[test]
    fn reads_the_minimum_cluster_tsc_frequency() {
        let read = |dev: serde_json::Value| {
            ClusterSettings::from_kubevirt_cr(&json!({"kind": "KubeVirt",
                "spec": {"configuration": {"developerConfiguration": dev}}}))
        };
        assert_eq!(read(json!({})).unwrap().minimum_cluster_tsc_frequency, None);
        for v in [2_000_000_000_i64, 0, -1] {
            let s = read(json!({"minimumClusterTSCFrequency": v})).unwrap();
            assert_eq!(s.minimum_cluster_tsc_frequency, Some(v));
        }
        let e = read(json!({"minimumClusterTSCFrequency": "fast"}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("developerConfiguration.minimumClusterTSCFrequency"),
            "{e}"
        );
    }

    /// The disk-verification limit (configuration.go:183-197: 2000Mi unless set; a
    /// `diskVerification` without `memoryLimit` refused, naming the field) and the hypervisor
    /// name (virt-config.go:557-576: the first entry's, only with `ConfigurableHypervisor`).
    #[test]
    fn reads_disk_verification_and_hypervisor() {
        let read = |cfg: serde_json::Value| {
            ClusterSettings::from_kubevirt_cr(
                &json!({"kind": "KubeVirt", "spec": {"configuration": cfg}}),
            )
        };
        let d = read(json!({})).unwrap();
        assert_eq!(
            (d.disk_memory_limit_bytes, d.hypervisor_name()),
            (2_097_152_000, "kvm")
        );
        let s = read(json!({"developerConfiguration": {
            "diskVerification": {"memoryLimit": "1500M"}}}))
        .unwrap();
        assert_eq!(s.disk_memory_limit_bytes, 1_500_000_000);
        let s = read(json!({"developerConfiguration": {"diskVerification": null}})).unwrap();
        assert_eq!(s.disk_memory_limit_bytes, 2_097_152_000);
        let e = read(json!({"developerConfiguration": {"diskVerification": {}}}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.configuration.developerConfiguration.diskVerification.memoryLimit"),
            "{e}"
        );
        let direct = json!([{"name": "hyperv-direct"}]);
        let s = read(json!({"hypervisors": direct})).unwrap();
        assert_eq!(s.hypervisor_name(), "kvm", "the Alpha gate is off");
        let s = read(json!({"hypervisors": direct,
            "developerConfiguration": {"featureGates": ["ConfigurableHypervisor"]}}))
        .unwrap();
        assert_eq!(s.hypervisor_name(), "hyperv-direct");
        for unnamed in [json!([]), json!([{}]), json!([{"name": ""}])] {
            let s = read(json!({"hypervisors": unnamed,
                "developerConfiguration": {"featureGates": ["ConfigurableHypervisor"]}}))
            .unwrap();
            assert_eq!(s.hypervisor_name(), "kvm", "{unnamed}");
        }
        assert!(
            read(json!({"hypervisors": [{"name": 1}]}))
                .unwrap_err()
                .to_string()
                .contains("spec.configuration.hypervisors[0].name")
        );
    }

    /// `GetOVMFPath` (virt-config.go:290-304): the deprecated `ovmfPath` wins for every
    /// architecture, then the architecture's own; empty values keep the defaults.
    #[test]
    fn reads_ovmf_paths() {
        let read = |cfg: serde_json::Value| {
            ClusterSettings::from_kubevirt_cr(
                &json!({"kind": "KubeVirt", "spec": {"configuration": cfg}}),
            )
        };
        let d = ClusterSettings::default();
        assert_eq!(
            (
                d.ovmf_path("amd64"),
                d.ovmf_path("arm64"),
                d.ovmf_path("s390x"),
                d.ovmf_path("")
            ),
            (
                "/usr/share/edk2/ovmf",
                "/usr/share/AAVMF",
                "",
                "/usr/share/edk2/ovmf"
            )
        );
        let s = read(json!({"architectureConfiguration": {
            "amd64": {"ovmfPath": "/opt/ovmf"}, "arm64": {"ovmfPath": ""}}}))
        .unwrap();
        assert_eq!(
            (s.ovmf_path(""), s.ovmf_path("amd64"), s.ovmf_path("arm64")),
            ("/opt/ovmf", "/opt/ovmf", "/usr/share/AAVMF")
        );
        let s = read(json!({"ovmfPath": "/legacy",
            "architectureConfiguration": {"amd64": {"ovmfPath": "/opt/ovmf"}}}))
        .unwrap();
        assert_eq!(
            (s.ovmf_path("amd64"), s.ovmf_path("s390x")),
            ("/legacy", "/legacy")
        );
        let e = read(json!({"architectureConfiguration": {"arm64": {"ovmfPath": 3}}}))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.configuration.architectureConfiguration.arm64.ovmfPath"),
            "{e}"
        );
    }

    /// virt-config.go:514-517: unset or `LiveUpdate` is live update, `Stage` is not; anything
    /// else is refused naming the field.
    #[test]
    fn vm_rollout_strategy() {
        assert!(ClusterSettings::default().vm_rollout_strategy_live_update);
        let cr = |v: serde_json::Value| json!({"kind": "KubeVirt", "spec": {"configuration": {"vmRolloutStrategy": v}}});
        let read = |v| ClusterSettings::from_kubevirt_cr(&cr(v));
        assert!(
            !read(json!("Stage"))
                .unwrap()
                .vm_rollout_strategy_live_update
        );
        assert!(
            read(json!("LiveUpdate"))
                .unwrap()
                .vm_rollout_strategy_live_update
        );
        let e = read(json!("Sometimes")).unwrap_err();
        assert!(
            e.to_string()
                .contains("spec.configuration.vmRolloutStrategy"),
            "{e}"
        );
    }
}
