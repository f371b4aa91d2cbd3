//! What the benchmarks share: running dlio-rs, generating datasets once, and summing up.
#![allow(dead_code)] // each benchmark uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

pub const DLIO_RS: &str = env!("CARGO_BIN_EXE_dlio-rs");
pub const MIB: f64 = 1048576.0;

/// Runs `dlio-rs run -q WORDS`; returns its report.json and the process's wall time.
pub fn dlio(words: &[String]) -> (serde_json::Value, f64) {
    let started = Instant::now();
    // Its stderr holds the page-cache warnings every page-cached benchmark earns; shown on failure.
    let ran = Command::new(DLIO_RS)
        .arg("run")
        .arg("-q")
        .args(words)
        .output()
        .expect("starting dlio-rs");
    let wall = started.elapsed().as_secs_f64();
    assert!(
        ran.status.success(),
        "dlio-rs failed: {words:?}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let out = words
        .iter()
        .find_map(|w| w.strip_prefix("++hydra.run.dir="))
        .map(PathBuf::from)
        .expect("benchmarks set hydra.run.dir");
    let report = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    (
        serde_json::from_str(&report).expect("report.json is JSON"),
        wall,
    )
}

pub fn words(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// Runs a generate-only `dlio-rs run -q workload=default SETTINGS` (which name the data folder);
/// returns its wall time in seconds.
pub fn generate(settings: &[String]) -> f64 {
    let mut w = words(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.train=False",
    ]);
    w.extend(settings.iter().cloned());
    let started = Instant::now();
    let status = Command::new(DLIO_RS)
        .arg("run")
        .arg("-q")
        .args(&w)
        .status()
        .expect("starting dlio-rs");
    assert!(status.success(), "generation failed: {w:?}");
    started.elapsed().as_secs_f64()
}

/// Generates a dataset once (kept between benchmark runs when its marker is present).
pub fn generated_dataset(dir: &Path, name: &str, settings: &[String]) -> PathBuf {
    let folder = dir.join(name);
    let marker = folder.join(".complete");
    if !marker.exists() {
        eprintln!("generating {}", folder.display());
        let mut w = settings.to_vec();
        w.push(format!(
            "++workload.dataset.data_folder={}",
            folder.display()
        ));
        generate(&w);
        std::fs::write(&marker, b"").unwrap();
    }
    folder
}

/// A benchmark: runs with its data under the given folder, true when its target is met.
pub type Bench = fn(&Path) -> bool;

/// Runs the benchmarks named on the command line (all when none is), with their data in
/// $DLIO_BENCH_DIR (default target/bench-data); exits 1 when any target is missed.
pub fn run_selected(all: &[(&str, Bench)]) -> ! {
    let selected: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let dir = PathBuf::from(
        std::env::var("DLIO_BENCH_DIR").unwrap_or_else(|_| "target/bench-data".into()),
    );
    std::fs::create_dir_all(&dir).unwrap();
    let mut ok = true;
    for (name, bench) in all {
        if selected.is_empty() || selected.iter().any(|s| s == name) {
            ok &= bench(&dir);
        }
    }
    std::process::exit(if ok { 0 } else { 1 });
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

pub fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "MISS"
    }
}

/// Measured rounds: `default`, or `DLIO_BENCH_ROUNDS` (a noisy disk may need more). A value that
/// is not a whole number of 1 or more is a usage error (exit 2), not the default in silence:
/// the figures would not be of the rounds asked for, and none would have no median.
pub fn rounds(default: usize) -> usize {
    match std::env::var("DLIO_BENCH_ROUNDS") {
        Err(_) => default,
        Ok(value) => value.trim().parse().ok().filter(|&n| n >= 1).unwrap_or_else(|| {
            eprintln!("DLIO_BENCH_ROUNDS={value:?}: give the rounds to measure, a whole number of 1 or more");
            std::process::exit(2);
        }),
    }
}
