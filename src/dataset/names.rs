//! How a run finds each split's files, before training starts.
//!
//! Names that follow DLIO's scheme are built from the file's index and never listed. That they
//! do is checked on a sample: the first file, the last, and every `listing_validation_interval`-th
//! (as the MLPerf fork of DLIO does with `skip_listing`), stopping at the first one missing. Then:
//! - with `dataset.skip_listing: True`, a missing file is an error that names it;
//! - otherwise (DLIO's default, which lists) the folder is listed once into a [`FileList`] in
//!   DLIO's order, and the run uses its first `num_files` names.

use std::sync::Arc;
use std::time::Instant;

use super::listing::{list_split, FileList};
use super::{Dataset, SplitLayout};
use crate::error::{Error, Result};
use crate::plan::Phase;
use crate::progress::{Counter, Display};
use crate::storage::Storage;

/// What the configuration says about listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingRules {
    pub skip_listing: bool,
    /// Every how many files the scheme is checked; 0 checks only the first and the last.
    pub validation_interval: u64,
}

/// How one split's files were found.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SplitNames {
    pub folder: String,
    /// Files checked to exist by their scheme name.
    pub checked: u64,
    /// Files the listing found, when the split was listed.
    pub listed: Option<u64>,
    /// Memory of the listed names.
    pub listing_bytes: u64,
    pub seconds: f64,
}

impl SplitNames {
    /// One line for the log.
    pub fn describe(&self) -> String {
        match self.listed {
            None => format!(
                "{}/: names follow DLIO's scheme, not listed ({} checked in {:.3} s)",
                self.folder, self.checked, self.seconds
            ),
            Some(found) => format!(
                "{}/: names do not follow DLIO's scheme; listed {found} files in {:.3} s ({:.1} MiB)",
                self.folder,
                self.seconds,
                self.listing_bytes as f64 / 1048576.0
            ),
        }
    }
}

/// The indices checked, in increasing order: 0, k, 2k, … and the last.
pub fn sampled_indices(files: u64, interval: u64) -> impl Iterator<Item = u64> {
    let step = if interval == 0 {
        files.max(1)
    } else {
        interval
    };
    let last = files.checked_sub(1);
    (0..files)
        .step_by(step as usize)
        .chain(last.filter(|l| l % step != 0))
}

