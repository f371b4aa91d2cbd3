//! Audits of traces generated from the plan itself (what a correct engine writes), and of the same
//! traces with one thing broken.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::*;

/// A fresh folder, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "dlio-rs-audit-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(path.join("trace")).unwrap();
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

struct Run {
    config: Config,
    world: u64,
    run_entropy: u64,
}

impl Run {
    fn new(yaml: &str, world: u64) -> Run {
        Run {
            config: Config::from_tree("audit_test", Value::from_yaml(yaml).unwrap()).unwrap(),
            world,
            run_entropy: 0x5EED_2025,
        }
    }

    fn plan(&self, epoch: u64, phase: Phase) -> EpochPlan {
        EpochPlan::new(
            PlanSpec::for_phase(&self.config, phase, self.world, self.run_entropy),
            epoch,
        )
    }

    /// Per rank, the trace lines (no header) a correct engine writes: each reader thread's rows
    /// in plan order, the threads' rows interleaved in chunks of three.
    fn traces(&self) -> Vec<Vec<String>> {
        let dataset = Dataset::from_config(&self.config);
        let threads = self.config.reader.read_threads.max(1);
        let mut traces = vec![Vec::new(); self.world as usize];
        for epoch in 1..=self.config.train.epochs {
            for phase in [Phase::Train, Phase::Eval] {
                if !segment_exists(&self.config, epoch, phase) {
                    continue;
                }
                let plan = self.plan(epoch, phase);
                let split = dataset.split(phase);
                for (rank, trace) in traces.iter_mut().enumerate() {
                    let per_thread: Vec<Vec<String>> = (0..threads)
                        .map(|thread| {
                            (thread..plan.steps())
                                .step_by(threads as usize)
                                .flat_map(|step| {
                                    plan.batch(rank as u64, step)
                                        .map(|s| {
                                            row(
                                                epoch,
                                                phase,
                                                step + 1,
                                                rank as u64,
                                                thread,
                                                &dataset.file_key(split, s.file),
                                                s.sample,
                                            )
                                        })
                                        .collect::<Vec<_>>()
                                })
                                .collect()
                        })
                        .collect();
                    let mut chunks: Vec<_> = per_thread.iter().map(|rows| rows.chunks(3)).collect();
                    loop {
                        let before = trace.len();
                        for chunk in chunks.iter_mut().filter_map(Iterator::next) {
                            trace.extend_from_slice(chunk);
                        }
                        if trace.len() == before {
                            break;
                        }
                    }
                }
            }
        }
        traces
    }

    fn write(&self, dir: &Path, traces: &[Vec<String>]) {
        let report = serde_json::json!({
            "tool": "dlio-rs",
            "workload": self.config.workload_name,
            "num_accelerators": self.world,
            "run_entropy": self.run_entropy,
            "configuration": self.config.tree.to_json(),
        });
        std::fs::write(dir.join("report.json"), report.to_string()).unwrap();
        for (rank, lines) in traces.iter().enumerate() {
            let mut text = format!("{TRACE_HEADER}\n");
            for line in lines {
                text.push_str(line);
                text.push('\n');
            }
            std::fs::write(dir.join(format!("trace/{rank}.csv")), text).unwrap();
        }
    }

    fn audit(&self, traces: &[Vec<String>]) -> Result<AuditReport> {
        let scratch = Scratch::new();
        self.write(&scratch.0, traces);
        audit(&scratch.0)
    }
}

fn row(
    epoch: u64,
    phase: Phase,
    step: u64,
    rank: u64,
    thread: u64,
    file: &str,
    sample: u64,
) -> String {
    format!(
        "{epoch},{},{step},{rank},{thread},{file},{sample},{},4096,{},{}",
        phase.as_str(),
        sample * 4096,
        1000 + step,
        17
    )
}

/// Column indices of a trace line.
const EPOCH: usize = 0;
const PHASE: usize = 1;
const STEP: usize = 2;
const RANK: usize = 3;
const THREAD: usize = 4;
const FILE: usize = 5;
const SAMPLE: usize = 6;

