//! The DALI loader (`reader.data_loader: dali`): DLIO's `DaliDataLoader`, a DALI pipeline whose
//! parallel `external_source` calls DLIO's reader for one sample at a time
//! (`data_loader/dali_data_loader.py`), replayed for what storage sees of it.
//!
//! DLIO builds one pipeline per rank: `Pipeline(batch_size, py_num_workers=read_threads,
//! prefetch_queue_depth=prefetch_size or 2)` around
//! `external_source(source, parallel=True, batch=False)` (the external source's own
//! `prefetch_queue_depth` left at DALI's default, 1). What DALI 2.4 does with it, measured with a
//! source that logs each call (`docs/formats.md`, "The DALI loader"):
//!
//! - each batch is cut into `read_threads` contiguous pieces of the batch (sizes differing by at
//!   most one, DALI's `_split_work`), put on one queue that every worker takes from;
//! - one batch is read at a time: the next batch's pieces are queued once the last one's are all
//!   read (the external source schedules 1 batch ahead);
//! - the pipeline runs `prefetch_queue_depth` batches ahead of the trainer: batch `j` is read
//!   once the trainer has taken batch `j − prefetch_queue_depth`.
//!
//! With `read_threads` 0 DLIO's source is not parallel: one reader, here one worker. DLIO reads
//! each rank's samples in their natural order (its `DaliIndexDataset` walks a contiguous range
//! of sample indices, whatever the shuffle keys say); the plan does the same for this loader.

use std::collections::VecDeque;
use std::thread::Scope;

use super::crew::{Board, Crew, Sheet};
use super::{BatchSource, LoadedBatch, ReaderState};
use crate::error::{Error, Result};
use crate::format::ReadBuffer;

/// Where the batches are.
#[derive(Default)]
struct Progress {
    /// The batch being read (its pieces queued or in hand), and the next piece to hand out.
    batch: u64,
    next_piece: u64,
    /// Pieces of `batch` read so far, and what they loaded.
    pieces_done: u64,
    loaded: LoadedBatch,
    /// Batches read whole, waiting for the trainer, in step order.
    ready: VecDeque<LoadedBatch>,
    /// Batches the trainer took.
    taken: u64,
}

/// The pipeline's shape, fixed for the epoch.
struct Shape {
    steps: u64,
    /// Pieces per batch: the workers, or the batch's samples if fewer.
    pieces: u64,
    batch: u64,
    depth: u64,
}

impl Shape {
    fn new(steps: u64, batch: u64, workers: u64, depth: u64) -> Shape {
        Shape {
            steps,
            pieces: workers.min(batch).max(1),
            batch,
            depth,
        }
    }

    /// Whether a piece can be handed out now: the batch being read is within the pipeline's
    /// depth and has pieces left.
    fn piece_ready(&self, progress: &Progress) -> bool {
        progress.batch < self.steps
            && progress.batch < progress.taken + self.depth
            && progress.next_piece < self.pieces
    }

    /// The samples of piece `piece` of a batch: DALI's split, the first `batch mod pieces`
    /// pieces one sample longer.
    fn piece_range(&self, piece: u64) -> (u64, u64) {
        let (size, longer) = (self.batch / self.pieces, self.batch % self.pieces);
        let start = piece * size + piece.min(longer);
        (start, size + u64::from(piece < longer))
    }
}

/// The running DALI pipeline of one rank's epoch.
pub(super) struct DaliPipeline<'scope, 'env> {
    crew: Crew<'scope, 'env, Shape, Progress>,
}

impl<'scope, 'env> DaliPipeline<'scope, 'env> {
    /// Starts `max(read_threads, 1)` workers over `source`'s plan, the pipeline `depth` batches
    /// deep.
    pub(super) fn start(
        scope: &'scope Scope<'scope, 'env>,
        source: &'env BatchSource<'env>,
        read_threads: u64,
        depth: u64,
        buffers: &mut dyn Iterator<Item = ReadBuffer>,
    ) -> Result<DaliPipeline<'scope, 'env>> {
        let workers = read_threads.max(1);
        let plan = source.plan;
        let shape = Shape::new(plan.steps(), plan.batch_size(), workers, depth);
        let board = Board::new(shape, Progress::default());
        Crew::start(scope, source, board, workers, buffers, work).map(|crew| DaliPipeline { crew })
    }

    /// Batch `step`, once all its pieces are read.
    pub(super) fn next_batch(&mut self, step: u64) -> Result<LoadedBatch> {
        let board = self.crew.board();
        let mut sheet = board.wait_for_trainer(self.crew.len(), |s: &Sheet<Progress>| {
            !s.own.ready.is_empty()
        })?;
        let Some(loaded) = sheet.own.ready.pop_front() else {
            return Err(Error::run(format!(
                "the reader threads stopped before step {} was read",
                step + 1
            )));
        };
        sheet.own.taken = step + 1;
        board.changed(&sheet);
        Ok(loaded)
    }

    /// Stops the workers and hands back their states.
    pub(super) fn finish(self) -> Vec<Result<(ReaderState<'env>, Result<()>)>> {
        self.crew.finish()
    }
}

/// A worker: takes the next piece of the batch being read, reads its samples, until the epoch's
/// batches are all read or the pipeline stops.
fn work(
    board: &Board<Shape, Progress>,
    source: &BatchSource,
    _worker: u64,
    state: &mut ReaderState,
) -> Result<()> {
    let shape = &board.fixed;
    loop {
        let mut sheet = board.wait(board.lock(), |s| {
            s.stopped() || s.own.batch >= shape.steps || shape.piece_ready(&s.own)
        });
        if sheet.stopped() || sheet.own.batch >= shape.steps {
            return Ok(());
        }
        let (step, piece) = (sheet.own.batch, sheet.own.next_piece);
        sheet.own.next_piece += 1;
        drop(sheet);
        let (start, len) = shape.piece_range(piece);
        let samples = source
            .plan
            .batch(source.rank, step)
            .skip(start as usize)
            .take(len as usize);
        let loaded = source.read_samples(step, samples, state);
        if let Some(meter) = state.meter {
            meter.reads_pause();
        }
        let loaded = loaded?;
        let mut sheet = board.lock();
        let progress = &mut sheet.own;
        progress.loaded.samples += loaded.samples;
        progress.loaded.bytes += loaded.bytes;
        progress.pieces_done += 1;
        if progress.pieces_done == shape.pieces {
            let whole = std::mem::take(&mut progress.loaded);
            progress.ready.push_back(whole);
            progress.batch += 1;
            progress.next_piece = 0;
            progress.pieces_done = 0;
        }
        board.changed(&sheet);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_cut_as_dalis_split_cuts_it() {
        let cuts = |batch, workers| {
            let shape = Shape::new(1, batch, workers, 2);
            (0..shape.pieces)
                .map(|p| shape.piece_range(p))
                .collect::<Vec<_>>()
        };
        assert_eq!(cuts(4, 2), [(0, 2), (2, 2)]);
        assert_eq!(cuts(7, 3), [(0, 3), (3, 2), (5, 2)]);
        assert_eq!(cuts(2, 5), [(0, 1), (1, 1)]);
        assert_eq!(cuts(5, 1), [(0, 5)]);
    }
}
