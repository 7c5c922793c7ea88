//! The shadow in the terminal: the lines the Leader panel adds for `inspect vm/NAME --shadow
//! FILE` (did the shadow agree with the leader's last writes for this VM?), and the live view of
//! `shadow` itself (counts by verdict, the latest differences). Both are pure renders of data
//! the shadow computed ([`crate::shadow::ShadowReport`], [`ShadowView`]).

use super::text::{bad, clock, dim, duration, field, field_styled, good, note, warn};
use crate::inspect::model::ShadowView;
use crate::inspect::shadow_view::verdict_line;
use crate::shadow::{ShadowReport, Verdict};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

fn verdict_style(v: Verdict) -> Style {
    match v {
        Verdict::Agree => good(),
        Verdict::AgreeLater | Verdict::AgreeEarlier => Style::new(),
        Verdict::Differ | Verdict::WeWouldNotWrite | Verdict::WeWouldWriteMore => bad(),
    }
}

/// The lines under the Lease in the Leader panel: the shadow's summary for this VM, then its
/// last verdicts, oldest first.
pub(crate) fn vm_lines(s: &ShadowView) -> Vec<Line<'static>> {
    let style = match s.last_agreed {
        _ if s.stale => warn(),
        Some(true) => good(),
        Some(false) => bad(),
        None => Style::new(),
    };
    let mut out = vec![field_styled("shadow", s.summary.clone(), style)];
    out.push(Line::styled(
        format!("  {} (written {} ago)", s.source, duration(s.age_seconds)),
        dim(),
    ));
    for v in &s.last {
        out.push(Line::styled(
            format!("  {}", verdict_line(v)),
            verdict_style(v.verdict),
        ));
    }
    out
}

/// What the live view of `shadow` shows.
#[derive(Debug, Clone, Default)]
pub struct LiveShadow {
    /// What is compared, on which cluster: the line `shadow` prints on stderr at its start.
    pub header: String,
    /// How long the shadow has run, seconds.
    pub elapsed_seconds: f64,
    /// `--for`, seconds.
    pub for_seconds: Option<f64>,
    /// Every watch has listed.
    pub synced: bool,
    /// Writes waiting for our next reconcile.
    pub held: usize,
    /// The summary so far (`None` before the watches have listed).
    pub report: Option<ShadowReport>,
}

/// How many of the latest differences the live view lists.
const LATEST: usize = 12;

fn count(label: &str, n: usize, style: Style) -> Vec<Span<'static>> {
    let style = if n == 0 { dim() } else { style };
    vec![
        Span::styled(format!("{label} "), dim()),
        Span::styled(n.to_string(), style.add_modifier(Modifier::BOLD)),
        Span::raw("   "),
    ]
}

/// The live view's lines: the state of the run, the counts by verdict, then the latest
/// differences, newest first.
pub(crate) fn live_lines(view: &LiveShadow) -> Vec<Line<'static>> {
    let mut out = vec![Line::raw(view.header.clone())];
    let mut run = format!("comparing for {}", duration(view.elapsed_seconds));
    if let Some(total) = view.for_seconds {
        run.push_str(&format!(" of {}", duration(total)));
    }
    if !view.synced {
        out.push(field_styled("state", format!("{run}; listing…"), warn()));
        return out;
    }
    if view.held > 0 {
        run.push_str(&format!(
            "; {} write(s) waiting for our next reconcile",
            view.held
        ));
    }
    out.push(field("state", run));
    let Some(r) = &view.report else {
        return out;
    };
    out.push(Line::raw(""));
    let mut counts = count("decisions", r.decisions, Style::new());
    counts.extend(count("agree", r.agree, good()));
    counts.extend(count("agree-later", r.agree_later, Style::new()));
    counts.extend(count("differ", r.differ, bad()));
    counts.extend(count("we-would-not-write", r.we_would_not_write, bad()));
    counts.extend(count("we-would-write-more", r.we_would_write_more, bad()));
    counts.pop(); // the spacing after the last count
    out.push(Line::from(counts));
    for e in r.errors.iter().rev().take(3) {
        out.push(field_styled("error", e.clone(), warn()));
    }
    out.push(Line::raw(""));
    if r.differences.is_empty() {
        out.push(Line::styled("no difference so far", good()));
        return out;
    }
    out.push(Line::styled(
        format!(
            "LATEST DIFFERENCES ({} of {}, newest first)",
            r.differences.len().min(LATEST),
            r.differences.len()
        ),
        Style::new().add_modifier(Modifier::BOLD),
    ));
    let mut latest: Vec<_> = r.differences.iter().collect();
    latest.sort_by(|a, b| b.seen.cmp(&a.seen));
    for d in latest.into_iter().take(LATEST) {
        let seen = chrono::DateTime::parse_from_rfc3339(&d.seen)
            .map(|t| clock(t.with_timezone(&chrono::Utc)))
            .unwrap_or_else(|_| d.seen.clone());
        let action = d.action.map(|a| format!(" ({a})")).unwrap_or_default();
        let paths = if d.paths.is_empty() {
            String::new()
        } else {
            format!(": {}", d.paths.join(", "))
        };
        out.push(Line::from(vec![
            Span::styled(format!("{seen} "), dim()),
            Span::raw(format!("{} {} ", d.kind, d.key)),
            Span::styled(d.verdict.as_str(), verdict_style(d.verdict)),
            Span::raw(format!("{action}{paths}")),
        ]));
    }
    out
}

