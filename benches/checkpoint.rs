//! Checkpoint benchmarks (`cargo bench --bench checkpoint [-- c1|c2|c3]`), on the disk that holds
//! `$DLIO_BENCH_DIR` (default target/bench-data; not tmpfs), each against fio doing the same I/O
//! on the same files, rounds interleaved, medians:
//!
//! - C1 write: 4 ranks each saving a 1 GiB shard with fsync (a checkpoint-only run of a model of
//!   1 GiB per rank, ZeRO 1), against fio writing the same four files with 4 jobs, 4 MiB
//!   requests (dlio-rs's), `--end_fsync=1`. Target: dlio-rs's GiB/s (all bytes over the slowest
//!   rank's time) ≥ 90% of fio's.
//! - C2 read: loading that checkpoint, evicted from the page cache first, against fio reading the
//!   same files with 4 jobs and 4 MiB requests after invalidating their cache. Target ≥ 90%.
//! - C3 memory: peak RSS of a 16 GiB checkpoint of 4 ranks (saved with fsync, then loaded) stays
//!   under 64 MiB plus the ranks' buffers (4 × 4 MiB).

mod common;

use std::path::Path;
use std::process::Command;

use common::*;

const RANKS: u64 = 4;
const ROUNDS: usize = 5;
const GIB: f64 = (1u64 << 30) as f64;
/// dlio-rs's request size (src/checkpoint/transfer.rs CHUNK_BYTES), given to fio too.
const REQUEST: &str = "4M";

/// A checkpoint-only run of `RANKS` ranks, each saving (or loading) one `shard`-byte file.
fn checkpoint_words(folder: &Path, out: &Path, shard: u64, writes: u64, reads: u64) -> Vec<String> {
    let mut w = words(&[
        "-n",
        "4",
        "workload=default",
        "++workload.workflow.train=False",
        "++workload.workflow.checkpoint=True",
        "++workload.model.type=cnn",
        // ZeRO 1: every rank writes its `model_states-{rank}.pt` (ZeRO 0: rank 0 alone).
        "++workload.model.parallelism.zero_stage=1",
        "++workload.checkpoint.fsync=True",
        "++workload.checkpoint.time_between_checkpoints=0",
    ]);
    w.push(format!("++workload.model.model_size_bytes={shard}"));
    w.push(format!(
        "++workload.checkpoint.num_checkpoints_write={writes}"
    ));
    w.push(format!(
        "++workload.checkpoint.num_checkpoints_read={reads}"
    ));
    w.push(format!(
        "++workload.checkpoint.checkpoint_folder={}",
        folder.display()
    ));
    w.push(format!("++hydra.run.dir={}", out.display()));
    w
}

/// The GiB/s report.json gives the first save and the first load (MLPerf's rating).
fn rates(report: &serde_json::Value) -> (Option<f64>, Option<f64>) {
    let list = report["checkpoints"]["list"].as_array().unwrap();
    let of = |op: &str| {
        list.iter()
            .find(|c| c["operation"] == op)
            .map(|c| c["gib_per_second"].as_f64().unwrap())
    };
    (of("save"), of("load"))
}

/// The shard files of the checkpoint in `folder` (the 1 GiB model files of the four ranks).
fn shard_files(folder: &Path) -> Vec<String> {
    (0..RANKS)
        .map(|r| {
            folder
                .join(format!("global_epoch1_step1/model_states-{r}.pt"))
                .display()
                .to_string()
        })
        .collect()
}

