//! The terminal UI's state and its key handling, as pure functions (no terminal, no clock).
//!
//! [`App`] holds what is shown (the fleet, one VM's [`Inspection`], the last error) and how
//! (screen, focused panel, scroll offsets, help overlay, terminal size); [`App::handle_key`]
//! turns a key into a change of that state plus an [`Action`] for the live loop (refresh,
//! open a VM, evaluate a what-if, quit).

use super::rehearsal::RehearsalView;
use super::replay::ReplayView;
use super::whatif::{WhatIfState, max_scroll};
use crate::inspect::history::History;
use crate::inspect::model::{Fleet, FleetRow, Inspection};
use crate::inspect::whatif::{Change, ChangeError, WhatIf, parse_change_line};
use chrono::{DateTime, Utc};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

/// The panels of the VM view, in Tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Panel {
    Leader,
    Queues,
    History,
    Expectations,
    Timeline,
    Overhead,
    Decision,
    Blockers,
    Events,
}

impl Panel {
    /// Every panel, in Tab order.
    pub const ALL: [Panel; 9] = [
        Panel::Leader,
        Panel::Queues,
        Panel::History,
        Panel::Expectations,
        Panel::Timeline,
        Panel::Overhead,
        Panel::Decision,
        Panel::Blockers,
        Panel::Events,
    ];

    /// The panel's title.
    pub(crate) fn title(self) -> &'static str {
        match self {
            Panel::Leader => "Leader",
            Panel::Queues => "Queues",
            Panel::History => "History",
            Panel::Expectations => "Expectations",
            Panel::Timeline => "Phase timeline",
            Panel::Overhead => "Overhead check",
            Panel::Decision => "Next decision",
            Panel::Blockers => "Blockers",
            Panel::Events => "Events",
        }
    }

    /// The panel's name in the tab bar of small terminals.
    pub(crate) fn short_title(self) -> &'static str {
        match self {
            Panel::Expectations => "Expect",
            Panel::Timeline => "Timeline",
            Panel::Overhead => "Overhead",
            Panel::Decision => "Next",
            p => p.title(),
        }
    }

    /// A table: its rows are cut at the panel's width rather than wrapped (see
    /// [`super::draw_panel`]).
    pub(crate) fn is_table(self) -> bool {
        matches!(
            self,
            Panel::Queues | Panel::History | Panel::Expectations | Panel::Overhead
        )
    }

    fn index(self) -> usize {
        Panel::ALL.iter().position(|p| *p == self).unwrap_or(0)
    }

    /// The next panel (Tab), wrapping around.
    pub(crate) fn next(self) -> Panel {
        Panel::ALL[(self.index() + 1) % Panel::ALL.len()]
    }

    /// The previous panel (Shift-Tab), wrapping around.
    pub(crate) fn prev(self) -> Panel {
        Panel::ALL[(self.index() + Panel::ALL.len() - 1) % Panel::ALL.len()]
    }
}

/// How the VM view is looked at: focus, scroll offsets, help overlay, terminal size.
#[derive(Debug, Clone, PartialEq)]
pub struct ViewState {
    /// The panel that keys scroll (highlighted border; the only one shown on small terminals).
    pub focus: Panel,
    /// Scroll offset (first line shown) of each panel, by [`Panel::ALL`] index.
    pub scroll: [u16; Panel::ALL.len()],
    /// The help overlay is open.
    pub help: bool,
    /// Terminal columns and rows.
    pub size: (u16, u16),
}

impl Default for ViewState {
    fn default() -> Self {
        ViewState {
            focus: Panel::Leader,
            scroll: [0; Panel::ALL.len()],
            help: false,
            size: (80, 24),
        }
    }
}

impl ViewState {
    /// The scroll offset of a panel.
    pub(crate) fn scroll_of(&self, panel: Panel) -> u16 {
        self.scroll[panel.index()]
    }
}

/// Which screen is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Screen {
    /// Every VM in scope.
    Fleet,
    /// One VM's panels.
    Vm,
    /// One VM's recorded reconciles, stepped through (`inspect --replay`).
    Replay,
    /// The fleet re-rendered under another KubeVirt release (`inspect --upgrade-to`).
    Rehearsal,
}

/// The fleet view's sort key after "problems first" (`s` cycles through them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FleetSort {
    /// Namespace, then name.
    #[default]
    Name,
    /// Longest in its VMI phase first.
    InPhase,
    /// Most retries first.
    Retries,
    /// printableStatus, then name.
    Status,
}

impl FleetSort {
    /// The next key (`s`).
    pub(crate) fn next(self) -> FleetSort {
        match self {
            FleetSort::Name => FleetSort::InPhase,
            FleetSort::InPhase => FleetSort::Retries,
            FleetSort::Retries => FleetSort::Status,
            FleetSort::Status => FleetSort::Name,
        }
    }

    /// Its name in the fleet table's title.
    pub(crate) fn label(self) -> &'static str {
        match self {
            FleetSort::Name => "name",
            FleetSort::InPhase => "time in phase",
            FleetSort::Retries => "retries",
            FleetSort::Status => "status",
        }
    }

    fn cmp(self, a: &FleetRow, b: &FleetRow) -> std::cmp::Ordering {
        let by_name = || {
            a.namespace
                .cmp(&b.namespace)
                .then_with(|| a.name.cmp(&b.name))
        };
        match self {
            FleetSort::Name => by_name(),
            FleetSort::InPhase => b
                .phase_seconds
                .unwrap_or(-1.0)
                .total_cmp(&a.phase_seconds.unwrap_or(-1.0))
                .then_with(by_name),
            FleetSort::Retries => b.retries.cmp(&a.retries).then_with(by_name),
            FleetSort::Status => a
                .printable_status
                .cmp(&b.printable_status)
                .then_with(by_name),
        }
    }
}

/// The fleet view's filter (`/`): rows whose namespace/name contains the text, case-insensitive.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FleetFilter {
    /// The text.
    pub text: String,
    /// The filter input is open: keys edit [`FleetFilter::text`].
    pub editing: bool,
}

