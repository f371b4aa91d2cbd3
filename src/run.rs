//! A whole run, as `dlio-rs run` and `dlio_benchmark` perform it: resolve the configuration, set
//! up the output folder, generate data if asked, train on every rank, and write the reports. One
//! process runs it alone, or each process of an MPI job runs its part (see [`crate::comm`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::checkpoint::{Checkpointing, Geometry, Schedule};
use crate::comm::{self, agree, broadcast_value, gather_values, Comm, Hosts, Processes, Reduce};
use crate::config::{Config, PageCache, Source, StorageType};
use crate::dataset::listing::FileList;
use crate::dataset::names::{self, ListingRules, SplitNames};
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::folder::{self, Access, FolderLock, OutputFolder};
use crate::format::{self, FileFormat};
use crate::generate::{self, Generated, Share};
use crate::loader::trace;
use crate::plan::{Phase, PlanSpec};
use crate::progress::{Display, EpochProgress};
use crate::report::dlio as dlio_report;
use crate::report::log::DlioLog;
use crate::report::{html, hydra, ours, terminal, write_json, FinishedRun, RunTimes, Startup};
use crate::results::{validity, Interruption, Results};
use crate::stats::{Clock, RankRecord};
use crate::storage::{self, Accounting, RequestCounts, Storage};
use crate::trainer::{self, RunContext};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Emulated accelerators (ranks) in this process, each a set of threads; an MPI job has this
    /// many in each of its processes.
    pub accelerators: usize,
    /// No progress and no end-of-run table.
    pub quiet: bool,
    /// The end-of-run table, unless quiet (a sweep prints its own, of all its trials).
    pub table: bool,
    pub strict: bool,
    /// Check data checksums on every read (CPU work DLIO's numpy readers do).
    pub verify: bool,
    /// Write the read trace (as `output.trace: True` does).
    pub trace: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            accelerators: 1,
            quiet: false,
            table: true,
            strict: false,
            verify: false,
            trace: false,
        }
    }
}

/// What a finished run leaves behind.
#[derive(Debug)]
pub struct Outcome {
    pub output_folder: PathBuf,
    pub generated: Option<Generated>,
    pub results: Option<Results>,
    /// The signal the run stopped for, in every process (whichever received it).
    pub stopped_by: Option<i32>,
}

/// The run of `source` in the job this process was started in (alone, or one of `mpirun`'s).
pub fn run(source: &Source, options: &RunOptions) -> Result<Outcome> {
    run_among(&Processes::join()?, source, options)
}

/// The run of `source` by the processes of `processes`, each hosting `options.accelerators`
/// ranks; several runs may follow one another in one job (a sweep's trials).
pub fn run_among(processes: &Processes, source: &Source, options: &RunOptions) -> Result<Outcome> {
    let comm = processes.group(options.accelerators)?;
    let outcome = run_in(comm.as_ref(), source, options);
    comm::conclude(comm.as_ref(), outcome)
}

/// What every process sets up before it writes anything: the checked configuration and what it
/// reads through.
struct Setup {
    config: Config,
    dataset: Dataset,
    format: Box<dyn FileFormat>,
    storage: Box<dyn Storage>,
    /// How long a page-cache drop may take, when the run drops it (`drop_before_epoch`).
    drop_timeout: Option<Duration>,
    /// The run's checkpoints, when it saves or loads any.
    checkpoints: Option<CheckpointSetup>,
}

/// What the checkpoints need, checked before anything is written.
struct CheckpointSetup {
    geometry: Geometry,
    schedule: Schedule,
    storage: Box<dyn Storage>,
}

