//! The epoch plan: which samples each rank reads in which order, as a pure function of
//! (configuration, seed, epoch, world size). Nothing here is stored per sample: the order is a
//! keyed [`Permutation`], and a rank's shard is a contiguous range of positions in it.
//!
//! Positions `[0, files × samples_per_file)` are cut into `world` contiguous shards of
//! `steps × batch` positions each; the remainder that would not give every rank a full batch (and
//! everything past `total_training_steps`) is not read, and is reported as such.
//!
//! Streamed formats (TFRecord) are sharded by file, as `tf.data`'s `shard` does: each rank gets
//! `files / world` whole files of the file order and reads their records in order; its shard is
//! the first `steps × batch` of those records. TensorFlow's sample shuffle is a buffer that reorders
//! records after they are read, so it does not change what storage sees, and the read order is the
//! stream's.

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
        PlanSpec {
            file_sharded: config.dataset.format == Format::Tfrecord && files >= world,
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
        EpochPlan {
            spec,
            steps,
            files_order,
            samples_order,
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
        let spf = self.spec.samples_per_file;
        let global = match &self.samples_order {
            Some(p) => p.apply(position),
            None if self.spec.file_sharded => self.stream_index(position),
            None => position,
        };
        let (file, sample) = (global / spf, global % spf);
        let file = match &self.files_order {
            Some(p) => p.apply(file),
            None => file,
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
        Some(match &self.samples_order {
            Some(p) => p.invert(global),
            None if self.spec.file_sharded => self.stream_position(global),
            None => global,
        })
    }

    /// With file sharding: the index in the file order (file slot × samples per file + record)
    /// of a position. Positions below `samples_read()` are each rank's read prefix of its files,
    /// rank after rank; then come the ranks' unread tails, then the files no rank was given.
    fn stream_index(&self, position: u64) -> u64 {
        let (read_per_rank, shard, tail) = self.stream_geometry();
        let world = self.spec.world;
        if position < read_per_rank * world {
            let (rank, offset) = (
                position / read_per_rank.max(1),
                position % read_per_rank.max(1),
            );
            return rank * shard + offset;
        }
        let past = position - read_per_rank * world;
        if past < tail * world {
            let (rank, offset) = (past / tail, past % tail);
            return rank * shard + read_per_rank + offset;
        }
        shard * world + (past - tail * world)
    }

    /// The inverse of [`EpochPlan::stream_index`].
    fn stream_position(&self, index: u64) -> u64 {
        let (read_per_rank, shard, tail) = self.stream_geometry();
        let world = self.spec.world;
        if index >= shard * world {
            return (read_per_rank + tail) * world + (index - shard * world);
        }
        let (rank, offset) = (index / shard, index % shard);
        if offset < read_per_rank {
            rank * read_per_rank + offset
        } else {
            read_per_rank * world + rank * tail + (offset - read_per_rank)
        }
    }

    /// With file sharding: samples each rank reads, samples in each rank's files, and the unread
    /// tail of those.
    fn stream_geometry(&self) -> (u64, u64, u64) {
        let read_per_rank = self.steps * self.spec.batch;
        let shard = self.spec.files_per_rank() * self.spec.samples_per_file;
        (read_per_rank, shard, shard - read_per_rank)
    }

    /// The samples of batch `step` (0-based) of `rank`.
    pub fn batch(&self, rank: u64, step: u64) -> impl Iterator<Item = SampleRef> + '_ {
        debug_assert!(rank < self.spec.world && step < self.steps);
        let start = (rank * self.steps + step) * self.spec.batch;
        (start..start + self.spec.batch).map(move |position| self.sample_at(position))
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
        ) {
            let mut s = spec(files, spf, batch, world, Shuffle::Off);
            s.file_shuffle = fs;
            s.sample_shuffle = ss;
            s.max_steps = cap;
            s.file_sharded = sharded && files >= world;
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
                // Every file is read by one rank only, and a rank reads its records in order.
                let mut owner = std::collections::HashMap::new();
                for rank in 0..world {
                    let mut last: Option<SampleRef> = None;
                    for step in 0..plan.steps() {
                        for read in plan.batch(rank, step) {
                            prop_assert_eq!(*owner.entry(read.file).or_insert(rank), rank);
                            if let Some(prev) = last.filter(|p| p.file == read.file) {
                                prop_assert_eq!(read.sample, prev.sample + 1);
                            }
                            last = Some(read);
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn position_of_inverts_sample_at(
            files in 0u64..200, spf in 1u64..7, (fs, ss) in shuffles(), epoch in 0u64..4,
            sharded: bool, cap in 0u64..4,
        ) {
            let mut s = spec(files, spf, 3, 2, Shuffle::Off);
            s.file_shuffle = fs;
            s.sample_shuffle = ss;
            s.file_sharded = sharded && files >= 2;
            s.max_steps = cap;
            let plan = EpochPlan::new(s, epoch);
            for position in 0..files * spf {
                prop_assert_eq!(plan.position_of(plan.sample_at(position)), Some(position));
            }
            prop_assert_eq!(plan.position_of(SampleRef { file: files, sample: 0 }), None);
            prop_assert_eq!(plan.position_of(SampleRef { file: 0, sample: spf }), None);
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
}
