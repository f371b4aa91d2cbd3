//! PNG, as DLIO's `png_generator` writes it with PIL (`img.save(path, format='PNG')`): one 8-bit
//! grayscale image of noise per file (the layout is in [`super::image`]).
//!
//! The image data is stored, not compressed (deflate's stored blocks, no row filter): noise does
//! not compress, so PIL's zlib ends up storing it too and the files have about the same size
//! (`height × (width + 1)` bytes of rows plus a few bytes per 64 KiB block and ~60 of chunks),
//! while encoding runs at memory speed instead of deflate's. PIL splits the data into 64 KiB
//! IDAT chunks where this writes one; readers do not care.
//!
//! Reading is DLIO's `np.asarray(Image.open(filename))` for every sample: the whole file is read
//! and decoded with the `png` crate, checking every chunk's CRC and the zlib stream's Adler-32 as
//! PIL and zlib do, and reading on to IEND (PIL forgives a file cut after the image data; here
//! any cut is an error). With `decode_images = False` the whole file is read and only its chunks'
//! lengths and CRCs are checked, up to IEND.

use std::io::Cursor;

use rand::rngs::SmallRng;

use super::image::{be_u32, image_dims, with_noise, Checks, Decoded, ImageReader};
use super::DaliOperator;
use super::{Encoded, FileFormat, SampleReader};
use crate::dataset::FileShape;
use crate::error::{Error, Result};

const SIGNATURE: &[u8; 8] = b"\x89PNG\r\n\x1a\n";

/// The largest chunk length PNG allows.
const MAX_CHUNK: u32 = (1 << 31) - 1;

#[derive(Clone, Copy)]
pub struct Png {
    /// Decode every image (DLIO); otherwise only check the file's structure.
    pub decode: bool,
}

impl FileFormat for Png {
    fn encode(
        &self,
        _key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        let (height, width) = image_dims(shape)?;
        out.clear();
        let data = &mut out.data;
        with_noise(height, width, rng, |noise| {
            // Rows with their filter byte, 5 bytes per stored block, and the chunks around them.
            data.reserve(noise.len() + height as usize + noise.len() / 65535 * 5 + 128);
            let mut encoder = ::png::Encoder::new(&mut *data, width, height);
            encoder.set_color(::png::ColorType::Grayscale);
            encoder.set_depth(::png::BitDepth::Eight);
            encoder.set_compression(::png::Compression::NoCompression);
            let failed = |e: ::png::EncodingError| Error::run(format!("cannot encode a PNG: {e}"));
            let mut writer = encoder.write_header().map_err(failed)?;
            writer.write_image_data(noise).map_err(failed)?;
            writer.finish().map_err(failed)
        })
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(ImageReader::new(CHECKS, self.decode))
    }

    fn dali_operator(&self) -> Option<DaliOperator> {
        Some(DaliOperator::Image {
            checks: CHECKS,
            decode: self.decode,
        })
    }
}

/// The IHDR fields a reader needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub width: u32,
    pub height: u32,
    pub bit_depth: u8,
    pub color_type: u8,
}

impl Header {
    fn parse(data: &[u8]) -> std::result::Result<Header, String> {
        if data.len() != 13 {
            return Err(format!("IHDR has {} bytes, not 13", data.len()));
        }
        let dim = |at| be_u32(data, at).filter(|&n| (1..=MAX_CHUNK).contains(&n));
        let (Some(width), Some(height)) = (dim(0), dim(4)) else {
            return Err("IHDR has a width or height of 0 or over 2^31".into());
        };
        let header = Header {
            width,
            height,
            bit_depth: data[8],
            color_type: data[9],
        };
        header.channels()?;
        Ok(header)
    }

    /// Samples per pixel, after checking that the depth suits the colour type.
    fn channels(&self) -> std::result::Result<u64, String> {
        let (channels, depths): (u64, &[u8]) = match self.color_type {
            0 => (1, &[1, 2, 4, 8, 16]),
            2 => (3, &[8, 16]),
            3 => (1, &[1, 2, 4, 8]),
            4 => (2, &[8, 16]),
            6 => (4, &[8, 16]),
            other => return Err(format!("IHDR has an unknown colour type {other}")),
        };
        if !depths.contains(&self.bit_depth) {
            return Err(format!(
                "IHDR has bit depth {} for colour type {}",
                self.bit_depth, self.color_type
            ));
        }
        Ok(channels)
    }

