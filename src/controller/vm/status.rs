//! `updateStatus` (pkg/virt-controller/watch/vm/vm.go:2457-2514) and the state-change-request
//! trimming it does (`isTrimFirstChangeRequestNeeded`, vm.go:2811-2853).
//!
//! Not modelled (their status fields are left as they are): volume-request trimming and the
//! memory-dump request (VMs using them are refused by `sync`), `syncVolumeMigration`
//! (`status.volumeUpdateState`), changed-block-tracking state.

use crate::api::vm::VirtualMachineStatus;
use crate::api::vmi::VirtualMachineInstance;

/// `isTrimFirstChangeRequestNeeded` (vm.go:2811-2853): only the first request is looked at.
/// `Stop` is done when there is no VMI, the request has no UID, or the UID is another VMI's;
/// `Start` is done when a VMI exists, is not being deleted and is not final.
pub(crate) fn trim_first_change_request_needed(
    status: &VirtualMachineStatus,
    vmi: Option<&VirtualMachineInstance>,
) -> bool {
    let Some(first) = status
        .state_change_requests
        .as_ref()
        .and_then(|r| r.first())
    else {
        return false;
    };
    match first.action.as_str() {
        "Stop" => match vmi {
            None => true,
            Some(v) => match first.uid.as_deref() {
                None => true,
                Some(uid) => uid != v.metadata.uid.as_deref().unwrap_or(""),
            },
        },
        "Start" => vmi.is_some_and(|v| !v.is_deleting() && !v.is_final()),
        _ => false,
    }
}

/// Make a status comparable the way Go's omitempty/semantic equality sees it: empty lists, `false`
/// booleans, zero generations and empty strings become absent.
pub(crate) fn normalize_status(status: &mut VirtualMachineStatus) {
    if status.conditions.as_ref().is_some_and(|c| c.is_empty()) {
        status.conditions = None;
    }
    if status
        .state_change_requests
        .as_ref()
        .is_some_and(|r| r.is_empty())
    {
        status.state_change_requests = None;
    }
    if status.created == Some(false) {
        status.created = None;
    }
    if status.ready == Some(false) {
        status.ready = None;
    }
    if status.observed_generation == Some(0) {
        status.observed_generation = None;
    }
    if status.desired_generation == Some(0) {
        status.desired_generation = None;
    }
    if status.printable_status.as_deref() == Some("") {
        status.printable_status = None;
    }
    if status.run_strategy.as_deref() == Some("") {
        status.run_strategy = None;
    }
    if status
        .volume_snapshot_statuses
        .as_ref()
        .is_some_and(|v| v.is_empty())
    {
        status.volume_snapshot_statuses = None;
    }
    if status
        .volume_requests
        .as_ref()
        .is_some_and(|v| v.is_empty())
    {
        status.volume_requests = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(reqs: serde_json::Value) -> VirtualMachineStatus {
        serde_json::from_value(json!({ "stateChangeRequests": reqs })).unwrap()
    }

    fn vmi(uid: &str, phase: &str, deleting: bool) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "vm", "uid": uid},
            "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase},
        }))
        .unwrap();
        if deleting {
            v.metadata.deletion_timestamp =
                crate::api::Time::from_datetime(chrono::DateTime::from_timestamp(1, 0).unwrap())
                    .to_k8s();
        }
        v
    }

    /// Facts §1.5 / vm.go:2811-2853, and the trimming seen in vm_test.go:7016 "when issuing a
    /// restart a VM with Always should get restarted".
    #[test]
    fn trimming_rules() {
        let stop = status(json!([{"action": "Stop", "uid": "u1"}, {"action": "Start"}]));
        assert!(trim_first_change_request_needed(&stop, None));
        assert!(!trim_first_change_request_needed(
            &stop,
            Some(&vmi("u1", "Running", false))
        ));
        assert!(trim_first_change_request_needed(
            &stop,
            Some(&vmi("u2", "Running", false))
        ));
        let stop_no_uid = status(json!([{"action": "Stop"}]));
        assert!(trim_first_change_request_needed(
            &stop_no_uid,
            Some(&vmi("u1", "Running", false))
        ));

        let start = status(json!([{"action": "Start"}, {"action": "Stop", "uid": "u9"}]));
        assert!(!trim_first_change_request_needed(&start, None));
        assert!(trim_first_change_request_needed(
            &start,
            Some(&vmi("u1", "Scheduling", false))
        ));
        assert!(!trim_first_change_request_needed(
            &start,
            Some(&vmi("u1", "Running", true))
        ));
        assert!(!trim_first_change_request_needed(
            &start,
            Some(&vmi("u1", "Failed", false))
        ));
        assert!(!trim_first_change_request_needed(&status(json!([])), None));
    }

    #[test]
    fn normalization_treats_empty_as_absent() {
        let mut s = VirtualMachineStatus {
            conditions: Some(vec![]),
            state_change_requests: Some(Box::default()),
            created: Some(false),
            ready: Some(false),
            observed_generation: Some(0),
            ..Default::default()
        };
        normalize_status(&mut s);
        assert_eq!(s, VirtualMachineStatus::default());
    }
}
