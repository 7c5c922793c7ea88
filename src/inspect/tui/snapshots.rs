//! Snapshot tests of the render: each scenario of issue 10 drawn into ratatui's `TestBackend`
//! and compared with the committed `.snap` file (plain `cargo test` compares; `cargo insta
//! review` or `INSTA_UPDATE=always` updates after an intended change).

use super::fixtures;
use super::{App, Panel, app_for_fleet, app_for_vm, capture};

/// The grid layout: every panel at once.
const WIDE: (u16, u16) = (140, 44);

fn vm(insp: crate::inspect::model::Inspection) -> String {
    capture(&app_for_vm(insp), WIDE.0, WIDE.1)
}

#[test]
fn running_under_our_controller() {
    insta::assert_snapshot!(vm(fixtures::running_ours()));
}

#[test]
fn halted_with_no_vmi() {
    insta::assert_snapshot!(vm(fixtures::halted_no_vmi()));
}

#[test]
fn crash_loop_back_off() {
    insta::assert_snapshot!(vm(fixtures::crash_loop()));
}

#[test]
fn rate_limited_retry() {
    insta::assert_snapshot!(vm(fixtures::rate_limited_retry()));
}

#[test]
fn pending_expectations() {
    insta::assert_snapshot!(vm(fixtures::pending_expectations()));
}

#[test]
fn pod_memory_mismatch() {
    insta::assert_snapshot!(vm(fixtures::memory_mismatch()));
}

#[test]
fn settings_behind_the_kubevirt_cr() {
    insta::assert_snapshot!(vm(fixtures::settings_behind_the_cr()));
}

#[test]
fn kubevirt_lease_metrics_only() {
    insta::assert_snapshot!(vm(fixtures::kubevirt_metrics()));
}

#[test]
fn stale_lease() {
    insta::assert_snapshot!(vm(fixtures::stale_lease()));
}

#[test]
fn unschedulable() {
    insta::assert_snapshot!(vm(fixtures::unschedulable()));
}

#[test]
fn datavolume_pending() {
    insta::assert_snapshot!(vm(fixtures::datavolume_pending()));
}

#[test]
fn missing_priority_class() {
    insta::assert_snapshot!(vm(fixtures::missing_priority_class()));
}

#[test]
fn pod_security_rejected() {
    insta::assert_snapshot!(vm(fixtures::pod_security_rejected()));
}

/// `inspect vm/NAME --shadow FILE`: the Leader panel ends with the shadow's verdict on the
/// leader's last writes for the VM (here its VMI creation differed from ours).
#[test]
fn leader_panel_with_the_shadows_last_verdicts() {
    let insp = fixtures::shadow_differs();
    insta::assert_snapshot!(crate::inspect::tui::capture_panel(
        Panel::Leader,
        &insp,
        110
    ));
}

#[test]
fn small_terminal_shows_the_focused_panel_under_a_tab_bar() {
    let mut app = app_for_vm(fixtures::unschedulable());
    app.view.focus = Panel::Blockers;
    insta::assert_snapshot!(capture(&app, 80, 24));
}

#[test]
fn tiny_terminal_says_so() {
    let app = app_for_vm(fixtures::running_ours());
    insta::assert_snapshot!(capture(&app, 30, 8));
}

#[test]
fn help_overlay() {
    let mut app = app_for_vm(fixtures::running_ours());
    app.view.help = true;
    insta::assert_snapshot!(capture(&app, 100, 30));
}

#[test]
fn fleet_view_problems_first() {
    let mut app = app_for_fleet(fixtures::fleet());
    app.resize(140, 16);
    insta::assert_snapshot!(capture(&app, 140, 16));
}

#[test]
fn fleet_view_sorted_by_retries_and_filtered() {
    let mut app = app_for_fleet(fixtures::fleet());
    app.resize(120, 14);
    app.fleet_sort = super::state::FleetSort::Retries;
    app.fleet_filter.text = "vm-".into();
    app.fleet_filter.editing = true;
    insta::assert_snapshot!(capture(&app, 120, 14));
}

#[test]
fn fleet_view_pages_a_large_fleet() {
    let mut app = app_for_fleet(fixtures::big_fleet(10_000));
    app.resize(120, 14);
    app.selected = 9_999;
    app.fleet_offset = 9_992;
    insta::assert_snapshot!(capture(&app, 120, 14));
}

#[test]
fn last_error_is_shown_in_the_status_line_over_the_last_data() {
    let mut app = app_for_vm(fixtures::running_ours());
    app.set_error(
        "GET /apis/kubevirt.io/v1/namespaces/default/virtualmachines/vm-cirros: connection refused"
            .into(),
    );
    let screen = capture(&app, 140, 44);
    let status = screen.lines().nth(43).unwrap_or_default();
    assert!(status.starts_with("error: GET /apis"), "{status}");
    assert!(status.contains("(data from 00:42:40)"), "{status}");
    assert!(screen.contains("VMI Running: the Always branch does nothing"));
}

