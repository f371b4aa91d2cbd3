//! `report.html`: the run for people, one self-contained file (no script, no network, no font
//! beyond the browser's own sans-serif), readable in any browser and printable. Built from the
//! run's output files alone — DLIO's `summary.json` and `{rank}_output.json`, and dlio-rs's
//! `report.json` where there is one — so that `dlio-rs report DIR` rebuilds it, also for a run of
//! Python DLIO (which has no report.json: the charts that need it are left out, and say so).
//!
//! The charts are SVG drawn by [`super::chart`] (docs/running.md says why: crisp at any zoom and
//! in print, a `<title>` per chart and per mark for screen readers and hover, and no dependency).
//! Every mark carries its value in `data-value`, so that a test can check the picture shows the
//! run; a chart with nothing to draw is left out, with a sentence saying why.
//! Steps are drawn in at most [`TIMELINE_COLUMNS`] columns per rank (the mean of the steps each
//! holds), so that a 10,000-step run stays a few hundred KiB.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::chart::{
    self, Axis, Chart, Key, Mark, BARRIER_COLOR, CACHE_COLOR, COMPUTE_COLOR, FAIL_COLOR,
    LOAD_COLOR, PASS_COLOR, STORAGE_COLOR,
};
use crate::error::{Error, Result};
use crate::folder::{MAX_OUTPUT_JSON, MAX_SUMMARY_JSON};

/// Columns of a rank's step timeline, at most.
pub const TIMELINE_COLUMNS: usize = 400;
/// Ranks drawn in the timeline, at most (the others are said to be left out).
const TIMELINE_RANKS: usize = 32;

/// One rank's steps: (load wait, compute, barrier and the rest) in seconds.
type Steps = Vec<(f64, f64, f64)>;

/// Builds report.html's text from the output folder `dir`.
pub fn from_folder(dir: &Path) -> Result<String> {
    let summary = read_json(&dir.join("summary.json"), MAX_SUMMARY_JSON)?.ok_or_else(|| {
        Error::usage(format!(
            "{} has no summary.json: not the output folder of a training run (of dlio-rs or \
             DLIO)",
            dir.display()
        ))
    })?;
    let ours = read_json(&dir.join("report.json"), MAX_SUMMARY_JSON)?;
    check_shapes(dir, &summary, ours.as_ref())?;
    check_lists(dir, &summary, ours.as_ref())?;
    let ranks = summary["num_accelerators"].as_u64().unwrap_or(0) as usize;
    let mut timelines = Vec::new();
    for rank in 0..ranks.min(TIMELINE_RANKS) {
        let path = dir.join(format!("{rank}_output.json"));
        if let Some(output) = read_json(&path, MAX_OUTPUT_JSON)? {
            if !output.is_object() {
                return Err(crate::folder::bad_output_file(
                    &path,
                    "the file must be a JSON object of epochs",
                ));
            }
            timelines.push((rank, steps_of(&path, &output)?));
        }
    }
    let over_time = super::over_time::read(dir)?;
    Ok(render(
        dir,
        &summary,
        ours.as_ref(),
        ranks,
        &timelines,
        over_time.as_ref(),
    ))
}

