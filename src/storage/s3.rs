//! S3-compatible object storage (`storage.storage_type: s3`): a bucket, with the configured
//! folder as the prefix of every key.
//!
//! How each [`Storage`] call maps to requests (docs/object-storage.md has the per-format
//! table):
//! - a whole object is one GET; a part is one ranged GET (`Range: bytes=a-b`), several parts
//!   of one object (parquet's pre-buffered ranges) are that many ranged GETs in flight at once;
//!   nothing asks for an object's size first where the layout gives it (no HEAD per object);
//! - an object is written by one PUT up to `part_size` bytes, beyond that by a multipart upload
//!   of `part_size` parts, up to `parts_in_flight` at once, completed in order — or aborted,
//!   never left looking whole; every object written is checked before it counts (its ETag
//!   against the MD5 of what was sent, or its size by a HEAD) and written again on a mismatch;
//! - an object read whole in order (a checkpoint load) is fetched in `part_size` ranges, up to
//!   `parts_in_flight` ahead;
//! - with several endpoints, each request goes to its rank's (or to the next in turn);
//! - a folder's listing is one paginated LIST with the `/` delimiter; folders do not exist;
//! - nothing is cached and nothing can be mapped: the bytes of every read are the bytes of GET
//!   bodies, counted exactly ([`Accounting::Requests`]).
//!
//! Requests are made by [`client::Client`] (signing, timeouts, retries, counts); where the
//! bucket is and who asks comes from [`settings`].

mod client;
mod settings;

use std::io::{self, Read};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use rusty_s3::actions::ListObjectsV2;
use rusty_s3::{Method, S3Action};

use self::client::{xml_field, Client, Request, RequestError, SIGNATURE_LIFETIME, TLS_REFUSED};
use super::checked::{self, hex, md5_of, Expected, Stored, Written};
use super::download::{not_mappable, take_answer, Span};
use super::parts::PartsInFlight;
use super::requests::{RequestCounts, RequestKind};
use super::{
    Accounting, Condition, EntryKind, IoBuffer, Mapped, ObjectReader, ObjectWriter, OnRange,
    RangeRead, Storage, Window,
};
use crate::config::{Config, EndpointSpread, VerifyWrites};
use crate::error::{Error, Result};

pub use settings::bucket_and_prefix;

/// Writers of a generation where `max_in_flight` does not say ([`Storage::writers`]): enough
/// PUTs in flight to cover a remote store's latency (benches/s3.rs, O3, compares it with s3dlio
/// at the same concurrency).
const DEFAULT_WRITERS: usize = 16;

pub struct S3Storage {
    /// One client per endpoint of the store (one, or `endpoint_urls`), in the order configured.
    endpoints: Vec<Arc<Client>>,
    spread: EndpointSpread,
    /// The next endpoint of `endpoint_spread: requests`.
    turn: AtomicUsize,
    /// Every key's start: the configured folder, ending in `/`, or empty.
    prefix: String,
    part_size: usize,
    /// Parts of one upload in flight at once, and pieces a sequential reader reads ahead.
    parts_in_flight: usize,
    verify: VerifyWrites,
    /// Writers a generation runs ([`Storage::writers`]).
    writers: usize,
    /// Keys per LIST page: S3's most, 1,000 (tests make pages small).
    list_page: usize,
}

impl S3Storage {
    /// The bucket and folder `folder` of the configuration (a path below the bucket
    /// `storage.storage_root`, or `s3://bucket/path`), for about `concurrency` threads making
    /// requests at once.
    pub fn for_folder(config: &Config, folder: &str, concurrency: usize) -> Result<S3Storage> {
        let (bucket, prefix) = bucket_and_prefix(config, folder)?;
        let aistore = config.storage.storage_type == crate::config::StorageType::Aistore;
        let settings = settings::Settings::resolve(&config.storage.options, &bucket, aistore)?;
        let writers = match settings.limits.max_in_flight {
            0 => DEFAULT_WRITERS,
            cap => cap,
        };
        let gate = Arc::new(client::Gate::new(settings.limits.max_in_flight));
        let count = settings.buckets.len();
        // Each part upload or read-ahead piece of a writer or reader is a request of its own.
        let connections = concurrency.max(writers) * settings.parts_in_flight;
        let endpoints = settings
            .buckets
            .iter()
            .map(|(url, bucket)| {
                let endpoint = client::Endpoint {
                    bucket: bucket.clone(),
                    credentials: settings.credentials.clone(),
                    url: url.clone(),
                    scheme: if aistore { "ais" } else { "s3" },
                };
                Arc::new(Client::of_endpoint(
                    endpoint,
                    &settings.limits,
                    connections,
                    &gate,
                    (count > 1).then(|| url.clone()),
                ))
            })
            .collect();
        Ok(S3Storage {
            endpoints,
            spread: settings.endpoint_spread,
            turn: AtomicUsize::new(0),
            prefix,
            part_size: settings.part_size,
            parts_in_flight: settings.parts_in_flight,
            verify: settings.verify_writes,
            writers,
            list_page: 1000,
        })
    }

    /// The same storage listing `keys` keys per page, so that a test sees pagination.
    #[cfg(test)]
    fn with_list_page(mut self, keys: usize) -> S3Storage {
        self.list_page = keys;
        self
    }

