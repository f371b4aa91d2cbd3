//! End-to-end tests of the data formats: every shipped training workload runs at reduced size
//! (each format through its real reader), files made by Python DLIO are read, files dlio-rs makes
//! open with the Python tools users know, and a damaged file is an error naming it.

use std::path::Path;

use serde_json::Value;

use crate::common::*;

/// Words that generate and train one short epoch with no compute, data and output in `tmp`.
fn quick(tmp: &Scratch, name: &str) -> Vec<String> {
    strings(&[
        "++workload.workflow.generate_data=True",
        "++workload.workflow.checkpoint=False",
        "++workload.train.computation_time=0",
        "++workload.train.epochs=1",
        "++workload.evaluation.eval_time=0",
        &format!(
            "++workload.dataset.data_folder={}",
            tmp.s(&format!("data-{name}"))
        ),
        &format!("++hydra.run.dir={}", tmp.s(&format!("out-{name}"))),
    ])
}

/// Reads of the first training epoch: (samples, bytes).
fn first_epoch_reads(out: &Path) -> (u64, u64) {
    let report = read_json(&out.join("report.json"));
    let epoch = at(&report, "/epochs/0");
    let count = |key: &str| {
        at(epoch, key)
            .as_u64()
            .unwrap_or_else(|| panic!("{key}: {epoch}"))
    };
    (count("/samples_read"), count("/bytes_read"))
}

/// Five float32 list columns shaped like flux's, 1/512 of their size.
const SMALL_FLUX_COLUMNS: &str = "++workload.dataset.parquet.columns=[\
    {name: t5_encodings, dtype: float32, size: 1024}, {name: clip_encodings, dtype: float32, size: 8}, \
    {name: mean, dtype: float32, size: 16}, {name: logvar, dtype: float32, size: 16}, \
    {name: timestamp, dtype: float32, size: 7}]";

#[test]
fn every_shipped_training_workload_runs_at_reduced_size() {
    let tmp = Scratch::new("workloads");
    let workloads: &[(&str, &[&str])] = &[
        (
            "unet3d_a100",
            &[
                "++workload.dataset.num_files_train=28",
                "++workload.dataset.record_length_bytes=65536",
                "++workload.dataset.record_length_bytes_stdev=16384",
            ],
        ),
        (
            "resnet50_a100",
            &[
                "++workload.dataset.num_files_train=4",
                "++workload.dataset.record_length_bytes=1024",
            ],
        ),
        (
            "cosmoflow_a100",
            &[
                "++workload.dataset.num_files_train=16",
                "++workload.dataset.record_length_bytes=16384",
                "++workload.dataset.record_length_bytes_stdev=1024",
            ],
        ),
        (
            "retinanet_b200",
            &[
                "++workload.dataset.num_files_train=96",
                "++workload.dataset.record_length_bytes=16384",
            ],
        ),
        (
            "flux_b200",
            &[
                "++workload.dataset.num_files_train=4",
                "++workload.dataset.num_samples_per_file=48",
                SMALL_FLUX_COLUMNS,
            ],
        ),
        (
            "dlrm_b200",
            &[
                "++workload.dataset.num_files_train=2",
                "++workload.dataset.num_samples_per_file=12288",
                "++workload.reader.batch_size=4096",
            ],
        ),
        (
            "dlrm",
            &[
                "++workload.dataset.num_samples_per_file=64",
                "++workload.dataset.record_length_bytes=65536",
            ],
        ),
        (
            "bert_v100",
            &[
                "++workload.dataset.num_files_train=4",
                "++workload.dataset.num_samples_per_file=1000",
                "++workload.train.total_training_steps=20",
            ],
        ),
        (
            "megatron_deepspeed",
            &[
                "++workload.dataset.num_samples_per_file=4096",
                "++workload.train.total_training_steps=50",
            ],
        ),
        ("default", &[]),
    ];
    for (name, overrides) in workloads {
        let mut words = vec![format!("workload={name}")];
        words.extend(quick(&tmp, name));
        words.extend(strings(overrides));
        run_quiet(&tmp.path, 2, &words).ok();
        let (samples, bytes) = first_epoch_reads(&tmp.join(format!("out-{name}")));
        assert!(samples > 0, "{name}: no sample read");
        assert!(
            bytes >= samples,
            "{name}: {bytes} bytes for {samples} samples"
        );
    }
}

