//! The read trace that `dlio-rs audit` checks: one CSV row per sample read, so anyone can check
//! afterwards that every epoch read every planned sample exactly once.
//!
//! Each rank writes `trace/{rank}.csv` in the output folder: the [`HEADER`] line, then one row per
//! sample, formatted with `itoa` into the reading thread's buffer (no allocation per row). Rows of
//! one thread stay in read order; chunks of different threads of the same epoch interleave.

use super::{RankTrace, Read};

/// The first line of every trace file (without its line break).
pub const HEADER: &str =
    "epoch,phase,step,rank,thread,file,sample,offset,length,start_us,duration_us";

/// Appends the row of `read` to `out`.
pub(super) fn row(out: &mut Vec<u8>, trace: &RankTrace, read: &Read) {
    let mut number = itoa::Buffer::new();
    let field = |out: &mut Vec<u8>, text: &[u8], separator: u8| {
        out.extend_from_slice(text);
        out.push(separator);
    };
    field(out, number.format(read.epoch).as_bytes(), b',');
    field(out, read.phase.as_str().as_bytes(), b',');
    field(out, number.format(read.step).as_bytes(), b',');
    field(out, number.format(read.rank).as_bytes(), b',');
    field(out, number.format(read.thread).as_bytes(), b',');
    write_csv_field(out, read.key);
    out.push(b',');
    field(out, number.format(read.sample).as_bytes(), b',');
    field(out, number.format(read.offset).as_bytes(), b',');
    field(out, number.format(read.length).as_bytes(), b',');
    field(
        out,
        number.format(trace.micros(read.started)).as_bytes(),
        b',',
    );
    let duration = read.ended.saturating_duration_since(read.started);
    field(
        out,
        number.format(duration.as_micros() as u64).as_bytes(),
        b'\n',
    );
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
