//! Round trips through real files, the bytes each sample costs, coalescing, whole-file reads,
//! damaged files, O_DIRECT, and a footer written by pyarrow.

use std::io;
use std::sync::Mutex;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::read::RowGroupReader;
use super::*;
use crate::config::fields::Choice;
use crate::config::value::Value;
use crate::format::{ReadBuffer, SampleRead};
use crate::storage::{
    scratch_dir, Accounting, EntryKind, IoBuffer, LocalFs, LocalOptions, Mapped, ObjectWriter,
    RangeRead, Storage,
};

fn column(name: &str, dtype: &str, size: u64, read: bool) -> ParquetColumn {
    ParquetColumn {
        name: name.to_string(),
        dtype: match dtype {
            "binary" => ColumnType::Binary,
            other => ColumnType::Number(ElementType::parse(other).unwrap()),
        },
        size,
        read,
    }
}

fn format(columns: Vec<ParquetColumn>, row_group_size: u64, mode: ParquetReadMode) -> Parquet {
    Parquet {
        columns,
        row_group_size,
        read_mode: mode,
        verify: true,
    }
}

fn rows(n: u64) -> FileShape {
    FileShape {
        dims: vec![1, n],
        element: ElementType::Uint8,
    }
}

fn encode(format: &Parquet, shape: &FileShape) -> Vec<u8> {
    let mut out = Encoded::default();
    format
        .encode(
            "f.parquet",
            shape,
            &mut SmallRng::seed_from_u64(7),
            &mut out,
        )
        .unwrap();
    assert!(out.side_files().is_empty());
    out.data
}

/// A local folder whose range reads are recorded, to see how a reader reads.
struct Recording {
    inner: LocalFs,
    reads: Mutex<Vec<(u64, usize)>>,
}

impl Recording {
    fn new(name: &str) -> Recording {
        Recording {
            inner: LocalFs::new(scratch_dir(name)),
            reads: Mutex::new(Vec::new()),
        }
    }

    fn take_reads(&self) -> Vec<(u64, usize)> {
        std::mem::take(&mut self.reads.lock().unwrap())
    }
}

impl Drop for Recording {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.inner.root());
    }
}

impl Storage for Recording {
    fn describe(&self, key: &str) -> String {
        self.inner.describe(key)
    }
    fn read_all(&self, key: &str, buf: &mut IoBuffer) -> io::Result<usize> {
        self.inner.read_all(key, buf)
    }
    fn read_range(
        &self,
        key: &str,
        offset: u64,
        len: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        self.reads.lock().unwrap().push((offset, len));
        self.inner.read_range(key, offset, len, buf)
    }
    fn map_range(&self, key: &str, offset: u64, len: usize) -> io::Result<Mapped> {
        self.inner.map_range(key, offset, len)
    }
    fn size(&self, key: &str) -> io::Result<u64> {
        self.inner.size(key)
    }
    fn create(&self, key: &str) -> io::Result<Box<dyn ObjectWriter + '_>> {
        self.inner.create(key)
    }
    fn exists(&self, key: &str) -> io::Result<bool> {
        self.inner.exists(key)
    }
    fn delete(&self, key: &str) -> io::Result<bool> {
        self.inner.delete(key)
    }
    fn list_dir(&self, prefix: &str, each: &mut dyn FnMut(&str, EntryKind)) -> io::Result<()> {
        self.inner.list_dir(prefix, each)
    }
    fn accounting(&self) -> Accounting {
        self.inner.accounting()
    }
    fn sync(&self) -> io::Result<()> {
        self.inner.sync()
    }
}

/// Reads every sample of `key` in order.
fn read_all_samples(
    reader: &mut RowGroupReader,
    storage: &dyn Storage,
    key: &str,
    samples: u64,
) -> Vec<SampleRead> {
    let mut buf = ReadBuffer::default();
    (0..samples)
        .map(|s| {
            reader
                .read_sample(storage, key, s, &mut buf)
                .unwrap_or_else(|e| panic!("sample {s}: {e}"))
        })
        .collect()
}

/// Bytes of the PLAIN values of `rows` rows of a column, from the configuration alone.
fn value_bytes(column: &ParquetColumn, rows: u64) -> u64 {
    let stored = Stored::of(column.dtype, column.size);
    match column.dtype {
        ColumnType::Binary => rows * stored.width,
        ColumnType::Number(_) => rows * column.size * stored.width,
    }
}

