//! The typed configuration: [`Config`] with its sections, the enumerations their keys choose
//! from, and the constants decoding shares with the rest of dlio-rs (the refusal of `s3` by a
//! build without it, an object store's part sizes, TensorFlow's read buffer). Nothing here reads
//! the workload tree: `decode.rs` fills these structs, so that what a run is configured with reads
//! apart from how each value is checked.

use std::path::{Path, PathBuf};

use super::formats;
use super::value::Value;
use crate::choice_enum;
use crate::compute::TimeSpec;

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
    /// `aistore` is asked through AIStore's S3 API; `azure` (Azure Blob Storage) and `gcs`
    /// (Google Cloud Storage) are dlio-rs's own.
    StorageType {
        LocalFs => "local_fs", ParallelFs => "parallel_fs", DirectFs => "direct_fs", S3 => "s3",
        Aistore => "aistore", Azure => "azure", Gcs => "gcs",
    }
);

impl StorageType {
    /// An object store, read over the network: nothing of it is in this host's page cache.
    pub fn is_object_store(self) -> bool {
        matches!(
            self,
            StorageType::S3 | StorageType::Aistore | StorageType::Azure | StorageType::Gcs
        )
    }
}
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
    /// What a traced run writes per rank in `trace/` (dlio-rs's own key, `output.trace_format`):
    /// `csv` the read rows `dlio-rs audit` checks, `chrome` Chrome trace events that Perfetto
    /// opens, `pfw` DFTracer's lines as Python DLIO writes them, `all` the three.
    TraceFormat { Csv => "csv", Chrome => "chrome", Pfw => "pfw", All => "all" }
);

impl TraceFormat {
    /// Whether `trace/{rank}.csv`, the audit's trace, is written.
    pub fn csv(self) -> bool {
        matches!(self, TraceFormat::Csv | TraceFormat::All)
    }

    /// Whether `trace/{rank}.json` (Chrome trace events) is written.
    pub fn chrome(self) -> bool {
        matches!(self, TraceFormat::Chrome | TraceFormat::All)
    }

    /// Whether `trace/trace-{rank}-of-{world}.pfw` (DFTracer) is written.
    pub fn pfw(self) -> bool {
        matches!(self, TraceFormat::Pfw | TraceFormat::All)
    }
}

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
    /// Seconds to wait after a generation before reading (DLIO's fork's
    /// `storage.post_generation_settle_seconds`), for stores whose new objects take time to be
    /// seen everywhere; any storage but `local_fs`.
    pub post_generation_settle_seconds: f64,
}

/// `storage.throttle.{mib_per_second, latency_ms}` (see `storage::throttle`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Throttle {
    pub bytes_per_second: f64,
    pub latency_seconds: f64,
}

/// `storage.storage_options`, as written: DLIO's keys (`endpoint_url`, `region`, credentials,
/// `s3_force_path_style`, `s3_max_attempts`) and dlio-rs's own (`profile`, `max_in_flight`,
/// `request_timeout`, `part_size`, `parts_in_flight`, `verify_writes`, `endpoint_urls`,
/// `endpoint_spread`). What is not set here comes from the standard `AWS_*`
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
    /// Parts of one object uploaded at once, and pieces of one object read ahead by a
    /// checkpoint load: each holds `part_size` (or a piece's) bytes in memory.
    pub parts_in_flight: u64,
    /// How a written object is checked before it counts.
    pub verify_writes: VerifyWrites,
    /// Several endpoints of one store (`endpoint_urls`, else `S3_ENDPOINT_URIS`): empty for one.
    pub endpoint_urls: Vec<String>,
    /// How a process's requests are spread over several endpoints.
    pub endpoint_spread: EndpointSpread,
    /// Azure Blob Storage (`azure`): the storage account, its key (SharedKey signing) or a SAS
    /// token; what is not set comes from the `AZURE_STORAGE_*` variables (`storage::azure`).
    pub account_name: Option<String>,
    pub account_key: Option<String>,
    pub sas_token: Option<String>,
}

choice_enum!(
    /// `storage.storage_options.verify_writes`: what proves a written object whole.
    VerifyWrites { Etag => "etag", Size => "size" }
);

