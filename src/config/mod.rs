//! Configuration: DLIO's workload schema with DLIO's code defaults, read from a shipped or user
//! workload file plus the command line's override words, validated into typed structs.
//!
//! Flow: [`Source`] (which workload, which words) → workload tree ([`value::Value`]) → overrides
//! applied → [`Config`] (typed; every bad value is an error naming the key, the value and what is
//! valid; an unknown key is a warning, or an error with `strict`).
//!
//! One file per concern:
//! - `source.rs`: [`Source`] reads the workload file, shipped ([`workloads`]) or from
//!   `--config-dir`, parses it into a tree ([`value`]) and applies the [`overrides`], whose values
//!   [`word_value`] reads as Hydra does;
//! - `decode.rs`: [`Config::from_tree`] renames DLIO's alias keys and reads every field through
//!   [`fields`] (time specs through [`time_spec`], the per-format keys through [`formats`]),
//!   within dlio-rs's bounds; [`Config::check_supported`] then refuses what this build cannot run;
//! - `suggest.rs`: "did you mean" for a misspelt workload name, key or section;
//! - `schema.rs`: the typed result, [`Config`] with its sections, enumerations and constants, all
//!   re-exported here, so that the rest of dlio-rs names them `config::…`;
//! - `tests.rs`: tests of the whole path, and the helper other modules' tests resolve override
//!   words with.

mod decode;
pub mod fields;
pub mod formats;
pub mod overrides;
mod schema;
mod source;
pub mod suggest;
pub mod time_spec;
pub mod value;
pub mod word_value;
pub mod workloads;

#[cfg(test)]
pub(crate) mod tests;

pub use decode::{known_keys, listen_address, ALIASES, MAX_FILES};
pub use schema::prefetch_factor;
#[cfg(feature = "s3")]
pub use schema::EndpointSpread;
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
pub use schema::VerifyWrites;
pub use schema::{
    CheckpointConfig, CheckpointMode, Compression, Config, DataLoader, DatasetConfig, Datatype,
    ElementType, EvalConfig, Format, Framework, ModelConfig, ObjectStoreOptions, OutputConfig,
    PageCache, Parallelism, ReadType, ReaderConfig, Shuffle, StorageConfig, StorageType, Throttle,
    TraceFormat, TrainConfig, TransformerShape, Workflow, MAX_PART_SIZE, MIN_PART_SIZE, NO_AZURE,
    NO_GCS, NO_OBJECT_STORE, TENSORFLOW_READ_BUFFER,
};
pub use source::Source;
