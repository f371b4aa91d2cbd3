//! The run's time series: what each rank did in each interval (1 s by default,
//! `output.timeseries_interval`), summed per host and for the run, with the host's CPU, memory
//! and disks beside it — so that a stall of the storage, a slow host or a queue of reads running
//! dry shows *within* an epoch. Written as the run goes to `timeseries.jsonl` beside the other
//! outputs; docs/metrics.md defines every field.
//!
//! - [`counters`]: the ranks' running totals, plain atomics each written by one thread (a read
//!   costs its reader a few stores), and the time inside reads, the read under way included.
//! - `host`: the kernel's counters of the host (`/proc/stat`, `/proc/meminfo`,
//!   `/proc/diskstats` of the run's devices).
//! - `sampler`: one thread per process that wakes at each interval's end and appends that
//!   interval's lines (one per rank, one for the process), flushed at once: memory does not grow
//!   with the run's length.
//! - `exporter`: the live endpoint for dashboards (Prometheus's text format), a page the
//!   sampler renders each interval.
//! - `merge`: in a run of several processes, each writes `timeseries/{process}.jsonl` as it
//!   goes; at the end they send their lines to process 0 a few intervals at a time, which writes
//!   the run's file with the host and run lines (memory bounded by the chunk, not the run).

pub mod counters;
mod exporter;
mod host;
mod merge;
mod sampler;

use std::path::{Path, PathBuf};

pub use counters::{Counters, RankCounters, ReadMeter, ReadStamp};
pub use exporter::Exporter;
pub use merge::merge;
pub use sampler::{Sampler, Sources};

use crate::error::Result;
use crate::folder::Beneath;
use sampler::write_error;

/// The run's time series, in the output folder.
pub const RUN_FILE: &str = "timeseries.jsonl";
/// The folder of each process's own file in a run of several, until they are merged.
const PROCESS_FOLDER: &str = "timeseries";

/// What a line describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One rank.
    Rank,
    /// One process's ranks (only in a process's own file, before the merge).
    Process,
    /// The ranks of one host, and the host's own counters.
    Host,
    /// Every rank of the run.
    Run,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Rank => "rank",
            Kind::Process => "process",
            Kind::Host => "host",
            Kind::Run => "run",
        }
    }
}

/// Removes the time-series files an earlier run left in the output folder `output` (the run's
/// file, and the per-process files of an MPI job), so that a run with none never leaves another
/// run's beside its report; other files are left alone, and no link is followed.
pub fn remove_old(output: &Path) -> Result<()> {
    let folder = Beneath::open(output).map_err(|e| write_error(output, e))?;
    let mut old = vec![PathBuf::from(RUN_FILE)];
    let dir = output.join(PROCESS_FOLDER);
    let is_link = std::fs::symlink_metadata(&dir).is_ok_and(|m| m.file_type().is_symlink());
    if !is_link {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                let stem = name.to_string_lossy();
                let stem = stem.strip_suffix(".jsonl").unwrap_or_default();
                if !stem.is_empty() && stem.bytes().all(|b| b.is_ascii_digit()) {
                    old.push(Path::new(PROCESS_FOLDER).join(name));
                }
            }
        }
    }
    for name in old {
        match folder.remove_file(&name) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(write_error(&folder.path(&name), e))
            }
            _ => {}
        }
    }
    // Gone when it held only time series, so a run without one leaves no empty folder behind.
    let _ = std::fs::remove_dir(&dir);
    Ok(())
}
