//! SIGTERM and SIGINT for the long-running commands (`run-controller`, `cluster serve`,
//! `cluster nodes`), listened for from the moment the command starts.
//!
//! Until a process registers a handler, SIGTERM's default action ends it on the spot. A
//! `run-controller` told to stop while it is still starting would then die without releasing a
//! Lease it may already hold (the next leader waits out the lease duration), and `cluster serve`
//! would leave its admin token file behind. So each command calls [`ShutdownSignals::listen`]
//! before it starts anything and [`ShutdownSignals::recv`] once it is running: a signal that
//! arrives in between is kept, and the command stops as soon as it is up.

use super::CliError;
use tokio::signal::unix::{Signal, SignalKind, signal};

/// Registered SIGTERM and SIGINT handlers (tokio's; the signals stay caught while this lives).
pub(crate) struct ShutdownSignals {
    term: Signal,
    int: Signal,
}

impl ShutdownSignals {
    /// Register both handlers now. Must be called inside the tokio runtime.
    pub(crate) fn listen() -> Result<Self, CliError> {
        let term = signal(SignalKind::terminate())
            .map_err(|e| CliError::Failed(format!("cannot listen for SIGTERM: {e}")))?;
        let int = signal(SignalKind::interrupt())
            .map_err(|e| CliError::Failed(format!("cannot listen for SIGINT: {e}")))?;
        Ok(Self { term, int })
    }

    /// The first signal received since [`listen`](Self::listen) (at once if one already came),
    /// by name: `"SIGTERM"` or `"SIGINT"`.
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signal sent after `listen` and before anyone waits is kept, not lost and not fatal.
    /// (The process would be killed by the SIGTERM if the handler were not registered yet.)
    #[tokio::test]
    async fn a_signal_before_recv_is_kept() {
        let mut signals = ShutdownSignals::listen().expect("handlers register");
        // Our own pid, with the handler registered: tokio catches it.
        let status = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
        let got = tokio::time::timeout(std::time::Duration::from_secs(30), signals.recv())
            .await
            .expect("the SIGTERM sent before recv is delivered");
        assert_eq!(got, "SIGTERM");
    }
}
