//! History panel: what the leader said at each refresh while the inspector runs, as sparklines
//! (ratatui's `Sparkline`) on one time axis, newest at the right: each queue's depth, adds a
//! second and retries, this key's reconciles, the Lease's renew age, and a row marking Lease
//! handovers (`◆`) and leaderless gaps (`░`), and the time axis. The samples come from [`History`]; when there
//! are more than columns, a column shows the largest value of the seconds it covers.

use super::state::{Panel, ViewState};
use super::text::{accent, bad, dim, duration, good, note, pad, rpad, warn};
use crate::inspect::history::{History, LeaseMark, Sample};
use ratatui::Frame;
use ratatui::buffer::Buffer;
use ratatui::layout::Rect;
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Sparkline, Widget};
use std::ops::Range;

/// Columns of the row labels.
const LABEL: usize = 15;
/// Columns of the latest value at the right.
const VALUE: usize = 9;

/// The samples each column covers, newest at the right: as many samples a column as it takes to
/// fit `n` samples into `width` columns.
pub(crate) fn buckets(n: usize, width: usize) -> Vec<Range<usize>> {
    if n == 0 || width == 0 {
        return Vec::new();
    }
    let per = n.div_ceil(width);
    let cols = n.div_ceil(per);
    (0..cols)
        .map(|c| {
            let end = n - (cols - 1 - c) * per;
            end.saturating_sub(per)..end
        })
        .collect()
}

/// One value per column (the largest of its samples; absent when none has one), padded on the
/// left with absent values to `width`.
fn series(
    samples: &[&Sample],
    buckets: &[Range<usize>],
    width: usize,
    value: impl Fn(&Sample) -> Option<u64>,
) -> Vec<Option<u64>> {
    let mut out = vec![None; width.saturating_sub(buckets.len())];
    out.extend(
        buckets
            .iter()
            .map(|b| samples[b.clone()].iter().filter_map(|s| value(s)).max()),
    );
    out
}

/// `values` drawn by ratatui's `Sparkline` one row high, as spans (so the panel scrolls, cuts
/// and captures like the others).
fn spark(values: &[Option<u64>], style: Style) -> Vec<Span<'static>> {
    let width = u16::try_from(values.len()).unwrap_or(u16::MAX);
    let area = Rect::new(0, 0, width, 1);
    let mut buf = Buffer::empty(area);
    let max = values.iter().flatten().copied().max().unwrap_or(0).max(1);
    Sparkline::default()
        .data(values.iter().copied())
        .max(max)
        .style(style)
        .absent_value_symbol(" ")
        .render(area, &mut buf);
    (0..width)
        .map(|x| {
            let cell = &buf[(x, 0)];
            Span::styled(cell.symbol().to_string(), cell.style())
        })
        .collect()
}

fn row(label: &str, spans: Vec<Span<'static>>, value: String) -> Line<'static> {
    let mut all = vec![Span::styled(pad(label, LABEL), dim())];
    all.extend(spans);
    all.push(Span::raw(format!(" {}", rpad(&value, VALUE - 1))));
    super::fit::row(Line::from(all))
}

fn lease_glyph(mark: Option<LeaseMark>) -> Span<'static> {
    match mark {
        None => Span::raw(" "),
        Some(LeaseMark::Unknown) => Span::styled("·", dim()),
        Some(LeaseMark::Held) => Span::styled("━", good()),
        Some(LeaseMark::Leaderless) => Span::styled("░", bad()),
        Some(LeaseMark::Handover) => Span::styled("◆", warn()),
    }
}

fn queue_rows(samples: &[&Sample], b: &[Range<usize>], w: usize) -> Vec<Line<'static>> {
    let last = samples.last().copied();
    let mut names: Vec<&String> = samples.iter().flat_map(|s| s.queues.keys()).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let short = name.strip_prefix("virt-controller-").unwrap_or(name);
        type Pick = fn(&crate::inspect::history::QueueSample) -> Option<u64>;
        let metrics: [(&str, Pick, Style); 3] = [
            ("depth", |q| Some(q.depth), accent()),
            ("adds/s", |q| q.adds, accent()),
            ("retries", |q| q.retries, warn()),
        ];
        for (what, pick, style) in metrics {
            let values = series(samples, b, w, |s| s.queues.get(name).and_then(pick));
            let now = last
                .and_then(|s| s.queues.get(name).and_then(pick))
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into());
            out.push(row(&format!("{short} {what}"), spark(&values, style), now));
        }
    }
    out
}

