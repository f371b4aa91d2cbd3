//! `dlio-rs compare A B`: two runs side by side, from their output files (dlio-rs's or Python
//! DLIO's): the difference of their configurations, a table of their per-epoch metrics, each
//! difference flagged when it is larger than the runs' own epoch-to-epoch noise, and a page with
//! the same charts overlaid. As text, or as one JSON document or a per-epoch CSV table
//! ([`Comparison::to_json`], [`Comparison::to_csv`]).
//!
//! Configuration: each run's resolved workload tree, from report.json's `configuration`
//! (dlio-rs), else Hydra's `.hydra/config.yaml` or mlpstorage's `dlio_config/config.yaml`
//! (Python DLIO), flattened to dotted keys; keys that cannot change the figures (the output
//! folder and log, credentials: [`IGNORED`]) are left out. Runs that differ in a key of
//! [`WORKLOAD_KEYS`] or in their accelerator count are of different workloads: their figures
//! differ for that alone, so [`compare`] refuses them (a usage error) unless asked, and then
//! judges no difference.
//!
//! Noise: a metric's difference of means is flagged when it exceeds Welch's t bound at 95 %,
//! `t(0.975, ν) · √(s²_A/n_A + s²_B/n_B)` from each run's epochs ([`crate::stats::student`]):
//! with the few epochs a run has, the t quantile (4.30 for ν = 2) is what keeps noise from being
//! called a difference. With fewer than two epochs in a run its noise is unknown and nothing is
//! flagged, which the table says.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::chart::{self, Axis, Chart, Key, Mark, BARRIER_COLOR, STORAGE_COLOR};
use super::html;
use crate::error::{Error, Result};
use crate::stats::student::{welch, WelchBound, CONFIDENCE};

/// Keys of the configuration that make a workload what it is: runs that differ in one (or in
/// their accelerator count) measure different things, and their figures differ for that alone.
/// A key stands for the keys below it too (`train.computation_time.mean`).
pub const WORKLOAD_KEYS: [&str; 12] = [
    "model.name",
    "framework",
    "dataset.format",
    "dataset.record_length_bytes",
    "dataset.record_length_bytes_stdev",
    "dataset.record_length_bytes_resize",
    "dataset.num_samples_per_file",
    "reader.data_loader",
    "reader.batch_size",
    "reader.read_threads",
    "reader.batch_handoff_time",
    "train.computation_time",
];

/// Keys left out of the configuration difference: where the results and the log go, and the
/// object store's credentials (which report.json never keeps, and a comparison must not print).
pub const IGNORED: [&str; 7] = [
    "output.folder",
    "output.log_file",
    "storage.storage_options.access_key_id",
    "storage.storage_options.secret_access_key",
    "storage.storage_options.session_token",
    "storage.storage_options.account_key",
    "storage.storage_options.sas_token",
];

/// The keys of `storage.storage_options` that hold credentials (S3's, Azure's): report.json
/// keeps none of them.
pub const CREDENTIALS: [&str; 5] = [
    "access_key_id",
    "secret_access_key",
    "session_token",
    "account_key",
    "sas_token",
];

/// The key under which the runs' accelerator counts are compared, beside the configuration's.
const ACCELERATORS: &str = "num_accelerators";

/// Where a Python DLIO run keeps its resolved configuration, below its output folder: Hydra's
/// default subfolder, and the one mlpstorage names.
const SAVED_CONFIGURATIONS: [&str; 2] = [".hydra/config.yaml", "dlio_config/config.yaml"];

/// A run's configuration, flattened: each leaf as `dotted.key = value`, in the tree's order.
struct Configuration {
    /// The file it was read from, for the reader.
    source: String,
    keys: Vec<(String, Value)>,
}

/// One run, as its files describe it.
pub struct RunFiles {
    pub name: String,
    summary: Value,
    ours: Option<Value>,
    configuration: Option<Configuration>,
}

