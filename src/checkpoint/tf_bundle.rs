//! TensorFlow's checkpoint format, as `tf.train.Checkpoint(**state).save(prefix)` writes it
//! (TensorFlow 2.21's tensor bundle, `tensor_bundle.cc`, and its LevelDB-style table,
//! `table_builder.cc`): what DLIO's TensorFlow checkpointing leaves per shard.
//!
//! A save of a state dict writes two files and rewrites a third:
//! - `{prefix}-1.data-00000-of-00001`: every tensor's bytes back to back, no padding, in the
//!   breadth-first order of the object graph (the root's entries sorted by name, then
//!   `save_counter`, an int64 scalar 1; nested dicts keep their insertion order), then the
//!   `_CHECKPOINTABLE_OBJECT_GRAPH` string tensor (`[varint64 length][masked CRC32C of the
//!   length][the TrackableObjectGraph proto]`);
//! - `{prefix}-1.index`: a table (one data block per 256 KiB of entries, restart points every 16
//!   keys; an empty metaindex block; an index block; the 48-byte footer) mapping `""` to the
//!   BundleHeaderProto and each tensor's key, sorted, to its BundleEntryProto (dtype, shape,
//!   offset, size, masked CRC32C of its bytes);
//! - `checkpoint`, in the prefix's folder: the text proto naming the last checkpoint saved there.
//!
//! Everything but the tensors' bytes (and so their CRCs) follows from the state's shape: a
//! [`Bundle`] is planned from a [`StateDict`] before any byte is written, so every file's size is
//! known up front, and the index is built once the data file's CRCs are known. Checked byte for
//! byte against TensorFlow 2.21 (the tests below, tests/checkpoint.rs, and
//! benches/tf_checkpoint_check.py, which has TensorFlow restore and re-save a run's shards).

use std::collections::{BTreeMap, HashSet, VecDeque};

use crate::config::Datatype;

/// The name `tf.train.Checkpoint.save` gives a first save: DLIO makes a new `Checkpoint` object
/// per shard, so its save counter is always 1.
pub const SAVE_SUFFIX: &str = "-1";
/// The data file's suffix after the checkpoint prefix (one shard).
pub const DATA_SUFFIX: &str = ".data-00000-of-00001";
pub const INDEX_SUFFIX: &str = ".index";
/// The folder's bookkeeping file `tf.train.Checkpoint.save` rewrites.
pub const CHECKPOINT_FILE: &str = "checkpoint";

const GRAPH_KEY: &str = "_CHECKPOINTABLE_OBJECT_GRAPH";
const SAVE_COUNTER: &str = "save_counter";
const ATTRIBUTE: &str = "VARIABLE_VALUE";
const KEY_SUFFIX: &str = "/.ATTRIBUTES/VARIABLE_VALUE";
/// A `tf.Variable` made without a name (DLIO's `get_tensor_core`) is called this in eager mode.
const VARIABLE_NAME: &str = "Variable";
/// TensorFlow's `table::Options` defaults, which the bundle writer keeps.
const BLOCK_SIZE: usize = 262_144;
const RESTART_INTERVAL: usize = 16;
const TABLE_MAGIC: u64 = 0xdb47_7524_8b80_fb57;
const FOOTER_BYTES: usize = 48;

/// One `tf.Variable` of a state dict: 1-D, `elements` long. Variables with the same `id` are
/// the same object (DLIO's legacy layer dict, shared by every layer), saved once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variable {
    pub id: u64,
    pub dtype: Datatype,
    pub elements: u64,
}

/// A value of a state dict: a variable or a nested dict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Variable(Variable),
    Dict(StateDict),
}

/// A state dict as DLIO builds it: names and values, in insertion order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateDict(pub Vec<(String, Value)>);

impl StateDict {
    /// The payload bytes: every distinct variable's elements times their size.
    pub fn payload_bytes(&self) -> u64 {
        let mut seen = HashSet::new();
        let mut total = 0;
        self.each_variable(&mut |v| {
            if seen.insert(v.id) {
                total += v.elements * v.dtype.bytes();
            }
        });
        total
    }

