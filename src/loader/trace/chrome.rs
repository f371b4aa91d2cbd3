//! Chrome trace events (the Trace Event Format's JSON object form, `{"traceEvents":[…]}`), which
//! Perfetto and `chrome://tracing` open: `trace/{rank}.json`, one file per rank.
//!
//! Every record is a complete event (`"ph":"X"`, `ts` and `dur` in microseconds since the run's
//! start). The process is the rank (`pid` = rank + 1, since Perfetto takes pid 0 for the kernel's
//! idle process; metadata events name it `rank R` and sort the ranks in order), the thread is the
//! trainer (`tid` 1) or reader thread k (`tid` 2 + k), each named by a metadata event. The trainer's
//! spans nest: run ⊃ epoch ⊃ train or evaluation ⊃ step ⊃ data wait, compute, barrier and a
//! checkpoint save after the step (a save after the epoch sits in the epoch, beside its phases).
//! Reads are spans of the thread that read, inside the data wait when the trainer reads itself.
//!
//! The metadata events open the array, so every later event starts with its separator (`,`) and
//! a chunk of events can be appended anywhere after them; the file's last line closes the array.

use super::record::{ReadRecord, SpanRecord, StepRecord};
use super::{span_us, Args, RankTrace, SpanKind, TraceThread};

/// What closes a finished file.
pub(super) const TAIL: &[u8] = b"\n]}\n";

/// The event trace's `pid` of `rank`.
fn pid(rank: u64) -> u64 {
    rank + 1
}

/// The opening of a rank's file: the array, and the metadata events naming the rank and `threads`.
pub(super) fn head(rank: u64, threads: &[TraceThread]) -> Vec<u8> {
    let pid = pid(rank);
    let mut events = vec![
        format!(
            r#"{{"name":"process_name","ph":"M","pid":{pid},"args":{{"name":"rank {rank}"}}}}"#
        ),
        format!(
            r#"{{"name":"process_sort_index","ph":"M","pid":{pid},"args":{{"sort_index":{rank}}}}}"#
        ),
    ];
    for thread in threads {
        events.push(format!(
            r#"{{"name":"thread_name","ph":"M","pid":{pid},"tid":{},"args":{{"name":"{}"}}}}"#,
            thread.tid(),
            thread.name()
        ));
    }
    format!("{{\"traceEvents\":[\n{}", events.join(",\n")).into_bytes()
}

/// Appends one complete event of `thread`; `name` and `cat` need no escaping.
fn event(
    out: &mut Vec<u8>,
    trace: &RankTrace,
    thread: TraceThread,
    (name, cat): (&str, &str),
    (ts, dur): (u64, u64),
    args: impl FnOnce(&mut Args),
) {
    let mut number = itoa::Buffer::new();
    out.extend_from_slice(b",\n{\"name\":\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\",\"cat\":\"");
    out.extend_from_slice(cat.as_bytes());
    out.extend_from_slice(b"\",\"ph\":\"X\",\"pid\":");
    out.extend_from_slice(number.format(pid(trace.rank)).as_bytes());
    out.extend_from_slice(b",\"tid\":");
    out.extend_from_slice(number.format(thread.tid()).as_bytes());
    out.extend_from_slice(b",\"ts\":");
    out.extend_from_slice(number.format(ts).as_bytes());
    out.extend_from_slice(b",\"dur\":");
    out.extend_from_slice(number.format(dur).as_bytes());
    out.extend_from_slice(b",\"args\":");
    let mut members = Args::begin(out);
    args(&mut members);
    members.end();
    out.push(b'}');
}

pub(super) fn read(
    out: &mut Vec<u8>,
    trace: &RankTrace,
    thread: TraceThread,
    read: &ReadRecord,
    key: &str,
) {
    let times = span_us(read.started, read.ended);
    event(out, trace, thread, ("read", "read"), times, |args| {
        args.int("epoch", read.epoch)
            .str("phase", read.phase.as_str())
            .int("step", read.step)
            .str("file", key)
            .int("sample", read.sample)
            .int("offset", read.offset)
            .int("length", read.length);
    });
}

pub(super) fn step(out: &mut Vec<u8>, trace: &RankTrace, thread: TraceThread, step: &StepRecord) {
    let args = |args: &mut Args| {
        args.int("epoch", step.epoch)
            .str("phase", step.phase.as_str())
            .int("step", step.step);
    };
    let mut part = |name: &str, started, ended| {
        let times = span_us(started, ended);
        event(out, trace, thread, (name, "step"), times, args);
    };
    part("step", step.started, step.ended);
    part("data wait", step.started, step.loaded);
    part("compute", step.loaded, step.computed);
    if let Some(met) = step.met {
        part("barrier", step.computed, met);
    }
}

pub(super) fn span(out: &mut Vec<u8>, trace: &RankTrace, thread: TraceThread, span: &SpanRecord) {
    let name = match span.kind {
        SpanKind::Run => ("run", "run"),
        SpanKind::Epoch => ("epoch", "epoch"),
        SpanKind::Train => ("train", "phase"),
        SpanKind::Eval => ("evaluation", "phase"),
        SpanKind::CheckpointSave => ("checkpoint save", "checkpoint"),
        SpanKind::CheckpointLoad => ("checkpoint load", "checkpoint"),
    };
    let times = span_us(span.started, span.ended);
    event(out, trace, thread, name, times, |args| {
        match span.kind {
            SpanKind::Run => args.int("rank", trace.rank),
            SpanKind::Epoch | SpanKind::Train | SpanKind::Eval => args.int("epoch", span.epoch),
            SpanKind::CheckpointSave | SpanKind::CheckpointLoad => {
                args.int("epoch", span.epoch).int("step", span.step)
            }
        };
    });
}
