//! The writer: row groups of column chunks of PLAIN v1 pages, then the thrift footer. Values are
//! random bytes filled page by page in bulk; only narrow integers (widened to INT32, as Arrow
//! stores them) and binary length prefixes get a cheap pass after the fill, and list levels are
//! a few runs per row, so writing costs little more than the bytes themselves.

use rand::rngs::SmallRng;

use super::thrift::{varint, write_struct, StructWriter};
use super::{
    Logical, Parquet, Stored, DATA_PAGE, MAGIC, PAGE_BYTES, PLAIN, REPEATED, REQUIRED, RLE,
    UNCOMPRESSED,
};
use crate::config::formats::ColumnType;
use crate::config::ElementType;
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::format::Encoded;

/// One column as written.
struct Column {
    name: String,
    dtype: ColumnType,
    /// Elements per row of a list; a binary value's bytes.
    size: u64,
    list: bool,
    stored: Stored,
}

impl Column {
    fn new(name: &str, dtype: ColumnType, size: u64) -> Column {
        Column {
            name: name.to_string(),
            dtype,
            size,
            // A binary column holds one value of `size` bytes per row.
            list: size > 1 && dtype != ColumnType::Binary,
            stored: Stored::of(dtype, size),
        }
    }

    /// PLAIN values per row.
    fn values_per_row(&self) -> u64 {
        if self.list {
            self.size
        } else {
            1
        }
    }
}

/// Where one column chunk landed.
struct Chunk {
    start: u64,
    len: u64,
    values: u64,
}

fn columns_of(parquet: &Parquet, shape: &FileShape) -> Vec<Column> {
    if parquet.columns.is_empty() {
        let sample_bytes = shape.dims[..shape.dims.len().saturating_sub(1)]
            .iter()
            .product::<u64>()
            * shape.element.size();
        return vec![Column::new(
            "data",
            ColumnType::Number(ElementType::Uint8),
            sample_bytes,
        )];
    }
    parquet
        .columns
        .iter()
        .map(|c| Column::new(&c.name, c.dtype, c.size))
        .collect()
}

/// Writes a whole file of `shape.dims.last()` rows into `out`.
pub(super) fn write_file(
    parquet: &Parquet,
    shape: &FileShape,
    rng: &mut SmallRng,
    out: &mut Encoded,
) -> Result<()> {
    let rows = shape.dims.last().copied().unwrap_or(1);
    let columns = columns_of(parquet, shape);
    let too_large = || {
        Error::run(format!(
            "a parquet file of {rows} rows is too large to write"
        ))
    };
    let row_bytes = columns
        .iter()
        .try_fold(0u64, |sum, c| {
            c.values_per_row()
                .checked_mul(c.stored.width)
                .and_then(|b| sum.checked_add(b))
        })
        .ok_or_else(too_large)?;
    let data_bytes = row_bytes.checked_mul(rows).ok_or_else(too_large)?;
    let group_rows = parquet.row_group_size.max(1);
    let groups = rows.div_ceil(group_rows);
    // Reserving the whole file up front saves the copies of growing a buffer of GBs.
    let estimate = file_bytes_bound(&columns, rows, groups, data_bytes);
    out.reserve(usize::try_from(estimate).map_err(|_| too_large())?);
    out.data.extend_from_slice(MAGIC);
    let mut chunks = Vec::with_capacity((groups as usize).saturating_mul(columns.len()));
    let mut levels = Vec::new();
    for group in 0..groups {
        let first = group * group_rows;
        let n = group_rows.min(rows - first);
        for column in &columns {
            chunks.push(write_chunk(out, column, n, rng, &mut levels)?);
        }
    }
    let footer_start = out.position();
    write_footer(&mut out.data, &columns, &chunks, rows, group_rows);
    let footer_len = u32::try_from(out.position() - footer_start)
        .map_err(|_| Error::run("the parquet footer is larger than 4 GiB"))?;
    out.data.extend_from_slice(&footer_len.to_le_bytes());
    out.data.extend_from_slice(MAGIC);
    Ok(())
}

/// At least the bytes of the file: the values, and per page its header (under 32 bytes), level
/// framing and definition run (under 32); per row of a list column its repetition levels (at
/// most 8 bytes in RLE runs, under 5 bit-packed); per chunk its footer entry (under 100 bytes
/// and the name); per column its schema elements (under 60 bytes and the name).
fn file_bytes_bound(columns: &[Column], rows: u64, groups: u64, data_bytes: u64) -> u64 {
    let per_column = |c: &Column| {
        let values = rows.saturating_mul(c.values_per_row());
        let pages = values / (PAGE_BYTES / c.stored.width).max(1) + groups;
        let levels = if c.list { rows.saturating_mul(8) } else { 0 };
        let name = c.name.len() as u64;
        pages
            .saturating_mul(64)
            .saturating_add(levels)
            .saturating_add(groups.saturating_mul(100 + name))
            .saturating_add(60 + name)
    };
    columns
        .iter()
        .map(per_column)
        .fold(data_bytes.saturating_add(4096), u64::saturating_add)
}

