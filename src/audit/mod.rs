//! `dlio-rs audit OUTPUT`: checks a traced run against the epoch plans recomputed from the
//! configuration it saved, so that what the engine read can be told apart from what it should
//! have read.
//!
//! Inputs: `OUTPUT/report.json` (`workload`, `configuration`, `num_accelerators`, `run_entropy`)
//! and `OUTPUT/trace/{rank}.csv` for every rank (format in `trace.rs`). Each rank's rows come in
//! run order of segments (epoch 1 train, epoch 1 eval if due, epoch 2 train, …); inside a segment
//! the rows of different reader threads may interleave, but each thread's rows are in the order it
//! read them, and with `read_threads = R ≥ 1` the batch of step k is read by thread k mod R.
//!
//! Per segment, every planned sample must be read exactly once, at its planned rank and step, by
//! its planned thread, in plan order within the thread; nothing else may be read (not the
//! remainder the plan leaves out, not files or samples outside the split, not rows of segments the
//! run does not have), and every rank must take the plan's number of steps.
//!
//! Memory does not grow with the number of rows: the rank files are streamed side by side, one
//! segment at a time, and each row is located in the plan by inverting its permutations. Per
//! segment the audit keeps one bit per planned sample. The order metrics of training epochs
//! (`order.rs`) keep one u64 per training sample and two bits per file and rank (when that memory
//! cannot be had, those metrics are null; with one epoch they are not kept). Where a repeated
//! sample was first read is found by a second pass over the traces, only when there are repeats.

mod bitset;
mod file_names;
mod order;
mod segment;
mod summary;
mod trace;
mod violations;

#[cfg(test)]
mod tests;

use std::path::Path;

use crate::config::fields::Choice;
use crate::config::value::Value;
use crate::config::{Config, TraceFormat};
use crate::dataset::listing::list_split;
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::plan::eval_due;
use crate::plan::{EpochPlan, Phase, PlanSpec};

use bitset::BitSet;
use file_names::FileNames;
use order::OrderTracker;
use segment::SegmentCheck;
pub use summary::{AuditReport, PhaseAudit, StorageValidity};
pub use trace::HEADER as TRACE_HEADER;
use trace::{trace_label, TraceReader, TraceRow};
use violations::Violations;

/// The run as its `report.json` describes it.
struct SavedRun {
    config: Config,
    world: u64,
    run_entropy: u64,
    /// Folders of the splits whose names the run listed (`startup.file_names`).
    listed: Vec<String>,
    /// Whether the run measured the storage, as its verdict said.
    storage: StorageValidity,
    /// The epochs completed by a run a signal stopped (`interrupted.epochs_completed`).
    epochs_completed: Option<u64>,
}

/// The fields of report.json an audit reads, each left a JSON value to check by name.
#[derive(serde::Deserialize)]
struct SavedFields {
    workload: Option<serde_json::Value>,
    num_accelerators: Option<serde_json::Value>,
    run_entropy: Option<serde_json::Value>,
    traced: Option<serde_json::Value>,
    trace_format: Option<serde_json::Value>,
    configuration: Option<serde_json::Value>,
    startup: Option<StartupFields>,
    verdict: Option<serde_json::Value>,
    interrupted: Option<serde_json::Value>,
}

#[derive(serde::Deserialize)]
struct StartupFields {
    file_names: Option<serde_json::Value>,
}

impl SavedFields {
    /// The fields as one JSON object, absent ones left out.
    fn into_value(self) -> serde_json::Value {
        let mut object = serde_json::Map::new();
        let mut put = |key: &str, value: Option<serde_json::Value>| {
            if let Some(value) = value {
                object.insert(key.to_string(), value);
            }
        };
        put("workload", self.workload);
        put("num_accelerators", self.num_accelerators);
        put("run_entropy", self.run_entropy);
        put("traced", self.traced);
        put("trace_format", self.trace_format);
        put("configuration", self.configuration);
        put(
            "startup",
            self.startup
                .map(|s| serde_json::json!({ "file_names": s.file_names })),
        );
        put("verdict", self.verdict);
        put("interrupted", self.interrupted);
        serde_json::Value::Object(object)
    }
}

