//! The page walk: a row group's chunks checked as their bytes arrive, piece by piece. The pages of
//! each chunk must add up to it and their value counts to the footer's; with `verify`, the levels
//! of uncompressed data pages are decoded (RLE/bit-packed hybrid) and their PLAIN values measured
//! against the rows and the configured sizes. Apart from `read.rs`, which decides what bytes are
//! fetched and when, because this is what is done with them once they are in hand.

use super::footer::{Chunk, Leaf};
use super::page_header::{parse_header_in, DataPage, DataPageV2};
use super::thrift::Parsed;
use super::{
    physical, DATA_PAGE, DATA_PAGE_V2, DICTIONARY_PAGE, INDEX_PAGE, PLAIN, RLE, UNCOMPRESSED,
};

/// Bytes added to a page header cut by a piece's end before parsing it again; doubled each
/// time, so that a long header costs few tries and a short one a small copy.
const HEADER_STEP: usize = 1 << 10;

/// Arrow's limit on a page header (statistics make them long); past it the header is corrupt.
const MAX_PAGE_HEADER: usize = 16 << 20;

/// What the pages of a chunk added up to.
#[derive(Default)]
struct Tally {
    values: u64,
    rows: u64,
    present: u64,
    /// A data page was not decoded (compressed, or no `verify`).
    undecoded: bool,
}

/// A chunk being checked, and what its pages must add up to.
struct Check<'c> {
    chunk: &'c Chunk,
    leaf: &'c Leaf,
    rows: u64,
    verify: bool,
}

/// A data page whose levels are decoded and values counted.
enum Body {
    V1(DataPage),
    /// With whether its values are stored plain (not compressed).
    V2(DataPageV2, bool),
}

/// Where the walk of a chunk's pages stands between pieces.
#[derive(Default)]
enum Step {
    /// At a page header, of which the carry holds what the last piece had.
    #[default]
    Header,
    /// In a page body that is not decoded: bytes left to pass over.
    Skip(u64),
    /// In a page body that is decoded, gathered into the carry if a piece ends within it; bytes
    /// left.
    Decode(Body, usize),
}

/// Walks the pages of a chunk as its bytes arrive: their sizes must add up to it and their value
/// counts to the footer's; with `verify`, the levels of uncompressed pages are decoded and the
/// values counted. A page header or decoded body that a piece cuts is gathered whole in the
/// carry; anything else is looked at in the piece and dropped with it.
#[derive(Default)]
struct PageWalk {
    /// Bytes of the chunk seen so far.
    seen: u64,
    /// Where the page being walked starts in the chunk.
    page: u64,
    step: Step,
    tally: Tally,
}

impl PageWalk {
    /// Walks the next `bytes` of the chunk.
    fn feed(&mut self, mut bytes: &[u8], check: &Check, carry: &mut Vec<u8>) -> Parsed<()> {
        // Bytes of the chunk that come after these.
        let later = check.chunk.len - self.seen - bytes.len() as u64;
        while !bytes.is_empty() {
            let used = match std::mem::take(&mut self.step) {
                Step::Header => self.header(bytes, later, check, carry)?,
                Step::Skip(left) => {
                    let used = left.min(bytes.len() as u64);
                    if used < left {
                        self.step = Step::Skip(left - used);
                    }
                    used as usize
                }
                Step::Decode(body, left) if carry.is_empty() && left <= bytes.len() => {
                    self.decode(&body, &bytes[..left], check)?;
                    left
                }
                Step::Decode(body, left) => {
                    if carry.is_empty() {
                        // Exactly the page: the carry holds no more than the largest one cut.
                        carry.reserve_exact(left);
                    }
                    let used = left.min(bytes.len());
                    carry.extend_from_slice(&bytes[..used]);
                    if used == left {
                        self.decode(&body, carry, check)?;
                        carry.clear();
                    } else {
                        self.step = Step::Decode(body, left - used);
                    }
                    used
                }
            };
            self.seen += used as u64;
            bytes = &bytes[used..];
            if matches!(self.step, Step::Header) && carry.is_empty() {
                self.page = self.seen;
            }
        }
        Ok(())
    }

