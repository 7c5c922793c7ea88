//! Writing to stdout the way command-line tools do: a closed pipe (`| head`) ends the process
//! quietly with exit code 0 instead of `println!`'s panic ("failed printing to stdout: Broken
//! pipe"). Every subcommand prints through [`out`] / [`outln`] (the `say!` macro).

use std::io::Write;

/// Exit code when stdout was closed by the reader: success, like `seq 1000000 | head -1`.
pub(crate) const BROKEN_PIPE_EXIT: i32 = 0;

/// Write `text` to stdout and flush. On a broken pipe the process exits with
/// [`BROKEN_PIPE_EXIT`] at once: nobody reads what follows. Other write errors are reported on
/// stderr once and the output is dropped (the work itself goes on).
pub(crate) fn out(text: &str) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(text.as_bytes())
        .and_then(|_| stdout.flush())
    {
        on_error(e);
    }
}

/// [`out`] with a newline.
pub(crate) fn outln(text: &str) {
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    out(&line);
}

fn on_error(e: std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(BROKEN_PIPE_EXIT);
    }
    static REPORTED: std::sync::Once = std::sync::Once::new();
    REPORTED.call_once(|| eprintln!("warning: writing to stdout: {e}"));
}

/// `println!` that does not panic on a closed pipe (see [`outln`]).
#[macro_export]
#[doc(hidden)]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::cli::output::outln(&format!($($arg)*))
    };
}

pub(crate) use crate::api::quantity::human_bytes;

/// A memory quantity as written in a pod (`4680843265`, `512Mi`, `1G`) in [`human_bytes`] form;
/// text that does not parse is shown unchanged.
pub(crate) fn human_memory(quantity: &str) -> String {
    match crate::api::quantity::ParsedQuantity::parse(quantity) {
        Ok(q) => human_bytes(q.value()),
        Err(_) => quantity.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_like_kubectl() {
        assert_eq!(human_bytes(4_680_843_265), "4.36Gi");
        assert_eq!(human_bytes(4464 << 20), "4464Mi");
        assert_eq!(human_bytes(4 << 30), "4Gi");
        assert_eq!(human_bytes(524 << 20), "524Mi");
        assert_eq!(human_bytes(1536 << 20), "1536Mi");
        assert_eq!(human_bytes(1000), "1000");
        assert_eq!(human_bytes(0), "0");
        assert_eq!(human_bytes(2048), "2Ki");
        assert_eq!(human_bytes(405_760 << 10), "396.25Mi", "not 405760Ki");
        assert_eq!(human_bytes(1_500_000), "1.43Mi");
        assert_eq!(human_memory("4680843265"), "4.36Gi");
        assert_eq!(human_memory("524Mi"), "524Mi");
        assert_eq!(human_memory("1Gi"), "1Gi");
        assert_eq!(human_memory("1G"), "953.67Mi");
        assert_eq!(human_memory("not-a-quantity"), "not-a-quantity");
    }
}
