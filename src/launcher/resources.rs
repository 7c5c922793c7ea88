//! Resources of the virt-launcher `compute` container, as a pure function of the VMI, the cluster
//! settings, the memory overhead and a little knowledge about the namespace.
//!
//! KubeVirt v1.9.0 builds them with a `ResourceRenderer` (pkg/virt-controller/services/
//! renderresources.go) fed by `newResourceRenderer` and `VMIResourcePredicates`
//! (template.go:1633-1674). The rules run in this order (facts §4.6):
//!
//! 1. ephemeral storage: request += `50M`, limit += `50M` if a limit exists (renderresources.go:104-118);
//! 2. virtualization devices go into the **limits** (`devices.kubevirt.io/kvm` unless emulation,
//!    `tun`, `vhost-net`, `vhost-vsock`; renderresources.go:466-491);
//! 3. memory request defaulting when the VMI has none: limit → request, else `memory.guest` (or the
//!    hugepage size) × 100 / memoryOvercommit (`WithMemoryRequests`, 263-293);
//! 4. CPU: pinned (`WithCPUPinning`, 319-361) or shared (`WithoutDedicatedCPU`, 128-147);
//! 5. memory overhead (`WithMemoryOverhead`, 295-308) or hugepages (`WithHugePages`, 220-261);
//! 6. automatic memory limit (`WithAutoMemoryLimits`, 310-317);
//! 7. device-plugin GPUs and host devices, DRA claims, SEV, TDX, persistent reservation, IOMMUFD.
//!
//! Like KubeVirt, values the user wrote in `spec.domain.resources` (after the rules that rewrite
//! them) win over values the rules *calculated* (`Requests()`/`Limits()` overlay `vmRequests` on
//! `calculatedRequests`, renderresources.go:80-92).
//!
//! Quantities follow apimachinery's arithmetic, including its format rules: a sum keeps the
//! format of the left operand unless that operand is zero, in which case it takes the right
//! operand's format (`Quantity.Add`). So a `1Gi` request plus 270Mi of overhead prints `1294Mi`,
//! a `1G` or `1024M` request plus overhead prints decimal bytes (`1282971493`), and a VMI without
//! a memory request gets the overhead's (DecimalSI) format.
//!
//! Not modelled (no input for them here): multus network resource names (only looked up by
//! KubeVirt when the Beta gate `ExternalNetResourceInjection` is disabled — it is on by default,
//! so the default KubeVirt renders none either), `permittedHostDevices` validation,
//! `supportContainerResources`, the Hyper-V (`mshv`) hypervisor device.

use super::settings::ClusterSettings;
use crate::api::quantity::{Format, ParsedQuantity, QuantityError};
use crate::api::vmi::{Cpu, VirtualMachineInstance, VirtualMachineInstanceSpec};
use k8s_openapi::api::core::v1::{ResourceClaim, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Resource name prefix of KubeVirt's device plugins (template.go:85).
pub const DEVICE_PREFIX: &str = "devices.kubevirt.io";
/// `/dev/kvm` (the KVM hypervisor's device, pkg/hypervisor/kvm).
pub const KVM_DEVICE: &str = "devices.kubevirt.io/kvm";
/// `/dev/net/tun`.
pub const TUN_DEVICE: &str = "devices.kubevirt.io/tun";
/// `/dev/vhost-net`.
pub const VHOST_NET_DEVICE: &str = "devices.kubevirt.io/vhost-net";
/// `/dev/vhost-vsock`.
pub const VHOST_VSOCK_DEVICE: &str = "devices.kubevirt.io/vhost-vsock";
/// AMD SEV / SEV-SNP.
pub const SEV_DEVICE: &str = "devices.kubevirt.io/sev";
/// Intel TDX.
pub const TDX_DEVICE: &str = "devices.kubevirt.io/tdx";
/// SCSI persistent reservation helper.
pub const PR_HELPER_DEVICE: &str = "devices.kubevirt.io/pr-helper";
/// IOMMUFD (Alpha gate `IOMMUFD`).
pub const IOMMUFD_DEVICE: &str = "devices.kubevirt.io/iommufd";
/// Added to the ephemeral-storage request (and limit, if any), template.go:117.
pub const EPHEMERAL_STORAGE_OVERHEAD: &str = "50M";
/// Memory limit = request × this ratio when a limit is added automatically (template.go:121).
pub const DEFAULT_MEMORY_LIMIT_RATIO: f64 = 2.0;
/// Namespace label overriding [`DEFAULT_MEMORY_LIMIT_RATIO`] (types.go:1434).
pub const AUTO_MEMORY_LIMITS_RATIO_LABEL: &str = "alpha.kubevirt.io/auto-memory-limits-ratio";
/// VMI annotation: pad an isolated emulator thread to an even CPU count (types.go:1440).
pub const EMULATOR_THREAD_COMPLETE_TO_EVEN_PARITY: &str =
    "alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity";

/// What the renderer needs to know about the VMI's namespace. `Default` means "no ResourceQuota,
/// no labels, PVCs unknown".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceContext {
    /// Labels of the namespace (for `alpha.kubevirt.io/auto-memory-limits-ratio`).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// A ResourceQuota in the namespace has `spec.hard["limits.cpu"]` (→ automatic CPU limit,
    /// template.go:1753-1769).
    #[serde(default)]
    pub quota_limits_cpu: bool,
    /// A ResourceQuota in the namespace has `spec.hard["limits.memory"]` (→ automatic memory limit).
    #[serde(default)]
    pub quota_limits_memory: bool,
    /// The namespace matches the KubeVirt CR's `autoCPULimitNamespaceLabelSelector`
    /// (template.go:1576-1612; the caller evaluates the selector).
    #[serde(default)]
    pub auto_cpu_limit_selector_matches: bool,
    /// PersistentVolumeClaims of the namespace by name, if known. `None`: unknown — every claim is
    /// assumed to exist in filesystem mode without shared access. `Some`: a claim missing from
    /// the map makes the pod renderer fail with `didn't find PVC <name>` like KubeVirt
    /// (rendervolumes.go:501-531).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvcs: Option<BTreeMap<String, PvcInfo>>,
}

/// The facts about a PVC the pod renderer uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PvcInfo {
    /// `spec.volumeMode: Block` → a `volumeDevices` entry at `/dev/<volume>` instead of a mount.
    pub block: bool,
    /// Access modes include ReadWriteMany (→ listed in `SHARED_FILESYSTEM_PATHS`).
    pub shared: bool,
}

/// A DRA claim consumed by the `compute` container (`containers[].resources.claims[]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimRef {
    /// Pod-level claim name (`spec.resourceClaims[].name`).
    pub name: String,
    /// Request inside the claim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<String>,
}

/// The `compute` container's resources. Quantities are Kubernetes canonical text (`300m`,
/// `1294Mi`, `1282971493`); resource names are sorted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ComputeResources {
    /// `resources.requests`.
    pub requests: BTreeMap<String, Quantity>,
    /// `resources.limits`.
    pub limits: BTreeMap<String, Quantity>,
    /// `resources.claims` (DRA GPUs / host devices / networks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<ClaimRef>,
}

