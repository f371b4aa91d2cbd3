//! DLIO's output files, with DLIO's names, fields and key order, so mlpstorage and other tools
//! that parse them work unchanged: `summary.json`, `{rank}_output.json`,
//! `{rank}_per_epoch_stats.json` and the `[METRIC]` block of `dlio.log`.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::{write_json, FinishedRun, RunTimes};
use crate::comm::Hosts;
use crate::config::Config;
use crate::error::Result;
use crate::results::{checkpoints, PhaseMetrics, Results};
use crate::stats::{phase_rates, CheckpointOp, Clock, PhaseRecord, RankRecord, StepTiming};
use crate::system;
use crate::system::timestamp;

/// DLIO's `*_au_meet_expectation`: `success` only for a run that completed and met the
/// threshold. An interrupted run's epochs may meet it, but the run did not complete: mlpstorage
/// reads this field, and it must not report success for it.
fn meets(met: bool, results: &Results) -> &'static str {
    if met && results.interrupted.is_none() {
        "success"
    } else {
        "fail"
    }
}

fn phase_metric(
    metric: &mut Map<String, Value>,
    prefix: &str,
    m: &PhaseMetrics,
    results: &Results,
) {
    metric.insert(
        format!("{prefix}_au_percentage"),
        json!(m.au_percent.values),
    );
    metric.insert(
        format!("{prefix}_au_mean_percentage"),
        json!(m.au_percent.mean),
    );
    metric.insert(
        format!("{prefix}_au_meet_expectation"),
        json!(meets(m.meets_expectation, results)),
    );
    metric.insert(
        format!("{prefix}_au_stdev_percentage"),
        json!(m.au_percent.stdev),
    );
    metric.insert(
        format!("{prefix}_throughput_samples_per_second"),
        json!(m.samples_per_second.values),
    );
    metric.insert(
        format!("{prefix}_throughput_mean_samples_per_second"),
        json!(m.samples_per_second.mean),
    );
    metric.insert(
        format!("{prefix}_throughput_stdev_samples_per_second"),
        json!(m.samples_per_second.stdev),
    );
    metric.insert(
        format!("{prefix}_io_mean_MB_per_second"),
        json!(m.io_mib_per_second.mean),
    );
    metric.insert(
        format!("{prefix}_io_stdev_MB_per_second"),
        json!(m.io_mib_per_second.stdev),
    );
}

/// DLIO's checkpoint fields: mean and stdev over the saves (and the loads, when there were any)
/// of the throughput in GiB/s and the duration, both by rank 0's duration, and the checkpoint's
/// size in GiB (whether or not a checkpoint fell due). With no save, DLIO writes NaN (not JSON); dlio-rs writes null.
fn checkpoint_metric(metric: &mut Map<String, Value>, results: &Results) {
    let saves = checkpoints::dlio_summary(&results.checkpoints, CheckpointOp::Save);
    let loads = checkpoints::dlio_summary(&results.checkpoints, CheckpointOp::Load);
    for (op, summary, always) in [("save", saves, true), ("load", loads, false)] {
        if summary.is_none() && !always {
            continue;
        }
        let field = |f: fn(&checkpoints::DlioSummary) -> f64| json!(summary.as_ref().map(f));
        metric.insert(
            format!("{op}_checkpoint_io_mean_GB_per_second"),
            field(|s| s.throughput_mean),
        );
        metric.insert(
            format!("{op}_checkpoint_io_stdev_GB_per_second"),
            field(|s| s.throughput_stdev),
        );
        metric.insert(
            format!("{op}_checkpoint_duration_mean_seconds"),
            field(|s| s.duration_mean),
        );
        metric.insert(
            format!("{op}_checkpoint_duration_stdev_seconds"),
            field(|s| s.duration_stdev),
        );
    }
    metric.insert(
        "checkpoint_size_GB".into(),
        json!(results.checkpoint_bytes.map(|b| b as f64 / 1024f64.powi(3))),
    );
}

