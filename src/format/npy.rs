//! numpy's `.npy`: a header (magic, version, a Python dict literal with descr, fortran_order and
//! shape, padded to 64 bytes) followed by the raw array. `np.load` reads the whole file.

use rand::rngs::SmallRng;

use super::{corrupt, read_whole, Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::error::Result;
use crate::storage::Storage;

const MAGIC: &[u8] = b"\x93NUMPY";

pub struct Npy;

/// Appends the header of an array of `shape` with element `descr`.
pub(crate) fn write_header(out: &mut Vec<u8>, descr: &str, shape: &[u64]) {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut dict =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // numpy pads with spaces and a newline so the data starts on a 64-byte boundary; the header
    // length is a u16 in version 1.0 and a u32 in 2.0, for dicts too long for 1.0.
    let padded = |prefix: usize| (prefix + dict.len() + 1).div_ceil(64) * 64 - prefix;
    let (version, prefix) = if padded(10) <= u16::MAX as usize {
        (1u8, 10)
    } else {
        (2u8, 12)
    };
    let padding = padded(prefix) - dict.len() - 1;
    dict.push_str(&" ".repeat(padding));
    dict.push('\n');
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[version, 0]);
    if version == 1 {
        out.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&(dict.len() as u32).to_le_bytes());
    }
    out.extend_from_slice(dict.as_bytes());
}

/// Appends a whole `.npy` file of random contents.
pub(crate) fn write_random_array(
    out: &mut Encoded,
    shape: &FileShape,
    rng: &mut SmallRng,
) -> Result<()> {
    write_header(&mut out.data, shape.element.numpy_descr(), &shape.dims);
    out.random(shape.bytes(), rng)
}

/// The parts of a header a reader needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ArrayHeader {
    pub item_size: u64,
    pub shape: Vec<u64>,
    pub data_offset: usize,
}

impl ArrayHeader {
    pub fn data_bytes(&self) -> u64 {
        self.shape.iter().product::<u64>() * self.item_size
    }
}

/// Parses an `.npy` header at the start of `bytes`.
pub(crate) fn parse_header(bytes: &[u8]) -> std::result::Result<ArrayHeader, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("not an .npy array (bad magic)".into());
    }
    let (dict_len, dict_start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize,
            12,
        ),
        v => return Err(format!("unsupported .npy version {v}")),
    };
    let dict = bytes
        .get(dict_start..dict_start + dict_len)
        .ok_or("the .npy header is truncated")?;
    let dict = std::str::from_utf8(dict).map_err(|_| "the .npy header is not text")?;
    // `pattern` is `'name':`; a literal, so parsing a header allocates only on failure.
    let field = |pattern: &str| -> std::result::Result<&str, String> {
        let at = dict
            .find(pattern)
            .ok_or_else(|| format!("the .npy header has no {pattern}"))?;
        Ok(dict[at + pattern.len()..].trim_start())
    };
    let descr = field("'descr':")?;
    let descr = descr
        .strip_prefix('\'')
        .and_then(|d| d.split('\'').next())
        .ok_or("bad 'descr' in .npy header")?;
    let item_size: u64 = descr
        .trim_start_matches(['<', '>', '|', '='])
        .get(1..)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("unsupported element type '{descr}' in .npy header"))?;
    let shape = field("'shape':")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or("bad 'shape' in .npy header")?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse::<u64>())
        .collect::<std::result::Result<Vec<u64>, _>>()
        .map_err(|_| format!("bad shape ({shape}) in .npy header"))?;
    Ok(ArrayHeader {
        item_size,
        shape,
        data_offset: dict_start + dict_len,
    })
}

/// Checks that `bytes` hold a complete array and that it has sample `sample` on its last axis.
pub(crate) fn check_array(bytes: &[u8], sample: u64) -> std::result::Result<ArrayHeader, String> {
    let header = parse_header(bytes)?;
    let have = (bytes.len() - header.data_offset.min(bytes.len())) as u64;
    if have < header.data_bytes() {
        return Err(format!(
            "truncated: the array needs {} data bytes, the file has {have}",
            header.data_bytes()
        ));
    }
    let samples = header.shape.last().copied().unwrap_or(1);
    if sample >= samples {
        return Err(format!(
            "sample {sample} is out of range: the array {:?} holds {samples} samples",
            header.shape
        ));
    }
    Ok(header)
}

impl FileFormat for Npy {
    fn encode(
        &self,
        _key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        out.clear();
        write_random_array(out, shape, rng)
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(Npy)
    }
}

/// `np.load` reads the whole file for every sample.
impl SampleReader for Npy {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let fetched = read_whole(storage, key, buf)?;
        check_array(buf.bytes.as_slice(), sample).map_err(|why| corrupt(storage, key, why))?;
        Ok(SampleRead {
            offset: 0,
            bytes: fetched,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ElementType;
    use rand::SeedableRng;

    #[test]
    fn a_sample_costs_the_bytes_the_storage_moved() {
        use crate::format::testing::Scratch;
        use crate::storage::Storage;
        let shape = FileShape {
            dims: vec![3, 4, 2],
            element: ElementType::Float32,
        };
        let mut encoded = Encoded::default();
        write_random_array(&mut encoded, &shape, &mut SmallRng::seed_from_u64(1)).unwrap();
        let scratch = Scratch::new("npy-cost");
        scratch.buffered.put("a.npy", &encoded.data).unwrap();
        let mut buf = ReadBuffer::default();
        let len = encoded.data.len() as u64;
        assert!(len < 4096);
        let plain = Npy
            .read_sample(&scratch.buffered, "a.npy", 1, &mut buf)
            .unwrap();
        assert_eq!(plain.bytes, len, "buffered: the file's bytes");
        let whole_blocks = Npy
            .read_sample(&scratch.direct, "a.npy", 1, &mut buf)
            .unwrap();
        assert_eq!(
            whole_blocks.bytes, 4096,
            "O_DIRECT: the block the device moved"
        );
        scratch.remove();
    }

    #[test]
    fn header_round_trip_and_alignment() {
        let shape = FileShape {
            dims: vec![3, 4, 2],
            element: ElementType::Float32,
        };
        let mut encoded = Encoded::default();
        write_random_array(&mut encoded, &shape, &mut SmallRng::seed_from_u64(1)).unwrap();
        let out = encoded.data;
        let header = check_array(&out, 1).unwrap();
        assert_eq!(header.data_offset % 64, 0);
        assert_eq!(header.shape, vec![3, 4, 2]);
        assert_eq!(header.item_size, 4);
        assert_eq!(out.len(), header.data_offset + 96);
        assert!(check_array(&out, 2).unwrap_err().contains("out of range"));
        assert!(check_array(&out[..out.len() - 1], 0)
            .unwrap_err()
            .contains("truncated"));
        assert!(check_array(&out[..5], 0).is_err());
        let mut one = Vec::new();
        write_header(&mut one, "<i8", &[5]);
        assert!(std::str::from_utf8(&one[10..])
            .unwrap()
            .contains("'shape': (5,)"));
        assert_eq!(parse_header(&one).unwrap().shape, vec![5]);
    }
}
