//! Cold-storage benchmarks (issue 14's "Performance"): `cargo bench --bench cold [-- r1 … r7]`,
//! on the disk that holds `$DLIO_BENCH_DIR` (default target/bench-data; not tmpfs), or with
//! `DLIO_BENCH_ZRAM=GiB` (or `DLIO_BENCH_RAM_DEVICE=GiB`, a loop device) on a RAM-backed block
//! device made per shape ([`RamDevice`]).
//! Needs root (to drop the page cache) and fio.
//!
//! For each shape, a 1-epoch training run (compute 0, no evaluation) against fio reading the same
//! bytes with as many readers (ranks × read threads), `--ioengine=psync --invalidate=0
//! --fadvise_hint=0` (plain `pread`s, as dlio-rs issues), both with O_DIRECT
//! (`reader.odirect=True` against `--direct=1`) and buffered. Before every measurement the file
//! system is synced and the page cache dropped, the inodes kept ([`settle`]; for buffered reads,
//! after the host's cache is warmed: [`warm_host`]); all O_DIRECT rounds come first; each round
//! measures the tools in the order A B B A (who is A alternates from round to round), each
//! tool's two figures combined (same bytes: the harmonic mean of the rates); one unmeasured
//! warm-up round, then `DLIO_BENCH_ROUNDS` (default 3).
//!
//! On a device of fixed speed (`DLIO_BENCH_THROTTLE=bytes,requests`, [`throttle`]): every
//! measured process runs in one block-throttle group; per mode, the rounds above uncapped give
//! the CPU figures (and fio's payload and device requests), then each regime caps the group —
//! byte-bound, then request-bound — at a rate chosen so that fio's round lasts
//! `DLIO_BENCH_ROUND_SECONDS` (default 20: the throttle's first burst, about 0.1–0.2 s of the
//! cap, then weighs under 1 %), and `DLIO_BENCH_ROUNDS` rounds of A B (who is A alternating)
//! follow. Target per regime: dlio-rs ≥ 98 % of fio, device requests per MiB (the group's
//! counters) ≤ fio's + 2 %, the cap binding (fio below 80 % of its uncapped rate); uncapped:
//! CPU s/GiB ≤ fio's. dlio-rs's figure is report.json's
//! `measured_mib_per_second` (epoch bytes read over its wall time), fio's its aggregate
//! bandwidth. CPU seconds per GiB: user + system time of the whole process, from
//! `/usr/bin/time`, for both, over the bytes each read. Target: dlio-rs ≥ 95 % of fio by the
//! medians and by the median of the rounds' ratios (the lower decides), and dlio-rs's median CPU
//! s/GiB no higher than fio's.
//!
//! What fio reads ([`FioStream`]), per the request stream dlio-rs makes (docs/formats.md,
//! "Requests per sample"), as a replay log per reader (`--read_iolog`, `--replay_no_stall`):
//! - whole files in order, reader j taking the files whose index is j modulo the readers, one
//!   open at a time, in requests of the format's size (with O_DIRECT whole 4 KiB blocks, a tail
//!   shorter than a block left out, as fio's own sequential jobs do):
//!   R1, R2 npz (one request per file), R3 tfrecord (256 KiB, TensorFlow's buffer, as dlio-rs
//!   streams them);
//! - the requests dlio-rs made, replayed: one unmeasured run under `strace -f -y`, then a log per
//!   thread of its `pread`s in order (with O_DIRECT, a file's partial last block left out): R4
//!   indexed_binary (4 KiB samples shuffled across files, and each file's two indexes), R5 hdf5
//!   (256 KiB samples of a file dealt to the threads batch by batch, as PyTorch's workers take
//!   them, and each file's metadata), R6 parquet (the ranges Arrow makes of 40 of 200 columns, and
//!   each file's footer), R7 jpeg (whole files in the shuffled order). Same requests, same order,
//!   same readers. R6's row-group ranges go 8 at a time through io_uring with O_DIRECT, which
//!   strace does not see: they are traced buffered (`pread`s after a read-ahead hint) and widened
//!   to whole blocks. fio replays R6 with io_uring, 8 requests in flight per reader, without
//!   dlio-rs's (and Arrow's) pause at the end of each row group: a bound; and, for the record,
//!   one request at a time (psync).
//!
//! Shapes (4 read threads each): R1 npz 24 × 128 MiB, 1 rank; R2 npz 20,000 × 112 KiB, 2 ranks;
//! R3 tfrecord 64 files × 512 records × 110 KiB (issue 14 says 1024 records: halved to keep the
//! datasets under ~12 GiB); R4 indexed_binary 16 × 4096 × 4 KiB, file and sample shuffle (seed);
//! R5 hdf5 32 × 64 × 256 KiB; R6 parquet, dlrm_b200's 200 columns (40 read) and row groups of
//! 6144 rows, 48 files × 61,440 rows (MLPerf: 1024 × 4,718,592); R7 jpeg, retinanet_b200 (~176
//! KiB noise images, file and sample shuffle, `reader.decode_images=False`: decoding is CPU, not
//! storage), 4096 files (MLPerf: 1,170,301).
//! The datasets, about 12.5 GiB, are generated once and kept. Before the shapes, fio measures
//! the device's ceiling at a deep queue (libaio, iodepth 32, O_DIRECT, 1 MiB sequential and 4 KiB
//! random) on a 1 GiB file of its own.

mod common;
#[path = "cold/throttle.rs"]
mod throttle;

use std::path::Path;
use std::process::Command;

use common::*;

const GIB: f64 = (1u64 << 30) as f64;
const KIB: u64 = 1024;

/// One benchmark shape: a dataset, how dlio-rs trains on it and how fio reads it.
struct Shape {
    name: &'static str,
    what: &'static str,
    /// The workload and dataset words, for generation and training alike.
    dataset: Vec<String>,
    /// Training-only words (batch size, shuffles).
    training: Vec<String>,
    ranks: u64,
    threads: u64,
    /// The data files' extension (side files are not fio's to read).
    ext: &'static str,
    /// What fio reads.
    fio: FioStream,
}

