//! Writes a whole file in the layout h5py gives it with `libver='latest'` (what DLIO's generator
//! asks for): superblock v3, version-2 object headers, a root group holding its links as link
//! messages, contiguous storage (layout message v3) or chunks indexed by a fixed array (layout
//! message v4, the version HDF5 1.10 to 1.14 write and 2.0 still reads).
//!
//! All metadata comes first, then `labels` (zeros), then the records datasets' data. Every
//! metadata field has a fixed width, so the metadata's size is known before the data is written.
//! Uncompressed, every address is known too: the metadata is written first and the data streams
//! after it. Compressed, the data is appended after a reserved prefix, and the metadata, which
//! needs the compressed chunks' sizes, is written into the prefix last.

use flate2::{Compress, Compression, FlushCompress, Status};
use rand::rngs::SmallRng;

use super::checksum::lookup3;
use super::lzf;
use super::SIGNATURE;
use crate::config::ElementType;
use crate::error::{Error, Result};
use crate::format::random::BulkRandom;
use crate::format::Encoded;

/// All bits set: HDF5's "undefined address".
const UNDEFINED: u64 = u64::MAX;
/// log2 of the fixed array's elements per data block page (the library's default).
const PAGE_BITS: u8 = 10;
const FIXED_ARRAY_HEADER_LEN: u64 = 28;
/// Signature, version, client id and header address at the start of a fixed array data block.
const DATA_BLOCK_PREFIX: u64 = 14;

const LINK_INFO: u8 = 0x02;
const DATASPACE: u8 = 0x01;
const DATATYPE: u8 = 0x03;
const FILL_VALUE: u8 = 0x05;
const LINK: u8 = 0x06;
const LAYOUT: u8 = 0x08;
const GROUP_INFO: u8 = 0x0a;
const FILTER_PIPELINE: u8 = 0x0b;
const REFERENCE_COUNT: u8 = 0x16;
/// Message flag: the message never changes (h5py sets it on datatypes, fill values and filters).
const CONSTANT: u8 = 0x01;

/// What one file holds.
pub(super) struct FilePlan<'a> {
    /// Number of records datasets (`records_0` ..).
    pub records: usize,
    /// Shape of each records dataset, samples first.
    pub shape: &'a [u64],
    pub element: ElementType,
    /// Chunk shape, when chunked.
    pub chunks: Option<&'a [u64]>,
    /// The chunks' filter, when compressed (chunked then).
    pub codec: Option<Codec>,
}

/// A chunk filter h5py applies for DLIO's `dataset.compression`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// `gzip`: HDF5's deflate filter (id 1) at this level.
    Deflate(u32),
    /// `lzf`: h5py's LZF filter (id 32000), registered optional: a chunk it cannot shrink is
    /// stored as it is, its filter mask saying so.
    Lzf,
}

/// A [`Codec`]'s state, reused from chunk to chunk.
enum Compressor {
    Deflate(Compress),
    /// The LZF match finder's hash table.
    Lzf(Vec<u32>),
}

/// h5py's LZF filter id.
const LZF_FILTER: u16 = 32000;
/// The client data h5py's LZF filter records: its own version and liblzf's (then the chunk size).
const LZF_VERSIONS: [u32; 2] = [4, 0x105];

/// The geometry of a chunked records dataset.
struct Chunking<'a> {
    dims: &'a [u64],
    chunk_bytes: u64,
    chunks: u64,
    /// Bytes of one fixed array element: the chunk address, and with filters the chunk's size
    /// and filter mask.
    entry_size: u64,
    /// Bytes of a filtered chunk's size in an element (0 without filters).
    size_len: u64,
}

impl Chunking<'_> {
    fn data_block_len(&self) -> u64 {
        let elements = self.chunks * self.entry_size;
        match pages(self.chunks) {
            0 => DATA_BLOCK_PREFIX + elements + 4,
            pages => DATA_BLOCK_PREFIX + pages.div_ceil(8) + 4 + elements + 4 * pages,
        }
    }
}

/// Pages of a fixed array data block of `n` elements; 0 when it is not paged.
fn pages(n: u64) -> u64 {
    let page = 1u64 << PAGE_BITS;
    if n > page {
        n.div_ceil(page)
    } else {
        0
    }
}

/// Bytes the library uses for a filtered chunk's size in a fixed array element (layout message
/// v4): one more than the unfiltered size needs, in case a filter makes a chunk larger.
fn chunk_size_len(chunk_bytes: u64) -> u64 {
    (1 + (chunk_bytes.max(1).ilog2() as u64 + 8) / 8).min(8)
}

