//! HDF5, as DLIO's `hdf5_generator` writes it with h5py and its `hdf5_reader` reads it: our own
//! minimal implementation of the HDF5 file format (no HDF5 library).
//!
//! **Written:** datasets `records_0` .. `records_{k-1}` (k = `dataset.hdf5.num_dset_per_record`),
//! each of shape `(samples_per_file, *sample_dims)`: the sample axis, last in [`FileShape`],
//! comes first; with k > 1 the first sample dimension is divided by k, and a first sample
//! dimension of 1 is dropped when others follow (both as DLIO does). Elements are the configured
//! little-endian numbers, random; `labels` holds int64 zeros, one per sample. Storage is
//! contiguous unless `dataset.hdf5.chunk_dims` gives a chunk shape or `dataset.compression` is
//! `gzip` or `lzf` (then chunks of one sample, deflated at `dataset.compression_level`, or
//! LZF-compressed by h5py's filter 32000, a chunk LZF cannot shrink stored as it is, as that
//! optional filter leaves it). See [`write`] for
//! the file-format versions (h5py's `libver='latest'`): metadata first, then the data, so
//! generating an uncompressed file costs a header and one pass of random bytes.
//!
//! **Read:** for every sample, what `f['records_k'][sample]` costs for every records dataset
//! (`records` in DLIO 2.0, `records_*` later) of a file `f` that h5py holds open, as DLIO's
//! reader keeps the files it reads open: when a reader thread first reads a file, its metadata
//! (superblock, root group, the datasets' object headers) by range reads, starting with one 4 KiB
//! read at the file's start, which holds all of it in files h5py or this writer makes, and kept
//! while the thread reads that file; then, for each sample, the chunk index where chunked, and
//! the sample's bytes: one range per contiguous dataset, or the chunks holding the sample, each
//! inflated, LZF-decoded and unshuffled as its filters say. Files h5py writes with either library bound are
//! read: superblocks 0 to 3, object headers v1 and v2 (with continuation blocks), groups by
//! symbol table or by link messages, compact, contiguous and chunked layouts (v1 B-tree, single
//! chunk, implicit and fixed array indexes), fixed-point and floating-point elements, deflate,
//! LZF and shuffle. What is not (extensible arrays and v2 B-trees of resizable datasets, dense link
//! storage, other filters) is an error naming it. With `verify`, metadata checksums are checked.

mod checksum;
mod dataset;
mod lzf;
mod read;
mod sample;
#[cfg(test)]
mod tests;
mod write;

use rand::rngs::SmallRng;

use super::{Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::config::{Compression, Config};
use crate::dataset::FileShape;
use crate::error::{Error, Result};
use crate::storage::Storage;
use read::{Io, Windows};
use sample::Scratch;
use write::Codec;

/// The 8 bytes every HDF5 superblock starts with.
const SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// The HDF5 format as configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hdf5 {
    /// Records datasets per file.
    records: u64,
    /// `dataset.hdf5.chunk_dims`; empty: contiguous unless compressed.
    chunk_dims: Vec<u64>,
    /// The chunks' filter with `compression: gzip` or `lzf`.
    codec: Option<Codec>,
    /// Check metadata checksums when reading.
    verify: bool,
}

impl Hdf5 {
    /// The format for `config`; compressions h5py has no filter for (bz2, xz, zip) are a usage
    /// error, as h5py raises on them. The gzip level is DLIO's `compression_level`: its generator
    /// passes it to h5py (`compression_opts`) for gzip, and h5py checks it is 0 to 9.
    pub fn for_config(config: &Config, verify: bool) -> Result<Hdf5> {
        let dataset = &config.dataset;
        let codec = match dataset.compression {
            Compression::None => None,
            Compression::Lzf => Some(Codec::Lzf),
            Compression::Gzip => match u32::try_from(dataset.compression_level) {
                Ok(level @ 0..=9) => Some(Codec::Deflate(level)),
                _ => {
                    return Err(Error::usage(format!(
                        "workload.dataset.compression_level = {} is not a gzip level; valid levels are 0 to 9",
                        dataset.compression_level
                    )))
                }
            },
            other => {
                return Err(Error::usage(format!(
                    "workload.dataset.compression = {other} does not apply to dataset.format = hdf5 \
                     (h5py has no such filter); valid values for hdf5 are none, gzip, lzf"
                )))
            }
        };
        Ok(Hdf5 {
            records: dataset.hdf5.num_dset_per_record,
            chunk_dims: dataset.hdf5.chunk_dims.clone(),
            codec,
            verify,
        })
    }

    /// The shape of each records dataset: samples first, then the sample's dimensions as DLIO
    /// shapes them.
    fn records_shape(&self, shape: &FileShape) -> Result<Vec<u64>> {
        let (&samples, sample_dims) = shape
            .dims
            .split_last()
            .ok_or_else(|| Error::run("an hdf5 file needs a shape"))?;
        let mut sample_dims = sample_dims.to_vec();
        if self.records > 1 {
            match sample_dims.first_mut() {
                Some(first) if *first >= self.records => *first /= self.records,
                _ => {
                    return Err(Error::usage(format!(
                        "workload.dataset.hdf5.num_dset_per_record = {} does not divide a sample of shape {sample_dims:?}: \
                         its first dimension must be at least that",
                        self.records
                    )))
                }
            }
        }
        if sample_dims.len() > 1 && sample_dims[0] == 1 {
            sample_dims.remove(0);
        }
        let mut dims = vec![samples];
        dims.extend(sample_dims);
        Ok(dims)
    }

