//! Advice to the kernel about a file's pages in the page cache (`posix_fadvise`): read these
//! bytes ahead, so that the reads after the advice find them arriving, or drop them, so that the
//! next read of the file comes from storage rather than memory (`evict_after_read`, and a
//! checkpoint's files before a load reads them).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Asks the kernel to start reading `len` bytes of the file from `offset` into the page cache, and
/// returns without waiting for them.
pub(super) fn advise_will_need(file: &File, offset: u64, len: u64) -> io::Result<()> {
    fadvise(
        file,
        offset,
        len,
        libc::POSIX_FADV_WILLNEED,
        "read it ahead",
    )
}

/// Drops the clean pages of `len` bytes of the file from `offset` from the page cache. Dirty ones
/// stay: written data must have been flushed ([`Storage::sync`]) for this to leave nothing behind.
///
/// [`Storage::sync`]: crate::storage::Storage::sync
pub(super) fn evict_from_page_cache(file: &File, offset: u64, len: u64) -> io::Result<()> {
    fadvise(
        file,
        offset,
        len,
        libc::POSIX_FADV_DONTNEED,
        "evict it from the page cache",
    )
}

/// `posix_fadvise` of `len` bytes from `offset` (0: to the end); `what` it was for, in an error.
fn fadvise(file: &File, offset: u64, len: u64, advice: libc::c_int, what: &str) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Ok(());
    };
    // SAFETY: a plain system call on an open descriptor.
    let status = unsafe { libc::posix_fadvise(file.as_raw_fd(), offset, len, advice) };
    if status != 0 {
        let error = io::Error::from_raw_os_error(status);
        return Err(io::Error::new(
            error.kind(),
            format!("cannot {what} (posix_fadvise): {error}"),
        ));
    }
    Ok(())
}