    /// Parses the page header at `self.page` from the carry and `bytes`, `later` bytes of the
    /// chunk coming after them; returns how many of `bytes` it took. A header cut off is
    /// carried, and tried again with more bytes, as Arrow does, up to Arrow's limit.
    fn header(
        &mut self,
        bytes: &[u8],
        later: u64,
        check: &Check,
        carry: &mut Vec<u8>,
    ) -> Parsed<usize> {
        let old = carry.len();
        let (parsed, take) = if old == 0 {
            (parse_header_in(bytes), bytes.len())
        } else {
            let take = bytes
                .len()
                .min(old.max(HEADER_STEP))
                .min(MAX_PAGE_HEADER - old);
            carry.extend_from_slice(&bytes[..take]);
            (parse_header_in(carry), take)
        };
        let (header, len) = match parsed {
            Ok(parsed) => parsed,
            Err(why) => {
                let more = later > 0 || take < bytes.len();
                if more && old + take < MAX_PAGE_HEADER {
                    if old == 0 {
                        carry.extend_from_slice(bytes);
                    }
                    return Ok(take);
                }
                return Err(format!(
                    "the page header at byte {} of the chunk: {why}",
                    self.page
                ));
            }
        };
        carry.clear();
        let pos = self.page;
        let chunk = check.chunk;
        let end = (pos + len as u64)
            .checked_add(header.compressed as u64)
            .filter(|&end| end <= chunk.len);
        if end.is_none() {
            return Err(format!(
                "the page at byte {pos} ({} bytes) overruns the chunk ({} bytes)",
                header.compressed, chunk.len
            ));
        }
        let in_page = |why: String| format!("the page at byte {pos}: {why}");
        if chunk.codec == UNCOMPRESSED && header.uncompressed != header.compressed {
            return Err(in_page(format!(
                "uncompressed, but {} bytes uncompressed and {} stored",
                header.uncompressed, header.compressed
            )));
        }
        let body = match header.kind {
            DATA_PAGE => {
                let page = header
                    .v1
                    .ok_or_else(|| in_page("no data_page_header".into()))?;
                self.tally.values += page.values;
                (check.verify && chunk.codec == UNCOMPRESSED).then_some(Body::V1(page))
            }
            DATA_PAGE_V2 => {
                let page = header
                    .v2
                    .ok_or_else(|| in_page("no data_page_header_v2".into()))?;
                self.tally.values += page.values;
                let plain = !page.compressed || chunk.codec == UNCOMPRESSED;
                check.verify.then_some(Body::V2(page, plain))
            }
            DICTIONARY_PAGE | INDEX_PAGE => None,
            other => return Err(in_page(format!("unknown page type {other}"))),
        };
        let left = header.compressed;
        match body {
            None => {
                self.tally.undecoded |= matches!(header.kind, DATA_PAGE | DATA_PAGE_V2);
                if left > 0 {
                    self.step = Step::Skip(left as u64);
                }
            }
            Some(body) if left == 0 => self.decode(&body, &[], check)?,
            Some(body) => self.step = Step::Decode(body, left),
        }
        Ok(len - old)
    }

    fn decode(&mut self, body: &Body, bytes: &[u8], check: &Check) -> Parsed<()> {
        match body {
            Body::V1(page) => tally_v1(bytes, page, check.leaf, &mut self.tally),
            Body::V2(page, plain) => tally_v2(bytes, page, check.leaf, *plain, &mut self.tally),
        }
        .map_err(|why| format!("the page at byte {}: {why}", self.page))
    }

    /// Checks the totals once every byte of the chunk has been walked.
    fn finish(self, check: &Check) -> Parsed<()> {
        let (tally, rows) = (self.tally, check.rows);
        if tally.values != check.chunk.values {
            return Err(format!(
                "its pages hold {} values, the footer says {}",
                tally.values, check.chunk.values
            ));
        }
        if !check.verify || tally.undecoded {
            return Ok(());
        }
        if tally.rows != rows {
            return Err(format!(
                "its levels hold {} rows, the row group has {rows}",
                tally.rows
            ));
        }
        if let Some(expect) = check.leaf.expect {
            let want = rows.saturating_mul(expect.values_per_row);
            if tally.present != want {
                return Err(format!(
                    "its pages hold {} values, {rows} rows of {} make {want}",
                    tally.present, expect.values_per_row
                ));
            }
        }
        Ok(())
    }
}

/// Checks a range of chunks (and the holes between them) as its bytes arrive, piece by piece.
pub(super) struct RunWalk<'w> {
    chunks: &'w [Chunk],
    leaves: &'w [Leaf],
    rows: u64,
    verify: bool,
    /// The chunk the next byte belongs to.
    current: usize,
    /// Where the next byte is in the file.
    at: u64,
    pages: PageWalk,
    /// A page header or page body that the end of a piece cut, gathered whole.
    pub(super) carry: Vec<u8>,
}

/// An error in the run's chunk at that index.
type RunError = (usize, String);