/// fio with one job per file, `rw` = write (with --end_fsync) or read; its aggregate GiB/s.
fn fio(files: &[String], rw: &str, size: u64) -> f64 {
    let mut cmd = Command::new("fio");
    cmd.args([
        "--ioengine=psync",
        "--group_reporting",
        "--output-format=json",
    ])
    .arg(format!("--rw={rw}"))
    .arg(format!("--bs={REQUEST}"))
    .arg(format!("--size={size}"));
    if rw == "write" {
        cmd.arg("--end_fsync=1");
    } else {
        // Drop the files' cached pages before reading, as dlio-rs evicts them before a load.
        cmd.arg("--invalidate=1");
    }
    for (i, f) in files.iter().enumerate() {
        cmd.arg(format!("--name=rank{i}"))
            .arg(format!("--filename={f}"));
    }
    let ran = cmd.output().expect("starting fio (apt install fio)");
    assert!(
        ran.status.success(),
        "fio failed: {}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&ran.stdout).expect("fio's JSON");
    json["jobs"][0][rw]["bw_bytes"].as_f64().unwrap() / GIB
}

fn c1_c2(dir: &Path, measure_write: bool) -> bool {
    let folder = dir.join("checkpoint-c1");
    let shard = 1u64 << 30;
    let files = shard_files(&folder);
    let fio_now = || {
        if measure_write {
            // fio writes fresh files, as dlio-rs does.
            for f in &files {
                let _ = std::fs::remove_file(f);
            }
            fio(&files, "write", shard)
        } else {
            fio(&files, "read", shard)
        }
    };
    let (mut ours, mut theirs) = (vec![], vec![]);
    for round in 0..ROUNDS {
        // Odd rounds run fio first (on the files of the round before), even rounds dlio-rs.
        let fio_first = round % 2 == 1;
        let before = fio_first.then(fio_now);
        let _ = std::fs::remove_dir_all(&folder);
        let out = dir.join(format!("checkpoint-c1-out-{round}"));
        // dlio-rs saves, then loads after evicting the files from the page cache.
        let (report, _) = dlio(&checkpoint_words(&folder, &out, shard, 1, 1));
        let (save, load) = rates(&report);
        let fio_rate = before.unwrap_or_else(fio_now);
        let ours_rate = if measure_write { save } else { load }.unwrap();
        println!(
            "{} round {round}: dlio-rs {ours_rate:.3} GiB/s, fio {fio_rate:.3} GiB/s{}",
            if measure_write { "C1 write" } else { "C2 read" },
            if fio_first { " (fio first)" } else { "" }
        );
        ours.push(ours_rate);
        theirs.push(fio_rate);
    }
    let _ = std::fs::remove_dir_all(&folder);
    let (ours, theirs) = (median(ours), median(theirs));
    let met = ours >= 0.9 * theirs;
    println!(
        "{}: 4 ranks × 1 GiB{}: dlio-rs {ours:.3} GiB/s, fio {theirs:.3} GiB/s, {:.1}% (target ≥ 90%) — {}",
        if measure_write { "C1 write" } else { "C2 read" },
        if measure_write { " with fsync" } else { ", cache evicted" },
        100.0 * ours / theirs,
        verdict(met)
    );
    met
}

fn c1(dir: &Path) -> bool {
    c1_c2(dir, true)
}

fn c2(dir: &Path) -> bool {
    c1_c2(dir, false)
}

fn c3(dir: &Path) -> bool {
    let folder = dir.join("checkpoint-c3");
    let _ = std::fs::remove_dir_all(&folder);
    let out = dir.join("checkpoint-c3-out");
    let mut args = vec![
        "-f".to_string(),
        "%M".into(),
        DLIO_RS.into(),
        "run".into(),
        "-q".into(),
    ];
    args.extend(checkpoint_words(&folder, &out, 4 << 30, 1, 1));
    let ran = Command::new("/usr/bin/time")
        .args(&args)
        .output()
        .expect("starting /usr/bin/time");
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let stderr = String::from_utf8_lossy(&ran.stderr);
    let kib: f64 = stderr
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("peak RSS from /usr/bin/time");
    let _ = std::fs::remove_dir_all(&folder);
    let rss_mib = kib / 1024.0;
    let limit = 64.0 + 4.0 * 4.0;
    let met = rss_mib <= limit;
    println!(
        "C3 memory: 16 GiB checkpoint of 4 ranks saved with fsync and loaded: peak RSS {rss_mib:.1} MiB (target ≤ {limit} MiB) — {}",
        verdict(met)
    );
    met
}

fn main() {
    run_selected(&[("c1", c1), ("c2", c2), ("c3", c3)]);
}
