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
//!
//! The files: this one holds the format, which writes the records and their index, and
//! `index_key`, where a file's index goes; `framing.rs` the record framing (lengths and masked
//! CRC-32Cs); `example.rs` the protobuf `tf.train.Example`, serialized around the image bytes and
//! parsed back; `stream.rs` the stream reader, a file read record after record through
//! TensorFlow's buffer; `tests.rs` the unit tests.

mod example;
mod framing;
mod stream;

#[cfg(test)]
mod tests;

use crc32c::{crc32c, crc32c_append};
use rand::rngs::SmallRng;

use self::example::{example_features, example_parts};
use self::framing::{mask, masked_crc, FRAMING, HEADER};
use self::stream::StreamReader;
use super::{DaliOperator, Encoded, FileFormat, SampleReader};
use crate::dataset::FileShape;
use crate::error::{Error, Result};

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

/// The index side file of the file at `key` (`train/3/img_1_of_8.tfrecord` →
/// `index/train/img_1_of_8.tfrecord.idx`), where DLIO's generator has DALI's tfrecord2idx write it.
pub(crate) fn index_key(key: &str) -> String {
    let split = key.split('/').next().unwrap_or(key);
    let name = key.rsplit('/').next().unwrap_or(key);
    format!("index/{split}/{name}.idx")
}

/// What DALI's `fn.readers.tfrecord` does with a record the index points at (DLIO's
/// `native_dali` loader): checks its framing (the length and its CRC; DALI checks no payload CRC),
/// parses its `tf.train.Example` and copies the `image` feature out into `image` (every byte of
/// the record touched, as DALI's parser copies the feature into its output). Returns the image's
/// length.
pub(crate) fn parse_record(
    record: &[u8],
    image: &mut Vec<u8>,
) -> std::result::Result<usize, String> {
    if record.len() < FRAMING as usize {
        return Err(format!(
            "the index gives the record {} bytes, fewer than its {FRAMING} framing bytes",
            record.len()
        ));
    }
    let (length, crc) = (&record[..8], &record[8..HEADER]);
    if masked_crc(length).to_le_bytes() != crc {
        return Err("the CRC of the record's length does not match".to_string());
    }
    let len = u64::from_le_bytes(length.try_into().expect("8 bytes"));
    if len != record.len() as u64 - FRAMING {
        return Err(format!(
            "the record holds {len} payload bytes, the index gives it {}",
            record.len() as u64 - FRAMING
        ));
    }
    let payload = &record[HEADER..record.len() - 4];
    let (bytes, _) = example_features(payload)?;
    image.clear();
    image.extend_from_slice(bytes);
    Ok(bytes.len())
}

/// The records of a file as its index lists them (`"{offset} {length}\n"` per record, as DALI's
/// `tfrecord2idx` writes and `fn.readers.tfrecord` reads it).
pub(crate) fn parse_index(text: &[u8]) -> std::result::Result<Vec<(u64, u64)>, String> {
    let text = std::str::from_utf8(text).map_err(|_| "the index is not text".to_string())?;
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .enumerate()
        .map(|(n, line)| {
            let mut words = line.split_whitespace().map(str::parse::<u64>);
            match (words.next(), words.next(), words.next()) {
                (Some(Ok(offset)), Some(Ok(length)), None) => Ok((offset, length)),
                _ => Err(format!("line {} is {line:?}, not \"offset length\"", n + 1)),
            }
        })
        .collect()
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

    fn dali_operator(&self) -> Option<DaliOperator> {
        Some(DaliOperator::Record)
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(StreamReader::new(self.verify, self.buffer_size))
    }

    /// A stream is read front to back from one open, whatever the read type.
    fn opened_per_sample_on_demand(&self) -> bool {
        false
    }

    fn side_files(&self, key: &str, each: &mut dyn FnMut(&str)) {
        each(&index_key(key));
    }
}
