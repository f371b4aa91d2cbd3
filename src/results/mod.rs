//! What a run measured, all ranks together: from the ranks' records ([`crate::stats`]) to the
//! results of each phase of each epoch (AU and throughput by DLIO's formulas, bytes read and from
//! storage, read latency), their mean and spread over the epochs, every checkpoint save and load
//! ([`checkpoints`]), how the bytes from storage were counted ([`validity`]), and the run's
//! [`verdict`]: PASS or FAIL, VALID or NOT VALID with its reasons, and its MLPerf category
//! (`category.rs`). Every output ([`crate::report`]) and a sweep's judgement of a trial read
//! them from here.

mod category;
pub mod checkpoints;
pub mod validity;
pub mod verdict;

use crate::config::Config;
use crate::plan::{EpochPlan, Phase, PlanSpec};
use crate::stats::{
    across_ranks, mean_stdev, phase_rates, Histogram, PhaseRecord, RankRecord, Rates,
};
use crate::storage::Accounting;

/// One phase of one epoch, all ranks together.
#[derive(Debug, Clone)]
pub struct PhaseResult {
    pub rates: Rates,
    pub per_rank: Vec<Rates>,
    pub steps: usize,
    pub samples_read: u64,
    pub bytes_read: u64,
    /// From the first rank's start to the last rank's end.
    pub wall: f64,
    pub read_latency: Histogram,
    /// Bytes that came from the storage device; `None` where that cannot be known.
    pub bytes_from_storage: Option<u64>,
    /// The share of `bytes_read` the page cache (or RAM) served instead.
    pub cache_served_fraction: Option<f64>,
    /// How late the emulated compute sleeps ended, in ns.
    pub compute_lateness: Histogram,
}

impl PhaseResult {
    /// MiB/s of bytes actually read by all ranks over the phase's wall time.
    pub fn measured_mib_per_second(&self) -> f64 {
        if self.wall > 0.0 {
            self.bytes_read as f64 / self.wall / 1048576.0
        } else {
            0.0
        }
    }
}

#[derive(Debug, Clone)]
pub struct EpochResult {
    pub epoch: u64,
    pub train: PhaseResult,
    pub eval: Option<PhaseResult>,
}

/// A metric over epochs: the per-epoch values, their mean and population stdev.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub values: Vec<f64>,
    pub mean: f64,
    pub stdev: f64,
}

impl Series {
    pub fn new(values: Vec<f64>) -> Series {
        let (mean, stdev) = mean_stdev(&values);
        Series {
            values,
            mean,
            stdev,
        }
    }
}

/// AU, samples/s and nominal MiB/s of one phase over the epochs.
#[derive(Debug, Clone, PartialEq)]
pub struct PhaseMetrics {
    pub au_percent: Series,
    pub samples_per_second: Series,
    pub io_mib_per_second: Series,
    pub meets_expectation: bool,
}

#[derive(Debug, Clone)]
pub struct Results {
    pub epochs: Vec<EpochResult>,
    pub train: PhaseMetrics,
    pub eval: Option<PhaseMetrics>,
    /// Samples per epoch the plan does not read (the remainder, or past total_training_steps).
    pub train_samples_not_read: u64,
    pub world: usize,
    /// How the bytes from storage were counted.
    pub accounting: Accounting,
    /// Memory of all client hosts together, in bytes (MLPerf's dataset-size rule).
    pub client_memory_bytes: u64,
    /// The bytes a sample read takes when the files are as configured, where that is known.
    pub sample_bytes_as_configured: Option<f64>,
    /// PASS or FAIL, VALID or not and why, and the MLPerf category: judged once, for every
    /// output that shows it.
    pub verdict: verdict::Verdict,
    /// Every checkpoint save and load, in order.
    pub checkpoints: Vec<checkpoints::CheckpointResult>,
    /// Bytes of one checkpoint, all ranks, when the run checkpoints (even if none fell due).
    pub checkpoint_bytes: Option<u64>,
    /// Set when a signal stopped the run: the results are then of what every rank completed.
    pub interrupted: Option<Interruption>,
    /// The requests of an object storage, all processes: for `data`, for `checkpoints`.
    pub requests: Vec<(&'static str, crate::storage::RequestCounts)>,
}

/// How the run's bytes were measured, and the memory that decides the dataset-size rule.
#[derive(Debug, Clone)]
pub struct Measured {
    pub accounting: Accounting,
    /// Memory of all client hosts together, in bytes.
    pub client_memory_bytes: u64,
    /// The bytes a sample read takes when the files are as configured
    /// ([`crate::format::sample_bytes_as_configured`]).
    pub sample_bytes_as_configured: Option<f64>,
}

/// A run a signal stopped ([`crate::interrupt`]): its results are of the epochs, and the
/// checkpoints, that every rank completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interruption {
    pub signal: i32,
    pub epochs_planned: u64,
}

impl Interruption {
    /// What every output says about it.
    pub fn describe(&self, results: &Results) -> String {
        let signal = crate::interrupt::name(self.signal);
        if results.trained() {
            format!(
                "interrupted by {signal} after {} of {} epoch(s): the results are of the \
                 completed epochs only",
                results.epochs.len(),
                self.epochs_planned
            )
        } else {
            format!(
                "interrupted by {signal} after {} checkpoint operation(s): the results are of \
                 those only",
                results.checkpoints.len()
            )
        }
    }

