//! `dlio-rs sweep`: the most accelerators a storage keeps busy. Each trial is a run of the
//! workload with N accelerators in its own output folder: thread ranks of this process, or under
//! `mpirun -n P` N/P thread ranks in each of the P processes, which run every trial together
//! ([`crate::comm::Processes`] keeps MPI initialized across the trials). The count (a multiple
//! of `step`, and of P) is bisected between the bounds until the last passing and the
//! first failing count are at most `precision` apart. For a training workload a trial passes when
//! its mean training AU meets the workload's threshold (`metric.au`); for a checkpoint-only
//! workload, when its checkpoint saves' throughput per rank holds at least `hold` of the first
//! trial's (the fewest ranks: the single-rank figure when the sweep starts at 1). Both fall as
//! ranks are added once the storage is the bottleneck, which is what makes bisection sound.
//!
//! Every trial is saved to `OUTPUT/sweep.json` as it ends, so an interrupted sweep continues
//! from its trials: the same words and bounds replay the same bisection and run only what is
//! missing. Each trial is checked for validity as a run is (cache share, MLPerf's dataset size
//! for its accelerator count) and said loudly when it falls short.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::comm::{agree, broadcast_value, Comm, Processes};
use crate::config::overrides::Overrides;
use crate::config::{Config, Source};
use crate::error::{Error, Result};
use crate::report::validity::CACHE_WARNING_FRACTION;
use crate::run::{run_among, RunOptions};

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
    /// Why the trial may not describe the storage (the run's warnings).
    pub warnings: Vec<String>,
    /// Training files MLPerf Storage's rule asks for at this accelerator count on this host's
    /// memory (`dlio-rs datasize`), where the dataset has fewer: said loudly, not disqualifying
    /// (a storage the cache cannot serve, or a quick look, may use less).
    #[serde(default)]
    pub files_for_rule: Option<u64>,
    pub output: PathBuf,
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

/// The most accelerators that passed, and the fewest that failed above it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// `None`: even the fewest failed.
    pub most_passing: Option<u64>,
    /// `None`: even the most passed (the answer is at least `max`).
    pub fewest_failing: Option<u64>,
}

const SWEEP_FILE: &str = "sweep.json";

/// How a sweep ended, in each process of its job.
pub struct Swept {
    pub sweep: Sweep,
    /// The signal that stopped it, if one did (its trials so far are saved).
    pub stopped: Option<i32>,
    /// This process speaks for the sweep (process 0 of an MPI job): it prints the table.
    pub speaks: bool,
}

/// Runs (or continues) the sweep `request` in `output`, in the job this process was started in:
/// alone, each trial's ranks this process's threads; under `mpirun -n P`, each trial's ranks
/// spread evenly over the P processes, which run every trial together.
pub fn sweep(request: &SweepRequest, output: &Path, strict: bool) -> Result<Swept> {
    let processes = Processes::join()?;
    // The sweep's own meetings between its trials' runs (process collectives only).
    let comm = processes.group(1)?;
    let sweeper = Sweeper {
        processes: &processes,
        comm: comm.as_ref(),
        speaks: comm.process() == 0,
        request,
        output,
        strict,
    };
    let outcome = sweeper.sweep();
    crate::comm::conclude(comm.as_ref(), outcome)
}

/// A sweep as one process of its job runs it. Every process runs the same trials in the same
/// order (each trial is a run of all of them); process 0 reads and writes the sweep's files,
/// judges each trial from its results, and tells the others, so all take the same next step.
struct Sweeper<'a> {
    processes: &'a Processes,
    comm: &'a dyn Comm,
    /// Process 0: it prints, and keeps `sweep.json` and `report.html`.
    speaks: bool,
    request: &'a SweepRequest,
    output: &'a Path,
    strict: bool,
}

