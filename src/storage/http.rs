//! One request to an object store's REST API (S3, Azure Blob Storage, Google Cloud Storage),
//! made until it succeeds or its attempts run out: sent by ureq, its URL made and authenticated
//! anew per attempt by the store's [`Service`] (a signature covers the time of its request),
//! bounded in time (a connection or a read that waits past `request_timeout` fails and is
//! retried) and in number (at most `max_in_flight` at once in this process, across the
//! endpoints of one store), and counted per kind of request (attempts, retries, redirects,
//! bytes, latency) for the report.
//!
//! Retried: connection failures, resets and timeouts, 500/502/503/504 and 429 (S3's `SlowDown`
//! and `ServiceUnavailable`), with exponential backoff and full jitter (AWS's advice), up to
//! `s3_max_attempts` in all. Not retried: what another attempt would not change (403, 404, 400),
//! nor a certificate the client does not trust. A failure names the request, the object, the
//! endpoint where the store has several, the HTTP status and the store's error code.
//!
//! Redirects are followed (at most [`MAX_REDIRECTS`] per attempt): the same method, headers and
//! body sent again to the answer's `Location`, authenticated for it — AIStore's gateways answer
//! every S3 request with a 307 to the target that holds the object. A 303 is followed with a
//! GET, as HTTP says. An answer of 301 without a `Location` (AWS's `PermanentRedirect`, a bucket
//! of another region) is an error naming its code.

use std::fmt;
use std::io::{self, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};

use super::requests::{KindCounts, RequestCounts, RequestKind};

/// What an object store adds to the rules: how it authenticates a request and how it says why
/// one failed.
pub trait Service: Send + Sync {
    /// Adds to `headers` what authenticates one attempt of `method` on `url` with a body of
    /// `body_len` bytes.
    fn authorize(
        &self,
        method: &str,
        url: &url::Url,
        headers: &mut Vec<(&'static str, String)>,
        body_len: usize,
    ) -> io::Result<()>;

    /// The store's error code and message of a failed answer, from its headers and body.
    fn error_of(&self, response: &Response, body: &str) -> (Option<String>, String);

    /// How failures name the object a request gave as `object` (the store's URI of it).
    fn name(&self, object: &str) -> String {
        object.to_string()
    }
}

/// How requests are made: from the configuration's `storage_options`.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_attempts: u32,
    /// 0: no cap.
    pub max_in_flight: usize,
    pub request_timeout: Duration,
    /// The certificate authorities `https` is checked against; `None`: the public ones.
    pub authorities: Option<Vec<ureq::tls::Certificate<'static>>>,
}

impl Limits {
    /// The limits `options` set, `https` checked against the certificates of the PEM bundle
    /// `ca_bundle` (where it came from named by `source` in messages) or the public ones.
    pub fn of(
        options: &crate::config::ObjectStoreOptions,
        ca_bundle: Option<&str>,
        source: &str,
    ) -> crate::error::Result<Limits> {
        let authorities = match ca_bundle {
            Some(path) => Some(read_authorities(std::path::Path::new(path), source)?),
            None => None,
        };
        Ok(Limits {
            max_attempts: options.max_attempts,
            max_in_flight: options.max_in_flight as usize,
            request_timeout: Duration::from_secs_f64(options.request_timeout),
            authorities,
        })
    }
}

/// A request that failed for good.
#[derive(Debug)]
pub struct RequestError {
    pub kind: RequestKind,
    /// The object or container, as the store's URI names it.
    pub object: String,
    /// The last attempt's HTTP status, if a response came.
    pub status: Option<u16>,
    /// The store's error code (`BlobNotFound`, `AuthenticationFailed`…) or what failed.
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

    /// The request failure inside `error`, if it is one.
    #[cfg(any(feature = "azure", feature = "gcs"))]
    pub fn of(error: &io::Error) -> Option<&RequestError> {
        error.get_ref()?.downcast_ref::<RequestError>()
    }
}

