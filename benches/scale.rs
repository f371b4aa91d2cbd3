//! Targets at scale (issue 4): memory that does not grow with the file or thread count, start-up
//! without listing, and generation at the file system's rate. Each measured beside its baseline
//! in one invocation.
//!
//!   cargo bench --bench scale              # s1, s2, s3
//!   cargo bench --bench scale -- s1 s3     # some
//!
//! - S1: `dlio-rs plan` for 100 M samples and 64 accelerators: peak RSS ≤ 32 MiB, the first
//!   batch of any rank (0, 31, 63) in < 10 ms.
//! - S2: generating 1,000,000 npy files of one 4 KiB sample: files/s of dlio-rs beside a minimal
//!   loop that creates, writes and flushes the same files (same names, sizes and thread count),
//!   in interleaved rounds; target ≥ 80% of the loop's rate.
//! - S3: training over those files, 8 accelerators × 1, 8 and 64 read threads, 1 epoch, compute
//!   0: peak RSS ≤ 128 MiB; with 64 threads within 10% of 1 thread beyond the read buffers (a bare
//!   thread's cost is measured and shown too); first batch < 1 s.
//!
//! Data goes to $DLIO_BENCH_DIR (default target/bench-data; a tmpfs such as /dev/shm shows
//! dlio-rs's own cost best). $DLIO_BENCH_FILES replaces the million, for a quick look.
//! Exit status 1 when a target is missed.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::Instant;

mod common;
use common::*;

fn files() -> u64 {
    std::env::var("DLIO_BENCH_FILES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000)
}

/// The S2/S3 dataset: one 4 KiB sample per npy file, all in `train/`.
fn small_file_settings(data: &Path) -> Vec<String> {
    let mut w = words(&[
        "++workload.dataset.format=npy",
        "++workload.dataset.num_samples_per_file=1",
        "++workload.dataset.record_length_bytes=4096",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.dataset.num_files_eval=0",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.workflow.evaluation=False",
    ]);
    w.push(format!("++workload.dataset.num_files_train={}", files()));
    w.push(format!("++workload.dataset.data_folder={}", data.display()));
    w
}

fn status_line(field: &str, text: &str) -> f64 {
    text.split(field)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no '{field}' in: {text}"))
}

/// The duration after `field` in `plan`'s status line, which gives it at its scale (`38.9 µs`,
/// `1.20 ms`, `2.00 s`), in µs.
fn status_duration_us(field: &str, text: &str) -> f64 {
    let unit = text
        .split(field)
        .nth(1)
        .and_then(|rest| rest.split_whitespace().nth(1))
        .map(|unit| unit.trim_end_matches(';'));
    let scale = match unit {
        Some("µs") => 1.0,
        Some("ms") => 1e3,
        Some("s") => 1e6,
        other => panic!("'{field}' is not followed by a duration ({other:?}) in: {text}"),
    };
    status_line(field, text) * scale
}

fn s1(_dir: &Path) -> bool {
    println!("S1 plan for 100 M samples (100,000 files × 1,000), 64 accelerators");
    let mut ok = true;
    for rank in ["0", "31", "63"] {
        let ran = Command::new(DLIO_RS)
            .args([
                "plan",
                "workload=resnet50_h100",
                "-n",
                "64",
                "--rank",
                rank,
                "--head",
                "1",
                "++workload.dataset.num_files_train=100000",
                "++workload.dataset.num_samples_per_file=1000",
            ])
            .output()
            .expect("dlio-rs plan");
        let text = String::from_utf8_lossy(&ran.stdout);
        assert!(ran.status.success(), "{text}");
        let first_batch_us = status_duration_us("first batch in", &text);
        let rss = status_line("peak RSS", &text);
        let pass = rss <= 32.0 && first_batch_us < 10_000.0;
        ok &= pass;
        println!(
            "   rank {rank:>2}: plan built in {:.1} µs, first batch in {first_batch_us:.1} µs (target < 10 ms), peak RSS {rss:.1} MiB (target ≤ 32)  {}",
            status_duration_us("plan built in", &text),
            verdict(pass)
        );
    }
    ok
}

/// The baseline of S2: `threads` threads create, write and close their share of the files (file
/// `i` by thread `i mod threads`), then the file system is flushed, as dlio-rs does.
fn minimal_writes(folder: &Path, count: u64, size: usize, threads: u64) -> f64 {
    let started = Instant::now();
    let train = folder.join("train");
    std::fs::create_dir_all(&train).unwrap();
    let width = count.to_string().len();
    std::thread::scope(|s| {
        for thread in 0..threads {
            let train = &train;
            s.spawn(move || {
                let data = vec![0x5au8; size];
                for i in (thread..count).step_by(threads as usize) {
                    let name = train.join(format!("img_{i:0width$}_of_{count}.npy"));
                    File::create(&name).unwrap().write_all(&data).unwrap();
                }
            });
        }
    });
    let dir = File::open(folder).unwrap();
    // SAFETY: syncfs on a descriptor this function owns for the call.
    assert_eq!(unsafe { libc::syncfs(dir.as_raw_fd()) }, 0);
    started.elapsed().as_secs_f64()
}

fn remove(folder: &Path) {
    if folder.exists() {
        std::fs::remove_dir_all(folder).unwrap();
    }
}

fn s2(dir: &Path) -> bool {
    let count = files();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    println!(
        "S2 generating {count} npy files of a 4 KiB sample, beside a minimal create+write loop ({threads} threads each, both flushed at the end)"
    );
    let folder = dir.join("s2-gen");
    remove(&folder);
    // The loop writes files of the size dlio-rs writes: learned from one file.
    let probe = dir.join("s2-probe");
    remove(&probe);
    let mut w = small_file_settings(&probe);
    w.push("++workload.dataset.num_files_train=1".into());
    generate(&w);
    let size = std::fs::metadata(probe.join("train/img_0_of_1.npy"))
        .unwrap()
        .len() as usize;
    remove(&probe);

    let mut ratios = Vec::new();
    let (mut loop_rates, mut dlio_rates) = (Vec::new(), Vec::new());
    for round in 0..3 {
        let loop_seconds = minimal_writes(&folder, count, size, threads);
        remove(&folder);
        let dlio_seconds = generate(&small_file_settings(&folder));
        let (loop_rate, dlio_rate) = (count as f64 / loop_seconds, count as f64 / dlio_seconds);
        println!(
            "   round {}: loop {loop_rate:.0} files/s, dlio-rs {dlio_rate:.0} files/s ({:.1}%)",
            round + 1,
            100.0 * dlio_rate / loop_rate
        );
        ratios.push(dlio_rate / loop_rate);
        loop_rates.push(loop_rate);
        dlio_rates.push(dlio_rate);
        if round < 2 {
            remove(&folder);
        }
    }
    // The last dlio-rs round's files are S3's dataset.
    std::fs::write(folder.join(".complete"), b"").unwrap();
    let ratio = median(ratios);
    let ok = ratio >= 0.8;
    println!(
        "   median: dlio-rs {:.0} files/s ({:.1} MiB/s) vs loop {:.0} files/s: {:.1}% (target ≥ 80%)  {}",
        median(dlio_rates.clone()),
        median(dlio_rates) * size as f64 / MIB,
        median(loop_rates),
        ratio * 100.0,
        verdict(ok)
    );
    ok
}

/// Resident memory of this process now, in KiB.
fn rss_kib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status_line("VmRSS:", &status)
}