/// Finds the files of the splits `phases` read: by scheme, or by listing when the scheme's names
/// are not there (and listing is allowed). `hint` tells how to make the data, for errors.
pub fn find_files(
    dataset: &mut Dataset,
    phases: &[Phase],
    storage: &dyn Storage,
    rules: ListingRules,
    display: Display,
    hint: &str,
) -> Result<Vec<SplitNames>> {
    let mut found = Vec::new();
    for &phase in phases {
        let started = Instant::now();
        // The scheme's names are what is checked, whatever an earlier call listed.
        dataset.split_mut(phase).listed = None;
        let split = dataset.split(phase);
        if split.files == 0 {
            continue;
        }
        let checks = sampled_indices(split.files, rules.validation_interval).count() as u64;
        let counter = Counter::new(
            display,
            &format!("checking {}/ names", split.folder),
            checks,
        );
        let mut checked = 0;
        let mut missing = None;
        for index in sampled_indices(split.files, rules.validation_interval) {
            let key = dataset.file_key(split, index);
            let present = storage.exists(&key).map_err(|e| {
                Error::on_object("cannot look up data file", storage.describe(&key), e)
            })?;
            checked += 1;
            counter.add(0);
            if !present {
                missing = Some((index, key));
                break;
            }
        }
        counter.finish_quietly();
        // The checked files' indexes too: a reader cannot read a sample without them.
        if missing.is_none() {
            for index in sampled_indices(split.files, rules.validation_interval) {
                let key = dataset.file_key(split, index);
                for suffix in dataset.side_suffixes() {
                    let side = format!("{key}{suffix}");
                    let present = storage.exists(&side).map_err(|e| {
                        Error::on_object("cannot look up index file", storage.describe(&side), e)
                    })?;
                    if !present {
                        return Err(Error::usage(format!(
                            "{} is missing: the index of data file {}, which a reader needs; {hint}",
                            storage.describe(&side),
                            storage.describe(&key)
                        )));
                    }
                }
            }
        }
        let Some((index, key)) = missing else {
            found.push(SplitNames {
                folder: split.folder.to_string(),
                checked,
                listed: None,
                listing_bytes: 0,
                seconds: started.elapsed().as_secs_f64(),
            });
            continue;
        };
        if rules.skip_listing {
            return Err(Error::usage(format!(
                "{} is missing (file {index} of {} by DLIO's naming scheme; dataset.skip_listing \
                 is on, so names are not listed: checked the first, the last and every {} file, \
                 {} present before it); {hint}, or set ++workload.dataset.skip_listing=False to \
                 list the folder",
                storage.describe(&key),
                split.files,
                ordinal(rules.validation_interval),
                checked - 1
            )));
        }
        let list = list_folder(dataset, split, storage, display, hint)?;
        if list.len() < split.files {
            return Err(Error::usage(format!(
                "the data folder has {} {} file(s) in {}/, the workload expects {} (missing by \
                 DLIO's naming scheme: {}); {hint}",
                list.len(),
                dataset.format,
                storage.describe(split.folder),
                split.files,
                key,
            )));
        }
        let listed = list.len();
        let mut list = list;
        list.truncate(split.files);
        let listing_bytes = list.heap_bytes() as u64;
        let folder = split.folder.to_string();
        dataset.split_mut(phase).listed = Some(Arc::new(list));
        found.push(SplitNames {
            folder,
            checked,
            listed: Some(listed),
            listing_bytes,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    Ok(found)
}

fn list_folder(
    dataset: &Dataset,
    split: &SplitLayout,
    storage: &dyn Storage,
    display: Display,
    hint: &str,
) -> Result<FileList> {
    let counter = Counter::new(display, &format!("listing {}/", split.folder), 0);
    let mut seen = 0;
    let list = list_split(storage, split.folder, dataset.format, &mut |n| {
        if n > seen {
            seen = n;
            counter.add(0);
        }
    })
    .map_err(|e| {
        let folder = storage.describe(split.folder);
        match e.kind() {
            // No data where the workload's data should be: bad input, and how to make it.
            std::io::ErrorKind::NotFound => Error::usage(format!(
                "the data folder has no {}/ folder: {folder} does not exist; {hint}",
                split.folder
            )),
            std::io::ErrorKind::NotADirectory => Error::usage(format!(
                "{folder} is not a folder (the workload's {} files go there); {hint}",
                split.folder
            )),
            _ => Error::on_object("cannot list", folder, e),
        }
    })?;
    counter.finish();
    Ok(list)
}

fn ordinal(interval: u64) -> String {
    match interval {
        0 => "no other".to_string(),
        1 => "single".to_string(),
        n => format!("{n}th"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;
    use crate::config::Config;
    use crate::storage::{scratch_dir, LocalFs};

    fn dataset(yaml: &str) -> Dataset {
        Dataset::from_config(&Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap())
    }

    const QUIET: Display = Display {
        live: false,
        quiet: true,
    };

    #[test]
    fn samples_first_every_nth_and_last() {
        let of = |files, interval| sampled_indices(files, interval).collect::<Vec<_>>();
        assert_eq!(of(0, 5), Vec::<u64>::new());
        assert_eq!(of(1, 5), [0]);
        assert_eq!(of(10, 5), [0, 5, 9]);
        assert_eq!(of(11, 5), [0, 5, 10]);
        assert_eq!(of(10, 0), [0, 9]);
        assert_eq!(of(1, 0), [0]);
        assert_eq!(of(3, 1), [0, 1, 2]);
        assert_eq!(of(4, 1000), [0, 3]);
    }

    /// `find_files` of the training split.
    fn find(
        d: &mut Dataset,
        storage: &LocalFs,
        skip_listing: bool,
        validation_interval: u64,
    ) -> Result<Vec<SplitNames>> {
        let rules = ListingRules {
            skip_listing,
            validation_interval,
        };
        find_files(d, &[Phase::Train], storage, rules, QUIET, "generate it")
    }

    #[test]
    fn scheme_names_are_checked_not_listed_and_a_missing_one_is_named() {
        let dir = scratch_dir("names-scheme");
        let storage = LocalFs::new(&dir);
        let mut d = dataset("dataset:\n  format: npy\n  num_files_train: 12\n");
        for i in 0..12 {
            storage.put(&d.file_key(&d.train, i), b"x").unwrap();
        }
        let found = find(&mut d, &storage, true, 5).unwrap();
        assert_eq!(found[0].checked, 4, "0, 5, 10 and 11");
        assert_eq!(found[0].listed, None);
        assert!(d.train.listed.is_none());

        std::fs::remove_file(dir.join("train/img_05_of_12.npy")).unwrap();
        let e = find(&mut d, &storage, true, 5).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let message = e.to_string();
        assert!(message.contains("img_05_of_12.npy is missing"), "{message}");
        assert!(message.contains("every 5th file, 1 present"), "{message}");
        // A file between the sampled ones is not looked for.
        std::fs::remove_file(dir.join("train/img_03_of_12.npy")).unwrap();
        storage.put("train/img_05_of_12.npy", b"x").unwrap();
        assert!(find(&mut d, &storage, true, 5).is_ok());
        // Checking every file finds it.
        let e = find(&mut d, &storage, true, 1).unwrap_err();
        assert!(e.to_string().contains("img_03_of_12.npy is missing"), "{e}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn other_names_are_listed_in_dlio_s_order_and_the_first_ones_used() {
        let dir = scratch_dir("names-listed");
        let storage = LocalFs::new(&dir);
        let mut d = dataset("dataset:\n  format: npz\n  num_files_train: 3\n");
        for name in ["d.npz", "b.npz", "c.npz", "a.npz", "notes.txt"] {
            storage.put(&format!("train/{name}"), b"x").unwrap();
        }
        let e = find(&mut d, &storage, true, 1000).unwrap_err();
        assert!(e.to_string().contains("img_0_of_3.npz is missing"), "{e}");
        let found = find(&mut d, &storage, false, 1000).unwrap();
        assert_eq!(found[0].listed, Some(4));
        assert!(found[0].listing_bytes > 0);
        let keys: Vec<String> = (0..3).map(|i| d.file_key(&d.train, i)).collect();
        assert_eq!(keys, ["train/a.npz", "train/b.npz", "train/c.npz"]);

        let mut too_many = dataset("dataset:\n  format: npz\n  num_files_train: 5\n");
        let e = find(&mut too_many, &storage, false, 1000).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string().contains("has 4 npz file(s)") && e.to_string().contains("expects 5"),
            "{e}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
