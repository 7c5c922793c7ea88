//! Features of KubeVirt's VM controller that virtctl-rs does not model, detected so that the sync
//! stops with a clear `Failure` condition instead of silently doing something else. Each check
//! fires only where KubeVirt would act; the reasons are the ones KubeVirt uses for that step.
//!
//! Not modelled: `WaitAsReceiver` (decentralized live migration), legacy volume hotplug requests
//! (`status.volumeRequests`), volume migration (`updateVolumesStrategy: Migration`). Live
//! updates of CPU sockets, memory, node selector/affinity and tolerations
//! ([`super::live_update`]), interface hotplug/unplug and NAD references
//! ([`super::net_sync`]), declarative volume hotplug ([`super::volume_hotplug`]) and memory
//! dumps ([`super::memory_dump`]) are modelled.

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

/// `handleVolumeRequests` (vm.go:808-847): non-empty `status.volumeRequests`.
pub(crate) fn volume_requests(vm: &VirtualMachine) -> Option<SyncError> {
    let requested = vm.status.as_ref()?.extra.read(|m| {
        m.get("volumeRequests")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty())
    });
    if !requested {
        return None;
    }
    Some(SyncError::new(
        reason::HOTPLUG_VOLUME_ERROR,
        format!(
            "Error encountered while handling volume hotplug requests: status.volumeRequests {SUFFIX}"
        ),
    ))
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

    #[test]
    fn status_requests_refused() {
        let mut v = vm(tmpl(json!({"domain": {"devices": {}}})));
        assert!(volume_requests(&v).is_none());
        v.status = Some(
            serde_json::from_value(json!({"volumeRequests": [{"addVolumeOptions": {}}]})).unwrap(),
        );
        assert_eq!(volume_requests(&v).unwrap().reason, "HotPlugVolumeError");
    }
}