/// The request stream fio reads.
#[derive(Clone, Copy)]
enum FioStream {
    /// Each reader's files whole, in order, sequentially in requests of this size (capped by the
    /// smallest file).
    Files { request: u64 },
    /// The requests dlio-rs makes, each reader thread's in its order, as `strace` records them:
    /// both make the same requests (the format's metadata reads too) in the same order, with up
    /// to `in_flight` of them in flight per reader (fio: io_uring at that depth where it is over
    /// 1, as dlio-rs fetches a parquet row group's ranges).
    Requests { in_flight: u32 },
}

/// One measurement: payload MiB/s and CPU seconds (user + system) per GiB read.
#[derive(Clone, Copy)]
struct Sample {
    mib_s: f64,
    cpu_s_per_gib: f64,
    /// Payload bytes read.
    payload: f64,
    /// The process's wall time, seconds.
    wall_s: f64,
    /// Device reads the process caused, when it ran in the throttle group (which counts them).
    device: Option<throttle::DeviceReads>,
}

impl Sample {
    /// Two measurements of the same bytes as one: the rate over the total time, the CPU per GiB,
    /// payload, wall time and device reads averaged.
    fn mean(&self, other: &Sample) -> Sample {
        Sample {
            mib_s: 2.0 / (1.0 / self.mib_s + 1.0 / other.mib_s),
            cpu_s_per_gib: (self.cpu_s_per_gib + other.cpu_s_per_gib) / 2.0,
            payload: (self.payload + other.payload) / 2.0,
            wall_s: (self.wall_s + other.wall_s) / 2.0,
            device: self
                .device
                .zip(other.device)
                .map(|(a, b)| throttle::DeviceReads {
                    requests: (a.requests + b.requests) / 2,
                    bytes: (a.bytes + b.bytes) / 2,
                }),
        }
    }

    /// Device requests per MiB of payload.
    fn requests_per_mib(&self) -> Option<f64> {
        self.device
            .map(|d| d.requests as f64 / (self.payload / MIB))
    }
}

/// The fixed-speed device, when `DLIO_BENCH_THROTTLE` asks for it: the group every measured
/// tool runs in and the regimes to measure.
struct Throttle {
    group: throttle::Group,
    regimes: Vec<throttle::Regime>,
    /// How long a capped round is to last where the benchmark chooses the cap.
    round_seconds: f64,
}

static THROTTLE: std::sync::OnceLock<Option<Throttle>> = std::sync::OnceLock::new();

fn throttled() -> Option<&'static Throttle> {
    THROTTLE.get().and_then(Option::as_ref)
}

/// A finished run of a measured tool: its stdout, CPU (user + system) and wall seconds, and the
/// device reads it caused in the throttle group.
struct Timed {
    stdout: Vec<u8>,
    cpu_s: f64,
    wall_s: f64,
    device: Option<throttle::DeviceReads>,
}

/// Runs `program args` under `/usr/bin/time` (inside the throttle group, if there is one).
fn timed(program: &str, args: &[String]) -> Timed {
    let group = throttled().map(|t| &t.group);
    let mut timed_args = words(&["-f", "%U %S", program]);
    timed_args.extend(args.iter().cloned());
    let mut command = match group {
        Some(group) => group.command("/usr/bin/time", &timed_args),
        None => {
            let mut command = Command::new("/usr/bin/time");
            command.args(&timed_args);
            command
        }
    };
    let before = group.map(throttle::Group::reads);
    let started = std::time::Instant::now();
    let ran = command.output().expect("starting /usr/bin/time");
    let wall_s = started.elapsed().as_secs_f64();
    let device = group.zip(before).map(|(g, before)| g.reads().since(before));
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert!(ran.status.success(), "{program} failed: {args:?}\n{stderr}");
    let cpu_s = stderr
        .lines()
        .last()
        .map(|l| {
            l.split_whitespace()
                .map(|s| s.parse::<f64>().unwrap())
                .sum()
        })
        .expect("CPU times from /usr/bin/time");
    Timed {
        stdout: ran.stdout,
        cpu_s,
        wall_s,
        device,
    }
}

/// The dataset words of a `default`-workload shape of `files` × `samples` × `bytes`.
fn dataset(format: &str, files: u64, samples: u64, bytes: u64) -> Vec<String> {
    let mut w = words(&[
        "workload=default",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.dataset.num_files_eval=0",
    ]);
    w.push(format!("++workload.dataset.format={format}"));
    w.push(format!("++workload.dataset.num_files_train={files}"));
    w.push(format!("++workload.dataset.num_samples_per_file={samples}"));
    w.push(format!("++workload.dataset.record_length_bytes={bytes}"));
    w
}

/// The words of a 1-epoch training run of the shape over `data`, output in `out`.
fn dlio_words(shape: &Shape, data: &Path, out: &Path, odirect: bool) -> Vec<String> {
    let mut w = words(&["run", "-q"]);
    w.extend(shape.dataset.iter().cloned());
    w.extend(words(&[
        "++workload.workflow.generate_data=False",
        "++workload.workflow.train=True",
        "++workload.workflow.evaluation=False",
        "++workload.workflow.checkpoint=False",
        "++workload.train.computation_time=0",
        "++workload.train.epochs=1",
    ]));
    w.extend(shape.training.iter().cloned());
    w.push(format!("++workload.reader.read_threads={}", shape.threads));
    w.push(format!(
        "++workload.reader.odirect={}",
        if odirect { "True" } else { "False" }
    ));
    w.push(format!("++workload.dataset.data_folder={}", data.display()));
    w.push(format!("++hydra.run.dir={}", out.display()));
    w.push(format!("--accelerators={}", shape.ranks));
    w
}

fn run_dlio(shape: &Shape, data: &Path, out: &Path, odirect: bool) -> Sample {
    let _ = std::fs::remove_dir_all(out);
    let w = dlio_words(shape, data, out, odirect);
    let ran = timed(DLIO_RS, &w);
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap())
            .expect("report.json is JSON");
    let epoch = &report["epochs"][0];
    let payload = epoch["bytes_read"].as_f64().unwrap();
    Sample {
        mib_s: epoch["measured_mib_per_second"].as_f64().unwrap(),
        cpu_s_per_gib: ran.cpu_s / (payload / GIB),
        payload,
        wall_s: ran.wall_s,
        device: ran.device,
    }
}

