//! The shard DALI's own readers (DLIO's `native_dali` loader: `fn.readers.numpy` over npy,
//! `fn.readers.file` over jpeg/png, `fn.readers.tfrecord` over tfrecord) walk, and the order they
//! hand their samples on in, as measured on DALI 2.4 (docs/formats.md, "The native DALI loader").
//!
//! A DALI sample is a whole file for the numpy and file readers, a record for the tfrecord reader
//! (which finds the records through DLIO's index files). DLIO passes `num_shards = comm_size`
//! and no `shard_id`, so DALI's default shard 0 applies on every rank: each rank reads the first
//! `samples / world` samples of the list (of DALI's shuffled file list under `random_shuffle`,
//! for the numpy reader; the tfrecord reader keeps its files in order), the same on every rank.
//!
//! The reader walks its shard over and over (it never stops at the shard's end; DLIO's loop
//! stops taking batches): the *stream* is pass after pass of the shard's samples, each pass
//! followed by the pad slots that fill its last batch (`pad_last_batch`: copies of the pass's
//! last sample, never read). Stream positions are read in order, one at a time, by one thread.
//!
//! What the reader hands on (the *emitted* slots): each pass's samples once each, through a
//! shuffle buffer of `initial_fill` samples when `random_shuffle` (a sample drawn from the
//! buffer at random, the next position read into its place, the buffer drained at the pass's
//! end), in stream order otherwise; then the pass's pad slots. DALI's own generators (its fixed
//! seed for the file list, its `seed` for the buffer) are not reproduced: the list's shuffle is a
//! fixed [`Permutation`] of dlio-rs, the buffer's draws dlio-rs's seeded generator.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::{mix64, Permutation, SampleRef};

/// The key of DALI's file-list shuffle: DALI seeds it with a constant, so that every shard cuts
/// the same list; here a constant too.
const LIST_KEY: u64 = 0xDA11_F11E;

/// What the plan needs of DLIO's call of a DALI reader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DaliReaderSpec {
    /// DALI samples per file: 1 for the numpy and file readers (a file is a sample, whatever
    /// `num_samples_per_file`), the file's records for the tfrecord reader.
    pub per_file: u64,
    /// Whether `random_shuffle` also shuffles the file list (the numpy and file readers; the
    /// tfrecord reader keeps its files in order, measured: 8 files, `initial_fill` 4, read 0–3).
    pub shuffles_list: bool,
    /// `random_shuffle` (DLIO: `sample_shuffle` not off); the buffer's key when on.
    pub shuffle_key: Option<u64>,
    /// Samples read ahead of what is handed on: `initial_fill` (`shuffle_size`, or DALI's
    /// default 1024 when DLIO passes 0) when shuffling, else the 1 sample the reader keeps read.
    pub fill: u64,
    /// The reader's `prefetch_queue_depth` in batches (`prefetch_size`, or 1 when 0).
    pub prefetch: u64,
}

/// Batches the pipeline holds past the reader's queue, before the trainer takes them: DALI's
/// `Pipeline` keeps 2 outputs ahead (its default `prefetch_queue_depth`), measured with DLIO's
/// `DALIGenericIterator` as `batch × (taken + prefetch + 2) + fill` positions read.
pub const PIPELINE_BATCHES: u64 = 2;

/// Shard 0 of one phase's files, as one epoch's fresh DALI reader walks it.
#[derive(Debug, Clone)]
pub struct DaliShard {
    /// DALI samples of the shard (`files × per_file / world`).
    shard: u64,
    batch: u64,
    list: Option<Permutation>,
    reader: DaliReaderSpec,
    /// Each emitted slot of the epoch's `steps × batch`: the stream position of its sample, and
    /// the positions taken before it can be handed on (the buffer full when it is drawn).
    emitted: Vec<(u64, u64)>,
}

impl DaliShard {
    /// `files` of the split, `world` ranks, `steps` batches of `batch`.
    pub fn new(files: u64, world: u64, batch: u64, steps: u64, reader: DaliReaderSpec) -> Self {
        let per_file = reader.per_file.max(1);
        let shard = files * per_file / world.max(1);
        let batch = batch.max(1);
        let list = reader
            .shuffle_key
            .filter(|_| reader.shuffles_list)
            .map(|_| Permutation::new(files, mix64(LIST_KEY)));
        let mut this = DaliShard {
            shard,
            batch,
            list,
            reader,
            emitted: Vec::new(),
        };
        if shard > 0 {
            this.emitted = this.emit(steps * batch);
        }
        this
    }

    /// DALI samples (files, or records) in the shard every rank reads.
    pub fn samples(&self) -> u64 {
        self.shard
    }

    pub fn reader(&self) -> DaliReaderSpec {
        self.reader
    }

