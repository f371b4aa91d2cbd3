//! Hostile input at random, given to the real `dlio-rs` (proptest). Two properties:
//!
//! - random configurations: `config`, `plan`, `datasize` and `run` with random override words
//!   over the real keys of src/config (decode.rs, formats.rs), synthetic data or a real format
//!   generated then trained on; half of the cases tame (valid small values, so that runs run),
//!   half hostile (negative, huge, NaN, text with quotes, `#`, `é` and line breaks, lists, nested
//!   mappings, odd words and options); and things planted where the run writes (links to a
//!   bystander's files, FIFOs, links to /dev/zero, junk, folders) in its output folder and data
//!   folder;
//! - damaged output folders: the output folders of real runs (a traced synthetic run of 2 ranks
//!   with evaluation and checkpoints, another to compare with, a traced npz run, a sweep) copied,
//!   then damaged at random (cut, bytes flipped, random bytes, wrong JSON values and types, huge
//!   numbers, deep nesting, keys of the saved configuration changed, CSV and YAML fields, a FIFO,
//!   a link to /dev/zero or to a bystander, a folder in place of a file, a huge sparse file), and
//!   read by `report`, `compare`, `audit` (text and `--json`) and `sweep` (which continues from
//!   sweep.json); the pages they write may be links to a bystander's file, or FIFOs.
//!
//! Whatever they get, the binaries keep the promise:
//!
//! 1. no panic and no abort (exit 101 or 134, a signal, `panicked at`, a backtrace, a failed
//!    allocation: each process has [`MEMORY_LIMIT`] of address space);
//! 2. no hang: every process is killed past [`LIMIT`] (its whole process group), and that is a
//!    failure naming the command;
//! 3. exit code 0, 1 or 2, and when not 0 one `error: …` line on standard error (the one
//!    exception: `audit` exits 1 with its report on standard output when the traces break the
//!    plan, as its help says);
//! 4. nothing written outside the case's own folders: each case has a scratch folder (the
//!    processes' working directory) with `out/` (the run's output folder, or the folder a reader
//!    is given), `data/`, `ckpt/` and `bystander/`; everything else (names, kinds, sizes, modes,
//!    times, contents) is the same after the case as before, also what links planted in out/
//!    lead to.
//!
//! A damaged file of dlio-rs's own is bad input, for which exit 2 is expected; a reader that says
//! 1 instead does not break the promise: those cases are printed at the end of the test, one per
//! kind of error (`cargo test … hostile:: -- --nocapture` shows them, and how every case ended).
//!
//! Cases per property: `PROPTEST_CASES`, or [`CONFIG_CASES`] and [`FOLDER_CASES`]. A failure
//! prints the smallest case proptest found, its command line, and the scratch folder it keeps;
//! proptest saves the case in tests/hostile.proptest-regressions and runs it first next time.
//! `HOSTILE_SURVEY=1` goes on past each failure (printing it) and fails at the end with them all.
//!
//! Nothing is planted in the checkpoint folder by the properties: a link there is written through
//! (not fixed yet), and [`a_link_in_place_of_a_checkpoint_folder_is_not_written_through`] shows
//! that failure alone.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config as Proptest, TestCaseError, TestError, TestRunner};
use serde_json::Value as Json;

use crate::common::{strings, Scratch, DLIO_RS, FORMATS, ISOLATED_ENV};

/// How long one process may take: a case takes well under a second, so a process still running
/// after this is hung (it is killed, with its process group).
const LIMIT: Duration = Duration::from_secs(20);

/// The address space each process may have (`RLIMIT_AS`): the cases are small, and a process
/// that a hostile input makes take more would take the memory of a shared machine; past it an
/// allocation fails, which the promise catches as an abort.
const MEMORY_LIMIT: u64 = 8 << 30;

/// Cases of each property when `PROPTEST_CASES` does not say: about 10 s and 15 s on 2 cores
/// (2,500 cases of each took 60 s and 75 s, the two properties side by side).
const CONFIG_CASES: u32 = 250;
const FOLDER_CASES: u32 = 250;

// ---------------------------------------------------------------------------------------------
// Processes, bounded in time
// ---------------------------------------------------------------------------------------------

/// What a process left.
struct Ended {
    /// The command line, quoted for a shell.
    what: String,
    code: Option<i32>,
    signal: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
    took: Duration,
}

impl Ended {
    fn context(&self) -> String {
        let cut = |s: &str| -> String {
            if s.len() > 4000 {
                let mut end = 4000;
                while !s.is_char_boundary(end) {
                    end -= 1;
                }
                format!("{}… ({} bytes)", &s[..end], s.len())
            } else {
                s.to_string()
            }
        };
        format!(
            "command: {}\nexit: {:?} signal: {:?} after {:.2} s{}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.what,
            self.code,
            self.signal,
            self.took.as_secs_f64(),
            if self.timed_out { " (killed: timeout)" } else { "" },
            cut(&self.stdout),
            cut(&self.stderr)
        )
    }

    /// The first `error:` line.
    fn error_line(&self) -> &str {
        self.stderr
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or("")
    }
}

/// A word as a shell reads it back: quoted when it holds anything but plain characters.
fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-_=./,:@%".contains(c));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `dlio-rs ARGS` in `cwd`, stdin closed, in a process group of its own; killed (the whole group)
/// past [`LIMIT`]. No polling: a thread waits for the process and the test waits for that thread.
fn dlio_rs(cwd: &Path, args: &[String]) -> Ended {
    let what = std::iter::once("dlio-rs".to_string())
        .chain(args.iter().map(|a| quote(a)))
        .collect::<Vec<_>>()
        .join(" ");
    let mut cmd = Command::new(DLIO_RS);
    cmd.current_dir(cwd)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for k in ISOLATED_ENV {
        cmd.env_remove(k);
    }
    // SAFETY: setrlimit is async-signal-safe, and the closure touches nothing else.
    unsafe {
        cmd.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: MEMORY_LIMIT,
                rlim_max: MEMORY_LIMIT,
            };
            match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let started = Instant::now();
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).ok();
            String::from_utf8_lossy(&bytes).into_owned()
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let group = child.id() as i32;
    let (send, ended) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(child.wait());
    });
    let (status, timed_out) = match ended.recv_timeout(LIMIT) {
        Ok(status) => (status, false),
        Err(_) => {
            // SAFETY: a plain system call; the group is the child's, which is not reaped until
            // the waiting thread's wait returns, so its id cannot have been reused.
            unsafe { libc::kill(-group, libc::SIGKILL) };
            (ended.recv().expect("the waiting thread"), true)
        }
    };
    let status = status.unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
    Ended {
        what,
        code: status.code(),
        signal: status.signal(),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
        timed_out,
        took: started.elapsed(),
    }
}

/// `audit`'s own exit 1: the traces break the plan, and its report (on standard output) says
/// how; there is no error line on top, as `dlio-rs audit --help` says.
fn audit_verdict(args: &[String], ended: &Ended) -> bool {
    args.first().map(String::as_str) == Some("audit")
        && ended.code == Some(1)
        && ended.stderr.trim().is_empty()
        && (ended.stdout.contains("audit FAILED") || ended.stdout.contains("\"passed\": false"))
}

