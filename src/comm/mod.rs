//! Ranks and barriers. Now: ranks are threads of one process ([`ThreadGroup`]). Later, MPI
//! processes each hosting some ranks implement the same trait, so the trainer never changes.
//!
//! A rank that fails aborts the group: every rank waiting in (or arriving at) a barrier returns
//! the reason instead of waiting forever, so a failure can never become a hang.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::error::Error;

pub trait Comm: Send + Sync {
    /// Number of ranks (emulated accelerators) in the run.
    fn world(&self) -> usize;

    /// Waits until every rank has arrived; fails if the run was aborted.
    fn barrier(&self) -> Result<(), Error>;

    /// Stops the run: pending and future barriers fail with this reason.
    fn abort(&self, reason: &Error);

    /// The abort reason, if any; readers poll this to stop early.
    fn aborted(&self) -> Option<Error>;
}

/// How long a rank waiting at a barrier spins before it sleeps.
const BARRIER_SPIN: Duration = Duration::from_micros(200);

struct BarrierState {
    arrived: usize,
    generation: u64,
    abort: Option<Error>,
}

/// All ranks as threads of this process.
pub struct ThreadGroup {
    world: usize,
    /// Set with the abort; checked on every sample read, so it must not take the lock.
    aborting: AtomicBool,
    /// The barrier generation, published for waiters that spin instead of sleeping.
    released_generation: AtomicU64,
    state: Mutex<BarrierState>,
    released: Condvar,
}

impl ThreadGroup {
    pub fn new(world: usize) -> ThreadGroup {
        assert!(world >= 1);
        ThreadGroup {
            world,
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
}

impl Comm for ThreadGroup {
    fn world(&self) -> usize {
        self.world
    }

    fn barrier(&self) -> Result<(), Error> {
        let mut state = self.lock();
        if let Some(reason) = &state.abort {
            return Err(reason.clone());
        }
        state.arrived += 1;
        if state.arrived == self.world {
            state.arrived = 0;
            state.generation += 1;
            self.released_generation
                .store(state.generation, Ordering::Release);
            self.released.notify_all();
            return Ok(());
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

    fn abort(&self, reason: &Error) {
        let mut state = self.lock();
        if state.abort.is_none() {
            state.abort = Some(reason.clone());
        }
        self.aborting.store(true, Ordering::Release);
        self.released.notify_all();
    }

    fn aborted(&self) -> Option<Error> {
        if !self.aborting.load(Ordering::Acquire) {
            return None;
        }
        self.lock().abort.clone()
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
