//! The footer: `FileMetaData` parsed generically (any writer's: unknown fields are skipped) into
//! what the reader keeps of it, the leaf columns read with their levels, and each row group's rows
//! and the byte ranges of its column chunks, computed as Arrow computes them. Kept apart from the
//! row-group I/O in `read.rs` because it is pure parsing of bytes already fetched; what the byte
//! ranges cost to read is that file's business.

use super::thrift::{Parsed, Reader, BINARY, STRUCT};
use super::{OPTIONAL, REPEATED, REQUIRED};
use crate::config::formats::{ColumnType, ParquetColumn};

/// What a sample's values must add up to, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expect {
    pub(super) values_per_row: u64,
    /// A binary column's value length.
    pub(super) binary_len: Option<u64>,
}

impl Expect {
    fn of(column: &ParquetColumn) -> Expect {
        match column.dtype {
            ColumnType::Binary => Expect {
                values_per_row: 1,
                binary_len: Some(column.size),
            },
            ColumnType::Number(_) => Expect {
                values_per_row: column.size,
                binary_len: None,
            },
        }
    }
}

/// A leaf column that is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Leaf {
    /// The top-level column it belongs to (`path_in_schema[0]`).
    pub(super) name: String,
    pub(super) physical: i32,
    pub(super) type_length: i32,
    pub(super) max_def: u16,
    pub(super) max_rep: u16,
    pub(super) expect: Option<Expect>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Group {
    pub(super) first_row: u64,
    pub(super) rows: u64,
    /// Its chunks in [`Footer::chunks`].
    chunks: (usize, usize),
    /// Where its first chunk read starts: a sample's offset, looked up per sample.
    pub(super) offset: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Chunk {
    /// Index in [`Footer::leaves`].
    pub(super) leaf: usize,
    pub(super) start: u64,
    pub(super) len: u64,
    pub(super) values: u64,
    pub(super) codec: i32,
}

/// What the reader keeps of a parsed footer: the row groups and the chunks of the columns read.
#[derive(Debug, Default)]
pub(super) struct Footer {
    pub(super) leaves: Vec<Leaf>,
    pub(super) groups: Vec<Group>,
    chunks: Vec<Chunk>,
    pub(super) rows: u64,
}

impl Footer {
    pub(super) fn clear(&mut self) {
        self.leaves.clear();
        self.groups.clear();
        self.chunks.clear();
        self.rows = 0;
    }

    pub(super) fn chunks_of(&self, group: usize) -> &[Chunk] {
        let (first, end) = self.groups[group].chunks;
        &self.chunks[first..end]
    }
}

/// Why a footer cannot be used.
#[derive(Debug)]
pub(super) enum Problem {
    Corrupt(String),
    /// A configured column the file does not have, and the columns it has.
    MissingColumn(String, String),
}

impl From<String> for Problem {
    fn from(why: String) -> Problem {
        Problem::Corrupt(why)
    }
}

/// A schema element, as far as the reader cares.
struct Element<'b> {
    physical: Option<i32>,
    type_length: i32,
    repetition: i32,
    name: &'b [u8],
    children: i32,
}

/// A leaf of the schema, with what is known of it while parsing.
struct LeafInfo<'b> {
    top: &'b [u8],
    /// Its index in [`Footer::leaves`] if it is read.
    read: Option<usize>,
}

fn count(n: i64, what: &str) -> Parsed<u64> {
    u64::try_from(n).map_err(|_| format!("{what} is negative ({n})"))
}

/// Parses `FileMetaData` into `footer`, keeping the chunks of the `selected` columns (all when
/// none is); `data_end` is where the footer starts, past every column chunk.
pub(super) fn parse_footer(
    bytes: &[u8],
    data_end: u64,
    selected: &[&ParquetColumn],
    footer: &mut Footer,
) -> std::result::Result<(), Problem> {
    let mut reader = Reader::new(bytes);
    let mut leaves: Option<Vec<LeafInfo>> = None;
    let mut missing = None;
    let mut saw_groups = false;
    reader.read_struct(|r, id, kind| match id {
        2 => {
            let n = r.list(kind, STRUCT, "schema")?;
            let mut elements = Vec::with_capacity(n);
            for _ in 0..n {
                elements.push(parse_element(r)?);
            }
            let info = schema_leaves(&elements, selected, footer)?;
            missing = selected
                .iter()
                .find(|c| !info.iter().any(|l| l.top == c.name.as_bytes()))
                .map(|c| (c.name.clone(), top_names(&elements)));
            leaves = Some(info);
            Ok(())
        }
        4 => {
            let leaves = leaves
                .as_ref()
                .ok_or("the row groups come before the schema")?;
            let n = r.list(kind, STRUCT, "row_groups")?;
            for g in 0..n {
                parse_group(r, leaves, data_end, footer)
                    .map_err(|why| format!("row group {g}: {why}"))?;
            }
            saw_groups = true;
            Ok(())
        }
        _ => r.skip(kind),
    })?;
    if let Some((name, has)) = missing {
        return Err(Problem::MissingColumn(name, has));
    }
    if leaves.is_none() {
        return Err("it has no schema".to_string().into());
    }
    if !saw_groups {
        return Err("it has no row_groups".to_string().into());
    }
    Ok(())
}

