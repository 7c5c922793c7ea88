//! The VMI controller's `MigrationRequired` condition on a Running VMI
//! (`syncMigrationRequiredCondition`, watch/vmi/lifecycle.go:1197-1232, from the network
//! evaluator of pkg/network/migration/evaluator.go): v1.9's request for the live migration that
//! completes an interface hot(un)plug or a NAD reference change the VM controller carried into
//! the VMI's spec ([`crate::controller::vm::net_sync`]).
//!
//! For each secondary Multus interface of the VMI's spec:
//! - not `absent` and without a `status.interfaces` entry (hotplugged, not yet plugged): SR-IOV
//!   needs a migration now, any other binding a pending one (the pod's dynamic network
//!   controller gets 15 seconds to plug it, `DynamicNetworkControllerGracePeriod`);
//! - `absent` with an entry Multus reported but the domain no longer does: a pending migration;
//! - a `networkName` other than the NAD the pod's `k8s.v1.cni.cncf.io/network-status` reports on
//!   its pod interface: a migration now.
//!
//! A pending migration is `MigrationRequired=False` (`AutoMigrationPending`), turned `True`
//! (`AutoMigrationDueToLiveUpdate`) once it has been pending longer than the grace period; the
//! VMI is enqueued again after 10 seconds meanwhile (lifecycle.go:1225-1231). A `True` condition
//! stays until no migration is needed; nothing changes while the VMI migrates. The migration
//! itself (the workload updater's) is not modelled.

use super::network_status::{NetworkStatus, network_statuses};
use crate::api::Condition;
use crate::api::common::Time;
use crate::api::vmi::{Interface, VirtualMachineInstance};
use crate::launcher::network::{is_secondary_multus, multus_network_name};
use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;
use std::time::Duration;

/// `v1.VirtualMachineInstanceMigrationRequired`.
pub(crate) const MIGRATION_REQUIRED: &str = "MigrationRequired";
/// `v1.VirtualMachineInstanceReasonAutoMigrationDueToLiveUpdate`.
const DUE_TO_LIVE_UPDATE: &str = "AutoMigrationDueToLiveUpdate";
/// `v1.VirtualMachineInstanceReasonAutoMigrationPending`.
const PENDING: &str = "AutoMigrationPending";
/// `DynamicNetworkControllerGracePeriod` (evaluator.go:39).
const GRACE_PERIOD: i64 = 15;
/// `pendingMigrationReEvalPeriod` (lifecycle.go:1198).
pub(crate) const PENDING_REEVALUATION: Duration = Duration::from_secs(10);

/// What the evaluator finds (`migrationRequirementKind`, evaluator.go:41-47).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Requirement {
    NotRequired,
    Immediate,
    Pending,
}

fn iface_state(i: &Interface) -> String {
    crate::controller::vm::net_sync::iface_state(i)
}

/// `vmispec.ContainsInfoSource`: one of the `", "`-separated sources.
fn has_info_source(entry: &Value, source: &str) -> bool {
    entry["infoSource"]
        .as_str()
        .is_some_and(|s| s.split(", ").any(|x| x == source))
}

/// `isNADNameEqual` (evaluator.go:165-174): equal, or the spec's bare name in the VMI's
/// namespace.
fn nad_name_equal(spec_name: &str, status_name: &str, namespace: &str) -> bool {
    spec_name == status_name
        || (!spec_name.contains('/') && format!("{namespace}/{spec_name}") == status_name)
}