    /// Bytes of the decoded image, rows padded to whole bytes (no transformation applied).
    fn decoded_bytes(&self) -> Option<u64> {
        let bits = u64::from(self.width)
            .checked_mul(self.channels().ok()?)?
            .checked_mul(u64::from(self.bit_depth))?;
        bits.div_ceil(8).checked_mul(u64::from(self.height))
    }
}

/// Checks the signature and every chunk's length and CRC up to IEND, without inflating the
/// image data; returns the header.
pub(crate) fn check_structure(bytes: &[u8]) -> std::result::Result<Header, String> {
    if bytes.get(..8) != Some(SIGNATURE) {
        return Err("not a PNG file (bad signature)".into());
    }
    let mut at = 8usize;
    let mut header = None;
    let mut image_data = false;
    loop {
        let length = be_u32(bytes, at)
            .ok_or_else(|| format!("truncated: a chunk starts at offset {at}, the file ends"))?;
        if length > MAX_CHUNK {
            return Err(format!("the chunk at offset {at} claims {length} bytes"));
        }
        let kind = bytes.get(at + 4..at + 8).ok_or_else(|| {
            format!("truncated: the chunk at offset {at} has no type, the file ends")
        })?;
        let name = String::from_utf8_lossy(kind);
        let end = (at + 8)
            .checked_add(length as usize)
            .and_then(|data_end| data_end.checked_add(4))
            .filter(|&end| end <= bytes.len())
            .ok_or_else(|| {
                format!(
                    "truncated: chunk {name} at offset {at} needs {} bytes, the file has {}",
                    u64::from(length) + 12,
                    bytes.len() - at
                )
            })?;
        let data = &bytes[at + 8..end - 4];
        let stored = be_u32(bytes, end - 4).unwrap_or_default();
        if crc32fast::hash(&bytes[at + 4..end - 4]) != stored {
            return Err(format!("chunk {name} at offset {at}: CRC mismatch"));
        }
        match (kind, header) {
            (b"IHDR", None) => header = Some(Header::parse(data)?),
            (_, None) => return Err(format!("the first chunk is {name}, not IHDR")),
            (b"IHDR", Some(_)) => return Err(format!("a second IHDR at offset {at}")),
            (b"IDAT", Some(_)) => image_data = true,
            (b"IEND", Some(header)) if image_data => return Ok(header),
            (b"IEND", Some(_)) => return Err("IEND comes before any IDAT".into()),
            _ => {}
        }
        at = end;
    }
}

/// Decodes the whole image into `pixels` (grown as needed) as PIL would, checking every checksum
/// and reading on to IEND.
pub(crate) fn decode(bytes: &[u8], pixels: &mut Vec<u8>) -> std::result::Result<Decoded, String> {
    let failed = |e: ::png::DecodingError| format!("the PNG decoder fails: {e}");
    let mut options = ::png::DecodeOptions::default();
    options.set_ignore_adler32(false);
    options.set_skip_ancillary_crc_failures(false);
    let mut decoder = ::png::Decoder::new_with_options(Cursor::new(bytes), options);
    // Deflate expands at most 1032-fold, so a file cannot hold more pixel data than that; the
    // bound keeps a corrupt header from asking for more memory than any file could fill.
    let limit = bytes.len().saturating_mul(1032).max(64 << 20);
    decoder.set_limits(::png::Limits { bytes: limit });
    let mut reader = decoder.read_info().map_err(failed)?;
    let size = reader
        .output_buffer_size()
        .filter(|&size| size <= limit)
        .ok_or("the image is larger than the file could hold")?;
    if pixels.len() < size {
        pixels.resize(size, 0);
    }
    let frame = reader.next_frame(&mut pixels[..size]).map_err(failed)?;
    reader.finish().map_err(failed)?;
    let info = reader.info();
    let header = Header {
        width: info.width,
        height: info.height,
        bit_depth: info.bit_depth as u8,
        color_type: info.color_type as u8,
    };
    let expected = header.decoded_bytes();
    if expected != Some(frame.buffer_size() as u64) {
        return Err(format!(
            "decoded {} bytes of a {} × {} image, expected {expected:?}",
            frame.buffer_size(),
            header.width,
            header.height
        ));
    }
    Ok(Decoded {
        width: header.width,
        height: header.height,
        bytes: frame.buffer_size(),
    })
}

