//! The checkpoint part of `dlio-rs plan`: what every checkpoint holds (per rank, the files and
//! bytes) and what the schedule will do with it, from the configuration alone: a 1T-parameter
//! configuration can be checked here before anything is written. As text ([`render`]) or as
//! JSON ([`to_json`], for `plan --output-format json`).

use std::fmt::Write;

use super::geometry::{Geometry, ShardKind};
use super::Schedule;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::plan::{Phase, PlanSpec};

const GIB: f64 = (1u64 << 30) as f64;

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / GIB)
}

/// What every checkpoint of `world` ranks holds, all ranks together.
struct Totals {
    files: u64,
    model: u64,
    optimizer: u64,
    /// The ranks that write any file.
    writers: u64,
    /// The rank with the most bytes, and its bytes.
    heaviest: (u64, u64),
}

impl Totals {
    fn of(geometry: &Geometry, world: u64) -> Totals {
        let mut totals = Totals {
            files: 0,
            model: 0,
            optimizer: 0,
            writers: 0,
            heaviest: (0, 0),
        };
        for r in 0..world {
            let rank_files = geometry.files(r);
            let bytes: u64 = rank_files.iter().map(|f| f.bytes).sum();
            totals.writers += u64::from(!rank_files.is_empty());
            if bytes > totals.heaviest.1 {
                totals.heaviest = (r, bytes);
            }
            totals.files += rank_files.len() as u64;
            for f in rank_files {
                match f.kind {
                    ShardKind::Model => totals.model += f.bytes,
                    ShardKind::Optimizer => totals.optimizer += f.bytes,
                }
            }
        }
        totals
    }
}

/// The geometry of `config`'s checkpoints for `world` ranks, `rank` being one of them.
fn geometry_for(config: &Config, world: u64, rank: u64) -> Result<Geometry> {
    if world == 0 {
        return Err(Error::usage("--accelerators must be at least 1"));
    }
    if rank >= world {
        return Err(Error::usage(format!(
            "--rank {rank} is not a rank of {world} accelerator(s): valid ranks are 0..={}",
            world - 1
        )));
    }
    Geometry::new(config, world)
}

/// Renders the checkpoint plan of `config` for `world` ranks, listing `rank`'s files.
pub fn render(config: &Config, world: u64, rank: u64) -> Result<String> {
    let geometry = geometry_for(config, world, rank)?;
    let mut text = String::new();
    let _ = writeln!(
        text,
        "checkpoint · {world} rank(s) · tensor {} × pipeline {} × data {} · ZeRO {} · {} parameter(s)",
        geometry.tensor_parallelism(),
        geometry.pipeline_parallelism(),
        geometry.data_parallelism(),
        geometry.zero_stage(),
        geometry.num_parameters(),
    );
    let Totals {
        files,
        model,
        optimizer,
        writers,
        heaviest,
    } = Totals::of(&geometry, world);
    let total = model + optimizer;
    let _ = writeln!(
        text,
        "each checkpoint: {files} file(s) from {writers} rank(s), {} ({total} bytes: model {}, optimizer {}), into {}/global_epoch{{E}}_step{{S}}/",
        gib(total),
        gib(model),
        gib(optimizer),
        config.checkpoint_folder().display()
    );
    if geometry.tensorflow() {
        let _ = writeln!(
            text,
            "  as tf.train.Checkpoint saves them: each shard's {{name}}-1.index and \
             {{name}}-1.data-00000-of-00001, and the folder's checkpoint file: {} files",
            2 * files + 1
        );
    }
    let _ = writeln!(
        text,
        "heaviest rank: {} with {}",
        heaviest.0,
        gib(heaviest.1)
    );
    let mine = geometry.files(rank);
    let _ = writeln!(
        text,
        "rank {rank}: {} file(s), {}",
        mine.len(),
        gib(mine.iter().map(|f| f.bytes).sum())
    );
    for f in &mine {
        let _ = writeln!(text, "  {:<56} {:>18}", f.name, f.bytes);
    }
    let _ = writeln!(text, "schedule: {}", schedule(config, world, total));
    Ok(text)
}

/// The checkpoint plan as `plan --output-format json` shows it (docs/running.md).
pub fn to_json(config: &Config, world: u64, rank: u64) -> Result<serde_json::Value> {
    let geometry = geometry_for(config, world, rank)?;
    let totals = Totals::of(&geometry, world);
    let total = totals.model + totals.optimizer;
    let mine = geometry.files(rank);
    Ok(serde_json::json!({
        "ranks": world,
        "tensor_parallelism": geometry.tensor_parallelism(),
        "pipeline_parallelism": geometry.pipeline_parallelism(),
        "data_parallelism": geometry.data_parallelism(),
        "zero_stage": geometry.zero_stage(),
        "parameters": geometry.num_parameters(),
        "files_per_checkpoint": totals.files,
        "writing_ranks": totals.writers,
        "bytes_per_checkpoint": total,
        "model_bytes": totals.model,
        "optimizer_bytes": totals.optimizer,
        "heaviest_rank": totals.heaviest.0,
        "heaviest_rank_bytes": totals.heaviest.1,
        "folder": config.checkpoint_folder(),
        "rank": rank,
        "rank_files": mine.iter().map(|f| serde_json::json!({
            "name": f.name,
            "bytes": f.bytes,
        })).collect::<Vec<_>>(),
        "schedule": schedule(config, world, total),
    }))
}

