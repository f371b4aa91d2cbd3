//! Thrift's compact protocol, the encoding of parquet's footer (`FileMetaData`) and page headers:
//! a writer for the few structs we emit, and a generic reader that walks any struct field by
//! field, so that fields it does not know (statistics, page indexes, key-value metadata written by
//! pyarrow) are skipped rather than misread.
//!
//! Encoding: a field header is one byte `delta << 4 | type` when the field id is 1..=15 above the
//! previous one in the same struct, else the type byte and the id as a zigzag varint; integers
//! are zigzag varints, binaries a varint length and the bytes, lists a header byte
//! `size << 4 | element type` (size 15 and up: `0xF0 | type` and a varint size), booleans
//! in fields live in the type nibble, and a struct ends with a 0 byte.

pub(super) type Parsed<T> = std::result::Result<T, String>;

pub(super) const BOOL_TRUE: u8 = 1;
pub(super) const BOOL_FALSE: u8 = 2;
pub(super) const BYTE: u8 = 3;
pub(super) const I16: u8 = 4;
pub(super) const I32: u8 = 5;
pub(super) const I64: u8 = 6;
pub(super) const DOUBLE: u8 = 7;
pub(super) const BINARY: u8 = 8;
pub(super) const LIST: u8 = 9;
pub(super) const SET: u8 = 10;
pub(super) const MAP: u8 = 11;
pub(super) const STRUCT: u8 = 12;

/// Nesting deeper than this is refused: parquet's structs nest about six deep, and a corrupt
/// footer must not overflow the stack.
const MAX_DEPTH: u32 = 64;

pub(super) fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push(value as u8 | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn zigzag(value: i64) -> u64 {
    ((value << 1) ^ (value >> 63)) as u64
}

fn list_header(out: &mut Vec<u8>, element: u8, len: usize) {
    if len < 15 {
        out.push((len as u8) << 4 | element);
    } else {
        out.push(0xF0 | element);
        varint(out, len as u64);
    }
}

/// Writes the fields of one struct; [`write_struct`] and the nesting methods end it.
pub(super) struct StructWriter<'a> {
    out: &'a mut Vec<u8>,
    last: i16,
}

/// Writes a whole struct at the end of `out`.
pub(super) fn write_struct(out: &mut Vec<u8>, fields: impl FnOnce(&mut StructWriter)) {
    let mut writer = StructWriter { out, last: 0 };
    fields(&mut writer);
    writer.out.push(0);
}

impl StructWriter<'_> {
    fn header(&mut self, id: i16, kind: u8) {
        let delta = i32::from(id) - i32::from(self.last);
        if (1..=15).contains(&delta) {
            self.out.push((delta as u8) << 4 | kind);
        } else {
            self.out.push(kind);
            varint(self.out, zigzag(i64::from(id)));
        }
        self.last = id;
    }

    pub fn i32(&mut self, id: i16, value: i32) {
        self.header(id, I32);
        varint(self.out, zigzag(i64::from(value)));
    }

    pub fn i64(&mut self, id: i16, value: i64) {
        self.header(id, I64);
        varint(self.out, zigzag(value));
    }

    pub fn byte(&mut self, id: i16, value: i8) {
        self.header(id, BYTE);
        self.out.push(value as u8);
    }

    pub fn bool(&mut self, id: i16, value: bool) {
        self.header(id, if value { BOOL_TRUE } else { BOOL_FALSE });
    }

    pub fn binary(&mut self, id: i16, value: &[u8]) {
        self.header(id, BINARY);
        varint(self.out, value.len() as u64);
        self.out.extend_from_slice(value);
    }

    pub fn strukt(&mut self, id: i16, fields: impl FnOnce(&mut StructWriter)) {
        self.header(id, STRUCT);
        write_struct(self.out, fields);
    }

    pub fn list_i32(&mut self, id: i16, values: &[i32]) {
        self.header(id, LIST);
        list_header(self.out, I32, values.len());
        for &value in values {
            varint(self.out, zigzag(i64::from(value)));
        }
    }

    pub fn list_binary(&mut self, id: i16, values: &[&[u8]]) {
        self.header(id, LIST);
        list_header(self.out, BINARY, values.len());
        for value in values {
            varint(self.out, value.len() as u64);
            self.out.extend_from_slice(value);
        }
    }

    /// A list of `len` structs, the `i`th written by `each(writer, i)`.
    pub fn list_structs(
        &mut self,
        id: i16,
        len: usize,
        mut each: impl FnMut(&mut StructWriter, usize),
    ) {
        self.header(id, LIST);
        list_header(self.out, STRUCT, len);
        for i in 0..len {
            write_struct(self.out, |s| each(s, i));
        }
    }
}

