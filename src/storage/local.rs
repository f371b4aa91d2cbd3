//! Local and parallel file systems through the kernel's page cache.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use super::Storage;

#[derive(Debug)]
pub struct LocalFs {
    root: PathBuf,
    /// The root, opened once: reads open files relative to it, so the kernel walks only the
    /// key's components and no path is allocated per read.
    root_dir: OnceLock<Option<File>>,
}

/// Keys longer than this are opened by full path instead.
const MAX_RELATIVE_KEY: usize = 1024;

impl LocalFs {
    pub fn new(root: impl Into<PathBuf>) -> LocalFs {
        LocalFs {
            root: root.into(),
            root_dir: OnceLock::new(),
        }
    }

    fn open_for_reading(&self, key: &str) -> io::Result<File> {
        let root_dir = self.root_dir.get_or_init(|| File::open(&self.root).ok());
        match root_dir {
            Some(dir) if key.len() < MAX_RELATIVE_KEY && !key.as_bytes().contains(&0) => {
                let mut relative = [0u8; MAX_RELATIVE_KEY];
                relative[..key.len()].copy_from_slice(key.as_bytes());
                // SAFETY: `relative` is NUL-terminated (zeroed past the key) and outlives the call;
                // a non-negative result is a new descriptor that the File then owns.
                let fd = unsafe {
                    libc::openat(
                        dir.as_raw_fd(),
                        relative.as_ptr().cast(),
                        libc::O_RDONLY | libc::O_CLOEXEC,
                    )
                };
                if fd < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(unsafe { File::from_raw_fd(fd) })
            }
            _ => File::open(self.path(key)),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn path(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }
}

/// A name no other writer (thread, rank or process) uses at the same time.
fn temporary_name(target: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let unique = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.{}.{unique}.tmp", std::process::id()))
}

impl Storage for LocalFs {
    fn describe(&self, key: &str) -> String {
        self.path(key).display().to_string()
    }

    fn read_all(&self, key: &str, buf: &mut Vec<u8>) -> io::Result<usize> {
        let file = self.open_for_reading(key)?;
        let len = file.metadata()?.len() as usize;
        buf.clear();
        // Huge pages (MADV_HUGEPAGE) would speed later copies, but where the kernel defragments
        // on demand each huge fault stalls for compaction: measured, it halved the first epoch.
        buf.reserve_exact(len);
        // Straight into the spare capacity: zero-filling first would touch every byte twice.
        let spare = &mut buf.spare_capacity_mut()[..len];
        let mut done = 0;
        while done < len {
            // SAFETY: the pointer and length describe the unfilled tail of `spare`, which is
            // valid for writes; the kernel writes at most that many bytes into it.
            let n = unsafe {
                libc::read(
                    file.as_raw_fd(),
                    spare[done..].as_mut_ptr().cast(),
                    len - done,
                )
            };
            match n {
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the file shrank while being read",
                    ))
                }
                n if n < 0 => {
                    let error = io::Error::last_os_error();
                    if error.kind() != io::ErrorKind::Interrupted {
                        return Err(error);
                    }
                }
                n => done += n as usize,
            }
        }
        // SAFETY: the loop above initialised exactly `len` bytes.
        unsafe { buf.set_len(len) };
        Ok(len)
    }

    fn put(&self, key: &str, data: &[u8]) -> io::Result<()> {
        let target = self.path(key);
        if let Some(parent) = target.parent() {
            // Tolerates a concurrent creator: ranks of a shared file system race here.
            fs::create_dir_all(parent)?;
        }
        let temporary = temporary_name(&target);
        let written = File::create(&temporary).and_then(|mut f| f.write_all(data));
        match written.and_then(|()| fs::rename(&temporary, &target)) {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = fs::remove_file(&temporary);
                Err(e)
            }
        }
    }

    fn exists(&self, key: &str) -> io::Result<bool> {
        match fs::metadata(self.path(key)) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn list(&self, prefix: &str) -> io::Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut pending = vec![prefix.trim_end_matches('/').to_string()];
        while let Some(dir) = pending.pop() {
            for entry in fs::read_dir(self.path(&dir))? {
                let entry = entry?;
                let name = entry.file_name().to_string_lossy().into_owned();
                let key = if dir.is_empty() {
                    name
                } else {
                    format!("{dir}/{name}")
                };
                if entry.file_type()?.is_dir() {
                    pending.push(key);
                } else {
                    keys.push(key);
                }
            }
        }
        keys.sort();
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_is_atomic_and_read_all_reads_it_back() {
        let dir = std::env::temp_dir().join(format!("dlio-rs-local-{}", std::process::id()));
        let storage = LocalFs::new(&dir);
        storage.put("a/b/c.bin", b"hello").unwrap();
        storage.put("a/d.bin", b"hi").unwrap();
        let mut buf = vec![7u8; 2];
        assert_eq!(storage.read_all("a/b/c.bin", &mut buf).unwrap(), 5);
        assert_eq!(&buf[..5], b"hello");
        assert_eq!(
            storage.list("a").unwrap(),
            vec!["a/b/c.bin".to_string(), "a/d.bin".to_string()]
        );
        assert!(storage.exists("a/d.bin").unwrap());
        assert!(!storage.exists("a/e.bin").unwrap());
        assert!(storage.read_all("a/e.bin", &mut buf).is_err());
        fs::remove_dir_all(dir).unwrap();
    }
}