    /// Stream positions per pass: the shard's samples and the pads of its last batch.
    pub fn pass(&self) -> u64 {
        self.shard.div_ceil(self.batch) * self.batch
    }

    /// The sample read at stream `position` (a whole file is sample 0), or `None` for a pad slot
    /// (nothing read).
    pub fn sample_at(&self, position: u64) -> Option<SampleRef> {
        let within = position % self.pass().max(1);
        let per_file = self.reader.per_file.max(1);
        (within < self.shard).then(|| match &self.list {
            Some(list) => SampleRef {
                file: list.apply(within),
                sample: 0,
            },
            None => SampleRef {
                file: within / per_file,
                sample: within % per_file,
            },
        })
    }

    /// Files the shard's samples lie in (the first ones of the list, unshuffled).
    pub fn files_touched(&self) -> u64 {
        self.shard.div_ceil(self.reader.per_file.max(1))
    }

    /// The stream position of emitted slot `slot` (0-based, `step × batch + index`).
    pub fn emitted(&self, slot: u64) -> u64 {
        self.emitted[slot as usize].0
    }

    /// Stream positions the reader may have taken once the trainer took `taken` batches: its
    /// queue, the pipeline's and the fill, past what the trainer took. A fill larger than the
    /// shard reads the shard once (measured: 16 files, `initial_fill` 40, 16 opened).
    pub fn readable(&self, taken: u64) -> u64 {
        self.batch * (taken + self.reader.prefetch + PIPELINE_BATCHES)
            + self.reader.fill.min(self.shard)
    }

    /// Stream positions that must be taken before batch `step` can be handed on.
    pub fn needed_for(&self, step: u64) -> u64 {
        (step * self.batch..(step + 1) * self.batch)
            .map(|slot| self.emitted[slot as usize].1)
            .max()
            .unwrap_or(0)
    }

