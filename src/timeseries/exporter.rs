//! The live view for dashboards: a Prometheus text endpoint (`GET /metrics`, exposition format
//! 0.0.4, which Prometheus, VictoriaMetrics, Grafana Agent and OpenMetrics scrapers read) on the
//! address `output.metrics_listen` names, served by each process for its own ranks and host.
//!
//! The page is rendered by the sampler at each interval's end from the readings it takes anyway,
//! and kept whole; a scrape copies it out. So scraping costs the ranks nothing, and a scrape
//! shows one interval's consistent state, at most an interval old.
//!
//! Hand-written on `std::net` (one request at a time, bounded in size and time): the endpoint
//! answers one GET with one text page, which a web framework or a metrics crate would bring
//! dozens of dependencies for.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::error::{Error, Result};

/// Longest request head read.
const MAX_HEAD: usize = 8 * 1024;
/// The pause after a failed accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// How long a client may take to send its request, and to take the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

/// The endpoint: a bound listener and the page it serves.
pub struct Exporter {
    listener: TcpListener,
    address: SocketAddr,
    page: Mutex<Arc<String>>,
    stop: AtomicBool,
}

impl Exporter {
    /// Listens on `address` (`output.metrics_listen`, with this process's port offset applied);
    /// a port that is taken or an address not on this host is a usage error naming it.
    pub fn bind(address: SocketAddr) -> Result<Exporter> {
        let listener = TcpListener::bind(address).map_err(|e| {
            Error::usage(format!(
                "output.metrics_listen: cannot listen on {address}: {e} (give a free port, e.g. \
                 --metrics-listen 9464, or an address of this host)"
            ))
        })?;
        let address = listener.local_addr().unwrap_or(address);
        Ok(Exporter {
            listener,
            address,
            page: Mutex::new(Arc::new(String::new())),
            stop: AtomicBool::new(false),
        })
    }

    /// The address it listens on.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Replaces the page served (called by the sampler each interval).
    pub(super) fn publish(&self, page: String) {
        *self.page.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(page);
    }

    /// Answers scrapes until [`Exporter::stop`]; one at a time, each bounded by
    /// `CLIENT_TIMEOUT`.
    pub fn serve(&self) {
        for stream in self.listener.incoming() {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            match stream {
                // A client that misbehaves only loses its own answer.
                Ok(stream) => {
                    let _ = self.answer(stream);
                }
                // Out of descriptors or memory: a pause, so that a failing accept does not spin
                // a core the run's readers need.
                Err(_) => std::thread::sleep(ACCEPT_BACKOFF),
            }
        }
    }

    /// Ends [`Exporter::serve`]: it wakes on a connection of its own and sees the flag.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.wake_address(), CLIENT_TIMEOUT);
    }

    /// Where to connect to wake the listener: its own address (loopback for a wildcard).
    fn wake_address(&self) -> SocketAddr {
        let mut address = self.address;
        if address.ip().is_unspecified() {
            address.set_ip(match address {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        address
    }

    fn answer(&self, mut stream: TcpStream) -> std::io::Result<()> {
        stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
        stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
        let head = read_head(&mut stream)?;
        let request = head.lines().next().unwrap_or_default();
        let mut parts = request.split_whitespace();
        let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let path = target.split('?').next().unwrap_or("");
        let (status, kind, body) = match (method, path) {
            ("GET" | "HEAD", "/metrics") => {
                let page = Arc::clone(&self.page.lock().unwrap_or_else(|p| p.into_inner()));
                ("200 OK", "text/plain; version=0.0.4; charset=utf-8", page)
            }
            ("GET" | "HEAD", _) => (
                "404 Not Found",
                "text/plain; charset=utf-8",
                Arc::new("dlio-rs serves its metrics at /metrics\n".to_string()),
            ),
            _ => (
                "405 Method Not Allowed",
                "text/plain; charset=utf-8",
                Arc::new("GET /metrics\n".to_string()),
            ),
        };
        let mut answer = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        if method != "HEAD" {
            answer.extend_from_slice(body.as_bytes());
        }
        stream.write_all(&answer)?;
        stream.flush()
    }
}

/// The request head (up to its blank line, at most [`MAX_HEAD`] bytes).
fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let n = stream.read(&mut chunk)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// A page of metrics in Prometheus's text format, built family by family.
#[derive(Default)]
pub(super) struct Page {
    text: String,
    /// The labels every sample carries (`host`, `workload`, …), rendered once.
    common: String,
}

impl Page {
    /// A page whose every sample carries `labels`.
    pub fn new(labels: &[(&str, &str)]) -> Page {
        let common = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect::<Vec<_>>()
            .join(",");
        Page {
            text: String::new(),
            common,
        }
    }

    /// Starts the family `name` of `kind` (`counter`, `gauge`, `histogram`).
    pub fn family(&mut self, name: &str, kind: &str, help: &str) {
        use std::fmt::Write as _;
        let _ = writeln!(self.text, "# HELP {name} {help}");
        let _ = writeln!(self.text, "# TYPE {name} {kind}");
    }

    /// One sample of `name` with `labels` besides the common ones.
    pub fn sample(&mut self, name: &str, labels: &[(&str, String)], value: f64) {
        use std::fmt::Write as _;
        let mut all = self.common.clone();
        for (k, v) in labels {
            if !all.is_empty() {
                all.push(',');
            }
            let _ = write!(all, "{k}=\"{}\"", escape(v));
        }
        let value = if value.is_finite() {
            format!("{value}")
        } else if value.is_nan() {
            "NaN".to_string()
        } else if value > 0.0 {
            "+Inf".to_string()
        } else {
            "-Inf".to_string()
        };
        let _ = writeln!(self.text, "{name}{{{all}}} {value}");
    }

    pub fn into_text(self) -> String {
        self.text
    }
}

/// A label value with `\`, `"` and newlines escaped, as the format asks.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_escapes_labels_and_names_each_family() {
        let mut page = Page::new(&[("host", "a\"b")]);
        page.family("dlio_x_total", "counter", "X.");
        page.sample("dlio_x_total", &[("rank", "3".into())], 2.5);
        page.sample("dlio_x_total", &[], f64::INFINITY);
        let text = page.into_text();
        assert_eq!(
            text,
            "# HELP dlio_x_total X.\n# TYPE dlio_x_total counter\n\
             dlio_x_total{host=\"a\\\"b\",rank=\"3\"} 2.5\ndlio_x_total{host=\"a\\\"b\"} +Inf\n"
        );
    }

    #[test]
    fn the_endpoint_serves_the_page_published_and_stops() {
        let exporter = Exporter::bind(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        exporter.publish("dlio_up 1\n".into());
        std::thread::scope(|s| {
            s.spawn(|| exporter.serve());
            let get = |path: &str| {
                let mut c = TcpStream::connect(exporter.address()).unwrap();
                write!(c, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
                let mut answer = String::new();
                c.read_to_string(&mut answer).unwrap();
                answer
            };
            let ok = get("/metrics");
            assert!(ok.starts_with("HTTP/1.1 200 OK\r\n"), "{ok}");
            assert!(ok.ends_with("\r\n\r\ndlio_up 1\n"), "{ok}");
            assert!(get("/").starts_with("HTTP/1.1 404"));
            exporter.stop();
        });
        // The port is taken while the exporter lives: a second one is refused, naming it.
        let again = Exporter::bind(exporter.address())
            .err()
            .unwrap()
            .to_string();
        assert!(again.contains(&exporter.address().to_string()), "{again}");
    }
}
