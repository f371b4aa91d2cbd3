//! Which file system a path lives on, and so whether the kernel's per-thread I/O counters
//! (`read_bytes` in /proc/thread-self/io) see its reads: they count the bytes a thread submits to
//! a block device, which network and user-space file systems never do and memory ones need not.

use std::ffi::CString;
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::Accounting;

/// Where a file system's data comes from, as far as the kernel's counters are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backing {
    /// A block device, read in the reading thread's context.
    BlockDevice,
    /// Memory: there is no device to read.
    Memory,
    /// The network or a user-space daemon: no block I/O in the reading thread.
    Elsewhere,
}

/// `statfs` magic numbers (linux/magic.h and the file systems' own sources) with a name for
/// messages.
const KNOWN: &[(u32, &str, Backing)] = &[
    (0xef53, "ext2/ext3/ext4", Backing::BlockDevice),
    (0x5846_5342, "xfs", Backing::BlockDevice),
    (0x9123_683e, "btrfs", Backing::BlockDevice),
    (0xf2f5_2010, "f2fs", Backing::BlockDevice),
    (0x4d44, "msdos/vfat", Backing::BlockDevice),
    (0x2011_bab0, "exfat", Backing::BlockDevice),
    (0x3153_464a, "jfs", Backing::BlockDevice),
    (0xca45_1a4e, "bcachefs", Backing::BlockDevice),
    // Containers' root: its layers are directories of a block-device file system below.
    (0x794c_7630, "overlayfs", Backing::BlockDevice),
    (0x0102_1994, "tmpfs", Backing::Memory),
    (0x8584_58f6, "ramfs", Backing::Memory),
    (0x6969, "nfs", Backing::Elsewhere),
    (0x6573_5546, "fuse", Backing::Elsewhere),
    (0x0bd0_0bd0, "lustre", Backing::Elsewhere),
    (0x0102_1997, "9p", Backing::Elsewhere),
    (0xff53_4d42, "cifs", Backing::Elsewhere),
    (0xfe53_4d42, "smb2", Backing::Elsewhere),
    (0x00c3_6400, "ceph", Backing::Elsewhere),
    (0x4750_4653, "gpfs", Backing::Elsewhere),
    (0x1983_0326, "beegfs", Backing::Elsewhere),
    (0x2003_0528, "orangefs", Backing::Elsewhere),
    // ZFS submits its block I/O from its own worker threads, not the reader's.
    (0x2fc1_2fc1, "zfs", Backing::Elsewhere),
];

/// How the kernel accounts reads of the file system with `statfs` magic `magic`.
pub(super) fn accounting_of(magic: u32) -> Accounting {
    match KNOWN.iter().find(|(known, _, _)| *known == magic) {
        Some((_, _, Backing::BlockDevice)) => Accounting::KernelCounters,
        Some((_, _, Backing::Memory)) => Accounting::InMemory,
        Some((_, name, Backing::Elsewhere)) => Accounting::Unaccounted(format!(
            "{name}: the kernel does not count this file system's reads in read_bytes"
        )),
        None => Accounting::Unaccounted(format!(
            "file system type {magic:#x}: dlio-rs does not know whether the kernel counts its \
             reads in read_bytes"
        )),
    }
}

/// The `statfs` magic of the file system holding `path`, or of its nearest existing ancestor
/// when `path` does not exist yet (data not generated): that is where it will be created.
pub(super) fn magic_of(path: &Path) -> io::Result<u32> {
    let mut last_error = None;
    for candidate in path.ancestors() {
        let candidate = if candidate.as_os_str().is_empty() {
            Path::new(".")
        } else {
            candidate
        };
        match statfs_magic(candidate) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => last_error = Some(e),
            other => return other,
        }
    }
    Err(last_error.unwrap_or_else(|| io::Error::from(io::ErrorKind::NotFound)))
}

fn statfs_magic(path: &Path) -> io::Result<u32> {
    let c_path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "the path contains a NUL byte"))?;
    let mut info = MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: `c_path` is NUL-terminated and `info` is valid for writing a statfs.
    if unsafe { libc::statfs(c_path.as_ptr(), info.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: statfs succeeded, so it filled `info`.
    let info = unsafe { info.assume_init() };
    // Magic numbers are 32-bit; f_type's width and signedness vary by architecture.
    Ok(info.f_type as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_what_it_cannot_account() {
        assert_eq!(accounting_of(0xef53), Accounting::KernelCounters);
        assert_eq!(accounting_of(0x0102_1994), Accounting::InMemory);
        match accounting_of(0x6969) {
            Accounting::Unaccounted(why) => assert!(why.starts_with("nfs: "), "{why}"),
            other => panic!("nfs accounted as {other:?}"),
        }
        match accounting_of(0x1234_5678) {
            Accounting::Unaccounted(why) => assert!(why.contains("0x12345678"), "{why}"),
            other => panic!("an unknown file system accounted as {other:?}"),
        }
    }

    #[test]
    fn a_missing_path_is_judged_by_its_nearest_existing_ancestor() {
        let missing = Path::new("/proc/no/such/dir");
        assert_eq!(magic_of(missing).unwrap(), 0x9fa0);
        assert_eq!(magic_of(Path::new("no-such-relative-dir/x")).unwrap(), {
            statfs_magic(Path::new(".")).unwrap()
        });
    }
}