    fn each_variable(&self, f: &mut dyn FnMut(&Variable)) {
        for (_, value) in &self.0 {
            match value {
                Value::Variable(v) => f(v),
                Value::Dict(d) => d.each_variable(f),
            }
        }
    }

    fn has_variables(&self) -> bool {
        let mut any = false;
        self.each_variable(&mut |_| any = true);
        any
    }
}

/// A dict's entries, borrowed.
type Entries<'a> = Vec<(&'a str, &'a Value)>;

/// What a stretch of the data file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Content {
    /// A variable's bytes: written fresh, its CRC taken as they stream.
    Payload,
    /// `save_counter`, int64 1.
    SaveCounter,
    /// The object graph string tensor, the last of the file.
    Graph,
}

/// One tensor of the data file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tensor {
    pub key: String,
    /// TensorFlow's `DataType` number.
    dtype: u32,
    /// `None` for a scalar.
    length: Option<u64>,
    pub offset: u64,
    pub size: u64,
    pub content: Content,
}

/// The files of one save, planned from the state: tensors in the data file's order, the fixed
/// bytes, and the sizes.
#[derive(Debug, Clone)]
pub struct Bundle {
    pub tensors: Vec<Tensor>,
    /// The object graph tensor's bytes as stored (length, its checksum, the proto).
    graph: Vec<u8>,
    graph_crc: u32,
    data_bytes: u64,
    index_bytes: u64,
}

/// TensorFlow's `DataType` numbers.
fn tf_dtype(dtype: Datatype) -> u32 {
    match dtype {
        Datatype::Fp32 => 1,
        Datatype::Fp64 => 2,
        Datatype::Uint8 => 4,
        Datatype::Int8 => 6,
        Datatype::Bf16 => 14,
        Datatype::Fp16 => 19,
    }
}
const DT_STRING: u32 = 7;
const DT_INT64: u32 = 9;

/// The save counter's stored bytes (int64 1, little-endian).
pub const SAVE_COUNTER_BYTES: [u8; 8] = 1u64.to_le_bytes();

