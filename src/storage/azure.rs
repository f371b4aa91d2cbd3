//! Azure Blob Storage (`storage.storage_type: azure`, dlio-rs's own): a container of a storage
//! account, with the configured folder as the prefix of every blob name.
//!
//! How each [`Storage`] call maps to Blob REST requests (docs/object-storage.md, "Azure Blob
//! Storage"):
//! - a whole object is one Get Blob; a part is one Get Blob with `x-ms-range: bytes=a-b`;
//!   several parts of one object are that many ranged gets in flight at once; Azure has no
//!   suffix range, so an object's tail is a Get Blob Properties (its size) and a ranged get;
//! - an object is written by one Put Blob up to `part_size` bytes, beyond that by a Put Block
//!   per `part_size` block and a Put Block List that commits them in order, then its size is
//!   checked with Get Blob Properties. A writer that fails or is dropped midway commits nothing:
//!   its blocks stay uncommitted, invisible, and Azure discards them (after a week, or at the
//!   blob's next commit); a blob already there is left as it was;
//! - a folder's listing is one paginated List Blobs (`marker`) with the `/` delimiter;
//! - the lease objects ([`super::lease`]) use Put Blob with `If-None-Match: *` and `If-Match`,
//!   Get Blob and Delete Blob with `If-Match` (Azure answers 409 `BlobAlreadyExists` or 412);
//! - a generation makes the container if it is missing (Create Container);
//! - nothing is cached and nothing can be mapped ([`Accounting::Requests`]).
//!
//! Requests are made by the REST client of [`super::http`] (timeouts, retries with S3's rules,
//! counts), signed with the account's key (SharedKey) or carrying a SAS token
//! ([`settings`]). Why not Microsoft's Rust SDK (`azure_storage_blob`): it is async only, so it
//! brings tokio and its runtime into every reader thread's blocking call (s3dlio wraps it in
//! `block_in_place`), plus the `azure_core` stack and reqwest beside the ureq the S3 backend
//! already uses; its authentication is Entra ID first. The few requests here are plain HTTP,
//! and SharedKey is an HMAC-SHA256 over a canonical form of the request: signed here with the
//! crates (hmac, sha2, base64) the S3 build already compiles.

mod settings;

use std::io::{self, Read};
use std::sync::Arc;

use self::settings::{Auth, Settings, Signer};
use super::checked::{self, hex, md5_of, Expected, Written};
use super::download::{not_mappable, take_answer, Span};
use super::http::{self, Call, Client, RequestError, Response, Take, TLS_REFUSED};
use super::parts::PartsInFlight;
use super::requests::{RequestCounts, RequestKind};
use super::{
    Accounting, Condition, EntryKind, IoBuffer, Mapped, ObjectReader, ObjectWriter, OnRange,
    RangeRead, Storage, Window,
};
use crate::config::{Config, VerifyWrites};
use crate::error::{Error, Result};

/// Writers of a generation where `max_in_flight` does not say ([`Storage::writers`]): as S3's.
const DEFAULT_WRITERS: usize = 16;

/// Azure's most blocks in one blob.
const MAX_BLOCKS: usize = 50_000;

#[derive(Clone)]
pub struct AzureStorage {
    client: Arc<Client<Signer>>,
    account: String,
    container: String,
    /// The container's URL, ending in `/`.
    base: url::Url,
    /// A SAS token's query, added to every URL.
    sas: Option<String>,
    /// Every blob name's start: the configured folder, ending in `/`, or empty.
    prefix: String,
    part_size: usize,
    /// Ranges a sequential reader reads ahead.
    parts_in_flight: usize,
    verify: VerifyWrites,
    writers: usize,
    /// Names per List Blobs page: Azure's most, 5,000 (tests make pages small).
    list_page: usize,
}

