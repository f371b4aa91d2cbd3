//! TensorFlow's TFRecord, as `tf.io.TFRecordWriter` writes it and DLIO's tf_generator fills it:
//! one record per sample, each framed as
//!
//! ```text
//! u64 LE payload length | u32 LE masked CRC-32C of those 8 bytes | payload | u32 LE masked CRC-32C of the payload
//! ```
//!
//! where the payload is a serialized `tf.train.Example` with two features: `image`, a bytes_list
//! holding the sample's bytes, and `size`, an int64_list holding the first record dimension (DLIO
//! writes `int(sqrt(record_length))`, which is that dimension when the size law has no stdev).
//! Beside every file goes the index NVIDIA DALI's `tfrecord2idx` makes and DLIO calls for,
//! `index/{train|valid}/{file name}.idx`, one `"{offset} {length}\n"` line per record, the length
//! counting the 16 framing bytes.
//!
//! Reading emulates `tf.data.TFRecordDataset`: a file is a stream, read record after record (12
//! header bytes, then payload and CRC), and the reader thread keeps its place in it. A sample
//! that is not the next record of the stream in hand is found the only way a stream allows: by
//! hopping over record headers from the current place (when it lies ahead in the same file) or
//! from the start of the file, every hop a real read. The epoch plan hands each rank whole files
//! and deals them to its reader threads, each file streamed by one thread from its first record
//! (`plan::Lanes`), so nearly every read is the sequential one: 16 + payload bytes per sample.
//! The index is written for DALI's sake; TensorFlow never reads it, and neither does this reader.

use crc32c::{crc32c, crc32c_append};
use rand::rngs::SmallRng;