#[test]
fn gathering_before_the_first_inspection() {
    let app = App::vm("default", "vm-cirros");
    let screen = capture(&app, 100, 20);
    assert!(
        screen.starts_with("VM default/vm-cirros  gathering…"),
        "{screen}"
    );
}

/// The Overhead check panel's rows of a capture: from its TERM heading to its bottom border.
fn overhead_rows(screen: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut col = None;
    for line in screen.lines() {
        let chars: Vec<char> = line.chars().collect();
        let at = |c: usize| chars.iter().skip(c).collect::<String>();
        if col.is_none() {
            col = line.find("TERM").map(|b| line[..b].chars().count());
            continue;
        }
        let c = col.unwrap_or(0);
        if chars.get(c - 1) != Some(&'│') && chars.get(c - 1) != Some(&'┃') {
            break;
        }
        let cell: String = at(c).chars().take_while(|ch| !"│┃".contains(*ch)).collect();
        if cell.trim().is_empty() {
            break;
        }
        out.push(cell);
    }
    out
}

/// The text inside the Overhead check panel of a grid capture (left column).
fn overhead_panel_text(screen: &str) -> String {
    let mut inside = false;
    let mut out = String::new();
    for line in screen.lines() {
        if line.contains("Overhead check") {
            inside = true;
            continue;
        }
        if inside {
            if line.starts_with(['└', '┗']) {
                break;
            }
            let cell: String = line
                .chars()
                .skip(1)
                .take_while(|c| !"│┃".contains(*c))
                .collect();
            out.push_str(&cell);
            out.push('\n');
        }
    }
    out
}

#[test]
fn overhead_rows_are_cut_not_wrapped_under_the_headings_at_120_columns() {
    let insp = fixtures::vfio_dominated();
    let names: Vec<String> = insp
        .overhead_check
        .as_ref()
        .unwrap()
        .terms
        .iter()
        .map(|t| t.name.clone())
        .collect();
    let screen = capture(&app_for_vm(insp), 120, 44);
    let rows = overhead_rows(&screen);
    assert!(!rows.is_empty(), "{screen}");
    for row in &rows {
        assert!(
            names.iter().any(|n| row.starts_with(n.as_str())),
            "a row that is not a term: {row:?}\n{screen}"
        );
    }
    assert!(
        rows.iter().any(|r| r.contains('…')),
        "the long WHY is cut: {rows:?}"
    );
    insta::assert_snapshot!(screen);
}

#[test]
fn the_overhead_row_at_the_top_of_the_focused_panel_is_shown_whole() {
    let insp = fixtures::vfio_dominated();
    let mut app = app_for_vm(insp.clone());
    app.view.focus = Panel::Overhead;
    let lines =
        crate::inspect::tui::panel_lines(Panel::Overhead, &insp, &Default::default(), None, 58);
    let vfio = lines
        .iter()
        .position(|l| {
            l.spans
                .first()
                .is_some_and(|s| s.content.starts_with("vfio "))
        })
        .expect("the vfio row");
    app.view.scroll[Panel::ALL
        .iter()
        .position(|p| *p == Panel::Overhead)
        .unwrap()] = vfio as u16;
    let screen = capture(&app, 120, 44);
    let whole = fixtures::vfio_dominated().overhead_check.unwrap().terms[9]
        .reason
        .clone();
    let panel = overhead_panel_text(&screen);
    let shown: Vec<&str> = panel.split_whitespace().collect();
    assert!(
        shown.join(" ").contains(&whole),
        "{whole:?} is not shown whole:\n{screen}"
    );
    insta::assert_snapshot!(screen);
}

#[test]
fn overhead_bar_dominated_by_vfio_at_80_120_and_200_columns() {
    use crate::inspect::tui::capture_panel;
    let insp = fixtures::vfio_dominated();
    let mut out = String::new();
    for w in [80, 120, 200] {
        let panel = capture_panel(Panel::Overhead, &insp, w);
        let bar = panel.lines().nth(4).unwrap_or_default();
        // The bar fills the panel: guest, the terms, the headroom to the limit.
        assert_eq!(bar.chars().count(), usize::from(w), "{panel}");
        assert!(bar.contains('█') && bar.contains('─'), "{bar}");
        let shares: Vec<&str> = panel.lines().take(6).collect();
        out.push_str(&format!("{w} columns:\n{}\n\n", shares.join("\n")));
    }
    insta::assert_snapshot!(out);
}

