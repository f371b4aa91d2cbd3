//! Indexed binary, as DLIO's indexed_binary generator writes it for the DLRM and Megatron
//! workloads: the data file holds the samples back to back, and two side files beside it hold one
//! little-endian u64 per sample: `<file>.off.idx` (where the sample starts) and `<file>.sz.idx` (its
//! length).
//!
//! Two readers share the layout:
//! - `indexed_binary`: the sample's index entries, then one read of exactly its byte range (DLIO's
//!   seek + readinto);
//! - `mmap_indexed_binary`: Megatron's `MMapIndexedDataset` maps the data file and the loader reads
//!   the sample through the mapping. DLIO's Python reader maps it and never touches the pages, so it
//!   reads nothing; here every byte of the sample is really read through the mapping, so storage sees
//!   the page faults a real training job causes.
//!
//! A reader thread reads a file's two index files whole, one request each, when it first needs
//! them (up to 8 MiB each; larger ones a 4 KiB page at a time), and keeps them for the epoch (up
//! to 32 MiB of each kind per thread), as DLIO's reader loads the indexes of its files when its
//! epoch starts: every sample then costs one data read, and memory does not grow with the
//! dataset.

use std::collections::HashMap;

use rand::rngs::SmallRng;

use super::{read_exact_range, Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::{IoBuffer, Storage};

const OFFSETS: &str = crate::dataset::INDEX_SUFFIXES[0];
const SIZES: &str = crate::dataset::INDEX_SUFFIXES[1];
const ENTRY: u64 = 8;
/// The unit in which index entries are fetched: a page holds 512 of them.
const INDEX_PAGE: u64 = IoBuffer::ALIGNMENT as u64;

#[derive(Clone, Copy)]
pub struct IndexedBinary {
    /// Read through a memory mapping (Megatron) rather than with read calls.
    pub mapped: bool,
    /// Entries of each index file (`dataset.num_samples_per_file`): what DLIO's reader reads of
    /// it, so that the reader needs no look-up of the index's size.
    pub samples_per_file: u64,
}

impl FileFormat for IndexedBinary {
    fn encode(
        &self,
        key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        out.clear();
        let samples = *shape.dims.last().unwrap_or(&1);
        let sample_bytes = shape.bytes() / samples.max(1);
        out.random(shape.bytes(), rng)?;
        let mut side = |suffix: &str, value: &dyn Fn(u64) -> u64| {
            let bytes = out.side_file(&format!("{key}{suffix}"));
            bytes.reserve(samples as usize * ENTRY as usize);
            for i in 0..samples {
                bytes.extend_from_slice(&value(i).to_le_bytes());
            }
        };
        side(OFFSETS, &|i| i * sample_bytes);
        side(SIZES, &|_| sample_bytes);
        Ok(())
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(IndexedBinaryReader {
            mapped: self.mapped,
            offsets: Indexes::new(OFFSETS, self.samples_per_file),
            sizes: Indexes::new(SIZES, self.samples_per_file),
        })
    }

    /// DLIO's mapped reader maps every file once, when its epoch starts, whatever the read type.
    fn opened_per_sample_on_demand(&self) -> bool {
        !self.mapped
    }

    fn side_files(&self, key: &str, each: &mut dyn FnMut(&str)) {
        each(&format!("{key}{OFFSETS}"));
        each(&format!("{key}{SIZES}"));
    }
}

/// An index no larger than this is read whole when a reader thread first needs one of its
/// entries, as DLIO's reader loads a file's index when it opens it; a larger one (Megatron's
/// single file of 277 M samples has 2.2 GB of each) is read a page at a time, so memory stays
/// bounded.
const WHOLE_INDEX_BYTES: u64 = 8 << 20;

/// Whole indexes a reader thread keeps, per kind (offsets, sizes): DLIO's reader loads the
/// indexes of all the files it will read when its epoch starts and keeps them all; this keeps
/// those it has read this epoch up to this many bytes, then starts over (re-reads are counted).
const KEPT_INDEX_BYTES: u64 = 32 << 20;

/// What a reader thread holds of one kind of index file: the whole indexes of the files it read
/// this epoch, or the page in use of an index too large to read whole.
struct Indexes {
    suffix: &'static str,
    /// Entries each index holds (DLIO reads that many).
    index_entries: u64,
    /// Whole indexes by index key, and the bytes they hold.
    whole: HashMap<String, Vec<u64>>,
    whole_bytes: u64,
    /// The index key, first entry and entries of the page in hand (large indexes).
    page_key: String,
    first_entry: u64,
    page: Vec<u64>,
    /// Scratch for the index key of the sample in hand.
    key: String,
}

impl Indexes {
    fn new(suffix: &'static str, index_entries: u64) -> Indexes {
        Indexes {
            suffix,
            index_entries,
            whole: HashMap::new(),
            whole_bytes: 0,
            page_key: String::new(),
            first_entry: 0,
            page: Vec::new(),
            key: String::new(),
        }
    }

    /// Entry `entry` of the index beside `key`; reads the index (whole, or the entry's page)
    /// unless the entry is in hand, and returns the bytes that took.
    fn entry(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        entry: u64,
        buf: &mut ReadBuffer,
    ) -> Result<(u64, u64)> {
        self.key.clear();
        self.key.push_str(key);
        self.key.push_str(self.suffix);
        let index_bytes = self.index_entries.saturating_mul(ENTRY);
        let whole = index_bytes <= WHOLE_INDEX_BYTES;
        let (found, fetched) = if whole {
            match self.whole.get(self.key.as_str()) {
                Some(entries) => (entries.get(entry as usize).copied(), 0),
                None => {
                    let (entries, fetched) = self.read(storage, 0, index_bytes, buf)?;
                    let found = entries.get(entry as usize).copied();
                    if self.whole_bytes + index_bytes > KEPT_INDEX_BYTES {
                        self.whole.clear();
                        self.whole_bytes = 0;
                    }
                    self.whole_bytes += index_bytes;
                    self.whole.insert(self.key.clone(), entries);
                    (found, fetched)
                }
            }
        } else {
            let mut fetched = 0;
            let in_page = self.page_key == self.key
                && entry >= self.first_entry
                && entry - self.first_entry < self.page.len() as u64;
            if !in_page {
                let page_entries = INDEX_PAGE / ENTRY;
                let first_entry = entry / page_entries * page_entries;
                let (entries, cost) = self.read(storage, first_entry * ENTRY, INDEX_PAGE, buf)?;
                fetched = cost;
                self.page = entries;
                self.first_entry = first_entry;
                self.page_key.clone_from(&self.key);
            }
            let found = entry
                .checked_sub(self.first_entry)
                .and_then(|e| self.page.get(e as usize).copied());
            (found, fetched)
        };
        match found {
            Some(value) => Ok((value, fetched)),
            None => {
                // Forget what was read: the next read must not trust a short index.
                self.whole.remove(self.key.as_str());
                self.page_key.clear();
                Err(Error::corrupt(
                    "index file",
                    storage.describe(&self.key),
                    format!("it has no entry for sample {entry} (cut short?)"),
                ))
            }
        }
    }

    /// Reads `len` bytes of the index in hand from `offset`, as entries; and the bytes fetched.
    fn read(
        &self,
        storage: &dyn Storage,
        offset: u64,
        len: u64,
        buf: &mut ReadBuffer,
    ) -> Result<(Vec<u64>, u64)> {
        let read = storage
            .read_range(&self.key, offset, len as usize, &mut buf.bytes)
            .map_err(|e| {
                Error::on_object("cannot read index file", storage.describe(&self.key), e)
            })?;
        let entries = read
            .bytes(&buf.bytes)
            .chunks_exact(ENTRY as usize)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8-byte chunks")))
            .collect();
        Ok((entries, read.fetched))
    }
}

struct IndexedBinaryReader {
    mapped: bool,
    offsets: Indexes,
    sizes: Indexes,
}

impl SampleReader for IndexedBinaryReader {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let (offset, offset_cost) = self.offsets.entry(storage, key, sample, buf)?;
        let (size, size_cost) = self.sizes.entry(storage, key, sample, buf)?;
        let size = usize::try_from(size).map_err(|_| {
            Error::corrupt(
                "index file",
                storage.describe(&format!("{key}{SIZES}")),
                format!("sample {sample}: size {size} is not addressable"),
            )
        })?;
        let data_cost = if self.mapped {
            touch_mapped(storage, key, sample, offset, size)?
        } else {
            read_exact_range(storage, key, offset, size, buf)
                .map_err(|e| at_sample(e, storage, key, sample, offset, size))?
                .fetched
        };
        Ok(SampleRead {
            offset,
            bytes: offset_cost + size_cost + data_cost,
        })
    }
}