impl AzureStorage {
    /// The container and folder `folder` of the configuration (a path below the container
    /// `storage.storage_root`, or `az://account/container/path`), for about `concurrency`
    /// threads making requests at once.
    pub fn for_folder(config: &Config, folder: &str, concurrency: usize) -> Result<AzureStorage> {
        let (account, container, prefix) = settings::container_and_prefix(config, folder)?;
        let settings = Settings::resolve(&config.storage.options, account, container)?;
        let writers = match settings.limits.max_in_flight {
            0 => DEFAULT_WRITERS,
            cap => cap,
        };
        let (key, sas) = match settings.auth {
            Auth::SharedKey(key) => (Some(key), None),
            Auth::Sas(sas) => (None, Some(sas)),
            Auth::Anonymous => (None, None),
        };
        let base = settings
            .endpoint
            .join(&format!("{}/", settings.container))
            .map_err(|e| Error::usage(format!("the container's URL: {e}")))?;
        let signer = Signer {
            account: settings.account.clone(),
            key,
        };
        Ok(AzureStorage {
            client: Arc::new(Client::new(
                signer,
                &settings.limits,
                concurrency.max(writers),
            )),
            account: settings.account,
            container: settings.container,
            base,
            sas,
            prefix,
            part_size: settings.part_size,
            parts_in_flight: (config.storage.options.parts_in_flight as usize).max(1),
            verify: config.storage.options.verify_writes,
            writers,
            list_page: 5000,
        })
    }

    /// The same storage listing `names` names per page, so that a test sees pagination.
    #[cfg(test)]
    fn with_list_page(mut self, names: usize) -> AzureStorage {
        self.list_page = names;
        self
    }

    fn key(&self, key: &str) -> String {
        format!("{}{}", self.prefix, key.trim_start_matches('/'))
    }

    /// `az://account/container/blob`, for messages.
    fn object(&self, blob: &str) -> String {
        format!("az://{}/{}/{blob}", self.account, self.container)
    }

    /// The URL of the blob `blob` (the container's with `None`), with `query` and the SAS token.
    fn url(&self, blob: Option<&str>, query: &[(&str, &str)]) -> url::Url {
        let mut text = self.base.as_str().to_string();
        match blob {
            Some(blob) => text.push_str(&encode(blob, false)),
            // The container itself has no closing `/`.
            None => {
                text.pop();
            }
        }
        let mut parts: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{k}={}", encode(v, true)))
            .collect();
        parts.extend(self.sas.clone());
        if !parts.is_empty() {
            text.push('?');
            text.push_str(&parts.join("&"));
        }
        text.parse().expect("a URL made of a valid one")
    }

    /// Makes `call` on `blob` until it is answered, its answer taken by `take`; `received` tells
    /// the bytes of the answer's body.
    fn send<T>(
        &self,
        blob: &str,
        call: Call<'_>,
        take: &mut Take<'_, T>,
        received: impl Fn(&T) -> u64,
    ) -> io::Result<T> {
        self.client.call(&self.object(blob), call, take, received)
    }

    /// GETs `span` of the blob `blob` into `buf`; a range that starts past the end gives no
    /// bytes.
    fn fetch(&self, blob: &str, span: Span, buf: &mut IoBuffer) -> io::Result<RangeRead> {
        if span.is_empty() {
            buf.resize_for_writing(0)?;
            return Ok(RangeRead::default());
        }
        let url = self.url(Some(blob), &[]);
        let headers = span
            .range_header()
            .map(|range| ("x-ms-range", range))
            .into_iter()
            .collect();
        let kind = span.kind();
        let mut take = |response: &mut Response| take_answer(response, span, buf).map(|(n, _)| n);
        let len = self.send(
            blob,
            Call::new(kind, "GET", &url)
                .headers(headers)
                .accepting(&[416]),
            &mut take,
            |&n| n as u64,
        )?;
        Ok(RangeRead {
            start: 0,
            len,
            fetched: len as u64,
        })
    }

