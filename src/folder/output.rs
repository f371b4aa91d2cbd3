//! The output folder, owned by one run at a time: taken with a lock that dies with the process
//! ([`super::lock`]), then cleared of the result files an earlier run left, so that what the
//! folder holds after a run (finished, failed or interrupted) is this run's and nothing else's.

use std::path::{Path, PathBuf};

use super::lock::{Access, FolderLock, Wait};
use super::make_folder;
use crate::error::{Error, Result};

/// An output folder this run holds; the lock goes with it (or with the process).
#[derive(Debug)]
pub struct OutputFolder {
    path: PathBuf,
    _lock: FolderLock,
    /// Hydra's run folder, where it is another folder (`output.folder` set): held too.
    _run_folder: Option<FolderLock>,
}

impl OutputFolder {
    /// Takes `path` (made if missing) for this run, or fails at once with a usage error naming the
    /// run that holds it; then removes the results an earlier run left there: `summary.json`,
    /// `report.json`, `report.html`, the ranks' `N_output.json` and `N_per_epoch_stats.json`, the
    /// log `log_file`, and the page's charts (`charts/`, [`remove_charts`]); a link of one of
    /// those names is removed, not followed. Nothing else in the folder is touched.
    pub fn take(path: &Path, log_file: &str, wait: Wait) -> Result<OutputFolder> {
        make_folder(path, "output folder")?;
        let lock = FolderLock::with_lock_file(path, Access::Exclusive, "running", wait).and_then(
            |taken| {
                taken.map_err(|busy| {
                    Error::usage(format!(
                        "output folder {} is in use by {}; wait for it to end, or give this run \
                     a folder of its own (++hydra.run.dir=DIR)",
                        path.display(),
                        busy.describe("another process")
                    ))
                })
            },
        )?;
        clear_results(path, log_file)?;
        remove_charts(&path.join(CHARTS_DIR))?;
        Ok(OutputFolder {
            path: path.to_path_buf(),
            _lock: lock,
            _run_folder: None,
        })
    }

    /// Holds Hydra's run folder `run_dir` too, where it is not the output folder: two runs that
    /// share it would overwrite each other's `.hydra/` files (the configuration mlpstorage reads).
    /// The folder itself is locked (nothing is added to it); another run is refused at once, or
    /// after `wait`.
    pub fn hold_run_folder(&mut self, run_dir: &Path, wait: Wait) -> Result<()> {
        let same = |a: &Path, b: &Path| {
            use std::os::unix::fs::MetadataExt;
            match (std::fs::metadata(a), std::fs::metadata(b)) {
                (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
                _ => false,
            }
        };
        if same(run_dir, &self.path) {
            return Ok(());
        }
        let lock = FolderLock::on_folder(run_dir, Access::Exclusive, wait)?.map_err(|busy| {
            Error::usage(format!(
                "Hydra's run folder {} is in use by {}; wait for it to end (run --wait SECONDS), \
                 or give this run a folder of its own (++hydra.run.dir=DIR)",
                run_dir.display(),
                busy.describe("another run")
            ))
        })?;
        self._run_folder = Some(lock);
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Where `dlio-rs report --png` writes a run's charts, in its output folder.
pub const CHARTS_DIR: &str = "charts";

/// Removes the charts `dlio-rs report --png` wrote into `dir` (`NN-name.svg`, `NN-name.png`), then
/// the folder if nothing else is in it: the charts of an earlier page never stand beside a
/// newer page's.
pub fn remove_charts(dir: &Path) -> Result<()> {
    // A link where the folder goes is removed, not followed into another folder's files.
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return std::fs::remove_file(dir).map_err(|e| Error::io("cannot remove the link", dir, e));
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io("cannot list the charts folder", dir, e)),
    };
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("cannot list the charts folder", dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let stem = name
            .strip_suffix(".png")
            .or_else(|| name.strip_suffix(".svg"));
        let ours = stem
            .and_then(|s| s.split_once('-'))
            .is_some_and(|(n, chart)| {
                n.len() == 2 && n.bytes().all(|b| b.is_ascii_digit()) && !chart.is_empty()
            });
        if ours {
            std::fs::remove_file(entry.path())
                .map_err(|e| Error::io("cannot remove an earlier chart", &entry.path(), e))?;
        }
    }
    // Gone when it held only charts.
    let _ = std::fs::remove_dir(dir);
    Ok(())
}

/// Whether `name` is a result file a run writes into its output folder.
fn is_result(name: &str, log_file: &str) -> bool {
    let per_rank = |suffix: &str| {
        name.strip_suffix(suffix)
            .is_some_and(|rank| !rank.is_empty() && rank.bytes().all(|b| b.is_ascii_digit()))
    };
    name == "summary.json"
        || name == "report.json"
        || name == "report.html"
        || name == log_file
        // DLIO's default log, of an earlier run that had no other name for it: its [METRIC]
        // block would stand beside this run's results.
        || name == "dlio.log"
        || per_rank("_output.json")
        || per_rank("_per_epoch_stats.json")
}

fn clear_results(folder: &Path, log_file: &str) -> Result<()> {
    let entries =
        std::fs::read_dir(folder).map_err(|e| Error::io("cannot list output folder", folder, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io("cannot list output folder", folder, e))?;
        // A link is removed, never followed: what it points to is not this run's.
        let is_file = entry
            .file_type()
            .is_ok_and(|t| t.is_file() || t.is_symlink());
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
            "report.html",
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

    #[test]
    fn an_earlier_run_s_page_charts_and_links_go_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("dlio-rs-clear-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("charts")).unwrap();
        let outside = dir.with_extension("outside");
        std::fs::write(&outside, "not this run's").unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("report.json")).unwrap();
        for name in ["report.html", "summary.json", "keep.txt"] {
            std::fs::write(dir.join(name), "earlier").unwrap();
        }
        for name in [
            "01-au.png",
            "12-samples.svg",
            "1-au.png",
            "ab-au.png",
            "notes.txt",
        ] {
            std::fs::write(dir.join("charts").join(name), "earlier").unwrap();
        }
        let taken = OutputFolder::take(&dir, "dlio.log", None).unwrap();
        let left = |sub: &str| {
            let mut names: Vec<String> = std::fs::read_dir(dir.join(sub))
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != LOCK_FILE)
                .collect();
            names.sort();
            names
        };
        assert_eq!(left(""), ["charts", "keep.txt"]);
        assert_eq!(left("charts"), ["1-au.png", "ab-au.png", "notes.txt"]);
        // The link went; what it pointed to is untouched.
        assert_eq!(std::fs::read_to_string(&outside).unwrap(), "not this run's");
        drop(taken);
        // A charts folder of charts only goes with them.
        for name in ["1-au.png", "ab-au.png", "notes.txt"] {
            std::fs::remove_file(dir.join("charts").join(name)).unwrap();
        }
        std::fs::write(dir.join("charts/02-au.png"), "x").unwrap();
        remove_charts(&dir.join("charts")).unwrap();
        assert!(!dir.join("charts").exists());
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_file(&outside).unwrap();
    }
}
