//! CSV as DLIO's csv_generator writes it with pandas,
//! `pd.DataFrame(data=[record] * samples_per_file).to_csv(path, compression=…, index=False,
//! header=False)`: one line per sample, `v0,v1,…,vN-1`, `\n`-terminated, with neither a header
//! nor an index column. Like DLIO, every row holds the same random record, so a file costs one
//! formatted row, repeated. (DLIO 2.0, the PyPI release, wrote pandas' default header `,0,1,…`
//! and an index column; those files are read too.)
//!
//! Values: DLIO writes uint8 in 0..=254 (`np.random.randint(255)`), and so do we. For another
//! `record_element_type` (DLIO has none), integers are random over the type's range, in decimal;
//! floats are uniform in [0, 1), written as Rust's shortest round-trip decimal of their type
//! (as numpy's repr), float16 ones on a 1/1024 grid and written exactly (numpy would round them
//! to four digits; either reads back to the same float16).
//!
//! Compressed (`dataset.compression`: gzip, bz2, zip, xz), the whole text is one stream of the
//! codec pandas uses for that method, at pandas' levels (DLIO passes no level): gzip 9 (Python's
//! `GzipFile`, the file's name in its header), bz2 9, xz preset 6 with a CRC-64 check (Python's
//! `lzma` defaults), zip one deflated member named as the file (Python's `ZipFile`, zlib's
//! default level). The file keeps its `.csv` name, as DLIO's generator leaves it (see
//! docs/deviations.md).
//!
//! Reading emulates DLIO's csv_reader, `pd.read_csv(file, header=None).to_numpy()` for every
//! sample (on demand): the whole file is read for each sample and, when compressed, the whole
//! stream decompressed, as pandas does before it parses a line. The structure is checked (the
//! sample's row present, with as many fields as the first row, and the text ending with a line
//! end); with `verify`, every value of the row is also parsed as a number.

use std::io::{Read, Write};

use rand::rngs::SmallRng;
use rand::{Rng, RngCore};

use super::zip::{self, ZipWriter};
use super::{corrupt, read_whole, Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::config::ElementType;
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::Storage;

#[derive(Clone, Copy)]
pub struct Csv {
    /// Also parse every value of the sample's row (pandas parses them all; it costs CPU, not I/O).
    pub verify: bool,
    pub compression: CsvCompression,
}

/// pandas' `compression` method a csv file is written with (DLIO's `dataset.compression`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CsvCompression {
    None,
    Gzip,
    Bz2,
    Zip,
    Xz,
}

/// The file name of `key`: what Python's gzip records in its header and pandas names the zip
/// member.
fn file_name(key: &str) -> &str {
    key.rsplit('/').next().unwrap_or(key)
}

/// Appends `,v` for `n` random values of `element`.
fn push_values(out: &mut Vec<u8>, element: ElementType, n: u64, rng: &mut SmallRng) {
    let mut int = itoa::Buffer::new();
    let push = |out: &mut Vec<u8>, text: &str| {
        out.push(b',');
        out.extend_from_slice(text.as_bytes());
    };
    for _ in 0..n {
        let bits = match element {
            ElementType::Uint8 => rng.random_range(0..255),
            _ => rng.next_u64(),
        };
        match element {
            ElementType::Uint8 => push(out, int.format(bits)),
            ElementType::Int8 => push(out, int.format(bits as i8)),
            ElementType::Uint16 => push(out, int.format(bits as u16)),
            ElementType::Int16 => push(out, int.format(bits as i16)),
            ElementType::Uint32 => push(out, int.format(bits as u32)),
            ElementType::Int32 => push(out, int.format(bits as i32)),
            ElementType::Uint64 => push(out, int.format(bits)),
            ElementType::Int64 => push(out, int.format(bits as i64)),
            ElementType::Float16 => push(out, &((bits >> 54) as f64 / 1024.0).to_string()),
            ElementType::Float32 => push(
                out,
                &((bits >> 40) as f32 / (1u64 << 24) as f32).to_string(),
            ),
            ElementType::Float64 => push(
                out,
                &((bits >> 11) as f64 / (1u64 << 53) as f64).to_string(),
            ),
        }
    }
}

