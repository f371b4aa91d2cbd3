//! A storage of known speed (`storage.throttle`): another storage behind an emulated link of a
//! fixed bandwidth and latency, as object_store's `ThrottledStore` puts one in front of a store.
//! It makes a storage whose answer is known (how many accelerators a 200 MiB/s link keeps busy)
//! out of any folder, so that a sweep, or a person, can check what dlio-rs concludes.
//!
//! The link carries one transfer at a time at `bytes_per_second`, in the order they ask for it,
//! reads and writes alike; each request then waits `latency` more, in parallel with the others
//! (the link's round trip). A transfer of `n` bytes asked for at `t` thus ends at
//! `max(t, link free) + n / bandwidth + latency`.

use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{
    Accounting, EntryKind, IoBuffer, Mapped, ObjectReader, ObjectWriter, OnRange, RangeRead,
    RequestCounts, Storage, Window,
};

/// The link's speed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Bytes per second it carries.
    pub bytes_per_second: f64,
    /// The wait added to every request.
    pub latency: Duration,
}

pub struct Throttled {
    inner: Box<dyn Storage>,
    link: Link,
    /// When the link is free again.
    free_at: Mutex<Instant>,
}

impl Throttled {
    pub fn new(inner: Box<dyn Storage>, link: Link) -> Throttled {
        Throttled {
            inner,
            link,
            free_at: Mutex::new(Instant::now()),
        }
    }

    /// Waits as moving `bytes` over the link takes, from now.
    fn carry(&self, bytes: u64) {
        let transfer = Duration::from_secs_f64(bytes as f64 / self.link.bytes_per_second);
        let done = {
            let mut free_at = self.free_at.lock().unwrap_or_else(|e| e.into_inner());
            let start = (*free_at).max(Instant::now());
            *free_at = start + transfer;
            *free_at
        };
        crate::interrupt::sleep_until(done + self.link.latency);
    }
}

impl Storage for Throttled {
    fn describe(&self, key: &str) -> String {
        self.inner.describe(key)
    }

    fn read_all(&self, key: &str, buf: &mut IoBuffer) -> io::Result<RangeRead> {
        let read = self.inner.read_all(key, buf)?;
        self.carry(read.fetched);
        Ok(read)
    }

    fn read_range(
        &self,
        key: &str,
        offset: u64,
        len: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        let read = self.inner.read_range(key, offset, len, buf)?;
        self.carry(read.fetched);
        Ok(read)
    }

    fn read_ranges(
        &self,
        key: &str,
        ranges: &[(u64, usize)],
        window: Window,
        buf: &mut IoBuffer,
        each: &mut OnRange<'_>,
    ) -> io::Result<()> {
        self.inner
            .read_ranges(key, ranges, window, buf, &mut |i, bytes, fetched| {
                self.carry(fetched);
                each(i, bytes, fetched)
            })
    }

    fn read_tail(&self, key: &str, len: usize, buf: &mut IoBuffer) -> io::Result<(RangeRead, u64)> {
        let (read, size) = self.inner.read_tail(key, len, buf)?;
        self.carry(read.fetched);
        Ok((read, size))
    }

