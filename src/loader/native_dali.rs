//! The native DALI loader (`reader.data_loader: native_dali`): DLIO's `NativeDaliDataLoader`, a
//! DALI pipeline per rank around DALI's own numpy reader (`fn.readers.numpy`, from DLIO's
//! `DaliNPYReader.pipeline()`), then `fn.python_function(preprocess)`, read by a
//! `DALIGenericIterator`; replayed for what storage sees of it. Measured on DALI 2.4 under DLIO
//! 2.0.0 with strace (docs/formats.md, "The native DALI loader"):
//!
//! - one thread reads, whatever `read_threads` (DALI's reader has one prefetch thread; the
//!   pipeline's `num_threads` only run its operators): one file at a time, in stream order
//!   ([`crate::plan::DaliShard`]: shard 0 on every rank, pass after pass);
//! - each file is a sample, read whole: opened, mapped whole, closed, its pages read as the sample
//!   is copied out of the mapping (here [`Storage::map_range`] of the whole file, every byte
//!   read), so one request per file;
//! - once the trainer has taken `k` batches, exactly `batch × (k + prefetch_queue_depth + 2) +
//!   fill` stream positions are taken (pad slots count, and are not read): the reader's queue,
//!   the pipeline's two outputs, and the shuffle buffer's fill (or the 1 sample the reader keeps
//!   read ahead); it goes on past the epoch's last batch, into the shard's next pass;
//! - `preprocess` sleeps once per sample, the batch's samples one after another (DALI runs the
//!   Python function serially), on the pipeline's stage, not the reader's: here a second thread
//!   sleeps batch after batch once its samples are read, at most 2 batches ahead of the trainer.

use std::thread::Scope;

use super::crew::{Board, Crew, Sheet};
use super::{BatchSource, LoadedBatch, ReaderState};
use crate::error::{Error, Result};
use crate::format::{ReadBuffer, SampleRead, SampleReader};
use crate::plan::dali_shard::PIPELINE_BATCHES;
use crate::plan::{DaliShard, SampleRef};
use crate::storage::Storage;

/// Where the pipeline is.
struct Progress {
    /// Stream positions the reader has taken (read, or passed as pad slots).
    taken_positions: u64,
    /// Batches the preprocessing stage has slept for.
    preprocessed: u64,
    /// Batches the trainer took.
    taken: u64,
    /// Files read and bytes for each step's batch: a read counts for the first batch that
    /// cannot be handed on without it (the last entry: reads past the epoch's batches).
    pulled: Vec<LoadedBatch>,
}

/// The pipeline's shape, fixed for the epoch.
struct Shape {
    steps: u64,
}

/// The running pipeline of one rank's epoch.
pub(super) struct NativeDaliPipeline<'scope, 'env> {
    crew: Crew<'scope, 'env, Shape, Progress>,
    dali: &'env DaliShard,
    preprocess: bool,
}

impl<'scope, 'env> NativeDaliPipeline<'scope, 'env> {
    /// Starts the reader thread, and the preprocessing stage when it sleeps.
    pub(super) fn start(
        scope: &'scope Scope<'scope, 'env>,
        source: &'env BatchSource<'env>,
        buffers: &mut dyn Iterator<Item = ReadBuffer>,
    ) -> Result<NativeDaliPipeline<'scope, 'env>> {
        let plan = source.plan;
        let dali = plan.dali().expect("the plan of a native_dali loader");
        if dali.files() == 0 && plan.steps() > 0 {
            return Err(Error::usage(format!(
                "data_loader native_dali: DALI's shard 0 of {} file(s) over {} rank(s) is empty \
                 (every rank reads shard 0, files / ranks of them): use at least as many files \
                 as ranks",
                plan.spec().files,
                plan.spec().world
            )));
        }
        let preprocess = !source.preprocess_time.is_zero();
        let shape = Shape {
            steps: plan.steps(),
        };
        let progress = Progress {
            taken_positions: 0,
            preprocessed: 0,
            taken: 0,
            pulled: vec![LoadedBatch::default(); plan.steps() as usize + 1],
        };
        let board = Board::new(shape, progress);
        let workers = 1 + u64::from(preprocess);
        Crew::start(scope, source, board, workers, buffers, work).map(|crew| NativeDaliPipeline {
            crew,
            dali,
            preprocess,
        })
    }

