//! Moving one rank's share of a checkpoint to and from the storage: every file streamed through
//! one buffer of [`CHUNK_BYTES`], so a 100 GiB shard needs no more memory than a 10 KiB one.
//!
//! A save fills each chunk with fresh random bytes (as DLIO's `torch.rand` tensors are), so no
//! two blocks of a checkpoint are alike and storage that compresses or deduplicates gains
//! nothing it would not gain on real weights. With `checkpoint.fsync` every file is made durable
//! before the save counts as done. A file that fails midway is removed, so a later load never
//! takes it for whole; a load checks each file's size against the geometry before reading it.
//!
//! TensorFlow shards ([`Bundle`]) are saved as `tf.train.Checkpoint.save` saves them (measured
//! under strace with TensorFlow 2.21): on a file system, the data file is streamed into
//! `{prefix}-1_temp/part-00000-of-00001.data-00000-of-00001.tempstate{n}` and renamed, the index
//! written the same way, read back (the merge of the parts), the data file renamed to
//! `{prefix}-1.data-00000-of-00001`, the index written as `{prefix}-1.index`, the part's index
//! and folder removed, and the folder's `checkpoint` file written as `checkpoint.tmp{hex}` and
//! renamed. Storage without rename (object stores) gets the three final names written directly.
//! A load reads as TensorFlow's restore does: the index whole, the object graph at the data
//! file's end, then the tensors in order, their CRC32C checked against the index.

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::geometry::ShardFile;
use super::tf_bundle::{self, Bundle, Content};
use crate::error::{Error, Result};
use crate::format::random::BulkRandom;
use crate::storage::{IoBuffer, ObjectWriter, Storage};
use crate::timeseries::RankCounters;
use rand::Rng;

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
    /// The small files of TensorFlow shards (index, object graph) as read back.
    small: IoBuffer,
    /// The random parts of temporary names.
    names: SmallRng,
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
            small: IoBuffer::new(),
            names: SmallRng::seed_from_u64(seed.rotate_left(17)),
        }
    }

    /// The transfer, telling `meters` (a rank's time-series counters) of every chunk it moves.
    pub fn counted_by(self, meters: Option<&'a RankCounters>) -> Transfer<'a> {
        Transfer { meters, ..self }
    }

    fn key(folder: &str, file: &ShardFile) -> String {
        format!("{folder}/{}", file.name)
    }

    /// Saves `files` into the checkpoint folder `folder` (`global_epoch{E}_step{S}`), each as
    /// its TensorFlow bundle when `bundles` has them (one per file). A signal
    /// ([`crate::interrupt`]) stops it between chunks.
    pub fn save(
        &mut self,
        folder: &str,
        files: &[ShardFile],
        bundles: Option<&[Bundle]>,
    ) -> Result<Moved> {
        let mut moved = Moved::default();
        for (i, file) in files.iter().enumerate() {
            let (count, sync_seconds) = match bundles {
                Some(bundles) => (2, self.save_bundle(folder, file, &bundles[i])?),
                None => {
                    let key = Self::key(folder, file);
                    (1, self.save_stream(&key, file.bytes, None)?.0)
                }
            };
            moved.files += count;
            moved.bytes += file.bytes;
            moved.sync_seconds += sync_seconds;
        }
        Ok(moved)
    }

    /// Creates `key` and streams into it `bytes` fresh bytes, or `bundle`'s data file (its
    /// tensors' CRCs taken as they pass); returns the seconds its fsync took and the CRCs. A
    /// file that fails midway is removed.
    fn save_stream(
        &mut self,
        key: &str,
        bytes: u64,
        bundle: Option<&Bundle>,
    ) -> Result<(f64, Vec<u32>)> {
        // What is there and refused (a link, a FIFO, a device) is not the run's to remove.
        let object = self.storage.create(key).map_err(|e| {
            Error::on_object("cannot save checkpoint file", self.storage.describe(key), e)
        })?;
        self.save_file(key, object, bytes, bundle).inspect_err(|_| {
            // Best effort: a partial file must not pass for a whole one later.
            let _ = self.storage.delete(key);
        })
    }

    /// Writes `bytes` bytes into `object`, the file `key` just created: fresh bytes, with
    /// `bundle`'s fixed tensors (save counter, object graph) in their places; returns the
    /// seconds its fsync took and the CRC32C of each of `bundle`'s tensors.
    fn save_file(
        &mut self,
        key: &str,
        mut object: Box<dyn ObjectWriter + '_>,
        bytes: u64,
        bundle: Option<&Bundle>,
    ) -> Result<(f64, Vec<u32>)> {
        let failed =
            |e| Error::on_object("cannot save checkpoint file", self.storage.describe(key), e);
        let chunk = CHUNK_BYTES.min(usize::try_from(bytes).unwrap_or(CHUNK_BYTES));
        let buffer = self.buffer.resize_for_writing(chunk).map_err(failed)?;
        let mut sums = Checksums::new(bundle);
        let mut position = 0;
        while position < bytes {
            crate::interrupt::check()?;
            let n = CHUNK_BYTES.min(usize::try_from(bytes - position).unwrap_or(CHUNK_BYTES));
            match &mut self.random {
                Some(random) => random.fill(&mut buffer[..n]),
                // DLIO's tensors of ones; loads and fixed tensors reuse the buffer, so the
                // pattern is written again for every chunk.
                None => buffer[..n].fill(1),
            }
            sums.place_and_sum(position, &mut buffer[..n]);
            object.write(&buffer[..n]).map_err(failed)?;
            if let Some(meters) = self.meters {
                meters.checkpoint_written(n as u64);
            }
            position += n as u64;
        }
        let crcs = sums.finish();
        if !self.fsync {
            object.finish().map_err(failed)?;
            return Ok((0.0, crcs));
        }
        let started = std::time::Instant::now();
        object.finish_durably().map_err(failed)?;
        Ok((started.elapsed().as_secs_f64(), crcs))
    }

    /// Writes the small file `key` whole (`durable`: with `checkpoint.fsync`, made durable);
    /// returns the seconds its fsync took.
    fn put(&mut self, key: &str, data: &[u8], durable: bool) -> Result<f64> {
        let failed =
            |e| Error::on_object("cannot save checkpoint file", self.storage.describe(key), e);
        let mut object = self.storage.create(key).map_err(failed)?;
        object.write(data).map_err(failed)?;
        if let Some(meters) = self.meters {
            meters.checkpoint_written(data.len() as u64);
        }
        if !(durable && self.fsync) {
            object.finish().map_err(failed)?;
            return Ok(0.0);
        }
        let started = std::time::Instant::now();
        object.finish_durably().map_err(failed)?;
        Ok(started.elapsed().as_secs_f64())
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.storage.rename(from, to).map_err(|e| {
            let target = self.storage.describe(to);
            Error::on_object(
                "cannot rename checkpoint file",
                self.storage.describe(from),
                std::io::Error::new(e.kind(), format!("to {target}: {e}")),
            )
        })
    }

    /// Saves one shard as `tf.train.Checkpoint(**state).save("{folder}/{file.name}")` does
    /// (the module's doc: through temporary names and renames where the storage renames);
    /// returns the seconds its fsyncs took.
    fn save_bundle(&mut self, folder: &str, file: &ShardFile, bundle: &Bundle) -> Result<f64> {
        let name = format!("{}{}", file.name, tf_bundle::SAVE_SUFFIX);
        let prefix = format!("{folder}/{name}");
        let data = format!("{prefix}{}", tf_bundle::DATA_SUFFIX);
        let index = format!("{prefix}{}", tf_bundle::INDEX_SUFFIX);
        let state_file = format!("{folder}/{}", tf_bundle::CHECKPOINT_FILE);
        let state = tf_bundle::checkpoint_state(&name);
        if !self.storage.renames() {
            // TensorFlow's writers for stores without atomic moves write final names directly.
            let (mut seconds, crcs) = self.save_stream(&data, bundle.data_bytes(), Some(bundle))?;
            seconds += self.put(&index, &bundle.index(&crcs), true)?;
            seconds += self.put(&state_file, state.as_bytes(), true)?;
            return Ok(seconds);
        }
        // The saver writes one part per device into a temporary folder, then merges the parts.
        let temp = format!("{prefix}_temp");
        self.storage.make_folder(&temp).map_err(|e| {
            Error::on_object(
                "cannot make checkpoint folder",
                self.storage.describe(&temp),
                e,
            )
        })?;
        let part = format!("{temp}/part-00000-of-00001");
        let part_data = format!("{part}{}", tf_bundle::DATA_SUFFIX);
        let part_index = format!("{part}{}", tf_bundle::INDEX_SUFFIX);
        let temp_data = format!("{part_data}.tempstate{}", self.names.random::<u64>());
        let (mut seconds, crcs) =
            self.save_stream(&temp_data, bundle.data_bytes(), Some(bundle))?;
        self.rename(&temp_data, &part_data)?;
        let table = bundle.index(&crcs);
        let temp_index = format!("{part_index}.tempstate{}", self.names.random::<u64>());
        seconds += self.put(&temp_index, &table, false)?;
        self.rename(&temp_index, &part_index)?;
        // The merge reads the part's index back.
        let merged = self.storage.read_all(&part_index, &mut self.small);
        let merged = merged.map_err(|e| {
            Error::on_object(
                "cannot read checkpoint file",
                self.storage.describe(&part_index),
                e,
            )
        })?;
        if let Some(meters) = self.meters {
            meters.checkpoint_read(merged.len as u64);
        }
        self.rename(&part_data, &data)?;
        seconds += self.put(&index, &table, true)?;
        let removed = self
            .storage
            .delete(&part_index)
            .and_then(|_| self.storage.remove_folder(&temp));
        removed.map_err(|e| {
            Error::on_object(
                "cannot remove checkpoint folder",
                self.storage.describe(&temp),
                e,
            )
        })?;
        let temp_state = format!("{state_file}.tmp{:032x}", self.names.random::<u128>());
        seconds += self.put(&temp_state, state.as_bytes(), true)?;
        self.rename(&temp_state, &state_file)?;
        Ok(seconds)
    }

    /// Loads `files` from the checkpoint folder `folder`: every byte, in [`CHUNK_BYTES`] requests
    /// (TensorFlow shards as the module's doc says, when `bundles` has them). A missing file, or
    /// one whose size is not the geometry's, is an error naming it. A signal stops it between
    /// requests.
    pub fn load(
        &mut self,
        folder: &str,
        files: &[ShardFile],
        bundles: Option<&[Bundle]>,
    ) -> Result<Moved> {
        let kernel_before = crate::system::thread_read_bytes();
        let mut moved = Moved::default();
        // Every byte read, the small files' too, for the kernel's count to be compared with.
        let mut read = 0;
        for (i, file) in files.iter().enumerate() {
            match bundles {
                Some(bundles) => {
                    read += self.load_bundle(folder, file, &bundles[i])?;
                    moved.files += 2;
                }
                None => {
                    read += self
                        .load_stream(&Self::key(folder, file), file.bytes, None)?
                        .0;
                    moved.files += 1;
                }
            }
            moved.bytes += file.bytes;
        }
        let kernel_count = kernel_before
            .zip(crate::system::thread_read_bytes())
            .map(|(before, after)| after.saturating_sub(before));
        let from_storage = self
            .storage
            .accounting()
            .bytes_from_storage(read, kernel_count);
        // TensorFlow's small files (a few hundred bytes a shard) are read too: what came from
        // the storage is counted against the payload, which it cannot exceed.
        moved.bytes_from_storage = match bundles {
            Some(_) => from_storage.map(|b| b.min(moved.bytes)),
            None => from_storage,
        };
        Ok(moved)
    }

    /// Reads the file `key` whole, checking first that it holds `bytes` bytes; with a `bundle`,
    /// takes the CRC32C of each of its tensors. Returns the bytes read and the CRCs.
    fn load_stream(
        &mut self,
        key: &str,
        bytes: u64,
        bundle: Option<&Bundle>,
    ) -> Result<(u64, Vec<u32>)> {
        let path = || self.storage.describe(key);
        let mut object = self.storage.open_sequential(key).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                missing(&path())
            } else {
                Error::on_object("cannot open checkpoint file", path(), e)
            }
        })?;
        if object.size() != bytes {
            return Err(Error::corrupt(
                "checkpoint file",
                path(),
                format!(
                    "it holds {} bytes, but the checkpoint's geometry gives it {bytes}: it was cut \
                     short, or saved with another configuration",
                    object.size(),
                ),
            ));
        }
        let mut sums = Checksums::new(bundle);
        let mut read = 0;
        loop {
            crate::interrupt::check()?;
            let n = object
                .read_next(&mut self.buffer, CHUNK_BYTES)
                .map_err(|e| Error::on_object("cannot load checkpoint file", path(), e))?;
            if n == 0 {
                break;
            }
            sums.sum(read, &self.buffer.as_slice()[..n]);
            if let Some(meters) = self.meters {
                meters.checkpoint_read(n as u64);
            }
            read += n as u64;
        }
        if read != bytes {
            return Err(Error::corrupt(
                "checkpoint file",
                path(),
                format!("it ended after {read} of its {bytes} bytes"),
            ));
        }
        Ok((read, sums.finish()))
    }

    /// Loads one shard as `tf.train.Checkpoint.restore` does: the index whole, the object graph
    /// (the data file's last tensor), then the data file in order; every tensor's CRC32C and
    /// place must be the index's. Returns the bytes read.
    fn load_bundle(&mut self, folder: &str, file: &ShardFile, bundle: &Bundle) -> Result<u64> {
        let prefix = format!("{folder}/{}{}", file.name, tf_bundle::SAVE_SUFFIX);
        let data = format!("{prefix}{}", tf_bundle::DATA_SUFFIX);
        let index = format!("{prefix}{}", tf_bundle::INDEX_SUFFIX);
        let unreadable = |key: &str, e: std::io::Error| {
            let path = self.storage.describe(key);
            if e.kind() == std::io::ErrorKind::NotFound {
                missing(&path)
            } else {
                Error::on_object("cannot load checkpoint file", path, e)
            }
        };
        let got = self
            .storage
            .read_all(&index, &mut self.small)
            .map_err(|e| unreadable(&index, e))?;
        let table = got.bytes(&self.small).to_vec();
        if table.len() as u64 != bundle.index_bytes() {
            return Err(Error::corrupt(
                "checkpoint file",
                self.storage.describe(&index),
                format!(
                    "it holds {} bytes, but the checkpoint's geometry gives it {}: it was cut \
                     short, or saved with another configuration",
                    table.len(),
                    bundle.index_bytes()
                ),
            ));
        }
        if let Some(meters) = self.meters {
            meters.checkpoint_read(table.len() as u64);
        }
        let graph = bundle.graph();
        let at = bundle.data_bytes() - graph.len() as u64;
        let got = self
            .storage
            .read_range(&data, at, graph.len(), &mut self.small)
            .map_err(|e| unreadable(&data, e))?;
        if got.bytes(&self.small) != graph {
            return Err(Error::corrupt(
                "checkpoint file",
                self.storage.describe(&data),
                "its object graph (its last bytes) is not the one this configuration saves"
                    .to_string(),
            ));
        }
        if let Some(meters) = self.meters {
            meters.checkpoint_read(graph.len() as u64);
        }
        let (read, crcs) = self.load_stream(&data, bundle.data_bytes(), Some(bundle))?;
        if bundle.index(&crcs) != table {
            return Err(Error::corrupt(
                "checkpoint file",
                self.storage.describe(&index),
                format!(
                    "its entries do not match the tensors of {} (their checksums, places or \
                     shapes)",
                    self.storage.describe(&data)
                ),
            ));
        }
        Ok(read + (table.len() + graph.len()) as u64)
    }

    /// Drops `files` of `folder` from the page cache (written back first), so that loading them
    /// reads the storage: each TensorFlow shard's index and data file when `bundles` has them.
    pub fn evict(&self, folder: &str, files: &[ShardFile], tensorflow: bool) -> Result<()> {
        for file in files {
            let keys = if tensorflow {
                let prefix = format!("{folder}/{}{}", file.name, tf_bundle::SAVE_SUFFIX);
                vec![
                    format!("{prefix}{}", tf_bundle::INDEX_SUFFIX),
                    format!("{prefix}{}", tf_bundle::DATA_SUFFIX),
                ]
            } else {
                vec![Self::key(folder, file)]
            };
            for key in keys {
                self.storage.evict(&key).map_err(|e| {
                    let path = self.storage.describe(&key);
                    if e.kind() == std::io::ErrorKind::NotFound {
                        missing(&path)
                    } else {
                        Error::on_object(
                            "cannot evict from the page cache checkpoint file",
                            path,
                            e,
                        )
                    }
                })?;
            }
        }
        Ok(())
    }
}

