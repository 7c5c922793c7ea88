//! Ownership: `ClaimVirtualMachineInstanceByName` and `ClaimMatchedDataVolumes` through the
//! generic `ClaimObject` (pkg/controller/controller_ref_manager.go:149-205, 338-411).

use crate::api::DataVolume;
use crate::api::key::controller_of;
use crate::api::vm::VirtualMachine;
use crate::api::vmi::VirtualMachineInstance;

/// What claiming the same-named VMI results in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum VmiClaim {
    /// Controlled by this VM (controller reference UID = VM UID) and matching: use it.
    Owned,
    /// No controller, matching, neither object being deleted: adopt it (after `CanAdopt`).
    Adopt,
    /// Controlled by this VM but not matching: release it. Unreachable for the by-name claim.
    Release,
    /// Not claimed: the VMI is treated as absent. The text says why.
    NotClaimed(String),
}

/// `ClaimVirtualMachineInstanceByName` (controller_ref_manager.go:381-411): the match is "VMI name
/// equals VM name", then `ClaimObject` (149-205).
pub(crate) fn claim_vmi(vm: &VirtualMachine, vmi: &VirtualMachineInstance) -> VmiClaim {
    let vm_uid = vm.metadata.uid.as_deref().unwrap_or("");
    let controller = controller_of(&vmi.metadata);
    let owned = controller.is_some_and(|r| r.uid == vm_uid);
    let owned_by_other = controller.is_some_and(|r| r.uid != vm_uid);
    let matched = vmi.metadata.name == vm.metadata.name;
    match (owned, owned_by_other, matched) {
        (true, _, true) => VmiClaim::Owned,
        (true, _, false) => {
            if vm.metadata.deletion_timestamp.is_some() {
                VmiClaim::NotClaimed("owned but not matching, and the VM is being deleted".into())
            } else {
                VmiClaim::Release
            }
        }
        (false, false, true) => {
            if vm.metadata.deletion_timestamp.is_some() {
                VmiClaim::NotClaimed("orphan VMI, but the VM is being deleted".into())
            } else if vmi.metadata.deletion_timestamp.is_some() {
                VmiClaim::NotClaimed("orphan VMI being deleted".into())
            } else {
                VmiClaim::Adopt
            }
        }
        (false, true, _) => VmiClaim::NotClaimed(format!(
            "controlled by another owner (uid {})",
            controller.map(|r| r.uid.as_str()).unwrap_or("")
        )),
        (false, false, false) => VmiClaim::NotClaimed("name does not match".into()),
    }
}

/// `ClaimMatchedDataVolumes` (controller_ref_manager.go:338-362) with its match-all rule: true when
/// the DataVolume is an orphan to adopt (neither it nor the VM being deleted). DataVolumes owned
/// by the VM or by another controller need nothing. The claimed list is not used by `sync`
/// (`handleDataVolumes` reads the cache), so only adoptions matter.
pub(crate) fn claim_data_volume(vm: &VirtualMachine, dv: &DataVolume) -> bool {
    controller_of(&dv.metadata).is_none()
        && vm.metadata.deletion_timestamp.is_none()
        && dv.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    fn vm() -> VirtualMachine {
        serde_json::from_value(json!({
            "metadata": {"name": "testvmi", "namespace": "default", "uid": "vm-uid"},
            "spec": {"template": {"spec": {"domain": {"devices": {}}}}}
        }))
        .unwrap()
    }

    fn vmi(owner_uid: Option<&str>) -> VirtualMachineInstance {
        let mut v: VirtualMachineInstance = serde_json::from_value(json!({
            "metadata": {"name": "testvmi", "namespace": "default", "uid": "vmi-uid"},
            "spec": {"domain": {"devices": {}}}
        }))
        .unwrap();
        if let Some(uid) = owner_uid {
            v.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachine".into(),
                name: "testvmi".into(),
                uid: uid.into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]);
        }
        v
    }

    /// Mirrors vm_test.go:2762 "should detect that a VirtualMachineInstance already exists and
    /// adopt it" and 2739 "should ignore non-matching VMIs".
    #[test]
    fn claim_rules() {
        assert_eq!(claim_vmi(&vm(), &vmi(Some("vm-uid"))), VmiClaim::Owned);
        assert_eq!(claim_vmi(&vm(), &vmi(None)), VmiClaim::Adopt);
        assert!(matches!(
            claim_vmi(&vm(), &vmi(Some("other"))),
            VmiClaim::NotClaimed(_)
        ));
        let mut deleting = vmi(None);
        deleting.metadata.deletion_timestamp = Some(
            crate::api::Time::from_datetime(chrono::Utc::now())
                .to_k8s()
                .unwrap(),
        );
        assert!(matches!(
            claim_vmi(&vm(), &deleting),
            VmiClaim::NotClaimed(_)
        ));
        let mut other_name = vmi(Some("vm-uid"));
        other_name.metadata.name = Some("x".into());
        assert_eq!(claim_vmi(&vm(), &other_name), VmiClaim::Release);
    }

    /// Mirrors vm_test.go:2781 "should detect that a DataVolume already exists and adopt it".
    #[test]
    fn orphan_data_volume_is_adopted() {
        let dv = DataVolume::default();
        assert!(claim_data_volume(&vm(), &dv));
        let mut owned = DataVolume::default();
        owned.metadata.owner_references = vmi(Some("x")).metadata.owner_references.clone();
        assert!(!claim_data_volume(&vm(), &owned));
    }
}
