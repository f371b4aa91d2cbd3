//! Local and parallel file systems, read through the kernel's page cache or, with O_DIRECT, past
//! it. With O_DIRECT the kernel moves whole blocks between the device and memory: the buffer is
//! page-aligned and requests are rounded up to the file system's direct-I/O block, the last one
//! coming back short at the end of the file.

use std::cell::RefCell;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::mem::MaybeUninit;
use std::ops::ControlFlow;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::{
    fs_type, uring, Accounting, EntryKind, IoBuffer, Mapped, ObjectReader, ObjectWriter, OnRange,
    RangeRead, Storage, Window, FILES_HELD,
};
use crate::error::{Error, Result};

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
    /// Tells this storage's held files from another's ([`HeldFile`]).
    id: u64,
    /// The root, opened once: reads open files relative to it, so the kernel walks only the
    /// key's components and no path is allocated per read.
    root_dir: OnceLock<File>,
}

/// A file a thread holds ([`Storage::hold`]): opened once, read until the thread lets go of it
/// ([`Storage::release_all`], at the end of its phase) or holds [`FILES_HELD`] newer ones.
struct HeldFile {
    storage: u64,
    key: String,
    direct: bool,
    file: File,
    /// Its size and direct-I/O block, looked up once (a held file is not rewritten while read).
    geometry: (u64, Option<usize>),
}

thread_local! {
    /// The files this thread holds, the most recently taken last.
    static HELD: RefCell<Vec<HeldFile>> = const { RefCell::new(Vec::new()) };
}

impl LocalFs {
    /// `with` the held file at `key` read as `direct` asks, if this thread holds it.
    fn with_held<T>(
        &self,
        key: &str,
        direct: bool,
        with: impl FnOnce(&HeldFile) -> T,
    ) -> Option<T> {
        HELD.with(|held| {
            held.borrow()
                .iter()
                .rev()
                .find(|h| h.storage == self.id && h.direct == direct && h.key == key)
                .map(with)
        })
    }
}

