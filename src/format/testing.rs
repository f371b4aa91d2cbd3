//! Scaffolding the format modules' tests share: encoding a file, and a scratch folder read both
//! through the page cache and with O_DIRECT (which wants aligned offsets, lengths and buffers, so
//! a reader that works one way can fail the other).

use std::io;
use std::path::PathBuf;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::{Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::storage::{
    scratch_dir, Accounting, EntryKind, IoBuffer, LocalFs, LocalOptions, Mapped, ObjectReader,
    ObjectWriter, OnRange, RangeRead, Storage, Window,
};

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

/// One request a reader made of the storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Request {
    /// `read_range`, or one range of a `read_ranges`: the key, the offset and length asked for,
    /// the bytes the storage moved.
    Range {
        key: String,
        offset: u64,
        len: usize,
        fetched: u64,
    },
    /// `read_all` of the key, and the bytes moved.
    Whole { key: String, fetched: u64 },
    /// `size` of the key (a metadata look-up).
    Size { key: String },
    /// `map_range` of the key.
    Map { key: String },
}

/// A storage that records the requests reads make of the storage it wraps, so that tests can
/// assert what a sample costs: how many requests, where and how large; and that can make files
/// seem cut short after they were opened.
pub(crate) struct Counting<'a> {
    inner: Inner<'a>,
    log: std::sync::Mutex<Vec<Request>>,
    /// The number of ranges of each `read_ranges` and its window (each range is also logged as
    /// a range read, as it is handed over).
    windows: std::sync::Mutex<Vec<(usize, Window)>>,
    /// Range reads end here, as if the file had been cut.
    cut: std::sync::atomic::AtomicU64,
}

enum Inner<'a> {
    Borrowed(&'a dyn Storage),
    /// A scratch folder of its own, removed with it.
    Owned(LocalFs),
}

impl<'a> Counting<'a> {
    pub(crate) fn new(inner: &'a dyn Storage) -> Counting<'a> {
        Counting::over(Inner::Borrowed(inner))
    }

    fn over(inner: Inner<'a>) -> Counting<'a> {
        Counting {
            inner,
            log: std::sync::Mutex::new(Vec::new()),
            windows: std::sync::Mutex::new(Vec::new()),
            cut: std::sync::atomic::AtomicU64::new(u64::MAX),
        }
    }

    /// The requests made since the last call.
    pub(crate) fn take(&self) -> Vec<Request> {
        std::mem::take(&mut *self.log.lock().unwrap())
    }

    /// The (offset, length asked) of the range reads made since the last call.
    pub(crate) fn take_ranges(&self) -> Vec<(u64, usize)> {
        self.take()
            .into_iter()
            .filter_map(|request| match request {
                Request::Range { offset, len, .. } => Some((offset, len)),
                _ => None,
            })
            .collect()
    }

    /// From now on range reads end at `len` bytes, as if every file had been cut there.
    pub(crate) fn cut_at(&self, len: u64) {
        self.cut.store(len, std::sync::atomic::Ordering::Relaxed);
    }

    fn inner(&self) -> &dyn Storage {
        match &self.inner {
            Inner::Borrowed(storage) => *storage,
            Inner::Owned(storage) => storage,
        }
    }

    /// How many bytes from `offset` are left before the cut ([`Counting::cut_at`]).
    fn left_after(&self, offset: u64) -> usize {
        let left = self
            .cut
            .load(std::sync::atomic::Ordering::Relaxed)
            .saturating_sub(offset);
        usize::try_from(left).unwrap_or(usize::MAX)
    }

    /// How many ranges each `read_ranges` since the last call asked for, and in what window.
    pub(crate) fn take_windows(&self) -> Vec<(usize, Window)> {
        std::mem::take(&mut *self.windows.lock().unwrap())
    }

    fn record(&self, request: Request) {
        self.log.lock().unwrap().push(request);
    }
}

impl Counting<'static> {
    /// Over a fresh scratch folder of its own, read through the page cache.
    pub(crate) fn in_scratch(name: &str) -> Counting<'static> {
        Counting::over(Inner::Owned(LocalFs::new(scratch_dir(name))))
    }
}