fn field(line: &str, column: usize) -> String {
    line.split(',').nth(column).unwrap().to_string()
}

fn with_field(line: &str, column: usize, value: &str) -> String {
    let mut fields: Vec<&str> = line.split(',').collect();
    fields[column] = value;
    fields.join(",")
}

/// Index of the first line of a rank's trace in (epoch, phase).
fn first_of(lines: &[String], epoch: u64, phase: Phase) -> usize {
    lines
        .iter()
        .position(|l| field(l, EPOCH) == epoch.to_string() && field(l, PHASE) == phase.as_str())
        .unwrap()
}

fn assert_passes(run: &Run) -> AuditReport {
    let report = run.audit(&run.traces()).unwrap();
    assert!(report.passed, "{}", report.to_text());
    assert_eq!(report.violations, 0);
    assert!(report.to_text().ends_with("audit passed\n"));
    for phase in &report.phases {
        assert_eq!(phase.samples_read, phase.samples_planned);
        assert_eq!((phase.repeated, phase.unplanned, phase.missing), (0, 0, 0));
    }
    report
}

fn assert_fails_with(report: &AuditReport, needles: &[&str]) {
    assert!(!report.passed, "{}", report.to_text());
    assert!(report.violations > 0);
    let text = report.to_text();
    assert!(text.contains(&format!("audit FAILED: {} violations", report.violations)));
    for needle in needles {
        assert!(
            report.first_violations.iter().any(|v| v.contains(needle)),
            "no violation says '{needle}':\n{text}"
        );
    }
}

/// Uneven everything, three reader threads, seeded shuffles of files and samples, evaluation.
const SHUFFLED: &str = "
dataset:
  format: npz
  num_files_train: 16
  num_files_eval: 5
  num_samples_per_file: 5
  num_subfolders_train: 3
reader:
  batch_size: 3
  batch_size_eval: 2
  read_threads: 3
  file_shuffle: seed
  sample_shuffle: seed
train:
  epochs: 3
workflow:
  evaluation: True
evaluation:
  eval_after_epoch: 2
";

fn shuffled() -> Run {
    Run::new(SHUFFLED, 2)
}

