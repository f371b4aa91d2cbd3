//! The reader: the footer parsed generically (any writer's: unknown fields are skipped), the row
//! group holding a sample fetched as pyarrow's `read_row_group` fetches it, its pages walked.

use std::ops::ControlFlow;

use super::thrift::{Parsed, Reader, BINARY, STRUCT};
use super::{
    physical, Parquet, DATA_PAGE, DATA_PAGE_V2, DICTIONARY_PAGE, INDEX_PAGE, MAGIC, OPTIONAL,
    PLAIN, REPEATED, REQUIRED, RLE, UNCOMPRESSED,
};
use crate::config::formats::{ColumnType, ParquetColumn, ParquetReadMode};
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

/// Bytes added to a page header cut by a piece's end before parsing it again; doubled each
/// time, so that a long header costs few tries and a short one a small copy.
const HEADER_STEP: usize = 1 << 10;

/// Arrow's limit on a page header (statistics make them long); past it the header is corrupt.
const MAX_PAGE_HEADER: usize = 16 << 20;

/// What the reader thread has in hand of the current file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum InHand {
    Nothing,
    RowGroup(usize),
    /// Every row group (`read_mode: whole_file`).
    All,
}

/// What a sample's values must add up to, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Expect {
    values_per_row: u64,
    /// A binary column's value length.
    binary_len: Option<u64>,
}

impl Expect {
    fn of(column: &ParquetColumn) -> Expect {
        match column.dtype {
            ColumnType::Binary => Expect {
                values_per_row: 1,
                binary_len: Some(column.size),
            },
            ColumnType::Number(_) => Expect {
                values_per_row: column.size,
                binary_len: None,
            },
        }
    }
}

/// A leaf column that is read.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leaf {
    /// The top-level column it belongs to (`path_in_schema[0]`).
    name: String,
    physical: i32,
    type_length: i32,
    max_def: u16,
    max_rep: u16,
    expect: Option<Expect>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Group {
    first_row: u64,
    rows: u64,
    /// Its chunks in [`Footer::chunks`].
    chunks: (usize, usize),
    /// Where its first chunk read starts: a sample's offset, looked up per sample.
    offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunk {
    /// Index in [`Footer::leaves`].
    leaf: usize,
    start: u64,
    len: u64,
    values: u64,
    codec: i32,
}

/// What the reader keeps of a parsed footer: the row groups and the chunks of the columns read.
#[derive(Debug, Default)]
struct Footer {
    leaves: Vec<Leaf>,
    groups: Vec<Group>,
    chunks: Vec<Chunk>,
    rows: u64,
}

impl Footer {
    fn clear(&mut self) {
        self.leaves.clear();
        self.groups.clear();
        self.chunks.clear();
        self.rows = 0;
    }

    fn chunks_of(&self, group: usize) -> &[Chunk] {
        let (first, end) = self.groups[group].chunks;
        &self.chunks[first..end]
    }
}

/// Why a footer cannot be used.
#[derive(Debug)]
enum Problem {
    Corrupt(String),
    /// A configured column the file does not have, and the columns it has.
    MissingColumn(String, String),
}

impl From<String> for Problem {
    fn from(why: String) -> Problem {
        Problem::Corrupt(why)
    }
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
                let mut fresh = RunWalk {
                    chunks: run,
                    leaves,
                    rows,
                    verify,
                    current: 0,
                    at: piece.at,
                    pages: PageWalk::default(),
                    carry,
                };
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

    fn put_down(&mut self) {
        self.key.clear();
        self.in_hand = InHand::Nothing;
    }
}

/// A schema element, as far as the reader cares.
struct Element<'b> {
    physical: Option<i32>,
    type_length: i32,
    repetition: i32,
    name: &'b [u8],
    children: i32,
}

/// A leaf of the schema, with what is known of it while parsing.
struct LeafInfo<'b> {
    top: &'b [u8],
    /// Its index in [`Footer::leaves`] if it is read.
    read: Option<usize>,
}

fn count(n: i64, what: &str) -> Parsed<u64> {
    u64::try_from(n).map_err(|_| format!("{what} is negative ({n})"))
}