/// The first `\n` in `bytes`. Rows are found by skipping the ones before, so this runs over most
/// of the file; a fixed-size chunk test lets the compiler vectorize it.
fn find_line_end(bytes: &[u8]) -> Option<usize> {
    const CHUNK: usize = 64;
    let mut chunks = bytes.chunks_exact(CHUNK);
    let mut base = 0;
    for chunk in &mut chunks {
        if chunk.iter().fold(false, |seen, &b| seen | (b == b'\n')) {
            return chunk.iter().position(|&b| b == b'\n').map(|at| base + at);
        }
        base += CHUNK;
    }
    chunks
        .remainder()
        .iter()
        .position(|&b| b == b'\n')
        .map(|at| base + at)
}

fn count_fields(line: &[u8]) -> usize {
    line.iter().filter(|&&b| b == b',').count() + 1
}

impl FileFormat for Csv {
    fn encode(
        &self,
        key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        out.clear();
        let (&samples, sample_dims) = shape.dims.split_last().unwrap_or((&1, &[]));
        let elements = sample_dims
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| Error::run(format!("{key}: the samples of {shape:?} are too large")))?;
        let mut row = Vec::new();
        push_values(&mut row, shape.element, elements, rng);
        row.push(b'\n');
        // `push_values` puts a comma before every value: without an index column, the first one
        // goes.
        let row = &row[1..];
        let failed = |e: std::io::Error| Error::run(format!("{key}: cannot compress: {e}"));
        let rows = |w: &mut dyn Write| (0..samples).try_for_each(|_| w.write_all(row));
        match self.compression {
            CsvCompression::None => {
                out.data.reserve(row.len().saturating_mul(samples as usize));
                rows(&mut out.data)
            }
            CsvCompression::Gzip => {
                let mut encoder = flate2::GzBuilder::new()
                    .filename(file_name(key))
                    .write(&mut out.data, flate2::Compression::best());
                rows(&mut encoder).and_then(|()| encoder.finish().map(drop))
            }
            CsvCompression::Bz2 => {
                let mut encoder =
                    bzip2::write::BzEncoder::new(&mut out.data, bzip2::Compression::best());
                rows(&mut encoder).and_then(|()| encoder.finish().map(drop))
            }
            CsvCompression::Xz => {
                let mut encoder = liblzma::write::XzEncoder::new(&mut out.data, 6);
                rows(&mut encoder).and_then(|()| encoder.finish().map(drop))
            }
            CsvCompression::Zip => {
                let mut zip = ZipWriter::new(true);
                zip.member(out, file_name(key), |o, crc| {
                    for _ in 0..samples {
                        o.data.extend_from_slice(row);
                        crc.update(row);
                    }
                    Ok(())
                })?;
                return zip.finish(out);
            }
        }
        .map_err(failed)
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(CsvReader {
            format: *self,
            text: Vec::new(),
        })
    }
}

struct CsvReader {
    format: Csv,
    /// The decompressed text of a compressed file: as large as the largest one read.
    text: Vec<u8>,
}

impl SampleReader for CsvReader {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let fetched = read_whole(storage, key, buf)?;
        let file = buf.bytes.as_slice();
        let text = &mut self.text;
        text.clear();
        // Whole streams, as pandas reads them, and further gzip, bz2 and xz streams after the
        // first, as Python's modules read them.
        let decompressed = match self.format.compression {
            CsvCompression::None => Ok(file),
            CsvCompression::Gzip => flate2::read::MultiGzDecoder::new(file)
                .read_to_end(text)
                .map(|_| &text[..])
                .map_err(|e| format!("cannot decompress it as gzip: {e}")),
            CsvCompression::Bz2 => bzip2::read::MultiBzDecoder::new(file)
                .read_to_end(text)
                .map(|_| &text[..])
                .map_err(|e| format!("cannot decompress it as bz2: {e}")),
            CsvCompression::Xz => liblzma::read::XzDecoder::new_multi_decoder(file)
                .read_to_end(text)
                .map(|_| &text[..])
                .map_err(|e| format!("cannot decompress it as xz: {e}")),
            CsvCompression::Zip => zip::member(file, file_name(key), self.format.verify, text),
        };
        let file = decompressed.map_err(|why| corrupt(storage, key, why))?;
        let start =
            find_row(file, sample, self.format.verify).map_err(|why| corrupt(storage, key, why))?;
        Ok(SampleRead {
            // Where the row starts in the file, or in the decompressed text.
            offset: start as u64,
            bytes: fetched,
        })
    }
}

