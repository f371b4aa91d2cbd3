//! Range reads of an HDF5 file's metadata, and the structures every object shares: the
//! superblock and object headers (with their continuation blocks).
//!
//! Metadata is fetched in windows of at least [`WINDOW`] bytes and kept for the rest of one
//! sample's read, so the superblock, the root group and the datasets' headers, which writers put
//! next to each other, usually cost one read; anything outside a window costs one more.

use std::fmt::Display;

use super::checksum::lookup3;
use super::SIGNATURE;
use crate::error::{Error, Result};
use crate::format::{cannot_read, corrupt, read_exact_range, ReadBuffer};
use crate::storage::Storage;

/// The smallest metadata read: a page, as the first read of a file.
const WINDOW: usize = 4096;
/// Larger metadata objects than this are taken for corruption rather than read.
const MAX_METADATA: usize = 64 << 20;
/// Bounds on walks a corrupt file could make endless or huge.
const MAX_CONTINUATIONS: usize = 10_000;

/// Why a structure could not be used: a damaged file, or a valid one using something this reader
/// does not implement.
#[derive(Debug)]
pub(super) enum Problem {
    Corrupt(String),
    Unsupported(String),
}

pub(super) type Parsed<T> = std::result::Result<T, Problem>;

fn bad<T>(why: impl Into<String>) -> Parsed<T> {
    Err(Problem::Corrupt(why.into()))
}

pub(super) fn unsupported<T>(why: impl Into<String>) -> Parsed<T> {
    Err(Problem::Unsupported(why.into()))
}

/// Names the file in errors; copied out of [`Io`] so errors can be made while its bytes are
/// borrowed.
#[derive(Clone, Copy)]
pub(super) struct Namer<'a> {
    storage: &'a dyn Storage,
    key: &'a str,
}

impl Namer<'_> {
    pub fn corrupt(&self, why: impl Display) -> Error {
        corrupt(self.storage, self.key, why)
    }

    /// The error for `problem`, met while reading `what`.
    pub fn error(&self, what: impl Display, problem: Problem) -> Error {
        match problem {
            Problem::Corrupt(why) => self.corrupt(format!("{what}: {why}")),
            Problem::Unsupported(why) => Error::run(format!(
                "cannot read data file {}: {what}: {why}, which dlio-rs's HDF5 reader does not support",
                self.storage.describe(self.key)
            )),
        }
    }
}

struct Window {
    start: u64,
    bytes: Vec<u8>,
}

/// Metadata windows, reused from sample to sample (their memory, never their contents).
#[derive(Default)]
pub(super) struct Windows {
    list: Vec<Window>,
    used: usize,
}

/// Sizes of addresses and lengths in the file (from the superblock); copied out of [`Io`] so
/// parsers can use them while its bytes are borrowed.
#[derive(Clone, Copy)]
pub(super) struct Sizes {
    pub offset: u8,
    pub length: u8,
}

impl Sizes {
    pub fn cursor(self, bytes: &[u8]) -> Cursor<'_> {
        Cursor {
            bytes,
            pos: 0,
            sizes: self,
        }
    }
}

/// A file's superblock facts ([`Io::layout`]).
#[derive(Clone, Copy)]
pub(super) struct FileLayout {
    sizes: Sizes,
    base: u64,
    eof: u64,
}

/// One sample's reads from one file: metadata through windows, data straight into the buffer.
pub(super) struct Io<'a> {
    storage: &'a dyn Storage,
    key: &'a str,
    buf: &'a mut ReadBuffer,
    windows: &'a mut Windows,
    /// Bytes taken from storage so far.
    pub fetched: u64,
    /// Check metadata checksums.
    pub verify: bool,
    pub sizes: Sizes,
    base: u64,
    /// End of the file's data per its superblock (relative to `base`).
    eof: u64,
    /// The file's length, once a read has come back short.
    file_len: Option<u64>,
}

