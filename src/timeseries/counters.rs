//! The running totals the ranks keep for the time series: plain atomics, each written by one
//! thread only and read by the sampler, so that a read costs its reader a few stores to memory no
//! other thread writes (no lock, no read-modify-write, no shared cache line).
//!
//! Every reader thread of a rank (and the rank's own thread, which reads when `read_threads` is
//! 0) has its [`ReadMeter`]: reads completed, their bytes and latencies, and the time spent
//! inside reads. The rank's thread alone writes the training steps, their compute time and the
//! checkpoint bytes ([`RankCounters`]). Time inside reads and inside compute is kept as a
//! `Busy`: the time of the stretches ended, and when the one under way began — so a read
//! stalled for a minute counts as in flight for that minute (not only once it ends), and a
//! 10-second compute step counts in each interval it spans.

use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use crate::stats::Histogram;

/// Latencies at or above this many nanoseconds (~4.6 minutes) share the last bucket.
const LATENCY_CEILING_NS: u64 = (1 << 38) - 1;

/// The buckets a meter keeps: those of [`Histogram`] up to [`LATENCY_CEILING_NS`].
fn latency_buckets() -> usize {
    Histogram::bucket(LATENCY_CEILING_NS) + 1
}

/// Adds `n` to a counter only this thread writes (a load and a store: no locked instruction).
fn bump(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// The counters of this process's ranks, shared by their threads and the sampler.
pub struct Counters {
    /// The instant times are counted from: the run clock's start.
    base: Instant,
    first_rank: usize,
    ranks: Box<[RankCounters]>,
}

impl Counters {
    /// Counters for the ranks `first_rank..first_rank + ranks`, each with `readers` reader
    /// threads (plus its own thread), timed from `base`.
    pub fn new(base: Instant, first_rank: usize, ranks: usize, readers: usize) -> Counters {
        Counters {
            base,
            first_rank,
            ranks: (0..ranks)
                .map(|_| RankCounters::new(base, readers + 1))
                .collect(),
        }
    }

    /// The counters of rank `rank`, if it is one of this process's.
    pub fn rank(&self, rank: usize) -> Option<&RankCounters> {
        rank.checked_sub(self.first_rank)
            .and_then(|i| self.ranks.get(i))
    }

    pub(super) fn ranks(&self) -> impl Iterator<Item = (usize, &RankCounters)> {
        self.ranks
            .iter()
            .enumerate()
            .map(|(i, c)| (self.first_rank + i, c))
    }

    pub(super) fn base(&self) -> Instant {
        self.base
    }
}

/// One rank's counters.
pub struct RankCounters {
    base: Instant,
    meters: Box<[ReadMeter]>,
    steps: AtomicU64,
    computing: Busy,
    checkpoint_written: AtomicU64,
    checkpoint_read: AtomicU64,
}

impl RankCounters {
    fn new(base: Instant, threads: usize) -> RankCounters {
        RankCounters {
            base,
            meters: (0..threads).map(|_| ReadMeter::new(base)).collect(),
            steps: AtomicU64::new(0),
            computing: Busy::new(),
            checkpoint_written: AtomicU64::new(0),
            checkpoint_read: AtomicU64::new(0),
        }
    }

    /// The meter of thread `thread` (0: the rank's own thread, 1…: its readers); none for a
    /// thread beyond those counted: a meter has one writer, or its sequence lock breaks.
    pub fn meter(&self, thread: usize) -> Option<&ReadMeter> {
        self.meters.get(thread)
    }

    /// A training step's emulated compute begins at `at`. The rank's thread only.
    pub fn compute_begins(&self, at: Instant) {
        self.computing.begin(nanos_between(self.base, at));
    }

    /// The training step whose compute began at `began` ended at `ended`. The rank's thread
    /// only.
    pub fn step(&self, began: Instant, ended: Instant) {
        bump(&self.steps, 1);
        self.computing.end(nanos_between(began, ended));
    }

    /// `bytes` more of a checkpoint written. The rank's thread only.
    pub fn checkpoint_written(&self, bytes: u64) {
        bump(&self.checkpoint_written, bytes);
    }

    /// `bytes` more of a checkpoint read. The rank's thread only.
    pub fn checkpoint_read(&self, bytes: u64) {
        bump(&self.checkpoint_read, bytes);
    }

    pub(super) fn meters(&self) -> &[ReadMeter] {
        &self.meters
    }

    /// Steps, compute ns (the step under way included), checkpoint bytes written and read, up
    /// to `now_ns`.
    pub(super) fn totals(&self, now_ns: u64) -> [u64; 4] {
        [
            self.steps.load(Ordering::Relaxed),
            self.computing.read(now_ns).0,
            self.checkpoint_written.load(Ordering::Relaxed),
            self.checkpoint_read.load(Ordering::Relaxed),
        ]
    }
}

/// Time spent in something a thread does one at a time (reading, computing): the stretches that
/// ended, and the one under way. Written by one thread; the sampler reads it.
struct Busy {
    /// A sequence lock over the two fields: odd while the writer changes them, so the sampler
    /// never sees one half of a change.
    sequence: AtomicU64,
    /// Nanoseconds of the stretches that ended.
    done_ns: AtomicU64,
    /// When the stretch under way began (ns from the base, plus 1), or 0 between stretches.
    since: AtomicU64,
}

impl Busy {
    fn new() -> Busy {
        Busy {
            sequence: AtomicU64::new(0),
            done_ns: AtomicU64::new(0),
            since: AtomicU64::new(0),
        }
    }

    fn guarded(&self, change: impl FnOnce()) {
        let sequence = self.sequence.load(Ordering::Relaxed);
        self.sequence.store(sequence + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        change();
        self.sequence.store(sequence + 2, Ordering::Release);
    }

    /// A stretch begins `at_ns` from the base.
    fn begin(&self, at_ns: u64) {
        self.guarded(|| self.since.store(at_ns + 1, Ordering::Relaxed));
    }

    /// The stretch under way ended, `ns` long.
    fn end(&self, ns: u64) {
        self.guarded(|| {
            bump(&self.done_ns, ns);
            self.since.store(0, Ordering::Relaxed);
        });
    }

    /// The stretch under way ended, `ns` long, and the next began at `at_ns`.
    fn end_and_begin(&self, ns: u64, at_ns: u64) {
        self.guarded(|| {
            bump(&self.done_ns, ns);
            self.since.store(at_ns + 1, Ordering::Relaxed);
        });
    }

    /// (busy ns up to `now_ns`, the stretch under way included; whether one is under way).
    fn read(&self, now_ns: u64) -> (u64, bool) {
        loop {
            let before = self.sequence.load(Ordering::Acquire);
            if before % 2 == 1 {
                // The writer is between two stores (or was descheduled there): let it finish.
                std::thread::yield_now();
                continue;
            }
            let done = self.done_ns.load(Ordering::Relaxed);
            let since = self.since.load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if self.sequence.load(Ordering::Relaxed) == before {
                return match since {
                    0 => (done, false),
                    since => (done + now_ns.saturating_sub(since - 1), true),
                };
            }
        }
    }
}

fn nanos_between(from: Instant, to: Instant) -> u64 {
    to.saturating_duration_since(from).as_nanos() as u64
}

/// One thread's reads. Written by that thread only; the sampler reads it.
#[repr(align(128))] // its own cache lines: no false sharing with another thread's meter
pub struct ReadMeter {
    /// The instant times are counted from.
    base: Instant,
    reads: AtomicU64,
    bytes: AtomicU64,
    inside: Busy,
    latency: Box<[AtomicU64]>,
    /// The thread holding the meter, for its kernel read counter (a few changes per epoch).
    holder: Mutex<Holder>,
}

/// Who holds a meter, and the bytes from storage of those who held it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Holder {
    /// The thread's id while one holds the meter (its counter is in /proc/self/task/{tid}/io).
    pub tid: Option<u64>,
    /// Its kernel read counter when it took the meter.
    pub storage_at_attach: u64,
    /// Bytes from storage of the threads that held the meter before.
    pub storage_done: u64,
}

/// Where a thread's reads are, in nanoseconds from the meter's base.
#[derive(Debug, Clone, Copy)]
pub struct ReadStamp {
    at_ns: u64,
}

/// What the sampler sees of one meter at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct MeterReading {
    pub reads: u64,
    pub bytes: u64,
    /// Time inside reads up to the moment read, the read under way included.
    pub busy_ns: u64,
    /// Whether a read is under way.
    pub reading: bool,
}