#[test]
fn correct_traces_pass_in_many_shapes() {
    let report = assert_passes(&shuffled());
    let shape: Vec<(u64, &str, u64, u64, u64)> = report
        .phases
        .iter()
        .map(|p| {
            (
                p.epoch,
                p.phase,
                p.steps,
                p.samples_planned,
                p.samples_not_read,
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            (1, "train", 13, 78, 2),
            (2, "train", 13, 78, 2),
            (2, "eval", 6, 24, 1),
            (3, "train", 13, 78, 2),
            (3, "eval", 6, 24, 1),
        ]
    );
    let text = report.to_text();
    assert!(
        text.contains("epoch 2 eval: 24 samples read once each by 2 ranks × 6 steps; 0 unplanned, 0 repeated, 0 missing; 1 not read (remainder, as planned)"),
        "{text}"
    );

    for (yaml, world) in [
        // Reading inline, no shuffle, a large remainder.
        (
            "dataset:\n  format: npy\n  num_files_train: 7\n  num_samples_per_file: 3\nreader:\n  batch_size: 4\n  read_threads: 0\ntrain:\n  epochs: 2\n",
            1,
        ),
        // One thread, random sample order, evaluation after every epoch into subfolders.
        (
            "dataset:\n  format: npz\n  num_files_train: 10\n  num_files_eval: 5\n  num_samples_per_file: 2\n  num_subfolders_eval: 2\nreader:\n  batch_size: 2\n  batch_size_eval: 3\n  read_threads: 1\n  sample_shuffle: random\ntrain:\n  epochs: 3\nworkflow:\n  evaluation: True\n",
            1,
        ),
        // Files shuffled only, four ranks, a step cap, commas in the file names.
        (
            "dataset:\n  format: npz\n  num_files_train: 40\n  num_samples_per_file: 1\n  file_prefix: 'a,b'\nreader:\n  batch_size: 2\n  read_threads: 2\n  file_shuffle: seed\ntrain:\n  epochs: 2\n  total_training_steps: 3\n",
            4,
        ),
        // More threads than steps.
        (
            "dataset:\n  format: npz\n  num_files_train: 3\n  num_samples_per_file: 4\nreader:\n  batch_size: 5\n  read_threads: 8\n  sample_shuffle: seed\n",
            2,
        ),
    ] {
        let run = Run::new(yaml, world);
        let report = assert_passes(&run);
        let epochs = run.config.train.epochs;
        let evals = (1..=epochs).filter(|&e| eval_due(&run.config, e)).count() as u64;
        assert_eq!(report.phases.len() as u64, epochs + evals, "{yaml}");
    }
    let capped = Run::new(
        "dataset:\n  format: npz\n  num_files_train: 40\nreader:\n  batch_size: 2\ntrain:\n  total_training_steps: 3\n",
        4,
    );
    let report = assert_passes(&capped);
    assert_eq!(report.phases[0].samples_planned, 24);
    assert_eq!(report.phases[0].samples_not_read, 16);
}

#[test]
fn order_change_is_measured_per_training_epoch() {
    // `reader` lines and `train` lines added to the same workload.
    let changes = |(reader, train): (&str, &str), world: u64| {
        let yaml = format!(
            "dataset:\n  format: npz\n  num_files_train: 64\n  num_samples_per_file: 4\n\
             reader:\n  data_loader: pytorch\n  batch_size: 4\n  read_threads: 2\n{reader}\
             train:\n  epochs: 3\n{train}"
        );
        let report = assert_passes(&Run::new(&yaml, world));
        assert_eq!(report.phases[0].order_changed_fraction, None);
        assert_eq!(report.phases[0].mean_displacement_fraction, None);
        assert_eq!(report.phases[0].rank_files_changed_fraction, None);
        report.phases
    };

    for extra in [
        ("", ""),
        (
            "  sample_shuffle: seed\n  file_shuffle: seed\n",
            "  seed_change_epoch: False\n",
        ),
    ] {
        for phase in &changes(extra, 2)[1..] {
            assert_eq!(phase.order_changed_fraction, Some(0.0), "{extra:?}");
            assert_eq!(phase.mean_displacement_fraction, Some(0.0), "{extra:?}");
            assert_eq!(
                phase.rank_files_changed_fraction,
                Some(vec![Some(0.0), Some(0.0)])
            );
        }
    }

    let shuffled = changes(("  sample_shuffle: seed\n", ""), 4);
    for phase in &shuffled[1..] {
        let changed = phase.order_changed_fraction.unwrap();
        let displacement = phase.mean_displacement_fraction.unwrap();
        assert!(changed > 0.9, "{changed}");
        assert!((0.25..0.42).contains(&displacement), "{displacement}");
        let ranks = phase.rank_files_changed_fraction.clone().unwrap();
        assert_eq!(ranks.len(), 4);
        assert!(ranks.iter().all(|r| r.unwrap() > 0.3), "{ranks:?}");
        assert!(phase.to_text(4).contains("; order changed "));
        assert!(phase.to_text(4).contains("; rank files changed: r0 "));
    }

    let one_rank = changes(("  sample_shuffle: seed\n", ""), 1);
    assert!(one_rank[1].order_changed_fraction.unwrap() > 0.9);
    assert_eq!(one_rank[1].rank_files_changed_fraction, None);
}

#[test]
fn eval_has_no_order_metrics() {
    let report = assert_passes(&shuffled());
    for phase in report.phases.iter().filter(|p| p.phase == "eval") {
        assert_eq!(phase.order_changed_fraction, None);
        assert_eq!(phase.mean_displacement_fraction, None);
        assert_eq!(phase.rank_files_changed_fraction, None);
    }
    assert!(report.phases[3].order_changed_fraction.unwrap() > 0.9);
}

#[test]
fn json_report_has_the_documented_keys() {
    let report = assert_passes(&shuffled());
    let json = report.to_json();
    let keys =
        |v: &serde_json::Value| -> Vec<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(
        keys(&json),
        [
            "passed",
            "violations",
            "first_violations",
            "phases",
            "storage",
            "interrupted"
        ]
    );
    // This run's report.json has no verdict: the storage is not judged, and said so.
    assert_eq!(json["storage"]["valid"], serde_json::Value::Null);
    assert!(report
        .to_text()
        .contains("storage: not judged (report.json has no verdict)"));
    assert_eq!(
        keys(&json["phases"][1]),
        [
            "epoch",
            "phase",
            "samples_planned",
            "samples_read",
            "repeated",
            "unplanned",
            "missing",
            "samples_not_read",
            "steps",
            "order_changed_fraction",
            "mean_displacement_fraction",
            "rank_files_changed_fraction",
            "read_ahead",
        ]
    );
    assert_eq!(json["passed"], true);
    assert_eq!(
        json["phases"][0]["order_changed_fraction"],
        serde_json::Value::Null
    );
    assert!(
        json["phases"][1]["order_changed_fraction"]
            .as_f64()
            .unwrap()
            > 0.9
    );
    assert_eq!(
        json["phases"][1]["rank_files_changed_fraction"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn a_deleted_row_is_missing() {
    let run = shuffled();
    let mut traces = run.traces();
    let at = first_of(&traces[1], 2, Phase::Train) + 4;
    let removed = traces[1].remove(at);
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &[&format!(
            "trace/1.csv: epoch 2 train step {}: {} sample {} never read",
            field(&removed, STEP),
            field(&removed, FILE),
            field(&removed, SAMPLE)
        )],
    );
    assert_eq!(report.violations, 1);
    assert_eq!(report.phases[1].missing, 1);
    assert_eq!(report.phases[1].samples_read, 77);
    assert!(report
        .to_text()
        .contains("epoch 2 train: 77 of 78 planned samples read"));
}

#[test]
fn a_duplicated_row_is_repeated_and_says_where_it_was_first_read() {
    let run = shuffled();
    let mut traces = run.traces();
    let at = first_of(&traces[0], 3, Phase::Eval) + 2;
    let copy = traces[0][at].clone();
    traces[0].insert(at + 3, copy.clone());
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &[&format!(
            "trace/0.csv:{}: epoch 3 eval step {}: {} sample {} read a second time (first at trace/0.csv:{})",
            at + 5,
            field(&copy, STEP),
            field(&copy, FILE),
            field(&copy, SAMPLE),
            at + 2
        )],
    );
    assert_eq!(report.phases[4].repeated, 1);
    assert_eq!(report.phases[4].missing, 0);

    // Read again by the other rank: the first read is found in rank 0's trace.
    let mut traces = run.traces();
    let at = first_of(&traces[0], 1, Phase::Train);
    let copy = with_field(&traces[0][at], RANK, "1");
    let end_of_epoch = first_of(&traces[1], 2, Phase::Train);
    traces[1].insert(end_of_epoch, copy);
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &[&format!(
            "read a second time (first at trace/0.csv:{})",
            at + 2
        )],
    );
    assert_eq!(report.phases[0].repeated, 1);
}

#[test]
fn a_sample_of_the_remainder_is_unplanned() {
    let run = shuffled();
    let plan = run.plan(2, Phase::Train);
    let dropped = plan.sample_at(plan.samples_read());
    let dataset = Dataset::from_config(&run.config);
    let mut traces = run.traces();
    let at = first_of(&traces[0], 2, Phase::Train) + 7;
    let line = with_field(
        &traces[0][at],
        FILE,
        &dataset.file_key(&dataset.train, dropped.file),
    );
    traces[0][at] = with_field(&line, SAMPLE, &dropped.sample.to_string());
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &[
            &format!("trace/0.csv:{}: epoch 2 train", at + 2),
            "in the remainder this epoch does not read",
            "never read",
        ],
    );
    let phase = &report.phases[1];
    assert_eq!((phase.unplanned, phase.missing, phase.repeated), (1, 1, 0));
    assert!(report
        .to_text()
        .contains("2 in the remainder, 1 of them read against the plan"));
}

