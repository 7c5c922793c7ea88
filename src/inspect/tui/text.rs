//! Formatting shared by the panels: durations, clock times, byte counts, styles.

use chrono::{DateTime, Utc};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// A duration in seconds for humans: `0.4 s`, `42 s`, `4 m 57 s`, `2 h 5 m`, `3 d 4 h`.
pub(crate) fn duration(seconds: f64) -> String {
    if !seconds.is_finite() {
        return "?".into();
    }
    let sign = if seconds < 0.0 { "-" } else { "" };
    let s = seconds.abs();
    if s < 0.05 {
        return "0 s".into();
    }
    let tenths = (s * 10.0).round() / 10.0;
    if tenths < 10.0 && tenths.fract() != 0.0 {
        return format!("{sign}{tenths:.1} s");
    }
    let s = s.round() as u64;
    let body = match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} m {} s", s / 60, s % 60),
        3600..86400 => format!("{} h {} m", s / 3600, (s % 3600) / 60),
        _ => format!("{} d {} h", s / 86400, (s % 86400) / 3600),
    };
    format!("{sign}{body}")
}

/// `HH:MM:SS` (UTC).
pub(crate) fn clock(t: DateTime<Utc>) -> String {
    t.format("%H:%M:%S").to_string()
}

/// Bytes with their MiB: `415236096 (396 Mi)`, `1048576 (1 Mi)`, `1000 (0.001 Mi)`.
pub(crate) fn bytes(b: i64) -> String {
    format!("{b} ({} Mi)", mib(b))
}

/// Bytes as MiB, without a trailing `.0`.
pub(crate) fn mib(b: i64) -> String {
    const MI: i64 = 1024 * 1024;
    if b % MI == 0 {
        format!("{}", b / MI)
    } else {
        let v = b as f64 / MI as f64;
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The UI's styles. Two themes: [`Theme::colour`] uses only the terminal's own palette (the 16
/// named ANSI colours, which dark and light terminal themes each map to readable shades), never
/// a fixed black or white foreground nor a background colour, and dims with the `DIM` attribute
/// rather than dark grey (unreadable on dark backgrounds); [`Theme::plain`], for `NO_COLOR`
/// (<https://no-color.org>), keeps only bold, dim and reverse video. Bars tell their segments
/// apart by glyph as well as by colour, so they read in both.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Theme {
    /// Labels, notes, headings.
    pub dim: Style,
    /// Something good (MATCH, Running, caught up).
    pub good: Style,
    /// Something wrong (a difference, a blocker, a stale Lease, a Warning event).
    pub bad: Style,
    /// Something to watch (waiting, pending).
    pub warn: Style,
    /// The focused panel's border and title, key names, the what-if frame.
    pub accent: Style,
    /// The selected row, the focused tab.
    pub selected: Style,
}

impl Theme {
    /// The colour theme.
    pub(crate) const fn colour() -> Theme {
        Theme {
            dim: Style::new().add_modifier(Modifier::DIM),
            good: Style::new().fg(Color::Green),
            bad: Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
            warn: Style::new().fg(Color::Yellow),
            accent: Style::new().fg(Color::Cyan),
            selected: Style::new().add_modifier(Modifier::REVERSED),
        }
    }

    /// The theme without colour.
    pub(crate) const fn plain() -> Theme {
        Theme {
            dim: Style::new().add_modifier(Modifier::DIM),
            good: Style::new(),
            bad: Style::new().add_modifier(Modifier::BOLD),
            warn: Style::new(),
            accent: Style::new().add_modifier(Modifier::BOLD),
            selected: Style::new().add_modifier(Modifier::REVERSED),
        }
    }

    /// The theme for this value of `NO_COLOR`: plain when it is set and not empty (as no-color.org
    /// says), else colour.
    pub(crate) fn for_no_color(no_color: Option<&std::ffi::OsStr>) -> Theme {
        match no_color {
            Some(v) if !v.is_empty() => Theme::plain(),
            _ => Theme::colour(),
        }
    }
}

static THEME: std::sync::OnceLock<Theme> = std::sync::OnceLock::new();

/// Choose the theme from the environment (`NO_COLOR`); the live loop calls it before drawing.
/// Without it (tests, captures) the colour theme is used.
pub(crate) fn init_theme_from_env() {
    let _ = THEME.set(Theme::for_no_color(std::env::var_os("NO_COLOR").as_deref()));
}

/// The theme in use.
pub(crate) fn theme() -> &'static Theme {
    THEME.get_or_init(Theme::colour)
}

/// The style of a dim label.
pub(crate) fn dim() -> Style {
    theme().dim
}

/// The style of something good (MATCH, Running, caught up).
pub(crate) fn good() -> Style {
    theme().good
}

/// The style of something wrong (a difference, a blocker, a stale Lease, a Warning event).
pub(crate) fn bad() -> Style {
    theme().bad
}

/// The style of something to watch (waiting, pending).
pub(crate) fn warn() -> Style {
    theme().warn
}

/// The style of the focused panel's border, key names and other highlights.
pub(crate) fn accent() -> Style {
    theme().accent
}

/// The style of the selected row.
pub(crate) fn selected() -> Style {
    theme().selected
}

/// `label: value` with a dim label.
pub(crate) fn field(label: &str, value: impl Into<String>) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{label}: "), dim()),
        Span::raw(value.into()),
    ])
}

