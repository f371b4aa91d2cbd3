//! End-to-end tests of checkpointing: the files every rank saves, checked name by name and byte
//! by byte against an independent Python mirror of DLIO's own geometry code
//! (tests/python/dlio_checkpoint_sizes.py) for every parallelism and ZeRO stage; saved bytes that
//! never repeat; DLIO's summary, per-epoch and `[METRIC]` figures recomputed from the per-rank
//! timings, and report.json's slowest-rank rating; loads served by the storage, not the page
//! cache; step and epoch checkpoints in training, outside every AU block; failures (a missing,
//! truncated or half-saved file, an impossible geometry) that name what is wrong; and fsync
//! proven with strace. Every child process is bounded in time.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::common::*;

const GIB: f64 = (1u64 << 30) as f64;

/// How long any one child started here (python3, strace, sh) may take before the test kills it
/// and fails.
const CHILD_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Runs `cmd` without the binaries' environment variables, killed and failed past
/// [`CHILD_LIMIT`].
fn bounded(mut cmd: Command, what: String) -> Ran {
    for k in ISOLATED_ENV {
        cmd.env_remove(k);
    }
    run_bounded(cmd, what, CHILD_LIMIT).0
}

/// The oracle: DLIO's geometry for `config` (DLIO configuration values, see the script's
/// header), as `{"ranks": [[[name, bytes], ...], ...], "total": bytes}` or `{"error": message}`.
fn dlio_geometry(config: &Value) -> Value {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/dlio_checkpoint_sizes.py");
    let mut cmd = Command::new("python3");
    cmd.arg(&script).arg(config.to_string());
    let ran = bounded(cmd, format!("python3 {} '{config}'", script.display()));
    assert!(
        matches!(ran.code, Some(0 | 1)),
        "the oracle failed (python3 3.8 or later is needed)\n{}",
        ran.context()
    );
    serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("the oracle printed no JSON: {e}\n{}", ran.context()))
}

/// The tiny transformer every checkpoint-only test uses, as the oracle's values: llama3_8b's
/// shape (32 heads, 8 KV heads, fp16 model, fp32 optimizer, ZeRO 3) with 2 layers of hidden size
/// 256, FFN 512 and a vocabulary of 1000: a few MiB per rank.
fn tiny_model(world: u64, overrides: Value) -> Value {
    let mut config = json!({
        "world": world,
        "model_type": "transformer",
        "num_layers": 2,
        "vocab_size": 1000,
        "hidden_size": 256,
        "ffn_hidden_size": 512,
        "num_attention_heads": 32,
        "num_kv_heads": 8,
        "zero_stage": 3,
        "model_datatype": "fp16",
        "optimizer_datatype": "fp32",
    });
    for (k, v) in overrides.as_object().unwrap() {
        config[k] = v.clone();
    }
    config
}

/// Words of a checkpoint-only run of the tiny model (llama3_8b shrunk; no pause between
/// checkpoints): `writes` saves then `reads` loads, into `tmp/ckpt-NAME`, outputs in
/// `tmp/out-NAME`.
fn tiny_words(tmp: &Scratch, name: &str, writes: u64, reads: u64, extra: &[&str]) -> Vec<String> {
    let mut words = strings(TINY_LLAMA);
    words.push(format!(
        "++workload.checkpoint.num_checkpoints_write={writes}"
    ));
    words.push(format!(
        "++workload.checkpoint.num_checkpoints_read={reads}"
    ));
    words.push(format!(
        "++workload.checkpoint.checkpoint_folder={}",
        tmp.s(&format!("ckpt-{name}"))
    ));
    words.push(format!("++hydra.run.dir={}", tmp.s(&format!("out-{name}"))));
    words.extend(strings(extra));
    words
}

/// Every file the oracle's ranks write per checkpoint, name → payload bytes (names are unique).
fn oracle_files(geometry: &Value) -> BTreeMap<String, u64> {
    let mut files = BTreeMap::new();
    for rank in at(geometry, "/ranks").as_array().unwrap() {
        for file in rank.as_array().unwrap() {
            let name = file[0].as_str().unwrap().to_string();
            let bytes = file[1].as_u64().unwrap();
            assert!(
                files.insert(name.clone(), bytes).is_none(),
                "two ranks write {name}: {geometry}"
            );
        }
    }
    files
}

/// The oracle's files of rank `rank`, in the order it writes them.
fn oracle_rank_files(geometry: &Value, rank: usize) -> Vec<(String, u64)> {
    at(geometry, &format!("/ranks/{rank}"))
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f[0].as_str().unwrap().to_string(), f[1].as_u64().unwrap()))
        .collect()
}

/// The files directly in `dir`, name → size.
fn files_in(dir: &Path) -> BTreeMap<String, u64> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.unwrap();
            let meta = entry.metadata().unwrap();
            assert!(meta.is_file(), "{} is not a file", entry.path().display());
            (entry.file_name().into_string().unwrap(), meta.len())
        })
        .collect()
}

/// The folders directly in `dir`.
fn folders_in(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| {
            let entry = entry.unwrap();
            assert!(
                entry.metadata().unwrap().is_dir(),
                "{} is not a folder",
                entry.path().display()
            );
            entry.file_name().into_string().unwrap()
        })
        .collect()
}

/// A per_epoch_stats timestamp (`%Y-%m-%dT%H:%M:%S.%f`) as microseconds since 1970-01-01.
fn micros(ts: &str) -> i64 {
    let bad = || panic!("{ts:?} is not %Y-%m-%dT%H:%M:%S.%f");
    let (date, time) = ts.split_once('T').unwrap_or_else(bad);
    let d: Vec<i64> = date.split('-').map(|p| p.parse().unwrap()).collect();
    let (hms, frac) = time.split_once('.').unwrap_or_else(bad);
    let t: Vec<i64> = hms.split(':').map(|p| p.parse().unwrap()).collect();
    assert!(d.len() == 3 && t.len() == 3 && frac.len() == 6, "{ts:?}");
    // Days from the civil date (proleptic Gregorian), H. Hinnant's algorithm.
    let (y, m, day) = (if d[1] <= 2 { d[0] - 1 } else { d[0] }, d[1], d[2]);
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + t[0]) * 60 + t[1]) * 60_000_000 + t[2] * 1_000_000 + frac.parse::<i64>().unwrap()
}

/// One save or load entry of a per_epoch_stats file: (start µs, end µs, duration s, GiB/s),
/// after checking that its duration is its timestamps' difference.
fn timed(stats: &Value, pointer: &str) -> (i64, i64, f64, f64) {
    let entry = at(stats, pointer);
    let start = micros(at(entry, "/start").as_str().unwrap());
    let end = micros(at(entry, "/end").as_str().unwrap());
    let duration = num(entry, "/duration");
    let throughput = num(entry, "/throughput");
    assert!(
        ((end - start) as f64 / 1e6 - duration).abs() <= 2.5e-6,
        "{pointer}: the duration is not end - start: {entry}"
    );
    assert!(end >= start, "{pointer}: {entry}");
    (start, end, duration, throughput)
}

/// A block entry's (start µs, end µs).
fn span(stats: &Value, pointer: &str) -> (i64, i64) {
    let entry = at(stats, pointer);
    (
        micros(at(entry, "/start").as_str().unwrap()),
        micros(at(entry, "/end").as_str().unwrap()),
    )
}

fn mean(xs: &[f64]) -> f64 {
    xs.iter().sum::<f64>() / xs.len() as f64
}

/// Population standard deviation (numpy's `np.std`, as DLIO uses).
fn pstdev(xs: &[f64]) -> f64 {
    let m = mean(xs);
    (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / xs.len() as f64).sqrt()
}

fn close(a: f64, b: f64, what: &str) {
    assert!(
        (a - b).abs() <= 1e-9 * a.abs().max(b.abs()) + 1e-12,
        "{what}: {a} != {b}"
    );
}

/// The keys of epoch `epoch` of a per_epoch_stats file that start with `prefix`.
fn keys_with(stats: &Value, epoch: &str, prefix: &str) -> BTreeSet<String> {
    at(stats, &format!("/{epoch}"))
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.starts_with(prefix))
        .cloned()
        .collect()
}

fn names(prefix: &str, range: std::ops::RangeInclusive<u64>) -> BTreeSet<String> {
    range.map(|i| format!("{prefix}{i}")).collect()
}

// ---------------------------------------------------------------------------------------------
// Geometry: DLIO's files and sizes
// ---------------------------------------------------------------------------------------------

