//! The data loader of one rank for one epoch: `read_threads` reader threads share the epoch's
//! immutable plan and build whole batches, as PyTorch's DataLoader workers do: batch `k` goes to
//! thread `k mod read_threads`, batches reach the trainer in order, and each thread may be at most
//! `prefetch_factor` batches ahead (`ceil(prefetch_size / read_threads)`, 2 when that is 0).
//! With `read_threads = 0` the training loop reads each batch itself.
//!
//! The threads live for one epoch only: nothing an epoch learns can leak into the next. Only
//! their read buffers are handed on (memory, not state): memory is `read_threads × largest
//! file`, whatever the dataset's size.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{Scope, ScopedJoinHandle};
use std::time::{Duration, Instant};

mod crew;
mod dali;
#[cfg(feature = "fault-injection")]
mod fault;
mod native_dali;
mod tfdata;
pub mod trace;

use crate::comm::Comm;
use crate::compute::{spin_until, tighten_timer_slack, time_rng, Sleeper, TimeSpec};
use crate::dataset::{Dataset, SplitLayout};
use crate::error::{Error, Result};
use crate::format::{FileFormat, ReadBuffer, SampleReader};
use crate::plan::{EpochPlan, Phase, SampleRef};
use crate::stats::Histogram;
use crate::storage::Storage;
use crate::timeseries::{RankCounters, ReadMeter, ReadStamp};
use trace::{RankTrace, Read, ThreadTrace, TraceThread};

/// What a batch cost to load.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadedBatch {
    pub samples: u64,
    pub bytes: u64,
}

/// Everything a reader needs to read batches of one rank's shard; shared by its threads.
pub struct BatchSource<'a> {
    pub plan: &'a EpochPlan,
    pub epoch: u64,
    pub phase: Phase,
    pub rank: u64,
    pub dataset: &'a Dataset,
    pub split: &'a SplitLayout,
    pub format: &'a dyn FileFormat,
    pub storage: &'a dyn Storage,
    pub preprocess_time: &'a TimeSpec,
    pub comm: &'a dyn Comm,
    pub seed: u64,
    /// The rank's trace, when tracing is on.
    pub trace: Option<&'a RankTrace>,
    /// The rank's time-series counters, when the run keeps a time series.
    pub meters: Option<&'a RankCounters>,
    /// Whether each sample's file is opened for it and closed after ([`opens_per_sample`]).
    pub opens_per_sample: bool,
}

/// Whether a reader opens each sample's file for it and closes it after, as DLIO's index-based
/// readers (its PyTorch and DALI loaders' `read_index`) do with `reader.read_type: on_demand`,
/// its default, where the format's reader does not keep files open regardless
/// ([`FileFormat::opened_per_sample_on_demand`]). DLIO's TensorFlow loader goes file by file
/// whatever the read type (tf.data's streams; its generators open a file once for the samples
/// they take from it), so it keeps files open.
pub fn opens_per_sample(config: &crate::config::Config, format: &dyn FileFormat) -> bool {
    use crate::config::{DataLoader, ReadType};
    config.reader.read_type == ReadType::OnDemand
        && matches!(
            config.reader.data_loader,
            DataLoader::Pytorch | DataLoader::Dali
        )
        && format.reads_storage()
        && format.opened_per_sample_on_demand()
}

/// A reader's private state: its buffer, the format's reader, its latency record and its draws of
/// preprocess time.
struct ReaderState<'a> {
    buffer: ReadBuffer,
    reader: Box<dyn SampleReader + 'a>,
    latency: Histogram,
    rng: rand::rngs::SmallRng,
    sleeper: Sleeper,
    key: String,
    /// The file this thread read last and its key: the storage is told when the thread moves on.
    file_in_hand: Option<u64>,
    /// Whether that file is open (`read_type: on_demand` closes it after every sample).
    open: bool,
    /// Whether the storage is told at all: a format that reads no storage (the synthetic loader)
    /// must not open, hold or evict the files it names.
    tells_storage: bool,
    key_in_hand: String,
    /// The thread's trace records not yet written.
    traced: ThreadTrace,
    /// The thread's kernel read counter when it started reading this phase.
    read_bytes_at_start: Option<u64>,
    /// Bytes this reader caused to be read from storage devices, once it is done.
    bytes_from_storage: Option<u64>,
    /// The thread's meter of the time series, when the run keeps one.
    meter: Option<&'a ReadMeter>,
    /// The preprocessing sleep is another thread's (DALI's pipeline stage), not this reader's.
    defers_preprocess: bool,
}

impl ReaderState<'_> {
    /// Moves the thread to `file` (at `self.key`), releasing the file it read before.
    fn take_file(&mut self, file: u64, storage: &dyn Storage) -> Result<()> {
        if self.file_in_hand == Some(file) {
            // Opened again after a close (`read_type: on_demand`), still the thread's file.
            if !self.open && self.tells_storage {
                storage.hold(&self.key_in_hand);
            }
            self.open = true;
            return Ok(());
        }
        self.release_file(storage)?;
        self.file_in_hand = Some(file);
        self.open = true;
        if self.tells_storage {
            self.key_in_hand.clone_from(&self.key);
            storage.hold(&self.key_in_hand);
        }
        Ok(())
    }

    /// Closes the file of the sample just read (`read_type: on_demand`): what opening it taught
    /// the reader is forgotten and its descriptor closed. It stays the thread's file: released
    /// (its pages evicted where the configuration asks) when the thread moves to another, as
    /// under `memory`, so that a run of samples from one file is not evicted sample by sample.
    fn close_file(&mut self, storage: &dyn Storage) {
        if self.file_in_hand.is_none() || !self.open {
            return;
        }
        self.open = false;
        self.reader.file_closed(&self.key_in_hand);
        if self.tells_storage {
            storage.let_go(&self.key_in_hand);
        }
    }

    fn release_file(&mut self, storage: &dyn Storage) -> Result<()> {
        self.open = false;
        if self.file_in_hand.take().is_some() {
            self.reader.put_down();
            if !self.tells_storage {
                return Ok(());
            }
            storage.release(&self.key_in_hand).map_err(|e| {
                Error::on_object(
                    "cannot evict from the page cache data file",
                    storage.describe(&self.key_in_hand),
                    e,
                )
            })?;
        }
        Ok(())
    }

    /// Ends the reader's phase: its file released, its trace records handed to the rank's trace
    /// (written out once the phase's timings are taken), its storage bytes counted.
    fn close(&mut self, source: &BatchSource) -> Result<()> {
        // First, so that what the thread read is traced even when releasing its file fails.
        if let Some(trace) = source.trace {
            let thread = self.traced.thread();
            trace.hand_in(std::mem::replace(
                &mut self.traced,
                ThreadTrace::new(thread),
            ));
        }
        self.release_file(source.storage)?;
        if self.tells_storage {
            source.storage.release_all();
        }
        let read_bytes_now = crate::system::thread_read_bytes();
        if let Some(meter) = self.meter {
            meter.detach(read_bytes_now);
        }
        self.bytes_from_storage = self
            .read_bytes_at_start
            .zip(read_bytes_now)
            .map(|(start, end)| end.saturating_sub(start));
        Ok(())
    }
}