    /// The endpoint the calling thread's next request goes to: its rank's (round-robin by global
    /// rank; a thread of no rank takes the first), or each request the next
    /// (`endpoint_spread: requests`).
    fn client(&self) -> &Arc<Client> {
        let n = self.endpoints.len();
        let at = match (n, self.spread) {
            (1, _) => 0,
            (_, EndpointSpread::Rank) => super::marked_rank().unwrap_or(0) % n,
            (_, EndpointSpread::Requests) => self.turn.fetch_add(1, Ordering::Relaxed) % n,
        };
        &self.endpoints[at]
    }

    fn key(&self, key: &str) -> String {
        format!("{}{}", self.prefix, key.trim_start_matches('/'))
    }

    /// `s3://bucket/key` of a full key.
    fn object(&self, key: &str) -> String {
        self.endpoints[0].name(key)
    }

    /// GETs `span` of the object at the full key `key` into `buf` (see [`fetch`]).
    fn fetch(
        &self,
        key: &str,
        span: Span,
        buf: &mut IoBuffer,
    ) -> io::Result<(RangeRead, Option<u64>)> {
        fetch(self.client(), key, span, buf)
    }

    /// The object's size and ETag from a HEAD; `None` where there is none.
    fn stat(&self, client: &Client, key: &str) -> io::Result<Option<(u64, Option<String>)>> {
        let url = || {
            client
                .service
                .bucket
                .head_object(client.service.credentials.as_ref(), key)
                .sign(SIGNATURE_LIFETIME)
        };
        let request = Request {
            kind: RequestKind::Head,
            object: key,
            method: Method::Head.to_str(),
            url: &url,
            headers: Vec::new(),
            body: None,
            also_accept: &[404],
        };
        let mut take = |response: &mut client::Response| {
            Ok((response.status != 404).then(|| {
                (
                    response.content_length().unwrap_or(0),
                    response.header("etag").map(str::to_string),
                )
            }))
        };
        client.send(&request, &mut take, |_| 0)
    }

    /// The object's size from a HEAD; `None` where there is none.
    fn head(&self, key: &str) -> io::Result<Option<u64>> {
        Ok(self.stat(self.client(), key)?.map(|(size, _)| size))
    }

    /// Makes a request whose answer is short text (XML), returning it.
    fn exchange(
        client: &Client,
        kind: RequestKind,
        key: &str,
        method: Method,
        url: &dyn Fn() -> url::Url,
        body: Option<&[u8]>,
    ) -> io::Result<String> {
        let request = Request {
            kind,
            object: key,
            method: method.to_str(),
            url,
            headers: Vec::new(),
            body,
            also_accept: &[],
        };
        let mut take = |response: &mut client::Response| response.text();
        client.send(&request, &mut take, |_| body.map_or(0, |b| b.len() as u64))
    }