/// For each geometry, the files of a saved checkpoint are exactly DLIO's (by the oracle), byte
/// for byte, are read back, and are what every figure counts.
#[test]
fn every_geometry_saves_dlio_s_files_with_dlio_s_payload_bytes_and_loads_them() {
    let tmp = Scratch::new("ckpt-geometries");
    // (name, world, dlio-rs words, oracle values, ranks that write)
    let cases: Vec<(&str, u64, Vec<&str>, Value, usize)> = vec![
        ("zero3-world4", 4, vec![], json!({}), 4),
        (
            "tp2-pp2-zero1-world8",
            8,
            vec![
                "++workload.model.parallelism.tensor=2",
                "++workload.model.parallelism.pipeline=2",
                "++workload.model.parallelism.zero_stage=1",
            ],
            json!({"tensor": 2, "pipeline": 2, "zero_stage": 1}),
            8,
        ),
        (
            "zero0-tp2-world4",
            4,
            vec![
                "++workload.model.parallelism.tensor=2",
                "++workload.model.parallelism.zero_stage=0",
            ],
            json!({"tensor": 2, "zero_stage": 0}),
            2,
        ),
        (
            "zero2-world4-fp64-fp16",
            4,
            vec![
                "++workload.model.parallelism.zero_stage=2",
                "++workload.model.model_datatype=fp64",
                "++workload.model.optimizer_datatype=fp16",
            ],
            json!({"zero_stage": 2, "model_datatype": "fp64", "optimizer_datatype": "fp16"}),
            4,
        ),
        (
            // 3 ranks of a TP 2 × DP 2 model: a world that is not whole replicas.
            "subset-tp2-data2-world3",
            3,
            vec![
                "++workload.checkpoint.mode=subset",
                "++workload.model.parallelism.data=2",
                "++workload.model.parallelism.tensor=2",
            ],
            json!({"checkpoint_mode": "subset", "data": 2, "tensor": 2}),
            3,
        ),
        (
            // Not a transformer and no layers: every rank takes part from ZeRO 1 on.
            "cnn-blob-zero1-world3",
            3,
            vec![
                "++workload.model.type=cnn",
                "++workload.model.num_layers=-1",
                "++workload.model.model_size_bytes=3000000",
                "++workload.model.parallelism.zero_stage=1",
            ],
            json!({"model_type": "cnn", "num_layers": -1, "model_size": 3000000, "zero_stage": 1}),
            3,
        ),
        (
            // Not a transformer but with layers, under ZeRO 0 and TensorFlow's extension.
            "cnn-layers-zero0-world2-tensorflow",
            2,
            vec![
                "++workload.model.type=cnn",
                "++workload.model.model_size_bytes=1048576",
                "++workload.model.parallelism.zero_stage=0",
                "++workload.framework=tensorflow",
            ],
            json!({"model_type": "cnn", "model_size": 1048576, "zero_stage": 0, "ext": "pb"}),
            1,
        ),
    ];
    let mut checked = 0;
    for (name, world, words, values, writers) in cases {
        let geometry = dlio_geometry(&tiny_model(world, values));
        assert!(
            geometry.get("error").is_none(),
            "{name}: DLIO rejects it: {geometry}"
        );
        let writing = (0..world as usize)
            .filter(|&r| !oracle_rank_files(&geometry, r).is_empty())
            .count();
        assert_eq!(
            writing, writers,
            "{name}: the case is not what it claims: {geometry}"
        );
        let expected = oracle_files(&geometry);
        let total = int(&geometry, "/total");
        assert_eq!(total, expected.values().sum::<u64>());
        let mut extra = words.clone();
        extra.push("++workload.checkpoint.fsync=False");
        let run = tiny_words(&tmp, name, 1, 1, &extra);
        run_quiet(&tmp.path, world as usize, &run).ok();

        let ckpt = tmp.join(format!("ckpt-{name}"));
        assert_eq!(
            folders_in(&ckpt),
            BTreeSet::from(["global_epoch1_step1".to_string()]),
            "{name}"
        );
        let folder = ckpt.join("global_epoch1_step1");
        let found = files_in(&folder);
        // TensorFlow's shards are bundles (two files each) and the folder's `checkpoint` file,
        // each bundle's tensors holding the shard's payload.
        let tensorflow = name.ends_with("tensorflow");
        let files_per_shard = if tensorflow { 2 } else { 1 };
        if tensorflow {
            let shards: BTreeMap<String, u64> = expected
                .keys()
                .map(|shard| (shard.clone(), check_bundle(&folder, shard).1))
                .collect();
            assert_eq!(
                shards, expected,
                "{name}: the payloads saved (left) are not DLIO's"
            );
            assert_eq!(found.len(), 2 * expected.len() + 1, "{name}: {found:?}");
            assert!(found.contains_key("checkpoint"), "{name}: {found:?}");
        } else {
            assert_eq!(
                found, expected,
                "{name}: the files saved (left) are not DLIO's (right)"
            );
        }

        let out = tmp.join(format!("out-{name}"));
        let summary = read_json(&out.join("summary.json"));
        close(
            num(&summary, "/metric/checkpoint_size_GB"),
            total as f64 / GIB,
            &format!("{name}: checkpoint_size_GB"),
        );
        assert_eq!(int(&summary, "/num_accelerators"), world, "{name}");
        let report = read_json(&out.join("report.json"));
        assert_eq!(int(&report, "/checkpoints/size_bytes"), total, "{name}");
        let list = at(&report, "/checkpoints/list").as_array().unwrap();
        assert_eq!(list.len(), 2, "{name}: one save, one load: {list:?}");
        for entry in list {
            assert_eq!(int(entry, "/bytes"), total, "{name}: {entry}");
            assert_eq!(
                int(entry, "/files"),
                files_per_shard * expected.len() as u64,
                "{name}: {entry}"
            );
            assert_eq!(at(entry, "/folder"), "global_epoch1_step1", "{name}");
            assert_eq!(
                at(entry, "/per_rank_seconds").as_array().unwrap().len() as u64,
                world,
                "{name}: {entry}"
            );
        }
        let log = std::fs::read_to_string(out.join("dlio.log")).unwrap();
        let size_line = format!("Total checkpoint size: {:.6} GB", total as f64 / GIB);
        assert!(
            log.contains(&size_line),
            "{name}: no {size_line:?} in\n{log}"
        );
        checked += 1;
    }
    assert_eq!(checked, 7);
}

/// DLIO can save a ZeRO 0 checkpoint with pipeline parallelism but not load it (its loader
/// asserts pipeline 1): dlio-rs saves DLIO's files, and refuses a run that would load them,
/// naming the keys, before anything is written.
#[test]
fn zero_0_with_pipeline_stages_saves_dlio_s_files_but_refuses_to_load_them() {
    let tmp = Scratch::new("ckpt-zero0-pipeline");
    let words = [
        "++workload.model.parallelism.pipeline=2",
        "++workload.model.parallelism.zero_stage=0",
    ];
    let geometry = dlio_geometry(&tiny_model(4, json!({"pipeline": 2, "zero_stage": 0})));
    let expected = oracle_files(&geometry);
    assert_eq!(
        expected.keys().cloned().collect::<Vec<_>>(),
        [
            "zero_pp_rank_0_mp_rank_0_model_states.pt",
            "zero_pp_rank_0_mp_rank_0_optim_states.pt",
            "zero_pp_rank_0_mp_rank_1_model_states.pt",
            "zero_pp_rank_0_mp_rank_1_optim_states.pt",
        ],
        "ranks 0 and 1, one per stage"
    );
    run_quiet(&tmp.path, 4, &tiny_words(&tmp, "save", 1, 0, &words)).ok();
    assert_eq!(
        files_in(&tmp.join("ckpt-save/global_epoch1_step1")),
        expected
    );
    run_quiet(&tmp.path, 4, &tiny_words(&tmp, "load", 1, 1, &words))
        .fails(2)
        .says(&[
            "workload.model.parallelism.zero_stage = 0",
            "workload.model.parallelism.pipeline = 2",
            "workload.checkpoint.num_checkpoints_read",
        ]);
    assert!(!tmp.join("ckpt-load").exists() && !tmp.join("out-load").exists());
}

// ---------------------------------------------------------------------------------------------
// Contents
// ---------------------------------------------------------------------------------------------

/// Each full 4 KiB block of every file of every checkpoint under `dir`, hashed; and how many
/// blocks there are.
fn blocks(dir: &Path) -> (BTreeSet<u64>, usize) {
    let mut hashes = BTreeSet::new();
    let mut count = 0;
    for folder in folders_in(dir) {
        for name in files_in(&dir.join(&folder)).keys() {
            let bytes = std::fs::read(dir.join(&folder).join(name)).unwrap();
            for block in bytes.chunks_exact(4096) {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                block.hash(&mut h);
                hashes.insert(h.finish());
                count += 1;
            }
        }
    }
    (hashes, count)
}