impl ReadMeter {
    fn new(base: Instant) -> ReadMeter {
        ReadMeter {
            base,
            reads: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            inside: Busy::new(),
            latency: (0..latency_buckets()).map(|_| AtomicU64::new(0)).collect(),
            holder: Mutex::new(Holder::default()),
        }
    }

    fn hold(&self) -> std::sync::MutexGuard<'_, Holder> {
        self.holder.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The calling thread takes the meter: `tid` its id, `storage` its kernel read counter now
    /// (where the kernel keeps one).
    pub fn attach(&self, tid: u64, storage: Option<u64>) {
        let mut holder = self.hold();
        holder.tid = Some(tid);
        holder.storage_at_attach = storage.unwrap_or(0);
    }

    /// The thread is done with the meter; `storage` its kernel read counter now.
    pub fn detach(&self, storage: Option<u64>) {
        let mut holder = self.hold();
        let at_attach = holder.storage_at_attach;
        holder.storage_done += storage.map_or(0, |now| now.saturating_sub(at_attach));
        holder.tid = None;
    }

    /// Reads begin at `at`, one after another: the stamp the next [`ReadMeter::read_ended`]
    /// takes. (Times go as nanoseconds from here on, so that a sample's read costs no clock
    /// conversion beyond the latency its reader measures anyway.)
    pub fn reads_begin(&self, at: Instant) -> ReadStamp {
        let at_ns = nanos_between(self.base, at);
        self.inside.begin(at_ns);
        ReadStamp { at_ns }
    }

