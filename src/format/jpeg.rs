//! JPEG, as DLIO's `jpeg_generator` writes it with PIL (`img.save(path, format='JPEG')`): one
//! 8-bit grayscale image of noise per file (the layout is in [`super::image`]), baseline,
//! quality 75 (PIL's default; the libjpeg tables scaled the libjpeg way), standard Huffman
//! tables, a JFIF header. Encoded with `jpeg-encoder`; noise is JPEG's worst case, so files are
//! about half the pixel count and encoding is CPU work (about 140 Mpixel/s on one core).
//!
//! Reading is DLIO's `np.asarray(Image.open(filename))` for every sample: the whole file is read
//! and decoded with `zune-jpeg` (grayscale stays one byte per pixel; colour files decode to RGB,
//! or CMYK, as PIL's modes). With `decode_images = False` the whole file is read and only its
//! structure is checked: SOI, the marker segments' lengths up to SOS, and EOI at the end. That
//! check runs before a decode too, since the decoder forgives a cut in the entropy-coded data
//! that PIL reports as a truncated file: a file must end with EOI (one with bytes after EOI is
//! refused).

use rand::rngs::SmallRng;
use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

use super::image::{be_u16, image_dims, with_noise, Checks, Decoded, ImageReader};
use super::DaliOperator;
use super::{Encoded, FileFormat, SampleReader};
use crate::dataset::FileShape;
use crate::error::{Error, Result};

/// PIL's default.
const QUALITY: u8 = 75;

#[derive(Clone, Copy)]
pub struct Jpeg {
    /// Decode every image (DLIO); otherwise only check the file's structure.
    pub decode: bool,
}

