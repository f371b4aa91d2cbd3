//! The verdict of a run, the answer users act on, in three parts:
//! - **AU**: PASS when the mean training AU meets the workload's threshold (`metric.au`), FAIL
//!   when it does not, none when no training epoch measured anything;
//! - **validity**: VALID, or NOT VALID with every [`Reason`] the numbers may not be the
//!   storage's, each with its fix (page cache, dataset size, a metric window too short, files
//!   not as configured, a nominal rate the bytes read contradict, an interruption, late compute,
//!   the host's own AU ceiling, storage bytes unknown, no storage read at all);
//! - **category**: the MLPerf Storage category the run could stand in (`category.rs`): CLOSED,
//!   OPEN, or none, with the keys changed from the workload.
//!
//! Every output says the same verdict: the terminal's line, report.json's `verdict` and the
//! page's banner. The bounds and why they are what they are: docs/metrics.md.

use std::fmt::Write;

use serde_json::json;

use super::validity::{cache_defeated_by, cache_served_fraction, CACHE_WARNING_FRACTION};
use super::{PhaseResult, Results};
use crate::config::{Config, DataLoader, Format};
use crate::stats::CheckpointOp;
use crate::storage::Accounting;

pub use super::category::Category;

/// Each batch a loader can read ahead of the trainer needs this many steps in the metric window:
/// batches read before the window are counted in it, and with ten times as many steps as there
/// can be such batches they inflate the window's rate by at most ~10 %.
pub const WINDOW_STEPS_PER_BATCH_IN_FLIGHT: u64 = 10;

/// The fewest steps a metric window may keep, whatever the loader: below this a single slow or
/// fast step moves the epoch's AU by more than 10 points.
pub const MIN_WINDOW_STEPS: u64 = 10;

/// Bytes read per sample may differ from the configured record length by this factor (either
/// way) before the files are said not to be as configured: the format's own bytes and
/// `record_length_bytes_stdev` stay well within it, a dataset of other files does not.
pub const SAMPLE_BYTES_FACTOR: f64 = 1.5;

/// DLIO's nominal MiB/s may exceed the bytes read over the epoch's wall time by this factor
/// before it is flagged: over an epoch long enough to measure the two agree within a few percent.
pub const NOMINAL_OVER_MEASURED: f64 = 1.25;

/// The emulated compute may end late, on average, by this share of its time before the host is
/// said to be oversubscribed: late sleeps count as compute, so they lift AU by about as much.
pub const COMPUTE_LATE_FRACTION: f64 = 0.05;

/// Why a run's numbers may not describe the storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Interrupted,
    NoStorage,
    PageCache,
    CheckpointCache,
    StorageBytesUnknown,
    DatasetSize,
    MetricWindow,
    FilesNotAsConfigured,
    NominalAboveMeasured,
    ComputeLate,
    HostCeiling,
}

impl Code {
    /// The name report.json and the terminal give it.
    pub fn name(self) -> &'static str {
        match self {
            Code::Interrupted => "interrupted",
            Code::NoStorage => "no_storage",
            Code::PageCache => "page_cache",
            Code::CheckpointCache => "checkpoint_page_cache",
            Code::StorageBytesUnknown => "storage_bytes_unknown",
            Code::DatasetSize => "dataset_size",
            Code::MetricWindow => "metric_window",
            Code::FilesNotAsConfigured => "files_not_as_configured",
            Code::NominalAboveMeasured => "nominal_above_measured",
            Code::ComputeLate => "compute_late",
            Code::HostCeiling => "host_ceiling",
        }
    }
}

/// One reason the run is not a valid measurement of the storage, and what to do about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Reason {
    pub code: Code,
    pub message: String,
    pub fix: String,
}

/// The AU this host reaches with the run's ranks, threads, batch and compute time when the
/// loader reads nothing (`reader.data_loader: synthetic`): the most any storage could show.
#[derive(Debug, Clone, PartialEq)]
pub enum Ceiling {
    Measured {
        au_percent: f64,
        steps: u64,
    },
    /// Not measured, and why.
    Skipped(String),
}

impl Ceiling {
    fn describe(&self) -> String {
        match self {
            Ceiling::Measured { au_percent, steps } => format!(
                "{au_percent:.2}% (measured over {steps} step(s) with the same ranks, threads, \
                 batch and compute time and no storage I/O)"
            ),
            Ceiling::Skipped(why) => format!("not measured ({why})"),
        }
    }

