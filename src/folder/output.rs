//! The output folder, owned by one run at a time: taken with a lock that dies with the process
//! ([`super::lock`]), then cleared of the result files an earlier run left, so that what the
//! folder holds after a run (finished, failed or interrupted) is this run's and nothing else's.

use std::path::{Path, PathBuf};

use super::lock::{Access, FolderLock};
use super::make_folder;
use crate::error::{Error, Result};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::folder::lock::LOCK_FILE;

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