    /// One request of a held folder's lease ([`super::lease`]): `method` (GET, PUT or DELETE)
    /// on the object at `key`, with `headers` (the condition), its answer taken by `take` (and
    /// its body's bytes told by `received`); counted as [`RequestKind::Lease`], apart from the
    /// data's requests. Always to the first endpoint: a lease is one object, read and written
    /// where every run looks for it.
    fn lease_request<T>(
        &self,
        key: &str,
        method: Method,
        headers: Vec<(&'static str, String)>,
        body: Option<&[u8]>,
        take: &mut client::Take<'_, T>,
        received: impl Fn(&T) -> u64,
    ) -> io::Result<T> {
        let full = self.key(key);
        let client = &self.endpoints[0];
        let url = || {
            let credentials = client.service.credentials.as_ref();
            match method {
                Method::Put => client
                    .service
                    .bucket
                    .put_object(credentials, &full)
                    .sign(SIGNATURE_LIFETIME),
                Method::Delete => client
                    .service
                    .bucket
                    .delete_object(credentials, &full)
                    .sign(SIGNATURE_LIFETIME),
                _ => client
                    .service
                    .bucket
                    .get_object(credentials, &full)
                    .sign(SIGNATURE_LIFETIME),
            }
        };
        // 404: no lease there; 412: its condition did not hold.
        let also_accept: &[u16] = match method {
            Method::Get => &[404],
            Method::Put => &[412],
            _ => &[404, 412],
        };
        let request = Request {
            kind: RequestKind::Lease,
            object: &full,
            method: method.to_str(),
            url: &url,
            headers,
            body,
            also_accept,
        };
        let sent = body.map_or(0, |b| b.len() as u64);
        client.send(&request, take, |answer| sent + received(answer))
    }

    /// Writes the object at the full key `key` with one PUT, and checks the stored object is
    /// `data` (`verify_writes`, [`checked`]) before it counts.
    fn put_whole(&self, key: &str, data: &[u8]) -> io::Result<()> {
        let crc = (self.verify == VerifyWrites::Etag).then(|| crc32fast::hash(data));
        self.put_checked(key, data, crc)
    }

    /// [`S3Storage::put_whole`] of `data` whose CRC-32 is `crc` (`verify_writes: etag`): sent
    /// with it, the store checks what arrived and answers with what it stored; a store that
    /// does not take checksums is checked by its ETag (the MD5 form) or the size.
    fn put_checked(&self, key: &str, data: &[u8], crc: Option<u32>) -> io::Result<()> {
        let client = self.client();
        let object = client.name(key);
        let expected = Expected {
            bytes: data.len() as u64,
            digest: crc.map(crc_text),
        };
        checked::write_checked(client, (&object, Written::Object), &expected, &mut || {
            let answer = put_once(client, key, data, crc)?;
            match answer.checksum {
                Checksum::Absent => {
                    let by_md5 = Expected {
                        bytes: expected.bytes,
                        digest: crc.map(|_| hex(&md5_of(data))),
                    };
                    self.check_stored(client, key, &by_md5, answer.etag.as_deref())
                }
                checksum => Ok(checksum.against(&expected)),
            }
        })
    }

    /// The first LIST of a run, at one endpoint: the endpoint answers, the credentials are
    /// taken, the bucket exists (made if `create`).
    fn check_endpoint(&self, client: &Client, create: bool) -> Result<()> {
        let prefix = self.prefix.clone();
        let url = || {
            let mut list =
                ListObjectsV2::new(&client.service.bucket, client.service.credentials.as_ref());
            list.with_prefix(prefix.as_str());
            list.with_max_keys(1);
            list.sign(SIGNATURE_LIFETIME)
        };
        let Err(error) = Self::exchange(
            client,
            RequestKind::List,
            &self.prefix,
            Method::Get,
            &url,
            None,
        ) else {
            return Ok(());
        };
        let bucket = client.service.bucket.name().to_string();
        let endpoint = client.service.bucket.base_url().to_string();
        let endpoint = endpoint.as_str();
        let failure = error
            .get_ref()
            .and_then(|e| e.downcast_ref::<RequestError>());
        match failure.map(|f| (f.status, f.code.as_str())) {
            Some((Some(404), "NoSuchBucket")) if create => {
                let url = || {
                    client
                        .service
                        .bucket
                        .create_bucket(
                            client
                                .service
                                .credentials
                                .as_ref()
                                .unwrap_or(&EMPTY_CREDENTIALS),
                        )
                        .sign(SIGNATURE_LIFETIME)
                };
                match Self::exchange(
                    client,
                    RequestKind::CreateBucket,
                    "",
                    Method::Put,
                    &url,
                    Some(b""),
                ) {
                    Ok(_) => Ok(()),
                    // Another process of the run made it first.
                    Err(e) if request_code(&e) == Some("BucketAlreadyOwnedByYou") => Ok(()),
                    Err(e) => Err(Error::on_object("cannot create bucket", &bucket, e)),
                }
            }
            Some((Some(404), "NoSuchBucket")) => Err(Error::usage(format!(
                "bucket '{bucket}' does not exist at {endpoint}: generate the dataset first \
                 (++workload.workflow.generate_data=True makes the bucket), or name another \
                 (workload.storage.storage_root)"
            ))),
            Some((None, TLS_REFUSED)) => Err(Error::usage(format!(
                "cannot talk TLS with {endpoint}: {error}; if its certificate comes from a private \
                 authority, name that authority's PEM file with \
                 workload.storage.storage_options.ca_bundle or AWS_CA_BUNDLE"
            ))),
            Some((Some(400 | 401 | 403), code)) => Err(Error::usage(format!(
                "the S3 endpoint {endpoint} refused these credentials for bucket '{bucket}' \
                 ({code}): {error}; set workload.storage.storage_options.access_key_id and \
                 secret_access_key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile"
            ))),
            _ => Err(Error::on_object(
                "cannot reach bucket",
                format!("{bucket} at {endpoint}"),
                error,
            )),
        }
    }

    /// What the store holds at the full key `key` against what a write sent: its ETag (as
    /// answered, `answered`) against the one computed, where both are MD5 forms; else its size
    /// (a HEAD).
    fn check_stored(
        &self,
        client: &Client,
        key: &str,
        expected: &Expected,
        answered: Option<&str>,
    ) -> io::Result<Option<Stored>> {
        checked::compare(expected, None, answered.and_then(etag_digest), &mut || {
            Ok(self.stat(client, key)?.map(|(size, _)| size))
        })
    }
}

/// What a write was answered with: its ETag and what the store said of the checksum sent.
struct WriteAnswer {
    etag: Option<String>,
    checksum: Checksum,
}

/// What a store said of the CRC-32 a write was sent with (`x-amz-checksum-crc32`, S3's flexible
/// checksums: AWS S3, MinIO, SeaweedFS…).
enum Checksum {
    /// The CRC it computed of what it stored (base64, as sent).
    Echoed(String),
    /// Refused: what arrived is not what the checksum says (400 `BadDigest`); nothing stored.
    Refused,
    /// Nothing: no checksum was sent, or the store does not take them.
    Absent,
}

impl Checksum {
    /// What the store holds against `expected` (whose digest is the CRC sent): `None` when it is
    /// what was sent.
    fn against(self, expected: &Expected) -> Option<Stored> {
        match self {
            Checksum::Echoed(got) => {
                let got = crc_text_of(&got);
                (expected.digest.as_deref() != Some(got.as_str())).then_some(Stored {
                    bytes: None,
                    digest: Some(got),
                })
            }
            Checksum::Refused => Some(Stored {
                bytes: None,
                digest: None,
            }),
            Checksum::Absent => None,
        }
    }