fn mixed_columns() -> Vec<ParquetColumn> {
    vec![
        column("long_list", "float32", 300, true),
        column("short_list", "uint8", 5, false),
        column("half", "float16", 3, true),
        column("small", "int8", 1, true),
        column("wide", "float64", 1, false),
        column("blob", "binary", 10, true),
        column("u32", "uint32", 1, false),
        column("i16", "int16", 2, true),
    ]
}

#[test]
fn every_sample_round_trips_and_costs_its_row_groups_marked_chunks_once() {
    let columns = mixed_columns();
    let parquet = format(columns.clone(), 4, ParquetReadMode::RowGroup);
    let file = encode(&parquet, &rows(10));
    let storage = Recording::new("parquet-round-trip");
    storage.put("train/f.parquet", &file).unwrap();

    // Every column's chunks, from a reader of all columns: they tile the data exactly, each
    // holds its values plus a few bytes of headers and levels.
    let all = format(
        columns
            .iter()
            .map(|c| ParquetColumn {
                read: false,
                ..c.clone()
            })
            .collect(),
        4,
        ParquetReadMode::RowGroup,
    );
    let mut every = RowGroupReader::new(&all);
    read_all_samples(&mut every, &storage, "train/f.parquet", 10);
    let footer_len = u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into().unwrap());
    let mut next = 4;
    for (g, group_rows) in [4u64, 4, 2].into_iter().enumerate() {
        let chunks = every.chunk_ranges(g);
        assert_eq!(chunks.len(), columns.len());
        for ((start, len), column) in chunks.into_iter().zip(&columns) {
            assert_eq!(start, next, "row group {g}, {}", column.name);
            let values = value_bytes(column, group_rows);
            assert!(
                (values..values + 64).contains(&len),
                "row group {g}, {}: {len} bytes for {values} of values",
                column.name
            );
            next = start + len;
        }
    }
    assert_eq!(next + u64::from(footer_len) + 8, file.len() as u64);
    assert_eq!(&file[..4], b"PAR1");

    let mut reader = RowGroupReader::new(&parquet);
    storage.take_reads();
    let reads = read_all_samples(&mut reader, &storage, "train/f.parquet", 10);
    for (g, first) in [(0usize, 0u64), (1, 4), (2, 8)] {
        let marked: Vec<(u64, u64)> = reader.chunk_ranges(g);
        assert_eq!(marked.len(), 5, "the five marked columns");
        let marked_bytes: u64 = marked.iter().map(|c| c.1).sum();
        let group_bytes: u64 = every.chunk_ranges(g).iter().map(|c| c.1).sum();
        assert!(marked_bytes < group_bytes);
        let footer_read = if g == 0 { file.len() as u64 } else { 0 };
        assert_eq!(
            reads[first as usize].bytes,
            footer_read + marked_bytes,
            "row group {g}"
        );
        assert_eq!(reads[first as usize].offset, marked[0].0);
        let group_rows = if g == 2 { 2 } else { 4 };
        for later in first + 1..first + group_rows {
            assert_eq!(reads[later as usize].bytes, 0, "sample {later}");
            assert_eq!(reads[later as usize].offset, marked[0].0);
        }
    }
    // The file is smaller than 64 KiB, so its footer came with one read of all of it; then one
    // range per run of adjacent marked chunks: long_list | half, small | blob | i16.
    let recorded = storage.take_reads();
    assert_eq!(recorded[0], (0, file.len()));
    assert_eq!(recorded.len(), 1 + 3 * 4);
    let groups: Vec<Vec<(u64, u64)>> = (0..3).map(|g| every.chunk_ranges(g)).collect();
    for (g, reads) in recorded[1..].chunks(4).enumerate() {
        let c = &groups[g];
        let span = |a: usize, b: usize| (c[a].0, (c[b].0 + c[b].1 - c[a].0) as usize);
        assert_eq!(reads, [span(0, 0), span(2, 3), span(5, 5), span(7, 7)]);
    }
}