    /// The emission order of the first `slots` slots, pass after pass.
    fn emit(&self, slots: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(slots as usize);
        let mut rng = self.reader.shuffle_key.map(SmallRng::seed_from_u64);
        let mut pass = 0;
        while (out.len() as u64) < slots {
            let start = pass * self.pass();
            let end = start + self.shard;
            // Unshuffled, the buffer is the one sample read ahead, and the draw its only one.
            let fill = match rng {
                Some(_) => self.reader.fill.clamp(1, self.shard),
                None => 1,
            };
            let mut buffer: Vec<u64> = (start..start + fill).collect();
            let mut next = start + fill;
            while !buffer.is_empty() {
                let at = rng
                    .as_mut()
                    .map_or(0, |rng| rng.random_range(0..buffer.len()));
                out.push((buffer.swap_remove(at), next));
                if next < end {
                    buffer.push(next);
                    next += 1;
                }
            }
            let last = out.last().expect("a shard has a sample").0;
            out.extend((end..start + self.pass()).map(|pad| (last, pad + 1)));
            pass += 1;
        }
        out.truncate(slots as usize);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(
        files: u64,
        world: u64,
        batch: u64,
        steps: u64,
        key: Option<u64>,
        fill: u64,
    ) -> DaliShard {
        let reader = DaliReaderSpec {
            per_file: 1,
            shuffles_list: true,
            shuffle_key: key,
            fill,
            prefetch: 1,
        };
        DaliShard::new(files, world, batch, steps, reader)
    }

    impl DaliShard {
        /// The file of stream `position`, for readers whose samples are whole files.
        fn file_at(&self, position: u64) -> Option<u64> {
            self.sample_at(position).map(|s| s.file)
        }
    }

    /// Unshuffled: the first `files / world` files in order, pass after pass, the last batch of a
    /// pass filled with copies of its last sample (DALI 2.4: 8 files, batch 3 gave [0 1 2] [3 4 5]
    /// [6 7 7] [0 1 2]).
    #[test]
    fn unshuffled_passes_walk_the_first_files_and_pad_the_last_batch() {
        let s = shard(16, 2, 3, 5, None, 1);
        assert_eq!(s.samples(), 8);
        let emitted: Vec<Option<u64>> = (0..15).map(|slot| s.file_at(s.emitted(slot))).collect();
        let files: Vec<u64> = emitted.into_iter().map(Option::unwrap).collect();
        assert_eq!(files, [0, 1, 2, 3, 4, 5, 6, 7, 7, 0, 1, 2, 3, 4, 5]);
        assert_eq!(s.file_at(8), None, "the pad slot reads nothing");
        assert_eq!(s.file_at(9), Some(0));
        // The trainer's batch k needs the positions up to its last sample's.
        assert_eq!(s.needed_for(0), 3);
        assert_eq!(s.needed_for(2), 9);
    }

    /// Shuffled: every pass hands on each file of the shard once, none drawn before it is in the
    /// buffer (`fill` positions past the last handed on), the last batch padded with the last one
    /// drawn; the list is cut the same on every rank; another key, another order.
    #[test]
    fn the_shuffle_buffer_hands_on_each_file_once_per_pass_within_its_reach() {
        let (files, batch, fill) = (23u64, 4u64, 5u64);
        let s = shard(files, 1, batch, 30, Some(7), fill);
        let pass = s.pass();
        assert_eq!(pass, 24);
        for p in 0..5u64 {
            let slots = p * pass..((p + 1) * pass).min(120);
            let positions: Vec<u64> = slots.clone().map(|slot| s.emitted(slot)).collect();
            if positions.len() as u64 == pass {
                let mut real: Vec<u64> = positions[..files as usize].to_vec();
                real.sort_unstable();
                assert_eq!(
                    real,
                    (p * pass..p * pass + files).collect::<Vec<_>>(),
                    "pass {p}"
                );
                assert_eq!(
                    positions[23], positions[22],
                    "the pad copies the last drawn"
                );
            }
            for (j, &position) in positions.iter().enumerate().take(files as usize) {
                assert!(position < p * pass + j as u64 + fill, "pass {p} slot {j}");
            }
        }
        let order: Vec<u64> = (0..files).map(|slot| s.emitted(slot)).collect();
        assert_ne!(order, (0..files).collect::<Vec<_>>(), "the buffer shuffles");
        let other = shard(files, 1, batch, 30, Some(8), fill);
        assert_ne!(
            order,
            (0..files)
                .map(|slot| other.emitted(slot))
                .collect::<Vec<_>>()
        );
        // The list's cut: rank-independent, half the shuffled list for 2 ranks.
        let half = shard(files, 2, batch, 2, Some(9), fill);
        let cut: Vec<u64> = (0..half.samples())
            .map(|p| half.file_at(p).unwrap())
            .collect();
        let whole: Vec<u64> = (0..11).map(|p| s.file_at(p).unwrap()).collect();
        assert_eq!(cut, whole);
        assert_ne!(cut, (0..11).collect::<Vec<_>>());
    }

    /// The measured read-ahead: `batch × (taken + prefetch + 2) + fill` positions (DLIO 2.0.0,
    /// batch 2, prefetch 2: 9 files read before the first batch, 11 after it, 13 after two).
    #[test]
    fn the_reader_runs_its_queues_ahead_of_the_trainer() {
        let reader = DaliReaderSpec {
            per_file: 1,
            shuffles_list: true,
            shuffle_key: None,
            fill: 1,
            prefetch: 2,
        };
        let s = DaliShard::new(32, 1, 2, 16, reader);
        assert_eq!([s.readable(0), s.readable(1), s.readable(2)], [9, 11, 13]);
        let shuffled = DaliShard::new(32, 1, 2, 16, DaliReaderSpec { fill: 4, ..reader });
        assert_eq!(shuffled.readable(1), 14);
        let tiny = DaliShard::new(16, 1, 2, 8, DaliReaderSpec { fill: 40, ..reader });
        assert_eq!(tiny.readable(0), 8 + 16);
    }

    /// The tfrecord reader: a sample is a record, shard 0 the first `records / world` records of
    /// the files in order (DALI 2.4: 8 files of 4 records, 2 shards, read files 0–3), the file list
    /// never shuffled, only the buffer.
    #[test]
    fn records_are_the_tfrecord_readers_samples_and_its_files_stay_in_order() {
        let reader = DaliReaderSpec {
            per_file: 4,
            shuffles_list: false,
            shuffle_key: Some(3),
            fill: 4,
            prefetch: 1,
        };
        let s = DaliShard::new(8, 2, 2, 8, reader);
        assert_eq!((s.samples(), s.files_touched()), (16, 4));
        let stream: Vec<(u64, u64)> = (0..16)
            .map(|p| s.sample_at(p).map(|r| (r.file, r.sample)).unwrap())
            .collect();
        let expected: Vec<(u64, u64)> = (0..4).flat_map(|f| (0..4).map(move |r| (f, r))).collect();
        assert_eq!(stream, expected);
        let mut drawn: Vec<u64> = (0..16).map(|slot| s.emitted(slot)).collect();
        assert_ne!(drawn, (0..16).collect::<Vec<_>>(), "the buffer shuffles");
        drawn.sort_unstable();
        assert_eq!(drawn, (0..16).collect::<Vec<_>>());
        // 3 records of 5 files over 2 ranks: 7 records, the pass padded to 8.
        let odd = DaliShard::new(
            5,
            2,
            2,
            4,
            DaliReaderSpec {
                per_file: 3,
                ..reader
            },
        );
        assert_eq!((odd.samples(), odd.pass(), odd.files_touched()), (7, 8, 3));
        assert_eq!(odd.sample_at(6).map(|r| (r.file, r.sample)), Some((2, 0)));
        assert_eq!(odd.sample_at(7), None);
    }
}