impl Sweeper<'_> {
    fn sweep(&self) -> Result<Swept> {
        let request = self.request;
        let processes = self.processes.count() as u64;
        let unit = unit(request, processes);
        let min = request.min.unwrap_or(unit);
        agree(self.comm, check_bounds(request, min, unit, processes))?;
        let (config, mode) = agree(self.comm, resolve(request, self.strict))?;
        agree(
            self.comm,
            check_checkpoint_counts(&config, request, min, unit),
        )?;
        // The dataset must feed the most accelerators: said before any trial, not at the last.
        if mode == Mode::Training {
            let enough = crate::run::check_steps(&config, request.max)
                .map_err(|e| Error::usage(format!("--max-accelerators ({}): {e}", request.max)));
            agree(self.comm, enough)?;
        }
        if self.speaks
            && mode == Mode::Training
            && crate::report::validity::cache_defeated_by(&config).is_none()
        {
            crate::console::tell(format_args!(
                "WARNING: nothing keeps the page cache out of the trials: each trial's cache share \
                 is in the table, and a trial the cache served more than {:.0} % of is flagged; \
                 add ++workload.reader.page_cache=evict_after_read (or reader.odirect=True)",
                CACHE_WARNING_FRACTION * 100.0
            ));
        }
        if self.speaks && !config.dataset.keep_files {
            crate::console::tell(format_args!(
                "note: the dataset is kept for every trial (workload.dataset.keep_files = False \
                 would delete it after the first)"
            ));
        }
        let loaded = agree(
            self.comm,
            self.speaks
                .then(|| {
                    crate::folder::make_folder(self.output, "the sweep folder (--output)")?;
                    load(self.output, request, processes)
                })
                .transpose(),
        )?;
        let mut state = broadcast_value(self.comm, loaded)?.unwrap_or(Sweep {
            request: request.clone(),
            processes,
            mode,
            au_threshold_percent: config.au_threshold * 100.0,
            generated: false,
            trials: Vec::new(),
            answer: None,
        });
        let stopped = |state: Sweep, signal| {
            Ok(Swept {
                sweep: state,
                stopped: Some(signal),
                speaks: self.speaks,
            })
        };
        if mode == Mode::Training && config.workflow.generate_data && !state.generated {
            if let Some(signal) = self.generate_once(request.max / processes)? {
                return stopped(state, signal);
            }
            state.generated = true;
            self.save(&state)?;
        }
        // The most that passed and the fewest that failed so far.
        let mut passing: Option<u64> = None;
        let mut failing: Option<u64> = None;
        // Both ends first, then halves: each step is a trial, run or read from the saved ones.
        let mut next = next_count(request, unit, None, None);
        while let Some(n) = next {
            let trial = match state.trials.iter().find(|t| t.accelerators == n) {
                Some(done) => done.clone(),
                None => match self.run_trial(&config, n, &state, passing, failing)? {
                    Ran::Stopped(signal) => return stopped(state, signal),
                    Ran::Measured(trial) => {
                        state.trials.push(trial.clone());
                        self.save(&state)?;
                        trial
                    }
                },
            };
            if trial.passed {
                passing = Some(n);
            } else {
                failing = Some(n);
            }
            next = next_count(request, unit, passing, failing);
        }
        state.answer = Some(Answer {
            most_passing: passing,
            fewest_failing: failing,
        });
        self.save(&state)?;
        let page = self.output.join("report.html");
        agree(
            self.comm,
            match self.speaks {
                true => std::fs::write(&page, crate::report::html::for_sweep(&state))
                    .map_err(|e| Error::on_object("cannot write", page.display().to_string(), e)),
                false => Ok(()),
            },
        )?;
        Ok(Swept {
            sweep: state,
            stopped: None,
            speaks: self.speaks,
        })
    }

    /// Generates the dataset once, before the trials, when the words ask for a generation (with
    /// the most ranks the sweep tries); the signal that stopped it, if one did.
    fn generate_once(&self, ranks_per_process: u64) -> Result<Option<i32>> {
        self.tell(format_args!("generating the dataset once, for every trial"));
        let outcome = self.run(
            &self.output.join("generation"),
            &[
                "++workload.workflow.generate_data=True",
                "++workload.workflow.train=False",
                "++workload.workflow.checkpoint=False",
            ],
            ranks_per_process,
        )?;
        Ok(outcome.stopped_by)
    }

    /// Runs the trial of `n` accelerators in `OUTPUT/trial-N`, every process its share of the
    /// ranks; process 0 judges it and every process learns the verdict.
    fn run_trial(
        &self,
        config: &Config,
        n: u64,
        state: &Sweep,
        passing: Option<u64>,
        failing: Option<u64>,
    ) -> Result<Ran> {
        let folder = self.output.join(format!("trial-{n}"));
        let spread = match state.processes {
            1 => String::new(),
            p => format!(" ({} in each of {p} processes)", n / p),
        };
        let unit = unit(self.request, state.processes);
        self.tell(format_args!(
            "trial {}: {n} accelerator(s){spread}… (at most {} trials in all)",
            state.trials.len() + 1,
            state.trials.len() as u64 + trials_left(self.request, unit, passing, failing, n)
        ));
        let ran = self.run(
            &folder,
            &["++workload.workflow.generate_data=False"],
            n / state.processes,
        );
        let outcome = match ran {
            Ok(outcome) => outcome,
            // A signal that stopped the trial before it completed anything stops the sweep; any
            // other failure ends it. A run's failures that return are agreed (the others end the
            // job), so every process is here: process 0, which holds the interruption (the
            // others its exit code), tells them which.
            Err(error) => {
                let signal = match &error {
                    Error::Interrupted { signal } => Some(*signal),
                    _ => None,
                };
                return match broadcast_value(self.comm, Some(signal))? {
                    Some(signal) => Ok(Ran::Stopped(signal)),
                    None => Err(error),
                };
            }
        };
        if let Some(signal) = outcome.stopped_by {
            return Ok(Ran::Stopped(signal));
        }
        // Only process 0 has the run's results.
        let judged = self
            .speaks
            .then(|| judge(config, n, state, outcome.results, folder))
            .transpose();
        let trial = broadcast_value(self.comm, agree(self.comm, judged)?)?;
        if self.speaks {
            tell_figures(&trial, state);
        }
        Ok(Ran::Measured(trial))
    }

    /// Saves the sweep (process 0), all processes going on together.
    fn save(&self, state: &Sweep) -> Result<()> {
        let saved = match self.speaks {
            true => save(self.output, state),
            false => Ok(()),
        };
        agree(self.comm, saved)
    }

    /// Says `line` on the terminal, once for the job.
    fn tell(&self, line: std::fmt::Arguments) {
        if self.speaks {
            crate::console::tell(line);
        }
    }

    /// A run of the sweep's words with `extra` after them, with `ranks_per_process` ranks in
    /// each process, writing into `folder` (Hydra's files and the outputs, even where the
    /// workload names its own output folder).
    fn run(
        &self,
        folder: &Path,
        extra: &[&str],
        ranks_per_process: u64,
    ) -> Result<crate::run::Outcome> {
        let mut words: Vec<String> = extra.iter().map(|w| w.to_string()).collect();
        words.push(format!("++hydra.run.dir={}", folder.display()));
        words.push(format!("++workload.output.folder={}", folder.display()));
        // Every trial reads the same dataset.
        words.push("++workload.dataset.keep_files=True".into());
        run_among(
            self.processes,
            &source_with(self.request, &words)?,
            &RunOptions {
                accelerators: ranks_per_process as usize,
                // Each epoch's progress shows; the sweep prints one table of all its trials.
                table: false,
                strict: self.strict,
                ..RunOptions::default()
            },
        )
    }
}

