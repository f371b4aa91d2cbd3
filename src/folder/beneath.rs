//! Paths inside a folder the run owns, opened without following a symbolic link on the way: a
//! link planted inside the run's folder (`trace -> /elsewhere`, `.hydra -> /etc`,
//! `global_epoch1_step1 -> /dev`) would otherwise carry the run's writes into files it does not
//! own. The folder itself is the user's choice (a link there is followed, once, when it is
//! opened); everything below it is resolved by the kernel from its descriptor with `openat2`
//! (`RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH`: no link followed, no `..` out of it), one system
//! call per open as `openat` costs. Kernels before 5.6 (or sandboxes that refuse `openat2`) fall
//! back to walking the path one component at a time with `O_NOFOLLOW`.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// A folder the run owns, opened once, under which paths are opened and made.
#[derive(Debug)]
pub struct Beneath {
    root: PathBuf,
    dir: File,
}

impl Beneath {
    /// Opens the folder `root` (which must exist).
    pub fn open(root: &Path) -> io::Result<Beneath> {
        let dir = File::open(root)?;
        if !dir.metadata()?.is_dir() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "not a folder"));
        }
        Ok(Beneath {
            root: root.to_path_buf(),
            dir,
        })
    }

    /// The full path of `relative`, for messages.
    pub fn path(&self, relative: &Path) -> PathBuf {
        self.root.join(relative)
    }

    /// Makes the folder `relative` and those above it below the root, where missing; a link or a
    /// file on the way is refused.
    pub fn make_folders(&self, relative: &Path) -> io::Result<()> {
        make_folders(&self.dir, relative).map(drop)
    }

    /// Creates (or truncates) the file `relative` to write it, its folders made where missing:
    /// only a regular file reached without a link ([`super::create_file`]'s rules, for every
    /// component of the path).
    pub fn create_file(&self, relative: &Path) -> io::Result<File> {
        let (parent, name) = split(relative)?;
        let dir = make_folders(&self.dir, parent)?;
        let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NONBLOCK;
        let file = open_at(
            dir.as_ref().unwrap_or(&self.dir),
            &cstring(name)?,
            flags,
            0o644,
        )
        .map_err(super::refuse_link)?;
        super::owned_file(file)
    }

    /// Opens the existing file `relative` to read it, without following a link on the way.
    pub fn open_file(&self, relative: &Path) -> io::Result<File> {
        open_file_at(&self.dir, relative, libc::O_RDONLY | libc::O_CLOEXEC)
    }

    /// Writes the file `relative` whole: under a temporary name, then renamed over it, so that a
    /// reader sees the old file or the new one, never a part.
    pub fn write_atomic(&self, relative: &Path, contents: &[u8]) -> io::Result<()> {
        use std::io::Write;
        let (parent, name) = split(relative)?;
        let temporary = parent.join(format!(
            ".{}.{}.tmp",
            name.to_string_lossy(),
            std::process::id()
        ));
        let written = self
            .create_file(&temporary)
            .and_then(|mut file| file.write_all(contents))
            .and_then(|()| self.rename(&temporary, relative));
        if written.is_err() {
            let _ = self.remove_file(&temporary);
        }
        written
    }

    /// Renames `from` to `to`, both below the root and in existing folders reached without links.
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let (from_parent, from_name) = split(from)?;
        let (to_parent, to_name) = split(to)?;
        let from_dir = open_folder(&self.dir, from_parent)?;
        let to_dir = open_folder(&self.dir, to_parent)?;
        let (from_name, to_name) = (cstring(from_name)?, cstring(to_name)?);
        let fd = |dir: &Option<File>| dir.as_ref().unwrap_or(&self.dir).as_raw_fd();
        // SAFETY: descriptors and NUL-terminated names that outlive the call.
        let done = unsafe {
            libc::renameat(
                fd(&from_dir),
                from_name.as_ptr(),
                fd(&to_dir),
                to_name.as_ptr(),
            )
        };
        match done {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }

    /// Removes the file `relative`, if it is there (a link of that name is removed, not
    /// followed).
    pub fn remove_file(&self, relative: &Path) -> io::Result<()> {
        let (parent, name) = split(relative)?;
        let dir = open_folder(&self.dir, parent)?;
        let name = cstring(name)?;
        // SAFETY: a descriptor and a NUL-terminated name that outlive the call.
        let done = unsafe {
            libc::unlinkat(
                dir.as_ref().unwrap_or(&self.dir).as_raw_fd(),
                name.as_ptr(),
                0,
            )
        };
        match done {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    }
}

