//! Ranks as threads of one process: the local barrier every [`Comm`] implementation builds on,
//! and [`ThreadGroup`], the whole run in this process.
//!
//! A rank that fails aborts the group: every rank waiting in (or arriving at) a barrier returns
//! the reason instead of waiting forever, so a failure can never become a hang.
//!
//! A barrier is also where the ranks agree to stop when a signal asked for it
//! ([`crate::interrupt`]): the last rank to arrive votes for its process, the processes' votes
//! are combined as they meet, and every rank of every process leaves that same barrier with
//! [`Error::Interrupted`], as does every later barrier at once. A rank that saw the signal
//! elsewhere (a reader, a sleep) goes on to its next barrier to take part in the decision.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::Comm;
use crate::compute::spin_until;
use crate::error::{Error, Result};

/// How long a rank waiting at a barrier spins before it sleeps.
const BARRIER_SPIN: Duration = Duration::from_micros(200);

struct BarrierState {
    arrived: usize,
    generation: u64,
    abort: Option<Error>,
    /// Ranks asleep in the barrier: a release with none costs no wake-up call.
    sleepers: usize,
    /// What each local rank brought to a gathering barrier, by local index, until the last
    /// arrival takes them; then what the gathering gave local rank 0, until it leaves.
    parts: Vec<Vec<u8>>,
    gathered: Option<Vec<Vec<u8>>>,
    /// The signal the ranks agreed to stop for, at some barrier; every barrier since fails.
    stopped: Option<i32>,
}

/// How the last local arrival at a gathering barrier meets the other processes: with this
/// process's vote and its local ranks' parts, it returns the combined vote and what local rank 0
/// is to leave with.
pub type Gathering<'a> = dyn Fn(Vote, Vec<Vec<u8>>) -> Result<(Vote, Option<Vec<Vec<u8>>>)> + 'a;

/// A process's vote at a barrier: the signal that asked it to stop, 0 for none. The processes'
/// votes combine by their maximum.
pub type Vote = i32;

/// A barrier for the ranks (threads) of this process, which an abort breaks.
pub struct LocalBarrier {
    ranks: usize,
    /// Set with the abort; checked on every sample read, so it must not take the lock.
    aborting: AtomicBool,
    /// The barrier generation, published for waiters that spin instead of sleeping.
    released_generation: AtomicU64,
    state: Mutex<BarrierState>,
    released: Condvar,
    /// This process's vote, read by the last rank to arrive.
    vote: fn() -> Vote,
}

impl LocalBarrier {
    pub fn new(ranks: usize) -> LocalBarrier {
        LocalBarrier::voting(ranks, || crate::interrupt::received().unwrap_or(0))
    }

