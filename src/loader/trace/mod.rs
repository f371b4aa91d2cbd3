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
//! makes. While the run is measured a thread only keeps its records ([`ThreadTrace`]), in a
//! compact fixed-size binary form (`record`): a time is kept as nanoseconds since the run's
//! start, a file as its index, and nothing is formatted, so a traced read costs the reader a few
//! stores. A thread holds at most `record::HELD` bytes of them in memory and spills the rest to
//! an unlinked file, so memory is bounded by the number of threads, never by the length of the
//! run. The records are formatted into the files only where no time is measured
//! ([`RankTrace::write_out`]): after each phase's timings are taken (whether it ended, failed or
//! was interrupted), the records of its reader threads, thread by thread, then the trainer's; and
//! the trainer's last ones when the run ends. So each phase's rows and events follow those of the
//! phase before, each thread's together and in the order it made them, which each format's
//! readers allow (the audit reads rows by step, Perfetto and DFTracer's tools sort by time). A
//! file is written under a temporary name and renamed when its rank finishes, so a trace that
//! exists is complete.
//!
//! Times are converted per format when formatted: microseconds since the run's start for the CSV
//! and Chrome (Perfetto shows a trace from its first event anyway), since the Unix epoch for
//! DFTracer (as DLIO's traces have them, so that traces of many hosts line up). A span's duration
//! is the difference of its converted ends, so a span that holds another in time holds it in the
//! file too, to the microsecond.

pub mod chrome;
pub mod csv;
pub mod pfw;
mod record;

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
use record::Record;

pub use csv::HEADER;

/// The trace's folder, in the output folder.
pub const TRACE_DIR: &str = "trace";

/// The text of one format is appended to its file, as records are written out, in chunks of this
/// many bytes (a DFTracer chunk is one gzip member).
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
/// `trace-{rank}-of-{world}.pfw.gz`, or one of them still under its temporary name; or a spill
/// file, `.{rank}-{tid}.spill`, left by a run killed in the instant between its making and its
/// unlinking.
fn is_trace_file(name: &str) -> bool {
    let number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let spill = name
        .strip_prefix('.')
        .and_then(|n| n.strip_suffix(".spill"))
        .and_then(|n| n.split_once('-'));
    if spill.is_some_and(|(rank, tid)| number(rank) && number(tid)) {
        return true;
    }
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

    /// The CSV's `thread` column: the reader thread's index, 0 when the trainer reads.
    fn index(self) -> usize {
        match self {
            TraceThread::Trainer => 0,
            TraceThread::Reader(k) => k,
        }
    }

    fn name(self) -> String {
        match self {
            TraceThread::Trainer => "trainer".into(),
            TraceThread::Reader(k) => format!("reader {k}"),
        }
    }
}

/// One sample read. The rank and the thread are the trace's and the recording thread's.
pub struct Read {
    pub epoch: u64,
    pub phase: Phase,
    /// 1-based.
    pub step: u64,
    /// The file's index in its split: its key is made again when the trace is written.
    pub file: u64,
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

/// Makes the key of file `file` of the split of `phase` into the string given (emptied first):
/// what the readers read it by, [`crate::dataset::Dataset::write_file_key`].
pub type Keys<'a> = &'a dyn Fn(Phase, u64, &mut String);

/// One rank's trace files, and the records of the threads that have finished a phase, waiting
/// for [`RankTrace::write_out`].
pub struct RankTrace {
    clock: Clock,
    /// The clock's start in microseconds since the Unix epoch.
    wall_start_us: u64,
    rank: u64,
    /// The output folder, in whose trace folder the threads' spill files are made.
    output: Beneath,
    csv: Option<TraceFile>,
    chrome: Option<TraceFile>,
    pfw: Option<pfw::PfwFile>,
    handed_in: Mutex<Vec<ThreadTrace>>,
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
            output: Beneath::open(output).map_err(|e| write_error(output, e))?,
            csv,
            chrome,
            pfw,
            handed_in: Mutex::new(Vec::new()),
        })
    }

    /// Nanoseconds from the run's start to `instant`: the one conversion a record's time gets
    /// while the run is measured.
    fn nanos(&self, instant: Instant) -> u64 {
        self.clock.nanos_at(instant)
    }

    /// Opens a spill file for `thread`: made in the trace folder, opened again to read it back,
    /// and unlinked at once.
    fn spill_file(&self, thread: TraceThread) -> Result<record::Spill> {
        let name = Path::new(TRACE_DIR).join(format!(".{}-{}.spill", self.rank, thread.tid()));
        let path = self.output.path(&name);
        let error = |e| write_error(&path, e);
        let writer = self.output.create_file(&name).map_err(error)?;
        let reader = self.output.open_file(&name);
        self.output.remove_file(&name).map_err(error)?;
        Ok(record::Spill::new(writer, reader.map_err(error)?, path))
    }

    /// Takes the records of a thread that has finished its phase, to be written by
    /// [`RankTrace::write_out`]; never fails, so a reader that failed still leaves what it read.
    pub fn hand_in(&self, records: ThreadTrace) {
        self.handed_in
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(records);
    }

    /// Formats into the rank's files the records handed in (thread by thread, in thread order,
    /// each thread's in the order it made them), then the trainer's `own`; `keys` makes the
    /// files' keys. Called where no time is measured: after a phase's timings are taken, and
    /// when the run ends.
    pub fn write_out(&self, own: &mut ThreadTrace, keys: Keys) -> Result<()> {
        let mut handed_in =
            std::mem::take(&mut *self.handed_in.lock().unwrap_or_else(|p| p.into_inner()));
        handed_in.sort_by_key(|t| t.thread.tid());
        let mut out = Formatted::new(self, keys);
        for mut records in handed_in {
            records.write_into(&mut out)?;
        }
        own.write_into(&mut out)?;
        out.flush_over(1)
    }

    /// Gives the finished files their final names; every record has been written out.
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

