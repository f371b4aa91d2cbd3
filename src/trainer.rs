//! One rank's training, as DLIO's main loop runs it: per step, wait for the next batch (`load`),
//! sleep the emulated compute (`compute`), then meet every other rank at a barrier (the gradient
//! all-reduce). Checkpoints are saved after the steps or epochs [`Schedule`] names, between metric
//! blocks. Evaluation follows the epochs it is due after, without barriers between its steps.
//! Each phase ends with every rank meeting the others (DLIO's barrier after training; after
//! evaluation it is dlio-rs's), which brings rank 0 all ranks' figures for the phase's progress
//! line, so that the line shows what the end-of-run table shows.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::checkpoint::{Checkpointing, Place, RankCheckpoints, Schedule};
use crate::comm::{gather_rank_values, Comm};
use crate::compute::{tighten_timer_slack, time_rng, Sleeper, TimeSpec};
use crate::config::Config;
use crate::config::{DataLoader, PageCache};
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::FileFormat;
use crate::format::ReadBuffer;
use crate::loader::trace::{RankShape, RankTrace, Span, SpanKind, Step, ThreadTrace, TraceThread};
use crate::loader::{BatchSource, Loader, LoaderSettings};
use crate::plan::{EpochPlan, Phase, PlanSpec};
use crate::progress::{EpochProgress, PhaseLine};
use crate::stats::{
    across_ranks, phase_rates, Block, Clock, EpochRecord, MetricWindow, PhaseRecord, RankRecord,
    Rates, StepTiming,
};
use crate::storage::Storage;
use crate::timeseries::{Counters, RankCounters};

/// What every rank of the run shares, read-only.
pub struct RunContext<'a> {
    pub config: &'a Config,
    pub dataset: &'a Dataset,
    pub format: &'a dyn FileFormat,
    pub storage: &'a dyn Storage,
    pub comm: &'a dyn Comm,
    pub clock: &'a Clock,
    /// Entropy for `random` shuffles, drawn once so every rank plans the same order.
    pub run_entropy: u64,
    /// Live progress, shown by rank 0 only.
    pub progress: Option<&'a EpochProgress>,
    /// The output folder, in which each rank writes its trace (`trace/`, in
    /// `output.trace_format`), when tracing is on.
    pub trace_in: Option<&'a Path>,
    /// Whether this process drops its host's page cache (`drop_before_epoch`), and how long a
    /// drop may take: one process per host does, its first rank, while every rank of the run
    /// waits.
    pub page_cache_drop: Option<Duration>,
    /// The run's checkpoints, when training saves them.
    pub checkpointing: Option<&'a Checkpointing<'a>>,
    /// The counters of the run's time series, when it is written.
    pub timeseries: Option<&'a Counters>,
}

/// What a rank keeps from one epoch to the next: memory and a timing calibration of this thread
/// and machine, never anything about what an epoch read.
#[derive(Default)]
struct RankResources {
    sleeper: Sleeper,
    buffers: Vec<ReadBuffer>,
}

/// A rank's trace, as the trainer holds it: the rank's files, and the trainer's own records not
/// yet written (the readers have theirs).
struct TrainerTrace {
    files: RankTrace,
    records: ThreadTrace,
}

impl TrainerTrace {
    /// Opens the rank's trace when the run is traced; `reads` says whether the rank reads samples.
    fn open(ctx: &RunContext, rank: usize, reads: bool) -> Result<Option<TrainerTrace>> {
        let shape = RankShape {
            rank: rank as u64,
            world: ctx.comm.world() as u64,
            readers: if reads {
                ctx.config.reader.read_threads as usize
            } else {
                0
            },
            reads,
        };
        let Some(dir) = ctx.trace_in else {
            return Ok(None);
        };
        Ok(Some(TrainerTrace {
            files: RankTrace::create(dir, ctx.config.output.trace_format, &shape, ctx.clock)?,
            records: ThreadTrace::new(TraceThread::Trainer),
        }))
    }

    /// Records a span of `kind` from `started` to now.
    fn span(&mut self, kind: SpanKind, (epoch, step): (u64, u64), started: Instant) -> Result<()> {
        record_span(&self.files, &mut self.records, kind, (epoch, step), started)
    }

    /// Ends the trace: the run's span (from `started`), the trainer's last records written out,
    /// the files given their names.
    fn close(mut self, ctx: &RunContext, started: Instant) -> Result<()> {
        self.span(SpanKind::Run, (0, 0), started)?;
        write_trace(ctx, &self.files, &mut self.records)?;
        self.files.complete()
    }
}