/// Runs fio with `options` then one job per entry of `jobs` (each the job's own option, such as
/// `--filename=…`).
fn fio(options: &[String], jobs: &[String]) -> Sample {
    let mut args = words(&["--group_reporting", "--output-format=json"]);
    args.extend(options.iter().cloned());
    for (j, job) in jobs.iter().enumerate() {
        args.push(format!("--name=reader{j}"));
        args.push(job.clone());
    }
    let ran = timed("fio", &args);
    let json: serde_json::Value = serde_json::from_slice(&ran.stdout).expect("fio's JSON");
    let read = &json["jobs"][0]["read"];
    let payload = read["io_bytes"].as_f64().unwrap();
    Sample {
        mib_s: read["bw_bytes"].as_f64().unwrap() / MIB,
        cpu_s_per_gib: ran.cpu_s / (payload / GIB),
        payload,
        wall_s: ran.wall_s,
        device: ran.device,
    }
}

/// The shape's data files (paths) dealt to its readers: reader j gets the files whose index is
/// j modulo the readers, in index order; and each file's size.
fn files_per_reader(shape: &Shape, train: &Path) -> Vec<Vec<(String, u64)>> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(train)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .ends_with(&format!(".{}", shape.ext))
        })
        .map(|e| (e.path().display().to_string(), e.metadata().unwrap().len()))
        .collect();
    // DLIO's names, img_{i}_of_{n}: shorter first gives the index order.
    files.sort_by(|a, b| (a.0.len(), &a.0).cmp(&(b.0.len(), &b.0)));
    let readers = (shape.ranks * shape.threads) as usize;
    (0..readers)
        .map(|j| files.iter().skip(j).step_by(readers).cloned().collect())
        .collect()
}

/// A fio replay log (`--read_iolog`, version 2) being written.
struct IoLog(String);

impl IoLog {
    fn new() -> IoLog {
        IoLog(String::from("fio version 2 iolog\n"))
    }

    fn open(&mut self, file: &str) {
        self.0.push_str(&format!("{file} add\n{file} open\n"));
    }

    fn read(&mut self, file: &str, offset: u64, len: u64) {
        self.0.push_str(&format!("{file} read {offset} {len}\n"));
    }

    fn close(&mut self, file: &str) {
        self.0.push_str(&format!("{file} close\n"));
    }

    /// Writes the log to `dir/name`; returns fio's option that replays it.
    fn save(self, dir: &Path, name: String) -> String {
        let path = dir.join(name);
        std::fs::write(&path, self.0).unwrap();
        format!("--read_iolog={}", path.display())
    }
}

/// Where fio's reads of a file of `size` bytes must end: with O_DIRECT (`direct`) before its
/// partial last block, which comes back short and which fio then takes for an error (its own
/// sequential jobs leave it out too: fio reads 96–100 % of what dlio-rs reads).
fn fio_end(size: u64, direct: bool) -> u64 {
    if direct {
        size / (4 * KIB) * (4 * KIB)
    } else {
        size
    }
}

/// The log's name for `reader` of the shape in a mode.
fn log_name(shape: &Shape, reader: usize, direct: bool) -> String {
    let mode = if direct { "direct" } else { "buffered" };
    format!("cold-{}-reader{reader}.{mode}.iolog", shape.name)
}

/// fio replay logs that read each reader's files whole, one open at a time, in order, in
/// requests of `request` bytes (see [`fio_end`] for O_DIRECT).
fn fio_file_logs(
    shape: &Shape,
    train: &Path,
    dir: &Path,
    request: u64,
    direct: bool,
) -> Vec<String> {
    files_per_reader(shape, train)
        .iter()
        .enumerate()
        .map(|(j, files)| {
            let mut log = IoLog::new();
            for (file, size) in files {
                let end = fio_end(*size, direct);
                log.open(file);
                for at in (0..end).step_by(request.min(end.max(1)) as usize) {
                    log.read(file, at, request.min(end - at));
                }
                log.close(file);
            }
            log.save(dir, log_name(shape, j, direct))
        })
        .collect()
}

/// One `pread` of a data file: its path, offset and length.
type Pread = (String, u64, u64);

