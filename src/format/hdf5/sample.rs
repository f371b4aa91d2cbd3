//! Reading one sample (one index of the first dimension) of a dataset, as h5py's
//! `dataset[sample]` does: one range of the sample's bytes from contiguous storage; the chunks
//! that hold it from chunked storage (found through the chunk index, inflated, LZF-decoded and
//! unshuffled as their filters say, then the sample's part of each copied out).

use flate2::{Decompress, FlushDecompress, Status};

use super::dataset::{ChunkIndex, Dataset, Filter, Layout, DEFLATE, LZF, SHUFFLE};
use super::lzf;
use super::read::{check_sum, small, Io, Parsed, Problem, Sizes};
use crate::error::Result;

/// A sample spread over more chunks than this is taken for a damaged chunk shape.
const MAX_CHUNKS_PER_SAMPLE: u64 = 1 << 20;
/// HDF5 chunks are smaller than 4 GiB.
const MAX_CHUNK_BYTES: u64 = u32::MAX as u64;
const MAX_NODES: usize = 100_000;

/// Per-reader memory for chunked reads, reused from sample to sample.
pub(super) struct Scratch {
    /// The sample, assembled from its chunks.
    sample: Vec<u8>,
    /// Filter outputs, in turn.
    first: Vec<u8>,
    second: Vec<u8>,
    inflate: Decompress,
    /// The chunks of the sample's row of the chunk grid (from a B-tree).
    row: Vec<Option<Chunk>>,
}

impl Default for Scratch {
    fn default() -> Scratch {
        Scratch {
            sample: Vec::new(),
            first: Vec::new(),
            second: Vec::new(),
            inflate: Decompress::new(true),
            row: Vec::new(),
        }
    }
}

/// Where a chunk is stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Chunk {
    address: u64,
    size: u64,
    /// Bit i set: filter i of the pipeline was not applied to this chunk.
    mask: u32,
}

/// Reads sample `sample` of dataset `name` (at `header`) and hands its bytes to `each`; returns
/// the file address where the sample's data starts (its first chunk when chunked; the object
/// header when the data is kept there).
pub(super) fn read_sample(
    io: &mut Io,
    name: &str,
    header: u64,
    dataset: &Dataset,
    sample: u64,
    scratch: &mut Scratch,
    each: &mut dyn FnMut(&str, &[u8]),
) -> Result<u64> {
    let namer = io.namer();
    let what = format!("dataset {name}");
    let fail = |p: Problem| namer.error(&what, p);
    let samples = dataset.dims[0];
    if sample >= samples {
        return Err(namer.corrupt(format!(
            "{what}: sample {sample} is out of range: the dataset holds {samples} samples"
        )));
    }
    let sample_bytes = dataset
        .sample_bytes()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| {
            fail(Problem::Corrupt(format!(
                "a sample of shape {:?} is too large",
                dataset.dims
            )))
        })?;
    let total = (sample_bytes as u64).checked_mul(samples);
    match &dataset.layout {
        Layout::Compact(data) => {
            let start = sample as usize * sample_bytes;
            let bytes = total
                .filter(|&t| t <= data.len() as u64)
                .map(|_| &data[start..start + sample_bytes])
                .ok_or_else(|| {
                    fail(Problem::Corrupt(format!(
                        "compact data of {} bytes is smaller than the dataset",
                        data.len()
                    )))
                })?;
            each(name, bytes);
            Ok(header)
        }
        Layout::Contiguous { address, size } => {
            if total.is_none_or(|t| t > *size) {
                return Err(fail(Problem::Corrupt(format!(
                    "contiguous storage of {size} bytes is smaller than the dataset"
                ))));
            }
            let Some(address) = address else {
                // Never written: h5py reads the fill value.
                scratch.sample.clear();
                scratch.sample.resize(sample_bytes, 0);
                each(name, &scratch.sample);
                return Ok(0);
            };
            let start = address
                .checked_add(sample * sample_bytes as u64)
                .ok_or_else(|| fail(Problem::Corrupt("an address overflows".into())))?;
            let bytes = io.data(start, sample_bytes, &what)?;
            each(name, bytes);
            Ok(start)
        }
        Layout::Chunked {
            dims,
            index,
            edge_unfiltered,
        } => {
            let chunked = Chunked {
                name,
                dataset,
                chunk: &dims[..dataset.dims.len()],
                index,
                edge_unfiltered: *edge_unfiltered,
                sample_bytes,
            };
            let offset = chunked.read(io, sample, scratch)?;
            each(name, &scratch.sample);
            Ok(offset)
        }
    }
}

