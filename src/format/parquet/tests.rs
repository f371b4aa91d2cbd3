//! Round trips through real files, the bytes each sample costs, coalescing, whole-file reads,
//! damaged files, O_DIRECT, and a footer written by pyarrow.

use rand::rngs::SmallRng;
use rand::SeedableRng;

use super::read::{RowGroupReader, PIECE_BYTES};
use super::thrift::Reader;
use super::*;
use crate::config::fields::Choice;
use crate::config::value::Value;
use crate::format::testing::Counting;
use crate::format::{ReadBuffer, SampleRead};
use crate::storage::{scratch_dir, LocalFs, LocalOptions, Storage, Window};

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

/// The ranges Arrow's read coalescing makes of `chunks`, independently of the reader: sorted,
/// merged where the hole between two is at most 8 KiB and the merged range stays within 32 MiB
/// (`CacheOptions` defaults, which `ParquetFile(pre_buffer=True)` applies).
fn arrow_ranges(chunks: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut sorted = chunks.to_vec();
    sorted.sort_unstable();
    let mut ranges: Vec<(u64, u64)> = Vec::new();
    for (start, len) in sorted {
        if let Some(last) = ranges.last_mut() {
            let last_end = last.0 + last.1;
            if start >= last_end && start - last_end <= 8 * 1024 && start + len - last.0 <= 32 << 20
            {
                last.1 = start + len - last.0;
                continue;
            }
        }
        ranges.push((start, len));
    }
    ranges
}