impl Bundle {
    /// Plans the save of `state` (DLIO's `tf.train.Checkpoint(**state).save`).
    ///
    /// # Panics
    /// If a name is not of DLIO's kind (letters, digits, `_`), which TensorFlow would escape.
    pub fn plan(state: &StateDict) -> Bundle {
        // The object graph, breadth first. Each node: its children (id, name), whether it or
        // those below hold values, and the variable it is.
        enum Node<'a> {
            Dict {
                children: Vec<(usize, &'a str)>,
                has_values: bool,
            },
            Variable {
                key: String,
                variable: Option<Variable>,
            },
        }
        let mut nodes: Vec<Node> = Vec::new();
        let mut ids: BTreeMap<u64, usize> = BTreeMap::new();
        let mut root: Entries = state.0.iter().map(|(k, v)| (k.as_str(), v)).collect();
        // tf.train.Checkpoint(**kwargs) sorts its keyword arguments.
        root.sort_by(|a, b| a.0.cmp(b.0));
        nodes.push(Node::Dict {
            children: Vec::new(),
            has_values: true,
        });
        // Dicts waiting to be expanded: their node, their path, their entries.
        let mut pending: VecDeque<(usize, String, Entries)> = VecDeque::new();
        pending.push_back((0, String::new(), root));
        let mut root_done = false;
        while let Some((parent, path, entries)) = pending.pop_front() {
            let mut children = Vec::new();
            for (name, value) in entries {
                assert!(
                    name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                    "state dict name {name:?} is not one TensorFlow keeps unescaped"
                );
                let child_path = format!("{path}{name}");
                match value {
                    Value::Variable(v) => {
                        if let Some(&id) = ids.get(&v.id) {
                            children.push((id, name));
                            continue;
                        }
                        ids.insert(v.id, nodes.len());
                        children.push((nodes.len(), name));
                        nodes.push(Node::Variable {
                            key: format!("{child_path}{KEY_SUFFIX}"),
                            variable: Some(*v),
                        });
                    }
                    Value::Dict(d) => {
                        children.push((nodes.len(), name));
                        nodes.push(Node::Dict {
                            children: Vec::new(),
                            has_values: d.has_variables(),
                        });
                        pending.push_back((
                            nodes.len() - 1,
                            format!("{child_path}/"),
                            d.0.iter().map(|(k, v)| (k.as_str(), v)).collect(),
                        ));
                    }
                }
            }
            if !root_done {
                // The root's save_counter comes after its own entries.
                root_done = true;
                children.push((nodes.len(), SAVE_COUNTER));
                nodes.push(Node::Variable {
                    key: format!("{SAVE_COUNTER}{KEY_SUFFIX}"),
                    variable: None,
                });
            }
            if let Node::Dict { children: c, .. } = &mut nodes[parent] {
                *c = children;
            }
        }

        let mut graph = Vec::new();
        let mut tensors = Vec::new();
        let mut offset = 0u64;
        for node in &nodes {
            let mut object = Vec::new();
            match node {
                Node::Dict {
                    children,
                    has_values,
                } => {
                    for &(id, name) in children {
                        let mut reference = Vec::new();
                        varint_field(&mut reference, 1, id as u64);
                        bytes_field(&mut reference, 2, name.as_bytes());
                        bytes_field(&mut object, 1, &reference);
                    }
                    bytes_field(&mut object, 5, &bool_value(*has_values));
                }
                Node::Variable { key, variable } => {
                    let full_name = if variable.is_some() {
                        VARIABLE_NAME
                    } else {
                        SAVE_COUNTER
                    };
                    let mut attribute = Vec::new();
                    bytes_field(&mut attribute, 1, ATTRIBUTE.as_bytes());
                    bytes_field(&mut attribute, 2, full_name.as_bytes());
                    bytes_field(&mut attribute, 3, key.as_bytes());
                    bytes_field(&mut object, 2, &attribute);
                    bytes_field(&mut object, 5, &bool_value(true));
                    let (dtype, length, size, content) = match variable {
                        Some(v) => (
                            tf_dtype(v.dtype),
                            Some(v.elements),
                            v.elements * v.dtype.bytes(),
                            Content::Payload,
                        ),
                        None => (DT_INT64, None, 8, Content::SaveCounter),
                    };
                    tensors.push(Tensor {
                        key: key.clone(),
                        dtype,
                        length,
                        offset,
                        size,
                        content,
                    });
                    offset += size;
                }
            }
            bytes_field(&mut graph, 1, &object);
        }

        // The string tensor: its length as a varint, the masked CRC of the length (as 4 bytes),
        // then the bytes; its entry's CRC runs over the length, that checksum and the bytes.
        let length = u32::try_from(graph.len()).expect("an object graph under 4 GiB");
        let mut crc = crc32c::crc32c(&length.to_le_bytes());
        let masked_length_crc = mask(crc);
        crc = crc32c::crc32c_append(crc, &masked_length_crc.to_le_bytes());
        crc = crc32c::crc32c_append(crc, &graph);
        let mut stored = Vec::with_capacity(graph.len() + 14);
        put_varint(&mut stored, graph.len() as u64);
        stored.extend_from_slice(&masked_length_crc.to_le_bytes());
        stored.extend_from_slice(&graph);
        tensors.push(Tensor {
            key: GRAPH_KEY.to_string(),
            dtype: DT_STRING,
            length: None,
            offset,
            size: stored.len() as u64,
            content: Content::Graph,
        });
        let data_bytes = offset + stored.len() as u64;
        let mut bundle = Bundle {
            tensors,
            graph: stored,
            graph_crc: crc,
            data_bytes,
            index_bytes: 0,
        };
        // A CRC's value never changes the index's length (a fixed32 that proto3 leaves out only
        // when 0, which a masked CRC of TensorFlow's bundles never is here: see `mask`).
        let crcs = vec![0u32; bundle.tensors.len()];
        bundle.index_bytes = bundle.index(&crcs).len() as u64;
        bundle
    }

    /// The data file's size.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }

