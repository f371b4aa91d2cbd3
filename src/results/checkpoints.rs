//! Checkpoint saves and loads of all ranks together, and the two ways they are rated:
//!
//! - **DLIO's** (summary.json, `[METRIC]` lines, per-epoch stats): per checkpoint, the bytes of
//!   all ranks over *rank 0's* duration, in GiB/s (DLIO's "GB"); the summary gives the mean and
//!   population stdev of these over the checkpoints.
//! - **MLPerf Storage's** (report.json, the terminal): per checkpoint, the duration is the
//!   *slowest* rank's, and the throughput the bytes of all ranks over that duration.
//!
//! Bytes are those written (or read): DLIO counts the tensors it allocated, which is the same but
//! for ZeRO 2 (twice the model) and legacy predefined layers (not counted); docs/deviations.md.

use crate::stats::{mean_stdev, CheckpointOp, CheckpointRecord, RankRecord};

const GIB: f64 = (1u64 << 30) as f64;

/// One save or load of a checkpoint, by every rank that took part.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckpointResult {
    pub op: CheckpointOp,
    pub epoch: u64,
    pub index: u64,
    pub step: u64,
    pub files: u64,
    pub bytes: u64,
    /// Rank 0's duration: DLIO's.
    pub rank0_seconds: f64,
    /// The slowest rank's duration: MLPerf's.
    pub max_seconds: f64,
    /// Each rank's duration, in rank order.
    pub per_rank_seconds: Vec<f64>,
    /// Seconds all ranks together spent making files durable (fsync).
    pub sync_seconds: f64,
    /// Bytes that came from the storage device (loads); `None` where not known.
    pub bytes_from_storage: Option<u64>,
    /// The first rank's start and the last rank's end, on the run's clock.
    pub start: f64,
    pub end: f64,
}

impl CheckpointResult {
    /// DLIO's throughput: GiB of all ranks over rank 0's duration.
    pub fn dlio_gib_per_second(&self) -> f64 {
        rate(self.bytes, self.rank0_seconds)
    }

    /// MLPerf's throughput: GiB of all ranks over the slowest rank's duration.
    pub fn gib_per_second(&self) -> f64 {
        rate(self.bytes, self.max_seconds)
    }

    /// The share of the ranks' time spent in fsync: their fsync seconds over the sum of their
    /// durations.
    pub fn sync_fraction(&self) -> f64 {
        let total: f64 = self.per_rank_seconds.iter().sum();
        if total > 0.0 {
            self.sync_seconds / total
        } else {
            0.0
        }
    }
}

fn rate(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / GIB / seconds
    } else {
        0.0
    }
}

/// Every checkpoint of the run, in order: each rank's `n`-th record is the same checkpoint (all
/// ranks save and load the same sequence).
pub fn from_ranks(ranks: &[RankRecord]) -> Vec<CheckpointResult> {
    let Some(first) = ranks.first() else {
        return Vec::new();
    };
    (0..first.checkpoints.len())
        .map(|n| {
            let records: Vec<&CheckpointRecord> =
                ranks.iter().filter_map(|r| r.checkpoints.get(n)).collect();
            let head = records[0];
            let per_rank_seconds: Vec<f64> = records.iter().map(|r| r.duration()).collect();
            CheckpointResult {
                op: head.op,
                epoch: head.epoch,
                index: head.index,
                step: head.step,
                files: records.iter().map(|r| r.files).sum(),
                bytes: records.iter().map(|r| r.bytes).sum(),
                rank0_seconds: head.duration(),
                max_seconds: per_rank_seconds.iter().copied().fold(0.0, f64::max),
                sync_seconds: records.iter().map(|r| r.sync_seconds).sum(),
                bytes_from_storage: records
                    .iter()
                    .try_fold(0u64, |sum, r| Some(sum + r.bytes_from_storage?)),
                start: records
                    .iter()
                    .map(|r| r.start)
                    .fold(f64::INFINITY, f64::min),
                end: records
                    .iter()
                    .map(|r| r.end)
                    .fold(f64::NEG_INFINITY, f64::max),
                per_rank_seconds,
            }
        })
        .collect()
}

/// DLIO's summary of the saves or the loads: mean and population stdev over the checkpoints of
/// the throughput (GiB/s) and the duration (s), both by rank 0's duration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DlioSummary {
    pub count: usize,
    pub throughput_mean: f64,
    pub throughput_stdev: f64,
    pub duration_mean: f64,
    pub duration_stdev: f64,
}

pub fn dlio_summary(checkpoints: &[CheckpointResult], op: CheckpointOp) -> Option<DlioSummary> {
    let of_op: Vec<&CheckpointResult> = checkpoints.iter().filter(|c| c.op == op).collect();
    if of_op.is_empty() {
        return None;
    }
    let throughputs: Vec<f64> = of_op.iter().map(|c| c.dlio_gib_per_second()).collect();
    let durations: Vec<f64> = of_op.iter().map(|c| c.rank0_seconds).collect();
    let (throughput_mean, throughput_stdev) = mean_stdev(&throughputs);
    let (duration_mean, duration_stdev) = mean_stdev(&durations);
    Some(DlioSummary {
        count: of_op.len(),
        throughput_mean,
        throughput_stdev,
        duration_mean,
        duration_stdev,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(op: CheckpointOp, index: u64, start: f64, end: f64, bytes: u64) -> CheckpointRecord {
        CheckpointRecord {
            op,
            index,
            epoch: 1,
            step: index,
            start,
            end,
            files: 2,
            bytes,
            sync_seconds: (end - start) / 4.0,
            bytes_from_storage: Some(bytes),
        }
    }

    #[test]
    fn dlio_rates_by_rank_0_and_mlperf_by_the_slowest_rank() {
        let gib = 1u64 << 30;
        // Two ranks, two saves: rank 0 takes 1 s and 2 s, rank 1 takes 4 s and 2 s; 1 GiB each.
        let ranks = vec![
            RankRecord {
                rank: 0,
                epochs: vec![],
                checkpoints: vec![
                    record(CheckpointOp::Save, 1, 0.0, 1.0, gib),
                    record(CheckpointOp::Save, 2, 10.0, 12.0, gib),
                ],
            },
            RankRecord {
                rank: 1,
                epochs: vec![],
                checkpoints: vec![
                    record(CheckpointOp::Save, 1, 0.0, 4.0, gib),
                    record(CheckpointOp::Save, 2, 10.0, 12.0, gib),
                ],
            },
        ];
        let results = from_ranks(&ranks);
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].bytes, 2 * gib);
        assert_eq!(results[0].files, 4);
        // DLIO: 2 GiB / rank 0's 1 s; MLPerf: 2 GiB / the slowest rank's 4 s.
        assert_eq!(results[0].dlio_gib_per_second(), 2.0);
        assert_eq!(results[0].gib_per_second(), 0.5);
        assert_eq!(results[0].sync_fraction(), 0.25);
        assert_eq!((results[0].start, results[0].end), (0.0, 4.0));
        let summary = dlio_summary(&results, CheckpointOp::Save).unwrap();
        // Throughputs 2 and 1 GiB/s: mean 1.5, population stdev 0.5; durations 1 and 2 s.
        assert_eq!(summary.count, 2);
        assert_eq!(summary.throughput_mean, 1.5);
        assert_eq!(summary.throughput_stdev, 0.5);
        assert_eq!(summary.duration_mean, 1.5);
        assert_eq!(summary.duration_stdev, 0.5);
        assert!(dlio_summary(&results, CheckpointOp::Load).is_none());
    }
}
