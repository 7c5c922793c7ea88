//! Blockers panel: the chain VM → VMI → launcher pod → DataVolume/PVC → node, deepest failure
//! first, then every piece the inspector could not read, with the reason.

use super::state::{Panel, ViewState};
use super::text::{bad, dim, field_styled, good, note, warn};
use crate::inspect::model::Inspection;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// The panel's lines.
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    if insp.blockers.is_empty() {
        out.push(Line::styled("nothing blocks this VM", good()));
    }
    let mut blockers: Vec<_> = insp.blockers.iter().collect();
    blockers.sort_by_key(|b| std::cmp::Reverse(b.depth));
    for b in blockers {
        out.push(Line::from(vec![
            Span::styled(format!("{} ", b.object), bad()),
            Span::styled(format!("{}: ", b.reason), bad()),
            Span::raw(b.message.clone()),
        ]));
        if let Some(fix) = &b.fix {
            out.push(field_styled("  fix", fix.clone(), warn()));
        }
    }
    for m in &insp.missing {
        out.push(Line::from(vec![
            Span::styled("not read: ", dim()),
            Span::styled(format!("{}: ", m.what), warn()),
            Span::raw(m.reason.clone()),
        ]));
    }
    if insp.vm.is_none() {
        out.push(note("the VirtualMachine does not exist"));
    }
    out
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    super::draw_panel(frame, area, Panel::Blockers, lines(insp), view);
}
