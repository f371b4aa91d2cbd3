//! A sweep as `OUTPUT/sweep.json` holds it: what it searches ([`SweepRequest`]), what its
//! trials are judged by ([`Mode`]), each trial's figures ([`Trial`]) and the answer. It is saved
//! whole after every trial (written aside, then renamed), so an interrupted sweep continues from
//! its trials; a saved sweep of other words, bounds or processes is refused, not mixed in.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// What a sweep searches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRequest {
    /// The run's words (workload and overrides), as given.
    pub words: Vec<String>,
    pub config_dir: Option<PathBuf>,
    /// The fewest accelerators to try; `None`: the fewest the sweep can try (its unit).
    pub min: Option<u64>,
    /// The most accelerators to try.
    pub max: u64,
    /// The answer is known once the last passing and the first failing counts are this close.
    pub precision: u64,
    /// Every count tried is a multiple of this (a workload whose model parallelism needs 8 ranks).
    pub step: u64,
    /// Checkpoint sweeps: the share of the first trial's throughput per rank a trial must hold.
    pub hold: f64,
}

/// What a trial is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Training AU against `metric.au`.
    Training,
    /// Checkpoint saves' throughput per rank against the first trial's.
    Checkpointing,
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
    /// Checkpoint saves: GiB/s of all ranks (MLPerf's: bytes over the slowest rank's time),
    /// the mean over the saves; and per rank.
    pub checkpoint_gib_per_second: Option<f64>,
    pub per_rank_gib_per_second: Option<f64>,
    /// Why the trial is not a valid measurement of the storage (its verdict's reasons, each
    /// `code: message`); a trial with any is not judged.
    #[serde(alias = "warnings")]
    pub reasons: Vec<String>,
    pub output: PathBuf,
}

impl Trial {
    /// Whether the trial is a valid measurement of the storage.
    pub fn valid(&self) -> bool {
        self.reasons.is_empty()
    }

    /// Whether it counts as passing: valid, and its figure met the criterion.
    pub fn passes(&self) -> bool {
        self.passed && self.valid()
    }
}

/// The sweep as saved in `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    pub request: SweepRequest,
    /// The processes a trial's ranks are spread over, evenly (`mpirun -n P`; 1 without MPI).
    pub processes: u64,
    pub mode: Mode,
    pub au_threshold_percent: f64,
    /// The dataset was generated for the sweep (when its words ask for a generation).
    pub generated: bool,
    pub trials: Vec<Trial>,
    pub answer: Option<Answer>,
}

impl Sweep {
    /// Whether the saved trials are trials this sweep could have run: counts within its bounds
    /// and on its step, each once; figures finite and not negative; AU at most 100 % and cache
    /// shares at most 1; and, for a training sweep, no pass below the threshold. A forged or
    /// damaged trial would otherwise steer the search and its answer.
    fn check_trials(&self) -> std::result::Result<(), String> {
        if self.processes == 0 || self.request.step == 0 || self.request.max == 0 {
            return Err("'processes', 'request.step' and 'request.max' must be at least 1".into());
        }
        let mut seen = std::collections::BTreeSet::new();
        for (i, trial) in self.trials.iter().enumerate() {
            let n = trial.accelerators;
            let step = self.request.step.max(1);
            let within = n >= self.min() && n <= self.request.max && n % step == 0;
            if !within || !seen.insert(n) {
                return Err(format!(
                    "trial {i} has {n} accelerators: not a count this sweep tries ({}..={}, \
                     multiples of {step}, each once)",
                    self.min(),
                    self.request.max,
                ));
            }
            let figures = [
                ("au_percent", Some(trial.au_percent)),
                ("samples_per_second", Some(trial.samples_per_second)),
                ("mib_per_second", Some(trial.mib_per_second)),
                ("cache_share", trial.cache_share),
                ("checkpoint_gib_per_second", trial.checkpoint_gib_per_second),
                ("per_rank_gib_per_second", trial.per_rank_gib_per_second),
            ];
            for (name, value) in figures {
                if value.is_some_and(|v| !v.is_finite() || v < 0.0) {
                    return Err(format!("trial {i}: '{name}' must be a finite number ≥ 0"));
                }
            }
            if trial.au_percent > 100.0 + 1e-9 {
                return Err(format!("trial {i}: 'au_percent' must be at most 100"));
            }
            if trial.cache_share.is_some_and(|c| c > 1.0 + 1e-9) {
                return Err(format!("trial {i}: 'cache_share' must be at most 1"));
            }
            // A trial may fail above the threshold (stopped early), never pass below it.
            let below = trial.au_percent < self.au_threshold_percent;
            if self.mode == Mode::Training && trial.passed && below {
                return Err(format!(
                    "trial {i}: 'passed' is true for an AU of {} % below the threshold of {} %",
                    trial.au_percent, self.au_threshold_percent
                ));
            }
        }
        Ok(())
    }
}