/// Saved bytes are fresh random bytes: no 4 KiB block repeats across ranks, files or saves, so
/// storage that deduplicates or compresses gains nothing. With `randomize_tensor: False` (DLIO's
/// tensors of ones) every file is one block repeated.
#[test]
fn saved_blocks_never_repeat_across_ranks_files_and_saves() {
    let tmp = Scratch::new("ckpt-random");
    let fast = ["++workload.checkpoint.fsync=False"];
    run_quiet(&tmp.path, 2, &tiny_words(&tmp, "a", 2, 0, &fast)).ok();
    let (hashes, count) = blocks(&tmp.join("ckpt-a"));
    // 2 saves of 22.8 MB: 11,136 full blocks.
    assert_eq!(count, 11_136);
    assert_eq!(hashes.len(), count, "some blocks repeat");

    let ones = [
        "++workload.checkpoint.fsync=False",
        "++workload.checkpoint.randomize_tensor=False",
    ];
    run_quiet(&tmp.path, 2, &tiny_words(&tmp, "ones", 1, 0, &ones)).ok();
    let (hashes, count) = blocks(&tmp.join("ckpt-ones"));
    assert_eq!(count, 5_568);
    assert_eq!(hashes.len(), 1, "the pattern is one repeated block");
}

/// Nor do blocks repeat from one run to the next (transfer.rs: the seed "makes the saved bytes
/// differ from rank to rank and run to run"): a second run into another folder must not save
/// what a deduplicating storage already holds from the first.
#[test]
fn two_runs_never_save_the_same_blocks() {
    let tmp = Scratch::new("ckpt-random-runs");
    let fast = ["++workload.checkpoint.fsync=False"];
    run_quiet(&tmp.path, 2, &tiny_words(&tmp, "a", 1, 0, &fast)).ok();
    run_quiet(&tmp.path, 2, &tiny_words(&tmp, "b", 1, 0, &fast)).ok();
    let (a, a_count) = blocks(&tmp.join("ckpt-a"));
    let (b, b_count) = blocks(&tmp.join("ckpt-b"));
    assert_eq!((a.len(), b.len()), (a_count, b_count));
    let shared = a.intersection(&b).count();
    assert_eq!(
        shared, 0,
        "{shared} of the {b_count} blocks of the second run repeat the first run's"
    );
}

// ---------------------------------------------------------------------------------------------
// Figures
// ---------------------------------------------------------------------------------------------

/// DLIO's figures are rank 0's: per checkpoint, the total GiB over rank 0's duration, then mean
/// and population stdev over the checkpoints. report.json rates each checkpoint by its slowest
/// rank. Every figure is recomputed here from the per-rank timings and the files on disk.
#[test]
fn summary_per_epoch_stats_report_and_log_follow_dlio_s_formulas() {
    let tmp = Scratch::new("ckpt-figures");
    let world = 4;
    run_quiet(&tmp.path, world, &tiny_words(&tmp, "a", 3, 2, &[])).ok();
    let ckpt = tmp.join("ckpt-a");
    let out = tmp.join("out-a");
    assert_eq!(
        folders_in(&ckpt),
        names("global_epoch1_step", 1..=3),
        "three saves"
    );
    let on_disk: Vec<BTreeMap<String, u64>> = (1..=3)
        .map(|i| files_in(&ckpt.join(format!("global_epoch1_step{i}"))))
        .collect();
    let total: u64 = on_disk[0].values().sum();
    assert_eq!(on_disk[0], on_disk[1]);
    assert_eq!(on_disk[0], on_disk[2]);
    let gib = total as f64 / GIB;

    // Per rank: save_ckpt1..3 and load_ckpt1..2 under epoch "1", each throughput the total GiB
    // over that rank's own duration.
    let stats: Vec<Value> = (0..world)
        .map(|r| read_json(&out.join(format!("{r}_per_epoch_stats.json"))))
        .collect();
    let mut durations: BTreeMap<(&str, u64), Vec<f64>> = BTreeMap::new();
    for (rank, s) in stats.iter().enumerate() {
        let epochs: Vec<&String> = s.as_object().unwrap().keys().collect();
        assert_eq!(epochs, ["1"], "rank {rank}");
        let mut expected = names("save_ckpt", 1..=3);
        expected.extend(names("load_ckpt", 1..=2));
        let found: BTreeSet<String> = keys_with(s, "1", "save_ckpt")
            .into_iter()
            .chain(keys_with(s, "1", "load_ckpt"))
            .collect();
        assert_eq!(found, expected, "rank {rank}");
        let mut last_end = 0;
        for (op, count) in [("save", 3), ("load", 2)] {
            for i in 1..=count {
                let (start, end, duration, throughput) = timed(s, &format!("/1/{op}_ckpt{i}"));
                close(throughput, gib / duration, &format!("rank {rank} {op} {i}"));
                assert!(
                    start >= last_end,
                    "rank {rank}: {op} {i} overlaps the one before"
                );
                last_end = end;
                durations.entry((op, i)).or_default().push(duration);
            }
        }
    }

    // summary.json: rank 0's durations only.
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(int(&summary, "/epochs"), 0);
    assert_eq!(int(&summary, "/num_accelerators"), world as u64);
    close(num(&summary, "/metric/checkpoint_size_GB"), gib, "size");
    for (op, count) in [("save", 3), ("load", 2)] {
        let d0: Vec<f64> = (1..=count).map(|i| durations[&(op, i)][0]).collect();
        let t0: Vec<f64> = d0.iter().map(|d| gib / d).collect();
        let m = |field: &str| num(&summary, &format!("/metric/{op}_checkpoint_{field}"));
        close(m("io_mean_GB_per_second"), mean(&t0), op);
        close(m("io_stdev_GB_per_second"), pstdev(&t0), op);
        close(m("duration_mean_seconds"), mean(&d0), op);
        close(m("duration_stdev_seconds"), pstdev(&d0), op);
    }

    // report.json: each checkpoint's slowest rank, its bytes on disk.
    let report = read_json(&out.join("report.json"));
    let c = at(&report, "/checkpoints");
    assert_eq!(int(c, "/size_bytes"), total);
    assert_eq!(at(c, "/fsync"), true, "llama3_8b ships fsync: True");
    assert_eq!(at(c, "/odirect"), false);
    let list = at(c, "/list").as_array().unwrap();
    assert_eq!(list.len(), 5, "{list:?}");
    for (op, count) in [("save", 3u64), ("load", 2)] {
        let entries: Vec<&Value> = list.iter().filter(|e| e["operation"] == op).collect();
        assert_eq!(entries.len() as u64, count, "{op}: {list:?}");
        let mut rated = Vec::new();
        for (i, e) in (1..=count).zip(&entries) {
            let per_rank = &durations[&(op, i)];
            let slowest = per_rank.iter().cloned().fold(f64::MIN, f64::max);
            let folder = format!("global_epoch1_step{i}");
            assert_eq!(int(e, "/index"), i, "{e}");
            assert_eq!(int(e, "/epoch"), 1, "{e}");
            assert_eq!(at(e, "/folder"), folder.as_str(), "{e}");
            let disk = &on_disk[i as usize - 1];
            assert_eq!(int(e, "/files"), disk.len() as u64, "{e}");
            assert_eq!(int(e, "/bytes"), disk.values().sum::<u64>(), "{e}");
            let reported: Vec<f64> = nums(e, "/per_rank_seconds");
            assert_eq!(reported.len(), world);
            for (r, (a, b)) in reported.iter().zip(per_rank).enumerate() {
                close(*a, *b, &format!("{op} {i} rank {r}"));
            }
            close(num(e, "/duration_seconds"), slowest, &format!("{op} {i}"));
            close(
                num(e, "/gib_per_second"),
                gib / slowest,
                &format!("{op} {i}"),
            );
            close(
                num(e, "/dlio_duration_seconds"),
                per_rank[0],
                &format!("{op} {i}"),
            );
            close(
                num(e, "/dlio_gib_per_second"),
                gib / per_rank[0],
                &format!("{op} {i}"),
            );
            let fsync = num(e, "/fsync_fraction");
            if op == "save" {
                assert!(fsync > 0.0 && fsync <= 1.0, "fsync is timed in saves: {e}");
            } else {
                assert_eq!(fsync, 0.0, "{e}");
            }
            rated.push((slowest, gib / slowest));
        }
        let d: Vec<f64> = rated.iter().map(|r| r.0).collect();
        let t: Vec<f64> = rated.iter().map(|r| r.1).collect();
        let agg = at(c, &format!("/{op}"));
        assert_eq!(int(agg, "/count"), count);
        close(num(agg, "/duration_seconds_mean"), mean(&d), op);
        close(num(agg, "/duration_seconds_stdev"), pstdev(&d), op);
        close(num(agg, "/gib_per_second_mean"), mean(&t), op);
        close(num(agg, "/gib_per_second_stdev"), pstdev(&t), op);
    }

    // dlio.log: DLIO's [METRIC] block, from the summary's numbers.
    let log = std::fs::read_to_string(out.join("dlio.log")).unwrap();
    let metric = |key: &str| num(&summary, &format!("/metric/{key}"));
    let expected = [
        "[METRIC] ==========================================================".to_string(),
        format!("[METRIC] Number of Simulated Accelerators: {world} "),
        format!(
            "[METRIC] Checkpoint save duration (seconds): {:.4} ({:.4})",
            metric("save_checkpoint_duration_mean_seconds"),
            metric("save_checkpoint_duration_stdev_seconds")
        ),
        format!(
            "[METRIC] Checkpoint save I/O Throughput (GB/second): {:.4} ({:.4})",
            metric("save_checkpoint_io_mean_GB_per_second"),
            metric("save_checkpoint_io_stdev_GB_per_second")
        ),
        format!(
            "[METRIC] Checkpoint load duration (seconds): {:.4} ({:.4})",
            metric("load_checkpoint_duration_mean_seconds"),
            metric("load_checkpoint_duration_stdev_seconds")
        ),
        format!(
            "[METRIC] Checkpoint load I/O Throughput (GB/second): {:.4} ({:.4})",
            metric("load_checkpoint_io_mean_GB_per_second"),
            metric("load_checkpoint_io_stdev_GB_per_second")
        ),
        "[METRIC] ==========================================================".to_string(),
    ]
    .join("\n");
    assert!(
        log.contains(&format!(
            "[OUTPUT] Averaged metric over all steps/epochs\n{expected}\n"
        )),
        "dlio.log lacks\n{expected}\n--- dlio.log ---\n{log}"
    );
}

