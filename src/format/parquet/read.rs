//! The reader: the row group holding a sample fetched as pyarrow's `read_row_group` fetches it,
//! the footer read as Arrow reads it and kept per file. This file decides what bytes are fetched
//! and when (the footer's tail, chunks merged into ranges with their holes, the ranges in pieces,
//! reads in flight); the footer is parsed in `footer.rs` and the pieces are checked by the page
//! walk of `pages.rs` as they arrive.

use std::ops::ControlFlow;

use super::footer::{parse_footer, Chunk, Footer, Problem};
use super::pages::RunWalk;
use super::{Parquet, MAGIC};
use crate::config::formats::{ParquetColumn, ParquetReadMode};
use crate::error::{Error, Result};
use crate::format::{corrupt, read_exact_range, ReadBuffer, SampleRead, SampleReader};
use crate::storage::{Storage, Window};

/// Arrow's first read of a file is its last 64 KiB, which usually holds the whole footer.
const FOOTER_READ: u64 = 64 * 1024;

/// The most a read of column chunks asks for at once. A row group is fetched in pieces, each
/// checked as it arrives and then dropped, so that a reader thread holds this much rather than a
/// row group (623 MB with MLPerf flux's defaults, times `read_threads`). 8 MiB is large enough
/// that a read's fixed cost (a system call, a storage request's latency) stays small beside
/// moving its bytes, and is a multiple of every power-of-two O_DIRECT block up to itself:
/// pieces end at its multiples in the file, so no block is fetched by two pieces.
pub(super) const PIECE_BYTES: u64 = 8 << 20;

/// Arrow's read coalescing (`CacheOptions` defaults, which `ParquetFile`'s `pre_buffer=True`
/// applies to `read_row_group`): the chunks read are merged into one range where the bytes
/// between them (chunks of columns not read) are at most this many, and fetched with them.
const HOLE_LIMIT: u64 = 8 * 1024;

/// ... as long as the merged range stays within this many bytes.
const RANGE_LIMIT: u64 = 32 << 20;

/// Reads of a row group in flight at once: the threads of Arrow's I/O pool (its default
/// capacity), to which `pre_buffer` hands a row group's ranges; DLIO's PyTorch workers are
/// processes, each with a pool of its own, as each dlio-rs reader thread has.
const READS_IN_FLIGHT: usize = 8;
/// What the reader thread has in hand of the current file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InHand {
    Nothing,
    RowGroup(usize),
    /// Every row group (`read_mode: whole_file`).
    All,
}

/// One reader thread's reader for one epoch.
pub(super) struct RowGroupReader<'a> {
    format: &'a Parquet,
    /// The columns read; empty: all of the file's.
    selected: Vec<&'a ParquetColumn>,
    /// The file whose footer is in hand; empty when none is.
    key: String,
    footer: Footer,
    in_hand: InHand,
    /// Scratch: the chunks of a row group sorted by offset, for coalescing.
    order: Vec<Chunk>,
    /// Bytes read at once: [`PIECE_BYTES`], smaller in tests.
    piece: u64,
    /// A page header or decoded page body that the end of a piece cut, gathered whole.
    carry: Vec<u8>,
    /// Scratch: the pieces of a row group's read, in file order, and their ranges.
    pieces: Vec<Piece>,
    ranges: Vec<(u64, usize)>,
}

/// Part of a run of chunks merged into one range, fetched in one request.
#[derive(Debug, Clone, Copy)]
struct Piece {
    /// The run's chunks in [`RowGroupReader::order`], and where the run starts in the file.
    run: (usize, usize),
    run_start: u64,
    at: u64,
    len: usize,
}

