//! The end-of-run table on standard output.

use std::fmt::Write;

use super::Startup;
use crate::config::Config;
use crate::results::{validity, Results};
use crate::stats::CheckpointOp;

/// A latency percentile at its scale (µs, ms, s), or `-` without reads.
fn latency(us: Option<f64>) -> String {
    us.map_or("-".into(), crate::console::duration)
}

fn percent(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.0}", v * 100.0))
}

/// One line per use of an object storage: its requests by kind, retries, failures, latency.
fn request_lines(out: &mut String, config: &Config, results: &Results) {
    let store = match config.storage.storage_type {
        crate::config::StorageType::Azure => "Azure Blob",
        crate::config::StorageType::Gcs => "GCS",
        _ => "S3",
    };
    for (what, counts) in &results.requests {
        let kinds: Vec<String> = crate::storage::RequestKind::ALL
            .iter()
            .map(|&kind| (kind, counts.of(kind)))
            .filter(|(_, c)| c.requests + c.failures > 0)
            .map(|(kind, c)| {
                let mut line = format!(
                    "{} {} (p50 {}, p99 {}",
                    kind.name(),
                    c.requests,
                    latency(c.latency.quantile_us(0.5)),
                    latency(c.latency.quantile_us(0.99))
                );
                if c.retries > 0 {
                    line += &format!(", {} retried", c.retries);
                }
                if c.redirects > 0 {
                    line += &format!(", {} redirected", c.redirects);
                }
                if c.failures > 0 {
                    line += &format!(", {} failed", c.failures);
                }
                line + ")"
            })
            .collect();
        let _ = writeln!(out, "{store} requests for {what}: {}", kinds.join("; "));
        let w = &counts.writes;
        if w.verified + w.mismatches > 0 {
            let _ = writeln!(
                out,
                "S3 writes for {what}: {} verified, {} mismatched, {} written again",
                w.verified, w.mismatches, w.rewrites
            );
        }
        if !counts.endpoints.is_empty() {
            let endpoints: Vec<String> = counts
                .endpoints
                .iter()
                .map(|e| {
                    format!(
                        "{} {} (p50 {}, p99 {}, {} retried, {} failed)",
                        e.url,
                        e.all.requests,
                        latency(e.all.latency.quantile_us(0.5)),
                        latency(e.all.latency.quantile_us(0.99)),
                        e.all.retries,
                        e.all.failures
                    )
                })
                .collect();
            let _ = writeln!(out, "S3 endpoints for {what}: {}", endpoints.join("; "));
        }
    }
}

