//! What the host is doing, from the kernel's own counters: CPU busy (`/proc/stat`), memory in use
//! (`/proc/meminfo`), and, for the block devices the run's folders live on, their disk counters
//! (`/proc/diskstats`: requests, bytes, time, queue). Each probe is a cumulative reading; an
//! interval's figures are the difference of two. A counter the kernel does not keep (no
//! `/proc`, a folder on no block device) is left out, never shown as 0.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::{json, Map, Value};

/// The kernel's sectors are 512 bytes, whatever the device's own.
const SECTOR: u64 = 512;

/// The host's counters to read each interval.
pub(super) struct HostProbe {
    /// The block devices (their names in /proc/diskstats) of the run's folders, each once.
    devices: Vec<String>,
}

/// One reading of every probe.
#[derive(Debug, Clone, Default)]
pub(super) struct HostReading {
    /// (busy, total) jiffies of all CPUs.
    cpu: Option<(u64, u64)>,
    /// (in use, total) bytes.
    memory: Option<(u64, u64)>,
    /// Each device's counters, in `HostProbe::devices`' order.
    disks: Vec<Option<DiskCounters>>,
}

/// The fields of a /proc/diskstats line that the time series shows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct DiskCounters {
    reads: u64,
    sectors_read: u64,
    read_ms: u64,
    writes: u64,
    sectors_written: u64,
    write_ms: u64,
    in_flight: u64,
    busy_ms: u64,
    /// Milliseconds of requests in the queue, summed over requests (its rate: the mean queue).
    queued_ms: u64,
}

impl HostProbe {
    /// The probe of the block devices `folders` live on (a folder on none, such as tmpfs or a
    /// network file system, adds none).
    pub(super) fn new(folders: &[&Path]) -> HostProbe {
        let mut devices = Vec::new();
        for folder in folders {
            if let Some(name) = block_device_of(folder) {
                if !devices.contains(&name) {
                    devices.push(name);
                }
            }
        }
        HostProbe { devices }
    }

    pub(super) fn read(&self) -> HostReading {
        let diskstats = std::fs::read_to_string("/proc/diskstats").unwrap_or_default();
        HostReading {
            cpu: std::fs::read_to_string("/proc/stat")
                .ok()
                .and_then(|s| cpu_times(&s)),
            memory: std::fs::read_to_string("/proc/meminfo")
                .ok()
                .and_then(|s| memory(&s)),
            disks: self
                .devices
                .iter()
                .map(|name| disk_counters(&diskstats, name))
                .collect(),
        }
    }

    /// The host's fields of an interval from `before` to `now`, `seconds` long.
    pub(super) fn fields(
        &self,
        before: &HostReading,
        now: &HostReading,
        seconds: f64,
        out: &mut Map<String, Value>,
    ) {
        if let (Some((busy0, total0)), Some((busy1, total1))) = (before.cpu, now.cpu) {
            let total = total1.saturating_sub(total0);
            let busy = busy1.saturating_sub(busy0);
            if total > 0 {
                out.insert(
                    "cpu_busy_percent".into(),
                    json!(busy as f64 / total as f64 * 100.0),
                );
            }
        }
        if let Some((used, total)) = now.memory {
            out.insert("memory_used_bytes".into(), json!(used));
            out.insert("memory_total_bytes".into(), json!(total));
        }
        let ms = seconds * 1000.0;
        let disks: Vec<Value> = self
            .devices
            .iter()
            .zip(before.disks.iter().zip(&now.disks))
            .filter_map(|(name, pair)| match pair {
                (Some(a), Some(b)) => Some(disk_fields(name, a, b, ms)),
                _ => None,
            })
            .collect();
        out.insert("disks".into(), Value::Array(disks));
    }
}

fn disk_fields(name: &str, a: &DiskCounters, b: &DiskCounters, ms: f64) -> Value {
    let d = |f: fn(&DiskCounters) -> u64| f(b).saturating_sub(f(a));
    let per_ms = |x: u64| if ms > 0.0 { x as f64 / ms } else { 0.0 };
    json!({
        "device": name,
        "reads": d(|c| c.reads),
        "read_bytes": d(|c| c.sectors_read) * SECTOR,
        "read_ms": d(|c| c.read_ms),
        "writes": d(|c| c.writes),
        "write_bytes": d(|c| c.sectors_written) * SECTOR,
        "write_ms": d(|c| c.write_ms),
        "in_flight": b.in_flight,
        "busy_percent": (per_ms(d(|c| c.busy_ms)) * 100.0).min(100.0),
        "mean_queue": per_ms(d(|c| c.queued_ms)),
    })
}

/// The name in /proc/diskstats of the block device holding `folder` (or, before it exists, its
/// nearest existing parent): from its device number through /sys/dev/block, or else the source
/// of the mount it lies in (file systems such as btrfs give files a device number of their own).
fn block_device_of(folder: &Path) -> Option<String> {
    let existing = folder.ancestors().find(|p| p.exists())?;
    let dev = std::fs::metadata(existing).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    if let Ok(target) = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")) {
        return target.file_name().map(|n| n.to_string_lossy().into_owned());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let source = mount_source(&mountinfo, &std::fs::canonicalize(existing).ok()?)?;
    // /dev/mapper/NAME and /dev/disk/by-*/… are links to the kernel's name (dm-0, sda1).
    let source = std::fs::canonicalize(&source).unwrap_or_else(|_| source.into());
    let name = source
        .strip_prefix("/dev/")
        .ok()?
        .to_string_lossy()
        .into_owned();
    let diskstats = std::fs::read_to_string("/proc/diskstats").ok()?;
    disk_counters(&diskstats, &name).map(|_| name)
}

