//! The record order of `tf.data`'s parallel interleave over one rank's shard of whole files:
//! `TFRecordDataset(files, num_parallel_reads=N)` keeps `N` files in a cycle and takes one record
//! from each in turn (`block_length` 1); when a file ends, the next file of the shard takes its
//! place in the cycle, and once no file is left the cycle closes up over the files still open.
//!
//! Files of a shard hold the same number of records, so the files of one place in the cycle (a
//! *lane*) are the shard's files `l, l + N, l + 2N, …`, and the order is round robin over the
//! lanes, then, past the last round every lane takes part in, over the lanes dealt one file more
//! (`files mod N` of them). Positions are counted from 0 within the rank's shard; records are
//! named by (file of the shard, record in the file).

/// Records a file's worker may read ahead of what the cycle took from that file: TensorFlow's
/// `buffer_output_elements` default (`2 × block_length`, block length 1).
pub const RECORDS_AHEAD: u64 = 2;

/// Files open besides the cycle's, per file of the cycle: TensorFlow's
/// `prefetch_input_elements` default (`2 × cycle_length`).
pub const FILES_AHEAD_PER_LANE: u64 = 2;

/// The interleave order of one shard: `files` files of `records` records each, over `lanes`
/// places of the cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interleave {
    files: u64,
    records: u64,
    lanes: u64,
}

impl Interleave {
    /// The order of a shard of `files` files of `records` records, read `lanes` files at a time.
    pub fn new(files: u64, records: u64, lanes: u64) -> Interleave {
        Interleave {
            files,
            records,
            lanes: lanes.max(1),
        }
    }

    /// The files read at once, each by its own worker: the cycle's and those opened ahead of it
    /// (or the shard's files, if fewer). Worker `w` reads files `w, w + workers, …`.
    pub fn workers(&self) -> u64 {
        (self.lanes * (1 + FILES_AHEAD_PER_LANE)).min(self.files)
    }

