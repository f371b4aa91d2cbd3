//! The data loader of one rank for one epoch: `read_threads` reader threads share the epoch's
//! immutable plan and build whole batches, as PyTorch's DataLoader workers do: batch `k` goes to
//! thread `k mod read_threads`, batches reach the trainer in order, and each thread may be at most
//! `prefetch_factor` batches ahead (`ceil(prefetch_size / read_threads)`, 2 when that is 0).
//! With `read_threads = 0` the training loop reads each batch itself.
//!
//! The threads live for one epoch only: nothing an epoch learns can leak into the next. Each
//! thread owns one reusable read buffer; memory is `read_threads × largest file`, whatever the
//! dataset's size.

use std::sync::mpsc::{sync_channel, Receiver};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Instant;

use crate::comm::Comm;
use crate::compute::{tighten_timer_slack, time_rng, Sleeper, TimeSpec};
use crate::dataset::{Dataset, SplitLayout};
use crate::error::{Error, Result};
use crate::format::{FileFormat, ReadBuffer};
use crate::plan::EpochPlan;
use crate::stats::Histogram;
use crate::storage::Storage;

/// What a batch cost to load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadedBatch {
    pub samples: u64,
    pub bytes: u64,
}

/// Everything a reader needs to read batches of one rank's shard; shared by its threads.
pub struct BatchSource<'a> {
    pub plan: &'a EpochPlan,
    pub rank: u64,
    pub dataset: &'a Dataset,
    pub split: &'a SplitLayout,
    pub format: &'a dyn FileFormat,
    pub storage: &'a dyn Storage,
    pub preprocess_time: &'a TimeSpec,
    pub comm: &'a dyn Comm,
    pub seed: u64,
}

/// A reader's private state: its buffer, its latency record and its draws of preprocess time.
struct ReaderState {
    buffer: ReadBuffer,
    latency: Histogram,
    rng: rand::rngs::SmallRng,
    sleeper: Sleeper,
}

impl BatchSource<'_> {
    fn reader_state(&self, thread: usize) -> ReaderState {
        ReaderState {
            buffer: ReadBuffer::default(),
            latency: Histogram::default(),
            rng: time_rng(self.seed, self.rank as usize, 1 + thread as u64),
            sleeper: Sleeper::default(),
        }
    }

    fn read_batch(&self, step: u64, state: &mut ReaderState) -> Result<LoadedBatch> {
        let mut loaded = LoadedBatch::default();
        for sample in self.plan.batch(self.rank, step) {
            if let Some(reason) = self.comm.aborted() {
                return Err(reason);
            }
            let key = self.dataset.file_key(self.split, sample.file);
            let started = Instant::now();
            let read =
                self.format
                    .read_sample(self.storage, &key, sample.sample, &mut state.buffer)?;
            state.latency.record(started.elapsed().as_nanos() as u64);
            loaded.samples += 1;
            loaded.bytes += read.bytes;
            if !self.preprocess_time.is_zero() {
                state
                    .sleeper
                    .sleep(self.preprocess_time.draw(&mut state.rng));
            }
        }
        Ok(loaded)
    }
}

/// PyTorch's rule for outstanding batches per reader thread.
pub fn prefetch_factor(read_threads: u64, prefetch_size: u64) -> u64 {
    let factor = if read_threads >= 1 {
        prefetch_size.div_ceil(read_threads)
    } else {
        prefetch_size
    };
    if factor == 0 {
        2
    } else {
        factor
    }
}

enum Mode<'scope> {
    Inline(ReaderState),
    Threads {
        queues: Vec<Receiver<Result<LoadedBatch>>>,
        readers: Vec<ScopedJoinHandle<'scope, Histogram>>,
    },
}

/// Batches of one rank's epoch, in step order.
pub struct Loader<'scope, 'env> {
    source: &'env BatchSource<'env>,
    next_step: u64,
    mode: Mode<'scope>,
}

impl<'scope, 'env> Loader<'scope, 'env> {
    pub fn start(
        scope: &'scope Scope<'scope, 'env>,
        source: &'env BatchSource<'env>,
        read_threads: u64,
        prefetch_factor: u64,
    ) -> Loader<'scope, 'env> {
        if read_threads == 0 {
            return Loader {
                source,
                next_step: 0,
                mode: Mode::Inline(source.reader_state(0)),
            };
        }
        let threads = read_threads as usize;
        let steps = source.plan.steps();
        let mut queues = Vec::with_capacity(threads);
        let mut readers = Vec::with_capacity(threads);
        for thread in 0..threads {
            // One batch is being built while `prefetch_factor - 1` wait: `prefetch_factor` outstanding.
            let (sender, receiver) = sync_channel(prefetch_factor as usize - 1);
            queues.push(receiver);
            readers.push(scope.spawn(move || {
                tighten_timer_slack();
                let mut state = source.reader_state(thread);
                for step in (thread as u64..steps).step_by(threads) {
                    let batch = source.read_batch(step, &mut state);
                    let failed = batch.is_err();
                    if sender.send(batch).is_err() || failed {
                        break;
                    }
                }
                state.latency
            }));
        }
        Loader {
            source,
            next_step: 0,
            mode: Mode::Threads { queues, readers },
        }
    }

    /// The next batch in step order.
    pub fn next_batch(&mut self) -> Result<LoadedBatch> {
        let step = self.next_step;
        self.next_step += 1;
        match &mut self.mode {
            Mode::Inline(state) => self.source.read_batch(step, state),
            Mode::Threads { queues, .. } => {
                let queue = &queues[(step % queues.len() as u64) as usize];
                queue.recv().map_err(|_| {
                    Error::run(format!(
                        "reader thread for step {step} stopped unexpectedly"
                    ))
                })?
            }
        }
    }

    /// Stops the readers (early, if the epoch ended early) and returns the read latencies.
    pub fn finish(self) -> Histogram {
        match self.mode {
            Mode::Inline(state) => state.latency,
            Mode::Threads { queues, readers } => {
                drop(queues);
                let mut latency = Histogram::default();
                for reader in readers {
                    if let Ok(h) = reader.join() {
                        latency.merge(&h);
                    }
                }
                latency
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_prefetch_rule() {
        assert_eq!(prefetch_factor(4, 2), 1);
        assert_eq!(prefetch_factor(1, 2), 2);
        assert_eq!(prefetch_factor(3, 8), 3);
        assert_eq!(prefetch_factor(2, 0), 2);
        assert_eq!(prefetch_factor(0, 2), 2);
        assert_eq!(prefetch_factor(0, 0), 2);
    }
}
