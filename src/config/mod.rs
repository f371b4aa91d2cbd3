//! Configuration: DLIO's workload schema with DLIO's code defaults, read from a shipped or user
//! workload file plus the command line's override words, validated into typed structs.
//!
//! Flow: [`Source`] (which workload, which words) → workload tree ([`value::Value`]) → overrides
//! applied → [`Config`] (typed; every bad value is an error naming the key, the value and what is
//! valid; an unknown key is a warning, or an error with `strict`).

pub mod fields;
pub mod formats;
pub mod overrides;
pub mod time_spec;
pub mod value;
pub mod word_value;
pub mod workloads;

use std::path::{Path, PathBuf};

use crate::choice_enum;
use crate::compute::TimeSpec;
use crate::error::{Error, Result};
use fields::Fields;
use overrides::Overrides;
use time_spec::time_spec;
use value::Value;

choice_enum!(Framework { Tensorflow => "tensorflow", Pytorch => "pytorch" });
choice_enum!(
    /// File formats DLIO knows; dlio-rs generates and reads them all ([`Format::SUPPORTED`]).
    Format {
        Tfrecord => "tfrecord", Hdf5 => "hdf5", Csv => "csv", Npz => "npz", Npy => "npy",
        Jpeg => "jpeg", Png => "png", IndexedBinary => "indexed_binary",
        MmapIndexedBinary => "mmap_indexed_binary", Synthetic => "synthetic", Parquet => "parquet",
    }
);
choice_enum!(Compression {
    None => "none", Gzip => "gzip", Lzf => "lzf", Bz2 => "bz2", Zip => "zip", Xz => "xz",
});
choice_enum!(DataLoader {
    Pytorch => "pytorch", Tensorflow => "tensorflow", Dali => "dali", NativeDali => "native_dali",
    Synthetic => "synthetic",
});
choice_enum!(
    /// `off` keeps the natural order, `seed` shuffles with `train.seed`, `random` with fresh entropy.
    Shuffle { Off => "off", Seed => "seed", Random => "random" }
);
choice_enum!(ReadType { OnDemand => "on_demand", Memory => "memory" });
choice_enum!(
    /// `direct_fs` is mlpstorage v3's `--o-direct`: a local file system read with O_DIRECT.
    StorageType {
        LocalFs => "local_fs", ParallelFs => "parallel_fs", DirectFs => "direct_fs", S3 => "s3",
        Aistore => "aistore",
    }
);
choice_enum!(
    /// `subset`: fewer ranks than the model's parallelism, a data parallelism given by
    /// `model.parallelism.data` (mlpstorage's runs with fewer processes).
    CheckpointMode { Default => "default", Subset => "subset" }
);
choice_enum!(
    /// The element types DLIO's checkpoint tensors may have.
    Datatype {
        Int8 => "int8", Uint8 => "uint8", Fp16 => "fp16", Bf16 => "bf16", Fp32 => "fp32",
        Fp64 => "fp64",
    }
);

impl Datatype {
    pub fn bytes(self) -> u64 {
        match self {
            Datatype::Int8 | Datatype::Uint8 => 1,
            Datatype::Fp16 | Datatype::Bf16 => 2,
            Datatype::Fp32 => 4,
            Datatype::Fp64 => 8,
        }
    }
}
choice_enum!(
    /// What the reader does about the kernel's page cache (dlio-rs's own key; DLIO has only
    /// `odirect`): `keep` leaves it, `drop_before_epoch` drops it before every epoch (root),
    /// `evict_after_read` evicts each file's pages right after reading them.
    PageCache { Keep => "keep", DropBeforeEpoch => "drop_before_epoch", EvictAfterRead => "evict_after_read" }
);
choice_enum!(
    /// numpy element types for `record_element_type`.
    ElementType {
        Uint8 => "uint8", Int8 => "int8", Uint16 => "uint16", Int16 => "int16",
        Uint32 => "uint32", Int32 => "int32", Uint64 => "uint64", Int64 => "int64",
        Float16 => "float16", Float32 => "float32", Float64 => "float64",
    }
);

impl ElementType {
    pub fn size(self) -> u64 {
        match self {
            ElementType::Uint8 | ElementType::Int8 => 1,
            ElementType::Uint16 | ElementType::Int16 | ElementType::Float16 => 2,
            ElementType::Uint32 | ElementType::Int32 | ElementType::Float32 => 4,
            ElementType::Uint64 | ElementType::Int64 | ElementType::Float64 => 8,
        }
    }

    /// The numpy `descr` of the type, little-endian.
    pub fn numpy_descr(self) -> &'static str {
        match self {
            ElementType::Uint8 => "|u1",
            ElementType::Int8 => "|i1",
            ElementType::Uint16 => "<u2",
            ElementType::Int16 => "<i2",
            ElementType::Uint32 => "<u4",
            ElementType::Int32 => "<i4",
            ElementType::Uint64 => "<u8",
            ElementType::Int64 => "<i8",
            ElementType::Float16 => "<f2",
            ElementType::Float32 => "<f4",
            ElementType::Float64 => "<f8",
        }
    }
}

impl Format {
    /// Every format; all of them are generated and read.
    pub const SUPPORTED: &'static [Format] = &[
        Format::Npz,
        Format::Npy,
        Format::IndexedBinary,
        Format::MmapIndexedBinary,
        Format::Synthetic,
        Format::Tfrecord,
        Format::Csv,
        Format::Png,
        Format::Jpeg,
        Format::Parquet,
        Format::Hdf5,
    ];
}

#[derive(Debug, Clone)]
pub struct ModelConfig {
    pub name: String,
    pub model_type: Option<String>,
    pub model_size_bytes: u64,
    pub model_datatype: Datatype,
    pub optimizer_datatype: Datatype,
    /// `model.num_layers`; DLIO's -1 (no transformer layers) is 0.
    pub num_layers: u64,
    /// DLIO's legacy predefined tensors (megatron_deepspeed): elements per layer tensor, and per
    /// optimizer group, all int8.
    pub layer_parameters: Vec<u64>,
    pub optimization_groups: Vec<u64>,
    pub parallelism: Parallelism,
    pub transformer: TransformerShape,
}

