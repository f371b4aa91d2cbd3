//! The two kinds of failure a user sees, and their exit codes: bad input (2) and a failed run (1).

use std::fmt;
use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Bad command line or configuration: exit code 2.
    Usage(String),
    /// The run could not complete (storage, data files, another rank failed): exit code 1.
    Run(String),
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
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            Error::Run(_) => 1,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) | Error::Run(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}