/// An error reading sample `sample`, said of the sample. A range past the end of the data file is
/// the index's fault as much as the file's: both are named.
fn at_sample(
    error: Error,
    storage: &dyn Storage,
    key: &str,
    sample: u64,
    offset: u64,
    size: usize,
) -> Error {
    match error {
        Error::Corrupt { .. } | Error::Io { .. }
            if error.io_error().is_none_or(|e| e.kind() == std::io::ErrorKind::UnexpectedEof) =>
        {
            Error::corrupt(
                "data file or index",
                storage.describe(key),
                format!(
                    "its index ({OFFSETS}, {SIZES}) puts sample {sample} at offset {offset}, {size} \
                     bytes, past the end of the file: the file is cut short, or its index is wrong"
                ),
            )
        }
        Error::Io {
            action,
            object,
            source,
        } => Error::Io {
            action,
            object: format!("{object} (sample {sample})"),
            source,
        },
        other => other,
    }
}

/// Maps the sample and reads every byte of it; returns the bytes read. The page faults move whole
/// pages, but a page shared with the next sample is faulted once: the sample's bytes are what the
/// reader asked for, as a read call's length is.
fn touch_mapped(
    storage: &dyn Storage,
    key: &str,
    sample: u64,
    offset: u64,
    size: usize,
) -> Result<u64> {
    let mapped = storage.map_range(key, offset, size).map_err(|e| {
        let mapping = Error::on_object("cannot map data file", storage.describe(key), e);
        at_sample(mapping, storage, key, sample, offset, size)
    })?;
    std::hint::black_box(fold(mapped.as_slice()));
    mapped
        .finish()
        .map_err(|e| Error::on_object("cannot release the mapping of", storage.describe(key), e))?;
    Ok(size as u64)
}