/// The code of a failure to agree on TLS with the server (its certificate refused, most often).
pub const TLS_REFUSED: &str = "TLS refused";

/// What an attempt ended with, when it did not succeed: whether another attempt may succeed
/// (a connection or read that failed, a server asking for time), and why.
struct Failure {
    transient: bool,
    status: Option<u16>,
    code: String,
    message: String,
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
        let code = match &error {
            _ if refused => TLS_REFUSED,
            ureq::Error::Timeout(_) => "timeout",
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => "connection failed",
            _ => "connection error",
        };
        Failure {
            transient: !refused,
            status: None,
            code: code.to_string(),
            message: error.to_string(),
        }
    }

    fn of_body(error: io::Error) -> Failure {
        let timed_out = error.kind() == io::ErrorKind::TimedOut
            || error.to_string().to_ascii_lowercase().contains("timeout");
        Failure {
            transient: true,
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

/// The response of an attempt that the caller takes: its status, headers and body.
pub struct Response {
    pub status: u16,
    inner: ureq::http::Response<ureq::Body>,
}

impl Response {
    pub fn content_length(&self) -> Option<u64> {
        self.header("content-length")?.parse().ok()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.inner.headers().get(name)?.to_str().ok()
    }

    pub fn body(&mut self) -> impl Read + '_ {
        self.inner.body_mut().as_reader()
    }

    /// The whole body as text (XML or JSON answers: a few KiB at most).
    pub fn text(&mut self) -> io::Result<String> {
        let mut text = String::new();
        self.body().take(16 << 20).read_to_string(&mut text)?;
        Ok(text)
    }
}

/// What a caller does with a response it accepted; an I/O error while reading the body is
/// transient (the attempt is made again).
pub type Take<'a, T> = dyn FnMut(&mut Response) -> io::Result<T> + 'a;

/// A request to make: its method, URL, headers (authentication is added per attempt) and body.
pub struct Request<'a> {
    pub kind: RequestKind,
    /// What it acts on, for messages: given to [`Service::name`].
    pub object: &'a str,
    pub method: &'static str,
    /// The URL of an attempt, made anew for each (S3's presigned URLs carry their time).
    pub url: &'a dyn Fn() -> url::Url,
    pub headers: Vec<(&'static str, String)>,
    pub body: Option<&'a [u8]>,
    /// Statuses besides 2xx that the caller takes as answers (404 for "absent", 416 for a range
    /// past the end, 412 for a condition that did not hold).
    pub also_accept: &'a [u16],
}

/// A request to a URL that stays the same for every attempt (the stores whose URLs carry no
/// signature: Azure, GCS): its kind, method and URL, then what it has besides, as
/// `Call::new(kind, "PUT", url).headers(h).body(data).accepting(&[409])`.
#[cfg(any(feature = "azure", feature = "gcs"))]
pub struct Call<'a> {
    kind: RequestKind,
    method: &'static str,
    url: url::Url,
    headers: Vec<(&'static str, String)>,
    body: Option<&'a [u8]>,
    also_accept: &'a [u16],
}

#[cfg(any(feature = "azure", feature = "gcs"))]
impl<'a> Call<'a> {
    /// A request with no headers and no body, answered by 2xx alone.
    pub fn new(kind: RequestKind, method: &'static str, url: &url::Url) -> Call<'a> {
        Call {
            kind,
            method,
            url: url.clone(),
            headers: Vec::new(),
            body: None,
            also_accept: &[],
        }
    }

    pub fn headers(mut self, headers: Vec<(&'static str, String)>) -> Call<'a> {
        self.headers = headers;
        self
    }

    pub fn body(mut self, body: &'a [u8]) -> Call<'a> {
        self.body = Some(body);
        self
    }

    /// Statuses besides 2xx that the caller takes as answers.
    pub fn accepting(mut self, statuses: &'a [u16]) -> Call<'a> {
        self.also_accept = statuses;
        self
    }
}

pub struct Client<S> {
    agent: ureq::Agent,
    pub service: S,
    max_attempts: u32,
    /// Shared by the endpoints of one store: `max_in_flight` bounds the process.
    gate: Arc<Gate>,
    counts: Mutex<RequestCounts>,
    /// Named in failures, where the store has several endpoints.
    endpoint: Option<String>,
}

/// Redirects followed within one attempt; one more is a failure (a loop, most often).
pub const MAX_REDIRECTS: u32 = 10;

/// The first retry waits up to this long; each next one up to twice as long, up to
/// [`BACKOFF_CAP`] (S3's rules).
const BACKOFF_BASE: Duration = Duration::from_millis(50);
const BACKOFF_CAP: Duration = Duration::from_secs(5);

impl<S: Service> Client<S> {
    /// A client of `service` for about `connections` threads making requests at once, its own
    /// `max_in_flight` gate.
    #[cfg(any(feature = "azure", feature = "gcs"))]
    pub fn new(service: S, limits: &Limits, connections: usize) -> Client<S> {
        let gate = Arc::new(Gate::new(limits.max_in_flight));
        Client::of_endpoint(service, limits, connections, &gate, None)
    }

    /// A client of `service`, one endpoint (named in failures: `endpoint`) of a store whose
    /// endpoints share `gate`.
    pub fn of_endpoint(
        service: S,
        limits: &Limits,
        connections: usize,
        gate: &Arc<Gate>,
        endpoint: Option<String>,
    ) -> Client<S> {
        let timeout = Some(limits.request_timeout);
        let roots = match &limits.authorities {
            Some(certificates) => ureq::tls::RootCerts::new_with_certs(certificates),
            None => ureq::tls::RootCerts::WebPki,
        };
        let agent = ureq::Agent::config_builder()
            .tls_config(ureq::tls::TlsConfig::builder().root_certs(roots).build())
            // Error statuses are answers to read (the store's error body), not failures.
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
            service,
            max_attempts: limits.max_attempts.max(1),
            gate: Arc::clone(gate),
            counts: Mutex::new(RequestCounts::default()),
            endpoint,
        }
    }

    /// Attempts a request gets in all (`s3_max_attempts`).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// How failures name `object`.
    pub fn name(&self, object: &str) -> String {
        self.service.name(object)
    }

    /// Records a check of a written object (`storage_options.verify_writes`).
    pub fn count_writes(&self, change: impl FnOnce(&mut super::requests::WriteChecks)) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut counts.writes);
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

    /// Makes `call` for `object` (as failures name it) until it is answered, its answer taken by
    /// `take`; the bytes of the body sent are counted with those `received` of the answer. The
    /// calls of the stores whose URLs carry no signature (Azure, GCS).
    #[cfg(any(feature = "azure", feature = "gcs"))]
    pub fn call<T>(
        &self,
        object: &str,
        call: Call<'_>,
        take: &mut Take<'_, T>,
        received: impl Fn(&T) -> u64,
    ) -> io::Result<T> {
        let at = || call.url.clone();
        let request = Request {
            kind: call.kind,
            object,
            method: call.method,
            url: &at,
            headers: call.headers,
            body: call.body,
            also_accept: call.also_accept,
        };
        let sent = call.body.map_or(0, |b| b.len() as u64);
        self.send(&request, take, |answer| sent + received(answer))
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
        let mut redirects = 0;
        loop {
            attempt += 1;
            let (outcome, hops) = {
                let _slot = self.gate.enter();
                self.attempt(request, take)
            };
            redirects += u64::from(hops);
            let failure = match outcome {
                Ok(value) => {
                    self.count(request.kind, |c| {
                        c.requests += 1;
                        c.retries += u64::from(attempt - 1);
                        c.redirects += redirects;
                        c.bytes += bytes(&value);
                        c.latency.record(started.elapsed().as_nanos() as u64);
                    });
                    return Ok(value);
                }
                Err(failure) => failure,
            };
            if !failure.transient || attempt >= self.max_attempts {
                self.count(request.kind, |c| {
                    c.failures += 1;
                    c.retries += u64::from(attempt - 1);
                    c.redirects += redirects;
                });
                return Err(RequestError {
                    kind: request.kind,
                    object: self.name(request.object),
                    status: failure.status,
                    code: failure.code,
                    message: failure.message,
                    attempts: attempt,
                    endpoint: self.endpoint.clone(),
                }
                .into_io());
            }
            // A signal ends the retries: the run is stopping.
            if crate::interrupt::received().is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::Interrupted,
                    format!(
                        "{} {}: stopped retrying ({}) as the run was interrupted",
                        request.kind.name(),
                        self.name(request.object),
                        failure.code
                    ),
                ));
            }
            crate::interrupt::sleep_until(Instant::now() + backoff(attempt));
        }
    }

    /// One attempt, following redirects; returns how many it followed.
    fn attempt<T>(
        &self,
        request: &Request<'_>,
        take: &mut Take<'_, T>,
    ) -> (Result<T, Failure>, u32) {
        let mut url = (request.url)();
        let (mut method, mut body) = (request.method, request.body);
        let mut hops = 0;
        loop {
            let response = match self.exchange(request, method, &url, body) {
                Ok(response) => response,
                Err(failure) => return (Err(failure), hops),
            };
            let mut response = match redirected(response, &url, request.also_accept) {
                Redirect::No(response) => response,
                Redirect::To(next, status) => {
                    if hops == MAX_REDIRECTS {
                        let failure = Failure {
                            transient: false,
                            status: Some(status),
                            code: "too many redirects".to_string(),
                            message: format!("{hops} followed, the last to {url}, then to {next}"),
                        };
                        return (Err(failure), hops);
                    }
                    hops += 1;
                    if status == 303 && method != "HEAD" {
                        (method, body) = ("GET", None);
                    }
                    url = next;
                    continue;
                }
            };
            let status = response.status;
            if (200..300).contains(&status) || request.also_accept.contains(&status) {
                return (take(&mut response).map_err(Failure::of_body), hops);
            }
            let text = response.text().unwrap_or_default();
            let (code, message) = self.service.error_of(&response, &text);
            let failure = Failure {
                transient: matches!(status, 429 | 500 | 502 | 503 | 504),
                status: Some(status),
                code: code.unwrap_or_else(|| reason(status).to_string()),
                message,
            };
            return (Err(failure), hops);
        }
    }

    /// Sends `request` as `method` to `url` with `body`, authenticated for them: the answer,
    /// whatever its status.
    fn exchange(
        &self,
        request: &Request<'_>,
        method: &'static str,
        url: &url::Url,
        body: Option<&[u8]>,
    ) -> Result<Response, Failure> {
        let failed = |code: &str, error: String| Failure {
            transient: false,
            status: None,
            code: code.to_string(),
            message: error,
        };
        let mut headers = request.headers.clone();
        self.service
            .authorize(method, url, &mut headers, body.map_or(0, <[u8]>::len))
            .map_err(|e| failed("cannot sign", e.to_string()))?;
        let mut builder = ureq::http::Request::builder()
            .method(method)
            .uri(url.as_str());
        for (name, value) in &headers {
            builder = builder.header(*name, value);
        }
        let sent = match body {
            Some(body) => builder.body(body).map(|r| self.agent.run(r)),
            None => builder.body(()).map(|r| self.agent.run(r)),
        };
        match sent {
            Ok(Ok(inner)) => Ok(Response {
                status: inner.status().as_u16(),
                inner,
            }),
            Ok(Err(error)) => Err(Failure::of_transport(error, url.scheme() == "https")),
            Err(error) => Err(failed("bad request", error.to_string())),
        }
    }

    fn count(&self, kind: RequestKind, change: impl FnOnce(&mut KindCounts)) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut counts.kinds[kind as usize]);
    }
}

