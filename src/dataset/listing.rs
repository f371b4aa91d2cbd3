//! The names of a split's files as found by listing its folder, for datasets whose names do not
//! follow DLIO's scheme. One store per split and process, shared read-only by every rank and
//! reader thread: the names back to back in one byte arena plus one end offset per file, so a
//! million 30-byte names take ~38 MB once, where DLIO keeps a Python list of strings (and index
//! maps) in every rank and worker.
//!
//! The order is DLIO's: a flat split is sorted by name; a split with subfolders is sorted by
//! file name alone (DLIO's `np.argsort` of basenames; ties keep subfolder order).

use crate::config::Format;
use crate::storage::{EntryKind, Storage};

/// A split's file names, relative to its folder (`name.npz` or `sub/name.npz`), in DLIO's order.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct FileList {
    arena: Vec<u8>,
    /// Where each name ends in `arena`; name `i` starts where name `i - 1` ends.
    ends: Vec<u64>,
    /// Whether the names are ordered by their file name only (a split with subfolders).
    by_file_name: bool,
}

/// What the order compares: the whole relative name, or (with subfolders) its file name.
fn sort_key(name: &[u8], by_file_name: bool) -> &[u8] {
    if by_file_name {
        name.rsplit(|&b| b == b'/').next().unwrap_or(name)
    } else {
        name
    }
}

impl FileList {
    /// The store of `names` (relative to the split's folder), put in DLIO's order.
    pub fn sorted<'a>(names: impl IntoIterator<Item = &'a str>, by_file_name: bool) -> FileList {
        let mut unsorted = FileList {
            by_file_name,
            ..FileList::default()
        };
        for name in names {
            unsorted.push(name);
        }
        unsorted.into_sorted()
    }

    fn push(&mut self, name: &str) {
        self.arena.extend_from_slice(name.as_bytes());
        self.ends.push(self.arena.len() as u64);
    }

    fn bytes_of(&self, index: usize) -> &[u8] {
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        &self.arena[start as usize..self.ends[index] as usize]
    }

    /// Rebuilt in order; a stable sort, so equal file names keep the order they were listed in.
    fn into_sorted(self) -> FileList {
        let mut order: Vec<u32> = (0..self.ends.len() as u32).collect();
        order.sort_by(|&a, &b| {
            sort_key(self.bytes_of(a as usize), self.by_file_name)
                .cmp(sort_key(self.bytes_of(b as usize), self.by_file_name))
        });
        let mut sorted = FileList {
            arena: Vec::with_capacity(self.arena.len()),
            ends: Vec::with_capacity(self.ends.len()),
            by_file_name: self.by_file_name,
        };
        for index in order {
            sorted
                .arena
                .extend_from_slice(self.bytes_of(index as usize));
            sorted.ends.push(sorted.arena.len() as u64);
        }
        sorted
    }

    pub fn len(&self) -> u64 {
        self.ends.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Name `index`, relative to the split's folder.
    pub fn name(&self, index: u64) -> &str {
        // Only whole `&str`s go into the arena, and names are cut where they were put.
        std::str::from_utf8(self.bytes_of(index as usize)).expect("names are stored whole")
    }

    /// Keeps the first `files` names: DLIO uses the first `num_files_*` of the sorted listing.
    pub fn truncate(&mut self, files: u64) {
        if files < self.len() {
            self.ends.truncate(files as usize);
            let end = self.ends.last().map_or(0, |&e| e as usize);
            self.arena.truncate(end);
            self.arena.shrink_to_fit();
            self.ends.shrink_to_fit();
        }
    }

    /// The position of `name` (relative to the split's folder), by binary search.
    pub fn position(&self, name: &str) -> Option<u64> {
        let key = sort_key(name.as_bytes(), self.by_file_name);
        let first = self.partition_point(|candidate| sort_key(candidate, self.by_file_name) < key);
        (first..self.ends.len())
            .take_while(|&i| sort_key(self.bytes_of(i), self.by_file_name) == key)
            .find(|&i| self.bytes_of(i) == name.as_bytes())
            .map(|i| i as u64)
    }

    fn partition_point(&self, before: impl Fn(&[u8]) -> bool) -> usize {
        let (mut low, mut high) = (0, self.ends.len());
        while low < high {
            let middle = low + (high - low) / 2;
            if before(self.bytes_of(middle)) {
                low = middle + 1;
            } else {
                high = middle;
            }
        }
        low
    }

    /// Memory the store holds.
    pub fn heap_bytes(&self) -> usize {
        self.arena.capacity() + self.ends.capacity() * std::mem::size_of::<u64>()
    }
}

/// Whether `name` is a data file of `format`, as DLIO's listing takes them: the format's
/// extension in lower or upper case (DLIO's glob takes both). Hidden files are not data: writers
/// name their unfinished files so, and DLIO's glob skips them too.
fn is_data_file(name: &str, format: Format) -> bool {
    if name.starts_with('.') {
        return false;
    }
    let extension = format.to_string();
    name.rsplit_once('.').is_some_and(|(stem, ext)| {
        !stem.is_empty() && (ext == extension || ext == extension.to_uppercase())
    })
}

