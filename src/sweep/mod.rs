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
//! missing. Each trial is judged as a run is ([`crate::results::verdict`]): only a valid trial
//! can pass, so the answer is the most accelerators a valid measurement showed busy, and a sweep
//! with none says it has no valid answer, and why.
//!
//! This file is the driver (the trials in order, run by every process, judged by process 0);
//! `search.rs` holds which counts are tried, `record.rs` the sweep as `sweep.json` keeps it, and
//! `show.rs` the table, the figures and the page.

mod record;
mod search;
mod show;

use std::path::{Path, PathBuf};

pub use record::{saved, Answer, Mode, Sweep, SweepRequest, Trial};
pub use show::page;

use record::{load, save};
use search::{check_bounds, check_checkpoint_counts, next_count, trials_left, unit};
use show::tell_figures;

use crate::comm::{agree, broadcast_value, Comm, Processes};
use crate::config::overrides::Overrides;
use crate::config::{Config, Source};
use crate::error::{Error, Result};
use crate::results::validity::CACHE_WARNING_FRACTION;
use crate::run::{run_among, RunOptions};

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
    let processes = Processes::join("sweep")?;
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
        // Every process must search the same counts, or each would wait for trials the others
        // never run.
        agree(self.comm, one_request(self.comm, request))?;
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
            && crate::results::validity::cache_defeated_by(&config).is_none()
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
                None => match self.run_trial(n, &state, passing, failing)? {
                    Ran::Stopped(signal) => return stopped(state, signal),
                    Ran::Measured(trial) => {
                        state.trials.push(trial.clone());
                        self.save(&state)?;
                        trial
                    }
                },
            };
            // A trial that is not a valid measurement cannot show that the storage keeps its
            // accelerators busy: the search goes on below it.
            if trial.passes() {
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
                true => crate::report::write_atomic(&page, show::page(&state).as_bytes()),
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
        n: u64,
        state: &Sweep,
        passing: Option<u64>,
        failing: Option<u64>,
    ) -> Result<Ran> {
        let folder = self.output.join(format!("trial-{n}"));
        // The trial's folder is the sweep's to make: a link there would carry a run's results
        // into another folder.
        if std::fs::symlink_metadata(&folder).is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(Error::io(
                "cannot use the trial folder",
                &folder,
                crate::folder::refuse_link(std::io::Error::from_raw_os_error(libc::ELOOP)),
            ));
        }
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
            .then(|| judge(n, state, outcome.results, folder))
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
        // Every trial reads the same dataset.
        words.push("++workload.dataset.keep_files=True".into());
        let mut source = source_with(self.request, &words)?;
        source.overrides.set_run_folder(&folder.to_string_lossy());
        run_among(
            self.processes,
            &source,
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

/// Fails, in every process alike, when the processes of the job were given other sweeps (words,
/// bounds, precision, step or hold), naming what differs and where.
fn one_request(comm: &dyn Comm, request: &SweepRequest) -> Result<()> {
    if comm.processes() == 1 {
        return Ok(());
    }
    let all = crate::comm::all_gather_values(comm, request)?;
    let first = &all[0];
    let said: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, other)| *other != first)
        .map(|(process, other)| {
            let mut fields = Vec::new();
            if other.words != first.words {
                fields.push(format!(
                    "the words {:?} (process 0: {:?})",
                    other.words, first.words
                ));
            }
            if other.config_dir != first.config_dir {
                fields.push("--config-dir".to_string());
            }
            let bounds = |r: &SweepRequest| {
                let min = r.min.map_or("(default)".to_string(), |m| m.to_string());
                format!("--min-accelerators {min} --max-accelerators {}", r.max)
            };
            if (other.min, other.max) != (first.min, first.max) {
                fields.push(format!("{} (process 0: {})", bounds(other), bounds(first)));
            }
            if (other.precision, other.step, other.hold)
                != (first.precision, first.step, first.hold)
            {
                fields.push("--precision, --step or --hold".to_string());
            }
            format!("process {process}: {}", fields.join(", "))
        })
        .collect();
    match said.is_empty() {
        true => Ok(()),
        false => Err(Error::usage(format!(
            "the MPI processes of this sweep were given different sweeps — {}; start every \
             process with the same command line",
            said.join("; ")
        ))),
    }
}

/// How a trial ended.
enum Ran {
    Measured(Trial),
    /// A signal stopped it: nothing of it is kept.
    Stopped(i32),
}

/// The trial of `n` accelerators, from its run's results (in process 0).
fn judge(
    n: u64,
    state: &Sweep,
    results: Option<crate::results::Results>,
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
        crate::results::validity::cache_served_fraction(bytes_read, bytes_from_storage);
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
        reasons: results
            .verdict
            .reasons
            .iter()
            .map(|r| format!("{}: {}", r.code.name(), r.message))
            .collect(),
        output: folder,
    };
    Ok(trial)
}
