//! How S3 is asked, for the shared client of the object stores ([`crate::storage::http`]): an
//! endpoint's bucket, each request's URL presigned by rusty-s3 (SigV4 in the query, made anew per
//! attempt so a retry is never refused as stale; no header to add), S3's XML error answers read
//! for their `Code` and `Message`, objects named `s3://bucket/key` (`ais://` for AIStore's S3
//! API) in failures.

use std::io;

use rusty_s3::{Bucket, Credentials};

use crate::storage::http::{self, Service};

pub use crate::storage::http::{
    xml_field, Gate, Request, RequestError, Response, Take, TLS_REFUSED,
};

/// A client of one endpoint's bucket.
pub type Client = http::Client<Endpoint>;

/// One endpoint of the store: its bucket, and who asks.
pub struct Endpoint {
    pub bucket: Bucket,
    /// `None`: requests go unsigned (a public bucket).
    pub credentials: Option<Credentials>,
    /// The endpoint's URL as configured (per-endpoint counts name it).
    pub url: String,
    /// How objects are named in failures: `s3`, or `ais` for AIStore's S3 API.
    pub scheme: &'static str,
}

impl Service for Endpoint {
    fn authorize(
        &self,
        _method: &str,
        _url: &url::Url,
        _headers: &mut Vec<(&'static str, String)>,
        _body_len: usize,
    ) -> io::Result<()> {
        // The presigned URL is the signature.
        Ok(())
    }

    fn error_of(&self, _response: &Response, body: &str) -> (Option<String>, String) {
        // S3 says what went wrong in an XML body (none for HEAD).
        let code = xml_field(body, "Code").map(str::to_string);
        let message = xml_field(body, "Message").unwrap_or("").to_string();
        (code, message)
    }

    fn name(&self, key: &str) -> String {
        format!("{}://{}/{key}", self.scheme, self.bucket.name())
    }
}

/// How long a presigned URL stays valid: long enough for a slow upload of a part to start.
pub const SIGNATURE_LIFETIME: std::time::Duration = std::time::Duration::from_secs(3600);