impl FileFormat for Jpeg {
    fn encode(
        &self,
        _key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        let (height, width) = image_dims(shape)?;
        let (Ok(h), Ok(w)) = (u16::try_from(height), u16::try_from(width)) else {
            return Err(Error::run(format!(
                "a JPEG image is at most 65535 × 65535 pixels, not {height} × {width}"
            )));
        };
        out.clear();
        let data = &mut out.data;
        with_noise(height, width, rng, |noise| {
            jpeg_encoder::Encoder::new(&mut *data, QUALITY)
                .encode(noise, w, h, jpeg_encoder::ColorType::Luma)
                .map_err(|e| Error::run(format!("cannot encode a JPEG: {e}")))
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

/// The frame header's fields a reader needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    pub width: u16,
    pub height: u16,
    pub components: u8,
}

/// Checks SOI, the marker segments up to and including SOS (each one's length within the file,
/// a frame header before the scan), and EOI as the file's last two bytes; the entropy-coded data
/// is not looked at. Returns the frame header.
pub(crate) fn check_structure(bytes: &[u8]) -> std::result::Result<Frame, String> {
    if bytes.get(..2) != Some(&[0xFF, 0xD8]) {
        return Err("not a JPEG file (no SOI marker)".into());
    }
    let mut at = 2usize;
    let mut frame = None;
    let (data_start, frame) = loop {
        if bytes.get(at) != Some(&0xFF) {
            return Err(match bytes.get(at) {
                None => format!("truncated: a marker is expected at offset {at}, the file ends"),
                Some(b) => format!("a marker is expected at offset {at}, found byte {b:#04x}"),
            });
        }
        // Any number of 0xFF may pad a marker.
        while bytes.get(at) == Some(&0xFF) {
            at += 1;
        }
        let marker = *bytes
            .get(at)
            .ok_or_else(|| format!("truncated: the marker at offset {at} is cut"))?;
        let marker_at = at - 1;
        at += 1;
        match marker {
            0x01 | 0xD0..=0xD7 => continue,
            0x00 | 0xD8 | 0xD9 => {
                return Err(format!(
                    "unexpected marker {marker:#04x} before the scan, at offset {marker_at}"
                ))
            }
            _ => {}
        }
        let length = be_u16(bytes, at).ok_or_else(|| {
            format!("truncated: marker {marker:#04x} at offset {marker_at} has no length")
        })? as usize;
        let end = at.saturating_add(length);
        if length < 2 || end > bytes.len() {
            return Err(format!(
                "marker {marker:#04x} at offset {marker_at}: a segment of {length} bytes {}",
                if length < 2 {
                    "is impossible".to_string()
                } else {
                    format!("is cut, the file has {} more", bytes.len() - at)
                }
            ));
        }
        let segment = &bytes[at + 2..end];
        match marker {
            // Start of frame, every kind but the DHT, JPG and DAC markers that share the range.
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                if frame.is_some() {
                    return Err(format!("a second frame header at offset {marker_at}"));
                }
                frame = Some(parse_frame(segment)?);
            }
            0xDA => {
                let Some(frame) = frame else {
                    return Err("the scan comes before any frame header".into());
                };
                let components = segment.first().copied().unwrap_or(0);
                if components == 0 || segment.len() != 4 + 2 * components as usize {
                    return Err(format!(
                        "the scan header has {} bytes for {components} components",
                        segment.len()
                    ));
                }
                break (end, frame);
            }
            _ => {}
        }
        at = end;
    };
    if bytes.len() < data_start + 2 || !bytes.ends_with(&[0xFF, 0xD9]) {
        return Err(format!(
            "truncated: the file ({} bytes) does not end with an EOI marker",
            bytes.len()
        ));
    }
    Ok(frame)
}

fn parse_frame(segment: &[u8]) -> std::result::Result<Frame, String> {
    let (Some(height), Some(width), Some(&components)) =
        (be_u16(segment, 1), be_u16(segment, 3), segment.get(5))
    else {
        return Err(format!("the frame header has {} bytes", segment.len()));
    };
    if segment.len() != 6 + 3 * components as usize || components == 0 {
        return Err(format!(
            "the frame header has {} bytes for {components} components",
            segment.len()
        ));
    }
    if width == 0 || height == 0 {
        return Err(format!("the frame is {height} × {width} pixels"));
    }
    Ok(Frame {
        width,
        height,
        components,
    })
}

/// Checks the structure, then decodes the whole image into `pixels` (grown as needed) in the
/// mode PIL would give it.
pub(crate) fn decode(bytes: &[u8], pixels: &mut Vec<u8>) -> std::result::Result<Decoded, String> {
    let frame = check_structure(bytes)?;
    let failed = |e: zune_jpeg::errors::DecodeErrors| format!("the JPEG decoder fails: {e}");
    let options = DecoderOptions::default()
        .set_strict_mode(true)
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX));
    let mut decoder = JpegDecoder::new_with_options(ZCursor::new(bytes), options);
    decoder.decode_headers().map_err(failed)?;
    let out = match decoder.input_colorspace() {
        Some(ColorSpace::Luma) => ColorSpace::Luma,
        Some(ColorSpace::CMYK | ColorSpace::YCCK) => ColorSpace::CMYK,
        _ => ColorSpace::RGB,
    };
    decoder.set_options(options.jpeg_set_out_colorspace(out));
    // An 8 × 8 block costs at least a bit per component, so a file cannot describe more than
    // 64 pixels per bit; the bound keeps a corrupt header from asking for more memory than that.
    let limit = bytes.len().saturating_mul(64 * 8 * 4).max(64 << 20);
    let size = decoder
        .output_buffer_size()
        .filter(|&size| size <= limit)
        .ok_or("the image is larger than the file could describe")?;
    if pixels.len() < size {
        pixels.resize(size, 0);
    }
    decoder.decode_into(&mut pixels[..size]).map_err(failed)?;
    let (width, height) = decoder.dimensions().unwrap_or_default();
    if (width, height) != (usize::from(frame.width), usize::from(frame.height)) {
        return Err(format!(
            "decoded a {height} × {width} image, the frame header says {} × {}",
            frame.height, frame.width
        ));
    }
    Ok(Decoded {
        width: u32::from(frame.width),
        height: u32::from(frame.height),
        bytes: size,
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

    fn encode(height: u64, width: u64, seed: u64) -> Vec<u8> {
        let shape = FileShape {
            dims: vec![height, width, 2],
            element: ElementType::Float64,
        };
        testing::encode(&Jpeg { decode: true }, "a.jpeg", &shape, seed).data
    }

    #[test]
    fn decodes_to_a_gray_image_of_the_right_size() {
        let file = encode(37, 70, 1);
        let frame = check_structure(&file).unwrap();
        assert_eq!(
            frame,
            Frame {
                width: 70,
                height: 37,
                components: 1
            }
        );
        let mut pixels = Vec::new();
        let decoded = decode(&file, &mut pixels).unwrap();
        assert_eq!(
            decoded,
            Decoded {
                width: 70,
                height: 37,
                bytes: 70 * 37
            }
        );
        // Lossy, but noise at quality 75 still correlates with what was written.
        let noise =
            with_noise(37, 70, &mut SmallRng::seed_from_u64(1), |n| Ok(n.to_vec())).unwrap();
        let error: f64 = noise
            .iter()
            .zip(&pixels)
            .map(|(&a, &b)| (f64::from(a) - f64::from(b)).abs())
            .sum::<f64>()
            / noise.len() as f64;
        assert!(error < 40.0, "mean error {error}");
    }

    #[test]
    fn refuses_images_jpeg_cannot_hold() {
        let shape = FileShape {
            dims: vec![2, 70_000, 1],
            element: ElementType::Uint8,
        };
        let error = Jpeg { decode: true }
            .encode(
                "a.jpeg",
                &shape,
                &mut SmallRng::seed_from_u64(1),
                &mut Encoded::default(),
            )
            .unwrap_err();
        assert!(error.to_string().contains("65535"), "{error}");
    }

    #[test]
    fn every_truncation_and_a_flipped_header_byte_are_errors_naming_the_file() {
        let file = encode(13, 20, 3);
        // The first segment after SOI is JFIF's APP0; its length's high byte made huge.
        assert_eq!(&file[2..4], &[0xFF, 0xE0]);
        let mut app0 = file.clone();
        app0[4] ^= 0x80;
        // The frame header's height made 0.
        let sof = file.windows(2).position(|w| w == [0xFF, 0xC0]).unwrap();
        let mut no_height = file.clone();
        no_height[sof + 5..sof + 7].fill(0);
        let mut longer = file.clone();
        longer.push(0);
        let damaged = [
            (app0, "a flipped APP0 length"),
            (no_height, "a frame of height 0"),
            (longer, "a byte after EOI"),
        ];
        assert_damage_is_caught(CHECKS, "cut.jpeg", &file, &damaged);
    }

    #[test]
    fn no_byte_flip_panics() {
        let file = encode(9, 17, 4);
        let mut pixels = Vec::new();
        // SOS and its 8-byte segment (one component) come before the entropy-coded data.
        let scan = file.windows(2).position(|w| w == [0xFF, 0xDA]).unwrap();
        for at in 0..file.len() {
            for bit in [0x01, 0x80] {
                let mut flipped = file.clone();
                flipped[at] ^= bit;
                // JPEG has no checksum: a flip in the tables or the entropy-coded data may decode
                // to other pixels, but must never panic.
                let checked = check_structure(&flipped);
                let decoded = decode(&flipped, &mut pixels);
                if at < 3 || at >= file.len() - 2 {
                    assert!(checked.is_err() && decoded.is_err(), "flip at {at}");
                }
                if at >= scan + 10 && at < file.len() - 2 {
                    assert!(checked.is_ok(), "flip at {at} in the scan");
                }
            }
        }
    }
}
