//! End-to-end tests of the event traces (`output.trace_format` chrome, pfw, all): each rank's
//! Chrome trace read with serde_json (an event per sample read and per step part, spans that nest
//! on every thread, metadata naming every process and thread), and DFTracer's trace read back with
//! DFTracer's own tools from PyPI (`dftracer_validate`, `dftracer_stats`), its events counted by
//! category and name against report.json; the CSV of the same run still passes the audit.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common::*;

/// What a rank did, from report.json: per rank, steps and phases are the same on every rank.
struct Expected {
    epochs: u64,
    train_steps: u64,
    eval_steps: u64,
    eval_phases: u64,
    saves: u64,
    /// Samples read by all ranks.
    samples: u64,
}

fn expected(report: &Value) -> Expected {
    let epochs = at(report, "/epochs").as_array().unwrap();
    let eval = |e: &Value| e.get("eval").filter(|v| !v.is_null()).cloned();
    Expected {
        epochs: epochs.len() as u64,
        train_steps: epochs.iter().map(|e| int(e, "/steps")).sum(),
        eval_steps: epochs
            .iter()
            .filter_map(eval)
            .map(|e| int(&e, "/steps"))
            .sum(),
        eval_phases: epochs.iter().filter_map(eval).count() as u64,
        saves: report["checkpoints"]["save"]["count"].as_u64().unwrap_or(0),
        samples: epochs
            .iter()
            .map(|e| int(e, "/samples_read") + eval(e).map_or(0, |v| int(&v, "/samples_read")))
            .sum(),
    }
}

/// A complete event of a Chrome trace.
#[derive(Debug, Clone)]
struct Event {
    name: String,
    tid: u64,
    ts: u64,
    end: u64,
    args: Value,
}

/// Rank `rank`'s Chrome trace: its complete events in file order, and the names its metadata
/// events give (`process_name`, and `thread_name` by tid). Every event must have what Perfetto's
/// JSON importer needs, and the rank's pid.
fn chrome(trace: &Path, rank: u64) -> (Vec<Event>, String, BTreeMap<u64, String>) {
    let file = trace.join(format!("{rank}.json"));
    let json: Value = serde_json::from_slice(&std::fs::read(&file).unwrap())
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", file.display()));
    let (mut events, mut process, mut threads) = (Vec::new(), String::new(), BTreeMap::new());
    for e in json["traceEvents"].as_array().unwrap() {
        assert_eq!(e["pid"], rank + 1, "{e}");
        let name = e["name"].as_str().unwrap().to_string();
        match e["ph"].as_str().unwrap() {
            "M" if name == "process_name" => process = e["args"]["name"].to_string(),
            "M" if name == "thread_name" => {
                threads.insert(int(e, "/tid"), e["args"]["name"].to_string());
            }
            "M" => assert_eq!(name, "process_sort_index", "{e}"),
            "X" => {
                let ts = int(e, "/ts");
                events.push(Event {
                    name,
                    tid: int(e, "/tid"),
                    ts,
                    end: ts + int(e, "/dur"),
                    args: e["args"].clone(),
                });
            }
            other => panic!("unexpected phase {other}: {e}"),
        }
    }
    (events, process, threads)
}

fn count(events: &[Event], name: &str) -> u64 {
    events.iter().filter(|e| e.name == name).count() as u64
}

/// Checks that the spans of each thread nest: two spans of one thread are apart, or one holds
/// the other.
fn check_nesting(events: &[Event]) {
    for (i, a) in events.iter().enumerate() {
        for b in &events[i + 1..] {
            let apart = a.end <= b.ts || b.end <= a.ts;
            let nested = a.ts <= b.ts && b.end <= a.end || b.ts <= a.ts && a.end <= b.end;
            assert!(
                a.tid != b.tid || apart || nested,
                "spans overlap without nesting on thread {}: {a:?} and {b:?}",
                a.tid
            );
        }
    }
}

/// Whether a span named one of `names` of `e`'s thread holds `e`.
fn inside(events: &[Event], e: &Event, names: &[&str]) -> bool {
    events.iter().any(|p| {
        names.contains(&p.name.as_str()) && p.tid == e.tid && p.ts <= e.ts && e.end <= p.end
    })
}

