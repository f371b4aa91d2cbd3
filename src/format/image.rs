//! What the image formats (`png`, `jpeg`) share: DLIO's layout, one grayscale 8-bit image of
//! random noise per file, and the reader's two modes.
//!
//! DLIO's `png_generator` / `jpeg_generator` write `np.random.randint(255, size=(d1, d2),
//! dtype=uint8)` through PIL: one image of height `d1` and width `d2` per file, whatever
//! `samples_per_file` says. Here `d1` and `d2` are the first two record dims (`dims[0]` and
//! `dims[1]` of the [`FileShape`]; a single record dim `n` is an `n` × 1 image, and dims beyond
//! the second are ignored). The element type is ignored too: images are always 8-bit gray, as
//! DLIO's are (its generators build `uint8` arrays whatever the configured type). The noise
//! spans all 256 values (DLIO's `randint(255)` stops at 254; nothing reads the difference).
//!
//! DLIO's `ImageReader` opens a file with `np.asarray(Image.open(filename))`: the whole file is
//! read and fully decoded, and every sample index of the file is served by that one image (with
//! `samples_per_file` > 1 each sample reads the same whole file again). With
//! `reader.decode_images = False` (a dlio-rs key) the whole file is still read, but only its
//! structure is checked, cheaply, so that the CPU cost of decoding does not stand between the
//! storage and the measurement.

use std::cell::RefCell;

use rand::rngs::SmallRng;
use rand::RngCore;

use super::{corrupt, read_whole, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::Storage;

/// Height and width of the image of a file of `shape` (sample axis last, and ignored).
pub(crate) fn image_dims(shape: &FileShape) -> Result<(u32, u32)> {
    let record = &shape.dims[..shape.dims.len().saturating_sub(1)];
    let height = record.first().copied().unwrap_or(1);
    let width = record.get(1).copied().unwrap_or(1);
    let side = |n: u64, what: &str| {
        u32::try_from(n)
            .ok()
            .filter(|&n| n >= 1)
            .ok_or_else(|| Error::run(format!("an image {what} of {n} pixels is not possible")))
    };
    Ok((side(height, "height")?, side(width, "width")?))
}

thread_local! {
    /// The noise of the image being encoded, kept per generator thread so that encoding a file
    /// allocates nothing once the largest image has been seen.
    static NOISE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Calls `encode` with `height` × `width` bytes of noise from `rng`.
pub(crate) fn with_noise<T>(
    height: u32,
    width: u32,
    rng: &mut SmallRng,
    encode: impl FnOnce(&[u8]) -> Result<T>,
) -> Result<T> {
    let pixels = (height as usize)
        .checked_mul(width as usize)
        .ok_or_else(|| Error::run(format!("an image of {height} × {width} pixels is too big")))?;
    NOISE.with(|noise| {
        let mut noise = noise.borrow_mut();
        noise.resize(pixels, 0);
        rng.fill_bytes(&mut noise);
        encode(&noise)
    })
}

/// What decoding an image gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    pub width: u32,
    pub height: u32,
    /// Bytes of decoded pixels (`width × height` for 8-bit gray; more for colour or 16-bit).
    pub bytes: usize,
}

/// How one image format checks a file: decoding it whole into a buffer of pixels (grown as
/// needed), or checking its structure only.
#[derive(Clone, Copy)]
pub struct Checks {
    pub decode: fn(&[u8], &mut Vec<u8>) -> std::result::Result<Decoded, String>,
    pub structure: fn(&[u8]) -> std::result::Result<(), String>,
}

/// The reader of an image format: every sample of a file reads the whole file and decodes it,
/// or only checks its structure.
pub(crate) struct ImageReader {
    checks: Checks,
    decode: bool,
    /// Where images are decoded to: overwritten by every decode, never read back; as big as the
    /// largest image of the dataset.
    pixels: Vec<u8>,
}

impl ImageReader {
    pub(crate) fn new(checks: Checks, decode: bool) -> ImageReader {
        ImageReader {
            checks,
            decode,
            pixels: Vec::new(),
        }
    }
}

impl SampleReader for ImageReader {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        _sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let fetched = read_whole(storage, key, buf)?;
        let bytes = buf.bytes.as_slice();
        let checked = if self.decode {
            (self.checks.decode)(bytes, &mut self.pixels).map(|_| ())
        } else {
            (self.checks.structure)(bytes)
        };
        checked.map_err(|why| corrupt(storage, key, why))?;
        Ok(SampleRead {
            offset: 0,
            bytes: fetched,
        })
    }
}