/// Why `ended` breaks the promise (see the module's comment), if it does.
fn broken_promise(args: &[String], ended: &Ended) -> Option<String> {
    if ended.timed_out {
        return Some(format!("hung: still running after {LIMIT:?}, killed"));
    }
    if let Some(signal) = ended.signal {
        return Some(format!("killed by signal {signal}"));
    }
    for mark in [
        "panicked at",
        "RUST_BACKTRACE",
        "stack backtrace",
        "memory allocation of",
    ] {
        if ended.stderr.contains(mark) || ended.stdout.contains(mark) {
            return Some(format!("printed {mark:?}: a panic or an abort"));
        }
    }
    let code = ended.code.expect("an exit code when there is no signal");
    if code == 101 || code == 134 {
        return Some(format!("exit {code}: a panic or an abort"));
    }
    if !(0..=2).contains(&code) {
        return Some(format!("exit {code}: only 0, 1 and 2 are promised"));
    }
    if code != 0 && !audit_verdict(args, ended) {
        if ended.stderr.trim().is_empty() {
            return Some(format!("exit {code} with nothing on stderr"));
        }
        let errors: Vec<&str> = ended
            .stderr
            .lines()
            .filter(|l| l.starts_with("error:"))
            .collect();
        if errors.len() != 1 {
            return Some(format!(
                "exit {code}: stderr should hold one 'error: …' line, it holds {}",
                errors.len()
            ));
        }
        if errors[0].trim_end() == "error:" {
            return Some(format!("exit {code}: the error line says nothing"));
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Scratch folders, bystanders and snapshots
// ---------------------------------------------------------------------------------------------

/// A case's folders: `out/`, `data/`, `ckpt/` and `bystander/` in a fresh scratch folder, which
/// is also the working directory of the processes.
struct Site {
    tmp: Scratch,
}

/// The bystander's files: (name, contents); links planted in out/ point at them.
const BYSTANDER_FILES: &[(&str, &str)] = &[
    ("a.json", "{\"mine\": true}\n"),
    ("b.log", "my notes\n"),
    ("c.csv", "x,y\n1,2\n"),
    ("d.yaml", "mine: true\n"),
];

impl Site {
    fn new(name: &str) -> Site {
        let tmp = Scratch::new(name);
        for folder in ["out", "data", "ckpt", "bystander/dir"] {
            std::fs::create_dir_all(tmp.join(folder)).unwrap();
        }
        for (name, text) in BYSTANDER_FILES {
            std::fs::write(tmp.join("bystander").join(name), text).unwrap();
        }
        std::fs::write(tmp.join("bystander/dir/inside.txt"), "mine too\n").unwrap();
        Site { tmp }
    }

    fn out(&self) -> PathBuf {
        self.tmp.join("out")
    }

    /// A bystander's file (`i` picks one), or its folder.
    fn bystander(&self, i: usize, folder: bool) -> PathBuf {
        if folder {
            self.tmp.join("bystander/dir")
        } else {
            self.tmp
                .join("bystander")
                .join(BYSTANDER_FILES[i % BYSTANDER_FILES.len()].0)
        }
    }

    /// Keeps the folder for inspection (a failing case), and says where it is. Only the last
    /// failing case of a test keeps its folder (shrinking fails again and again; the last failure
    /// is the smallest case): the one kept before is removed.
    fn keep(self) -> String {
        thread_local! {
            static KEPT: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
        }
        let path = self.tmp.path.clone();
        std::mem::forget(self.tmp);
        if let Some(before) = KEPT.with(|kept| kept.replace(Some(path.clone()))) {
            let _ = std::fs::remove_dir_all(before);
        }
        path.display().to_string()
    }
}

/// What a snapshot records of each path: its kind, mode, size, times and contents (a link's
/// target, never followed).
#[derive(Debug, PartialEq, Eq)]
enum Node {
    Folder {
        mode: u32,
        mtime: (i64, i64),
        ctime: (i64, i64),
    },
    File {
        mode: u32,
        len: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
        hash: u64,
    },
    Link {
        target: PathBuf,
    },
    Other {
        mode: u32,
        mtime: (i64, i64),
    },
    /// One of the folders skipped: the case's own, whose times change as it is written.
    Own,
}

type Snapshot = BTreeMap<PathBuf, Node>;

/// Everything below `root` but the folders in `skip` (whose own entries in root are recorded:
/// their removal or replacement shows).
fn snapshot(root: &Path, skip: &[PathBuf]) -> Snapshot {
    let mut all = Snapshot::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(path) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let times =
            |m: &std::fs::Metadata| ((m.mtime(), m.mtime_nsec()), (m.ctime(), m.ctime_nsec()));
        let (mtime, ctime) = times(&meta);
        let node = if meta.file_type().is_symlink() {
            Node::Link {
                target: std::fs::read_link(&path).unwrap_or_default(),
            }
        } else if skip.contains(&path) && meta.is_dir() {
            Node::Own
        } else if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&path) {
                stack.extend(entries.flatten().map(|e| e.path()));
            }
            Node::Folder {
                mode: meta.mode(),
                mtime,
                ctime,
            }
        } else if meta.is_file() {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            // Contents up to 1 MiB (the bystander's files and the copied outputs; a huge file
            // planted by a damage is known by its size and times).
            if meta.len() <= 1 << 20 {
                std::fs::read(&path).unwrap_or_default().hash(&mut hasher);
            }
            Node::File {
                mode: meta.mode(),
                len: meta.len(),
                mtime,
                ctime,
                hash: hasher.finish(),
            }
        } else {
            Node::Other {
                mode: meta.mode(),
                mtime,
            }
        };
        let rel = path.strip_prefix(root).unwrap().to_path_buf();
        all.insert(rel, node);
    }
    all
}

/// What changed between two snapshots, one line per path.
fn changes(before: &Snapshot, after: &Snapshot) -> Vec<String> {
    let mut changed = Vec::new();
    for (path, node) in before {
        match after.get(path) {
            None => changed.push(format!("{}: removed", path.display())),
            Some(now) if now != node => {
                changed.push(format!("{}: {node:?} became {now:?}", path.display()))
            }
            Some(_) => {}
        }
    }
    for path in after.keys().filter(|p| !before.contains_key(*p)) {
        changed.push(format!("{}: created", path.display()));
    }
    changed
}

/// The promise for one process of a case: `Err` (with the command, what it printed and why)
/// when it is broken; the case's folder is kept.
fn check(
    site: Site,
    args: &[String],
    ended: &Ended,
    before: &Snapshot,
    skip: &[PathBuf],
) -> Result<Site, TestCaseError> {
    let mut why = broken_promise(args, ended);
    if why.is_none() {
        let written = changes(before, &snapshot(&site.tmp.path, skip));
        if !written.is_empty() {
            why = Some(format!(
                "wrote outside its own folders:\n  {}",
                written.join("\n  ")
            ));
        }
    }
    match why {
        None => Ok(site),
        Some(why) => {
            let kept = site.keep();
            Err(TestCaseError::fail(format!(
                "{why}\n{}\n(folder kept: {kept})",
                ended.context()
            )))
        }
    }
}

/// Cases: `PROPTEST_CASES` when set, or `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Proptest's settings for these properties: few shrinking steps (each runs processes), the
/// regressions file beside this module.
fn settings(cases: u32, test: &'static str) -> Proptest {
    Proptest {
        cases,
        max_shrink_iters: 48,
        max_shrink_time: 120_000,
        source_file: Some(file!()),
        test_name: Some(test),
        ..Proptest::default()
    }
}

/// Runs a property; a failure panics with the minimal case proptest found. With
/// `HOSTILE_SURVEY=1`, a broken promise is printed and the cases go on (no shrinking): the test
/// fails at the end with every failure found, to see them all at once.
fn run_property<S: Strategy>(
    config: Proptest,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug + Clone,
{
    let survey = std::env::var_os("HOSTILE_SURVEY").is_some_and(|v| v != "0");
    let found = RefCell::new(Vec::new());
    let mut runner = TestRunner::new(config);
    let outcome = runner.run(&strategy, |case| match test(case.clone()) {
        Err(e) if survey => {
            eprintln!("BROKEN PROMISE: {case:?}\n{e}\n");
            found.borrow_mut().push(e.to_string());
            Ok(())
        }
        other => other,
    });
    match outcome {
        Ok(()) => {}
        Err(TestError::Fail(why, case)) => {
            panic!("the promise is broken; minimal case: {case:#?}\n{why}")
        }
        Err(e) => panic!("{e}"),
    }
    let found = found.into_inner();
    assert!(
        found.is_empty(),
        "{} case(s) broke the promise:\n\n{}",
        found.len(),
        found.join("\n\n")
    );
}

// ---------------------------------------------------------------------------------------------
// Property 1: random configurations
// ---------------------------------------------------------------------------------------------

/// How a key's value is made.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// A whole number, valid (and quick) from `.0` to `.1`.
    Count(i64, i64),
    Bool,
    Choice(&'static [&'static str]),
    /// Seconds of compute: a number or a distribution, at most 0.01 s.
    Seconds,
    /// `checkpoint.time_between_checkpoints` (slept as its absolute value).
    Pause,
    Fraction,
    Dims,
    Columns,
    /// A name that becomes one file-name component (`file_prefix`, `log_file`) or a label.
    Name,
    /// `storage.throttle.*` numbers: only outside runs (a tiny rate would be slept out).
    Rate,
    /// Free text (the object store's options): only outside runs.
    Text,
}

/// A configuration key below `workload.`, with how its values are made; `runs`: whether runs get
/// it (keys whose valid values can make a run long or reach the network are for `config`,
/// `plan` and `datasize` only).
struct Key {
    name: &'static str,
    kind: Kind,
    runs: bool,
}

const fn key(name: &'static str, kind: Kind) -> Key {
    Key {
        name,
        kind,
        runs: true,
    }
}

const fn not_run(name: &'static str, kind: Kind) -> Key {
    Key {
        name,
        kind,
        runs: false,
    }
}

/// Every format dlio-rs generates, and the one that reads nothing.
const ALL_FORMATS: &[&str] = &[
    FORMATS[0],
    FORMATS[1],
    FORMATS[2],
    FORMATS[3],
    FORMATS[4],
    FORMATS[5],
    FORMATS[6],
    FORMATS[7],
    FORMATS[8],
    FORMATS[9],
    "synthetic",
];
const _: () = assert!(FORMATS.len() == 10, "ALL_FORMATS lists every format");
const SHUFFLES: &[&str] = &["off", "seed", "random"];
const DATATYPES: &[&str] = &["int8", "uint8", "fp16", "bf16", "fp32", "fp64"];
const ELEMENTS: &[&str] = &[
    "uint8", "int8", "uint16", "int16", "uint32", "int32", "uint64", "int64", "float16", "float32",
    "float64",
];

