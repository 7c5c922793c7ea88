//! The replay view (`inspect --replay DIR|FILE vm/NAME`): one VM's recorded reconciles, or the
//! controller's writes of it in an audit log ([`crate::replay::load`] reads either, as `replay`
//! does), stepped through one at a time, a time slider over them. The view model
//! ([`ReplayView`]) is gathered once from the file; each panel is a pure function of the
//! selected [`Step`] (time and verdict, the inputs it read, its decision with the reasons, its
//! writes with their answers), drawn here and printed by `--once` ([`text`]).

use super::text::{bad, dim, field, field_styled, good, note, selected, warn};
use crate::replay::{AUDIT_WRITE, Step, Verdict, VmReplay};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Wrap};

/// One VM's replayed reconciles and the one selected.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayView {
    /// The recording, as given on the command line.
    pub source: String,
    /// The VM's replayed reconciles (VM and VMI controller), in recorded order; never empty.
    pub vm: VmReplay,
    /// Index of the selected step.
    pub at: usize,
}

impl ReplayView {
    /// The view of VM `key` (`namespace/name`) among `vms` (a replayed recording's or audit
    /// log's, [`crate::replay::Loaded::into_vms`]), on its first step; an error naming the
    /// file and the VMs it holds when it has no step of that VM.
    pub(crate) fn of(vms: Vec<VmReplay>, source: &str, key: &str) -> Result<ReplayView, String> {
        let known: Vec<String> = vms.iter().map(|v| v.key.clone()).collect();
        match vms.into_iter().find(|v| v.key == key) {
            Some(vm) if !vm.steps.is_empty() => Ok(ReplayView {
                source: source.to_string(),
                vm,
                at: 0,
            }),
            _ if known.is_empty() => Err(format!(
                "{source} holds no reconcile or controller write of VM {key} (it holds none at all)"
            )),
            _ => Err(format!(
                "{source} holds no reconcile or controller write of VM {key} (it holds {})",
                known.join(", ")
            )),
        }
    }

    /// The selected step.
    pub(crate) fn step(&self) -> Option<&Step> {
        self.vm.steps.get(self.at)
    }

    /// Move the selection by `delta` steps (negative: back), stopping at the first and the last.
    pub(crate) fn step_by(&mut self, delta: i64) {
        let last = self.vm.steps.len().saturating_sub(1) as i64;
        self.at = (self.at as i64).saturating_add(delta).clamp(0, last) as usize;
    }

    /// Move the selection to the next (`forward`) or previous step whose replayed decision is
    /// not the recorded one (`DIFFER` or not replayed); it stays where it is when there is none.
    pub(crate) fn jump_to_difference(&mut self, forward: bool) {
        let differs = |i: &usize| self.vm.steps[*i].verdict != Verdict::Same;
        let found = if forward {
            (self.at + 1..self.vm.steps.len()).find(differs)
        } else {
            (0..self.at).rev().find(differs)
        };
        if let Some(i) = found {
            self.at = i;
        }
    }

    /// How many steps agree, differ and were not replayed.
    pub(crate) fn counts(&self) -> (usize, usize, usize) {
        let n = |v: Verdict| self.vm.steps.iter().filter(|s| s.verdict == v).count();
        (
            n(Verdict::Same),
            n(Verdict::Differ),
            n(Verdict::NotReplayed),
        )
    }
}

/// The view's first line: the recording, the VM, the position and the counts.
pub(crate) fn header(view: &ReplayView) -> Line<'static> {
    let (same, differ, not_replayed) = view.counts();
    let mut spans = vec![
        Span::styled(
            format!("Replay VM {}", view.vm.key),
            Style::new().add_modifier(Modifier::BOLD),
        ),
        Span::styled(format!("  {}", view.source), dim()),
        Span::raw(format!("  step {}/{}  ", view.at + 1, view.vm.steps.len())),
        Span::styled(format!("{same} agree"), good()),
    ];
    if differ > 0 {
        spans.push(Span::styled(format!(" · {differ} differ"), bad()));
    }
    if not_replayed > 0 {
        spans.push(Span::styled(
            format!(" · {not_replayed} not replayed"),
            warn(),
        ));
    }
    Line::from(spans)
}

