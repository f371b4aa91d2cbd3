//! The MLPerf Storage category a run could stand in, by mlpstorage's own rules (its
//! `rules.py`): a training run of one of MLPerf's training workloads is CLOSED when the only
//! keys changed from the workload file are those its closed rules allow, OPEN when the others
//! changed are those its open rules allow, and in no category when any other key changed (or
//! `reader.odirect` outside unet3d, unet3d training without its checkpoints, or a training dataset
//! smaller than MLPerf Storage's size rule asks for). A checkpoint
//! run of a llama3 workload is CLOSED with 8 ranks or the model's closed count, OPEN with a
//! multiple of its data-parallel size. Changed keys are found by comparing the run's
//! configuration with the built-in copy of the workload (the same files mlpstorage ships), so a
//! workload file edited under `--config-dir` counts as much as an override word.

use super::verdict::DatasetShort;
use crate::config::Config;

/// mlpstorage's training workloads (its `configs/dlio/workload/` for run_benchmark).
const TRAINING_WORKLOADS: [&str; 6] = [
    "unet3d_a100",
    "unet3d_h100",
    "resnet50_a100",
    "resnet50_h100",
    "cosmoflow_a100",
    "cosmoflow_h100",
];

/// `rules.py`: `closed_allowed_params` of `TrainingRulesChecker.check_allowed_params`.
const TRAINING_CLOSED: [&str; 11] = [
    "dataset.num_files_train",
    "dataset.num_subfolders_train",
    "dataset.data_folder",
    "reader.read_threads",
    "reader.computation_threads",
    "reader.transfer_size",
    "reader.odirect",
    "reader.prefetch_size",
    "checkpoint.checkpoint_folder",
    "storage.storage_type",
    "storage.storage_root",
];

/// `rules.py`: `open_allowed_params`.
const TRAINING_OPEN: [&str; 4] = [
    "framework",
    "dataset.format",
    "dataset.num_samples_per_file",
    "reader.data_loader",
];

/// mlpstorage's checkpointing workloads and, from its `LLM_ALLOWED_VALUES`, each one's ranks
/// per data-parallel instance and closed rank count (8 ranks, a subset, is closed too).
const CHECKPOINT_WORKLOADS: [(&str, u64, u64); 4] = [
    ("llama3_8b", 8, 8),
    ("llama3_70b", 8, 64),
    ("llama3_405b", 256, 512),
    ("llama3_1t", 512, 1024),
];

/// The keys mlpstorage itself sets for a checkpointing run (`add_checkpoint_params`).
const CHECKPOINT_CLOSED: [&str; 7] = [
    "checkpoint.checkpoint_folder",
    "checkpoint.num_checkpoints_read",
    "checkpoint.num_checkpoints_write",
    "checkpoint.mode",
    "model.parallelism.data",
    "storage.storage_type",
    "storage.storage_root",
];

const CHECKPOINT_SUBSET_RANKS: u64 = 8;

#[derive(Debug, Clone, PartialEq)]
pub enum Category {
    Closed {
        changed_keys: Vec<String>,
    },
    Open {
        changed_keys: Vec<String>,
        open_keys: Vec<String>,
    },
    /// In neither category, and why.
    None {
        changed_keys: Vec<String>,
        why: String,
    },
}

