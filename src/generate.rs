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

/// Marks the dataset incomplete before any file is written.
pub fn begin(dataset: &Dataset, storage: &dyn Storage) -> Result<()> {
    let marker = format!(
        "dlio-rs is generating this dataset ({} files) since {}, process {} on {}; while this file \
         exists the dataset is incomplete\n",
        dataset.total_files(),
        crate::report::timestamp(std::time::SystemTime::now()),
        std::process::id(),
        crate::system::hostname()
    );
    storage
        .put(INCOMPLETE_MARKER, marker.as_bytes())
        .map_err(|e| {
            Error::run(format!(
                "cannot write {}: {e}",
                storage.describe(INCOMPLETE_MARKER)
            ))
        })
}

/// Marks the dataset complete, once every process's [`write_share`] has returned.
pub fn commit(storage: &dyn Storage) -> Result<()> {
    storage.delete(INCOMPLETE_MARKER).map(|_| ()).map_err(|e| {
        Error::run(format!(
            "cannot remove {}: {e}",
            storage.describe(INCOMPLETE_MARKER)
        ))
    })
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
                            match write_file(dataset, format, storage, file, &mut key, &mut buffer)
                            {
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
    storage
        .sync()
        .map_err(|e| Error::run(format!("cannot flush the generated files: {e}")))?;
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
