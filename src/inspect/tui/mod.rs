//! The inspector's terminal UI (ratatui + crossterm): a pure render of an [`Inspection`] or a
//! [`Fleet`], one file per panel (the kdash pattern), the key handling in [`state`], and the
//! live loop in [`live`].
//!
//! Everything here except [`live`] is pure: `draw(frame, &App)` reads the state and writes a
//! frame, so the snapshot tests draw into ratatui's `TestBackend`.

mod bar;
pub(crate) mod blockers;
pub mod cluster;
pub(crate) mod decision;
pub(crate) mod events;
pub(crate) mod expectations;
mod fit;
pub(crate) mod fleet;
pub(crate) mod history;
pub(crate) mod leader;
pub(crate) mod live;
pub(crate) mod overhead;
pub(crate) mod queues;
pub(crate) mod rehearsal;
pub(crate) mod replay;
pub mod shadow;
pub mod state;
pub(crate) mod text;
pub(crate) mod timeline;
pub(crate) mod whatif;

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
mod snapshots;

pub use live::{Gather, run, run_fleet, run_vm};
pub use state::{Action, App, Panel, Screen, ViewState, WhatIfError};
pub use whatif::WhatIfState;

use crate::inspect::history::History;
use crate::inspect::model::{Fleet, Inspection};
use crate::inspect::whatif::WhatIf;
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, BorderType, Clear, Paragraph, Wrap};
use text::{bad, dim, good, warn};

/// Below this many columns or rows, only "terminal too small" is drawn.
pub const MIN_COLUMNS: u16 = 40;
/// See [`MIN_COLUMNS`].
pub const MIN_ROWS: u16 = 10;
/// From this size on, every panel is shown at once (two columns); below it, a tab bar and the
/// focused panel.
pub const GRID_COLUMNS: u16 = 120;
/// See [`GRID_COLUMNS`].
pub const GRID_ROWS: u16 = 34;
/// From this many rows on (a 44-row terminal), the grid gives the History panel all its rows.
pub const HISTORY_FULL_ROWS: u16 = 43;

/// The lines of one panel, `width` columns wide inside its border (only the bars depend on it).
/// [`History`] is what the UI remembers while it runs (the History panel, earlier VMIs);
/// `what_if` the last what-if of the VM (a second bar in the Overhead panel).
pub(crate) fn panel_lines(
    panel: Panel,
    insp: &Inspection,
    history: &History,
    what_if: Option<&WhatIf>,
    width: usize,
) -> Vec<Line<'static>> {
    match panel {
        Panel::Leader => leader::lines(insp),
        Panel::Queues => queues::lines(insp),
        Panel::History => history::lines(history, width),
        Panel::Expectations => expectations::lines(insp),
        Panel::Timeline => timeline::lines_for_width(insp, history, width),
        Panel::Overhead => overhead::lines_for_width(insp, what_if, width),
        Panel::Decision => decision::lines(insp),
        Panel::Blockers => blockers::lines(insp),
        Panel::Events => events::lines(insp),
    }
}

fn render_panel(frame: &mut Frame, area: Rect, panel: Panel, app: &App, insp: &Inspection) {
    let view = &app.view;
    match panel {
        Panel::Leader => leader::render(frame, area, insp, view),
        Panel::Queues => queues::render(frame, area, insp, view),
        Panel::History => history::render(frame, area, &app.history, view),
        Panel::Expectations => expectations::render(frame, area, insp, view),
        Panel::Timeline => timeline::render(frame, area, insp, &app.history, view),
        Panel::Overhead => overhead::render(frame, area, insp, app.what_if.result.as_ref(), view),
        Panel::Decision => decision::render(frame, area, insp, view),
        Panel::Blockers => blockers::render(frame, area, insp, view),
        Panel::Events => events::render(frame, area, insp, view),
    }
}