impl Category {
    /// The category of a run of `world` ranks; `dataset_short` when its training dataset is
    /// smaller than MLPerf Storage's rule asks for, which bars it from both categories.
    pub fn of(config: &Config, world: u64, dataset_short: Option<&DatasetShort>) -> Category {
        let name = config.workload_name.as_str();
        let checkpoint = CHECKPOINT_WORKLOADS.iter().find(|w| w.0 == name);
        let training = TRAINING_WORKLOADS.contains(&name);
        let changed = match config.keys_changed_from(name) {
            Some(changed) if training || checkpoint.is_some() => changed,
            _ => {
                return Category::None {
                    changed_keys: Vec::new(),
                    why: format!(
                        "{name} is not an MLPerf Storage workload (training: {}; checkpointing: \
                         {})",
                        TRAINING_WORKLOADS.join(", "),
                        CHECKPOINT_WORKLOADS.map(|w| w.0).join(", ")
                    ),
                }
            }
        };
        // mlpstorage sets the workflow itself for each command.
        let changed: Vec<String> = changed
            .into_iter()
            .filter(|k| !k.starts_with("workflow."))
            .collect();
        let (closed, open): (&[&str], &[&str]) = match checkpoint {
            Some(_) => (&CHECKPOINT_CLOSED, &[]),
            None => (&TRAINING_CLOSED, &TRAINING_OPEN),
        };
        let disallowed: Vec<String> = changed
            .iter()
            .filter(|k| !closed.contains(&k.as_str()) && !open.contains(&k.as_str()))
            .cloned()
            .collect();
        let mut open_keys: Vec<String> = changed
            .iter()
            .filter(|k| open.contains(&k.as_str()))
            .cloned()
            .collect();
        let mut refused = Vec::new();
        if !disallowed.is_empty() {
            refused.push(format!(
                "changed outside mlpstorage's closed and open keys: {}",
                disallowed.join(", ")
            ));
        }
        if training {
            let unet3d = config.model.name == "unet3d";
            if config.reader.odirect && !unet3d {
                refused.push("reader.odirect is allowed for unet3d only".into());
            }
            if unet3d && config.workflow.train && !config.workflow.checkpoint {
                refused.push("unet3d training must run its checkpoints".into());
            }
            if let Some(short) = dataset_short {
                refused.push(short.describe());
            }
        }
        if let Some(&(_, per_instance, closed_ranks)) = checkpoint {
            if world != CHECKPOINT_SUBSET_RANKS && world != closed_ranks {
                if world % per_instance == 0 {
                    open_keys.push(format!("{world} ranks"));
                } else {
                    refused.push(format!(
                        "{world} ranks: CLOSED takes {CHECKPOINT_SUBSET_RANKS} or {closed_ranks}, \
                         OPEN a multiple of {per_instance}"
                    ));
                }
            }
        }
        if !refused.is_empty() {
            Category::None {
                changed_keys: changed,
                why: refused.join("; "),
            }
        } else if !open_keys.is_empty() {
            Category::Open {
                changed_keys: changed,
                open_keys,
            }
        } else {
            Category::Closed {
                changed_keys: changed,
            }
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Category::Closed { .. } => "closed",
            Category::Open { .. } => "open",
            Category::None { .. } => "none",
        }
    }

    pub fn changed_keys(&self) -> &[String] {
        match self {
            Category::Closed { changed_keys }
            | Category::Open { changed_keys, .. }
            | Category::None { changed_keys, .. } => changed_keys,
        }
    }

    /// Why it is not CLOSED, when it is not.
    pub fn note(&self) -> Option<String> {
        match self {
            Category::Closed { .. } => None,
            Category::Open { open_keys, .. } => {
                Some(format!("OPEN because of {}", open_keys.join(", ")))
            }
            Category::None { why, .. } => Some(why.clone()),
        }
    }

    /// How the verdict line says it.
    pub fn short(&self) -> &'static str {
        match self {
            Category::Closed { .. } => "CLOSED",
            Category::Open { .. } => "OPEN",
            Category::None { .. } => "no MLPerf category",
        }
    }

    /// The category, the keys changed from the workload, and why it is not CLOSED.
    pub fn describe(&self) -> String {
        let changed = match self.changed_keys() {
            [] => "no key changed from the workload".to_string(),
            keys => format!("changed from the workload: {}", keys.join(", ")),
        };
        let label = match self {
            Category::None { .. } => "none",
            _ => self.short(),
        };
        match self.note() {
            None => format!("{label} ({changed})"),
            Some(note) => format!("{label} ({changed}): {note}"),
        }
    }
}
