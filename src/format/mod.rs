//! File formats: each one writes files in the real layout and reads a sample with the access
//! pattern of the framework's loader for that format. One file per format behind [`FileFormat`].

mod crc32c;
mod csv;
mod hdf5;
mod image;
mod indexed_binary;
mod jpeg;
mod npy;
mod npz;
mod parquet;
mod png;
mod synthetic;
#[cfg(test)]
mod testing;
mod tfrecord;
mod zip;

use rand::rngs::SmallRng;

use crate::config::{Compression, Config, Format};
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::{IoBuffer, RangeRead, Storage};

pub use self::png::Png;
pub use csv::Csv;
pub use indexed_binary::IndexedBinary;
pub use jpeg::Jpeg;
pub use npy::Npy;
pub use npz::Npz;
pub use synthetic::Synthetic;
pub use tfrecord::TfRecord;

/// Reusable per-thread memory for reads, so steady-state reading allocates nothing; aligned so
/// that O_DIRECT can read into it.
#[derive(Debug, Default)]
pub struct ReadBuffer {
    pub bytes: IoBuffer,
}

/// What reading one sample cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SampleRead {
    /// Where in the file the sample's data starts.
    pub offset: u64,
    /// Bytes the reader took from storage for this sample: data, and the metadata it had to
    /// read to find it; 0 when the framework serves it from what an earlier read brought in.
    pub bytes: u64,
}

/// One encoded file, plus the side files some formats keep beside it (TFRecord's index, indexed
/// binary's offset and size arrays). The buffers are reused from file to file.
#[derive(Debug, Default)]
pub struct Encoded {
    pub data: Vec<u8>,
    side: Vec<SideFile>,
    side_used: usize,
}

#[derive(Debug, Default)]
pub struct SideFile {
    /// Storage key, relative to the data folder.
    pub key: String,
    pub bytes: Vec<u8>,
}

impl Encoded {
    /// Empties the file and drops its side files (keeping their memory).
    pub fn clear(&mut self) {
        self.data.clear();
        self.side_used = 0;
    }

    /// A new, empty side file at `key`, to write into.
    pub fn side_file(&mut self, key: &str) -> &mut Vec<u8> {
        if self.side_used == self.side.len() {
            self.side.push(SideFile::default());
        }
        let file = &mut self.side[self.side_used];
        self.side_used += 1;
        file.key.clear();
        file.key.push_str(key);
        file.bytes.clear();
        &mut file.bytes
    }

    pub fn side_files(&self) -> &[SideFile] {
        &self.side[..self.side_used]
    }

    /// Bytes of the file and its side files.
    pub fn total_bytes(&self) -> u64 {
        (self.data.len()
            + self
                .side_files()
                .iter()
                .map(|f| f.bytes.len())
                .sum::<usize>()) as u64
    }
}