/// The source of the mount (of `mountinfo`'s) that `path` lies deepest in.
fn mount_source(mountinfo: &str, path: &Path) -> Option<String> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let mount_point = Path::new(*fields.get(4)?);
            let dash = fields.iter().position(|f| *f == "-")?;
            let source = fields.get(dash + 2)?;
            path.starts_with(mount_point)
                .then(|| (mount_point.as_os_str().len(), source.to_string()))
        })
        .max_by_key(|(depth, _)| *depth)
        .map(|(_, source)| source)
}

/// (busy, total) jiffies from /proc/stat's `cpu` line: busy is user, nice, system, irq, softirq
/// and steal; idle and iowait are not busy.
fn cpu_times(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    Some((busy, busy + at(3) + at(4)))
}

/// (in use, total) bytes: MemTotal less MemAvailable.
fn memory(meminfo: &str) -> Option<(u64, u64)> {
    let field = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    };
    let total = field("MemTotal:")?;
    let available = field("MemAvailable:")?;
    Some((total.saturating_sub(available), total))
}

/// `read_bytes` of a /proc/…/io file (a thread's, for the sampler).
pub(super) fn io_read_bytes(io: &str) -> Option<u64> {
    io.lines()
        .find_map(|l| l.strip_prefix("read_bytes:"))?
        .trim()
        .parse()
        .ok()
}

/// The counters of device `name` in /proc/diskstats.
fn disk_counters(diskstats: &str, name: &str) -> Option<DiskCounters> {
    diskstats.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.get(2) != Some(&name) {
            return None;
        }
        let at = |i: usize| -> Option<u64> { fields.get(i)?.parse().ok() };
        Some(DiskCounters {
            reads: at(3)?,
            sectors_read: at(5)?,
            read_ms: at(6)?,
            writes: at(7)?,
            sectors_written: at(9)?,
            write_ms: at(10)?,
            in_flight: at(11)?,
            busy_ms: at(12)?,
            queued_ms: at(13)?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_s_counters_are_parsed() {
        let stat = "cpu  100 5 50 800 40 3 2 0 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n";
        assert_eq!(cpu_times(stat), Some((160, 1000)));
        let meminfo = "MemTotal:       1000 kB\nMemFree:  10 kB\nMemAvailable:    250 kB\n";
        assert_eq!(memory(meminfo), Some((750 * 1024, 1000 * 1024)));
        assert_eq!(io_read_bytes("rchar: 5\nread_bytes: 4096\n"), Some(4096));
        let diskstats = " 254       0 vda 10 1 80 7 20 2 160 9 3 50 60 0 0 0 0\n\
                         254       1 vda1 1 0 8 1 2 0 16 1 0 5 6 0 0 0 0\n";
        let vda1 = disk_counters(diskstats, "vda1").unwrap();
        assert_eq!((vda1.reads, vda1.sectors_read, vda1.queued_ms), (1, 8, 6));
        let vda = disk_counters(diskstats, "vda").unwrap();
        assert_eq!((vda.writes, vda.in_flight, vda.busy_ms), (20, 3, 50));
        assert!(disk_counters(diskstats, "sda").is_none());
    }

    #[test]
    fn an_interval_s_disk_figures_are_differences_and_rates() {
        let a = DiskCounters {
            reads: 10,
            sectors_read: 80,
            busy_ms: 100,
            queued_ms: 100,
            ..Default::default()
        };
        let b = DiskCounters {
            reads: 30,
            sectors_read: 2128,
            busy_ms: 600,
            queued_ms: 2100,
            in_flight: 4,
            ..Default::default()
        };
        let v = disk_fields("vda", &a, &b, 1000.0);
        assert_eq!(v["reads"], 20);
        assert_eq!(v["read_bytes"], 2048 * 512);
        assert_eq!(v["busy_percent"], 50.0);
        assert_eq!(v["mean_queue"], 2.0);
        assert_eq!(v["in_flight"], 4);
    }

    #[test]
    fn the_deepest_mount_holding_a_path_names_its_source() {
        let mountinfo = "22 1 0:20 / / rw - ext4 /dev/vda1 rw\n\
                         30 22 0:30 / /work rw shared:1 - btrfs /dev/mapper/data rw\n";
        let source = mount_source(mountinfo, Path::new("/work/x"));
        assert_eq!(source.as_deref(), Some("/dev/mapper/data"));
        assert_eq!(
            mount_source(mountinfo, Path::new("/tmp")).as_deref(),
            Some("/dev/vda1")
        );
    }

    #[test]
    fn this_host_s_disk_is_found_once_and_read() {
        let here = std::env::current_dir().unwrap();
        let dev = std::fs::metadata(&here).unwrap().dev();
        let sys = format!("/sys/dev/block/{}:{}", libc::major(dev), libc::minor(dev));
        let probe = HostProbe::new(&[&here, &here.join("not/made/yet")]);
        match std::fs::read_link(&sys) {
            Ok(target) => {
                let name = target.file_name().unwrap().to_string_lossy().into_owned();
                assert_eq!(probe.devices, vec![name]);
                assert!(probe.read().disks[0].is_some());
            }
            // The build's folder on no block device of its own (overlay, btrfs): the mount's.
            Err(_) => assert!(probe.devices.len() <= 1, "{:?}", probe.devices),
        }
        let reading = probe.read();
        assert!(reading.cpu.is_some() && reading.memory.is_some());
    }
}
