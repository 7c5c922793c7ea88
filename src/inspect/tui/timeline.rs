//! Phase timeline panel: each VMI phase with the time it was entered and the time spent in it,
//! then the virt-launcher pods.

use super::state::{Panel, ViewState};
use super::text::{bad, clock, dim, duration, good, note, pad, warn};
use crate::inspect::model::Inspection;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

fn phase_style(phase: &str) -> ratatui::style::Style {
    match phase {
        "Running" | "Succeeded" => good(),
        "Failed" => bad(),
        _ => warn(),
    }
}

/// The panel's lines.
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    match &insp.vmi {
        None => out.push(note("no VMI")),
        Some(vmi) => {
            if vmi.phase_transitions.is_empty() {
                let phase = if vmi.phase.is_empty() {
                    "(no phase yet)"
                } else {
                    &vmi.phase
                };
                out.push(Line::from(vec![
                    Span::styled("phase: ", dim()),
                    Span::styled(phase.to_string(), phase_style(&vmi.phase)),
                    Span::styled("  (no phase transition timestamps)", dim()),
                ]));
            }
            let last = vmi.phase_transitions.len().saturating_sub(1);
            for (i, t) in vmi.phase_transitions.iter().enumerate() {
                let arrow = if i == 0 { "  " } else { "→ " };
                let spent = if i == last {
                    format!("{} so far", duration(t.duration_seconds))
                } else {
                    duration(t.duration_seconds)
                };
                out.push(Line::from(vec![
                    Span::raw(arrow),
                    Span::styled(pad(&t.phase, 11), phase_style(&t.phase)),
                    Span::raw(format!(" {}  ", clock(t.timestamp))),
                    Span::styled(spent, dim()),
                ]));
            }
            if let Some(node) = &vmi.node_name {
                out.push(note(format!("on node {node}")));
            }
            if let Some(d) = vmi.deletion_timestamp {
                out.push(Line::styled(
                    format!("being deleted since {}", clock(d)),
                    warn(),
                ));
            }
        }
    }
    for pod in &insp.pods {
        let phase = pod.phase.clone().unwrap_or_else(|| "-".into());
        let mut s = format!("pod {} {phase}", pod.name);
        if let Some(node) = &pod.node_name {
            s.push_str(&format!(" on {node}"));
        }
        if let Some(r) = &pod.compute_waiting_reason {
            s.push_str(&format!(", compute waiting: {r}"));
        }
        if let Some(r) = &pod.compute_last_termination_reason {
            s.push_str(&format!(", last terminated: {r}"));
        }
        out.push(note(s));
    }
    out
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    super::draw_panel(frame, area, Panel::Timeline, lines(insp), view);
}