impl ComputeResources {
    /// As k8s-openapi `ResourceRequirements` (empty maps/lists become `None`).
    pub fn to_resource_requirements(&self) -> ResourceRequirements {
        ResourceRequirements {
            requests: (!self.requests.is_empty()).then(|| self.requests.clone()),
            limits: (!self.limits.is_empty()).then(|| self.limits.clone()),
            claims: (!self.claims.is_empty()).then(|| {
                self.claims
                    .iter()
                    .map(|c| ResourceClaim {
                        name: c.name.clone(),
                        request: c.request.clone(),
                    })
                    .collect()
            }),
        }
    }

    /// A request parsed back to a number of whole units (bytes for memory, `Value()` rounding
    /// up); `None` when absent or unparseable.
    pub fn request_value(&self, name: &str) -> Option<i64> {
        self.requests
            .get(name)
            .and_then(|q| ParsedQuantity::parse(&q.0).ok())
            .map(|q| q.value())
    }

    /// A limit parsed back to whole units, like [`ComputeResources::request_value`].
    pub fn limit_value(&self, name: &str) -> Option<i64> {
        self.limits
            .get(name)
            .and_then(|q| ParsedQuantity::parse(&q.0).ok())
            .map(|q| q.value())
    }
}

/// Why the resources could not be computed. The field path is relative to the VMI.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// A quantity in the VMI does not parse.
    #[error("{field}: {source}")]
    Quantity {
        /// e.g. `spec.domain.resources.requests.memory`.
        field: String,
        /// The parser's complaint.
        source: QuantityError,
    },
    /// A value that parses but cannot be used (KubeVirt would panic in `resource.MustParse`).
    #[error("{field}: {message}")]
    Invalid {
        /// Field path.
        field: String,
        /// What is wrong.
        message: String,
    },
}

impl ResourceError {
    /// The same error with `prefix` before the field path (a VM's template: `spec.template.`).
    pub fn with_field_prefix(self, prefix: &str) -> Self {
        match self {
            ResourceError::Quantity { field, source } => ResourceError::Quantity {
                field: format!("{prefix}{field}"),
                source,
            },
            ResourceError::Invalid { field, message } => ResourceError::Invalid {
                field: format!("{prefix}{field}"),
                message,
            },
        }
    }
}

// ---------------------------------------------------------------------------------------------
// apimachinery-style arithmetic

/// `Quantity.Add`: the sum keeps `a`'s format unless `a` is zero (then `b`'s format).
pub(crate) fn q_add(a: ParsedQuantity, b: ParsedQuantity) -> ParsedQuantity {
    let format = if a.is_zero() { b.format } else { a.format };
    ParsedQuantity {
        nanos: a.nanos.saturating_add(b.nanos),
        format,
    }
}

/// `Quantity.Sub`: like [`q_add`].
pub(crate) fn q_sub(a: ParsedQuantity, b: ParsedQuantity) -> ParsedQuantity {
    let format = if a.is_zero() { b.format } else { a.format };
    ParsedQuantity {
        nanos: a.nanos.saturating_sub(b.nanos),
        format,
    }
}

/// A zero quantity as Go's zero value / `NewScaledQuantity(0, Kilo)` (format decided by the
/// first addition).
fn zero() -> ParsedQuantity {
    ParsedQuantity::from_units(0, Format::DecimalSI)
}

fn parse_field(q: &Quantity, field: &str) -> Result<ParsedQuantity, ResourceError> {
    ParsedQuantity::parse(&q.0).map_err(|source| ResourceError::Quantity {
        field: field.to_string(),
        source,
    })
}

/// Go's `fmt.Sprintf("%g", v)` for a float64: the shortest decimal that round-trips, in
/// exponent form (`1e+06`, `1.5e-05`) when the decimal exponent is < -4 or ≥ 6 (strconv/ftoa.go:
/// with the shortest precision, `%e` is chosen when `exp < -4 || exp >= 6`).
pub(crate) fn go_format_g(v: f64) -> String {
    if v == 0.0 {
        return "0".to_string();
    }
    if v.is_nan() {
        return "NaN".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "+Inf" } else { "-Inf" }.to_string();
    }
    // Rust's `{:e}` prints the shortest round-trip digits: "3.3333333333333335e-1".
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
    } else {
        // Rust's Display is the shortest round-trip decimal without an exponent.
        format!("{v}")
    }
}

// ---------------------------------------------------------------------------------------------
// VMI traits

/// `hardware.GetNumberOfVCPUs` (pkg/util/hardware/hw_utils.go:87-104): cores × sockets × threads
/// with zero factors skipped; uint32 arithmetic (wrapping, as in Go).
pub fn vcpus(cpu: &Cpu) -> i64 {
    let mut n: u32 = cpu.cores.unwrap_or(0);
    for f in [cpu.sockets.unwrap_or(0), cpu.threads.unwrap_or(0)] {
        if f != 0 {
            n = if n == 0 { f } else { n.wrapping_mul(f) };
        }
    }
    i64::from(n)
}

/// `vmi.IsCPUDedicated()`: `domain.cpu.dedicatedCpuPlacement` (types.go:568-570).
pub fn is_cpu_dedicated(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.domain
        .cpu
        .as_ref()
        .and_then(|c| c.dedicated_cpu_placement)
        .unwrap_or(false)
}

fn resource(
    spec: &VirtualMachineInstanceSpec,
    limits: bool,
    name: &str,
) -> Result<Option<ParsedQuantity>, ResourceError> {
    let resources = spec.domain.resources.as_ref();
    let list = if limits {
        resources.and_then(|r| r.limits.as_ref())
    } else {
        resources.and_then(|r| r.requests.as_ref())
    };
    match list.and_then(|l| l.get(name)) {
        None => Ok(None),
        Some(q) => {
            let kind = if limits { "limits" } else { "requests" };
            parse_field(q, &format!("spec.domain.resources.{kind}.{name}")).map(Some)
        }
    }
}

/// `vmi.WantsToHaveQOSGuaranteed()` (types.go:577-586): memory (request 0 and limit ≠ 0, or
/// request == limit ≠ 0) and CPU (request ≠ 0 and request == limit).
///
/// Errors: an unparseable CPU/memory request or limit.
pub fn wants_guaranteed_qos(spec: &VirtualMachineInstanceSpec) -> Result<bool, ResourceError> {
    let nanos = |q: Option<ParsedQuantity>| q.map(|q| q.nanos).unwrap_or(0);
    let mem_req = nanos(resource(spec, false, "memory")?);
    let mem_lim = nanos(resource(spec, true, "memory")?);
    let cpu_req = nanos(resource(spec, false, "cpu")?);
    let cpu_lim = nanos(resource(spec, true, "cpu")?);
    let memory = (mem_req == 0 && mem_lim != 0) || (mem_req != 0 && mem_req == mem_lim);
    let cpu = cpu_req != 0 && cpu_req == cpu_lim;
    Ok(memory && cpu)
}

pub(crate) fn has_hugepages(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.domain
        .memory
        .as_ref()
        .is_some_and(|m| m.hugepages.is_some())
}

/// `supplementalPoolThreadCount`, whatever the policy (`getIOThreadsCount`, renderresources.go:120-126).
fn io_thread_count(spec: &VirtualMachineInstanceSpec) -> i64 {
    spec.domain
        .io_threads
        .as_ref()
        .and_then(|t| t.supplemental_pool_thread_count)
        .map(i64::from)
        .unwrap_or(0)
}