impl ModelConfig {
    /// DLIO's test for a transformer model (`model.type: transformer`), whose checkpoint is its
    /// layers and optimizer state rather than one `model_size_bytes` blob.
    pub fn is_transformer(&self) -> bool {
        self.model_type.as_deref() == Some("transformer")
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parallelism {
    pub tensor: u64,
    pub pipeline: u64,
    /// Only in `checkpoint.mode: subset`; otherwise the world ÷ (tensor × pipeline).
    pub data: Option<u64>,
    pub zero_stage: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformerShape {
    pub vocab_size: u64,
    pub hidden_size: u64,
    pub ffn_hidden_size: u64,
    pub num_attention_heads: u64,
    pub num_kv_heads: u64,
}

/// The `checkpoint` section.
#[derive(Debug, Clone)]
pub struct CheckpointConfig {
    pub folder: String,
    pub after_epoch: u64,
    pub epochs_between: u64,
    /// `steps_between_checkpoints`; DLIO's -1 (epoch checkpoints) is `None`, and 0 checkpoints
    /// never, as in DLIO.
    pub steps_between: Option<u64>,
    pub fsync: bool,
    /// Seconds slept before each save and load of a checkpoint-only run: DLIO sleeps the absolute
    /// value, so its default -1 sleeps 1 s.
    pub time_between: f64,
    /// Checkpoint-only runs; DLIO's -1 is 0.
    pub num_write: u64,
    pub num_read: u64,
    pub rank_sync: bool,
    pub mode: CheckpointMode,
    pub randomize_tensor: bool,
    /// dlio-rs's own key: write and read the checkpoint with O_DIRECT.
    pub odirect: bool,
}

#[derive(Debug, Clone)]
pub struct Workflow {
    pub generate_data: bool,
    pub train: bool,
    pub evaluation: bool,
    pub checkpoint: bool,
    pub profiling: bool,
}

#[derive(Debug, Clone)]
pub struct StorageConfig {
    pub storage_type: StorageType,
    /// A folder for files; the bucket for `s3`.
    pub storage_root: String,
    /// `storage.storage_options`: how to reach an object store (unused by file systems).
    pub options: ObjectStoreOptions,
    /// dlio-rs's `storage.throttle`: the storage behind an emulated link of known speed.
    pub throttle: Option<Throttle>,
}

/// `storage.throttle.{mib_per_second, latency_ms}` (see `storage::throttle`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throttle {
    pub bytes_per_second: f64,
    pub latency_seconds: f64,
}

/// `storage.storage_options`, as written: DLIO's keys (`endpoint_url`, `region`, credentials,
/// `s3_force_path_style`, `s3_max_attempts`) and dlio-rs's own (`profile`, `max_in_flight`,
/// `request_timeout`, `part_size`). What is not set here comes from the standard `AWS_*`
/// variables and profile files when the storage is set up (`storage::s3`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObjectStoreOptions {
    pub endpoint_url: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    pub session_token: Option<String>,
    /// The profile of `~/.aws/credentials` and `~/.aws/config` to read.
    pub profile: Option<String>,
    /// A PEM file of the certificate authorities an `https` endpoint is checked against, in
    /// place of the public ones (an object store with a private CA).
    pub ca_bundle: Option<String>,
    /// `None`: virtual-host style for AWS's endpoints, path style for any other.
    pub force_path_style: Option<bool>,
    /// Attempts per request, the first included (DLIO's `s3_max_attempts`, 5).
    pub max_attempts: u32,
    /// Requests in flight in this process at most; 0: as many as its threads make (reader
    /// threads × ranks while training).
    pub max_in_flight: u64,
    /// Seconds a request may wait for the server to accept or send bytes before it is retried.
    pub request_timeout: f64,
    /// Bytes per part of a multipart upload; objects up to this size are one PUT.
    pub part_size: u64,
}

/// Why `storage_type: s3` is refused by a build without object storage.
pub const NO_OBJECT_STORE: &str = "workload.storage.storage_type = s3 needs dlio-rs built with \
     object storage: cargo build --release --features s3";

/// Bounds of [`ObjectStoreOptions`]: S3 allows 10,000 parts of 5 MiB to 5 GiB.
pub const MIN_PART_SIZE: u64 = 5 << 20;
pub const MAX_PART_SIZE: u64 = 5 << 30;

#[derive(Debug, Clone)]
pub struct DatasetConfig {
    pub record_length_bytes: u64,
    pub record_length_bytes_stdev: u64,
    pub record_length_bytes_resize: u64,
    pub num_files_train: u64,
    pub num_files_eval: u64,
    pub num_samples_per_file: u64,
    pub data_folder: String,
    pub num_subfolders_train: u64,
    pub num_subfolders_eval: u64,
    pub file_prefix: String,
    pub format: Format,
    pub compression: Compression,
    pub compression_level: i64,
    pub keep_files: bool,
    pub record_dims: Vec<u64>,
    pub record_element_type: ElementType,
    /// DLIO's (MLPerf fork) `skip_listing`: the files must follow the naming scheme; a missing
    /// one is an error, never a reason to list the folder.
    pub skip_listing: bool,
    /// Every how many files the naming scheme is checked before training (the first and last
    /// file always are).
    pub listing_validation_interval: u64,
    pub hdf5: formats::Hdf5Config,
    pub parquet: formats::ParquetConfig,
}

#[derive(Debug, Clone)]
pub struct ReaderConfig {
    pub data_loader: DataLoader,
    pub batch_size: u64,
    pub batch_size_eval: u64,
    pub read_threads: u64,
    pub computation_threads: u64,
    pub prefetch_size: u64,
    pub file_shuffle: Shuffle,
    pub sample_shuffle: Shuffle,
    pub shuffle_size: u64,
    pub read_type: ReadType,
    pub preprocess_time: TimeSpec,
    pub odirect: bool,
    pub page_cache: PageCache,
    /// dlio-rs's own key: decode JPEG/PNG samples as PIL does (True), or only read them.
    pub decode_images: bool,
    /// The read buffer of TensorFlow's TFRecord stream, which DLIO passes as its `buffer_size`
    /// (TensorFlow's 256 KiB when unset; 0 reads unbuffered).
    pub transfer_size: u64,
}

/// TensorFlow's TFRecord read buffer when none is given (`_DEFAULT_READER_BUFFER_SIZE_BYTES`).
pub const TENSORFLOW_READ_BUFFER: u64 = 256 * 1024;
/// The largest `reader.transfer_size` taken: each reader thread holds one such buffer.
const MAX_TRANSFER_SIZE: u64 = 1 << 30;

#[derive(Debug, Clone)]
pub struct TrainConfig {
    pub epochs: u64,
    pub computation_time: TimeSpec,
    /// Steps per epoch are capped at this when positive.
    pub total_training_steps: i64,
    pub seed_change_epoch: bool,
    pub seed: u64,
}

#[derive(Debug, Clone)]
pub struct EvalConfig {
    pub eval_time: TimeSpec,
    pub eval_after_epoch: u64,
    pub epochs_between_evals: u64,
}

#[derive(Debug, Clone)]
pub struct OutputConfig {
    pub folder: Option<String>,
    pub log_file: String,
    pub exclude_start_steps: u64,
    pub exclude_end_steps: u64,
    /// Write one CSV row per sample read to `trace/{rank}.csv` (dlio-rs's own key).
    pub trace: bool,
}

/// The resolved, validated configuration of one run.
#[derive(Debug, Clone)]
pub struct Config {
    pub workload_name: String,
    pub framework: Framework,
    pub model: ModelConfig,
    pub workflow: Workflow,
    pub storage: StorageConfig,
    pub dataset: DatasetConfig,
    pub reader: ReaderConfig,
    pub train: TrainConfig,
    pub evaluation: EvalConfig,
    pub output: OutputConfig,
    pub checkpoint: CheckpointConfig,
    /// `metric.au`: the AU a run must reach to pass, as a fraction.
    pub au_threshold: f64,
    /// The workload tree after overrides: what `config.yaml` saves.
    pub tree: Value,
    /// Keys the tree has that dlio-rs does not know.
    pub unknown_keys: Vec<String>,
}

/// Where a configuration comes from: the Hydra words and an optional `--config-dir`.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub overrides: Overrides,
    pub config_dir: Option<PathBuf>,
}