struct Chunked<'d> {
    name: &'d str,
    dataset: &'d Dataset,
    chunk: &'d [u64],
    index: &'d ChunkIndex,
    edge_unfiltered: bool,
    sample_bytes: usize,
}

impl Chunked<'_> {
    /// Assembles the sample into `scratch.sample`; returns its first chunk's address.
    fn read(&self, io: &mut Io, sample: u64, scratch: &mut Scratch) -> Result<u64> {
        let namer = io.namer();
        let what = format!("dataset {}", self.name);
        let fail = |p: Problem| namer.error(&what, p);
        let dims = &self.dataset.dims;
        let element = self.dataset.element;
        let chunk_bytes = self
            .chunk
            .iter()
            .try_fold(element, |n, &c| n.checked_mul(c))
            .filter(|&n| n <= MAX_CHUNK_BYTES)
            .ok_or_else(|| {
                fail(Problem::Corrupt(format!(
                    "chunks of {:?} are too large",
                    self.chunk
                )))
            })?;
        let grid: Vec<u64> = dims
            .iter()
            .zip(self.chunk)
            .map(|(d, c)| d.div_ceil(*c))
            .collect();
        let per_row = grid[1..]
            .iter()
            .try_fold(1u64, |n, &g| n.checked_mul(g))
            .filter(|&n| n <= MAX_CHUNKS_PER_SAMPLE)
            .ok_or_else(|| {
                fail(Problem::Corrupt(format!(
                    "a sample spans too many chunks ({:?} of {:?})",
                    self.chunk, dims
                )))
            })?;
        let row = sample / self.chunk[0];
        scratch.sample.clear();
        scratch.sample.resize(self.sample_bytes, 0);

        let mut fixed_array = None;
        match self.index {
            ChunkIndex::BTree(root) => {
                scratch.row.clear();
                scratch.row.resize(per_row as usize, None);
                if let Some(root) = root {
                    self.btree_row(io, *root, row * self.chunk[0], &grid, &mut scratch.row)?;
                }
            }
            ChunkIndex::FixedArray(Some(address)) => {
                fixed_array = Some(FixedArray::open(io, *address, &what, chunk_bytes)?);
            }
            ChunkIndex::Single { .. } if grid.iter().any(|&g| g != 1) => {
                return Err(fail(Problem::Corrupt(format!(
                    "a single-chunk index, yet chunks of {:?} split a dataset of {:?}",
                    self.chunk, dims
                ))));
            }
            _ => {}
        }
        // Chunk-grid strides over the maximum dimensions: fixed arrays and implicit indexes
        // number chunks in row-major order of the grid the dataset could grow to.
        let mut strides = vec![1u64; dims.len()];
        if matches!(
            self.index,
            ChunkIndex::FixedArray(_) | ChunkIndex::Implicit(_)
        ) {
            for k in (0..dims.len() - 1).rev() {
                let max = self.dataset.max_dims[k + 1].ok_or_else(|| {
                    fail(Problem::Corrupt(
                        "an unlimited dimension with a fixed-size chunk index".into(),
                    ))
                })?;
                strides[k] = strides[k + 1]
                    .checked_mul(max.div_ceil(self.chunk[k + 1]))
                    .ok_or_else(|| fail(Problem::Corrupt("the chunk grid overflows".into())))?;
            }
        }

        let mut first_address = None;
        let mut coords = vec![0u64; dims.len()];
        coords[0] = row;
        for j in 0..per_row {
            // Row-major coordinates of the j-th chunk of the row.
            let mut rest = j;
            for k in (1..dims.len()).rev() {
                coords[k] = rest % grid[k];
                rest /= grid[k];
            }
            let located = match self.index {
                ChunkIndex::BTree(_) => scratch.row[j as usize],
                ChunkIndex::Single { address, filtered } => address.map(|address| {
                    let (size, mask) = filtered.unwrap_or((chunk_bytes, 0));
                    Chunk {
                        address,
                        size,
                        mask,
                    }
                }),
                ChunkIndex::Implicit(address) => {
                    let linear = linear(&coords, &strides)
                        .and_then(|n| n.checked_mul(chunk_bytes))
                        .ok_or_else(|| {
                            fail(Problem::Corrupt("a chunk address overflows".into()))
                        })?;
                    address
                        .and_then(|a| a.checked_add(linear))
                        .map(|address| Chunk {
                            address,
                            size: chunk_bytes,
                            mask: 0,
                        })
                }
                ChunkIndex::FixedArray(_) => match &mut fixed_array {
                    Some(array) => {
                        let linear = linear(&coords, &strides).ok_or_else(|| {
                            fail(Problem::Corrupt("a chunk index overflows".into()))
                        })?;
                        array.get(io, linear, &what)?
                    }
                    None => None,
                },
            };
            // A chunk never written reads as the fill value (zeros here).
            let Some(chunk) = located else { continue };
            first_address.get_or_insert(chunk.address);
            let size = small_chunk(chunk.size).map_err(fail)?;
            let raw = io.data(chunk.address, size, &what)?;
            let partial = coords
                .iter()
                .zip(self.chunk)
                .zip(dims)
                .any(|((&g, &c), &d)| (g + 1) * c > d);
            let filters: &[Filter] = if self.edge_unfiltered && partial {
                &[]
            } else {
                &self.dataset.filters
            };
            let in_first = unfilter(raw, filters, chunk.mask, element, chunk_bytes, scratch)
                .map_err(|p| namer.error(format!("{what}: chunk at {}", chunk.address), p))?;
            let bytes = if in_first { &scratch.first[..] } else { raw };
            if bytes.len() as u64 != chunk_bytes {
                return Err(namer.corrupt(format!(
                    "{what}: the chunk at {} holds {} bytes, not {chunk_bytes}",
                    chunk.address,
                    bytes.len()
                )));
            }
            copy_slab(
                bytes,
                &mut scratch.sample,
                dims,
                self.chunk,
                &coords,
                sample,
                element,
            );
        }
        Ok(first_address.unwrap_or(0))
    }

    /// Fills `out` (one slot per chunk of the row) from the leaves of a version-1 B-tree whose
    /// chunks start at `row_start` on the first axis.
    fn btree_row(
        &self,
        io: &mut Io,
        root: u64,
        row_start: u64,
        grid: &[u64],
        out: &mut [Option<Chunk>],
    ) -> Result<()> {
        let namer = io.namer();
        let sizes = io.sizes;
        let rank = self.dataset.dims.len();
        let o = sizes.offset as usize;
        let key_len = 8 + 8 * (rank + 1);
        let mut walk = RowWalk {
            row_start,
            grid,
            out,
            nodes: vec![(root, None)],
        };
        let mut visited = 0;
        while let Some((node, expected)) = walk.nodes.pop() {
            visited += 1;
            let what = format!("dataset {}: chunk B-tree node at {node}", self.name);
            if visited > MAX_NODES {
                return Err(namer.corrupt(format!("{what}: the tree has too many nodes")));
            }
            let head_len = 8 + 2 * o;
            let head = io.meta(node, head_len, &what)?;
            let (kind, level) = (head[4], head[5]);
            let entries = u16::from_le_bytes([head[6], head[7]]) as usize;
            if &head[..4] != b"TREE" || kind != 1 || expected.is_some_and(|e| e != level) {
                return Err(
                    namer.corrupt(format!("{what}: not a chunk node of the expected level"))
                );
            }
            let body = io.meta(node, head_len + entries * (key_len + o) + key_len, &what)?;
            self.btree_node(sizes, &body[head_len..], entries, level, &mut walk)
                .map_err(|p| namer.error(&what, p))?;
        }
        Ok(())
    }

    /// Takes one node's chunks of the row (a leaf), or queues the children that may hold some.
    fn btree_node(
        &self,
        sizes: Sizes,
        body: &[u8],
        entries: usize,
        level: u8,
        walk: &mut RowWalk,
    ) -> Parsed<()> {
        let rank = self.dataset.dims.len();
        let mut c = sizes.cursor(body);
        // Keys and children alternate: key 0, child 0, key 1, ..., child n-1, key n.
        let mut keys = Vec::with_capacity(entries + 1);
        let mut children = Vec::with_capacity(entries);
        for i in 0..=entries {
            let size = c.u32()?;
            let mask = c.u32()?;
            let offsets = (0..=rank).map(|_| c.uint(8)).collect::<Parsed<Vec<_>>>()?;
            keys.push((size, mask, offsets));
            if i < entries {
                children.push(c.defined("a chunk B-tree child")?);
            }
        }
        if level > 0 {
            for (i, &child) in children.iter().enumerate() {
                // Child i holds the chunks from key i to key i+1; the last child's right key
                // is not relied on.
                let starts_before = keys[i].2[0] <= walk.row_start;
                let ends_after = i + 1 == entries || keys[i + 1].2[0] >= walk.row_start;
                if starts_before && ends_after {
                    walk.nodes.push((child, Some(level - 1)));
                }
            }
            return Ok(());
        }
        for ((size, mask, offsets), &address) in keys.iter().zip(&children) {
            if offsets[0] != walk.row_start {
                continue;
            }
            let mut slot = 0u64;
            for k in 1..rank {
                let (offset, c) = (offsets[k], self.chunk[k]);
                if offset % c != 0 || offset / c >= walk.grid[k] {
                    return Err(Problem::Corrupt(format!(
                        "a chunk at offsets {offsets:?} is not on the chunk grid"
                    )));
                }
                slot = slot * walk.grid[k] + offset / c;
            }
            walk.out[slot as usize] = Some(Chunk {
                address,
                size: u64::from(*size),
                mask: *mask,
            });
        }
        Ok(())
    }
}

