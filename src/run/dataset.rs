//! The third phase, the dataset (and the last, when the dataset is not kept). A run that generates writes it with every
//! process (each its ranks' files) and commits it once all are flushed; a run that trains then
//! finds its files once, in process 0, by DLIO's naming scheme or by one listing, and gives
//! them to every process. Process 0 holds the data folder meanwhile ([`DataFolder`]: alone
//! while generating, shared while reading), so that two runs never interleave a dataset. A
//! missing or unfinished dataset is refused with the command that generates it. At the end of a
//! run that does not keep its files, each process deletes its ranks' files.

use std::path::Path;
use std::sync::Arc;

use super::held::{self, Hold, Use};
use super::setup::Setup;
use crate::comm::{agree, broadcast_value, Comm, Reduce};
use crate::config::{Config, Source};
use crate::dataset::listing::FileList;
use crate::dataset::names::{self, ListingRules, SplitNames};
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::FileFormat;
use crate::generate::{self, Generated, Share};
use crate::plan::Phase;
use crate::progress::Display;
use crate::report::log::DlioLog;
use crate::storage::Storage;

/// The run's data folder: held by process 0 while the run generates or reads it
/// ([`Hold`]: a folder lock, or a lease on object storage); the hold ends with the run.
#[derive(Default)]
pub(super) struct DataFolder {
    held: Option<Hold>,
}

/// The pause after a generation that `storage.post_generation_settle_seconds` asks for (DLIO's
/// fork's key), on any storage but `local_fs`, for stores whose new objects take time to be
/// listed and read everywhere. Every process waits the same time after the generation's last
/// collective, as DLIO's rank 0 sleeps before a barrier; a signal ends the wait.
fn settle(config: &Config, log: &DlioLog) -> Result<()> {
    let seconds = config.storage.post_generation_settle_seconds;
    if seconds <= 0.0 || config.storage.storage_type == crate::config::StorageType::LocalFs {
        return Ok(());
    }
    log.output(&format!(
        "Settling {seconds} s after generation (storage.post_generation_settle_seconds)"
    ));
    let until = std::time::Instant::now() + std::time::Duration::from_secs_f64(seconds);
    crate::interrupt::sleep_until(until);
    crate::interrupt::check().map_err(Error::from)
}

/// Which files this process generates or deletes: those of its ranks.
fn share_of(comm: &dyn Comm) -> Share {
    let local = comm.local_ranks();
    Share {
        local_ranks: local.start as u64..local.end as u64,
        world: comm.world() as u64,
    }
}

impl DataFolder {
    /// Generation by every process, each writing its ranks' files, committed once all are flushed.
    /// Process 0 holds the data folder to itself meanwhile, and shares it once the dataset is
    /// complete.
    pub fn generate(
        &mut self,
        comm: &dyn Comm,
        setup: &Setup,
        log: &DlioLog,
        display: Display,
    ) -> Result<Generated> {
        let (dataset, format, storage) = (
            &setup.dataset,
            setup.format.as_ref(),
            setup.storage.as_ref(),
        );
        let held = &mut self.held;
        let lead = comm.process() == 0;
        agree(
            comm,
            if lead {
                held::hold_data_folder(setup, Use::Generate)
                    .map(|hold| *held = hold)
                    .and_then(|()| generate::begin(dataset, storage))
            } else {
                Ok(())
            },
        )?;
        // Logged once the folder is held and marked.
        log.output("Starting data generation");
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
                // A run that deletes its dataset at the end keeps it to itself until then; a lease
                // lost to another run (this one stalled past it) fails the generation.
                let keep = setup.config.dataset.keep_files;
                let still_held = match held.as_ref() {
                    Some(Hold::Lease(lease)) => lease.check(),
                    _ => Ok(()),
                };
                still_held
                    .and_then(|()| generate::commit(storage))
                    .and_then(|()| match held.as_mut() {
                        Some(Hold::Lock(lock)) if keep => lock.share(),
                        // Readers of an object store hold nothing: the lease goes.
                        Some(Hold::Lease(_)) if keep => {
                            *held = None;
                            Ok(())
                        }
                        _ => Ok(()),
                    })
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
        settle(&setup.config, log)?;
        Ok(generated)
    }