    /// The blob's size and ETag from Get Blob Properties; `None` where there is none.
    fn properties(&self, blob: &str) -> io::Result<Option<(u64, String)>> {
        let url = self.url(Some(blob), &[]);
        let mut take = |response: &mut Response| {
            Ok((response.status != 404).then(|| {
                (
                    response.content_length().unwrap_or(0),
                    response.header("etag").unwrap_or("").to_string(),
                )
            }))
        };
        self.send(
            blob,
            Call::new(RequestKind::Head, "HEAD", &url).accepting(&[404]),
            &mut take,
            |_| 0,
        )
    }

    fn size_of(&self, blob: &str) -> io::Result<u64> {
        let (size, _) = self
            .properties(blob)?
            .ok_or_else(|| super::not_found(self.object(blob)))?;
        Ok(size)
    }

    /// Put Blob: the whole blob in one request, checked (`verify_writes`, [`checked`]) by the
    /// `Content-MD5` Azure answers with (the MD5 of what it stored), else by its size, before it
    /// counts.
    fn put_whole(&self, blob: &str, data: &[u8]) -> io::Result<()> {
        let expected = Expected::of(data, self.verify);
        let url = self.url(Some(blob), &[]);
        let object = self.object(blob);
        checked::write_checked(
            &self.client,
            (&object, Written::Object),
            &expected,
            &mut || {
                let mut take = |response: &mut Response| {
                    response.text()?;
                    Ok(content_md5(response))
                };
                let digest = self.send(
                    blob,
                    Call::new(RequestKind::Put, "PUT", &url)
                        .headers(blob_headers())
                        .body(data),
                    &mut take,
                    |_| 0,
                )?;
                checked::compare(&expected, None, digest, &mut || {
                    Ok(self.properties(blob)?.map(|(size, _)| size))
                })
            },
        )
    }

    /// A request on the lease blob of a held folder ([`super::lease`]), counted as
    /// [`RequestKind::Lease`], apart from the data's requests; and the blob's name.
    fn lease_call<'a>(&self, key: &str, method: &'static str) -> (String, Call<'a>) {
        let blob = self.key(key);
        let url = self.url(Some(&blob), &[]);
        (blob, Call::new(RequestKind::Lease, method, &url))
    }
}

/// The headers of a Put Blob of data.
fn blob_headers() -> Vec<(&'static str, String)> {
    vec![
        ("x-ms-blob-type", "BlockBlob".to_string()),
        ("content-type", "application/octet-stream".to_string()),
    ]
}

