//! Known upstream controller and virt-handler defects `why` names when a VM's trace matches
//! them (the launcher's sizing defects are `crate::launcher::defects`, reached through the
//! overhead explanation of an OOM kill).
//!
//! | id | what | upstream | fixed |
//! |---|---|---|---|
//! | [`HANDLER_RESTART_FAILS_RUNNING_VMI`] | a restarted virt-handler with an empty domain cache marks a Running VMI `Failed` while its launcher still runs (v1.9.0 pkg/virt-handler/vm.go:2346-2352) | kubevirt/kubevirt#18763, #18765 | PR 18453 on main, after v1.9.0; release-1.9 backport PR 18767 |
//! | [`RERUN_ON_FAILURE_STOPPED_STATUS`] | a stopped `RerunOnFailure` VM with no VMI reports `WaitingForVolumeBinding` instead of `Stopped`: `isSetToStart` returns true with no VMI (v1.9.0 pkg/virt-controller/watch/vm/vm.go:1232-1236) while `syncRunStrategy` starts only on a start request | kubevirt/kubevirt#18424 | PR 18787 on main, after v1.9.0 |

use super::model::Defect;
use crate::api::VirtualMachine;
use crate::api::vm::RunStrategy;
use crate::kubevirt_version::KubeVirtVersion;

/// virt-handler restart marks a Running VMI Failed.
pub(crate) const HANDLER_RESTART_FAILS_RUNNING_VMI: &str = "handlerRestartFailsRunningVmi";
/// A stopped RerunOnFailure VM reports another status than Stopped.
pub(crate) const RERUN_ON_FAILURE_STOPPED_STATUS: &str = "rerunOnFailureStoppedStatus";

/// kubevirt/kubevirt#18763: a VMI that was `Running` went `Failed` by virt-handler's report
/// while its launcher pod kept running (no container had ended, the pod was not being
/// deleted): the signature of a virt-handler that restarted with an empty domain cache.
pub(crate) fn handler_restart_fails_running_vmi(
    was_running: bool,
    failed: bool,
    launcher_still_running: bool,
) -> Option<Defect> {
    (was_running && failed && launcher_still_running).then(|| Defect {
        id: HANDLER_RESTART_FAILS_RUNNING_VMI.into(),
        message: "the VMI went from Running to Failed while its launcher pod was still running: \
                  KubeVirt v1.9.0's virt-handler returns Failed for a Running VMI whose domain it \
                  does not see (pkg/virt-handler/vm.go:2346-2352), which happens when virt-handler \
                  restarts (a DaemonSet roll) with an empty domain cache"
            .into(),
        upstream: "kubevirt/kubevirt#18763 (and the meta issue #18765)".into(),
        fixed_in: "PR 18453 on main (after v1.9.0: a Running VMI gets the 3-minute grace period \
                   Scheduled ones have); the release-1.9 backport is PR 18767"
            .into(),
    })
}

