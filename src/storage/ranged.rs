//! [`Storage::read_ranges`](super::Storage::read_ranges) for object stores, where each range is
//! a request of its own (a ranged GET): up to `window.reads` ranges (and `window.bytes`) fetched
//! at once, each on its own thread, handed over in order, a window at a time; and objects read
//! whole in order, a window of ranges ahead ([`Pieces`]). One loop of each for every
//! object-store backend; each gives the request that reads one range.

use std::collections::VecDeque;
use std::io;
use std::sync::Arc;
use std::thread::JoinHandle;

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

/// The request that reads one range `(offset, len)` into a buffer, owned by the threads that
/// read ahead.
pub(super) type SharedFetch =
    Arc<dyn Fn((u64, usize), &mut IoBuffer) -> io::Result<RangeRead> + Send + Sync>;

/// An object read whole in order ([`Storage::open_sequential`](super::Storage::open_sequential),
/// a checkpoint load), for stores whose reads are requests of their own: ranges of `range` bytes
/// (`part_size`: a checkpoint reader such as s3dlio's splits a large object so), up to `depth`
/// (`parts_in_flight`) of them in flight at once on threads of their own, from which the
/// caller's pieces are handed over in order. A load reads every byte of the object, so nothing
/// fetched ahead is wasted.
pub(super) struct Pieces {
    fetch: SharedFetch,
    /// The object, for messages.
    object: Arc<str>,
    size: u64,
    /// Where the next piece handed over starts.
    offset: u64,
    /// The range being handed over: its bytes, and how many of them are handed over already.
    current: Option<(IoBuffer, usize)>,
    /// Ranges being fetched, in order.
    ahead: VecDeque<JoinHandle<io::Result<IoBuffer>>>,
    /// Where the next range fetched starts.
    fetched_to: u64,
    range: usize,
    depth: usize,
}

impl Pieces {
    /// The object `object` of `size` bytes, read through `fetch` in ranges of `range` bytes,
    /// `depth` at once.
    pub(super) fn new(
        fetch: SharedFetch,
        object: String,
        size: u64,
        range: usize,
        depth: usize,
    ) -> Pieces {
        Pieces {
            fetch,
            object: object.into(),
            size,
            offset: 0,
            current: None,
            ahead: VecDeque::new(),
            fetched_to: 0,
            range: range.max(1),
            depth: depth.max(1),
        }
    }

    /// Starts fetching ranges until `depth` are in flight or the object ends.
    fn fetch_ahead(&mut self) -> io::Result<()> {
        while self.ahead.len() < self.depth && self.fetched_to < self.size {
            let offset = self.fetched_to;
            let len = self
                .range
                .min(usize::try_from(self.size - offset).unwrap_or(usize::MAX));
            let (fetch, object) = (Arc::clone(&self.fetch), Arc::clone(&self.object));
            let thread = std::thread::Builder::new()
                .name("range-read".into())
                .spawn(move || {
                    let mut own = IoBuffer::new();
                    let read = fetch((offset, len), &mut own)?;
                    if read.len != len {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!(
                                "{object} ended at {} bytes, its size was {}",
                                offset + read.len as u64,
                                offset + len as u64
                            ),
                        ));
                    }
                    Ok(own)
                })
                .map_err(|e| io::Error::other(format!("cannot start a read's thread: {e}")))?;
            self.ahead.push_back(thread);
            self.fetched_to += len as u64;
        }
        Ok(())
    }
}

impl super::ObjectReader for Pieces {
    fn size(&self) -> u64 {
        self.size
    }

    fn read_next(&mut self, buf: &mut IoBuffer, len: usize) -> io::Result<usize> {
        let len = len.min(usize::try_from(self.size - self.offset).unwrap_or(usize::MAX));
        let out = buf.resize_for_writing(len)?;
        let mut filled = 0;
        while filled < len {
            if self
                .current
                .as_ref()
                .is_none_or(|(range, used)| *used == range.len())
            {
                self.fetch_ahead()?;
                let next = self.ahead.pop_front().expect("the object has bytes left");
                let range = next
                    .join()
                    .unwrap_or_else(|_| Err(io::Error::other("a range read panicked")))?;
                self.current = Some((range, 0));
                // The next ranges are fetched while this one is handed over.
                self.fetch_ahead()?;
            }
            let (range, used) = self.current.as_mut().expect("taken above");
            let n = (len - filled).min(range.len() - *used);
            out[filled..filled + n].copy_from_slice(&range.as_slice()[*used..*used + n]);
            *used += n;
            filled += n;
        }
        self.offset += len as u64;
        Ok(len)
    }
}

impl Drop for Pieces {
    fn drop(&mut self) {
        for thread in self.ahead.drain(..) {
            let _ = thread.join();
        }
    }
}
