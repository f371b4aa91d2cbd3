//! Google Cloud Storage (`storage.storage_type: gcs`, dlio-rs's own): a bucket, through GCS's
//! JSON API, with the configured folder as the prefix of every object name.
//!
//! How each [`Storage`] call maps to requests (docs/object-storage.md, "Google Cloud Storage"):
//! - a whole object is one download (`alt=media`); a part one download with `Range: bytes=a-b`,
//!   several parts of one object that many in flight at once; an object's tail one download of
//!   the suffix (`bytes=-N`), whose `Content-Range` gives the size;
//! - an object is written by one simple upload (`uploadType=media`) up to `part_size` bytes,
//!   whose answer (the object's metadata) is checked for its size, beyond that by a resumable upload: a session started, a `part_size` chunk per request
//!   (`Content-Range: bytes a-b/*`, each answered 308 with the bytes GCS holds, checked), the last
//!   chunk with the total, whose answer (the object's metadata) is checked for its size. A writer
//!   that fails or is dropped midway cancels its session: no object appears;
//! - an object's size is one metadata get (`objects.get`); a folder's listing one paginated list
//!   (`pageToken`) with the `/` delimiter;
//! - the lease objects ([`super::lease`]) use a multipart upload with `ifGenerationMatch=0`
//!   (only if absent) or `ifGenerationMatch=N` (only in place of generation N), a download whose
//!   `x-goog-generation` is the tag, and a delete with `ifGenerationMatch` (412 where it fails)
//!   after a metadata get of the generation;
//! - a generation makes the bucket if it is missing (`buckets.insert` in `GOOGLE_CLOUD_PROJECT`);
//! - nothing is cached and nothing can be mapped ([`Accounting::Requests`]).
//!
//! Who asks: a bearer token from `GOOGLE_OAUTH_ACCESS_TOKEN` (`gcloud auth
//! print-access-token`), or nothing (an emulator, `STORAGE_EMULATOR_HOST`, or public objects).
//! Service-account keys (`GOOGLE_APPLICATION_CREDENTIALS`: a JWT signed with the key's RSA key,
//! traded for a token that lasts an hour) are not built: RSA signing would add a crate of its
//! own, and the token's refresh a thread; a token made by `gcloud` serves a run of up to an hour.

use std::io::{self, Read};
use std::sync::Arc;

use serde_json::Value;

use super::checked::{self, hex, Expected, Written};
use super::download::{not_mappable, take_answer, Span};
use super::http::{Call, Client, Limits, RequestError, Response, Service, Take};
use super::requests::{RequestCounts, RequestKind};
use super::{
    Accounting, Condition, EntryKind, IoBuffer, Mapped, ObjectReader, ObjectWriter, OnRange,
    RangeRead, Storage, Window,
};
use crate::config::{Config, ObjectStoreOptions, VerifyWrites};
use crate::error::{Error, Result};

/// Writers of a generation where `max_in_flight` does not say ([`Storage::writers`]): as S3's.
const DEFAULT_WRITERS: usize = 16;

/// Chunks of a resumable upload are multiples of this (GCS's rule), the last one aside.
const CHUNK_UNIT: usize = 256 << 10;

#[derive(Clone)]
pub struct GcsStorage {
    client: Arc<Client<Bearer>>,
    bucket: String,
    /// `https://storage.googleapis.com`, or an emulator's; no closing `/`.
    endpoint: String,
    /// Every object name's start: the configured folder, ending in `/`, or empty.
    prefix: String,
    part_size: usize,
    /// Ranges a sequential reader reads ahead.
    parts_in_flight: usize,
    verify: VerifyWrites,
    writers: usize,
    /// Names per list page: GCS's most, 1,000 (tests make pages small).
    list_page: usize,
}

/// A bearer token on every request, if there is one ([`Service`] of the REST client).
struct Bearer(Option<String>);