/// A walk of a chunk B-tree for the chunks of one row of the chunk grid.
struct RowWalk<'w> {
    row_start: u64,
    grid: &'w [u64],
    /// One slot per chunk of the row.
    out: &'w mut [Option<Chunk>],
    /// Nodes still to visit, with the level each must have (`None`: the root, any).
    nodes: Vec<(u64, Option<u8>)>,
}

/// A chunk's position in a row-major numbering with `strides`.
fn linear(coords: &[u64], strides: &[u64]) -> Option<u64> {
    coords
        .iter()
        .zip(strides)
        .try_fold(0u64, |n, (&c, &s)| n.checked_add(c.checked_mul(s)?))
}

fn small_chunk(size: u64) -> Parsed<usize> {
    usize::try_from(size)
        .ok()
        .filter(|&s| s as u64 <= MAX_CHUNK_BYTES)
        .map_or_else(
            || Err(Problem::Corrupt(format!("a chunk of {size} bytes"))),
            Ok,
        )
}

/// A fixed array chunk index (header read; data block or pages read on demand).
struct FixedArray {
    elements: u64,
    entry_size: usize,
    /// Bytes of a filtered chunk's size in an element; 0 when chunks are not filtered.
    size_len: usize,
    page_elements: u64,
    pages: u64,
    block: u64,
    /// Bytes of the data block before its elements (or its first page).
    prefix: usize,
    unfiltered_size: u64,
    /// The data block or page whose checksum was checked (once per sample).
    verified: Option<u64>,
}

