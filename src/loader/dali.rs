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

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{Scope, ScopedJoinHandle};

use super::trace::TraceThread;
use super::{BatchSource, LoadedBatch, ReaderState};
use crate::compute::tighten_timer_slack;
use crate::error::{Error, Result};
use crate::format::ReadBuffer;

/// Batches DALI's pipeline runs ahead of the trainer when `prefetch_size` is 0 (DLIO's choice).
const DEFAULT_QUEUE_DEPTH: u64 = 2;

/// Where the batches are, under one lock.
struct Progress {
    /// The batch being read (its pieces queued or in hand), and the next piece to hand out.
    batch: u64,
    next_piece: u64,
    /// Pieces of `batch` read so far, and what they loaded.
    pieces_done: u64,
    loaded: LoadedBatch,
    /// Batches read whole, waiting for the trainer: (step, what it loaded), in step order.
    ready: std::collections::VecDeque<(u64, LoadedBatch)>,
    /// Batches the trainer took.
    taken: u64,
    failure: Option<Error>,
    failed: bool,
    closed: bool,
    workers_done: usize,
    sleepers: usize,
}

struct Shared {
    steps: u64,
    /// Pieces per batch: the workers, or the batch's samples if fewer.
    pieces: u64,
    batch: u64,
    depth: u64,
    progress: Mutex<Progress>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Progress> {
        self.progress.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wait<'g>(
        &self,
        mut progress: MutexGuard<'g, Progress>,
        done: impl Fn(&Progress) -> bool,
    ) -> MutexGuard<'g, Progress> {
        while !done(&progress) {
            progress.sleepers += 1;
            progress = self
                .changed
                .wait(progress)
                .unwrap_or_else(|p| p.into_inner());
            progress.sleepers -= 1;
        }
        progress
    }

    fn changed(&self, progress: &Progress) {
        if progress.sleepers > 0 {
            self.changed.notify_all();
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
    shared: Arc<Shared>,
    workers: Vec<ScopedJoinHandle<'scope, (ReaderState<'env>, Result<()>)>>,
}

impl<'scope, 'env> DaliPipeline<'scope, 'env> {
    /// Starts `max(read_threads, 1)` workers over `source`'s plan, the pipeline `prefetch_size`
    /// batches deep (2 when 0).
    pub(super) fn start(
        scope: &'scope Scope<'scope, 'env>,
        source: &'env BatchSource<'env>,
        read_threads: u64,
        prefetch_size: u64,
        buffers: &mut dyn Iterator<Item = ReadBuffer>,
    ) -> Result<DaliPipeline<'scope, 'env>> {
        let workers = read_threads.max(1);
        let batch = source.plan.batch_size();
        let shared = Arc::new(Shared {
            steps: source.plan.steps(),
            pieces: workers.min(batch).max(1),
            batch,
            depth: if prefetch_size == 0 {
                DEFAULT_QUEUE_DEPTH
            } else {
                prefetch_size
            },
            progress: Mutex::new(Progress {
                batch: 0,
                next_piece: 0,
                pieces_done: 0,
                loaded: LoadedBatch::default(),
                ready: std::collections::VecDeque::new(),
                taken: 0,
                failure: None,
                failed: false,
                closed: false,
                workers_done: 0,
                sleepers: 0,
            }),
            changed: Condvar::new(),
        });
        let mut pipeline = DaliPipeline {
            shared,
            workers: Vec::with_capacity(workers as usize),
        };
        for worker in 0..workers {
            let shared = Arc::clone(&pipeline.shared);
            let buffer = buffers.next().unwrap_or_default();
            let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                tighten_timer_slack();
                super::yield_to_the_trainer();
                let mut state = source.reader_state(TraceThread::Reader(worker as usize), buffer);
                let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    work(&shared, source, &mut state)
                }))
                .unwrap_or_else(|_| {
                    Err(Error::run(format!(
                        "reader thread {worker} failed unexpectedly (a bug in dlio-rs)"
                    )))
                });
                let mut progress = shared.lock();
                progress.workers_done += 1;
                if let Err(e) = read {
                    if !progress.failed {
                        progress.failed = true;
                        progress.failure = Some(e);
                    }
                }
                shared.changed(&progress);
                drop(progress);
                let closed = state.close(source);
                (state, closed)
            });
            match spawned {
                Ok(handle) => pipeline.workers.push(handle),
                Err(e) => {
                    pipeline.close();
                    return Err(Error::run(format!(
                        "cannot start reader thread {worker} of {workers}: {e}; lower workload.reader.read_threads"
                    )));
                }
            }
        }
        Ok(pipeline)
    }

    /// Batch `step`, once all its pieces are read.
    pub(super) fn next_batch(&mut self, step: u64) -> Result<LoadedBatch> {
        let shared = &*self.shared;
        let workers = self.workers.len();
        let mut progress = shared.wait(shared.lock(), |p| {
            p.failed || p.workers_done == workers || !p.ready.is_empty()
        });
        if progress.failed {
            return Err(progress.failure.take().unwrap_or_else(|| {
                Error::run("a reader thread failed (its error was reported for an earlier step)")
            }));
        }
        let Some((read_step, loaded)) = progress.ready.pop_front() else {
            return Err(Error::run(format!(
                "the reader threads stopped before step {} was read",
                step + 1
            )));
        };
        debug_assert_eq!(read_step, step);
        progress.taken = step + 1;
        shared.changed(&progress);
        Ok(loaded)
    }

    fn close(&self) {
        let mut progress = self.shared.lock();
        progress.closed = true;
        self.shared.changed(&progress);
    }

    /// Stops the workers and hands back their states.
    pub(super) fn finish(mut self) -> Vec<Result<(ReaderState<'env>, Result<()>)>> {
        self.close();
        std::mem::take(&mut self.workers)
            .into_iter()
            .map(|worker| {
                worker
                    .join()
                    .map_err(|_| Error::run("a reader thread panicked"))
            })
            .collect()
    }
}