/// Lists a split's folder once, as DLIO does: its files of the format if it holds any directly,
/// else the files of the format in its subfolders (one level down). `each_listed` is told the
/// running count, for progress.
pub fn list_split(
    storage: &dyn Storage,
    folder: &str,
    format: Format,
    each_listed: &mut dyn FnMut(u64),
) -> std::io::Result<FileList> {
    let mut flat = FileList::default();
    let mut subfolders = Vec::new();
    storage.list_dir(folder, &mut |name, kind| match kind {
        EntryKind::File if is_data_file(name, format) => {
            flat.push(name);
            each_listed(flat.len());
        }
        EntryKind::Folder if !name.starts_with('.') => subfolders.push(name.to_string()),
        _ => {}
    })?;
    if !flat.is_empty() || subfolders.is_empty() {
        return Ok(flat.into_sorted());
    }
    // Subfolders in name order, so that equal file names keep that order after the stable sort.
    subfolders.sort();
    let mut nested = FileList {
        by_file_name: true,
        ..FileList::default()
    };
    let mut name_in_folder = String::new();
    for subfolder in &subfolders {
        storage.list_dir(&format!("{folder}/{subfolder}"), &mut |name, kind| {
            if kind == EntryKind::File && is_data_file(name, format) {
                name_in_folder.clear();
                name_in_folder.push_str(subfolder);
                name_in_folder.push('/');
                name_in_folder.push_str(name);
                nested.push(&name_in_folder);
                each_listed(nested.len());
            }
        })?;
    }
    Ok(nested.into_sorted())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::{scratch_dir, LocalFs};

    fn names(list: &FileList) -> Vec<&str> {
        (0..list.len()).map(|i| list.name(i)).collect()
    }

    #[test]
    fn flat_names_sort_whole_and_subfolder_names_by_file_name() {
        let flat = FileList::sorted(["b.npz", "a10.npz", "a2.npz", "A.npz"], false);
        assert_eq!(names(&flat), ["A.npz", "a10.npz", "a2.npz", "b.npz"]);
        let nested = FileList::sorted(["0/z.npz", "1/a.npz", "0/m.npz", "2/a.npz"], true);
        assert_eq!(names(&nested), ["1/a.npz", "2/a.npz", "0/m.npz", "0/z.npz"]);
        let mut sizes = 0;
        for i in 0..nested.len() {
            sizes += nested.name(i).len();
        }
        assert!(nested.heap_bytes() >= sizes + 8 * 4);
    }

    #[test]
    fn every_name_is_found_at_its_position_and_no_other_name_is() {
        let listed: Vec<String> = (0..500)
            .map(|i| format!("{}/f{}.npy", i % 7, (i * 7919) % 1000))
            .collect();
        for by_file_name in [false, true] {
            let list = FileList::sorted(listed.iter().map(String::as_str), by_file_name);
            assert_eq!(list.len(), 500);
            for i in 0..list.len() {
                assert_eq!(list.position(list.name(i)), Some(i));
            }
            for absent in ["", "0/f1.npy", "9/f0.npy", "f0.npy", "0/f0.npy/"] {
                assert_eq!(list.position(absent), None, "{absent}");
            }
        }
    }

    #[test]
    fn truncate_keeps_the_first_names() {
        let mut list = FileList::sorted(["c", "a", "b"], false);
        list.truncate(2);
        assert_eq!(names(&list), ["a", "b"]);
        list.truncate(5);
        assert_eq!(list.len(), 2);
        list.truncate(0);
        assert!(list.is_empty());
        assert_eq!(list.position("a"), None);
    }

    #[test]
    fn listing_takes_the_format_s_files_flat_or_one_level_down() {
        let dir = scratch_dir("listing");
        let storage = LocalFs::new(&dir);
        for key in [
            "flat/b.npz",
            "flat/a.NPZ",
            "flat/.hidden.npz",
            "flat/c.npy",
            "flat/npz",
            "flat/sub/ignored.npz",
            "nested/1/x.npz",
            "nested/0/y.npz",
            "nested/0/x.npz",
            "nested/0/z.txt",
            "nested/.tmp/w.npz",
        ] {
            storage.put(key, b"1").unwrap();
        }
        let mut counted = 0;
        let flat = list_split(&storage, "flat", Format::Npz, &mut |n| counted = n).unwrap();
        assert_eq!(names(&flat), ["a.NPZ", "b.npz"]);
        assert_eq!(counted, 2);
        let nested = list_split(&storage, "nested", Format::Npz, &mut |_| {}).unwrap();
        assert_eq!(names(&nested), ["0/x.npz", "1/x.npz", "0/y.npz"]);
        assert!(list_split(&storage, "absent", Format::Npz, &mut |_| {}).is_err());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