#[test]
fn overhead_bar_without_a_limit() {
    use crate::inspect::tui::capture_panel;
    let panel = capture_panel(Panel::Overhead, &fixtures::running_ours(), 80);
    assert!(panel.contains("limit: none"), "{panel}");
    insta::assert_snapshot!(panel.lines().take(6).collect::<Vec<_>>().join("\n"));
}

#[test]
fn phase_timeline_bar_at_80_120_and_200_columns() {
    use crate::inspect::tui::capture_panel;
    let mut out = String::new();
    for (scenario, insp) in [
        ("running", fixtures::running_ours()),
        (
            "three failed starts, in the backoff",
            fixtures::crash_loop(),
        ),
    ] {
        for w in [80, 120, 200] {
            let panel = capture_panel(Panel::Timeline, &insp, w);
            let bar = panel.lines().nth(1).unwrap_or_default();
            assert_eq!(
                bar.chars().count(),
                usize::from(w),
                "to scale, the full width: {panel}"
            );
            let rows: Vec<&str> = panel.lines().take(4).collect();
            out.push_str(&format!(
                "{scenario}, {w} columns:\n{}\n\n",
                rows.join("\n")
            ));
        }
    }
    insta::assert_snapshot!(out);
}

/// One panel after the UI gathered each of `gathers` in turn.
fn history_capture(
    panel: Panel,
    gathers: Vec<crate::inspect::model::Inspection>,
    columns: u16,
) -> String {
    let app = app_after(gathers);
    let insp = app.vm.as_ref().expect("an inspection");
    crate::inspect::tui::capture_panel_with(panel, insp, &app.history, None, columns)
}

/// The captures docs/inspect.md shows ("Terminal UI"): which scenario each panel is shown in.
pub(crate) fn doc_captures() -> Vec<(Panel, &'static str, String)> {
    use crate::inspect::tui::capture_panel;
    let w = 100;
    vec![
        (
            Panel::Leader,
            "running under our controller",
            capture_panel(Panel::Leader, &fixtures::running_ours(), w),
        ),
        (
            Panel::Leader,
            "stale Lease",
            capture_panel(Panel::Leader, &fixtures::stale_lease(), w),
        ),
        (
            Panel::Leader,
            "with `--shadow FILE`: the VMI creation differed",
            capture_panel(Panel::Leader, &fixtures::shadow_differs(), w),
        ),
        (
            Panel::Queues,
            "KubeVirt's controller (metrics)",
            capture_panel(Panel::Queues, &fixtures::kubevirt_metrics(), w),
        ),
        (
            Panel::Expectations,
            "a VMI creation expected",
            capture_panel(Panel::Expectations, &fixtures::pending_expectations(), w),
        ),
        (
            Panel::Timeline,
            "running",
            capture_panel(Panel::Timeline, &fixtures::running_ours(), w),
        ),
        (
            Panel::Timeline,
            "three failed runs, a start backoff after each, the fourth running",
            history_capture(Panel::Timeline, fixtures::three_restarts(), w),
        ),
        (
            Panel::History,
            "a Lease handover in the last minute",
            history_capture(Panel::History, fixtures::lease_handover(), w),
        ),
        (
            Panel::Overhead,
            "pod memory mismatch",
            capture_panel(Panel::Overhead, &fixtures::memory_mismatch(), w),
        ),
        (
            Panel::Overhead,
            "a GPU passed through: the VFIO term dominates",
            capture_panel(Panel::Overhead, &fixtures::vfio_dominated(), w),
        ),
        (
            Panel::Overhead,
            "the controller's settings behind the KubeVirt CR",
            capture_panel(Panel::Overhead, &fixtures::settings_behind_the_cr(), w),
        ),
        (
            Panel::Overhead,
            "after the what-if `spec.template.spec.domain.devices.autoattachGraphicsDevice=false`",
            {
                let (insp, what_if) = inspection_and_what_if(
                    "spec.template.spec.domain.devices.autoattachGraphicsDevice=false",
                );
                crate::inspect::tui::capture_panel_with(
                    Panel::Overhead,
                    &insp,
                    &Default::default(),
                    Some(&what_if),
                    w,
                )
            },
        ),
        (
            Panel::Overhead,
            "inspected with `--kubevirt-version v1.3.0`",
            capture_panel(Panel::Overhead, &inspection_under_v1_3(), w),
        ),
        (
            Panel::Decision,
            "CrashLoopBackOff",
            capture_panel(Panel::Decision, &fixtures::crash_loop(), w),
        ),
        (
            Panel::Blockers,
            "unschedulable",
            capture_panel(Panel::Blockers, &fixtures::unschedulable(), w),
        ),
        (
            Panel::Blockers,
            "PodSecurity rejection",
            capture_panel(Panel::Blockers, &fixtures::pod_security_rejected(), w),
        ),
        (
            Panel::Events,
            "missing PriorityClass",
            capture_panel(Panel::Events, &fixtures::missing_priority_class(), w),
        ),
    ]
}