impl<'a> Io<'a> {
    pub fn new(
        storage: &'a dyn Storage,
        key: &'a str,
        buf: &'a mut ReadBuffer,
        windows: &'a mut Windows,
        verify: bool,
    ) -> Io<'a> {
        windows.used = 0;
        Io {
            storage,
            key,
            buf,
            windows,
            fetched: 0,
            verify,
            sizes: Sizes {
                offset: 8,
                length: 8,
            },
            base: 0,
            eof: u64::MAX,
            file_len: None,
        }
    }

    /// What the superblock told: the sizes of offsets and lengths, and where the file's data
    /// begins and ends; kept by a reader for the file in hand.
    pub fn layout(&self) -> FileLayout {
        FileLayout {
            sizes: self.sizes,
            base: self.base,
            eof: self.eof,
        }
    }

    /// Takes up what an earlier read of the same file learnt from its superblock.
    pub fn resume(&mut self, layout: FileLayout) {
        self.sizes = layout.sizes;
        self.base = layout.base;
        self.eof = layout.eof;
    }

    pub fn namer(&self) -> Namer<'a> {
        Namer {
            storage: self.storage,
            key: self.key,
        }
    }

    /// The absolute offset of `len` bytes at file address `address`, checked against the end
    /// of the file the superblock gives.
    fn locate(&self, address: u64, len: usize, what: &dyn Display) -> Result<u64> {
        let beyond = || {
            self.namer().corrupt(format!(
                "{what}: {len} bytes at address {address} lie beyond the end of the file's data ({} bytes)",
                self.eof
            ))
        };
        let end = address.checked_add(len as u64).ok_or_else(beyond)?;
        if end > self.eof {
            return Err(beyond());
        }
        address.checked_add(self.base).ok_or_else(beyond)
    }

    /// `len` bytes of metadata at `address`, from a window already read or a new one.
    pub fn meta(&mut self, address: u64, len: usize, what: &dyn Display) -> Result<&[u8]> {
        if len > MAX_METADATA {
            return Err(self.namer().corrupt(format!(
                "{what}: a metadata object of {len} bytes at address {address} is implausibly large"
            )));
        }
        let start = self.locate(address, len, what)?;
        let end = start + len as u64;
        let found = self.windows.list[..self.windows.used]
            .iter()
            .position(|w| w.start <= start && end <= w.start + w.bytes.len() as u64);
        let index = match found {
            Some(index) => index,
            None => self.read_window(start, len, what)?,
        };
        let window = &self.windows.list[index];
        let from = (start - window.start) as usize;
        Ok(&window.bytes[from..from + len])
    }

    /// Like [`Io::meta`], for an object ending in a checksum, checked with `verify`.
    pub fn checked(&mut self, address: u64, len: usize, what: &dyn Display) -> Result<&[u8]> {
        let (verify, namer) = (self.verify, self.namer());
        let bytes = self.meta(address, len, what)?;
        if verify {
            check_sum(bytes).map_err(|why| namer.corrupt(format!("{what}: {why}")))?;
        }
        Ok(bytes)
    }

    fn read_window(&mut self, start: u64, len: usize, what: &dyn Display) -> Result<usize> {
        let file_end = self.eof.saturating_add(self.base);
        let want = (len.max(WINDOW) as u64)
            .min(file_end.saturating_sub(start))
            .max(len as u64) as usize;
        let read = self
            .storage
            .read_range(self.key, start, want, &mut self.buf.bytes)
            .map_err(|e| cannot_read(self.storage, self.key, e))?;
        self.fetched += read.fetched;
        if read.len < want {
            self.file_len = Some(start + read.len as u64);
        }
        if read.len < len {
            return Err(self.namer().corrupt(format!(
                "{what}: truncated: {len} bytes are needed at offset {start}, the file ends {} bytes in",
                start + read.len as u64
            )));
        }
        if self.windows.used == self.windows.list.len() {
            self.windows.list.push(Window {
                start: 0,
                bytes: Vec::new(),
            });
        }
        let window = &mut self.windows.list[self.windows.used];
        window.start = start;
        window.bytes.clear();
        window.bytes.extend_from_slice(read.bytes(&self.buf.bytes));
        self.windows.used += 1;
        Ok(self.windows.used - 1)
    }

    /// Reads `len` bytes of data at `address` into the buffer (never kept as metadata).
    pub fn data(&mut self, address: u64, len: usize, what: &dyn Display) -> Result<&[u8]> {
        let start = self.locate(address, len, what)?;
        let read = read_exact_range(self.storage, self.key, start, len, self.buf)?;
        self.fetched += read.fetched;
        Ok(read.bytes(&self.buf.bytes))
    }
}

