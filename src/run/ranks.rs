//! The fourth phase: this process's ranks, each on a thread of its own, train (or only
//! checkpoint) on one clock that every process shares; then what every rank of every process
//! completed is kept, and when the last rank had its first batch is found.

use std::path::Path;
use std::time::{Instant, SystemTime};

use super::setup::Setup;
use crate::comm::{self, broadcast_value, Comm, Hosts, Reduce};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::progress::{Display, EpochProgress};
use crate::results::Interruption;
use crate::stats::{Clock, RankRecord};
use crate::timeseries::{self, Counters, Exporter, Sampler, Sources};
use crate::trainer::{self, RunContext};

/// What this process's ranks did, on the clock all processes share.
pub(super) struct RanksDone {
    /// The records of this process's ranks, in rank order: of what every rank of the run
    /// completed, when a signal stopped it.
    pub ranks: Vec<RankRecord>,
    pub clock: Clock,
    /// The entropy of `random` shuffles, so an audit can replan the run.
    pub run_entropy: u64,
    pub end: SystemTime,
    /// Set when a signal stopped the run.
    pub interrupted: Option<Interruption>,
    /// Seconds from `startup_origin` until the last rank of any process had its first batch.
    pub first_batch_seconds: Option<f64>,
}

/// Runs this process's ranks: the training, or a checkpoint-only run's saves and loads.
/// `startup_origin` is when start-up began (the process's start, or the end of generation).
pub(super) fn run_ranks(
    comm: &dyn Comm,
    setup: &Setup,
    hosts: &Hosts,
    output_folder: &Path,
    display: Display,
    startup_origin: Instant,
) -> Result<RanksDone> {
    // Drawn once so every rank plans the same `random` order; saved so an audit can replan it.
    let run_entropy = broadcast_value(comm, Some(crate::plan::draw_run_entropy()))?;
    // Every process starts its clock as it leaves this meeting, and takes process 0's wall time;
    // a run told to stop before it starts stops here, all processes together.
    comm::check_interrupt(comm)?;
    let clock = Clock::start();
    let clock = Clock::start_with_wall(broadcast_value(comm, Some(clock.start_wall()))?);
    let trace_in = setup.config.output.trace.then_some(output_folder);
    let checkpointing = setup.checkpointing();
    let ctx = RunContext {
        config: &setup.config,
        dataset: &setup.dataset,
        format: setup.format.as_ref(),
        storage: setup.storage.as_ref(),
        comm,
        clock: &clock,
        run_entropy,
        progress: None,
        trace_in,
        page_cache_drop: setup.drop_timeout.filter(|_| hosts.leads_its_host()),
        checkpointing: checkpointing.as_ref(),
        timeseries: None,
    };
    let run = |ctx: &RunContext| match (&checkpointing, setup.trains()) {
        (Some(checkpointing), false) => run_local_ranks(ctx, display, |ctx, rank| {
            trainer::checkpoint_only_rank(ctx, checkpointing, rank)
        }),
        _ => run_local_ranks(ctx, display, trainer::train_rank),
    };
    let interval = setup.config.output.timeseries_interval;
    let mut ranks = match interval > 0.0 {
        false => run(&ctx)?,
        true => {
            let local = comm.local_ranks();
            let counters = Counters::new(
                clock.start_instant(),
                local.start,
                local.len(),
                crate::loader::most_reader_threads(&setup.config) as usize,
            );
            let progress = EpochProgress::new(display, setup.config.train.epochs);
            let exporter = comm::agree(comm, metrics_exporter(setup, hosts))?;
            if let Some(exporter) = &exporter {
                display.line(&format!("metrics: http://{}/metrics", exporter.address()));
            }
            let several = comm.processes() > 1;
            let sources = Sources {
                storage: setup.storage.as_ref(),
                host: hosts.leads_its_host().then(|| setup.watched_folders()),
                exporter: exporter.as_ref().map(|e| (e, metric_labels(comm, setup))),
                progress: Some(&progress),
            };
            let sampler = Sampler::create(
                output_folder,
                several.then(|| comm.process()),
                &counters,
                sources,
                interval,
            );
            let sampler = comm::agree(comm, sampler)?;
            let ctx = RunContext {
                timeseries: Some(&counters),
                progress: Some(&progress),
                ..ctx
            };
            let ranks = std::thread::scope(|scope| {
                if let Some(exporter) = &exporter {
                    let serving = std::thread::Builder::new()
                        .name("metrics".into())
                        .spawn_scoped(scope, || exporter.serve());
                    if let Err(e) = serving {
                        return Err(Error::run(format!(
                            "cannot start the metrics endpoint's thread: {e}"
                        )));
                    }
                }
                let ranks = sampler.beside(|| run(&ctx));
                if let Some(exporter) = &exporter {
                    exporter.stop();
                }
                ranks
            });
            let ranks = comm::agree(comm, ranks)?;
            if several {
                timeseries::merge(comm, output_folder)?;
            }
            ranks
        }
    };
    let end = SystemTime::now();
    let interrupted = match comm.stopped() {
        Some(signal) => Some(keep_what_all_completed(
            comm,
            &mut ranks,
            signal,
            &setup.config,
        )?),
        None => None,
    };
    let first_batch_seconds = first_batch_seconds(comm, &clock, startup_origin, &ranks)?;
    Ok(RanksDone {
        ranks,
        clock,
        run_entropy,
        end,
        interrupted,
        first_batch_seconds,
    })
}