fn load_run(dir: &Path) -> Result<SavedRun> {
    let path = dir.join("report.json");
    let shown = path.display();
    let text = crate::folder::read_output_file(&path, crate::folder::MAX_SUMMARY_JSON)?
        .ok_or_else(|| {
            Error::usage(format!(
                "{shown} does not exist: {} is not the output folder of a dlio-rs run",
                dir.display()
            ))
        })?;
    let bad_file = |problem: String| crate::folder::bad_output_file(&path, &problem);
    // Only the fields the audit reads are kept; the others (a latency histogram, every epoch's
    // figures) are skipped as they are parsed, so a file's size cannot become memory.
    let json: SavedFields =
        serde_json::from_str(&text).map_err(|e| bad_file(format!("not a run's report ({e})")))?;
    let json = json.into_value();
    let field = |key: &str, what: &str| {
        json.get(key)
            .ok_or_else(|| bad_file(format!("it has no '{key}' ({what})")))
    };
    let bad = |key: &str, what: &str| bad_file(format!("'{key}' must be {what}"));
    let workload = field("workload", "the workload's name")?
        .as_str()
        .ok_or_else(|| bad("workload", "a string"))?;
    let world = field("num_accelerators", "the number of ranks")?
        .as_u64()
        // A trace file and a reader are opened per rank: a forged count must not reach them.
        .filter(|&w| crate::comm::check_world(w).is_ok())
        .ok_or_else(|| {
            bad(
                "num_accelerators",
                &format!("a whole number from 1 to {}", crate::comm::MAX_WORLD),
            )
        })?;
    let run_entropy = field("run_entropy", "the entropy of random shuffles")?
        .as_u64()
        .ok_or_else(|| bad("run_entropy", "a whole number ≥ 0"))?;
    if json.get("traced") == Some(&serde_json::Value::Bool(false)) {
        return Err(Error::usage(format!(
            "{shown}: this run was not traced, so there is nothing to audit; run it again with \
             --trace (or ++workload.output.trace=True)"
        )));
    }
    // A run traced without the CSV has no rows to check (report.json of runs from before the
    // other formats has no trace_format: their traces are CSV).
    let format = json.get("trace_format").and_then(|f| f.as_str());
    if let Some(format) = format.filter(|f| TraceFormat::parse(f).is_some_and(|f| !f.csv())) {
        return Err(Error::usage(format!(
            "{shown}: this run was traced as {format} only, and the audit reads the CSV trace \
             (trace/RANK.csv); run it again with --trace-format csv or all (or \
             ++workload.output.trace_format=csv or all)"
        )));
    }
    let tree = field("configuration", "the workload configuration")?;
    if !tree.is_object() {
        return Err(bad(
            "configuration",
            "an object (the workload's configuration)",
        ));
    }
    let tree = Value::from_json(tree);
    let config = Config::from_tree(workload, tree)
        .map_err(|e| bad_file(format!("the saved configuration is not valid: {e}")))?;
    let listed = json
        .pointer("/startup/file_names")
        .and_then(|names| names.as_array())
        .into_iter()
        .flatten()
        .filter(|n| n["method"] == "listed")
        .filter_map(|n| n["folder"].as_str().map(str::to_string))
        .collect();
    let storage = StorageValidity {
        valid: json.pointer("/verdict/valid").and_then(|v| v.as_bool()),
        reasons: json
            .pointer("/verdict/reasons")
            .and_then(|r| r.as_array())
            .into_iter()
            .flatten()
            .map(|r| {
                format!(
                    "{}: {}",
                    r["code"].as_str().unwrap_or("?"),
                    r["message"].as_str().unwrap_or("")
                )
            })
            .collect(),
    };
    let epochs_completed = match json.get("interrupted") {
        None | Some(serde_json::Value::Null) => None,
        Some(cut) => Some(
            cut["epochs_completed"]
                .as_u64()
                .filter(|&e| e <= config.train.epochs)
                .ok_or_else(|| {
                    bad(
                        "interrupted.epochs_completed",
                        "a whole number of epochs, at most the run's",
                    )
                })?,
        ),
    };
    Ok(SavedRun {
        config,
        world,
        run_entropy,
        listed,
        storage,
        epochs_completed,
    })
}

/// Whether the run has this segment: training every epoch, evaluation when due.
fn segment_exists(config: &Config, epoch: u64, phase: Phase) -> bool {
    (1..=config.train.epochs).contains(&epoch) && (phase == Phase::Train || eval_due(config, epoch))
}

/// Run order of segments.
fn run_order(epoch: u64, phase: Phase) -> (u64, bool) {
    (epoch, phase == Phase::Eval)
}

