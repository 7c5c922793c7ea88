//! The live loop: the terminal set up (raw mode, alternate screen, hidden cursor) and restored
//! on every way out (quit, error, panic, Ctrl-C, SIGTERM); a gather about once a second and on
//! `r`; keys applied through [`App::handle_key`]; the last error shown in the status line.
//!
//! The loop knows nothing about the cluster: a [`Gather`] yields a fresh [`Inspection`] or
//! [`Fleet`], or a [`WhatIf`] for a change typed after `w`. Only one gather and one what-if are
//! in flight at a time (a new what-if replaces the one running), and the UI keeps answering
//! keys while they run.

use super::state::{Action, App, Screen, WhatIfError};
use crate::inspect::model::{Fleet, Inspection};
use crate::inspect::whatif::{Change, WhatIf};
use chrono::Utc;
use ratatui::Terminal;
use ratatui::backend::{Backend, CrosstermBackend};
use ratatui::crossterm::event::{self, Event};
use ratatui::crossterm::{cursor, execute, terminal};
use std::future::Future;
use std::io::{self, Stdout};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;

/// How often the data is gathered again.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// Where the live loop gets its data.
pub trait Gather {
    /// Inspect one VM.
    fn vm(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Inspection, String>> + Send;
    /// The fleet (every VM in scope).
    fn fleet(&self) -> impl Future<Output = Result<Fleet, String>> + Send;
    /// A quick first page of the fleet: the first `limit` VMs by namespace/name with what can
    /// be had cheaply (no controller view, no pods), drawn while [`Gather::fleet`] runs.
    fn fleet_page(&self, limit: usize) -> impl Future<Output = Result<Fleet, String>> + Send;
    /// What the controllers would do after `change` to one VM: reads only, nothing is written.
    fn what_if(
        &self,
        namespace: &str,
        name: &str,
        change: Change,
    ) -> impl Future<Output = Result<WhatIf, WhatIfError>> + Send;
}

/// Put the terminal back: leave the alternate screen, show the cursor, leave raw mode.
pub(crate) fn restore_terminal() {
    let _ = execute!(io::stdout(), terminal::LeaveAlternateScreen, cursor::Show);
    let _ = terminal::disable_raw_mode();
}

/// Restores the terminal when dropped (any way out of [`run`], panics included).
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

fn setup() -> io::Result<(TerminalGuard, Terminal<CrosstermBackend<Stdout>>)> {
    // The panic hook restores first, so the message is readable on the normal screen.
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        restore_terminal();
        previous(info);
    }));
    terminal::enable_raw_mode()?;
    let guard = TerminalGuard;
    execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
    let terminal = Terminal::new(CrosstermBackend::new(io::stdout()))?;
    Ok((guard, terminal))
}

/// Reads terminal events on a thread of its own (crossterm's reader blocks) and hands them to
/// the async loop; stops when the loop is done.
fn spawn_event_reader(stop: Arc<AtomicBool>) -> UnboundedReceiver<Event> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match event::poll(Duration::from_millis(50)) {
                Ok(true) => match event::read() {
                    Ok(ev) => {
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                Ok(false) => {}
                Err(_) => return,
            }
        }
    });
    rx
}

enum Fetched {
    Vm(Result<Box<Inspection>, String>),
    Fleet(Result<Box<Fleet>, String>),
    FleetPage(Result<Box<Fleet>, String>),
}

type InFlight<'a> = Pin<Box<dyn Future<Output = Fetched> + Send + 'a>>;

type WhatIfInFlight<'a> = Pin<Box<dyn Future<Output = Result<WhatIf, WhatIfError>> + Send + 'a>>;

fn start_what_if<'a, G: Gather + Sync>(
    gather: &'a G,
    namespace: String,
    name: String,
    change: Change,
) -> WhatIfInFlight<'a> {
    Box::pin(async move { gather.what_if(&namespace, &name, change).await })
}