/// Start and duration in microseconds of the span between two times in nanoseconds since the
/// run's start: the duration is the difference of the converted ends, so a span that holds
/// another in time holds it in the file too.
fn span_us(started: u64, ended: u64) -> (u64, u64) {
    let ts = started / 1000;
    (ts, (ended / 1000).saturating_sub(ts))
}

/// A thread's trace records not yet written out, in their compact form (`record`): at most
/// `record::HELD` bytes in memory, the rest in its spill file.
pub struct ThreadTrace {
    thread: TraceThread,
    held: Vec<u8>,
    spill: Option<record::Spill>,
}

impl ThreadTrace {
    pub fn new(thread: TraceThread) -> ThreadTrace {
        ThreadTrace {
            thread,
            held: Vec::new(),
            spill: None,
        }
    }

    pub fn thread(&self) -> TraceThread {
        self.thread
    }

    pub fn read(&mut self, trace: &RankTrace, read: &Read) -> Result<()> {
        let record = Record::Read(record::ReadRecord {
            epoch: read.epoch,
            phase: read.phase,
            step: read.step,
            file: read.file,
            sample: read.sample,
            image_idx: read.image_idx,
            offset: read.offset,
            length: read.length,
            started: trace.nanos(read.started),
            ended: trace.nanos(read.ended),
        });
        self.keep(trace, &record)
    }

    pub fn step(&mut self, trace: &RankTrace, step: &Step) -> Result<()> {
        let record = Record::Step(record::StepRecord {
            epoch: step.epoch,
            phase: step.phase,
            step: step.step,
            started: trace.nanos(step.started),
            loaded: trace.nanos(step.loaded),
            computed: trace.nanos(step.computed),
            met: step.met.map(|met| trace.nanos(met)),
            ended: trace.nanos(step.ended),
        });
        self.keep(trace, &record)
    }

    pub fn span(&mut self, trace: &RankTrace, span: &Span) -> Result<()> {
        let record = Record::Span(record::SpanRecord {
            kind: span.kind,
            epoch: span.epoch,
            step: span.step,
            started: trace.nanos(span.started),
            ended: trace.nanos(span.ended),
        });
        self.keep(trace, &record)
    }

    /// Appends `record` to those held, spilling them first when they fill [`record::HELD`].
    fn keep(&mut self, trace: &RankTrace, record: &Record) -> Result<()> {
        if self.held.len() + record::RECORD > record::HELD {
            let spill = match &mut self.spill {
                Some(spill) => spill,
                None => self.spill.insert(trace.spill_file(self.thread)?),
            };
            spill.append(&self.held)?;
            self.held.clear();
        }
        record.encode(&mut self.held);
        Ok(())
    }

    /// Formats every record the thread made into `out`, the spilled ones first, and forgets them.
    fn write_into(&mut self, out: &mut Formatted) -> Result<()> {
        let thread = self.thread;
        if let Some(spill) = &mut self.spill {
            spill.drain(|block| out.records(thread, block))?;
        }
        out.records(thread, &self.held)?;
        self.held.clear();
        Ok(())
    }
}

/// The formats' text of records being written out: one buffer per format, appended to its file
/// once it holds [`FLUSH_AT`] bytes.
struct Formatted<'t> {
    trace: &'t RankTrace,
    keys: Keys<'t>,
    /// The key of `key_of`'s file: consecutive reads of one file make it once.
    key: String,
    key_of: Option<(Phase, u64)>,
    csv: Vec<u8>,
    chrome: Vec<u8>,
    pfw: Vec<u8>,
    /// The DFTracer chunk compressed, before it is appended.
    pfw_compressed: Vec<u8>,
}

