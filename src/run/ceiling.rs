//! After the training: the host's own AU ceiling. The run's ranks (the same threads of the same
//! processes, reader threads, batch, prefetch and compute time, through the same loader,
//! hand-offs and barriers) train one short epoch with `reader.data_loader: synthetic`, which
//! reads nothing: the AU they reach is the most any storage could show on these hosts. The
//! verdict names it when it is below the threshold ([`crate::results::verdict::Ceiling`]).

use super::ranks::run_local_ranks;
use super::setup::Setup;
use crate::comm::{self, Comm, Reduce};
use crate::config::{Config, DataLoader};
use crate::error::Result;
use crate::progress::Display;
use crate::results::verdict::Ceiling;
use crate::stats::{across_ranks, phase_rates, Clock, MetricWindow};
use crate::trainer::{self, RunContext};

/// About this long is spent measuring, whatever the compute time (and never more steps than an
/// epoch of the run has): long enough for hundreds of steps at the compute times where the
/// harness can matter, short beside any run worth measuring.
const SECONDS: f64 = 2.0;

/// The fewest steps measured in the window when the run's epochs have that many.
const MIN_STEPS: u64 = 10;

/// The ceiling of `setup`'s training on these hosts, or why it is not measured. Every process
/// measures together; a signal during the measurement stops the run, as it would training.
///
/// It runs after the training, so that the run's own start-up and first batch are not delayed
/// by it, and not at all when a signal stopped the training.
pub(super) fn measure(
    comm: &dyn Comm,
    setup: &Setup,
    interrupted: bool,
    display: Display,
) -> Result<Ceiling> {
    let config = &setup.config;
    let compute = config.train.computation_time.mean();
    let skipped = if !setup.trains() {
        Some("the run does not train")
    } else if interrupted {
        Some("the run was interrupted")
    } else if !setup.format.reads_storage() {
        Some("the run itself reads no storage: its AU is the ceiling")
    } else if compute <= 0.0 {
        Some("no compute time: AU is 0 by definition")
    } else {
        None
    };
    if let Some(why) = skipped {
        return Ok(Ceiling::Skipped(why.to_string()));
    }
    let synthetic = synthetic_epoch(config, setup.steps_per_epoch(comm.world() as u64));
    let steps = synthetic.train.total_training_steps as u64;
    display.line(&format!(
        "measuring this host's AU ceiling: {steps} step(s) of {} accelerator(s) with no storage \
         I/O…",
        comm.world()
    ));
    let format = crate::format::Synthetic;
    let clock = Clock::start();
    let ctx = RunContext {
        config: &synthetic,
        dataset: &setup.dataset,
        format: &format,
        storage: setup.storage.as_ref(),
        comm,
        clock: &clock,
        run_entropy: 0,
        progress: None,
        trace_in: None,
        page_cache_drop: None,
        checkpointing: None,
        timeseries: None,
    };
    let quiet = Display {
        live: false,
        quiet: true,
    };
    let ranks = run_local_ranks(&ctx, quiet, trainer::train_rank)?;
    if let Some(signal) = comm.stopped() {
        return Err(comm::interrupted_together(comm, signal));
    }
    let window = MetricWindow::from(&synthetic);
    let per_rank: Vec<_> = ranks
        .iter()
        .filter_map(|r| r.epochs.first())
        .map(|e| {
            phase_rates(&e.train, |b| {
                window.train_block(b, synthetic.reader.batch_size)
            })
        })
        .collect();
    // The mean over all ranks of all processes: each process's sum, summed.
    let mut sum = [across_ranks(&per_rank).au_percent * per_rank.len() as f64];
    comm.all_reduce(&mut sum, Reduce::Sum)?;
    let au_percent = sum[0] / comm.world() as f64;
    display.line(&format!("host AU ceiling: {au_percent:.2}%"));
    Ok(Ceiling::Measured { au_percent, steps })
}

/// The run's configuration for one epoch of the synthetic loader: at most the run's steps per
/// epoch (`run_steps`) and about [`SECONDS`] of compute, no evaluation, checkpoints or trace.
fn synthetic_epoch(config: &Config, run_steps: u64) -> Config {
    let excluded = config.output.exclude_start_steps + config.output.exclude_end_steps;
    let budget = (SECONDS / config.train.computation_time.mean()).ceil() as u64;
    let steps = budget.max(excluded + MIN_STEPS).min(run_steps).max(1);
    let mut synthetic = config.clone();
    synthetic.reader.data_loader = DataLoader::Synthetic;
    synthetic.train.epochs = 1;
    synthetic.train.total_training_steps = steps as i64;
    synthetic.workflow.evaluation = false;
    synthetic.workflow.checkpoint = false;
    synthetic.output.trace = false;
    // Nothing is read, so there is nothing to keep out of the page cache.
    synthetic.reader.page_cache = crate::config::PageCache::Keep;
    synthetic.reader.odirect = false;
    synthetic
}