/// Where every object of the file lives.
#[derive(Default)]
struct Addresses {
    root: u64,
    records: Vec<u64>,
    labels: u64,
    fixed_array_headers: Vec<u64>,
    data_blocks: Vec<u64>,
    labels_data: u64,
    records_data: Vec<u64>,
    /// Per records dataset, per chunk: address, stored size and filter mask.
    chunks: Vec<Vec<(u64, u64, u32)>>,
    eof: u64,
}

/// Appends the file to `out` (empty).
pub(super) fn write_file(plan: &FilePlan, rng: &mut SmallRng, out: &mut Encoded) -> Result<()> {
    let element = plan.element.size();
    let samples = plan.shape[0];
    let data_bytes = plan.shape.iter().product::<u64>() * element;
    let chunking = plan.chunks.map(|dims| {
        let chunk_bytes = dims.iter().product::<u64>() * element;
        let chunks = plan
            .shape
            .iter()
            .zip(dims)
            .map(|(d, c)| d.div_ceil(*c))
            .product();
        let size_len = if plan.codec.is_some() {
            chunk_size_len(chunk_bytes)
        } else {
            0
        };
        let entry_size = 8 + if size_len > 0 { size_len + 4 } else { 0 };
        Chunking {
            dims,
            chunk_bytes,
            chunks,
            entry_size,
            size_len,
        }
    });
    let names: Vec<String> = (0..plan.records)
        .map(|i| format!("records_{i}"))
        .chain(["labels".to_string()])
        .collect();

    // Sizes first, from the metadata built with placeholder addresses (every field has a fixed
    // width, so the real ones take the same room).
    let mut at = Addresses {
        records: vec![0; plan.records],
        fixed_array_headers: vec![0; plan.records],
        data_blocks: vec![0; plan.records],
        records_data: vec![0; plan.records],
        chunks: vec![Vec::new(); plan.records],
        ..Addresses::default()
    };
    let mut offset = 48;
    at.root = offset;
    offset += root_header(&names, &at).len() as u64;
    for i in 0..plan.records {
        at.records[i] = offset;
        offset += records_header(plan, chunking.as_ref(), &at, i).len() as u64;
    }
    at.labels = offset;
    offset += labels_header(samples, &at).len() as u64;
    if let Some(chunking) = &chunking {
        for i in 0..plan.records {
            at.fixed_array_headers[i] = offset;
            at.data_blocks[i] = offset + FIXED_ARRAY_HEADER_LEN;
            offset += FIXED_ARRAY_HEADER_LEN + chunking.data_block_len();
        }
    }
    let metadata_len = offset as usize;
    at.labels_data = offset;
    let data_start = offset + 8 * samples;

    match (&chunking, plan.codec) {
        (Some(chunking), Some(codec)) => {
            // Compressed sizes are known only once compressed: the file is built in memory
            // behind a reserved prefix, and the metadata written into the prefix last.
            out.data.resize(data_start as usize, 0);
            let mut compressor = match codec {
                Codec::Deflate(level) => {
                    Compressor::Deflate(Compress::new(Compression::new(level), true))
                }
                Codec::Lzf => Compressor::Lzf(Vec::new()),
            };
            let mut chunk = vec![0; chunking.chunk_bytes as usize];
            for i in 0..plan.records {
                at.records_data[i] = out.position();
                // Drawn as `Encoded::random` draws a dataset, so that a seed gives the same
                // samples compressed or not (where chunks are whole steps of the generator).
                let mut random = BulkRandom::seeded(rng);
                for _ in 0..chunking.chunks {
                    random.fill(&mut chunk);
                    let address = out.position();
                    let mask = match &mut compressor {
                        Compressor::Deflate(compress) => {
                            deflate(compress, &chunk, &mut out.data).map_err(Error::run)?;
                            0
                        }
                        Compressor::Lzf(table) => {
                            if lzf::compress(&chunk, &mut out.data, chunk.len(), table) {
                                0
                            } else {
                                out.data.extend_from_slice(&chunk);
                                1
                            }
                        }
                    };
                    at.chunks[i].push((address, out.position() - address, mask));
                }
            }
            at.eof = out.position();
            let metadata = metadata(plan, Some(chunking), &names, &at, metadata_len)?;
            out.data[..metadata_len].copy_from_slice(&metadata);
        }
        _ => {
            // Every size is known up front: the metadata is written first and the data streams
            // after it.
            let records_len = match &chunking {
                Some(chunking) => chunking.chunks * chunking.chunk_bytes,
                None => data_bytes,
            };
            for i in 0..plan.records {
                let start = data_start + i as u64 * records_len;
                at.records_data[i] = start;
                if let Some(chunking) = &chunking {
                    at.chunks[i] = (0..chunking.chunks)
                        .map(|c| (start + c * chunking.chunk_bytes, chunking.chunk_bytes, 0))
                        .collect();
                }
            }
            at.eof = data_start + plan.records as u64 * records_len;
            let metadata = metadata(plan, chunking.as_ref(), &names, &at, metadata_len)?;
            out.data.extend_from_slice(&metadata);
            out.data.resize(out.data.len() + 8 * samples as usize, 0);
            for _ in 0..plan.records {
                out.random(records_len, rng)?;
            }
        }
    }
    Ok(())
}

