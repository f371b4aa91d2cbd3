//! Bytes in and out of the storage under test. One trait; one file per backend; one conformance
//! suite every backend passes (`conformance.rs`); one place that picks the backend a
//! configuration names ([`for_data`], [`for_checkpoints`]). Readers and writers of formats never
//! know which backend they use. Keys are `/`-separated paths relative to the backend's root (for
//! local files: the data folder); what only a local folder has (a lock, free space) is asked
//! through [`Storage::local_root`].

#[cfg(feature = "azure")]
mod azure;
mod buffer;
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
mod checked;
#[cfg(test)]
mod conformance;
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
mod download;
mod fs_type;
#[cfg(feature = "gcs")]
mod gcs;
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
mod http;
pub mod lease;
mod local;
mod mapped;
#[cfg(any(feature = "s3", feature = "azure"))]
mod parts;
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
mod ranged;
pub mod requests;
#[cfg(feature = "s3")]
mod s3;
mod throttle;
mod uring;

use std::io;
use std::ops::ControlFlow;

#[cfg(feature = "azure")]
pub use azure::AzureStorage;
pub use buffer::IoBuffer;
#[cfg(feature = "gcs")]
pub use gcs::GcsStorage;
pub use local::{LocalFs, LocalOptions};
pub use mapped::Mapped;
pub use requests::{RequestCounts, RequestKind, WriteChecks};
#[cfg(feature = "s3")]
pub use s3::S3Storage;
pub use throttle::{Link, Throttled};

/// The storage a configuration's dataset lives in: the data folder, read with O_DIRECT or with
/// pages evicted as the configuration asks (`storage.storage_type: local_fs`, `parallel_fs`,
/// `direct_fs`), or a bucket (`s3`) or container (`azure`), for about `concurrency` threads reading
/// at once.
pub fn for_data(
    config: &crate::config::Config,
    concurrency: usize,
) -> crate::error::Result<Box<dyn Storage>> {
    behind_throttle(config, data_storage(config, concurrency)?)
}

/// The storage behind `storage.throttle`'s link, when the configuration has one.
fn behind_throttle(
    config: &crate::config::Config,
    storage: Box<dyn Storage>,
) -> crate::error::Result<Box<dyn Storage>> {
    Ok(match config.storage.throttle {
        None => storage,
        Some(throttle) => Box::new(Throttled::new(
            storage,
            Link {
                bytes_per_second: throttle.bytes_per_second,
                latency: std::time::Duration::from_secs_f64(throttle.latency_seconds),
            },
        )),
    })
}

fn data_storage(
    config: &crate::config::Config,
    concurrency: usize,
) -> crate::error::Result<Box<dyn Storage>> {
    if config.storage.storage_type.is_object_store() {
        return object_store(config, &config.dataset.data_folder, concurrency);
    }
    Ok(Box::new(LocalFs::with_options(
        config.data_folder(),
        LocalOptions {
            odirect: config.reader.odirect,
            evict_after_read: config.reader.page_cache == crate::config::PageCache::EvictAfterRead,
        },
    )))
}

/// The storage a configuration's checkpoints go to: the checkpoint folder, with O_DIRECT writes
/// and reads when `checkpoint.odirect`, or a bucket for `s3` (a container for `azure`).
pub fn for_checkpoints(
    config: &crate::config::Config,
    concurrency: usize,
) -> crate::error::Result<Box<dyn Storage>> {
    behind_throttle(config, checkpoint_storage(config, concurrency)?)
}

fn checkpoint_storage(
    config: &crate::config::Config,
    concurrency: usize,
) -> crate::error::Result<Box<dyn Storage>> {
    if config.storage.storage_type.is_object_store() {
        return object_store(config, &config.checkpoint.folder, concurrency);
    }
    let storage = LocalFs::with_options(
        config.checkpoint_folder(),
        LocalOptions {
            odirect: config.checkpoint.odirect,
            evict_after_read: false,
        },
    );
    let storage = storage.reading_only_owned();
    Ok(Box::new(if config.checkpoint.odirect {
        storage.writing_direct()
    } else {
        storage
    }))
}

