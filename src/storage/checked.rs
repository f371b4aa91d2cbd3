//! Verified writes for the object stores (`storage_options.verify_writes`): an object written
//! counts only once the store is found to hold what was sent. One rule for S3, Azure and GCS;
//! each store says how it tells what it holds (S3's CRC-32 checksum or ETag, Azure's
//! `Content-MD5`, GCS's `md5Hash` and `size`, or a request for the size):
//!
//! - `etag` (the default): a digest of the bytes sent (S3: the CRC-32 it is sent with; else the
//!   MD5) against the one the store computed of what it kept, where its answer gives one; else
//!   the size;
//! - `size`: the size the store holds against the bytes sent (no MD5 computed).
//!
//! A mismatch is written again, up to `s3_max_attempts` writes, then fails naming the object,
//! both sizes and both digests. Every check is counted ([`WriteChecks`]: verified, mismatches,
//! rewrites) for report.json.

use std::io;

use super::http::{Client, Service};
use super::requests::WriteChecks;
#[cfg(any(feature = "azure", feature = "gcs"))]
use crate::config::VerifyWrites;

/// What a write sent: its bytes and, where computed, the digest the store gives such an object
/// (lower-case hex: S3's ETag form; an MD5 for Azure and GCS).
pub struct Expected {
    pub bytes: u64,
    pub digest: Option<String>,
}

#[cfg(any(feature = "azure", feature = "gcs"))]
impl Expected {
    /// What a write of `data` sent: its size, and its MD5 under `verify_writes: etag` (Azure's
    /// and GCS's digest; S3's is the CRC-32 its writes are sent with).
    pub fn of(data: &[u8], verify: VerifyWrites) -> Expected {
        Expected {
            bytes: data.len() as u64,
            digest: (verify == VerifyWrites::Etag).then(|| hex(&md5_of(data))),
        }
    }
}

/// What a check found stored instead: its size (`None`: no object) and digest.
pub struct Stored {
    pub bytes: Option<u64>,
    pub digest: Option<String>,
}

/// What a checked write wrote: an object (counted as verified once it is), or a part of one
/// (whose object is counted once complete).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Written {
    Object,
    /// S3's parts and Azure's blocks (GCS's chunks are checked by the bytes it says it holds).
    #[cfg_attr(not(any(feature = "s3", feature = "azure")), allow(dead_code))]
    Part,
}

/// Writes with `write_and_check` (one write, then what the store holds: `None` when it is what
/// was sent) until the store holds what was sent, or `client`'s attempts run out; counted.
/// `object` names what was written in the failure.
pub fn write_checked<S: Service>(
    client: &Client<S>,
    (object, written): (&str, Written),
    expected: &Expected,
    write_and_check: &mut dyn FnMut() -> io::Result<Option<Stored>>,
) -> io::Result<()> {
    let mut attempt = 1;
    loop {
        match write_and_check()? {
            None => {
                if written == Written::Object {
                    client.count_writes(|w: &mut WriteChecks| w.verified += 1);
                }
                return Ok(());
            }
            Some(stored) => {
                client.count_writes(|w| w.mismatches += 1);
                if attempt >= client.max_attempts() {
                    return Err(mismatch(object, expected, &stored, attempt));
                }
                client.count_writes(|w| w.rewrites += 1);
                attempt += 1;
            }
        }
    }
}

/// Checks once what a write made that cannot be written again (a multipart upload, whose parts
/// are gone from memory): counted, and a mismatch fails naming the object.
pub fn checked_once<S: Service>(
    client: &Client<S>,
    object: &str,
    expected: &Expected,
    stored: Option<Stored>,
) -> io::Result<()> {
    match stored {
        None => {
            client.count_writes(|w| w.verified += 1);
            Ok(())
        }
        Some(stored) => {
            client.count_writes(|w| w.mismatches += 1);
            Err(mismatch(object, expected, &stored, 1))
        }
    }
}

/// What the store holds against what was sent, from what its answer said (`size`, `digest`, as
/// far as it said), asking for the size (`size_of`) where the answer does not settle it.
pub fn compare(
    expected: &Expected,
    size: Option<u64>,
    digest: Option<String>,
    size_of: &mut dyn FnMut() -> io::Result<Option<u64>>,
) -> io::Result<Option<Stored>> {
    if let (Some(want), Some(got)) = (&expected.digest, &digest) {
        if want == got {
            return Ok(None);
        }
        let bytes = match size {
            Some(size) => Some(size),
            None => size_of()?,
        };
        return Ok(Some(Stored { bytes, digest }));
    }
    let bytes = match size {
        Some(size) => Some(size),
        None => size_of()?,
    };
    if bytes == Some(expected.bytes) {
        return Ok(None);
    }
    Ok(Some(Stored { bytes, digest }))
}

/// The MD5 of `data`, for `verify_writes: etag`.
pub fn md5_of(data: &[u8]) -> [u8; 16] {
    use md5::Digest;
    md5::Md5::digest(data).into()
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// The failure of a write whose stored object (or part) is not what was sent, after `attempts`
/// writes.
fn mismatch(object: &str, expected: &Expected, stored: &Stored, attempts: u32) -> io::Error {
    let found = match (stored.bytes, &expected.digest, &stored.digest) {
        (Some(bytes), Some(want), Some(got)) => format!(
            "holds {bytes} bytes after a write of {} bytes (stored {got}, {want} expected)",
            expected.bytes
        ),
        (Some(bytes), _, _) => format!(
            "holds {bytes} bytes after a write of {} bytes",
            expected.bytes
        ),
        // A part, whose size no request tells.
        (None, Some(want), Some(got)) => format!(
            "was stored as {got}, the {} bytes sent are {want}",
            expected.bytes
        ),
        // Refused by the store, which checked what arrived against the digest sent.
        (None, Some(want), None) => format!(
            "was refused by the store as it arrived otherwise than sent (the {} bytes sent are \
             {want})",
            expected.bytes
        ),
        (None, None, _) => format!("is missing after a write of {} bytes", expected.bytes),
    };
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{object} {found}: the store did not keep what was sent{}",
            if attempts > 1 {
                format!(", after {attempts} writes")
            } else {
                String::new()
            }
        ),
    )
}