impl<'a> BatchSource<'a> {
    /// Called on the thread that will read: reader `thread`, or the trainer (thread 0).
    fn reader_state(&self, thread: TraceThread, buffer: ReadBuffer) -> ReaderState<'a> {
        // Every reader thread of the rank takes its state here: its requests go to the rank's
        // endpoint, where an object store has several.
        crate::storage::mark_rank(self.rank as usize);
        // Meter 0 is the rank's own thread's (it reads when the loop reads inline), 1… its
        // readers': each meter has one writer.
        let index = match thread {
            TraceThread::Trainer => 0,
            TraceThread::Reader(k) => k + 1,
        };
        let read_bytes_at_start = crate::system::thread_read_bytes();
        let meter = self.meters.and_then(|m| m.meter(index));
        if let Some(meter) = meter {
            meter.attach(crate::system::thread_id(), read_bytes_at_start);
        }
        ReaderState {
            buffer,
            reader: self.format.reader(),
            latency: Histogram::default(),
            rng: time_rng(self.seed, self.rank as usize, 1 + index as u64),
            sleeper: Sleeper::default(),
            key: String::new(),
            file_in_hand: None,
            open: false,
            tells_storage: self.format.reads_storage(),
            key_in_hand: String::new(),
            traced: ThreadTrace::new(thread),
            read_bytes_at_start,
            bytes_from_storage: None,
            meter,
            defers_preprocess: false,
        }
    }

    fn read_batch(&self, step: u64, state: &mut ReaderState) -> Result<LoadedBatch> {
        let samples = self.plan.batch(self.rank, step);
        #[cfg(feature = "fault-injection")]
        let samples = fault::plant(samples.collect(), self.epoch, self.rank, step);
        // A sample's read starts where the last one ended: one clock read per sample, which
        // counts where samples are a few hundred bytes served from a row group in hand (dlrm).
        let loaded = self.read_samples(step, samples, state);
        if let Some(meter) = state.meter {
            meter.reads_pause();
        }
        loaded
    }

    /// One sample read alone, for `step` (the TensorFlow pipeline reads record by record).
    fn read_one(
        &self,
        step: u64,
        sample: SampleRef,
        state: &mut ReaderState,
    ) -> Result<LoadedBatch> {
        let loaded = self.read_samples(step, std::iter::once(sample), state);
        if let Some(meter) = state.meter {
            meter.reads_pause();
        }
        loaded
    }

    /// The samples of a batch read one after another: the loop of [`BatchSource::read_batch`].
    fn read_samples(
        &self,
        step: u64,
        samples: impl IntoIterator<Item = crate::plan::SampleRef>,
        state: &mut ReaderState,
    ) -> Result<LoadedBatch> {
        let mut loaded = LoadedBatch::default();
        let mut started = Instant::now();
        let mut stamp = state.meter.map(|meter| meter.reads_begin(started));
        // Samples the reader serves from what it holds (a parquet row group's rows) are timed
        // together: a clock read costs as much as serving one, and they are alike. Where each
        // read is traced, or a preprocessing sleep follows each, every sample is timed alone.
        let together = self.trace.is_none() && self.preprocess_time.is_zero();
        let mut held = HeldRun::default();
        for sample in samples {
            if let Some(reason) = self.comm.aborted() {
                return Err(reason);
            }
            crate::interrupt::check()?;
            let mut in_hand = state.file_in_hand == Some(sample.file) && state.open;
            if !in_hand {
                self.dataset
                    .write_file_key(&mut state.key, self.split, sample.file);
                state
                    .take_file(sample.file, self.storage)
                    .or_else(interrupted_first)?;
            }
            in_hand = together && in_hand && state.reader.in_hand(&state.key, sample.sample);
            if !in_hand && held.samples > 0 {
                started = held.settle(state, &mut stamp, started);
            }
            let read = state
                .reader
                .read_sample(self.storage, &state.key, sample.sample, &mut state.buffer)
                .or_else(interrupted_first)?;
            if self.opens_per_sample {
                state.close_file(self.storage);
            }
            loaded.samples += 1;
            loaded.bytes += read.bytes;
            if in_hand {
                held.samples += 1;
                held.bytes += read.bytes;
                continue;
            }
            let ended = Instant::now();
            let ns = (ended - started).as_nanos() as u64;
            state.latency.record(ns);
            if let (Some(meter), Some(stamp)) = (state.meter, stamp.as_mut()) {
                meter.read_ended(stamp, ns, read.bytes);
            }
            if let Some(trace) = self.trace {
                let read = Read {
                    epoch: self.epoch,
                    phase: self.phase,
                    step: step + 1,
                    file: sample.file,
                    sample: sample.sample,
                    image_idx: sample.file * self.dataset.samples_per_file + sample.sample,
                    offset: read.offset,
                    length: read.bytes,
                    started,
                    ended,
                };
                state.traced.read(trace, &read)?;
            }
            started = ended;
            if !self.preprocess_time.is_zero() && !state.defers_preprocess {
                state
                    .sleeper
                    .sleep(self.preprocess_time.draw(&mut state.rng));
            }
            // Neither writing the trace nor the preprocessing sleep is the next sample's read.
            if !together {
                started = Instant::now();
                stamp = state.meter.map(|meter| meter.reads_begin(started));
            }
        }
        if held.samples > 0 {
            held.settle(state, &mut stamp, started);
        }
        Ok(loaded)
    }
}

/// Samples served from what the reader holds, read since the clock was last read.
#[derive(Default)]
struct HeldRun {
    samples: u64,
    bytes: u64,
}

impl HeldRun {
    /// Reads the clock: the time since `started` is the run's, shared evenly by its samples;
    /// returns the clock's reading, where the next read starts.
    fn settle(
        &mut self,
        state: &mut ReaderState,
        stamp: &mut Option<ReadStamp>,
        started: Instant,
    ) -> Instant {
        let now = Instant::now();
        let total = (now - started).as_nanos() as u64;
        let each = total / self.samples;
        state.latency.record_many(each, self.samples);
        if let (Some(meter), Some(stamp)) = (state.meter, stamp.as_mut()) {
            meter.reads_ended(stamp, self.samples, total, self.bytes);
        }
        *self = HeldRun::default();
        now
    }
}

/// A read that failed after a signal arrived failed because of it (an object store stops
/// retrying then): the run stops as interrupted, not as failed.
fn interrupted_first<T>(error: Error) -> Result<T> {
    crate::interrupt::check()?;
    Err(error)
}

/// The most reader threads a rank's loader starts in one phase under `config`: the time series
/// keeps a meter for each (one writer per meter), besides the rank's own thread's.
pub fn most_reader_threads(config: &crate::config::Config) -> u64 {
    use crate::config::{DataLoader, Format};
    let threads = config.reader.read_threads;
    match config.reader.data_loader {
        // The TFRecord pipeline's workers: the cycle's files and those opened ahead of it.
        DataLoader::Tensorflow if config.dataset.format == Format::Tfrecord => {
            threads.max(1) * (1 + crate::plan::FILES_AHEAD_PER_LANE)
        }
        // DLIO's generators and DALI's workers: at least one.
        DataLoader::Tensorflow | DataLoader::Dali => threads.max(1),
        // DALI's own reader's thread and the pipeline's stage: its operators' threads (the
        // pipeline's `num_threads`) where the format has operators, else the preprocessing's.
        DataLoader::NativeDali => match config.dataset.format {
            Format::Jpeg | Format::Png | Format::Tfrecord => 1 + threads.max(1),
            _ => 2,
        },
        _ => threads,
    }
}

/// How a rank loads: its reader threads and how far ahead each may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoaderSettings {
    pub read_threads: u64,
    /// PyTorch's batches per reader thread.
    pub prefetch_factor: u64,
    /// `reader.prefetch_size`: the TensorFlow generators' prefetch.
    pub prefetch_size: u64,
    /// The DALI pipeline's depth (`ReaderConfig::dali_queue_depth`).
    pub dali_depth: u64,
    /// DLIO's DALI loader: each batch cut among the reader threads, one batch at a time.
    pub dali: bool,
}

impl LoaderSettings {
    pub fn new(read_threads: u64, prefetch_size: u64) -> LoaderSettings {
        LoaderSettings {
            read_threads,
            prefetch_factor: crate::config::prefetch_factor(read_threads, prefetch_size),
            prefetch_size,
            dali_depth: prefetch_size,
            dali: false,
        }
    }
}

/// Lowers this reader thread's priority one nice level below the process's. Under PyTorch's rule a
/// reader may not start its next batch until the trainer has taken its last one, so the trainer
/// must run the moment it wakes; at equal priority it waits for a busy reader's time slice.
/// Measured on 2 cores: +5 points on P1. Under CPU contention a reader keeps ~80% of a normal share.
fn yield_to_the_trainer() {
    // SAFETY: getpriority/setpriority on this thread's own id change nothing else; a failure (e.g.
    // already at the lowest priority) leaves the priority as it was, which is harmless.
    unsafe {
        let thread = libc::gettid() as libc::id_t;
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, thread);
        if *libc::__errno_location() == 0 {
            libc::setpriority(libc::PRIO_PROCESS, thread, (nice + 1).min(19));
        }
    }
}

