//! Next decision panel: what the VM and VMI controllers would do next on the gathered state and
//! why (their pure decision functions, with KubeVirt source lines), the wait they are in, why
//! the VM shows its printableStatus, and the leader's last reconcile.

use super::state::{Panel, ViewState};
use super::text::{bad, clock, dim, field, field_styled, note, warn};
use crate::inspect::model::Inspection;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};

/// The panel's lines.
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    match &insp.next_decision {
        None => out.push(note("no decision computed (see Blockers)")),
        Some(d) => {
            out.push(Line::styled(
                d.summary.clone(),
                ratatui::style::Style::new().add_modifier(Modifier::BOLD),
            ));
            if let Some(w) = &d.waiting {
                out.push(field_styled("waiting", w.clone(), warn()));
            }
            if let Some(dis) = &d.disagreement {
                out.push(field_styled("disagrees", dis.clone(), bad()));
            }
            if d.actions.is_empty() {
                out.push(note("no action planned"));
            }
            for a in &d.actions {
                out.push(Line::from(vec![
                    Span::raw(format!("{} {}: ", a.controller, a.kind)),
                    Span::styled(a.why.clone(), dim()),
                ]));
            }
            for e in &d.explanation {
                out.push(note(format!("  {e}")));
            }
        }
    }
    if let Some(p) = &insp.printable_status_reason {
        let stored = match &p.stored {
            Some(s) if *s != p.computed => format!(" (stored: {s})"),
            _ => String::new(),
        };
        out.push(field(
            "printableStatus",
            format!("{}{stored}: {}", p.computed, p.rule),
        ));
        if !p.inputs.is_empty() {
            let inputs: Vec<String> = p.inputs.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push(note(format!("  inputs: {}", inputs.join(" "))));
        }
    }
    for r in &insp.last_reconciles {
        let what = if r.actions.is_empty() {
            "no action".to_string()
        } else {
            r.actions.join(", ")
        };
        let line = format!(
            "last {} reconcile {} {}: {what}",
            r.controller,
            clock(r.at),
            r.result
        );
        out.push(match &r.error {
            Some(e) => Line::styled(format!("{line}; error: {e}"), bad()),
            None => note(line),
        });
    }
    out
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    super::draw_panel(frame, area, Panel::Decision, lines(insp), view);
}
