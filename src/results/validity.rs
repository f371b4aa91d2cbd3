//! Whether a run measured the storage or the host's memory: how many of the bytes each epoch read
//! really came from the storage device, which option keeps the page cache out, and whether the
//! dataset is large enough that the page cache cannot hold it. The verdict's reasons
//! ([`super::verdict`]) are built on these. Definitions: docs/valid-measurement.md.

use super::Results;
use crate::config::{Config, PageCache};
use crate::storage::Accounting;

/// An epoch with more than this share of its bytes served from cache is flagged.
pub const CACHE_WARNING_FRACTION: f64 = 0.10;

/// MLPerf Storage's rule: the dataset must be at least this many times the hosts' memory.
pub const MLPERF_DATASET_TO_MEMORY: u64 = 5;

/// How a phase's bytes from storage were counted, for reports.
pub fn accounting_method(accounting: &Accounting) -> (&'static str, String) {
    match accounting {
        Accounting::Exact => (
            "exact",
            "O_DIRECT: every byte read comes from the storage device".into(),
        ),
        Accounting::Emulated => (
            "emulated_link",
            "storage.throttle: every byte read crossed the emulated link, the storage under test"
                .into(),
        ),
        Accounting::Requests => (
            "request_bodies",
            "object storage: the bytes of the GET bodies received; nothing is cached on the client"
                .into(),
        ),
        Accounting::KernelCounters => (
            "kernel_read_bytes",
            "the reader threads' read_bytes in /proc/thread-self/io: bytes the kernel fetched from \
             the block device for them, readahead included"
                .into(),
        ),
        Accounting::InMemory => (
            "in_memory",
            "the data folder is on a memory file system: every byte is served from RAM".into(),
        ),
        Accounting::Unaccounted(reason) => ("unaccounted", reason.clone()),
    }
}

/// The share of the bytes asked for that did not come from the storage: 0 when storage supplied
/// at least as much as was asked (readahead can make it more), 1 when it supplied nothing.
pub fn cache_served_fraction(bytes_read: u64, bytes_from_storage: Option<u64>) -> Option<f64> {
    let from_storage = bytes_from_storage?;
    (bytes_read > 0).then(|| 1.0 - (from_storage as f64 / bytes_read as f64).min(1.0))
}

/// The words of an object store's `storage_type`: nothing it holds is in this host's page cache.
fn object_store_words(store: crate::config::StorageType) -> Option<&'static str> {
    use crate::config::StorageType;
    match store {
        StorageType::S3 => Some("storage.storage_type=s3"),
        StorageType::Aistore => Some("storage.storage_type=aistore"),
        StorageType::Azure => Some("storage.storage_type=azure"),
        StorageType::Gcs => Some("storage.storage_type=gcs"),
        StorageType::LocalFs | StorageType::ParallelFs | StorageType::DirectFs => None,
    }
}

/// The option that keeps the page cache out of the measurement, if one is on.
pub fn cache_defeated_by(config: &Config) -> Option<&'static str> {
    if config.storage.throttle.is_some() {
        Some("storage.throttle")
    } else if let Some(store) = object_store_words(config.storage.storage_type) {
        Some(store)
    } else if config.reader.odirect {
        Some("reader.odirect")
    } else {
        match config.reader.page_cache {
            PageCache::Keep => None,
            PageCache::DropBeforeEpoch => Some("reader.page_cache=drop_before_epoch"),
            PageCache::EvictAfterRead => Some("reader.page_cache=evict_after_read"),
        }
    }
}

/// The training dataset's size beside the memory of the client hosts (all of them together).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DatasetSize {
    pub dataset_bytes: u64,
    pub host_memory_bytes: u64,
}

impl DatasetSize {
    pub fn new(config: &Config, host_memory_bytes: u64) -> DatasetSize {
        let d = &config.dataset;
        DatasetSize {
            dataset_bytes: d
                .num_files_train
                .saturating_mul(d.num_samples_per_file)
                .saturating_mul(d.record_length_bytes),
            host_memory_bytes,
        }
    }

    pub fn meets_mlperf_rule(&self) -> bool {
        self.dataset_bytes
            >= self
                .host_memory_bytes
                .saturating_mul(MLPERF_DATASET_TO_MEMORY)
    }
}

/// The training epochs whose metric window keeps none of their steps: their AU and samples/s
/// are 0 and measured nothing.
pub fn unmeasured_epochs(config: &Config, results: &Results) -> Vec<u64> {
    let excluded = config
        .output
        .exclude_start_steps
        .saturating_add(config.output.exclude_end_steps);
    results
        .epochs
        .iter()
        .filter(|e| e.train.steps as u64 <= excluded)
        .map(|e| e.epoch)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;

    fn config(extra: &str) -> Config {
        let yaml = format!(
            "dataset:\n  num_files_train: 100\n  num_samples_per_file: 2\n  record_length_bytes: 1000\n{extra}"
        );
        Config::from_tree("t", Value::from_yaml(&yaml).unwrap()).unwrap()
    }

    #[test]
    fn cache_share_follows_the_bytes() {
        assert_eq!(cache_served_fraction(1000, Some(0)), Some(1.0));
        assert_eq!(cache_served_fraction(1000, Some(250)), Some(0.75));
        // Readahead past what was asked is storage, not a negative cache share.
        assert_eq!(cache_served_fraction(1000, Some(4096)), Some(0.0));
        assert_eq!(cache_served_fraction(0, Some(0)), None);
        assert_eq!(cache_served_fraction(1000, None), None);
        assert_eq!(
            Accounting::Exact.bytes_from_storage(1000, Some(3)),
            Some(1000)
        );
        assert_eq!(
            Accounting::KernelCounters.bytes_from_storage(1000, Some(3)),
            Some(3)
        );
        assert_eq!(
            Accounting::InMemory.bytes_from_storage(1000, Some(3)),
            Some(0)
        );
        assert_eq!(
            Accounting::Unaccounted("nfs".into()).bytes_from_storage(1000, Some(3)),
            None
        );
    }

    #[test]
    fn dataset_rule_is_five_times_memory_and_options_keep_the_cache_out() {
        let plain = config("");
        // 100 files × 2 samples × 1000 bytes = 200,000 bytes.
        assert!(DatasetSize::new(&plain, 40_000).meets_mlperf_rule());
        assert!(!DatasetSize::new(&plain, 40_001).meets_mlperf_rule());
        assert_eq!(cache_defeated_by(&plain), None);
        for (option, by) in [
            ("reader:\n  odirect: True\n", "reader.odirect"),
            (
                "reader:\n  page_cache: evict_after_read\n",
                "reader.page_cache=evict_after_read",
            ),
            (
                "reader:\n  page_cache: drop_before_epoch\n",
                "reader.page_cache=drop_before_epoch",
            ),
        ] {
            assert_eq!(cache_defeated_by(&config(option)), Some(by));
        }
    }
}