/// Creates (or truncates) `relative` below the folder `dir` (a descriptor the caller holds),
/// without following a link on the way: what the local storage's writes use.
pub fn create_file_at(dir: &File, relative: &Path, flags: libc::c_int) -> io::Result<File> {
    let file = open_at(
        dir,
        &cstring(relative.as_os_str())?,
        libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | flags,
        0o644,
    )
    .map_err(super::refuse_link)?;
    super::owned_file(file)
}

/// Opens the existing `relative` below the folder `dir` with `flags` (to read it), without
/// following a link on the way.
pub fn open_file_at(dir: &File, relative: &Path, flags: libc::c_int) -> io::Result<File> {
    open_at(dir, &cstring(relative.as_os_str())?, flags, 0).map_err(super::refuse_link)
}

/// Makes the folders of `relative` below `dir` where missing, without following a link.
pub fn make_folders_at(dir: &File, relative: &Path) -> io::Result<()> {
    make_folders(dir, relative).map(drop)
}

/// `relative` as (its folder, its name); it must name a file below the root.
fn split(relative: &Path) -> io::Result<(&Path, &std::ffi::OsStr)> {
    match (relative.parent(), relative.file_name()) {
        (Some(parent), Some(name)) => Ok((parent, name)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} names no file", relative.display()),
        )),
    }
}

fn cstring(name: &std::ffi::OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a NUL byte in a path"))
}

/// Opens the existing folder `relative` below `dir`; `None` for the root itself.
fn open_folder(dir: &File, relative: &Path) -> io::Result<Option<File>> {
    if relative.as_os_str().is_empty() {
        return Ok(None);
    }
    let flags = libc::O_RDONLY | libc::O_DIRECTORY;
    open_at(dir, &cstring(relative.as_os_str())?, flags, 0)
        .map(Some)
        .map_err(|e| folder_error(relative, e))
}

/// Makes each folder of `relative` below `dir` where missing, one component at a time; returns
/// the last one opened (`None` for the root itself).
fn make_folders(dir: &File, relative: &Path) -> io::Result<Option<File>> {
    let mut current: Option<File> = None;
    for component in relative.components() {
        let name = match component {
            Component::Normal(name) => cstring(name)?,
            Component::CurDir => continue,
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{} is not a path below the folder", relative.display()),
                ))
            }
        };
        let parent = current.as_ref().unwrap_or(dir);
        let flags = libc::O_RDONLY | libc::O_DIRECTORY;
        let opened = match open_at(parent, &name, flags, 0) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                // SAFETY: a descriptor and a NUL-terminated name that outlive the call.
                if unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o777) } != 0 {
                    let error = io::Error::last_os_error();
                    // Another process (a rank of a shared file system) made it first.
                    if error.kind() != io::ErrorKind::AlreadyExists {
                        return Err(error);
                    }
                }
                open_at(parent, &name, flags, 0)
            }
            opened => opened,
        };
        current = Some(opened.map_err(|e| folder_error(Path::new(component.as_os_str()), e))?);
    }
    Ok(current)
}

/// The error of opening a folder that is a link (ELOOP) or not a folder (ENOTDIR), said as such.
fn folder_error(relative: &Path, e: io::Error) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) => super::refuse_link(e),
        Some(libc::ENOTDIR) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is not a folder (a file or a link is there)",
                relative.display()
            ),
        ),
        _ => e,
    }
}