impl Source {
    pub fn workload_name(&self) -> &str {
        self.overrides.workload.as_deref().unwrap_or("default")
    }

    /// Loads the workload file, applies the overrides and validates.
    pub fn resolve(&self, strict: bool) -> Result<Config> {
        let name = self.workload_name();
        let text = match &self.config_dir {
            Some(dir) => load_from_dir(dir, name)?,
            None => workloads::find(name)
                .ok_or_else(|| Error::usage(workloads::unknown_workload_message(name)))?
                .to_string(),
        };
        let mut tree = Value::from_yaml(&text)
            .map_err(|e| Error::usage(format!("workload '{name}' is not valid YAML: {e}")))?;
        if !matches!(tree, Value::Map(_)) {
            return Err(Error::usage(format!(
                "workload '{name}' must be a mapping of sections"
            )));
        }
        self.overrides.apply(&mut tree)?;
        let config = Config::from_tree(name, tree)?;
        if strict && !config.unknown_keys.is_empty() {
            return Err(Error::usage(format!(
                "unknown configuration keys (rejected by --strict): {}",
                config
                    .unknown_keys
                    .iter()
                    .map(|k| format!("workload.{k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(config)
    }
}

/// The largest workload file read: DLIO's are a few KiB.
const MAX_WORKLOAD_BYTES: u64 = 1 << 20;

fn load_from_dir(dir: &Path, name: &str) -> Result<String> {
    let path = dir.join("workload").join(format!("{name}.yaml"));
    // A FIFO or a device would be read forever; only a file of a workload's size is read.
    match std::fs::metadata(&path) {
        Ok(found) if !found.is_file() => {
            return Err(Error::usage(format!(
                "workload '{name}': {} is not a file",
                path.display()
            )))
        }
        Ok(found) if found.len() > MAX_WORKLOAD_BYTES => {
            return Err(Error::usage(format!(
            "workload '{name}': {} has {} bytes; a workload file has at most {MAX_WORKLOAD_BYTES}",
            path.display(),
            found.len()
        )))
        }
        _ => {}
    }
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let mut message = format!("cannot read workload '{name}' from {}: {e}", path.display());
        let missing = e.kind() == std::io::ErrorKind::NotFound;
        if let (true, Ok(entries)) = (missing, std::fs::read_dir(dir.join("workload"))) {
            let names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".yaml")
                        .map(str::to_string)
                })
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            message.push_str(&workloads::closest_names_hint(name, &refs));
        }
        Error::usage(message)
    })?;
    // OmegaConf would make nothing of it, and DLIO stop on the first key it needs.
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Err(Error::usage(format!(
            "workload '{name}': {} is empty; a workload has DLIO's sections (model, workflow, \
             dataset, reader, train, …)",
            path.display()
        )));
    }
    Ok(text)
}