    /// From an answer taken as a write's (a 400 here is a refusal of the checksum).
    fn of(response: &client::Response) -> Checksum {
        if response.status == 400 {
            return Checksum::Refused;
        }
        match response.header("x-amz-checksum-crc32") {
            Some(crc) if !crc.is_empty() => Checksum::Echoed(crc.to_string()),
            _ => Checksum::Absent,
        }
    }
}

/// The header value of a CRC-32: its 4 bytes, big-endian, in base64 (S3's form).
fn crc_header(crc: u32) -> String {
    base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        crc.to_be_bytes(),
    )
}

/// How a CRC-32 is named in a check's messages.
fn crc_text(crc: u32) -> String {
    crc_text_of(&crc_header(crc))
}

fn crc_text_of(header: &str) -> String {
    format!("crc32 {header}")
}

/// The 400 answers that mean the store refused what arrived as not matching its checksum.
fn refused_as_damaged(text: &str) -> bool {
    matches!(
        xml_field(text, "Code"),
        Some("BadDigest" | "XAmzContentChecksumMismatch")
    )
}

/// One PUT of `data` at the full key `key`, sent with its CRC-32 `crc` where given (signed:
/// SigV4 covers the `x-amz-` headers).
fn put_once(client: &Client, key: &str, data: &[u8], crc: Option<u32>) -> io::Result<WriteAnswer> {
    let header = crc.map(crc_header);
    let url = || {
        let mut action = client
            .service
            .bucket
            .put_object(client.service.credentials.as_ref(), key);
        if let Some(header) = &header {
            action
                .headers_mut()
                .insert("x-amz-checksum-crc32", header.clone());
        }
        action.sign(SIGNATURE_LIFETIME)
    };
    let request = Request {
        kind: RequestKind::Put,
        object: key,
        method: Method::Put.to_str(),
        url: &url,
        headers: header
            .iter()
            .map(|h| ("x-amz-checksum-crc32", h.clone()))
            .collect(),
        body: Some(data),
        also_accept: if crc.is_some() { &[400] } else { &[] },
    };
    let object = client.name(key);
    let mut take = |response: &mut client::Response| {
        let text = response.text()?;
        if response.status == 400 && !refused_as_damaged(&text) {
            return Err(refused(&object, &text));
        }
        Ok(WriteAnswer {
            etag: response.header("etag").map(str::to_string),
            checksum: Checksum::of(response),
        })
    };
    client.send(&request, &mut take, |_| data.len() as u64)
}

/// A 400 that is not a checksum's refusal: the request is wrong (not retried).
fn refused(what: &str, text: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{what}: HTTP 400 {} ({})",
            xml_field(text, "Code").unwrap_or("BadRequest"),
            xml_field(text, "Message").unwrap_or("")
        ),
    )
}