impl RunFiles {
    pub fn read(dir: &Path) -> Result<RunFiles> {
        let summary = html::read_json(&dir.join("summary.json"), crate::folder::MAX_SUMMARY_JSON)?
            .ok_or_else(|| {
                Error::usage(format!(
                    "{} has no summary.json: not the output folder of a training run",
                    dir.display()
                ))
            })?;
        let ours = html::read_json(&dir.join("report.json"), crate::folder::MAX_SUMMARY_JSON)?;
        html::check_shapes(dir, &summary, ours.as_ref())?;
        let configuration = read_configuration(dir, ours.as_ref())?;
        Ok(RunFiles {
            name: dir.display().to_string(),
            summary,
            ours,
            configuration,
        })
    }

    /// Its accelerator count, from summary.json (checked by [`html::check_shapes`]).
    fn accelerators(&self) -> Value {
        self.summary[ACCELERATORS].clone()
    }

    /// What a reader of the comparison must know about this run beside its figures: that a
    /// signal stopped it (its epochs are the completed ones only), and its verdict.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let interrupted = self.summary["interrupted"]["message"]
            .as_str()
            .or_else(|| self.ours.as_ref()?["interrupted"]["message"].as_str());
        if let Some(message) = interrupted {
            notes.push(message.to_string());
        }
        if let Some(line) = self
            .ours
            .as_ref()
            .and_then(|o| o["verdict"]["line"].as_str())
        {
            notes.push(line.to_string());
        }
        notes
    }

    /// A metric's per-epoch values, if this run recorded it.
    fn metric(&self, metric: &Metric) -> Option<Vec<f64>> {
        match metric.source {
            Source::Summary(key) => {
                let values = html::numbers(&self.summary["metric"][key]);
                (!values.is_empty()).then_some(values)
            }
            Source::Epochs(key) => {
                let epochs = self.ours.as_ref()?["epochs"].as_array()?;
                epochs.iter().map(|e| e[key].as_f64()).collect()
            }
        }
    }
}