/// Each load first drops the rank's files from the page cache, so on a disk file system it reads
/// them from the storage, even right after saving them.
#[test]
fn loads_read_their_bytes_from_storage_not_from_the_page_cache() {
    let tmp = Scratch::new("ckpt-from-storage");
    // Two ranks, each with a 1.6 MB model file and a 9.8 MB optimizer file.
    run_quiet(
        &tmp.path,
        2,
        &tiny_words(&tmp, "a", 2, 2, &["++workload.checkpoint.fsync=False"]),
    )
    .ok();
    let report = read_json(&tmp.join("out-a/report.json"));
    let loads: Vec<&Value> = at(&report, "/checkpoints/list")
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["operation"] == "load")
        .collect();
    assert_eq!(loads.len(), 2, "{report}");
    for load in loads {
        let bytes = int(load, "/bytes") as f64;
        assert!(bytes > 20e6, "{load}");
        let from_storage = at(load, "/bytes_from_storage").as_f64().unwrap_or_else(|| {
            panic!("this file system should count the bytes read from storage: {load}")
        });
        assert!(
            from_storage >= 0.95 * bytes,
            "the load was served from the page cache: {load}"
        );
        assert!(num(load, "/cache_served_fraction") <= 0.05, "{load}");
    }
}

// ---------------------------------------------------------------------------------------------
// Training with checkpoints
// ---------------------------------------------------------------------------------------------

#[test]
fn odirect_saves_and_loads_every_byte_past_the_page_cache() {
    let tmp = Scratch::new("ckpt-odirect");
    run_quiet(
        &tmp.path,
        2,
        &tiny_words(&tmp, "d", 1, 1, &["++workload.checkpoint.odirect=True"]),
    )
    .ok();
    let geometry = dlio_geometry(&tiny_model(2, json!({})));
    let on_disk = files_in(&tmp.join("ckpt-d/global_epoch1_step1"));
    assert_eq!(on_disk, oracle_files(&geometry));
    let report = read_json(&tmp.join("out-d/report.json"));
    assert_eq!(at(&report, "/checkpoints/odirect"), true);
    let load = &at(&report, "/checkpoints/list").as_array().unwrap()[1];
    assert_eq!(load["operation"], "load", "{report}");
    // O_DIRECT: every byte loaded came from the device, counted exactly.
    assert_eq!(load["bytes_from_storage"], load["bytes"], "{load}");
    // Written past the page cache: none of the saved files' whole blocks are cached.
    for name in on_disk.keys() {
        let path = tmp.join("ckpt-d/global_epoch1_step1").join(name);
        let len = std::fs::metadata(&path).unwrap().len() as usize;
        assert_eq!(
            resident_pages(&path, len / 4096 * 4096),
            0,
            "{name} is cached"
        );
    }
}

/// mlpstorage 3.0's `checkpointing run --o-direct` words (mlpstorage_py/benchmarks/dlio.py): the
/// `direct_fs` storage type saves and loads the checkpoint with O_DIRECT.
#[test]
fn mlpstorage_v3_o_direct_checkpointing_goes_past_the_page_cache() {
    let tmp = Scratch::new("ckpt-v3-odirect");
    let mut words = strings(&[
        "workload=llama3_8b",
        "++hydra.output_subdir=dlio_config",
        "++workload.storage.storage_type=direct_fs",
        "++workload.storage.storage_options.storage_library=s3dlio",
        "++workload.storage.storage_options.uri_scheme=direct",
        "++workload.checkpoint.num_checkpoints_read=1",
        "++workload.checkpoint.num_checkpoints_write=1",
        "++workload.model.num_layers=2",
        "++workload.model.transformer.hidden_size=256",
        "++workload.model.transformer.ffn_hidden_size=512",
        "++workload.model.transformer.vocab_size=1000",
        "++workload.checkpoint.time_between_checkpoints=0",
    ]);
    words.push(format!("++hydra.run.dir={}", tmp.s("out")));
    words.push(format!(
        "++workload.storage.storage_root={}",
        tmp.path.display()
    ));
    words.push(format!(
        "++workload.checkpoint.checkpoint_folder={}",
        tmp.s("llama3-8b")
    ));
    launch(
        DLIO_BENCHMARK,
        &tmp.path,
        &words,
        &[("DLIO_RS_ACCELERATORS", "2")],
    )
    .ok();
    let report = read_json(&tmp.join("out/report.json"));
    assert_eq!(at(&report, "/checkpoints/odirect"), true, "{report}");
    let list = at(&report, "/checkpoints/list").as_array().unwrap();
    assert_eq!(list.len(), 2, "{report}");
    assert_eq!(list[1]["bytes_from_storage"], list[1]["bytes"], "{report}");
    let geometry = dlio_geometry(&tiny_model(2, json!({})));
    assert_eq!(
        files_in(&tmp.join("llama3-8b/global_epoch1_step1")),
        oracle_files(&geometry)
    );
}

/// Pages of the first `len` bytes of the file at `path` in the page cache (mincore).
fn resident_pages(path: &Path, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let file = std::fs::File::open(path).unwrap();
    // SAFETY: a new read-only shared mapping of an open file, which touches no page of it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            std::os::fd::AsRawFd::as_raw_fd(&file),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    let mut residency = vec![0u8; len.div_ceil(4096)];
    // SAFETY: `map` covers `len` bytes and `residency` has a byte for each page of them.
    let status = unsafe { libc::mincore(map, len, residency.as_mut_ptr()) };
    // SAFETY: unmaps exactly the mapping made above.
    unsafe { libc::munmap(map, len) };
    assert_eq!(status, 0);
    residency.iter().filter(|&&page| page & 1 != 0).count()
}

/// A training run of 2 ranks × 10 steps per epoch over a fresh npz dataset, with a 64 KiB
/// non-transformer checkpoint (ZeRO 0: rank 0's `model_states-0.pt` only) into `tmp/ckpt`.
fn training(tmp: &Scratch, epochs: u64, extra: &[&str]) -> Vec<String> {
    let shape = Shape {
        files: 20,
        samples_per_file: 1,
        batch: 1,
        threads: 1,
        epochs,
    };
    let folder = format!("++workload.checkpoint.checkpoint_folder={}", tmp.s("ckpt"));
    let mut all = vec![
        "++workload.workflow.checkpoint=True",
        "++workload.model.type=cnn",
        "++workload.model.model_size_bytes=65536",
        folder.as_str(),
    ];
    all.extend(extra);
    let words = traced_words(&tmp.join("data"), &tmp.join("out"), &shape, &all);
    generate_for(&tmp.path, &words);
    words
}

