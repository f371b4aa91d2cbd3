//! A device of fixed speed for the cold-read benchmark: the kernel's block throttle. The disk
//! here is cached by its host and its speed swings several-fold between rounds; a cgroup's read
//! caps (cgroup v1 `blkio.throttle.read_bps_device` / `read_iops_device`, or v2 `io.max`
//! `rbps=`/`riops=`) hold every read issued by the processes in the group to a byte rate or a
//! request rate, exactly, for O_DIRECT and buffered reads (read-ahead counts as the requests it
//! makes). Below the caps the device is the same for both tools, so only their request streams
//! decide how much of the ceiling each reaches. The group's own counters (v1
//! `blkio.throttle.io_serviced` / `io_service_bytes`, v2 `io.stat`) tell each tool's device
//! requests and bytes.
//!
//! `DLIO_BENCH_THROTTLE=bytes,requests` measures both regimes, byte-bound then request-bound
//! (either alone too), each cap chosen per shape and mode from fio's uncapped rounds so that a
//! capped round lasts `DLIO_BENCH_ROUND_SECONDS` (default 20); `bytes:MIB_PER_S` or
//! `requests:PER_S` pins a cap instead. The group is made per benchmark and reused.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The caps of a throttle group (none: the group only counts).
#[derive(Debug, Clone, Copy, Default)]
pub struct Caps {
    pub bytes_per_second: Option<u64>,
    pub requests_per_second: Option<u64>,
}

/// Which cap binds in a set of rounds, and its value (`None`: the benchmark chooses it per
/// shape and mode, so that a round lasts `DLIO_BENCH_ROUND_SECONDS`).
#[derive(Debug, Clone, Copy)]
pub enum Regime {
    /// Byte-bound: bytes per second.
    Bytes(Option<u64>),
    /// Request-bound: requests per second.
    Requests(Option<u64>),
}

impl Regime {
    /// `DLIO_BENCH_THROTTLE`, if set: the regimes to measure, in order; exits with a message
    /// naming the variable on a bad value.
    pub fn from_env() -> Option<Vec<Regime>> {
        let text = std::env::var("DLIO_BENCH_THROTTLE").ok()?;
        let regimes: Option<Vec<Regime>> = text
            .split(',')
            .map(|part| {
                let (kind, value) = match part.split_once(':') {
                    Some((kind, n)) => {
                        (kind, Some(n.trim().parse::<u64>().ok().filter(|&n| n > 0)?))
                    }
                    None => (part, None),
                };
                match kind.trim() {
                    "bytes" => Some(Regime::Bytes(value.map(|mib| mib << 20))),
                    "requests" => Some(Regime::Requests(value)),
                    _ => None,
                }
            })
            .collect();
        match regimes {
            Some(regimes) if !regimes.is_empty() => Some(regimes),
            _ => {
                eprintln!(
                    "DLIO_BENCH_THROTTLE={text}: give the regimes to measure joined by ',': \
                     bytes (byte-bound) and requests (request-bound), each with its cap if it is \
                     not to be chosen per shape (bytes:MIB_PER_S, requests:PER_S; whole numbers > 0)"
                );
                std::process::exit(2);
            }
        }
    }

    /// The regime's name.
    pub fn name(&self) -> &'static str {
        match self {
            Regime::Bytes(_) => "byte-bound",
            Regime::Requests(_) => "request-bound",
        }
    }

    /// The caps of the regime, its own where it has one, else `chosen`.
    pub fn caps(&self, chosen: u64) -> Caps {
        match *self {
            Regime::Bytes(cap) => Caps {
                bytes_per_second: Some(cap.unwrap_or(chosen)),
                requests_per_second: None,
            },
            Regime::Requests(cap) => Caps {
                bytes_per_second: None,
                requests_per_second: Some(cap.unwrap_or(chosen)),
            },
        }
    }
}

impl Caps {
    pub fn describe(&self) -> String {
        let mut said = Vec::new();
        if let Some(b) = self.bytes_per_second {
            said.push(format!("{:.1} MiB/s", b as f64 / 1048576.0));
        }
        if let Some(r) = self.requests_per_second {
            said.push(format!("{r} requests/s"));
        }
        if said.is_empty() {
            return "no cap".into();
        }
        said.join(" and ")
    }
}

/// The group's name: one for every benchmark, reused (a benchmark ends by `exit`, which would
/// leave a group per process behind).
const GROUP_NAME: &str = "dlio-bench";

/// Which cgroup interface holds the group.
enum Flavour {
    V1,
    V2,
}

/// A throttle group of the whole disk that holds a folder; removed when dropped (where the
/// benchmark ends without exiting first).
pub struct Group {
    path: PathBuf,
    device: String,
    flavour: Flavour,
}

/// Device reads and bytes the group's processes caused, as its counters tell.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DeviceReads {
    pub requests: u64,
    pub bytes: u64,
}

