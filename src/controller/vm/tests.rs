//! Whole-sync tests: a snapshot in, the decision out, checked against what KubeVirt v1.9's
//! controller does (the KubeVirt test each one mirrors is named where there is one; all are in
//! pkg/virt-controller/watch/vm/vm_test.go).

use super::*;
use crate::api::vm::{StartFailure, VirtualMachine, VirtualMachineStatus};
use crate::api::vmi::VirtualMachineInstance;
use crate::api::{DataVolume, Time};
use crate::controller::common::{ApiFailure, SyncError};
use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::ControllerRevision;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use std::sync::Arc;

const FW_UUID: &str = "f8918e71-270a-598e-a2a4-1afac39e1394";

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

fn template_spec() -> Value {
    json!({
        "domain": {
            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
            "memory": {"guest": "128Mi"},
            "firmware": {"uuid": FW_UUID}
        },
        "volumes": [
            {"name": "root", "containerDisk": {"image": "quay.io/kubevirt/cirros"}},
            {"name": "cloudinit", "cloudInitNoCloud": {"userData": "#!/bin/sh"}}
        ]
    })
}

/// Like `watchtesting.DefaultVirtualMachine`: name/VMI name `testvmi`, api-version annotations
/// and the VM finalizer already set.
fn vm_json(run: Value) -> Value {
    let mut spec = json!({
        "template": {"metadata": {"labels": {"app": "x"}}, "spec": template_spec()}
    });
    for (k, v) in run.as_object().unwrap() {
        spec[k] = v.clone();
    }
    json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachine",
        "metadata": {
            "name": "testvmi", "namespace": "default", "uid": "vm-uid", "generation": 1,
            "resourceVersion": "10",
            "annotations": {
                "kubevirt.io/latest-observed-api-version": "v1",
                "kubevirt.io/storage-observed-api-version": "v1"
            },
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"]
        },
        "spec": spec
    })
}

fn make_vm(run: Value) -> VirtualMachine {
    serde_json::from_value(vm_json(run)).unwrap()
}

fn strategy(s: &str) -> VirtualMachine {
    make_vm(json!({ "runStrategy": s }))
}

fn with_status(mut vm: VirtualMachine, status: Value) -> VirtualMachine {
    vm.status = Some(serde_json::from_value(status).unwrap());
    vm
}

/// A VMI owned by the VM, as the VM controller creates it.
fn vmi(phase: &str) -> VirtualMachineInstance {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {
            "name": "testvmi", "namespace": "default", "uid": "vmi-uid",
            "annotations": {"kubevirt.io/vm-generation": "1"},
            "finalizers": ["kubevirt.io/virtualMachineControllerFinalize"],
            "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                 "name": "testvmi", "uid": "vm-uid", "controller": true,
                                 "blockOwnerDeletion": true}]
        },
        "spec": template_spec(),
        "status": {"phase": phase, "virtualMachineRevisionName": "revision-start-vm-vm-uid-1"}
    }))
    .unwrap()
}

fn ever_running(mut v: VirtualMachineInstance) -> VirtualMachineInstance {
    v.status.as_mut().unwrap().phase_transition_timestamps = Some(
        serde_json::from_value(json!([
            {"phase": "Running", "phaseTransitionTimestamp": "2023-11-14T22:00:00Z"}
        ]))
        .unwrap(),
    );
    v
}

fn deleting() -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    Time(now()).to_k8s()
}

fn snap(vm: VirtualMachine) -> VmSnapshot {
    VmSnapshot::new(vm, now())
}

fn snap_with(vm: VirtualMachine, vmi: VirtualMachineInstance) -> VmSnapshot {
    let mut s = snap(vm);
    s.vmi = Some(vmi.into());
    s
}

fn kinds(d: &VmDecision) -> Vec<&'static str> {
    d.action_kinds()
}

fn status(d: &VmDecision) -> &VirtualMachineStatus {
    d.status.as_ref().expect("status computed")
}

fn printable(d: &VmDecision) -> &str {
    status(d).printable_status.as_deref().unwrap_or("")
}

fn created_vmi(d: &VmDecision) -> &VirtualMachineInstance {
    d.actions
        .iter()
        .find_map(|a| match &a.action {
            VmAction::CreateVmi { vmi } => Some(vmi.as_ref()),
            _ => None,
        })
        .expect("a CreateVmi action")
}

fn events(d: &VmDecision) -> Vec<(EventType, String, String)> {
    d.actions
        .iter()
        .filter_map(|a| match &a.action {
            VmAction::Event {
                type_,
                reason,
                message,
            } => Some((*type_, reason.clone(), message.clone())),
            _ => None,
        })
        .collect()
}

fn condition<'a>(d: &'a VmDecision, type_: &str) -> Option<&'a crate::api::Condition> {
    status(d)
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

fn start_revision(vm: &VirtualMachine) -> ControllerRevision {
    super::revision::build_start_revision(vm).unwrap()
}

/// The text of the error the sync ends with (what KubeVirt logs), `None` when it ends `Done`.
fn outcome_text(d: &VmDecision) -> Option<String> {
    match &d.outcome {
        SyncOutcome::Done => None,
        SyncOutcome::Error(e) => Some(e.to_string()),
    }
}

fn fail_at(s: &VmSnapshot, index: usize, message: &str) -> VmDecision {
    let mut failures = ApiFailures::none();
    failures.insert(index, ApiFailure::other(message));
    decide_with_failures(s, &failures)
}

/// Where the `UpdateVmStatus` at `index` takes its resourceVersion from.
fn status_write_rv(d: &VmDecision, index: usize) -> ResourceVersionFrom {
    match &d.actions[index].action {
        VmAction::UpdateVmStatus {
            resource_version_from,
            ..
        } => *resource_version_from,
        other => panic!("action {index} is {}, not UpdateVmStatus", other.kind()),
    }
}

fn index_of(d: &VmDecision, kind: &str) -> usize {
    d.actions
        .iter()
        .position(|a| a.action.kind() == kind)
        .unwrap_or_else(|| panic!("no {kind} in {:?}", kinds(d)))
}

// ------------------------------------------------------------------------------------------
// execute: first write, claims, finalizers, expectations
// ------------------------------------------------------------------------------------------

#[test]
fn api_version_annotations_are_the_first_write() {
    let mut v = strategy("Always");
    v.metadata.annotations = None;
    let d = decide(&snap(v));
    assert_eq!(kinds(&d), vec!["UpdateVm"]);
    let VmAction::UpdateVm { vm, purpose, .. } = &d.actions[0].action else {
        unreachable!()
    };
    assert_eq!(*purpose, VmUpdatePurpose::ApiVersionAnnotations);
    let ann = vm.metadata.annotations.as_ref().unwrap();
    assert_eq!(ann["kubevirt.io/latest-observed-api-version"], "v1");
    assert_eq!(ann["kubevirt.io/storage-observed-api-version"], "v1");
    assert_eq!(d.status, None);
    assert_eq!(d.outcome, SyncOutcome::Done);
}

/// KubeVirt sends the VM as Go marshals it: the template's `domain.resources` is written `{}`
/// (go_encoding), a spec change the server counts in `metadata.generation`; the VMI it creates
/// carries it too. Found by tests/reference_conformance.rs: KubeVirt
/// v1.9.0's VMs reached generation 3 where ours stayed at 2.
#[test]
fn whole_writes_carry_go_s_empty_domain_resources() {
    let mut v = strategy("Always");
    v.metadata.annotations = None;
    crate::controller::vm::template_spec_mut(&mut v)
        .domain
        .resources = None;
    let d = decide(&snap(v.clone()));
    let VmAction::UpdateVm { vm, .. } = &d.actions[0].action else {
        unreachable!()
    };
    let body = serde_json::to_value(&**vm).unwrap();
    assert_eq!(
        body.pointer("/spec/template/spec/domain/resources"),
        Some(&json!({}))
    );
    let mut v = strategy("Always");
    crate::controller::vm::template_spec_mut(&mut v)
        .domain
        .resources = None;
    let d = decide(&snap(v.clone()));
    let created = serde_json::to_value(&created_vmi(&d).spec).unwrap();
    assert_eq!(created.pointer("/domain/resources"), Some(&json!({})));
}

/// Mirrors "should add controller finalizer if VirtualMachine does not have it" (2638) and
/// "should add controller finalizer only once" (2654).
#[test]
fn finalizer_added_once_with_test_and_replace() {
    let mut v = strategy("Halted");
    v.metadata.finalizers = Some(vec!["other".into()]);
    let d = decide(&snap(v.clone()));
    assert_eq!(kinds(&d), vec!["AddVmFinalizer", "UpdateVmStatus"]);
    let VmAction::AddVmFinalizer { patch } = &d.actions[0].action else {
        unreachable!()
    };
    assert_eq!(
        patch,
        &json!([
            {"op": "test", "path": "/metadata/finalizers", "value": ["other"]},
            {"op": "replace", "path": "/metadata/finalizers",
             "value": ["other", "kubevirt.io/virtualMachineControllerFinalize"]},
        ])
    );
    // The status write uses the VM the patch returned.
    assert_eq!(status_write_rv(&d, 1), ResourceVersionFrom::Action(0));

    // Already there: no patch.
    let d = decide(&snap(strategy("Halted")));
    assert!(!kinds(&d).contains(&"AddVmFinalizer"));
    // A failing finalizer patch stops the sync before updateStatus.
    let d = fail_at(&snap(v), 0, "conflict");
    assert_eq!(kinds(&d), vec!["AddVmFinalizer"]);
    assert_eq!(d.status, None);
    assert_eq!(outcome_text(&d).as_deref(), Some("conflict"));
}

#[test]
fn unsatisfied_expectations_only_update_status() {
    let mut s = snap(strategy("Always"));
    s.expectations.vmi = Some(ExpectationCounts {
        adds: 1,
        dels: 0,
        expired: false,
    });
    let d = decide(&s);
    assert_eq!(kinds(&d), vec!["UpdateVmStatus"]);
    assert_eq!(printable(&d), "Starting");
    // Expired entries count as satisfied: the VMI is created.
    s.expectations.vmi.as_mut().unwrap().expired = true;
    let d = decide(&s);
    assert!(kinds(&d).contains(&"CreateVmi"));
}

