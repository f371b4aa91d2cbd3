//! Live progress on standard error: a line redrawn at most ten times a second while a terminal
//! watches, nothing when it does not; and one permanent line per finished epoch phase (unless quiet).

use std::io::{IsTerminal, Write};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::plan::Phase;
use crate::stats::{PhaseRecord, Rates};

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

/// A counter of finished items (files generated) with rate and ETA; shared by writer threads.
pub struct Counter {
    display: Display,
    label: String,
    total: u64,
    started: Instant,
    state: Mutex<(u64, u64, Redraw)>,
}

impl Counter {
    pub fn new(display: Display, label: &str, total: u64) -> Counter {
        Counter {
            display,
            label: label.to_string(),
            total,
            started: Instant::now(),
            state: Mutex::new((0, 0, Redraw { last: None })),
        }
    }

    /// One more item of `bytes` is done.
    pub fn add(&self, bytes: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.0 += 1;
        state.1 += bytes;
        if self.display.live && state.2.due() {
            let (done, bytes) = (state.0, state.1);
            drop(state);
            self.display.redraw(&self.summary(done, bytes, true));
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
        format!(
            "{} {} {done}/{} files  {rate:.0} files/s  {:.1} MiB/s  {secs:.1} s{eta}",
            self.label,
            bar(done, self.total),
            self.total,
            bytes as f64 / secs / 1048576.0
        )
    }

    /// Prints the final line; returns (files, bytes, seconds).
    pub fn finish(&self) -> (u64, u64, f64) {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.display.line(&self.summary(state.0, state.1, false));
        (state.0, state.1, self.started.elapsed().as_secs_f64())
    }
}

struct EpochState {
    epoch: u64,
    phase: Phase,
    steps: u64,
    redraw: Redraw,
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
            }),
        }
    }

    pub fn begin(&self, epoch: u64, phase: Phase, steps: u64) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *s = EpochState {
            epoch,
            phase,
            steps,
            redraw: Redraw { last: None },
        };
    }

    /// Rank 0 finished `step` steps; `samples` is the estimate for all ranks.
    pub fn step(&self, step: u64, samples: u64, elapsed: f64) {
        if !self.display.live {
            return;
        }
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.redraw.due() || step == s.steps {
            let text = format!(
                "epoch {}/{} {:<5} {} {step}/{} steps  {:.1} samples/s  {elapsed:.1} s",
                s.epoch,
                self.epochs,
                s.phase.as_str(),
                bar(step, s.steps),
                s.steps,
                samples as f64 / elapsed.max(1e-9)
            );
            drop(s);
            self.display.redraw(&text);
        }
    }

    /// The permanent line of a finished epoch phase, from rank 0's record: its AU, and its
    /// samples/s times the number of ranks as the estimate for all (the report has exact sums).
    pub fn phase_done(
        &self,
        epoch: u64,
        phase: Phase,
        rates: Rates,
        world: u64,
        record: &PhaseRecord,
    ) {
        self.display.line(&format!(
            "epoch {epoch}/{} {:<5} {} steps in {:.2} s  {:.1} samples/s  {:.1} MiB/s read  AU {:.2}%",
            self.epochs,
            phase.as_str(),
            record.steps(),
            record.wall(),
            rates.samples_per_second * world as f64,
            record.bytes_read as f64 * world as f64 / record.wall().max(1e-9) / 1048576.0,
            rates.au_percent,
        ));
    }
}
