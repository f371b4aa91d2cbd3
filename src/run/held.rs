//! The folders a run shares with other runs, held while it uses them, so that two runs never
//! write one dataset or one checkpoint folder at once, and no run reads files another rewrites or
//! deletes. Process 0 holds them for the whole job. A local folder is held by its lock
//! ([`FolderLock`]: alone to write, shared to read), an object store's folder by a lease
//! ([`Lease`]: writers only, as readers of an object store hold nothing; a reader looks for a live
//! lease). A run refused names the holder and exits 2, or waits with `run --wait SECONDS`.

use std::path::Path;
use std::sync::Arc;

use super::setup::Setup;
use crate::comm::{agree, Comm};
use crate::error::{Error, Result};
use crate::folder::{self, Access, FolderLock};
use crate::generate;
use crate::storage::lease::{self, Held, Lease, LEASE_OBJECT};
use crate::storage::Storage;

/// How process 0 holds the data folder: a folder lock where the storage is local, a lease in an
/// object store (docs/object-storage.md, "Held folders").
pub(super) enum Hold {
    Lock(FolderLock),
    Lease(Lease),
}

/// What a run does with its data folder, which decides how it holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Use {
    /// Writes the dataset: alone.
    Generate,
    /// Reads it: with other readers.
    Read,
    /// Reads it, then deletes it (`dataset.keep_files: False`): alone, so that no run reads
    /// files it deletes.
    ReadThenDelete,
}

/// Holds the data folder for `usage`: a local folder's lock ([`take_data_folder`]), or an object
/// store's lease ([`take_data_lease`]); `None` where nothing is held (an object store's reader
/// holds nothing, once it has found no live lease).
pub(super) fn hold_data_folder(setup: &Setup, usage: Use) -> Result<Option<Hold>> {
    match setup.storage.local_root() {
        Some(root) => take_data_folder(root, usage, setup.wait).map(|lock| Some(Hold::Lock(lock))),
        None => take_data_lease(setup, usage),
    }
}

/// Takes the local data folder (made if missing) for `usage`, or fails at once (or after `wait`)
/// naming who holds it.
fn take_data_folder(root: &Path, usage: Use, wait: folder::Wait) -> Result<FolderLock> {
    folder::make_folder(root, "data folder")?;
    let access = match usage {
        Use::Read => Access::Shared,
        Use::Generate | Use::ReadThenDelete => Access::Exclusive,
    };
    FolderLock::on_folder(root, access, wait)?.map_err(|busy| {
        // Alone, it is a generation (its marker says who it is) or a run that deletes the dataset;
        // readers share it.
        let generation = generate::holder(root);
        let holder = match (&generation, access) {
            (Some(generation), _) => format!("a generation ({generation})"),
            (None, Access::Shared) => busy.describe(
                "a run that deletes the dataset when it ends (dataset.keep_files: False)",
            ),
            (None, Access::Exclusive) => busy.describe("a training run reading it"),
        };
        refusal(
            usage,
            &root.display().to_string(),
            &holder,
            generation.is_some(),
        )
    })
}

/// Takes the lease of an object store's data folder for a generation or a run that deletes the
/// dataset; a reader only checks that no live lease holds it.
fn take_data_lease(setup: &Setup, usage: Use) -> Result<Option<Hold>> {
    let storage = &setup.storage;
    let folder = storage.describe("");
    let refused = |held: Held| {
        let generating = held.holder.starts_with(GENERATING);
        refusal(usage, &folder, &described(&held), generating)
    };
    let doing = match usage {
        Use::Generate => GENERATING,
        Use::ReadThenDelete => "training, then deleting the dataset (dataset.keep_files: False)",
        Use::Read => {
            return match live_lease(storage.as_ref(), setup.wait)? {
                None => Ok(None),
                Some(held) => Err(refused(held)),
            }
        }
    };
    match Lease::take(Arc::clone(storage), doing, setup.wait)? {
        Ok(lease) => Ok(Some(Hold::Lease(lease))),
        Err(held) => Err(refused(held)),
    }
}

/// What a generation's lease says it does: how a reader tells a generation from a run that
/// deletes the dataset.
const GENERATING: &str = "generating";

