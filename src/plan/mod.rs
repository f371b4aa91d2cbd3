//! The epoch plan: which samples each rank reads in which order, as a pure function of
//! (configuration, seed, epoch, world size). Nothing here is stored per sample: the order is a
//! keyed [`Permutation`], and a rank's shard is a contiguous range of positions in it.
//!
//! Positions `[0, files × samples_per_file)` are cut into `world` contiguous shards of
//! `steps × batch` positions each; the remainder that would not give every rank a full batch (and
//! everything past `total_training_steps`) is not read, and is reported as such.
//!
//! Streamed formats (TFRecord) are sharded by file, as `tf.data`'s `shard` does: each rank gets
//! `files / world` whole files of the file order. TensorFlow reads `read_threads` of them at once
//! (`TFRecordDataset(num_parallel_reads=…)` interleaves them), each from its first record to its
//! last by one reader; here the rank's files are dealt to `lanes` (one per reader thread) and the
//! batch of step k, which the loader gives to thread k mod lanes, takes the next records of lane
//! k mod lanes (see `Lanes`). TensorFlow's sample shuffle is a buffer that reorders records after
//! they are read, so it does not change what storage sees, and the read order is the stream's.

pub mod dali_shard;
pub mod interleave;
pub mod permutation;

use crate::config::{Config, DataLoader, Format, Shuffle};
pub use dali_shard::{DaliReaderSpec, DaliShard};
pub use interleave::{Interleave, FILES_AHEAD_PER_LANE, RECORDS_AHEAD};
pub use permutation::{mix64, Permutation};

/// A sample: its file (index into the split's file list) and its index inside that file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SampleRef {
    pub file: u64,
    pub sample: u64,
}

/// Train or evaluation: the two reading phases of an epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Train,
    Eval,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Train => "train",
            Phase::Eval => "eval",
        }
    }
}

/// What the plan needs to know; everything else in the configuration is irrelevant to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanSpec {
    pub files: u64,
    pub samples_per_file: u64,
    pub batch: u64,
    pub world: u64,
    /// Cap on steps per epoch; 0 means no cap.
    pub max_steps: u64,
    pub file_shuffle: Shuffle,
    pub sample_shuffle: Shuffle,
    /// The seed for `seed` shuffles.
    pub seed: u64,
    /// Entropy drawn once per run for `random` shuffles (the same on every rank).
    pub run_entropy: u64,
    pub seed_change_epoch: bool,
    /// Whole files per rank, records in file order (streamed formats; needs files ≥ world).
    pub file_sharded: bool,
    /// With file sharding: the lanes a rank's files are dealt to, one per reader thread
    /// (`max(read_threads, 1)`); otherwise 1.
    pub lanes: u64,
    /// With file sharding, the TensorFlow loader's `tf.data` pipeline: the rank's records are
    /// read in the interleave order ([`Interleave`]) through its buffers, rather than dealt to
    /// lanes batch by batch.
    pub pipeline: Option<PipelineBuffers>,
    /// DLIO's TensorFlow loader over a format other than TFRecord: `lanes` generator threads,
    /// each taking a contiguous share of the rank's samples in file order (the plan's `Chunks`); the
    /// sample shuffle only relabels them there, so it is off.
    pub thread_chunks: bool,
    /// DLIO's `native_dali` loader: DALI's own reader (numpy, file or tfrecord), whose shard 0
    /// every rank reads ([`DaliShard`]); the shuffles are its own, the plan's are off.
    pub native_dali: Option<NativeDaliSpec>,
}

/// What the plan needs of DLIO's `native_dali` loader, before the epoch's key is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeDaliSpec {
    /// DLIO's `sample_shuffle` (DALI's `random_shuffle` when not off).
    pub shuffle: Shuffle,
    /// `initial_fill`: `shuffle_size`, or 1024 when 0.
    pub initial_fill: u64,
    /// The reader's `prefetch_queue_depth`: `prefetch_size`, or 1 when 0.
    pub prefetch: u64,
    /// DALI samples per file: the records of a file for `fn.readers.tfrecord`, else 1.
    pub per_file: u64,
    /// Whether `random_shuffle` shuffles the file list too (all but the tfrecord reader).
    pub shuffles_list: bool,
    /// The pipeline's `num_threads`, which run its operators: `read_threads`, or 1 when 0.
    pub threads: u64,
    /// Whether the reader maps files (DLIO's `dont_use_mmap` False) or reads them.
    pub maps: bool,
}