/// Renames DLIO's alias keys (and the DLIO 2.0 `record_length*` names) to their canonical names (`data_reader` → `reader`,
/// `model.model_size` → `model.model_size_bytes`, `model: NAME` → `model.name`) in the tree that
/// is read, not the one saved.
fn canonical_tree(tree: &Value) -> (Value, Vec<String>) {
    let mut tree = tree.clone();
    let mut ignored = Vec::new();
    // DLIO reads `data_reader` when both are present.
    if tree.get("data_reader").is_some() && tree.remove_path(&["reader"]) {
        ignored.push("reader (ignored: data_reader takes precedence, as in DLIO)".to_string());
    }
    // DLIO 2.0's shipped workloads name the model with a plain string: `model: unet3d`.
    if let Some(Value::Str(name)) = tree.get("model").cloned() {
        let _ = tree.set_path(
            &["model"],
            Value::Map(vec![("name".into(), Value::Str(name))]),
        );
    }
    for (alias, canonical) in [
        (&["data_reader"][..], &["reader"][..]),
        (&["model", "model_size"], &["model", "model_size_bytes"]),
        // DLIO 2.0's names, still in some MLPerf workload files.
        (
            &["dataset", "record_length"],
            &["dataset", "record_length_bytes"],
        ),
        (
            &["dataset", "record_length_stdev"],
            &["dataset", "record_length_bytes_stdev"],
        ),
        (
            &["dataset", "record_length_resize"],
            &["dataset", "record_length_bytes_resize"],
        ),
    ] {
        if tree.get_path(canonical).is_none() {
            if let Some(v) = tree.get_path(alias).cloned() {
                tree.remove_path(alias);
                let _ = tree.set_path(canonical, v);
            }
        }
    }
    (tree, ignored)
}

/// Largest sample count and sample size dlio-rs accepts: 2^48 (281 trillion) keeps every count,
/// byte total and plan position far from overflow.
const MAX_COUNT: u64 = 1 << 48;

/// `storage.throttle`: none unless `mib_per_second` is set.
fn throttle(f: &mut Fields<'_>) -> Option<Throttle> {
    let mib = f.float("storage.throttle.mib_per_second", 0.0);
    let latency_ms = f.float("storage.throttle.latency_ms", 0.0);
    if !(0.0..=1e9).contains(&mib) {
        f.fail(
            "storage.throttle.mib_per_second",
            &Value::Float(mib),
            "expected MiB per second, more than 0 (0 or absent: no throttle), at most 1e9",
        );
        return None;
    }
    if !(0.0..=crate::compute::MAX_SECONDS * 1000.0).contains(&latency_ms) {
        f.fail(
            "storage.throttle.latency_ms",
            &Value::Float(latency_ms),
            "expected milliseconds, 0 or more",
        );
        return None;
    }
    (mib > 0.0).then(|| Throttle {
        bytes_per_second: mib * 1048576.0,
        latency_seconds: latency_ms / 1000.0,
    })
}

/// `storage.storage_options`. DLIO passes its values to its S3 client as strings ("False",
/// "5"), so numbers and booleans are taken written either way.
fn object_store_options(f: &mut Fields<'_>) -> ObjectStoreOptions {
    const KEY: &str = "storage.storage_options";
    let number = |f: &mut Fields<'_>, key: &str, default: f64, min: f64, max: f64, what: &str| {
        let key = format!("{KEY}.{key}");
        let value = match f.raw(&key) {
            None => return default,
            Some(Value::Int(i)) => Some(*i as f64),
            Some(Value::Float(x)) => Some(*x),
            Some(Value::Str(s)) => s.trim().parse::<f64>().ok(),
            Some(_) => None,
        };
        match value {
            Some(v) if v.is_finite() && (min..=max).contains(&v) => v,
            _ => {
                let shown = f.raw(&key).cloned().unwrap_or(Value::Null);
                f.fail(
                    &key,
                    &shown,
                    &format!("expected {what} from {min} to {max}"),
                );
                default
            }
        }
    };
    // mlpstorage v3 names DLIO's Python I/O library; dlio-rs is the engine and needs none.
    f.raw(&format!("{KEY}.storage_library"));
    f.raw(&format!("{KEY}.uri_scheme"));
    let whole = |v: f64| v.fract() == 0.0;
    let max_attempts = number(
        f,
        "s3_max_attempts",
        5.0,
        1.0,
        100.0,
        "a whole number of attempts",
    );
    let max_in_flight = number(
        f,
        "max_in_flight",
        0.0,
        0.0,
        65536.0,
        "a whole number of requests",
    );
    let part_size = number(
        f,
        "part_size",
        (16u64 << 20) as f64,
        MIN_PART_SIZE as f64,
        MAX_PART_SIZE as f64,
        "a number of bytes",
    );
    for (key, value) in [
        ("s3_max_attempts", max_attempts),
        ("max_in_flight", max_in_flight),
        ("part_size", part_size),
    ] {
        if !whole(value) {
            f.fail(
                &format!("{KEY}.{key}"),
                &Value::Float(value),
                "expected a whole number",
            );
        }
    }
    ObjectStoreOptions {
        endpoint_url: f.opt_string(&format!("{KEY}.endpoint_url")),
        region: f.opt_string(&format!("{KEY}.region")),
        access_key_id: f.opt_string(&format!("{KEY}.access_key_id")),
        secret_access_key: f.opt_string(&format!("{KEY}.secret_access_key")),
        session_token: f.opt_string(&format!("{KEY}.session_token")),
        profile: f.opt_string(&format!("{KEY}.profile")),
        ca_bundle: f.opt_string(&format!("{KEY}.ca_bundle")),
        force_path_style: f
            .raw(&format!("{KEY}.s3_force_path_style"))
            .is_some()
            .then(|| f.bool(&format!("{KEY}.s3_force_path_style"), false)),
        max_attempts: max_attempts as u32,
        max_in_flight: max_in_flight as u64,
        request_timeout: number(
            f,
            "request_timeout",
            30.0,
            0.001,
            crate::compute::MAX_SECONDS,
            "a number of seconds",
        ),
        part_size: part_size as u64,
    }
}

fn check_sizes(f: &mut Fields, d: &DatasetConfig) {
    for (files, key) in [
        (d.num_files_train, "num_files_train"),
        (d.num_files_eval, "num_files_eval"),
    ] {
        if files
            .checked_mul(d.num_samples_per_file)
            .is_none_or(|n| n > MAX_COUNT)
        {
            f.fail(
                "dataset.num_samples_per_file",
                &Value::Int(d.num_samples_per_file as i64),
                &format!("with {files} files (dataset.{key}) that is more than 2^48 samples"),
            );
        }
    }
    let dims = d
        .record_dims
        .iter()
        .try_fold(d.num_samples_per_file, |n, &dim| n.checked_mul(dim));
    if !d.record_dims.is_empty() && dims.is_none_or(|elements| elements > MAX_COUNT) {
        let dims = Value::List(
            d.record_dims
                .iter()
                .map(|&v| Value::Int(v as i64))
                .collect(),
        );
        f.fail(
            "dataset.record_dims",
            &dims,
            "a file of these samples would exceed 2^48 elements",
        );
    }
}

