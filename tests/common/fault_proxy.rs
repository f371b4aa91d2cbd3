//! A loopback HTTP/1.1 proxy that injects S3-style faults into chosen requests, for testing a
//! client's retries against a real server.
//!
//! Every request head gets `Connection: close`, so each request travels on its own connection:
//! the client reconnects for the next one, and a fault hits exactly one request. Requests are
//! numbered 1, 2, … across all connections in the order their heads arrive, and a [`FaultPlan`]
//! picks the [`Fault`] of each number.
//!
//! The `Host` header and everything else is passed on unchanged, so a SigV4 signature made for the
//! proxy's address stays valid at the upstream (which checks the Host it receives).
//!
//! Standard library only, and no `crate::`/`super::` paths, so the file can be included both as
//! `mod fault_proxy;` from `tests/common/mod.rs` and with `#[path]` from a library unit test.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// What the proxy does with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Passes the request to the upstream and its answer back (no fault).
    Forward,
    /// Answers `503 Slow Down` with S3's `SlowDown` XML error, as S3 does when throttling: the
    /// retryable error every S3 client must retry. The request body is read first (bounded), so the
    /// client is not cut off mid-upload.
    ServiceUnavailable,
    /// Drops the connection without an answer, with a TCP RST: the client sees "connection reset"
    /// (or an unexpected EOF if it was not reading yet). The head is only peeked, never read, so
    /// closing the socket with unread data makes the kernel send an RST — std has no `SO_LINGER`.
    Reset,
    /// Forwards a request with a body (a PUT, a part) with only the first half of its body, its
    /// `Content-Length` changed to match: the server stores a short object and answers 200, as a
    /// store that silently truncates a write does. A request without a body is forwarded whole.
    Truncate,
    /// Forwards a request with a body with the second half of its body's bytes inverted, its
    /// length kept: a store that keeps a damaged copy and answers 200, which only a digest of
    /// what was stored can tell (a signature over the headers cannot).
    Corrupt,
    /// Forwards the request whole, and its answer without its `x-amz-checksum-*` headers: what a
    /// store that takes no S3 checksums answers (the client must then check otherwise).
    HideChecksum,
    /// Answers `307 Temporary Redirect` to the same path and query at the proxy's redirect
    /// target ([`FaultProxy::redirect_to`]), after taking the body: what AIStore's gateways answer
    /// every S3 request with, sending the client to the target node that holds the object.
    Redirect,
}

