//! Live updates of a running VMI under `vmRolloutStrategy: LiveUpdate` (KubeVirt v1.9's
//! default): the four handlers `sync` calls when the VM needs no restart
//! (pkg/virt-controller/watch/vm/vm.go:3351-3377), as pure functions of the VM template (with
//! its instancetype expanded, `vmCopyWithInstancetype`) and the VMI in the cache.
//!
//! Each handler answers with an [`Outcome`]: nothing to do, JSON patches of the VMI's spec (in
//! the order KubeVirt sends them), `RestartRequired` with KubeVirt's message (`setRestartRequired`,
//! vm.go:2978-2986: the change stays in the template until the next start), or the error the
//! handler returns (a `Failure` condition with the handler's reason, and a requeue).
//!
//! What happens next is the VMI's side: the VMI controller sets `HotVCPUChange` /
//! `HotMemoryChange` (watch/vmi/lifecycle.go:502-508), which is how v1.9 asks for the live
//! migration that completes a CPU or memory hotplug (the workload updater's
//! `isHotplugInProgress`, workload-updater.go:320-325). The launcher pod is not changed: its
//! resources stay as rendered at start, and the migration target pod is rendered from the
//! patched VMI spec. v1.9's `MigrationRequired` condition comes only from the network
//! evaluator (pkg/network/migration/evaluator.go, interface hot(un)plug), not from these
//! handlers.

use crate::api::quantity::{Format, ParsedQuantity};
use crate::api::vmi::{Cpu, VirtualMachineInstance, VirtualMachineInstanceSpec};
use crate::controller::common::PatchSet;
use crate::controller::common::patch::path;
use crate::controller::common::semantic_eq;
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::Value;

/// `v1.VirtualMachineInstanceVCPUChange`.
pub(crate) const HOT_VCPU_CHANGE: &str = "HotVCPUChange";
/// `v1.VirtualMachineInstanceMemoryChange`.
pub(crate) const HOT_MEMORY_CHANGE: &str = "HotMemoryChange";
/// `v1.VirtualMachineInstanceIsMigratable`.
const LIVE_MIGRATABLE: &str = "LiveMigratable";

/// A JSON patch of the VMI one handler sends, with what it does (for the explanation).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VmiPatch {
    /// The RFC 6902 document.
    pub patch: Value,
    /// What it changes and the vm.go lines that send it.
    pub why: String,
}

/// What one live-update handler does.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The VMI already runs with the template's value (or the handler does not apply).
    Unchanged,
    /// Patch the VMI, in this order.
    Patch(Vec<VmiPatch>),
    /// `setRestartRequired(vm, message)`: the change waits for the next start.
    RestartRequired(String),
    /// The handler's error (its text, without the `sync` prefix).
    Refused(String),
}

fn has_vmi_condition(vmi: &VirtualMachineInstance, type_: &str, status: &str) -> bool {
    vmi.condition(type_).is_some_and(|c| c.status == status)
}

fn quantity(q: Option<&Quantity>) -> Option<ParsedQuantity> {
    q.and_then(|q| crate::api::quantity::parse(q).ok())
}

/// `resources.requests[name]` or `.limits[name]` as apimachinery's `Cpu()`/`Memory()` read it:
/// zero when absent.
fn resource(spec: &VirtualMachineInstanceSpec, limits: bool, name: &str) -> ParsedQuantity {
    let res = spec.domain.resources.as_ref();
    let list = res.and_then(|r| if limits { &r.limits } else { &r.requests }.as_ref());
    let format = if name == "memory" {
        Format::BinarySI
    } else {
        Format::DecimalSI
    };
    quantity(list.and_then(|l| l.get(name))).unwrap_or(ParsedQuantity::from_units(0, format))
}

/// apimachinery `Quantity.Add`: a zero left operand takes the right one's format.
fn add(a: ParsedQuantity, b: ParsedQuantity) -> ParsedQuantity {
    let sum = a + b;
    if a.is_zero() {
        ParsedQuantity {
            format: b.format,
            ..sum
        }
    } else {
        sum
    }
}

/// A test of the old value and a replace with the new one, both as `Quantity.String()`.
fn test_and_replace(p: &mut PatchSet, tokens: &[&str], old: ParsedQuantity, new: ParsedQuantity) {
    p.test(path(tokens), &old.to_canonical())
        .replace(path(tokens), &new.to_canonical());
}

