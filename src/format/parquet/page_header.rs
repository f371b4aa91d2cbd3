//! The page header: `PageHeader` in thrift's compact protocol, parsed as far as the page walk
//! needs it (the page's type and sizes, and a data page's value count and encodings). Apart from
//! `pages.rs` because it reads one self-contained thrift struct, as `footer.rs` reads the footer's,
//! while the walk is about where pages lie in bytes that arrive in pieces.

use super::thrift::{Parsed, Reader};

/// A page header, as far as the reader cares.
pub(super) struct PageHeader {
    pub(super) kind: i32,
    pub(super) uncompressed: usize,
    pub(super) compressed: usize,
    pub(super) v1: Option<DataPage>,
    pub(super) v2: Option<DataPageV2>,
}

pub(super) struct DataPage {
    pub(super) values: u64,
    pub(super) encoding: i32,
    pub(super) def_encoding: i32,
    pub(super) rep_encoding: i32,
}

pub(super) struct DataPageV2 {
    pub(super) values: u64,
    pub(super) rows: u64,
    pub(super) encoding: i32,
    pub(super) def_len: usize,
    pub(super) rep_len: usize,
    pub(super) compressed: bool,
}

fn length(n: i32, what: &str) -> Parsed<usize> {
    usize::try_from(n).map_err(|_| format!("{what} is negative ({n})"))
}

fn parse_page_header(r: &mut Reader) -> Parsed<PageHeader> {
    let mut kind = None;
    let mut uncompressed = None;
    let mut compressed = None;
    let mut v1 = None;
    let mut v2 = None;
    r.read_struct(|r, id, field| {
        match id {
            1 => kind = Some(r.i32(field, "type")?),
            2 => {
                uncompressed = Some(length(
                    r.i32(field, "uncompressed_page_size")?,
                    "uncompressed_page_size",
                )?)
            }
            3 => {
                compressed = Some(length(
                    r.i32(field, "compressed_page_size")?,
                    "compressed_page_size",
                )?)
            }
            5 => {
                let (mut values, mut encoding, mut def, mut rep) = (None, None, None, None);
                r.strukt(field, "data_page_header", |r, id, field| {
                    match id {
                        1 => values = Some(r.i32(field, "num_values")?),
                        2 => encoding = Some(r.i32(field, "encoding")?),
                        3 => def = Some(r.i32(field, "definition_level_encoding")?),
                        4 => rep = Some(r.i32(field, "repetition_level_encoding")?),
                        _ => r.skip(field)?,
                    }
                    Ok(())
                })?;
                let missing = |what: &str| format!("the data page header has no {what}");
                v1 = Some(DataPage {
                    values: length(values.ok_or_else(|| missing("num_values"))?, "num_values")?
                        as u64,
                    encoding: encoding.ok_or_else(|| missing("encoding"))?,
                    def_encoding: def.ok_or_else(|| missing("definition_level_encoding"))?,
                    rep_encoding: rep.ok_or_else(|| missing("repetition_level_encoding"))?,
                });
            }
            8 => {
                let mut fields = [None; 6];
                let mut compressed = true;
                r.strukt(field, "data_page_header_v2", |r, id, field| {
                    match id {
                        1..=6 => fields[id as usize - 1] = Some(r.i32(field, "a v2 page count")?),
                        7 => compressed = r.bool(field, "is_compressed")?,
                        _ => r.skip(field)?,
                    }
                    Ok(())
                })?;
                let get = |i: usize, what: &str| -> Parsed<usize> {
                    length(
                        fields[i]
                            .ok_or_else(|| format!("the v2 data page header has no {what}"))?,
                        what,
                    )
                };
                v2 = Some(DataPageV2 {
                    values: get(0, "num_values")? as u64,
                    rows: get(2, "num_rows")? as u64,
                    encoding: fields[3].ok_or("the v2 data page header has no encoding")?,
                    def_len: get(4, "definition_levels_byte_length")?,
                    rep_len: get(5, "repetition_levels_byte_length")?,
                    compressed,
                });
            }
            _ => r.skip(field)?,
        }
        Ok(())
    })?;
    Ok(PageHeader {
        kind: kind.ok_or("the page header has no type")?,
        uncompressed: uncompressed.ok_or("the page header has no uncompressed_page_size")?,
        compressed: compressed.ok_or("the page header has no compressed_page_size")?,
        v1,
        v2,
    })
}

/// A page header at the start of `bytes`, and its length.
pub(super) fn parse_header_in(bytes: &[u8]) -> Parsed<(PageHeader, usize)> {
    let mut reader = Reader::new(bytes);
    let header = parse_page_header(&mut reader)?;
    Ok((header, reader.position()))
}
