//! The output folder, owned by one run at a time: taken with a lock that dies with the process
//! ([`crate::lock`]), then cleared of the result files an earlier run left, so that what the
//! folder holds after a run (finished, failed or interrupted) is this run's and nothing else's.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::lock::{Access, FolderLock};

/// An output folder this run holds; the lock goes with it (or with the process).
#[derive(Debug)]
pub struct OutputFolder {
    path: PathBuf,
    _lock: FolderLock,
}

impl OutputFolder {
    /// Takes `path` (made if missing) for this run, or fails at once with a usage error naming the
    /// run that holds it; then removes the results an earlier run left there: `summary.json`,
    /// `report.json`, the ranks' `N_output.json` and `N_per_epoch_stats.json`, and the log
    /// `log_file`. Nothing else in the folder is touched.
    pub fn take(path: &Path, log_file: &str) -> Result<OutputFolder> {
        make_folder(path, "output folder")?;
        let lock =
            FolderLock::with_lock_file(path, Access::Exclusive, "running").and_then(|taken| {
                taken.map_err(|busy| {
                    Error::usage(format!(
                        "output folder {} is in use by {}; wait for it to end, or give this run \
                     a folder of its own (++hydra.run.dir=DIR)",
                        path.display(),
                        busy.describe("another process")
                    ))
                })
            })?;
        clear_results(path, log_file)?;
        Ok(OutputFolder {
            path: path.to_path_buf(),
            _lock: lock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Makes the folder `path` (`what` names it in errors) and those above it. A file where the folder
/// should be is a usage error: the path given is wrong.
pub fn make_folder(path: &Path, what: &str) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| match std::fs::metadata(path) {
        Ok(found) if !found.is_dir() => Error::usage(format!(
            "{what} {} is not a folder; give a folder's path",
            path.display()
        )),
        _ => Error::io("cannot create folder", path, e),
    })
}

/// Whether `name` is a result file a run writes into its output folder.
fn is_result(name: &str, log_file: &str) -> bool {
    let per_rank = |suffix: &str| {
        name.strip_suffix(suffix)
            .is_some_and(|rank| !rank.is_empty() && rank.bytes().all(|b| b.is_ascii_digit()))
    };
    name == "summary.json"
        || name == "report.json"
        || name == log_file
        || per_rank("_output.json")
        || per_rank("_per_epoch_stats.json")
}

fn clear_results(folder: &Path, log_file: &str) -> Result<()> {
    let entries =
        std::fs::read_dir(folder).map_err(|e| Error::io("cannot list output folder", folder, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("cannot list output folder", folder, e))?;
        let is_file = entry.file_type().is_ok_and(|t| t.is_file());
        if is_file && is_result(&entry.file_name().to_string_lossy(), log_file) {
            std::fs::remove_file(entry.path())
                .map_err(|e| Error::io("cannot remove an earlier run's", &entry.path(), e))?;
        }
    }
    Ok(())
}

/// A folder named `base`, or `base-1`, `base-2`, … where that exists: made here, so that two runs
/// started in the same second (Hydra's default name has one-second resolution) never share one.
pub fn new_unique_folder(base: &Path) -> Result<PathBuf> {
    if let Some(parent) = base.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io("cannot create output folder", parent, e))?;
    }
    let name = base
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    const TRIES: u32 = 10_000;
    for n in 0..TRIES {
        let candidate = match n {
            0 => base.to_path_buf(),
            n => base.with_file_name(format!("{name}-{n}")),
        };
        match std::fs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("cannot create output folder", &candidate, e)),
        }
    }
    Err(Error::run(format!(
        "cannot create output folder {}: it and {TRIES} numbered ones beside it exist",
        base.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::LOCK_FILE;

    #[test]
    fn runs_started_in_the_same_second_get_folders_of_their_own() {
        let dir = crate::storage::scratch_dir("unique-folder");
        let base = dir.join("hydra_log/unet3d/2026-11-25-05-00-00");
        let made: Vec<PathBuf> = (0..3).map(|_| new_unique_folder(&base).unwrap()).collect();
        let names: Vec<String> = made
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "2026-11-25-05-00-00",
                "2026-11-25-05-00-00-1",
                "2026-11-25-05-00-00-2"
            ]
        );
        assert!(made.iter().all(|p| p.is_dir()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn result_files_are_known_by_name_and_nothing_else_is() {
        for name in [
            "summary.json",
            "report.json",
            "dlio.log",
            "0_output.json",
            "12_per_epoch_stats.json",
        ] {
            assert!(is_result(name, "dlio.log"), "{name}");
        }
        for name in [
            "_output.json",
            "x_output.json",
            "notes.txt",
            "summary.json.bak",
            "other.log",
            LOCK_FILE,
        ] {
            assert!(!is_result(name, "dlio.log"), "{name}");
        }
        assert!(is_result("my.log", "my.log"));
    }
}
