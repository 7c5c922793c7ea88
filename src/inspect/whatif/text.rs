//! The what-if's view model: its text as kinded lines ([`TextLine`]), one function per section,
//! which the plain text prints and the terminal UI styles.

use super::{DecisionSide, WhatIf, human_bytes};
use serde_json::Value;
fn opt_json(v: &Option<Value>) -> String {
    match v {
        None => "(unset)".into(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn delta_text(name: &str, d: Option<i64>) -> String {
    match d {
        Some(0) => "  (unchanged)".to_string(),
        Some(d) if name.ends_with(".cpu") => format!("  ({d:+}m)"),
        Some(d) if d > 0 => format!("  (+{})", human_bytes(d)),
        Some(d) => format!("  ({})", human_bytes(d)),
        None => String::new(),
    }
}

/// What a line of the what-if text is: the terminal UI styles it by this, the plain text
/// ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TextKind {
    /// The first line (`WHAT-IF ns/name`).
    Title,
    /// A section heading (`DECISION`); a blank line comes before it.
    Heading,
    /// An ordinary line.
    Plain,
    /// A line that says nothing happens (`no actions`, `none`, `RestartRequired=False`).
    Quiet,
    /// Good news (the pod fits).
    Good,
    /// Bad news (a sync error, an unschedulable pod).
    Bad,
    /// What the change leads to (OUTCOME, `RestartRequired=True`).
    Notice,
}

/// One line of the what-if text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TextLine {
    /// What the line is.
    pub kind: TextKind,
    /// The text, indented as in [`render_text`].
    pub text: String,
}

fn push(out: &mut Vec<TextLine>, kind: TextKind, text: impl Into<String>) {
    out.push(TextLine {
        kind,
        text: text.into(),
    });
}

fn side_lines(out: &mut Vec<TextLine>, label: &str, s: &DecisionSide) {
    push(out, TextKind::Plain, format!("  {label:<6} {}", s.summary));
    if s.actions.is_empty() {
        push(out, TextKind::Quiet, "         no actions");
    }
    for a in &s.actions {
        push(
            out,
            TextKind::Plain,
            format!("         {} {}: {}", a.controller, a.kind, a.why),
        );
    }
    push(
        out,
        if s.restart_required {
            TextKind::Notice
        } else {
            TextKind::Quiet
        },
        format!(
            "         RestartRequired={}{}",
            if s.restart_required { "True" } else { "False" },
            s.printable_status
                .as_ref()
                .map(|p| format!("  printableStatus {p}"))
                .unwrap_or_default()
        ),
    );
    if let Some(e) = &s.sync_error {
        push(out, TextKind::Bad, format!("         sync error: {e}"));
    }
}

/// The what-if text line by line, each with its [`TextKind`]: [`render_text`] joins them, the
/// terminal UI's What-if panel styles them.
pub(crate) fn text_lines(w: &WhatIf) -> Vec<TextLine> {
    use TextKind::*;
    let mut out = Vec::new();
    push(
        &mut out,
        Title,
        format!("WHAT-IF {}/{}  (nothing is written)", w.namespace, w.name),
    );
    for c in &w.change {
        push(&mut out, Plain, format!("  {c}"));
    }
    push(&mut out, Heading, "CHANGED FIELDS");
    if w.changed_fields.is_empty() {
        push(&mut out, Quiet, "  none");
    }
    for f in &w.changed_fields {
        push(
            &mut out,
            Plain,
            format!(
                "  {}: {} → {}",
                f.path,
                opt_json(&f.before),
                opt_json(&f.after)
            ),
        );
    }
    push(&mut out, Heading, "DECISION");
    side_lines(&mut out, "now:", &w.before);
    side_lines(&mut out, "after:", &w.after);
    push(&mut out, Heading, "OUTCOME");
    for o in &w.outcome {
        push(&mut out, Notice, format!("  {o}"));
    }
    push(&mut out, Heading, "ROLLOUT");
    push(&mut out, Plain, format!("  {}", w.rollout.summary));
    if let Some(p) = &w.pod {
        push(
            &mut out,
            Heading,
            format!(
                "LAUNCHER POD  {} → rendered from the changed VM",
                p.before_source
            ),
        );
        if let (Some(b), Some(a)) = (p.memory_request_before_bytes, p.memory_request_after_bytes) {
            push(
                &mut out,
                if a == b { Quiet } else { Plain },
                format!(
                    "  compute memory request: {} → {}{}",
                    human_bytes(b),
                    human_bytes(a),
                    if a == b {
                        "  (unchanged)".to_string()
                    } else {
                        delta_text("memory", Some(a - b))
                    }
                ),
            );
        }
        push(
            &mut out,
            Plain,
            format!(
                "  overhead: {} → {}{}",
                human_bytes(p.overhead_before_bytes),
                human_bytes(p.overhead_after_bytes),
                delta_text(
                    "memory",
                    Some(p.overhead_after_bytes - p.overhead_before_bytes)
                )
            ),
        );
        for t in &p.terms {
            push(
                &mut out,
                Plain,
                format!(
                    "    term {}: {} → {}{}  {}",
                    t.name,
                    human_bytes(t.before_bytes),
                    human_bytes(t.after_bytes),
                    delta_text("memory", Some(t.delta_bytes)),
                    t.reason
                ),
            );
        }
        for (title, list) in [
            ("compute", &p.resources),
            ("label", &p.labels),
            ("annotation", &p.annotations),
        ] {
            for c in list {
                push(
                    &mut out,
                    Plain,
                    format!(
                        "  {title} {}: {} → {}{}",
                        c.name,
                        c.before.as_deref().unwrap_or("(unset)"),
                        c.after.as_deref().unwrap_or("(unset)"),
                        if title == "compute" {
                            delta_text(&c.name, c.delta)
                        } else {
                            String::new()
                        }
                    ),
                );
            }
        }
    }
    if let Some(f) = &w.fit {
        push(&mut out, Heading, "FIT");
        push(
            &mut out,
            if f.fits { Good } else { Bad },
            format!("  {}", f.summary),
        );
        for n in f.nodes.iter().filter(|n| !n.fits) {
            push(
                &mut out,
                Plain,
                format!("  {}: {}", n.name, n.problems.join("; ")),
            );
        }
    }
    if !w.missing.is_empty() {
        push(&mut out, Heading, "MISSING");
        for m in &w.missing {
            push(&mut out, Quiet, format!("  {}: {}", m.what, m.reason));
        }
    }
    out
}

/// The plain-text what-if (`inspect vm/NAME --what-if …` without `-o`): [`text_lines`], a
/// blank line before each heading.
pub(crate) fn render_text(w: &WhatIf) -> String {
    let mut out = String::new();
    for line in text_lines(w) {
        if line.kind == TextKind::Heading {
            out.push('\n');
        }
        out.push_str(&line.text);
        out.push('\n');
    }
    out
}
