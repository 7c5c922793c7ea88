//! Applying an instancetype to a VMI spec (`ApplyToVMI`, pkg/instancetype/apply/vmi.go:47-80):
//! every step refuses a field the VMI (or VM template) already sets, collecting the conflicts;
//! with none, the preference is applied after (`preference::apply`).

use super::json::{at, canonical_quantity, child, non_empty_list, non_zero, set_omitempty};
use super::preference;
use crate::api::SmallMap;
use serde_json::{Value, json};
use std::fmt;

/// A field the VM sets that its instancetype sets too (`conflict.Conflict`,
/// pkg/instancetype/conflict/conflicts.go): the field path as k8s `field.Path` prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Conflicts(pub Vec<String>);

impl Conflicts {
    /// `Conflicts.String()` (conflicts.go:84-90): the paths joined with ", ".
    pub(crate) fn paths(&self) -> String {
        self.0.join(", ")
    }

    /// No conflict.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for Conflicts {
    /// `Conflicts.Error()` (conflicts.go:92-94).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "VM field(s) {} conflicts with selected instance type",
            self.paths()
        )
    }
}

/// `ApplyToVMI` (apply/vmi.go:47-80): apply `instancetype` (when given) then `preference` to
/// `spec` (a VMI spec, or a VM's `spec.template.spec`) and `annotations` (its metadata's).
/// `base` is the path conflicts are reported under (`spec` for a VMI, `spec.template.spec` for a
/// VM). With conflicts nothing of the preference is applied; the instancetype's
/// non-conflicting steps have been (KubeVirt applies step by step too).
pub(crate) fn apply_to_vmi(
    base: &str,
    instancetype: Option<&Value>,
    preference: Option<&Value>,
    spec: &mut Value,
    annotations: &mut SmallMap<String>,
) -> Conflicts {
    if instancetype.is_none() && preference.is_none() {
        return Conflicts(Vec::new());
    }
    if let Some(it) = instancetype {
        let mut c = Vec::new();
        let p = |rest: &str| format!("{base}.{rest}");
        c.extend(node_selector(it, spec, &p));
        c.extend(scheduler_name(it, spec, &p));
        c.extend(cpu(it, preference, spec, &p));
        c.extend(memory(it, spec, &p));
        c.extend(io_threads(it, spec, &p));
        c.extend(simple_domain_field(it, spec, "ioThreadsPolicy", &p));
        c.extend(simple_domain_field(it, spec, "launchSecurity", &p));
        c.extend(device_list(it, spec, "gpus", &p));
        c.extend(device_list(it, spec, "hostDevices", &p));
        c.extend(instancetype_annotations(it, annotations));
        if !c.is_empty() {
            return Conflicts(c);
        }
    }
    if let Some(pref) = preference {
        preference::apply(pref, spec, annotations);
    }
    Conflicts(Vec::new())
}

type PathFn<'a> = &'a dyn Fn(&str) -> String;

/// `applyNodeSelector` (apply/nodeselector.go:30-46).
fn node_selector(it: &Value, spec: &mut Value, p: PathFn) -> Vec<String> {
    let Some(sel) = at(it, &["nodeSelector"]) else {
        return Vec::new();
    };
    if at(spec, &["nodeSelector"]).is_some() {
        return vec![p("nodeSelector")];
    }
    child(spec, "nodeSelector");
    spec["nodeSelector"] = sel.clone();
    Vec::new()
}

/// `applySchedulerName` (apply/scheduler.go:28-44).
fn scheduler_name(it: &Value, spec: &mut Value, p: PathFn) -> Vec<String> {
    let name = super::json::str_at(it, &["schedulerName"]);
    if name.is_empty() {
        return Vec::new();
    }
    if non_zero(at(spec, &["schedulerName"])) {
        return vec![p("schedulerName")];
    }
    spec["schedulerName"] = json!(name);
    Vec::new()
}

/// `validateCPU` (apply/cpu.go:113-157): every conflict, in KubeVirt's order.
fn validate_cpu(it: &Value, spec: &Value, p: PathFn) -> Vec<String> {
    let mut c = Vec::new();
    let res = |kind: &str| at(spec, &["domain", "resources", kind, "cpu"]).is_some();
    if res("requests") {
        c.push(p("domain.resources.requests.cpu"));
    }
    if res("limits") {
        c.push(p("domain.resources.limits.cpu"));
    }
    let vmi = |k: &str| at(spec, &["domain", "cpu", k]);
    let it_has = |k: &str| at(it, &["cpu", k]).is_some();
    for k in ["sockets", "cores", "threads"] {
        if non_zero(vmi(k)) {
            c.push(p(&format!("domain.cpu.{k}")));
        }
    }
    // (VMI field, instancetype field)
    for (vk, ik) in [
        ("model", "model"),
        ("dedicatedCpuPlacement", "dedicatedCPUPlacement"),
        ("isolateEmulatorThread", "isolateEmulatorThread"),
        ("numa", "numa"),
        ("realtime", "realtime"),
    ] {
        if non_zero(vmi(vk)) && it_has(ik) {
            let name = if vk == "dedicatedCpuPlacement" {
                "dedicatedCPUPlacement"
            } else {
                vk
            };
            c.push(p(&format!("domain.cpu.{name}")));
        }
    }
    c
}