/// The object store of `storage.storage_type`, its folder `folder`; a build without it refuses
/// (`Config::check_supported` refuses it before any storage is made).
fn object_store(
    config: &crate::config::Config,
    folder: &str,
    concurrency: usize,
) -> crate::error::Result<Box<dyn Storage>> {
    use crate::config::StorageType;
    // Unused by a build with neither store.
    let _ = (folder, concurrency);
    match config.storage.storage_type {
        #[cfg(feature = "s3")]
        StorageType::S3 | StorageType::Aistore => Ok(Box::new(S3Storage::for_folder(
            config,
            folder,
            concurrency,
        )?)),
        #[cfg(feature = "azure")]
        StorageType::Azure => Ok(Box::new(AzureStorage::for_folder(
            config,
            folder,
            concurrency,
        )?)),
        #[cfg(not(feature = "azure"))]
        StorageType::Azure => Err(crate::error::Error::usage(
            crate::config::NO_AZURE.to_string(),
        )),
        #[cfg(feature = "gcs")]
        StorageType::Gcs => Ok(Box::new(GcsStorage::for_folder(
            config,
            folder,
            concurrency,
        )?)),
        #[cfg(not(feature = "gcs"))]
        StorageType::Gcs => Err(crate::error::Error::usage(
            crate::config::NO_GCS.to_string(),
        )),
        _ => Err(crate::error::Error::usage(
            crate::config::NO_OBJECT_STORE.to_string(),
        )),
    }
}

