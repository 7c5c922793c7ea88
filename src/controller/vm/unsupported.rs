//! Features of KubeVirt's VM controller that virtctl-rs does not model, detected so that the sync
//! stops with a clear `Failure` condition instead of silently doing something else. Each check
//! fires only where KubeVirt would act; the reasons are the ones KubeVirt uses for that step.
//!
//! Not modelled: `WaitAsReceiver` (decentralized live migration), volume migration
//! (`updateVolumesStrategy: Migration`). Live updates of CPU sockets, memory, node
//! selector/affinity and tolerations ([`super::live_update`]), interface hotplug/unplug and NAD
//! references ([`super::net_sync`]), declarative volume hotplug ([`super::volume_hotplug`]),
//! legacy volume requests ([`super::volume_requests`]) and memory dumps
//! ([`super::memory_dump`]) are modelled.

use super::action::SyncError;
use super::reasons::sync as reason;
use crate::api::vm::VirtualMachine;
use serde_json::Value;

const SUFFIX: &str = "is not supported by virtctl-rs yet";

/// `WaitAsReceiver` without a VMI: creating a receiver VMI for a decentralized live migration
/// (vm.go:1166-1172).
pub(crate) fn wait_as_receiver() -> SyncError {
    SyncError::new(
        reason::FAILED_CREATE,
        format!("runStrategy WaitAsReceiver (decentralized live migration receiver) {SUFFIX}"),
    )
}

/// `handleVolumeUpdateRequest` (vm.go:889-952), the last LiveUpdate handler: with
/// `updateVolumesStrategy: Migration`, volume migration.
pub(crate) fn volume_update(vm: &VirtualMachine) -> Option<SyncError> {
    if !vm
        .spec
        .extra
        .read(|m| m.get("updateVolumesStrategy").and_then(Value::as_str) == Some("Migration"))
    {
        return None;
    }
    Some(SyncError::new(
        reason::VOLUMES_UPDATE_ERROR,
        format!(
            "error encountered while handling volumes update requests: live update of volumes \
             (updateVolumesStrategy Migration) {SUFFIX}"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(spec: Value) -> VirtualMachine {
        serde_json::from_value(json!({"metadata": {"name": "vm"}, "spec": spec})).unwrap()
    }

    fn tmpl(spec: Value) -> Value {
        json!({"template": {"spec": spec}})
    }

    #[test]
    fn volume_migration_refused() {
        assert!(volume_update(&vm(tmpl(json!({"domain": {"devices": {}}})))).is_none());
        let mut v = vm(tmpl(json!({"domain": {"devices": {}}})));
        v.spec.extra =
            serde_json::from_value(json!({"updateVolumesStrategy": "Migration"})).unwrap();
        assert_eq!(volume_update(&v).unwrap().reason, "VolumesUpdateError");
    }
}