#[test]
fn whole_file_mode_reads_every_row_group_on_the_first_sample_only() {
    let parquet = format(mixed_columns(), 3, ParquetReadMode::WholeFile);
    let file = encode(&parquet, &rows(8));
    let storage = Recording::new("parquet-whole-file");
    storage.put("f.parquet", &file).unwrap();
    let mut reader = RowGroupReader::new(&parquet);
    let reads = read_all_samples(&mut reader, &storage, "f.parquet", 8);
    let marked: u64 = (0..3)
        .flat_map(|g| reader.chunk_ranges(g))
        .map(|c| c.1)
        .sum();
    assert_eq!(reads[0].bytes, file.len() as u64 + marked);
    assert!(reads[1..].iter().all(|r| r.bytes == 0), "{reads:?}");
    // Another file, then back: each opening costs the footer and the columns again.
    storage.put("g.parquet", &file).unwrap();
    let mut buf = ReadBuffer::default();
    for key in ["g.parquet", "f.parquet"] {
        let read = reader.read_sample(&storage, key, 7, &mut buf).unwrap();
        assert_eq!(read.bytes, file.len() as u64 + marked);
    }
}

#[test]
fn without_columns_one_list_column_holds_each_samples_bytes() {
    let parquet = format(Vec::new(), 2, ParquetReadMode::RowGroup);
    let shape = FileShape {
        dims: vec![3, 5, 7],
        element: ElementType::Float32,
    };
    let file = encode(&parquet, &shape);
    let storage = Recording::new("parquet-default-column");
    storage.put("f.parquet", &file).unwrap();
    let mut reader = RowGroupReader::new(&parquet);
    let reads = read_all_samples(&mut reader, &storage, "f.parquet", 7);
    // 60 uint8 elements per row, stored as INT32 as Arrow stores uint8: 240 bytes a row.
    let first = reader.chunk_ranges(0);
    assert_eq!(first.len(), 1);
    assert!((2 * 240..2 * 240 + 64).contains(&first[0].1), "{first:?}");
    assert_eq!(reads[2].bytes, reader.chunk_ranges(1)[0].1);
    assert_eq!(reads[3].bytes, 0);
    let mut buf = ReadBuffer::default();
    let error = reader
        .read_sample(&storage, "f.parquet", 7, &mut buf)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("out of range") && error.contains("f.parquet"),
        "{error}"
    );
}

#[test]
fn rows_larger_than_a_page_straddle_pages_and_still_count() {
    // 300 000 float32 values a row: 1.2 MB, so pages of 1 MiB cut rows.
    let columns = vec![
        column("big", "float32", 300_000, true),
        column("t", "float32", 7, true),
    ];
    let parquet = format(columns, 2, ParquetReadMode::RowGroup);
    let file = encode(&parquet, &rows(3));
    let storage = Recording::new("parquet-big-rows");
    storage.put("f.parquet", &file).unwrap();
    let mut reader = RowGroupReader::new(&parquet);
    let reads = read_all_samples(&mut reader, &storage, "f.parquet", 3);
    let big = reader.chunk_ranges(0)[0].1;
    assert!((2 * 1_200_000..2 * 1_200_000 + 200).contains(&big), "{big}");
    assert!(reads[0].bytes > 2 * 1_200_000 && reads[1].bytes == 0 && reads[2].bytes > 0);
    // Verification counts rows by their levels: a wrong size in the configuration is caught.
    let wrong = format(
        vec![column("big", "float32", 150_000, true)],
        2,
        ParquetReadMode::RowGroup,
    );
    let mut buf = ReadBuffer::default();
    let error = RowGroupReader::new(&wrong)
        .read_sample(&storage, "f.parquet", 0, &mut buf)
        .unwrap_err()
        .to_string();
    assert!(error.contains("row group 0, column big"), "{error}");
    assert!(error.contains("rows of 150000"), "{error}");
}

#[test]
fn a_configured_column_missing_from_the_file_is_named() {
    let parquet = format(mixed_columns(), 4, ParquetReadMode::RowGroup);
    let file = encode(&parquet, &rows(4));
    let storage = Recording::new("parquet-missing-column");
    storage.put("f.parquet", &file).unwrap();
    let mut columns = mixed_columns();
    columns.push(column("absent", "float32", 1, true));
    let other = format(columns, 4, ParquetReadMode::RowGroup);
    let mut buf = ReadBuffer::default();
    let error = RowGroupReader::new(&other)
        .read_sample(&storage, "f.parquet", 0, &mut buf)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("f.parquet") && error.contains("'absent'"),
        "{error}"
    );
    assert!(error.contains("long_list, short_list"), "{error}");
}

/// Reads every sample of a (damaged) file with a fresh reader.
fn read_damaged(parquet: &Parquet, storage: &dyn Storage, samples: u64) -> Result<()> {
    let mut reader = RowGroupReader::new(parquet);
    let mut buf = ReadBuffer::default();
    for s in 0..samples {
        reader.read_sample(storage, "bad.parquet", s, &mut buf)?;
    }
    Ok(())
}