/// `shouldVMIBeMarkedForAutoMigration` (evaluator.go:92-138).
fn requirement(vmi: &VirtualMachineInstance, statuses: &[NetworkStatus]) -> Requirement {
    let namespace = vmi.metadata.namespace.as_deref().unwrap_or_default();
    let ifaces = vmi.spec.interfaces();
    let entries = vmi.interface_status_entries();
    for net in vmi.spec.networks.iter().flatten() {
        if !is_secondary_multus(net) {
            continue;
        }
        let Some(iface) = ifaces.iter().find(|i| i.name == net.name) else {
            continue;
        };
        let entry = entries
            .iter()
            .rev()
            .find(|e| e["name"].as_str() == Some(&iface.name));
        let absent = iface_state(iface) == "absent";
        match entry {
            None if !absent && iface.sriov.is_some() => return Requirement::Immediate,
            None if !absent => return Requirement::Pending,
            Some(e)
                if absent
                    && has_info_source(e, "multus-status")
                    && !has_info_source(e, "domain") =>
            {
                return Requirement::Pending;
            }
            _ => {}
        }
        let pod_iface = entry
            .and_then(|e| e["podInterfaceName"].as_str())
            .unwrap_or_default();
        if pod_iface.is_empty() {
            continue;
        }
        // NetworkStatusesByPodIfaceName: the last entry of an interface wins.
        if let Some(s) = statuses.iter().rev().find(|s| s.interface == pod_iface)
            && !nad_name_equal(multus_network_name(net), &s.name, namespace)
        {
            return Requirement::Immediate;
        }
    }
    Requirement::NotRequired
}

/// `Evaluator.Evaluate` (evaluator.go:65-90): `None` for no migration, else the condition's
/// status.
fn evaluate(vmi: &VirtualMachineInstance, pod: &Pod, now: Time) -> Option<&'static str> {
    match requirement(vmi, &network_statuses(pod)) {
        Requirement::NotRequired => None,
        Requirement::Immediate => Some("True"),
        Requirement::Pending => {
            let existing = vmi.condition(MIGRATION_REQUIRED);
            let expired = existing.is_some_and(|c| {
                c.status == "False"
                    && c.last_transition_time
                        .as_ref()
                        .is_some_and(|t| now.0 - t.0 > chrono::Duration::seconds(GRACE_PERIOD))
            });
            Some(if expired { "True" } else { "False" })
        }
    }
}

/// `syncMigrationRequiredCondition` (lifecycle.go:1197-1232) on `new` (the VMI `updateStatus`
/// writes) with its launcher pod. Returns when to look again: after 10 seconds while a
/// migration is pending.
pub(crate) fn sync_migration_required(
    new: &mut VirtualMachineInstance,
    pod: &Pod,
    now: Time,
    expl: &mut Vec<String>,
) -> Option<Duration> {
    if crate::controller::vm::printable::is_migrating(new, now.0) {
        return None;
    }
    let result = evaluate(new, pod, now);
    let existing = new.condition(MIGRATION_REQUIRED).cloned();
    let status = new.status.get_or_insert_with(Default::default);
    let Some(result) = result else {
        if existing.is_some() {
            super::conditions::remove(status, MIGRATION_REQUIRED);
            expl.push(
                "MigrationRequired removed: no interface change waits for a migration \
                 (lifecycle.go:1210-1214)"
                    .into(),
            );
        }
        return None;
    };
    if existing.as_ref().is_some_and(|c| c.status == "True") {
        return None;
    }
    let reason = if result == "False" {
        PENDING
    } else {
        DUE_TO_LIVE_UPDATE
    };
    if existing
        .as_ref()
        .is_none_or(|c| c.status != result || c.reason.as_deref() != Some(reason))
    {
        expl.push(format!(
            "MigrationRequired={result} ({reason}): {} (lifecycle.go:1197-1245, \
             pkg/network/migration/evaluator.go)",
            if result == "True" {
                "an interface change needs a live migration"
            } else {
                "a hotplugged interface waits up to 15s for the pod's network controller"
            }
        ));
    }
    super::conditions::update(
        status,
        Condition {
            type_: MIGRATION_REQUIRED.into(),
            status: result.into(),
            reason: Some(reason.into()),
            last_transition_time: Some(now),
            ..Default::default()
        },
    );
    (result == "False").then_some(PENDING_REEVALUATION)
}

#[cfg(test)]
#[path = "migration_required_tests.rs"]
mod tests;
