//! A crew: the reader threads of a loader that coordinates them and the trainer under one lock
//! (the TensorFlow pipeline's workers, DALI's), with what each such loader needs alike: a wait
//! for a change that loses no wake-up and costs no wake-up call when nobody waits, the first
//! failure kept for the trainer, and the crew closed however the loader goes, so that no thread
//! waits forever.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{Scope, ScopedJoinHandle};

use super::trace::TraceThread;
use super::{BatchSource, ReaderState};
use crate::compute::tighten_timer_slack;
use crate::error::{Error, Result};
use crate::format::ReadBuffer;

/// What the crew shares: `fixed`, which never changes, and the loader's state `P` under the lock.
pub(super) struct Board<F, P> {
    pub fixed: F,
    sheet: Mutex<Sheet<P>>,
    changed: Condvar,
}

/// The state under the lock: the loader's own, and the crew's.
pub(super) struct Sheet<P> {
    pub own: P,
    failure: Option<Error>,
    pub failed: bool,
    pub closed: bool,
    pub workers_done: usize,
    sleepers: usize,
}

impl<P> Sheet<P> {
    /// The crew stopped: closed, or a worker failed.
    pub fn stopped(&self) -> bool {
        self.closed || self.failed
    }
}

impl<F, P> Board<F, P> {
    pub fn new(fixed: F, own: P) -> Board<F, P> {
        Board {
            fixed,
            sheet: Mutex::new(Sheet {
                own,
                failure: None,
                failed: false,
                closed: false,
                workers_done: 0,
                sleepers: 0,
            }),
            changed: Condvar::new(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Sheet<P>> {
        self.sheet.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps until `done(sheet)`; the guard comes back.
    pub fn wait<'g>(
        &self,
        mut sheet: MutexGuard<'g, Sheet<P>>,
        done: impl Fn(&Sheet<P>) -> bool,
    ) -> MutexGuard<'g, Sheet<P>> {
        while !done(&sheet) {
            sheet.sleepers += 1;
            sheet = self.changed.wait(sheet).unwrap_or_else(|p| p.into_inner());
            sheet.sleepers -= 1;
        }
        sheet
    }

    /// Wakes whoever sleeps, after a change under the lock.
    pub fn changed(&self, sheet: &Sheet<P>) {
        if sheet.sleepers > 0 {
            self.changed.notify_all();
        }
    }

    /// For the trainer: sleeps until `ready(sheet)`, a worker failed, or all `workers` ended;
    /// the first failure becomes this call's error.
    pub fn wait_for_trainer(
        &self,
        workers: usize,
        ready: impl Fn(&Sheet<P>) -> bool,
    ) -> Result<MutexGuard<'_, Sheet<P>>> {
        let mut sheet = self.wait(self.lock(), |s| {
            s.failed || s.workers_done == workers || ready(s)
        });
        if sheet.failed {
            return Err(sheet.failure.take().unwrap_or_else(|| {
                Error::run("a reader thread failed (its error was reported for an earlier step)")
            }));
        }
        Ok(sheet)
    }

    fn close(&self) {
        let mut sheet = self.lock();
        sheet.closed = true;
        self.changed(&sheet);
    }
}

/// What a worker does: reads as the board lets it, until it is done or the crew stops.
pub(super) type Work<F, P> =
    for<'a> fn(&Board<F, P>, &BatchSource<'a>, u64, &mut ReaderState<'a>) -> Result<()>;

/// The running crew.
pub(super) struct Crew<'scope, 'env, F, P> {
    board: Arc<Board<F, P>>,
    workers: Vec<ScopedJoinHandle<'scope, (ReaderState<'env>, Result<()>)>>,
}

impl<'scope, 'env, F, P> Crew<'scope, 'env, F, P>
where
    F: Send + Sync + 'env,
    P: Send + 'env,
{
    /// Starts `count` workers doing `work` over `source`, reader threads 0…; `buffers` are
    /// handed to them in turn.
    pub fn start(
        scope: &'scope Scope<'scope, 'env>,
        source: &'env BatchSource<'env>,
        board: Board<F, P>,
        count: u64,
        buffers: &mut dyn Iterator<Item = ReadBuffer>,
        work: Work<F, P>,
    ) -> Result<Crew<'scope, 'env, F, P>> {
        let mut crew = Crew {
            board: Arc::new(board),
            workers: Vec::with_capacity(count as usize),
        };
        for worker in 0..count {
            let board = Arc::clone(&crew.board);
            let buffer = buffers.next().unwrap_or_default();
            let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                tighten_timer_slack();
                super::yield_to_the_trainer();
                let mut state = source.reader_state(TraceThread::Reader(worker as usize), buffer);
                let read = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    work(&board, source, worker, &mut state)
                }))
                .unwrap_or_else(|_| {
                    Err(Error::run(format!(
                        "reader thread {worker} failed unexpectedly (a bug in dlio-rs)"
                    )))
                });
                let mut sheet = board.lock();
                sheet.workers_done += 1;
                if let Err(e) = read {
                    if !sheet.failed {
                        sheet.failed = true;
                        sheet.failure = Some(e);
                    }
                }
                board.changed(&sheet);
                drop(sheet);
                let closed = state.close(source);
                (state, closed)
            });
            match spawned {
                Ok(handle) => crew.workers.push(handle),
                // Dropping the crew closes it: the workers already started stop.
                Err(e) => {
                    return Err(Error::run(format!(
                        "cannot start reader thread {worker} of {count}: {e}; lower workload.reader.read_threads"
                    )))
                }
            }
        }
        Ok(crew)
    }

    pub fn board(&self) -> &Board<F, P> {
        &self.board
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// Stops the workers and hands back their states.
    pub fn finish(mut self) -> Vec<Result<(ReaderState<'env>, Result<()>)>> {
        self.board.close();
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

impl<F, P> Drop for Crew<'_, '_, F, P> {
    /// However the loader goes (finished, or unwound), no worker waits forever.
    fn drop(&mut self) {
        self.board.close();
    }
}
