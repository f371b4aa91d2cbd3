//! Helpers shared by the end-to-end tests: scratch folders, running the binaries as processes,
//! and reading their JSON outputs (and, in `svg`, the pages' charts).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

use serde_json::Value;

#[cfg(feature = "azure")]
pub mod azurite;
#[cfg(feature = "gcs")]
pub mod fake_gcs;
#[cfg(feature = "s3")]
pub mod fault_proxy;
pub mod mpirun;
#[cfg(feature = "s3")]
pub mod seaweed;
pub mod svg;
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
#[allow(dead_code)] // what only some launchers use
pub mod watched;

pub use mpirun::*;

pub const DLIO_RS: &str = env!("CARGO_BIN_EXE_dlio-rs");
pub const DLIO_BENCHMARK: &str = env!("CARGO_BIN_EXE_dlio_benchmark");

/// llama3_8b shrunk for checkpoint tests: its shape (32 heads, 8 KV heads, fp16 model, fp32
/// optimizer, ZeRO 3) with 2 layers of hidden size 256, FFN 512 and a vocabulary of 1000: a few
/// MiB per rank; no pause between checkpoints.
pub const TINY_LLAMA: &[&str] = &[
    "workload=llama3_8b",
    "++workload.model.num_layers=2",
    "++workload.model.transformer.hidden_size=256",
    "++workload.model.transformer.ffn_hidden_size=512",
    "++workload.model.transformer.vocab_size=1000",
    "++workload.checkpoint.time_between_checkpoints=0",
];

/// Words for runs whose progress lines are checked against the table: evaluation on, and compute
/// that differs between ranks and steps, so that rank 0's AU is not all ranks'.
pub const RANK_VARYING_PHASES: [&str; 6] = [
    "++workload.output.trace=False",
    "++workload.workflow.evaluation=True",
    "++workload.dataset.num_files_eval=8",
    "++workload.reader.batch_size_eval=2",
    "++workload.train.computation_time={type: uniform, min: 0.0001, max: 0.004}",
    "++workload.evaluation.eval_time=0.001",
];

/// The words of a sweep on a link of known speed: 1 MiB samples, one per step, each step 0.1 s of
/// compute, so an accelerator asks for 10 MiB/s; `files` training files, generated once by the
/// sweep; each process's storage behind a 52 MiB/s link (`storage.throttle`), which keeps 5
/// accelerators above the 90 % AU threshold and not 6 (6 ask for 60 MiB/s: AU at most 87 %).
pub fn throttled_sweep_words(tmp: &Scratch, files: u64) -> Vec<String> {
    let mut words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.evaluation=False",
        "++workload.dataset.format=npy",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.dataset.record_length_bytes=1048576",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.reader.batch_size=1",
        "++workload.reader.read_threads=2",
        "++workload.train.computation_time=0.1",
        "++workload.train.epochs=1",
        "++workload.storage.throttle.mib_per_second=52",
        "++workload.storage.throttle.latency_ms=1",
    ]);
    words.push(format!("++workload.dataset.num_files_train={files}"));
    words.push(format!("++workload.dataset.data_folder={}", tmp.s("data")));
    words
}

/// `sweep` of the checkpoints of [`TINY_LLAMA`] up to 4 ranks, 2 saves each, through a
/// 100 MiB/s link per process that one rank's saves nearly fill; into `tmp/sweep`.
pub fn checkpoint_sweep_args(tmp: &Scratch) -> Vec<String> {
    let mut args = strings(&["sweep", "--max-accelerators=4"]);
    args.extend(strings(TINY_LLAMA));
    args.extend(strings(&[
        "++workload.checkpoint.num_checkpoints_write=2",
        "++workload.checkpoint.num_checkpoints_read=0",
        "++workload.storage.throttle.mib_per_second=100",
        "-o",
    ]));
    args.push(tmp.s("sweep"));
    args.push(format!(
        "++workload.checkpoint.checkpoint_folder={}",
        tmp.s("ckpt")
    ));
    args
}

/// Every format dlio-rs generates (all but `synthetic`).
pub const FORMATS: &[&str] = &[
    "npy",
    "npz",
    "hdf5",
    "tfrecord",
    "csv",
    "jpeg",
    "png",
    "indexed_binary",
    "mmap_indexed_binary",
    "parquet",
];

