//! Data generation: every file of both splits, in the format's real layout. File i belongs to
//! rank `i mod world` (as in DLIO); each process writes the files of its ranks with a pool of
//! writer threads.
//!
//! The dataset is committed as a whole: a marker file sits in the data folder from before the
//! first file is written ([`begin`], by one process) until every process has written and flushed
//! its files ([`write_share`]) and the marker is removed ([`commit`], by one process, after all
//! the others are done); a run refuses a folder that holds it. Files are written in place under their final names, as DLIO writes them: a
//! temporary name and a rename per file would cost a second metadata operation per file, which on
//! a million small files is most of the time (measured: 60% of the write-only rate on tmpfs).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::{Encoded, FileFormat};
use crate::plan::mix64;
use crate::progress::{Counter, Display};
use crate::storage::Storage;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Generated {
    pub files: u64,
    pub bytes: u64,
    pub seconds: f64,
}

/// Which files this process writes: those of ranks `local_ranks` out of `world`.
#[derive(Debug, Clone)]
pub struct Share {
    pub local_ranks: std::ops::Range<u64>,
    pub world: u64,
}

impl Share {
    pub fn owns(&self, file: u64) -> bool {
        self.local_ranks.contains(&(file % self.world))
    }
}

/// Files a writer claims at a time, at most: small beside a large dataset, large enough that
/// claiming is rare.
const MAX_FILES_PER_CLAIM: u64 = 16;

/// Files a writer claims at a time: fewer when the dataset is small, so that every writer gets a
/// share (16 files of 16 MiB were all written by the first writer to claim).
fn files_per_claim(files: u64, threads: usize) -> u64 {
    (files / (threads as u64 * 4).max(1)).clamp(1, MAX_FILES_PER_CLAIM)
}

/// Present in the data folder while a generation runs, and left behind if it is interrupted.
pub const INCOMPLETE_MARKER: &str = ".dlio-rs-generating";

/// Who is generating into the local data folder `root`, as its marker says: `process P on H
/// since T`; `None` without a marker.
pub fn holder(root: &std::path::Path) -> Option<String> {
    let marker = crate::folder::read_text_file(&root.join(INCOMPLETE_MARKER), 64 << 10).ok()??;
    let (since, rest) = marker.split_once(" since ")?.1.split_once(", ")?;
    let (process, _) = rest.split_once(';')?;
    Some(format!("{process} since {since}"))
}

/// Marks the dataset incomplete before any file is written, and makes its folders as DLIO does
/// (empty ones included).
pub fn begin(dataset: &Dataset, storage: &dyn Storage) -> Result<()> {
    let marker = format!(
        "dlio-rs is generating this dataset ({} files) since {}, process {} on {}; while this file \
         exists the dataset is incomplete\n",
        dataset.total_files(),
        crate::system::timestamp(std::time::SystemTime::now()),
        std::process::id(),
        crate::system::hostname()
    );
    storage
        .put(INCOMPLETE_MARKER, marker.as_bytes())
        .map_err(|e| Error::on_object("cannot write", storage.describe(INCOMPLETE_MARKER), e))?;
    for folder in dataset.folders() {
        crate::interrupt::check()?;
        storage
            .make_folder(&folder)
            .map_err(|e| Error::on_object("cannot make folder", storage.describe(&folder), e))?;
    }
    Ok(())
}

/// Marks the dataset complete, once every process's [`write_share`] has returned.
pub fn commit(storage: &dyn Storage) -> Result<()> {
    storage
        .delete(INCOMPLETE_MARKER)
        .map(|_| ())
        .map_err(|e| Error::on_object("cannot remove", storage.describe(INCOMPLETE_MARKER), e))
}

