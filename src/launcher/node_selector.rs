//! The launcher pod's node selector: KubeVirt v1.9.0's `NodeSelectorRenderer`
//! (pkg/virt-controller/services/nodeselectorrenderer.go:14-221) with the options
//! `newNodeSelectorRenderer` gives it (template.go:799-868).
//!
//! The selector is the scheduling and architecture labels, the CR's `nodeSelectors`, the VMI's
//! `nodeSelector`, then one `"true"` label per thing the VMI needs from its node: dedicated CPUs,
//! the Hyper-V enlightenments that need host support (only with the Alpha gate
//! `HypervStrictCheck`), the CPU model and required features, the machine type, realtime,
//! SEV / SEV-ES / SEV-SNP, Secure Execution, TDX and the cross-architecture label.

use super::error::RenderError;
use crate::api::labels;
use crate::api::vmi::VirtualMachineInstance;
use crate::config::ClusterSettings;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Node label prefix of CPU features (types.go:1269).
pub(crate) const CPU_FEATURE_LABEL: &str = "cpu-feature.node.kubevirt.io/";
/// Node label prefix of CPU models (types.go:1271).
pub(crate) const CPU_MODEL_LABEL: &str = "cpu-model.node.kubevirt.io/";
/// Node label prefix of machine types (types.go:1279).
pub(crate) const MACHINE_TYPE_LABEL: &str = "machine-type.node.kubevirt.io/";
/// Node selector for dedicated CPUs (types.go:1246).
pub(crate) const CPU_MANAGER_LABEL: &str = "kubevirt.io/cpumanager";
/// Node label prefix for cross-architecture capable nodes (types.go:1348).
pub(crate) const VM_ARCH_LABEL: &str = "kubevirt.io/vm-arch-";
/// `kubernetes.io/arch`.
pub(crate) const ARCH_LABEL: &str = "kubernetes.io/arch";
/// Node label prefix of the Hyper-V enlightenments a node supports (types.go:1275).
pub(crate) const HYPERV_LABEL: &str = "hyperv.node.kubevirt.io/";
/// Node label of the CPU vendor, required for eVMCS (types.go:1277, template.go:112).
pub(crate) const INTEL_VENDOR_LABEL: &str = "cpu-vendor.node.kubevirt.io/Intel";
/// Prefix of the node label naming a TSC frequency a node can run
/// (pkg/virt-controller/watch/topology/filter.go:15, tsc.go:116-118).
pub(crate) const TSC_FREQUENCY_SCHEDULING_LABEL: &str = "scheduling.node.kubevirt.io/tsc-frequency";
/// The Alpha feature gate that adds the Hyper-V labels (featuregate/active.go:25, 297).
pub(crate) const HYPERV_STRICT_CHECK_GATE: &str = "HypervStrictCheck";

