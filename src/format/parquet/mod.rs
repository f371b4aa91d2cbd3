//! Apache Parquet, as the MLPerf Storage fork of DLIO uses it (flux, dlrm): one row per sample,
//! the columns of `dataset.parquet.columns` (or, with none configured, one list column `data` of
//! the sample's bytes as uint8, as DLIO writes a sample without a schema).
//!
//! Written (our own minimal writer, read by pyarrow): `PAR1`, then row groups of
//! `row_group_size` rows (the last one shorter), each holding one column chunk per column in
//! schema order; a chunk is PLAIN-encoded, uncompressed v1 data pages of about 1 MiB of values
//! (pyarrow's default page size), no dictionary, no statistics. A list column is the standard
//! three-level `required group <name> (LIST) { repeated group list { required <type> element } }`,
//! so its pages start with repetition then definition levels (RLE/bit-packed hybrid, each with a
//! 4-byte length). Then the footer: `FileMetaData` in thrift's compact protocol, its length
//! (4 bytes, little-endian) and `PAR1`.
//!
//! Read as the fork's reader does with pyarrow (`ParquetFile(path).read_row_group(g, columns)`):
//! each reader thread keeps the current file's parsed footer (an open `ParquetFile`) and the last
//! row group it read. A sample of another file costs the footer, read as Arrow reads it: the last
//! 64 KiB (or the whole file if smaller), then the whole footer again if it is longer. A sample of
//! a row group not in hand costs that row group's column chunks of the columns marked `read` (all
//! columns when none is marked or none is configured), merged into ranges as pyarrow's
//! pre-buffering merges them (chunks at most 8 KiB apart join a range, the hole fetched too, up
//! to 32 MiB a range); the page headers are walked and must add up to each chunk.
//! A range is fetched in pieces of at most 8 MiB, in order, each checked as it arrives and then
//! dropped, so a reader thread holds a piece (and any one page a piece's end cuts), never a row
//! group; "in hand" records which row group was fetched. Further samples of the row group in
//! hand cost nothing: pyarrow holds the table. With
//! `read_mode: whole_file` (`pq.read_table(columns=...)`) the first sample of a file reads the
//! marked columns of every row group and the file's later samples cost nothing. With `verify`,
//! the levels of uncompressed pages are decoded and the values counted (rows × size); pages a
//! codec compressed (files written elsewhere, e.g. pyarrow's default snappy) are checked by
//! their headers only, as dlio-rs carries no parquet codecs.
//!
//! The files: `write.rs` writes a file; `read.rs` is the row-group reader, deciding what bytes
//! are fetched and when (the footer's tail, the coalesced ranges, their pieces and reads in
//! flight); `footer.rs` parses the footer into row groups, leaf columns and chunk ranges;
//! `page_header.rs` parses a page header; `pages.rs` walks a chunk's pages as the pieces arrive
//! and, with `verify`, decodes their levels and measures their values; `thrift.rs` is thrift's
//! compact protocol, written and read; `tests.rs` holds the tests of the reader and writer.

mod footer;
mod page_header;
mod pages;
mod read;
mod thrift;
mod write;

#[cfg(test)]
mod tests;

use rand::rngs::SmallRng;

use super::{Encoded, FileFormat, SampleReader};
use crate::config::formats::{ColumnType, ParquetColumn, ParquetReadMode};
use crate::config::{Compression, Config, ElementType};
use crate::dataset::FileShape;
use crate::error::{Error, Result};

/// Values per data page: pyarrow's default `data_page_size`.
const PAGE_BYTES: u64 = 1 << 20;

/// A binary value is one page of `4 + size` bytes at most, and page sizes are thrift i32s.
const MAX_BINARY_SIZE: u64 = i32::MAX as u64 - 1024;

const MAGIC: &[u8; 4] = b"PAR1";

/// parquet.thrift's `Type` (physical types).
mod physical {
    pub const BOOLEAN: i32 = 0;
    pub const INT32: i32 = 1;
    pub const INT64: i32 = 2;
    pub const INT96: i32 = 3;
    pub const FLOAT: i32 = 4;
    pub const DOUBLE: i32 = 5;
    pub const BYTE_ARRAY: i32 = 6;
    pub const FIXED_LEN_BYTE_ARRAY: i32 = 7;
}

/// parquet.thrift's `Encoding` values we write or check.
const PLAIN: i32 = 0;
const RLE: i32 = 3;

/// `PageType`.
const DATA_PAGE: i32 = 0;
const INDEX_PAGE: i32 = 1;
const DICTIONARY_PAGE: i32 = 2;
const DATA_PAGE_V2: i32 = 3;

