//! The dataset's layout, as DLIO lays it out, so a DLIO-generated dataset and a dlio-rs one are
//! interchangeable:
//!
//! - names: `{train|valid}/[{sub}/]{file_prefix}_{i:0N}_of_{n}.{format}`, N = digits of n; with
//!   more than one subfolder, file i lives in subfolder `i % subfolders` (padded to its digits);
//! - sizes: each file's array is `d1 × d2 × samples_per_file` elements (or `record_dims ×
//!   samples_per_file`), with d1, d2 drawn from Normal(√L, stdev / (2√L)), floored, at least 1.
//!   The draws are a pure function of the file's index (train files first, then eval files), so
//!   they do not depend on how many ranks generate.
//!
//! Files are addressed by index and never listed when their names follow this scheme; only a
//! split whose names do not is listed, once, into a [`FileList`] (see [`names`]).

pub mod listing;
pub mod names;

use std::sync::Arc;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

use crate::config::{Config, ElementType, Format};
use crate::plan::{mix64, Phase};
pub use listing::FileList;

/// The index files beside each data file of the indexed binary formats: one u64 per sample, its
/// offset and its size, as DLIO writes them (`<file>.off.idx`, `<file>.sz.idx`).
pub const INDEX_SUFFIXES: [&str; 2] = [".off.idx", ".sz.idx"];

/// DLIO seeds its size draws with 10.
const SIZE_SEED: u64 = 10;

/// The files of one split (train or valid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitLayout {
    pub folder: &'static str,
    pub files: u64,
    pub subfolders: u64,
    /// Index of this split's first file in generation order (eval files follow train files).
    pub first_global_index: u64,
    /// The split's names as listed, when they do not follow the scheme; shared, never copied.
    pub listed: Option<Arc<FileList>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    pub train: SplitLayout,
    pub eval: SplitLayout,
    pub file_prefix: String,
    pub format: Format,
    pub samples_per_file: u64,
    pub record_length: u64,
    pub record_length_stdev: u64,
    pub record_dims: Vec<u64>,
    pub element: ElementType,
}

/// The shape of one generated file's sample array; the sample axis is last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileShape {
    pub dims: Vec<u64>,
    pub element: ElementType,
}

impl FileShape {
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }

    pub fn bytes(&self) -> u64 {
        self.elements() * self.element.size()
    }
}

fn digits(n: u64) -> usize {
    n.to_string().len()
}

impl Dataset {
    pub fn from_config(config: &Config) -> Dataset {
        let d = &config.dataset;
        Dataset {
            train: SplitLayout {
                folder: "train",
                files: d.num_files_train,
                subfolders: d.num_subfolders_train,
                first_global_index: 0,
                listed: None,
            },
            eval: SplitLayout {
                folder: "valid",
                files: d.num_files_eval,
                subfolders: d.num_subfolders_eval,
                first_global_index: d.num_files_train,
                listed: None,
            },
            file_prefix: d.file_prefix.clone(),
            format: d.format,
            samples_per_file: d.num_samples_per_file,
            record_length: d.record_length_bytes,
            record_length_stdev: d.record_length_bytes_stdev,
            record_dims: d.record_dims.clone(),
            element: d.record_element_type,
        }
    }

    pub fn split_mut(&mut self, phase: Phase) -> &mut SplitLayout {
        match phase {
            Phase::Train => &mut self.train,
            Phase::Eval => &mut self.eval,
        }
    }

    pub fn split(&self, phase: Phase) -> &SplitLayout {
        match phase {
            Phase::Train => &self.train,
            Phase::Eval => &self.eval,
        }
    }

    /// Files of both splits, in generation order.
    pub fn total_files(&self) -> u64 {
        self.train.files + self.eval.files
    }

    /// The storage key of file `index` of a split.
    pub fn file_key(&self, split: &SplitLayout, index: u64) -> String {
        let mut key = String::new();
        self.write_file_key(&mut key, split, index);
        key
    }

    /// [`Dataset::file_key`] into a reused string: readers build one key per sample.
    pub fn write_file_key(&self, key: &mut String, split: &SplitLayout, index: u64) {
        use std::fmt::Write;
        key.clear();
        key.push_str(split.folder);
        key.push('/');
        if let Some(list) = &split.listed {
            key.push_str(list.name(index));
            return;
        }
        if split.subfolders > 1 {
            let sub = index % split.subfolders;
            let _ = write!(key, "{sub:0width$}/", width = digits(split.subfolders));
        }
        let _ = write!(
            key,
            "{}_{index:0width$}_of_{}.{}",
            self.file_prefix,
            split.files,
            self.format,
            width = digits(split.files)
        );
    }

