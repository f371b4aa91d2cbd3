//! The run's traces: per rank, what each of its threads did and when, written into `trace/` in
//! the output folder as the run goes, in the formats `output.trace_format` names:
//!
//! - [`csv`]: `trace/{rank}.csv`, one row per sample read, which `dlio-rs audit` checks;
//! - [`chrome`]: `trace/{rank}.json`, Chrome trace events that Perfetto opens: spans of the run,
//!   its epochs and phases, each step's data wait, compute and barrier, the checkpoint saves and
//!   loads, and one span per sample read;
//! - [`pfw`]: `trace/trace-{rank}-of-{world}.pfw.gz`, the same spans as the lines DFTracer writes
//!   for Python DLIO, with the names and categories DLIO's events carry, gzip-compressed (DFTracer's
//!   default, and what its tools read).
//!
//! Records are semantic ([`Read`], [`Step`], [`Span`]); each format decides which events a record
//! makes. Each thread (the trainer, each reader) encodes its records into its own buffer per
//! format ([`ThreadTrace`]) and appends it to the rank's file once it holds [`FLUSH_AT`] bytes: a
//! few integer formats per record, one locked write per chunk, and memory bounded by the number of
//! threads, never by the length of the run. Chunks of different threads interleave, so a file is
//! in time order only within a chunk, which each format's readers allow (the audit reads rows by
//! step, Perfetto and DFTracer's tools sort by time). A file is written under a temporary name and
//! renamed when its rank finishes, so a trace that exists is complete.
//!
//! Times are read once, as [`Instant`]s, and converted per format: microseconds since the run's
//! start for the CSV and Chrome (Perfetto shows a trace from its first event anyway), since the
//! Unix epoch for DFTracer (as DLIO's traces have them, so that traces of many hosts line up). A
//! span's duration is the difference of its converted ends, so a span that holds another in time
//! holds it in the file too, to the microsecond.

pub mod chrome;
pub mod csv;
pub mod pfw;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Instant, UNIX_EPOCH};

use crate::config::TraceFormat;
use crate::error::{Error, Result};
use crate::folder::Beneath;
use crate::plan::Phase;
use crate::stats::Clock;

pub use csv::HEADER;

/// The trace's folder, in the output folder.
pub const TRACE_DIR: &str = "trace";

/// A thread's records of one format are appended to the file once they fill this many bytes.
pub const FLUSH_AT: usize = 64 * 1024;

/// One file of a rank's trace, written under a temporary name until [`TraceFile::complete`].
struct TraceFile {
    /// The output folder, below which the trace is written without following links.
    output: Beneath,
    name: PathBuf,
    partial: PathBuf,
    file: Mutex<File>,
}

impl TraceFile {
    /// Creates `trace/{name}` in the output folder `output` (as `trace/.{name}.partial`), never
    /// through a link planted there, and writes `head`.
    fn create(output: &Path, name: &str, head: &[u8]) -> Result<TraceFile> {
        let partial = Path::new(TRACE_DIR).join(format!(".{name}.partial"));
        let name = Path::new(TRACE_DIR).join(name);
        let output = Beneath::open(output).map_err(|e| write_error(output, e))?;
        let mut file = output
            .create_file(&partial)
            .map_err(|e| write_error(&output.path(&partial), e))?;
        file.write_all(head)
            .map_err(|e| write_error(&output.path(&partial), e))?;
        Ok(TraceFile {
            output,
            name,
            partial,
            file: Mutex::new(file),
        })
    }

    fn append(&self, bytes: &[u8]) -> Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(bytes)
            .map_err(|e| write_error(&self.output.path(&self.partial), e))
    }

    /// Writes `tail` and gives the finished file its final name.
    fn complete(self, tail: &[u8]) -> Result<()> {
        let mut file = self.file.into_inner().unwrap_or_else(|p| p.into_inner());
        file.write_all(tail)
            .and_then(|()| file.sync_data())
            .and_then(|()| self.output.rename(&self.partial, &self.name))
            .map_err(|e| write_error(&self.output.path(&self.name), e))
    }
}