/// What the schedule does with checkpoints of `total` bytes, in words.
fn schedule(config: &Config, world: u64, total: u64) -> String {
    let schedule = Schedule::for_config(config);
    let saves = |count: u64| gib(count.saturating_mul(total));
    let durability = match (config.checkpoint.fsync, config.checkpoint.odirect) {
        (true, true) => "fsync, O_DIRECT",
        (true, false) => "fsync",
        (false, true) => "O_DIRECT, no fsync",
        (false, false) => "no fsync",
    };
    match schedule {
        Schedule::Never => "none (workload.workflow.checkpoint = False)".to_string(),
        Schedule::Only {
            writes,
            reads,
            pause,
            rank_sync,
        } => format!(
            "checkpoint-only: {}, then {reads} load(s) of global_epoch1_step1..{reads}, each after a {pause} s pause and a barrier{}; {durability}; {} written, {} read",
            if writes > 0 {
                format!("{writes} save(s) into global_epoch1_step1..{writes}")
            } else {
                "no save (the loads read checkpoints already there)".to_string()
            },
            if rank_sync { ", with a barrier after (rank_sync)" } else { "" },
            saves(writes),
            saves(reads)
        ),
        Schedule::Epochs { .. } => {
            let epochs: Vec<u64> = (1..=config.train.epochs)
                .filter(|&e| schedule.after_epoch(e))
                .collect();
            format!(
                "after epoch(s) {epochs:?} of {}: {} save(s); {durability}; {} written",
                config.train.epochs,
                epochs.len(),
                saves(epochs.len() as u64)
            )
        }
        Schedule::Steps { every } => {
            let steps = PlanSpec::for_phase(config, Phase::Train, world, 0).steps();
            let per_epoch = (1..=steps).filter(|&s| schedule.after_step(s)).count() as u64;
            format!(
                "every {every} step(s) of each epoch's {steps}: {per_epoch} save(s) per epoch, {} in all; {durability}; {} written",
                per_epoch * config.train.epochs,
                saves(per_epoch * config.train.epochs)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;

    #[test]
    fn shows_the_rank_s_files_the_totals_and_the_schedule() {
        let yaml = "model:\n  type: transformer\n  num_layers: 2\n  parallelism:\n    zero_stage: 3\n  \
                    transformer:\n    vocab_size: 100\n    hidden_size: 64\n    ffn_hidden_size: 128\n    \
                    num_attention_heads: 4\n    num_kv_heads: 2\nworkflow:\n  train: False\n  checkpoint: True\n\
                    checkpoint:\n  checkpoint_folder: ck\n  num_checkpoints_write: 3\n  num_checkpoints_read: 2\n";
        let config = Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap();
        let text = render(&config, 2, 1).unwrap();
        let geometry = Geometry::new(&config, 2).unwrap();
        let rank1 = geometry.files(1);
        assert_eq!(rank1.len(), 2, "ZeRO 3: a model and an optimizer file");
        for f in &rank1 {
            assert!(
                text.contains(&format!("{:<56} {:>18}", f.name, f.bytes)),
                "{text}"
            );
        }
        assert!(
            text.contains(&format!("({} bytes", geometry.total_bytes())),
            "{text}"
        );
        assert!(text.contains("4 file(s) from 2 rank(s)"), "{text}");
        assert!(
            text.contains("3 save(s) into global_epoch1_step1..3, then 2 load(s)"),
            "{text}"
        );
        let json = to_json(&config, 2, 1).unwrap();
        assert_eq!(json["bytes_per_checkpoint"], geometry.total_bytes());
        assert_eq!(json["files_per_checkpoint"], 4);
        assert_eq!(json["rank_files"][1]["name"], rank1[1].name.as_str());
        assert_eq!(json["rank_files"][1]["bytes"], rank1[1].bytes);
        assert!(json["schedule"]
            .as_str()
            .unwrap()
            .starts_with("checkpoint-only: 3 save(s)"));
        for (world, rank) in [(0, 0), (2, 2)] {
            let error = render(&config, world, rank).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{error}");
            assert_eq!(to_json(&config, world, rank).unwrap_err().exit_code(), 2);
        }
    }
}