/// The most bytes one sample (and its spread) may have: 1 TiB.
const MAX_SAMPLE_BYTES: u64 = 1 << 40;
/// The most files a split may have (2^40), and samples per file or per batch (2^32): beyond them
/// sample counts overflow long before a run could end.
const MAX_FILES: u64 = 1 << 40;
const MAX_IN_ONE: u64 = 1 << 32;
/// The most subfolders a split may have: every one is made, empty or not (ImageNet has 1000).
const MAX_SUBFOLDERS: u64 = 1 << 16;
/// The most epochs a run may have.
const MAX_EPOCHS: u64 = 1_000_000;

fn sample_bytes(f: &mut Fields, key: &str, default: u64) -> u64 {
    let bytes = f.bytes(key, default);
    f.at_most(key, bytes, MAX_SAMPLE_BYTES, "1 TiB for one sample")
}

/// What a value beyond each bound would be, in the error.
const FILES: &str = "files in one split";
const SUBFOLDERS: &str = "folders, each made even when empty";
const BATCH: &str = "samples in one batch";

fn transfer_size(f: &mut Fields) -> u64 {
    let key = "reader.transfer_size";
    let size = f.count(key, TENSORFLOW_READ_BUFFER, 0);
    if size > MAX_TRANSFER_SIZE {
        let what = format!("at most {MAX_TRANSFER_SIZE} bytes (1 GiB), a buffer per reader thread");
        f.fail(key, &Value::Int(size as i64), &what);
        return TENSORFLOW_READ_BUFFER;
    }
    size
}

/// Keys DLIO (or its MLPerf fork) has that dlio-rs reads but does not act on; documented in docs/.
const ACCEPTED_SECTIONS: &[&str] = &[
    "dataset.record_length_bytes_resize",
    "dataset.num_files_generated",
    "dataset.total_disk_bytes",
    "reader.pin_memory",
    "reader.multiprocessing_context",
    "reader.transformed_record_dims",
    "reader.transformed_record_element_type",
    "checkpoint.type",
    "checkpoint.checkpoint_mechanism_classname",
    "checkpoint.recovery_rank_shift",
    "checkpoint.ksm",
    "profiling",
];