/// DFTracer's tools, as the `dftracer` package from PyPI installs them beside its module.
fn dftracer_tool(name: &str) -> PathBuf {
    let found = std::process::Command::new("python3")
        .args([
            "-c",
            "import dftracer, os; print(os.path.join(os.path.dirname(dftracer.__file__), 'bin'))",
        ])
        .output()
        .expect("python3 runs");
    assert!(
        found.status.success(),
        "DFTracer's tools are needed to read the .pfw.gz traces back: pip install dftracer \
         (.ci/run does)"
    );
    PathBuf::from(String::from_utf8(found.stdout).unwrap().trim()).join(name)
}

/// `dftracer_stats` of every trace file in `trace`: per file name, its events counted by
/// `category|name`.
fn dftracer_counts(tmp: &Scratch, trace: &Path) -> BTreeMap<String, BTreeMap<String, u64>> {
    let validate = launch(
        &dftracer_tool("dftracer_validate").display().to_string(),
        &tmp.path,
        &["-d", &trace.display().to_string(), "--log-level", "off"],
        &[],
    )
    .ok();
    assert!(
        validate.stdout.contains(" 0 failed"),
        "{}",
        validate.context()
    );
    let index = tmp.join(format!(
        "index-{}",
        trace
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
    ));
    std::fs::create_dir_all(&index).unwrap();
    let stats = launch(
        &dftracer_tool("dftracer_stats").display().to_string(),
        &tmp.path,
        &[
            "-d",
            &trace.display().to_string(),
            "--index-dir",
            &index.display().to_string(),
            "--json",
            "--report",
            "detailed",
            "--group-by",
            "cat",
            "name",
            "--log-level",
            "off",
        ],
        &[],
    )
    .ok();
    let files: Value = serde_json::from_str(&stats.stdout)
        .unwrap_or_else(|e| panic!("dftracer_stats printed no JSON: {e}\n{}", stats.context()));
    files
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            let name = Path::new(f["file_path"].as_str().unwrap())
                .file_name()
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let counts = f["detailed"]["grouped_duration"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(key, stats)| (key.clone(), int(stats, "/count")))
                .collect();
            (name, counts)
        })
        .collect()
}

fn words(tmp: &Scratch, out: &Path, threads: u64, extra: &[&str]) -> Vec<String> {
    let shape = Shape {
        files: 12,
        samples_per_file: 2,
        batch: 2,
        threads,
        epochs: 2,
    };
    let mut words = traced_words(
        &tmp.join("data"),
        out,
        &shape,
        &[
            "++workload.dataset.num_files_eval=4",
            "++workload.dataset.num_subfolders_train=0",
            "++workload.dataset.num_subfolders_eval=0",
            "++workload.workflow.evaluation=True",
            "++workload.train.computation_time=0.0005",
        ],
    );
    words.extend(extra.iter().map(|w| w.to_string()));
    words
}

