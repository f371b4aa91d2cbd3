//! HDF5 files of h5py read byte for byte, files written here read back in every layout, the
//! bytes a sample costs, damaged and truncated files, and configuration errors.

use std::path::{Path, PathBuf};

use rand::SeedableRng;

use super::dataset::{ChunkIndex, Layout};
use super::*;
use crate::config::value::Value;
use crate::config::ElementType;
use crate::storage::{scratch_dir, LocalFs, LocalOptions};

/// A reader's view of one sample: what it cost and each records dataset's bytes.
type Sample = (SampleRead, Vec<(String, Vec<u8>)>);

fn reader(verify: bool) -> Hdf5Reader {
    Hdf5Reader {
        verify,
        windows: Windows::default(),
        scratch: Scratch::default(),
        in_hand: Vec::new(),
    }
}

fn read(reader: &mut Hdf5Reader, storage: &dyn Storage, key: &str, sample: u64) -> Result<Sample> {
    let mut got = Vec::new();
    let read = reader.read_records(
        storage,
        key,
        sample,
        &mut ReadBuffer::default(),
        &mut |name, bytes| got.push((name.to_string(), bytes.to_vec())),
    )?;
    Ok((read, got))
}

fn fixture(name: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/hdf5-h5py")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn scratch(name: &str) -> (PathBuf, LocalFs) {
    let dir = scratch_dir(name);
    let storage = LocalFs::new(&dir);
    (dir, storage)
}

fn direct(dir: &Path) -> LocalFs {
    LocalFs::with_options(
        dir,
        LocalOptions {
            odirect: true,
            evict_after_read: false,
        },
    )
}

/// Element types of the fixtures.
#[derive(Debug, Clone, Copy)]
enum Kind {
    U8,
    I8,
    U16,
    I16,
    I32,
    F16,
    F32,
}

/// The bytes of `value` (an integer below 251) as `kind`.
fn encode(kind: Kind, value: u64) -> Vec<u8> {
    match kind {
        Kind::U8 | Kind::I8 => vec![value as u8],
        Kind::U16 | Kind::I16 => (value as u16).to_le_bytes().to_vec(),
        Kind::I32 => (value as i32).to_le_bytes().to_vec(),
        Kind::F32 => (value as f32).to_le_bytes().to_vec(),
        Kind::F16 => {
            // Integers below 2048 are exact in binary16: 2^e × (1 + m/1024).
            let bits = if value == 0 {
                0
            } else {
                let e = value.ilog2() as u64;
                ((e + 15) << 10) | (((value << 10) >> e) - 1024)
            };
            (bits as u16).to_le_bytes().to_vec()
        }
    }
}

/// What make_fixtures.py put in sample `sample` of dataset number `j` of shape `shape`.
fn expected(kind: Kind, shape: &[u64], j: u64, sample: u64) -> Vec<u8> {
    let per: u64 = shape[1..].iter().product();
    (sample * per..(sample + 1) * per)
        .flat_map(|i| encode(kind, (i + 10 * j) % 251))
        .collect()
}

/// A records dataset of a fixture: name, element type, shape.
type Records = (&'static str, Kind, &'static [u64]);

/// Every fixture's records datasets.
const FIXTURES: &[(&str, &[Records])] = &[
    ("dlio2_contiguous.h5", &[("records", Kind::U8, &[5, 3, 4])]),
    (
        "earliest_chunked.h5",
        &[
            ("records_0", Kind::U16, &[6, 4, 5]),
            ("records_1", Kind::I32, &[200, 2]),
        ],
    ),
    ("v108_chunked.h5", &[("records", Kind::U8, &[4, 3, 5])]),
    (
        "latest_contiguous.h5",
        &[
            ("records_0", Kind::F32, &[4, 3, 5]),
            ("records_1", Kind::F16, &[4, 3, 5]),
        ],
    ),
    (
        "latest_chunked.h5",
        &[
            ("records_0", Kind::U16, &[6, 4, 5]),
            ("records_1", Kind::I8, &[6, 4, 5]),
            ("records_2", Kind::U8, &[6, 4, 5]),
            ("records_3", Kind::I16, &[6, 4, 5]),
            ("records_4", Kind::U8, &[6, 4, 5]),
        ],
    ),
    ("latest_paged.h5", &[("records", Kind::U8, &[1100, 4])]),
    (
        "latest_lzf.h5",
        &[
            ("records_0", Kind::U8, &[4, 32, 32]),
            ("records_1", Kind::U16, &[4, 3, 5]),
            ("records_2", Kind::U8, &[4, 3, 5]),
        ],
    ),
];

