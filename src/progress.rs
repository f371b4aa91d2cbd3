//! Live progress on standard error: a line redrawn at most ten times a second while a terminal
//! watches, nothing when it does not; and one permanent line per finished epoch phase (unless quiet).

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::plan::Phase;
use crate::stats::Rates;

const REDRAW: Duration = Duration::from_millis(100);

/// Where progress goes: live redraws only on a terminal, permanent lines unless quiet.
#[derive(Debug, Clone, Copy)]
pub struct Display {
    pub live: bool,
    pub quiet: bool,
}

impl Display {
    pub fn for_stderr(quiet: bool) -> Display {
        Display {
            live: !quiet && std::io::stderr().is_terminal(),
            quiet,
        }
    }

    pub fn line(&self, text: &str) {
        if !self.quiet {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{}{text}", if self.live { "\r\x1b[2K" } else { "" });
        }
    }

    fn redraw(&self, text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[2K{text}");
        let _ = err.flush();
    }
}

fn bar(done: u64, total: u64) -> String {
    const WIDTH: u64 = 24;
    let filled = (done.min(total) * WIDTH)
        .checked_div(total)
        .unwrap_or(WIDTH);
    format!(
        "[{}{}]",
        "#".repeat(filled as usize),
        "-".repeat((WIDTH - filled) as usize)
    )
}

struct Redraw {
    last: Option<Instant>,
}

impl Redraw {
    fn due(&mut self) -> bool {
        let due = self.last.is_none_or(|t| t.elapsed() >= REDRAW);
        if due {
            self.last = Some(Instant::now());
        }
        due
    }
}

/// A counter of finished items (files generated, names checked) with rate and ETA; shared by
/// worker threads, which only add to atomics: the line is redrawn by whichever thread finds it
/// due and the lock free. A total of 0 means unknown (a listing).
pub struct Counter {
    display: Display,
    label: String,
    total: u64,
    started: Instant,
    done: AtomicU64,
    bytes: AtomicU64,
    redraw: Mutex<Redraw>,
}

impl Counter {
    pub fn new(display: Display, label: &str, total: u64) -> Counter {
        Counter {
            display,
            label: label.to_string(),
            total,
            started: Instant::now(),
            done: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            redraw: Mutex::new(Redraw { last: None }),
        }
    }

    /// One more item of `bytes` is done.
    pub fn add(&self, bytes: u64) {
        self.add_many(1, bytes);
    }

    /// `items` more items, of `bytes` in all, are done.
    pub fn add_many(&self, items: u64, bytes: u64) {
        let done = self.done.fetch_add(items, Ordering::Relaxed) + items;
        let bytes = self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        if self.display.live {
            if let Ok(mut redraw) = self.redraw.try_lock() {
                if redraw.due() {
                    self.display.redraw(&self.summary(done, bytes, true));
                }
            }
        }
    }

    fn summary(&self, done: u64, bytes: u64, with_eta: bool) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(1e-9);
        let rate = done as f64 / secs;
        let eta = if with_eta && rate > 0.0 && done < self.total {
            format!("  ETA {:.0} s", (self.total - done) as f64 / rate)
        } else {
            String::new()
        };
        let progress = if self.total > 0 {
            format!("{} {done}/{}", bar(done, self.total), self.total)
        } else {
            done.to_string()
        };
        let throughput = if bytes > 0 {
            format!("  {:.1} MiB/s", bytes as f64 / secs / 1048576.0)
        } else {
            String::new()
        };
        format!(
            "{} {progress} files  {rate:.0} files/s{throughput}  {secs:.1} s{eta}",
            self.label,
        )
    }

    /// Prints the final line; returns (files, bytes, seconds).
    pub fn finish(&self) -> (u64, u64, f64) {
        let (done, bytes) = (
            self.done.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        );
        self.display.line(&self.summary(done, bytes, false));
        (done, bytes, self.started.elapsed().as_secs_f64())
    }

    /// Clears the live line, if one was drawn, without leaving a permanent one: for steps that
    /// are usually too quick to mention.
    pub fn finish_quietly(&self) {
        let drawn = self.redraw.lock().is_ok_and(|r| r.last.is_some());
        if self.display.live && drawn {
            self.display.redraw("");
        }
    }
}

/// A finished phase, all ranks together: their rates combined as the report combines them
/// (AU the mean over ranks, samples/s the sum), the bytes they read, and the phase's span from
/// the first rank's start to the last rank's end.
pub struct PhaseLine {
    pub rates: Rates,
    pub bytes_read: u64,
    pub wall: f64,
}

struct EpochState {
    epoch: u64,
    phase: Phase,
    steps: u64,
    redraw: Redraw,
    /// The bar drawn last, redrawn with each interval's figures.
    bar: String,
    /// The last interval's figures of the time series, shown after the bar.
    interval: String,
}

/// Progress of the epochs of a run, fed by rank 0's trainer.
pub struct EpochProgress {
    display: Display,
    epochs: u64,
    state: Mutex<EpochState>,
}

impl EpochProgress {
    pub fn new(display: Display, epochs: u64) -> EpochProgress {
        EpochProgress {
            display,
            epochs,
            state: Mutex::new(EpochState {
                epoch: 0,
                phase: Phase::Train,
                steps: 0,
                redraw: Redraw { last: None },
                bar: String::new(),
                interval: String::new(),
            }),
        }
    }

