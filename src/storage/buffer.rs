//! Read memory that O_DIRECT accepts: page-aligned, grown in whole pages, never shrunk, reused
//! from read to read. The kernel writes straight into it; nothing zero-fills it first.
//!
//! Each buffer is its own anonymous mapping rather than an aligned heap block: the allocator's
//! aligned blocks leave fragments beside each one (measured: 512 readers' 8 KiB buffers took
//! ~7 MiB of heap), while a mapping costs exactly its pages, and only those the reads touch.
//!
//! A buffer that O_DIRECT reads of 2 MiB or more go into is made of huge pages
//! ([`IoBuffer::clear_and_reserve_direct`]): the kernel builds a direct read's block requests
//! from the buffer's physically contiguous pieces, at most the device's `max_segments` of them
//! per request, so in scattered 4 KiB pages a request carries about 1 MiB (254 segments on
//! virtio), while in 2 MiB pages it carries up to the device's `max_sectors_kb`. Measured under
//! a request cap (docs/benchmarks.md, R1): 0.4–1.0 requests per MiB with small pages, as the
//! memory's state happened to allow, against fio's 0.5–0.7.

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
    /// The allocation is of huge pages (for direct reads).
    huge: bool,
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

    /// A huge page (x86-64's and aarch64's with 4 KiB pages): direct reads of at least this many
    /// bytes go into huge pages.
    const HUGE_PAGE: usize = 2 << 20;

    /// An empty buffer; it allocates on its first read.
    pub const fn new() -> IoBuffer {
        IoBuffer {
            start: NonNull::dangling(),
            capacity: 0,
            filled: 0,
            huge: false,
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
        self.reserve(len, false)
    }

    /// [`IoBuffer::clear_and_reserve`] for an O_DIRECT read: from 2 MiB on, the memory is huge
    /// pages where the kernel can give them (see the module's overview), so that the read goes
    /// to the device in as few requests as the device allows.
    pub(crate) fn clear_and_reserve_direct(
        &mut self,
        len: usize,
    ) -> io::Result<&mut [MaybeUninit<u8>]> {
        self.reserve(len, true)
    }

    fn reserve(&mut self, len: usize, direct: bool) -> io::Result<&mut [MaybeUninit<u8>]> {
        self.filled = 0;
        let huge = direct && len >= Self::HUGE_PAGE;
        if len > self.capacity || (huge && !self.huge) {
            self.grow(len, huge)?;
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
            self.grow(len, false)?;
        }
        self.filled = len;
        // SAFETY: the allocation holds `capacity` >= `len` bytes, all initialised: an anonymous
        // mapping starts zeroed and is only ever written with bytes. This exclusive borrow covers
        // them; with nothing allocated `len` is 0 and a dangling pointer is allowed.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), len) })
    }

    /// Replaces the allocation with one of at least `len` bytes; of huge pages if `huge`.
    fn grow(&mut self, len: usize, huge: bool) -> io::Result<()> {
        let unit = if huge {
            Self::HUGE_PAGE
        } else {
            Self::ALIGNMENT
        };
        let capacity = len
            .checked_next_multiple_of(unit)
            .filter(|&c| c <= isize::MAX as usize / 2)
            .ok_or_else(|| too_large(len))?;
        // The old contents are about to be overwritten: unmap and map anew rather than remap,
        // which would keep them.
        self.release();
        // A huge page needs a huge page's alignment: map one more, then give back what lies
        // outside the aligned run.
        let mapped = if huge { capacity + unit } else { capacity };
        // SAFETY: a fresh private anonymous mapping of `mapped` > 0 bytes; nothing else is
        // placed or changed.
        let start = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                mapped,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if start == libc::MAP_FAILED {
            return Err(too_large(len));
        }
        let head = (start as usize).next_multiple_of(unit) - start as usize;
        // SAFETY: `head` < `unit`, so the aligned start lies inside the mapping with `capacity`
        // bytes after it.
        let aligned = unsafe { start.cast::<u8>().add(head) };
        if huge {
            let tail = mapped - head - capacity;
            // SAFETY: the pieces before and after the aligned run are whole pages of the mapping
            // just made, which nothing references; madvise only advises.
            unsafe {
                if head > 0 {
                    libc::munmap(start, head);
                }
                if tail > 0 {
                    libc::munmap(aligned.add(capacity).cast(), tail);
                }
                // A hint: where huge pages are off or none is free, small pages serve as before.
                libc::madvise(aligned.cast(), capacity, libc::MADV_HUGEPAGE);
            }
        }
        self.start = NonNull::new(aligned).ok_or_else(|| too_large(len))?;
        self.capacity = capacity;
        self.huge = huge;
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
            self.huge = false;
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
    fn direct_reads_of_a_huge_page_or_more_get_aligned_huge_page_memory() {
        let mut buf = IoBuffer::new();
        // Below a huge page: small pages, as any buffer.
        buf.clear_and_reserve_direct(8192).unwrap();
        assert_eq!((buf.capacity(), buf.huge), (8192, false));
        let len = IoBuffer::HUGE_PAGE + 4096;
        let memory = buf.clear_and_reserve_direct(len).unwrap();
        assert_eq!(memory.len(), len);
        memory[len - 1] = MaybeUninit::new(7);
        assert_eq!(buf.capacity(), 2 * IoBuffer::HUGE_PAGE);
        assert_eq!(buf.start.as_ptr() as usize % IoBuffer::HUGE_PAGE, 0);
        assert!(buf.huge);
        // A buffered read of the same size keeps the memory it has.
        let start = buf.start;
        buf.clear_and_reserve(len).unwrap();
        assert_eq!(buf.start, start);
        // A small-page buffer large enough is remade of huge pages for a direct read.
        let mut small = IoBuffer::new();
        small.clear_and_reserve(4 * IoBuffer::HUGE_PAGE).unwrap();
        assert!(!small.huge);
        small
            .clear_and_reserve_direct(3 * IoBuffer::HUGE_PAGE)
            .unwrap();
        assert!(small.huge && small.capacity() == 3 * IoBuffer::HUGE_PAGE);
    }

    #[test]
    fn an_impossible_size_is_an_error_not_a_panic() {
        let mut buf = IoBuffer::new();
        let error = buf.clear_and_reserve(usize::MAX - 10).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::OutOfMemory);
        assert_eq!(buf.capacity(), 0);
    }
}