/// Mirrors "should detect that a VirtualMachineInstance already exists and adopt it" (2762).
#[test]
fn orphan_vmi_is_adopted_then_used() {
    let mut orphan = vmi("Running");
    orphan.metadata.owner_references = None;
    let d = decide(&snap_with(strategy("Always"), orphan.clone()));
    assert_eq!(kinds(&d)[0], "AdoptVmi");
    let VmAction::AdoptVmi { uid, patch, .. } = &d.actions[0].action else {
        unreachable!()
    };
    assert_eq!(uid, "vmi-uid");
    assert_eq!(
        patch,
        &json!({"metadata": {"ownerReferences": [{"apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachine", "name": "testvmi", "uid": "vm-uid",
            "controller": true, "blockOwnerDeletion": true}], "uid": "vmi-uid"}})
    );
    assert!(!kinds(&d).contains(&"CreateVmi"));
    assert_eq!(printable(&d), "Running");

    // Owned by another controller: ignored, so Always creates (and the create will conflict).
    let mut foreign = orphan.clone();
    foreign.metadata.owner_references = vmi("Running").metadata.owner_references.clone();
    foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "other".into();
    let d = decide(&snap_with(strategy("Always"), foreign));
    assert!(kinds(&d).contains(&"CreateVmi"));

    // Adoption failing (not NotFound) stops the sync.
    let d = fail_at(&snap_with(strategy("Always"), orphan), 0, "gone");
    assert_eq!(outcome_text(&d).as_deref(), Some("gone"));
    assert_eq!(d.status, None);
}

// ------------------------------------------------------------------------------------------
// deletion
// ------------------------------------------------------------------------------------------

/// Mirrors "should delete VirtualMachineInstance when VirtualMachine marked for deletion" (2668)
/// and the Terminating printable status (4485).
#[test]
fn deleted_vm_stops_its_vmi_first() {
    let mut v = strategy("Always");
    v.metadata.deletion_timestamp = deleting();
    let d = decide(&snap_with(v, vmi("Running")));
    assert_eq!(
        kinds(&d),
        vec!["ExpectVmiDeletions", "DeleteVmi", "Event", "UpdateVmStatus"]
    );
    assert_eq!(printable(&d), "Terminating");
}

/// Mirrors "should remove controller finalizer once VirtualMachineInstance is gone" (2688).
#[test]
fn deleted_vm_without_vmi_drops_its_finalizer() {
    let mut v = strategy("Always");
    v.metadata.deletion_timestamp = deleting();
    let d = decide(&snap(v.clone()));
    assert_eq!(kinds(&d), vec!["RemoveVmFinalizer", "UpdateVmStatus"]);
    assert_eq!(printable(&d), "Terminating");

    // Orphan deletion: the finalizer goes even though the VMI exists.
    v.metadata
        .finalizers
        .as_mut()
        .unwrap()
        .push("orphan".into());
    let d = decide(&snap_with(v, vmi("Running")));
    assert_eq!(kinds(&d)[0], "RemoveVmFinalizer");
    assert!(!kinds(&d).contains(&"DeleteVmi"));
}

/// Mirrors "should not delete the VirtualMachineInstance again if it is already marked for
/// deletion" (2727).
#[test]
fn vmi_already_deleting_is_not_deleted_again() {
    let mut v = strategy("Halted");
    v.metadata.deletion_timestamp = deleting();
    let mut i = vmi("Running");
    i.metadata.deletion_timestamp = deleting();
    let d = decide(&snap_with(v, i));
    assert!(!kinds(&d).contains(&"DeleteVmi"));
}

// ------------------------------------------------------------------------------------------
// run strategies
// ------------------------------------------------------------------------------------------

/// Mirrors "should create missing VirtualMachineInstance" (2501), "should create VMI with
/// vmRevision" (1887), "should add generation annotation during VMI creation" (1957) and
/// "Should set a Starting status when running=true and VMI doesn't exist" (4002).
#[test]
fn always_without_vmi_starts_one() {
    let d = decide(&snap(strategy("Always")));
    assert_eq!(
        kinds(&d),
        vec![
            "CreateControllerRevision",
            "ExpectVmiCreations",
            "CreateVmi",
            "Event",
            "UpdateVmStatus"
        ]
    );
    let v = created_vmi(&d);
    assert_eq!(v.metadata.name.as_deref(), Some("testvmi"));
    assert_eq!(
        v.metadata.annotations.as_ref().unwrap()["kubevirt.io/vm-generation"],
        "1"
    );
    assert_eq!(
        v.metadata.finalizers.as_deref(),
        Some(&["kubevirt.io/virtualMachineControllerFinalize".to_string()][..])
    );
    assert_eq!(
        v.status
            .as_ref()
            .unwrap()
            .virtual_machine_revision_name
            .as_deref(),
        Some("revision-start-vm-vm-uid-1")
    );
    // Defaults added by startVMI: disk for the cloud-init volume, bridge pod interface.
    let vj = serde_json::to_value(v).unwrap();
    assert_eq!(
        vj["spec"]["domain"]["devices"]["disks"],
        json!([{"name": "root", "disk": {"bus": "virtio"}}, {"name": "cloudinit"}])
    );
    assert_eq!(
        vj["spec"]["domain"]["devices"]["interfaces"],
        json!([{"name": "default", "bridge": {}}])
    );
    assert_eq!(
        vj["spec"]["networks"],
        json!([{"name": "default", "pod": {}}])
    );
    assert_eq!(vj["metadata"]["labels"], json!({"app": "x"}));
    assert_eq!(
        events(&d),
        vec![(
            EventType::Normal,
            "SuccessfulCreate".into(),
            "Started the virtual machine by creating the new virtual machine instance testvmi"
                .into()
        )]
    );
    assert_eq!(printable(&d), "Starting");
    let ready = condition(&d, "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("VMINotExists"))
    );
    // status.runStrategy is written only once a VMI exists.
    assert_eq!(status(&d).run_strategy, None);
    assert_eq!(d.outcome, SyncOutcome::Done);
}

/// Mirrors "should update status to created and ready when vmi is running and running" (2577)
/// and "should detect that it has nothing to do beside updating the status" (2823).
#[test]
fn always_with_running_vmi_only_updates_status() {
    let mut i = vmi("Running");
    i.status.as_mut().unwrap().conditions =
        Some(serde_json::from_value(json!([{"type": "Ready", "status": "True"}])).unwrap());
    let d = decide(&snap_with(strategy("Always"), i));
    assert_eq!(kinds(&d), vec!["UpdateVmStatus"]);
    let st = status(&d);
    assert_eq!(st.created, Some(true));
    assert_eq!(st.ready, Some(true));
    assert_eq!(st.run_strategy.as_deref(), Some("Always"));
    assert_eq!(st.observed_generation, Some(1));
    assert_eq!(st.desired_generation, Some(1));
    assert_eq!(printable(&d), "Running");

    // Second sync with that status: nothing to write.
    let mut v = strategy("Always");
    v.status = d.status.clone();
    let mut i = vmi("Running");
    i.status.as_mut().unwrap().conditions =
        Some(serde_json::from_value(json!([{"type": "Ready", "status": "True"}])).unwrap());
    let d = decide(&snap_with(v, i));
    assert_eq!(kinds(&d), Vec::<&str>::new());
}

/// Mirrors "should track start failures when VMIs fail without hitting running state" (1477):
/// the failed VMI is deleted, the failure counted, and its finalizer removed.
#[test]
fn always_with_failed_vmi_deletes_it_and_counts_the_failure() {
    let mut s = snap_with(strategy("Always"), vmi("Failed"));
    s.backoff_jitter = 0.0;
    let d = decide(&s);
    assert_eq!(
        kinds(&d),
        vec![
            "ExpectVmiDeletions",
            "DeleteVmi",
            "Event",
            "UpdateVmStatus",
            "RemoveVmiFinalizer"
        ]
    );
    let VmAction::ExpectVmiDeletions { deletion_keys, .. } = &d.actions[0].action else {
        unreachable!()
    };
    assert_eq!(deletion_keys, &vec!["default/testvmi".to_string()]);
    assert_eq!(
        events(&d)[0].2,
        "Stopped the virtual machine by deleting the virtual machine instance vmi-uid"
    );
    let f = status(&d).start_failure.clone().unwrap();
    assert_eq!(f.consecutive_fail_count, 1);
    assert_eq!(f.last_failed_vmi_uid.as_deref(), Some("vmi-uid"));
    assert_eq!(
        f.retry_after_timestamp,
        Some(Time(now() + chrono::Duration::seconds(10)))
    );
    // The VMI is final (so not Stopping) and a start failure is recorded.
    assert_eq!(printable(&d), "CrashLoopBackOff");
    let VmAction::RemoveVmiFinalizer { patch, .. } = &d.actions[4].action else {
        unreachable!()
    };
    assert_eq!(
        patch,
        &json!([
            {"op": "test", "path": "/metadata/finalizers",
             "value": ["kubevirt.io/virtualMachineControllerFinalize"]},
            {"op": "replace", "path": "/metadata/finalizers", "value": []},
        ])
    );
}

/// Mirrors "should clear start failures when VMI hits running state" (1541).
#[test]
fn running_vmi_clears_start_failure() {
    let v = with_status(
        strategy("Always"),
        json!({"startFailure": {"consecutiveFailCount": 2, "lastFailedVMIUID": "old"}}),
    );
    let d = decide(&snap_with(v, ever_running(vmi("Running"))));
    assert_eq!(status(&d).start_failure, None);
}

/// Backoff honoured by Always: no VMI, retryAfter in the future → RequeueAfter, no start.
#[test]
fn always_waits_for_start_failure_backoff() {
    let retry = Time(now() + chrono::Duration::seconds(37));
    let v = with_status(
        strategy("Always"),
        json!({"startFailure": {"consecutiveFailCount": 2, "lastFailedVMIUID": "old",
                                "retryAfterTimestamp": retry}}),
    );
    let d = decide(&snap(v));
    assert_eq!(kinds(&d), vec!["RequeueAfter", "UpdateVmStatus"]);
    assert_eq!(d.actions[0].action, VmAction::RequeueAfter { seconds: 37 });
    assert_eq!(printable(&d), "CrashLoopBackOff");
    assert_eq!(d.outcome, SyncOutcome::Done);
}