/// The bounds must be counts the sweep can try: multiples of its unit, in order.
fn check_bounds(request: &SweepRequest, min: u64, unit: u64, processes: u64) -> Result<()> {
    let on_unit = |n: u64| n % unit == 0;
    if min == 0
        || request.step == 0
        || min > request.max
        || request.precision == 0
        || !on_unit(min)
        || !on_unit(request.max)
        || !(request.hold > 0.0 && request.hold <= 1.0)
    {
        let unit_is = match processes {
            1 => format!("--step ({})", request.step),
            p => format!(
                "{unit} (of --step ({}) and of the {p} MPI processes, which host a trial's ranks \
                 evenly)",
                request.step
            ),
        };
        return Err(Error::usage(format!(
            "the bounds must satisfy 1 ≤ --min-accelerators ({min}) ≤ --max-accelerators ({}), \
             both multiples of {unit_is}; --precision ({}) must be at least 1 and --hold ({}) a \
             share in (0, 1]",
            request.max, request.precision, request.hold
        )));
    }
    Ok(())
}

/// The next count to try, given the most that passed and the fewest that failed so far: both
/// ends first, then halves (on the unit), until they are `precision` (or a unit) apart.
fn next_count(
    request: &SweepRequest,
    unit: u64,
    passing: Option<u64>,
    failing: Option<u64>,
) -> Option<u64> {
    match (passing, failing) {
        (None, None) => Some(request.min.unwrap_or(unit)),
        (None, Some(_)) => None,
        (Some(p), None) if p == request.max => None,
        (Some(_), None) => Some(request.max),
        (Some(p), Some(f)) if f - p > request.precision && f - p > unit => {
            Some(p + (f - p) / 2 / unit * unit)
        }
        _ => None,
    }
}