/// Interfaces exist, or the pod interface is auto-attached (`RequiresTunDevice`,
/// pkg/network/vmispec/devices.go:30-34).
pub(crate) fn requires_tun(spec: &VirtualMachineInstanceSpec) -> bool {
    let d = &spec.domain.devices;
    d.interfaces.as_ref().is_some_and(|i| !i.is_empty())
        || d.autoattach_pod_interface != Some(false)
}

/// Some interface has model "" or `virtio` (`hasVirtioIface`, pkg/network/vmispec/interface.go:174-181).
pub(crate) fn has_virtio_iface(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.domain
        .devices
        .interfaces
        .as_ref()
        .is_some_and(|ifaces| {
            ifaces
                .iter()
                .any(|i| matches!(i.model.as_deref(), None | Some("") | Some("virtio")))
        })
}

/// `devices.autoattachVSOCK: true` (`util.IsAutoAttachVSOCK`).
pub(crate) fn autoattach_vsock(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.domain.devices.autoattach_vsock == Some(true)
}

/// `launchSecurity.sev` or `.snp` (`IsSEVVMI`, pkg/util/amd64.go:22-27).
pub(crate) fn is_sev(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.domain
        .launch_security
        .as_ref()
        .is_some_and(|l| l.sev.is_some() || l.snp.is_some())
}

/// `launchSecurity.tdx` (`IsTDXVMI`).
pub(crate) fn is_tdx(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.domain
        .launch_security
        .as_ref()
        .is_some_and(|l| l.tdx.is_some())
}

/// A `lun` disk with `reservation: true` (pkg/storage/reservation/pr.go:62-73).
pub(crate) fn has_persistent_reservation(spec: &VirtualMachineInstanceSpec) -> bool {
    spec.domain.devices.disks.as_ref().is_some_and(|disks| {
        disks.iter().any(|d| {
            d.extra
                .get("lun")
                .and_then(|l| l.get("reservation"))
                .and_then(|r| r.as_bool())
                .unwrap_or(false)
        })
    })
}

fn claim_request(extra: &crate::api::Extra, key: &str) -> Option<ClaimRef> {
    let c = extra.get(key)?;
    let name = c.get("claimName")?.as_str()?.to_string();
    let request = c
        .get("requestName")
        .and_then(|r| r.as_str())
        .map(str::to_string);
    Some(ClaimRef { name, request })
}

// ---------------------------------------------------------------------------------------------
// The renderer

type List = BTreeMap<String, ParsedQuantity>;

/// Mirror of KubeVirt's `ResourceRenderer`: what the VMI asked for (rewritten by some rules) and
/// what the rules calculated.
struct Renderer {
    vm_limits: List,
    vm_requests: List,
    calc_limits: List,
    calc_requests: List,
    claims: Vec<ClaimRef>,
}

impl Renderer {
    fn merged(&self, limits: bool) -> List {
        let (calc, vm) = if limits {
            (&self.calc_limits, &self.vm_limits)
        } else {
            (&self.calc_requests, &self.vm_requests)
        };
        let mut out = calc.clone();
        out.extend(vm.iter().map(|(k, v)| (k.clone(), *v)));
        out
    }

    /// `requestResource` on the merged view, then copy it into the calculated lists
    /// (renderresources.go:150-160, 433-457): +1 in requests and limits.
    fn request_device(&mut self, names: &[String]) {
        let mut limits = self.merged(true);
        let mut requests = self.merged(false);
        let one = ParsedQuantity::from_units(1, Format::DecimalSI);
        for name in names {
            for list in [&mut limits, &mut requests] {
                let v = list.get(name).map(|v| q_add(*v, one)).unwrap_or(one);
                list.insert(name.clone(), v);
            }
        }
        self.calc_limits.extend(limits);
        self.calc_requests.extend(requests);
    }
}

fn parse_list(
    list: Option<&BTreeMap<String, Quantity>>,
    kind: &str,
) -> Result<List, ResourceError> {
    let mut out = List::new();
    for (name, q) in list.into_iter().flatten() {
        out.insert(
            name.clone(),
            parse_field(q, &format!("spec.domain.resources.{kind}.{name}"))?,
        );
    }
    Ok(out)
}