impl FleetFilter {
    fn admits(&self, row: &FleetRow) -> bool {
        let want = self.text.to_lowercase();
        want.is_empty()
            || format!("{}/{}", row.namespace, row.name)
                .to_lowercase()
                .contains(&want)
    }
}

/// What the live loop should do after a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Nothing beyond redrawing.
    None,
    /// Gather again now.
    Refresh,
    /// Gather and show this VM (Enter in the fleet view).
    OpenVm { namespace: String, name: String },
    /// Back to the fleet view (Esc in a VM opened from it): gather the fleet.
    BackToFleet,
    /// Evaluate this change to the VM shown (Enter in the what-if input); nothing is written.
    WhatIf {
        namespace: String,
        name: String,
        change: Change,
    },
    /// Restore the terminal and exit.
    Quit,
}

/// The refresh state shown in the status line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// When the data on screen was gathered.
    pub last_ok: Option<DateTime<Utc>>,
    /// The last gather's error (the data on screen is older), if it failed.
    pub error: Option<String>,
    /// A gather is in flight.
    pub loading: bool,
}

/// Why a what-if has no result.
#[derive(Debug, Clone, PartialEq)]
pub enum WhatIfError {
    /// The change cannot be evaluated (refused, invalid, a 409 from virt-api's rules): shown in
    /// the input line, which opens again with the text.
    Change(ChangeError),
    /// The reads failed: shown in the status line.
    Gather(String),
}

/// The whole UI state.
#[derive(Debug, Clone, PartialEq)]
pub struct App {
    /// The screen shown.
    pub screen: Screen,
    /// The fleet view is available (started as `inspect` with no name, or `demo`): Esc in
    /// the VM view returns to it.
    pub has_fleet: bool,
    /// The last fleet gathered.
    pub fleet: Option<Fleet>,
    /// [`App::fleet`] is only a first page ([`App::set_fleet_page`]); the whole fleet is coming.
    pub fleet_partial: bool,
    /// Index of the selected fleet row (into [`App::fleet_rows`]).
    pub selected: usize,
    /// First fleet row shown.
    pub fleet_offset: usize,
    /// The VM to select when the next fleet arrives (the one Esc came back from).
    pub select_next: Option<(String, String)>,
    /// The VM shown (namespace, name).
    pub target: Option<(String, String)>,
    /// The last inspection of [`App::target`].
    pub vm: Option<Inspection>,
    /// Focus, scrolls, help, size.
    pub view: ViewState,
    /// Refresh state.
    pub status: Status,
    /// The what-if input and result of the VM view.
    pub what_if: WhatIfState,
    /// The fleet view's sort key after problems first.
    pub fleet_sort: FleetSort,
    /// The fleet view's filter.
    pub fleet_filter: FleetFilter,
    /// What the gathers said while the UI runs (sparklines, the VM's earlier VMIs).
    pub history: History,
    /// The replay stepped through ([`Screen::Replay`]).
    pub replay: Option<ReplayView>,
    /// The upgrade rehearsal shown ([`Screen::Rehearsal`]).
    pub rehearsal: Option<RehearsalView>,
}

/// Rows of the fleet table below its header, for a terminal of `rows` lines (header line,
/// table border and heading, status line).
pub fn fleet_page(rows: u16) -> usize {
    usize::from(rows.saturating_sub(6)).max(1)
}

/// Whether a fleet row shows a problem (it sorts first).
pub(crate) fn row_has_problem(row: &FleetRow) -> bool {
    row.problem.is_some()
        || row.overhead_match == Some(false)
        || row.pending_expectations > 0
        || row.retries > 0
}

impl App {
    /// The VM view of one VM (`inspect vm/NAME`).
    pub(crate) fn vm(namespace: &str, name: &str) -> App {
        App {
            screen: Screen::Vm,
            has_fleet: false,
            fleet: None,
            fleet_partial: false,
            selected: 0,
            fleet_offset: 0,
            select_next: None,
            target: Some((namespace.to_string(), name.to_string())),
            vm: None,
            view: ViewState::default(),
            status: Status::default(),
            what_if: WhatIfState::default(),
            fleet_sort: FleetSort::default(),
            fleet_filter: FleetFilter::default(),
            history: History::default(),
            replay: None,
            rehearsal: None,
        }
    }

    /// The replay view of one VM's recorded reconciles (`inspect --replay`): nothing is
    /// gathered, keys step through the recording.
    pub(crate) fn replay(view: ReplayView) -> App {
        let (namespace, name) = view.vm.key.split_once('/').unwrap_or(("", &view.vm.key));
        App {
            screen: Screen::Replay,
            ..App::vm(namespace, name)
        }
        .with_replay(view)
    }

    /// The upgrade rehearsal of the fleet (`inspect --upgrade-to VERSION`): gathered once,
    /// keys select a VM to show its causes.
    pub(crate) fn rehearsal(view: RehearsalView) -> App {
        App {
            screen: Screen::Rehearsal,
            target: None,
            rehearsal: Some(view),
            ..App::vm("", "")
        }
    }

    fn with_replay(mut self, view: ReplayView) -> App {
        self.replay = Some(view);
        self
    }

    /// The VM view of one VM with the fleet view behind it (Esc returns to it): `demo`.
    pub(crate) fn vm_in_fleet(namespace: &str, name: &str) -> App {
        App {
            has_fleet: true,
            ..App::vm(namespace, name)
        }
    }

    /// The fleet view (`inspect` with no name).
    pub fn fleet() -> App {
        App {
            screen: Screen::Fleet,
            has_fleet: true,
            target: None,
            ..App::vm("", "")
        }
    }

