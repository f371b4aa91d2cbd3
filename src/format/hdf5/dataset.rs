//! The root group's links (symbol table or link messages) and a dataset's description (its
//! dataspace, datatype, layout and filters), from their object headers.

use super::read::{message, small, unsupported, walk_header, Io, Parsed, Problem, Sizes};
use crate::error::Result;

/// Bounds on what a corrupt file could make huge.
const MAX_NODES: usize = 100_000;
const MAX_RANK: usize = 32;

/// A hard link of the root group to a dataset DLIO reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Link {
    pub name: String,
    pub address: u64,
}

/// DLIO's records datasets: `records` (DLIO 2.0) and `records_0` .. (later versions).
fn is_records(name: &[u8]) -> bool {
    name == b"records" || name.starts_with(b"records_")
}

/// The root group's links to records datasets, `records` first, then `records_N` by N; a dataset
/// linked under two names once.
pub(super) fn records_links(io: &mut Io, root: u64) -> Result<Vec<Link>> {
    let namer = io.namer();
    let sizes = io.sizes;
    let mut links = Vec::new();
    let mut symbol_table = None;
    let mut dense = false;
    walk_header(io, root, &"the root group", &mut |kind, _flags, body| {
        let mut c = sizes.cursor(body);
        match kind {
            message::SYMBOL_TABLE => {
                symbol_table = Some((
                    c.defined("the group's B-tree")?,
                    c.defined("the group's heap")?,
                ));
            }
            message::LINK_INFO => {
                c.skip(1)?;
                if c.u8()? & 1 != 0 {
                    c.skip(8)?; // the largest creation index
                }
                dense = c.address()?.is_some();
            }
            message::LINK => {
                if let Some(link) = link_message(&mut c)? {
                    links.push(link);
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    if let Some((tree, heap)) = symbol_table {
        symbol_table_links(io, tree, heap, &mut links)?;
    }
    if links.is_empty() && dense {
        return Err(namer.error(
            "the root group",
            Problem::Unsupported(
                "links kept in dense storage (a fractal heap, which the library uses for more \
                 than 8 links)"
                    .into(),
            ),
        ));
    }
    if links.is_empty() {
        return Err(namer.corrupt("no `records` or `records_*` dataset in the root group"));
    }
    links.sort_by(|a, b| (a.name.len(), &a.name).cmp(&(b.name.len(), &b.name)));
    // One dataset under two names (dlio-rs links `records_0` as `records` too, for DLIO 2.0) is
    // read once, under its later name.
    let mut seen = std::collections::HashSet::new();
    let mut unique: Vec<Link> = links
        .into_iter()
        .rev()
        .filter(|link| seen.insert(link.address))
        .collect();
    unique.reverse();
    Ok(unique)
}

/// A link message: the link when it is a hard link to a records dataset.
fn link_message(c: &mut super::read::Cursor) -> Parsed<Option<Link>> {
    let version = c.u8()?;
    if version != 1 {
        return unsupported(format!("link message version {version}"));
    }
    let flags = c.u8()?;
    let kind = if flags & 0x08 != 0 { c.u8()? } else { 0 };
    if flags & 0x04 != 0 {
        c.skip(8)?; // creation order
    }
    if flags & 0x10 != 0 {
        c.skip(1)?; // character set
    }
    let name_len = c.uint(1 << (flags & 3))?;
    let name = c.take(small(name_len, "a link name's length")?)?;
    if kind != 0 || !is_records(name) {
        return Ok(None);
    }
    let address = c.defined("a hard link")?;
    Ok(Some(Link {
        name: String::from_utf8_lossy(name).into_owned(),
        address,
    }))
}

/// Walks a symbol table group's B-tree (version 1, group nodes) and its symbol nodes.
fn symbol_table_links(io: &mut Io, tree: u64, heap: u64, links: &mut Vec<Link>) -> Result<()> {
    let namer = io.namer();
    let sizes = io.sizes;
    let (o, l) = (sizes.offset as usize, sizes.length as usize);
    let what = "the root group's local heap";
    let bytes = io.meta(heap, 8 + 2 * l + o, &what)?;
    let parsed = (|| -> Parsed<(u64, usize)> {
        let mut c = sizes.cursor(bytes);
        if c.take(4)? != b"HEAP" {
            return Err(Problem::Corrupt("no HEAP signature".into()));
        }
        c.skip(4)?;
        let size = small(c.length()?, "the heap's size")?;
        c.length()?; // free list
        Ok((c.defined("the heap's data")?, size))
    })();
    let (segment, segment_len) = parsed.map_err(|p| namer.error(what, p))?;

    // Nodes to visit with the level each must have (None: the root, any level).
    let mut nodes = vec![(tree, None)];
    let mut symbol_nodes = Vec::new();
    let mut visited = 0;
    while let Some((node, expected)) = nodes.pop() {
        visited += 1;
        let what = format!("the root group's B-tree node at {node}");
        if visited > MAX_NODES {
            return Err(namer.corrupt(format!("{what}: the tree has too many nodes")));
        }
        let head_len = 8 + 2 * o;
        let head = io.meta(node, head_len, &what)?;
        let (kind, level) = (head[4], head[5]);
        let entries = u16::from_le_bytes([head[6], head[7]]) as usize;
        if &head[..4] != b"TREE" || kind != 0 || expected.is_some_and(|e| e != level) {
            return Err(namer.corrupt(format!(
                "{what}: not a group node of level {}",
                expected.map_or("any".into(), |e: u8| e.to_string())
            )));
        }
        let body = io.meta(node, head_len + entries * (l + o) + l, &what)?;
        let mut c = sizes.cursor(&body[head_len..]);
        let parsed = (|| -> Parsed<()> {
            for _ in 0..entries {
                c.skip(l)?; // key: a name's heap offset
                let child = c.defined("a child")?;
                match level {
                    0 => symbol_nodes.push(child),
                    _ => nodes.push((child, Some(level - 1))),
                }
            }
            Ok(())
        })();
        parsed.map_err(|p| namer.error(&what, p))?;
    }

    let entry_len = 2 * o + 24;
    let mut entries = Vec::new();
    for node in symbol_nodes {
        let what = format!("the root group's symbol node at {node}");
        let head = io.meta(node, 8, &what)?;
        if &head[..4] != b"SNOD" {
            return Err(namer.corrupt(format!("{what}: no SNOD signature")));
        }
        let count = u16::from_le_bytes([head[6], head[7]]) as usize;
        let body = io.meta(node, 8 + count * entry_len, &what)?;
        let mut c = sizes.cursor(&body[8..]);
        let parsed = (|| -> Parsed<()> {
            for _ in 0..count {
                let name = c.uint(o)?;
                let address = c.address()?;
                c.skip(24)?; // cache type, reserved, scratch pad
                entries.push((name, address));
            }
            Ok(())
        })();
        parsed.map_err(|p| namer.error(&what, p))?;
    }
    let what = "the root group's local heap data";
    let names = io.meta(segment, segment_len, &what)?;
    for (offset, address) in entries {
        let name = usize::try_from(offset)
            .ok()
            .and_then(|at| names.get(at..))
            .and_then(|rest| rest.split(|&b| b == 0).next())
            .ok_or_else(|| namer.corrupt(format!("{what}: a name at {offset} lies outside it")))?;
        if !is_records(name) {
            continue;
        }
        let address = address.ok_or_else(|| {
            namer.corrupt(format!(
                "{what}: the entry {} has no object header",
                String::from_utf8_lossy(name)
            ))
        })?;
        links.push(Link {
            name: String::from_utf8_lossy(name).into_owned(),
            address,
        });
    }
    Ok(())
}

/// A filter of a dataset's pipeline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Filter {
    pub id: u16,
    pub params: Vec<u32>,
}

pub(super) const DEFLATE: u16 = 1;
pub(super) const SHUFFLE: u16 = 2;
/// h5py's LZF filter.
pub(super) const LZF: u16 = 32000;

/// How a chunked dataset finds its chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ChunkIndex {
    /// Layout v3: a version-1 B-tree of chunk nodes.
    BTree(Option<u64>),
    /// Layout v4+: the dataset is one chunk; its stored size and filter mask when filtered.
    Single {
        address: Option<u64>,
        filtered: Option<(u64, u32)>,
    },
    /// Layout v4+: unfiltered chunks one after another, in row-major order of the chunk grid.
    Implicit(Option<u64>),
    /// Layout v4+: a fixed array of chunk addresses (and sizes and masks when filtered).
    FixedArray(Option<u64>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Layout {
    /// The data is in the object header.
    Compact(Vec<u8>),
    Contiguous {
        address: Option<u64>,
        size: u64,
    },
    Chunked {
        dims: Vec<u64>,
        index: ChunkIndex,
        /// Partial edge chunks are stored unfiltered.
        edge_unfiltered: bool,
    },
}

/// What reading a sample of a dataset needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Dataset {
    pub dims: Vec<u64>,
    /// Maximum dimensions; `None` where unlimited.
    pub max_dims: Vec<Option<u64>>,
    pub element: u64,
    pub layout: Layout,
    pub filters: Vec<Filter>,
}

impl Dataset {
    /// Bytes of one sample: one index of the first dimension.
    pub fn sample_bytes(&self) -> Option<u64> {
        self.dims
            .iter()
            .skip(1)
            .try_fold(self.element, |n, &d| n.checked_mul(d))
    }
}

/// Reads the object header of the dataset `name` at `address`.
pub(super) fn dataset(io: &mut Io, name: &str, address: u64) -> Result<Dataset> {
    let namer = io.namer();
    let sizes = io.sizes;
    let what = format!("dataset {name}");
    let mut space = None;
    let mut element = None;
    let mut layout = None;
    let mut filters = Vec::new();
    walk_header(io, address, &what, &mut |kind, flags, body| {
        let part = match kind {
            message::DATASPACE => "dataspace",
            message::DATATYPE => "datatype",
            message::LAYOUT => "layout",
            message::FILTER_PIPELINE => "filter pipeline",
            _ => return Ok(()),
        };
        if flags & message::SHARED != 0 {
            return unsupported(format!("a shared (committed) {part} message"));
        }
        match kind {
            message::DATASPACE => space = Some(dataspace(sizes, body)?),
            message::DATATYPE => element = Some(datatype(body)?),
            message::LAYOUT => layout = Some(data_layout(sizes, body)?),
            _ => filters = pipeline(sizes, body)?,
        }
        Ok(())
    })?;
    let check = || -> Parsed<Dataset> {
        let (dims, max_dims) = space.ok_or(Problem::Corrupt("no dataspace message".into()))?;
        let element = element.ok_or(Problem::Corrupt("no datatype message".into()))?;
        let layout = layout.ok_or(Problem::Corrupt("no layout message".into()))?;
        if dims.is_empty() {
            return unsupported("a scalar dataset (records need a sample dimension)");
        }
        if let Layout::Chunked { dims: chunk, .. } = &layout {
            // The layout's dimensions are the chunk's and then the element size.
            if chunk.len() != dims.len() + 1 || chunk[dims.len()] != element {
                return Err(Problem::Corrupt(format!(
                    "chunk dimensions {chunk:?} do not fit a dataset of shape {dims:?} with {element}-byte elements"
                )));
            }
            if chunk.contains(&0) {
                return Err(Problem::Corrupt(format!(
                    "chunk dimensions {chunk:?} hold a zero"
                )));
            }
        }
        Ok(Dataset {
            dims,
            max_dims,
            element,
            layout,
            filters,
        })
    };
    check().map_err(|p| namer.error(&what, p))
}

type Space = (Vec<u64>, Vec<Option<u64>>);

fn dataspace(sizes: Sizes, body: &[u8]) -> Parsed<Space> {
    let mut c = sizes.cursor(body);
    let version = c.u8()?;
    let rank = c.u8()? as usize;
    let flags = c.u8()?;
    match version {
        1 => c.skip(5)?,
        2 => {
            if c.u8()? == 2 {
                return unsupported("a null dataspace");
            }
        }
        v => return unsupported(format!("dataspace message version {v}")),
    }
    if rank > MAX_RANK {
        return Err(Problem::Corrupt(format!("{rank} dimensions")));
    }
    let dims = (0..rank)
        .map(|_| c.length())
        .collect::<Parsed<Vec<u64>>>()?;
    let max_dims = if flags & 1 != 0 {
        let unlimited = if sizes.length >= 8 {
            u64::MAX
        } else {
            (1u64 << (8 * sizes.length)) - 1
        };
        (0..rank)
            .map(|_| Ok(Some(c.length()?).filter(|&m| m != unlimited)))
            .collect::<Parsed<Vec<_>>>()?
    } else {
        dims.iter().copied().map(Some).collect()
    };
    Ok((dims, max_dims))
}

/// The element size of a fixed-point or floating-point datatype.
fn datatype(body: &[u8]) -> Parsed<u64> {
    let mut c = Sizes {
        offset: 8,
        length: 8,
    }
    .cursor(body);
    let class = c.u8()? & 0x0f;
    c.skip(3)?;
    let size = u64::from(c.u32()?);
    match class {
        0 | 1 if size > 0 => Ok(size),
        0 | 1 => Err(Problem::Corrupt("a 0-byte element type".into())),
        other => unsupported(format!(
            "datatype class {other} (only fixed-point and floating-point numbers are)"
        )),
    }
}

fn data_layout(sizes: Sizes, body: &[u8]) -> Parsed<Layout> {
    let mut c = sizes.cursor(body);
    let version = c.u8()?;
    if !(3..=5).contains(&version) {
        return unsupported(format!(
            "layout message version {version} (written by HDF5 before 1.6.3)"
        ));
    }
    let class = c.u8()?;
    match class {
        0 => {
            let size = c.u16()? as usize;
            Ok(Layout::Compact(c.take(size)?.to_vec()))
        }
        1 => Ok(Layout::Contiguous {
            address: c.address()?,
            size: c.length()?,
        }),
        2 if version == 3 => {
            let rank = c.u8()? as usize;
            let address = c.address()?;
            let dims = (0..rank)
                .map(|_| c.u32().map(u64::from))
                .collect::<Parsed<_>>()?;
            Ok(Layout::Chunked {
                dims,
                index: ChunkIndex::BTree(address),
                edge_unfiltered: false,
            })
        }
        2 => {
            let flags = c.u8()?;
            let rank = c.u8()? as usize;
            let width = c.u8()? as usize;
            if !(1..=8).contains(&width) {
                return Err(Problem::Corrupt(format!("{width}-byte chunk dimensions")));
            }
            let dims = (0..rank).map(|_| c.uint(width)).collect::<Parsed<_>>()?;
            let index = match c.u8()? {
                1 => {
                    let filtered = if flags & 0x02 != 0 {
                        Some((c.length()?, c.u32()?))
                    } else {
                        None
                    };
                    ChunkIndex::Single {
                        address: c.address()?,
                        filtered,
                    }
                }
                2 => ChunkIndex::Implicit(c.address()?),
                3 => {
                    c.skip(1)?; // page bits: the array's header has them too
                    ChunkIndex::FixedArray(c.address()?)
                }
                4 => {
                    return unsupported(
                        "the extensible array chunk index (datasets resizable along one dimension, \
                         h5py's maxshape with one None)",
                    )
                }
                5 => {
                    return unsupported(
                        "the version-2 B-tree chunk index (datasets resizable along several dimensions)",
                    )
                }
                other => return Err(Problem::Corrupt(format!("chunk index type {other}"))),
            };
            Ok(Layout::Chunked {
                dims,
                index,
                edge_unfiltered: flags & 0x01 != 0,
            })
        }
        3 => unsupported("virtual datasets"),
        other => Err(Problem::Corrupt(format!("layout class {other}"))),
    }
}

fn pipeline(sizes: Sizes, body: &[u8]) -> Parsed<Vec<Filter>> {
    let mut c = sizes.cursor(body);
    let version = c.u8()?;
    let count = c.u8()?;
    if version == 1 {
        c.skip(6)?;
    } else if version != 2 {
        return unsupported(format!("filter pipeline message version {version}"));
    }
    let mut filters = Vec::new();
    for _ in 0..count {
        let id = c.u16()?;
        let name_len = if version == 1 || id >= 256 {
            c.u16()? as usize
        } else {
            0
        };
        c.u16()?; // flags: whether the filter is optional (the chunks' masks say where skipped)
        let values = c.u16()? as usize;
        // Version 1 names are padded to a multiple of 8 bytes already.
        c.skip(name_len)?;
        let params = (0..values).map(|_| c.u32()).collect::<Parsed<Vec<_>>>()?;
        if version == 1 && values % 2 == 1 {
            c.skip(4)?;
        }
        if id != DEFLATE && id != SHUFFLE && id != LZF {
            let known = match id {
                3 => " (fletcher32)",
                4 => " (szip)",
                5 => " (nbit)",
                6 => " (scaleoffset)",
                307 => " (bzip2)",
                _ => "",
            };
            return unsupported(format!(
                "filter {id}{known} (deflate, lzf and shuffle are supported)"
            ));
        }
        filters.push(Filter { id, params });
    }
    Ok(filters)
}