/// The `compute` container's resources for `vmi`, given the launcher memory overhead in bytes
/// (`CalculateMemoryOverhead`, i.e. [`super::overhead::memory_overhead`]'s `total_bytes`).
///
/// Pure: the namespace facts come from `ns`. Rules and their order: see the module docs.
///
/// Errors: a quantity in `spec.domain.resources`, `spec.domain.memory.guest` or
/// `spec.domain.cpu` that does not parse or cannot be rendered, named by field path.
pub fn compute_resources(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    overhead_bytes: i64,
    ns: &NamespaceContext,
) -> Result<ComputeResources, ResourceError> {
    let spec = &vmi.spec;
    let res = spec.domain.resources.as_ref();
    let user_requests = res.and_then(|r| r.requests.as_ref());
    let user_limits = res.and_then(|r| r.limits.as_ref());
    let mut r = Renderer {
        vm_limits: parse_list(user_limits, "limits")?,
        vm_requests: parse_list(user_requests, "requests")?,
        calc_limits: List::new(),
        calc_requests: List::new(),
        claims: Vec::new(),
    };
    // The overhead is a DecimalSI quantity in KubeVirt (NewScaledQuantity(0, Kilo) + terms).
    let overhead = ParsedQuantity::from_units(overhead_bytes, Format::DecimalSI);
    let memory = spec.domain.memory.as_ref();
    let guest = match memory.and_then(|m| m.guest.as_ref()) {
        Some(q) => Some(parse_field(q, "spec.domain.memory.guest")?),
        None => None,
    };

    // 1. WithEphemeralStorageRequest (renderresources.go:104-118).
    let eph = ParsedQuantity::parse(EPHEMERAL_STORAGE_OVERHEAD).map_err(|source| {
        ResourceError::Quantity {
            field: "ephemeral-storage overhead".into(),
            source,
        }
    })?;
    let key = "ephemeral-storage".to_string();
    let req = r.vm_requests.get(&key).copied().unwrap_or_else(zero);
    r.vm_requests.insert(key.clone(), q_add(req, eph));
    if let Some(lim) = r.vm_limits.get(&key).copied() {
        r.vm_limits.insert(key, q_add(lim, eph));
    }

    // 2. WithVirtualizationResources(getRequiredResources) (renderresources.go:466-497).
    let one = ParsedQuantity::from_units(1, Format::DecimalSI);
    let emulation = settings.use_emulation;
    if requires_tun(spec) {
        r.vm_limits.insert(TUN_DEVICE.into(), one);
    }
    if has_virtio_iface(spec) && !emulation {
        r.vm_limits.insert(VHOST_NET_DEVICE.into(), one);
    }
    if !emulation {
        r.vm_limits.insert(KVM_DEVICE.into(), one);
    }
    if autoattach_vsock(spec) {
        r.vm_limits.insert(VHOST_VSOCK_DEVICE.into(), one);
    }

    // 3. emptyMemoryRequest → WithMemoryRequests (renderresources.go:263-293).
    let request_empty = r.vm_requests.get("memory").is_none_or(|q| q.is_zero());
    if request_empty {
        let limit = r.vm_limits.get("memory").copied();
        let request = r.vm_requests.get("memory").copied();
        if let Some(limit) = limit
            && !limit.is_zero()
            && request.is_none_or(|q| q.is_zero())
        {
            r.vm_requests.insert("memory".into(), limit);
        }
        if !r.vm_requests.contains_key("memory") {
            let base = if guest.is_some() {
                guest
            } else {
                memory
                    .and_then(|m| m.hugepages.as_ref())
                    .and_then(|h| h.page_size.as_deref())
                    .and_then(|p| ParsedQuantity::parse(p).ok())
            };
            if let Some(base) = base
                && base.value() > 0
            {
                let value = if settings.memory_overcommit == 100 {
                    base
                } else {
                    if settings.memory_overcommit == 0 {
                        return Err(ResourceError::Invalid {
                            field: "spec.configuration.developerConfiguration.memoryOvercommit"
                                .into(),
                            message: "must be positive".into(),
                        });
                    }
                    let v = i128::from(base.value()) * 100 / i128::from(settings.memory_overcommit);
                    let v = i64::try_from(v).unwrap_or(i64::MAX);
                    ParsedQuantity::from_units(v, base.format)
                };
                r.vm_requests.insert("memory".into(), value);
            }
        }
    }

    // 4. CPU.
    if is_cpu_dedicated(spec) {
        // WithCPUPinning (renderresources.go:319-361).
        let cpu = spec.domain.cpu.clone().unwrap_or_default();
        let n = vcpus(&cpu);
        let io = io_thread_count(spec);
        if n != 0 {
            let total = ParsedQuantity::from_units(n + io, Format::BinarySI);
            r.vm_limits.insert("cpu".into(), total);
            r.vm_requests.insert("cpu".into(), total);
        } else {
            let io = ParsedQuantity::from_units(io, Format::BinarySI);
            if let Some(l) = r.vm_limits.get("cpu").copied() {
                r.vm_limits.insert("cpu".into(), q_add(l, io));
            }
            if let Some(q) = r.vm_requests.get("cpu").copied() {
                r.vm_requests.insert("cpu".into(), q_add(q, io));
            }
        }
        if cpu.isolate_emulator_thread == Some(true) {
            // additionalCPUs counts only with ioThreadsPolicy supplementalPool (template.go:1617-1623).
            let additional = if spec.domain.io_threads_policy.as_deref() == Some("supplementalPool")
            {
                io
            } else {
                0
            };
            let limits = r.vm_limits.get("cpu").copied().unwrap_or_else(zero);
            let parity = vmi
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(EMULATOR_THREAD_COMPLETE_TO_EVEN_PARITY));
            let emu = if parity && (limits.value().wrapping_add(additional)) % 2 == 0 {
                2
            } else {
                1
            };
            let emu = ParsedQuantity::from_units(emu, Format::BinarySI);
            r.vm_limits.insert("cpu".into(), q_add(limits, emu));
            if let Some(q) = r.vm_requests.get("cpu").copied() {
                r.vm_requests.insert("cpu".into(), q_add(q, emu));
            }
        }
        if let Some(mem) = r.vm_requests.get("memory").copied() {
            r.vm_limits.insert("memory".into(), mem);
        }
    } else {
        // WithoutDedicatedCPU (renderresources.go:128-147).
        let n = spec.domain.cpu.as_ref().map(vcpus).unwrap_or(1);
        let total = n + io_thread_count(spec);
        let ratio = settings.cpu_allocation_ratio;
        if total != 0 && ratio > 0 {
            let val = total as f64 / f64::from(ratio);
            let text = if val < 1.0 {
                format!("{}m", go_format_g(val * 1000.0))
            } else {
                go_format_g(val)
            };
            let q = ParsedQuantity::parse(&text).map_err(|source| ResourceError::Quantity {
                field: format!(
                    "spec.domain.cpu ({total} vCPUs / cpuAllocationRatio {ratio} = {text:?})"
                ),
                source,
            })?;
            r.calc_requests.insert("cpu".into(), q);
            let user_cpu_limit = user_limits.is_some_and(|l| l.contains_key("cpu"));
            let auto_cpu_limits =
                !user_cpu_limit && (ns.quota_limits_cpu || ns.auto_cpu_limit_selector_matches);
            if auto_cpu_limits {
                r.calc_limits.insert(
                    "cpu".into(),
                    ParsedQuantity::from_units(total, Format::DecimalSI),
                );
            }
        }
    }

    // 5. Memory overhead or hugepages.
    if let Some(hp) = memory.and_then(|m| m.hugepages.as_ref()) {
        // WithHugePages (renderresources.go:220-261).
        let page_size = hp.page_size.clone().unwrap_or_default();
        let hp_name = format!("hugepages-{page_size}");
        let req = r
            .vm_requests
            .get("memory")
            .copied()
            .unwrap_or_else(|| ParsedQuantity::from_units(0, Format::BinarySI));
        let lim = r.vm_limits.get("memory").copied();
        let mut hp_req = req;
        if let Some(g) = guest
            && req.value() > g.value()
        {
            hp_req = g;
        }
        r.calc_requests.insert(hp_name.clone(), hp_req);
        r.calc_limits.insert(hp_name, hp_req);
        let mut req_diff = zero();
        let mut lim_diff = zero();
        if let Some(g) = guest {
            if req.value() > g.value() {
                req_diff = q_sub(q_add(req_diff, req), g);
            }
            if let Some(l) = lim
                && l.value() > g.value()
            {
                lim_diff = q_sub(q_add(lim_diff, l), g);
            }
        }
        r.vm_requests
            .insert("memory".into(), q_add(req_diff, overhead));
        if lim.is_some() {
            r.vm_limits
                .insert("memory".into(), q_add(lim_diff, overhead));
        }
    } else {
        // WithMemoryOverhead (renderresources.go:295-308).
        let overcommit = res
            .and_then(|r| r.overcommit_guest_overhead)
            .unwrap_or(false);
        let mut req = r.vm_requests.get("memory").copied().unwrap_or_else(zero);
        if !overcommit {
            req = q_add(req, overhead);
        }
        r.vm_requests.insert("memory".into(), req);
        if let Some(l) = r.vm_limits.get("memory").copied() {
            r.vm_limits.insert("memory".into(), q_add(l, overhead));
        }
    }

    // 6. doesVMIRequireAutoMemoryLimits → WithAutoMemoryLimits (renderresources.go:310-317, 731-763).
    let user_mem_limit = user_limits.is_some_and(|l| l.contains_key("memory"));
    if !user_mem_limit && ns.quota_limits_memory {
        let ratio = memory_limits_ratio(&ns.labels);
        let req = r.vm_requests.get("memory").copied().unwrap_or_else(zero);
        // int64(float64(request.Value()) * ratio): truncation towards zero.
        let value = (req.value() as f64 * ratio) as i64;
        r.calc_limits.insert(
            "memory".into(),
            ParsedQuantity::from_units(value, req.format),
        );
    }

    // 7. Device plugins, DRA, SEV, TDX, persistent reservation, IOMMUFD (template.go:1641-1672).
    let devices = &spec.domain.devices;
    let gpus = devices.gpus.as_deref().unwrap_or_default();
    let host_devices = devices.host_devices.as_deref().unwrap_or_default();
    let plugin_names = |list: &[crate::api::vmi::NamedDevice]| -> Vec<String> {
        list.iter()
            .filter(|d| {
                d.device_name.as_deref().is_some_and(|n| !n.is_empty())
                    && !d.extra.contains_key("claimRequest")
            })
            .filter_map(|d| d.device_name.clone())
            .collect()
    };
    let dra = |list: &[crate::api::vmi::NamedDevice]| -> Vec<ClaimRef> {
        list.iter()
            .filter(|d| d.device_name.as_deref().unwrap_or("").is_empty())
            .filter_map(|d| claim_request(&d.extra, "claimRequest"))
            .collect()
    };
    let gpu_plugins = plugin_names(gpus);
    if !gpu_plugins.is_empty() {
        r.request_device(&gpu_plugins);
    }
    if settings.gate_enabled("GPUsWithDRA", true) {
        r.claims.extend(dra(gpus));
    }
    let hd_plugins = plugin_names(host_devices);
    if !hd_plugins.is_empty() {
        r.request_device(&hd_plugins);
    }
    if settings.gate_enabled("HostDevicesWithDRA", true) {
        r.claims.extend(dra(host_devices));
    }
    if settings.gate_enabled("NetworkDevicesWithDRA", false) {
        for net in spec.networks.as_deref().unwrap_or_default() {
            if let Some(c) = claim_request(&net.extra, "resourceClaim") {
                r.claims.push(c);
            }
        }
    }
    if is_sev(spec) {
        r.request_device(&[SEV_DEVICE.to_string()]);
    }
    if is_tdx(spec) {
        r.request_device(&[TDX_DEVICE.to_string()]);
    }
    if has_persistent_reservation(spec) {
        r.request_device(&[PR_HELPER_DEVICE.to_string()]);
    }
    if settings.gate_enabled("IOMMUFD", false) {
        r.request_device(&[IOMMUFD_DEVICE.to_string()]);
    }

    let canon = |l: List| -> BTreeMap<String, Quantity> {
        l.into_iter().map(|(k, v)| (k, v.to_quantity())).collect()
    };
    Ok(ComputeResources {
        requests: canon(r.merged(false)),
        limits: canon(r.merged(true)),
        claims: r.claims,
    })
}