impl Service for Bearer {
    fn authorize(
        &self,
        _method: &str,
        _url: &url::Url,
        headers: &mut Vec<(&'static str, String)>,
        _body_len: usize,
    ) -> io::Result<()> {
        if let Some(token) = &self.0 {
            headers.push(("authorization", format!("Bearer {token}")));
        }
        Ok(())
    }

    /// GCS's JSON error: `{"error": {"code", "message", "errors": [{"reason"}]}}`.
    fn error_of(&self, _response: &Response, body: &str) -> (Option<String>, String) {
        let Ok(error) = serde_json::from_str::<Value>(body) else {
            return (None, String::new());
        };
        let error = &error["error"];
        let reason = error["errors"][0]["reason"].as_str().map(str::to_string);
        let message = error["message"].as_str().unwrap_or("").to_string();
        (reason, message)
    }
}

/// The bucket and the name prefix of a configured folder: `gs://bucket/path` (s3dlio's form), or
/// a path below the bucket `storage.storage_root`.
fn bucket_and_prefix(config: &Config, folder: &str) -> Result<(String, String)> {
    let (bucket, path) = match folder.strip_prefix("gs://") {
        Some(rest) => {
            let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
            (bucket.to_string(), path)
        }
        None if folder.contains("://") => {
            return Err(Error::usage(format!(
                "the folder '{folder}' is not a GCS address: with storage_type = gcs a folder is \
                 a path below the bucket (storage.storage_root) or gs://BUCKET/PATH"
            )))
        }
        None => {
            let root = config.storage.storage_root.trim_end_matches('/');
            if root.is_empty() || root == "." {
                return Err(Error::usage(
                    "workload.storage.storage_root must name the bucket with storage_type = gcs \
                     (e.g. ++workload.storage.storage_root=my-bucket)",
                ));
            }
            (root.to_string(), folder)
        }
    };
    let valid = (3..=63).contains(&bucket.len())
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b));
    if !valid {
        return Err(Error::usage(format!(
            "'{bucket}' is not a bucket name (3 to 63 characters of a-z, 0-9, '.', '-', '_'); \
             it comes from {}",
            if folder.starts_with("gs://") {
                format!("the folder '{folder}'")
            } else {
                "workload.storage.storage_root".to_string()
            }
        )));
    }
    if path.split('/').any(|part| part == "..") {
        return Err(Error::usage(format!(
            "the folder '{folder}' has '..': object names have no parent folder"
        )));
    }
    let mut path = path.trim_start_matches('/');
    while let Some(rest) = path.strip_prefix("./") {
        path = rest.trim_start_matches('/');
    }
    let prefix = match path.trim_end_matches('/') {
        "" | "." => String::new(),
        path => format!("{path}/"),
    };
    Ok((bucket, prefix))
}