/// The CRC32C of each tensor of a bundle's data file, taken as the file's chunks pass in order;
/// on a save it also puts the fixed tensors' bytes (save counter, object graph) in their places.
struct Checksums<'b> {
    bundle: Option<&'b Bundle>,
    crcs: Vec<u32>,
    /// The first tensor not yet wholly passed.
    next: usize,
}

impl<'b> Checksums<'b> {
    fn new(bundle: Option<&'b Bundle>) -> Checksums<'b> {
        Checksums {
            bundle,
            crcs: vec![0; bundle.map_or(0, |b| b.tensors.len())],
            next: 0,
        }
    }

    /// The tensors overlapping the chunk of `len` bytes at `position`: each one's index, its
    /// bytes' range in the chunk and their offset in the tensor.
    fn spans(&mut self, position: u64, len: usize) -> Vec<(usize, std::ops::Range<usize>, usize)> {
        let Some(bundle) = self.bundle else {
            return Vec::new();
        };
        let end = position + len as u64;
        let mut spans = Vec::new();
        while let Some(tensor) = bundle.tensors.get(self.next) {
            let tensor_end = tensor.offset + tensor.size;
            let (low, high) = (tensor.offset.max(position), tensor_end.min(end));
            if low < high {
                spans.push((
                    self.next,
                    (low - position) as usize..(high - position) as usize,
                    (low - tensor.offset) as usize,
                ));
            }
            if tensor_end > end {
                break;
            }
            self.next += 1;
        }
        spans
    }

    /// Puts the fixed tensors' bytes into `chunk` (the file's bytes from `position`), then
    /// takes its tensors' CRCs.
    fn place_and_sum(&mut self, position: u64, chunk: &mut [u8]) {
        let Some(bundle) = self.bundle else {
            return;
        };
        for (i, range, at) in self.spans(position, chunk.len()) {
            let fixed: &[u8] = match bundle.tensors[i].content {
                Content::Payload => &[],
                Content::SaveCounter => &tf_bundle::SAVE_COUNTER_BYTES,
                Content::Graph => bundle.graph(),
            };
            if !fixed.is_empty() {
                chunk[range.clone()].copy_from_slice(&fixed[at..at + range.len()]);
            }
            self.crcs[i] = crc32c::crc32c_append(self.crcs[i], &chunk[range]);
        }
    }

    /// Takes the CRCs of the tensors in `chunk`, the file's bytes from `position`.
    fn sum(&mut self, position: u64, chunk: &[u8]) {
        for (i, range, _) in self.spans(position, chunk.len()) {
            self.crcs[i] = crc32c::crc32c_append(self.crcs[i], &chunk[range]);
        }
    }

    /// Every tensor's CRC as the index keeps it: the object graph's is over its length as 4
    /// bytes rather than its stored varint, so it comes from the plan (its bytes are compared
    /// whole instead).
    fn finish(mut self) -> Vec<u32> {
        if let Some(bundle) = self.bundle {
            for (crc, tensor) in self.crcs.iter_mut().zip(&bundle.tensors) {
                if tensor.content == Content::Graph {
                    *crc = bundle.fixed_crc(Content::Graph).unwrap_or(*crc);
                }
            }
        }
        self.crcs
    }
}

fn missing(path: &str) -> Error {
    Error::run(format!(
        "checkpoint file {path} is missing: the checkpoint was not saved whole, or was saved \
         with another configuration"
    ))
}