/// Whether `name` is a file a trace writes in `trace/`: `{rank}.csv`, `{rank}.json`,
/// `trace-{rank}-of-{world}.pfw.gz`, or one of them still under its temporary name.
fn is_trace_file(name: &str) -> bool {
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let finished = |name: &str| {
        if let Some(stem) = name.strip_suffix(".csv").or(name.strip_suffix(".json")) {
            return number(stem);
        }
        name.strip_prefix("trace-")
            .and_then(|n| n.strip_suffix(".pfw.gz"))
            .and_then(|n| n.split_once("-of-"))
            .is_some_and(|(rank, world)| number(rank) && number(world))
    };
    match name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".partial"))
    {
        Some(partial) => finished(partial),
        None => finished(name),
    }
}

/// Removes the trace files an earlier run left in the output folder `output`, so an audit never
/// reads another run's rows beside this run's report; files that are not traces are left alone.
/// A link where the trace folder goes is removed, not followed (as the output folder's results
/// are, [`crate::folder::OutputFolder::take`]).
pub fn remove_old(output: &Path) -> Result<()> {
    let dir = &output.join(TRACE_DIR);
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return std::fs::remove_file(dir).map_err(|e| write_error(dir, e));
    }
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(write_error(dir, e)),
    };
    for entry in entries.flatten() {
        if is_trace_file(&entry.file_name().to_string_lossy()) {
            std::fs::remove_file(entry.path()).map_err(|e| write_error(&entry.path(), e))?;
        }
    }
    // Gone when it held only traces, so an untraced run leaves no empty trace folder behind.
    let _ = std::fs::remove_dir(dir);
    Ok(())
}

fn write_error(path: &Path, e: std::io::Error) -> Error {
    Error::io("cannot write trace file", path, e)
}

/// A thread of a rank, as the event traces name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceThread {
    /// The training loop: steps, phases, checkpoints, and the reads when it reads itself.
    Trainer,
    /// Reader thread `k` of the loader.
    Reader(usize),
}

impl TraceThread {
    /// The thread's id in the event traces: 1 for the trainer, 2 + k for reader k (Perfetto takes
    /// 0 for the kernel's idle thread).
    pub fn tid(self) -> u64 {
        match self {
            TraceThread::Trainer => 1,
            TraceThread::Reader(k) => 2 + k as u64,
        }
    }

    fn name(self) -> String {
        match self {
            TraceThread::Trainer => "trainer".into(),
            TraceThread::Reader(k) => format!("reader {k}"),
        }
    }
}

/// One sample read.
pub struct Read<'a> {
    pub epoch: u64,
    pub phase: Phase,
    /// 1-based.
    pub step: u64,
    pub rank: u64,
    /// The reader thread's index: the CSV's `thread` column (0 when the trainer reads).
    pub thread: usize,
    pub key: &'a str,
    /// The sample's index in its file.
    pub sample: u64,
    /// The sample's index in its split (file × samples per file + sample): DLIO's `image_idx`.
    pub image_idx: u64,
    pub offset: u64,
    pub length: u64,
    pub started: Instant,
    pub ended: Instant,
}

/// One step of the training loop: the wait for its batch (`started` to `loaded`), the emulated
/// compute (to `computed`), the barrier of a training step (to `met`), and whatever else the step
/// did (a checkpoint save, traced as its own [`Span`]) until `ended`.
pub struct Step {
    pub epoch: u64,
    pub phase: Phase,
    /// 1-based.
    pub step: u64,
    pub started: Instant,
    pub loaded: Instant,
    pub computed: Instant,
    pub met: Option<Instant>,
    pub ended: Instant,
}

/// What a [`Span`] was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanKind {
    /// The rank's whole run.
    Run,
    Epoch,
    Train,
    Eval,
    CheckpointSave,
    CheckpointLoad,
}

/// A span of the trainer: the run, an epoch, a phase, a checkpoint save or load.
pub struct Span {
    pub kind: SpanKind,
    pub epoch: u64,
    /// The step a checkpoint follows (0 for spans of no step).
    pub step: u64,
    pub started: Instant,
    pub ended: Instant,
}

/// The shape of a rank's trace.
pub struct RankShape {
    pub rank: u64,
    pub world: u64,
    /// Reader threads, named in the event traces.
    pub readers: usize,
    /// Whether the rank reads samples (false in a checkpoint-only run, which writes no CSV).
    pub reads: bool,
}

/// One rank's trace files.
pub struct RankTrace {
    clock: Clock,
    /// The clock's start in microseconds since the Unix epoch.
    wall_start_us: u64,
    rank: u64,
    csv: Option<TraceFile>,
    chrome: Option<TraceFile>,
    pfw: Option<pfw::PfwFile>,
}

