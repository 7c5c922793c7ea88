//! What the VM executor records in the flight recorder ([`crate::flight`]): each reconcile's
//! inputs, expectations and decision, and each write with its answer.

use super::action::PlannedAction;
use super::snapshot::{ExpectationCounts, ExpectationsView, VmSnapshot};
use crate::controller::context::Context;
use crate::flight::{Decided, Expectation, Input, Reconcile, Write, input};
use kube::runtime::reflector::ObjectRef;

fn entry(store: &str, counts: Option<ExpectationCounts>) -> Option<Expectation> {
    counts.map(|c| Expectation {
        store: store.into(),
        adds: c.adds,
        dels: c.dels,
        satisfied: c.satisfied(),
    })
}

/// The VM's expectations entries as recorded (`vm-vmi`, `vm-datavolume`).
pub(crate) fn expectations(view: &ExpectationsView) -> Vec<Expectation> {
    [
        entry("vm-vmi", view.vmi),
        entry("vm-datavolume", view.data_volumes),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// The objects the snapshot of `key` holds; claims are looked up in the cache for their
/// resourceVersion.
fn inputs(ctx: &Context, key: &str, snap: &VmSnapshot) -> Vec<Input> {
    let (ns, _) = crate::api::key::split_key(key);
    let mut out = vec![input("VirtualMachine", snap.vm.as_ref())];
    out.extend(
        snap.vmi
            .iter()
            .map(|v| input("VirtualMachineInstance", v.as_ref())),
    );
    out.extend(
        snap.revisions
            .iter()
            .map(|r| input("ControllerRevision", r.as_ref())),
    );
    out.extend(snap.data_volumes.iter().map(|d| input("DataVolume", d)));
    for claim in snap.pvcs.keys() {
        if let Some(p) = ctx
            .caches
            .pvcs
            .store()
            .get(&ObjectRef::new(claim).within(ns))
        {
            out.push(input("PersistentVolumeClaim", p.as_ref()));
        }
    }
    out
}

/// Record one reconcile of `key` from `snap` that decided `decided`.
pub(crate) fn reconcile(
    ctx: &Context,
    key: &str,
    snap: &VmSnapshot,
    decided: &[PlannedAction],
    applied: &[String],
    error: Option<&String>,
) {
    let Some(f) = &ctx.flight else { return };
    f.reconcile(Reconcile {
        controller: "vm".into(),
        key: key.to_string(),
        now: snap.now,
        inputs: inputs(ctx, key, snap),
        expectations: expectations(&snap.expectations),
        decided: decided
            .iter()
            .map(|p| Decided {
                action: p.action.kind().to_string(),
                why: p.why.clone(),
            })
            .collect(),
        sync_failed: false,
        skipped: None,
        applied: applied.to_vec(),
        error: error.cloned(),
    });
}

/// Record one write of `key`'s reconcile: `Ok` with the VM it returned, or the error.
pub(crate) fn write(
    ctx: &Context,
    key: &str,
    action: &str,
    result: Result<Option<&crate::api::VirtualMachine>, &str>,
) {
    let Some(f) = &ctx.flight else { return };
    let w = Write {
        controller: "vm".into(),
        key: key.to_string(),
        action: action.to_string(),
        error: result.err().map(str::to_string),
        answer: None,
    };
    let answer = result
        .ok()
        .flatten()
        .and_then(|vm| serde_json::to_value(vm).ok())
        .map(|v| ("VirtualMachine", key, v));
    f.write(w, answer);
}
