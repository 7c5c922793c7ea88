//! The `expand` / `expandAll` instancetype reference policies end to end through one sync
//! (pkg/instancetype/controller/vm/controller.go:124-216; cases after controller_test.go's
//! "InstancetypeReferencePolicy" context, values re-derived here).

use super::*;
use crate::config::ReferencePolicy;
use crate::instancetype::Resource;
use pretty_assertions::assert_eq;

fn policy_snap(vm: VirtualMachine, policy: ReferencePolicy) -> VmSnapshot {
    let mut s = itype_snap(vm, 2);
    s.config.reference_policy = policy;
    s
}

/// The VM with both specs already stashed by the `reference` policy: the revisions and the
/// status refs naming them (controller_test.go's `addRevisionsToVMFunc`).
fn stashed_snap(policy: ReferencePolicy) -> (VmSnapshot, [String; 2]) {
    let base = itype_snap(itype_vm(), 2);
    let build = |r: Resource, name: &str| {
        let object = base.instancetypes.get(r, name).unwrap();
        crate::instancetype::revision::build(&base.vm, r, object)
    };
    let it = build(Resource::ClusterInstancetype, "cx1.medium");
    let pref = build(Resource::ClusterPreference, "linux");
    let names = [
        it.metadata.name.clone().unwrap(),
        pref.metadata.name.clone().unwrap(),
    ];
    let vm = with_status(
        itype_vm(),
        json!({
            "instancetypeRef": {"name": "cx1.medium",
                                "controllerRevisionRef": {"name": names[0]}},
            "preferenceRef": {"name": "linux", "kind": "VirtualMachineClusterPreference",
                              "controllerRevisionRef": {"name": names[1]}}
        }),
    );
    let mut s = policy_snap(vm, policy);
    s.revisions = vec![Arc::new(it), Arc::new(pref)];
    (s, names)
}

fn updated_vm(d: &VmDecision) -> Value {
    match &d.actions[0].action {
        VmAction::UpdateVm {
            vm,
            purpose,
            resource_version_from,
        } => {
            assert_eq!(*purpose, VmUpdatePurpose::ExpandInstancetype);
            assert_eq!(*resource_version_from, ResourceVersionFrom::Snapshot);
            serde_json::to_value(vm).unwrap()
        }
        other => panic!("first action is {}, not UpdateVm", other.kind()),
    }
}

/// "should expand and update VM" / "referencePolicy expand": the VM is written with its
/// instancetype and preference in the template and no matchers, its status without refs, and
/// the sync ends there (no stash, no VMI); the final status write follows the second write.
#[test]
fn expand_writes_the_expanded_vm_and_stops() {
    for policy in [ReferencePolicy::Expand, ReferencePolicy::ExpandAll] {
        let d = decide(&policy_snap(itype_vm(), policy));
        assert_eq!(
            kinds(&d),
            ["UpdateVm", "UpdateVmStatus", "UpdateVmStatus"],
            "{policy:?}"
        );
        assert_eq!(status_write_rv(&d, 1), ResourceVersionFrom::Action(0));
        assert_eq!(status_write_rv(&d, 2), ResourceVersionFrom::Action(1));
        assert!(d.sync_error.is_none());
        assert_eq!(d.outcome, SyncOutcome::Done);
        let vm = updated_vm(&d);
        assert_eq!(vm["spec"].get("instancetype"), None);
        assert_eq!(vm["spec"].get("preference"), None);
        let spec = &vm["spec"]["template"]["spec"];
        assert_eq!(
            spec["domain"]["cpu"],
            json!({"sockets": 1, "cores": 2, "threads": 1})
        );
        assert_eq!(spec["domain"]["memory"], json!({"guest": "4Gi"}));
        assert_eq!(spec["domain"]["machine"], json!({"type": "q35"}));
        // `acpi` is a struct, not a pointer, in Go's `Features`: always written.
        assert_eq!(spec["domain"]["features"], json!({"acpi": {}, "smm": {}}));
        assert_eq!(spec["terminationGracePeriodSeconds"], 180);
        assert_eq!(spec["evictionStrategy"], "None");
        assert_eq!(spec["architecture"], "amd64");
        assert_eq!(
            spec["domain"]["devices"]["disks"],
            json!([{"name": "root", "disk": {"bus": "virtio"}},
                   {"name": "cloudinit", "disk": {"bus": "virtio"}}])
        );
        assert_eq!(
            spec["domain"]["devices"]["interfaces"],
            json!([{"name": "default", "bridge": {}, "model": "virtio"}])
        );
        // No name annotations: those are ApplyToVMI's, at start.
        assert_eq!(
            vm["spec"]["template"]["metadata"],
            json!({"labels": {"app": "x"}})
        );
        let st = serde_json::to_value(status(&d)).unwrap();
        assert_eq!(st.get("instancetypeRef"), None);
        assert_eq!(st["printableStatus"], "Stopped");
    }
}