fn verdict_style(v: Verdict) -> Style {
    match v {
        Verdict::Same => good(),
        Verdict::Differ => bad(),
        Verdict::NotReplayed => warn(),
    }
}

/// The worse of two verdicts (a slider cell covering several steps shows the worst).
fn worse(a: Verdict, b: Verdict) -> Verdict {
    let rank = |v| match v {
        Verdict::Same => 0,
        Verdict::NotReplayed => 1,
        Verdict::Differ => 2,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// The time slider, `width` cells: a cell per step (or, with more steps than cells, per run of
/// steps, showing the worst verdict among them): `│` agrees, `✗` differs, `?` not replayed; the
/// cell of the selected step reversed. The second line: the first and the last step's time.
pub(crate) fn slider(view: &ReplayView, width: usize) -> Vec<Line<'static>> {
    let steps = &view.vm.steps;
    let cells = steps.len().min(width.max(1));
    let mut spans = Vec::with_capacity(cells);
    for c in 0..cells {
        let (from, to) = (c * steps.len() / cells, (c + 1) * steps.len() / cells);
        let verdict = steps[from..to]
            .iter()
            .map(|s| s.verdict)
            .fold(Verdict::Same, worse);
        let glyph = match verdict {
            Verdict::Same => "│",
            Verdict::Differ => "✗",
            Verdict::NotReplayed => "?",
        };
        let mut style = verdict_style(verdict);
        if (from..to).contains(&view.at) {
            style = style.patch(selected());
        }
        spans.push(Span::styled(glyph, style));
    }
    let time = |s: Option<&Step>| {
        s.map(|s| s.at.format("%H:%M:%S%.3f").to_string())
            .unwrap_or_default()
    };
    vec![
        Line::from(spans),
        note(format!("{} … {}", time(steps.first()), time(steps.last()))),
    ]
}

/// The Step panel: when, which controller, and whether the replayed decision is the recorded
/// one.
pub(crate) fn step_lines(step: &Step) -> Vec<Line<'static>> {
    let (what, which) = match step.controller.as_str() {
        "vm" => ("reconcile", "VM controller, line"),
        "vmi" => ("reconcile", "VMI controller, line"),
        AUDIT_WRITE => ("write", "the controller's, audit log line"),
        other => ("reconcile", other),
    };
    let verdict = match step.verdict {
        Verdict::Same => "agrees: the replayed decision is the recorded one",
        Verdict::Differ => "DIFFERS: the replayed decision is not the recorded one",
        Verdict::NotReplayed => "not replayed",
    };
    let mut out = vec![
        field(
            "time",
            step.at.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string(),
        ),
        field(what, format!("{which} {}", step.seq)),
        field_styled("verdict", verdict, verdict_style(step.verdict)),
    ];
    if let Some(n) = &step.note {
        out.push(field("note", n.clone()));
    }
    out
}

/// The Inputs panel: every object version the reconcile's snapshot held.
pub(crate) fn inputs_lines(step: &Step) -> Vec<Line<'static>> {
    if step.inputs.is_empty() {
        return vec![note("no inputs recorded")];
    }
    step.inputs.iter().map(|i| Line::raw(i.clone())).collect()
}

fn actions(a: &[String]) -> String {
    if a.is_empty() {
        "nothing".into()
    } else {
        a.join(", ")
    }
}