/// An ETag as S3 computes it for an unencrypted object, without its quotes and in lower case:
/// 32 hex digits (a PUT's MD5), then `-N` for a multipart upload of N parts; `None` for any
/// other (a store that tags objects otherwise: SSE-KMS, some appliances), which is then checked
/// by size.
fn etag_digest(tag: &str) -> Option<String> {
    let tag = tag.trim().trim_start_matches("W/").trim_matches('"');
    let (digest, parts) = match tag.split_once('-') {
        Some((digest, parts)) => (digest, Some(parts)),
        None => (tag, None),
    };
    let digest_ok = digest.len() == 32 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    let parts_ok = parts.is_none_or(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    (digest_ok && parts_ok).then(|| tag.to_ascii_lowercase())
}

/// GETs `span` of the object at the full key `key` into `buf`; a range that starts past the
/// end gives no bytes. Returns them, and the object's size where the answer tells it.
fn fetch(
    client: &Client,
    key: &str,
    span: Span,
    buf: &mut IoBuffer,
) -> io::Result<(RangeRead, Option<u64>)> {
    if span.is_empty() {
        buf.resize_for_writing(0)?;
        return Ok((RangeRead::default(), None));
    }
    let url = || {
        client
            .service
            .bucket
            .get_object(client.service.credentials.as_ref(), key)
            .sign(SIGNATURE_LIFETIME)
    };
    let request = Request {
        kind: span.kind(),
        object: key,
        method: Method::Get.to_str(),
        url: &url,
        headers: span
            .range_header()
            .map(|r| ("range", r))
            .into_iter()
            .collect(),
        body: None,
        // A range that starts past the end.
        also_accept: &[416],
    };
    let mut take = |response: &mut client::Response| take_answer(response, span, buf);
    let (len, size) = client.send(&request, &mut take, |&(n, _)| n as u64)?;
    let read = RangeRead {
        start: 0,
        len,
        fetched: len as u64,
    };
    Ok((read, size))
}

/// S3's error code of a failed request.
fn request_code(error: &io::Error) -> Option<&str> {
    let failure = error.get_ref()?.downcast_ref::<RequestError>()?;
    Some(failure.code.as_str())
}

impl Storage for S3Storage {
    fn describe(&self, key: &str) -> String {
        self.object(&self.key(key))
    }

    fn read_all(&self, key: &str, buf: &mut IoBuffer) -> io::Result<RangeRead> {
        self.fetch(&self.key(key), Span::Whole, buf)
            .map(|(read, _)| read)
    }

    fn read_range(
        &self,
        key: &str,
        offset: u64,
        len: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        self.fetch(&self.key(key), Span::Range(offset, len), buf)
            .map(|(read, _)| read)
    }

    /// Up to `window.reads` ranges (and `window.bytes`) are fetched at once, each by its own
    /// ranged GET on its own thread, as Arrow's pre-buffering issues them; they are handed over
    /// in order, a window at a time.
    fn read_ranges(
        &self,
        key: &str,
        ranges: &[(u64, usize)],
        window: Window,
        buf: &mut IoBuffer,
        each: &mut OnRange<'_>,
    ) -> io::Result<()> {
        let full = self.key(key);
        super::ranged::read_ranges_by_requests(ranges, window, buf, each, &|(offset, len), buf| {
            self.fetch(&full, Span::Range(offset, len), buf)
                .map(|(read, _)| read)
        })
    }

    fn map_range(&self, key: &str, _offset: u64, _len: usize) -> io::Result<Mapped> {
        Err(not_mappable(self.describe(key)))
    }

    /// Every endpoint is asked: one that does not answer is named before the run starts.
    fn check_access(&self, create: bool) -> Result<()> {
        self.endpoints
            .iter()
            .try_for_each(|client| self.check_endpoint(client, create))
    }

    /// `max_in_flight` if set, else `DEFAULT_WRITERS`.
    fn writers(&self) -> Option<usize> {
        Some(self.writers)
    }

    fn request_counts(&self) -> Option<RequestCounts> {
        let mut all = RequestCounts::default();
        for client in &self.endpoints {
            all.merge(&client.counts());
        }
        if self.endpoints.len() > 1 {
            all.endpoints = self
                .endpoints
                .iter()
                .map(|client| client.counts().for_endpoint(&client.service.url))
                .collect();
        }
        Some(all)
    }

    /// One GET of the suffix (`Range: bytes=-len`): its Content-Range carries the size, so no
    /// HEAD is made first.
    fn read_tail(&self, key: &str, len: usize, buf: &mut IoBuffer) -> io::Result<(RangeRead, u64)> {
        let full = self.key(key);
        match self.fetch(&full, Span::Suffix(len), buf)? {
            (read, Some(size)) => Ok((read, size)),
            // An empty object (416 without a size): nothing to read.
            (read, None) => Ok((read, self.size(key)?)),
        }
    }

    fn size(&self, key: &str) -> io::Result<u64> {
        let full = self.key(key);
        self.head(&full)?
            .ok_or_else(|| super::not_found(self.object(&full)))
    }

    fn create(&self, key: &str) -> io::Result<Box<dyn ObjectWriter + '_>> {
        Ok(Box::new(Upload {
            storage: self,
            client: Arc::clone(self.client()),
            key: self.key(key),
            pending: Vec::new(),
            pending_crc: (self.verify == VerifyWrites::Etag).then(crc32fast::Hasher::new),
            multipart: None,
            written: 0,
        }))
    }

    fn put(&self, key: &str, data: &[u8]) -> io::Result<()> {
        if data.len() <= self.part_size {
            return self.put_whole(&self.key(key), data);
        }
        let mut object = self.create(key)?;
        object.write(data)?;
        object.finish()
    }

    fn open_sequential(&self, key: &str) -> io::Result<Box<dyn ObjectReader + '_>> {
        let full = self.key(key);
        let size = self
            .head(&full)?
            .ok_or_else(|| super::not_found(self.object(&full)))?;
        let client = Arc::clone(self.client());
        let object = client.name(&full);
        let fetch_range = move |(offset, len), buf: &mut IoBuffer| {
            fetch(&client, &full, Span::Range(offset, len), buf).map(|(read, _)| read)
        };
        Ok(Box::new(super::ranged::Pieces::new(
            Arc::new(fetch_range),
            object,
            size,
            self.part_size,
            self.parts_in_flight,
        )))
    }

    fn evict(&self, _key: &str) -> io::Result<()> {
        Ok(())
    }

    fn exists(&self, key: &str) -> io::Result<bool> {
        Ok(self.head(&self.key(key))?.is_some())
    }

    fn make_folder(&self, _key: &str) -> io::Result<()> {
        Ok(())
    }

    fn delete(&self, key: &str) -> io::Result<bool> {
        let full = self.key(key);
        if self.head(&full)?.is_none() {
            return Ok(false);
        }
        let client = self.client();
        let url = || {
            client
                .service
                .bucket
                .delete_object(client.service.credentials.as_ref(), &full)
                .sign(SIGNATURE_LIFETIME)
        };
        Self::exchange(
            client,
            RequestKind::Delete,
            &full,
            Method::Delete,
            &url,
            None,
        )?;
        Ok(true)
    }

    fn put_if(
        &self,
        key: &str,
        data: &[u8],
        condition: Condition<'_>,
    ) -> io::Result<Option<String>> {
        let header = match condition {
            Condition::Absent => ("if-none-match", "*".to_string()),
            Condition::Matches(tag) => ("if-match", tag.to_string()),
        };
        // 412: the condition did not hold.
        let mut take = |response: &mut client::Response| {
            let _ = response.text();
            Ok((response.status != 412).then(|| response.header("etag").unwrap_or("").to_string()))
        };
        self.lease_request(key, Method::Put, vec![header], Some(data), &mut take, |_| 0)
    }

    fn get_tagged(&self, key: &str, limit: usize) -> io::Result<Option<(Vec<u8>, String)>> {
        let mut take = |response: &mut client::Response| {
            if response.status == 404 {
                return Ok(None);
            }
            let mut body = Vec::new();
            response
                .body()
                .take(limit as u64 + 1)
                .read_to_end(&mut body)?;
            if body.len() > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is larger than {limit} bytes", self.describe(key)),
                ));
            }
            let tag = response.header("etag").unwrap_or("").to_string();
            Ok(Some((body, tag)))
        };
        let received =
            |got: &Option<(Vec<u8>, String)>| got.as_ref().map_or(0, |(b, _)| b.len() as u64);
        self.lease_request(key, Method::Get, Vec::new(), None, &mut take, received)
    }

    fn delete_if(&self, key: &str, tag: &str) -> io::Result<bool> {
        let mut take = |response: &mut client::Response| {
            let _ = response.text();
            Ok(response.status < 300)
        };
        let headers = vec![("if-match", tag.to_string())];
        self.lease_request(key, Method::Delete, headers, None, &mut take, |_| 0)
    }

    fn list_dir(&self, prefix: &str, each: &mut dyn FnMut(&str, EntryKind)) -> io::Result<()> {
        let mut folder = self.key(prefix);
        if !folder.is_empty() && !folder.ends_with('/') {
            folder.push('/');
        }
        let client = self.client();
        let mut token: Option<String> = None;
        loop {
            let url = || {
                let mut list =
                    ListObjectsV2::new(&client.service.bucket, client.service.credentials.as_ref());
                list.with_prefix(folder.as_str());
                list.with_delimiter("/");
                list.with_max_keys(self.list_page);
                if let Some(token) = &token {
                    list.with_continuation_token(token.as_str());
                }
                list.sign(SIGNATURE_LIFETIME)
            };
            let text = Self::exchange(client, RequestKind::List, &folder, Method::Get, &url, None)?;
            let page = ListObjectsV2::parse_response(&text).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("an unreadable LIST answer for {folder}: {e}"),
                )
            })?;
            for object in &page.contents {
                if let Some(name) = object.key.strip_prefix(folder.as_str()) {
                    if !name.is_empty() {
                        each(name, EntryKind::File);
                    }
                }
            }
            for common in &page.common_prefixes {
                if let Some(name) = common.prefix.strip_prefix(folder.as_str()) {
                    each(name.trim_end_matches('/'), EntryKind::Folder);
                }
            }
            match page.next_continuation_token {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => return Ok(()),
            }
        }
    }

    fn accounting(&self) -> Accounting {
        Accounting::Requests
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }
}