#[test]
fn docs_inspect_md_shows_the_current_captures() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/inspect.md"))
        .expect("docs/inspect.md");
    let mut fleet = app_for_fleet(fixtures::fleet());
    fleet.resize(140, 13);
    let fleet = capture(&fleet, 140, 13);
    let mut stale = Vec::new();
    for (panel, scenario, text) in doc_captures() {
        if !docs.contains(&text) {
            stale.push(format!(
                "### {} ({scenario})\n\n```text\n{text}```\n",
                panel.title()
            ));
        }
    }
    // The whole screens: the VM view in the grid, the What-if panel over it, the fleet view,
    // the replay view.
    let mut vm_view = app_after(fixtures::three_restarts());
    vm_view.resize(120, 44);
    let mut what_if =
        what_if_app("spec.template.spec.domain.devices.autoattachGraphicsDevice=false");
    what_if.resize(120, 30);
    for (title, text) in [
        ("VM view", capture(&vm_view, 120, 44)),
        ("What-if panel", capture(&what_if, 120, 30)),
        ("Fleet view", fleet),
        ("Replay view", capture(&replay_app(), 120, 30)),
        (
            "Upgrade rehearsal view",
            capture(&rehearsal_app(120, 24), 120, 24),
        ),
    ] {
        if !docs.contains(&text) {
            stale.push(format!("### {title}\n\n```text\n{text}```\n"));
        }
    }
    assert!(
        stale.is_empty(),
        "docs/inspect.md is missing these captures (paste them under \"Terminal UI\"):\n\n{}",
        stale.join("\n")
    );
}

/// The upgrade rehearsal to `main` (`inspect --upgrade-to main`), the VM that no longer fits
/// selected (`End`).
fn rehearsal_app(columns: u16, rows: u16) -> App {
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let view = super::rehearsal::RehearsalView::of(&super::rehearsal::tests::rehearsal());
    let mut app = App::rehearsal(view);
    app.resize(columns, rows);
    app.handle_key(KeyEvent::new(KeyCode::End, KeyModifiers::NONE));
    app
}

#[test]
fn rehearsal_view_names_each_vms_prs_and_the_vm_that_no_longer_fits() {
    insta::assert_snapshot!(capture(&rehearsal_app(120, 24), 120, 24));
}

#[test]
fn rehearsal_view_in_80_columns_pages_to_the_selected_vm() {
    insta::assert_snapshot!(capture(&rehearsal_app(80, 16), 80, 16));
}

/// The replay view on the fixture's second step, whose replayed decision differs: reached
/// from the first with `n`, the next difference.
fn replay_app() -> App {
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut app = App::replay(super::replay::tests::view());
    app.handle_key(KeyEvent::new(KeyCode::Char('n'), KeyModifiers::NONE));
    app
}

#[test]
fn replay_help_names_the_keys_to_the_differences() {
    let mut app = replay_app();
    app.view.help = true;
    insta::assert_snapshot!(capture(&app, 100, 24));
}

#[test]
fn replay_view_on_a_step_that_differs() {
    insta::assert_snapshot!(capture(&replay_app(), 120, 30));
}

#[test]
fn replay_view_in_80_columns_on_the_last_step() {
    let mut app = replay_app();
    if let Some(v) = app.replay.as_mut() {
        v.step_by(1);
    }
    insta::assert_snapshot!(capture(&app, 80, 30));
}

/// The audit log tests/fixtures/audit-replay.jsonl (the controller's writes of VM ns/a: two
/// that agree, a ControllerRevision no decision of ours creates, a status write the server
/// refused) loaded as `inspect --replay` loads it, on its first step.
fn audit_replay_app() -> App {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/audit-replay.jsonl");
    let source = crate::replay::AuditSource {
        lease: "ns/ctl",
        controller: None,
    };
    let loaded = crate::replay::load(&path, source).expect("the fixture replays");
    let view = super::replay::ReplayView::of(loaded.into_vms(), "audit-replay.jsonl", "ns/a")
        .expect("the log holds VM ns/a");
    App::replay(view)
}

/// Stepping through an audit log's replay: `n` stops at the write no decision of ours makes,
/// `End` at the refused write, shown with the server's error.
#[test]
fn replay_view_steps_through_an_audit_log() {
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    let mut app = audit_replay_app();
    let verdicts: Vec<_> = app
        .replay
        .as_ref()
        .unwrap()
        .vm
        .steps
        .iter()
        .map(|s| s.verdict)
        .collect();
    use crate::replay::Verdict::{Differ, Same};
    assert_eq!(verdicts, [Same, Same, Differ, Same]);
    app.handle_key(KeyEvent::new(KeyCode::Char('n'), KeyModifiers::NONE));
    insta::assert_snapshot!(
        "audit_replay_on_a_write_that_differs",
        capture(&app, 120, 30)
    );
    app.handle_key(KeyEvent::new(KeyCode::End, KeyModifiers::NONE));
    insta::assert_snapshot!("audit_replay_on_the_refused_write", capture(&app, 120, 30));
}

