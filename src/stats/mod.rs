//! Timings of every step, and the formulas that turn them into the reported numbers. Definitions
//! (also in docs/metrics.md):
//!
//! - Per block of an epoch, with the metric window `s = exclude_start_steps`,
//!   `e = steps − 1 − exclude_end_steps` (0-based, inclusive):
//!   `AU% = 100 · Σ compute[s..=e] / (block_wall − Σ proc outside [s..=e])`,
//!   `samples/s = (e − s + 1) · batch / (that same time)`. Barrier waits stay in the denominator.
//! - Per epoch and rank: the step-weighted mean over blocks. Across ranks: AU is the mean,
//!   samples/s the sum.
//! - Eval: AU likewise (no barrier), samples/s = steps · batch / eval wall time (as DLIO).
//!
//! [`student`] holds Student's t, for the bound of a difference between two runs' means.

pub mod histogram;
pub mod student;

use std::time::{Instant, SystemTime};

use serde::{Deserialize, Serialize};

pub use histogram::Histogram;

/// Monotonic seconds since the start of the run, convertible to wall-clock time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    start: Instant,
    start_wall: SystemTime,
}

impl Clock {
    pub fn start() -> Clock {
        Clock {
            start: Instant::now(),
            start_wall: SystemTime::now(),
        }
    }

    /// Seconds from `origin` (before the clock started) to `seconds` on this clock.
    /// A clock started now whose wall-clock start is `start_wall`: process 0's, so that every
    /// process of a run (each starting its clock as it leaves the same barrier) converts the
    /// same instant to the same time.
    pub fn start_with_wall(start_wall: SystemTime) -> Clock {
        Clock {
            start: Instant::now(),
            start_wall,
        }
    }

    pub fn start_wall(&self) -> SystemTime {
        self.start_wall
    }

    pub fn seconds_since(&self, origin: Instant, seconds: f64) -> f64 {
        self.start.saturating_duration_since(origin).as_secs_f64() + seconds
    }

    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The instant the clock started (its second 0).
    pub fn start_instant(&self) -> Instant {
        self.start
    }

    /// Microseconds from the clock's start to `instant`.
    pub fn micros_at(&self, instant: Instant) -> u64 {
        instant.saturating_duration_since(self.start).as_micros() as u64
    }

    /// Nanoseconds from the clock's start to `instant` (0 before it): `micros_at` is this / 1000.
    pub fn nanos_at(&self, instant: Instant) -> u64 {
        instant.saturating_duration_since(self.start).as_nanos() as u64
    }

    pub fn wall(&self, seconds: f64) -> SystemTime {
        self.start_wall + std::time::Duration::from_secs_f64(seconds.max(0.0))
    }
}

/// One training or eval step, in seconds: waiting for the batch, emulated compute, and the two
/// together (`proc`, DLIO's name); the barrier wait after it is in none of them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepTiming {
    pub load: f64,
    pub compute: f64,
    pub proc: f64,
}

/// Steps between two checkpoints (one block per epoch until checkpointing exists).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Block {
    pub start: f64,
    pub end: f64,
    pub steps: Vec<StepTiming>,
}

/// One phase (train or eval) of one epoch on one rank.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PhaseRecord {
    pub start: f64,
    pub end: f64,
    pub blocks: Vec<Block>,
    pub samples_read: u64,
    pub bytes_read: u64,
    /// Duration of every sample read.
    pub read_latency: Histogram,
    /// Bytes the readers caused to be read from storage devices (the kernel's per-thread
    /// count); `None` where the kernel does not count them.
    pub bytes_from_storage: Option<u64>,
    /// How much later than asked each emulated compute sleep ended, in ns.
    pub compute_lateness: Histogram,
}

impl PhaseRecord {
    pub fn steps(&self) -> usize {
        self.blocks.iter().map(|b| b.steps.len()).sum()
    }