/// Parses `FileMetaData` into `footer`, keeping the chunks of the `selected` columns (all when
/// none is); `data_end` is where the footer starts, past every column chunk.
fn parse_footer(
    bytes: &[u8],
    data_end: u64,
    selected: &[&ParquetColumn],
    footer: &mut Footer,
) -> std::result::Result<(), Problem> {
    let mut reader = Reader::new(bytes);
    let mut leaves: Option<Vec<LeafInfo>> = None;
    let mut missing = None;
    let mut saw_groups = false;
    reader.read_struct(|r, id, kind| match id {
        2 => {
            let n = r.list(kind, STRUCT, "schema")?;
            let mut elements = Vec::with_capacity(n);
            for _ in 0..n {
                elements.push(parse_element(r)?);
            }
            let info = schema_leaves(&elements, selected, footer)?;
            missing = selected
                .iter()
                .find(|c| !info.iter().any(|l| l.top == c.name.as_bytes()))
                .map(|c| (c.name.clone(), top_names(&elements)));
            leaves = Some(info);
            Ok(())
        }
        4 => {
            let leaves = leaves
                .as_ref()
                .ok_or("the row groups come before the schema")?;
            let n = r.list(kind, STRUCT, "row_groups")?;
            for g in 0..n {
                parse_group(r, leaves, data_end, footer)
                    .map_err(|why| format!("row group {g}: {why}"))?;
            }
            saw_groups = true;
            Ok(())
        }
        _ => r.skip(kind),
    })?;
    if let Some((name, has)) = missing {
        return Err(Problem::MissingColumn(name, has));
    }
    if leaves.is_none() {
        return Err("it has no schema".to_string().into());
    }
    if !saw_groups {
        return Err("it has no row_groups".to_string().into());
    }
    Ok(())
}

fn parse_element<'b>(r: &mut Reader<'b>) -> Parsed<Element<'b>> {
    let mut element = Element {
        physical: None,
        type_length: 0,
        repetition: REQUIRED,
        name: b"",
        children: 0,
    };
    r.read_struct(|r, id, kind| {
        match id {
            1 => element.physical = Some(r.i32(kind, "SchemaElement.type")?),
            2 => element.type_length = r.i32(kind, "SchemaElement.type_length")?,
            3 => element.repetition = r.i32(kind, "SchemaElement.repetition_type")?,
            4 => element.name = r.binary(kind, "SchemaElement.name")?,
            5 => element.children = r.i32(kind, "SchemaElement.num_children")?,
            _ => r.skip(kind)?,
        }
        Ok(())
    })?;
    Ok(element)
}

/// The names of the top-level columns, for messages.
fn top_names(elements: &[Element]) -> String {
    let mut names = Vec::new();
    let mut skip = 0i64;
    for element in elements.iter().skip(1) {
        if skip == 0 {
            names.push(String::from_utf8_lossy(element.name).into_owned());
        } else {
            skip -= 1;
        }
        skip += i64::from(element.children.max(0));
    }
    names.join(", ")
}

/// Walks the flattened schema (depth first, groups giving their children's count): every leaf
/// with its top-level name, and the levels of the leaves read (pushed to `footer.leaves`).
fn schema_leaves<'b>(
    elements: &[Element<'b>],
    selected: &[&ParquetColumn],
    footer: &mut Footer,
) -> Parsed<Vec<LeafInfo<'b>>> {
    struct Frame<'b> {
        left: i64,
        def: u16,
        rep: u16,
        top: &'b [u8],
    }
    let root = elements.first().ok_or("the schema is empty")?;
    let mut stack = vec![Frame {
        left: i64::from(root.children.max(0)),
        def: 0,
        rep: 0,
        top: b"",
    }];
    let mut leaves = Vec::new();
    for (i, element) in elements.iter().enumerate().skip(1) {
        while stack.last().is_some_and(|f| f.left == 0) {
            stack.pop();
        }
        let depth = stack.len();
        let parent = stack
            .last_mut()
            .ok_or("the schema has more elements than its groups hold")?;
        parent.left -= 1;
        let top = if depth == 1 { element.name } else { parent.top };
        let too_deep = || format!("schema element {i} is nested too deeply");
        let def = match element.repetition {
            REQUIRED => parent.def,
            OPTIONAL | REPEATED => parent.def.checked_add(1).ok_or_else(too_deep)?,
            other => return Err(format!("schema element {i} has repetition type {other}")),
        };
        let rep = match element.repetition {
            REPEATED => parent.rep.checked_add(1).ok_or_else(too_deep)?,
            _ => parent.rep,
        };
        if element.children > 0 {
            stack.push(Frame {
                left: i64::from(element.children),
                def,
                rep,
                top,
            });
            continue;
        }
        let physical = element.physical.ok_or_else(|| {
            format!("schema element {i} is neither a group with children nor a typed column")
        })?;
        let column = selected.iter().find(|c| c.name.as_bytes() == top);
        let read = if column.is_some() || selected.is_empty() {
            footer.leaves.push(Leaf {
                name: String::from_utf8_lossy(top).into_owned(),
                physical,
                type_length: element.type_length,
                max_def: def,
                max_rep: rep,
                expect: column.map(|c| Expect::of(c)),
            });
            Some(footer.leaves.len() - 1)
        } else {
            None
        };
        leaves.push(LeafInfo { top, read });
    }
    while stack.last().is_some_and(|f| f.left == 0) {
        stack.pop();
    }
    if !stack.is_empty() {
        return Err("the schema ends before its groups are complete".into());
    }
    Ok(leaves)
}