/// The run as one process of `comm` performs it. Process 0 leads: it writes the run's shared
/// files (Hydra's, dlio.log, summary.json, report.json), finds the dataset's files for everyone,
/// and prints; every process writes its own ranks' files. Each step that can fail in one process
/// and not another ends in an [`agree`]ment, so all go on or all stop.
fn run_in(comm: &dyn Comm, source: &Source, options: &RunOptions) -> Result<Outcome> {
    let lead = comm.process() == 0;
    let display = Display::for_stderr(options.quiet || !lead);
    let world = comm.world() as u64;
    let Setup {
        config,
        mut dataset,
        format,
        storage,
        drop_timeout,
        checkpoints,
    } = agree(comm, set_up(source, options, world, lead))?;
    let checkpointing = checkpoints.as_ref().map(|c| Checkpointing {
        geometry: &c.geometry,
        schedule: c.schedule,
        storage: c.storage.as_ref(),
        fsync: config.checkpoint.fsync,
        randomize: config.checkpoint.randomize_tensor,
    });
    let hosts = Hosts::gather(comm)?;
    warn_about_cpu_binding(comm, &config, &hosts)?;
    // A format that reads no storage (synthetic) needs no dataset: none is generated or looked for.
    let needs_data = format.reads_storage();
    // The output folder is taken before anything can fail for want of data, so that the folder
    // of a failed run holds its log, never an earlier run's results.
    let start = broadcast_value(comm, Some(SystemTime::now()))?;
    let claimed = agree(
        comm,
        lead.then(|| create_outputs(&config, source, start, world))
            .transpose(),
    )?;
    let output_folder = broadcast_value(comm, claimed.as_ref().map(|c| c.0.path().to_path_buf()))?;
    // The other processes make the folder where they see it (another host's file system, maybe);
    // every process takes part in the agreement.
    let made = match lead {
        true => Ok(()),
        false => std::fs::create_dir_all(&output_folder)
            .map_err(|e| Error::io("cannot create output folder", &output_folder, e)),
    };
    agree(comm, made)?;
    // Held to the end of the run: the folder stays this run's while it runs.
    let (_folder, log) = match claimed {
        Some((folder, log)) => (Some(folder), log),
        None => (None, DlioLog::none()),
    };
    // Whatever fails from here on is told in the log and report.json, in this run's folder.
    let outcome = (|| -> Result<Outcome> {
        // Process 0 holds the data folder while the run generates or reads it (crate::lock).
        let mut data_lock = None;
        // Start-up is timed from the start of the process, or from the end of generation.
        let mut startup_origin = crate::system::process_start();
        let generated = if config.workflow.generate_data && needs_data {
            let generated = generate_together(
                comm,
                &dataset,
                format.as_ref(),
                storage.as_ref(),
                &log,
                display,
                &mut data_lock,
            )?;
            startup_origin = std::time::Instant::now();
            Some(generated)
        } else {
            None
        };
        let trains = config.workflow.train;
        if !trains && checkpointing.is_none() {
            // DLIO writes no result files for a generate-only run.
            log.check()?;
            return Ok(Outcome {
                output_folder: output_folder.clone(),
                generated,
                results: None,
                stopped_by: None,
            });
        }

        // After the generation, if any: the files it made are found as any others.
        let file_names = if trains && needs_data {
            find_dataset_once(
                comm,
                &config,
                source,
                &mut dataset,
                storage.as_ref(),
                display,
                &mut data_lock,
            )?
        } else {
            Vec::new()
        };
        for found in &file_names {
            log.output(&found.describe());
        }
        if trains {
            log.run_plan(&config, world);
        }
        if let Some(c) = &checkpointing {
            log.checkpoint_plan(c.geometry);
        }
        if trains && dlio_report::potential_caching(&config, world, &hosts) {
            log.warning(
                "The amount of dataset is smaller than the host memory; data might be cached after the \
                 first epoch. Increase the size of dataset to eliminate the caching effect!!!",
            );
        }
        let dataset_size = validity::DatasetSize::new(&config, hosts.total_memory_bytes());
        if let (true, true, Some(warning)) = (lead, trains, dataset_size.warning(&config)) {
            crate::console::tell(format_args!("warning: {warning}"));
        }

        // Drawn once so every rank plans the same `random` order; saved so an audit can replan it.
        let run_entropy = broadcast_value(comm, Some(crate::plan::draw_run_entropy()))?;
        // Every process starts its clock as it leaves this meeting, and takes process 0's wall time;
        // a run told to stop before it starts stops here, all processes together.
        comm::check_interrupt(comm)?;
        let clock = Clock::start();
        let clock = Clock::start_with_wall(broadcast_value(comm, Some(clock.start_wall()))?);
        let trace_dir = config.output.trace.then(|| output_folder.join(TRACE_DIR));
        let ctx = RunContext {
            config: &config,
            dataset: &dataset,
            format: format.as_ref(),
            storage: storage.as_ref(),
            comm,
            clock: &clock,
            run_entropy,
            progress: None,
            trace_dir: trace_dir.as_deref(),
            page_cache_drop: drop_timeout.filter(|_| hosts.leads_its_host()),
            checkpointing: checkpointing.as_ref(),
        };
        let mut ranks = match (&checkpointing, trains) {
            (Some(checkpointing), false) => run_local_ranks(&ctx, display, |ctx, rank| {
                trainer::checkpoint_only_rank(ctx, checkpointing, rank)
            })?,
            _ => run_local_ranks(&ctx, display, trainer::train_rank)?,
        };
        let end = SystemTime::now();
        let interrupted = match comm.stopped() {
            Some(signal) => Some(keep_what_all_completed(comm, &mut ranks, signal, &config)?),
            None => None,
        };
        let first_batch_seconds = first_batch_seconds(comm, &clock, startup_origin, &ranks)?;
        agree(
            comm,
            dlio_report::write_rank_files(
                &output_folder,
                &config,
                &ranks,
                world,
                &clock,
                &hosts,
                checkpointing
                    .as_ref()
                    .map_or(0, |c| c.geometry.total_bytes()),
            ),
        )?;
        let gathered = gather_values(
            comm,
            &ProcessRecord {
                host: hosts.host_of_process[comm.process()],
                ranks,
                data_requests: storage.request_counts(),
                checkpoint_requests: checkpointing
                    .as_ref()
                    .and_then(|c| c.storage.request_counts()),
            },
        )?;
        let reported = gathered.map(|processes| {
            report_run(&ReportInputs {
                config: &config,
                processes,
                accounting: storage.accounting(),
                hosts: &hosts,
                clock: &clock,
                times: RunTimes { start, end },
                run_entropy,
                startup: Startup {
                    first_batch_seconds,
                    file_names,
                },
                output_folder: &output_folder,
                log: &log,
                quiet: options.quiet || !options.table,
                checkpoint_bytes: checkpointing.as_ref().map(|c| c.geometry.total_bytes()),
                interrupted,
            })
        });
        // Every process learns how process 0's reports went.
        let results = agree(comm, reported.transpose())?;
        if !config.dataset.keep_files && needs_data {
            let share = share_of(comm);
            agree(
                comm,
                delete_dataset(&dataset, format.as_ref(), storage.as_ref(), &share),
            )?;
        }
        log.check()?;
        Ok(Outcome {
            output_folder: output_folder.clone(),
            generated,
            results,
            stopped_by: interrupted.map(|i| i.signal),
        })
    })();
    if let (Err(error), true) = (&outcome, lead) {
        record_failure(&output_folder, &log, error);
    }
    outcome
}