/// The endpoint: `endpoint_url`, else `GCS_ENDPOINT_URL` (s3dlio's), else
/// `STORAGE_EMULATOR_HOST` (the Google client libraries' emulator variable, `host:port`, `http`
/// unless it says), else Google's.
fn endpoint(options: &ObjectStoreOptions, env: &dyn Fn(&str) -> Option<String>) -> Result<String> {
    let endpoint = options
        .endpoint_url
        .clone()
        .or_else(|| env("GCS_ENDPOINT_URL"))
        .or_else(|| {
            env("STORAGE_EMULATOR_HOST").map(|host| {
                if host.contains("://") {
                    host
                } else {
                    format!("http://{host}")
                }
            })
        })
        .unwrap_or_else(|| "https://storage.googleapis.com".to_string());
    let url: url::Url = endpoint.parse().map_err(|e| {
        Error::usage(format!(
            "workload.storage.storage_options.endpoint_url (or GCS_ENDPOINT_URL, \
             STORAGE_EMULATOR_HOST) = '{endpoint}': not a URL ({e})"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
        return Err(Error::usage(format!(
            "the GCS endpoint '{endpoint}' is not http:// or https:// with a host"
        )));
    }
    Ok(endpoint.trim_end_matches('/').to_string())
}

/// `text` percent-encoded for a URL: all but the unreserved characters (an object name is one
/// path segment of the JSON API, its `/` included).
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl GcsStorage {
    /// The bucket and folder `folder` of the configuration (a path below the bucket
    /// `storage.storage_root`, or `gs://bucket/path`), for about `concurrency` threads making
    /// requests at once.
    pub fn for_folder(config: &Config, folder: &str, concurrency: usize) -> Result<GcsStorage> {
        let (bucket, prefix) = bucket_and_prefix(config, folder)?;
        let options = &config.storage.options;
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let endpoint = endpoint(options, &env)?;
        if options.part_size as usize % CHUNK_UNIT != 0 {
            return Err(Error::usage(format!(
                "workload.storage.storage_options.part_size = {}: GCS's chunks are multiples of \
                 256 KiB (262144 bytes)",
                options.part_size
            )));
        }
        let limits = Limits::of(
            options,
            options.ca_bundle.as_deref(),
            "workload.storage.storage_options.ca_bundle",
        )?;
        let writers = match limits.max_in_flight {
            0 => DEFAULT_WRITERS,
            cap => cap,
        };
        let token = Bearer(env("GOOGLE_OAUTH_ACCESS_TOKEN"));
        Ok(GcsStorage {
            client: Arc::new(Client::new(token, &limits, concurrency.max(writers))),
            bucket,
            endpoint,
            prefix,
            part_size: options.part_size as usize,
            parts_in_flight: (options.parts_in_flight as usize).max(1),
            verify: options.verify_writes,
            writers,
            list_page: 1000,
        })
    }

    /// The same storage listing `names` names per page, so that a test sees pagination.
    #[cfg(test)]
    fn with_list_page(mut self, names: usize) -> GcsStorage {
        self.list_page = names;
        self
    }

    fn key(&self, key: &str) -> String {
        format!("{}{}", self.prefix, key.trim_start_matches('/'))
    }

    /// `gs://bucket/name`, for messages.
    fn object(&self, name: &str) -> String {
        format!("gs://{}/{name}", self.bucket)
    }

    /// `{endpoint}/{path}?{query}`, the query's values encoded.
    fn url(&self, path: &str, query: &[(&str, &str)]) -> url::Url {
        let mut text = format!("{}/{path}", self.endpoint);
        if !query.is_empty() {
            let parts: Vec<String> = query
                .iter()
                .map(|(k, v)| format!("{k}={}", encode(v)))
                .collect();
            text.push('?');
            text.push_str(&parts.join("&"));
        }
        text.parse().expect("a URL made of a valid one")
    }

    fn object_url(&self, name: &str, query: &[(&str, &str)]) -> url::Url {
        self.url(
            &format!("storage/v1/b/{}/o/{}", self.bucket, encode(name)),
            query,
        )
    }

    fn upload_url(&self, query: &[(&str, &str)]) -> url::Url {
        self.url(&format!("upload/storage/v1/b/{}/o", self.bucket), query)
    }

    /// Makes `call` on `name` until it is answered, its answer taken by `take`; `received` tells
    /// the bytes of the answer's body.
    fn send<T>(
        &self,
        name: &str,
        call: Call<'_>,
        take: &mut Take<'_, T>,
        received: impl Fn(&T) -> u64,
    ) -> io::Result<T> {
        self.client.call(&self.object(name), call, take, received)
    }

    /// Downloads `span` of the object `name` into `buf`; a range that starts past the end gives
    /// no bytes. Returns them, and the object's size where the answer tells it.
    fn fetch(
        &self,
        name: &str,
        span: Span,
        buf: &mut IoBuffer,
    ) -> io::Result<(RangeRead, Option<u64>)> {
        if span.is_empty() {
            buf.resize_for_writing(0)?;
            return Ok((RangeRead::default(), None));
        }
        let url = self.object_url(name, &[("alt", "media")]);
        let kind = span.kind();
        let mut take = |response: &mut Response| take_answer(response, span, buf);
        let headers = span
            .range_header()
            .map(|r| ("range", r))
            .into_iter()
            .collect();
        let (len, size) = self.send(
            name,
            Call::new(kind, "GET", &url)
                .headers(headers)
                .accepting(&[416]),
            &mut take,
            |&(n, _)| n as u64,
        )?;
        let read = RangeRead {
            start: 0,
            len,
            fetched: len as u64,
        };
        Ok((read, size))
    }

    /// The object's metadata (`objects.get`): its size and generation; `None` where there is
    /// none.
    fn metadata(&self, name: &str) -> io::Result<Option<(u64, String)>> {
        let url = self.object_url(name, &[]);
        let mut take = |response: &mut Response| {
            let text = response.text()?;
            if response.status == 404 {
                return Ok(None);
            }
            Ok(Some(size_and_generation(&text)?))
        };
        self.send(
            name,
            Call::new(RequestKind::Head, "GET", &url).accepting(&[404]),
            &mut take,
            |_| 0,
        )
    }

    fn size_of(&self, name: &str) -> io::Result<u64> {
        let (size, _) = self
            .metadata(name)?
            .ok_or_else(|| super::not_found(self.object(name)))?;
        Ok(size)
    }

    /// A simple upload: the whole object in one request, checked (`verify_writes`,
    /// [`checked`]) by its answer, the object's metadata: its `md5Hash` (the MD5 GCS computed
    /// of what it stored) and its `size`, before it counts.
    fn put_whole(&self, name: &str, data: &[u8]) -> io::Result<()> {
        let expected = Expected::of(data, self.verify);
        let url = self.upload_url(&[("uploadType", "media"), ("name", name)]);
        let object = self.object(name);
        checked::write_checked(
            &self.client,
            (&object, Written::Object),
            &expected,
            &mut || {
                let mut take = |response: &mut Response| stored_of(&response.text()?);
                let (size, digest) = self.send(
                    name,
                    Call::new(RequestKind::Put, "POST", &url)
                        .headers(vec![(
                            "content-type",
                            "application/octet-stream".to_string(),
                        )])
                        .body(data),
                    &mut take,
                    |_| 0,
                )?;
                checked::compare(&expected, Some(size), digest, &mut || Ok(Some(size)))
            },
        )
    }
}

/// The `size` and `generation` of an object's metadata (JSON, both as strings).
fn size_and_generation(text: &str) -> io::Result<(u64, String)> {
    let bad = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "object metadata without size or generation: {}",
                text.chars().take(200).collect::<String>()
            ),
        )
    };
    let metadata: Value = serde_json::from_str(text).map_err(|_| bad())?;
    let size = metadata["size"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let generation = metadata["generation"].as_str().ok_or_else(bad)?;
    Ok((size, generation.to_string()))
}

/// The `size` and `md5Hash` (base64 in GCS's JSON; here lower-case hex) of an object's
/// metadata: what GCS stored.
fn stored_of(text: &str) -> io::Result<(u64, Option<String>)> {
    let (size, _) = size_and_generation(text)?;
    let metadata: Value = serde_json::from_str(text).unwrap_or(Value::Null);
    let digest = metadata["md5Hash"]
        .as_str()
        .and_then(|b| base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b).ok())
        .filter(|bytes| bytes.len() == 16)
        .map(|bytes| hex(&bytes));
    Ok((size, digest))
}

