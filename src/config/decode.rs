//! Decoding: the workload tree (after overrides) into the typed [`Config`], with DLIO's code
//! defaults for what the tree leaves out. DLIO's alias keys are renamed first; every field is then
//! read through [`Fields`], which names the key, the value and what is valid when a value is bad,
//! and dlio-rs's own limits keep counts and sizes far from overflow. [`Config::check_supported`]
//! is the last check: what this build of dlio-rs cannot run yet.

use std::net::SocketAddr;

use super::fields::Fields;
use super::formats;
use super::schema::{
    CheckpointConfig, CheckpointMode, Compression, Config, DataLoader, DatasetConfig, Datatype,
    ElementType, EndpointSpread, EvalConfig, Format, Framework, ModelConfig, ObjectStoreOptions,
    OutputConfig, PageCache, Parallelism, ReadType, ReaderConfig, Shuffle, StorageConfig,
    StorageType, Throttle, TraceFormat, TrainConfig, TransformerShape, VerifyWrites, Workflow,
    MAX_PART_SIZE, MIN_PART_SIZE, NO_AZURE, NO_GCS, NO_OBJECT_STORE, TENSORFLOW_READ_BUFFER,
};
use super::time_spec::{own_time_spec, time_spec};
use super::value::Value;
use crate::error::{Error, Result};

/// The address `output.metrics_listen` gives: `PORT` (on loopback), `HOST:PORT` or
/// `[IPv6]:PORT`; the error says what is valid.
pub fn listen_address(text: &str) -> std::result::Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse::<SocketAddr>().map_err(|_| {
        format!(
            "{text:?} is not an address to listen on: expected PORT (loopback), IP:PORT or \
             [IPv6]:PORT, e.g. 9464 or 0.0.0.0:9464"
        )
    })
}

/// The intervals `output.timeseries_interval` may take, in seconds, besides 0 (off): a line per
/// rank per interval stays small beside the run's reads, and at least one comes per hour.
const TIMESERIES_INTERVALS: std::ops::RangeInclusive<f64> = 0.01..=3600.0;

/// DLIO's alias keys and the canonical key each is read as (dotted, below `workload.`): its
/// own, and DLIO 2.0's names still in some MLPerf workload files. A plain `model: NAME` is read
/// as `model.name` besides.
pub const ALIASES: &[(&str, &str)] = &[
    ("data_reader", "reader"),
    ("model.model_size", "model.model_size_bytes"),
    ("dataset.record_length", "dataset.record_length_bytes"),
    (
        "dataset.record_length_stdev",
        "dataset.record_length_bytes_stdev",
    ),
    (
        "dataset.record_length_resize",
        "dataset.record_length_bytes_resize",
    ),
];

/// Renames DLIO's [`ALIASES`] to their canonical names (`data_reader` → `reader`,
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
    for (alias, canonical) in ALIASES {
        let alias: Vec<&str> = alias.split('.').collect();
        let canonical: Vec<&str> = canonical.split('.').collect();
        if tree.get_path(&canonical).is_none() {
            if let Some(v) = tree.get_path(&alias).cloned() {
                tree.remove_path(&alias);
                let _ = tree.set_path(&canonical, v);
            }
        }
    }
    (tree, ignored)
}

impl Config {
    /// The keys (dotted, below `workload.`) whose values differ between this configuration and
    /// the built-in workload `name`, aliases read as their canonical names: changed, added or
    /// removed, in the order of this configuration's tree, then the removed ones. `None` when
    /// there is no such built-in workload.
    pub fn keys_changed_from(&self, name: &str) -> Option<Vec<String>> {
        let text = super::workloads::find(name)?;
        let base = Value::from_yaml(text).ok()?;
        let (base, _) = canonical_tree(&base);
        let (mine, _) = canonical_tree(&self.tree);
        let (base_leaves, my_leaves) = (base.leaves(), mine.leaves());
        let mut changed: Vec<String> = my_leaves
            .iter()
            .filter(|(key, value)| {
                base_leaves
                    .iter()
                    .find(|(k, _)| k == key)
                    .is_none_or(|(_, v)| !same_value(v, value))
            })
            .map(|(key, _)| key.clone())
            .collect();
        changed.extend(
            base_leaves
                .iter()
                .filter(|(key, _)| !my_leaves.iter().any(|(k, _)| k == key))
                .map(|(key, _)| key.clone()),
        );
        Some(changed)
    }
}

/// Values equal as OmegaConf compares them: `0.9` and `0.90`, `5` and `5.0` are the same.
fn same_value(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(i), Value::Float(f)) | (Value::Float(f), Value::Int(i)) => *i as f64 == *f,
        _ => a == b,
    }
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

