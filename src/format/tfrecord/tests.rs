//! The record framing and the Example against TensorFlow's bytes, the file's layout and index,
//! the requests a stream makes (buffered, unbuffered, hopping), and damaged files.

use rand::SeedableRng;

use super::example::{example_parts, parse_example};
use super::framing::masked_crc;
use super::*;
use crate::config::{ElementType, TENSORFLOW_READ_BUFFER};
use crate::format::testing::{Counting, Request, Scratch};
use crate::format::{ReadBuffer, SampleRead};
use crate::storage::{scratch_dir, LocalFs, Storage};

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