/// The kernel's `struct open_how` (libc's is marked non-exhaustive, so it cannot be built).
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dir, name, flags, RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH)`, or, where the kernel has
/// no `openat2`, the same walked one component at a time with `O_NOFOLLOW`.
fn open_at(dir: &File, name: &CString, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: if flags & libc::O_CREAT != 0 {
            mode as u64
        } else {
            0
        },
        resolve: libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_BENEATH,
    };
    // SAFETY: openat2 reads `how` (its size given) and the NUL-terminated name, both alive for
    // the call; a non-negative result is a new descriptor the File takes over.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            name.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if fd >= 0 {
        // SAFETY: see above.
        return Ok(unsafe { File::from_raw_fd(fd as libc::c_int) });
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::ENOSYS | libc::EPERM) => walk_at(dir, name, flags, mode),
        // `..` out of the folder, or an absolute path.
        Some(libc::EXDEV) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a path outside the folder",
        )),
        _ => Err(error),
    }
}

/// [`open_at`] without `openat2`: each folder of the path opened with `O_NOFOLLOW`, then the
/// last component with `O_NOFOLLOW`.
fn walk_at(dir: &File, name: &CString, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
    let path = Path::new(std::ffi::OsStr::from_bytes(name.as_bytes()));
    let mut current: Option<File> = None;
    let mut components = path.components().peekable();
    while let Some(component) = components.next() {
        let Component::Normal(part) = component else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a path outside the folder",
            ));
        };
        let last = components.peek().is_none();
        let part = cstring(part)?;
        let (part_flags, part_mode) = match last {
            true => (flags, mode),
            false => (libc::O_RDONLY | libc::O_DIRECTORY, 0),
        };
        let parent = current.as_ref().unwrap_or(dir);
        // SAFETY: a descriptor and a NUL-terminated name alive for the call; the mode is read
        // only with O_CREAT.
        let fd = unsafe {
            libc::openat(
                parent.as_raw_fd(),
                part.as_ptr(),
                part_flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                part_mode as libc::c_uint,
            )
        };
        if fd < 0 {
            let error = io::Error::last_os_error();
            // O_DIRECTORY meets a link before O_NOFOLLOW does: a link is said as one.
            if error.raw_os_error() == Some(libc::ENOTDIR) && is_link(parent, &part) {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            return Err(error);
        }
        // SAFETY: a new descriptor nothing else owns.
        current = Some(unsafe { File::from_raw_fd(fd) });
    }
    current.ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an empty path"))
}

/// Whether `name` in `dir` is a symbolic link.
fn is_link(dir: &File, name: &CString) -> bool {
    // SAFETY: fstatat fills the zeroed stat it is given; the name is NUL-terminated.
    unsafe {
        let mut found: libc::stat = std::mem::zeroed();
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut found,
            libc::AT_SYMLINK_NOFOLLOW,
        ) == 0
            && found.st_mode & libc::S_IFMT == libc::S_IFLNK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_written_through_a_link_below_the_folder() {
        let scratch = crate::storage::scratch_dir("beneath");
        let (root, elsewhere) = (scratch.join("root"), scratch.join("elsewhere"));
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&elsewhere).unwrap();
        let beneath = Beneath::open(&root).unwrap();

        // Folders made, files written, renamed and removed below the root.
        use std::io::Write;
        let mut file = beneath.create_file(Path::new("a/b/one.txt")).unwrap();
        file.write_all(b"one").unwrap();
        beneath
            .rename(Path::new("a/b/one.txt"), Path::new("a/two.txt"))
            .unwrap();
        assert_eq!(std::fs::read(root.join("a/two.txt")).unwrap(), b"one");
        beneath.remove_file(Path::new("a/two.txt")).unwrap();
        assert!(!root.join("a/two.txt").exists());

        // A link to a folder, at any depth, and a link as the file: refused, nothing written.
        std::os::unix::fs::symlink(&elsewhere, root.join("trace")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, root.join("a/b/deep")).unwrap();
        std::fs::write(elsewhere.join("victim"), b"keep").unwrap();
        std::os::unix::fs::symlink(elsewhere.join("victim"), root.join("a/victim")).unwrap();
        for relative in ["trace/0.csv", "a/b/deep/x", "a/victim"] {
            let refused = beneath.create_file(Path::new(relative)).unwrap_err();
            assert!(
                refused.to_string().contains("a symbolic link is there"),
                "{relative}: {refused}"
            );
        }
        let refused = beneath.make_folders(Path::new("trace/sub")).unwrap_err();
        assert!(
            refused.to_string().contains("a symbolic link is there"),
            "{refused}"
        );
        let escape = beneath
            .create_file(Path::new("../elsewhere/x"))
            .unwrap_err();
        assert_eq!(escape.kind(), io::ErrorKind::InvalidInput, "{escape}");
        assert_eq!(std::fs::read(elsewhere.join("victim")).unwrap(), b"keep");
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 1);

        // The fallback walk refuses the same links.
        let name = CString::new("a/b/deep/x").unwrap();
        let walked = walk_at(&beneath.dir, &name, libc::O_WRONLY | libc::O_CREAT, 0o644);
        assert_eq!(walked.unwrap_err().raw_os_error(), Some(libc::ELOOP));
        std::fs::remove_dir_all(scratch).unwrap();
    }
}