/// Writes this process's share of the dataset with `threads` writers, and flushes it.
pub fn write_share(
    dataset: &Dataset,
    format: &dyn FileFormat,
    storage: &dyn Storage,
    share: &Share,
    threads: usize,
    display: Display,
) -> Result<Generated> {
    let total = dataset.total_files();
    let mine = (0..total).filter(|&i| share.owns(i)).count() as u64;
    let counter = Counter::new(display, "generating", mine);
    let next = AtomicU64::new(0);
    let failed = AtomicBool::new(false);
    let threads = threads.clamp(1, mine.max(1) as usize);
    let claim = files_per_claim(mine, threads);
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    let mut buffer = Encoded::default();
                    let mut key = String::new();
                    loop {
                        // Files are handed out in runs: one shared counter update per run, not
                        // per file, keeps the writers off each other's cache lines.
                        let first = next.fetch_add(claim, Ordering::Relaxed);
                        if first >= total {
                            return Ok(());
                        }
                        let (mut files, mut bytes) = (0, 0);
                        for file in first..(first + claim).min(total) {
                            if failed.load(Ordering::Relaxed) {
                                return Ok(());
                            }
                            if !share.owns(file) {
                                continue;
                            }
                            // Written for the rank that owns it (its endpoint, with several).
                            crate::storage::mark_rank((file % share.world) as usize);
                            // A signal stops the generation between files; the marker stays.
                            let written =
                                crate::interrupt::check()
                                    .map_err(Error::from)
                                    .and_then(|()| {
                                        write_file(
                                            dataset,
                                            format,
                                            storage,
                                            file,
                                            &mut key,
                                            &mut buffer,
                                        )
                                    });
                            match written {
                                Ok(written) => {
                                    files += 1;
                                    bytes += written;
                                }
                                Err(e) => {
                                    failed.store(true, Ordering::Relaxed);
                                    return Err(e);
                                }
                            }
                        }
                        counter.add_many(files, bytes);
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .unwrap_or_else(|_| Err(Error::run("a writer thread panicked")))
            })
            .collect()
    });
    results.into_iter().collect::<Result<Vec<()>>>()?;
    // Flushed before anything reads them: write-back must not compete with the first epoch's
    // reads, and dirty pages could not be evicted by `page_cache: evict_after_read`.
    storage.sync().map_err(|e| {
        Error::on_object(
            "cannot flush the generated files in",
            storage.describe(""),
            e,
        )
    })?;
    let (files, bytes, seconds) = counter.finish();
    Ok(Generated {
        files,
        bytes,
        seconds,
    })
}

fn write_file<'s>(
    dataset: &Dataset,
    format: &dyn FileFormat,
    storage: &'s dyn Storage,
    file: u64,
    key: &mut String,
    encoded: &mut Encoded<'s>,
) -> Result<u64> {
    let (split, index) = dataset.locate(file);
    dataset.write_file_key(key, split, index);
    let shape = dataset.file_shape(file);
    let mut rng = SmallRng::seed_from_u64(mix64(file ^ 0xDA7A));
    encoded.stream_to(storage, key)?;
    format.encode(key, &shape, &mut rng, encoded)?;
    encoded.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalFs;

    #[test]
    fn a_generation_s_marker_names_its_process_and_its_folders_are_dlio_s() {
        let dir = crate::storage::scratch_dir("generation-marker");
        let storage = LocalFs::new(&dir);
        let yaml = "dataset:\n  num_files_train: 4\n  num_subfolders_train: 2\n  num_files_eval: 0\n  num_subfolders_eval: 3\n";
        let config = crate::config::Config::from_tree(
            "t",
            crate::config::value::Value::from_yaml(yaml).unwrap(),
        )
        .unwrap();
        let dataset = Dataset::from_config(&config);
        assert_eq!(holder(&dir), None);
        begin(&dataset, &storage).unwrap();
        let holder = holder(&dir).unwrap();
        let pid = format!("process {} on ", std::process::id());
        assert!(holder.starts_with(&pid), "{holder}");
        // DLIO makes every split's folder and subfolders, files or not.
        for folder in ["train/0", "train/1", "valid/0", "valid/1", "valid/2"] {
            assert!(dir.join(folder).is_dir(), "{folder}");
        }
        commit(&storage).unwrap();
        assert_eq!(super::holder(&dir), None);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