/// DLIO 2.0's files (tests/fixtures/dlio, made with the PyPI package; see the README there): 2
/// files of 32 × 32 uint8 samples, 2 per file (1 per image file).
#[test]
fn files_made_by_python_dlio_are_read() {
    let tmp = Scratch::new("dlio-fixtures");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dlio");
    for format in [
        "npz",
        "npy",
        "hdf5",
        "tfrecord",
        "jpeg",
        "png",
        "csv",
        "indexed_binary",
    ] {
        let supported = dlio_rs::config::Format::SUPPORTED
            .iter()
            .any(|f| f.to_string() == format);
        if !supported {
            continue;
        }
        let per_file = if matches!(format, "jpeg" | "png") {
            1
        } else {
            2
        };
        for verify in [false, true] {
            let out = tmp.join(format!("out-{format}-{verify}"));
            let mut words = strings(&[
                "workload=default",
                &format!("++workload.dataset.format={format}"),
                &format!(
                    "++workload.dataset.data_folder={}",
                    fixtures.join(format).display()
                ),
                "++workload.dataset.num_files_train=2",
                "++workload.dataset.num_files_eval=0",
                "++workload.dataset.num_subfolders_train=0",
                &format!("++workload.dataset.num_samples_per_file={per_file}"),
                "++workload.dataset.record_length_bytes=1024",
                "++workload.workflow.evaluation=False",
                "++workload.train.computation_time=0",
                "++workload.train.epochs=1",
                "++workload.reader.batch_size=1",
                &format!("++hydra.run.dir={}", out.display()),
            ]);
            if verify {
                words.insert(0, "--verify".into());
            }
            run_quiet(&tmp.path, 1, &words).ok();
            let (samples, bytes) = first_epoch_reads(&out);
            assert_eq!(samples, 2 * per_file, "{format}");
            // A JPEG of 32 × 32 noise is smaller than its pixels; every other file holds them all.
            let least = if format == "jpeg" { 1 } else { 1024 };
            assert!(
                bytes >= samples * least,
                "{format}: {bytes} bytes for {samples} samples"
            );
        }
    }
}