/// Checks the lookup3 checksum in the last 4 bytes of `bytes`.
pub(super) fn check_sum(bytes: &[u8]) -> std::result::Result<(), String> {
    if bytes.len() < 4 {
        return Err("too short to hold a checksum".into());
    }
    let (body, stored) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_le_bytes([stored[0], stored[1], stored[2], stored[3]]);
    let computed = lookup3(body);
    if stored != computed {
        return Err(format!(
            "checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
        ));
    }
    Ok(())
}

/// Little-endian fields in order, every read bounds-checked.
pub(super) struct Cursor<'b> {
    bytes: &'b [u8],
    pos: usize,
    sizes: Sizes,
}

impl<'b> Cursor<'b> {
    pub fn take(&mut self, n: usize) -> Parsed<&'b [u8]> {
        match self.pos.checked_add(n) {
            Some(end) if end <= self.bytes.len() => {
                let taken = &self.bytes[self.pos..end];
                self.pos = end;
                Ok(taken)
            }
            _ => bad(format!(
                "ends early ({n} bytes wanted at byte {} of {})",
                self.pos,
                self.bytes.len()
            )),
        }
    }

    pub fn skip(&mut self, n: usize) -> Parsed<()> {
        self.take(n).map(|_| ())
    }

    pub fn u8(&mut self) -> Parsed<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Parsed<u16> {
        Ok(self.uint(2)? as u16)
    }

    pub fn u32(&mut self) -> Parsed<u32> {
        Ok(self.uint(4)? as u32)
    }

    /// An unsigned integer of `n` (at most 8) bytes.
    pub fn uint(&mut self, n: usize) -> Parsed<u64> {
        if n > 8 {
            return unsupported(format!("{n}-byte integers"));
        }
        let bytes = self.take(n)?;
        Ok(bytes
            .iter()
            .rev()
            .fold(0u64, |v, &b| (v << 8) | u64::from(b)))
    }

    /// An address; `None` for the undefined address (all bits set).
    pub fn address(&mut self) -> Parsed<Option<u64>> {
        let n = self.sizes.offset as usize;
        let value = self.uint(n)?;
        let undefined = if n >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * n)) - 1
        };
        Ok((value != undefined).then_some(value))
    }

    /// An address that must be defined.
    pub fn defined(&mut self, what: &str) -> Parsed<u64> {
        self.address()?
            .map_or_else(|| bad(format!("{what} has an undefined address")), Ok)
    }

    pub fn length(&mut self) -> Parsed<u64> {
        self.uint(self.sizes.length as usize)
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }
}

/// Lengths in `usize` for slicing; a value that does not fit is taken as corruption.
pub(super) fn small(value: u64, what: &str) -> Parsed<usize> {
    usize::try_from(value)
        .ok()
        .filter(|&v| v <= MAX_METADATA)
        .map_or_else(|| bad(format!("{what} ({value}) is implausibly large")), Ok)
}