impl FixedArray {
    fn open(io: &mut Io, address: u64, what: &str, chunk_bytes: u64) -> Result<FixedArray> {
        let namer = io.namer();
        let sizes = io.sizes;
        let (o, l) = (sizes.offset as usize, sizes.length as usize);
        let context = format!("{what}: fixed array header at {address}");
        let bytes = io.checked(address, 8 + l + o + 4, &context)?;
        let parsed = (|| -> Parsed<FixedArray> {
            let mut c = sizes.cursor(bytes);
            if c.take(4)? != b"FAHD" {
                return Err(Problem::Corrupt("no FAHD signature".into()));
            }
            let version = c.u8()?;
            if version != 0 {
                return super::read::unsupported(format!("fixed array version {version}"));
            }
            let client = c.u8()?;
            let entry_size = c.u8()? as usize;
            let page_bits = c.u8()?;
            let elements = c.length()?;
            let block = c.defined("the data block")?;
            let size_len = match client {
                0 if entry_size == o => 0,
                1 if entry_size > o + 4 && entry_size <= o + 4 + 8 => entry_size - o - 4,
                _ => {
                    return Err(Problem::Corrupt(format!(
                        "client {client} with {entry_size}-byte elements"
                    )))
                }
            };
            if page_bits == 0 || page_bits > 32 {
                return Err(Problem::Corrupt(format!("{page_bits} page bits")));
            }
            let page_elements = 1u64 << page_bits;
            let pages = if elements > page_elements {
                elements.div_ceil(page_elements)
            } else {
                0
            };
            let bitmap = small(pages.div_ceil(8), "the page bitmap")?;
            Ok(FixedArray {
                elements,
                entry_size,
                size_len,
                page_elements,
                pages,
                block,
                prefix: 6 + o + bitmap,
                unfiltered_size: chunk_bytes,
                verified: None,
            })
        })();
        parsed.map_err(|p| namer.error(&context, p))
    }

