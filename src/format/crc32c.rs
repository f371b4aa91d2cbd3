//! CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum TFRecord frames carry.
//! Every generated record and every verified read runs it over the whole payload, so it uses the
//! SSE4.2 `crc32` instruction where the CPU has it (8 bytes per instruction) and a slicing-by-8
//! table elsewhere; both give the same values (tested).

/// The reflected Castagnoli polynomial.
const POLY: u32 = 0x82F6_3B78;

/// `TABLES[0]` is the byte-at-a-time table; `TABLES[k][b]` is the CRC of byte `b` followed by `k`
/// zero bytes, so eight table look-ups consume eight bytes at once.
static TABLES: [[u32; 256]; 8] = make_tables();

const fn make_tables() -> [[u32; 256]; 8] {
    let mut tables = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut crc = b as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        tables[0][b] = crc;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = tables[k - 1][b];
            tables[k][b] = (prev >> 8) ^ tables[0][(prev & 0xFF) as usize];
            b += 1;
        }
        k += 1;
    }
    tables
}

/// The CRC-32C of `data`.
pub(crate) fn crc32c(data: &[u8]) -> u32 {
    !update(!0, data)
}

/// Advances a raw (pre-inverted) CRC register over `data`.
fn update(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2, checked just above.
        return unsafe { update_sse42(crc, data) };
    }
    update_table(crc, data)
}

/// Slicing-by-8: the portable path.
fn update_table(mut crc: u32, data: &[u8]) -> u32 {
    let t = &TABLES;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let lo = crc ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = t[7][(lo & 0xFF) as usize]
            ^ t[6][((lo >> 8) & 0xFF) as usize]
            ^ t[5][((lo >> 16) & 0xFF) as usize]
            ^ t[4][(lo >> 24) as usize]
            ^ t[3][c[4] as usize]
            ^ t[2][c[5] as usize]
            ^ t[1][c[6] as usize]
            ^ t[0][c[7] as usize];
    }
    for &b in chunks.remainder() {
        crc = (crc >> 8) ^ t[0][((crc ^ b as u32) & 0xFF) as usize];
    }
    crc
}

/// The SSE4.2 `crc32` instruction computes exactly this CRC (it has the Castagnoli polynomial
/// built in), eight bytes at a time.
///
/// # Safety
/// The CPU must support SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn update_sse42(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut wide = crc as u64;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let word = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        wide = _mm_crc32_u64(wide, word);
    }
    let mut crc = wide as u32;
    for &b in chunks.remainder() {
        crc = _mm_crc32_u8(crc, b);
    }
    crc
}

#[cfg(test)]
mod tests {
    use rand::rngs::SmallRng;
    use rand::{RngCore, SeedableRng};

    use super::*;

    #[test]
    fn known_vectors() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(!update_table(!0, b"123456789"), 0xE306_9283);
        // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF, and ascending.
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xFFu8; 32]), 0x62A8_AB43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46DD_794E);
    }

    #[test]
    fn every_path_agrees_on_random_data() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut data = vec![0u8; 10_000];
        rng.fill_bytes(&mut data);
        // Every length up to 40 and a few long ones, at unaligned starts too, so the 8-byte loop
        // and the byte tail are both exercised.
        let lengths = (0..40).chain([1000, 4093, 9_990]);
        for len in lengths {
            for start in [0, 1, 3, 7] {
                let span = &data[start..start + len];
                let bitwise = span.iter().fold(!0u32, |mut crc, &b| {
                    crc ^= b as u32;
                    for _ in 0..8 {
                        crc = if crc & 1 == 1 {
                            (crc >> 1) ^ POLY
                        } else {
                            crc >> 1
                        };
                    }
                    crc
                });
                assert_eq!(update_table(!0, span), bitwise, "table, len {len}");
                assert_eq!(update(!0, span), bitwise, "dispatched, len {len}");
                #[cfg(target_arch = "x86_64")]
                if std::arch::is_x86_feature_detected!("sse4.2") {
                    // SAFETY: checked just above.
                    assert_eq!(
                        unsafe { update_sse42(!0, span) },
                        bitwise,
                        "sse4.2, len {len}"
                    );
                }
            }
        }
        // A CRC continued over two pieces is the CRC of the whole.
        let (a, b) = data.split_at(4321);
        assert_eq!(!update(update(!0, a), b), crc32c(&data));
    }
}