choice_enum!(
    /// `storage.storage_options.endpoint_spread`: which of several endpoints a request goes to.
    EndpointSpread { Rank => "rank", Requests => "requests" }
);

// `choice_enum!` takes no attributes on its variants, so `#[default]` cannot be written there.
#[allow(clippy::derivable_impls)]
impl Default for VerifyWrites {
    fn default() -> Self {
        VerifyWrites::Etag
    }
}

#[allow(clippy::derivable_impls)]
impl Default for EndpointSpread {
    fn default() -> Self {
        EndpointSpread::Rank
    }
}

/// Why `storage_type: s3` is refused by a build without object storage.
pub const NO_OBJECT_STORE: &str = "workload.storage.storage_type = s3 (and aistore, asked through \
     its S3 API) needs dlio-rs built with S3: cargo build --release --features s3";

/// Why `storage_type: azure` is refused by a build without Azure Blob Storage.
pub const NO_AZURE: &str = "workload.storage.storage_type = azure needs dlio-rs built with \
     Azure Blob Storage: cargo build --release --features azure";

/// Why `storage_type: gcs` is refused by a build without Google Cloud Storage.
pub const NO_GCS: &str = "workload.storage.storage_type = gcs needs dlio-rs built with Google \
     Cloud Storage: cargo build --release --features gcs";

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
    /// dlio-rs's own key: the time the framework takes, on the training thread, to hand each
    /// ready batch to the training loop (spent after the batch is ready, counted in its load
    /// time); 0 by default: the loop of a framework that costs nothing per step.
    pub batch_handoff_time: TimeSpec,
    pub odirect: bool,
    pub page_cache: PageCache,
    /// dlio-rs's own key: decode JPEG/PNG samples as PIL does (True), or only read them.
    pub decode_images: bool,
    /// DALI's readers (`native_dali`) read files with read calls (True) rather than mapping them
    /// (DLIO's `dont_use_mmap`, False by default; True in its resnet50 workloads).
    pub dont_use_mmap: bool,
    /// The read buffer of TensorFlow's TFRecord stream, which DLIO passes as its `buffer_size`
    /// (TensorFlow's 256 KiB when unset; 0 reads unbuffered).
    pub transfer_size: u64,
}

/// PyTorch's rule for the batches each reader thread may hold ahead of the trainer, as DLIO sets
/// it: `ceil(prefetch_size / read_threads)`, 2 when that is 0.
pub fn prefetch_factor(read_threads: u64, prefetch_size: u64) -> u64 {
    let factor = match read_threads {
        0 => prefetch_size,
        threads => prefetch_size.div_ceil(threads),
    };
    if factor == 0 {
        2
    } else {
        factor
    }
}

impl ReaderConfig {
    /// This configuration's [`prefetch_factor`].
    pub fn prefetch_factor(&self) -> u64 {
        prefetch_factor(self.read_threads, self.prefetch_size)
    }

    /// The depth of DLIO's DALI pipeline: `prefetch_size`, or 2 when it is 0 (DLIO's choice).
    pub fn dali_queue_depth(&self) -> u64 {
        if self.prefetch_size == 0 {
            2
        } else {
            self.prefetch_size
        }
    }

    /// The batches a rank's loader can have read before the trainer asks for them (none when
    /// the training loop reads each batch itself).
    pub fn batches_in_flight(&self) -> u64 {
        self.read_threads.saturating_mul(self.prefetch_factor())
    }
}

/// TensorFlow's TFRecord read buffer when none is given (`_DEFAULT_READER_BUFFER_SIZE_BYTES`).
pub const TENSORFLOW_READ_BUFFER: u64 = 256 * 1024;

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
    /// Write the run's trace to `trace/` (dlio-rs's own key), in `trace_format`.
    pub trace: bool,
    pub trace_format: TraceFormat,
    /// Seconds between the lines of `timeseries.jsonl` (dlio-rs's own key); 0 writes none.
    pub timeseries_interval: f64,
    /// Where each process serves its metrics page (dlio-rs's own key); `None`: nowhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
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

impl Config {
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