/// The Python check of a format, and the JSON of what it should find.
fn python_check(format: &str) -> Option<(&'static str, Value)> {
    let expect = |json: &str| serde_json::from_str(json).unwrap();
    Some(match format {
        "npz" | "npy" => return None, // tests/cli.rs checks them with numpy
        "indexed_binary" | "mmap_indexed_binary" => (
            "check_indexed_binary.py",
            expect(r#"{"files": 3, "samples_per_file": 4, "sample_bytes": 1024}"#),
        ),
        "tfrecord" => (
            "check_tfrecord.py",
            expect(r#"{"files": 3, "samples_per_file": 4, "dims": [32, 32], "dtype": "uint8"}"#),
        ),
        "csv" => (
            "check_csv.py",
            expect(r#"{"files": 3, "samples_per_file": 4, "dims": [32, 32], "dtype": "uint8"}"#),
        ),
        "hdf5" => (
            "check_hdf5.py",
            expect(r#"{"files": 3, "samples_per_file": 4, "dims": [32, 32], "dtype": "uint8"}"#),
        ),
        "parquet" => (
            "check_parquet.py",
            expect(r#"{"files": 3, "samples_per_file": 4, "row_group_size": 1024}"#),
        ),
        "png" | "jpeg" => (
            "check_images.py",
            serde_json::json!({"format": format, "files": 3, "dims": [32, 32]}),
        ),
        _ => return None,
    })
}

#[test]
fn files_dlio_rs_makes_open_with_the_python_tools() {
    let tmp = Scratch::new("python-tools");
    for format in dlio_rs::config::Format::SUPPORTED {
        let format = format.to_string();
        let Some((script, expect)) = python_check(&format) else {
            continue;
        };
        let data = tmp.join(format!("data-{format}"));
        let mut words = quick(&tmp, &format);
        words.extend(strings(&[
            "workload=default",
            "++workload.workflow.train=False",
            &format!("++workload.dataset.format={format}"),
            "++workload.dataset.num_files_train=3",
            "++workload.dataset.num_files_eval=0",
            "++workload.dataset.num_subfolders_train=0",
            "++workload.dataset.num_samples_per_file=4",
            "++workload.dataset.record_length_bytes=1024",
        ]));
        run_quiet(&tmp.path, 1, &words).ok();
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/python")
            .join(script);
        let out = std::process::Command::new("python3")
            .arg(&script)
            .arg(&data)
            .arg(expect.to_string())
            .output()
            .expect("python3 runs (CI installs it)");
        assert!(
            out.status.success(),
            "{format}: {} failed\n{}{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Runs a script of tests/python with `args`; it must pass.
fn python_passes(script: &str, args: &[String]) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = std::process::Command::new("python3")
        .arg(&script)
        .args(args)
        .output()
        .expect("python3 runs (CI installs it)");
    assert!(
        out.status.success(),
        "{} {args:?} failed\n{}{}",
        script.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every compression DLIO's generators apply, with real codecs: the files open with Python's
/// tools (h5py with its gzip and LZF filters, numpy and zipfile, pandas with the method and the
/// codec's own module), and one run generates them and trains on them, reading every sample (the
/// whole compressed file for each npz and csv sample).
#[test]
fn compressed_datasets_open_with_the_python_tools_and_train() {
    let tmp = Scratch::new("compressed");
    let (files, per_file) = (3u64, 4u64);
    let cases = [
        ("hdf5", "gzip"),
        ("hdf5", "lzf"),
        ("npz", "zip"),
        ("csv", "gzip"),
        ("csv", "bz2"),
        ("csv", "zip"),
        ("csv", "xz"),
    ];
    for (format, compression) in cases {
        let name = format!("{format}-{compression}");
        let mut words = quick(&tmp, &name);
        words.extend(strings(&[
            "workload=default",
            &format!("++workload.dataset.format={format}"),
            &format!("++workload.dataset.compression={compression}"),
            "++workload.dataset.compression_level=6",
            &format!("++workload.dataset.num_files_train={files}"),
            "++workload.dataset.num_files_eval=0",
            "++workload.dataset.num_subfolders_train=0",
            &format!("++workload.dataset.num_samples_per_file={per_file}"),
            "++workload.dataset.record_length_bytes=1024",
            "++workload.workflow.evaluation=False",
            "++workload.reader.batch_size=1",
        ]));
        run_quiet(&tmp.path, 1, &words).ok();
        let (samples, bytes) = first_epoch_reads(&tmp.join(format!("out-{name}")));
        assert_eq!(samples, files * per_file, "{name}");
        let data = tmp.join(format!("data-{name}"));
        let train = data.join("train");
        let sizes: u64 = std::fs::read_dir(&train)
            .unwrap()
            .map(|entry| entry.unwrap().metadata().unwrap().len())
            .sum();
        let expect = |extra: Value| {
            let mut expect = serde_json::json!({
                "files": files, "samples_per_file": per_file, "dims": [32, 32], "dtype": "uint8"
            });
            expect
                .as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            vec![data.display().to_string(), expect.to_string()]
        };
        match format {
            "hdf5" => {
                // The level is DLIO's compression_level for gzip; LZF takes none.
                let level = if compression == "gzip" {
                    serde_json::json!(6)
                } else {
                    Value::Null
                };
                python_passes(
                    "check_hdf5.py",
                    &expect(serde_json::json!({
                        "compression": compression, "compression_level": level,
                        "chunks": [1, 32, 32]
                    })),
                );
            }
            "npz" => {
                assert_eq!(bytes, sizes * per_file, "{name}: the whole file per sample");
                let args = format!(
                    "{} --format npz --files {files} --samples {per_file} --dims 32,32 \
                     --dtype uint8 --compressed",
                    data.display()
                );
                python_passes(
                    "check_numpy.py",
                    &strings(&args.split(' ').collect::<Vec<_>>()),
                );
            }
            _ => {
                assert_eq!(bytes, sizes * per_file, "{name}: the whole file per sample");
                // Every row is the same record: the codecs shrink the text.
                assert!(sizes < files * per_file * 1024, "{name}: {sizes} bytes");
                python_passes(
                    "check_csv.py",
                    &expect(serde_json::json!({"compression": compression})),
                );
            }
        }
    }
}

/// A compression the format cannot apply stops the run before it starts (exit 2), naming the
/// setting and what the format takes: h5py has no bz2, xz or zip filter, pandas no lzf method,
/// and DLIO's other generators ignore the setting.
#[test]
fn a_compression_the_format_cannot_apply_is_a_usage_error() {
    let tmp = Scratch::new("compression-refused");
    for (format, compression, valid) in [
        ("hdf5", "bz2", "none, gzip, lzf"),
        ("hdf5", "xz", "none, gzip, lzf"),
        ("hdf5", "zip", "none, gzip, lzf"),
        ("csv", "lzf", "none, gzip, bz2, zip, xz"),
        ("npz", "gzip", "none, zip"),
        ("npy", "gzip", "none"),
        ("tfrecord", "zip", "none"),
    ] {
        let mut words = quick(&tmp, format);
        words.extend(strings(&[
            "workload=default",
            &format!("++workload.dataset.format={format}"),
            &format!("++workload.dataset.compression={compression}"),
        ]));
        run_quiet(&tmp.path, 1, &words).fails(2).says(&[
            &format!(
                "workload.dataset.compression = {compression} does not apply to dataset.format = {format}"
            ),
            &format!("valid values for {format} are {valid}"),
        ]);
        assert!(
            !tmp.join(format!("data-{format}")).exists(),
            "{format}: nothing written"
        );
    }
}

/// A file cut in half: the run fails (exit 1) naming it, for every format that reads storage.
#[test]
fn a_truncated_file_fails_the_run_naming_it() {
    let tmp = Scratch::new("truncated");
    for format in dlio_rs::config::Format::SUPPORTED {
        if *format == dlio_rs::config::Format::Synthetic {
            continue;
        }
        let format = format.to_string();
        let mut words = quick(&tmp, &format);
        words.extend(strings(&[
            "workload=default",
            "++workload.workflow.train=False",
            &format!("++workload.dataset.format={format}"),
            "++workload.dataset.num_files_train=2",
            "++workload.dataset.num_files_eval=0",
            "++workload.dataset.num_subfolders_train=0",
            "++workload.dataset.num_samples_per_file=2",
            "++workload.dataset.record_length_bytes=4096",
        ]));
        run_quiet(&tmp.path, 1, &words).ok();
        let victim = tmp.join(format!("data-{format}/train/img_1_of_2.{format}"));
        let bytes = std::fs::read(&victim).unwrap();
        std::fs::write(&victim, &bytes[..bytes.len() / 2]).unwrap();
        let train = with(
            &words,
            &[
                "++workload.workflow.generate_data=False",
                "++workload.workflow.train=True",
                "++workload.workflow.evaluation=False",
            ],
        );
        run_quiet(&tmp.path, 1, &train)
            .fails(1)
            .says(&[&format!("img_1_of_2.{format}")]);
    }
}

/// TFRecord with several reader threads per rank: each file is streamed by one thread from its
/// first record to its last, as TensorFlow's parallel reads stream each file they interleave.
/// Unbuffered (`transfer_size: 0`), an epoch reads exactly its records (16 framing bytes + payload
/// each): not one record header read to skip records another thread took. Only when a rank's files
/// do not deal evenly to its threads does a thread borrow another's last records, walking that
/// file's headers once to reach them. With TensorFlow's buffer (the default), an epoch whose files
/// deal evenly reads each file exactly once, in whole buffers.
#[test]
fn tfrecord_files_are_each_streamed_by_one_reader_thread() {
    let tmp = Scratch::new("tfrecord-lanes");
    let (ranks, per_file, batch, epochs) = (2u64, 8u64, 4u64, 2u64);
    let tfrecord = [
        "++workload.dataset.format=tfrecord",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.workflow.evaluation=False",
        "++workload.reader.file_shuffle=seed",
        "++workload.reader.transfer_size=0",
    ];
    // (files, threads, headers walked per rank and epoch). 12 files give each rank 6, dealt evenly
    // to 2 or 3 threads. 10 give each rank 5: thread 0 holds 3 files (24 records) and thread 1
    // holds 2 (16), but each takes 5 batches (20); thread 1 borrows the last 4 records of thread
    // 0's last file, walking its first 4 headers to reach them.
    for (files, threads, walked) in [(12u64, 2u64, 0u64), (12, 3, 0), (10, 2, 4)] {
        let data = tmp.join(format!("data-{files}"));
        let shape = Shape {
            files,
            samples_per_file: per_file,
            batch,
            threads,
            epochs,
        };
        let out = tmp.join(format!("out-{files}-{threads}"));
        let words = with(&traced_words(&data, &out, &shape, &[]), &tfrecord);
        if !data.exists() {
            generate_for(&tmp.path, &words);
        }
        let size = |i: u64| {
            let file = data.join(format!("train/img_{i:02}_of_{files}.tfrecord"));
            std::fs::metadata(&file).unwrap().len()
        };
        let record = size(0) / per_file;
        assert!((0..files).all(|i| size(i) == record * per_file));

        run_quiet(&tmp.path, ranks as usize, &words).ok();
        let context = format!("{files} files, {threads} threads");
        let report = read_json(&out.join("report.json"));
        let epoch_reads = |epoch: u64| {
            let e = at(&report, &format!("/epochs/{epoch}"));
            (
                at(e, "/samples_read").as_u64().unwrap(),
                at(e, "/bytes_read").as_u64().unwrap(),
            )
        };
        for epoch in 0..epochs {
            let (samples, bytes) = epoch_reads(epoch);
            assert_eq!(samples, files * per_file, "{context}");
            assert_eq!(
                bytes,
                samples * record + ranks * walked * 12,
                "{context}: bytes beyond the records read"
            );
        }
        let mut total_walked = 0;
        for rank in 0..ranks {
            let trace = std::fs::read_to_string(out.join(format!("trace/{rank}.csv"))).unwrap();
            // Per epoch, thread and file: the next record the thread must read there.
            let mut streams = std::collections::HashMap::new();
            let mut threads_of_file = std::collections::HashMap::new();
            for row in trace.lines().skip(1) {
                let cols: Vec<&str> = row.split(',').collect();
                let (epoch, thread, file) = (cols[0], cols[4], cols[5]);
                let [sample, offset, length] = [6, 7, 8].map(|c| cols[c].parse::<u64>().unwrap());
                assert_eq!(offset, sample * record, "{context}: {row}");
                let key = (epoch, thread, file);
                // A thread entering a file walks the headers before the record it wants.
                let headers = if streams.contains_key(&key) {
                    0
                } else {
                    sample
                };
                let next = streams.entry(key).or_insert(sample);
                assert_eq!(*next, sample, "{context}: records out of order: {row}");
                assert_eq!(length, record + 12 * headers, "{context}: {row}");
                total_walked += headers;
                *next += 1;
                threads_of_file
                    .entry((epoch, file))
                    .or_insert_with(std::collections::HashSet::new)
                    .insert(thread);
            }
            assert_eq!(threads_of_file.len() as u64, epochs * files / ranks);
            if walked == 0 {
                assert!(threads_of_file.values().all(|t| t.len() == 1), "{context}");
            }
        }
        assert_eq!(total_walked, epochs * ranks * walked, "{context}");
        let (code, audit, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{audit}\n{}", ran.context());

        if walked == 0 {
            let buffered = tmp.join(format!("out-{files}-{threads}-buffered"));
            let words = with(
                &traced_words(&data, &buffered, &shape, &[]),
                &tfrecord[..tfrecord.len() - 1],
            );
            run_quiet(&tmp.path, ranks as usize, &words).ok();
            let report = read_json(&buffered.join("report.json"));
            for epoch in 0..epochs {
                let e = at(&report, &format!("/epochs/{epoch}"));
                let bytes = at(e, "/bytes_read").as_u64().unwrap();
                assert_eq!(bytes, files * size(0), "{context}, buffered");
            }
        }
    }
}

/// TFRecord under the TensorFlow loader reads as DLIO's `tf.data` pipeline does: rank r's shard
/// is files r, r + ranks, … of the sorted names (a file shuffle is undone, as `list_files`
/// sorts); each file is streamed in order by its own worker (3 × read_threads of them); every
/// read is traced under the step it is pulled in for (the first step pulls the shuffle buffer's
/// fill); each step counts the records it pulled, so an epoch reads `steps × batch +
/// shuffle_size` of them, plus what the buffers read ahead, which the audit accepts and reports.
#[test]
fn tfrecord_under_the_tensorflow_loader_reads_as_tf_data_does() {
    let tmp = Scratch::new("tfrecord-tf-data");
    let (ranks, files, per_file, batch, threads) = (2u64, 12u64, 8u64, 4u64, 2u64);
    let (shuffle, steps) = (6u64, 5u64);
    let shape = Shape {
        files,
        samples_per_file: per_file,
        batch,
        threads,
        epochs: 2,
    };
    let data = tmp.join("data");
    let out = tmp.join("out");
    let words = with(
        &traced_words(&data, &out, &shape, &[]),
        &[
            "++workload.dataset.format=tfrecord",
            "++workload.dataset.num_subfolders_train=0",
            "++workload.workflow.evaluation=False",
            "++workload.reader.data_loader=tensorflow",
            "++workload.reader.file_shuffle=seed",
            "++workload.reader.sample_shuffle=seed",
            "++workload.reader.transfer_size=0",
            "++workload.reader.prefetch_size=1",
            &format!("++workload.reader.shuffle_size={shuffle}"),
            &format!("++workload.train.total_training_steps={steps}"),
        ],
    );
    generate_for(&tmp.path, &words);
    let record = std::fs::metadata(data.join(format!("train/img_00_of_{files}.tfrecord")))
        .unwrap()
        .len()
        / per_file;
    run_quiet(&tmp.path, ranks as usize, &words).ok();
    let report = read_json(&out.join("report.json"));
    // Each rank's first step pulls batch + shuffle records, the next ones batch each.
    let pulled = ranks * (steps * batch + shuffle);
    for epoch in 0..2 {
        let e = at(&report, &format!("/epochs/{epoch}"));
        assert_eq!(at(e, "/samples_read").as_u64(), Some(pulled));
        assert_eq!(at(e, "/bytes_read").as_u64(), Some(pulled * record));
    }
    let shard_files = files / ranks;
    let workers = (3 * threads).min(shard_files);
    let mut read_ahead = 0;
    for rank in 0..ranks {
        let trace = std::fs::read_to_string(out.join(format!("trace/{rank}.csv"))).unwrap();
        let mut next = std::collections::HashMap::new();
        let mut rows = 0;
        for row in trace.lines().skip(1) {
            let cols: Vec<&str> = row.split(',').collect();
            let (epoch, step, thread) = (cols[0], cols[2], cols[4]);
            let name = cols[5];
            let sample: u64 = cols[6].parse().unwrap();
            let file: u64 = name
                .strip_prefix("train/img_")
                .and_then(|n| n.split('_').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("{row}"));
            assert_eq!(file % ranks, rank, "{row}: another rank's file");
            let in_shard = file / ranks;
            assert_eq!(
                thread,
                (in_shard % workers).to_string(),
                "{row}: not its worker"
            );
            let expected = next.entry((epoch.to_string(), file)).or_insert(0);
            assert_eq!(sample, *expected, "{row}: out of order");
            *expected += 1;
            // The cycle of 2 files, one record of each in turn (6 files deal evenly).
            let position = (in_shard / threads * per_file + sample) * threads + in_shard % threads;
            let pulled_for = position.saturating_sub(shuffle) / batch + 1;
            assert_eq!(
                step,
                pulled_for.to_string(),
                "{row}: traced under another step"
            );
            if pulled_for > steps {
                read_ahead += 1;
            }
            rows += 1;
        }
        assert!(
            rows >= 2 * (steps * batch + shuffle),
            "rank {rank}: {rows} reads"
        );
    }
    let (code, audit, ran) = audit(&tmp.path, &out);
    assert_eq!(code, Some(0), "{audit}\n{}", ran.context());
    let audited: u64 = at(&audit, "/phases")
        .as_array()
        .unwrap()
        .iter()
        .map(|p| at(p, "/read_ahead").as_u64().unwrap())
        .sum();
    // Past the steps' records: the shuffle fill of the last steps, and what the buffers read ahead.
    assert_eq!(audited, read_ahead + 2 * ranks * shuffle);
}

/// Every local format reads from storage, not from the page cache, under the options that make it
/// (validity): with `page_cache: evict_after_read` every epoch's bytes come from the device (the
/// kernel's counters), the first one right after generation included, and with `odirect: True`
/// every read is an aligned direct read that leaves nothing in the cache. The data lives on the build's disk (never tmpfs), so the kernel
/// counts reads.
#[test]
fn every_format_reads_from_storage_under_the_cache_options() {
    let tmp = Scratch::new_in(env!("CARGO_TARGET_TMPDIR"), "format-cache");
    let formats: &[(&str, &[&str])] = &[
        ("npy", &[]),
        ("npz", &[]),
        ("hdf5", &[]),
        ("tfrecord", &[]),
        ("csv", &[]),
        ("jpeg", &[]),
        ("png", &[]),
        ("indexed_binary", &[]),
        ("mmap_indexed_binary", &[]),
        (
            "parquet",
            &["++workload.dataset.parquet.columns=[{name: a, dtype: float32, size: 16384}]"],
        ),
    ];
    let shape = Shape {
        files: 8,
        samples_per_file: 4,
        batch: 2,
        // One reader thread: two threads reading the same file at once share its pages, which
        // the report rightly counts as served by the cache.
        threads: 1,
        epochs: 2,
    };
    for (format, extra) in formats {
        let data = tmp.join(format!("data-{format}"));
        let mut settings = vec![
            format!("++workload.dataset.format={format}"),
            "++workload.dataset.record_length_bytes=65536".to_string(),
            "++workload.dataset.num_subfolders_train=0".to_string(),
            "++workload.workflow.evaluation=False".to_string(),
        ];
        settings.extend(extra.iter().map(|s| s.to_string()));
        let settings: Vec<&str> = settings.iter().map(String::as_str).collect();
        generate_for(
            &tmp.path,
            &traced_words(&data, &tmp.join("gen"), &shape, &settings),
        );
        let mut options = vec![("evict", "++workload.reader.page_cache=evict_after_read")];
        if *format != "mmap_indexed_binary" {
            options.push(("odirect", "++workload.reader.odirect=True"));
        }
        for (name, option) in options {
            let out = tmp.join(format!("{format}-{name}"));
            let mut words = settings.clone();
            words.push(option);
            run_quiet(&tmp.path, 1, &traced_words(&data, &out, &shape, &words)).ok();
            let report = read_json(&out.join("report.json"));
            let epochs = at(&report, "/epochs").as_array().unwrap();
            assert_eq!(epochs.len(), 2, "{format} {name}");
            // The evicting run comes right after the generation, which left its pages cached:
            // its first epoch reads the storage all the same.
            for (n, epoch) in epochs.iter().enumerate() {
                let read = int(epoch, "/bytes_read");
                let from_storage = int(epoch, "/bytes_from_storage");
                let cached = num(epoch, "/cache_served_fraction");
                assert!(read > 0, "{format} {name}: nothing read");
                assert!(
                    from_storage as f64 >= 0.95 * read as f64 && cached <= 0.05,
                    "{format} {name}: epoch {} read {read} bytes, {from_storage} from storage, \
                     {cached} served by the cache",
                    n + 1
                );
            }
        }
    }
}

/// How often a reader thread opens a file, under strace, for each `reader.read_type`
/// (here samples are shuffled across files, so threads move from file to file and back):
/// - `memory`: once per epoch, as the frameworks' datasets keep their files: the `openat`s of
///   each data file equal the (epoch, thread) pairs whose trace rows read it;
/// - `on_demand` (DLIO's default): once per sample, as DLIO's `read_index` opens and closes the
///   file around each one, for the formats whose readers do (hdf5 then reads its metadata again
///   with every sample); tfrecord (a stream) and parquet (DLIO's fork keeps its last file open)
///   as under `memory`.
///
/// Each index file of indexed binary is opened once per (epoch, thread) either way (read whole
/// once, then kept, as DLIO loads its indexes once), and the DALI index of TFRecord never
/// (TensorFlow does not read it).
#[test]
fn a_reader_thread_opens_files_as_the_read_type_says() {
    let tmp = Scratch::new("opens");
    let shape = Shape {
        files: 6,
        samples_per_file: 4,
        batch: 4,
        threads: 2,
        epochs: 2,
    };
    for format in ["tfrecord", "hdf5", "indexed_binary", "parquet", "npz"] {
        let data = tmp.join(format!("data-{format}"));
        let format_word = format!("++workload.dataset.format={format}");
        for read_type in ["memory", "on_demand"] {
            let out = tmp.join(format!("out-{format}-{read_type}"));
            let read_type_word = format!("++workload.reader.read_type={read_type}");
            let words = traced_words(
                &data,
                &out,
                &shape,
                &[
                    &format_word,
                    &read_type_word,
                    "++workload.framework=pytorch",
                    "++workload.reader.data_loader=pytorch",
                    "++workload.reader.file_shuffle=seed",
                    "++workload.reader.sample_shuffle=seed",
                    "++workload.workflow.evaluation=False",
                ],
            );
            if read_type == "memory" {
                generate_for(&tmp.path, &words);
            }
            let per_sample = read_type == "on_demand" && !["tfrecord", "parquet"].contains(&format);
            check_opens(&tmp, &words, &out, format, read_type, per_sample, &shape);
        }
    }
}

/// Runs `words` under strace and checks the data files' `openat`s against the trace's rows:
/// one per row (`per_sample`) or one per (epoch, thread) that read the file.
fn check_opens(
    tmp: &Scratch,
    words: &[String],
    out: &Path,
    format: &str,
    read_type: &str,
    per_sample: bool,
    shape: &Shape,
) {
    let calls = tmp.join(format!("openat-{format}-{read_type}.txt"));
    let mut args = strings(&["-f", "-qq", "-e", "trace=openat", "-o"]);
    args.push(calls.display().to_string());
    args.extend(strings(&[DLIO_RS, "run", "-q", "--accelerators", "1"]));
    args.extend(words.iter().cloned());
    launch("strace", &tmp.path, &args, &[]).ok();

    // Successful opens, by file name.
    let mut opens = std::collections::HashMap::<String, u64>::new();
    for call in std::fs::read_to_string(&calls).unwrap().lines() {
        let Some((_, rest)) = call.split_once("openat(") else {
            continue;
        };
        let path = rest.split('"').nth(1).unwrap_or_default();
        if call.contains(" = -1 ") || !path.contains("img_") {
            continue;
        }
        let name = path.rsplit('/').next().unwrap().to_string();
        *opens.entry(name).or_default() += 1;
    }
    // (epoch, thread) pairs that read each file, and its rows' lengths by pair.
    let trace = std::fs::read_to_string(out.join("trace/0.csv")).unwrap();
    let header: Vec<&str> = trace.lines().next().unwrap().split(',').collect();
    let column = |name: &str| header.iter().position(|c| *c == name).unwrap();
    let (epoch, thread, file, length) = (
        column("epoch"),
        column("thread"),
        column("file"),
        column("length"),
    );
    let mut readers =
        std::collections::BTreeMap::<String, std::collections::BTreeMap<_, Vec<u64>>>::new();
    for row in trace.lines().skip(1) {
        let cols: Vec<&str> = row.split(',').collect();
        let name = cols[file].rsplit('/').next().unwrap().to_string();
        readers
            .entry(name)
            .or_default()
            .entry((cols[epoch].to_string(), cols[thread].to_string()))
            .or_default()
            .push(cols[length].parse().unwrap());
    }
    let context = format!("{format}, read_type {read_type}");
    assert_eq!(
        readers.len() as u64,
        shape.files,
        "{context}: every file read"
    );
    for (name, pairs) in &readers {
        let rows: u64 = pairs.values().map(|rows| rows.len() as u64).sum();
        let expected = if per_sample { rows } else { pairs.len() as u64 };
        let context = format!("{context}: {name}, read by (epoch, thread) {pairs:?}");
        assert_eq!(opens.get(name), Some(&expected), "{context}: {opens:?}");
        if format == "indexed_binary" {
            for index in [".off.idx", ".sz.idx"] {
                let index = format!("{name}{index}");
                assert_eq!(opens.get(&index), Some(&(pairs.len() as u64)), "{context}");
            }
        }
        if format == "hdf5" {
            // The metadata (a 4 KiB read) with every sample on demand; with the first sample a
            // thread takes from the file in an epoch otherwise. A sample is 2 KiB, so only a row
            // that read metadata reaches 4 KiB.
            for lengths in pairs.values() {
                let with_metadata = lengths.iter().filter(|&&l| l >= 4096).count();
                let expected = if per_sample { lengths.len() } else { 1 };
                assert_eq!(with_metadata, expected, "{context}: lengths {lengths:?}");
            }
        }
    }
    let others = opens.keys().filter(|n| !readers.contains_key(*n));
    let others: Vec<&String> = if format == "indexed_binary" {
        others.filter(|n| !n.ends_with(".idx")).collect()
    } else {
        others.collect()
    };
    assert!(
        others.is_empty(),
        "{context}: opened but not read: {others:?}"
    );
}

/// The (offset, length) of every `pread` of `file` a command makes, under `strace -P`, sorted.
fn preads_of(tmp: &Scratch, file: &Path, label: &str, command: &[String]) -> Vec<(u64, u64)> {
    let calls = tmp.join(format!("preads-{label}.txt"));
    let mut args = strings(&["-f", "-qq", "-e", "trace=pread64", "-P"]);
    args.push(file.display().to_string());
    args.push("-o".into());
    args.push(calls.display().to_string());
    args.extend(command.iter().cloned());
    launch("strace", &tmp.path, &args, &[]).ok();
    let mut preads: Vec<(u64, u64)> = std::fs::read_to_string(&calls)
        .unwrap()
        .lines()
        .filter(|call| call.contains("pread64(") && !call.contains(" = -1 "))
        .map(|call| {
            // pread64(fd, "…"..., LENGTH, OFFSET) = N
            let (head, _) = call.rsplit_once(") = ").unwrap();
            let mut fields = head.rsplitn(3, ", ");
            let offset = fields.next().unwrap().trim().parse().unwrap();
            let length = fields.next().unwrap().trim().parse().unwrap();
            (offset, length)
        })
        .collect();
    preads.sort_unstable();
    preads
}

/// Parquet's request stream is pyarrow's: a rank reading a file's row groups reads exactly the
/// byte ranges pyarrow's `ParquetFile(f).read_row_group(g, columns)` reads for every row group
/// (the marked column chunks merged into ranges by Arrow's coalescing, holes of up to 8 KiB
/// included; the footer's last 64 KiB once), nothing more; `strace -P` on the file, for both.
#[test]
fn parquet_reads_the_ranges_pyarrow_reads() {
    let tmp = Scratch::new("pyarrow-requests");
    let data = tmp.join("data");
    let mut words = strings(&[
        "workload=default",
        "++workload.dataset.format=parquet",
        "++workload.dataset.num_files_train=1",
        "++workload.dataset.num_files_eval=0",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.dataset.num_samples_per_file=3000",
        "++workload.dataset.parquet.row_group_size=1000",
        "++workload.dataset.parquet.columns=[\
            {name: a, dtype: float32, read: true}, {name: b, dtype: float64, read: false}, \
            {name: c, dtype: int8, read: true}, {name: d, dtype: float16, read: true}, \
            {name: e, dtype: float32, size: 8, read: false}, {name: f, dtype: int64, size: 4, read: true}]",
        "++workload.train.computation_time=0",
        "++workload.train.epochs=1",
        "++workload.reader.batch_size=1000",
        "++workload.reader.read_threads=1",
        "++workload.workflow.evaluation=False",
        "++workload.workflow.checkpoint=False",
    ]);
    words.push(format!("++workload.dataset.data_folder={}", data.display()));
    words.push(format!("++hydra.run.dir={}", tmp.s("out")));
    generate_for(&tmp.path, &words);
    let file = data.join("train/img_0_of_1.parquet");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/pyarrow_row_groups.py");
    let pyarrow = preads_of(
        &tmp,
        &file,
        "pyarrow",
        &[
            "python3".to_string(),
            script.display().to_string(),
            file.display().to_string(),
            "a,c,d,f".to_string(),
        ],
    );
    let mut ours = strings(&[DLIO_RS, "run", "-q", "--accelerators", "1"]);
    ours.extend(with(&words, &["++workload.workflow.generate_data=False"]));
    let dlio_rs = preads_of(&tmp, &file, "dlio-rs", &ours);
    // The footer, then per row group two ranges: a to d (b's 8 KB chunk, unread, is a hole under
    // Arrow's 8 KiB limit and fetched with them), and f (e's 32 KB chunk is too large a hole).
    assert_eq!(pyarrow.len(), 1 + 3 * 2, "{pyarrow:?}");
    assert_eq!(dlio_rs, pyarrow);

    // With O_DIRECT, a row group's two ranges go to the device together, through io_uring: one
    // `io_uring_enter` submits both; the file's only `pread`s are the run's check that O_DIRECT
    // works (its first block) and the footer.
    let calls = tmp.join("direct-calls.txt");
    let mut args = strings(&[
        "-f",
        "-qq",
        "-y",
        "-e",
        "trace=pread64,io_uring_enter",
        "-o",
    ]);
    args.push(calls.display().to_string());
    args.extend(with(&ours, &["++workload.reader.odirect=True"]));
    launch("strace", &tmp.path, &args, &[]).ok();
    let calls = std::fs::read_to_string(&calls).unwrap();
    let name = file.display().to_string();
    let file_preads = calls
        .lines()
        .filter(|call| call.contains("pread64(") && call.contains(&name))
        .count();
    // io_uring_enter(FD<anon_inode:[io_uring]>, TO_SUBMIT, MIN_COMPLETE, ...)
    let both_submitted = calls
        .lines()
        .filter(|call| call.contains("io_uring_enter(") && call.contains("]>, 2, "))
        .count();
    assert_eq!(file_preads, 2, "{calls}");
    assert_eq!(both_submitted, 3, "one per row group: {calls}");
}
