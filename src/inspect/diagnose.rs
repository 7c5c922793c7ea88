//! Diagnostics for states that KubeVirt's controllers do not report themselves: two live
//! launcher pods for one VMI, a finalizer that is not KubeVirt's holding a VM or VMI in
//! Terminating, two machines with the same firmware UUID, two controller processes with the
//! same Lease identity, and a launcher pod refused by Pod Security admission. Each check is a
//! pure function of gathered objects that returns the [`Blocker`]s it finds; `analyze.rs` adds
//! them to the blocker chain, and the fleet view names the first one as a row's problem.

use super::model::human_duration;
use super::model::{Blocker, EventView};
use crate::api::finalizers;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::controller::debug_state::DebugState;
use crate::controller::vm::firmware::calculate_legacy_uuid;
use crate::controller::vmi::podutil::{current_vmi_pod, pods_controlled_by};
use crate::runtime::lease::LeaseRecord;
use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// More than one live launcher pod controlled by one VMI.
pub(super) const DUPLICATE_LAUNCHER_POD: &str = "DuplicateLauncherPod";
/// A finalizer that is not KubeVirt's on an object being deleted.
pub(super) const FOREIGN_FINALIZER: &str = "ForeignFinalizer";
/// Another VM or VMI with the same firmware (SMBIOS) UUID.
pub(super) const DUPLICATE_FIRMWARE_UUID: &str = "DuplicateFirmwareUUID";
/// The Lease holder's identity renewed by a process other than the one its debug endpoint names.
pub(super) const DUPLICATE_CONTROLLER_IDENTITY: &str = "DuplicateControllerIdentity";
/// The launcher pod was refused by Pod Security admission.
pub(super) const POD_SECURITY_REJECTED: &str = "PodSecurityRejected";

/// The namespace label Pod Security admission enforces.
pub(super) const PSA_ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

/// Kubernetes' garbage-collector finalizers (`metav1.FinalizerOrphanDependents`,
/// `FinalizerDeleteDependents`): set by a delete with `propagationPolicy`, removed by the
/// garbage collector itself, so never "foreign".
const GC_FOREGROUND: &str = "foregroundDeletion";

fn pod_name(p: &Pod) -> &str {
    p.metadata.name.as_deref().unwrap_or("")
}

fn pod_phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn pod_node(p: &Pod) -> &str {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or("no node")
}

/// A migration is under way: its target pod is a second live pod by design.
fn migrating(vmi: &VirtualMachineInstance) -> bool {
    vmi.status
        .as_ref()
        .and_then(|s| s.migration_state.as_deref())
        .is_some_and(|m| m.get("completed").and_then(|c| c.as_bool()) != Some(true))
}

/// Two or more live launcher pods controlled by `vmi`. KubeVirt counts the pods controlled by a
/// VMI that are neither Succeeded nor Failed (`VMIActivePodsCount`, controller.go:361-383) and
/// acts on one of them only, the newest on the VMI's node (`CurrentVMIPod`,
/// controller.go:323-358, used by vmi.go:342); nothing deletes the others while the VMI lives.
/// Pods being deleted and a migration in progress (source and target) are not duplicates.
pub(crate) fn duplicate_launcher_pods(
    vmi: &VirtualMachineInstance,
    pods: &[Pod],
) -> Option<Blocker> {
    if migrating(vmi) {
        return None;
    }
    let live: Vec<&Pod> = pods_controlled_by(vmi, pods)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !matches!(pod_phase(p), "Succeeded" | "Failed"))
        .collect();
    if live.len() < 2 {
        return None;
    }
    let current = current_vmi_pod(vmi, pods).map(pod_name);
    let listed: Vec<String> = live
        .iter()
        .map(|p| format!("{} ({} on {})", pod_name(p), pod_phase(p), pod_node(p)))
        .collect();
    let extra = live
        .iter()
        .find(|p| Some(pod_name(p)) != current)
        .map_or("", |p| pod_name(p));
    let vmi_name = vmi.metadata.name.as_deref().unwrap_or("");
    Some(Blocker {
        object: format!("Pod/{extra}"),
        reason: DUPLICATE_LAUNCHER_POD.into(),
        message: format!(
            "{} live launcher pods are controlled by VMI {vmi_name}: {}; virt-controller acts on \
             {} only (the newest on the VMI's node, CurrentVMIPod controller.go:323-358) and \
             deletes none of the others while the VMI lives: one VM in two launchers",
            live.len(),
            listed.join(", "),
            current.unwrap_or("none of them (none is on the VMI's node)"),
        ),
        depth: 2,
        fix: None,
    })
}