    /// The folders DLIO's generation makes, files or not: `train`, `valid`, and each split's
    /// subfolders when it has more than one. A reader of DLIO's expects them all (it lists
    /// `valid/` even when there is nothing to evaluate).
    pub fn folders(&self) -> Vec<String> {
        let mut folders = Vec::new();
        for split in [&self.train, &self.eval] {
            folders.push(split.folder.to_string());
            if split.subfolders > 1 {
                let width = digits(split.subfolders);
                folders.extend(
                    (0..split.subfolders).map(|sub| format!("{}/{sub:0width$}", split.folder)),
                );
            }
        }
        folders
    }

    /// The files beside each data file that a reader needs (the indexes of indexed binary).
    pub fn side_suffixes(&self) -> &'static [&'static str] {
        match self.format {
            Format::IndexedBinary | Format::MmapIndexedBinary => &INDEX_SUFFIXES,
            _ => &[],
        }
    }

    /// The split and index of a file in generation order.
    pub fn locate(&self, global_index: u64) -> (&SplitLayout, u64) {
        if global_index < self.train.files {
            (&self.train, global_index)
        } else {
            (&self.eval, global_index - self.train.files)
        }
    }

    /// The array shape of the file with this generation index.
    pub fn file_shape(&self, global_index: u64) -> FileShape {
        let mut dims = if self.record_dims.is_empty() {
            let mean = (self.record_length as f64).sqrt().floor();
            if self.record_length_stdev > 0 {
                let stdev =
                    self.record_length_stdev as f64 / 2.0 / (self.record_length as f64).sqrt();
                let mut rng = SmallRng::seed_from_u64(mix64(SIZE_SEED ^ mix64(global_index)));
                let normal = Normal::new(mean, stdev).expect("stdev is finite and positive");
                vec![
                    (normal.sample(&mut rng) as i64).max(1) as u64,
                    (normal.sample(&mut rng) as i64).max(1) as u64,
                ]
            } else {
                vec![(mean as u64).max(1); 2]
            }
        } else {
            self.record_dims.clone()
        };
        dims.push(self.samples_per_file);
        FileShape {
            dims,
            element: self.element,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;

    fn dataset(yaml: &str) -> Dataset {
        Dataset::from_config(&Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap())
    }

    #[test]
    fn names_follow_dlio() {
        let d = dataset("dataset:\n  format: npz\n  num_files_train: 168\n  num_files_eval: 8\n  num_subfolders_eval: 2\n");
        assert_eq!(d.file_key(&d.train, 7), "train/img_007_of_168.npz");
        assert_eq!(d.file_key(&d.train, 167), "train/img_167_of_168.npz");
        assert_eq!(d.file_key(&d.eval, 3), "valid/1/img_3_of_8.npz");
        let d = dataset("dataset:\n  format: npy\n  num_files_train: 12\n  num_subfolders_train: 10\n  file_prefix: s\n");
        assert_eq!(d.file_key(&d.train, 11), "train/01/s_11_of_12.npy");
        assert_eq!(d.locate(11), (&d.train, 11));
    }

    #[test]
    fn size_law() {
        let d = dataset("dataset:\n  record_length_bytes: 65536\n  num_samples_per_file: 3\n");
        assert_eq!(d.file_shape(0).dims, vec![256, 256, 3]);
        assert_eq!(d.file_shape(5).bytes(), 65536 * 3);
        let d = dataset(
            "dataset:\n  record_length_bytes: 1048576\n  record_length_bytes_stdev: 262144\n",
        );
        let sizes: Vec<u64> = (0..2000).map(|i| d.file_shape(i).bytes()).collect();
        assert_eq!(
            sizes,
            (0..2000)
                .map(|i| d.file_shape(i).bytes())
                .collect::<Vec<_>>(),
            "pure per index"
        );
        let mean = sizes.iter().sum::<u64>() as f64 / sizes.len() as f64;
        assert!((mean / 1048576.0 - 1.0).abs() < 0.03, "mean {mean}");
        assert!(sizes.iter().any(|&s| s != sizes[0]));
        let d = dataset("dataset:\n  record_dims: [4, 5, 6]\n  record_element_type: float32\n  num_samples_per_file: 2\n");
        assert_eq!(
            d.file_shape(0),
            FileShape {
                dims: vec![4, 5, 6, 2],
                element: ElementType::Float32
            }
        );
        assert_eq!(d.file_shape(0).bytes(), 4 * 5 * 6 * 2 * 4);
    }
}
