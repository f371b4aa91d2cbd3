//! The per-format keys of `dataset` (`hdf5.*`, `parquet.*`) and of `reader` that only some formats
//! use (`decode_images`).

use super::fields::{Choice, Fields};
use super::value::Value;
use super::ElementType;
use crate::choice_enum;

/// `dataset.hdf5`: how HDF5 files are laid out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Hdf5Config {
    /// Chunk shape of every records dataset (`[]`: contiguous, unless compression needs chunks).
    pub chunk_dims: Vec<u64>,
    /// Datasets `records_0..` per file, each holding every sample's share of the first axis.
    pub num_dset_per_record: u64,
}

choice_enum!(
    /// How a parquet sample is read: the row group holding it (only the columns marked `read`), or
    /// the whole file's marked columns at once (`pq.read_table`).
    ParquetReadMode { RowGroup => "row_group", WholeFile => "whole_file" }
);

/// The type of a parquet column's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    /// Numbers of one numpy type.
    Number(ElementType),
    /// Opaque bytes (`binary`), `size` of them per row.
    Binary,
}

impl ColumnType {
    /// Bytes of one element.
    pub fn element_bytes(self) -> u64 {
        match self {
            ColumnType::Number(element) => element.size(),
            ColumnType::Binary => 1,
        }
    }
}

/// One column of `dataset.parquet.columns`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetColumn {
    pub name: String,
    pub dtype: ColumnType,
    /// Elements per row: 1 is a scalar column; more is a list column of that many (DLIO's layout).
    pub size: u64,
    /// Whether the reader fetches this column (the MLPerf dlrm reads 40 of 200).
    pub read: bool,
}

impl ParquetColumn {
    pub fn row_bytes(&self) -> u64 {
        self.size * self.dtype.element_bytes()
    }
}

/// `dataset.parquet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParquetConfig {
    /// Empty: one list column `data` of the sample's bytes (uint8), as DLIO writes without a schema.
    pub columns: Vec<ParquetColumn>,
    pub row_group_size: u64,
    pub read_mode: ParquetReadMode,
}

pub(super) fn hdf5(f: &mut Fields) -> Hdf5Config {
    f.raw("dataset.hdf5.max_shape");
    Hdf5Config {
        chunk_dims: f.uint_list("dataset.hdf5.chunk_dims"),
        num_dset_per_record: f.count("dataset.hdf5.num_dset_per_record", 1, 1),
    }
}

const COLUMN_KEYS: &str = "name, dtype, size, read";

pub(super) fn parquet(f: &mut Fields) -> ParquetConfig {
    let key = "dataset.parquet.columns";
    let mut columns = Vec::new();
    match f.raw(key) {
        None => {}
        Some(Value::List(items)) => {
            for (i, item) in items.iter().enumerate() {
                match column(item) {
                    Ok(column) => columns.push(column),
                    Err(why) => f.fail(&format!("{key}[{i}]"), item, &why),
                }
            }
        }
        Some(other) => f.fail(
            key,
            other,
            "expected a list of columns, e.g. [{name: x, dtype: float32, size: 1024}]",
        ),
    }
    // Reading none, a run would measure nothing while reporting the nominal rate.
    if !columns.is_empty() && columns.iter().all(|c| !c.read) {
        if let Some(value) = f.raw(key).cloned() {
            f.fail(
                key,
                &value,
                "every column has read: False; at least one must be read",
            );
        }
    }
    ParquetConfig {
        columns,
        row_group_size: f.count("dataset.parquet.row_group_size", 1024, 1),
        read_mode: f.choice("dataset.parquet.read_mode", ParquetReadMode::RowGroup),
    }
}

/// The most elements in one column of one row: a sample of 2^32 elements is far beyond any
/// dataset, and keeps byte counts from overflowing.
const MAX_COLUMN_SIZE: i64 = 1 << 32;

fn column(item: &Value) -> Result<ParquetColumn, String> {
    let Value::Map(entries) = item else {
        return Err(format!("expected a mapping with keys {COLUMN_KEYS}"));
    };
    let mut name = None;
    let mut dtype = ColumnType::Number(ElementType::Float32);
    let mut size = 1;
    let mut read = true;
    for (key, value) in entries {
        match (key.as_str(), value) {
            ("name", Value::Str(s)) if !s.is_empty() => name = Some(s.clone()),
            ("dtype", Value::Str(s)) => {
                dtype = match s.as_str() {
                    "binary" => ColumnType::Binary,
                    "list" => ColumnType::Number(ElementType::Float32),
                    other => ElementType::parse(other)
                        .map(ColumnType::Number)
                        .ok_or_else(|| {
                            format!(
                                "dtype '{other}' is not one of {}, list, binary",
                                ElementType::valid_names()
                            )
                        })?,
                }
            }
            ("size", Value::Int(n)) if (1..=MAX_COLUMN_SIZE).contains(n) => size = *n as u64,
            ("read", Value::Bool(b)) => read = *b,
            (known @ ("name" | "dtype" | "size" | "read"), value) => {
                let valid = match known {
                    "name" => "a name that is not empty",
                    "dtype" => "a type name",
                    "size" => "a whole number of elements from 1 to 2^32",
                    _ => "True or False",
                };
                return Err(format!(
                    "bad {known}: {}; expected {valid}",
                    value.to_flow_yaml()
                ));
            }
            (other, _) => {
                return Err(format!(
                    "unknown key '{other}'; valid keys are {COLUMN_KEYS}"
                ))
            }
        }
    }
    let name = name.ok_or_else(|| "a column needs a name".to_string())?;
    Ok(ParquetColumn {
        name,
        dtype,
        size,
        read,
    })
}