/// Draw one panel: a bordered block titled with the panel's name (highlighted when focused),
/// its lines wrapped and scrolled; `[n/m]` in the title when it scrolls. A table panel
/// ([`Panel::is_table`]) never wraps a row under its headings: rows are cut with `…` at the
/// panel's width, and the row at the top of the focused panel is shown whole, its continuation
/// indented under its last column.
pub(crate) fn draw_panel(
    frame: &mut Frame,
    area: Rect,
    panel: Panel,
    lines: Vec<Line<'static>>,
    view: &ViewState,
) {
    let focused = view.focus == panel;
    let total = lines.len();
    let scroll = view.scroll_of(panel).min(total.saturating_sub(1) as u16);
    let table = panel.is_table();
    let lines = if table {
        let width = usize::from(area.width.saturating_sub(2));
        fit::fit(lines, width, focused.then_some(usize::from(scroll)))
    } else {
        lines
    };
    let mut title = format!(" {} ", panel.title());
    if scroll > 0
        || wrapped_height(&lines, area.width.saturating_sub(2)) > area.height.saturating_sub(2)
    {
        title = format!(" {} [{}/{}] ", panel.title(), scroll + 1, total);
    }
    let (border, title_style) = if focused {
        (text::accent(), text::accent().add_modifier(Modifier::BOLD))
    } else {
        (dim(), Style::new())
    };
    let block = Block::bordered()
        .border_type(if focused {
            BorderType::Thick
        } else {
            BorderType::Plain
        })
        .border_style(border)
        .title(Span::styled(title, title_style));
    let mut para = Paragraph::new(lines).block(block).scroll((scroll, 0));
    if !table {
        para = para.wrap(Wrap { trim: false });
    }
    frame.render_widget(para, area);
}

/// About how many rows `lines` take when wrapped at `width` columns (at least one per line).
pub(crate) fn wrapped_height(lines: &[Line<'_>], width: u16) -> u16 {
    let width = usize::from(width.max(1));
    let rows: usize = lines.iter().map(|l| l.width().div_ceil(width).max(1)).sum();
    rows.min(usize::from(u16::MAX)) as u16
}

/// Draw the whole UI.
pub(crate) fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    if area.width < MIN_COLUMNS || area.height < MIN_ROWS {
        draw_too_small(frame, area);
        return;
    }
    let editing = app.screen == Screen::Vm && app.what_if.editing;
    let input_rows = if editing {
        whatif::input_height(&app.what_if, area.width)
    } else {
        0
    };
    let [body, input, status] = Layout::vertical([
        Constraint::Fill(1),
        Constraint::Length(input_rows),
        Constraint::Length(1),
    ])
    .areas(area);
    match app.screen {
        Screen::Fleet => fleet::render(frame, body, app),
        Screen::Replay => {
            if let Some(view) = &app.replay {
                replay::render(frame, body, view);
            }
        }
        Screen::Rehearsal => {
            if let Some(view) = &app.rehearsal {
                rehearsal::render(frame, body, view);
            }
        }
        Screen::Vm => {
            draw_vm(frame, body, app);
            if let Some(w) = app.what_if.result.as_ref().filter(|_| app.what_if.open) {
                whatif::render(frame, body, w, app.what_if.scroll);
            }
        }
    }
    if editing {
        whatif::input_line(frame, input, &app.what_if);
    }
    draw_status(frame, status, app);
    if app.view.help {
        draw_help(frame, area, app);
    }
}

fn draw_too_small(frame: &mut Frame, area: Rect) {
    let text = vec![
        Line::styled("terminal too small", bad()),
        Line::raw(format!(
            "{}x{}, need {MIN_COLUMNS}x{MIN_ROWS}",
            area.width, area.height
        )),
        Line::raw("q quits"),
    ];
    let y = area.height.saturating_sub(3) / 2;
    let rect = Rect::new(area.x, area.y + y, area.width, area.height.min(3));
    frame.render_widget(
        Paragraph::new(text)
            .alignment(Alignment::Center)
            .wrap(Wrap { trim: true }),
        rect,
    );
}