/// Whether an answer sends the request elsewhere.
enum Redirect {
    No(Response),
    /// To this URL, with this status.
    To(url::Url, u16),
}

/// An answer of 301, 302, 303, 307 or 308 with a `Location` (resolved against `url`, the
/// request's) is a redirect, its body read and dropped so the connection can serve again; but a
/// status the request takes as an answer (`taken`) is that answer, whatever it means elsewhere
/// (GCS's 308 "Resume Incomplete" to a resumable upload's chunk).
fn redirected(mut response: Response, url: &url::Url, taken: &[u16]) -> Redirect {
    let status = response.status;
    if !matches!(status, 301 | 302 | 303 | 307 | 308) || taken.contains(&status) {
        return Redirect::No(response);
    }
    let Some(next) = response.header("location").and_then(|l| url.join(l).ok()) else {
        return Redirect::No(response);
    };
    let _ = response.text();
    Redirect::To(next, status)
}

/// The wait before attempt `attempt + 1`: uniform in [0, min(cap, base × 2^(attempt-1))].
fn backoff(attempt: u32) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1 << (attempt - 1).min(16))
        .min(BACKOFF_CAP);
    ceiling.mul_f64(rand::rngs::SmallRng::from_os_rng().random::<f64>())
}

fn reason(status: u16) -> &'static str {
    match status {
        301 => "MovedPermanently",
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        412 => "PreconditionFailed",
        416 => "InvalidRange",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        _ => "error",
    }
}

