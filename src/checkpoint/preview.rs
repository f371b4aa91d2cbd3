//! The checkpoint part of `dlio-rs plan`: what every checkpoint holds (per rank, the files and
//! bytes) and what the schedule will do with it, from the configuration alone: a 1T-parameter
//! configuration can be checked here before anything is written.

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

/// Renders the checkpoint plan of `config` for `world` ranks, listing `rank`'s files.
pub fn render(config: &Config, world: u64, rank: u64) -> Result<String> {
    if world == 0 {
        return Err(Error::usage("--accelerators must be at least 1"));
    }
    if rank >= world {
        return Err(Error::usage(format!(
            "--rank {rank} is not a rank of {world} accelerator(s): valid ranks are 0..={}",
            world - 1
        )));
    }
    let geometry = Geometry::new(config, world)?;
    let schedule = Schedule::for_config(config);
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
    let (mut files, mut model, mut optimizer) = (0u64, 0u64, 0u64);
    let (mut writers, mut heaviest) = (0u64, (0u64, 0u64));
    for r in 0..world {
        let rank_files = geometry.files(r);
        let bytes: u64 = rank_files.iter().map(|f| f.bytes).sum();
        writers += u64::from(!rank_files.is_empty());
        if bytes > heaviest.1 {
            heaviest = (r, bytes);
        }
        files += rank_files.len() as u64;
        for f in rank_files {
            match f.kind {
                ShardKind::Model => model += f.bytes,
                ShardKind::Optimizer => optimizer += f.bytes,
            }
        }
    }
    let total = model + optimizer;
    let _ = writeln!(
        text,
        "each checkpoint: {files} file(s) from {writers} rank(s), {} ({total} bytes: model {}, optimizer {}), into {}/global_epoch{{E}}_step{{S}}/",
        gib(total),
        gib(model),
        gib(optimizer),
        config.checkpoint_folder().display()
    );
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
    let saves = |count: u64| gib(count.saturating_mul(total));
    let durability = match (config.checkpoint.fsync, config.checkpoint.odirect) {
        (true, true) => "fsync, O_DIRECT",
        (true, false) => "fsync",
        (false, true) => "O_DIRECT, no fsync",
        (false, false) => "no fsync",
    };
    let _ = match schedule {
        Schedule::Never => writeln!(text, "schedule: none (workload.workflow.checkpoint = False)"),
        Schedule::Only {
            writes,
            reads,
            pause,
            rank_sync,
        } => writeln!(
            text,
            "schedule: checkpoint-only: {}, then {reads} load(s) of global_epoch1_step1..{reads}, each after a {pause} s pause and a barrier{}; {durability}; {} written, {} read",
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
            writeln!(
                text,
                "schedule: after epoch(s) {epochs:?} of {}: {} save(s); {durability}; {} written",
                config.train.epochs,
                epochs.len(),
                saves(epochs.len() as u64)
            )
        }
        Schedule::Steps { every } => {
            let steps = PlanSpec::for_phase(config, Phase::Train, world, 0).steps();
            let per_epoch = (1..=steps).filter(|&s| schedule.after_step(s)).count() as u64;
            writeln!(
                text,
                "schedule: every {every} step(s) of each epoch's {steps}: {per_epoch} save(s) per epoch, {} in all; {durability}; {} written",
                per_epoch * config.train.epochs,
                saves(per_epoch * config.train.epochs)
            )
        }
    };
    Ok(text)
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
        for (world, rank) in [(0, 0), (2, 2)] {
            let error = render(&config, world, rank).unwrap_err();
            assert_eq!(error.exit_code(), 2, "{error}");
        }
    }
}
