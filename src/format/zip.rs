//! The subset of ZIP that numpy's `.npz` uses: stored members (`np.savez`) or deflated ones
//! (`np.savez_compressed`, zlib's default level), with zip64 extra fields read where numpy writes
//! them (`force_zip64` local headers) and where sizes need them.

use std::io::Write;

use super::Encoded;
use crate::error::{Error, Result};

const LOCAL_HEADER: u32 = 0x0403_4b50;
const DATA_DESCRIPTOR: u32 = 0x0807_4b50;
const CENTRAL_HEADER: u32 = 0x0201_4b50;
const END_OF_CENTRAL: u32 = 0x0605_4b50;
const ZIP64_EXTRA: u16 = 0x0001;
/// 1980-01-01 00:00, the earliest DOS date: files have no meaningful time.
const DOS_DATE: u16 = 0x0021;
/// General-purpose flag 3: the CRC and sizes follow the member's data (in a data descriptor), so
/// that a member is written as it is made, with no seek back to its header.
const SIZES_FOLLOW: u16 = 0x0008;

const STORED: u16 = 0;
const DEFLATED: u16 = 8;

struct Member {
    name: String,
    header_offset: u32,
    crc: u32,
    method: u16,
    compressed: u32,
    size: u32,
}

/// Writes a zip: members are appended with [`ZipWriter::member`], stored ones straight into the
/// file as it streams, deflated ones through a scratch file in memory that lives as long as the
/// writer.
pub struct ZipWriter {
    members: Vec<Member>,
    deflate: bool,
    scratch: Encoded<'static>,
}