/// Mirrors "when issuing a restart a VM with Always should get restarted" (7016): stop request
/// for the VMI → delete; then without VMI → start and trim the Stop; then with the new VMI →
/// trim the Start.
#[test]
fn always_restart_via_state_change_requests() {
    let requests = json!({"stateChangeRequests": [{"action": "Stop", "uid": "vmi-uid"},
                                                  {"action": "Start"}]});
    let v = with_status(strategy("Always"), requests.clone());
    let d = decide(&snap_with(v, vmi("Running")));
    assert_eq!(kinds(&d)[..3], ["ExpectVmiDeletions", "DeleteVmi", "Event"]);
    assert_eq!(printable(&d), "Stopping");
    assert_eq!(
        status(&d).state_change_requests.as_ref().unwrap().len(),
        2,
        "the Stop stays until the VMI is gone"
    );

    let v = with_status(strategy("Always"), requests);
    let d = decide(&snap(v));
    assert!(kinds(&d).contains(&"CreateVmi"));
    let reqs = status(&d).state_change_requests.clone().unwrap();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].action, "Start");

    let v = with_status(
        strategy("Always"),
        json!({"stateChangeRequests": [{"action": "Start"}]}),
    );
    let mut new_vmi = vmi("Scheduling");
    new_vmi.metadata.uid = Some("vmi-2".into());
    let d = decide(&snap_with(v, new_vmi));
    assert_eq!(status(&d).state_change_requests, None);
}

/// Mirrors "should not delete VirtualMachineInstance when vmi failed" for RerunOnFailure and the
/// RerunOnFailure part of "should clear existing start failures ..." (1579): a Failed VMI is
/// deleted and a Start request queued (status JSON patch).
#[test]
fn rerun_on_failure_restarts_failed_vmi() {
    let d = decide(&snap_with(strategy("RerunOnFailure"), vmi("Failed")));
    assert_eq!(
        kinds(&d),
        vec![
            "ExpectVmiDeletions",
            "DeleteVmi",
            "Event",
            "AddStartRequest",
            "UpdateVmStatus",
            "RemoveVmiFinalizer"
        ]
    );
    let VmAction::AddStartRequest { patch } = &d.actions[3].action else {
        unreachable!()
    };
    assert_eq!(
        patch,
        &json!([{"op": "add", "path": "/status/stateChangeRequests",
                 "value": [{"action": "Start"}]}])
    );
    let reqs = status(&d).state_change_requests.clone().unwrap();
    assert_eq!(reqs[0].action, "Start");
    assert!(status(&d).start_failure.is_some());
    // KubeVirt writes the status with the VM it read (the status patch only replaced the
    // status), so the resourceVersion is stale and the write conflicts.
    assert_eq!(status_write_rv(&d, 4), ResourceVersionFrom::Snapshot);
}

#[test]
fn rerun_on_failure_leaves_succeeded_vmi_stopped() {
    let d = decide(&snap_with(
        strategy("RerunOnFailure"),
        ever_running(vmi("Succeeded")),
    ));
    assert!(kinds(&d).contains(&"DeleteVmi"));
    assert!(!kinds(&d).contains(&"AddStartRequest"));

    // Next sync: no VMI, status.runStrategy already RerunOnFailure, no start request → stay off.
    let v = with_status(
        strategy("RerunOnFailure"),
        json!({"runStrategy": "RerunOnFailure"}),
    );
    let d = decide(&snap(v));
    assert!(!kinds(&d).contains(&"CreateVmi"));
    assert_eq!(printable(&d), "Stopped");
}

/// Mirrors "when starting a VM with RerunOnFailure the VM should get started" (6862) and "The VM
/// should get started when switching to RerunOnFailure from" Halted/Manual (6928).
#[test]
fn rerun_on_failure_starts_when_switched_to_or_requested() {
    for previous in [None, Some("Halted"), Some("Manual")] {
        let v = with_status(
            strategy("RerunOnFailure"),
            json!({ "runStrategy": previous }),
        );
        assert!(
            kinds(&decide(&snap(v))).contains(&"CreateVmi"),
            "{previous:?}"
        );
    }
    let v = with_status(
        strategy("RerunOnFailure"),
        json!({"runStrategy": "RerunOnFailure", "stateChangeRequests": [{"action": "Start"}]}),
    );
    assert!(kinds(&decide(&snap(v))).contains(&"CreateVmi"));
}

#[test]
fn manual_only_follows_requests() {
    // No VMI, no request: nothing.
    let d = decide(&snap(strategy("Manual")));
    assert_eq!(kinds(&d), vec!["UpdateVmStatus"]);
    assert_eq!(printable(&d), "Stopped");
    // Start request: start; the request stays until a VMI exists.
    let v = with_status(
        strategy("Manual"),
        json!({"stateChangeRequests": [{"action": "Start"}]}),
    );
    let d = decide(&snap(v));
    assert!(kinds(&d).contains(&"CreateVmi"));
    assert_eq!(status(&d).state_change_requests.as_ref().unwrap().len(), 1);
    // VMI failed, no request: left alone (no automatic restart, no delete).
    let d = decide(&snap_with(strategy("Manual"), vmi("Failed")));
    assert!(!kinds(&d).contains(&"DeleteVmi"));
    // Stop request for the VMI: delete.
    let v = with_status(
        strategy("Manual"),
        json!({"stateChangeRequests": [{"action": "Stop", "uid": "vmi-uid"}]}),
    );
    let d = decide(&snap_with(v, vmi("Running")));
    assert!(kinds(&d).contains(&"DeleteVmi"));
    // Stop request for another VMI: trimmed, nothing deleted.
    let v = with_status(
        strategy("Manual"),
        json!({"stateChangeRequests": [{"action": "Stop", "uid": "older"}]}),
    );
    let d = decide(&snap_with(v, vmi("Running")));
    assert!(!kinds(&d).contains(&"DeleteVmi"));
    assert_eq!(status(&d).state_change_requests, None);
}

/// Mirrors "when starting a VM with Manual and DVs are not ready the start request should not get
/// trimmed" (6878).
#[test]
fn manual_start_request_kept_while_data_volumes_are_not_ready() {
    let mut v = with_status(
        strategy("Manual"),
        json!({"stateChangeRequests": [{"action": "Start"}]}),
    );
    v.spec.data_volume_templates = Some(vec![json!({"metadata": {"name": "dv1"}, "spec": {}})]);
    let d = decide(&snap(v));
    assert!(kinds(&d).contains(&"CreateDataVolume"));
    assert!(!kinds(&d).contains(&"CreateVmi"));
    assert_eq!(status(&d).state_change_requests.as_ref().unwrap().len(), 1);
}

/// Mirrors "should delete VirtualMachineInstance when stopped" (2620).
#[test]
fn halted_deletes_the_vmi() {
    let d = decide(&snap_with(strategy("Halted"), vmi("Running")));
    assert_eq!(
        kinds(&d),
        vec!["ExpectVmiDeletions", "DeleteVmi", "Event", "UpdateVmStatus"]
    );
    assert_eq!(printable(&d), "Stopping");
    // Halted without VMI: nothing but the status.
    let d = decide(&snap(strategy("Halted")));
    assert_eq!(kinds(&d), vec!["UpdateVmStatus"]);
    assert_eq!(printable(&d), "Stopped");
}

/// Halted + start request (virtctl start --paused): rewrite the run strategy, report the
/// `Failure while starting VMI: <nil>` quirk; the status write uses the pre-update
/// resourceVersion (and conflicts, as in KubeVirt).
#[test]
fn halted_start_request_rewrites_the_run_strategy() {
    let requests =
        json!({"stateChangeRequests": [{"action": "Start", "data": {"paused": "true"}}]});
    let d = decide(&snap(with_status(strategy("Halted"), requests.clone())));
    assert_eq!(kinds(&d), vec!["UpdateVm", "UpdateVmStatus"]);
    let VmAction::UpdateVm { vm, purpose, .. } = &d.actions[0].action else {
        unreachable!()
    };
    assert_eq!(*purpose, VmUpdatePurpose::HaltedStartRequest);
    assert_eq!(vm.spec.run_strategy.as_deref(), Some("Always"));
    assert_eq!(
        d.sync_error,
        Some(SyncError::new(
            "FailedCreate",
            "Failure while starting VMI: <nil>"
        ))
    );
    let failure = condition(&d, "Failure").unwrap();
    assert_eq!(
        failure.message.as_deref(),
        Some("Failure while starting VMI: <nil>")
    );
    assert_eq!(status_write_rv(&d, 1), ResourceVersionFrom::Snapshot);
    assert_eq!(
        outcome_text(&d).as_deref(),
        Some("Failure while starting VMI: <nil>")
    );

    // With `running: false` the VM gets `running: true`.
    let v = with_status(make_vm(json!({"running": false})), requests.clone());
    let d = decide(&snap(v));
    let VmAction::UpdateVm { vm, .. } = &d.actions[0].action else {
        unreachable!()
    };
    assert_eq!(vm.spec.running, Some(true));
    assert_eq!(vm.spec.run_strategy, None);

    // Next sync, now Always: the VMI starts paused.
    let d = decide(&snap(with_status(strategy("Always"), requests)));
    assert_eq!(
        created_vmi(&d).spec.start_strategy.as_deref(),
        Some("Paused")
    );
}

/// Mirrors "should clear existing start failures when runStrategy is halted or manual" for Once:
/// a final VMI is never deleted nor restarted, but the start failure is tracked.
#[test]
fn once_starts_once_and_never_restarts() {
    let d = decide(&snap(strategy("Once")));
    assert!(kinds(&d).contains(&"CreateVmi"));
    let d = decide(&snap_with(strategy("Once"), vmi("Failed")));
    assert!(!kinds(&d).contains(&"DeleteVmi"));
    assert!(!kinds(&d).contains(&"CreateVmi"));
    assert_eq!(
        status(&d)
            .start_failure
            .as_ref()
            .map(|f| f.consecutive_fail_count),
        Some(1)
    );
    assert_eq!(printable(&d), "CrashLoopBackOff");
    let d = decide(&snap_with(strategy("Once"), ever_running(vmi("Succeeded"))));
    assert!(!kinds(&d).contains(&"DeleteVmi"));
    assert_eq!(printable(&d), "Stopped");
}