    /// Batch `step`, once its samples are read (and slept for, with preprocessing).
    pub(super) fn next_batch(&mut self, step: u64) -> Result<LoadedBatch> {
        let (dali, preprocess) = (self.dali, self.preprocess);
        let board = self.crew.board();
        let ready = |s: &Sheet<Progress>| match preprocess {
            true => s.own.preprocessed > step,
            false => s.own.taken_positions >= dali.needed_for(step),
        };
        let mut sheet = board.wait_for_trainer(self.crew.len(), ready)?;
        if !ready(&sheet) {
            return Err(Error::run(format!(
                "the reader threads stopped before step {} was read",
                step + 1
            )));
        }
        sheet.own.taken = step + 1;
        let loaded = sheet.own.pulled[step as usize];
        board.changed(&sheet);
        Ok(loaded)
    }

    /// Stops the threads and hands back their states.
    pub(super) fn finish(self) -> Vec<Result<(ReaderState<'env>, Result<()>)>> {
        self.crew.finish()
    }
}

/// Worker 0 reads the stream; worker 1, when there is one, is the preprocessing stage.
fn work(
    board: &Board<Shape, Progress>,
    source: &BatchSource,
    worker: u64,
    state: &mut ReaderState,
) -> Result<()> {
    let dali = source
        .plan
        .dali()
        .expect("the plan of a native_dali loader");
    if worker == 1 {
        return preprocess(board, source, dali, state);
    }
    state.reader = Box::new(WholeFileMap);
    state.defers_preprocess = true;
    let steps = board.fixed.steps;
    let mut pulled_for = 0;
    loop {
        let sheet = board.wait(board.lock(), |s| {
            s.stopped() || s.own.taken_positions < dali.readable(s.own.taken)
        });
        if sheet.stopped() {
            return Ok(());
        }
        let position = sheet.own.taken_positions;
        drop(sheet);
        // The first batch that cannot be handed on without this position.
        while pulled_for < steps && dali.needed_for(pulled_for) <= position {
            pulled_for += 1;
        }
        let mut loaded = LoadedBatch::default();
        if let Some(file) = dali.file_at(position) {
            let read = source.read_samples(
                pulled_for,
                std::iter::once(SampleRef { file, sample: 0 }),
                state,
            );
            if let Some(meter) = state.meter {
                meter.reads_pause();
            }
            loaded = read?;
        }
        let mut sheet = board.lock();
        let pulled = &mut sheet.own.pulled[pulled_for as usize];
        pulled.samples += loaded.samples;
        pulled.bytes += loaded.bytes;
        sheet.own.taken_positions += 1;
        board.changed(&sheet);
    }
}

/// The pipeline's `python_function(preprocess)`: the batch's samples slept for one after another,
/// once they are read, at most the pipeline's outputs ahead of the trainer.
fn preprocess(
    board: &Board<Shape, Progress>,
    source: &BatchSource,
    dali: &DaliShard,
    state: &mut ReaderState,
) -> Result<()> {
    let batch = source.plan.batch_size();
    for step in 0..board.fixed.steps {
        let sheet = board.wait(board.lock(), |s| {
            s.stopped()
                || (s.own.taken_positions >= dali.needed_for(step)
                    && step < s.own.taken + PIPELINE_BATCHES)
        });
        if sheet.stopped() {
            return Ok(());
        }
        drop(sheet);
        for _ in 0..batch {
            crate::interrupt::check()?;
            state
                .sleeper
                .sleep(source.preprocess_time.draw(&mut state.rng));
        }
        let mut sheet = board.lock();
        sheet.own.preprocessed = step + 1;
        board.changed(&sheet);
    }
    Ok(())
}

/// DALI's numpy reader with its default `dont_use_mmap = False`: each file mapped whole and every
/// byte of it read (the header is parsed from the mapping: no request of its own).
struct WholeFileMap;

impl SampleReader for WholeFileMap {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        _sample: u64,
        _buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let size = storage.size(key).map_err(|e| {
            Error::on_object(
                "cannot read the size of data file",
                storage.describe(key),
                e,
            )
        })?;
        let mapped = storage
            .map_range(key, 0, size as usize)
            .map_err(|e| Error::on_object("cannot map data file", storage.describe(key), e))?;
        // Every byte read, so that every page is faulted in: an XOR of the 8-byte words, which the
        // compiler cannot skip because the result is observed.
        let bytes = mapped.as_slice();
        let mut words = bytes.chunks_exact(8);
        let folded = words.by_ref().fold(0u64, |acc, w| {
            acc ^ u64::from_le_bytes(w.try_into().expect("8-byte chunks"))
        });
        std::hint::black_box(
            words
                .remainder()
                .iter()
                .fold(folded, |acc, &b| acc ^ b as u64),
        );
        mapped.finish().map_err(|e| {
            Error::on_object("cannot release the mapping of", storage.describe(key), e)
        })?;
        Ok(SampleRead {
            offset: 0,
            bytes: size,
        })
    }
}
