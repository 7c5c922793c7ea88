//! The fleet view (`inspect` with no name): every VM in scope, problems first, with its
//! printableStatus, VMI phase and time in it (a bar of its order of magnitude, and the
//! duration), retries, pending expectations, the overhead check and the launcher pod's memory
//! headroom to its limit as a bar; the Lease and queue depths above. Only the rows on screen are built, so a page of a
//! 10,000-VM fleet costs what a page of ten does.

use super::state::{App, fleet_page, row_has_problem};
use super::text::{bad, dim, duration, good, pad, rpad, warn};
use crate::inspect::model::FleetRow;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

/// The column headings.
pub(crate) const HEADINGS: [&str; 10] = [
    "NAMESPACE",
    "NAME",
    "STATUS",
    "VMI",
    "IN PHASE",
    "RETRIES",
    "EXPECT",
    "OVERHEAD",
    "HEADROOM",
    "PROBLEM",
];

/// Cells of the time-in-phase bar: one, then one more at each of 10 s, 1 m, 10 m and 1 h (an
/// order of magnitude a cell, so 4 s and 40 min read apart at a glance).
const PHASE_CELLS: usize = 5;
const PHASE_STEPS: [f64; 4] = [10.0, 60.0, 600.0, 3600.0];
/// Cells of the memory bar.
const MEMORY_CELLS: usize = 8;

/// The time-in-phase bar: `███··` (4 s reads `█····`, an hour `█████`).
fn phase_bar(row: &FleetRow) -> Vec<Span<'static>> {
    let Some(secs) = row.phase_seconds else {
        return vec![Span::raw(" ".repeat(PHASE_CELLS))];
    };
    let filled = 1 + PHASE_STEPS.iter().filter(|s| secs >= **s).count();
    let style = match row.vmi_phase.as_deref() {
        Some("Running") | Some("Succeeded") => good(),
        Some("Failed") => bad(),
        _ => warn(),
    };
    vec![
        Span::styled("█".repeat(filled), style),
        Span::styled("·".repeat(PHASE_CELLS - filled), dim()),
    ]
}

/// The launcher pod's memory request against its limit: `█` the request, `─` the headroom to
/// the limit (yellow under a tenth, red at none); `no limit`, or `-` with no pod.
fn headroom_bar(row: &FleetRow) -> Vec<Span<'static>> {
    let (request, limit) = match (row.memory_request_bytes, row.memory_limit_bytes) {
        (Some(r), Some(l)) if l > 0 => (r.max(0), l),
        (Some(_), _) => return vec![Span::styled(pad("no limit", MEMORY_CELLS), dim())],
        (None, _) => return vec![Span::styled(pad("-", MEMORY_CELLS), dim())],
    };
    let headroom = limit - request;
    let used = super::bar::columns(&[request as f64], limit as f64, MEMORY_CELLS)[0];
    if headroom <= 0 {
        return vec![Span::styled("█".repeat(MEMORY_CELLS), bad())];
    }
    // Some headroom always shows, however little.
    let used = used.min(MEMORY_CELLS - 1);
    let style = if (headroom as f64) < 0.1 * limit as f64 {
        warn()
    } else {
        good()
    };
    vec![
        Span::raw("█".repeat(used)),
        Span::styled("─".repeat(MEMORY_CELLS - used), style),
    ]
}

fn overhead(row: &FleetRow) -> (String, Style) {
    match (row.overhead_match, row.overhead_difference_bytes) {
        (Some(true), _) => ("MATCH".into(), good()),
        (Some(false), Some(d)) => (format!("{d:+}"), bad()),
        (Some(false), None) => ("DIFFERS".into(), bad()),
        (None, _) => ("-".into(), dim()),
    }
}

fn row_line(row: &FleetRow, selected: bool, partial: bool) -> Line<'static> {
    let status = row.printable_status.clone().unwrap_or_else(|| "-".into());
    let phase = row.vmi_phase.clone().unwrap_or_else(|| "-".into());
    let in_phase = row
        .phase_seconds
        .map(duration)
        .unwrap_or_else(|| "-".into());
    let (over, over_style) = if partial {
        ("…".to_string(), dim())
    } else {
        overhead(row)
    };
    let count = |n: u64| {
        if partial {
            "…".to_string()
        } else {
            n.to_string()
        }
    };
    let status_style = match status.as_str() {
        "Running" => good(),
        "Stopped" | "Starting" | "Stopping" | "Provisioning" | "Terminating" | "-" => Style::new(),
        _ => bad(),
    };
    let num_style = |n: u64| if n > 0 { warn() } else { Style::new() };
    let mut spans = vec![
        Span::raw(format!(
            "{} {} ",
            pad(&row.namespace, 12),
            pad(&row.name, 20)
        )),
        Span::styled(pad(&status, 18), status_style),
        Span::raw(format!(" {} ", pad(&phase, 10))),
    ];
    spans.extend(phase_bar(row));
    spans.extend([
        Span::raw(format!(" {} ", rpad(&in_phase, 8))),
        Span::styled(rpad(&count(row.retries), 7), num_style(row.retries)),
        Span::raw(" "),
        Span::styled(
            rpad(&count(row.pending_expectations), 6),
            num_style(row.pending_expectations),
        ),
        Span::raw(" "),
        Span::styled(pad(&over, 9), over_style),
        Span::raw(" "),
    ]);
    if partial {
        spans.push(Span::styled(pad("…", MEMORY_CELLS), dim()));
    } else {
        spans.extend(headroom_bar(row));
    }
    spans.push(Span::raw(" "));
    if let Some(p) = &row.problem {
        spans.push(Span::styled(p.clone(), bad()));
    }
    let mut line = Line::from(spans);
    if selected {
        line = line.style(super::text::selected());
    }
    line
}