    /// The index file's size.
    pub fn index_bytes(&self) -> u64 {
        self.index_bytes
    }

    /// The object graph tensor as stored, the last bytes of the data file.
    pub fn graph(&self) -> &[u8] {
        &self.graph
    }

    /// The CRC32C (unmasked) of a tensor whose bytes are fixed by the plan.
    pub fn fixed_crc(&self, content: Content) -> Option<u32> {
        match content {
            Content::Payload => None,
            Content::SaveCounter => Some(crc32c::crc32c(&SAVE_COUNTER_BYTES)),
            Content::Graph => Some(self.graph_crc),
        }
    }

    /// The index file, given the CRC32C (unmasked) of every tensor, in [`Bundle::tensors`]'
    /// order.
    ///
    /// # Panics
    /// If `crcs` does not have one CRC per tensor.
    pub fn index(&self, crcs: &[u32]) -> Vec<u8> {
        assert_eq!(crcs.len(), self.tensors.len(), "one CRC per tensor");
        let mut entries: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
        for (tensor, &crc) in self.tensors.iter().zip(crcs) {
            entries.insert(&tensor.key, entry_proto(tensor, crc));
        }
        // BundleHeaderProto: one shard, little-endian (0, left out), version { producer: 1 }.
        let mut header = Vec::new();
        varint_field(&mut header, 1, 1);
        let mut version = Vec::new();
        varint_field(&mut version, 1, 1);
        bytes_field(&mut header, 3, &version);
        let mut table = TableBuilder::default();
        table.add(b"", &header);
        for (key, value) in &entries {
            table.add(key.as_bytes(), value);
        }
        table.finish()
    }
}

/// The `checkpoint` file's text after saving `name` (the checkpoint's file name, `{suffix}-1`,
/// relative to the folder: TensorFlow writes relative paths for a save in the file's folder).
pub fn checkpoint_state(name: &str) -> String {
    format!("model_checkpoint_path: \"{name}\"\nall_model_checkpoint_paths: \"{name}\"\n")
}

/// BundleEntryProto: dtype, shape (always present, empty for a scalar), shard 0 (left out),
/// offset, size, masked CRC, each left out when 0 as proto3 does.
fn entry_proto(tensor: &Tensor, crc: u32) -> Vec<u8> {
    let mut entry = Vec::new();
    varint_field(&mut entry, 1, u64::from(tensor.dtype));
    let mut shape = Vec::new();
    if let Some(length) = tensor.length {
        let mut dim = Vec::new();
        varint_field(&mut dim, 1, length);
        bytes_field(&mut shape, 2, &dim);
    }
    bytes_field(&mut entry, 2, &shape);
    varint_field(&mut entry, 4, tensor.offset);
    varint_field(&mut entry, 5, tensor.size);
    let masked = mask(crc);
    if masked != 0 {
        entry.push(6 << 3 | 5);
        entry.extend_from_slice(&masked.to_le_bytes());
    }
    entry
}

/// google.protobuf.BoolValue: `value` left out when false.
fn bool_value(value: bool) -> Vec<u8> {
    let mut message = Vec::new();
    varint_field(&mut message, 1, u64::from(value));
    message
}

/// A varint field, left out when 0 (proto3).
fn varint_field(out: &mut Vec<u8>, field: u32, value: u64) {
    if value != 0 {
        put_varint(out, u64::from(field << 3));
        put_varint(out, value);
    }
}