    /// The fleet rows the filter admits, in display order: problems first, then by the sort key
    /// (whatever order the gatherer used).
    pub(crate) fn fleet_rows(&self) -> Vec<&FleetRow> {
        let mut rows: Vec<&FleetRow> = self
            .fleet
            .iter()
            .flat_map(|f| f.rows.iter())
            .filter(|r| self.fleet_filter.admits(r))
            .collect();
        rows.sort_by(|a, b| {
            row_has_problem(b)
                .cmp(&row_has_problem(a))
                .then_with(|| self.fleet_sort.cmp(a, b))
        });
        rows
    }

    /// The selected row's key, to keep it selected across a change of the rows.
    fn selected_key(&self) -> Option<(String, String)> {
        self.fleet_rows()
            .get(self.selected)
            .map(|r| (r.namespace.clone(), r.name.clone()))
    }

    /// Select `key` again if it is still shown, else stay in range.
    fn reselect(&mut self, key: Option<(String, String)>) {
        let rows = self.fleet_rows();
        self.selected = key
            .and_then(|(ns, n)| rows.iter().position(|r| r.namespace == ns && r.name == n))
            .unwrap_or(self.selected)
            .min(rows.len().saturating_sub(1));
        self.keep_selection_visible();
    }

    fn fleet_filter_key(&mut self, key: KeyEvent) -> Action {
        let keep = self.selected_key();
        let f = &mut self.fleet_filter;
        match key.code {
            KeyCode::Enter => f.editing = false,
            KeyCode::Esc => {
                f.editing = false;
                f.text.clear();
            }
            KeyCode::Backspace => {
                f.text.pop();
            }
            KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => f.text.push(c),
            _ => return Action::None,
        }
        self.reselect(keep);
        Action::None
    }

    /// A fresh fleet arrived: keep the same VM selected if it is still there.
    pub(crate) fn set_fleet(&mut self, fleet: Fleet, at: DateTime<Utc>) {
        self.history.record_fleet(&fleet);
        self.show_fleet(fleet, at);
    }

    /// Show `fleet` (a whole one or a first page, which is not sampled: it has no controller
    /// view).
    fn show_fleet(&mut self, fleet: Fleet, at: DateTime<Utc>) {
        let keep = self.select_next.take().or_else(|| {
            self.fleet_rows()
                .get(self.selected)
                .map(|r| (r.namespace.clone(), r.name.clone()))
        });
        self.fleet = Some(fleet);
        self.fleet_partial = false;
        let rows = self.fleet_rows();
        self.selected = keep
            .and_then(|(ns, n)| rows.iter().position(|r| r.namespace == ns && r.name == n))
            .unwrap_or(self.selected)
            .min(rows.len().saturating_sub(1));
        self.keep_selection_visible();
        self.status = Status {
            last_ok: Some(at),
            error: None,
            loading: false,
        };
    }

    /// A first page of the fleet arrived: shown until the whole fleet is there (never over it).
    pub fn set_fleet_page(&mut self, page: Fleet, at: DateTime<Utc>) {
        if self.fleet.is_some() && !self.fleet_partial {
            return;
        }
        let keep = self.select_next.clone();
        self.show_fleet(page, at);
        self.select_next = keep;
        self.fleet_partial = true;
        self.status.loading = true;
    }

    /// Whether `namespace/name` is the VM shown (or to be shown).
    fn is_target(&self, namespace: &str, name: &str) -> bool {
        self.target
            .as_ref()
            .is_some_and(|(ns, n)| ns == namespace && n == name)
    }

    /// A fresh inspection arrived (ignored if it is not of the VM shown).
    pub(crate) fn set_vm(&mut self, inspection: Inspection, at: DateTime<Utc>) {
        if !self.is_target(&inspection.namespace, &inspection.name) {
            return;
        }
        self.history.record_vm(&inspection);
        self.vm = Some(inspection);
        self.clamp_scrolls();
        self.status = Status {
            last_ok: Some(at),
            error: None,
            loading: false,
        };
    }

    /// A gather failed: keep the data on screen, show the error.
    pub(crate) fn set_error(&mut self, error: String) {
        self.status.error = Some(error);
        self.status.loading = false;
    }

    /// The terminal was resized.
    pub fn resize(&mut self, columns: u16, rows: u16) {
        self.view.size = (columns, rows);
        self.keep_selection_visible();
    }

    fn keep_selection_visible(&mut self) {
        let page = fleet_page(self.view.size.1);
        if self.selected < self.fleet_offset {
            self.fleet_offset = self.selected;
        } else if self.selected >= self.fleet_offset + page {
            self.fleet_offset = self.selected + 1 - page;
        }
    }

    fn panel_len(&self, panel: Panel) -> usize {
        self.vm
            .as_ref()
            .map(|i| {
                let width = usize::from(self.view.size.0);
                super::panel_lines(panel, i, &self.history, self.what_if.result.as_ref(), width)
                    .len()
            })
            .unwrap_or(0)
    }

    fn clamp_scrolls(&mut self) {
        for panel in Panel::ALL {
            let max = self.panel_len(panel).saturating_sub(1) as u16;
            let s = &mut self.view.scroll[panel.index()];
            *s = (*s).min(max);
        }
    }

    fn scroll_by(&mut self, delta: i64) {
        let panel = self.view.focus;
        let max = self.panel_len(panel).saturating_sub(1) as i64;
        let s = &mut self.view.scroll[panel.index()];
        *s = (i64::from(*s) + delta).clamp(0, max.max(0)) as u16;
    }

    fn select_by(&mut self, delta: i64) {
        let len = self.fleet_rows().len() as i64;
        if len == 0 {
            self.selected = 0;
            return;
        }
        self.selected = (self.selected as i64 + delta).clamp(0, len - 1) as usize;
        self.keep_selection_visible();
    }