/// The output of the future in `slot`; never ready while the slot is empty (a `select!` arm for a
/// call that may not be in flight).
async fn output_of<F: Future + Unpin>(slot: &mut Option<F>) -> F::Output {
    match slot.as_mut() {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

fn start_gather<'a, G: Gather + Sync>(gather: &'a G, app: &App) -> Option<InFlight<'a>> {
    match app.screen {
        // Nothing to show yet: a first page first (a full fleet can take a while to list).
        Screen::Fleet if app.fleet.is_none() => {
            let limit = super::state::fleet_page(app.view.size.1);
            Some(Box::pin(async move {
                Fetched::FleetPage(gather.fleet_page(limit).await.map(Box::new))
            }))
        }
        Screen::Fleet => Some(Box::pin(async move {
            Fetched::Fleet(gather.fleet().await.map(Box::new))
        })),
        // A recording is read once, before the UI starts.
        Screen::Replay | Screen::Rehearsal => None,
        Screen::Vm => {
            let (ns, name) = app.target.clone()?;
            Some(Box::pin(async move {
                Fetched::Vm(gather.vm(&ns, &name).await.map(Box::new))
            }))
        }
    }
}

/// `inspect vm/NAME` in the terminal.
pub async fn run_vm<G: Gather + Sync>(gather: &G, namespace: &str, name: &str) -> io::Result<()> {
    run(gather, App::vm(namespace, name)).await
}

/// `inspect` with no name in the terminal: the fleet view.
pub async fn run_fleet<G: Gather + Sync>(gather: &G) -> io::Result<()> {
    run(gather, App::fleet()).await
}

