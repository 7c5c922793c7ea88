//! Expectations panel: this VM's and VMI's pending creations and deletions, their age and when
//! they expire (KubeVirt's `ControllerExpectations`, 5 minutes).

use super::state::{Panel, ViewState};
use super::text::{dim, duration, good, note, pad, rpad, warn};
use crate::inspect::model::{ControllerSourceKind, Inspection};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// The panel's lines.
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    if !insp.controller.expectations_exposed {
        return vec![note(match insp.controller.kind {
            ControllerSourceKind::Metrics => {
                "not exposed by this controller (KubeVirt's virt-controller)"
            }
            _ => "not available: the controller's view could not be read",
        })];
    }
    if insp.expectations.is_empty() {
        return vec![Line::styled(
            "none pending: every expectation is satisfied",
            good(),
        )];
    }
    let mut out = vec![super::fit::row(Line::styled(
        format!(
            "{} {} {} {} {}  {}",
            pad("STORE", 13),
            pad("KEY", 22),
            rpad("ADDS", 4),
            rpad("DELS", 4),
            rpad("AGE", 7),
            "EXPIRES"
        ),
        dim(),
    ))];
    for e in &insp.expectations {
        let expires = if e.satisfied && e.expires_in_seconds <= 0.0 {
            "expired (satisfied)".to_string()
        } else if e.satisfied {
            "satisfied".to_string()
        } else {
            format!("in {}", duration(e.expires_in_seconds))
        };
        let text = format!(
            "{} {} {} {} {}  ",
            pad(&e.store, 13),
            pad(&e.key, 22),
            rpad(&e.adds.to_string(), 4),
            rpad(&e.dels.to_string(), 4),
            rpad(&duration(e.age_seconds), 7),
        );
        out.push(super::fit::row(Line::from(vec![
            Span::raw(text),
            Span::styled(expires, if e.satisfied { good() } else { warn() }),
        ])));
        for d in &e.expected_deletions {
            out.push(note(format!("  deletion expected: {d}")));
        }
    }
    out
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    super::draw_panel(frame, area, Panel::Expectations, lines(insp), view);
}