impl<'w> RunWalk<'w> {
    /// A walk of the run of `chunks` that starts at file offset `at`, with `carry` (empty) for
    /// the pages its pieces cut.
    pub(super) fn new(
        chunks: &'w [Chunk],
        leaves: &'w [Leaf],
        rows: u64,
        verify: bool,
        at: u64,
        carry: Vec<u8>,
    ) -> RunWalk<'w> {
        RunWalk {
            chunks,
            leaves,
            rows,
            verify,
            current: 0,
            at,
            pages: PageWalk::default(),
            carry,
        }
    }

    /// The check of the run's chunk `i`, borrowing the footer rather than the walk.
    fn check(&self, i: usize) -> Check<'w> {
        let chunk = &self.chunks[i];
        Check {
            chunk,
            leaf: &self.leaves[chunk.leaf],
            rows: self.rows,
            verify: self.verify,
        }
    }

    /// Walks the next bytes of the run, passing over the holes between its chunks.
    pub(super) fn feed(&mut self, mut bytes: &[u8]) -> std::result::Result<(), RunError> {
        while !bytes.is_empty() {
            let chunk = &self.chunks[self.current];
            if self.at < chunk.start {
                let hole = bytes
                    .len()
                    .min(usize::try_from(chunk.start - self.at).unwrap_or(usize::MAX));
                bytes = &bytes[hole..];
                self.at += hole as u64;
                continue;
            }
            let rest = chunk.start + chunk.len - self.at;
            let used = bytes.len().min(usize::try_from(rest).unwrap_or(usize::MAX));
            let check = self.check(self.current);
            self.pages
                .feed(&bytes[..used], &check, &mut self.carry)
                .map_err(|why| (self.current, why))?;
            bytes = &bytes[used..];
            self.at += used as u64;
            self.finish_ended()?;
        }
        Ok(())
    }

    /// Checks the totals of the chunks whose bytes have all been walked.
    pub(super) fn finish_ended(&mut self) -> std::result::Result<(), RunError> {
        while let Some(chunk) = self.chunks.get(self.current) {
            if self.at < chunk.start + chunk.len {
                break;
            }
            std::mem::take(&mut self.pages)
                .finish(&self.check(self.current))
                .map_err(|why| (self.current, why))?;
            self.current += 1;
        }
        Ok(())
    }
}

/// The bit width of levels up to `max`.
fn bit_width(max: u16) -> u32 {
    16 - max.leading_zeros()
}

/// Splits levels framed by a 4-byte little-endian length off the front of a v1 page.
fn framed(body: &[u8]) -> Parsed<(&[u8], &[u8])> {
    let len = body
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("the levels' length is cut off")?;
    let rest = &body[4..];
    if len > rest.len() {
        return Err(format!(
            "{len} bytes of levels are more than the {} left in the page",
            rest.len()
        ));
    }
    Ok(rest.split_at(len))
}

fn tally_v1(body: &[u8], page: &DataPage, leaf: &Leaf, tally: &mut Tally) -> Parsed<()> {
    let n = page.values;
    let mut rest = body;
    if leaf.max_rep > 0 {
        if page.rep_encoding != RLE {
            return Err(format!(
                "repetition levels in encoding {}; only RLE is decoded",
                page.rep_encoding
            ));
        }
        let (levels, after) = framed(rest)?;
        tally.rows += count_levels(levels, n, bit_width(leaf.max_rep), 0)?;
        rest = after;
    } else {
        tally.rows += n;
    }
    let present = if leaf.max_def > 0 {
        if page.def_encoding != RLE {
            return Err(format!(
                "definition levels in encoding {}; only RLE is decoded",
                page.def_encoding
            ));
        }
        let (levels, after) = framed(rest)?;
        rest = after;
        count_levels(levels, n, bit_width(leaf.max_def), leaf.max_def)?
    } else {
        n
    };
    tally.present += present;
    if page.encoding == PLAIN {
        check_plain(rest, present, leaf)?;
    }
    Ok(())
}