/// `storage.post_generation_settle_seconds` (DLIO's fork's key): 0 or more seconds.
fn settle_seconds(f: &mut Fields<'_>) -> f64 {
    const KEY: &str = "storage.post_generation_settle_seconds";
    let seconds = f.float(KEY, 0.0);
    if !(0.0..=crate::compute::MAX_SECONDS).contains(&seconds) {
        f.fail(KEY, &Value::Float(seconds), "expected seconds, 0 or more");
        return 0.0;
    }
    seconds
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
    let parts_in_flight = number(
        f,
        "parts_in_flight",
        8.0,
        1.0,
        10000.0,
        "a whole number of parts",
    );
    for (key, value) in [
        ("s3_max_attempts", max_attempts),
        ("max_in_flight", max_in_flight),
        ("part_size", part_size),
        ("parts_in_flight", parts_in_flight),
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
        parts_in_flight: parts_in_flight as u64,
        verify_writes: f.choice(&format!("{KEY}.verify_writes"), VerifyWrites::Etag),
        endpoint_urls: endpoint_urls(f, &format!("{KEY}.endpoint_urls")),
        endpoint_spread: f.choice(&format!("{KEY}.endpoint_spread"), EndpointSpread::Rank),
        account_name: f.opt_string(&format!("{KEY}.account_name")),
        account_key: f.opt_string(&format!("{KEY}.account_key")),
        sas_token: f.opt_string(&format!("{KEY}.sas_token")),
    }
}

