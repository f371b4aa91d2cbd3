//! CSV as DLIO's csv_generator writes it with pandas,
//! `pd.DataFrame(data=[record] * samples_per_file).to_csv(path)`: a header line `,0,1,…,N-1`
//! (an unnamed index column, then one column per element of a sample), then one line per sample,
//! `i,v0,v1,…,vN-1`, `\n`-terminated. Like DLIO, every row holds the same random record, so a file
//! costs one formatted row, copied under each row index.
//!
//! Values: DLIO writes uint8 in 0..=254 (`np.random.randint(255)`), and so do we. For another
//! `record_element_type` (DLIO has none), integers are random over the type's range, in decimal;
//! floats are uniform in [0, 1), written as Rust's shortest round-trip decimal of their type
//! (as numpy's repr), float16 ones on a 1/1024 grid and written exactly (numpy would round them
//! to four digits; either reads back to the same float16).
//!
//! Reading emulates DLIO's csv_reader, `pd.read_csv(file).to_numpy()` for every sample (on
//! demand): the whole file is read for each sample. The structure is checked (the header's
//! columns, the sample's row present, labelled with its number, with as many fields, and the file
//! ending with a line end); with `verify`, every value of the row is also parsed as a number.
//! Files without a header and an index column, as DLIO's later generator writes them
//! (`to_csv(index=False, header=False)`, read back with `header=None`), are read too: their rows
//! are checked against the first one's fields.

use rand::rngs::SmallRng;
use rand::{Rng, RngCore};

use super::{corrupt, read_whole, Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::config::ElementType;
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::Storage;

#[derive(Clone, Copy)]
pub struct Csv {
    /// Also parse every value of the sample's row (pandas parses them all; it costs CPU, not I/O).
    pub verify: bool,
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
        let data = &mut out.data;
        let mut number = itoa::Buffer::new();
        for column in 0..elements {
            data.push(b',');
            data.extend_from_slice(number.format(column).as_bytes());
        }
        data.push(b'\n');
        let mut row = Vec::new();
        push_values(&mut row, shape.element, elements, rng);
        row.push(b'\n');
        data.reserve((row.len() + 4).saturating_mul(samples as usize));
        for index in 0..samples {
            data.extend_from_slice(number.format(index).as_bytes());
            data.extend_from_slice(&row);
        }
        Ok(())
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(*self)
    }
}

