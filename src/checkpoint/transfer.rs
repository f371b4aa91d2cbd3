//! Moving one rank's share of a checkpoint to and from the storage: every file streamed through
//! one buffer of [`CHUNK_BYTES`], so a 100 GiB shard needs no more memory than a 10 KiB one.
//!
//! A save fills each chunk with fresh random bytes (as DLIO's `torch.rand` tensors are), so no
//! two blocks of a checkpoint are alike and storage that compresses or deduplicates gains
//! nothing it would not gain on real weights. With `checkpoint.fsync` every file is made durable
//! before the save counts as done. A file that fails midway is removed, so a later load never
//! takes it for whole; a load checks each file's size against the geometry before reading it.

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::geometry::ShardFile;
use crate::error::{Error, Result};
use crate::format::random::BulkRandom;
use crate::storage::{IoBuffer, ObjectWriter, Storage};
use crate::timeseries::RankCounters;

/// The size of each write and read request, and of the one buffer a rank streams through: large
/// enough that a request costs the device its bandwidth, not its latency, and a multiple of every
/// O_DIRECT block.
pub const CHUNK_BYTES: usize = 4 << 20;

/// What one save or load moved.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Moved {
    pub files: u64,
    pub bytes: u64,
    /// Seconds spent making the files durable (finishing them with fsync); 0 without fsync.
    pub sync_seconds: f64,
    /// Bytes that came from the storage device rather than the page cache (loads), where they
    /// can be known.
    pub bytes_from_storage: Option<u64>,
}

/// One rank's checkpoint traffic: the storage rooted at the checkpoint folder, and the buffer and
/// random stream its saves and loads reuse.
pub struct Transfer<'a> {
    storage: &'a dyn Storage,
    buffer: IoBuffer,
    /// The contents of saved files: fresh random bytes, or DLIO's tensors of ones
    /// (`checkpoint.randomize_tensor: False`), a pattern written once into the buffer.
    random: Option<BulkRandom>,
    fsync: bool,
    /// The rank's time-series counters, told of every chunk moved.
    meters: Option<&'a RankCounters>,
}