/// The fields the page and `compare` read have the types a run writes (a number where a number
/// goes, a list of numbers where a list goes); what does not is refused by file and field, never
/// drawn as zeros.
pub(super) fn check_shapes(dir: &Path, summary: &Value, ours: Option<&Value>) -> Result<()> {
    let bad = |file: &str, field: &str, what: &str| {
        let problem = match field {
            "" => format!("the file must be {what}"),
            field => format!("'{field}' must be {what}"),
        };
        Err(crate::folder::bad_output_file(&dir.join(file), &problem))
    };
    let numbers_or_absent =
        |v: &Value| v.is_null() || v.as_array().is_some_and(|l| l.iter().all(Value::is_number));
    let number_or_absent = |v: &Value| v.is_null() || v.is_number();
    if !summary.is_object() {
        return bad("summary.json", "", "a JSON object");
    }
    let ranks = summary["num_accelerators"].as_u64();
    if ranks.is_none_or(|r| crate::comm::check_world(r).is_err()) {
        let what = format!("a whole number from 1 to {}", crate::comm::MAX_WORLD);
        return bad("summary.json", "num_accelerators", &what);
    }
    let metric = &summary["metric"];
    if !metric.is_object() {
        return bad("summary.json", "metric", "an object");
    }
    for field in ["train_au_percentage", "train_throughput_samples_per_second"] {
        if !numbers_or_absent(&metric[field]) {
            return bad(
                "summary.json",
                &format!("metric.{field}"),
                "a list of numbers",
            );
        }
    }
    for field in [
        "train_au_mean_percentage",
        "train_throughput_mean_samples_per_second",
        "train_io_mean_MB_per_second",
    ] {
        if !number_or_absent(&metric[field]) {
            return bad("summary.json", &format!("metric.{field}"), "a number");
        }
    }
    let Some(ours) = ours else { return Ok(()) };
    if !ours.is_object() {
        return bad("report.json", "", "a JSON object");
    }
    let world = &ours["num_accelerators"];
    if !(world.is_null()
        || world
            .as_u64()
            .is_some_and(|r| crate::comm::check_world(r).is_ok()))
    {
        let what = format!("a whole number from 1 to {}", crate::comm::MAX_WORLD);
        return bad("report.json", "num_accelerators", &what);
    }
    let epochs = &ours["epochs"];
    if !(epochs.is_null()
        || epochs
            .as_array()
            .is_some_and(|l| l.iter().all(Value::is_object)))
    {
        return bad("report.json", "epochs", "a list of objects");
    }
    let histogram = &ours["read_latency_histogram_us"];
    let bucket = |b: &Value| {
        b.as_array()
            .is_some_and(|b| b.len() == 2 && b[0].is_number() && b[1].is_u64())
    };
    if !(histogram.is_null() || histogram.as_array().is_some_and(|l| l.iter().all(bucket))) {
        return bad(
            "report.json",
            "read_latency_histogram_us",
            "a list of [microseconds, count] pairs",
        );
    }
    Ok(())
}

/// The most entries a list the page draws as bars may have (an epoch's figures: a run has at most
/// a million epochs; a checkpoint's per rank; the latency histogram's bins, a few hundred).
const MAX_BARS: usize = 1_000_000;

/// Every list the page draws has at most [`MAX_BARS`] entries: a forged list of a hundred million
/// would make a page of gigabytes. Refused by file and field, as bad input.
fn check_lists(dir: &Path, summary: &Value, ours: Option<&Value>) -> Result<()> {
    let long = |list: &Value| list.as_array().is_some_and(|l| l.len() > MAX_BARS);
    for field in ["train_au_percentage", "train_throughput_samples_per_second"] {
        if long(&summary["metric"][field]) {
            return Err(too_long(
                &dir.join("summary.json"),
                &format!("metric.{field}"),
            ));
        }
    }
    let Some(ours) = ours else { return Ok(()) };
    let report = dir.join("report.json");
    for field in ["epochs", "read_latency_histogram_us"] {
        if long(&ours[field]) {
            return Err(too_long(&report, field));
        }
    }
    let checkpoint_bars: usize = ours["checkpoints"]["list"]
        .as_array()
        .map(|list| {
            list.iter()
                .map(|c| c["per_rank_seconds"].as_array().map_or(0, Vec::len))
                .fold(0, usize::saturating_add)
        })
        .unwrap_or(0);
    if checkpoint_bars > MAX_BARS {
        return Err(too_long(&report, "checkpoints.list[].per_rank_seconds"));
    }
    Ok(())
}

fn too_long(path: &Path, field: &str) -> Error {
    crate::folder::bad_output_file(path, &format!("'{field}' has more than {MAX_BARS} entries"))
}

/// A JSON output file, `None` where there is none.
pub(super) fn read_json(path: &Path, limit: u64) -> Result<Option<Value>> {
    match crate::folder::read_output_file(path, limit)? {
        Some(text) => serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| crate::folder::bad_output_file(path, &format!("not valid JSON ({e})"))),
        None => Ok(None),
    }
}

