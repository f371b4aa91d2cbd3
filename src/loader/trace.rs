//! The read trace: one CSV row per sample read, so anyone can check afterwards (with
//! `dlio-rs audit`) that every epoch read every planned sample exactly once.
//!
//! Each rank writes `trace/{rank}.csv` in the output folder. Its reader threads format rows into
//! their own small buffer and append it to the rank's file in chunks, so tracing costs a few
//! integer formats per read and one locked write per `FLUSH_AT` bytes: no allocation per row,
//! no lock per row. Rows of one thread stay in read order; chunks of different threads of the
//! same epoch interleave. The file is written under a temporary name and renamed when the rank
//! finishes, so a trace that exists is complete.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::folder::Beneath;
use crate::plan::Phase;

/// The first line of every trace file (without its line break).
pub const HEADER: &str =
    "epoch,phase,step,rank,thread,file,sample,offset,length,start_us,duration_us";

/// The trace's folder, in the output folder.
pub const TRACE_DIR: &str = "trace";

/// A thread's rows are appended to the file once they fill this many bytes.
const FLUSH_AT: usize = 64 * 1024;

/// One rank's trace file.
pub struct TraceFile {
    /// The output folder, below which the trace is written without following links.
    output: Beneath,
    name: PathBuf,
    partial: PathBuf,
    file: Mutex<File>,
}

impl TraceFile {
    /// Creates `trace/{rank}.csv` in the output folder `output` (under a temporary name until
    /// [`TraceFile::complete`]), never through a link planted there.
    pub fn create(output: &Path, rank: usize) -> Result<TraceFile> {
        let name = Path::new(TRACE_DIR).join(format!("{rank}.csv"));
        let partial = Path::new(TRACE_DIR).join(format!(".{rank}.csv.partial"));
        let output = Beneath::open(output).map_err(|e| write_error(output, e))?;
        let mut file = output
            .create_file(&partial)
            .map_err(|e| write_error(&output.path(&partial), e))?;
        file.write_all(format!("{HEADER}\n").as_bytes())
            .map_err(|e| write_error(&output.path(&partial), e))?;
        Ok(TraceFile {
            output,
            name,
            partial,
            file: Mutex::new(file),
        })
    }

    fn append(&self, rows: &[u8]) -> Result<()> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        file.write_all(rows)
            .map_err(|e| write_error(&self.output.path(&self.partial), e))
    }

    /// Gives the finished trace its final name.
    pub fn complete(self) -> Result<()> {
        let file = self.file.into_inner().unwrap_or_else(|p| p.into_inner());
        file.sync_data()
            .and_then(|()| self.output.rename(&self.partial, &self.name))
            .map_err(|e| write_error(&self.output.path(&self.name), e))
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
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let stem = name.strip_suffix(".csv").or_else(|| {
            name.strip_prefix('.')
                .and_then(|n| n.strip_suffix(".csv.partial"))
        });
        if stem.is_some_and(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())) {
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

/// One row: what was read, by whom, when.
pub struct Row<'a> {
    pub epoch: u64,
    pub phase: Phase,
    pub step: u64,
    pub rank: u64,
    pub thread: usize,
    pub key: &'a str,
    pub sample: u64,
    pub offset: u64,
    pub length: u64,
    pub start_us: u64,
    pub duration_us: u64,
}

/// A reader thread's rows not yet appended to the file.
#[derive(Default)]
pub struct PendingRows {
    bytes: Vec<u8>,
}

impl PendingRows {
    pub fn push(&mut self, file: &TraceFile, row: &Row) -> Result<()> {
        let mut number = itoa::Buffer::new();
        let out = &mut self.bytes;
        let field = |out: &mut Vec<u8>, text: &[u8], separator: u8| {
            out.extend_from_slice(text);
            out.push(separator);
        };
        field(out, number.format(row.epoch).as_bytes(), b',');
        field(out, row.phase.as_str().as_bytes(), b',');
        field(out, number.format(row.step).as_bytes(), b',');
        field(out, number.format(row.rank).as_bytes(), b',');
        field(out, number.format(row.thread).as_bytes(), b',');
        write_csv_field(out, row.key);
        out.push(b',');
        field(out, number.format(row.sample).as_bytes(), b',');
        field(out, number.format(row.offset).as_bytes(), b',');
        field(out, number.format(row.length).as_bytes(), b',');
        field(out, number.format(row.start_us).as_bytes(), b',');
        field(out, number.format(row.duration_us).as_bytes(), b'\n');
        if self.bytes.len() >= FLUSH_AT {
            self.flush(file)?;
        }
        Ok(())
    }

    pub fn flush(&mut self, file: &TraceFile) -> Result<()> {
        if !self.bytes.is_empty() {
            file.append(&self.bytes)?;
            self.bytes.clear();
        }
        Ok(())
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_reach_the_file_in_order_and_the_name_only_when_complete() {
        let output = std::env::temp_dir().join(format!("dlio-rs-trace-{}", std::process::id()));
        std::fs::create_dir_all(&output).unwrap();
        let dir = output.join(TRACE_DIR);
        let file = TraceFile::create(&output, 3).unwrap();
        let mut rows = PendingRows::default();
        let count = 3000u64;
        for i in 0..count {
            let row = Row {
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
                offset: i,
                length: 1 << 40,
                start_us: i * 10,
                duration_us: 7,
            };
            rows.push(&file, &row).unwrap();
        }
        assert!(!dir.join("3.csv").exists(), "named before completion");
        rows.flush(&file).unwrap();
        file.complete().unwrap();
        let text = std::fs::read_to_string(dir.join("3.csv")).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], HEADER);
        assert_eq!(lines.len() as u64, count + 1);
        assert_eq!(
            lines[6],
            "2,eval,2,3,1,\"train/a,\"\"b\"\"/x.npz\",1,5,1099511627776,50,7"
        );
        assert_eq!(
            lines[7],
            "2,eval,2,3,1,train/img_1_of_8.npz,2,6,1099511627776,60,7"
        );
        assert!(!dir.join(".3.csv.partial").exists());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