pub trait FileFormat: Send + Sync {
    /// Encodes the file at `key` holding `shape` (random contents from `rng`) into `out`.
    fn encode(
        &self,
        key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()>;

    /// A reader for one reader thread and one epoch: what it remembers (an open stream's
    /// position, a row group in hand) lives no longer than that.
    fn reader(&self) -> Box<dyn SampleReader + '_>;

    /// Whether reading touches storage at all (`synthetic` does not: no dataset is needed).
    fn reads_storage(&self) -> bool {
        true
    }

    /// Calls `each` with the key of every side file [`FileFormat::encode`] writes beside `key`.
    fn side_files(&self, _key: &str, _each: &mut dyn FnMut(&str)) {}
}

pub trait SampleReader: Send {
    /// Reads sample `sample` of the file at `key` as the framework's loader would; the data must
    /// be fetched and checked, never assumed.
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead>;
}

/// The reader and writer of the configured format. With `verify`, readers also check the
/// checksums the format carries (the CRC-32 of npz members), as numpy does; without it they check
/// the structure and sizes only, so the CPU never stands between the storage and the measurement.
pub fn for_config(config: &Config, verify: bool) -> Result<Box<dyn FileFormat>> {
    let dataset = &config.dataset;
    if dataset.format == Format::MmapIndexedBinary && config.reader.odirect {
        return Err(Error::usage(
            "workload.reader.odirect = True cannot apply to dataset.format = mmap_indexed_binary: \
             a memory-mapped file is read through the page cache by definition; use \
             ++workload.reader.page_cache=evict_after_read to make every epoch read from storage",
        ));
    }
    // Formats that compress decide for themselves; the others have no compressed form.
    let compresses = matches!(dataset.format, Format::Npz | Format::Hdf5);
    if !compresses && dataset.compression != Compression::None {
        return Err(unsupported_compression(
            dataset.format,
            dataset.compression,
            "none",
        ));
    }
    match dataset.format {
        Format::Npy => Ok(Box::new(Npy)),
        Format::Npz => Ok(Box::new(Npz {
            verify,
            compressed: match dataset.compression {
                Compression::None => false,
                Compression::Zip => true,
                other => return Err(unsupported_compression(Format::Npz, other, "none, zip")),
            },
        })),
        Format::IndexedBinary => Ok(Box::new(IndexedBinary { mapped: false })),
        Format::MmapIndexedBinary => Ok(Box::new(IndexedBinary { mapped: true })),
        Format::Synthetic => Ok(Box::new(Synthetic)),
        Format::Tfrecord => Ok(Box::new(TfRecord { verify })),
        Format::Csv => Ok(Box::new(Csv { verify })),
        Format::Png => Ok(Box::new(Png {
            decode: config.reader.decode_images,
        })),
        Format::Jpeg => Ok(Box::new(Jpeg {
            decode: config.reader.decode_images,
        })),
        Format::Parquet => Ok(Box::new(parquet::Parquet::new(config, verify)?)),
        Format::Hdf5 => Ok(Box::new(hdf5::Hdf5::for_config(config, verify)?)),
    }
}

/// Appends `len` random bytes to `out`. They are made in a small block that stays in the CPU's
/// cache and copied on, so the large buffer is written once: zero-filling it first and then
/// overwriting it with random bytes would write it twice (measured: the difference between 79% and
/// over 90% of plain-write speed on tmpfs).
pub(crate) fn append_random(out: &mut Vec<u8>, len: usize, rng: &mut SmallRng) {
    use rand::RngCore;
    const BLOCK: usize = 64 * 1024;
    let mut block = [0u8; BLOCK];
    out.reserve(len);
    let mut left = len;
    while left > 0 {
        let n = left.min(BLOCK);
        rng.fill_bytes(&mut block[..n]);
        out.extend_from_slice(&block[..n]);
        left -= n;
    }
}

/// A `dataset.compression` the format cannot apply.
fn unsupported_compression(format: Format, compression: Compression, valid: &str) -> Error {
    Error::usage(format!(
        "workload.dataset.compression = {compression} does not apply to dataset.format = \
         {format}; valid values for {format} are {valid}"
    ))
}

/// An error about the contents of a data file, naming it.
pub(crate) fn corrupt(storage: &dyn Storage, key: &str, what: impl std::fmt::Display) -> Error {
    Error::run(format!(
        "corrupt data file {}: {what}",
        storage.describe(key)
    ))
}

fn cannot_read(storage: &dyn Storage, key: &str, e: std::io::Error) -> Error {
    Error::run(format!(
        "cannot read data file {}: {e}",
        storage.describe(key)
    ))
}

/// Reads a whole object, naming the file in the error.
pub(crate) fn read_whole(storage: &dyn Storage, key: &str, buf: &mut ReadBuffer) -> Result<usize> {
    storage
        .read_all(key, &mut buf.bytes)
        .map_err(|e| cannot_read(storage, key, e))
}

/// Reads `len` bytes from `offset`, naming the file in the error; fewer bytes than asked (the
/// file ends first) is a corrupt file.
pub(crate) fn read_exact_range(
    storage: &dyn Storage,
    key: &str,
    offset: u64,
    len: usize,
    buf: &mut ReadBuffer,
) -> Result<RangeRead> {
    let read = storage
        .read_range(key, offset, len, &mut buf.bytes)
        .map_err(|e| cannot_read(storage, key, e))?;
    if read.len < len {
        return Err(corrupt(
            storage,
            key,
            format!(
                "truncated: {len} bytes are needed at offset {offset}, the file ends {} bytes in",
                read.len
            ),
        ));
    }
    Ok(read)
}
