//! The fifth phase: every process's records gathered to process 0, which computes the results
//! of all ranks ([`Results::from_ranks`]), writes the run's files and prints the table and the
//! warnings; every process writes its own ranks' files first, and learns how process 0's
//! reports went.

use std::path::Path;

use super::outputs::Outputs;
use super::ranks::RanksDone;
use super::setup::Setup;
use crate::comm::{agree, gather_values, Comm, Hosts};
use crate::config::Config;
use crate::dataset::names::SplitNames;
use crate::error::Result;
use crate::report::log::DlioLog;
use crate::report::{self, dlio as dlio_report, terminal, FinishedRun, RunTimes, Startup};
use crate::results::{Interruption, Results};
use crate::stats::{Clock, RankRecord};
use crate::storage::{Accounting, RequestCounts};

/// Writes this process's ranks' files, then gathers every process's records to process 0, which
/// reports the run; its results, in process 0.
pub(super) fn gather_and_report(
    comm: &dyn Comm,
    setup: &Setup,
    hosts: &Hosts,
    outputs: &Outputs,
    done: RanksDone,
    file_names: Vec<SplitNames>,
    quiet: bool,
) -> Result<Option<Results>> {
    let checkpoint_bytes = setup.checkpoints.as_ref().map(|c| c.geometry.total_bytes());
    let written = dlio_report::write_rank_files(
        &outputs.folder,
        &setup.config,
        &done.ranks,
        comm.world() as u64,
        &done.clock,
        hosts,
        checkpoint_bytes.unwrap_or(0),
    );
    agree(comm, written)?;
    let gathered = gather_values(
        comm,
        &ProcessRecord {
            host: hosts.host_of_process[comm.process()],
            ranks: done.ranks,
            data_requests: setup.storage.request_counts(),
            checkpoint_requests: setup
                .checkpoints
                .as_ref()
                .and_then(|c| c.storage.request_counts()),
        },
    )?;
    let reported = gathered.map(|processes| {
        report_run(&ReportInputs {
            config: &setup.config,
            processes,
            accounting: setup.storage.accounting(),
            hosts,
            clock: &done.clock,
            times: RunTimes {
                start: outputs.start,
                end: done.end,
            },
            run_entropy: done.run_entropy,
            startup: Startup {
                first_batch_seconds: done.first_batch_seconds,
                file_names,
            },
            output_folder: &outputs.folder,
            log: &outputs.log,
            quiet,
            checkpoint_bytes,
            interrupted: done.interrupted,
        })
    });
    // Every process learns how process 0's reports went.
    agree(comm, reported.transpose())
}

/// The requests of every process's object storage, summed: for the data, then the checkpoints
/// (none where the storage is a file system).
fn requests_of_all(processes: &[ProcessRecord]) -> Vec<(&'static str, RequestCounts)> {
    let mut sums = Vec::new();
    for (what, of) in [
        (
            "data",
            (|p: &ProcessRecord| p.data_requests.clone()) as fn(&ProcessRecord) -> _,
        ),
        ("checkpoints", |p| p.checkpoint_requests.clone()),
    ] {
        let mut sum: Option<RequestCounts> = None;
        for counts in processes.iter().filter_map(of) {
            sum.get_or_insert_with(RequestCounts::default)
                .merge(&counts);
        }
        if let Some(sum) = sum.filter(RequestCounts::any) {
            sums.push((what, sum));
        }
    }
    sums
}

/// One process's part of the results, sent to process 0.
#[derive(serde::Serialize, serde::Deserialize)]
struct ProcessRecord {
    /// The process's host, as an index into [`Hosts::hosts`].
    host: usize,
    ranks: Vec<RankRecord>,
    /// The requests the process's object storage made, for its data and its checkpoints.
    data_requests: Option<RequestCounts>,
    checkpoint_requests: Option<RequestCounts>,
}

/// What process 0 needs to write the run's reports.
struct ReportInputs<'a> {
    config: &'a Config,
    processes: Vec<ProcessRecord>,
    accounting: Accounting,
    hosts: &'a Hosts,
    clock: &'a Clock,
    times: RunTimes,
    run_entropy: u64,
    startup: Startup,
    output_folder: &'a Path,
    log: &'a DlioLog,
    quiet: bool,
    /// Bytes of one checkpoint, all ranks, when the run checkpoints.
    checkpoint_bytes: Option<u64>,
    /// Set when a signal stopped the run.
    interrupted: Option<Interruption>,
}

/// Process 0: the results of all ranks, the run's files, and the terminal report.
fn report_run(inputs: &ReportInputs) -> Result<Results> {
    let config = inputs.config;
    let mut host_of_rank = Vec::new();
    let mut ranks = Vec::new();
    for process in &inputs.processes {
        host_of_rank.extend(std::iter::repeat_n(process.host, process.ranks.len()));
        ranks.extend(process.ranks.iter().cloned());
    }
    let mut results = Results::from_ranks(
        config,
        &ranks,
        inputs.accounting.clone(),
        inputs.hosts.total_memory_bytes(),
    );
    results.checkpoint_bytes = inputs.checkpoint_bytes;
    results.requests = requests_of_all(&inputs.processes);
    results.interrupted = inputs.interrupted;
    let finished = FinishedRun {
        config,
        results: &results,
        ranks: &ranks,
        clock: inputs.clock,
        times: inputs.times,
        run_entropy: inputs.run_entropy,
        startup: &inputs.startup,
        hosts: inputs.hosts,
        host_of_rank: &host_of_rank,
    };
    report::write_all(inputs.output_folder, inputs.log, &finished)?;
    if !inputs.quiet {
        let table = terminal::render(config, &results, &inputs.startup, inputs.output_folder);
        // The results are saved by now: a terminal that cannot take the table does not fail
        // the run.
        if let Err(e) = crate::console::print_out(&table) {
            crate::console::tell(format_args!(
                "warning: {e}; the results are in {}",
                inputs.output_folder.display()
            ));
        }
    }
    // Loud, and even with --quiet: a number that measured memory must not pass unnoticed.
    for warning in &results.warnings {
        crate::console::tell(format_args!("WARNING: {warning}"));
    }
    Ok(results)
}