    pub fn wall(&self) -> f64 {
        self.end - self.start
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct EpochRecord {
    pub epoch: u64,
    pub start: f64,
    pub end: f64,
    pub train: PhaseRecord,
    pub eval: Option<PhaseRecord>,
    /// How long dropping the host's page cache before this epoch took (`drop_before_epoch`), in
    /// the one rank per host that dropped it.
    pub page_cache_drop_seconds: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RankRecord {
    pub rank: usize,
    pub epochs: Vec<EpochRecord>,
    /// Every checkpoint save and load of the rank, in order.
    pub checkpoints: Vec<CheckpointRecord>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CheckpointOp {
    Save,
    Load,
}

/// One save or load of a checkpoint by one rank. Its time runs from the start of the save (or
/// load) to the end of its last file (made durable with `checkpoint.fsync`), plus the barrier
/// after it with `rank_sync`; the pause and barrier before it are not in it, as in DLIO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckpointRecord {
    pub op: CheckpointOp,
    /// DLIO's number of the save or load within its epoch: `save_ckpt{index}` (the metric
    /// block it ends, in training; the count of saves or loads, in checkpoint-only runs).
    pub index: u64,
    pub epoch: u64,
    /// The step in the folder's name, `global_epoch{epoch}_step{step}`.
    pub step: u64,
    pub start: f64,
    pub end: f64,
    pub files: u64,
    pub bytes: u64,
    /// Seconds spent making files durable (fsync), within `end - start`.
    pub sync_seconds: f64,
    /// Bytes that came from the storage device (loads); `None` where not known.
    pub bytes_from_storage: Option<u64>,
}

impl CheckpointRecord {
    pub fn duration(&self) -> f64 {
        self.end - self.start
    }
}

/// When the last rank got its first training batch, on the run's clock: until then no rank can
/// finish its first step.
pub fn first_batch_at(ranks: &[RankRecord]) -> Option<f64> {
    ranks
        .iter()
        .map(|r| {
            let train = &r.epochs.first()?.train;
            let step = train.blocks.first()?.steps.first()?;
            Some(train.start + step.load)
        })
        .collect::<Option<Vec<f64>>>()?
        .into_iter()
        .reduce(f64::max)
}

/// The steps counted by the metrics: `exclude_start` first and `exclude_end` last steps are not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricWindow {
    pub exclude_start: usize,
    pub exclude_end: usize,
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub au_percent: f64,
    pub samples_per_second: f64,
}

/// The configuration's window: `output.exclude_start_steps` and `output.exclude_end_steps`.
impl From<&crate::config::Config> for MetricWindow {
    fn from(config: &crate::config::Config) -> MetricWindow {
        MetricWindow {
            exclude_start: config.output.exclude_start_steps as usize,
            exclude_end: config.output.exclude_end_steps as usize,
        }
    }
}

impl MetricWindow {
    /// The inclusive range of counted steps of a block with `steps` steps, if any.
    fn range(&self, steps: usize) -> Option<(usize, usize)> {
        let last = (steps as i64) - 1 - self.exclude_end as i64;
        (self.exclude_start as i64 <= last).then_some((self.exclude_start, last as usize))
    }

    /// The denominator of both formulas: block wall time less the `proc` of uncounted steps.
    fn counted_time(&self, block: &Block) -> (f64, usize, f64) {
        let wall = block.end - block.start;
        match self.range(block.steps.len()) {
            None => (
                wall - block.steps.iter().map(|s| s.proc).sum::<f64>(),
                0,
                0.0,
            ),
            Some((s, e)) => {
                let outside: f64 = block.steps[..s]
                    .iter()
                    .chain(&block.steps[e + 1..])
                    .map(|t| t.proc)
                    .sum();
                let compute: f64 = block.steps[s..=e].iter().map(|t| t.compute).sum();
                (wall - outside, e - s + 1, compute)
            }
        }
    }

    /// The steps of a block that the metrics count.
    pub fn counted<'a>(&self, steps: &'a [StepTiming]) -> &'a [StepTiming] {
        self.range(steps.len()).map_or(&[], |(s, e)| &steps[s..=e])
    }

    pub fn train_block(&self, block: &Block, batch: u64) -> Rates {
        let (time, counted, compute) = self.counted_time(block);
        if time <= 0.0 || counted == 0 {
            return Rates::default();
        }
        Rates {
            au_percent: 100.0 * compute / time,
            samples_per_second: (counted as u64 * batch) as f64 / time,
        }
    }

    pub fn eval_block(&self, block: &Block, batch: u64) -> Rates {
        let (time, counted, compute) = self.counted_time(block);
        let wall = block.end - block.start;
        Rates {
            au_percent: if time > 0.0 && counted > 0 {
                100.0 * compute / time
            } else {
                0.0
            },
            samples_per_second: if wall > 0.0 {
                (block.steps.len() as u64 * batch) as f64 / wall
            } else {
                0.0
            },
        }
    }
}