/// Resolves and checks the configuration; nothing is written yet.
fn set_up(source: &Source, options: &RunOptions, world: u64, lead: bool) -> Result<Setup> {
    let mut config = source.resolve(options.strict)?;
    config.output.trace |= options.trace;
    if lead {
        for key in &config.unknown_keys {
            crate::console::tell(format_args!(
                "warning: unknown configuration key workload.{key} (ignored; --strict rejects it)"
            ));
        }
    }
    config.check_supported()?;
    let object_store = config.storage.storage_type == StorageType::S3;
    if let (true, true, Some(keys)) = (lead, object_store, cache_keys_set(&config)) {
        crate::console::tell(format_args!(
            "warning: {keys} ignored with storage_type = s3: objects are read over the network, \
             and nothing of them is cached on this host"
        ));
    }
    let drop_timeout = if config.workflow.train
        && !object_store
        && config.reader.page_cache == PageCache::DropBeforeEpoch
    {
        crate::system::check_can_drop_page_cache().map_err(|why| {
            Error::usage(format!(
                "workload.reader.page_cache = drop_before_epoch: {why}; \
                 use evict_after_read, which needs no root"
            ))
        })?;
        Some(crate::system::drop_cache_timeout().map_err(Error::usage)?)
    } else {
        None
    };
    let dataset = Dataset::from_config(&config);
    let format = format::for_config(&config, options.verify)?;
    let local_ranks = options.accelerators;
    let storage = storage::for_data(&config, local_ranks * config.reader.read_threads as usize)?;
    if config.workflow.generate_data || config.workflow.train {
        storage.check_access(config.workflow.generate_data)?;
    }
    // Bad input is reported before anything is written.
    if config.workflow.train {
        check_steps(&config, world)?;
        check_threads(options.accelerators as u64, config.reader.read_threads)?;
    }
    let checkpoints = match Schedule::for_config(&config) {
        Schedule::Never => None,
        schedule => Some(CheckpointSetup {
            geometry: Geometry::new(&config, world)?,
            schedule,
            storage: storage::for_checkpoints(&config, local_ranks)?,
        }),
    };
    if let Some(c) = &checkpoints {
        c.storage
            .check_access(!matches!(c.schedule, Schedule::Only { writes: 0, .. }))?;
        if matches!(c.schedule, Schedule::Only { reads: 1.., .. }) {
            c.geometry.check_readable()?;
        }
        if let Some(folder) = c.storage.local_root() {
            check_room_for_a_checkpoint(&c.geometry, folder, options.accelerators as u64)?;
        }
    }
    Ok(Setup {
        config,
        dataset,
        format,
        storage,
        drop_timeout,
        checkpoints,
    })
}

