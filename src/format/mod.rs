//! File formats: each one writes files in the real layout and reads a sample with the access
//! pattern of the framework's loader for that format. One file per format behind [`FileFormat`].

mod npy;
mod npz;
mod zip;

use rand::rngs::SmallRng;

use crate::config::Format;
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::{IoBuffer, Storage};

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
    /// Where in the file the read started.
    pub offset: u64,
    /// Bytes the reader asked the storage for.
    pub bytes: u64,
}

pub trait FileFormat: Send + Sync {
    /// Encodes one file holding `shape` (random contents from `rng`) into `out`.
    fn encode(&self, shape: &FileShape, rng: &mut SmallRng, out: &mut Vec<u8>) -> Result<()>;

    /// Reads sample `sample` of the file at `key` as the framework's loader would; the data must be
    /// fetched and checked, never assumed.
    fn read_sample(
        &self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead>;
}

/// The reader and writer of `format`. With `verify`, readers also check the checksums the format
/// carries (the CRC-32 of npz members), as numpy does; without it they check the structure and
/// sizes only, so the CPU never stands between the storage and the measurement.
pub fn for_format(format: Format, verify: bool) -> Result<Box<dyn FileFormat>> {
    match format {
        Format::Npy => Ok(Box::new(Npy)),
        Format::Npz => Ok(Box::new(Npz { verify })),
        other => Err(Error::usage(format!("workload.dataset.format = {other} is not supported yet; supported formats are npz, npy"))),
    }
}

/// An error about the contents of a data file, naming it.
pub(crate) fn corrupt(storage: &dyn Storage, key: &str, what: impl std::fmt::Display) -> Error {
    Error::run(format!(
        "corrupt data file {}: {what}",
        storage.describe(key)
    ))
}

/// Reads a whole object, naming the file in the error.
pub(crate) fn read_whole(storage: &dyn Storage, key: &str, buf: &mut ReadBuffer) -> Result<usize> {
    storage.read_all(key, &mut buf.bytes).map_err(|e| {
        Error::run(format!(
            "cannot read data file {}: {e}",
            storage.describe(key)
        ))
    })
}
