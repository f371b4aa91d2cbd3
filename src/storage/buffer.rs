//! Read memory that O_DIRECT accepts: page-aligned, grown in whole pages, never shrunk, reused
//! from read to read. The kernel writes straight into it; nothing zero-fills it first.
//!
//! Each buffer is its own anonymous mapping rather than an aligned heap block: the allocator's
//! aligned blocks leave fragments beside each one (measured: 512 readers' 8 KiB buffers took
//! ~7 MiB of heap), while a mapping costs exactly its pages, and only those the reads touch.

use std::fmt;
use std::io;
use std::mem::MaybeUninit;
use std::ptr::NonNull;

/// A reusable, page-aligned byte buffer that holds the bytes of the last read.
pub struct IoBuffer {
    /// Start of the allocation; dangling (and never dereferenced) while `capacity` is 0.
    start: NonNull<u8>,
    /// Bytes allocated: a multiple of [`IoBuffer::ALIGNMENT`].
    capacity: usize,
    /// Bytes at the start that hold data.
    filled: usize,
}

// SAFETY: an IoBuffer owns its allocation exclusively, like a Box<[u8]>: moving it to another
// thread moves that ownership, and a shared reference only allows reading the filled bytes.
unsafe impl Send for IoBuffer {}
// SAFETY: see Send; `&IoBuffer` gives read-only access.
unsafe impl Sync for IoBuffer {}

impl IoBuffer {
    /// Alignment of the memory and the unit in which capacity grows: a page, which Linux's
    /// O_DIRECT accepts for memory on every file system.
    pub const ALIGNMENT: usize = 4096;

    /// An empty buffer; it allocates on its first read.
    pub const fn new() -> IoBuffer {
        IoBuffer {
            start: NonNull::dangling(),
            capacity: 0,
            filled: 0,
        }
    }

    /// The bytes of the last read.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the first `filled` bytes of the allocation are initialised (set_len's
        // contract); with nothing allocated `filled` is 0 and a dangling pointer is allowed.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.filled) }
    }

    pub fn len(&self) -> usize {
        self.filled
    }

    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Empties the buffer and returns `len` bytes of its memory, growing it if need be, for the
    /// kernel to write into; [`IoBuffer::set_len`] then says how much of it holds data.
    pub(crate) fn clear_and_reserve(&mut self, len: usize) -> io::Result<&mut [MaybeUninit<u8>]> {
        self.filled = 0;
        if len > self.capacity {
            self.grow(len)?;
        }
        // SAFETY: the allocation holds `capacity` >= `len` bytes and this exclusive borrow covers
        // them; a MaybeUninit<u8> slice may view uninitialised memory. With nothing allocated
        // `len` is 0 and a dangling pointer is allowed.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr().cast(), len) })
    }

    /// Sets the buffer's length to `len` bytes, growing it if need be, and returns them for the
    /// caller to fill (with what an earlier use left in them, or zeros).
    pub fn resize_for_writing(&mut self, len: usize) -> io::Result<&mut [u8]> {
        if len > self.capacity {
            self.grow(len)?;
        }
        self.filled = len;
        // SAFETY: the allocation holds `capacity` >= `len` bytes, all initialised: an anonymous
        // mapping starts zeroed and is only ever written with bytes. This exclusive borrow covers
        // them; with nothing allocated `len` is 0 and a dangling pointer is allowed.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), len) })
    }

    /// Replaces the allocation with one of at least `len` bytes.
    fn grow(&mut self, len: usize) -> io::Result<()> {
        let capacity = len
            .checked_next_multiple_of(Self::ALIGNMENT)
            .filter(|&c| c <= isize::MAX as usize)
            .ok_or_else(|| too_large(len))?;
        // The old contents are about to be overwritten: unmap and map anew rather than remap,
        // which would keep them. Huge pages (MADV_HUGEPAGE) would speed later copies, but where
        // the kernel defragments on demand each huge fault stalls for compaction: measured, it
        // halved the first epoch.
        self.release();
        // SAFETY: a fresh private anonymous mapping of `capacity` > 0 bytes; nothing else is
        // placed or changed.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                capacity,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(too_large(len));
        }
        self.start = NonNull::new(start.cast()).ok_or_else(|| too_large(len))?;
        self.capacity = capacity;
        Ok(())
    }

    /// Marks the first `len` bytes as data.
    ///
    /// # Safety
    /// The first `len` bytes of the allocation must have been written, and `len` must not exceed
    /// the capacity.
    pub(crate) unsafe fn set_len(&mut self, len: usize) {
        debug_assert!(len <= self.capacity);
        self.filled = len;
    }

    fn release(&mut self) {
        if self.capacity > 0 {
            // SAFETY: `start` and `capacity` are exactly the mapping `grow` made, and nothing
            // borrows it (release takes `&mut self`).
            unsafe { libc::munmap(self.start.as_ptr().cast(), self.capacity) };
            self.start = NonNull::dangling();
            self.capacity = 0;
            self.filled = 0;
        }
    }
}

fn too_large(len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!("cannot allocate {len} bytes of memory to read the file into"),
    )
}

impl Drop for IoBuffer {
    fn drop(&mut self) {
        self.release();
    }
}

impl Default for IoBuffer {
    fn default() -> IoBuffer {
        IoBuffer::new()
    }
}

impl fmt::Debug for IoBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IoBuffer")
            .field("len", &self.filled)
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_in_aligned_pages_and_never_shrinks() {
        let mut buf = IoBuffer::new();
        assert!(buf.is_empty() && buf.as_slice().is_empty());
        assert!(buf.clear_and_reserve(0).unwrap().is_empty());
        assert_eq!(buf.capacity(), 0);
        assert_eq!(buf.clear_and_reserve(5000).unwrap().len(), 5000);
        assert_eq!(buf.capacity(), 8192);
        let start = buf.as_slice().as_ptr();
        assert_eq!(start as usize % IoBuffer::ALIGNMENT, 0);
        let spare = buf.clear_and_reserve(3).unwrap();
        spare.copy_from_slice(&[
            MaybeUninit::new(1),
            MaybeUninit::new(2),
            MaybeUninit::new(3),
        ]);
        // SAFETY: three bytes were written just above.
        unsafe { buf.set_len(3) };
        assert_eq!(buf.as_slice(), &[1, 2, 3]);
        buf.clear_and_reserve(100).unwrap();
        assert!(buf.is_empty());
        assert_eq!((buf.capacity(), buf.as_slice().as_ptr()), (8192, start));
        buf.clear_and_reserve(8193).unwrap();
        assert_eq!(buf.capacity(), 12288);
        assert_eq!(buf.as_slice().as_ptr() as usize % IoBuffer::ALIGNMENT, 0);
    }

    #[test]
    fn an_impossible_size_is_an_error_not_a_panic() {
        let mut buf = IoBuffer::new();
        let error = buf.clear_and_reserve(usize::MAX - 10).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::OutOfMemory);
        assert_eq!(buf.capacity(), 0);
    }
}
