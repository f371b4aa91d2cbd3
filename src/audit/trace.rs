//! The read trace a traced run leaves in `OUTPUT/trace/{rank}.csv`: a header line, then one row
//! per sample read, `epoch,phase,step,rank,thread,file,sample,offset,length,start_us,duration_us`.
//!
//! Rows are streamed one at a time into a reused buffer, so reading a trace costs the same memory
//! whatever its length. A file name holding a comma or quote is written quoted (RFC 4180), so the
//! file column may hold commas: the numeric columns are found from both ends of the line, and the
//! rest, unquoted, is the file (names come from listings too, so their commas are not known).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::plan::Phase;

pub use crate::loader::trace::HEADER;
const COLUMNS: usize = 11;
/// Columns before the file column, and after it.
const LEADING: usize = 5;
const TRAILING: usize = 5;

/// The columns the audit checks; the byte range and timing columns are only checked to be numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    /// Line number in the trace file (1-based; line 1 is the header).
    pub line: u64,
    pub epoch: u64,
    pub phase: Phase,
    /// 1-based, as written.
    pub step: u64,
    pub rank: u64,
    pub thread: u64,
    pub file: String,
    pub sample: u64,
}

/// `trace/{rank}.csv`, as a trace file is named in messages (relative to the output folder).
pub fn trace_label(rank: u64) -> String {
    format!("trace/{rank}.csv")
}

/// The longest line of a trace: a row is a few numbers and a file's name (at most 4 KiB on Linux).
const MAX_LINE: usize = 64 << 10;

/// The most characters of a malformed line a message quotes.
const MAX_QUOTED: usize = 300;

/// One rank's trace file, read row by row with one row of look-ahead.
pub struct TraceReader {
    label: String,
    lines: BufReader<File>,
    text: String,
    line_number: u64,
    row: TraceRow,
    /// Whether `row` holds a row not consumed yet.
    loaded: bool,
}