/// The finalizers KubeVirt's controllers add and remove on VMs and VMIs (kubevirt.io/api
/// core/v1/types.go:1240-1243: `VirtualMachineControllerFinalizer`,
/// `VirtualMachineInstanceFinalizer` and its deprecated un-prefixed form), plus the garbage
/// collector's.
fn is_kubevirt_or_gc(finalizer: &str) -> bool {
    [
        finalizers::VM_CONTROLLER,
        finalizers::FOREGROUND_DELETE_VM,
        finalizers::LEGACY_FOREGROUND_DELETE_VM,
        finalizers::ORPHAN,
        GC_FOREGROUND,
    ]
    .contains(&finalizer)
}

/// Who added `finalizer`: the managers whose `managedFields` own it (`f:metadata` →
/// `f:finalizers` → `v:"<finalizer>"`), else what its domain prefix says.
fn finalizer_owner(meta: &ObjectMeta, finalizer: &str) -> String {
    let key = format!("v:{}", serde_json::Value::from(finalizer));
    let managers: Vec<String> = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.fields_v1
                .as_ref()
                .and_then(|f| f.0.pointer("/f:metadata/f:finalizers"))
                .and_then(|f| f.as_object())
                .is_some_and(|f| f.contains_key(&key))
        })
        .map(|m| {
            format!(
                "manager {:?} ({}{})",
                m.manager.as_deref().unwrap_or(""),
                m.operation.as_deref().unwrap_or("?"),
                m.time
                    .as_ref()
                    .map(|t| format!(" at {}", t.0))
                    .unwrap_or_default()
            )
        })
        .collect();
    if !managers.is_empty() {
        return format!("added by {}", managers.join(", "));
    }
    match finalizer.split_once('/') {
        Some((domain, _)) => format!(
            "no managedFields entry names it; its prefix says the controller of {domain} added it"
        ),
        None => "no managedFields entry names it and it has no domain prefix".into(),
    }
}

/// The finalizers that are not KubeVirt's (nor the garbage collector's) on an object being
/// deleted, one blocker each: `kind` is `VirtualMachine` or `VirtualMachineInstance`, `depth` its
/// place in the chain. Whoever added such a finalizer must remove it before the API server
/// deletes the object, and KubeVirt's controllers never do (vm.go:2315-2371 and lifecycle.go:268-274
/// touch only their own).
pub(crate) fn foreign_finalizers(
    kind: &str,
    meta: &ObjectMeta,
    depth: u8,
    now: DateTime<Utc>,
) -> Vec<Blocker> {
    let Some(deleted) = meta.deletion_timestamp.as_ref() else {
        return Vec::new();
    };
    let since = DateTime::from_timestamp(deleted.0.as_second(), 0).unwrap_or(now);
    let name = meta.name.as_deref().unwrap_or("");
    let ns = meta.namespace.as_deref().unwrap_or("");
    let resource = if kind == "VirtualMachine" {
        "vm"
    } else {
        "vmi"
    };
    let list = meta.finalizers.as_deref().unwrap_or_default();
    list.iter()
        .enumerate()
        .filter(|(_, f)| !is_kubevirt_or_gc(f))
        .map(|(i, f)| Blocker {
            object: format!("{kind}/{name}"),
            reason: FOREIGN_FINALIZER.into(),
            message: format!(
                "terminating for {} (deletionTimestamp {}), held by finalizer {f}, which is not \
                 KubeVirt's: {}; KubeVirt removes only its own finalizers",
                human_duration((now - since).num_milliseconds() as f64 / 1000.0),
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                finalizer_owner(meta, f)
            ),
            depth,
            fix: Some(format!(
                "let its owner finish; if that controller is gone: kubectl patch {resource} \
                 {name} -n {ns} --type json -p '[{{\"op\":\"test\",\"path\":\"/metadata/finalizers/{i}\",\"value\":\"{f}\"}},{{\"op\":\"remove\",\"path\":\"/metadata/finalizers/{i}\"}}]'"
            )),
        })
        .collect()
}

