//! `dlio-rs compare A B`: two runs side by side, from their output files (dlio-rs's or Python
//! DLIO's): a table of their per-epoch metrics, each difference flagged when it is larger than
//! the runs' own epoch-to-epoch noise, and a page with the same charts overlaid.
//!
//! Noise: a metric's difference of means is flagged when it exceeds twice its standard error,
//! √(s²_A/n_A + s²_B/n_B) from each run's epochs (about a 95 % test); with fewer than two epochs
//! in a run its noise is unknown and nothing is flagged, which the table says.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::html;
use crate::error::{Error, Result};

/// One run, as its files describe it.
pub struct RunFiles {
    pub name: String,
    summary: Value,
    ours: Option<Value>,
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
        Ok(RunFiles {
            name: dir.display().to_string(),
            summary,
            ours,
        })
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
    unit: &'static str,
    source: Source,
}

const METRICS: [Metric; 6] = [
    Metric {
        name: "AU",
        unit: "%",
        source: Source::Summary("train_au_percentage"),
    },
    Metric {
        name: "samples/s",
        unit: "",
        source: Source::Summary("train_throughput_samples_per_second"),
    },
    Metric {
        name: "MiB/s read",
        unit: "",
        source: Source::Epochs("measured_mib_per_second"),
    },
    Metric {
        name: "read p50 µs",
        unit: "",
        source: Source::Epochs("p50_us"),
    },
    Metric {
        name: "read p99 µs",
        unit: "",
        source: Source::Epochs("p99_us"),
    },
    Metric {
        name: "cache share",
        unit: "",
        source: Source::Epochs("cache_served_fraction"),
    },
];

/// A metric of both runs.
pub struct Row {
    pub metric: &'static str,
    pub a: Vec<f64>,
    pub b: Vec<f64>,
    /// `None`: a run has fewer than two epochs, so its noise is unknown.
    pub noise: Option<f64>,
}

impl Row {
    pub fn mean_a(&self) -> f64 {
        crate::stats::mean_stdev(&self.a).0
    }

    pub fn mean_b(&self) -> f64 {
        crate::stats::mean_stdev(&self.b).0
    }

    /// The difference of means is larger than twice its standard error.
    pub fn differs(&self) -> bool {
        self.noise
            .is_some_and(|noise| (self.mean_b() - self.mean_a()).abs() > noise)
    }
}

/// The metrics both runs recorded.
pub fn rows(a: &RunFiles, b: &RunFiles) -> Vec<Row> {
    METRICS
        .iter()
        .filter_map(|m| {
            let (values_a, values_b) = (a.metric(m)?, b.metric(m)?);
            let noise = (values_a.len() >= 2 && values_b.len() >= 2).then(|| {
                let se = |v: &[f64]| {
                    // The sample variance of the epochs, over their count.
                    let (mean, _) = crate::stats::mean_stdev(v);
                    let n = v.len() as f64;
                    v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) / n
                };
                2.0 * (se(&values_a) + se(&values_b)).sqrt()
            });
            Some(Row {
                metric: m.name,
                a: values_a,
                b: values_b,
                noise,
            })
        })
        .collect()
}

/// The table, for the terminal.
pub fn render(a: &RunFiles, b: &RunFiles, rows: &[Row]) -> String {
    let mut out = String::new();
    for (label, run) in [("A", a), ("B", b)] {
        let _ = writeln!(out, "{label}: {}", run.name);
        for note in run.notes() {
            let _ = writeln!(out, "   {note}");
        }
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "{:<14} {:>14} {:>14} {:>9} {:>12}  verdict",
        "metric", "A (mean)", "B (mean)", "B − A", "noise (2σ)"
    );
    for row in rows {
        let (ma, mb) = (row.mean_a(), row.mean_b());
        let change = if ma != 0.0 {
            format!("{:+.1} %", (mb - ma) / ma.abs() * 100.0)
        } else {
            "-".to_string()
        };
        let verdict = match (row.noise, row.differs()) {
            (None, _) => "noise unknown (a run has < 2 epochs)",
            (Some(_), true) => "DIFFERS",
            (Some(_), false) => "within noise",
        };
        let _ = writeln!(
            out,
            "{:<14} {:>14.2} {:>14.2} {:>9} {:>12}  {verdict}",
            row.metric,
            ma,
            mb,
            change,
            row.noise.map_or("-".to_string(), |n| format!("{n:.2}"))
        );
    }
    out
}