/// `text` percent-encoded for a URL: all but the unreserved characters (and `/` in a path).
fn encode(text: &str, query: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for &b in text.as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (!query && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Storage for AzureStorage {
    fn describe(&self, key: &str) -> String {
        self.object(&self.key(key))
    }

    fn read_all(&self, key: &str, buf: &mut IoBuffer) -> io::Result<RangeRead> {
        self.fetch(&self.key(key), Span::Whole, buf)
    }

    fn read_range(
        &self,
        key: &str,
        offset: u64,
        len: usize,
        buf: &mut IoBuffer,
    ) -> io::Result<RangeRead> {
        self.fetch(&self.key(key), Span::Range(offset, len), buf)
    }

    /// Up to `window.reads` ranges (and `window.bytes`) are fetched at once, each by its own
    /// ranged get on its own thread; they are handed over in order, a window at a time.
    fn read_ranges(
        &self,
        key: &str,
        ranges: &[(u64, usize)],
        window: Window,
        buf: &mut IoBuffer,
        each: &mut OnRange<'_>,
    ) -> io::Result<()> {
        let blob = self.key(key);
        super::ranged::read_ranges_by_requests(ranges, window, buf, each, &|range, buf| {
            self.fetch(&blob, Span::Range(range.0, range.1), buf)
        })
    }

    fn map_range(&self, key: &str, _offset: u64, _len: usize) -> io::Result<Mapped> {
        Err(not_mappable(self.describe(key)))
    }

    /// One List Blobs of at most one name: the endpoint answers, the credentials are taken, the
    /// container exists (made with `create`, as a generation makes its folder).
    fn check_access(&self, create: bool) -> Result<()> {
        let url = self.url(
            None,
            &[
                ("restype", "container"),
                ("comp", "list"),
                ("maxresults", "1"),
                ("prefix", &self.prefix),
            ],
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
        let container = &self.container;
        let endpoint = self.base.as_str();
        let failure = RequestError::of(&error).map(|f| (f.status, f.code.as_str()));
        match failure {
            Some((Some(404), "ContainerNotFound")) if create => {
                let url = self.url(None, &[("restype", "container")]);
                let mut take = |response: &mut Response| response.text().map(drop);
                match self.send(
                    "",
                    Call::new(RequestKind::CreateBucket, "PUT", &url)
                        .body(b"")
                        // Another process of the run made it first.
                        .accepting(&[409]),
                    &mut take,
                    |_| 0,
                ) {
                    Ok(()) => Ok(()),
                    Err(e) => Err(Error::on_object(
                        "cannot create container",
                        self.object(""),
                        e,
                    )),
                }
            }
            Some((Some(404), "ContainerNotFound")) => Err(Error::usage(format!(
                "container '{container}' does not exist at {endpoint}: generate the dataset \
                 first (++workload.workflow.generate_data=True makes the container), or name \
                 another (workload.storage.storage_root)"
            ))),
            Some((None, TLS_REFUSED)) => Err(Error::usage(format!(
                "cannot talk TLS with {endpoint}: {error}; if its certificate comes from a private \
                 authority, name that authority's PEM file with \
                 workload.storage.storage_options.ca_bundle"
            ))),
            Some((Some(400 | 401 | 403), code)) => Err(Error::usage(format!(
                "the Azure endpoint {endpoint} refused these credentials for account '{}' \
                 ({code}): {error}; set workload.storage.storage_options.account_key (or \
                 sas_token), or AZURE_STORAGE_ACCOUNT_KEY (or AZURE_STORAGE_SAS_TOKEN)",
                self.account
            ))),
            _ => Err(Error::on_object(
                "cannot reach container",
                format!("{container} at {endpoint}"),
                error,
            )),
        }
    }

    /// `max_in_flight` if set, else `DEFAULT_WRITERS`.
    fn writers(&self) -> Option<usize> {
        Some(self.writers)
    }

    fn request_counts(&self) -> Option<RequestCounts> {
        Some(self.client.counts())
    }

    fn size(&self, key: &str) -> io::Result<u64> {
        self.size_of(&self.key(key))
    }

    fn create(&self, key: &str) -> io::Result<Box<dyn ObjectWriter + '_>> {
        Ok(Box::new(Upload {
            storage: self,
            blob: self.key(key),
            pending: Vec::new(),
            blocks: Vec::new(),
            sending: None,
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
        let blob = self.key(key);
        let size = self.size_of(&blob)?;
        let object = self.object(&blob).to_string();
        let this = self.clone();
        Ok(Box::new(super::ranged::Pieces::new(
            Arc::new(move |(offset, len), buf: &mut IoBuffer| {
                this.fetch(&blob, Span::Range(offset, len), buf)
            }),
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
        Ok(self.properties(&self.key(key))?.is_some())
    }

    fn make_folder(&self, _key: &str) -> io::Result<()> {
        Ok(())
    }

    /// One Delete Blob: Azure answers 404 for a blob that is not there.
    fn delete(&self, key: &str) -> io::Result<bool> {
        let blob = self.key(key);
        let url = self.url(Some(&blob), &[]);
        let mut take = |response: &mut Response| {
            let _ = response.text();
            Ok(response.status != 404)
        };
        self.send(
            &blob,
            Call::new(RequestKind::Delete, "DELETE", &url).accepting(&[404]),
            &mut take,
            |_| 0,
        )
    }

    /// Put Blob with `If-None-Match: *` or `If-Match`: Azure refuses the first with 409
    /// `BlobAlreadyExists` where the blob is there, the second with 412 where its tag changed.
    fn put_if(
        &self,
        key: &str,
        data: &[u8],
        condition: Condition<'_>,
    ) -> io::Result<Option<String>> {
        let mut headers = blob_headers();
        headers.push(match condition {
            Condition::Absent => ("if-none-match", "*".to_string()),
            Condition::Matches(tag) => ("if-match", tag.to_string()),
        });
        let mut take = |response: &mut Response| {
            let refused = match response.status {
                412 => true,
                409 => {
                    let code = response.header("x-ms-error-code").unwrap_or("").to_string();
                    if code != "BlobAlreadyExists" {
                        let text = response.text().unwrap_or_default();
                        return Err(io::Error::other(format!(
                            "PUT {}: HTTP 409 {code} {text}",
                            self.describe(key)
                        )));
                    }
                    true
                }
                _ => false,
            };
            let _ = response.text();
            Ok((!refused).then(|| response.header("etag").unwrap_or("").to_string()))
        };
        let (blob, call) = self.lease_call(key, "PUT");
        self.send(
            &blob,
            call.headers(headers).body(data).accepting(&[409, 412]),
            &mut take,
            |_| 0,
        )
    }

    fn get_tagged(&self, key: &str, limit: usize) -> io::Result<Option<(Vec<u8>, String)>> {
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
            let tag = response.header("etag").unwrap_or("").to_string();
            Ok(Some((body, tag)))
        };
        let received =
            |got: &Option<(Vec<u8>, String)>| got.as_ref().map_or(0, |(b, _)| b.len() as u64);
        let (blob, call) = self.lease_call(key, "GET");
        self.send(&blob, call.accepting(&[404]), &mut take, received)
    }

    fn delete_if(&self, key: &str, tag: &str) -> io::Result<bool> {
        let mut take = |response: &mut Response| {
            let _ = response.text();
            Ok(response.status < 300)
        };
        let headers = vec![("if-match", tag.to_string())];
        let (blob, call) = self.lease_call(key, "DELETE");
        self.send(
            &blob,
            call.headers(headers).accepting(&[404, 412]),
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
        let mut marker = String::new();
        loop {
            let mut query = vec![
                ("restype", "container"),
                ("comp", "list"),
                ("prefix", folder.as_str()),
                ("delimiter", "/"),
                ("maxresults", page_size.as_str()),
            ];
            if !marker.is_empty() {
                query.push(("marker", marker.as_str()));
            }
            let url = self.url(None, &query);
            let mut take = |response: &mut Response| response.text();
            let text = self.send(
                &folder,
                Call::new(RequestKind::List, "GET", &url),
                &mut take,
                |_| 0,
            )?;
            let page = ListPage::parse(&text).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "an unreadable List Blobs answer for {}: {}",
                        self.object(&folder),
                        text.chars().take(200).collect::<String>()
                    ),
                )
            })?;
            for (name, kind) in &page.entries {
                if let Some(name) = name.strip_prefix(folder.as_str()) {
                    let name = name.trim_end_matches('/');
                    if !name.is_empty() {
                        each(name, *kind);
                    }
                }
            }
            match page.next_marker {
                Some(next) if !next.is_empty() => marker = next,
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

/// One page of a List Blobs answer: `<Blob><Name>…` are blobs, `<BlobPrefix><Name>…` the
/// folders below the delimiter; `<NextMarker>` continues the listing.
#[derive(Debug, PartialEq)]
struct ListPage {
    entries: Vec<(String, EntryKind)>,
    next_marker: Option<String>,
}

impl ListPage {
    fn parse(text: &str) -> Option<ListPage> {
        if !text.contains("<EnumerationResults") {
            return None;
        }
        let mut entries = Vec::new();
        let mut rest = text;
        while let Some(at) = rest.find('<') {
            rest = &rest[at + 1..];
            let kind = if rest.starts_with("Blob>") {
                EntryKind::File
            } else if rest.starts_with("BlobPrefix>") {
                EntryKind::Folder
            } else {
                continue;
            };
            let name = super::http::xml_field(rest, "Name")?;
            entries.push((super::http::xml_unescape(name), kind));
        }
        let next_marker = super::http::xml_field(text, "NextMarker").map(super::http::xml_unescape);
        Some(ListPage {
            entries,
            next_marker,
        })
    }
}

/// A blob being written: bytes wait in `pending` until a block is full; the first full block
/// makes the blob a block upload, and each full block is sent (Put Block) on a thread of its own
/// while the next fills, up to `parts_in_flight` at once (so at most `parts_in_flight + 1` blocks
/// of memory). [`ObjectWriter::finish`] sends what is left as one Put Blob, or as the last block,
/// and commits the list in order once every block is in. Blocks never committed are dropped by
/// Azure after a week; they are invisible as a blob.
struct Upload<'s> {
    storage: &'s AzureStorage,
    blob: String,
    pending: Vec<u8>,
    /// The IDs of the blocks sent, in order.
    blocks: Vec<String>,
    /// The blocks in flight, and the storage their threads send through.
    sending: Option<(PartsInFlight<()>, Arc<AzureStorage>)>,
    written: u64,
}

impl Upload<'_> {
    /// Hands `pending` to a thread that sends it as the next block, once fewer than
    /// `parts_in_flight` are in flight.
    fn send_block(&mut self) -> io::Result<()> {
        let storage = self.storage;
        let (parts, shared) = self.sending.get_or_insert_with(|| {
            (
                PartsInFlight::new(storage.parts_in_flight),
                Arc::new(storage.clone()),
            )
        });
        let number = parts.sent();
        if number >= MAX_BLOCKS {
            return Err(io::Error::other(format!(
                "{} needs more than {MAX_BLOCKS} blocks: raise \
                 workload.storage.storage_options.part_size",
                self.storage.object(&self.blob)
            )));
        }
        // IDs of one length (Azure's rule), base64 as the API wants them.
        let id = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            format!("dlio-rs-block-{number:06}"),
        );
        let next = parts.buffer(storage.part_size);
        let block = std::mem::replace(&mut self.pending, next);
        let (shared, blob, block_id) = (Arc::clone(shared), self.blob.clone(), id.clone());
        parts.send(block, move |_, block| {
            put_block(&shared, &blob, &block_id, number, block)
        })?;
        self.blocks.push(id);
        Ok(())
    }

    /// Commits the blocks in order (Put Block List), once every block is in, and checks the
    /// blob Azure made: all the bytes written.
    fn commit(&mut self) -> io::Result<()> {
        if let Some((parts, _)) = &mut self.sending {
            parts.all_done()?;
        }
        let storage = self.storage;
        let mut body = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for id in &self.blocks {
            body.push_str(&format!("<Latest>{id}</Latest>"));
        }
        body.push_str("</BlockList>");
        let url = storage.url(Some(&self.blob), &[("comp", "blocklist")]);
        let mut take = |response: &mut Response| response.text().map(drop);
        storage.send(
            &self.blob,
            Call::new(RequestKind::Multipart, "PUT", &url)
                .headers(vec![("content-type", "application/xml".to_string())])
                .body(body.as_bytes()),
            &mut take,
            |_| 0,
        )?;
        // The blocks are gone from memory: nothing to write again.
        let expected = Expected {
            bytes: self.written,
            digest: None,
        };
        let stored = checked::compare(&expected, None, None, &mut || {
            Ok(storage.properties(&self.blob)?.map(|(size, _)| size))
        })?;
        checked::checked_once(
            &storage.client,
            &storage.object(&self.blob),
            &expected,
            stored,
        )
    }
}

impl ObjectWriter for Upload<'_> {
    fn write(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        let part = self.storage.part_size;
        self.written += bytes.len() as u64;
        while !bytes.is_empty() {
            let room = part - self.pending.len();
            let (now, later) = bytes.split_at(room.min(bytes.len()));
            self.pending.extend_from_slice(now);
            bytes = later;
            // A full block is sent once more bytes come: the last one is sent by `finish`.
            if self.pending.len() == part && !bytes.is_empty() {
                self.send_block()?;
            }
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if self.blocks.is_empty() {
            let pending = std::mem::take(&mut self.pending);
            return self.storage.put_whole(&self.blob, &pending);
        }
        if !self.pending.is_empty() {
            self.send_block()?;
        }
        self.commit()
    }

    /// Azure's answer to a Put Blob or a Put Block List means the blob is stored.
    fn finish_durably(self: Box<Self>) -> io::Result<()> {
        self.finish()
    }
}

impl Drop for Upload<'_> {
    /// Blocks still in flight end before the writer goes: none is left running past the run.
    fn drop(&mut self) {
        if let Some((parts, _)) = &mut self.sending {
            parts.settle();
        }
    }
}

/// Sends `block` as block `number` (ID `id`) of `blob` (Put Block), and checks it stored: with
/// `verify_writes: etag` the block carries its MD5 (`Content-MD5`), which Azure checks against
/// what arrived: a block that arrived otherwise is refused (400 `Md5Mismatch`) and sent again.
/// The blob's size is checked once committed, whatever `verify_writes`.
fn put_block(
    storage: &AzureStorage,
    blob: &str,
    id: &str,
    number: usize,
    block: &[u8],
) -> io::Result<()> {
    let url = storage.url(Some(blob), &[("comp", "block"), ("blockid", id)]);
    let len = block.len();
    let md5 = (storage.verify == VerifyWrites::Etag).then(|| md5_of(block));
    let expected = Expected {
        bytes: len as u64,
        digest: md5.map(|d| hex(&d)),
    };
    let mut headers = vec![("content-type", "application/octet-stream".to_string())];
    if let Some(md5) = md5 {
        let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, md5);
        headers.push(("content-md5", encoded));
    }
    let what = format!("block {number} of {}", storage.object(blob));
    checked::write_checked(
        &storage.client,
        (&what, Written::Part),
        &expected,
        &mut || {
            let mut take = |response: &mut Response| {
                let text = response.text()?;
                if response.status != 400 {
                    return Ok(Some(content_md5(response)));
                }
                let code = http::xml_field(&text, "Code");
                let message = http::xml_field(&text, "Message").unwrap_or("");
                // Azure's code for it, and Azurite's (`InvalidOperation`, "Provided contentMD5
                // doesn't match.").
                let refused_md5 = code == Some("Md5Mismatch")
                    || (code == Some("InvalidOperation") && message.contains("contentMD5"));
                match code {
                    _ if refused_md5 => Ok(None),
                    code => Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "{what}: HTTP 400 {} ({})",
                            code.unwrap_or("BadRequest"),
                            message
                        ),
                    )),
                }
            };
            let answer = storage.send(
                blob,
                Call::new(RequestKind::PartUpload, "PUT", &url)
                    .headers(headers.clone())
                    .body(block)
                    .accepting(if md5.is_some() { &[400] } else { &[] }),
                &mut take,
                |_| 0,
            )?;
            match answer {
                // Refused as arrived otherwise than sent.
                None => Ok(Some(checked::Stored {
                    bytes: None,
                    digest: None,
                })),
                // Stored: its Content-MD5 where Azure answers one (an uncommitted block has no
                // size to ask for).
                Some(digest) => {
                    checked::compare(&expected, Some(len as u64), digest, &mut || Ok(None))
                }
            }
        },
    )
    .map(drop)
}

/// The `Content-MD5` of an answer (base64, as Azure sends it) in lower-case hex.
fn content_md5(response: &Response) -> Option<String> {
    let text = response.header("content-md5")?;
    let bytes = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, text).ok()?;
    (bytes.len() == 16).then(|| hex(&bytes))
}

#[cfg(test)]
mod tests;
