//! LZF, the codec of h5py's filter 32000 (`compression='lzf'`), as liblzf 3.x encodes it: a
//! stream of literal runs (control byte `n < 32`: `n + 1` bytes follow) and back references
//! (control byte `len << 5 | offset >> 8`, a length byte more when `len` is 7, then the offset's
//! low byte; `len + 2` bytes are copied from `offset + 1` bytes back, overlapping allowed).
//!
//! Written here rather than taken from a crate: the one Rust crate of it (`lzf`) is marked
//! deprecated by its author, and the format is small enough to hold in full and test against
//! h5py's own filter.

/// Back references reach at most this far (13 bits of offset).
const MAX_OFFSET: usize = 1 << 13;
/// A back reference copies at most this many bytes (3 bits plus a byte, plus 2).
const MAX_MATCH: usize = (1 << 8) + (1 << 3);
/// A literal run holds at most this many bytes (5 bits, plus 1).
const MAX_LITERALS: usize = 1 << 5;
/// log2 of the match finder's hash table size (liblzf's default `HLOG`).
const HASH_BITS: u32 = 16;

/// Compresses `input` onto `out` when the result takes at most `limit` bytes, as liblzf's
/// `lzf_compress` into a buffer of `limit` bytes does; returns false (and leaves `out` as it was)
/// when it does not fit: the chunk is then stored as it is, as h5py's filter does.
pub(super) fn compress(
    input: &[u8],
    out: &mut Vec<u8>,
    limit: usize,
    table: &mut Vec<u32>,
) -> bool {
    let start = out.len();
    table.clear();
    table.resize(1 << HASH_BITS, u32::MAX);
    let mut literals = 0;
    let mut i = 0;
    while i + 2 < input.len() {
        let triple =
            u32::from(input[i]) << 16 | u32::from(input[i + 1]) << 8 | u32::from(input[i + 2]);
        let slot = (triple.wrapping_mul(2_654_435_761) >> (32 - HASH_BITS)) as usize;
        let candidate = table[slot] as usize;
        table[slot] = i as u32;
        let offset = i.wrapping_sub(candidate).wrapping_sub(1);
        if candidate != u32::MAX as usize
            && offset < MAX_OFFSET
            && input[candidate..candidate + 3] == input[i..i + 3]
        {
            let longest = MAX_MATCH.min(input.len() - i);
            let mut len = 3;
            while len < longest && input[candidate + len] == input[i + len] {
                len += 1;
            }
            push_literals(out, &input[i - literals..i]);
            literals = 0;
            let code = len - 2;
            if code < 7 {
                out.push((code << 5 | offset >> 8) as u8);
            } else {
                out.push((7 << 5 | offset >> 8) as u8);
                out.push((code - 7) as u8);
            }
            out.push(offset as u8);
            i += len;
        } else {
            literals += 1;
            i += 1;
        }
        if out.len() - start > limit {
            out.truncate(start);
            return false;
        }
    }
    literals += input.len() - i;
    push_literals(out, &input[input.len() - literals..]);
    if out.len() - start > limit {
        out.truncate(start);
        return false;
    }
    true
}

/// Literal runs of at most [`MAX_LITERALS`] bytes each.
fn push_literals(out: &mut Vec<u8>, bytes: &[u8]) {
    for run in bytes.chunks(MAX_LITERALS) {
        out.push((run.len() - 1) as u8);
        out.extend_from_slice(run);
    }
}

/// Decompresses `input`, which must yield exactly `expected` bytes, into `out` (emptied first).
pub(super) fn decompress(input: &[u8], expected: usize, out: &mut Vec<u8>) -> Result<(), String> {
    out.clear();
    out.reserve(expected);
    let ended = || "the LZF stream ends inside an instruction".to_string();
    let mut at = 0;
    while at < input.len() {
        let control = input[at] as usize;
        at += 1;
        if control < MAX_LITERALS {
            let run = input.get(at..at + control + 1).ok_or_else(ended)?;
            out.extend_from_slice(run);
            at += control + 1;
        } else {
            let mut len = control >> 5;
            if len == 7 {
                len += *input.get(at).ok_or_else(ended)? as usize;
                at += 1;
            }
            let low = *input.get(at).ok_or_else(ended)? as usize;
            at += 1;
            let back = ((control & 0x1f) << 8 | low) + 1;
            let from = out.len().checked_sub(back).ok_or_else(|| {
                format!(
                    "an LZF back reference reaches {back} bytes back, {} are decoded",
                    out.len()
                )
            })?;
            // Byte by byte: the source may overlap what is being written.
            for k in 0..len + 2 {
                let byte = out[from + k];
                out.push(byte);
            }
        }
        if out.len() > expected {
            return Err(format!("LZF decompresses to more than {expected} bytes"));
        }
    }
    if out.len() != expected {
        return Err(format!(
            "LZF decompresses to {} bytes, not {expected}",
            out.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(input: &[u8]) -> Option<usize> {
        let mut table = Vec::new();
        let mut packed = vec![7];
        if !compress(input, &mut packed, input.len(), &mut table) {
            assert_eq!(
                packed,
                [7],
                "a failed compression leaves the output as it was"
            );
            return None;
        }
        let mut back = Vec::new();
        decompress(&packed[1..], input.len(), &mut back).unwrap();
        assert_eq!(back, input);
        Some(packed.len() - 1)
    }

    #[test]
    fn compresses_repeats_and_gives_up_on_noise() {
        // Runs longer than one back reference, overlapping copies, and a tail of literals.
        let mut text = vec![0u8; 5000];
        text.extend(b"abcabcabcabcabcabcXYZ".iter().cycle().take(3000));
        text.extend(0..=255u8);
        let packed = round_trip(&text).unwrap();
        assert!(packed < text.len() / 5, "{packed} bytes for {}", text.len());
        // Incompressible bytes take more room than they had: stored as they are.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        assert_eq!(round_trip(&noise), None);
        for small in [&b""[..], b"a", b"ab", b"abc", b"aaaa"] {
            let mut packed = Vec::new();
            assert!(compress(
                small,
                &mut packed,
                small.len() + 2,
                &mut Vec::new()
            ));
            let mut back = Vec::new();
            decompress(&packed, small.len(), &mut back).unwrap();
            assert_eq!(back, small);
        }
    }

    #[test]
    fn decodes_liblzf_streams_and_refuses_damaged_ones() {
        // "aaaaaaaaaa": a literal 'a', then a back reference of 9 bytes at distance 1 (len code
        // 7 → a length byte of 0), as liblzf writes it.
        let mut out = Vec::new();
        decompress(&[0, b'a', 0xe0, 0, 0], 10, &mut out).unwrap();
        assert_eq!(out, b"aaaaaaaaaa");
        for (stream, expected, why) in [
            (&[0, b'a', 0xe0][..], 10, "ends inside"),
            (&[0x20, 5][..], 3, "reaches 6 bytes back"),
            (&[1, b'a'][..], 2, "ends inside"),
            (&[0, b'a', 0x20, 0][..], 2, "more than 2"),
            (&[0, b'a'][..], 2, "1 bytes, not 2"),
        ] {
            let error = decompress(stream, expected, &mut out).unwrap_err();
            assert!(error.contains(why), "{error}");
        }
    }
}