/// How long a reader spins (yielding its core) for the trainer to take a batch before it sleeps:
/// long enough to cover a few short compute steps (dlrm's 375 µs, times the reader threads that
/// take turns), so that the trainer's take costs no wake-up call and the reader no wake-up delay,
/// and the cores stay awake; short enough to cost nothing next to long steps. A yielding spinner
/// gives its core to any thread that needs it. Measured on 2 cores at 375 µs steps (P9), against
/// 100 µs: 1 accelerator AU 99.5 → 99.9 %, 8 accelerators steps 5 % shorter (AU 90.5 → 93.5 %).
///
/// No reader spins while the trainer itself waits for a batch ([`Handoffs::trainer_waits`]):
/// then the take a reader waits for follows another reader's read, not a compute step, and the
/// spin only burns CPU (measured on R3 of the cold-read benchmark, compute 0: 34,154 yields in an
/// epoch, 0.13–0.24 CPU s/GiB against 0.10–0.11 without), while the batch that reader is about to
/// start is needed only a prefetch window later, far beyond a wake-up's delay.
const HANDOFF_SPIN: Duration = Duration::from_millis(2);

/// The finished batches, and how many threads sleep waiting for a change (so that a change
/// nobody waits for costs no wake-up call).
#[derive(Default)]
struct Ready {
    batches: VecDeque<Result<LoadedBatch>>,
    sleepers: usize,
}

/// Finished batches of one reader thread, and the counts that enforce PyTorch's rule: a reader
/// may start its `j`-th batch only while fewer than `prefetch_factor` of its batches are
/// outstanding (built or being built, and not yet taken by the trainer).
struct Handoff {
    ready: Mutex<Ready>,
    delivered: AtomicU64,
    taken: AtomicU64,
    closed: AtomicBool,
    changed: Condvar,
}

