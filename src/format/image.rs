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

use crate::dataset::FileShape;
use crate::error::{Error, Result};

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
pub(crate) struct Decoded {
    pub width: u32,
    pub height: u32,
    /// Bytes of decoded pixels (`width × height` for 8-bit gray; more for colour or 16-bit).
    pub bytes: usize,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ElementType;

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
}