thread_local! {
    /// The global rank the calling thread works for, where one is marked ([`mark_rank`]).
    static RANK: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Marks the calling thread as working for global rank `rank` (a rank's thread, its reader
/// threads, a generation writer on the rank's file): an object store of several endpoints sends
/// its requests to the rank's endpoint (`storage_options.endpoint_spread: rank`).
pub fn mark_rank(rank: usize) {
    RANK.with(|r| r.set(Some(rank)));
}

/// The rank the calling thread was marked with ([`mark_rank`]), if any.
pub fn marked_rank() -> Option<usize> {
    RANK.with(std::cell::Cell::get)
}

/// Files a reader thread keeps open at most ([`Storage::hold`]), and whose format metadata its
/// reader keeps: a reader moving from file to file sample by sample (random sampling over a
/// shard's files) opens each of its last few once, as a dataset that keeps its file handles
/// does; the oldest closes when another opens.
pub const FILES_HELD: usize = 16;

pub trait Storage: Send + Sync {
    /// Where the data lives, for messages.
    fn describe(&self, key: &str) -> String;

    /// Replaces the contents of `buf` with the whole object (`buf` grows as needed, never
    /// shrinks); returns its length and the bytes the storage moved for it (whole blocks with
    /// O_DIRECT).
    fn read_all(&self, key: &str, buf: &mut IoBuffer) -> io::Result<RangeRead>;

    /// Reads `len` bytes of the object from `offset` into `buf` (fewer where the object ends, none
    /// past its end). Where the storage moves whole blocks (O_DIRECT), `buf` holds the blocks and
    /// the result says where the asked-for bytes sit in it.
    fn read_range(
        &self,
        key: &str,
        offset: u64,
        len: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead>;

    /// Reads several ranges of one object, `(offset, len)` each, as a framework that fetches a
    /// set of ranges together (Arrow's `pre_buffer`) asks for them: up to `window` of them in
    /// flight at once, the next submitted as earlier ones are handed over. `each(i, bytes,
    /// fetched)` gets range `i`, in order, once it and every range before it have arrived:
    /// its bytes (fewer than asked where the object ends, as in [`Storage::read_range`]) and
    /// the bytes the storage moved for it. `Break` stops: nothing more is read. `buf` holds the
    /// ranges in flight: `window.bytes`, or the largest range where that is larger.
    fn read_ranges(
        &self,
        key: &str,
        ranges: &[(u64, usize)],
        window: Window,
        buf: &mut IoBuffer,
        each: &mut OnRange<'_>,
    ) -> io::Result<()>;

    /// Maps `len` bytes of the object from `offset` into memory, for readers that read by
    /// mapping; an error if the object ends before them, or where the storage cannot map.
    fn map_range(&self, key: &str, offset: u64, len: usize) -> io::Result<Mapped>;

    /// Maps the whole object, as DALI's readers map a file: opened once, measured, mapped.
    fn map_whole(&self, key: &str) -> io::Result<Mapped> {
        let size = self.size(key)?;
        self.map_range(key, 0, size as usize)
    }

    /// The calling thread is about to read `key`: the storage may keep the object open from
    /// now until the thread's phase ends ([`Storage::release_all`]), so that a reader streaming a
    /// file, or taking sample after sample from it, or coming back to it, opens it once. A few
    /// objects per thread, never data; best effort (a failure here shows at the first read, with
    /// its message). Where reads are made to come from storage (`page_cache: evict_after_read`),
    /// the object's cached pages are dropped as it is taken, so that the first epoch after a
    /// generation (which leaves its pages cached) reads the storage too.
    fn hold(&self, _key: &str) {}

    /// The reader moves off the object for now (to another, or its epoch ends). Where reads are
    /// made to come from storage every epoch (`page_cache: evict_after_read`), every page of it
    /// still cached is dropped: evicting each read's range leaves what the kernel read ahead
    /// beyond it, which would serve the next epoch from memory.
    fn release(&self, _key: &str) -> io::Result<()> {
        Ok(())
    }

    /// The calling thread closes `key` now, as a reader that opens the file for every sample
    /// closes it after the sample (`reader.read_type: on_demand`): the next read of it opens it
    /// again. Call [`Storage::release`] first where the pages must go too.
    fn let_go(&self, _key: &str) {}

    /// The calling thread's phase is over: every object it holds is closed.
    fn release_all(&self) {}

    /// Checks, before anything is read or written, that the storage answers and lets this run in
    /// (an object store: the endpoint, the credentials, the bucket); with `create`, makes what
    /// holds the keys if it is missing (a bucket), as a generation makes its data folder. Refused
    /// credentials or a missing bucket are usage errors.
    fn check_access(&self, _create: bool) -> crate::error::Result<()> {
        Ok(())
    }

    /// How many writers a generation should run on this storage, where one per CPU is too few:
    /// an object store's PUTs wait on the network, not on the CPU, so more must be in flight to
    /// keep it busy. `None`: one per CPU (a file system).
    fn writers(&self) -> Option<usize> {
        None
    }

    /// What requests the storage made so far, per kind, where it makes requests (an object
    /// store); `None` for file systems, whose reads the kernel counts.
    fn request_counts(&self) -> Option<RequestCounts> {
        None
    }

    /// The local folder the keys live in, for what only a folder has (a lock, free space, its
    /// own kind); `None` where the storage is not a local folder.
    fn local_root(&self) -> Option<&std::path::Path> {
        None
    }

    /// Checks, before any epoch, that reads of `key` can be made the way the storage makes them
    /// (O_DIRECT where the file system may refuse it); a refusal is a usage error.
    fn check_reads(&self, _key: &str) -> crate::error::Result<()> {
        Ok(())
    }

    /// The object's size in bytes: a metadata look-up (fstat), no data read, as a reader that
    /// starts from the end of a file (parquet's footer) makes on opening it.
    fn size(&self, key: &str) -> io::Result<u64>;

    /// Reads the object's last `len` bytes (all of it where it is shorter) into `buf`, and
    /// returns them with the object's size, as a reader that starts from the end of a file
    /// (parquet's footer) does. A file system looks the size up and reads the range; an object
    /// store asks for the suffix in one request, whose answer carries the size.
    fn read_tail(&self, key: &str, len: usize, buf: &mut IoBuffer) -> io::Result<(RangeRead, u64)> {
        let size = self.size(key)?;
        let tail = size.min(len as u64);
        let read = self.read_range(key, size - tail, tail as usize, buf)?;
        Ok((read, size))
    }

    /// Starts the object at `key`, replacing any, creating its folders as needed; its bytes are
    /// then written in order, so that an object need never be whole in memory. A writer that
    /// dies midway may leave part of it: callers that need all-or-nothing commit a whole set of
    /// objects at once (generation's marker), which costs nothing per object.
    fn create(&self, key: &str) -> io::Result<Box<dyn ObjectWriter + '_>>;

    /// Opens the object to read it whole and in order, in pieces of the caller's size: one open,
    /// then one request per piece (a checkpoint load streams multi-GiB files this way through one
    /// bounded buffer).
    fn open_sequential(&self, key: &str) -> io::Result<Box<dyn ObjectReader + '_>>;

    /// Writes back the object's dirty pages and drops all its pages from the page cache, so that
    /// the next read of it comes from storage; needs no privilege, unlike dropping the whole cache.
    fn evict(&self, key: &str) -> io::Result<()>;

    /// Writes a whole object at `key` (see [`Storage::create`]).
    fn put(&self, key: &str, data: &[u8]) -> io::Result<()> {
        let mut object = self.create(key)?;
        object.write(data)?;
        object.finish()
    }

    fn exists(&self, key: &str) -> io::Result<bool>;

    /// Makes the folder `key`, and those above it, where the storage has folders: the empty
    /// folders DLIO makes for a dataset, which its readers expect (an object store has none,
    /// and its readers expect none).
    fn make_folder(&self, key: &str) -> io::Result<()>;

    /// Removes the object at `key`; false if there was none.
    fn delete(&self, key: &str) -> io::Result<bool>;

    /// Whether [`Storage::rename`] moves a file atomically, as a file system's rename does
    /// (TensorFlow's `HasAtomicMove`, which decides whether it writes through temporary names);
    /// object stores have no rename.
    fn renames(&self) -> bool {
        false
    }

    /// Moves the object at `from` to `to`, replacing any there (where [`Storage::renames`]).
    fn rename(&self, from: &str, _to: &str) -> io::Result<()> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("{}: this storage has no rename", self.describe(from)),
        ))
    }

    /// Removes the empty folder `key`; nothing where the storage has no folders.
    fn remove_folder(&self, _key: &str) -> io::Result<()> {
        Ok(())
    }

    /// Writes the small object `data` at `key` only if `condition` holds, as one request the
    /// store decides (S3's conditional PUT): `Some(tag)`, the stored version's tag, or `None`
    /// when the condition did not hold. What a [`lease`] is made of; a storage that has
    /// folder locks instead (local) says `Unsupported`.
    fn put_if(
        &self,
        key: &str,
        _data: &[u8],
        _condition: Condition<'_>,
    ) -> io::Result<Option<String>> {
        Err(conditions_unsupported(&self.describe(key)))
    }

    /// The small object at `key` (up to `limit` bytes) and its tag; `None` if there is none.
    fn get_tagged(&self, key: &str, _limit: usize) -> io::Result<Option<(Vec<u8>, String)>> {
        Err(conditions_unsupported(&self.describe(key)))
    }

    /// Removes the object at `key` only if its tag is still `tag`: false if it was not.
    fn delete_if(&self, key: &str, _tag: &str) -> io::Result<bool> {
        Err(conditions_unsupported(&self.describe(key)))
    }

    /// Calls `each` with the name and kind of every entry directly below the folder `prefix`,
    /// in no particular order, without collecting them: a listing of millions of names costs
    /// only what the caller keeps.
    fn list_dir(&self, prefix: &str, each: &mut dyn FnMut(&str, EntryKind)) -> io::Result<()>;

    /// How the bytes that reads take from the storage device can be counted.
    fn accounting(&self) -> Accounting;

    /// Makes everything written so far durable on the device, so that its write-back does not
    /// run during later reads and its pages, clean again, can be evicted.
    fn sync(&self) -> io::Result<()>;
}

