//! `report.json`: dlio-rs's own results, richer than DLIO's: per epoch the AU and samples/s of
//! DLIO's formulas, the bytes really read and the MiB/s they make, read latency percentiles, and
//! the configuration that produced them. Field definitions: docs/metrics.md.

use serde_json::{json, Value};

use std::path::Path;

use super::{write_json, FinishedRun};
use crate::config::Config;
use crate::error::Error;
use crate::results::{validity, PhaseResult, Results};
use crate::stats::CheckpointOp;
use crate::system::timestamp;

fn latency(p: &PhaseResult, q: f64) -> Value {
    json!(p.read_latency.quantile_us(q))
}

fn lateness(p: &PhaseResult) -> Value {
    let q = |q| json!(p.compute_lateness.quantile_us(q));
    json!({"p50_us": q(0.5), "p99_us": q(0.99), "max_us": q(1.0)})
}

fn phase(config: &Config, p: &PhaseResult, batch: u64) -> Value {
    json!({
        "au_percent": p.rates.au_percent,
        "samples_per_second": p.rates.samples_per_second,
        "nominal_mib_per_second": p.rates.samples_per_second * config.dataset.record_length_bytes as f64 / 1048576.0,
        "steps": p.steps,
        "batch_size": batch,
        "samples_read": p.samples_read,
        "bytes_read": p.bytes_read,
        "bytes_from_storage": p.bytes_from_storage,
        "cache_served_fraction": p.cache_served_fraction,
        "duration_seconds": p.wall,
        "measured_mib_per_second": p.measured_mib_per_second(),
        "reads": p.read_latency.count(),
        "p50_us": latency(p, 0.5),
        "p99_us": latency(p, 0.99),
        "p999_us": latency(p, 0.999),
        "compute_lateness": lateness(p),
        "per_rank_au_percent": p.per_rank.iter().map(|r| r.au_percent).collect::<Vec<_>>(),
        "per_rank_samples_per_second": p.per_rank.iter().map(|r| r.samples_per_second).collect::<Vec<_>>(),
    })
}

/// Per host: the ranks it ran, bytes they read, bytes that came from storage, and the share the
/// page cache served, over every epoch (training and evaluation); and how often and for how long
/// its page cache was dropped (`drop_before_epoch`).
fn hosts(run: &FinishedRun) -> Value {
    let accounting = &run.results.accounting;
    let per_host: Vec<Value> = run
        .hosts
        .hosts
        .iter()
        .enumerate()
        .map(|(host, facts)| {
            let ranks: Vec<&crate::stats::RankRecord> = run
                .ranks
                .iter()
                .zip(run.host_of_rank)
                .filter(|(_, &h)| h == host)
                .map(|(r, _)| r)
                .collect();
            let phases = || {
                ranks.iter().flat_map(|r| {
                    r.epochs
                        .iter()
                        .flat_map(|e| std::iter::once(&e.train).chain(e.eval.as_ref()))
                })
            };
            let bytes_read: u64 = phases().map(|p| p.bytes_read).sum();
            let kernel_count = phases().try_fold(0u64, |sum, p| Some(sum + p.bytes_from_storage?));
            let from_storage = accounting.bytes_from_storage(bytes_read, kernel_count);
            let drops: Vec<f64> = ranks
                .iter()
                .flat_map(|r| r.epochs.iter().filter_map(|e| e.page_cache_drop_seconds))
                .collect();
            json!({
                "hostname": facts.hostname,
                "processes": run.hosts.host_of_process.iter().filter(|&&h| h == host).count(),
                "ranks": ranks.iter().map(|r| r.rank).collect::<Vec<_>>(),
                "memory_bytes": facts.memory_bytes,
                "cpu_count": facts.cpu_count,
                "bytes_read": bytes_read,
                "bytes_from_storage": from_storage,
                "cache_served_fraction": validity::cache_served_fraction(bytes_read, from_storage),
                "page_cache_drops": drops.len(),
                "page_cache_drop_seconds": drops.iter().sum::<f64>(),
            })
        })
        .collect();
    Value::Array(per_host)
}

