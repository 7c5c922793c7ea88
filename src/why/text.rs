//! The plain-text form of a [`WhyReport`] (the default output of `why vm/NAME`).

use super::evidence::stamp;
use super::model::{Link, Run, WhyReport};
use std::fmt::Write;

fn links(out: &mut String, indent: &str, chain: &[Link]) {
    for l in chain {
        let _ = writeln!(out, "{indent}- {}", l.claim);
        for e in &l.evidence {
            let _ = writeln!(out, "{indent}    · {e}");
        }
    }
}

fn run(out: &mut String, i: usize, r: &Run) {
    let _ = writeln!(
        out,
        "{}. VMI {}{}  started {}{}",
        i + 1,
        r.vmi_uid.as_deref().unwrap_or("(uid unknown)"),
        if r.vmi_exists { "" } else { " (deleted)" },
        stamp(r.started),
        r.node
            .as_deref()
            .map(|n| format!("  on {n}"))
            .unwrap_or_default(),
    );
    if !r.pods.is_empty() {
        let _ = writeln!(out, "   pods: {}", r.pods.join(", "));
    }
    if !r.phases.is_empty() {
        let phases: Vec<String> = r
            .phases
            .iter()
            .map(|p| format!("{} {}", p.phase, p.at.format("%H:%M:%S")))
            .collect();
        let _ = writeln!(out, "   phases: {}", phases.join(" → "));
    }
    let Some(end) = &r.end else {
        let _ = writeln!(
            out,
            "   still {}",
            r.final_phase.as_deref().unwrap_or("starting")
        );
        return;
    };
    let _ = writeln!(out, "   ended {}: {:?}", stamp(end.at), end.cause);
    links(out, "   ", &end.chain);
    let _ = writeln!(out, "   => {}", end.sentence);
    for d in &end.defects {
        let _ = writeln!(
            out,
            "   known defect {}: {} ({}; fixed: {})",
            d.id, d.message, d.upstream, d.fixed_in
        );
    }
    for u in &end.unknown {
        let _ = writeln!(out, "   not known: {u}");
    }
}

/// Render the report as text.
pub(crate) fn render(r: &WhyReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "VM {}/{}  runStrategy {}  status {}  (as of {})",
        r.namespace,
        r.name,
        r.run_strategy,
        r.printable_status.as_deref().unwrap_or("-"),
        stamp(Some(r.now))
    );
    let _ = writeln!(out, "{}", r.leader);
    let _ = writeln!(out, "\nRuns, oldest first:");
    if r.runs.is_empty() {
        let _ = writeln!(out, "  (none known)");
    }
    for (i, run_) in r.runs.iter().enumerate() {
        run(&mut out, i, run_);
    }
    let _ = writeln!(out, "\nNow:");
    links(&mut out, "", &r.now_chain);
    for d in &r.defects {
        let _ = writeln!(
            out,
            "known defect {}: {} ({}; fixed: {})",
            d.id, d.message, d.upstream, d.fixed_in
        );
    }
    if !r.unknown.is_empty() || !r.missing.is_empty() {
        let _ = writeln!(out, "\nNot known:");
        for u in &r.unknown {
            let _ = writeln!(out, "- {u}");
        }
        for m in &r.missing {
            let _ = writeln!(out, "- {}: {}", m.what, m.reason);
        }
    }
    out
}