/// The steps of a rank's `{rank}_output.json`, epoch after epoch: DLIO's `load`, `compute` and
/// `proc` (the whole step) lists per block; what `proc` has beyond the other two is the barrier.
fn steps_of(path: &Path, output: &Value) -> Result<Steps> {
    // Each epoch's blocks are lists of seconds, as a run writes them.
    let seconds = |v: &Value| v.as_array().is_some_and(|l| l.iter().all(Value::is_number));
    for (key, epoch) in output.as_object().into_iter().flatten() {
        if key.parse::<u64>().is_err() {
            continue;
        }
        for part in ["load", "compute", "proc"] {
            let blocks = &epoch[part];
            let fine =
                blocks.is_null() || blocks.as_object().is_some_and(|b| b.values().all(seconds));
            if !fine {
                return Err(crate::folder::bad_output_file(
                    path,
                    &format!("'{key}.{part}' must be an object of lists of seconds"),
                ));
            }
        }
    }
    let mut epochs: Vec<(u64, &Value)> = output
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.parse::<u64>().ok()?, v)))
                .collect()
        })
        .unwrap_or_default();
    epochs.sort_by_key(|(e, _)| *e);
    let mut steps = Vec::new();
    for (_, epoch) in epochs {
        let blocks = |key: &str| -> Vec<f64> {
            let mut all: Vec<(&String, &Value)> = epoch[key]
                .as_object()
                .map(|o| o.iter().collect())
                .unwrap_or_default();
            all.sort_by_key(|(name, _)| {
                name.trim_start_matches("block").parse::<u64>().unwrap_or(0)
            });
            all.iter()
                .flat_map(|(_, list)| list.as_array().cloned().unwrap_or_default())
                .map(|v| v.as_f64().unwrap_or(0.0))
                .collect()
        };
        let (load, compute, proc) = (blocks("load"), blocks("compute"), blocks("proc"));
        for (i, &whole) in proc.iter().enumerate() {
            let load = load.get(i).copied().unwrap_or(0.0);
            let compute = compute.get(i).copied().unwrap_or(0.0);
            steps.push((load, compute, (whole - load - compute).max(0.0)));
        }
    }
    Ok(steps)
}

fn render(
    dir: &Path,
    summary: &Value,
    ours: Option<&Value>,
    ranks: usize,
    timelines: &[(usize, Steps)],
    over_time: Option<&super::over_time::OverTime>,
) -> String {
    let metric = &summary["metric"];
    let workload = ours
        .and_then(|o| o["workload"].as_str())
        .unwrap_or("(workload not recorded)");
    let threshold = ours
        .and_then(|o| o["train"]["au_threshold_percent"].as_f64())
        .unwrap_or(90.0);
    let au = numbers(&metric["train_au_percentage"]);
    let samples = numbers(&metric["train_throughput_samples_per_second"]);
    let mean_au = metric["train_au_mean_percentage"].as_f64();
    // dlio-rs's own verdict when the folder has one (an interrupted run's epochs can meet the
    // threshold while summary.json says `fail`, the run not having completed); DLIO's otherwise.
    let passed = ours
        .and_then(|o| o["verdict"]["au_passed"].as_bool())
        .unwrap_or(metric["train_au_meet_expectation"].as_str() == Some("success"));
    let mut html = String::new();
    let title = format!("{workload} · {ranks} accelerator(s) · dlio-rs report");
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{}</title><style>{STYLE}</style></head><body>\n",
        escape(&title)
    );
    let _ = writeln!(html, "<h1>{}</h1>", escape(&title));
    banner(&mut html, mean_au, passed, threshold, ours);
    key_numbers(&mut html, metric, ours);
    reasons(&mut html, ours);

    section(
        &mut html,
        "AU per epoch",
        "The share of each epoch's time the accelerators computed, against the threshold.",
    );
    html.push_str(&au_chart(&au, threshold));
    section(
        &mut html,
        "Throughput per epoch",
        "Samples per second, all accelerators.",
    );
    html.push_str(&samples_chart(&samples));
    section(
        &mut html,
        "Bytes from storage and from cache per epoch",
        "What the readers read, split by where it came from (dlio-rs's report.json).",
    );
    match ours.and_then(|o| o["epochs"].as_array()) {
        Some(epochs) => html.push_str(&storage_bars(epochs)),
        None => html.push_str(NO_REPORT),
    }
    section(
        &mut html,
        "The run over time",
        "What the run did second by second (timeseries.jsonl): throughput, AU, reads in flight \
         and the disks the run's folders are on. A stall of the storage shows as throughput and \
         AU falling to 0 while the reads in flight stay up.",
    );
    match over_time {
        Some(over_time) => html.push_str(&over_time.charts()),
        None => html.push_str(&chart::left_out(
            "over-time",
            "No timeseries.jsonl in the folder (a run of Python DLIO, or one with \
             output.timeseries_interval 0): there is no time series to draw.",
        )),
    }
    section(&mut html, "Steps per rank", "Each column is a run of consecutive steps, epochs one after the other: the share of their time spent waiting for data (bottom), computing and waiting at the barrier and the rest (top). Hover a column for its milliseconds.");
    if timelines.is_empty() {
        html.push_str(&chart::left_out(
            "timeline",
            "No {rank}_output.json in the folder: there are no steps to draw.",
        ));
    }
    for (rank, steps) in timelines {
        html.push_str(&timeline(*rank, steps));
    }
    if ranks > TIMELINE_RANKS {
        let _ = writeln!(
            html,
            "<p class=\"note\">Ranks {TIMELINE_RANKS} to {} are left out.</p>",
            ranks - 1
        );
    }
    section(
        &mut html,
        "Read latency",
        "How long each sample's read took, all epochs, all ranks.",
    );
    match ours.and_then(|o| o["read_latency_histogram_us"].as_array()) {
        Some(buckets) => html.push_str(&latency(buckets)),
        None => html.push_str(NO_REPORT),
    }
    if let Some(list) = ours
        .and_then(|o| o["checkpoints"]["list"].as_array())
        .filter(|l| !l.is_empty())
    {
        section(
            &mut html,
            "Checkpoints",
            "Each save and load: the seconds each rank took.",
        );
        html.push_str(&checkpoints(list));
    }
    let _ = write!(
        html,
        "<p class=\"note\">Made by dlio-rs {} from the files in {}.</p>\n</body></html>\n",
        env!("CARGO_PKG_VERSION"),
        escape(&dir.display().to_string())
    );
    html
}