#[test]
fn wait_as_receiver_is_refused_cleanly() {
    let d = decide(&snap(strategy("WaitAsReceiver")));
    assert!(!kinds(&d).contains(&"CreateVmi"));
    let e = d.sync_error.clone().unwrap();
    assert_eq!(e.reason, "FailedCreate");
    assert!(e.message.contains("WaitAsReceiver"));
    assert_eq!(
        condition(&d, "Failure").unwrap().reason.as_deref(),
        Some("FailedCreate")
    );
    // A non-receiver VMI is KubeVirt's own error.
    let d = decide(&snap_with(strategy("WaitAsReceiver"), vmi("Running")));
    assert_eq!(
        d.sync_error.unwrap().message,
        "Found non receiver VMI while VM is receiver"
    );
}

#[test]
fn unknown_run_strategy_is_a_sync_error() {
    let d = decide(&snap(strategy("Sometimes")));
    assert_eq!(
        d.sync_error,
        Some(SyncError::new(
            "FailedCreate",
            "unknown runstrategy: Sometimes"
        ))
    );
    assert_eq!(
        condition(&d, "Failure").unwrap().message.as_deref(),
        Some("unknown runstrategy: Sometimes")
    );
}

/// Both `running` and `runStrategy`: KubeVirt's sync returns the SyncError *and* the error, and
/// `execute` returns before `updateStatus` (vm.go:442-445): no Failure condition is written, the
/// key is requeued with rate limiting.
#[test]
fn running_and_run_strategy_together_stop_the_sync() {
    let d = decide(&snap(make_vm(
        json!({"running": true, "runStrategy": "Always"}),
    )));
    assert_eq!(kinds(&d), Vec::<&str>::new());
    assert_eq!(
        d.sync_error,
        Some(SyncError::new(
            "FailedCreate",
            "Error fetching RunStrategy: running and runstrategy are mutually exclusive"
        ))
    );
    assert_eq!(d.status, None);
    assert_eq!(
        outcome_text(&d).as_deref(),
        Some("running and runstrategy are mutually exclusive")
    );
}

// Instancetypes and preferences (pkg/instancetype/controller/vm/controller_test.go,
// revision/store_test.go and vm_test.go's instancetype contexts); values worked out here.

fn cluster_object(kind: &str, name: &str, generation: i64, spec: Value) -> Arc<Value> {
    Arc::new(json!({
        "apiVersion": "instancetype.kubevirt.io/v1beta1", "kind": kind,
        "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": generation,
                     "resourceVersion": "5"},
        "spec": spec
    }))
}

fn itype_snap(vm: VirtualMachine, cpus: u32) -> VmSnapshot {
    use crate::instancetype::Resource;
    let mut s = snap(vm);
    s.instancetypes.0.insert(
        (Resource::ClusterInstancetype, "cx1.medium".into()),
        cluster_object(
            "VirtualMachineClusterInstancetype",
            "cx1.medium",
            1,
            json!({"cpu": {"guest": cpus}, "memory": {"guest": "4096Mi"}}),
        ),
    );
    s.instancetypes.0.insert(
        (Resource::ClusterPreference, "linux".into()),
        cluster_object(
            "VirtualMachineClusterPreference",
            "linux",
            2,
            json!({
                "cpu": {"preferredCPUTopology": "cores"},
                "devices": {"preferredDiskBus": "virtio", "preferredInterfaceModel": "virtio",
                            "preferredAutoattachInputDevice": true, "preferredInputBus": "virtio",
                            "preferredInputType": "tablet"},
                "features": {"preferredSmm": {}},
                "firmware": {"preferredUseEfi": true},
                "machine": {"preferredMachineType": "q35"},
                "preferredTerminationGracePeriodSeconds": 180
            }),
        ),
    );
    s
}

fn itype_vm() -> VirtualMachine {
    let mut v = strategy("Always");
    v.spec.instancetype = Some(json!({"name": "cx1.medium"}).into());
    v.spec.preference =
        Some(json!({"name": "linux", "kind": "VirtualMachineClusterPreference"}).into());
    let spec = v.spec.template.as_mut().unwrap().spec.as_mut().unwrap();
    spec.domain.memory = None;
    v
}

/// A VM with a cluster instancetype and preference starts: both are stashed in
/// ControllerRevisions recorded in the status refs, the start revision pins them, and the VMI is
/// the template with both applied.
#[test]
fn instancetype_and_preference_are_stashed_and_expanded() {
    let d = decide(&itype_snap(itype_vm(), 2));
    assert_eq!(
        kinds(&d),
        [
            "CreateInstancetypeRevision",
            "CreateInstancetypeRevision",
            "PatchVmInstancetypeRefs",
            "CreateControllerRevision",
            "ExpectVmiCreations",
            "CreateVmi",
            "Event",
            "UpdateVmStatus",
        ]
    );
    let it_rev = "testvmi-cx1.medium-v1beta1-cx1.medium-uid-1";
    let pref_rev = "testvmi-linux-v1beta1-linux-uid-2";
    let VmAction::PatchVmInstancetypeRefs { patch } = &d.actions[2].action else {
        panic!()
    };
    assert_eq!(
        patch,
        &json!([
        {"op": "add", "path": "/status/instancetypeRef",
         "value": {"name": "cx1.medium", "controllerRevisionRef": {"name": it_rev}}},
        {"op": "add", "path": "/status/preferenceRef",
         "value": {"name": "linux", "kind": "VirtualMachineClusterPreference",
                   "controllerRevisionRef": {"name": pref_rev}}}])
    );
    assert_eq!(status_write_rv(&d, 7), ResourceVersionFrom::Action(2));
    let st = serde_json::to_value(status(&d)).unwrap();
    assert_eq!(
        st["instancetypeRef"]["controllerRevisionRef"]["name"],
        it_rev
    );
    assert_eq!(
        st["preferenceRef"]["controllerRevisionRef"]["name"],
        pref_rev
    );
    let VmAction::CreateControllerRevision { revision } = &d.actions[3].action else {
        panic!()
    };
    let data = &revision.data.as_ref().unwrap().0;
    assert_eq!(data["spec"]["instancetype"]["revisionName"], it_rev);
    assert_eq!(data["spec"]["preference"]["revisionName"], pref_rev);

    let vmi = serde_json::to_value(created_vmi(&d)).unwrap();
    let ann = &vmi["metadata"]["annotations"];
    assert_eq!(ann["kubevirt.io/cluster-instancetype-name"], "cx1.medium");
    assert_eq!(ann["kubevirt.io/cluster-preference-name"], "linux");
    let spec = &vmi["spec"];
    assert_eq!(
        spec["domain"]["cpu"],
        json!({"sockets": 1, "cores": 2, "threads": 1})
    );
    assert_eq!(spec["domain"]["memory"], json!({"guest": "4Gi"}));
    assert_eq!(spec["domain"]["features"], json!({"acpi": {}, "smm": {}}));
    assert_eq!(
        spec["domain"]["firmware"],
        json!({"uuid": FW_UUID, "bootloader": {"efi": {}}})
    );
    assert_eq!(spec["domain"]["machine"], json!({"type": "q35"}));
    assert_eq!(spec["terminationGracePeriodSeconds"], 180);
    let dev = &spec["domain"]["devices"];
    assert_eq!(dev["autoattachInputDevice"], true);
    assert_eq!(
        dev["inputs"],
        json!([{"name": "default-0", "bus": "virtio", "type": "tablet"}])
    );
    assert_eq!(
        dev["disks"],
        json!([
        {"name": "root", "disk": {"bus": "virtio"}},
        {"name": "cloudinit", "disk": {"bus": "virtio"}}])
    );
    assert_eq!(
        dev["interfaces"],
        json!([{"name": "default", "bridge": {}, "model": "virtio"}])
    );
}

/// A failed status patch (a VM without any status yet: the JSON patch's `add` has no parent)
/// leaves the new refs in the working VM, which updateStatus then writes with the Failure
/// condition (store.go:93-98, patch.go:40-47): the next sync finds them and stashes nothing again.
#[test]
fn failed_ref_patch_still_writes_the_refs_through_update_status() {
    let s = itype_snap(itype_vm(), 2);
    let ok = decide(&s);
    let i = index_of(&ok, "PatchVmInstancetypeRefs");
    let d = fail_at(&s, i, "doc is missing path");
    assert_eq!(kinds(&d)[i + 1..], ["Event", "UpdateVmStatus"]);
    let e = d.sync_error.as_ref().unwrap();
    assert_eq!(
        e.message,
        "error encountered while storing instancetype.kubevirt.io controllerRevisions: doc is \
         missing path"
    );
    let st = serde_json::to_value(status(&d)).unwrap();
    assert_eq!(
        st["instancetypeRef"]["controllerRevisionRef"]["name"],
        "testvmi-cx1.medium-v1beta1-cx1.medium-uid-1"
    );
    assert_eq!(
        st["preferenceRef"]["controllerRevisionRef"]["name"],
        "testvmi-linux-v1beta1-linux-uid-2"
    );
}

/// upgrade/handler.go:52-161: a stash without the v1beta1 version label is stashed again under
/// KubeVirt's current name, the status ref moved with test + replace, the old one deleted.
#[test]
fn unlabelled_stash_is_upgraded() {
    let first = decide(&itype_snap(itype_vm(), 2));
    let mut old = first
        .actions
        .iter()
        .find_map(|a| match &a.action {
            VmAction::CreateInstancetypeRevision { revision } => Some((**revision).clone()),
            _ => None,
        })
        .unwrap();
    let new_name = old.metadata.name.clone().unwrap();
    old.metadata.name = Some("old-stash".into());
    old.metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("instancetype.kubevirt.io/object-version");
    let vm = with_status(
        {
            let mut v = itype_vm();
            v.spec.preference = None;
            v
        },
        json!({"instancetypeRef": {"name": "cx1.medium",
                                   "controllerRevisionRef": {"name": "old-stash"}}}),
    );
    let mut s = itype_snap(vm, 2);
    s.revisions = vec![Arc::new(old)];
    let d = decide(&s);
    assert_eq!(
        &kinds(&d)[..3],
        [
            "CreateControllerRevision",
            "PatchVmInstancetypeRefs",
            "DeleteControllerRevision"
        ]
    );
    let VmAction::PatchVmInstancetypeRefs { patch } = &d.actions[1].action else {
        panic!()
    };
    let path = "/status/instancetypeRef/controllerRevisionRef/name";
    assert_eq!(
        patch,
        &json!([{"op": "test", "path": path, "value": "old-stash"},
                {"op": "replace", "path": path, "value": new_name}])
    );
    let st = serde_json::to_value(status(&d)).unwrap();
    assert_eq!(
        st["instancetypeRef"]["controllerRevisionRef"]["name"],
        new_name
    );
    // The VMI is built from the upgraded stash: 2 vCPUs as sockets (no preference).
    assert_eq!(
        serde_json::to_value(created_vmi(&d)).unwrap()["spec"]["domain"]["cpu"],
        json!({"sockets": 2, "cores": 1, "threads": 1})
    );
}