/// `handleCPUChangeRequest` (vm.go:622-673). `want` is the template spec with its instancetype
/// expanded; `architecture` the VM's own template architecture (vm.go:662 reads the VM, not the
/// expanded copy); `cpu_allocation_ratio` is `developerConfiguration.cpuAllocationRatio`.
pub(crate) fn cpu_change(
    want: &VirtualMachineInstanceSpec,
    architecture: &str,
    vmi: &VirtualMachineInstance,
    now: DateTime<Utc>,
    cpu_allocation_ratio: u32,
) -> Outcome {
    let (Some(want_cpu), Some(have_cpu)) = (want.domain.cpu.as_ref(), vmi.spec.domain.cpu.as_ref())
    else {
        return Outcome::Unchanged;
    };
    let (sockets, current) = (want_cpu.sockets.unwrap_or(0), have_cpu.sockets.unwrap_or(0));
    if sockets == current {
        return Outcome::Unchanged;
    }
    if has_vmi_condition(vmi, HOT_VCPU_CHANGE, "True") {
        return Outcome::Refused("another CPU hotplug is in progress".into());
    }
    if super::printable::is_migrating(vmi, now) {
        return Outcome::Refused("CPU hotplug is not allowed while VMI is migrating".into());
    }
    if sockets > have_cpu.max_sockets.unwrap_or(0) {
        return Outcome::RestartRequired(
            "CPU sockets updated in template spec to a value higher than what's available".into(),
        );
    }
    if sockets < current {
        return Outcome::RestartRequired("Reduction of CPU socket count requires a restart".into());
    }
    if architecture == "arm64" {
        return Outcome::RestartRequired("ARM doesn't support CPU hotplug".into());
    }
    Outcome::Patch(vec![cpus_patch(
        want,
        want_cpu,
        vmi,
        have_cpu,
        cpu_allocation_ratio,
    )])
}

/// `VMICPUsPatch` (vm.go:575-620): the sockets, and the CPU request/limit grown by
/// `1000 / cpuAllocationRatio` millicores per added vCPU (integer division, as Go's) where the
/// template sets them.
fn cpus_patch(
    want: &VirtualMachineInstanceSpec,
    want_cpu: &Cpu,
    vmi: &VirtualMachineInstance,
    have_cpu: &Cpu,
    cpu_allocation_ratio: u32,
) -> VmiPatch {
    let sockets = want_cpu.sockets.unwrap_or(0);
    let mut p = PatchSet::new();
    let at = ["spec", "domain", "cpu", "sockets"];
    p.test(path(&at), &have_cpu.sockets.unwrap_or(0))
        .replace(path(&at), &sockets);
    let vcpus_delta = want_cpu.vcpus() - have_cpu.vcpus();
    let per_vcpu = 1000 / i64::from(cpu_allocation_ratio.max(1));
    let delta = ParsedQuantity {
        nanos: i128::from(vcpus_delta * per_vcpu) * 1_000_000,
        format: Format::DecimalSI,
    };
    let mut why = format!("hotplugging cpu to {sockets} sockets");
    for (limits, key) in [(false, "requests"), (true, "limits")] {
        if resource(want, limits, "cpu").is_zero() {
            continue;
        }
        let old = resource(&vmi.spec, limits, "cpu");
        let new = add(old, delta);
        test_and_replace(
            &mut p,
            &["spec", "domain", "resources", key, "cpu"],
            old,
            new,
        );
        why.push_str(&format!(", setting {key} to {new}"));
    }
    VmiPatch {
        patch: p.into_value(),
        why: format!("{why} (VMICPUsPatch, vm.go:575-620)"),
    }
}

/// `vmiTolerationsPatch` / `VMIAffinityPatch` / `VMNodeSelectorPatch` (vm.go:675-747): `add`
/// when the VMI has none, `test` + `replace` when it has one, `remove` when the template has
/// none.
fn replace_field<T: serde::Serialize>(field: &str, want: Option<&T>, have: Option<&T>) -> Value {
    let mut p = PatchSet::new();
    let at = ["spec", field];
    match want {
        Some(w) => {
            p.add_or_test_and_replace(path(&at), have, w);
        }
        None => {
            p.remove(path(&at));
        }
    }
    p.into_value()
}

/// `handleAffinityChangeRequest` (vm.go:775-806): the affinity first, then the node selector,
/// each its own patch; refused while the VMI migrates.
pub(crate) fn affinity_change(
    want: &VirtualMachineInstanceSpec,
    vmi: &VirtualMachineInstance,
    now: DateTime<Utc>,
) -> Outcome {
    let selector_changed = !semantic_eq(&want.node_selector, &vmi.spec.node_selector);
    let affinity_changed = !semantic_eq(&want.affinity, &vmi.spec.affinity);
    if !selector_changed && !affinity_changed {
        return Outcome::Unchanged;
    }
    if super::printable::is_migrating(vmi, now) {
        return Outcome::Refused("Node affinity should not be changed during VMI migration".into());
    }
    let mut patches = Vec::new();
    if affinity_changed {
        patches.push(VmiPatch {
            patch: replace_field(
                "affinity",
                want.affinity.as_ref(),
                vmi.spec.affinity.as_ref(),
            ),
            why: "carry the template's affinity to the VMI (VMIAffinityPatch, vm.go:701-722)"
                .into(),
        });
    }
    if selector_changed {
        patches.push(VmiPatch {
            patch: replace_field(
                "nodeSelector",
                want.node_selector.as_ref(),
                vmi.spec.node_selector.as_ref(),
            ),
            why: "carry the template's node selector to the VMI (VMNodeSelectorPatch, \
                  vm.go:675-699)"
                .into(),
        });
    }
    Outcome::Patch(patches)
}