/// The buffers of the TensorFlow loader's pipeline, which decide when each record is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PipelineBuffers {
    /// Records of the shuffle buffer (`reader.shuffle_size`; 0 when samples are not shuffled,
    /// as DLIO then adds no shuffle).
    pub shuffle: u64,
    /// Batches the pipeline holds ready ahead of the trainer: the prefetch buffer's
    /// `reader.prefetch_size` and the parallel map's `reader.computation_threads` (tf.data's
    /// parallel map keeps as many results as calls it may run: measured with TensorFlow 2.21,
    /// one batch taken pulls `1 + prefetch_size + computation_threads` batches' records).
    pub ahead: u64,
}

impl PlanSpec {
    pub fn for_phase(config: &Config, phase: Phase, world: u64, run_entropy: u64) -> PlanSpec {
        let (files, batch, max_steps) = match phase {
            Phase::Train => (
                config.dataset.num_files_train,
                config.reader.batch_size,
                config.train.total_training_steps.max(0) as u64,
            ),
            Phase::Eval => (
                config.dataset.num_files_eval,
                config.reader.batch_size_eval,
                0,
            ),
        };
        let file_sharded = config.dataset.format == Format::Tfrecord && files >= world;
        let tensorflow = config.reader.data_loader == DataLoader::Tensorflow;
        let thread_chunks = tensorflow && config.dataset.format != Format::Tfrecord;
        let native = config.reader.data_loader == DataLoader::NativeDali;
        PlanSpec {
            native_dali: native.then(|| NativeDaliSpec {
                shuffle: config.reader.sample_shuffle,
                initial_fill: match config.reader.shuffle_size {
                    0 => 1024,
                    n => n,
                },
                prefetch: config.reader.prefetch_size.max(1),
                per_file: match config.dataset.format {
                    Format::Tfrecord => config.dataset.num_samples_per_file.max(1),
                    _ => 1,
                },
                shuffles_list: config.dataset.format != Format::Tfrecord,
                threads: config.reader.read_threads.max(1),
                maps: !config.reader.dont_use_mmap,
            }),
            file_sharded,
            thread_chunks,
            pipeline: (file_sharded && config.reader.data_loader == DataLoader::Tensorflow)
                .then_some(PipelineBuffers {
                    shuffle: match config.reader.sample_shuffle {
                        Shuffle::Off => 0,
                        Shuffle::Seed | Shuffle::Random => config.reader.shuffle_size,
                    },
                    ahead: config.reader.prefetch_size + config.reader.computation_threads,
                }),
            // Both phases read with the same threads (the loader's `reader.read_threads`).
            lanes: if file_sharded || thread_chunks {
                config.reader.read_threads.max(1)
            } else {
                1
            },
            files,
            samples_per_file: config.dataset.num_samples_per_file,
            batch,
            world,
            max_steps,
            // DLIO's DALI loader walks each rank's sample indices in order, whatever the keys.
            file_shuffle: match config.reader.data_loader {
                DataLoader::Dali | DataLoader::NativeDali => Shuffle::Off,
                _ => config.reader.file_shuffle,
            },
            // DLIO's TensorFlow generators read each thread's share in file order: its sample
            // shuffle permutes the labels only.
            sample_shuffle: match config.reader.data_loader {
                DataLoader::Dali | DataLoader::NativeDali => Shuffle::Off,
                _ if thread_chunks => Shuffle::Off,
                _ => config.reader.sample_shuffle,
            },
            seed: config.train.seed,
            run_entropy,
            seed_change_epoch: config.train.seed_change_epoch,
        }
    }

    pub fn total_samples(&self) -> u64 {
        self.files.saturating_mul(self.samples_per_file)
    }

    /// Files of each rank's shard when sharded by file.
    fn files_per_rank(&self) -> u64 {
        self.files / self.world.max(1)
    }