pub fn render(
    config: &Config,
    results: &Results,
    startup: &Startup,
    output_folder: &std::path::Path,
) -> String {
    let mut out = String::new();
    if !results.trained() {
        let _ = writeln!(
            out,
            "\n{} · {} accelerator(s) · checkpoints only",
            config.workload_name, results.world
        );
        checkpoint_rows(&mut out, results);
        request_lines(&mut out, config, results);
        let _ = writeln!(out, "Outputs: {}", output_folder.display());
        return out;
    }
    let _ = writeln!(
        out,
        "\n{} · {} accelerator(s) · {} epoch(s) · batch {} · {} read thread(s) per accelerator",
        config.workload_name,
        results.world,
        results.epochs.len(),
        config.reader.batch_size,
        config.reader.read_threads
    );
    let _ = writeln!(
        out,
        "{:<7}{:>9}{:>14}{:>13}{:>13}{:>9}{:>10}{:>10}{:>10}",
        "epoch", "AU %", "samples/s", "MiB/s nom.", "MiB/s read", "cache %", "p50", "p99", "p99.9"
    );
    let record_mib = config.dataset.record_length_bytes as f64 / 1048576.0;
    let contradicted = &results.verdict.contradicted_epochs;
    for e in &results.epochs {
        let t = &e.train;
        let mark = if contradicted.contains(&e.epoch) {
            "!"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:<7}{:>9.2}{:>14.1}{:>13}{:>13.1}{:>9}{:>10}{:>10}{:>10}",
            e.epoch,
            t.rates.au_percent,
            t.rates.samples_per_second,
            format!("{:.1}{mark}", t.rates.samples_per_second * record_mib),
            t.measured_mib_per_second(),
            percent(t.cache_served_fraction),
            latency(t.read_latency.quantile_us(0.5)),
            latency(t.read_latency.quantile_us(0.99)),
            latency(t.read_latency.quantile_us(0.999)),
        );
        if let Some(v) = &e.eval {
            let _ = writeln!(
                out,
                "{:<7}{:>9.2}{:>14.1}{:>13.1}{:>13.1}{:>9}{:>10}{:>10}{:>10}",
                " eval",
                v.rates.au_percent,
                v.rates.samples_per_second,
                v.rates.samples_per_second * record_mib,
                v.measured_mib_per_second(),
                percent(v.cache_served_fraction),
                latency(v.read_latency.quantile_us(0.5)),
                latency(v.read_latency.quantile_us(0.99)),
                latency(v.read_latency.quantile_us(0.999)),
            );
        }
    }
    let t = &results.train;
    let _ = writeln!(
        out,
        "{:<7}{:>9.2}{:>14.1}{:>13.1}   (± {:.2} AU, ± {:.1} samples/s)",
        "mean",
        t.au_percent.mean,
        t.samples_per_second.mean,
        t.io_mib_per_second.mean,
        t.au_percent.stdev,
        t.samples_per_second.stdev
    );
    if !contradicted.is_empty() {
        let _ = writeln!(
            out,
            "! DLIO's nominal MiB/s (samples/s × record_length_bytes) is contradicted by the bytes \
             read: see the verdict's reasons"
        );
    }
    checkpoint_rows(&mut out, results);
    if results.train_samples_not_read > 0 {
        let _ = writeln!(
            out,
            "Not read each epoch: {} sample(s) (the remainder that does not fill a batch on every accelerator, or past total_training_steps)",
            results.train_samples_not_read
        );
    }
    let (method, _) = validity::accounting_method(&results.accounting);
    let _ = writeln!(
        out,
        "Cache %: share of the bytes read that did not come from the storage ({method}; docs/valid-measurement.md)"
    );
    if let Some(seconds) = startup.first_batch_seconds {
        let names: Vec<String> = startup
            .file_names
            .iter()
            .map(|n| match n.listed {
                None => format!("{}/ by name, {} checked", n.folder, n.checked),
                Some(found) => format!("{}/ listed, {found} files", n.folder),
            })
            .collect();
        let _ = writeln!(
            out,
            "First batch on every accelerator {} after start ({})",
            crate::console::duration(seconds * 1e6),
            names.join("; ")
        );
    }
    request_lines(&mut out, config, results);
    let _ = writeln!(out, "Outputs: {}", output_folder.display());
    out
}

/// One row per checkpoint save and load: MLPerf's duration (the slowest rank's) and throughput,
/// the share of the time in fsync, and for loads the share the page cache served.
fn checkpoint_rows(out: &mut String, results: &Results) {
    if results.checkpoints.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{:<16}{:>8}{:>10}{:>12}{:>10}{:>9}{:>9}",
        "checkpoint", "epoch", "GiB", "seconds", "GiB/s", "fsync %", "cache %"
    );
    for c in &results.checkpoints {
        let op = match c.op {
            CheckpointOp::Save => "save",
            CheckpointOp::Load => "load",
        };
        let cache = match c.op {
            CheckpointOp::Save => None,
            CheckpointOp::Load => validity::cache_served_fraction(c.bytes, c.bytes_from_storage),
        };
        let _ = writeln!(
            out,
            "{:<16}{:>8}{:>10.2}{:>12.3}{:>10.2}{:>9.0}{:>9}",
            format!("{op} {}", c.index),
            c.epoch,
            c.bytes as f64 / (1u64 << 30) as f64,
            c.max_seconds,
            c.gib_per_second(),
            c.sync_fraction() * 100.0,
            percent(cache),
        );
    }
    let _ = writeln!(
        out,
        "Checkpoint seconds and GiB/s: the slowest rank's time, all ranks' bytes (MLPerf Storage's rule)"
    );
}
