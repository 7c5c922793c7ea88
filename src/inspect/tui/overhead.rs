//! Overhead check panel: the memory overhead formula term by term against the pod's `compute`
//! request, the `kubevirt.io/memory-overhead-bytes` annotation and the VMI's
//! `status.memory.memoryOverhead`, and the CPU request against vCPUs ÷ cpuAllocationRatio;
//! then the settings the controller renders with against the KubeVirt CR's (`--once`'s
//! `settings:` line), which explain a pod rendered unlike the formula.

use super::bar::{self, Segment};
use super::state::{Panel, ViewState};
use super::text::{Theme, bad, bytes, dim, field, good, mib, note, pad, rpad, theme, warn};
use crate::inspect::model::{Inspection, OverheadCheck, SettingsCheck};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// The glyphs and colours of the overhead terms in the bar, in turn (the guest is `█`).
const TERM_GLYPHS: [char; 3] = ['▓', '▒', '░'];
const TERM_COLOURS: [Color; 4] = [Color::Blue, Color::Magenta, Color::Cyan, Color::Yellow];

/// The style of the `i`th overhead term in the bar (no colour under `NO_COLOR`).
fn term_style(i: usize) -> Style {
    if *theme() == Theme::plain() {
        Style::new()
    } else {
        Style::new().fg(TERM_COLOURS[i % TERM_COLOURS.len()])
    }
}

/// The memory of the pod as a bar `width` columns wide, to the scale of its limit (else its
/// request): the guest's memory (`█`), each overhead term in KubeVirt's order (`▓▒░` in turn),
/// then the headroom from the request to the limit (`─`, highlighted); above it the sums, below
/// it the terms by size with their share of the overhead, as many as fit.
pub(crate) fn bar_lines(check: &OverheadCheck, width: usize) -> Vec<Line<'static>> {
    let guest = check.guest_memory_bytes.unwrap_or(0).max(0);
    let request = check
        .pod_request_bytes
        .or(check.formula_request_bytes)
        .unwrap_or(guest + check.formula_bytes);
    let limit = check.pod_limit_bytes.or(check.formula_limit_bytes);
    let used = guest + check.formula_bytes;
    let scale = limit.unwrap_or(0).max(request).max(used) as f64;
    let mut segments = vec![Segment {
        value: guest as f64,
        glyph: '█',
        style: dim().remove_modifier(Modifier::DIM),
    }];
    for (i, t) in check.terms.iter().enumerate() {
        segments.push(Segment {
            value: t.bytes as f64,
            glyph: TERM_GLYPHS[i % TERM_GLYPHS.len()],
            style: term_style(i),
        });
    }
    let headroom = limit.map(|l| l - used.max(request));
    if let Some(h) = headroom.filter(|h| *h > 0) {
        let style = if (h as f64) < 0.1 * scale {
            warn()
        } else {
            good()
        };
        segments.push(Segment {
            value: h as f64,
            glyph: '─',
            style: style.add_modifier(Modifier::BOLD),
        });
    }
    let sums = Line::from(vec![
        Span::styled("memory: ", dim()),
        Span::raw(format!(
            "request {} Mi = guest {} Mi + overhead {} Mi",
            mib(request),
            mib(guest),
            mib(check.formula_bytes)
        )),
    ]);
    let limit_line = match (limit, headroom) {
        (Some(l), Some(h)) => Line::from(vec![
            Span::styled("limit: ", dim()),
            Span::raw(format!("{} Mi, ", mib(l))),
            Span::styled(
                format!("headroom {} Mi", mib(h)),
                if h <= 0 { bad() } else { good() },
            ),
        ]),
        _ => note("limit: none"),
    };
    let mut out = vec![
        sums,
        limit_line,
        super::fit::row(bar::line(&segments, scale, width)),
    ];
    out.push(super::fit::row(legend(check, width)));
    out
}

/// The overhead terms by size, `▓ vfio 1024 Mi 78%`, as many as fit in `width`, then `+N`.
fn legend(check: &OverheadCheck, width: usize) -> Line<'static> {
    let mut order: Vec<usize> = (0..check.terms.len()).collect();
    order.sort_by(|&a, &b| {
        check.terms[b]
            .bytes
            .cmp(&check.terms[a].bytes)
            .then(a.cmp(&b))
    });
    let total = check.formula_bytes.max(1) as f64;
    let mut spans = vec![Span::styled(
        "█ guest  ",
        dim().remove_modifier(Modifier::DIM),
    )];
    let mut used: usize = spans.iter().map(Span::width).sum();
    for (n, &i) in order.iter().enumerate() {
        let t = &check.terms[i];
        let text = format!(
            "{} {} {} Mi {:.0}%  ",
            TERM_GLYPHS[i % TERM_GLYPHS.len()],
            t.name,
            mib(t.bytes),
            t.bytes as f64 * 100.0 / total
        );
        let more = format!("+{} more", order.len() - n);
        if used + text.chars().count() + more.len() > width && n + 1 < order.len() {
            spans.push(Span::styled(more, dim()));
            break;
        }
        used += text.chars().count();
        spans.push(Span::styled(text, term_style(i)));
    }
    Line::from(spans)
}