/// `handleTolerationsChangeRequest` (vm.go:749-773).
pub(crate) fn tolerations_change(
    want: &VirtualMachineInstanceSpec,
    vmi: &VirtualMachineInstance,
    now: DateTime<Utc>,
) -> Outcome {
    if semantic_eq(&want.tolerations, &vmi.spec.tolerations) {
        return Outcome::Unchanged;
    }
    if super::printable::is_migrating(vmi, now) {
        return Outcome::Refused("tolerations should not be changed during VMI migration".into());
    }
    Outcome::Patch(vec![VmiPatch {
        patch: replace_field(
            "tolerations",
            want.tolerations.as_ref(),
            vmi.spec.tolerations.as_ref(),
        ),
        why: "carry the template's tolerations to the VMI (vmiTolerationsPatch, vm.go:724-747)"
            .into(),
    }])
}

/// `status.memory.<field>` of the VMI (`guestAtBoot`, `guestCurrent`, `guestRequested`).
pub(crate) fn memory_status(vmi: &VirtualMachineInstance, field: &str) -> Option<ParsedQuantity> {
    let m = vmi.status.as_ref()?.memory.as_ref()?;
    m.extra.read(|e| {
        e.get(field)
            .and_then(Value::as_str)
            .and_then(|s| ParsedQuantity::parse(s).ok())
    })
}

/// `HotplugBlockAlignmentBytes` (pkg/liveupdate/memory/memory.go:35): 2Mi.
const BLOCK_ALIGNMENT: i64 = 0x20_0000;
/// `Hotplug1GHugePagesBlockAlignmentBytes` (memory.go:38): 1Gi, with 1Gi hugepages.
const BLOCK_ALIGNMENT_1G_HUGEPAGES: i64 = 0x4000_0000;
/// `requiredMinGuestMemory` (memory.go:48): 1Gi.
const MIN_GUEST_MEMORY: i64 = 0x4000_0000;

/// Whether the unmodelled CPU field `key`, and within it `pointer` (`""` for the field
/// itself), is set and not null.
fn cpu_extra_set(spec: &VirtualMachineInstanceSpec, key: &str, pointer: &str) -> bool {
    spec.domain.cpu.as_ref().is_some_and(|c| {
        c.extra
            .field(key, |v| v.pointer(pointer).map(|v| !v.is_null()))
            .unwrap_or(false)
    })
}

/// `ValidateLiveUpdateMemory` (pkg/liveupdate/memory/memory.go:51-102): can `spec` grow its
/// guest memory up to `max_guest` by hotplug? The error texts are KubeVirt's.
pub(crate) fn validate_live_update_memory(
    spec: &VirtualMachineInstanceSpec,
    max_guest: Option<ParsedQuantity>,
) -> Result<(), String> {
    let domain = &spec.domain;
    if cpu_extra_set(spec, "realtime", "") {
        return Err("Memory hotplug is not compatible with realtime VMs".into());
    }
    if cpu_extra_set(spec, "numa", "/guestMappingPassthrough") {
        return Err("Memory hotplug is not compatible with guest mapping passthrough".into());
    }
    if domain.launch_security.is_some() {
        return Err("Memory hotplug is not compatible with encrypted VMs".into());
    }
    let memory = domain.memory.as_ref();
    let one_gi_pages = memory
        .and_then(|m| m.hugepages.as_ref())
        .and_then(|h| h.page_size.as_deref())
        == Some("1Gi");
    let alignment = if one_gi_pages {
        BLOCK_ALIGNMENT_1G_HUGEPAGES
    } else {
        BLOCK_ALIGNMENT
    };
    let Some(guest) = quantity(memory.and_then(|m| m.guest.as_ref())) else {
        return Err("Guest memory must be configured when memory hotplug is enabled".into());
    };
    let Some(max_guest) = max_guest else {
        return Err("Max guest memory must be configured when memory hotplug is enabled".into());
    };
    if guest.nanos > max_guest.nanos {
        return Err("Guest memory is greater than the configured maxGuest memory".into());
    }
    let aligned = ParsedQuantity::from_units(alignment, Format::BinarySI);
    if guest.value() % alignment != 0 {
        return Err(format!("Guest memory must be {aligned} aligned"));
    }
    if max_guest.value() % alignment != 0 {
        return Err(format!("MaxGuest must be {aligned} aligned"));
    }
    if spec.architecture.as_deref() != Some("amd64") {
        return Err("Memory hotplug is only available for x86_64 VMs".into());
    }
    if guest.value() < MIN_GUEST_MEMORY {
        return Err(
            "Memory hotplug is only available for VMs with at least 1Gi of guest memory".into(),
        );
    }
    Ok(())
}