enum Source {
    /// A list in summary.json's `metric` (DLIO's and dlio-rs's).
    Summary(&'static str),
    /// A value of each epoch in report.json (dlio-rs's).
    Epochs(&'static str),
}

struct Metric {
    name: &'static str,
    /// The title of its chart's value axis, with the unit.
    axis: &'static str,
    /// Its largest possible value (AU's 100 %, the cache share's 1): the axis ends there.
    most: Option<f64>,
    source: Source,
}

const METRICS: [Metric; 6] = [
    Metric {
        name: "AU",
        axis: "AU (%)",
        most: Some(100.0),
        source: Source::Summary("train_au_percentage"),
    },
    Metric {
        name: "samples/s",
        axis: "samples/s (all accelerators)",
        most: None,
        source: Source::Summary("train_throughput_samples_per_second"),
    },
    Metric {
        name: "MiB/s read",
        axis: "MiB/s read",
        most: None,
        source: Source::Epochs("measured_mib_per_second"),
    },
    Metric {
        name: "read p50 µs",
        axis: "read latency p50 (µs)",
        most: None,
        source: Source::Epochs("p50_us"),
    },
    Metric {
        name: "read p99 µs",
        axis: "read latency p99 (µs)",
        most: None,
        source: Source::Epochs("p99_us"),
    },
    Metric {
        name: "cache share",
        axis: "cache share (fraction of the bytes read)",
        most: Some(1.0),
        source: Source::Epochs("cache_served_fraction"),
    },
];

/// A metric of both runs.
pub struct Row {
    pub metric: &'static str,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    /// `None`: a run has fewer than two epochs, so its noise is unknown.
    pub noise: Option<WelchBound>,
    /// Whether the difference is judged at all: not between runs of different workloads.
    pub judged: bool,
}

impl Row {
    pub fn mean_a(&self) -> f64 {
        crate::stats::mean_stdev(&self.a).0
    }

    pub fn mean_b(&self) -> f64 {
        crate::stats::mean_stdev(&self.b).0
    }

    /// The difference of means is judged, and larger than its t bound.
    pub fn differs(&self) -> bool {
        self.judged
            && self
                .noise
                .is_some_and(|noise| (self.mean_b() - self.mean_a()).abs() > noise.bound)
    }

    /// What the table says of the difference, and the same as a JSON word.
    fn verdict(&self) -> (&'static str, &'static str) {
        match (self.judged, self.noise, self.differs()) {
            (false, ..) => ("not judged (different workloads)", "not_judged"),
            (true, None, _) => ("noise unknown (a run has < 2 epochs)", "noise_unknown"),
            (true, Some(_), true) => ("DIFFERS", "differs"),
            (true, Some(_), false) => ("within noise", "within_noise"),
        }
    }

    /// (B − A)/|A| in percent; `None` when A's mean is 0.
    fn relative_change(&self) -> Option<f64> {
        let (ma, mb) = (self.mean_a(), self.mean_b());
        (ma != 0.0).then(|| (mb - ma) / ma.abs() * 100.0)
    }
}

/// A key whose values differ between the runs; `None` where a run does not have it.
pub struct Difference {
    pub key: String,
    pub a: Option<Value>,
    pub b: Option<Value>,
}

impl Difference {
    fn to_json(&self) -> Value {
        serde_json::json!({"key": self.key, "a": self.a, "b": self.b})
    }

    /// `key (A: x, B: y)`.
    fn describe(&self) -> String {
        format!(
            "{} (A: {}, B: {})",
            self.key,
            shown(&self.a),
            shown(&self.b)
        )
    }
}

/// A value as the reader reads it: a string without its quotes, `(absent)` where there is none.
fn shown(value: &Option<Value>) -> String {
    match value {
        None => "(absent)".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// Two runs compared: what differs in their configurations, and each metric both recorded.
pub struct Comparison {
    pub a: RunFiles,
    pub b: RunFiles,
    /// Every key whose values differ (the [`IGNORED`] aside), the accelerator count first;
    /// empty when either configuration is unknown.
    pub configuration: Vec<Difference>,
    /// The differences that make the runs different workloads ([`WORKLOAD_KEYS`], the
    /// accelerator count); only the accelerator count is known when a configuration is not.
    pub workload: Vec<Difference>,
    pub rows: Vec<Row>,
}

/// The runs of `a` and `b` compared. Runs of different workloads are a usage error, unless
/// `different_workloads`: then they are shown side by side, no difference judged.
pub fn compare(a: RunFiles, b: RunFiles, different_workloads: bool) -> Result<Comparison> {
    let accelerators = Difference {
        key: ACCELERATORS.to_string(),
        a: Some(a.accelerators()),
        b: Some(b.accelerators()),
    };
    let mut configuration = Vec::new();
    if accelerators.a != accelerators.b {
        configuration.push(accelerators);
    }
    if let (Some(ca), Some(cb)) = (&a.configuration, &b.configuration) {
        configuration.extend(differences(&ca.keys, &cb.keys));
    }
    let workload: Vec<Difference> = configuration
        .iter()
        .filter(|d| d.key == ACCELERATORS || is_workload_key(&d.key))
        .map(|d| Difference {
            key: d.key.clone(),
            a: d.a.clone(),
            b: d.b.clone(),
        })
        .collect();
    if !workload.is_empty() && !different_workloads {
        let said: Vec<String> = workload.iter().map(Difference::describe).collect();
        return Err(Error::usage(format!(
            "{} and {} are runs of different workloads — {}: their figures differ for that \
             alone, so no difference between them can be judged noise or not; give \
             --different-workloads to see them side by side anyway",
            a.name,
            b.name,
            said.join(", ")
        )));
    }
    let judged = workload.is_empty();
    let rows = METRICS
        .iter()
        .filter_map(|m| {
            let (values_a, values_b) = (a.metric(m)?, b.metric(m)?);
            Some(Row {
                metric: m.name,
                noise: welch(&values_a, &values_b),
                a: values_a,
                b: values_b,
                judged,
            })
        })
        .collect();
    Ok(Comparison {
        a,
        b,
        configuration,
        workload,
        rows,
    })
}

/// Whether a difference in `key` makes another workload.
fn is_workload_key(key: &str) -> bool {
    WORKLOAD_KEYS.iter().any(|w| {
        key.strip_prefix(w)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('.'))
    })
}

/// The keys whose values differ, in A's order then B's own: numbers by value (4 and 4.0 are the
/// same), everything else as written.
fn differences(a: &[(String, Value)], b: &[(String, Value)]) -> Vec<Difference> {
    let find = |keys: &[(String, Value)], key: &str| {
        keys.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    };
    let same = |x: &Option<Value>, y: &Option<Value>| match (x, y) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64() == y.as_f64(),
        _ => x == y,
    };
    let mut found = Vec::new();
    let keys = a.iter().map(|(k, _)| k).chain(
        b.iter()
            .map(|(k, _)| k)
            .filter(|k| !a.iter().any(|(ka, _)| ka == *k)),
    );
    for key in keys {
        let (va, vb) = (find(a, key), find(b, key));
        if !same(&va, &vb) {
            found.push(Difference {
                key: key.clone(),
                a: va,
                b: vb,
            });
        }
    }
    found
}

/// A run's configuration: report.json's `configuration`, else a saved config.yaml's `workload`
/// tree; `None` when the folder keeps neither.
fn read_configuration(dir: &Path, ours: Option<&Value>) -> Result<Option<Configuration>> {
    if let Some(tree) = ours.and_then(|o| o.get("configuration")) {
        if !tree.is_object() {
            return Err(crate::folder::bad_output_file(
                &dir.join("report.json"),
                "'configuration' must be an object",
            ));
        }
        return Ok(Some(Configuration {
            source: "report.json".to_string(),
            keys: flatten(tree),
        }));
    }
    for relative in SAVED_CONFIGURATIONS {
        let path = dir.join(relative);
        let Some(text) = crate::folder::read_output_file(&path, crate::folder::MAX_SUMMARY_JSON)?
        else {
            continue;
        };
        let bad = |problem: &str| crate::folder::bad_output_file(&path, problem);
        let tree = crate::config::value::Value::from_yaml(&text)
            .map_err(|e| bad(&format!("not valid YAML ({e})")))?
            .to_json();
        let workload = tree
            .get("workload")
            .filter(|w| w.is_object())
            .ok_or_else(|| bad("it must hold the configuration under 'workload:'"))?;
        return Ok(Some(Configuration {
            source: relative.to_string(),
            keys: flatten(workload),
        }));
    }
    Ok(None)
}

/// The leaves of `tree` as dotted keys (a list is one leaf), the [`IGNORED`] left out.
fn flatten(tree: &Value) -> Vec<(String, Value)> {
    fn walk(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
        match value {
            Value::Object(map) if !map.is_empty() || prefix.is_empty() => {
                for (key, child) in map {
                    let dotted = match prefix {
                        "" => key.clone(),
                        _ => format!("{prefix}.{key}"),
                    };
                    walk(&dotted, child, out);
                }
            }
            leaf => {
                if !IGNORED.contains(&prefix) {
                    out.push((prefix.to_string(), leaf.clone()));
                }
            }
        }
    }
    let mut out = Vec::new();
    walk("", tree, &mut out);
    out
}

impl Comparison {
    /// What the reader must know before any figure: that the runs are of different workloads
    /// (and which keys make them so), or that a configuration is unknown.
    fn warnings(&self) -> Vec<String> {
        let mut warnings = Vec::new();
        if !self.workload.is_empty() {
            let said: Vec<String> = self.workload.iter().map(Difference::describe).collect();
            warnings.push(format!(
                "DIFFERENT WORKLOADS — {}: the figures differ for that alone; they are shown \
                 side by side, and no difference is judged noise or not",
                said.join(", ")
            ));
        }
        for (label, run) in [("A", &self.a), ("B", &self.b)] {
            if run.configuration.is_none() {
                warnings.push(format!(
                    "the configuration of {label} is unknown ({} has no report.json \
                     'configuration' and no {}): whether the runs are of one workload is \
                     known from their accelerator counts only",
                    run.name,
                    SAVED_CONFIGURATIONS.join(" or ")
                ));
            }
        }
        warnings
    }

    /// The comparison, for the terminal.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for warning in self.warnings() {
            let _ = writeln!(out, "WARNING: {warning}\n");
        }
        for (label, run) in [("A", &self.a), ("B", &self.b)] {
            let _ = writeln!(out, "{label}: {}", run.name);
            for note in run.notes() {
                let _ = writeln!(out, "   {note}");
            }
        }
        out.push('\n');
        let known = self.a.configuration.is_some() && self.b.configuration.is_some();
        match (self.configuration.is_empty(), known) {
            (true, true) => {
                out.push_str("Configuration: the same (output folders and credentials aside)\n")
            }
            (true, false) => out.push_str("Configuration: not compared (unknown)\n"),
            (false, _) => {
                let _ = writeln!(
                    out,
                    "Configuration difference ({} key(s)):",
                    self.configuration.len()
                );
                let width = self.configuration.iter().map(|d| d.key.len()).max();
                for d in &self.configuration {
                    let _ = writeln!(
                        out,
                        "  {:<width$}  A: {}  B: {}",
                        d.key,
                        shown(&d.a),
                        shown(&d.b),
                        width = width.unwrap_or(0)
                    );
                }
            }
        }
        out.push('\n');
        let _ = writeln!(
            out,
            "{:<14} {:>14} {:>14} {:>9} {:>14}  verdict",
            "metric", "A (mean)", "B (mean)", "B − A", "noise (95 % t)"
        );
        for row in &self.rows {
            let change = row
                .relative_change()
                .map_or("-".to_string(), |c| format!("{c:+.1} %"));
            let _ = writeln!(
                out,
                "{:<14} {:>14.2} {:>14.2} {:>9} {:>14}  {}",
                row.metric,
                row.mean_a(),
                row.mean_b(),
                change,
                row.noise
                    .map_or("-".to_string(), |n| format!("{:.2}", n.bound)),
                row.verdict().0
            );
        }
        out
    }

