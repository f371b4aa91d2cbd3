//! [`Storage::read_ranges`](super::Storage::read_ranges) for object stores, where each range is
//! a request of its own (a ranged GET): up to `window.reads` ranges (and `window.bytes`) fetched
//! at once, each on its own thread, handed over in order, a window at a time. One loop for every
//! object-store backend; each gives the request that reads one range.

use std::io;

use super::{IoBuffer, OnRange, RangeRead, Window};

/// The request that reads one range `(offset, len)` into a buffer, callable from the window's
/// threads.
pub(super) type FetchRange<'a> =
    dyn Fn((u64, usize), &mut IoBuffer) -> io::Result<RangeRead> + Sync + 'a;

/// Reads `ranges` through `fetch(range, buffer)`, one request per range: a window of them at
/// once (a window of one into `buf`, larger ones into buffers of their own threads), each
/// handed to `each` in order; `Break` stops.
pub(super) fn read_ranges_by_requests(
    ranges: &[(u64, usize)],
    window: Window,
    buf: &mut IoBuffer,
    each: &mut OnRange<'_>,
    fetch: &FetchRange<'_>,
) -> io::Result<()> {
    let mut next = 0;
    while next < ranges.len() {
        let mut end = next + 1;
        let mut bytes = ranges[next].1;
        while end < ranges.len()
            && end - next < window.reads.max(1)
            && bytes + ranges[end].1 <= window.bytes
        {
            bytes += ranges[end].1;
            end += 1;
        }
        let batch = &ranges[next..end];
        if batch.len() == 1 {
            let read = fetch(batch[0], buf)?;
            if each(next, read.bytes(buf), read.fetched).is_break() {
                return Ok(());
            }
        } else {
            let results: Vec<io::Result<(IoBuffer, RangeRead)>> = std::thread::scope(|s| {
                let handles: Vec<_> = batch
                    .iter()
                    .map(|&range| {
                        s.spawn(move || {
                            let mut own = IoBuffer::new();
                            fetch(range, &mut own).map(|read| (own, read))
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join()
                            .unwrap_or_else(|_| Err(io::Error::other("a range read panicked")))
                    })
                    .collect()
            });
            for (i, result) in results.into_iter().enumerate() {
                let (own, read) = result?;
                if each(next + i, read.bytes(&own), read.fetched).is_break() {
                    return Ok(());
                }
            }
        }
        next = end;
    }
    Ok(())
}

/// An object read whole in order ([`Storage::open_sequential`](super::Storage::open_sequential)),
/// a ranged request per piece, for stores whose reads are requests of their own.
pub(super) struct Pieces<'s> {
    /// Reads one range of the object.
    pub fetch: Box<FetchRange<'s>>,
    /// The object, for messages.
    pub object: String,
    pub size: u64,
    pub offset: u64,
}

impl super::ObjectReader for Pieces<'_> {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_next(&mut self, buf: &mut IoBuffer, len: usize) -> io::Result<usize> {
        let left = self.size - self.offset;
        let len = len.min(usize::try_from(left).unwrap_or(usize::MAX));
        if len == 0 {
            buf.resize_for_writing(0)?;
            return Ok(0);
        }
        let read = (self.fetch)((self.offset, len), buf)?;
        if read.len != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{} ended at {} bytes, its size was {}",
                    self.object,
                    self.offset + read.len as u64,
                    self.size
                ),
            ));
        }
        self.offset += len as u64;
        Ok(len)
    }
}
