//! Local and parallel file systems, read through the kernel's page cache or, with O_DIRECT, past
//! it. With O_DIRECT the kernel moves whole blocks between the device and memory: the buffer is
//! page-aligned and requests are rounded up to the file system's direct-I/O block, the last one
//! coming back short at the end of the file.
//!
//! This file is the backend as the rest of the program sees it: [`LocalFs`], its
//! [`LocalOptions`], and its [`Storage`] implementation. The work is in the files beside it:
//! - `open.rs` opens the file at a key, relative to the root's descriptor;
//! - `reads.rs` lays out which bytes a read asks for and reads them (`pread`, or io_uring for
//!   several O_DIRECT ranges at once), and reads a whole file in order;
//! - `direct.rs` holds what O_DIRECT asks for: a file's direct-I/O block, the writer that
//!   gathers whole aligned blocks, and the error of a file system that refuses it;
//! - `cache.rs` advises the kernel on a file's pages: read them ahead, or drop them;
//! - `held.rs` keeps the files a reader thread holds open between its reads.
//!
//! A read (`read_all`, `read_range`) takes the file this thread holds, or opens it and looks up
//! its size and, with O_DIRECT, its block; lays the range out; reads it into the caller's buffer;
//! drops its pages from the cache when `evict_after_read` asks; and, with O_DIRECT, explains an
//! EINVAL as the file system's refusal. `read_ranges` reads several ranges of one file the same
//! way, through io_uring with O_DIRECT, else one `pread` after another with the kernel asked to
//! read ahead. A write (`create`) creates the file, making its folder if that is missing, and
//! hands out a plain writer, or, for storage `writing_direct`, switches the file to O_DIRECT and
//! hands out the writer of whole blocks.

mod cache;
mod direct;
mod held;
mod open;
mod reads;
#[cfg(test)]
mod tests;

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::{
    fs_type, Accounting, EntryKind, IoBuffer, Mapped, ObjectReader, ObjectWriter, OnRange,
    RangeRead, Storage, Window,
};
use crate::error::{Error, Result};
use cache::evict_from_page_cache;
use direct::{
    direct_io_geometry, explain_direct_io_error, explain_direct_io_error_if, is_direct_io_refusal,
    DirectFileWriter,
};
// Mapped reads (`mapped.rs`) check their file the same way.
pub(super) use open::regular_file_len;
use reads::SequentialReader;

/// How [`LocalFs`] reads; the default reads through the page cache and leaves it alone.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LocalOptions {
    /// Open files with O_DIRECT: every byte read comes from the device, none from the cache.
    pub odirect: bool,
    /// Drop each file's pages from the page cache once it has been read, so that the next read
    /// of it comes from storage.
    pub evict_after_read: bool,
}

#[derive(Debug)]
pub struct LocalFs {
    root: PathBuf,
    options: LocalOptions,
    /// Write created files with O_DIRECT (checkpoints with `checkpoint.odirect`).
    direct_writes: bool,
    /// Read only files reached below the root without a link (checkpoints: a load through a link
    /// would rate whatever it points to as the storage).
    owned_reads: bool,
    /// Tells this storage's held files from another's ([`HeldFile`]).
    ///
    /// [`HeldFile`]: held::HeldFile
    id: u64,
    /// The root, opened once: reads open files relative to it, so the kernel walks only the
    /// key's components and no path is allocated per read.
    root_dir: OnceLock<File>,
}

impl LocalFs {
    /// Files below `root`, read through the page cache.
    pub fn new(root: impl Into<PathBuf>) -> LocalFs {
        LocalFs::with_options(root, LocalOptions::default())
    }

    /// Files below `root`, read as `options` say.
    pub fn with_options(root: impl Into<PathBuf>, options: LocalOptions) -> LocalFs {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        LocalFs {
            root: root.into(),
            options,
            direct_writes: false,
            owned_reads: false,
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            root_dir: OnceLock::new(),
        }
    }

    /// The same storage, writing the files it creates with O_DIRECT: whole blocks from aligned
    /// memory straight to the device, the last partial block through the page cache.
    pub fn writing_direct(mut self) -> LocalFs {
        self.direct_writes = true;
        self
    }

    /// The same storage, reading only files reached below the root without a symbolic link, as
    /// it writes them: the files a run saved, never what a link planted among them points to.
    pub fn reading_only_owned(mut self) -> LocalFs {
        self.owned_reads = true;
        self
    }

