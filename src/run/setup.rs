//! The first phase: the configuration resolved and checked, and what the run reads and writes
//! through (dataset layout, format, storage, checkpoint layout), in every process before
//! anything is written, so that bad input is a usage error that leaves nothing behind. Also the
//! hosts of the run's processes, and the warnings about this host that a user should see before
//! the run starts.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::checkpoint::{Checkpointing, Geometry, Schedule};
use crate::comm::{agree, all_gather_values, Comm, Hosts, Reduce};
use crate::config::{Config, PageCache, Source};
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::folder;
use crate::format::{self, FileFormat};
use crate::plan::{EpochPlan, Phase, PlanSpec};
use crate::storage::{self, Storage};

/// What the caller asks of a run beyond its configuration: the command line's options.
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
    /// Trace in this format (as `output.trace: True` with `output.trace_format` does).
    pub trace_format: Option<crate::config::TraceFormat>,
    /// Serve the metrics page here (as `output.metrics_listen` does).
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// How long to wait for a folder another run holds (output, data, checkpoint folder) instead
    /// of being refused at once (`run --wait SECONDS`).
    pub wait: folder::Wait,
    /// Where the table and the verdict go: standard error when standard output carries a
    /// document (`--output-format json|csv`).
    pub human: crate::machine::Human,
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
            trace_format: None,
            metrics_listen: None,
            wait: None,
            human: crate::machine::Human::Stdout,
        }
    }
}

/// What every process sets up before it writes anything: the checked configuration and what it
/// reads through.
pub(super) struct Setup {
    pub config: Config,
    pub dataset: Dataset,
    pub format: Box<dyn FileFormat>,
    pub storage: Arc<dyn Storage>,
    /// How long a page-cache drop may take, when the run drops it (`drop_before_epoch`).
    pub drop_timeout: Option<Duration>,
    /// The run's checkpoints, when it saves or loads any.
    pub checkpoints: Option<CheckpointSetup>,
    /// How long to wait for a folder another run holds ([`RunOptions::wait`]).
    pub wait: folder::Wait,
}

/// What the checkpoints need, checked before anything is written.
pub(super) struct CheckpointSetup {
    pub geometry: Geometry,
    pub schedule: Schedule,
    pub storage: Arc<dyn Storage>,
}

impl Setup {
    /// Steps of a training epoch for `world` ranks, as the plan counts them.
    pub fn steps_per_epoch(&self, world: u64) -> u64 {
        EpochPlan::new(PlanSpec::for_phase(&self.config, Phase::Train, world, 0), 1).steps()
    }

    /// The local folders the run reads and writes (the data's, the checkpoints'), whose disks
    /// its time series watches; none for object storage.
    pub fn watched_folders(&self) -> Vec<PathBuf> {
        let checkpoints = self.checkpoints.as_ref().map(|c| c.storage.as_ref());
        std::iter::once(self.storage.as_ref())
            .chain(checkpoints)
            .filter_map(|s| s.local_root().map(PathBuf::from))
            .collect()
    }

    /// Whether the run trains (else it generates, or only checkpoints).
    pub fn trains(&self) -> bool {
        self.config.workflow.train
    }

    /// Whether the run reads or writes a dataset: a format that reads no storage (synthetic)
    /// needs none, so none is generated or looked for.
    pub fn needs_data(&self) -> bool {
        self.format.reads_storage()
    }

    /// What every rank shares about the run's checkpoints, when it has any.
    pub fn checkpointing(&self) -> Option<Checkpointing<'_>> {
        self.checkpoints.as_ref().map(|c| Checkpointing {
            geometry: &c.geometry,
            schedule: c.schedule,
            storage: c.storage.as_ref(),
            fsync: self.config.checkpoint.fsync,
            randomize: self.config.checkpoint.randomize_tensor,
        })
    }
}

/// Resolves and checks the configuration in every process, which all go on or all stop; nothing
/// is written yet. The processes of a job then check that they resolved the same configuration,
/// before any of them takes a step the others would not.
pub(super) fn set_up(comm: &dyn Comm, source: &Source, options: &RunOptions) -> Result<Setup> {
    let checked = check(source, options, comm.world() as u64, comm.process() == 0);
    let setup = agree(comm, checked)?;
    let same = one_configuration(comm, &setup.config, options);
    agree(comm, same)?;
    Ok(setup)
}

/// Keys that may rightly differ between the processes of a job: each host's own credentials.
/// (Nothing else: a data folder, a seed or a step count that differs would make the processes
/// read other data, or wait for each other at steps the others never take.)
pub const MAY_DIFFER_PER_HOST: [&str; 5] = [
    "storage.storage_options.access_key_id",
    "storage.storage_options.secret_access_key",
    "storage.storage_options.session_token",
    "storage.storage_options.account_key",
    "storage.storage_options.sas_token",
];