/// The VM view's header line: `VM ns/name  printableStatus  vmi Phase  runStrategy X`.
fn header(app: &App) -> Line<'static> {
    let (ns, name) = app.target.clone().unwrap_or_default();
    let mut spans = vec![Span::styled(
        format!("VM {ns}/{name}"),
        Style::new().add_modifier(Modifier::BOLD),
    )];
    let Some(insp) = &app.vm else {
        spans.push(Span::styled("  gathering…", dim()));
        return Line::from(spans);
    };
    match &insp.vm {
        None => spans.push(Span::styled("  not found", bad())),
        Some(vm) => {
            let status = vm.printable_status.clone().unwrap_or_else(|| "-".into());
            let style = match status.as_str() {
                "Running" => good(),
                "Stopped" | "Provisioning" | "Starting" | "Stopping" | "Terminating" => warn(),
                "-" => dim(),
                _ => bad(),
            };
            spans.push(Span::raw("  "));
            spans.push(Span::styled(status, style));
            if let Some(rs) = &vm.run_strategy {
                spans.push(Span::styled(format!("  runStrategy {rs}"), dim()));
            }
        }
    }
    match &insp.vmi {
        Some(vmi) if !vmi.phase.is_empty() => {
            spans.push(Span::raw(format!("  vmi {}", vmi.phase)));
        }
        Some(_) => spans.push(Span::raw("  vmi (no phase)")),
        None => spans.push(Span::styled("  no vmi", dim())),
    }
    if let Some(node) = insp.node.as_ref().map(|n| n.name.clone()) {
        spans.push(Span::styled(format!("  node {node}"), dim()));
    }
    Line::from(spans)
}

fn draw_vm(frame: &mut Frame, area: Rect, app: &App) {
    let [head, rest] = Layout::vertical([Constraint::Length(1), Constraint::Fill(1)]).areas(area);
    frame.render_widget(Paragraph::new(header(app)), head);
    let Some(insp) = &app.vm else {
        let msg = match &app.status.error {
            Some(e) => Line::styled(format!("could not inspect: {e}"), bad()),
            None => Line::styled("gathering…", dim()),
        };
        frame.render_widget(Paragraph::new(msg).wrap(Wrap { trim: false }), rest);
        return;
    };
    let view = &app.view;
    if area.width >= GRID_COLUMNS && area.height >= GRID_ROWS {
        let [left, right] =
            Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)])
                .areas(rest);
        let [l1, l2, l3, l4] = Layout::vertical([
            Constraint::Length(11),
            Constraint::Length(5),
            Constraint::Length(5),
            Constraint::Fill(1),
        ])
        .areas(left);
        // The History panel takes its full height (a row per sparkline) only from
        // HISTORY_FULL_ROWS rows on; below, it scrolls and Decision and Events keep a few rows.
        let history_rows = if area.height >= HISTORY_FULL_ROWS {
            12
        } else {
            9
        };
        let [r1, r2, r3, r4, r5] = Layout::vertical([
            Constraint::Length(11),
            Constraint::Length(history_rows),
            Constraint::Fill(1),
            Constraint::Length(6),
            Constraint::Fill(1),
        ])
        .areas(right);
        for (panel, rect) in [
            (Panel::Leader, l1),
            (Panel::Queues, l2),
            (Panel::Expectations, l3),
            (Panel::Overhead, l4),
            (Panel::Timeline, r1),
            (Panel::History, r2),
            (Panel::Decision, r3),
            (Panel::Blockers, r4),
            (Panel::Events, r5),
        ] {
            render_panel(frame, rect, panel, app, insp);
        }
    } else {
        // Small terminal: a tab bar naming every panel, the focused one below it.
        let tab_width: usize = Panel::ALL.iter().map(|p| p.short_title().len() + 2).sum();
        let tab_rows = if tab_width > usize::from(area.width) {
            2
        } else {
            1
        };
        let [tabs, panel] =
            Layout::vertical([Constraint::Length(tab_rows), Constraint::Fill(1)]).areas(rest);
        let mut spans = Vec::new();
        for p in Panel::ALL {
            let style = if p == view.focus {
                text::selected().add_modifier(Modifier::BOLD)
            } else {
                dim()
            };
            spans.push(Span::styled(format!(" {} ", p.short_title()), style));
        }
        frame.render_widget(
            Paragraph::new(Line::from(spans)).wrap(Wrap { trim: true }),
            tabs,
        );
        render_panel(frame, panel, view.focus, app, insp);
    }
}