/// One rank's rates for a phase: the step-weighted mean over its blocks.
pub fn phase_rates(phase: &PhaseRecord, rates_of: impl Fn(&Block) -> Rates) -> Rates {
    let steps = phase.steps();
    if steps == 0 {
        return Rates::default();
    }
    let mut sum = Rates::default();
    for block in &phase.blocks {
        let r = rates_of(block);
        let weight = block.steps.len() as f64;
        sum.au_percent += r.au_percent * weight;
        sum.samples_per_second += r.samples_per_second * weight;
    }
    Rates {
        au_percent: sum.au_percent / steps as f64,
        samples_per_second: sum.samples_per_second / steps as f64,
    }
}

/// Rates of all ranks together: AU is the mean over ranks, samples/s the sum.
pub fn across_ranks(per_rank: &[Rates]) -> Rates {
    if per_rank.is_empty() {
        return Rates::default();
    }
    Rates {
        au_percent: per_rank.iter().map(|r| r.au_percent).sum::<f64>() / per_rank.len() as f64,
        samples_per_second: per_rank.iter().map(|r| r.samples_per_second).sum(),
    }
}

/// Mean and population standard deviation (numpy's `np.mean`, `np.std`).
pub fn mean_stdev(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (0.0, 0.0);
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, variance.sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(load: f64, compute: f64) -> StepTiming {
        StepTiming {
            load,
            compute,
            proc: load + compute,
        }
    }

    /// A hand-built block: 4 steps of 0.1 s load + 0.5 s compute, 0.05 s barrier after each.
    fn block() -> Block {
        Block {
            start: 10.0,
            end: 10.0 + 4.0 * 0.65,
            steps: vec![step(0.1, 0.5); 4],
        }
    }

    #[test]
    fn train_block_by_hand() {
        let window = MetricWindow {
            exclude_start: 1,
            exclude_end: 0,
        };
        let r = window.train_block(&block(), 8);
        // Counted: steps 1..=3; time = 2.6 − 0.6 (proc of step 0) = 2.0; compute = 1.5.
        assert!((r.au_percent - 75.0).abs() < 1e-9, "{r:?}");
        assert!(
            (r.samples_per_second - 3.0 * 8.0 / 2.0).abs() < 1e-9,
            "{r:?}"
        );
        let window = MetricWindow {
            exclude_start: 1,
            exclude_end: 1,
        };
        let r = window.train_block(&block(), 8);
        // Counted: steps 1..=2; time = 2.6 − 1.2 = 1.4; compute = 1.0.
        assert!((r.au_percent - 100.0 / 1.4).abs() < 1e-9, "{r:?}");
        assert!((r.samples_per_second - 16.0 / 1.4).abs() < 1e-9, "{r:?}");
        let everything_excluded = MetricWindow {
            exclude_start: 3,
            exclude_end: 2,
        };
        assert_eq!(
            everything_excluded.train_block(&block(), 8),
            Rates::default()
        );
    }

    #[test]
    fn eval_throughput_counts_every_step() {
        let window = MetricWindow {
            exclude_start: 1,
            exclude_end: 0,
        };
        let r = window.eval_block(&block(), 2);
        assert!((r.samples_per_second - 8.0 / 2.6).abs() < 1e-9);
        assert!((r.au_percent - 75.0).abs() < 1e-9);
    }

    #[test]
    fn weighted_blocks_and_ranks() {
        let mut phase = PhaseRecord::default();
        phase.blocks.push(Block {
            start: 0.0,
            end: 1.0,
            steps: vec![step(0.0, 0.5); 2],
        });
        phase.blocks.push(Block {
            start: 1.0,
            end: 2.0,
            steps: vec![step(0.0, 0.25); 4],
        });
        let window = MetricWindow {
            exclude_start: 0,
            exclude_end: 0,
        };
        let r = phase_rates(&phase, |b| window.train_block(b, 1));
        // Block AUs 100% (2 steps) and 100% (4 steps); throughputs 2/s and 4/s → (2·2 + 4·4)/6.
        assert!((r.au_percent - 100.0).abs() < 1e-9);
        assert!((r.samples_per_second - 20.0 / 6.0).abs() < 1e-9);
        let all = across_ranks(&[
            Rates {
                au_percent: 90.0,
                samples_per_second: 10.0,
            },
            Rates {
                au_percent: 80.0,
                samples_per_second: 12.0,
            },
        ]);
        assert_eq!(
            all,
            Rates {
                au_percent: 85.0,
                samples_per_second: 22.0
            }
        );
        let (mean, stdev) = mean_stdev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]);
        assert_eq!((mean, stdev), (5.0, 2.0));
    }
}
