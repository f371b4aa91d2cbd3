//! `dlio-rs sweep`: the most accelerators a storage keeps busy. Each trial is a run of the
//! workload with N accelerators (thread ranks of this process) in its own output folder; the
//! count is bisected between the bounds until the last passing and the first failing count are at
//! most `precision` apart. A trial passes when its mean training AU meets the workload's
//! threshold (`metric.au`); AU falls as accelerators are added once the storage is the
//! bottleneck, which is what makes bisection sound.
//!
//! Every trial is saved to `OUTPUT/sweep.json` as it ends, so an interrupted sweep continues
//! from its trials: the same words and bounds replay the same bisection and run only what is
//! missing. Each trial is checked for validity as a run is (cache share, MLPerf's dataset size
//! for its accelerator count) and said loudly when it falls short.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::config::overrides::Overrides;
use crate::config::Source;
use crate::error::{Error, Result};
use crate::report::validity::CACHE_WARNING_FRACTION;
use crate::run::{run, RunOptions};

/// What a sweep searches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepRequest {
    /// The run's words (workload and overrides), as given.
    pub words: Vec<String>,
    pub config_dir: Option<PathBuf>,
    /// The fewest and the most accelerators to try.
    pub min: u64,
    pub max: u64,
    /// The answer is known once the last passing and the first failing counts are this close.
    pub precision: u64,
}

/// One trial's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trial {
    pub accelerators: u64,
    pub au_percent: f64,
    pub passed: bool,
    pub samples_per_second: f64,
    /// Bytes read over the training phases' wall time, MiB/s (mean over epochs).
    pub mib_per_second: f64,
    pub bytes_read: u64,
    pub bytes_from_storage: Option<u64>,
    /// The share of the bytes read that the storage did not serve.
    pub cache_share: Option<f64>,
    /// Why the trial may not describe the storage (the run's warnings).
    pub warnings: Vec<String>,
    pub output: PathBuf,
}

/// The sweep as saved in `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    pub request: SweepRequest,
    pub au_threshold_percent: f64,
    /// The dataset was generated for the sweep (when its words ask for a generation).
    pub generated: bool,
    pub trials: Vec<Trial>,
    pub answer: Option<Answer>,
}

/// The most accelerators that passed, and the fewest that failed above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// `None`: even the fewest failed.
    pub most_passing: Option<u64>,
    /// `None`: even the most passed (the answer is at least `max`).
    pub fewest_failing: Option<u64>,
}

const SWEEP_FILE: &str = "sweep.json";

/// Runs (or continues) the sweep `request` in `output`; returns it with its answer, or `None`
/// with the signal if one stopped it (its trials so far are saved).
pub fn sweep(request: &SweepRequest, output: &Path, strict: bool) -> Result<(Sweep, Option<i32>)> {
    if request.min == 0 || request.min > request.max || request.precision == 0 {
        return Err(Error::usage(format!(
            "the bounds must satisfy 1 ≤ --min-accelerators ({}) ≤ --max-accelerators ({}), and \
             --precision ({}) must be at least 1",
            request.min, request.max, request.precision
        )));
    }
    if crate::comm::launch::mpi_launch().is_some() {
        return Err(Error::usage(
            "dlio-rs sweep runs its trials as thread ranks of one process, and is not supported \
             yet under mpirun; run it without mpirun",
        ));
    }
    let source = source_with(request, &[])?;
    let config = source.resolve(strict)?;
    config.check_supported()?;
    if !config.workflow.train {
        return Err(Error::usage(
            "dlio-rs sweep measures training (workload.workflow.train = True); this workload \
             does not train",
        ));
    }
    if crate::report::validity::cache_defeated_by(&config).is_none() {
        crate::report::terminal::tell(format_args!(
            "WARNING: nothing keeps the page cache out of the trials: each trial's cache share is \
             in the table, and a trial the cache served more than {:.0} % of is flagged; add \
             ++workload.reader.page_cache=evict_after_read (or reader.odirect=True)",
            CACHE_WARNING_FRACTION * 100.0
        ));
    }
    crate::report::folder::make_folder(output, "the sweep folder (--output)")?;
    let mut state = load(output, request)?.unwrap_or(Sweep {
        request: request.clone(),
        au_threshold_percent: config.au_threshold * 100.0,
        generated: false,
        trials: Vec::new(),
        answer: None,
    });
    if config.workflow.generate_data && !state.generated {
        if let Some(signal) = generate_once(request, output, strict)? {
            return Ok((state, Some(signal)));
        }
        state.generated = true;
        save(output, &state)?;
    }
    let (mut lo, mut hi) = (request.min, request.max);
    let mut passing: Option<u64> = None;
    let mut failing: Option<u64> = None;
    // Both ends first, then halves: each step is a trial, run or read from the saved ones.
    let mut next = Some(lo);
    while let Some(n) = next {
        let trial = match state.trials.iter().find(|t| t.accelerators == n) {
            Some(done) => done.clone(),
            None => match run_trial(request, output, n, strict, &state)? {
                Ran::Stopped(signal) => return Ok((state, Some(signal))),
                Ran::Measured(trial) => {
                    state.trials.push(trial.clone());
                    save(output, &state)?;
                    trial
                }
            },
        };
        if trial.passed {
            passing = Some(n);
            lo = n;
        } else {
            failing = Some(n);
            hi = n;
        }
        next = match (passing, failing) {
            (None, Some(_)) => None,
            (Some(p), None) if p == request.max => None,
            (Some(_), None) => Some(request.max),
            (Some(p), Some(f)) if f - p > request.precision => Some(lo + (hi - lo) / 2),
            _ => None,
        };
    }
    state.answer = Some(Answer {
        most_passing: passing,
        fewest_failing: failing,
    });
    save(output, &state)?;
    let page = output.join("report.html");
    std::fs::write(&page, crate::report::html::for_sweep(&state))
        .map_err(|e| Error::on_object("cannot write", page.display().to_string(), e))?;
    Ok((state, None))
}