#[test]
fn every_truncation_and_damaged_footers_or_headers_are_errors_never_panics() {
    let columns = vec![
        column("l", "float32", 3, true),
        column("b", "binary", 2, true),
        column("s", "int16", 1, false),
    ];
    let parquet = format(columns, 2, ParquetReadMode::WholeFile);
    let file = encode(&parquet, &rows(3));
    let storage = Recording::new("parquet-damaged");
    for len in 0..file.len() {
        storage.put("bad.parquet", &file[..len]).unwrap();
        let error = read_damaged(&parquet, &storage, 3).unwrap_err().to_string();
        assert!(error.contains("bad.parquet"), "{len}: {error}");
    }
    // Any byte of the footer or of a page header changed: never a panic; the page sizes,
    // the footer's lengths and offsets are always caught.
    let footer_len = u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into().unwrap());
    let footer_start = file.len() - 8 - footer_len as usize;
    for at in (4..24).chain(footer_start..file.len()) {
        for value in [0x00, 0xFF, file[at] ^ 0x10] {
            let mut bad = file.clone();
            bad[at] = value;
            storage.put("bad.parquet", &bad).unwrap();
            if let Err(error) = read_damaged(&parquet, &storage, 3) {
                assert!(error.to_string().contains("bad.parquet"), "{error}");
            }
        }
    }
    // The first page's sizes: the header is type (byte 5), uncompressed size (7), compressed
    // size (9), each behind a one-byte field header.
    assert_eq!([file[4], file[6], file[8]], [0x15; 3]);
    for at in [7, 9] {
        let mut bad = file.clone();
        bad[at] = bad[at].wrapping_add(2);
        storage.put("bad.parquet", &bad).unwrap();
        let error = read_damaged(&parquet, &storage, 1).unwrap_err().to_string();
        assert!(error.contains("row group 0, column l"), "{error}");
    }
    // The footer length says more than the file holds.
    let mut bad = file.clone();
    let at = file.len() - 8;
    bad[at..at + 4].copy_from_slice(&(file.len() as u32).to_le_bytes());
    storage.put("bad.parquet", &bad).unwrap();
    let error = read_damaged(&parquet, &storage, 1).unwrap_err().to_string();
    assert!(error.contains("does not fit"), "{error}");
}

#[test]
fn a_footer_longer_than_the_first_read_is_read_again_whole() {
    // 800 scalar columns × 2 row groups: a footer of well over 64 KiB.
    let columns: Vec<ParquetColumn> = (0..800)
        .map(|i| column(&format!("feature_{i:03}"), "float16", 1, i % 100 == 7))
        .collect();
    let parquet = format(columns, 2, ParquetReadMode::RowGroup);
    let file = encode(&parquet, &rows(4));
    let footer_len = u32::from_le_bytes(file[file.len() - 8..file.len() - 4].try_into().unwrap());
    assert!(footer_len > 64 * 1024, "{footer_len}");
    let storage = Recording::new("parquet-long-footer");
    storage.put("f.parquet", &file).unwrap();
    let mut reader = RowGroupReader::new(&parquet);
    let reads = read_all_samples(&mut reader, &storage, "f.parquet", 4);
    let recorded = storage.take_reads();
    let size = file.len() as u64;
    let footer_start = size - 8 - u64::from(footer_len);
    assert_eq!(recorded[0], (size - 65536, 65536));
    assert_eq!(recorded[1], (footer_start, footer_len as usize));
    let marked = |g| reader.chunk_ranges(g).iter().map(|c| c.1).sum::<u64>();
    assert_eq!(reader.chunk_ranges(1).len(), 8);
    assert_eq!(reads[0].bytes, 65536 + u64::from(footer_len) + marked(0));
    assert_eq!(reads[2].bytes, marked(1));
}