impl<'a> RowGroupReader<'a> {
    pub fn new(format: &'a Parquet) -> RowGroupReader<'a> {
        let marked: Vec<&ParquetColumn> = format.columns.iter().filter(|c| c.read).collect();
        let selected = if marked.is_empty() {
            format.columns.iter().collect()
        } else {
            marked
        };
        RowGroupReader {
            format,
            selected,
            key: String::new(),
            footer: Footer::default(),
            in_hand: InHand::Nothing,
            order: Vec::new(),
            piece: PIECE_BYTES,
            carry: Vec::new(),
            pieces: Vec::new(),
            ranges: Vec::new(),
        }
    }

    /// Reads and parses the footer of `key`, as opening a `ParquetFile` does; returns the bytes
    /// fetched.
    fn open(&mut self, storage: &dyn Storage, key: &str, buf: &mut ReadBuffer) -> Result<u64> {
        let (read, size) = storage
            .read_tail(key, FOOTER_READ as usize, &mut buf.bytes)
            .map_err(|e| Error::on_object("cannot read data file", storage.describe(key), e))?;
        if size < 12 {
            return Err(corrupt(
                storage,
                key,
                format!("{size} bytes are too few for a parquet file (PAR1, footer length, PAR1)"),
            ));
        }
        let tail = size.min(FOOTER_READ);
        if (read.len as u64) < tail {
            return Err(corrupt(
                storage,
                key,
                format!(
                    "truncated: its last {tail} bytes were asked for, {} came",
                    read.len
                ),
            ));
        }
        let mut fetched = read.fetched;
        let (footer_len, magic) = {
            let end = &read.bytes(&buf.bytes)[tail as usize - 8..];
            let len = u32::from_le_bytes([end[0], end[1], end[2], end[3]]);
            (u64::from(len), [end[4], end[5], end[6], end[7]])
        };
        if &magic != MAGIC {
            let why = if &magic == b"PARE" {
                "its footer is encrypted, which dlio-rs cannot read".to_string()
            } else {
                format!("it does not end with PAR1 (but {magic:02x?}): not a parquet file")
            };
            return Err(corrupt(storage, key, why));
        }
        let data_end = size
            .checked_sub(8 + footer_len)
            .filter(|&end| end >= 4)
            .ok_or_else(|| {
                corrupt(
                    storage,
                    key,
                    format!("a footer of {footer_len} bytes does not fit in the file of {size}"),
                )
            })?;
        let footer = if footer_len + 8 <= tail {
            let bytes = read.bytes(&buf.bytes);
            &bytes[bytes.len() - 8 - footer_len as usize..bytes.len() - 8]
        } else {
            // Arrow then reads the whole footer again.
            let read = read_exact_range(storage, key, data_end, footer_len as usize, buf)?;
            fetched += read.fetched;
            read.bytes(&buf.bytes)
        };
        self.footer.clear();
        parse_footer(footer, data_end, &self.selected, &mut self.footer).map_err(|problem| {
            match problem {
                Problem::Corrupt(why) => corrupt(storage, key, format!("footer: {why}")),
                Problem::MissingColumn(name, has) => Error::run(format!(
                    "data file {} has no column '{name}' (dataset.parquet.columns); its columns \
                     are {has}",
                    storage.describe(key)
                )),
            }
        })?;
        Ok(fetched)
    }

    /// Reads the chunks of the columns read of row group `g`, merged into ranges as Arrow merges
    /// them ([`HOLE_LIMIT`], [`RANGE_LIMIT`]), in pieces that are checked as they arrive; returns
    /// the bytes fetched (the holes' too). The pieces are fetched together, as Arrow's
    /// `pre_buffer` hands a row group's ranges to its I/O threads at once: up to
    /// [`READS_IN_FLIGHT`] of them and a piece's worth of bytes at a time.
    fn read_group(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        g: usize,
        buf: &mut ReadBuffer,
    ) -> Result<u64> {
        let rows = self.footer.groups[g].rows;
        self.order.clear();
        self.order.extend_from_slice(self.footer.chunks_of(g));
        self.order.sort_unstable_by_key(|c| c.start);
        self.plan_pieces();
        self.ranges.clear();
        self.ranges
            .extend(self.pieces.iter().map(|piece| (piece.at, piece.len)));
        let (order, leaves, pieces) = (&self.order[..], &self.footer.leaves[..], &self.pieces[..]);
        let verify = self.format.verify;
        let fail = |run: &[Chunk], (chunk, why): (usize, String)| {
            let leaf = &leaves[run[chunk].leaf];
            corrupt(
                storage,
                key,
                format!("row group {g}, column {}: {why}", leaf.name),
            )
        };
        let mut fetched = 0;
        let mut carry = std::mem::take(&mut self.carry);
        let mut walk: Option<RunWalk> = None;
        let mut failed = None;
        let mut check = |i: usize, bytes: &[u8], cost: u64| -> Result<()> {
            let piece = &pieces[i];
            if bytes.len() < piece.len {
                // Fewer bytes than the footer promised: the file shrank since it was read.
                return Err(corrupt(
                    storage,
                    key,
                    format!(
                        "row group {g}: truncated: {} bytes are needed at offset {}, the file \
                         ends {} bytes in",
                        piece.len,
                        piece.at,
                        piece.at + bytes.len() as u64
                    ),
                ));
            }
            fetched += cost;
            let run = &order[piece.run.0..piece.run.1];
            if piece.at == piece.run_start {
                let mut carry = walk.take().map_or(std::mem::take(&mut carry), |w| w.carry);
                carry.clear();
                let mut fresh = RunWalk::new(run, leaves, rows, verify, piece.at, carry);
                fresh.finish_ended().map_err(|e| fail(run, e))?;
                walk = Some(fresh);
            }
            match walk.as_mut() {
                Some(walk) => walk.feed(bytes).map_err(|e| fail(run, e)),
                None => Ok(()),
            }
        };
        let window = Window {
            reads: READS_IN_FLIGHT,
            bytes: usize::try_from(self.piece).unwrap_or(usize::MAX),
        };
        let read = storage.read_ranges(
            key,
            &self.ranges,
            window,
            &mut buf.bytes,
            &mut |i, bytes, cost| match check(i, bytes, cost) {
                Ok(()) => ControlFlow::Continue(()),
                Err(error) => {
                    failed = Some(error);
                    ControlFlow::Break(())
                }
            },
        );
        self.carry = walk.map_or(carry, |w| w.carry);
        if let Some(error) = failed {
            return Err(error);
        }
        read.map_err(|e| {
            let object = format!("{} (row group {g})", storage.describe(key));
            Error::on_object("cannot read data file", object, e)
        })?;
        Ok(fetched)
    }

    /// Splits the chunks in [`RowGroupReader::order`] into runs merged as Arrow merges them, and
    /// the runs into pieces that end at multiples of the piece size in the file (not of the run),
    /// so that with O_DIRECT a block is never fetched by two pieces.
    fn plan_pieces(&mut self) {
        self.pieces.clear();
        let mut first = 0;
        while first < self.order.len() {
            let start = self.order[first].start;
            let mut end = start + self.order[first].len;
            let mut next = first + 1;
            while let Some(chunk) = self.order.get(next) {
                let chunk_end = chunk.start + chunk.len;
                if chunk.start < end
                    || chunk.start - end > HOLE_LIMIT
                    || chunk_end - start > RANGE_LIMIT
                {
                    break;
                }
                end = chunk_end;
                next += 1;
            }
            let mut at = start;
            loop {
                let piece_end = (at / self.piece + 1).saturating_mul(self.piece).min(end);
                self.pieces.push(Piece {
                    run: (first, next),
                    run_start: start,
                    at,
                    len: (piece_end - at) as usize,
                });
                at = piece_end;
                if at >= end {
                    break;
                }
            }
            first = next;
        }
    }
}

#[cfg(test)]
impl RowGroupReader<'_> {
    /// Reads chunks in pieces of `piece` bytes.
    pub(super) fn with_piece(mut self, piece: u64) -> Self {
        self.piece = piece;
        self
    }