/// `spec.domain.cpu.features` as `(name, policy)` pairs.
pub(crate) fn cpu_features(vmi: &VirtualMachineInstance) -> Vec<(String, String)> {
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

/// A Hyper-V feature's state (`FeatureState`, `SyNICTimer`, `TLBFlush`: schema.go): only
/// `enabled` matters to the node selector.
#[derive(Deserialize)]
struct Toggle {
    enabled: Option<bool>,
}

/// `spec.domain.features.hyperv`, the fields the node selector reads (schema.go:1335-1386).
#[derive(Deserialize, Default)]
struct Hyperv {
    vpindex: Option<Toggle>,
    runtime: Option<Toggle>,
    reset: Option<Toggle>,
    synic: Option<Toggle>,
    synictimer: Option<Toggle>,
    frequencies: Option<Toggle>,
    reenlightenment: Option<Toggle>,
    tlbflush: Option<Toggle>,
    ipi: Option<Toggle>,
    evmcs: Option<Toggle>,
}

/// `isFeatureStateEnabled` (template.go:160-162): present with `enabled: true`.
fn on(t: &Option<Toggle>) -> bool {
    t.as_ref().is_some_and(|t| t.enabled == Some(true))
}

/// The VMI's `spec.domain.features.hyperv`, `None` when absent; a malformed one names its field.
fn hyperv(vmi: &VirtualMachineInstance, object: &str) -> Result<Option<Hyperv>, RenderError> {
    let Some(v) = vmi
        .spec
        .domain
        .extra
        .get("features")
        .and_then(|f| f.get("hyperv"))
        .filter(|v| !v.is_null())
    else {
        return Ok(None);
    };
    serde_json::from_value(v.clone())
        .map(Some)
        .map_err(|e| RenderError::Field {
            vmi: object.to_string(),
            field: "spec.domain.features.hyperv".into(),
            message: e.to_string(),
        })
}

/// `hypervNodeSelectors` (nodeselectorrenderer.go:204-221, table 231-297): one
/// `hyperv.node.kubevirt.io/<feature>` label per enabled enlightenment that needs host support
/// (vpindex, runtime, reset, synic, synictimer, frequencies, reenlightenment, tlbflush, ipi;
/// relaxed, vapic, spinlocks and vendorid need none), and the Intel vendor label when eVMCS is
/// present and not disabled.
fn hyperv_labels(vmi: &VirtualMachineInstance, object: &str) -> Result<Vec<String>, RenderError> {
    let Some(hv) = hyperv(vmi, object)? else {
        return Ok(Vec::new());
    };
    let table = [
        (&hv.vpindex, "vpindex"),
        (&hv.runtime, "runtime"),
        (&hv.reset, "reset"),
        (&hv.synic, "synic"),
        (&hv.synictimer, "synictimer"),
        (&hv.frequencies, "frequencies"),
        (&hv.reenlightenment, "reenlightenment"),
        (&hv.tlbflush, "tlbflush"),
        (&hv.ipi, "ipi"),
    ];
    let mut out: Vec<String> = table
        .iter()
        .filter(|(t, _)| on(t))
        .map(|(_, label)| format!("{HYPERV_LABEL}{label}"))
        .collect();
    if hv.evmcs.as_ref().is_some_and(|e| e.enabled != Some(false)) {
        out.push(INTEL_VENDOR_LABEL.to_string());
    }
    Ok(out)
}

/// The pod's node selector (nodeselectorrenderer.go:33-99, template.go:799-868). `object` is
/// the VMI's `namespace/name`, for errors.
pub(crate) fn node_selector(
    vmi: &VirtualMachineInstance,
    settings: &ClusterSettings,
    cross_arch: bool,
    object: &str,
) -> Result<BTreeMap<String, String>, RenderError> {
    let spec = &vmi.spec;
    let arch = spec.architecture.as_deref().unwrap_or_default();
    let mut sel = BTreeMap::new();
    sel.insert(labels::SCHEDULABLE.to_string(), "true".to_string());
    if !arch.is_empty() {
        sel.insert(ARCH_LABEL.to_string(), arch.to_lowercase());
    }
    sel.extend(settings.node_selectors.clone());
    sel.extend(spec.node_selector.as_deref().cloned().unwrap_or_default());
    if cross_arch && !arch.is_empty() {
        sel.remove(ARCH_LABEL);
    }
    let mut enable = |label: String| {
        sel.insert(label, "true".to_string());
    };
    if spec.is_cpu_dedicated() {
        enable(CPU_MANAGER_LABEL.into());
    }
    // template.go:804-806, Render 58-60.
    if settings.gate_enabled(HYPERV_STRICT_CHECK_GATE, false) {
        hyperv_labels(vmi, object)?
            .into_iter()
            .for_each(&mut enable);
    }
    let model = spec.cpu_model();
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
    if let Some(m) = machine_type(vmi) {
        enable(format!("{MACHINE_TYPE_LABEL}{m}"));
    }
    // template.go:826-828, Render 73-75.
    if let Some(freq) = manual_tsc_frequency(vmi, object)? {
        enable(format!("{TSC_FREQUENCY_SCHEDULING_LABEL}-{freq}"));
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
    launch_security_labels(vmi, arch)
        .into_iter()
        .for_each(&mut enable);
    if cross_arch && !arch.is_empty() {
        enable(format!("{VM_ARCH_LABEL}{arch}"));
    }
    Ok(sel)
}

/// `topology.IsManualTSCFrequencyRequired` (pkg/virt-controller/watch/topology/tsc.go:120-133):
/// the frequency of `status.topologyHints.tscFrequency` when it is above 0 and the VMI needs a
/// TSC frequency — an `invtsc` CPU feature with policy `require` or `force` (for boot), or the
/// Hyper-V reenlightenment enabled (for migration) (tsc.go:135-174). The VMI controller writes
/// the hint; a malformed one names its field.
fn manual_tsc_frequency(
    vmi: &VirtualMachineInstance,
    object: &str,
) -> Result<Option<i64>, RenderError> {
    let hint = vmi
        .status
        .as_ref()
        .and_then(|s| s.extra.get("topologyHints"))
        .and_then(|h| h.get("tscFrequency"))
        .filter(|f| !f.is_null());
    let Some(hint) = hint else {
        return Ok(None);
    };
    let freq = hint.as_i64().ok_or_else(|| RenderError::Field {
        vmi: object.to_string(),
        field: "status.topologyHints.tscFrequency".into(),
        message: format!("must be an integer, found {hint}"),
    })?;
    if freq <= 0 {
        return Ok(None);
    }
    let invtsc = cpu_features(vmi)
        .iter()
        .any(|(name, policy)| name == "invtsc" && matches!(policy.as_str(), "require" | "force"));
    let reenlightenment = || -> Result<bool, RenderError> {
        Ok(hyperv(vmi, object)?.is_some_and(|h| on(&h.reenlightenment)))
    };
    Ok((invtsc || reenlightenment()?).then_some(freq))
}

/// `status.machine.type`, else `spec.domain.machine.type` (template.go:815-824).
fn machine_type(vmi: &VirtualMachineInstance) -> Option<&str> {
    vmi.status
        .as_ref()
        .and_then(|s| s.extra.get("machine"))
        .and_then(|m| m.get("type"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
        .or_else(|| {
            vmi.spec
                .domain
                .extra
                .get("machine")
                .and_then(|m| m.get("type"))
                .and_then(|t| t.as_str())
                .filter(|t| !t.is_empty())
        })
}

/// SEV, SEV-ES, SEV-SNP, Secure Execution and TDX (template.go:834-856; pkg/util/amd64.go,
/// s390x.go; the labels types.go:1332-1345). v1.9 renders nothing else for them in the pod but
/// the `devices.kubevirt.io/sev` / `tdx` requests (template.go:1666-1667).
fn launch_security_labels(vmi: &VirtualMachineInstance, arch: &str) -> Vec<String> {
    let spec = &vmi.spec;
    let ls = spec.domain.launch_security.as_ref();
    let sev_es = ls
        .and_then(|l| l.sev.as_ref())
        .and_then(|s| s.get("policy"))
        .and_then(|p| p.get("encryptedState"))
        .and_then(|e| e.as_bool())
        .unwrap_or(false);
    [
        (spec.is_sev(), "kubevirt.io/sev"),
        (sev_es, "kubevirt.io/sev-es"),
        (ls.is_some_and(|l| l.snp.is_some()), "kubevirt.io/sev-snp"),
        (ls.is_some() && arch == "s390x", "kubevirt.io/s390-pv"),
        (spec.is_tdx(), "kubevirt.io/tdx"),
    ]
    .into_iter()
    .filter(|(on, _)| *on)
    .map(|(_, label)| label.to_string())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::launcher::test_vmi as vmi;
    use serde_json::json;

    fn strict() -> ClusterSettings {
        ClusterSettings {
            feature_gates: vec![HYPERV_STRICT_CHECK_GATE.into()],
            ..Default::default()
        }
    }

    fn selected(v: &VirtualMachineInstance, s: &ClusterSettings) -> Vec<String> {
        node_selector(v, s, false, "default/testvmi")
            .unwrap()
            .into_keys()
            .filter(|k| k.starts_with(HYPERV_LABEL) || k.starts_with("cpu-vendor."))
            .collect()
    }

    fn hyperv_vmi(hyperv: serde_json::Value) -> VirtualMachineInstance {
        vmi(json!({"domain": {"features": {"hyperv": hyperv}}}))
    }

    /// template_test.go:1552-1605: with the gate, the enlightenments that need the host kernel
    /// each require their node label; eVMCS requires an Intel node unless it is disabled.
    #[test]
    fn strict_check_requires_host_supported_enlightenments() {
        let on = json!({"enabled": true});
        for (evmcs, intel) in [
            (json!({"enabled": true}), true),
            (json!({}), true),
            (json!({"enabled": false}), false),
        ] {
            let v = hyperv_vmi(
                json!({"synic": on, "synictimer": {"enabled": true, "direct": {}},
                "frequencies": on, "ipi": on, "evmcs": evmcs}),
            );
            let mut want: Vec<String> = ["frequencies", "ipi", "synic", "synictimer"]
                .iter()
                .map(|l| format!("{HYPERV_LABEL}{l}"))
                .collect();
            if intel {
                want.insert(0, INTEL_VENDOR_LABEL.to_string());
            }
            assert_eq!(selected(&v, &strict()), want, "evmcs {evmcs}");
        }
    }

    /// nodeselectorrenderer.go:231-297: every label of the table, each only when `enabled` is
    /// explicitly true (an absent `enabled` or `false` adds nothing).
    #[test]
    fn every_table_feature_and_only_when_enabled() {
        let names = [
            "vpindex",
            "runtime",
            "reset",
            "synic",
            "synictimer",
            "frequencies",
            "reenlightenment",
            "tlbflush",
            "ipi",
        ];
        let all: serde_json::Map<String, serde_json::Value> = names
            .iter()
            .map(|n| (n.to_string(), json!({"enabled": true})))
            .collect();
        let got = selected(&hyperv_vmi(all.into()), &strict());
        let mut want: Vec<String> = names.iter().map(|n| format!("{HYPERV_LABEL}{n}")).collect();
        want.sort();
        assert_eq!(got, want);
        let off = hyperv_vmi(json!({"vpindex": {}, "reset": {"enabled": false},
            "tlbflush": {"enabled": false, "direct": {"enabled": true}}}));
        assert_eq!(selected(&off, &strict()), Vec::<String>::new());
    }

    /// template_test.go:1485-1550, 1607-1646: no labels for enlightenments that need no host
    /// support (relaxed, vapic, spinlocks), for an empty `hyperv`, or without the Alpha gate.
    #[test]
    fn no_labels_without_host_features_or_gate() {
        let on = json!({"enabled": true});
        let soft = hyperv_vmi(json!({"relaxed": on, "vapic": on,
            "spinlocks": {"enabled": true, "spinlocks": 4095}}));
        assert!(selected(&soft, &strict()).is_empty());
        assert!(selected(&hyperv_vmi(json!({})), &strict()).is_empty());
        assert!(selected(&vmi(json!({"domain": {}})), &strict()).is_empty());
        let hard = hyperv_vmi(json!({"synic": on, "evmcs": on}));
        assert!(selected(&hard, &ClusterSettings::default()).is_empty());
        let disabled = ClusterSettings {
            disabled_feature_gates: vec![HYPERV_STRICT_CHECK_GATE.into()],
            ..Default::default()
        };
        assert!(selected(&hard, &disabled).is_empty());
    }

    fn tsc_labels(v: &VirtualMachineInstance) -> Vec<String> {
        node_selector(v, &ClusterSettings::default(), false, "default/testvmi")
            .unwrap()
            .into_keys()
            .filter(|k| k.starts_with(TSC_FREQUENCY_SCHEDULING_LABEL))
            .collect()
    }

    /// template_test.go:1648-1699 with another frequency: the label only when the VMI needs a
    /// TSC frequency (invtsc required or forced for boot, Hyper-V reenlightenment for
    /// migration) and the VMI controller's hint is set and above 0.
    #[test]
    fn tsc_frequency_label_needs_requirement_and_hint() {
        let with = |domain: serde_json::Value, hints: serde_json::Value| {
            let mut v = vmi(json!({"domain": domain}));
            v.status = serde_json::from_value(json!({"topologyHints": hints})).unwrap();
            v
        };
        let boot =
            |policy: &str| json!({"cpu": {"features": [{"name": "invtsc", "policy": policy}]}});
        let migration = json!({"features": {"hyperv": {"reenlightenment": {"enabled": true}}}});
        let hint = json!({"tscFrequency": 2_400_000_000_i64});
        let label = vec![format!("{TSC_FREQUENCY_SCHEDULING_LABEL}-2400000000")];
        assert_eq!(tsc_labels(&with(boot("require"), hint.clone())), label);
        assert_eq!(tsc_labels(&with(boot("force"), hint.clone())), label);
        assert_eq!(tsc_labels(&with(migration.clone(), hint.clone())), label);
        let none: Vec<String> = Vec::new();
        // Not required: no label even with a hint.
        assert_eq!(tsc_labels(&with(boot("optional"), hint.clone())), none);
        assert_eq!(tsc_labels(&with(json!({}), hint.clone())), none);
        let off = json!({"features": {"hyperv": {"reenlightenment": {"enabled": false}}}});
        assert_eq!(tsc_labels(&with(off, hint.clone())), none);
        // Required but no usable hint (absent, empty, 0 when no node reports one).
        assert_eq!(tsc_labels(&vmi(json!({"domain": boot("require")}))), none);
        assert_eq!(tsc_labels(&with(boot("require"), json!({}))), none);
        assert_eq!(
            tsc_labels(&with(migration, json!({"tscFrequency": 0}))),
            none
        );
        let bad = with(boot("require"), json!({"tscFrequency": "fast"}));
        let e = node_selector(&bad, &ClusterSettings::default(), false, "default/testvmi")
            .unwrap_err()
            .to_string();
        assert!(e.contains("status.topologyHints.tscFrequency"), "{e}");
    }

    /// A malformed `hyperv` is an error naming the VMI and the field, not a panic or a
    /// silently missing label.
    #[test]
    fn malformed_hyperv_names_the_field() {
        let v = hyperv_vmi(json!({"synic": {"enabled": "yes"}}));
        let e = node_selector(&v, &strict(), false, "default/testvmi").unwrap_err();
        let text = e.to_string();
        assert!(
            text.starts_with(
                "VirtualMachineInstance default/testvmi: spec.domain.features.hyperv:"
            ),
            "{text}"
        );
        // Without the gate the field is not read.
        assert!(node_selector(&v, &ClusterSettings::default(), false, "x").is_ok());
    }
}