/// Keys longer than this are opened by full path instead.
const MAX_RELATIVE_KEY: usize = 1024;

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

    /// Reads up to `limit` bytes of the file at `key` from `offset` (fewer where the file ends)
    /// into `buf`, with O_DIRECT if `direct`.
    fn read_span(
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
    fn geometry_of(
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
        let fetched = read_at(
            file,
            span.first,
            buf.clear_and_reserve(span.request)?,
            span.needed,
            direct_block,
        )?;
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
    fn read_spans_of(
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
            let memory = buf.clear_and_reserve(arena_len)?;
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

    /// Opens `key` to read it. Never waits: a FIFO where a data file should be would block an
    /// open until some writer came (O_NONBLOCK, which reads of regular files ignore); the
    /// file's geometry ([`LocalFs::geometry_of`]) then refuses it.
    fn open_for_reading(&self, key: &str, direct: bool) -> io::Result<File> {
        let flags = libc::O_NONBLOCK | if direct { libc::O_DIRECT } else { 0 };
        self.open_relative(key, libc::O_RDONLY | flags)
            .unwrap_or_else(|| {
                OpenOptions::new()
                    .read(true)
                    .custom_flags(flags)
                    .open(self.path(key))
            })
    }

    /// Opens `key` relative to the root's descriptor (no path is built), or None when that cannot
    /// be done (no root yet, a key too long) and the caller should open the full path.
    fn open_relative(&self, key: &str, flags: libc::c_int) -> Option<io::Result<File>> {
        if key.len() >= MAX_RELATIVE_KEY || key.as_bytes().contains(&0) {
            return None;
        }
        let dir = self.root_dir()?;
        let mut relative = [0u8; MAX_RELATIVE_KEY];
        relative[..key.len()].copy_from_slice(key.as_bytes());
        // SAFETY: `relative` is NUL-terminated (zeroed past the key) and outlives the call; the
        // mode argument is read only with O_CREAT.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                relative.as_ptr().cast(),
                flags | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Some(Err(io::Error::last_os_error()));
        }
        // SAFETY: a non-negative result of openat is a new descriptor that nothing else owns;
        // the File takes it over.
        Some(Ok(unsafe { File::from_raw_fd(fd) }))
    }

    /// The root, opened once it exists (generation may create it after the first call).
    fn root_dir(&self) -> Option<&File> {
        if let Some(dir) = self.root_dir.get() {
            return Some(dir);
        }
        let dir = File::open(&self.root).ok()?;
        Some(self.root_dir.get_or_init(|| dir))
    }

    /// Creates (or truncates) `key`; NotFound when its folder is missing.
    fn create_in_place(&self, key: &str) -> io::Result<File> {
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
        self.open_relative(key, flags).unwrap_or_else(|| {
            OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .open(self.path(key))
        })
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

/// A file being written with O_DIRECT. The kernel takes only whole blocks from aligned memory, so
/// bytes are gathered in an aligned staging buffer and written a full buffer at a time; the last
/// partial block goes through the page cache (O_DIRECT cleared) when the file is finished.
struct DirectFileWriter {
    file: File,
    block: usize,
    staged: IoBuffer,
    staged_len: usize,
}

/// How many bytes a direct writer gathers before it writes them: one request of this size.
const DIRECT_WRITE_BYTES: usize = 4 << 20;

impl DirectFileWriter {
    fn new(file: File, path: &Path) -> io::Result<DirectFileWriter> {
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

/// A file read whole and in order; with O_DIRECT every request is whole blocks into aligned
/// memory, the last one coming back short at the end of the file.
struct SequentialReader {
    file: File,
    size: u64,
    position: u64,
    direct_block: Option<usize>,
    evict_after_read: bool,
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
        let fetched = read_at(
            &self.file,
            self.position,
            buf.clear_and_reserve(request)?,
            wanted,
            self.direct_block,
        )?;
        // SAFETY: read_at succeeded, so it wrote at least `wanted` bytes at the buffer's start.
        unsafe { buf.set_len(wanted) };
        if self.evict_after_read {
            evict_from_page_cache(&self.file, self.position, fetched as u64)?;
        }
        self.position += wanted as u64;
        Ok(wanted)
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

fn is_direct_io_refusal(error: &io::Error) -> bool {
    error
        .get_ref()
        .is_some_and(|inner| inner.is::<DirectIoRefused>())
}

fn explain_direct_io_error_if(direct: bool, path: &Path, error: io::Error) -> io::Error {
    if direct {
        explain_direct_io_error(path, error)
    } else {
        error
    }
}

/// With O_DIRECT, EINVAL from open or read means that the file system does not do direct I/O
/// (our requests are aligned as statx asks), or that the file is no regular file (a FIFO); other
/// errors are what they say.
fn explain_direct_io_error(path: &Path, error: io::Error) -> io::Error {
    if error.raw_os_error() != Some(libc::EINVAL) {
        return error;
    }
    match fs::metadata(path) {
        Ok(found) if !found.is_file() => not_a_file(),
        _ => direct_io_refused(path, error),
    }
}

/// The size of an O_DIRECT file and the unit its offsets and lengths must be multiples of: the
/// file system's, where the kernel tells it (statx STATX_DIOALIGN), but never less than a page.
/// `path` names the file in a refusal; it is made only then, so reads allocate nothing.
/// The size of `file`, which must be a regular file (not a FIFO, device or socket).
pub(super) fn regular_file_len(file: &File) -> io::Result<u64> {
    let found = file.metadata()?;
    if !found.is_file() {
        return Err(not_a_file());
    }
    Ok(found.len())
}

/// What reading a FIFO, device or socket where a data file should be gives.
fn not_a_file() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a regular file (a FIFO, a device or a socket)",
    )
}

fn direct_io_geometry(file: &File, path: impl FnOnce() -> PathBuf) -> io::Result<(u64, usize)> {
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

/// Asks the kernel to start reading `len` bytes of the file from `offset` into the page cache, and
/// returns without waiting for them.
fn advise_will_need(file: &File, offset: u64, len: u64) -> io::Result<()> {
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
fn evict_from_page_cache(file: &File, offset: u64, len: u64) -> io::Result<()> {
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

/// A name no other writer (thread, rank or process) uses at the same time.
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

    fn size(&self, key: &str) -> io::Result<u64> {
        // A file a thread holds was measured when it was opened.
        match self.with_held(key, self.options.odirect, |h| h.geometry.0) {
            Some(size) => Ok(size),
            None => regular_file_len(&self.open_for_reading(key, false)?),
        }
    }

    fn hold(&self, key: &str) {
        let direct = self.options.odirect;
        let again = HELD.with(|held| {
            let mut held = held.borrow_mut();
            let found = held
                .iter()
                .position(|h| h.storage == self.id && h.direct == direct && h.key == key);
            found.map(|at| {
                let file = held.remove(at);
                held.push(file);
            })
        });
        if again.is_some() {
            return;
        }
        let opened = self.open_for_reading(key, direct).and_then(|file| {
            let geometry = self.geometry_of(&file, key, direct)?;
            if self.options.evict_after_read && !direct {
                // Pages left by whoever touched the file last (the generation, another run) would
                // serve this read; fio drops them too before a job. The kernel's counters show
                // any page this could not drop.
                let _ = evict_from_page_cache(&file, 0, 0);
            }
            Ok(HeldFile {
                storage: self.id,
                key: key.to_string(),
                direct,
                file,
                geometry,
            })
        });
        // A file that would not open is not held: its first read says why.
        if let Ok(file) = opened {
            HELD.with(|held| {
                let mut held = held.borrow_mut();
                if held.len() == FILES_HELD {
                    held.remove(0);
                }
                held.push(file);
            });
        }
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

    fn release_all(&self) {
        HELD.with(|held| held.borrow_mut().retain(|h| h.storage != self.id));
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
                if let Some(parent) = self.path(key).parent() {
                    // Tolerates a concurrent creator: ranks of a shared file system race here.
                    fs::create_dir_all(parent)?;
                }
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
        fs::create_dir_all(self.path(key))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_the_conformance_suite_buffered_direct_and_evicting() {
        for (name, options) in [
            ("buffered", LocalOptions::default()),
            ("O_DIRECT", DIRECT),
            (
                "evicting",
                LocalOptions {
                    odirect: false,
                    evict_after_read: true,
                },
            ),
        ] {
            let dir = scratch_dir(&format!("conformance-{}", name.to_lowercase()));
            super::super::conformance::run(name, &LocalFs::with_options(&dir, options));
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
    use crate::storage::scratch_dir;

    /// Bytes that differ from block to block, so that a misplaced block shows.
    fn pattern(len: usize) -> Vec<u8> {
        let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ len as u64;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }

    const DIRECT: LocalOptions = LocalOptions {
        odirect: true,
        evict_after_read: false,
    };

    #[test]
    fn put_writes_whole_files_that_read_all_list_dir_and_delete_see() {
        let dir = scratch_dir("local");
        let storage = LocalFs::new(&dir);
        storage.put("a/b/c.bin", b"hello").unwrap();
        storage.put("a/d.bin", b"hi").unwrap();
        let mut buf = IoBuffer::new();
        assert_eq!(storage.read_all("a/b/c.bin", &mut buf).unwrap().len, 5);
        assert_eq!(buf.as_slice(), b"hello");
        let mut listed = Vec::new();
        storage
            .list_dir("a", &mut |name, kind| listed.push((name.to_string(), kind)))
            .unwrap();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            listed,
            [
                ("b".to_string(), EntryKind::Folder),
                ("d.bin".to_string(), EntryKind::File)
            ]
        );
        assert!(storage.exists("a/d.bin").unwrap());
        assert!(!storage.exists("a/e.bin").unwrap());
        storage.put("a/d.bin", b"x").unwrap();
        assert_eq!(storage.read_all("a/d.bin", &mut buf).unwrap().len, 1);
        assert!(storage.delete("a/d.bin").unwrap());
        assert!(!storage.delete("a/d.bin").unwrap());
        assert!(storage.read_all("a/e.bin", &mut buf).is_err());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn direct_reads_return_exactly_the_files_bytes_into_one_reused_buffer() {
        let dir = scratch_dir("odirect");
        let buffered = LocalFs::new(&dir);
        let direct = LocalFs::with_options(&dir, DIRECT);
        let sizes = [0, 1, 511, 4095, 4096, 4097, (1 << 20) + 3];
        for size in sizes {
            buffered
                .put(&format!("{size}.bin"), &pattern(size))
                .unwrap();
        }
        let mut direct_buf = IoBuffer::new();
        let mut buffered_buf = IoBuffer::new();
        let mut largest_allocation = None;
        // Ascending, then descending: the buffer serves a larger file after a smaller one and
        // the other way round.
        for size in sizes.into_iter().chain(sizes.into_iter().rev()) {
            let key = format!("{size}.bin");
            assert_eq!(direct.read_all(&key, &mut direct_buf).unwrap().len, size);
            assert_eq!(
                buffered.read_all(&key, &mut buffered_buf).unwrap().len,
                size
            );
            assert_eq!(direct_buf.as_slice(), buffered_buf.as_slice(), "{size}");
            assert_eq!(direct_buf.as_slice(), &pattern(size)[..], "{size}");
            let start = direct_buf.as_slice().as_ptr();
            if direct_buf.capacity() > 0 {
                assert_eq!(start as usize % IoBuffer::ALIGNMENT, 0);
            }
            if size == sizes[sizes.len() - 1] {
                largest_allocation = Some(start);
            } else if let Some(largest) = largest_allocation {
                assert_eq!(
                    start, largest,
                    "the buffer was reallocated for {size} bytes"
                );
            }
        }
        assert_eq!(
            direct_buf.capacity(),
            ((1 << 20) + 3usize).next_multiple_of(4096)
        );
        direct.check_direct_io("4097.bin").unwrap();
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_refused_o_direct_says_what_to_set() {
        // procfs refuses O_DIRECT on open, as some FUSE and network file systems do.
        let proc = LocalFs::with_options("/proc", DIRECT);
        match proc.check_direct_io("version") {
            Err(Error::Usage(message)) => {
                assert!(message.starts_with("the file system of /proc/version refuses O_DIRECT (reader.odirect: True): "), "{message}");
                assert!(message.ends_with("; set ++workload.reader.odirect=False or use ++workload.reader.page_cache=evict_after_read"), "{message}");
            }
            other => panic!("O_DIRECT on /proc gave {other:?}"),
        }
        let error = proc.read_all("version", &mut IoBuffer::new()).unwrap_err();
        assert!(error.to_string().contains("refuses O_DIRECT"), "{error}");

        let path = Path::new("/data/x.npz");
        let refused = explain_direct_io_error(path, io::Error::from_raw_os_error(libc::EINVAL));
        assert!(is_direct_io_refusal(&refused));
        let failed = explain_direct_io_error(path, io::Error::from_raw_os_error(libc::EIO));
        assert!(!is_direct_io_refusal(&failed));
        assert_eq!(failed.raw_os_error(), Some(libc::EIO));
    }

    #[test]
    fn other_o_direct_failures_are_run_errors_naming_the_file() {
        let dir = scratch_dir("odirect-missing");
        match LocalFs::with_options(&dir, DIRECT).check_direct_io("absent.npz") {
            Err(error @ Error::Io { .. }) => {
                assert_eq!(error.exit_code(), 1);
                assert_eq!(
                    error.io_error().map(io::Error::kind),
                    Some(io::ErrorKind::NotFound)
                );
                let message = error.to_string();
                assert!(
                    message.contains(&*dir.join("absent.npz").to_string_lossy()),
                    "{message}"
                )
            }
            other => panic!("a missing file gave {other:?}"),
        }
    }

    /// Pages of the file at `path` that are in the page cache.
    fn resident_pages(path: &Path) -> usize {
        let file = File::open(path).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: sysconf only reads a constant of the system.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        // SAFETY: a new read-only shared mapping of an open file, which touches no page of it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        let mut residency = vec![0u8; len.div_ceil(page)];
        // SAFETY: `map` covers `len` bytes and `residency` has a byte for each page of them.
        let status = unsafe { libc::mincore(map, len, residency.as_mut_ptr()) };
        // SAFETY: unmaps exactly the mapping made above, which nothing refers to any more.
        unsafe { libc::munmap(map, len) };
        assert_eq!(status, 0, "mincore: {}", io::Error::last_os_error());
        residency.iter().filter(|&&page| page & 1 != 0).count()
    }

    /// Ranges read together (through io_uring with O_DIRECT, read ahead together buffered) are
    /// handed over in order, each the file's bytes, cut where the file ends, costing what a read
    /// of it alone costs (its bytes, or with O_DIRECT its whole blocks), in memory bounded by the
    /// window, however small; `Break` stops the reads.
    #[test]
    fn ranges_read_together_are_handed_over_in_order_as_the_files_bytes() {
        let dir = scratch_dir("ranges");
        let data = pattern(10 * 4096 + 100);
        let len = data.len();
        LocalFs::new(&dir).put("f.bin", &data).unwrap();
        LocalFs::new(&dir).sync().unwrap();
        // Overlapping, unordered, empty, cut by the end, past the end, and many (more than a
        // ring holds in flight).
        let mut ranges = vec![
            (5000, 3000),
            (0, 10),
            (40_000, 10_000),
            (4096, 8192),
            (41_000, 0),
            (50_000, 5),
            (100, 20_000),
        ];
        ranges.extend((0..40).map(|i| (i * 1000 + 7, 999 + i as usize * 100)));
        let largest = 20_000usize.next_multiple_of(4096) + 4096;
        let windows = [
            Window {
                reads: 8,
                bytes: 1 << 20,
            },
            // Wraps around its memory, and waits for room.
            Window {
                reads: 3,
                bytes: 9000,
            },
            Window { reads: 0, bytes: 0 },
        ];
        for (direct, evict_after_read) in [(false, false), (true, false), (false, true)] {
            let options = LocalOptions {
                odirect: direct,
                evict_after_read,
            };
            let storage = LocalFs::with_options(&dir, options);
            for (window, held) in windows.iter().flat_map(|w| [(w, false), (w, true)]) {
                if held {
                    storage.hold("f.bin");
                }
                let what = format!("{options:?}, {window:?}, held {held}");
                let mut buf = IoBuffer::new();
                let mut handed = Vec::new();
                storage
                    .read_ranges(
                        "f.bin",
                        &ranges,
                        *window,
                        &mut buf,
                        &mut |i, bytes, fetched| {
                            handed.push((i, bytes.to_vec(), fetched));
                            ControlFlow::Continue(())
                        },
                    )
                    .unwrap();
                assert_eq!(handed.len(), ranges.len(), "{what}");
                for ((&(offset, asked), (i, bytes, fetched)), at) in
                    ranges.iter().zip(&handed).zip(0..)
                {
                    let start = (offset as usize).min(len);
                    let end = (start + asked).min(len);
                    assert_eq!(*i, at, "{what}: in order");
                    assert!(bytes[..] == data[start..end], "{what}: {asked} at {offset}");
                    let cost = if direct {
                        let first = start / 4096 * 4096;
                        ((end - first).next_multiple_of(4096).min(len - first))
                            .next_multiple_of(4096)
                    } else {
                        end - start
                    };
                    assert_eq!(*fetched, cost as u64, "{what}: {asked} at {offset}");
                }
                let bound = window.bytes.max(largest);
                assert!(buf.capacity() <= bound.next_multiple_of(4096), "{what}");
                if evict_after_read {
                    // Eviction drops whole pages, so the ends of ranges stay until the reader
                    // moves off the file.
                    storage.release("f.bin").unwrap();
                    assert_eq!(resident_pages(&dir.join("f.bin")), 0, "{what}");
                }
                // Stopped after the fifth range: nothing more is handed over, and all is well.
                let mut count = 0;
                storage
                    .read_ranges("f.bin", &ranges, *window, &mut buf, &mut |_, _, _| {
                        count += 1;
                        if count == 5 {
                            ControlFlow::Break(())
                        } else {
                            ControlFlow::Continue(())
                        }
                    })
                    .unwrap();
                assert_eq!(count, 5, "{what}");
                storage.release_all();
            }
        }
        let missing = LocalFs::new(&dir)
            .read_ranges(
                "none.bin",
                &ranges,
                windows[0],
                &mut IoBuffer::new(),
                &mut |_, _, _| ControlFlow::Continue(()),
            )
            .unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn evict_after_read_leaves_no_page_of_the_file_cached() {
        let dir = scratch_dir("evict");
        let plain = LocalFs::new(&dir);
        let evicting = LocalFs::with_options(
            &dir,
            LocalOptions {
                odirect: false,
                evict_after_read: true,
            },
        );
        let data = pattern(1 << 20);
        plain.put("f.bin", &data).unwrap();
        // Written pages stay dirty until flushed, and dirty pages cannot be evicted.
        plain.sync().unwrap();
        let path = dir.join("f.bin");
        // SAFETY: sysconf only reads a constant of the system.
        let pages = data.len() / unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
        let mut buf = IoBuffer::new();
        plain.read_all("f.bin", &mut buf).unwrap();
        assert_eq!(resident_pages(&path), pages, "a plain read caches the file");
        evicting.read_all("f.bin", &mut buf).unwrap();
        assert_eq!(buf.as_slice(), &data[..]);
        assert_eq!(
            resident_pages(&path),
            0,
            "evict_after_read left pages cached"
        );
        plain.read_all("f.bin", &mut buf).unwrap();
        assert_eq!(
            resident_pages(&path),
            pages,
            "a plain read caches the file again"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    /// Writes `data` through `storage`'s writer in pieces of `piece` bytes.
    fn write_in_pieces(storage: &LocalFs, key: &str, data: &[u8], piece: usize, durably: bool) {
        let mut object = storage.create(key).unwrap();
        for chunk in data.chunks(piece.max(1)) {
            object.write(chunk).unwrap();
        }
        if durably {
            object.finish_durably().unwrap();
        } else {
            object.finish().unwrap();
        }
    }

    #[test]
    fn direct_writes_and_sequential_reads_keep_every_byte_in_place() {
        let dir = scratch_dir("direct-write");
        let buffered = LocalFs::new(&dir);
        let direct_writer = LocalFs::new(&dir).writing_direct();
        let direct_reader = LocalFs::with_options(&dir, DIRECT);
        // Sizes around the block and the staging buffer, written in pieces that straddle both.
        let sizes = [
            0,
            1,
            4095,
            4096,
            4097,
            DIRECT_WRITE_BYTES + 4097,
            3 * DIRECT_WRITE_BYTES,
        ];
        for (i, size) in sizes.into_iter().enumerate() {
            let data = pattern(size);
            let key = format!("d/{size}.bin");
            write_in_pieces(
                &direct_writer,
                &key,
                &data,
                [1000, 4096, 1 << 20][i % 3],
                i % 2 == 0,
            );
            if size > 0 && size % 4096 == 0 {
                // Whole blocks went past the page cache.
                assert_eq!(
                    resident_pages(&dir.join(&key)),
                    0,
                    "{size} bytes were cached"
                );
            }
            for (reader, piece) in [(&buffered, 65536), (&direct_reader, 1 << 20)] {
                let mut object = reader.open_sequential(&key).unwrap();
                assert_eq!(object.size(), size as u64);
                let mut buf = IoBuffer::new();
                let mut read = Vec::new();
                loop {
                    let n = object.read_next(&mut buf, piece).unwrap();
                    if n == 0 {
                        break;
                    }
                    assert_eq!(buf.len(), n);
                    read.extend_from_slice(buf.as_slice());
                }
                assert!(read == data, "{size} bytes in pieces of {piece}");
            }
        }
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_held_file_is_read_without_opening_it_again_until_the_thread_lets_go() {
        let dir = scratch_dir("held");
        let storage = LocalFs::new(&dir);
        let data = pattern(3 * 4096);
        storage.put("a.bin", &data).unwrap();
        storage.put("b.bin", &data).unwrap();
        storage.hold("a.bin");
        let mut buf = IoBuffer::new();
        let read = storage.read_range("a.bin", 4096, 4096, &mut buf).unwrap();
        assert!(read.bytes(&buf) == &data[4096..8192]);
        // Unlinked, the file is still read: through the descriptor held, not a new open.
        fs::remove_file(dir.join("a.bin")).unwrap();
        let read = storage.read_range("a.bin", 8192, 4096, &mut buf).unwrap();
        assert!(read.bytes(&buf) == &data[8192..]);
        // Another thread holds nothing: it opens the path, which is gone.
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut buf = IoBuffer::new();
                let gone = storage.read_range("a.bin", 0, 10, &mut buf).unwrap_err();
                assert_eq!(gone.kind(), io::ErrorKind::NotFound);
            });
        });
        // Another key, or another storage on the same folder, is opened as usual.
        assert_eq!(storage.read_all("b.bin", &mut buf).unwrap().len, data.len());
        let other = LocalFs::new(&dir);
        let gone = other.read_range("a.bin", 0, 10, &mut buf).unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound);
        // Moving off the file keeps it open, for a reader that comes back to it.
        storage.release("a.bin").unwrap();
        assert_eq!(
            storage.read_range("a.bin", 0, 10, &mut buf).unwrap().len,
            10
        );
        storage.release_all();
        let gone = storage.read_range("a.bin", 0, 10, &mut buf).unwrap_err();
        assert_eq!(gone.kind(), io::ErrorKind::NotFound, "let go: opened again");

        // A thread holds its last FILES_HELD files; holding one more closes the oldest.
        storage.put("a.bin", &data).unwrap();
        let keys: Vec<String> = (0..=FILES_HELD).map(|i| format!("f{i}.bin")).collect();
        for key in &keys {
            storage.put(key, &data).unwrap();
        }
        storage.hold("a.bin");
        for key in &keys[1..] {
            storage.hold(key);
        }
        // Taking a held file again makes it the newest: f1 goes when f0 comes.
        storage.hold("a.bin");
        storage.hold(&keys[0]);
        for key in ["a.bin", &keys[0], &keys[1]] {
            fs::remove_file(dir.join(key)).unwrap();
        }
        assert!(storage.read_range("a.bin", 0, 10, &mut buf).is_ok());
        assert!(storage.read_range(&keys[0], 0, 10, &mut buf).is_ok());
        let closed = storage.read_range(&keys[1], 0, 10, &mut buf).unwrap_err();
        assert_eq!(closed.kind(), io::ErrorKind::NotFound, "the oldest closed");
        storage.release_all();
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn evict_drops_a_freshly_written_file_from_the_page_cache() {
        let dir = scratch_dir("evict-written");
        let storage = LocalFs::new(&dir);
        let data = pattern(1 << 20);
        write_in_pieces(&storage, "f.bin", &data, 1 << 16, false);
        let path = dir.join("f.bin");
        assert!(resident_pages(&path) > 0, "a written file is cached");
        // Its pages are dirty: evict writes them back first, then drops them.
        storage.evict("f.bin").unwrap();
        assert_eq!(resident_pages(&path), 0, "evict left pages cached");
        let mut buf = IoBuffer::new();
        storage.read_all("f.bin", &mut buf).unwrap();
        assert!(buf.as_slice() == &data[..]);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn accounting_follows_o_direct_and_the_file_system() {
        // Not created: the nearest existing ancestor, on the build's disk, decides.
        let on_disk = scratch_dir("accounting").join("not/generated/yet");
        assert_eq!(
            LocalFs::new(&on_disk).accounting(),
            Accounting::KernelCounters
        );
        assert_eq!(
            LocalFs::with_options(&on_disk, DIRECT).accounting(),
            Accounting::Exact
        );
        assert_eq!(
            LocalFs::new("/dev/shm/dlio-rs-not-generated").accounting(),
            Accounting::InMemory
        );
        assert_eq!(
            LocalFs::with_options("/dev/shm", DIRECT).accounting(),
            Accounting::InMemory
        );
        assert!(matches!(
            LocalFs::new("/proc").accounting(),
            Accounting::Unaccounted(_)
        ));
    }

    #[test]
    fn sync_names_a_missing_root() {
        let missing = scratch_dir("sync-missing");
        let error = LocalFs::new(&missing).sync().unwrap_err();
        assert!(
            error.to_string().contains(&*missing.to_string_lossy()),
            "{error}"
        );
    }
}
