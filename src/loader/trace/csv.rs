//! The read trace that `dlio-rs audit` checks: one CSV row per sample read, so anyone can check
//! afterwards that every epoch read every planned sample exactly once.
//!
//! Each rank writes `trace/{rank}.csv` in the output folder: the [`HEADER`] line, then one row per
//! sample, formatted with `itoa` when the records are written out (no allocation per row). Each
//! phase's rows follow those of the phase before; within a phase, each thread's rows are
//! together and in read order.

use super::record::ReadRecord;
use super::{RankTrace, TraceThread};

/// The first line of every trace file (without its line break).
pub const HEADER: &str =
    "epoch,phase,step,rank,thread,file,sample,offset,length,start_us,duration_us";

/// Appends the row of `read`, of file `key`, by `thread`, to `out`.
pub(super) fn row(
    out: &mut Vec<u8>,
    trace: &RankTrace,
    thread: TraceThread,
    read: &ReadRecord,
    key: &str,
) {
    let mut number = itoa::Buffer::new();
    let field = |out: &mut Vec<u8>, text: &[u8], separator: u8| {
        out.extend_from_slice(text);
        out.push(separator);
    };
    field(out, number.format(read.epoch).as_bytes(), b',');
    field(out, read.phase.as_str().as_bytes(), b',');
    field(out, number.format(read.step).as_bytes(), b',');
    field(out, number.format(trace.rank).as_bytes(), b',');
    field(out, number.format(thread.index()).as_bytes(), b',');
    write_csv_field(out, key);
    out.push(b',');
    field(out, number.format(read.sample).as_bytes(), b',');
    field(out, number.format(read.offset).as_bytes(), b',');
    field(out, number.format(read.length).as_bytes(), b',');
    field(out, number.format(read.started / 1000).as_bytes(), b',');
    let duration = read.ended.saturating_sub(read.started);
    field(out, number.format(duration / 1000).as_bytes(), b'\n');
}

/// A file name as a CSV field: quoted (RFC 4180) only when it holds a comma, quote or line break.
fn write_csv_field(out: &mut Vec<u8>, text: &str) {
    if text.contains([',', '"', '\n', '\r']) {
        out.push(b'"');
        for part in text.split_inclusive('"') {
            out.extend_from_slice(part.as_bytes());
            if part.ends_with('"') {
                out.push(b'"');
            }
        }
        out.push(b'"');
    } else {
        out.extend_from_slice(text.as_bytes());
    }
}