/// The page-cache and O_DIRECT settings of the configuration that are on, named; `None` if none
/// is.
fn cache_keys_set(config: &Config) -> Option<String> {
    let set: Vec<&str> = [
        (config.reader.odirect, "workload.reader.odirect"),
        (
            config.reader.page_cache != PageCache::Keep,
            "workload.reader.page_cache",
        ),
        (config.checkpoint.odirect, "workload.checkpoint.odirect"),
    ]
    .into_iter()
    .filter_map(|(on, key)| on.then_some(key))
    .collect();
    (!set.is_empty()).then(|| set.join(", "))
}

/// Refuses a checkpoint whose files from this process's ranks could not fit in the file system's
/// free space: it would run until the disk is full, and fail there.
fn check_room_for_a_checkpoint(geometry: &Geometry, folder: &Path, local_ranks: u64) -> Result<()> {
    let Some(free) = crate::system::free_bytes(folder) else {
        return Ok(());
    };
    // The ranks of any one process write about as much as those of another; the largest share
    // is what must fit.
    let mut shares: Vec<u64> = (0..geometry.world())
        .map(|rank| geometry.files(rank).iter().map(|f| f.bytes).sum())
        .collect();
    shares.sort_unstable_by(|a, b| b.cmp(a));
    let needed: u64 = shares.iter().take(local_ranks as usize).sum();
    if needed > free {
        return Err(Error::usage(format!(
            "one checkpoint of this process's {local_ranks} rank(s) is {needed} bytes ({:.1} GiB), \
             more than the {free} bytes ({:.1} GiB) free in {}; make the model smaller \
             (workload.model.*), or give workload.checkpoint.checkpoint_folder more room",
            needed as f64 / (1u64 << 30) as f64,
            free as f64 / (1u64 << 30) as f64,
            folder.display()
        )));
    }
    Ok(())
}

/// Refuses more rank and reader threads than this process can start: past the system's limits a
/// thread cannot be made, or dies as it starts.
fn check_threads(local_ranks: u64, read_threads: u64) -> Result<()> {
    let threads = local_ranks.saturating_mul(read_threads.saturating_add(1));
    let (limit, what) = crate::system::thread_limit();
    // Room for the threads of everything else: the main one, MPI's, generation's writers.
    let usable = limit.saturating_sub(limit / 8).saturating_sub(64);
    if threads > usable {
        return Err(Error::usage(format!(
            "{local_ranks} accelerator(s) in this process × (1 + workload.reader.read_threads = \
             {read_threads}) = {threads} threads, more than this system lets one process start \
             (about {usable}: {limit} by {what}); lower --accelerators (-n) or \
             workload.reader.read_threads, or spread the ranks over MPI processes"
        )));
    }
    Ok(())
}

/// Which files this process generates or deletes: those of its ranks.
fn share_of(comm: &dyn Comm) -> Share {
    let local = comm.local_ranks();
    Share {
        local_ranks: local.start as u64..local.end as u64,
        world: comm.world() as u64,
    }
}

/// Generation by every process, each writing its ranks' files, committed once all are flushed.
/// Process 0 holds the data folder to itself meanwhile (`data_lock`), and shares it once the
/// dataset is complete.
fn generate_together(
    comm: &dyn Comm,
    dataset: &Dataset,
    format: &dyn FileFormat,
    storage: &dyn Storage,
    log: &DlioLog,
    display: Display,
    data_lock: &mut Option<FolderLock>,
) -> Result<Generated> {
    log.output("Starting data generation");
    let lead = comm.process() == 0;
    agree(
        comm,
        if lead {
            // A local folder is held while the dataset is written (object stores have no lock).
            let held = match storage.local_root() {
                Some(root) => take_data_folder(root, Access::Exclusive).map(Some),
                None => Ok(None),
            };
            held.map(|lock| *data_lock = lock)
                .and_then(|()| generate::begin(dataset, storage))
        } else {
            Ok(())
        },
    )?;
    let threads = storage
        .writers()
        .unwrap_or_else(crate::system::cpu_count)
        .max(comm.local_ranks().len());
    let mine = agree(
        comm,
        generate::write_share(dataset, format, storage, &share_of(comm), threads, display),
    )?;
    agree(
        comm,
        if lead {
            generate::commit(storage)
                .and_then(|()| data_lock.as_mut().map_or(Ok(()), FolderLock::share))
        } else {
            Ok(())
        },
    )?;
    let mut totals = [mine.files as f64, mine.bytes as f64];
    comm.all_reduce(&mut totals, Reduce::Sum)?;
    let mut seconds = [mine.seconds];
    comm.all_reduce(&mut seconds, Reduce::Max)?;
    log.output("Generation done");
    let generated = Generated {
        files: totals[0] as u64,
        bytes: totals[1] as u64,
        seconds: seconds[0],
    };
    log.output(&format!(
        "Generated {} files ({:.1} MiB) in {:.2} s by {} process(es)",
        generated.files,
        generated.bytes as f64 / 1048576.0,
        generated.seconds,
        comm.processes()
    ));
    Ok(generated)
}

