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
//! Reading emulates `tf.data.TFRecordDataset`: a file is a stream, read record after record, and
//! the reader thread keeps its place in it. As TensorFlow's `RecordReader` over a
//! `BufferedInputStream`, the stream reads the file in requests of `buffer_size` bytes (256 KiB
//! unless `reader.transfer_size` says otherwise, as DLIO passes it), each starting where the last
//! one ended, and parses records out of them: a file of F bytes costs ceil(F / buffer_size)
//! sequential requests, whole blocks with O_DIRECT since every request but a hop's starts at a
//! multiple of the buffer. With `reader.transfer_size: 0` it reads unbuffered, as TensorFlow
//! then does: one request for a record's 12 header bytes, one for its payload and CRC. A sample
//! that is not the next record is found the only way a stream allows: by hopping over records
//! from the current place (when it lies ahead in the same file) or from the start of the file,
//! reading each header and skipping each payload. The epoch plan hands each rank whole files and
//! deals them to its reader threads, each file streamed by one thread from its first record
//! (`plan::Lanes`), so the stream nearly always just goes on. The index is written for DALI's
//! sake; TensorFlow never reads it, and neither does this reader.

use crc32c::{crc32c, crc32c_append};
use rand::rngs::SmallRng;

use super::{cannot_read, corrupt, Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::{IoBuffer, RangeRead, Storage};

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
    /// The stream's read buffer (`tf.data.TFRecordDataset`'s `buffer_size`, which DLIO sets to
    /// `reader.transfer_size`); 0 reads unbuffered.
    pub buffer_size: usize,
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
            buffer_size: self.buffer_size,
            place: None,
            chunk: IoBuffer::new(),
            window: RangeRead::default(),
            record: Vec::new(),
        })
    }

    fn side_files(&self, key: &str, each: &mut dyn FnMut(&str)) {
        each(&index_key(key));
    }
}

/// One reader thread's stream over the file in hand, read as TensorFlow's `RecordReader` reads it:
/// through a buffer of `buffer_size` bytes refilled by one request at the place where the last one
/// ended, records parsed out of it; with `buffer_size` 0, unbuffered, one request for a record's
/// header and one for its payload and CRC.
struct StreamReader {
    verify: bool,
    buffer_size: usize,
    /// The file in hand and the stream's place in it; None when no file is (then the next read
    /// opens one from its start).
    place: Option<Place>,
    /// The bytes of the last request: the file from `Place::window_start`, `window` in it.
    chunk: IoBuffer,
    window: RangeRead,
    /// A record's payload and CRC gathered whole, when `verify` checks them.
    record: Vec<u8>,
}

/// Where a stream is in its file.
struct Place {
    key: String,
    /// The number of the next record, and where it starts.
    record: u64,
    position: u64,
    /// The file offset of the first byte of the window (the bytes in hand).
    window_start: u64,
}

/// Where [`StreamReader::take`] hands the bytes it consumes, when they are wanted.
type Sink<'a> = &'a mut dyn FnMut(&[u8]);

/// Why [`StreamReader::take`] stopped short: the file ended after this many of the bytes asked for.
struct EndedAfter(u64);

impl StreamReader {
    /// Bytes of the file in hand from the stream's place.
    fn in_hand(&self, place: &Place) -> &[u8] {
        let window = self.window.bytes(&self.chunk);
        let consumed = (place.position - place.window_start) as usize;
        &window[consumed.min(window.len())..]
    }