/// The time axis under the sparklines: how long ago the first column is, the Lease marks' key
/// when it fits, `now` at the right.
fn axis_row(samples: &[&Sample], b: &[Range<usize>], w: usize) -> Line<'static> {
    let (Some(first), Some(last)) = (b.first(), samples.last()) else {
        return Line::default();
    };
    let ago = (last.at - samples[first.start].at).num_milliseconds() as f64 / 1e3;
    let mut since = format!("−{}", duration(ago));
    let per = b.last().map_or(1, Range::len);
    if per > 1 {
        since.push_str(&format!(" ({per} samples a column)"));
    }
    // From the first column drawn (or as far left as `since … now` needs) to the last.
    let need = since.chars().count() + 4;
    let start = w.saturating_sub(b.len().max(need));
    let key = "━ led ◆ handover ░ no leader";
    let room = w.saturating_sub(start + since.chars().count() + 3);
    let middle = if room >= key.chars().count() + 4 {
        let left = (room - key.chars().count()) / 2;
        format!(
            "{}{key}{}",
            " ".repeat(left),
            " ".repeat(room - left - key.chars().count())
        )
    } else {
        " ".repeat(room)
    };
    super::fit::row(Line::styled(
        format!("{}{since}{middle}now", " ".repeat(LABEL + start)),
        dim(),
    ))
}

/// The panel's lines for a panel `width` columns wide inside its border.
pub(crate) fn lines(history: &History, width: usize) -> Vec<Line<'static>> {
    let samples: Vec<&Sample> = history.samples().iter().collect();
    let Some(last) = samples.last() else {
        return vec![note("no samples yet: one is taken at each refresh")];
    };
    let w = width.saturating_sub(LABEL + VALUE).max(1);
    let b = buckets(samples.len(), w);
    let mut out = queue_rows(&samples, &b, w);
    if samples.iter().any(|s| s.reconciles.is_some()) {
        let values = series(&samples, &b, w, |s| s.reconciles);
        let now = last.reconciles.map(|v| v.to_string()).unwrap_or("-".into());
        out.push(row("key reconciles", spark(&values, accent()), now));
    }
    let age = |s: &Sample| s.renew_age_seconds.map(|a| a.max(0.0).ceil() as u64);
    let now = last.renew_age_seconds.map(duration).unwrap_or("-".into());
    out.push(row(
        "renew age",
        spark(&series(&samples, &b, w, age), dim()),
        now,
    ));
    let mut marks = vec![Span::raw(" ".repeat(w.saturating_sub(b.len())))];
    marks.extend(
        b.iter()
            .map(|r| lease_glyph(samples[r.clone()].iter().map(|s| s.lease).max())),
    );
    let holder = match last.lease {
        LeaseMark::Unknown => "not read",
        LeaseMark::Leaderless => "none",
        LeaseMark::Held | LeaseMark::Handover => "held",
    };
    out.push(row("leader", marks, holder.into()));
    out.push(axis_row(&samples, &b, w));
    out
}

/// Draw the panel.
pub(crate) fn render(frame: &mut Frame, area: Rect, history: &History, view: &ViewState) {
    let width = usize::from(area.width.saturating_sub(2));
    super::draw_panel(frame, area, Panel::History, lines(history, width), view);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_keep_the_newest_at_the_right_and_cover_every_sample() {
        assert_eq!(buckets(3, 10), [0..1, 1..2, 2..3]);
        assert_eq!(buckets(10, 4), [0..1, 1..4, 4..7, 7..10]);
        assert_eq!(
            buckets(300, 100),
            (0..100).map(|c| c * 3..c * 3 + 3).collect::<Vec<_>>()
        );
        assert!(buckets(0, 10).is_empty());
    }
}