    /// Apply one key; returns what the live loop must do.
    pub(crate) fn handle_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
            return Action::Quit;
        }
        // The help overlay first: a refused what-if can reopen the input under it.
        if self.view.help {
            return match key.code {
                KeyCode::Char('q') => Action::Quit,
                KeyCode::Esc | KeyCode::Char('?') | KeyCode::Enter => {
                    self.view.help = false;
                    Action::None
                }
                _ => Action::None,
            };
        }
        if self.what_if.editing {
            return self.what_if_input_key(key);
        }
        if self.screen == Screen::Fleet && self.fleet_filter.editing {
            return self.fleet_filter_key(key);
        }
        if self.screen == Screen::Replay {
            return self.replay_key(key);
        }
        if self.screen == Screen::Rehearsal {
            return self.rehearsal_key(key);
        }
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('?') => {
                self.view.help = true;
                return Action::None;
            }
            KeyCode::Char('r') => {
                self.status.loading = true;
                return Action::Refresh;
            }
            _ => {}
        }
        match self.screen {
            Screen::Vm if self.what_if.open => self.what_if_panel_key(key),
            Screen::Vm => self.vm_key(key),
            Screen::Fleet => self.fleet_key(key),
            Screen::Replay | Screen::Rehearsal => Action::None,
        }
    }

    /// The rehearsal's keys: ↑/↓ (`j`/`k`) the next or previous VM, PgUp/PgDn a page, Home/End
    /// (`g`/`G`) the first and the last; nothing to refresh (it is gathered once).
    fn rehearsal_key(&mut self, key: KeyEvent) -> Action {
        let page = fleet_page(self.view.size.1) as i64;
        let delta = match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('?') => {
                self.view.help = true;
                return Action::None;
            }
            code => match movement(code, page) {
                Some(d) => d,
                None => return Action::None,
            },
        };
        if let Some(view) = &mut self.rehearsal {
            view.select_by(delta);
        }
        Action::None
    }

    /// The replay view's keys: ←/→ (`h`/`l`) a step back or forward, PgUp/PgDn ten, Home/End
    /// (`g`/`G`) the first and the last, `n`/`p` (`N`) the next or previous step that does not
    /// agree; nothing to refresh.
    fn replay_key(&mut self, key: KeyEvent) -> Action {
        let delta = match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('?') => {
                self.view.help = true;
                return Action::None;
            }
            KeyCode::Char(c @ ('n' | 'p' | 'N')) => {
                if let Some(view) = &mut self.replay {
                    view.jump_to_difference(c == 'n');
                }
                return Action::None;
            }
            KeyCode::Right | KeyCode::Char('l') => 1,
            KeyCode::Left | KeyCode::Char('h') => -1,
            code => match movement(code, 10) {
                Some(d) if d.abs() >= 10 => d,
                _ => return Action::None,
            },
        };
        if let Some(view) = &mut self.replay {
            view.step_by(delta);
        }
        Action::None
    }

    /// A what-if result arrived (ignored unless one was asked for, for the VM shown).
    pub(crate) fn set_what_if(&mut self, result: Result<WhatIf, WhatIfError>) {
        if !self.what_if.pending || self.screen != Screen::Vm {
            return;
        }
        self.what_if.pending = false;
        match result {
            Ok(w) => {
                if !self.is_target(&w.namespace, &w.name) {
                    return;
                }
                self.what_if.result = Some(w);
                self.what_if.open = true;
                self.what_if.scroll = 0;
                self.what_if.gather_error = None;
            }
            Err(WhatIfError::Change(e)) => {
                self.what_if.editing = true;
                self.what_if.error = Some(e.to_string());
            }
            Err(WhatIfError::Gather(e)) => self.what_if.gather_error = Some(e),
        }
    }

    /// Leaving the VM: its what-if goes, the text typed too (a change for one VM is not a
    /// draft for the next).
    fn reset_what_if(&mut self) {
        self.what_if = WhatIfState::default();
    }

    fn what_if_input_key(&mut self, key: KeyEvent) -> Action {
        let target = self.target.clone();
        let w = &mut self.what_if;
        match key.code {
            KeyCode::Esc => {
                w.editing = false;
                w.error = None;
                Action::None
            }
            KeyCode::Enter => match parse_change_line(&w.text) {
                Err(e) => {
                    w.error = Some(e.to_string());
                    Action::None
                }
                Ok(change) => {
                    let Some((namespace, name)) = target else {
                        return Action::None;
                    };
                    w.editing = false;
                    w.error = None;
                    w.gather_error = None;
                    w.pending = true;
                    Action::WhatIf {
                        namespace,
                        name,
                        change,
                    }
                }
            },
            KeyCode::Backspace => {
                w.text.pop();
                w.error = None;
                Action::None
            }
            KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
                w.text.clear();
                w.error = None;
                Action::None
            }
            KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
                w.text.push(c);
                w.error = None;
                Action::None
            }
            _ => Action::None,
        }
    }

    fn open_what_if_input(&mut self) -> Action {
        self.what_if.editing = true;
        self.what_if.error = None;
        Action::None
    }

    fn what_if_panel_key(&mut self, key: KeyEvent) -> Action {
        let page = i64::from(self.view.size.1 / 2).max(1);
        let delta = match key.code {
            KeyCode::Esc => {
                self.what_if.open = false;
                return Action::None;
            }
            KeyCode::Char('w') => return self.open_what_if_input(),
            code => match movement(code, page) {
                Some(delta) => delta,
                None => return Action::None,
            },
        };
        let max = self
            .what_if
            .result
            .as_ref()
            .map(|w| i64::from(max_scroll(w, self.view.size)))
            .unwrap_or(0);
        let s = &mut self.what_if.scroll;
        *s = (i64::from(*s) + delta).clamp(0, max.max(0)) as u16;
        Action::None
    }

    fn vm_key(&mut self, key: KeyEvent) -> Action {
        let page = i64::from(self.view.size.1 / 2).max(1);
        match key.code {
            KeyCode::Esc if self.has_fleet => {
                // Back on the fleet, the VM just left stays selected.
                if let Some((ns, name)) = self.target.clone() {
                    match self
                        .fleet_rows()
                        .iter()
                        .position(|r| r.namespace == ns && r.name == name)
                    {
                        Some(i) => {
                            self.selected = i;
                            self.keep_selection_visible();
                        }
                        None => self.select_next = Some((ns, name)),
                    }
                }
                self.screen = Screen::Fleet;
                self.status.loading = true;
                self.reset_what_if();
                Action::BackToFleet
            }
            // Esc goes back one level and never quits: nothing is behind a VM shown alone.
            KeyCode::Esc => Action::None,
            KeyCode::Char('w') => self.open_what_if_input(),
            KeyCode::Tab => {
                self.view.focus = self.view.focus.next();
                Action::None
            }
            KeyCode::BackTab => {
                self.view.focus = self.view.focus.prev();
                Action::None
            }
            code => {
                if let Some(delta) = movement(code, page) {
                    self.scroll_by(delta);
                }
                Action::None
            }
        }
    }

    fn fleet_key(&mut self, key: KeyEvent) -> Action {
        let page = fleet_page(self.view.size.1) as i64;
        match key.code {
            // Back one level: the filter goes; never quits.
            KeyCode::Esc => {
                let keep = self.selected_key();
                self.fleet_filter = FleetFilter::default();
                self.reselect(keep);
                Action::None
            }
            KeyCode::Char('/') => {
                self.fleet_filter.editing = true;
                Action::None
            }
            KeyCode::Char('s') => {
                let keep = self.selected_key();
                self.fleet_sort = self.fleet_sort.next();
                self.reselect(keep);
                Action::None
            }
            KeyCode::Enter => {
                let Some(row) = self.fleet_rows().get(self.selected).copied() else {
                    return Action::None;
                };
                let (namespace, name) = (row.namespace.clone(), row.name.clone());
                let same = self.target.as_ref() == Some(&(namespace.clone(), name.clone()));
                if !same {
                    self.vm = None;
                    self.view.scroll = [0; Panel::ALL.len()];
                }
                self.reset_what_if();
                self.target = Some((namespace.clone(), name.clone()));
                self.screen = Screen::Vm;
                self.status.loading = true;
                Action::OpenVm { namespace, name }
            }
            code => {
                if let Some(delta) = movement(code, page) {
                    self.select_by(delta);
                }
                Action::None
            }
        }
    }
}