fn write_chunk(
    out: &mut Encoded,
    column: &Column,
    rows: u64,
    rng: &mut SmallRng,
    levels: &mut Vec<u8>,
) -> Result<Chunk> {
    let start = out.position();
    let values = rows * column.values_per_row();
    let per_page = (PAGE_BYTES / column.stored.width).max(1);
    let mut first = 0;
    while first < values {
        let end = values.min(first + per_page);
        write_page(out, column, first, end, rng, levels)?;
        first = end;
    }
    Ok(Chunk {
        start,
        len: out.position() - start,
        values,
    })
}

/// One data page holding the chunk's values `first..end` (a list's rows may straddle pages, as
/// in pyarrow's v1 pages).
fn write_page(
    out: &mut Encoded,
    column: &Column,
    first: u64,
    end: u64,
    rng: &mut SmallRng,
    levels: &mut Vec<u8>,
) -> Result<()> {
    let n = end - first;
    levels.clear();
    if column.list {
        with_length(levels, |l| repetition_levels(l, first, end, column.size));
        with_length(levels, |l| rle_run(l, n, 1));
    }
    let value_bytes = (n * column.stored.width) as usize;
    // Fits: a page holds at most PAGE_BYTES of values, or one binary value checked against
    // MAX_BINARY_SIZE by the configuration.
    let body = (levels.len() + value_bytes) as i32;
    write_struct(&mut out.data, |h| {
        h.i32(1, DATA_PAGE);
        h.i32(2, body);
        h.i32(3, body);
        h.strukt(5, |d| {
            d.i32(1, n as i32);
            d.i32(2, PLAIN);
            d.i32(3, RLE);
            d.i32(4, RLE);
        });
    });
    out.data.extend_from_slice(levels);
    out.random_values(
        value_bytes as u64,
        column.stored.width as usize,
        rng,
        |values| finish_values(values, column),
    )
}

/// Makes random bytes (whole values) valid values where not every bit pattern is one: narrow integers stored
/// as INT32 are sign- or zero-extended, a binary value gets its length.
fn finish_values(page: &mut [u8], column: &Column) {
    match column.dtype {
        ColumnType::Number(ElementType::Int8) => widen(page, |v| v as u8 as i8 as i32 as u32),
        ColumnType::Number(ElementType::Uint8) => widen(page, |v| v & 0xFF),
        ColumnType::Number(ElementType::Int16) => widen(page, |v| v as u16 as i16 as i32 as u32),
        ColumnType::Number(ElementType::Uint16) => widen(page, |v| v & 0xFFFF),
        ColumnType::Binary => {
            let len = (column.size as u32).to_le_bytes();
            for value in page.chunks_exact_mut(column.stored.width as usize) {
                value[..4].copy_from_slice(&len);
            }
        }
        ColumnType::Number(_) => {}
    }
}

/// Rewrites each little-endian u32 of `page` as `f` of it; generic so that `f` inlines and the
/// loop vectorizes.
fn widen(page: &mut [u8], f: impl Fn(u32) -> u32) {
    for value in page.chunks_exact_mut(4) {
        let v = u32::from_le_bytes([value[0], value[1], value[2], value[3]]);
        value.copy_from_slice(&f(v).to_le_bytes());
    }
}

