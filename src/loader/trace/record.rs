//! The compact form in which a thread keeps its trace while it runs: each record a fixed
//! [`RECORD`] bytes of native-endian words, times as nanoseconds since the run's clock started,
//! the file as its index in its split (its key is made again when the record is formatted). A
//! thread appends a record with a few stores and no formatting, string copy or allocation beyond
//! its buffer's growth; the records are formatted into the trace's files only where no time is
//! measured ([`super::RankTrace::write_out`]).
//!
//! A thread holds at most [`HELD`] bytes of records; beyond that it moves them, one write per
//! block, to its spill file: a file in the trace folder unlinked as soon as it is opened, so a
//! run that dies leaves none behind, and the kernel may keep its pages in memory or write them
//! out as memory requires. Memory is thus bounded by the number of threads, not by the length of
//! a phase; the disk holds what the phase read until the phase ends.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use super::SpanKind;
use crate::error::{Error, Result};
use crate::plan::Phase;

/// The bytes of one record.
pub(super) const RECORD: usize = 80;

/// The bytes of records a thread holds in memory before it spills them: a large block, so a
/// spill is one write per 13 107 reads.
pub(super) const HELD: usize = RECORD * ((1 << 20) / RECORD);

/// One sample read, as kept: times in nanoseconds since the run's clock started.
pub(super) struct ReadRecord {
    pub epoch: u64,
    pub phase: Phase,
    pub step: u64,
    /// The file's index in the split of `phase`.
    pub file: u64,
    pub sample: u64,
    pub image_idx: u64,
    pub offset: u64,
    pub length: u64,
    pub started: u64,
    pub ended: u64,
}

/// One step of the training loop, as kept (see [`super::Step`]).
pub(super) struct StepRecord {
    pub epoch: u64,
    pub phase: Phase,
    pub step: u64,
    pub started: u64,
    pub loaded: u64,
    pub computed: u64,
    pub met: Option<u64>,
    pub ended: u64,
}

/// A span of the trainer, as kept (see [`super::Span`]).
pub(super) struct SpanRecord {
    pub kind: SpanKind,
    pub epoch: u64,
    pub step: u64,
    pub started: u64,
    pub ended: u64,
}

pub(super) enum Record {
    Read(ReadRecord),
    Step(StepRecord),
    Span(SpanRecord),
}

/// The first word's low byte: which record it is.
const READ: u64 = 0;
const STEP: u64 = 1;
const SPAN: u64 = 2;

const SPAN_KINDS: [SpanKind; 6] = [
    SpanKind::Run,
    SpanKind::Epoch,
    SpanKind::Train,
    SpanKind::Eval,
    SpanKind::CheckpointSave,
    SpanKind::CheckpointLoad,
];

fn phase_code(phase: Phase) -> u64 {
    match phase {
        Phase::Train => 0,
        Phase::Eval => 1,
    }
}

fn phase_of(code: u64) -> Phase {
    if code == 0 {
        Phase::Train
    } else {
        Phase::Eval
    }
}

impl Record {
    /// Appends the record's [`RECORD`] bytes to `out`. The first word holds the record's kind
    /// (bits 0–7), its phase or span kind (bits 8–15) and whether a step met a barrier (bit 16).
    pub(super) fn encode(&self, out: &mut Vec<u8>) {
        let words: [u64; RECORD / 8] = match self {
            Record::Read(r) => [
                READ | phase_code(r.phase) << 8,
                r.epoch,
                r.step,
                r.file,
                r.sample,
                r.image_idx,
                r.offset,
                r.length,
                r.started,
                r.ended,
            ],
            Record::Step(s) => [
                STEP | phase_code(s.phase) << 8 | u64::from(s.met.is_some()) << 16,
                s.epoch,
                s.step,
                s.started,
                s.loaded,
                s.computed,
                s.met.unwrap_or(0),
                s.ended,
                0,
                0,
            ],
            Record::Span(s) => {
                let kind = SPAN_KINDS.iter().position(|&k| k == s.kind).unwrap_or(0) as u64;
                [
                    SPAN | kind << 8,
                    s.epoch,
                    s.step,
                    s.started,
                    s.ended,
                    0,
                    0,
                    0,
                    0,
                    0,
                ]
            }
        };
        let mut bytes = [0u8; RECORD];
        for (place, word) in bytes.chunks_exact_mut(8).zip(words) {
            place.copy_from_slice(&word.to_ne_bytes());
        }
        out.extend_from_slice(&bytes);
    }