    fn to_json(&self) -> serde_json::Value {
        match self {
            Ceiling::Measured { au_percent, steps } => {
                json!({"measured": true, "au_percent": au_percent, "steps": steps})
            }
            Ceiling::Skipped(why) => json!({"measured": false, "why": why}),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// `None`: no training epoch measured anything (a checkpoint-only run, or windows empty).
    pub au_passed: Option<bool>,
    pub au_percent: f64,
    pub threshold_percent: f64,
    pub reasons: Vec<Reason>,
    /// The epochs whose DLIO nominal MiB/s the bytes read contradict (flagged where shown).
    pub contradicted_epochs: Vec<u64>,
    pub category: Category,
    pub ceiling: Ceiling,
}

impl Verdict {
    /// A placeholder while the results it judges are put together, never shown.
    pub(super) fn unjudged() -> Verdict {
        Verdict {
            au_passed: None,
            au_percent: 0.0,
            threshold_percent: 0.0,
            reasons: Vec::new(),
            contradicted_epochs: Vec::new(),
            category: Category::None {
                changed_keys: Vec::new(),
                why: String::new(),
            },
            ceiling: Ceiling::Skipped(String::new()),
        }
    }

    pub fn valid(&self) -> bool {
        self.reasons.is_empty()
    }

    /// Whether `--check` fails the run: FAIL, or NOT VALID.
    pub fn fails_check(&self) -> bool {
        self.au_passed == Some(false) || !self.valid()
    }

    /// Judges a finished run: `results` must hold everything but its verdict.
    pub fn judge(config: &Config, results: &Results, ceiling: Ceiling) -> Verdict {
        let measured = results.trained()
            && super::validity::unmeasured_epochs(config, results).len() < results.epochs.len();
        let mut judge = Judge {
            config,
            results,
            reasons: Vec::new(),
            contradicted_epochs: Vec::new(),
        };
        judge.interrupted();
        let reads_storage = judge.reads_storage();
        let short = judge.short_of_dataset_rule().filter(|_| results.trained());
        if reads_storage {
            judge.page_cache();
            judge.storage_bytes_unknown();
            if let Some(short) = &short {
                judge.dataset_size(short);
            }
        }
        if results.trained() {
            judge.metric_window();
            if reads_storage && !judge.files_not_as_configured() {
                judge.nominal_above_measured();
            }
            judge.compute_late();
            judge.host_ceiling(&ceiling);
        }
        Verdict {
            au_passed: measured.then_some(results.train.meets_expectation),
            au_percent: results.train.au_percent.mean,
            threshold_percent: config.au_threshold * 100.0,
            reasons: judge.reasons,
            contradicted_epochs: judge.contradicted_epochs,
            category: Category::of(config, results.world as u64, short.as_ref()),
            ceiling,
        }
    }

    /// The line that says all three parts.
    pub fn line(&self) -> String {
        let au = match self.au_passed {
            Some(true) => "PASS",
            Some(false) => "FAIL",
            None => "no AU verdict",
        };
        let validity = if self.valid() {
            "VALID".to_string()
        } else {
            let codes: Vec<&str> = self.reasons.iter().map(|r| r.code.name()).collect();
            format!("NOT VALID ({})", codes.join(", "))
        };
        format!("Verdict: {au} · {validity} · {}", self.category.short())
    }

    /// The verdict for people: its line, the AU against the threshold, the ceiling, then every
    /// reason with its fix, once each.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if let Some(passed) = self.au_passed {
            let _ = writeln!(
                out,
                "Training AU {:.2}% {} the {:.0}% threshold",
                self.au_percent,
                if passed { "meets" } else { "is below" },
                self.threshold_percent
            );
        }
        let _ = writeln!(out, "Host AU ceiling: {}", self.ceiling.describe());
        let _ = writeln!(out, "{}", self.line());
        let _ = writeln!(out, "MLPerf category: {}", self.category.describe());
        if !self.valid() {
            let _ = writeln!(
                out,
                "Not a valid measurement of the storage (docs/metrics.md, \"Verdict\"):"
            );
            for reason in &self.reasons {
                let _ = writeln!(out, "  - {}: {}", reason.code.name(), reason.message);
                let _ = writeln!(out, "    fix: {}", reason.fix);
            }
        }
        out
    }

