//! One request to the bucket, made until it succeeds or its attempts run out: signed by rusty-s3
//! (a presigned URL per attempt, so a retry is never refused as stale), sent by ureq, bounded in
//! time (a connection or a read that waits past `request_timeout` fails and is retried) and in
//! number (at most `max_in_flight` at once in this process), and counted per kind of request
//! (attempts, retries, bytes, latency) for the report.
//!
//! Retried: connection failures, resets and timeouts, 500/502/503/504 and 429 (S3's `SlowDown`
//! and `ServiceUnavailable`), with exponential backoff and full jitter (AWS's advice), up to
//! `s3_max_attempts` in all. Not retried: what another attempt would not change (403, 404, 400).
//! A failure names the request, the bucket and key, the HTTP status and S3's error code.

use std::fmt;
use std::io::{self, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rusty_s3::{Bucket, Credentials};

use super::settings::Settings;
use crate::storage::requests::{KindCounts, RequestCounts, RequestKind, WriteChecks};

/// A request that failed for good.
#[derive(Debug)]
pub struct RequestError {
    pub kind: RequestKind,
    /// `s3://bucket/key`.
    pub object: String,
    /// The last attempt's HTTP status, if a response came.
    pub status: Option<u16>,
    /// S3's error code (`NoSuchKey`, `SlowDown`, `InvalidAccessKeyId`…) or what failed.
    pub code: String,
    pub message: String,
    pub attempts: u32,
    /// The endpoint asked, named where the store has several.
    pub endpoint: Option<String>,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.kind.name(), self.object)?;
        if let Some(endpoint) = &self.endpoint {
            write!(f, " at endpoint {endpoint}")?;
        }
        write!(f, ": ")?;
        if let Some(status) = self.status {
            write!(f, "HTTP {status} ")?;
        }
        write!(f, "{}", self.code)?;
        if !self.message.is_empty() {
            write!(f, " ({})", self.message)?;
        }
        if self.attempts > 1 {
            write!(f, ", after {} attempts", self.attempts)?;
        }
        Ok(())
    }
}

impl std::error::Error for RequestError {}

impl RequestError {
    fn into_io(self) -> io::Error {
        let kind = match self.status {
            Some(404) => io::ErrorKind::NotFound,
            Some(401 | 403) => io::ErrorKind::PermissionDenied,
            Some(_) => io::ErrorKind::Other,
            None if self.code == "timeout" => io::ErrorKind::TimedOut,
            None => io::ErrorKind::ConnectionAborted,
        };
        io::Error::new(kind, self)
    }
}

/// What an attempt ended with, when it did not succeed.
enum Failure {
    /// Another attempt may succeed: a connection or read that failed, or a server that asks for
    /// time (5xx, 429).
    Transient {
        status: Option<u16>,
        code: String,
        message: String,
    },
    /// Another attempt would fail the same way (a status, or no answer: a refused certificate).
    Final {
        status: Option<u16>,
        code: String,
        message: String,
    },
}

impl Failure {
    fn of_transport(error: ureq::Error, https: bool) -> Failure {
        // A certificate this client does not trust stays untrusted. rustls reports it, and any
        // other failure to agree, as invalid data read from the connection.
        let refused = match &error {
            ureq::Error::Tls(_) | ureq::Error::Rustls(_) => true,
            ureq::Error::Io(e) => https && e.kind() == io::ErrorKind::InvalidData,
            _ => false,
        };
        if refused {
            return Failure::Final {
                status: None,
                code: TLS_REFUSED.to_string(),
                message: error.to_string(),
            };
        }
        let code = match &error {
            ureq::Error::Timeout(_) => "timeout",
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => "connection failed",
            _ => "connection error",
        };
        Failure::Transient {
            status: None,
            code: code.to_string(),
            message: error.to_string(),
        }
    }

    fn of_body(error: io::Error) -> Failure {
        let timed_out = error.kind() == io::ErrorKind::TimedOut
            || error.to_string().to_ascii_lowercase().contains("timeout");
        Failure::Transient {
            status: None,
            code: if timed_out {
                "timeout"
            } else {
                "connection error"
            }
            .to_string(),
            message: format!("while receiving the body: {error}"),
        }
    }
}

/// The response of an attempt that the caller takes: its status and body.
pub struct Response {
    pub status: u16,
    inner: ureq::http::Response<ureq::Body>,
}

impl Response {
    pub fn content_length(&self) -> Option<u64> {
        self.inner
            .headers()
            .get("content-length")
            .and_then(|v| v.to_str().ok()?.parse().ok())
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.inner.headers().get(name)?.to_str().ok()
    }

    pub fn body(&mut self) -> impl Read + '_ {
        self.inner.body_mut().as_reader()
    }

    /// The whole body as text (XML answers: a few KiB at most).
    pub fn text(&mut self) -> io::Result<String> {
        let mut text = String::new();
        self.body().take(16 << 20).read_to_string(&mut text)?;
        Ok(text)
    }
}

/// What a caller does with a response it accepted; an I/O error while reading the body is
/// transient (the attempt is made again).
pub type Take<'a, T> = dyn FnMut(&mut Response) -> io::Result<T> + 'a;

