//! The virt-launcher memory overhead, term by term.
//!
//! KubeVirt v1.9.0 computes it in `GetMemoryOverhead` (pkg/hypervisor/kvm/hypervisorbackend.go:69-209;
//! the mshv backend is a byte-for-byte copy) and adds network binding memory afterwards in
//! `CalculateMemoryOverhead` (pkg/virt-controller/services/template.go:1678-1694,
//! pkg/network/resources/memory.go). The result is what the `compute` container's memory request
//! grows by and what the pod annotation `kubevirt.io/memory-overhead-bytes` says.
//!
//! Unlike KubeVirt, which returns one number, [`memory_overhead`] returns every term with its
//! bytes, why it applies and the KubeVirt source line it comes from.

use crate::api::resources::{FieldError, VmiResources};
use crate::api::vmi::{Devices, VirtualMachineInstanceSpec};
use crate::config::ClusterSettings;
use crate::kubevirt_version::{Formula, Sourced};
use serde::{Deserialize, Serialize};

/// One MiB in bytes.
pub const MIB: i64 = 1024 * 1024;

/// One term of the overhead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverheadTerm {
    /// Stable machine name, e.g. `pageTables`, `virtLauncher`, `vcpus`, `passt`.
    pub name: String,
    /// Bytes this term adds.
    pub bytes: i64,
    /// Why the term applies (or its inputs), for humans.
    pub reason: String,
    /// The KubeVirt source the term comes from, `TAG:file:lines` of the selected version.
    pub source: String,
}

/// The overhead with its terms; `total_bytes` is their sum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OverheadBreakdown {
    /// What `CalculateMemoryOverhead` returns, in bytes.
    pub total_bytes: i64,
    /// The terms, in KubeVirt's order of addition; the ratio step and network terms come last.
    pub terms: Vec<OverheadTerm>,
}

/// Number of vCPUs as the overhead formula counts them (hypervisorbackend.go:91-113,
/// pkg/util/hardware/hw_utils.go:87-104): with `domain.cpu`, [`Cpu::vcpus`](crate::api::vmi::Cpu::vcpus)
/// (cores × sockets × threads skipping zero factors, 32-bit, wrapping as in Go); without it, the
/// CPU limit's `Value()` (rounded up) else the request's; at least 1.
/// Returns (count, explanation).
pub(crate) fn overhead_vcpus(
    spec: &VirtualMachineInstanceSpec,
    res: &VmiResources,
) -> (i64, String) {
    let (n, why) = match &spec.domain.cpu {
        Some(cpu) => (
            cpu.vcpus(),
            format!(
                "domain.cpu: cores {} × sockets {} × threads {} (zeros skipped)",
                cpu.cores.unwrap_or(0),
                cpu.sockets.unwrap_or(0),
                cpu.threads.unwrap_or(0)
            ),
        ),
        None => match (res.limit("cpu"), res.request("cpu")) {
            (Some(l), _) => (
                l.value(),
                format!("no domain.cpu: CPU limit {l} rounded up"),
            ),
            (None, Some(q)) => (
                q.value(),
                format!("no domain.cpu: CPU request {q} rounded up"),
            ),
            (None, None) => (0, "no domain.cpu and no CPU request/limit".to_string()),
        },
    };
    if n < 1 {
        (1, format!("{why}; at least 1"))
    } else {
        (n, why)
    }
}

/// KubeVirt's `MultiplyMemory` for the overhead ratio (hypervisorbackend.go:203-209):
/// `O + 1000 · trunc(ceil(O/1000) · (ratio − 1))`.
/// Saturates at the i64 range for absurd ratios (the float → integer cast saturates as Go's
/// conversion does not, but no real cluster gets there: the ratio is validated to be ≥ 1).
pub(crate) fn multiply_memory(bytes: i64, ratio: f64) -> i64 {
    let kilo = bytes.saturating_add(999).div_euclid(1000);
    let extra = (kilo as f64 * (ratio - 1.0)).trunc() as i64;
    bytes.saturating_add(extra.saturating_mul(1000))
}

/// Compute the launcher memory overhead of a VMI spec (`CalculateMemoryOverhead`).
///
/// `spec.architecture` wins over `settings.architecture`. Errors name the spec field whose
/// quantity is invalid or negative ([`VmiResources::parse`]). A caller that goes on to render the
/// compute container parses once and calls [`memory_overhead_with`].
pub fn memory_overhead(
    spec: &VirtualMachineInstanceSpec,
    settings: &ClusterSettings,
) -> Result<OverheadBreakdown, FieldError> {
    Ok(memory_overhead_with(
        spec,
        &VmiResources::parse(spec)?,
        settings,
    ))
}

/// [`memory_overhead`] of a spec whose quantities `res` are already parsed.
///
/// The terms and their sources are those of `settings.kubevirt_version`
/// ([`crate::kubevirt_version::Formula`]): the QEMU and video sizes, whether the SEV term counts
/// SNP, whether a disabled vTPM counts, where the dedicated-CPU 100Mi goes relative to the ratio,
/// whether `reservedOverhead` and the passt binding count.
pub(crate) fn memory_overhead_with(
    spec: &VirtualMachineInstanceSpec,
    res: &VmiResources,
    settings: &ClusterSettings,
) -> OverheadBreakdown {
    let formula = settings.kubevirt_version.formula();
    let mut terms = Terms(Vec::new());
    base_terms(&mut terms, spec, res, formula);
    device_terms(&mut terms, spec, settings, formula);
    let mut terms = terms.0;
    ratio_terms(&mut terms, spec, res, settings, formula);
    network_terms(&mut terms, spec, settings, formula);
    let total_bytes = terms
        .iter()
        .fold(0i64, |acc, t| acc.saturating_add(t.bytes));
    OverheadBreakdown { total_bytes, terms }
}

/// The terms as they are added, in KubeVirt's order.
struct Terms(Vec<OverheadTerm>);

impl Terms {
    fn term(&mut self, name: &str, bytes: i64, reason: String, source: &str) {
        self.0.push(OverheadTerm {
            name: name.to_string(),
            bytes,
            reason,
            source: source.to_string(),
        });
    }
}

