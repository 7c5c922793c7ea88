//! KubeVirt's `ResourceRenderer` (pkg/virt-controller/services/renderresources.go): the
//! `compute` container's resources as a pure function of the VMI, its parsed quantities, the
//! cluster settings, the memory overhead and a little knowledge about the namespace.
//!
//! KubeVirt builds a renderer from the VMI's requests and limits and applies options to it:
//! `newResourceRenderer` always applies `WithEphemeralStorageRequest` and
//! `WithVirtualizationResources` and, when the VMI has no memory request, `WithMemoryRequests`;
//! then `VMIResourcePredicates` (template.go:1633-1674) applies each rule whose predicate holds.
//! Here every option is one function named after it, and [`RULES`] is the table that drives
//! them, in KubeVirt's order (facts §4.6):
//!
//! | option | when |
//! |---|---|
//! | `WithEphemeralStorageRequest` (renderresources.go:104-118) | always |
//! | `WithVirtualizationResources` (466-497) | always |
//! | `WithMemoryRequests` (263-293) | no memory request |
//! | `WithCPUPinning` (319-361) | dedicated CPUs |
//! | `WithoutDedicatedCPU` (128-147) | shared CPUs |
//! | `WithHugePages` (220-261) | hugepages |
//! | `WithMemoryOverhead` (295-308) | no hugepages |
//! | `WithAutoMemoryLimits` (310-317, 731-763) | a quota with `limits.memory`, no memory limit |
//! | `WithNetworkResources` (363-374) | a Multus network's NAD was read (gate `ExternalNetResourceInjection` off): +1 of its `resourceName` |
//! | `WithGPUsDevicePlugins`, `WithGPUsDRA` | device-plugin GPUs; DRA GPUs (gate `GPUsWithDRA`) |
//! | `WithHostDevicesDevicePlugins`, `WithHostDevicesDRA` | the same for host devices (`HostDevicesWithDRA`) |
//! | `WithNetworksDRA` | gate `NetworkDevicesWithDRA` |
//! | `WithSEV`, `WithTDX`, `WithPersistentReservation`, `WithIOMMUFD` | SEV/SNP, TDX, a reserved LUN, gate `IOMMUFD` |
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
//! To add a rule: write a `with_…` function, add a [`Rule`] row at KubeVirt's position.

use super::resources::{
    AUTO_MEMORY_LIMITS_RATIO_LABEL, ClaimRef, ComputeResources, DEFAULT_MEMORY_LIMIT_RATIO,
    EMULATOR_THREAD_COMPLETE_TO_EVEN_PARITY, EPHEMERAL_STORAGE_OVERHEAD, IOMMUFD_DEVICE,
    NamespaceContext, PR_HELPER_DEVICE, SEV_DEVICE, TDX_DEVICE, TUN_DEVICE, VHOST_NET_DEVICE,
    VHOST_VSOCK_DEVICE, hypervisor_device,
};
use crate::api::quantity::{Format, ParsedQuantity};
use crate::api::resources::{FieldError, FieldProblem, VmiResources};
use crate::api::vmi::{NamedDevice, VirtualMachineInstance};
use crate::config::ClusterSettings;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use std::collections::BTreeMap;

type List = BTreeMap<String, ParsedQuantity>;

/// Mirror of KubeVirt's `ResourceRenderer`: what the VMI asked for (rewritten by some rules) and
/// what the rules calculated.
#[derive(Debug, Default)]
pub(crate) struct ResourceRenderer {
    vm_limits: List,
    vm_requests: List,
    calculated_limits: List,
    calculated_requests: List,
    claims: Vec<ClaimRef>,
}

/// What the rules read: the VMI, its quantities parsed once, the cluster settings, the
/// namespace facts and the memory overhead (`CalculateMemoryOverhead`, a DecimalSI quantity).
pub(crate) struct RenderInput<'a> {
    /// The VMI.
    pub vmi: &'a VirtualMachineInstance,
    /// Its quantities ([`VmiResources::parse`]).
    pub resources: &'a VmiResources,
    /// Cluster settings.
    pub settings: &'a ClusterSettings,
    /// Namespace facts.
    pub ns: &'a NamespaceContext,
    /// The launcher memory overhead.
    pub overhead: ParsedQuantity,
    /// Fix, rather than reproduce, a rendering the API server or kubelet would reject
    /// ([`render_admissible_compute_resources`]).
    pub admissible: bool,
}

/// One row of [`RULES`]: a KubeVirt option, when it applies, and what it does.
pub(crate) struct Rule {
    /// KubeVirt's option name, e.g. `WithCPUPinning` (the rule-order tests check by it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub option: &'static str,
    /// The predicate (`VMIResourceRule.predicate`); it reads the VMI and namespace, never the
    /// renderer, so every predicate sees the VMI as written.
    pub applies: fn(&RenderInput) -> bool,
    /// The option.
    pub apply: fn(&mut ResourceRenderer, &RenderInput) -> Result<(), FieldError>,
}

const fn rule(
    option: &'static str,
    applies: fn(&RenderInput) -> bool,
    apply: fn(&mut ResourceRenderer, &RenderInput) -> Result<(), FieldError>,
) -> Rule {
    Rule {
        option,
        applies,
        apply,
    }
}