#[test]
fn samples_and_files_outside_the_split_are_unplanned() {
    let run = shuffled();
    for (column, value, needle) in [
        (SAMPLE, "5", "is not in the file (it has 5 samples)"),
        (
            FILE,
            "train/img_99_of_16.npz",
            "is not a file of the train split",
        ),
        (
            FILE,
            "valid/img_1_of_5.npz",
            "is not a file of the train split",
        ),
    ] {
        let mut traces = run.traces();
        traces[1][3] = with_field(&traces[1][3], column, value);
        let report = run.audit(&traces).unwrap();
        assert_fails_with(&report, &["trace/1.csv:5: epoch 1 train", needle]);
        assert_eq!(report.phases[0].unplanned, 1);
        assert_eq!(report.phases[0].missing, 1);
    }
}

#[test]
fn a_row_moved_to_another_rank_is_out_of_place() {
    let run = shuffled();
    let mut traces = run.traces();
    let at = first_of(&traces[0], 2, Phase::Train) + 10;
    let moved = traces[0].remove(at);
    let into = first_of(&traces[1], 2, Phase::Train) + 10;
    traces[1].insert(into, moved.clone());
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &[&format!(
            "trace/1.csv:{}: epoch 2 train step {}: {} sample {}: rank column is 0 in rank 1's trace",
            into + 2,
            field(&moved, STEP),
            field(&moved, FILE),
            field(&moved, SAMPLE)
        )],
    );
    assert_eq!(report.phases[1].missing, 0);

    let mut traces = run.traces();
    let moved = with_field(&traces[0].remove(at), RANK, "1");
    traces[1].insert(into, moved.clone());
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &[&format!("planned for rank 0 step {}", field(&moved, STEP))],
    );
}