/// Environment variables the binaries read; removed from every child so the host cannot leak in.
pub const ISOLATED_ENV: &[&str] = &[
    "DLIO_RS_ACCELERATORS",
    "DLIO_LOG_LEVEL",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_SIZE",
    "PMIX_SIZE",
    "MPI_LOCALNRANKS",
    "S3_ENDPOINT_URIS",
];

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A fresh folder under the system temp dir, removed when the test passes (kept when it fails,
/// for inspection).
pub struct Scratch {
    pub path: PathBuf,
}

impl Scratch {
    pub fn new(test: &str) -> Scratch {
        Scratch::new_in(std::env::temp_dir(), test)
    }

    /// A fresh folder under `base`.
    pub fn new_in(base: impl AsRef<Path>, test: &str) -> Scratch {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = base.as_ref().join(format!(
            "dlio-rs-cli-{test}-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("creating the scratch folder");
        Scratch { path }
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.path.join(rel)
    }

    /// `rel` inside the scratch folder, as a string for an override word.
    pub fn s(&self, rel: &str) -> String {
        self.join(rel).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("(kept {} for inspection)", self.path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// What a finished process left.
pub struct Ran {
    pub what: String,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    pub fn context(&self) -> String {
        format!(
            "command: {}\nexit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what, self.code, self.stdout, self.stderr
        )
    }

    pub fn ok(self) -> Ran {
        assert_eq!(self.code, Some(0), "expected success\n{}", self.context());
        self
    }

    pub fn fails(self, code: i32) -> Ran {
        assert_eq!(
            self.code,
            Some(code),
            "expected exit {code}\n{}",
            self.context()
        );
        assert!(
            self.stderr.contains("error:"),
            "the failure should print 'error: ...'\n{}",
            self.context()
        );
        self
    }

    /// Asserts stderr contains every one of `needles`.
    pub fn says(self, needles: &[&str]) -> Ran {
        for n in needles {
            assert!(
                self.stderr.contains(n),
                "stderr should contain {n:?}\n{}",
                self.context()
            );
        }
        self
    }
}

pub fn launch<S: AsRef<str>>(bin: &str, cwd: &Path, args: &[S], env: &[(&str, &str)]) -> Ran {
    let mut cmd = Command::new(bin);
    cmd.current_dir(cwd);
    for k in ISOLATED_ENV {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let args: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    cmd.args(&args);
    let what = format!(
        "{}{} {}",
        env.iter()
            .map(|(k, v)| format!("{k}={v} "))
            .collect::<String>(),
        Path::new(bin).file_name().unwrap().to_string_lossy(),
        args.join(" ")
    );
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    let ran = Ran {
        what,
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(
        ran.code.is_some(),
        "killed by a signal (crash?)\n{}",
        ran.context()
    );
    assert!(
        !ran.stderr.contains("panicked") && !ran.stdout.contains("panicked"),
        "the binary panicked\n{}",
        ran.context()
    );
    ran
}

/// `dlio-rs ARGS...` in `cwd`.
pub fn dlio_rs<S: AsRef<str>>(cwd: &Path, args: &[S]) -> Ran {
    launch(DLIO_RS, cwd, args, &[])
}

/// `dlio-rs run -q [-n N] WORDS...`.
pub fn run_quiet<S: AsRef<str>>(cwd: &Path, accelerators: usize, words: &[S]) -> Ran {
    let mut args = vec![
        "run".to_string(),
        "-q".into(),
        "--accelerators".into(),
        accelerators.to_string(),
    ];
    args.extend(words.iter().map(|w| w.as_ref().to_string()));
    dlio_rs(cwd, &args)
}

pub fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// `words` plus `extra`.
pub fn with(words: &[String], extra: &[&str]) -> Vec<String> {
    let mut all = words.to_vec();
    all.extend(extra.iter().map(|w| w.to_string()));
    all
}

pub fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

pub fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer).unwrap_or_else(|| {
        let mut shown = v.to_string();
        shown.truncate(2000);
        panic!("missing {pointer} in {shown}")
    })
}

pub fn num(v: &Value, pointer: &str) -> f64 {
    at(v, pointer)
        .as_f64()
        .unwrap_or_else(|| panic!("{pointer} is not a number: {}", at(v, pointer)))
}

pub fn int(v: &Value, pointer: &str) -> u64 {
    at(v, pointer)
        .as_u64()
        .unwrap_or_else(|| panic!("{pointer} is not an unsigned integer: {}", at(v, pointer)))
}

pub fn nums(v: &Value, pointer: &str) -> Vec<f64> {
    at(v, pointer)
        .as_array()
        .unwrap_or_else(|| panic!("{pointer} is not a list: {}", at(v, pointer)))
        .iter()
        .map(|x| {
            x.as_f64()
                .unwrap_or_else(|| panic!("{pointer}: {x} is not a number"))
        })
        .collect()
}

/// A small traced training run over an existing dataset in `data`.
pub fn traced_words(data: &Path, out: &Path, shape: &Shape, extra: &[&str]) -> Vec<String> {
    let mut words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=False",
        "++workload.workflow.train=True",
        "++workload.dataset.format=npz",
        "++workload.dataset.record_length_bytes=2048",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.train.computation_time=0",
        "++workload.evaluation.eval_time=0",
        "++workload.output.trace=True",
    ]);
    words.push(format!("++workload.dataset.data_folder={}", data.display()));
    words.push(format!("++hydra.run.dir={}", out.display()));
    words.push(format!(
        "++workload.dataset.num_files_train={}",
        shape.files
    ));
    words.push(format!(
        "++workload.dataset.num_samples_per_file={}",
        shape.samples_per_file
    ));
    words.push(format!("++workload.reader.batch_size={}", shape.batch));
    words.push(format!("++workload.reader.read_threads={}", shape.threads));
    words.push(format!("++workload.train.epochs={}", shape.epochs));
    words.extend(extra.iter().map(|w| w.to_string()));
    words
}

pub struct Shape {
    pub files: u64,
    pub samples_per_file: u64,
    pub batch: u64,
    pub threads: u64,
    pub epochs: u64,
}

/// Generates the dataset `words` describe (the same words with generation on and training off).
pub fn generate_for(cwd: &Path, words: &[String]) {
    run_quiet(
        cwd,
        1,
        &with(
            words,
            &[
                "++workload.workflow.generate_data=True",
                "++workload.workflow.train=False",
            ],
        ),
    )
    .ok();
}

/// `dlio-rs audit DIR --json`, parsed; also returns the exit code.
pub fn audit(cwd: &Path, out: &Path) -> (Option<i32>, Value, Ran) {
    let ran = dlio_rs(cwd, &["audit", &out.display().to_string(), "--json"]);
    let report: Value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|e| panic!("audit --json printed no JSON: {e}\n{}", ran.context()));
    (ran.code, report, ran)
}

/// Each batch's (file, sample) reads in order, keyed by (epoch, phase, rank, step).
pub type Batches = BTreeMap<(u64, String, u64, u64), Vec<(String, u64)>>;

/// The batches of a traced run: what its plan decided.
pub fn batches(out: &Path, world: usize) -> Batches {
    let mut batches = BTreeMap::new();
    for rank in 0..world {
        let text = std::fs::read_to_string(out.join(format!("trace/{rank}.csv"))).unwrap();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let key = (
                f[0].parse().unwrap(),
                f[1].to_string(),
                f[3].parse().unwrap(),
                f[2].parse().unwrap(),
            );
            batches
                .entry(key)
                .or_insert_with(Vec::new)
                .push((f[5].to_string(), f[6].parse().unwrap()));
        }
    }
    batches
}

/// Runs `cmd` (stdin closed), draining its output on threads so a chatty child never blocks on
/// a full pipe; kills it and fails past `limit`. Returns what it left and how long it took; a
/// child that panicked fails the test.
pub fn run_bounded(mut cmd: Command, what: String, limit: Duration) -> (Ran, Duration) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        stdout.read_to_string(&mut s).ok();
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).ok();
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let elapsed = started.elapsed();
    let ran = Ran {
        what,
        code: status.code(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    };
    assert!(
        !ran.stderr.contains("panicked"),
        "a process panicked\n{}",
        ran.context()
    );
    (ran, elapsed)
}

/// How long any one wait of these tests may take.
pub const LIVE_BOUND: Duration = Duration::from_secs(60);

/// A process under test, running: its stderr lines arrive as they are written, so a test can wait
/// for what it says before it acts (a signal at a known point of a run).
pub struct Live {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
    stdout: std::thread::JoinHandle<String>,
    what: String,
}

impl Live {
    /// `dlio-rs ARGS` in `cwd`.
    pub fn dlio_rs(cwd: &Path, args: &[String]) -> Live {
        let mut cmd = Command::new(DLIO_RS);
        cmd.current_dir(cwd).args(args);
        for k in ISOLATED_ENV {
            cmd.env_remove(k);
        }
        Live::spawn(cmd, format!("dlio-rs {}", args.join(" ")))
    }

    pub fn spawn(mut cmd: Command, what: String) -> Live {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let stderr = child.stderr.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let stdout = std::thread::spawn(move || {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut stdout, &mut s).ok();
            s
        });
        Live {
            child,
            lines,
            seen: Vec::new(),
            stdout,
            what,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the process has ended.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Waits until the process says a line containing `needle`; that line.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + LIVE_BOUND;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.seen.push(line);
                    if found {
                        return self.seen.last().cloned().unwrap_or_default();
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!(
                        "{} never said {needle:?}; it said:\n{}",
                        self.what,
                        self.seen.join("\n")
                    );
                }
            }
        }
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: a plain system call on a child this test started and has not reaped.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, signal) }, 0);
    }

    /// Waits for the process to end; returns what it left and how long the wait took.
    pub fn finish(mut self) -> (Ran, Duration) {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > LIVE_BOUND {
                let _ = self.child.kill();
                panic!("{} did not end within {LIVE_BOUND:?}", self.what);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let took = started.elapsed();
        self.seen.extend(self.lines.iter());
        let ran = Ran {
            what: self.what,
            code: status.code(),
            stdout: self.stdout.join().unwrap(),
            stderr: self.seen.join("\n"),
        };
        assert!(
            !ran.stderr.contains("panicked"),
            "a process panicked\n{}",
            ran.context()
        );
        (ran, took)
    }
}