/// Runs `work` for each of this process's ranks, one thread each, and returns their records in
/// rank order; the first failure aborts the run everywhere.
pub(super) fn run_local_ranks(
    ctx: &RunContext,
    display: Display,
    work: impl Fn(&RunContext, usize) -> Result<RankRecord> + Sync,
) -> Result<Vec<RankRecord>> {
    let comm = ctx.comm;
    let own;
    let progress = match ctx.progress {
        Some(progress) => progress,
        None => {
            own = EpochProgress::new(display, ctx.config.train.epochs);
            &own
        }
    };
    let ctx = &RunContext {
        progress: Some(progress),
        ..*ctx
    };
    let local = comm.local_ranks();
    let work = &work;
    let outcomes: Vec<Result<RankRecord>> = std::thread::scope(|scope| {
        let mut ranks = Vec::with_capacity(local.len());
        for rank in local.clone() {
            let spawned = std::thread::Builder::new()
                .name(format!("rank-{rank}"))
                .spawn_scoped(scope, move || {
                    crate::storage::mark_rank(rank);
                    let outcome =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(ctx, rank)))
                            .unwrap_or_else(|_| {
                                Err(Error::run("failed unexpectedly (a bug in dlio-rs)"))
                            });
                    if let Err(e) = &outcome {
                        comm.abort(&e.clone().in_rank(comm.rank_label(rank)));
                    }
                    outcome
                });
            match spawned {
                Ok(handle) => ranks.push(handle),
                Err(e) => {
                    // The ranks already started are released from their barriers by the abort.
                    comm.abort(&Error::run(format!(
                        "cannot start {} of {}: {e}; try fewer --accelerators",
                        comm.rank_label(rank),
                        comm.world()
                    )));
                    break;
                }
            }
        }
        ranks
            .into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err(Error::run("a rank thread panicked")))
            })
            .collect()
    });
    if let Some(first) = comm.aborted() {
        return Err(first);
    }
    outcomes.into_iter().collect()
}

/// The metrics endpoint of this process, when `output.metrics_listen` names one: at its port
/// plus this process's place among its host's processes, so that processes sharing a host do not
/// share a port.
fn metrics_exporter(setup: &Setup, hosts: &Hosts) -> Result<Option<Exporter>> {
    let Some(mut address) = setup.config.output.metrics_listen else {
        return Ok(None);
    };
    let offset = hosts.place_on_host() as u16;
    if address.port() != 0 {
        address.set_port(address.port().checked_add(offset).ok_or_else(|| {
            Error::usage(format!(
                "output.metrics_listen: port {} plus {offset} processes on this host is past                  65535",
                address.port()
            ))
        })?);
    }
    Exporter::bind(address).map(Some)
}

/// The labels of every sample of the metrics page: the host, the workload, and the process of
/// several.
fn metric_labels(comm: &dyn Comm, setup: &Setup) -> Vec<(String, String)> {
    let mut labels = vec![
        ("host".to_string(), crate::system::hostname()),
        ("workload".to_string(), setup.config.model.name.clone()),
    ];
    if comm.processes() > 1 {
        labels.push(("process".to_string(), comm.process().to_string()));
    }
    labels
}

/// A run a signal stopped reports what every rank of every process completed: as many epochs,
/// and checkpoint operations, as the rank that completed the fewest. Fails with the signal when
/// nothing was completed, for there is nothing to report.
fn keep_what_all_completed(
    comm: &dyn Comm,
    ranks: &mut [RankRecord],
    signal: i32,
    config: &Config,
) -> Result<Interruption> {
    let fewest = |count: fn(&RankRecord) -> usize| {
        ranks
            .iter()
            .map(count)
            .min()
            .map_or(f64::INFINITY, |n| n as f64)
    };
    let mut completed = [fewest(|r| r.epochs.len()), fewest(|r| r.checkpoints.len())];
    comm.all_reduce(&mut completed, Reduce::Min)?;
    let [epochs, checkpoints] = completed.map(|n| n as usize);
    if epochs == 0 && checkpoints == 0 {
        // Every process finds this at once, from the same reduction.
        return Err(comm::interrupted_together(comm, signal));
    }
    for rank in ranks {
        rank.epochs.truncate(epochs);
        rank.checkpoints.truncate(checkpoints);
    }
    Ok(Interruption {
        signal,
        // A checkpoint-only run plans no epoch.
        epochs_planned: if config.workflow.train {
            config.train.epochs
        } else {
            0
        },
    })
}

/// Seconds from the earliest process start (or end of generation) until the last rank of any
/// process had its first batch, on the clock all processes share.
fn first_batch_seconds(
    comm: &dyn Comm,
    clock: &Clock,
    origin: Instant,
    ranks: &[RankRecord],
) -> Result<Option<f64>> {
    // Unknown (no step) is NaN, which the maximum keeps.
    let first_batch = crate::stats::first_batch_at(ranks).unwrap_or(f64::NAN);
    let mut latest = [if first_batch.is_nan() {
        f64::INFINITY
    } else {
        first_batch
    }];
    comm.all_reduce(&mut latest, Reduce::Max)?;
    // The origin as a time on the run's clock: before its start, so negative.
    let mut earliest = [-clock.seconds_since(origin, 0.0)];
    comm.all_reduce(&mut earliest, Reduce::Min)?;
    Ok(latest[0].is_finite().then(|| latest[0] - earliest[0]))
}