    /// The comparison as `compare --output-format json` shows it (docs/running.md), `page` the
    /// page written beside it.
    pub fn to_json(&self, page: &Path) -> Value {
        let run = |run: &RunFiles| {
            serde_json::json!({
                "folder": run.name,
                "num_accelerators": run.accelerators(),
                "notes": run.notes(),
                "configuration_source": run.configuration.as_ref().map(|c| &c.source),
            })
        };
        let known = self.a.configuration.is_some() && self.b.configuration.is_some();
        let metrics: Vec<Value> = self
            .rows
            .iter()
            .map(|row| {
                let noise = row.noise;
                serde_json::json!({
                    "metric": row.metric,
                    "a": row.a,
                    "b": row.b,
                    "mean_a": row.mean_a(),
                    "mean_b": row.mean_b(),
                    "difference": row.mean_b() - row.mean_a(),
                    "relative_change_percent": row.relative_change(),
                    "standard_error": noise.map(|n| n.standard_error),
                    "degrees_of_freedom": noise.map(|n| n.degrees_of_freedom),
                    "t_quantile": noise.map(|n| n.t_quantile),
                    "bound": noise.map(|n| n.bound),
                    "flagged": row.differs(),
                    "verdict": row.verdict().1,
                })
            })
            .collect();
        serde_json::json!({
            "a": run(&self.a),
            "b": run(&self.b),
            // `null`: a configuration is unknown, and the accelerator counts agree.
            "same_workload": match (self.workload.is_empty(), known) {
                (false, _) => Some(false),
                (true, true) => Some(true),
                (true, false) => None,
            },
            "workload_differences": self.workload.iter().map(Difference::to_json).collect::<Vec<_>>(),
            "configuration_compared": known,
            "configuration_differences": self.configuration.iter().map(Difference::to_json).collect::<Vec<_>>(),
            "warnings": self.warnings(),
            "judged": self.workload.is_empty(),
            "confidence": CONFIDENCE,
            "metrics": metrics,
            "page": page,
        })
    }