/// A phase's figures as printed: (phase, samples/s, MiB/s read, AU %).
pub type PhaseFigures = (String, String, String, String);

/// The figures of each finished phase as its progress line on stderr prints them
/// ("epoch 1/2 train 4 steps in 0.02 s  1234.5 samples/s  0.2 MiB/s read  AU 97.12%"), and as
/// the end-of-run table's rows on stdout print them ("1  97.12  1234.5  0.1  0.2 …", " eval …").
pub fn phase_lines_and_table_rows(ran: &Ran) -> (Vec<PhaseFigures>, Vec<PhaseFigures>) {
    let lines = ran
        .stderr
        .lines()
        .filter(|l| l.starts_with("epoch ") && l.contains(" AU "))
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let au = t[t.len() - 1].trim_end_matches('%');
            (t[2].into(), t[8].into(), t[10].into(), au.into())
        })
        .collect();
    let rows = ran
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("epoch "))
        .skip(1)
        .take_while(|l| !l.starts_with("mean"))
        .map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            let phase = if t[0] == "eval" { "eval" } else { "train" };
            (phase.into(), t[2].into(), t[4].into(), t[1].into())
        })
        .collect();
    (lines, rows)
}

/// The rows of a CSV document, as Python's csv module reads it (strict: a stray quote fails).
pub fn parse_csv(text: &str) -> Vec<Vec<String>> {
    let script = "import csv, io, json, sys\n\
                  text = sys.stdin.buffer.read().decode('utf-8')\n\
                  rows = list(csv.reader(io.StringIO(text, newline=''), strict=True))\n\
                  print(json.dumps(rows))\n";
    let rows = python_json(script, text, "Python's csv module");
    serde_json::from_value(rows).unwrap()
}

/// What the Python `script` prints as JSON, given `input` on its standard input; `reader` names
/// what reads it in the failure's message.
pub fn python_json(script: &str, input: &str, reader: &str) -> Value {
    use std::io::Write;
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 runs (CI installs it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{reader} refused the document: {}\n{input}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Standard output as one JSON document, and nothing else.
pub fn document(ran: &Ran) -> Value {
    serde_json::from_str(&ran.stdout).unwrap_or_else(|e| {
        panic!(
            "standard output is not one JSON document ({e})\n{}",
            ran.context()
        )
    })
}