/// The most trials still to run, `n` (the next) included, however they turn out: the sweep's
/// progress.
fn trials_left(
    request: &SweepRequest,
    unit: u64,
    passing: Option<u64>,
    failing: Option<u64>,
    n: u64,
) -> u64 {
    // Halvings of a gap between a pass and a failure; the larger part is the longer.
    let halvings = |mut gap: u64| {
        let mut trials = 0;
        while gap > request.precision && gap > unit {
            let half = gap / 2 / unit * unit;
            if half == 0 {
                break;
            }
            gap -= half;
            trials += 1;
        }
        trials
    };
    1 + match (passing, failing) {
        // The lower bound; if it passes, the upper, then the halvings between.
        (None, _) if n < request.max => 1 + halvings(request.max - n),
        (None, _) => 0,
        (Some(p), None) => halvings(n - p),
        (Some(p), Some(f)) => halvings(n - p).max(halvings(f - n)),
    }
}

/// A workload that checkpoints needs counts its checkpoint can be laid out on: whole model
/// replicas (tensor × pipeline ranks each) in the default mode, so every count the sweep may try
/// must be a multiple of a replica; and the bounds pass the layout's other checks (a subset's
/// size). Said before any trial, not at a midpoint.
fn check_checkpoint_counts(
    config: &Config,
    request: &SweepRequest,
    min: u64,
    unit: u64,
) -> Result<()> {
    if !config.workflow.checkpoint {
        return Ok(());
    }
    let parallelism = &config.model.parallelism;
    let replica = parallelism
        .tensor
        .saturating_mul(parallelism.pipeline)
        .max(1);
    if config.checkpoint.mode == crate::config::CheckpointMode::Default && unit % replica != 0 {
        return Err(Error::usage(format!(
            "this workload's checkpoints need whole model replicas of \
             workload.model.parallelism.tensor × pipeline = {} × {} = {replica} ranks, and the \
             sweep would try counts that are not multiples of {replica}: add --step {} (bounds \
             on it too)",
            parallelism.tensor,
            parallelism.pipeline,
            least_common_multiple(request.step.max(1), replica)
        )));
    }
    for n in [min, request.max] {
        crate::checkpoint::Geometry::new(config, n)
            .map_err(|e| Error::usage(format!("a trial of {n} accelerator(s): {e}")))?;
    }
    Ok(())
}

/// Every count the sweep tries is a multiple of this: of `--step` and of the processes, which
/// host a trial's ranks evenly.
fn unit(request: &SweepRequest, processes: u64) -> u64 {
    least_common_multiple(request.step.max(1), processes)
}