fn parse_element<'b>(r: &mut Reader<'b>) -> Parsed<Element<'b>> {
    let mut element = Element {
        physical: None,
        type_length: 0,
        repetition: REQUIRED,
        name: b"",
        children: 0,
    };
    r.read_struct(|r, id, kind| {
        match id {
            1 => element.physical = Some(r.i32(kind, "SchemaElement.type")?),
            2 => element.type_length = r.i32(kind, "SchemaElement.type_length")?,
            3 => element.repetition = r.i32(kind, "SchemaElement.repetition_type")?,
            4 => element.name = r.binary(kind, "SchemaElement.name")?,
            5 => element.children = r.i32(kind, "SchemaElement.num_children")?,
            _ => r.skip(kind)?,
        }
        Ok(())
    })?;
    Ok(element)
}

/// The names of the top-level columns, for messages.
fn top_names(elements: &[Element]) -> String {
    let mut names = Vec::new();
    let mut skip = 0i64;
    for element in elements.iter().skip(1) {
        if skip == 0 {
            names.push(String::from_utf8_lossy(element.name).into_owned());
        } else {
            skip -= 1;
        }
        skip += i64::from(element.children.max(0));
    }
    names.join(", ")
}

/// Walks the flattened schema (depth first, groups giving their children's count): every leaf
/// with its top-level name, and the levels of the leaves read (pushed to `footer.leaves`).
fn schema_leaves<'b>(
    elements: &[Element<'b>],
    selected: &[&ParquetColumn],
    footer: &mut Footer,
) -> Parsed<Vec<LeafInfo<'b>>> {
    struct Frame<'b> {
        left: i64,
        def: u16,
        rep: u16,
        top: &'b [u8],
    }
    let root = elements.first().ok_or("the schema is empty")?;
    let mut stack = vec![Frame {
        left: i64::from(root.children.max(0)),
        def: 0,
        rep: 0,
        top: b"",
    }];
    let mut leaves = Vec::new();
    for (i, element) in elements.iter().enumerate().skip(1) {
        while stack.last().is_some_and(|f| f.left == 0) {
            stack.pop();
        }
        let depth = stack.len();
        let parent = stack
            .last_mut()
            .ok_or("the schema has more elements than its groups hold")?;
        parent.left -= 1;
        let top = if depth == 1 { element.name } else { parent.top };
        let too_deep = || format!("schema element {i} is nested too deeply");
        let def = match element.repetition {
            REQUIRED => parent.def,
            OPTIONAL | REPEATED => parent.def.checked_add(1).ok_or_else(too_deep)?,
            other => return Err(format!("schema element {i} has repetition type {other}")),
        };
        let rep = match element.repetition {
            REPEATED => parent.rep.checked_add(1).ok_or_else(too_deep)?,
            _ => parent.rep,
        };
        if element.children > 0 {
            stack.push(Frame {
                left: i64::from(element.children),
                def,
                rep,
                top,
            });
            continue;
        }
        let physical = element.physical.ok_or_else(|| {
            format!("schema element {i} is neither a group with children nor a typed column")
        })?;
        let column = selected.iter().find(|c| c.name.as_bytes() == top);
        let read = if column.is_some() || selected.is_empty() {
            footer.leaves.push(Leaf {
                name: String::from_utf8_lossy(top).into_owned(),
                physical,
                type_length: element.type_length,
                max_def: def,
                max_rep: rep,
                expect: column.map(|c| Expect::of(c)),
            });
            Some(footer.leaves.len() - 1)
        } else {
            None
        };
        leaves.push(LeafInfo { top, read });
    }
    while stack.last().is_some_and(|f| f.left == 0) {
        stack.pop();
    }
    if !stack.is_empty() {
        return Err("the schema ends before its groups are complete".into());
    }
    Ok(leaves)
}

/// The parts of a `ColumnChunk` the reader needs.
struct ChunkMeta<'b> {
    path: Option<&'b [u8]>,
    codec: Option<i32>,
    values: Option<i64>,
    len: Option<i64>,
    data_page: Option<i64>,
    dictionary_page: Option<i64>,
}