/// The metadata of the file, which must take exactly the `len` bytes reserved for it.
fn metadata(
    plan: &FilePlan,
    chunking: Option<&Chunking>,
    names: &[String],
    at: &Addresses,
    len: usize,
) -> Result<Vec<u8>> {
    let samples = plan.shape[0];
    let mut metadata = Vec::with_capacity(len);
    superblock(&mut metadata, at);
    metadata.extend(root_header(names, at));
    for i in 0..plan.records {
        metadata.extend(records_header(plan, chunking, at, i));
    }
    metadata.extend(labels_header(samples, at));
    if let Some(chunking) = chunking {
        for i in 0..plan.records {
            fixed_array(&mut metadata, chunking, at, i);
        }
    }
    if metadata.len() != len {
        return Err(Error::run(format!(
            "internal error: the hdf5 metadata took {} bytes, {len} were reserved",
            metadata.len()
        )));
    }
    Ok(metadata)
}

/// Compresses `input` as one zlib stream (HDF5's deflate filter) onto `out`.
fn deflate(compress: &mut Compress, input: &[u8], out: &mut Vec<u8>) -> Result<(), String> {
    compress.reset();
    loop {
        let consumed = compress.total_in() as usize;
        // Incompressible data grows by a few bytes per 16 KiB block.
        out.reserve(input.len() - consumed + input.len() / 64 + 64);
        match compress.compress_vec(&input[consumed..], out, FlushCompress::Finish) {
            Ok(Status::StreamEnd) => return Ok(()),
            Ok(_) => {}
            Err(e) => return Err(format!("cannot compress a chunk: {e}")),
        }
    }
}