    /// The chunk shape for records datasets of shape `dims`, if chunked.
    fn chunks(&self, dims: &[u64]) -> Result<Option<Vec<u64>>> {
        let chunks = if !self.chunk_dims.is_empty() {
            self.chunk_dims.clone()
        } else if self.codec.is_some() {
            let mut one = dims.to_vec();
            one[0] = 1;
            one
        } else {
            return Ok(None);
        };
        if chunks.len() != dims.len() || chunks.iter().zip(dims).any(|(c, d)| c > d) {
            return Err(Error::usage(format!(
                "workload.dataset.hdf5.chunk_dims = {chunks:?} does not fit records datasets of shape {dims:?}: \
                 it needs one dimension per axis, none larger than the dataset's"
            )));
        }
        Ok(Some(chunks))
    }
}

impl FileFormat for Hdf5 {
    fn encode(
        &self,
        _key: &str,
        shape: &FileShape,
        rng: &mut SmallRng,
        out: &mut Encoded,
    ) -> Result<()> {
        out.clear();
        let dims = self.records_shape(shape)?;
        let chunks = self.chunks(&dims)?;
        if let Some(chunks) = &chunks {
            let bytes = chunks.iter().product::<u64>() * shape.element.size();
            if bytes > u32::MAX as u64 {
                return Err(Error::usage(format!(
                    "hdf5 chunks of {chunks:?} would hold {bytes} bytes; HDF5 chunks must be smaller than 4 GiB"
                )));
            }
        }
        let plan = write::FilePlan {
            records: self.records as usize,
            shape: &dims,
            element: shape.element,
            chunks: chunks.as_deref(),
            codec: self.codec,
        };
        write::write_file(&plan, rng, out)
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(Hdf5Reader {
            verify: self.verify,
            windows: Windows::default(),
            scratch: Scratch::default(),
            in_hand: Vec::new(),
        })
    }
}

/// A reader thread's memory: metadata windows and chunk buffers, reused from sample to sample,
/// and the parsed metadata of the files it holds open (as h5py keeps an open file's): the
/// superblock, the records datasets' addresses and descriptions; of its last
/// [`FILES_HELD`](crate::storage::FILES_HELD) files, for the epoch, as storage keeps them open.
struct Hdf5Reader {
    verify: bool,
    windows: Windows,
    scratch: Scratch,
    /// The most recently read last.
    in_hand: Vec<FileInHand>,
}

/// What a reader learnt from the metadata of the file it reads.
struct FileInHand {
    /// The storage it was read from (its address) and the key.
    storage: usize,
    key: String,
    layout: read::FileLayout,
    datasets: Vec<(dataset::Link, dataset::Dataset)>,
}

impl Hdf5Reader {
    /// Reads sample `sample` of every records dataset of the file at `key`, handing each one's
    /// bytes to `each`.
    fn read_records(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
        each: &mut dyn FnMut(&str, &[u8]),
    ) -> Result<SampleRead> {
        let mut io = Io::new(storage, key, buf, &mut self.windows, self.verify);
        // The storage's address tells one storage from another for as long as the reader lives.
        let storage_id = storage as *const dyn Storage as *const () as usize;
        let held = self
            .in_hand
            .iter()
            .position(|file| file.storage == storage_id && file.key == key);
        let in_hand = match held.map(|at| self.in_hand.remove(at)) {
            Some(file) => {
                io.resume(file.layout);
                file
            }
            None => {
                let root = read::superblock(&mut io)?;
                let links = dataset::records_links(&mut io, root)?;
                let mut datasets = Vec::with_capacity(links.len());
                for link in links {
                    let described = dataset::dataset(&mut io, &link.name, link.address)?;
                    datasets.push((link, described));
                }
                FileInHand {
                    storage: storage_id,
                    key: key.to_string(),
                    layout: io.layout(),
                    datasets,
                }
            }
        };
        let mut offset = None;
        for (link, described) in &in_hand.datasets {
            let at = sample::read_sample(
                &mut io,
                &link.name,
                link.address,
                described,
                sample,
                &mut self.scratch,
                each,
            )?;
            offset.get_or_insert(at);
        }
        let bytes = io.fetched;
        // Kept only after a good read: a file that failed is parsed anew next time.
        if self.in_hand.len() == crate::storage::FILES_HELD {
            self.in_hand.remove(0);
        }
        self.in_hand.push(in_hand);
        Ok(SampleRead {
            offset: offset.unwrap_or(0),
            bytes,
        })
    }
}

impl SampleReader for Hdf5Reader {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        // h5py hands the sample to DLIO, which drops it: so do we.
        self.read_records(storage, key, sample, buf, &mut |_, _| {})
    }

    /// `h5py.File` closed: the next open reads the superblock and the datasets' headers again.
    fn file_closed(&mut self, key: &str) {
        self.in_hand.retain(|file| file.key != key);
    }
}