/// The rules, in the order KubeVirt v1.9.0 applies them (module docs).
#[rustfmt::skip]
pub(crate) const RULES: &[Rule] = &[
    rule("WithEphemeralStorageRequest", |_| true, with_ephemeral_storage_request),
    rule("WithVirtualizationResources", |_| true, with_virtualization_resources),
    rule("WithMemoryRequests", |i| renderer_sets_memory_request(i) && empty_memory_request(i),
        with_memory_requests),
    rule("WithCPUPinning", |i| i.vmi.spec.is_cpu_dedicated(), with_cpu_pinning),
    rule("WithoutDedicatedCPU", |i| !i.vmi.spec.is_cpu_dedicated(), without_dedicated_cpu),
    rule("WithHugePages", |i| i.vmi.spec.has_hugepages(), with_huge_pages),
    rule("WithMemoryOverhead", |i| !i.vmi.spec.has_hugepages(), with_memory_overhead),
    rule("WithAutoMemoryLimits", does_vmi_require_auto_memory_limits, with_auto_memory_limits),
    rule("WithNetworkResources", |i| !network_resources(i).is_empty(),
        |r, i| r.request_devices(&network_resources(i).into_values().filter(|n| !n.is_empty()).collect::<Vec<_>>())),
    rule("WithGPUsDevicePlugins", |i| !plugin_devices(gpus(i)).is_empty(),
        |r, i| r.request_devices(&plugin_devices(gpus(i)))),
    rule("WithGPUsDRA", |i| i.settings.gate_enabled("GPUsWithDRA", true),
        |r, i| r.add_claims(dra_claims(gpus(i)))),
    rule("WithHostDevicesDevicePlugins", |i| !plugin_devices(host_devices(i)).is_empty(),
        |r, i| r.request_devices(&plugin_devices(host_devices(i)))),
    rule("WithHostDevicesDRA", |i| i.settings.gate_enabled("HostDevicesWithDRA", true),
        |r, i| r.add_claims(dra_claims(host_devices(i)))),
    rule("WithNetworksDRA", |i| i.settings.gate_enabled("NetworkDevicesWithDRA", false),
        |r, i| r.add_claims(network_claims(i))),
    rule("WithSEV", |i| i.vmi.spec.is_sev(), |r, _| r.request_device(SEV_DEVICE)),
    rule("WithTDX", |i| i.vmi.spec.is_tdx(), |r, _| r.request_device(TDX_DEVICE)),
    rule("WithPersistentReservation", |i| i.vmi.spec.has_persistent_reservation(),
        |r, _| r.request_device(PR_HELPER_DEVICE)),
    rule("WithIOMMUFD", |i| i.settings.gate_enabled("IOMMUFD", false),
        |r, _| r.request_device(IOMMUFD_DEVICE)),
];

impl ResourceRenderer {
    /// `NewResourceRenderer(vmLimits, vmRequests)`: the VMI's own lists.
    pub(crate) fn new(resources: &VmiResources) -> Self {
        ResourceRenderer {
            vm_limits: resources.limits.clone(),
            vm_requests: resources.requests.clone(),
            ..Default::default()
        }
    }

    /// Apply every rule of [`RULES`] whose predicate holds, in order.
    pub(crate) fn apply_rules(&mut self, input: &RenderInput) -> Result<(), FieldError> {
        for rule in RULES {
            if (rule.applies)(input) {
                (rule.apply)(self, input)?;
            }
        }
        Ok(())
    }

    /// `Requests()` / `Limits()`: the calculated list overlaid with the VMI's (VMI wins).
    fn merged(&self, limits: bool) -> List {
        let (calc, vm) = if limits {
            (&self.calculated_limits, &self.vm_limits)
        } else {
            (&self.calculated_requests, &self.vm_requests)
        };
        let mut out = calc.clone();
        out.extend(vm.iter().map(|(k, v)| (k.clone(), *v)));
        out
    }

    /// The rendered resources in canonical text.
    pub(crate) fn finish(self) -> ComputeResources {
        let canon = |l: List| -> BTreeMap<String, Quantity> {
            l.into_iter().map(|(k, v)| (k, v.to_quantity())).collect()
        };
        ComputeResources {
            requests: canon(self.merged(false)),
            limits: canon(self.merged(true)),
            claims: self.claims,
        }
    }

    /// `requestResource` on the merged view, then copy it into the calculated lists
    /// (renderresources.go:150-160, 433-457): +1 in requests and limits.
    fn request_devices(&mut self, names: &[String]) -> Result<(), FieldError> {
        let mut limits = self.merged(true);
        let mut requests = self.merged(false);
        let one = ParsedQuantity::from_units(1, Format::DecimalSI);
        for name in names {
            for list in [&mut limits, &mut requests] {
                let v = list.get(name).map(|v| q_add(*v, one)).unwrap_or(one);
                list.insert(name.clone(), v);
            }
        }
        self.calculated_limits.extend(limits);
        self.calculated_requests.extend(requests);
        Ok(())
    }

    fn request_device(&mut self, name: &str) -> Result<(), FieldError> {
        self.request_devices(&[name.to_string()])
    }

    /// `resources.claims` (the DRA options).
    fn add_claims(&mut self, claims: Vec<ClaimRef>) -> Result<(), FieldError> {
        self.claims.extend(claims);
        Ok(())
    }
}

/// The `compute` container's resources for `vmi`, given the launcher memory overhead in bytes
/// (`CalculateMemoryOverhead`, i.e. [`super::overhead::memory_overhead`]'s `total_bytes`).
///
/// Pure: the namespace facts come from `ns`. Rules and their order: see the module docs. A caller
/// that also computes the overhead parses once and calls [`render_compute_resources`].
///
/// Errors: a quantity in `spec.domain.resources`, `spec.domain.memory` or `spec.domain.cpu`
/// that does not parse or cannot be rendered, named by field path.
pub fn compute_resources(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    overhead_bytes: i64,
    ns: &NamespaceContext,
) -> Result<ComputeResources, FieldError> {
    let resources = VmiResources::parse(&vmi.spec)?;
    render_compute_resources(vmi, &resources, settings, overhead_bytes, ns)
}

