//! Test support: the log lines emitted on the current thread, as text.
//!
//! [`capture`] installs a `tracing` subscriber as the thread's default until the returned guard
//! drops. A `#[tokio::test]` runtime is single-threaded, so the tasks it spawns log into the
//! capture too.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tracing::subscriber::DefaultGuard;
use tracing_subscriber::fmt::MakeWriter;

/// The captured output (one formatted line per event, without colours).
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>);

impl Captured {
    /// Every captured line.
    pub(crate) fn lines(&self) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
        String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// The captured lines at `level` (`"WARN"`, `"ERROR"`...) that contain `text`.
    pub(crate) fn matching(&self, level: &str, text: &str) -> Vec<String> {
        self.lines()
            .into_iter()
            .filter(|l| l.split_whitespace().nth(1) == Some(level) && l.contains(text))
            .collect()
    }
}

/// A writer appending to a [`Captured`] buffer.
pub(crate) struct CapturedWriter(Arc<Mutex<Vec<u8>>>);

impl Write for CapturedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Captured {
    type Writer = CapturedWriter;

    fn make_writer(&'a self) -> Self::Writer {
        CapturedWriter(self.0.clone())
    }
}

/// Captures the INFO-and-above events of this thread until the guard drops.
pub(crate) fn capture() -> (Captured, DefaultGuard) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}