/// Writes out the records of `files` (the readers' handed in, then the trainer's `records`), the
/// files' keys made as the readers made them.
fn write_trace(ctx: &RunContext, files: &RankTrace, records: &mut ThreadTrace) -> Result<()> {
    let keys = |phase: Phase, file: u64, key: &mut String| {
        ctx.dataset
            .write_file_key(key, ctx.dataset.split(phase), file);
    };
    files.write_out(records, &keys)
}

/// Records a span of `kind` from `started` to now in the trainer's `records` for `files`.
fn record_span(
    files: &RankTrace,
    records: &mut ThreadTrace,
    kind: SpanKind,
    (epoch, step): (u64, u64),
    started: Instant,
) -> Result<()> {
    let span = Span {
        kind,
        epoch,
        step,
        started,
        ended: Instant::now(),
    };
    records.span(files, &span)
}

pub fn train_rank(ctx: &RunContext, rank: usize) -> Result<RankRecord> {
    tighten_timer_slack();
    let mut resources = RankResources::default();
    let config = ctx.config;
    let run_started = Instant::now();
    let mut trace = TrainerTrace::open(ctx, rank, true)?;
    let mut record = RankRecord {
        rank,
        ..RankRecord::default()
    };
    let schedule = ctx.checkpointing.map_or(Schedule::Never, |c| c.schedule);
    let mut checkpoints = ctx
        .checkpointing
        .filter(|c| c.schedule.in_training())
        .map(|c| RankCheckpoints::new(c, rank as u64, ctx.run_entropy, meters(ctx, rank)));
    // The epochs a rank completes are its record; a signal ends the loop early (see
    // `end_together`).
    let trained = (|| -> Result<()> {
        for epoch in 1..=config.train.epochs {
            let page_cache_drop_seconds = if config.reader.page_cache == PageCache::DropBeforeEpoch
            {
                drop_page_cache_together(ctx, rank)?
            } else {
                None
            };
            let start = ctx.clock.now();
            let epoch_started = Instant::now();
            let train = run_phase(
                ctx,
                rank,
                epoch,
                Phase::Train,
                &mut resources,
                trace.as_mut(),
                checkpoints.as_mut(),
            )?;
            // DLIO ends each training phase with a barrier, so evaluation starts together; it
            // brings rank 0 every rank's figures for the phase's line.
            show_phase(ctx, rank, epoch, Phase::Train, &train)?;
            if let Some(checkpoints) = checkpoints.as_mut() {
                if schedule.after_epoch(epoch) {
                    // DLIO's step count has moved past the last step, and the block is the last one.
                    let place = Place {
                        epoch,
                        step: train.steps() as u64 + 1,
                        index: train.blocks.len() as u64,
                    };
                    let saving = Instant::now();
                    checkpoints.save(ctx.clock, place, || Ok(()))?;
                    if let Some(trace) = trace.as_mut() {
                        trace.span(SpanKind::CheckpointSave, (epoch, place.step), saving)?;
                    }
                }
            }
            let eval = if crate::plan::eval_due(config, epoch) {
                Some(run_phase(
                    ctx,
                    rank,
                    epoch,
                    Phase::Eval,
                    &mut resources,
                    trace.as_mut(),
                    None,
                )?)
            } else {
                None
            };
            if let Some(trace) = trace.as_mut() {
                trace.span(SpanKind::Epoch, (epoch, 0), epoch_started)?;
            }
            record.epochs.push(EpochRecord {
                epoch,
                start,
                end: ctx.clock.now(),
                train,
                eval,
                page_cache_drop_seconds,
            });
            // After the epoch is recorded: a stop decided here leaves it complete, as it was
            // before this meeting existed.
            if let Some(eval) = record.epochs.last().and_then(|e| e.eval.as_ref()) {
                show_phase(ctx, rank, epoch, Phase::Eval, eval)?;
            }
        }
        Ok(())
    })();
    end_together(ctx.comm, trained)?;
    record.checkpoints = checkpoints.map(|c| c.records).unwrap_or_default();
    if let Some(trace) = trace {
        trace.close(ctx, run_started)?;
    }
    Ok(record)
}