/// [`compute_resources`] of a VMI whose quantities `resources` are already parsed: what
/// `settings.kubevirt_version` renders, known defects included (`explain-overhead` reproduces
/// them and warns, [`super::defects`]).
pub(crate) fn render_compute_resources(
    vmi: &VirtualMachineInstance,
    resources: &VmiResources,
    settings: &ClusterSettings,
    overhead_bytes: i64,
    ns: &NamespaceContext,
) -> Result<ComputeResources, FieldError> {
    render(vmi, resources, settings, overhead_bytes, ns, false)
}

/// [`render_compute_resources`] for a pod that will be created (`run-controller`): a rendering
/// the API server or kubelet would reject is fixed, not reproduced. Today one rule differs:
/// hugepages are never scaled by memoryOvercommit (upstream PR 18880, `WithMemoryRequests`
/// skips the overcommit when `memory.hugepages` is set), so every `hugepages-<size>` quantity
/// stays a multiple of the page size for a VMI virt-api admits.
pub(crate) fn render_admissible_compute_resources(
    vmi: &VirtualMachineInstance,
    resources: &VmiResources,
    settings: &ClusterSettings,
    overhead_bytes: i64,
    ns: &NamespaceContext,
) -> Result<ComputeResources, FieldError> {
    render(vmi, resources, settings, overhead_bytes, ns, true)
}

fn render(
    vmi: &VirtualMachineInstance,
    resources: &VmiResources,
    settings: &ClusterSettings,
    overhead_bytes: i64,
    ns: &NamespaceContext,
    admissible: bool,
) -> Result<ComputeResources, FieldError> {
    let input = RenderInput {
        vmi,
        resources,
        settings,
        ns,
        overhead: ParsedQuantity::from_units(overhead_bytes, overhead_format(resources)),
        admissible,
    };
    let mut renderer = ResourceRenderer::new(resources);
    renderer.apply_rules(&input)?;
    Ok(renderer.finish())
}

/// The format of KubeVirt's overhead quantity: `NewScaledQuantity(0, Kilo)` takes the format of
/// its first non-zero addend (`Quantity.Add`), the page-table term (DecimalSI) when the VMI
/// requests memory, else the first fixed term, `25Mi` (BinarySI): kvm/hypervisorbackend.go:73-84.
/// A request made of the overhead alone (hugepages with only `memory.guest`) is then written
/// `268Mi`, not `281018368`.
fn overhead_format(resources: &VmiResources) -> Format {
    match resources.requests.get("memory") {
        Some(request) if !request.is_zero() => Format::DecimalSI,
        _ => Format::BinarySI,
    }
}

// ---------------------------------------------------------------------------------------------
// Predicates

/// `WithMemoryRequests` exists (from v1.7.0; before, virt-api set the request:
/// [`crate::api::defaults`]).
fn renderer_sets_memory_request(i: &RenderInput) -> bool {
    !i.settings
        .kubevirt_version
        .formula()
        .admission_sets_memory_request
        .value
}

/// `emptyMemoryRequest`: no memory request, or a zero one (renderresources.go:263-293).
fn empty_memory_request(i: &RenderInput) -> bool {
    i.resources.request("memory").is_none_or(|q| q.is_zero())
}

/// `doesVMIRequireAutoResourceLimits(vmi, "memory")` (template.go:1753-1769): no user memory
/// limit and a ResourceQuota with `limits.memory`.
fn does_vmi_require_auto_memory_limits(i: &RenderInput) -> bool {
    !i.resources.limits.contains_key("memory") && i.ns.quota_limits_memory
}

/// `doesVMIRequireAutoCPULimits` (template.go:1576-1612, 1753-1769): no user CPU limit and a
/// ResourceQuota with `limits.cpu` or a namespace matching `autoCPULimitNamespaceLabelSelector`.
fn does_vmi_require_auto_cpu_limits(i: &RenderInput) -> bool {
    !i.resources.limits.contains_key("cpu")
        && (i.ns.quota_limits_cpu || i.ns.auto_cpu_limit_selector_matches)
}

fn gpus<'a>(i: &RenderInput<'a>) -> &'a [NamedDevice] {
    i.vmi
        .spec
        .domain
        .devices
        .gpus
        .as_deref()
        .map_or(&[], Vec::as_slice)
}

fn host_devices<'a>(i: &RenderInput<'a>) -> &'a [NamedDevice] {
    i.vmi
        .spec
        .domain
        .devices
        .host_devices
        .as_deref()
        .map_or(&[], Vec::as_slice)
}

