//! A whole run, as `dlio-rs run` and `dlio_benchmark` perform it. One process runs it alone, or
//! each process of an MPI job runs its part (see [`crate::comm`]): process 0 leads (it writes the
//! run's shared files, finds the dataset's files for everyone, and prints), every process writes
//! its own ranks' files, and each step that can fail in one process and not another ends in an
//! agreement ([`crate::comm::agree`]), so all go on or all stop.
//!
//! `run_in` tells the story, one call per phase, each phase in a file of its own:
//! `setup.rs` (the configuration checked, and what the run reads and writes through) →
//! `outputs.rs` (the output folder claimed, the log begun) → `dataset.rs` (generated, or found) →
//! `ranks.rs` (this process's ranks train, or checkpoint) → `ceiling.rs` (the same ranks, one
//! short epoch with nothing read: the host's own AU ceiling) → `gather.rs` (every process's
//! records to process 0, which judges the run and writes the reports) → `dataset.rs` again
//! (deleted if not kept).

mod ceiling;
mod dataset;
mod gather;
mod held;
mod outputs;
mod ranks;
mod setup;

use std::path::PathBuf;
use std::time::Instant;

use crate::comm::{self, Comm, Hosts, Processes};
use crate::config::Source;
use crate::error::Result;
use crate::generate::Generated;
use crate::progress::Display;
use crate::results::Results;
use dataset::DataFolder;
use outputs::Outputs;
use setup::Setup;

pub(crate) use setup::check_steps;
pub use setup::RunOptions;

/// What a finished run leaves behind.
#[derive(Debug)]
pub struct Outcome {
    pub output_folder: PathBuf,
    pub generated: Option<Generated>,
    pub results: Option<Results>,
    /// report.json's content, in the process that wrote it (process 0) when the run trained or
    /// checkpointed.
    pub report: Option<serde_json::Value>,
    /// This process speaks for the run (process 0 of an MPI job): it printed, and it prints the
    /// command's document.
    pub speaks: bool,
    /// The signal the run stopped for, in every process (whichever received it).
    pub stopped_by: Option<i32>,
}

/// The run of `source` in the job this process was started in (alone, or one of `mpirun`'s).
pub fn run(source: &Source, options: &RunOptions) -> Result<Outcome> {
    run_among(&Processes::join("run")?, source, options)
}

/// The run of `source` by the processes of `processes`, each hosting `options.accelerators`
/// ranks; several runs may follow one another in one job (a sweep's trials).
pub fn run_among(processes: &Processes, source: &Source, options: &RunOptions) -> Result<Outcome> {
    let comm = processes.group(options.accelerators)?;
    let outcome = run_in(comm.as_ref(), source, options);
    comm::conclude(comm.as_ref(), outcome)
}

/// The run as one process of `comm` performs it: checked, then the output folder claimed, then
/// the rest, whose failure is recorded in that folder.
fn run_in(comm: &dyn Comm, source: &Source, options: &RunOptions) -> Result<Outcome> {
    // Bad input is refused by every process before anything is written.
    let mut setup = setup::set_up(comm, source, options)?;
    let hosts = setup::gather_hosts(comm, &setup.config)?;
    // The output folder is taken before anything can fail for want of data, so that the folder
    // of a failed run holds its log, never an earlier run's results.
    let outputs = outputs::claim(comm, &setup.config, source, setup.wait)?;
    let outcome = run_claimed(comm, source, options, &mut setup, &hosts, &outputs);
    if let Err(error) = &outcome {
        outputs.record_failure(error);
    }
    outcome
}

/// The run once its output folder is its own: the dataset generated or found, the ranks run,
/// their records reported, the dataset deleted if it is not kept.
fn run_claimed(
    comm: &dyn Comm,
    source: &Source,
    options: &RunOptions,
    setup: &mut Setup,
    hosts: &Hosts,
    outputs: &Outputs,
) -> Result<Outcome> {
    let display = Display::for_stderr(options.quiet || comm.process() != 0);
    let mut data = DataFolder::default();
    let generated = match setup.config.workflow.generate_data && setup.needs_data() {
        true => Some(data.generate(comm, setup, &outputs.log, display)?),
        false => None,
    };
    // Start-up is timed from the start of the process, or from the end of generation.
    let startup_origin = match generated {
        Some(_) => Instant::now(),
        None => crate::system::process_start(),
    };
    let outcome = |reported: Option<gather::Reported>, stopped_by| {
        let (results, report) = reported.map(|r| (r.results, r.report)).unzip();
        Outcome {
            output_folder: outputs.folder.clone(),
            generated,
            results,
            report,
            speaks: comm.process() == 0,
            stopped_by,
        }
    };
    if !setup.trains() && setup.checkpoints.is_none() {
        // DLIO writes no result files for a generate-only run.
        outputs.log.check()?;
        return Ok(outcome(None, None));
    }
    // After the generation, if any: the files it made are found as any others.
    let file_names = match setup.trains() && setup.needs_data() {
        true => data.find(comm, setup, source, display)?,
        false => Vec::new(),
    };
    let _checkpoint_folder = held::hold_checkpoint_folder(comm, setup)?;
    outputs.announce(setup, hosts, &file_names, comm.world() as u64, display);
    let done = ranks::run_ranks(comm, setup, hosts, &outputs.folder, display, startup_origin)?;
    let stopped_by = done.interrupted.map(|i| i.signal);
    let ceiling = ceiling::measure(comm, setup, stopped_by.is_some(), display)?;
    let shown = gather::Shown::of(options);
    let reported = gather::gather_and_report(
        comm,
        setup,
        hosts,
        outputs,
        (done, ceiling),
        file_names,
        (shown, options.human),
    )?;
    if !setup.config.dataset.keep_files && setup.needs_data() {
        dataset::delete_dataset(comm, setup)?;
    }
    outputs.log.check()?;
    Ok(outcome(reported, stopped_by))
}