/// A row that belongs to no segment being checked: one of a segment the run does not have, or
/// one behind the rows of a later segment.
fn stray_row(config: &Config, rank: u64, row: &TraceRow, violations: &mut Violations) {
    violations.add(|| {
        let why = if segment_exists(config, row.epoch, row.phase) {
            "comes after rows of a later phase (a rank's rows must be in run order)".to_string()
        } else if row.phase == Phase::Eval && segment_exists(config, row.epoch, Phase::Train) {
            "is not part of the run: no evaluation is due after this epoch".to_string()
        } else {
            format!(
                "is not part of the run (epochs 1 to {})",
                config.train.epochs
            )
        };
        format!(
            "{}:{}: epoch {} {} step {}: {} sample {}: this read {why}",
            trace_label(rank),
            row.line,
            row.epoch,
            row.phase.as_str(),
            row.step,
            row.file,
            row.sample
        )
    });
}

/// Trace files of ranks the run does not have.
fn check_no_extra_traces(trace_dir: &Path, world: u64, violations: &mut Violations) -> Result<()> {
    let entries =
        std::fs::read_dir(trace_dir).map_err(|e| Error::io("cannot list", trace_dir, e))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let rank = name
            .to_str()
            .and_then(|n| n.strip_suffix(".csv"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(rank) = rank.filter(|&r| r >= world) {
            violations.add(|| {
                format!(
                    "{}: a trace of rank {rank}, but the run had {world} ranks",
                    trace_label(rank)
                )
            });
        }
    }
    Ok(())
}

/// Completes the messages of repeated reads with where each sample was first read: the earliest
/// counted row with the same segment, file and sample in (rank, line) order, the order the audit
/// checks rows in.
fn locate_first_reads(
    trace_dir: &Path,
    config: &Config,
    world: u64,
    violations: &mut Violations,
) -> Result<()> {
    let repeats = violations.repeats_to_locate().to_vec();
    if repeats.is_empty() {
        return Ok(());
    }
    let mut first: Vec<Option<(u64, u64)>> = vec![None; repeats.len()];
    for rank in 0..world {
        let Some(mut reader) = TraceReader::open(trace_dir, rank)? else {
            continue;
        };
        let mut latest = run_order(0, Phase::Train);
        while let Some(row) = reader.peek()? {
            let order = run_order(row.epoch, row.phase);
            // Rows behind a later segment's were not counted as reads.
            if segment_exists(config, row.epoch, row.phase) && order >= latest {
                latest = order;
                for (repeat, found) in repeats.iter().zip(&mut first) {
                    if found.is_none()
                        && (repeat.epoch, repeat.phase, repeat.sample)
                            == (row.epoch, row.phase, row.sample)
                        && repeat.file == row.file
                        && (rank, row.line) < (repeat.rank, repeat.line)
                    {
                        *found = Some((rank, row.line));
                    }
                }
            }
            reader.consume();
        }
    }
    for (repeat, found) in repeats.iter().zip(first) {
        if let Some((rank, line)) = found {
            violations.first_read_at(repeat.message, rank, line);
        }
    }
    Ok(())
}

/// Lists the data folder's splits that the run listed, as it did: their names are not the
/// scheme's, so the plan's file indices are positions in that listing.
fn relist(dataset: &mut Dataset, config: &Config, listed: &[String]) -> Result<()> {
    let storage = crate::storage::for_data(config, 1)?;
    for phase in [Phase::Train, Phase::Eval] {
        let split = dataset.split(phase);
        if !listed.iter().any(|folder| folder == split.folder) {
            continue;
        }
        let mut list = list_split(storage.as_ref(), split.folder, dataset.format, &mut |_| {})
            .map_err(|e| {
                Error::run(format!(
                    "the run listed {}, and listing it again failed: {e}",
                    storage.describe(split.folder)
                ))
            })?;
        if list.len() < split.files {
            return Err(Error::run(format!(
                "the run listed {}, which now holds {} {} file(s), fewer than the {} it read",
                storage.describe(split.folder),
                list.len(),
                dataset.format,
                split.files
            )));
        }
        list.truncate(split.files);
        dataset.split_mut(phase).listed = Some(std::sync::Arc::new(list));
    }
    Ok(())
}

/// Audits the traced run in `dir`. An unreadable or malformed output folder is an error; what
/// the traces show wrong is in the report (`passed` false).
pub fn audit(dir: &Path) -> Result<AuditReport> {
    let SavedRun {
        mut config,
        world,
        run_entropy,
        listed,
        storage,
        epochs_completed,
    } = load_run(dir)?;
    // A run a signal stopped is checked over the epochs it completed; the rows of the epoch it
    // cut short are counted, not judged (that epoch read only part of its plan).
    if let Some(completed) = epochs_completed {
        config.train.epochs = completed;
    }
    let cut_short = |row: &TraceRow| epochs_completed.is_some_and(|e| row.epoch > e);
    let mut rows_not_checked = 0u64;
    if !config.workflow.train {
        return Err(Error::usage(format!(
            "{}: the run did not train (workflow.train is False), so it read nothing to audit",
            dir.join("report.json").display()
        )));
    }
    let trace_dir = dir.join("trace");
    if !trace_dir.is_dir() {
        return Err(Error::usage(format!(
            "{} is not a folder; trace a run with `dlio-rs run --trace` (or output.trace: True)",
            trace_dir.display()
        )));
    }
    let mut dataset = Dataset::from_config(&config);
    relist(&mut dataset, &config, &listed)?;
    let mut violations = Violations::default();
    let mut readers = Vec::with_capacity(world as usize);
    for rank in 0..world {
        let reader = TraceReader::open(&trace_dir, rank)?;
        if reader.is_none() {
            violations.add(|| format!("{}: missing (rank {rank} of {world})", trace_label(rank)));
        }
        readers.push(reader);
    }
    check_no_extra_traces(&trace_dir, world, &mut violations)?;
    let has_trace: Vec<bool> = readers.iter().map(Option::is_some).collect();

    // One epoch has nothing to compare its order with: no need for a position per sample.
    let mut order = (config.train.epochs > 1)
        .then(|| {
            OrderTracker::new(&PlanSpec::for_phase(
                &config,
                Phase::Train,
                world,
                run_entropy,
            ))
        })
        .flatten();
    let mut phases = Vec::new();
    let mut read = BitSet::default();
    for epoch in 1..=config.train.epochs {
        for phase in [Phase::Train, Phase::Eval] {
            if !segment_exists(&config, epoch, phase) {
                continue;
            }
            let plan = EpochPlan::new(
                PlanSpec::for_phase(&config, phase, world, run_entropy),
                epoch,
            );
            let names = FileNames::new(&dataset, dataset.split(phase));
            let reader_threads = (
                config.reader.read_threads,
                config.reader.data_loader == crate::config::DataLoader::Dali,
            );
            let mut check = SegmentCheck::new(
                epoch,
                phase,
                plan,
                reader_threads,
                names,
                std::mem::take(&mut read),
            )?;
            let tracks_order = phase == Phase::Train;
            for (rank, reader) in readers.iter_mut().enumerate() {
                let Some(reader) = reader else { continue };
                let rank = rank as u64;
                while let Some(row) = reader.peek()? {
                    if (row.epoch, row.phase) == (epoch, phase) {
                        let order = order.as_mut().filter(|_| tracks_order);
                        check.check(rank, row, &mut violations, order);
                    } else if segment_exists(&config, row.epoch, row.phase)
                        && run_order(row.epoch, row.phase) > run_order(epoch, phase)
                    {
                        break;
                    } else if cut_short(row) {
                        rows_not_checked += 1;
                    } else {
                        stray_row(&config, rank, row, &mut violations);
                    }
                    reader.consume();
                }
            }
            let order = order.as_mut().filter(|_| tracks_order);
            let (summary, bitmap) = check.finish(&has_trace, &mut violations, order);
            read = bitmap;
            phases.push(summary);
        }
    }
    for (rank, reader) in readers.iter_mut().enumerate() {
        let Some(reader) = reader else { continue };
        while let Some(row) = reader.peek()? {
            match cut_short(row) {
                true => rows_not_checked += 1,
                false => stray_row(&config, rank as u64, row, &mut violations),
            }
            reader.consume();
        }
    }
    locate_first_reads(&trace_dir, &config, world, &mut violations)?;
    let count = violations.count();
    Ok(AuditReport {
        passed: count == 0,
        violations: count,
        first_violations: violations.into_messages(),
        phases,
        world,
        storage,
        interrupted: epochs_completed.map(|epochs_completed| summary::Cut {
            epochs_completed,
            rows_not_checked,
        }),
    })
}