fn least_common_multiple(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

/// The sweep's configuration, and what its trials are judged by.
fn resolve(request: &SweepRequest, strict: bool) -> Result<(Config, Mode)> {
    let config = source_with(request, &[])?.resolve(strict)?;
    config.check_supported()?;
    let mode =
        match (config.workflow.train, config.workflow.checkpoint) {
            (true, _) => Mode::Training,
            (false, true) => Mode::Checkpointing,
            (false, false) => return Err(Error::usage(
                "dlio-rs sweep measures training (workload.workflow.train = True) or checkpoints \
                 (workload.workflow.checkpoint = True); this workload does neither",
            )),
        };
    Ok((config, mode))
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

/// How a trial ended.
enum Ran {
    Measured(Trial),
    /// A signal stopped it: nothing of it is kept.
    Stopped(i32),
}

/// The trial of `n` accelerators, from its run's results (in process 0).
fn judge(
    config: &Config,
    n: u64,
    state: &Sweep,
    results: Option<crate::report::Results>,
    folder: PathBuf,
) -> Result<Trial> {
    let results = results
        .ok_or_else(|| Error::run(format!("the trial of {n} accelerator(s) measured nothing")))?;
    let saves: Vec<f64> = results
        .checkpoints
        .iter()
        .filter(|c| c.op == crate::stats::CheckpointOp::Save)
        .map(|c| c.gib_per_second())
        .collect();
    let checkpoint_gib_per_second =
        (!saves.is_empty()).then(|| saves.iter().sum::<f64>() / saves.len() as f64);
    let per_rank_gib_per_second = checkpoint_gib_per_second.map(|g| g / n as f64);
    if state.mode == Mode::Checkpointing && per_rank_gib_per_second.is_none() {
        return Err(Error::usage(format!(
            "the trial of {n} rank(s) saved no checkpoint: a checkpoint sweep needs \
             workload.checkpoint.num_checkpoints_write ≥ 1"
        )));
    }
    // The first trial is the fewest ranks': the reference of a checkpoint sweep.
    let reference = state
        .trials
        .iter()
        .find(|t| t.accelerators == state.min())
        .and_then(|t| t.per_rank_gib_per_second);
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
        passed: match (state.mode, per_rank_gib_per_second, reference) {
            (Mode::Training, ..) => results.train.meets_expectation,
            (Mode::Checkpointing, Some(mine), Some(first)) => mine >= state.request.hold * first,
            // The first trial is its own reference.
            (Mode::Checkpointing, ..) => true,
        },
        samples_per_second: results.train.samples_per_second.mean,
        mib_per_second,
        bytes_read,
        bytes_from_storage,
        cache_share,
        checkpoint_gib_per_second,
        per_rank_gib_per_second,
        warnings: results.warnings.clone(),
        files_for_rule: short_of_rule(config, n, results.client_memory_bytes),
        output: folder,
    };
    Ok(trial)
}

/// A trial's figures and warnings, on the terminal.
fn tell_figures(trial: &Trial, state: &Sweep) {
    let n = trial.accelerators;
    let figures = match state.mode {
        Mode::Training => format!(
            "AU {:.2} % ({} {:.0} %), {:.1} samples/s, {:.1} MiB/s",
            trial.au_percent,
            if trial.passed { "meets" } else { "below" },
            state.au_threshold_percent,
            trial.samples_per_second,
            trial.mib_per_second
        ),
        Mode::Checkpointing => format!(
            "saves {:.3} GiB/s, {:.3} GiB/s per rank ({})",
            trial.checkpoint_gib_per_second.unwrap_or(0.0),
            trial.per_rank_gib_per_second.unwrap_or(0.0),
            if trial.passed {
                "holds"
            } else {
                "falls below the hold"
            }
        ),
    };
    crate::console::tell(format_args!(
        "trial {}: {n} accelerator(s): {figures}{}",
        state.trials.len() + 1,
        if trial.warnings.is_empty() {
            ""
        } else {
            " — NOT A VALID MEASUREMENT, see its warnings"
        }
    ));
    for warning in &trial.warnings {
        crate::console::tell(format_args!("WARNING (trial of {n}): {warning}"));
    }
    if let Some(files) = trial.files_for_rule {
        crate::console::tell(format_args!(
            "WARNING (trial of {n}): MLPerf Storage's rule asks for {files} training files for \
             {n} accelerator(s) on the memory of this run's hosts (dlio-rs datasize); the dataset has fewer"
        ));
    }
}

/// The files the dataset-size rule asks for with `n` accelerators on `memory_bytes` of client
/// memory, where the sweep's dataset has fewer (the trials differ only in their output folder).
fn short_of_rule(config: &Config, n: u64, memory_bytes: u64) -> Option<u64> {
    let cluster = crate::datasize::Cluster {
        max_accelerators: n,
        host_memory_gib: memory_bytes >> 30,
        client_hosts: 1,
    };
    let needed = crate::datasize::Datasize::compute(config, &cluster).files;
    (config.dataset.num_files_train < needed).then_some(needed)
}

/// The saved sweep in `output`, if there is one; one of another request, or whose trials ran on
/// another number of processes, is refused.
fn load(output: &Path, request: &SweepRequest, processes: u64) -> Result<Option<Sweep>> {
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
    serde_json::from_str(&text).map(Some).map_err(|e| {
        Error::usage(format!(
            "{} is not a sweep dlio-rs saved ({e}); remove it or choose another --output",
            path.display()
        ))
    })
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
    /// The fewest accelerators tried: the first trial.
    pub fn min(&self) -> u64 {
        self.request
            .min
            .unwrap_or_else(|| unit(&self.request, self.processes))
    }

    /// Why the counts between a passing and a failing trial `gap` apart were not tried.
    fn why_untried(&self, gap: u64) -> String {
        match unit(&self.request, self.processes) {
            unit if gap == unit => format!(" (the sweep tries multiples of {unit} only)"),
            _ => String::new(),
        }
    }

    /// The table of trials, in accelerator order, and the answer with its margin.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut trials: Vec<&Trial> = self.trials.iter().collect();
        trials.sort_by_key(|t| t.accelerators);
        let flag = |t: &Trial| {
            let mut flags = String::new();
            if !t.warnings.is_empty() {
                flags.push_str("  (not valid: see warnings)");
            }
            if let Some(files) = t.files_for_rule {
                let _ = write!(flags, "  (MLPerf's rule: {files} files)");
            }
            flags
        };
        match self.mode {
            Mode::Training => {
                let _ = writeln!(
                    out,
                    "\n{:>12} {:>8} {:>6} {:>11} {:>9} {:>16} {:>8}",
                    "accelerators", "AU %", "pass", "samples/s", "MiB/s", "from storage", "cache %"
                );
                for t in &trials {
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
                        flag(t)
                    );
                }
            }
            Mode::Checkpointing => {
                let _ = writeln!(
                    out,
                    "\n{:>12} {:>12} {:>16} {:>6}",
                    "ranks", "save GiB/s", "GiB/s per rank", "pass"
                );
                for t in &trials {
                    let _ = writeln!(
                        out,
                        "{:>12} {:>12.3} {:>16.3} {:>6}{}",
                        t.accelerators,
                        t.checkpoint_gib_per_second.unwrap_or(0.0),
                        t.per_rank_gib_per_second.unwrap_or(0.0),
                        if t.passed { "yes" } else { "no" },
                        flag(t)
                    );
                }
            }
        }
        let request = &self.request;
        let criterion = match self.mode {
            Mode::Training => format!("above {:.0} % AU", self.au_threshold_percent),
            Mode::Checkpointing => format!(
                "at {:.0} % or more of the save throughput per rank of {} rank(s)",
                request.hold * 100.0,
                self.min()
            ),
        };
        let answer = match self.answer {
            Some(Answer {
                most_passing: None, ..
            }) => format!(
                "Even {} accelerator(s) are not {criterion}: this storage keeps fewer busy than \
                 the sweep's lower bound",
                self.min()
            ),
            Some(Answer {
                most_passing: Some(p),
                fewest_failing: None,
            }) => format!(
                "This storage keeps at least {p} accelerator(s) {criterion}: the sweep's upper \
                 bound passed; raise --max-accelerators to find the limit"
            ),
            Some(Answer {
                most_passing: Some(p),
                fewest_failing: Some(f),
            }) => format!(
                "This storage keeps {p} accelerator(s) {criterion} ({f} are not{}): answer {p}, \
                 margin {}",
                match f - p {
                    1 => String::new(),
                    2 => format!("; {} was not tried{}", p + 1, self.why_untried(f - p)),
                    _ => format!(
                        "; counts from {} to {} were not tried{}",
                        p + 1,
                        f - 1,
                        self.why_untried(f - p)
                    ),
                },
                f - p - 1
            ),
            None => "The sweep stopped before its answer; run it again to continue".to_string(),
        };
        let _ = writeln!(out, "\n{answer}");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(step: u64) -> SweepRequest {
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

    #[test]
    fn the_unit_is_a_multiple_of_the_step_and_of_the_processes() {
        assert_eq!(least_common_multiple(1, 1), 1);
        assert_eq!(least_common_multiple(1, 3), 3);
        assert_eq!(least_common_multiple(8, 2), 8);
        assert_eq!(least_common_multiple(4, 6), 12);
        // Bounds on the unit pass; off it, the error names the processes' share.
        assert_eq!(check_bounds(&request(1), 2, 2, 2), Ok(()));
        let Err(Error::Usage(message)) = check_bounds(&request(1), 3, 2, 2) else {
            panic!("3 accelerators in 2 processes accepted");
        };
        assert!(message.contains("--min-accelerators (3)"), "{message}");
        assert!(
            message.contains("of --step (1) and of the 2 MPI processes"),
            "{message}"
        );
        let off_step = SweepRequest {
            max: 6,
            ..request(4)
        };
        let Err(Error::Usage(message)) = check_bounds(&off_step, 4, 4, 1) else {
            panic!("a maximum off the step accepted");
        };
        assert!(message.contains("multiples of --step (4)"), "{message}");
        assert!(check_bounds(&request(0), 1, 1, 1).is_err());
    }

    /// For every answer a storage could have (the most accelerators that pass), the bisection
    /// finds it, and the trials it runs never exceed what its progress promised at any step; the
    /// first promise is met by some answer.
    #[test]
    fn the_bisection_finds_every_answer_within_the_trials_it_announces() {
        for (min, max, step, processes, precision) in [
            (None, 12, 1, 1, 1),
            (None, 16, 1, 2, 1),
            (Some(3), 100, 1, 1, 1),
            (None, 64, 8, 1, 1),
            (None, 1000, 1, 1, 10),
            (Some(6), 96, 3, 2, 1),
        ] {
            let request = SweepRequest {
                min,
                max,
                step,
                precision,
                ..request(step)
            };
            let unit = unit(&request, processes);
            let lowest = request.min.unwrap_or(unit);
            let mut longest = 0;
            let mut first_promise = None;
            for answer in lowest - 1..=max {
                let (mut passing, mut failing) = (None, None);
                let mut trials = 0;
                let mut next = next_count(&request, unit, None, None);
                while let Some(n) = next {
                    assert_eq!(n % unit, 0, "{n} is off the unit {unit}");
                    let promised = trials + trials_left(&request, unit, passing, failing, n);
                    first_promise.get_or_insert(promised);
                    trials += 1;
                    if n <= answer {
                        passing = Some(n);
                    } else {
                        failing = Some(n);
                    }
                    next = next_count(&request, unit, passing, failing);
                    assert!(trials <= promised, "{request:?}, answer {answer}");
                }
                longest = longest.max(trials);
                // The answer lies between the last pass and the first failure, within precision.
                match (passing, failing) {
                    (Some(p), Some(f)) => {
                        assert!(p <= answer && answer < f, "{request:?}, answer {answer}");
                        assert!(f - p <= precision.max(unit), "{request:?}, answer {answer}");
                    }
                    (Some(p), None) => assert_eq!(p, max),
                    (None, Some(f)) => assert!(f == lowest && answer < lowest),
                    (None, None) => unreachable!(),
                }
            }
            assert_eq!(first_promise, Some(longest), "{request:?}");
        }
    }

    #[test]
    fn the_answer_says_why_counts_between_were_not_tried() {
        let answer = |unit: u64, passing: u64, failing: u64| {
            let sweep = Sweep {
                request: request(1),
                processes: unit,
                mode: Mode::Training,
                au_threshold_percent: 90.0,
                generated: false,
                trials: Vec::new(),
                answer: Some(Answer {
                    most_passing: Some(passing),
                    fewest_failing: Some(failing),
                }),
            };
            sweep.render().lines().last().unwrap().to_string()
        };
        assert_eq!(
            answer(1, 5, 6),
            "This storage keeps 5 accelerator(s) above 90 % AU (6 are not): answer 5, margin 0"
        );
        assert_eq!(
            answer(2, 10, 12),
            "This storage keeps 10 accelerator(s) above 90 % AU (12 are not; 11 was not tried \
             (the sweep tries multiples of 2 only)): answer 10, margin 1"
        );
        assert_eq!(
            answer(1, 4, 8),
            "This storage keeps 4 accelerator(s) above 90 % AU (8 are not; counts from 5 to 7 \
             were not tried): answer 4, margin 3"
        );
    }
}
