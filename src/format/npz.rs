//! numpy's `.npz` as `np.savez(path, x=records, y=labels)` writes it: a stored zip holding `x.npy`
//! (the samples, sample axis last) and `y.npy` (int64 labels, one per sample). DLIO's reader calls
//! `np.load(file)['x']`: the whole file is read for every sample (and, with `verify`, the
//! member's CRC checked, as Python's zipfile does).

use rand::rngs::SmallRng;

use super::npy::{check_array, write_header};
use super::zip::{member, ZipWriter};
use super::{corrupt, read_whole, Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::error::Result;
use crate::storage::Storage;

#[derive(Clone, Copy)]
pub struct Npz {
    /// Check the CRC-32 of the `x` member on every read (numpy does; it costs CPU, not I/O).
    pub verify: bool,
    /// `np.savez_compressed` (`dataset.compression: zip`): members deflated.
    pub compressed: bool,
}

impl FileFormat for Npz {
    fn encode(
        &self,
        _key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        out.clear();
        let samples = *shape.dims.last().unwrap_or(&1);
        let mut zip = ZipWriter::new(self.compressed);
        zip.member(out, "x.npy", |o, crc| {
            let at = o.data.len();
            write_header(&mut o.data, shape.element.numpy_descr(), &shape.dims);
            crc.update(&o.data[at..]);
            o.random_values(shape.bytes(), 1, rng, |values| crc.update(values))
        })?;
        zip.member(out, "y.npy", |o, crc| {
            let at = o.data.len();
            write_header(&mut o.data, "<i8", &[samples]);
            o.data.resize(o.data.len() + 8 * samples as usize, 0);
            crc.update(&o.data[at..]);
            Ok(())
        })?;
        zip.finish(out)
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(NpzReader {
            verify: self.verify,
            inflated: Vec::new(),
        })
    }
}

struct NpzReader {
    verify: bool,
    /// The inflated `x` member of a compressed file: as large as the largest one read.
    inflated: Vec<u8>,
}

impl SampleReader for NpzReader {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let fetched = read_whole(storage, key, buf)?;
        let member = member(
            buf.bytes.as_slice(),
            "x.npy",
            self.verify,
            &mut self.inflated,
        )
        .map_err(|why| corrupt(storage, key, why))?;
        check_array(member, sample)
            .map_err(|why| corrupt(storage, key, format!("x.npy: {why}")))?;
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
    use crate::format::testing::{assert_reads_whole_file, encode, Scratch};

    #[test]
    fn reads_a_sample_with_o_direct_as_through_the_page_cache() {
        let shape = FileShape {
            dims: vec![7, 1000, 3],
            element: ElementType::Float32,
        };
        let npz = Npz {
            verify: true,
            compressed: false,
        };
        let file = encode(&npz, "a.npz", &shape, 3).data;
        let scratch = Scratch::new("npz");
        scratch.buffered.put("a.npz", &file).unwrap();
        let mut buf = ReadBuffer::default();
        for storage in scratch.both() {
            assert_reads_whole_file(&mut *npz.reader(), storage, "a.npz", 2, &file, &mut buf);
        }
        let error = npz
            .reader()
            .read_sample(&scratch.direct, "a.npz", 3, &mut buf)
            .unwrap_err();
        assert!(error.to_string().contains("out of range"), "{error}");
        scratch.remove();
    }
}