/// Requests to create a bucket are signed: an anonymous client signs nothing, and is refused.
static EMPTY_CREDENTIALS: std::sync::LazyLock<rusty_s3::Credentials> =
    std::sync::LazyLock::new(|| rusty_s3::Credentials::new("", ""));

/// An object being written: bytes wait in `pending` until a part is full; the first full part
/// starts a multipart upload, and each full part is uploaded on a thread of its own while the
/// next fills, up to `parts_in_flight` at once, the next starting as soon as any ends (so at
/// most `parts_in_flight + 1` parts of memory). [`ObjectWriter::finish`] sends what is left as one PUT, or as the last part and
/// completes the upload with the parts in order; dropped unfinished, or after any failure, the
/// upload is aborted once its parts in flight have ended.
struct Upload<'s> {
    storage: &'s S3Storage,
    /// Every request of the object goes to one endpoint: an upload's ID is known where it began.
    client: Arc<Client>,
    key: String,
    pending: Vec<u8>,
    /// The CRC-32 of `pending` (`verify_writes: etag`), taken as bytes come, while they are in
    /// the CPU's cache: the part is sent with it as soon as a slot frees.
    pending_crc: Option<crc32fast::Hasher>,
    multipart: Option<Multipart>,
    written: u64,
}

struct Multipart {
    upload_id: Arc<str>,
    parts: PartsInFlight<Part>,
    completed: bool,
}

/// An uploaded part: its ETag, the MD5 of its bytes where computed, and its CRC-32.
struct Part {
    etag: String,
    /// The MD5 of its bytes, where its ETag was checked against it (a store that does not take
    /// checksums).
    digest: Option<[u8; 16]>,
    /// The CRC-32 it was sent with (`verify_writes: etag`).
    crc: Option<u32>,
}