/// fio replay logs of the requests dlio-rs makes: one unmeasured run under `strace -f -y`, then
/// per thread that read data files a log that opens the files it read and makes its `pread`s,
/// offset and length, in its order (see [`fio_end`] for O_DIRECT). Reads in flight `together`
/// go through io_uring with O_DIRECT, out of strace's sight: they are then traced buffered
/// (where they are `pread`s) and widened to the whole blocks an O_DIRECT read of them asks for.
fn fio_request_logs(
    shape: &Shape,
    data: &Path,
    dir: &Path,
    direct: bool,
    together: bool,
) -> Vec<String> {
    let out = dir.join(format!("cold-{}-strace", shape.name));
    let calls = dir.join(format!("cold-{}-preads.txt", shape.name));
    let _ = std::fs::remove_dir_all(&out);
    let mut args = words(&["-f", "-qq", "-y", "-e", "trace=pread64", "-o"]);
    args.push(calls.display().to_string());
    args.push(DLIO_RS.to_string());
    args.extend(dlio_words(shape, data, &out, direct && !together));
    // Its output (the run's verdict on stderr) is shown only when the run fails.
    let ran = Command::new("strace")
        .args(&args)
        .output()
        .expect("strace (apt install strace)");
    assert!(
        ran.status.success(),
        "strace {args:?}\n{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let _ = std::fs::remove_dir_all(&out);
    let train = std::fs::canonicalize(data.join("train"))
        .unwrap()
        .display()
        .to_string();
    let threads = traced_preads(&std::fs::read_to_string(&calls).unwrap(), &train);
    let _ = std::fs::remove_file(&calls);
    let mut sizes = std::collections::HashMap::<&str, u64>::new();
    threads
        .iter()
        .enumerate()
        .map(|(j, reads)| {
            let mut files: Vec<&str> = reads.iter().map(|r| r.0.as_str()).collect();
            files.sort_unstable();
            files.dedup();
            let mut log = IoLog::new();
            files.iter().for_each(|f| log.open(f));
            for (f, offset, len) in reads {
                let size = *sizes
                    .entry(f)
                    .or_insert_with(|| std::fs::metadata(f).unwrap().len());
                let (offset, end) = if direct && together {
                    let block = 4 * KIB;
                    (
                        offset / block * block,
                        (offset + len).next_multiple_of(block),
                    )
                } else {
                    (*offset, offset + len)
                };
                let end = end.min(fio_end(size, direct));
                if end > offset {
                    log.read(f, offset, end - offset);
                }
            }
            files.iter().for_each(|f| log.close(f));
            log.save(dir, log_name(shape, j, direct))
        })
        .collect()
}

/// The `pread`s of files below `train` in strace's `-f -y` output, per thread in the order of
/// their first read, each thread's in order.
fn traced_preads(text: &str, train: &str) -> Vec<Vec<Pread>> {
    let mut threads: Vec<(&str, Vec<Pread>)> = Vec::new();
    // A call another thread interrupted is split: `TID pread64(FD</path>, <unfinished ...>`, then
    // `TID <... pread64 resumed>"..."..., LENGTH, OFFSET) = N`.
    let mut unfinished = std::collections::HashMap::<&str, &str>::new();
    for call in text.lines() {
        // TID pread64(FD</path>, "..."..., LENGTH, OFFSET) = N
        let (tid, path) = if let Some((tid, rest)) = call.split_once(" pread64(") {
            let Some((_, path)) = rest.split_once('<') else {
                continue;
            };
            let Some((path, _)) = path.split_once(">,") else {
                continue;
            };
            if call.ends_with("<unfinished ...>") {
                unfinished.insert(tid, path);
                continue;
            }
            (tid, path)
        } else if let Some((tid, _)) = call.split_once(" <... pread64 resumed>") {
            match unfinished.remove(tid) {
                Some(path) => (tid, path),
                None => continue,
            }
        } else {
            continue;
        };
        if !path.starts_with(train) || call.contains(" = -1 ") {
            continue;
        }
        let Some((head, _)) = call.rsplit_once(") = ") else {
            continue;
        };
        let mut tail = head.rsplitn(3, ", ");
        let offset: u64 = tail.next().unwrap().trim().parse().unwrap();
        let len: u64 = tail.next().unwrap().trim().parse().unwrap();
        let at = match threads.iter().position(|t| t.0 == tid) {
            Some(at) => at,
            None => {
                threads.push((tid, Vec::new()));
                threads.len() - 1
            }
        };
        threads[at].1.push((path.to_string(), offset, len));
    }
    threads.into_iter().map(|(_, reads)| reads).collect()
}

/// Syncs the file system and empties the page cache (as root), so each measurement starts cold.
/// The kernel's inodes and directory entries are kept (`drop_caches` 1, not 3): fio looks up and
/// `stat`s every file of its jobs before its clock starts, dlio-rs opens each file inside its
/// epoch, so the inode reads of a cold lookup would weigh on dlio-rs's figure alone (measured
/// under a request cap on R2's 20,000 files: fio's clock missed 1.6 s of a 20 s run, its
/// device reads at 110 % of the cap over its own clock). See [`known_files`].
fn settle() {
    let status = Command::new("sync").status().expect("running sync");
    assert!(status.success(), "sync failed");
    std::fs::write("/proc/sys/vm/drop_caches", "1").expect("dropping the page cache");
}

/// Looks up every file below `dir` (`stat`), so that its inode and directory entry are in the
/// kernel's memory for both tools alike (see [`settle`]).
fn known_files(dir: &Path) {
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            if std::fs::metadata(entry.path()).unwrap().is_dir() {
                folders.push(entry.path());
            }
        }
    }
}

/// Reads every file below `dir` once through the page cache. This machine's disk is virtual and
/// its host caches it, out of the guest's reach: a dataset read through the page cache a moment
/// ago reads again at up to 2–3× the device's rate, though the guest's cache was dropped, so
/// whichever of dlio-rs and fio read second would read faster, by however much the host kept.
/// Warming the host before every buffered measurement (then dropping the guest's cache) puts
/// each in the same state: the guest's cache empty, the host's holding the dataset as far as it
/// can. O_DIRECT reads leave no such trace (their rounds agree whoever goes first when no
/// buffered read came before), so they are measured first and without it.
fn warm_host(dir: &Path) {
    let mut buf = vec![0u8; 1 << 20];
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                folders.push(entry.path());
                continue;
            }
            let mut file = std::fs::File::open(entry.path()).unwrap();
            while std::io::Read::read(&mut file, &mut buf).unwrap() > 0 {}
        }
    }
}

/// A mode's measurements: dlio-rs's and fio's, round by round.
#[derive(Default)]
struct Pairs {
    ours: Vec<Sample>,
    theirs: Vec<Sample>,
    /// Where fio reads several requests at once: fio reading them one at a time (psync), the
    /// comparison issue 14 names.
    one_at_a_time: Vec<Sample>,
}

impl Pairs {
    /// Prints the summary line; true when the lower ratio reaches 95 % and dlio-rs's CPU per
    /// GiB is no higher than fio's.
    fn verdict(&self, shape: &Shape, mode: &str) -> bool {
        let round_ratio = self.round_ratio();
        let (ours, theirs) = self.medians(|s| s.mib_s);
        let (our_cpu, their_cpu) = self.medians(|s| s.cpu_s_per_gib);
        let met = (ours / theirs).min(round_ratio) >= 0.95 && our_cpu <= their_cpu;
        if !self.one_at_a_time.is_empty() {
            let psync = median(self.one_at_a_time.iter().map(|s| s.mib_s).collect());
            println!(
                "{} {mode}: fio one request at a time (psync) {psync:.0} MiB/s: dlio-rs {:.1}% of it",
                shape.name,
                100.0 * ours / psync
            );
        }
        println!(
            "{} {mode}: dlio-rs {ours:.0} MiB/s, fio {theirs:.0} MiB/s (medians: {:.1}%; median of rounds' ratios: {:.1}%; target ≥ 95%); CPU s/GiB dlio-rs {our_cpu:.2}, fio {their_cpu:.2} — {}",
            shape.name,
            100.0 * ours / theirs,
            100.0 * round_ratio,
            verdict(met)
        );
        met
    }