/// One rank's part of a run that only checkpoints (`workflow.train: False`): DLIO's saves, then
/// its loads, each after a pause and a barrier of all ranks. Before the loads every rank drops
/// the files it will load from the page cache, so that they come from the storage.
pub fn checkpoint_only_rank(
    ctx: &RunContext,
    checkpointing: &Checkpointing,
    rank: usize,
) -> Result<RankRecord> {
    tighten_timer_slack();
    let Schedule::Only {
        writes,
        reads,
        pause,
        rank_sync,
    } = checkpointing.schedule
    else {
        return Ok(RankRecord {
            rank,
            ..RankRecord::default()
        });
    };
    let run_started = Instant::now();
    let mut trace = TrainerTrace::open(ctx, rank, false)?;
    let mut checkpoints = RankCheckpoints::new(
        checkpointing,
        rank as u64,
        ctx.run_entropy,
        meters(ctx, rank),
    );
    let mut sleeper = Sleeper::default();
    let pause = Duration::from_secs_f64(pause);
    let after = || {
        if rank_sync {
            ctx.comm.barrier()
        } else {
            Ok(())
        }
    };
    let place = |i: u64| Place {
        epoch: 1,
        step: i,
        index: i,
    };
    let done = (|| -> Result<()> {
        for i in 1..=writes {
            sleeper.sleep(pause);
            ctx.comm.barrier()?;
            let saving = Instant::now();
            checkpoints.save(ctx.clock, place(i), after)?;
            if let Some(trace) = trace.as_mut() {
                trace.span(SpanKind::CheckpointSave, (1, i), saving)?;
            }
        }
        for i in 1..=reads {
            checkpoints.evict(place(i))?;
        }
        for i in 1..=reads {
            sleeper.sleep(pause);
            ctx.comm.barrier()?;
            let loading = Instant::now();
            checkpoints.load(ctx.clock, place(i), after)?;
            if let Some(trace) = trace.as_mut() {
                trace.span(SpanKind::CheckpointLoad, (1, i), loading)?;
            }
        }
        Ok(())
    })();
    end_together(ctx.comm, done)?;
    if let Some(trace) = trace {
        trace.close(ctx, run_started)?;
    }
    Ok(RankRecord {
        rank,
        epochs: Vec::new(),
        checkpoints: checkpoints.records,
    })
}

/// Every rank ends at one more barrier, where the ranks learn whether the run was stopped by a
/// signal ([`crate::interrupt`]). A rank that saw the signal elsewhere (a reader, a sleep, a
/// checkpoint) votes there to stop; a rank that finished votes as its process does. When they
/// stop, each rank's record keeps what it completed, and the report takes what all completed.
fn end_together(comm: &dyn Comm, outcome: Result<()>) -> Result<()> {
    if matches!(&outcome, Err(e) if !matches!(e, Error::Interrupted { .. })) {
        // A failure aborts the run instead: nobody waits for a barrier.
        return outcome;
    }
    match (outcome, comm.barrier()) {
        (_, Err(Error::Interrupted { .. })) => Ok(()),
        (Ok(()), met) => met,
        // Stopped by a signal the others did not agree to stop for: cannot be, as the rank's
        // process votes with the signal it saw; kept as the error it is.
        (interrupted, _) => interrupted,
    }
}

/// Drops each host's page cache once, with every rank waiting: all ranks have finished reading the
/// last epoch before it starts, and none starts the next before every host is done. Returns how
/// long the drop took in the rank that did it.
fn drop_page_cache_together(ctx: &RunContext, rank: usize) -> Result<Option<f64>> {
    ctx.comm.barrier()?;
    let mut took = None;
    if let Some(timeout) = ctx
        .page_cache_drop
        .filter(|_| rank == ctx.comm.local_ranks().start)
    {
        let started = ctx.clock.now();
        crate::system::drop_page_cache(timeout)
            .map_err(|why| Error::run(format!("reader.page_cache = drop_before_epoch: {why}")))?;
        took = Some(ctx.clock.now() - started);
    }
    ctx.comm.barrier()?;
    Ok(took)
}

/// The time-series counters of `rank`, when the run keeps a time series.
fn meters<'a>(ctx: &RunContext<'a>, rank: usize) -> Option<&'a RankCounters> {
    ctx.timeseries.and_then(|c| c.rank(rank))
}

