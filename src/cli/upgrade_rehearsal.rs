//! `explain-overhead -A --upgrade-to VERSION` (or `-n NS --upgrade-to VERSION`): the upgrade
//! rehearsal's table ([`crate::inspect::rehearsal`] decides).

use crate::api::quantity::human_bytes;
use crate::inspect::rehearsal::{Rehearsal, VmRehearsal, signed};
use std::fmt::Write as _;

/// The causes of one VM's change, on one line.
fn causes(vm: &VmRehearsal) -> String {
    if vm.causes.is_empty() {
        return if vm.changes.is_empty() {
            "no change".into()
        } else {
            "rendering rules, not the overhead terms".into()
        };
    }
    vm.causes
        .iter()
        .map(|c| {
            format!(
                "{} {} ({})",
                c.term,
                signed(c.after_bytes - c.before_bytes),
                c.source
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The launcher pod changes beyond the memory formula, one line per cause: how many VMs, and
/// the fields (each once).
fn pod_changes_by_cause(r: &Rehearsal, out: &mut String) {
    let mut by_cause: std::collections::BTreeMap<&str, (usize, std::collections::BTreeSet<&str>)> =
        Default::default();
    for change in r.vms.iter().flat_map(|v| &v.pod_changes) {
        let entry = by_cause.entry(&change.cause).or_default();
        entry.0 += 1;
        entry.1.extend(change.paths.iter().map(String::as_str));
    }
    if by_cause.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "Launcher pod changes beyond the memory formula, by cause:"
    );
    for (cause, (vms, paths)) in by_cause {
        let paths: Vec<&str> = paths.into_iter().collect();
        let _ = writeln!(out, "  {cause}: {vms} VM(s): {}", paths.join(", "));
    }
}

/// Exit code 3 when a VM no longer fits on its node or a node is short once all its VMs have
/// restarted.
pub(crate) fn flagged(r: &Rehearsal) -> bool {
    r.no_longer_fit().next().is_some() || r.nodes.iter().any(|n| n.short_after_bytes() > 0)
}

/// The table: one line per VM (largest memory increase first), then one per node.
pub(crate) fn render_rehearsal_table(r: &Rehearsal) -> String {
    let mut out = String::new();
    let scope = r
        .namespace
        .as_deref()
        .map_or("every namespace".to_string(), |n| format!("namespace {n}"));
    let changing = r
        .vms
        .iter()
        .filter(|v| !v.changes.is_empty() || !v.pod_changes.is_empty())
        .count();
    let _ = writeln!(
        out,
        "Upgrade rehearsal {} → {} in {scope}: {} virt-launcher pod(s), {changing} change on their next restart",
        r.from.name(),
        r.to.name(),
        r.vms.len(),
    );
    if !r.vms.is_empty() {
        let vm_w = r
            .vms
            .iter()
            .map(|v| v.namespace.len() + v.vmi.len() + 1)
            .max()
            .unwrap_or(2)
            .max(2);
        let node_w = r
            .vms
            .iter()
            .map(|v| v.node.as_deref().map_or(1, str::len))
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(
            out,
            "{:<vm_w$}  {:<node_w$}  {:<11}  {:>9}  {:<4}  CAUSES",
            "VM", "NODE", "RENDERED BY", "MEMORY Δ", "FITS"
        );
        for v in &r.vms {
            let fits = match v.fits_after {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "?",
            };
            let _ = writeln!(
                out,
                "{:<vm_w$}  {:<node_w$}  {:<11}  {:>9}  {fits:<4}  {}",
                format!("{}/{}", v.namespace, v.vmi),
                v.node.as_deref().unwrap_or("-"),
                v.rendered_by.name(),
                signed(v.memory_request_delta_bytes),
                causes(v)
            );
        }
    }
    pod_changes_by_cause(r, &mut out);
    if !r.nodes.is_empty() {
        let rows: Vec<[String; 6]> = r
            .nodes
            .iter()
            .map(|n| {
                [
                    n.node.clone(),
                    n.allocatable_bytes.map_or("?".into(), human_bytes),
                    human_bytes(n.requested_bytes),
                    human_bytes(n.requested_after_bytes),
                    n.vms.to_string(),
                    match n.short_after_bytes() {
                        0 => "-".into(),
                        b => human_bytes(b),
                    },
                ]
            })
            .collect();
        let header = [
            "NODE",
            "ALLOCATABLE",
            "REQUESTED",
            "AFTER ALL RESTART",
            "VMS",
            "SHORT",
        ];
        let widths: Vec<usize> = (0..6)
            .map(|i| {
                rows.iter()
                    .map(|r| r[i].len())
                    .max()
                    .unwrap_or(0)
                    .max(header[i].len())
            })
            .collect();
        for row in std::iter::once(header.map(String::from)).chain(rows) {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            let _ = writeln!(out, "{}", cells.join("  ").trim_end());
        }
    }
    let blocked: Vec<String> = r
        .no_longer_fit()
        .map(|v| format!("{}/{}", v.namespace, v.vmi))
        .collect();
    if blocked.is_empty() {
        let _ = writeln!(out, "Every VM fits on its node after its next restart.");
    } else {
        let _ = writeln!(
            out,
            "{} VM(s) no longer fit on their node after their next restart: {} (exit code 3)",
            blocked.len(),
            blocked.join(", ")
        );
    }
    for n in r.nodes.iter().filter(|n| n.short_after_bytes() > 0) {
        let _ = writeln!(
            out,
            "node {} is {} short once all its {} VM(s) have restarted (exit code 3)",
            n.node,
            human_bytes(n.short_after_bytes()),
            n.vms
        );
    }
    for s in &r.pods_skipped {
        let _ = writeln!(out, "not rehearsed: {s}");
    }
    for m in &r.missing {
        let _ = writeln!(out, "could not read {}: {}", m.what, m.reason);
    }
    out
}