/// The parts of a `ColumnChunk` the reader needs.
struct ChunkMeta<'b> {
    path: Option<&'b [u8]>,
    codec: Option<i32>,
    values: Option<i64>,
    len: Option<i64>,
    data_page: Option<i64>,
    dictionary_page: Option<i64>,
}

fn parse_group(
    r: &mut Reader,
    leaves: &[LeafInfo],
    data_end: u64,
    footer: &mut Footer,
) -> Parsed<()> {
    let first_chunk = footer.chunks.len();
    let mut rows = None;
    let mut columns = None;
    r.read_struct(|r, id, kind| {
        match id {
            1 => {
                let n = r.list(kind, STRUCT, "RowGroup.columns")?;
                if n != leaves.len() {
                    return Err(format!(
                        "{n} column chunks for the schema's {} columns",
                        leaves.len()
                    ));
                }
                for leaf in leaves {
                    let meta = parse_chunk(r)?;
                    let chunk = chunk_of(&meta, leaf, data_end).map_err(|why| {
                        format!("column {}: {why}", String::from_utf8_lossy(leaf.top))
                    })?;
                    if let Some(index) = leaf.read {
                        footer.chunks.push(Chunk {
                            leaf: index,
                            ..chunk
                        });
                    }
                }
                columns = Some(n);
            }
            3 => {
                rows = Some(count(
                    r.i64(kind, "RowGroup.num_rows")?,
                    "RowGroup.num_rows",
                )?)
            }
            _ => r.skip(kind)?,
        }
        Ok(())
    })?;
    columns.ok_or("it has no columns")?;
    let rows = rows.ok_or("it has no num_rows")?;
    let first_row = footer.rows;
    footer.rows = first_row
        .checked_add(rows)
        .ok_or("the row counts overflow")?;
    let chunks = (first_chunk, footer.chunks.len());
    let offset = footer.chunks[chunks.0..chunks.1]
        .iter()
        .map(|c| c.start)
        .min()
        .unwrap_or(0);
    footer.groups.push(Group {
        first_row,
        rows,
        chunks,
        offset,
    });
    Ok(())
}

fn parse_chunk<'b>(r: &mut Reader<'b>) -> Parsed<ChunkMeta<'b>> {
    let mut meta = ChunkMeta {
        path: None,
        codec: None,
        values: None,
        len: None,
        data_page: None,
        dictionary_page: None,
    };
    r.read_struct(|r, id, kind| {
        match id {
            1 => {
                r.binary(kind, "ColumnChunk.file_path")?;
                return Err(
                    "its data is in another file (file_path), which dlio-rs does not read".into(),
                );
            }
            3 => r.strukt(kind, "ColumnChunk.meta_data", |r, id, kind| {
                match id {
                    3 => {
                        let n = r.list(kind, BINARY, "path_in_schema")?;
                        for i in 0..n {
                            let part = r.binary_element()?;
                            if i == 0 {
                                meta.path = Some(part);
                            }
                        }
                    }
                    4 => meta.codec = Some(r.i32(kind, "codec")?),
                    5 => meta.values = Some(r.i64(kind, "num_values")?),
                    7 => meta.len = Some(r.i64(kind, "total_compressed_size")?),
                    9 => meta.data_page = Some(r.i64(kind, "data_page_offset")?),
                    11 => meta.dictionary_page = Some(r.i64(kind, "dictionary_page_offset")?),
                    _ => r.skip(kind)?,
                }
                Ok(())
            })?,
            8 | 9 => return Err("it is encrypted, which dlio-rs cannot read".into()),
            _ => r.skip(kind)?,
        }
        Ok(())
    })?;
    Ok(meta)
}

/// The byte range of a chunk, as Arrow computes it: from the dictionary page if it comes first,
/// `total_compressed_size` long, within the data (after `PAR1`, before the footer).
fn chunk_of(meta: &ChunkMeta, leaf: &LeafInfo, data_end: u64) -> Parsed<Chunk> {
    let path = meta.path.ok_or("it has no meta_data.path_in_schema")?;
    if path != leaf.top {
        return Err(format!(
            "its path_in_schema starts with '{}'",
            String::from_utf8_lossy(path)
        ));
    }
    let data_page = count(
        meta.data_page.ok_or("it has no data_page_offset")?,
        "data_page_offset",
    )?;
    let start = match meta.dictionary_page {
        Some(d) if d > 0 && (d as u64) < data_page => d as u64,
        _ => data_page,
    };
    let len = count(
        meta.len.ok_or("it has no total_compressed_size")?,
        "total_compressed_size",
    )?;
    if start < 4 || start.checked_add(len).is_none_or(|end| end > data_end) {
        return Err(format!(
            "its {len} bytes at offset {start} are not within the data (bytes 4..{data_end})"
        ));
    }
    Ok(Chunk {
        leaf: 0,
        start,
        len,
        values: count(meta.values.ok_or("it has no num_values")?, "num_values")?,
        codec: meta.codec.ok_or("it has no codec")?,
    })
}