fn run_phase(
    ctx: &RunContext,
    rank: usize,
    epoch: u64,
    phase: Phase,
    resources: &mut RankResources,
    trace: Option<&mut TrainerTrace>,
    mut checkpoints: Option<&mut RankCheckpoints>,
) -> Result<PhaseRecord> {
    let phase_started = Instant::now();
    let config = ctx.config;
    // The readers write into the rank's files while the loop records its own spans.
    let (files, mut records) = match trace {
        Some(t) => (Some(&t.files), Some(&mut t.records)),
        None => (None, None),
    };
    let world = ctx.comm.world() as u64;
    let plan = EpochPlan::new(
        PlanSpec::for_phase(config, phase, world, ctx.run_entropy),
        epoch,
    );
    let compute_time: &TimeSpec = match phase {
        Phase::Train => &config.train.computation_time,
        Phase::Eval => &config.evaluation.eval_time,
    };
    let source = BatchSource {
        plan: &plan,
        epoch,
        phase,
        rank: rank as u64,
        dataset: ctx.dataset,
        split: ctx.dataset.split(phase),
        format: ctx.format,
        storage: ctx.storage,
        // DLIO's TFRecord pipeline never calls its preprocessing sleep (its map is a parse that
        // returns a constant).
        preprocess_time: if plan.interleave().is_some() {
            &TimeSpec::ZERO
        } else {
            &config.reader.preprocess_time
        },
        comm: ctx.comm,
        seed: config.train.seed ^ epoch.rotate_left(17) ^ (phase as u64),
        trace: files,
        meters: meters(ctx, rank),
        opens_per_sample: crate::loader::opens_per_sample(config, ctx.format),
    };
    let mut compute_rng = time_rng(config.train.seed ^ epoch, rank, phase as u64 + 100);
    let handoff_time = &config.reader.batch_handoff_time;
    let mut handoff_rng = time_rng(config.train.seed ^ epoch, rank, phase as u64 + 200);
    let settings = LoaderSettings {
        dali: config.reader.data_loader == DataLoader::Dali,
        dali_depth: config.reader.dali_queue_depth(),
        ..LoaderSettings::new(config.reader.read_threads, config.reader.prefetch_size)
    };
    let progress = ctx.progress.filter(|_| rank == 0);
    if let Some(p) = progress {
        p.begin(epoch, phase, plan.steps());
    }

    let mut record = PhaseRecord {
        start: ctx.clock.now(),
        ..PhaseRecord::default()
    };
    let schedule = ctx.checkpointing.map_or(Schedule::Never, |c| c.schedule);
    let mut block = Block {
        start: record.start,
        // Timings grow as steps run; a step cap far beyond the run's length reserves nothing.
        steps: Vec::with_capacity(plan.steps().min(1 << 16) as usize),
        ..Block::default()
    };
    let sleeper = &mut resources.sleeper;
    let buffers = std::mem::take(&mut resources.buffers);
    let readers = std::thread::scope(|scope| {
        let mut loader = Loader::start(scope, &source, settings, buffers)?;
        let result = (|| {
            for step in 0..plan.steps() {
                let t0 = Instant::now();
                let batch = loader.next_batch()?;
                // The framework's own hand-off (`reader.batch_handoff_time`): a real loop's
                // training thread spends it on every batch, ready or waited for, before the
                // batch is in hand, so it is load time.
                if !handoff_time.is_zero() {
                    sleeper.sleep(handoff_time.draw(&mut handoff_rng));
                }
                let loaded = Instant::now();
                // Training compute is the accelerator's time, the AU of the time series.
                let training_meters = source.meters.filter(|_| phase == Phase::Train);
                if let Some(meters) = training_meters {
                    meters.compute_begins(loaded);
                }
                let compute = compute_time.draw(&mut compute_rng);
                sleeper.sleep(compute);
                crate::interrupt::check()?;
                let done = Instant::now();
                record.compute_lateness.record(
                    done.saturating_duration_since(loaded)
                        .saturating_sub(compute)
                        .as_nanos() as u64,
                );
                let seconds = |from: Instant, to: Instant| (to - from).as_secs_f64();
                block.steps.push(StepTiming {
                    load: seconds(t0, loaded),
                    compute: seconds(loaded, done),
                    proc: seconds(t0, done),
                });
                record.samples_read += batch.samples;
                record.bytes_read += batch.bytes;
                if let Some(meters) = training_meters {
                    meters.step(loaded, done);
                }
                let mut met = None;
                if phase == Phase::Train {
                    ctx.comm.barrier()?;
                    met = records.is_some().then(Instant::now);
                }
                if let Some(checkpoints) = checkpoints.as_deref_mut() {
                    if schedule.after_step(step + 1) {
                        // The save ends the block; the next block starts after it, so its
                        // time is in no block's metrics.
                        let now = ctx.clock.now();
                        let capacity = block.steps.capacity();
                        let ended = std::mem::replace(
                            &mut block,
                            Block {
                                steps: Vec::with_capacity(capacity),
                                ..Block::default()
                            },
                        );
                        record.blocks.push(Block { end: now, ..ended });
                        let place = Place {
                            epoch,
                            step: step + 1,
                            index: record.blocks.len() as u64,
                        };
                        let saving = Instant::now();
                        checkpoints.save(ctx.clock, place, || Ok(()))?;
                        if let (Some(files), Some(records)) = (files, records.as_deref_mut()) {
                            let at = (epoch, place.step);
                            record_span(files, records, SpanKind::CheckpointSave, at, saving)?;
                        }
                        block.start = ctx.clock.now();
                    }
                }
                if let Some(p) = progress {
                    p.step(
                        step + 1,
                        record.samples_read * world,
                        ctx.clock.now() - record.start,
                    );
                }
                if let (Some(files), Some(records)) = (files, records.as_deref_mut()) {
                    let traced = Step {
                        epoch,
                        phase,
                        step: step + 1,
                        started: t0,
                        loaded,
                        computed: done,
                        met,
                        ended: Instant::now(),
                    };
                    records.step(files, &traced)?;
                }
            }
            Ok(())
        })();
        let readers = loader.finish();
        // The training loop's error, if any, is the cause; a reader's is a consequence.
        result.and(readers)
    });
    let (phase_ended, end) = (Instant::now(), ctx.clock.now());
    // Only now, the phase's time taken, is its trace formatted: its readers' records and the
    // trainer's, whatever the phase's outcome, so a phase that failed or was interrupted leaves
    // what it read. The phase's error, if any, is the cause.
    let written = match (files, records.as_deref_mut()) {
        (Some(files), Some(records)) => write_trace(ctx, files, records),
        _ => Ok(()),
    };
    let readers = readers?;
    written?;
    resources.buffers = readers.buffers;
    record.read_latency = readers.read_latency;
    record.bytes_from_storage = readers.bytes_from_storage;
    record.end = end;
    block.end = record.end;
    // A step checkpoint after the last step leaves an empty block, which DLIO still reports (AU
    // 0 with weight 0, and NaN warnings); it measures nothing and is left out.
    if !block.steps.is_empty() || record.blocks.is_empty() {
        record.blocks.push(block);
    }
    if let (Some(files), Some(records)) = (files, records) {
        let kind = match phase {
            Phase::Train => SpanKind::Train,
            Phase::Eval => SpanKind::Eval,
        };
        // The phase as it was measured, without the writing of its trace.
        let span = Span {
            kind,
            epoch,
            step: 0,
            started: phase_started,
            ended: phase_ended,
        };
        records.span(files, &span)?;
    }
    Ok(record)
}

