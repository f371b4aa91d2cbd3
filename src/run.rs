//! A whole run, as `dlio-rs run` and `dlio_benchmark` perform it: resolve the configuration, set
//! up the output folder, generate data if asked, train on every rank, and write the reports.

use std::path::{Path, PathBuf};

use crate::comm::{Comm, ThreadGroup};
use crate::config::{Config, PageCache, Source};
use crate::dataset::names::{self, ListingRules, SplitNames};
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::{self, FileFormat};
use crate::generate::{self, Generated, Share};
use crate::loader::trace;
use crate::plan::{Phase, PlanSpec};
use crate::progress::{Display, EpochProgress};
use crate::report::dlio as dlio_report;
use crate::report::log::DlioLog;
use crate::report::{
    self, hydra, ours, terminal, validity, write_json, FinishedRun, Results, RunTimes, Startup,
};
use crate::stats::{Clock, RankRecord};
use crate::storage::{LocalFs, LocalOptions, Storage};
use crate::trainer::{self, RunContext};

#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Emulated accelerators (ranks), each a set of threads in this process.
    pub accelerators: usize,
    pub quiet: bool,
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
}

pub fn run(source: &Source, options: &RunOptions) -> Result<Outcome> {
    let mut config = source.resolve(options.strict)?;
    config.output.trace |= options.trace;
    let display = Display::for_stderr(options.quiet);
    for key in &config.unknown_keys {
        eprintln!(
            "warning: unknown configuration key workload.{key} (ignored; --strict rejects it)"
        );
    }
    config.check_supported()?;
    if config.workflow.train && config.reader.page_cache == PageCache::DropBeforeEpoch {
        crate::system::check_can_drop_page_cache().map_err(|why| {
            Error::usage(format!(
                "workload.reader.page_cache = drop_before_epoch: {why}; \
                 use evict_after_read, which needs no root"
            ))
        })?;
    }
    if options.accelerators == 0 {
        return Err(Error::usage("--accelerators must be at least 1"));
    }
    let world = options.accelerators as u64;
    let mut dataset = Dataset::from_config(&config);
    let format = format::for_config(&config, options.verify)?;
    let storage = LocalFs::with_options(
        config.data_folder(),
        LocalOptions {
            odirect: config.reader.odirect,
            evict_after_read: config.reader.page_cache == PageCache::EvictAfterRead,
        },
    );
    let with_eval = config.workflow.evaluation && config.dataset.num_files_eval > 0;
    // Bad input is reported before anything is written.
    if config.workflow.train {
        check_steps(&config, world)?;
    }
    let mut file_names = Vec::new();
    // A format that reads no storage (synthetic) needs no dataset: none is generated or looked for.
    let needs_data = format.reads_storage();
    if config.workflow.train && !config.workflow.generate_data && needs_data {
        file_names = find_dataset(&config, source, &mut dataset, &storage, with_eval, display)?;
    }
    let start = std::time::SystemTime::now();
    let (output_folder, log) = create_outputs(&config, source, start, world)?;

    // Start-up is timed from the start of the process, or from the end of generation.
    let mut startup_origin = crate::system::process_start();
    let generated = if config.workflow.generate_data && needs_data {
        log.output("Starting data generation");
        let share = Share {
            local_ranks: 0..world,
            world,
        };
        let threads = crate::system::cpu_count().max(options.accelerators);
        let generated = generate::generate(
            &dataset,
            format.as_ref(),
            &storage,
            &share,
            threads,
            display,
        )?;
        log.output("Generation done");
        startup_origin = std::time::Instant::now();
        Some(generated)
    } else {
        None
    };
    if !config.workflow.train {
        // DLIO writes no result files for a generate-only run.
        return Ok(Outcome {
            output_folder,
            generated,
            results: None,
        });
    }

    if config.workflow.generate_data && needs_data {
        file_names = find_dataset(&config, source, &mut dataset, &storage, with_eval, display)?;
    }
    for found in &file_names {
        log.output(&found.describe());
    }
    log.run_plan(&config, world);
    if dlio_report::potential_caching(&config, world) {
        log.warning(
            "The amount of dataset is smaller than the host memory; data might be cached after the \
             first epoch. Increase the size of dataset to eliminate the caching effect!!!",
        );
    }
    if let Some(warning) = validity::DatasetSize::of(&config).warning(&config) {
        eprintln!("warning: {warning}");
    }

    let clock = Clock::start();
    // Drawn once so every rank plans the same `random` order; saved so an audit can replan it.
    let run_entropy = crate::plan::draw_run_entropy();
    let ranks = train_all_ranks(
        &config,
        &dataset,
        format.as_ref(),
        &storage,
        world,
        run_entropy,
        &clock,
        display,
        config
            .output
            .trace
            .then(|| output_folder.join(TRACE_DIR))
            .as_deref(),
    )?;
    let times = RunTimes {
        start,
        end: std::time::SystemTime::now(),
    };
    let results = Results::from_ranks(&config, &ranks, storage.accounting());
    let startup = Startup {
        first_batch_seconds: crate::stats::first_batch_at(&ranks)
            .map(|at| clock.seconds_since(startup_origin, at)),
        file_names,
    };
    let finished = FinishedRun {
        config: &config,
        results: &results,
        ranks: &ranks,
        clock: &clock,
        times,
        run_entropy,
        startup: &startup,
    };
    write_reports(&output_folder, &log, &finished)?;
    if !config.dataset.keep_files && needs_data {
        delete_dataset(&dataset, format.as_ref(), &storage)?;
    }
    if !options.quiet {
        print!(
            "{}",
            terminal::render(&config, &results, &startup, &output_folder)
        );
    }
    // Loud, and even with --quiet: a number that measured memory must not pass unnoticed.
    for warning in &results.warnings {
        eprintln!("WARNING: {warning}");
    }
    Ok(Outcome {
        output_folder,
        generated,
        results: Some(results),
    })
}