/// kubevirt/kubevirt#18424, fixed by PR 18787: a `RerunOnFailure` VM without a VMI and without
/// a start request is stopped, yet v1.9.0's status reports `WaitingForVolumeBinding` when a
/// PVC is pending (`isSetToStart` returns true for RerunOnFailure with no VMI, vm.go:1232-1236).
/// Only on a release whose controller rules still have it (`version`: the cluster's release and
/// where it was read; `None`: unknown, the default release assumed).
pub(crate) fn rerun_on_failure_stopped_status(
    vm: &VirtualMachine,
    has_vmi: bool,
    version: Option<&(KubeVirtVersion, String)>,
) -> Option<Defect> {
    let (release, read_from) = match version {
        Some((v, from)) => (*v, format!("{v}, from {from}")),
        None => (
            KubeVirtVersion::default(),
            format!(
                "{}, assumed: the cluster's release was not read",
                KubeVirtVersion::default()
            ),
        ),
    };
    let fixed = KubeVirtVersion::ALL.into_iter().find(|v| {
        v.controller_rules()
            .rerun_on_failure_start_needs_request
            .value
    })?;
    if release
        .controller_rules()
        .rerun_on_failure_start_needs_request
        .value
    {
        return None;
    }
    let status = vm.status.as_ref()?;
    let start_requested = status
        .state_change_requests
        .iter()
        .flat_map(|r| r.iter())
        .any(|r| r.action == "Start");
    let matches = vm.run_strategy().ok() == Some(RunStrategy::RerunOnFailure)
        && !has_vmi
        && !start_requested
        && status.printable_status.as_deref() == Some("WaitingForVolumeBinding");
    matches.then(|| Defect {
        id: RERUN_ON_FAILURE_STOPPED_STATUS.into(),
        message: format!(
            "runStrategy RerunOnFailure with no VMI and no start request: the controller \
             will not start this VM, but the status code of KubeVirt {read_from} believes it \
             will (isSetToStart, v1.9.0 pkg/virt-controller/watch/vm/vm.go:1232-1236) and \
             reports WaitingForVolumeBinding instead of Stopped"
        ),
        upstream: "kubevirt/kubevirt#18424".into(),
        fixed_in: format!("KubeVirt {fixed} (PR 18787), after v1.9.0; not in {release}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vm(run_strategy: &str, printable: &str, requests: serde_json::Value) -> VirtualMachine {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "vm-a", "namespace": "demo"},
            "spec": {"runStrategy": run_strategy, "template": {"spec": {"domain": {"devices": {}}}}},
            "status": {"printableStatus": printable, "stateChangeRequests": requests}
        }))
        .expect("vm")
    }

    #[test]
    fn handler_restart_needs_a_running_launcher_under_a_failed_running_vmi() {
        assert!(handler_restart_fails_running_vmi(true, true, true).is_some());
        assert!(handler_restart_fails_running_vmi(true, true, false).is_none());
        assert!(handler_restart_fails_running_vmi(false, true, true).is_none());
        assert!(handler_restart_fails_running_vmi(true, false, true).is_none());
    }

    #[test]
    fn rerun_on_failure_stopped_status_matches_only_without_vmi_and_request() {
        let stuck = vm("RerunOnFailure", "WaitingForVolumeBinding", json!([]));
        let d = rerun_on_failure_stopped_status(&stuck, false, None).expect("matches");
        assert_eq!(
            d.fixed_in,
            "KubeVirt main (PR 18787), after v1.9.0; not in v1.9.0"
        );
        assert!(d.message.contains("v1.9.0, assumed"), "{d:?}");
        assert!(rerun_on_failure_stopped_status(&stuck, true, None).is_none());
        let asked = vm(
            "RerunOnFailure",
            "WaitingForVolumeBinding",
            json!([{"action": "Start"}]),
        );
        assert!(rerun_on_failure_stopped_status(&asked, false, None).is_none());
        let always = vm("Always", "WaitingForVolumeBinding", json!([]));
        assert!(rerun_on_failure_stopped_status(&always, false, None).is_none());
        let stopped = vm("RerunOnFailure", "Stopped", json!([]));
        assert!(rerun_on_failure_stopped_status(&stopped, false, None).is_none());
    }

    /// The defect is named only on a release that has it, with the release and where it was
    /// read; on `main` (PR 18787) the status is right and nothing is named.
    #[test]
    fn rerun_on_failure_stopped_status_follows_the_clusters_release() {
        let stuck = vm("RerunOnFailure", "WaitingForVolumeBinding", json!([]));
        let on =
            |v: KubeVirtVersion| (v, "the KubeVirt CR's status.observedKubeVirtVersion".into());
        let d = rerun_on_failure_stopped_status(&stuck, false, Some(&on(KubeVirtVersion::V1_8)))
            .expect("v1.8.0 has it");
        assert!(
            d.message.contains(
                "KubeVirt v1.8.0, from the KubeVirt CR's status.observedKubeVirtVersion believes"
            ),
            "{}",
            d.message
        );
        assert_eq!(
            d.fixed_in,
            "KubeVirt main (PR 18787), after v1.9.0; not in v1.8.0"
        );
        assert_eq!(
            rerun_on_failure_stopped_status(&stuck, false, Some(&on(KubeVirtVersion::Main))),
            None
        );
    }
}
