//! The trace's `file` column back to a file index, without a table of names: the index is read
//! from the name (`…_{index}_of_{files}.{format}`) and accepted only if the dataset's own key of
//! that index is exactly the name, so memory stays constant however many files the split has.
//! A listed split is searched in its (sorted) listing instead.

use crate::dataset::{Dataset, SplitLayout};

/// Names of one split's files.
pub struct FileNames<'a> {
    dataset: &'a Dataset,
    split: &'a SplitLayout,
    /// `_of_{files}.{format}`, the end of every name of the split.
    suffix: String,
    /// Digits of the zero-padded index.
    index_width: usize,
    scratch: String,
}

impl<'a> FileNames<'a> {
    pub fn new(dataset: &'a Dataset, split: &'a SplitLayout) -> FileNames<'a> {
        FileNames {
            dataset,
            split,
            suffix: format!("_of_{}.{}", split.files, dataset.format),
            index_width: split.files.to_string().len(),
            scratch: String::new(),
        }
    }

    /// The index of the file with this storage key, or None if no file of the split has it.
    pub fn index_of(&mut self, name: &str) -> Option<u64> {
        if let Some(list) = &self.split.listed {
            let in_folder = name.strip_prefix(self.split.folder)?.strip_prefix('/')?;
            return list.position(in_folder);
        }
        let stem = name.strip_suffix(&self.suffix)?;
        let digits_start = stem.len().checked_sub(self.index_width)?;
        let digits = stem.get(digits_start..)?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let index: u64 = digits.parse().ok()?;
        if index >= self.split.files {
            return None;
        }
        self.dataset
            .write_file_key(&mut self.scratch, self.split, index);
        (self.scratch == name).then_some(index)
    }

    /// The storage key of file `index`, for messages.
    pub fn name_of(&mut self, index: u64) -> &str {
        self.dataset
            .write_file_key(&mut self.scratch, self.split, index);
        &self.scratch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;
    use crate::config::Config;

    fn dataset(yaml: &str) -> Dataset {
        Dataset::from_config(&Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap())
    }

    #[test]
    fn every_name_maps_back_and_nothing_else_does() {
        for yaml in [
            "dataset:\n  format: npz\n  num_files_train: 168\n  num_files_eval: 8\n  num_subfolders_eval: 3\n",
            "dataset:\n  format: npy\n  num_files_train: 12\n  num_subfolders_train: 10\n  file_prefix: a_1_of_2\n",
            "dataset:\n  format: npy\n  num_files_train: 1\n  file_prefix: 'x,y'\n",
        ] {
            let d = dataset(yaml);
            for split in [&d.train, &d.eval] {
                let mut names = FileNames::new(&d, split);
                for i in 0..split.files {
                    let name = d.file_key(split, i);
                    assert_eq!(names.index_of(&name), Some(i), "{name}");
                    assert_eq!(names.name_of(i), name);
                }
            }
        }
        let d =
            dataset("dataset:\n  format: npz\n  num_files_train: 16\n  num_subfolders_train: 2\n");
        let mut names = FileNames::new(&d, &d.train);
        assert_eq!(names.index_of("train/1/img_03_of_16.npz"), Some(3));
        for wrong in [
            "train/0/img_03_of_16.npz",
            "train/1/img_3_of_16.npz",
            "train/1/img_003_of_16.npz",
            "train/img_03_of_16.npz",
            "valid/1/img_03_of_16.npz",
            "train/0/img_16_of_16.npz",
            "train/1/img_03_of_16.npy",
            "train/1/img_-3_of_16.npz",
            "_of_16.npz",
            "",
        ] {
            assert_eq!(names.index_of(wrong), None, "{wrong}");
        }
        let mut listed = d.clone();
        listed.train.listed = Some(std::sync::Arc::new(crate::dataset::FileList::sorted(
            ["b.npz", "a.npz"],
            false,
        )));
        let mut names = FileNames::new(&listed, &listed.train);
        assert_eq!(names.index_of("train/a.npz"), Some(0));
        assert_eq!(names.index_of("train/b.npz"), Some(1));
        assert_eq!(names.name_of(1), "train/b.npz");
        for wrong in [
            "a.npz",
            "valid/a.npz",
            "train/c.npz",
            "train/img_00_of_16.npz",
        ] {
            assert_eq!(names.index_of(wrong), None, "{wrong}");
        }
    }
}