/// The firmware UUID a VM's VMIs get: the template's, else `CalculateLegacyUUID(vm name)`
/// (vm.go:1933-1947, firmware.go:48-66).
pub(crate) fn vm_firmware_uuid(vm: &VirtualMachine) -> String {
    vm.template_spec()
        .and_then(|s| s.domain.firmware.as_ref())
        .and_then(|f| f.uuid.clone())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| calculate_legacy_uuid(vm.metadata.name.as_deref().unwrap_or("")))
}

fn vmi_firmware_uuid(vmi: &VirtualMachineInstance) -> Option<&str> {
    vmi.spec
        .domain
        .firmware
        .as_ref()
        .and_then(|f| f.uuid.as_deref())
        .filter(|u| !u.is_empty())
}

fn ns_name(meta: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        meta.name.as_deref().unwrap_or("")
    )
}

/// Other VMs (and VMIs without a VM of their name) with the firmware UUID of `vm`: the guests
/// see one SMBIOS system UUID, which guest software and licensing take as one machine. `vms`
/// and `vmis` may include `vm` and its VMI (skipped).
pub(crate) fn duplicate_firmware_uuid(
    vm: &VirtualMachine,
    vms: &[VirtualMachine],
    vmis: &[VirtualMachineInstance],
) -> Option<Blocker> {
    let uuid = vm_firmware_uuid(vm);
    let me = ns_name(&vm.metadata);
    let vm_names: std::collections::BTreeSet<String> =
        vms.iter().map(|v| ns_name(&v.metadata)).collect();
    let mut others: Vec<String> = vms
        .iter()
        .filter(|v| ns_name(&v.metadata) != me && vm_firmware_uuid(v) == uuid)
        .map(|v| format!("VirtualMachine {}", ns_name(&v.metadata)))
        .collect();
    others.extend(
        vmis.iter()
            .filter(|v| {
                let id = ns_name(&v.metadata);
                id != me && !vm_names.contains(&id) && vmi_firmware_uuid(v) == Some(&uuid)
            })
            .map(|v| format!("VirtualMachineInstance {}", ns_name(&v.metadata))),
    );
    if others.is_empty() {
        return None;
    }
    let name = vm.metadata.name.as_deref().unwrap_or("");
    let derived = vm
        .template_spec()
        .and_then(|s| s.domain.firmware.as_ref())
        .and_then(|f| f.uuid.as_deref())
        .is_none_or(str::is_empty);
    Some(Blocker {
        object: format!("VirtualMachine/{name}"),
        reason: DUPLICATE_FIRMWARE_UUID.into(),
        message: format!(
            "firmware UUID {uuid}{} is also that of {}: the guests see the same SMBIOS system \
             UUID; give one of them its own spec.template.spec.domain.firmware.uuid (applies \
             at its next start)",
            if derived {
                " (derived from the name, CalculateLegacyUUID firmware.go:85-89)"
            } else {
                ""
            },
            others.join(", ")
        ),
        depth: 0,
        fix: Some(format!(
            "kubectl patch vm {name} -n {} --type merge -p \
             \"{{\\\"spec\\\":{{\\\"template\\\":{{\\\"spec\\\":{{\\\"domain\\\":{{\\\"firmware\\\":{{\\\"uuid\\\":\\\"$(uuidgen)\\\"}}}}}}}}}}}}\"",
            vm.metadata.namespace.as_deref().unwrap_or("")
        )),
    })
}

