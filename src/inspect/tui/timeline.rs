//! Phase timeline panel: each VMI phase with the time it was entered and the time spent in it,
//! then the virt-launcher pods.

use super::bar::{self, Segment};
use super::state::{Panel, ViewState};
use super::text::{bad, clock, dim, duration, good, note, pad, warn};
use crate::inspect::history::History;
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
    ]
    .into_iter()
    .chain(super::fit::flow(legend, width))
    .collect()
}

/// The panel's lines for a panel `width` columns wide inside its border: the bar, then
/// [`lines`].
pub(crate) fn lines_for_width(
    insp: &Inspection,
    history: &History,
    width: usize,
) -> Vec<Line<'static>> {
    let mut out = if history.runs().len() > 1 {
        runs::lines(insp, history, width)
    } else {
        bar_lines(insp, width)
    };
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
pub(crate) fn render(
    frame: &mut Frame,
    area: Rect,
    insp: &Inspection,
    history: &History,
    view: &ViewState,
) {
    let width = usize::from(area.width.saturating_sub(2));
    super::draw_panel(
        frame,
        area,
        Panel::Timeline,
        lines_for_width(insp, history, width),
        view,
    );
}

/// The VM's VMIs the inspector saw while it ran, one bar each on one time axis (issue 45):
/// each bar split by phase, the restarts (`↻`, a VMI created after the one before) and the start
/// backoffs the VM waited out between them (`╌`, `status.startFailure`, vm.go:3361) marked on
/// the row below, the time axis under it, then each run's times in text.
mod runs {
    use super::super::fit;
    use super::super::text::accent;
    use super::*;
    use crate::inspect::history::{History, VmiRun};
    use chrono::{DateTime, Utc};
    use ratatui::style::Style;

    /// Columns of the run labels (`#1  `).
    const LABEL: usize = 4;

    fn secs(d: chrono::TimeDelta) -> f64 {
        d.num_milliseconds() as f64 / 1000.0
    }

    /// The time axis: `width` columns from `t0` over `span` seconds.
    struct Axis {
        t0: DateTime<Utc>,
        span: f64,
        width: usize,
    }

    impl Axis {
        fn x(&self, t: DateTime<Utc>) -> f64 {
            (secs(t - self.t0) / self.span * self.width as f64).clamp(0.0, self.width as f64)
        }

        /// The columns from `from` to `to`: at least one.
        fn cols(&self, from: DateTime<Utc>, to: DateTime<Utc>) -> std::ops::Range<usize> {
            let a = (self.x(from).floor() as usize).min(self.width.saturating_sub(1));
            let b = (self.x(to).round() as usize).clamp(a + 1, self.width);
            a..b
        }
    }

    fn cells_line(label: String, cells: Vec<(char, Style)>) -> Line<'static> {
        let mut spans: Vec<Span<'static>> = Vec::new();
        for (glyph, style) in cells {
            match spans.last_mut() {
                Some(last) if last.style == style => last.content.to_mut().push(glyph),
                _ => spans.push(Span::styled(glyph.to_string(), style)),
            }
        }
        spans.insert(0, Span::styled(label, dim()));
        fit::row(Line::from(spans))
    }

    fn glyph(phase: &str) -> char {
        if phase == "Failed" {
            '✗'
        } else {
            phase_glyph(phase)
        }
    }

    /// The end of a run's bar: now for the VMI that exists, else the last gather that saw it.
    fn end_of(run: &VmiRun, history: &History, now: DateTime<Utc>) -> DateTime<Utc> {
        if history.current_run() == Some(run.uid.as_str()) {
            now
        } else {
            run.last_seen
        }
    }

    fn run_bar(run: &VmiRun, end: DateTime<Utc>, axis: &Axis) -> Vec<(char, Style)> {
        let mut cells = vec![(' ', Style::new()); axis.width];
        for (j, t) in run.transitions.iter().enumerate() {
            let to = run.transitions.get(j + 1).map_or(end, |n| n.timestamp);
            for c in axis.cols(t.timestamp, to.max(t.timestamp)) {
                cells[c] = (glyph(&t.phase), phase_style(&t.phase));
            }
        }
        cells
    }

    fn marks(history: &History, axis: &Axis) -> Vec<(char, Style)> {
        let mut cells = vec![(' ', Style::new()); axis.width];
        for b in history.backoffs() {
            for c in axis.cols(b.from, b.until) {
                cells[c] = ('╌', warn());
            }
        }
        for start in history.runs().iter().skip(1).filter_map(VmiRun::start) {
            cells[axis.cols(start, start).start] = ('↻', accent());
        }
        cells
    }

    fn run_text(i: usize, run: &VmiRun, end: DateTime<Utc>, current: bool) -> Line<'static> {
        let start = run.start().unwrap_or(end);
        let last = run
            .transitions
            .last()
            .map_or("(no phase)", |t| t.phase.as_str());
        let how = if current {
            format!("{last} now, {} so far", duration(secs(end - start)))
        } else {
            format!("last seen {last}, {}", duration(secs(end - start)))
        };
        Line::from(vec![
            Span::styled(format!("#{:<3}", i + 1), dim()),
            Span::raw(format!("{} ", clock(start))),
            Span::styled(how, phase_style(last)),
        ])
    }

    /// The panel's top part when more than one VMI was seen.
    pub(super) fn lines(insp: &Inspection, history: &History, width: usize) -> Vec<Line<'static>> {
        let now = insp.generated_at;
        let runs = history.runs();
        let backoffs = history.backoffs();
        let t0 = runs
            .iter()
            .filter_map(VmiRun::start)
            .chain(backoffs.iter().map(|b| b.from))
            .min()
            .unwrap_or(now);
        let t1 = backoffs.iter().map(|b| b.until).fold(now, DateTime::max);
        let axis = Axis {
            t0,
            span: secs(t1 - t0).max(1.0),
            width: width.saturating_sub(LABEL).max(1),
        };
        let mut out: Vec<Line<'static>> = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let bar = run_bar(r, end_of(r, history, now), &axis);
                cells_line(format!("#{:<3}", i + 1), bar)
            })
            .collect();
        out.push(cells_line(" ".repeat(LABEL), marks(history, &axis)));
        let end = if t1 > now { "next start" } else { "now" };
        let right = format!("{} → {end}", duration(axis.span));
        let left = clock(t0);
        let gap = axis
            .width
            .saturating_sub(left.len() + right.chars().count());
        out.push(fit::row(Line::styled(
            format!("{}{left}{}{right}", " ".repeat(LABEL), " ".repeat(gap)),
            dim(),
        )));
        let legend = [
            "↻ restart  ",
            "╌ backoff  ",
            "░ Pending  ",
            "▒ Scheduling  ",
            "▓ Scheduled  ",
            "█ Running  ",
            "✗ Failed",
        ];
        out.extend(fit::flow(
            legend.map(|e| Span::styled(e, dim())).to_vec(),
            width,
        ));
        for (i, r) in runs.iter().enumerate() {
            let current = history.current_run() == Some(r.uid.as_str());
            out.push(run_text(i, r, end_of(r, history, now), current));
        }
        for b in backoffs {
            out.push(Line::styled(
                format!(
                    "╌   {}–{} backoff, {} failed start(s), {}",
                    clock(b.from),
                    clock(b.until),
                    b.failures,
                    duration(secs(b.until - b.from))
                ),
                warn(),
            ));
        }
        out
    }
}
