//! A real Azure Blob server for tests: one Azurite `azurite-blob` per test, on a free loopback
//! port, with its own folder, enforcing SharedKey signatures with its well-known development
//! account; started, watched and killed by [`watched`].
//!
//! Standard library only, and no `crate::` paths but its sibling `super::watched`, so the file can
//! be included both as `mod azurite;` from `tests/common/mod.rs` and with `#[path]` from a library
//! unit test or a benchmark, beside `watched.rs`.
//!
//! Azurite comes from npm (`npm install -g azurite`, as `.ci/run` does). Facts this launcher
//! relies on (Azurite 3.35):
//! - `--skipApiVersionCheck` lets it take the API version dlio-rs names, `--loose` ignores the
//!   headers it does not know, `--silent` and `--disableTelemetry` keep it quiet and offline;
//! - it serves accounts by path (`http://127.0.0.1:PORT/devstoreaccount1/container/blob`) and
//!   answers any request once it listens (403 to an unsigned one);
//! - SIGKILL stops it at once.

use super::watched;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

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

/// One running Azurite. Dropping it kills the server (SIGKILL, never hangs) and removes its
/// folder.
pub struct Azurite(watched::HttpServer);

impl Azurite {
    /// Starts a server with its own folder under `parent` and waits until it answers HTTP; on
    /// failure the error carries the tail of its log, and the folder is kept.
    pub fn start(parent: &Path) -> Result<Azurite, String> {
        let binary = azurite_binary()?;
        let args = |port: u16, dir: &Path| {
            let mut args: Vec<String> = ["--blobHost", "127.0.0.1", "--blobPort"]
                .map(String::from)
                .into();
            args.push(port.to_string());
            args.push("--location".to_string());
            args.push(dir.join("data").display().to_string());
            args.extend(
                [
                    "--skipApiVersionCheck",
                    "--loose",
                    "--silent",
                    "--disableTelemetry",
                ]
                .map(String::from),
            );
            args
        };
        watched::start_http_server(parent, "azurite", &binary, args).map(Azurite)
    }

    /// The Blob endpoint, e.g. `http://127.0.0.1:12345` (the account is added to its path).
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