fn draw_status(frame: &mut Frame, area: Rect, app: &App) {
    let keys = match app.screen {
        Screen::Vm if app.what_if.editing => {
            "Enter evaluate · Esc cancel · path=value, {patch}, start/stop/restart"
        }
        Screen::Vm if app.what_if.open => "↑↓ scroll · w change · Esc back · ? help · q quit",
        Screen::Fleet if app.fleet_filter.editing => "type to filter · Enter keep · Esc clear",
        Screen::Fleet => "↑↓ select · Enter open · s sort · / filter · ? help · q quit",
        Screen::Vm if app.has_fleet => {
            "Tab panel · ↑↓ scroll · Esc fleet · r refresh · ? help · q quit"
        }
        Screen::Vm => "Tab panel · ↑↓ scroll · r refresh · ? help · q quit",
        Screen::Replay => {
            "←→ step · n p next/prev difference · PgUp PgDn 10 · Home End ends · ? help"
        }
        Screen::Rehearsal => {
            "↑↓ select a VM · PgUp PgDn page · Home End first/last · ? help · q quit"
        }
    };
    let mut spans = match app.screen {
        Screen::Vm => whatif::status_spans(&app.what_if),
        Screen::Fleet if app.fleet_filter.editing => vec![Span::styled(
            format!("/{}▏  ", app.fleet_filter.text),
            text::accent(),
        )],
        Screen::Fleet | Screen::Replay | Screen::Rehearsal => Vec::new(),
    };
    if let Some(e) = &app.status.error {
        let since = app
            .status
            .last_ok
            .map(|t| format!(" (data from {})", text::clock(t)))
            .unwrap_or_default();
        spans.push(Span::styled(format!("error: {e}{since}  "), bad()));
    } else if app.status.loading {
        spans.push(Span::styled("refreshing…  ", warn()));
    } else if let Some(t) = app.status.last_ok {
        spans.push(Span::styled(
            format!("refreshed {}  ", text::clock(t)),
            dim(),
        ));
    }
    spans.push(Span::styled(keys, dim()));
    frame.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// The keys of the view shown: `(keys, what they do)`, for the help overlay. Esc goes back one
/// level (what-if → VM → fleet) and never quits; `q` and Ctrl-C quit from every view (in the
/// what-if input `q` is text, Ctrl-C still quits).
pub(crate) fn view_keys(app: &App) -> Vec<(&'static str, &'static str)> {
    let mut keys = Vec::new();
    match app.screen {
        Screen::Vm if app.what_if.open => {
            keys.push(("↑ ↓, j k", "scroll the what-if"));
            keys.push(("PgUp PgDn", "scroll by half a screen"));
            keys.push(("Home End, g G", "top / bottom"));
            keys.push(("w", "change the what-if"));
            keys.push(("Esc", "close the what-if, back to the VM"));
        }
        Screen::Vm => {
            keys.push(("Tab, Shift-Tab", "next / previous panel"));
            keys.push(("↑ ↓, j k", "scroll the focused panel"));
            keys.push(("PgUp PgDn", "scroll by half a screen"));
            keys.push(("Home End, g G", "top / bottom of the panel"));
            keys.push(("w", "what-if: type a change, Enter evaluates it"));
            if app.has_fleet {
                keys.push(("Esc", "back to the fleet view"));
            }
        }
        Screen::Fleet => {
            keys.push(("↑ ↓, j k", "select a VM"));
            keys.push(("PgUp PgDn", "a page up / down"));
            keys.push(("Home End, g G", "first / last VM"));
            keys.push(("Enter", "open the selected VM"));
            keys.push(("s", "sort by the next column (problems stay first)"));
            keys.push(("/", "filter by namespace/name; Enter keeps it"));
            keys.push(("Esc", "clear the filter"));
        }
        Screen::Replay => {
            keys.push(("→ ←, l h", "the next / previous recorded reconcile"));
            keys.push(("PgDn PgUp", "ten reconciles forward / back"));
            keys.push(("End Home, G g", "the last / first reconcile"));
            keys.push((
                "n, p N",
                "the next / previous one that differs or was not replayed",
            ));
        }
        Screen::Rehearsal => {
            keys.push(("↑ ↓, j k", "select a VM: its causes show below the table"));
            keys.push(("PgUp PgDn", "a page up / down"));
            keys.push(("Home End, g G", "first / last VM"));
        }
    }
    if !matches!(app.screen, Screen::Replay | Screen::Rehearsal) {
        keys.push(("r", "refresh now (it also refreshes about once a second)"));
    }
    keys.push(("?", "this help (Esc or ? closes it)"));
    keys.push(("q, Ctrl-C", "quit"));
    keys
}

/// The help overlay's text.
pub(crate) fn help_lines(app: &App) -> Vec<Line<'static>> {
    let view = match app.screen {
        Screen::Vm if app.what_if.open => "Keys of the what-if",
        Screen::Vm => "Keys of the VM view",
        Screen::Fleet => "Keys of the fleet view",
        Screen::Replay => "Keys of the replay",
        Screen::Rehearsal => "Keys of the upgrade rehearsal",
    };
    let mut out = vec![Line::styled(
        view,
        Style::new().add_modifier(Modifier::BOLD),
    )];
    out.extend(view_keys(app).into_iter().map(|(k, what)| {
        Line::from(vec![
            Span::styled(format!("{k:>15}  "), text::accent()),
            Span::raw(what),
        ])
    }));
    out
}