/// The panel's lines, for a panel `width` columns wide inside its border.
pub(crate) fn lines_for_width(insp: &Inspection, width: usize) -> Vec<Line<'static>> {
    let mut out = lines(insp);
    if let Some(check) = &insp.overhead_check {
        // After the verdict and its differences.
        let at = 1 + check.differences.len();
        out.splice(at..at, bar_lines(check, width));
    }
    out
}

/// The panel's lines without the bar (four lines fewer).
pub(crate) fn lines(insp: &Inspection) -> Vec<Line<'static>> {
    let settings = insp
        .settings
        .as_ref()
        .map(settings_lines)
        .unwrap_or_default();
    let Some(check) = &insp.overhead_check else {
        let mut out = vec![note("no overhead check (see Blockers)")];
        out.extend(settings);
        return out;
    };
    let mut out = vec![if check.matches {
        Line::styled("MATCH: every value present agrees with the formula", good())
    } else {
        Line::styled("DIFFERS from the formula", bad())
    }];
    for d in &check.differences {
        out.push(Line::styled(format!("  {d}"), bad()));
    }
    out.extend(settings);
    out.push(field("formula overhead", bytes(check.formula_bytes)));
    if let Some(b) = check.formula_request_bytes {
        out.push(field("formula request", bytes(b)));
    }
    let present = |label: &str, v: Option<i64>| match v {
        Some(b) => field(label, bytes(b)),
        None => note(format!("{label}: absent")),
    };
    out.push(present("pod request", check.pod_request_bytes));
    out.push(present("annotation", check.annotation_bytes));
    out.push(present("VMI status", check.status_bytes));
    if let Some(cpu) = &check.cpu {
        let fmt = |m: Option<i64>| m.map(|m| format!("{m}m")).unwrap_or_else(|| "-".into());
        let verdict = if cpu.matches { "MATCH" } else { "DIFFERS" };
        out.push(Line::from(vec![
            Span::styled("cpu: ", dim()),
            Span::raw(format!(
                "{} vCPU ÷ ratio {} = {}, pod {} ",
                cpu.vcpus,
                cpu.allocation_ratio,
                fmt(cpu.formula_request_millis),
                fmt(cpu.pod_request_millis)
            )),
            Span::styled(verdict, if cpu.matches { good() } else { bad() }),
        ]));
    }
    out.push(super::fit::row(Line::styled(
        format!("{} {}  {}", pad("TERM", 20), rpad("BYTES", 11), "WHY"),
        dim(),
    )));
    // Rows cut at the panel's width (the WHY column ends in `…`); the focused panel's top row
    // whole, its WHY continued under WHY.
    for t in &check.terms {
        out.push(super::fit::row(Line::from(vec![
            Span::raw(format!(
                "{} {}  ",
                pad(&t.name, 20),
                rpad(&t.bytes.to_string(), 11)
            )),
            Span::styled(t.reason.clone(), dim()),
        ])));
    }
    out
}

/// The leader's settings against the KubeVirt CR's: one line when they agree; else a line per
/// differing setting and the CR version the leader refused, if any. Nothing when the leader's
/// settings are unknown (KubeVirt's controller).
fn settings_lines(s: &SettingsCheck) -> Vec<Line<'static>> {
    let Some(from) = s.controller_origin() else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if s.differences.is_empty() {
        out.push(Line::from(vec![
            Span::styled("settings: ", dim()),
            Span::styled(
                format!("the controller's ({from}) are the KubeVirt CR's"),
                good(),
            ),
        ]));
    } else {
        out.push(Line::from(vec![
            Span::styled("settings: ", dim()),
            Span::styled(
                format!("the controller's ({from}) DIFFER from the KubeVirt CR's"),
                bad(),
            ),
        ]));
        for d in &s.differences {
            out.push(Line::styled(format!("  {d}"), bad()));
        }
    }
    if let Some(refused) = &s.controller_refused {
        out.push(Line::styled(format!("  it refused {refused}"), bad()));
    }
    out
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, insp: &Inspection, view: &ViewState) {
    let width = usize::from(area.width.saturating_sub(2));
    super::draw_panel(
        frame,
        area,
        Panel::Overhead,
        lines_for_width(insp, width),
        view,
    );
}