/// Every checkpoint save and load, rated as MLPerf Storage rates them (the slowest rank's
/// duration), with DLIO's rating (rank 0's) beside it, and each rank's figures.
fn checkpoints(run: &FinishedRun) -> Value {
    let results = &run.results.checkpoints;
    let list: Vec<Value> = results
        .iter()
        .map(|c| {
            json!({
                "operation": match c.op { CheckpointOp::Save => "save", CheckpointOp::Load => "load" },
                "index": c.index,
                "epoch": c.epoch,
                "folder": crate::checkpoint::Geometry::folder_name(c.epoch, c.step),
                "files": c.files,
                "bytes": c.bytes,
                "duration_seconds": c.max_seconds,
                "gib_per_second": c.gib_per_second(),
                "dlio_duration_seconds": c.rank0_seconds,
                "dlio_gib_per_second": c.dlio_gib_per_second(),
                "fsync_fraction": c.sync_fraction(),
                "bytes_from_storage": c.bytes_from_storage,
                "cache_served_fraction": validity::cache_served_fraction(c.bytes, c.bytes_from_storage)
                    .filter(|_| c.op == CheckpointOp::Load),
                "per_rank_seconds": c.per_rank_seconds,
            })
        })
        .collect();
    let summary = |op| {
        let of_op: Vec<f64> = results
            .iter()
            .filter(|c| c.op == op)
            .map(|c| c.gib_per_second())
            .collect();
        let durations: Vec<f64> = results
            .iter()
            .filter(|c| c.op == op)
            .map(|c| c.max_seconds)
            .collect();
        (!of_op.is_empty()).then(|| {
            let (mean, stdev) = crate::stats::mean_stdev(&of_op);
            let (duration_mean, duration_stdev) = crate::stats::mean_stdev(&durations);
            json!({
                "count": of_op.len(),
                "gib_per_second_mean": mean,
                "gib_per_second_stdev": stdev,
                "duration_seconds_mean": duration_mean,
                "duration_seconds_stdev": duration_stdev,
            })
        })
    };
    json!({
        "size_bytes": run.results.checkpoint_bytes,
        "fsync": run.config.checkpoint.fsync,
        "odirect": run.config.checkpoint.odirect,
        "save": summary(CheckpointOp::Save),
        "load": summary(CheckpointOp::Load),
        "list": list,
    })
}

/// The training reads' latencies over all epochs: `[middle µs, count]` per bucket that holds any
/// (log-linear buckets, 32 per power of two).
fn read_latency_histogram(results: &Results) -> Value {
    let mut all = crate::stats::histogram::Histogram::default();
    for epoch in &results.epochs {
        all.merge(&epoch.train.read_latency);
    }
    json!(all.buckets_us())
}