/// The heading line of the table.
pub(crate) fn heading_line() -> Line<'static> {
    let h = HEADINGS;
    Line::styled(
        format!(
            "{} {} {} {} {} {} {} {} {} {}",
            pad(h[0], 12),
            pad(h[1], 20),
            pad(h[2], 18),
            pad(h[3], 10),
            rpad(h[4], PHASE_CELLS + 1 + 8),
            rpad(h[5], 7),
            rpad(h[6], 6),
            pad(h[7], 9),
            pad(h[8], MEMORY_CELLS),
            h[9]
        ),
        dim().add_modifier(Modifier::BOLD),
    )
}

/// Draw the fleet view into `area`.
pub(crate) fn render(frame: &mut Frame, area: Rect, app: &App) {
    let [head, table] = Layout::vertical([Constraint::Length(2), Constraint::Fill(1)]).areas(area);
    let Some(fleet) = &app.fleet else {
        let msg = match &app.status.error {
            Some(e) => Line::styled(format!("could not list the VMs: {e}"), bad()),
            None => Line::styled("gathering…", dim()),
        };
        frame.render_widget(Paragraph::new(msg), head);
        return;
    };
    let rows = app.fleet_rows();
    let problems = rows.iter().filter(|r| row_has_problem(r)).count();
    let counted = if app.fleet_partial { "at least " } else { "" };
    let scope = fleet
        .namespace
        .as_deref()
        .map(|n| format!("namespace {n}"))
        .unwrap_or_else(|| "all namespaces".into());
    let mut first = vec![
        Span::styled("Fleet ", Style::new().add_modifier(Modifier::BOLD)),
        Span::raw(format!("{scope}: {counted}{} VM(s), ", rows.len())),
        Span::styled(
            format!("{problems} with problems"),
            if problems > 0 { bad() } else { good() },
        ),
    ];
    if app.fleet_partial {
        first.push(Span::styled(
            "  (first page by name; gathering the whole fleet…)",
            warn(),
        ));
    }
    if !fleet.missing.is_empty() {
        let m: Vec<String> = fleet
            .missing
            .iter()
            .map(|m| format!("{}: {}", m.what, m.reason))
            .collect();
        first.push(Span::styled(
            format!("  not read: {}", m.join("; ")),
            warn(),
        ));
    }
    let holder = match &fleet.lease {
        Some(l) => {
            let who = l.holder_identity.clone().unwrap_or_else(|| "nobody".into());
            let stale = if l.stale { " STALE" } else { "" };
            format!("Lease {} held by {who}{stale}", l.lease)
        }
        None if app.fleet_partial => "Lease: reading…".into(),
        None => "Lease: not read".into(),
    };
    let queues: Vec<String> = fleet
        .queues
        .iter()
        .map(|q| format!("{} depth {}", q.name, q.depth))
        .collect();
    let second = Line::from(vec![
        Span::styled(holder, dim()),
        Span::styled(
            if queues.is_empty() {
                String::new()
            } else {
                format!("  ·  {}", queues.join("  "))
            },
            dim(),
        ),
    ]);
    frame.render_widget(Paragraph::new(vec![Line::from(first), second]), head);

    let page = fleet_page(app.view.size.1).min(usize::from(table.height.saturating_sub(3)).max(1));
    let start = app.fleet_offset.min(rows.len().saturating_sub(1));
    let mut lines = vec![heading_line()];
    if rows.is_empty() {
        lines.push(Line::styled("no VirtualMachines in scope", dim()));
    }
    lines.extend(
        rows.iter()
            .enumerate()
            .skip(start)
            .take(page)
            .map(|(i, r)| row_line(r, i == app.selected, app.fleet_partial)),
    );
    let mut title = if rows.len() > page {
        format!(
            " VirtualMachines {}-{} of {} ",
            start + 1,
            (start + page).min(rows.len()),
            rows.len()
        )
    } else {
        " VirtualMachines ".to_string()
    };
    title.push_str(&format!(
        "· problems first, then {} ",
        app.fleet_sort.label()
    ));
    if !app.fleet_filter.text.is_empty() {
        title.push_str(&format!("· filter /{} ", app.fleet_filter.text));
    }
    // Rows wider than the table are cut with `…`, never wrapped.
    let width = usize::from(table.width.saturating_sub(2));
    let lines: Vec<Line<'static>> = lines
        .iter()
        .map(|l| super::fit::truncate(l, width))
        .collect();
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::bordered()
                .title(title)
                .border_style(super::text::accent()),
        ),
        table,
    );
}