#[test]
fn fleet_view_first_page_while_the_fleet_is_gathered() {
    let mut app = App::fleet();
    app.resize(140, 12);
    let mut page = fixtures::fleet();
    page.rows.truncate(3);
    app.set_fleet_page(page, fixtures::now());
    insta::assert_snapshot!(capture(&app, 140, 12));
}

/// The VM of the what-if fixture (demo/vm-a), with the result of `change` on its gathered state
/// (`crate::inspect::whatif::tests::running`) open over the panels.
fn what_if_app(change: &str) -> App {
    use crate::inspect::whatif::{parse_change_line, tests::running, what_if};
    let mut app = app_for_vm(crate::inspect::model::Inspection {
        namespace: "demo".into(),
        name: "vm-a".into(),
        ..fixtures::running_ours()
    });
    let g = running(Default::default());
    let w = what_if(&g, &parse_change_line(change).expect("a change")).expect("a what-if");
    app.what_if.pending = true;
    app.set_what_if(Ok(w));
    app
}

#[test]
fn what_if_panel_graphics_off() {
    let app = what_if_app("spec.template.spec.domain.devices.autoattachGraphicsDevice=false");
    insta::assert_snapshot!(capture(&app, WIDE.0, WIDE.1));
}

#[test]
fn what_if_panel_scrolled_on_a_small_terminal() {
    let mut app = what_if_app("spec.runStrategy=Halted");
    app.resize(100, 24);
    app.what_if.scroll = 6;
    insta::assert_snapshot!(capture(&app, 100, 24));
}

#[test]
fn what_if_launcher_pod_bars_at_80_120_and_200_columns() {
    let mut out = String::new();
    for w in [80u16, 120, 200] {
        let mut app =
            what_if_app("spec.template.spec.domain.devices.autoattachGraphicsDevice=false");
        app.resize(w, 120);
        let screen = capture(&app, w, 120);
        let at = screen
            .find("LAUNCHER POD")
            .expect("the LAUNCHER POD section");
        let rows: Vec<&str> = screen[at..].lines().take(3).collect();
        assert!(
            rows[1].contains("now") && rows[2].contains("after"),
            "{screen}"
        );
        out.push_str(&format!("{w} columns:\n{}\n\n", rows.join("\n")));
    }
    insta::assert_snapshot!(out);
}

#[test]
fn what_if_text_wraps_under_its_own_column_not_at_column_0_at_120_columns() {
    let mut app = what_if_app("spec.template.spec.domain.devices.autoattachGraphicsDevice=false");
    app.resize(120, 30);
    let screen = capture(&app, 120, 30);
    let rows: Vec<String> = screen
        .lines()
        .map(|l| l.chars().skip(1).collect())
        .collect();
    let now = rows
        .iter()
        .position(|r| r.starts_with("  now:   VMI Running"))
        .expect("the DECISION's now line");
    // Continued under the text after `now:`, as the action lines under it are.
    assert!(rows[now + 1].starts_with("         UpdateVmi"), "{screen}");
    let outcome = rows
        .iter()
        .position(|r| r.starts_with("  RestartRequired: "))
        .expect("the OUTCOME line");
    assert!(
        rows[outcome + 1].starts_with("                   "),
        "{screen}"
    );
}

/// The last `n` rows of a capture.
fn bottom(screen: &str, n: usize) -> String {
    let rows: Vec<&str> = screen.lines().collect();
    rows[rows.len().saturating_sub(n)..].join("\n")
}

#[test]
fn what_if_input_line() {
    let mut app = app_for_vm(fixtures::running_ours());
    app.what_if.editing = true;
    app.what_if.text = "spec.template.spec.domain.memory.guest=8Gi".into();
    let typing = bottom(&capture(&app, 100, 24), 3);
    app.what_if.text = "spec.runStrategy".into();
    app.what_if.error = Some(
        crate::inspect::whatif::parse_change_line(&app.what_if.text)
            .unwrap_err()
            .to_string(),
    );
    let short = bottom(&capture(&app, 100, 24), 3);
    app.what_if.text = "start".into();
    // virt-api's answer to a start of a running VM (the what-if fixture's).
    let refused = crate::inspect::whatif::what_if(
        &crate::inspect::whatif::tests::running(Default::default()),
        &crate::inspect::whatif::parse_change_line("start").expect("a change"),
    )
    .expect_err("a 409");
    app.what_if.error = Some(refused.to_string());
    let long = bottom(&capture(&app, 100, 24), 5);
    insta::assert_snapshot!(format!(
        "typing:\n{typing}\n\nbad input:\n{short}\n\nrefused, the reason below:\n{long}"
    ));
}