/// The requests of an object storage, per use (`data`, `checkpoints`) and kind: counts, retries,
/// failures, bytes, latency percentiles in µs; `null` for file systems.
fn storage_requests(results: &Results) -> Value {
    if results.requests.is_empty() {
        return Value::Null;
    }
    let mut uses = serde_json::Map::new();
    for (what, counts) in &results.requests {
        let mut kinds = serde_json::Map::new();
        for kind in crate::storage::RequestKind::ALL {
            let c = counts.of(kind);
            if c.requests + c.failures == 0 {
                continue;
            }
            let q = |q: f64| c.latency.quantile_us(q);
            kinds.insert(
                kind.name().to_string(),
                json!({
                    "requests": c.requests,
                    "retries": c.retries,
                    "redirects": c.redirects,
                    "failures": c.failures,
                    "bytes": c.bytes,
                    "latency_us": {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p99.9": q(0.999)},
                }),
            );
        }
        let latency = |h: &crate::stats::histogram::Histogram| {
            let q = |q: f64| h.quantile_us(q);
            json!({"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p99.9": q(0.999)})
        };
        let endpoints: Vec<Value> = counts
            .endpoints
            .iter()
            .map(|e| {
                json!({
                    "url": e.url,
                    "requests": e.all.requests,
                    "retries": e.all.retries,
                    "redirects": e.all.redirects,
                    "failures": e.all.failures,
                    "bytes": e.all.bytes,
                    "latency_us": latency(&e.all.latency),
                })
            })
            .collect();
        let w = &counts.writes;
        uses.insert(
            what.to_string(),
            json!({
                "kinds": kinds,
                "peak_in_flight_per_process": counts.peak_in_flight,
                "writes": {
                    "verified": w.verified,
                    "mismatches": w.mismatches,
                    "rewrites": w.rewrites,
                },
                "endpoints": endpoints,
            }),
        );
    }
    Value::Object(uses)
}

/// The configuration without the object store's credentials: report.json is shared (MLPerf
/// submissions publish their results), and an audit of an object-store run takes them from the
/// environment or a profile again.
fn without_credentials(mut configuration: Value) -> Value {
    use crate::report::compare::CREDENTIALS;
    if let Some(Value::Object(options)) = configuration.pointer_mut("/storage/storage_options") {
        for key in CREDENTIALS {
            options.remove(key);
        }
    }
    configuration
}

pub fn report(run: &FinishedRun) -> Value {
    let FinishedRun {
        config,
        results,
        times,
        ..
    } = *run;
    let epochs: Vec<Value> = results
        .epochs
        .iter()
        .map(|e| {
            let mut v = phase(config, &e.train, config.reader.batch_size);
            v["epoch"] = json!(e.epoch);
            v["samples_not_read"] = json!(results.train_samples_not_read);
            if let Some(eval) = &e.eval {
                v["eval"] = phase(config, eval, config.reader.batch_size_eval);
            }
            v
        })
        .collect();
    let t = &results.train;
    let (method, note) = validity::accounting_method(&results.accounting);
    let size = validity::DatasetSize::new(config, run.hosts.total_memory_bytes());
    json!({
        "tool": "dlio-rs",
        "version": env!("CARGO_PKG_VERSION"),
        "status": if results.interrupted.is_some() { "interrupted" } else { "complete" },
        "interrupted": results.interrupted.map(|i| i.to_json(results)),
        "workload": config.workload_name,
        "start": timestamp(times.start),
        "end": timestamp(times.end),
        "num_accelerators": results.world,
        "run_entropy": run.run_entropy,
        "peak_rss_mib": crate::system::peak_rss_bytes().map(|b| b as f64 / 1048576.0),
        "epochs": epochs,
        "train": {
            "au_mean_percent": t.au_percent.mean,
            "au_stdev_percent": t.au_percent.stdev,
            "au_threshold_percent": config.au_threshold * 100.0,
            "passed": t.meets_expectation,
            "samples_per_second_mean": t.samples_per_second.mean,
            "samples_per_second_stdev": t.samples_per_second.stdev,
            "nominal_mib_per_second_mean": t.io_mib_per_second.mean,
        },
        "eval": results.eval.as_ref().map(|e| json!({
            "au_mean_percent": e.au_percent.mean,
            "au_stdev_percent": e.au_percent.stdev,
            "samples_per_second_mean": e.samples_per_second.mean,
            "samples_per_second_stdev": e.samples_per_second.stdev,
            "nominal_mib_per_second_mean": e.io_mib_per_second.mean,
        })),
        "storage_accounting": {"method": method, "note": note},
        "cache_defeated_by": validity::cache_defeated_by(config),
        "dataset": {
            "bytes": size.dataset_bytes,
            "host_memory_bytes": size.host_memory_bytes,
            "meets_mlperf_5x_memory": size.meets_mlperf_rule(),
            "dlio_potential_caching": super::dlio::potential_caching(config, results.world as u64, run.hosts),
        },
        "startup": {
            "first_batch_seconds": run.startup.first_batch_seconds,
            "file_names": run.startup.file_names.iter().map(|n| json!({
                "folder": n.folder,
                "method": if n.listed.is_some() { "listed" } else { "scheme" },
                "checked": n.checked,
                "listed": n.listed,
                "listing_bytes": n.listing_bytes,
                "seconds": n.seconds,
            })).collect::<Vec<_>>(),
        },
        "checkpoints": checkpoints(run),
        "storage_requests": storage_requests(results),
        "read_latency_histogram_us": read_latency_histogram(results),
        "hosts": hosts(run),
        "traced": config.output.trace,
        "trace_format": config.output.trace.then(|| config.output.trace_format.as_str()),
        "verdict": results.verdict.to_json(),
        "configuration": without_credentials(config.tree.to_json()),
    })
}

/// A failed (or interrupted) run's report.json, in place of results: its status, the error and
/// the exit code it gives. Best effort: the error itself is what the user must see, and it is
/// printed regardless.
pub fn write_failure(folder: &Path, error: &Error) {
    let status = match error {
        Error::Interrupted { .. } => "interrupted",
        _ => "failed",
    };
    let report = serde_json::json!({
        "tool": "dlio-rs",
        "status": status,
        "error": error.to_string(),
        "exit_code": error.exit_code(),
        "version": env!("CARGO_PKG_VERSION"),
    });
    let _ = write_json(&folder.join("report.json"), &report);
}

/// The columns of the per-epoch table (`run --output-format csv`): the phase (`train` or
/// `eval`), the epoch, then the phase's fields of report.json under the same names.
pub const EPOCH_COLUMNS: [&str; 19] = [
    "phase",
    "epoch",
    "au_percent",
    "samples_per_second",
    "nominal_mib_per_second",
    "measured_mib_per_second",
    "steps",
    "batch_size",
    "samples_read",
    "bytes_read",
    "bytes_from_storage",
    "cache_served_fraction",
    "duration_seconds",
    "reads",
    "p50_us",
    "p99_us",
    "p999_us",
    "compute_lateness_p99_us",
    "samples_not_read",
];

/// The per-epoch table of a report (as [`report`] makes it): a row per phase of each epoch,
/// training then evaluation, each value as report.json has it.
pub fn epochs_csv(report: &Value) -> String {
    let mut csv = crate::machine::Csv::new(&EPOCH_COLUMNS);
    let epochs = report["epochs"].as_array().map_or(&[][..], Vec::as_slice);
    for epoch in epochs {
        let phases =
            std::iter::once(("train", epoch)).chain(epoch.get("eval").map(|e| ("eval", e)));
        for (name, phase) in phases {
            csv.row(EPOCH_COLUMNS.iter().map(|&column| match column {
                "phase" => name.to_string(),
                "epoch" => crate::machine::field(&epoch["epoch"]),
                "compute_lateness_p99_us" => {
                    crate::machine::field(&phase["compute_lateness"]["p99_us"])
                }
                // report.json counts them for training only.
                "samples_not_read" if name == "eval" => String::new(),
                "samples_not_read" => crate::machine::field(&epoch["samples_not_read"]),
                key => crate::machine::field(&phase[key]),
            }));
        }
    }
    csv.finish()
}
