//! The what-if's pure evaluation: the controllers' decisions, the rendered launcher pod and its
//! overhead, the node fit and the rollout, on the gathered state and on the changed one.

use super::{Change, ChangeError, apply_change};
use super::{
    DecisionSide, FitCheck, NodeFit, PodDiff, Rollout, TermChange, ValueChange, WhatIf, human_bytes,
};
use crate::api::annotations::{MEMORY_OVERHEAD_BYTES, VM_GENERATION};
use crate::api::manifest::KubeVirtObject;
use crate::api::quantity::ParsedQuantity;
use crate::api::{VirtualMachine, VirtualMachineInstance};
use crate::config::ClusterSettings;
use crate::controller::vm::restart_required::restart_required;
use crate::controller::vm::setup_vmi_from_vm;
use crate::controller::vmi::executor::render_pod_with;
use crate::inspect::analyze::{analyze, changed_paths, current_pod, decide_next};
use crate::inspect::gather::Gathered;
use crate::inspect::model::{FieldChange, Inspection, Missing};
use crate::launcher::containers::compute_container as compute;
use crate::launcher::explain::{Explanation, explain};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, Pod};
use std::collections::BTreeMap;
use std::fmt::Write as _;
/// The template fields `LiveUpdate` applies to a running VMI (vm.go:3358-3377; the same list
/// [`restart_required`] neutralises).
const LIVE_UPDATABLE: &[&str] = &[
    "spec.template.spec.domain.cpu.sockets",
    "spec.template.spec.domain.memory.guest",
    "spec.template.spec.nodeSelector",
    "spec.template.spec.affinity",
    "spec.template.spec.tolerations",
];

/// The fields `after` changes in `before` (spec, metadata labels/annotations, status requests).
pub(crate) fn changed_fields(before: &VirtualMachine, after: &VirtualMachine) -> Vec<FieldChange> {
    let a = serde_json::to_value(before).unwrap_or_default();
    let b = serde_json::to_value(after).unwrap_or_default();
    let mut out = Vec::new();
    for part in ["metadata", "spec", "status"] {
        changed_paths(part, a.get(part), b.get(part), &mut out);
    }
    out.retain(|c| c.path != "metadata.generation");
    out
}

/// One side of the comparison. The printableStatus is the one the VM decision writes at the
/// end of this sync when it writes a status (KubeVirt's `updateStatus` runs after the sync's
/// actions, with the expectations they raised: a VMI being deleted makes it `Stopping`,
/// vm.go `isVirtualMachineStatusStopping`), else the one the rules give on the state as it is.
fn side(
    ins: &Inspection,
    d: &crate::controller::vm::VmDecision,
    sync_error: Option<String>,
) -> DecisionSide {
    let nd = ins.next_decision.clone().unwrap_or_default();
    let written = d.status.as_ref().and_then(|s| s.printable_status.clone());
    DecisionSide {
        summary: nd.summary,
        actions: nd.actions,
        restart_required: restart_required_in(d).is_some(),
        restart_required_message: restart_required_in(d).flatten(),
        sync_error,
        printable_status: written.or_else(|| {
            ins.printable_status_reason
                .as_ref()
                .map(|p| p.computed.clone())
        }),
    }
}

/// `Some(message)` when the status the sync writes has `RestartRequired=True`.
fn restart_required_in(d: &crate::controller::vm::VmDecision) -> Option<Option<String>> {
    d.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())?
        .iter()
        .find(|c| c.type_ == "RestartRequired" && c.status == "True")
        .map(|c| c.message.as_deref().map(str::to_string))
}

fn quantity(text: &str) -> Option<i64> {
    ParsedQuantity::parse(text).ok().map(|q| q.value())
}

fn quantity_millis(text: &str) -> Option<i64> {
    ParsedQuantity::parse(text).ok().map(|q| q.milli_value())
}

fn compute_quantities(pod: &Pod) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if let Some(r) = compute(pod).and_then(|c| c.resources.as_ref()) {
        for (kind, map) in [("requests", &r.requests), ("limits", &r.limits)] {
            for (k, v) in map.iter().flatten() {
                out.insert(format!("{kind}.{k}"), v.0.clone());
            }
        }
    }
    out
}

