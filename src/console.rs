//! The terminal, for everyone: lines to standard error ([`tell`]), results to standard output
//! ([`print_out`]), and errors as the user reads them ([`print_error`]). Nothing here fails the
//! run for a terminal that went away: a lost line on standard error is lost, a reader of
//! standard output that left (`| head`) ends the output quietly, and any other failure of
//! standard output is remembered ([`stdout_failed`]) so the command exits 1 once its results
//! are saved.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::error::{Error, Result};

/// Writes a line to standard error. One that cannot be written (a closed or full standard
/// error) is lost: the run goes on, its results are in its files and its exit code says how it
/// ended (`eprintln!` would panic instead).
pub fn tell(line: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// Set once standard output failed a write: the command then exits 1, even when its results
/// are saved in files.
static STDOUT_FAILED: AtomicBool = AtomicBool::new(false);

/// Whether a write to standard output failed.
pub fn stdout_failed() -> bool {
    STDOUT_FAILED.load(Ordering::Relaxed)
}

/// Writes `text` to standard output. A reader that went away (`| head`) ends the output quietly,
/// as it ends any Unix filter; any other failure (`> /dev/full`) is an error naming it.
pub fn print_out(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    let written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
    match written {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            STDOUT_FAILED.store(true, Ordering::Relaxed);
            Err(Error::on_object("cannot write to", "standard output", e))
        }
        _ => Ok(()),
    }
}

/// Tells the user of `error`, on standard error (nothing for an error already reported), and
/// returns the exit code it gives.
pub fn print_error(error: &Error) -> i32 {
    if !matches!(error, Error::Reported { .. }) {
        tell(format_args!("error: {error}"));
    }
    error.exit_code()
}