    /// Consumes the next `len` bytes of the stream, handing them to `sink` in pieces (when it
    /// wants them), refilling the buffer as it empties; adds the bytes fetched to `fetched`.
    fn take(
        &mut self,
        storage: &dyn Storage,
        place: &mut Place,
        len: u64,
        fetched: &mut u64,
        mut sink: Option<Sink>,
    ) -> Result<std::result::Result<(), EndedAfter>> {
        let mut left = len;
        while left > 0 {
            let in_hand = self.in_hand(place);
            if in_hand.is_empty() {
                // An unbuffered stream asks for exactly what it needs, a buffered one for a whole
                // buffer from where the last request ended.
                let ask = if self.buffer_size == 0 {
                    usize::try_from(left).unwrap_or(usize::MAX)
                } else {
                    self.buffer_size
                };
                self.window = storage
                    .read_range(&place.key, place.position, ask, &mut self.chunk)
                    .map_err(|e| cannot_read(storage, &place.key, e))?;
                place.window_start = place.position;
                *fetched += self.window.fetched;
                if self.window.len == 0 {
                    return Ok(Err(EndedAfter(len - left)));
                }
                continue;
            }
            let piece = &in_hand[..in_hand
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX))];
            if let Some(sink) = sink.as_mut() {
                sink(piece);
            }
            let taken = piece.len() as u64;
            place.position += taken;
            left -= taken;
        }
        Ok(Ok(()))
    }

    /// Reads the next record's header and checks its CRC; returns the payload's length. `sample`
    /// is the record sought, for the message when the file ends first.
    fn header(
        &mut self,
        storage: &dyn Storage,
        place: &mut Place,
        sample: u64,
        fetched: &mut u64,
    ) -> Result<u64> {
        let (record, offset) = (place.record, place.position);
        let mut header = [0u8; HEADER];
        let mut got = 0;
        let mut gather = |piece: &[u8]| {
            header[got..got + piece.len()].copy_from_slice(piece);
            got += piece.len();
        };
        match self.take(storage, place, HEADER as u64, fetched, Some(&mut gather))? {
            Ok(()) => {}
            Err(EndedAfter(0)) => {
                return Err(corrupt(
                    storage,
                    &place.key,
                    format!("record {sample} is missing: the file ends after {record} records"),
                ))
            }
            Err(EndedAfter(part)) => {
                return Err(corrupt(
                    storage,
                    &place.key,
                    format!(
                        "record {record}: truncated header, the file ends {part} bytes into its \
                         {HEADER}"
                    ),
                ))
            }
        }
        let (length, crc) = header.split_at(8);
        if masked_crc(length).to_le_bytes() != crc {
            return Err(corrupt(
                storage,
                &place.key,
                format!("record {record} at offset {offset}: the CRC of its length does not match"),
            ));
        }
        let mut len = [0; 8];
        len.copy_from_slice(length);
        Ok(u64::from_le_bytes(len))
    }

    fn read_record(
        &mut self,
        storage: &dyn Storage,
        place: &mut Place,
        sample: u64,
    ) -> Result<SampleRead> {
        let mut fetched = 0;
        loop {
            let (record, offset) = (place.record, place.position);
            let len = self.header(storage, place, sample, &mut fetched)?;
            let body = len
                .checked_add(4)
                .filter(|_| offset.checked_add(len + FRAMING).is_some());
            let Some(body) = body else {
                return Err(corrupt(
                    storage,
                    &place.key,
                    format!("record {record}: impossible length {len}"),
                ));
            };
            if record < sample {
                // Passed over unread, as `SkipNBytes` does: within the buffer, or past it (the
                // next request starts there).
                place.position += body;
                place.record += 1;
                continue;
            }
            let mut record_bytes = std::mem::take(&mut self.record);
            record_bytes.clear();
            let mut keep = |piece: &[u8]| record_bytes.extend_from_slice(piece);
            let sink: Option<Sink> = if self.verify { Some(&mut keep) } else { None };
            let taken = self.take(storage, place, body, &mut fetched, sink)?;
            self.record = record_bytes;
            if let Err(EndedAfter(got)) = taken {
                let at = offset + HEADER as u64;
                return Err(corrupt(
                    storage,
                    &place.key,
                    format!(
                        "record {record} at offset {offset} runs past the end of the file: its \
                         payload and CRC need {body} bytes at offset {at}, only {got} remain"
                    ),
                ));
            }
            if self.verify {
                let (payload, crc) = self.record.split_at(self.record.len() - 4);
                if masked_crc(payload).to_le_bytes() != crc {
                    return Err(corrupt(
                        storage,
                        &place.key,
                        format!(
                            "record {record} at offset {offset}: the payload's CRC does not match"
                        ),
                    ));
                }
                parse_example(payload).map_err(|why| {
                    corrupt(storage, &place.key, format!("record {record}: {why}"))
                })?;
            }
            place.record += 1;
            return Ok(SampleRead {
                offset,
                bytes: fetched,
            });
        }
    }
}

