//! The random contents of generated files. Generating them is most of the CPU that writing an
//! unencoded file costs, so they come from eight xoshiro256++ generators run side by side, which
//! the compiler turns into vector instructions: with AVX-512 about four times the speed of the one
//! generator of `SmallRng` (measured 49 against 12 GB/s on one core), so that the storage, not the
//! generator, sets the pace. The generators are seeded from the file's own generator, so a file's
//! contents stay a function of its seed.

use rand::rngs::SmallRng;
use rand::RngCore;

const LANES: usize = 8;
/// Bytes one step of all the generators makes.
const STEP_BYTES: usize = LANES * 8;

/// A stream of random bytes: filling buffers in any pieces gives the bytes of one fill.
pub(crate) struct BulkRandom {
    /// xoshiro256++ states, word-major so that each word of the eight states is one vector.
    s: [[u64; LANES]; 4],
    /// The bytes of the last step that a fill ending inside it left, served first by the next.
    left_over: [u8; STEP_BYTES],
    left_over_len: usize,
}

impl BulkRandom {
    pub fn seeded(rng: &mut SmallRng) -> BulkRandom {
        let mut s = [[0; LANES]; 4];
        for word in s.iter_mut().flatten() {
            *word = rng.next_u64();
        }
        BulkRandom {
            s,
            left_over: [0; STEP_BYTES],
            left_over_len: 0,
        }
    }

    /// Fills `out` with the next random bytes of the stream.
    pub fn fill(&mut self, out: &mut [u8]) {
        let from_before = self.left_over_len.min(out.len());
        let first = STEP_BYTES - self.left_over_len;
        out[..from_before].copy_from_slice(&self.left_over[first..first + from_before]);
        self.left_over_len -= from_before;
        let out = &mut out[from_before..];
        if out.is_empty() {
            return;
        }
        self.fill_steps(out);
    }

    /// Fills `out` with new steps; keeps what the last one had beyond `out`.
    fn fill_steps(&mut self, out: &mut [u8]) {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F, checked just above.
                return unsafe { self.fill_avx512(out) };
            }
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2, checked just above.
                return unsafe { self.fill_avx2(out) };
            }
        }
        self.fill_portable(out)
    }

    /// # Safety
    /// The CPU must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f")]
    unsafe fn fill_avx512(&mut self, out: &mut [u8]) {
        self.fill_portable(out)
    }

    /// # Safety
    /// The CPU must support AVX2.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    unsafe fn fill_avx2(&mut self, out: &mut [u8]) {
        self.fill_portable(out)
    }

    /// Inlined into each of the `fill_*` above, so that each is compiled for its instructions.
    #[inline(always)]
    fn fill_portable(&mut self, out: &mut [u8]) {
        let mut chunks = out.chunks_exact_mut(STEP_BYTES);
        for chunk in &mut chunks {
            let words = self.step();
            for (bytes, word) in chunk.chunks_exact_mut(8).zip(words) {
                bytes.copy_from_slice(&word.to_le_bytes());
            }
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let words = self.step();
            for (bytes, word) in self.left_over.chunks_exact_mut(8).zip(words) {
                bytes.copy_from_slice(&word.to_le_bytes());
            }
            rest.copy_from_slice(&self.left_over[..rest.len()]);
            self.left_over_len = STEP_BYTES - rest.len();
        }
    }

    /// One step of every generator: xoshiro256++ as its authors give it, lane by lane.
    #[inline(always)]
    fn step(&mut self) -> [u64; LANES] {
        let [s0, s1, s2, s3] = &mut self.s;
        let mut out = [0; LANES];
        for i in 0..LANES {
            out[i] = s0[i]
                .wrapping_add(s3[i])
                .rotate_left(23)
                .wrapping_add(s0[i]);
            let t = s1[i] << 17;
            s2[i] ^= s0[i];
            s3[i] ^= s1[i];
            s1[i] ^= s2[i];
            s0[i] ^= s3[i];
            s2[i] ^= t;
            s3[i] = s3[i].rotate_left(45);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use rand::SeedableRng;

    use super::*;

    fn filled(len: usize, pieces: &[usize]) -> Vec<u8> {
        let mut random = BulkRandom::seeded(&mut SmallRng::seed_from_u64(3));
        let mut out = vec![0; len];
        let mut at = 0;
        for &piece in pieces.iter().chain([&len]) {
            let end = (at + piece).min(len);
            random.fill(&mut out[at..end]);
            at = end;
        }
        out
    }

    #[test]
    fn lanes_follow_the_reference_xoshiro256plusplus() {
        // The reference algorithm, one generator at a time, on lane 0's state.
        let mut random = BulkRandom::seeded(&mut SmallRng::seed_from_u64(9));
        let mut s = [
            random.s[0][0],
            random.s[1][0],
            random.s[2][0],
            random.s[3][0],
        ];
        let mut out = [0u8; STEP_BYTES * 3];
        random.fill(&mut out);
        for step in 0..3 {
            let result = s[0].wrapping_add(s[3]).rotate_left(23).wrapping_add(s[0]);
            let t = s[1] << 17;
            s[2] ^= s[0];
            s[3] ^= s[1];
            s[1] ^= s[2];
            s[0] ^= s[3];
            s[2] ^= t;
            s[3] = s[3].rotate_left(45);
            let at = step * STEP_BYTES;
            assert_eq!(out[at..at + 8], result.to_le_bytes());
        }
    }

    #[test]
    fn filling_in_pieces_gives_the_bytes_of_one_fill() {
        let whole = filled(100_003, &[]);
        for pieces in [
            &[64, 65536, 448][..],
            &[1, 2, 3, 61, 64, 65, 127, 5000],
            &[63; 40],
        ] {
            assert!(filled(100_003, pieces) == whole, "{pieces:?}");
        }
    }

    #[test]
    fn every_instruction_set_gives_the_same_bytes_and_they_do_not_compress() {
        let mut portable = BulkRandom::seeded(&mut SmallRng::seed_from_u64(5));
        let mut dispatched = BulkRandom::seeded(&mut SmallRng::seed_from_u64(5));
        let (mut a, mut b) = (vec![0; 1 << 20], vec![0; 1 << 20]);
        portable.fill_portable(&mut a);
        dispatched.fill(&mut b);
        assert!(a == b);
        let mut deflate =
            flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
        deflate.write_all(&a).unwrap();
        let compressed = deflate.finish().unwrap().len();
        assert!(
            compressed > a.len(),
            "{compressed} bytes: random data compressed"
        );
    }
}
