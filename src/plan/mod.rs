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

pub mod permutation;

use crate::config::{Config, Format, Shuffle};
pub use permutation::{mix64, Permutation};

/// A sample: its file (index into the split's file list) and its index inside that file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
        PlanSpec {
            file_sharded,
            // Both phases read with the same threads (the loader's `reader.read_threads`).
            lanes: if file_sharded {
                config.reader.read_threads.max(1)
            } else {
                1
            },
            files,
            samples_per_file: config.dataset.num_samples_per_file,
            batch,
            world,
            max_steps,
            file_shuffle: config.reader.file_shuffle,
            sample_shuffle: config.reader.sample_shuffle,
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
/// epoch 1 too).
pub fn eval_due(config: &Config, epoch: u64) -> bool {
    let e = &config.evaluation;
    if !config.workflow.evaluation || config.dataset.num_files_eval == 0 {
        return false;
    }
    let mut next = e.eval_after_epoch;
    for past in 1..epoch {
        if past >= next {
            next += e.epochs_between_evals;
        }
    }
    epoch >= next
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
        let files_order = shuffle_key(spec.file_shuffle, &spec, epoch, 0xF11E)
            .map(|key| Permutation::new(spec.files, key));
        let samples_order = shuffle_key(spec.sample_shuffle, &spec, epoch, 0x5A3B)
            .filter(|_| !spec.file_sharded)
            .map(|key| Permutation::new(spec.total_samples(), key));
        let steps = spec.steps();
        let lanes = spec.file_sharded.then(|| Lanes {
            world: spec.world,
            files: spec.files_per_rank(),
            samples_per_file: spec.samples_per_file,
            batch: spec.batch,
            lanes: spec.lanes.max(1),
            steps,
        });
        EpochPlan {
            spec,
            steps,
            files_order,
            samples_order,
            lanes,
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
        let global = match (&self.samples_order, &self.lanes) {
            (Some(p), _) => p.apply(position),
            (None, Some(lanes)) => lanes.stream_index(position),
            (None, None) => position,
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
        Some(match (&self.samples_order, &self.lanes) {
            (Some(p), _) => p.invert(global),
            (None, Some(lanes)) => lanes.stream_position(global),
            (None, None) => global,
        })
    }

    /// The samples of batch `step` (0-based) of `rank`.
    pub fn batch(&self, rank: u64, step: u64) -> impl Iterator<Item = SampleRef> + '_ {
        debug_assert!(rank < self.spec.world && step < self.steps);
        let start = (rank * self.steps + step) * self.spec.batch;
        let mut last = None;
        (start..start + self.spec.batch)
            .map(move |position| self.sample_at_after(position, &mut last))
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
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn spec(files: u64, spf: u64, batch: u64, world: u64, shuffle: Shuffle) -> PlanSpec {
        PlanSpec {
            files,
            samples_per_file: spf,
            batch,
            world,
            max_steps: 0,
            file_shuffle: shuffle,
            sample_shuffle: shuffle,
            seed: 123,
            run_entropy: 99,
            seed_change_epoch: true,
            file_sharded: false,
            lanes: 1,
        }
    }

    fn all_reads(plan: &EpochPlan) -> Vec<SampleRef> {
        let world = plan.spec().world;
        (0..world)
            .flat_map(|r| (0..plan.steps()).flat_map(move |s| plan.batch(r, s).collect::<Vec<_>>()))
            .collect()
    }

    fn shuffles() -> impl Strategy<Value = (Shuffle, Shuffle)> {
        let one = prop_oneof![
            Just(Shuffle::Off),
            Just(Shuffle::Seed),
            Just(Shuffle::Random)
        ];
        (one.clone(), one)
    }

    proptest! {
        #[test]
        fn every_sample_at_most_once_and_equal_steps(
            files in 0u64..300, spf in 1u64..9, batch in 1u64..40, world in 1u64..9,
            (fs, ss) in shuffles(), epoch in 0u64..4, cap in 0u64..5, sharded: bool,
            lanes in 1u64..6,
        ) {
            let mut s = spec(files, spf, batch, world, Shuffle::Off);
            s.file_shuffle = fs;
            s.sample_shuffle = ss;
            s.max_steps = cap;
            s.file_sharded = sharded && files >= world;
            s.lanes = lanes;
            let plan = EpochPlan::new(s.clone(), epoch);
            let full = if s.file_sharded {
                files / world * spf / batch
            } else {
                files * spf / (batch * world)
            };
            let expected_steps = full.min(if cap > 0 { cap } else { u64::MAX });
            prop_assert_eq!(plan.steps(), expected_steps);
            let reads = all_reads(&plan);
            prop_assert_eq!(reads.len() as u64, plan.samples_read());
            let unique: HashSet<_> = reads.iter().copied().collect();
            prop_assert_eq!(unique.len(), reads.len(), "a sample was planned twice");
            for r in &reads {
                prop_assert!(r.file < files && r.sample < spf);
            }
            prop_assert_eq!(plan.samples_read() + plan.samples_not_read(), files * spf);
            if cap == 0 && !s.file_sharded {
                prop_assert!(plan.samples_not_read() < batch * world);
            }
            if s.file_sharded {
                // Every file is read by one rank only.
                let mut owner = std::collections::HashMap::new();
                for rank in 0..world {
                    for step in 0..plan.steps() {
                        for read in plan.batch(rank, step) {
                            prop_assert_eq!(*owner.entry(read.file).or_insert(rank), rank);
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn position_of_inverts_sample_at(
            files in 0u64..200, spf in 1u64..7, batch in 1u64..12, world in 1u64..5,
            (fs, ss) in shuffles(), epoch in 0u64..4, sharded: bool, cap in 0u64..6,
            lanes in 1u64..7,
        ) {
            let mut s = spec(files, spf, batch, world, Shuffle::Off);
            s.file_shuffle = fs;
            s.sample_shuffle = ss;
            s.file_sharded = sharded && files >= world;
            s.max_steps = cap;
            s.lanes = lanes;
            let plan = EpochPlan::new(s, epoch);
            for position in 0..files * spf {
                prop_assert_eq!(plan.position_of(plan.sample_at(position)), Some(position));
            }
            prop_assert_eq!(plan.position_of(SampleRef { file: files, sample: 0 }), None);
            prop_assert_eq!(plan.position_of(SampleRef { file: 0, sample: spf }), None);
        }
    }

    proptest! {
        /// What each reader thread of a rank reads, computed from the rule independently of the
        /// plan's arithmetic: first its own files (shard files j ≡ thread mod lanes) from their first
        /// record on, then, if its steps take more, records borrowed from other lanes' files; and
        /// no thread comes back to a file it has left.
        #[test]
        fn each_thread_streams_its_own_files_then_borrows(
            files in 1u64..120, spf in 1u64..9, batch in 1u64..20, world in 1u64..5,
            lanes in 1u64..7, cap in 0u64..12, file_shuffle: bool, epoch in 0u64..3,
        ) {
            let mut s = spec(files.max(world), spf, batch, world, Shuffle::Off);
            s.file_shuffle = if file_shuffle { Shuffle::Seed } else { Shuffle::Off };
            s.sample_shuffle = Shuffle::Seed;
            s.file_sharded = true;
            s.lanes = lanes;
            s.max_steps = cap;
            let plan = EpochPlan::new(s.clone(), epoch);
            let shard_files = s.files / world;
            let file_at = |slot: u64| plan.files_order.as_ref().map_or(slot, |p| p.apply(slot));
            let mut borrowed = 0;
            let mut expected_borrowed = 0;
            for rank in 0..world {
                for thread in 0..lanes {
                    let reads: Vec<SampleRef> = (thread..plan.steps())
                        .step_by(lanes as usize)
                        .flat_map(|step| plan.batch(rank, step).collect::<Vec<_>>())
                        .collect();
                    let own: Vec<SampleRef> = (thread..shard_files)
                        .step_by(lanes as usize)
                        .flat_map(|j| {
                            let file = file_at(rank * shard_files + j);
                            (0..spf).map(move |sample| SampleRef { file, sample })
                        })
                        .collect();
                    let from_own = reads.len().min(own.len());
                    prop_assert_eq!(&reads[..from_own], &own[..from_own]);
                    let own_files: HashSet<u64> = own.iter().map(|r| r.file).collect();
                    for read in &reads[from_own..] {
                        prop_assert!(!own_files.contains(&read.file), "borrowed its own record");
                    }
                    borrowed += reads.len() - from_own;
                    expected_borrowed += reads.len().saturating_sub(own.len());
                    // One run of consecutive records per file.
                    let mut left = HashSet::new();
                    for pair in reads.windows(2) {
                        if pair[0].file == pair[1].file {
                            prop_assert_eq!(pair[1].sample, pair[0].sample + 1);
                        } else {
                            left.insert(pair[0].file);
                            prop_assert!(!left.contains(&pair[1].file), "came back to a file");
                        }
                    }
                }
            }
            prop_assert_eq!(borrowed, expected_borrowed);
            // Without borrowing, every file is read by one thread only.
            if expected_borrowed == 0 {
                let mut reader = std::collections::HashMap::new();
                for rank in 0..world {
                    for step in 0..plan.steps() {
                        for read in plan.batch(rank, step) {
                            let thread = (rank, step % lanes);
                            prop_assert_eq!(*reader.entry(read.file).or_insert(thread), thread);
                        }
                    }
                }
            }
        }
    }

    /// Five files, four lanes, batches of two: lane 0 holds two files, its steps take six records
    /// and leave two spare, which lane 1 borrows in its last batch.
    #[test]
    fn a_short_lane_borrows_the_spare_records_of_a_long_one() {
        let mut s = spec(5, 4, 2, 1, Shuffle::Off);
        s.file_sharded = true;
        s.lanes = 4;
        let plan = EpochPlan::new(s.clone(), 1);
        let batches: Vec<Vec<(u64, u64)>> = (0..plan.steps())
            .map(|step| plan.batch(0, step).map(|r| (r.file, r.sample)).collect())
            .collect();
        assert_eq!(
            batches,
            vec![
                vec![(0, 0), (0, 1)],
                vec![(1, 0), (1, 1)],
                vec![(2, 0), (2, 1)],
                vec![(3, 0), (3, 1)],
                vec![(0, 2), (0, 3)],
                vec![(1, 2), (1, 3)],
                vec![(2, 2), (2, 3)],
                vec![(3, 2), (3, 3)],
                vec![(4, 0), (4, 1)],
                vec![(4, 2), (4, 3)],
            ]
        );
        // One lane is the stream in file order.
        s.lanes = 1;
        let natural: Vec<SampleRef> = (0..20)
            .map(|g| SampleRef {
                file: g / 4,
                sample: g % 4,
            })
            .collect();
        assert_eq!(all_reads(&EpochPlan::new(s, 1)), natural);
    }

    #[test]
    fn lanes_follow_the_loaders_read_threads() {
        use crate::config::value::Value;
        let plan_spec = |format: &str, threads: u64, phase: Phase| {
            let yaml = format!(
                "dataset:\n  format: {format}\n  num_files_train: 8\n  num_files_eval: 4\nreader:\n  read_threads: {threads}\n"
            );
            let config = Config::from_tree("t", Value::from_yaml(&yaml).unwrap()).unwrap();
            PlanSpec::for_phase(&config, phase, 2, 0)
        };
        for phase in [Phase::Train, Phase::Eval] {
            assert_eq!(plan_spec("tfrecord", 3, phase).lanes, 3);
            assert_eq!(plan_spec("tfrecord", 0, phase).lanes, 1);
            assert_eq!(plan_spec("npz", 3, phase).lanes, 1);
        }
    }

    #[test]
    fn seeded_plans_repeat_and_change_per_epoch() {
        let s = spec(64, 2, 4, 2, Shuffle::Seed);
        let e1 = all_reads(&EpochPlan::new(s.clone(), 1));
        assert_eq!(e1, all_reads(&EpochPlan::new(s.clone(), 1)));
        assert_ne!(e1, all_reads(&EpochPlan::new(s.clone(), 2)));
        let mut fixed = s.clone();
        fixed.seed_change_epoch = false;
        assert_eq!(
            all_reads(&EpochPlan::new(fixed.clone(), 1)),
            all_reads(&EpochPlan::new(fixed, 2))
        );
        let off = spec(64, 2, 4, 2, Shuffle::Off);
        let natural: Vec<SampleRef> = (0..128)
            .map(|g| SampleRef {
                file: g / 2,
                sample: g % 2,
            })
            .collect();
        assert_eq!(all_reads(&EpochPlan::new(off, 3)), natural);
    }

    #[test]
    fn random_depends_on_run_entropy() {
        let a = spec(64, 1, 4, 1, Shuffle::Random);
        let mut b = a.clone();
        b.run_entropy = 100;
        assert_ne!(
            all_reads(&EpochPlan::new(a, 1)),
            all_reads(&EpochPlan::new(b, 1))
        );
    }

    #[test]
    fn file_shuffle_alone_keeps_samples_of_a_file_together() {
        let mut s = spec(16, 4, 4, 1, Shuffle::Off);
        s.file_shuffle = Shuffle::Seed;
        let plan = EpochPlan::new(s, 1);
        for step in 0..plan.steps() {
            let files: HashSet<u64> = plan.batch(0, step).map(|r| r.file).collect();
            assert_eq!(files.len(), 1);
        }
    }

    fn due_epochs(after: u64, between: u64) -> Vec<u64> {
        let yaml = format!(
            "workflow:\n  evaluation: True\ndataset:\n  num_files_eval: 2\nevaluation:\n  eval_after_epoch: {after}\n  epochs_between_evals: {between}\n"
        );
        let config =
            Config::from_tree("t", crate::config::value::Value::from_yaml(&yaml).unwrap()).unwrap();
        (1..=8).filter(|&e| eval_due(&config, e)).collect()
    }

    #[test]
    fn eval_schedule_follows_dlio() {
        assert_eq!(due_epochs(1, 1), vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(due_epochs(2, 3), vec![2, 5, 8]);
        // DLIO's stateful rule: after 0 with step 2 evaluates after epochs 1, 2, 4, 6, 8.
        assert_eq!(due_epochs(0, 2), vec![1, 2, 4, 6, 8]);
        assert_eq!(due_epochs(9, 1), Vec::<u64>::new());
    }
}