    /// Under the throttle, the uncapped rounds count for their CPU only (the rates are the
    /// swinging disk's): prints the summary line; true when dlio-rs's median CPU per GiB is no
    /// higher than fio's.
    fn cpu_verdict(&self, shape: &Shape, mode: &str) -> bool {
        let (ours, theirs) = self.medians(|s| s.mib_s);
        let (our_cpu, their_cpu) = self.medians(|s| s.cpu_s_per_gib);
        let met = our_cpu <= their_cpu;
        println!(
            "{} {mode} uncapped: CPU s/GiB dlio-rs {our_cpu:.2}, fio {their_cpu:.2} (target: no higher) — {}; for the record, dlio-rs {ours:.0} MiB/s, fio {theirs:.0} MiB/s on the uncapped disk",
            shape.name,
            verdict(met)
        );
        met
    }

    /// Below a cap: prints the summary line; true when dlio-rs reaches 98 % of fio's payload
    /// rate (the lower of the ratio of medians and the median of the rounds' ratios), makes no
    /// more than 2 % more device requests per MiB, and the cap, not the device, set the speed:
    /// fio capped below 80 % of its `uncapped` rate. How much of the cap fio's device reads
    /// used is said too (a request cap of a few dozen large requests a second is not filled by
    /// either tool's few reads in flight).
    fn capped_verdict(
        &self,
        shape: &Shape,
        label: &str,
        caps: throttle::Caps,
        uncapped: f64,
    ) -> bool {
        let (ours, theirs) = self.medians(|s| s.mib_s);
        let round_ratio = self.round_ratio();
        let (our_requests, their_requests) =
            self.medians(|s| s.requests_per_mib().unwrap_or(f64::NAN));
        // fio's device reads per second of its process's life, against the cap.
        let device = |s: &Sample| {
            let d = s.device.unwrap_or_default();
            match caps.requests_per_second {
                Some(cap) => d.requests as f64 / s.wall_s / cap as f64,
                None => d.bytes as f64 / s.wall_s / caps.bytes_per_second.unwrap_or(1) as f64,
            }
        };
        let held = self.median(false, device);
        let round = self.median(false, |s| s.wall_s);
        let ratio = (ours / theirs).min(round_ratio);
        let binds = theirs < 0.8 * uncapped;
        if !binds {
            println!(
                "{} {label}: the cap does not bind: fio read {theirs:.0} MiB/s under it and {uncapped:.0} MiB/s without",
                shape.name
            );
        }
        let met = ratio >= 0.98 && our_requests <= their_requests * 1.02 && binds;
        println!(
            "{} {label}: dlio-rs {ours:.1} MiB/s, fio {theirs:.1} MiB/s (medians: {:.1}%; median of rounds' ratios: {:.1}%; target ≥ 98%); device requests per MiB dlio-rs {our_requests:.1}, fio {their_requests:.1} (target ≤ fio + 2%); fio's device reads at {:.0}% of the cap over its {round:.1} s (the throttle's first burst, ≤ 0.2 s of the cap, weighs ≤ {:.1}%) — {}",
            shape.name,
            100.0 * ours / theirs,
            100.0 * round_ratio,
            100.0 * held,
            100.0 * 0.2 / round,
            verdict(met)
        );
        met
    }

    /// The medians of a figure over dlio-rs's rounds and over fio's.
    fn medians(&self, f: impl Fn(&Sample) -> f64) -> (f64, f64) {
        (self.median(true, &f), self.median(false, &f))
    }

    /// The median of the rounds' ratios of payload rates, dlio-rs's over fio's.
    fn round_ratio(&self) -> f64 {
        median(
            self.ours
                .iter()
                .zip(&self.theirs)
                .map(|(o, t)| o.mib_s / t.mib_s)
                .collect(),
        )
    }

    /// The median of a figure over dlio-rs's rounds (`ours`) or fio's.
    fn median(&self, ours: bool, f: impl Fn(&Sample) -> f64) -> f64 {
        let samples = if ours { &self.ours } else { &self.theirs };
        median(samples.iter().map(f).collect())
    }
}

/// A block device whose blocks live in memory, with an ext4 file system, mounted for one shape
/// and torn down after it. Reads from it after the page cache is dropped go through the block
/// layer, as from a disk, but nothing else caches them: no host cache whose state depends on who
/// read before (see [`warm_host`]). Being faster than this machine's disk, it also shows more of
/// each reader's own cost. Two kinds:
/// - a loop device over a file in /dev/shm (`DLIO_BENCH_RAM_DEVICE=GiB`): the loop driver's
///   worker thread does the copies, taking CPU from the same two cores as the tools;
/// - zram (`DLIO_BENCH_ZRAM=GiB`): the kernel's compressed RAM disk, which serves a read in the
///   thread that submits it (noise data does not compress, so it is stored and read as is): no
///   worker, no queue, each tool pays its own copies. The steadiest device this machine has.
struct RamDevice {
    kind: RamKind,
    device: String,
    mount: std::path::PathBuf,
}

enum RamKind {
    Loop { backing: std::path::PathBuf },
    Zram,
}