/// The keys of src/config/decode.rs and formats.rs (not the folders: those are the case's own).
const KEYS: &[Key] = &[
    key("dataset.num_files_train", Kind::Count(1, 8)),
    key("dataset.num_files_eval", Kind::Count(0, 4)),
    key("dataset.num_samples_per_file", Kind::Count(1, 4)),
    key("dataset.record_length_bytes", Kind::Count(0, 65536)),
    key("dataset.record_length_bytes_stdev", Kind::Count(0, 4096)),
    key("dataset.record_length_bytes_resize", Kind::Count(0, 65536)),
    key("dataset.record_length", Kind::Count(0, 65536)),
    key("dataset.num_subfolders_train", Kind::Count(0, 3)),
    key("dataset.num_subfolders_eval", Kind::Count(0, 2)),
    key("dataset.format", Kind::Choice(ALL_FORMATS)),
    key("dataset.file_prefix", Kind::Name),
    key(
        "dataset.compression",
        Kind::Choice(&["none", "gzip", "zip", "lzf", "bz2", "xz"]),
    ),
    key("dataset.compression_level", Kind::Count(0, 9)),
    key("dataset.keep_files", Kind::Bool),
    key("dataset.record_dims", Kind::Dims),
    key("dataset.record_element_type", Kind::Choice(ELEMENTS)),
    key("dataset.skip_listing", Kind::Bool),
    key("dataset.listing_validation_interval", Kind::Count(0, 4)),
    key("dataset.hdf5.chunk_dims", Kind::Dims),
    key("dataset.hdf5.num_dset_per_record", Kind::Count(1, 3)),
    key("dataset.parquet.columns", Kind::Columns),
    key("dataset.parquet.row_group_size", Kind::Count(1, 8)),
    key(
        "dataset.parquet.read_mode",
        Kind::Choice(&["row_group", "whole_file"]),
    ),
    key(
        "reader.data_loader",
        Kind::Choice(&["pytorch", "tensorflow", "synthetic", "dali"]),
    ),
    key("reader.batch_size", Kind::Count(1, 4)),
    key("reader.batch_size_eval", Kind::Count(1, 4)),
    key("reader.read_threads", Kind::Count(0, 3)),
    key("reader.computation_threads", Kind::Count(1, 2)),
    key("reader.prefetch_size", Kind::Count(0, 4)),
    key("reader.file_shuffle", Kind::Choice(SHUFFLES)),
    key("reader.sample_shuffle", Kind::Choice(SHUFFLES)),
    key("reader.shuffle_size", Kind::Count(1, 64)),
    key("reader.read_type", Kind::Choice(&["on_demand", "memory"])),
    key("reader.preprocess_time", Kind::Seconds),
    key("reader.batch_handoff_time", Kind::Seconds),
    key("reader.odirect", Kind::Bool),
    // Not drop_before_epoch: it drops the page cache of the whole (shared) machine.
    key(
        "reader.page_cache",
        Kind::Choice(&["keep", "evict_after_read"]),
    ),
    key("reader.decode_images", Kind::Bool),
    key("reader.dont_use_mmap", Kind::Bool),
    key("reader.transfer_size", Kind::Count(0, 1 << 20)),
    key("train.epochs", Kind::Count(1, 2)),
    key("train.computation_time", Kind::Seconds),
    key("train.total_training_steps", Kind::Count(-1, 4)),
    key("train.seed_change_epoch", Kind::Bool),
    key("train.seed", Kind::Count(0, 1000)),
    key("evaluation.eval_time", Kind::Seconds),
    key("evaluation.eval_after_epoch", Kind::Count(0, 2)),
    key("evaluation.epochs_between_evals", Kind::Count(1, 2)),
    key("output.metric.exclude_start_steps", Kind::Count(0, 3)),
    key("output.metric.exclude_end_steps", Kind::Count(0, 3)),
    key("output.log_file", Kind::Name),
    key("output.trace", Kind::Bool),
    key(
        "output.trace_format",
        Kind::Choice(&["csv", "chrome", "pfw", "all"]),
    ),
    key("workflow.generate_data", Kind::Bool),
    key("workflow.train", Kind::Bool),
    key("workflow.evaluation", Kind::Bool),
    key("workflow.checkpoint", Kind::Bool),
    key("workflow.profiling", Kind::Bool),
    key("checkpoint.checkpoint_after_epoch", Kind::Count(0, 2)),
    key("checkpoint.epochs_between_checkpoints", Kind::Count(1, 2)),
    key("checkpoint.steps_between_checkpoints", Kind::Count(-1, 4)),
    key("checkpoint.fsync", Kind::Bool),
    key("checkpoint.time_between_checkpoints", Kind::Pause),
    key("checkpoint.num_checkpoints_write", Kind::Count(-1, 2)),
    key("checkpoint.num_checkpoints_read", Kind::Count(-1, 2)),
    key("checkpoint.rank_sync", Kind::Bool),
    key("checkpoint.mode", Kind::Choice(&["default", "subset"])),
    key("checkpoint.randomize_tensor", Kind::Bool),
    key("checkpoint.odirect", Kind::Bool),
    key("model.name", Kind::Name),
    key("model.model_size_bytes", Kind::Count(0, 1 << 20)),
    key("model.model_size", Kind::Count(0, 1 << 20)),
    key("model.model_datatype", Kind::Choice(DATATYPES)),
    key("model.optimizer_datatype", Kind::Choice(DATATYPES)),
    key("model.num_layers", Kind::Count(-1, 2)),
    key("model.layer_parameters", Kind::Dims),
    key("model.optimization_groups", Kind::Dims),
    key("model.parallelism.tensor", Kind::Count(1, 2)),
    key("model.parallelism.pipeline", Kind::Count(1, 2)),
    key("model.parallelism.data", Kind::Count(-1, 2)),
    key("model.parallelism.zero_stage", Kind::Count(0, 3)),
    key("model.transformer.vocab_size", Kind::Count(1, 64)),
    key("model.transformer.hidden_size", Kind::Count(1, 64)),
    key("model.transformer.ffn_hidden_size", Kind::Count(1, 64)),
    key("model.transformer.num_attention_heads", Kind::Count(1, 4)),
    key("model.transformer.num_kv_heads", Kind::Count(1, 4)),
    // The default shape of a transformer writes GiBs per checkpoint: not in runs.
    not_run("model.type", Kind::Choice(&["transformer", "cnn"])),
    key("framework", Kind::Choice(&["pytorch", "tensorflow"])),
    key(
        "storage.storage_type",
        Kind::Choice(&["local_fs", "parallel_fs", "direct_fs"]),
    ),
    key("metric.au", Kind::Fraction),
    not_run("storage.throttle.mib_per_second", Kind::Rate),
    not_run("storage.throttle.latency_ms", Kind::Rate),
    not_run("storage.storage_root", Kind::Text),
    not_run("storage.storage_options.endpoint_url", Kind::Text),
    not_run("storage.storage_options.s3_max_attempts", Kind::Count(1, 5)),
    not_run(
        "storage.storage_options.part_size",
        Kind::Count(5 << 20, 6 << 20),
    ),
    not_run("storage.storage_options.request_timeout", Kind::Rate),
];

fn valid(kind: Kind) -> Vec<String> {
    let s = |list: &[&str]| list.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    match kind {
        Kind::Count(lo, hi) => {
            let mut values: Vec<String> = if hi - lo <= 16 {
                (lo..=hi).map(|v| v.to_string()).collect()
            } else {
                vec![lo.to_string(), ((lo + hi) / 2).to_string(), hi.to_string()]
            };
            values.push(format!("{hi}.0"));
            values
        }
        Kind::Bool => s(&["True", "False", "true", "FALSE"]),
        Kind::Choice(names) => {
            let mut values = s(names);
            values.push(names[0].to_uppercase());
            values
        }
        Kind::Seconds => s(&[
            "0",
            "0.001",
            "0.005",
            "{}",
            "{mean: 0.002}",
            "{mean: 0.002, stdev: 0.001}",
            "{type: uniform, min: 0, max: 0.004}",
            "{type: exponential, scale: 0.001}",
            "{type: gamma, shape: 2, scale: 0.001}",
            "{type: poisson, lam: 0.002}",
            "{type: NORMAL, mean: 0.001}",
        ]),
        Kind::Pause => s(&["0", "0.001", "-0.001", "0.0"]),
        Kind::Fraction => s(&["0.9", "0.5", "1", "1.0", "0.01", "9e-1"]),
        Kind::Dims => s(&["[16]", "[8, 8]", "[2, 4, 8]", "[]", "16"]),
        Kind::Columns => s(&[
            "[{name: a, dtype: float32, size: 16}]",
            "[{name: a, dtype: binary, size: 8}, {name: b, dtype: uint8, size: 4, read: False}]",
            "[{name: c, dtype: list, size: 2}]",
            "[]",
        ]),
        Kind::Name => s(&["img", "x", "a-b_c", "é", "sample.log", "with space"]),
        Kind::Rate => s(&["0", "100", "1000", "0.5"]),
        Kind::Text => s(&["x", "http://127.0.0.1:9", "./", "s3://bucket"]),
    }
}

/// Hostile values of each kind that a run refuses (or takes, quickly).
fn hostile(kind: Kind) -> Vec<String> {
    let s = |list: &[&str]| list.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    match kind {
        Kind::Count(..) => s(&["-3", "2.5", "3.0000001", "1e3.5", "0x"]),
        Kind::Bool => s(&["yes", "1", "0", "maybe", "[True]"]),
        Kind::Choice(_) => s(&["", " ", "none", "off", "False", "bogus", "npz ", "aistore"]),
        Kind::Seconds => s(&[
            "-1",
            "1e308",
            "{mean: 1e300}",
            "{type: weibull, a: 1}",
            "{type: uniform, min: 1, max: 0}",
            "{mean: .nan}",
            "{type: [1]}",
            "{stdev: 1}",
            "{mean: 0.001, stdev: -1}",
            "{mean: 0.001, extra: 1}",
            "[0.1]",
            "{type: poisson, lam: -1}",
            "{type: gamma, shape: 0, scale: 0}",
        ]),
        Kind::Pause => s(&["1e308", "-1e308", ".nan", "[0]", "{mean: 0}", "1e7"]),
        Kind::Fraction => s(&["0", "-0.5", "1.5", "1e-320", "100"]),
        Kind::Dims => s(&[
            "[0]",
            "[-1]",
            "[1.5]",
            "['a']",
            "[[1]]",
            "[4294967296, 4294967296]",
            "{a: 1}",
            "[18446744073709551615]",
        ]),
        Kind::Columns => s(&[
            "[{name: a, dtype: float32, size: 0}]",
            "[{dtype: float32}]",
            "[{name: '', size: 1}]",
            "[{name: a, read: False}]",
            "[{name: a, size: 4294967297}]",
            "[{name: a, dtype: bogus}]",
            "[{name: a, extra: 1}]",
            "[5]",
            "{name: a}",
            "[{name: a, size: -1}, {name: a, size: 1}]",
        ]),
        Kind::Name => s(&[
            "../x",
            "..",
            ".",
            "''",
            "a/b",
            "/abs",
            "'x\ny'",
            "dlio.log",
            "report.json",
            ".dlio-rs.lock",
        ]),
        Kind::Rate => s(&["-1", "1e308", "1e9", "1e-300"]),
        Kind::Text => s(&["''", "http://[::1", "s3://", "../.."]),
    }
}

