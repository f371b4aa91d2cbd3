//! Checkpoints, as DLIO models them: what each rank saves and loads ([`geometry`]: the files of
//! a sharded model and optimizer state under tensor, pipeline and data parallelism and ZeRO), when
//! ([`schedule`]: at epoch ends, every N steps, or in a run that only checkpoints), and how the
//! bytes move ([`transfer`]: streamed through the [`Storage`] seam in one bounded buffer, durable
//! with `checkpoint.fsync`, past the page cache with `checkpoint.odirect`).
//!
//! Every save and load is timed by the rank that makes it and kept as a [`CheckpointRecord`]; the
//! reports turn them into DLIO's fields and MLPerf's figures (docs/metrics.md).

pub mod geometry;
pub mod preview;
pub mod schedule;
pub mod tf_bundle;
pub mod transfer;

use crate::error::Result;
use crate::stats::{CheckpointOp, CheckpointRecord, Clock};
use crate::storage::Storage;
use crate::timeseries::RankCounters;

pub use geometry::{Geometry, ShardFile};
pub use schedule::Schedule;
use transfer::Transfer;

/// What every rank shares about the run's checkpoints.
pub struct Checkpointing<'a> {
    pub geometry: &'a Geometry,
    pub schedule: Schedule,
    /// Rooted at the checkpoint folder.
    pub storage: &'a dyn Storage,
    pub fsync: bool,
    pub randomize: bool,
}

/// Where a save or load goes: `global_epoch{epoch}_step{step}`, DLIO's `{op}_ckpt{index}`.
#[derive(Debug, Clone, Copy)]
pub struct Place {
    pub epoch: u64,
    pub step: u64,
    pub index: u64,
}

/// One rank's checkpoints: its files (the same in every checkpoint), its transfer, its records.
pub struct RankCheckpoints<'a> {
    files: Vec<ShardFile>,
    /// Each file as a TensorFlow bundle, for `framework: tensorflow`.
    bundles: Option<Vec<tf_bundle::Bundle>>,
    transfer: Transfer<'a>,
    pub records: Vec<CheckpointRecord>,
}

impl<'a> RankCheckpoints<'a> {
    /// `seed` (the run's entropy) makes the bytes this rank saves its own, and new every run.
    /// `meters`, the rank's time-series counters, count the bytes as they move.
    pub fn new(
        shared: &Checkpointing<'a>,
        rank: u64,
        seed: u64,
        meters: Option<&'a RankCounters>,
    ) -> RankCheckpoints<'a> {
        RankCheckpoints {
            files: shared.geometry.files(rank),
            bundles: shared.geometry.tensorflow().then(|| {
                let states = shared.geometry.states(rank);
                states.iter().map(tf_bundle::Bundle::plan).collect()
            }),
            transfer: Transfer::new(
                shared.storage,
                shared.fsync,
                shared.randomize,
                seed ^ rank.rotate_left(32),
            )
            .counted_by(meters),
            records: Vec::new(),
        }
    }

    /// Saves this rank's share of the checkpoint at `place`; `then` runs inside the timing
    /// (the `rank_sync` barrier of checkpoint-only runs).
    pub fn save(
        &mut self,
        clock: &Clock,
        place: Place,
        then: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.timed(clock, CheckpointOp::Save, place, then)
    }

    /// Loads this rank's share of the checkpoint at `place` (see [`RankCheckpoints::save`]).
    pub fn load(
        &mut self,
        clock: &Clock,
        place: Place,
        then: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        self.timed(clock, CheckpointOp::Load, place, then)
    }

    fn timed(
        &mut self,
        clock: &Clock,
        op: CheckpointOp,
        place: Place,
        then: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let folder = Geometry::folder_name(place.epoch, place.step);
        let start = clock.now();
        let moved = match op {
            CheckpointOp::Save => {
                self.transfer
                    .save(&folder, &self.files, self.bundles.as_deref())?
            }
            CheckpointOp::Load => {
                self.transfer
                    .load(&folder, &self.files, self.bundles.as_deref())?
            }
        };
        then()?;
        self.records.push(CheckpointRecord {
            op,
            index: place.index,
            epoch: place.epoch,
            step: place.step,
            start,
            end: clock.now(),
            files: moved.files,
            bytes: moved.bytes,
            sync_seconds: moved.sync_seconds,
            bytes_from_storage: moved.bytes_from_storage,
        });
        Ok(())
    }

    /// Drops this rank's files of the checkpoint at `place` from the page cache, so that a load
    /// reads them from the storage.
    pub fn evict(&self, place: Place) -> Result<()> {
        self.transfer.evict(
            &Geometry::folder_name(place.epoch, place.step),
            &self.files,
            self.bundles.is_some(),
        )
    }
}