/// Rank 0's save figures in summary.json, recomputed from its per_epoch_stats over all epochs.
fn check_training_summary(out: &Path, saves: &[(String, String)], epochs: u64) {
    let summary = read_json(&out.join("summary.json"));
    let stats = read_json(&out.join("0_per_epoch_stats.json"));
    let gib = 65536.0 / GIB;
    let d: Vec<f64> = saves
        .iter()
        .map(|(epoch, key)| timed(&stats, &format!("/{epoch}/{key}")).2)
        .collect();
    let t: Vec<f64> = d.iter().map(|d| gib / d).collect();
    let m = |field: &str| num(&summary, &format!("/metric/save_checkpoint_{field}"));
    close(m("io_mean_GB_per_second"), mean(&t), "save io mean");
    close(m("io_stdev_GB_per_second"), pstdev(&t), "save io stdev");
    close(m("duration_mean_seconds"), mean(&d), "save duration mean");
    close(
        m("duration_stdev_seconds"),
        pstdev(&d),
        "save duration stdev",
    );
    close(num(&summary, "/metric/checkpoint_size_GB"), gib, "size");
    assert!(
        summary
            .pointer("/metric/load_checkpoint_io_mean_GB_per_second")
            .is_none(),
        "training loads no checkpoint: {summary}"
    );
    assert_eq!(int(&summary, "/epochs"), epochs);
    // As DLIO: a training run prints no checkpoint [METRIC] lines.
    let log = std::fs::read_to_string(out.join("dlio.log")).unwrap();
    assert!(
        log.contains("[METRIC] Training Accelerator Utilization"),
        "{log}"
    );
    assert!(!log.contains("[METRIC] Checkpoint"), "{log}");
}

/// `steps_between_checkpoints: 3` with 10 steps per epoch: saves after steps 3, 6 and 9 of every
/// epoch, each ending an AU block (block k ends before save k starts; block k+1 starts after it
/// ends), so no save is timed as training.
#[test]
fn training_saves_every_three_steps_between_au_blocks() {
    let tmp = Scratch::new("ckpt-steps");
    let words = training(
        &tmp,
        2,
        &["++workload.checkpoint.steps_between_checkpoints=3"],
    );
    run_quiet(&tmp.path, 2, &words).ok();
    let mut expected = BTreeSet::new();
    for epoch in 1..=2 {
        for step in [3, 6, 9] {
            expected.insert(format!("global_epoch{epoch}_step{step}"));
        }
    }
    assert_eq!(folders_in(&tmp.join("ckpt")), expected);
    for folder in &expected {
        assert_eq!(
            files_in(&tmp.join("ckpt").join(folder)),
            BTreeMap::from([("model_states-0.pt".to_string(), 65536)]),
            "{folder}: rank 0 alone writes under ZeRO 0"
        );
    }
    let out = tmp.join("out");
    for rank in 0..2 {
        let stats = read_json(&out.join(format!("{rank}_per_epoch_stats.json")));
        for epoch in ["1", "2"] {
            assert_eq!(keys_with(&stats, epoch, "block"), names("block", 1..=4));
            assert_eq!(
                keys_with(&stats, epoch, "save_ckpt"),
                names("save_ckpt", 1..=3)
            );
            assert!(keys_with(&stats, epoch, "load_ckpt").is_empty());
            for k in 1..=3 {
                let block = span(&stats, &format!("/{epoch}/block{k}"));
                let next = span(&stats, &format!("/{epoch}/block{}", k + 1));
                let (start, end, _, _) = timed(&stats, &format!("/{epoch}/save_ckpt{k}"));
                assert!(
                    block.1 <= start && end <= next.0,
                    "rank {rank} epoch {epoch}: save {k} is not between blocks {k} and {}: {}",
                    k + 1,
                    at(&stats, &format!("/{epoch}"))
                );
            }
        }
    }
    let saves: Vec<(String, String)> = ["1", "2"]
        .iter()
        .flat_map(|e| (1..=3).map(move |k| (e.to_string(), format!("save_ckpt{k}"))))
        .collect();
    check_training_summary(&out, &saves, 2);
    let report = read_json(&out.join("report.json"));
    let list = at(&report, "/checkpoints/list").as_array().unwrap();
    let folders: BTreeSet<String> = list
        .iter()
        .map(|e| at(e, "/folder").as_str().unwrap().to_string())
        .collect();
    assert_eq!(list.len(), 6);
    assert_eq!(folders, expected);
}

/// `checkpoint_after_epoch: 2`, `epochs_between_checkpoints: 2`, 5 epochs: saves after epochs 2
/// and 4 only, into `global_epoch{E}_step{steps + 1}` as DLIO names them, after the epoch's last
/// block and before its evaluation.
#[test]
fn training_saves_after_epochs_two_and_four_of_five() {
    let tmp = Scratch::new("ckpt-epochs");
    let words = training(
        &tmp,
        5,
        &[
            "++workload.checkpoint.checkpoint_after_epoch=2",
            "++workload.checkpoint.epochs_between_checkpoints=2",
        ],
    );
    run_quiet(&tmp.path, 2, &words).ok();
    let expected = BTreeSet::from([
        "global_epoch2_step11".to_string(),
        "global_epoch4_step11".to_string(),
    ]);
    assert_eq!(folders_in(&tmp.join("ckpt")), expected);
    for folder in &expected {
        assert_eq!(
            files_in(&tmp.join("ckpt").join(folder)),
            BTreeMap::from([("model_states-0.pt".to_string(), 65536)]),
        );
    }
    let out = tmp.join("out");
    for rank in 0..2 {
        let stats = read_json(&out.join(format!("{rank}_per_epoch_stats.json")));
        for epoch in 1..=5 {
            let e = epoch.to_string();
            assert_eq!(keys_with(&stats, &e, "block"), names("block", 1..=1));
            if epoch % 2 == 1 {
                assert!(
                    keys_with(&stats, &e, "save_ckpt").is_empty(),
                    "rank {rank} saved after epoch {epoch}"
                );
                continue;
            }
            assert_eq!(
                keys_with(&stats, &e, "save_ckpt"),
                names("save_ckpt", 1..=1)
            );
            let block = span(&stats, &format!("/{e}/block1"));
            let eval = span(&stats, &format!("/{e}/eval"));
            let (start, end, _, _) = timed(&stats, &format!("/{e}/save_ckpt1"));
            assert!(
                block.1 <= start && end <= eval.0,
                "rank {rank} epoch {epoch}: the save is not between training and evaluation: {}",
                at(&stats, &format!("/{e}"))
            );
        }
    }
    let saves = vec![
        ("2".to_string(), "save_ckpt1".to_string()),
        ("4".to_string(), "save_ckpt1".to_string()),
    ];
    check_training_summary(&out, &saves, 5);
}

/// DLIO writes `checkpoint_size_GB` whenever checkpointing is on (its allocated size, from the
/// start of the run: statscounter.py `end_run`, main.py L251-254), even when no checkpoint fell
/// due; only the save figures are NaN (dlio-rs: null, documented). The size is known from the
/// geometry: dlio.log says it.
#[test]
fn a_training_run_whose_checkpoints_never_fall_due_still_reports_the_checkpoint_size() {
    let tmp = Scratch::new("ckpt-never-due");
    let words = training(&tmp, 2, &["++workload.checkpoint.checkpoint_after_epoch=5"]);
    run_quiet(&tmp.path, 2, &words).ok();
    assert!(!tmp.join("ckpt").exists(), "no checkpoint fell due");
    let out = tmp.join("out");
    let log = std::fs::read_to_string(out.join("dlio.log")).unwrap();
    assert!(log.contains("Total checkpoint size: 0.000061 GB"), "{log}");
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(
        at(&summary, "/metric/save_checkpoint_io_mean_GB_per_second"),
        &Value::Null,
        "no save ran"
    );
    assert_eq!(
        at(&summary, "/metric/checkpoint_size_GB").as_f64(),
        Some(65536.0 / GIB),
        "DLIO's checkpoint_size_GB is the checkpoint's size, saved or not"
    );
}

// ---------------------------------------------------------------------------------------------
// Failures
// ---------------------------------------------------------------------------------------------

