//! Phase timeline panel: each VMI phase with the time it was entered and the time spent in it,
//! then the virt-launcher pods.

use super::bar::{self, Segment};
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

/// The glyph of a phase in the bar (phases read apart without colour too).
fn phase_glyph(phase: &str) -> char {
    match phase {
        "Pending" => '░',
        "Scheduling" => '▒',
        "Scheduled" => '▓',
        _ => '█',
    }
}

/// The VMI's phases as a bar to scale, `width` columns wide, then the start backoff when the VM
/// waits one out (`╌`, KubeVirt's `startFailure.retryAfterTimestamp`, vm.go:3361); under it a
/// time axis from the first phase to now (or to the end of the backoff), and the durations.
pub(crate) fn bar_lines(insp: &Inspection, width: usize) -> Vec<Line<'static>> {
    let transitions = insp
        .vmi
        .as_ref()
        .map(|v| v.phase_transitions.as_slice())
        .unwrap_or(&[]);
    let backoff = insp
        .vm
        .as_ref()
        .and_then(|vm| vm.start_failure.as_ref())
        .and_then(|f| f.retry_in_seconds.map(|s| (f.consecutive_fail_count, s)))
        .filter(|(_, s)| *s > 0.0);
    if transitions.is_empty() && backoff.is_none() {
        return Vec::new();
    }
    let mut segments: Vec<Segment> = transitions
        .iter()
        .map(|t| Segment {
            value: t.duration_seconds.max(0.0),
            glyph: phase_glyph(&t.phase),
            style: phase_style(&t.phase),
        })
        .collect();
    let mut legend: Vec<Span<'static>> = transitions
        .iter()
        .map(|t| {
            Span::styled(
                format!(
                    "{} {} {}  ",
                    phase_glyph(&t.phase),
                    t.phase,
                    duration(t.duration_seconds)
                ),
                phase_style(&t.phase),
            )
        })
        .collect();
    if let Some((fails, secs)) = backoff {
        segments.push(Segment {
            value: secs,
            glyph: '╌',
            style: warn(),
        });
        legend.push(Span::styled(
            format!(
                "╌ backoff after {fails} failed start(s), {} left",
                duration(secs)
            ),
            warn(),
        ));
    }
    let total: f64 = segments.iter().map(|s| s.value).sum();
    let end = if backoff.is_some() {
        "next start"
    } else {
        "now"
    };
    let right = format!("{} → {end}", duration(total));
    let gap = width.saturating_sub(3 + right.chars().count());
    vec![
        super::fit::row(bar::line(&segments, total, width)),
        super::fit::row(Line::styled(
            format!("0 s{}{right}", " ".repeat(gap)),
            dim(),
        )),
        Line::from(legend),
    ]
}

/// The panel's lines for a panel `width` columns wide inside its border: the bar, then
/// [`lines`].
pub(crate) fn lines_for_width(insp: &Inspection, width: usize) -> Vec<Line<'static>> {
    let mut out = bar_lines(insp, width);
    out.extend(lines(insp));
    out
}

/// The panel's lines without the bar.
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
    let width = usize::from(area.width.saturating_sub(2));
    super::draw_panel(
        frame,
        area,
        Panel::Timeline,
        lines_for_width(insp, width),
        view,
    );
}