impl<'a> Transfer<'a> {
    /// `seed` makes the saved bytes differ from rank to rank and run to run.
    pub fn new(storage: &'a dyn Storage, fsync: bool, randomize: bool, seed: u64) -> Transfer<'a> {
        let random = randomize.then(|| BulkRandom::seeded(&mut SmallRng::seed_from_u64(seed)));
        Transfer {
            storage,
            buffer: IoBuffer::new(),
            random,
            fsync,
            meters: None,
        }
    }

    /// The transfer, telling `meters` (a rank's time-series counters) of every chunk it moves.
    pub fn counted_by(self, meters: Option<&'a RankCounters>) -> Transfer<'a> {
        Transfer { meters, ..self }
    }

    fn key(folder: &str, file: &ShardFile) -> String {
        format!("{folder}/{}", file.name)
    }

    /// Saves `files` into the checkpoint folder `folder` (`global_epoch{E}_step{S}`). A signal
    /// ([`crate::interrupt`]) stops it between chunks.
    pub fn save(&mut self, folder: &str, files: &[ShardFile]) -> Result<Moved> {
        let mut moved = Moved::default();
        for file in files {
            let key = Self::key(folder, file);
            // What is there and refused (a link, a FIFO, a device) is not the run's to remove.
            let object = self.storage.create(&key).map_err(|e| {
                Error::on_object(
                    "cannot save checkpoint file",
                    self.storage.describe(&key),
                    e,
                )
            })?;
            let sync_seconds = self.save_file(&key, object, file.bytes).inspect_err(|_| {
                // Best effort: a partial file must not pass for a whole one later.
                let _ = self.storage.delete(&key);
            })?;
            moved.files += 1;
            moved.bytes += file.bytes;
            moved.sync_seconds += sync_seconds;
        }
        Ok(moved)
    }

    /// Writes `bytes` bytes into `object`, the file `key` just created; returns the seconds its
    /// fsync took.
    fn save_file(
        &mut self,
        key: &str,
        mut object: Box<dyn ObjectWriter + '_>,
        bytes: u64,
    ) -> Result<f64> {
        let failed =
            |e| Error::on_object("cannot save checkpoint file", self.storage.describe(key), e);
        let chunk = CHUNK_BYTES.min(usize::try_from(bytes).unwrap_or(CHUNK_BYTES));
        let buffer = self.buffer.resize_for_writing(chunk).map_err(failed)?;
        if self.random.is_none() {
            // Loads reuse the buffer: the pattern is written again for every file.
            buffer.fill(1);
        }
        let mut left = bytes;
        while left > 0 {
            crate::interrupt::check()?;
            let n = CHUNK_BYTES.min(usize::try_from(left).unwrap_or(CHUNK_BYTES));
            if let Some(random) = &mut self.random {
                random.fill(&mut buffer[..n]);
            }
            object.write(&buffer[..n]).map_err(failed)?;
            if let Some(meters) = self.meters {
                meters.checkpoint_written(n as u64);
            }
            left -= n as u64;
        }
        if !self.fsync {
            object.finish().map_err(failed)?;
            return Ok(0.0);
        }
        let started = std::time::Instant::now();
        object.finish_durably().map_err(failed)?;
        Ok(started.elapsed().as_secs_f64())
    }

    /// Loads `files` from the checkpoint folder `folder`: every byte, in [`CHUNK_BYTES`] requests.
    /// A missing file, or one whose size is not the geometry's, is an error naming it. A signal
    /// stops it between requests.
    pub fn load(&mut self, folder: &str, files: &[ShardFile]) -> Result<Moved> {
        let kernel_before = crate::system::thread_read_bytes();
        let mut moved = Moved::default();
        for file in files {
            let key = Self::key(folder, file);
            let path = || self.storage.describe(&key);
            let mut object = self.storage.open_sequential(&key).map_err(|e| {
                if e.kind() == std::io::ErrorKind::NotFound {
                    missing(&path())
                } else {
                    Error::on_object("cannot open checkpoint file", path(), e)
                }
            })?;
            if object.size() != file.bytes {
                return Err(Error::corrupt(
                    "checkpoint file",
                    path(),
                    format!(
                        "it holds {} bytes, but the checkpoint's geometry gives it {}: it was cut \
                         short, or saved with another configuration",
                        object.size(),
                        file.bytes
                    ),
                ));
            }
            let mut read = 0;
            loop {
                crate::interrupt::check()?;
                let n = object
                    .read_next(&mut self.buffer, CHUNK_BYTES)
                    .map_err(|e| Error::on_object("cannot load checkpoint file", path(), e))?;
                if n == 0 {
                    break;
                }
                if let Some(meters) = self.meters {
                    meters.checkpoint_read(n as u64);
                }
                read += n as u64;
            }
            if read != file.bytes {
                return Err(Error::corrupt(
                    "checkpoint file",
                    path(),
                    format!("it ended after {read} of its {} bytes", file.bytes),
                ));
            }
            moved.files += 1;
            moved.bytes += read;
        }
        let kernel_count = kernel_before
            .zip(crate::system::thread_read_bytes())
            .map(|(before, after)| after.saturating_sub(before));
        moved.bytes_from_storage = self
            .storage
            .accounting()
            .bytes_from_storage(moved.bytes, kernel_count);
        Ok(moved)
    }

    /// Drops `files` of `folder` from the page cache (written back first), so that loading them
    /// reads the storage.
    pub fn evict(&self, folder: &str, files: &[ShardFile]) -> Result<()> {
        for file in files {
            let key = Self::key(folder, file);
            self.storage.evict(&key).map_err(|e| {
                let path = self.storage.describe(&key);
                if e.kind() == std::io::ErrorKind::NotFound {
                    missing(&path)
                } else {
                    Error::on_object("cannot evict from the page cache checkpoint file", path, e)
                }
            })?;
        }
        Ok(())
    }
}

fn missing(path: &str) -> Error {
    Error::run(format!(
        "checkpoint file {path} is missing: the checkpoint was not saved whole, or was saved \
         with another configuration"
    ))
}