/// Appends what `levels` writes behind its 4-byte little-endian length, as v1 pages frame levels.
fn with_length(out: &mut Vec<u8>, levels: impl FnOnce(&mut Vec<u8>)) {
    let at = out.len();
    out.extend_from_slice(&[0; 4]);
    levels(out);
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

/// An RLE run of the hybrid encoding: `count` times `value`, at a bit width of 1 (one byte).
fn rle_run(out: &mut Vec<u8>, count: u64, value: u8) {
    varint(out, count << 1);
    out.push(value);
}

/// Lists at least this long get RLE runs (0 once, then 1 for the rest of the row: about 5 bytes
/// a row); shorter ones are bit-packed (size / 8 bytes a row), which is then smaller.
const RLE_FROM: u64 = 40;

/// Repetition levels of values `first..end` of a chunk of lists of `size`: 0 starts a row, 1
/// continues it.
fn repetition_levels(out: &mut Vec<u8>, first: u64, end: u64, size: u64) {
    if size >= RLE_FROM {
        let mut i = first;
        while i < end {
            let phase = i % size;
            if phase == 0 {
                rle_run(out, 1, 0);
                i += 1;
            } else {
                let row_end = end.min(i - phase + size);
                rle_run(out, row_end - i, 1);
                i = row_end;
            }
        }
        return;
    }
    let n = end - first;
    varint(out, n.div_ceil(8) << 1 | 1);
    let mut phase = first % size;
    let mut byte = 0u8;
    for i in 0..n {
        if phase != 0 {
            byte |= 1 << (i % 8);
        }
        phase += 1;
        if phase == size {
            phase = 0;
        }
        if i % 8 == 7 {
            out.push(byte);
            byte = 0;
        }
    }
    if n % 8 != 0 {
        out.push(byte);
    }
}

fn write_footer(
    out: &mut Vec<u8>,
    columns: &[Column],
    chunks: &[Chunk],
    rows: u64,
    group_rows: u64,
) {
    let schema_len = 1 + columns
        .iter()
        .map(|c| if c.list { 3 } else { 1 })
        .sum::<usize>();
    // The schema flattened depth first: the root, then each column (a list's group, its
    // repeated group and its element).
    let mut schema: Vec<(&Column, u8)> = Vec::with_capacity(schema_len);
    for column in columns {
        if column.list {
            schema.extend([(column, 0), (column, 1), (column, 2)]);
        } else {
            schema.push((column, 2));
        }
    }
    write_struct(out, |meta| {
        meta.i32(1, 2);
        meta.list_structs(2, schema_len, |e, i| match i.checked_sub(1) {
            None => {
                e.binary(4, b"schema");
                e.i32(5, columns.len() as i32);
            }
            Some(i) => schema_element(e, schema[i].0, schema[i].1),
        });
        meta.i64(3, rows as i64);
        let groups = chunks.len() / columns.len().max(1);
        meta.list_structs(4, groups, |group, g| {
            let chunks = &chunks[g * columns.len()..(g + 1) * columns.len()];
            group.list_structs(1, columns.len(), |chunk, c| {
                column_chunk(chunk, &columns[c], &chunks[c])
            });
            let bytes: u64 = chunks.iter().map(|c| c.len).sum();
            group.i64(2, bytes as i64);
            let first = g as u64 * group_rows;
            group.i64(3, group_rows.min(rows - first) as i64);
            group.i64(5, chunks.first().map_or(0, |c| c.start) as i64);
            group.i64(6, bytes as i64);
        });
        meta.binary(6, b"dlio-rs");
    });
}

/// Schema element `part` of a column: 0 a list's group, 1 its repeated group, 2 the leaf.
fn schema_element(e: &mut StructWriter, column: &Column, part: u8) {
    let stored = column.stored;
    match part {
        0 => {
            e.i32(3, REQUIRED);
            e.binary(4, column.name.as_bytes());
            e.i32(5, 1);
            e.i32(6, 3); // ConvertedType LIST
            e.strukt(10, |logical| logical.strukt(3, |_| {})); // LogicalType LIST
        }
        1 => {
            e.i32(3, REPEATED);
            e.binary(4, b"list");
            e.i32(5, 1);
        }
        _ => {
            e.i32(1, stored.physical);
            if let Some(len) = stored.type_length {
                e.i32(2, len);
            }
            e.i32(3, REQUIRED);
            let name: &[u8] = if column.list {
                b"element"
            } else {
                column.name.as_bytes()
            };
            e.binary(4, name);
            if let Some(converted) = stored.converted {
                e.i32(6, converted);
            }
            match stored.logical {
                Some(Logical::Integer { bits, signed }) => e.strukt(10, |logical| {
                    logical.strukt(10, |int| {
                        int.byte(1, bits);
                        int.bool(2, signed);
                    })
                }),
                Some(Logical::Float16) => e.strukt(10, |logical| logical.strukt(15, |_| {})),
                None => {}
            }
        }
    }
}

fn column_chunk(chunk: &mut StructWriter, column: &Column, at: &Chunk) {
    // Deprecated and to be 0 when no column metadata is written outside the footer.
    chunk.i64(2, 0);
    chunk.strukt(3, |meta| {
        meta.i32(1, column.stored.physical);
        if column.list {
            meta.list_i32(2, &[PLAIN, RLE]);
            meta.list_binary(3, &[column.name.as_bytes(), b"list", b"element"]);
        } else {
            meta.list_i32(2, &[PLAIN]);
            meta.list_binary(3, &[column.name.as_bytes()]);
        }
        meta.i32(4, UNCOMPRESSED);
        meta.i64(5, at.values as i64);
        meta.i64(6, at.len as i64);
        meta.i64(7, at.len as i64);
        meta.i64(9, at.start as i64);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes hybrid levels of bit width 1 (test helper; the reader only counts).
    fn decode(mut bytes: &[u8], n: usize) -> Vec<u8> {
        let mut levels = Vec::new();
        let varint = |b: &mut &[u8]| {
            let mut v = 0u64;
            for shift in (0..).step_by(7) {
                let byte = b[0];
                *b = &b[1..];
                v |= u64::from(byte & 0x7F) << shift;
                if byte & 0x80 == 0 {
                    break;
                }
            }
            v
        };
        while levels.len() < n {
            let header = varint(&mut bytes);
            if header & 1 == 0 {
                let value = bytes[0];
                bytes = &bytes[1..];
                levels.extend(std::iter::repeat_n(value, (header >> 1) as usize));
            } else {
                for _ in 0..header >> 1 {
                    levels.extend((0..8).map(|bit| (bytes[0] >> bit) & 1));
                    bytes = &bytes[1..];
                }
            }
        }
        assert!(bytes.is_empty(), "bytes left after the levels");
        levels.truncate(n);
        levels
    }

    #[test]
    fn repetition_levels_mark_row_starts_in_both_encodings_from_any_phase() {
        for size in [2, 3, 7, 39, 40, 41, 100] {
            for first in [0, 1, size - 1, size, 5 * size + 1] {
                let end = first + 3 * size + 2;
                let mut out = Vec::new();
                repetition_levels(&mut out, first, end, size);
                let want: Vec<u8> = (first..end).map(|i| u8::from(i % size != 0)).collect();
                assert_eq!(decode(&out, want.len()), want, "size {size} from {first}");
            }
        }
    }

    #[test]
    fn the_reserved_bytes_hold_the_whole_file() {
        let parquet = |columns| Parquet {
            columns,
            row_group_size: 3,
            read_mode: crate::config::formats::ParquetReadMode::RowGroup,
            verify: false,
        };
        let column = |name: &str, dtype, size| crate::config::formats::ParquetColumn {
            name: name.to_string(),
            dtype,
            size,
            read: true,
        };
        let f32 = ColumnType::Number(ElementType::Float32);
        for columns in [
            vec![column("a_long_column_name", f32, 300_000)],
            vec![column("a", f32, 41), column("b", ColumnType::Binary, 3)],
            (0..50)
                .map(|i| {
                    column(
                        &format!("feature_{i}"),
                        ColumnType::Number(ElementType::Int8),
                        1,
                    )
                })
                .collect(),
            vec![column("short", ColumnType::Number(ElementType::Uint8), 2)],
        ] {
            let parquet = parquet(columns);
            for rows in [1, 7, 100] {
                let shape = FileShape {
                    dims: vec![1, rows],
                    element: ElementType::Uint8,
                };
                let mut encoded = Encoded::default();
                write_file(
                    &parquet,
                    &shape,
                    &mut rand::SeedableRng::seed_from_u64(1),
                    &mut encoded,
                )
                .unwrap();
                let out = encoded.data;
                let columns = columns_of(&parquet, &shape);
                let data: u64 = columns
                    .iter()
                    .map(|c| rows * c.values_per_row() * c.stored.width)
                    .sum();
                let bound = file_bytes_bound(&columns, rows, rows.div_ceil(3), data);
                assert!(out.len() as u64 <= bound, "{} > {bound}", out.len());
                // Not much more either: the bytes beyond the values at most 4 times over.
                let len = out.len() as u64;
                assert!(bound - data < 4 * (len - data) + 65536, "{bound} for {len}");
            }
        }
    }

    #[test]
    fn narrow_integers_are_extended_and_binaries_get_their_length() {
        let column = |dtype, size| Column::new("c", dtype, size);
        let mut page = [0xF0, 0xFF, 0x12, 0x34, 0x7F, 0x80, 0x12, 0x34].to_vec();
        finish_values(&mut page, &column(ColumnType::Number(ElementType::Int8), 1));
        assert_eq!(i32::from_le_bytes(page[..4].try_into().unwrap()), -16);
        assert_eq!(i32::from_le_bytes(page[4..].try_into().unwrap()), 127);
        let mut page = [0xF0, 0xFF, 0x12, 0x34].to_vec();
        finish_values(
            &mut page,
            &column(ColumnType::Number(ElementType::Uint16), 1),
        );
        assert_eq!(u32::from_le_bytes(page[..4].try_into().unwrap()), 0xFFF0);
        let mut page = vec![0xAA; 2 * (4 + 3)];
        finish_values(&mut page, &column(ColumnType::Binary, 3));
        assert_eq!(&page[..4], &3u32.to_le_bytes());
        assert_eq!(&page[7..11], &3u32.to_le_bytes());
        assert_eq!(page[4..7], [0xAA; 3]);
    }
}
