//! A sweep for people: each trial's figures and warnings as it ends, the table of trials with
//! the answer and its margin on standard output, and the sweep's page (`report.html`: AU or
//! checkpoint throughput against the count on a numeric axis, passing and failing trials told
//! apart, the answer ringed), drawn by [`crate::report::chart`].

use std::fmt::Write as _;

use super::record::{Answer, Mode, Sweep, Trial};
use super::search::unit;
use crate::report::chart::{
    self, Axis, Chart, Key, Mark, Series, COMPUTE_COLOR, FAIL_COLOR, PASS_COLOR,
};
use crate::report::html::{escape, section, STYLE};

/// A trial's figures and warnings, on the terminal.
pub(super) fn tell_figures(trial: &Trial, state: &Sweep) {
    let n = trial.accelerators;
    let figures = match state.mode {
        Mode::Training => format!(
            "AU {:.2} % ({} {:.0} %), {:.1} samples/s, {:.1} MiB/s",
            trial.au_percent,
            if trial.passed { "meets" } else { "below" },
            state.au_threshold_percent,
            trial.samples_per_second,
            trial.mib_per_second
        ),
        Mode::Checkpointing => format!(
            "saves {:.3} GiB/s, {:.3} GiB/s per rank ({})",
            trial.checkpoint_gib_per_second.unwrap_or(0.0),
            trial.per_rank_gib_per_second.unwrap_or(0.0),
            if trial.passed {
                "holds"
            } else {
                "falls below the hold"
            }
        ),
    };
    crate::console::tell(format_args!(
        "trial {}: {n} accelerator(s): {figures}{}",
        state.trials.len() + 1,
        if trial.valid() {
            ""
        } else {
            " — NOT VALID, not judged:"
        }
    ));
    for reason in &trial.reasons {
        crate::console::tell(format_args!("  - {reason}"));
    }
}

impl Trial {
    /// The codes of its reasons (`code: message` each).
    fn reason_codes(&self) -> Vec<&str> {
        self.reasons
            .iter()
            .map(|r| r.split(':').next().unwrap_or(r))
            .collect()
    }
}

impl Sweep {
    /// The trials that were not valid measurements, each with its reasons' codes.
    fn invalid_trials(&self) -> String {
        let mut trials: Vec<&Trial> = self.trials.iter().filter(|t| !t.valid()).collect();
        trials.sort_by_key(|t| t.accelerators);
        let said: Vec<String> = trials
            .iter()
            .map(|t| format!("{}: {}", t.accelerators, t.reason_codes().join(", ")))
            .collect();
        format!(
            "not valid — {}; see each trial's reasons above or in sweep.json",
            said.join("; ")
        )
    }

    /// Why the counts between a passing and a failing trial `gap` apart were not tried.
    fn why_untried(&self, gap: u64) -> String {
        match unit(&self.request, self.processes) {
            unit if gap == unit => format!(" (the sweep tries multiples of {unit} only)"),
            _ => String::new(),
        }
    }