/// `applyCPU` (apply/cpu.go:31-73).
fn cpu(it: &Value, pref: Option<&Value>, spec: &mut Value, p: PathFn) -> Vec<String> {
    child(child(spec, "domain"), "cpu");
    let conflicts = validate_cpu(it, spec, p);
    if !conflicts.is_empty() {
        return conflicts;
    }
    let cpu = &mut spec["domain"]["cpu"];
    for (vk, ik) in [
        ("model", "model"),
        ("dedicatedCpuPlacement", "dedicatedCPUPlacement"),
        ("isolateEmulatorThread", "isolateEmulatorThread"),
        ("numa", "numa"),
        ("realtime", "realtime"),
        ("maxSockets", "maxSockets"),
    ] {
        if let Some(v) = at(it, &["cpu", ik]) {
            set_omitempty(cpu, vk, v.clone());
        }
    }
    let guest = at(it, &["cpu", "guest"])
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let (sockets, cores, threads) = guest_topology(u32::try_from(guest).unwrap_or(u32::MAX), pref);
    set_omitempty(cpu, "sockets", json!(sockets));
    set_omitempty(cpu, "cores", json!(cores));
    set_omitempty(cpu, "threads", json!(threads));
    Vec::new()
}

/// `applyGuestCPUTopology` (apply/cpu.go:75-111): (sockets, cores, threads) for `vcpus` guest
/// CPUs under the preference's preferred topology (default `sockets`, preference/apply/cpu.go:45-53).
/// An unknown topology keeps 1/1/1, as KubeVirt's switch does; a spread ratio of 0 (refused by
/// virt-api's validation) gives 0 where KubeVirt would divide by zero.
pub(crate) fn guest_topology(vcpus: u32, pref: Option<&Value>) -> (u32, u32, u32) {
    let (mut sockets, mut cores, mut threads) = (1, 1, 1);
    if vcpus == 1 {
        return (sockets, cores, threads);
    }
    let topology = pref
        .and_then(|p| at(p, &["cpu", "preferredCPUTopology"]))
        .and_then(Value::as_str)
        .unwrap_or("sockets");
    match topology {
        "preferCores" | "cores" => cores = vcpus,
        "preferSockets" | "preferAny" | "sockets" | "any" => sockets = vcpus,
        "preferThreads" | "threads" => threads = vcpus,
        "preferSpread" | "spread" => {
            let (ratio, across) = spread_options(pref);
            let div = |a: u32, b: u32| a.checked_div(b).unwrap_or(0);
            match across.as_str() {
                "SocketsCores" => {
                    cores = ratio;
                    sockets = div(vcpus, ratio);
                }
                "CoresThreads" => {
                    threads = ratio;
                    cores = div(vcpus, ratio);
                }
                "SocketsCoresThreads" => {
                    threads = 2;
                    cores = ratio;
                    sockets = div(div(vcpus, 2), ratio);
                }
                _ => {}
            }
        }
        _ => {}
    }
    (sockets, cores, threads)
}

/// `GetSpreadOptions` (preference/apply/cpu.go:55-68): ratio (default 2, or the deprecated
/// `preferSpreadSocketToCoreRatio`) and across (default `SocketsCores`).
fn spread_options(pref: Option<&Value>) -> (u32, String) {
    let u = |v: Option<&Value>| {
        v.and_then(Value::as_u64)
            .map(|n| u32::try_from(n).unwrap_or(0))
    };
    let mut ratio = 2;
    if let Some(r) = u(pref.and_then(|p| at(p, &["preferSpreadSocketToCoreRatio"])))
        && r != 0
    {
        ratio = r;
    }
    let mut across = "SocketsCores".to_string();
    if let Some(opts) = pref.and_then(|p| at(p, &["cpu", "spreadOptions"])) {
        if let Some(a) = at(opts, &["across"]).and_then(Value::as_str) {
            across = a.to_string();
        }
        if let Some(r) = u(at(opts, &["ratio"])) {
            ratio = r;
        }
    }
    (ratio, across)
}

/// `validateMemory` (apply/memory.go:79-99): the first conflict only.
fn validate_memory(it: &Value, spec: &Value, p: PathFn) -> Option<String> {
    let vmi = |k: &str| at(spec, &["domain", "memory", k]).is_some();
    if vmi("guest") {
        return Some(p("domain.memory.guest"));
    }
    if vmi("hugepages") && at(it, &["memory", "hugepages"]).is_some() {
        return Some(p("domain.memory.hugepages"));
    }
    if vmi("maxGuest") && at(it, &["memory", "maxGuest"]).is_some() {
        return Some(p("domain.memory.maxGuest"));
    }
    for kind in ["requests", "limits"] {
        if at(spec, &["domain", "resources", kind, "memory"]).is_some() {
            return Some(p(&format!("domain.resources.{kind}.memory")));
        }
    }
    None
}

