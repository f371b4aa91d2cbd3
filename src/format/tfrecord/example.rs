//! The payload of a record: a protobuf `tf.train.Example` with DLIO's two features, `image` and
//! `size`. The writer serializes it once per file around the image bytes (which it fills in
//! place), and `verify` parses it back as `tf.io.parse_example` would insist; both need only a few
//! varints and length-delimited fields, so this is written by hand rather than with a protobuf
//! library.

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn varint_len(v: u64) -> u64 {
    (64 - (v | 1).leading_zeros() as u64).div_ceil(7)
}

/// Tags of length-delimited fields 1, 2, 3 (`field << 3 | 2`).
const FIELD1: u8 = 0x0a;
const FIELD2: u8 = 0x12;
const FIELD3: u8 = 0x1a;

/// Appends field `tag` holding `body`.
fn put_message(out: &mut Vec<u8>, tag: u8, body: &[u8]) {
    out.push(tag);
    put_varint(out, body.len() as u64);
    out.extend_from_slice(body);
}

/// The serialized Example of every record of a file, but for the image bytes: what goes before
/// them and what goes after. The image is `image_len` bytes; `size` the int64 feature.
///
/// `Example{features: Features{feature: map<string, Feature>}}`, a map entry being a message of
/// key (1) and value (2); `Feature.bytes_list` is field 1, `int64_list` field 3; both lists hold
/// `value` as field 1 (packed varints for int64). The entries go in key order, as a deterministic
/// serialization puts them.
pub(super) fn example_parts(image_len: u64, size: u64) -> (Vec<u8>, Vec<u8>) {
    let mut int64_list = Vec::new();
    let mut packed = Vec::new();
    put_varint(&mut packed, size);
    put_message(&mut int64_list, FIELD1, &packed);
    let mut feature = Vec::new();
    put_message(&mut feature, FIELD3, &int64_list);
    let mut entry = Vec::new();
    put_message(&mut entry, FIELD1, b"size");
    put_message(&mut entry, FIELD2, &feature);
    let mut suffix = Vec::new();
    put_message(&mut suffix, FIELD1, &entry);

    // The image's messages enclose it, so their lengths are computed rather than built.
    let enclosed = |len: u64| 1 + varint_len(len) + len;
    let bytes_list = enclosed(image_len);
    let feature = enclosed(bytes_list);
    let entry = (2 + 5) + enclosed(feature);
    let features = enclosed(entry) + suffix.len() as u64;
    let mut prefix = Vec::new();
    for (tag, len) in [(FIELD1, features), (FIELD1, entry)] {
        prefix.push(tag);
        put_varint(&mut prefix, len);
    }
    put_message(&mut prefix, FIELD1, b"image");
    for (tag, len) in [(FIELD2, feature), (FIELD1, bytes_list), (FIELD1, image_len)] {
        prefix.push(tag);
        put_varint(&mut prefix, len);
    }
    (prefix, suffix)
}

/// One field of a protobuf message, as far as a reader that looks for two features needs it.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// The fields of a serialized message, in order; an error (then the end) where it is malformed.
struct Fields<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Fields<'a> {
    fn new(bytes: &'a [u8]) -> Fields<'a> {
        Fields { bytes, pos: 0 }
    }

    fn varint(&mut self) -> std::result::Result<u64, String> {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let byte = *self.bytes.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            value |= ((byte & 0x7f) as u64) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
            shift += 7;
            if shift > 63 {
                return Err("varint longer than 10 bytes".into());
            }
        }
    }

    fn skip(&mut self, len: u64) -> std::result::Result<&'a [u8], String> {
        let bytes = usize::try_from(len)
            .ok()
            .and_then(|len| self.pos.checked_add(len))
            .and_then(|end| self.bytes.get(self.pos..end))
            .ok_or_else(|| format!("a {len}-byte field runs past the end of its message"))?;
        self.pos += bytes.len();
        Ok(bytes)
    }

    fn field(&mut self) -> std::result::Result<(u64, Value<'a>), String> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => self.skip(8).map(|_| Value::Fixed)?,
            2 => {
                let len = self.varint()?;
                Value::Bytes(self.skip(len)?)
            }
            5 => self.skip(4).map(|_| Value::Fixed)?,
            wire => return Err(format!("unsupported protobuf wire type {wire}")),
        };
        Ok((key >> 3, value))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = std::result::Result<(u64, Value<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.bytes.len() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.pos = self.bytes.len();
        }
        Some(field)
    }
}

/// What `tf.io.parse_example` with DLIO's `FixedLenFeature([], tf.string)` for `image` and
/// `FixedLenFeature([], tf.int64)` for `size` insists on: both features, one value each. Returns
/// the image's length and the size.
pub(super) fn parse_example(payload: &[u8]) -> std::result::Result<(usize, u64), String> {
    example_features(payload).map(|(image, size)| (image.len(), size))
}

/// [`parse_example`], handing back the image's bytes (a slice of `payload`).
pub(super) fn example_features(payload: &[u8]) -> std::result::Result<(&[u8], u64), String> {
    let (mut image, mut size) = (None, None);
    for field in Fields::new(payload) {
        let (1, Value::Bytes(features)) = field? else {
            continue;
        };
        for entry in Fields::new(features) {
            let (1, Value::Bytes(entry)) = entry? else {
                continue;
            };
            let (mut name, mut feature): (&[u8], &[u8]) = (b"", b"");
            for part in Fields::new(entry) {
                match part? {
                    (1, Value::Bytes(k)) => name = k,
                    (2, Value::Bytes(v)) => feature = v,
                    _ => {}
                }
            }
            match name {
                b"image" => image = Some(feature),
                b"size" => size = Some(feature),
                _ => {}
            }
        }
    }
    let image = image.ok_or("the Example has no 'image' feature")?;
    let size = size.ok_or("the Example has no 'size' feature")?;
    let (mut images, mut image_bytes): (u32, &[u8]) = (0, &[]);
    let (mut sizes, mut size_value) = (0, 0);
    for field in Fields::new(image) {
        if let (1, Value::Bytes(list)) = field? {
            for value in Fields::new(list) {
                if let (1, Value::Bytes(bytes)) = value? {
                    images += 1;
                    image_bytes = bytes;
                }
            }
        }
    }
    for field in Fields::new(size) {
        if let (3, Value::Bytes(list)) = field? {
            for value in Fields::new(list) {
                match value? {
                    (1, Value::Varint(v)) => {
                        sizes += 1;
                        size_value = v;
                    }
                    (1, Value::Bytes(packed)) => {
                        let mut values = Fields::new(packed);
                        while values.pos < packed.len() {
                            size_value = values.varint()?;
                            sizes += 1;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    if images != 1 {
        return Err(format!(
            "feature 'image' holds {images} bytes values, not one"
        ));
    }
    if sizes != 1 {
        return Err(format!(
            "feature 'size' holds {sizes} int64 values, not one"
        ));
    }
    Ok((image_bytes, size_value))
}