    pub fn begin(&self, epoch: u64, phase: Phase, steps: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let interval = std::mem::take(&mut s.interval);
        *s = EpochState {
            epoch,
            phase,
            steps,
            redraw: Redraw { last: None },
            bar: String::new(),
            interval,
        };
    }

    /// Rank 0 finished `step` steps; `samples` is the estimate for all ranks.
    pub fn step(&self, step: u64, samples: u64, elapsed: f64) {
        if !self.display.live {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.redraw.due() || step == s.steps {
            s.bar = format!(
                "epoch {}/{} {:<5} {} {step}/{} steps  {:.1} samples/s  {elapsed:.1} s",
                s.epoch,
                self.epochs,
                s.phase.as_str(),
                bar(step, s.steps),
                s.steps,
                samples as f64 / elapsed.max(1e-9)
            );
            let text = format!("{}{}", s.bar, s.interval);
            drop(s);
            self.display.redraw(&text);
        }
    }

    /// The time series' last interval (this process's ranks): shown after the bar, and redrawn
    /// at once, so that a stall shows while no step completes.
    pub fn interval(&self, mib_per_second: f64, au_percent: f64, reads_in_flight: f64) {
        if !self.display.live {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.interval = format!(
            "  | now {mib_per_second:.1} MiB/s  AU {au_percent:.1}%  {reads_in_flight:.1} reads in flight"
        );
        if !s.bar.is_empty() {
            let text = format!("{}{}", s.bar, s.interval);
            drop(s);
            self.display.redraw(&text);
        }
    }

    /// The permanent line of a finished epoch phase, with the figures of all ranks as the
    /// end-of-run table shows them.
    pub fn phase_done(&self, epoch: u64, phase: Phase, steps: u64, line: PhaseLine) {
        // The table's MiB/s read: bytes over the phase's span, 0 for an empty span.
        let mib_per_second = if line.wall > 0.0 {
            line.bytes_read as f64 / line.wall / 1048576.0
        } else {
            0.0
        };
        self.display.line(&format!(
            "epoch {epoch}/{} {:<5} {steps} steps in {:.2} s  {:.1} samples/s  {:.1} MiB/s read  AU {:.2}%",
            self.epochs,
            phase.as_str(),
            line.wall,
            line.rates.samples_per_second,
            mib_per_second,
            line.rates.au_percent,
        ));
    }
}