/// Hostile values for any key, that no key takes as a long run: refused, or small.
const ANY: &[&str] = &[
    "-1",
    "-9223372036854775808",
    "18446744073709551615",
    "99999999999999999999",
    "1e308",
    "-1e308",
    "1e400",
    ".nan",
    "nan",
    ".inf",
    "-.inf",
    "1.5",
    "0x10",
    "0o17",
    "017",
    "1_000",
    "'8'",
    "\"\"",
    "''",
    "null",
    "True",
    "no",
    "abc",
    "[]",
    "[1, 2]",
    "{}",
    "{a: 1}",
    "{a: {b: [1, {c: [[]]}]}}",
    "[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]",
    "'a,b=c[d]{e}'",
    "\"x#y ~ é\"",
    "'line\nbreak'",
    "\"tab\there\"",
    "é",
    "~",
    "'~'",
    "${oc.env:HOME}",
    "???",
    "a:b",
    "- 1",
    "!!python/object:os.system x",
    "*alias",
    "&a [*a]",
    "{mean: 0.001}",
    "1e-320",
    "-0",
    "0",
    "[1,2",
    "{a: 1",
    "'unterminated",
    "a=b",
    "x,y",
];

/// Valid but huge: for `config`, `plan` and `datasize`, which must take them quickly (or refuse
/// them); a run would take them at their word.
const HUGE: &[&str] = &[
    "1e12",
    "1000000000000",
    "9223372036854775807",
    "1099511627776",
    "1099511627777",
    "4294967296",
    "281474976710656",
    "1000000",
    "1000001",
    "65536",
    "1e15",
    "1e6",
    "[65536, 65536]",
    "[{name: a, dtype: float64, size: 4294967296}]",
];

/// Text of characters that mean something to Hydra, YAML or a shell; never a NUL, which no
/// command line can hold.
fn text() -> impl Strategy<Value = String> {
    let special = prop::sample::select(
        " \t\n:-?,[]{}#&*!|>'\"%@`~=+.$()\\/_0123456789eEaxnlINFé€"
            .chars()
            .collect::<Vec<_>>(),
    );
    let any = any::<char>().prop_filter("no NUL in a command line", |c| *c != '\0');
    prop::collection::vec(prop_oneof![4 => special, 1 => any], 0..24)
        .prop_map(|chars| chars.into_iter().collect())
}

/// Words of odd shapes; `{B}` is replaced by the bystander's folder, `{S}` by the scratch folder.
const ODD_WORDS: &[&str] = &[
    "++",
    "+",
    "~",
    "=",
    "++=",
    "++workload",
    "++workload=",
    "++workload.=1",
    "++workload..x=1",
    "++workload.dataset=5",
    "++workload.dataset=[1]",
    "++workload.dataset.num_files_train.x=1",
    "~workload.dataset",
    "~workload.reader",
    "~workload.reader.batch_size=5",
    "~workload.nothing",
    "+workload.reader.batch_size=2",
    "workload.nothing=1",
    "workload.reader.batch_size=2",
    "workload=nonexistent",
    "workload=../../etc/passwd",
    "workload=",
    "workload=default",
    "dataset.format=npz",
    "++hydra.output_subdir=../bystander",
    "++hydra.output_subdir={B}",
    "++hydra.output_subdir=..",
    "++hydra.output_subdir=.",
    "++hydra.output_subdir=",
    "++hydra.output_subdir=null",
    "++hydra.output_subdir=cfg",
    "++hydra.output_subdir=.hydra/../../bystander",
    "++hydra.job.name=x",
    "++hydra.nothing=1",
    "++workload.dataset.data_folder={B}/../data",
    "--strict",
    "--config-dir={B}",
    "-n",
    "--",
    "++workload.reader.batch_size=1,2",
    "++workload.reader.batch_size=int(3)",
    "++workload.reader.batch_size=range(1,3)",
    "++workload.reader.batch_size=choice(1,2)",
    "++workload.x=${workload.reader.batch_size}",
    "++workload.reader.batch_size=${workload.x}",
    "++workload.dataset.record_length=1024",
    "++workload.data_reader.batch_size=2",
    "++workload.model=unet3d",
    "++workload.model=[1]",
];

/// One override word: mostly `++workload.KEY=VALUE` over the real keys; `tame`: only that, with
/// valid values.
fn word(runs: bool, tame: bool) -> BoxedStrategy<String> {
    let keys: Vec<&'static Key> = KEYS.iter().filter(|k| !runs || k.runs).collect();
    let keys2 = keys.clone();
    let dice = if tame { 0u32..60 } else { 0u32..100 };
    let set =
        (any::<Index>(), dice, any::<Index>(), text()).prop_map(move |(key, dice, pick, text)| {
            let key = keys[key.index(keys.len())];
            let huge = !runs && dice >= 90;
            let pool: Vec<String> = match dice {
                _ if huge => HUGE.iter().map(|v| v.to_string()).collect(),
                0..=59 => valid(key.kind),
                60..=74 => hostile(key.kind),
                75..=89 => ANY.iter().map(|v| v.to_string()).collect(),
                _ => vec![text],
            };
            format!("++workload.{}={}", key.name, pool[pick.index(pool.len())])
        });
    let shape = (any::<Index>(), 0u32..4, any::<Index>()).prop_map(move |(key, shape, pick)| {
        let key = keys2[key.index(keys2.len())];
        let values = valid(key.kind);
        let value = &values[pick.index(values.len())];
        match shape {
            0 => format!("+workload.{}={value}", key.name),
            1 => format!("workload.{}={value}", key.name),
            2 => format!("~workload.{}", key.name),
            _ => format!("~workload.{}={value}", key.name),
        }
    });
    if tame {
        return set.boxed();
    }
    let odd = prop::sample::select(ODD_WORDS).prop_map(str::to_string);
    let odd_key = text().prop_map(|t| format!("++workload.{t}=1"));
    prop_oneof![
        30 => set,
        3 => shape,
        3 => odd,
        1 => odd_key,
        1 => text(),
    ]
    .boxed()
}

/// The subcommand of a case and its options.
#[derive(Debug, Clone)]
enum Sub {
    Config { strict: bool },
    Plan { options: Vec<String> },
    Datasize { options: Vec<String> },
    Run { options: Vec<String> },
}

/// A random configuration case: the subcommand, the format of its data (synthetic: none), its
/// words, and what is planted where the run writes (a name of [`PLANTED`], in out/ or data/;
/// what is put there).
#[derive(Debug, Clone)]
struct ConfigCase {
    sub: Sub,
    format: &'static str,
    words: Vec<String>,
    plant: Vec<(Index, Plant)>,
}

/// What is planted where a run writes a file or a folder.
#[derive(Debug, Clone)]
enum Plant {
    /// A link to a bystander's file (or its folder, in place of a folder).
    Link(u8),
    Fifo,
    DevZero,
    /// A file of these bytes (in place of a folder too).
    Junk(Vec<u8>),
    /// A folder in place of a file.
    Folder,
    /// A link to itself.
    Loop,
}

fn plant() -> impl Strategy<Value = Plant> {
    prop_oneof![
        6 => any::<u8>().prop_map(Plant::Link),
        2 => Just(Plant::Fifo),
        1 => Just(Plant::DevZero),
        2 => prop::collection::vec(any::<u8>(), 0..64).prop_map(Plant::Junk),
        1 => Just(Plant::Folder),
        1 => Just(Plant::Loop),
    ]
}

/// An option's value: none or a valid one mostly, else hostile (never when `tame`).
fn option(
    tame: bool,
    name: &'static str,
    valid: &'static [&'static str],
    hostile: &'static [&'static str],
) -> BoxedStrategy<Vec<String>> {
    let given =
        prop::sample::select(valid).prop_map(move |v| vec![name.to_string(), v.to_string()]);
    if tame {
        return prop_oneof![1 => Just(Vec::new()), 2 => given].boxed();
    }
    prop_oneof![
        3 => Just(Vec::new()),
        6 => given,
        1 => prop::sample::select(hostile).prop_map(move |v| vec![format!("{name}={v}")]),
    ]
    .boxed()
}

const MAX_ACCELERATORS: &[&str] = &[
    "1",
    "8",
    "0",
    "-1",
    "abc",
    "18446744073709551615",
    "4294967296",
];
const MEMORY: &[&str] = &[
    "1", "64", "0", "-1", "nan", "inf", "1e308", "abc", "0.5", "1e-300",
];
const BAD_COUNTS: &[&str] = &[
    "0",
    "-1",
    "abc",
    "",
    "18446744073709551616",
    "1.5",
    "1048577",
];

fn options(parts: Vec<Vec<String>>) -> Vec<String> {
    parts.into_iter().flatten().collect()
}