fn superblock(out: &mut Vec<u8>, at: &Addresses) {
    let start = out.len();
    out.extend_from_slice(SIGNATURE);
    // Version 3, 8-byte addresses and lengths, no consistency flags.
    out.extend_from_slice(&[3, 8, 8, 0]);
    out.extend_from_slice(&0u64.to_le_bytes()); // base address
    out.extend_from_slice(&UNDEFINED.to_le_bytes()); // no superblock extension
    out.extend_from_slice(&at.eof.to_le_bytes());
    out.extend_from_slice(&at.root.to_le_bytes());
    let sum = lookup3(&out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// A version-2 object header holding `messages` (type, flags, body), with its checksum.
fn object_header(messages: &[(u8, u8, Vec<u8>)]) -> Vec<u8> {
    let size: usize = messages.iter().map(|(_, _, body)| 4 + body.len()).sum();
    let (flags, width) = match size {
        0..=0xff => (0u8, 1),
        0x100..=0xffff => (1, 2),
        _ => (2, 4),
    };
    let mut out = Vec::with_capacity(6 + width + size + 4);
    out.extend_from_slice(b"OHDR");
    out.extend_from_slice(&[2, flags]);
    out.extend_from_slice(&(size as u64).to_le_bytes()[..width]);
    for (kind, flags, body) in messages {
        out.push(*kind);
        out.extend_from_slice(&(body.len() as u16).to_le_bytes());
        out.push(*flags);
        out.extend_from_slice(body);
    }
    let sum = lookup3(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

fn root_header(names: &[String], at: &Addresses) -> Vec<u8> {
    let mut link_info = vec![0, 0];
    link_info.extend_from_slice(&UNDEFINED.to_le_bytes()); // no fractal heap: links are messages
    link_info.extend_from_slice(&UNDEFINED.to_le_bytes()); // no name index
                                                           // Beyond 8 links the library would move them to dense storage; saying that this group keeps
                                                           // them compact up to their number makes the file consistent with its own settings.
                                                           // One records dataset is also linked as `records`, the name DLIO 2.0 (its PyPI release) reads;
                                                           // DLIO's later releases read `records_0`. Two names of one object: no byte is stored twice.
    let alias = (at.records.len() == 1).then(|| ("records".to_string(), at.records[0]));
    let links = names.len() + usize::from(alias.is_some());
    let group_info = if links > 8 {
        let most = links.min(u16::MAX as usize) as u16;
        let mut body = vec![0, 1];
        body.extend_from_slice(&most.to_le_bytes());
        body.extend_from_slice(&6u16.to_le_bytes());
        body
    } else {
        vec![0, 0]
    };
    let mut messages = vec![(LINK_INFO, 0, link_info), (GROUP_INFO, 0, group_info)];
    let targets = at.records.iter().copied().chain([at.labels]);
    for (name, address) in names.iter().cloned().zip(targets).chain(alias) {
        // Version 1, a hard link, a one-byte name length.
        let mut body = vec![1, 0, name.len() as u8];
        body.extend_from_slice(name.as_bytes());
        body.extend_from_slice(&address.to_le_bytes());
        messages.push((LINK, 0, body));
    }
    object_header(&messages)
}

/// Dataspace message v2: a simple dataspace whose maximum dimensions are its dimensions.
fn dataspace(dims: &[u64]) -> Vec<u8> {
    let mut body = vec![2, dims.len() as u8, 1, 1];
    for _ in 0..2 {
        for d in dims {
            body.extend_from_slice(&d.to_le_bytes());
        }
    }
    body
}

/// Datatype message v1 of a little-endian number.
fn datatype(element: ElementType) -> Vec<u8> {
    let size = element.size();
    let precision = (8 * size) as u16;
    // (sign bit, exponent location and size, mantissa size, exponent bias) of IEEE floats.
    let float = match element {
        ElementType::Float16 => Some((15u8, 10u8, 5u8, 10u8, 15u32)),
        ElementType::Float32 => Some((31, 23, 8, 23, 127)),
        ElementType::Float64 => Some((63, 52, 11, 52, 1023)),
        _ => None,
    };
    let mut body = Vec::with_capacity(20);
    match float {
        Some((sign, exponent_at, exponent_bits, mantissa_bits, bias)) => {
            // Class 1, version 1; bit field: little-endian, implied mantissa bit, sign position.
            body.extend_from_slice(&[0x11, 0x20, sign, 0]);
            body.extend_from_slice(&(size as u32).to_le_bytes());
            body.extend_from_slice(&0u16.to_le_bytes());
            body.extend_from_slice(&precision.to_le_bytes());
            body.extend_from_slice(&[exponent_at, exponent_bits, 0, mantissa_bits]);
            body.extend_from_slice(&bias.to_le_bytes());
        }
        None => {
            let signed = matches!(
                element,
                ElementType::Int8 | ElementType::Int16 | ElementType::Int32 | ElementType::Int64
            );
            body.extend_from_slice(&[0x10, if signed { 0x08 } else { 0 }, 0, 0]);
            body.extend_from_slice(&(size as u32).to_le_bytes());
            body.extend_from_slice(&0u16.to_le_bytes());
            body.extend_from_slice(&precision.to_le_bytes());
        }
    }
    body
}

fn records_header(
    plan: &FilePlan,
    chunking: Option<&Chunking>,
    at: &Addresses,
    i: usize,
) -> Vec<u8> {
    let element = plan.element.size();
    let mut messages = vec![
        (DATASPACE, 0, dataspace(plan.shape)),
        (DATATYPE, CONSTANT, datatype(plan.element)),
    ];
    if plan.records == 1 {
        // Linked twice (`records_0` and `records`): its reference count says so, version 0.
        let mut count = vec![0];
        count.extend_from_slice(&2u32.to_le_bytes());
        messages.push((REFERENCE_COUNT, 0, count));
    }
    let layout = match chunking {
        None => {
            // Fill value v3: allocated late, filled if set (h5py's defaults for contiguous data).
            messages.push((FILL_VALUE, CONSTANT, vec![3, 0x0a]));
            let mut body = vec![3, 1];
            body.extend_from_slice(&at.records_data[i].to_le_bytes());
            let size = plan.shape.iter().product::<u64>() * element;
            body.extend_from_slice(&size.to_le_bytes());
            body
        }
        Some(chunking) => {
            // Chunked storage is allocated incrementally.
            messages.push((FILL_VALUE, CONSTANT, vec![3, 0x0b]));
            match plan.codec {
                Some(Codec::Deflate(level)) => {
                    // Pipeline v2: deflate (id 1), optional, one parameter: the level.
                    let mut body = vec![2, 1, 1, 0, 1, 0, 1, 0];
                    body.extend_from_slice(&level.to_le_bytes());
                    messages.push((FILTER_PIPELINE, CONSTANT, body));
                }
                Some(Codec::Lzf) => {
                    // Pipeline v2: LZF (id 32000, so named: "lzf" and its NUL), optional, three
                    // parameters: the filter's and liblzf's versions and the chunk's bytes.
                    let mut body = vec![2, 1];
                    body.extend_from_slice(&LZF_FILTER.to_le_bytes());
                    body.extend_from_slice(&4u16.to_le_bytes());
                    body.extend_from_slice(&1u16.to_le_bytes());
                    body.extend_from_slice(&3u16.to_le_bytes());
                    body.extend_from_slice(b"lzf\0");
                    for value in LZF_VERSIONS
                        .into_iter()
                        .chain([chunking.chunk_bytes as u32])
                    {
                        body.extend_from_slice(&value.to_le_bytes());
                    }
                    messages.push((FILTER_PIPELINE, CONSTANT, body));
                }
                None => {}
            }
            let widest = chunking
                .dims
                .iter()
                .copied()
                .max()
                .unwrap_or(1)
                .max(element);
            let width = (widest.ilog2() as usize + 8) / 8;
            let mut body = vec![4, 2, 0, chunking.dims.len() as u8 + 1, width as u8];
            for d in chunking.dims.iter().chain([&element]) {
                body.extend_from_slice(&d.to_le_bytes()[..width]);
            }
            body.extend_from_slice(&[3, PAGE_BITS]); // fixed array index
            body.extend_from_slice(&at.fixed_array_headers[i].to_le_bytes());
            body
        }
    };
    messages.push((LAYOUT, 0, layout));
    object_header(&messages)
}

fn labels_header(samples: u64, at: &Addresses) -> Vec<u8> {
    let mut layout = vec![3, 1];
    layout.extend_from_slice(&at.labels_data.to_le_bytes());
    layout.extend_from_slice(&(8 * samples).to_le_bytes());
    object_header(&[
        (DATASPACE, 0, dataspace(&[samples])),
        (DATATYPE, CONSTANT, datatype(ElementType::Int64)),
        (FILL_VALUE, CONSTANT, vec![3, 0x0a]),
        (LAYOUT, 0, layout),
    ])
}

/// The fixed array header and data block indexing the chunks of records dataset `i`.
fn fixed_array(out: &mut Vec<u8>, chunking: &Chunking, at: &Addresses, i: usize) {
    let filtered = chunking.size_len > 0;
    let start = out.len();
    out.extend_from_slice(b"FAHD");
    out.extend_from_slice(&[0, filtered as u8, chunking.entry_size as u8, PAGE_BITS]);
    out.extend_from_slice(&chunking.chunks.to_le_bytes());
    out.extend_from_slice(&at.data_blocks[i].to_le_bytes());
    let sum = lookup3(&out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());

    let start = out.len();
    out.extend_from_slice(b"FADB");
    out.extend_from_slice(&[0, filtered as u8]);
    out.extend_from_slice(&at.fixed_array_headers[i].to_le_bytes());
    let entry = |out: &mut Vec<u8>, &(address, size, mask): &(u64, u64, u32)| {
        out.extend_from_slice(&address.to_le_bytes());
        if filtered {
            out.extend_from_slice(&size.to_le_bytes()[..chunking.size_len as usize]);
            out.extend_from_slice(&mask.to_le_bytes());
        }
    };
    let pages = pages(chunking.chunks);
    if pages == 0 {
        for chunk in &at.chunks[i] {
            entry(out, chunk);
        }
        let sum = lookup3(&out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
        return;
    }
    // A paged block: a bitmap of initialised pages (all; most significant bit first), the
    // prefix's checksum, then each page's elements followed by their own checksum.
    let mut bitmap = vec![0u8; pages.div_ceil(8) as usize];
    for page in 0..pages as usize {
        bitmap[page / 8] |= 0x80 >> (page % 8);
    }
    out.extend_from_slice(&bitmap);
    let sum = lookup3(&out[start..]);
    out.extend_from_slice(&sum.to_le_bytes());
    for page in at.chunks[i].chunks(1 << PAGE_BITS) {
        let start = out.len();
        for chunk in page {
            entry(out, chunk);
        }
        let sum = lookup3(&out[start..]);
        out.extend_from_slice(&sum.to_le_bytes());
    }
}
