//! End to end: the real binary's `demo` (embedded cluster, controller under its Lease, a VM
//! with runStrategy Always, the inspector) in a pseudo-terminal, its screen parsed by vt100.
//! Keys are typed like a user would (Tab, `?`, Esc, Enter in the fleet view, `q`); the test
//! waits for text on the screen (no fixed sleeps, a generous deadline), then checks the
//! terminal was restored (alternate screen left, cursor shown) and the exit code is 0.

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

#[test]
fn demo_in_a_pty_tab_help_fleet_enter_quit_restores_the_terminal() {
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
    cmd.env("NO_COLOR", "1");
    let mut child = pair.slave.spawn_command(cmd).expect("spawn the binary");
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader().expect("pty reader");
    let mut writer = pair.master.take_writer().expect("pty writer");
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
    let screen = Screen {
        parser: parser.clone(),
    };
    let mut press = |keys: &[u8]| {
        writer.write_all(keys).expect("type into the pty");
        writer.flush().expect("flush the pty");
    };

    // The VM view, every panel, and the VM started by the controller under its Lease.
    let first = screen.wait_for(
        "the VM view",
        &["VM default/vm-demo", "Leader", "Queues", "Events"],
    );
    assert!(
        parser.lock().unwrap().screen().alternate_screen(),
        "the UI draws on the alternate screen:\n{first}"
    );
    screen.wait_for(
        "the VM running under our controller",
        &["vmi Running", "virtctl-rs run-controller", "→ Running"],
    );

    // Tab moves the focus (thick border) from Leader to Queues.
    assert!(screen.contents().contains("┏ Leader"));
    press(b"\t");
    screen.wait_for("Queues focused", &["┏ Queues"]);

    // ? opens the help overlay, Esc closes it.
    press(b"?");
    screen.wait_for(
        "the help overlay",
        &["Keys", "Tab, Shift-Tab", "next / previous panel"],
    );
    press(b"\x1b");
    screen.wait_gone("the help overlay closed", "next / previous panel");

    // Esc goes to the fleet view, Enter opens the selected VM again.
    press(b"\x1b");
    screen.wait_for(
        "the fleet view",
        &["Fleet all namespaces", "vm-demo", "NAMESPACE"],
    );
    press(b"\r");
    screen.wait_for(
        "the VM view again",
        &["VM default/vm-demo", "Phase timeline"],
    );

    // q quits: the terminal is restored and the exit code is 0.
    press(b"q");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the binary") {
            break status;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the binary did not exit after q; the screen:\n{}",
            screen.contents()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(pair.master);
    let _ = reading.join();
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