/// A page header, as far as the reader cares.
struct PageHeader {
    kind: i32,
    uncompressed: usize,
    compressed: usize,
    v1: Option<DataPage>,
    v2: Option<DataPageV2>,
}

struct DataPage {
    values: u64,
    encoding: i32,
    def_encoding: i32,
    rep_encoding: i32,
}

struct DataPageV2 {
    values: u64,
    rows: u64,
    encoding: i32,
    def_len: usize,
    rep_len: usize,
    compressed: bool,
}

fn length(n: i32, what: &str) -> Parsed<usize> {
    usize::try_from(n).map_err(|_| format!("{what} is negative ({n})"))
}

fn parse_page_header(r: &mut Reader) -> Parsed<PageHeader> {
    let mut kind = None;
    let mut uncompressed = None;
    let mut compressed = None;
    let mut v1 = None;
    let mut v2 = None;
    r.read_struct(|r, id, field| {
        match id {
            1 => kind = Some(r.i32(field, "type")?),
            2 => {
                uncompressed = Some(length(
                    r.i32(field, "uncompressed_page_size")?,
                    "uncompressed_page_size",
                )?)
            }
            3 => {
                compressed = Some(length(
                    r.i32(field, "compressed_page_size")?,
                    "compressed_page_size",
                )?)
            }
            5 => {
                let (mut values, mut encoding, mut def, mut rep) = (None, None, None, None);
                r.strukt(field, "data_page_header", |r, id, field| {
                    match id {
                        1 => values = Some(r.i32(field, "num_values")?),
                        2 => encoding = Some(r.i32(field, "encoding")?),
                        3 => def = Some(r.i32(field, "definition_level_encoding")?),
                        4 => rep = Some(r.i32(field, "repetition_level_encoding")?),
                        _ => r.skip(field)?,
                    }
                    Ok(())
                })?;
                let missing = |what: &str| format!("the data page header has no {what}");
                v1 = Some(DataPage {
                    values: length(values.ok_or_else(|| missing("num_values"))?, "num_values")?
                        as u64,
                    encoding: encoding.ok_or_else(|| missing("encoding"))?,
                    def_encoding: def.ok_or_else(|| missing("definition_level_encoding"))?,
                    rep_encoding: rep.ok_or_else(|| missing("repetition_level_encoding"))?,
                });
            }
            8 => {
                let mut fields = [None; 6];
                let mut compressed = true;
                r.strukt(field, "data_page_header_v2", |r, id, field| {
                    match id {
                        1..=6 => fields[id as usize - 1] = Some(r.i32(field, "a v2 page count")?),
                        7 => compressed = r.bool(field, "is_compressed")?,
                        _ => r.skip(field)?,
                    }
                    Ok(())
                })?;
                let get = |i: usize, what: &str| -> Parsed<usize> {
                    length(
                        fields[i]
                            .ok_or_else(|| format!("the v2 data page header has no {what}"))?,
                        what,
                    )
                };
                v2 = Some(DataPageV2 {
                    values: get(0, "num_values")? as u64,
                    rows: get(2, "num_rows")? as u64,
                    encoding: fields[3].ok_or("the v2 data page header has no encoding")?,
                    def_len: get(4, "definition_levels_byte_length")?,
                    rep_len: get(5, "repetition_levels_byte_length")?,
                    compressed,
                });
            }
            _ => r.skip(field)?,
        }
        Ok(())
    })?;
    Ok(PageHeader {
        kind: kind.ok_or("the page header has no type")?,
        uncompressed: uncompressed.ok_or("the page header has no uncompressed_page_size")?,
        compressed: compressed.ok_or("the page header has no compressed_page_size")?,
        v1,
        v2,
    })
}

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

/// A page header at the start of `bytes`, and its length.
fn parse_header_in(bytes: &[u8]) -> Parsed<(PageHeader, usize)> {
    let mut reader = Reader::new(bytes);
    let header = parse_page_header(&mut reader)?;
    Ok((header, reader.position()))
}

/// Checks a range of chunks (and the holes between them) as its bytes arrive, piece by piece.
struct RunWalk<'w> {
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
    carry: Vec<u8>,
}

/// An error in the run's chunk at that index.
type RunError = (usize, String);

impl<'w> RunWalk<'w> {
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
    fn feed(&mut self, mut bytes: &[u8]) -> std::result::Result<(), RunError> {
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
    fn finish_ended(&mut self) -> std::result::Result<(), RunError> {
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