/// Reads every byte: an XOR of the 8-byte words, which the compiler cannot skip because the result
/// is observed.
fn fold(bytes: &[u8]) -> u64 {
    let mut words = bytes.chunks_exact(8);
    let mut acc = words.by_ref().fold(0u64, |acc, w| {
        acc ^ u64::from_le_bytes(w.try_into().expect("8-byte chunks"))
    });
    for &b in words.remainder() {
        acc = acc.rotate_left(8) ^ b as u64;
    }
    acc
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::config::ElementType;
    use crate::storage::{scratch_dir, LocalFs, LocalOptions};

    fn write(storage: &LocalFs, key: &str, shape: &FileShape) -> Encoded<'static> {
        let mut encoded = Encoded::default();
        IndexedBinary {
            mapped: false,
            samples_per_file: *shape.dims.last().unwrap(),
        }
        .encode(key, shape, &mut SmallRng::seed_from_u64(1), &mut encoded)
        .unwrap();
        storage.put(key, &encoded.data).unwrap();
        for side in encoded.side_files() {
            storage.put(&side.key, &side.bytes).unwrap();
        }
        encoded
    }

    #[test]
    fn layout_is_dlio_s_and_a_file_s_indexes_are_read_once() {
        let dir = scratch_dir("indexed-binary");
        let storage = LocalFs::new(&dir);
        let shape = FileShape {
            dims: vec![10, 30, 1000],
            element: ElementType::Uint8,
        };
        let encoded = write(&storage, "train/a.indexed_binary", &shape);
        write(&storage, "train/b.indexed_binary", &shape);
        assert_eq!(encoded.data.len(), 300_000);
        let sides = encoded.side_files();
        assert_eq!(sides[0].key, "train/a.indexed_binary.off.idx");
        assert_eq!(sides[1].key, "train/a.indexed_binary.sz.idx");
        assert_eq!(&sides[0].bytes[8 * 7..8 * 8], &2100u64.to_le_bytes());
        assert_eq!(&sides[1].bytes[8 * 7..8 * 8], &300u64.to_le_bytes());
        for mapped in [false, true] {
            let format = IndexedBinary {
                mapped,
                samples_per_file: 1000,
            };
            let mut reader = format.reader();
            let mut buf = ReadBuffer::default();
            let mut costs = Vec::new();
            for sample in [0, 1, 511, 512, 999] {
                let read = reader
                    .read_sample(&storage, "train/a.indexed_binary", sample, &mut buf)
                    .unwrap();
                assert_eq!(read.offset, sample * 300);
                costs.push(read.bytes);
            }
            const SAMPLE: u64 = 300;
            // First sample: both indexes whole (1000 entries of 8 bytes each), and the data;
            // every later sample of the file: its data alone.
            assert_eq!(
                costs,
                [2 * 8000 + SAMPLE, SAMPLE, SAMPLE, SAMPLE, SAMPLE],
                "mapped: {mapped}"
            );
            // Samples drawn from two files in turn: each file's indexes are read once, the
            // first time the thread meets the file, and kept for the epoch.
            costs.clear();
            for (key, sample) in [("train/b.indexed_binary", 3), ("train/a.indexed_binary", 7)]
                .into_iter()
                .cycle()
                .take(6)
            {
                reader.put_down();
                costs.push(
                    reader
                        .read_sample(&storage, key, sample, &mut buf)
                        .unwrap()
                        .bytes,
                );
            }
            assert_eq!(
                costs,
                [2 * 8000 + SAMPLE, SAMPLE, SAMPLE, SAMPLE, SAMPLE, SAMPLE]
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn an_index_larger_than_the_bound_is_read_a_page_at_a_time() {
        let dir = scratch_dir("indexed-binary-large");
        let storage = LocalFs::new(&dir);
        // One entry more than an 8 MiB index holds: samples of one byte.
        let samples = WHOLE_INDEX_BYTES / ENTRY + 1;
        let shape = FileShape {
            dims: vec![1, samples],
            element: ElementType::Uint8,
        };
        write(&storage, "big.indexed_binary", &shape);
        let format = IndexedBinary {
            mapped: false,
            samples_per_file: samples,
        };
        let mut reader = format.reader();
        let mut buf = ReadBuffer::default();
        let mut costs = Vec::new();
        for sample in [0, 511, 512, samples - 1] {
            let read = reader
                .read_sample(&storage, "big.indexed_binary", sample, &mut buf)
                .unwrap();
            assert_eq!(read.offset, sample);
            costs.push(read.bytes);
        }
        // A page (512 entries) of each index, then the same pages, then the next; the last
        // page holds the one entry past the bound.
        assert_eq!(costs, [2 * 4096 + 1, 1, 2 * 4096 + 1, 2 * 8 + 1]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn reads_are_checked_against_the_files() {
        let dir = scratch_dir("indexed-binary-bad");
        let storage = LocalFs::new(&dir);
        let shape = FileShape {
            dims: vec![4, 4, 8],
            element: ElementType::Uint8,
        };
        let encoded = write(&storage, "t.indexed_binary", &shape);
        let direct = LocalFs::with_options(
            &dir,
            LocalOptions {
                odirect: true,
                evict_after_read: false,
            },
        );
        let mut buf = ReadBuffer::default();
        for mapped in [false, true] {
            let format = IndexedBinary {
                mapped,
                samples_per_file: 8,
            };
            let read = format
                .reader()
                .read_sample(&direct, "t.indexed_binary", 3, &mut buf)
                .unwrap();
            assert_eq!(read.offset, 48);
            // Out of the index: an error naming the index file.
            let error = format
                .reader()
                .read_sample(&storage, "t.indexed_binary", 8, &mut buf)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains("t.indexed_binary.off.idx") && error.contains("sample 8"),
                "{error}"
            );
        }
        // A data file cut short: every cut names the file and the sample, mapped or not.
        for cut in 0..encoded.data.len() {
            storage
                .put("t.indexed_binary", &encoded.data[..cut])
                .unwrap();
            let last = 7;
            for mapped in [false, true] {
                let error = IndexedBinary {
                    mapped,
                    samples_per_file: 8,
                }
                .reader()
                .read_sample(&storage, "t.indexed_binary", last, &mut buf)
                .unwrap_err()
                .to_string();
                assert!(
                    error.contains("t.indexed_binary") && error.contains("sample 7"),
                    "{error}"
                );
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
