//! Stopping on request. SIGINT (Ctrl-C) and SIGTERM (`kill`, `mpirun` passing a Ctrl-C on, a
//! batch system's time limit) ask the process to stop; everything that may wait long looks here.
//!
//! The first signal is only noted. Readers (per sample), sleeps (every [`LONGEST_WAIT`]),
//! checkpoint and dataset writers (per block) see it and stop; the ranks then agree at their next
//! barrier that the run stops, so that every rank of every process stops at the same barrier
//! (a rank that stopped alone would leave the others waiting for it). The run writes the results
//! of the epochs every rank completed, marked interrupted, and exits with 128 + the signal (130,
//! 143), as a shell reports a process the signal ended. A second signal ends the process at once
//! with that code; the first one delivered again within [`REPEAT_WINDOW`] is the same request,
//! not a second one: `timeout` sends its signal to the process and then to the process's group,
//! and a terminal's Ctrl-C reaches a launcher and the processes it started alike.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a sleep goes without looking for a signal: the most it delays a stop.
pub const LONGEST_WAIT: Duration = Duration::from_millis(50);

/// The signal that asked the process to stop, 0 for none.
static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// When the first signal arrived, in nanoseconds of the monotonic clock; 0 before.
static FIRST_AT: AtomicU64 = AtomicU64::new(0);

/// How long after the first signal the same signal is taken for the same request delivered
/// twice. Both deliveries of one `kill` burst come within microseconds, but the process may be
/// scheduled late between handling them on a loaded host; a person who means a second request
/// presses again after a pause.
pub const REPEAT_WINDOW: Duration = Duration::from_secs(1);

const SIGNALS: [i32; 2] = [libc::SIGINT, libc::SIGTERM];

/// Starts noting SIGINT and SIGTERM for this process (instead of dying at once). SIGXFSZ is
/// ignored too: a file that outgrows the size limit (`ulimit -f`) then fails its write with
/// EFBIG, an error that names the file, instead of killing the process without a word.
pub fn watch() -> io::Result<()> {
    for signal in SIGNALS {
        // SAFETY: the action only reads the monotonic clock, exchanges atomic integers and may
        // call `_exit`; all are async-signal-safe.
        unsafe { signal_hook::low_level::register(signal, move || on_signal(signal)) }?;
    }
    // SAFETY: ignoring a signal installs no handler; nothing runs on its delivery.
    if unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn on_signal(signal: i32) {
    let now = monotonic_nanos();
    // When the first came is noted before the signal itself, so that a second delivery, handled
    // by another thread at the same time, sees it.
    let _ = FIRST_AT.compare_exchange(0, now, Ordering::SeqCst, Ordering::SeqCst);
    match RECEIVED.compare_exchange(0, signal, Ordering::SeqCst, Ordering::SeqCst) {
        Ok(_) => {}
        Err(first)
            if first == signal
                && now.saturating_sub(FIRST_AT.load(Ordering::SeqCst))
                    < REPEAT_WINDOW.as_nanos() as u64 => {}
        Err(_) => signal_hook::low_level::exit(exit_code(signal)),
    }
}

/// The monotonic clock in nanoseconds (never 0), read in a way a signal handler may:
/// `clock_gettime` is async-signal-safe, `Instant::now` is not documented to be.
fn monotonic_nanos() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes only into the timespec we pass, valid for the call.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
        .max(1)
}

/// The signal that asked this process to stop, if one did.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::Relaxed) {
        0 => None,
        signal => Some(signal),
    }
}

/// A signal asked the process to stop: what [`check`] fails with. It becomes the crate's
/// [`Error::Interrupted`](crate::error::Error::Interrupted) where it meets other errors; this
/// module stays below the error kinds so that everything may look here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interrupted {
    pub signal: i32,
}

/// Fails with [`Interrupted`] once a signal has asked the process to stop.
pub fn check() -> Result<(), Interrupted> {
    match received() {
        None => Ok(()),
        Some(signal) => Err(Interrupted { signal }),
    }
}

/// Sleeps until `deadline` or until a signal arrives, whichever is first. Each nap aims at the
/// deadline, so only the last one's lateness is added.
pub fn sleep_until(deadline: Instant) {
    while received().is_none() {
        let Some(left) = deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
        else {
            return;
        };
        std::thread::sleep(left.min(LONGEST_WAIT));
    }
}

/// The exit code of a process a signal ended: what a shell reports for it.
pub fn exit_code(signal: i32) -> i32 {
    128 + signal
}

/// `SIGINT`, `SIGTERM`, or the number.
pub fn name(signal: i32) -> String {
    signal_hook::low_level::signal_name(signal)
        .map_or_else(|| format!("signal {signal}"), str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_is_named_and_gives_the_shell_s_exit_code() {
        assert_eq!(name(libc::SIGINT), "SIGINT");
        assert_eq!(name(libc::SIGTERM), "SIGTERM");
        assert_eq!(exit_code(libc::SIGINT), 130);
        assert_eq!(exit_code(libc::SIGTERM), 143);
        let error = crate::error::Error::from(Interrupted {
            signal: libc::SIGTERM,
        });
        assert_eq!(error.exit_code(), 143);
        assert_eq!(error.to_string(), "interrupted by SIGTERM");
    }
}