/// The verdict's banner: green only for PASS and VALID; red for FAIL; amber for a PASS that is
/// not a valid measurement, or whose validity is not known (a run of Python DLIO has no
/// report.json to say).
fn banner(
    html: &mut String,
    mean_au: Option<f64>,
    passed: bool,
    threshold: f64,
    ours: Option<&Value>,
) {
    let verdict = ours.map(|o| &o["verdict"]).filter(|v| v.is_object());
    let valid = verdict.and_then(|v| v["valid"].as_bool());
    let Some(mean) = mean_au else {
        let _ = writeln!(
            html,
            "<p class=\"verdict unknown\" data-verdict=\"none\">No training epoch completed.{}</p>",
            verdict
                .and_then(|v| v["line"].as_str())
                .map_or(String::new(), |line| format!(" {}", escape(line)))
        );
        return;
    };
    let class = match (passed, valid) {
        (false, _) => "fail",
        (true, Some(true)) => "pass",
        (true, _) => "unknown",
    };
    let validity = match valid {
        Some(true) => "VALID".to_string(),
        Some(false) => "NOT VALID (the reasons are below)".to_string(),
        None => "validity not known (no dlio-rs report.json)".to_string(),
    };
    let _ = writeln!(
        html,
        "<p class=\"verdict {class}\" data-verdict=\"{}\" data-valid=\"{}\">Training AU \
         {mean:.2} % {} the {threshold:.0} % threshold: <strong>{}</strong> · \
         <strong>{validity}</strong></p>",
        if passed { "pass" } else { "fail" },
        valid.map_or("unknown", |v| if v { "true" } else { "false" }),
        if passed { "meets" } else { "is below" },
        if passed { "PASS" } else { "FAIL" },
    );
    if let Some(line) = verdict.and_then(|v| v["line"].as_str()) {
        let _ = writeln!(html, "<p class=\"note\">{}</p>", escape(line));
    }
}