impl TraceReader {
    /// Opens `trace/{rank}.csv` under `trace_dir` and checks its header; None when the file does
    /// not exist.
    pub fn open(trace_dir: &Path, rank: u64) -> Result<Option<TraceReader>> {
        let path = trace_dir.join(format!("{rank}.csv"));
        let label = trace_label(rank);
        // Only a regular file: a FIFO would be read forever, a device without end.
        let file = match File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&path)
            .and_then(|file| match file.metadata()?.is_file() {
                true => Ok(file),
                false => Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a regular file (a FIFO, a device or a socket is there)",
                )),
            }) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                return Err(Error::usage(format!("{label}: {e}")))
            }
            Err(e) => return Err(Error::on_object("cannot open", label, e)),
        };
        let mut reader = TraceReader {
            label,
            lines: BufReader::new(file),
            text: String::new(),
            line_number: 0,
            row: TraceRow {
                line: 0,
                epoch: 0,
                phase: Phase::Train,
                step: 0,
                rank: 0,
                thread: 0,
                file: String::new(),
                sample: 0,
            },
            loaded: false,
        };
        if !reader.next_line()? {
            return Err(Error::usage(format!(
                "{}: empty; expected the header line '{HEADER}'",
                reader.label
            )));
        }
        if reader.text != HEADER {
            return Err(
                reader.malformed(&format!("header is '{}', expected '{HEADER}'", reader.text))
            );
        }
        Ok(Some(reader))
    }

    /// The next row, without consuming it; None at the end of the file.
    pub fn peek(&mut self) -> Result<Option<&TraceRow>> {
        if !self.loaded {
            if !self.next_line()? {
                return Ok(None);
            }
            self.parse_row()?;
            self.loaded = true;
        }
        Ok(Some(&self.row))
    }

    /// Moves past the row [`TraceReader::peek`] returned.
    pub fn consume(&mut self) {
        self.loaded = false;
    }

    /// Reads the next line into `text` without its line ending; false at the end of the file.
    fn next_line(&mut self) -> Result<bool> {
        self.text.clear();
        self.line_number += 1;
        // A line is bounded: a forged file of one endless line must not exhaust memory.
        let read = (&mut self.lines)
            .take(MAX_LINE as u64 + 1)
            .read_line(&mut self.text)
            .map_err(|e| {
                let problem = format!("{}:{}: cannot read: {e}", self.label, self.line_number);
                match e.kind() {
                    // Not UTF-8: not a trace dlio-rs wrote.
                    std::io::ErrorKind::InvalidData => Error::usage(problem),
                    _ => Error::run(problem),
                }
            })?;
        if read == 0 {
            return Ok(false);
        }
        if read > MAX_LINE {
            return Err(self.malformed(&format!("longer than {MAX_LINE} bytes")));
        }
        if self.text.ends_with('\n') {
            self.text.pop();
            if self.text.ends_with('\r') {
                self.text.pop();
            }
        }
        Ok(true)
    }

    fn malformed(&self, what: &str) -> Error {
        // A forged field of a whole line is quoted in part: the message stays a line.
        let shown = match what.char_indices().nth(MAX_QUOTED) {
            Some((cut, _)) => format!("{}… ({} bytes)", &what[..cut], what.len()),
            None => what.to_string(),
        };
        Error::usage(format!(
            "{}:{}: malformed trace line: {shown}",
            self.label, self.line_number
        ))
    }

    fn parse_row(&mut self) -> Result<()> {
        let line = self.text.as_str();
        let commas = line.bytes().filter(|&b| b == b',').count();
        if commas < COLUMNS - 1 {
            return Err(self.malformed(&format!("{} columns, expected {COLUMNS}", commas + 1)));
        }
        let mut leading = line.splitn(LEADING + 1, ',');
        let mut fields = [""; LEADING];
        for field in &mut fields {
            *field = leading.next().unwrap_or_default();
        }
        let rest = leading.next().unwrap_or_default();
        let mut trailing_fields = [""; TRAILING];
        let mut trailing = rest.rsplitn(TRAILING + 1, ',');
        for field in trailing_fields.iter_mut().rev() {
            *field = trailing.next().unwrap_or_default();
        }
        let file = trailing.next().unwrap_or_default();
        let [epoch, phase, step, rank, thread] = fields;
        let [sample, offset, length, start_us, duration_us] = trailing_fields;
        let number = |name: &str, text: &str| {
            text.parse::<u64>().map_err(|_| {
                self.malformed(&format!("{name} = '{text}' is not a whole number ≥ 0"))
            })
        };
        let parsed = TraceRow {
            line: self.line_number,
            epoch: number("epoch", epoch)?,
            phase: match phase {
                "train" => Phase::Train,
                "eval" => Phase::Eval,
                other => {
                    return Err(
                        self.malformed(&format!("phase = '{other}' is neither train nor eval"))
                    )
                }
            },
            step: number("step", step)?,
            rank: number("rank", rank)?,
            thread: number("thread", thread)?,
            file: String::new(),
            sample: number("sample", sample)?,
        };
        for (name, text) in [
            ("offset", offset),
            ("length", length),
            ("start_us", start_us),
            ("duration_us", duration_us),
        ] {
            number(name, text)?;
        }
        if file.is_empty() {
            return Err(self.malformed("the file column is empty"));
        }
        // Reuse the row's file buffer: one allocation per reader, not per row.
        let mut file_buffer = std::mem::take(&mut self.row.file);
        file_buffer.clear();
        match file
            .strip_prefix('"')
            .and_then(|quoted| quoted.strip_suffix('"'))
        {
            Some(quoted) => file_buffer.push_str(&quoted.replace("\"\"", "\"")),
            None => file_buffer.push_str(file),
        }
        self.row = TraceRow {
            file: file_buffer,
            ..parsed
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader_of(name: &str, text: &str) -> Result<Option<TraceReader>> {
        let dir = std::env::temp_dir().join(format!("dlio-rs-trace-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("3.csv"), text).unwrap();
        let reader = TraceReader::open(&dir, 3);
        std::fs::remove_dir_all(&dir).unwrap();
        reader
    }

    fn rows(name: &str, text: &str) -> Result<Vec<TraceRow>> {
        let mut reader = reader_of(name, text)?.expect("file exists");
        let mut rows = Vec::new();
        while let Some(row) = reader.peek()? {
            rows.push(row.clone());
            reader.consume();
        }
        Ok(rows)
    }

    #[test]
    fn rows_parse_with_crlf_and_commas_in_names() {
        let text = format!(
            "{HEADER}\n1,train,2,3,0,train/img_1_of_4.npz,5,100,64,7,8\n2,eval,1,3,1,valid/img_1_of_2.npz,0,0,1,2,3\n"
        );
        let parsed = rows("ok2", &text).unwrap();
        assert_eq!(parsed.len(), 2);
        assert_eq!(
            parsed[0],
            TraceRow {
                line: 2,
                epoch: 1,
                phase: Phase::Train,
                step: 2,
                rank: 3,
                thread: 0,
                file: "train/img_1_of_4.npz".into(),
                sample: 5,
            }
        );
        assert_eq!(parsed[1].phase, Phase::Eval);
        assert_eq!(parsed[1].line, 3);
        let with_commas = format!(
            "{HEADER}\r\n2,eval,1,3,1,valid/a,b_1_of_2.npz,0,0,1,2,3\r\n\
             2,eval,1,3,1,\"valid/\"\"c\"\",d,e.npz\",0,0,1,2,3\r\n"
        );
        let parsed = rows("comma", &with_commas).unwrap();
        assert_eq!(parsed[0].file, "valid/a,b_1_of_2.npz");
        assert_eq!(parsed[1].file, "valid/\"c\",d,e.npz");
    }

    #[test]
    fn malformed_files_name_file_and_line() {
        let cases = [
            ("", "trace/3.csv: empty"),
            (
                "epoch,phase\n",
                "trace/3.csv:1: malformed trace line: header is",
            ),
            (
                "HEADER\n1,train,1,0,0,f,0,0,0,0\n",
                "trace/3.csv:2: malformed trace line: 10 columns, expected 11",
            ),
            (
                "HEADER\n1,train,1,0,0,f,0,0,0,0,0\n1,train,x,0,0,f,0,0,0,0,0\n",
                "trace/3.csv:3: malformed trace line: step = 'x' is not a whole number",
            ),
            (
                "HEADER\n1,train,1,0,0,f,0,-1,0,0,0\n",
                "trace/3.csv:2: malformed trace line: offset = '-1'",
            ),
            (
                "HEADER\n1,test,1,0,0,f,0,0,0,0,0\n",
                "phase = 'test' is neither train nor eval",
            ),
            (
                "HEADER\n1,train,1,0,0,,0,0,0,0,0\n",
                "the file column is empty",
            ),
            (
                "HEADER\n\n",
                "trace/3.csv:2: malformed trace line: 1 columns",
            ),
        ];
        for (i, (text, expected)) in cases.iter().enumerate() {
            let text = text.replace("HEADER", HEADER);
            let err = rows(&format!("bad{i}"), &text).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            assert!(err.to_string().contains(expected), "{text:?}: {err}");
        }
    }

    #[test]
    fn a_missing_file_is_none() {
        let dir = std::env::temp_dir().join("dlio-rs-trace-surely-missing");
        assert!(TraceReader::open(&dir, 0).unwrap().is_none());
    }
}
