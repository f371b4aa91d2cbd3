//! The TensorFlow loader over a TFRecord shard: DLIO's `tf.data` pipeline
//! (`reader/tf_reader.py`), replayed for what storage sees of it.
//!
//! DLIO builds, per rank and epoch:
//! `TFRecordDataset(files, buffer_size=transfer_size, num_parallel_reads=read_threads)` over the
//! rank's whole files → `shuffle(shuffle_size)` (when `sample_shuffle` is on) →
//! `batch(batch_size, drop_remainder=True)` → `map(parse, num_parallel_calls=
//! computation_threads)` → `prefetch(prefetch_size)`. What each stage does to the reads:
//!
//! - the parallel reads are TensorFlow's (legacy) parallel interleave: a cycle of `N =
//!   read_threads` files handing on one record each in turn ([`Interleave`]), and `2N` files
//!   more opened ahead of the cycle (`prefetch_input_elements`' default, `2 × cycle_length`);
//!   each of these `3N` files is read by its own worker thread, from its first record to its
//!   last, at most [`RECORDS_AHEAD`] records ahead of what the cycle has taken from it
//!   (`buffer_output_elements`' default, `2 × block_length`). Every file is read through the
//!   TFRecord stream reader's buffer of `transfer_size` bytes (256 KiB by default);
//! - the shuffle buffer holds `shuffle_size` records: before the first batch leaves it, the
//!   interleave must have handed on `shuffle_size + batch_size` records, and from then on one
//!   record per record taken out. It reorders records after they are read, so it changes when
//!   records are read, not which or in what order;
//! - the map is DLIO's `_parse_image`, which returns a constant: it costs nothing, and DLIO's
//!   TFRecord reader calls no preprocessing sleep. But a parallel map holds as many results as
//!   calls it may run: `computation_threads` batches ready beyond the prefetch's;
//! - the prefetch holds `prefetch_size` batches ready: with the map's, the pipeline pulls
//!   records for `prefetch_size + computation_threads` batches past the trainer's while it
//!   computes (measured with TensorFlow 2.21: one batch taken, `1 + prefetch_size +
//!   computation_threads` batches' records pulled).
//!
//! Here the worker threads read; a count stands for the interleave, the shuffle buffer and the
//! prefetch: the pipeline has handed on the first `X` records of the rank's interleave order,
//! where `X` is the least of what the trainer's batches and the buffers call for and the first
//! record not read yet. Batch `k` is ready once `X` reaches `(k + 1) × batch + shuffle_size`
//! (or the shard's end). It counts the records pulled into the pipeline for it and their bytes
//! ([`EpochPlan::pulled_for`]: the first batch's include the shuffle buffer's fill), which is
//! also the step their reads are traced under; records read ahead for steps the epoch does not
//! take are not counted.

use std::collections::BTreeMap;
use std::thread::Scope;

use super::crew::{Board, Crew, Sheet};
use super::{BatchSource, LoadedBatch, ReaderState};
use crate::error::{Error, Result};
use crate::format::ReadBuffer;
use crate::plan::{EpochPlan, Interleave, PipelineBuffers, RECORDS_AHEAD};

/// Where the workers and the trainer are.
#[derive(Default)]
struct Progress {
    /// Each worker's file (of the shard) and the records of it read.
    file: Vec<u64>,
    read: Vec<u64>,
    /// Each lane's first file not read to its end (≥ the shard's files once the lane is done).
    lane_next: Vec<u64>,
    /// Batches the trainer asked for, and took.
    asked: u64,
    taken: u64,
    /// Records read and their bytes, by the step they were pulled for (steps not yet taken).
    pulled: BTreeMap<u64, LoadedBatch>,
}

/// The pipeline's shape, fixed for the epoch.
struct Shape {
    order: Interleave,
    buffers: PipelineBuffers,
    batch: u64,
    workers: u64,
}

impl Shape {
    /// The first record of the interleave order not read yet.
    fn first_unread(&self, progress: &Progress) -> u64 {
        let workers = self.workers;
        self.order.first_unread(&progress.lane_next, |file| {
            let worker = (file % workers) as usize;
            if progress.file[worker] == file {
                progress.read[worker]
            } else {
                0
            }
        })
    }

    /// The records the pipeline has handed on: as many as its buffers call for, up to the first
    /// not read.
    fn handed_on(&self, progress: &Progress) -> u64 {
        let batches = (progress.taken + self.buffers.ahead).max(progress.asked);
        let wanted = batches
            .saturating_mul(self.batch)
            .saturating_add(self.buffers.shuffle);
        wanted
            .min(self.order.len())
            .min(self.first_unread(progress))
    }