/// When a conditional write ([`Storage::put_if`]) happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition<'a> {
    /// Only if no object has the key (`If-None-Match: *`).
    Absent,
    /// Only if the object's tag is still this one (`If-Match`).
    Matches(&'a str),
}

fn conditions_unsupported(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{what}: this storage has no conditional writes"),
    )
}

/// An object store's answer that `object` (as its store names it) is not there.
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
fn not_found(object: String) -> io::Error {
    io::Error::new(io::ErrorKind::NotFound, format!("{object} does not exist"))
}

/// The bytes of one object being written, in order.
pub trait ObjectWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()>;

    /// Completes the object; until then it may be incomplete or invisible.
    fn finish(self: Box<Self>) -> io::Result<()>;

    /// Completes the object and returns only once it is durable on the device (fsync): a
    /// checkpoint saved with `checkpoint.fsync` counts as done only then.
    fn finish_durably(self: Box<Self>) -> io::Result<()>;
}

/// An object being read whole, in order (see [`Storage::open_sequential`]).
pub trait ObjectReader {
    /// The object's size in bytes.
    fn size(&self) -> u64;

    /// Reads the object's next bytes, at most `len`, into `buf` (replacing its contents); returns
    /// how many arrived, 0 at the end. `len` should be a multiple of [`IoBuffer::ALIGNMENT`]
    /// where the storage reads whole blocks (O_DIRECT).
    fn read_next(&mut self, buf: &mut IoBuffer, len: usize) -> io::Result<usize>;
}

