//! Multi-process benchmarks (`cargo bench --features mpi --bench mpi [-- p7|p8]`), each measured
//! side by side with its single-process baseline in one run, rounds interleaved, medians:
//!
//! - P7 barrier: 2000 steps of 5 ms compute on storage that costs nothing (the synthetic format),
//!   4 processes × 1 rank and 2 processes × 4 thread ranks, against the same world as threads of
//!   one process. Targets: AU ≥ 99%, epoch wall within 2% of steps × compute.
//! - P8 start-up: 8 processes on a 1,000,000-file dataset whose names follow DLIO's scheme. Target:
//!   every rank's first batch < 2 s after the first process started (and the whole mpirun,
//!   launch and exit included, is shown beside it); the names are checked, never listed; and the
//!   peak memory of every process does not grow with the number of processes.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use common::*;

const DLIO_BENCHMARK: &str = env!("CARGO_BIN_EXE_dlio_benchmark");
const ROUNDS: usize = 3;

/// `mpirun -n P /usr/bin/time BIN ARGS` on this host; returns the wall time, report.json and
/// the peak RSS (KiB) of every process.
fn mpirun(
    processes: usize,
    bin: &str,
    args: &[String],
    out: &Path,
) -> (f64, serde_json::Value, Vec<u64>) {
    // Each process's /usr/bin/time writes its own file: lines forwarded by mpirun may interleave.
    let rss_dir = out.with_extension("rss");
    std::fs::create_dir_all(&rss_dir).unwrap();
    let timed = r#"exec /usr/bin/time -f %M -o "$0/$OMPI_COMM_WORLD_RANK" "$@""#;
    let started = Instant::now();
    let ran = Command::new("mpirun")
        .args([
            "--oversubscribe",
            "--allow-run-as-root",
            "--bind-to",
            "none",
        ])
        .args(["-n", &processes.to_string()])
        .args(["sh", "-c", timed])
        .arg(&rss_dir)
        .arg(bin)
        .args(args)
        .output()
        .expect("starting mpirun (install openmpi-bin)");
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "mpirun failed: {args:?}\n{stderr}");
    let rss = (0..processes)
        .map(|p| {
            let kib = std::fs::read_to_string(rss_dir.join(p.to_string())).unwrap();
            kib.trim()
                .parse()
                .expect("peak RSS written by /usr/bin/time")
        })
        .collect();
    let report = std::fs::read_to_string(out.join("report.json")).expect("report.json");
    (wall, serde_json::from_str(&report).unwrap(), rss)
}

fn p7_words(world: u64, out: &Path) -> Vec<String> {
    let mut w = words(&[
        "workload=default",
        "++workload.dataset.format=synthetic",
        "++workload.workflow.generate_data=False",
        "++workload.workflow.evaluation=False",
        "++workload.dataset.num_samples_per_file=1",
        "++workload.reader.batch_size=1",
        "++workload.reader.read_threads=1",
        "++workload.train.computation_time=0.005",
        "++workload.train.epochs=1",
    ]);
    w.push(format!(
        "++workload.dataset.num_files_train={}",
        2000 * world
    ));
    w.push(format!("++hydra.run.dir={}", out.display()));
    w
}

/// AU and epoch wall ÷ (steps × compute) of a P7 run's report.
fn p7_figures(report: &serde_json::Value) -> (f64, f64) {
    let epoch = &report["epochs"][0];
    let steps = epoch["steps"].as_f64().unwrap();
    (
        report["train"]["au_mean_percent"].as_f64().unwrap(),
        epoch["duration_seconds"].as_f64().unwrap() / (steps * 0.005),
    )
}