/// Whether `tag` can be an object's generation (a positive number), the tag of a GCS object.
fn is_generation(tag: &str) -> bool {
    !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()) && tag != "0"
}

impl Storage for GcsStorage {
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
    /// ranged download on its own thread; they are handed over in order, a window at a time.
    fn read_ranges(
        &self,
        key: &str,
        ranges: &[(u64, usize)],
        window: Window,
        buf: &mut IoBuffer,
        each: &mut OnRange<'_>,
    ) -> io::Result<()> {
        let name = self.key(key);
        super::ranged::read_ranges_by_requests(ranges, window, buf, each, &|(offset, len), buf| {
            self.fetch(&name, Span::Range(offset, len), buf)
                .map(|(read, _)| read)
        })
    }

    fn map_range(&self, key: &str, _offset: u64, _len: usize) -> io::Result<Mapped> {
        Err(not_mappable(self.describe(key)))
    }

    /// One list of at most one name: the endpoint answers, the token is taken, the bucket exists
    /// (made with `create`, in `GOOGLE_CLOUD_PROJECT`, as a generation makes its folder).
    fn check_access(&self, create: bool) -> Result<()> {
        let url = self.url(
            &format!("storage/v1/b/{}/o", self.bucket),
            &[("maxResults", "1"), ("prefix", &self.prefix)],
        );
        let mut take = |response: &mut Response| response.text().map(drop);
        let Err(error) = self.send(
            &self.prefix,
            Call::new(RequestKind::List, "GET", &url),
            &mut take,
            |_| 0,
        ) else {
            return Ok(());
        };
        let bucket = &self.bucket;
        let endpoint = &self.endpoint;
        match RequestError::of(&error).map(|f| f.status) {
            Some(Some(404)) if create => {
                let project = std::env::var("GOOGLE_CLOUD_PROJECT")
                    .ok()
                    .filter(|p| !p.is_empty())
                    .unwrap_or_else(|| "dlio-rs".to_string());
                let url = self.url("storage/v1/b", &[("project", &project)]);
                let body = serde_json::json!({ "name": bucket }).to_string();
                let mut take = |response: &mut Response| response.text().map(drop);
                self.send(
                    "",
                    Call::new(RequestKind::CreateBucket, "POST", &url)
                        .headers(vec![("content-type", "application/json".to_string())])
                        .body(body.as_bytes())
                        // Another process of the run made it first.
                        .accepting(&[409]),
                    &mut take,
                    |_| 0,
                )
                .map_err(|e| Error::on_object("cannot create bucket", self.object(""), e))
            }
            Some(Some(404)) => Err(Error::usage(format!(
                "bucket '{bucket}' does not exist at {endpoint}: generate the dataset first \
                 (++workload.workflow.generate_data=True makes the bucket), or name another \
                 (workload.storage.storage_root)"
            ))),
            Some(Some(401 | 403)) => Err(Error::usage(format!(
                "GCS at {endpoint} refused access to bucket '{bucket}': {error}; set \
                 GOOGLE_OAUTH_ACCESS_TOKEN (e.g. $(gcloud auth print-access-token))"
            ))),
            _ => Err(Error::on_object(
                "cannot reach bucket",
                format!("{bucket} at {endpoint}"),
                error,
            )),
        }
    }