    /// report.json's `verdict`.
    pub fn to_json(&self) -> serde_json::Value {
        json!({
            "au_passed": self.au_passed,
            "valid": self.valid(),
            "reasons": self.reasons.iter().map(|r| json!({
                "code": r.code.name(),
                "message": r.message,
                "fix": r.fix,
            })).collect::<Vec<_>>(),
            "category": self.category.name(),
            "category_note": self.category.note(),
            "changed_keys": self.category.changed_keys(),
            "host_au_ceiling": self.ceiling.to_json(),
            "line": self.line(),
        })
    }
}

/// A training dataset smaller than MLPerf Storage's rule asks for.
pub struct DatasetShort {
    files: u64,
    rule: crate::datasize::Datasize,
    cluster: crate::datasize::Cluster,
}

impl DatasetShort {
    pub fn describe(&self) -> String {
        format!(
            "the training dataset has {} file(s); MLPerf Storage's rule asks for at least {} with \
             {} accelerator(s) and {} GiB of client memory (the larger of {} files for 5 × the \
             memory and {} for 500 steps per epoch)",
            self.files,
            self.rule.files,
            self.cluster.max_accelerators,
            self.cluster.host_memory_gib,
            self.rule.files_for_memory,
            self.rule.files_for_steps,
        )
    }
}

struct Judge<'a> {
    config: &'a Config,
    results: &'a Results,
    reasons: Vec<Reason>,
    contradicted_epochs: Vec<u64>,
}

/// "1, 2, 5" — the epochs a reason is about.
fn epoch_list(epochs: &[u64]) -> String {
    let names: Vec<String> = epochs.iter().map(u64::to_string).collect();
    names.join(", ")
}

const CACHE_FIX: &str = "keep the page cache out: ++workload.reader.page_cache=evict_after_read \
     (or drop_before_epoch, or ++workload.reader.odirect=True), or a dataset of at least 5 × the \
     client hosts' memory (dlio-rs datasize)";