/// How far a navigation key moves a scroll position or the fleet selection: ↓/`j` and ↑/`k` one
/// line, PgDn/PgUp `page` lines, Home/`g` and End/`G` to the start and the end (clamped by the
/// caller); `None` for any other key.
fn movement(code: KeyCode, page: i64) -> Option<i64> {
    match code {
        KeyCode::Down | KeyCode::Char('j') => Some(1),
        KeyCode::Up | KeyCode::Char('k') => Some(-1),
        KeyCode::PageDown => Some(page),
        KeyCode::PageUp => Some(-page),
        KeyCode::Home | KeyCode::Char('g') => Some(i64::MIN / 2),
        KeyCode::End | KeyCode::Char('G') => Some(i64::MAX / 2),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::tui::fixtures;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    #[test]
    fn tab_and_shift_tab_cycle_through_every_panel() {
        let mut app = App::vm("default", "vm-a");
        let mut seen = vec![app.view.focus];
        let n = Panel::ALL.len();
        for _ in 0..n {
            assert_eq!(app.handle_key(key(KeyCode::Tab)), Action::None);
            seen.push(app.view.focus);
        }
        assert_eq!(seen[..n], Panel::ALL);
        assert_eq!(seen[n], Panel::Leader, "wraps around");
        app.handle_key(key(KeyCode::BackTab));
        assert_eq!(app.view.focus, Panel::Events);
    }

    #[test]
    fn q_and_ctrl_c_quit_a_vm_view_without_fleet_and_esc_does_not() {
        let mut app = App::vm("default", "vm-a");
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::None);
        assert_eq!(app.screen, Screen::Vm, "nothing behind it to go back to");
        assert_eq!(app.handle_key(key(KeyCode::Char('q'))), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(app.handle_key(ctrl_c), Action::Quit);
    }

    #[test]
    fn esc_goes_back_one_level_and_q_quits_from_every_view() {
        let what_if_open = |app: &mut App| {
            let g = crate::inspect::whatif::tests::running(Default::default());
            let w =
                crate::inspect::whatif::what_if(&g, &parse_change_line("stop").unwrap()).unwrap();
            app.target = Some((w.namespace.clone(), w.name.clone()));
            app.what_if.pending = true;
            app.set_what_if(Ok(w));
            assert!(app.what_if.open);
        };
        // what-if → VM → fleet, then Esc stays on the fleet.
        let mut app = App::vm_in_fleet("demo", "vm-a");
        what_if_open(&mut app);
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::None);
        assert!(!app.what_if.open && app.screen == Screen::Vm);
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::BackToFleet);
        assert_eq!(app.screen, Screen::Fleet);
        for _ in 0..3 {
            assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::None);
            assert_eq!(app.screen, Screen::Fleet);
        }
        // q quits the fleet, a VM, a VM under a what-if, and the help overlay of each.
        let mut views = vec![App::fleet(), App::vm("demo", "vm-a"), {
            let mut a = App::vm("demo", "vm-a");
            what_if_open(&mut a);
            a
        }];
        for app in &mut views {
            assert_eq!(
                app.clone().handle_key(key(KeyCode::Char('q'))),
                Action::Quit
            );
            app.handle_key(key(KeyCode::Char('?')));
            assert!(app.view.help);
            assert_eq!(app.handle_key(key(KeyCode::Char('q'))), Action::Quit);
        }
    }

    #[test]
    fn help_lists_the_keys_of_the_view_shown() {
        use crate::inspect::tui::view_keys;
        let has = |app: &App, k: &str| view_keys(app).iter().any(|(key, _)| *key == k);
        let fleet = App::fleet();
        assert!(has(&fleet, "Enter") && has(&fleet, "s") && has(&fleet, "/"));
        assert!(!has(&fleet, "Tab, Shift-Tab"));
        let alone = App::vm("default", "vm-a");
        assert!(has(&alone, "Tab, Shift-Tab") && !has(&alone, "Esc"));
        let in_fleet = App::vm_in_fleet("default", "vm-a");
        assert!(has(&in_fleet, "Esc"));
        for app in [fleet, alone, in_fleet] {
            assert!(has(&app, "q, Ctrl-C") && has(&app, "?"));
        }
    }

    #[test]
    fn r_refreshes_and_marks_loading() {
        let mut app = App::vm("default", "vm-a");
        assert_eq!(app.handle_key(key(KeyCode::Char('r'))), Action::Refresh);
        assert!(app.status.loading);
    }

    #[test]
    fn help_overlay_opens_closes_and_swallows_other_keys() {
        let mut app = App::vm("default", "vm-a");
        app.handle_key(key(KeyCode::Char('?')));
        assert!(app.view.help);
        assert_eq!(app.handle_key(key(KeyCode::Tab)), Action::None);
        assert_eq!(
            app.view.focus,
            Panel::Leader,
            "Tab does not move under the overlay"
        );
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::None);
        assert!(!app.view.help, "Esc closes the overlay instead of quitting");
        app.handle_key(key(KeyCode::Char('?')));
        app.handle_key(key(KeyCode::Char('?')));
        assert!(!app.view.help);
    }

    #[test]
    fn scrolling_stays_within_the_focused_panels_lines() {
        let mut app = App::vm("default", "vm-cirros");
        app.set_vm(fixtures::running_ours(), fixtures::now());
        app.view.focus = Panel::Events;
        let len = crate::inspect::tui::panel_lines(
            Panel::Events,
            app.vm.as_ref().unwrap(),
            &app.history,
            None,
            80,
        )
        .len();
        assert!(len > 2);
        app.handle_key(key(KeyCode::Char('j')));
        app.handle_key(key(KeyCode::Down));
        assert_eq!(app.view.scroll_of(Panel::Events), 2);
        app.handle_key(key(KeyCode::Up));
        assert_eq!(app.view.scroll_of(Panel::Events), 1);
        for _ in 0..100 {
            app.handle_key(key(KeyCode::PageDown));
        }
        assert_eq!(usize::from(app.view.scroll_of(Panel::Events)), len - 1);
        app.handle_key(key(KeyCode::Home));
        assert_eq!(app.view.scroll_of(Panel::Events), 0);
        app.handle_key(key(KeyCode::Char('k')));
        assert_eq!(
            app.view.scroll_of(Panel::Events),
            0,
            "no scrolling above the top"
        );
        assert_eq!(
            app.view.scroll_of(Panel::Leader),
            0,
            "other panels untouched"
        );
    }

    #[test]
    fn an_inspection_of_another_vm_is_ignored() {
        let mut app = App::vm("default", "other");
        app.set_vm(fixtures::running_ours(), fixtures::now());
        assert!(app.vm.is_none());
    }

    #[test]
    fn errors_keep_the_last_data() {
        let mut app = App::vm("default", "vm-cirros");
        app.set_vm(fixtures::running_ours(), fixtures::now());
        app.set_error("connection refused".into());
        assert!(app.vm.is_some());
        assert_eq!(app.status.error.as_deref(), Some("connection refused"));
        assert_eq!(app.status.last_ok, Some(fixtures::now()));
    }

    #[test]
    fn fleet_problems_first_enter_opens_esc_returns() {
        let mut app = App::fleet();
        app.set_fleet(fixtures::fleet(), fixtures::now());
        let rows = app.fleet_rows();
        let first_ok = rows.iter().position(|r| !row_has_problem(r)).unwrap();
        assert!(rows[..first_ok].iter().all(|r| row_has_problem(r)));
        assert!(rows[first_ok..].iter().all(|r| !row_has_problem(r)));
        let second = (rows[1].namespace.clone(), rows[1].name.clone());
        app.handle_key(key(KeyCode::Down));
        assert_eq!(
            app.handle_key(key(KeyCode::Enter)),
            Action::OpenVm {
                namespace: second.0.clone(),
                name: second.1.clone()
            }
        );
        assert_eq!(app.screen, Screen::Vm);
        assert_eq!(app.target, Some(second));
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::BackToFleet);
        assert_eq!(app.screen, Screen::Fleet);
        assert_eq!(app.selected, 1, "the selection is kept");
        assert_eq!(
            app.handle_key(key(KeyCode::Esc)),
            Action::None,
            "never quits"
        );
        assert_eq!(app.screen, Screen::Fleet);
        assert_eq!(app.handle_key(key(KeyCode::Char('q'))), Action::Quit);
    }

    #[test]
    fn s_cycles_the_sort_key_with_problems_first_and_keeps_the_selection() {
        let mut app = App::fleet();
        app.set_fleet(fixtures::fleet(), fixtures::now());
        let problems = app
            .fleet_rows()
            .iter()
            .filter(|r| row_has_problem(r))
            .count();
        let picked = app.fleet_rows()[problems].name.clone();
        app.selected = problems;
        let mut seen = Vec::new();
        for _ in 0..4 {
            assert_eq!(app.handle_key(key(KeyCode::Char('s'))), Action::None);
            seen.push(app.fleet_sort);
            let rows = app.fleet_rows();
            assert!(
                rows[..problems].iter().all(|r| row_has_problem(r)),
                "{:?}",
                app.fleet_sort
            );
            assert_eq!(rows[app.selected].name, picked, "{:?}", app.fleet_sort);
            let ok = &rows[problems..];
            for pair in ok.windows(2) {
                assert_ne!(
                    app.fleet_sort.cmp(pair[0], pair[1]),
                    std::cmp::Ordering::Greater,
                    "{:?}",
                    app.fleet_sort
                );
            }
        }
        assert_eq!(
            seen,
            [
                FleetSort::InPhase,
                FleetSort::Retries,
                FleetSort::Status,
                FleetSort::Name
            ]
        );
    }

    #[test]
    fn slash_filters_by_name_enter_keeps_it_esc_clears_it() {
        let mut app = App::fleet();
        app.set_fleet(fixtures::fleet(), fixtures::now());
        let all = app.fleet_rows().len();
        assert_eq!(app.handle_key(key(KeyCode::Char('/'))), Action::None);
        assert!(app.fleet_filter.editing);
        // Keys are text while the filter is typed: q does not quit, s does not sort.
        type_text(&mut app, "qs");
        assert_eq!(app.fleet_rows().len(), 0);
        app.handle_key(key(KeyCode::Backspace));
        app.handle_key(key(KeyCode::Backspace));
        type_text(&mut app, "CIRROS");
        let rows = app.fleet_rows();
        assert!(!rows.is_empty() && rows.len() < all);
        assert!(rows.iter().all(|r| r.name.contains("cirros")));
        app.handle_key(key(KeyCode::Enter));
        assert!(!app.fleet_filter.editing);
        assert_eq!(app.fleet_filter.text, "CIRROS", "kept");
        // Esc clears it (back one level), and does not quit.
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::None);
        assert_eq!(app.fleet_rows().len(), all);
        assert_eq!(app.handle_key(key(KeyCode::Char('q'))), Action::Quit);
    }

    #[test]
    fn fleet_selection_follows_the_vm_across_refreshes_and_pages() {
        let mut app = App::fleet();
        app.resize(100, 10);
        app.set_fleet(fixtures::big_fleet(50), fixtures::now());
        app.handle_key(key(KeyCode::PageDown));
        assert_eq!(app.selected, fleet_page(10));
        assert!(
            app.fleet_offset > 0,
            "the table scrolled to keep the selection visible"
        );
        let picked = app.fleet_rows()[app.selected].name.clone();
        // The same VMs, in another order from the gatherer.
        let mut again = fixtures::big_fleet(50);
        again.rows.reverse();
        app.set_fleet(again, fixtures::now());
        assert_eq!(app.fleet_rows()[app.selected].name, picked);
        app.handle_key(key(KeyCode::End));
        assert_eq!(app.selected, 49);
        app.handle_key(key(KeyCode::Down));
        assert_eq!(app.selected, 49);
    }

    #[test]
    fn esc_from_a_vm_selects_it_in_the_fleet() {
        // demo: the VM view first, no fleet gathered yet.
        let mut app = App::vm_in_fleet("default", "vm-halted");
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::BackToFleet);
        app.set_fleet(fixtures::fleet(), fixtures::now());
        let rows = app.fleet_rows();
        assert_eq!(rows[app.selected].name, "vm-halted");
        // And with a fleet already there.
        app.handle_key(key(KeyCode::Home));
        assert_eq!(
            app.handle_key(key(KeyCode::Enter)),
            Action::OpenVm {
                namespace: "default".into(),
                name: "vm-big".into()
            }
        );
        app.target = Some(("default".into(), "vm-cirros".into()));
        app.handle_key(key(KeyCode::Esc));
        assert_eq!(app.fleet_rows()[app.selected].name, "vm-cirros");
    }

    #[test]
    fn a_first_page_shows_until_the_whole_fleet_and_never_over_it() {
        let mut app = App::fleet();
        let mut page = fixtures::fleet();
        page.rows.truncate(2);
        app.set_fleet_page(page.clone(), fixtures::now());
        assert!(app.fleet_partial);
        assert!(app.status.loading, "still gathering the rest");
        assert_eq!(app.fleet_rows().len(), 2);
        app.set_fleet(fixtures::fleet(), fixtures::now());
        assert!(!app.fleet_partial);
        app.set_fleet_page(page, fixtures::now());
        assert_eq!(
            app.fleet_rows().len(),
            7,
            "a late page does not replace the fleet"
        );
    }

    #[test]
    fn enter_on_an_empty_fleet_does_nothing() {
        let mut app = App::fleet();
        app.set_fleet(Fleet::default(), fixtures::now());
        assert_eq!(app.handle_key(key(KeyCode::Enter)), Action::None);
        assert_eq!(app.screen, Screen::Fleet);
    }

    fn type_text(app: &mut App, text: &str) {
        for c in text.chars() {
            assert_eq!(app.handle_key(key(KeyCode::Char(c))), Action::None);
        }
    }

    /// The VM of the what-if fixture, shown.
    fn what_if_app() -> App {
        let mut app = App::vm("demo", "vm-a");
        app.set_vm(
            Inspection {
                namespace: "demo".into(),
                name: "vm-a".into(),
                ..fixtures::running_ours()
            },
            fixtures::now(),
        );
        app
    }

    #[test]
    fn w_opens_the_input_and_keys_edit_it() {
        let mut app = what_if_app();
        app.handle_key(key(KeyCode::Char('w')));
        assert!(app.what_if.editing);
        // Keys that mean something elsewhere are text here.
        type_text(&mut app, "spec.runStrategy=Hqr?jx");
        assert_eq!(app.what_if.text, "spec.runStrategy=Hqr?jx");
        assert!(!app.view.help && !app.status.loading);
        for _ in 0..5 {
            app.handle_key(key(KeyCode::Backspace));
        }
        type_text(&mut app, "alted");
        assert_eq!(app.what_if.text, "spec.runStrategy=Halted");
        assert_eq!(app.view.focus, Panel::Leader);
        let ctrl_u = KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL);
        app.handle_key(ctrl_u);
        assert_eq!(app.what_if.text, "");
        for _ in 0..3 {
            app.handle_key(key(KeyCode::Backspace));
        }
        assert_eq!(app.what_if.text, "", "Backspace on nothing is nothing");
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(app.handle_key(ctrl_c), Action::Quit, "Ctrl-C still quits");
    }

    #[test]
    fn esc_cancels_the_input_and_keeps_the_text_for_the_next_w() {
        let mut app = what_if_app();
        app.handle_key(key(KeyCode::Char('w')));
        type_text(&mut app, "stop");
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::None, "not Quit");
        assert!(!app.what_if.editing && !app.what_if.pending);
        assert_eq!(app.handle_key(key(KeyCode::Char('q'))), Action::Quit);
        app.handle_key(key(KeyCode::Char('w')));
        assert_eq!(app.what_if.text, "stop");
    }

    #[test]
    fn enter_with_bad_input_keeps_the_text_and_shows_why() {
        let mut app = what_if_app();
        app.handle_key(key(KeyCode::Char('w')));
        assert_eq!(app.handle_key(key(KeyCode::Enter)), Action::None);
        assert!(
            app.what_if
                .error
                .as_deref()
                .unwrap()
                .starts_with("nothing to change")
        );
        type_text(&mut app, "halted");
        assert_eq!(app.what_if.error, None, "typing clears the error");
        assert_eq!(app.handle_key(key(KeyCode::Enter)), Action::None);
        assert!(app.what_if.editing, "still editing");
        assert_eq!(app.what_if.text, "halted");
        assert_eq!(
            app.what_if.error.as_deref(),
            Some(
                r#""halted": expected path=value, a JSON merge patch {…}, or start, stop, restart"#
            )
        );
        assert!(!app.what_if.pending);
    }

    #[test]
    fn enter_with_a_change_asks_for_the_what_if_and_the_result_opens_the_panel() {
        let mut app = what_if_app();
        app.handle_key(key(KeyCode::Char('w')));
        type_text(&mut app, "spec.runStrategy=Halted");
        let action = app.handle_key(key(KeyCode::Enter));
        let Action::WhatIf {
            namespace,
            name,
            change,
        } = action
        else {
            panic!("{action:?}");
        };
        assert_eq!((namespace.as_str(), name.as_str()), ("demo", "vm-a"));
        assert_eq!(
            change,
            parse_change_line("spec.runStrategy=Halted").unwrap()
        );
        assert!(app.what_if.pending && !app.what_if.editing);
        // Other keys are answered meanwhile.
        app.handle_key(key(KeyCode::Tab));
        assert_eq!(app.view.focus, Panel::Queues);
        let g = crate::inspect::whatif::tests::running(Default::default());
        let w = crate::inspect::whatif::what_if(&g, &change).unwrap();
        app.set_what_if(Ok(w.clone()));
        assert!(app.what_if.open && !app.what_if.pending);
        assert_eq!(app.what_if.result.as_ref(), Some(&w));
        // The panel scrolls, within its lines; Tab does nothing under it.
        app.handle_key(key(KeyCode::Char('j')));
        app.handle_key(key(KeyCode::Down));
        assert_eq!(app.what_if.scroll, 2);
        app.handle_key(key(KeyCode::End));
        let max = crate::inspect::tui::whatif::max_scroll(&w, app.view.size);
        assert!(max > 2);
        assert_eq!(app.what_if.scroll, max);
        app.handle_key(key(KeyCode::Home));
        assert_eq!(app.what_if.scroll, 0);
        app.handle_key(key(KeyCode::Tab));
        assert_eq!(app.view.focus, Panel::Queues);
        // w edits the change again over the panel; Esc closes the input, then the panel.
        app.handle_key(key(KeyCode::Char('w')));
        assert!(app.what_if.editing && app.what_if.open);
        app.handle_key(key(KeyCode::Esc));
        assert!(!app.what_if.editing && app.what_if.open);
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::None);
        assert!(!app.what_if.open);
        assert_eq!(
            app.handle_key(key(KeyCode::Esc)),
            Action::None,
            "never quits"
        );
    }

    #[test]
    fn a_refused_change_reopens_the_input_and_a_failed_read_goes_to_the_status() {
        let mut app = what_if_app();
        app.handle_key(key(KeyCode::Char('w')));
        type_text(&mut app, "start");
        assert!(matches!(
            app.handle_key(key(KeyCode::Enter)),
            Action::WhatIf { .. }
        ));
        let g = crate::inspect::whatif::tests::running(Default::default());
        let refused =
            crate::inspect::whatif::what_if(&g, &parse_change_line("start").unwrap()).unwrap_err();
        app.handle_key(key(KeyCode::Char('?')));
        app.set_what_if(Err(WhatIfError::Change(refused.clone())));
        assert!(app.what_if.editing);
        app.handle_key(key(KeyCode::Char('x')));
        assert!(app.view.help, "keys go to the help overlay over the input");
        app.handle_key(key(KeyCode::Esc));
        assert!(!app.view.help && app.what_if.editing);
        assert_eq!(app.what_if.text, "start");
        assert_eq!(app.what_if.error, Some(refused.to_string()));
        app.handle_key(key(KeyCode::Enter));
        app.set_what_if(Err(WhatIfError::Gather("connection refused".into())));
        assert!(!app.what_if.editing && !app.what_if.open);
        assert_eq!(
            app.what_if.gather_error.as_deref(),
            Some("connection refused")
        );
        // A late result (nothing asked for) is ignored.
        app.set_what_if(Err(WhatIfError::Gather("late".into())));
        assert_eq!(
            app.what_if.gather_error.as_deref(),
            Some("connection refused")
        );
    }

    #[test]
    fn leaving_the_vm_drops_its_what_if() {
        let mut app = App::vm_in_fleet("demo", "vm-a");
        app.handle_key(key(KeyCode::Char('w')));
        type_text(&mut app, "stop");
        assert!(matches!(
            app.handle_key(key(KeyCode::Enter)),
            Action::WhatIf { .. }
        ));
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::BackToFleet);
        assert!(!app.what_if.pending);
        assert!(
            app.what_if.text.is_empty(),
            "the text typed for that VM goes with it"
        );
        let g = crate::inspect::whatif::tests::running(Default::default());
        let w = crate::inspect::whatif::what_if(&g, &parse_change_line("stop").unwrap()).unwrap();
        app.set_what_if(Ok(w));
        assert!(app.what_if.result.is_none(), "not shown on the fleet");
        assert_eq!(app.handle_key(key(KeyCode::Char('w'))), Action::None);
        assert!(!app.what_if.editing, "no what-if on the fleet view");
    }
}
