//! What-if panel: the result of a change typed after `w` ([`crate::inspect::whatif::what_if`]),
//! drawn over the VM view's panels. The text is [`crate::inspect::whatif::text_lines`], the same
//! lines `inspect --what-if` prints, styled by their kind; and the input line it is typed in.

use super::bar::Segment;
use super::text::{bad, dim, good, mib, warn};
use crate::inspect::whatif::{PodDiff, TextKind, WhatIf, text_lines};
use ratatui::Frame;
use ratatui::layout::{Position, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Paragraph, Wrap};

/// The what-if of the VM view (`w`): the input line, the evaluation in flight, the result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WhatIfState {
    /// The input line is open: keys edit [`WhatIfState::text`].
    pub editing: bool,
    /// The text typed (kept after Enter and Esc for the next `w` on this VM; cleared on leaving it).
    pub text: String,
    /// Why the text was not evaluated (shown after it in the input line).
    pub error: Option<String>,
    /// An evaluation is in flight.
    pub pending: bool,
    /// The last evaluation failed to read the cluster (shown in the status line).
    pub gather_error: Option<String>,
    /// The last result; shown over the panels while [`WhatIfState::open`].
    pub result: Option<WhatIf>,
    /// The What-if panel is shown.
    pub open: bool,
    /// The What-if panel's scroll offset (first row shown).
    pub scroll: u16,
}

/// The input line's prompt.
pub(crate) const PROMPT: &str = "what if: ";

/// The panel's lines: the what-if text, a blank line before each heading.
pub(crate) fn lines(w: &WhatIf) -> Vec<Line<'static>> {
    let mut out = Vec::new();
    for l in text_lines(w) {
        let style = match l.kind {
            TextKind::Title => Style::new().add_modifier(Modifier::BOLD),
            TextKind::Heading => {
                out.push(Line::raw(""));
                super::text::accent().add_modifier(Modifier::BOLD)
            }
            TextKind::Plain => Style::new(),
            TextKind::Quiet => dim(),
            TextKind::Good => good(),
            TextKind::Bad => bad(),
            TextKind::Notice => warn(),
        };
        out.push(Line::styled(l.text, style));
    }
    out
}

/// The launcher pod's memory request now and after the change as two bars to one scale: the
/// guest's share (`█`, the request less the overhead) and the overhead (`▓`), each with its sum.
fn pod_bars(pod: &PodDiff, width: usize) -> Vec<Line<'static>> {
    let sides = [
        (
            "now  ",
            pod.memory_request_before_bytes,
            pod.overhead_before_bytes,
        ),
        (
            "after",
            pod.memory_request_after_bytes,
            pod.overhead_after_bytes,
        ),
    ];
    let scale = sides
        .iter()
        .map(|(_, r, o)| r.unwrap_or(*o).max(*o))
        .max()
        .unwrap_or(0) as f64;
    // The label (8 columns) and the longest sums: " 1234.25 Mi (overhead 1234.25 Mi)".
    let bar_width = width.saturating_sub(8 + 34).max(10);
    let mut out = Vec::new();
    for (label, request, overhead) in sides {
        let Some(request) = request else { continue };
        let segments = [
            Segment {
                value: (request - overhead).max(0) as f64,
                glyph: '█',
                style: Style::new(),
            },
            Segment {
                value: overhead as f64,
                glyph: '▓',
                style: super::text::accent(),
            },
        ];
        let bar = super::bar::line(&segments, scale, bar_width);
        let pad = " ".repeat(bar_width.saturating_sub(bar.width()));
        let mut spans = vec![Span::styled(format!("  {label} "), dim())];
        spans.extend(bar.spans);
        spans.push(Span::raw(format!(
            "{pad} {} Mi (overhead {} Mi)",
            mib(request),
            mib(overhead)
        )));
        out.push(Line::from(spans));
    }
    out
}

/// The panel's lines for a panel `width` columns wide inside its border: [`lines`] with the
/// launcher pod's memory bars under its heading, each line wider than the panel wrapped under
/// its own text ([`hanging`]) rather than at column 0.
pub(crate) fn lines_for_width(w: &WhatIf, width: usize) -> Vec<Line<'static>> {
    let mut out = lines(w);
    if let Some(pod) = &w.pod {
        let heading = out.iter().position(|l| {
            l.spans
                .first()
                .is_some_and(|s| s.content.starts_with("LAUNCHER POD"))
        });
        if let Some(at) = heading {
            out.splice(at + 1..at + 1, pod_bars(pod, width));
        }
    }
    out.into_iter()
        .flat_map(|l| super::fit::wrap_hanging(&hanging(l), width))
        .collect()
}

