//! The record framing: each record is its payload's length (8 bytes, little-endian) and that
//! length's masked CRC-32C, then the payload and the payload's masked CRC-32C. The writer frames
//! records with it and the stream reader finds and checks them with it, so it sits apart from both.

use crc32c::crc32c;

/// Length (8 bytes) and its CRC (4).
pub(super) const HEADER: usize = 12;
/// Header plus the payload's CRC.
pub(super) const FRAMING: u64 = 16;

/// TFRecord's CRC masking, so that a CRC stored inside checksummed data does not checksum to a
/// fixed value.
pub(super) fn masked_crc(data: &[u8]) -> u32 {
    mask(crc32c(data))
}

pub(super) fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}
