//! What the VMI executor records in the flight recorder ([`crate::flight`]).

use super::action::{VmiAction, VmiDecision};
use super::snapshot::{ExpectationsState, VmiSnapshot};
use crate::api::VirtualMachine;
use crate::controller::context::Context;
use crate::flight::{Decided, Expectation, Input, Reconcile, Write, input};
use kube::runtime::reflector::ObjectRef;

/// The kind of a VMI action as recorded and compared (`CreatePod`, `Event SuccessfulCreate`).
pub(crate) fn action_name(a: &VmiAction) -> String {
    match a {
        VmiAction::CreatePod { .. } => "CreatePod".into(),
        VmiAction::DeletePod { .. } => "DeletePod".into(),
        VmiAction::DeleteTemporaryPod { .. } => "DeleteTemporaryPod".into(),
        VmiAction::CreateAttachmentPod { .. } => "CreateAttachmentPod".into(),
        VmiAction::CreateTriggerPod { .. } => "CreateTriggerPod".into(),
        VmiAction::DeleteAttachmentPod { .. } => "DeleteAttachmentPod".into(),
        VmiAction::CreateBackendStoragePvc { .. } => "CreateBackendStoragePvc".into(),
        VmiAction::DeleteBackendStoragePvc { .. } => "DeleteBackendStoragePvc".into(),
        VmiAction::PatchPod { .. } => "PatchPod".into(),
        VmiAction::PatchPodReadinessCondition { .. } => "PatchPodReadinessCondition".into(),
        VmiAction::UpdateVmi { .. } => "UpdateVmi".into(),
        VmiAction::PatchVmi { .. } => "PatchVmi".into(),
        VmiAction::Event { reason, .. } => format!("Event {reason}"),
    }
}

/// The VMI's expectations entries as recorded (`vmi-pod`, `vmi-self`).
pub(crate) fn expectations(state: &ExpectationsState) -> Vec<Expectation> {
    vec![
        Expectation {
            store: "vmi-pod".into(),
            adds: state.pending_pod_creations,
            dels: state.pending_pod_deletions,
            satisfied: state.pods_satisfied,
        },
        Expectation {
            store: "vmi-self".into(),
            adds: 0,
            dels: 0,
            satisfied: state.vmi_satisfied,
        },
        Expectation {
            store: "vmi-pvc".into(),
            adds: 0,
            dels: 0,
            satisfied: state.pvcs_satisfied,
        },
    ]
}

/// The actions of a decision as recorded, with the decision's explanation on the first.
pub(crate) fn decided<'a>(
    actions: impl Iterator<Item = &'a VmiAction>,
    explanation: &[String],
) -> Vec<Decided> {
    actions
        .enumerate()
        .map(|(i, a)| Decided {
            action: action_name(a),
            why: if i == 0 {
                explanation.join("; ")
            } else {
                String::new()
            },
        })
        .collect()
}

fn inputs(ctx: &Context, key: &str, snap: &VmiSnapshot) -> Vec<Input> {
    let (ns, _) = crate::api::key::split_key(key);
    let mut out = vec![input("VirtualMachineInstance", snap.vmi.as_ref())];
    out.extend(snap.pods.iter().map(|p| input("Pod", p.as_ref())));
    let owner = snap
        .vmi
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == "VirtualMachine")
        .map(|r| r.name.clone());
    if let Some(vm) = owner.and_then(|n| {
        ctx.caches
            .vms
            .store()
            .get(&ObjectRef::<VirtualMachine>::new(&n).within(ns))
    }) {
        out.push(input("VirtualMachine", vm.as_ref()));
    }
    for v in snap.vmi.spec.volumes.iter().flatten() {
        if let Some(claim) = super::storage::claim_name(v)
            && let Some(p) = ctx
                .caches
                .pvcs
                .store()
                .get(&ObjectRef::new(claim).within(ns))
        {
            out.push(input("PersistentVolumeClaim", p.as_ref()));
        }
    }
    // The nodes the topology hinter read (none unless the VMI waited for its hint).
    for n in snap.topology.iter().flat_map(|t| &t.nodes) {
        if let Some(node) = ctx.caches.nodes.store().get(&ObjectRef::new(&n.name)) {
            out.push(input("Node", node.as_ref()));
        }
    }
    out
}

/// Record one reconcile of `key`: the sync part of `first`, the status part of `second` (none
/// when the decision skipped the key).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reconcile(
    ctx: &Context,
    key: &str,
    snap: &VmiSnapshot,
    first: &VmiDecision,
    second: Option<&VmiDecision>,
    sync_failed: bool,
    applied: &[String],
    error: Option<&String>,
) {
    let Some(f) = &ctx.flight else { return };
    let actions = first
        .sync_actions
        .iter()
        .chain(second.into_iter().flat_map(|d| d.status_actions.iter()));
    f.reconcile(Reconcile {
        controller: "vmi".into(),
        key: key.to_string(),
        now: snap.now.0,
        inputs: inputs(ctx, key, snap),
        expectations: expectations(&snap.expectations),
        decided: decided(actions, &first.explanation),
        sync_failed,
        skipped: first.skipped.as_ref().map(|s| format!("{s:?}")),
        applied: applied.to_vec(),
        error: error.cloned(),
    });
}

/// Record one write of `key`'s reconcile.
pub(crate) fn write(ctx: &Context, key: &str, action: &VmiAction, error: Option<&str>) {
    let Some(f) = &ctx.flight else { return };
    if matches!(action, VmiAction::Event { .. }) {
        return;
    }
    f.write(
        Write {
            controller: "vmi".into(),
            key: key.to_string(),
            action: action_name(action),
            error: error.map(str::to_string),
            answer: None,
        },
        None,
    );
}