    /// The table of trials, in accelerator order, and the answer with its margin.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut trials: Vec<&Trial> = self.trials.iter().collect();
        trials.sort_by_key(|t| t.accelerators);
        let flag = |t: &Trial| {
            if t.valid() {
                String::new()
            } else {
                format!("  (NOT VALID: {})", t.reason_codes().join(", "))
            }
        };
        match self.mode {
            Mode::Training => {
                let _ = writeln!(
                    out,
                    "\n{:>12} {:>8} {:>6} {:>11} {:>9} {:>16} {:>8}",
                    "accelerators", "AU %", "pass", "samples/s", "MiB/s", "from storage", "cache %"
                );
                for t in &trials {
                    let _ = writeln!(
                        out,
                        "{:>12} {:>8.2} {:>6} {:>11.1} {:>9.1} {:>16} {:>8}{}",
                        t.accelerators,
                        t.au_percent,
                        if t.passed { "yes" } else { "no" },
                        t.samples_per_second,
                        t.mib_per_second,
                        t.bytes_from_storage
                            .map_or("unknown".to_string(), |b| b.to_string()),
                        t.cache_share
                            .map_or("-".to_string(), |c| format!("{:.1}", c * 100.0)),
                        flag(t)
                    );
                }
            }
            Mode::Checkpointing => {
                let _ = writeln!(
                    out,
                    "\n{:>12} {:>12} {:>16} {:>6}",
                    "ranks", "save GiB/s", "GiB/s per rank", "pass"
                );
                for t in &trials {
                    let _ = writeln!(
                        out,
                        "{:>12} {:>12.3} {:>16.3} {:>6}{}",
                        t.accelerators,
                        t.checkpoint_gib_per_second.unwrap_or(0.0),
                        t.per_rank_gib_per_second.unwrap_or(0.0),
                        if t.passed { "yes" } else { "no" },
                        flag(t)
                    );
                }
            }
        }
        let _ = writeln!(out, "\n{}", self.answer_text());
        out
    }

    /// The answer with its margin, in a sentence (the table's last line).
    pub fn answer_text(&self) -> String {
        let mut trials: Vec<&Trial> = self.trials.iter().collect();
        trials.sort_by_key(|t| t.accelerators);
        let request = &self.request;
        let criterion = match self.mode {
            Mode::Training => format!("above {:.0} % AU", self.au_threshold_percent),
            Mode::Checkpointing => format!(
                "at {:.0} % or more of the save throughput per rank of {} rank(s)",
                request.hold * 100.0,
                self.min()
            ),
        };
        match self.answer {
            Some(Answer {
                most_passing: None, ..
            }) if trials
                .iter()
                .any(|t| t.accelerators == self.min() && !t.valid()) =>
            {
                format!(
                    "No valid answer: no trial was both a valid measurement and {criterion} \
                     ({})",
                    self.invalid_trials()
                )
            }
            Some(Answer {
                most_passing: None, ..
            }) => format!(
                "Even {} accelerator(s) are not {criterion}: this storage keeps fewer busy than \
                 the sweep's lower bound",
                self.min()
            ),
            Some(Answer {
                most_passing: Some(p),
                fewest_failing: None,
            }) => format!(
                "This storage keeps at least {p} accelerator(s) {criterion}: the sweep's upper \
                 bound passed; raise --max-accelerators to find the limit"
            ),
            Some(Answer {
                most_passing: Some(p),
                fewest_failing: Some(f),
            }) => format!(
                "This storage keeps {p} accelerator(s) {criterion} ({f} {}{}): answer {p}, \
                 margin {}",
                match trials.iter().find(|t| t.accelerators == f) {
                    Some(t) if !t.valid() =>
                        format!("were not measured validly: {}", t.reason_codes().join(", ")),
                    _ => "are not".to_string(),
                },
                match f - p {
                    1 => String::new(),
                    2 => format!("; {} was not tried{}", p + 1, self.why_untried(f - p)),
                    _ => format!(
                        "; counts from {} to {} were not tried{}",
                        p + 1,
                        f - 1,
                        self.why_untried(f - p)
                    ),
                },
                f - p - 1
            ),
            None => "The sweep stopped before its answer; run it again to continue".to_string(),
        }
    }

    /// The trials as `sweep --output-format csv` shows them: a row per trial in accelerator
    /// order, with its figures as sweep.json keeps them (`passes`: valid and above the
    /// criterion; `reasons`: the verdict's reasons, `; ` between them).
    pub fn to_csv(&self) -> String {
        let mut trials: Vec<&Trial> = self.trials.iter().collect();
        trials.sort_by_key(|t| t.accelerators);
        let mut csv = crate::machine::Csv::new(&[
            "accelerators",
            "passes",
            "passed",
            "valid",
            "au_percent",
            "samples_per_second",
            "mib_per_second",
            "bytes_read",
            "bytes_from_storage",
            "cache_share",
            "checkpoint_gib_per_second",
            "per_rank_gib_per_second",
            "reasons",
            "output",
        ]);
        let optional = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
        for t in trials {
            csv.row([
                t.accelerators.to_string(),
                t.passes().to_string(),
                t.passed.to_string(),
                t.valid().to_string(),
                t.au_percent.to_string(),
                t.samples_per_second.to_string(),
                t.mib_per_second.to_string(),
                t.bytes_read.to_string(),
                t.bytes_from_storage
                    .map_or(String::new(), |b| b.to_string()),
                optional(t.cache_share),
                optional(t.checkpoint_gib_per_second),
                optional(t.per_rank_gib_per_second),
                t.reasons.join("; "),
                t.output.display().to_string(),
            ]);
        }
        csv.finish()
    }
}