    /// The same as a JSON object: `{signal, epochs_completed, epochs_planned, message}`.
    pub fn to_json(&self, results: &Results) -> serde_json::Value {
        serde_json::json!({
            "signal": crate::interrupt::name(self.signal),
            "epochs_completed": results.epochs.len(),
            "epochs_planned": self.epochs_planned,
            "checkpoints_completed": results.checkpoints.len(),
            "message": self.describe(results),
        })
    }
}

impl Results {
    /// Whether the run trained (a checkpoint-only run has no epochs).
    pub fn trained(&self) -> bool {
        !self.epochs.is_empty()
    }
}

fn phase_result(
    config: &Config,
    accounting: &Accounting,
    phase: Phase,
    records: &[&PhaseRecord],
) -> PhaseResult {
    let window = crate::stats::MetricWindow::from(config);
    let per_rank: Vec<Rates> = records
        .iter()
        .map(|r| match phase {
            Phase::Train => phase_rates(r, |b| window.train_block(b, config.reader.batch_size)),
            Phase::Eval => phase_rates(r, |b| window.eval_block(b, config.reader.batch_size_eval)),
        })
        .collect();
    let mut read_latency = Histogram::default();
    let mut compute_lateness = Histogram::default();
    for r in records {
        read_latency.merge(&r.read_latency);
        compute_lateness.merge(&r.compute_lateness);
    }
    let bytes_read = records.iter().map(|r| r.bytes_read).sum();
    let kernel_count = records
        .iter()
        .try_fold(0u64, |sum, r| Some(sum + r.bytes_from_storage?));
    let bytes_from_storage = accounting.bytes_from_storage(bytes_read, kernel_count);
    let start = records
        .iter()
        .map(|r| r.start)
        .fold(f64::INFINITY, f64::min);
    let end = records
        .iter()
        .map(|r| r.end)
        .fold(f64::NEG_INFINITY, f64::max);
    PhaseResult {
        rates: across_ranks(&per_rank),
        per_rank,
        steps: records.first().map_or(0, |r| r.steps()),
        samples_read: records.iter().map(|r| r.samples_read).sum(),
        bytes_read,
        wall: if end > start { end - start } else { 0.0 },
        read_latency,
        bytes_from_storage,
        cache_served_fraction: validity::cache_served_fraction(bytes_read, bytes_from_storage),
        compute_lateness,
    }
}

fn phase_metrics(config: &Config, results: &[&PhaseResult]) -> PhaseMetrics {
    let au = Series::new(results.iter().map(|r| r.rates.au_percent).collect());
    let throughput: Vec<f64> = results.iter().map(|r| r.rates.samples_per_second).collect();
    let record_mib = config.dataset.record_length_bytes as f64 / 1048576.0;
    PhaseMetrics {
        meets_expectation: au.mean >= config.au_threshold * 100.0,
        au_percent: au,
        io_mib_per_second: Series::new(throughput.iter().map(|t| t * record_mib).collect()),
        samples_per_second: Series::new(throughput),
    }
}

impl Results {
    /// The results of the ranks' records, judged ([`verdict::Verdict::judge`]) with the host's
    /// AU `ceiling` and the interruption that ended the run early, if one did.
    pub fn from_ranks(
        config: &Config,
        ranks: &[RankRecord],
        measured: Measured,
        interrupted: Option<Interruption>,
        ceiling: verdict::Ceiling,
    ) -> Results {
        let epochs: Vec<EpochResult> = (0..ranks.first().map_or(0, |r| r.epochs.len()))
            .map(|e| {
                let train: Vec<&PhaseRecord> = ranks.iter().map(|r| &r.epochs[e].train).collect();
                let eval: Vec<&PhaseRecord> = ranks
                    .iter()
                    .filter_map(|r| r.epochs[e].eval.as_ref())
                    .collect();
                EpochResult {
                    epoch: ranks[0].epochs[e].epoch,
                    train: phase_result(config, &measured.accounting, Phase::Train, &train),
                    eval: (!eval.is_empty())
                        .then(|| phase_result(config, &measured.accounting, Phase::Eval, &eval)),
                }
            })
            .collect();
        let train: Vec<&PhaseResult> = epochs.iter().map(|e| &e.train).collect();
        let eval: Vec<&PhaseResult> = epochs.iter().filter_map(|e| e.eval.as_ref()).collect();
        let plan = EpochPlan::new(
            PlanSpec::for_phase(config, Phase::Train, ranks.len() as u64, 0),
            1,
        );
        let mut results = Results {
            train: phase_metrics(config, &train),
            eval: (!eval.is_empty()).then(|| phase_metrics(config, &eval)),
            train_samples_not_read: plan.samples_not_read(),
            world: ranks.len(),
            epochs,
            accounting: measured.accounting,
            client_memory_bytes: measured.client_memory_bytes,
            sample_bytes_as_configured: measured.sample_bytes_as_configured,
            verdict: verdict::Verdict::unjudged(),
            checkpoints: checkpoints::from_ranks(ranks),
            checkpoint_bytes: None,
            interrupted,
            requests: Vec::new(),
        };
        results.verdict = verdict::Verdict::judge(config, &results, ceiling);
        results
    }
}

#[cfg(test)]
mod tests;