/// A subcommand and its options; `tame`: valid options only.
fn sub(tame: bool) -> impl Strategy<Value = Sub> {
    let n = || option(tame, "-n", &["1", "2", "3"], BAD_COUNTS);
    let plan = (
        n(),
        option(
            tame,
            "--epoch",
            &["1", "2", "3"],
            &["0", "-1", "18446744073709551615", "abc"],
        ),
        option(
            tame,
            "--rank",
            &["0", "1", "2"],
            &["5", "18446744073709551615", "-1"],
        ),
        option(
            tame,
            "--head",
            &["0", "1", "4", "8"],
            &["-1", "abc", "18446744073709551616"],
        ),
        any::<bool>(),
    )
        .prop_map(|(n, epoch, rank, head, eval)| {
            let mut o = options(vec![n, epoch, rank, head]);
            if eval {
                o.push("--eval".into());
            }
            Sub::Plan { options: o }
        });
    let (max, memory) = match tame {
        true => (&MAX_ACCELERATORS[..2], &MEMORY[..2]),
        false => (MAX_ACCELERATORS, MEMORY),
    };
    let model = match tame {
        true => Just(Vec::new()).boxed(),
        false => prop_oneof![
            3 => Just(Vec::new()),
            1 => Just(strings(&["--model", "unet3d", "--accelerator-type", "h100"])),
            1 => (text(), text()).prop_map(|(m, a)| vec![format!("--model={m}"), format!("--accelerator-type={a}")]),
        ]
        .boxed(),
    };
    let datasize = (
        prop::sample::select(max),
        prop::sample::select(memory),
        option(
            tame,
            "--num-client-hosts",
            &["1", "2"],
            &["0", "18446744073709551615", "-2"],
        ),
        model,
        any::<bool>(),
    )
        .prop_map(|(max, memory, hosts, model, json)| {
            let mut o = vec![
                format!("--max-accelerators={max}"),
                format!("--client-host-memory-in-gb={memory}"),
            ];
            o.extend(hosts);
            o.extend(model);
            if json {
                o.push("--json".into());
            }
            Sub::Datasize { options: o }
        });
    let run =
        (n(), any::<bool>(), any::<bool>(), any::<bool>()).prop_map(|(n, trace, verify, check)| {
            let mut o = vec!["-q".to_string()];
            o.extend(n);
            for (on, flag) in [(trace, "--trace"), (verify, "--verify"), (check, "--check")] {
                if on {
                    o.push(flag.into());
                }
            }
            Sub::Run { options: o }
        });
    prop_oneof![
        2 => any::<bool>().prop_map(|strict| Sub::Config { strict }),
        2 => plan,
        1 => datasize,
        5 => run,
    ]
}

/// A case; half of them tame (valid words and options only: the runs run, and what they write
/// is checked), the others hostile.
fn config_case() -> impl Strategy<Value = ConfigCase> {
    let mut formats: Vec<&'static str> = FORMATS.to_vec();
    formats.push("synthetic");
    any::<bool>()
        .prop_flat_map(move |tame| {
            (
                Just(tame),
                sub(tame),
                prop_oneof![2 => Just("synthetic"), 3 => prop::sample::select(formats.clone())],
            )
        })
        .prop_flat_map(|(tame, sub, format)| {
            let runs = matches!(sub, Sub::Run { .. });
            (
                Just(sub),
                Just(format),
                prop::collection::vec(word(runs, tame), 0..8),
                prop::collection::vec((any::<Index>(), plant()), 0..3),
            )
        })
        .prop_map(|(sub, format, words, plant)| ConfigCase {
            sub,
            format,
            words,
            plant,
        })
}

/// Words that keep a run quick; the case's words come after them (the last word of a key wins).
const QUICK: &[&str] = &[
    "workload=default",
    "++workload.train.epochs=1",
    "++workload.train.computation_time=0",
    "++workload.evaluation.eval_time=0",
    "++workload.dataset.num_files_train=4",
    "++workload.dataset.num_files_eval=2",
    "++workload.dataset.num_samples_per_file=2",
    "++workload.dataset.record_length_bytes=4096",
    "++workload.reader.batch_size=1",
    "++workload.reader.batch_size_eval=1",
    "++workload.checkpoint.time_between_checkpoints=0",
];

/// Names a run writes, where things are planted: in its output folder, and (`data/`) the data
/// files of the case's format `{f}` as generation names them; `/` ends a folder's. (Not in the
/// checkpoint folder: see [`a_link_in_place_of_a_checkpoint_folder_is_not_written_through`].)
const PLANTED: &[&str] = &[
    "data/train/0/img_0_of_4.{f}",
    "data/train/1/img_1_of_4.{f}",
    "data/train/0/img_2_of_4.{f}.off.idx",
    "data/valid/1/img_1_of_2.{f}",
    "data/index/train/img_0_of_4.tfrecord.idx",
    ".dlio-rs.lock",
    "report.json",
    "summary.json",
    "dlio.log",
    "0_output.json",
    "1_output.json",
    "0_per_epoch_stats.json",
    "report.html",
    "trace/",
    "trace/0.csv",
    ".hydra/",
    ".hydra/config.yaml",
    ".hydra/overrides.yaml",
    "sample.log",
    "cfg/",
    "charts/",
];

impl ConfigCase {
    fn args(&self, site: &Site) -> Vec<String> {
        let mut args: Vec<String> = match &self.sub {
            Sub::Config { strict } => {
                let mut a = vec!["config".to_string()];
                if *strict {
                    a.push("--strict".into());
                }
                a
            }
            Sub::Plan { options } => [vec!["plan".to_string()], options.clone()].concat(),
            Sub::Datasize { options } => [vec!["datasize".to_string()], options.clone()].concat(),
            Sub::Run { options } => [vec!["run".to_string()], options.clone()].concat(),
        };
        args.extend(QUICK.iter().map(|w| w.to_string()));
        args.push(format!("++workload.dataset.format={}", self.format));
        if self.format != "synthetic" {
            args.push("++workload.workflow.generate_data=True".into());
            args.push("++workload.workflow.train=True".into());
        }
        let bystander = site.tmp.s("bystander");
        let scratch = site.tmp.path.display().to_string();
        args.extend(
            self.words
                .iter()
                .map(|w| w.replace("{B}", &bystander).replace("{S}", &scratch)),
        );
        // The case's own folders, last: no word moves them.
        args.push(format!(
            "++workload.dataset.data_folder={}",
            site.tmp.s("data")
        ));
        args.push(format!(
            "++workload.checkpoint.checkpoint_folder={}",
            site.tmp.s("ckpt")
        ));
        args.push(format!("++hydra.run.dir={}", site.tmp.s("out")));
        args
    }

    /// Plants each thing, its folders made (never through a link or a file planted before).
    fn plant(&self, site: &Site) {
        for (name, plant) in &self.plant {
            let name = PLANTED[name.index(PLANTED.len())].replace("{f}", self.format);
            let folder = name.ends_with('/');
            let name = name.trim_end_matches('/');
            let path = match name.strip_prefix("data/") {
                Some(data) => site.tmp.join("data").join(data),
                None => site.out().join(name),
            };
            let parent = path.parent().unwrap();
            if path.symlink_metadata().is_ok()
                || std::fs::create_dir_all(parent).is_err()
                || parent.symlink_metadata().unwrap().file_type().is_symlink()
            {
                continue;
            }
            match plant {
                Plant::Link(which) => {
                    std::os::unix::fs::symlink(site.bystander(usize::from(*which), folder), &path)
                        .unwrap()
                }
                Plant::Fifo => {
                    Damage::Fifo.apply(parent, Path::new(path.file_name().unwrap()), site)
                }
                Plant::DevZero => std::os::unix::fs::symlink("/dev/zero", &path).unwrap(),
                Plant::Junk(bytes) => std::fs::write(&path, bytes).unwrap(),
                Plant::Folder => std::fs::create_dir(&path).unwrap(),
                Plant::Loop => {
                    std::os::unix::fs::symlink(path.file_name().unwrap(), &path).unwrap()
                }
            }
        }
    }
}

/// How the cases of a property ended, (subcommand, exit code or signal) → cases, and the
/// slowest processes: printed at the end of the property.
#[derive(Default)]
struct Tally {
    ends: RefCell<BTreeMap<(String, String), u32>>,
    slowest: RefCell<Vec<(Duration, String)>>,
}

impl Tally {
    fn add(&self, args: &[String], ended: &Ended) {
        let how = match (ended.code, ended.signal) {
            (Some(code), _) => format!("exit {code}"),
            (None, Some(signal)) => format!("signal {signal}"),
            _ => "?".into(),
        };
        let sub = args.first().cloned().unwrap_or_default();
        *self.ends.borrow_mut().entry((sub, how)).or_default() += 1;
        let mut slowest = self.slowest.borrow_mut();
        slowest.push((ended.took, ended.what.chars().take(300).collect()));
        slowest.sort_by_key(|s| std::cmp::Reverse(s.0));
        slowest.truncate(3);
    }

    fn print(self, property: &str, started: Instant) {
        let ends = self.ends.into_inner();
        let lines: Vec<String> = ends
            .iter()
            .map(|((sub, how), n)| format!("{sub} {how}: {n}"))
            .collect();
        eprintln!(
            "{property}: {} processes in {:.1} s ({})",
            ends.values().sum::<u32>(),
            started.elapsed().as_secs_f64(),
            lines.join(", ")
        );
        for (took, what) in self.slowest.into_inner() {
            eprintln!("  slowest: {:.2} s: {what}", took.as_secs_f64());
        }
    }
}

