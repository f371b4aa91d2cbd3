//! Facts about this host that DLIO records in its summary: name, CPUs, memory; and its local
//! time, as DLIO writes it.

use serde_json::{Map, Value};

/// When this process started, as near as it can tell: the entry points call this first.
pub fn process_start() -> std::time::Instant {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    *START.get_or_init(std::time::Instant::now)
}

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

/// The host's online CPUs (psutil's `cpu_count()`), whatever this process is bound to.
pub fn host_cpu_count() -> usize {
    // SAFETY: sysconf reads a system value and takes no pointers.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if online > 0 {
        online as usize
    } else {
        cpu_count()
    }
}

/// The CPUs this process may run on (its affinity mask, as a launcher's binding leaves it).
pub fn cpu_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

pub fn processor_name() -> &'static str {
    std::env::consts::ARCH
}

/// Total memory of this host in bytes (MemTotal), as psutil reports it.
pub fn memory_bytes() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kib| kib * 1024)
}

/// This process's peak resident memory (VmHWM), in bytes.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    Some(
        kib.trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()?
            * 1024,
    )
}

/// A `/proc` file of `key: value` lines as DLIO's `lines_to_dict` reads it: later lines win,
/// lines with more than one colon are skipped, and so is the `processor` key.
pub fn proc_dict(path: &str) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut map = Map::new();
    for line in text.lines() {
        let parts: Vec<&str> = line.split(':').collect();
        if let [key, value] = parts.as_slice() {
            let key = key.trim();
            if key != "processor" {
                map.insert(key.to_string(), Value::String(value.trim().to_string()));
            }
        }
    }
    Value::Object(map)
}

/// The calling thread's id (its folder in /proc/self/task).
pub fn thread_id() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}

/// Bytes the calling thread has caused to be read from block devices (`read_bytes` of
/// `/proc/thread-self/io`); `None` where the kernel keeps no per-task I/O accounting.
pub fn thread_read_bytes() -> Option<u64> {
    let io = std::fs::read_to_string("/proc/thread-self/io").ok()?;
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))?
        .trim()
        .parse()
        .ok()
}

/// Writes back dirty pages, then drops the host's clean page cache (`vm.drop_caches = 1`), giving
/// up after `timeout` (the kernel call cannot be interrupted; it is left to finish on its own).
pub fn drop_page_cache(timeout: std::time::Duration) -> Result<(), String> {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("drop-caches".into())
        .spawn(move || {
            // SAFETY: sync() takes no arguments and only schedules write-back.
            unsafe { libc::sync() };
            let _ = done.send(std::fs::write(DROP_CACHES, "1"));
        })
        .map_err(|e| format!("cannot start a thread to drop the page cache: {e}"))?;
    match finished.recv_timeout(timeout) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("cannot write {DROP_CACHES}: {e}")),
        Err(_) => Err(format!(
            "dropping the page cache took longer than {} s",
            timeout.as_secs()
        )),
    }
}

const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";

/// The variable that sets how long a page-cache drop may take, in seconds: DLIO's and mlpstorage
/// v3's name (`--drop-caches-timeout-seconds`, passed with `mpirun -x`).
pub const DROP_CACHES_TIMEOUT_VAR: &str = "DLIO_DROP_CACHES_TIMEOUT";

/// How long a page-cache drop may take: [`DROP_CACHES_TIMEOUT_VAR`] when set, else 300 s (DLIO's
/// 30 s is too short for a host that must first write back gigabytes of dirty pages).
pub fn drop_cache_timeout() -> Result<std::time::Duration, String> {
    match std::env::var(DROP_CACHES_TIMEOUT_VAR) {
        Err(std::env::VarError::NotPresent) => Ok(std::time::Duration::from_secs(300)),
        Ok(text) => text
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|s| *s > 0.0 && *s <= crate::compute::MAX_SECONDS)
            .map(std::time::Duration::from_secs_f64)
            .ok_or_else(|| {
                format!(
                    "{DROP_CACHES_TIMEOUT_VAR} = '{text}': must be a positive number of seconds, \
                     at most 1e6"
                )
            }),
        Err(std::env::VarError::NotUnicode(text)) => Err(format!(
            "{DROP_CACHES_TIMEOUT_VAR} = {text:?}: must be a positive number of seconds"
        )),
    }
}

/// Whether this process may drop the page cache (root, and a writable /proc/sys).
pub fn check_can_drop_page_cache() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(DROP_CACHES)
        .map(drop)
        .map_err(|e| format!("cannot open {DROP_CACHES} for writing ({e}); it needs root"))
}

/// The most threads this process may start, and what limits it: the kernel's `threads-max`, the
/// user's process limit (`ulimit -u`), or the memory maps a thread needs (its stack, guard page
/// and signal stack: 3 of `vm.max_map_count`, with room kept for everything else).
pub fn thread_limit() -> (u64, &'static str) {
    let read = |path: &str| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
    };
    let mut limits = Vec::new();
    if let Some(max) = read("/proc/sys/kernel/threads-max") {
        limits.push((max, "kernel.threads-max"));
    }
    if let Some(maps) = read("/proc/sys/vm/max_map_count") {
        limits.push((maps.saturating_sub(4096) / 3, "vm.max_map_count / 3"));
    }
    let mut nproc = std::mem::MaybeUninit::<libc::rlimit>::uninit();
    // SAFETY: getrlimit writes one rlimit into the pointer it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NPROC, nproc.as_mut_ptr()) } == 0 {
        // SAFETY: getrlimit succeeded, so it filled the rlimit.
        let nproc = unsafe { nproc.assume_init() };
        if nproc.rlim_cur != libc::RLIM_INFINITY {
            limits.push((nproc.rlim_cur, "ulimit -u"));
        }
    }
    limits
        .into_iter()
        .min_by_key(|&(limit, _)| limit)
        .unwrap_or((u64::MAX, "no limit found"))
}

/// Bytes free for an unprivileged writer on the file system of `path`, or of its nearest folder
/// that exists; `None` where that cannot be known.
pub fn free_bytes(path: &std::path::Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    // A relative path none of whose folders exists yet is below the working folder.
    let existing = path
        .ancestors()
        .find(|p| !p.as_os_str().is_empty() && p.exists())
        .unwrap_or(std::path::Path::new("."));
    let c_path = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
    let mut stat = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: statvfs reads the NUL-terminated path and writes one statvfs into the pointer.
    if unsafe { libc::statvfs(c_path.as_ptr(), stat.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs succeeded, so it filled the struct.
    let stat = unsafe { stat.assume_init() };
    Some(stat.f_bavail.saturating_mul(stat.f_frsize))
}

/// Local time as DLIO writes it: `2024-08-07T15:10:12.464949`.
pub fn timestamp(time: std::time::SystemTime) -> String {
    let since_epoch = time
        .duration_since(std::time::SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let seconds = since_epoch.as_secs() as libc::time_t;
    // SAFETY: localtime_r writes only into the tm we pass; both pointers are valid for the call.
    let tm = unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        libc::localtime_r(&seconds, &mut tm);
        tm
    };
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        since_epoch.subsec_micros()
    )
}