impl Drop for Counting<'_> {
    fn drop(&mut self) {
        if let Inner::Owned(storage) = &self.inner {
            if let Some(root) = storage.local_root() {
                let _ = std::fs::remove_dir_all(root);
            }
        }
    }
}

impl Storage for Counting<'_> {
    fn describe(&self, key: &str) -> String {
        self.inner().describe(key)
    }

    fn read_all(&self, key: &str, buf: &mut IoBuffer) -> io::Result<RangeRead> {
        let read = self.inner().read_all(key, buf)?;
        self.record(Request::Whole {
            key: key.to_string(),
            fetched: read.fetched,
        });
        Ok(read)
    }

    fn read_range(
        &self,
        key: &str,
        offset: u64,
        len: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        let cut = len.min(self.left_after(offset));
        let read = self.inner().read_range(key, offset, cut, buf)?;
        self.record(Request::Range {
            key: key.to_string(),
            offset,
            len,
            fetched: read.fetched,
        });
        Ok(read)
    }

    fn read_ranges(
        &self,
        key: &str,
        ranges: &[(u64, usize)],
        window: Window,
        buf: &mut IoBuffer,
        each: &mut OnRange<'_>,
    ) -> io::Result<()> {
        let cut: Vec<(u64, usize)> = ranges
            .iter()
            .map(|&(offset, len)| (offset, len.min(self.left_after(offset))))
            .collect();
        self.windows.lock().unwrap().push((ranges.len(), window));
        self.inner()
            .read_ranges(key, &cut, window, buf, &mut |i, bytes, fetched| {
                self.record(Request::Range {
                    key: key.to_string(),
                    offset: ranges[i].0,
                    len: ranges[i].1,
                    fetched,
                });
                each(i, bytes, fetched)
            })
    }

    fn map_range(&self, key: &str, offset: u64, len: usize) -> io::Result<Mapped> {
        self.record(Request::Map {
            key: key.to_string(),
        });
        self.inner().map_range(key, offset, len)
    }

    fn map_whole(&self, key: &str) -> io::Result<Mapped> {
        self.record(Request::Map {
            key: key.to_string(),
        });
        self.inner().map_whole(key)
    }

    fn hold(&self, key: &str) {
        self.inner().hold(key)
    }

    fn release(&self, key: &str) -> io::Result<()> {
        self.inner().release(key)
    }

    fn let_go(&self, key: &str) {
        self.inner().let_go(key)
    }

    fn release_all(&self) {
        self.inner().release_all()
    }

    fn size(&self, key: &str) -> io::Result<u64> {
        self.record(Request::Size {
            key: key.to_string(),
        });
        self.inner().size(key)
    }

    fn create(&self, key: &str) -> io::Result<Box<dyn ObjectWriter + '_>> {
        self.inner().create(key)
    }

    fn open_sequential(&self, key: &str) -> io::Result<Box<dyn ObjectReader + '_>> {
        self.inner().open_sequential(key)
    }

    fn evict(&self, key: &str) -> io::Result<()> {
        self.inner().evict(key)
    }

    fn make_folder(&self, key: &str) -> io::Result<()> {
        self.inner().make_folder(key)
    }

    fn exists(&self, key: &str) -> io::Result<bool> {
        self.inner().exists(key)
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        self.inner().delete(key)
    }

    fn list_dir(&self, prefix: &str, each: &mut dyn FnMut(&str, EntryKind)) -> io::Result<()> {
        self.inner().list_dir(prefix, each)
    }

    fn accounting(&self) -> Accounting {
        self.inner().accounting()
    }

    fn sync(&self) -> io::Result<()> {
        self.inner().sync()
    }
}