/// The request's words with `extra` after them.
fn source_with(request: &SweepRequest, extra: &[String]) -> Result<Source> {
    let mut words = request.words.clone();
    words.extend_from_slice(extra);
    Ok(Source {
        overrides: Overrides::parse(&words)?,
        config_dir: request.config_dir.clone(),
    })
}

/// Generates the dataset once, before the trials, when the words ask for a generation; the signal
/// that stopped it, if one did.
fn generate_once(request: &SweepRequest, output: &Path, strict: bool) -> Result<Option<i32>> {
    crate::report::terminal::tell(format_args!("generating the dataset once, for every trial"));
    let source = source_with(
        request,
        &[
            "++workload.workflow.generate_data=True".into(),
            "++workload.workflow.train=False".into(),
            "++workload.workflow.checkpoint=False".into(),
            format!("++hydra.run.dir={}", output.join("generation").display()),
        ],
    )?;
    let outcome = run(
        &source,
        &RunOptions {
            accelerators: request.max as usize,
            quiet: false,
            strict,
            verify: false,
            trace: false,
        },
    )?;
    Ok(outcome.stopped_by)
}

/// How a trial ended.
enum Ran {
    Measured(Trial),
    /// A signal stopped it: nothing of it is kept.
    Stopped(i32),
}

/// Runs the trial of `n` accelerators in `OUTPUT/trial-N`.
fn run_trial(
    request: &SweepRequest,
    output: &Path,
    n: u64,
    strict: bool,
    state: &Sweep,
) -> Result<Ran> {
    let folder = output.join(format!("trial-{n}"));
    crate::report::terminal::tell(format_args!(
        "trial {}: {n} accelerator(s)…",
        state.trials.len() + 1
    ));
    let source = source_with(
        request,
        &[
            "++workload.workflow.generate_data=False".into(),
            format!("++hydra.run.dir={}", folder.display()),
        ],
    )?;
    let outcome = run(
        &source,
        &RunOptions {
            accelerators: n as usize,
            quiet: true,
            strict,
            verify: false,
            trace: false,
        },
    )?;
    if let Some(signal) = outcome.stopped_by {
        return Ok(Ran::Stopped(signal));
    }
    let results = outcome
        .results
        .ok_or_else(|| Error::run(format!("the trial of {n} accelerator(s) trained nothing")))?;
    let epochs = &results.epochs;
    let bytes_read: u64 = epochs.iter().map(|e| e.train.bytes_read).sum();
    let bytes_from_storage: Option<u64> = epochs
        .iter()
        .map(|e| e.train.bytes_from_storage)
        .sum::<Option<u64>>();
    let cache_share =
        crate::report::validity::cache_served_fraction(bytes_read, bytes_from_storage);
    let mib_per_second = epochs
        .iter()
        .map(|e| e.train.measured_mib_per_second())
        .sum::<f64>()
        / epochs.len().max(1) as f64;
    let trial = Trial {
        accelerators: n,
        au_percent: results.train.au_percent.mean,
        passed: results.train.meets_expectation,
        samples_per_second: results.train.samples_per_second.mean,
        mib_per_second,
        bytes_read,
        bytes_from_storage,
        cache_share,
        warnings: results.warnings.clone(),
        output: folder,
    };
    crate::report::terminal::tell(format_args!(
        "trial {}: {n} accelerator(s): AU {:.2} % ({} {:.0} %), {:.1} samples/s, {:.1} MiB/s{}",
        state.trials.len() + 1,
        trial.au_percent,
        if trial.passed { "meets" } else { "below" },
        state.au_threshold_percent,
        trial.samples_per_second,
        trial.mib_per_second,
        if trial.warnings.is_empty() {
            ""
        } else {
            " — NOT A VALID MEASUREMENT, see its warnings"
        }
    ));
    for warning in &trial.warnings {
        crate::report::terminal::tell(format_args!("WARNING (trial of {n}): {warning}"));
    }
    Ok(Ran::Measured(trial))
}