    /// Steps per epoch, the same on every rank: DLIO's floor(samples / batch / world), or with
    /// file sharding floor(files per rank × samples per file / batch), capped.
    pub fn steps(&self) -> u64 {
        let full = if self.file_sharded {
            self.files_per_rank() * self.samples_per_file / self.batch.max(1)
        } else {
            self.total_samples() / (self.batch * self.world).max(1)
        };
        if self.max_steps > 0 {
            full.min(self.max_steps)
        } else {
            full
        }
    }
}

/// Whether evaluation runs after `epoch` (1-based).
/// DLIO's rule: the next eval epoch starts at `eval_after_epoch`; an epoch at or past it
/// evaluates and moves it on by `epochs_between_evals` (so `eval_after_epoch: 0` evaluates after
/// epoch 1 too). Computed in closed form (`next_eval`), not by replaying the epochs before:
/// callers ask for every epoch of runs of up to a million.
pub fn eval_due(config: &Config, epoch: u64) -> bool {
    let e = &config.evaluation;
    if !config.workflow.evaluation || config.dataset.num_files_eval == 0 {
        return false;
    }
    epoch
        >= next_eval(
            e.eval_after_epoch,
            e.epochs_between_evals,
            epoch.saturating_sub(1),
        )
}

/// DLIO's next eval epoch once epochs `1..=past` have ended: it starts at `after` and moves on by
/// `between` (≥ 1) after each epoch at or past it. From `after ≥ 1` it moves exactly at `after`,
/// `after + between`, … (it is then always ahead of the epochs ended); from 0 it moves after
/// epoch 1 to `between`, and goes on as from `between` (or, with `between` 1, keeps one epoch
/// behind: every epoch evaluates).
fn next_eval(after: u64, between: u64, past: u64) -> u64 {
    let between = between.max(1);
    // From a start s ≥ 1: moved once for each of s, s + between, … that is ≤ past.
    let from = |start: u64| match past.checked_sub(start) {
        None => start,
        Some(beyond) => start.saturating_add(between.saturating_mul(beyond / between + 1)),
    };
    match (after, past, between) {
        (1.., _, _) => from(after),
        (0, 0, _) => 0,
        (0, _, 1) => past,
        (0, _, _) => from(between),
    }
}

/// Entropy for a run's `random` shuffles, drawn once per run so every rank plans the same order.
pub fn draw_run_entropy() -> u64 {
    use rand::{RngCore, SeedableRng};
    rand::rngs::SmallRng::from_os_rng().next_u64()
}

/// The plan of one epoch of one phase.
#[derive(Debug, Clone)]
pub struct EpochPlan {
    spec: PlanSpec,
    steps: u64,
    files_order: Option<Permutation>,
    samples_order: Option<Permutation>,
    /// With file sharding: how the ranks' files are dealt to their reader threads.
    lanes: Option<Lanes>,
    /// With the TensorFlow pipeline: each rank's shard read as the interleave reads it.
    interleave: Option<Shards>,
    /// With DLIO's TensorFlow generators: each rank's positions dealt to its threads in shares.
    chunks: Option<Chunks>,
    /// With DLIO's `native_dali` loader: shard 0, which every rank reads.
    dali: Option<DaliShard>,
}

fn shuffle_key(kind: Shuffle, spec: &PlanSpec, epoch: u64, purpose: u64) -> Option<u64> {
    let base = match kind {
        Shuffle::Off => return None,
        Shuffle::Seed => spec.seed,
        Shuffle::Random => spec.run_entropy,
    };
    let epoch_part = if spec.seed_change_epoch || kind == Shuffle::Random {
        epoch
    } else {
        0
    };
    Some(mix64(mix64(base ^ purpose).wrapping_add(epoch_part)))
}

