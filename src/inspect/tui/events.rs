//! Events panel: the VM's, VMI's, pods' and DataVolumes' events merged in time order (like
//! `kubectl events --for`, across all of them), newest last.

use super::state::{Panel, ViewState};
use super::text::{clock, dim, note, warn};
use crate::inspect::model::Inspection;
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// The panel's lines.
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    if insp.events.is_empty() {
        return vec![note("no events")];
    }
    let mut events: Vec<_> = insp.events.iter().collect();
    events.sort_by_key(|e| e.time);
    events
        .into_iter()
        .map(|e| {
            let time = e.time.map(clock).unwrap_or_else(|| "--:--:--".into());
            let count = if e.count > 1 {
                format!(" (x{})", e.count)
            } else {
                String::new()
            };
            let kind_style = if e.type_ == "Warning" { warn() } else { dim() };
            Line::from(vec![
                Span::styled(format!("{time} "), dim()),
                Span::styled(format!("{} ", e.reason), kind_style),
                Span::styled(format!("{} ", e.object), dim()),
                Span::raw(format!("{}{count}", e.message)),
            ])
        })
        .collect()
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    super::draw_panel(frame, area, Panel::Events, lines(insp), view);
}
