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
//! A run that finds a folder held is refused at once, naming the holder (from the lock file, or
//! the kernel's `/proc/locks`: the process that holds the lock, on this host); or, given a
//! [`Wait`], it waits up to that long for the holder to let go (a signal ends the wait).
//!
//! Where the file system has no `flock` (some network file systems), the folder is used unlocked,
//! with a warning: the run must not fail for want of a safeguard.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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

/// How long a run waits for a folder another run holds: `None` refuses at once (the default);
/// `Some(d)` waits up to `d` (`run --wait SECONDS`).
pub type Wait = Option<Duration>;

/// How often a waiting run tries the lock again: a folder let go is taken within this.
const RETRY: Duration = Duration::from_millis(100);

/// A wait for a folder another run holds, up to its [`Wait`]: says once whom it waits for.
pub struct Waiting {
    wait: Wait,
    deadline: Option<Instant>,
    told: bool,
}

impl Waiting {
    pub fn new(wait: Wait) -> Waiting {
        Waiting {
            wait,
            deadline: wait.map(|w| Instant::now() + w),
            told: false,
        }
    }

    /// Whether to try `folder` again: before the deadline, once this has said (the first time)
    /// whom it waits for and napped `retry`; a signal ends the wait with an error.
    pub fn again(
        &mut self,
        folder: &dyn std::fmt::Display,
        holder: &dyn Fn() -> String,
        retry: Duration,
    ) -> Result<bool> {
        match self.deadline {
            Some(deadline) if Instant::now() < deadline => {
                if !self.told {
                    self.told = true;
                    crate::console::tell(format_args!(
                        "waiting up to {:.0} s for {folder}, held by {}",
                        self.wait.unwrap_or_default().as_secs_f64(),
                        holder()
                    ));
                }
                crate::interrupt::sleep_until(Instant::now() + retry);
                crate::interrupt::check()?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
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
    /// The processes on this host that hold the lock, as the kernel lists them.
    pub holders: Vec<Holder>,
}

/// A process that holds a lock, as `/proc/locks` and `/proc/PID/cmdline` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    pub pid: u32,
    /// Its command line, shortened (`dlio-rs run workload=unet3d …`); empty if unreadable.
    pub command: String,
}

impl FolderLock {
    /// Takes `folder` (which must exist) with `access` through its lock file, without waiting;
    /// `doing` says what this process does there, for the message another run gets.
    pub fn with_lock_file(
        folder: &Path,
        access: Access,
        doing: &str,
        wait: Wait,
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
        let mut taken = FolderLock::lock(folder, path, file, access, wait)?;
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
        wait: Wait,
    ) -> Result<std::result::Result<FolderLock, Busy>> {
        let file =
            File::open(folder).map_err(|e| Error::io("cannot open the folder", folder, e))?;
        FolderLock::lock(folder, folder.to_path_buf(), file, access, wait)
    }

    fn lock(
        folder: &Path,
        path: PathBuf,
        file: File,
        access: Access,
        wait: Wait,
    ) -> Result<std::result::Result<FolderLock, Busy>> {
        let operation = match access {
            Access::Exclusive => libc::LOCK_EX,
            Access::Shared => libc::LOCK_SH,
        };
        let mut waiting = Waiting::new(wait);
        // SAFETY: a plain system call on a descriptor this function owns.
        while unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) } != 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::WouldBlock {
                // Who holds it is looked up (the lock file, the kernel's lock table) only when it
                // is said: once when the wait starts, once on a refusal; not at every retry.
                let holder = || Busy::of(&file).describe("another run");
                match waiting.again(&folder.display(), &holder, RETRY)? {
                    true => continue,
                    false => return Ok(Err(Busy::of(&file))),
                }
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
    /// Who holds the lock `file` could not take: what the lock file says, and the processes the
    /// kernel names.
    fn of(file: &File) -> Busy {
        use std::os::unix::fs::FileExt;
        // A folder reads as an error: it names no holder. A lock file holds a line, read from
        // its start however often it is read.
        let mut line = [0u8; 4096];
        let len = file.read_at(&mut line, 0).unwrap_or(0);
        let holder = String::from_utf8_lossy(&line[..len]).trim().to_string();
        let holder = Some(holder).filter(|h| !h.is_empty());
        let holders = file
            .metadata()
            .map(|m| lock_holders(&m))
            .unwrap_or_default();
        Busy { holder, holders }
    }

    /// `the run with pid 123 (generating)`, the processes the kernel names (`pid 123: dlio-rs run
    /// …`), or `otherwise` when nothing names the holder (another host's process, say).
    pub fn describe(&self, otherwise: &str) -> String {
        if let Some((pid, doing)) = self.holder.as_deref().and_then(|h| h.split_once(' ')) {
            return format!("the run with pid {pid} ({doing})");
        }
        if let Some(pid) = self.holder.as_deref() {
            return format!("the run with pid {pid}");
        }
        let others: Vec<String> = self
            .holders
            .iter()
            .filter(|h| h.pid != std::process::id())
            .map(|h| match h.command.is_empty() {
                true => format!("pid {}", h.pid),
                false => format!("pid {} ({})", h.pid, h.command),
            })
            .collect();
        match others.len() {
            0 => otherwise.to_string(),
            1 => format!("{otherwise}: {}", others[0]),
            _ => format!("{otherwise}: {}", others.join(", ")),
        }
    }
}

/// The processes that hold a `flock` on the file `metadata` describes, as the kernel lists them
/// in `/proc/locks` (`1: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF`, the device in hex): this
/// host's only; none where the file cannot be read.
fn lock_holders(metadata: &std::fs::Metadata) -> Vec<Holder> {
    use std::os::unix::fs::MetadataExt;
    let device = format!(
        "{:02x}:{:02x}:{}",
        libc::major(metadata.dev()),
        libc::minor(metadata.dev()),
        metadata.ino()
    );
    let Ok(Some(locks)) = super::read_text_file(Path::new("/proc/locks"), 16 << 20) else {
        return Vec::new();
    };
    let mut holders: Vec<Holder> = Vec::new();
    for line in locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // A blocked waiter's line has `->` before its fields: it holds nothing.
        if fields.get(1) == Some(&"->") {
            continue;
        }
        let (Some(&"FLOCK"), Some(pid), Some(&file)) =
            (fields.get(1), fields.get(4), fields.get(5))
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if file == device && !holders.iter().any(|h| h.pid == pid) {
            holders.push(Holder {
                pid,
                command: command_line(pid),
            });
        }
    }
    holders
}

/// A process's command line, program by file name, at most 80 characters.
fn command_line(pid: u32) -> String {
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return String::new();
    };
    let mut words = raw
        .split(|&b| b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned());
    let program = words.next().unwrap_or_default();
    let program = program.rsplit('/').next().unwrap_or_default().to_string();
    let line = std::iter::once(program)
        .chain(words)
        .collect::<Vec<_>>()
        .join(" ");
    match line.char_indices().nth(80) {
        Some((cut, _)) => format!("{} …", &line[..cut]),
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exclusive_excludes_everyone_and_shared_excludes_only_exclusive() {
        let dir = crate::storage::scratch_dir("folder-lock");
        std::fs::create_dir_all(&dir).unwrap();
        let shared = |access| FolderLock::on_folder(&dir, access, None).unwrap();
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
        let held = FolderLock::with_lock_file(&dir, Access::Exclusive, "running", None)
            .unwrap()
            .unwrap();
        let refused = FolderLock::with_lock_file(&dir, Access::Exclusive, "running", None)
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

    #[test]
    fn another_process_s_lock_names_it_and_a_wait_outlasts_it() {
        use std::io::{BufRead, BufReader};
        use std::process::{Command, Stdio};
        let dir = crate::storage::scratch_dir("folder-lock-holder");
        std::fs::create_dir_all(&dir).unwrap();
        // util-linux's flock holds the folder until its stdin closes; it says so once it holds.
        let mut holder = Command::new("flock")
            .arg("--shared")
            .arg(&dir)
            .args(["-c", "echo held; read _"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line, "held\n");
        let refused = FolderLock::on_folder(&dir, Access::Exclusive, None)
            .unwrap()
            .unwrap_err();
        let described = refused.describe("a run reading it");
        assert!(
            described.starts_with(&format!("a run reading it: pid {} (flock", holder.id())),
            "{described}"
        );
        // Let go while a later run waits: it gets the folder.
        drop(holder.stdin.take());
        let taken = FolderLock::on_folder(&dir, Access::Exclusive, Some(Duration::from_secs(30)));
        assert!(taken.unwrap().is_ok());
        holder.wait().unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