    /// Pages of a mapping are read as they are touched, past any wrapper: refused, as for an
    /// object store, so that no read escapes the link.
    fn map_range(&self, key: &str, _offset: u64, _len: usize) -> io::Result<Mapped> {
        Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{} cannot be mapped through storage.throttle: its reads would bypass the link",
                self.describe(key)
            ),
        ))
    }

    fn hold(&self, key: &str) {
        self.inner.hold(key);
    }

    fn put_if(
        &self,
        key: &str,
        data: &[u8],
        condition: super::Condition<'_>,
    ) -> io::Result<Option<String>> {
        self.inner.put_if(key, data, condition)
    }

    fn get_tagged(&self, key: &str, limit: usize) -> io::Result<Option<(Vec<u8>, String)>> {
        self.inner.get_tagged(key, limit)
    }

    fn delete_if(&self, key: &str, tag: &str) -> io::Result<bool> {
        self.inner.delete_if(key, tag)
    }

    fn release(&self, key: &str) -> io::Result<()> {
        self.inner.release(key)
    }

    fn let_go(&self, key: &str) {
        self.inner.let_go(key)
    }

    fn release_all(&self) {
        self.inner.release_all();
    }

    fn check_access(&self, create: bool) -> crate::error::Result<()> {
        self.inner.check_access(create)
    }

    fn writers(&self) -> Option<usize> {
        self.inner.writers()
    }

    fn request_counts(&self) -> Option<RequestCounts> {
        self.inner.request_counts()
    }

    fn local_root(&self) -> Option<&std::path::Path> {
        self.inner.local_root()
    }

    fn check_reads(&self, key: &str) -> crate::error::Result<()> {
        self.inner.check_reads(key)
    }

    fn size(&self, key: &str) -> io::Result<u64> {
        self.inner.size(key)
    }

    fn create(&self, key: &str) -> io::Result<Box<dyn ObjectWriter + '_>> {
        Ok(Box::new(ThrottledWriter {
            link: self,
            inner: self.inner.create(key)?,
        }))
    }

    fn open_sequential(&self, key: &str) -> io::Result<Box<dyn ObjectReader + '_>> {
        Ok(Box::new(ThrottledReader {
            link: self,
            inner: self.inner.open_sequential(key)?,
        }))
    }

    fn evict(&self, key: &str) -> io::Result<()> {
        self.inner.evict(key)
    }

    fn exists(&self, key: &str) -> io::Result<bool> {
        self.inner.exists(key)
    }

    fn make_folder(&self, key: &str) -> io::Result<()> {
        self.inner.make_folder(key)
    }

    fn renames(&self) -> bool {
        self.inner.renames()
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn remove_folder(&self, key: &str) -> io::Result<()> {
        self.inner.remove_folder(key)
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        self.inner.delete(key)
    }

    fn list_dir(&self, prefix: &str, each: &mut dyn FnMut(&str, EntryKind)) -> io::Result<()> {
        self.inner.list_dir(prefix, each)
    }

    /// Every byte read crossed the link, whatever served it behind.
    fn accounting(&self) -> Accounting {
        Accounting::Emulated
    }

    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
}

struct ThrottledWriter<'t> {
    link: &'t Throttled,
    inner: Box<dyn ObjectWriter + 't>,
}

impl ObjectWriter for ThrottledWriter<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write(bytes)?;
        self.link.carry(bytes.len() as u64);
        Ok(())
    }

    fn finish(self: Box<Self>) -> io::Result<()> {
        self.inner.finish()
    }

    fn finish_durably(self: Box<Self>) -> io::Result<()> {
        self.inner.finish_durably()
    }
}

struct ThrottledReader<'t> {
    link: &'t Throttled,
    inner: Box<dyn ObjectReader + 't>,
}

impl ObjectReader for ThrottledReader<'_> {
    fn size(&self) -> u64 {
        self.inner.size()
    }

    fn read_next(&mut self, buf: &mut IoBuffer, len: usize) -> io::Result<usize> {
        let n = self.inner.read_next(buf, len)?;
        self.link.carry(n as u64);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{scratch_dir, LocalFs};

    #[test]
    fn a_throttled_storage_passes_the_conformance_suite() {
        let dir = scratch_dir("throttled-conformance");
        std::fs::create_dir_all(&dir).unwrap();
        let link = Link {
            bytes_per_second: 1e9,
            latency: Duration::ZERO,
        };
        crate::storage::conformance::run(
            "throttled",
            &Throttled::new(Box::new(LocalFs::new(&dir)), link),
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// 8 threads read 1 MiB each through a 4 MiB/s link with 100 ms of latency: the link is busy
    /// 2 s, and the last read ends at 2.1 s; none ends before its share of the link and the
    /// latency.
    #[test]
    fn the_link_carries_one_transfer_at_a_time_at_its_bandwidth() {
        let dir = scratch_dir("throttled-link");
        std::fs::create_dir_all(&dir).unwrap();
        let local = LocalFs::new(&dir);
        local.put("one.bin", &vec![7u8; 1 << 20]).unwrap();
        let link = Link {
            bytes_per_second: 4.0 * (1 << 20) as f64,
            latency: Duration::from_millis(100),
        };
        let throttled = Throttled::new(Box::new(local), link);
        let started = Instant::now();
        let mut ends: Vec<Duration> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        let mut buf = IoBuffer::new();
                        throttled.read_all("one.bin", &mut buf).unwrap();
                        started.elapsed()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        ends.sort();
        for (i, end) in ends.iter().enumerate() {
            // The (i+1)-th transfer to finish cannot end before i+1 quarter seconds + latency.
            let earliest = Duration::from_millis(250 * (i as u64 + 1) + 100);
            assert!(
                *end >= earliest,
                "read {i} ended at {end:?}, before {earliest:?}"
            );
        }
        assert!(ends[7] < Duration::from_secs(4), "{ends:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