/// The most accelerators that passed (valid, and above the criterion), and the fewest that
/// did not above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// `None`: even the fewest failed.
    pub most_passing: Option<u64>,
    /// `None`: even the most passed (the answer is at least `max`).
    pub fewest_failing: Option<u64>,
}

const SWEEP_FILE: &str = "sweep.json";

/// The saved sweep in `output`, if there is one; one of another request, or whose trials ran on
/// another number of processes, is refused.
pub(super) fn load(output: &Path, request: &SweepRequest, processes: u64) -> Result<Option<Sweep>> {
    let Some(saved) = saved(output)? else {
        return Ok(None);
    };
    let path = output.join(SWEEP_FILE);
    if saved.request != *request {
        return Err(Error::usage(format!(
            "{} holds a sweep of other words or bounds ({:?}, {}..{}, precision {}); continue it \
             with those, or choose another --output",
            path.display(),
            saved.request.words,
            saved.min(),
            saved.request.max,
            saved.request.precision
        )));
    }
    if saved.processes != processes {
        return Err(Error::usage(format!(
            "{} holds a sweep whose trials ran in {} process(es), and this one runs in {processes}: \
             a trial's figures depend on how its ranks are spread; continue it with mpirun -n {} \
             (or without mpirun for 1), or choose another --output",
            path.display(),
            saved.processes,
            saved.processes
        )));
    }
    crate::console::tell(format_args!(
        "continuing the sweep in {} from its {} trial(s)",
        output.display(),
        saved.trials.len()
    ));
    Ok(Some(saved))
}

/// The sweep saved in `output` (its `sweep.json`), if there is one.
pub fn saved(output: &Path) -> Result<Option<Sweep>> {
    let path = output.join(SWEEP_FILE);
    // A sweep of a few hundred trials is tens of KiB.
    let Some(text) = crate::folder::read_output_file(&path, 64 << 20)? else {
        return Ok(None);
    };
    let sweep: Sweep = serde_json::from_str(&text).map_err(|e| {
        Error::usage(format!(
            "{} is not a sweep dlio-rs saved ({e}); remove it or choose another --output",
            path.display()
        ))
    })?;
    sweep
        .check_trials()
        .map_err(|problem| crate::folder::bad_output_file(&path, &problem))?;
    Ok(Some(sweep))
}

/// Writes the sweep whole, then puts it in place: a sweep stopped while saving keeps the last
/// complete one.
pub(super) fn save(output: &Path, sweep: &Sweep) -> Result<()> {
    let text = serde_json::to_string_pretty(sweep).map_err(|e| Error::run(e.to_string()))?;
    crate::report::write_atomic(&output.join(SWEEP_FILE), (text + "\n").as_bytes())
}

/// A request of the default workload for up to 16 accelerators, for the tests of the sweep's
/// parts.
#[cfg(test)]
pub(super) fn request(step: u64) -> SweepRequest {
    SweepRequest {
        words: vec!["workload=default".into()],
        config_dir: None,
        min: None,
        max: 16,
        precision: 1,
        step,
        hold: 0.9,
    }
}