/// Dataset bytes per host, DLIO's formula: ranks on the first host × samples of the train split
/// // ranks × record length, in GiB.
pub fn data_size_per_host_gib(config: &Config, world: u64, hosts: &Hosts) -> f64 {
    let d = &config.dataset;
    let ranks_per_process = world / hosts.host_of_process.len().max(1) as u64;
    let ranks_per_host = ranks_per_process * hosts.processes_on_first_host() as u64;
    let samples_per_host =
        ranks_per_host * d.num_samples_per_file * d.num_files_train / world.max(1);
    (samples_per_host * d.record_length_bytes) as f64 / 1024f64.powi(3)
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / 1024f64.powi(3)
}

/// DLIO's flag, per host: the host has more memory than its share of the dataset, so the page
/// cache can serve epochs after the first.
fn caching_per_host(config: &Config, world: u64, hosts: &Hosts) -> Vec<bool> {
    let data_gib = data_size_per_host_gib(config, world, hosts);
    hosts
        .hosts
        .iter()
        .map(|h| gib(h.memory_bytes) > data_gib)
        .collect()
}

/// Whether any host can cache its share of the dataset (DLIO warns in its log).
pub fn potential_caching(config: &Config, world: u64, hosts: &Hosts) -> bool {
    caching_per_host(config, world, hosts).contains(&true)
}

/// `summary.json`, with DLIO's per-host lists (one entry per host, in the order of their first
/// rank).
pub fn summary(config: &Config, results: &Results, times: RunTimes, hosts: &Hosts) -> Value {
    let world = results.world as u64;
    let data_gib = data_size_per_host_gib(config, world, hosts);
    let mut metric = Map::new();
    if results.trained() {
        phase_metric(&mut metric, "train", &results.train, results);
    }
    if let Some(eval) = &results.eval {
        phase_metric(&mut metric, "eval", eval, results);
    }
    if config.workflow.checkpoint {
        checkpoint_metric(&mut metric, results);
    }
    let mut summary = json!({
        "start": timestamp(times.start),
        "num_accelerators": world,
        "num_hosts": hosts.hosts.len(),
        "hostname": hosts.hosts[0].hostname,
        "metric": metric,
        "num_files_train": config.dataset.num_files_train,
        "num_files_eval": config.dataset.num_files_eval,
        "num_samples_per_file": config.dataset.num_samples_per_file,
        "host_cpu_count": hosts.hosts.iter().map(|h| h.cpu_count).collect::<Vec<_>>(),
        "host_processor_name": system::processor_name(),
        "potential_caching": caching_per_host(config, world, hosts).into_iter().map(u8::from).collect::<Vec<_>>(),
        "host_cpuinfo": system::proc_dict("/proc/cpuinfo"),
        "host_meminfo": system::proc_dict("/proc/meminfo"),
        "host_memory_GB": hosts.hosts.iter().map(|h| gib(h.memory_bytes)).collect::<Vec<_>>(),
        "data_size_per_host_GB": data_gib,
        "epochs": results.epochs.len(),
        "end": timestamp(times.end),
    });
    // DLIO never writes an interrupted run's summary; this one says it is one.
    if let Some(interrupted) = &results.interrupted {
        summary["interrupted"] = interrupted.to_json(results);
    }
    summary
}

fn seconds(list: impl Iterator<Item = f64>) -> Value {
    Value::Array(list.map(|s| json!(s)).collect())
}

/// Every step of a phase, across its blocks.
fn all_steps(phase: &PhaseRecord) -> impl Iterator<Item = &StepTiming> {
    phase.blocks.iter().flat_map(|b| b.steps.iter())
}