/// What a rank's phase adds to the all-ranks figures of its progress line: exactly what the
/// report's table takes from its record.
#[derive(Serialize, Deserialize)]
struct PhaseFigures {
    au_percent: f64,
    samples_per_second: f64,
    bytes_read: u64,
    start: f64,
    end: f64,
}

/// Meets every rank at the end of a phase, and has rank 0 print the phase's line with the
/// figures of all ranks, computed as the end-of-run table computes them: the rates of each rank
/// from its record, combined by [`across_ranks`] in rank order (AU the mean, samples/s the sum),
/// bytes summed over the phase's span across ranks.
fn show_phase(
    ctx: &RunContext,
    rank: usize,
    epoch: u64,
    phase: Phase,
    record: &PhaseRecord,
) -> Result<()> {
    let config = ctx.config;
    let window = MetricWindow::from(config);
    let rates = match phase {
        Phase::Train => phase_rates(record, |b| window.train_block(b, config.reader.batch_size)),
        Phase::Eval => phase_rates(record, |b| {
            window.eval_block(b, config.reader.batch_size_eval)
        }),
    };
    let mine = PhaseFigures {
        au_percent: rates.au_percent,
        samples_per_second: rates.samples_per_second,
        bytes_read: record.bytes_read,
        start: record.start,
        end: record.end,
    };
    let Some(all) = gather_rank_values(ctx.comm, rank, &mine)? else {
        return Ok(());
    };
    let Some(progress) = ctx.progress else {
        return Ok(());
    };
    let per_rank: Vec<Rates> = all
        .iter()
        .map(|f| Rates {
            au_percent: f.au_percent,
            samples_per_second: f.samples_per_second,
        })
        .collect();
    let start = all.iter().map(|f| f.start).fold(f64::INFINITY, f64::min);
    let end = all.iter().map(|f| f.end).fold(f64::NEG_INFINITY, f64::max);
    progress.phase_done(
        epoch,
        phase,
        record.steps() as u64,
        PhaseLine {
            rates: across_ranks(&per_rank),
            bytes_read: all.iter().map(|f| f.bytes_read).sum(),
            wall: if end > start { end - start } else { 0.0 },
        },
    );
    Ok(())
}