/// `line` (one span) split after its indent and its `label:` if it starts with one
/// (`  now:   VMI Running…`), so that [`super::fit::wrap_hanging`] continues it under the text
/// after them; other lines are kept.
fn hanging(line: Line<'static>) -> Line<'static> {
    let [span] = line.spans.as_slice() else {
        return line;
    };
    let text = span.content.as_ref();
    let indent = text.len() - text.trim_start().len();
    let rest = &text[indent..];
    let label = match rest.split_once(' ') {
        Some((word, _)) if word.ends_with(':') => word.len(),
        _ => 0,
    };
    let after = &rest[label..];
    let at = indent + label + (after.len() - after.trim_start().len());
    if at == 0 || at >= text.len() {
        return line;
    }
    let (head, tail) = text.split_at(at);
    Line::from(vec![
        Span::styled(head.to_string(), span.style),
        Span::styled(tail.to_string(), span.style),
    ])
    .style(line.style)
}

/// Where the panel goes in the VM view's body (everything below the header line).
pub(crate) fn panel_rect(body: Rect) -> Rect {
    Rect::new(
        body.x,
        body.y.saturating_add(1).min(body.bottom()),
        body.width,
        body.height.saturating_sub(1),
    )
}

/// How far the panel scrolls on a terminal of `size` (columns, rows): until its last row is the
/// first one shown, as the other panels.
pub(crate) fn max_scroll(w: &WhatIf, size: (u16, u16)) -> u16 {
    let inner = size.0.saturating_sub(2);
    super::wrapped_height(&lines_for_width(w, usize::from(inner)), inner).saturating_sub(1)
}

/// Draw the panel over `body` (the VM view below the status line).
pub(crate) fn render(frame: &mut Frame, body: Rect, w: &WhatIf, scroll: u16) {
    let rect = panel_rect(body);
    let lines = lines_for_width(w, usize::from(rect.width.saturating_sub(2)));
    let rows = super::wrapped_height(&lines, rect.width.saturating_sub(2));
    let scroll = scroll.min(rows.saturating_sub(1));
    let mut title = format!(
        " What-if {}/{} at {} ",
        w.namespace,
        w.name,
        super::text::clock(w.generated_at)
    );
    if scroll > 0 || rows > rect.height.saturating_sub(2) {
        title.push_str(&format!("[{}/{}] ", scroll + 1, rows));
    }
    let cyan = super::text::accent();
    let block = Block::bordered()
        .border_type(BorderType::Thick)
        .border_style(cyan)
        .title(Span::styled(title, cyan.add_modifier(Modifier::BOLD)));
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0)),
        rect,
    );
}

fn error_text(state: &WhatIfState) -> Option<String> {
    state.error.as_ref().map(|e| format!("✗ {e}"))
}

/// The error fits on the input line after the text.
fn error_inline(state: &WhatIfState, width: u16) -> bool {
    error_text(state).is_none_or(|e| {
        PROMPT.len() + state.text.chars().count() + 3 + e.chars().count() <= usize::from(width)
    })
}

/// Rows the input takes: one, and the rows of an error too long to follow the text (at most
/// four in all).
pub(crate) fn input_height(state: &WhatIfState, width: u16) -> u16 {
    if error_inline(state, width) {
        return 1;
    }
    let error = Line::raw(error_text(state).unwrap_or_default());
    (1 + super::wrapped_height(&[error], width)).min(4)
}

/// The input line: the prompt, the text (its end, when it is wider than the line), and why it
/// was not evaluated, after it or on the rows below; the terminal cursor after the text.
pub(crate) fn input_line(frame: &mut Frame, area: Rect, state: &WhatIfState) {
    let width = usize::from(area.width);
    let room = width.saturating_sub(PROMPT.len() + 1).max(1);
    let chars: Vec<char> = state.text.chars().collect();
    let shown: String = if chars.len() > room {
        std::iter::once('…')
            .chain(chars[chars.len() + 1 - room..].iter().copied())
            .collect()
    } else {
        state.text.clone()
    };
    let cursor_x = PROMPT.len() + shown.chars().count();
    let mut first = vec![
        Span::styled(PROMPT, super::text::accent().add_modifier(Modifier::BOLD)),
        Span::raw(shown),
    ];
    let mut lines = Vec::new();
    match error_text(state) {
        Some(e) if error_inline(state, area.width) => {
            first.push(Span::raw("  "));
            first.push(Span::styled(e, bad()));
            lines.push(Line::from(first));
        }
        Some(e) => {
            lines.push(Line::from(first));
            lines.push(Line::styled(e, bad()));
        }
        None => lines.push(Line::from(first)),
    }
    frame.render_widget(Paragraph::new(lines).wrap(Wrap { trim: false }), area);
    let x = area
        .x
        .saturating_add(u16::try_from(cursor_x).unwrap_or(u16::MAX))
        .min(area.right().saturating_sub(1));
    frame.set_cursor_position(Position::new(x, area.y));
}

/// The status line's part for the what-if: in flight, or why the reads failed.
pub(crate) fn status_spans(w: &WhatIfState) -> Vec<Span<'static>> {
    if w.pending {
        vec![Span::styled("what-if…  ", warn())]
    } else if let Some(e) = &w.gather_error {
        vec![Span::styled(format!("what-if: {e}  "), bad())]
    } else {
        Vec::new()
    }
}
