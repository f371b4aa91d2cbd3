//! Data generation: every file of both splits, in the format's real layout, written under a
//! temporary name and renamed. File i belongs to rank `i mod world` (as in DLIO); this process
//! writes the files of its ranks with a pool of writer threads.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::format::FileFormat;
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
    fn owns(&self, file: u64) -> bool {
        self.local_ranks.contains(&(file % self.world))
    }
}

/// Writes this process's share of the dataset with `threads` writers.
pub fn generate(
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
    let results: Vec<Result<()>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| -> Result<()> {
                    let mut buffer = Vec::new();
                    loop {
                        let file = next.fetch_add(1, Ordering::Relaxed);
                        if file >= total || failed.load(Ordering::Relaxed) {
                            return Ok(());
                        }
                        if !share.owns(file) {
                            continue;
                        }
                        let written = write_file(dataset, format, storage, file, &mut buffer);
                        match written {
                            Ok(bytes) => counter.add(bytes),
                            Err(e) => {
                                failed.store(true, Ordering::Relaxed);
                                return Err(e);
                            }
                        }
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

fn write_file(
    dataset: &Dataset,
    format: &dyn FileFormat,
    storage: &dyn Storage,
    file: u64,
    buffer: &mut Vec<u8>,
) -> Result<u64> {
    let (split, index) = dataset.locate(file);
    let key = dataset.file_key(split, index);
    let shape = dataset.file_shape(file);
    let mut rng = SmallRng::seed_from_u64(mix64(file ^ 0xDA7A));
    format.encode(&shape, &mut rng, buffer)?;
    storage
        .put(&key, buffer)
        .map_err(|e| Error::run(format!("cannot write {}: {e}", storage.describe(&key))))?;
    Ok(buffer.len() as u64)
}
