//! Reads of a file's bytes: which bytes a read asks the kernel for, and asking. A read of a range
//! is first laid out ([`Span`]) from the file's size and, with O_DIRECT, its block: the request
//! starts at a block boundary and covers whole blocks, and the range sits somewhere inside the
//! answer. The request is then made with `pread` until the bytes needed have arrived, or, for
//! several O_DIRECT ranges of one file, through io_uring with several in flight at once. Also
//! here: the reader of a whole file in order, and the size check that refuses anything but a
//! regular file.

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::ops::ControlFlow;
use std::os::fd::AsRawFd;

use super::cache::{advise_will_need, evict_from_page_cache};
use super::direct::{direct_io_geometry, explain_direct_io_error_if};
use super::open::regular_file_len;
use super::LocalFs;
use crate::storage::{uring, IoBuffer, ObjectReader, OnRange, RangeRead, Window};

impl LocalFs {
    /// Reads up to `limit` bytes of the file at `key` from `offset` (fewer where the file ends)
    /// into `buf`, with O_DIRECT if `direct`.
    pub(super) fn read_span(
        &self,
        key: &str,
        direct: bool,
        offset: u64,
        limit: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        self.read_span_unexplained(key, direct, offset, limit, buf)
            .map_err(|e| explain_direct_io_error_if(direct, &self.path(key), e))
    }

    fn read_span_unexplained(
        &self,
        key: &str,
        direct: bool,
        offset: u64,
        limit: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        let held = self.with_held(key, direct, |h| {
            self.read_span_of(&h.file, h.geometry, offset, limit, buf)
        });
        held.unwrap_or_else(|| {
            let file = self.open_for_reading(key, direct)?;
            let geometry = self.geometry_of(&file, key, direct)?;
            self.read_span_of(&file, geometry, offset, limit, buf)
        })
    }

    /// The size of the open `file` (at `key`) and, when read with O_DIRECT, its block.
    pub(super) fn geometry_of(
        &self,
        file: &File,
        key: &str,
        direct: bool,
    ) -> io::Result<(u64, Option<usize>)> {
        if direct {
            let (size, block) = direct_io_geometry(file, || self.path(key))?;
            Ok((size, Some(block)))
        } else {
            Ok((regular_file_len(file)?, None))
        }
    }

    /// [`LocalFs::read_span`] of the open `file`, of `(size, direct block)`.
    fn read_span_of(
        &self,
        file: &File,
        geometry: (u64, Option<usize>),
        offset: u64,
        limit: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        self.read_planned(file, &Span::of(geometry, offset, limit)?, geometry.1, buf)
    }

    /// The read of `span` of the open `file` into `buf`.
    fn read_planned(
        &self,
        file: &File,
        span: &Span,
        direct_block: Option<usize>,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        let memory = match direct_block {
            Some(_) => buf.clear_and_reserve_direct(span.request)?,
            None => buf.clear_and_reserve(span.request)?,
        };
        let fetched = read_at(file, span.first, memory, span.needed, direct_block)?;
        // SAFETY: read_at succeeded, so it wrote at least `needed` bytes at the buffer's start.
        unsafe { buf.set_len(span.needed) };
        self.finish_span(file, span, fetched, direct_block)
    }

    /// The read of `span` into the start of a buffer, which moved `fetched` bytes: evicted if
    /// asked, and described.
    fn finish_span(
        &self,
        file: &File,
        span: &Span,
        fetched: usize,
        direct_block: Option<usize>,
    ) -> io::Result<RangeRead> {
        if self.options.evict_after_read {
            evict_from_page_cache(file, span.first, fetched as u64)?;
        }
        Ok(RangeRead {
            start: span.skip,
            len: span.len,
            // With O_DIRECT the device moves whole blocks, the last one too, though the kernel
            // hands back only the bytes before the end of the file.
            fetched: match direct_block {
                Some(block) => (fetched as u64).next_multiple_of(block as u64),
                None => fetched as u64,
            },
        })
    }