#[test]
fn chrome_and_dftracer_traces_hold_every_read_and_step_of_each_rank() {
    let tmp = Scratch::new("event-traces");
    generate_for(&tmp.path, &words(&tmp, &tmp.join("gen"), 2, &[]));
    let world = 2u64;
    // Reader threads, and the training loop reading itself (its reads inside its data waits).
    for threads in [2u64, 0] {
        let out = tmp.join(format!("threads{threads}"));
        let checkpoints = [
            "++workload.workflow.checkpoint=True",
            "++workload.checkpoint.steps_between_checkpoints=2",
            "++workload.model.model_size=4096",
        ];
        let mut words = words(&tmp, &out, threads, &checkpoints);
        words.push(format!(
            "++workload.checkpoint.checkpoint_folder={}",
            tmp.s(&format!("ckpt{threads}"))
        ));
        words.push("++workload.output.trace_format=all".into());
        run_quiet(&tmp.path, world as usize, &words).ok();
        let report = read_json(&out.join("report.json"));
        assert_eq!(report["trace_format"], "all");
        let want = expected(&report);
        assert!(want.saves > 0 && want.eval_phases > 0 && want.train_steps > 0);
        // The audit's CSV is written beside the others, and passes.
        let (code, _, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{}", ran.context());

        let trace = out.join("trace");
        let pfw = dftracer_counts(&tmp, &trace);
        assert_eq!(pfw.len() as u64, world, "{pfw:?}");
        let mut reads = 0;
        for rank in 0..world {
            let (events, process, threads_named) = chrome(&trace, rank);
            assert_eq!(process, format!("\"rank {rank}\""));
            let mut tids = vec![(1, "\"trainer\"".to_string())];
            tids.extend((0..threads).map(|k| (2 + k, format!("\"reader {k}\""))));
            assert_eq!(threads_named, tids.into_iter().collect::<BTreeMap<_, _>>());
            assert!(events.iter().all(|e| threads_named.contains_key(&e.tid)));

            let all_steps = want.train_steps + want.eval_steps;
            let rank_reads = count(&events, "read");
            let csv_rows = std::fs::read_to_string(trace.join(format!("{rank}.csv")))
                .unwrap()
                .lines()
                .count() as u64
                - 1;
            assert_eq!(rank_reads, csv_rows);
            reads += rank_reads;
            assert_eq!(count(&events, "step"), all_steps);
            assert_eq!(count(&events, "data wait"), all_steps);
            assert_eq!(count(&events, "compute"), all_steps);
            assert_eq!(count(&events, "barrier"), want.train_steps);
            assert_eq!(count(&events, "train"), want.epochs);
            assert_eq!(count(&events, "evaluation"), want.eval_phases);
            assert_eq!(count(&events, "epoch"), want.epochs);
            assert_eq!(count(&events, "checkpoint save"), want.saves);
            assert_eq!(count(&events, "run"), 1);

            // Spans nest: the run holds the epochs, an epoch its phases and the saves after them,
            // a phase its steps, a step its parts; reads sit in a data wait, or on their own
            // thread.
            check_nesting(&events);
            for e in &events {
                let holders: &[&str] = match e.name.as_str() {
                    "run" => &[],
                    "epoch" => &["run"],
                    "train" | "evaluation" => &["epoch"],
                    "step" => &["train", "evaluation"],
                    "data wait" | "compute" | "barrier" => &["step"],
                    "checkpoint save" => &["epoch"],
                    "read" if e.tid == 1 => &["data wait"],
                    "read" => &[],
                    other => panic!("unexpected event {other}"),
                };
                assert!(
                    holders.is_empty() || inside(&events, e, holders),
                    "no {holders:?} holds {e:?}"
                );
                assert_eq!(e.tid == 1, e.name != "read" || threads == 0, "{e:?}");
            }
            // A step's parts follow each other; steps and a reader's reads follow each other.
            let steps: Vec<&Event> = events.iter().filter(|e| e.name == "step").collect();
            for step in &steps {
                let part = |name: &str| {
                    events
                        .iter()
                        .find(|e| e.name == name && e.args == step.args)
                        .unwrap_or_else(|| panic!("no {name} of {step:?}"))
                };
                let (wait, compute) = (part("data wait"), part("compute"));
                assert_eq!(wait.ts, step.ts, "{step:?}");
                assert_eq!(compute.ts, wait.end, "{step:?}");
                if step.args["phase"] == "train" {
                    assert_eq!(part("barrier").ts, compute.end, "{step:?}");
                }
            }
            let mut by_time = steps.clone();
            by_time.sort_by_key(|s| s.ts);
            assert!(by_time.windows(2).all(|w| w[0].end <= w[1].ts));
            for k in 0..threads {
                let mine: Vec<&Event> = events.iter().filter(|e| e.tid == 2 + k).collect();
                assert!(!mine.is_empty());
                assert!(
                    mine.windows(2).all(|w| w[0].end <= w[1].ts),
                    "reader {k}'s reads are out of order or overlap"
                );
            }

            // DLIO's names and categories, and no other events.
            let dlio: BTreeMap<String, u64> = [
                ("data|item", rank_reads),
                ("dataloader|fetch.iter", all_steps),
                ("dataloader|fetch.block", all_steps),
                ("compute|compute", all_steps),
                ("comm|barrier", want.train_steps),
                ("pipeline|train", want.epochs),
                ("pipeline|evaluate", want.eval_phases),
                ("pipeline|epoch.block", want.epochs),
                ("checkpoint|capture", want.saves),
                ("ai_root|ai_root", 1),
                ("dftracer|start", 1),
                ("dftracer|end", 1),
            ]
            .into_iter()
            .map(|(key, n)| (key.to_string(), n))
            .collect();
            assert_eq!(pfw[&format!("trace-{rank}-of-{world}.pfw.gz")], dlio);
        }
        assert_eq!(reads, want.samples);
    }
}

#[test]
fn a_checkpoint_only_run_traces_its_saves_and_loads_and_no_reads() {
    let tmp = Scratch::new("event-traces-ckpt");
    let out = tmp.join("out");
    let words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=False",
        "++workload.workflow.train=False",
        "++workload.workflow.evaluation=False",
        "++workload.workflow.checkpoint=True",
        "++workload.checkpoint.num_checkpoints_write=3",
        "++workload.checkpoint.num_checkpoints_read=2",
        "++workload.checkpoint.time_between_checkpoints=0",
        "++workload.model.model_size=4096",
    ]);
    let mut words = with(&words, &["--trace-format", "all"]);
    words.push(format!("++hydra.run.dir={}", out.display()));
    words.push(format!(
        "++workload.checkpoint.checkpoint_folder={}",
        tmp.s("ckpt")
    ));
    run_quiet(&tmp.path, 2, &words).ok();
    let trace = out.join("trace");
    assert!(!trace.join("0.csv").exists(), "a CSV of no reads");
    let pfw = dftracer_counts(&tmp, &trace);
    for rank in 0..2u64 {
        let (events, _, threads) = chrome(&trace, rank);
        assert_eq!(threads.len(), 1, "{threads:?}");
        assert_eq!(count(&events, "checkpoint save"), 3);
        assert_eq!(count(&events, "checkpoint load"), 2);
        assert_eq!(count(&events, "run"), 1);
        assert_eq!(events.len(), 6);
        check_nesting(&events);
        assert!(events
            .iter()
            .all(|e| e.name == "run" || inside(&events, e, &["run"])));
        let counts = &pfw[&format!("trace-{rank}-of-2.pfw.gz")];
        assert_eq!(counts.get("checkpoint|capture"), Some(&3), "{counts:?}");
        assert_eq!(counts.get("checkpoint|restart"), Some(&2), "{counts:?}");
        assert_eq!(counts.get("data|item"), None, "{counts:?}");
    }
}