/// What one more thread that does nothing costs in resident memory, in MiB: its stack's touched
/// pages and its thread control block, a floor under any reader thread.
fn bare_thread_mib(threads: usize) -> f64 {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let before = rss_kib();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                barrier.wait();
            })
        })
        .collect();
    barrier.wait();
    let during = rss_kib();
    barrier.wait();
    for handle in handles {
        handle.join().unwrap();
    }
    (during - before) / 1024.0 / threads as f64
}

fn s3(dir: &Path) -> bool {
    let count = files();
    let accelerators = 8u64;
    let folder = dir.join("s2-gen");
    let data = generated_dataset(dir, "s2-gen", &small_file_settings(&folder));
    let size = std::fs::metadata(data.join("train").join(format!(
        "img_{:0w$}_of_{count}.npy",
        0,
        w = count.to_string().len()
    )))
    .unwrap()
    .len();
    let buffer_mib = size.next_multiple_of(4096) as f64 / MIB;
    println!(
        "S3 training over {count} files, {accelerators} accelerators, 1 epoch, compute 0, batch 4"
    );
    let thread_counts = [1u64, 8, 64];
    let mut rss = vec![Vec::new(); thread_counts.len()];
    let mut first_batch = vec![Vec::new(); thread_counts.len()];
    let mut rates = vec![Vec::new(); thread_counts.len()];
    for _round in 0..3 {
        for (k, threads) in thread_counts.iter().enumerate() {
            let mut w = words(&[
                "-n",
                "8",
                "workload=default",
                "++workload.workflow.generate_data=False",
                "++workload.train.epochs=1",
                "++workload.train.computation_time=0",
                "++workload.reader.batch_size=4",
            ]);
            w.extend(small_file_settings(&data));
            w.push(format!("++workload.reader.read_threads={threads}"));
            w.push(format!(
                "++hydra.run.dir={}",
                dir.join(format!("s3-out-{threads}")).display()
            ));
            let (report, _) = dlio(&w);
            rss[k].push(report["peak_rss_mib"].as_f64().unwrap());
            first_batch[k].push(report["startup"]["first_batch_seconds"].as_f64().unwrap());
            rates[k].push(report["epochs"][0]["samples_per_second"].as_f64().unwrap());
        }
    }
    let readers = |threads: u64| (accelerators * threads) as f64;
    let thread_mib = bare_thread_mib(512);
    let mut ok = true;
    let mut beyond = Vec::new();
    for (k, threads) in thread_counts.iter().enumerate() {
        let peak = median(rss[k].clone());
        let buffers = readers(*threads) * buffer_mib;
        let thread_cost = readers(*threads) * thread_mib;
        let first = median(first_batch[k].clone());
        let pass = peak <= 128.0 && first < 1.0;
        ok &= pass;
        beyond.push(peak - buffers);
        println!(
            "   {threads:>2} read threads: peak RSS {peak:.1} MiB (target ≤ 128; read buffers {buffers:.1}, {} threads at {:.1} KiB {thread_cost:.1}), first batch {:.0} ms (target < 1 s), {:.0} samples/s  {}",
            readers(*threads),
            thread_mib * 1024.0,
            first * 1000.0,
            median(rates[k].clone()),
            verdict(pass)
        );
    }
    let (one, sixty_four) = (beyond[0], beyond[2]);
    let growth = sixty_four / one - 1.0;
    let pass = growth <= 0.10;
    ok &= pass;
    println!(
        "   64 vs 1 read threads beyond the read buffers: {:.1} vs {:.1} MiB, {:+.1}% (target ≤ 10%)  {}",
        sixty_four,
        one,
        growth * 100.0,
        verdict(pass)
    );
    println!(
        "   (the {} more OS threads cost at least {:.1} MiB: a bare thread's stack and control block, measured above)",
        readers(64) - readers(1),
        (readers(64) - readers(1)) * thread_mib
    );
    ok
}

fn main() {
    run_selected(&[("s1", s1), ("s2", s2), ("s3", s3)]);
}