    pub fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// Checks, before a run, that the file system lets the file at `key` be read with O_DIRECT,
    /// by reading its first block that way. A refusal is a usage error that says which settings
    /// avoid O_DIRECT; any other failure is a run error naming the file.
    pub fn check_direct_io(&self, key: &str) -> Result<()> {
        let mut first_block = IoBuffer::new();
        match self.read_span(key, true, 0, 1, &mut first_block) {
            Ok(_) => Ok(()),
            Err(e) if is_direct_io_refusal(&e) => Err(Error::usage(e.to_string())),
            Err(e) => Err(Error::on_object(
                "cannot read (with O_DIRECT) data file",
                self.describe(key),
                e,
            )),
        }
    }
}

/// A file being written: plain writes, closed when finished (generation syncs the file system
/// once at the end rather than each file).
struct FileWriter(File);

impl ObjectWriter for FileWriter {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        Ok(())
    }

    fn finish_durably(self: Box<Self>) -> io::Result<()> {
        self.0.sync_all()
    }
}

impl Storage for LocalFs {
    fn describe(&self, key: &str) -> String {
        self.path(key).display().to_string()
    }

    fn read_all(&self, key: &str, buf: &mut IoBuffer) -> io::Result<RangeRead> {
        self.read_span(key, self.options.odirect, 0, usize::MAX, buf)
    }

    fn read_range(
        &self,
        key: &str,
        offset: u64,
        len: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        self.read_span(key, self.options.odirect, offset, len, buf)
    }

    fn read_ranges(
        &self,
        key: &str,
        ranges: &[(u64, usize)],
        window: Window,
        buf: &mut IoBuffer,
        each: &mut OnRange<'_>,
    ) -> io::Result<()> {
        let direct = self.options.odirect;
        let held = self.with_held(key, direct, |h| {
            self.read_spans_of(&h.file, h.geometry, ranges, window, buf, each)
        });
        held.unwrap_or_else(|| {
            let file = self.open_for_reading(key, direct)?;
            let geometry = self.geometry_of(&file, key, direct)?;
            self.read_spans_of(&file, geometry, ranges, window, buf, each)
        })
        .map_err(|e| explain_direct_io_error_if(direct, &self.path(key), e))
    }

    fn map_range(&self, key: &str, offset: u64, len: usize) -> io::Result<Mapped> {
        let file = self.open_for_reading(key, false)?;
        Mapped::new(file, offset, len, self.options.evict_after_read)
    }

    fn map_whole(&self, key: &str) -> io::Result<Mapped> {
        let file = self.open_for_reading(key, false)?;
        let size = regular_file_len(&file)?;
        Mapped::new(file, 0, size as usize, self.options.evict_after_read)
    }

    fn size(&self, key: &str) -> io::Result<u64> {
        // A file a thread holds was measured when it was opened.
        match self.with_held(key, self.options.odirect, |h| h.geometry.0) {
            Some(size) => Ok(size),
            None => regular_file_len(&self.open_for_reading(key, false)?),
        }
    }

    fn hold(&self, key: &str) {
        self.hold_file(key)
    }

    fn release(&self, key: &str) -> io::Result<()> {
        if !self.options.evict_after_read {
            return Ok(());
        }
        // Length 0: to the end of the file.
        let held = self.with_held(key, self.options.odirect, |h| {
            evict_from_page_cache(&h.file, 0, 0)
        });
        held.unwrap_or_else(|| evict_from_page_cache(&self.open_for_reading(key, false)?, 0, 0))
    }

    fn let_go(&self, key: &str) {
        self.let_go_of_held_file(key)
    }

    fn release_all(&self) {
        self.let_go_of_held_files()
    }

    fn local_root(&self) -> Option<&Path> {
        Some(&self.root)
    }

    fn check_reads(&self, key: &str) -> Result<()> {
        if self.options.odirect {
            self.check_direct_io(key)
        } else {
            Ok(())
        }
    }

