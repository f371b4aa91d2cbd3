//! Folders owned by one run at a time: an `flock`, which dies with the process however it ends
//! (even `kill -9`), so a stale lock can never block a later run.
//!
//! The output folder is taken exclusively for a run ([`super::OutputFolder`]), through a lock
//! file in it that names the holder for the message a refused run gets; the file stays when the
//! lock is dropped, as removing it could let two runs lock two different files of the same name.
//! The data folder is locked itself, so that nothing is added to a dataset DLIO also reads:
//! exclusively while a run generates into it, shared while runs read it, so two generations never
//! interleave their files and a generation never rewrites files a training run is reading (the
//! generation's marker names the holder).
//!
//! Where the file system has no `flock` (some network file systems), the folder is used unlocked,
//! with a warning: the run must not fail for want of a safeguard.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The lock file's name, in every folder dlio-rs locks.
pub const LOCK_FILE: &str = ".dlio-rs.lock";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// This run alone (a run's output folder; a generation's data folder).
    Exclusive,
    /// With other readers, and no exclusive holder (a training run's data folder).
    Shared,
}

/// A folder held by this process; the lock goes with it (or with the process).
#[derive(Debug)]
pub struct FolderLock {
    path: PathBuf,
    /// Held open for the lock's sake; `None` where the file system cannot lock.
    file: Option<File>,
    access: Access,
}

/// Why a folder could not be taken: someone else holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Busy {
    /// What the holder wrote (`PID what`), when it holds the folder exclusively.
    pub holder: Option<String>,
}

impl FolderLock {
    /// Takes `folder` (which must exist) with `access` through its lock file, without waiting;
    /// `doing` says what this process does there, for the message another run gets.
    pub fn with_lock_file(
        folder: &Path,
        access: Access,
        doing: &str,
    ) -> Result<std::result::Result<FolderLock, Busy>> {
        let path = folder.join(LOCK_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(super::refuse_link)
            .and_then(super::owned_file)
            .map_err(|e| Error::io("cannot create the lock file", &path, e))?;
        let mut taken = FolderLock::lock(folder, path, file, access)?;
        if let Ok(lock) = &mut taken {
            lock.write_holder(doing)?;
        }
        Ok(taken)
    }

    /// Takes `folder` (which must exist) with `access` by locking the folder itself, without
    /// waiting: nothing is added to it.
    pub fn on_folder(
        folder: &Path,
        access: Access,
    ) -> Result<std::result::Result<FolderLock, Busy>> {
        let file =
            File::open(folder).map_err(|e| Error::io("cannot open the folder", folder, e))?;
        FolderLock::lock(folder, folder.to_path_buf(), file, access)
    }

    fn lock(
        folder: &Path,
        path: PathBuf,
        mut file: File,
        access: Access,
    ) -> Result<std::result::Result<FolderLock, Busy>> {
        let operation = match access {
            Access::Exclusive => libc::LOCK_EX,
            Access::Shared => libc::LOCK_SH,
        };
        // SAFETY: a plain system call on a descriptor this function owns.
        if unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } != 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::WouldBlock {
                let mut holder = String::new();
                // A folder reads as an error: it names no holder.
                let _ = file.read_to_string(&mut holder);
                let holder = Some(holder.trim().to_string()).filter(|h| !h.is_empty());
                return Ok(Err(Busy { holder }));
            }
            if cannot_lock_here(&error) {
                crate::console::tell(format_args!(
                    "warning: {} cannot be locked on its file system ({error}); nothing stops \
                     another run from using it at the same time",
                    folder.display()
                ));
                return Ok(Ok(FolderLock {
                    path,
                    file: None,
                    access,
                }));
            }
            return Err(Error::io("cannot lock", folder, error));
        }
        Ok(Ok(FolderLock {
            path,
            file: Some(file),
            access,
        }))
    }

    /// Names this process in the lock file, when it holds it alone.
    fn write_holder(&mut self, doing: &str) -> Result<()> {
        if let (Some(file), Access::Exclusive) = (&mut self.file, self.access) {
            let holder = format!("{} {doing}", std::process::id());
            file.set_len(0)
                .and_then(|()| file.rewind())
                .and_then(|()| file.write_all(holder.as_bytes()))
                .map_err(|e| Error::io("cannot write", &self.path, e))?;
        }
        Ok(())
    }

    /// Lets other readers in (an exclusive lock becomes shared): a generation that is done and
    /// trains on what it wrote.
    pub fn share(&mut self) -> Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        if self.access == Access::Shared {
            return Ok(());
        }
        if file.metadata().is_ok_and(|m| m.is_file()) {
            let _ = file.set_len(0);
        }
        // SAFETY: a plain system call on a descriptor this lock owns.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } != 0 {
            return Err(Error::io(
                "cannot share the lock",
                &self.path,
                io::Error::last_os_error(),
            ));
        }
        self.access = Access::Shared;
        Ok(())
    }
}

impl Drop for FolderLock {
    fn drop(&mut self) {
        // The pid names a process that holds the folder; this one is about to let go (closing
        // the file drops the lock).
        if let (Some(file), Access::Exclusive) = (&self.file, self.access) {
            if file.metadata().is_ok_and(|m| m.is_file()) {
                let _ = file.set_len(0);
            }
        }
    }
}

/// Errors of a file system that offers no `flock` (or, as NFS's emulation, none on a folder),
/// as opposed to a failure to reach the file.
fn cannot_lock_here(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS | libc::EBADF)
    )
}

impl Busy {
    /// `the run with pid 123 (generating)`, or what can be said without a pid.
    pub fn describe(&self, readers: &str) -> String {
        match self.holder.as_deref().and_then(|h| h.split_once(' ')) {
            Some((pid, doing)) => format!("the run with pid {pid} ({doing})"),
            None => match self.holder.as_deref() {
                Some(pid) => format!("the run with pid {pid}"),
                None => readers.to_string(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_excludes_everyone_and_shared_excludes_only_exclusive() {
        let dir = crate::storage::scratch_dir("folder-lock");
        std::fs::create_dir_all(&dir).unwrap();
        let shared = |access| FolderLock::on_folder(&dir, access).unwrap();
        let reader = shared(Access::Shared).unwrap();
        let second_reader = shared(Access::Shared).unwrap();
        let refused = shared(Access::Exclusive).unwrap_err();
        // A folder names no holder: the message names the kind of run that holds it.
        assert_eq!(refused.describe("a training run"), "a training run");
        drop((reader, second_reader));

        let mut writer = shared(Access::Exclusive).unwrap();
        assert!(shared(Access::Shared).is_err());
        assert!(shared(Access::Exclusive).is_err());
        // Done generating, the writer trains on its data: readers may join it, writers not.
        writer.share().unwrap();
        let reader = shared(Access::Shared).unwrap();
        assert!(shared(Access::Exclusive).is_err());
        drop((writer, reader));
        assert!(shared(Access::Exclusive).is_ok());
        assert_eq!(
            std::fs::read_dir(&dir).unwrap().count(),
            0,
            "nothing was added to the folder"
        );

        // Through a lock file, the holder is named, and only while it holds.
        let held = FolderLock::with_lock_file(&dir, Access::Exclusive, "running")
            .unwrap()
            .unwrap();
        let refused = FolderLock::with_lock_file(&dir, Access::Exclusive, "running")
            .unwrap()
            .unwrap_err();
        assert_eq!(
            refused.describe("another process"),
            format!("the run with pid {} (running)", std::process::id())
        );
        drop(held);
        assert_eq!(std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap(), "");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