impl SampleReader for Csv {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let fetched = read_whole(storage, key, buf)?;
        let file = buf.bytes.as_slice();
        let bad = |why: String| corrupt(storage, key, why);
        let first_end =
            find_line_end(file).ok_or_else(|| bad("the first line is truncated".into()))?;
        let columns = count_fields(&file[..first_end]);
        // pandas' header (an unnamed index column, then the columns) and an index in every row;
        // or neither, as DLIO's later generator writes.
        let headed = file.starts_with(b",");
        let mut start = if headed { first_end + 1 } else { 0 };
        for row in 0..sample {
            let end = find_line_end(&file[start..]).ok_or_else(|| {
                bad(format!(
                    "row {sample} is missing: the file ends in row {row}"
                ))
            })?;
            start += end + 1;
        }
        if start == file.len() {
            return Err(bad(format!(
                "row {sample} is missing: the file holds {sample} rows"
            )));
        }
        let end = find_line_end(&file[start..])
            .ok_or_else(|| bad(format!("row {sample} is truncated (it has no line end)")))?;
        let line = &file[start..start + end];
        let fields = count_fields(line);
        if fields != columns {
            let against = if headed {
                "the header"
            } else {
                "the first row"
            };
            return Err(bad(format!(
                "row {sample} has {fields} fields, {against} {columns}"
            )));
        }
        let mut values = line.split(|&b| b == b',');
        if headed {
            let label = values.next().unwrap_or_default();
            let mut number = itoa::Buffer::new();
            if label != number.format(sample).as_bytes() {
                return Err(bad(format!(
                    "row {sample} is labelled {:?}",
                    String::from_utf8_lossy(label)
                )));
            }
        }
        if self.verify {
            for (column, value) in values.enumerate() {
                let parsed = std::str::from_utf8(value)
                    .ok()
                    .and_then(|v| v.parse::<f64>().ok());
                if parsed.is_none() {
                    return Err(bad(format!(
                        "row {sample}, column {column}: {:?} is not a number",
                        String::from_utf8_lossy(value)
                    )));
                }
            }
        }
        // pandas ends every line, the last one too: without it the file was cut.
        if file.last() != Some(&b'\n') {
            return Err(bad("truncated: the last line has no line end".into()));
        }
        Ok(SampleRead {
            offset: start as u64,
            bytes: fetched,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::testing::{self, Scratch};
    use crate::storage::{scratch_dir, LocalFs};

    const KEY: &str = "valid/1/img_3_of_8.csv";

    fn encode(dims: &[u64], element: ElementType) -> Vec<u8> {
        let shape = FileShape {
            dims: dims.to_vec(),
            element,
        };
        let out = testing::encode(&Csv { verify: true }, KEY, &shape, 5);
        assert!(out.side_files().is_empty());
        out.data
    }

    #[test]
    fn layout_is_pandas_to_csv() {
        let file = String::from_utf8(encode(&[2, 3, 4], ElementType::Uint8)).unwrap();
        let lines: Vec<&str> = file.split_terminator('\n').collect();
        assert!(file.ends_with('\n'));
        assert_eq!(lines.len(), 5);
        assert_eq!(lines[0], ",0,1,2,3,4,5");
        let record = lines[1].split_once(',').unwrap().1;
        for (i, line) in lines[1..].iter().enumerate() {
            assert_eq!(
                *line,
                format!("{i},{record}"),
                "every row is the same record"
            );
        }
        let values: Vec<u8> = record.split(',').map(|v| v.parse().unwrap()).collect();
        assert_eq!(values.len(), 6);
        assert!(values.iter().all(|&v| v < 255));

        // A larger record covers the uint8 range but 255, as randint(255) does.
        let file = encode(&[2000, 1], ElementType::Uint8);
        let text = String::from_utf8(file).unwrap();
        let record = text.lines().nth(1).unwrap();
        let values: Vec<u32> = record
            .split(',')
            .skip(1)
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
            let record = text.lines().nth(2).unwrap();
            assert!(record.starts_with("1,"), "{element:?}");
            let values: Vec<&str> = record.split(',').skip(1).collect();
            assert_eq!(values.len(), 50);
            assert!(values.iter().all(|v| check(v)), "{element:?}: {record}");
        }
    }

    #[test]
    fn reads_the_whole_file_for_every_sample() {
        let file = encode(&[7, 9, 4], ElementType::Uint8);
        let scratch = Scratch::new("csv");
        scratch.buffered.put(KEY, &file).unwrap();
        let header = file.iter().position(|&b| b == b'\n').unwrap() + 1;
        let row = (file.len() - header) / 4;
        let mut buf = ReadBuffer::default();
        for (storage, unit) in scratch.both() {
            for verify in [false, true] {
                let format = Csv { verify };
                let mut reader = format.reader();
                for sample in [2, 0, 3, 1] {
                    let read = reader.read_sample(storage, KEY, sample, &mut buf).unwrap();
                    assert_eq!(
                        read,
                        SampleRead {
                            offset: (header + sample as usize * row) as u64,
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

    #[test]
    fn truncated_and_corrupt_files_are_errors_naming_file_and_row() {
        let file = encode(&[3, 2, 3], ElementType::Uint8);
        let dir = scratch_dir("csv-corrupt");
        let storage = LocalFs::new(&dir);
        let mut buf = ReadBuffer::default();
        let mut read = |bytes: &[u8], verify: bool, sample: u64| {
            storage.put(KEY, bytes).unwrap();
            Csv { verify }
                .reader()
                .read_sample(&storage, KEY, sample, &mut buf)
                .map_err(|e| e.to_string())
        };
        for len in 0..file.len() {
            let error = read(&file[..len], false, 2).unwrap_err();
            assert!(error.contains(KEY), "{error}");
            // Any cut past the header loses or shortens a row, the last at least.
            let header = file.iter().position(|&b| b == b'\n').unwrap();
            if len > header {
                assert!(
                    error.contains("row 2") || error.contains("no line end"),
                    "cut at {len}: {error}"
                );
            }
        }
        let text = String::from_utf8(file.clone()).unwrap();
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
        // DLIO's later layout: no header, no index column; rows checked against the first.
        let headerless: String = text
            .lines()
            .skip(1)
            .map(|row| format!("{}\n", row.split_once(',').unwrap().1))
            .collect();
        for sample in 0..3 {
            assert!(
                read(headerless.as_bytes(), true, sample).is_ok(),
                "{sample}"
            );
        }
        let long = headerless.replacen("\n", "\n9,", 1);
        let error = read(long.as_bytes(), false, 1).unwrap_err();
        assert!(
            error.contains("row 1 has 7 fields, the first row 6"),
            "{error}"
        );
        let not_a_number = text.replacen("\n0,", "\n0,x", 1).into_bytes();
        assert!(read(&not_a_number, false, 0).is_ok());
        let error = read(&not_a_number, true, 0).unwrap_err();
        assert!(
            error.contains("row 0, column 0") && error.contains("not a number"),
            "{error}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