impl Fault {
    /// Every kind, [`Fault::Forward`] included.
    pub const ALL: [Fault; 7] = [
        Fault::Forward,
        Fault::ServiceUnavailable,
        Fault::Reset,
        Fault::Truncate,
        Fault::Corrupt,
        Fault::HideChecksum,
        Fault::Redirect,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// Which request gets which fault: a list of rules, the first that matches a request number wins;
/// a request no rule matches is forwarded. E.g. every 3rd request 503 and every 5th reset:
/// `FaultPlan::every(3, Fault::ServiceUnavailable).and_every(5, Fault::Reset)` (15 gets the 503).
#[derive(Clone, Debug, Default)]
pub struct FaultPlan {
    /// (n, fault): requests n, 2n, 3n, … get `fault`.
    rules: Vec<(usize, Fault)>,
    /// (text, fault): requests whose request line holds `text` get `fault`; before `rules`.
    matching: Vec<(String, Fault)>,
    /// Forward a request whose previous attempt was faulted, whatever its number.
    spare_retries: bool,
}

impl FaultPlan {
    /// Requests n, 2n, 3n, … get `fault`.
    pub fn every(n: usize, fault: Fault) -> FaultPlan {
        FaultPlan::default().and_every(n, fault)
    }

    /// Adds a rule after the existing ones: requests n, 2n, … get `fault`.
    pub fn and_every(mut self, n: usize, fault: Fault) -> FaultPlan {
        assert!(n > 0, "every 0th request");
        self.rules.push((n, fault));
        self
    }

    /// Requests whose request line (`PUT /bucket/key?partNumber=2&…`) holds `text` get `fault`,
    /// whatever their number.
    pub fn matching(text: &str, fault: Fault) -> FaultPlan {
        let mut plan = FaultPlan::default();
        plan.matching.push((text.to_string(), fault));
        plan
    }

    /// Forwards the next attempt of any faulted request (same method, target and `Range`), so
    /// every request succeeds by its second attempt. Without it, clients sending requests in
    /// lockstep can land one request's retries on the faulted numbers again and again, and whether
    /// a run outlasts its attempts depends on the threads' timing.
    pub fn sparing_retries(mut self) -> FaultPlan {
        self.spare_retries = true;
        self
    }

    /// The fault of request number `n` (from 1), whose request line is `line`.
    pub fn fault_for(&self, n: usize, line: &str) -> Fault {
        if let Some(&(_, fault)) = self.matching.iter().find(|(text, _)| line.contains(text)) {
            return fault;
        }
        self.rules
            .iter()
            .find_map(|&(k, fault)| (n % k == 0).then_some(fault))
            .unwrap_or(Fault::Forward)
    }
}

/// The S3 error body of [`Fault::ServiceUnavailable`].
pub const SLOW_DOWN_BODY: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>";

/// Longest request head accepted (S3 heads are a few KiB).
const MAX_HEAD: usize = 64 * 1024;
/// How long a connection may take to send its head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Most body bytes read and thrown away before a 503.
const MAX_DISCARD: u64 = 256 * 1024 * 1024;
/// How long a pause in the body may be while discarding it.
const DISCARD_TIMEOUT: Duration = Duration::from_secs(5);
const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// A running proxy on `127.0.0.1:<free port>`. Drop stops it promptly: the accept loop ends, every
/// open connection is shut down, and its threads end.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<Vec<JoinHandle<()>>>>,
}

struct Shared {
    upstream: SocketAddr,
    plan: FaultPlan,
    stop: AtomicBool,
    /// Requests seen so far (heads received): the last one's number.
    requests: AtomicUsize,
    injected: [AtomicUsize; Fault::ALL.len()],
    /// With [`FaultPlan::sparing_retries`]: the identities of faulted requests not retried yet.
    faulted: Mutex<HashSet<String>>,
    /// Every open socket (clients and upstreams), to shut down at drop.
    open: Mutex<Open>,
    /// Requests being answered now (each on its own connection), and the most at once.
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    /// Where [`Fault::Redirect`] sends a request.
    redirect_to: Mutex<Option<SocketAddr>>,
    /// The `Host` forwarded requests carry instead of their own ([`FaultProxy::present_as`]).
    host: Mutex<Option<String>>,
}

#[derive(Default)]
struct Open {
    closed: bool,
    next: u64,
    streams: HashMap<u64, TcpStream>,
}

impl Shared {
    /// Registers a clone of `stream` until the returned key is released; once the proxy is
    /// closing, shuts it down at once instead.
    fn register(&self, stream: &TcpStream) -> Option<u64> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let Ok(clone) = stream.try_clone() else {
            let _ = stream.shutdown(Shutdown::Both);
            return None;
        };
        if open.closed {
            let _ = clone.shutdown(Shutdown::Both);
            return None;
        }
        let key = open.next;
        open.next += 1;
        open.streams.insert(key, clone);
        Some(key)
    }

    fn release(&self, key: Option<u64>) {
        if let Some(key) = key {
            let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
            open.streams.remove(&key);
        }
    }

