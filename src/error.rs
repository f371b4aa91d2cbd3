//! The two kinds of failure a user sees, and their exit codes: bad input (2) and a failed run (1);
//! and a failure already reported (by another process of the run), which keeps its exit code.

use std::fmt;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Bad command line or configuration: exit code 2.
    Usage(String),
    /// The run could not complete (storage, data files, another rank failed): exit code 1.
    Run(String),
    /// A signal (SIGINT, SIGTERM) asked the run to stop: exit code 128 + the signal.
    Interrupted { signal: i32 },
    /// A failure already reported to the user, by this process or another process of the run:
    /// this process stops with its exit code and says nothing more.
    Reported { exit_code: i32 },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn usage(message: impl Into<String>) -> Error {
        Error::Usage(message.into())
    }

    pub fn run(message: impl Into<String>) -> Error {
        Error::Run(message.into())
    }

    /// A failed I/O operation on a file, naming both.
    pub fn io(operation: &str, path: &Path, err: std::io::Error) -> Error {
        Error::Run(format!("{operation} {}: {err}", path.display()))
    }

    /// The same error with context in front of its message.
    pub fn prefixed(&self, context: &str) -> Error {
        match self {
            Error::Usage(m) => Error::Usage(format!("{context}{m}")),
            Error::Run(m) => Error::Run(format!("{context}{m}")),
            Error::Interrupted { .. } | Error::Reported { .. } => self.clone(),
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            Error::Run(_) => 1,
            Error::Interrupted { signal } => crate::interrupt::exit_code(*signal),
            Error::Reported { exit_code } => *exit_code,
        }
    }

    /// Tells the user, on standard error (nothing for an error already reported).
    pub fn print(&self) {
        if !matches!(self, Error::Reported { .. }) {
            eprintln!("error: {self}");
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) | Error::Run(m) => f.write_str(m),
            Error::Interrupted { signal } => {
                write!(f, "interrupted by {}", crate::interrupt::name(*signal))
            }
            Error::Reported { .. } => f.write_str("the run failed (reported above)"),
        }
    }
}

impl std::error::Error for Error {}