#[test]
fn random_configurations_keep_the_promise() {
    let ends = Tally::default();
    let started = Instant::now();
    run_property(
        settings(
            cases(CONFIG_CASES),
            "random_configurations_keep_the_promise",
        ),
        config_case(),
        |case| {
            let site = Site::new("hostile-config");
            case.plant(&site);
            let args = case.args(&site);
            let skip = ["out", "data", "ckpt"].map(|f| site.tmp.join(f));
            let before = snapshot(&site.tmp.path, &skip);
            let ended = dlio_rs(&site.tmp.path, &args);
            ends.add(&args, &ended);
            check(site, &args, &ended, &before, &skip)?;
            Ok(())
        },
    );
    ends.print("random configurations", started);
}

// ---------------------------------------------------------------------------------------------
// Property 2: damaged output folders
// ---------------------------------------------------------------------------------------------

/// Output folders of real runs, made once per test: the files each reader expects.
struct Baseline {
    tmp: Scratch,
    /// Output folders: a traced synthetic run of 2 ranks, the same run again (to compare with),
    /// a traced npz run (files listed from data/), a sweep.
    folders: Vec<PathBuf>,
    /// The sweep's words (`sweep` run again continues it from sweep.json).
    sweep: Vec<String>,
}

/// Index of the sweep in [`Baseline::folders`].
const SWEEP: usize = 3;

impl Baseline {
    fn make() -> Baseline {
        let tmp = Scratch::new("hostile-baseline");
        let synthetic = |out: &str, compute: &str| {
            let mut words = strings(&[
                "run",
                "-q",
                "-n",
                "2",
                "--trace",
                "workload=default",
                "++workload.dataset.format=synthetic",
                "++workload.dataset.num_files_train=8",
                "++workload.dataset.num_files_eval=2",
                "++workload.dataset.num_samples_per_file=2",
                "++workload.reader.batch_size=2",
                "++workload.reader.batch_size_eval=1",
                "++workload.reader.read_threads=2",
                "++workload.train.epochs=2",
                "++workload.evaluation.eval_time=0",
                "++workload.workflow.checkpoint=True",
                "++workload.checkpoint.time_between_checkpoints=0",
            ]);
            words.push(format!("++workload.train.computation_time={compute}"));
            words.push(format!(
                "++workload.checkpoint.checkpoint_folder={}",
                tmp.s("ckpt")
            ));
            words.push(format!("++hydra.run.dir={}", tmp.s(out)));
            words
        };
        let mut npz = strings(&[
            "run",
            "-q",
            "--trace",
            "workload=default",
            "++workload.dataset.format=npz",
            "++workload.workflow.generate_data=True",
            "++workload.dataset.num_files_train=4",
            "++workload.dataset.num_files_eval=0",
            "++workload.workflow.evaluation=False",
            "++workload.dataset.num_samples_per_file=2",
            "++workload.dataset.record_length_bytes=4096",
            "++workload.dataset.num_subfolders_train=0",
            "++workload.reader.batch_size=1",
            "++workload.reader.sample_shuffle=seed",
            "++workload.reader.file_shuffle=seed",
            "++workload.train.epochs=2",
            "++workload.train.computation_time=0",
        ]);
        npz.push(format!("++workload.dataset.data_folder={}", tmp.s("data")));
        npz.push(format!("++hydra.run.dir={}", tmp.s("npz")));
        let sweep = strings(&[
            "workload=default",
            "++workload.dataset.format=synthetic",
            "++workload.dataset.num_files_train=8",
            "++workload.workflow.evaluation=False",
            "++workload.train.epochs=1",
            "++workload.train.computation_time=0.0005",
        ]);
        let mut sweep_args = strings(&["sweep", "--max-accelerators=2", "-o"]);
        sweep_args.push(tmp.s("sweep"));
        sweep_args.extend(sweep.iter().cloned());
        for args in [
            synthetic("a", "0.001"),
            synthetic("b", "0.002"),
            npz,
            sweep_args,
        ] {
            let ended = dlio_rs(&tmp.path, &args);
            assert!(
                ended.code == Some(0) && !ended.timed_out,
                "a baseline failed\n{}",
                ended.context()
            );
        }
        let folders = ["a", "b", "npz", "sweep"].map(|f| tmp.join(f)).to_vec();
        Baseline {
            tmp,
            folders,
            sweep,
        }
    }
}

/// Copies a folder (files, folders, links as links).
fn copy_folder(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        let kind = entry.file_type().unwrap();
        if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(entry.path()).unwrap(), target).unwrap();
        } else if kind.is_dir() {
            copy_folder(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The paths below `root` (files and folders, sorted), relative.
fn entries(root: &Path) -> Vec<PathBuf> {
    let mut all = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(folder) = stack.pop() {
        let Ok(list) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in list.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push(path.clone());
            }
            all.push(path.strip_prefix(root).unwrap().to_path_buf());
        }
    }
    all.sort();
    all
}

/// Raw JSON text put in place of a value.
const JSON_VALUES: &[&str] = &[
    "1e300",
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "1e12",
    "1000000000000",
    "-1e300",
    "1e400",
    "-0",
    "0",
    "0.5",
    "NaN",
    "\"\"",
    "\"x\"",
    "\"1e12\"",
    "\"é\\u0000\"",
    "[]",
    "{}",
    "null",
    "true",
    "4294967297",
    "1048577",
    "9223372036854775807",
    "-9223372036854775808",
    "1.7976931348623157e308",
    "[1e300, -1]",
    "{\"a\": {\"b\": [1, {\"c\": null}]}}",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    "DEEP",
];

/// Raw CSV fields put in place of a trace's field.
const CSV_VALUES: &[&str] = &[
    "-1",
    "18446744073709551615",
    "18446744073709551616",
    "1e300",
    "1e12",
    "1000000000000",
    "",
    "abc",
    "train",
    "eval",
    "x,y",
    "\"quoted\"",
    "99999999999999999999999",
    "1048576",
    "4294967296",
    "NaN",
    "é",
    "0",
];

/// Raw YAML put in place of a value of .hydra's files.
const YAML_VALUES: &[&str] = &[
    "*alias",
    "!!python/object:os.system x",
    "&a [*a]",
    "{",
    "'",
    "\tx",
    "1e400",
    "18446744073709551616",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]",
    "~",
    "",
];

/// One damage done to one of the folder's paths (picked by `Index`).
#[derive(Debug, Clone)]
enum Damage {
    /// Cut to this share of its length.
    Truncate(f64),
    /// XOR bytes at these shares of its length.
    Flip(Vec<(f64, u8)>),
    /// Random bytes in its place.
    Junk(Vec<u8>),
    Empty,
    Remove,
    Fifo,
    DevZero,
    /// A folder in place of a file; a file in place of a folder.
    Swap,
    /// A link to a bystander's file.
    LinkOut(u8),
    /// A link to itself.
    Loop,
    /// A sparse file of this many GiB.
    Huge(u8),
    /// A JSON file: the value at one of its nodes (in document order) replaced.
    JsonValue(Index, &'static str),
    /// A JSON file: one of its nodes removed.
    JsonRemove(Index),
    /// A JSON file: every number replaced.
    JsonNumbers(&'static str),
    /// A CSV file: one field of one line replaced.
    CsvField(Index, Index, &'static str),
    /// A CSV file: one line repeated, or removed.
    CsvLine(Index, bool),
    /// A YAML file: what follows the `:` of one line replaced.
    YamlValue(Index, &'static str),
    /// The configuration a report.json saved (the one beside the path, else the folder's): one
    /// key of [`KEYS`] set to a JSON value (valid ones too: the audit then checks the traces
    /// against another plan).
    Config(Index, &'static str),
}

/// Values put in the saved configuration: plausible ones, and [`JSON_VALUES`].
const CONFIG_VALUES: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "4",
    "8",
    "16",
    "0.5",
    "true",
    "false",
    "\"seed\"",
    "\"random\"",
    "\"off\"",
    "\"npz\"",
    "\"synthetic\"",
    "\"pytorch\"",
    "\"tensorflow\"",
    "[16]",
    "{\"mean\": 0.001}",
];

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => (0.0..1.0f64).prop_map(Damage::Truncate),
        2 => prop::collection::vec((0.0..1.0f64, 1u8..=255), 1..6).prop_map(Damage::Flip),
        1 => prop::collection::vec(any::<u8>(), 0..300).prop_map(Damage::Junk),
        1 => Just(Damage::Empty),
        1 => Just(Damage::Remove),
        1 => Just(Damage::Fifo),
        1 => Just(Damage::DevZero),
        1 => Just(Damage::Swap),
        1 => any::<u8>().prop_map(Damage::LinkOut),
        1 => Just(Damage::Loop),
        1 => (2u8..4).prop_map(Damage::Huge),
        8 => (any::<Index>(), prop::sample::select(JSON_VALUES)).prop_map(|(i, v)| Damage::JsonValue(i, v)),
        2 => any::<Index>().prop_map(Damage::JsonRemove),
        1 => prop::sample::select(JSON_VALUES).prop_map(Damage::JsonNumbers),
        4 => (any::<Index>(), any::<Index>(), prop::sample::select(CSV_VALUES)).prop_map(|(l, f, v)| Damage::CsvField(l, f, v)),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(l, repeat)| Damage::CsvLine(l, repeat)),
        2 => (any::<Index>(), prop::sample::select(YAML_VALUES)).prop_map(|(l, v)| Damage::YamlValue(l, v)),
        6 => (
            any::<Index>(),
            prop_oneof![
                prop::sample::select(CONFIG_VALUES),
                prop::sample::select(JSON_VALUES),
            ],
        )
            .prop_map(|(k, v)| Damage::Config(k, v)),
    ]
}

/// Every node of a JSON document, as pointers, in document order.
fn pointers(value: &Json, at: String, all: &mut Vec<String>) {
    all.push(at.clone());
    match value {
        Json::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                pointers(item, format!("{at}/{i}"), all);
            }
        }
        Json::Object(map) => {
            for (k, v) in map {
                let k = k.replace('~', "~0").replace('/', "~1");
                pointers(v, format!("{at}/{k}"), all);
            }
        }
        _ => {}
    }
}