/// `validatePermittedHostDevices` (renderresources.go:493-531), which `newResourceRenderer`
/// runs before any resource is rendered (template.go:1031-1033): with the CR's
/// `permittedHostDevices` set, each GPU and host device whose `deviceName` it does not list is
/// refused, in KubeVirt's words, joined by a space. Devices with a `claimRequest` are skipped
/// while their DRA gate (`GPUsWithDRA`, `HostDevicesWithDRA`, Beta in v1.9:
/// featuregate/active.go:311-312) is on. `None`: nothing refused.
pub(crate) fn unpermitted_host_devices(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
) -> Option<String> {
    let permitted = settings.permitted_host_devices.as_ref()?;
    let devices = &vmi.spec.domain.devices;
    let kinds = [
        (
            devices.gpus.as_deref().map_or(&[][..], Vec::as_slice),
            "GPU",
            "GPUsWithDRA",
        ),
        (
            devices
                .host_devices
                .as_deref()
                .map_or(&[][..], Vec::as_slice),
            "HostDevice",
            "HostDevicesWithDRA",
        ),
    ];
    let mut refused = Vec::new();
    for (list, kind, dra_gate) in kinds {
        let dra = settings.gate_enabled(dra_gate, true);
        for d in list {
            let claim = d.extra.get("claimRequest").is_some_and(|c| !c.is_null());
            if dra && claim {
                continue;
            }
            let name = d.device_name.as_deref().unwrap_or_default();
            if !permitted.iter().any(|p| p == name) {
                refused.push(format!(
                    "{kind} {name} is not permitted in permittedHostDevices configuration"
                ));
            }
        }
    }
    (!refused.is_empty()).then(|| refused.join(" "))
}

/// Device-plugin devices: a `deviceName` and no `claimRequest`.
/// `NetworkToResource`'s map (network → its NAD's resource name), from what the caller read
/// ([`super::network::network_to_resource`]; the pod renderer reports a NAD it could not read).
fn network_resources(i: &RenderInput) -> BTreeMap<String, String> {
    super::network::network_to_resource(i.vmi, i.settings, i.ns).unwrap_or_default()
}

fn plugin_devices(list: &[NamedDevice]) -> Vec<String> {
    list.iter()
        .filter(|d| {
            d.device_name.as_deref().is_some_and(|n| !n.is_empty())
                && !d.extra.contains_key("claimRequest")
        })
        .filter_map(|d| d.device_name.clone())
        .collect()
}

