//! Generation speed per format, each measured beside a minimal loop that writes the same files
//! (same names, same sizes, side files included) with the same number of threads, both flushed at
//! the end, rounds interleaved. Formats that need no encoding must reach 80% of the loop's rate;
//! encoded ones (compressed, images, text) report their rate.
//!
//!     DLIO_BENCH_DIR=/dev/shm/bench cargo bench --bench formats [-- npy hdf5 ...]
//!
//! On tmpfs the comparison is of CPU cost alone (the strictest); on a disk both sides wait for
//! write-back, which varies from minute to minute.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

mod common;
use common::*;

struct Case {
    name: &'static str,
    format: &'static str,
    /// Encoded formats have no speed target: encoding is work DLIO does too.
    encoded: bool,
    settings: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case { name: "npy", format: "npy", encoded: false, settings: &["++workload.dataset.num_files_train=64", "++workload.dataset.record_length_bytes=4194304"] },
    Case { name: "npz", format: "npz", encoded: false, settings: &["++workload.dataset.num_files_train=64", "++workload.dataset.record_length_bytes=4194304"] },
    Case { name: "hdf5", format: "hdf5", encoded: false, settings: &["++workload.dataset.num_files_train=64", "++workload.dataset.num_samples_per_file=4", "++workload.dataset.record_length_bytes=1048576"] },
    Case { name: "tfrecord", format: "tfrecord", encoded: false, settings: &["++workload.dataset.num_files_train=64", "++workload.dataset.num_samples_per_file=16", "++workload.dataset.record_length_bytes=262144"] },
    Case { name: "indexed_binary", format: "indexed_binary", encoded: false, settings: &["++workload.dataset.num_files_train=16", "++workload.dataset.num_samples_per_file=64", "++workload.dataset.record_length_bytes=262144"] },
    Case { name: "parquet", format: "parquet", encoded: false, settings: &["++workload.dataset.num_files_train=16", "++workload.dataset.num_samples_per_file=64", "++workload.dataset.parquet.columns=[{name: a, dtype: float32, size: 65536}, {name: b, dtype: float16, size: 1}]"] },
    Case { name: "npz-zip", format: "npz", encoded: true, settings: &["++workload.dataset.num_files_train=16", "++workload.dataset.record_length_bytes=4194304", "++workload.dataset.compression=zip"] },
    Case { name: "hdf5-gzip", format: "hdf5", encoded: true, settings: &["++workload.dataset.num_files_train=16", "++workload.dataset.num_samples_per_file=4", "++workload.dataset.record_length_bytes=1048576", "++workload.dataset.compression=gzip"] },
    Case { name: "csv", format: "csv", encoded: true, settings: &["++workload.dataset.num_files_train=16", "++workload.dataset.num_samples_per_file=4", "++workload.dataset.record_length_bytes=262144"] },
    Case { name: "jpeg", format: "jpeg", encoded: true, settings: &["++workload.dataset.num_files_train=32", "++workload.dataset.record_length_bytes=1048576"] },
    Case { name: "png", format: "png", encoded: true, settings: &["++workload.dataset.num_files_train=32", "++workload.dataset.record_length_bytes=1048576"] },
];

/// Every file below `folder` (side files included) with its size, relative to `folder`.
fn files_below(folder: &Path) -> Vec<(PathBuf, usize)> {
    let mut found = Vec::new();
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                pending.push(path);
            } else {
                let size = entry.metadata().unwrap().len() as usize;
                found.push((path.strip_prefix(folder).unwrap().to_path_buf(), size));
            }
        }
    }
    found
}

/// Writes `files` below `folder` with `threads` threads, plain create + write, then syncfs;
/// returns the seconds taken.
fn minimal_writes(folder: &Path, files: &[(PathBuf, usize)], threads: usize) -> f64 {
    let started = Instant::now();
    for (path, _) in files {
        std::fs::create_dir_all(folder.join(path).parent().unwrap()).unwrap();
    }
    let largest = files.iter().map(|f| f.1).max().unwrap_or(0);
    std::thread::scope(|s| {
        for thread in 0..threads {
            s.spawn(move || {
                let data = vec![0x5au8; largest];
                for (path, size) in files.iter().skip(thread).step_by(threads) {
                    File::create(folder.join(path))
                        .unwrap()
                        .write_all(&data[..*size])
                        .unwrap();
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

fn settings(case: &Case, folder: &Path) -> Vec<String> {
    let mut w = words(&[
        &format!("++workload.dataset.format={}", case.format),
        &format!("++workload.dataset.data_folder={}", folder.display()),
        "++workload.dataset.num_files_eval=0",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.dataset.num_subfolders_eval=0",
    ]);
    w.extend(words(case.settings));
    w
}

fn measure(case: &Case, dir: &Path) -> bool {
    let supported = dlio_rs::config::Format::SUPPORTED
        .iter()
        .any(|f| f.to_string() == case.format);
    if !supported {
        println!("{:<15} not supported by this build", case.name);
        return true;
    }
    let folder = dir.join(format!("gen-{}", case.name));
    remove(&folder);
    generate(&settings(case, &folder));
    let files = files_below(&folder);
    let bytes: usize = files.iter().map(|f| f.1).sum();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (mut ours, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        remove(&folder);
        plain.push(bytes as f64 / minimal_writes(&folder, &files, threads));
        remove(&folder);
        ours.push(bytes as f64 / generate(&settings(case, &folder)));
    }
    remove(&folder);
    let ratios: Vec<f64> = ours.iter().zip(&plain).map(|(o, p)| o / p).collect();
    let ratio = median(ratios.clone());
    let ok = case.encoded || ratio >= 0.8;
    let rounds: Vec<String> = ratios
        .iter()
        .map(|r| format!("{:.0}%", r * 100.0))
        .collect();
    println!(
        "{:<15} {:>4} files {:>8.1} MiB   dlio-rs {:>7.1} MiB/s {:>7.1} files/s   plain {:>7.1} MiB/s   {:>5.1}% (rounds {})  {}",
        case.name,
        files.len(),
        bytes as f64 / MIB,
        median(ours.clone()) / MIB,
        median(ours) / bytes as f64 * files.len() as f64,
        median(plain) / MIB,
        ratio * 100.0,
        rounds.join(" "),
        if case.encoded { "encoded: rate reported" } else { verdict(ok) }
    );
    ok
}

fn main() {
    let selected: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let dir = PathBuf::from(
        std::env::var("DLIO_BENCH_DIR").unwrap_or_else(|_| "target/bench-data".into()),
    );
    std::fs::create_dir_all(&dir).unwrap();
    println!("generation rate against plainly writing the same files (medians of 3 interleaved rounds; target ≥ 80% unless encoded)");
    let mut ok = true;
    for case in CASES {
        if selected.is_empty() || selected.iter().any(|s| s == case.name) {
            ok &= measure(case, &dir);
        }
    }
    std::process::exit(if ok { 0 } else { 1 });
}