/// Runs a set-up command; its standard output.
fn set_up(program: &str, args: &[&str]) -> String {
    let out = Command::new(program).args(args).output().expect(program);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl RamDevice {
    /// The device `DLIO_BENCH_ZRAM` or `DLIO_BENCH_RAM_DEVICE` asks for, if any.
    fn from_env(name: &str) -> Option<RamDevice> {
        let gib = |var: &str| {
            std::env::var(var)
                .ok()
                .map(|v| v.parse::<u64>().unwrap_or_else(|_| panic!("{var}: GiB")))
        };
        if let Some(size) = gib("DLIO_BENCH_ZRAM") {
            return Some(RamDevice::zram(name, size));
        }
        gib("DLIO_BENCH_RAM_DEVICE").map(|size| RamDevice::on_loop(name, size))
    }

    fn on_loop(name: &str, gib: u64) -> RamDevice {
        let backing = Path::new("/dev/shm").join(format!("dlio-rs-cold-{name}.img"));
        let backing_s = backing.display().to_string();
        set_up("truncate", &["-s", &format!("{gib}G"), &backing_s]);
        let device = set_up("losetup", &["--find", "--show", &backing_s]);
        RamDevice::mounted(name, RamKind::Loop { backing }, device, gib)
    }

    fn zram(name: &str, gib: u64) -> RamDevice {
        let sys = Path::new("/sys/block/zram0");
        assert!(sys.exists(), "no /sys/block/zram0 (modprobe zram)");
        std::fs::write(sys.join("reset"), "1").expect("resetting zram0 (in use?)");
        // The fastest of the kernel's compressors; noise is stored uncompressed anyway.
        let _ = std::fs::write(sys.join("comp_algorithm"), "lz4");
        std::fs::write(sys.join("disksize"), format!("{gib}G")).expect("sizing zram0");
        RamDevice::mounted(name, RamKind::Zram, "/dev/zram0".into(), gib)
    }

    fn mounted(name: &str, kind: RamKind, device: String, gib: u64) -> RamDevice {
        let mount = Path::new("/mnt").join(format!("dlio-rs-cold-{name}"));
        set_up("mkfs.ext4", &["-q", "-F", &device]);
        std::fs::create_dir_all(&mount).unwrap();
        set_up("mount", &[&device, &mount.display().to_string()]);
        println!("   on a {gib} GiB RAM-backed block device ({device}, ext4)");
        RamDevice {
            kind,
            device,
            mount,
        }
    }
}

impl Drop for RamDevice {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
        match &self.kind {
            RamKind::Loop { backing } => {
                let _ = Command::new("losetup").args(["-d", &self.device]).status();
                let _ = std::fs::remove_file(backing);
            }
            RamKind::Zram => {
                let _ = std::fs::write("/sys/block/zram0/reset", "1");
            }
        }
        let _ = std::fs::remove_dir(&self.mount);
    }
}

/// Generates the shape's dataset (once), then measures both modes in interleaved rounds; on a
/// [`RamDevice`] of its own when `DLIO_BENCH_ZRAM` or `DLIO_BENCH_RAM_DEVICE` gives its size in
/// GiB.
fn compare(dir: &Path, shape: Shape) -> bool {
    println!(
        "{} {} ({} rank(s) × {} read threads)",
        shape.name, shape.what, shape.ranks, shape.threads
    );
    let ram = RamDevice::from_env(shape.name);
    let dir = match &ram {
        Some(device) => {
            ceiling(&device.mount);
            device.mount.as_path()
        }
        None => dir,
    };
    let data = generated_dataset(dir, &format!("cold-{}", shape.name), &shape.dataset);
    let train = data.join("train");
    let out = dir.join(format!("cold-{}-out", shape.name));
    // Plain preads: no posix_fadvise hint (fio's default hint, RANDOM for randread, turns the
    // kernel's readahead off, which dlio-rs's readers and the frameworks' leave on).
    let mut common = words(&["--ioengine=psync", "--invalidate=0", "--fadvise_hint=0"]);
    // fio's jobs, buffered and with O_DIRECT: one replay log per reader.
    common.push("--replay_no_stall=1".into());
    let jobs: [Vec<String>; 2] = [false, true].map(|direct| match shape.fio {
        FioStream::Files { request } => fio_file_logs(&shape, &train, dir, request, direct),
        FioStream::Requests { in_flight } => {
            fio_request_logs(&shape, &data, dir, direct, in_flight > 1)
        }
    });
    let fio_options = |direct: bool| {
        let mut o = common.clone();
        o.push(format!("--direct={}", direct as u8));
        if let FioStream::Requests { in_flight } = shape.fio {
            if in_flight > 1 {
                o.push("--ioengine=io_uring".into());
                o.push(format!("--iodepth={in_flight}"));
            }
        }
        o
    };
    // All O_DIRECT rounds first, then all buffered ones: a buffered read leaves the dataset in
    // the host's cache (see [`warm_host`]), which would speed up the O_DIRECT reads after it.
    let modes = [("odirect", true), ("buffered", false)];
    let mut met = true;
    for (mode, direct) in modes {
        let tools = Tools {
            shape: &shape,
            data: &data,
            out: &out,
            direct,
            fio_options: fio_options(direct),
            jobs: &jobs[direct as usize],
        };
        let Some(throttle) = throttled() else {
            met &= tools.rounds(mode, Rounds::UNCAPPED).verdict(&shape, mode);
            continue;
        };
        // Uncapped first: the CPU figures, and fio's payload and device requests, which set the
        // caps that make a capped round last the time asked for.
        throttle.group.set(throttle::Caps::default());
        let uncapped = tools.rounds(&format!("{mode} uncapped"), Rounds::UNCAPPED);
        met &= uncapped.cpu_verdict(&shape, mode);
        let of_fio = |f: fn(&Sample) -> f64| median(uncapped.theirs.iter().map(f).collect());
        let fio_payload = of_fio(|s| s.payload);
        let fio_uncapped = of_fio(|s| s.mib_s);
        let fio_requests = of_fio(|s| s.device.map_or(0.0, |d| d.requests as f64));
        for regime in &throttle.regimes {
            let chosen = match regime {
                throttle::Regime::Bytes(_) => fio_payload,
                throttle::Regime::Requests(_) => fio_requests,
            } / throttle.round_seconds;
            let caps = regime.caps((chosen as u64).max(1));
            throttle.group.set(caps);
            let label = format!("{mode} {} ({})", regime.name(), caps.describe());
            met &= tools.rounds(&label, Rounds::CAPPED).capped_verdict(
                &shape,
                &label,
                caps,
                fio_uncapped,
            );
        }
        throttle.group.set(throttle::Caps::default());
    }
    let _ = std::fs::remove_dir_all(&out);
    met
}