/// The Decision panel: the recorded actions, the replayed ones when they differ, and why.
pub(crate) fn decision_lines(step: &Step) -> Vec<Line<'static>> {
    let mut out = vec![field("recorded", actions(&step.recorded))];
    match step.verdict {
        Verdict::Differ => out.push(field_styled("replayed", actions(&step.replayed), bad())),
        Verdict::NotReplayed => out.push(field_styled("replayed", "-", warn())),
        Verdict::Same => {}
    }
    if !step.why.is_empty() {
        out.push(note("why:"));
        out.extend(step.why.iter().map(|w| Line::raw(format!("  {w}"))));
    }
    out
}

/// The Writes panel: each API call the reconcile made and the API server's answer.
pub(crate) fn writes_lines(step: &Step) -> Vec<Line<'static>> {
    if step.writes.is_empty() {
        return vec![note("no writes")];
    }
    let mut out: Vec<Line<'static>> = step
        .writes
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let action = w.split(" (failed").next().unwrap_or(w);
            let answer = step.answers.get(i).cloned().unwrap_or_default();
            let style = if answer.starts_with("failed") {
                bad()
            } else {
                Style::new()
            };
            Line::from(vec![
                Span::raw(action.to_string()),
                Span::styled(" → ", dim()),
                Span::styled(answer, style),
            ])
        })
        .collect();
    if step.writes_differ {
        out.push(note(
            "not the replayed decision's writes in order (after a failed write the controller decides again)",
        ));
    }
    out
}

/// The panels of a step, with their titles, in reading order.
fn panels(step: &Step) -> [(&'static str, Vec<Line<'static>>); 4] {
    [
        ("Step", step_lines(step)),
        ("Inputs", inputs_lines(step)),
        ("Decision", decision_lines(step)),
        ("Writes", writes_lines(step)),
    ]
}

fn draw_block(frame: &mut Frame, area: Rect, title: &str, lines: Vec<Line<'static>>) {
    let block = Block::bordered()
        .border_style(dim())
        .title(format!(" {title} "));
    frame.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false }),
        area,
    );
}

/// Draw the replay view into `area`.
pub(crate) fn render(frame: &mut Frame, area: Rect, view: &ReplayView) {
    let [head, slide, rest] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(4),
        Constraint::Fill(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header(view)), head);
    let width = usize::from(slide.width.saturating_sub(2));
    draw_block(frame, slide, "Time", slider(view, width));
    let Some(step) = view.step() else {
        return;
    };
    let [step_panel, inputs, decision, writes] = panels(step);
    // A panel above another takes the rows its lines wrap to.
    let height = |lines: &[Line<'_>], width: u16| {
        super::wrapped_height(lines, width.saturating_sub(2)).saturating_add(2)
    };
    let [top, bottom] = Layout::vertical([
        Constraint::Length(height(&step_panel.1, rest.width)),
        Constraint::Fill(1),
    ])
    .areas(rest);
    draw_block(frame, top, step_panel.0, step_panel.1);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(bottom);
    let [l1, l2] = Layout::vertical([
        Constraint::Length(height(&inputs.1, left.width)),
        Constraint::Fill(1),
    ])
    .areas(left);
    draw_block(frame, l1, inputs.0, inputs.1);
    draw_block(frame, l2, writes.0, writes.1);
    draw_block(frame, right, decision.0, decision.1);
}

fn plain(line: &Line<'_>) -> String {
    line.spans.iter().map(|s| s.content.as_ref()).collect()
}

