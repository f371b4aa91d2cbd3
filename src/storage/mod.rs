//! Bytes in and out of the storage under test. One trait; one file per backend. Readers and
//! writers of formats never know which backend they use. Keys are `/`-separated paths relative to
//! the backend's root (for local files: the data folder).

mod buffer;
mod fs_type;
mod local;

use std::io;

pub use buffer::IoBuffer;
pub use local::{LocalFs, LocalOptions};

pub trait Storage: Send + Sync {
    /// Where the data lives, for messages.
    fn describe(&self, key: &str) -> String;

    /// Replaces the contents of `buf` with the whole object (`buf` grows as needed, never
    /// shrinks); returns its length.
    fn read_all(&self, key: &str, buf: &mut IoBuffer) -> io::Result<usize>;

    /// Writes a whole object so that it appears complete or not at all.
    fn put(&self, key: &str, data: &[u8]) -> io::Result<()>;

    fn exists(&self, key: &str) -> io::Result<bool>;

    /// Keys of the objects below `prefix`, recursively, sorted.
    fn list(&self, prefix: &str) -> io::Result<Vec<String>>;

    /// How the bytes that reads take from the storage device can be counted.
    fn accounting(&self) -> Accounting;

    /// Makes everything written so far durable on the device, so that its write-back does not
    /// run during later reads and its pages, clean again, can be evicted.
    fn sync(&self) -> io::Result<()>;
}

/// How the bytes a read takes from storage (rather than from a cache) can be known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accounting {
    /// Every byte read comes from the storage device (O_DIRECT; later object storage): bytes from
    /// storage = bytes read.
    Exact,
    /// The kernel counts block-device reads per thread (/proc/thread-self/io read_bytes).
    KernelCounters,
    /// The files live in memory (tmpfs, ramfs): nothing is read from a device.
    InMemory,
    /// The kernel does not account this file system's reads (NFS, FUSE, unknown): the reason,
    /// naming the file system type.
    Unaccounted(String),
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