/// The Lease names the identity of the run-controller behind its debug endpoint, yet its
/// `renewTime` is later than any renewal that process wrote (or it wrote none): another process
/// runs with the same identity and renews the Lease. client-go takes any record with its
/// identity as its own (leaderelection.go `IsLeader`), so with KubeVirt's controllers both
/// lead; our elector makes the second one stand by (src/runtime/lease/elector.rs).
pub(crate) fn duplicate_identity(
    lease_key: &str,
    lease: &Lease,
    endpoint: &str,
    state: &DebugState,
) -> Option<Blocker> {
    let record = LeaseRecord::from_spec(lease.spec.as_ref());
    let holder = record.holder()?;
    if holder != state.identity {
        return None;
    }
    let renewed = record.renew_time?;
    let ours = state.lease.last_renew;
    // A leader that reports no renewal (an older run-controller) says nothing either way.
    let renewed_by_another = match ours {
        Some(t) => t < renewed,
        None => !state.leading,
    };
    if !renewed_by_another {
        return None;
    }
    let fmt = |t: DateTime<Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    Some(Blocker {
        object: format!("Lease/{lease_key}"),
        reason: DUPLICATE_CONTROLLER_IDENTITY.into(),
        message: format!(
            "the Lease names holder {holder}, renewed at {}, but the run-controller at {endpoint} \
             (identity {holder}, phase {:?}, leading {}) {}: a second instance with the same \
             identity renews it",
            fmt(renewed),
            state.lease.phase,
            state.leading,
            match ours {
                Some(t) => format!("last renewed it at {}", fmt(t)),
                None => "never renewed it".into(),
            },
        ),
        depth: 0,
        fix: Some("give each instance its own --identity (run-controller --identity NAME)".into()),
    })
}

/// Split Pod Security's violation list at the commas outside parentheses.
fn violations(list: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(list[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(list[start..].trim());
    out.retain(|v| !v.is_empty());
    out
}

/// Checks only the `restricted` level makes (k8s.io/pod-security-admission policy/check_*.go
/// with `Level: api.LevelRestricted`); `seccompProfile` is both a baseline check (Unconfined
/// forbidden) and a restricted one (RuntimeDefault or Localhost required).
fn restricted_only(violation: &str) -> bool {
    let reason = violation.split(" (").next().unwrap_or(violation);
    match reason {
        "allowPrivilegeEscalation != false"
        | "unrestricted capabilities"
        | "runAsNonRoot != true"
        | "runAsUser=0"
        | "restricted volume types" => true,
        "seccompProfile" => !violation.contains("Unconfined"),
        _ => false,
    }
}

/// The lowest Pod Security level that admits a pod refused at `level` with `violations`.
fn admitting_level(level: &str, violations: &[&str]) -> &'static str {
    if level == "restricted" && violations.iter().all(|v| restricted_only(v)) {
        "baseline"
    } else {
        "privileged"
    }
}

/// The launcher pod create was refused by Pod Security admission: the VMI's `Synchronized=False`
/// condition or a `FailedCreate` event carries the API server's `violates PodSecurity
/// "LEVEL:VERSION": ...` (KubeVirt wraps it as "it needs a privileged namespace to run",
/// lifecycle.go:174-183). Names the label value that admits the violations listed: `baseline`
/// when `restricted` refused only restricted-level checks, else `privileged`.
pub(crate) fn pod_security_rejection(
    namespace: &str,
    vmi: Option<&VirtualMachineInstance>,
    events: &[EventView],
    enforced_now: Option<&str>,
) -> Option<Blocker> {
    const MARK: &str = "violates PodSecurity \"";
    let from_condition = vmi
        .and_then(|v| v.condition("Synchronized"))
        .filter(|c| c.status == "False")
        .and_then(|c| c.message.as_deref())
        .filter(|m| m.contains(MARK));
    let from_event = || {
        events
            .iter()
            .rev()
            .filter(|e| e.reason == "FailedCreate")
            .map(|e| e.message.as_str())
            .find(|m| m.contains(MARK))
    };
    let message = from_condition.or_else(from_event)?;
    let rest = &message[message.find(MARK)? + MARK.len()..];
    let (policy, rest) = rest.split_once('"')?;
    let level = policy.split(':').next().unwrap_or(policy);
    let list = violations(rest.trim_start_matches(':').trim());
    let needed = admitting_level(level, &list);
    Some(Blocker {
        object: format!("Namespace/{namespace}"),
        reason: POD_SECURITY_REJECTED.into(),
        message: format!(
            "Pod Security admission (enforce {policy}{}) refused the launcher pod: {}; the \
             namespace label {PSA_ENFORCE_LABEL}={needed} admits it (KubeVirt: \"it needs a \
             privileged namespace to run\", lifecycle.go:174-183)",
            enforced_now
                .map(|l| format!(", label {PSA_ENFORCE_LABEL}={l}"))
                .unwrap_or_default(),
            list.join(", ")
        ),
        depth: 2,
        fix: Some(format!(
            "kubectl label namespace {namespace} {PSA_ENFORCE_LABEL}={needed} --overwrite"
        )),
    })
}