const MARK: &str = "@@HOSTILE@@";

/// `raw` as JSON text in place of a value; `DEEP` is 100,000 nested lists.
fn raw_json(raw: &str) -> String {
    if raw == "DEEP" {
        format!("{}{}", "[".repeat(100_000), "]".repeat(100_000))
    } else {
        raw.to_string()
    }
}

impl Damage {
    /// Does this damage to `path` (relative to `root`); `site` gives the bystander. Damages that
    /// do not apply (JSON damage to a file that is not JSON) fall back to flipping a byte.
    fn apply(&self, root: &Path, rel: &Path, site: &Site) {
        let path = root.join(rel);
        let meta = path.symlink_metadata().ok();
        let is_file = meta.as_ref().is_some_and(|m| m.is_file());
        let is_dir = meta.as_ref().is_some_and(|m| m.is_dir());
        let clear = |path: &Path| {
            if path.symlink_metadata().is_ok_and(|m| m.is_dir()) {
                std::fs::remove_dir_all(path).unwrap();
            } else {
                let _ = std::fs::remove_file(path);
            }
        };
        // A huge file an earlier damage made is not text to damage.
        let text = match &meta {
            Some(m) if m.is_file() && m.len() <= 1 << 24 => std::fs::read_to_string(&path).ok(),
            _ => None,
        };
        let write = |text: &str| std::fs::write(&path, text).unwrap();
        match self {
            Damage::Truncate(share) if is_file => {
                let len = std::fs::metadata(&path).unwrap().len();
                let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
                file.set_len((len as f64 * share) as u64).unwrap();
            }
            Damage::Flip(flips) if is_file => {
                // Byte by byte in place: a huge file is not read whole.
                use std::os::unix::fs::FileExt;
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .unwrap();
                let len = file.metadata().unwrap().len();
                for (share, xor) in flips.iter().filter(|_| len > 0) {
                    let at = ((len as f64 * share) as u64).min(len - 1);
                    let mut byte = [0u8];
                    file.read_exact_at(&mut byte, at).unwrap();
                    byte[0] ^= xor;
                    file.write_all_at(&byte, at).unwrap();
                }
            }
            Damage::Junk(bytes) => {
                clear(&path);
                std::fs::write(&path, bytes).unwrap();
            }
            Damage::Empty => {
                clear(&path);
                std::fs::write(&path, "").unwrap();
            }
            Damage::Remove => clear(&path),
            Damage::Fifo => {
                clear(&path);
                let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
                // SAFETY: a plain system call with a valid C string.
                assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
            }
            Damage::DevZero => {
                clear(&path);
                std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
            }
            Damage::Swap => {
                clear(&path);
                if is_dir {
                    std::fs::write(&path, "a file where a folder was\n").unwrap();
                } else {
                    std::fs::create_dir(&path).unwrap();
                }
            }
            Damage::LinkOut(which) => {
                clear(&path);
                let target = site.bystander(usize::from(*which), is_dir);
                std::os::unix::fs::symlink(target, &path).unwrap();
            }
            Damage::Loop => {
                clear(&path);
                std::os::unix::fs::symlink(path.file_name().unwrap(), &path).unwrap();
            }
            Damage::Huge(gib) => {
                clear(&path);
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o644)
                    .open(&path)
                    .unwrap();
                file.set_len(u64::from(*gib) << 30).unwrap();
            }
            Damage::JsonValue(which, raw) => {
                match text.as_deref().map(serde_json::from_str::<Json>) {
                    Some(Ok(mut doc)) => {
                        let mut all = Vec::new();
                        pointers(&doc, String::new(), &mut all);
                        let at = &all[which.index(all.len())];
                        if at.is_empty() {
                            write(&raw_json(raw));
                        } else {
                            *doc.pointer_mut(at).unwrap() = Json::String(MARK.into());
                            let text = serde_json::to_string_pretty(&doc).unwrap();
                            write(&text.replace(&format!("\"{MARK}\""), &raw_json(raw)));
                        }
                    }
                    _ => Damage::Flip(vec![(0.5, 0x20)]).apply(root, rel, site),
                }
            }
            Damage::JsonRemove(which) => match text.as_deref().map(serde_json::from_str::<Json>) {
                Some(Ok(mut doc)) => {
                    let mut all = Vec::new();
                    pointers(&doc, String::new(), &mut all);
                    let at = all[which.index(all.len())].clone();
                    if let Some((parent, last)) = at.rsplit_once('/') {
                        match doc.pointer_mut(parent).unwrap() {
                            Json::Object(map) => {
                                map.shift_remove(&last.replace("~1", "/").replace("~0", "~"));
                            }
                            Json::Array(items) => {
                                items.remove(last.parse::<usize>().unwrap());
                            }
                            _ => {}
                        }
                        write(&serde_json::to_string_pretty(&doc).unwrap());
                    } else {
                        write("");
                    }
                }
                _ => Damage::Truncate(0.5).apply(root, rel, site),
            },
            Damage::JsonNumbers(raw) => match text.as_deref().map(serde_json::from_str::<Json>) {
                Some(Ok(mut doc)) => {
                    fn mark(v: &mut Json) {
                        match v {
                            Json::Number(_) => *v = Json::String(MARK.into()),
                            Json::Array(items) => items.iter_mut().for_each(mark),
                            Json::Object(map) => map.values_mut().for_each(mark),
                            _ => {}
                        }
                    }
                    mark(&mut doc);
                    let text = serde_json::to_string_pretty(&doc).unwrap();
                    write(&text.replace(&format!("\"{MARK}\""), &raw_json(raw)));
                }
                _ => Damage::Flip(vec![(0.25, 0x01)]).apply(root, rel, site),
            },
            Damage::CsvField(line, field, raw) if text.is_some() => {
                let text = text.unwrap();
                let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
                if !lines.is_empty() {
                    let l = line.index(lines.len());
                    let mut fields: Vec<&str> = lines[l].split(',').collect();
                    let f = field.index(fields.len());
                    fields[f] = raw;
                    lines[l] = fields.join(",");
                    write(&(lines.join("\n") + "\n"));
                }
            }
            Damage::CsvLine(line, repeat) if text.is_some() => {
                let text = text.unwrap();
                let mut lines: Vec<&str> = text.lines().collect();
                if !lines.is_empty() {
                    let l = line.index(lines.len());
                    if *repeat {
                        lines.insert(l, lines[l]);
                    } else {
                        lines.remove(l);
                    }
                    write(&(lines.join("\n") + "\n"));
                }
            }
            Damage::YamlValue(line, raw) if text.is_some() => {
                let text = text.unwrap();
                let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
                if !lines.is_empty() {
                    let l = line.index(lines.len());
                    lines[l] = match lines[l].split_once(':') {
                        Some((key, _)) => format!("{key}: {raw}"),
                        None => raw.to_string(),
                    };
                    write(&(lines.join("\n") + "\n"));
                }
            }
            Damage::Config(which, raw) => {
                let beside = path.parent().map(|p| p.join("report.json"));
                let report = beside
                    .filter(|r| r.symlink_metadata().is_ok_and(|m| m.is_file()))
                    .unwrap_or_else(|| root.join("report.json"));
                // Only a report.json that is still a small file (not a link to /dev/zero).
                let small = std::fs::symlink_metadata(&report)
                    .is_ok_and(|m| m.is_file() && m.len() <= 1 << 24);
                let Some(Ok(mut doc)) = small
                    .then(|| std::fs::read_to_string(&report).ok())
                    .flatten()
                    .map(|t| serde_json::from_str::<Json>(&t))
                else {
                    return;
                };
                let Some(Json::Object(config)) = doc.get_mut("configuration") else {
                    return;
                };
                let key = KEYS[which.index(KEYS.len())].name;
                let mut node = config;
                let parts: Vec<&str> = key.split('.').collect();
                for part in &parts[..parts.len() - 1] {
                    let child = node
                        .entry(part.to_string())
                        .or_insert_with(|| Json::Object(Default::default()));
                    if !child.is_object() {
                        *child = Json::Object(Default::default());
                    }
                    node = child.as_object_mut().unwrap();
                }
                node.insert(
                    parts[parts.len() - 1].to_string(),
                    Json::String(MARK.into()),
                );
                let text = serde_json::to_string_pretty(&doc).unwrap();
                std::fs::write(
                    &report,
                    text.replace(&format!("\"{MARK}\""), &raw_json(raw)),
                )
                .unwrap();
            }
            // A folder, or a file that is not text: the damage becomes a swap or a flip.
            _ if is_dir => Damage::Swap.apply(root, rel, site),
            _ if is_file => Damage::Flip(vec![(0.5, 0xff)]).apply(root, rel, site),
            _ => {}
        }
    }
}

/// Which reader a case runs.
#[derive(Debug, Clone)]
enum Reader {
    Report,
    /// `compare` of the damaged folder and another (itself damaged too, or not); `first`: the
    /// damaged folder is `DIR_A`.
    Compare {
        first: bool,
    },
    Audit {
        json: bool,
    },
    /// `sweep` again, into the damaged folder: it continues from its sweep.json.
    Sweep,
}