/// The dataset's files as process 0 finds them (by scheme, or by one listing), given to all.
#[derive(serde::Serialize, serde::Deserialize)]
struct FoundFiles {
    names: Vec<SplitNames>,
    train: Option<FileList>,
    eval: Option<FileList>,
}

/// Finds the dataset's files once for the whole run (see [`find_dataset`]), not once per process.
fn find_dataset_once(
    comm: &dyn Comm,
    config: &Config,
    source: &Source,
    dataset: &mut Dataset,
    storage: &dyn Storage,
    display: Display,
    data_lock: &mut Option<FolderLock>,
) -> Result<Vec<SplitNames>> {
    let found = if comm.process() == 0 {
        find_dataset(config, source, dataset, storage, display, data_lock).map(|names| {
            let listed = |phase| dataset.split(phase).listed.as_deref().cloned();
            Some(FoundFiles {
                names,
                train: listed(Phase::Train),
                eval: listed(Phase::Eval),
            })
        })
    } else {
        Ok(None)
    };
    let found = agree(comm, found)?;
    let found = broadcast_value(comm, found)?;
    dataset.train.listed = found.train.map(Arc::new);
    dataset.eval.listed = found.eval.map(Arc::new);
    if dataset.train.files > 0 {
        // A file system that refuses O_DIRECT is found before training, not in its first read.
        agree(
            comm,
            storage.check_reads(&dataset.file_key(&dataset.train, 0)),
        )?;
    }
    Ok(found.names)
}

/// A failed run's record in its output folder: the error in the log, and a report.json that says
/// the run failed and why, in place of results (an error another process reported is told by it).
fn record_failure(folder: &Path, log: &DlioLog, error: &Error) {
    if matches!(error, Error::Reported { .. }) {
        return;
    }
    log.error(&error.to_string());
    let status = match error {
        Error::Interrupted { .. } => "interrupted",
        _ => "failed",
    };
    let report = serde_json::json!({
        "tool": "dlio-rs",
        "status": status,
        "error": error.to_string(),
        "exit_code": error.exit_code(),
        "version": env!("CARGO_PKG_VERSION"),
    });
    // Best effort: the error itself is what the user must see, and it is printed regardless.
    let _ = write_json(&folder.join("report.json"), &report);
}

/// Process 0 creates Hydra's run directory (with its saved configuration) and takes DLIO's output
/// folder for this run ([`OutputFolder::take`], with the log): Hydra's files always go to its run
/// directory, DLIO's results to `output.folder` if set.
fn create_outputs(
    config: &Config,
    source: &Source,
    start: SystemTime,
    world: u64,
) -> Result<(OutputFolder, DlioLog)> {
    let run_dir = hydra_run_dir(config, source, start)?;
    let output_folder = config
        .output
        .folder
        .as_ref()
        .map_or_else(|| run_dir.clone(), PathBuf::from);
    folder::make_folder(&run_dir, "Hydra's run folder (hydra.run.dir)")?;
    let folder = OutputFolder::take(&output_folder, &config.output.log_file)?;
    let subdir = source
        .overrides
        .hydra_output_subdir
        .as_deref()
        .unwrap_or(".hydra");
    hydra::write_all(&run_dir, subdir, source, &config.tree)?;
    trace::remove_old(&output_folder.join(TRACE_DIR))?;
    let log = DlioLog::create(&output_folder.join(&config.output.log_file))?;
    log.output(&format!(
        "Running DLIO [{}] with {world} process(es)",
        modes(config).join(" & ")
    ));
    for key in &config.unknown_keys {
        log.warning(&format!("unknown configuration key workload.{key} ignored"));
    }
    Ok((folder, log))
}