impl Upload<'_> {
    fn start_multipart(&mut self) -> io::Result<()> {
        let client = &*self.client;
        let key = self.key.as_str();
        // Parts sent with their CRC-32 (`verify_writes: etag`): the algorithm is declared here,
        // as S3 asks, and each part's checksum given again at completion.
        let crc = self.pending_crc.is_some();
        let url = || {
            let mut action = client
                .service
                .bucket
                .create_multipart_upload(client.service.credentials.as_ref(), key);
            if crc {
                action
                    .headers_mut()
                    .insert("x-amz-checksum-algorithm", "CRC32");
            }
            action.sign(SIGNATURE_LIFETIME)
        };
        let request = Request {
            kind: RequestKind::Multipart,
            object: key,
            method: Method::Post.to_str(),
            url: &url,
            headers: if crc {
                vec![("x-amz-checksum-algorithm", "CRC32".to_string())]
            } else {
                Vec::new()
            },
            body: None,
            also_accept: &[],
        };
        let mut take = |response: &mut client::Response| response.text();
        let text = client.send(&request, &mut take, |_| 0)?;
        let upload_id = xml_field(&text, "UploadId")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("starting a multipart upload of {key} gave no UploadId: {text}"),
                )
            })?;
        self.multipart = Some(Multipart {
            upload_id: upload_id.into(),
            parts: PartsInFlight::new(self.storage.parts_in_flight),
            completed: false,
        });
        Ok(())
    }

    /// Hands `pending` to a thread that uploads it as the next part, once fewer than
    /// `parts_in_flight` are in flight.
    fn send_part(&mut self) -> io::Result<()> {
        if self.multipart.is_none() {
            self.start_multipart()?;
        }
        let multipart = self.multipart.as_mut().expect("started above");
        let number = multipart.parts.sent() + 1;
        let part_number = u16::try_from(number)
            .ok()
            .filter(|&n| n <= 10_000)
            .ok_or_else(|| {
                io::Error::other(format!(
                    "{} needs more than 10,000 parts: raise \
                     workload.storage.storage_options.part_size",
                    self.key
                ))
            })?;
        let next = multipart.parts.buffer(self.storage.part_size);
        let body = std::mem::replace(&mut self.pending, next);
        let crc = self
            .pending_crc
            .as_mut()
            .map(|hasher| std::mem::take(hasher).finalize());
        let (client, key, upload_id) = (
            Arc::clone(&self.client),
            self.key.clone(),
            Arc::clone(&multipart.upload_id),
        );
        multipart.parts.send(body, move |_, body| {
            let (etag, digest) = upload_part(&client, &key, &upload_id, part_number, body, crc)?;
            Ok(Part { etag, digest, crc })
        })
    }

    /// Completes the upload once every part is in, and checks the object the server made: the
    /// ETag of the parts' MD5s, or else all the bytes written (a HEAD).
    fn complete(&mut self) -> io::Result<()> {
        let multipart = self.multipart.as_mut().expect("a multipart upload");
        let parts = multipart.parts.all_done()?;
        let client = &*self.client;
        let key = self.key.as_str();
        let upload_id = &*multipart.upload_id;
        let action = || {
            client.service.bucket.complete_multipart_upload(
                client.service.credentials.as_ref(),
                key,
                upload_id,
                parts.iter().map(|p| p.etag.as_str()),
            )
        };
        let body = match parts.iter().map(|p| p.crc).collect::<Option<Vec<u32>>>() {
            Some(crcs) => completion_with_checksums(&parts, &crcs),
            None => action().body(),
        };
        let url = || action().sign(SIGNATURE_LIFETIME);
        let text = S3Storage::exchange(
            client,
            RequestKind::Multipart,
            key,
            Method::Post,
            &url,
            Some(body.as_bytes()),
        )?;
        // S3 may answer 200 and still fail: the error is then in the body.
        if let Some(code) = xml_field(&text, "Code") {
            return Err(io::Error::other(format!(
                "completing the upload of {} failed: {code} {}",
                client.name(key),
                xml_field(&text, "Message").unwrap_or("")
            )));
        }
        multipart.completed = true;
        // S3's ETag of a multipart object: the MD5 of its parts' MD5s, then `-N`, where every
        // part was checked by its MD5; else (parts checked by their CRC by the store, or not at
        // all) the size.
        let digests: Option<Vec<[u8; 16]>> = parts.iter().map(|p| p.digest).collect();
        let expected = Expected {
            bytes: self.written,
            digest: digests.map(|d| format!("{}-{}", hex(&md5_of(&d.concat())), d.len())),
        };
        let answered =
            xml_field(&text, "ETag").map(|t| t.replace("&quot;", "\"").replace("&#34;", "\""));
        // The parts are gone from memory: nothing to write again.
        let stored = self
            .storage
            .check_stored(client, key, &expected, answered.as_deref())?;
        checked::checked_once(client, &client.name(key), &expected, stored)
    }
}

