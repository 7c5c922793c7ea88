//! Overhead check panel: the memory overhead formula term by term against the pod's `compute`
//! request, the `kubevirt.io/memory-overhead-bytes` annotation and the VMI's
//! `status.memory.memoryOverhead`, and the CPU request against vCPUs ÷ cpuAllocationRatio;
//! then the settings the controller renders with against the KubeVirt CR's (`--once`'s
//! `settings:` line), which explain a pod rendered unlike the formula.

use super::bar::{self, Segment};
use super::fit;
use super::state::{Panel, ViewState};
use super::text::{Theme, bad, bytes, dim, field, good, mib, note, pad, rpad, theme, warn};
use crate::api::quantity::ParsedQuantity;
use crate::inspect::model::{Inspection, OverheadCheck, SettingsCheck, VersionOverhead};
use crate::inspect::whatif::WhatIf;
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

/// One side of the bar: the pod's memory split into the guest's and each overhead term's.
#[derive(Debug, Clone, PartialEq)]
struct Side {
    /// The `compute` memory request, bytes.
    request: i64,
    /// The `compute` memory limit, bytes.
    limit: Option<i64>,
    /// The guest's memory, bytes.
    guest: i64,
    /// The overhead terms `(name, bytes)`, in KubeVirt's order.
    terms: Vec<(String, i64)>,
}

impl Side {
    /// The pod's side: its request and limit (else the formula's), the guest's memory and the
    /// formula's terms.
    fn of_pod(check: &OverheadCheck) -> Side {
        let guest = check.guest_memory_bytes.unwrap_or(0).max(0);
        Side {
            request: check
                .pod_request_bytes
                .or(check.formula_request_bytes)
                .unwrap_or(guest + check.formula_bytes),
            limit: check.pod_limit_bytes.or(check.formula_limit_bytes),
            guest,
            terms: check
                .terms
                .iter()
                .map(|t| (t.name.clone(), t.bytes))
                .collect(),
        }
    }

    /// The side of the launcher pod a what-if renders from the changed VM: the pod's terms
    /// with those the change moves ([`WhatIf::pod`]), the guest's memory as its request less
    /// its overhead, and its limit (the pod's unless the change moves `limits.memory`).
    fn of_what_if(check: &OverheadCheck, w: &WhatIf) -> Option<Side> {
        let pod = w.pod.as_ref()?;
        let request = pod.memory_request_after_bytes?;
        let mut terms: Vec<(String, i64)> = check
            .terms
            .iter()
            .map(|t| (t.name.clone(), t.bytes))
            .collect();
        for c in &pod.terms {
            match terms.iter_mut().find(|(n, _)| *n == c.name) {
                Some(t) => t.1 = c.after_bytes,
                None => terms.push((c.name.clone(), c.after_bytes)),
            }
        }
        let limit = match pod.resources.iter().find(|r| r.name == "limits.memory") {
            Some(r) => r
                .after
                .as_deref()
                .and_then(|q| ParsedQuantity::parse(q).ok())
                .map(|q| q.value()),
            None => check.pod_limit_bytes.or(check.formula_limit_bytes),
        };
        Some(Side {
            request,
            limit,
            guest: (request - pod.overhead_after_bytes).max(0),
            terms,
        })
    }

    /// The side of another release's formula (`--kubevirt-version`): its terms and request,
    /// the pod's guest memory and limit.
    fn of_version(check: &OverheadCheck, v: &VersionOverhead) -> Side {
        let now = Side::of_pod(check);
        Side {
            request: v
                .formula_request_bytes
                .unwrap_or(now.guest + v.formula_bytes),
            terms: v.terms.iter().map(|t| (t.name.clone(), t.bytes)).collect(),
            ..now
        }
    }

    fn overhead(&self) -> i64 {
        self.terms.iter().map(|(_, b)| b).sum()
    }

    fn used(&self) -> i64 {
        self.guest + self.overhead()
    }

    /// The headroom from what the pod uses (or requests, the more) to its limit.
    fn headroom(&self) -> Option<i64> {
        self.limit.map(|l| l - self.used().max(self.request))
    }

    /// The columns of a bar of this side's memory at `scale` bytes (its glyphs and colours are
    /// those of `names`, the terms in the pod's order).
    fn segments(&self, names: &[String], scale: f64) -> Vec<Segment> {
        let mut out = vec![Segment {
            value: self.guest as f64,
            glyph: '█',
            style: dim().remove_modifier(Modifier::DIM),
        }];
        for (name, bytes) in &self.terms {
            let i = names.iter().position(|n| n == name).unwrap_or(0);
            out.push(Segment {
                value: *bytes as f64,
                glyph: TERM_GLYPHS[i % TERM_GLYPHS.len()],
                style: term_style(i),
            });
        }
        if let Some(h) = self.headroom().filter(|h| *h > 0) {
            let style = if (h as f64) < 0.1 * scale {
                warn()
            } else {
                good()
            };
            out.push(Segment {
                value: h as f64,
                glyph: '─',
                style: style.add_modifier(Modifier::BOLD),
            });
        }
        out
    }

