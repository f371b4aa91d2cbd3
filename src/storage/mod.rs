//! Bytes in and out of the storage under test. One trait; one file per backend. Readers and
//! writers of formats never know which backend they use. Keys are `/`-separated paths relative to
//! the backend's root (for local files: the data folder).

mod local;

use std::io;

pub use local::LocalFs;

pub trait Storage: Send + Sync {
    /// Where the data lives, for messages.
    fn describe(&self, key: &str) -> String;

    /// Reads the whole object into `buf` (grown as needed, never shrunk); returns its length.
    fn read_all(&self, key: &str, buf: &mut Vec<u8>) -> io::Result<usize>;

    /// Writes a whole object so that it appears complete or not at all.
    fn put(&self, key: &str, data: &[u8]) -> io::Result<()>;

    fn exists(&self, key: &str) -> io::Result<bool>;

    /// Keys of the objects below `prefix`, recursively, sorted.
    fn list(&self, prefix: &str) -> io::Result<Vec<String>>;
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Accounting {
    /// Every byte read comes from the storage device (O_DIRECT; later object storage): bytes from storage = bytes read.
    Exact,
    /// The kernel counts block-device reads per thread (/proc/thread-self/io read_bytes).
    KernelCounters,
    /// The files live in memory (tmpfs, ramfs): nothing is read from a device.
    InMemory,
    /// The kernel does not account this file system's reads (NFS, FUSE, unknown): the reason, naming the fs type.
    Unaccounted(String),
}
