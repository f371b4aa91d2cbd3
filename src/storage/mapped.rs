//! A read-only memory mapping of part of a file, as a memory-mapping reader (Megatron's
//! `MMapIndexedDataset`) sees its data: the bytes arrive through page faults when they are touched,
//! not through read calls, so the reader must touch every byte for storage to see the read.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;

use super::IoBuffer;

pub struct Mapped {
    file: File,
    /// Start of the mapping (page-aligned, at or before the requested bytes).
    start: NonNull<u8>,
    /// Bytes mapped, from `start`.
    mapped: usize,
    /// Where the requested bytes begin within the mapping.
    skip: usize,
    /// Bytes requested.
    len: usize,
    /// File offset of `start`.
    file_offset: u64,
    evict_after_read: bool,
}

// SAFETY: the mapping is read-only and owned by this value alone; it can move between threads as
// a Box<[u8]> can, and shared references only read it.
unsafe impl Send for Mapped {}
// SAFETY: see Send.
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Maps `len` bytes of `file` from `offset`; an error if the file ends before them.
    pub(crate) fn new(
        file: File,
        offset: u64,
        len: usize,
        evict_after_read: bool,
    ) -> io::Result<Mapped> {
        let size = super::local::regular_file_len(&file)?;
        let end = offset.checked_add(len as u64).filter(|&end| end <= size);
        if end.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the file has {size} bytes; {len} bytes at offset {offset} are past its end"
                ),
            ));
        }
        let page = IoBuffer::ALIGNMENT as u64;
        let file_offset = offset / page * page;
        let skip = (offset - file_offset) as usize;
        let mapped = skip + len;
        if len == 0 {
            return Ok(Mapped {
                file,
                start: NonNull::dangling(),
                mapped: 0,
                skip: 0,
                len: 0,
                file_offset,
                evict_after_read,
            });
        }
        let position = libc::off_t::try_from(file_offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: a fresh read-only shared mapping of an open file; the kernel picks the address.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                position,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapped {
            file,
            start: NonNull::new(start.cast()).expect("mmap does not return null on success"),
            mapped,
            skip,
            len,
            file_offset,
            evict_after_read,
        })
    }

    /// The requested bytes. Reading them faults their pages in from storage.
    pub fn as_slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: the mapping covers `skip + len` readable bytes from `start` for as long as self
        // lives; the file is not truncated under a run (a truncation would raise SIGBUS, as it
        // does in any memory-mapping reader).
        unsafe { std::slice::from_raw_parts(self.start.as_ptr().add(self.skip), self.len) }
    }

    /// Asks the kernel to read `len` of the requested bytes from `at` ahead
    /// (`madvise(MADV_WILLNEED)` at their address, as DALI's readers do with each sample they
    /// map): the reads start now, and this returns without waiting for them. As for DALI, the
    /// kernel takes advice only at a page's start: elsewhere it refuses it (EINVAL), and the
    /// pages come with the first touch; that refusal is not an error here.
    pub fn will_need(&self, at: usize, len: usize) -> io::Result<()> {
        if len == 0 || at.checked_add(len).is_none_or(|end| end > self.len) {
            return Ok(());
        }
        // SAFETY: advice on bytes of a mapping this value owns; it changes no memory.
        let status = unsafe {
            libc::madvise(
                self.start.as_ptr().add(self.skip + at).cast(),
                len,
                libc::MADV_WILLNEED,
            )
        };
        let error = io::Error::last_os_error();
        match status {
            0 => Ok(()),
            _ if error.raw_os_error() == Some(libc::EINVAL) => Ok(()),
            _ => Err(error),
        }
    }

    /// Unmaps, then evicts the mapped pages from the page cache if the run asks for it.
    pub fn finish(mut self) -> io::Result<()> {
        self.release()
    }

    fn release(&mut self) -> io::Result<()> {
        let mapped = self.mapped;
        if mapped == 0 {
            return Ok(());
        }
        // SAFETY: `start`/`mapped` describe a mapping this value made and nothing else uses;
        // it is forgotten right after.
        unsafe { libc::munmap(self.start.as_ptr().cast(), mapped) };
        self.mapped = 0;
        self.len = 0;
        if self.evict_after_read {
            let (offset, len) = (self.file_offset as libc::off_t, mapped as libc::off_t);
            // SAFETY: a plain system call on an open descriptor.
            let status = unsafe {
                libc::posix_fadvise(
                    self.file.as_raw_fd(),
                    offset,
                    len,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
            if status != 0 {
                return Err(io::Error::from_raw_os_error(status));
            }
        }
        Ok(())
    }
}

impl Drop for Mapped {
    /// A mapping dropped unfinished (shared by several samples, the last holder gone; or a read
    /// that failed) is released all the same, its pages evicted where the run asks: a later
    /// epoch must not find them in the page cache. A failure to evict cannot be reported here.
    fn drop(&mut self) {
        let _ = self.release();
    }
}