    /// Records in the shard.
    pub fn len(&self) -> u64 {
        self.files * self.records
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The files read at once: the cycle's length.
    pub fn lanes(&self) -> u64 {
        self.lanes
    }

    pub fn files(&self) -> u64 {
        self.files
    }

    pub fn records_per_file(&self) -> u64 {
        self.records
    }

    /// Records a lane holds in the rounds every lane takes part in.
    fn common(&self) -> u64 {
        self.files / self.lanes * self.records
    }

    /// Lanes dealt one file more.
    fn longer(&self) -> u64 {
        self.files % self.lanes
    }

    /// Records of lane `lane`.
    fn lane_len(&self, lane: u64) -> u64 {
        self.common()
            + if lane < self.longer() {
                self.records
            } else {
                0
            }
    }

    /// The position of record `m` of lane `lane`'s stream (its files' records in order).
    fn lane_position(&self, lane: u64, m: u64) -> u64 {
        let common = self.common();
        if m < common {
            m * self.lanes + lane
        } else {
            common * self.lanes + (m - common) * self.longer() + lane
        }
    }

    /// The position of `record` of the shard's file `file`.
    pub fn position(&self, file: u64, record: u64) -> u64 {
        let lane = file % self.lanes;
        self.lane_position(lane, file / self.lanes * self.records + record)
    }

    /// The record at `position`: (file of the shard, record in the file).
    pub fn record_at(&self, position: u64) -> (u64, u64) {
        let rounds = self.common() * self.lanes;
        let (lane, m) = if position < rounds {
            (position % self.lanes, position / self.lanes)
        } else {
            let past = position - rounds;
            (past % self.longer(), self.common() + past / self.longer())
        };
        (lane + m / self.records * self.lanes, m % self.records)
    }

    /// How many of the first `count` positions are records of lane `lane`.
    fn lane_taken(&self, lane: u64, count: u64) -> u64 {
        let rounds = self.common() * self.lanes;
        let in_rounds = |n: u64, width: u64| {
            if n > lane {
                (n - lane).div_ceil(width)
            } else {
                0
            }
        };
        let taken = if count <= rounds {
            in_rounds(count, self.lanes)
        } else if lane < self.longer() {
            self.common() + in_rounds(count - rounds, self.longer())
        } else {
            self.common()
        };
        taken.min(self.lane_len(lane))
    }

    /// How many records of the shard's file `file` lie in the first `count` positions.
    pub fn taken_of_file(&self, file: u64, count: u64) -> u64 {
        let before = file / self.lanes * self.records;
        self.lane_taken(file % self.lanes, count)
            .saturating_sub(before)
            .min(self.records)
    }

    /// The first position not yet read, given for each lane its first file not read to the end
    /// (`next_file[lane]`, a file of that lane, or ≥ `files` once the lane is done) and how many
    /// records of that file have been read (`read_of(file)`): the interleave can hand on every
    /// record before it.
    pub fn first_unread(&self, next_file: &[u64], read_of: impl Fn(u64) -> u64) -> u64 {
        (0..self.lanes)
            .filter_map(|lane| {
                let file = next_file[lane as usize];
                (file < self.files).then(|| {
                    let m = file / self.lanes * self.records + read_of(file);
                    self.lane_position(lane, m)
                })
            })
            .min()
            .unwrap_or(self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order as TensorFlow's cycle produces it, record by record.
    fn replayed(files: u64, records: u64, lanes: u64) -> Vec<(u64, u64)> {
        let mut next_file = 0;
        let mut cycle: Vec<Option<(u64, u64)>> = (0..lanes)
            .map(|_| {
                let slot = (next_file < files).then_some((next_file, 0));
                next_file += 1;
                slot
            })
            .collect();
        let mut order = Vec::new();
        while cycle.iter().any(Option::is_some) {
            for slot in cycle.iter_mut() {
                if let Some((file, record)) = *slot {
                    order.push((file, record));
                    *slot = if record + 1 < records {
                        Some((file, record + 1))
                    } else if next_file < files {
                        next_file += 1;
                        Some((next_file - 1, 0))
                    } else {
                        None
                    };
                }
            }
        }
        order
    }

    #[test]
    fn the_order_is_the_cycles_and_each_look_up_inverts_the_other() {
        for (files, records, lanes) in [
            (1, 1, 1),
            (5, 3, 2),
            (7, 4, 3),
            (12, 16, 4),
            (3, 5, 8),
            (10, 1, 3),
            (9, 2, 9),
        ] {
            let order = Interleave::new(files, records, lanes);
            let replayed = replayed(files, records, lanes);
            assert_eq!(replayed.len() as u64, order.len());
            for (position, &(file, record)) in replayed.iter().enumerate() {
                let position = position as u64;
                assert_eq!(
                    order.record_at(position),
                    (file, record),
                    "{files} {records} {lanes} at {position}"
                );
                assert_eq!(order.position(file, record), position);
            }
            for count in 0..=order.len() {
                for file in 0..files {
                    let expected = replayed[..count as usize]
                        .iter()
                        .filter(|(f, _)| *f == file)
                        .count() as u64;
                    assert_eq!(
                        order.taken_of_file(file, count),
                        expected,
                        "file {file} of the first {count}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_first_unread_position_is_the_earliest_lanes() {
        let order = Interleave::new(6, 4, 3);
        // Lane 0 is on file 3 with 1 record read; lane 1 finished file 1, on file 4 with none;
        // lane 2 is done with file 2 and on file 5 with 2 read.
        let read = |file: u64| match file {
            3 => 1,
            5 => 2,
            _ => 0,
        };
        assert_eq!(order.first_unread(&[3, 4, 5], read), order.position(4, 0));
        assert_eq!(order.first_unread(&[6, 7, 8], read), 24);
        assert_eq!(order.first_unread(&[0, 1, 2], |_| 0), 0);
    }
}