    /// The per-epoch comparison as `compare --output-format csv` shows it: a row per metric and
    /// epoch, with A's value, B's and B − A (empty where a run has no such epoch).
    pub fn to_csv(&self) -> String {
        let mut csv = crate::machine::Csv::new(&["metric", "epoch", "a", "b", "b_minus_a"]);
        let value = |v: Option<&f64>| v.map_or(String::new(), f64::to_string);
        for row in &self.rows {
            for epoch in 0..row.a.len().max(row.b.len()) {
                let (a, b) = (row.a.get(epoch), row.b.get(epoch));
                let difference = a.zip(b).map(|(a, b)| b - a);
                csv.row([
                    row.metric.to_string(),
                    (epoch + 1).to_string(),
                    value(a),
                    value(b),
                    value(difference.as_ref()),
                ]);
            }
        }
        csv.finish()
    }

    /// The page: the warnings, the configuration difference, the same table, and each metric's
    /// epochs of both runs side by side.
    pub fn page(&self) -> String {
        let (a, b) = (&self.a, &self.b);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>dlio-rs \
             compare</title><style>{}</style></head><body>\n<h1>Two runs compared</h1>\n<p>A: \
             {}<br>B: {}</p>",
            html::STYLE,
            html::escape(&a.name),
            html::escape(&b.name)
        );
        for warning in self.warnings() {
            let _ = writeln!(
                out,
                "<p class=\"warn\"><strong>{}</strong></p>",
                html::escape(&warning)
            );
        }
        for (label, run) in [("A", a), ("B", b)] {
            for note in run.notes() {
                let _ = writeln!(
                    out,
                    "<p class=\"warn\">{label}: {}</p>",
                    html::escape(&note)
                );
            }
        }
        if !self.configuration.is_empty() {
            out.push_str(
                "<h2>Configuration difference</h2><table><tr><th>key</th><th>A</th><th>B</th></tr>",
            );
            for d in &self.configuration {
                let _ = write!(
                    out,
                    "<tr data-key=\"{}\"><td>{}</td><td>{}</td><td>{}</td></tr>",
                    html::escape(&d.key),
                    html::escape(&d.key),
                    html::escape(&shown(&d.a)),
                    html::escape(&shown(&d.b))
                );
            }
            out.push_str("</table>\n");
        }
        out.push_str(
            "<table><tr><th>metric</th><th>A</th><th>B</th><th>noise (95 % t)</th><th></th></tr>",
        );
        for row in &self.rows {
            let _ = write!(
                out,
                "<tr data-metric=\"{}\" data-differs=\"{}\"><td>{}</td><td>{:.2}</td><td>{:.2}</td>\
                 <td>{}</td><td>{}</td></tr>",
                html::escape(row.metric),
                row.differs(),
                html::escape(row.metric),
                row.mean_a(),
                row.mean_b(),
                row.noise.map_or("-".to_string(), |n| format!("{:.2}", n.bound)),
                match (row.judged, row.differs()) {
                    (false, _) => "not judged",
                    (true, true) => "<strong>differs</strong>",
                    (true, false) => "",
                }
            );
        }
        out.push_str("</table>\n");
        for row in &self.rows {
            let _ = writeln!(
                out,
                "<h2>{} per epoch</h2>{}",
                html::escape(row.metric),
                row.chart()
            );
        }
        out.push_str("</body></html>\n");
        out
    }
}