#[test]
fn a_bad_trace_format_is_refused_and_the_audit_needs_the_csv() {
    let tmp = Scratch::new("event-traces-bad");
    let out = tmp.join("out");
    let base = words(&tmp, &out, 1, &[]);
    let mut args = strings(&["run"]);
    args.extend(with(&base, &["++workload.output.trace_format=xml"]));
    dlio_rs(&tmp.path, &args).fails(2).says(&[
        "workload.output.trace_format = 'xml'",
        "valid values are csv, chrome, pfw, all",
    ]);
    let mut args = strings(&["run", "--trace-format", "perfetto"]);
    args.extend(base.iter().cloned());
    dlio_rs(&tmp.path, &args).fails(2).says(&[
        "--trace-format",
        "'perfetto'",
        "csv, chrome, pfw, all",
    ]);

    generate_for(&tmp.path, &words(&tmp, &tmp.join("gen"), 1, &[]));
    run_quiet(
        &tmp.path,
        1,
        &with(&base, &["++workload.output.trace_format=chrome"]),
    )
    .ok();
    assert!(out.join("trace/0.json").exists());
    assert!(!out.join("trace/0.csv").exists());
    dlio_rs(&tmp.path, &["audit", &out.display().to_string()])
        .fails(2)
        .says(&["traced as chrome only", "--trace-format csv or all"]);
    // A run in the same folder in another format leaves no trace of the last one.
    run_quiet(
        &tmp.path,
        1,
        &with(&base, &["++workload.output.trace_format=pfw"]),
    )
    .ok();
    let left: Vec<String> = std::fs::read_dir(out.join("trace"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, ["trace-0-of-1.pfw.gz"]);
}