/// `storage.storage_options.endpoint_urls`: a list of URLs, or one string of them separated by
/// commas (as `S3_ENDPOINT_URIS` writes them); empty when absent.
fn endpoint_urls(f: &mut Fields<'_>, key: &str) -> Vec<String> {
    let split = |text: &str| -> Vec<String> {
        text.split(',')
            .map(str::trim)
            .filter(|url| !url.is_empty())
            .map(str::to_string)
            .collect()
    };
    match f.raw(key) {
        None => Vec::new(),
        Some(Value::Str(text)) => split(text),
        Some(Value::List(items)) => {
            let urls: Option<Vec<String>> = items
                .iter()
                .map(|item| match item {
                    Value::Str(url) => Some(url.trim().to_string()),
                    _ => None,
                })
                .collect();
            match urls {
                Some(urls) => urls.into_iter().filter(|url| !url.is_empty()).collect(),
                None => {
                    let shown = Value::List(items.clone());
                    f.fail(key, &shown, "expected a list of endpoint URLs");
                    Vec::new()
                }
            }
        }
        Some(other) => {
            let shown = other.clone();
            f.fail(
                key,
                &shown,
                "expected endpoint URLs: a list, or one string separated by commas",
            );
            Vec::new()
        }
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
    let dims_value = || {
        Value::List(
            d.record_dims
                .iter()
                .map(|&v| Value::Int(v as i64))
                .collect(),
        )
    };
    // DLIO refuses more (its config.py validate), in these words; a generator that cut the shape
    // to two sizes would write images of another size than the one asked for.
    if matches!(d.format, Format::Png | Format::Jpeg) && d.record_dims.len() > 2 {
        f.fail(
            "dataset.record_dims",
            &dims_value(),
            &format!(
                "{} format does not support more than 2 dimensions, but got {} dimensions. An \
                 image's record_dims are [height, width] (or [height]: one pixel wide)",
                d.format,
                d.record_dims.len()
            ),
        );
    }
    let dims = d
        .record_dims
        .iter()
        .try_fold(d.num_samples_per_file, |n, &dim| n.checked_mul(dim));
    if !d.record_dims.is_empty() && dims.is_none_or(|elements| elements > MAX_COUNT) {
        f.fail(
            "dataset.record_dims",
            &dims_value(),
            "a file of these samples would exceed 2^48 elements",
        );
    }
}

/// The most bytes one sample (and its spread) may have: 1 TiB.
const MAX_SAMPLE_BYTES: u64 = 1 << 40;
/// The most files a split may have (2^40), and samples per file or per batch (2^32): beyond them
/// sample counts overflow long before a run could end.
pub const MAX_FILES: u64 = 1 << 40;
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

/// The largest `reader.transfer_size` taken: each reader thread holds one such buffer.
pub(super) const MAX_TRANSFER_SIZE: u64 = 1 << 30;

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

/// The sections of a [`Config`], as [`read_sections`] reads them from a tree.
struct Sections {
    framework: Framework,
    model: ModelConfig,
    workflow: Workflow,
    storage: StorageConfig,
    dataset: DatasetConfig,
    reader: ReaderConfig,
    train: TrainConfig,
    evaluation: EvalConfig,
    output: OutputConfig,
    checkpoint: CheckpointConfig,
    au_threshold: f64,
}

/// Every key the decoding reads, dotted (below `workload.`), each once, in reading order: DLIO's,
/// dlio-rs's own, and those accepted without effect; a key that holds a section of free keys
/// (`profiling`, a time distribution) is one entry. The aliases are [`ALIASES`]. Every read is
/// made whatever the tree holds, so the reads of an empty tree are all of them.
pub fn known_keys() -> Vec<String> {
    let empty = Value::Map(Vec::new());
    let mut f = Fields::new(&empty);
    read_sections(&mut f);
    f.known_keys()
}

/// Reads every section of the configuration from `f`'s tree, DLIO's code defaults for what it
/// leaves out; a bad value is recorded in `f` and replaced by its default.
fn read_sections(f: &mut Fields) -> Sections {
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
        options: object_store_options(f),
        throttle: throttle(f),
        post_generation_settle_seconds: settle_seconds(f),
    };
    let dataset = DatasetConfig {
        record_length_bytes: sample_bytes(f, "dataset.record_length_bytes", 65536),
        record_length_bytes_stdev: sample_bytes(f, "dataset.record_length_bytes_stdev", 0),
        record_length_bytes_resize: sample_bytes(f, "dataset.record_length_bytes_resize", 0),
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
        hdf5: formats::hdf5(f),
        parquet: formats::parquet(f),
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
        preprocess_time: time_spec(f, "reader.preprocess_time"),
        batch_handoff_time: own_time_spec(f, "reader.batch_handoff_time"),
        // mlpstorage v3's `--o-direct` asks for it through the storage type.
        odirect: f.bool("reader.odirect", false) || storage.storage_type == StorageType::DirectFs,
        page_cache: f.choice("reader.page_cache", PageCache::Keep),
        decode_images: f.bool("reader.decode_images", true),
        dont_use_mmap: f.bool("reader.dont_use_mmap", false),
        transfer_size: transfer_size(f),
    };
    let train = TrainConfig {
        epochs: f.count_up_to(
            "train.epochs",
            1,
            1,
            MAX_EPOCHS,
            "a run of more epochs keeps a record of each",
        ),
        computation_time: time_spec(f, "train.computation_time"),
        total_training_steps: f.int("train.total_training_steps", -1),
        seed_change_epoch: f.bool("train.seed_change_epoch", true),
        seed: f.count("train.seed", 123, 0),
    };
    let evaluation = EvalConfig {
        eval_time: time_spec(f, "evaluation.eval_time"),
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
        trace_format: f.choice("output.trace_format", TraceFormat::Csv),
        timeseries_interval: {
            let key = "output.timeseries_interval";
            let seconds = f.float(key, 1.0);
            if seconds != 0.0 && !TIMESERIES_INTERVALS.contains(&seconds) {
                let what = "expected 0 (no time series) or seconds from 0.01 to 3600";
                f.fail(key, &Value::Float(seconds), what);
            }
            seconds
        },
        metrics_listen: {
            let key = "output.metrics_listen";
            let address = f.opt_string(key).filter(|a| !a.is_empty());
            address.and_then(|text| match listen_address(&text) {
                Ok(address) => Some(address),
                Err(what) => {
                    f.fail(key, &Value::Str(text), &what);
                    None
                }
            })
        },
    };
    if let (Some(address), 0.0) = (output.metrics_listen, output.timeseries_interval) {
        let what = "the metrics page is the time series' latest interval: it needs                     output.timeseries_interval above 0";
        f.fail(
            "output.metrics_listen",
            &Value::Str(address.to_string()),
            what,
        );
    }
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
    check_sizes(f, &dataset);
    Sections {
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
    }
}