/// The sweep's page: AU (or save throughput per rank) and samples/s against the count, the
/// threshold (or hold), the answer marked.
pub fn page(sweep: &Sweep) -> String {
    let mut trials: Vec<&Trial> = sweep.trials.iter().collect();
    trials.sort_by_key(|t| t.accelerators);
    let answer = sweep.render();
    let answer = answer.lines().last().unwrap_or("");
    let most = sweep.answer.and_then(|a| a.most_passing);
    let mut html = String::new();
    let workload = sweep
        .request
        .words
        .iter()
        .find_map(|w| w.strip_prefix("workload="))
        .unwrap_or("workload");
    let title = format!("Sweep of {workload} · dlio-rs");
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>{STYLE}</style></head><body>\n<h1>{}</h1>\n<p class=\"note\">{}</p>\n\
         <p class=\"verdict\" data-answer=\"{}\">{}</p>\n",
        escape(&title),
        escape(&title),
        escape(&match sweep.processes {
            1 => sweep.request.words.join(" "),
            p => format!(
                "{} · each trial's ranks spread evenly over {p} MPI processes",
                sweep.request.words.join(" ")
            ),
        }),
        most.map_or("none".to_string(), |m| m.to_string()),
        escape(answer)
    );
    match sweep.mode {
        Mode::Training => {
            section(&mut html, "AU against accelerators", "Each trial's mean training AU; the answer is the most accelerators at or above the threshold (ringed).");
            let threshold = sweep.au_threshold_percent;
            let au: Vec<f64> = trials.iter().map(|t| t.au_percent).collect();
            html.push_str(&against_count(
                &trials,
                &au,
                most,
                Chart::new(
                    "sweep-au",
                    "AU against accelerators",
                    count_axis(&trials, "accelerators"),
                    Axis::linear("AU (%)").up_to(100.0),
                ),
                (threshold, format!("threshold {threshold:.0} %")),
                ("accelerators", " %"),
            ));
        }
        Mode::Checkpointing => {
            section(&mut html, "Save throughput per rank against ranks", "Each trial's checkpoint save GiB/s per rank; the answer is the most ranks at or above the hold (ringed).");
            let per_rank: Vec<f64> = trials
                .iter()
                .map(|t| t.per_rank_gib_per_second.unwrap_or(0.0))
                .collect();
            let hold = sweep.request.hold * per_rank.first().copied().unwrap_or(0.0);
            html.push_str(&against_count(
                &trials,
                &per_rank,
                most,
                Chart::new(
                    "sweep-au",
                    "Checkpoint save throughput per rank against ranks",
                    count_axis(&trials, "ranks"),
                    Axis::linear("save GiB/s per rank"),
                ),
                (hold, format!("hold {:.0} %", sweep.request.hold * 100.0)),
                ("ranks", " GiB/s"),
            ));
        }
    }
    section(
        &mut html,
        "Throughput against accelerators",
        "Samples per second, all accelerators of the trial.",
    );
    let samples = Series {
        name: "samples/s".into(),
        colour: COMPUTE_COLOR,
        points: trials
            .iter()
            .map(|t| (t.accelerators as f64, t.samples_per_second))
            .collect(),
    };
    let chart = Chart::new(
        "sweep-samples",
        "Samples per second against accelerators",
        count_axis(&trials, "accelerators"),
        Axis::linear("samples/s (all accelerators)"),
    );
    html.push_str(&chart.lines(&[samples]).unwrap_or_else(|| {
        chart::left_out(
            "sweep-samples",
            "No trial has ended: there is nothing to draw.",
        )
    }));
    html.push_str("<table><tr><th>accelerators</th><th>AU %</th><th>samples/s</th><th>MiB/s</th><th>valid</th><th>run</th></tr>");
    for t in &trials {
        let _ = write!(
            html,
            "<tr><td>{}</td><td>{:.2}</td><td>{:.1}</td><td>{:.1}</td><td>{}</td><td>{}</td></tr>",
            t.accelerators,
            t.au_percent,
            t.samples_per_second,
            t.mib_per_second,
            if t.valid() { "yes" } else { "no" },
            escape(&t.output.display().to_string())
        );
    }
    html.push_str("</table>\n</body></html>\n");
    html
}