/// The certificates of a PEM bundle (`ca_bundle`, or where `source` says it came from); a file
/// that cannot be read or holds none is a usage error naming it.
fn read_authorities(
    path: &std::path::Path,
    source: &str,
) -> crate::error::Result<Vec<ureq::tls::Certificate<'static>>> {
    let refuse = |why: String| {
        crate::error::Error::usage(format!("the CA bundle {} ({source}) {why}", path.display()))
    };
    let pem = std::fs::read(path).map_err(|e| refuse(format!("cannot be read: {e}")))?;
    let mut certificates = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(ureq::tls::PemItem::Certificate(certificate)) => certificates.push(certificate),
            Ok(_) => {}
            Err(e) => return Err(refuse(format!("is not PEM: {e}"))),
        }
    }
    if certificates.is_empty() {
        return Err(refuse("holds no certificate".to_string()));
    }
    Ok(certificates)
}

/// The text of the first `<name>…</name>` in an XML answer.
#[cfg(any(feature = "s3", feature = "azure"))]
pub fn xml_field<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let open = format!("<{name}>");
    let start = text.find(&open)? + open.len();
    let end = text[start..].find("</")? + start;
    Some(&text[start..end])
}

/// XML text with its five predefined entities and character references replaced.
#[cfg(feature = "azure")]
pub fn xml_unescape(text: &str) -> String {
    if !text.contains('&') {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let Some(end) = rest.find(';') else { break };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
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
    #[cfg(any(feature = "s3", feature = "azure"))]
    fn xml_error_answers_are_read() {
        let text = "<?xml version=\"1.0\"?><Error><Code>SlowDown</Code>\
                    <Message>Please reduce your request rate.</Message></Error>";
        assert_eq!(xml_field(text, "Code"), Some("SlowDown"));
        assert_eq!(
            xml_field(text, "Message"),
            Some("Please reduce your request rate.")
        );
        assert_eq!(xml_field(text, "Key"), None);
    }

    #[test]
    #[cfg(feature = "azure")]
    fn xml_text_is_unescaped() {
        assert_eq!(xml_unescape("a&amp;b &lt;c&gt; &#65;&#x42;"), "a&b <c> AB");
        assert_eq!(xml_unescape("plain"), "plain");
        assert_eq!(xml_unescape("odd & end"), "odd & end");
    }
}
