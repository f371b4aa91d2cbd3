//! How much a training epoch's order changed from the previous training epoch's, as the traces
//! show it: the share of positions that hold a different sample, the mean distance a sample moved
//! (as a share of the epoch; about 1/3 for a fresh random order, 0 for a repeat), and per rank the
//! share of the files it read that it did not read the epoch before.
//!
//! Memory: one u64 per training sample (where it was last read) plus two bits per file and rank.
//! Which samples the previous epoch read is not stored per sample: its plan and its bitmap of
//! read positions answer that.

use crate::plan::{EpochPlan, PlanSpec, SampleRef};

use super::bitset::BitSet;

/// The order metrics of one training epoch; None where there is nothing to compare.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderChange {
    pub order_changed: Option<f64>,
    pub mean_displacement: Option<f64>,
    /// Per rank; None for a rank that read no files.
    pub rank_files_changed: Option<Vec<Option<f64>>>,
}

#[derive(Debug, Default)]
struct EpochCounts {
    recorded: u64,
    changed: u64,
    compared: u64,
    displacement: u128,
}

pub struct OrderTracker {
    samples_per_file: u64,
    /// Per sample (`file × samples_per_file + sample`): 1 + the position it was read at in the
    /// last epoch that read it; 0 when that position could not be measured.
    positions: Vec<u64>,
    /// The previous epoch's plan and the plan positions it read.
    previous: Option<(EpochPlan, BitSet)>,
    /// Files each rank read this epoch and the previous one; empty with one rank.
    rank_files: Vec<BitSet>,
    previous_rank_files: Vec<BitSet>,
    counts: EpochCounts,
}

impl OrderTracker {
    /// None when the memory for one position per sample cannot be had.
    pub fn new(spec: &PlanSpec) -> Option<OrderTracker> {
        let samples = usize::try_from(spec.total_samples()).ok()?;
        let mut positions = Vec::new();
        positions.try_reserve_exact(samples).ok()?;
        positions.resize(samples, 0);
        let per_rank = |_| BitSet::with_len(spec.files);
        let ranks = if spec.world > 1 { spec.world } else { 0 };
        Some(OrderTracker {
            samples_per_file: spec.samples_per_file,
            positions,
            previous: None,
            rank_files: (0..ranks).map(per_rank).collect(),
            previous_rank_files: (0..ranks).map(per_rank).collect(),
            counts: EpochCounts::default(),
        })
    }

    /// A planned sample read (the first time this epoch) by `rank` at the measured `position`.
    pub fn record(&mut self, sample: SampleRef, rank: u64, position: Option<u64>) {
        let id = (sample.file * self.samples_per_file + sample.sample) as usize;
        let Some(slot) = self.positions.get_mut(id) else {
            return;
        };
        let before = std::mem::replace(slot, position.map_or(0, |p| p + 1));
        if let Some(files) = self.rank_files.get_mut(rank as usize) {
            files.insert(sample.file);
        }
        let counts = &mut self.counts;
        counts.recorded += 1;
        let Some((plan, read)) = &self.previous else {
            return;
        };
        let read_last_epoch = plan
            .position_of(sample)
            .is_some_and(|planned| read.contains(planned));
        match position {
            Some(now) if read_last_epoch && before > 0 => {
                let then = before - 1;
                counts.changed += u64::from(now != then);
                counts.compared += 1;
                counts.displacement += u128::from(now.abs_diff(then));
            }
            _ => counts.changed += 1,
        }
    }

    /// The epoch's metrics; `plan` and `read` (its read plan positions) become the previous epoch.
    pub fn finish_epoch(&mut self, plan: &EpochPlan, read: &BitSet) -> OrderChange {
        let counts = std::mem::take(&mut self.counts);
        let mut change = OrderChange::default();
        if self.previous.is_some() {
            let share = |part: u128, whole: u128| (whole > 0).then(|| part as f64 / whole as f64);
            change.order_changed = share(counts.changed.into(), counts.recorded.into());
            change.mean_displacement = share(
                counts.displacement,
                u128::from(counts.compared) * u128::from(plan.samples_read()),
            );
            if !self.rank_files.is_empty() {
                change.rank_files_changed = Some(
                    self.rank_files
                        .iter()
                        .zip(&self.previous_rank_files)
                        .map(|(now, before)| {
                            share(now.count_not_in(before).into(), now.count().into())
                        })
                        .collect(),
                );
            }
        }
        std::mem::swap(&mut self.rank_files, &mut self.previous_rank_files);
        for files in &mut self.rank_files {
            files.reset(plan.spec().files);
        }
        let mut kept = self
            .previous
            .take()
            .map(|(_, bits)| bits)
            .unwrap_or_default();
        kept.copy_from(read);
        self.previous = Some((plan.clone(), kept));
        change
    }
}