/// An app that gathered each of `gathers` in turn (what the live loop does once a second).
fn app_after(gathers: Vec<crate::inspect::model::Inspection>) -> App {
    let mut gathers = gathers.into_iter();
    let mut app = app_for_vm(gathers.next().expect("a gather"));
    for insp in gathers {
        let at = insp.generated_at;
        app.set_vm(insp, at);
    }
    app
}

#[test]
fn history_sparklines_across_a_lease_handover_at_80_120_and_200_columns() {
    use crate::inspect::tui::capture_panel_with;
    let app = app_after(fixtures::lease_handover());
    let insp = app.vm.as_ref().expect("an inspection");
    let mut out = String::new();
    for w in [80u16, 120, 200] {
        let panel = capture_panel_with(Panel::History, insp, &app.history, None, w);
        let leader = panel
            .lines()
            .find(|l| l.contains("leader"))
            .expect("the leader row");
        // Held, then the gap, then the handover, in time order.
        let (held, gap, handover) = (
            leader.find('━').expect("held"),
            leader.find('░').expect("the leaderless gap"),
            leader.find('◆').expect("the handover"),
        );
        assert!(held < gap && gap < handover, "{leader}");
        assert!(
            panel.contains("vm adds/s") && panel.contains("now"),
            "{panel}"
        );
        for line in panel.lines() {
            assert!(line.chars().count() <= usize::from(w), "{panel}");
        }
        out.push_str(&format!("{w} columns:\n{panel}\n"));
    }
    insta::assert_snapshot!(out);
}

#[test]
fn phase_timeline_with_three_restarts_and_their_backoffs_at_80_120_and_200_columns() {
    use crate::inspect::tui::capture_panel_with;
    let app = app_after(fixtures::three_restarts());
    let insp = app.vm.as_ref().expect("an inspection");
    let mut out = String::new();
    for w in [80u16, 120, 200] {
        let panel = capture_panel_with(Panel::Timeline, insp, &app.history, None, w);
        let rows: Vec<&str> = panel.lines().collect();
        for (i, row) in rows[1..5].iter().enumerate() {
            assert!(
                row.contains(&format!("#{}", i + 1)),
                "one bar per VMI: {panel}"
            );
        }
        assert_eq!(rows[5].matches('↻').count(), 3, "three restarts: {panel}");
        assert!(rows[5].contains('╌'), "the backoffs: {panel}");
        assert!(rows[1].contains('✗') && rows[4].contains('█'), "{panel}");
        out.push_str(&format!("{w} columns:\n{panel}\n"));
    }
    insta::assert_snapshot!(out);
}

#[test]
fn history_rows_stay_under_their_labels_in_the_grid_at_120_columns() {
    let mut app = app_after(fixtures::lease_handover());
    app.resize(120, 44);
    let screen = capture(&app, 120, 44);
    let top = screen
        .lines()
        .position(|l| l.contains("History"))
        .expect("the History panel");
    let head = screen.lines().nth(top).unwrap();
    let col = head[..head.find("History").unwrap()].chars().count() - 2;
    let labels = [
        "vm depth",
        "vm adds/s",
        "vm retries",
        "vmi depth",
        "vmi adds/s",
        "vmi retries",
        "key reconciles",
        "renew age",
        "leader",
    ];
    for (i, label) in labels.iter().enumerate() {
        let row: String = screen
            .lines()
            .nth(top + 1 + i)
            .unwrap()
            .chars()
            .skip(col + 1)
            .collect();
        assert!(
            row.starts_with(label),
            "row {i} is not {label:?}:\n{screen}"
        );
    }
    insta::assert_snapshot!(screen);
}

#[test]
fn fleet_view_bars_for_time_in_phase_and_memory_headroom_at_80_120_and_200_columns() {
    let mut out = String::new();
    for w in [80u16, 120, 200] {
        let mut app = app_for_fleet(fixtures::fleet());
        app.resize(w, 13);
        let screen = capture(&app, w, 13);
        let row = |name: &str| {
            screen
                .lines()
                .find(|l| l.contains(name))
                .unwrap_or_default()
                .to_string()
        };
        // An hour in Running fills the bar, 4 s takes one cell.
        assert!(row("vm-alpine").contains("█████ "), "{screen}");
        assert!(row("vm-cirros").contains("█···· "), "{screen}");
        if w >= 120 {
            assert!(
                row("vm-alpine").contains("██████──"),
                "a quarter free: {screen}"
            );
            assert!(row("vm-cirros").contains("no limit"), "{screen}");
            assert!(
                row("vm-big").contains("███████─"),
                "32 Mi of 3400 Mi free still shows: {screen}"
            );
        }
        for line in screen.lines() {
            assert!(line.chars().count() <= usize::from(w), "{screen}");
        }
        out.push_str(&format!("{w} columns:\n{screen}\n"));
    }
    insta::assert_snapshot!(out);
}