impl Judge<'_> {
    fn push(&mut self, code: Code, message: String, fix: impl Into<String>) {
        self.reasons.push(Reason {
            code,
            message,
            fix: fix.into(),
        });
    }

    fn interrupted(&mut self) {
        if let Some(interrupted) = &self.results.interrupted {
            self.push(
                Code::Interrupted,
                interrupted.describe(self.results),
                "run it to its end",
            );
        }
    }

    /// Whether the run's reads reach a storage at all; when they do not, that is the reason.
    fn reads_storage(&mut self) -> bool {
        let config = self.config;
        let synthetic = if config.reader.data_loader == DataLoader::Synthetic {
            Some("reader.data_loader = synthetic")
        } else if config.dataset.format == Format::Synthetic {
            Some("dataset.format = synthetic")
        } else {
            None
        };
        match synthetic {
            Some(key) if self.results.trained() => {
                self.push(
                    Code::NoStorage,
                    format!("{key}: the loader read nothing from any storage"),
                    "a format and loader that read files (the workload's own)",
                );
                false
            }
            _ => true,
        }
    }

    fn page_cache(&mut self) {
        let mut phases: Vec<(String, Vec<u64>, f64)> = Vec::new();
        let mut note = |label: &str, epoch: u64, phase: &PhaseResult| {
            let Some(fraction) = phase.cache_served_fraction else {
                return;
            };
            if fraction <= CACHE_WARNING_FRACTION {
                return;
            }
            match phases.iter_mut().find(|(l, ..)| l == label) {
                Some((_, epochs, most)) => {
                    epochs.push(epoch);
                    *most = most.max(fraction);
                }
                None => phases.push((label.to_string(), vec![epoch], fraction)),
            }
        };
        for e in &self.results.epochs {
            note("training phase", e.epoch, &e.train);
            if let Some(eval) = &e.eval {
                note("evaluation phase", e.epoch, eval);
            }
        }
        if !phases.is_empty() {
            let said: Vec<String> = phases
                .iter()
                .map(|(label, epochs, most)| {
                    format!(
                        "{label} of epoch(s) {} (up to {:.0}%)",
                        epoch_list(epochs),
                        most * 100.0
                    )
                })
                .collect();
            let fix = match cache_defeated_by(self.config) {
                None => CACHE_FIX.to_string(),
                Some(option) => format!(
                    "{option} is set and the cache still served reads: see \
                     docs/valid-measurement.md for this file system"
                ),
            };
            self.push(
                Code::PageCache,
                format!(
                    "more than {:.0}% of the bytes read came from the page cache, not the \
                     storage, in the {}: those epochs measured memory",
                    CACHE_WARNING_FRACTION * 100.0,
                    said.join("; ")
                ),
                fix,
            );
        }
        let loads: Vec<String> = self
            .results
            .checkpoints
            .iter()
            .filter(|c| c.op == CheckpointOp::Load)
            .filter_map(|c| {
                let fraction = cache_served_fraction(c.bytes, c.bytes_from_storage)?;
                (fraction > CACHE_WARNING_FRACTION)
                    .then(|| format!("load {} ({:.0}%)", c.index, fraction * 100.0))
            })
            .collect();
        if !loads.is_empty() {
            self.push(
                Code::CheckpointCache,
                format!(
                    "checkpoint {}: more than {:.0}% of the bytes came from the page cache, not \
                     the storage",
                    loads.join(", "),
                    CACHE_WARNING_FRACTION * 100.0
                ),
                "load checkpoints that the page cache does not hold: \
                 workload.checkpoint.mode or fewer saves before the loads, or drop the cache \
                 (docs/valid-measurement.md)",
            );
        }
    }

    fn storage_bytes_unknown(&mut self) {
        if cache_defeated_by(self.config).is_some() {
            return;
        }
        let why = match &self.results.accounting {
            Accounting::Unaccounted(reason) => Some(reason.clone()),
            Accounting::KernelCounters
                if self
                    .results
                    .epochs
                    .iter()
                    .any(|e| e.train.bytes_from_storage.is_none()) =>
            {
                Some(
                    "this kernel keeps no per-thread I/O accounting (/proc/thread-self/io)"
                        .to_string(),
                )
            }
            _ => None,
        };
        if let Some(why) = why {
            self.push(
                Code::StorageBytesUnknown,
                format!(
                    "the bytes that came from the storage are not known ({why}), and nothing \
                     keeps the page cache out"
                ),
                "++workload.reader.odirect=True (exact), or \
                 ++workload.reader.page_cache=evict_after_read",
            );
        }
    }

    /// MLPerf Storage's dataset-size rule for this run, when the dataset falls short of it.
    fn short_of_dataset_rule(&self) -> Option<DatasetShort> {
        let cluster = crate::datasize::Cluster {
            max_accelerators: self.results.world as u64,
            host_memory_gib: self.results.client_memory_bytes >> 30,
            client_hosts: 1,
        };
        let rule = crate::datasize::Datasize::compute(self.config, &cluster);
        let files = self.config.dataset.num_files_train;
        (files < rule.files).then_some(DatasetShort {
            files,
            rule,
            cluster,
        })
    }

    /// A dataset short of the rule is a reason when nothing keeps the page cache out: the cache
    /// can serve its reads. With an option that does, the reads are the storage's, and the
    /// shortfall only bars the run from MLPerf's categories (`category.rs`).
    fn dataset_size(&mut self, short: &DatasetShort) {
        if cache_defeated_by(self.config).is_some() {
            return;
        }
        self.push(
            Code::DatasetSize,
            format!(
                "{}, and nothing keeps the page cache out: the cache can serve its reads and \
                 inflate the result",
                short.describe()
            ),
            format!(
                "generate at least {} files (++workload.dataset.num_files_train={} with \
                 ++workload.workflow.generate_data=True; dlio-rs datasize gives the whole \
                 command), or keep the page cache out (++workload.reader.page_cache=\
                 evict_after_read, drop_before_epoch, or ++workload.reader.odirect=True)",
                short.rule.files, short.rule.files
            ),
        );
    }

    /// The steps each epoch's metric window keeps, against the fewest that measure.
    fn metric_window(&mut self) {
        let config = self.config;
        let (in_flight, held_by) = batches_read_ahead(config);
        let needed = (in_flight * WINDOW_STEPS_PER_BATCH_IN_FLIGHT).max(MIN_WINDOW_STEPS);
        let excluded = config.output.exclude_start_steps + config.output.exclude_end_steps;
        let short: Vec<(u64, u64)> = self
            .results
            .epochs
            .iter()
            .map(|e| (e.epoch, (e.train.steps as u64).saturating_sub(excluded)))
            .filter(|&(_, kept)| kept < needed)
            .collect();
        let Some(&(_, fewest)) = short.iter().min_by_key(|(_, kept)| *kept) else {
            return;
        };
        let epochs: Vec<u64> = short.iter().map(|(e, _)| *e).collect();
        let why = if in_flight * WINDOW_STEPS_PER_BATCH_IN_FLIGHT >= MIN_WINDOW_STEPS {
            format!(
                "each rank's loader reads up to {in_flight} batch(es) ahead ({held_by}), and \
                 batches read before the window count in it: with fewer than \
                 {WINDOW_STEPS_PER_BATCH_IN_FLIGHT} steps per batch ahead they can inflate its \
                 rate by more than 10%"
            )
        } else {
            format!("below {MIN_WINDOW_STEPS} steps one step moves the AU by 10 points or more")
        };
        let samples_per_file = config.dataset.num_samples_per_file.max(1);
        let files = (needed + excluded)
            .saturating_mul(config.reader.batch_size)
            .saturating_mul(self.results.world as u64)
            .div_ceil(samples_per_file);
        self.push(
            Code::MetricWindow,
            format!(
                "the metric window of epoch(s) {} keeps as few as {fewest} step(s) \
                 (exclude_start_steps {}, exclude_end_steps {}); it needs at least {needed}: {why}",
                epoch_list(&epochs),
                config.output.exclude_start_steps,
                config.output.exclude_end_steps,
            ),
            format!(
                "more steps per epoch: at least {files} training files for {} accelerator(s) at \
                 batch {}, or fewer accelerators, or a smaller batch",
                self.results.world, config.reader.batch_size
            ),
        );
    }

    /// Bytes read per sample against the configured record length; true when they disagree.
    fn files_not_as_configured(&mut self) -> bool {
        let samples: u64 = self
            .results
            .epochs
            .iter()
            .map(|e| e.train.samples_read)
            .sum();
        let bytes: u64 = self.results.epochs.iter().map(|e| e.train.bytes_read).sum();
        let Some(configured) = self.results.sample_bytes_as_configured else {
            return false;
        };
        if samples == 0 || configured <= 0.0 {
            return false;
        }
        let per_sample = bytes as f64 / samples as f64;
        let ratio = per_sample / configured;
        if (1.0 / SAMPLE_BYTES_FACTOR..=SAMPLE_BYTES_FACTOR).contains(&ratio) {
            return false;
        }
        self.contradicted_epochs = self.results.epochs.iter().map(|e| e.epoch).collect();
        self.push(
            Code::FilesNotAsConfigured,
            format!(
                "the readers read {per_sample:.0} bytes per sample where files as configured \
                 (dataset.record_length_bytes {}, {} sample(s) per file, {}) take \
                 {configured:.0} ({ratio:.2} ×): the files are not as configured, and DLIO's \
                 nominal throughput (samples/s × record_length_bytes) is not the bytes moved",
                self.config.dataset.record_length_bytes,
                self.config.dataset.num_samples_per_file,
                self.config.dataset.format,
            ),
            "give the words the dataset was generated with (dataset.record_length_bytes, \
             num_samples_per_file, format), or generate the dataset again with these",
        );
        true
    }

    /// The rate each epoch's samples/s imply (at the bytes a sample as configured takes) against
    /// the bytes read over the epoch's wall time.
    fn nominal_above_measured(&mut self) {
        let Some(sample_bytes) = self.results.sample_bytes_as_configured else {
            return;
        };
        let sample_mib = sample_bytes / 1048576.0;
        let flagged: Vec<(u64, f64, f64)> = self
            .results
            .epochs
            .iter()
            .map(|e| {
                let nominal = e.train.rates.samples_per_second * sample_mib;
                (e.epoch, nominal, e.train.measured_mib_per_second())
            })
            .filter(|&(_, nominal, measured)| nominal > measured * NOMINAL_OVER_MEASURED)
            .collect();
        let Some(&(_, nominal, measured)) = flagged
            .iter()
            .max_by(|a, b| (a.1 / a.2.max(1e-9)).total_cmp(&(b.1 / b.2.max(1e-9))))
        else {
            return;
        };
        let epochs: Vec<u64> = flagged.iter().map(|f| f.0).collect();
        self.contradicted_epochs = epochs.clone();
        self.push(
            Code::NominalAboveMeasured,
            format!(
                "the samples/s of epoch(s) {} (DLIO's metric window) imply more than \
                 {NOMINAL_OVER_MEASURED} × the bytes read over the epoch's time (up to \
                 {nominal:.1} MiB/s against {measured:.1} MiB/s read): the window left out the \
                 steps that waited for the storage, and DLIO's nominal throughput is not one the \
                 storage delivered",
                epoch_list(&epochs)
            ),
            "longer epochs (more files or fewer accelerators), so the window holds the \
             steady state",
        );
    }

    fn compute_late(&mut self) {
        let asked = self.config.train.computation_time.mean();
        if asked <= 0.0 {
            return;
        }
        let mut lateness = crate::stats::Histogram::default();
        for e in &self.results.epochs {
            lateness.merge(&e.train.compute_lateness);
        }
        let Some(late_us) = lateness.mean_us() else {
            return;
        };
        let fraction = late_us / (asked * 1e6);
        if fraction <= COMPUTE_LATE_FRACTION {
            return;
        }
        self.push(
            Code::ComputeLate,
            format!(
                "the emulated compute ended {late_us:.0} µs late on average, {:.1}% of its \
                 {:.0} µs: the host's CPUs are oversubscribed, and late sleeps count as compute \
                 (AU too high, throughput too low)",
                fraction * 100.0,
                asked * 1e6
            ),
            format!(
                "fewer accelerators or read threads per host ({} rank(s) × {} read thread(s) \
                 here), or more hosts",
                self.results.world, self.config.reader.read_threads
            ),
        );
    }

    fn host_ceiling(&mut self, ceiling: &Ceiling) {
        let threshold = self.config.au_threshold * 100.0;
        if let Ceiling::Measured { au_percent, .. } = *ceiling {
            if au_percent < threshold {
                self.push(
                    Code::HostCeiling,
                    format!(
                        "this host reaches only {au_percent:.2}% AU with no storage I/O at all \
                         (the same ranks, threads, batch and compute time), below the \
                         {threshold:.0}% threshold: a FAIL here is the host's, not the storage's"
                    ),
                    "fewer accelerators per host (more hosts under mpirun), fewer read threads, \
                     or a host with more cores",
                );
            }
        }
    }
}