/// Draw the live view: one bordered panel, and the keys on the last row.
pub(crate) fn render_live(frame: &mut Frame, area: Rect, view: &LiveShadow) {
    let [body, status] = Layout::vertical([Constraint::Fill(1), Constraint::Length(1)]).areas(area);
    let block = Block::bordered()
        .border_style(dim())
        .title(" Shadow: the leader's writes against our decisions ");
    let para = Paragraph::new(live_lines(view))
        .block(block)
        .wrap(Wrap { trim: false });
    frame.render_widget(para, body);
    frame.render_widget(
        Paragraph::new(note(
            "q quit (the summary is printed)  ·  nothing is written to the cluster",
        )),
        status,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shadow::Difference;
    use std::collections::BTreeMap;

    fn capture_live(view: &LiveShadow, columns: u16, rows: u16) -> String {
        crate::inspect::tui::draw_to_text(columns, rows, |f| render_live(f, f.area(), view))
    }

    fn difference(second: u32, kind: &'static str, verdict: Verdict, paths: &[&str]) -> Difference {
        Difference {
            key: "demo/vm-a".into(),
            kind,
            verdict,
            part: "main",
            action: (verdict != Verdict::WeWouldNotWrite).then_some("CreateVmi"),
            paths: paths.iter().map(|p| p.to_string()).collect(),
            ours: BTreeMap::new(),
            theirs: BTreeMap::new(),
            reproduction: None,
            seen: format!("2026-12-01T10:00:{second:02}Z"),
        }
    }

    pub(crate) fn live() -> LiveShadow {
        LiveShadow {
            header: "comparing the writes of virt-controller, virtctl-rs on kind-kind \
                     (all namespaces) as KubeVirt v1.9.0, from the KubeVirt CR's \
                     status.observedKubeVirtVersion"
                .into(),
            elapsed_seconds: 72.0,
            for_seconds: Some(600.0),
            synced: true,
            held: 1,
            report: Some(ShadowReport {
                duration_seconds: 72.0,
                decisions: 61,
                agree: 57,
                agree_later: 2,
                agree_earlier: 0,
                differ: 1,
                we_would_not_write: 1,
                we_would_write_more: 0,
                differences: vec![
                    difference(
                        5,
                        "VirtualMachineInstance",
                        Verdict::Differ,
                        &["metadata.labels.team"],
                    ),
                    difference(9, "Pod", Verdict::WeWouldNotWrite, &[]),
                ],
                errors: Vec::new(),
                decided_as: None,
            }),
        }
    }

    #[test]
    fn live_view_counts_and_latest_differences() {
        insta::assert_snapshot!(capture_live(&live(), 100, 16));
    }

    #[test]
    fn live_view_while_the_watches_list() {
        let view = LiveShadow {
            synced: false,
            report: None,
            ..live()
        };
        insta::assert_snapshot!(capture_live(&view, 80, 8));
    }
}