impl SampleReader for StreamReader {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        _buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        // A stream only goes forward: a record behind it, or in another file, means opening the
        // file anew from its start.
        let mut place = match self.place.take() {
            Some(place) if place.key == key && place.record <= sample => place,
            other => {
                let mut key_buf = other.map(|p| p.key).unwrap_or_default();
                key_buf.clear();
                key_buf.push_str(key);
                self.window = RangeRead::default();
                Place {
                    key: key_buf,
                    record: 0,
                    position: 0,
                    window_start: 0,
                }
            }
        };
        let read = self.read_record(storage, &mut place, sample)?;
        // Kept only after a good read: after an error the stream's place is unknown.
        self.place = Some(place);
        Ok(read)
    }

    fn put_down(&mut self) {
        self.place = None;
        self.window = RangeRead::default();
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::config::{ElementType, TENSORFLOW_READ_BUFFER};
    use crate::format::testing::{Counting, Request, Scratch};
    use crate::storage::{scratch_dir, LocalFs};

    const KEY: &str = "train/3/img_1_of_8.tfrecord";

    fn shape(dims: &[u64], element: ElementType) -> FileShape {
        FileShape {
            dims: dims.to_vec(),
            element,
        }
    }

    fn encode(shape: &FileShape) -> Encoded<'static> {
        let mut out = Encoded::default();
        TfRecord {
            verify: true,
            buffer_size: 0,
        }
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

    /// The requests' (offset, length asked, bytes moved), in order.
    fn ranges(requests: Vec<Request>) -> Vec<(u64, usize, u64)> {
        requests
            .into_iter()
            .map(|request| match request {
                Request::Range {
                    offset,
                    len,
                    fetched,
                    ..
                } => (offset, len, fetched),
                other => panic!("a stream makes range reads only, not {other:?}"),
            })
            .collect()
    }

    #[test]
    fn unbuffered_streams_read_a_header_and_a_record_and_hop_headers_to_reach_others() {
        let shape = shape(&[40, 50, 5], ElementType::Uint8);
        let out = encode(&shape);
        let payload = records(&out.data)[0].1.len() as u64;
        let record = payload + 16;
        let scratch = Scratch::new("tfrecord-unbuffered");
        let storage = Counting::new(&scratch.buffered);
        scratch.buffered.put(KEY, &out.data).unwrap();
        scratch
            .buffered
            .put("train/other.tfrecord", &out.data)
            .unwrap();
        let mut buf = ReadBuffer::default();
        for verify in [false, true] {
            let format = TfRecord {
                verify,
                buffer_size: 0,
            };
            let mut reader = format.reader();
            for k in 0..5 {
                let read = reader.read_sample(&storage, KEY, k, &mut buf).unwrap();
                assert_eq!(
                    read,
                    SampleRead {
                        offset: k * record,
                        bytes: record
                    }
                );
                // TensorFlow's RecordReader without a buffer: the header, then payload and CRC.
                let at = k * record;
                assert_eq!(
                    ranges(storage.take()),
                    [(at, 12, 12), (at + 12, payload as usize + 4, payload + 4)]
                );
            }
            // A fresh stream skipping ahead reads a header per record skipped.
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
            storage.take();
        }
        drop(storage);
        scratch.remove();
    }

    #[test]
    fn buffered_streams_read_the_file_in_whole_buffers_from_its_start() {
        // 110 KiB records, as resnet50's; a 256 KiB buffer (TensorFlow's) and a small one.
        let shape = shape(&[110 * 1024, 1, 9], ElementType::Uint8);
        let out = encode(&shape);
        let size = out.data.len() as u64;
        let found = records(&out.data);
        let scratch = Scratch::new("tfrecord-buffered");
        scratch.buffered.put(KEY, &out.data).unwrap();
        for (storage, unit) in scratch.both() {
            let storage = Counting::new(storage);
            for buffer_size in [TENSORFLOW_READ_BUFFER as usize, 12 * 1024] {
                for verify in [false, true] {
                    let format = TfRecord {
                        verify,
                        buffer_size,
                    };
                    let mut reader = format.reader();
                    let mut buf = ReadBuffer::default();
                    let mut total = 0;
                    for (k, (offset, _)) in found.iter().enumerate() {
                        let read = reader
                            .read_sample(&storage, KEY, k as u64, &mut buf)
                            .unwrap();
                        assert_eq!(read.offset, *offset as u64);
                        total += read.bytes;
                    }
                    // ceil(size / buffer) requests of a whole buffer, each where the last ended;
                    // the file's bytes moved once (whole blocks with O_DIRECT).
                    let requests = ranges(storage.take());
                    let expected: Vec<(u64, usize, u64)> = (0..size.div_ceil(buffer_size as u64))
                        .map(|n| {
                            let at = n * buffer_size as u64;
                            let moved = (size - at).min(buffer_size as u64);
                            (at, buffer_size, moved.next_multiple_of(unit))
                        })
                        .collect();
                    assert_eq!(requests, expected, "buffer {buffer_size}, unit {unit}");
                    assert_eq!(total, size.next_multiple_of(unit));
                    let past = reader
                        .read_sample(&storage, KEY, found.len() as u64, &mut buf)
                        .unwrap_err()
                        .to_string();
                    assert!(past.contains("is missing"), "{past}");
                    storage.take();
                }
            }
        }
        scratch.remove();
    }

    #[test]
    fn a_buffered_stream_hops_within_its_buffer_and_starts_over_when_put_down() {
        let shape = shape(&[3000, 1, 8], ElementType::Uint8);
        let out = encode(&shape);
        let record = records(&out.data)[1].0 as u64;
        let scratch = Scratch::new("tfrecord-hops");
        scratch.buffered.put(KEY, &out.data).unwrap();
        let storage = Counting::new(&scratch.direct);
        let buffer_size = 8192;
        let format = TfRecord {
            verify: true,
            buffer_size,
        };
        let mut reader = format.reader();
        let mut buf = ReadBuffer::default();
        // Record 5 by a fresh stream: records 0-4 are hopped, their payloads skipped unread where
        // the buffer does not hold them; every byte checked by its CRC on the way.
        let read = reader.read_sample(&storage, KEY, 5, &mut buf).unwrap();
        assert_eq!(read.offset, 5 * record);
        // The buffer ends inside record 2: its payload's rest is skipped, and the next request
        // starts at record 3's header, not where the buffer ended.
        let hops: Vec<u64> = ranges(storage.take()).iter().map(|r| r.0).collect();
        assert_eq!(hops, [0, 3 * record, 3 * record + buffer_size as u64]);
        // Record 6 follows on; then the thread puts the file down, and record 7 opens it anew.
        reader.read_sample(&storage, KEY, 6, &mut buf).unwrap();
        storage.take();
        reader.put_down();
        let read = reader.read_sample(&storage, KEY, 7, &mut buf).unwrap();
        assert_eq!(read.offset, 7 * record);
        assert_eq!(ranges(storage.take())[0].0, 0);
        drop(storage);
        scratch.remove();
    }

    /// Reads every sample in order; the first error, if any.
    fn read_all(
        storage: &dyn Storage,
        verify: bool,
        buffer_size: usize,
        samples: u64,
    ) -> Option<String> {
        let format = TfRecord {
            verify,
            buffer_size,
        };
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
        let missing = read_all(&storage, true, 0, 1).unwrap();
        assert!(
            missing.contains("cannot read") && missing.contains(KEY),
            "{missing}"
        );
        for len in 0..file.len() {
            storage.put(KEY, &file[..len]).unwrap();
            for (verify, buffer_size) in [(false, 0), (true, 0), (false, 64), (true, 64)] {
                let error = read_all(&storage, verify, buffer_size, 3)
                    .unwrap_or_else(|| panic!("cut at {len} read without error"));
                assert!(error.contains(KEY), "{error}");
                let broken = len / record;
                assert!(
                    error.contains(&format!("record {broken}")),
                    "cut at {len}, buffer {buffer_size}: {error}"
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
            for buffer_size in [0, 64, TENSORFLOW_READ_BUFFER as usize] {
                let error = read_all(&storage, true, buffer_size, 3).unwrap();
                let broken = at / record;
                assert!(
                    error.contains(KEY) && error.contains(&format!("record {broken}")),
                    "{error}"
                );
                assert!(error.contains("CRC"), "{error}");
                let found = read_all(&storage, false, buffer_size, 3).is_some();
                assert_eq!(found, always, "byte {at}");
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