impl Config {
    pub fn from_tree(workload_name: &str, tree: Value) -> Result<Config> {
        let (canonical, ignored) = canonical_tree(&tree);
        let mut f = Fields::new(&canonical);
        for key in ACCEPTED_SECTIONS {
            f.raw(key);
        }
        let framework = f.choice("framework", Framework::Tensorflow);
        let model = ModelConfig {
            name: f.string("model.name", "default"),
            model_type: f.opt_string("model.type"),
            model_size_bytes: f.count("model.model_size_bytes", 10240, 0),
            model_datatype: f.choice("model.model_datatype", Datatype::Fp16),
            optimizer_datatype: f.choice("model.optimizer_datatype", Datatype::Fp32),
            num_layers: f.int_at_least("model.num_layers", -1, -1).max(0) as u64,
            layer_parameters: f.uint_list("model.layer_parameters"),
            optimization_groups: f.uint_list("model.optimization_groups"),
            parallelism: Parallelism {
                tensor: f.count("model.parallelism.tensor", 1, 1),
                pipeline: f.count("model.parallelism.pipeline", 1, 1),
                data: u64::try_from(f.int_at_least("model.parallelism.data", -1, -1))
                    .ok()
                    .filter(|&d| d > 0),
                zero_stage: f.count("model.parallelism.zero_stage", 0, 0),
            },
            transformer: TransformerShape {
                vocab_size: f.count("model.transformer.vocab_size", 32000, 1),
                hidden_size: f.count("model.transformer.hidden_size", 2048, 1),
                ffn_hidden_size: f.count("model.transformer.ffn_hidden_size", 8192, 1),
                num_attention_heads: f.count("model.transformer.num_attention_heads", 32, 1),
                num_kv_heads: f.count("model.transformer.num_kv_heads", 8, 1),
            },
        };
        if model.parallelism.zero_stage > 3 {
            f.fail(
                "model.parallelism.zero_stage",
                &Value::Int(model.parallelism.zero_stage as i64),
                "valid ZeRO stages are 0, 1, 2, 3",
            );
        }
        let workflow = Workflow {
            generate_data: f.bool("workflow.generate_data", false),
            train: f.bool("workflow.train", true),
            evaluation: f.bool("workflow.evaluation", false),
            checkpoint: f.bool("workflow.checkpoint", false),
            profiling: f.bool("workflow.profiling", false),
        };
        let storage = StorageConfig {
            storage_type: f.choice("storage.storage_type", StorageType::LocalFs),
            storage_root: f.string("storage.storage_root", "./"),
            options: object_store_options(&mut f),
            throttle: throttle(&mut f),
        };
        let dataset = DatasetConfig {
            record_length_bytes: sample_bytes(&mut f, "dataset.record_length_bytes", 65536),
            record_length_bytes_stdev: sample_bytes(&mut f, "dataset.record_length_bytes_stdev", 0),
            record_length_bytes_resize: sample_bytes(
                &mut f,
                "dataset.record_length_bytes_resize",
                0,
            ),
            num_files_train: f.count_up_to("dataset.num_files_train", 8, 0, MAX_FILES, FILES),
            num_files_eval: f.count_up_to("dataset.num_files_eval", 0, 0, MAX_FILES, FILES),
            num_samples_per_file: f.count_up_to(
                "dataset.num_samples_per_file",
                1,
                1,
                MAX_IN_ONE,
                "samples in one file",
            ),
            data_folder: f.string("dataset.data_folder", "./data/"),
            num_subfolders_train: f.count_up_to(
                "dataset.num_subfolders_train",
                0,
                0,
                MAX_SUBFOLDERS,
                SUBFOLDERS,
            ),
            num_subfolders_eval: f.count_up_to(
                "dataset.num_subfolders_eval",
                0,
                0,
                MAX_SUBFOLDERS,
                SUBFOLDERS,
            ),
            file_prefix: f.file_name("dataset.file_prefix", "img"),
            format: f.choice("dataset.format", Format::Tfrecord),
            compression: f.choice("dataset.compression", Compression::None),
            compression_level: f.int("dataset.compression_level", 4),
            keep_files: f.bool("dataset.keep_files", true),
            record_dims: f.uint_list("dataset.record_dims"),
            record_element_type: f.choice("dataset.record_element_type", ElementType::Uint8),
            skip_listing: f.bool("dataset.skip_listing", false),
            listing_validation_interval: f.count("dataset.listing_validation_interval", 1000, 0),
            hdf5: formats::hdf5(&mut f),
            parquet: formats::parquet(&mut f),
        };
        let reader = ReaderConfig {
            data_loader: f.choice("reader.data_loader", DataLoader::Tensorflow),
            batch_size: f.count_up_to("reader.batch_size", 1, 1, MAX_IN_ONE, BATCH),
            batch_size_eval: f.count_up_to("reader.batch_size_eval", 1, 1, MAX_IN_ONE, BATCH),
            read_threads: f.count("reader.read_threads", 1, 0),
            computation_threads: f.count("reader.computation_threads", 1, 1),
            prefetch_size: f.count("reader.prefetch_size", 2, 0),
            file_shuffle: f.choice("reader.file_shuffle", Shuffle::Off),
            sample_shuffle: f.choice("reader.sample_shuffle", Shuffle::Off),
            shuffle_size: f.count("reader.shuffle_size", 1024, 1),
            read_type: f.choice("reader.read_type", ReadType::OnDemand),
            preprocess_time: time_spec(&mut f, "reader.preprocess_time"),
            // mlpstorage v3's `--o-direct` asks for it through the storage type.
            odirect: f.bool("reader.odirect", false)
                || storage.storage_type == StorageType::DirectFs,
            page_cache: f.choice("reader.page_cache", PageCache::Keep),
            decode_images: f.bool("reader.decode_images", true),
            transfer_size: transfer_size(&mut f),
        };
        let train = TrainConfig {
            epochs: f.count_up_to(
                "train.epochs",
                1,
                1,
                MAX_EPOCHS,
                "a run of more epochs keeps a record of each",
            ),
            computation_time: time_spec(&mut f, "train.computation_time"),
            total_training_steps: f.int("train.total_training_steps", -1),
            seed_change_epoch: f.bool("train.seed_change_epoch", true),
            seed: f.count("train.seed", 123, 0),
        };
        let evaluation = EvalConfig {
            eval_time: time_spec(&mut f, "evaluation.eval_time"),
            eval_after_epoch: f.count("evaluation.eval_after_epoch", 1, 0),
            epochs_between_evals: f.count("evaluation.epochs_between_evals", 1, 1),
        };
        let output = OutputConfig {
            folder: {
                let folder = f.opt_string("output.folder");
                if folder.as_deref() == Some("") {
                    let what = "expected a folder's path; leave it unset for Hydra's run folder";
                    f.fail("output.folder", &Value::Str(String::new()), what);
                }
                folder.filter(|folder| !folder.is_empty())
            },
            log_file: f.file_name("output.log_file", "dlio.log"),
            exclude_start_steps: f.count("output.metric.exclude_start_steps", 1, 0),
            exclude_end_steps: f.count("output.metric.exclude_end_steps", 0, 0),
            trace: f.bool("output.trace", false),
        };
        let checkpoint = CheckpointConfig {
            // DLIO strips a trailing slash from a configured folder.
            folder: f
                .string("checkpoint.checkpoint_folder", "./checkpoints/")
                .trim_end_matches('/')
                .to_string(),
            after_epoch: f.count("checkpoint.checkpoint_after_epoch", 1, 0),
            epochs_between: f.count("checkpoint.epochs_between_checkpoints", 1, 1),
            steps_between: u64::try_from(f.int_at_least(
                "checkpoint.steps_between_checkpoints",
                -1,
                -1,
            ))
            .ok(),
            fsync: f.bool("checkpoint.fsync", false),
            time_between: {
                let key = "checkpoint.time_between_checkpoints";
                let seconds = f.float(key, -1.0).abs();
                if seconds > crate::compute::MAX_SECONDS {
                    f.fail(
                        key,
                        &Value::Float(seconds),
                        "must be at most 1e6 s (11.6 days)",
                    );
                }
                seconds.min(crate::compute::MAX_SECONDS)
            },
            num_write: f
                .int_at_least("checkpoint.num_checkpoints_write", -1, -1)
                .max(0) as u64,
            num_read: f
                .int_at_least("checkpoint.num_checkpoints_read", -1, -1)
                .max(0) as u64,
            rank_sync: f.bool("checkpoint.rank_sync", false),
            mode: f.choice("checkpoint.mode", CheckpointMode::Default),
            randomize_tensor: f.bool("checkpoint.randomize_tensor", true),
            // mlpstorage v3's `--o-direct` asks for it through the storage type.
            odirect: f.bool("checkpoint.odirect", false)
                || storage.storage_type == StorageType::DirectFs,
        };
        let au_threshold = f.float("metric.au", 0.90);
        if !(au_threshold > 0.0 && au_threshold <= 1.0) {
            f.fail(
                "metric.au",
                &Value::Float(au_threshold),
                "must be a fraction in (0, 1], e.g. 0.90",
            );
        }
        check_sizes(&mut f, &dataset);
        let (errors, mut unknown_keys) = f.finish();
        unknown_keys.extend(ignored);
        if !errors.is_empty() {
            return Err(Error::usage(format!(
                "invalid configuration:\n  {}",
                errors.join("\n  ")
            )));
        }
        Ok(Config {
            workload_name: workload_name.to_string(),
            framework,
            model,
            workflow,
            storage,
            dataset,
            reader,
            train,
            evaluation,
            output,
            checkpoint,
            au_threshold,
            tree,
            unknown_keys,
        })
    }

