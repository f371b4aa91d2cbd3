//! File formats: each one writes files in the real layout and reads a sample with the access
//! pattern of the framework's loader for that format. One file per format behind [`FileFormat`].

mod hdf5;
mod npy;
mod npz;
mod zip;

use rand::rngs::SmallRng;

use crate::config::{Config, Format};
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::{IoBuffer, RangeRead, Storage};

pub use npy::Npy;
pub use npz::Npz;

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
    match dataset.format {
        Format::Npy => Ok(Box::new(Npy)),
        Format::Npz => Ok(Box::new(Npz { verify })),
        Format::Hdf5 => Ok(Box::new(hdf5::Hdf5::for_config(config, verify)?)),
        other => Err(Error::usage(format!(
            "workload.dataset.format = {other} is not supported yet; supported formats are {}",
            Format::supported_list()
        ))),
    }
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