/// Every reason the run is not a valid measurement, with its fix.
fn reasons(html: &mut String, ours: Option<&Value>) {
    let reasons = ours
        .and_then(|o| o["verdict"]["reasons"].as_array())
        .cloned()
        .unwrap_or_default();
    if reasons.is_empty() {
        return;
    }
    html.push_str(
        "<div class=\"warn\"><p><strong>Not a valid measurement of the storage:</strong></p><ul>\n",
    );
    for reason in &reasons {
        let text = |key: &str| escape(reason[key].as_str().unwrap_or(""));
        let _ = writeln!(
            html,
            "<li data-code=\"{}\"><strong>{}</strong>: {}<br>Fix: {}</li>",
            text("code"),
            text("code"),
            text("message"),
            text("fix")
        );
    }
    html.push_str("</ul></div>\n");
}

const NO_REPORT: &str = "<p class=\"note\">Not recorded: this chart needs dlio-rs's report.json (a run of Python DLIO has none).</p>\n";

pub(crate) const STYLE: &str = "body{font-family:sans-serif;margin:2em auto;max-width:920px;color:#222}\
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:2em}.verdict{font-size:1.2em;padding:.5em;border-radius:4px}\
.pass{background:#dff0d8}.fail{background:#f2dede}.unknown{background:#fcf8e3}.warn{background:#fcf8e3;padding:.4em}\
.note{color:#666;font-size:.9em}table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:right;\
border-bottom:1px solid #ddd}svg{display:block;margin:.5em 0}svg text{fill:#333}\
@media print{h2{break-before:auto}svg{break-inside:avoid}}";

pub(crate) fn section(html: &mut String, title: &str, text: &str) {
    let _ = writeln!(
        html,
        "<h2>{}</h2><p class=\"note\">{}</p>",
        escape(title),
        escape(text)
    );
}

fn key_numbers(html: &mut String, metric: &Value, ours: Option<&Value>) {
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut number = |name: &str, value: Option<f64>, unit: &str| {
        if let Some(v) = value {
            rows.push((name.to_string(), format!("{v:.2}{unit}")));
        }
    };
    number("Mean AU", metric["train_au_mean_percentage"].as_f64(), " %");
    number(
        "Samples per second (mean)",
        metric["train_throughput_mean_samples_per_second"].as_f64(),
        "",
    );
    number(
        "Nominal MiB/s (DLIO's I/O throughput, mean)",
        metric["train_io_mean_MB_per_second"].as_f64(),
        "",
    );
    if let Some(o) = ours {
        let epochs = o["epochs"].as_array().cloned().unwrap_or_default();
        // Saturating: a forged file's counts must not wrap into a small, plausible number.
        let read = epochs
            .iter()
            .filter_map(|e| e["bytes_read"].as_u64())
            .fold(0u64, u64::saturating_add);
        let stored: Option<u64> = epochs
            .iter()
            .map(|e| e["bytes_from_storage"].as_u64())
            .try_fold(0u64, |sum, b| Some(sum.saturating_add(b?)));
        rows.push(("Bytes read".into(), read.to_string()));
        rows.push((
            "Bytes from storage".into(),
            stored.map_or("not known".into(), |b| b.to_string()),
        ));
        if let Some(method) = o["storage_accounting"]["method"].as_str() {
            rows.push(("Counted by".into(), method.to_string()));
        }
    }
    html.push_str("<table>");
    for (name, value) in rows {
        let _ = write!(
            html,
            "<tr><th>{}</th><td>{}</td></tr>",
            escape(&name),
            escape(&value)
        );
    }
    html.push_str("</table>\n");
}

pub(super) fn numbers(value: &Value) -> Vec<f64> {
    value
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default()
}

/// Per epoch a bar, coloured by `colour` (of its value), with the legend `keys` and an optional
/// dashed line (the threshold): `unit` follows the values in the bars' titles.
struct PerEpoch<'a> {
    name: &'a str,
    title: &'a str,
    y: Axis,
    unit: &'a str,
    keys: Vec<Key>,
    rule: Option<(f64, String)>,
}

