//! The storage requests a sample of each format costs, as docs/formats.md tabulates them: one
//! reader thread reads every sample of three files in order, as the loader hands them (each file
//! put down when the thread moves on), then goes back to the first, through a storage that records
//! every request; buffered and with O_DIRECT (which moves whole 4 KiB blocks).

use super::testing::{encode, Counting, Request, Scratch};
use super::{for_config, FileFormat, ReadBuffer};
use crate::config::value::Value;
use crate::config::Config;
use crate::dataset::Dataset;
use crate::plan::Phase;
use crate::storage::Storage;

const FILES: u64 = 3;
const SAMPLES: u64 = 4;

/// Each file's key and bytes.
type Files = Vec<(String, Vec<u8>)>;

/// What one sample cost: the storage's unit, the pass over the files, the sample and its requests.
type Check<'a> = &'a mut dyn FnMut(u64, usize, u64, &[Request]);

/// A dataset of `FILES` files of `SAMPLES` samples of `format`, with the extra dataset `keys`
/// (YAML lines indented by two spaces), written to a fresh scratch folder; its format, the files'
/// keys and their bytes.
fn dataset(format: &str, keys: &str) -> (Scratch, Box<dyn FileFormat>, Files) {
    let yaml = format!(
        "dataset:\n  format: {format}\n  num_files_train: {FILES}\n  num_files_eval: 0\n  \
         num_subfolders_train: 0\n  num_samples_per_file: {SAMPLES}\n{keys}"
    );
    let config = Config::from_tree("t", Value::from_yaml(&yaml).unwrap()).unwrap();
    let format = for_config(&config, false).unwrap();
    let data = Dataset::from_config(&config);
    let scratch = Scratch::new(&format!(
        "requests-{format_name}",
        format_name = config.dataset.format
    ));
    let mut files = Vec::new();
    for i in 0..FILES {
        let key = data.file_key(data.split(Phase::Train), i);
        let encoded = encode(format.as_ref(), &key, &data.file_shape(i), i);
        scratch.buffered.put(&key, &encoded.data).unwrap();
        for side in encoded.side_files() {
            scratch.buffered.put(&side.key, &side.bytes).unwrap();
        }
        files.push((key, encoded.data.clone()));
    }
    (scratch, format, files)
}

/// The requests of every sample, file after file (then the first file again), one reader thread;
/// for each storage view of `scratch` with its unit.
fn requests_per_sample(
    scratch: &Scratch,
    format: &dyn FileFormat,
    files: &[(String, Vec<u8>)],
    each: Check,
) {
    for (storage, unit) in scratch.both() {
        let counting = Counting::new(storage);
        let mut reader = format.reader();
        let mut buf = ReadBuffer::default();
        let order = (0..files.len()).chain([0]);
        for (pass, file) in order.enumerate() {
            for sample in 0..SAMPLES {
                let key = &files[file].0;
                let read = reader
                    .read_sample(&counting, key, sample, &mut buf)
                    .unwrap();
                let requests = counting.take();
                let fetched: u64 = requests.iter().map(fetched).sum();
                assert_eq!(
                    read.bytes, fetched,
                    "{key} sample {sample}: counted as fetched"
                );
                each(unit, pass, sample, &requests);
            }
            reader.put_down();
        }
    }
}

fn fetched(request: &Request) -> u64 {
    match request {
        Request::Range { fetched, .. } | Request::Whole { fetched, .. } => *fetched,
        Request::Size { .. } | Request::Map { .. } => 0,
    }
}

fn range(key: &str, offset: u64, len: usize, fetched: u64) -> Request {
    Request::Range {
        key: key.to_string(),
        offset,
        len,
        fetched,
    }
}

/// With O_DIRECT, the whole blocks holding `len` bytes from `offset`.
fn blocks(offset: u64, len: u64, unit: u64) -> u64 {
    (offset + len).next_multiple_of(unit) - offset / unit * unit
}

#[test]
fn whole_file_formats_read_the_file_in_one_request_per_sample() {
    for (format, keys) in [
        ("npy", "  record_length_bytes: 3000\n"),
        ("npz", "  record_length_bytes: 3000\n"),
        ("csv", "  record_length_bytes: 3000\n"),
        ("jpeg", "  record_length_bytes: 3000\n"),
        ("png", "  record_length_bytes: 3000\n"),
    ] {
        let (scratch, reader_format, files) = dataset(format, keys);
        requests_per_sample(
            &scratch,
            reader_format.as_ref(),
            &files,
            &mut |unit, pass, _, r| {
                let (key, bytes) = &files[pass % files.len()];
                let whole = Request::Whole {
                    key: key.clone(),
                    fetched: (bytes.len() as u64).next_multiple_of(unit),
                };
                assert_eq!(r, [whole], "{format}");
            },
        );
        scratch.remove();
    }
}