/// The batches a rank's loader can have read before the trainer asks for them, and what holds
/// them, for the loader `config` runs (docs/formats.md, per loader).
pub(super) fn batches_read_ahead(config: &Config) -> (u64, String) {
    let reader = &config.reader;
    let threads = reader.read_threads.max(1);
    let batch = reader.batch_size.max(1);
    match reader.data_loader {
        DataLoader::Tensorflow if config.dataset.format == Format::Tfrecord => {
            let shuffle = match reader.sample_shuffle {
                crate::config::Shuffle::Off => 0,
                _ => reader.shuffle_size,
            };
            // Each open file's worker also reads a couple of records past what the cycle took.
            let workers = threads * (1 + crate::plan::FILES_AHEAD_PER_LANE);
            let records = shuffle + workers * crate::plan::RECORDS_AHEAD;
            (
                reader.prefetch_size + reader.computation_threads + records.div_ceil(batch),
                format!(
                    "the TensorFlow pipeline's prefetch of {} batch(es), its map's {}, its \
                     shuffle buffer of {shuffle} record(s) and {workers} files' read-ahead, at \
                     batch {batch}",
                    reader.prefetch_size, reader.computation_threads
                ),
            )
        }
        DataLoader::Tensorflow => (
            reader.prefetch_size + 2 * threads,
            format!(
                "the TensorFlow loader's prefetch of {} batch(es) and {threads} generator(s) up \
                 to 2 batches ahead each",
                reader.prefetch_size
            ),
        ),
        DataLoader::Dali => {
            let depth = reader.dali_queue_depth();
            (depth, format!("DALI's pipeline, {depth} batch(es) deep"))
        }
        DataLoader::NativeDali => {
            // DALI's reader: its queue, the pipeline's outputs, and its shuffle buffer's
            // fill (or the 1 sample it keeps read) ahead of the trainer.
            let queue = reader.prefetch_size.max(1);
            let fill = match reader.sample_shuffle {
                crate::config::Shuffle::Off => 1,
                _ if reader.shuffle_size == 0 => 1024,
                _ => reader.shuffle_size,
            };
            let pipeline = crate::plan::dali_shard::PIPELINE_BATCHES;
            (
                queue + pipeline + fill.div_ceil(batch),
                format!(
                    "DALI's reader's queue of {queue} batch(es), the pipeline's {pipeline} \
                     and {fill} sample(s) of fill, at batch {batch}"
                ),
            )
        }
        _ => (
            reader.batches_in_flight(),
            format!(
                "read_threads {} × prefetch {}",
                reader.read_threads,
                reader.prefetch_factor()
            ),
        ),
    }
}