impl EpochPlan {
    pub fn new(spec: PlanSpec, epoch: u64) -> EpochPlan {
        // TensorFlow's `list_files` sorts the names it is given: under its pipeline, the file
        // shuffle DLIO applies to its list is undone.
        let pipelined = spec.file_sharded && spec.pipeline.is_some();
        let files_order = shuffle_key(spec.file_shuffle, &spec, epoch, 0xF11E)
            .filter(|_| !pipelined)
            .map(|key| Permutation::new(spec.files, key));
        let samples_order = shuffle_key(spec.sample_shuffle, &spec, epoch, 0x5A3B)
            .filter(|_| !spec.file_sharded)
            .map(|key| Permutation::new(spec.total_samples(), key));
        let steps = spec.steps();
        let interleave = spec
            .pipeline
            .filter(|_| spec.file_sharded)
            .map(|buffers| Shards {
                world: spec.world,
                buffers,
                order: Interleave::new(spec.files_per_rank(), spec.samples_per_file, spec.lanes),
                read: steps * spec.batch,
            });
        let lanes = (spec.file_sharded && spec.pipeline.is_none()).then(|| Lanes {
            world: spec.world,
            files: spec.files_per_rank(),
            samples_per_file: spec.samples_per_file,
            batch: spec.batch,
            lanes: spec.lanes.max(1),
            steps,
        });
        let chunks = (spec.thread_chunks && !spec.file_sharded).then(|| Chunks {
            world: spec.world,
            steps,
            batch: spec.batch.max(1),
            lanes: spec.lanes.max(1),
        });
        // Each epoch builds a fresh DALI pipeline (DLIO's loader makes one per epoch).
        let dali = spec.native_dali.map(|native| {
            let reader = DaliReaderSpec {
                per_file: native.per_file,
                shuffles_list: native.shuffles_list,
                shuffle_key: shuffle_key(native.shuffle, &spec, epoch, 0xDA11),
                fill: match native.shuffle {
                    Shuffle::Off => 1,
                    _ => native.initial_fill.max(1),
                },
                prefetch: native.prefetch,
            };
            DaliShard::new(spec.files, spec.world, spec.batch, steps, reader)
        });
        EpochPlan {
            spec,
            steps,
            files_order,
            samples_order,
            lanes,
            interleave,
            chunks,
            dali,
        }
    }

    pub fn spec(&self) -> &PlanSpec {
        &self.spec
    }

    pub fn steps(&self) -> u64 {
        self.steps
    }

    pub fn batch_size(&self) -> u64 {
        self.spec.batch
    }

    /// Samples all ranks read this epoch.
    pub fn samples_read(&self) -> u64 {
        self.steps * self.spec.batch * self.spec.world
    }

    /// Samples of the dataset this epoch does not read (the remainder, and any step cap).
    pub fn samples_not_read(&self) -> u64 {
        self.spec.total_samples() - self.samples_read()
    }

    /// The sample at a position of the epoch's order.
    pub fn sample_at(&self, position: u64) -> SampleRef {
        self.sample_at_after(position, &mut None)
    }

    /// [`EpochPlan::sample_at`], given the file order's last answer `(file, its place)`, which
    /// it updates: consecutive samples mostly share their file, whose place in the shuffled file
    /// order is then not computed again.
    fn sample_at_after(&self, position: u64, last: &mut Option<(u64, u64)>) -> SampleRef {
        let spf = self.spec.samples_per_file;
        let global = match (&self.samples_order, &self.lanes, &self.interleave) {
            (Some(p), _, _) => p.apply(position),
            (None, Some(lanes), _) => lanes.stream_index(position),
            (None, None, Some(shards)) => shards.stream_index(position),
            (None, None, None) => self.chunks.map_or(position, |c| c.stream_index(position)),
        };
        let (file, sample) = (global / spf, global % spf);
        let file = match (&self.files_order, *last) {
            (None, _) => file,
            (Some(_), Some((known, placed))) if known == file => placed,
            (Some(p), _) => {
                let placed = p.apply(file);
                *last = Some((file, placed));
                placed
            }
        };
        SampleRef { file, sample }
    }