impl Row {
    /// Both runs' values per epoch, side by side (A blue, B amber, as the legend says); left
    /// out, with a sentence, when there is nothing to see: no epoch, or zeros only.
    fn chart(&self) -> String {
        let name = self.metric;
        let Some(metric) = METRICS.iter().find(|m| m.name == name) else {
            return String::new();
        };
        let epochs = self.a.len().max(self.b.len());
        if epochs == 0 {
            return chart::left_out(
                name,
                &format!("Neither run has an epoch of {name} to draw."),
            );
        }
        let top = self.a.iter().chain(&self.b).copied().fold(0.0, f64::max);
        if self.a.iter().chain(&self.b).all(|&v| v == 0.0) {
            return chart::left_out(
                name,
                &format!("Both runs' {name} is 0 in every epoch: there is nothing to draw."),
            );
        }
        let y = match metric.most {
            Some(most) => Axis::linear(metric.axis).up_to(most),
            None => Axis::linear(metric.axis),
        };
        let low = self.a.iter().chain(&self.b).copied().fold(0.0, f64::min);
        let mut canvas = Chart::new(
            name,
            format!("{name} per epoch, A and B"),
            Axis::slots("epoch", epochs),
            y,
        )
        .legend(vec![
            Key::fill("run A", STORAGE_COLOR),
            Key::fill("run B", BARRIER_COLOR),
        ])
        .frame((0.5, epochs as f64 + 0.5), (low, top));
        for (run, values, colour, shift) in [
            ("A", &self.a, STORAGE_COLOR, -0.4),
            ("B", &self.b, BARRIER_COLOR, 0.0),
        ] {
            for (i, &value) in values.iter().enumerate() {
                let at = i as f64 + 1.0 + shift;
                canvas.bar(
                    (at, at + 0.4),
                    (0.0, value),
                    &Mark {
                        class: "mark",
                        value,
                        colour,
                        title: &format!("{run}, epoch {}: {value:.2}", i + 1),
                        attributes: &format!("data-run=\"{run}\""),
                        ..Mark::default()
                    },
                );
            }
        }
        canvas.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(name: &str, au: Vec<f64>, configuration: Option<Value>) -> RunFiles {
        RunFiles {
            name: name.into(),
            summary: serde_json::json!({"num_accelerators": 1, "metric": {"train_au_percentage": au}}),
            ours: None,
            configuration: configuration.map(|tree| Configuration {
                source: "report.json".into(),
                keys: flatten(&tree),
            }),
        }
    }

    fn row(a: Vec<f64>, b: Vec<f64>) -> Row {
        compare(run("a", a, None), run("b", b, None), false)
            .unwrap()
            .rows
            .remove(0)
    }

    #[test]
    fn a_difference_is_flagged_beyond_its_t_bound() {
        // Sample variance 2 in each run of 2 epochs: standard error √(2/2 + 2/2) = √2, Welch's
        // ν = 2² / (1²/1 + 1²/1) = 2, whose 0.975 quantile is 0.95/√(2·0.975·0.025) = 4.302 65;
        // the bound is 4.302 65 · √2 ≈ 6.085. Means 91 and 92.5 differ by 1.5, within it; 91
        // and 96 by 5, within it too (twice the standard error, 2.83, called that a
        // difference); 91 and 100 by 9, beyond it.
        let close = row(vec![90.0, 92.0], vec![91.5, 93.5]);
        let noise = close.noise.unwrap();
        assert_eq!(noise.degrees_of_freedom, 2.0);
        let t = 0.95 / (2.0_f64 * 0.975 * 0.025).sqrt();
        assert!((noise.bound - t * 2f64.sqrt()).abs() < 1e-9, "{noise:?}");
        assert!(!close.differs());
        assert!(!row(vec![90.0, 92.0], vec![95.0, 97.0]).differs());
        assert!(row(vec![90.0, 92.0], vec![99.0, 101.0]).differs());
        let single = row(vec![90.0], vec![50.0]);
        assert_eq!(single.noise, None);
        assert!(!single.differs());
    }

    #[test]
    fn different_workloads_are_refused_unless_asked_and_then_not_judged() {
        let tree = |batch: u64, throttle: u64| {
            serde_json::json!({
                "model": {"name": "unet3d"},
                "reader": {"batch_size": batch, "read_threads": 4},
                "storage": {"throttle": {"mib_per_second": throttle}},
                "output": {"folder": format!("out{batch}{throttle}")},
            })
        };
        let (a, b) = (vec![90.0, 92.0], vec![99.0, 101.0]);
        // Another storage speed, another output folder: one workload, judged.
        let same = compare(
            run("a", a.clone(), Some(tree(4, 10))),
            run("b", b.clone(), Some(tree(4, 20))),
            false,
        )
        .unwrap();
        let keys: Vec<&str> = same.configuration.iter().map(|d| d.key.as_str()).collect();
        assert_eq!(keys, ["storage.throttle.mib_per_second"]);
        assert!(same.workload.is_empty() && same.rows[0].differs());
        let text = same.render();
        assert!(
            text.contains("storage.throttle.mib_per_second  A: 10  B: 20"),
            "{text}"
        );
        // Another batch size: refused, naming the key and both values.
        let other = || {
            (
                run("a", a.clone(), Some(tree(4, 10))),
                run("b", b.clone(), Some(tree(8, 10))),
            )
        };
        let (x, y) = other();
        let error = compare(x, y, false).err().expect("refused");
        assert_eq!(error.exit_code(), 2);
        assert!(
            error.to_string().contains("reader.batch_size (A: 4, B: 8)"),
            "{error}"
        );
        assert!(
            error.to_string().contains("--different-workloads"),
            "{error}"
        );
        let (x, y) = other();
        let shown = compare(x, y, true).unwrap();
        assert!(!shown.rows[0].differs());
        let text = shown.render();
        assert!(
            text.starts_with("WARNING: DIFFERENT WORKLOADS — reader.batch_size"),
            "{text}"
        );
        assert!(text.contains("not judged (different workloads)"), "{text}");
        let json = shown.to_json(Path::new("c.html"));
        assert_eq!(json["same_workload"], false);
        assert_eq!(json["judged"], false);
        assert_eq!(json["metrics"][0]["verdict"], "not_judged");
        assert_eq!(json["workload_differences"][0]["key"], "reader.batch_size");
    }

    #[test]
    fn configurations_are_flattened_without_what_cannot_change_a_result() {
        let tree = serde_json::json!({
            "train": {"computation_time": {"mean": 0.1, "stdev": 0.01}, "epochs": 3},
            "output": {"folder": "x", "log_file": "l", "exclude_start_steps": 1},
            "storage": {"storage_options": {"secret_access_key": "s", "endpoint_url": "e"}},
            "dataset": {"record_dims": [1, 2], "hdf5": {}},
        });
        let keys: Vec<String> = flatten(&tree).into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            [
                "train.computation_time.mean",
                "train.computation_time.stdev",
                "train.epochs",
                "output.exclude_start_steps",
                "storage.storage_options.endpoint_url",
                "dataset.record_dims",
                "dataset.hdf5",
            ]
        );
        assert!(is_workload_key("train.computation_time.mean"));
        assert!(!is_workload_key("train.computation_timex"));
        // 4 and 4.0 are one value; a key one run lacks is a difference.
        let a = vec![
            ("k".to_string(), serde_json::json!(4)),
            ("only_a".into(), serde_json::json!(true)),
        ];
        let b = vec![("k".to_string(), serde_json::json!(4.0))];
        let found = differences(&a, &b);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].describe(), "only_a (A: true, B: (absent))");
    }

    #[test]
    fn the_per_epoch_table_has_a_row_per_metric_and_epoch() {
        let c = compare(
            run("a", vec![1.0, 2.0, 3.0], None),
            run("b", vec![1.5, 2.5], None),
            false,
        )
        .unwrap();
        assert_eq!(
            c.to_csv(),
            "metric,epoch,a,b,b_minus_a\r\nAU,1,1,1.5,0.5\r\nAU,2,2,2.5,0.5\r\nAU,3,3,,\r\n"
        );
        // Neither configuration is known: said, and the workloads' sameness is unknown.
        let json = c.to_json(Path::new("c.html"));
        assert_eq!(json["same_workload"], Value::Null);
        assert_eq!(json["warnings"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn an_interrupted_run_and_each_verdict_are_said_beside_the_figures() {
        let mut a = run("a", vec![99.0], None);
        a.summary["interrupted"] =
            serde_json::json!({"message": "interrupted by SIGINT after 1 of 3 epoch(s)"});
        a.ours = Some(
            serde_json::json!({"verdict": {"line": "Verdict: PASS · NOT VALID \
            (interrupted) · no MLPerf category"}}),
        );
        let tree = serde_json::json!({"model": {"name": "m"}});
        a.configuration = Some(Configuration {
            source: "report.json".into(),
            keys: flatten(&tree),
        });
        let b = run("b", vec![98.0], Some(tree));
        assert!(b.notes().is_empty());
        let c = compare(a, b, false).unwrap();
        let text = c.render();
        assert!(text.starts_with(
            "A: a\n   interrupted by SIGINT after 1 of 3 epoch(s)\n   Verdict: PASS · NOT VALID \
             (interrupted) · no MLPerf category\nB: b\n\nConfiguration: the same"
        ), "{text}");
        let page = c.page();
        assert!(
            page.contains("<p class=\"warn\">A: interrupted by SIGINT after 1 of 3 epoch(s)</p>")
        );
    }
}