impl PerEpoch<'_> {
    fn draw(self, values: &[f64], colour: impl Fn(f64) -> &'static str) -> String {
        let n = values.len();
        let top = values
            .iter()
            .copied()
            .chain(self.rule.as_ref().map(|(v, _)| *v))
            .fold(0.0_f64, f64::max);
        let mut keys = self.keys;
        keys.extend(self.rule.as_ref().map(|(_, text)| Key::rule(text.clone())));
        let mut canvas = Chart::new(self.name, self.title, Axis::slots("epoch", n), self.y)
            .legend(keys)
            .frame((0.5, n as f64 + 0.5), (0.0, top));
        for (i, &value) in values.iter().enumerate() {
            canvas.slot_bar(
                i + 1,
                value,
                &Mark {
                    class: "mark",
                    value,
                    colour: colour(value),
                    title: &format!("epoch {}: {value:.2}{}", i + 1, self.unit),
                    ..Mark::default()
                },
            );
        }
        if let Some((value, text)) = &self.rule {
            canvas.rule(*value, text);
        }
        canvas.finish()
    }
}

/// AU per epoch against the threshold: an epoch below it in the fail colour.
fn au_chart(au: &[f64], threshold: f64) -> String {
    if au.is_empty() {
        return chart::left_out("au", "No training epoch completed: there is no AU to draw.");
    }
    PerEpoch {
        name: "au",
        title: "AU per epoch",
        y: Axis::linear("AU (%)").up_to(100.0),
        unit: " %",
        keys: vec![
            Key::fill(
                format!("epoch at or above {threshold:.0} % (passes)"),
                PASS_COLOR,
            ),
            Key::fill(format!("epoch below {threshold:.0} % (fails)"), FAIL_COLOR),
        ],
        rule: Some((threshold, format!("threshold {threshold:.0} %"))),
    }
    .draw(au, |v| {
        if v >= threshold {
            PASS_COLOR
        } else {
            FAIL_COLOR
        }
    })
}

fn samples_chart(samples: &[f64]) -> String {
    if samples.is_empty() {
        return chart::left_out(
            "samples",
            "No training epoch completed: there is no throughput to draw.",
        );
    }
    PerEpoch {
        name: "samples",
        title: "Samples per second per epoch",
        y: Axis::linear("samples/s (all accelerators)"),
        unit: " samples/s",
        keys: Vec::new(),
        rule: None,
    }
    .draw(samples, |_| COMPUTE_COLOR)
}

/// The binary unit to draw `bytes` in, as the terminal says them: (bytes per unit, its name).
fn binary_unit(bytes: f64) -> (f64, &'static str) {
    [
        (1u64 << 40, "TiB"),
        (1 << 30, "GiB"),
        (1 << 20, "MiB"),
        (1 << 10, "KiB"),
    ]
    .into_iter()
    .map(|(size, name)| (size as f64, name))
    .find(|&(size, _)| bytes >= size)
    .unwrap_or((1.0, "B"))
}

/// Per epoch, the bytes read as two stacked bars: from storage and from cache (an outline
/// where the storage's share is not known).
fn storage_bars(epochs: &[Value]) -> String {
    if epochs.is_empty() {
        return chart::left_out(
            "storage",
            "No epoch completed: there are no bytes read to draw.",
        );
    }
    let read: Vec<u64> = epochs
        .iter()
        .map(|e| e["bytes_read"].as_u64().unwrap_or(0))
        .collect();
    let (size, unit) = binary_unit(read.iter().copied().max().unwrap_or(0) as f64);
    let known = epochs.iter().all(|e| e["bytes_from_storage"].is_u64());
    let mut keys = vec![
        Key::fill("from storage", STORAGE_COLOR),
        Key::fill("from cache", CACHE_COLOR),
    ];
    if !known {
        keys.push(Key::outline("read, from storage not known", "#999"));
    }
    let top = read.iter().copied().max().unwrap_or(0) as f64 / size;
    let mut canvas = Chart::new(
        "storage",
        "Bytes from storage and from cache per epoch",
        Axis::slots("epoch", epochs.len()),
        Axis::linear(format!("bytes read ({unit})")),
    )
    .legend(keys)
    .frame((0.5, epochs.len() as f64 + 0.5), (0.0, top));
    for (i, epoch) in epochs.iter().enumerate() {
        let total = read[i] as f64;
        let at = (i as f64 + 0.65, i as f64 + 1.35);
        match epoch["bytes_from_storage"].as_u64() {
            Some(stored) => {
                let stored = (stored as f64).min(total);
                let cached = total - stored;
                canvas.bar(
                    at,
                    (0.0, stored / size),
                    &Mark {
                        class: "mark",
                        value: stored,
                        colour: STORAGE_COLOR,
                        title: &format!("epoch {}: {stored} bytes from storage", i + 1),
                        ..Mark::default()
                    },
                );
                canvas.bar(
                    at,
                    (stored / size, total / size),
                    &Mark {
                        class: "cache",
                        value: cached,
                        colour: CACHE_COLOR,
                        title: &format!("epoch {}: {cached} bytes from cache", i + 1),
                        ..Mark::default()
                    },
                );
            }
            None => canvas.bar(
                at,
                (0.0, total / size),
                &Mark {
                    class: "mark",
                    value: total,
                    colour: "#999",
                    title: &format!(
                        "epoch {}: {total} bytes read, from storage not known",
                        i + 1
                    ),
                    hollow: true,
                    ..Mark::default()
                },
            ),
        }
    }
    canvas.finish()
}