/// Reads the superblock at offset 0 and sets the file's sizes and end in `io`; returns the root
/// group's object header address.
pub(super) fn superblock(io: &mut Io) -> Result<u64> {
    let namer = io.namer();
    let what = "superblock";
    let head = io.meta(0, 9, &what)?;
    if &head[..8] != SIGNATURE {
        return Err(namer.corrupt(
            "not an HDF5 file: no HDF5 signature at offset 0 (files with a user block are not supported)",
        ));
    }
    let version = head[8];
    let sizes = |bytes: &[u8], at: usize| -> Parsed<Sizes> {
        let (offset, length) = (bytes[at], bytes[at + 1]);
        for (name, n) in [("addresses", offset), ("lengths", length)] {
            if !matches!(n, 2 | 4 | 8) {
                return unsupported(format!("{n}-byte {name}"));
            }
        }
        Ok(Sizes { offset, length })
    };
    // Bytes before the addresses, and the sizes' position in them.
    let (fixed, sizes_at) = match version {
        0 => (24, 13),
        1 => (28, 13),
        2 | 3 => (12, 9),
        v => {
            return Err(namer.error(
                what,
                Problem::Unsupported(format!("superblock version {v}")),
            ))
        }
    };
    let head = io.meta(0, fixed, &what)?;
    io.sizes = sizes(head, sizes_at).map_err(|p| namer.error(what, p))?;
    let o = io.sizes.offset as usize;
    let len = if version >= 2 {
        fixed + 4 * o + 4
    } else {
        // Four addresses, then the root group's symbol table entry.
        fixed + 4 * o + 2 * o + 24
    };
    let sizes = io.sizes;
    let bytes = if version >= 2 {
        io.checked(0, len, &what)?
    } else {
        io.meta(0, len, &what)?
    };
    let mut c = sizes.cursor(&bytes[fixed..]);
    let parsed = (|| -> Parsed<(u64, u64, u64)> {
        let base = c.defined("the base")?;
        // v2+: the superblock extension (nothing in it matters for reading data);
        // v0/v1: the free-space info.
        c.address()?;
        let eof = c.defined("the end of file")?;
        if version < 2 {
            c.address()?; // driver info
            c.address()?; // the root entry's link name offset
        }
        let root = c.defined("the root group")?;
        Ok((base, eof, root))
    })();
    let (base, eof, root) = parsed.map_err(|p| namer.error(what, p))?;
    // The library refuses a file shorter than its superblock says; the first read tells when the
    // file is that short (a longer one is caught where a read comes back short).
    if let Some(len) = io.file_len.filter(|&len| len < base.saturating_add(eof)) {
        return Err(namer.corrupt(format!(
            "truncated: the superblock says its data ends at byte {eof}, the file ends at {len}"
        )));
    }
    io.base = base;
    io.eof = eof;
    Ok(root)
}

/// Message types this reader looks at.
pub(super) mod message {
    pub const DATASPACE: u16 = 0x01;
    pub const LINK_INFO: u16 = 0x02;
    pub const DATATYPE: u16 = 0x03;
    pub const LINK: u16 = 0x06;
    pub const LAYOUT: u16 = 0x08;
    pub const FILTER_PIPELINE: u16 = 0x0b;
    pub const CONTINUATION: u16 = 0x10;
    pub const SYMBOL_TABLE: u16 = 0x11;
    /// Message flag: the message lives elsewhere (a committed datatype, a shared message).
    pub const SHARED: u8 = 0x02;
}

/// What receives an object header's messages: `(type, flags, body)`.
pub(super) type Visitor<'v> = dyn FnMut(u16, u8, &[u8]) -> Parsed<()> + 'v;