/// How a set of rounds is measured.
#[derive(Clone, Copy)]
struct Rounds {
    /// One unmeasured round first (the disk's and the host's cache's start).
    warm_up: bool,
    /// Each round measures A B B A (who is A alternating between rounds), each tool's two
    /// figures combined; else A B (who is A alternating).
    twice: bool,
    /// The host's cache warmed before every buffered measurement ([`warm_host`]): needless
    /// below a cap, which holds the device to one speed whatever the host keeps.
    warm_host: bool,
}

impl Rounds {
    const UNCAPPED: Rounds = Rounds {
        warm_up: true,
        twice: true,
        warm_host: true,
    };
    const CAPPED: Rounds = Rounds {
        warm_up: false,
        twice: false,
        warm_host: false,
    };
}

/// The two measured tools in one mode: dlio-rs training on the shape's dataset, and fio
/// replaying its request stream.
struct Tools<'a> {
    shape: &'a Shape,
    data: &'a Path,
    out: &'a Path,
    direct: bool,
    fio_options: Vec<String>,
    jobs: &'a [String],
}

impl Tools<'_> {
    /// Empties the page cache (after warming the host's, when asked and reading buffered).
    fn prepare(&self, warm: bool) {
        if warm && !self.direct {
            warm_host(self.data);
        }
        known_files(self.data);
        settle();
    }

    fn ours(&self, warm: bool) -> Sample {
        self.prepare(warm);
        run_dlio(self.shape, self.data, self.out, self.direct)
    }

    fn theirs(&self, warm: bool) -> Sample {
        self.prepare(warm);
        fio(&self.fio_options, self.jobs)
    }

    /// Where fio reads several requests at once: fio reading them one at a time (psync).
    fn one_at_a_time(&self, warm: bool) -> Option<Sample> {
        let FioStream::Requests { in_flight } = self.shape.fio else {
            return None;
        };
        (in_flight > 1).then(|| {
            let mut psync = self.fio_options.clone();
            psync.retain(|o| !o.starts_with("--iodepth"));
            psync.push("--ioengine=psync".into());
            self.prepare(warm);
            fio(&psync, self.jobs)
        })
    }

    /// Measures `DLIO_BENCH_ROUNDS` (default 3) interleaved rounds, printing each.
    fn rounds(&self, label: &str, how: Rounds) -> Pairs {
        let mut pair = Pairs::default();
        let first = if how.warm_up { 0 } else { 1 };
        for round in first..=rounds(3) {
            let fio_first = round % 2 == 1;
            let warm = how.warm_host;
            let (o, t) = match (how.twice, fio_first) {
                (true, true) => {
                    let (t1, o1) = (self.theirs(warm), self.ours(warm));
                    let (o2, t2) = (self.ours(warm), self.theirs(warm));
                    (o1.mean(&o2), t1.mean(&t2))
                }
                (true, false) => {
                    let (o1, t1) = (self.ours(warm), self.theirs(warm));
                    let (t2, o2) = (self.theirs(warm), self.ours(warm));
                    (o1.mean(&o2), t1.mean(&t2))
                }
                (false, true) => {
                    let t = self.theirs(warm);
                    (self.ours(warm), t)
                }
                (false, false) => {
                    let o = self.ours(warm);
                    (o, self.theirs(warm))
                }
            };
            let one_at_a_time = if how.warm_up {
                self.one_at_a_time(warm)
            } else {
                None
            };
            let round_label = match round {
                0 => "warm-up (not counted)".to_string(),
                _ if fio_first => format!("round {round} (fio first)"),
                _ => format!("round {round}"),
            };
            let requests = match (o.requests_per_mib(), t.requests_per_mib()) {
                (Some(ours), Some(theirs)) => {
                    format!("; device requests per MiB: dlio-rs {ours:.1}, fio {theirs:.1}")
                }
                _ => String::new(),
            };
            println!(
                "   {label} {round_label}: dlio-rs {:.1} MiB/s ({:.2} CPU s/GiB, {:.1} s), fio {:.1} ({:.2}, {:.1} s): {:.1}%{requests}",
                o.mib_s,
                o.cpu_s_per_gib,
                o.wall_s,
                t.mib_s,
                t.cpu_s_per_gib,
                t.wall_s,
                100.0 * o.mib_s / t.mib_s
            );
            if let Some(psync) = one_at_a_time {
                println!(
                    "   {label} {round_label}: fio one request at a time {:.0} MiB/s",
                    psync.mib_s
                );
            }
            if round > 0 {
                pair.ours.push(o);
                pair.theirs.push(t);
                pair.one_at_a_time.extend(one_at_a_time);
            }
        }
        pair
    }
}

/// Training words of a batch size and, optionally, DLIO's seeded file and sample shuffles.
fn training(batch: u64, shuffled: bool) -> Vec<String> {
    let mut w = vec![format!("++workload.reader.batch_size={batch}")];
    if shuffled {
        w.extend(words(&[
            "++workload.reader.file_shuffle=seed",
            "++workload.reader.sample_shuffle=seed",
        ]));
    }
    w
}

fn r1(dir: &Path) -> bool {
    compare(
        dir,
        Shape {
            name: "R1",
            what: "npz 24 × 128 MiB, whole files",
            dataset: dataset("npz", 24, 1, 128 << 20),
            training: training(1, false),
            ranks: 1,
            threads: 4,
            ext: "npz",
            fio: FioStream::Files { request: u64::MAX },
        },
    )
}

fn r2(dir: &Path) -> bool {
    compare(
        dir,
        Shape {
            name: "R2",
            what: "npz 20000 × 112 KiB, whole files",
            dataset: dataset("npz", 20_000, 1, 112 * KIB),
            training: training(8, false),
            ranks: 2,
            threads: 4,
            ext: "npz",
            fio: FioStream::Files { request: u64::MAX },
        },
    )
}