fn parse_group(
    r: &mut Reader,
    leaves: &[LeafInfo],
    data_end: u64,
    footer: &mut Footer,
) -> Parsed<()> {
    let first_chunk = footer.chunks.len();
    let mut rows = None;
    let mut columns = None;
    r.read_struct(|r, id, kind| {
        match id {
            1 => {
                let n = r.list(kind, STRUCT, "RowGroup.columns")?;
                if n != leaves.len() {
                    return Err(format!(
                        "{n} column chunks for the schema's {} columns",
                        leaves.len()
                    ));
                }
                for leaf in leaves {
                    let meta = parse_chunk(r)?;
                    let chunk = chunk_of(&meta, leaf, data_end).map_err(|why| {
                        format!("column {}: {why}", String::from_utf8_lossy(leaf.top))
                    })?;
                    if let Some(index) = leaf.read {
                        footer.chunks.push(Chunk {
                            leaf: index,
                            ..chunk
                        });
                    }
                }
                columns = Some(n);
            }
            3 => {
                rows = Some(count(
                    r.i64(kind, "RowGroup.num_rows")?,
                    "RowGroup.num_rows",
                )?)
            }
            _ => r.skip(kind)?,
        }
        Ok(())
    })?;
    columns.ok_or("it has no columns")?;
    let rows = rows.ok_or("it has no num_rows")?;
    let first_row = footer.rows;
    footer.rows = first_row
        .checked_add(rows)
        .ok_or("the row counts overflow")?;
    let chunks = (first_chunk, footer.chunks.len());
    let offset = footer.chunks[chunks.0..chunks.1]
        .iter()
        .map(|c| c.start)
        .min()
        .unwrap_or(0);
    footer.groups.push(Group {
        first_row,
        rows,
        chunks,
        offset,
    });
    Ok(())
}

fn parse_chunk<'b>(r: &mut Reader<'b>) -> Parsed<ChunkMeta<'b>> {
    let mut meta = ChunkMeta {
        path: None,
        codec: None,
        values: None,
        len: None,
        data_page: None,
        dictionary_page: None,
    };
    r.read_struct(|r, id, kind| {
        match id {
            1 => {
                r.binary(kind, "ColumnChunk.file_path")?;
                return Err(
                    "its data is in another file (file_path), which dlio-rs does not read".into(),
                );
            }
            3 => r.strukt(kind, "ColumnChunk.meta_data", |r, id, kind| {
                match id {
                    3 => {
                        let n = r.list(kind, BINARY, "path_in_schema")?;
                        for i in 0..n {
                            let part = r.binary_element()?;
                            if i == 0 {
                                meta.path = Some(part);
                            }
                        }
                    }
                    4 => meta.codec = Some(r.i32(kind, "codec")?),
                    5 => meta.values = Some(r.i64(kind, "num_values")?),
                    7 => meta.len = Some(r.i64(kind, "total_compressed_size")?),
                    9 => meta.data_page = Some(r.i64(kind, "data_page_offset")?),
                    11 => meta.dictionary_page = Some(r.i64(kind, "dictionary_page_offset")?),
                    _ => r.skip(kind)?,
                }
                Ok(())
            })?,
            8 | 9 => return Err("it is encrypted, which dlio-rs cannot read".into()),
            _ => r.skip(kind)?,
        }
        Ok(())
    })?;
    Ok(meta)
}

/// The byte range of a chunk, as Arrow computes it: from the dictionary page if it comes first,
/// `total_compressed_size` long, within the data (after `PAR1`, before the footer).
fn chunk_of(meta: &ChunkMeta, leaf: &LeafInfo, data_end: u64) -> Parsed<Chunk> {
    let path = meta.path.ok_or("it has no meta_data.path_in_schema")?;
    if path != leaf.top {
        return Err(format!(
            "its path_in_schema starts with '{}'",
            String::from_utf8_lossy(path)
        ));
    }
    let data_page = count(
        meta.data_page.ok_or("it has no data_page_offset")?,
        "data_page_offset",
    )?;
    let start = match meta.dictionary_page {
        Some(d) if d > 0 && (d as u64) < data_page => d as u64,
        _ => data_page,
    };
    let len = count(
        meta.len.ok_or("it has no total_compressed_size")?,
        "total_compressed_size",
    )?;
    if start < 4 || start.checked_add(len).is_none_or(|end| end > data_end) {
        return Err(format!(
            "its {len} bytes at offset {start} are not within the data (bytes 4..{data_end})"
        ));
    }
    Ok(Chunk {
        leaf: 0,
        start,
        len,
        values: count(meta.values.ok_or("it has no num_values")?, "num_values")?,
        codec: meta.codec.ok_or("it has no codec")?,
    })
}