/// `handleMemoryHotplugRequest` (vm.go:3444-3566) up to the patch: the restart and refusal
/// rules, in KubeVirt's order.
pub(crate) fn memory_change(
    want: &VirtualMachineInstanceSpec,
    vmi: &VirtualMachineInstance,
    now: DateTime<Utc>,
) -> Outcome {
    let guest = |s: &VirtualMachineInstanceSpec| {
        quantity(s.domain.memory.as_ref().and_then(|m| m.guest.as_ref()))
    };
    let (Some(want_guest), Some(have_guest), Some(current)) = (
        guest(want),
        guest(&vmi.spec),
        memory_status(vmi, "guestCurrent"),
    ) else {
        return Outcome::Unchanged;
    };
    let restart = |m: &str| Outcome::RestartRequired(format!("memory updated in template spec{m}"));
    if has_vmi_condition(vmi, HOT_MEMORY_CHANGE, "False") {
        return restart(". Memory-hotplug failed and is not available for this VM configuration");
    }
    if want_guest.nanos == have_guest.nanos {
        return Outcome::Unchanged;
    }
    if !has_vmi_condition(vmi, LIVE_MIGRATABLE, "True") {
        return restart(". Memory-hotplug is only available for migratable VMs");
    }
    let max_guest = quantity(
        vmi.spec
            .domain
            .memory
            .as_ref()
            .and_then(|m| m.max_guest.as_deref()),
    );
    let Some(max) = max_guest else {
        return restart(". Memory-hotplug is not available for this VM configuration");
    };
    if has_vmi_condition(vmi, HOT_MEMORY_CHANGE, "True") {
        return Outcome::Refused("another memory hotplug is in progress".into());
    }
    if super::printable::is_migrating(vmi, now) {
        return Outcome::Refused("memory hotplug is not allowed while VMI is migrating".into());
    }
    if let Err(e) = validate_live_update_memory(want, max_guest) {
        return Outcome::RestartRequired(format!("memory hotplug not supported, {e}"));
    }
    if memory_status(vmi, "guestAtBoot").is_some_and(|boot| want_guest.nanos < boot.nanos) {
        return restart(" to a value lower than what the VM started with");
    }
    if want_guest.nanos > max.nanos {
        return restart(" to a value higher than what's available");
    }
    Outcome::Patch(vec![memory_patch(
        want, want_guest, have_guest, current, vmi,
    )])
}

/// The patch of `handleMemoryHotplugRequest` (vm.go:3513-3557): the guest memory, the memory
/// request grown by the difference to `guestCurrent` (at least the new guest size) where the
/// VMI has one, the limit where the template has one.
fn memory_patch(
    want: &VirtualMachineInstanceSpec,
    want_guest: ParsedQuantity,
    have_guest: ParsedQuantity,
    current: ParsedQuantity,
    vmi: &VirtualMachineInstance,
) -> VmiPatch {
    let mut delta = ParsedQuantity {
        nanos: i128::from(want_guest.value() - current.value()) * 1_000_000_000,
        format: Format::BinarySI,
    };
    let mut p = PatchSet::new();
    test_and_replace(
        &mut p,
        &["spec", "domain", "memory", "guest"],
        have_guest,
        want_guest,
    );
    let mut why = format!("hotplugging memory to {want_guest}");
    let request = resource(&vmi.spec, false, "memory");
    if !request.is_zero() {
        let mut new = add(request, delta);
        if new.nanos < want_guest.nanos {
            // vm.go:3528-3533: never below the new guest size (after a hot-unplug not all
            // memory is released); the limit then grows by nothing.
            new = want_guest;
            delta = ParsedQuantity::from_units(want_guest.value() - new.value(), Format::BinarySI);
        }
        let at = ["spec", "domain", "resources", "requests", "memory"];
        test_and_replace(&mut p, &at, request, new);
        why.push_str(&format!(", setting requests to {new}"));
    }
    if !resource(want, true, "memory").is_zero() {
        let limit = resource(&vmi.spec, true, "memory");
        let new = add(limit, delta);
        let at = ["spec", "domain", "resources", "limits", "memory"];
        test_and_replace(&mut p, &at, limit, new);
        why.push_str(&format!(", setting limits to {new}"));
    }
    VmiPatch {
        patch: p.into_value(),
        why: format!("{why} (handleMemoryHotplugRequest, vm.go:3513-3557)"),
    }
}

#[cfg(test)]
#[path = "live_update_tests.rs"]
mod tests;