impl<'t> Formatted<'t> {
    fn new(trace: &'t RankTrace, keys: Keys<'t>) -> Formatted<'t> {
        Formatted {
            trace,
            keys,
            key: String::new(),
            key_of: None,
            csv: Vec::new(),
            chrome: Vec::new(),
            pfw: Vec::new(),
            pfw_compressed: Vec::new(),
        }
    }

    /// Formats the records encoded in `bytes`, made by `thread`.
    fn records(&mut self, thread: TraceThread, bytes: &[u8]) -> Result<()> {
        for bytes in bytes.chunks_exact(record::RECORD) {
            let record = Record::decode(bytes).ok_or_else(|| {
                Error::run("a trace record read back is not one written (its spill file changed)")
            })?;
            self.record(thread, &record);
            self.flush_over(FLUSH_AT)?;
        }
        Ok(())
    }

    fn record(&mut self, thread: TraceThread, record: &Record) {
        let trace = self.trace;
        match record {
            Record::Read(read) => {
                if self.key_of != Some((read.phase, read.file)) {
                    (self.keys)(read.phase, read.file, &mut self.key);
                    self.key_of = Some((read.phase, read.file));
                }
                let key = &self.key;
                if trace.csv.is_some() {
                    csv::row(&mut self.csv, trace, thread, read, key);
                }
                if trace.chrome.is_some() {
                    chrome::read(&mut self.chrome, trace, thread, read, key);
                }
                if let Some(file) = &trace.pfw {
                    pfw::read(&mut self.pfw, trace, file, thread, read, key);
                }
            }
            Record::Step(step) => {
                if trace.chrome.is_some() {
                    chrome::step(&mut self.chrome, trace, thread, step);
                }
                if let Some(file) = &trace.pfw {
                    pfw::step(&mut self.pfw, trace, file, thread, step);
                }
            }
            Record::Span(span) => {
                if trace.chrome.is_some() {
                    chrome::span(&mut self.chrome, trace, thread, span);
                }
                if let Some(file) = &trace.pfw {
                    pfw::span(&mut self.pfw, trace, file, thread, span);
                }
            }
        }
    }

    /// Appends each buffer that holds at least `at` bytes.
    fn flush_over(&mut self, at: usize) -> Result<()> {
        let trace = self.trace;
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
                file: u64::from(i == 5),
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
        // The reader hands its records in at the end of its phase; the trainer writes them out.
        let keys = |phase: Phase, file: u64, key: &mut String| {
            assert_eq!(phase, Phase::Eval);
            key.clear();
            key.push_str(match file {
                1 => "train/a,\"b\"/x.npz",
                _ => "train/img_1_of_8.npz",
            });
        };
        trace.hand_in(reader);
        trace.write_out(&mut trainer, &keys).unwrap();
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
                "2,eval,2,3,0,\"train/a,\"\"b\"\"/x.npz\",1,5,1099511627776,{},7",
                start(5)
            )
        );
        assert_eq!(
            lines[7],
            format!(
                "2,eval,2,3,0,train/img_1_of_8.npz,2,6,1099511627776,{},7",
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

    /// More records than a thread holds go to its spill file and come back in order, and the
    /// spill file serves again after a write-out; none is left in the trace folder.
    #[test]
    fn records_beyond_what_a_thread_holds_spill_and_come_back_in_order() {
        let output =
            std::env::temp_dir().join(format!("dlio-rs-trace-spill-{}", std::process::id()));
        std::fs::create_dir_all(&output).unwrap();
        let clock = Clock::start();
        let shape = RankShape {
            rank: 0,
            world: 1,
            readers: 0,
            reads: true,
        };
        let trace = RankTrace::create(&output, TraceFormat::Csv, &shape, &clock).unwrap();
        let mut trainer = ThreadTrace::new(TraceThread::Trainer);
        let keys = |_: Phase, file: u64, key: &mut String| {
            key.clear();
            key.push_str(&format!("train/f{file}"));
        };
        let held = (record::HELD / record::RECORD) as u64;
        let base = Instant::now();
        let mut count = 0u64;
        for (phase, reads) in [(1, 2 * held + 5), (2, held + 1)] {
            for i in 0..reads {
                let read = Read {
                    epoch: phase,
                    phase: Phase::Train,
                    step: 1,
                    file: count,
                    sample: 0,
                    image_idx: i,
                    offset: 0,
                    length: 1,
                    started: base,
                    ended: base,
                };
                trainer.read(&trace, &read).unwrap();
                count += 1;
            }
            let left: Vec<_> = std::fs::read_dir(output.join(TRACE_DIR))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            assert_eq!(left, [".0.csv.partial"], "a spill file has a name");
            trace.write_out(&mut trainer, &keys).unwrap();
        }
        trace.complete().unwrap();
        let text = std::fs::read_to_string(output.join(TRACE_DIR).join("0.csv")).unwrap();
        let files: Vec<u64> = text
            .lines()
            .skip(1)
            .map(|l| {
                l.split(',').nth(5).unwrap()["train/f".len()..]
                    .parse()
                    .unwrap()
            })
            .collect();
        assert_eq!(files, (0..count).collect::<Vec<u64>>());
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
            ".0-2.spill",
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
            ".0-a.spill",
            "0-2.spill",
            "keep.txt",
        ] {
            assert!(!is_trace_file(name), "{name}");
        }
    }
}