/// controller_test.go "should fail if the VirtualMachine has conflicts": a template that sets
/// what the instancetype sets gets KubeVirt's error; the status ref KubeVirt allocated in memory
/// is written empty.
#[test]
fn instancetype_conflict_is_a_failure() {
    let mut v = itype_vm();
    let spec = v.spec.template.as_mut().unwrap().spec.as_mut().unwrap();
    spec.domain.memory = Some(serde_json::from_value(json!({"guest": "1Gi"})).unwrap());
    spec.domain.cpu = Some(serde_json::from_value(json!({"sockets": 2})).unwrap());
    let d = decide(&itype_snap(v, 2));
    assert!(!kinds(&d).contains(&"CreateVmi"));
    let msg = "error encountered while storing instancetype.kubevirt.io controllerRevisions: VM \
               field(s) spec.template.spec.domain.cpu.sockets, \
               spec.template.spec.domain.memory.guest conflicts with selected instance type";
    let e = d.sync_error.as_ref().unwrap();
    assert_eq!(
        (e.reason.as_str(), e.message.as_str()),
        ("FailedCreate", msg)
    );
    assert!(d.actions.iter().any(|a| matches!(&a.action,
        VmAction::Event { reason, message, .. } if reason == "FailedCreate" && message == msg)));
    assert_eq!(
        condition(&d, "Failure").unwrap().message.as_deref(),
        Some(msg)
    );
    let st = serde_json::to_value(status(&d)).unwrap();
    assert_eq!(st["instancetypeRef"], json!({}));
}

/// controller_test.go "should fail to find instancetype": reason FailedFindInstancetype, the Go
/// client's NotFound text.
#[test]
fn missing_instancetype_is_reported() {
    let mut s = itype_snap(itype_vm(), 2);
    s.instancetypes.0.clear();
    let d = decide(&s);
    let e = d.sync_error.as_ref().unwrap();
    assert_eq!(e.reason, "FailedFindInstancetype");
    assert_eq!(
        e.message,
        "virtualmachineclusterinstancetypes.instancetype.kubevirt.io \"cx1.medium\" not found"
    );
    assert!(!kinds(&d).contains(&"CreateInstancetypeRevision"));
}

/// A VM whose refs are recorded changes nothing, and reads the stashed spec even after the
/// instancetype object changed (vm_test.go "should use the stashed ControllerRevision").
#[test]
fn stashed_revision_wins_over_a_changed_instancetype() {
    let first = decide(&itype_snap(itype_vm(), 2));
    let stashed: Vec<Arc<ControllerRevision>> = first
        .actions
        .iter()
        .filter_map(|a| match &a.action {
            VmAction::CreateInstancetypeRevision { revision } => {
                Some(Arc::new((**revision).clone()))
            }
            _ => None,
        })
        .collect();
    let vm = with_status(itype_vm(), serde_json::to_value(status(&first)).unwrap());
    let mut s = itype_snap(vm, 8); // the instancetype now says 8 vCPUs
    s.revisions = stashed;
    let d = decide(&s);
    assert!(!kinds(&d).contains(&"CreateInstancetypeRevision"));
    assert!(!kinds(&d).contains(&"PatchVmInstancetypeRefs"));
    let vmi = serde_json::to_value(created_vmi(&d)).unwrap();
    assert_eq!(vmi["spec"]["domain"]["cpu"]["cores"], 2);
}

/// vm_test.go "should appear when the instancetype reference changes": the start revision pins
/// the old stash; the VM now names another, whose expansion differs in a field that needs a
/// restart (cores under a cores topology).
#[test]
fn changed_instancetype_reference_requires_a_restart() {
    let first = decide(&itype_snap(itype_vm(), 2));
    let mut revisions: Vec<Arc<ControllerRevision>> = first
        .actions
        .iter()
        .filter_map(|a| match &a.action {
            VmAction::CreateInstancetypeRevision { revision }
            | VmAction::CreateControllerRevision { revision } => {
                Some(Arc::new((**revision).clone()))
            }
            _ => None,
        })
        .collect();
    let old_status = serde_json::to_value(status(&first)).unwrap();
    let running = || {
        let mut v = vmi("Running");
        v.spec = created_vmi(&first).spec.clone();
        v
    };
    // Unchanged: no RestartRequired.
    let unchanged = with_status(itype_vm(), old_status.clone());
    let mut s = itype_snap(unchanged, 2);
    s.revisions = revisions.clone();
    s.vmi = Some(running().into());
    assert!(condition(&decide(&s), "RestartRequired").is_none());

    // The VM now names cx1.large (4 vCPUs): stashed in this sync, then compared.
    let mut changed = itype_vm();
    changed.spec.instancetype = Some(json!({"name": "cx1.large"}).into());
    changed.metadata.generation = Some(2);
    let changed = with_status(changed, old_status);
    let mut s = itype_snap(changed, 2);
    s.instancetypes.0.insert(
        (
            crate::instancetype::Resource::ClusterInstancetype,
            "cx1.large".into(),
        ),
        cluster_object(
            "VirtualMachineClusterInstancetype",
            "cx1.large",
            1,
            json!({"cpu": {"guest": 4}, "memory": {"guest": "4Gi"}}),
        ),
    );
    revisions.retain(|r| !r.metadata.name.as_deref().unwrap().contains("large"));
    s.revisions = revisions;
    s.vmi = Some(running().into());
    let d = decide(&s);
    // The template itself is unchanged, so the VMI's generation annotation follows the VM
    // first (vm.go:1438-1475 compares templates only); then the new stash.
    assert_eq!(
        &kinds(&d)[..3],
        [
            "PatchVmiGenerationAnnotation",
            "CreateInstancetypeRevision",
            "PatchVmInstancetypeRefs"
        ]
    );
    let st = serde_json::to_value(status(&d)).unwrap();
    assert_eq!(
        st["instancetypeRef"],
        json!({"name": "cx1.large",
        "controllerRevisionRef": {"name": "testvmi-cx1.large-v1beta1-cx1.large-uid-1"}})
    );
    let rr = condition(&d, "RestartRequired").expect("RestartRequired");
    assert_eq!(
        rr.message.as_deref(),
        Some("a non-live-updatable field was changed in the template spec")
    );
}

// ------------------------------------------------------------------------------------------
// API failures
// ------------------------------------------------------------------------------------------

/// Mirrors "should add a fail condition if start up fails" (2834).
#[test]
fn failed_vmi_create_is_undone_and_reported() {
    let s = snap(strategy("Always"));
    let ok = decide(&s);
    let i = index_of(&ok, "CreateVmi");
    let d = fail_at(&s, i, "boom");
    assert_eq!(d.actions[..=i], ok.actions[..=i]);
    assert_eq!(
        kinds(&d)[i + 1..],
        ["VmiCreationObserved", "Event", "UpdateVmStatus"]
    );
    assert_eq!(
        events(&d),
        vec![(
            EventType::Warning,
            "FailedCreate".into(),
            "Error creating virtual machine instance: boom".into()
        )]
    );
    assert_eq!(
        d.sync_error,
        Some(SyncError::new(
            "FailedCreate",
            "Failure while starting VMI: boom"
        ))
    );
    let f = condition(&d, "Failure").unwrap();
    assert_eq!(f.status, "True");
    assert_eq!(f.reason.as_deref(), Some("FailedCreate"));
    // The creation expectation was lowered: no VMI coming → Stopped.
    assert_eq!(printable(&d), "Stopped");
    assert_eq!(
        outcome_text(&d).as_deref(),
        Some("Failure while starting VMI: boom")
    );
}

/// Mirrors "should add a fail condition if deletion fails" (2864).
#[test]
fn failed_vmi_delete_is_undone_and_reported() {
    let s = snap_with(strategy("Halted"), vmi("Running"));
    let i = index_of(&decide(&s), "DeleteVmi");
    let d = fail_at(&s, i, "nope");
    assert_eq!(
        kinds(&d),
        vec![
            "ExpectVmiDeletions",
            "DeleteVmi",
            "VmiDeletionObserved",
            "Event",
            "UpdateVmStatus"
        ]
    );
    assert_eq!(
        events(&d)[0].2,
        "Error deleting virtual machine instance testvmi: nope"
    );
    assert_eq!(
        condition(&d, "Failure").unwrap().message.as_deref(),
        Some("Failure attempting to delete VMI: nope")
    );
    assert_eq!(printable(&d), "Running");
}