/// Calls `each` for every message of the object header at `address`, in continuation blocks too.
pub(super) fn walk_header(
    io: &mut Io,
    address: u64,
    what: &dyn Display,
    each: &mut Visitor,
) -> Result<()> {
    let namer = io.namer();
    let sizes = io.sizes;
    let context = format!("{what} (object header at {address})");
    let fail = |p: Problem| namer.error(&context, p);
    let mut pending = Vec::new();
    let v2 = io.meta(address, 4, &context)? == b"OHDR";
    // Creation order fields in v2 message headers.
    let mut creation_order = false;
    if v2 {
        let head = io.meta(address, 6, &context)?;
        let (version, flags) = (head[4], head[5]);
        if version != 2 {
            return Err(fail(Problem::Unsupported(format!(
                "object header version {version}"
            ))));
        }
        creation_order = flags & 0x04 != 0;
        let width = 1usize << (flags & 3);
        let times = if flags & 0x20 != 0 { 16 } else { 0 };
        let phase = if flags & 0x10 != 0 { 4 } else { 0 };
        let prefix = 6 + times + phase + width;
        let head = io.meta(address, prefix, &context)?;
        let size = sizes
            .cursor(&head[prefix - width..])
            .uint(width)
            .and_then(|size| small(size, "the header's size"))
            .map_err(fail)?;
        let block = io.checked(address, prefix + size + 4, &context)?;
        messages_v2(
            &block[prefix..prefix + size],
            sizes,
            creation_order,
            each,
            &mut pending,
        )
        .map_err(fail)?;
    } else {
        let head = io.meta(address, 16, &context)?;
        if head[0] != 1 {
            return Err(fail(Problem::Unsupported(format!(
                "object header version {} (or this is not an object header)",
                head[0]
            ))));
        }
        let size = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
        let block = io.meta(address, 16 + size, &context)?;
        messages_v1(&block[16..], sizes, each, &mut pending).map_err(fail)?;
    }
    let mut blocks = 0;
    while let Some((address, len)) = pending.pop() {
        blocks += 1;
        if blocks > MAX_CONTINUATIONS {
            return Err(namer.corrupt(format!("{context}: too many continuation blocks")));
        }
        let what = format!("{context}: continuation block at {address}");
        let parsed = if v2 {
            let block = io.checked(address, len, &what)?;
            if block.len() < 8 || &block[..4] != b"OCHK" {
                bad("no OCHK signature")
            } else {
                messages_v2(
                    &block[4..block.len() - 4],
                    sizes,
                    creation_order,
                    each,
                    &mut pending,
                )
            }
        } else {
            let block = io.meta(address, len, &what)?;
            messages_v1(block, sizes, each, &mut pending)
        };
        parsed.map_err(|p| namer.error(&what, p))?;
    }
    Ok(())
}

fn continuation(sizes: Sizes, body: &[u8], into: &mut Vec<(u64, usize)>) -> Parsed<()> {
    let mut c = sizes.cursor(body);
    let address = c.defined("a continuation block")?;
    let len = small(c.length()?, "a continuation block's length")?;
    into.push((address, len));
    Ok(())
}

fn messages_v1(
    bytes: &[u8],
    sizes: Sizes,
    each: &mut Visitor,
    continuations: &mut Vec<(u64, usize)>,
) -> Parsed<()> {
    let mut c = sizes.cursor(bytes);
    while c.remaining() >= 8 {
        let kind = c.u16()?;
        let size = c.u16()? as usize;
        let flags = c.u8()?;
        c.skip(3)?;
        let body = c.take(size)?;
        if kind == message::CONTINUATION {
            continuation(sizes, body, continuations)?;
        } else {
            each(kind, flags, body)?;
        }
    }
    Ok(())
}

fn messages_v2(
    bytes: &[u8],
    sizes: Sizes,
    creation_order: bool,
    each: &mut Visitor,
    continuations: &mut Vec<(u64, usize)>,
) -> Parsed<()> {
    let header = if creation_order { 6 } else { 4 };
    let mut c = sizes.cursor(bytes);
    // Fewer bytes than a message header at the end are a gap.
    while c.remaining() >= header {
        let kind = u16::from(c.u8()?);
        let size = c.u16()? as usize;
        let flags = c.u8()?;
        if creation_order {
            c.skip(2)?;
        }
        let body = c.take(size)?;
        if kind == message::CONTINUATION {
            continuation(sizes, body, continuations)?;
        } else {
            each(kind, flags, body)?;
        }
    }
    Ok(())
}