    /// The bytes the bar of this side spans.
    fn scale(&self) -> i64 {
        self.limit.unwrap_or(0).max(self.request).max(self.used())
    }
}

/// The label before each bar when two are drawn.
const LABEL: usize = 8;

/// The memory of the pod as a bar `width` columns wide, to the scale of its limit (else its
/// request): the guest's memory (`█`), each overhead term in KubeVirt's order (`▓▒░` in turn),
/// then the headroom from the request to the limit (`─`, highlighted); above it the sums, below
/// it the terms by size with their share of the overhead, as many as fit. A second bar to the
/// same scale under it, with its sums: the pod a what-if (`w`) would render when it rendered
/// one, else the formula of the release `--kubevirt-version` named (`version`) — the what-if
/// wins, being the change the user made last.
pub(crate) fn bar_lines(
    check: &OverheadCheck,
    what_if: Option<&WhatIf>,
    version: Option<&VersionOverhead>,
    width: usize,
) -> Vec<Line<'static>> {
    let now = Side::of_pod(check);
    let second = second_bar(check, what_if, version);
    let names: Vec<String> = second
        .as_ref()
        .map_or(&now, |b| &b.side)
        .terms
        .iter()
        .map(|(n, _)| n.clone())
        .collect();
    let scale = now
        .scale()
        .max(second.as_ref().map_or(0, |b| b.side.scale())) as f64;
    let sums = fit::row(Line::from(vec![
        Span::styled("memory (Mi): ", dim()),
        Span::raw(format!(
            "request {} = guest {} + overhead {}",
            mib(now.request),
            mib(now.guest),
            mib(check.formula_bytes)
        )),
    ]));
    let mut out = vec![sums, limit_line("limit: ", &now)];
    match &second {
        None => out.push(fit::row(bar::line(
            &now.segments(&names, scale),
            scale,
            width,
        ))),
        Some(b) => {
            let bar_width = width.saturating_sub(LABEL);
            for (label, s) in [("now", &now), (b.label.as_str(), &b.side)] {
                let mut spans = vec![Span::styled(format!("{label:<LABEL$}"), dim())];
                spans.extend(bar::line(&s.segments(&names, scale), scale, bar_width).spans);
                out.push(fit::row(Line::from(spans)));
            }
            out.push(b.sums.clone());
            if b.own_limit && (b.side.limit.is_some() || now.limit.is_some()) {
                out.push(limit_line("what-if limit: ", &b.side));
            }
        }
    }
    out.push(fit::row(legend(
        check,
        second.as_ref().map(|b| &b.side),
        width,
    )));
    out
}

/// The second bar of the Overhead check: its label, side and sums line, and whether its limit
/// differs from the pod's (a what-if's may).
struct SecondBar {
    label: String,
    side: Side,
    sums: Line<'static>,
    own_limit: bool,
}

/// A what-if's pod when it rendered one, else `version`'s formula (see [`bar_lines`]).
fn second_bar(
    check: &OverheadCheck,
    what_if: Option<&WhatIf>,
    version: Option<&VersionOverhead>,
) -> Option<SecondBar> {
    if let Some((w, side)) = what_if.and_then(|w| Side::of_what_if(check, w).map(|s| (w, s))) {
        return Some(SecondBar {
            label: "what-if".into(),
            sums: what_if_sums(w, &side, check.formula_bytes),
            side,
            own_limit: true,
        });
    }
    let v = version?;
    Some(SecondBar {
        label: v.kubevirt_version.to_string(),
        side: Side::of_version(check, v),
        sums: fit::row(Line::from(vec![Span::styled(
            v.comparison(check.formula_bytes),
            warn_or_good(v, check),
        )])),
        own_limit: false,
    })
}

/// Warn when the other release needs more overhead than the current formula.
fn warn_or_good(v: &VersionOverhead, check: &OverheadCheck) -> Style {
    if v.formula_bytes > check.formula_bytes {
        warn()
    } else {
        good()
    }
}

/// `limit: 3880 Mi, headroom 512 Mi` (the headroom red when there is none), or `limit: none`.
fn limit_line(label: &'static str, side: &Side) -> Line<'static> {
    match (side.limit, side.headroom()) {
        (Some(l), Some(h)) => fit::row(Line::from(vec![
            Span::styled(label, dim()),
            Span::raw(format!("{} Mi, ", mib(l))),
            Span::styled(
                format!("headroom {} Mi", mib(h)),
                if h <= 0 { bad() } else { good() },
            ),
        ])),
        _ => fit::row(note(format!("{label}none"))),
    }
}

/// `what-if: overhead −32 Mi = 1288, request 3336 · CHANGE` (Mi).
fn what_if_sums(w: &WhatIf, side: &Side, overhead_now: i64) -> Line<'static> {
    let delta = side.overhead() - overhead_now;
    let sign = if delta < 0 { "−" } else { "+" };
    fit::row(Line::from(vec![
        Span::styled("what-if (Mi): ", dim()),
        Span::raw("overhead "),
        Span::styled(
            format!("{sign}{}", mib(delta.abs())),
            if delta > 0 { warn() } else { good() },
        ),
        Span::raw(format!(
            " = {}, request {}",
            mib(side.overhead()),
            mib(side.request)
        )),
        Span::styled(format!(" · {}", w.change.join(" ")), dim()),
    ]))
}