impl Group {
    /// A group for the disk that holds `folder`, with no cap yet; exits with a clear message
    /// where neither cgroup interface offers the throttle.
    pub fn new(folder: &Path) -> Group {
        let device = whole_disk(folder);
        let v1 = Path::new("/sys/fs/cgroup/blkio");
        let v2_controllers = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers");
        let (path, flavour) = if v1.join("blkio.throttle.read_bps_device").exists() {
            (v1.join(GROUP_NAME), Flavour::V1)
        } else if v2_controllers.is_ok_and(|c| c.split_whitespace().any(|c| c == "io")) {
            let root = Path::new("/sys/fs/cgroup");
            // The io controller must be on for the children of the root.
            let _ = std::fs::write(root.join("cgroup.subtree_control"), "+io");
            (root.join(GROUP_NAME), Flavour::V2)
        } else {
            eprintln!(
                "DLIO_BENCH_THROTTLE needs the kernel's block throttle: neither cgroup v1's blkio \
                 controller (/sys/fs/cgroup/blkio) nor cgroup v2's io controller is mounted here"
            );
            std::process::exit(2);
        };
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("making the group {}: {e} (root needed)", path.display()));
        let group = Group {
            path,
            device,
            flavour,
        };
        group.set(Caps::default());
        group
    }

    /// Sets the group's caps (and clears those `caps` does not have).
    pub fn set(&self, caps: Caps) {
        let write = |file: &str, text: String| {
            std::fs::write(self.path.join(file), &text)
                .unwrap_or_else(|e| panic!("writing {text:?} to {file}: {e}"));
        };
        let dev = &self.device;
        match self.flavour {
            // Each cap set or cleared (a group reused from another benchmark keeps its rules):
            // v1 clears a rule with 0, v2 with `max`.
            Flavour::V1 => {
                let bytes = caps.bytes_per_second.unwrap_or(0);
                write("blkio.throttle.read_bps_device", format!("{dev} {bytes}"));
                let requests = caps.requests_per_second.unwrap_or(0);
                write(
                    "blkio.throttle.read_iops_device",
                    format!("{dev} {requests}"),
                );
            }
            Flavour::V2 => {
                let or_max = |cap: Option<u64>| cap.map_or("max".to_string(), |c| c.to_string());
                let limits = format!(
                    "{dev} rbps={} riops={}",
                    or_max(caps.bytes_per_second),
                    or_max(caps.requests_per_second)
                );
                write("io.max", limits);
            }
        }
    }

    /// `program args` as a command whose process joins the group before it starts (a shell
    /// writes its pid into the group, then becomes the program).
    pub fn command(&self, program: &str, args: &[String]) -> Command {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg("echo $$ > \"$0\" && exec \"$@\"")
            .arg(self.path.join("cgroup.procs"))
            .arg(program)
            .args(args);
        cmd
    }

    /// The device reads of the group's processes so far.
    pub fn reads(&self) -> DeviceReads {
        let read = |file: &str| std::fs::read_to_string(self.path.join(file)).unwrap_or_default();
        let dev = &self.device;
        match self.flavour {
            Flavour::V1 => {
                let field = |text: String| {
                    text.lines()
                        .find_map(|l| {
                            let mut w = l.split_whitespace();
                            (w.next() == Some(dev) && w.next() == Some("Read"))
                                .then(|| w.next()?.parse().ok())
                                .flatten()
                        })
                        .unwrap_or(0)
                };
                DeviceReads {
                    requests: field(read("blkio.throttle.io_serviced")),
                    bytes: field(read("blkio.throttle.io_service_bytes")),
                }
            }
            Flavour::V2 => {
                let stat = read("io.stat");
                let line = stat.lines().find(|l| l.starts_with(&format!("{dev} ")));
                let value = |key: &str| {
                    line.and_then(|l| {
                        l.split_whitespace()
                            .find_map(|kv| kv.strip_prefix(key)?.parse().ok())
                    })
                    .unwrap_or(0)
                };
                DeviceReads {
                    requests: value("rios="),
                    bytes: value("rbytes="),
                }
            }
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.path);
    }
}

impl DeviceReads {
    pub fn since(&self, before: DeviceReads) -> DeviceReads {
        DeviceReads {
            requests: self.requests - before.requests,
            bytes: self.bytes - before.bytes,
        }
    }
}

/// `MAJ:MIN` of the whole disk that holds `folder` (a partition's parent): the throttle caps
/// whole disks.
fn whole_disk(folder: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(folder)
        .unwrap_or_else(|e| panic!("{}: {e}", folder.display()))
        .dev();
    let (major, minor) = (libc_major(dev), libc_minor(dev));
    let sys = PathBuf::from(format!("/sys/dev/block/{major}:{minor}"));
    // A partition's folder in sysfs sits inside its disk's, which has the `dev` file.
    if sys.join("partition").exists() {
        if let Ok(parent) = std::fs::read_to_string(sys.join("../dev")) {
            return parent.trim().to_string();
        }
    }
    format!("{major}:{minor}")
}

/// Linux's encoding of a device number (glibc's `gnu_dev_major` / `gnu_dev_minor`).
fn libc_major(dev: u64) -> u64 {
    ((dev >> 32) & 0xffff_f000) | ((dev >> 8) & 0x0fff)
}

fn libc_minor(dev: u64) -> u64 {
    ((dev >> 12) & 0xffff_ff00) | (dev & 0x00ff)
}