/// `label: value` with a dim label and a styled value.
pub(crate) fn field_styled(label: &str, value: impl Into<String>, style: Style) -> Line<'static> {
    Line::from(vec![
        Span::styled(format!("{label}: "), dim()),
        Span::styled(value.into(), style),
    ])
}

/// A dim line (a note, or "none").
pub(crate) fn note(text: impl Into<String>) -> Line<'static> {
    Line::styled(text.into(), dim())
}

/// Left-aligned in `width` columns (longer text is kept whole).
pub(crate) fn pad(text: &str, width: usize) -> String {
    format!("{text:<width$}")
}

/// Right-aligned in `width` columns.
pub(crate) fn rpad(text: &str, width: usize) -> String {
    format!("{text:>width$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_a_person_would_say_them() {
        for (seconds, want) in [
            (0.0, "0 s"),
            (0.4, "0.4 s"),
            (0.04, "0 s"),
            (-0.01, "0 s"),
            (3.0, "3 s"),
            (1.98, "2 s"), // not 2.0 s
            (9.96, "10 s"),
            (42.4, "42 s"),
            (297.0, "4 m 57 s"),
            (7500.0, "2 h 5 m"),
            (3.0 * 86400.0 + 4.0 * 3600.0, "3 d 4 h"),
            (-42.0, "-42 s"),
            (f64::NAN, "?"),
        ] {
            assert_eq!(duration(seconds), want, "{seconds}");
        }
    }

    #[test]
    fn clock_shows_utc_time_of_day() {
        let before: DateTime<Utc> = "2026-11-30T00:42:37Z".parse().unwrap();
        assert_eq!(clock(before), "00:42:37");
    }

    #[test]
    fn no_color_set_and_not_empty_drops_every_colour() {
        use std::ffi::OsStr;
        assert_eq!(Theme::for_no_color(None), Theme::colour());
        assert_eq!(Theme::for_no_color(Some(OsStr::new(""))), Theme::colour());
        let plain = Theme::for_no_color(Some(OsStr::new("1")));
        assert_eq!(plain, Theme::plain());
        for s in [
            plain.dim,
            plain.good,
            plain.bad,
            plain.warn,
            plain.accent,
            plain.selected,
        ] {
            assert_eq!((s.fg, s.bg), (None, None), "{s:?}");
        }
        // The colour theme: no fixed background, no black or white text, no dark grey.
        let c = Theme::colour();
        for s in [c.dim, c.good, c.bad, c.warn, c.accent, c.selected] {
            assert_eq!(s.bg, None, "{s:?}");
            assert!(
                !matches!(
                    s.fg,
                    Some(Color::Black | Color::White | Color::DarkGray | Color::Gray)
                ),
                "{s:?}"
            );
        }
    }

    #[test]
    fn bytes_show_mebibytes() {
        assert_eq!(bytes(415236096), "415236096 (396 Mi)");
        assert_eq!(mib(1024 * 1024 + 512 * 1024), "1.5");
        assert_eq!(mib(-1048576), "-1");
    }
}