impl RankTrace {
    /// Creates the rank's trace files (those `format` names) in the output folder `output`.
    pub fn create(
        output: &Path,
        format: TraceFormat,
        shape: &RankShape,
        clock: &Clock,
    ) -> Result<RankTrace> {
        let threads: Vec<TraceThread> = std::iter::once(TraceThread::Trainer)
            .chain((0..shape.readers).map(TraceThread::Reader))
            .collect();
        let wall_start_us = clock
            .start_wall()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let rank = shape.rank;
        let csv = (format.csv() && shape.reads)
            .then(|| {
                let head = format!("{}\n", csv::HEADER);
                TraceFile::create(output, &format!("{rank}.csv"), head.as_bytes())
            })
            .transpose()?;
        let chrome = format
            .chrome()
            .then(|| {
                let head = chrome::head(rank, &threads);
                TraceFile::create(output, &format!("{rank}.json"), &head)
            })
            .transpose()?;
        let pfw = format
            .pfw()
            .then(|| pfw::PfwFile::create(output, shape, &threads, wall_start_us))
            .transpose()?;
        Ok(RankTrace {
            clock: *clock,
            wall_start_us,
            rank,
            csv,
            chrome,
            pfw,
        })
    }

    /// Microseconds from the run's start to `instant`.
    fn micros(&self, instant: Instant) -> u64 {
        self.clock.micros_at(instant)
    }

    /// Start and duration in microseconds of the span from `started` to `ended`.
    fn span_us(&self, started: Instant, ended: Instant) -> (u64, u64) {
        let ts = self.micros(started);
        (ts, self.micros(ended).saturating_sub(ts))
    }

    /// Gives the finished files their final names; every thread has flushed its records.
    pub fn complete(self) -> Result<()> {
        if let Some(file) = self.csv {
            file.complete(b"")?;
        }
        if let Some(file) = self.chrome {
            file.complete(chrome::TAIL)?;
        }
        if let Some(file) = self.pfw {
            let now = self.wall_start_us + self.clock.micros_at(Instant::now());
            file.complete(self.rank, now)?;
        }
        Ok(())
    }
}

/// A thread's records not yet appended to the rank's files: one buffer per format.
pub struct ThreadTrace {
    thread: TraceThread,
    csv: Vec<u8>,
    chrome: Vec<u8>,
    pfw: Vec<u8>,
    /// The DFTracer chunk compressed, before it is appended.
    pfw_compressed: Vec<u8>,
}

impl ThreadTrace {
    pub fn new(thread: TraceThread) -> ThreadTrace {
        ThreadTrace {
            thread,
            csv: Vec::new(),
            chrome: Vec::new(),
            pfw: Vec::new(),
            pfw_compressed: Vec::new(),
        }
    }

    pub fn read(&mut self, trace: &RankTrace, read: &Read) -> Result<()> {
        if trace.csv.is_some() {
            csv::row(&mut self.csv, trace, read);
        }
        if trace.chrome.is_some() {
            chrome::read(&mut self.chrome, trace, self.thread, read);
        }
        if let Some(file) = &trace.pfw {
            pfw::read(&mut self.pfw, trace, file, self.thread, read);
        }
        self.flush_full(trace)
    }

    pub fn step(&mut self, trace: &RankTrace, step: &Step) -> Result<()> {
        if trace.chrome.is_some() {
            chrome::step(&mut self.chrome, trace, self.thread, step);
        }
        if let Some(file) = &trace.pfw {
            pfw::step(&mut self.pfw, trace, file, self.thread, step);
        }
        self.flush_full(trace)
    }

    pub fn span(&mut self, trace: &RankTrace, span: &Span) -> Result<()> {
        if trace.chrome.is_some() {
            chrome::span(&mut self.chrome, trace, self.thread, span);
        }
        if let Some(file) = &trace.pfw {
            pfw::span(&mut self.pfw, trace, file, self.thread, span);
        }
        self.flush_full(trace)
    }

    fn flush_full(&mut self, trace: &RankTrace) -> Result<()> {
        self.flush_over(trace, FLUSH_AT)
    }

    /// Appends every record held to the rank's files.
    pub fn flush(&mut self, trace: &RankTrace) -> Result<()> {
        self.flush_over(trace, 1)
    }