/// The x axis of trials' counts: log2 where they span a factor of 8 or more (a bisection's 1, 2,
/// 4, 8, 16 equally apart), else linear; either way each count at its value, never evenly
/// spaced by rank.
fn count_axis(trials: &[&Trial], title: &str) -> Axis {
    let counts = chart::extent(trials.iter().map(|t| t.accelerators as f64));
    match counts {
        Some((least, most)) if least >= 1.0 && most / least >= 8.0 => Axis::log2(title),
        _ => Axis::linear(title).whole(),
    }
}

/// Each trial's `values` against its count, joined by a line: passing trials in the pass
/// colour, failing ones in the fail colour, those not judged (not valid) as outlines, the
/// answer ringed; the threshold (or hold) `rule` dashed. `noun` names the count in the marks'
/// titles, `unit` follows their values.
fn against_count(
    trials: &[&Trial],
    values: &[f64],
    answer: Option<u64>,
    chart: Chart,
    rule: (f64, String),
    (noun, unit): (&str, &str),
) -> String {
    let points: Vec<(f64, f64)> = trials
        .iter()
        .zip(values)
        .map(|(t, &v)| (t.accelerators as f64, v))
        .collect();
    let (Some(x), Some(y)) = (
        chart::extent(points.iter().map(|p| p.0)),
        chart::extent(points.iter().map(|p| p.1).chain([rule.0])),
    ) else {
        return chart::left_out("sweep-au", "No trial has ended: there is nothing to draw.");
    };
    let mut keys = vec![
        Key::fill("passes", PASS_COLOR),
        Key::fill("fails", FAIL_COLOR),
    ];
    keys.push(Key::rule(rule.1.clone()));
    if trials.iter().any(|t| !t.valid()) {
        keys.push(Key::outline("not valid, not judged", "#777"));
    }
    if let Some(answer) = answer {
        keys.push(Key::outline(format!("answer: {answer}"), "#222"));
    }
    let mut canvas = chart.legend(keys).frame(x, (y.0.min(0.0), y.1));
    canvas.line("trials", &points, "#bbb");
    canvas.rule(rule.0, &rule.1);
    for (t, &(x, y)) in trials.iter().zip(&points) {
        let verdict = match (t.valid(), t.passed) {
            (false, _) => "not valid, not judged",
            (true, true) => "passes",
            (true, false) => "fails",
        };
        canvas.point(
            x,
            y,
            &Mark {
                class: "mark",
                value: y,
                colour: match (t.valid(), t.passed) {
                    (false, _) => "#777",
                    (true, true) => PASS_COLOR,
                    (true, false) => FAIL_COLOR,
                },
                title: &format!("{} {noun}: {y:.2}{unit}, {verdict}", t.accelerators),
                hollow: !t.valid(),
                attributes: &format!("data-x=\"{}\"", t.accelerators),
            },
            answer == Some(t.accelerators),
        );
    }
    canvas.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::record::request;

    #[test]
    fn the_answer_says_why_counts_between_were_not_tried() {
        let answer = |unit: u64, passing: u64, failing: u64| {
            let sweep = Sweep {
                request: request(1),
                processes: unit,
                mode: Mode::Training,
                au_threshold_percent: 90.0,
                generated: false,
                trials: Vec::new(),
                answer: Some(Answer {
                    most_passing: Some(passing),
                    fewest_failing: Some(failing),
                }),
            };
            sweep.render().lines().last().unwrap().to_string()
        };
        assert_eq!(
            answer(1, 5, 6),
            "This storage keeps 5 accelerator(s) above 90 % AU (6 are not): answer 5, margin 0"
        );
        assert_eq!(
            answer(2, 10, 12),
            "This storage keeps 10 accelerator(s) above 90 % AU (12 are not; 11 was not tried \
             (the sweep tries multiples of 2 only)): answer 10, margin 1"
        );
        assert_eq!(
            answer(1, 4, 8),
            "This storage keeps 4 accelerator(s) above 90 % AU (8 are not; counts from 5 to 7 \
             were not tried): answer 4, margin 3"
        );
    }

    fn trial(accelerators: u64, passed: bool, reasons: &[&str]) -> Trial {
        Trial {
            accelerators,
            au_percent: if passed { 99.0 } else { 50.0 },
            passed,
            samples_per_second: 1.0,
            mib_per_second: 1.0,
            bytes_read: 1,
            bytes_from_storage: Some(0),
            cache_share: Some(1.0),
            checkpoint_gib_per_second: None,
            per_rank_gib_per_second: None,
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
            output: format!("trial-{accelerators}").into(),
        }
    }

    fn swept(trials: Vec<Trial>, most_passing: Option<u64>, fewest_failing: Option<u64>) -> Sweep {
        Sweep {
            request: request(1),
            processes: 1,
            mode: Mode::Training,
            au_threshold_percent: 90.0,
            generated: false,
            trials,
            answer: Some(Answer {
                most_passing,
                fewest_failing,
            }),
        }
    }

    #[test]
    fn only_valid_trials_pass_and_a_sweep_of_none_has_no_answer() {
        let cached = "page_cache: more than 10% of the bytes came from the page cache";
        // Every trial passed on AU, and none was valid: no answer, and why.
        let sweep = swept(
            vec![
                trial(1, true, &[cached]),
                trial(16, true, &[cached, "metric_window: m"]),
            ],
            None,
            Some(1),
        );
        assert!(!sweep.trials[0].passes() && !sweep.trials[1].passes());
        let text = sweep.render();
        assert_eq!(
            text.lines().last().unwrap(),
            "No valid answer: no trial was both a valid measurement and above 90 % AU (not \
             valid — 1: page_cache; 16: page_cache, metric_window; see each trial's reasons \
             above or in sweep.json)"
        );
        assert!(
            text.contains("(NOT VALID: page_cache, metric_window)"),
            "{text}"
        );
        // A valid lower bound that fails is an answer: the storage keeps fewer.
        let sweep = swept(vec![trial(1, false, &[])], None, Some(1));
        assert!(sweep
            .render()
            .contains("Even 1 accelerator(s) are not above 90 % AU"));
        // An invalid trial above a valid pass bounds the answer, and says why.
        let sweep = swept(
            vec![trial(1, true, &[]), trial(2, true, &[cached])],
            Some(1),
            Some(2),
        );
        assert_eq!(
            sweep.render().lines().last().unwrap(),
            "This storage keeps 1 accelerator(s) above 90 % AU (2 were not measured validly: \
             page_cache): answer 1, margin 0"
        );
    }
}
