//! What an audit found wrong: every violation is counted, the first few are kept as messages.

use crate::plan::Phase;

use super::trace::trace_label;

/// How many violation messages an audit keeps.
pub const SHOWN: usize = 10;

/// A sample read a second time whose first read is looked up after the audit's pass over the
/// traces; remembering where every sample was first read would cost memory per sample.
#[derive(Debug, Clone)]
pub struct RepeatToLocate {
    pub message: usize,
    pub epoch: u64,
    pub phase: Phase,
    pub file: String,
    pub sample: u64,
    /// Where the second read is: rank and line.
    pub rank: u64,
    pub line: u64,
}

#[derive(Debug, Default)]
pub struct Violations {
    count: u64,
    messages: Vec<String>,
    repeats: Vec<RepeatToLocate>,
}

impl Violations {
    /// Counts a violation; its message is only built while messages are still kept.
    pub fn add(&mut self, message: impl FnOnce() -> String) -> Option<usize> {
        self.count += 1;
        self.wants_messages().then(|| {
            self.messages.push(message());
            self.messages.len() - 1
        })
    }

    /// Counts `n` violations beyond those added one by one.
    pub fn add_unlisted(&mut self, n: u64) {
        self.count += n;
    }

    /// Counts a repeated read, and remembers to say where the sample was first read.
    pub fn add_repeat(&mut self, message: impl FnOnce() -> String, repeat: RepeatToLocate) {
        if let Some(index) = self.add(message) {
            self.repeats.push(RepeatToLocate {
                message: index,
                ..repeat
            });
        }
    }

    pub fn wants_messages(&self) -> bool {
        self.messages.len() < SHOWN
    }

    pub fn repeats_to_locate(&self) -> &[RepeatToLocate] {
        &self.repeats
    }

    /// Completes the message of a repeated read with where the sample was first read.
    pub fn first_read_at(&mut self, message: usize, rank: u64, line: u64) {
        if let Some(text) = self.messages.get_mut(message) {
            text.push_str(&format!(" (first at {}:{line})", trace_label(rank)));
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn into_messages(self) -> Vec<String> {
        self.messages
    }
}