fn draw_help(frame: &mut Frame, area: Rect, app: &App) {
    let lines = help_lines(app);
    let w = area.width.saturating_sub(4).min(72);
    let h = (wrapped_height(&lines, w.saturating_sub(2)) + 2).min(area.height.saturating_sub(2));
    let rect = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: false }).block(
            Block::bordered()
                .title(" Keys ")
                .border_style(text::accent()),
        ),
        rect,
    );
}

/// Render a [`Fleet`] or an [`Inspection`] to plain text at a given size (docs, `--once`-style
/// captures and tests): the frame's characters, one line per row, trailing spaces trimmed.
pub fn capture(app: &App, columns: u16, rows: u16) -> String {
    draw_to_text(columns, rows, |f| draw(f, app))
}

/// An [`App`] showing this inspection (no fleet behind it).
pub fn app_for_vm(insp: Inspection) -> App {
    let mut app = App::vm(&insp.namespace, &insp.name);
    let at = insp.generated_at;
    app.set_vm(insp, at);
    app
}

/// An [`App`] showing this fleet.
pub fn app_for_fleet(fleet: Fleet) -> App {
    let mut app = App::fleet();
    let at = fleet.generated_at;
    app.set_fleet(fleet, at);
    app
}

/// One panel alone, `columns` wide and as tall as its wrapped lines, as plain text (the
/// captures of docs/inspect.md).
#[cfg(test)]
pub(crate) fn capture_panel(panel: Panel, insp: &Inspection, columns: u16) -> String {
    capture_panel_with(panel, insp, &History::default(), None, columns)
}

/// [`capture_panel`] with what the UI remembered while it ran and the VM's last what-if.
#[cfg(test)]
pub(crate) fn capture_panel_with(
    panel: Panel,
    insp: &Inspection,
    history: &History,
    what_if: Option<&WhatIf>,
    columns: u16,
) -> String {
    let width = usize::from(columns.saturating_sub(2));
    let lines = panel_lines(panel, insp, history, what_if, width);
    let rows = wrapped_height(&lines, columns.saturating_sub(2)) + 2;
    let view = ViewState {
        focus: panel,
        ..ViewState::default()
    };
    draw_to_text(columns, rows, |f| {
        draw_panel(f, f.area(), panel, lines, &view);
    })
}

/// What `draw` puts on an in-memory `columns` × `rows` terminal, one line per row, trailing blanks
/// trimmed ([`capture`] and the snapshot tests).
pub(crate) fn draw_to_text(
    columns: u16,
    rows: u16,
    draw: impl FnOnce(&mut ratatui::Frame<'_>),
) -> String {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    let mut terminal = match Terminal::new(TestBackend::new(columns, rows)) {
        Ok(t) => t,
        Err(e) => match e {},
    };
    let _ = terminal.draw(draw);
    let buffer = terminal.backend().buffer();
    let mut out = String::new();
    for y in 0..rows {
        let line: String = (0..columns).map(|x| buffer[(x, y)].symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