/// Page tables, the fixed processes, the vCPUs (terms 1-3).
fn base_terms(
    terms: &mut Terms,
    spec: &VirtualMachineInstanceSpec,
    res: &VmiResources,
    formula: &Formula,
) {
    let src = &formula.terms;
    let mut term = |name: &str, bytes: i64, reason: String, source: &str| {
        terms.term(name, bytes, reason, source)
    };
    // 1. Page tables: memory *request* / 512, through ScaledValue(Kilo).
    let (pt, pt_reason) = match res.request("memory") {
        Some(r) => {
            let kilo = i128::from(r.scaled_kilo());
            ((kilo * 1000 / 512) as i64, format!("memory request {r} / 512 (request rounded up to whole kB)"))
        }
        None => (0, "no memory request: KubeVirt sizes page tables from the request only (not memory.guest)".to_string()),
    };
    term("pageTables", pt, pt_reason, src.page_tables);

    // 2. Fixed process RSS estimates.
    for (name, bytes, process) in [
        ("virtLauncherMonitor", 25 * MIB, "virt-launcher-monitor"),
        ("virtLauncher", 100 * MIB, "virt-launcher"),
    ] {
        term(name, bytes, format!("{process} process"), src.processes);
    }
    // The estimates that changed between releases cite their own constant.
    for (name, estimate, process) in [
        ("virtlogd", &formula.virtlogd_bytes, "virtlogd"),
        ("virtqemud", &formula.virtqemud_bytes, "virtqemud"),
        ("qemu", &formula.qemu_bytes, "QEMU"),
    ] {
        let reason = format!("{process} process");
        term(name, estimate.value, reason, estimate.source);
    }

    // 3. vCPUs: 8Mi each.
    let (vcpus, why) = overhead_vcpus(spec, res);
    term(
        "vcpus",
        (8 * MIB).saturating_mul(vcpus),
        format!("8Mi × {vcpus} vCPU(s): {why}"),
        src.vcpus,
    );
}

/// The terms that depend on devices and features (4-11), each a fixed size once its condition
/// holds.
fn device_terms(
    terms: &mut Terms,
    spec: &VirtualMachineInstanceSpec,
    settings: &ClusterSettings,
    formula: &Formula,
) {
    let src = &formula.terms;
    // 4-12. The terms that depend on devices and features, each a fixed size once its
    // condition holds: (applies, name, bytes, reason, source lines), in KubeVirt's order.
    let devices = &spec.domain.devices;
    // Up to v1.1 the arm64 term reads the cluster's architecture only (v1.1.0 template.go:1396).
    let reads_vmi_arch = formula
        .before_v1_3
        .is_none_or(|b| b.arm64_reads_vmi_architecture.value);
    let arch = spec
        .architecture
        .as_deref()
        .filter(|a| reads_vmi_arch && !a.is_empty())
        .unwrap_or(settings.architecture.as_str());
    let host_devs = devices.host_devices.as_ref().map_or(0, |d| d.len());
    let gpus = devices.gpus.as_ref().map_or(0, |d| d.len());
    let sriov = devices
        .interfaces
        .as_ref()
        .map_or(0, |i| i.iter().filter(|i| i.sriov.is_some()).count());
    let exec_probes = [&spec.liveness_probe, &spec.readiness_probe]
        .into_iter()
        .flatten()
        .filter(|p| p.exec.is_some())
        .count() as i64;
    let sev = if formula.sev_counts_snp.value {
        spec.is_sev()
    } else {
        spec.domain
            .launch_security
            .as_ref()
            .is_some_and(|l| l.sev.is_some())
    };
    let tpm = devices
        .tpm
        .as_ref()
        .is_some_and(|t| !formula.tpm_honours_enabled.value || t.enabled != Some(false));
    let video = formula.video_ram_bytes.value;
    let rules: [(bool, &str, i64, String, &str); 8] = [
        (
            true,
            "ioThread",
            8 * MIB,
            "one IO thread, fixed (independent of ioThreadsPolicy)".into(),
            src.io_thread,
        ),
        (
            devices.autoattach_graphics_device != Some(false),
            "videoRam",
            video,
            "graphics device attached (autoattachGraphicsDevice not false)".into(),
            src.video_ram,
        ),
        (
            arch == "arm64",
            "arm64",
            128 * MIB,
            "arm64: UEFI pflash".into(),
            src.arm64,
        ),
        (
            host_devs + gpus + sriov > 0,
            "vfio",
            1024 * MIB,
            format!(
                "VFIO devices: {gpus} GPU(s), {host_devs} host device(s), {sriov} SR-IOV interface(s); added once"
            ),
            src.vfio,
        ),
        (
            spec.volumes
                .as_ref()
                .is_some_and(|v| v.iter().any(|v| v.downward_metrics.is_some())),
            "downwardMetrics",
            MIB,
            "a downwardMetrics volume".into(),
            src.downward_metrics,
        ),
        (
            exec_probes > 0,
            "execProbes",
            100 * MIB + 10 * MIB * exec_probes,
            format!("{exec_probes} exec probe(s): 100Mi once + 10Mi each"),
            src.exec_probes,
        ),
        (
            sev,
            "sev",
            256 * MIB,
            if formula.sev_counts_snp.value {
                "AMD SEV/SEV-SNP launch security".into()
            } else {
                "AMD SEV launch security".into()
            },
            src.sev,
        ),
        (
            tpm,
            "tpm",
            53 * MIB, // swtpm, pkg/tpm/tpm.go:5-8
            "vTPM (swtpm) enabled".into(),
            src.tpm,
        ),
    ];
    for (applies, name, bytes, reason, source) in rules {
        if applies {
            terms.term(name, bytes, reason, source);
        }
    }
    if let Some(old) = formula.before_v1_3 {
        passt_without_ports(terms, devices, &old.passt_without_ports_bytes);
    }
}

/// Before v1.3: a fixed size for each interface with the `passt` binding method that forwards
/// all ports (no `ports`), before the ratio (v1.2.0 renderresources.go:395-401).
fn passt_without_ports(terms: &mut Terms, devices: &Devices, each: &Sourced<i64>) {
    for iface in devices.interfaces.as_deref().unwrap_or_default() {
        let has_ports = iface.extra.read(|m| {
            m.get("ports")
                .and_then(|p| p.as_array())
                .is_some_and(|p| !p.is_empty())
        });
        if iface.passt.is_some() && !has_ports {
            let reason = format!(
                "interface {:?} uses the passt binding method without ports (forwards all ports)",
                iface.name
            );
            terms.term("passt", each.value, reason, each.source);
        }
    }
}