    /// The position of a sample in the epoch's order (the inverse of [`EpochPlan::sample_at`]), or
    /// None when the sample is not in the dataset. Positions from `samples_read()` on are the
    /// remainder this epoch does not read.
    pub fn position_of(&self, sample: SampleRef) -> Option<u64> {
        let spf = self.spec.samples_per_file;
        if sample.file >= self.spec.files || sample.sample >= spf {
            return None;
        }
        let file = match &self.files_order {
            Some(p) => p.invert(sample.file),
            None => sample.file,
        };
        let global = file * spf + sample.sample;
        Some(match (&self.samples_order, &self.lanes, &self.interleave) {
            (Some(p), _, _) => p.invert(global),
            (None, Some(lanes), _) => lanes.stream_position(global),
            (None, None, Some(shards)) => shards.stream_position(global),
            (None, None, None) => self.chunks.map_or(global, |c| c.stream_position(global)),
        })
    }

    /// The interleave order of each rank's shard, when the plan reads in `tf.data`'s order.
    pub fn interleave(&self) -> Option<&Interleave> {
        self.interleave.as_ref().map(|shards| &shards.order)
    }

    /// The TensorFlow pipeline's buffers, when the plan reads in `tf.data`'s order.
    pub fn pipeline(&self) -> Option<PipelineBuffers> {
        self.interleave.as_ref().map(|shards| shards.buffers)
    }

    /// The step (0-based) whose batch the pipeline pulls the record at interleave `position`
    /// in for: the first batch pulls the shuffle buffer's fill and itself; later ones, one
    /// record per record they take. Positions past the last step's are read ahead.
    pub fn pulled_for(&self, position: u64) -> u64 {
        let shuffle = self.pipeline().map_or(0, |b| b.shuffle);
        position.saturating_sub(shuffle) / self.spec.batch.max(1)
    }

    /// Records the pipeline must have handed on (read) before step `step`'s batch leaves it.
    pub fn needed_for(&self, step: u64) -> u64 {
        let (Some(order), Some(buffers)) = (self.interleave(), self.pipeline()) else {
            return (step + 1) * self.spec.batch;
        };
        ((step + 1) * self.spec.batch + buffers.shuffle).min(order.len())
    }

    /// How many records of the shard's file `file` the pipeline may read by the epoch's end:
    /// those its buffers call for once the last step is taken, and [`RECORDS_AHEAD`] more.
    pub fn readable_of_file(&self, file: u64) -> u64 {
        let (Some(order), Some(buffers)) = (self.interleave(), self.pipeline()) else {
            return 0;
        };
        let handed_on =
            ((self.steps + buffers.ahead) * self.spec.batch + buffers.shuffle).min(order.len());
        (order.taken_of_file(file, handed_on) + RECORDS_AHEAD).min(order.records_per_file())
    }

    /// Where a sample lies in the interleave orders: (rank, position in its order), when the
    /// plan reads in `tf.data`'s order and a rank's shard holds the sample.
    pub fn interleaved_place(&self, sample: SampleRef) -> Option<(u64, u64)> {
        let shards = self.interleave.as_ref()?;
        let global = self.position_of(sample)?;
        let (read, shard, world) = (shards.read, shards.order.len(), self.spec.world);
        if global < read * world {
            Some((global / read, global % read))
        } else if global - read * world < (shard - read) * world {
            let past = global - read * world;
            Some((past / (shard - read), read + past % (shard - read)))
        } else {
            None
        }
    }

    /// The record at `position` of `rank`'s interleave order (see [`EpochPlan::interleave`]);
    /// positions from `steps × batch` on are those no step takes.
    pub fn interleaved_record(&self, rank: u64, position: u64) -> Option<SampleRef> {
        let shards = self.interleave.as_ref()?;
        let (read, shard) = (shards.read, shards.order.len());
        if rank >= self.spec.world || position >= shard {
            return None;
        }
        let global = if position < read {
            rank * read + position
        } else {
            read * self.spec.world + rank * (shard - read) + (position - read)
        };
        Some(self.sample_at(global))
    }

    /// Shard 0 as DALI's reader walks it, under DLIO's `native_dali` loader.
    pub fn dali(&self) -> Option<&DaliShard> {
        self.dali.as_ref()
    }