/// A read-only run on an empty folder fails, naming the first file it needed.
#[test]
fn a_read_only_run_of_a_checkpoint_never_saved_fails_naming_the_missing_file() {
    let tmp = Scratch::new("ckpt-missing");
    std::fs::create_dir_all(tmp.join("ckpt-empty")).unwrap();
    let ran = run_quiet(&tmp.path, 1, &tiny_words(&tmp, "empty", 0, 1, &[])).fails(1);
    let first = tmp.join("ckpt-empty/global_epoch1_step1/zero_pp_rank_0_mp_rank_0_model_states.pt");
    ran.says(&[&first.display().to_string(), "is missing"]);
    assert!(!tmp.join("out-empty/summary.json").exists());
    assert!(
        folders_in(&tmp.join("ckpt-empty")).is_empty(),
        "a load created folders"
    );
}

/// A run that only reads (`num_checkpoints_write: 0`) loads a checkpoint an earlier run saved;
/// once one of its files is cut short, it fails naming the file, both sizes and the rank whose
/// file it is (rank 2's, though its name says data-parallel rank 1: the oracle's attribution).
#[test]
fn a_truncated_checkpoint_file_fails_the_load_naming_it_its_rank_and_both_sizes() {
    let tmp = Scratch::new("ckpt-truncated");
    let tp2 = [
        "++workload.model.parallelism.tensor=2",
        "++workload.model.parallelism.zero_stage=1",
    ];
    let geometry = dlio_geometry(&tiny_model(4, json!({"tensor": 2, "zero_stage": 1})));
    let rank2 = oracle_rank_files(&geometry, 2);
    assert_eq!(
        rank2.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(),
        ["zero_pp_rank_1_mp_rank_0_optim_states.pt"],
        "under ZeRO 1 data-parallel rank 1 writes only its optimizer state"
    );
    let (victim, size) = rank2[0].clone();
    run_quiet(&tmp.path, 4, &tiny_words(&tmp, "a", 1, 0, &tp2)).ok();
    // Runs that only read the checkpoint back, their outputs in `tmp/out-NAME`.
    let read_only = |out: &str| {
        let mut words = tiny_words(&tmp, "a", 0, 1, &tp2);
        words.retain(|w| !w.starts_with("++hydra.run.dir="));
        words.push(format!("++hydra.run.dir={}", tmp.s(out)));
        words
    };
    run_quiet(&tmp.path, 4, &read_only("out-whole")).ok();
    let report = read_json(&tmp.join("out-whole/report.json"));
    let list = at(&report, "/checkpoints/list").as_array().unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(at(&list[0], "/operation"), "load");
    assert_eq!(int(&list[0], "/bytes"), int(&geometry, "/total"));

    let path = tmp.join("ckpt-a/global_epoch1_step1").join(&victim);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), size);
    let cut = size / 3;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut)
        .unwrap();
    let ran = run_quiet(&tmp.path, 4, &read_only("out-cut")).fails(1);
    ran.says(&[
        &path.display().to_string(),
        &format!("holds {cut} bytes"),
        &format!("gives it {size}"),
        "rank 2",
    ]);
    assert!(!tmp.join("out-cut/summary.json").exists());
}

/// A save cut short by the storage (here: the file-size limit, EFBIG) fails the run naming the
/// file, and leaves no partial file: whatever is on disk is whole.
#[test]
fn a_save_that_fails_midway_names_the_file_and_leaves_no_partial_file() {
    let tmp = Scratch::new("ckpt-efbig");
    // World 8: each rank's model file (397 KiB) fits under the 512 KiB limit, its optimizer file
    // (2.3 MiB) does not.
    let geometry = dlio_geometry(&tiny_model(8, json!({})));
    let expected = oracle_files(&geometry);
    let limit = 1024 * 512;
    for (name, bytes) in &expected {
        assert_eq!(
            name.ends_with("_optim_states.pt"),
            *bytes > limit,
            "{name} ({bytes} B) should be over the limit exactly when it is an optimizer file"
        );
    }
    let words = tiny_words(&tmp, "a", 1, 0, &[]);
    let mut cmd = Command::new("sh");
    cmd.current_dir(&tmp.path)
        .arg("-c")
        .arg("trap '' XFSZ; ulimit -f 1024; exec \"$@\"")
        .arg("sh")
        .arg(DLIO_RS)
        .args(["run", "-q", "-n", "8"])
        .args(&words);
    let what = format!(
        "sh -c \"trap '' XFSZ; ulimit -f 1024; exec dlio-rs run -q -n 8 {}\"",
        words.join(" ")
    );
    let ran = bounded(cmd, what).fails(1);
    let folder = tmp.join("ckpt-a/global_epoch1_step1");
    let named: Vec<&String> = expected
        .keys()
        .filter(|name| {
            ran.stderr
                .contains(&folder.join(name.as_str()).display().to_string())
        })
        .collect();
    assert!(
        !named.is_empty() && named.iter().all(|n| n.ends_with("_optim_states.pt")),
        "the error names the optimizer file that failed: {named:?}\n{}",
        ran.context()
    );
    ran.says(&["cannot save checkpoint file", "File too large"]);
    let left = files_in(&folder);
    for (name, bytes) in &left {
        assert_eq!(
            expected.get(name),
            Some(bytes),
            "{name} is left with {bytes} bytes: a partial file\nleft: {left:?}"
        );
    }
    assert!(
        left.keys().all(|n| !n.ends_with("_optim_states.pt")),
        "{left:?}"
    );
    assert!(!tmp.join("out-a/summary.json").exists());
}

/// Geometries DLIO's `validate()` (or its datatype table) rejects are refused before anything
/// is written, exit 2, naming the `workload.model` keys; the oracle agrees that DLIO rejects
/// each.
#[test]
fn impossible_geometries_are_usage_errors_naming_the_model_keys() {
    let tmp = Scratch::new("ckpt-impossible");
    // (dlio-rs words, world, oracle values, what the message must say)
    let cases: Vec<(Vec<&str>, u64, Value, Vec<&str>)> = vec![
        (
            vec!["++workload.model.parallelism.tensor=2"],
            3,
            json!({"tensor": 2}),
            vec![
                "3 ranks are not a multiple of",
                "workload.model.parallelism.tensor × workload.model.parallelism.pipeline",
            ],
        ),
        (
            vec![
                "++workload.model.parallelism.pipeline=3",
                "++workload.model.parallelism.zero_stage=1",
            ],
            3,
            json!({"pipeline": 3, "zero_stage": 1}),
            vec![
                "workload.model.num_layers = 2",
                "workload.model.parallelism.pipeline = 3",
            ],
        ),
        (
            vec!["++workload.model.parallelism.pipeline=2"],
            2,
            json!({"pipeline": 2}),
            vec![
                "workload.model.parallelism.zero_stage = 3",
                "workload.model.parallelism.pipeline = 2",
            ],
        ),
        (
            vec!["++workload.model.model_datatype=fp8"],
            2,
            json!({"model_datatype": "fp8"}),
            vec!["workload.model.model_datatype", "fp8"],
        ),
        (
            vec!["++workload.model.optimizer_datatype=fp8"],
            2,
            json!({"optimizer_datatype": "fp8"}),
            vec!["workload.model.optimizer_datatype", "fp8"],
        ),
    ];
    for (i, (words, world, values, says)) in cases.into_iter().enumerate() {
        let geometry = dlio_geometry(&tiny_model(world, values));
        assert!(
            geometry.get("error").is_some(),
            "case {i}: DLIO accepts it: {geometry}"
        );
        let name = format!("bad{i}");
        let ran = run_quiet(
            &tmp.path,
            world as usize,
            &tiny_words(&tmp, &name, 1, 1, &words),
        );
        ran.fails(2).says(&says);
        assert!(
            !tmp.join(format!("ckpt-{name}")).exists() && !tmp.join(format!("out-{name}")).exists(),
            "case {i}: a refused run wrote something"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// fsync
// ---------------------------------------------------------------------------------------------

/// The checkpoint files `strace -y` shows as fsync'd, with how many times each.
fn fsynced(trace: &Path, folder: &Path) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(trace).unwrap();
    let prefix = format!("{}/", folder.display());
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        // `PID  fsync(FD</path>) = 0` or `PID  fsync(FD</path> <unfinished ...>`
        let Some(call) = line.split_once("fsync(").map(|(_, rest)| rest) else {
            continue;
        };
        let Some(path) = call
            .split_once('<')
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(path, _)| path)
        else {
            continue;
        };
        if let Some(relative) = path.strip_prefix(&prefix) {
            *counts.entry(relative.to_string()).or_insert(0) += 1;
        }
    }
    counts
}