/// The Inspection of the what-if fixture's gathered state (demo/vm-a, its launcher pod
/// running) and the what-if of `change` on it.
fn inspection_and_what_if(
    change: &str,
) -> (
    crate::inspect::model::Inspection,
    crate::inspect::whatif::WhatIf,
) {
    use crate::inspect::whatif::{parse_change_line, tests::running, what_if};
    let g = running(Default::default());
    let w = what_if(&g, &parse_change_line(change).expect("a change")).expect("a what-if");
    (crate::inspect::analyze::analyze(&g), w)
}

#[test]
fn overhead_bar_beside_a_what_if_at_80_120_and_200_columns() {
    use crate::inspect::tui::capture_panel_with;
    let (insp, w) =
        inspection_and_what_if("spec.template.spec.domain.devices.autoattachGraphicsDevice=false");
    let mut out = String::new();
    for columns in [80u16, 120, 200] {
        let panel = capture_panel_with(
            Panel::Overhead,
            &insp,
            &Default::default(),
            Some(&w),
            columns,
        );
        let row = |label: &str| {
            panel
                .lines()
                .map(|l| l.chars().skip(1).collect::<String>())
                .find(|l| l.starts_with(label))
                .unwrap_or_else(|| panic!("no {label:?} row: {panel}"))
        };
        let (now, after) = (row("now "), row("what-if "));
        // One scale: the same guest, the overhead 32 Mi (the video RAM) shorter after.
        let cells = |bar: &str, glyphs: &str| bar.chars().filter(|c| glyphs.contains(*c)).count();
        assert_eq!(cells(&now, "█"), cells(&after, "█"), "{panel}");
        assert!(cells(&now, "▓▒░") > cells(&after, "▓▒░"), "{panel}");
        assert!(
            row("what-if (Mi): ").starts_with("what-if (Mi): overhead −32 = 236.25"),
            "{panel}"
        );
        assert!(panel.contains("videoRam 32→0 Mi"), "{panel}");
        for line in panel.lines() {
            assert!(line.chars().count() <= usize::from(columns), "{panel}");
        }
        let top: Vec<&str> = panel.lines().take(9).collect();
        out.push_str(&format!("{columns} columns:\n{}\n\n", top.join("\n")));
    }
    insta::assert_snapshot!(out);
}

/// The running VM inspected with `--kubevirt-version v1.3.0`.
fn inspection_under_v1_3() -> crate::inspect::model::Inspection {
    let mut g = crate::inspect::whatif::tests::running(Default::default());
    g.compare_version = Some(crate::kubevirt_version::KubeVirtVersion::V1_3);
    crate::inspect::analyze::analyze(&g)
}

/// The rows of a panel capture without the border's first column.
fn panel_row(panel: &str, label: &str) -> Option<String> {
    panel
        .lines()
        .map(|l| l.chars().skip(1).collect::<String>())
        .find(|l| l.starts_with(label))
}

#[test]
fn overhead_bar_beside_another_release_at_80_120_and_200_columns() {
    use crate::inspect::tui::capture_panel_with;
    let insp = inspection_under_v1_3();
    let v = insp.kubevirt_version_overhead.clone().expect("v1.3.0");
    let check = insp.overhead_check.clone().expect("check");
    let mut out = String::new();
    for columns in [80u16, 120, 200] {
        let panel = capture_panel_with(Panel::Overhead, &insp, &Default::default(), None, columns);
        let row = |label: &str| {
            panel_row(&panel, label).unwrap_or_else(|| panic!("no {label:?} row: {panel}"))
        };
        let (now, then) = (row("now "), row("v1.3.0 "));
        // One scale: the same guest, v1.3.0's smaller overhead.
        let cells = |bar: &str, glyphs: &str| bar.chars().filter(|c| glyphs.contains(*c)).count();
        assert_eq!(cells(&now, "█"), cells(&then, "█"), "{panel}");
        assert!(cells(&now, "▓▒░") >= cells(&then, "▓▒░"), "{panel}");
        let delta = v.comparison(check.formula_bytes);
        assert!(
            row("under v1.3.0: overhead −").starts_with(&delta[..20]),
            "{panel}"
        );
        for line in panel.lines() {
            assert!(line.chars().count() <= usize::from(columns), "{panel}");
        }
        let top: Vec<&str> = panel.lines().take(9).collect();
        out.push_str(&format!("{columns} columns:\n{}\n\n", top.join("\n")));
    }
    insta::assert_snapshot!(out);
}