/// What a process's run is, key by key (the configuration's leaves, sorted, and the options that
/// change what is read), as the processes compare it.
fn run_keys(config: &Config, options: &RunOptions) -> Vec<(String, String)> {
    let mut keys: Vec<(String, String)> = config
        .tree
        .leaves()
        .into_iter()
        .filter(|(key, _)| !MAY_DIFFER_PER_HOST.contains(&key.as_str()))
        .map(|(key, value)| (key, value.python_str()))
        .collect();
    keys.push(("workload".into(), config.workload_name.clone()));
    keys.push(("--trace".into(), options.trace.to_string()));
    let format = options.trace_format.map_or("", |f| f.as_str());
    keys.push(("--trace-format".into(), format.into()));
    keys.push(("--verify".into(), options.verify.to_string()));
    keys.sort();
    keys
}

/// Fails (in every process alike) when the processes resolved different configurations: first
/// a digest each, then, only when they differ, every process's keys, so that the message names
/// each key that differs and the processes it differs in.
fn one_configuration(comm: &dyn Comm, config: &Config, options: &RunOptions) -> Result<()> {
    if comm.processes() == 1 {
        return Ok(());
    }
    let keys = run_keys(config, options);
    let digest = {
        use std::hash::{Hash, Hasher};
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        keys.hash(&mut hasher);
        hasher.finish()
    };
    let digests = all_gather_values(comm, &digest)?;
    if digests.iter().all(|&d| d == digests[0]) {
        return Ok(());
    }
    let all = all_gather_values(comm, &keys)?;
    Err(Error::usage(differences(&all)))
}

/// Each process's keys that differ from process 0's, said by key, then how to fix it.
fn differences(all: &[Vec<(String, String)>]) -> String {
    let first = &all[0];
    let value_in = |keys: &[(String, String)], key: &str| {
        keys.iter()
            .find(|(k, _)| k == key)
            .map_or("(not set)".to_string(), |(_, v)| v.clone())
    };
    let mut said = Vec::new();
    for (process, keys) in all.iter().enumerate().skip(1) {
        let mut names: Vec<&str> = keys
            .iter()
            .chain(first.iter())
            .map(|(k, _)| k.as_str())
            .filter(|k| value_in(keys, k) != value_in(first, k))
            .collect();
        names.sort_unstable();
        names.dedup();
        let shown: Vec<String> = names
            .iter()
            .take(8)
            .map(|k| {
                format!(
                    "{k} = {} (process 0: {})",
                    value_in(keys, k),
                    value_in(first, k)
                )
            })
            .collect();
        if !shown.is_empty() {
            let more = match names.len().saturating_sub(shown.len()) {
                0 => String::new(),
                n => format!(", and {n} more"),
            };
            said.push(format!("process {process}: {}{more}", shown.join(", ")));
        }
    }
    format!(
        "the MPI processes of this job resolved different configurations — {}; every process must \
         run the same workload file and words (check the command line and the workload file on \
         every host; only {} may differ)",
        said.join("; "),
        MAY_DIFFER_PER_HOST.join(", ")
    )
}

/// The hosts of the run's processes, gathered from all of them, with a warning (once) when a
/// launcher gave a process fewer CPUs than its threads need.
pub(super) fn gather_hosts(comm: &dyn Comm, config: &Config) -> Result<Hosts> {
    let hosts = Hosts::gather(comm)?;
    warn_about_cpu_binding(comm, config, &hosts)?;
    Ok(hosts)
}