#[test]
fn o_direct_reads_give_the_same_samples_in_whole_blocks() {
    let parquet = format(mixed_columns(), 4, ParquetReadMode::RowGroup);
    let file = encode(&parquet, &rows(9));
    let dir = scratch_dir("parquet-odirect");
    let buffered = LocalFs::new(&dir);
    buffered.put("f.parquet", &file).unwrap();
    let direct = LocalFs::with_options(
        &dir,
        LocalOptions {
            odirect: true,
            evict_after_read: false,
        },
    );
    let mut plain = RowGroupReader::new(&parquet);
    let mut aligned = RowGroupReader::new(&parquet);
    let want = read_all_samples(&mut plain, &buffered, "f.parquet", 9);
    let got = read_all_samples(&mut aligned, &direct, "f.parquet", 9);
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(w.offset, g.offset);
        assert_eq!(w.bytes == 0, g.bytes == 0);
        assert!(g.bytes >= w.bytes, "{w:?} {g:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// `small.parquet`, written by pyarrow (see the README beside it): 6 rows in row groups of 4
/// and 2, nullable columns id (int64), x (float32), vec (list of 3 float32), blob (4 bytes),
/// dictionary-encoded, with statistics and Arrow's schema in the key-value metadata.
const PYARROW_FILE: &[u8] = include_bytes!("../../../tests/fixtures/parquet-pyarrow/small.parquet");

#[test]
fn a_file_written_by_pyarrow_is_parsed_and_read_by_row_group() {
    let storage = Recording::new("parquet-pyarrow");
    storage.put("p.parquet", PYARROW_FILE).unwrap();
    let columns = vec![
        column("id", "int64", 1, false),
        column("x", "float32", 1, true),
        column("vec", "float32", 3, true),
        column("blob", "binary", 4, false),
    ];
    let parquet = format(columns, 4, ParquetReadMode::RowGroup);
    let mut reader = RowGroupReader::new(&parquet);
    let reads = read_all_samples(&mut reader, &storage, "p.parquet", 6);
    // Chunk ranges as pyarrow's metadata gives them (dictionary_page_offset,
    // total_compressed_size): x and vec are adjacent, so each row group is one read.
    assert_eq!(reader.chunk_ranges(0), [(123, 87), (210, 132)]);
    assert_eq!(reader.chunk_ranges(1), [(535, 78), (613, 102)]);
    assert_eq!(
        storage.take_reads(),
        [(0, PYARROW_FILE.len()), (123, 219), (535, 180)]
    );
    let bytes: Vec<u64> = reads.iter().map(|r| r.bytes).collect();
    let size = PYARROW_FILE.len() as u64;
    assert_eq!(bytes, [size + 219, 0, 0, 0, 180, 0]);
    // No column marked: every configured one is read, WholeFile, levels decoded (the values
    // are dictionary-encoded, so only their levels are counted).
    let all = format(
        vec![
            column("vec", "float32", 3, false),
            column("blob", "binary", 4, false),
        ],
        4,
        ParquetReadMode::WholeFile,
    );
    read_all_samples(&mut RowGroupReader::new(&all), &storage, "p.parquet", 6);
    // A wrong list size is caught by counting the values; without verify, only the structure
    // is checked.
    let mut wrong = format(
        vec![column("vec", "float32", 4, true)],
        4,
        ParquetReadMode::RowGroup,
    );
    let mut buf = ReadBuffer::default();
    let error = RowGroupReader::new(&wrong)
        .read_sample(&storage, "p.parquet", 0, &mut buf)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("column vec") && error.contains("12 values"),
        "{error}"
    );
    wrong.verify = false;
    RowGroupReader::new(&wrong)
        .read_sample(&storage, "p.parquet", 0, &mut buf)
        .unwrap();
}

fn config(yaml: &str) -> Config {
    Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap()
}

#[test]
fn for_config_refuses_compression_and_duplicate_columns() {
    let base = "dataset:\n  format: parquet\n";
    let error = crate::format::for_config(&config(&format!("{base}  compression: gzip\n")), false)
        .err()
        .unwrap();
    assert!(matches!(error, Error::Usage(_)));
    assert!(
        error.to_string().contains("workload.dataset.compression"),
        "{error}"
    );
    let twice = format!(
        "{base}  parquet:\n    columns:\n      - {{name: a, dtype: float32}}\n      - {{name: a, dtype: int8}}\n"
    );
    let error = crate::format::for_config(&config(&twice), false)
        .err()
        .unwrap();
    assert!(error.to_string().contains("'a' appears twice"), "{error}");
    let good =
        format!("{base}  parquet:\n    columns:\n      - {{name: a, dtype: float32, size: 4}}\n");
    let format = crate::format::for_config(&config(&good), true).unwrap();
    let mut out = Encoded::default();
    format
        .encode("k", &rows(3), &mut SmallRng::seed_from_u64(1), &mut out)
        .unwrap();
    assert_eq!(&out.data[out.data.len() - 4..], b"PAR1");
}
