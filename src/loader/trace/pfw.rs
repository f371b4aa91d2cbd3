//! DFTracer's trace (`.pfw.gz`), as Python DLIO writes it through DFTracer 2.2 with
//! `DFTRACER_ENABLE=1 DFTRACER_INC_METADATA=1`: `trace/trace-{rank}-of-{world}.pfw.gz`, one JSON
//! object per line, no enclosing array, gzip-compressed (DFTracer's tools read only compressed
//! traces). Each chunk appended as records are written out is one gzip member: concatenated
//! members are one gzip stream, and a file cut short by a crash keeps every member written before
//! it.
//!
//! The file opens with DFTracer's metadata lines (`"ph":4`): `HH` (the host's hash `hhash` and its
//! name), one `thread_name` per thread, `CM` (the time unit, `US`), then its `start` event; it ends
//! with its `end` event, whose `num_events` counts the events before it. Each event in between is a
//! complete event (`"ph":1`, `"type":6`, DFTracer's number for events logged from Python) with a
//! sequential `id` (given as the records are written out, so in file order), `ts` in microseconds
//! since the Unix epoch, `dur` in microseconds, and `args` that start with `hhash`. Names and
//! categories are those of the `dftracer.python.ai` events DLIO's code carries: `item` (data) per
//! sample read, `fetch.iter` (dataloader) the wait for a batch, `fetch.block` (dataloader) the
//! step's work after it, `compute` (compute), `capture` and `restart` (checkpoint), `train`,
//! `evaluate` and `epoch.block` (pipeline), `ai_root` the run; the barrier, which DLIO does not
//! trace, is `barrier` (comm), the name DFTracer's AI events give it. `pid` is the rank (DLIO asks
//! DFTracer for its rank as the process id), `tid` the thread as in the Chrome trace.
//! docs/valid-measurement.md lists the sources and what differs from DLIO.

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::write::GzEncoder;
use flate2::Compression;

use super::record::{ReadRecord, SpanRecord, StepRecord};
use super::{span_us, Args, RankShape, RankTrace, SpanKind, TraceFile, TraceThread};
use crate::error::Result;

/// A rank's `.pfw.gz` file, with its event counter and its host's hash.
pub(super) struct PfwFile {
    file: TraceFile,
    /// The next event's `id`: DFTracer numbers a file's events from 1 (its `start`).
    ids: AtomicU64,
    /// The host name's hash, as DFTracer writes `hhash`: 16 hexadecimal digits.
    hhash: String,
}

/// FNV-1a (64 bits): DFTracer's own hash of a host name is internal to its library; any stable
/// hash serves, since the `HH` line maps it to the name.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// A metadata line (`"ph":4`) named `line` of thread `tid`, mapping `name` to `value`.
fn metadata(
    out: &mut Vec<u8>,
    (rank, tid): (u64, u64),
    hhash: &str,
    line: &str,
    name: &str,
    value: &str,
) {
    out.extend_from_slice(
        format!(
            r#"{{"name":"{line}","cat":"dftracer","type":1,"pid":{rank},"tid":{tid},"ph":4,"args":"#
        )
        .as_bytes(),
    );
    let mut args = Args::begin(out);
    args.str("hhash", hhash)
        .str("name", name)
        .str("value", value);
    args.end();
    out.extend_from_slice(b"}\n");
}

/// One of DFTracer's own events (`"type":1`) of the trainer: `start`, or `end` with the count of
/// the events before it.
fn own_event(out: &mut Vec<u8>, (rank, id): (u64, u64), name: &str, ts: u64, hhash: &str) {
    let tid = TraceThread::Trainer.tid();
    out.extend_from_slice(
        format!(
            r#"{{"id":{id},"name":"{name}","cat":"dftracer","type":1,"pid":{rank},"tid":{tid},"ts":{ts},"dur":0,"ph":1,"args":"#
        )
        .as_bytes(),
    );
    let mut args = Args::begin(out);
    args.str("hhash", hhash);
    if name == "end" {
        args.int("num_events", id - 1);
    }
    args.end();
    out.extend_from_slice(b"}\n");
}

impl PfwFile {
    pub(super) fn create(
        output: &Path,
        shape: &RankShape,
        threads: &[TraceThread],
        wall_start_us: u64,
    ) -> Result<PfwFile> {
        let rank = shape.rank;
        let host = crate::system::hostname();
        let hhash = format!("{:016x}", fnv1a(host.as_bytes()));
        let trainer = TraceThread::Trainer.tid();
        let mut head = Vec::new();
        metadata(&mut head, (rank, trainer), &hhash, "HH", &host, &hhash);
        for thread in threads {
            let (tid, name) = (thread.tid(), thread.name());
            metadata(
                &mut head,
                (rank, tid),
                &hhash,
                "thread_name",
                &tid.to_string(),
                &name,
            );
        }
        metadata(
            &mut head,
            (rank, trainer),
            &hhash,
            "CM",
            "time_metric",
            "US",
        );
        own_event(&mut head, (rank, 1), "start", wall_start_us, &hhash);
        let name = format!("trace-{rank}-of-{}.pfw.gz", shape.world);
        Ok(PfwFile {
            file: TraceFile::create(output, &name, gzip(&head, &mut Vec::new()))?,
            ids: AtomicU64::new(2),
            hhash,
        })
    }