    /// The read begun at `stamp` ended after `ns` nanoseconds, with `bytes` bytes; the next
    /// begins at once (its stamp is updated), unless [`ReadMeter::reads_pause`] says otherwise.
    pub fn read_ended(&self, stamp: &mut ReadStamp, ns: u64, bytes: u64) {
        bump(&self.reads, 1);
        bump(&self.bytes, bytes);
        bump(
            &self.latency[Histogram::bucket(ns.min(LATENCY_CEILING_NS))],
            1,
        );
        stamp.at_ns += ns;
        self.inside.end_and_begin(ns, stamp.at_ns);
    }

    /// `count` reads from `stamp` ended after `ns` nanoseconds together (samples served from
    /// what the reader holds, timed as one), with `bytes` bytes: each counts `ns / count`.
    pub fn reads_ended(&self, stamp: &mut ReadStamp, count: u64, ns: u64, bytes: u64) {
        bump(&self.reads, count);
        bump(&self.bytes, bytes);
        let each = ns / count.max(1);
        bump(
            &self.latency[Histogram::bucket(each.min(LATENCY_CEILING_NS))],
            count,
        );
        stamp.at_ns += ns;
        self.inside.end_and_begin(ns, stamp.at_ns);
    }

    /// No read is under way (the batch is done, or the reader does something else).
    pub fn reads_pause(&self) {
        self.inside.end(0);
    }

    /// The meter at `now_ns` (from the base).
    pub(super) fn read(&self, now_ns: u64) -> MeterReading {
        let (busy_ns, reading) = self.inside.read(now_ns);
        MeterReading {
            reads: self.reads.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            busy_ns,
            reading,
        }
    }

    /// Who holds the meter now.
    pub(super) fn holder(&self) -> Holder {
        *self.hold()
    }

    /// Adds this meter's latency counts to `counts` (one per bucket).
    pub(super) fn add_latencies(&self, counts: &mut [u64]) {
        for (sum, count) in counts.iter_mut().zip(self.latency.iter()) {
            *sum += count.load(Ordering::Relaxed);
        }
    }
}

/// The number of latency buckets a meter keeps (for the sampler's sums).
pub(super) fn bucket_count() -> usize {
    latency_buckets()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_read_under_way_counts_as_busy_until_now_and_only_once_when_it_ends() {
        let base = Instant::now();
        let counters = Counters::new(base, 4, 2, 1);
        assert!(counters.rank(3).is_none() && counters.rank(6).is_none());
        let meter = counters.rank(5).unwrap().meter(1).unwrap();
        let at = |ms| base + Duration::from_millis(ms);
        let mut stamp = meter.reads_begin(at(100));
        let during = meter.read(300_000_000);
        assert!(during.reading);
        assert_eq!(during.busy_ns, 200_000_000);
        meter.read_ended(&mut stamp, 300_000_000, 4096);
        // The next read began as this one ended.
        let next = meter.read(500_000_000);
        assert_eq!((next.reads, next.bytes), (1, 4096));
        assert_eq!(next.busy_ns, 400_000_000);
        assert!(next.reading);
        meter.reads_pause();
        let after = meter.read(600_000_000);
        assert_eq!(after.busy_ns, 300_000_000);
        assert!(!after.reading);
        let mut counts = vec![0; bucket_count()];
        meter.add_latencies(&mut counts);
        assert_eq!(counts[Histogram::bucket(300_000_000)], 1);
        assert_eq!(counts.iter().sum::<u64>(), 1);
    }

    #[test]
    fn storage_bytes_of_threads_gone_are_kept() {
        let counters = Counters::new(Instant::now(), 0, 1, 2);
        let meter = counters.rank(0).unwrap().meter(2).unwrap();
        meter.attach(77, Some(1000));
        assert_eq!(meter.holder().tid, Some(77));
        meter.detach(Some(5096));
        meter.attach(78, Some(10));
        meter.detach(Some(20));
        let holder = meter.holder();
        assert_eq!((holder.tid, holder.storage_done), (None, 4106));
        // A thread beyond those counted gets no meter: none is shared by two writers.
        assert!(counters.rank(0).unwrap().meter(3).is_none());
    }

    #[test]
    fn compute_counts_in_the_intervals_it_spans() {
        let base = Instant::now();
        let at = |ms| base + Duration::from_millis(ms);
        let counters = Counters::new(base, 0, 1, 0);
        let rank = counters.rank(0).unwrap();
        rank.compute_begins(at(500));
        assert_eq!(rank.totals(1_000_000_000), [0, 500_000_000, 0, 0]);
        rank.step(at(500), at(2500));
        rank.checkpoint_written(10);
        rank.checkpoint_read(3);
        assert_eq!(rank.totals(3_000_000_000), [1, 2_000_000_000, 10, 3]);
    }
}