    /// Finds the dataset's files once for the whole run (see [`find_dataset`]), not once per
    /// process, and gives them to every process; process 0 holds the folder, shared, while the run
    /// reads it.
    pub fn find(
        &mut self,
        comm: &dyn Comm,
        setup: &mut Setup,
        source: &Source,
        display: Display,
    ) -> Result<Vec<SplitNames>> {
        let found = if comm.process() == 0 {
            // Held already by the generation that wrote it, in this run.
            let held = match self.held.is_some() {
                true => Ok(()),
                false => hold_for_reading(setup, source).map(|hold| self.held = hold),
            };
            let (config, storage) = (&setup.config, setup.storage.as_ref());
            let dataset = &mut setup.dataset;
            held.and_then(|()| find_dataset(config, source, dataset, storage, display))
                .map(|names| {
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
        let (storage, dataset) = (setup.storage.as_ref(), &mut setup.dataset);
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
}

/// The dataset's files as process 0 finds them (by scheme, or by one listing), given to all.
#[derive(serde::Serialize, serde::Deserialize)]
struct FoundFiles {
    names: Vec<SplitNames>,
    train: Option<FileList>,
    eval: Option<FileList>,
}

/// Holds the data folder for a training run's reads ([`Use::Read`], or alone for a run that
/// deletes it at the end), once it is known to be a folder.
fn hold_for_reading(setup: &Setup, source: &Source) -> Result<Option<Hold>> {
    let usage = match setup.config.dataset.keep_files {
        true => Use::Read,
        false => Use::ReadThenDelete,
    };
    if let Some(root) = setup.storage.local_root() {
        check_data_folder(root, &setup.config, source)?;
    }
    held::hold_data_folder(setup, usage)
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
) -> Result<Vec<SplitNames>> {
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

/// `dataset.keep_files: False`: DLIO deletes the dataset's files when the run ends; each process
/// deletes the files of its ranks, and all go on or all stop.
pub(super) fn delete_dataset(comm: &dyn Comm, setup: &Setup) -> Result<()> {
    let deleted = delete_files(
        &setup.dataset,
        setup.format.as_ref(),
        setup.storage.as_ref(),
        &share_of(comm),
    );
    agree(comm, deleted)
}

/// Deletes the files (and their side files) of the ranks `share` names.
fn delete_files(
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
    // A name Hydra would read otherwise (`~`, `,`, a space) is given as Hydra's quoted string.
    let name = &config.workload_name;
    let plain = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c));
    words.push(match plain {
        true => format!("workload={name}"),
        false => format!("workload={}", crate::config::overrides::hydra_quoted(name)),
    });
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
            .all(|c| c.is_ascii_alphanumeric() || "_-+=./:,@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::overrides::Overrides;
    use crate::config::tests::resolve;

    #[test]
    fn words_a_shell_would_change_are_quoted() {
        for plain in [
            "workload=unet3d_h100",
            "++workload.a.b=1,2",
            "x@y:z%/.-",
            "~keep",
        ] {
            let expected = match plain.starts_with('~') {
                true => format!("'{plain}'"),
                false => plain.to_string(),
            };
            assert_eq!(shell_quote(plain), expected, "{plain}");
        }
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn the_generation_hint_keeps_the_dataset_words_and_asks_for_a_generation_only() {
        let words = [
            "workload=default",
            "++workload.dataset.num_files_train=8",
            "++workload.dataset.data_folder=my data",
            "++workload.workflow.train=True",
            "workload.workflow.generate_data=False",
            "++hydra.run.dir=results/run1",
        ];
        let config = resolve(&words).unwrap();
        let source = Source {
            overrides: Overrides::parse(&words).unwrap(),
            config_dir: Some("my configs".into()),
        };
        assert_eq!(
            generate_hint(&config, &source),
            "generate the dataset with: dlio-rs run --config-dir 'my configs' workload=default \
             ++workload.dataset.num_files_train=8 '++workload.dataset.data_folder=my data' \
             ++workload.workflow.generate_data=True ++workload.workflow.train=False"
        );
    }
}
