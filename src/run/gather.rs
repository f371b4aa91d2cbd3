//! The fifth phase: every process's records gathered to process 0, which computes the results
//! of all ranks ([`Results::from_ranks`]), writes the run's files and prints the table and the
//! warnings; every process writes its own ranks' files first, and learns how process 0's
//! reports went.

use super::outputs::Outputs;
use super::ranks::RanksDone;
use super::setup::Setup;
use crate::comm::{agree, gather_values, Comm, Hosts};
use crate::dataset::names::SplitNames;
use crate::error::Result;
use crate::machine::{show, Human};
use crate::report::{self, dlio as dlio_report, terminal, FinishedRun, RunTimes, Startup};
use crate::results::verdict::Ceiling;
use crate::results::{Measured, Results};
use crate::stats::RankRecord;
use crate::storage::RequestCounts;

/// What the terminal is shown of a run's results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shown {
    /// The table, then the verdict.
    Table,
    /// The verdict only (`--quiet`: the one answer is never withheld).
    Verdict,
    /// Nothing: a sweep's trial, whose figures the sweep shows itself.
    Nothing,
}

impl Shown {
    pub(super) fn of(options: &super::RunOptions) -> Shown {
        match (options.table, options.quiet) {
            (false, _) => Shown::Nothing,
            (true, true) => Shown::Verdict,
            (true, false) => Shown::Table,
        }
    }
}

/// What process 0 reported of a run: its results, and report.json's content.
pub(super) struct Reported {
    pub results: Results,
    pub report: serde_json::Value,
}

/// Writes this process's ranks' files, then gathers every process's records to process 0, which
/// reports the run, showing the terminal its table and verdict on `human`'s stream; its results,
/// in process 0.
pub(super) fn gather_and_report(
    comm: &dyn Comm,
    setup: &Setup,
    hosts: &Hosts,
    outputs: &Outputs,
    (mut done, ceiling): (RanksDone, Ceiling),
    file_names: Vec<SplitNames>,
    (shown, human): (Shown, Human),
) -> Result<Option<Reported>> {
    let written = dlio_report::write_rank_files(
        &outputs.folder,
        &setup.config,
        &done.ranks,
        comm.world() as u64,
        &done.clock,
        hosts,
        checkpoint_bytes(setup).unwrap_or(0),
    );
    agree(comm, written)?;
    let gathered = gather_values(
        comm,
        &ProcessRecord {
            host: hosts.host_of_process[comm.process()],
            ranks: std::mem::take(&mut done.ranks),
            data_requests: setup.storage.request_counts(),
            checkpoint_requests: setup
                .checkpoints
                .as_ref()
                .and_then(|c| c.storage.request_counts()),
        },
    )?;
    let startup = Startup {
        first_batch_seconds: done.first_batch_seconds,
        file_names,
    };
    let reported = gathered.map(|processes| {
        report_run(
            setup,
            hosts,
            outputs,
            (&done, ceiling),
            &processes,
            &startup,
            (shown, human),
        )
    });
    // Every process learns how process 0's reports went.
    agree(comm, reported.transpose())
}

/// Bytes of one checkpoint, all ranks, when the run checkpoints.
fn checkpoint_bytes(setup: &Setup) -> Option<u64> {
    setup.checkpoints.as_ref().map(|c| c.geometry.total_bytes())
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

/// Process 0: the results of all ranks (`done` has the clock, its ranks' records are in
/// `processes`), the run's files, and the terminal report.
fn report_run(
    setup: &Setup,
    hosts: &Hosts,
    outputs: &Outputs,
    (done, ceiling): (&RanksDone, Ceiling),
    processes: &[ProcessRecord],
    startup: &Startup,
    (shown, human): (Shown, Human),
) -> Result<Reported> {
    let config = &setup.config;
    let mut host_of_rank = Vec::new();
    let mut ranks = Vec::new();
    for process in processes {
        host_of_rank.extend(std::iter::repeat_n(process.host, process.ranks.len()));
        ranks.extend(process.ranks.iter().cloned());
    }
    let measured = Measured {
        accounting: setup.storage.accounting(),
        client_memory_bytes: hosts.total_memory_bytes(),
        sample_bytes_as_configured: crate::format::sample_bytes_as_configured(config),
    };
    let mut results = Results::from_ranks(config, &ranks, measured, done.interrupted, ceiling);
    results.checkpoint_bytes = checkpoint_bytes(setup);
    results.requests = requests_of_all(processes);
    let finished = FinishedRun {
        config,
        results: &results,
        ranks: &ranks,
        clock: &done.clock,
        times: RunTimes {
            start: outputs.start,
            end: done.end,
        },
        run_entropy: done.run_entropy,
        startup,
        hosts,
        host_of_rank: &host_of_rank,
    };
    let report = report::write_all(&outputs.folder, &outputs.log, &finished)?;
    if shown == Shown::Table {
        let table = terminal::render(config, &results, startup, &outputs.folder);
        // The results are saved by now: a terminal that cannot take the table does not fail
        // the run.
        if let Err(e) = show(&table, human) {
            crate::console::tell(format_args!(
                "warning: {e}; the results are in {}",
                outputs.folder.display()
            ));
        }
    }
    // Even with --quiet, beside the table: the verdict, and every reason a
    // number may not be the storage's, said once.
    let verdict = match shown {
        Shown::Nothing => Ok(()),
        Shown::Table | Shown::Verdict => show(&results.verdict.render(), human),
    };
    if let Err(e) = verdict {
        crate::console::tell(format_args!(
            "warning: {e}; the verdict is in {}",
            outputs.folder.join("report.json").display()
        ));
    }
    Ok(Reported { results, report })
}