    /// Fails with a clear message when the configuration asks for something not built yet.
    pub fn check_supported(&self) -> Result<()> {
        let not_yet = |what: String, fix: &str| {
            Err(Error::usage(format!(
                "{what} is not supported yet by dlio-rs {}; {fix}",
                env!("CARGO_PKG_VERSION")
            )))
        };
        match self.storage.storage_type {
            StorageType::LocalFs | StorageType::ParallelFs | StorageType::DirectFs => {}
            StorageType::S3 if cfg!(feature = "s3") => {
                if self.dataset.format == Format::MmapIndexedBinary {
                    return Err(Error::usage(
                        "workload.dataset.format = mmap_indexed_binary reads by mapping files \
                         into memory, and objects in a bucket cannot be mapped: use \
                         indexed_binary (the same data, read with ranged GETs)",
                    ));
                }
            }
            StorageType::S3 => return Err(Error::usage(NO_OBJECT_STORE)),
            other => {
                return not_yet(
                    format!("workload.storage.storage_type = {other}"),
                    "supported storage types are local_fs, parallel_fs, direct_fs, s3",
                )
            }
        }
        if matches!(
            self.reader.data_loader,
            DataLoader::Dali | DataLoader::NativeDali | DataLoader::Synthetic
        ) {
            return not_yet(
                format!("workload.reader.data_loader = {}", self.reader.data_loader),
                "supported loaders are pytorch, tensorflow",
            );
        }
        Ok(())
    }

    /// The data folder, resolved against `storage.storage_root` as DLIO does for relative paths.
    pub fn data_folder(&self) -> PathBuf {
        self.resolve_against_storage_root(&self.dataset.data_folder)
    }

    /// The checkpoint folder: `checkpoint.checkpoint_folder`, resolved against
    /// `storage.storage_root` as DLIO does for relative paths.
    pub fn checkpoint_folder(&self) -> PathBuf {
        self.resolve_against_storage_root(&self.checkpoint.folder)
    }