    /// Appends each buffer that holds at least `at` bytes.
    fn flush_over(&mut self, trace: &RankTrace, at: usize) -> Result<()> {
        let files = [
            (&mut self.csv, trace.csv.as_ref()),
            (&mut self.chrome, trace.chrome.as_ref()),
        ];
        for (bytes, file) in files {
            if let Some(file) = file.filter(|_| bytes.len() >= at) {
                file.append(bytes)?;
                bytes.clear();
            }
        }
        if let Some(file) = trace.pfw.as_ref().filter(|_| self.pfw.len() >= at) {
            file.append(&self.pfw, &mut self.pfw_compressed)?;
            self.pfw.clear();
        }
        Ok(())
    }
}

/// The arguments of one event, written as a JSON object's members.
struct Args<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Args<'a> {
    /// Opens the object (`{`); [`Args::end`] closes it.
    fn begin(out: &'a mut Vec<u8>) -> Args<'a> {
        out.push(b'{');
        Args { out, first: true }
    }

    fn key(&mut self, key: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    fn int(&mut self, key: &str, value: u64) -> &mut Self {
        self.key(key);
        self.out
            .extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
        self
    }

    fn str(&mut self, key: &str, value: &str) -> &mut Self {
        self.key(key);
        json_string(self.out, value);
        self
    }

    fn end(self) {
        self.out.push(b'}');
    }
}

/// `text` as a JSON string: quoted, with `"`, `\` and control characters escaped.
fn json_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    let bytes = text.as_bytes();
    if !bytes.iter().any(|&b| b == b'"' || b == b'\\' || b < 0x20) {
        out.extend_from_slice(bytes);
    } else {
        for &b in bytes {
            match b {
                b'"' => out.extend_from_slice(b"\\\""),
                b'\\' => out.extend_from_slice(b"\\\\"),
                b'\n' => out.extend_from_slice(b"\\n"),
                b'\r' => out.extend_from_slice(b"\\r"),
                b'\t' => out.extend_from_slice(b"\\t"),
                0..=0x1f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
                _ => out.push(b),
            }
        }
    }
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read as _;
    use std::time::Duration;

    /// A rank's trace in every format, written by a reader and the trainer, read back.
    #[test]
    fn every_format_reaches_its_file_whole_and_named_only_when_complete() {
        let output =
            std::env::temp_dir().join(format!("dlio-rs-trace-formats-{}", std::process::id()));
        std::fs::create_dir_all(&output).unwrap();
        let dir = output.join(TRACE_DIR);
        let clock = Clock::start();
        let shape = RankShape {
            rank: 3,
            world: 4,
            readers: 1,
            reads: true,
        };
        let trace = RankTrace::create(&output, TraceFormat::All, &shape, &clock).unwrap();
        let mut reader = ThreadTrace::new(TraceThread::Reader(0));
        let mut trainer = ThreadTrace::new(TraceThread::Trainer);
        let base = Instant::now();
        let at = |us: u64| base + Duration::from_micros(us);
        // Enough reads for several chunks of every format.
        let count = 3000u64;
        for i in 0..count {
            let read = Read {
                epoch: 2,
                phase: Phase::Eval,
                step: i / 4 + 1,
                rank: 3,
                thread: 1,
                key: if i == 5 {
                    "train/a,\"b\"/x.npz"
                } else {
                    "train/img_1_of_8.npz"
                },
                sample: i % 4,
                image_idx: i,
                offset: i,
                length: 1 << 40,
                started: at(i * 10),
                ended: at(i * 10 + 7),
            };
            reader.read(&trace, &read).unwrap();
        }
        let step = Step {
            epoch: 2,
            phase: Phase::Train,
            step: 1,
            started: at(0),
            loaded: at(5),
            computed: at(9),
            met: Some(at(12)),
            ended: at(20),
        };
        trainer.step(&trace, &step).unwrap();
        let save = Span {
            kind: SpanKind::CheckpointSave,
            epoch: 2,
            step: 1,
            started: at(12),
            ended: at(19),
        };
        trainer.span(&trace, &save).unwrap();
        reader.flush(&trace).unwrap();
        trainer.flush(&trace).unwrap();
        for name in ["3.csv", "3.json", "trace-3-of-4.pfw.gz"] {
            assert!(!dir.join(name).exists(), "{name} named before completion");
        }
        trace.complete().unwrap();
        for name in ["3.csv", "3.json", "trace-3-of-4.pfw.gz"] {
            assert!(dir.join(name).exists(), "{name} not written");
            assert!(!dir.join(format!(".{name}.partial")).exists());
        }

        let text = std::fs::read_to_string(dir.join("3.csv")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(lines.len() as u64, count + 1);
        let start = |i: u64| clock.micros_at(at(i * 10));
        assert_eq!(
            lines[6],
            format!(
                "2,eval,2,3,1,\"train/a,\"\"b\"\"/x.npz\",1,5,1099511627776,{},7",
                start(5)
            )
        );
        assert_eq!(
            lines[7],
            format!(
                "2,eval,2,3,1,train/img_1_of_8.npz,2,6,1099511627776,{},7",
                start(6)
            )
        );

        let chrome: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("3.json")).unwrap()).unwrap();
        let events = chrome["traceEvents"].as_array().unwrap();
        let named = |name: &str| events.iter().filter(|e| e["name"] == name).count();
        assert_eq!(named("read") as u64, count);
        assert_eq!(
            (
                named("step"),
                named("data wait"),
                named("compute"),
                named("barrier")
            ),
            (1, 1, 1, 1)
        );
        assert_eq!(named("checkpoint save"), 1);
        assert_eq!(named("thread_name"), 2);
        let quoted = events
            .iter()
            .find(|e| e["name"] == "read" && e["args"]["offset"] == 5)
            .unwrap();
        assert_eq!(quoted["args"]["file"], "train/a,\"b\"/x.npz");
        assert_eq!((&quoted["pid"], &quoted["tid"]), (&4.into(), &2.into()));
        assert_eq!(quoted["ts"], start(5));
        assert_eq!(quoted["dur"], 7);
        let barrier = events.iter().find(|e| e["name"] == "barrier").unwrap();
        assert_eq!((&barrier["tid"], &barrier["dur"]), (&1.into(), &3.into()));

        let mut lines = String::new();
        let compressed = std::fs::read(dir.join("trace-3-of-4.pfw.gz")).unwrap();
        flate2::read::MultiGzDecoder::new(compressed.as_slice())
            .read_to_string(&mut lines)
            .unwrap();
        let events: Vec<serde_json::Value> = lines
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let complete: Vec<&serde_json::Value> = events.iter().filter(|e| e["ph"] == 1).collect();
        // start, the reads, fetch.iter, compute, barrier, fetch.block, capture, end.
        assert_eq!(complete.len() as u64, count + 7);
        let mut ids: Vec<u64> = complete.iter().map(|e| e["id"].as_u64().unwrap()).collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=count + 7).collect::<Vec<u64>>());
        let end = complete.iter().find(|e| e["name"] == "end").unwrap();
        assert_eq!(end["args"]["num_events"], count + 6);
        let item = complete
            .iter()
            .find(|e| e["name"] == "item" && e["args"]["offset"] == 5)
            .unwrap();
        assert_eq!((&item["cat"], &item["pid"]), (&"data".into(), &3.into()));
        assert_eq!(item["args"]["fname"], "train/a,\"b\"/x.npz");
        let wall_start = clock.start_wall().duration_since(UNIX_EPOCH).unwrap();
        assert_eq!(item["ts"], wall_start.as_micros() as u64 + start(5));
        let capture = complete.iter().find(|e| e["name"] == "capture").unwrap();
        assert_eq!(capture["cat"], "checkpoint");
        assert_eq!(capture["dur"], 7);
        std::fs::remove_dir_all(output).unwrap();
    }

    #[test]
    fn json_strings_escape_what_json_forbids() {
        let mut out = Vec::new();
        json_string(&mut out, "a\"b\\c\nd\u{1}é");
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text, "\"a\\\"b\\\\c\\nd\\u0001é\"");
        let parsed: String = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed, "a\"b\\c\nd\u{1}é");
    }

    #[test]
    fn only_trace_files_are_trace_files() {
        for name in [
            "0.csv",
            "12.json",
            "trace-3-of-4.pfw.gz",
            ".0.csv.partial",
            ".7.json.partial",
            ".trace-0-of-1.pfw.gz.partial",
        ] {
            assert!(is_trace_file(name), "{name}");
        }
        for name in [
            "notes.csv",
            ".csv",
            "a.json",
            "trace-a-of-4.pfw.gz",
            "trace-1-of-.pfw.gz",
            "trace-1-of-2.pfw",
            "0.csv.partial",
            ".0.csv",
            "keep.txt",
        ] {
            assert!(!is_trace_file(name), "{name}");
        }
    }
}