#[test]
fn tfrecord_reads_each_file_once_in_whole_buffers() {
    // 4 records of ~100 KiB: a file of ~400 KiB, two requests of TensorFlow's 256 KiB buffer.
    let (scratch, format, files) = dataset("tfrecord", "  record_length_bytes: 102400\n");
    let buffer = 256 * 1024;
    let mut per_pass = vec![Vec::new(); FILES as usize + 1];
    requests_per_sample(
        &scratch,
        format.as_ref(),
        &files,
        &mut |unit, pass, sample, r| {
            per_pass[pass].extend(r.iter().cloned());
            if sample == SAMPLES - 1 {
                let (key, bytes) = &files[pass % files.len()];
                let size = bytes.len() as u64;
                let expected: Vec<Request> = (0..size.div_ceil(buffer))
                    .map(|n| {
                        let at = n * buffer;
                        range(
                            key,
                            at,
                            buffer as usize,
                            (size - at).min(buffer).next_multiple_of(unit),
                        )
                    })
                    .collect();
                assert_eq!(per_pass[pass], expected, "{key}");
                per_pass[pass].clear();
            }
        },
    );
    scratch.remove();
}

#[test]
fn indexed_binary_reads_its_indexes_once_per_file_and_one_range_per_sample() {
    let (scratch, format, files) = dataset("indexed_binary", "  record_length_bytes: 4096\n");
    requests_per_sample(
        &scratch,
        format.as_ref(),
        &files,
        &mut |unit, pass, sample, r| {
            let key = &files[pass % files.len()].0;
            let index = SAMPLES * 8;
            let data = range(key, sample * 4096, 4096, blocks(sample * 4096, 4096, unit));
            if pass < FILES as usize && sample == 0 {
                let whole = |suffix: &str| {
                    let index_key = format!("{key}{suffix}");
                    range(&index_key, 0, index as usize, index.next_multiple_of(unit))
                };
                assert_eq!(r, [whole(".off.idx"), whole(".sz.idx"), data]);
            } else {
                // Later samples, and the first file again: the indexes are kept for the epoch.
                assert_eq!(r, [data]);
            }
        },
    );
    scratch.remove();
}

#[test]
fn hdf5_reads_a_file_s_metadata_once_and_one_range_per_sample() {
    let (scratch, format, files) = dataset("hdf5", "  record_length_bytes: 4096\n");
    let mut first_sample_at = 0;
    requests_per_sample(
        &scratch,
        format.as_ref(),
        &files,
        &mut |unit, pass, sample, r| {
            let key = &files[pass % files.len()].0;
            let (metadata, data) = r.split_at(r.len() - 1);
            let Request::Range { offset, .. } = data[0] else {
                panic!("{data:?}");
            };
            if sample == 0 {
                first_sample_at = offset;
            }
            let at = first_sample_at + sample * 4096;
            assert_eq!(data, [range(key, at, 4096, blocks(at, 4096, unit))]);
            if pass < FILES as usize && sample == 0 {
                // h5py's metadata of a file it writes: superblock, root group and dataset headers,
                // all in the file's first 4 KiB, one request.
                assert_eq!(metadata.len(), 1, "{metadata:?}");
                assert!(
                    matches!(
                        metadata[0],
                        Request::Range {
                            offset: 0,
                            fetched: 4096,
                            ..
                        }
                    ),
                    "{metadata:?}"
                );
            } else {
                // Kept while the file is held, the first file's too when the thread comes back.
                assert!(metadata.is_empty(), "{key} sample {sample}: {metadata:?}");
            }
        },
    );
    scratch.remove();
}

#[test]
fn parquet_reads_the_footer_once_per_file_and_a_row_group_s_chunks_once() {
    let columns = "  parquet:\n    row_group_size: 2\n    columns:\n      \
        - {name: a, dtype: float32, read: true}\n      \
        - {name: b, dtype: float64, read: false}\n      \
        - {name: c, dtype: int8, read: true}\n      \
        - {name: d, dtype: float16, read: true}\n";
    let (scratch, format, files) = dataset("parquet", columns);
    requests_per_sample(&scratch, format.as_ref(), &files, &mut |_, _, sample, r| {
        let sizes = r
            .iter()
            .filter(|q| matches!(q, Request::Size { .. }))
            .count();
        let ranges = r.len() - sizes;
        match sample {
            // The size (held: no open), the footer, then the row group's chunks of a, c and d
            // as one range: b's chunk between them is a hole under Arrow's 8 KiB, fetched too.
            0 => assert_eq!((sizes, ranges), (1, 2), "{r:?}"),
            // The second row group: its one range.
            2 => assert_eq!((sizes, ranges), (0, 1), "{r:?}"),
            // Rows of the row group in hand cost nothing more.
            _ => assert!(r.is_empty(), "{r:?}"),
        }
    });
    scratch.remove();
}