    /// The samples of batch `step` (0-based) of `rank`. Under `native_dali` every rank's batch
    /// is the one DALI's reader hands on from shard 0 (a whole file is sample 0).
    pub fn batch(&self, rank: u64, step: u64) -> impl Iterator<Item = SampleRef> + '_ {
        debug_assert!(rank < self.spec.world && step < self.steps);
        let start = (rank * self.steps + step) * self.spec.batch;
        let mut last = None;
        (0..self.spec.batch).map(move |index| match &self.dali {
            Some(dali) => {
                let position = dali.emitted(step * self.spec.batch + index);
                dali.sample_at(position)
                    .expect("an emitted slot holds a sample")
            }
            None => self.sample_at_after(start + index, &mut last),
        })
    }
}

/// DLIO's TensorFlow loader over formats other than TFRecord (`tf_data_loader.py` with
/// `build_sample_map_iter`): `lanes` generator threads per rank, each reading a contiguous share
/// of the rank's samples in file order, batch after batch, and `tf.data`'s interleave handing on
/// their batches in turn (step `k` is thread `k mod lanes`'s). Here thread `t`'s share is the
/// samples of its steps: the rank's read positions are laid out share after share, so that each
/// thread streams through consecutive samples of consecutive files.
///
/// Positions: rank `r`'s step `k`, index `i` is position `(r × steps + k) × batch + i` as for
/// the other loaders; it reads the rank's sample at offset `start(k mod lanes) + (k div lanes) ×
/// batch + i`, where `start(t)` is the samples of the steps of threads before `t`. Past the
/// ranks' read positions, the order is the natural one.
#[derive(Debug, Clone, Copy)]
struct Chunks {
    world: u64,
    steps: u64,
    batch: u64,
    lanes: u64,
}

impl Chunks {
    /// Steps of thread `t`: those `≡ t mod lanes`.
    fn steps_of(&self, t: u64) -> u64 {
        self.steps / self.lanes + u64::from(t < self.steps % self.lanes)
    }

    /// Where thread `t`'s share starts in the rank's samples.
    fn start(&self, t: u64) -> u64 {
        self.batch * (t * (self.steps / self.lanes) + t.min(self.steps % self.lanes))
    }

    fn read(&self) -> u64 {
        self.steps * self.batch
    }

    fn stream_index(&self, position: u64) -> u64 {
        let read = self.read();
        if position >= read * self.world {
            return position;
        }
        let (rank, p) = (position / read, position % read);
        let (step, index) = (p / self.batch, p % self.batch);
        let t = step % self.lanes;
        rank * read + self.start(t) + step / self.lanes * self.batch + index
    }

    fn stream_position(&self, index: u64) -> u64 {
        let read = self.read();
        if index >= read * self.world {
            return index;
        }
        let (rank, offset) = (index / read, index % read);
        // The thread whose share holds the offset: the last with start ≤ offset (shares are
        // in thread order; empty ones, past the steps, are skipped by taking the last).
        let longer = self.steps % self.lanes;
        let long_share = (self.steps / self.lanes + 1) * self.batch;
        let t = if offset < longer * long_share {
            offset / long_share
        } else {
            longer + (offset - longer * long_share) / (self.steps / self.lanes * self.batch)
        };
        debug_assert!(offset - self.start(t) < self.steps_of(t) * self.batch);
        let within = offset - self.start(t);
        let step = within / self.batch * self.lanes + t;
        rank * read + step * self.batch + within % self.batch
    }
}

/// The order of each rank's shard as `tf.data`'s interleave reads it (the TensorFlow loader).
/// A rank's shard is `shard(world, rank)` of the files in name order: files `rank, rank + world,
/// …` (the shard's file `j` is the split's file `j × world + rank`).
///
/// Positions: each rank's first `steps × batch` records of its interleave order, rank after rank
/// (batch `k` names the records the pipeline hands on for step `k` before its shuffle buffer mixes
/// them); then the rest of each rank's order, rank after rank, which the pipeline may read ahead
/// but no step takes; then the files no rank was given.
#[derive(Debug, Clone, Copy)]
struct Shards {
    world: u64,
    buffers: PipelineBuffers,
    order: Interleave,
    /// Records each rank's steps take.
    read: u64,
}