    fn create(&self, key: &str) -> io::Result<Box<dyn ObjectWriter + '_>> {
        // The folder is made only when the first write into it finds it missing: a generator
        // writing millions of files pays no extra system call per file.
        let file = match self.create_in_place(key) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // Tolerates a concurrent creator: ranks of a shared file system race here.
                let parent = key.rsplit_once('/').map_or("", |(parent, _)| parent);
                self.make_folders(parent)?;
                self.create_in_place(key)?
            }
            created => created?,
        };
        if !self.direct_writes {
            return Ok(Box::new(FileWriter(file)));
        }
        let path = self.path(key);
        let fd = file.as_raw_fd();
        // SAFETY: F_GETFL and F_SETFL on the descriptor just opened; O_DIRECT is set after
        // opening so that a refusal (EINVAL) is told apart from a failure to create the file.
        let set = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_DIRECT) == 0
        };
        if !set {
            return Err(explain_direct_io_error(&path, io::Error::last_os_error()));
        }
        let writer =
            DirectFileWriter::new(file, &path).map_err(|e| explain_direct_io_error(&path, e))?;
        Ok(Box::new(writer))
    }

    fn open_sequential(&self, key: &str) -> io::Result<Box<dyn ObjectReader + '_>> {
        let direct = self.options.odirect;
        let file = self
            .open_for_reading(key, direct)
            .map_err(|e| explain_direct_io_error_if(direct, &self.path(key), e))?;
        let (size, direct_block) = if direct {
            let (size, block) = direct_io_geometry(&file, || self.path(key))?;
            (size, Some(block))
        } else {
            (file.metadata()?.len(), None)
        };
        Ok(Box::new(SequentialReader {
            file,
            size,
            position: 0,
            direct_block,
            evict_after_read: self.options.evict_after_read,
        }))
    }

    fn evict(&self, key: &str) -> io::Result<()> {
        let file = self.open_for_reading(key, false)?;
        // Dirty pages cannot be dropped: write them back first.
        file.sync_data()?;
        evict_from_page_cache(&file, 0, 0)
    }

    fn exists(&self, key: &str) -> io::Result<bool> {
        match fs::metadata(self.path(key)) {
            Ok(_) => Ok(true),
            // A file where a folder of the key should be: nothing is at the key.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn make_folder(&self, key: &str) -> io::Result<()> {
        self.make_folders(key)
    }

    fn renames(&self) -> bool {
        true
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path(from), self.path(to))
    }

    fn remove_folder(&self, key: &str) -> io::Result<()> {
        fs::remove_dir(self.path(key))
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        match fs::remove_file(self.path(key)) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn list_dir(&self, prefix: &str, each: &mut dyn FnMut(&str, EntryKind)) -> io::Result<()> {
        for entry in fs::read_dir(self.path(prefix.trim_end_matches('/')))? {
            let entry = entry?;
            let name = entry.file_name();
            // A name that is not UTF-8 cannot be a key; such files are not the dataset's.
            let Some(name) = name.to_str() else { continue };
            // The directory entry's own type: no stat per file. Links are followed, as DLIO's
            // listing does.
            let mut kind = entry.file_type()?;
            if kind.is_symlink() {
                match fs::metadata(entry.path()) {
                    Ok(target) => kind = target.file_type(),
                    Err(_) => continue,
                }
            }
            let kind = if kind.is_file() {
                EntryKind::File
            } else if kind.is_dir() {
                EntryKind::Folder
            } else {
                EntryKind::Other
            };
            each(name, kind);
        }
        Ok(())
    }

    /// Memory file systems read nothing from a device, O_DIRECT or not; otherwise O_DIRECT makes
    /// every byte read a byte from storage, and without it the file system type decides.
    fn accounting(&self) -> Accounting {
        let by_file_system = match fs_type::magic_of(&self.root) {
            Ok(magic) => fs_type::accounting_of(magic),
            Err(e) => Accounting::Unaccounted(format!(
                "cannot tell the file system of {}: {e}",
                self.root.display()
            )),
        };
        match by_file_system {
            Accounting::InMemory => Accounting::InMemory,
            _ if self.options.odirect => Accounting::Exact,
            other => other,
        }
    }

    fn sync(&self) -> io::Result<()> {
        let explain = |e: io::Error| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot flush the data written to {} to storage: {e}",
                    self.root.display()
                ),
            )
        };
        let root = File::open(&self.root).map_err(explain)?;
        // SAFETY: syncfs takes any open descriptor of the file system; `root` is open throughout.
        if unsafe { libc::syncfs(root.as_raw_fd()) } != 0 {
            return Err(explain(io::Error::last_os_error()));
        }
        Ok(())
    }
}