/// The overhead terms by size, `▓ vfio 1024 Mi 78%`, as many as fit in `width`, then `+N`;
/// with a what-if's side, the terms it moves first, with their bytes after it (`32→0 Mi`).
fn legend(check: &OverheadCheck, after: Option<&Side>, width: usize) -> Line<'static> {
    // (name, bytes now, bytes after the what-if when it moves them), glyphs by position.
    let mut entries: Vec<(String, i64, Option<i64>)> = check
        .terms
        .iter()
        .map(|t| (t.name.clone(), t.bytes, None))
        .collect();
    for (name, bytes) in after.map(|s| s.terms.as_slice()).unwrap_or_default() {
        match entries.iter_mut().find(|e| e.0 == *name) {
            Some(e) if e.1 != *bytes => e.2 = Some(*bytes),
            Some(_) => {}
            None => entries.push((name.clone(), 0, Some(*bytes))),
        }
    }
    // The terms the what-if moves first, then by size.
    let size = |e: &(String, i64, Option<i64>)| (e.2.is_some(), e.1.max(e.2.unwrap_or(0)));
    let mut order: Vec<usize> = (0..entries.len()).collect();
    order.sort_by(|&a, &b| size(&entries[b]).cmp(&size(&entries[a])).then(a.cmp(&b)));
    let total = check.formula_bytes.max(1) as f64;
    let mut spans = vec![Span::styled(
        "█ guest  ",
        dim().remove_modifier(Modifier::DIM),
    )];
    let mut used: usize = spans.iter().map(Span::width).sum();
    for (n, &i) in order.iter().enumerate() {
        let (name, now, moved) = &entries[i];
        let glyph = TERM_GLYPHS[i % TERM_GLYPHS.len()];
        let text = match moved {
            Some(to) => format!("{glyph} {name} {}→{} Mi  ", mib(*now), mib(*to)),
            None => format!(
                "{glyph} {name} {} Mi {:.0}%  ",
                mib(*now),
                *now as f64 * 100.0 / total
            ),
        };
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
/// With `what_if`, the last what-if of this VM, its bar too; else the `--kubevirt-version`
/// release's (see [`bar_lines`]).
pub(crate) fn lines_for_width(
    insp: &Inspection,
    what_if: Option<&WhatIf>,
    width: usize,
) -> Vec<Line<'static>> {
    let mut out = lines(insp);
    if let Some(check) = &insp.overhead_check {
        // After the verdict and its differences.
        let at = 1 + check.differences.len();
        let version = insp.kubevirt_version_overhead.as_ref();
        out.splice(at..at, bar_lines(check, what_if, version, width));
    }
    out
}

/// The panel's lines without the bar.
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
    // From here on (the bar goes here) the panel reads as a table: lines are cut with `…`, not
    // wrapped, and the one at the top of the focused panel is shown whole.
    out.extend(settings.into_iter().map(fit::row));
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
        out.push(fit::row(Line::from(vec![
            Span::styled("cpu: ", dim()),
            Span::raw(format!(
                "{} vCPU ÷ ratio {} = {}, pod {} ",
                cpu.vcpus,
                cpu.allocation_ratio,
                fmt(cpu.formula_request_millis),
                fmt(cpu.pod_request_millis)
            )),
            Span::styled(verdict, if cpu.matches { good() } else { bad() }),
        ])));
    }
    out.push(fit::row(Line::styled(
        format!("{} {}  {}", pad("TERM", 20), rpad("BYTES", 11), "WHY"),
        dim(),
    )));
    // Rows cut at the panel's width (the WHY column ends in `…`); the focused panel's top row
    // whole, its WHY continued under WHY.
    for t in &check.terms {
        out.push(fit::row(Line::from(vec![
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
                format!("the controller's are the KubeVirt CR's ({from})"),
                good(),
            ),
        ]));
    } else {
        out.push(Line::from(vec![
            Span::styled("settings: ", dim()),
            Span::styled(
                format!("the controller's DIFFER from the KubeVirt CR's ({from})"),
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
pub(crate) fn render(
    frame: &mut Frame,
    area: Rect,
    insp: &Inspection,
    what_if: Option<&WhatIf>,
    view: &ViewState,
) {
    let width = usize::from(area.width.saturating_sub(2));
    super::draw_panel(
        frame,
        area,
        Panel::Overhead,
        lines_for_width(insp, what_if, width),
        view,
    );
}