pub(super) fn diff_maps(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
    quantities: bool,
) -> Vec<ValueChange> {
    let mut keys: Vec<&String> = before.keys().chain(after.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut out = Vec::new();
    for k in keys {
        let (b, a) = (before.get(k), after.get(k));
        let parse = |v: Option<&String>| {
            v.and_then(|t| {
                if k.ends_with(".cpu") {
                    quantity_millis(t)
                } else {
                    quantity(t)
                }
            })
        };
        let equal = match (quantities, parse(b), parse(a)) {
            (true, Some(x), Some(y)) => x == y,
            _ => b == a,
        };
        if equal {
            continue;
        }
        let delta = match (quantities, parse(b), parse(a)) {
            (true, Some(x), Some(y)) => Some(y - x),
            _ => None,
        };
        out.push(ValueChange {
            name: k.clone(),
            before: b.cloned(),
            after: a.cloned(),
            delta,
        });
    }
    out
}

fn meta_map(m: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    m.cloned().unwrap_or_default()
}

/// The VMI the VM starts (`SetupVMIFromVM`), with the running VMI's uid when one runs (so the
/// diff shows what the change moves, not the new identity).
///
/// A VM naming an instancetype or preference is expanded first (`ApplyToVM`,
/// pkg/instancetype/apply/vm.go:67-87) from the stashed ControllerRevisions in `revisions`,
/// and the VMI gets the name annotations (annotations/annotations.go:28-44).
pub(super) fn vmi_for(
    vm: &VirtualMachine,
    running: Option<&VirtualMachineInstance>,
    namespace: &str,
    revisions: &[ControllerRevision],
) -> Result<VirtualMachineInstance, String> {
    let shared: Vec<std::sync::Arc<ControllerRevision>> =
        revisions.iter().cloned().map(std::sync::Arc::new).collect();
    let expanded =
        crate::instancetype::apply_to_vm(vm, &crate::instancetype::Objects::default(), &shared)?;
    let mut vmi = setup_vmi_from_vm(&expanded).map_err(|e| e.to_string())?;
    if vm.spec.instancetype.is_some() || vm.spec.preference.is_some() {
        let annotations = vmi
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        crate::instancetype::set_name_annotations(vm, annotations);
    }
    if vmi.metadata.namespace.is_none() {
        vmi.metadata.namespace = Some(namespace.to_string());
    }
    vmi.metadata.uid = running
        .and_then(|v| v.metadata.uid.clone())
        .or_else(|| Some("new-vmi-uid".into()));
    // startVMI stamps the VM generation the VMI starts from (vm.go:1438-1475).
    if let Some(generation) = vm.metadata.generation {
        vmi.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(VM_GENERATION.to_string(), generation.to_string());
    }
    Ok(vmi)
}

fn explain_vmi(
    vmi: &VirtualMachineInstance,
    namespace: &str,
    settings: &ClusterSettings,
) -> Result<Explanation, String> {
    explain(
        &KubeVirtObject::Vmi(Box::new(vmi.clone())),
        namespace,
        settings,
    )
    .map_err(|e| e.to_string())
}

/// Term-by-term difference of two explanations (terms in the after order, then vanished ones).
pub(crate) fn term_changes(before: &Explanation, after: &Explanation) -> Vec<TermChange> {
    let mut out = Vec::new();
    let bytes = |e: &Explanation, name: &str| {
        e.overhead
            .terms
            .iter()
            .find(|t| t.name == name)
            .map(|t| t.bytes)
    };
    for t in &after.overhead.terms {
        let b = bytes(before, &t.name).unwrap_or(0);
        out.push(TermChange {
            name: t.name.clone(),
            before_bytes: b,
            after_bytes: t.bytes,
            delta_bytes: t.bytes - b,
            reason: t.reason.clone(),
        });
    }
    for t in &before.overhead.terms {
        if bytes(after, &t.name).is_none() {
            out.push(TermChange {
                name: t.name.clone(),
                before_bytes: t.bytes,
                after_bytes: 0,
                delta_bytes: -t.bytes,
                reason: "no longer applies".into(),
            });
        }
    }
    out
}

fn pod_diff(
    g: &Gathered,
    before_vm: &VirtualMachine,
    after_vm: &VirtualMachine,
    missing: &mut Vec<Missing>,
) -> Option<(PodDiff, Pod)> {
    let mut note = |what: &str, reason: String| {
        missing.push(Missing {
            what: what.into(),
            reason,
        })
    };
    let running_vmi = g.vmi.as_ref();
    let after_vmi = vmi_for(after_vm, running_vmi, &g.namespace, &g.revisions)
        .map_err(|e| note("renderedPod", format!("the changed VM: {e}")))
        .ok()?;
    let after_pod = render_pod_with(&g.settings, &g.namespace_context(), &after_vmi)
        .map_err(|e| note("renderedPod", format!("the changed VM: {}", e.message)))
        .ok()?;
    let after_explained = explain_vmi(&after_vmi, &g.namespace, &g.settings)
        .map_err(|e| note("renderedPod", format!("the changed VM's overhead: {e}")))
        .ok()?;
    let before_vmi = match running_vmi {
        Some(v) => v.clone(),
        None => vmi_for(before_vm, None, &g.namespace, &g.revisions)
            .map_err(|e| note("renderedPod", format!("the current VM: {e}")))
            .ok()?,
    };
    let before_explained = explain_vmi(&before_vmi, &g.namespace, &g.settings)
        .map_err(|e| note("renderedPod", format!("the current VM's overhead: {e}")))
        .ok()?;
    let (before_pod, before_source) = match current_pod(&g.pods) {
        Some(p) => (
            p.clone(),
            format!("pod/{}", p.metadata.name.as_deref().unwrap_or("")),
        ),
        None => (
            render_pod_with(&g.settings, &g.namespace_context(), &before_vmi)
                .map_err(|e| note("renderedPod", format!("the current VM: {}", e.message)))
                .ok()?,
            "rendered from the current VM (no launcher pod runs)".to_string(),
        ),
    };
    let mem = |p: &Pod| {
        compute(p)
            .and_then(|c| c.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("memory"))
            .and_then(|q| quantity(&q.0))
    };
    let mut terms = term_changes(&before_explained, &after_explained);
    terms.retain(|t| t.delta_bytes != 0);
    let mut annotations_before = meta_map(before_pod.metadata.annotations.as_ref());
    let mut annotations_after = meta_map(after_pod.metadata.annotations.as_ref());
    // The overhead annotation is compared as a number below; keep it in the list too.
    for m in [&mut annotations_before, &mut annotations_after] {
        m.retain(|k, _| !k.is_empty());
    }
    let mut annotations = diff_maps(&annotations_before, &annotations_after, false);
    for a in annotations.iter_mut() {
        if a.name == MEMORY_OVERHEAD_BYTES
            && let (Some(b), Some(x)) = (
                a.before.as_deref().and_then(|v| v.parse::<i64>().ok()),
                a.after.as_deref().and_then(|v| v.parse::<i64>().ok()),
            )
        {
            a.delta = Some(x - b);
        }
    }
    Some((
        PodDiff {
            before_source,
            memory_request_before_bytes: mem(&before_pod),
            memory_request_after_bytes: mem(&after_pod),
            resources: diff_maps(
                &compute_quantities(&before_pod),
                &compute_quantities(&after_pod),
                true,
            ),
            overhead_before_bytes: before_explained.overhead.total_bytes,
            overhead_after_bytes: after_explained.overhead.total_bytes,
            terms,
            labels: diff_maps(
                &meta_map(before_pod.metadata.labels.as_ref()),
                &meta_map(after_pod.metadata.labels.as_ref()),
                false,
            ),
            annotations,
        },
        after_pod,
    ))
}

/// The pod's effective requests as the scheduler sums them: each container's requests (its
/// limits where it sets no request), the larger of that sum and any init container, plus
/// `spec.overhead`. Values in base units (bytes; millicores for `cpu`).
pub(crate) fn pod_requests(pod: &Pod) -> BTreeMap<String, i64> {
    let value = |name: &str, q: &k8s_openapi::apimachinery::pkg::api::resource::Quantity| {
        if name == "cpu" {
            quantity_millis(&q.0)
        } else {
            quantity(&q.0)
        }
    };
    let container = |c: &k8s_openapi::api::core::v1::Container| {
        let mut m: BTreeMap<String, i64> = BTreeMap::new();
        if let Some(r) = &c.resources {
            for (k, q) in r.limits.iter().flatten() {
                if let Some(v) = value(k, q) {
                    m.insert(k.clone(), v);
                }
            }
            for (k, q) in r.requests.iter().flatten() {
                if let Some(v) = value(k, q) {
                    m.insert(k.clone(), v);
                }
            }
        }
        m
    };
    let Some(spec) = &pod.spec else {
        return BTreeMap::new();
    };
    let mut sum: BTreeMap<String, i64> = BTreeMap::new();
    for c in &spec.containers {
        for (k, v) in container(c) {
            *sum.entry(k).or_default() += v;
        }
    }
    for c in spec.init_containers.iter().flatten() {
        for (k, v) in container(c) {
            let e = sum.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    for (k, q) in spec.overhead.iter().flatten() {
        if let Some(v) = value(k, q) {
            *sum.entry(k.clone()).or_default() += v;
        }
    }
    sum.retain(|_, v| *v > 0);
    sum
}

fn show(resource: &str, v: i64) -> String {
    if resource == "cpu" {
        format!("{v}m")
    } else if resource == "memory" || resource.contains("storage") {
        human_bytes(v)
    } else {
        v.to_string()
    }
}

/// The rendered pod against each node: cordoned, not Ready, nodeSelector, and every request
/// within the node's allocatable. Other pods' requests are not subtracted (the inspector reads
/// no other workload): "fits" means the node is large enough.
pub(crate) fn fit_check(pod: &Pod, nodes: &[Node]) -> FitCheck {
    let requests = pod_requests(pod);
    let selector = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default();
    let mut out = FitCheck {
        requests: requests
            .iter()
            .map(|(k, v)| (k.clone(), show(k, *v)))
            .collect(),
        ..Default::default()
    };
    for node in nodes {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut problems = Vec::new();
        let mut shortfall: f64 = 0.0;
        if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
            problems.push("cordoned (spec.unschedulable)".to_string());
        }
        let ready = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.status.clone());
        if ready.as_deref() != Some("True") {
            problems.push(format!("Ready={}", ready.as_deref().unwrap_or("Unknown")));
        }
        let labels = node.metadata.labels.clone().unwrap_or_default();
        for (k, v) in &selector {
            if labels.get(k) != Some(v) {
                problems.push(format!("nodeSelector {k}={v} does not match"));
            }
        }
        let hard_problems = problems.len();
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        for (resource, want) in &requests {
            let have = allocatable
                .get(resource)
                .and_then(|q| {
                    if resource == "cpu" {
                        quantity_millis(&q.0)
                    } else {
                        quantity(&q.0)
                    }
                })
                .unwrap_or(0);
            if *want > have {
                problems.push(format!(
                    "{resource}: needs {}, allocatable {} (short by {})",
                    show(resource, *want),
                    show(resource, have),
                    show(resource, want - have)
                ));
                shortfall = shortfall.max((want - have) as f64 / *want as f64);
            }
        }
        out.nodes.push(NodeFit {
            fits: problems.is_empty(),
            name,
            problems,
            hard_problems,
            shortfall,
        });
    }
    out.fitting_nodes = out
        .nodes
        .iter()
        .filter(|n| n.fits)
        .map(|n| n.name.clone())
        .collect();
    out.fits = !out.fitting_nodes.is_empty();
    if out.nodes.is_empty() {
        out.summary = "no node was read: the fit is unknown".into();
    } else if out.fits {
        out.summary = format!(
            "fits {} of {} node(s): {} (against allocatable; other pods' requests not subtracted)",
            out.fitting_nodes.len(),
            out.nodes.len(),
            out.fitting_nodes.join(", ")
        );
    } else {
        let closest = out
            .nodes
            .iter()
            .min_by(|a, b| {
                a.hard_problems
                    .cmp(&b.hard_problems)
                    .then(a.shortfall.total_cmp(&b.shortfall))
                    .then(a.problems.len().cmp(&b.problems.len()))
            })
            .cloned();
        if let Some(c) = closest {
            out.summary = format!(
                "unschedulable: fits none of {} node(s); closest {}: {}",
                out.nodes.len(),
                c.name,
                c.problems.join("; ")
            );
            out.closest_node = Some(c.name);
        }
    }
    out
}

/// The rollout line of a live update: the VMI patches the VM decision sends, or the handler's
/// refusal (a hotplug or migration in progress) that keeps it from being applied now.
fn live_update_summary(strategy: &str, changes: &[String], after: &DecisionSide) -> String {
    let mut s = format!(
        "rollout strategy {strategy}: live update of {} on the running VMI, no RestartRequired (vm.go:3351-3377)",
        changes.join(", ")
    );
    let patches = after
        .actions
        .iter()
        .filter(|a| a.kind == "PatchVmiSpec")
        .count();
    if patches > 0 {
        let _ = write!(
            s,
            ": the VM controller patches the VMI's spec ({patches} patch"
        );
        s.push_str(if patches == 1 { ")" } else { "es)" });
    }
    if let Some(e) = after.sync_error.as_ref().filter(|e| {
        [
            "HotPlugCPUError",
            "HotPlugMemoryError",
            "AffinityChangeError",
            "TolerationsChangeError",
        ]
        .iter()
        .any(|r| e.starts_with(r))
    }) {
        let _ = write!(s, "; not now: {e}");
    }
    s
}

/// The template's interfaces or networks changed (hotplug, unplug, a NAD reference).
fn network_changed(fields: &[FieldChange]) -> bool {
    fields.iter().any(|f| {
        f.path
            .starts_with("spec.template.spec.domain.devices.interfaces")
            || f.path.starts_with("spec.template.spec.networks")
    })
}

/// What the network synchronizer does with an interface/network change that needs no restart
/// (pkg/network/controllers/vm.go; the VMI controller's `MigrationRequired` follows).
fn network_summary(after: &DecisionSide) -> String {
    let patch = after
        .actions
        .iter()
        .find(|a| a.kind == "PatchVmiSpec" && a.why.starts_with("network synchronizer"));
    let mut s = match patch {
        Some(p) => format!(
            "{}; the VMI controller then asks for a live migration with MigrationRequired \
             (lifecycle.go:1197-1245)",
            p.why
        ),
        None => "the network synchronizer leaves the VMI as it is (only bridge and SR-IOV \
                 interfaces are hotplugged, pkg/network/controllers/vm.go:160-162)"
            .to_string(),
    };
    if let Some(e) = after
        .sync_error
        .as_ref()
        .filter(|e| e.starts_with("HotPlugNetworkInterfaceError"))
    {
        let _ = write!(s, "; not now: {e}");
    }
    s
}

fn rollout(
    g: &Gathered,
    before: &VirtualMachine,
    after: &VirtualMachine,
    fields: &[FieldChange],
    after_side: &DecisionSide,
) -> Rollout {
    let live = g.settings.vm_rollout_strategy_live_update;
    let strategy = if live { "LiveUpdate" } else { "Stage" };
    let live_changes: Vec<String> = fields
        .iter()
        .filter(|f| {
            LIVE_UPDATABLE
                .iter()
                .any(|l| f.path == *l || f.path.starts_with(&format!("{l}.")))
        })
        .map(|f| f.path.clone())
        .collect();
    let template_changed = fields.iter().any(|f| f.path.starts_with("spec.template."));
    let vmi = g.vmi.as_ref().filter(|v| !v.is_final());
    let rules = g.settings.kubevirt_version.controller_rules();
    let change_needs_restart = vmi.map(|v| {
        let nad_live = crate::controller::vm::net_sync::nad_live_update(&rules, v);
        restart_required(&before.spec, after, v, live, nad_live)
    });
    let summary = match (vmi, template_changed) {
        (None, _) => format!(
            "rollout strategy {strategy}: no VMI runs, so the next VMI starts from the changed template"
        ),
        (Some(_), false) => format!("rollout strategy {strategy}: the template does not change"),
        (Some(_), true) => {
            let needs = change_needs_restart.unwrap_or(false);
            if needs || after_side.restart_required {
                let handler_message = after_side
                    .restart_required_message
                    .as_ref()
                    .filter(|_| !needs);
                let why = if let Some(m) = handler_message {
                    format!("the live update cannot be applied: {m} (vm.go:622-673, 3444-3566)")
                } else if !live && !live_changes.is_empty() {
                    format!(
                        "under Stage every template change waits for a restart, including {}",
                        live_changes.join(", ")
                    )
                } else {
                    "a field that is never live-updated changed".to_string()
                };
                format!(
                    "rollout strategy {strategy}: RestartRequired: {why}; the running VMI keeps its spec until restarted (vm.go:3052-3055)"
                )
            } else if !live_changes.is_empty() {
                let mut s = live_update_summary(strategy, &live_changes, after_side);
                if network_changed(fields) {
                    let _ = write!(s, "; {}", network_summary(after_side));
                }
                s
            } else if network_changed(fields) {
                format!(
                    "rollout strategy {strategy}: interface/network change, no RestartRequired: {}",
                    network_summary(after_side)
                )
            } else {
                format!(
                    "rollout strategy {strategy}: the change needs no restart (hotplug or neutral fields)"
                )
            }
        }
    };
    Rollout {
        strategy: strategy.to_string(),
        live_updatable_changes: live_changes,
        change_needs_restart,
        summary,
    }
}

fn outcome(w: &WhatIf, g: &Gathered) -> Vec<String> {
    let mut out = Vec::new();
    let kinds = |s: &DecisionSide| -> Vec<String> {
        s.actions
            .iter()
            .map(|a| format!("{}:{}", a.controller, a.kind))
            .collect()
    };
    let has = |s: &DecisionSide, k: &str| s.actions.iter().any(|a| a.kind == k);
    let find = |s: &DecisionSide, k: &str| s.actions.iter().find(|a| a.kind == k).cloned();
    let (b, a) = (&w.before, &w.after);
    if let Some(act) = find(a, "DeleteVmi").filter(|_| !has(b, "DeleteVmi")) {
        let restarts = w.change.iter().any(|c| c.starts_with("restart"))
            || (w
                .changed_fields
                .iter()
                .all(|f| !f.path.contains("runStrategy"))
                && a.summary.starts_with("Always"));
        if restarts {
            out.push(format!(
                "would restart: delete VMI {}, then create a new one once the deletion is observed ({})",
                g.name, act.why
            ));
        } else {
            out.push(format!("would delete VMI {} ({})", g.name, act.why));
        }
    }
    if let Some(act) = find(a, "CreateVmi").filter(|_| !has(b, "CreateVmi")) {
        out.push(format!("would create VMI {} ({})", g.name, act.why));
    }
    if a.restart_required && !b.restart_required {
        out.push(
            "RestartRequired: the VM gets condition RestartRequired=True; the change applies at the next restart (vm.go:3052-3055)"
                .into(),
        );
    } else if !a.restart_required && b.restart_required {
        out.push("RestartRequired would be cleared (vm.go:3056-3058)".into());
    }
    if let Some(e) = a
        .sync_error
        .as_ref()
        .filter(|e| Some(*e) != b.sync_error.as_ref())
    {
        out.push(format!("the VM sync would fail: {e}"));
    }
    if w.rollout.change_needs_restart == Some(false) && !w.rollout.live_updatable_changes.is_empty()
    {
        out.push(w.rollout.summary.clone());
    }
    if let Some(f) = w.fit.as_ref().filter(|f| !f.fits && !f.nodes.is_empty()) {
        out.push(format!("the rendered launcher pod is {}", f.summary));
    }
    if out.is_empty() {
        if kinds(a) == kinds(b) && a.restart_required == b.restart_required {
            out.push("no change: the controllers would do the same as now".into());
        } else {
            out.push(format!("the controllers would: {}", a.summary));
        }
    }
    out
}

/// What the controllers would do, and the launcher pod they would render, after `change`:
/// pure, on the gathered state (the clock is `g.now`; nothing is read or written).
pub(crate) fn what_if(g: &Gathered, change: &Change) -> Result<WhatIf, ChangeError> {
    let key = format!("{}/{}", g.namespace, g.name);
    let before_vm =
        g.vm.as_ref()
            .ok_or_else(|| ChangeError::NoVm(key.clone()))?;
    let after_vm = apply_change(before_vm, g.vmi.as_ref(), change)?;
    let mut after_g = g.clone();
    after_g.vm = Some(after_vm.clone());
    let before_ins = analyze(g);
    let after_ins = analyze(&after_g);
    let before_d = decide_next(g, before_vm, &before_ins.expectations);
    let after_d = decide_next(&after_g, &after_vm, &before_ins.expectations);
    let err = |d: &crate::controller::vm::VmDecision| {
        d.sync_error
            .as_ref()
            .map(|e| format!("{}: {}", e.reason, e.message))
    };
    let before = side(&before_ins, &before_d.vm, err(&before_d.vm));
    let after = side(&after_ins, &after_d.vm, err(&after_d.vm));
    let fields = changed_fields(before_vm, &after_vm);
    let mut missing = Vec::new();
    let rendered = pod_diff(g, before_vm, &after_vm, &mut missing);
    let nodes: Vec<Node> = if g.candidate_nodes.is_empty() {
        g.node.iter().cloned().collect()
    } else {
        g.candidate_nodes.clone()
    };
    let fit = rendered.as_ref().map(|(_, pod)| fit_check(pod, &nodes));
    let rollout = rollout(g, before_vm, &after_vm, &fields, &after);
    let mut w = WhatIf {
        generated_at: g.now,
        namespace: g.namespace.clone(),
        name: g.name.clone(),
        change: change.describe(),
        changed_fields: fields,
        before,
        after,
        outcome: Vec::new(),
        rollout,
        pod: rendered.map(|(d, _)| d),
        fit,
        missing,
    };
    w.outcome = outcome(&w, g);
    Ok(w)
}