/// Reads the big-endian u16 at `at`, if the bytes are there.
pub(crate) fn be_u16(bytes: &[u8], at: usize) -> Option<u16> {
    let b = bytes.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

/// Reads the big-endian u32 at `at`, if the bytes are there.
pub(crate) fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Asserts that every cut of `file` and each of `damaged` (the bytes, what is wrong with them),
/// stored at `key`, fail to read with an error naming the file, decoding and not.
#[cfg(test)]
pub(super) fn assert_damage_is_caught(
    checks: Checks,
    key: &str,
    file: &[u8],
    damaged: &[(Vec<u8>, &str)],
) {
    let dir = crate::storage::scratch_dir(key);
    let storage = crate::storage::LocalFs::new(&dir);
    let mut readers = [true, false].map(|decode| ImageReader::new(checks, decode));
    let mut buf = ReadBuffer::default();
    let cuts = (0..file.len()).map(|len| (&file[..len], format!("cut at {len}")));
    let damaged = damaged
        .iter()
        .map(|(bytes, what)| (&bytes[..], what.to_string()));
    for (bytes, what) in cuts.chain(damaged) {
        storage.put(key, bytes).unwrap();
        for reader in &mut readers {
            let error = reader
                .read_sample(&storage, key, 0, &mut buf)
                .expect_err(&what);
            assert!(error.to_string().contains(key), "{what}: {error}");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ElementType;
    use crate::format::testing::{assert_reads_whole_file, encode, Scratch};
    use crate::format::{jpeg, png, FileFormat, Jpeg, Png};

    fn shape(dims: &[u64]) -> FileShape {
        FileShape {
            dims: dims.to_vec(),
            element: ElementType::Float32,
        }
    }

    #[test]
    fn dims_are_the_first_two_record_dims() {
        assert_eq!(image_dims(&shape(&[30, 40, 5])).unwrap(), (30, 40));
        assert_eq!(image_dims(&shape(&[30, 40, 7, 5])).unwrap(), (30, 40));
        assert_eq!(image_dims(&shape(&[30, 5])).unwrap(), (30, 1));
        assert!(image_dims(&shape(&[0, 40, 1])).is_err());
        assert!(image_dims(&shape(&[1 << 32, 40, 1])).is_err());
    }

    #[test]
    fn the_noise_is_the_size_of_the_image_and_random() {
        use rand::SeedableRng;
        let mut rng = SmallRng::seed_from_u64(1);
        let first = with_noise(3, 5, &mut rng, |n| Ok(n.to_vec())).unwrap();
        let second = with_noise(3, 5, &mut rng, |n| Ok(n.to_vec())).unwrap();
        assert_eq!(first.len(), 15);
        assert_ne!(first, second);
        assert_eq!(with_noise(1, 2, &mut rng, |n| Ok(n.len())).unwrap(), 2);
    }

    /// Each image format's checks and a file of 40 × 50 pixels it wrote, at a key.
    fn files() -> [(&'static str, Checks, Vec<u8>); 2] {
        let shape = shape(&[40, 50, 3]);
        let file = |format: &dyn FileFormat, key, seed| encode(format, key, &shape, seed).data;
        [
            (
                "train/a.png",
                png::CHECKS,
                file(&Png { decode: true }, "train/a.png", 1),
            ),
            (
                "train/a.jpeg",
                jpeg::CHECKS,
                file(&Jpeg { decode: true }, "train/a.jpeg", 2),
            ),
        ]
    }

    #[test]
    fn every_sample_reads_the_whole_file_with_and_without_decoding() {
        let scratch = Scratch::new("image");
        let mut buf = ReadBuffer::default();
        for (key, checks, file) in files() {
            scratch.buffered.put(key, &file).unwrap();
            for decode in [true, false] {
                let mut reader = ImageReader::new(checks, decode);
                for storage in scratch.both() {
                    for sample in 0..3 {
                        assert_reads_whole_file(&mut reader, storage, key, sample, &file, &mut buf);
                    }
                }
                // Decoding fills the scratch with the image; the structure check never touches it.
                let pixels = if decode { 40 * 50 } else { 0 };
                assert_eq!(reader.pixels.len(), pixels, "{key}");
                let error = reader
                    .read_sample(&scratch.buffered, "train/b", 0, &mut buf)
                    .unwrap_err();
                assert!(error.to_string().contains("train/b"), "{error}");
            }
        }
        scratch.remove();
    }
}