#[test]
fn a_what_if_s_bar_wins_over_the_other_release_s() {
    use crate::inspect::tui::capture_panel_with;
    let insp = inspection_under_v1_3();
    let (_, w) =
        inspection_and_what_if("spec.template.spec.domain.devices.autoattachGraphicsDevice=false");
    let panel = capture_panel_with(Panel::Overhead, &insp, &Default::default(), Some(&w), 120);
    assert!(panel_row(&panel, "what-if ").is_some(), "{panel}");
    assert!(panel_row(&panel, "v1.3.0 ").is_none(), "{panel}");
    assert!(panel_row(&panel, "under v1.3.0").is_none(), "{panel}");
}

#[test]
fn the_last_what_if_stays_beside_the_overhead_bar_after_its_panel_closes() {
    use ratatui::crossterm::event::{KeyCode, KeyEvent};
    let change = "spec.template.spec.domain.devices.autoattachGraphicsDevice=false";
    let (insp, w) = inspection_and_what_if(change);
    let mut app = app_for_vm(insp);
    app.what_if.pending = true;
    app.set_what_if(Ok(w));
    app.handle_key(KeyEvent::from(KeyCode::Esc));
    assert!(!app.what_if.open, "Esc closed the What-if panel");
    let screen = capture(&app, 120, 44);
    let overhead = overhead_panel_text(&screen);
    assert!(
        overhead.lines().any(|l| l.starts_with("what-if █")),
        "{screen}"
    );
    assert!(
        overhead.contains("what-if (Mi): overhead −32 = 236.25"),
        "{screen}"
    );
}

/// Lines of `panel` at `width` that would wrap under its headings: in a table panel, a line
/// from its first row (a heading, a bar) on that is not itself a row (rows are cut, not
/// wrapped) and is wider than the panel; in the Phase timeline, any line of its bars, axis and
/// legends wider than the panel.
fn wrapping_lines(app: &App, panel: Panel, width: usize) -> Vec<String> {
    use super::fit::is_row;
    let insp = app.vm.as_ref().expect("an inspection");
    let lines = crate::inspect::tui::panel_lines(panel, insp, &app.history, None, width);
    let (from, to) = if panel == Panel::Timeline {
        (0, lines.len() - super::timeline::lines(insp).len())
    } else {
        (
            lines.iter().position(is_row).unwrap_or(lines.len()),
            lines.len(),
        )
    };
    lines[from..to]
        .iter()
        .filter(|l| l.width() > width && (panel == Panel::Timeline || !is_row(l)))
        .map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect())
        .collect()
}

#[test]
fn no_panel_line_wraps_under_its_headings_at_120_columns() {
    let mut scenarios: Vec<(&str, App)> = [
        ("running", fixtures::running_ours()),
        ("halted", fixtures::halted_no_vmi()),
        ("crash loop", fixtures::crash_loop()),
        ("rate-limited retry", fixtures::rate_limited_retry()),
        ("pending expectations", fixtures::pending_expectations()),
        ("memory mismatch", fixtures::memory_mismatch()),
        ("settings behind the CR", fixtures::settings_behind_the_cr()),
        ("KubeVirt's metrics", fixtures::kubevirt_metrics()),
        ("stale Lease", fixtures::stale_lease()),
        ("unschedulable", fixtures::unschedulable()),
        ("DataVolume pending", fixtures::datavolume_pending()),
        ("missing PriorityClass", fixtures::missing_priority_class()),
        ("PodSecurity", fixtures::pod_security_rejected()),
        ("VFIO", fixtures::vfio_dominated()),
    ]
    .into_iter()
    .map(|(name, insp)| (name, app_for_vm(insp)))
    .collect();
    scenarios.push(("three restarts", app_after(fixtures::three_restarts())));
    scenarios.push(("Lease handover", app_after(fixtures::lease_handover())));
    // The grid at 120 columns: two columns of panels 58 columns wide inside their borders.
    let width = 58;
    let mut wrapping = Vec::new();
    for (name, app) in &scenarios {
        for panel in [
            Panel::Queues,
            Panel::Expectations,
            Panel::History,
            Panel::Overhead,
            Panel::Timeline,
        ] {
            for line in wrapping_lines(app, panel, width) {
                wrapping.push(format!("{name}, {}: {line:?}", panel.title()));
            }
        }
    }
    assert!(wrapping.is_empty(), "{}", wrapping.join("\n"));
    let mut app = app_after(fixtures::three_restarts());
    app.resize(120, 44);
    insta::assert_snapshot!(capture(&app, 120, 44));
}