fn p7(dir: &Path) -> bool {
    let mut ok = true;
    for (processes, local) in [(4usize, 1usize), (2, 4)] {
        let world = (processes * local) as u64;
        let (mut mpi_au, mut mpi_wall, mut th_au, mut th_wall) = (vec![], vec![], vec![], vec![]);
        for round in 0..ROUNDS {
            let out = dir.join(format!("p7-mpi-{processes}x{local}-{round}"));
            let mut args = words(&["run", "-q", "-n", &local.to_string()]);
            args.extend(p7_words(world, &out));
            let (_, report, _) = mpirun(processes, DLIO_RS, &args, &out);
            let (au, wall) = p7_figures(&report);
            mpi_au.push(au);
            mpi_wall.push(wall);
            let out = dir.join(format!("p7-threads-{world}-{round}"));
            let mut w = words(&["-n", &world.to_string()]);
            w.extend(p7_words(world, &out));
            let (report, _) = dlio(&w);
            let (au, wall) = p7_figures(&report);
            th_au.push(au);
            th_wall.push(wall);
            println!(
                "P7 {processes} processes × {local} ranks, round {round}: MPI AU {:.2}% wall/ideal {:.4}; one process × {world} threads: AU {:.2}% wall/ideal {:.4}",
                mpi_au[round], mpi_wall[round], th_au[round], th_wall[round]
            );
        }
        let (au, wall) = (median(mpi_au), median(mpi_wall));
        let met = au >= 99.0 && wall <= 1.02;
        ok &= met;
        println!(
            "P7 {processes} processes × {local} ranks: AU {au:.2}% (target ≥ 99), epoch wall {:.2}% of steps × compute \
             (target ≤ 102%); one process × {world} threads: AU {:.2}%, {:.2}% — {}",
            wall * 100.0,
            median(th_au),
            median(th_wall) * 100.0,
            verdict(met)
        );
    }
    ok
}

const P8_FILES: u64 = 1_000_000;

fn p8(dir: &Path) -> bool {
    let settings = words(&[
        "++workload.dataset.format=npy",
        "++workload.dataset.num_files_train=1000000",
        "++workload.dataset.num_files_eval=0",
        "++workload.dataset.num_samples_per_file=1",
        "++workload.dataset.record_length_bytes=256",
        "++workload.dataset.record_length_bytes_stdev=0",
    ]);
    let data = generated_dataset(dir, "p8-1m-npy", &settings);
    let run_words = |out: &Path| {
        let mut w = words(&[
            "workload=default",
            "++workload.workflow.generate_data=False",
            "++workload.workflow.evaluation=False",
            "++workload.train.computation_time=0",
            "++workload.train.total_training_steps=4",
            "++workload.reader.batch_size=1",
        ]);
        w.extend(settings.iter().cloned());
        w.push(format!("++workload.dataset.data_folder={}", data.display()));
        w.push(format!("++hydra.run.dir={}", out.display()));
        w
    };
    let mut ok = true;
    let mut first_batch = Vec::new();
    let mut walls = Vec::new();
    let mut peaks: Vec<(usize, u64)> = Vec::new();
    for round in 0..ROUNDS {
        for processes in [1usize, 8] {
            let out = dir.join(format!("p8-{processes}-{round}"));
            let (wall, report, rss) = mpirun(processes, DLIO_BENCHMARK, &run_words(&out), &out);
            let names = &report["startup"]["file_names"][0];
            assert_eq!(
                names["method"], "scheme",
                "the names must not be listed: {names}"
            );
            assert!(names["listed"].is_null());
            let max_rss = *rss.iter().max().unwrap();
            peaks.push((processes, max_rss));
            if processes == 8 {
                first_batch.push(report["startup"]["first_batch_seconds"].as_f64().unwrap());
                walls.push(wall);
            }
            println!(
                "P8 round {round}, {processes} process(es), {P8_FILES} files: first batch {:.3} s after start, mpirun wall {wall:.3} s, \
                 {} names checked, peak RSS per process {:?} KiB",
                report["startup"]["first_batch_seconds"].as_f64().unwrap(),
                names["checked"],
                rss
            );
        }
    }
    let first = median(first_batch);
    let met = first < 2.0;
    ok &= met;
    let peak = |p: usize| {
        median(
            peaks
                .iter()
                .filter(|(n, _)| *n == p)
                .map(|(_, r)| *r as f64)
                .collect(),
        )
    };
    let (one, eight) = (peak(1), peak(8));
    let flat = eight <= one * 1.10;
    ok &= flat;
    println!(
        "P8 8 processes, {P8_FILES} files by scheme: first batch on every rank {first:.3} s (target < 2 s), whole mpirun {:.3} s — {}; \
         peak RSS of the largest process: 1 process {:.1} MiB, 8 processes {:.1} MiB — {}",
        median(walls),
        verdict(met),
        one / 1024.0,
        eight / 1024.0,
        verdict(flat)
    );
    ok
}

fn main() {
    run_selected(&[("p7", p7), ("p8", p8)]);
}
