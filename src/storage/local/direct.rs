//! O_DIRECT: reads and writes that go past the page cache, straight between the device and
//! memory. The kernel moves only whole blocks to and from aligned memory, so this file holds what
//! that asks for: each file's direct-I/O block (its geometry), a writer that gathers bytes into
//! aligned blocks, and the error a file system gives when it will not do direct I/O at all,
//! explained with the settings that avoid it.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::open::not_a_file;
use crate::storage::{IoBuffer, ObjectWriter};

/// The size of an O_DIRECT file and the unit its offsets and lengths must be multiples of: the
/// file system's, where the kernel tells it (statx STATX_DIOALIGN), but never less than a page.
/// `path` names the file in a refusal; it is made only then, so reads allocate nothing.
pub(super) fn direct_io_geometry(
    file: &File,
    path: impl FnOnce() -> PathBuf,
) -> io::Result<(u64, usize)> {
    let mut info = MaybeUninit::<libc::statx>::uninit();
    // SAFETY: the path is an empty NUL-terminated string, which AT_EMPTY_PATH makes refer to the
    // open descriptor; `info` is valid for writing a statx.
    let status = unsafe {
        libc::statx(
            file.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_TYPE | libc::STATX_SIZE | libc::STATX_DIOALIGN,
            info.as_mut_ptr(),
        )
    };
    if status != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statx succeeded, so it filled `info`.
    let info = unsafe { info.assume_init() };
    if u32::from(info.stx_mode) & libc::S_IFMT != libc::S_IFREG {
        return Err(not_a_file());
    }
    if info.stx_mask & libc::STATX_DIOALIGN == 0 {
        // Kernels before 6.1, and file systems without block devices, do not say; a page is a
        // multiple of every block device's sector.
        return Ok((info.stx_size, IoBuffer::ALIGNMENT));
    }
    if info.stx_dio_offset_align == 0 {
        // Some file systems quietly fall back to buffered reads for such files.
        return Err(direct_io_refused(
            &path(),
            "the kernel reports that it cannot do direct I/O on this file",
        ));
    }
    if info.stx_dio_mem_align as usize > IoBuffer::ALIGNMENT {
        return Err(direct_io_refused(
            &path(),
            format!(
                "it needs memory aligned to {} bytes, more than the {} bytes dlio-rs aligns to",
                info.stx_dio_mem_align,
                IoBuffer::ALIGNMENT
            ),
        ));
    }
    let block = (info.stx_dio_offset_align as usize).max(IoBuffer::ALIGNMENT);
    Ok((info.stx_size, block))
}

/// A file being written with O_DIRECT. The kernel takes only whole blocks from aligned memory, so
/// bytes are gathered in an aligned staging buffer and written a full buffer at a time; the last
/// partial block goes through the page cache (O_DIRECT cleared) when the file is finished.
pub(super) struct DirectFileWriter {
    file: File,
    block: usize,
    staged: IoBuffer,
    staged_len: usize,
}

/// How many bytes a direct writer gathers before it writes them: one request of this size.
pub(super) const DIRECT_WRITE_BYTES: usize = 4 << 20;

impl DirectFileWriter {
    pub(super) fn new(file: File, path: &Path) -> io::Result<DirectFileWriter> {
        let (_, block) = direct_io_geometry(&file, || path.to_path_buf())?;
        let mut staged = IoBuffer::new();
        staged.resize_for_writing(DIRECT_WRITE_BYTES.next_multiple_of(block))?;
        Ok(DirectFileWriter {
            file,
            block,
            staged,
            staged_len: 0,
        })
    }

    /// Writes the staged whole blocks with O_DIRECT and keeps the partial block's bytes.
    fn write_whole_blocks(&mut self) -> io::Result<()> {
        let whole = self.staged_len / self.block * self.block;
        if whole == 0 {
            return Ok(());
        }
        self.file.write_all(&self.staged.as_slice()[..whole])?;
        let rest = self.staged_len - whole;
        let staged = self.staged.resize_for_writing(self.staged.len())?;
        staged.copy_within(whole..whole + rest, 0);
        self.staged_len = rest;
        Ok(())
    }

    /// Writes everything staged: the whole blocks directly, then the partial block, if any,
    /// through the page cache.
    fn write_all_staged(mut self) -> io::Result<File> {
        self.write_whole_blocks()?;
        if self.staged_len > 0 {
            let fd = self.file.as_raw_fd();
            // SAFETY: F_GETFL and F_SETFL on a descriptor this writer owns.
            let cleared = unsafe {
                let flags = libc::fcntl(fd, libc::F_GETFL);
                flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_DIRECT) == 0
            };
            if !cleared {
                return Err(io::Error::last_os_error());
            }
            self.file
                .write_all(&self.staged.as_slice()[..self.staged_len])?;
        }
        Ok(self.file)
    }
}

impl ObjectWriter for DirectFileWriter {
    fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            let room = self.staged.len() - self.staged_len;
            let n = room.min(bytes.len());
            let staged = self.staged.resize_for_writing(self.staged.len())?;
            staged[self.staged_len..self.staged_len + n].copy_from_slice(&bytes[..n]);
            self.staged_len += n;
            bytes = &bytes[n..];
            if self.staged_len == self.staged.len() {
                self.write_whole_blocks()?;
            }
        }
        Ok(())
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        (*self).write_all_staged().map(drop)
    }

    fn finish_durably(self: Box<Self>) -> io::Result<()> {
        // The device may still hold O_DIRECT writes in its cache, and the size is metadata.
        (*self).write_all_staged()?.sync_all()
    }
}

/// A file system that will not read a file with O_DIRECT; carried inside an [`io::Error`] so that
/// callers can tell it from a failing device.
#[derive(Debug)]
struct DirectIoRefused {
    path: PathBuf,
    reason: String,
}

impl fmt::Display for DirectIoRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the file system of {} refuses O_DIRECT (reader.odirect: True): {}; set \
             ++workload.reader.odirect=False or use ++workload.reader.page_cache=evict_after_read",
            self.path.display(),
            self.reason
        )
    }
}

impl std::error::Error for DirectIoRefused {}

fn direct_io_refused(path: &Path, reason: impl fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        DirectIoRefused {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        },
    )
}

pub(super) fn is_direct_io_refusal(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<DirectIoRefused>())
}

pub(super) fn explain_direct_io_error_if(direct: bool, path: &Path, error: io::Error) -> io::Error {
    if direct {
        explain_direct_io_error(path, error)
    } else {
        error
    }
}

/// With O_DIRECT, EINVAL from open or read means that the file system does not do direct I/O
/// (our requests are aligned as statx asks), or that the file is no regular file (a FIFO); other
/// errors are what they say.
pub(super) fn explain_direct_io_error(path: &Path, error: io::Error) -> io::Error {
    if error.raw_os_error() != Some(libc::EINVAL) {
        return error;
    }
    match fs::metadata(path) {
        Ok(found) if !found.is_file() => not_a_file(),
        _ => direct_io_refused(path, error),
    }
}