impl Config {
    pub fn from_tree(workload_name: &str, tree: Value) -> Result<Config> {
        let (canonical, ignored) = canonical_tree(&tree);
        let mut f = Fields::new(&canonical);
        let sections = read_sections(&mut f);
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
            framework: sections.framework,
            model: sections.model,
            workflow: sections.workflow,
            storage: sections.storage,
            dataset: sections.dataset,
            reader: sections.reader,
            train: sections.train,
            evaluation: sections.evaluation,
            output: sections.output,
            checkpoint: sections.checkpoint,
            au_threshold: sections.au_threshold,
            tree,
            unknown_keys,
        })
    }

    /// Fails with a clear message when the configuration asks for something not built (in this
    /// build, or at all).
    pub fn check_supported(&self) -> Result<()> {
        match self.storage.storage_type {
            StorageType::LocalFs | StorageType::ParallelFs | StorageType::DirectFs => {}
            StorageType::S3 | StorageType::Aistore if cfg!(feature = "s3") => {
                self.check_object_store()?
            }
            StorageType::Azure if cfg!(feature = "azure") => self.check_object_store()?,
            StorageType::Gcs if cfg!(feature = "gcs") => self.check_object_store()?,
            StorageType::S3 | StorageType::Aistore => return Err(Error::usage(NO_OBJECT_STORE)),
            StorageType::Azure => return Err(Error::usage(NO_AZURE)),
            StorageType::Gcs => return Err(Error::usage(NO_GCS)),
        }
        if self.reader.data_loader == DataLoader::NativeDali {
            self.check_native_dali()?;
        }
        if self.reader.data_loader == DataLoader::Dali && self.dataset.format == Format::Tfrecord {
            return Err(Error::usage(
                "workload.reader.data_loader = dali reads samples by index, and TFRecord files \
                 are read as streams (DLIO's DALI loader fails on them too): use \
                 data_loader tensorflow for tfrecord, or dali with another format",
            ));
        }
        Ok(())
    }

    /// DLIO's `native_dali` loader runs DALI's own readers: `fn.readers.numpy` over npy,
    /// `fn.readers.file` over jpeg/png, `fn.readers.tfrecord` over tfrecord, each emulated
    /// (docs/formats.md, "The native DALI loader"); what DLIO cannot run is refused with the
    /// reason.
    fn check_native_dali(&self) -> Result<()> {
        let refuse = |why: String| Err(Error::usage(why));
        let format = self.dataset.format;
        match format {
            Format::Npy | Format::Tfrecord => {}
            Format::Jpeg | Format::Png => {
                if self.reader.sample_shuffle != Shuffle::Off {
                    return refuse(format!(
                        "workload.reader.data_loader = native_dali with workload.dataset.format = \
                         {format} and reader.sample_shuffle = {}: DLIO asks DALI's \
                         fn.readers.file for random_shuffle and shuffle_after_epoch together, \
                         which DALI refuses (\"shuffle_after_epoch and random_shuffle cannot be \
                         both true\"), so DLIO's run fails; set reader.sample_shuffle off, or use \
                         data_loader pytorch or dali for shuffled {format}",
                        self.reader.sample_shuffle
                    ));
                }
            }
            Format::Npz => {
                return refuse(
                    "workload.reader.data_loader = native_dali with workload.dataset.format = \
                     npz: DLIO refuses it (\"Loading data of npz format is not supported \
                     without framework data loader; please use npy format instead\"); \
                     native_dali runs npy, jpeg, png and tfrecord"
                        .to_string(),
                )
            }
            other => {
                return refuse(format!(
                    "workload.reader.data_loader = native_dali with workload.dataset.format = \
                     {other}: DLIO has no DALI reader for {other} (its reader has no DALI \
                     pipeline, and the run fails); native_dali runs npy, jpeg, png and tfrecord"
                ))
            }
        }
        if self.reader.odirect {
            return refuse(
                "workload.reader.odirect = True with data_loader native_dali: DALI's readers \
                 map or read files through the page cache and never open them with O_DIRECT \
                 (DLIO ignores the key there); set odirect False"
                    .to_string(),
            );
        }
        if self.storage.throttle.is_some() && !self.reader.dont_use_mmap {
            return refuse(
                "workload.storage.throttle with data_loader native_dali: DALI's readers map the \
                 files (reader.dont_use_mmap False), and a mapping's reads would bypass the \
                 throttle's link; set ++workload.reader.dont_use_mmap=True (DALI then reads \
                 files with read calls) or drop storage.throttle"
                    .to_string(),
            );
        }
        if self.storage.storage_type.is_object_store() {
            let store = self.storage.storage_type;
            return refuse(format!(
                "workload.reader.data_loader = native_dali with storage_type {store}: DALI's \
                 readers map local files, and objects in {store} storage cannot be mapped; \
                 use data_loader pytorch or dali for {store}"
            ));
        }
        Ok(())
    }

    /// What an object store cannot do: map its objects into memory.
    fn check_object_store(&self) -> Result<()> {
        if self.dataset.format == Format::MmapIndexedBinary {
            return Err(Error::usage(format!(
                "workload.dataset.format = mmap_indexed_binary reads by mapping files into \
                 memory, and objects in {} storage cannot be mapped: use indexed_binary (the \
                 same data, read with ranged GETs)",
                self.storage.storage_type
            )));
        }
        Ok(())
    }
}