    fn close_all(&self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.closed = true;
        for (_, stream) in open.streams.drain() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

impl FaultProxy {
    /// Starts a proxy to `upstream` (e.g. a SeaweedFS S3 port) that applies `plan`.
    pub fn start(upstream: SocketAddr, plan: FaultPlan) -> io::Result<FaultProxy> {
        let listener = TcpListener::bind(("127.0.0.1", 0))?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            plan,
            stop: AtomicBool::new(false),
            requests: AtomicUsize::new(0),
            injected: Default::default(),
            faulted: Mutex::new(HashSet::new()),
            open: Mutex::new(Open::default()),
            in_flight: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            redirect_to: Mutex::new(None),
            host: Mutex::new(None),
        });
        let accept_shared = Arc::clone(&shared);
        let accept = thread::Builder::new()
            .name("fault-proxy-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))?;
        Ok(FaultProxy {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// `http://127.0.0.1:PORT`, to give the client as its endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Requests given `kind` so far (`Fault::Forward`: the ones forwarded). Counted before the fault
    /// acts, so once the client has seen a request's outcome, it is counted.
    pub fn injected(&self, kind: Fault) -> usize {
        self.shared.injected[kind.index()].load(Ordering::SeqCst)
    }

    /// The most requests the proxy was answering at once (from a request's head to the end of
    /// its answer): what the server saw in flight together.
    #[allow(dead_code)] // used by the library's object-store tests, not the end-to-end ones
    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak.load(Ordering::SeqCst)
    }

    /// Forgets the peak so far ([`FaultProxy::peak_in_flight`]), to measure a new phase.
    #[allow(dead_code)] // used by the library's object-store tests, not the end-to-end ones
    pub fn reset_peak(&self) {
        self.shared.peak.store(0, Ordering::SeqCst);
    }

    /// Sends requests given [`Fault::Redirect`] to `target` (another proxy, or this one: a loop).
    #[allow(dead_code)] // used by the S3 tests of redirects only
    pub fn redirect_to(&self, target: SocketAddr) {
        *self
            .shared
            .redirect_to
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(target);
    }

    /// Forwards requests with `Host: host` in place of theirs: a target reached by a redirect
    /// from the gateway `host`, whose requests' signatures name the gateway (SigV4 signs the
    /// `Host`; AIStore's targets do not check it, SeaweedFS does).
    #[allow(dead_code)] // used by the S3 tests of redirects only
    pub fn present_as(&self, host: &str) {
        *self.shared.host.lock().unwrap_or_else(|e| e.into_inner()) = Some(host.to_string());
    }

    /// `127.0.0.1:PORT`.
    #[allow(dead_code)] // used by the S3 tests of redirects only
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Requests given any fault other than `Forward`.
    pub fn faults(&self) -> usize {
        Fault::ALL
            .iter()
            .filter(|&&f| f != Fault::Forward)
            .map(|&f| self.injected(f))
            .sum()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the blocking accept().
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        let handlers = self
            .accept
            .take()
            .and_then(|accept| accept.join().ok())
            .unwrap_or_default();
        self.shared.close_all();
        // Every blocking call of a handler is on a socket just shut down (or bounded by a
        // timeout), so they end promptly; still, never wait on them for long.
        let deadline = Instant::now() + Duration::from_secs(2);
        for handler in handlers {
            while !handler.is_finished() && Instant::now() < deadline {
                thread::sleep(Duration::from_millis(1));
            }
            if handler.is_finished() {
                let _ = handler.join();
            }
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) -> Vec<JoinHandle<()>> {
    let mut handlers: Vec<JoinHandle<()>> = Vec::new();
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        handlers.retain(|h| !h.is_finished());
        let shared = Arc::clone(&shared);
        if let Ok(handler) = thread::Builder::new()
            .name("fault-proxy-conn".into())
            .spawn(move || handle(stream, &shared))
        {
            handlers.push(handler);
        }
    }
    handlers
}

fn handle(client: TcpStream, shared: &Shared) {
    let key = shared.register(&client);
    if key.is_some() {
        let _ = serve(client, shared, key);
    }
    shared.release(key);
}

fn serve(mut client: TcpStream, shared: &Shared, key: Option<u64>) -> io::Result<()> {
    client.set_read_timeout(Some(HEAD_TIMEOUT))?;
    let Some(head_len) = peek_head(&client)? else {
        return Ok(()); // closed or garbage before a full head: not a request
    };
    let n = shared.requests.fetch_add(1, Ordering::SeqCst) + 1;
    let mut peeked_head = vec![0; head_len];
    let peeked = client.peek(&mut peeked_head)?;
    let peeked_head = String::from_utf8_lossy(&peeked_head[..peeked]).into_owned();
    let line = peeked_head.split("\r\n").next().unwrap_or("");
    let mut fault = shared.plan.fault_for(n, line);
    if shared.plan.spare_retries {
        let identity = request_identity(&peeked_head);
        let mut faulted = shared.faulted.lock().unwrap_or_else(|e| e.into_inner());
        if faulted.remove(&identity) {
            fault = Fault::Forward;
        } else if fault != Fault::Forward {
            faulted.insert(identity);
        }
    }
    shared.injected[fault.index()].fetch_add(1, Ordering::SeqCst);
    if fault == Fault::Reset {
        // The head is still unread in the kernel: closing the socket (its last descriptor, so
        // the registered clone goes first) sends an RST.
        shared.release(key);
        drop(client);
        return Ok(());
    }
    let mut head = vec![0; head_len];
    client.read_exact(&mut head)?;
    let head = String::from_utf8_lossy(&head).into_owned();
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.peak.fetch_max(now, Ordering::SeqCst);
    let answered = match fault {
        Fault::Forward => forward(client, &head, shared, None),
        Fault::HideChecksum => {
            let hiding = Some(&["x-amz-checksum-"][..]);
            forward_hiding(client, &head, shared, None, hiding)
        }
        Fault::ServiceUnavailable => slow_down(client, &head),
        Fault::Truncate => damage(client, &head, shared, Damage::Truncate),
        Fault::Corrupt => damage(client, &head, shared, Damage::Invert),
        Fault::Redirect => redirect(client, &head, shared),
        Fault::Reset => unreachable!(),
    };
    shared.in_flight.fetch_sub(1, Ordering::SeqCst);
    answered
}

/// Answers 307 to the same target at the redirect address (see [`Fault::Redirect`]).
fn redirect(mut client: TcpStream, head: &str, shared: &Shared) -> io::Result<()> {
    take_body(&client, head)?;
    let to = shared
        .redirect_to
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .unwrap_or(shared.upstream);
    let target = head.split(' ').nth(1).unwrap_or("/");
    let response = format!(
        "HTTP/1.1 307 Temporary Redirect\r\nLocation: http://{to}{target}\r\n\
         Content-Length: 0\r\nConnection: close\r\n\r\n"
    );
    client.write_all(response.as_bytes())?;
    client.flush()?;
    let _ = client.shutdown(Shutdown::Both);
    Ok(())
}

/// Reads the request's body (bounded) and drops it, so the client's send completes; a client
/// waiting for "100 Continue" sends none.
fn take_body(client: &TcpStream, head: &str) -> io::Result<()> {
    let expects_continue =
        header(head, "expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue"));
    let length = header(head, "content-length").and_then(|v| v.parse::<u64>().ok());
    if let (Some(length), false) = (length, expects_continue) {
        client.set_read_timeout(Some(DISCARD_TIMEOUT))?;
        io::copy(&mut client.take(length.min(MAX_DISCARD)), &mut io::sink())?;
    }
    Ok(())
}

/// How [`damage`] changes a body.
enum Damage {
    /// Its first half only ([`Fault::Truncate`]).
    Truncate,
    /// Its second half's bytes inverted ([`Fault::Corrupt`]).
    Invert,
}

/// Forwards the request with its body damaged (see [`Fault::Truncate`], [`Fault::Corrupt`]).
fn damage(client: TcpStream, head: &str, shared: &Shared, how: Damage) -> io::Result<()> {
    let Some(length) = header(head, "content-length").and_then(|v| v.parse::<u64>().ok()) else {
        return forward(client, head, shared, None);
    };
    let mut body = Vec::new();
    client.set_read_timeout(Some(DISCARD_TIMEOUT))?;
    (&client)
        .take(length.min(MAX_DISCARD))
        .read_to_end(&mut body)?;
    let half = body.len() / 2;
    match how {
        Damage::Truncate => body.truncate(half),
        Damage::Invert => body[half..].iter_mut().for_each(|b| *b = !*b),
    }
    let mut changed = String::new();
    for line in head.trim_end_matches("\r\n").split("\r\n") {
        let name = line.split(':').next().unwrap_or("").trim();
        if name.eq_ignore_ascii_case("content-length") {
            changed.push_str(&format!("Content-Length: {}\r\n", body.len()));
        } else {
            changed.push_str(line);
            changed.push_str("\r\n");
        }
    }
    changed.push_str("\r\n");
    client.set_read_timeout(None)?;
    forward(client, &changed, shared, Some(&body))
}

/// Peeks (without reading) until the stream holds a whole request head; its length with the
/// final blank line, or None if the connection ends first or the head is too long.
fn peek_head(client: &TcpStream) -> io::Result<Option<usize>> {
    let mut buf = vec![0u8; 4096];
    let mut seen = 0;
    let started = Instant::now();
    loop {
        let n = client.peek(&mut buf)?;
        if n == 0 {
            return Ok(None);
        }
        if let Some(i) = buf[..n].windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(i + 4));
        }
        if n == buf.len() {
            if buf.len() >= MAX_HEAD {
                return Ok(None);
            }
            buf.resize(buf.len() * 2, 0);
        } else if n == seen {
            // peek returns at once while anything is buffered: wait for more to arrive.
            if started.elapsed() > HEAD_TIMEOUT {
                return Ok(None);
            }
            thread::sleep(Duration::from_millis(1));
        }
        seen = n;
    }
}

/// What tells one request from another across its attempts: the request line without its
/// signature (a presigned URL's `X-Amz-*` parameters change with each attempt's time), and the
/// `Range`.
fn request_identity(head: &str) -> String {
    let mut lines = head.split("\r\n");
    let line = lines.next().unwrap_or("");
    let mut identity = match line.split_once('?') {
        Some((before, query)) => {
            let (query, version) = query.rsplit_once(' ').unwrap_or((query, ""));
            let kept: Vec<&str> = query
                .split('&')
                .filter(|p| !p.starts_with("X-Amz-"))
                .collect();
            format!("{before}?{} {version}", kept.join("&"))
        }
        None => line.to_string(),
    };
    for line in lines {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        if name.trim().eq_ignore_ascii_case("range") {
            identity.push('\n');
            identity.push_str(value.trim());
        }
    }
    identity
}

/// The head with its `Connection` (and keep-alive) headers replaced by `Connection: close`.
fn rewrite_head(head: &str) -> String {
    let mut out = String::with_capacity(head.len() + 20);
    for line in head.trim_end_matches("\r\n").split("\r\n") {
        let name = line.split(':').next().unwrap_or("").trim();
        if ["connection", "keep-alive", "proxy-connection"]
            .iter()
            .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    out
}

/// The head with its `Host` header replaced by `host`.
fn with_host(head: &str, host: &str) -> String {
    let mut out = String::with_capacity(head.len());
    for line in head.trim_end_matches("\r\n").split("\r\n") {
        let name = line.split(':').next().unwrap_or("").trim();
        if name.eq_ignore_ascii_case("host") {
            out.push_str(&format!("Host: {host}\r\n"));
        } else {
            out.push_str(line);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    out
}

fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.trim().eq_ignore_ascii_case(name).then(|| value.trim())
    })
}

/// Passes the request on (with `body` in place of the client's, already read, where given) and
/// its answer back.
fn forward(client: TcpStream, head: &str, shared: &Shared, body: Option<&[u8]>) -> io::Result<()> {
    forward_hiding(client, head, shared, body, None)
}

/// [`forward`], the answer's headers whose names start with one of `hidden` left out.
fn forward_hiding(
    client: TcpStream,
    head: &str,
    shared: &Shared,
    body: Option<&[u8]>,
    hidden: Option<&[&str]>,
) -> io::Result<()> {
    let upstream = match TcpStream::connect_timeout(&shared.upstream, UPSTREAM_CONNECT_TIMEOUT) {
        Ok(upstream) => upstream,
        Err(e) => {
            let _ = client.shutdown(Shutdown::Both);
            return Err(e);
        }
    };
    let key = shared.register(&upstream);
    let host = shared
        .host
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let head = match host {
        Some(host) => with_host(head, &host),
        None => head.to_string(),
    };
    let result = relay(client, upstream, &head, body, hidden);
    shared.release(key);
    result
}

/// Sends the rewritten head, then copies the body up and the answer down until the upstream
/// closes (it does, after its answer to a `Connection: close` request).
fn relay(
    client: TcpStream,
    mut upstream: TcpStream,
    head: &str,
    body: Option<&[u8]>,
    hidden: Option<&[&str]>,
) -> io::Result<()> {
    client.set_read_timeout(None)?;
    upstream.write_all(rewrite_head(head).as_bytes())?;
    if let Some(body) = body {
        upstream.write_all(body)?;
    }
    let mut client_up = client.try_clone()?;
    let mut upstream_up = upstream.try_clone()?;
    let up = thread::Builder::new()
        .name("fault-proxy-up".into())
        .spawn(move || {
            let _ = io::copy(&mut client_up, &mut upstream_up);
            // HTTP clients don't half-close while waiting for an answer: EOF means the client is
            // gone (or the connection is being torn down), so stop waiting for the upstream too.
            let _ = upstream_up.shutdown(Shutdown::Both);
        })?;
    let mut client_down = &client;
    let mut upstream_down = &upstream;
    let result = match hidden {
        Some(hidden) => pass_head_hiding(&upstream, &client, hidden)
            .and_then(|()| io::copy(&mut upstream_down, &mut client_down)),
        None => io::copy(&mut upstream_down, &mut client_down),
    };
    let _ = client.shutdown(Shutdown::Both);
    let _ = upstream.shutdown(Shutdown::Both);
    let _ = up.join();
    result.map(drop)
}

/// Passes the answer's head from `upstream` to `client` without the headers whose names start
/// with one of `hidden` (case-insensitive); its body follows as it comes.
fn pass_head_hiding(upstream: &TcpStream, client: &TcpStream, hidden: &[&str]) -> io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_HEAD || (&*upstream).read(&mut byte)? == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "no whole answer head",
            ));
        }
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut kept = String::with_capacity(head.len());
    for line in head.trim_end_matches("\r\n").split("\r\n") {
        let name = line
            .split(':')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if !hidden.iter().any(|h| name.starts_with(h)) {
            kept.push_str(line);
            kept.push_str("\r\n");
        }
    }
    kept.push_str("\r\n");
    (&*client).write_all(kept.as_bytes())
}

/// Answers 503 SlowDown after taking the body (bounded), then closes.
fn slow_down(mut client: TcpStream, head: &str) -> io::Result<()> {
    take_body(&client, head)?;
    let is_head = head.starts_with("HEAD ");
    let mut response = format!(
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        SLOW_DOWN_BODY.len()
    );
    if !is_head {
        response.push_str(SLOW_DOWN_BODY);
    }
    client.write_all(response.as_bytes())?;
    client.flush()?;
    // Close gracefully: FIN, then take whatever the client still sends (unread data at close
    // would turn it into an RST that may destroy the answer before the client reads it).
    let _ = client.shutdown(Shutdown::Write);
    client.set_read_timeout(Some(Duration::from_secs(1)))?;
    let _ = io::copy(&mut (&client).take(MAX_DISCARD), &mut io::sink());
    Ok(())
}