/// A length-delimited field (always written: messages set explicitly, non-empty strings).
fn bytes_field(out: &mut Vec<u8>, field: u32, value: &[u8]) {
    put_varint(out, u64::from(field << 3 | 2));
    put_varint(out, value.len() as u64);
    out.extend_from_slice(value);
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// LevelDB's (and TensorFlow's) masked CRC: stored CRCs are rotated and offset so that a CRC of
/// data holding CRCs stays well mixed.
pub fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// A table block: prefix-compressed entries, a restart point every `interval` keys.
struct BlockBuilder {
    buffer: Vec<u8>,
    restarts: Vec<u32>,
    counter: usize,
    interval: usize,
    last_key: Vec<u8>,
}

impl BlockBuilder {
    fn new(interval: usize) -> BlockBuilder {
        BlockBuilder {
            buffer: Vec::new(),
            restarts: vec![0],
            counter: 0,
            interval,
            last_key: Vec::new(),
        }
    }

    fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.counter < self.interval {
            key.iter()
                .zip(&self.last_key)
                .take_while(|(a, b)| a == b)
                .count()
        } else {
            self.restarts.push(self.buffer.len() as u32);
            self.counter = 0;
            0
        };
        put_varint(&mut self.buffer, shared as u64);
        put_varint(&mut self.buffer, (key.len() - shared) as u64);
        put_varint(&mut self.buffer, value.len() as u64);
        self.buffer.extend_from_slice(&key[shared..]);
        self.buffer.extend_from_slice(value);
        self.last_key = key.to_vec();
        self.counter += 1;
    }

    fn size_estimate(&self) -> usize {
        self.buffer.len() + 4 * self.restarts.len() + 4
    }

    fn is_empty(&self) -> bool {
        self.buffer.is_empty()
    }

    /// The block's bytes; the builder starts afresh.
    fn finish(&mut self) -> Vec<u8> {
        let mut block = std::mem::take(&mut self.buffer);
        for restart in &self.restarts {
            block.extend_from_slice(&restart.to_le_bytes());
        }
        block.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        *self = BlockBuilder::new(self.interval);
        block
    }
}

/// TensorFlow's `table::TableBuilder` without compression or filters.
struct TableBuilder {
    out: Vec<u8>,
    data: BlockBuilder,
    index: BlockBuilder,
    last_key: Vec<u8>,
    /// The handle of the last data block written, waiting for the next key to make its
    /// index entry's separator.
    pending: Option<(u64, u64)>,
}

impl Default for TableBuilder {
    fn default() -> TableBuilder {
        TableBuilder {
            out: Vec::new(),
            data: BlockBuilder::new(RESTART_INTERVAL),
            index: BlockBuilder::new(1),
            last_key: Vec::new(),
            pending: None,
        }
    }
}

impl TableBuilder {
    fn add(&mut self, key: &[u8], value: &[u8]) {
        if let Some(handle) = self.pending.take() {
            shortest_separator(&mut self.last_key, key);
            self.index.add(&self.last_key, &encode_handle(handle));
        }
        self.last_key = key.to_vec();
        self.data.add(key, value);
        if self.data.size_estimate() >= BLOCK_SIZE {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.data.is_empty() {
            let block = self.data.finish();
            self.pending = Some(self.write_block(&block));
        }
    }

    /// Writes a block and its trailer (type 0, no compression; masked CRC of block and type).
    fn write_block(&mut self, block: &[u8]) -> (u64, u64) {
        let handle = (self.out.len() as u64, block.len() as u64);
        self.out.extend_from_slice(block);
        let crc = crc32c::crc32c_append(crc32c::crc32c(block), &[0]);
        self.out.push(0);
        self.out.extend_from_slice(&mask(crc).to_le_bytes());
        handle
    }

    fn finish(mut self) -> Vec<u8> {
        self.flush();
        let metaindex = BlockBuilder::new(RESTART_INTERVAL).finish();
        let metaindex = self.write_block(&metaindex);
        if let Some(handle) = self.pending.take() {
            short_successor(&mut self.last_key);
            self.index.add(&self.last_key, &encode_handle(handle));
        }
        let index = self.index.finish();
        let index = self.write_block(&index);
        let mut footer = encode_handle(metaindex);
        footer.extend_from_slice(&encode_handle(index));
        footer.resize(FOOTER_BYTES - 8, 0);
        footer.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        self.out.extend_from_slice(&footer);
        self.out
    }
}

fn encode_handle((offset, size): (u64, u64)) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, offset);
    put_varint(&mut out, size);
    out
}