impl Drop for DaliPipeline<'_, '_> {
    /// However the loader goes (finished, or unwound), no worker waits forever.
    fn drop(&mut self) {
        self.close();
    }
}

/// A worker: takes the next piece of the batch being read, reads its samples, until the epoch's
/// batches are all read or the pipeline closes.
fn work(shared: &Shared, source: &BatchSource, state: &mut ReaderState) -> Result<()> {
    loop {
        let mut progress = shared.wait(shared.lock(), |p| {
            p.closed || p.failed || p.batch >= shared.steps || shared.piece_ready(p)
        });
        if progress.closed || progress.failed || progress.batch >= shared.steps {
            return Ok(());
        }
        let (step, piece) = (progress.batch, progress.next_piece);
        progress.next_piece += 1;
        drop(progress);
        let (start, len) = shared.piece_range(piece);
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
        let mut progress = shared.lock();
        progress.loaded.samples += loaded.samples;
        progress.loaded.bytes += loaded.bytes;
        progress.pieces_done += 1;
        if progress.pieces_done == shared.pieces {
            let whole = std::mem::take(&mut progress.loaded);
            progress.ready.push_back((step, whole));
            progress.batch += 1;
            progress.next_piece = 0;
            progress.pieces_done = 0;
        }
        shared.changed(&progress);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_is_cut_as_dalis_split_cuts_it() {
        let shared = |batch, pieces| Shared {
            steps: 1,
            pieces,
            batch,
            depth: 2,
            progress: Mutex::new(Progress {
                batch: 0,
                next_piece: 0,
                pieces_done: 0,
                loaded: LoadedBatch::default(),
                ready: Default::default(),
                taken: 0,
                failure: None,
                failed: false,
                closed: false,
                workers_done: 0,
                sleepers: 0,
            }),
            changed: Condvar::new(),
        };
        let cuts = |s: &Shared| (0..s.pieces).map(|p| s.piece_range(p)).collect::<Vec<_>>();
        assert_eq!(cuts(&shared(4, 2)), [(0, 2), (2, 2)]);
        assert_eq!(cuts(&shared(7, 3)), [(0, 3), (3, 2), (5, 2)]);
        assert_eq!(cuts(&shared(2, 2)), [(0, 1), (1, 1)]);
        assert_eq!(cuts(&shared(5, 1)), [(0, 5)]);
    }
}