/// Replaying a failure never changes the actions already executed, whatever action fails.
#[test]
fn failure_replay_keeps_the_executed_prefix() {
    let mut dv_vm = strategy("Always");
    dv_vm.spec.data_volume_templates = Some(vec![json!({"metadata": {"name": "dv1"}, "spec": {}})]);
    let mut no_fw = strategy("Always");
    crate::controller::vm::template_spec_mut(&mut no_fw)
        .domain
        .firmware = None;
    let scenarios = vec![
        snap(strategy("Always")),
        snap_with(strategy("Always"), vmi("Failed")),
        snap_with(strategy("RerunOnFailure"), vmi("Failed")),
        snap(dv_vm),
        snap_with(no_fw, vmi("Running")),
        snap(with_status(
            strategy("Halted"),
            json!({"stateChangeRequests": [{"action": "Start"}]}),
        )),
    ];
    for s in scenarios {
        let ok = decide(&s);
        for (i, a) in ok.actions.iter().enumerate() {
            if !a.action.is_api_call() {
                continue;
            }
            let d = fail_at(&s, i, "injected");
            assert_eq!(
                d.actions[..=i],
                ok.actions[..=i],
                "failing {}",
                a.action.kind()
            );
            assert!(
                d.outcome != SyncOutcome::Done || !a.action.is_api_call(),
                "a failed {} must not end the sync as Done",
                a.action.kind()
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// revisions, generations, RestartRequired, synchronizers
// ------------------------------------------------------------------------------------------

/// Mirrors "should delete older vmRevision and create VMI with new one" (1913).
#[test]
fn stale_start_revisions_are_deleted() {
    let mut v = strategy("Always");
    v.metadata.generation = Some(3);
    let mut g1 = v.clone();
    g1.metadata.generation = Some(1);
    let mut g2 = v.clone();
    g2.metadata.generation = Some(2);
    let mut s = snap(v.clone());
    s.revisions = vec![Arc::new(start_revision(&g1)), Arc::new(start_revision(&g2))];
    let d = decide(&s);
    assert_eq!(
        kinds(&d)[..3],
        [
            "DeleteControllerRevision",
            "DeleteControllerRevision",
            "CreateControllerRevision"
        ]
    );
    let VmAction::CreateControllerRevision { revision } = &d.actions[2].action else {
        unreachable!()
    };
    assert_eq!(
        revision.metadata.name.as_deref(),
        Some("revision-start-vm-vm-uid-3")
    );
    // The current one exists: only the stale one goes, no create.
    s.revisions = vec![Arc::new(start_revision(&g1)), Arc::new(start_revision(&v))];
    let d = decide(&s);
    assert_eq!(
        kinds(&d)[..2],
        ["DeleteControllerRevision", "ExpectVmiCreations"]
    );
    assert_eq!(
        d.actions[0].action,
        VmAction::DeleteControllerRevision {
            name: "revision-start-vm-vm-uid-1".into()
        }
    );
}

/// Mirrors "should conditionally bump the generation annotation on the vmi" (2059): only the run
/// strategy changed (generation 2, same template) → the VMI annotation moves to 2.
#[test]
fn generation_annotation_bumped_when_template_unchanged() {
    let g1 = strategy("Always");
    let mut v = strategy("Manual");
    v.metadata.generation = Some(2);
    let mut s = snap_with(v.clone(), vmi("Running"));
    s.revisions = vec![Arc::new(start_revision(&g1))];
    let d = decide(&s);
    assert_eq!(kinds(&d)[0], "PatchVmiGenerationAnnotation");
    assert_eq!(status(&d).observed_generation, Some(2));
    assert_eq!(status(&d).desired_generation, Some(2));

    // Template changed: no bump, observed stays 1, and RestartRequired appears.
    let mut changed = v;
    crate::controller::vm::template_spec_mut(&mut changed)
        .volumes
        .as_mut()
        .unwrap()[0]
        .container_disk
        .as_mut()
        .unwrap()
        .image = Some("other".into());
    let mut s = snap_with(changed, vmi("Running"));
    s.revisions = vec![Arc::new(start_revision(&g1))];
    let d = decide(&s);
    assert!(!kinds(&d).contains(&"PatchVmiGenerationAnnotation"));
    assert_eq!(status(&d).observed_generation, Some(1));
    let rr = condition(&d, "RestartRequired").unwrap();
    assert_eq!(rr.status, "True");
    assert_eq!(
        rr.message.as_deref(),
        Some("a non-live-updatable field was changed in the template spec")
    );
}

/// Mirrors "should sync the generation info" (2261): a VMI without the annotation gets it
/// back-filled from its revision name.
#[test]
fn observed_generation_back_filled_from_revision() {
    let mut i = vmi("Running");
    i.metadata.annotations = None;
    let mut s = snap_with(strategy("Always"), i);
    s.revisions = vec![Arc::new(start_revision(&strategy("Always")))];
    let d = decide(&s);
    // conditionallyBump patches first (same template), so updateStatus needs no back-fill.
    assert_eq!(
        kinds(&d)
            .iter()
            .filter(|k| **k == "PatchVmiGenerationAnnotation")
            .count(),
        1
    );
    assert_eq!(status(&d).observed_generation, Some(1));
}

/// RestartRequired is cleared when the template matches the start revision again (6827), and
/// live-updatable changes do not raise it under LiveUpdate: the tolerations are patched into
/// the running VMI instead (6492, 5917).
#[test]
fn restart_required_cleared_and_live_updates_applied() {
    let v = with_status(
        strategy("Always"),
        json!({"conditions": [{"type": "RestartRequired", "status": "True"}]}),
    );
    let mut s = snap_with(v, vmi("Running"));
    s.revisions = vec![Arc::new(start_revision(&strategy("Always")))];
    let d = decide(&s);
    assert!(condition(&d, "RestartRequired").is_none());

    let mut changed = strategy("Always");
    crate::controller::vm::template_spec_mut(&mut changed).tolerations =
        Some(json!([{"key": "k", "operator": "Exists"}]).into());
    let mut s = snap_with(changed.clone(), vmi("Running"));
    s.revisions = vec![Arc::new(start_revision(&strategy("Always")))];
    let d = decide(&s);
    assert!(condition(&d, "RestartRequired").is_none());
    assert_eq!(d.sync_error, None);
    let patch = live_patch(&d);
    assert_eq!(patch[0]["op"], "add");
    assert_eq!(patch[0]["path"], "/spec/tolerations");
    // With the Stage rollout strategy the same change needs a restart instead.
    s.config.rollout_strategy_live_update = false;
    let d = decide(&s);
    assert!(condition(&d, "RestartRequired").is_some());
    assert!(!kinds(&d).contains(&"PatchVmiSpec"));
    assert_eq!(d.sync_error, None);
}

/// The one `PatchVmiSpec` of a decision.
fn live_patch(d: &VmDecision) -> &Value {
    let mut patches = d.actions.iter().filter_map(|a| match &a.action {
        VmAction::PatchVmiSpec { name, patch } => {
            assert_eq!(name, "testvmi");
            Some(patch)
        }
        _ => None,
    });
    let p = patches.next().expect("a PatchVmiSpec action");
    assert!(patches.next().is_none(), "one PatchVmiSpec");
    p
}

/// A running VM started with 1 socket (maxSockets 2) and 1Gi (maxGuest 2Gi), whose template
/// asks for `sockets` and `guest`.
fn hotplug_snap(sockets: u32, guest: &str) -> VmSnapshot {
    let started = |sockets: u32, guest: &str| {
        let mut v = strategy("Always");
        let spec = crate::controller::vm::template_spec_mut(&mut v);
        spec.architecture = Some("amd64".into());
        spec.domain.cpu =
            Some(serde_json::from_value(json!({"sockets": sockets, "maxSockets": 2})).unwrap());
        spec.domain.memory =
            Some(serde_json::from_value(json!({"guest": guest, "maxGuest": "2Gi"})).unwrap());
        v
    };
    let mut running = vmi("Running");
    running.spec = started(1, "1Gi").template_spec().unwrap().clone();
    running.status = Some(
        serde_json::from_value(json!({
            "phase": "Running", "virtualMachineRevisionName": "revision-start-vm-vm-uid-1",
            "conditions": [{"type": "LiveMigratable", "status": "True"}],
            "memory": {"guestAtBoot": "1Gi", "guestCurrent": "1Gi", "guestRequested": "1Gi"},
            "currentCPUTopology": {"sockets": 1}
        }))
        .unwrap(),
    );
    let mut s = snap_with(started(sockets, guest), running);
    s.revisions = vec![Arc::new(start_revision(&started(1, "1Gi")))];
    s
}

/// vm_test.go:5394/5569: a socket and memory within the maxima are patched into the VMI, no
/// RestartRequired; above `maxSockets` RestartRequired with KubeVirt's message and no patch;
/// with the Stage strategy the template comparison asks for a restart (6492).
#[test]
fn cpu_and_memory_hotplug_within_and_beyond_the_maxima() {
    let d = decide(&hotplug_snap(2, "1Gi"));
    assert_eq!(d.sync_error, None);
    assert!(condition(&d, "RestartRequired").is_none());
    assert_eq!(live_patch(&d)[1]["path"], "/spec/domain/cpu/sockets");
    assert_eq!(live_patch(&d)[1]["value"], 2);

    let d = decide(&hotplug_snap(1, "2Gi"));
    assert_eq!(d.sync_error, None);
    assert_eq!(live_patch(&d)[1]["path"], "/spec/domain/memory/guest");
    assert_eq!(live_patch(&d)[1]["value"], "2Gi");

    let d = decide(&hotplug_snap(3, "1Gi"));
    assert!(!kinds(&d).contains(&"PatchVmiSpec"));
    let c = condition(&d, "RestartRequired").expect("RestartRequired");
    assert_eq!(
        c.message.as_deref(),
        Some("CPU sockets updated in template spec to a value higher than what's available")
    );

    let mut s = hotplug_snap(2, "2Gi");
    s.config.rollout_strategy_live_update = false;
    let d = decide(&s);
    assert!(!kinds(&d).contains(&"PatchVmiSpec"));
    assert!(condition(&d, "RestartRequired").is_some());
}

/// A failed VMI patch is the handler's sync error (vm.go:3352-3354), and a hotplug in progress
/// refuses the next one (vm.go:640-643).
#[test]
fn live_update_failures_are_sync_errors() {
    let s = hotplug_snap(2, "1Gi");
    let i = index_of(&decide(&s), "PatchVmiSpec");
    let d = fail_at(&s, i, "conflict");
    let e = d.sync_error.expect("sync error");
    assert_eq!(e.reason, "HotPlugCPUError");
    assert!(
        e.message
            .starts_with("Error encountered while handling CPU change request: ")
    );

    let mut s = hotplug_snap(2, "1Gi");
    let mut v = (*s.vmi.take().unwrap()).clone();
    v.status.as_mut().unwrap().conditions =
        Some(serde_json::from_value(json!([{"type": "HotVCPUChange", "status": "True"}])).unwrap());
    s.vmi = Some(Arc::new(v));
    let e = decide(&s).sync_error.expect("sync error");
    assert_eq!(
        e.message,
        "Error encountered while handling CPU change request: another CPU hotplug is in progress"
    );
}

/// The firmware synchronizer persists the legacy UUID, then the VM is updated with the patched
/// object (firmware.go:48-81, vm.go:3379-3387).
#[test]
fn firmware_uuid_is_persisted() {
    let mut v = strategy("Always");
    crate::controller::vm::template_spec_mut(&mut v)
        .domain
        .firmware = None;
    let d = decide(&snap_with(v, vmi("Running")));
    assert_eq!(
        kinds(&d),
        vec!["PatchVmFirmware", "UpdateVm", "UpdateVmStatus"]
    );
    let VmAction::UpdateVm {
        vm,
        purpose,
        resource_version_from,
    } = &d.actions[1].action
    else {
        unreachable!()
    };
    assert_eq!(*purpose, VmUpdatePurpose::SyncedSpec);
    assert_eq!(*resource_version_from, ResourceVersionFrom::Action(0));
    let fw = vm
        .spec
        .template
        .as_ref()
        .unwrap()
        .spec
        .as_ref()
        .unwrap()
        .domain
        .firmware
        .clone();
    assert_eq!(fw.unwrap().uuid.as_deref(), Some(FW_UUID));
    assert_eq!(status_write_rv(&d, 2), ResourceVersionFrom::Action(1));
    // vm.go copies the patched VM's ObjectMeta (the server bumped metadata.generation from 1 to
    // 2 for the spec change) and updateStatus reports it: one status write, not a second one
    // later just for desiredGeneration.
    assert_eq!(status(&d).desired_generation, Some(2));
    assert_eq!(status(&d).observed_generation, Some(1));
    // Without a VMI the start stops the sync at the expectations re-check: no firmware patch yet,
    // but the new VMI gets the same UUID.
    let mut v = strategy("Always");
    crate::controller::vm::template_spec_mut(&mut v)
        .domain
        .firmware = None;
    let d = decide(&snap(v));
    assert!(!kinds(&d).contains(&"PatchVmFirmware"));
    assert_eq!(
        created_vmi(&d)
            .spec
            .domain
            .firmware
            .as_ref()
            .unwrap()
            .uuid
            .as_deref(),
        Some(FW_UUID)
    );
}

/// Mirrors "should sync VMI conditions" (2928) and "should add paused condition" (3058).
#[test]
fn vmi_conditions_are_mirrored() {
    let mut i = vmi("Running");
    i.status.as_mut().unwrap().conditions = Some(
        serde_json::from_value(json!([
            {"type": "Ready", "status": "True", "lastTransitionTime": "2023-11-14T00:00:00Z"},
            {"type": "Paused", "status": "True", "reason": "PausedByUser"},
            {"type": "AgentConnected", "status": "True"}
        ]))
        .unwrap(),
    );
    let v = with_status(
        strategy("Always"),
        json!({"conditions": [{"type": "LiveMigratable", "status": "True"}]}),
    );
    let d = decide(&snap_with(v, i));
    let types: Vec<_> = status(&d)
        .conditions
        .as_ref()
        .unwrap()
        .iter()
        .map(|c| c.type_.as_str())
        .collect();
    assert_eq!(types, vec!["Ready", "Paused", "AgentConnected"]);
    let ready = condition(&d, "Ready").unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(
        ready.last_transition_time.unwrap().to_rfc3339(),
        "2023-11-14T00:00:00Z"
    );
    assert_eq!(printable(&d), "Paused");
}

/// Dynamic annotations (descheduler) are copied to the running VMI (3237).
#[test]
fn dynamic_annotations_are_patched_onto_the_vmi() {
    let mut v = strategy("Always");
    v.spec
        .template
        .as_mut()
        .unwrap()
        .metadata
        .as_mut()
        .unwrap()
        .maps
        .annotations = Some(
        [(
            "descheduler.alpha.kubernetes.io/evict".to_string(),
            "true".to_string(),
        )]
        .into_iter()
        .collect(),
    );
    let d = decide(&snap_with(v, vmi("Running")));
    assert_eq!(kinds(&d)[0], "PatchVmiMetadata");
}

// ------------------------------------------------------------------------------------------
// DataVolumes
// ------------------------------------------------------------------------------------------

fn dv(name: &str, phase: &str) -> DataVolume {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default",
                     "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
                                          "name": "testvmi", "uid": "vm-uid", "controller": true}]},
        "status": {"phase": phase}
    }))
    .unwrap()
}

