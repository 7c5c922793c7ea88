//! The replay report as text.

use super::{ReplayReport, Step, Verdict};
use std::fmt::Write as _;

fn verdict(v: Verdict) -> &'static str {
    match v {
        Verdict::Same => "same",
        Verdict::Differ => "DIFFER",
        Verdict::NotReplayed => "not replayed",
    }
}

fn step_lines(out: &mut String, s: &Step) {
    let actions = |a: &[String]| {
        if a.is_empty() {
            "nothing".to_string()
        } else {
            a.join(", ")
        }
    };
    let _ = write!(
        out,
        "  {} {:<3} {:<12} ",
        s.at.format("%H:%M:%S%.3f"),
        s.controller,
        verdict(s.verdict)
    );
    let _ = match s.verdict {
        Verdict::Differ => writeln!(
            out,
            "recorded: {}; replayed: {}",
            actions(&s.recorded),
            actions(&s.replayed)
        ),
        _ => writeln!(out, "{}", actions(&s.recorded)),
    };
    for why in &s.why {
        let _ = writeln!(out, "      why: {why}");
    }
    if !s.writes.is_empty() {
        let differ = if s.writes_differ {
            "  (not the decision's writes)"
        } else {
            ""
        };
        let _ = writeln!(out, "      writes: {}{differ}", s.writes.join(", "));
    }
    if let Some(note) = &s.note {
        let _ = writeln!(out, "      note: {note}");
    }
}

/// `replay`'s text: the counts, then per VM each reconcile with its verdict, reasons and
/// writes, then the recorded leadership terms and Events.
pub fn render_text(r: &ReplayReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "replayed {} reconciles of {} VM keys from {} lines: {} same, {} differ, {} not replayed",
        r.reconciles,
        r.vms.len(),
        r.lines,
        r.same,
        r.differ,
        r.not_replayed
    );
    if r.broken_versions > 0 {
        let _ = writeln!(
            out,
            "{} object changes could not be applied (their earlier version is not in the recording)",
            r.broken_versions
        );
    }
    for vm in &r.vms {
        let _ = writeln!(out, "\nVM {}", vm.key);
        for s in &vm.steps {
            step_lines(&mut out, s);
        }
    }
    if !r.timeline.is_empty() {
        let _ = writeln!(out, "\nLeadership and Events:");
        for t in &r.timeline {
            let _ = writeln!(out, "  {t}");
        }
    }
    out
}