#[test]
fn reads_every_sample_of_h5py_files_byte_for_byte() {
    let (dir, storage) = scratch("hdf5-fixtures");
    let odirect = direct(&dir);
    let mut reader = reader(true);
    for (file, datasets) in FIXTURES {
        storage.put(file, &fixture(file)).unwrap();
        let samples = datasets[0].2[0];
        for sample in 0..samples {
            let (cost, got) =
                read(&mut reader, &storage, file, sample).unwrap_or_else(|e| panic!("{e}"));
            let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
            let want: Vec<&str> = datasets.iter().map(|d| d.0).collect();
            assert_eq!(names, want, "{file}");
            for ((name, kind, shape), (_, bytes)) in datasets.iter().zip(&got) {
                let j = name
                    .strip_prefix("records_")
                    .map_or(0, |j| j.parse().unwrap());
                assert_eq!(
                    bytes,
                    &expected(*kind, shape, j, sample),
                    "{file} {name}[{sample}]"
                );
            }
            // O_DIRECT moves whole blocks, and the same data.
            if sample % 97 == 0 || sample + 1 == samples {
                let (direct_cost, direct_got) = read(&mut reader, &odirect, file, sample).unwrap();
                assert_eq!(direct_got, got, "{file}[{sample}] with O_DIRECT");
                assert!(direct_cost.bytes >= cost.bytes, "{file}");
            }
        }
        let error = read(&mut reader, &storage, file, samples)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("out of range") && error.contains(file),
            "{error}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// The layout of each records dataset of a file, as parsed.
fn layouts(storage: &dyn Storage, key: &str) -> (u8, Vec<(String, Layout)>) {
    let mut buf = ReadBuffer::default();
    let mut windows = Windows::default();
    let mut io = Io::new(storage, key, &mut buf, &mut windows, true);
    let root = read::superblock(&mut io).unwrap();
    let version = io.meta(8, 1, &"version").unwrap()[0];
    let links = dataset::records_links(&mut io, root).unwrap();
    let layouts = links
        .iter()
        .map(|l| {
            (
                l.name.clone(),
                dataset::dataset(&mut io, &l.name, l.address)
                    .unwrap()
                    .layout,
            )
        })
        .collect();
    (version, layouts)
}

#[test]
fn the_fixtures_cover_the_format_versions_and_indexes() {
    let (dir, storage) = scratch("hdf5-coverage");
    for (file, _) in FIXTURES {
        storage.put(file, &fixture(file)).unwrap();
    }
    let kinds = |file: &str| {
        let (version, layouts) = layouts(&storage, file);
        let kinds: Vec<String> = layouts
            .iter()
            .map(|(_, layout)| match layout {
                Layout::Compact(_) => "compact".to_string(),
                Layout::Contiguous { .. } => "contiguous".into(),
                Layout::Chunked { index, .. } => match index {
                    ChunkIndex::BTree(_) => "btree".into(),
                    ChunkIndex::Single { filtered, .. } => {
                        format!("single filtered={}", filtered.is_some())
                    }
                    ChunkIndex::Implicit(_) => "implicit".into(),
                    ChunkIndex::FixedArray(_) => "fixed array".into(),
                },
            })
            .collect();
        (version, kinds)
    };
    assert_eq!(
        kinds("dlio2_contiguous.h5"),
        (0, vec!["contiguous".to_string()])
    );
    // 200 chunks need a B-tree of two levels (a leaf holds 64 at most).
    assert_eq!(
        kinds("earliest_chunked.h5"),
        (0, vec!["btree".to_string(), "btree".into()])
    );
    assert_eq!(kinds("v108_chunked.h5"), (2, vec!["btree".to_string()]));
    assert_eq!(kinds("latest_contiguous.h5").0, 3);
    assert_eq!(
        kinds("latest_chunked.h5"),
        (
            3,
            vec![
                "fixed array".to_string(),
                "fixed array".into(),
                "single filtered=true".into(),
                "implicit".into(),
                "compact".into()
            ]
        )
    );
    assert_eq!(
        kinds("latest_paged.h5"),
        (3, vec!["fixed array".to_string()])
    );
    // Continuation blocks of both object header versions are walked: the attributes added
    // after the dataset was made are there.
    assert_eq!(
        fixture("latest_contiguous.h5")
            .windows(4)
            .filter(|w| w == b"OCHK")
            .count(),
        1
    );
    for file in ["earliest_chunked.h5", "latest_contiguous.h5"] {
        let mut buf = ReadBuffer::default();
        let mut windows = Windows::default();
        let mut io = Io::new(&storage, file, &mut buf, &mut windows, true);
        let root = read::superblock(&mut io).unwrap();
        let records = &dataset::records_links(&mut io, root).unwrap()[0];
        let mut attributes = 0;
        read::walk_header(&mut io, records.address, &"records", &mut |kind, _, _| {
            attributes += usize::from(kind == 0x0c);
            Ok(())
        })
        .unwrap();
        assert_eq!(attributes, 6, "{file}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn what_it_does_not_support_is_named() {
    let (dir, storage) = scratch("hdf5-unsupported");
    let mut reader = reader(true);
    for (file, needle) in [
        ("latest_resizable.h5", "extensible array"),
        ("latest_dense.h5", "dense storage"),
    ] {
        storage.put(file, &fixture(file)).unwrap();
        let error = read(&mut reader, &storage, file, 0)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(needle) && error.contains("does not support") && error.contains(file),
            "{error}"
        );
    }
    storage
        .put("plain.hdf5", b"just some text, not HDF5")
        .unwrap();
    let error = read(&mut reader, &storage, "plain.hdf5", 0)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("not an HDF5 file") && error.contains("plain.hdf5"),
        "{error}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

fn hdf5(records: u64, chunk_dims: &[u64], codec: Option<Codec>) -> Hdf5 {
    Hdf5 {
        records,
        chunk_dims: chunk_dims.to_vec(),
        codec,
        verify: true,
    }
}

fn encoded(format: &Hdf5, dims: &[u64], element: ElementType, seed: u64) -> Vec<u8> {
    let shape = FileShape {
        dims: dims.to_vec(),
        element,
    };
    let mut out = Encoded::default();
    format
        .encode("k", &shape, &mut SmallRng::seed_from_u64(seed), &mut out)
        .unwrap();
    out.data
}

#[test]
fn reads_back_what_it_writes_in_every_layout() {
    let (dir, storage) = scratch("hdf5-round-trip");
    let mut reader = reader(true);
    // 5 samples of 8 × 16 bytes. The writer draws random bytes in data order, so with samples
    // of whole 8-byte words every layout of the same seed holds the same samples.
    let dims = [8, 16, 5];
    let contiguous = encoded(&hdf5(1, &[], None), &dims, ElementType::Uint8, 7);
    storage.put("c.hdf5", &contiguous).unwrap();
    let mut samples = Vec::new();
    for sample in 0..5 {
        let (cost, got) = read(&mut reader, &storage, "c.hdf5", sample).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, "records_0");
        let at = cost.offset as usize;
        assert_eq!(
            got[0].1,
            &contiguous[at..at + 128],
            "the sample's bytes, in place"
        );
        // The first sample: the whole (small) file as the metadata read, then the sample; the
        // metadata is kept while the reader stays on the file, so later samples cost their bytes.
        let metadata = if sample == 0 {
            contiguous.len() as u64
        } else {
            0
        };
        assert_eq!(cost.bytes, metadata + 128);
        samples.push(got[0].1.clone());
    }
    for (key, format) in [
        ("gzip.hdf5", hdf5(1, &[], Some(Codec::Deflate(4)))),
        ("stored.hdf5", hdf5(1, &[], Some(Codec::Deflate(0)))),
        ("chunked.hdf5", hdf5(1, &[1, 8, 16], None)),
        (
            "chunked-gzip.hdf5",
            hdf5(1, &[1, 8, 16], Some(Codec::Deflate(1))),
        ),
        // Random bytes do not shrink: every chunk is stored as it is, its filter mask set.
        ("lzf.hdf5", hdf5(1, &[], Some(Codec::Lzf))),
        ("chunked-lzf.hdf5", hdf5(1, &[1, 8, 16], Some(Codec::Lzf))),
    ] {
        storage
            .put(key, &encoded(&format, &dims, ElementType::Uint8, 7))
            .unwrap();
        for (sample, want) in samples.iter().enumerate() {
            let (_, got) = read(&mut reader, &storage, key, sample as u64).unwrap();
            assert_eq!(&got[0].1, want, "{key}[{sample}]");
        }
    }

    // Three datasets of float16 in chunks that straddle samples and the edges.
    let format = hdf5(3, &[2, 1, 3, 2], Some(Codec::Deflate(4)));
    let file = encoded(&format, &[6, 4, 5, 5], ElementType::Float16, 3);
    storage.put("k3.hdf5", &file).unwrap();
    for sample in 0..5 {
        let (_, got) = read(&mut reader, &storage, "k3.hdf5", sample).unwrap();
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["records_0", "records_1", "records_2"]);
        assert!(got.iter().all(|(_, b)| b.len() == 2 * 4 * 5 * 2));
    }

    // 1500 one-sample chunks: a paged fixed array (1024 elements a page).
    let dims = [2, 4, 1500];
    let plain = encoded(&hdf5(1, &[], None), &dims, ElementType::Uint8, 9);
    let paged = encoded(
        &hdf5(1, &[], Some(Codec::Deflate(2))),
        &dims,
        ElementType::Uint8,
        9,
    );
    storage.put("plain.hdf5", &plain).unwrap();
    storage.put("paged.hdf5", &paged).unwrap();
    for sample in [0, 1, 1023, 1024, 1499] {
        let (_, want) = read(&mut reader, &storage, "plain.hdf5", sample).unwrap();
        let (_, got) = read(&mut reader, &storage, "paged.hdf5", sample).unwrap();
        assert_eq!(got, want, "sample {sample}");
    }
    let (buffered, _) = read(&mut reader, &storage, "paged.hdf5", 1499).unwrap();
    let (whole_blocks, _) = read(&mut reader, &direct(&dir), "paged.hdf5", 1499).unwrap();
    assert!(
        whole_blocks.bytes > buffered.bytes,
        "O_DIRECT reads whole blocks"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_sample_costs_its_bytes_plus_bounded_metadata() {
    let (dir, storage) = scratch("hdf5-cost");
    let mut reader = reader(true);
    // 1000 samples of 1 KiB: a 1 MB file.
    let dims = [32, 32, 1000];
    let contiguous = encoded(&hdf5(1, &[], None), &dims, ElementType::Uint8, 1);
    storage.put("c.hdf5", &contiguous).unwrap();
    let (cost, got) = read(&mut reader, &storage, "c.hdf5", 700).unwrap();
    assert_eq!(got[0].1.len(), 1024);
    // One 4 KiB read holds every header; then exactly the sample.
    assert_eq!(cost.bytes, 4096 + 1024);

    // Compressed: the fixed array's data block (1000 elements of 8 + 3 + 4 bytes) lies past the
    // first 4 KiB, so it is one more read; then the one chunk.
    let gzip = encoded(
        &hdf5(1, &[], Some(Codec::Deflate(4))),
        &dims,
        ElementType::Uint8,
        1,
    );
    storage.put("g.hdf5", &gzip).unwrap();
    let (cost, _) = read(&mut reader, &storage, "g.hdf5", 700).unwrap();
    let data_block = 14 + 1000 * 15 + 4;
    assert!(cost.bytes > 4096 + data_block, "{}", cost.bytes);
    assert!(
        cost.bytes <= 4096 + data_block + 1024 + 64,
        "{}",
        cost.bytes
    );
    assert!(cost.bytes * 50 < gzip.len() as u64);

    // Paged: the block's prefix is in the first read; then one page and the chunk.
    let paged = encoded(
        &hdf5(1, &[], Some(Codec::Deflate(4))),
        &[32, 32, 5000],
        ElementType::Uint8,
        1,
    );
    storage.put("p.hdf5", &paged).unwrap();
    let (cost, _) = read(&mut reader, &storage, "p.hdf5", 4000).unwrap();
    let page = 1024 * 15 + 4;
    assert!(cost.bytes <= 4096 + page + 1024 + 64, "{}", cost.bytes);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn truncated_files_fail_naming_the_file() {
    let (dir, storage) = scratch("hdf5-truncated");
    let mut reader = reader(true);
    for (name, format) in [
        ("contiguous.hdf5", hdf5(2, &[], None)),
        ("gzip.hdf5", hdf5(1, &[], Some(Codec::Deflate(4)))),
    ] {
        let file = encoded(&format, &[4, 4, 3], ElementType::Float32, 5);
        cut_everywhere(&mut reader, &storage, name, &file, 3);
    }
    // An h5py file (its labels' data comes last: h5py refuses it, from the superblock's end).
    let file = fixture("dlio2_contiguous.h5");
    cut_everywhere(&mut reader, &storage, "dlio2.hdf5", &file, 5);
    std::fs::remove_dir_all(dir).unwrap();
}

/// Reads every sample of `file` cut to every length: each must fail naming the file.
fn cut_everywhere(
    reader: &mut Hdf5Reader,
    storage: &LocalFs,
    name: &str,
    file: &[u8],
    samples: u64,
) {
    for len in 0..file.len() {
        storage.put(name, &file[..len]).unwrap();
        let errors: Vec<String> = (0..samples)
            .filter_map(|sample| read(reader, storage, name, sample).err())
            .map(|e| e.to_string())
            .collect();
        assert!(!errors.is_empty(), "{name} cut to {len} bytes was read");
        for error in errors {
            assert!(error.contains(name), "{error}");
        }
    }
}

#[test]
fn damaged_metadata_and_chunks_fail() {
    let (dir, storage) = scratch("hdf5-corrupt");
    let mut checking = reader(true);
    let mut trusting = reader(false);
    let spf = 3u64;
    let file = encoded(
        &hdf5(1, &[], Some(Codec::Deflate(4))),
        &[4, 4, spf],
        ElementType::Float32,
        5,
    );
    storage.put("ok.hdf5", &file).unwrap();
    let (cost, _) = read(&mut checking, &storage, "ok.hdf5", 0).unwrap();
    // Metadata ends where labels' data (before the chunks) begins.
    let metadata = cost.offset as usize - 8 * spf as usize;
    // The labels dataset's header is the last object header; the reader never opens it.
    let labels = file.windows(4).rposition(|w| w == b"OHDR").unwrap();
    let fixed_array = file.windows(4).position(|w| w == b"FAHD").unwrap();
    for at in (0..labels).chain(fixed_array..metadata) {
        let mut damaged = file.clone();
        damaged[at] ^= 0x10;
        storage.put("bad.hdf5", &damaged).unwrap();
        // Fresh readers, as a new epoch has: a reader keeps the metadata of the file in hand.
        let mut checking = reader(true);
        let mut trusting = reader(false);
        let errors: Vec<String> = (0..spf)
            .filter_map(|sample| read(&mut checking, &storage, "bad.hdf5", sample).err())
            .map(|e| e.to_string())
            .collect();
        assert!(!errors.is_empty(), "a changed byte at {at} went unseen");
        assert!(errors.iter().all(|e| e.contains("bad.hdf5")), "{errors:?}");
        // Without checksums, the structure is still checked: never a panic.
        for sample in 0..spf {
            let _ = read(&mut trusting, &storage, "bad.hdf5", sample);
        }
    }
    // A changed byte in a compressed chunk fails its zlib checksum, with or without `verify`.
    let mut damaged = file.clone();
    damaged[cost.offset as usize + 30] ^= 0x01;
    storage.put("bad.hdf5", &damaged).unwrap();
    for reader in [&mut checking, &mut trusting] {
        let error = read(reader, &storage, "bad.hdf5", 0)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("inflate") && error.contains("bad.hdf5"),
            "{error}"
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

fn config(yaml: &str) -> Config {
    Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap()
}

#[test]
fn configuration_errors_name_the_key() {
    let base = "dataset:\n  format: hdf5\n";
    let with = |extra: &str| Hdf5::for_config(&config(&format!("{base}{extra}")), true);
    let format = with("  compression: gzip\n  compression_level: 6\n").unwrap();
    assert_eq!(format.codec, Some(Codec::Deflate(6)));
    // DLIO's default level, 4 (h5py's own default too).
    assert_eq!(
        with("  compression: gzip\n").unwrap().codec,
        Some(Codec::Deflate(4))
    );
    // LZF has no level: h5py gets none.
    assert_eq!(
        with("  compression: lzf\n  compression_level: 99\n")
            .unwrap()
            .codec,
        Some(Codec::Lzf)
    );
    assert_eq!(with("").unwrap().codec, None);
    for value in ["bz2", "xz", "zip"] {
        let error = with(&format!("  compression: {value}\n")).unwrap_err();
        assert!(matches!(error, Error::Usage(_)), "{error}");
        assert!(
            error.to_string().contains(&format!(
                "workload.dataset.compression = {value} does not apply to dataset.format = hdf5"
            )) && error
                .to_string()
                .contains("valid values for hdf5 are none, gzip, lzf"),
            "{error}"
        );
    }
    for (extra, needles) in [(
        "  compression: gzip\n  compression_level: 10\n",
        ["compression_level", "10", "0 to 9"],
    )] {
        let error = with(extra).unwrap_err();
        assert!(matches!(error, Error::Usage(_)), "{error}");
        for needle in needles {
            assert!(error.to_string().contains(needle), "{error}");
        }
    }
    // Chunk shapes that do not fit the dataset fail when the file is made, as with h5py.
    let shape = FileShape {
        dims: vec![8, 8, 4],
        element: ElementType::Uint8,
    };
    let mut out = Encoded::default();
    let mut rng = SmallRng::seed_from_u64(0);
    for chunks in [vec![1, 8], vec![1, 9, 8], vec![5, 8, 8]] {
        let error = hdf5(1, &chunks, None)
            .encode("k", &shape, &mut rng, &mut out)
            .unwrap_err();
        assert!(
            matches!(error, Error::Usage(_)) && error.to_string().contains("chunk_dims"),
            "{error}"
        );
    }
}

#[test]
fn records_are_shaped_as_dlio_shapes_them() {
    let shape = |dims: &[u64]| FileShape {
        dims: dims.to_vec(),
        element: ElementType::Uint8,
    };
    let cases: &[(u64, &[u64], &[u64])] = &[
        (1, &[64, 64, 3], &[3, 64, 64]),
        (1, &[100, 7], &[7, 100]),
        (3, &[6, 4, 5, 2], &[2, 2, 4, 5]),
        // DLIO divides the first sample dimension (int(d / k)) and drops it when it is 1.
        (3, &[7, 4, 2], &[2, 2, 4]),
        (3, &[3, 4, 2], &[2, 4]),
        (1, &[1, 8, 2], &[2, 8]),
        (2, &[2], &[2]),
    ];
    for &(records, dims, want) in cases {
        let got = hdf5(records, &[], None).records_shape(&shape(dims));
        if records == 2 && dims.len() == 1 {
            assert!(matches!(got, Err(Error::Usage(_))), "{got:?}");
        } else {
            assert_eq!(got.unwrap(), want, "k={records} {dims:?}");
        }
    }
    let error = hdf5(4, &[], None)
        .records_shape(&shape(&[3, 4, 2]))
        .unwrap_err();
    assert!(error.to_string().contains("num_dset_per_record"), "{error}");
    // With gzip and no chunk shape: one sample per chunk.
    assert_eq!(
        hdf5(1, &[], Some(Codec::Deflate(4)))
            .chunks(&[3, 8, 8])
            .unwrap(),
        Some(vec![1, 8, 8])
    );
    assert_eq!(hdf5(1, &[], None).chunks(&[3, 8, 8]).unwrap(), None);
    assert_eq!(
        hdf5(1, &[2, 4, 4], Some(Codec::Deflate(1)))
            .chunks(&[3, 8, 8])
            .unwrap(),
        Some(vec![2, 4, 4])
    );
}