    fn writers(&self) -> Option<usize> {
        Some(self.writers)
    }

    fn request_counts(&self) -> Option<RequestCounts> {
        Some(self.client.counts())
    }

    fn size(&self, key: &str) -> io::Result<u64> {
        self.size_of(&self.key(key))
    }

    /// One download of the suffix (`Range: bytes=-len`): its Content-Range carries the size.
    fn read_tail(&self, key: &str, len: usize, buf: &mut IoBuffer) -> io::Result<(RangeRead, u64)> {
        let name = self.key(key);
        match self.fetch(&name, Span::Suffix(len), buf)? {
            (read, Some(size)) => Ok((read, size)),
            // An empty object (416 without a size): nothing to read.
            (read, None) => Ok((read, self.size_of(&name)?)),
        }
    }

    fn create(&self, key: &str) -> io::Result<Box<dyn ObjectWriter + '_>> {
        Ok(Box::new(Upload {
            storage: self,
            name: self.key(key),
            pending: Vec::new(),
            session: None,
            sent: 0,
            digest: (self.verify == VerifyWrites::Etag).then(<md5::Md5 as md5::Digest>::new),
            done: false,
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
        let name = self.key(key);
        let size = self.size_of(&name)?;
        let object = self.object(&name).to_string();
        let this = self.clone();
        let fetch_range = move |(offset, len), buf: &mut IoBuffer| {
            this.fetch(&name, Span::Range(offset, len), buf)
                .map(|(read, _)| read)
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
        Ok(self.metadata(&self.key(key))?.is_some())
    }

    fn make_folder(&self, _key: &str) -> io::Result<()> {
        Ok(())
    }

    /// One delete: GCS answers 404 for an object that is not there.
    fn delete(&self, key: &str) -> io::Result<bool> {
        let name = self.key(key);
        let url = self.object_url(&name, &[]);
        let mut take = |response: &mut Response| {
            let _ = response.text();
            Ok(response.status != 404)
        };
        self.send(
            &name,
            Call::new(RequestKind::Delete, "DELETE", &url).accepting(&[404]),
            &mut take,
            |_| 0,
        )
    }

    /// A multipart upload (metadata and bytes) with `ifGenerationMatch`: 0 for "only if absent".
    fn put_if(
        &self,
        key: &str,
        data: &[u8],
        condition: Condition<'_>,
    ) -> io::Result<Option<String>> {
        let name = self.key(key);
        let generation = match condition {
            Condition::Absent => "0",
            // Not a generation (another store's tag): no object has it.
            Condition::Matches(tag) if !is_generation(tag) => return Ok(None),
            Condition::Matches(tag) => tag,
        };
        let url = self.upload_url(&[
            ("uploadType", "multipart"),
            ("ifGenerationMatch", generation),
        ]);
        let boundary = "dlio-rs-lease-boundary";
        let mut body = format!(
            "--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{}\r\n\
             --{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n",
            serde_json::json!({ "name": name })
        )
        .into_bytes();
        body.extend_from_slice(data);
        body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
        let headers = vec![(
            "content-type",
            format!("multipart/related; boundary={boundary}"),
        )];
        let mut take = |response: &mut Response| {
            let text = response.text()?;
            if response.status == 412 {
                return Ok(None);
            }
            Ok(Some(size_and_generation(&text)?.1))
        };
        self.send(
            &name,
            Call::new(RequestKind::Lease, "POST", &url)
                .headers(headers)
                .body(&body)
                .accepting(&[412]),
            &mut take,
            |_| 0,
        )
    }

    fn get_tagged(&self, key: &str, limit: usize) -> io::Result<Option<(Vec<u8>, String)>> {
        let name = self.key(key);
        let url = self.object_url(&name, &[("alt", "media")]);
        let mut take = |response: &mut Response| {
            if response.status == 404 {
                let _ = response.text();
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
            let tag = response
                .header("x-goog-generation")
                .unwrap_or("")
                .to_string();
            Ok(Some((body, tag)))
        };
        let received =
            |got: &Option<(Vec<u8>, String)>| got.as_ref().map_or(0, |(b, _)| b.len() as u64);
        self.send(
            &name,
            Call::new(RequestKind::Lease, "GET", &url).accepting(&[404]),
            &mut take,
            received,
        )
    }

    /// The object's generation is looked up first, then deleted with `ifGenerationMatch`: GCS
    /// decides by the condition alone, but fake-gcs-server (the tests' server) deletes for any
    /// generation the object ever had; the look-up keeps a stale tag from deleting there too.
    fn delete_if(&self, key: &str, tag: &str) -> io::Result<bool> {
        if !is_generation(tag) {
            return Ok(false);
        }
        let name = self.key(key);
        match self.metadata(&name)? {
            Some((_, generation)) if generation == tag => {}
            _ => return Ok(false),
        }
        let url = self.object_url(&name, &[("ifGenerationMatch", tag)]);
        let mut take = |response: &mut Response| {
            let _ = response.text();
            Ok(response.status < 300)
        };
        self.send(
            &name,
            Call::new(RequestKind::Lease, "DELETE", &url).accepting(&[404, 412]),
            &mut take,
            |_| 0,
        )
    }

    fn list_dir(&self, prefix: &str, each: &mut dyn FnMut(&str, EntryKind)) -> io::Result<()> {
        let mut folder = self.key(prefix);
        if !folder.is_empty() && !folder.ends_with('/') {
            folder.push('/');
        }
        let page_size = self.list_page.to_string();
        let mut token = String::new();
        loop {
            let mut query = vec![
                ("prefix", folder.as_str()),
                ("delimiter", "/"),
                ("maxResults", page_size.as_str()),
            ];
            if !token.is_empty() {
                query.push(("pageToken", token.as_str()));
            }
            let url = self.url(&format!("storage/v1/b/{}/o", self.bucket), &query);
            let mut take = |response: &mut Response| response.text();
            let text = self.send(
                &folder,
                Call::new(RequestKind::List, "GET", &url),
                &mut take,
                |_| 0,
            )?;
            let page: Value = serde_json::from_str(&text).map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "an unreadable list answer for {}: {e}",
                        self.object(&folder)
                    ),
                )
            })?;
            let names = |field: &str| -> Vec<String> {
                page[field]
                    .as_array()
                    .map(|items| {
                        items
                            .iter()
                            .filter_map(|item| item.as_str().or_else(|| item["name"].as_str()))
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            for (full, kind) in names("items")
                .into_iter()
                .map(|n| (n, EntryKind::File))
                .chain(
                    names("prefixes")
                        .into_iter()
                        .map(|n| (n, EntryKind::Folder)),
                )
            {
                if let Some(name) = full.strip_prefix(folder.as_str()) {
                    let name = name.trim_end_matches('/');
                    if !name.is_empty() {
                        each(name, kind);
                    }
                }
            }
            match page["nextPageToken"].as_str() {
                Some(next) if !next.is_empty() => token = next.to_string(),
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

/// An object being written: bytes wait in `pending` until a chunk is full; the first full chunk
/// starts a resumable session. [`ObjectWriter::finish`] sends what is left as one simple upload,
/// or as the last chunk with the total; dropped unfinished, the session is cancelled.
struct Upload<'s> {
    storage: &'s GcsStorage,
    name: String,
    pending: Vec<u8>,
    /// The resumable session's URL, once started.
    session: Option<url::Url>,
    /// Bytes sent in chunks so far.
    sent: u64,
    /// The MD5 of the bytes sent so far (`verify_writes: etag`), to check the object's `md5Hash`.
    digest: Option<md5::Md5>,
    done: bool,
}

impl Upload<'_> {
    fn start_session(&mut self) -> io::Result<url::Url> {
        let storage = self.storage;
        let url = storage.upload_url(&[("uploadType", "resumable"), ("name", &self.name)]);
        let mut take = |response: &mut Response| {
            let _ = response.text();
            let location = response.header("location").unwrap_or("");
            location.parse::<url::Url>().map_err(|e| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "a resumable upload answered without a session URL ({location:?}: {e})"
                    ),
                )
            })
        };
        storage.send(
            &self.name,
            Call::new(RequestKind::Multipart, "POST", &url)
                .headers(vec![(
                    "x-upload-content-type",
                    "application/octet-stream".to_string(),
                )])
                .body(b""),
            &mut take,
            |_| 0,
        )
    }

    /// Sends `pending[..len]` as the next chunk; `last` gives the total and ends the upload,
    /// whose answer (the object's metadata) must hold every byte written.
    fn send_chunk(&mut self, len: usize, last: bool) -> io::Result<()> {
        let session = match &self.session {
            Some(session) => session.clone(),
            None => {
                let session = self.start_session()?;
                self.session = Some(session.clone());
                session
            }
        };
        let storage = self.storage;
        let first = self.sent;
        let end = first + len as u64;
        let total = if last {
            end.to_string()
        } else {
            "*".to_string()
        };
        let range = if len == 0 {
            format!("bytes */{total}")
        } else {
            format!("bytes {first}-{}/{total}", end - 1)
        };
        let name = self.name.clone();
        let object = storage.object(&name);
        let mut take = |response: &mut Response| {
            let text = response.text()?;
            let (held, digest) = if response.status == 308 {
                // `Range: bytes=0-N`: what GCS holds so far.
                let held = response
                    .header("range")
                    .and_then(|r| r.rsplit_once('-'))
                    .and_then(|(_, n)| n.parse::<u64>().ok())
                    .map(|n| n + 1);
                (held, None)
            } else {
                let (size, digest) = stored_of(&text)?;
                (Some(size), digest)
            };
            if held != Some(end) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{object} holds {held:?} bytes after a chunk that ends at {end}"),
                ));
            }
            Ok(digest)
        };
        let chunk = &self.pending[..len];
        if let Some(md5) = &mut self.digest {
            md5::Digest::update(md5, chunk);
        }
        let stored_digest = storage.send(
            &name,
            Call::new(RequestKind::PartUpload, "PUT", &session)
                .headers(vec![("content-range", range)])
                .body(chunk)
                .accepting(&[308]),
            &mut take,
            |_| 0,
        )?;
        self.sent = end;
        self.pending.drain(..len);
        if last {
            // The chunks are gone from memory: nothing to write again.
            let expected = Expected {
                bytes: end,
                digest: self
                    .digest
                    .take()
                    .map(|md5| hex(&md5::Digest::finalize(md5))),
            };
            let stored =
                checked::compare(&expected, Some(end), stored_digest, &mut || Ok(Some(end)))?;
            checked::checked_once(&storage.client, &object, &expected, stored)?;
        }
        Ok(())
    }
}