/// `{rank}_output.json`: every step's load, proc and compute seconds, and the rank's AU and
/// samples/s per block, with the facts of the host the rank ran on (this process's).
pub fn rank_output(
    config: &Config,
    rank: &RankRecord,
    world: u64,
    clock: &Clock,
    hosts: &Hosts,
) -> Value {
    let window = crate::stats::MetricWindow::from(config);
    let host = &hosts.hosts[hosts.host_of_process[hosts.process]];
    let mut out = Map::new();
    out.insert("host_memory_GB".into(), json!(gib(host.memory_bytes)));
    out.insert("host_cpu_count".into(), json!(host.cpu_count));
    out.insert(
        "host_processor_name".into(),
        json!(system::processor_name()),
    );
    // DLIO's per-rank flag: the host's share of the data fits in its memory.
    out.insert(
        "potential_caching".into(),
        json!(u8::from(
            data_size_per_host_gib(config, world, hosts) <= gib(host.memory_bytes)
        )),
    );
    out.insert("host_cpuinfo".into(), system::proc_dict("/proc/cpuinfo"));
    out.insert("host_meminfo".into(), system::proc_dict("/proc/meminfo"));
    for epoch in &rank.epochs {
        let mut lists: [Map<String, Value>; 3] = Default::default();
        let (mut throughput, mut au) = (Map::new(), Map::new());
        let picks: [fn(&StepTiming) -> f64; 3] = [|s| s.load, |s| s.proc, |s| s.compute];
        for (i, block) in epoch.train.blocks.iter().enumerate() {
            let key = format!("block{}", i + 1);
            for (list, pick) in lists.iter_mut().zip(picks) {
                list.insert(key.clone(), seconds(block.steps.iter().map(pick)));
            }
            let rates = window.train_block(block, config.reader.batch_size);
            throughput.insert(key.clone(), json!(rates.samples_per_second));
            au.insert(key, json!(rates.au_percent));
        }
        if let Some(eval) = &epoch.eval {
            for (list, pick) in lists.iter_mut().zip(picks) {
                list.insert("eval".into(), seconds(all_steps(eval).map(pick)));
            }
            let rates = phase_rates(eval, |b| {
                window.eval_block(b, config.reader.batch_size_eval)
            });
            throughput.insert("eval".into(), json!(rates.samples_per_second));
            au.insert("eval".into(), json!(rates.au_percent));
        }
        let [load, proc, compute] = lists;
        out.insert(
            epoch.epoch.to_string(),
            json!({
                "load": load,
                "proc": proc,
                "throughput": throughput,
                "au": au,
                "compute": compute,
                "end": timestamp(clock.wall(epoch.end)),
            }),
        );
    }
    out.insert("hostname".into(), json!(host.hostname));
    Value::Object(out)
}

fn span(clock: &Clock, start: f64, end: f64) -> Value {
    json!({
        "start": timestamp(clock.wall(start)),
        "end": timestamp(clock.wall(end)),
        "duration": format!("{:.2}", end - start),
    })
}

/// `{rank}_per_epoch_stats.json`: start, end and duration of every epoch, block and eval, and
/// DLIO's `save_ckpt{n}` and `load_ckpt{n}` entries of every checkpoint (their throughput: the
/// GiB of all ranks, `checkpoint_bytes`, over this rank's duration). A checkpoint-only run's
/// saves and loads are all in epoch 1, as in DLIO.
pub fn per_epoch_stats(rank: &RankRecord, clock: &Clock, checkpoint_bytes: u64) -> Value {
    let mut out = Map::new();
    if rank.epochs.is_empty() {
        if let (Some(first), Some(last)) = (rank.checkpoints.first(), rank.checkpoints.last()) {
            out.insert(
                "1".into(),
                json!({
                    "start": timestamp(clock.wall(first.start)),
                    "end": timestamp(clock.wall(last.end)),
                    "duration": format!("{:.2}", last.end - first.start),
                }),
            );
        }
    }
    for epoch in &rank.epochs {
        let mut e = Map::new();
        e.insert("start".into(), json!(timestamp(clock.wall(epoch.start))));
        for (i, block) in epoch.train.blocks.iter().enumerate() {
            e.insert(
                format!("block{}", i + 1),
                span(clock, block.start, block.end),
            );
        }
        // DLIO overwrites the epoch's end after evaluation but keeps the training duration.
        e.insert("end".into(), json!(timestamp(clock.wall(epoch.end))));
        e.insert(
            "duration".into(),
            json!(format!("{:.2}", epoch.train.end - epoch.start)),
        );
        if let Some(eval) = &epoch.eval {
            e.insert("eval".into(), span(clock, eval.start, eval.end));
        }
        out.insert(epoch.epoch.to_string(), Value::Object(e));
    }
    for c in &rank.checkpoints {
        let name = match c.op {
            CheckpointOp::Save => "save_ckpt",
            CheckpointOp::Load => "load_ckpt",
        };
        let duration = c.duration();
        let entry = json!({
            "start": timestamp(clock.wall(c.start)),
            "end": timestamp(clock.wall(c.end)),
            "duration": duration,
            "throughput": if duration > 0.0 { checkpoint_bytes as f64 / 1024f64.powi(3) / duration } else { 0.0 },
        });
        if let Some(Value::Object(epoch)) = out.get_mut(&c.epoch.to_string()) {
            epoch.insert(format!("{name}{}", c.index), entry);
        }
    }
    Value::Object(out)
}

