//! Queues panel: each work queue's depth and retries, and where this VM's key is in it.

use super::state::{Panel, ViewState};
use super::text::{dim, duration, note, pad, rpad, warn};
use crate::inspect::model::{Inspection, KeyState, QueueView};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};

/// One line per queue: `virt-controller-vm   depth 0  retries 0  key idle`, and a second when
/// the queue's shared rate limit makes every failing key wait a second or more.
pub(crate) fn queue_lines(queues: &[QueueView]) -> Vec<Line<'static>> {
    if queues.is_empty() {
        return vec![note("no queue figures (see Blockers)")];
    }
    let mut out = vec![super::fit::row(Line::styled(
        format!(
            "{} {} {}  {}",
            pad("QUEUE", 20),
            rpad("DEPTH", 5),
            rpad("RETRIES", 7),
            "THIS KEY"
        ),
        dim(),
    ))];
    for q in queues {
        let key = match (q.key_state, q.key_seconds) {
            (None, _) => "-".to_string(),
            (Some(KeyState::Idle), _) => "idle".to_string(),
            (Some(KeyState::Queued), Some(s)) => format!("queued {}", duration(s)),
            (Some(KeyState::Queued), None) => "queued".to_string(),
            (Some(KeyState::InFlight), Some(s)) => format!("in flight {}", duration(s)),
            (Some(KeyState::InFlight), None) => "in flight".to_string(),
            (Some(KeyState::Waiting), Some(s)) => format!("waiting, ready in {}", duration(s)),
            (Some(KeyState::Waiting), None) => "waiting".to_string(),
        };
        let mut spans = vec![Span::raw(format!(
            "{} {} {}  ",
            pad(&q.name, 20),
            rpad(&q.depth.to_string(), 5),
            rpad(&q.retries.to_string(), 7),
        ))];
        let busy = !matches!(q.key_state, None | Some(KeyState::Idle));
        spans.push(if busy {
            Span::styled(key, warn())
        } else {
            Span::raw(key)
        });
        if let Some(l) = q.longest_running_processor_seconds {
            spans.push(Span::styled(
                format!("  longest running {}", duration(l)),
                dim(),
            ));
        }
        out.push(super::fit::row(Line::from(spans)));
        if let Some(w) = q.rate_limiter_wait_seconds.filter(|w| *w >= 1.0) {
            out.push(Line::styled(
                format!(
                    "  shared rate limit: a key failing now waits {}",
                    duration(w)
                ),
                warn(),
            ));
        }
    }
    out
}

/// The panel's lines.
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    queue_lines(&insp.queues)
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    super::draw_panel(frame, area, Panel::Queues, lines(insp), view);
}