    /// Where element `i` says its chunk is; `None` for a chunk never written.
    fn get(&mut self, io: &mut Io, i: u64, what: &str) -> Result<Option<Chunk>> {
        let namer = io.namer();
        let sizes = io.sizes;
        // Formatted only when an error needs it: this runs once per chunk.
        let context = DataBlock {
            what,
            block: self.block,
        };
        if i >= self.elements {
            return Err(namer.corrupt(format!(
                "{context}: chunk {i} is beyond its {} elements",
                self.elements
            )));
        }
        let fail = |p: Problem| namer.error(&context, p);
        let too_large = || fail(Problem::Corrupt("the data block is too large".into()));
        // The block (unpaged), or the page holding element i, and the element's place in it.
        let (address, len, at) = if self.pages == 0 {
            let len = small(self.elements, "the element count")
                .map_err(fail)?
                .checked_mul(self.entry_size)
                .and_then(|n| n.checked_add(self.prefix + 4))
                .ok_or_else(too_large)?;
            (self.block, len, self.prefix + i as usize * self.entry_size)
        } else {
            let page = i / self.page_elements;
            let verify = io.verify;
            let head = io.meta(self.block, self.prefix + 4, &context)?;
            if &head[..4] != b"FADB" {
                return Err(namer.corrupt(format!("{context}: no FADB signature")));
            }
            if self.verified.is_none() && verify {
                check_sum(head).map_err(|why| namer.corrupt(format!("{context}: {why}")))?;
            }
            let bit = head[6 + sizes.offset as usize + (page / 8) as usize] & (0x80 >> (page % 8));
            if bit == 0 {
                return Ok(None);
            }
            let full = self.page_elements as usize * self.entry_size + 4;
            let in_page = (self.elements - page * self.page_elements).min(self.page_elements);
            let address = (page as usize)
                .checked_mul(full)
                .and_then(|n| n.checked_add(self.prefix + 4))
                .and_then(|n| self.block.checked_add(n as u64))
                .ok_or_else(too_large)?;
            let at = (i % self.page_elements) as usize * self.entry_size;
            (address, in_page as usize * self.entry_size + 4, at)
        };
        let bytes = if self.verified == Some(address) {
            io.meta(address, len, &context)?
        } else {
            let bytes = io.checked(address, len, &context)?;
            self.verified = Some(address);
            bytes
        };
        if self.pages == 0 && (&bytes[..4] != b"FADB" || bytes[5] != (self.size_len > 0) as u8) {
            return Err(namer.corrupt(format!(
                "{context}: not a fixed array data block of this array"
            )));
        }
        let mut c = sizes.cursor(&bytes[at..at + self.entry_size]);
        let parsed = (|| -> Parsed<Option<Chunk>> {
            let Some(address) = c.address()? else {
                return Ok(None);
            };
            let (size, mask) = if self.size_len > 0 {
                (c.uint(self.size_len)?, c.u32()?)
            } else {
                (self.unfiltered_size, 0)
            };
            Ok(Some(Chunk {
                address,
                size,
                mask,
            }))
        })();
        parsed.map_err(fail)
    }
}

/// Names a fixed array's data block in errors.
struct DataBlock<'a> {
    what: &'a str,
    block: u64,
}

impl std::fmt::Display for DataBlock<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: fixed array data block at {}", self.what, self.block)
    }
}