    /// A folder of the configuration, below `storage.storage_root` when relative.
    pub fn resolve_against_storage_root(&self, folder: &str) -> PathBuf {
        let folder = Path::new(folder);
        if folder.is_absolute()
            || self.storage.storage_root == "./"
            || self.storage.storage_root.is_empty()
        {
            folder.to_path_buf()
        } else {
            Path::new(&self.storage.storage_root).join(folder)
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn resolve(words: &[&str]) -> Result<Config> {
        Source {
            overrides: Overrides::parse(words)?,
            config_dir: None,
        }
        .resolve(false)
    }

    #[test]
    fn defaults_are_dlio_code_defaults() {
        let c = Config::from_tree("t", Value::empty_map()).unwrap();
        assert_eq!(c.framework, Framework::Tensorflow);
        assert_eq!(c.dataset.record_length_bytes, 65536);
        assert_eq!(c.dataset.num_files_train, 8);
        assert_eq!(c.dataset.format, Format::Tfrecord);
        assert_eq!(c.dataset.file_prefix, "img");
        assert_eq!(c.reader.batch_size, 1);
        assert_eq!(c.reader.read_threads, 1);
        assert_eq!(c.reader.prefetch_size, 2);
        assert_eq!(c.train.seed, 123);
        assert_eq!(c.train.epochs, 1);
        assert_eq!(c.output.exclude_start_steps, 1);
        assert_eq!(c.model.model_size_bytes, 10240);
        assert_eq!(c.au_threshold, 0.90);
    }

    #[test]
    fn yaml_off_is_shuffle_off_and_aliases_work() {
        let tree = Value::from_yaml(
            "data_reader:\n  file_shuffle: off\n  sample_shuffle: seed\nmodel:\n  model_size: 499153191\n",
        )
        .unwrap();
        let short = Config::from_tree("t", Value::from_yaml("model: unet3d\n").unwrap()).unwrap();
        assert_eq!(short.model.name, "unet3d");
        assert!(short.unknown_keys.is_empty());
        let c = Config::from_tree("t", tree).unwrap();
        assert_eq!(c.reader.file_shuffle, Shuffle::Off);
        assert_eq!(c.reader.sample_shuffle, Shuffle::Seed);
        assert_eq!(c.model.model_size_bytes, 499153191);
        assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
    }

    #[test]
    fn sizes_that_would_overflow_are_rejected() {
        for yaml in [
            "dataset:\n  num_samples_per_file: 9223372036854775807\n",
            "dataset:\n  num_files_eval: 4294967297\n  num_samples_per_file: 65536\n",
            "dataset:\n  record_dims: [100000000, 100000000]\n",
        ] {
            let err = Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap_err();
            let said = err.to_string();
            assert!(
                said.contains("2^48") || said.contains("at most 4294967296"),
                "{yaml}: {err}"
            );
        }
        let fine = "dataset:\n  num_files_train: 1000000\n  num_samples_per_file: 1000\n  record_dims: [4, 4]\n";
        assert!(Config::from_tree("t", Value::from_yaml(fine).unwrap()).is_ok());
    }

    #[test]
    fn dlio_2_names_and_reader_precedence() {
        let tree = Value::from_yaml(
            "dataset:\n  record_length: 114660.07\n  record_length_stdev: 10\nreader:\n  batch_size: 3\ndata_reader:\n  batch_size: 5\n",
        )
        .unwrap();
        let c = Config::from_tree("t", tree).unwrap();
        assert_eq!(c.dataset.record_length_bytes, 114660);
        assert_eq!(c.dataset.record_length_bytes_stdev, 10);
        assert_eq!(c.reader.batch_size, 5, "data_reader wins, as in DLIO");
        assert_eq!(c.unknown_keys.len(), 1);
        assert!(
            c.unknown_keys[0].starts_with("reader (ignored"),
            "{:?}",
            c.unknown_keys
        );
    }

    #[test]
    fn bad_values_name_key_value_and_valid_set() {
        let tree = Value::from_yaml(
            "dataset:\n  format: npzz\nreader:\n  batch_size: 0\n  file_shuffle: yes\n",
        )
        .unwrap();
        let err = Config::from_tree("t", tree).unwrap_err();
        let text = err.to_string();
        assert_eq!(err.exit_code(), 2);
        assert!(
            text.contains("workload.dataset.format = 'npzz'") && text.contains("npz, npy"),
            "{text}"
        );
        assert!(
            text.contains("workload.reader.batch_size = 0: must be at least 1"),
            "{text}"
        );
        assert!(
            text.contains("workload.reader.file_shuffle = true")
                && text.contains("off, seed, random"),
            "{text}"
        );
    }

    #[test]
    fn transfer_size_is_tensorflow_s_buffer_by_default_and_bounded() {
        let parse = |yaml: &str| Config::from_tree("t", Value::from_yaml(yaml).unwrap());
        let default = parse("reader:\n  batch_size: 1\n").unwrap();
        assert_eq!(default.reader.transfer_size, TENSORFLOW_READ_BUFFER);
        for size in [0, 4096, MAX_TRANSFER_SIZE] {
            let c = parse(&format!("reader:\n  transfer_size: {size}\n")).unwrap();
            assert_eq!(c.reader.transfer_size, size);
        }
        for (bad, why) in [
            ("-1", "must be at least 0"),
            ("1073741825", "at most 1073741824 bytes"),
            ("big", "expected an integer"),
        ] {
            let err = parse(&format!("reader:\n  transfer_size: {bad}\n")).unwrap_err();
            assert_eq!(err.exit_code(), 2);
            let text = err.to_string();
            assert!(
                text.contains("workload.reader.transfer_size") && text.contains(why),
                "{text}"
            );
        }
    }

    #[test]
    fn unknown_keys_warn_or_fail_with_strict() {
        let c = resolve(&[
            "workload=default",
            "++workload.dataset.colour=blue",
            "++workload.extra.x=1",
        ])
        .unwrap();
        assert_eq!(
            c.unknown_keys,
            vec!["dataset.colour".to_string(), "extra".to_string()]
        );
        let source = Source {
            overrides: Overrides::parse(&["workload=default", "++workload.dataset.colour=blue"])
                .unwrap(),
            config_dir: None,
        };
        let err = source.resolve(true).unwrap_err();
        assert!(err.to_string().contains("workload.dataset.colour"), "{err}");
    }

    #[test]
    fn unknown_workload_suggests_close_names() {
        let err = resolve(&["workload=unet3d_h10"]).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("unet3d_h100"), "{err}");
    }

    #[test]
    fn config_dir_workloads() {
        let dir = std::env::temp_dir().join(format!("dlio-rs-config-dir-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("workload")).unwrap();
        std::fs::write(
            dir.join("workload/mine.yaml"),
            "dataset:\n  format: npy\n  num_files_train: 3\n",
        )
        .unwrap();
        let source = Source {
            overrides: Overrides::parse(&["workload=mine"]).unwrap(),
            config_dir: Some(dir.clone()),
        };
        let c = source.resolve(true).unwrap();
        assert_eq!(c.dataset.format, Format::Npy);
        assert_eq!(c.dataset.num_files_train, 3);
        let source = Source {
            overrides: Overrides::parse(&["workload=mien"]).unwrap(),
            config_dir: Some(dir.clone()),
        };
        let err = source.resolve(false).unwrap_err();
        assert!(err.to_string().contains("mine"), "{err}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn not_supported_yet_is_clear() {
        let c = resolve(&[
            "workload=default",
            "++workload.storage.storage_type=aistore",
        ])
        .unwrap();
        let err = c.check_supported().unwrap_err();
        assert_eq!(err.exit_code(), 2);
        assert!(err.to_string().contains("not supported yet"), "{err}");
        let s3 = resolve(&["workload=default", "++workload.storage.storage_type=s3"]).unwrap();
        let built_in = s3.check_supported().map_err(|e| e.to_string());
        if cfg!(feature = "s3") {
            assert_eq!(built_in, Ok(()));
        } else {
            assert!(built_in.unwrap_err().contains("--features s3"));
        }
        let mapped = resolve(&[
            "workload=default",
            "++workload.storage.storage_type=s3",
            "++workload.dataset.format=mmap_indexed_binary",
        ])
        .unwrap();
        let err = mapped.check_supported().unwrap_err().to_string();
        assert!(
            err.contains("mmap_indexed_binary") || err.contains("--features s3"),
            "{err}"
        );
    }

    #[test]
    fn object_store_options_take_dlio_s_strings_and_refuse_what_cannot_work() {
        let c = resolve(&[
            "workload=default",
            "++workload.storage.storage_options.s3_force_path_style=False",
            "++workload.storage.storage_options.s3_max_attempts='7'",
            "++workload.storage.storage_options.endpoint_url=http://127.0.0.1:9000",
            "++workload.storage.storage_options.part_size=8388608",
        ])
        .unwrap();
        let o = &c.storage.options;
        assert_eq!(o.force_path_style, Some(false));
        assert_eq!(o.max_attempts, 7);
        assert_eq!(o.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(o.part_size, 8 << 20);
        assert_eq!(o.request_timeout, 30.0);
        for (word, fragment) in [
            ("s3_max_attempts=0", "from 1 to 100"),
            ("part_size=1024", "from 5242880"),
            ("request_timeout=-1", "a number of seconds"),
            ("max_in_flight=2.5", "whole number"),
        ] {
            let err = resolve(&[
                "workload=default",
                &format!("++workload.storage.storage_options.{word}"),
            ])
            .unwrap_err()
            .to_string();
            assert!(
                err.contains(fragment) && err.contains("storage_options"),
                "{word}: {err}"
            );
        }
    }
}