/// The bytewise comparator's `FindShortestSeparator`: a short key in [start, limit).
fn shortest_separator(start: &mut Vec<u8>, limit: &[u8]) {
    let common = start.iter().zip(limit).take_while(|(a, b)| a == b).count();
    if common < start.len().min(limit.len()) {
        let byte = start[common];
        if byte < 0xff && byte + 1 < limit[common] {
            start[common] += 1;
            start.truncate(common + 1);
        }
    }
}

/// The bytewise comparator's `FindShortSuccessor`: a short key at or after `key`.
fn short_successor(key: &mut Vec<u8>) {
    if let Some(i) = key.iter().position(|&b| b != 0xff) {
        key[i] += 1;
        key.truncate(i + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(id: u64, dtype: Datatype, elements: u64) -> Value {
        Value::Variable(Variable {
            id,
            dtype,
            elements,
        })
    }

    /// TensorFlow 2.21's own files for DLIO's legacy optimizer state of test_checkpoint_epoch
    /// (`{"0": {"a", "b"}, "1": {"a", "b"}, "combined"}`, int8 1024, 1024, 128, 128, 1152) holding
    /// ones (`tf.ones`, so that the CRCs are known): the whole index, and the object graph tensor
    /// that ends the data file, saved by `tf.train.Checkpoint(**state).save` (tensorflow-cpu
    /// 2.21.0).
    const TF_INDEX: [&str; 10] = [
        "00000608011a020801001e14302f612f2e415454524942555445532f5641524941424c455f56414c5545080612051203",
        "0880082088092880083554bf89fd021c14622f2e415454524942555445532f5641524941424c455f56414c5545080612",
        "0512030880082088112880083554bf89fd001e14312f612f2e415454524942555445532f5641524941424c455f56414c",
        "554508061205120308800120881928800135c12c2334021c14622f2e415454524942555445532f5641524941424c455f",
        "56414c554508061205120308800120881a28800135c12c2334001c0f5f434845434b504f494e5441424c455f4f424a45",
        "43545f47524150480807120020881b28800435dc19e7cb002311636f6d62696e65642f2e415454524942555445532f56",
        "41524941424c455f56414c5545080612051203088009288009350447652900270e736176655f636f756e7465722f2e41",
        "5454524942555445532f5641524941424c455f56414c5545080912002080092808350175de410000000001000000007d",
        "4d3387000000000100000000c0f2a1b00001037400fe02000000000100000000a6226f3583030890030f000000000000",
        "0000000000000000000000000000000000000000000000000000000057fb808b247547db",
    ];
    const TF_GRAPH: [&str; 11] = [
        "fa035db1e3f70a320a0508011201300a0508021201310a0c08031208636f6d62696e65640a100804120c736176655f63",
        "6f756e7465722a0208010a120a0508051201610a0508061201622a0208010a120a0508071201610a0508081201622a02",
        "08010a45123f0a0e5641524941424c455f56414c554512085661726961626c651a23636f6d62696e65642f2e41545452",
        "4942555445532f5641524941424c455f56414c55452a0208010a4d12470a0e5641524941424c455f56414c5545120c73",
        "6176655f636f756e7465721a27736176655f636f756e7465722f2e415454524942555445532f5641524941424c455f56",
        "414c55452a0208010a40123a0a0e5641524941424c455f56414c554512085661726961626c651a1e302f612f2e415454",
        "524942555445532f5641524941424c455f56414c55452a0208010a40123a0a0e5641524941424c455f56414c55451208",
        "5661726961626c651a1e302f622f2e415454524942555445532f5641524941424c455f56414c55452a0208010a40123a",
        "0a0e5641524941424c455f56414c554512085661726961626c651a1e312f612f2e415454524942555445532f56415249",
        "41424c455f56414c55452a0208010a40123a0a0e5641524941424c455f56414c554512085661726961626c651a1e312f",
        "622f2e415454524942555445532f5641524941424c455f56414c55452a020801",
    ];

    fn unhex(lines: &[&str]) -> Vec<u8> {
        let hex: String = lines.concat();
        (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn the_index_and_the_object_graph_are_tensorflows_byte_for_byte() {
        let pair = |first: u64, elements: u64| {
            Value::Dict(StateDict(vec![
                ("a".into(), var(first, Datatype::Int8, elements)),
                ("b".into(), var(first + 1, Datatype::Int8, elements)),
            ]))
        };
        let state = StateDict(vec![
            ("0".into(), pair(1, 1024)),
            ("1".into(), pair(3, 128)),
            ("combined".into(), var(5, Datatype::Int8, 1152)),
        ]);
        let bundle = Bundle::plan(&state);
        assert_eq!((bundle.data_bytes(), bundle.index_bytes()), (3976, 468));
        assert_eq!(bundle.graph(), unhex(&TF_GRAPH));
        assert_eq!(bundle.tensors.last().unwrap().offset, 3976 - 512);
        let crcs: Vec<u32> = bundle
            .tensors
            .iter()
            .map(|t| match t.content {
                Content::Payload => crc32c::crc32c(&vec![1u8; t.size as usize]),
                fixed => bundle.fixed_crc(fixed).unwrap(),
            })
            .collect();
        assert_eq!(bundle.index(&crcs), unhex(&TF_INDEX));
    }

    #[test]
    fn an_empty_state_holds_the_save_counter_and_the_graph() {
        // TensorFlow 2.21's save of tf.train.Checkpoint(): data 116 bytes, index 199.
        let bundle = Bundle::plan(&StateDict::default());
        assert_eq!((bundle.data_bytes(), bundle.index_bytes()), (116, 199));
        assert_eq!(
            bundle.tensors[0].key,
            "save_counter/.ATTRIBUTES/VARIABLE_VALUE"
        );
        assert_eq!((bundle.tensors[1].offset, bundle.tensors[1].size), (8, 108));
    }

    #[test]
    fn the_root_is_sorted_and_nested_dicts_keep_their_order() {
        let layer = |first: u64| {
            Value::Dict(StateDict(
                ["0", "1", "10", "2"]
                    .iter()
                    .enumerate()
                    .map(|(i, k)| (k.to_string(), var(first + i as u64, Datatype::Int8, 1)))
                    .collect(),
            ))
        };
        let state = StateDict(vec![
            ("2".into(), layer(0)),
            ("10".into(), layer(10)),
            ("1".into(), var(20, Datatype::Fp16, 3)),
        ]);
        let bundle = Bundle::plan(&state);
        let keys: Vec<&str> = bundle
            .tensors
            .iter()
            .map(|t| t.key.trim_end_matches(KEY_SUFFIX))
            .collect();
        assert_eq!(
            keys,
            [
                "1",
                "save_counter",
                "10/0",
                "10/1",
                "10/10",
                "10/2",
                "2/0",
                "2/1",
                "2/10",
                "2/2",
                GRAPH_KEY
            ]
        );
    }

    #[test]
    fn a_shared_variable_is_saved_once_under_its_first_path() {
        let shared = StateDict(vec![("0".into(), var(7, Datatype::Int8, 16))]);
        let state = StateDict(vec![
            ("1".into(), Value::Dict(shared.clone())),
            ("2".into(), Value::Dict(shared)),
        ]);
        let bundle = Bundle::plan(&state);
        let keys: Vec<&str> = bundle.tensors.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "save_counter/.ATTRIBUTES/VARIABLE_VALUE",
                "1/0/.ATTRIBUTES/VARIABLE_VALUE",
                GRAPH_KEY
            ]
        );
        // Measured with TensorFlow 2.21 (DLIO's legacy layer dict of test_checkpoint_epoch).
        assert_eq!((bundle.data_bytes(), bundle.index_bytes()), (239, 251));
        assert_eq!(state.payload_bytes(), 16);
    }

    #[test]
    fn separators_and_successors_are_leveldbs() {
        let mut start = b"abcd".to_vec();
        shortest_separator(&mut start, b"abzz");
        assert_eq!(start, b"abd");
        let mut start = b"abc".to_vec();
        shortest_separator(&mut start, b"abd");
        assert_eq!(start, b"abc", "no shorter key fits");
        let mut key = b"save_counter".to_vec();
        short_successor(&mut key);
        assert_eq!(key, b"t");
    }
}
