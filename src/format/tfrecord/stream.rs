//! The stream reader: a reader thread's place in the file in hand, kept from sample to sample as
//! `tf.data.TFRecordDataset` keeps it, records found by their framing through a buffer of
//! `buffer_size` bytes (or unbuffered), samples that are not next reached by hopping over records.
//! Apart from the format, which only makes one for each reader thread: the reading side is all
//! here, with the state it keeps between samples.

use super::example::parse_example;
use super::framing::{masked_crc, FRAMING, HEADER};
use crate::error::Result;
use crate::format::{cannot_read, corrupt, ReadBuffer, SampleRead, SampleReader};
use crate::storage::{IoBuffer, RangeRead, Storage};

/// One reader thread's stream over the file in hand, read as TensorFlow's `RecordReader` reads it:
/// through a buffer of `buffer_size` bytes refilled by one request at the place where the last one
/// ended, records parsed out of it; with `buffer_size` 0, unbuffered, one request for a record's
/// header and one for its payload and CRC.
pub(super) struct StreamReader {
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
    /// A stream with no file in hand; `buffer_size` 0 reads unbuffered.
    pub(super) fn new(verify: bool, buffer_size: usize) -> StreamReader {
        StreamReader {
            verify,
            buffer_size,
            place: None,
            chunk: IoBuffer::new(),
            window: RangeRead::default(),
            record: Vec::new(),
        }
    }

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