fn u16le(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32le(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn u64le(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// A zip field that must fit 32 bits: dlio-rs writes no zip64 records.
fn zip32(value: u64, what: &str) -> Result<u32> {
    u32::try_from(value)
        .ok()
        .filter(|&v| v < u32::MAX)
        .ok_or_else(|| {
            Error::run(format!(
                "{what} needs zip64 ({value} bytes), which dlio-rs does not write"
            ))
        })
}

impl ZipWriter {
    pub fn new(deflate: bool) -> ZipWriter {
        ZipWriter {
            members: Vec::new(),
            deflate,
            scratch: Encoded::default(),
        }
    }

    /// Appends a member whose contents `fill` appends to the file it is given; `fill` must also
    /// feed every byte it appends to the CRC it is given.
    pub fn member(
        &mut self,
        out: &mut Encoded,
        name: &str,
        fill: impl FnOnce(&mut Encoded, &mut crc32fast::Hasher) -> Result<()>,
    ) -> Result<()> {
        let header_offset = out.position();
        let method = if self.deflate { DEFLATED } else { STORED };
        let data = &mut out.data;
        data.extend_from_slice(&LOCAL_HEADER.to_le_bytes());
        data.extend_from_slice(&20u16.to_le_bytes()); // version needed
        data.extend_from_slice(&SIZES_FOLLOW.to_le_bytes());
        data.extend_from_slice(&method.to_le_bytes());
        data.extend_from_slice(&[0, 0]); // time
        data.extend_from_slice(&DOS_DATE.to_le_bytes());
        data.extend_from_slice(&[0; 12]); // crc, sizes: in the data descriptor
        data.extend_from_slice(&(name.len() as u16).to_le_bytes());
        data.extend_from_slice(&0u16.to_le_bytes());
        data.extend_from_slice(name.as_bytes());
        let data_start = out.position();
        let mut crc = crc32fast::Hasher::new();
        let size = if self.deflate {
            let content = &mut self.scratch;
            content.clear();
            fill(content, &mut crc)?;
            let mut encoder =
                flate2::write::DeflateEncoder::new(&mut out.data, flate2::Compression::default());
            encoder
                .write_all(&content.data)
                .and_then(|_| encoder.finish().map(|_| ()))
                .map_err(|e| Error::run(format!("cannot deflate member {name}: {e}")))?;
            content.position()
        } else {
            fill(out, &mut crc)?;
            out.position() - data_start
        };
        let crc = crc.finalize();
        let what = format!("member {name}");
        let compressed = zip32(out.position() - data_start, &what)?;
        let size = zip32(size, &what)?;
        let header_offset = zip32(header_offset, &what)?;
        let data = &mut out.data;
        data.extend_from_slice(&DATA_DESCRIPTOR.to_le_bytes());
        data.extend_from_slice(&crc.to_le_bytes());
        data.extend_from_slice(&compressed.to_le_bytes());
        data.extend_from_slice(&size.to_le_bytes());
        self.members.push(Member {
            name: name.to_string(),
            header_offset,
            crc,
            method,
            compressed,
            size,
        });
        Ok(())
    }

    /// Appends the central directory and its end record.
    pub fn finish(self, out: &mut Encoded) -> Result<()> {
        let directory_start = zip32(out.position(), "the archive")?;
        let data = &mut out.data;
        let at = data.len();
        for m in &self.members {
            data.extend_from_slice(&CENTRAL_HEADER.to_le_bytes());
            data.extend_from_slice(&[20, 0, 20, 0]); // made by, version needed
            data.extend_from_slice(&SIZES_FOLLOW.to_le_bytes());
            data.extend_from_slice(&m.method.to_le_bytes());
            data.extend_from_slice(&[0, 0]); // time
            data.extend_from_slice(&DOS_DATE.to_le_bytes());
            data.extend_from_slice(&m.crc.to_le_bytes());
            data.extend_from_slice(&m.compressed.to_le_bytes());
            data.extend_from_slice(&m.size.to_le_bytes());
            data.extend_from_slice(&(m.name.len() as u16).to_le_bytes());
            data.extend_from_slice(&[0; 12]); // extra, comment, disk, attributes
            data.extend_from_slice(&m.header_offset.to_le_bytes());
            data.extend_from_slice(m.name.as_bytes());
        }
        let directory_size = (data.len() - at) as u32;
        data.extend_from_slice(&END_OF_CENTRAL.to_le_bytes());
        data.extend_from_slice(&[0; 4]);
        let count = (self.members.len() as u16).to_le_bytes();
        data.extend_from_slice(&count);
        data.extend_from_slice(&count);
        data.extend_from_slice(&directory_size.to_le_bytes());
        data.extend_from_slice(&directory_start.to_le_bytes());
        data.extend_from_slice(&0u16.to_le_bytes());
        Ok(())
    }
}

/// Finds member `name` in a whole zip archive and returns its bytes (a deflated member is inflated
/// into `inflated`, as numpy must); with `verify`, after checking its CRC as Python's zipfile does
/// when numpy reads the member.
pub fn member<'a>(
    archive: &'a [u8],
    name: &str,
    verify: bool,
    inflated: &'a mut Vec<u8>,
) -> Result<&'a [u8], String> {
    let truncated =
        || "truncated or not a zip archive (no end-of-central-directory record)".to_string();
    if archive.len() < 22 {
        return Err(truncated());
    }
    let search_from = archive.len().saturating_sub(22 + 65535);
    let end = (search_from..=archive.len() - 22)
        .rev()
        .find(|&at| u32le(archive, at) == END_OF_CENTRAL)
        .ok_or_else(truncated)?;
    let count = u16le(archive, end + 10) as usize;
    let mut at = u32le(archive, end + 16) as usize;
    if at == u32::MAX as usize {
        at = zip64_directory_offset(archive, end)?;
    }
    for _ in 0..count {
        let header = archive
            .get(at..at + 46)
            .ok_or("the central directory is truncated")?;
        if u32le(header, 0) != CENTRAL_HEADER {
            return Err(format!("bad central directory entry at byte {at}"));
        }
        let method = u16le(header, 10);
        let crc = u32le(header, 16);
        let mut compressed = u32le(header, 20) as u64;
        let mut size = u32le(header, 24) as u64;
        let name_len = u16le(header, 28) as usize;
        let extra_len = u16le(header, 30) as usize;
        let comment_len = u16le(header, 32) as usize;
        let mut local = u32le(header, 42) as u64;
        let entry_name = archive
            .get(at + 46..at + 46 + name_len)
            .ok_or("the central directory is truncated")?;
        let extra = archive
            .get(at + 46 + name_len..at + 46 + name_len + extra_len)
            .ok_or("the central directory is truncated")?;
        if entry_name == name.as_bytes() {
            read_zip64_extra(extra, &mut size, &mut compressed, &mut local);
            if method != STORED && method != DEFLATED {
                return Err(format!(
                    "member {name} uses compression method {method}; numpy writes stored (0) \
                     or deflated (8) members"
                ));
            }
            let local = local as usize;
            let local_header = archive
                .get(local..local + 30)
                .ok_or("a local header is past the end: truncated")?;
            if u32le(local_header, 0) != LOCAL_HEADER {
                return Err(format!("bad local header for member {name}"));
            }
            let start =
                local + 30 + u16le(local_header, 26) as usize + u16le(local_header, 28) as usize;
            let stored = archive
                .get(start..start.saturating_add(compressed as usize))
                .ok_or_else(|| {
                    format!("member {name} is truncated: {compressed} bytes expected")
                })?;
            let data = if method == DEFLATED {
                inflate(stored, size, inflated).map_err(|why| format!("member {name}: {why}"))?;
                &inflated[..]
            } else {
                stored
            };
            let actual = if verify { crc32fast::hash(data) } else { crc };
            if actual != crc {
                return Err(format!(
                    "member {name} fails its CRC check ({actual:08x} != {crc:08x})"
                ));
            }
            return Ok(data);
        }
        at += 46 + name_len + extra_len + comment_len;
    }
    Err(format!("the archive has no member {name}"))
}

/// Inflates a raw deflate stream that must hold exactly `size` bytes.
fn inflate(stored: &[u8], size: u64, into: &mut Vec<u8>) -> Result<(), String> {
    use std::io::Read;
    into.clear();
    let mut decoder = flate2::read::DeflateDecoder::new(stored);
    // One byte more than promised is read, so a member that inflates to more is caught.
    let limit = size.saturating_add(1);
    decoder
        .by_ref()
        .take(limit)
        .read_to_end(into)
        .map_err(|e| format!("corrupt deflate data ({e})"))?;
    if into.len() as u64 != size {
        return Err(format!(
            "inflates to {}{} bytes, the directory says {size} (truncated or corrupt)",
            into.len().min(size as usize),
            if into.len() as u64 > size { "+" } else { "" }
        ));
    }
    Ok(())
}

/// Applies a zip64 extended-information field: the 64-bit values appear only for the fields that
/// are saturated in the fixed header, in the order uncompressed size, compressed size, offset.
fn read_zip64_extra(extra: &[u8], size: &mut u64, compressed: &mut u64, offset: &mut u64) {
    let mut at = 0;
    while at + 4 <= extra.len() {
        let (id, len) = (u16le(extra, at), u16le(extra, at + 2) as usize);
        let body = &extra[(at + 4).min(extra.len())..(at + 4 + len).min(extra.len())];
        if id == ZIP64_EXTRA {
            let mut field = 0;
            let mut next = |body: &[u8]| {
                let v = (field + 8 <= body.len()).then(|| u64le(body, field));
                field += 8;
                v
            };
            if *size == u32::MAX as u64 {
                *size = next(body).unwrap_or(*size);
            }
            if *compressed == u32::MAX as u64 {
                *compressed = next(body).unwrap_or(*compressed);
            }
            if *offset == u32::MAX as u64 {
                *offset = next(body).unwrap_or(*offset);
            }
        }
        at += 4 + len;
    }
}

fn zip64_directory_offset(archive: &[u8], end: usize) -> Result<usize, String> {
    let locator = end.checked_sub(20).ok_or("bad zip64 locator")?;
    if u32le(archive, locator) != 0x0706_4b50 {
        return Err("bad zip64 end-of-central-directory locator".into());
    }
    let record = u64le(archive, locator + 8) as usize;
    let record_bytes = archive
        .get(record..record + 56)
        .ok_or("the zip64 directory record is truncated")?;
    if u32le(record_bytes, 0) != 0x0606_4b50 {
        return Err("bad zip64 end-of-central-directory record".into());
    }
    Ok(u64le(record_bytes, 48) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A member's contents: `bytes`.
    fn bytes(bytes: &[u8]) -> impl FnOnce(&mut Encoded, &mut crc32fast::Hasher) -> Result<()> + '_ {
        move |out, crc| {
            out.data.extend_from_slice(bytes);
            crc.update(bytes);
            Ok(())
        }
    }

    fn stored_member<'a>(archive: &'a [u8], name: &str, verify: bool) -> Result<&'a [u8], String> {
        // Stored members never touch the inflate buffer; a leaked one keeps the test simple.
        member(archive, name, verify, Box::leak(Box::default()))
    }

    #[test]
    fn deflated_members_round_trip_and_damage_is_caught() {
        let mut encoded = Encoded::default();
        let mut zip = ZipWriter::new(true);
        let text: Vec<u8> = b"abcdefgh".repeat(1000);
        zip.member(&mut encoded, "x.npy", bytes(&text)).unwrap();
        zip.finish(&mut encoded).unwrap();
        let out = encoded.data;
        assert!(out.len() < 1000, "{} bytes: not deflated", out.len());
        let mut inflated = Vec::new();
        assert_eq!(
            member(&out, "x.npy", true, &mut inflated).unwrap(),
            &text[..]
        );
        for cut in [40, 50, out.len() - 30] {
            let mut inflated = Vec::new();
            assert!(member(&out[..cut], "x.npy", true, &mut inflated).is_err());
        }
        let mut flipped = out.clone();
        flipped[45] ^= 0x55; // inside the deflate stream
        let mut inflated = Vec::new();
        assert!(member(&flipped, "x.npy", true, &mut inflated).is_err());
    }

    #[test]
    fn round_trip_and_corruption() {
        let mut encoded = Encoded::default();
        let mut zip = ZipWriter::new(false);
        zip.member(&mut encoded, "x.npy", bytes(b"hello world"))
            .unwrap();
        zip.member(&mut encoded, "y.npy", bytes(b"labels")).unwrap();
        zip.finish(&mut encoded).unwrap();
        let out = encoded.data;
        assert_eq!(stored_member(&out, "x.npy", true).unwrap(), b"hello world");
        assert_eq!(stored_member(&out, "y.npy", true).unwrap(), b"labels");
        assert!(stored_member(&out, "z.npy", true)
            .unwrap_err()
            .contains("no member"));
        assert!(stored_member(&out[..out.len() - 5], "x.npy", true)
            .unwrap_err()
            .contains("truncated"));
        let mut flipped = out.clone();
        flipped[32 + 5] ^= 0xFF; // a byte of x's data
        assert!(stored_member(&flipped, "x.npy", true)
            .unwrap_err()
            .contains("CRC"));
    }
}
