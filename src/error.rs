//! What can go wrong, as kinds that keep their cause, and the one place that turns each into a
//! message and an exit code: bad input (2); a run that failed (1), because storage refused an
//! operation (with the system's error kept whole, whose kind says whether trying again could
//! help), because a data file was read and found corrupt, or for another reason; a signal (128 +
//! the signal); and a failure already reported by another process of the run, which keeps its
//! exit code.

use std::fmt;
use std::io;
use std::path::Path;
use std::sync::Arc;

#[derive(Debug, Clone)]
pub enum Error {
    /// Bad command line or configuration: exit code 2.
    Usage(String),
    /// A file, folder or object could not be used: what was being done (`cannot read data
    /// file`), to which one (its path, or its key in the storage), and the system's error.
    /// Exit code 1.
    Io {
        action: &'static str,
        object: String,
        source: Arc<io::Error>,
    },
    /// A file was read whole and is not what its format says: what it is (`data file`, `index
    /// file`), which one, and what is wrong. Exit code 1.
    Corrupt {
        what: &'static str,
        object: String,
        problem: String,
    },
    /// The run could not complete for another reason (a rank failed, resources ran out): exit
    /// code 1.
    Run(String),
    /// An error met by one rank (named as messages name it): the error's exit code.
    InRank { rank: String, error: Box<Error> },
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

    /// A failed operation on a local file or folder, naming both.
    pub fn io(action: &'static str, path: &Path, source: io::Error) -> Error {
        Error::on_object(action, path.display().to_string(), source)
    }

    /// A failed operation on a file or object as the storage names it
    /// ([`crate::storage::Storage::describe`]).
    pub fn on_object(action: &'static str, object: impl Into<String>, source: io::Error) -> Error {
        Error::Io {
            action,
            object: object.into(),
            source: Arc::new(source),
        }
    }

    /// A file that was read and is not what its format says.
    pub fn corrupt(
        what: &'static str,
        object: impl Into<String>,
        problem: impl fmt::Display,
    ) -> Error {
        Error::Corrupt {
            what,
            object: object.into(),
            problem: problem.to_string(),
        }
    }

    /// The same error, as met by the rank `rank` (`rank 3`, or `rank 3 on host`).
    pub fn in_rank(self, rank: String) -> Error {
        match self {
            Error::Interrupted { .. } | Error::Reported { .. } => self,
            error => Error::InRank {
                rank,
                error: Box::new(error),
            },
        }
    }

    /// The system's error behind a failed operation, if that is what this is (or what it wraps).
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::InRank { error, .. } => error.io_error(),
            _ => None,
        }
    }

    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) => 2,
            Error::Io { .. } | Error::Corrupt { .. } | Error::Run(_) => 1,
            Error::InRank { error, .. } => error.exit_code(),
            Error::Interrupted { signal } => crate::interrupt::exit_code(*signal),
            Error::Reported { exit_code } => *exit_code,
        }
    }
}

impl From<crate::interrupt::Interrupted> for Error {
    fn from(interrupted: crate::interrupt::Interrupted) -> Error {
        Error::Interrupted {
            signal: interrupted.signal,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Usage(m) | Error::Run(m) => f.write_str(m),
            Error::Io {
                action,
                object,
                source,
            } => write!(f, "{action} {object}: {source}"),
            Error::Corrupt {
                what,
                object,
                problem,
            } => write!(f, "corrupt {what} {object}: {problem}"),
            Error::InRank { rank, error } => write!(f, "{rank}: {error}"),
            Error::Interrupted { signal } => {
                write!(f, "interrupted by {}", crate::interrupt::name(*signal))
            }
            Error::Reported { .. } => f.write_str("the run failed (reported above)"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source.as_ref()),
            Error::InRank { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

/// Two errors are the same when they are of the same kind and say the same (an `io::Error`
/// cannot be compared otherwise).
impl PartialEq for Error {
    fn eq(&self, other: &Error) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
            && self.exit_code() == other.exit_code()
            && self.to_string() == other.to_string()
            && self.io_error().map(io::Error::kind) == other.io_error().map(io::Error::kind)
    }
}

impl Eq for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_has_its_exit_code_and_keeps_its_cause() {
        let denied = Error::io(
            "cannot read data file",
            Path::new("/data/train/a.npz"),
            io::Error::from(io::ErrorKind::PermissionDenied),
        );
        assert_eq!(denied.exit_code(), 1);
        assert!(denied
            .to_string()
            .starts_with("cannot read data file /data/train/a.npz: "));
        let in_rank = denied.clone().in_rank("rank 3".into());
        assert_eq!(
            in_rank.io_error().map(io::Error::kind),
            Some(io::ErrorKind::PermissionDenied),
            "the system's error survives the wrapping"
        );
        assert_eq!(in_rank.to_string(), format!("rank 3: {denied}"));
        assert!(std::error::Error::source(&in_rank).is_some());

        let corrupt = Error::corrupt(
            "index file",
            "train/a.off.idx",
            "3 bytes, not a whole entry",
        );
        assert_eq!(corrupt.exit_code(), 1);
        assert_eq!(
            corrupt.to_string(),
            "corrupt index file train/a.off.idx: 3 bytes, not a whole entry"
        );
        assert_eq!(corrupt.io_error().map(io::Error::kind), None);
        assert_eq!(Error::usage("bad").in_rank("rank 0".into()).exit_code(), 2);
        assert_eq!(
            Error::Interrupted { signal: 2 }.in_rank("rank 0".into()),
            Error::Interrupted { signal: 2 }
        );
    }
}
