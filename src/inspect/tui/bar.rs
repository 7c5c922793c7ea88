//! A stacked horizontal bar drawn in one row of text: segments sized to scale (largest
//! remainder, so the columns add up), each with its glyph and style, so it reads with and
//! without colour and in the text captures.

use ratatui::style::Style;
use ratatui::text::{Line, Span};

/// One part of a bar.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Segment {
    /// Its size, in the bar's unit (bytes, seconds).
    pub value: f64,
    /// The character it is drawn with.
    pub glyph: char,
    /// Its style.
    pub style: Style,
}

/// The columns each of `values` gets out of `width`, for a bar whose full width is `scale`:
/// proportional, rounded by largest remainder so they add up to the rounded total.
pub(crate) fn columns(values: &[f64], scale: f64, width: usize) -> Vec<usize> {
    if scale <= 0.0 || !scale.is_finite() || width == 0 {
        return vec![0; values.len()];
    }
    // Values over the scale: the bar is the width, no more.
    let scale = scale.max(values.iter().map(|v| v.max(0.0)).sum());
    let exact: Vec<f64> = values
        .iter()
        .map(|v| (v.max(0.0) / scale) * width as f64)
        .collect();
    let total = (exact.iter().sum::<f64>().round() as usize).min(width);
    let mut cols: Vec<usize> = exact.iter().map(|e| e.floor() as usize).collect();
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| {
        let (ra, rb) = (exact[a] - exact[a].floor(), exact[b] - exact[b].floor());
        rb.total_cmp(&ra).then(a.cmp(&b))
    });
    let mut left = total.saturating_sub(cols.iter().sum());
    for i in order {
        if left == 0 {
            break;
        }
        cols[i] += 1;
        left -= 1;
    }
    cols
}

/// The bar: `segments` to the scale `scale` over `width` columns (what is left is blank).
pub(crate) fn line(segments: &[Segment], scale: f64, width: usize) -> Line<'static> {
    let values: Vec<f64> = segments.iter().map(|s| s.value).collect();
    let cols = columns(&values, scale, width);
    let spans: Vec<Span<'static>> = segments
        .iter()
        .zip(cols)
        .filter(|(_, n)| *n > 0)
        .map(|(s, n)| Span::styled(s.glyph.to_string().repeat(n), s.style))
        .collect();
    Line::from(spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_proportional_and_add_up() {
        assert_eq!(columns(&[1.0, 1.0, 2.0], 4.0, 8), [2, 2, 4]);
        // 10 columns for three equal thirds: the remainders go first to first.
        assert_eq!(columns(&[1.0, 1.0, 1.0], 3.0, 10), [4, 3, 3]);
        // Part of the scale: the rest stays blank.
        assert_eq!(columns(&[1.0], 4.0, 8), [2]);
        // A tiny segment gets nothing rather than pushing the bar over the width.
        assert_eq!(columns(&[1000.0, 1.0], 1001.0, 10), [10, 0]);
        assert_eq!(columns(&[1.0], 0.0, 10), [0], "no scale, no bar");
        assert_eq!(columns(&[5.0], 1.0, 10), [10], "never over the width");
    }

    #[test]
    fn the_bar_draws_each_segment_with_its_glyph() {
        let s = |value, glyph| Segment {
            value,
            glyph,
            style: Style::new(),
        };
        let l = line(&[s(2.0, '█'), s(1.0, '▒'), s(0.0, 'x')], 4.0, 8);
        let text: String = l.spans.iter().map(|s| s.content.as_ref()).collect();
        assert_eq!(text, "████▒▒");
    }
}
