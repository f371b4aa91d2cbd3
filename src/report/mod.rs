//! What users read: one writer per output of a run ([`crate::results`] holds what they say) —
//! DLIO's JSON files and log, Hydra's YAML files, our report.json, the page, its charts as image
//! files, and the end-of-run table on standard output — and `dlio-rs compare`'s table and page.

pub mod chart;
pub mod compare;
pub mod dlio;
pub mod html;
pub mod hydra;
pub mod log;
pub mod ours;
pub mod over_time;
pub mod png;
pub mod terminal;

use std::io::Write;
use std::path::Path;
use std::time::SystemTime;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::results::Results;
use crate::stats::{Clock, RankRecord};

/// When the run started and ended, in wall-clock time.
#[derive(Debug, Clone, Copy)]
pub struct RunTimes {
    pub start: SystemTime,
    pub end: SystemTime,
}

/// Everything the exporters need about a finished run.
#[derive(Clone, Copy)]
pub struct FinishedRun<'a> {
    pub config: &'a Config,
    pub results: &'a Results,
    pub ranks: &'a [RankRecord],
    pub clock: &'a Clock,
    pub times: RunTimes,
    /// The entropy of `random` shuffles, so the plan can be recomputed.
    pub run_entropy: u64,
    pub startup: &'a Startup,
    /// The hosts of the run's processes.
    pub hosts: &'a crate::comm::Hosts,
    /// The host of each rank (an index into `hosts.hosts`), in the order of `ranks`.
    pub host_of_rank: &'a [usize],
}

/// What happened before the first batch.
#[derive(Debug, Clone, Default)]
pub struct Startup {
    /// Seconds from the start of the process (or the end of generation, when the run generated)
    /// until every rank had its first training batch.
    pub first_batch_seconds: Option<f64>,
    /// How each split's files were found.
    pub file_names: Vec<crate::dataset::names::SplitNames>,
}

/// Every file of a finished run that process 0 writes: DLIO's summary.json and the end of its
/// log, our report.json, and the page (built from the files just written, as `dlio-rs report`
/// rebuilds it). The ranks' own files are each process's ([`dlio::write_rank_files`]). Returns
/// report.json's content, which `run --output-format json` prints.
pub fn write_all(
    folder: &Path,
    log: &log::DlioLog,
    run: &FinishedRun,
) -> Result<serde_json::Value> {
    log.epochs(run);
    if let Some(interrupted) = &run.results.interrupted {
        log.warning(&interrupted.describe(run.results));
    }
    for reason in &run.results.verdict.reasons {
        log.warning(&format!("not a valid measurement: {}", reason.message));
    }
    dlio::write_summary(folder, run)?;
    let report = ours::report(run);
    write_json(&folder.join("report.json"), &report)?;
    let page = html::from_folder(folder)?;
    let path = folder.join("report.html");
    write_atomic(&path, page.as_bytes())?;
    log.output(&format!("Saved outputs in {}", folder.display()));
    log.metric_block(&dlio::metric_block(run.results));
    log.output("outputs saved in RANKID_output.json");
    Ok(report)
}

/// Writes a file under a temporary name, then renames it: readers never see half a file.
pub fn write_atomic(path: &Path, contents: &[u8]) -> Result<()> {
    write_atomic_with(path, |file| file.write_all(contents))
}

/// [`write_atomic`] with the contents streamed by `write` into a buffered file, so that a large
/// output is never held whole in memory.
fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<std::fs::File>) -> std::io::Result<()>,
) -> Result<()> {
    let temporary = path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    crate::folder::create_file(&temporary)
        .and_then(|file| {
            let mut out = std::io::BufWriter::new(file);
            write(&mut out)?;
            out.into_inner().map_err(|e| e.into_error())?;
            std::fs::rename(&temporary, path)
        })
        .map_err(|e| {
            let _ = std::fs::remove_file(&temporary);
            Error::io("cannot write", path, e)
        })
}

/// JSON as Python's `json.dump(obj, f, indent=4)` lays it out.
pub fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    write_atomic_with(path, |out| {
        let formatter = serde_json::ser::PrettyFormatter::with_indent(b"    ");
        let mut serializer = serde_json::Serializer::with_formatter(out, formatter);
        serde::Serialize::serialize(value, &mut serializer).map_err(std::io::Error::from)
    })
}