/// A rank's steps in at most [`TIMELINE_COLUMNS`] columns, each the mean of its steps, stacked
/// as shares of their time.
fn timeline(rank: usize, steps: &Steps) -> String {
    if steps.is_empty() {
        return chart::left_out(
            "timeline",
            &format!("Rank {rank} recorded no step: there is no timeline to draw."),
        );
    }
    let columns = steps.len().clamp(1, TIMELINE_COLUMNS);
    let per_column = steps.len().div_ceil(columns).max(1);
    let means: Vec<(f64, f64, f64)> = steps
        .chunks(per_column)
        .map(|chunk| {
            let n = chunk.len() as f64;
            let sum = chunk
                .iter()
                .fold((0.0, 0.0, 0.0), |a, s| (a.0 + s.0, a.1 + s.1, a.2 + s.2));
            (sum.0 / n, sum.1 / n, sum.2 / n)
        })
        .collect();
    let n = steps.len() as f64;
    let mut canvas = Chart::new(
        "timeline",
        format!("Rank {rank}: {} steps, where their time went", steps.len()),
        Axis::linear("step (epochs one after another)")
            .span(0.5, n + 0.5)
            .whole(),
        Axis::linear("time (%)").up_to(100.0),
    )
    .legend(vec![
        Key::fill("waiting for data", LOAD_COLOR),
        Key::fill("computing", COMPUTE_COLOR),
        Key::fill("barrier and the rest", BARRIER_COLOR),
    ])
    .height(80.0)
    .frame((0.5, n + 0.5), (0.0, 100.0));
    canvas.group(
        &format!("data-rank=\"{rank}\" data-steps=\"{}\"", steps.len()),
        "",
    );
    for (i, &(load, compute, barrier)) in means.iter().enumerate() {
        let first = i * per_column + 1;
        let last = ((i + 1) * per_column).min(steps.len());
        canvas.group(
            "class=\"column\"",
            &format!(
                "steps {first}–{last}: load {:.1} ms, compute {:.1} ms, barrier {:.1} ms",
                load * 1e3,
                compute * 1e3,
                barrier * 1e3
            ),
        );
        // The share of the steps' time each part took: where the time went, whatever the step's
        // length (a long first step would flatten every other column).
        let whole = (load + compute + barrier).max(f64::MIN_POSITIVE);
        let mut below = 0.0;
        for (seconds, colour) in [
            (load, LOAD_COLOR),
            (compute, COMPUTE_COLOR),
            (barrier, BARRIER_COLOR),
        ] {
            let share = seconds / whole * 100.0;
            canvas.bar(
                (first as f64 - 0.5, last as f64 + 0.5),
                (below, below + share),
                &Mark {
                    class: "part",
                    value: seconds,
                    colour,
                    ..Mark::default()
                },
            );
            below += share;
        }
        canvas.end_group();
    }
    canvas.end_group();
    canvas.finish()
}

