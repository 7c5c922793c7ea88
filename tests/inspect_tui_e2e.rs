//! End to end: the real binary's `demo` (embedded cluster, controller under its Lease, a VM
//! with runStrategy Always, the inspector) in a pseudo-terminal, its screen parsed by vt100.
//! Keys are typed like a user would (Tab, `?`, Esc back one level and never out, Enter in the
//! fleet view, `w` and a what-if, `q` from the fleet); the test waits for text on the screen (no fixed sleeps, a generous deadline), then
//! checks the terminal was restored (alternate screen left, cursor shown) and the exit code is 0.

use portable_pty::{CommandBuilder, PtySize, native_pty_system};
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROWS: u16 = 44;
const COLS: u16 = 140;
const DEADLINE: Duration = Duration::from_secs(120);

struct Screen {
    parser: Arc<Mutex<vt100::Parser>>,
}

impl Screen {
    fn contents(&self) -> String {
        self.parser.lock().unwrap().screen().contents()
    }

    /// Wait until the screen shows every one of `texts`.
    fn wait_for(&self, what: &str, texts: &[&str]) -> String {
        let start = Instant::now();
        loop {
            let screen = self.contents();
            if texts.iter().all(|t| screen.contains(t)) {
                return screen;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "timed out waiting for {what} ({texts:?}); the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until the screen no longer shows `text`.
    fn wait_gone(&self, what: &str, text: &str) -> String {
        let start = Instant::now();
        loop {
            let screen = self.contents();
            if !screen.contains(text) {
                return screen;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "timed out waiting for {what}; the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

struct Demo {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    master: Box<dyn portable_pty::MasterPty + Send>,
    writer: Box<dyn Write + Send>,
    reading: std::thread::JoinHandle<()>,
    screen: Screen,
}

impl Demo {
    /// `demo` with short node delays in a 140x44 pseudo-terminal.
    fn start() -> Demo {
        let pty = native_pty_system();
        let pair = pty
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("openpty");
        let mut cmd = CommandBuilder::new(env!("CARGO_BIN_EXE_kubectl-virtctl_rs"));
        cmd.args([
            "demo",
            "--kubelet-delay-ms",
            "300",
            "--virt-handler-delay-ms",
            "300",
        ]);
        cmd.env("TERM", "xterm-256color");
        let child = pair.slave.spawn_command(cmd).expect("spawn the binary");
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().expect("pty reader");
        let writer = pair.master.take_writer().expect("pty writer");
        let parser = Arc::new(Mutex::new(vt100::Parser::new(
            std::num::NonZeroU16::new(ROWS).unwrap(),
            std::num::NonZeroU16::new(COLS).unwrap(),
            0,
        )));
        let reading = {
            let parser = parser.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                loop {
                    match reader.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => parser.lock().unwrap().process(&buf[..n]),
                    }
                }
            })
        };
        Demo {
            child,
            master: pair.master,
            writer,
            reading,
            screen: Screen { parser },
        }
    }

    fn press(&mut self, keys: &[u8]) {
        self.writer.write_all(keys).expect("type into the pty");
        self.writer.flush().expect("flush the pty");
    }

    /// Wait for the binary to exit; returns its status and the final screen's parser.
    fn wait_exit(mut self) -> (portable_pty::ExitStatus, Arc<Mutex<vt100::Parser>>) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait for the binary") {
                break status;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "the binary did not exit; the screen:\n{}",
                self.screen.contents()
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        drop(self.master);
        let _ = self.reading.join();
        (status, self.screen.parser)
    }
}

/// The terminal is back to normal and the binary said it released the Lease.
fn assert_restored(status: portable_pty::ExitStatus, parser: &Mutex<vt100::Parser>) {
    let parser = parser.lock().unwrap();
    let after = parser.screen();
    assert!(!after.alternate_screen(), "the alternate screen was left");
    assert!(!after.hide_cursor(), "the cursor is shown again");
    assert!(
        after
            .contents()
            .contains("demo stopped: the Lease was released"),
        "{}",
        after.contents()
    );
    assert!(
        status.success(),
        "exit status {status:?}:\n{}",
        after.contents()
    );
}

#[test]
fn demo_in_a_pty_tab_help_fleet_enter_quit_restores_the_terminal() {
    let mut demo = Demo::start();

    // The VM view, every panel, and the VM started by the controller under its Lease.
    let first = demo.screen.wait_for(
        "the VM view",
        &["VM default/vm-demo", "Leader", "Queues", "Events"],
    );
    assert!(
        demo.screen
            .parser
            .lock()
            .unwrap()
            .screen()
            .alternate_screen(),
        "the UI draws on the alternate screen:\n{first}"
    );
    demo.screen.wait_for(
        "the VM running under our controller",
        &["vmi Running", "virtctl-rs run-controller", "→ Running"],
    );

    // Tab moves the focus (thick border) from Leader to Queues.
    assert!(demo.screen.contents().contains("┏ Leader"));
    demo.press(b"\t");
    demo.screen.wait_for("Queues focused", &["┏ Queues"]);

    // ? opens the help overlay, Esc closes it.
    demo.press(b"?");
    demo.screen.wait_for(
        "the help overlay",
        &["Keys", "Tab, Shift-Tab", "next / previous panel"],
    );
    demo.press(b"\x1b");
    demo.screen
        .wait_gone("the help overlay closed", "next / previous panel");

    // Esc goes to the fleet view; a second Esc stays there (the fleet's help opens after it,
    // so it was read and did not quit); Enter opens the selected VM again.
    demo.press(b"\x1b");
    demo.screen.wait_for(
        "the fleet view",
        &["Fleet all namespaces", "vm-demo", "NAMESPACE"],
    );
    demo.press(b"\x1b?");
    demo.screen.wait_for(
        "the fleet's help after Esc",
        &["Keys of the fleet view", "open the selected VM"],
    );
    demo.press(b"\x1b");
    demo.screen
        .wait_gone("the fleet's help closed", "Keys of the fleet view");

    // s cycles the sort key; / filters as typed (q is text there), Esc clears the filter.
    demo.press(b"s");
    demo.screen
        .wait_for("sorted by time in phase", &["then time in phase"]);
    demo.press(b"/nomatchq");
    demo.screen
        .wait_for("the filter typed", &["filter /nomatchq", "type to filter"]);
    demo.screen
        .wait_gone("every row filtered out", "default      vm-demo");
    demo.press(b"\x1b");
    demo.screen
        .wait_gone("the filter cleared", "filter /nomatchq");
    demo.press(b"/demo\r");
    demo.screen
        .wait_for("the filter kept", &["filter /demo", "vm-demo"]);
    demo.press(b"\r");
    demo.screen.wait_for(
        "the VM view again",
        &["VM default/vm-demo", "Phase timeline"],
    );

    // w: a what-if typed in the input line, evaluated against the cluster (reads only), shown
    // in the What-if panel; Esc closes it.
    demo.press(b"w");
    demo.screen.wait_for("the what-if input", &["what if: "]);
    demo.press(b"spec.runStrategy=Halted\r");
    demo.screen.wait_for(
        "the What-if panel",
        &[
            "What-if default/vm-demo",
            "DECISION",
            "would delete VMI vm-demo",
        ],
    );
    demo.press(b"\x1b");
    demo.screen
        .wait_gone("the What-if panel closed", "What-if default/vm-demo");

    // A change that renders another launcher pod (w, Ctrl-U clears the last text): once its
    // panel is closed, the Overhead check draws that pod as a second bar beside the running one's.
    demo.press(b"w\x15spec.template.spec.domain.devices.autoattachGraphicsDevice=false\r");
    demo.screen.wait_for(
        "the What-if panel of the graphics change",
        &["What-if default/vm-demo", "LAUNCHER POD"],
    );
    demo.press(b"\x1b");
    demo.screen.wait_for(
        "the what-if bar in the Overhead check",
        &["now     █", "what-if █", "what-if (Mi): overhead"],
    );

    // Esc again: back one more level, to the fleet; q quits from there: the terminal is
    // restored and the exit code is 0.
    demo.press(b"\x1b");
    demo.screen.wait_for(
        "the fleet view again",
        &["Fleet all namespaces", "NAMESPACE"],
    );
    demo.press(b"q");
    let (status, parser) = demo.wait_exit();
    assert_restored(status, &parser);
}

#[test]
fn demo_restores_the_terminal_on_sigterm() {
    let demo = Demo::start();
    demo.screen
        .wait_for("the VM view", &["VM default/vm-demo", "Leader"]);
    let pid = demo.child.process_id().expect("the child's pid");
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(killed.success());
    let (status, parser) = demo.wait_exit();
    assert_restored(status, &parser);
}

#[test]
fn demo_history_panel_then_s_slash_esc_q_in_the_vm_view_restore_the_terminal() {
    let mut demo = Demo::start();
    // The History panel fills in as the refreshes come: the Lease led by one holder.
    demo.screen.wait_for(
        "the History panel sampling the leader",
        &["History", "vm depth", "renew age", "━"],
    );
    // s and / belong to the fleet view: in the VM view they do nothing (the `?` after them
    // opens the VM view's help, so no filter input took it as text); Esc closes the help and
    // stays in the VM view.
    demo.press(b"s/?");
    demo.screen.wait_for(
        "the VM view's help after s and /",
        &["Keys of the VM view", "next / previous panel"],
    );
    demo.press(b"\x1b");
    demo.screen
        .wait_gone("the help closed", "Keys of the VM view");
    assert!(
        demo.screen.contents().contains("VM default/vm-demo"),
        "still the VM view:\n{}",
        demo.screen.contents()
    );
    // q quits from the VM view itself: the terminal is restored, exit code 0.
    demo.press(b"q");
    let (status, parser) = demo.wait_exit();
    assert_restored(status, &parser);
}
