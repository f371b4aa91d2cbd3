//! The terminal, for everyone: lines to standard error ([`tell`]), results to standard output
//! ([`print_out`]), errors as the user reads them ([`print_error`]), and durations as a person
//! reads them ([`duration`]). Nothing here fails the
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

/// A duration given in microseconds, as a person reads it: 3 significant digits, in µs below
/// 1 ms, in ms below 1 s, else in s, the unit beside the number (`7.00 µs`, `241 ms`, `12.3 s`).
/// A latency is told at its scale, not as `241172` µs.
pub fn duration(us: f64) -> String {
    if !us.is_finite() || us <= 0.0 {
        return format!("{} µs", us.max(0.0));
    }
    // Rounded first, so that 999.7 µs is 1.00 ms, never 1000 µs.
    let rounded = significant(us, 3);
    let (value, unit) = if rounded < 1e3 {
        (rounded, "µs")
    } else if rounded < 1e6 {
        (rounded / 1e3, "ms")
    } else {
        (rounded / 1e6, "s")
    };
    let decimals = (2 - value.log10().floor() as i64).max(0) as usize;
    format!("{value:.decimals$} {unit}")
}

/// `value` (> 0) rounded to `digits` significant digits.
fn significant(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits - 1 - value.log10().floor() as i32);
    (value * scale).round() / scale
}

#[cfg(test)]
mod tests {
    use super::duration;

    #[test]
    fn durations_take_their_unit_and_three_significant_digits() {
        for (us, shown) in [
            (0.0, "0 µs"),
            (0.2, "0.200 µs"),
            (7.0, "7.00 µs"),
            (73.04, "73.0 µs"),
            (241.4, "241 µs"),
            (999.4, "999 µs"),
            (999.7, "1.00 ms"),
            (1234.0, "1.23 ms"),
            (241_172.0, "241 ms"),
            (999_600.0, "1.00 s"),
            (12_345_678.0, "12.3 s"),
            (4_000_000_000.0, "4000 s"),
        ] {
            assert_eq!(duration(us), shown, "{us} µs");
        }
    }
}