impl ObjectWriter for Upload<'_> {
    fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        let part = self.storage.part_size;
        while !bytes.is_empty() {
            let room = part - self.pending.len();
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.pending.extend_from_slice(now);
            bytes = later;
            // A full chunk is sent once more bytes come: the last one is sent by `finish`.
            if self.pending.len() == part && !bytes.is_empty() {
                self.send_chunk(part, false)?;
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if self.session.is_none() {
            let pending = std::mem::take(&mut self.pending);
            self.done = true;
            return self.storage.put_whole(&self.name, &pending);
        }
        let len = self.pending.len();
        self.send_chunk(len, true)?;
        self.done = true;
        Ok(())
    }

    /// GCS's answer to an upload's last request means the object is stored.
    fn finish_durably(self: Box<Self>) -> io::Result<()> {
        self.finish()
    }
}

impl Drop for Upload<'_> {
    /// Cancels an unfinished session (best effort: the failure that left it is what is
    /// reported; GCS forgets an abandoned session after a week).
    fn drop(&mut self) {
        let (Some(session), false) = (&self.session, self.done) else {
            return;
        };
        let mut take = |response: &mut Response| response.text().map(drop);
        let _ = self.storage.send(
            &self.name,
            // GCS answers a cancelled session with 499.
            Call::new(RequestKind::Multipart, "DELETE", session).accepting(&[499]),
            &mut take,
            |_| 0,
        );
    }
}

#[cfg(test)]
mod tests;
