//! What the object stores share in a download (S3's GET, Azure's Get Blob, GCS's media
//! download): the span asked for and its `Range` header, and how an answer fills the reader's
//! buffer — a 206 whose `Content-Range` must start where the span does, a 416 for a range that
//! starts past the end (no bytes), the whole object from a server that ignores ranges (cut to the
//! span), a body that must hold as many bytes as it announces. Each store builds its own request
//! (its URL, its signing); the answer is read here.

use std::io::{self, Read};

use super::http::Response;
use super::requests::RequestKind;
use super::IoBuffer;

/// What a download asks for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Span {
    Whole,
    /// `len` bytes from `offset`.
    Range(u64, usize),
    /// The last `len` bytes (S3 and GCS: a parquet footer's read, whose answer carries the
    /// object's size; Azure takes no suffix ranges, and looks the size up first).
    #[cfg_attr(not(any(feature = "s3", feature = "gcs")), allow(dead_code))]
    Suffix(usize),
}

impl Span {
    /// Asks for no bytes: nothing need be sent.
    pub fn is_empty(self) -> bool {
        matches!(self, Span::Range(_, 0) | Span::Suffix(0))
    }

    /// The value of the request's `Range` header, `None` for the whole object.
    pub fn range_header(self) -> Option<String> {
        match self {
            Span::Whole => None,
            Span::Range(offset, len) => Some(format!("bytes={offset}-{}", offset + len as u64 - 1)),
            Span::Suffix(len) => Some(format!("bytes=-{len}")),
        }
    }

    /// How the request is counted.
    pub fn kind(self) -> RequestKind {
        match self {
            Span::Whole => RequestKind::Get,
            Span::Range(..) | Span::Suffix(_) => RequestKind::RangedGet,
        }
    }
}

/// Reads the answer to a download of `span` into `buf` (the request accepting 416 as an answer):
/// the bytes of the span, and the object's size where the answer tells it.
pub(super) fn take_answer(
    response: &mut Response,
    span: Span,
    buf: &mut IoBuffer,
) -> io::Result<(usize, Option<u64>)> {
    let header = response.header("content-range").map(str::to_string);
    let range = header
        .as_deref()
        .map(ContentRange::parse)
        .unwrap_or_default();
    match (response.status, span) {
        // A range that starts past the end (or any range of an empty object).
        (416, _) => {
            let _ = response.text();
            buf.resize_for_writing(0)?;
            Ok((0, range.total))
        }
        (206, Span::Range(..) | Span::Suffix(_)) => {
            let expected = match span {
                Span::Range(offset, _) => Some(offset),
                Span::Suffix(len) => range.total.map(|t| t - (len as u64).min(t)),
                Span::Whole => None,
            };
            if range.first.is_none() || range.first != expected {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("asked for {span:?}, the answer's Content-Range is {header:?}"),
                ));
            }
            Ok((read_body(response, buf)?, range.total))
        }
        (_, Span::Whole) => {
            let len = read_body(response, buf)?;
            Ok((len, Some(len as u64)))
        }
        // The whole object for a part: a server that ignores ranges.
        (_, part) => {
            let whole = read_body(response, buf)?;
            let (start, len) = match part {
                Span::Range(offset, len) => ((offset as usize).min(whole), len),
                Span::Suffix(len) => (whole - len.min(whole), whole),
                Span::Whole => (0, whole),
            };
            let end = start.saturating_add(len).min(whole);
            let kept = buf.as_slice()[start..end].to_vec();
            buf.resize_for_writing(kept.len())?.copy_from_slice(&kept);
            Ok((kept.len(), Some(whole as u64)))
        }
    }
}

/// Reads the answer's body into `buf`, checking it has as many bytes as it announced.
pub(super) fn read_body(response: &mut Response, buf: &mut IoBuffer) -> io::Result<usize> {
    match response.content_length() {
        Some(len) => {
            let len = usize::try_from(len).map_err(|_| io::Error::other("body too large"))?;
            let target = buf.resize_for_writing(len)?;
            let mut body = response.body();
            body.read_exact(target)?;
            let mut more = [0u8; 1];
            if body.read(&mut more)? != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the body is longer than its Content-Length {len}"),
                ));
            }
            Ok(len)
        }
        None => {
            let mut whole = Vec::new();
            response.body().read_to_end(&mut whole)?;
            buf.resize_for_writing(whole.len())?.copy_from_slice(&whole);
            Ok(whole.len())
        }
    }
}

/// Why an object cannot be mapped into memory (`Storage::map_range`).
pub(super) fn not_mappable(object: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::Unsupported,
        format!("{object} cannot be mapped into memory: it is an object, not a file"),
    )
}

/// A `Content-Range: bytes first-last/total` header (`bytes */total` for a refused range).
#[derive(Debug, Default, Clone, Copy)]
struct ContentRange {
    first: Option<u64>,
    total: Option<u64>,
}

impl ContentRange {
    fn parse(header: &str) -> ContentRange {
        let Some((range, total)) = header
            .strip_prefix("bytes ")
            .and_then(|r| r.split_once('/'))
        else {
            return ContentRange::default();
        };
        ContentRange {
            first: range.split_once('-').and_then(|(f, _)| f.parse().ok()),
            total: total.parse().ok(),
        }
    }
}