use super::{cannot_read, corrupt, Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::Storage;

/// Length (8 bytes) and its CRC (4).
const HEADER: usize = 12;
/// Header plus the payload's CRC.
const FRAMING: u64 = 16;

#[derive(Clone, Copy)]
pub struct TfRecord {
    /// Also check every payload's CRC and parse its Example. TensorFlow checks the payload CRC
    /// too; left off, only the length CRCs (cheap, and what finds the records) are checked, so
    /// that the CPU does not stand between storage and the measurement.
    pub verify: bool,
}

/// TFRecord's CRC masking, so that a CRC stored inside checksummed data does not checksum to a
/// fixed value.
fn masked_crc(data: &[u8]) -> u32 {
    mask(crc32c(data))
}

fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// The index side file of the file at `key` (`train/3/img_1_of_8.tfrecord` →
/// `index/train/img_1_of_8.tfrecord.idx`), where DLIO's generator has DALI's tfrecord2idx write it.
pub(crate) fn index_key(key: &str) -> String {
    let split = key.split('/').next().unwrap_or(key);
    let name = key.rsplit('/').next().unwrap_or(key);
    format!("index/{split}/{name}.idx")
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> u64 {
    (64 - (v | 1).leading_zeros() as u64).div_ceil(7)
}

/// Tags of length-delimited fields 1, 2, 3 (`field << 3 | 2`).
const FIELD1: u8 = 0x0a;
const FIELD2: u8 = 0x12;
const FIELD3: u8 = 0x1a;

/// Appends field `tag` holding `body`.
fn put_message(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    put_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// The serialized Example of every record of a file, but for the image bytes: what goes before
/// them and what goes after. The image is `image_len` bytes; `size` the int64 feature.
///
/// `Example{features: Features{feature: map<string, Feature>}}`, a map entry being a message of
/// key (1) and value (2); `Feature.bytes_list` is field 1, `int64_list` field 3; both lists hold
/// `value` as field 1 (packed varints for int64). The entries go in key order, as a deterministic
/// serialization puts them.
fn example_parts(image_len: u64, size: u64) -> (Vec<u8>, Vec<u8>) {
    let mut int64_list = Vec::new();
    let mut packed = Vec::new();
    put_varint(&mut packed, size);
    put_message(&mut int64_list, FIELD1, &packed);
    let mut feature = Vec::new();
    put_message(&mut feature, FIELD3, &int64_list);
    let mut entry = Vec::new();
    put_message(&mut entry, FIELD1, b"size");
    put_message(&mut entry, FIELD2, &feature);
    let mut suffix = Vec::new();
    put_message(&mut suffix, FIELD1, &entry);

    // The image's messages enclose it, so their lengths are computed rather than built.
    let enclosed = |len: u64| 1 + varint_len(len) + len;
    let bytes_list = enclosed(image_len);
    let feature = enclosed(bytes_list);
    let entry = (2 + 5) + enclosed(feature);
    let features = enclosed(entry) + suffix.len() as u64;
    let mut prefix = Vec::new();
    for (tag, len) in [(FIELD1, features), (FIELD1, entry)] {
        prefix.push(tag);
        put_varint(&mut prefix, len);
    }
    put_message(&mut prefix, FIELD1, b"image");
    for (tag, len) in [(FIELD2, feature), (FIELD1, bytes_list), (FIELD1, image_len)] {
        prefix.push(tag);
        put_varint(&mut prefix, len);
    }
    (prefix, suffix)
}

/// One field of a protobuf message, as far as a reader that looks for two features needs it.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of a serialized message, in order; an error (then the end) where it is malformed.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields { bytes, pos: 0 }
    }

    fn varint(&mut self) -> std::result::Result<u64, String> {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = *self.bytes.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            value |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift > 63 {
                return Err("varint longer than 10 bytes".into());
            }
        }
    }

    fn skip(&mut self, len: u64) -> std::result::Result<&'a [u8], String> {
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|len| self.pos.checked_add(len))
            .and_then(|end| self.bytes.get(self.pos..end))
            .ok_or_else(|| format!("a {len}-byte field runs past the end of its message"))?;
        self.pos += bytes.len();
        Ok(bytes)
    }

    fn field(&mut self) -> std::result::Result<(u64, Value<'a>), String> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => self.skip(8).map(|_| Value::Fixed)?,
            2 => {
                let len = self.varint()?;
                Value::Bytes(self.skip(len)?)
            }
            5 => self.skip(4).map(|_| Value::Fixed)?,
            wire => return Err(format!("unsupported protobuf wire type {wire}")),
        };
        Ok((key >> 3, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = std::result::Result<(u64, Value<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.pos = self.bytes.len();
        }
        Some(field)
    }
}

