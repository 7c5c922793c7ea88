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

/// The style of a dim label.
pub(crate) fn dim() -> Style {
    Style::new().fg(Color::DarkGray)
}

/// The style of something good (MATCH, Running, caught up).
pub(crate) fn good() -> Style {
    Style::new().fg(Color::Green)
}

/// The style of something wrong (a difference, a blocker, a stale Lease, a Warning event).
pub(crate) fn bad() -> Style {
    Style::new().fg(Color::Red).add_modifier(Modifier::BOLD)
}

/// The style of something to watch (waiting, pending).
pub(crate) fn warn() -> Style {
    Style::new().fg(Color::Yellow)
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
    fn bytes_show_mebibytes() {
        assert_eq!(bytes(415236096), "415236096 (396 Mi)");
        assert_eq!(mib(1024 * 1024 + 512 * 1024), "1.5");
        assert_eq!(mib(-1048576), "-1");
    }
}