/// Finds row `sample` of the text of a csv file and checks it; returns where it starts.
fn find_row(file: &[u8], sample: u64, verify: bool) -> Result<usize, String> {
    let first_end = find_line_end(file).ok_or_else(|| "the first line is truncated".to_string())?;
    let columns = count_fields(&file[..first_end]);
    // pandas' header (an unnamed index column, then the columns) and an index in every row, as
    // DLIO 2.0 wrote; or neither, as DLIO writes now.
    let headed = file.starts_with(b",");
    let mut start = if headed { first_end + 1 } else { 0 };
    for row in 0..sample {
        let end = find_line_end(&file[start..])
            .ok_or_else(|| format!("row {sample} is missing: the file ends in row {row}"))?;
        start += end + 1;
    }
    if start == file.len() {
        return Err(format!(
            "row {sample} is missing: the file holds {sample} rows"
        ));
    }
    let end = find_line_end(&file[start..])
        .ok_or_else(|| format!("row {sample} is truncated (it has no line end)"))?;
    let line = &file[start..start + end];
    let fields = count_fields(line);
    if fields != columns {
        let against = if headed {
            "the header"
        } else {
            "the first row"
        };
        return Err(format!(
            "row {sample} has {fields} fields, {against} {columns}"
        ));
    }
    let mut values = line.split(|&b| b == b',');
    if headed {
        let label = values.next().unwrap_or_default();
        let mut number = itoa::Buffer::new();
        if label != number.format(sample).as_bytes() {
            return Err(format!(
                "row {sample} is labelled {:?}",
                String::from_utf8_lossy(label)
            ));
        }
    }
    if verify {
        for (column, value) in values.enumerate() {
            let parsed = std::str::from_utf8(value)
                .ok()
                .and_then(|v| v.parse::<f64>().ok());
            if parsed.is_none() {
                return Err(format!(
                    "row {sample}, column {column}: {:?} is not a number",
                    String::from_utf8_lossy(value)
                ));
            }
        }
    }
    // pandas ends every line, the last one too: without it the file was cut.
    if file.last() != Some(&b'\n') {
        return Err("truncated: the last line has no line end".to_string());
    }
    Ok(start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::testing::{self, Scratch};
    use crate::storage::{scratch_dir, LocalFs};

    const KEY: &str = "valid/1/img_3_of_8.csv";

    fn csv(compression: CsvCompression) -> Csv {
        Csv {
            verify: true,
            compression,
        }
    }

    fn encode_as(dims: &[u64], element: ElementType, compression: CsvCompression) -> Vec<u8> {
        let shape = FileShape {
            dims: dims.to_vec(),
            element,
        };
        let out = testing::encode(&csv(compression), KEY, &shape, 5);
        assert!(out.side_files().is_empty());
        out.data
    }

    fn encode(dims: &[u64], element: ElementType) -> Vec<u8> {
        encode_as(dims, element, CsvCompression::None)
    }

    /// The text as pandas' default `to_csv` wrote it in DLIO 2.0: a header and an index column.
    fn headed(text: &str) -> String {
        let columns = text.lines().next().unwrap().split(',').count();
        let mut out: String = (0..columns).map(|c| format!(",{c}")).collect();
        out.push('\n');
        for (i, row) in text.lines().enumerate() {
            out.push_str(&format!("{i},{row}\n"));
        }
        out
    }

    #[test]
    fn layout_is_pandas_to_csv_without_header_or_index() {
        let file = String::from_utf8(encode(&[2, 3, 4], ElementType::Uint8)).unwrap();
        let lines: Vec<&str> = file.split_terminator('\n').collect();
        assert!(file.ends_with('\n'));
        assert_eq!(lines.len(), 4);
        assert!(
            lines.iter().all(|line| *line == lines[0]),
            "every row is the same record"
        );
        let values: Vec<u8> = lines[0].split(',').map(|v| v.parse().unwrap()).collect();
        assert_eq!(values.len(), 6);
        assert!(values.iter().all(|&v| v < 255));

        // A larger record covers the uint8 range but 255, as randint(255) does.
        let file = encode(&[2000, 1], ElementType::Uint8);
        let text = String::from_utf8(file).unwrap();
        let values: Vec<u32> = text
            .lines()
            .next()
            .unwrap()
            .split(',')
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(values.len(), 2000);
        assert_eq!(values.iter().max(), Some(&254));
        assert_eq!(values.iter().min(), Some(&0));

        for (element, check) in [
            (
                ElementType::Int8,
                (|v: &str| v.parse::<i8>().is_ok()) as fn(&str) -> bool,
            ),
            (ElementType::Uint64, |v| v.parse::<u64>().is_ok()),
            (ElementType::Int32, |v| v.parse::<i32>().is_ok()),
            (ElementType::Float16, |v| {
                v.parse::<f64>()
                    .is_ok_and(|x| (0.0..1.0).contains(&x) && (x * 1024.0).fract() == 0.0)
            }),
            (ElementType::Float32, |v| {
                v.parse::<f32>().is_ok_and(|x| (0.0..1.0).contains(&x))
            }),
            (ElementType::Float64, |v| {
                v.parse::<f64>().is_ok_and(|x| (0.0..1.0).contains(&x))
            }),
        ] {
            let text = String::from_utf8(encode(&[50, 2], element)).unwrap();
            let record = text.lines().nth(1).unwrap();
            let values: Vec<&str> = record.split(',').collect();
            assert_eq!(values.len(), 50);
            assert!(values.iter().all(|v| check(v)), "{element:?}: {record}");
        }
    }

    #[test]
    fn reads_the_whole_file_for_every_sample() {
        let file = encode(&[7, 9, 4], ElementType::Uint8);
        let scratch = Scratch::new("csv");
        scratch.buffered.put(KEY, &file).unwrap();
        let row = file.len() / 4;
        let mut buf = ReadBuffer::default();
        for (storage, unit) in scratch.both() {
            for verify in [false, true] {
                let format = Csv {
                    verify,
                    compression: CsvCompression::None,
                };
                let mut reader = format.reader();
                for sample in [2, 0, 3, 1] {
                    let read = reader.read_sample(storage, KEY, sample, &mut buf).unwrap();
                    assert_eq!(
                        read,
                        SampleRead {
                            offset: (sample as usize * row) as u64,
                            bytes: (file.len() as u64).next_multiple_of(unit)
                        }
                    );
                    assert_eq!(buf.bytes.as_slice(), &file[..]);
                }
                let error = reader
                    .read_sample(storage, KEY, 4, &mut buf)
                    .unwrap_err()
                    .to_string();
                assert!(
                    error.contains(KEY) && error.contains("row 4 is missing"),
                    "{error}"
                );
            }
        }
        scratch.remove();
    }

    /// Each codec's file holds exactly the uncompressed file's text, in the container Python's
    /// module for it reads; the reader fetches the whole compressed file for every sample and
    /// finds the row in the decompressed text.
    #[test]
    fn compressed_files_hold_the_text_and_are_read_decompressed() {
        let dims = [40, 3, 5];
        let plain = encode(&dims, ElementType::Uint8);
        let scratch = Scratch::new("csv-compressed");
        let mut buf = ReadBuffer::default();
        for compression in [
            CsvCompression::Gzip,
            CsvCompression::Bz2,
            CsvCompression::Zip,
            CsvCompression::Xz,
        ] {
            let file = encode_as(&dims, ElementType::Uint8, compression);
            let mut text = Vec::new();
            match compression {
                CsvCompression::Gzip => {
                    let mut decoder = flate2::read::GzDecoder::new(&file[..]);
                    decoder.read_to_end(&mut text).unwrap();
                    let header = decoder.header().unwrap();
                    assert_eq!(header.filename(), Some(&b"img_3_of_8.csv"[..]));
                }
                CsvCompression::Bz2 => {
                    assert!(file.starts_with(b"BZh9"), "level 9");
                    bzip2::read::BzDecoder::new(&file[..])
                        .read_to_end(&mut text)
                        .unwrap();
                }
                CsvCompression::Xz => {
                    // Stream flags: CRC-64 check (Python's lzma default).
                    assert_eq!(&file[..8], b"\xfd7zXZ\0\0\x04");
                    liblzma::read::XzDecoder::new(&file[..])
                        .read_to_end(&mut text)
                        .unwrap();
                }
                CsvCompression::Zip => {
                    let mut inflated = Vec::new();
                    text = zip::member(&file, "img_3_of_8.csv", true, &mut inflated)
                        .unwrap()
                        .to_vec();
                }
                CsvCompression::None => unreachable!(),
            }
            assert_eq!(text, plain, "{compression:?}");
            assert!(
                file.len() < plain.len() / 2,
                "{compression:?}: repeated rows shrink"
            );

            scratch.buffered.put(KEY, &file).unwrap();
            let row = plain.len() / 5;
            let format = csv(compression);
            let mut reader = format.reader();
            for sample in [4, 0, 2] {
                let read = reader
                    .read_sample(&scratch.buffered, KEY, sample, &mut buf)
                    .unwrap();
                assert_eq!(
                    read,
                    SampleRead {
                        offset: (sample as usize * row) as u64,
                        bytes: file.len() as u64
                    },
                    "{compression:?}"
                );
            }
            let error = reader
                .read_sample(&scratch.buffered, KEY, 5, &mut buf)
                .unwrap_err()
                .to_string();
            assert!(error.contains("row 5 is missing"), "{error}");
            // Cut or damaged, the stream fails its codec's checks, naming the file.
            let mut damaged = file.clone();
            let middle = damaged.len() / 2;
            damaged[middle] ^= 0x55;
            for bad in [&file[..file.len() - 5], &damaged[..]] {
                scratch.buffered.put(KEY, bad).unwrap();
                let error = reader
                    .read_sample(&scratch.buffered, KEY, 0, &mut buf)
                    .unwrap_err()
                    .to_string();
                assert!(error.contains(KEY), "{compression:?}: {error}");
            }
            // A plain file read as compressed is not mistaken for one.
            scratch.buffered.put(KEY, &plain).unwrap();
            assert!(reader
                .read_sample(&scratch.buffered, KEY, 0, &mut buf)
                .is_err());
        }
        scratch.remove();
    }

    #[test]
    fn truncated_and_corrupt_files_are_errors_naming_file_and_row() {
        let dir = scratch_dir("csv-corrupt");
        let storage = LocalFs::new(&dir);
        let mut buf = ReadBuffer::default();
        let mut read = |bytes: &[u8], verify: bool, sample: u64| {
            storage.put(KEY, bytes).unwrap();
            Csv {
                verify,
                compression: CsvCompression::None,
            }
            .reader()
            .read_sample(&storage, KEY, sample, &mut buf)
            .map_err(|e| e.to_string())
        };
        let plain = String::from_utf8(encode(&[3, 2, 3], ElementType::Uint8)).unwrap();
        let text = headed(&plain);
        for file in [plain.as_bytes(), text.as_bytes()] {
            for len in 0..file.len() {
                let error = read(&file[..len], false, 2).unwrap_err();
                assert!(error.contains(KEY), "{error}");
                // Any cut past the first line loses or shortens a row, the last at least.
                let first = file.iter().position(|&b| b == b'\n').unwrap();
                if len > first {
                    assert!(
                        error.contains("row 2") || error.contains("no line end"),
                        "cut at {len}: {error}"
                    );
                }
            }
        }
        // DLIO 2.0's layout: a header and an index column, checked.
        for sample in 0..3 {
            assert!(read(text.as_bytes(), true, sample).is_ok(), "{sample}");
        }
        let short_row = text.replace("\n1,", "\n1").into_bytes();
        let error = read(&short_row, false, 1).unwrap_err();
        assert!(
            error.contains("row 1 has 6 fields, the header 7"),
            "{error}"
        );
        let relabelled = text.replace("\n1,", "\n9,").into_bytes();
        assert!(read(&relabelled, false, 1)
            .unwrap_err()
            .contains("row 1 is labelled \"9\""));
        // DLIO's layout: rows checked against the first.
        let long = plain.replacen("\n", "\n9,", 1);
        let error = read(long.as_bytes(), false, 1).unwrap_err();
        assert!(
            error.contains("row 1 has 7 fields, the first row 6"),
            "{error}"
        );
        let not_a_number = format!("x{plain}");
        assert!(read(not_a_number.as_bytes(), false, 0).is_ok());
        let error = read(not_a_number.as_bytes(), true, 0).unwrap_err();
        assert!(
            error.contains("row 0, column 0") && error.contains("not a number"),
            "{error}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