#[test]
fn rows_of_a_thread_out_of_order_fail() {
    let run = shuffled();
    let mut traces = run.traces();
    let start = first_of(&traces[1], 3, Phase::Train);
    // Two consecutive rows of one thread's batch.
    let at = (start..traces[1].len() - 1)
        .find(|&i| {
            let (a, b) = (&traces[1][i], &traces[1][i + 1]);
            field(a, THREAD) == field(b, THREAD) && field(a, STEP) == field(b, STEP)
        })
        .unwrap();
    traces[1].swap(at, at + 1);
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &[
            &format!(
                "trace/1.csv:{}: epoch 3 train step {}",
                at + 3,
                field(&traces[1][at], STEP)
            ),
            "read out of order",
        ],
    );
    assert_eq!(report.violations, 1);
}

#[test]
fn a_batch_read_by_the_wrong_thread_fails() {
    let run = shuffled();
    let traces = run.traces();
    // Thread 0 reads step 1 first.
    let line = &traces[0][0];
    for (thread, needle) in [
        ("1", "read by thread 1, but step 1 is thread 0's"),
        ("3", "thread 3 does not exist (reader.read_threads = 3)"),
    ] {
        let mut broken = traces.clone();
        broken[0][0] = with_field(line, THREAD, thread);
        let report = run.audit(&broken).unwrap();
        assert_fails_with(&report, &["trace/0.csv:2: epoch 1 train step 1", needle]);
        assert_eq!(report.violations, 1);
    }
}

#[test]
fn a_missing_rank_file_misses_its_samples() {
    let run = shuffled();
    let traces = run.traces();
    let scratch = Scratch::new();
    run.write(&scratch.0, &traces);
    std::fs::remove_file(scratch.0.join("trace/1.csv")).unwrap();
    let report = audit(&scratch.0).unwrap();
    assert_fails_with(
        &report,
        &[
            "trace/1.csv: missing (rank 1 of 2)",
            "trace/1.csv: epoch 1 train step 1",
        ],
    );
    assert_eq!(report.phases[0].missing, 39);
    assert_eq!(report.phases[2].missing, 12);
    let missing: u64 = report.phases.iter().map(|p| p.missing).sum();
    assert_eq!(report.violations, 1 + missing);
    assert!(report
        .to_text()
        .contains(&format!("… and {} more", report.violations - 10)));
}