/// DRA devices: no `deviceName`, a `claimRequest`.
fn dra_claims(list: &[NamedDevice]) -> Vec<ClaimRef> {
    list.iter()
        .filter(|d| d.device_name.as_deref().unwrap_or("").is_empty())
        .filter_map(|d| claim_request(&d.extra, "claimRequest"))
        .collect()
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
// The options

/// `WithEphemeralStorageRequest` (renderresources.go:104-118): request += 50M, and the limit
/// too if there is one.
fn with_ephemeral_storage_request(
    r: &mut ResourceRenderer,
    _: &RenderInput,
) -> Result<(), FieldError> {
    let eph = ParsedQuantity::parse(EPHEMERAL_STORAGE_OVERHEAD)
        .map_err(|e| FieldError::new("ephemeral-storage overhead", FieldProblem::Quantity(e)))?;
    let key = "ephemeral-storage".to_string();
    let req = r.vm_requests.get(&key).copied().unwrap_or_else(zero);
    r.vm_requests.insert(key.clone(), q_add(req, eph));
    if let Some(lim) = r.vm_limits.get(&key).copied() {
        r.vm_limits.insert(key, q_add(lim, eph));
    }
    Ok(())
}

/// `WithVirtualizationResources(getRequiredResources)` (renderresources.go:466-497): device
/// plugins of the hypervisor, into the limits only.
fn with_virtualization_resources(
    r: &mut ResourceRenderer,
    i: &RenderInput,
) -> Result<(), FieldError> {
    let spec = &i.vmi.spec;
    let one = ParsedQuantity::from_units(1, Format::DecimalSI);
    let emulation = i.settings.use_emulation;
    if spec.requires_tun() {
        r.vm_limits.insert(TUN_DEVICE.into(), one);
    }
    if spec.has_virtio_iface() && !emulation {
        r.vm_limits.insert(VHOST_NET_DEVICE.into(), one);
    }
    if !emulation {
        r.vm_limits
            .insert(hypervisor_device(i.settings).into(), one);
    }
    if spec.autoattach_vsock() {
        r.vm_limits.insert(VHOST_VSOCK_DEVICE.into(), one);
    }
    Ok(())
}

/// `WithMemoryRequests` (renderresources.go:263-293): the limit, else `memory.guest` (or the
/// hugepage size) × 100 / memoryOvercommit. With hugepages the overcommit is skipped on `main`
/// (PR 18880) and always for an admissible rendering; earlier releases scale it, which leaves
/// `hugepages-<size>` off the page-size grid and the pod rejected.
fn with_memory_requests(r: &mut ResourceRenderer, i: &RenderInput) -> Result<(), FieldError> {
    let limit = r.vm_limits.get("memory").copied();
    let request = r.vm_requests.get("memory").copied();
    if let Some(limit) = limit
        && !limit.is_zero()
        && request.is_none_or(|q| q.is_zero())
    {
        r.vm_requests.insert("memory".into(), limit);
    }
    if r.vm_requests.contains_key("memory") {
        return Ok(());
    }
    let base = if i.resources.guest.is_some() {
        i.resources.guest
    } else {
        i.vmi
            .spec
            .hugepage_size()
            .and_then(|p| ParsedQuantity::parse(p).ok())
    };
    let Some(base) = base.filter(|b| b.value() > 0) else {
        return Ok(());
    };
    let overcommit = i.settings.memory_overcommit;
    let overcommit_hugepages = i
        .settings
        .kubevirt_version
        .formula()
        .hugepages_overcommitted
        .value
        && !i.admissible;
    let value = if overcommit == 100 || (i.vmi.spec.has_hugepages() && !overcommit_hugepages) {
        base
    } else {
        if overcommit == 0 {
            return Err(FieldError::new(
                "spec.configuration.developerConfiguration.memoryOvercommit",
                FieldProblem::Invalid("must be positive".into()),
            ));
        }
        base.overcommitted(overcommit)
    };
    r.vm_requests.insert("memory".into(), value);
    Ok(())
}

/// `WithCPUPinning` (renderresources.go:319-361): requests = limits = vCPUs + supplemental IO
/// threads (+ the emulator thread(s)), memory limit = memory request.
fn with_cpu_pinning(r: &mut ResourceRenderer, i: &RenderInput) -> Result<(), FieldError> {
    let spec = &i.vmi.spec;
    let cpu = spec.domain.cpu.clone().unwrap_or_default();
    let n = cpu.vcpus();
    let io = spec.supplemental_io_threads();
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
        let additional = if spec.domain.io_threads_policy.as_deref() == Some("supplementalPool") {
            io
        } else {
            0
        };
        let limits = r.vm_limits.get("cpu").copied().unwrap_or_else(zero);
        let parity = i
            .vmi
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
    Ok(())
}

/// `WithoutDedicatedCPU` (renderresources.go:128-147): request = (vCPUs + supplemental IO
/// threads) / cpuAllocationRatio; with automatic CPU limits ([`does_vmi_require_auto_cpu_limits`],
/// KubeVirt's `withCPULimits` argument), limit = vCPUs + IO threads.
fn without_dedicated_cpu(r: &mut ResourceRenderer, i: &RenderInput) -> Result<(), FieldError> {
    let spec = &i.vmi.spec;
    let n = spec.domain.cpu.as_ref().map(|c| c.vcpus()).unwrap_or(1);
    let total = n + spec.supplemental_io_threads();
    let ratio = i.settings.cpu_allocation_ratio;
    if total == 0 || ratio == 0 {
        return Ok(());
    }
    let val = total as f64 / f64::from(ratio);
    let text = if val < 1.0 {
        format!("{}m", go_format_g(val * 1000.0))
    } else {
        go_format_g(val)
    };
    let q = ParsedQuantity::parse(&text).map_err(|e| {
        let field =
            format!("spec.domain.cpu ({total} vCPUs / cpuAllocationRatio {ratio} = {text:?})");
        FieldError::new(field, FieldProblem::Quantity(e))
    })?;
    r.calculated_requests.insert("cpu".into(), q);
    if does_vmi_require_auto_cpu_limits(i) {
        r.calculated_limits.insert(
            "cpu".into(),
            ParsedQuantity::from_units(total, Format::DecimalSI),
        );
    }
    Ok(())
}

/// `WithHugePages` (renderresources.go:220-261): `hugepages-<size>` = the memory request (or
/// the guest memory if smaller); memory request/limit = overhead + what exceeds the guest memory.
fn with_huge_pages(r: &mut ResourceRenderer, i: &RenderInput) -> Result<(), FieldError> {
    let page_size = i.vmi.spec.hugepage_size().unwrap_or_default();
    let hp_name = format!("hugepages-{page_size}");
    let guest = i.resources.guest;
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
    r.calculated_requests.insert(hp_name.clone(), hp_req);
    r.calculated_limits.insert(hp_name, hp_req);
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
        .insert("memory".into(), q_add(req_diff, i.overhead));
    if lim.is_some() {
        r.vm_limits
            .insert("memory".into(), q_add(lim_diff, i.overhead));
    }
    Ok(())
}

/// `WithMemoryOverhead` (renderresources.go:295-308): request += overhead unless
/// `overcommitGuestOverhead`; limit += overhead if there is one.
fn with_memory_overhead(r: &mut ResourceRenderer, i: &RenderInput) -> Result<(), FieldError> {
    let mut req = r.vm_requests.get("memory").copied().unwrap_or_else(zero);
    if !i.resources.overcommit_guest_overhead {
        req = q_add(req, i.overhead);
    }
    r.vm_requests.insert("memory".into(), req);
    if let Some(l) = r.vm_limits.get("memory").copied() {
        r.vm_limits.insert("memory".into(), q_add(l, i.overhead));
    }
    Ok(())
}

/// `WithAutoMemoryLimits` (renderresources.go:310-317): limit = trunc(request × ratio).
fn with_auto_memory_limits(r: &mut ResourceRenderer, i: &RenderInput) -> Result<(), FieldError> {
    let ratio = memory_limits_ratio(&i.ns.labels);
    let req = r.vm_requests.get("memory").copied().unwrap_or_else(zero);
    // int64(float64(request.Value()) * ratio): truncation towards zero.
    let value = (req.value() as f64 * ratio) as i64;
    r.calculated_limits.insert(
        "memory".into(),
        ParsedQuantity::from_units(value, req.format),
    );
    Ok(())
}

/// `WithNetworksDRA`'s claims: one per network with a `resourceClaim`.
fn network_claims(i: &RenderInput) -> Vec<ClaimRef> {
    let networks = i.vmi.spec.networks.as_deref().unwrap_or_default();
    networks
        .iter()
        .filter_map(|net| claim_request(&net.extra, "resourceClaim"))
        .collect()
}

/// `getMemoryLimitsRatio` (renderresources.go:731-763): the namespace label
/// `alpha.kubevirt.io/auto-memory-limits-ratio` when it parses as a float ≥ 1, else 2.0.
pub(crate) fn memory_limits_ratio(labels: &BTreeMap<String, String>) -> f64 {
    labels
        .get(AUTO_MEMORY_LIMITS_RATIO_LABEL)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|r| *r >= 1.0)
        .unwrap_or(DEFAULT_MEMORY_LIMIT_RATIO)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubevirt_version::KubeVirtVersion;
    use crate::launcher::overhead::memory_overhead;
    use crate::launcher::resources::KVM_DEVICE;
    use crate::launcher::test_vmi as vmi;
    use serde_json::json;

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

    /// KubeVirt's test settings with another `cpuAllocationRatio`.
    fn ratio(cpu_allocation_ratio: u32) -> ClusterSettings {
        ClusterSettings {
            cpu_allocation_ratio,
            ..kubevirt_test_settings()
        }
    }

    /// Annotate `v` with `alpha.kubevirt.io/EmulatorThreadCompleteToEvenParity`.
    fn even_parity(v: &mut VirtualMachineInstance) {
        let key = EMULATOR_THREAD_COMPLETE_TO_EVEN_PARITY.to_string();
        v.metadata.annotations = Some([(key, String::new())].into());
    }

    /// The CPU request rendered with settings `s` in a plain namespace.
    fn cpu_request(v: &VirtualMachineInstance, s: &ClusterSettings) -> String {
        req(&render_with(v, s, &NamespaceContext::default()), "cpu")
    }

    /// The error of a VMI that cannot be rendered (no overhead).
    fn render_error(v: &VirtualMachineInstance, s: &ClusterSettings) -> String {
        compute_resources(v, s, 0, &NamespaceContext::default())
            .unwrap_err()
            .to_string()
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

    /// The table is KubeVirt's: `newResourceRenderer`'s options, then `VMIResourcePredicates`
    /// (template.go:1633-1674) in their order.
    #[test]
    fn rules_run_in_kubevirt_order() {
        let names: Vec<&str> = RULES.iter().map(|r| r.option).collect();
        assert_eq!(
            names,
            [
                "WithEphemeralStorageRequest",
                "WithVirtualizationResources",
                "WithMemoryRequests",
                "WithCPUPinning",
                "WithoutDedicatedCPU",
                "WithHugePages",
                "WithMemoryOverhead",
                "WithAutoMemoryLimits",
                "WithNetworkResources",
                "WithGPUsDevicePlugins",
                "WithGPUsDRA",
                "WithHostDevicesDevicePlugins",
                "WithHostDevicesDRA",
                "WithNetworksDRA",
                "WithSEV",
                "WithTDX",
                "WithPersistentReservation",
                "WithIOMMUFD",
            ]
        );
    }

    /// Predicates read the VMI as written, not the renderer: `WithCPUPinning` sets a memory
    /// limit, yet `WithAutoMemoryLimits` still applies (its calculated limit then loses to the
    /// pinned one), and `WithMemoryRequests` is decided before any rule ran.
    #[test]
    fn predicates_see_the_vmi_as_written() {
        let v = vmi(json!({"domain": {"cpu": {"dedicatedCpuPlacement": true},
            "resources": {"requests": {"memory": "64M"}}}}));
        let res = VmiResources::parse(&v.spec).unwrap();
        let s = kubevirt_test_settings();
        let ns = NamespaceContext {
            quota_limits_memory: true,
            ..Default::default()
        };
        let input = RenderInput {
            vmi: &v,
            resources: &res,
            settings: &s,
            ns: &ns,
            overhead: ParsedQuantity::from_units(0, Format::DecimalSI),
            admissible: false,
        };
        let applied: Vec<&str> = RULES
            .iter()
            .filter(|r| (r.applies)(&input))
            .map(|r| r.option)
            .collect();
        assert_eq!(
            applied,
            [
                "WithEphemeralStorageRequest",
                "WithVirtualizationResources",
                "WithCPUPinning",
                "WithMemoryOverhead",
                "WithAutoMemoryLimits",
                "WithGPUsDRA",
                "WithHostDevicesDRA",
            ]
        );
        let r = render_compute_resources(&v, &res, &s, 0, &ns).unwrap();
        assert_eq!(r.request_value("memory"), Some(64_000_000));
        assert_eq!(r.limit_value("memory"), Some(64_000_000));
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
        let s = ratio(1);
        let v = vmi(json!({"domain": {"devices": {"disableHotplug": true}, "cpu": {"cores": 3}}}));
        assert_eq!(cpu_request(&v, &s), "3");
    }

    /// template_test.go:2450-2481: a user CPU request (150m) overrides the calculated one
    /// (ratio 16, 5 cores).
    #[test]
    fn user_cpu_request_wins_template_test_2450() {
        let s = ratio(16);
        let v = vmi(
            json!({"domain": {"devices": {"disableHotplug": true}, "cpu": {"cores": 5},
            "resources": {"requests": {"cpu": "150m"}}}}),
        );
        assert_eq!(cpu_request(&v, &s), "150m");
    }

    /// facts §4.6: ratio 16 & 1 vCPU → `62500u`; 11 vCPUs / 10 → `1100m`; renderresources_test.go:62-90:
    /// 5 cores → `500m` / `5`, and with auto CPU limits the limit is the vCPU count.
    #[test]
    fn cpu_request_rendering_like_kubevirt() {
        let s16 = ratio(16);
        let one = vmi(json!({"domain": {"cpu": {"cores": 1}}}));
        assert_eq!(cpu_request(&one, &s16), "62500u");
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
        let s1 = ratio(1);
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

    /// A hugepages VMI with only `memory.guest`: its memory request is the overhead alone, whose
    /// Go quantity is BinarySI (no page-table term), so KubeVirt writes it in `Mi`
    /// (kvm/hypervisorbackend.go:73-84); with a request it stays DecimalSI, as above.
    #[test]
    fn an_overhead_without_page_tables_is_written_in_binary_units() {
        let v = vmi(json!({"domain": {"devices": {"disableHotplug": true},
            "memory": {"hugepages": {"pageSize": "2Mi"}, "guest": "64Mi"}}}));
        let r = render(&v);
        let request = req(&r, "memory");
        let overhead = memory_overhead(&v.spec, &kubevirt_test_settings())
            .unwrap()
            .total_bytes;
        assert_eq!(overhead % (1 << 20), 0, "a whole number of MiB: {overhead}");
        assert_eq!(request, format!("{}Mi", overhead >> 20));
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
                even_parity(&mut v);
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
                even_parity(&mut v);
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
    /// prints decimal bytes, no request at all takes the overhead's format, BinarySI without a
    /// page-table term ([`overhead_format`]).
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
        assert_eq!(req(&render(&nothing), "memory"), "268Mi");
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
    fn errors_name_the_field() {
        let v = vmi(json!({"domain": {"resources": {"requests": {"memory": "2Gx"}}}}));
        let e = render_error(&v, &kubevirt_test_settings());
        assert!(
            e.to_string()
                .starts_with("spec.domain.resources.requests.memory: "),
            "{e}"
        );
        let v = vmi(json!({"domain": {"memory": {"guest": "lots"}}}));
        let e = render_error(&v, &kubevirt_test_settings());
        assert!(
            e.to_string().starts_with("spec.domain.memory.guest: "),
            "{e}"
        );
        // A ratio so large that Go would format the request as "1e-08m" (MustParse would panic).
        let s = ratio(u32::MAX);
        let e = render_error(&vmi(json!({"domain": {}})), &s);
        assert!(e.to_string().starts_with("spec.domain.cpu"), "{e}");
    }

    /// Settings of KubeVirt's template tests under release `v`.
    fn at(v: KubeVirtVersion) -> ClusterSettings {
        ClusterSettings {
            kubevirt_version: v,
            ..kubevirt_test_settings()
        }
    }

    /// Each release's template_test.go "should add cpu and memory constraints to a template"
    /// (requests cpu 1m / memory 1G, limits 2m / 2G, no domain.cpu): v1.5.0 template_test.go:1912-1913,
    /// v1.5.1 and v1.5.3 1943-1944, v1.6.0 and v1.6.4 1977-1978, v1.7.0 2045-2046, v1.8.0 2055-2056, v1.9.0 2228-2229,
    /// main@d923fdb815 2229-2230.
    #[test]
    fn cpu_and_memory_constraints_per_version() {
        use KubeVirtVersion::*;
        for (v, amd64, arm64) in [
            (
                V1_5,
                ("1266194277", "2266194277"),
                ("1400412005", "2400412005"),
            ),
            (
                V1_5_1,
                ("1266194277", "2266194277"),
                ("1400412005", "2400412005"),
            ),
            (
                V1_5_3,
                ("1266194277", "2266194277"),
                ("1400412005", "2400412005"),
            ),
            (
                V1_6,
                ("1282971493", "2282971493"),
                ("1417189221", "2417189221"),
            ),
            (
                V1_6_4,
                ("1282971493", "2282971493"),
                ("1417189221", "2417189221"),
            ),
            (
                V1_7,
                ("1282971493", "2282971493"),
                ("1417189221", "2417189221"),
            ),
            (
                V1_8,
                ("1282971493", "2282971493"),
                ("1417189221", "2417189221"),
            ),
            (
                V1_9,
                ("1282971493", "2282971493"),
                ("1417189221", "2417189221"),
            ),
            (
                Main,
                ("1303943013", "2303943013"),
                ("1438160741", "2438160741"),
            ),
        ] {
            for (arch, (request, limit)) in [("amd64", amd64), ("arm64", arm64)] {
                let x = vmi(json!({"architecture": arch, "domain": {
                    "devices": {"disableHotplug": true},
                    "resources": {"requests": {"cpu": "1m", "memory": "1G"},
                                  "limits": {"cpu": "2m", "memory": "2G"}}}}));
                let r = render_with(&x, &at(v), &NamespaceContext::default());
                assert_eq!((req(&r, "cpu"), lim(&r, "cpu")), ("1m".into(), "2m".into()));
                assert_eq!(
                    (req(&r, "memory"), lim(&r, "memory")),
                    (request.into(), limit.into()),
                    "{v} {arch}"
                );
            }
        }
    }

    /// template_test.go:2483-2581 on main with PR 18880 (06135ce40d, template_test.go:2563,2571):
    /// "hugepages memory only" and "guest memory and hugepages" no longer expect overcommit;
    /// "guest memory only" still does. v1.6.4 … v1.9 scale all three.
    #[test]
    fn hugepages_overcommit_per_version_pr_18880() {
        let ns = NamespaceContext::default();
        for v in KubeVirtVersion::ALL
            .into_iter()
            .filter(|v| !v.formula().admission_sets_memory_request.value)
        {
            for (name, domain, hugepages) in [
                ("guest", json!({"memory": {"guest": "1Gi"}}), false),
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
            ] {
                let x = vmi(json!({"domain": domain}));
                let s110 = ClusterSettings {
                    memory_overcommit: 110,
                    ..at(v)
                };
                let overhead = memory_overhead(&x.spec, &s110).unwrap().total_bytes;
                let mem = |s: &ClusterSettings| {
                    let r = compute_resources(&x, s, overhead, &ns).unwrap();
                    ParsedQuantity::parse(&req(&r, "memory")).unwrap().value()
                };
                let (m100, m110) = (mem(&at(v)), mem(&s110));
                let expect_overcommit = !hugepages || v != KubeVirtVersion::Main;
                if hugepages {
                    // With hugepages the memory request is the overhead alone; the scaling shows
                    // in hugepages-1Gi.
                    let r = compute_resources(&x, &s110, overhead, &ns).unwrap();
                    let hp = ParsedQuantity::parse(&req(&r, "hugepages-1Gi"))
                        .unwrap()
                        .value();
                    let expected = if expect_overcommit {
                        (1 << 30) * 100 / 110
                    } else {
                        1 << 30
                    };
                    assert_eq!(hp, expected, "{v} {name}");
                    assert_eq!(m100, m110, "{v} {name}");
                } else {
                    assert_eq!((m100 - overhead) * 100 / 110, m110 - overhead, "{v} {name}");
                }
            }
        }
    }

    /// run-controller's rendering ([`render_admissible_compute_resources`]) never scales
    /// hugepages, whatever the release; [`render_compute_resources`] reproduces v1.9.0's scaling.
    #[test]
    fn admissible_rendering_never_overcommits_hugepages() {
        let x =
            vmi(json!({"domain": {"memory": {"guest": "2Gi", "hugepages": {"pageSize": "1Gi"}}}}));
        let res = VmiResources::parse(&x.spec).unwrap();
        // Before v1.6.4 the request came from virt-api (tested with the admission defaults in
        // crate::launcher::defects); the renderer derives it from v1.6.4 / v1.7.
        for v in KubeVirtVersion::ALL
            .into_iter()
            .filter(|v| !v.formula().admission_sets_memory_request.value)
        {
            let s = ClusterSettings {
                memory_overcommit: 150,
                ..at(v)
            };
            let ns = NamespaceContext::default();
            let fixed = render_admissible_compute_resources(&x, &res, &s, 0, &ns).unwrap();
            assert_eq!(req(&fixed, "hugepages-1Gi"), "2Gi", "{v}");
            assert_eq!(lim(&fixed, "hugepages-1Gi"), "2Gi", "{v}");
            let reproduced = render_compute_resources(&x, &res, &s, 0, &ns).unwrap();
            let expected = match v {
                KubeVirtVersion::Main => "2Gi".to_string(),
                _ => ((2i64 << 30) * 100 / 150).to_string(),
            };
            assert_eq!(req(&reproduced, "hugepages-1Gi"), expected, "{v}");
        }
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

    /// renderresources_test.go:751-905 with other names: no setting, no check; with one
    /// permitting a single PCI resource, a listed GPU or host device passes and an unlisted one
    /// is refused in KubeVirt's words; DRA devices are skipped while their Beta gate is on,
    /// not once it is disabled; every refusal is joined into one message.
    #[test]
    fn permitted_host_devices_refuse_unlisted_devices() {
        let permits = |names: &[&str]| ClusterSettings {
            permitted_host_devices: Some(names.iter().map(|n| n.to_string()).collect()),
            ..kubevirt_test_settings()
        };
        let s = permits(&["example.com/fpga"]);
        let devices = |gpus: serde_json::Value, host: serde_json::Value| {
            vmi(json!({"domain": {"devices": {"gpus": gpus, "hostDevices": host}}}))
        };
        let check =
            |v: &VirtualMachineInstance, s: &ClusterSettings| unpermitted_host_devices(v, s);
        let fpga = json!([{"name": "a", "deviceName": "example.com/fpga"}]);
        let other = json!([{"name": "b", "deviceName": "example.com/tpu"}]);
        assert_eq!(check(&devices(json!(null), json!(null)), &s), None);
        assert_eq!(check(&devices(fpga.clone(), fpga.clone()), &s), None);
        assert_eq!(
            check(&devices(json!(null), other.clone()), &s).as_deref(),
            Some(
                "HostDevice example.com/tpu is not permitted in permittedHostDevices configuration"
            )
        );
        assert_eq!(
            check(&devices(other.clone(), other.clone()), &s).as_deref(),
            Some(
                "GPU example.com/tpu is not permitted in permittedHostDevices configuration \
                 HostDevice example.com/tpu is not permitted in permittedHostDevices configuration"
            )
        );
        // Without the setting nothing is checked; an empty one permits nothing.
        let unset = kubevirt_test_settings();
        assert_eq!(check(&devices(other.clone(), json!(null)), &unset), None);
        assert!(check(&devices(fpga.clone(), json!(null)), &permits(&[])).is_some());
        // DRA devices (a claimRequest, no deviceName): skipped with the Beta gates on.
        let claim = json!([{"name": "d", "claimRequest": {"claimName": "c", "requestName": "r"}}]);
        let dra = devices(claim.clone(), claim.clone());
        assert_eq!(check(&dra, &s), None);
        let gates_off = ClusterSettings {
            disabled_feature_gates: vec!["GPUsWithDRA".into()],
            ..s.clone()
        };
        assert_eq!(
            check(&dra, &gates_off).as_deref(),
            Some("GPU  is not permitted in permittedHostDevices configuration")
        );
        // A legacy device next to a DRA one is still checked.
        let mixed = devices(json!([claim[0].clone(), other[0].clone()]), json!(null));
        assert_eq!(
            check(&mixed, &s).as_deref(),
            Some("GPU example.com/tpu is not permitted in permittedHostDevices configuration")
        );
    }
}
