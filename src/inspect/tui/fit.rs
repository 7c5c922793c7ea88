//! Lines of a table fitted to a panel's width: a row longer than the panel is cut with `…`
//! instead of wrapping to column 0 under the headings; the selected row is shown whole, its
//! continuation rows indented under its last column.

use super::text::dim;
use ratatui::text::{Line, Span};

/// Columns `c` takes on a terminal (0 for a combining mark, 2 for a wide character).
fn char_width(c: char) -> usize {
    let mut buf = [0u8; 4];
    Span::raw(&*c.encode_utf8(&mut buf)).width()
}

/// `line` cut to `width` columns, its last column `…` when anything was cut.
pub(crate) fn truncate(line: &Line<'static>, width: usize) -> Line<'static> {
    if line.width() <= width {
        return line.clone();
    }
    let mut out = Vec::new();
    let mut left = width.saturating_sub(1);
    for span in &line.spans {
        let mut text = String::new();
        for c in span.content.chars() {
            let w = char_width(c);
            if w > left {
                left = 0;
                break;
            }
            left -= w;
            text.push(c);
        }
        out.push(Span::styled(text, span.style));
        if left == 0 {
            break;
        }
    }
    if width > 0 {
        out.push(Span::styled("…", dim()));
    }
    Line::from(out).style(line.style)
}

/// Where a row's continuation rows start: under its last column (the start of its last span)
/// when that leaves a third of the width, else two columns in.
fn hanging_indent(line: &Line<'_>, width: usize) -> usize {
    let before_last: usize = match line.spans.split_last() {
        Some((_, rest)) if !rest.is_empty() => rest.iter().map(Span::width).sum(),
        _ => 0,
    };
    if before_last > 0 && before_last * 3 <= width * 2 {
        before_last
    } else {
        2.min(width.saturating_sub(1))
    }
}

/// `line` whole, in rows of at most `width` columns broken at spaces (a word longer than a row
/// is broken where the row ends), every row after the first indented by [`hanging_indent`].
pub(crate) fn wrap_hanging(line: &Line<'static>, width: usize) -> Vec<Line<'static>> {
    if line.width() <= width || width < 2 {
        return vec![line.clone()];
    }
    let indent = hanging_indent(line, width);
    let mut rows: Vec<Vec<Span<'static>>> = vec![Vec::new()];
    let mut used = 0;
    for span in &line.spans {
        let mut text = String::new();
        for word in span.content.split_inclusive(' ') {
            let w: usize = word.chars().map(char_width).sum();
            let bare = w - usize::from(word.ends_with(' '));
            if used + bare > width && used > indent && bare <= width - indent {
                rows.last_mut()
                    .expect("a row")
                    .push(Span::styled(std::mem::take(&mut text), span.style));
                rows.push(vec![Span::raw(" ".repeat(indent))]);
                used = indent;
            }
            for c in word.chars() {
                let cw = char_width(c);
                if used + cw > width {
                    rows.last_mut()
                        .expect("a row")
                        .push(Span::styled(std::mem::take(&mut text), span.style));
                    rows.push(vec![Span::raw(" ".repeat(indent))]);
                    used = indent;
                    if c == ' ' {
                        continue;
                    }
                }
                used += cw;
                text.push(c);
            }
        }
        rows.last_mut()
            .expect("a row")
            .push(Span::styled(text, span.style));
    }
    rows.into_iter()
        .map(|spans| Line::from(spans).style(line.style))
        .collect()
}

/// `items` (a legend's entries, each ending in its separator) laid out in rows of at most
/// `width` columns, broken between entries rather than inside one, each row marked by [`row`]
/// (an entry wider than a row is cut); the separator after a row's last entry is dropped.
pub(crate) fn flow(items: Vec<Span<'static>>, width: usize) -> Vec<Line<'static>> {
    let mut rows: Vec<Vec<Span<'static>>> = Vec::new();
    let mut used = 0;
    for item in items {
        let bare = item
            .content
            .trim_end()
            .chars()
            .map(char_width)
            .sum::<usize>();
        match rows.last_mut() {
            Some(spans) if used + bare <= width => spans.push(item.clone()),
            _ => {
                used = 0;
                rows.push(vec![item.clone()]);
            }
        }
        used += item.width();
    }
    rows.into_iter()
        .map(|mut spans| {
            if let Some(last) = spans.last_mut() {
                let kept = last.content.trim_end().to_string();
                last.content = kept.into();
            }
            row(truncate(&Line::from(spans), width))
        })
        .collect()
}

/// Mark `line` as a row of a table: [`fit`] cuts it rather than wrapping it. (The mark is the
/// line's explicit left alignment, which draws as the default does.)
pub(crate) fn row(line: Line<'static>) -> Line<'static> {
    line.left_aligned()
}

pub(super) fn is_row(line: &Line<'_>) -> bool {
    line.alignment == Some(ratatui::layout::Alignment::Left)
}

/// A table panel's lines fitted to `width`: a line marked by [`row`] is cut at `width`, except
/// the row at `selected` (an index into the rows drawn, as a panel's scroll offset is), shown
/// whole; any other line (a note, a sentence) wraps.
pub(crate) fn fit(
    lines: Vec<Line<'static>>,
    width: usize,
    selected: Option<usize>,
) -> Vec<Line<'static>> {
    let mut rows: Vec<(Line<'static>, bool)> = Vec::with_capacity(lines.len());
    for line in lines {
        if is_row(&line) {
            rows.push((line, true));
        } else {
            rows.extend(wrap_hanging(&line, width).into_iter().map(|l| (l, false)));
        }
    }
    let mut out = Vec::with_capacity(rows.len());
    for (i, (line, is_row)) in rows.into_iter().enumerate() {
        if is_row && Some(i) == selected {
            out.extend(wrap_hanging(&line, width));
        } else if is_row {
            out.push(truncate(&line, width));
        } else {
            out.push(line);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Line<'static> {
        super::row(Line::from(vec![
            Span::raw("pageTables       1024  "),
            Span::raw("one page table entry per 512 bytes of guest memory"),
        ]))
    }

    fn text(l: &Line<'_>) -> String {
        l.spans.iter().map(|s| s.content.as_ref()).collect()
    }

    #[test]
    fn a_long_row_is_cut_with_an_ellipsis_at_the_width() {
        let cut = truncate(&row(), 40);
        assert_eq!(cut.width(), 40);
        assert_eq!(text(&cut), "pageTables       1024  one page table e…");
        assert_eq!(
            text(&truncate(&row(), 200)),
            text(&row()),
            "a short row is kept"
        );
        assert_eq!(
            text(&truncate(&Line::raw("界界界"), 4)),
            "界…",
            "wide characters"
        );
    }

    #[test]
    fn the_selected_row_wraps_under_its_last_column() {
        let rows = wrap_hanging(&row(), 50);
        let texts: Vec<String> = rows.iter().map(text).collect();
        assert_eq!(
            texts,
            [
                "pageTables       1024  one page table entry per ",
                "                       512 bytes of guest memory",
            ]
        );
        assert!(rows.iter().all(|r| r.width() <= 50));
        // Too far right for a hanging indent: two columns.
        let narrow: Vec<String> = wrap_hanging(&row(), 30).iter().map(text).collect();
        assert_eq!(narrow[1], "  page table entry per 512 ");
    }

    #[test]
    fn flow_breaks_between_entries_never_inside_one() {
        let items = ["░ Pending 0 s  ", "▒ Scheduling 3 s  ", "█ Running 4 s  "]
            .map(Span::raw)
            .to_vec();
        let rows: Vec<String> = flow(items.clone(), 34).iter().map(text).collect();
        assert_eq!(rows, ["░ Pending 0 s  ▒ Scheduling 3 s", "█ Running 4 s"]);
        assert!(
            flow(items.clone(), 34)
                .iter()
                .all(|r| is_row(r) && r.width() <= 34)
        );
        let one: Vec<String> = flow(items, 200).iter().map(text).collect();
        assert_eq!(one, ["░ Pending 0 s  ▒ Scheduling 3 s  █ Running 4 s"]);
        let cut: Vec<String> = flow(vec![Span::raw("a very long entry")], 8)
            .iter()
            .map(text)
            .collect();
        assert_eq!(cut, ["a very …"], "an entry wider than the row is cut");
    }

    #[test]
    fn fit_cuts_every_row_but_the_selected_one_and_wraps_sentences() {
        let sentence = Line::raw("a sentence of one span, longer than the forty columns here");
        let lines = vec![sentence, Line::raw("HEADING"), row(), row()];
        let fitted = fit(lines, 50, Some(4));
        let texts: Vec<String> = fitted.iter().map(text).collect();
        assert_eq!(texts[0], "a sentence of one span, longer than the forty ");
        assert_eq!(texts[1], "  columns here");
        assert_eq!(texts[2], "HEADING");
        assert_eq!(
            texts[3],
            "pageTables       1024  one page table entry per 5…"
        );
        assert_eq!(texts[5], "                       512 bytes of guest memory");
        assert_eq!(fitted.len(), 2 + 1 + 1 + 2);
        assert!(fitted.iter().all(|l| l.width() <= 50));
    }
}