/// DLIO's files, our report.json and the end of the log.
fn write_reports(folder: &Path, log: &DlioLog, run: &FinishedRun) -> Result<()> {
    log.epochs(run);
    if let Some(interrupted) = &run.results.interrupted {
        log.warning(&interrupted.describe(run.results));
    }
    for warning in &run.results.warnings {
        log.warning(warning);
    }
    dlio_report::write_summary(folder, run)?;
    write_json(&folder.join("report.json"), &ours::report(run))?;
    // Built from the files just written, as `dlio-rs report` rebuilds it.
    let page = html::from_folder(folder)?;
    let path = folder.join("report.html");
    std::fs::write(&path, page)
        .map_err(|e| Error::on_object("cannot write", path.display().to_string(), e))?;
    log.output(&format!("Saved outputs in {}", folder.display()));
    log.metric_block(&dlio_report::metric_block(run.results));
    log.output("outputs saved in RANKID_output.json");
    Ok(())
}

fn modes(config: &Config) -> Vec<&'static str> {
    let w = &config.workflow;
    [
        (w.generate_data, "Generating data"),
        (w.train, "Training"),
        (w.evaluation, "Evaluation"),
        (w.checkpoint, "Checkpointing"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect()
}

/// `hydra.run.dir`, else Hydra's default for DLIO, `hydra_log/<model name>/<date>-<time>`, made
/// here with `-1`, `-2`, … added where a run started in the same second has it.
fn hydra_run_dir(config: &Config, source: &Source, start: SystemTime) -> Result<PathBuf> {
    if let Some(dir) = &source.overrides.hydra_run_dir {
        return Ok(PathBuf::from(dir));
    }
    let stamp = crate::system::timestamp(start);
    let (date, time) = stamp.split_once('T').unwrap_or((&stamp, ""));
    let time = time.split('.').next().unwrap_or("").replace(':', "-");
    folder::new_unique_folder(
        &Path::new("hydra_log")
            .join(&config.model.name)
            .join(format!("{date}-{time}")),
    )
}

/// Whether `world` accelerators have a step to train: at least a batch each, and the steps asked
/// for.
pub(crate) fn check_steps(config: &Config, world: u64) -> Result<()> {
    let spec = PlanSpec::for_phase(config, Phase::Train, world, 0);
    let available = PlanSpec {
        max_steps: 0,
        ..spec.clone()
    }
    .steps();
    if available == 0 {
        return Err(Error::usage(format!(
            "the training set has {} samples ({} files × {} samples per file), fewer than one batch for every accelerator \
             ({} × {world}); raise workload.dataset.num_files_train or lower workload.reader.batch_size or --accelerators",
            spec.total_samples(),
            spec.files,
            spec.samples_per_file,
            spec.batch
        )));
    }
    if config.train.total_training_steps > available as i64 {
        return Err(Error::usage(format!(
            "workload.train.total_training_steps = {}: the dataset has enough samples for only {available} steps per epoch \
             with {world} accelerator(s)",
            config.train.total_training_steps
        )));
    }
    Ok(())
}

/// Finds the files the run will read (see [`names`]): by DLIO's naming scheme, checked on a sample,
/// or by listing the folder once when the names do not follow it. A folder whose generation did
/// not finish is refused.
fn find_dataset(
    config: &Config,
    source: &Source,
    dataset: &mut Dataset,
    storage: &dyn Storage,
    display: Display,
    data_lock: &mut Option<FolderLock>,
) -> Result<Vec<SplitNames>> {
    if let Some(root) = storage.local_root() {
        check_data_folder(root, config, source)?;
        if data_lock.is_none() {
            *data_lock = Some(take_data_folder(root, Access::Shared)?);
        }
    }
    let marker = storage.describe(generate::INCOMPLETE_MARKER);
    if storage
        .exists(generate::INCOMPLETE_MARKER)
        .map_err(|e| Error::on_object("cannot look up", marker.clone(), e))?
    {
        return Err(Error::usage(format!(
            "the dataset in {} is incomplete: its generation did not finish ({marker} is still \
             there); {}",
            storage.describe(""),
            generate_hint(config, source)
        )));
    }
    let mut phases = vec![Phase::Train];
    if config.workflow.evaluation && config.dataset.num_files_eval > 0 {
        phases.push(Phase::Eval);
    }
    let rules = ListingRules {
        skip_listing: config.dataset.skip_listing,
        validation_interval: config.dataset.listing_validation_interval,
    };
    let hint = generate_hint(config, source);
    let found = names::find_files(dataset, &phases, storage, rules, display, &hint)?;
    Ok(found)
}

/// The local data folder is a folder: a usage error with the command that generates the data
/// where it is missing or a file.
fn check_data_folder(root: &Path, config: &Config, source: &Source) -> Result<()> {
    match std::fs::metadata(root) {
        Ok(found) if found.is_dir() => Ok(()),
        Ok(_) => Err(Error::usage(format!(
            "the data folder {} is not a folder; {}",
            root.display(),
            generate_hint(config, source)
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Error::usage(format!(
            "the data folder {} does not exist; {}",
            root.display(),
            generate_hint(config, source)
        ))),
        Err(e) => Err(Error::io("cannot look up data folder", root, e)),
    }
}

/// Takes the data folder (made if missing) for a generation (`Exclusive`) or a training run's
/// reads (`Shared`), or fails at once naming who holds it.
fn take_data_folder(root: &Path, access: Access) -> Result<FolderLock> {
    folder::make_folder(root, "data folder")?;
    FolderLock::on_folder(root, access)?.map_err(|_busy| {
        // A generation holds it alone, and its marker says who it is; readers share it.
        let holder = generate::holder(root).map_or_else(
            || "a training run reading it".to_string(),
            |generation| format!("a generation ({generation})"),
        );
        Error::usage(match access {
            Access::Exclusive => format!(
                "the data folder {} is in use by {holder}; a generation needs it to itself: \
                 generate once that run has ended, or into another folder \
                 (++workload.dataset.data_folder=DIR)",
                root.display()
            ),
            Access::Shared => format!(
                "the dataset in {} is being generated by {holder}; train once the generation \
                 has finished",
                root.display()
            ),
        })
    })
}

/// `dataset.keep_files: False`: DLIO deletes the dataset's files when the run ends; each process
/// deletes the files of its ranks.
fn delete_dataset(
    dataset: &Dataset,
    format: &dyn FileFormat,
    storage: &dyn Storage,
    share: &Share,
) -> Result<()> {
    let delete = |key: &str| {
        storage
            .delete(key)
            .map(|_| ())
            .map_err(|e| Error::on_object("cannot delete", storage.describe(key), e))
    };
    for split in [&dataset.train, &dataset.eval] {
        for index in 0..split.files {
            if !share.owns(split.first_global_index + index) {
                continue;
            }
            let key = dataset.file_key(split, index);
            delete(&key)?;
            let mut side_result = Ok(());
            format.side_files(&key, &mut |side| {
                if side_result.is_ok() {
                    side_result = delete(side);
                }
            });
            side_result?;
        }
    }
    Ok(())
}

/// A command that generates the missing dataset: the same workload and overrides (not the output
/// settings), as words a shell passes through unchanged.
fn generate_hint(config: &Config, source: &Source) -> String {
    let mut words: Vec<String> = Vec::new();
    if let Some(dir) = &source.config_dir {
        words.push("--config-dir".into());
        words.push(dir.display().to_string());
    }
    words.push(format!("workload={}", config.workload_name));
    words.extend(
        source
            .overrides
            .words
            .iter()
            .filter(|w| {
                let key = w.trim_start_matches(['+', '~']);
                !key.starts_with("workload=")
                    && !key.starts_with("workload.workflow.generate_data")
                    && !key.starts_with("workload.workflow.train")
                    && !key.starts_with("hydra.")
            })
            .cloned(),
    );
    words.push("++workload.workflow.generate_data=True".into());
    words.push("++workload.workflow.train=False".into());
    let quoted: Vec<String> = words.iter().map(|w| shell_quote(w)).collect();
    format!(
        "generate the dataset with: dlio-rs run {}",
        quoted.join(" ")
    )
}

fn shell_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-+=./:,@%~".contains(c))
        && !word.starts_with('~');
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

/// The read traces' folder inside the output folder.
pub const TRACE_DIR: &str = "trace";

/// Trains this process's ranks, each on its own thread, and returns their records in rank order.
/// Runs `work` for each of this process's ranks, one thread each; the first failure aborts the
/// run everywhere.
fn run_local_ranks(
    ctx: &RunContext,
    display: Display,
    work: impl Fn(&RunContext, usize) -> Result<RankRecord> + Sync,
) -> Result<Vec<RankRecord>> {
    let comm = ctx.comm;
    let progress = EpochProgress::new(display, ctx.config.train.epochs);
    let ctx = &RunContext {
        progress: Some(&progress),
        ..*ctx
    };
    let local = comm.local_ranks();
    let work = &work;
    let outcomes: Vec<Result<RankRecord>> = std::thread::scope(|scope| {
        let mut ranks = Vec::with_capacity(local.len());
        for rank in local.clone() {
            let spawned = std::thread::Builder::new()
                .name(format!("rank-{rank}"))
                .spawn_scoped(scope, move || {
                    let outcome =
                        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(ctx, rank)))
                            .unwrap_or_else(|_| {
                                Err(Error::run("failed unexpectedly (a bug in dlio-rs)"))
                            });
                    if let Err(e) = &outcome {
                        comm.abort(&e.clone().in_rank(comm.rank_label(rank)));
                    }
                    outcome
                });
            match spawned {
                Ok(handle) => ranks.push(handle),
                Err(e) => {
                    // The ranks already started are released from their barriers by the abort.
                    comm.abort(&Error::run(format!(
                        "cannot start {} of {}: {e}; try fewer --accelerators",
                        comm.rank_label(rank),
                        comm.world()
                    )));
                    break;
                }
            }
        }
        ranks
            .into_iter()
            .map(|r| {
                r.join()
                    .unwrap_or_else(|_| Err(Error::run("a rank thread panicked")))
            })
            .collect()
    });
    if let Some(first) = comm.aborted() {
        return Err(first);
    }
    outcomes.into_iter().collect()
}

/// A run a signal stopped reports what every rank of every process completed: as many epochs,
/// and checkpoint operations, as the rank that completed the fewest. Fails with the signal when
/// nothing was completed, for there is nothing to report.
fn keep_what_all_completed(
    comm: &dyn Comm,
    ranks: &mut [RankRecord],
    signal: i32,
    config: &Config,
) -> Result<Interruption> {
    let fewest = |count: fn(&RankRecord) -> usize| {
        ranks
            .iter()
            .map(count)
            .min()
            .map_or(f64::INFINITY, |n| n as f64)
    };
    let mut completed = [fewest(|r| r.epochs.len()), fewest(|r| r.checkpoints.len())];
    comm.all_reduce(&mut completed, Reduce::Min)?;
    let [epochs, checkpoints] = completed.map(|n| n as usize);
    if epochs == 0 && checkpoints == 0 {
        // Every process finds this at once, from the same reduction.
        return Err(comm::interrupted_together(comm, signal));
    }
    for rank in ranks {
        rank.epochs.truncate(epochs);
        rank.checkpoints.truncate(checkpoints);
    }
    Ok(Interruption {
        signal,
        // A checkpoint-only run plans no epoch.
        epochs_planned: if config.workflow.train {
            config.train.epochs
        } else {
            0
        },
    })
}

/// Seconds from the earliest process start (or end of generation) until the last rank of any
/// process had its first batch, on the clock all processes share.
fn first_batch_seconds(
    comm: &dyn Comm,
    clock: &Clock,
    origin: std::time::Instant,
    ranks: &[RankRecord],
) -> Result<Option<f64>> {
    // Unknown (no step) is NaN, which the maximum keeps.
    let first_batch = crate::stats::first_batch_at(ranks).unwrap_or(f64::NAN);
    let mut latest = [if first_batch.is_nan() {
        f64::INFINITY
    } else {
        first_batch
    }];
    comm.all_reduce(&mut latest, Reduce::Max)?;
    // The origin as a time on the run's clock: before its start, so negative.
    let mut earliest = [-clock.seconds_since(origin, 0.0)];
    comm.all_reduce(&mut earliest, Reduce::Min)?;
    Ok(latest[0].is_finite().then(|| latest[0] - earliest[0]))
}

/// Warns when the launcher bound this process to fewer CPUs than its ranks and readers need (Open
/// MPI binds each process to one core by default for `-n` ≤ 2), said once, by process 0.
fn warn_about_cpu_binding(comm: &dyn Comm, config: &Config, hosts: &Hosts) -> Result<()> {
    let threads_needed = comm.local_ranks().len() * (1 + config.reader.read_threads as usize);
    let host_cpus = hosts.hosts[hosts.host_of_process[comm.process()]].cpu_count;
    let usable = crate::system::cpu_count();
    let mut narrowest = [if usable < threads_needed.min(host_cpus) {
        usable as f64
    } else {
        f64::INFINITY
    }];
    comm.all_reduce(&mut narrowest, Reduce::Min)?;
    if comm.process() == 0 && narrowest[0].is_finite() {
        crate::console::tell(format_args!(
            "warning: a process may run on only {} of its host's CPUs (its launcher's CPU binding), but its {} \
             rank(s) with {} reader thread(s) each run {threads_needed} threads, which then share them and \
             slow the run; launch with mpirun --bind-to none, or give each process \
             more cores (--map-by node:PE=N)",
            narrowest[0],
            comm.local_ranks().len(),
            config.reader.read_threads,
        ));
    }
    Ok(())
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
    write_reports(inputs.output_folder, inputs.log, &finished)?;
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