fn r3(dir: &Path) -> bool {
    compare(
        dir,
        Shape {
            name: "R3",
            what: "tfrecord 64 files × 512 records × 110 KiB, streamed (fio: 256 KiB requests)",
            dataset: dataset("tfrecord", 64, 512, 110 * KIB),
            training: training(16, false),
            ranks: 1,
            threads: 4,
            ext: "tfrecord",
            fio: FioStream::Files { request: 256 * KIB },
        },
    )
}

fn r4(dir: &Path) -> bool {
    compare(
        dir,
        Shape {
            name: "R4",
            what: "indexed_binary 16 × 4096 × 4 KiB, shuffled (fio: the same requests, replayed)",
            dataset: dataset("indexed_binary", 16, 4096, 4 * KIB),
            training: training(64, true),
            ranks: 1,
            threads: 4,
            ext: "indexed_binary",
            fio: FioStream::Requests { in_flight: 1 },
        },
    )
}

fn r5(dir: &Path) -> bool {
    compare(
        dir,
        Shape {
            name: "R5",
            what: "hdf5 32 × 64 × 256 KiB (fio: the same requests, replayed)",
            dataset: dataset("hdf5", 32, 64, 256 * KIB),
            training: training(4, false),
            ranks: 1,
            threads: 4,
            ext: "hdf5",
            fio: FioStream::Requests { in_flight: 1 },
        },
    )
}

fn r6(dir: &Path) -> bool {
    let mut dataset = words(&["workload=dlrm_b200"]);
    dataset.push("++workload.dataset.num_files_train=48".into());
    dataset.push(format!(
        "++workload.dataset.num_samples_per_file={}",
        10 * 6144
    ));
    compare(
        dir,
        Shape {
            name: "R6",
            what: "parquet, dlrm_b200's columns, 48 files × 10 row groups of 6144 rows (fio: the same requests, replayed, 8 in flight per reader as dlio-rs and Arrow's pre_buffer allow at most)",
            dataset,
            training: training(16384, false),
            ranks: 1,
            threads: 4,
            ext: "parquet",
            fio: FioStream::Requests { in_flight: 8 },
        },
    )
}

fn r7(dir: &Path) -> bool {
    compare(
        dir,
        Shape {
            name: "R7",
            what: "jpeg, retinanet_b200's ~176 KiB images, 4096 files, shuffled, read without decoding (fio: the same requests, replayed)",
            dataset: words(&[
                "workload=retinanet_b200",
                "++workload.dataset.num_files_train=4096",
            ]),
            // Decoding is the accelerator host's CPU work, not storage's: with it, this 2-core
            // machine decodes ~190 MiB/s of noise images (10.6 CPU s/GiB), far below the device.
            training: {
                let mut w = training(24, true);
                w.push("++workload.reader.decode_images=False".into());
                w
            },
            ranks: 1,
            threads: 4,
            ext: "jpeg",
            fio: FioStream::Requests { in_flight: 1 },
        },
    )
}

/// fio at a deep queue on a 1 GiB file of its own: the device's 1 MiB sequential and 4 KiB
/// random read rates with O_DIRECT.
fn ceiling(dir: &Path) {
    let file = dir.join("cold-ceiling");
    let run = |rw: &str, bs: &str| {
        settle();
        let mut o = words(&[
            "--ioengine=libaio",
            "--iodepth=32",
            "--direct=1",
            "--size=1G",
            "--runtime=10",
        ]);
        o.push(format!("--rw={rw}"));
        o.push(format!("--bs={bs}"));
        fio(&o, &[format!("--filename={}", file.display())]).mib_s
    };
    let (seq, random) = (run("read", "1M"), run("randread", "4k"));
    println!(
        "device ceiling (fio libaio, iodepth 32, O_DIRECT): 1 MiB sequential {seq:.0} MiB/s, 4 KiB random {random:.0} MiB/s ({:.0} IOPS)",
        random * 256.0
    );
}

fn main() {
    if std::fs::write("/proc/sys/vm/drop_caches", "3").is_err() {
        eprintln!("cold: needs root, to drop the page cache before every measurement");
        std::process::exit(2);
    }
    if Command::new("fio").arg("--version").output().is_err() {
        eprintln!("cold: needs fio (apt install fio)");
        std::process::exit(2);
    }
    let dir = std::env::var("DLIO_BENCH_DIR").unwrap_or_else(|_| "target/bench-data".into());
    std::fs::create_dir_all(&dir).unwrap();
    let throttle = throttle::Regime::from_env().map(|regimes| {
        if std::env::var_os("DLIO_BENCH_RAM_DEVICE").is_some()
            || std::env::var_os("DLIO_BENCH_ZRAM").is_some()
        {
            eprintln!(
                "cold: DLIO_BENCH_THROTTLE caps the disk of DLIO_BENCH_DIR, not a RAM device"
            );
            std::process::exit(2);
        }
        let round_seconds = match std::env::var("DLIO_BENCH_ROUND_SECONDS") {
            Err(_) => 20.0,
            Ok(text) => match text.parse::<f64>() {
                Ok(s) if (1.0..=3600.0).contains(&s) => s,
                _ => {
                    eprintln!("DLIO_BENCH_ROUND_SECONDS={text}: give seconds from 1 to 3600");
                    std::process::exit(2);
                }
            },
        };
        let names: Vec<&str> = regimes.iter().map(throttle::Regime::name).collect();
        println!(
            "a device of fixed speed: every tool reads in one throttle group, uncapped (CPU), then {} (caps chosen per shape for rounds of {round_seconds} s unless given)",
            names.join(", then ")
        );
        Throttle {
            group: throttle::Group::new(Path::new(&dir)),
            regimes,
            round_seconds,
        }
    });
    let _ = THROTTLE.set(throttle);
    if std::env::var_os("DLIO_BENCH_RAM_DEVICE").is_none() {
        ceiling(Path::new(&dir));
    }
    run_selected(&[
        ("r1", r1),
        ("r2", r2),
        ("r3", r3),
        ("r4", r4),
        ("r5", r5),
        ("r6", r6),
        ("r7", r7),
    ]);
}