/// The dedicated-CPU term (12; before the ratio from v1.6, after it up to v1.5),
/// `reservedOverhead` (13) and the ratio (14).
fn ratio_terms(
    terms: &mut Vec<OverheadTerm>,
    spec: &VirtualMachineInstanceSpec,
    res: &VmiResources,
    settings: &ClusterSettings,
    formula: &Formula,
) {
    let src = &formula.terms;
    let dedicated = spec.is_cpu_dedicated();
    let dedicated_why = if dedicated {
        "dedicatedCpuPlacement"
    } else {
        "Guaranteed QoS wanted (CPU and memory requests equal limits)"
    };
    // 12. Dedicated CPUs or Guaranteed QoS: before the ratio from v1.6, after it up to v1.5,
    // none in v1.0.
    let counted = formula.before_v1_3.is_none_or(|b| b.dedicated_term.value);
    let wanted = counted && (dedicated || res.wants_guaranteed_qos());
    let dedicated_term = wanted.then(|| OverheadTerm {
        name: "dedicatedCpuOrGuaranteed".into(),
        bytes: 100 * MIB,
        reason: dedicated_why.into(),
        source: src.dedicated.into(),
    });
    let after_ratio = formula.dedicated_after_ratio.value;
    if !after_ratio && let Some(t) = dedicated_term.clone() {
        terms.push(t);
    }
    // 13. reservedOverhead.addedOverhead (from v1.8).
    if formula.reserved_overhead.value
        && let Some(r) = res.reserved_overhead
    {
        terms.push(OverheadTerm {
            name: "reservedOverhead".into(),
            bytes: r.value(),
            reason: format!("memory.reservedOverhead.addedOverhead {r}"),
            source: src.reserved_overhead.into(),
        });
    }
    let before_ratio: i64 = terms
        .iter()
        .fold(0i64, |acc, t| acc.saturating_add(t.bytes));

    // 14. additionalGuestMemoryOverheadRatio.
    if let Some(text) = settings
        .additional_guest_memory_overhead_ratio
        .as_deref()
        .filter(|t| !t.is_empty())
        && let Ok(ratio) = text.trim().parse::<f64>()
    {
        let after = multiply_memory(before_ratio, ratio);
        terms.push(OverheadTerm {
            name: "overheadRatio".into(),
            bytes: after - before_ratio,
            reason: format!(
                "additionalGuestMemoryOverheadRatio {text}: the sum of the terms above × ({ratio} − 1), in whole kB"
            ),
            source: src.ratio.into(),
        });
    }
    if after_ratio && let Some(mut t) = dedicated_term {
        t.reason
            .push_str(" (added after the ratio, not multiplied)");
        terms.push(t);
    }
}