/// Uploads `body` as part `number` of the upload `upload_id` of the full key `key`, sent with
/// its CRC-32 `crc` (`verify_writes: etag`), and checks the part stored: the CRC the store
/// answers with (it refuses a part that arrived otherwise, 400 `BadDigest`), or where it takes no
/// checksums, its ETag against the MD5 of `body`. A mismatch is sent again, up to
/// `s3_max_attempts` times. Returns the ETag, and the MD5 where the ETag was checked by it.
fn upload_part(
    client: &Client,
    key: &str,
    upload_id: &str,
    number: u16,
    body: &[u8],
    crc: Option<u32>,
) -> io::Result<(String, Option<[u8; 16]>)> {
    let header = crc.map(crc_header);
    let url = || {
        let mut action = client.service.bucket.upload_part(
            client.service.credentials.as_ref(),
            key,
            number,
            upload_id,
        );
        if let Some(header) = &header {
            action
                .headers_mut()
                .insert("x-amz-checksum-crc32", header.clone());
        }
        action.sign(SIGNATURE_LIFETIME)
    };
    let request = Request {
        kind: RequestKind::PartUpload,
        object: key,
        method: Method::Put.to_str(),
        url: &url,
        headers: header
            .iter()
            .map(|h| ("x-amz-checksum-crc32", h.clone()))
            .collect(),
        body: Some(body),
        also_accept: if crc.is_some() { &[400] } else { &[] },
    };
    let what = format!("part {number} of {}", client.name(key));
    let mut take = |response: &mut client::Response| {
        let text = response.text()?;
        if response.status == 400 {
            if !refused_as_damaged(&text) {
                return Err(refused(&what, &text));
            }
            return Ok((String::new(), Checksum::Refused));
        }
        let etag = response
            .header("etag")
            .filter(|etag| !etag.is_empty())
            .map(str::to_string)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{what} was answered without an ETag"),
                )
            })?;
        Ok((etag, Checksum::of(response)))
    };
    let expected = Expected {
        bytes: body.len() as u64,
        digest: crc.map(crc_text),
    };
    let mut answered = String::new();
    let mut checked_md5 = None;
    checked::write_checked(client, (&what, Written::Part), &expected, &mut || {
        let (etag, checksum) = client.send(&request, &mut take, |_| body.len() as u64)?;
        answered = etag;
        match checksum {
            // A store that takes no checksums: the ETag against the MD5, where both are of that
            // form; else the object's size is checked once complete.
            Checksum::Absent if crc.is_some() && etag_digest(&answered).is_some() => {
                let md5 = md5_of(body);
                checked_md5 = Some(md5);
                let by_md5 = Expected {
                    bytes: expected.bytes,
                    digest: Some(hex(&md5)),
                };
                checked::compare(&by_md5, None, etag_digest(&answered), &mut || Ok(None))
                    .map(|stored| stored.filter(|s| s.digest.is_some()))
            }
            checksum => Ok(checksum.against(&expected)),
        }
    })?;
    Ok((answered, checked_md5))
}

/// A CompleteMultipartUpload body with each part's ETag and CRC-32 (an upload whose algorithm
/// was declared: S3 wants every part's checksum again).
fn completion_with_checksums(parts: &[&Part], crcs: &[u32]) -> String {
    let mut body =
        String::from("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for (i, (part, crc)) in parts.iter().zip(crcs).enumerate() {
        let etag = part
            .etag
            .replace('&', "&amp;")
            .replace('"', "&quot;")
            .replace('<', "&lt;");
        body.push_str(&format!(
            "<Part><ETag>{etag}</ETag><PartNumber>{}</PartNumber><ChecksumCRC32>{}</ChecksumCRC32></Part>",
            i + 1,
            crc_header(*crc)
        ));
    }
    body.push_str("</CompleteMultipartUpload>");
    body
}

impl ObjectWriter for Upload<'_> {
    fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        let part = self.storage.part_size;
        self.written += bytes.len() as u64;
        while !bytes.is_empty() {
            let room = part - self.pending.len();
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.pending.extend_from_slice(now);
            if let Some(crc) = &mut self.pending_crc {
                crc.update(now);
            }
            bytes = later;
            // A full part is sent once more bytes come: the last part is sent by `finish`.
            if self.pending.len() == part && !bytes.is_empty() {
                self.send_part()?;
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if self.multipart.is_none() {
            let pending = std::mem::take(&mut self.pending);
            let crc = self.pending_crc.take().map(crc32fast::Hasher::finalize);
            return self.storage.put_checked(&self.key, &pending, crc);
        }
        if !self.pending.is_empty() {
            self.send_part()?;
        }
        self.complete()
    }

    /// An object store's answer to a PUT or a completed upload means the object is stored.
    fn finish_durably(self: Box<Self>) -> io::Result<()> {
        self.finish()
    }
}

impl Drop for Upload<'_> {
    fn drop(&mut self) {
        let Some(multipart) = &mut self.multipart else {
            return;
        };
        if multipart.completed {
            return;
        }
        // A part that ends after the abort could leave the upload behind on some stores.
        multipart.parts.settle();
        let client = &*self.client;
        let (key, upload_id) = (self.key.as_str(), &*multipart.upload_id);
        let url = || {
            client
                .service
                .bucket
                .abort_multipart_upload(client.service.credentials.as_ref(), key, upload_id)
                .sign(SIGNATURE_LIFETIME)
        };
        // Best effort: the upload failed already, and that failure is what is reported; an
        // upload left behind is invisible as an object and expires by the bucket's policy.
        let _ = S3Storage::exchange(
            client,
            RequestKind::Multipart,
            key,
            Method::Delete,
            &url,
            None,
        );
    }
}

#[cfg(test)]
mod tests;