    /// Writes the `end` event at `now_us` and gives the file its final name.
    pub(super) fn complete(self, rank: u64, now_us: u64) -> Result<()> {
        let id = self.ids.load(Ordering::Relaxed);
        let mut tail = Vec::new();
        own_event(&mut tail, (rank, id), "end", now_us, &self.hhash);
        self.file.complete(gzip(&tail, &mut Vec::new()))
    }

    /// Appends `lines` as one gzip member, compressed into `scratch`.
    pub(super) fn append(&self, lines: &[u8], scratch: &mut Vec<u8>) -> Result<()> {
        self.file.append(gzip(lines, scratch))
    }
}

/// `bytes` as one gzip member, in `out` (emptied first). Fast compression: the trace's lines
/// repeat their keys, and level 1 takes most of that at a fraction of the default's cost.
fn gzip<'o>(bytes: &[u8], out: &'o mut Vec<u8>) -> &'o [u8] {
    out.clear();
    let mut encoder = GzEncoder::new(out, Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(bytes);
    encoder.finish().map_or(&[], |out| out.as_slice())
}

/// Appends one complete event of `thread`; `name` and `cat` need no escaping.
fn event(
    out: &mut Vec<u8>,
    (trace, file): (&RankTrace, &PfwFile),
    thread: TraceThread,
    (name, cat): (&str, &str),
    (ts, dur): (u64, u64),
    args: impl FnOnce(&mut Args),
) {
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(b"{\"id\":");
    let id = file.ids.fetch_add(1, Ordering::Relaxed);
    out.extend_from_slice(number.format(id).as_bytes());
    out.extend_from_slice(b",\"name\":\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\",\"cat\":\"");
    out.extend_from_slice(cat.as_bytes());
    out.extend_from_slice(b"\",\"type\":6,\"pid\":");
    out.extend_from_slice(number.format(trace.rank).as_bytes());
    out.extend_from_slice(b",\"tid\":");
    out.extend_from_slice(number.format(thread.tid()).as_bytes());
    out.extend_from_slice(b",\"ts\":");
    out.extend_from_slice(number.format(trace.wall_start_us + ts).as_bytes());
    out.extend_from_slice(b",\"dur\":");
    out.extend_from_slice(number.format(dur).as_bytes());
    out.extend_from_slice(b",\"ph\":1,\"args\":");
    let mut members = Args::begin(out);
    members.str("hhash", &file.hhash);
    args(&mut members);
    members.end();
    out.extend_from_slice(b"}\n");
}

pub(super) fn read(
    out: &mut Vec<u8>,
    trace: &RankTrace,
    file: &PfwFile,
    thread: TraceThread,
    read: &ReadRecord,
    key: &str,
) {
    let times = span_us(read.started, read.ended);
    event(
        out,
        (trace, file),
        thread,
        ("item", "data"),
        times,
        |args| {
            args.int("epoch", read.epoch)
                .str("phase", read.phase.as_str())
                .int("step", read.step)
                .int("image_idx", read.image_idx)
                .int("image_size", read.length)
                .str("fname", key)
                .int("offset", read.offset);
        },
    );
}

pub(super) fn step(
    out: &mut Vec<u8>,
    trace: &RankTrace,
    file: &PfwFile,
    thread: TraceThread,
    step: &StepRecord,
) {
    let mut part = |name_cat: (&str, &str), started, ended| {
        let times = span_us(started, ended);
        event(out, (trace, file), thread, name_cat, times, |args| {
            args.int("epoch", step.epoch)
                .str("phase", step.phase.as_str())
                .int("step", step.step);
            if name_cat.1 == "dataloader" {
                // DLIO's `fetch` iterator counts its batches.
                args.int("count", step.step);
            }
        });
    };
    part(("fetch.iter", "dataloader"), step.started, step.loaded);
    part(("compute", "compute"), step.loaded, step.computed);
    if let Some(met) = step.met {
        part(("barrier", "comm"), step.computed, met);
    }
    part(("fetch.block", "dataloader"), step.loaded, step.ended);
}

pub(super) fn span(
    out: &mut Vec<u8>,
    trace: &RankTrace,
    file: &PfwFile,
    thread: TraceThread,
    span: &SpanRecord,
) {
    let name = match span.kind {
        SpanKind::Run => ("ai_root", "ai_root"),
        SpanKind::Epoch => ("epoch.block", "pipeline"),
        SpanKind::Train => ("train", "pipeline"),
        SpanKind::Eval => ("evaluate", "pipeline"),
        SpanKind::CheckpointSave => ("capture", "checkpoint"),
        SpanKind::CheckpointLoad => ("restart", "checkpoint"),
    };
    let times = span_us(span.started, span.ended);
    event(out, (trace, file), thread, name, times, |args| {
        match span.kind {
            SpanKind::Run => args,
            // DLIO's epoch iterator counts its epochs.
            SpanKind::Epoch => args.int("epoch", span.epoch).int("count", span.epoch),
            SpanKind::Train | SpanKind::Eval => args.int("epoch", span.epoch),
            SpanKind::CheckpointSave | SpanKind::CheckpointLoad => {
                args.int("epoch", span.epoch).int("step", span.step)
            }
        };
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_is_the_published_function() {
        // The FNV-1a test vectors: the empty string is the offset basis, "a" a known value.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