#[test]
fn a_rank_that_stops_early_takes_fewer_steps() {
    let run = shuffled();
    let mut traces = run.traces();
    let end = first_of(&traces[1], 2, Phase::Eval);
    // Drop the rank's last step of epoch 2's training.
    let kept: Vec<String> = traces[1]
        .iter()
        .enumerate()
        .filter(|(i, l)| !(*i < end && field(l, EPOCH) == "2" && field(l, STEP) == "13"))
        .map(|(_, l)| l.clone())
        .collect();
    traces[1] = kept;
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &["trace/1.csv: epoch 2 train: rank 1 took 12 steps, the plan has 13"],
    );
    assert_eq!(report.phases[1].missing, 3);
    assert_eq!(report.violations, 4);
}

#[test]
fn rows_outside_the_run_fail() {
    let run = shuffled();
    let traces = run.traces();
    let last = traces[0].last().unwrap().clone();
    let first = traces[0][0].clone();
    let eval_row = row(1, Phase::Eval, 1, 0, 0, "valid/img_1_of_5.npz", 0);
    for (broken_line, at_end, needle) in [
        (
            with_field(&last, EPOCH, "4"),
            true,
            "this read is not part of the run (epochs 1 to 3)",
        ),
        (
            eval_row,
            false,
            "this read is not part of the run: no evaluation is due after this epoch",
        ),
        (first.clone(), true, "comes after rows of a later phase"),
        (
            with_field(&first, EPOCH, "0"),
            false,
            "is not part of the run (epochs 1 to 3)",
        ),
    ] {
        let mut traces = traces.clone();
        let at = if at_end {
            traces[0].len()
        } else {
            first_of(&traces[0], 2, Phase::Train)
        };
        traces[0].insert(at, broken_line);
        let report = run.audit(&traces).unwrap();
        assert_fails_with(&report, &[&format!("trace/0.csv:{}: ", at + 2), needle]);
        assert_eq!(report.violations, 1, "{}", report.to_text());
    }
}

#[test]
fn a_trace_of_a_rank_the_run_did_not_have_fails() {
    let run = shuffled();
    let mut traces = run.traces();
    traces.push(Vec::new());
    let report = run.audit(&traces).unwrap();
    assert_fails_with(
        &report,
        &["trace/2.csv: a trace of rank 2, but the run had 2 ranks"],
    );
}

#[test]
fn a_malformed_output_folder_is_an_error_naming_file_and_line() {
    let run = shuffled();
    let mut traces = run.traces();
    traces[1][20] = "1,train,3,1,0,train/0/img_00_of_16.npz,0,0,4096".into();
    let err = run.audit(&traces).unwrap_err();
    assert_eq!(err.exit_code(), 2, "a damaged trace is bad input");
    assert!(
        err.to_string()
            .contains("trace/1.csv:22: malformed trace line: 9 columns, expected 11"),
        "{err}"
    );
    let mut traces = run.traces();
    traces[0][5] = with_field(&traces[0][5], SAMPLE, "x");
    let err = run.audit(&traces).unwrap_err();
    assert!(
        err.to_string()
            .contains("trace/0.csv:7: malformed trace line: sample = 'x'"),
        "{err}"
    );

    let scratch = Scratch::new();
    run.write(&scratch.0, &run.traces());
    std::fs::write(scratch.0.join("trace/0.csv"), "epoch,phase,step\n").unwrap();
    let err = audit(&scratch.0).unwrap_err();
    assert!(
        err.to_string()
            .contains("trace/0.csv:1: malformed trace line: header is"),
        "{err}"
    );

    std::fs::remove_dir_all(scratch.0.join("trace")).unwrap();
    let err = audit(&scratch.0).unwrap_err();
    assert!(err.to_string().contains("trace is not a folder"), "{err}");

    for (report, needle) in [
        ("{", "report.json: not a run's report"),
        ("{}", "report.json: it has no 'workload'"),
        (
            r#"{"workload": "w", "num_accelerators": 0, "run_entropy": 1, "configuration": {}}"#,
            "'num_accelerators' must be a whole number from 1 to 1048576",
        ),
        (
            r#"{"workload": "w", "num_accelerators": 1000000000000, "run_entropy": 1, "configuration": {}}"#,
            "'num_accelerators' must be a whole number from 1 to 1048576",
        ),
        (
            r#"{"workload": "w", "num_accelerators": 1, "run_entropy": 1, "configuration": {"reader": {"batch_size": 0}}}"#,
            "the saved configuration is not valid",
        ),
        (
            r#"{"workload": "w", "num_accelerators": 1, "run_entropy": 1, "configuration": {"workflow": {"train": false}}}"#,
            "the run did not train",
        ),
    ] {
        std::fs::write(scratch.0.join("report.json"), report).unwrap();
        let err = audit(&scratch.0).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{report}: {err}");
        assert!(err.to_string().contains(needle), "{report}: {err}");
    }
    std::fs::remove_file(scratch.0.join("report.json")).unwrap();
    let err = audit(&scratch.0).unwrap_err();
    assert!(
        err.to_string().contains("report.json does not exist"),
        "{err}"
    );
    assert_eq!(err.exit_code(), 2);
}