    /// The record [`Record::encode`] wrote as `bytes` ([`RECORD`] of them); `None` for bytes no
    /// record makes.
    pub(super) fn decode(bytes: &[u8]) -> Option<Record> {
        let mut words = [0u64; RECORD / 8];
        for (word, place) in words.iter_mut().zip(bytes.chunks_exact(8)) {
            *word = u64::from_ne_bytes(place.try_into().ok()?);
        }
        let [head, w1, w2, w3, w4, w5, w6, w7, w8, w9] = words;
        let code = head >> 8 & 0xff;
        Some(match head & 0xff {
            READ => Record::Read(ReadRecord {
                epoch: w1,
                phase: phase_of(code),
                step: w2,
                file: w3,
                sample: w4,
                image_idx: w5,
                offset: w6,
                length: w7,
                started: w8,
                ended: w9,
            }),
            STEP => Record::Step(StepRecord {
                epoch: w1,
                phase: phase_of(code),
                step: w2,
                started: w3,
                loaded: w4,
                computed: w5,
                met: (head >> 16 & 1 == 1).then_some(w6),
                ended: w7,
            }),
            SPAN => Record::Span(SpanRecord {
                kind: *SPAN_KINDS.get(code as usize)?,
                epoch: w1,
                step: w2,
                started: w3,
                ended: w4,
            }),
            _ => return None,
        })
    }
}

/// A thread's records moved out of memory: written through one descriptor, read back through the
/// other (the file has no name left to open it by again).
pub(super) struct Spill {
    writer: File,
    reader: File,
    bytes: u64,
    /// Where the file was made, for messages.
    path: PathBuf,
}

impl Spill {
    pub(super) fn new(writer: File, reader: File, path: PathBuf) -> Spill {
        Spill {
            writer,
            reader,
            bytes: 0,
            path,
        }
    }

    fn error(&self, e: std::io::Error) -> Error {
        Error::io("cannot spill trace records to", &self.path, e)
    }

    pub(super) fn append(&mut self, records: &[u8]) -> Result<()> {
        self.writer
            .write_all_at(records, self.bytes)
            .map_err(|e| self.error(e))?;
        self.bytes += records.len() as u64;
        Ok(())
    }

    /// Hands `each` the records spilled, in the order they were, a block of at most [`HELD`]
    /// bytes at a time, then empties the file for the records to come.
    pub(super) fn drain(&mut self, mut each: impl FnMut(&[u8]) -> Result<()>) -> Result<()> {
        let mut block = vec![0; HELD.min(self.bytes as usize)];
        let mut at = 0;
        while at < self.bytes {
            let n = HELD.min((self.bytes - at) as usize);
            self.reader
                .read_exact_at(&mut block[..n], at)
                .map_err(|e| self.error(e))?;
            each(&block[..n])?;
            at += n as u64;
        }
        self.writer.set_len(0).map_err(|e| self.error(e))?;
        self.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_as_they_were_written() {
        let mut out = Vec::new();
        let read = ReadRecord {
            epoch: 3,
            phase: Phase::Eval,
            step: 7,
            file: 1 << 40,
            sample: 5,
            image_idx: 9,
            offset: 11,
            length: 13,
            started: 15,
            ended: u64::MAX,
        };
        Record::Read(read).encode(&mut out);
        for met in [Some(4), None] {
            let step = StepRecord {
                epoch: 1,
                phase: Phase::Train,
                step: 2,
                started: 1,
                loaded: 2,
                computed: 3,
                met,
                ended: 5,
            };
            Record::Step(step).encode(&mut out);
        }
        for kind in SPAN_KINDS {
            let span = SpanRecord {
                kind,
                epoch: 2,
                step: 3,
                started: 4,
                ended: 5,
            };
            Record::Span(span).encode(&mut out);
        }
        assert_eq!(out.len(), RECORD * (3 + SPAN_KINDS.len()));
        let back: Vec<Record> = out
            .chunks_exact(RECORD)
            .map(|r| Record::decode(r).unwrap())
            .collect();
        let Record::Read(r) = &back[0] else {
            panic!("not a read")
        };
        assert_eq!(
            (r.epoch, r.phase, r.step, r.file, r.sample, r.image_idx),
            (3, Phase::Eval, 7, 1 << 40, 5, 9)
        );
        assert_eq!(
            (r.offset, r.length, r.started, r.ended),
            (11, 13, 15, u64::MAX)
        );
        for (record, met) in back[1..3].iter().zip([Some(4), None]) {
            let Record::Step(s) = record else {
                panic!("not a step")
            };
            assert_eq!((s.epoch, s.phase, s.step), (1, Phase::Train, 2));
            assert_eq!(
                (s.started, s.loaded, s.computed, s.met, s.ended),
                (1, 2, 3, met, 5)
            );
        }
        for (record, kind) in back[3..].iter().zip(SPAN_KINDS) {
            let Record::Span(s) = record else {
                panic!("not a span")
            };
            assert_eq!(
                (s.kind, s.epoch, s.step, s.started, s.ended),
                (kind, 2, 3, 4, 5)
            );
        }
        assert!(Record::decode(&[0xff; RECORD]).is_none());
    }
}
