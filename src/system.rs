//! Facts about this host that DLIO records in its summary: name, CPUs, memory.

use serde_json::{Map, Value};

pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into())
}

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