    /// Memory held for pages cut by the end of a piece.
    pub(super) fn carry_capacity(&self) -> usize {
        self.carry.capacity()
    }

    /// (offset, length) of the chunks read of row group `g` of the file in hand.
    pub(super) fn chunk_ranges(&self, g: usize) -> Vec<(u64, u64)> {
        self.footer
            .chunks_of(g)
            .iter()
            .map(|c| (c.start, c.len))
            .collect()
    }
}

impl SampleReader for RowGroupReader<'_> {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let mut bytes = 0;
        if self.key != key {
            // Nothing stays in hand if opening fails.
            self.key.clear();
            self.in_hand = InHand::Nothing;
            bytes += self.open(storage, key, buf)?;
            self.key.push_str(key);
        }
        if sample >= self.footer.rows {
            return Err(corrupt(
                storage,
                key,
                format!(
                    "sample {sample} is out of range: the file holds {} rows",
                    self.footer.rows
                ),
            ));
        }
        let g = self
            .footer
            .groups
            .partition_point(|group| group.first_row + group.rows <= sample);
        let offset = self.footer.groups[g].offset;
        let served = match self.in_hand {
            InHand::All => true,
            InHand::RowGroup(h) => h == g,
            InHand::Nothing => false,
        };
        if !served {
            self.in_hand = InHand::Nothing;
            match self.format.read_mode {
                ParquetReadMode::RowGroup => {
                    bytes += self.read_group(storage, key, g, buf)?;
                    self.in_hand = InHand::RowGroup(g);
                }
                ParquetReadMode::WholeFile => {
                    for g in 0..self.footer.groups.len() {
                        bytes += self.read_group(storage, key, g, buf)?;
                    }
                    self.in_hand = InHand::All;
                }
            }
        }
        Ok(SampleRead { offset, bytes })
    }

    fn in_hand(&self, key: &str, sample: u64) -> bool {
        if self.key != key || sample >= self.footer.rows {
            return false;
        }
        match self.in_hand {
            InHand::All => true,
            InHand::RowGroup(held) => {
                let g = self
                    .footer
                    .groups
                    .partition_point(|group| group.first_row + group.rows <= sample);
                held == g
            }
            InHand::Nothing => false,
        }
    }

    fn put_down(&mut self) {
        self.key.clear();
        self.in_hand = InHand::Nothing;
    }
}
