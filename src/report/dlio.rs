//! DLIO's output files, with DLIO's names, fields and key order, so mlpstorage and other tools
//! that parse them work unchanged: `summary.json`, `{rank}_output.json`,
//! `{rank}_per_epoch_stats.json` and the `[METRIC]` block of `dlio.log`.

use std::path::Path;

use serde_json::{json, Map, Value};

use super::{timestamp, write_json, FinishedRun, PhaseMetrics, Results, RunTimes};
use crate::config::Config;
use crate::error::Result;
use crate::stats::{phase_rates, Clock, PhaseRecord, RankRecord, StepTiming};
use crate::system;
use crate::trainer::metric_window;

fn meets(ok: bool) -> &'static str {
    if ok {
        "success"
    } else {
        "fail"
    }
}

fn phase_metric(metric: &mut Map<String, Value>, prefix: &str, m: &PhaseMetrics) {
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
        json!(meets(m.meets_expectation)),
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

/// Dataset bytes per host (one host), DLIO's formula: samples of the train split / ranks × ranks
/// per host × record length, in GiB.
pub fn data_size_per_host_gib(config: &Config, world: u64) -> f64 {
    let d = &config.dataset;
    let samples_per_host = world * d.num_samples_per_file * d.num_files_train / world.max(1);
    (samples_per_host * d.record_length_bytes) as f64 / 1024f64.powi(3)
}

/// DLIO's flag: the host has more memory than its share of the dataset, so the page cache can
/// serve epochs after the first.
pub fn potential_caching(config: &Config, world: u64) -> bool {
    system::memory_bytes() as f64 / 1024f64.powi(3) > data_size_per_host_gib(config, world)
}

pub fn summary(config: &Config, results: &Results, times: RunTimes) -> Value {
    let world = results.world as u64;
    let host_memory_gib = system::memory_bytes() as f64 / 1024f64.powi(3);
    let data_gib = data_size_per_host_gib(config, world);
    let mut metric = Map::new();
    phase_metric(&mut metric, "train", &results.train);
    if let Some(eval) = &results.eval {
        phase_metric(&mut metric, "eval", eval);
    }
    json!({
        "start": timestamp(times.start),
        "num_accelerators": world,
        "num_hosts": 1,
        "hostname": system::hostname(),
        "metric": metric,
        "num_files_train": config.dataset.num_files_train,
        "num_files_eval": config.dataset.num_files_eval,
        "num_samples_per_file": config.dataset.num_samples_per_file,
        "host_cpu_count": [system::cpu_count()],
        "host_processor_name": system::processor_name(),
        "potential_caching": [u8::from(potential_caching(config, world))],
        "host_cpuinfo": system::proc_dict("/proc/cpuinfo"),
        "host_meminfo": system::proc_dict("/proc/meminfo"),
        "host_memory_GB": [host_memory_gib],
        "data_size_per_host_GB": data_gib,
        "epochs": results.epochs.len(),
        "end": timestamp(times.end),
    })
}

fn seconds(list: impl Iterator<Item = f64>) -> Value {
    Value::Array(list.map(|s| json!(s)).collect())
}

/// Every step of a phase, across its blocks.
fn all_steps(phase: &PhaseRecord) -> impl Iterator<Item = &StepTiming> {
    phase.blocks.iter().flat_map(|b| b.steps.iter())
}

/// `{rank}_output.json`: every step's load, proc and compute seconds, and the rank's AU and
/// samples/s per block.
pub fn rank_output(config: &Config, rank: &RankRecord, world: u64, clock: &Clock) -> Value {
    let window = metric_window(config);
    let mut out = Map::new();
    out.insert(
        "host_memory_GB".into(),
        json!(system::memory_bytes() as f64 / 1024f64.powi(3)),
    );
    out.insert("host_cpu_count".into(), json!(system::cpu_count()));
    out.insert(
        "host_processor_name".into(),
        json!(system::processor_name()),
    );
    out.insert(
        "potential_caching".into(),
        json!(u8::from(potential_caching(config, world))),
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
    out.insert("hostname".into(), json!(system::hostname()));
    Value::Object(out)
}

fn span(clock: &Clock, start: f64, end: f64) -> Value {
    json!({
        "start": timestamp(clock.wall(start)),
        "end": timestamp(clock.wall(end)),
        "duration": format!("{:.2}", end - start),
    })
}

/// `{rank}_per_epoch_stats.json`: start, end and duration of every epoch, block and eval.
pub fn per_epoch_stats(rank: &RankRecord, clock: &Clock) -> Value {
    let mut out = Map::new();
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
        meets(t.meets_expectation)
    );
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
            meets(e.meets_expectation)
        );
    }
    m + RULE
}

/// Writes every DLIO JSON file of a finished run into `folder`.
pub fn write_all(folder: &Path, run: &FinishedRun) -> Result<()> {
    let FinishedRun {
        config,
        results,
        ranks,
        clock,
        times,
        ..
    } = *run;
    for rank in ranks {
        write_json(
            &folder.join(format!("{}_output.json", rank.rank)),
            &rank_output(config, rank, results.world as u64, clock),
        )?;
        write_json(
            &folder.join(format!("{}_per_epoch_stats.json", rank.rank)),
            &per_epoch_stats(rank, clock),
        )?;
    }
    write_json(
        &folder.join("summary.json"),
        &summary(config, results, times),
    )
}