/// How the reader checks a file: [`decode`], or [`check_structure`] alone.
pub(super) const CHECKS: Checks = Checks {
    decode,
    structure: |bytes| check_structure(bytes).map(|_| ()),
};

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;
    use crate::config::ElementType;
    use crate::format::image::assert_damage_is_caught;
    use crate::format::testing;

    fn shape(height: u64, width: u64, samples: u64) -> FileShape {
        FileShape {
            dims: vec![height, width, samples],
            element: ElementType::Uint8,
        }
    }

    fn encode(shape: &FileShape, seed: u64) -> Vec<u8> {
        testing::encode(&Png { decode: true }, "a.png", shape, seed).data
    }

    #[test]
    fn decodes_to_the_noise_written() {
        // Over 64 KiB of rows, so the data spans several stored blocks.
        let (height, width) = (300u32, 257u32);
        let file = encode(&shape(300, 257, 4), 7);
        let noise = with_noise(height, width, &mut SmallRng::seed_from_u64(7), |n| {
            Ok(n.to_vec())
        })
        .unwrap();
        let mut pixels = Vec::new();
        let decoded = decode(&file, &mut pixels).unwrap();
        assert_eq!(
            decoded,
            Decoded {
                width,
                height,
                bytes: noise.len()
            }
        );
        assert_eq!(&pixels[..decoded.bytes], &noise[..]);
        let header = check_structure(&file).unwrap();
        assert_eq!((header.width, header.height), (width, height));
        assert_eq!((header.bit_depth, header.color_type), (8, 0));
        // Stored rows: the file is the pixels, a filter byte per row, and little else.
        let rows = noise.len() + height as usize;
        assert!(
            file.len() > rows && file.len() < rows + 200,
            "{}",
            file.len()
        );
    }

    #[test]
    fn every_truncation_and_a_flipped_data_byte_are_errors_naming_the_file() {
        let file = encode(&shape(6, 9, 1), 2);
        // The IDAT's data starts after the signature, IHDR (25 bytes) and the IDAT's length and
        // type; 2 bytes of zlib header and 5 of stored-block header come before the first row.
        let in_rows = 8 + 25 + 8 + 7 + 3;
        assert_eq!(&file[8 + 25 + 4..8 + 25 + 8], b"IDAT");
        let mut flipped = file.clone();
        flipped[in_rows] ^= 0x10;
        assert_damage_is_caught(
            CHECKS,
            "cut.png",
            &file,
            &[(flipped.clone(), "a flipped pixel")],
        );
        assert!(check_structure(&flipped).unwrap_err().contains("IDAT"));
        assert!(decode(&flipped, &mut Vec::new()).is_err());
        // With the chunk's CRC made right, the zlib stream's Adler-32 still catches it when
        // decoding (as zlib does for PIL); the structure check, which does not inflate, does not.
        let idat_end = 8 + 25 + 8 + (file.len() - 8 - 25 - 12 - 12);
        let crc = crc32fast::hash(&flipped[8 + 25 + 4..idat_end]);
        flipped[idat_end..idat_end + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(check_structure(&flipped).is_ok());
        let error = decode(&flipped, &mut Vec::new()).unwrap_err();
        assert!(error.contains("Checksum"), "{error}");
        // And a wrong CRC over right data is caught by both.
        let mut bad_crc = file.clone();
        bad_crc[idat_end] ^= 1;
        assert!(check_structure(&bad_crc).unwrap_err().contains("CRC"));
        let error = decode(&bad_crc, &mut Vec::new()).unwrap_err();
        assert!(error.contains("CRC"), "{error}");
    }

    #[test]
    fn no_byte_flip_panics() {
        let file = encode(&shape(5, 7, 1), 3);
        let mut pixels = Vec::new();
        for at in 0..file.len() {
            for bit in [0x01, 0x80] {
                let mut flipped = file.clone();
                flipped[at] ^= bit;
                // Every chunk is under a CRC, so any flip past the signature is caught.
                assert!(check_structure(&flipped).is_err(), "flip at {at}");
                assert!(decode(&flipped, &mut pixels).is_err(), "flip at {at}");
            }
        }
    }

    #[test]
    fn foreign_colour_images_decode_to_their_size() {
        let mut file = Vec::new();
        let mut encoder = ::png::Encoder::new(&mut file, 3, 2);
        encoder.set_color(::png::ColorType::Rgb);
        encoder.set_depth(::png::BitDepth::Sixteen);
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(&[9; 3 * 2 * 6]).unwrap();
        writer.finish().unwrap();
        let decoded = decode(&file, &mut Vec::new()).unwrap();
        assert_eq!(decoded.bytes, 36);
        let header = check_structure(&file).unwrap();
        assert_eq!((header.color_type, header.bit_depth), (2, 16));
    }
}