/// What takes the ranges of a [`Storage::read_ranges`] as they arrive: `(index, bytes, fetched)`;
/// `Break` stops the reads.
pub type OnRange<'a> = dyn FnMut(usize, &[u8], u64) -> ControlFlow<()> + 'a;

/// How much of a [`Storage::read_ranges`] may be in flight at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Ranges requested and not yet handed over, at most (one at least).
    pub reads: usize,
    /// Their bytes, at most (a single range may be larger).
    pub bytes: usize,
}

/// Where the bytes a [`Storage::read_range`] asked for landed, and what the read cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RangeRead {
    /// Offset of the asked-for bytes in the buffer.
    pub start: usize,
    /// How many of them there are (fewer than asked where the object ends).
    pub len: usize,
    /// Bytes the storage moved to deliver them: with O_DIRECT whole blocks, the last block of
    /// the file too.
    pub fetched: u64,
}

impl RangeRead {
    /// The asked-for bytes, in `buf`.
    pub fn bytes<'a>(&self, buf: &'a IoBuffer) -> &'a [u8] {
        &buf.as_slice()[self.start..self.start + self.len]
    }
}

/// What a listed entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Folder,
    /// Anything else (a socket, a dangling link): never data.
    Other,
}

/// How the bytes a read takes from storage (rather than from a cache) can be known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accounting {
    /// Every byte read comes from the storage device (O_DIRECT): bytes from
    /// storage = bytes read.
    Exact,
    /// Every byte read is the body of a request to the storage (object storage): bytes from
    /// storage = bytes read, nothing cached on the client.
    Requests,
    /// Every byte read crossed an emulated link (`storage.throttle`), the storage under test.
    Emulated,
    /// The kernel counts block-device reads per thread (/proc/thread-self/io read_bytes).
    KernelCounters,
    /// The files live in memory (tmpfs, ramfs): nothing is read from a device.
    InMemory,
    /// The kernel does not account this file system's reads (NFS, FUSE, unknown): the reason,
    /// naming the file system type.
    Unaccounted(String),
}

impl Accounting {
    /// Bytes of a phase that came from the storage, as far as they can be known, given the
    /// bytes the readers asked for and the kernel's count (`None` where it keeps none).
    pub fn bytes_from_storage(&self, bytes_read: u64, kernel_count: Option<u64>) -> Option<u64> {
        match self {
            Accounting::Exact | Accounting::Requests | Accounting::Emulated => Some(bytes_read),
            Accounting::KernelCounters => kernel_count,
            Accounting::InMemory => Some(0),
            Accounting::Unaccounted(_) => None,
        }
    }
}

/// A fresh directory beside the test binary, on the build's file system (a disk here), where
/// O_DIRECT and the kernel's read counters behave as in a real run; /tmp may be tmpfs.
#[cfg(test)]
pub(crate) fn scratch_dir(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe
        .parent()
        .expect("the test binary's directory")
        .join(format!("dlio-rs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}