    /// [`Storage::read_ranges`] of the open `file`: with O_DIRECT through io_uring
    /// ([`uring::read_in_order`]), buffered (or where io_uring is refused) one `pread` after
    /// another, the kernel asked to read the window's ranges ahead.
    ///
    /// [`Storage::read_ranges`]: crate::storage::Storage::read_ranges
    pub(super) fn read_spans_of(
        &self,
        file: &File,
        geometry: (u64, Option<usize>),
        ranges: &[(u64, usize)],
        window: Window,
        buf: &mut IoBuffer,
        each: &mut OnRange<'_>,
    ) -> io::Result<()> {
        let spans = ranges
            .iter()
            .map(|&(offset, len)| Span::of(geometry, offset, len))
            .collect::<io::Result<Vec<Span>>>()?;
        if let (Some(block), true) = (geometry.1, spans.len() > 1) {
            let largest = spans.iter().map(|s| s.request).max().unwrap_or(0);
            let total = spans
                .iter()
                .fold(0usize, |sum, s| sum.saturating_add(s.request));
            // The window's bytes (or the largest request, if larger): the memory bound the caller
            // chose. Where the ring wraps, the space left at its end waits for the next turn.
            let arena_len = window.bytes.max(largest).min(total);
            let memory = buf.clear_and_reserve_direct(arena_len)?;
            let arena = uring::Arena {
                start: memory.as_mut_ptr(),
                len: arena_len,
            };
            let requests: Vec<uring::Request> = spans
                .iter()
                .map(|span| uring::Request {
                    offset: span.first,
                    len: span.request,
                })
                .collect();
            let mut failed = None;
            let mut hand_over =
                |i: usize, memory: &mut [MaybeUninit<u8>], arrived: usize| match self
                    .complete(file, &spans[i], memory, arrived, block)
                {
                    Ok((bytes, fetched)) => each(i, bytes, fetched),
                    Err(error) => {
                        failed = Some(error);
                        ControlFlow::Break(())
                    }
                };
            match uring::read_in_order(file.as_raw_fd(), &requests, window, arena, &mut hand_over) {
                uring::Outcome::Done => return failed.map_or(Ok(()), Err),
                uring::Outcome::Failed(error) => return Err(failed.unwrap_or(error)),
                uring::Outcome::Stranded(error) => {
                    // The kernel may still write into this memory: it is given up, never
                    // reused or unmapped.
                    std::mem::forget(std::mem::take(buf));
                    return Err(error);
                }
                uring::Outcome::Unavailable => {}
            }
        }
        // Buffered, the kernel reads the window's ranges ahead at once, from this thread (whose
        // byte count it charges), and each `pread` then finds its pages arriving.
        let read_ahead = geometry.1.is_none() && spans.len() > 1;
        let (mut advised, mut ahead) = (0, 0);
        for (i, span) in spans.iter().enumerate() {
            while read_ahead
                && advised < spans.len()
                && advised < i + window.reads.max(1)
                && (advised == i || ahead + spans[advised].needed <= window.bytes)
            {
                advise_will_need(file, spans[advised].first, spans[advised].needed as u64)?;
                ahead += spans[advised].needed;
                advised += 1;
            }
            let read = self.read_planned(file, span, geometry.1, buf)?;
            ahead = ahead.saturating_sub(span.needed);
            if each(i, read.bytes(buf), read.fetched).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// The O_DIRECT read of `span` into `memory`, of which `arrived` bytes came: finished with
    /// `pread` where it came back short of the end of the range, evicted if asked; its bytes and
    /// the bytes the device moved.
    fn complete<'m>(
        &self,
        file: &File,
        span: &Span,
        memory: &'m mut [MaybeUninit<u8>],
        arrived: usize,
        block: usize,
    ) -> io::Result<(&'m [u8], u64)> {
        let mut done = arrived;
        if done < span.needed {
            if done % block != 0 {
                return Err(shrank());
            }
            done += read_at(
                file,
                span.first + done as u64,
                &mut memory[done..],
                span.needed - done,
                Some(block),
            )?;
        }
        let read = self.finish_span(file, span, done, Some(block))?;
        let bytes = &memory[read.start..read.start + read.len];
        // SAFETY: these bytes lie within the first `done` >= `needed` bytes, which the kernel
        // wrote; MaybeUninit<u8> and u8 have the same layout.
        let bytes = unsafe { &*(bytes as *const [MaybeUninit<u8>] as *const [u8]) };
        Ok((bytes, read.fetched))
    }
}

/// A file read whole and in order; with O_DIRECT every request is whole blocks into aligned
/// memory, the last one coming back short at the end of the file.
pub(super) struct SequentialReader {
    pub(super) file: File,
    pub(super) size: u64,
    pub(super) position: u64,
    pub(super) direct_block: Option<usize>,
    pub(super) evict_after_read: bool,
}

impl ObjectReader for SequentialReader {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_next(&mut self, buf: &mut IoBuffer, len: usize) -> io::Result<usize> {
        let wanted = (self.size - self.position.min(self.size)).min(len as u64) as usize;
        if wanted == 0 {
            // SAFETY: no bytes are claimed.
            unsafe { buf.set_len(0) };
            return Ok(0);
        }
        let request = match self.direct_block {
            Some(block) => wanted.next_multiple_of(block),
            None => wanted,
        };
        let memory = match self.direct_block {
            Some(_) => buf.clear_and_reserve_direct(request)?,
            None => buf.clear_and_reserve(request)?,
        };
        let fetched = read_at(&self.file, self.position, memory, wanted, self.direct_block)?;
        // SAFETY: read_at succeeded, so it wrote at least `wanted` bytes at the buffer's start.
        unsafe { buf.set_len(wanted) };
        if self.evict_after_read {
            evict_from_page_cache(&self.file, self.position, fetched as u64)?;
        }
        self.position += wanted as u64;
        Ok(wanted)
    }
}

/// One range read, laid out: what it asks of the file and where the range sits in the answer.
struct Span {
    /// Where the request starts in the file: with O_DIRECT the start of the block holding the
    /// range's start.
    first: u64,
    /// Bytes that must arrive: to the range's end, or the file's.
    needed: usize,
    /// Bytes asked for: `needed`, rounded up to whole blocks with O_DIRECT.
    request: usize,
    /// Where the range starts in the request, and its length (cut where the file ends).
    skip: usize,
    len: usize,
}

impl Span {
    /// Up to `limit` bytes from `offset` of a file of `(size, direct block)`.
    fn of(
        (size, direct_block): (u64, Option<usize>),
        offset: u64,
        limit: usize,
    ) -> io::Result<Span> {
        let too_large = || {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!("the read ({limit} bytes at {offset} of {size}) is too large for memory"),
            )
        };
        let start = offset.min(size);
        let end = start.saturating_add(limit as u64).min(size);
        // O_DIRECT moves whole blocks: the read starts at the block holding `start` and asks for
        // whole blocks; the kernel stops at the end of the file.
        let first = match direct_block {
            Some(block) => start / block as u64 * block as u64,
            None => start,
        };
        let needed = usize::try_from(end - first).map_err(|_| too_large())?;
        let request = match direct_block {
            Some(block) => needed
                .checked_next_multiple_of(block)
                .ok_or_else(too_large)?,
            None => needed,
        };
        Ok(Span {
            first,
            needed,
            request,
            skip: (start - first) as usize,
            len: (end - start) as usize,
        })
    }
}

