//! What requests an object storage made, per kind: how many succeeded, were retried or failed,
//! the bytes they moved and their latency. Defined for every build, so that the report reads the
//! same whether or not an object store is built in (`Storage::request_counts`).

use crate::stats::histogram::Histogram;

/// What a request does, for its counts in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// A whole object.
    Get,
    /// Part of an object (`Range: bytes=`).
    RangedGet,
    /// A whole object written in one request.
    Put,
    /// One part of a multipart upload.
    PartUpload,
    /// Starting, completing or aborting a multipart upload.
    Multipart,
    /// An object's or the bucket's size or existence.
    Head,
    List,
    Delete,
    CreateBucket,
    /// Taking, renewing, reading or deleting a held folder's lease (conditional requests of a
    /// few hundred bytes): apart, so that no GET or PUT of data counts them.
    Lease,
}

impl RequestKind {
    pub const ALL: [RequestKind; 10] = [
        RequestKind::Get,
        RequestKind::RangedGet,
        RequestKind::Put,
        RequestKind::PartUpload,
        RequestKind::Multipart,
        RequestKind::Head,
        RequestKind::List,
        RequestKind::Delete,
        RequestKind::CreateBucket,
        RequestKind::Lease,
    ];

    pub fn name(self) -> &'static str {
        match self {
            RequestKind::Get => "GET",
            RequestKind::RangedGet => "ranged GET",
            RequestKind::Put => "PUT",
            RequestKind::PartUpload => "part upload",
            RequestKind::Multipart => "multipart start/complete/abort",
            RequestKind::Head => "HEAD",
            RequestKind::List => "LIST",
            RequestKind::Delete => "DELETE",
            RequestKind::CreateBucket => "create bucket",
            RequestKind::Lease => "lease",
        }
    }
}

/// The counts of one kind of request.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct KindCounts {
    /// Requests that succeeded.
    pub requests: u64,
    /// Attempts made again after a failure that another attempt could mend.
    pub retries: u64,
    /// Redirects followed (AIStore's gateway to its target, a 307 per request).
    pub redirects: u64,
    /// Requests that failed for good.
    pub failures: u64,
    /// Bytes in the bodies received (GETs) or sent (PUTs, parts).
    pub bytes: u64,
    /// From the request's first attempt to its body's last byte, retries included.
    pub latency: Histogram,
}

impl KindCounts {
    pub fn add(&mut self, other: &KindCounts) {
        self.requests += other.requests;
        self.retries += other.retries;
        self.redirects += other.redirects;
        self.failures += other.failures;
        self.bytes += other.bytes;
        self.latency.merge(&other.latency);
    }
}

/// How the objects written were checked before they counted (`storage_options.verify_writes`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WriteChecks {
    /// Objects whose stored copy was found to be what was written.
    pub verified: u64,
    /// Objects or parts whose stored size or ETag differed from what was written.
    pub mismatches: u64,
    /// PUTs or parts sent again after a mismatch.
    pub rewrites: u64,
}

impl WriteChecks {
    pub fn merge(&mut self, other: &WriteChecks) {
        self.verified += other.verified;
        self.mismatches += other.mismatches;
        self.rewrites += other.rewrites;
    }
}

/// The requests that went to one endpoint of a store with several (`endpoint_urls`), all kinds.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct EndpointCounts {
    pub url: String,
    /// Every kind of request together.
    pub all: KindCounts,
}

/// Every kind's counts, in [`RequestKind::ALL`]'s order, the most requests seen in flight, the
/// checks of what was written, and with several endpoints each one's share.
#[derive(Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RequestCounts {
    pub kinds: [KindCounts; 10],
    pub peak_in_flight: u64,
    pub writes: WriteChecks,
    /// Empty for a store of one endpoint.
    pub endpoints: Vec<EndpointCounts>,
}

impl RequestCounts {
    pub fn of(&self, kind: RequestKind) -> &KindCounts {
        &self.kinds[kind as usize]
    }

    /// Whether any request was made.
    pub fn any(&self) -> bool {
        self.kinds.iter().any(|k| k.requests + k.failures > 0)
    }

    pub fn merge(&mut self, other: &RequestCounts) {
        for (mine, theirs) in self.kinds.iter_mut().zip(&other.kinds) {
            mine.add(theirs);
        }
        self.peak_in_flight = self.peak_in_flight.max(other.peak_in_flight);
        self.writes.merge(&other.writes);
        for theirs in &other.endpoints {
            let at = match self.endpoints.iter().position(|e| e.url == theirs.url) {
                Some(at) => at,
                None => {
                    self.endpoints.push(EndpointCounts {
                        url: theirs.url.clone(),
                        ..EndpointCounts::default()
                    });
                    self.endpoints.len() - 1
                }
            };
            self.endpoints[at].all.add(&theirs.all);
        }
    }

    /// This store's share of a store of several endpoints: its requests of every kind, as
    /// [`EndpointCounts`] named `url`.
    pub fn for_endpoint(&self, url: &str) -> EndpointCounts {
        let mut sum = EndpointCounts {
            url: url.to_string(),
            ..EndpointCounts::default()
        };
        for kind in &self.kinds {
            sum.all.add(kind);
        }
        sum
    }
}

/// The counts without their latency histograms (which have no `Debug`).
impl std::fmt::Debug for RequestCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut map = f.debug_map();
        for kind in RequestKind::ALL {
            let c = self.of(kind);
            map.entry(&kind.name(), &(c.requests, c.retries, c.failures, c.bytes));
        }
        map.finish()
    }
}