/// What `tf.io.parse_example` with DLIO's `FixedLenFeature([], tf.string)` for `image` and
/// `FixedLenFeature([], tf.int64)` for `size` insists on: both features, one value each. Returns
/// the image's length and the size.
fn parse_example(payload: &[u8]) -> std::result::Result<(usize, u64), String> {
    let (mut image, mut size) = (None, None);
    for field in Fields::new(payload) {
        let (1, Value::Bytes(features)) = field? else {
            continue;
        };
        for entry in Fields::new(features) {
            let (1, Value::Bytes(entry)) = entry? else {
                continue;
            };
            let (mut name, mut feature): (&[u8], &[u8]) = (b"", b"");
            for part in Fields::new(entry) {
                match part? {
                    (1, Value::Bytes(k)) => name = k,
                    (2, Value::Bytes(v)) => feature = v,
                    _ => {}
                }
            }
            match name {
                b"image" => image = Some(feature),
                b"size" => size = Some(feature),
                _ => {}
            }
        }
    }
    let image = image.ok_or("the Example has no 'image' feature")?;
    let size = size.ok_or("the Example has no 'size' feature")?;
    let (mut images, mut image_len) = (0, 0);
    let (mut sizes, mut size_value) = (0, 0);
    for field in Fields::new(image) {
        if let (1, Value::Bytes(list)) = field? {
            for value in Fields::new(list) {
                if let (1, Value::Bytes(bytes)) = value? {
                    images += 1;
                    image_len = bytes.len();
                }
            }
        }
    }
    for field in Fields::new(size) {
        if let (3, Value::Bytes(list)) = field? {
            for value in Fields::new(list) {
                match value? {
                    (1, Value::Varint(v)) => {
                        sizes += 1;
                        size_value = v;
                    }
                    (1, Value::Bytes(packed)) => {
                        let mut values = Fields::new(packed);
                        while values.pos < packed.len() {
                            size_value = values.varint()?;
                            sizes += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if images != 1 {
        return Err(format!(
            "feature 'image' holds {images} bytes values, not one"
        ));
    }
    if sizes != 1 {
        return Err(format!(
            "feature 'size' holds {sizes} int64 values, not one"
        ));
    }
    Ok((image_len, size_value))
}

impl FileFormat for TfRecord {
    fn encode(
        &self,
        key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        out.clear();
        let (&samples, sample_dims) = shape.dims.split_last().unwrap_or((&1, &[]));
        let image_len = sample_dims
            .iter()
            .try_fold(shape.element.size(), |a, &d| a.checked_mul(d));
        let size = sample_dims.first().copied().unwrap_or(1);
        let too_large = || Error::run(format!("{key}: the samples of {shape:?} are too large"));
        let image_len = image_len.ok_or_else(too_large)?;
        let (prefix, suffix) = example_parts(image_len, size);
        let payload_len = (prefix.len() + suffix.len()) as u64 + image_len;
        let record_len = payload_len + FRAMING;
        let total = samples
            .checked_mul(record_len)
            .and_then(|t| usize::try_from(t).ok())
            .ok_or_else(too_large)?;
        out.reserve(total);
        let length = payload_len.to_le_bytes();
        let length_crc = masked_crc(&length).to_le_bytes();
        for _ in 0..samples {
            out.data.extend_from_slice(&length);
            out.data.extend_from_slice(&length_crc);
            out.data.extend_from_slice(&prefix);
            let mut crc = crc32c(&prefix);
            out.random_values(image_len, 1, rng, |image| crc = crc32c_append(crc, image))?;
            crc = crc32c_append(crc, &suffix);
            out.data.extend_from_slice(&suffix);
            out.data.extend_from_slice(&mask(crc).to_le_bytes());
        }
        let index = out.side_file(&index_key(key));
        let mut number = itoa::Buffer::new();
        for record in 0..samples {
            index.extend_from_slice(number.format(record * record_len).as_bytes());
            index.push(b' ');
            index.extend_from_slice(number.format(record_len).as_bytes());
            index.push(b'\n');
        }
        Ok(())
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(StreamReader {
            verify: self.verify,
            cursor_key: String::new(),
            cursor_record: 0,
            cursor_offset: 0,
        })
    }

    fn side_files(&self, key: &str, each: &mut dyn FnMut(&str)) {
        each(&index_key(key));
    }
}

/// One reader thread's stream: the file in hand (`cursor_key`, empty for none), the number of its
/// next record and where that record starts.
struct StreamReader {
    verify: bool,
    cursor_key: String,
    cursor_record: u64,
    cursor_offset: u64,
}

impl StreamReader {
    /// Reads the header of record `record` at `offset` and checks its CRC; returns the payload's
    /// length and the bytes fetched. `sample` is the record sought, for the message when the file
    /// ends first.
    fn header(
        storage: &dyn Storage,
        key: &str,
        record: u64,
        offset: u64,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<(u64, u64)> {
        let read = storage
            .read_range(key, offset, HEADER, &mut buf.bytes)
            .map_err(|e| cannot_read(storage, key, e))?;
        let header = read.bytes(&buf.bytes);
        if header.is_empty() {
            return Err(corrupt(
                storage,
                key,
                format!("record {sample} is missing: the file ends after {record} records"),
            ));
        }
        let Ok(header) = <[u8; HEADER]>::try_from(header) else {
            return Err(corrupt(
                storage,
                key,
                format!(
                    "record {record}: truncated header, the file ends {} bytes into its {HEADER}",
                    header.len()
                ),
            ));
        };
        let (length, crc) = header.split_at(8);
        if masked_crc(length).to_le_bytes() != crc {
            return Err(corrupt(
                storage,
                key,
                format!("record {record} at offset {offset}: the CRC of its length does not match"),
            ));
        }
        let mut len = [0; 8];
        len.copy_from_slice(length);
        Ok((u64::from_le_bytes(len), read.fetched))
    }
}

impl SampleReader for StreamReader {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let (mut record, mut offset) = if self.cursor_key == key && self.cursor_record <= sample {
            (self.cursor_record, self.cursor_offset)
        } else {
            (0, 0)
        };
        // Forgotten until this read succeeds: after an error the stream's place is unknown.
        self.cursor_key.clear();
        let impossible = |record: u64, len: u64| {
            corrupt(
                storage,
                key,
                format!("record {record}: impossible length {len}"),
            )
        };
        let mut bytes = 0;
        loop {
            let (len, fetched) = Self::header(storage, key, record, offset, sample, buf)?;
            bytes += fetched;
            let next = len
                .checked_add(FRAMING)
                .and_then(|l| offset.checked_add(l))
                .ok_or_else(|| impossible(record, len))?;
            if record < sample {
                record += 1;
                offset = next;
                continue;
            }
            let want = usize::try_from(len + 4).map_err(|_| impossible(record, len))?;
            let at = offset + HEADER as u64;
            let read = storage
                .read_range(key, at, want, &mut buf.bytes)
                .map_err(|e| cannot_read(storage, key, e))?;
            if read.len < want {
                return Err(corrupt(
                    storage,
                    key,
                    format!(
                        "record {record} at offset {offset} runs past the end of the file: its \
                         payload and CRC need {want} bytes at offset {at}, only {} remain",
                        read.len
                    ),
                ));
            }
            bytes += read.fetched;
            if self.verify {
                let (payload, crc) = read.bytes(&buf.bytes).split_at(want - 4);
                if masked_crc(payload).to_le_bytes() != crc {
                    return Err(corrupt(
                        storage,
                        key,
                        format!(
                            "record {record} at offset {offset}: the payload's CRC does not match"
                        ),
                    ));
                }
                parse_example(payload)
                    .map_err(|why| corrupt(storage, key, format!("record {record}: {why}")))?;
            }
            self.cursor_key.push_str(key);
            self.cursor_record = record + 1;
            self.cursor_offset = next;
            return Ok(SampleRead { offset, bytes });
        }
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::config::ElementType;
    use crate::storage::{scratch_dir, LocalFs, LocalOptions};

    const KEY: &str = "train/3/img_1_of_8.tfrecord";

    fn shape(dims: &[u64], element: ElementType) -> FileShape {
        FileShape {
            dims: dims.to_vec(),
            element,
        }
    }

    fn encode(shape: &FileShape) -> Encoded<'static> {
        let mut out = Encoded::default();
        TfRecord { verify: true }
            .encode(KEY, shape, &mut SmallRng::seed_from_u64(9), &mut out)
            .unwrap();
        out
    }

    /// (offset, payload) of every record, walking the frames independently of the reader.
    fn records(file: &[u8]) -> Vec<(usize, &[u8])> {
        let mut at = 0;
        let mut found = Vec::new();
        while at < file.len() {
            let len = u64::from_le_bytes(file[at..at + 8].try_into().unwrap()) as usize;
            assert_eq!(
                file[at + 8..at + 12],
                masked_crc(&file[at..at + 8]).to_le_bytes()
            );
            let payload = &file[at + 12..at + 12 + len];
            let crc = &file[at + 12 + len..at + 16 + len];
            assert_eq!(crc, masked_crc(payload).to_le_bytes());
            found.push((at, payload));
            at += 16 + len;
        }
        assert_eq!(at, file.len());
        found
    }

    #[test]
    fn masked_crc_matches_tensorflow() {
        // The data CRC of a record in a real TensorFlow event file (an Event with
        // file_version "CRC test, one two"), as TensorBoard's reader tests it.
        assert_eq!(masked_crc(b"\x1a\x11CRC test, one two"), 0x5794_d08a);
    }

    #[test]
    fn layout_example_and_index() {
        for (dims, element) in [
            (vec![8, 8, 3], ElementType::Uint8),
            (vec![300, 200, 2], ElementType::Float32),
            (vec![5, 1], ElementType::Int64),
        ] {
            let shape = shape(&dims, element);
            let out = encode(&shape);
            let image_len = dims[..dims.len() - 1].iter().product::<u64>() * element.size();
            let found = records(&out.data);
            assert_eq!(found.len() as u64, *dims.last().unwrap());
            let mut index = String::new();
            for (offset, payload) in &found {
                assert_eq!(parse_example(payload), Ok((image_len as usize, dims[0])));
                index.push_str(&format!("{offset} {}\n", payload.len() + 16));
            }
            // The image is random per sample.
            if found.len() > 1 {
                assert_ne!(found[0].1, found[1].1);
            }
            let side = out.side_files();
            assert_eq!(side.len(), 1);
            assert_eq!(side[0].key, "index/train/img_1_of_8.tfrecord.idx");
            assert_eq!(String::from_utf8(side[0].bytes.clone()).unwrap(), index);
        }
        assert_eq!(
            index_key("valid/img_0_of_2.tfrecord"),
            "index/valid/img_0_of_2.tfrecord.idx"
        );
    }

    #[test]
    fn example_parts_encode_protobuf_as_tensorflow_does() {
        // A 3-byte image and size 7, byte for byte as tf.train.Example serializes it.
        let (prefix, suffix) = example_parts(3, 7);
        let mut example = prefix;
        example.extend_from_slice(b"abc");
        example.extend_from_slice(&suffix);
        let expected: &[u8] = b"\x0a\x21\
            \x0a\x10\x0a\x05image\x12\x07\x0a\x05\x0a\x03abc\
            \x0a\x0d\x0a\x04size\x12\x05\x1a\x03\x0a\x01\x07";
        assert_eq!(example, expected);
        // Lengths that need multi-byte varints at every level.
        for image_len in [127, 128, 16_383, 16_384, 1 << 21] {
            let (prefix, suffix) = example_parts(image_len, 300);
            let mut example = prefix;
            example.resize(example.len() + image_len as usize, 0xAB);
            example.extend_from_slice(&suffix);
            assert_eq!(parse_example(&example), Ok((image_len as usize, 300)));
        }
    }

    #[test]
    fn malformed_examples_are_refused() {
        let (prefix, suffix) = example_parts(4, 2);
        let good = [prefix.as_slice(), b"wxyz", &suffix].concat();
        assert_eq!(parse_example(&good), Ok((4, 2)));
        for len in 0..good.len() {
            assert!(parse_example(&good[..len]).is_err(), "cut at {len}");
        }
        let no_size = [&prefix[..], b"wxyz"].concat();
        let mut no_size = no_size;
        no_size[1] -= suffix.len() as u8;
        assert!(parse_example(&no_size).unwrap_err().contains("'size'"));
        assert!(parse_example(b"\x0f").unwrap_err().contains("wire type"));
        assert!(parse_example(&[0x08; 12]).is_err());
    }

    fn direct(dir: &std::path::Path) -> LocalFs {
        LocalFs::with_options(
            dir,
            LocalOptions {
                odirect: true,
                evict_after_read: false,
            },
        )
    }

    #[test]
    fn streams_records_and_hops_headers_to_reach_others() {
        let shape = shape(&[40, 50, 5], ElementType::Uint8);
        let out = encode(&shape);
        let payload = records(&out.data)[0].1.len() as u64;
        let record = payload + 16;
        let dir = scratch_dir("tfrecord-stream");
        let storage = LocalFs::new(&dir);
        storage.put(KEY, &out.data).unwrap();
        storage.put("train/other.tfrecord", &out.data).unwrap();
        let mut buf = ReadBuffer::default();
        for verify in [false, true] {
            let format = TfRecord { verify };
            let mut reader = format.reader();
            let mut read =
                |key: &str, sample| reader.read_sample(&storage, key, sample, &mut buf).unwrap();
            for k in 0..5 {
                assert_eq!(
                    read(KEY, k),
                    SampleRead {
                        offset: k * record,
                        bytes: record
                    }
                );
            }
            // A fresh stream skipping ahead pays a header per record skipped.
            let mut reader = format.reader();
            let mut read =
                |key: &str, sample| reader.read_sample(&storage, key, sample, &mut buf).unwrap();
            assert_eq!(read(KEY, 3).bytes, 3 * 12 + record);
            assert_eq!(read(KEY, 4).bytes, record);
            // Backwards: the stream starts over.
            assert_eq!(read(KEY, 1).bytes, 12 + record);
            // Ahead from the place in hand.
            assert_eq!(read(KEY, 4).bytes, 2 * 12 + record);
            // Another file is another stream; coming back starts over too.
            assert_eq!(read("train/other.tfrecord", 0).bytes, record);
            assert_eq!(
                read(KEY, 0),
                SampleRead {
                    offset: 0,
                    bytes: record
                }
            );
            let past = reader
                .read_sample(&storage, KEY, 5, &mut buf)
                .unwrap_err()
                .to_string();
            assert!(
                past.contains("record 5 is missing") && past.contains(KEY),
                "{past}"
            );
        }

        // O_DIRECT moves whole blocks; with verify, any misplaced byte would fail the CRC.
        let direct = direct(&dir);
        let mut reader = TfRecord { verify: true }.reader();
        for k in 0..5 {
            let read = reader.read_sample(&direct, KEY, k, &mut buf).unwrap();
            assert_eq!(read.offset, k * record);
            assert!(
                read.bytes > record && read.bytes <= record + 3 * 4096,
                "{read:?}"
            );
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Reads every sample in order; the first error, if any.
    fn read_all(storage: &dyn Storage, verify: bool, samples: u64) -> Option<String> {
        let format = TfRecord { verify };
        let mut reader = format.reader();
        let mut buf = ReadBuffer::default();
        (0..samples).find_map(|k| {
            reader
                .read_sample(storage, KEY, k, &mut buf)
                .err()
                .map(|e| e.to_string())
        })
    }

    #[test]
    fn truncated_and_corrupt_files_are_errors_naming_file_and_record() {
        let out = encode(&shape(&[3, 4, 3], ElementType::Uint8));
        let file = &out.data;
        let record = file.len() / 3;
        let dir = scratch_dir("tfrecord-corrupt");
        let storage = LocalFs::new(&dir);
        let missing = read_all(&storage, true, 1).unwrap();
        assert!(
            missing.contains("cannot read") && missing.contains(KEY),
            "{missing}"
        );
        for len in 0..file.len() {
            storage.put(KEY, &file[..len]).unwrap();
            for verify in [false, true] {
                let error = read_all(&storage, verify, 3)
                    .unwrap_or_else(|| panic!("cut at {len} read without error"));
                assert!(error.contains(KEY), "{error}");
                let broken = len / record;
                assert!(
                    error.contains(&format!("record {broken}")),
                    "cut at {len}: {error}"
                );
            }
        }
        // A flipped byte: in a length it is always found; in a payload or its CRC, with verify.
        for (at, always) in [
            (2, true),
            (record + 9, true),
            (record + 20, false),
            (2 * record - 1, false),
        ] {
            let mut bad = file.clone();
            bad[at] ^= 0x40;
            storage.put(KEY, &bad).unwrap();
            let error = read_all(&storage, true, 3).unwrap();
            let broken = at / record;
            assert!(
                error.contains(KEY) && error.contains(&format!("record {broken}")),
                "{error}"
            );
            assert!(error.contains("CRC"), "{error}");
            assert_eq!(read_all(&storage, false, 3).is_some(), always, "byte {at}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