fn shrank() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the file shrank while being read",
    )
}

/// Reads the file from `offset` into `into` until at least `needed` bytes have arrived, each
/// request asking for the rest of `into`. With O_DIRECT (`direct_block`), `offset` and `into` are
/// aligned to the block and every read returns whole blocks but the last one of the file.
fn read_at(
    file: &File,
    offset: u64,
    into: &mut [MaybeUninit<u8>],
    needed: usize,
    direct_block: Option<usize>,
) -> io::Result<usize> {
    let mut done = 0;
    while done < needed {
        let rest = &mut into[done..];
        let position = libc::off_t::try_from(offset + done as u64).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("offset {offset} + {done} is past what the system can address"),
            )
        })?;
        // SAFETY: the pointer and length describe `rest`, which is valid for writes; the kernel
        // writes at most that many bytes into it.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                rest.as_mut_ptr().cast(),
                rest.len(),
                position,
            )
        };
        match n {
            0 => return Err(shrank()),
            n if n < 0 => {
                let error = io::Error::last_os_error();
                if error.kind() != io::ErrorKind::Interrupted {
                    return Err(error);
                }
            }
            n => {
                done += n as usize;
                // A direct read that ends off a block boundary has met the end of the file.
                if done < needed && direct_block.is_some_and(|block| done % block != 0) {
                    return Err(shrank());
                }
            }
        }
    }
    Ok(done)
}