/// `inspect --replay … --once`: every step's panels as plain text, one step after another.
pub(crate) fn text(view: &ReplayView) -> String {
    let mut out = plain(&header(view)) + "\n";
    for (i, step) in view.vm.steps.iter().enumerate() {
        out.push_str(&format!("\nstep {}/{}\n", i + 1, view.vm.steps.len()));
        for (title, lines) in panels(step) {
            out.push_str(&format!("  {title}\n"));
            for l in &lines {
                out.push_str(&format!("    {}\n", plain(l)));
            }
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::inspect::tui::state::Action;
    use crate::inspect::tui::{App, Screen};
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    fn step(seq: u64, at: &str, controller: &str, verdict: Verdict) -> Step {
        let recorded = vec!["AddVmFinalizer".to_string(), "CreateVmi".to_string()];
        let replayed = match verdict {
            Verdict::Same => recorded.clone(),
            Verdict::Differ => vec!["AddVmFinalizer".to_string()],
            Verdict::NotReplayed => Vec::new(),
        };
        Step {
            seq,
            at: at.parse().expect("a time"),
            controller: controller.into(),
            verdict,
            recorded,
            replayed,
            why: vec![
                "ensure kubevirt.io/virtualMachineControllerFinalize on the VM (vm.go:2362-2382)"
                    .into(),
                "runStrategy Always and no VMI: start it (vm.go:1012-1040)".into(),
            ],
            inputs: vec![
                "VirtualMachine demo/vm-a rv 412".into(),
                "ControllerRevision demo/revision-start-vm-5a1c-1 rv 398".into(),
            ],
            writes: vec![
                "AddVmFinalizer".into(),
                "CreateVmi (failed: 500 Internal Server Error)".into(),
            ],
            answers: vec![
                "VirtualMachine demo/vm-a rv 413".into(),
                "failed: 500 Internal Server Error".into(),
            ],
            writes_differ: verdict != Verdict::Same,
            note: (verdict == Verdict::NotReplayed)
                .then(|| "VirtualMachine demo/vm-a at resourceVersion 7 is not recorded".into()),
        }
    }

    /// Three steps of demo/vm-a: one that agrees, one that differs, one not replayed.
    pub(crate) fn view() -> ReplayView {
        ReplayView {
            source: "/tmp/rec".into(),
            vm: VmReplay {
                key: "demo/vm-a".into(),
                steps: vec![
                    step(12, "2026-12-01T08:44:42.087Z", "vm", Verdict::Same),
                    step(31, "2026-12-01T08:44:42.519Z", "vm", Verdict::Differ),
                    step(40, "2026-12-01T08:44:43.000Z", "vmi", Verdict::NotReplayed),
                ],
            },
            at: 0,
        }
    }

    fn report() -> Vec<VmReplay> {
        vec![view().vm]
    }

    #[test]
    fn stepping_stops_at_the_first_and_the_last_step() {
        let mut v = view();
        v.step_by(-1);
        assert_eq!(v.at, 0, "nothing before the first");
        v.step_by(1);
        assert_eq!(v.at, 1);
        v.step_by(5);
        assert_eq!(v.at, 2, "nothing after the last");
        v.step_by(-1);
        assert_eq!(v.at, 1);
        v.step_by(i64::MIN);
        assert_eq!(v.at, 0);
        v.step_by(i64::MAX);
        assert_eq!(v.at, 2);
    }

    #[test]
    fn the_view_counts_and_shows_agree_and_differ() {
        let mut v = view();
        assert_eq!(v.counts(), (1, 1, 1));
        let verdict = |v: &ReplayView| plain(&step_lines(v.step().unwrap())[2]);
        assert!(
            verdict(&v).starts_with("verdict: agrees"),
            "{}",
            verdict(&v)
        );
        assert_eq!(
            decision_lines(v.step().unwrap()).len(),
            4,
            "no replayed line"
        );
        v.step_by(1);
        assert!(verdict(&v).contains("DIFFERS"), "{}", verdict(&v));
        assert_eq!(
            plain(&decision_lines(v.step().unwrap())[1]),
            "replayed: AddVmFinalizer"
        );
        assert_eq!(plain(&slider(&v, 80)[0]), "│✗?");
    }

    #[test]
    fn a_slider_narrower_than_the_steps_shows_the_worst_of_each_cell() {
        let mut v = view();
        v.vm.steps = (0..10)
            .map(|i| {
                let verdict = if i == 7 {
                    Verdict::Differ
                } else {
                    Verdict::Same
                };
                step(i, "2026-12-01T08:44:42Z", "vm", verdict)
            })
            .collect();
        v.at = 9;
        let line = &slider(&v, 5)[0];
        assert_eq!(plain(line), "│││✗│");
        let selected_cells: Vec<usize> = line
            .spans
            .iter()
            .enumerate()
            .filter(|(_, s)| s.style.add_modifier.contains(Modifier::REVERSED))
            .map(|(i, _)| i)
            .collect();
        assert_eq!(selected_cells, [4], "step 10 is in the last cell");
    }

    #[test]
    fn a_vm_the_recording_does_not_hold_is_an_error_naming_those_it_does() {
        let e = ReplayView::of(report(), "/tmp/rec", "demo/vm-b").unwrap_err();
        assert!(
            e.contains("demo/vm-b") && e.contains("it holds demo/vm-a"),
            "{e}"
        );
        let v = ReplayView::of(report(), "/tmp/rec", "demo/vm-a").unwrap();
        assert_eq!((v.at, v.vm.steps.len()), (0, 3));
    }

    /// `n` and `p` (`N`) jump to the next and previous step that does not agree, over the ones
    /// that do, and stay put when there is none.
    #[test]
    fn keys_jump_to_the_next_and_previous_difference() {
        let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
        let mut v = view();
        v.vm.steps = [
            Verdict::Same,
            Verdict::Differ,
            Verdict::Same,
            Verdict::NotReplayed,
            Verdict::Same,
        ]
        .into_iter()
        .enumerate()
        .map(|(i, verdict)| step(i as u64, "2026-12-01T08:44:42.087Z", "vm", verdict))
        .collect();
        let mut app = App::replay(v);
        let at = |app: &App| app.replay.as_ref().unwrap().at;
        for (code, want) in [
            (KeyCode::Char('n'), 1),
            (KeyCode::Char('n'), 3),
            (KeyCode::Char('n'), 3),
            (KeyCode::Char('p'), 1),
            (KeyCode::Char('N'), 1),
            (KeyCode::End, 4),
            (KeyCode::Char('N'), 3),
        ] {
            assert_eq!(app.handle_key(key(code)), Action::None, "{code:?}");
            assert_eq!(at(&app), want, "after {code:?}");
        }
    }

    #[test]
    fn keys_step_forward_back_and_jump_to_the_ends() {
        let key = |c| KeyEvent::new(c, KeyModifiers::NONE);
        let mut app = App::replay(view());
        assert_eq!(app.screen, Screen::Replay);
        let at = |app: &App| app.replay.as_ref().unwrap().at;
        for (code, want) in [
            (KeyCode::Right, 1),
            (KeyCode::Char('l'), 2),
            (KeyCode::Right, 2),
            (KeyCode::Left, 1),
            (KeyCode::Char('h'), 0),
            (KeyCode::End, 2),
            (KeyCode::Home, 0),
            (KeyCode::Char('G'), 2),
            (KeyCode::Char('g'), 0),
        ] {
            assert_eq!(app.handle_key(key(code)), Action::None, "{code:?}");
            assert_eq!(at(&app), want, "after {code:?}");
        }
        assert_eq!(
            app.handle_key(key(KeyCode::Char('r'))),
            Action::None,
            "nothing to refresh"
        );
        assert_eq!(app.handle_key(key(KeyCode::Char('q'))), Action::Quit);
    }

    #[test]
    fn once_text_shows_every_step_with_its_panels() {
        let t = text(&view());
        assert!(
            t.starts_with(
                "Replay VM demo/vm-a  /tmp/rec  step 1/3  1 agree · 1 differ · 1 not replayed\n"
            ),
            "{t}"
        );
        for want in [
            "step 3/3",
            "    VirtualMachine demo/vm-a rv 412",
            "    CreateVmi → failed: 500 Internal Server Error",
            "    AddVmFinalizer → VirtualMachine demo/vm-a rv 413",
            "    replayed: AddVmFinalizer",
        ] {
            assert!(t.contains(want), "{want:?} not in\n{t}");
        }
    }
}