/// The read latencies in bins of a quarter power of two, as bars on a log axis: an empty bin
/// keeps its place.
fn latency(buckets: &[Value]) -> String {
    let mut bins: std::collections::BTreeMap<i64, u64> = std::collections::BTreeMap::new();
    for bucket in buckets {
        let (Some(us), Some(count)) = (bucket[0].as_f64(), bucket[1].as_u64()) else {
            continue;
        };
        let bin = (us.max(0.001).log2() * 4.0).floor() as i64;
        let sum = bins.entry(bin).or_insert(0);
        *sum = sum.saturating_add(count);
    }
    let bound = |bin: i64| 2f64.powf(bin as f64 / 4.0);
    let (Some(first), Some(last)) = (bins.keys().next(), bins.keys().next_back()) else {
        return chart::left_out("latency", "No read was timed: there is no latency to draw.");
    };
    let top = bins.values().copied().max().unwrap_or(0) as f64;
    let mut canvas = Chart::new(
        "latency",
        "Read latency: reads per quarter-octave bin",
        Axis::log10("read latency (log scale)").micros(),
        Axis::linear("reads"),
    )
    .frame((bound(*first), bound(last + 1)), (0.0, top));
    for (&bin, &count) in &bins {
        let (low, high) = (bound(bin), bound(bin + 1));
        // A hair narrower than the bin, so that neighbours read as bars.
        canvas.bar(
            (
                2f64.powf((bin as f64 + 0.05) / 4.0),
                2f64.powf((bin as f64 + 0.95) / 4.0),
            ),
            (0.0, count as f64),
            &Mark {
                class: "mark",
                value: count as f64,
                colour: LOAD_COLOR,
                title: &format!(
                    "{} to {}: {count} reads",
                    crate::console::duration(low),
                    crate::console::duration(high)
                ),
                ..Mark::default()
            },
        );
    }
    canvas.finish()
}

/// Each checkpoint operation's seconds per rank.
fn checkpoints(list: &[Value]) -> String {
    let mut names = Vec::new();
    let mut values = Vec::new();
    for c in list {
        let op = c["operation"].as_str().unwrap_or("?");
        let index = c["index"].as_u64().unwrap_or(0);
        for (rank, seconds) in numbers(&c["per_rank_seconds"]).into_iter().enumerate() {
            names.push(format!("{op} {index}, rank {rank}"));
            values.push(seconds);
        }
    }
    if values.is_empty() {
        return chart::left_out(
            "checkpoints",
            "No checkpoint recorded its ranks' seconds: there is nothing to draw.",
        );
    }
    let top = values.iter().copied().fold(0.0, f64::max);
    let mut canvas = Chart::new(
        "checkpoints",
        "Checkpoint seconds per operation and rank",
        Axis::named("operation and rank", names.clone()),
        Axis::linear("seconds"),
    )
    .frame((0.5, values.len() as f64 + 0.5), (0.0, top));
    for (i, (&value, name)) in values.iter().zip(&names).enumerate() {
        canvas.slot_bar(
            i + 1,
            value,
            &Mark {
                class: "mark",
                value,
                colour: BARRIER_COLOR,
                title: &format!("{name}: {value:.3} s"),
                ..Mark::default()
            },
        );
    }
    canvas.finish()
}

/// Text for HTML and SVG.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_follow_blocks_and_epochs_in_order() {
        let output = serde_json::json!({
            "hostname": "h",
            "2": {"load": {"block1": [0.5]}, "compute": {"block1": [1.0]}, "proc": {"block1": [2.0]}},
            "1": {
                "load": {"block10": [0.5], "block2": [0.25]},
                "compute": {"block10": [1.0], "block2": [1.0]},
                "proc": {"block10": [1.5], "block2": [1.5]},
            },
        });
        let steps = steps_of(Path::new("0_output.json"), &output).unwrap();
        assert_eq!(
            steps,
            vec![(0.25, 1.0, 0.25), (0.5, 1.0, 0.0), (0.5, 1.0, 0.5)]
        );
    }

    #[test]
    fn a_long_run_is_drawn_in_bounded_columns() {
        let steps: Steps = (0..10_000).map(|i| (i as f64 * 1e-6, 0.01, 0.0)).collect();
        let svg = timeline(0, &steps);
        assert_eq!(svg.matches("class=\"column\"").count(), TIMELINE_COLUMNS);
        assert!(svg.len() < 200_000, "{}", svg.len());
        assert!(svg.contains("data-steps=\"10000\""));
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }
}
