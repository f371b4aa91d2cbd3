//! Files a reader thread keeps open while it reads them. A reader streaming a file, taking sample
//! after sample from it, or coming back to it, would otherwise open and measure the file for every
//! read; a held file is opened and measured once, and its descriptor serves every read of it on
//! that thread. The files are the thread's own (a thread-local list), so holding needs no lock,
//! and each is tagged with the storage that opened it, so two storages on one folder never share
//! a descriptor.

use std::cell::RefCell;
use std::fs::File;

use super::cache::evict_from_page_cache;
use super::LocalFs;
use crate::storage::FILES_HELD;

/// A file a thread holds ([`Storage::hold`]): opened once, read until the thread lets go of it
/// ([`Storage::release_all`], at the end of its phase) or holds [`FILES_HELD`] newer ones.
///
/// [`Storage::hold`]: crate::storage::Storage::hold
/// [`Storage::release_all`]: crate::storage::Storage::release_all
pub(super) struct HeldFile {
    storage: u64,
    key: String,
    direct: bool,
    pub(super) file: File,
    /// Its size and direct-I/O block, looked up once (a held file is not rewritten while read).
    pub(super) geometry: (u64, Option<usize>),
}

thread_local! {
    /// The files this thread holds, the most recently taken last.
    static HELD: RefCell<Vec<HeldFile>> = const { RefCell::new(Vec::new()) };
    /// The file this thread let go of last (its storage and key), until it holds another.
    static LET_GO: RefCell<Option<(u64, String)>> = const { RefCell::new(None) };
}

impl LocalFs {
    /// `with` the held file at `key` read as `direct` asks, if this thread holds it.
    pub(super) fn with_held<T>(
        &self,
        key: &str,
        direct: bool,
        with: impl FnOnce(&HeldFile) -> T,
    ) -> Option<T> {
        HELD.with(|held| {
            held.borrow()
                .iter()
                .rev()
                .find(|h| h.storage == self.id && h.direct == direct && h.key == key)
                .map(with)
        })
    }

    /// `Storage::hold`: the file at `key` becomes this thread's newest held file, opened now
    /// unless it is held already; the oldest is closed when [`FILES_HELD`] are.
    pub(super) fn hold_file(&self, key: &str) {
        let direct = self.options.odirect;
        let again = HELD.with(|held| {
            let mut held = held.borrow_mut();
            let found = held
                .iter()
                .position(|h| h.storage == self.id && h.direct == direct && h.key == key);
            found.map(|at| {
                let file = held.remove(at);
                held.push(file);
            })
        });
        if again.is_some() {
            return;
        }
        // A file let go of and held again straight away is a reader that opens it for every
        // sample: its cached pages are this thread's own reads of the sample before.
        let reopened = LET_GO.with(|last| {
            last.borrow_mut()
                .take()
                .is_some_and(|(storage, last)| storage == self.id && last == key)
        });
        let opened = self.open_for_reading(key, direct).and_then(|file| {
            let geometry = self.geometry_of(&file, key, direct)?;
            if self.options.evict_after_read && !direct && !reopened {
                // Pages left by whoever touched the file last (the generation, another run) would
                // serve this read; fio drops them too before a job. The kernel's counters show
                // any page this could not drop.
                let _ = evict_from_page_cache(&file, 0, 0);
            }
            Ok(HeldFile {
                storage: self.id,
                key: key.to_string(),
                direct,
                file,
                geometry,
            })
        });
        // A file that would not open is not held: its first read says why.
        if let Ok(file) = opened {
            HELD.with(|held| {
                let mut held = held.borrow_mut();
                if held.len() == FILES_HELD {
                    held.remove(0);
                }
                held.push(file);
            });
        }
    }

    /// `Storage::let_go`: closes the file at `key`, if this thread holds it.
    pub(super) fn let_go_of_held_file(&self, key: &str) {
        HELD.with(|held| {
            held.borrow_mut()
                .retain(|h| !(h.storage == self.id && h.key == key))
        });
        LET_GO.with(|last| *last.borrow_mut() = Some((self.id, key.to_string())));
    }

    /// `Storage::release_all`: closes the files this thread holds of this storage.
    pub(super) fn let_go_of_held_files(&self) {
        HELD.with(|held| held.borrow_mut().retain(|h| h.storage != self.id));
    }
}