/// "should not expand and update VM" / "referencePolicy expand and revisionNames already
/// captured": nothing is written for the instancetype (no stash, no upgrade either) and the VM
/// starts from the stashed specs.
#[test]
fn expand_leaves_a_vm_with_stashed_revisions() {
    let (s, _) = stashed_snap(ReferencePolicy::Expand);
    let d = decide(&s);
    assert!(!kinds(&d).contains(&"UpdateVm"), "{:?}", kinds(&d));
    assert!(!kinds(&d).contains(&"CreateInstancetypeRevision"));
    let vmi = serde_json::to_value(created_vmi(&d)).unwrap();
    assert_eq!(
        vmi["spec"]["domain"]["cpu"],
        json!({"sockets": 1, "cores": 2, "threads": 1})
    );
}

/// "referencePolicy expandAll and revisionNames already captured": expanded anyway, then both
/// stashed revisions deleted.
#[test]
fn expand_all_expands_and_deletes_the_stashes() {
    let (s, names) = stashed_snap(ReferencePolicy::ExpandAll);
    let d = decide(&s);
    assert_eq!(
        kinds(&d),
        [
            "UpdateVm",
            "UpdateVmStatus",
            "DeleteControllerRevision",
            "DeleteControllerRevision",
            "UpdateVmStatus"
        ]
    );
    let deleted: Vec<&str> = d
        .actions
        .iter()
        .filter_map(|a| match &a.action {
            VmAction::DeleteControllerRevision { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(deleted, [names[0].as_str(), names[1].as_str()]);
    let VmAction::UpdateVmStatus { status, .. } = &d.actions[1].action else {
        panic!()
    };
    let st = serde_json::to_value(status).unwrap();
    assert_eq!(
        (st.get("instancetypeRef"), st.get("preferenceRef")),
        (None, None)
    );
    assert_eq!(status_write_rv(&d, 4), ResourceVersionFrom::Action(1));
}

/// controller.go:190-208: a failed delete is a `FailedCreate` sync error and the sync goes on
/// with the VM it read, whose status write then carries the stale resourceVersion.
#[test]
fn a_failed_cleanup_is_a_failed_create() {
    let (s, names) = stashed_snap(ReferencePolicy::ExpandAll);
    let d = fail_at(&s, 2, "etcd is down");
    assert_eq!(
        kinds(&d),
        [
            "UpdateVm",
            "UpdateVmStatus",
            "DeleteControllerRevision",
            "UpdateVmStatus"
        ]
    );
    let e = d.sync_error.as_ref().unwrap();
    assert_eq!(e.reason, "FailedCreate");
    assert_eq!(
        e.message,
        format!(
            "error encountered cleaning controllerRevision {} after successfully expanding \
             VirtualMachine testvmi: etcd is down",
            names[0]
        )
    );
    assert_eq!(status_write_rv(&d, 3), ResourceVersionFrom::Snapshot);
    assert_eq!(
        condition(&d, "Failure").unwrap().reason.as_deref(),
        Some("FailedCreate")
    );
}

/// Errors without a reason go through `handleSynchronizerErr` (vm.go:3392-3401): a failed
/// Update or UpdateStatus, and a template that conflicts with the instancetype.
#[test]
fn expand_errors_are_unsupported_sync_errors() {
    let s = policy_snap(itype_vm(), ReferencePolicy::Expand);
    let cases = [
        (
            0,
            "error encountered when trying to update expanded VirtualMachine: denied",
        ),
        (
            1,
            "error encountered when trying to update expanded VirtualMachine Status: denied",
        ),
    ];
    for (index, message) in cases {
        let d = fail_at(&s, index, "denied");
        let e = d.sync_error.as_ref().unwrap();
        assert_eq!(
            (e.reason.as_str(), e.message.clone()),
            (
                "UnsupportedSyncError",
                format!("unsupported error: {message}")
            )
        );
    }
    let mut v = itype_vm();
    let spec = v.spec.template.as_mut().unwrap().spec.as_mut().unwrap();
    spec.domain.cpu = Some(serde_json::from_value(json!({"sockets": 2})).unwrap());
    let d = decide(&policy_snap(v, ReferencePolicy::ExpandAll));
    assert_eq!(kinds(&d), ["UpdateVmStatus"]);
    assert_eq!(
        d.sync_error.as_ref().unwrap().message,
        "unsupported error: error encountered while expanding into VirtualMachine: VM field(s) \
         spec.template.spec.domain.cpu.sockets conflicts with selected instance type"
    );
}
