//! Scaffolding the format modules' tests share: encoding a file, and a scratch folder read both
//! through the page cache and with O_DIRECT (which wants aligned offsets, lengths and buffers, so
//! a reader that works one way can fail the other).

use std::path::PathBuf;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::{Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::storage::{scratch_dir, LocalFs, LocalOptions, Storage};

/// The file `format` writes at `key` for `shape`, its noise drawn from `seed`.
pub(crate) fn encode(
    format: &dyn FileFormat,
    key: &str,
    shape: &FileShape,
    seed: u64,
) -> Encoded<'static> {
    let mut out = Encoded::default();
    format
        .encode(key, shape, &mut SmallRng::seed_from_u64(seed), &mut out)
        .unwrap();
    out
}

/// A fresh scratch folder, seen through the page cache (`buffered`) and with O_DIRECT (`direct`).
pub(crate) struct Scratch {
    dir: PathBuf,
    pub buffered: LocalFs,
    pub direct: LocalFs,
}

impl Scratch {
    pub(crate) fn new(name: &str) -> Scratch {
        let dir = scratch_dir(name);
        Scratch {
            buffered: LocalFs::new(&dir),
            direct: LocalFs::with_options(
                &dir,
                LocalOptions {
                    odirect: true,
                    evict_after_read: false,
                },
            ),
            dir,
        }
    }

    /// Both views of the folder, buffered first, each with the unit it moves whole files in:
    /// a byte, or (O_DIRECT) a 4 KiB block, as every block device and page cache accepts.
    pub(crate) fn both(&self) -> [(&LocalFs, u64); 2] {
        [(&self.buffered, 1), (&self.direct, 4096)]
    }

    /// Removes the folder; a failed test leaves it behind to look at.
    pub(crate) fn remove(self) {
        std::fs::remove_dir_all(self.dir).unwrap();
    }
}

/// Asserts that reading sample `sample` of `key` takes the whole of `file` into `buf`, the
/// sample's data starting at offset 0 (the formats whose loaders read whole files), and costs the
/// file's bytes rounded up to the storage's `unit` (see [`Scratch::both`]).
pub(crate) fn assert_reads_whole_file(
    reader: &mut dyn SampleReader,
    (storage, unit): (&LocalFs, u64),
    key: &str,
    sample: u64,
    file: &[u8],
    buf: &mut ReadBuffer,
) {
    let read = reader.read_sample(storage, key, sample, buf).unwrap();
    assert_eq!(
        read,
        SampleRead {
            offset: 0,
            bytes: (file.len() as u64).next_multiple_of(unit)
        },
        "{} sample {sample}",
        storage.describe(key)
    );
    assert_eq!(buf.bytes.as_slice(), file, "{}", storage.describe(key));
}