#[test]
fn the_runs_own_verdict_on_the_storage_is_said_beside_the_access_pattern() {
    let scratch = Scratch::new();
    let report = serde_json::json!({
        "workload": "w", "num_accelerators": 1, "run_entropy": 1, "configuration": {},
        "verdict": {"valid": false, "reasons": [
            {"code": "page_cache", "message": "epochs measured memory", "fix": "f"},
            {"code": "dataset_size", "message": "too small", "fix": "g"},
        ]},
    });
    std::fs::write(scratch.0.join("report.json"), report.to_string()).unwrap();
    let saved = load_run(&scratch.0).unwrap();
    assert_eq!(
        saved.storage,
        StorageValidity {
            valid: Some(false),
            reasons: vec![
                "page_cache: epochs measured memory".into(),
                "dataset_size: too small".into()
            ],
        }
    );
    let audited = AuditReport {
        passed: true,
        violations: 0,
        first_violations: Vec::new(),
        phases: Vec::new(),
        world: 1,
        storage: saved.storage,
        interrupted: None,
    };
    assert_eq!(
        audited.to_text(),
        "storage: NOT VALID (the run's verdict): its figures are not the storage's, whatever \
         the access pattern:\n  page_cache: epochs measured memory\n  dataset_size: too small\n\
         access pattern: audit passed\n"
    );
    let valid = AuditReport {
        storage: StorageValidity {
            valid: Some(true),
            reasons: Vec::new(),
        },
        ..audited
    };
    assert!(valid
        .to_text()
        .starts_with("storage: VALID (the run's verdict)\n"));
}

#[test]
fn the_command_line_exits_0_passed_1_failed_2_misused_or_not_a_run_s_folder() {
    let run = shuffled();
    let scratch = Scratch::new();
    let dir = scratch.0.display().to_string();
    let dlio_rs = |args: &[&str]| {
        let mut words = vec!["dlio-rs".to_string(), "audit".to_string()];
        words.extend(args.iter().map(|a| a.to_string()));
        crate::cli::dlio_rs_main(words)
    };
    run.write(&scratch.0, &run.traces());
    assert_eq!(dlio_rs(&[&dir]), 0);
    assert_eq!(dlio_rs(&[&dir, "--json"]), 0);
    let mut traces = run.traces();
    traces[0].pop();
    run.write(&scratch.0, &traces);
    assert_eq!(dlio_rs(&[&dir, "--json"]), 1);
    assert_eq!(dlio_rs(&[&format!("{dir}/nothing-here")]), 2);
    assert_eq!(dlio_rs(&[]), 2);
    assert_eq!(dlio_rs(&[&dir, "--bogus"]), 2);
}