/// The `[METRIC]` block DLIO logs at the end of a run (its first line follows `[OUTPUT] `).
pub fn metric_block(results: &Results) -> String {
    const RULE: &str = "[METRIC] ==========================================================\n";
    let mut m = format!("Averaged metric over all steps/epochs\n{RULE}");
    m += &format!(
        "[METRIC] Number of Simulated Accelerators: {} \n",
        results.world
    );
    let t = &results.train;
    if results.trained() {
        m += &format!(
            "[METRIC] Training Accelerator Utilization [AU] (%): {:.4} ({:.4})\n",
            t.au_percent.mean, t.au_percent.stdev
        );
        m += &format!(
            "[METRIC] Training Throughput (samples/second): {:.4} ({:.4})\n",
            t.samples_per_second.mean, t.samples_per_second.stdev
        );
        m += &format!(
            "[METRIC] Training I/O Throughput (MiB/second): {:.4} ({:.4})\n",
            t.io_mib_per_second.mean, t.io_mib_per_second.stdev
        );
        m += &format!(
            "[METRIC] train_au_meet_expectation: {}\n",
            meets(t.meets_expectation, results)
        );
    }
    // DLIO prints these for checkpoint-only runs (its num_checkpoints_write/read), not for
    // checkpoints taken during training.
    if !results.trained() {
        for (op, label) in [(CheckpointOp::Save, "save"), (CheckpointOp::Load, "load")] {
            if let Some(c) = checkpoints::dlio_summary(&results.checkpoints, op) {
                m += &format!(
                    "[METRIC] Checkpoint {label} duration (seconds): {:.4} ({:.4})\n",
                    c.duration_mean, c.duration_stdev
                );
                m += &format!(
                    "[METRIC] Checkpoint {label} I/O Throughput (GB/second): {:.4} ({:.4})\n",
                    c.throughput_mean, c.throughput_stdev
                );
            }
        }
    }
    if let Some(e) = &results.eval {
        m += &format!(
            "[METRIC] Eval Accelerator Utilization [AU] (%): {:.4} ({:.4})\n",
            e.au_percent.mean, e.au_percent.stdev
        );
        m += &format!(
            "[METRIC] Eval Throughput (samples/second): {:.6} ({:.6})\n",
            e.samples_per_second.mean, e.samples_per_second.stdev
        );
        m += &format!(
            "[METRIC] Eval Throughput (MiB/second): {:.6} ({:.6})\n",
            e.io_mib_per_second.mean, e.io_mib_per_second.stdev
        );
        m += &format!(
            "[METRIC] eval_au_meet_expectation: {}\n",
            meets(e.meets_expectation, results)
        );
    }
    m + RULE
}

/// Writes the DLIO files of `ranks` (this process's) into `folder`: `{rank}_output.json` and
/// `{rank}_per_epoch_stats.json`.
pub fn write_rank_files(
    folder: &Path,
    config: &Config,
    ranks: &[RankRecord],
    world: u64,
    clock: &Clock,
    hosts: &Hosts,
    checkpoint_bytes: u64,
) -> Result<()> {
    for rank in ranks {
        write_json(
            &folder.join(format!("{}_output.json", rank.rank)),
            &rank_output(config, rank, world, clock, hosts),
        )?;
        write_json(
            &folder.join(format!("{}_per_epoch_stats.json", rank.rank)),
            &per_epoch_stats(rank, clock, checkpoint_bytes),
        )?;
    }
    Ok(())
}

/// Writes `summary.json` of a finished run into `folder` (process 0, after every process wrote
/// its ranks' files).
pub fn write_summary(folder: &Path, run: &FinishedRun) -> Result<()> {
    write_json(
        &folder.join("summary.json"),
        &summary(run.config, run.results, run.times, run.hosts),
    )
}