/// A request to make: its method, signed URL (made anew per attempt), headers and body.
pub struct Request<'a> {
    pub kind: RequestKind,
    /// The key, for messages (the bucket is added).
    pub key: &'a str,
    pub method: rusty_s3::Method,
    pub url: &'a dyn Fn() -> url::Url,
    pub headers: Vec<(&'static str, String)>,
    pub body: Option<&'a [u8]>,
    /// Statuses besides 2xx that the caller takes as answers (404 for "absent", 416 for a range
    /// past the end).
    pub also_accept: &'a [u16],
}

pub struct Client {
    agent: ureq::Agent,
    pub bucket: Bucket,
    pub credentials: Option<Credentials>,
    /// The endpoint's URL as configured.
    pub endpoint: String,
    /// Whether failures name the endpoint: the store has several.
    name_endpoint: bool,
    pub max_attempts: u32,
    /// Shared by the endpoints' clients: `max_in_flight` bounds the process.
    gate: std::sync::Arc<Gate>,
    counts: Mutex<RequestCounts>,
}

/// The code of a failure to agree on TLS with the server (its certificate refused, most often).
pub const TLS_REFUSED: &str = "TLS refused";

/// How long a presigned URL stays valid: long enough for a slow upload of a part to start.
pub const SIGNATURE_LIFETIME: Duration = Duration::from_secs(3600);

/// The first retry waits up to this long; each next one up to twice as long, up to
/// [`BACKOFF_CAP`].
const BACKOFF_BASE: Duration = Duration::from_millis(50);
const BACKOFF_CAP: Duration = Duration::from_secs(5);

impl Client {
    /// A client of `bucket` at the endpoint `endpoint`, one of `endpoints` of the store.
    pub fn new(
        settings: &Settings,
        (endpoint, bucket): (String, Bucket),
        endpoints: usize,
        connections: usize,
        gate: &std::sync::Arc<Gate>,
    ) -> Client {
        let timeout = Some(settings.request_timeout);
        let roots = match &settings.authorities {
            Some(certificates) => ureq::tls::RootCerts::new_with_certs(certificates),
            None => ureq::tls::RootCerts::WebPki,
        };
        let agent = ureq::Agent::config_builder()
            .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
            // Error statuses are answers to read (S3's XML error), not failures of the call.
            .http_status_as_error(false)
            .timeout_connect(timeout)
            .timeout_per_read(timeout)
            .timeout_per_write(timeout)
            // One kept connection per thread that makes requests: a reader never waits for one.
            .max_idle_connections_per_host(connections.max(8))
            .max_idle_connections(connections.max(8))
            .max_redirects(0)
            .user_agent(concat!("dlio-rs/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        Client {
            agent,
            bucket,
            credentials: settings.credentials.clone(),
            endpoint,
            name_endpoint: endpoints > 1,
            max_attempts: settings.max_attempts.max(1),
            gate: std::sync::Arc::clone(gate),
            counts: Mutex::new(RequestCounts::default()),
        }
    }

    pub fn object(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.bucket.name())
    }

    pub fn counts(&self) -> RequestCounts {
        let mut counts = self
            .counts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        counts.peak_in_flight = self.gate.peak.load(Ordering::Relaxed) as u64;
        counts
    }

