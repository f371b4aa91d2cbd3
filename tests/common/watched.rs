//! A server process for tests, watched: started as the child of a small `sh` that SIGKILLs it when
//! our end of its stdin closes, so that a test process that dies without unwinding (SIGKILL,
//! timeout, abort) leaves no server behind; its output appended to a log whose tail goes into
//! errors; frozen and thawed (SIGSTOP, SIGCONT) and killed (SIGKILL, waited for with a bound: never
//! a hang). The launchers of SeaweedFS, Azurite and fake-gcs-server are built on it, and
//! [`start_http_server`] is the whole start of a server of one HTTP port.
//!
//! Standard library only, and no `crate::`/`super::` paths: included once beside the launchers
//! (`mod watched;` in `tests/common/mod.rs`, `#[path]` in a library unit test or a benchmark),
//! which use it as `super::watched`.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// `$1` is the log file, the rest is the command; prints the server's pid and exits with its
/// status; kills the server when its stdin closes.
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

/// How long a start may take before it is given up (the servers start in 0.5–3 s).
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Starts retried on a fresh port when the server dies early (another process took the port).
pub const START_ATTEMPTS: usize = 3;
/// Servers started in this process, to name their folders.
static STARTED: AtomicUsize = AtomicUsize::new(0);

/// A running server under its watchdog. Dropping it kills the server.
pub struct Watched {
    /// The watchdog `sh`; the server is its child.
    child: Child,
    /// Our end of the watchdog's stdin: closing it kills the server.
    stdin: Option<ChildStdin>,
    pid: u32,
    /// `program`'s name, for messages.
    name: String,
    log: PathBuf,
    stopped: bool,
}

impl Watched {
    /// Starts `program args…`, its output appended to `log` (emptied first).
    pub fn spawn(program: &Path, args: &[String], log: &Path) -> Result<Watched, String> {
        let name = program
            .file_name()
            .map_or("server".into(), |n| n.to_string_lossy().into_owned());
        // Emptied (its tail goes into errors), then shared in append mode by the shell and the
        // server.
        let sh_stderr = File::create(log)
            .and_then(|_| File::options().append(true).open(log))
            .map_err(|e| format!("opening {}: {e}", log.display()))?;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG)
            .arg(format!("{name}-watchdog"))
            .arg(log)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(sh_stderr)
            .spawn()
            .map_err(|e| format!("spawning sh for {}: {e}", program.display()))?;
        let stdin = child.stdin.take();
        let mut line = String::new();
        let read = child
            .stdout
            .take()
            .map(|out| BufReader::new(out).read_line(&mut line));
        match (read, line.trim().parse::<u32>()) {
            (Some(Ok(_)), Ok(pid)) => Ok(Watched {
                child,
                stdin,
                pid,
                name,
                log: log.to_path_buf(),
                stopped: false,
            }),
            _ => {
                drop(stdin);
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "no pid from the watchdog shell; log:\n{}",
                    tail(log)
                ))
            }
        }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        tail(&self.log)
    }

    /// How it ended, if it has.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.try_wait().ok().flatten()?;
        self.stopped = true;
        Some(status)
    }

    /// Waits until `ready()` says the server is up, failing if it ends first or takes longer
    /// than [`READY_TIMEOUT`] (then it is killed); `what` names it in messages.
    pub fn wait_ready(
        &mut self,
        what: &str,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), String> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.exited() {
                return Err(format!(
                    "{} exited ({status}) after {:.1?} ({what}); log:\n{}",
                    self.name,
                    started.elapsed(),
                    self.log_tail()
                ));
            }
            if ready() {
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                self.kill();
                return Err(format!(
                    "{} not ready in {READY_TIMEOUT:?} ({what}); log:\n{}",
                    self.name,
                    self.log_tail()
                ));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends `SIG<name>` (`STOP`, `CONT`) to the server.
    pub fn signal(&self, name: &str) {
        assert!(!self.stopped, "SIG{name} to a stopped {}", self.name);
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

    /// Idempotent: closes the watchdog's stdin (it SIGKILLs the server, even a stopped one, and
    /// reaps it) and waits for the watchdog, bounded.
    pub fn kill(&mut self) {
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
                    // Should not happen; kill both directly rather than hang.
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

impl Drop for Watched {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A server of one HTTP port, started and answering: the process, its folder and its port.
pub struct HttpServer {
    pub server: Watched,
    pub dir: PathBuf,
    pub port: u16,
}

impl HttpServer {
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.server.kill();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// Starts `binary` with `args(port, folder)` on a free loopback port, in a folder of its own under
/// `parent` (`name-<pid>-<n>`), and waits until the port answers HTTP; retried on a fresh port
/// when the server dies early. On failure the error carries the tail of its log, and the folder
/// is kept.
pub fn start_http_server(
    parent: &Path,
    name: &str,
    binary: &Path,
    args: impl Fn(u16, &Path) -> Vec<String>,
) -> Result<HttpServer, String> {
    fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    let mut failures = Vec::new();
    for attempt in 1..=START_ATTEMPTS {
        // Unique in this process: tests start servers side by side.
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("{name}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        let started = TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))
            .and_then(|addr| {
                let port = addr.port();
                let log = dir.join(format!("{name}.log"));
                let mut server = Watched::spawn(binary, &args(port, &dir), &log)?;
                server.wait_ready(&format!("port {port}"), || {
                    http_status(addr, Duration::from_secs(2)).is_ok()
                })?;
                Ok(HttpServer {
                    server,
                    dir: dir.clone(),
                    port,
                })
            });
        match started {
            Ok(server) => return Ok(server),
            Err(why) => failures.push(format!("attempt {attempt}: {why}")),
        }
    }
    Err(format!(
        "{name} ({}) did not start:\n{}",
        binary.display(),
        failures.join("\n")
    ))
}

/// The last lines of a log file, for error messages.
pub fn tail(path: &Path) -> String {
    let text = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// The status of an unsigned `GET /` (`Connection: close`), each step bounded by `timeout`.
pub fn http_status(addr: SocketAddr, timeout: Duration) -> io::Result<u16> {
    http_get(addr, "/", timeout).map(|(status, _)| status)
}

/// A minimal unsigned HTTP/1.1 GET (`Connection: close`): the status and the raw body (not
/// de-chunked). `timeout` bounds the connect and each read/write, so a frozen server is an error
/// (`WouldBlock`/`TimedOut`), not a hang. For readiness checks and probing servers in tests.
pub fn http_get(addr: SocketAddr, path: &str, timeout: Duration) -> io::Result<(u16, Vec<u8>)> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    stream.read_to_end(&mut response)?;
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let head_end = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of response head"))?;
    let status = std::str::from_utf8(&response[..head_end])
        .ok()
        .and_then(|head| head.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| bad("no status code"))?;
    Ok((status, response.split_off(head_end + 4)))
}