fn dv_vm() -> VirtualMachine {
    let mut v = strategy("Always");
    v.spec.data_volume_templates = Some(vec![json!({
        "metadata": {"name": "dv1"},
        "spec": {"source": {"http": {"url": "http://example/disk.img"}}, "storage": {}}
    })]);
    crate::controller::vm::template_spec_mut(&mut v)
        .volumes
        .as_mut()
        .unwrap()
        .push(
            serde_json::from_value(json!({"name": "data", "dataVolume": {"name": "dv1"}})).unwrap(),
        );
    v
}

/// Mirrors "should create missing DataVolume for VirtualMachineInstance" (370) and "should start
/// VMI once DataVolumes are complete" (1135).
#[test]
fn data_volumes_are_created_then_awaited() {
    let d = decide(&snap(dv_vm()));
    assert_eq!(
        kinds(&d),
        vec![
            "ExpectDataVolumeCreations",
            "CreateDataVolume",
            "Event",
            "UpdateVmStatus"
        ]
    );
    let VmAction::CreateDataVolume { data_volume } = &d.actions[1].action else {
        unreachable!()
    };
    assert_eq!(
        data_volume.metadata.labels.as_ref().unwrap()["kubevirt.io/created-by"],
        "vm-uid"
    );
    assert_eq!(events(&d)[0].1, "SuccessfulDataVolumeCreate");

    // Importing: wait, Provisioning.
    let mut s = snap(dv_vm());
    s.data_volumes = vec![dv("dv1", "ImportInProgress")];
    let d = decide(&s);
    assert_eq!(kinds(&d), vec!["UpdateVmStatus"]);
    assert_eq!(printable(&d), "Provisioning");

    // Done: start.
    for phase in ["Succeeded", "WaitForFirstConsumer", "PendingPopulation"] {
        s.data_volumes = vec![dv("dv1", phase)];
        assert!(kinds(&decide(&s)).contains(&"CreateVmi"), "{phase}");
    }

    // Failed import: Warning event, no start, DataVolumeError.
    s.data_volumes = vec![dv("dv1", "Failed")];
    let d = decide(&s);
    assert_eq!(events(&d)[0].1, "FailedDataVolumeImport");
    assert_eq!(printable(&d), "DataVolumeError");

    // Halted proceeds past unready DataVolumes (and does not start).
    let mut halted = dv_vm();
    halted.spec.run_strategy = Some("Halted".into());
    let d = decide(&snap(halted));
    assert!(kinds(&d).contains(&"CreateDataVolume"));
    assert_eq!(printable(&d), "Stopped");
}

/// Mirrors "should detect that a DataVolume already exists and adopt it" (2781).
#[test]
fn orphan_data_volume_is_adopted() {
    let mut s = snap(dv_vm());
    let mut orphan = dv("dv1", "Succeeded");
    orphan.metadata.owner_references = None;
    orphan.metadata.uid = Some("dv-uid".into());
    s.data_volumes = vec![orphan];
    let d = decide(&s);
    assert_eq!(kinds(&d)[0], "AdoptDataVolume");
}

/// Mirrors "should set a Provisioning status and add a Failure condition if DV PVC creation fails
/// due to exceeded quota" (4334).
#[test]
fn data_volume_over_quota_is_a_failure() {
    let mut s = snap(dv_vm());
    let mut over = dv("dv1", "Pending");
    over.status.as_mut().unwrap().extra.insert(
        "conditions".into(),
        json!([{"type": "Bound", "status": "Unknown", "reason": "ErrExceededQuota",
                "message": "persistentvolumeclaims \"dv1\" is forbidden: exceeded quota: storage"}]),
    );
    s.data_volumes = vec![over];
    let d = decide(&s);
    let f = condition(&d, "Failure").unwrap();
    assert_eq!(f.reason.as_deref(), Some("FailedCreate"));
    let msg = f.message.clone().unwrap();
    assert!(msg.contains("Error encountered while creating DataVolumes"));
    assert!(msg.contains("importer is not running due to an error"));
    assert!(msg.contains("forbidden: exceeded quota: storage"));
    assert_eq!(printable(&d), "Provisioning");
}

/// Mirrors "should update conditions when failed creating DataVolume" (332).
#[test]
fn failed_data_volume_create_is_reported() {
    let s = snap(dv_vm());
    let d = fail_at(&s, 1, "denied");
    assert_eq!(
        kinds(&d),
        vec![
            "ExpectDataVolumeCreations",
            "CreateDataVolume",
            "DataVolumeCreationObserved",
            "Event",
            "UpdateVmStatus"
        ]
    );
    assert_eq!(events(&d)[0].2, "Error creating DataVolume dv1: denied");
    assert_eq!(
        condition(&d, "Failure").unwrap().message.as_deref(),
        Some("Error encountered while creating DataVolumes: failed to create DataVolume: denied")
    );
}

#[test]
fn start_failure_status_is_only_written_on_change() {
    let f = StartFailure {
        consecutive_fail_count: 1,
        last_failed_vmi_uid: Some("vmi-uid".into()),
        retry_after_timestamp: Some(Time(now())),
        ..Default::default()
    };
    let mut v = strategy("Always");
    v.status = Some(VirtualMachineStatus {
        start_failure: Some(f.clone()),
        ..Default::default()
    });
    let mut i = vmi("Failed");
    i.metadata.deletion_timestamp = deleting();
    let d = decide(&snap_with(v, i));
    // Same VMI UID: not counted again.
    assert_eq!(status(&d).start_failure, Some(f));
}