    /// Makes `request` until an attempt is answered with 2xx or a status it accepts, and `take`
    /// reads that answer; `bytes` of `take`'s result are counted as moved.
    pub fn send<T>(
        &self,
        request: &Request<'_>,
        take: &mut Take<'_, T>,
        bytes: impl Fn(&T) -> u64,
    ) -> io::Result<T> {
        let started = Instant::now();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let outcome = {
                let _slot = self.gate.enter();
                self.attempt(request, take)
            };
            let failure = match outcome {
                Ok(value) => {
                    self.count(request.kind, |c| {
                        c.requests += 1;
                        c.retries += u64::from(attempt - 1);
                        c.bytes += bytes(&value);
                        c.latency.record(started.elapsed().as_nanos() as u64);
                    });
                    return Ok(value);
                }
                Err(failure) => failure,
            };
            let (status, code, message, again) = match failure {
                Failure::Transient {
                    status,
                    code,
                    message,
                } => (status, code, message, attempt < self.max_attempts),
                Failure::Final {
                    status,
                    code,
                    message,
                } => (status, code, message, false),
            };
            if !again {
                self.count(request.kind, |c| {
                    c.failures += 1;
                    c.retries += u64::from(attempt - 1);
                });
                return Err(RequestError {
                    kind: request.kind,
                    object: self.object(request.key),
                    status,
                    code,
                    message,
                    attempts: attempt,
                    endpoint: self.name_endpoint.then(|| self.endpoint.clone()),
                }
                .into_io());
            }
            // A signal ends the retries: the run is stopping.
            if crate::interrupt::received().is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    format!(
                        "{} {}: stopped retrying ({code}) as the run was interrupted",
                        request.kind.name(),
                        self.object(request.key)
                    ),
                ));
            }
            crate::interrupt::sleep_until(Instant::now() + backoff(attempt));
        }
    }

    fn attempt<T>(&self, request: &Request<'_>, take: &mut Take<'_, T>) -> Result<T, Failure> {
        let url = (request.url)();
        let mut builder = ureq::http::Request::builder()
            .method(request.method.to_str())
            .uri(url.as_str());
        for (name, value) in &request.headers {
            builder = builder.header(*name, value);
        }
        let sent = match request.body {
            Some(body) => builder.body(body).map(|r| self.agent.run(r)),
            None => builder.body(()).map(|r| self.agent.run(r)),
        };
        let inner = match sent {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => return Err(Failure::of_transport(error, url.scheme() == "https")),
            Err(error) => {
                return Err(Failure::Final {
                    status: None,
                    code: "bad request".to_string(),
                    message: error.to_string(),
                })
            }
        };
        let mut response = Response {
            status: inner.status().as_u16(),
            inner,
        };
        let status = response.status;
        if (200..300).contains(&status) || request.also_accept.contains(&status) {
            return take(&mut response).map_err(Failure::of_body);
        }
        // S3 says what went wrong in an XML body (none for HEAD).
        let text = response.text().unwrap_or_default();
        let code = xml_field(&text, "Code")
            .unwrap_or_else(|| reason(status))
            .to_string();
        let message = xml_field(&text, "Message").unwrap_or("").to_string();
        if matches!(status, 429 | 500 | 502 | 503 | 504) {
            Err(Failure::Transient {
                status: Some(status),
                code,
                message,
            })
        } else {
            Err(Failure::Final {
                status: Some(status),
                code,
                message,
            })
        }
    }

    /// Records a check of a written object (`storage_options.verify_writes`).
    pub fn count_writes(&self, change: impl FnOnce(&mut WriteChecks)) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut counts.writes);
    }

    fn count(&self, kind: RequestKind, change: impl FnOnce(&mut KindCounts)) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut counts.kinds[kind as usize]);
    }
}

/// The wait before attempt `attempt + 1`: uniform in [0, min(cap, base × 2^(attempt-1))].
fn backoff(attempt: u32) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1 << (attempt - 1).min(16))
        .min(BACKOFF_CAP);
    ceiling.mul_f64(rand::rngs::SmallRng::from_os_rng().random::<f64>())
}

/// The text of the first `<name>…</name>` in an S3 XML answer.
pub fn xml_field<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find("</")? + start;
    Some(&text[start..end])
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        416 => "InvalidRange",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "error",
    }
}

/// At most `limit` requests in flight (0: no limit), and the most seen.
pub struct Gate {
    limit: usize,
    in_flight: Mutex<usize>,
    freed: Condvar,
    peak: AtomicUsize,
    current: AtomicUsize,
}

struct Slot<'g>(&'g Gate);

impl Gate {
    pub fn new(limit: usize) -> Gate {
        Gate {
            limit,
            in_flight: Mutex::new(0),
            freed: Condvar::new(),
            peak: AtomicUsize::new(0),
            current: AtomicUsize::new(0),
        }
    }

    fn enter(&self) -> Slot<'_> {
        if self.limit > 0 {
            let mut in_flight = self.in_flight.lock().unwrap_or_else(|e| e.into_inner());
            while *in_flight >= self.limit {
                in_flight = self
                    .freed
                    .wait(in_flight)
                    .unwrap_or_else(|e| e.into_inner());
            }
            *in_flight += 1;
        }
        let now = self.current.fetch_add(1, Ordering::Relaxed) + 1;
        self.peak.fetch_max(now, Ordering::Relaxed);
        Slot(self)
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let gate = self.0;
        gate.current.fetch_sub(1, Ordering::Relaxed);
        if gate.limit > 0 {
            *gate.in_flight.lock().unwrap_or_else(|e| e.into_inner()) -= 1;
            gate.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stays_under_its_cap() {
        for attempt in 1..40 {
            let ceiling = BACKOFF_BASE
                .saturating_mul(1 << (attempt - 1).min(16))
                .min(BACKOFF_CAP);
            for _ in 0..20 {
                assert!(backoff(attempt) <= ceiling);
            }
        }
        assert_eq!(
            BACKOFF_BASE.saturating_mul(1 << 16).min(BACKOFF_CAP),
            BACKOFF_CAP
        );
    }

    #[test]
    fn the_gate_lets_through_at_most_its_limit() {
        let gate = Gate::new(3);
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let _slot = gate.enter();
                        assert!(gate.current.load(Ordering::Relaxed) <= 3);
                    }
                });
            }
        });
        assert!(gate.peak.load(Ordering::Relaxed) <= 3);
        assert_eq!(*gate.in_flight.lock().unwrap(), 0);
    }

    #[test]
    fn s3_error_answers_are_read() {
        let text = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>\
                    <Message>Please reduce your request rate.</Message></Error>";
        assert_eq!(xml_field(text, "Code"), Some("SlowDown"));
        assert_eq!(
            xml_field(text, "Message"),
            Some("Please reduce your request rate.")
        );
        assert_eq!(xml_field(text, "Key"), None);
    }
}