/// `strace -f -y -e trace=fsync -o TRACE dlio-rs run ...`.
fn traced_run(tmp: &Scratch, trace: &str, words: &[String]) -> Ran {
    let available = Command::new("strace").arg("-V").output();
    assert!(
        available.is_ok_and(|o| o.status.success()),
        "strace is needed to prove checkpoint saves call fsync: install it (apt-get install \
         strace; .ci/run does)"
    );
    let mut cmd = Command::new("strace");
    cmd.current_dir(&tmp.path)
        .args(["-f", "-y", "-e", "trace=fsync", "-o"])
        .arg(tmp.join(trace))
        .arg(DLIO_RS)
        .args(["run", "-q", "-n", "4"])
        .args(words);
    let what = format!("strace ... dlio-rs run -q -n 4 {}", words.join(" "));
    bounded(cmd, what)
}

/// With `checkpoint.fsync: True` every saved file is finished with one fsync of its own; with
/// False the checkpoint's files are never fsync'd.
#[test]
fn fsync_true_syncs_every_saved_file_once_and_false_syncs_none() {
    let tmp = Scratch::new("ckpt-fsync");
    traced_run(&tmp, "on.trace", &tiny_words(&tmp, "on", 2, 1, &[])).ok();
    let saved: BTreeMap<String, u64> = (1..=2)
        .flat_map(|i| {
            let folder = format!("global_epoch1_step{i}");
            files_in(&tmp.join("ckpt-on").join(&folder))
                .into_keys()
                .map(move |name| (format!("{folder}/{name}"), 1))
        })
        .collect();
    assert_eq!(saved.len(), 16, "4 ranks × 2 files × 2 saves: {saved:?}");
    assert_eq!(
        fsynced(&tmp.join("on.trace"), &tmp.join("ckpt-on")),
        saved,
        "each saved file fsync'd once (left: the trace's fsync calls on checkpoint files)"
    );
    let report = read_json(&tmp.join("out-on/report.json"));
    assert_eq!(at(&report, "/checkpoints/fsync"), true);

    traced_run(
        &tmp,
        "off.trace",
        &tiny_words(&tmp, "off", 2, 1, &["++workload.checkpoint.fsync=False"]),
    )
    .ok();
    assert_eq!(
        files_in(&tmp.join("ckpt-off/global_epoch1_step2")).len(),
        8,
        "the run saved its files"
    );
    assert_eq!(
        fsynced(&tmp.join("off.trace"), &tmp.join("ckpt-off")),
        BTreeMap::new()
    );
    let report = read_json(&tmp.join("out-off/report.json"));
    assert_eq!(at(&report, "/checkpoints/fsync"), false);
    for e in at(&report, "/checkpoints/list").as_array().unwrap() {
        assert_eq!(num(e, "/fsync_fraction"), 0.0, "{e}");
    }
}

// ---------------------------------------------------------------------------------------------
// TensorFlow shards: tf.train.Checkpoint's bundles, read back by a reader of their own here
// ---------------------------------------------------------------------------------------------

/// One tensor of a bundle's index, as a BundleEntryProto says.
#[derive(Debug, Default, Clone)]
struct Entry {
    dtype: u64,
    shape: Vec<u64>,
    shard: u64,
    offset: u64,
    size: u64,
    crc: Option<u32>,
}

fn varint(bytes: &[u8], at: &mut usize) -> u64 {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = bytes[*at];
        *at += 1;
        value |= u64::from(byte & 0x7f) << shift;
        if byte < 0x80 {
            return value;
        }
    }
    panic!("a varint longer than 10 bytes");
}

fn fixed32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// LevelDB's masked CRC32C.
fn masked(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// A protobuf message's fields: (number, varint value or bytes).
fn fields(mut bytes: &[u8]) -> Vec<(u64, Result<u64, Vec<u8>>)> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let mut at = 0;
        let key = varint(bytes, &mut at);
        let value = match key & 7 {
            0 => Ok(varint(bytes, &mut at)),
            2 => {
                let len = varint(bytes, &mut at) as usize;
                at += len;
                Err(bytes[at - len..at].to_vec())
            }
            5 => {
                at += 4;
                Ok(u64::from(fixed32(bytes, at - 4)))
            }
            wire => panic!("wire type {wire} in a bundle entry"),
        };
        out.push((key >> 3, value));
        bytes = &bytes[at..];
    }
    out
}

/// A table block's entries (prefix-compressed keys), after checking its trailer: compression
/// byte 0 and the masked CRC32C of block and byte.
fn block_entries(table: &[u8], offset: usize, size: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
    let block = &table[offset..offset + size];
    assert_eq!(table[offset + size], 0, "an uncompressed block");
    let crc = crc32c::crc32c_append(crc32c::crc32c(block), &[0]);
    assert_eq!(fixed32(table, offset + size + 1), masked(crc), "block CRC");
    let restarts = fixed32(block, size - 4) as usize;
    let end = size - 4 - 4 * restarts;
    let (mut at, mut key, mut out) = (0, Vec::new(), Vec::new());
    while at < end {
        let shared = varint(block, &mut at) as usize;
        let unshared = varint(block, &mut at) as usize;
        let len = varint(block, &mut at) as usize;
        key.truncate(shared);
        key.extend_from_slice(&block[at..at + unshared]);
        at += unshared;
        out.push((key.clone(), block[at..at + len].to_vec()));
        at += len;
    }
    out
}

/// A bundle's index: the 48-byte footer (two block handles, the magic), the index block, every
/// data block; the header entry checked (one shard, version 1); key → entry, in key order.
fn read_index(path: &Path) -> BTreeMap<String, Entry> {
    let table = std::fs::read(path).unwrap();
    let footer = &table[table.len() - 48..];
    assert_eq!(
        u64::from_le_bytes(footer[40..].try_into().unwrap()),
        0xdb47_7524_8b80_fb57,
        "{}: the table magic",
        path.display()
    );
    let mut at = 0;
    let handles: Vec<usize> = (0..4).map(|_| varint(footer, &mut at) as usize).collect();
    assert!(
        block_entries(&table, handles[0], handles[1]).is_empty(),
        "empty metaindex"
    );
    let mut rows = Vec::new();
    for (_, handle) in block_entries(&table, handles[2], handles[3]) {
        let mut at = 0;
        let offset = varint(&handle, &mut at) as usize;
        let size = varint(&handle, &mut at) as usize;
        rows.extend(block_entries(&table, offset, size));
    }
    assert!(rows.windows(2).all(|w| w[0].0 < w[1].0), "sorted keys");
    let (header_key, header) = rows.remove(0);
    assert_eq!(header_key, b"");
    let header = fields(&header);
    assert_eq!(header[0], (1, Ok(1)), "one shard");
    assert_eq!(header[1], (3, Err(vec![8, 1])), "version: producer 1");
    rows.into_iter()
        .map(|(key, value)| {
            let mut entry = Entry::default();
            for (field, value) in fields(&value) {
                match (field, value) {
                    (1, Ok(v)) => entry.dtype = v,
                    (2, Err(shape)) => {
                        for (_, dim) in fields(&shape) {
                            let dim = fields(&dim.unwrap_err());
                            entry
                                .shape
                                .push(dim.first().map_or(0, |d| d.1.clone().unwrap()));
                        }
                    }
                    (3, Ok(v)) => entry.shard = v,
                    (4, Ok(v)) => entry.offset = v,
                    (5, Ok(v)) => entry.size = v,
                    (6, Ok(v)) => entry.crc = Some(v as u32),
                    other => panic!("unexpected field {other:?}"),
                }
            }
            (String::from_utf8(key).unwrap(), entry)
        })
        .collect()
}