impl Shards {
    /// The index in the file order (file slot × samples per file + record) of a position.
    fn stream_index(&self, position: u64) -> u64 {
        let (read, shard) = (self.read, self.order.len());
        let tail = shard - read;
        let (rank, local) = if position < read * self.world {
            (position / read, position % read)
        } else if position - read * self.world < tail * self.world {
            let past = position - read * self.world;
            (past / tail, read + past % tail)
        } else {
            return position;
        };
        let (file, record) = self.order.record_at(local);
        (file * self.world + rank) * self.order.records_per_file() + record
    }

    /// The inverse of [`Shards::stream_index`].
    fn stream_position(&self, index: u64) -> u64 {
        let (read, shard) = (self.read, self.order.len());
        if index >= shard * self.world {
            return index;
        }
        let spf = self.order.records_per_file();
        let slot = index / spf;
        let rank = slot % self.world;
        let at = self.order.position(slot / self.world, index % spf);
        if at < read {
            rank * read + at
        } else {
            read * self.world + rank * (shard - read) + (at - read)
        }
    }
}

/// With file sharding: how each rank's shard of whole files is read by its reader threads, so that
/// every file is streamed by one thread from its first record to its last, as each of the files
/// TensorFlow's parallel reads interleave is streamed by one reader.
///
/// Shard file j (in the file order) goes to lane j mod `lanes`; a lane's stream is its files'
/// records in order. Step k of a rank goes to lane k mod `lanes`, the thread the loader gives it
/// to, and takes the next `batch` records of the lane's stream. Lanes may hold more records than
/// their steps take, or fewer (files not divisible by lanes, batch not dividing a lane): a lane
/// that runs short first finishes its own stream, then borrows, in its last batches, the records
/// the other lanes have spare, lane after lane, in stream order. Only those borrowed records are
/// read by a thread other than their file's, and only there does a thread enter a file past its
/// start. What no lane takes is the rank's unread tail.
///
/// Positions: each rank's `steps × batch` read positions (step × batch + index in the batch), rank
/// after rank; then each rank's unread tail, rank after rank; then the files no rank was given.
#[derive(Debug, Clone, Copy)]
struct Lanes {
    world: u64,
    /// Files of each rank's shard.
    files: u64,
    samples_per_file: u64,
    batch: u64,
    lanes: u64,
    steps: u64,
}

/// What one lane holds and what its steps take.
#[derive(Debug, Clone, Copy)]
struct LaneShare {
    records: u64,
    /// Records it takes from other lanes (its steps take more than it holds).
    borrows: u64,
    /// Records it holds beyond what its steps take.
    spare: u64,
}

/// Where a record of a rank's shard is read.
enum Place {
    /// At this offset of the rank's read positions.
    Read(u64),
    /// At this offset of the rank's unread tail.
    Unread(u64),
}

impl Lanes {
    /// Records each rank reads.
    fn read_per_rank(&self) -> u64 {
        self.steps * self.batch
    }

    fn shard(&self) -> u64 {
        self.files * self.samples_per_file
    }

    /// A lane's share. It depends only on whether the lane is one of those dealt one file more
    /// (`lane < files mod lanes`) and one step more (`lane < steps mod lanes`), so sums over lanes
    /// take four terms, whatever the number of lanes.
    fn share_of(&self, extra_file: bool, extra_step: bool) -> LaneShare {
        let records = (self.files / self.lanes + u64::from(extra_file)) * self.samples_per_file;
        let takes = (self.steps / self.lanes + u64::from(extra_step)) * self.batch;
        LaneShare {
            records,
            borrows: takes.saturating_sub(records),
            spare: records.saturating_sub(takes),
        }
    }

    fn share(&self, lane: u64) -> LaneShare {
        self.share_of(
            lane < self.files % self.lanes,
            lane < self.steps % self.lanes,
        )
    }