/// v2 pages keep their levels uncompressed and unframed, their lengths in the header.
fn tally_v2(
    body: &[u8],
    page: &DataPageV2,
    leaf: &Leaf,
    plain: bool,
    tally: &mut Tally,
) -> Parsed<()> {
    let n = page.values;
    let levels_end = page
        .rep_len
        .checked_add(page.def_len)
        .filter(|&end| end <= body.len())
        .ok_or("the levels are longer than the page")?;
    let (rep, def) = body[..levels_end].split_at(page.rep_len);
    let rows = if leaf.max_rep > 0 {
        count_levels(rep, n, bit_width(leaf.max_rep), 0)?
    } else {
        n
    };
    if rows != page.rows {
        return Err(format!(
            "its levels start {rows} rows, its header says {}",
            page.rows
        ));
    }
    tally.rows += rows;
    let present = if leaf.max_def > 0 {
        count_levels(def, n, bit_width(leaf.max_def), leaf.max_def)?
    } else {
        n
    };
    tally.present += present;
    if plain && page.encoding == PLAIN {
        check_plain(&body[levels_end..], present, leaf)?;
    }
    Ok(())
}

/// Decodes `n` levels of the RLE/bit-packed hybrid encoding and counts those equal to `target`.
fn count_levels(bytes: &[u8], n: u64, width: u32, target: u16) -> Parsed<u64> {
    let cut = || format!("the levels end before their {n} values");
    let mut pos = 0;
    let mut seen = 0;
    let mut hits = 0;
    while seen < n {
        let mut header = 0u64;
        let mut shift = 0;
        loop {
            let byte = *bytes.get(pos).ok_or_else(cut)?;
            pos += 1;
            if shift > 63 {
                return Err("a level run header longer than 10 bytes".into());
            }
            header |= u64::from(byte & 0x7F) << shift;
            shift += 7;
            if byte & 0x80 == 0 {
                break;
            }
        }
        if header & 1 == 1 {
            // Bit-packed: groups of 8 values, `width` bits each, least significant bit first.
            let groups = header >> 1;
            let packed = usize::try_from(groups.saturating_mul(u64::from(width)))
                .ok()
                .and_then(|len| pos.checked_add(len))
                .filter(|&end| end <= bytes.len())
                .ok_or_else(cut)?;
            let run = &bytes[pos..packed];
            let take = groups.saturating_mul(8).min(n - seen);
            for i in 0..take {
                let bit = i * u64::from(width);
                let at = (bit / 8) as usize;
                let window = u32::from_le_bytes([
                    run[at],
                    run.get(at + 1).copied().unwrap_or(0),
                    run.get(at + 2).copied().unwrap_or(0),
                    0,
                ]);
                let value = (window >> (bit % 8)) & ((1 << width) - 1);
                hits += u64::from(value == u32::from(target));
            }
            seen += take;
            pos = packed;
        } else {
            let value_bytes = width.div_ceil(8) as usize;
            let raw = bytes.get(pos..pos + value_bytes).ok_or_else(cut)?;
            let value = raw.iter().rev().fold(0u32, |v, &b| v << 8 | u32::from(b));
            let take = (header >> 1).min(n - seen);
            if value == u32::from(target) {
                hits += take;
            }
            seen += take;
            pos += value_bytes;
        }
    }
    Ok(hits)
}

/// Checks that PLAIN values fill the rest of a page: `present` values of the leaf's width, or
/// length-prefixed binaries (of the configured length, if any).
fn check_plain(values: &[u8], present: u64, leaf: &Leaf) -> Parsed<()> {
    let width = match leaf.physical {
        physical::BOOLEAN => return fits(values, present.div_ceil(8), "booleans"),
        physical::INT32 | physical::FLOAT => 4,
        physical::INT64 | physical::DOUBLE => 8,
        physical::INT96 => 12,
        physical::FIXED_LEN_BYTE_ARRAY => u64::try_from(leaf.type_length)
            .map_err(|_| format!("a fixed length of {}", leaf.type_length))?,
        physical::BYTE_ARRAY => {
            let mut pos = 0usize;
            for i in 0..present {
                let len = values
                    .get(pos..pos + 4)
                    .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
                    .ok_or_else(|| format!("binary value {i} of {present} is cut off"))?;
                if let Some(want) = leaf.expect.and_then(|e| e.binary_len) {
                    if len as u64 != want {
                        return Err(format!("binary value {i} has {len} bytes, not {want}"));
                    }
                }
                pos = pos
                    .checked_add(4 + len)
                    .filter(|&end| end <= values.len())
                    .ok_or_else(|| format!("binary value {i} of {present} is cut off"))?;
            }
            return fits(values, pos as u64, "binary values");
        }
        other => return Err(format!("unknown physical type {other}")),
    };
    fits(values, present.saturating_mul(width), "values")
}

fn fits(values: &[u8], need: u64, what: &str) -> Parsed<()> {
    if values.len() as u64 == need {
        Ok(())
    } else {
        Err(format!(
            "its {what} take {} bytes, {need} expected",
            values.len()
        ))
    }
}