/// `CompressionCodec::UNCOMPRESSED`.
const UNCOMPRESSED: i32 = 0;

/// `FieldRepetitionType`.
const REQUIRED: i32 = 0;
const OPTIONAL: i32 = 1;
const REPEATED: i32 = 2;

/// How a column's values are stored, as Arrow stores the numpy type: integers narrower than 32
/// bits widen to INT32 with an INTEGER annotation, float16 is a 2-byte FIXED_LEN_BYTE_ARRAY
/// annotated FLOAT16, binary a length-prefixed BYTE_ARRAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stored {
    physical: i32,
    /// Bytes of one PLAIN value (a BYTE_ARRAY's include its 4-byte length).
    width: u64,
    /// The FIXED_LEN_BYTE_ARRAY length.
    type_length: Option<i32>,
    /// The legacy `ConvertedType`, which Arrow writes beside the logical type.
    converted: Option<i32>,
    logical: Option<Logical>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Logical {
    Integer { bits: i8, signed: bool },
    Float16,
}

impl Stored {
    fn of(dtype: ColumnType, size: u64) -> Stored {
        let number = |physical, width| Stored {
            physical,
            width,
            type_length: None,
            converted: None,
            logical: None,
        };
        let integer = |physical, width, bits, signed, converted| Stored {
            converted: Some(converted),
            logical: Some(Logical::Integer { bits, signed }),
            ..number(physical, width)
        };
        use physical::*;
        match dtype {
            ColumnType::Binary => number(BYTE_ARRAY, 4 + size),
            ColumnType::Number(element) => match element {
                // ConvertedType: UINT_8 = 11 .. UINT_64 = 14, INT_8 = 15, INT_16 = 16.
                ElementType::Int8 => integer(INT32, 4, 8, true, 15),
                ElementType::Uint8 => integer(INT32, 4, 8, false, 11),
                ElementType::Int16 => integer(INT32, 4, 16, true, 16),
                ElementType::Uint16 => integer(INT32, 4, 16, false, 12),
                ElementType::Int32 => number(INT32, 4),
                ElementType::Uint32 => integer(INT32, 4, 32, false, 13),
                ElementType::Int64 => number(INT64, 8),
                ElementType::Uint64 => integer(INT64, 8, 64, false, 14),
                ElementType::Float16 => Stored {
                    type_length: Some(2),
                    logical: Some(Logical::Float16),
                    ..number(FIXED_LEN_BYTE_ARRAY, 2)
                },
                ElementType::Float32 => number(FLOAT, 4),
                ElementType::Float64 => number(DOUBLE, 8),
            },
        }
    }
}

/// The parquet format: the writer and the row-group reader of `dataset.parquet`.
pub struct Parquet {
    /// Empty: the `data` column, sized from each file's shape.
    columns: Vec<ParquetColumn>,
    row_group_size: u64,
    read_mode: ParquetReadMode,
    /// Decode the levels and count the values of every page read.
    verify: bool,
}

impl Parquet {
    pub fn new(config: &Config, verify: bool) -> Result<Parquet> {
        let dataset = &config.dataset;
        if dataset.compression != Compression::None {
            return Err(Error::usage(format!(
                "workload.dataset.compression = {}: dlio-rs writes parquet column chunks \
                 uncompressed; use ++workload.dataset.compression=none",
                dataset.compression
            )));
        }
        let parquet = &dataset.parquet;
        for (i, column) in parquet.columns.iter().enumerate() {
            if parquet.columns[..i].iter().any(|c| c.name == column.name) {
                return Err(Error::usage(format!(
                    "workload.dataset.parquet.columns: the column name '{}' appears twice",
                    column.name
                )));
            }
            if column.dtype == ColumnType::Binary && column.size > MAX_BINARY_SIZE {
                return Err(Error::usage(format!(
                    "workload.dataset.parquet.columns[{i}] ({}): a binary value of {} bytes is \
                     more than a parquet page can hold ({MAX_BINARY_SIZE})",
                    column.name, column.size
                )));
            }
        }
        Ok(Parquet {
            columns: parquet.columns.clone(),
            row_group_size: parquet.row_group_size,
            read_mode: parquet.read_mode,
            verify,
        })
    }
}

impl FileFormat for Parquet {
    fn encode(
        &self,
        _key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        out.clear();
        write::write_file(self, shape, rng, out)
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(read::RowGroupReader::new(self))
    }

    /// The parquet reader of DLIO's MLPerf fork keeps its last file open across the closes of
    /// `read_type: on_demand` (its `file_cache`, on by default), with the file's footer and row
    /// groups: as the file in hand here.
    fn opened_per_sample_on_demand(&self) -> bool {
        false
    }
}