    /// The sum of `field` over lanes `[0, lane)`.
    fn before(&self, lane: u64, field: fn(&LaneShare) -> u64) -> u64 {
        let extra_file = lane.min(self.files % self.lanes);
        let extra_step = lane.min(self.steps % self.lanes);
        let both = extra_file.min(extra_step);
        [
            (true, true, both),
            (true, false, extra_file - both),
            (false, true, extra_step - both),
            (false, false, lane + both - extra_file - extra_step),
        ]
        .into_iter()
        .filter(|&(_, _, count)| count > 0)
        .map(|(file, step, count)| count * field(&self.share_of(file, step)))
        .sum()
    }

    /// The lane whose range of `field` holds `at` (which lies below the sum over all lanes): the
    /// last lane with `before(lane) ≤ at`.
    fn lane_holding(&self, at: u64, field: fn(&LaneShare) -> u64) -> u64 {
        let (mut low, mut high) = (0, self.lanes);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if self.before(mid, field) <= at {
                low = mid;
            } else {
                high = mid;
            }
        }
        low
    }

    /// The shard index (file × samples per file + record) of record `m` of a lane's stream.
    fn shard_index(&self, lane: u64, m: u64) -> u64 {
        let spf = self.samples_per_file;
        (lane + m / spf * self.lanes) * spf + m % spf
    }

    /// The read offset of what a lane's steps take at `m` (own records first, then borrowed).
    fn read_offset(&self, lane: u64, m: u64) -> u64 {
        let (step_of_lane, in_batch) = (m / self.batch, m % self.batch);
        (step_of_lane * self.lanes + lane) * self.batch + in_batch
    }

    /// The shard index of a read offset.
    fn read_index(&self, offset: u64) -> u64 {
        let step = offset / self.batch;
        let lane = step % self.lanes;
        let m = step / self.lanes * self.batch + offset % self.batch;
        let share = self.share(lane);
        if m < share.records {
            return self.shard_index(lane, m);
        }
        self.spare_index(self.before(lane, |s| s.borrows) + (m - share.records))
    }

    /// The shard index of the `at`-th spare record, lane after lane.
    fn spare_index(&self, at: u64) -> u64 {
        let lane = self.lane_holding(at, |s| s.spare);
        let share = self.share(lane);
        let first_spare = share.records - share.spare;
        self.shard_index(lane, first_spare + (at - self.before(lane, |s| s.spare)))
    }

    /// The inverse of [`Lanes::read_index`] and of the unread tail's order.
    fn place(&self, index: u64) -> Place {
        let spf = self.samples_per_file;
        let (file, record) = (index / spf, index % spf);
        let lane = file % self.lanes;
        let m = file / self.lanes * spf + record;
        let share = self.share(lane);
        let first_spare = share.records - share.spare;
        if m < first_spare {
            return Place::Read(self.read_offset(lane, m));
        }
        let at = self.before(lane, |s| s.spare) + (m - first_spare);
        let borrowed = self.before(self.lanes, |s| s.borrows);
        if at >= borrowed {
            return Place::Unread(at - borrowed);
        }
        let borrower = self.lane_holding(at, |s| s.borrows);
        let own = self.share(borrower).records;
        Place::Read(self.read_offset(borrower, own + (at - self.before(borrower, |s| s.borrows))))
    }

    /// The index in the file order (file slot × samples per file + record) of a position.
    fn stream_index(&self, position: u64) -> u64 {
        let (read, shard) = (self.read_per_rank(), self.shard());
        let tail = shard - read;
        if position < read * self.world {
            return position / read * shard + self.read_index(position % read);
        }
        let past = position - read * self.world;
        if past < tail * self.world {
            let unread = self.before(self.lanes, |s| s.borrows) + past % tail;
            return past / tail * shard + self.spare_index(unread);
        }
        shard * self.world + (past - tail * self.world)
    }

    /// The inverse of [`Lanes::stream_index`].
    fn stream_position(&self, index: u64) -> u64 {
        let (read, shard) = (self.read_per_rank(), self.shard());
        let tail = shard - read;
        if index >= shard * self.world {
            return shard * self.world + (index - shard * self.world);
        }
        let (rank, local) = (index / shard, index % shard);
        match self.place(local) {
            Place::Read(offset) => rank * read + offset,
            Place::Unread(offset) => read * self.world + rank * tail + offset,
        }
    }
}

#[cfg(test)]
mod tests;
