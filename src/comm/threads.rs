//! Ranks as threads of one process: the local barrier every [`Comm`] implementation builds on,
//! and [`ThreadGroup`], the whole run in this process.
//!
//! A rank that fails aborts the group: every rank waiting in (or arriving at) a barrier returns
//! the reason instead of waiting forever, so a failure can never become a hang.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::Comm;
use crate::error::{Error, Result};

/// How long a rank waiting at a barrier spins before it sleeps.
const BARRIER_SPIN: Duration = Duration::from_micros(200);

struct BarrierState {
    arrived: usize,
    generation: u64,
    abort: Option<Error>,
}

/// A barrier for the ranks (threads) of this process, which an abort breaks.
pub struct LocalBarrier {
    ranks: usize,
    /// Set with the abort; checked on every sample read, so it must not take the lock.
    aborting: AtomicBool,
    /// The barrier generation, published for waiters that spin instead of sleeping.
    released_generation: AtomicU64,
    state: Mutex<BarrierState>,
    released: Condvar,
}

impl LocalBarrier {
    pub fn new(ranks: usize) -> LocalBarrier {
        assert!(ranks >= 1);
        LocalBarrier {
            ranks,
            aborting: AtomicBool::new(false),
            released_generation: AtomicU64::new(0),
            state: Mutex::new(BarrierState {
                arrived: 0,
                generation: 0,
                abort: None,
            }),
            released: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BarrierState> {
        // A rank that panicked while holding the lock leaves consistent state (plain counters).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every local rank has arrived. The last to arrive runs `meet_others` (the
    /// processes' barrier, when there are several) before anyone is released, outside the lock
    /// so that an abort is never held up by it.
    pub fn wait(&self, meet_others: &dyn Fn()) -> Result<()> {
        let mut state = self.lock();
        if let Some(reason) = &state.abort {
            return Err(reason.clone());
        }
        state.arrived += 1;
        if state.arrived == self.ranks {
            state.arrived = 0;
            drop(state);
            // Every other local rank is waiting, so nobody arrives meanwhile.
            meet_others();
            let mut state = self.lock();
            state.generation += 1;
            self.released_generation
                .store(state.generation, Ordering::Release);
            self.released.notify_all();
            return match &state.abort {
                Some(reason) => Err(reason.clone()),
                None => Ok(()),
            };
        }
        let generation = state.generation;
        drop(state);
        // Waking sleepers costs tens of µs each on small VMs, and the last one woken starts its
        // next step late; ranks that spin (yielding the core to anyone runnable) leave at once.
        let spin_until = Instant::now() + BARRIER_SPIN;
        while self.released_generation.load(Ordering::Acquire) == generation
            && !self.aborting.load(Ordering::Acquire)
            && Instant::now() < spin_until
        {
            std::thread::yield_now();
        }
        let mut state = self.lock();
        while state.generation == generation && state.abort.is_none() {
            state = self.released.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        match (&state.abort, state.generation == generation) {
            (Some(reason), true) => Err(reason.clone()),
            _ => Ok(()),
        }
    }

    /// Breaks the barrier: pending and future waits fail with `reason` (the first one given).
    pub fn abort(&self, reason: &Error) {
        let mut state = self.lock();
        if state.abort.is_none() {
            state.abort = Some(reason.clone());
        }
        self.aborting.store(true, Ordering::Release);
        self.released.notify_all();
    }

    pub fn aborted(&self) -> Option<Error> {
        if !self.aborting.load(Ordering::Acquire) {
            return None;
        }
        self.lock().abort.clone()
    }
}

/// All ranks as threads of this process: the process collectives are trivial.
pub struct ThreadGroup {
    barrier: LocalBarrier,
}

impl ThreadGroup {
    pub fn new(world: usize) -> ThreadGroup {
        ThreadGroup {
            barrier: LocalBarrier::new(world),
        }
    }
}

impl Comm for ThreadGroup {
    fn world(&self) -> usize {
        self.barrier.ranks
    }

    fn local_ranks(&self) -> Range<usize> {
        0..self.barrier.ranks
    }

    fn process(&self) -> usize {
        0
    }

    fn processes(&self) -> usize {
        1
    }

    fn barrier(&self) -> Result<()> {
        self.barrier.wait(&|| {})
    }

    fn abort(&self, reason: &Error) {
        self.barrier.abort(reason);
    }

    fn aborted(&self) -> Option<Error> {
        self.barrier.aborted()
    }

    fn broadcast(&self, _bytes: &mut Vec<u8>) -> Result<()> {
        Ok(())
    }

    fn all_gather(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![bytes.to_vec()])
    }

    fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>> {
        Ok(Some(vec![bytes]))
    }

    fn all_reduce(&self, _values: &mut [f64], _op: super::Reduce) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn no_rank_passes_a_barrier_before_all_arrive() {
        let group = ThreadGroup::new(4);
        let arrivals = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for round in 1..=200 {
                        arrivals.fetch_add(1, Ordering::SeqCst);
                        group.barrier().unwrap();
                        assert!(arrivals.load(Ordering::SeqCst) >= round * 4);
                        group.barrier().unwrap();
                    }
                });
            }
        });
        assert_eq!(arrivals.load(Ordering::SeqCst), 800);
    }

    #[test]
    fn the_last_arrival_meets_the_others_before_anyone_leaves() {
        let barrier = LocalBarrier::new(3);
        let meetings = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for round in 1..=100 {
                        barrier
                            .wait(&|| {
                                meetings.fetch_add(1, Ordering::SeqCst);
                            })
                            .unwrap();
                        // Whoever leaves round k has seen the k-th meeting, and only one per round.
                        let seen = meetings.load(Ordering::SeqCst);
                        assert!(
                            seen >= round && seen <= round + 1,
                            "{seen} in round {round}"
                        );
                        barrier.wait(&|| {}).unwrap();
                    }
                });
            }
        });
        assert_eq!(meetings.load(Ordering::SeqCst), 100);
    }

    #[test]
    fn abort_releases_waiting_ranks() {
        let group = ThreadGroup::new(3);
        std::thread::scope(|s| {
            let waiters: Vec<_> = (0..2).map(|_| s.spawn(|| group.barrier())).collect();
            group.abort(&Error::run("rank 2 failed"));
            for w in waiters {
                assert_eq!(w.join().unwrap(), Err(Error::run("rank 2 failed")));
            }
        });
        assert_eq!(group.barrier(), Err(Error::run("rank 2 failed")));
    }
}