/// Reads compact-protocol values from a byte slice; every error says what ran out or was bad.
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: u32,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader {
            bytes,
            pos: 0,
            depth: 0,
        }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn ended(&self) -> String {
        format!("the thrift data ends early (after {} bytes)", self.pos)
    }

    fn byte(&mut self) -> Parsed<u8> {
        let byte = *self.bytes.get(self.pos).ok_or_else(|| self.ended())?;
        self.pos += 1;
        Ok(byte)
    }

    fn take(&mut self, len: u64) -> Parsed<&'a [u8]> {
        let end = usize::try_from(len)
            .ok()
            .and_then(|len| self.pos.checked_add(len))
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| self.ended())?;
        let taken = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(taken)
    }

    fn varint(&mut self) -> Parsed<u64> {
        let mut value = 0u64;
        for shift in (0..70).step_by(7) {
            let byte = self.byte()?;
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "a varint longer than 10 bytes at byte {}",
            self.pos
        ))
    }

    fn zigzag(&mut self) -> Parsed<i64> {
        let raw = self.varint()?;
        Ok((raw >> 1) as i64 ^ -((raw & 1) as i64))
    }

    fn expect(&self, kind: u8, want: u8, what: &str) -> Parsed<()> {
        if kind == want {
            Ok(())
        } else {
            Err(format!(
                "{what} has thrift type {kind}, expected {want} (byte {})",
                self.pos
            ))
        }
    }

    /// An i32 field's value (enums are i32 too).
    pub fn i32(&mut self, kind: u8, what: &str) -> Parsed<i32> {
        self.expect(kind, I32, what)?;
        let value = self.zigzag()?;
        i32::try_from(value).map_err(|_| format!("{what} = {value} does not fit an i32"))
    }

    pub fn i64(&mut self, kind: u8, what: &str) -> Parsed<i64> {
        self.expect(kind, I64, what)?;
        self.zigzag()
    }

    pub fn binary(&mut self, kind: u8, what: &str) -> Parsed<&'a [u8]> {
        self.expect(kind, BINARY, what)?;
        self.binary_value()
    }

    fn binary_value(&mut self) -> Parsed<&'a [u8]> {
        let len = self.varint()?;
        self.take(len)
    }

    /// A bool field's value, carried by its type.
    pub fn bool(&mut self, kind: u8, what: &str) -> Parsed<bool> {
        match kind {
            BOOL_TRUE => Ok(true),
            BOOL_FALSE => Ok(false),
            _ => Err(format!("{what} has thrift type {kind}, expected a bool")),
        }
    }

    /// A list field's header: the element type and the length. The length is checked against
    /// the bytes left (every element takes at least one), so callers may reserve that much.
    pub fn list(&mut self, kind: u8, element: u8, what: &str) -> Parsed<usize> {
        self.expect(kind, LIST, what)?;
        let (got, len) = self.list_header()?;
        if got != element && len > 0 {
            return Err(format!(
                "{what} holds thrift type {got}, expected {element}"
            ));
        }
        Ok(len)
    }

    fn list_header(&mut self) -> Parsed<(u8, usize)> {
        let header = self.byte()?;
        let short = u64::from(header >> 4);
        let len = if short == 15 { self.varint()? } else { short };
        let left = (self.bytes.len() - self.pos) as u64;
        if len > left {
            return Err(format!(
                "a list of {len} elements at byte {} is longer than the {left} bytes left",
                self.pos
            ));
        }
        Ok((header & 0x0F, len as usize))
    }

    /// Reads the string elements of a list field whose header was read by [`Reader::list`].
    pub fn binary_element(&mut self) -> Parsed<&'a [u8]> {
        self.binary_value()
    }

    /// Reads a struct, calling `field(reader, id, type)` for each field; the callback reads the
    /// fields it knows and [`Reader::skip`]s the others.
    pub fn read_struct(
        &mut self,
        mut field: impl FnMut(&mut Reader<'a>, i16, u8) -> Parsed<()>,
    ) -> Parsed<()> {
        self.enter()?;
        let mut last: i16 = 0;
        loop {
            let header = self.byte()?;
            if header == 0 {
                break;
            }
            let kind = header & 0x0F;
            let delta = header >> 4;
            let id = if delta == 0 {
                let id = self.zigzag()?;
                i16::try_from(id).map_err(|_| format!("field id {id} does not fit an i16"))?
            } else {
                last.checked_add(i16::from(delta))
                    .ok_or_else(|| format!("field id past {} after {last}", i16::MAX))?
            };
            last = id;
            field(self, id, kind)?;
        }
        self.depth -= 1;
        Ok(())
    }

    /// A struct field's value: checks the type, then reads it as [`Reader::read_struct`].
    pub fn strukt(
        &mut self,
        kind: u8,
        what: &str,
        field: impl FnMut(&mut Reader<'a>, i16, u8) -> Parsed<()>,
    ) -> Parsed<()> {
        self.expect(kind, STRUCT, what)?;
        self.read_struct(field)
    }

    fn enter(&mut self) -> Parsed<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(format!("thrift values nest deeper than {MAX_DEPTH}"));
        }
        Ok(())
    }

    /// Skips a value of type `kind`, whatever it holds.
    pub fn skip(&mut self, kind: u8) -> Parsed<()> {
        match kind {
            BOOL_TRUE | BOOL_FALSE => Ok(()),
            _ => self.skip_value(kind, false),
        }
    }

    /// `in_collection`: a bool inside a list, set or map takes a byte of its own.
    fn skip_value(&mut self, kind: u8, in_collection: bool) -> Parsed<()> {
        match kind {
            BOOL_TRUE | BOOL_FALSE if !in_collection => Ok(()),
            BOOL_TRUE | BOOL_FALSE | BYTE => self.byte().map(drop),
            I16 | I32 | I64 => self.varint().map(drop),
            DOUBLE => self.take(8).map(drop),
            BINARY => self.binary_value().map(drop),
            LIST | SET => {
                let (element, len) = self.list_header()?;
                self.enter()?;
                for _ in 0..len {
                    self.skip_value(element, true)?;
                }
                self.depth -= 1;
                Ok(())
            }
            MAP => {
                let len = self.varint()?;
                if len == 0 {
                    return Ok(());
                }
                let kinds = self.byte()?;
                let left = (self.bytes.len() - self.pos) as u64;
                if len > left {
                    return Err(format!(
                        "a map of {len} entries is longer than the bytes left"
                    ));
                }
                self.enter()?;
                for _ in 0..len {
                    self.skip_value(kinds >> 4, true)?;
                    self.skip_value(kinds & 0x0F, true)?;
                }
                self.depth -= 1;
                Ok(())
            }
            STRUCT => self.read_struct(|r, _, kind| r.skip(kind)),
            other => Err(format!(
                "unknown thrift type {other} at byte {}",
                self.pos.saturating_sub(1)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_what_the_reader_reads_and_skips_what_it_does_not_know() {
        let mut out = Vec::new();
        write_struct(&mut out, |s| {
            s.i32(1, -3);
            s.i64(2, 1 << 40);
            s.binary(3, b"name");
            // A long jump and a backwards id need the long field header.
            s.i32(40, 7);
            s.i32(20, 9);
            s.bool(21, true);
            s.byte(22, -1);
            s.list_i32(23, &(0..20).collect::<Vec<_>>());
            s.list_binary(24, &[b"a", b"bc"]);
            s.list_structs(25, 2, |e, i| e.i64(1, i as i64));
            s.strukt(26, |n| n.strukt(3, |_| {}));
        });
        let mut seen = Vec::new();
        let mut reader = Reader::new(&out);
        reader
            .read_struct(|r, id, kind| {
                seen.push(id);
                match id {
                    1 => assert_eq!(r.i32(kind, "a")?, -3),
                    2 => assert_eq!(r.i64(kind, "b")?, 1 << 40),
                    3 => assert_eq!(r.binary(kind, "c")?, b"name"),
                    21 => assert!(r.bool(kind, "d")?),
                    24 => {
                        assert_eq!(r.list(kind, BINARY, "e")?, 2);
                        assert_eq!(r.binary_element()?, b"a");
                        assert_eq!(r.binary_element()?, b"bc");
                    }
                    _ => r.skip(kind)?,
                }
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, [1, 2, 3, 40, 20, 21, 22, 23, 24, 25, 26]);
        assert_eq!(reader.position(), out.len());
        // Every truncation is an error, never a panic.
        for len in 0..out.len() {
            let mut reader = Reader::new(&out[..len]);
            assert!(reader.read_struct(|r, _, kind| r.skip(kind)).is_err());
        }
    }

    #[test]
    fn refuses_deep_nesting_and_lists_longer_than_the_data() {
        let deep: Vec<u8> = std::iter::repeat_n(0x1C, 100).collect();
        let error = Reader::new(&deep)
            .read_struct(|r, _, kind| r.skip(kind))
            .unwrap_err();
        assert!(error.contains("deeper"), "{error}");
        let long_list = [0x19, 0xF5, 0xFF, 0xFF, 0xFF, 0x0F, 0x00];
        let error = Reader::new(&long_list)
            .read_struct(|r, _, kind| r.skip(kind))
            .unwrap_err();
        assert!(error.contains("longer than"), "{error}");
    }
}
