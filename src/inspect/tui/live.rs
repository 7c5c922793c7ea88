//! The live loop: the terminal set up (raw mode, alternate screen, hidden cursor) and restored
//! on every way out (quit, error, panic, Ctrl-C, SIGTERM); a gather about once a second and on
//! `r`; keys applied through [`App::handle_key`]; the last error shown in the status line.
//!
//! The loop knows nothing about the cluster: a [`Gather`] yields a fresh [`Inspection`] or
//! [`Fleet`]. Only one gather is in flight at a time, and the UI keeps answering keys while it
//! runs.

use super::state::{Action, App, Screen};
use crate::inspect::model::{Fleet, Inspection};
use chrono::Utc;
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event};
use ratatui::crossterm::{cursor, execute, terminal};
use std::future::Future;
use std::io::{self, Stdout};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often the data is gathered again.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

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
}

/// Put the terminal back: leave the alternate screen, show the cursor, leave raw mode.
pub fn restore_terminal() {
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
fn spawn_event_reader(stop: Arc<AtomicBool>) -> tokio::sync::mpsc::UnboundedReceiver<Event> {
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
    Vm(Result<Inspection, String>),
    Fleet(Result<Fleet, String>),
}

type InFlight<'a> = Pin<Box<dyn Future<Output = Fetched> + Send + 'a>>;

fn start_gather<'a, G: Gather + Sync>(gather: &'a G, app: &App) -> Option<InFlight<'a>> {
    match app.screen {
        Screen::Fleet => Some(Box::pin(
            async move { Fetched::Fleet(gather.fleet().await) },
        )),
        Screen::Vm => {
            let (ns, name) = app.target.clone()?;
            Some(Box::pin(
                async move { Fetched::Vm(gather.vm(&ns, &name).await) },
            ))
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

/// Run the UI from this state until `q`, Esc (where it quits), Ctrl-C or SIGTERM/SIGINT.
pub async fn run<G: Gather + Sync>(gather: &G, mut app: App) -> io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term_signal = signal(SignalKind::terminate())?;
    let mut int_signal = signal(SignalKind::interrupt())?;
    let (_guard, mut terminal) = setup()?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut events = spawn_event_reader(stop.clone());
    let result = async {
        let size = terminal.size()?;
        app.resize(size.width, size.height);
        app.status.loading = true;
        let mut in_flight = start_gather(gather, &app);
        let mut ticker = tokio::time::interval(REFRESH_EVERY);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        // A gather started for another screen than the one shown now is dropped unread.
        let mut again = false;
        loop {
            terminal.draw(|f| super::draw(f, &app))?;
            let pending = async {
                match in_flight.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                fetched = pending => {
                    in_flight = None;
                    let now = Utc::now();
                    match fetched {
                        Fetched::Vm(Ok(i)) if app.screen == Screen::Vm => app.set_vm(i, now),
                        Fetched::Fleet(Ok(f)) if app.screen == Screen::Fleet => app.set_fleet(f, now),
                        Fetched::Vm(Err(e)) | Fetched::Fleet(Err(e)) => app.set_error(e),
                        _ => again = true,
                    }
                    if again {
                        again = false;
                        in_flight = start_gather(gather, &app);
                    }
                }
                _ = ticker.tick() => {
                    if in_flight.is_none() {
                        in_flight = start_gather(gather, &app);
                    }
                }
                ev = events.recv() => {
                    let Some(ev) = ev else { break };
                    match ev {
                        Event::Key(key) => match app.handle_key(key) {
                            Action::None => {}
                            Action::Quit => break,
                            Action::Refresh | Action::OpenVm { .. } | Action::BackToFleet => {
                                in_flight = start_gather(gather, &app);
                                ticker.reset();
                            }
                        },
                        Event::Resize(w, h) => app.resize(w, h),
                        _ => {}
                    }
                }
                _ = term_signal.recv() => break,
                _ = int_signal.recv() => break,
            }
        }
        Ok::<(), io::Error>(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    result
}
