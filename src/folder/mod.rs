//! Folders a run owns: made where they are missing, taken with a lock that dies with the
//! process ([`lock`]), and for the output folder cleared of an earlier run's results
//! ([`OutputFolder`]), so that what a folder holds after a run is this run's. Every writer of
//! the run's files (reports, traces, generation, checkpoints) stands above this module.

mod beneath;
pub mod lock;
mod output;

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
pub use beneath::{create_file_at, make_folders_at, open_file_at, Beneath};
pub use lock::{Access, Busy, FolderLock, Wait};
pub use output::{remove_charts, OutputFolder, CHARTS_DIR};

/// Makes the folder `path` (`what` names it in errors) and those above it. A file where the folder
/// should be is a usage error: the path given is wrong.
pub fn make_folder(path: &Path, what: &str) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| match std::fs::metadata(path) {
        Ok(found) if !found.is_dir() => Error::usage(format!(
            "{what} {} is not a folder; give a folder's path",
            path.display()
        )),
        _ => Error::io("cannot create folder", path, e),
    })
}

/// Creates (or truncates) the file at `path` to write it, as only a file the run owns may be
/// written: never through a symbolic link (`O_NOFOLLOW`: a link planted where an output goes would
/// make the run write into another run's files), never into a FIFO, device or socket (refused
/// once opened, without waiting for a FIFO's reader: `O_NONBLOCK`).
pub fn create_file(path: &Path) -> io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(refuse_link)?;
    owned_file(file)
}

/// The error of opening to write a path whose last component is a symbolic link (ELOOP under
/// `O_NOFOLLOW`), or a FIFO nobody reads (ENXIO under `O_NONBLOCK`), said as such.
pub fn refuse_link(e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) => io::Error::new(
            io::ErrorKind::InvalidInput,
            "a symbolic link is there: dlio-rs writes (and loads checkpoints from) only files the \
             run owns, never through a link (remove the link, or choose another folder)",
        ),
        Some(libc::ENXIO) => not_owned(),
        _ => e,
    }
}

/// `file` if it is a regular file, else an error that says what it is not.
pub fn owned_file(file: std::fs::File) -> io::Result<std::fs::File> {
    match file.metadata()?.is_file() {
        true => Ok(file),
        false => Err(not_owned()),
    }
}

fn not_owned() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a regular file (a FIFO, a device or a socket is there): dlio-rs writes only files \
         the run owns (remove it, or choose another folder)",
    )
}

/// The most a rank's JSON output file (`N_output.json`) may hold when read back whole: it lists
/// every step's timings, some 60 bytes a step, so this is millions of steps; read as a JSON tree
/// it takes some 3 times as much memory.
pub const MAX_OUTPUT_JSON: u64 = 256 << 20;

/// The most a run's summary (`summary.json`, `report.json`) may hold when read back: some KiB per
/// epoch, so this is tens of thousands of epochs.
pub const MAX_SUMMARY_JSON: u64 = 128 << 20;

/// Reads the text file at `path` whole, as the files a run wrote are read back (JSON outputs, a
/// sweep, a marker) and small settings files: only a regular file (a FIFO would be read forever,
/// and is opened without waiting for a writer), no larger than `limit` bytes (a link to
/// /dev/zero, or a forged file, would exhaust memory). `None` when there is no file.
pub fn read_text_file(path: &Path, limit: u64) -> io::Result<Option<String>> {
    use std::io::Read;
    let Some(file) = open_regular_file(path)? else {
        return Ok(None);
    };
    let mut text = String::new();
    file.take(limit + 1).read_to_string(&mut text)?;
    if text.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the {limit} bytes such a file can be"),
        ));
    }
    Ok(Some(text))
}

/// Opens `path` to read it, if it is there: a regular file only (never waiting on a FIFO or a
/// device planted there); `None` where nothing is.
pub fn open_regular_file(path: &Path) -> io::Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) if file.metadata()?.is_file() => Ok(Some(file)),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, a device or a socket is there)",
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads back a file a run wrote (`report`, `compare`, `audit`, a sweep resumed), as
/// [`read_text_file`] does. What is not such a file — not a regular file, larger than `limit`,
/// not UTF-8 — is bad input: a usage error (exit code 2) naming it; a file that cannot be read
/// (permissions, EIO) is an I/O error (exit code 1). `None` when there is no file.
pub fn read_output_file(path: &Path, limit: u64) -> Result<Option<String>> {
    read_text_file(path, limit).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidInput | io::ErrorKind::InvalidData => {
            bad_output_file(path, &e.to_string())
        }
        _ => Error::io("cannot read", path, e),
    })
}

/// A file a run wrote, read back, that is not what dlio-rs writes there: a usage error naming the
/// file and what is wrong (`problem`: the field, the line).
pub fn bad_output_file(path: &Path, problem: &str) -> Error {
    Error::usage(format!(
        "{}: {problem}; this is not the file a dlio-rs run writes there (damaged, or written by \
         something else)",
        path.display()
    ))
}

/// A folder named `base`, or `base-1`, `base-2`, … where that exists: made here, so that two runs
/// started in the same second (Hydra's default name has one-second resolution) never share one.
pub fn new_unique_folder(base: &Path) -> Result<PathBuf> {
    if let Some(parent) = base.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io("cannot create output folder", parent, e))?;
    }
    let name = base
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    const TRIES: u32 = 10_000;
    for n in 0..TRIES {
        let candidate = match n {
            0 => base.to_path_buf(),
            n => base.with_file_name(format!("{name}-{n}")),
        };
        match std::fs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::io("cannot create output folder", &candidate, e)),
        }
    }
    Err(Error::run(format!(
        "cannot create output folder {}: it and {TRIES} numbered ones beside it exist",
        base.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_started_in_the_same_second_get_folders_of_their_own() {
        let dir = crate::storage::scratch_dir("unique-folder");
        let base = dir.join("hydra_log/unet3d/2026-11-25-05-00-00");
        let made: Vec<PathBuf> = (0..3).map(|_| new_unique_folder(&base).unwrap()).collect();
        let names: Vec<String> = made
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            [
                "2026-11-25-05-00-00",
                "2026-11-25-05-00-00-1",
                "2026-11-25-05-00-00-2"
            ]
        );
        assert!(made.iter().all(|p| p.is_dir()));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