/// `applyMemory` (apply/memory.go:31-77): guest memory, the memory request lowered by
/// `overcommitPercent`, hugepages, maxGuest.
fn memory(it: &Value, spec: &mut Value, p: PathFn) -> Vec<String> {
    child(child(spec, "domain"), "memory");
    if let Some(c) = validate_memory(it, spec, p) {
        return vec![c];
    }
    let guest = at(it, &["memory", "guest"]).cloned().unwrap_or(json!("0"));
    spec["domain"]["memory"]["guest"] = canonical_quantity(&guest);
    let overcommit = at(it, &["memory", "overcommitPercent"])
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if overcommit > 0 {
        let requests = child(child(child(spec, "domain"), "resources"), "requests");
        requests["memory"] = json!(overcommitted_request(&guest, overcommit));
    }
    for key in ["hugepages", "maxGuest"] {
        if let Some(v) = at(it, &["memory", key]) {
            let v = if key == "maxGuest" {
                canonical_quantity(v)
            } else {
                v.clone()
            };
            spec["domain"]["memory"][key] = v;
        }
    }
    Vec::new()
}

/// The memory request for an overcommitted guest (apply/memory.go:50-58):
/// `int64(float32(guest) * (1 - float32(percent)/100))` bytes, in the guest's format. The
/// arithmetic is float32, as KubeVirt's.
pub(crate) fn overcommitted_request(guest: &Value, percent: i64) -> String {
    use crate::api::quantity::{Format, ParsedQuantity};
    let parsed = guest.as_str().map(ParsedQuantity::parse);
    let (value, format) = match parsed {
        Some(Ok(q)) => (q.value(), q.format),
        _ => (0, Format::BinarySI),
    };
    let factor = 1.0f32 - (percent as f32) / 100.0f32;
    let bytes = ((value as f32) * factor) as i64;
    ParsedQuantity::from_units(bytes, format).to_canonical()
}

/// `applyIOThreads` (apply/iothreads.go:29-49): `ioThreads.supplementalPoolThreadCount`.
fn io_threads(it: &Value, spec: &mut Value, p: PathFn) -> Vec<String> {
    let Some(count) = at(it, &["ioThreads", "supplementalPoolThreadCount"]) else {
        return Vec::new();
    };
    if at(
        spec,
        &["domain", "ioThreads", "supplementalPoolThreadCount"],
    )
    .is_some()
    {
        return vec![p("domain.ioThreads.supplementalPoolThreadCount")];
    }
    child(child(spec, "domain"), "ioThreads")["supplementalPoolThreadCount"] = count.clone();
    Vec::new()
}

/// `applyIOThreadPolicy` (apply/iothreadpolicy.go:28-45) and `applyLaunchSecurity`
/// (apply/launchsecurity.go:28-44): a domain field copied when the VMI does not set it.
fn simple_domain_field(it: &Value, spec: &mut Value, key: &str, p: PathFn) -> Vec<String> {
    let Some(v) = at(it, &[key]) else {
        return Vec::new();
    };
    if at(spec, &["domain", key]).is_some() {
        return vec![p(&format!("domain.{key}"))];
    }
    child(spec, "domain")[key] = v.clone();
    Vec::new()
}

/// `applyGPUs` (apply/gpu.go:29-45) and `applyHostDevices` (apply/hostdevices.go:29-45).
fn device_list(it: &Value, spec: &mut Value, key: &str, p: PathFn) -> Vec<String> {
    let Some(list) = at(it, &[key]).filter(|l| non_empty_list(Some(l))) else {
        return Vec::new();
    };
    if non_empty_list(at(spec, &["domain", "devices", key])) {
        return vec![p(&format!("domain.devices.{key}"))];
    }
    child(child(spec, "domain"), "devices")[key] = list.clone();
    Vec::new()
}

/// `applyInstanceTypeAnnotations` (apply/annotations.go:27-44): added where absent; a
/// different value is a conflict at `annotations.KEY` (not under the spec path). Map order
/// is Go's random order; ours is the key order.
fn instancetype_annotations(it: &Value, target: &mut SmallMap<String>) -> Vec<String> {
    let mut c = Vec::new();
    let Some(map) = at(it, &["annotations"]).and_then(Value::as_object) else {
        return c;
    };
    for (k, v) in map {
        let v = v.as_str().unwrap_or("");
        match target.get(k.as_str()) {
            Some(existing) if existing != v => c.push(format!("annotations.{k}")),
            Some(_) => {}
            None => {
                target.insert(k.clone(), v.to_string());
            }
        }
    }
    c
}