/// How often a reader waiting for a lease to go looks again.
const LEASE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// The live lease on an object store's folder, if any, after waiting up to `wait` for it to go:
/// what a run that takes nothing (a reader) checks.
fn live_lease(storage: &dyn Storage, wait: folder::Wait) -> Result<Option<Held>> {
    let folder = storage.describe("");
    let mut waiting = folder::lock::Waiting::new(wait);
    loop {
        let held = lease::holder(storage).map_err(|e| {
            Error::on_object("cannot read the lease", storage.describe(LEASE_OBJECT), e)
        })?;
        match held {
            Some(held) if waiting.again(&folder, &|| held.holder.clone(), LEASE_RETRY)? => {}
            held => return Ok(held),
        }
    }
}

/// A lease's holder, as a refusal names it.
fn described(held: &Held) -> String {
    format!(
        "the run {} (its lease {LEASE_OBJECT} runs {} s more unless renewed)",
        held.holder, held.expires_in
    )
}

/// The usage error of a run refused a data folder `folder` that `holder` holds.
fn refusal(usage: Use, folder: &str, holder: &str, generating: bool) -> Error {
    let or_wait = "(or wait for it: run --wait SECONDS)";
    Error::usage(match (usage, generating) {
        (Use::Generate, _) => format!(
            "the data folder {folder} is in use by {holder}; a generation needs it to itself: \
             generate once that run has ended {or_wait}, or into another folder \
             (++workload.dataset.data_folder=DIR)"
        ),
        (Use::ReadThenDelete, _) => format!(
            "the dataset in {folder} is in use by {holder}; a run that deletes its dataset when \
             it ends (dataset.keep_files: False) needs it to itself: run once that run has \
             ended {or_wait}, or keep the files (++workload.dataset.keep_files=True)"
        ),
        (Use::Read, true) => format!(
            "the dataset in {folder} is being generated by {holder}; train once the generation \
             has finished {or_wait}"
        ),
        (Use::Read, false) => format!(
            "the dataset in {folder} is held by {holder}; train once that run has ended \
             {or_wait}, or on a copy of the dataset"
        ),
    })
}

/// Holds the checkpoint folder for the run (process 0, for all): alone when the run saves,
/// shared when it only loads, so that two runs never save into one folder at once (each would
/// rate the other's files) and no run loads files another is rewriting. A local folder by its
/// lock; an object store's by a lease when the run saves (a run that only loads looks for a live
/// one). Fails at once (or after `run --wait`), with exit code 2, naming the folder and holder;
/// the hold ends with the run.
pub(super) fn hold_checkpoint_folder(comm: &dyn Comm, setup: &Setup) -> Result<Option<Hold>> {
    let Some(checkpoints) = &setup.checkpoints else {
        return Ok(None);
    };
    let storage = &checkpoints.storage;
    let steps = setup.steps_per_epoch(comm.world() as u64);
    let saves = checkpoints
        .schedule
        .saves_any(setup.config.train.epochs, steps);
    let refused = |holder: String| {
        Error::usage(format!(
            "the checkpoint folder {} is in use by {holder}; checkpoint once it has ended (or \
             wait for it: run --wait SECONDS), or into another folder \
             (++workload.checkpoint.checkpoint_folder=DIR)",
            storage
                .local_root()
                .map_or_else(|| storage.describe(""), |root| root.display().to_string())
        ))
    };
    let others = match saves {
        true => "another run that saves or loads checkpoints there",
        false => "another run that saves checkpoints there",
    };
    let held = match (comm.process(), storage.local_root()) {
        // A run none of whose checkpoints falls due makes no folder, as DLIO; one that only
        // loads finds its folder there, or fails where it loads.
        (0, Some(root)) if saves || root.is_dir() => {
            let access = match saves {
                true => Access::Exclusive,
                false => Access::Shared,
            };
            folder::make_folder(root, "checkpoint folder")
                .and_then(|()| FolderLock::on_folder(root, access, setup.wait))
                .and_then(|taken| {
                    taken
                        .map(|lock| Some(Hold::Lock(lock)))
                        .map_err(|busy| refused(busy.describe(others)))
                })
        }
        (0, None) if saves => Lease::take(Arc::clone(storage), "saving checkpoints", setup.wait)
            .and_then(|taken| {
                taken
                    .map(|lease| Some(Hold::Lease(lease)))
                    .map_err(|held| refused(described(&held)))
            }),
        (0, None) => match live_lease(storage.as_ref(), setup.wait) {
            Ok(Some(held)) => Err(refused(described(&held))),
            other => other.map(|_| None),
        },
        _ => Ok(None),
    };
    agree(comm, held)
}
