//! Opening the file at a key, to read it or to create it. Keys are opened relative to the root's
//! descriptor (`openat`), so the kernel walks only the key's own components and no path is
//! allocated per file; a key too long for that, or a root not made yet, is opened by its full
//! path instead.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::LocalFs;

/// Keys longer than this are opened by full path instead.
const MAX_RELATIVE_KEY: usize = 1024;

impl LocalFs {
    /// Opens `key` to read it. Never waits: a FIFO where a data file should be would block an
    /// open until some writer came (O_NONBLOCK, which reads of regular files ignore); the
    /// file's geometry ([`LocalFs::geometry_of`]) then refuses it.
    pub(super) fn open_for_reading(&self, key: &str, direct: bool) -> io::Result<File> {
        let flags = libc::O_NONBLOCK | if direct { libc::O_DIRECT } else { 0 };
        if self.owned_reads {
            if let Some(dir) = self.root_dir() {
                return crate::folder::open_file_at(dir, Path::new(key), libc::O_RDONLY | flags);
            }
        }
        self.open_relative(key, libc::O_RDONLY | flags)
            .unwrap_or_else(|| {
                OpenOptions::new()
                    .read(true)
                    .custom_flags(flags)
                    .open(self.path(key))
            })
    }

    /// Opens `key` relative to the root's descriptor (no path is built), or None when that cannot
    /// be done (no root yet, a key too long) and the caller should open the full path.
    fn open_relative(&self, key: &str, flags: libc::c_int) -> Option<io::Result<File>> {
        if key.len() >= MAX_RELATIVE_KEY || key.as_bytes().contains(&0) {
            return None;
        }
        let dir = self.root_dir()?;
        let mut relative = [0u8; MAX_RELATIVE_KEY];
        relative[..key.len()].copy_from_slice(key.as_bytes());
        // SAFETY: `relative` is NUL-terminated (zeroed past the key) and outlives the call; the
        // mode argument is read only with O_CREAT.
        let fd = unsafe {
            libc::openat(
                dir.as_raw_fd(),
                relative.as_ptr().cast(),
                flags | libc::O_CLOEXEC,
                0o644 as libc::c_uint,
            )
        };
        if fd < 0 {
            return Some(Err(io::Error::last_os_error()));
        }
        // SAFETY: a non-negative result of openat is a new descriptor that nothing else owns;
        // the File takes it over.
        Some(Ok(unsafe { File::from_raw_fd(fd) }))
    }

    /// The root, opened once it exists (generation may create it after the first call).
    fn root_dir(&self) -> Option<&File> {
        if let Some(dir) = self.root_dir.get() {
            return Some(dir);
        }
        let dir = File::open(&self.root).ok()?;
        Some(self.root_dir.get_or_init(|| dir))
    }

    /// Creates (or truncates) `key`; NotFound when its folder is missing. Only a file the run
    /// owns is written ([`crate::folder::create_file_at`]): reached from the root without a
    /// symbolic link anywhere on the way (a link planted as `global_epoch1_step1/` or as the
    /// file), never a FIFO, device or socket (a checkpoint "saved" into /dev/null would be rated
    /// as the storage).
    pub(super) fn create_in_place(&self, key: &str) -> io::Result<File> {
        match self.root_dir() {
            Some(dir) => crate::folder::create_file_at(dir, Path::new(key), libc::O_NONBLOCK),
            None => crate::folder::create_file(&self.path(key)),
        }
    }

    /// Makes the folder `key` and those above it, below the root (made first where missing),
    /// without following a link below the root.
    pub(super) fn make_folders(&self, key: &str) -> io::Result<()> {
        if self.root_dir().is_none() {
            std::fs::create_dir_all(&self.root)?;
        }
        match self.root_dir() {
            Some(dir) => crate::folder::make_folders_at(dir, Path::new(key)),
            None => std::fs::create_dir_all(self.path(key)),
        }
    }
}

/// The size of `file`, which must be a regular file (not a FIFO, device or socket).
pub(in crate::storage) fn regular_file_len(file: &File) -> io::Result<u64> {
    let found = file.metadata()?;
    if !found.is_file() {
        return Err(not_a_file());
    }
    Ok(found.len())
}

/// What reading a FIFO, device or socket where a data file should be gives.
pub(super) fn not_a_file() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a regular file (a FIFO, a device or a socket)",
    )
}