/// `getMemoryLimitsRatio` (renderresources.go:731-763): the namespace label
/// `alpha.kubevirt.io/auto-memory-limits-ratio` when it parses as a float ≥ 1, else 2.0.
pub fn memory_limits_ratio(labels: &BTreeMap<String, String>) -> f64 {
    labels
        .get(AUTO_MEMORY_LIMITS_RATIO_LABEL)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|r| *r >= 1.0)
        .unwrap_or(DEFAULT_MEMORY_LIMIT_RATIO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::overhead::memory_overhead;
    use serde_json::json;

    fn vmi(spec: serde_json::Value) -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance",
            "metadata": {"name": "testvmi", "namespace": "default", "uid": "1234"},
            "spec": spec,
        }))
        .unwrap()
    }

    /// KubeVirt's template tests run with ratio 10, overcommit 100, no overhead ratio and a
    /// network-memory stub returning 0 (template_test.go:92-131, 6521-6529).
    fn kubevirt_test_settings() -> ClusterSettings {
        ClusterSettings {
            serial_console_log: false,
            ..ClusterSettings::default()
        }
    }

    fn render_with(
        v: &VirtualMachineInstance,
        s: &ClusterSettings,
        ns: &NamespaceContext,
    ) -> ComputeResources {
        let overhead = memory_overhead(&v.spec, s).unwrap().total_bytes;
        compute_resources(v, s, overhead, ns).unwrap()
    }

    fn render(v: &VirtualMachineInstance) -> ComputeResources {
        render_with(v, &kubevirt_test_settings(), &NamespaceContext::default())
    }

    fn req(r: &ComputeResources, k: &str) -> String {
        r.requests.get(k).map(|q| q.0.clone()).unwrap_or_default()
    }

    fn lim(r: &ComputeResources, k: &str) -> String {
        r.limits.get(k).map(|q| q.0.clone()).unwrap_or_default()
    }

    /// `ToDec().ScaledValue(resource.Mega)`: ceil(bytes / 10^6).
    fn mega(text: &str) -> i64 {
        let b = ParsedQuantity::parse(text).unwrap().value();
        (b + 999_999) / 1_000_000
    }

    #[test]
    fn go_g_formatting_matches_fmt() {
        assert_eq!(go_format_g(0.3), "0.3");
        assert_eq!(go_format_g(300.0), "300");
        assert_eq!(go_format_g(62.5), "62.5");
        assert_eq!(go_format_g(1.1), "1.1");
        assert_eq!(go_format_g(3.0), "3");
        assert_eq!(go_format_g(123456.0), "123456");
        assert_eq!(go_format_g(1_000_000.0), "1e+06");
        assert_eq!(go_format_g(1.5e-5), "1.5e-05");
        assert_eq!(go_format_g(1.0 / 3.0), "0.3333333333333333");
        assert_eq!(go_format_g(0.0001), "0.0001");
    }

    /// template_test.go:2380-2403 ("should calculate vmipod cpu request based on vcpus and
    /// cpu_allocation_ratio"): 3 cores / ratio 10 → `300m`.
    #[test]
    fn cpu_request_3_cores_ratio_10_template_test_2380() {
        let r = render(&vmi(
            json!({"domain": {"devices": {"disableHotplug": true}, "cpu": {"cores": 3}}}),
        ));
        assert_eq!(req(&r, "cpu"), "300m");
        assert_eq!(lim(&r, "cpu"), "");
    }

    /// template_test.go:2404-2428: ratio 1 → `3`.
    #[test]
    fn cpu_request_ratio_1_template_test_2404() {
        let s = ClusterSettings {
            cpu_allocation_ratio: 1,
            ..kubevirt_test_settings()
        };
        let v = vmi(json!({"domain": {"devices": {"disableHotplug": true}, "cpu": {"cores": 3}}}));
        assert_eq!(
            req(&render_with(&v, &s, &NamespaceContext::default()), "cpu"),
            "3"
        );
    }

    /// template_test.go:2450-2481: a user CPU request (150m) overrides the calculated one
    /// (ratio 16, 5 cores).
    #[test]
    fn user_cpu_request_wins_template_test_2450() {
        let s = ClusterSettings {
            cpu_allocation_ratio: 16,
            ..kubevirt_test_settings()
        };
        let v = vmi(
            json!({"domain": {"devices": {"disableHotplug": true}, "cpu": {"cores": 5},
            "resources": {"requests": {"cpu": "150m"}}}}),
        );
        assert_eq!(
            req(&render_with(&v, &s, &NamespaceContext::default()), "cpu"),
            "150m"
        );
    }

    /// facts §4.6: ratio 16 & 1 vCPU → `62500u`; 11 vCPUs / 10 → `1100m`; renderresources_test.go:62-90:
    /// 5 cores → `500m` / `5`, and with auto CPU limits the limit is the vCPU count.
    #[test]
    fn cpu_request_rendering_like_kubevirt() {
        let s16 = ClusterSettings {
            cpu_allocation_ratio: 16,
            ..kubevirt_test_settings()
        };
        let one = vmi(json!({"domain": {"cpu": {"cores": 1}}}));
        assert_eq!(
            req(
                &render_with(&one, &s16, &NamespaceContext::default()),
                "cpu"
            ),
            "62500u"
        );
        let eleven = vmi(json!({"domain": {"cpu": {"cores": 11}}}));
        assert_eq!(req(&render(&eleven), "cpu"), "1100m");
        let five = vmi(json!({"domain": {"cpu": {"cores": 5}}}));
        assert_eq!(req(&render(&five), "cpu"), "500m");
        let quota = NamespaceContext {
            quota_limits_cpu: true,
            ..Default::default()
        };
        let r = render_with(&five, &kubevirt_test_settings(), &quota);
        assert_eq!(
            (req(&r, "cpu"), lim(&r, "cpu")),
            ("500m".into(), "5".into())
        );
        let s1 = ClusterSettings {
            cpu_allocation_ratio: 1,
            ..kubevirt_test_settings()
        };
        let r = render_with(&five, &s1, &quota);
        assert_eq!((req(&r, "cpu"), lim(&r, "cpu")), ("5".into(), "5".into()));
        // No cpu struct at all counts as 1 vCPU; sockets × threads with zero cores.
        assert_eq!(req(&render(&vmi(json!({"domain": {}}))), "cpu"), "100m");
        let st = vmi(json!({"domain": {"cpu": {"sockets": 2, "threads": 2}}}));
        assert_eq!(req(&render(&st), "cpu"), "400m");
    }

    /// template_test.go:5600-5650: a user CPU limit is kept; without one, a quota with
    /// `limits.cpu` (or the label selector) adds limit = vCPUs.
    #[test]
    fn auto_cpu_limits_template_test_5600() {
        let quota = NamespaceContext {
            quota_limits_cpu: true,
            ..Default::default()
        };
        let with_limit = vmi(json!({"domain": {"cpu": {"cores": 2},
            "resources": {"requests": {"cpu": "200m"}, "limits": {"cpu": "350m"}}}}));
        let r = render_with(&with_limit, &kubevirt_test_settings(), &quota);
        assert_eq!(lim(&r, "cpu"), "350m");
        let without = vmi(json!({"domain": {"cpu": {"cores": 2},
            "resources": {"requests": {"cpu": "200m"}}}}));
        let r = render_with(&without, &kubevirt_test_settings(), &quota);
        assert_eq!(
            (req(&r, "cpu"), lim(&r, "cpu")),
            ("200m".into(), "2".into())
        );
        let selector = NamespaceContext {
            auto_cpu_limit_selector_matches: true,
            ..Default::default()
        };
        assert_eq!(
            lim(
                &render_with(&without, &kubevirt_test_settings(), &selector),
                "cpu"
            ),
            "2"
        );
        assert_eq!(lim(&render(&without), "cpu"), "");
    }

    /// template_test.go:2190-2229: requests cpu 1m / memory 1G, limits 2m / 2G →
    /// memory 1282971493 / 2282971493 (amd64), 1417189221 / 2417189221 (arm64).
    #[test]
    fn memory_request_and_limit_plus_overhead_template_test_2190() {
        for (arch, request, limit) in [
            ("amd64", "1282971493", "2282971493"),
            ("arm64", "1417189221", "2417189221"),
        ] {
            let v = vmi(
                json!({"architecture": arch, "domain": {"devices": {"disableHotplug": true},
                "resources": {"requests": {"cpu": "1m", "memory": "1G"}, "limits": {"cpu": "2m", "memory": "2G"}}}}),
            );
            let r = render(&v);
            assert_eq!(req(&r, "cpu"), "1m", "{arch}");
            assert_eq!(lim(&r, "cpu"), "2m", "{arch}");
            assert_eq!(req(&r, "memory"), request, "{arch}");
            assert_eq!(lim(&r, "memory"), limit, "{arch}");
        }
    }

    /// template_test.go:2230-2266: overcommitGuestOverhead adds the overhead to the limit only.
    #[test]
    fn overcommit_guest_overhead_template_test_2230() {
        for (arch, limit) in [("amd64", "2282971493"), ("arm64", "2417189221")] {
            let v = vmi(
                json!({"architecture": arch, "domain": {"devices": {"disableHotplug": true},
                "resources": {"overcommitGuestOverhead": true,
                    "requests": {"memory": "1G"}, "limits": {"memory": "2G"}}}}),
            );
            let r = render(&v);
            assert_eq!(req(&r, "memory"), "1G", "{arch}");
            assert_eq!(lim(&r, "memory"), limit, "{arch}");
        }
    }

    /// template_test.go:2267-2346: 3 cores, request 64M → 362 MB (amd64) / 497 MB (arm64);
    /// without the graphics device 329 / 463.
    #[test]
    fn small_request_and_graphics_template_test_2267() {
        for (arch, graphics, expected) in [
            ("amd64", None, 362),
            ("amd64", Some(true), 362),
            ("amd64", Some(false), 329),
            ("arm64", None, 497),
            ("arm64", Some(true), 497),
            ("arm64", Some(false), 463),
        ] {
            let mut devices = json!({"disableHotplug": true});
            if let Some(g) = graphics {
                devices["autoattachGraphicsDevice"] = json!(g);
            }
            let v = vmi(
                json!({"architecture": arch, "domain": {"devices": devices, "cpu": {"cores": 3},
                "resources": {"requests": {"cpu": "1m", "memory": "64M"}}}}),
            );
            let r = render(&v);
            assert_eq!(req(&r, "cpu"), "1m");
            assert_eq!(mega(&req(&r, "memory")), expected, "{arch} {graphics:?}");
            // KVM and TUN device limits are there.
            assert_eq!(lim(&r, KVM_DEVICE), "1");
            assert_eq!(lim(&r, TUN_DEVICE), "1");
        }
    }

    /// template_test.go:2584-2660: hugepages with 64M request = limit → memory request and limit
    /// are the overhead alone (282 MB amd64, 416 MB arm64), `hugepages-<size>` = 64M.
    #[test]
    fn hugepages_template_test_2584() {
        for (arch, size, expected) in [
            ("amd64", "2Mi", 282),
            ("amd64", "1Gi", 282),
            ("arm64", "2Mi", 416),
            ("arm64", "1Gi", 416),
        ] {
            let v = vmi(
                json!({"architecture": arch, "domain": {"devices": {"disableHotplug": true},
                "memory": {"hugepages": {"pageSize": size}},
                "resources": {"requests": {"memory": "64M"}, "limits": {"memory": "64M"}}}}),
            );
            let r = render(&v);
            assert_eq!(mega(&req(&r, "memory")), expected, "{arch} {size}");
            assert_eq!(mega(&lim(&r, "memory")), expected, "{arch} {size}");
            let hp = format!("hugepages-{size}");
            assert_eq!(req(&r, &hp), "64M");
            assert_eq!(lim(&r, &hp), "64M");
        }
    }

    /// template_test.go:2661-2737: guest 64M, request = limit = 70M → hugepages 64M and memory
    /// = overhead + 6M.
    #[test]
    fn hugepages_with_guest_smaller_than_request_template_test_2661() {
        for (arch, expected) in [("amd64", 282), ("arm64", 416)] {
            let v = vmi(
                json!({"architecture": arch, "domain": {"devices": {"disableHotplug": true},
                "memory": {"hugepages": {"pageSize": "1Gi"}, "guest": "64M"},
                "resources": {"requests": {"memory": "70M"}, "limits": {"memory": "70M"}}}}),
            );
            let r = render(&v);
            assert_eq!(mega(&req(&r, "memory")), expected + 6, "{arch}");
            assert_eq!(mega(&lim(&r, "memory")), expected + 6, "{arch}");
            assert_eq!(req(&r, "hugepages-1Gi"), "64M");
            assert_eq!(lim(&r, "hugepages-1Gi"), "64M");
        }
    }

    /// template_test.go:2483-2581: memoryOvercommit 110 % shrinks only a request derived from
    /// `memory.guest` (or the hugepage size), never a request derived from a request or limit.
    #[test]
    fn memory_overcommit_template_test_2483() {
        let s110 = ClusterSettings {
            memory_overcommit: 110,
            ..kubevirt_test_settings()
        };
        let ns = NamespaceContext::default();
        let cases: [(&str, serde_json::Value, bool); 8] = [
            ("nothing", json!({}), false),
            (
                "requests",
                json!({"resources": {"requests": {"memory": "1Gi"}}}),
                false,
            ),
            (
                "limits",
                json!({"resources": {"limits": {"memory": "1Gi"}}}),
                false,
            ),
            ("guest", json!({"memory": {"guest": "1Gi"}}), true),
            (
                "hugepages",
                json!({"memory": {"hugepages": {"pageSize": "1Gi"}}}),
                true,
            ),
            (
                "guest+hugepages",
                json!({"memory": {"guest": "1Gi", "hugepages": {"pageSize": "1Gi"}}}),
                true,
            ),
            (
                "requests+guest",
                json!({"memory": {"guest": "1Gi"}, "resources": {"requests": {"memory": "1Gi"}}}),
                false,
            ),
            (
                "limits+hugepages",
                json!({"memory": {"hugepages": {"pageSize": "1Gi"}}, "resources": {"limits": {"memory": "1Gi"}}}),
                false,
            ),
        ];
        for (name, domain, expect) in cases {
            let v = vmi(json!({"domain": domain}));
            let overhead = memory_overhead(&v.spec, &s110).unwrap().total_bytes;
            let mem = |s: &ClusterSettings| {
                let r = compute_resources(&v, s, overhead, &ns).unwrap();
                ParsedQuantity::parse(&req(&r, "memory")).unwrap().value()
            };
            let (m100, m110) = (mem(&kubevirt_test_settings()), mem(&s110));
            if expect {
                assert_eq!((m100 - overhead) * 100 / 110, m110 - overhead, "{name}");
            } else {
                assert_eq!(m100, m110, "{name}");
            }
        }
    }

    /// template_test.go:1852-1880: dedicated CPUs with isolateEmulatorThread → limit = cores + 1,
    /// or + 2 with the even-parity annotation when cores are even.
    #[test]
    fn isolate_emulator_thread_template_test_1852() {
        for (parity, cores, expected) in [
            (false, 3, "4"),
            (false, 2, "3"),
            (true, 3, "4"),
            (true, 4, "6"),
        ] {
            let mut v = vmi(json!({"domain": {"devices": {"disableHotplug": true},
                "cpu": {"cores": cores, "threads": 1, "dedicatedCpuPlacement": true, "isolateEmulatorThread": true}}}));
            if parity {
                v.metadata.annotations = Some(
                    [(
                        EMULATOR_THREAD_COMPLETE_TO_EVEN_PARITY.to_string(),
                        String::new(),
                    )]
                    .into(),
                );
            }
            let r = render(&v);
            assert_eq!(lim(&r, "cpu"), expected, "parity {parity} cores {cores}");
            assert_eq!(req(&r, "cpu"), expected);
        }
    }

    /// renderresources_test.go:188-240: vCPUs + supplemental IO threads + emulator thread(s).
    #[test]
    fn cpu_pinning_with_io_threads_renderresources_test_188() {
        let cases = [
            (5, 2, None, false, "8"),
            (5, 2, None, true, "8"),
            (6, 2, None, true, "10"),
            (0, 0, Some("3"), false, "4"),
            (0, 2, Some("5"), true, "8"),
        ];
        for (cores, io, user, parity, expected) in cases {
            let mut domain = json!({"cpu": {"cores": cores, "dedicatedCpuPlacement": true, "isolateEmulatorThread": true},
                "ioThreadsPolicy": "supplementalPool", "ioThreads": {"supplementalPoolThreadCount": io}});
            if let Some(u) = user {
                domain["resources"] = json!({"requests": {"cpu": u}, "limits": {"cpu": u}});
            }
            let mut v = vmi(json!({"domain": domain}));
            if parity {
                v.metadata.annotations = Some(
                    [(
                        EMULATOR_THREAD_COMPLETE_TO_EVEN_PARITY.to_string(),
                        String::new(),
                    )]
                    .into(),
                );
            }
            let r = render(&v);
            assert_eq!(
                (lim(&r, "cpu"), req(&r, "cpu")),
                (expected.into(), expected.into()),
                "{cores} {io} {user:?} {parity}"
            );
        }
    }

    /// Dedicated CPUs (WithCPUPinning): requests = limits = vCPUs, memory limit = memory request
    /// (both + overhead, which includes the 100Mi dedicated term) → Guaranteed QoS.
    #[test]
    fn dedicated_cpus_are_guaranteed() {
        let v = vmi(
            json!({"domain": {"cpu": {"cores": 2, "dedicatedCpuPlacement": true},
            "resources": {"requests": {"memory": "1Gi"}}}}),
        );
        let r = render(&v);
        assert_eq!((req(&r, "cpu"), lim(&r, "cpu")), ("2".into(), "2".into()));
        assert_eq!(req(&r, "memory"), lim(&r, "memory"));
        // 1Gi + 220+8+16+32+100 Mi + 2Mi page tables = 1024+378 Mi, still BinarySI.
        assert_eq!(req(&r, "memory"), "1402Mi");
    }

    /// Quantity formats follow apimachinery: BinarySI stays BinarySI when divisible, DecimalSI
    /// prints decimal bytes, no request at all takes the overhead's (DecimalSI) format.
    #[test]
    fn memory_formats_follow_apimachinery() {
        let gi = vmi(
            json!({"domain": {"cpu": {"cores": 1}, "resources": {"requests": {"memory": "1Gi"}}}}),
        );
        assert_eq!(req(&render(&gi), "memory"), "1294Mi");
        let m = vmi(
            json!({"domain": {"cpu": {"cores": 1}, "resources": {"requests": {"memory": "1024M"}}}}),
        );
        let r = render(&m);
        let overhead = memory_overhead(&m.spec, &kubevirt_test_settings())
            .unwrap()
            .total_bytes;
        assert_eq!(req(&r, "memory"), (1_024_000_000 + overhead).to_string());
        let guest = vmi(json!({"domain": {"cpu": {"cores": 1}, "memory": {"guest": "128Mi"}}}));
        // Request copied from memory.guest (BinarySI) → 128Mi + 268Mi.
        assert_eq!(req(&render(&guest), "memory"), "396Mi");
        let nothing = vmi(json!({"domain": {}}));
        assert_eq!(
            req(&render(&nothing), "memory"),
            (268 * 1024 * 1024).to_string()
        );
        assert_eq!(req(&render(&nothing), "ephemeral-storage"), "50M");
    }

    /// renderresources_test.go:42-58: ephemeral storage 30M/70M → 80M/120M.
    #[test]
    fn ephemeral_storage_renderresources_test_42() {
        let v = vmi(
            json!({"domain": {"resources": {"requests": {"ephemeral-storage": "30M"},
            "limits": {"ephemeral-storage": "70M"}}}}),
        );
        let r = render(&v);
        assert_eq!(
            (req(&r, "ephemeral-storage"), lim(&r, "ephemeral-storage")),
            ("80M".into(), "120M".into())
        );
    }

    /// template_test.go:5764-5900, renderresources_test.go:134-180: automatic memory limits.
    #[test]
    fn auto_memory_limits_template_test_5764() {
        let quota = NamespaceContext {
            quota_limits_memory: true,
            ..Default::default()
        };
        let s = kubevirt_test_settings();
        let plain = vmi(json!({"domain": {"resources": {"requests": {"memory": "64M"}}}}));
        let r = render_with(&plain, &s, &quota);
        let request = r.request_value("memory").unwrap();
        assert_eq!(r.limit_value("memory"), Some((request as f64 * 2.0) as i64));
        for (label, ratio) in [("3.2", 3.2), ("not_a_float", 2.0), ("0.5", 2.0)] {
            let ns = NamespaceContext {
                labels: [(
                    AUTO_MEMORY_LIMITS_RATIO_LABEL.to_string(),
                    label.to_string(),
                )]
                .into(),
                ..quota.clone()
            };
            let r = render_with(&plain, &s, &ns);
            assert_eq!(
                r.limit_value("memory"),
                Some((request as f64 * ratio) as i64),
                "{label}"
            );
        }
        // A user limit or dedicated CPUs keep limit = request (+ overhead).
        for domain in [
            json!({"resources": {"requests": {"memory": "64M"}, "limits": {"memory": "64M"}}}),
            json!({"cpu": {"dedicatedCpuPlacement": true}, "resources": {"requests": {"memory": "64M"}}}),
        ] {
            let r = render_with(&vmi(json!({"domain": domain})), &s, &quota);
            assert_eq!(r.request_value("memory"), r.limit_value("memory"));
        }
        // No quota → no memory limit.
        assert_eq!(render(&plain).limit_value("memory"), None);
    }

    /// renderresources_test.go:272-330, template_test.go:3648-3737: device-plugin GPUs and host
    /// devices add 1 per device to requests and limits; DRA ones become claims.
    #[test]
    fn gpus_and_host_devices() {
        let v = vmi(json!({"domain": {"devices": {
            "gpus": [{"name": "gpu1", "deviceName": "nvidia.com/GP102GL_Tesla_P40"},
                     {"name": "gpu2", "deviceName": "nvidia.com/GP102GL_Tesla_P40"},
                     {"name": "dra", "claimRequest": {"claimName": "gpu-claim", "requestName": "gpu-request"}}],
            "hostDevices": [{"name": "hd1", "deviceName": "discombobulator2000"}]}}}));
        let r = render(&v);
        assert_eq!(req(&r, "nvidia.com/GP102GL_Tesla_P40"), "2");
        assert_eq!(lim(&r, "nvidia.com/GP102GL_Tesla_P40"), "2");
        assert_eq!(req(&r, "discombobulator2000"), "1");
        assert_eq!(lim(&r, "discombobulator2000"), "1");
        assert_eq!(
            r.claims,
            vec![ClaimRef {
                name: "gpu-claim".into(),
                request: Some("gpu-request".into())
            }]
        );
        let k = r.to_resource_requirements();
        assert_eq!(k.claims.unwrap()[0].name, "gpu-claim");
    }

    /// template_test.go:267-300, renderresources.go:466-491: virtualization devices in limits only.
    #[test]
    fn virtualization_devices() {
        let plain = render(&vmi(json!({"domain": {}})));
        assert_eq!(lim(&plain, KVM_DEVICE), "1");
        assert_eq!(lim(&plain, TUN_DEVICE), "1", "autoattachPodInterface unset");
        assert_eq!(lim(&plain, VHOST_NET_DEVICE), "", "no interfaces listed");
        assert!(!plain.requests.contains_key(KVM_DEVICE));
        let iface = vmi(
            json!({"domain": {"devices": {"interfaces": [{"name": "default", "masquerade": {}}],
            "autoattachVSOCK": true}}}),
        );
        let r = render(&iface);
        assert_eq!(lim(&r, VHOST_NET_DEVICE), "1");
        assert_eq!(lim(&r, VHOST_VSOCK_DEVICE), "1");
        let emu = ClusterSettings {
            use_emulation: true,
            ..kubevirt_test_settings()
        };
        let r = render_with(&iface, &emu, &NamespaceContext::default());
        assert_eq!(
            (lim(&r, KVM_DEVICE), lim(&r, VHOST_NET_DEVICE)),
            (String::new(), String::new())
        );
        let no_tun = render(&vmi(
            json!({"domain": {"devices": {"autoattachPodInterface": false}}}),
        ));
        assert_eq!(lim(&no_tun, TUN_DEVICE), "");
        let e1000 = render(&vmi(
            json!({"domain": {"devices": {"interfaces": [{"name": "a", "model": "e1000"}]}}}),
        ));
        assert_eq!(lim(&e1000, VHOST_NET_DEVICE), "");
        let sev = render(&vmi(json!({"domain": {"launchSecurity": {"sev": {}}}})));
        assert_eq!(
            (req(&sev, SEV_DEVICE), lim(&sev, SEV_DEVICE)),
            ("1".into(), "1".into())
        );
        let tdx = render(&vmi(json!({"domain": {"launchSecurity": {"tdx": {}}}})));
        assert_eq!(req(&tdx, TDX_DEVICE), "1");
        let pr = render(&vmi(
            json!({"domain": {"devices": {"disks": [{"name": "d", "lun": {"reservation": true}}]}}}),
        ));
        assert_eq!(req(&pr, PR_HELPER_DEVICE), "1");
    }

    #[test]
    fn wants_guaranteed_qos_like_types_go() {
        let q = |r: serde_json::Value| {
            wants_guaranteed_qos(&vmi(json!({"domain": {"resources": r}})).spec).unwrap()
        };
        assert!(q(
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}})
        ));
        assert!(q(
            json!({"requests": {"cpu": "1"}, "limits": {"cpu": "1000m", "memory": "1Gi"}})
        ));
        assert!(!q(
            json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}})
        ));
        assert!(!q(
            json!({"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}})
        ));
    }

    #[test]
    fn errors_name_the_field() {
        let v = vmi(json!({"domain": {"resources": {"requests": {"memory": "2Gx"}}}}));
        let e = compute_resources(
            &v,
            &kubevirt_test_settings(),
            0,
            &NamespaceContext::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("spec.domain.resources.requests.memory: "),
            "{e}"
        );
        let v = vmi(json!({"domain": {"memory": {"guest": "lots"}}}));
        let e = compute_resources(
            &v,
            &kubevirt_test_settings(),
            0,
            &NamespaceContext::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string().starts_with("spec.domain.memory.guest: "),
            "{e}"
        );
        // A ratio so large that Go would format the request as "1e-08m" (MustParse would panic).
        let s = ClusterSettings {
            cpu_allocation_ratio: u32::MAX,
            ..kubevirt_test_settings()
        };
        let e = compute_resources(
            &vmi(json!({"domain": {}})),
            &s,
            0,
            &NamespaceContext::default(),
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("spec.domain.cpu"), "{e}");
    }

    #[test]
    fn serializes_as_compute_resources_json() {
        let r = render(&vmi(
            json!({"domain": {"cpu": {"cores": 3}, "resources": {"requests": {"memory": "1Gi"}}}}),
        ));
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["requests"]["cpu"], "300m");
        assert_eq!(j["requests"]["memory"], "1310Mi");
        assert!(j.get("claims").is_none());
    }
}