/// The page: the same table, and each metric's epochs of both runs side by side.
pub fn page(a: &RunFiles, b: &RunFiles, rows: &[Row]) -> String {
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
    for (label, run) in [("A", a), ("B", b)] {
        for note in run.notes() {
            let _ = writeln!(
                out,
                "<p class=\"warn\">{label}: {}</p>",
                html::escape(&note)
            );
        }
    }
    out.push_str("<table><tr><th>metric</th><th>A</th><th>B</th><th>noise (2σ)</th><th></th></tr>");
    for row in rows {
        let _ =
            write!(
            out,
            "<tr data-metric=\"{}\" data-differs=\"{}\"><td>{}</td><td>{:.2}</td><td>{:.2}</td>\
             <td>{}</td><td>{}</td></tr>",
            html::escape(row.metric),
            row.differs(),
            html::escape(row.metric),
            row.mean_a(),
            row.mean_b(),
            row.noise.map_or("-".to_string(), |n| format!("{n:.2}")),
            if row.differs() { "<strong>differs</strong>" } else { "" }
        );
    }
    out.push_str("</table>\n");
    for row in rows {
        let _ = writeln!(
            out,
            "<h2>{} per epoch</h2>{}",
            html::escape(row.metric),
            html::paired_bars(row.metric, &row.a, &row.b, unit_of(row.metric))
        );
    }
    out.push_str("<p class=\"note\">A: blue, B: amber.</p></body></html>\n");
    out
}

fn unit_of(name: &str) -> &'static str {
    METRICS
        .iter()
        .find(|m| m.name == name)
        .map_or("", |m| m.unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_is_flagged_beyond_twice_its_standard_error() {
        let row = |a: Vec<f64>, b: Vec<f64>| {
            let a = RunFiles {
                name: "a".into(),
                summary: serde_json::json!({"metric": {"train_au_percentage": a}}),
                ours: None,
            };
            let b = RunFiles {
                name: "b".into(),
                summary: serde_json::json!({"metric": {"train_au_percentage": b}}),
                ours: None,
            };
            rows(&a, &b).remove(0)
        };
        // Sample variance 2 in each run of 2 epochs: standard error √(2/2 + 2/2) = √2, noise
        // 2√2 ≈ 2.83; means 91 and 92.5 differ by 1.5, within it.
        let close = row(vec![90.0, 92.0], vec![91.5, 93.5]);
        assert!((close.noise.unwrap() - 2.0 * 2f64.sqrt()).abs() < 1e-12);
        assert!(!close.differs());
        let far = row(vec![90.0, 92.0], vec![95.0, 97.0]);
        assert!(far.differs());
        let single = row(vec![90.0], vec![50.0]);
        assert_eq!(single.noise, None);
        assert!(!single.differs());
    }

    #[test]
    fn an_interrupted_run_and_each_verdict_are_said_beside_the_figures() {
        let a = RunFiles {
            name: "a".into(),
            summary: serde_json::json!({
                "metric": {"train_au_percentage": [99.0]},
                "interrupted": {"message": "interrupted by SIGINT after 1 of 3 epoch(s)"},
            }),
            ours: Some(
                serde_json::json!({"verdict": {"line": "Verdict: PASS · NOT VALID \
                (interrupted) · no MLPerf category"}}),
            ),
        };
        let b = RunFiles {
            name: "b".into(),
            summary: serde_json::json!({"metric": {"train_au_percentage": [98.0]}}),
            ours: None,
        };
        let text = render(&a, &b, &rows(&a, &b));
        assert!(text.starts_with(
            "A: a\n   interrupted by SIGINT after 1 of 3 epoch(s)\n   Verdict: PASS · NOT VALID \
             (interrupted) · no MLPerf category\nB: b\n\n"
        ), "{text}");
        let page = page(&a, &b, &rows(&a, &b));
        assert!(
            page.contains("<p class=\"warn\">A: interrupted by SIGINT after 1 of 3 epoch(s)</p>")
        );
        assert!(b.notes().is_empty());
    }
}