/// The bytes Arrow fetches for `chunks`: its ranges', holes included.
fn arrow_bytes(chunks: &[(u64, u64)]) -> u64 {
    arrow_ranges(chunks).iter().map(|r| r.1).sum()
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
    let storage = Counting::in_scratch("parquet-round-trip");
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
    storage.take_ranges();
    let reads = read_all_samples(&mut reader, &storage, "train/f.parquet", 10);
    for (g, first) in [(0usize, 0u64), (1, 4), (2, 8)] {
        let marked: Vec<(u64, u64)> = reader.chunk_ranges(g);
        assert_eq!(marked.len(), 5, "the five marked columns");
        let marked_bytes = arrow_bytes(&marked);
        let group_bytes: u64 = every.chunk_ranges(g).iter().map(|c| c.1).sum();
        assert!(marked_bytes <= group_bytes);
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
    // request per range Arrow makes of each row group's marked chunks.
    let recorded = storage.take_ranges();
    assert_eq!(recorded[0], (0, file.len()));
    let want: Vec<(u64, usize)> = (0..3)
        .flat_map(|g| arrow_ranges(&reader.chunk_ranges(g)))
        .map(|(start, len)| (start, len as usize))
        .collect();
    assert_eq!(recorded[1..], want);
}

#[test]
fn whole_file_mode_reads_every_row_group_on_the_first_sample_only() {
    let parquet = format(mixed_columns(), 3, ParquetReadMode::WholeFile);
    let file = encode(&parquet, &rows(8));
    let storage = Counting::in_scratch("parquet-whole-file");
    storage.put("f.parquet", &file).unwrap();
    let mut reader = RowGroupReader::new(&parquet);
    let reads = read_all_samples(&mut reader, &storage, "f.parquet", 8);
    let marked: u64 = (0..3).map(|g| arrow_bytes(&reader.chunk_ranges(g))).sum();
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
    let storage = Counting::in_scratch("parquet-default-column");
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
    let storage = Counting::in_scratch("parquet-big-rows");
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
    let storage = Counting::in_scratch("parquet-missing-column");
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

/// Reads every sample of a (damaged) file with a fresh reader, in pieces of the default size;
/// in pieces of 1 and 5 bytes, which cut every page header somewhere, the outcome must be the
/// same.
fn read_damaged(parquet: &Parquet, storage: &dyn Storage, samples: u64) -> Result<()> {
    let read = |piece| {
        let mut reader = RowGroupReader::new(parquet).with_piece(piece);
        let mut buf = ReadBuffer::default();
        (0..samples).try_for_each(|s| {
            reader
                .read_sample(storage, "bad.parquet", s, &mut buf)
                .map(drop)
        })
    };
    let outcome = read(PIECE_BYTES);
    for piece in [1, 5] {
        assert_eq!(read(piece), outcome, "in pieces of {piece} bytes");
    }
    outcome
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
    let storage = Counting::in_scratch("parquet-damaged");
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

/// `len` bytes at `offset`, read in pieces that end at multiples of `piece` in the file.
fn pieces(offset: u64, len: usize, piece: u64) -> Vec<(u64, usize)> {
    let end = offset + len as u64;
    let mut at = offset;
    let mut out = Vec::new();
    while at < end {
        let next = ((at / piece + 1) * piece).min(end);
        out.push((at, (next - at) as usize));
        at = next;
    }
    out
}

/// The pages of the chunks at `ranges` of `file`, from their headers: (where the header starts,
/// where the body starts, the body's length).
fn pages(file: &[u8], ranges: &[(u64, u64)]) -> Vec<(usize, usize, usize)> {
    let mut pages = Vec::new();
    for &(start, len) in ranges {
        let (mut pos, end) = (start as usize, (start + len) as usize);
        while pos < end {
            let mut reader = Reader::new(&file[pos..end]);
            let mut size = None;
            reader
                .read_struct(|r, id, kind| {
                    match id {
                        3 => size = Some(r.i32(kind, "compressed_page_size")? as usize),
                        _ => r.skip(kind)?,
                    }
                    Ok(())
                })
                .unwrap();
            let body = pos + reader.position();
            let size = size.unwrap();
            pages.push((pos, body, size));
            pos = body + size;
        }
        assert_eq!(pos, end, "the pages tile the chunk at {start}");
    }
    pages
}

#[test]
fn pieces_of_any_size_fetch_the_same_ranges_cut_at_their_multiples() {
    for mode in [ParquetReadMode::RowGroup, ParquetReadMode::WholeFile] {
        let parquet = format(mixed_columns(), 4, mode);
        let file = encode(&parquet, &rows(10));
        let storage = Counting::in_scratch("parquet-pieces");
        storage.put("f.parquet", &file).unwrap();
        let mut whole = RowGroupReader::new(&parquet);
        let want = read_all_samples(&mut whole, &storage, "f.parquet", 10);
        let ranges = storage.take_ranges();
        // The whole small file for the footer, then at least one range per row group.
        assert_eq!(ranges[0], (0, file.len()));
        assert!(ranges.len() > 3, "{ranges:?}");
        for piece in [1, 2, 3, 7, 64, 1000] {
            let mut reader = RowGroupReader::new(&parquet).with_piece(piece);
            let got = read_all_samples(&mut reader, &storage, "f.parquet", 10);
            assert_eq!(got, want, "{mode:?}, pieces of {piece}");
            let cut: Vec<(u64, usize)> = ranges[..1]
                .iter()
                .copied()
                .chain(ranges[1..].iter().flat_map(|&(o, l)| pieces(o, l, piece)))
                .collect();
            assert_eq!(storage.take_ranges(), cut, "{mode:?}, pieces of {piece}");
            // What a piece cut off is held until its page is whole, no longer than that page.
            let largest = (0..3)
                .flat_map(|g| pages(&file, &reader.chunk_ranges(g)))
                .map(|p| p.2)
                .max()
                .unwrap();
            assert!(reader.carry_capacity() <= largest.max(64));
        }
    }
}

/// What Arrow's `pre_buffer` hands its I/O pool: a row group's ranges, all at once, eight in
/// flight (the pool's threads); here also never more than a piece's worth of bytes.
#[test]
fn a_row_group_s_ranges_are_fetched_together_eight_in_flight_within_a_piece() {
    // Twelve marked columns of 20.8 KB per row group, each followed by an unmarked one of 40 KB:
    // holes over Arrow's 8 KiB, so twelve ranges per row group.
    let columns: Vec<ParquetColumn> = (0..12)
        .flat_map(|i| {
            [
                column(&format!("read{i}"), "float32", 1300, true),
                column(&format!("skipped{i}"), "uint8", 10_000, false),
            ]
        })
        .collect();
    let parquet = format(columns, 4, ParquetReadMode::RowGroup);
    let file = encode(&parquet, &rows(8));
    let storage = Counting::in_scratch("parquet-together");
    storage.put("f.parquet", &file).unwrap();
    let mut reader = RowGroupReader::new(&parquet);
    let got = read_all_samples(&mut reader, &storage, "f.parquet", 8);
    let ranges = storage.take_ranges();
    let group_ranges: Vec<(u64, usize)> = (0..2)
        .flat_map(|g| arrow_ranges(&reader.chunk_ranges(g)))
        .map(|(start, len)| (start, len as usize))
        .collect();
    assert_eq!(group_ranges.len(), 24);
    // The footer's read, then each row group's twelve ranges, asked for together.
    assert_eq!(ranges[1..], group_ranges[..]);
    let window = |bytes: u64| Window {
        reads: 8,
        bytes: bytes as usize,
    };
    assert_eq!(
        storage.take_windows(),
        [(12, window(PIECE_BYTES)), (12, window(PIECE_BYTES))]
    );

    // Pieces of 64 KiB: the same ranges cut at multiples of 64 KiB, in the same order, asked
    // for together within 64 KiB; the same samples.
    let piece = 64 * 1024;
    let mut small = RowGroupReader::new(&parquet).with_piece(piece);
    assert_eq!(read_all_samples(&mut small, &storage, "f.parquet", 8), got);
    let cut: Vec<(u64, usize)> = group_ranges
        .iter()
        .flat_map(|&(o, l)| pieces(o, l, piece))
        .collect();
    assert!(cut.len() > 24, "{cut:?}");
    assert_eq!(storage.take_ranges()[1..], cut[..]);
    let windows = storage.take_windows();
    assert_eq!(windows.len(), 2);
    assert!(windows.iter().all(|w| w.1 == window(piece)), "{windows:?}");
    assert_eq!(windows.iter().map(|w| w.0).sum::<usize>(), cut.len());
}

#[test]
fn a_row_group_larger_than_a_piece_costs_its_chunks_exactly_in_bounded_memory() {
    // A row group of 6 rows of 3.28 MB of marked columns: about 19.7 MB, over two pieces.
    let columns = vec![
        column("a", "float32", 700_000, true),
        column("skipped", "uint8", 1000, false),
        column("b", "float64", 60_000, true),
    ];
    let parquet = format(columns, 6, ParquetReadMode::RowGroup);
    let file = encode(&parquet, &rows(8));
    let size = file.len() as u64;
    let storage = Counting::in_scratch("parquet-large-group");
    storage.put("f.parquet", &file).unwrap();
    let mut reader = RowGroupReader::new(&parquet);
    let mut buf = ReadBuffer::default();
    let mut reads = Vec::new();
    for s in 0..8 {
        reads.push(
            reader
                .read_sample(&storage, "f.parquet", s, &mut buf)
                .unwrap(),
        );
        assert!(buf.bytes.capacity() as u64 <= PIECE_BYTES, "sample {s}");
    }
    let marked = |g| arrow_bytes(&reader.chunk_ranges(g));
    assert!(marked(0) > 2 * PIECE_BYTES, "{}", marked(0));
    // The footer is within Arrow's first 64 KiB read of the file's end.
    let bytes: Vec<u64> = reads.iter().map(|r| r.bytes).collect();
    assert_eq!(bytes, [65536 + marked(0), 0, 0, 0, 0, 0, marked(1), 0]);
    // Arrow's ranges (the skipped column's chunk is a hole under 8 KiB), in order, cut at
    // multiples of the piece.
    let mut want = vec![(size - 65536, 65536)];
    for g in 0..2 {
        for (start, len) in arrow_ranges(&reader.chunk_ranges(g)) {
            want.extend(pieces(start, len as usize, PIECE_BYTES));
        }
    }
    assert!(want.len() > 5, "{want:?}");
    assert_eq!(storage.take_ranges(), want);
    let pages_read: Vec<(usize, usize, usize)> = (0..2)
        .flat_map(|g| pages(&file, &reader.chunk_ranges(g)))
        .collect();
    let largest = pages_read.iter().map(|p| p.2).max().unwrap();
    assert!(
        reader.carry_capacity() <= largest,
        "{}",
        reader.carry_capacity()
    );

    // The file shrinks once open: row group 0 ends within the second piece of its column a.
    let (a0, a0_len) = reader.chunk_ranges(0)[0];
    let second_piece = (a0 / PIECE_BYTES + 1) * PIECE_BYTES;
    assert!(second_piece + 100 < a0 + a0_len);
    let mut shrunk = RowGroupReader::new(&parquet);
    shrunk
        .read_sample(&storage, "f.parquet", 6, &mut buf)
        .unwrap();
    storage.cut_at(second_piece + 100);
    let error = shrunk
        .read_sample(&storage, "f.parquet", 0, &mut buf)
        .unwrap_err()
        .to_string();
    for part in ["f.parquet", "row group 0", "truncated"] {
        assert!(error.contains(part), "{part}: {error}");
    }
    storage.cut_at(u64::MAX);

    // Damage past the first piece of row group 0's column a: a page header of an unknown
    // type, then a page cut by a piece's end whose levels claim more bytes than it has.
    let second_piece = second_piece as usize;
    let in_a0 = |p: &&(usize, usize, usize)| (p.0 as u64) < a0 + a0_len;
    let later = pages_read
        .iter()
        .filter(in_a0)
        .find(|p| p.0 > second_piece)
        .unwrap();
    let straddling = pages_read
        .iter()
        .filter(in_a0)
        .find(|p| p.1 < second_piece && second_piece < p.1 + p.2)
        .unwrap();
    // The header's first field is its type: field header 0x15, then zigzag 0 (DATA_PAGE).
    assert_eq!(file[later.0..later.0 + 2], [0x15, 0]);
    let mut unknown = file.clone();
    unknown[later.0 + 1] = 14;
    // A v1 page of a list column starts with the 4-byte length of its repetition levels.
    let mut levels = file.clone();
    levels[straddling.1..straddling.1 + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    for (bad, why) in [
        (unknown, "unknown page type 7"),
        (levels, "bytes of levels are more than"),
    ] {
        storage.put("bad.parquet", &bad).unwrap();
        let error = RowGroupReader::new(&parquet)
            .read_sample(&storage, "bad.parquet", 0, &mut buf)
            .unwrap_err()
            .to_string();
        for part in ["bad.parquet", "row group 0, column a", why] {
            assert!(error.contains(part), "{part}: {error}");
        }
    }
}

#[test]
fn o_direct_pieces_fetch_each_block_once() {
    // Row groups of about 3.4 MB in pieces of 1 MiB, a multiple of the file system's block:
    // the same blocks as reading each range at once.
    let columns = vec![
        column("a", "float32", 200_000, true),
        column("skipped", "uint8", 1000, false),
        column("b", "float64", 5_000, true),
    ];
    let parquet = format(columns, 4, ParquetReadMode::RowGroup);
    let file = encode(&parquet, &rows(6));
    let dir = scratch_dir("parquet-odirect-pieces");
    let buffered = LocalFs::new(&dir);
    buffered.put("f.parquet", &file).unwrap();
    let direct = LocalFs::with_options(
        &dir,
        LocalOptions {
            odirect: true,
            evict_after_read: false,
        },
    );
    let mut at_once = RowGroupReader::new(&parquet).with_piece(u64::MAX);
    let mut in_pieces = RowGroupReader::new(&parquet).with_piece(1 << 20);
    let want = read_all_samples(&mut at_once, &direct, "f.parquet", 6);
    let got = read_all_samples(&mut in_pieces, &direct, "f.parquet", 6);
    assert!(in_pieces.chunk_ranges(0)[0].1 > 3 << 20);
    assert_eq!(got, want);
    let exact = read_all_samples(
        &mut RowGroupReader::new(&parquet),
        &buffered,
        "f.parquet",
        6,
    );
    for (e, g) in exact.iter().zip(&got) {
        assert_eq!(e.bytes == 0, g.bytes == 0);
        assert!(g.bytes >= e.bytes, "{e:?} {g:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
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
    let storage = Counting::in_scratch("parquet-long-footer");
    storage.put("f.parquet", &file).unwrap();
    let mut reader = RowGroupReader::new(&parquet);
    let reads = read_all_samples(&mut reader, &storage, "f.parquet", 4);
    let recorded = storage.take_ranges();
    let size = file.len() as u64;
    let footer_start = size - 8 - u64::from(footer_len);
    assert_eq!(recorded[0], (size - 65536, 65536));
    assert_eq!(recorded[1], (footer_start, footer_len as usize));
    let marked = |g| arrow_bytes(&reader.chunk_ranges(g));
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
    let storage = Counting::in_scratch("parquet-pyarrow");
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
        storage.take_ranges(),
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