/// Creates Hydra's run directory (with its saved configuration) and DLIO's output folder (with
/// the log): Hydra's files always go to its run directory, DLIO's results to `output.folder` if set.
fn create_outputs(
    config: &Config,
    source: &Source,
    start: std::time::SystemTime,
    world: u64,
) -> Result<(PathBuf, DlioLog)> {
    let run_dir = hydra_run_dir(config, source, start);
    let output_folder = config
        .output
        .folder
        .as_ref()
        .map_or_else(|| run_dir.clone(), PathBuf::from);
    for dir in [&run_dir, &output_folder] {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io("cannot create output folder", dir, e))?;
    }
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
    Ok((output_folder, log))
}

/// DLIO's files, our report.json and the end of the log.
fn write_reports(folder: &Path, log: &DlioLog, run: &FinishedRun) -> Result<()> {
    log.epochs(run);
    for warning in &run.results.warnings {
        log.warning(warning);
    }
    dlio_report::write_all(folder, run)?;
    write_json(&folder.join("report.json"), &ours::report(run))?;
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

/// `hydra.run.dir`, else Hydra's default for DLIO: `hydra_log/<model name>/<date>-<time>`.
fn hydra_run_dir(config: &Config, source: &Source, start: std::time::SystemTime) -> PathBuf {
    if let Some(dir) = &source.overrides.hydra_run_dir {
        return PathBuf::from(dir);
    }
    let stamp = report::timestamp(start);
    let (date, time) = stamp.split_once('T').unwrap_or((&stamp, ""));
    let time = time.split('.').next().unwrap_or("").replace(':', "-");
    Path::new("hydra_log")
        .join(&config.model.name)
        .join(format!("{date}-{time}"))
}

fn check_steps(config: &Config, world: u64) -> Result<()> {
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
    storage: &LocalFs,
    with_eval: bool,
    display: Display,
) -> Result<Vec<SplitNames>> {
    let root = storage.root();
    if !root.is_dir() {
        return Err(Error::usage(format!(
            "the data folder {} does not exist; {}",
            root.display(),
            generate_hint(config, source)
        )));
    }
    let marker = storage.describe(generate::INCOMPLETE_MARKER);
    if storage
        .exists(generate::INCOMPLETE_MARKER)
        .map_err(|e| Error::run(format!("cannot check {marker}: {e}")))?
    {
        return Err(Error::usage(format!(
            "the dataset in {} is incomplete: its generation did not finish ({marker} is still \
             there); {}",
            root.display(),
            generate_hint(config, source)
        )));
    }
    let mut phases = vec![Phase::Train];
    if with_eval {
        phases.push(Phase::Eval);
    }
    let rules = ListingRules {
        skip_listing: config.dataset.skip_listing,
        validation_interval: config.dataset.listing_validation_interval,
    };
    let hint = generate_hint(config, source);
    let found = names::find_files(dataset, &phases, storage, rules, display, &hint)?;
    if config.reader.odirect && dataset.train.files > 0 {
        // A file system that refuses O_DIRECT is found before training, not in its first read.
        storage.check_direct_io(&dataset.file_key(&dataset.train, 0))?;
    }
    Ok(found)
}

/// `dataset.keep_files: False`: DLIO deletes the dataset's files when the run ends.
fn delete_dataset(dataset: &Dataset, format: &dyn FileFormat, storage: &LocalFs) -> Result<()> {
    let delete = |key: &str| {
        storage
            .delete(key)
            .map(|_| ())
            .map_err(|e| Error::io("cannot delete", &storage.path(key), e))
    };
    for split in [&dataset.train, &dataset.eval] {
        for index in 0..split.files {
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

#[allow(clippy::too_many_arguments)]
fn train_all_ranks(
    config: &Config,
    dataset: &Dataset,
    format: &dyn FileFormat,
    storage: &dyn Storage,
    world: u64,
    run_entropy: u64,
    clock: &Clock,
    display: Display,
    trace_dir: Option<&Path>,
) -> Result<Vec<RankRecord>> {
    let comm = ThreadGroup::new(world as usize);
    let progress = EpochProgress::new(display, config.train.epochs);
    let ctx = RunContext {
        config,
        dataset,
        format,
        storage,
        comm: &comm,
        clock,
        run_entropy,
        progress: Some(&progress),
        trace_dir,
    };
    let outcomes: Vec<Result<RankRecord>> = std::thread::scope(|scope| {
        let mut ranks = Vec::with_capacity(world as usize);
        for rank in 0..world as usize {
            let ctx = &ctx;
            let spawned = std::thread::Builder::new()
                .name(format!("rank-{rank}"))
                .spawn_scoped(scope, move || {
                    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        trainer::train_rank(ctx, rank)
                    }))
                    .unwrap_or_else(|_| Err(Error::run("failed unexpectedly (a bug in dlio-rs)")));
                    if let Err(e) = &outcome {
                        ctx.comm.abort(&e.prefixed(&format!("rank {rank}: ")));
                    }
                    outcome
                });
            match spawned {
                Ok(handle) => ranks.push(handle),
                Err(e) => {
                    // The ranks already started are released from their barriers by the abort.
                    let error = Error::run(format!(
                        "cannot start rank {rank} of {world}: {e}; try fewer --accelerators"
                    ));
                    ctx.comm.abort(&error);
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