/// The printable status sees the trimmed request list: Manual, no VMI, `[Stop(old), Start]` →
/// the Stop is trimmed, so the VM counts as set to start (WaitingForVolumeBinding with an unbound
/// PVC), exactly as KubeVirt's in-place trimming makes `isSetToStart` see it.
#[test]
fn printable_status_sees_trimmed_requests() {
    let mut v = with_status(
        strategy("Manual"),
        json!({"stateChangeRequests": [{"action": "Stop", "uid": "old"}, {"action": "Start"}]}),
    );
    crate::controller::vm::template_spec_mut(&mut v)
        .volumes
        .as_mut()
        .unwrap()
        .push(
            serde_json::from_value(
                json!({"name": "data", "persistentVolumeClaim": {"claimName": "pvc1"}}),
            )
            .unwrap(),
        );
    let mut s = snap(v);
    s.pvcs.insert("pvc1".into(), PvcInfo::with_phase("Pending"));
    let d = decide(&s);
    assert!(!kinds(&d).contains(&"CreateVmi"));
    assert_eq!(status(&d).state_change_requests.as_ref().unwrap().len(), 1);
    assert_eq!(printable(&d), "WaitingForVolumeBinding");
}

/// KubeVirt quirk kept: an adopted VMI with neither a generation annotation nor a revision name
/// makes `conditionallyBumpGenerationAnnotationOnVmi` GET a ControllerRevision with an empty
/// name, which client-go rejects ("resource name may not be empty"); the sync stops there.
#[test]
fn adopted_vmi_without_revision_name_stops_the_sync() {
    let mut orphan = vmi("Running");
    orphan.metadata.owner_references = None;
    orphan.metadata.annotations = None;
    orphan
        .status
        .as_mut()
        .unwrap()
        .virtual_machine_revision_name = None;
    let d = decide(&snap_with(strategy("Always"), orphan));
    assert_eq!(kinds(&d), vec!["AdoptVmi"]);
    assert_eq!(
        outcome_text(&d).as_deref(),
        Some("resource name may not be empty")
    );
    assert_eq!(d.status, None);
}

/// The sync reads the snapshot's VM itself (no working copy until it changes something), so
/// it must read unmodelled fields without leaving a parsed map in that shared, cached copy.
#[test]
fn syncs_leave_no_parsed_unmodelled_fields_in_the_shared_vm() {
    let parsed = |vm: &VirtualMachine| {
        let t = vm
            .spec
            .template
            .as_ref()
            .and_then(|t| t.spec.as_ref())
            .unwrap();
        let mut holders = vec![("spec", vm.spec.extra.holds_parsed_map())];
        holders.push(("devices", t.domain.devices.extra.holds_parsed_map()));
        for d in t.domain.devices.disks.iter().flatten() {
            holders.push(("disk", d.extra.holds_parsed_map()));
        }
        for v in t.volumes.iter().flatten() {
            holders.push(("volume", v.extra.holds_parsed_map()));
        }
        if let Some(st) = &vm.status {
            holders.push(("status", st.extra.holds_parsed_map()));
        }
        holders
            .into_iter()
            .filter(|(_, p)| *p)
            .map(|(w, _)| w)
            .collect::<Vec<_>>()
    };
    let running = || {
        let mut i = vmi("Running");
        i.status.as_mut().unwrap().conditions =
            Some(serde_json::from_value(json!([{"type": "Ready", "status": "True"}])).unwrap());
        i
    };
    let status = json!({"volumeSnapshotStatuses": [{"name": "root", "enabled": false}]});
    let cases = [
        (
            "Always, no VMI",
            snap(with_status(strategy("Always"), status.clone())),
        ),
        (
            "Always, VMI Running",
            snap_with(with_status(strategy("Always"), status.clone()), running()),
        ),
        (
            "Manual, no VMI",
            snap(with_status(strategy("Manual"), status.clone())),
        ),
        (
            "Halted, VMI Running",
            snap_with(strategy("Halted"), running()),
        ),
    ];
    for (name, s) in cases {
        assert!(parsed(&s.vm).is_empty(), "{name}: decoded parsed");
        let d = decide(&s);
        assert!(!d.explanation.is_empty(), "{name}: decided");
        assert_eq!(parsed(&s.vm), Vec::<&str>::new(), "{name}");
    }
}

/// `status.volumeSnapshotStatuses` (snapshot.go:969-992) rides on the status write: computed
/// when the snapshot carries the storage objects, left as the cache has it when it does not
/// (the inspector, shadow mode).
#[test]
fn volume_snapshot_statuses_are_written_with_the_status() {
    let vm = strategy("Halted");
    let mut s = snap(vm.clone());
    s.storage = Some(Arc::new(volume_snapshot::StorageView::default()));
    let d = decide(&s);
    let got = status(&d).volume_snapshot_statuses.clone().unwrap();
    let names: Vec<_> = got.iter().map(|v| (v.name.as_str(), v.enabled)).collect();
    assert_eq!(names, vec![("root", false), ("cloudinit", false)]);
    assert_eq!(
        got[0].reason.as_deref(),
        Some("Snapshot is not supported for this volumeSource type [root]")
    );
    assert!(kinds(&d).contains(&"UpdateVmStatus"), "{:?}", kinds(&d));

    let unknown = with_status(
        vm,
        json!({"volumeSnapshotStatuses": [{"name": "root", "enabled": true}]}),
    );
    let d = decide(&snap(unknown));
    let kept = status(&d).volume_snapshot_statuses.clone().unwrap();
    assert!(kept[0].enabled && kept.len() == 1, "{kept:?}");
}

/// A hotpluggable PVC added to the template of a running VM is patched into the VMI, without
/// RestartRequired or a sync error (vm.go:3336-3338, hotplug.go:51-94; vm_test.go:6594/6640);
/// with the deprecated `HotplugVolumes` gate on instead, the declarative path is skipped
/// (vm.go:3569).
#[test]
fn a_hotplugged_claim_reaches_the_running_vmi() {
    let running = || {
        let mut v = vmi("Running");
        v.status = Some(
            serde_json::from_value(json!({"phase": "Running",
                "virtualMachineRevisionName": "revision-start-vm-vm-uid-1"}))
            .unwrap(),
        );
        v
    };
    let started = strategy("Always");
    let mut vm = started.clone();
    let spec = crate::controller::vm::template_spec_mut(&mut vm);
    spec.volumes.get_or_insert_with(Vec::new).push(
        serde_json::from_value(
            json!({"name": "hp", "persistentVolumeClaim": {"claimName": "hp-pvc", "hotpluggable": true}}),
        )
        .unwrap(),
    );
    spec.domain
        .devices
        .disks
        .get_or_insert_with(Vec::new)
        .push(serde_json::from_value(json!({"name": "hp", "disk": {"bus": "scsi"}})).unwrap());
    let mut s = snap_with(vm, running());
    s.revisions = vec![Arc::new(start_revision(&started))];
    let d = decide(&s);
    assert_eq!(d.sync_error, None);
    let i = index_of(&d, "PatchVmiSpec");
    let VmAction::PatchVmiSpec { patch, .. } = &d.actions[i].action else {
        unreachable!()
    };
    let last = patch.as_array().unwrap().last().unwrap();
    assert_eq!(last["path"], "/spec/domain/devices/disks");
    assert!(
        last["value"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["name"] == "hp")
    );
    assert!(
        status(&d)
            .conditions
            .iter()
            .flatten()
            .all(|c| c.type_ != "RestartRequired")
    );

    s.config.declarative_hotplug_volumes = false;
    assert!(!kinds(&decide(&s)).contains(&"PatchVmiSpec"));
}

/// vm_test.go:3863 "should add memory dump volume and update vmi volumes": an `Associating`
/// request on a running VM puts the dump volume into the VMI and (by the sync's `Update`) the
/// template, and the same sync's status moves the request to `InProgress` (vm.go:3340-3342,
/// 3379-3387, 2483); no `Failure` condition.
#[test]
fn a_memory_dump_request_is_carried_into_the_running_vmi() {
    let started = strategy("Always");
    let vm = with_status(
        started.clone(),
        json!({"created": true, "ready": true,
               "memoryDumpRequest": {"claimName": "dump", "phase": "Associating"}}),
    );
    let mut s = snap_with(vm, vmi("Running"));
    s.revisions = vec![Arc::new(start_revision(&started))];
    let d = decide(&s);
    assert_eq!(d.sync_error, None);
    let patch = live_patch(&d);
    let added = patch[1]["value"].as_array().unwrap().last().unwrap();
    assert_eq!(
        added,
        &json!({"name": "dump", "memoryDump": {"claimName": "dump", "hotpluggable": true}})
    );
    let i = index_of(&d, "UpdateVm");
    let VmAction::UpdateVm { vm, purpose, .. } = &d.actions[i].action else {
        unreachable!()
    };
    assert_eq!(*purpose, VmUpdatePurpose::SyncedSpec);
    assert!(
        vm.template_volumes()
            .iter()
            .any(|v| v.name == "dump" && v.extra.contains_key("memoryDump"))
    );
    assert_eq!(
        status(&d).extra["memoryDumpRequest"],
        json!({"claimName": "dump", "phase": "InProgress"})
    );
    assert!(condition(&d, "Failure").is_none());
}

/// memorydump.go:264-274: in `Unmounting` the dump claim must be in the cache; when it is
/// not, the sync ends with KubeVirt's `MemoryDumpError`.
#[test]
fn an_unmounting_dump_without_its_claim_is_a_sync_error() {
    let vm = with_status(
        strategy("Always"),
        json!({"memoryDumpRequest": {"claimName": "dump", "phase": "Unmounting",
                                     "fileName": "f.memory.dump"}}),
    );
    let mut s = snap_with(vm.clone(), vmi("Running"));
    s.revisions = vec![Arc::new(start_revision(&strategy("Always")))];
    let e = decide(&s).sync_error.expect("a sync error");
    assert_eq!(e.reason, "MemoryDumpError");
    assert_eq!(
        e.message,
        "Error encountered while handling memory dump request: Error when trying to update \
         memory dump annotation, pvc dump not found"
    );
    s.pvcs.insert("dump".into(), PvcInfo::with_phase("Bound"));
    let d = decide(&s);
    assert_eq!(d.sync_error, None);
    let i = index_of(&d, "PatchClaimAnnotations");
    let VmAction::PatchClaimAnnotations { name, patch } = &d.actions[i].action else {
        unreachable!()
    };
    assert_eq!(name, "dump");
    assert_eq!(
        patch[0]["value"],
        json!({"kubevirt.io/memory-dump": "f.memory.dump"})
    );
}

mod expand;