/// A damaged-folder case: which baseline folder, which reader, the damages (a path picked by
/// `Index` among the folder's, what is done to it), damages to the other folder of a compare,
/// and what is where report.html and compare.html are written: nothing, links to a bystander's
/// file, or FIFOs.
#[derive(Debug, Clone)]
struct FolderCase {
    source: usize,
    other: usize,
    reader: Reader,
    damages: Vec<(Index, Damage)>,
    other_damages: Vec<(Index, Damage)>,
    pages: Pages,
}

#[derive(Debug, Clone, Copy)]
enum Pages {
    Absent,
    Links,
    Fifos,
}

fn folder_case() -> impl Strategy<Value = FolderCase> {
    let reader = prop_oneof![
        3 => Just(Reader::Report),
        3 => any::<bool>().prop_map(|first| Reader::Compare { first }),
        4 => any::<bool>().prop_map(|json| Reader::Audit { json }),
        1 => Just(Reader::Sweep),
    ];
    (
        0usize..4,
        0usize..4,
        reader,
        prop::collection::vec((any::<Index>(), damage()), 1..4),
        prop::collection::vec((any::<Index>(), damage()), 0..2),
        prop_oneof![
            7 => Just(Pages::Absent),
            2 => Just(Pages::Links),
            1 => Just(Pages::Fifos),
        ],
    )
        .prop_map(|(source, other, reader, damages, other_damages, pages)| {
            // A sweep is continued from a sweep's folder.
            let source = if matches!(reader, Reader::Sweep) {
                SWEEP
            } else {
                source
            };
            FolderCase {
                source,
                other,
                reader,
                damages,
                other_damages,
                pages,
            }
        })
}

/// A damage as said in the list of exit-1 cases: the path, and the damage's name.
fn describe(rel: &Path, damage: &Damage) -> String {
    let name = match damage {
        Damage::JsonValue(_, v) => {
            format!("JsonValue({})", if v.len() > 24 { &v[..24] } else { v })
        }
        Damage::CsvField(_, _, v) => format!("CsvField({v})"),
        Damage::YamlValue(_, v) => {
            format!("YamlValue({})", if v.len() > 24 { &v[..24] } else { v })
        }
        Damage::Config(k, v) => format!(
            "Config({} = {})",
            KEYS[k.index(KEYS.len())].name,
            if v.len() > 24 { &v[..24] } else { v }
        ),
        other => format!("{other:?}")
            .split(['(', ' '])
            .next()
            .unwrap_or("")
            .to_string(),
    };
    format!("{} {name}", rel.display())
}

/// A reader that exited 1 where a damaged file of ours asked for 2: (reader and damages, the
/// error line, the command), kept to be printed.
type Mismatch = (String, String, String);

impl FolderCase {
    /// Copies and damages the folders; returns the reader's arguments and what was damaged.
    fn prepare(&self, base: &Baseline, site: &Site) -> (Vec<String>, Vec<String>) {
        let out = site.out();
        std::fs::remove_dir(&out).unwrap();
        copy_folder(&base.folders[self.source], &out);
        let other = site.tmp.join("other");
        copy_folder(&base.folders[self.other], &other);
        let mut damaged = Vec::new();
        for (root, damages) in [(&out, &self.damages), (&other, &self.other_damages)] {
            for (which, damage) in damages {
                let paths = entries(root);
                if paths.is_empty() {
                    continue;
                }
                let rel = &paths[which.index(paths.len())];
                if root == &out {
                    damaged.push(describe(rel, damage));
                } else {
                    damaged.push(format!("other/{}", describe(rel, damage)));
                }
                damage.apply(root, rel, site);
            }
        }
        let plant = match self.pages {
            Pages::Absent => None,
            Pages::Links => Some(Damage::LinkOut(0)),
            Pages::Fifos => Some(Damage::Fifo),
        };
        for page in ["report.html", "compare.html", "trial-1/report.html"] {
            let path = out.join(page);
            if let (Some(plant), true) = (&plant, path.parent().is_some_and(Path::is_dir)) {
                let _ = std::fs::remove_file(&path);
                plant.apply(&out, Path::new(page), site);
            }
        }
        let dir = out.display().to_string();
        let other = other.display().to_string();
        let args = match self.reader {
            Reader::Report => vec!["report".into(), dir],
            Reader::Compare { first } => {
                let html = format!("--html={dir}/compare.html");
                match first {
                    true => vec!["compare".into(), dir, other, html],
                    false => vec!["compare".into(), other, dir, html],
                }
            }
            Reader::Audit { json } => {
                let mut a = vec!["audit".to_string(), dir];
                if json {
                    a.push("--json".into());
                }
                a
            }
            Reader::Sweep => {
                let mut a = vec![
                    "sweep".to_string(),
                    "--max-accelerators=2".into(),
                    "-o".into(),
                    dir,
                ];
                a.extend(base.sweep.iter().cloned());
                a
            }
        };
        (args, damaged)
    }
}

/// An error line without its paths and numbers: what kind of error it is.
fn shape_of(error: &str) -> String {
    let mut shape = String::new();
    for word in error.split(' ') {
        let word = if word.contains('/') {
            let name = word.rsplit('/').next().unwrap_or("");
            format!(".../{name}")
        } else {
            word.to_string()
        };
        let mut last_digit = false;
        for c in word.chars() {
            if c.is_ascii_digit() {
                if !last_digit {
                    shape.push('N');
                }
                last_digit = true;
            } else {
                shape.push(c);
                last_digit = false;
            }
        }
        shape.push(' ');
        if shape.len() > 110 {
            shape.push('…');
            break;
        }
    }
    shape.trim_end().to_string()
}

#[test]
fn damaged_output_folders_keep_the_promise() {
    let base = Baseline::make();
    let ends = Tally::default();
    let mismatches: RefCell<Vec<Mismatch>> = RefCell::new(Vec::new());
    let started = Instant::now();
    run_property(
        settings(
            cases(FOLDER_CASES),
            "damaged_output_folders_keep_the_promise",
        ),
        folder_case(),
        |case| {
            let site = Site::new("hostile-folder");
            let (args, damaged) = case.prepare(&base, &site);
            let skip = [site.out()];
            let before = snapshot(&site.tmp.path, &skip);
            let ended = dlio_rs(&site.tmp.path, &args);
            ends.add(&args, &ended);
            let site = check(site, &args, &ended, &before, &skip).map_err(|e| {
                TestCaseError::fail(format!("{e}\ndamaged: {}", damaged.join(", ")))
            })?;
            if ended.code == Some(1) && !audit_verdict(&args, &ended) {
                mismatches.borrow_mut().push((
                    format!("{}: {}", args[0], damaged.join(", ")),
                    ended.error_line().to_string(),
                    ended.what.clone(),
                ));
            }
            drop(site);
            Ok(())
        },
    );
    ends.print("damaged output folders", started);
    let mismatches = mismatches.into_inner();
    if !mismatches.is_empty() {
        // One example per reader and error, its paths and numbers left out.
        let mut kinds = BTreeMap::new();
        for (what, error, command) in &mismatches {
            let reader = what.split(':').next().unwrap_or("");
            let kind = format!("{reader}: {}", shape_of(error));
            kinds.entry(kind).or_insert((what, error, command, 0)).3 += 1;
        }
        eprintln!(
            "\n{} damaged-folder case(s) exited 1 where bad input asks for 2; {} kind(s) of error:",
            mismatches.len(),
            kinds.len(),
        );
        for (kind, (what, error, command, count)) in kinds {
            eprintln!("- {kind} (×{count})\n    e.g. {error}\n    damaged: {what}\n    {command}");
        }
    }
    drop(base.tmp);
}

// ---------------------------------------------------------------------------------------------
// Known: a link in the checkpoint folder
// ---------------------------------------------------------------------------------------------

/// A link planted in the checkpoint folder where a checkpoint's own folder
/// (`global_epoch{E}_step{S}`) goes: the run must not save into the folder the link leads to.
/// The properties above plant nothing in the checkpoint folder, so that this failure (not fixed
/// yet: the storage layer makes a file's folders as `create_dir_all` does, following links) does
/// not hide the others; this test shows it alone.
#[test]
fn a_link_in_place_of_a_checkpoint_folder_is_not_written_through() {
    let site = Site::new("hostile-checkpoint-link");
    let words = |site: &Site| {
        let mut args = strings(&["run", "-q"]);
        args.extend(QUICK.iter().map(|w| w.to_string()));
        args.extend(strings(&[
            "++workload.dataset.format=synthetic",
            "++workload.workflow.evaluation=False",
            "++workload.workflow.checkpoint=True",
        ]));
        args.push(format!(
            "++workload.checkpoint.checkpoint_folder={}",
            site.tmp.s("ckpt")
        ));
        args.push(format!("++hydra.run.dir={}", site.tmp.s("out")));
        args
    };
    // Where the checkpoint goes: one run to see.
    let first = dlio_rs(&site.tmp.path, &words(&site));
    assert_eq!(first.code, Some(0), "{}", first.context());
    let made: Vec<_> = std::fs::read_dir(site.tmp.join("ckpt"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert_eq!(made.len(), 1, "{made:?}");
    std::fs::remove_dir_all(&made[0]).unwrap();
    std::os::unix::fs::symlink(site.bystander(0, true), &made[0]).unwrap();
    let args = words(&site);
    let skip = ["out", "data", "ckpt"].map(|f| site.tmp.join(f));
    let before = snapshot(&site.tmp.path, &skip);
    let ended = dlio_rs(&site.tmp.path, &args);
    if let Err(e) = check(site, &args, &ended, &before, &skip) {
        panic!("{e}");
    }
}