/// The saved sweep in `output`, if there is one; one of another request is refused.
fn load(output: &Path, request: &SweepRequest) -> Result<Option<Sweep>> {
    let path = output.join(SWEEP_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(Error::on_object(
                "cannot read",
                path.display().to_string(),
                e,
            ))
        }
    };
    let saved: Sweep = serde_json::from_str(&text).map_err(|e| {
        Error::usage(format!(
            "{} is not a sweep dlio-rs saved ({e}); remove it or choose another --output",
            path.display()
        ))
    })?;
    if saved.request != *request {
        return Err(Error::usage(format!(
            "{} holds a sweep of other words or bounds ({:?}, {}..{}, precision {}); continue it \
             with those, or choose another --output",
            path.display(),
            saved.request.words,
            saved.request.min,
            saved.request.max,
            saved.request.precision
        )));
    }
    crate::report::terminal::tell(format_args!(
        "continuing the sweep in {} from its {} trial(s)",
        output.display(),
        saved.trials.len()
    ));
    Ok(Some(saved))
}

/// Writes the sweep whole, then puts it in place: a sweep stopped while saving keeps the last
/// complete one.
fn save(output: &Path, sweep: &Sweep) -> Result<()> {
    let path = output.join(SWEEP_FILE);
    let partial = output.join(format!(".{SWEEP_FILE}.partial"));
    let text = serde_json::to_string_pretty(sweep).map_err(|e| Error::run(e.to_string()))?;
    std::fs::write(&partial, text + "\n")
        .and_then(|()| std::fs::rename(&partial, &path))
        .map_err(|e| Error::on_object("cannot write", path.display().to_string(), e))
}

impl Sweep {
    /// The table of trials, in accelerator order, and the answer with its margin.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n{:>12} {:>8} {:>6} {:>11} {:>9} {:>16} {:>8}",
            "accelerators", "AU %", "pass", "samples/s", "MiB/s", "from storage", "cache %"
        );
        let mut trials: Vec<&Trial> = self.trials.iter().collect();
        trials.sort_by_key(|t| t.accelerators);
        for t in trials {
            let _ = writeln!(
                out,
                "{:>12} {:>8.2} {:>6} {:>11.1} {:>9.1} {:>16} {:>8}{}",
                t.accelerators,
                t.au_percent,
                if t.passed { "yes" } else { "no" },
                t.samples_per_second,
                t.mib_per_second,
                t.bytes_from_storage
                    .map_or("unknown".to_string(), |b| b.to_string()),
                t.cache_share
                    .map_or("-".to_string(), |c| format!("{:.1}", c * 100.0)),
                if t.warnings.is_empty() {
                    ""
                } else {
                    "  (not valid: see warnings)"
                }
            );
        }
        let threshold = self.au_threshold_percent;
        let request = &self.request;
        let answer = match self.answer {
            Some(Answer {
                most_passing: None, ..
            }) => format!(
                "Even {} accelerator(s) fall below {threshold:.0} % AU: this storage keeps fewer \
                 busy than the sweep's lower bound",
                request.min
            ),
            Some(Answer {
                most_passing: Some(p),
                fewest_failing: None,
            }) => format!(
                "This storage keeps at least {p} accelerator(s) above {threshold:.0} % AU: the \
                 sweep's upper bound passed; raise --max-accelerators to find the limit"
            ),
            Some(Answer {
                most_passing: Some(p),
                fewest_failing: Some(f),
            }) => format!(
                "This storage keeps {p} accelerator(s) above {threshold:.0} % AU ({f} fall \
                 below{}): answer {p}, margin {}",
                if f - p > 1 {
                    format!("; counts from {} to {} were not tried", p + 1, f - 1)
                } else {
                    String::new()
                },
                f - p - 1
            ),
            None => "The sweep stopped before its answer; run it again to continue".to_string(),
        };
        let _ = writeln!(out, "\n{answer}");
        out
    }
}