impl Handoff {
    fn new() -> Handoff {
        Handoff {
            ready: Mutex::new(Ready::default()),
            delivered: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            changed: Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Ready> {
        self.ready.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sleeps until `done()`. A side that changes what `done` reads does so before taking the
    /// lock ([`Handoff::notify`]), and this checks it under the lock, counted as a sleeper: the
    /// change is seen here or its wake-up reaches the wait.
    fn sleep_until(&self, done: impl Fn() -> bool) {
        let mut ready = self.lock();
        if done() {
            return;
        }
        ready.sleepers += 1;
        while !done() {
            ready = self.changed.wait(ready).unwrap_or_else(|p| p.into_inner());
        }
        ready.sleepers -= 1;
    }

    /// Wakes the other side if it sleeps, after a change to what it waits for.
    fn notify(&self) {
        if self.lock().sleepers > 0 {
            self.changed.notify_all();
        }
    }

    fn deliver(&self, batch: Result<LoadedBatch>) {
        self.lock().batches.push_back(batch);
        self.delivered.fetch_add(1, Ordering::Release);
        self.notify();
    }

    fn take(&self) -> Option<Result<LoadedBatch>> {
        let batch = self.lock().batches.pop_front();
        self.taken.fetch_add(1, Ordering::Release);
        self.notify();
        batch
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify();
    }
}

/// The readers' handoffs, closed when the loader goes away however it goes (finished, or
/// unwound by a panic): a reader waiting for its batch to be taken never waits forever.
struct ClosedOnDrop(Arc<Handoffs>);

/// Each reader thread's hand-off, and whether the trainer is waiting for a batch.
struct Handoffs {
    each: Vec<Handoff>,
    /// The trainer sleeps for a batch not yet delivered: the run is waiting for reads, so a
    /// reader ahead of it sleeps rather than spins (see [`HANDOFF_SPIN`]).
    trainer_waits: AtomicBool,
    /// Batches the trainer took, from every thread.
    taken: AtomicU64,
    /// The readers are DLIO's TensorFlow generators: their rule follows all threads' takes.
    generators: Option<GeneratorRule>,
}

/// How far DLIO's TensorFlow generator threads read ahead: `tf.data`'s interleave hands on their
/// batches in turn, as far as its `prefetch(prefetch_size)` calls for (`taken + prefetch_size`
/// batches), and each generator may be [`GENERATOR_BATCHES_AHEAD`] batches past what the
/// interleave took from it (its per-iterator buffer).
#[derive(Debug, Clone, Copy)]
struct GeneratorRule {
    threads: u64,
    steps: u64,
    prefetch: u64,
}

/// `tf.data`'s parallel interleave buffers `2 × block_length` elements per input (block length 1).
const GENERATOR_BATCHES_AHEAD: u64 = 2;

impl GeneratorRule {
    /// Whether thread `thread` may start its `j`-th batch once the trainer took `taken`.
    fn may_start(&self, thread: u64, j: u64, taken: u64) -> bool {
        let handed_on = (taken + self.prefetch).min(self.steps);
        let from_thread = if handed_on > thread {
            (handed_on - thread).div_ceil(self.threads)
        } else {
            0
        };
        j < from_thread + GENERATOR_BATCHES_AHEAD
    }
}

impl std::ops::Deref for ClosedOnDrop {
    type Target = [Handoff];

    fn deref(&self) -> &[Handoff] {
        &self.0.each
    }
}

impl Drop for ClosedOnDrop {
    fn drop(&mut self) {
        for handoff in self.0.each.iter() {
            handoff.close();
        }
    }
}

enum Mode<'scope, 'env> {
    Inline(Box<ReaderState<'env>>),
    /// The TensorFlow loader's `tf.data` pipeline over a TFRecord shard.
    Pipeline(tfdata::Pipeline<'scope, 'env>),
    /// DLIO's DALI loader.
    Dali(dali::DaliPipeline<'scope, 'env>),
    /// DLIO's native DALI loader (DALI's own numpy, file or tfrecord reader).
    NativeDali(native_dali::NativeDaliPipeline<'scope, 'env>),
    Threads {
        handoffs: ClosedOnDrop,
        readers: Vec<ScopedJoinHandle<'scope, (ReaderState<'env>, Result<()>)>>,
    },
}

/// What the readers of one phase leave behind.
pub struct LoaderReport {
    pub read_latency: Histogram,
    /// Bytes the readers caused to be read from storage devices, by the kernel's count; `None`
    /// where the kernel does not count them per thread.
    pub bytes_from_storage: Option<u64>,
    /// The read buffers, for the next phase.
    pub buffers: Vec<ReadBuffer>,
}

/// Batches of one rank's epoch, in step order.
pub struct Loader<'scope, 'env> {
    source: &'env BatchSource<'env>,
    next_step: u64,
    mode: Mode<'scope, 'env>,
}

impl<'scope, 'env> Loader<'scope, 'env> {
    /// Starts the readers of one epoch; `buffers` (one per reader) come back from [`finish`](Self::finish).
    pub fn start(
        scope: &'scope Scope<'scope, 'env>,
        source: &'env BatchSource<'env>,
        settings: LoaderSettings,
        buffers: Vec<ReadBuffer>,
    ) -> Result<Loader<'scope, 'env>> {
        let mut buffers = buffers.into_iter();
        if let Some(pipeline) = tfdata::Pipeline::start(scope, source, &mut buffers) {
            return Ok(Loader {
                source,
                next_step: 0,
                mode: Mode::Pipeline(pipeline?),
            });
        }
        if source.plan.dali().is_some() {
            let pipeline = native_dali::NativeDaliPipeline::start(scope, source, &mut buffers)?;
            return Ok(Loader {
                source,
                next_step: 0,
                mode: Mode::NativeDali(pipeline),
            });
        }
        if settings.dali {
            let pipeline = dali::DaliPipeline::start(
                scope,
                source,
                settings.read_threads,
                settings.dali_depth,
                &mut buffers,
            )?;
            return Ok(Loader {
                source,
                next_step: 0,
                mode: Mode::Dali(pipeline),
            });
        }
        // DLIO's TensorFlow loader runs at least one generator thread (it makes 0 into 1).
        let generators = source.plan.spec().thread_chunks;
        if settings.read_threads == 0 && !generators {
            let state =
                source.reader_state(TraceThread::Trainer, buffers.next().unwrap_or_default());
            return Ok(Loader {
                source,
                next_step: 0,
                mode: Mode::Inline(Box::new(state)),
            });
        }
        let threads = settings.read_threads.max(1) as usize;
        let factor = settings.prefetch_factor;
        let steps = source.plan.steps();
        // Closed on any early return, so readers already started do not wait forever.
        let handoffs = ClosedOnDrop(Arc::new(Handoffs {
            each: (0..threads).map(|_| Handoff::new()).collect(),
            trainer_waits: AtomicBool::new(false),
            taken: AtomicU64::new(0),
            generators: generators.then_some(GeneratorRule {
                threads: threads as u64,
                steps,
                prefetch: settings.prefetch_size,
            }),
        }));
        let mut readers = Vec::with_capacity(threads);
        for thread in 0..threads {
            let shared = Arc::clone(&handoffs.0);
            let buffer = buffers.next().unwrap_or_default();
            let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                let handoffs = shared;
                let handoff = &handoffs.each[thread];
                tighten_timer_slack();
                yield_to_the_trainer();
                let mut state = source.reader_state(TraceThread::Reader(thread), buffer);
                for (j, step) in (thread as u64..steps).step_by(threads).enumerate() {
                    let j = j as u64;
                    let may_start = || {
                        handoff.closed.load(Ordering::Acquire)
                            || match &handoffs.generators {
                                Some(rule) => rule.may_start(
                                    thread as u64,
                                    j,
                                    handoffs.taken.load(Ordering::Acquire),
                                ),
                                None => j < handoff.taken.load(Ordering::Acquire) + factor,
                            }
                    };
                    let trainer_waits = || handoffs.trainer_waits.load(Ordering::Relaxed);
                    if !spin_until(HANDOFF_SPIN, || may_start() || trainer_waits()) || !may_start()
                    {
                        handoff.sleep_until(may_start);
                    }
                    if handoff.closed.load(Ordering::Acquire) {
                        break;
                    }
                    // A reader that panicked must still hand over its batch (as an error), or
                    // the trainer would wait for it forever.
                    let batch = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        source.read_batch(step, &mut state)
                    }))
                    .unwrap_or_else(|_| {
                        Err(Error::run(format!(
                            "reader thread {thread} failed unexpectedly (a bug in dlio-rs)"
                        )))
                    });
                    let failed = batch.is_err();
                    handoff.deliver(batch);
                    if failed {
                        break;
                    }
                }
                let closed = state.close(source);
                (state, closed)
            });
            readers.push(spawned.map_err(|e| {
                Error::run(format!(
                    "cannot start reader thread {thread} of {threads}: {e}; lower workload.reader.read_threads"
                ))
            })?);
        }
        Ok(Loader {
            source,
            next_step: 0,
            mode: Mode::Threads { handoffs, readers },
        })
    }

    /// The next batch in step order.
    pub fn next_batch(&mut self) -> Result<LoadedBatch> {
        let step = self.next_step;
        self.next_step += 1;
        match &mut self.mode {
            Mode::Inline(state) => self.source.read_batch(step, state),
            Mode::Pipeline(pipeline) => pipeline.next_batch(step),
            Mode::Dali(pipeline) => pipeline.next_batch(step),
            Mode::NativeDali(pipeline) => pipeline.next_batch(step),
            Mode::Threads { handoffs, readers } => {
                let thread = (step % handoffs.len() as u64) as usize;
                let handoff = &handoffs[thread];
                let wanted = step / handoffs.len() as u64;
                let reader = &readers[thread];
                // The trainer sleeps at once: a spinning trainer would take a core from the
                // readers it waits for; and while it does, readers ahead of it sleep too.
                let ready =
                    || handoff.delivered.load(Ordering::Acquire) > wanted || reader.is_finished();
                if !ready() {
                    handoffs.0.trainer_waits.store(true, Ordering::Relaxed);
                    handoff.sleep_until(ready);
                    handoffs.0.trainer_waits.store(false, Ordering::Relaxed);
                }
                if handoff.delivered.load(Ordering::Acquire) <= wanted {
                    return Err(Error::run(format!(
                        "reader thread for step {step} stopped unexpectedly"
                    )));
                }
                let batch = handoff.take().unwrap_or_else(|| {
                    Err(Error::run(format!(
                        "reader thread for step {step} lost its batch"
                    )))
                });
                handoffs.0.taken.store(step + 1, Ordering::Release);
                if handoffs.0.generators.is_some() {
                    // Any take may let any generator on.
                    for other in handoffs.iter() {
                        other.notify();
                    }
                }
                batch
            }
        }
    }

    /// Stops the readers (early, if the epoch ended early) and collects what they leave behind.
    /// A reader that failed to finish its trace makes this an error.
    pub fn finish(self) -> Result<LoaderReport> {
        let mut report = LoaderReport {
            read_latency: Histogram::default(),
            bytes_from_storage: Some(0),
            buffers: Vec::new(),
        };
        let mut add = |state: ReaderState| {
            report.read_latency.merge(&state.latency);
            report.bytes_from_storage = report
                .bytes_from_storage
                .zip(state.bytes_from_storage)
                .map(|(a, b)| a + b);
            report.buffers.push(state.buffer);
        };
        let ended: Vec<Result<(ReaderState, Result<()>)>> = match self.mode {
            Mode::Inline(mut state) => {
                let closed = state.close(self.source);
                vec![Ok((*state, closed))]
            }
            Mode::Pipeline(pipeline) => pipeline.finish(),
            Mode::Dali(pipeline) => pipeline.finish(),
            Mode::NativeDali(pipeline) => pipeline.finish(),
            Mode::Threads { handoffs, readers } => {
                drop(handoffs);
                readers
                    .into_iter()
                    .map(|reader| {
                        reader
                            .join()
                            .map_err(|_| Error::run("a reader thread panicked"))
                    })
                    .collect()
            }
        };
        let mut outcome = Ok(());
        for reader in ended {
            match reader {
                Ok((state, closed)) => {
                    add(state);
                    outcome = outcome.and(closed);
                }
                Err(e) => outcome = Err(e),
            }
        }
        outcome?;
        Ok(report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rank 0's training source of epoch 1, without compute or trace.
    fn epoch_one<'a>(
        plan: &'a EpochPlan,
        dataset: &'a Dataset,
        format: &'a dyn FileFormat,
        storage: &'a dyn Storage,
        comm: &'a dyn Comm,
    ) -> BatchSource<'a> {
        BatchSource {
            plan,
            epoch: 1,
            phase: Phase::Train,
            rank: 0,
            dataset,
            split: &dataset.train,
            format,
            storage,
            preprocess_time: &TimeSpec::ZERO,
            comm,
            seed: 0,
            trace: None,
            meters: None,
            opens_per_sample: false,
        }
    }

    /// A storage that counts every call made to it.
    #[derive(Default)]
    struct Untouched(AtomicU64);

    impl Untouched {
        fn called<T>(&self) -> std::io::Result<T> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Err(std::io::Error::other("the storage was asked"))
        }
    }

    impl Storage for Untouched {
        fn describe(&self, key: &str) -> String {
            key.to_string()
        }

        fn read_all(
            &self,
            _: &str,
            _: &mut crate::storage::IoBuffer,
        ) -> std::io::Result<crate::storage::RangeRead> {
            self.called()
        }

        fn read_range(
            &self,
            _: &str,
            _: u64,
            _: usize,
            _: &mut crate::storage::IoBuffer,
        ) -> std::io::Result<crate::storage::RangeRead> {
            self.called()
        }

        fn read_ranges(
            &self,
            _: &str,
            _: &[(u64, usize)],
            _: crate::storage::Window,
            _: &mut crate::storage::IoBuffer,
            _: &mut crate::storage::OnRange<'_>,
        ) -> std::io::Result<()> {
            self.called()
        }

        fn map_range(&self, _: &str, _: u64, _: usize) -> std::io::Result<crate::storage::Mapped> {
            self.called()
        }

        fn hold(&self, _: &str) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }

        fn release(&self, _: &str) -> std::io::Result<()> {
            self.called()
        }

        fn release_all(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }

        fn size(&self, _: &str) -> std::io::Result<u64> {
            self.called()
        }

        fn create(&self, _: &str) -> std::io::Result<Box<dyn crate::storage::ObjectWriter + '_>> {
            self.called()
        }

        fn open_sequential(
            &self,
            _: &str,
        ) -> std::io::Result<Box<dyn crate::storage::ObjectReader + '_>> {
            self.called()
        }

        fn evict(&self, _: &str) -> std::io::Result<()> {
            self.called()
        }

        fn exists(&self, _: &str) -> std::io::Result<bool> {
            self.called()
        }

        fn make_folder(&self, _: &str) -> std::io::Result<()> {
            self.called()
        }

        fn delete(&self, _: &str) -> std::io::Result<bool> {
            self.called()
        }

        fn list_dir(
            &self,
            _: &str,
            _: &mut dyn FnMut(&str, crate::storage::EntryKind),
        ) -> std::io::Result<()> {
            self.called()
        }

        fn accounting(&self) -> crate::storage::Accounting {
            self.0.fetch_add(1, Ordering::SeqCst);
            crate::storage::Accounting::Exact
        }

        fn sync(&self) -> std::io::Result<()> {
            self.called()
        }
    }

    fn config(yaml: &str) -> crate::config::Config {
        use crate::config::value::Value;
        crate::config::Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap()
    }

    /// Epoch 1's training plan of one rank under `config`.
    fn train_plan(config: &crate::config::Config) -> EpochPlan {
        crate::plan::EpochPlan::new(
            crate::plan::PlanSpec::for_phase(config, Phase::Train, 1, 0),
            1,
        )
    }

    /// The synthetic loader's readers build every planned batch through the same threads and
    /// hand-offs, and never ask the storage for anything: no read, no open, no eviction.
    #[test]
    fn a_loader_that_reads_no_storage_never_asks_it() {
        let config = config(
            "dataset:\n  num_files_train: 24\n  num_samples_per_file: 2\nreader:\n  batch_size: 3\n  \
             data_loader: synthetic\n  page_cache: evict_after_read\n",
        );
        let format = crate::format::for_config(&config, false).unwrap();
        assert!(!format.reads_storage());
        let plan = train_plan(&config);
        let dataset = Dataset::from_config(&config);
        let storage = Untouched::default();
        let comm = crate::comm::ThreadGroup::new(1);
        let source = epoch_one(&plan, &dataset, format.as_ref(), &storage, &comm);
        assert_eq!(plan.steps(), 16);
        for threads in [0, 1, 3] {
            std::thread::scope(|scope| {
                let settings = LoaderSettings::new(threads, 2);
                let mut loader = Loader::start(scope, &source, settings, Vec::new()).unwrap();
                for _ in 0..plan.steps() {
                    assert_eq!(
                        loader.next_batch().unwrap(),
                        LoadedBatch {
                            samples: 3,
                            bytes: 0
                        }
                    );
                }
                let report = loader.finish().unwrap();
                assert_eq!(report.read_latency.count(), 48);
            });
        }
        assert_eq!(storage.0.load(Ordering::SeqCst), 0, "the storage was asked");
    }

    /// Before the trainer takes batch k, the readers have started at most k + threads × factor
    /// batches, and they do reach that bound (the prefetch really happens), in step order.
    #[test]
    fn readers_stay_within_the_outstanding_bound() {
        for (threads, prefetch_size, batch) in [(2u64, 2u64, 3u64), (3, 8, 1), (1, 2, 2), (4, 2, 5)]
        {
            let yaml =
                format!("dataset:\n  num_files_train: 240\nreader:\n  data_loader: pytorch\n  batch_size: {batch}\n");
            let config = config(&yaml);
            let plan = train_plan(&config);
            let dataset = Dataset::from_config(&config);
            let format = RecordingFormat::default();
            let storage = crate::storage::LocalFs::new("/nonexistent");
            let comm = crate::comm::ThreadGroup::new(1);
            let source = epoch_one(&plan, &dataset, &format, &storage, &comm);
            let settings = LoaderSettings::new(threads, prefetch_size);
            let outstanding = threads * settings.prefetch_factor;
            std::thread::scope(|scope| {
                let mut loader = Loader::start(scope, &source, settings, Vec::new()).unwrap();
                for step in 0..plan.steps() {
                    let bound = (step + outstanding).min(plan.steps()) * batch;
                    // Correct readers reach the bound and stop there.
                    while format.count() < bound {
                        std::thread::yield_now();
                    }
                    let started = format.count();
                    assert_eq!(
                        started, bound,
                        "threads {threads}, step {step}: {started} samples read ahead"
                    );
                    assert_eq!(
                        loader.next_batch().unwrap(),
                        LoadedBatch {
                            samples: batch,
                            bytes: batch * 10
                        }
                    );
                }
                let report = loader.finish().unwrap();
                assert_eq!(report.read_latency.count(), plan.steps() * batch);
            });
        }
    }

    /// Records each read as (file key, sample) and which thread read it, in read order, without
    /// touching storage; each read counts 10 bytes.
    #[derive(Default)]
    struct RecordingFormat(Mutex<Vec<(String, u64, std::thread::ThreadId)>>);

    impl RecordingFormat {
        fn count(&self) -> u64 {
            self.0.lock().unwrap().len() as u64
        }
    }

    impl FileFormat for RecordingFormat {
        fn encode(
            &self,
            _: &str,
            _: &crate::dataset::FileShape,
            _: &mut rand::rngs::SmallRng,
            _: &mut crate::format::Encoded,
        ) -> Result<()> {
            Ok(())
        }

        fn reader(&self) -> Box<dyn SampleReader + '_> {
            Box::new(self)
        }
    }

    impl SampleReader for &RecordingFormat {
        fn read_sample(
            &mut self,
            _: &dyn Storage,
            key: &str,
            sample: u64,
            _: &mut ReadBuffer,
        ) -> Result<crate::format::SampleRead> {
            let mut reads = self.0.lock().unwrap();
            reads.push((key.to_string(), sample, std::thread::current().id()));
            Ok(crate::format::SampleRead {
                offset: 0,
                bytes: 10,
            })
        }
    }

    /// The TensorFlow pipeline's reads, against its rule restated record by record: before the
    /// trainer takes batch k, the workers read exactly what the rule lets them (the cycle hands
    /// on records in interleave order up to the first unread one, as far as the prefetch and
    /// shuffle buffers call for; each open file's worker reads up to 2 records past what the
    /// cycle took from it), each file is read in order by one thread, `3 × read_threads` files
    /// are open before the first batch, and each batch counts the records pulled in for it.
    #[test]
    fn the_tensorflow_pipeline_reads_what_its_buffers_call_for() {
        use std::collections::{HashMap, HashSet};
        for (threads, prefetch, maps, shuffle, batch, files, spf) in [
            (2u64, 2u64, 1u64, 5u64, 4u64, 14u64, 6u64),
            (1, 0, 1, 1, 3, 5, 4),
            (3, 1, 2, 40, 2, 20, 3),
            (4, 3, 1, 7, 5, 9, 8),
            (2, 1, 3, 1, 1, 7, 1),
        ] {
            let yaml = format!(
                "dataset:\n  format: tfrecord\n  num_files_train: {files}\n  \
                 num_samples_per_file: {spf}\nreader:\n  data_loader: tensorflow\n  \
                 read_threads: {threads}\n  batch_size: {batch}\n  prefetch_size: {prefetch}\n  \
                 computation_threads: {maps}\n  shuffle_size: {shuffle}\n  sample_shuffle: seed\n"
            );
            let config = config(&yaml);
            let plan = train_plan(&config);
            let order = *plan
                .interleave()
                .expect("the TensorFlow loader over TFRecord");
            let dataset = Dataset::from_config(&config);
            let format = RecordingFormat::default();
            let storage = crate::storage::LocalFs::new("/nonexistent");
            let comm = crate::comm::ThreadGroup::new(1);
            let source = epoch_one(&plan, &dataset, &format, &storage, &comm);
            let key_of = |file: u64| {
                let mut key = String::new();
                dataset.write_file_key(&mut key, &dataset.train, file);
                key
            };
            // Interleave position of each (key, sample).
            let position: HashMap<(String, u64), u64> = (0..order.len())
                .map(|p| {
                    let record = plan.interleaved_record(0, p).unwrap();
                    ((key_of(record.file), record.sample), p)
                })
                .collect();
            // The rule, restated: what may be read once `taken` batches are taken (`asked` asked).
            let allowed = |taken: u64, asked: u64| -> u64 {
                // The prefetch's batches and the parallel map's, past those taken.
                let wanted = (taken + prefetch + maps).max(asked);
                let target = (wanted * batch + shuffle).min(order.len());
                let mut read = vec![0u64; order.files() as usize];
                loop {
                    let first_unread = (0..order.len())
                        .find(|&p| {
                            let (f, r) = order.record_at(p);
                            read[f as usize] <= r
                        })
                        .unwrap_or(order.len());
                    let handed = target.min(first_unread);
                    let mut moved = false;
                    for worker in 0..order.workers() {
                        // A worker's file: its first not read to the end.
                        let Some(file) = (worker..order.files())
                            .step_by(order.workers() as usize)
                            .find(|&f| read[f as usize] < spf)
                        else {
                            continue;
                        };
                        let taken_of = (0..handed)
                            .filter(|&p| order.record_at(p).0 == file)
                            .count() as u64;
                        if read[file as usize] < taken_of + 2 {
                            read[file as usize] += 1;
                            moved = true;
                        }
                    }
                    if !moved {
                        return read.iter().sum();
                    }
                }
            };
            let case = format!("threads {threads} prefetch {prefetch} shuffle {shuffle} batch {batch} files {files}×{spf}");
            std::thread::scope(|scope| {
                let settings = LoaderSettings::new(threads, prefetch);
                let mut loader = Loader::start(scope, &source, settings, Vec::new()).unwrap();
                let mut counted = 0;
                for step in 0..plan.steps() {
                    // Steps taken and asked are the same while the trainer computes; with no
                    // prefetch, nothing is pulled for the next step before it asks.
                    let bound = allowed(step, step);
                    while (format.0.lock().unwrap().len() as u64) < bound {
                        std::thread::yield_now();
                    }
                    let reads = format.0.lock().unwrap().len() as u64;
                    assert_eq!(reads, bound, "{case}, before step {step}");
                    // Every worker has its file open from the start; never more than one each.
                    let mut per_file: HashMap<String, u64> = HashMap::new();
                    for (key, _, _) in format.0.lock().unwrap().iter() {
                        *per_file.entry(key.clone()).or_insert(0) += 1;
                    }
                    let open = per_file.values().filter(|&&n| n < spf).count() as u64;
                    assert!(open <= order.workers(), "{case}: {open} files open");
                    if step == 0 {
                        assert!(per_file.len() as u64 >= order.workers(), "{case}");
                    }
                    let loaded = loader.next_batch().unwrap();
                    assert!(
                        format.0.lock().unwrap().len() as u64 >= plan.needed_for(step),
                        "{case}: batch {step} left before its records were read"
                    );
                    let pulled = (0..order.len())
                        .filter(|&p| plan.pulled_for(p) == step)
                        .count() as u64;
                    assert_eq!(
                        loaded,
                        LoadedBatch {
                            samples: pulled,
                            bytes: pulled * 10
                        },
                        "{case}, step {step}"
                    );
                    counted += pulled;
                }
                loader.finish().unwrap();
                let reads = format.0.lock().unwrap();
                assert!(counted <= reads.len() as u64);
                // Each record at most once, each file in order by one thread.
                let mut seen = HashSet::new();
                let mut reader_of = HashMap::new();
                let mut next_of: HashMap<&str, u64> = HashMap::new();
                for (key, sample, thread) in reads.iter() {
                    assert!(
                        seen.insert((key.clone(), *sample)),
                        "{case}: {key} {sample} twice"
                    );
                    assert!(position.contains_key(&(key.clone(), *sample)));
                    assert_eq!(
                        reader_of.entry(key.clone()).or_insert(*thread),
                        thread,
                        "{case}"
                    );
                    let next = next_of.entry(key.as_str()).or_insert(0);
                    assert_eq!(sample, next, "{case}: {key} out of order");
                    *next += 1;
                }
            });
        }
    }

    /// DLIO's DALI loader, against DALI's behaviour restated: before the trainer takes batch k,
    /// exactly the batches up to k + depth − 1 are read (depth `prefetch_size`, 2 when 0); each
    /// batch is cut into `min(read_threads, batch)` contiguous pieces, each read by one thread
    /// in order; the samples are each rank's in their natural order, whatever the shuffle keys.
    #[test]
    fn the_dali_loader_cuts_each_batch_among_its_workers_one_batch_at_a_time() {
        for (threads, prefetch, batch) in [(3u64, 2u64, 7u64), (2, 0, 4), (4, 1, 2), (1, 3, 5)] {
            let yaml = format!(
                "dataset:\n  format: npz\n  num_files_train: 12\n  num_samples_per_file: 5\n\
                 reader:\n  data_loader: dali\n  read_threads: {threads}\n  \
                 batch_size: {batch}\n  prefetch_size: {prefetch}\n  sample_shuffle: seed\n  \
                 file_shuffle: seed\n"
            );
            let config = config(&yaml);
            let plan = train_plan(&config);
            let dataset = Dataset::from_config(&config);
            let format = RecordingFormat::default();
            let storage = crate::storage::LocalFs::new("/nonexistent");
            let comm = crate::comm::ThreadGroup::new(1);
            let source = epoch_one(&plan, &dataset, &format, &storage, &comm);
            let depth = config.reader.dali_queue_depth();
            let case = format!("threads {threads} prefetch {prefetch} batch {batch}");
            let key_of = |file: u64| {
                let mut key = String::new();
                dataset.write_file_key(&mut key, &dataset.train, file);
                key
            };
            std::thread::scope(|scope| {
                let settings = LoaderSettings {
                    dali: true,
                    dali_depth: config.reader.dali_queue_depth(),
                    ..LoaderSettings::new(threads, prefetch)
                };
                let mut loader = Loader::start(scope, &source, settings, Vec::new()).unwrap();
                for step in 0..plan.steps() {
                    let bound = (step + depth).min(plan.steps()) * batch;
                    while (format.0.lock().unwrap().len() as u64) < bound {
                        std::thread::yield_now();
                    }
                    assert_eq!(
                        format.0.lock().unwrap().len() as u64,
                        bound,
                        "{case}, step {step}"
                    );
                    assert_eq!(
                        loader.next_batch().unwrap(),
                        LoadedBatch {
                            samples: batch,
                            bytes: batch * 10
                        },
                        "{case}"
                    );
                }
                loader.finish().unwrap();
            });
            let reads = format.0.lock().unwrap();
            assert_eq!(reads.len() as u64, plan.steps() * batch, "{case}");
            let pieces = threads.max(1).min(batch);
            for (step, chunk) in reads.chunks(batch as usize).enumerate() {
                // Natural order: sample g of the epoch is file g / 5, sample g % 5.
                let mut sorted: Vec<(String, u64)> =
                    chunk.iter().map(|r| (r.0.clone(), r.1)).collect();
                sorted.sort_by_key(|(key, sample)| {
                    let file = (0..12).find(|&f| key_of(f) == *key).unwrap();
                    file * 5 + sample
                });
                let expected: Vec<(String, u64)> = (step as u64 * batch..(step as u64 + 1) * batch)
                    .map(|g| (key_of(g / 5), g % 5))
                    .collect();
                assert_eq!(sorted, expected, "{case}: batch {step}");
                // Each piece by one thread, in order; as many threads as pieces (one may take two
                // pieces when another is slow, so at most that many).
                let threads_seen: std::collections::HashSet<_> =
                    chunk.iter().map(|r| r.2).collect();
                assert!(threads_seen.len() as u64 <= pieces, "{case}: batch {step}");
                for (start, len) in (0..pieces).map(|p| {
                    let (size, longer) = (batch / pieces, batch % pieces);
                    (p * size + p.min(longer), size + u64::from(p < longer))
                }) {
                    let piece: Vec<_> = expected[start as usize..(start + len) as usize].to_vec();
                    let read: Vec<_> = chunk
                        .iter()
                        .filter(|r| piece.contains(&(r.0.clone(), r.1)))
                        .collect();
                    assert!(
                        read.iter().all(|r| r.2 == read[0].2),
                        "{case}: a piece split"
                    );
                    let order: Vec<_> = read.iter().map(|r| (r.0.clone(), r.1)).collect();
                    assert_eq!(order, piece, "{case}: a piece out of order");
                }
            }
        }
    }

    /// DLIO's TensorFlow generators (formats other than TFRecord): before the trainer takes
    /// batch k, thread t has read exactly its share's batches up to 2 past those the interleave
    /// handed on from it (`min(k + prefetch_size, steps)` batches handed on, in turn), and each
    /// thread reads a contiguous run of the rank's samples.
    #[test]
    fn tensorflow_generators_read_their_shares_as_far_as_the_interleave_calls_for() {
        for (threads, prefetch, batch) in [(2u64, 2u64, 3u64), (3, 0, 2), (1, 4, 5), (4, 1, 1)] {
            let yaml = format!(
                "dataset:\n  format: npz\n  num_files_train: 60\nreader:\n  \
                 data_loader: tensorflow\n  read_threads: {threads}\n  batch_size: {batch}\n  \
                 prefetch_size: {prefetch}\n"
            );
            let config = config(&yaml);
            let plan = train_plan(&config);
            let dataset = Dataset::from_config(&config);
            let format = RecordingFormat::default();
            let storage = crate::storage::LocalFs::new("/nonexistent");
            let comm = crate::comm::ThreadGroup::new(1);
            let source = epoch_one(&plan, &dataset, &format, &storage, &comm);
            let steps = plan.steps();
            let bound = |taken: u64| -> u64 {
                let handed_on = (taken + prefetch).min(steps);
                (0..threads)
                    .map(|t| {
                        let own = (t..steps).step_by(threads as usize).count() as u64;
                        let from_t = (t..handed_on).step_by(threads as usize).count() as u64;
                        own.min(from_t + 2)
                    })
                    .sum::<u64>()
                    * batch
            };
            std::thread::scope(|scope| {
                let settings = LoaderSettings::new(threads, prefetch);
                let mut loader = Loader::start(scope, &source, settings, Vec::new()).unwrap();
                for step in 0..steps {
                    while format.count() < bound(step) {
                        std::thread::yield_now();
                    }
                    assert_eq!(
                        format.count(),
                        bound(step),
                        "threads {threads} prefetch {prefetch}, step {step}"
                    );
                    assert_eq!(loader.next_batch().unwrap().samples, batch);
                }
                loader.finish().unwrap();
            });
        }
    }

    /// A local folder whose mappings are recorded (key, in order); nothing else is served.
    struct MapRecorder {
        inner: crate::storage::LocalFs,
        maps: Mutex<Vec<String>>,
        /// Objects read, whole or in part (DALI's index files; samples under `dont_use_mmap`).
        reads: Mutex<Vec<String>>,
    }

    impl MapRecorder {
        fn refused<T>() -> std::io::Result<T> {
            Err(std::io::Error::other("not served by this test's storage"))
        }

        fn count(&self) -> u64 {
            self.maps.lock().unwrap().len() as u64
        }
    }

    impl Storage for MapRecorder {
        fn describe(&self, key: &str) -> String {
            key.to_string()
        }

        fn read_all(
            &self,
            key: &str,
            buf: &mut crate::storage::IoBuffer,
        ) -> std::io::Result<crate::storage::RangeRead> {
            self.reads.lock().unwrap().push(key.to_string());
            self.inner.read_all(key, buf)
        }

        fn read_range(
            &self,
            key: &str,
            offset: u64,
            len: usize,
            buf: &mut crate::storage::IoBuffer,
        ) -> std::io::Result<crate::storage::RangeRead> {
            self.reads.lock().unwrap().push(key.to_string());
            self.inner.read_range(key, offset, len, buf)
        }

        fn read_ranges(
            &self,
            _: &str,
            _: &[(u64, usize)],
            _: crate::storage::Window,
            _: &mut crate::storage::IoBuffer,
            _: &mut crate::storage::OnRange<'_>,
        ) -> std::io::Result<()> {
            Self::refused()
        }

        fn map_range(
            &self,
            key: &str,
            offset: u64,
            len: usize,
        ) -> std::io::Result<crate::storage::Mapped> {
            self.maps.lock().unwrap().push(key.to_string());
            self.inner.map_range(key, offset, len)
        }

        fn size(&self, key: &str) -> std::io::Result<u64> {
            self.inner.size(key)
        }

        fn create(&self, _: &str) -> std::io::Result<Box<dyn crate::storage::ObjectWriter + '_>> {
            Self::refused()
        }

        fn open_sequential(
            &self,
            _: &str,
        ) -> std::io::Result<Box<dyn crate::storage::ObjectReader + '_>> {
            Self::refused()
        }

        fn evict(&self, _: &str) -> std::io::Result<()> {
            Self::refused()
        }

        fn exists(&self, _: &str) -> std::io::Result<bool> {
            Self::refused()
        }

        fn make_folder(&self, _: &str) -> std::io::Result<()> {
            Self::refused()
        }

        fn delete(&self, _: &str) -> std::io::Result<bool> {
            Self::refused()
        }

        fn list_dir(
            &self,
            _: &str,
            _: &mut dyn FnMut(&str, crate::storage::EntryKind),
        ) -> std::io::Result<()> {
            Self::refused()
        }

        fn accounting(&self) -> crate::storage::Accounting {
            crate::storage::Accounting::Exact
        }

        fn sync(&self) -> std::io::Result<()> {
            Self::refused()
        }
    }

    /// DLIO's native DALI loader, against what DALI 2.4 did under DLIO (strace), restated: one
    /// whole-file mapping per file; once the trainer took k batches, exactly the stream positions
    /// `batch × (k + prefetch + 2) + min(fill, shard)` are taken, pad slots (the pass's last batch
    /// filled up) read nothing; unshuffled, the stream is shard 0's files in order, pass after
    /// pass; shuffled, each pass reads the same order, every file of the shard once. Rank 1 of 2
    /// reads what rank 0 reads: the first half of the files.
    #[test]
    fn the_native_dali_loader_reads_shard_zero_as_far_as_its_queues_call_for() {
        use std::collections::HashSet;
        for (files, world, rank, batch, prefetch, shuffle_size, preprocess) in [
            (12u64, 1u64, 0u64, 2u64, 1u64, None, 0.0),
            (16, 2, 1, 3, 2, None, 0.0),
            (15, 1, 0, 4, 0, Some(5u64), 0.0),
            (20, 2, 1, 2, 3, Some(3), 0.001),
            (9, 1, 0, 2, 1, Some(40), 0.0),
        ] {
            let shuffle = match shuffle_size {
                Some(size) => format!("  sample_shuffle: seed\n  shuffle_size: {size}\n"),
                None => "  sample_shuffle: off\n".to_string(),
            };
            let yaml = format!(
                "dataset:\n  format: npy\n  num_files_train: {files}\n  num_samples_per_file: 2\n\
                 reader:\n  data_loader: native_dali\n  read_threads: 3\n  batch_size: {batch}\n  \
                 prefetch_size: {prefetch}\n  preprocess_time: {preprocess}\n{shuffle}"
            );
            let config = config(&yaml);
            let plan = crate::plan::EpochPlan::new(
                crate::plan::PlanSpec::for_phase(&config, Phase::Train, world, 0),
                1,
            );
            let dataset = Dataset::from_config(&config);
            let key_of = |file: u64| {
                let mut key = String::new();
                dataset.write_file_key(&mut key, &dataset.train, file);
                key
            };
            let dir = std::env::temp_dir().join(format!(
                "dlio-rs-native-dali-{}-{files}-{batch}",
                std::process::id()
            ));
            for file in 0..files {
                let path = dir.join(key_of(file));
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, vec![file as u8; 100]).unwrap();
            }
            let storage = MapRecorder {
                inner: crate::storage::LocalFs::new(&dir),
                maps: Mutex::new(Vec::new()),
                reads: Mutex::new(Vec::new()),
            };
            let format = crate::format::for_config(&config, false).unwrap();
            let comm = crate::comm::ThreadGroup::new(world as usize);
            let preprocess_time = config.reader.preprocess_time.clone();
            let source = BatchSource {
                rank,
                preprocess_time: &preprocess_time,
                ..epoch_one(&plan, &dataset, format.as_ref(), &storage, &comm)
            };
            // The rule, restated.
            let shard = files / world;
            let pass = shard.div_ceil(batch) * batch;
            let fill = shuffle_size.unwrap_or(1).min(shard);
            let depth = prefetch.max(1) + 2;
            let reads_within =
                |positions: u64| positions / pass * shard + (positions % pass).min(shard);
            let case = format!("{files} files, world {world}, batch {batch}, prefetch {prefetch}, shuffle {shuffle_size:?}");
            // DLIO's steps: samples (files × 2) / batch / world.
            assert_eq!(plan.steps(), files * 2 / batch / world, "{case}");
            std::thread::scope(|scope| {
                let settings = LoaderSettings::new(3, prefetch);
                let mut loader = Loader::start(scope, &source, settings, Vec::new()).unwrap();
                for step in 0..plan.steps() {
                    let bound = reads_within(batch * (step + depth) + fill);
                    while storage.count() < bound {
                        std::thread::yield_now();
                    }
                    assert_eq!(storage.count(), bound, "{case}, before step {step}");
                    let loaded = loader.next_batch().unwrap();
                    assert_eq!(loaded.bytes, loaded.samples * 100, "{case}");
                }
                loader.finish().unwrap();
            });
            let maps = storage.maps.lock().unwrap().clone();
            let first_half: HashSet<String> = if shuffle_size.is_none() {
                (0..shard).map(key_of).collect()
            } else {
                maps.iter().take(shard as usize).cloned().collect()
            };
            // Shard 0 of a shuffled list is some `shard` files, each once per pass.
            assert_eq!(first_half.len() as u64, shard, "{case}");
            for (i, key) in maps.iter().enumerate() {
                let expected = &maps[i % shard as usize];
                assert_eq!(key, expected, "{case}: read {i} is not the pass's");
                if shuffle_size.is_none() {
                    assert_eq!(*key, key_of(i as u64 % shard), "{case}: read {i}");
                }
            }
            // Every rank's batches are rank 0's, and only shard 0's files.
            if world > 1 {
                for step in 0..plan.steps() {
                    let mine: Vec<_> = plan.batch(rank, step).collect();
                    assert_eq!(mine, plan.batch(0, step).collect::<Vec<_>>(), "{case}");
                    assert!(
                        mine.iter().all(|s| first_half.contains(&key_of(s.file))),
                        "{case}"
                    );
                }
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    /// DLIO's native DALI loader over images and TFRecord, against DALI 2.4 under DLIO (strace),
    /// restated: the tfrecord pipeline reads the index of every file of the split when it is
    /// built; the reader maps each file it enters once (a TFRecord file once for all its
    /// records, which are the samples), or with `dont_use_mmap` reads each sample with one
    /// request, in shard 0's order, and takes exactly the stream positions `batch × (k +
    /// prefetch + 2) + min(fill, shard)` once the trainer took k batches; every sample goes
    /// through the operator (images decoded, records parsed), so a damaged one fails the run,
    /// naming its file.
    #[test]
    fn the_native_dali_loader_maps_images_and_records_and_runs_their_operators() {
        for (format, files, per_file, batch, prefetch, shuffle_size, maps) in [
            ("jpeg", 10u64, 1u64, 3u64, 1u64, None, true),
            ("jpeg", 7, 1, 2, 1, None, false),
            ("png", 6, 1, 2, 2, None, true),
            ("tfrecord", 6, 4, 3, 1, None, true),
            ("tfrecord", 8, 3, 2, 2, Some(5u64), true),
            ("tfrecord", 5, 3, 2, 1, Some(4), false),
        ] {
            let shuffle = match shuffle_size {
                Some(size) => format!("  sample_shuffle: seed\n  shuffle_size: {size}\n"),
                None => "  sample_shuffle: off\n".to_string(),
            };
            let yaml = format!(
                "dataset:\n  format: {format}\n  num_files_train: {files}\n  \
                 num_samples_per_file: {per_file}\n  record_length_bytes: 4096\n  \
                 record_length_bytes_stdev: 0\n\
                 reader:\n  data_loader: native_dali\n  read_threads: 3\n  batch_size: {batch}\n  \
                 prefetch_size: {prefetch}\n  dont_use_mmap: {}\n{shuffle}",
                !maps
            );
            let config = config(&yaml);
            let plan = train_plan(&config);
            let dataset = Dataset::from_config(&config);
            let key_of = |file: u64| {
                let mut key = String::new();
                dataset.write_file_key(&mut key, &dataset.train, file);
                key
            };
            let dir = std::env::temp_dir().join(format!(
                "dlio-rs-native-dali-{format}-{}-{files}",
                std::process::id()
            ));
            let local = crate::storage::LocalFs::new(&dir);
            let format_io = crate::format::for_config(&config, false).unwrap();
            let share = crate::generate::Share {
                local_ranks: 0..1,
                world: 1,
            };
            let quiet = crate::progress::Display::for_stderr(true);
            crate::generate::write_share(&dataset, format_io.as_ref(), &local, &share, 1, quiet)
                .unwrap();
            let storage = MapRecorder {
                inner: local,
                maps: Mutex::new(Vec::new()),
                reads: Mutex::new(Vec::new()),
            };
            let comm = crate::comm::ThreadGroup::new(1);
            let source = epoch_one(&plan, &dataset, format_io.as_ref(), &storage, &comm);
            let case = format!(
                "{format}, {files} files, batch {batch}, shuffle {shuffle_size:?}, maps {maps}"
            );
            // The rule, restated: samples are records for tfrecord, files otherwise; a file is
            // mapped when the stream enters it.
            let shard = files * per_file;
            let pass = shard.div_ceil(batch) * batch;
            let fill = shuffle_size.unwrap_or(1).min(shard);
            let depth = prefetch.max(1) + 2;
            let file_of = |position: u64| {
                let within = position % pass;
                (within < shard).then_some(within / per_file)
            };
            let indexes: Vec<String> = match format {
                "tfrecord" => (0..files)
                    .map(|f| crate::format::tfrecord_index_key(&key_of(f)))
                    .collect(),
                _ => Vec::new(),
            };
            // Mapped: a request when the stream enters a file; read: one per sample.
            let requests_within = |positions: u64| {
                let mut last = None;
                (0..positions)
                    .filter_map(file_of)
                    .filter(|&f| !maps || last.replace(f) != Some(f))
                    .count() as u64
            };
            let requests = || match maps {
                true => storage.count(),
                false => storage.reads.lock().unwrap().len() as u64 - indexes.len() as u64,
            };
            assert_eq!(plan.steps(), files * per_file / batch, "{case}");
            std::thread::scope(|scope| {
                let settings = LoaderSettings::new(3, prefetch);
                let mut loader = Loader::start(scope, &source, settings, Vec::new()).unwrap();
                while (storage.reads.lock().unwrap().len()) < indexes.len() {
                    std::thread::yield_now();
                }
                for step in 0..plan.steps() {
                    let bound = requests_within(batch * (step + depth) + fill);
                    while requests() < bound {
                        std::thread::yield_now();
                    }
                    assert_eq!(requests(), bound, "{case}, before step {step}");
                    let loaded = loader.next_batch().unwrap();
                    assert!(loaded.samples <= batch + fill, "{case}");
                }
                loader.finish().unwrap();
            });
            let mapped = storage.maps.lock().unwrap().clone();
            let reads = storage.reads.lock().unwrap().clone();
            let (index_reads, sample_reads) = reads.split_at(indexes.len().min(reads.len()));
            assert_eq!(
                index_reads, indexes,
                "{case}: the index files, read when it is built"
            );
            let (stream, other) = match maps {
                true => (mapped, sample_reads.to_vec()),
                false => (sample_reads.to_vec(), mapped),
            };
            assert!(other.is_empty(), "{case}: {other:?}");
            let expected: Vec<String> = (0..)
                .filter_map(file_of)
                .scan(None, |last, f| {
                    Some((!maps || last.replace(f) != Some(f)).then_some(f))
                })
                .flatten()
                .take(stream.len())
                .map(key_of)
                .collect();
            assert_eq!(stream, expected, "{case}: the stream's requests");
            // A damaged sample in the first batch: its operator fails the run, naming the file.
            let damaged = dir.join(key_of(0));
            let mut bytes = std::fs::read(&damaged).unwrap();
            let cut = bytes.len() / 2;
            bytes[cut..].iter_mut().for_each(|b| *b = !*b);
            bytes[..20].iter_mut().for_each(|b| *b = 0);
            std::fs::write(&damaged, &bytes).unwrap();
            let failed = std::thread::scope(|scope| {
                let settings = LoaderSettings::new(3, prefetch);
                let mut loader = Loader::start(scope, &source, settings, Vec::new()).unwrap();
                let first = loader.next_batch();
                let _ = loader.finish();
                first
            });
            let error = failed.expect_err(&case).to_string();
            assert!(error.contains(&key_of(0)), "{case}: {error}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
