//! When checkpoints are saved and loaded, by DLIO's rules (`dlio_benchmark/main.py`):
//!
//! - **Epoch checkpoints** (training, `steps_between_checkpoints` < 0): after the end-of-epoch
//!   barrier of epoch `checkpoint_after_epoch`, then every `epochs_between_checkpoints` epochs,
//!   into `global_epoch{E}_step{steps + 1}`; evaluation follows.
//! - **Step checkpoints** (training, `steps_between_checkpoints` = S > 0): after the barrier of
//!   every S-th step of an epoch (the count restarts each epoch), into `global_epoch{E}_step{k·S}`.
//!   Each ends the epoch's current metric block; the next block starts after it, so the save's
//!   time is in no block's AU. S = 0 never checkpoints, as in DLIO.
//! - **Checkpoint-only runs** (`workflow.train: False`): `num_checkpoints_write` saves into
//!   `global_epoch1_step{i}`, then `num_checkpoints_read` loads of the first of them, each after
//!   sleeping `time_between_checkpoints` and a barrier of all ranks, with a barrier after it
//!   (inside its timing) when `rank_sync`.

use crate::config::Config;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Schedule {
    /// `workflow.checkpoint: False`.
    Never,
    /// Training with checkpoints at epoch ends.
    Epochs { after: u64, between: u64 },
    /// Training with checkpoints every `every` steps of an epoch (never when 0).
    Steps { every: u64 },
    /// A run that only saves and loads checkpoints.
    Only {
        writes: u64,
        reads: u64,
        /// Seconds slept before each save and load.
        pause: f64,
        rank_sync: bool,
    },
}

impl Schedule {
    /// The schedule `config` asks for.
    pub fn for_config(config: &Config) -> Schedule {
        let c = &config.checkpoint;
        if !config.workflow.checkpoint {
            return Schedule::Never;
        }
        if !config.workflow.train {
            return Schedule::Only {
                writes: c.num_write,
                reads: c.num_read,
                pause: c.time_between,
                rank_sync: c.rank_sync,
            };
        }
        match c.steps_between {
            Some(every) => Schedule::Steps { every },
            None => Schedule::Epochs {
                after: c.after_epoch,
                between: c.epochs_between,
            },
        }
    }

    /// Whether a checkpoint follows epoch `epoch` (1-based). DLIO compares the epoch with a
    /// counter that starts at `after` and grows by `between`: an `after` of 0 is never met.
    pub fn after_epoch(&self, epoch: u64) -> bool {
        match *self {
            Schedule::Epochs { after, between } => {
                after >= 1 && epoch >= after && (epoch - after) % between.max(1) == 0
            }
            _ => false,
        }
    }

    /// Whether a checkpoint follows step `step` of an epoch (1-based, counted within the epoch).
    pub fn after_step(&self, step: u64) -> bool {
        match *self {
            Schedule::Steps { every } => every > 0 && step % every == 0,
            _ => false,
        }
    }

    /// Whether any checkpoint is saved in a run of `epochs` epochs of `steps` steps each.
    pub fn saves_any(&self, epochs: u64, steps: u64) -> bool {
        match *self {
            Schedule::Never => false,
            Schedule::Epochs { after, .. } => after >= 1 && after <= epochs,
            Schedule::Steps { every } => epochs >= 1 && every >= 1 && every <= steps,
            Schedule::Only { writes, .. } => writes > 0,
        }
    }

    /// Whether training runs checkpoint at all.
    pub fn in_training(&self) -> bool {
        matches!(
            self,
            Schedule::Epochs { .. } | Schedule::Steps { every: 1.. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn epochs_follow_dlio_s_counter() {
        // unet3d: after epoch 5, then every 2.
        let unet = Schedule::Epochs {
            after: 5,
            between: 2,
        };
        let due: Vec<u64> = (1..=10).filter(|&e| unet.after_epoch(e)).collect();
        assert_eq!(due, [5, 7, 9]);
        let never = Schedule::Epochs {
            after: 0,
            between: 1,
        };
        assert!((1..=10).all(|e| !never.after_epoch(e)));
        assert!(!unet.after_step(5));
    }

    #[test]
    fn steps_restart_every_epoch_and_zero_means_never() {
        let bert = Schedule::Steps { every: 250 };
        let due: Vec<u64> = (1..=1000).filter(|&s| bert.after_step(s)).collect();
        assert_eq!(due, [250, 500, 750, 1000]);
        assert!(!Schedule::Steps { every: 0 }.in_training());
        assert!((1..=100).all(|s| !Schedule::Steps { every: 0 }.after_step(s)));
        assert!(!bert.after_epoch(1));
    }

    #[test]
    fn a_run_saves_only_when_a_checkpoint_falls_due() {
        let epochs = |after| Schedule::Epochs { after, between: 2 };
        assert!(epochs(5).saves_any(5, 10) && !epochs(5).saves_any(4, 10));
        assert!(!epochs(0).saves_any(100, 10));
        let steps = |every| Schedule::Steps { every };
        assert!(steps(10).saves_any(1, 10) && !steps(11).saves_any(3, 10));
        assert!(!steps(0).saves_any(3, 10) && !steps(1).saves_any(0, 10));
        let only = |writes| Schedule::Only {
            writes,
            reads: 1,
            pause: 0.0,
            rank_sync: false,
        };
        assert!(only(1).saves_any(0, 0) && !only(0).saves_any(9, 9));
        assert!(!Schedule::Never.saves_any(9, 9));
    }
}