/// Checks the shard `{folder}/{name}-1` against its index: its tensors tile the data file, each
/// tensor's bytes have the index's CRC, the save counter is int64 1 and the object graph a string
/// framed as TensorFlow frames it. Returns the variables, key (without TensorFlow's suffix) →
/// (dtype, elements), and their bytes.
fn check_bundle(folder: &Path, name: &str) -> (BTreeMap<String, (u64, u64)>, u64) {
    let index = read_index(&folder.join(format!("{name}-1.index")));
    let data = std::fs::read(folder.join(format!("{name}-1.data-00000-of-00001"))).unwrap();
    let mut by_offset: Vec<(&String, &Entry)> = index.iter().collect();
    by_offset.sort_by_key(|(_, e)| e.offset);
    let mut end = 0;
    let (mut variables, mut payload) = (BTreeMap::new(), 0);
    for (key, entry) in by_offset {
        assert_eq!(
            (entry.offset, entry.shard),
            (end, 0),
            "{name}: {key} follows the last"
        );
        end += entry.size;
        let bytes = &data[entry.offset as usize..end as usize];
        if key == "_CHECKPOINTABLE_OBJECT_GRAPH" {
            assert_eq!((entry.dtype, entry.shape.len()), (7, 0), "a string scalar");
            let mut at = 0;
            let len = varint(bytes, &mut at);
            assert_eq!(
                at as u64 + 4 + len,
                entry.size,
                "{name}: the graph's framing"
            );
            let length_crc = crc32c::crc32c(&(len as u32).to_le_bytes());
            assert_eq!(fixed32(bytes, at), masked(length_crc));
            let crc = crc32c::crc32c_append(length_crc, &bytes[at..at + 4]);
            let crc = crc32c::crc32c_append(crc, &bytes[at + 4..]);
            assert_eq!(entry.crc, Some(masked(crc)), "{name}: the graph's CRC");
            continue;
        }
        assert_eq!(
            entry.crc,
            Some(masked(crc32c::crc32c(bytes))),
            "{name}: {key}'s CRC"
        );
        let key = key.strip_suffix("/.ATTRIBUTES/VARIABLE_VALUE").unwrap();
        if key == "save_counter" {
            assert_eq!(
                (entry.dtype, entry.shape.len(), bytes),
                (9, 0, &1u64.to_le_bytes()[..])
            );
            continue;
        }
        assert_eq!(entry.shape.len(), 1, "{name}: {key} is 1-D");
        variables.insert(key.to_string(), (entry.dtype, entry.shape[0]));
        payload += entry.size;
    }
    assert_eq!(end, data.len() as u64, "{name}: nothing after the graph");
    (variables, payload)
}

/// `framework: tensorflow` saves each shard as `tf.train.Checkpoint(**state).save` does: two
/// files of TensorFlow 2.21's sizes (measured by saving the same states with TensorFlow itself)
/// and the folder's `checkpoint` file, whose index a reader of its own here decodes and checks
/// against the data; nothing else is left (no temporary names); the loads read them back.
#[test]
fn tensorflow_shards_are_tf_checkpoint_bundles_of_tensorflows_own_sizes() {
    let tmp = Scratch::new("ckpt-tf");
    let tf = ["++workload.framework=tensorflow"];
    // DLIO's test_checkpoint_epoch states (legacy lists) and the tiny llama (ZeRO 3, 2 ranks).
    let legacy: Vec<String> = strings(&[
        "++workload.framework=tensorflow",
        "++workload.workflow.generate_data=False",
        "++workload.workflow.train=False",
        "++workload.workflow.checkpoint=True",
        "++workload.model.model_size=1024",
        "++workload.model.optimization_groups=[1024, 128]",
        "++workload.model.num_layers=2",
        "++workload.model.layer_parameters=[16]",
        "++workload.checkpoint.num_checkpoints_write=1",
        "++workload.checkpoint.num_checkpoints_read=1",
        "++workload.checkpoint.time_between_checkpoints=0",
        &format!(
            "++workload.checkpoint.checkpoint_folder={}",
            tmp.s("ckpt-legacy")
        ),
        &format!("++hydra.run.dir={}", tmp.s("out-legacy")),
    ]);
    run_quiet(&tmp.path, 1, &legacy).ok();
    run_quiet(&tmp.path, 2, &tiny_words(&tmp, "llama", 1, 1, &tf)).ok();

    // Sizes of TensorFlow 2.21's own saves of the same states (tensorflow-cpu 2.21.0,
    // tf.train.Checkpoint(**state).save, states built as DLIO's base_checkpointing.py builds
    // them; and benches/tf_checkpoint_check.py found TensorFlow's save of these very files'
    // tensors byte-identical).
    let shard = |name: &str, index: u64, data: u64| {
        [
            (format!("{name}.pb-1.index"), index),
            (format!("{name}.pb-1.data-00000-of-00001"), data),
        ]
    };
    // `checkpoint` names the last shard a rank saved: 57 bytes + 2 × the name.
    let last = "zero_pp_rank_0_mp_rank_0_optim_states.pb-1";
    let mut legacy_files: BTreeMap<String, u64> = [
        shard("model_states-0", 253, 1212),
        shard("zero_pp_rank_0_mp_rank_0_model_states", 251, 239),
        shard("zero_pp_rank_0_mp_rank_0_optim_states", 468, 3976),
    ]
    .into_iter()
    .flatten()
    .collect();
    legacy_files.insert("checkpoint".into(), 57 + 2 * last.len() as u64);
    let folder = tmp.join("ckpt-legacy/global_epoch1_step1");
    assert_eq!(files_in(&folder), legacy_files);
    assert_eq!(
        std::fs::read_to_string(folder.join("checkpoint")).unwrap(),
        format!("model_checkpoint_path: \"{last}\"\nall_model_checkpoint_paths: \"{last}\"\n")
    );
    let (optimizer, bytes) = check_bundle(&folder, "zero_pp_rank_0_mp_rank_0_optim_states.pb");
    let int8 = |n: u64| (6, n);
    assert_eq!(
        optimizer,
        BTreeMap::from([
            ("0/a".to_string(), int8(1024)),
            ("0/b".to_string(), int8(1024)),
            ("1/a".to_string(), int8(128)),
            ("1/b".to_string(), int8(128)),
            ("combined".to_string(), int8(1152)),
        ])
    );
    assert_eq!(bytes, 3 * 1152);
    // The layers share one dict: its variable is saved once, under the first layer.
    let (layers, _) = check_bundle(&folder, "zero_pp_rank_0_mp_rank_0_model_states.pb");
    assert_eq!(layers, BTreeMap::from([("1/0".to_string(), int8(16))]));
    let (model, _) = check_bundle(&folder, "model_states-0.pb");
    assert_eq!(model, BTreeMap::from([("a".to_string(), int8(1024))]));

    let folder = tmp.join("ckpt-llama/global_epoch1_step1");
    let found = files_in(&folder);
    let oracle = dlio_geometry(&tiny_model(2, json!({})));
    let mut payload = 0;
    for (name, bytes) in oracle_files(&oracle) {
        let name = name.strip_suffix(".pt").unwrap();
        let (variables, saved) = check_bundle(&folder, &format!("{name}.pb"));
        assert_eq!(saved, bytes, "{name}: DLIO's payload");
        payload += saved;
        let (index, data) = if name.ends_with("optim_states") {
            // fp32 (1): [n, 5h, n, 5h, n, 5h] with n = parameters ÷ 2.
            assert!(
                variables.values().all(|&(dtype, _)| dtype == 1),
                "{variables:?}"
            );
            (531, 9_780_255)
        } else {
            // fp16 (19): layers 0..=4 as {"{layer}": {"{tensor}": …}}, sharded over 2 ranks.
            assert!(
                variables.values().all(|&(dtype, _)| dtype == 19),
                "{variables:?}"
            );
            assert_eq!(variables["0/0"].1, 256 * 1000 / 2, "the embedding");
            assert_eq!(variables.len(), 1 + 6 + 6 + 1 + 1);
            (1015, 1_628_669)
        };
        for (suffix, size) in [("index", index), ("data-00000-of-00001", data)] {
            let file = format!("{name}.pb-1.{suffix}");
            assert_eq!(found.get(&file), Some(&size), "{file}: TensorFlow's size");
        }
    }
    assert_eq!(found.len(), 2 * 4 + 1, "{found:?}");
    let report = read_json(&tmp.join("out-llama/report.json"));
    let list = at(&report, "/checkpoints/list").as_array().unwrap();
    assert_eq!(list.len(), 2, "a save and a load: {list:?}");
    for checkpoint in list {
        assert_eq!(
            int(checkpoint, "/bytes"),
            payload,
            "the payload: {checkpoint}"
        );
    }
}

/// A load checks every tensor against the index, as TensorFlow's restore does: one byte changed
/// in a tensor fails the run naming the shard's files.
#[test]
fn a_tensorflow_shard_with_a_changed_byte_fails_the_load_naming_it() {
    let tmp = Scratch::new("ckpt-tf-changed");
    let tf = ["++workload.framework=tensorflow"];
    run_quiet(&tmp.path, 1, &tiny_words(&tmp, "a", 1, 0, &tf)).ok();
    let data = tmp.join(
        "ckpt-a/global_epoch1_step1/zero_pp_rank_0_mp_rank_0_optim_states.pb-1.data-00000-of-00001",
    );
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[1000] ^= 0x40;
    std::fs::write(&data, bytes).unwrap();
    let mut words = tiny_words(&tmp, "a", 0, 1, &tf);
    words.retain(|w| !w.starts_with("++hydra.run.dir="));
    words.push(format!("++hydra.run.dir={}", tmp.s("out-read")));
    run_quiet(&tmp.path, 1, &words)
        .fails(1)
        .says(&[&data.display().to_string(), "do not match"]);
}