/// Undoes the filters of a chunk (those its mask does not skip), last first. Returns whether the
/// result is in `scratch.first` (false: no filter applied, the raw bytes are the chunk).
fn unfilter(
    raw: &[u8],
    filters: &[Filter],
    mask: u32,
    element: u64,
    chunk_bytes: u64,
    scratch: &mut Scratch,
) -> Parsed<bool> {
    let mut current = std::mem::take(&mut scratch.first);
    let mut next = std::mem::take(&mut scratch.second);
    let mut from_raw = true;
    let mut result = Ok(());
    for (i, filter) in filters.iter().enumerate().rev() {
        if i < 32 && mask & (1 << i) != 0 {
            continue;
        }
        let input = if from_raw { raw } else { &current[..] };
        result = match filter.id {
            DEFLATE => inflate(&mut scratch.inflate, input, chunk_bytes as usize, &mut next),
            LZF => {
                lzf::decompress(input, chunk_bytes as usize, &mut next).map_err(Problem::Corrupt)
            }
            SHUFFLE => {
                let size = filter.params.first().map_or(element, |&s| u64::from(s));
                unshuffle(input, size as usize, &mut next);
                Ok(())
            }
            other => Err(Problem::Unsupported(format!("filter {other}"))),
        };
        if result.is_err() {
            break;
        }
        std::mem::swap(&mut current, &mut next);
        from_raw = false;
    }
    scratch.first = current;
    scratch.second = next;
    result.map(|()| !from_raw)
}

fn inflate(
    decompress: &mut Decompress,
    input: &[u8],
    expected: usize,
    out: &mut Vec<u8>,
) -> Parsed<()> {
    decompress.reset(true);
    // One byte more than expected, to see a stream that holds more.
    out.resize(expected + 1, 0);
    let status = decompress
        .decompress(input, out, FlushDecompress::Finish)
        .map_err(|e| Problem::Corrupt(format!("cannot inflate: {e}")))?;
    let produced = decompress.total_out() as usize;
    out.truncate(produced.min(expected));
    match status {
        Status::StreamEnd if produced == expected => Ok(()),
        Status::StreamEnd => Err(Problem::Corrupt(format!(
            "inflates to {produced} bytes, not {expected}"
        ))),
        _ if produced > expected => Err(Problem::Corrupt(format!(
            "inflates to more than {expected} bytes"
        ))),
        _ => Err(Problem::Corrupt(format!(
            "the compressed stream ends early ({produced} of {expected} bytes)"
        ))),
    }
}

/// Undoes HDF5's shuffle: byte j of every element was stored together, then byte j+1; bytes
/// past the last whole element are kept as they are.
fn unshuffle(input: &[u8], size: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(input);
    let n = input.len() / size.max(1);
    if size <= 1 || n <= 1 {
        return;
    }
    for (byte, plane) in input.chunks_exact(n).take(size).enumerate() {
        for (i, &b) in plane.iter().enumerate() {
            out[i * size + byte] = b;
        }
    }
}

/// Copies the part of `chunk` (at grid `coords`) that belongs to sample `sample` into `out`.
fn copy_slab(
    chunk: &[u8],
    out: &mut [u8],
    dims: &[u64],
    chunk_dims: &[u64],
    coords: &[u64],
    sample: u64,
    element: u64,
) {
    let e = element as usize;
    let within = (sample - coords[0] * chunk_dims[0]) as usize;
    let rest = dims.len() - 1;
    let chunk_row: usize = chunk_dims[1..].iter().product::<u64>() as usize;
    if rest == 0 {
        out[..e].copy_from_slice(&chunk[within * e..within * e + e]);
        return;
    }
    // Origin and extent of this chunk within the sample, per axis after the first.
    let origin: Vec<usize> = (1..dims.len())
        .map(|k| (coords[k] * chunk_dims[k]) as usize)
        .collect();
    let extent: Vec<usize> = (1..dims.len())
        .map(|k| (chunk_dims[k].min(dims[k] - coords[k] * chunk_dims[k])) as usize)
        .collect();
    let chunk_stride = strides(&chunk_dims[1..]);
    let sample_stride = strides(&dims[1..]);
    let run = extent[rest - 1] * e;
    let mut index = vec![0usize; rest];
    loop {
        let mut from = within * chunk_row;
        let mut to = 0;
        for k in 0..rest {
            from += index[k] * chunk_stride[k];
            to += (origin[k] + index[k]) * sample_stride[k];
        }
        out[to * e..to * e + run].copy_from_slice(&chunk[from * e..from * e + run]);
        // Next run: count over every axis but the last (the run covers it).
        let mut k = rest - 1;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            index[k] += 1;
            if index[k] < extent[k] {
                break;
            }
            index[k] = 0;
        }
    }
}

/// Row-major element strides of `dims`.
fn strides(dims: &[u64]) -> Vec<usize> {
    let mut strides = vec![1usize; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * dims[k + 1] as usize;
    }
    strides
}