/// This process's checks of the configuration and of what it names (storage, room, threads).
fn check(source: &Source, options: &RunOptions, world: u64, lead: bool) -> Result<Setup> {
    let mut config = source.resolve(options.strict)?;
    config.output.trace |= options.trace || options.trace_format.is_some();
    if let Some(format) = options.trace_format {
        config.output.trace_format = format;
    }
    if let Some(address) = options.metrics_listen {
        if config.output.timeseries_interval == 0.0 {
            return Err(Error::usage(
                "--metrics-listen: the metrics page is the time series' latest interval: it                  needs output.timeseries_interval above 0",
            ));
        }
        config.output.metrics_listen = Some(address);
    }
    if lead {
        for key in &config.unknown_keys {
            crate::console::tell(format_args!(
                "warning: unknown configuration key workload.{key} (ignored; --strict rejects it){}",
                crate::config::suggest::key_hint(key)
            ));
        }
    }
    config.check_supported()?;
    let object_store = config.storage.storage_type.is_object_store();
    if let (true, true, Some(keys)) = (lead, object_store, cache_keys_set(&config)) {
        crate::console::tell(format_args!(
            "warning: {keys} ignored with storage_type = {}: objects are read over the \
             network, and nothing of them is cached on this host",
            config.storage.storage_type
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
    let storage: Arc<dyn Storage> =
        storage::for_data(&config, local_ranks * config.reader.read_threads as usize)?.into();
    // A format that reads no storage (the synthetic loader) needs no bucket or folder at all.
    if (config.workflow.generate_data || config.workflow.train) && format.reads_storage() {
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
            storage: storage::for_checkpoints(&config, local_ranks)?.into(),
        }),
    };
    if let Some(c) = &checkpoints {
        let saves = !matches!(c.schedule, Schedule::Only { writes: 0, .. });
        c.storage.check_access(saves)?;
        if matches!(c.schedule, Schedule::Only { reads: 1.., .. }) {
            c.geometry.check_readable()?;
        }
        // A run that only loads writes nothing: the room its checkpoints take is already taken.
        if let Some(folder) = c.storage.local_root().filter(|_| saves) {
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
        wait: options.wait,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::resolve;

    /// The default workload with 4 files of 2 samples (8 samples) and batches of 2, and `extra`.
    fn eight_samples(extra: &[&str]) -> Config {
        let mut words = vec![
            "workload=default",
            "++workload.dataset.num_files_train=4",
            "++workload.dataset.num_samples_per_file=2",
            "++workload.reader.batch_size=2",
        ];
        words.extend_from_slice(extra);
        resolve(&words).unwrap()
    }

    #[test]
    fn every_accelerator_needs_a_batch_and_the_steps_asked_for() {
        let config = eight_samples(&[]);
        assert_eq!(check_steps(&config, 4), Ok(()));
        let Err(Error::Usage(message)) = check_steps(&config, 5) else {
            panic!("5 accelerators accepted for 8 samples in batches of 2");
        };
        assert!(
            message.starts_with(
                "the training set has 8 samples (4 files × 2 samples per file), fewer than one \
                 batch for every accelerator (2 × 5)"
            ),
            "{message}"
        );
        let capped = eight_samples(&["++workload.train.total_training_steps=3"]);
        assert_eq!(check_steps(&capped, 1), Ok(()));
        let Err(Error::Usage(message)) = check_steps(&capped, 2) else {
            panic!("3 steps accepted where 2 accelerators have 2");
        };
        assert_eq!(
            message,
            "workload.train.total_training_steps = 3: the dataset has enough samples for only 2 \
             steps per epoch with 2 accelerator(s)"
        );
    }

    #[test]
    fn threads_past_the_system_s_limit_are_refused_naming_the_keys() {
        assert_eq!(check_threads(2, 4), Ok(()));
        let Err(Error::Usage(message)) = check_threads(1 << 40, 8) else {
            panic!("2^40 ranks of 9 threads accepted");
        };
        assert!(
            message.contains("× (1 + workload.reader.read_threads = 8)"),
            "{message}"
        );
        assert!(message.contains("lower --accelerators (-n)"), "{message}");
    }

    #[test]
    fn the_cache_settings_that_are_on_are_named() {
        assert_eq!(cache_keys_set(&eight_samples(&[])), None);
        let both = eight_samples(&[
            "++workload.reader.odirect=True",
            "++workload.reader.page_cache=evict_after_read",
        ]);
        assert_eq!(
            cache_keys_set(&both).as_deref(),
            Some("workload.reader.odirect, workload.reader.page_cache")
        );
    }

    #[test]
    fn processes_that_resolved_other_keys_are_told_which_and_where() {
        let options = RunOptions::default();
        let base = run_keys(&eight_samples(&[]), &options);
        let other = run_keys(
            &eight_samples(&[
                "++workload.train.epochs=7",
                "++workload.storage.storage_options.secret_access_key=mine",
            ]),
            &RunOptions {
                trace: true,
                ..options.clone()
            },
        );
        // A credential may differ; nothing else may.
        assert!(!other.iter().any(|(k, _)| k.contains("secret")));
        let said = differences(&[base.clone(), base.clone(), other]);
        assert!(
            said.starts_with(
                "the MPI processes of this job resolved different configurations — process 2: \
                 --trace = true (process 0: false), train.epochs = 7 (process 0: 10); every \
                 process must run the same workload file and words"
            ),
            "{said}"
        );
        assert!(!said.contains("process 1:"), "{said}");
        assert!(
            said.contains("only storage.storage_options.access_key_id"),
            "{said}"
        );
        // The same keys in another order are the same configuration.
        let reordered = run_keys(
            &eight_samples(&["++workload.train.epochs=7", "++workload.train.seed=3"]),
            &options,
        );
        let swapped = run_keys(
            &eight_samples(&["++workload.train.seed=3", "++workload.train.epochs=7"]),
            &options,
        );
        assert_eq!(reordered, swapped);
    }
}
