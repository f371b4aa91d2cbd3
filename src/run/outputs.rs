//! The second phase: the run's output folder, taken by process 0 before anything can fail for
//! want of data, so that the folder of a failed run holds its log and its error, never an earlier
//! run's results ([`OutputFolder`]). Hydra's run folder gets the saved configuration at the same
//! time, and DLIO's log its first lines; every other process makes the folder where it sees it.
//! What the run then does is announced in the log, and a failure recorded there and in
//! report.json.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::setup::Setup;
use crate::comm::{agree, broadcast_value, Comm, Hosts};
use crate::config::{Config, Source};
use crate::dataset::names::SplitNames;
use crate::error::{Error, Result};
use crate::folder::{self, OutputFolder};
use crate::loader::trace;
use crate::progress::Display;
use crate::report::log::DlioLog;
use crate::report::{dlio as dlio_report, hydra, ours};

/// The run's output folder as this process sees it, and in process 0 its hold and its log.
pub(super) struct Outputs {
    pub folder: PathBuf,
    /// DLIO's log, written by process 0 (the others' log writes nothing).
    pub log: DlioLog,
    /// When the run started, by process 0's clock.
    pub start: SystemTime,
    /// Held by process 0 to the end of the run: the folder stays this run's while it runs.
    held: Option<OutputFolder>,
}

/// Takes the output folder for the run: process 0 claims it, the others make it where they see
/// it; all go on or all stop.
pub(super) fn claim(
    comm: &dyn Comm,
    config: &Config,
    source: &Source,
    wait: folder::Wait,
) -> Result<Outputs> {
    let lead = comm.process() == 0;
    let world = comm.world() as u64;
    let start = broadcast_value(comm, Some(SystemTime::now()))?;
    let claimed = lead
        .then(|| create_outputs(config, source, start, world, wait))
        .transpose();
    let claimed = agree(comm, claimed)?;
    let folder = broadcast_value(comm, claimed.as_ref().map(|c| c.0.path().to_path_buf()))?;
    // The other processes make the folder where they see it (another host's file system, maybe);
    // every process takes part in the agreement.
    let made = match lead {
        true => Ok(()),
        false => std::fs::create_dir_all(&folder)
            .map_err(|e| Error::io("cannot create output folder", &folder, e)),
    };
    agree(comm, made)?;
    let (held, log) = match claimed {
        Some((held, log)) => (Some(held), log),
        None => (None, DlioLog::none()),
    };
    Ok(Outputs {
        folder,
        log,
        start,
        held,
    })
}

impl Outputs {
    /// Whether this is process 0, which holds the folder and writes the run's shared files.
    fn leads(&self) -> bool {
        self.held.is_some()
    }

    /// Says in the log what the run will do: how it found its files, its plan, its checkpoints,
    /// DLIO's caching warning; and on the terminal (unless quiet) what the training will be, so
    /// that a long first epoch is not silence.
    pub fn announce(
        &self,
        setup: &Setup,
        hosts: &Hosts,
        found: &[SplitNames],
        world: u64,
        display: Display,
    ) {
        let config = &setup.config;
        for found in found {
            self.log.output(&found.describe());
        }
        if setup.trains() {
            self.log.run_plan(config, world);
            display.line(&format!(
                "training: {world} accelerator(s), {} epoch(s) of {} step(s), batch {}…",
                config.train.epochs,
                setup.steps_per_epoch(world),
                config.reader.batch_size
            ));
        }
        if let Some(c) = &setup.checkpoints {
            self.log.checkpoint_plan(&c.geometry);
        }
        if setup.trains() && dlio_report::potential_caching(config, world, hosts) {
            self.log.warning(
                "The amount of dataset is smaller than the host memory; data might be cached after the \
                 first epoch. Increase the size of dataset to eliminate the caching effect!!!",
            );
        }
    }

    /// A failed run's record in its output folder (by process 0): the error in the log, and a
    /// report.json that says the run failed and why, in place of results (an error another
    /// process reported is told by it).
    pub fn record_failure(&self, error: &Error) {
        if !self.leads() || matches!(error, Error::Reported { .. }) {
            return;
        }
        self.log.error(&error.to_string());
        ours::write_failure(&self.folder, error);
    }
}

/// Process 0 creates Hydra's run directory (with its saved configuration) and takes DLIO's output
/// folder for this run ([`OutputFolder::take`], with the log): Hydra's files always go to its run
/// directory, DLIO's results to `output.folder` if set.
fn create_outputs(
    config: &Config,
    source: &Source,
    start: SystemTime,
    world: u64,
    wait: folder::Wait,
) -> Result<(OutputFolder, DlioLog)> {
    let run_dir = hydra_run_dir(config, source, start)?;
    let output_folder = config
        .output
        .folder
        .as_ref()
        .map_or_else(|| run_dir.clone(), PathBuf::from);
    folder::make_folder(&run_dir, "Hydra's run folder (hydra.run.dir)")?;
    let mut folder = OutputFolder::take(&output_folder, &config.output.log_file, wait)?;
    folder.hold_run_folder(&run_dir, wait)?;
    let subdir = source
        .overrides
        .hydra_output_subdir
        .as_deref()
        .unwrap_or(".hydra");
    hydra::write_all(&run_dir, subdir, source, &config.tree)?;
    trace::remove_old(&output_folder)?;
    crate::timeseries::remove_old(&output_folder)?;
    let log = DlioLog::create(&output_folder.join(&config.output.log_file))?;
    log.output(&format!(
        "Running DLIO [{}] with {world} process(es)",
        modes(config).join(" & ")
    ));
    for key in &config.unknown_keys {
        log.warning(&format!(
            "unknown configuration key workload.{key} ignored{}",
            crate::config::suggest::key_hint(key)
        ));
    }
    Ok((folder, log))
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
    // The model's name is one folder's name here: `/` or `..` would put the run's files anywhere.
    let name = &config.model.name;
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(Error::usage(format!(
            "workload.model.name '{name}' names the default run folder hydra_log/<model.name>/…, \
             so it must be a plain name (no '/', not '.' or '..'); or give the run a folder: \
             ++hydra.run.dir=DIR"
        )));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::tests::resolve;

    #[test]
    fn the_log_names_the_workflow_s_modes_as_dlio_does() {
        let config = resolve(&[
            "workload=default",
            "++workload.workflow.generate_data=True",
            "++workload.workflow.checkpoint=True",
        ])
        .unwrap();
        assert_eq!(
            modes(&config),
            ["Generating data", "Training", "Evaluation", "Checkpointing"]
        );
        let only_training = resolve(&["workload=default", "++workload.workflow.evaluation=False"]);
        assert_eq!(modes(&only_training.unwrap()), ["Training"]);
    }
}