    /// Whether record `record` of the shard's file `file` may be read now.
    fn may_read(&self, progress: &Progress, file: u64, record: u64) -> bool {
        record < self.order.taken_of_file(file, self.handed_on(progress)) + RECORDS_AHEAD
    }
}

/// The running pipeline of one rank's epoch.
pub(super) struct Pipeline<'scope, 'env> {
    plan: &'env EpochPlan,
    crew: Crew<'scope, 'env, Shape, Progress>,
}

impl<'scope, 'env> Pipeline<'scope, 'env> {
    /// Starts the workers of `source`'s plan, which reads in `tf.data`'s order: one per file
    /// open at once ([`Interleave::workers`]); `buffers` are handed to them in turn. `None` when
    /// the plan reads otherwise.
    pub(super) fn start(
        scope: &'scope Scope<'scope, 'env>,
        source: &'env BatchSource<'env>,
        buffers: &mut dyn Iterator<Item = ReadBuffer>,
    ) -> Option<Result<Pipeline<'scope, 'env>>> {
        let plan: &EpochPlan = source.plan;
        let (order, pipeline_buffers) = (*plan.interleave()?, plan.pipeline()?);
        let workers = order.workers();
        let shape = Shape {
            order,
            buffers: pipeline_buffers,
            batch: plan.batch_size(),
            workers,
        };
        let progress = Progress {
            file: (0..workers).collect(),
            read: vec![0; workers as usize],
            lane_next: (0..order.lanes()).collect(),
            ..Progress::default()
        };
        let board = Board::new(shape, progress);
        Some(
            Crew::start(scope, source, board, workers, buffers, work)
                .map(|crew| Pipeline { plan, crew }),
        )
    }

    /// Batch `step`, once the records it needs are read.
    pub(super) fn next_batch(&mut self, step: u64) -> Result<LoadedBatch> {
        let board = self.crew.board();
        let mut sheet = board.lock();
        sheet.own.asked = step + 1;
        board.changed(&sheet);
        drop(sheet);
        let needed = self.plan.needed_for(step);
        let mut sheet = board.wait_for_trainer(self.crew.len(), |s: &Sheet<Progress>| {
            board.fixed.first_unread(&s.own) >= needed
        })?;
        if board.fixed.first_unread(&sheet.own) < needed {
            return Err(Error::run(format!(
                "the reader threads stopped before step {} was read",
                step + 1
            )));
        }
        let pulled = sheet.own.pulled.remove(&step).unwrap_or_default();
        sheet.own.taken = step + 1;
        board.changed(&sheet);
        Ok(pulled)
    }

    /// Stops the workers and hands back their states.
    pub(super) fn finish(self) -> Vec<Result<(ReaderState<'env>, Result<()>)>> {
        self.crew.finish()
    }
}

/// A worker's files, read record by record as the pipeline lets it.
fn work(
    board: &Board<Shape, Progress>,
    source: &BatchSource,
    worker: u64,
    state: &mut ReaderState,
) -> Result<()> {
    let shape = &board.fixed;
    let order = &shape.order;
    let (files, records) = (order.files(), order.records_per_file());
    for file in (worker..files).step_by(shape.workers as usize) {
        for record in 0..records {
            let sheet = board.wait(board.lock(), |s| {
                s.stopped() || shape.may_read(&s.own, file, record)
            });
            if sheet.stopped() {
                return Ok(());
            }
            drop(sheet);
            let position = order.position(file, record);
            let sample = source
                .plan
                .interleaved_record(source.rank, position)
                .ok_or_else(|| Error::run("the TensorFlow pipeline left its shard (a bug)"))?;
            let step = source.plan.pulled_for(position);
            let loaded = source.read_one(step, sample, state)?;
            let mut sheet = board.lock();
            let progress = &mut sheet.own;
            let pulled = progress.pulled.entry(step).or_default();
            pulled.samples += loaded.samples;
            pulled.bytes += loaded.bytes;
            let slot = worker as usize;
            progress.read[slot] = record + 1;
            if record + 1 == records {
                progress.file[slot] = file + shape.workers;
                progress.read[slot] = 0;
                let lane = (file % order.lanes()) as usize;
                // Files of the lane read to their end before this one (a file opened ahead
                // that is shorter than the read-ahead) are passed over too.
                while progress.lane_next[lane] < files && {
                    let next = progress.lane_next[lane];
                    progress.file[(next % shape.workers) as usize] > next
                } {
                    progress.lane_next[lane] += order.lanes();
                }
            }
            board.changed(&sheet);
        }
    }
    Ok(())
}
