//! A real Azure Blob server for tests: one Azurite `azurite-blob` per test, on a free loopback
//! port, with its own folder, enforcing SharedKey signatures with its well-known development
//! account.
//!
//! Standard library only, and no `crate::`/`super::` paths, so the file can be included both as
//! `mod azurite;` from `tests/common/mod.rs` and with `#[path]` from a library unit test.
//!
//! Azurite comes from npm (`npm install -g azurite`, as `.ci/run` does). Facts this launcher
//! relies on (Azurite 3.35):
//! - `--skipApiVersionCheck` lets it take the API version dlio-rs names, `--loose` ignores the
//!   headers it does not know, `--silent` and `--disableTelemetry` keep it quiet and offline;
//! - it serves accounts by path (`http://127.0.0.1:PORT/devstoreaccount1/container/blob`) and
//!   answers any request once it listens (403 to an unsigned one);
//! - SIGKILL stops it at once.

use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// Azurite's development account.
pub const ACCOUNT: &str = "devstoreaccount1";
/// Its key (Azurite's documented well-known key).
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// The configuration words that put a dlio-rs run's data in `container` at `endpoint` (the
/// server's, or a proxy's before it), with the development account and its key.
pub fn storage_words(endpoint: &str, container: &str) -> Vec<String> {
    vec![
        "++workload.storage.storage_type=azure".to_string(),
        format!("++workload.storage.storage_root={container}"),
        format!("++workload.storage.storage_options.endpoint_url={endpoint}"),
        format!("++workload.storage.storage_options.account_name={ACCOUNT}"),
        // Quoted: Hydra's grammar takes no bare `=` in a value (base64's padding).
        format!("++workload.storage.storage_options.account_key='{ACCOUNT_KEY}'"),
    ]
}

/// How long a start may take before it is given up (a normal start takes ~1 s).
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Servers started in this process, to name their folders.
static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
/// Starts retried on a fresh port when the server dies early (another process took the port).
const START_ATTEMPTS: usize = 3;

/// Runs Azurite as a child of a small `sh` that kills it when our end of its stdin closes, so
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

/// One running Azurite. Dropping it kills the server (SIGKILL, never hangs) and removes its
/// folder.
pub struct Azurite {
    child: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
    dir: PathBuf,
    port: u16,
    stopped: bool,
}

impl Azurite {
    /// Starts a server with its own folder under `parent` and waits until it answers HTTP; on
    /// failure the error carries the tail of its log, and the folder is kept.
    pub fn start(parent: &Path) -> Result<Azurite, String> {
        let binary = azurite_binary()?;
        fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
        let mut failures = Vec::new();
        for attempt in 1..=START_ATTEMPTS {
            // Unique in this process: tests start servers side by side.
            let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let dir = parent.join(format!("azurite-{}-{n}", std::process::id()));
            let _ = fs::remove_dir_all(&dir);
            fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            match Self::try_start(&binary, &dir) {
                Ok(server) => return Ok(server),
                Err(why) => failures.push(format!("attempt {attempt}: {why}")),
            }
        }
        Err(format!(
            "Azurite ({}) did not start:\n{}",
            binary.display(),
            failures.join("\n")
        ))
    }

    fn try_start(binary: &Path, dir: &Path) -> Result<Azurite, String> {
        let log = dir.join("azurite.log");
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
            .arg("azurite-watchdog")
            .arg(&log)
            .arg(binary)
            .args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            .arg("--location")
            .arg(dir.join("data"))
            .args([
                "--skipApiVersionCheck",
                "--loose",
                "--silent",
                "--disableTelemetry",
            ])
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
        let mut server = Azurite {
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
                    "azurite-blob exited ({status}) on port {port}; log:\n{}",
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

    /// The Blob endpoint, e.g. `http://127.0.0.1:12345` (the account is added to its path).
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
        assert!(!self.stopped, "SIG{name} to a stopped Azurite");
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

impl Drop for Azurite {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// The `azurite-blob` launcher: `$DLIO_RS_AZURITE` if set, else the first on `PATH`. An error
/// naming the install command if there is none: the Azure tests must fail, not skip.
fn azurite_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("DLIO_RS_AZURITE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("azurite-blob"))
                .find(|p| p.is_file())
        })
        .ok_or_else(|| {
            "azurite-blob not found ($DLIO_RS_AZURITE unset, not on PATH); install it with \
             `npm install -g azurite` or set DLIO_RS_AZURITE"
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