    /// A barrier whose process votes with `vote` (for tests: a signal without a signal).
    pub fn voting(ranks: usize, vote: fn() -> Vote) -> LocalBarrier {
        assert!(ranks >= 1);
        LocalBarrier {
            ranks,
            aborting: AtomicBool::new(false),
            released_generation: AtomicU64::new(0),
            state: Mutex::new(BarrierState {
                arrived: 0,
                generation: 0,
                abort: None,
                sleepers: 0,
                parts: Vec::new(),
                gathered: None,
                stopped: None,
            }),
            released: Condvar::new(),
            vote,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BarrierState> {
        // A rank that panicked while holding the lock leaves consistent state (plain counters).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until every local rank has arrived. The last to arrive runs `meet_others` with this
    /// process's vote (the processes' barrier, when there are several; it returns the combined
    /// vote) before anyone is released, outside the lock so that an abort is never held up by it.
    /// Fails when the run was aborted, or when the ranks agreed to stop, here or before.
    pub fn wait(&self, meet_others: &dyn Fn(Vote) -> Vote) -> Result<()> {
        self.meet(None, &|vote, _| Ok((meet_others(vote), None)))
            .map(drop)
    }

    /// [`LocalBarrier::wait`] where local rank `local` brings `part`: the last to arrive hands
    /// every local rank's part, in local order, to `meet_others` with the vote; what it returns
    /// besides the combined vote is what local rank 0 leaves with (the others leave with
    /// `None`). A failure of `meet_others` aborts the run.
    pub fn wait_gathering(
        &self,
        local: usize,
        part: Vec<u8>,
        meet_others: &Gathering<'_>,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        assert!(local < self.ranks);
        self.meet(Some((local, part)), meet_others)
    }

    fn meet(
        &self,
        part: Option<(usize, Vec<u8>)>,
        meet_others: &Gathering<'_>,
    ) -> Result<Option<Vec<Vec<u8>>>> {
        let mut state = self.lock();
        if let Some(reason) = &state.abort {
            return Err(reason.clone());
        }
        if let Some(signal) = state.stopped {
            return Err(Error::Interrupted { signal });
        }
        let first = part.as_ref().is_some_and(|(local, _)| *local == 0);
        if let Some((local, bytes)) = part {
            state.parts.resize(self.ranks, Vec::new());
            state.parts[local] = bytes;
        }
        state.arrived += 1;
        if state.arrived == self.ranks {
            state.arrived = 0;
            let parts = std::mem::take(&mut state.parts);
            drop(state);
            // Every other local rank is waiting, so nobody arrives meanwhile.
            let (decided, gathered) = match meet_others((self.vote)(), parts) {
                Ok(met) => met,
                Err(e) => {
                    self.abort(&e);
                    (0, None)
                }
            };
            let mut state = self.lock();
            state.generation += 1;
            // Local rank 0 leaves with what was gathered: now, or when it wakes.
            let gathered = if first {
                gathered
            } else {
                state.gathered = gathered;
                None
            };
            if decided != 0 {
                state.stopped = Some(decided);
            }
            self.released_generation
                .store(state.generation, Ordering::Release);
            if state.sleepers > 0 {
                self.released.notify_all();
            }
            // An abort during the meeting stops the rank that met the others.
            return Self::leave(&state, true).map(|()| gathered);
        }
        let generation = state.generation;
        drop(state);
        // Waking sleepers costs tens of µs each on small VMs, and the last one woken starts its
        // next step late; ranks that spin (yielding the core to anyone runnable) leave at once.
        spin_until(BARRIER_SPIN, || {
            self.released_generation.load(Ordering::Acquire) != generation
                || self.aborting.load(Ordering::Acquire)
        });
        let mut state = self.lock();
        if state.generation == generation && state.abort.is_none() {
            // Counted under the lock that the release takes: it sees this sleeper, or this
            // sees its generation.
            state.sleepers += 1;
            while state.generation == generation && state.abort.is_none() {
                state = self.released.wait(state).unwrap_or_else(|p| p.into_inner());
            }
            state.sleepers -= 1;
        }
        Self::leave(&state, state.generation == generation)?;
        // Local rank 0 takes what was gathered before it can arrive at another barrier.
        Ok(if first { state.gathered.take() } else { None })
    }

    /// How a rank leaves: by an abort that came before it was released (`abort_counts`), else
    /// released, perhaps with the decision to stop.
    fn leave(state: &BarrierState, abort_counts: bool) -> Result<()> {
        match (&state.abort, state.stopped) {
            (Some(reason), _) if abort_counts => Err(reason.clone()),
            (_, Some(signal)) => Err(Error::Interrupted { signal }),
            _ => Ok(()),
        }
    }

    /// The signal the ranks agreed at a barrier to stop for, if they did.
    pub fn stopped(&self) -> Option<i32> {
        self.lock().stopped
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
        self.barrier.wait(&|vote| vote)
    }

    fn gather_ranks(&self, rank: usize, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>> {
        self.barrier
            .wait_gathering(rank, bytes, &|vote, parts| Ok((vote, Some(parts))))
    }

    fn abort(&self, reason: &Error) {
        self.barrier.abort(reason);
    }

    fn aborted(&self) -> Option<Error> {
        self.barrier.aborted()
    }

    fn stopped(&self) -> Option<i32> {
        self.barrier.stopped()
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
                            .wait(&|vote| {
                                meetings.fetch_add(1, Ordering::SeqCst);
                                vote
                            })
                            .unwrap();
                        // Whoever leaves round k has seen the k-th meeting, and only one per round.
                        let seen = meetings.load(Ordering::SeqCst);
                        assert!(
                            seen >= round && seen <= round + 1,
                            "{seen} in round {round}"
                        );
                        barrier.wait(&|vote| vote).unwrap();
                    }
                });
            }
        });
        assert_eq!(meetings.load(Ordering::SeqCst), 100);
    }

    static VOTE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

    #[test]
    fn ranks_leave_the_barrier_where_a_stop_was_voted_together_and_every_later_one_at_once() {
        let barrier = LocalBarrier::voting(3, || VOTE.load(Ordering::SeqCst));
        let passed = AtomicUsize::new(0);
        let results: Vec<(usize, Result<()>, Result<()>)> = std::thread::scope(|s| {
            let ranks: Vec<_> = (0..3)
                .map(|_| {
                    let (barrier, passed) = (&barrier, &passed);
                    s.spawn(move || {
                        let mut rounds = 0;
                        // Another process votes to stop at the fourth meeting; this one never does.
                        let meet = |vote: Vote| {
                            let meeting = passed.fetch_add(1, Ordering::SeqCst) + 1;
                            vote.max(if meeting == 4 { libc::SIGTERM } else { 0 })
                        };
                        let stopped = loop {
                            match barrier.wait(&meet) {
                                Ok(()) => rounds += 1,
                                stopped => break stopped,
                            }
                        };
                        (rounds, stopped, barrier.wait(&meet))
                    })
                })
                .collect();
            ranks.into_iter().map(|r| r.join().unwrap()).collect()
        });
        for (rounds, stopped, later) in results {
            assert_eq!(rounds, 3, "every rank passed the same three barriers");
            assert_eq!(
                stopped,
                Err(Error::Interrupted {
                    signal: libc::SIGTERM
                })
            );
            assert_eq!(
                later,
                Err(Error::Interrupted {
                    signal: libc::SIGTERM
                })
            );
        }
        assert_eq!(
            passed.load(Ordering::SeqCst),
            4,
            "no meeting after the stop"
        );
        assert_eq!(barrier.stopped(), Some(libc::SIGTERM));
        assert_eq!(barrier.aborted(), None, "a stop is not a failure");

        // This process's own vote stops its ranks the same way.
        let barrier = LocalBarrier::voting(2, || VOTE.load(Ordering::SeqCst));
        VOTE.store(libc::SIGINT, Ordering::SeqCst);
        std::thread::scope(|s| {
            let other = s.spawn(|| barrier.wait(&|vote| vote));
            assert_eq!(
                barrier.wait(&|vote| vote),
                Err(Error::Interrupted {
                    signal: libc::SIGINT
                })
            );
            assert_eq!(
                other.join().unwrap(),
                Err(Error::Interrupted {
                    signal: libc::SIGINT
                })
            );
        });
        VOTE.store(0, Ordering::SeqCst);
    }

    /// Ranks that stopped spinning and sleep are woken by the last arrival, and by an abort:
    /// the release counts its sleepers, and none is lost.
    #[test]
    fn sleeping_ranks_are_released_by_the_last_arrival_and_by_an_abort() {
        let barrier = LocalBarrier::new(3);
        let sleepers = || barrier.lock().sleepers;
        for round in 0..20 {
            std::thread::scope(|s| {
                let waiters: Vec<_> = (0..2).map(|_| s.spawn(|| barrier.wait(&|v| v))).collect();
                while sleepers() < 2 {
                    std::thread::yield_now();
                }
                if round < 19 {
                    assert_eq!(barrier.wait(&|v| v), Ok(()));
                    for w in waiters {
                        assert_eq!(w.join().unwrap(), Ok(()));
                    }
                } else {
                    barrier.abort(&Error::run("failed"));
                    for w in waiters {
                        assert_eq!(w.join().unwrap(), Err(Error::run("failed")));
                    }
                }
            });
            assert_eq!(sleepers(), 0);
        }
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