/// Run the UI from this state until `q`, Ctrl-C or SIGTERM/SIGINT.
pub async fn run<G: Gather + Sync>(gather: &G, mut app: App) -> io::Result<()> {
    let signals = terminated()?;
    super::text::init_theme_from_env();
    let (_guard, mut terminal) = setup()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut events = spawn_event_reader(stop.clone());
    let result = drive(
        &mut terminal,
        &mut events,
        signals,
        gather,
        &mut app,
        REFRESH_EVERY,
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    result
}

/// `inspect --replay` and `inspect --upgrade-to` in the terminal: `app` (a [`Screen::Replay`]
/// or a [`Screen::Rehearsal`]) until `q`, Ctrl-C or SIGTERM/SIGINT; nothing is gathered, keys
/// step through the recording or select a VM of the rehearsal.
pub(crate) async fn run_replay(mut app: App) -> io::Result<()> {
    let signals = terminated()?;
    tokio::pin!(signals);
    super::text::init_theme_from_env();
    let (_guard, mut terminal) = setup()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut events = spawn_event_reader(stop.clone());
    let result = async {
        loop {
            terminal.draw(|f| super::draw(f, &app)).map_err(draw_err)?;
            tokio::select! {
                ev = events.recv() => match ev {
                    None => return Ok(()),
                    Some(Event::Key(key)) => {
                        if app.handle_key(key) == Action::Quit {
                            return Ok(());
                        }
                    }
                    Some(Event::Resize(w, h)) => app.resize(w, h),
                    Some(_) => {}
                },
                _ = &mut signals => return Ok(()),
            }
        }
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    result
}

/// `shadow` in the terminal: the live view ([`super::shadow::render_live`]) of `view`, renewed
/// from `progress` as the shadow classifies writes, until `q`, Esc, Ctrl-C, SIGTERM/SIGINT, or
/// the shadow ends (`--for` passed: its end of the channel is dropped).
pub(crate) async fn run_shadow(
    mut view: super::shadow::LiveShadow,
    mut progress: tokio::sync::watch::Receiver<crate::shadow::Progress>,
) -> io::Result<()> {
    use ratatui::crossterm::event::{KeyCode, KeyModifiers};
    let signals = terminated()?;
    tokio::pin!(signals);
    super::text::init_theme_from_env();
    let (_guard, mut terminal) = setup()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut events = spawn_event_reader(stop.clone());
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let result = async {
        loop {
            view.elapsed_seconds = started.elapsed().as_secs_f64();
            {
                let p = progress.borrow_and_update();
                view.synced = p.synced;
                view.held = p.held;
                view.report.clone_from(&p.report);
            }
            terminal
                .draw(|f| super::shadow::render_live(f, f.area(), &view))
                .map_err(draw_err)?;
            tokio::select! {
                changed = progress.changed() => {
                    if changed.is_err() {
                        return Ok(());
                    }
                }
                _ = tick.tick() => {}
                ev = events.recv() => match ev {
                    None => return Ok(()),
                    Some(Event::Key(key)) => {
                        let ctrl_c = key.code == KeyCode::Char('c')
                            && key.modifiers.contains(KeyModifiers::CONTROL);
                        if ctrl_c || matches!(key.code, KeyCode::Char('q') | KeyCode::Esc) {
                            return Ok(());
                        }
                    }
                    Some(_) => {}
                },
                _ = &mut signals => return Ok(()),
            }
        }
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    result
}

/// Completes on SIGTERM or SIGINT (both handlers are installed before it returns).
fn terminated() -> io::Result<impl Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

fn draw_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("drawing the terminal: {e}"))
}

/// The loop of [`run`] on any backend and event source: draw, then wait for a gather result,
/// the refresh tick, a terminal event or `stop`. Returns on [`Action::Quit`], when the events
/// end, or when `stop` completes.
pub(crate) async fn drive<B: Backend, G: Gather + Sync>(
    terminal: &mut Terminal<B>,
    events: &mut UnboundedReceiver<Event>,
    stop: impl Future<Output = ()>,
    gather: &G,
    app: &mut App,
    refresh_every: Duration,
) -> io::Result<()> {
    let size = terminal.size().map_err(draw_err)?;
    app.resize(size.width, size.height);
    app.status.loading = true;
    let mut in_flight = start_gather(gather, app);
    let mut what_if: Option<WhatIfInFlight<'_>> = None;
    let mut ticker = tokio::time::interval(refresh_every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await;
    tokio::pin!(stop);
    loop {
        terminal.draw(|f| super::draw(f, app)).map_err(draw_err)?;
        tokio::select! {
            fetched = output_of(&mut in_flight) => {
                in_flight = None;
                let now = Utc::now();
                match fetched {
                    Fetched::Vm(Ok(i)) if app.screen == Screen::Vm => app.set_vm(*i, now),
                    Fetched::Fleet(Ok(f)) if app.screen == Screen::Fleet => app.set_fleet(*f, now),
                    Fetched::FleetPage(Ok(f)) if app.screen == Screen::Fleet => {
                        app.set_fleet_page(*f, now);
                        in_flight = start_gather(gather, app);
                    }
                    Fetched::Vm(Err(e)) | Fetched::Fleet(Err(e)) | Fetched::FleetPage(Err(e)) => {
                        app.set_error(e)
                    }
                    // Gathered for the other screen: gather for this one.
                    _ => in_flight = start_gather(gather, app),
                }
            }
            result = output_of(&mut what_if) => {
                what_if = None;
                app.set_what_if(result);
            }
            _ = ticker.tick() => {
                if in_flight.is_none() {
                    in_flight = start_gather(gather, app);
                }
            }
            ev = events.recv() => {
                let Some(ev) = ev else { break };
                match ev {
                    Event::Key(key) => match app.handle_key(key) {
                        Action::None => {}
                        Action::Quit => break,
                        Action::Refresh => {
                            in_flight = start_gather(gather, app);
                            ticker.reset();
                        }
                        Action::OpenVm { .. } | Action::BackToFleet => {
                            // The what-if of the VM left is of no use any more.
                            what_if = None;
                            in_flight = start_gather(gather, app);
                            ticker.reset();
                        }
                        Action::WhatIf { namespace, name, change } => {
                            what_if = Some(start_what_if(gather, namespace, name, change));
                        }
                    },
                    Event::Resize(w, h) => app.resize(w, h),
                    _ => {}
                }
            }
            _ = &mut stop => break,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::tui::fixtures;
    use ratatui::backend::TestBackend;
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use std::sync::{Arc, Mutex};
    use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};

    /// Answers from fixtures and reports every call (`vm default/x`, `fleet`); VM gathers fail
    /// with `vm_error` while it is set.
    struct Fake {
        calls: UnboundedSender<String>,
        vm_error: Arc<Mutex<Option<String>>>,
    }

    impl Gather for Fake {
        async fn vm(&self, namespace: &str, name: &str) -> Result<Inspection, String> {
            let _ = self.calls.send(format!("vm {namespace}/{name}"));
            if let Some(e) = self.vm_error.lock().unwrap().clone() {
                return Err(e);
            }
            Ok(Inspection {
                namespace: namespace.into(),
                name: name.into(),
                ..fixtures::running_ours()
            })
        }

        async fn fleet(&self) -> Result<Fleet, String> {
            let _ = self.calls.send("fleet".into());
            Ok(fixtures::fleet())
        }

        async fn fleet_page(&self, limit: usize) -> Result<Fleet, String> {
            let _ = self.calls.send(format!("fleet page {limit}"));
            // The same rows as the whole fleet: Enter picks the same VM whichever is shown.
            Ok(fixtures::fleet())
        }

        /// On the what-if fixture's state (the VM demo/vm-a, running).
        async fn what_if(
            &self,
            namespace: &str,
            name: &str,
            change: Change,
        ) -> Result<WhatIf, WhatIfError> {
            let _ = self.calls.send(format!(
                "what-if {namespace}/{name}: {}",
                change.describe().join("; ")
            ));
            let g = crate::inspect::whatif::tests::running(Default::default());
            crate::inspect::whatif::what_if(&g, &change).map_err(WhatIfError::Change)
        }
    }

    fn key(code: KeyCode) -> Event {
        Event::Key(KeyEvent::new(code, KeyModifiers::NONE))
    }

    fn screen(terminal: &Terminal<TestBackend>) -> String {
        let buf = terminal.backend().buffer();
        (0..buf.area.height)
            .map(|y| {
                (0..buf.area.width)
                    .map(|x| buf[(x, y)].symbol())
                    .collect::<String>()
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The loop's side of a test: a 140×44 test terminal, the key events and the [`Fake`].
    struct Rig {
        terminal: Terminal<TestBackend>,
        events: UnboundedReceiver<Event>,
        fake: Fake,
    }

    impl Rig {
        /// [`drive`] (no shutdown signal, the real refresh period) beside `script`, which sends
        /// keys and reads the gather calls; `drive`'s result once both are done.
        async fn drive_with(
            &mut self,
            app: &mut App,
            script: impl Future<Output = ()>,
        ) -> io::Result<()> {
            let stop = std::future::pending();
            let (result, ()) = tokio::join!(
                drive(
                    &mut self.terminal,
                    &mut self.events,
                    stop,
                    &self.fake,
                    app,
                    REFRESH_EVERY
                ),
                script
            );
            result
        }

        /// Asserts that the terminal shows `text`.
        fn assert_shows(&self, text: &str) {
            let shown = screen(&self.terminal);
            assert!(shown.contains(text), "{text:?} not in\n{shown}");
        }
    }

    /// The rig, and the script's side: the key sender and the gather calls.
    fn rig() -> (Rig, UnboundedSender<Event>, UnboundedReceiver<String>) {
        let (keys, events) = unbounded_channel();
        let (calls_tx, calls) = unbounded_channel();
        let rig = Rig {
            terminal: Terminal::new(TestBackend::new(140, 44)).unwrap(),
            events,
            fake: Fake {
                calls: calls_tx,
                vm_error: Arc::default(),
            },
        };
        (rig, keys, calls)
    }

    /// The next call other than a periodic refresh of `skip`.
    async fn next_call(calls: &mut UnboundedReceiver<String>, skip: &str) -> String {
        loop {
            let c = calls.recv().await.expect("a gather call");
            if c != skip {
                return c;
            }
        }
    }

    #[tokio::test(start_paused = true)]
    async fn gathers_at_start_on_r_and_every_second_then_quits_on_q() {
        let (mut rig, keys, mut calls) = rig();
        let mut app = App::vm("default", "vm-cirros");
        let script = async {
            assert_eq!(
                calls.recv().await.unwrap(),
                "vm default/vm-cirros",
                "gathered at once"
            );
            // Nothing pressed: the ticker gathers again (the paused clock jumps to it).
            assert_eq!(
                calls.recv().await.unwrap(),
                "vm default/vm-cirros",
                "refreshed by the tick"
            );
            keys.send(key(KeyCode::Char('r'))).unwrap();
            assert_eq!(
                calls.recv().await.unwrap(),
                "vm default/vm-cirros",
                "r gathers"
            );
            keys.send(key(KeyCode::Tab)).unwrap();
            keys.send(key(KeyCode::Char('q'))).unwrap();
        };
        rig.drive_with(&mut app, script).await.unwrap();
        assert_eq!(app.view.focus, crate::inspect::tui::Panel::Queues);
        assert!(app.vm.is_some());
        rig.assert_shows("VMI Running: the Always branch does nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_gather_is_shown_in_the_status_line_and_the_loop_goes_on() {
        let (mut rig, keys, mut calls) = rig();
        let vm_error = rig.fake.vm_error.clone();
        let mut app = App::vm("default", "vm-cirros");
        let script = async {
            calls.recv().await.unwrap();
            *vm_error.lock().unwrap() = Some("cluster unreachable: connection refused".into());
            keys.send(key(KeyCode::Char('r'))).unwrap();
            calls.recv().await.unwrap();
            // One more tick after the error: still running, still drawing.
            calls.recv().await.unwrap();
            keys.send(key(KeyCode::Char('q'))).unwrap();
        };
        rig.drive_with(&mut app, script).await.unwrap();
        assert!(app.vm.is_some(), "the last good data is kept");
        rig.assert_shows("error: cluster unreachable: connection refused");
    }

    #[tokio::test(start_paused = true)]
    async fn fleet_enter_gathers_the_selected_vm_and_esc_the_fleet_again() {
        let (mut rig, keys, mut calls) = rig();
        let mut app = App::fleet();
        let first = App {
            fleet: Some(fixtures::fleet()),
            ..App::fleet()
        }
        .fleet_rows()[0]
            .clone();
        let script = async {
            // 44 rows: a page of 38 first, then the whole fleet at once.
            assert_eq!(calls.recv().await.unwrap(), "fleet page 38");
            assert_eq!(calls.recv().await.unwrap(), "fleet");
            keys.send(key(KeyCode::Enter)).unwrap();
            let want = format!("vm {}/{}", first.namespace, first.name);
            assert_eq!(next_call(&mut calls, "fleet").await, want);
            keys.send(key(KeyCode::Esc)).unwrap();
            assert_eq!(next_call(&mut calls, &want).await, "fleet");
            keys.send(key(KeyCode::Char('q'))).unwrap();
        };
        rig.drive_with(&mut app, script).await.unwrap();
        assert_eq!(app.screen, Screen::Fleet);
        rig.assert_shows("Fleet all namespaces");
    }

    #[tokio::test(start_paused = true)]
    async fn a_signal_ends_the_loop() {
        let (mut rig, _keys, mut calls) = rig();
        let mut app = App::vm("default", "vm-cirros");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let stop = async move {
            let _ = stop_rx.await;
        };
        let script = async {
            calls.recv().await.unwrap();
            stop_tx.send(()).unwrap();
        };
        let (result, ()) = tokio::join!(
            drive(
                &mut rig.terminal,
                &mut rig.events,
                stop,
                &rig.fake,
                &mut app,
                REFRESH_EVERY
            ),
            script
        );
        result.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn w_asks_for_a_what_if_and_shows_it_while_the_refresh_goes_on() {
        let (mut rig, keys, mut calls) = rig();
        let mut app = App::vm("demo", "vm-a");
        let script = async {
            assert_eq!(calls.recv().await.unwrap(), "vm demo/vm-a");
            keys.send(key(KeyCode::Char('w'))).unwrap();
            for c in "spec.runStrategy=Halted".chars() {
                keys.send(key(KeyCode::Char(c))).unwrap();
            }
            keys.send(key(KeyCode::Enter)).unwrap();
            assert_eq!(
                next_call(&mut calls, "vm demo/vm-a").await,
                r#"what-if demo/vm-a: set spec.runStrategy="Halted""#
            );
            // The refresh goes on after it.
            assert_eq!(calls.recv().await.unwrap(), "vm demo/vm-a");
            // A refused change: back in the input line with virt-api's answer.
            keys.send(key(KeyCode::Char('w'))).unwrap();
            keys.send(key(KeyCode::Char('u'))).unwrap();
            keys.send(Event::Key(KeyEvent::new(
                KeyCode::Char('u'),
                KeyModifiers::CONTROL,
            )))
            .unwrap();
            for c in "start".chars() {
                keys.send(key(KeyCode::Char(c))).unwrap();
            }
            keys.send(key(KeyCode::Enter)).unwrap();
            assert_eq!(
                next_call(&mut calls, "vm demo/vm-a").await,
                "what-if demo/vm-a: start request (as virtctl start sends it)"
            );
            calls.recv().await.unwrap();
            // Typed keys go to the input: Ctrl-C quits.
            keys.send(Event::Key(KeyEvent::new(
                KeyCode::Char('c'),
                KeyModifiers::CONTROL,
            )))
            .unwrap();
        };
        rig.drive_with(&mut app, script).await.unwrap();
        let w = app.what_if.result.as_ref().expect("a what-if result");
        crate::inspect::whatif::tests::assert_outcome(w, "would delete VMI vm-a");
        assert!(app.what_if.open, "the first result stays under the input");
        assert!(app.what_if.editing);
        let error = app.what_if.error.as_deref().unwrap_or_default();
        assert!(error.contains("409 Conflict"), "{error}");
        rig.assert_shows("What-if demo/vm-a");
        rig.assert_shows("would delete VMI vm-a");
        rig.assert_shows("what if: start");
        rig.assert_shows("✗ VirtualMachine demo/vm-a: virt-api would refuse");
    }
}