/// Network binding memory, added after the ratio (`CalculateMemoryOverhead`).
fn network_terms(
    terms: &mut Vec<OverheadTerm>,
    spec: &VirtualMachineInstanceSpec,
    settings: &ClusterSettings,
    formula: &Formula,
) {
    let src = &formula.terms;
    let devices = &spec.domain.devices;
    let interfaces = devices.interfaces.as_deref().unwrap_or_default();
    if formula.passt_memory.value && interfaces.iter().any(|i| i.passt_binding.is_some()) {
        terms.push(OverheadTerm {
            name: "passt".into(),
            bytes: 250 * MIB,
            reason: "an interface uses the passt core binding".into(),
            source: formula.passt_memory.source.into(),
        });
    }
    if formula.before_v1_3.is_some() {
        // No binding plugin memory before v1.3.
        return;
    }
    let mut seen = std::collections::BTreeSet::new();
    for iface in interfaces {
        let Some(plugin) = iface
            .binding
            .as_ref()
            .and_then(|b| b.get("name"))
            .and_then(|n| n.as_str())
        else {
            continue;
        };
        if !seen.insert(plugin.to_string()) {
            continue;
        }
        if let Some(bytes) = settings.binding_plugin_memory.get(plugin) {
            terms.push(OverheadTerm {
                name: format!("bindingPlugin/{plugin}"),
                bytes: *bytes,
                reason: format!(
                    "network binding plugin {plugin:?}: its computeResourceOverhead memory request"
                ),
                source: src.network.into(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SmallMap;
    use crate::api::resources::FieldProblem;
    use crate::api::vmi::{
        Cpu, Interface, LaunchSecurity, Memory, NamedDevice, Probe, ReservedOverhead,
        ResourceRequirements, Tpm, Volume,
    };
    use crate::kubevirt_version::KubeVirtVersion;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn q(s: &str) -> Quantity {
        Quantity(s.to_string())
    }

    /// KubeVirt's test fixture: 1Gi memory request, empty limits (hypervisorbackend_test.go BeforeEach).
    fn spec_with(requests: &[(&str, &str)], limits: &[(&str, &str)]) -> VirtualMachineInstanceSpec {
        let mut spec = VirtualMachineInstanceSpec::default();
        let map = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), q(v)))
                .collect::<SmallMap<_>>()
        };
        spec.domain.resources = Some(ResourceRequirements {
            requests: Some(map(requests)),
            limits: Some(map(limits)),
            ..Default::default()
        });
        spec
    }

    fn base_1gi() -> VirtualMachineInstanceSpec {
        spec_with(&[("memory", "1Gi")], &[])
    }

    fn total(spec: &VirtualMachineInstanceSpec) -> i64 {
        memory_overhead(spec, &ClusterSettings::default())
            .unwrap()
            .total_bytes
    }

    const BASE_1GI: i64 = 270 * MIB; // facts §5: 1Gi / 1 vCPU = 270Mi = 283115520 B

    /// hypervisorbackend_test.go "the vmi is not requesting any specific device": 270Mi.
    #[test]
    fn worked_value_1gi_1vcpu() {
        assert_eq!(total(&base_1gi()), 283_115_520);
        assert_eq!(total(&base_1gi()), BASE_1GI);
    }

    /// facts §5 / seed §7: 2Gi/2 vCPU = 280Mi and 8Gi/8 = 340Mi, byte-exact as measured on a
    /// v1.9.0 cluster. The facts' "4Gi/4 = 300Mi" is one byte short: ceil(4Gi/1000)·1000/512 =
    /// 8388609.375 → 8Mi + 1 B of page tables, so KubeVirt's formula gives 300Mi + 1.
    #[test]
    fn worked_values_from_measurements() {
        for (mem, cpus, bytes) in [
            ("2Gi", 2, 280 * MIB),
            ("4Gi", 4, 300 * MIB + 1),
            ("8Gi", 8, 340 * MIB),
        ] {
            let mut s = spec_with(&[("memory", mem)], &[]);
            s.domain.cpu = Some(Cpu {
                cores: Some(cpus),
                sockets: Some(1),
                threads: Some(1),
                ..Default::default()
            });
            assert_eq!(total(&s), bytes, "{mem}/{cpus}");
        }
    }

    /// facts §5: 1G request / 1 vCPU = 282971493 B (the base of template_test.go's 1282971493).
    #[test]
    fn worked_value_1g() {
        let s = spec_with(&[("memory", "1G"), ("cpu", "1")], &[]);
        assert_eq!(total(&s), 282_971_493);
    }

    /// hypervisorbackend_test.go "should adjust overhead based on the cores/threads/sockets".
    #[test]
    fn cpu_topology_2x2x2() {
        let mut s = base_1gi();
        s.domain.cpu = Some(Cpu {
            cores: Some(2),
            threads: Some(2),
            sockets: Some(2),
            ..Default::default()
        });
        assert_eq!(total(&s), BASE_1GI + 7 * 8 * MIB);
    }

    /// hypervisorbackend_test.go "should adjust overhead": limits win over requests without domain.cpu.
    #[test]
    fn vcpus_from_cpu_limit_then_request() {
        let s = spec_with(&[("memory", "1Gi"), ("cpu", "3")], &[("cpu", "5")]);
        assert_eq!(total(&s), BASE_1GI + 4 * 8 * MIB);
        let s = spec_with(&[("memory", "1Gi"), ("cpu", "3")], &[]);
        assert_eq!(total(&s), BASE_1GI + 2 * 8 * MIB);
        // 1500m rounds up to 2 vCPUs.
        let s = spec_with(&[("memory", "1Gi"), ("cpu", "1500m")], &[]);
        assert_eq!(total(&s), BASE_1GI + 8 * MIB);
        // With domain.cpu, requests are not consulted; all-zero topology counts 1.
        let mut s = spec_with(&[("memory", "1Gi"), ("cpu", "4")], &[]);
        s.domain.cpu = Some(Cpu::default());
        assert_eq!(total(&s), BASE_1GI);
        s.domain.cpu = Some(Cpu {
            sockets: Some(3),
            ..Default::default()
        });
        assert_eq!(total(&s), BASE_1GI + 2 * 8 * MIB);
    }

    /// hypervisorbackend_test.go "should not add videoRAMOverhead".
    #[test]
    fn no_video() {
        let mut s = base_1gi();
        s.domain.devices.autoattach_graphics_device = Some(false);
        assert_eq!(total(&s), BASE_1GI - 32 * MIB);
        s.domain.devices.autoattach_graphics_device = Some(true);
        assert_eq!(total(&s), BASE_1GI);
    }

    /// hypervisorbackend_test.go "should add arm64 overhead"; spec.architecture wins over the cluster's.
    #[test]
    fn arm64() {
        let mut s = base_1gi();
        s.architecture = Some("arm64".into());
        assert_eq!(total(&s), BASE_1GI + 128 * MIB);
        let settings = ClusterSettings {
            architecture: "arm64".into(),
            ..Default::default()
        };
        assert_eq!(
            memory_overhead(&base_1gi(), &settings).unwrap().total_bytes,
            BASE_1GI + 128 * MIB
        );
        s.architecture = Some("s390x".into());
        assert_eq!(total(&s), BASE_1GI);
    }

    /// hypervisorbackend_test.go "should add vfio overhead" with hostDEV / GPU / SRIOV, once.
    #[test]
    fn vfio_once() {
        let dev = |n: &str| NamedDevice {
            name: n.into(),
            ..Default::default()
        };
        let mut s = base_1gi();
        s.domain.devices.host_devices = Some(Box::new(vec![dev("a")]));
        assert_eq!(total(&s), BASE_1GI + 1024 * MIB);
        let mut s = base_1gi();
        s.domain.devices.gpus = Some(Box::new(vec![dev("a"), dev("b")]));
        assert_eq!(total(&s), BASE_1GI + 1024 * MIB);
        let mut s = base_1gi();
        s.domain.devices.interfaces = Some(vec![Interface {
            name: "x".into(),
            sriov: Some(serde_json::json!({}).into()),
            ..Default::default()
        }]);
        assert_eq!(total(&s), BASE_1GI + 1024 * MIB);
    }

    /// hypervisorbackend_test.go "should add downwardMetrics overhead" (volume only, not the device).
    #[test]
    fn downward_metrics_volume() {
        let mut s = base_1gi();
        s.domain.devices.downward_metrics = Some(serde_json::json!({}).into());
        assert_eq!(total(&s), BASE_1GI);
        s.volumes = Some(vec![Volume {
            name: "m".into(),
            downward_metrics: Some(serde_json::json!({}).into()),
            ..Default::default()
        }]);
        assert_eq!(total(&s), BASE_1GI + MIB);
    }

    /// hypervisorbackend_test.go "should add probes overhead": 110Mi, 110Mi, 120Mi.
    #[test]
    fn exec_probes() {
        let exec = || {
            Some(Probe {
                exec: Some(serde_json::json!({"command": ["true"]}).into()),
                ..Default::default()
            })
        };
        let mut s = base_1gi();
        s.liveness_probe = exec().map(Box::new);
        assert_eq!(total(&s), BASE_1GI + 110 * MIB);
        let mut s = base_1gi();
        s.readiness_probe = exec().map(Box::new);
        assert_eq!(total(&s), BASE_1GI + 110 * MIB);
        s.liveness_probe = exec().map(Box::new);
        assert_eq!(total(&s), BASE_1GI + 120 * MIB);
        // An HTTP probe adds nothing.
        let mut s = base_1gi();
        s.liveness_probe = Some(Box::new(Probe {
            extra: serde_json::from_str(r#"{"httpGet": {"port": 80}}"#).unwrap(),
            ..Default::default()
        }));
        assert_eq!(total(&s), BASE_1GI);
    }

    /// hypervisorbackend_test.go "should add SEV overhead"; SNP too; TDX adds nothing.
    #[test]
    fn sev_snp_tdx() {
        for (sev, snp, tdx, extra) in [
            (true, false, false, 256),
            (false, true, false, 256),
            (true, true, false, 256),
            (false, false, true, 0),
        ] {
            let mut s = base_1gi();
            let v = |b: bool| b.then(|| Box::new(serde_json::json!({})));
            s.domain.launch_security = Some(Box::new(LaunchSecurity {
                sev: v(sev),
                snp: v(snp),
                tdx: v(tdx),
                ..Default::default()
            }));
            assert_eq!(total(&s), BASE_1GI + extra * MIB);
        }
    }

    /// hypervisorbackend_test.go TPM case: +53Mi; disabled TPM adds nothing.
    #[test]
    fn tpm() {
        let mut s = base_1gi();
        s.domain.devices.tpm = Some(Box::new(Tpm::default()));
        assert_eq!(total(&s), BASE_1GI + 53 * MIB);
        s.domain.devices.tpm = Some(Box::new(Tpm {
            enabled: Some(false),
            ..Default::default()
        }));
        assert_eq!(total(&s), BASE_1GI);
    }

    /// hypervisorbackend_test.go "should add 100Mi of overhead" with DedicatedCPU / QOSGuaranteed.
    #[test]
    fn dedicated_or_guaranteed() {
        let mut s = base_1gi();
        s.domain.cpu = Some(Cpu {
            cores: Some(1),
            dedicated_cpu_placement: Some(true),
            ..Default::default()
        });
        assert_eq!(total(&s), BASE_1GI + 100 * MIB);
        // One core, 1Gi memory and 4 CPUs requested, with this CPU limit.
        let one_core = |cpu_limit: &str| {
            let mut s = spec_with(
                &[("memory", "1Gi"), ("cpu", "4")],
                &[("memory", "1Gi"), ("cpu", cpu_limit)],
            );
            s.domain.cpu = Some(Cpu {
                cores: Some(1),
                ..Default::default()
            });
            s
        };
        assert_eq!(total(&one_core("4")), BASE_1GI + 100 * MIB);
        // Memory equal but CPU limit differs: not Guaranteed.
        assert_eq!(total(&one_core("5")), BASE_1GI);
    }

    /// hypervisorbackend_test.go "reservedOverhead value is provided": 100G and zero.
    #[test]
    fn reserved_overhead() {
        let with_added = |added: &str| {
            let mut s = base_1gi();
            s.domain.memory = Some(Memory {
                reserved_overhead: Some(Box::new(ReservedOverhead {
                    added_overhead: Some(q(added)),
                    ..Default::default()
                })),
                ..Default::default()
            });
            s
        };
        assert_eq!(total(&with_added("100G")), BASE_1GI + 100_000_000_000);
        assert_eq!(total(&with_added("0")), BASE_1GI);
    }

    /// hypervisorbackend_test.go "should adjust the overhead using the given ratio" (3.2, and a
    /// non-float is ignored) and the headroom table (2.332, 1.234, 1.0) on a 1G/1 CPU VMI.
    #[test]
    fn overhead_ratio() {
        let with = |r: &str, spec: &VirtualMachineInstanceSpec| {
            let settings = ClusterSettings {
                additional_guest_memory_overhead_ratio: Some(r.into()),
                ..Default::default()
            };
            memory_overhead(spec, &settings).unwrap().total_bytes
        };
        assert_eq!(with("3.2", &base_1gi()), multiply_memory(BASE_1GI, 3.2));
        assert_eq!(with("no_float", &base_1gi()), BASE_1GI);
        let s = spec_with(&[("memory", "1G"), ("cpu", "1")], &[]);
        assert_eq!(with("1.0", &s), 282_971_493);
        // ceil(282971493/1000) = 282972; × 0.234 = 66215.448 → 66215 kB.
        assert_eq!(with("1.234", &s), 282_971_493 + 66_215_000);
        // × 1.332 = 376918.704 → 376918 kB.
        assert_eq!(with("2.332", &s), 282_971_493 + 376_918_000);
    }

    /// The network terms come after the ratio (template.go:1685-1691).
    #[test]
    fn passt_and_binding_plugins_after_ratio() {
        let mut s = base_1gi();
        s.domain.devices.interfaces = Some(vec![
            Interface {
                name: "a".into(),
                passt_binding: Some(serde_json::json!({}).into()),
                ..Default::default()
            },
            Interface {
                name: "b".into(),
                binding: Some(serde_json::json!({"name": "slirp"}).into()),
                ..Default::default()
            },
            Interface {
                name: "c".into(),
                binding: Some(serde_json::json!({"name": "slirp"}).into()),
                ..Default::default()
            },
            Interface {
                name: "d".into(),
                binding: Some(serde_json::json!({"name": "unregistered"}).into()),
                ..Default::default()
            },
        ]);
        let mut settings = ClusterSettings {
            additional_guest_memory_overhead_ratio: Some("2".into()),
            ..Default::default()
        };
        settings
            .binding_plugin_memory
            .insert("slirp".into(), 10 * MIB);
        let b = memory_overhead(&s, &settings).unwrap();
        assert_eq!(
            b.total_bytes,
            multiply_memory(BASE_1GI, 2.0) + 250 * MIB + 10 * MIB
        );
        assert_eq!(
            b.terms
                .iter()
                .filter(|t| t.name.starts_with("bindingPlugin"))
                .count(),
            1
        );
    }

    /// A VMI that only sets memory.guest gets a zero page-table term (facts §5 term 1).
    #[test]
    fn guest_only_has_no_page_tables() {
        let mut s = VirtualMachineInstanceSpec::default();
        s.domain.memory = Some(Memory {
            guest: Some(q("8Gi")),
            ..Default::default()
        });
        let b = memory_overhead(&s, &ClusterSettings::default()).unwrap();
        assert_eq!(b.terms[0].bytes, 0);
        assert_eq!(b.total_bytes, 268 * MIB);
    }

    #[test]
    fn page_table_rounding() {
        let s = spec_with(&[("memory", "64M")], &[]);
        let b = memory_overhead(&s, &ClusterSettings::default()).unwrap();
        assert_eq!(b.terms[0].bytes, 125_000);
        let s = spec_with(&[("memory", "1G")], &[]);
        assert_eq!(
            memory_overhead(&s, &ClusterSettings::default())
                .unwrap()
                .terms[0]
                .bytes,
            1_953_125
        );
    }

    /// Found by the property test: u32::MAX cores × sockets × threads and near-i64 quantities
    /// once overflowed; now they saturate or are rejected with the field named.
    #[test]
    fn extreme_values_do_not_overflow() {
        let mut s = base_1gi();
        s.domain.cpu = Some(Cpu {
            cores: Some(u32::MAX),
            sockets: Some(u32::MAX),
            threads: Some(u32::MAX),
            ..Default::default()
        });
        assert!(total(&s) > 0);
        let e = memory_overhead(
            &spec_with(&[("memory", "2000000Ti")], &[]),
            &ClusterSettings::default(),
        )
        .unwrap_err();
        assert!(matches!(e.problem, FieldProblem::TooLarge(_)), "{e}");
        assert!(
            e.to_string()
                .starts_with("spec.domain.resources.requests.memory")
        );
        assert_eq!(multiply_memory(i64::MAX, 2.0), i64::MAX);
    }

    #[test]
    fn terms_sum_to_total_and_cite_sources() {
        let b = memory_overhead(&base_1gi(), &ClusterSettings::default()).unwrap();
        assert_eq!(b.terms.iter().map(|t| t.bytes).sum::<i64>(), b.total_bytes);
        assert!(b.terms.iter().all(|t| t.source.contains(".go")));
    }

    #[test]
    fn bad_quantities_name_the_field() {
        let error = |requests: &[(&str, &str)], limits: &[(&str, &str)]| {
            memory_overhead(&spec_with(requests, limits), &ClusterSettings::default())
                .unwrap_err()
                .to_string()
        };
        let e = error(&[("memory", "2Gx")], &[]);
        assert!(
            e.starts_with("spec.domain.resources.requests.memory: "),
            "{e}"
        );
        assert_eq!(
            error(&[("memory", "-1Gi")], &[]),
            "spec.domain.resources.requests.memory: must not be negative, found \"-1Gi\""
        );
        let e = error(&[], &[("cpu", "x")]);
        assert!(e.starts_with("spec.domain.resources.limits.cpu"), "{e}");
    }

    /// Item 7 of issue 12, at the formula level (no admission defaults): a `domain.cpu` whose
    /// cores, sockets and threads are all 0 counts 1 vCPU (`GetNumberOfVCPUs` gives 0, then the
    /// floor of 1), and the CPU request/limit is consulted only without `domain.cpu`
    /// (hypervisorbackend.go:91-113).
    #[test]
    fn all_zero_topology_counts_one_vcpu_and_ignores_cpu_resources() {
        let mut s = spec_with(&[("memory", "1Gi"), ("cpu", "4")], &[("cpu", "6")]);
        s.domain.cpu = Some(Cpu {
            cores: Some(0),
            sockets: Some(0),
            threads: Some(0),
            ..Default::default()
        });
        let res = VmiResources::parse(&s).unwrap();
        assert_eq!(overhead_vcpus(&s, &res).0, 1);
        assert_eq!(total(&s), BASE_1GI);
        s.domain.cpu = None;
        let res = VmiResources::parse(&s).unwrap();
        assert_eq!(
            overhead_vcpus(&s, &res).0,
            6,
            "the limit wins without domain.cpu"
        );
    }

    /// The total of `spec` under KubeVirt `v` with `ratio` (if any).
    fn total_at(v: KubeVirtVersion, spec: &VirtualMachineInstanceSpec, ratio: Option<&str>) -> i64 {
        let settings = ClusterSettings {
            kubevirt_version: v,
            additional_guest_memory_overhead_ratio: ratio.map(str::to_string),
            ..Default::default()
        };
        memory_overhead(spec, &settings).unwrap().total_bytes
    }

    /// The base of each release's own GetMemoryOverhead unit test (1Gi request, no CPU, nothing
    /// else): staticOverhead + 7Mi + videoRAM + 8Mi, i.e.
    /// v1.1.0 renderresources_test.go:437-493, v1.2.0 (and v1.2.2) 450-506, v1.3.0 and v1.4.0
    /// renderresources_test.go:452-503 (2 + 218 + 16 + 8 = 244Mi; v1.0.0 has no such test, its
    /// constants are v1.1.0's; v1.4.1's
    /// test still says 218Mi, while its code adds virtqemud 40Mi: 249Mi),
    /// v1.5.0 renderresources_test.go:471-503 (223 + 7 + 16 + 8 = 254Mi; v1.5.1 the same lines,
    /// v1.5.3 449-481), v1.6.4 566-598 = 270Mi,
    /// v1.6.0 renderresources_test.go:566-598 and v1.7.0 (the same lines) = 270Mi,
    /// v1.8.0/v1.9.0 pkg/hypervisor/kvm/hypervisorbackend_test.go:43-75 = 270Mi,
    /// main@d923fdb815 hypervisorbackend_test.go:43 (staticOverheadString 243Mi) = 290Mi.
    fn upstream_base(v: KubeVirtVersion) -> i64 {
        match v {
            KubeVirtVersion::V1_0
            | KubeVirtVersion::V1_1
            | KubeVirtVersion::V1_2
            | KubeVirtVersion::V1_3
            | KubeVirtVersion::V1_4 => 244 * MIB,
            KubeVirtVersion::V1_4_1 => 249 * MIB,
            KubeVirtVersion::V1_5 | KubeVirtVersion::V1_5_1 | KubeVirtVersion::V1_5_3 => 254 * MIB,
            KubeVirtVersion::Main => 290 * MIB,
            _ => 270 * MIB,
        }
    }

    /// Each release's "the vmi is not requesting any specific device" and "should add 100Mi of
    /// overhead" (DedicatedCPU / QOSGuaranteed) cases, and "should adjust the overhead using the
    /// given ratio" (3.2), at the lines cited in [`upstream_base`]; v1.0.0 has no 100Mi term
    /// (v1.1.0 renderresources.go:407-409 added it).
    #[test]
    fn per_version_base_dedicated_and_ratio() {
        for v in KubeVirtVersion::ALL {
            let base = upstream_base(v);
            // v1.0.x: nothing for dedicated CPUs or Guaranteed QoS.
            let dedicated_mib = if v == KubeVirtVersion::V1_0 { 0 } else { 100 };
            assert_eq!(total_at(v, &base_1gi(), None), base, "{v} base");
            let mut dedicated = base_1gi();
            dedicated.domain.cpu = Some(Cpu {
                cores: Some(1),
                dedicated_cpu_placement: Some(true),
                ..Default::default()
            });
            assert_eq!(
                total_at(v, &dedicated, None),
                base + dedicated_mib * MIB,
                "{v} dedicated"
            );
            let mut guaranteed = spec_with(
                &[("memory", "1Gi"), ("cpu", "4")],
                &[("memory", "1Gi"), ("cpu", "4")],
            );
            guaranteed.domain.cpu = Some(Cpu {
                cores: Some(1),
                ..Default::default()
            });
            assert_eq!(
                total_at(v, &guaranteed, None),
                base + dedicated_mib * MIB,
                "{v} QoS"
            );
            assert_eq!(
                total_at(v, &base_1gi(), Some("3.2")),
                multiply_memory(base, 3.2),
                "{v} ratio"
            );
            assert_eq!(total_at(v, &base_1gi(), Some("no_float")), base, "{v}");
            // With both, the 100Mi is multiplied from v1.5.3 on (it is added before the ratio:
            // v1.6.0 renderresources.go:480-494, v1.5.3 410-424) and not before (v1.5.0 417-431,
            // v1.4.1 392-406, v1.4.0 and v1.3.0 391-405).
            let both = total_at(v, &dedicated, Some("3.2"));
            if v == KubeVirtVersion::V1_0 {
                assert_eq!(both, multiply_memory(base, 3.2), "{v}");
            } else if v <= KubeVirtVersion::V1_5_1 {
                assert_eq!(both, multiply_memory(base, 3.2) + 100 * MIB, "{v}");
                let names: Vec<_> = memory_overhead(
                    &dedicated,
                    &ClusterSettings {
                        kubevirt_version: v,
                        additional_guest_memory_overhead_ratio: Some("3.2".into()),
                        ..Default::default()
                    },
                )
                .unwrap()
                .terms
                .into_iter()
                .map(|t| t.name)
                .collect();
                assert_eq!(
                    names[names.len() - 2..],
                    ["overheadRatio", "dedicatedCpuOrGuaranteed"]
                );
            } else {
                assert_eq!(both, multiply_memory(base + 100 * MIB, 3.2), "{v}");
            }
        }
    }

    /// The terms that exist in some releases only.
    #[test]
    fn per_version_feature_terms() {
        use KubeVirtVersion::*;
        // reservedOverhead: v1.8.0 hypervisorbackend_test.go:310-330 (100G); no such term before.
        let mut reserved = base_1gi();
        reserved.domain.memory = Some(Memory {
            reserved_overhead: Some(Box::new(ReservedOverhead {
                added_overhead: Some(q("100G")),
                ..Default::default()
            })),
            ..Default::default()
        });
        // A disabled vTPM: counted by v1.5.0 (`TPM != nil`, renderresources.go:413), not from
        // v1.5.1 (tpm.HasDevice, PR 14316 backported).
        let mut tpm_off = base_1gi();
        tpm_off.domain.devices.tpm = Some(Box::new(Tpm {
            enabled: Some(false),
            ..Default::default()
        }));
        // SNP: the SEV term from v1.7 (PR 14845).
        let mut snp = base_1gi();
        snp.domain.launch_security = Some(Box::new(LaunchSecurity {
            snp: Some(serde_json::json!({}).into()),
            ..Default::default()
        }));
        // The passt core binding: 250Mi from v1.8 (pkg/network/resources/memory.go).
        let mut passt = base_1gi();
        passt.domain.devices.interfaces = Some(vec![Interface {
            name: "p".into(),
            passt_binding: Some(serde_json::json!({}).into()),
            ..Default::default()
        }]);
        for v in KubeVirtVersion::ALL {
            let base = upstream_base(v);
            let extra = |s: &VirtualMachineInstanceSpec| total_at(v, s, None) - base;
            assert_eq!(
                extra(&reserved),
                if v >= V1_8 { 100_000_000_000 } else { 0 },
                "{v}"
            );
            let tpm_any_device = matches!(v, V1_0 | V1_1 | V1_2 | V1_3 | V1_4 | V1_5);
            assert_eq!(
                extra(&tpm_off),
                if tpm_any_device { 53 * MIB } else { 0 },
                "{v}"
            );
            assert_eq!(extra(&snp), if v >= V1_7 { 256 * MIB } else { 0 }, "{v}");
            assert_eq!(extra(&passt), if v >= V1_8 { 250 * MIB } else { 0 }, "{v}");
            let b = memory_overhead(
                &base_1gi(),
                &ClusterSettings {
                    kubevirt_version: v,
                    ..Default::default()
                },
            )
            .unwrap();
            assert!(b.terms.iter().all(|t| t.source.contains(".go:")), "{v}");
            let qemu = b.terms.iter().find(|t| t.name == "qemu").unwrap();
            assert_eq!(qemu.bytes, v.formula().qemu_bytes.value);
            assert_eq!(qemu.source, v.formula().qemu_bytes.source, "{v}");
        }
    }

    /// v1.1.0 renderresources_test.go:658-681 and v1.2.0 671-694 "should add passt overhead
    /// for each interface": three `passt` interfaces and a bridge add 3 × 800Mi (v1.0.0 has the
    /// same rule, renderresources.go:376-382); an interface with `ports` adds nothing; the
    /// 800Mi is multiplied by the ratio; from v1.3.0 the deprecated `passt` adds nothing.
    #[test]
    fn before_v1_3_passt_without_ports_adds_800mi_each() {
        let iface = |name: &str, binding: &str, ports: Option<serde_json::Value>| {
            let mut json = serde_json::json!({"name": name, binding: {}});
            if let Some(p) = ports {
                json["ports"] = p;
            }
            serde_json::from_value::<Interface>(json).unwrap()
        };
        let mut s = base_1gi();
        s.domain.devices.interfaces = Some(vec![
            iface("passt1", "passt", None),
            iface("passt2", "passt", None),
            iface("passt3", "passt", Some(serde_json::json!([]))),
            iface("nonpasst", "bridge", None),
            iface(
                "withports",
                "passt",
                Some(serde_json::json!([{"port": 80}])),
            ),
        ]);
        for v in KubeVirtVersion::ALL {
            let base = upstream_base(v);
            let old = v < KubeVirtVersion::V1_3;
            let passt = if old { 3 * 800 * MIB } else { 0 };
            assert_eq!(total_at(v, &s, None), base + passt, "{v}");
            assert_eq!(
                total_at(v, &s, Some("2")),
                multiply_memory(base + passt, 2.0),
                "{v}: the 800Mi is under the ratio"
            );
        }
        let b = memory_overhead(
            &s,
            &ClusterSettings {
                kubevirt_version: KubeVirtVersion::V1_2,
                ..Default::default()
            },
        )
        .unwrap();
        let passt: Vec<_> = b.terms.iter().filter(|t| t.name == "passt").collect();
        assert_eq!(passt.len(), 3);
        assert!(
            passt[0].reason.contains("\"passt1\""),
            "{}",
            passt[0].reason
        );
        assert_eq!(
            passt[0].source,
            "v1.2.0:pkg/virt-controller/services/renderresources.go:395-401"
        );
    }

    /// Binding plugin memory (`computeResourceOverhead`) counts from v1.3.0 (template.go:1460,
    /// `netbinding.CalculateMemoryOverhead`); v1.2.0's `VMIResourcePredicates`
    /// (template.go:1464-1470) has no such term.
    #[test]
    fn binding_plugin_memory_from_v1_3() {
        let mut s = base_1gi();
        s.domain.devices.interfaces = Some(vec![Interface {
            name: "b".into(),
            binding: Some(serde_json::json!({"name": "slirp"}).into()),
            ..Default::default()
        }]);
        for v in KubeVirtVersion::ALL {
            let mut settings = ClusterSettings {
                kubevirt_version: v,
                ..Default::default()
            };
            settings
                .binding_plugin_memory
                .insert("slirp".into(), 10 * MIB);
            let extra = memory_overhead(&s, &settings).unwrap().total_bytes - upstream_base(v);
            let counted = v >= KubeVirtVersion::V1_3;
            assert_eq!(extra, if counted { 10 * MIB } else { 0 }, "{v}");
        }
    }

    /// Up to v1.1.x the arm64 term reads the cluster's architecture only (v1.1.0
    /// template.go:1396 passes `GetClusterCPUArch()`); from v1.2.0 the VMI's first
    /// (template.go:1465-1470).
    #[test]
    fn arm64_reads_the_vmi_architecture_from_v1_2() {
        let mut vmi_arm = base_1gi();
        vmi_arm.architecture = Some("arm64".into());
        let mut vmi_amd = base_1gi();
        vmi_amd.architecture = Some("amd64".into());
        for v in KubeVirtVersion::ALL {
            let base = upstream_base(v);
            let at = |spec: &VirtualMachineInstanceSpec, cluster: &str| {
                let settings = ClusterSettings {
                    kubevirt_version: v,
                    architecture: cluster.into(),
                    ..Default::default()
                };
                memory_overhead(spec, &settings).unwrap().total_bytes - base
            };
            let reads_vmi = v >= KubeVirtVersion::V1_2;
            let arm = 128 * MIB;
            assert_eq!(
                at(&vmi_arm, "amd64"),
                if reads_vmi { arm } else { 0 },
                "{v}"
            );
            assert_eq!(
                at(&vmi_amd, "arm64"),
                if reads_vmi { 0 } else { arm },
                "{v}"
            );
            assert_eq!(at(&base_1gi(), "arm64"), arm, "{v}");
        }
    }

    /// Each release's template_test.go "should not add unset resources" (v1.0.0:2034-2071,
    /// v1.1.0:2044-2081, v1.2.0:2055-2092, v1.3.0:2057-2094): 64M requested, 3 cores, CPU 1m;
    /// the compute container requests 335M on amd64 and 469M on arm64 (cluster and VMI both
    /// arm64), in whole megabytes rounded up.
    #[test]
    fn unset_resources_fixture_per_release() {
        let mut s = spec_with(&[("memory", "64M"), ("cpu", "1m")], &[]);
        s.domain.cpu = Some(Cpu {
            cores: Some(3),
            ..Default::default()
        });
        for v in [
            KubeVirtVersion::V1_0,
            KubeVirtVersion::V1_1,
            KubeVirtVersion::V1_2,
            KubeVirtVersion::V1_3,
        ] {
            for (arch, mega) in [("amd64", 335), ("arm64", 469)] {
                let mut spec = s.clone();
                spec.architecture = Some(arch.into());
                let settings = ClusterSettings {
                    kubevirt_version: v,
                    architecture: arch.into(),
                    ..Default::default()
                };
                let request = 64_000_000 + memory_overhead(&spec, &settings).unwrap().total_bytes;
                assert_eq!((request + 999_999) / 1_000_000, mega, "{v} {arch}");
            }
        }
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Any quantity text and topology: no panic, and a success always sums its terms and
            /// includes the 220Mi of fixed processes.
            #[test]
            fn never_panics(mem in "[0-9]{0,12}(\\.[0-9]{0,3})?(Ki|Mi|Gi|Ti|k|M|G|T|m|)?",
                            cpu in "[0-9]{0,4}(m)?",
                            cores in proptest::option::of(0u32..64), sockets in proptest::option::of(0u32..8),
                            ratio in proptest::option::of("[0-9]\\.[0-9]{0,3}|x")) {
                let mut s = spec_with(&[("memory", mem.as_str()), ("cpu", cpu.as_str())], &[]);
                if cores.is_some() || sockets.is_some() {
                    s.domain.cpu = Some(Cpu { cores, sockets, ..Default::default() });
                }
                let settings = ClusterSettings { additional_guest_memory_overhead_ratio: ratio, ..Default::default() };
                if let Ok(b) = memory_overhead(&s, &settings) {
                    prop_assert_eq!(b.terms.iter().map(|t| t.bytes).sum::<i64>(), b.total_bytes);
                    prop_assert!(b.total_bytes >= 220 * MIB || settings.overhead_ratio().is_some_and(|r| r < 1.0));
                }
            }
        }
    }
}
