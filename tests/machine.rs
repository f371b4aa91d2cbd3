//! `--output-format json|csv`: each command's result as one document on standard output and
//! nothing else there (parsed whole by serde_json, or by Python's csv module), its values checked
//! against the run's own files and known inputs, the text for people on standard error; and
//! `compare`'s configuration difference, its refusal of runs of different workloads, and its t
//! bound recomputed from the runs' epochs.

use std::path::Path;

use serde_json::{json, Value};

use crate::common::*;

/// A small training run: 8 files of 64 KiB, batches of 2, 3 epochs, each with an evaluation
/// of 4 files.
fn words(tmp: &Scratch) -> Vec<String> {
    let mut words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.evaluation=True",
        "++workload.dataset.num_files_train=8",
        "++workload.dataset.num_files_eval=4",
        "++workload.dataset.record_length_bytes=65536",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.train.epochs=3",
        "++workload.train.computation_time=0.001",
        "++workload.evaluation.eval_time=0.001",
        "++workload.reader.batch_size=2",
        "++workload.reader.batch_size_eval=2",
    ]);
    words.push(format!("++workload.dataset.data_folder={}", tmp.s("data")));
    words
}

/// `dlio-rs run` of `words` into `tmp/out`, with `extra` options and words.
fn run(tmp: &Scratch, out: &str, words: &[String], extra: &[&str]) -> Ran {
    let mut args = strings(&["run"]);
    args.extend(with(words, extra));
    args.push(format!("++hydra.run.dir={}", tmp.s(out)));
    dlio_rs(&tmp.path, &args)
}

#[test]
fn a_run_s_document_is_its_report_and_its_table_is_its_epochs() {
    let tmp = Scratch::new("machine-run");
    let words = words(&tmp);
    let ran = run(&tmp, "a", &words, &["--output-format=json"]).ok();
    let doc = document(&ran);
    assert_eq!(doc["command"], "run");
    assert_eq!(doc["schema"], 1);
    assert_eq!(doc["output_folder"], tmp.s("a"));
    // 8 training files and 4 evaluation files generated, then trained on.
    assert_eq!(int(&doc, "/generated/files"), 12);
    let report = read_json(&tmp.join("a/report.json"));
    assert_eq!(doc["report"], report);
    assert_eq!(at(&report, "/epochs").as_array().unwrap().len(), 3);
    assert!(at(&report, "/verdict/line").is_string());
    // The table and the verdict are on standard error.
    assert!(ran.stderr.contains("Training AU"), "{}", ran.context());
    assert!(ran.stderr.contains("Verdict: "), "{}", ran.context());

    let reuse = "++workload.workflow.generate_data=False";
    let ran = run(&tmp, "b", &words, &["-q", "--output-format=csv", reuse]).ok();
    // Even with -q the verdict is said, on standard error.
    assert!(ran.stderr.contains("Verdict: "), "{}", ran.context());
    let rows = parse_csv(&ran.stdout);
    let header = &rows[0];
    assert_eq!(header[..3], ["phase", "epoch", "au_percent"]);
    assert_eq!(header.len(), 19);
    // A training and an evaluation row per epoch.
    assert_eq!(rows.len(), 1 + 3 * 2, "{}", ran.stdout);
    let report = read_json(&tmp.join("b/report.json"));
    let column = |name: &str| header.iter().position(|h| h == name).unwrap();
    for (i, row) in rows[1..].iter().enumerate() {
        let epoch = i / 2;
        let (phase, pointer) = match i % 2 {
            0 => ("train", format!("/epochs/{epoch}")),
            _ => ("eval", format!("/epochs/{epoch}/eval")),
        };
        assert_eq!(row[0], phase);
        assert_eq!(row[1], (epoch + 1).to_string());
        let phase_report = at(&report, &pointer);
        for name in [
            "au_percent",
            "samples_per_second",
            "duration_seconds",
            "p99_us",
        ] {
            let value: f64 = row[column(name)].parse().unwrap();
            assert_eq!(
                value,
                num(phase_report, &format!("/{name}")),
                "{name} of {row:?}"
            );
        }
        for name in ["steps", "samples_read", "bytes_read", "reads"] {
            assert_eq!(
                row[column(name)],
                int(phase_report, &format!("/{name}")).to_string()
            );
        }
        let samples = if phase == "train" { "8" } else { "4" };
        assert_eq!(row[column("samples_read")], samples);
    }
}

/// Two runs of one workload, one of another batch size: `compare`'s document has both runs'
/// epochs, each metric's Welch bound (recomputed here from the epochs) and whether it is
/// flagged, and the configuration difference; its CSV has a row per metric and epoch; the runs
/// of different workloads are refused, or with --different-workloads shown and not judged.
#[test]
fn compare_documents_bound_each_difference_and_refuse_different_workloads() {
    let tmp = Scratch::new("machine-compare");
    let words = words(&tmp);
    run(&tmp, "a", &words, &["-q"]).ok();
    let reuse = "++workload.workflow.generate_data=False";
    run(&tmp, "b", &words, &["-q", reuse]).ok();
    let html = format!("--html={}", tmp.s("compare.html"));
    let compare = |b: &str, extra: &[&str]| {
        let mut args = vec!["compare".to_string(), tmp.s("a"), tmp.s(b), html.clone()];
        args.extend(strings(extra));
        dlio_rs(&tmp.path, &args)
    };
    let ran = compare("b", &["--output-format=json"]).ok();
    let doc = document(&ran);
    assert_eq!(doc["command"], "compare");
    assert_eq!(doc["a"]["folder"], tmp.s("a"));
    assert_eq!(doc["same_workload"], true);
    assert_eq!(doc["judged"], true);
    assert_eq!(
        doc["configuration_differences"],
        json!([{"key": "workflow.generate_data", "a": true, "b": false}])
    );
    assert_eq!(doc["page"], tmp.s("compare.html"));
    assert!(ran.stderr.contains("Configuration difference (1 key(s)):"));
    let metrics = at(&doc, "/metrics").as_array().unwrap();
    let names: Vec<&str> = metrics
        .iter()
        .map(|m| m["metric"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "AU",
            "samples/s",
            "MiB/s read",
            "read p50 µs",
            "read p99 µs",
            "cache share"
        ]
    );
    let summary_a = read_json(&tmp.join("a/summary.json"));
    assert_eq!(
        nums(&metrics[0], "/a"),
        nums(&summary_a, "/metric/train_au_percentage")
    );
    for metric in metrics {
        let (a, b) = (nums(metric, "/a"), nums(metric, "/b"));
        assert_eq!((a.len(), b.len()), (3, 3));
        // Welch: v = s²/n of each run, ν = (v_A + v_B)² / (v_A²/2 + v_B²/2) with 3 epochs each.
        let v = |x: &[f64]| {
            let mean = x.iter().sum::<f64>() / 3.0;
            x.iter().map(|y| (y - mean).powi(2)).sum::<f64>() / 2.0 / 3.0
        };
        let (va, vb) = (v(&a), v(&b));
        let se = (va + vb).sqrt();
        assert!((num(metric, "/standard_error") - se).abs() <= 1e-9 * se.max(1.0));
        if va + vb > 0.0 {
            let nu = (va + vb).powi(2) / (va * va / 2.0 + vb * vb / 2.0);
            assert!((num(metric, "/degrees_of_freedom") - nu).abs() < 1e-9 * nu);
            // ν is between 2 (one run's noise alone) and 4 (equal noise): t from 4.303 to 2.776.
            let t = num(metric, "/t_quantile");
            assert!((2.776..=4.303).contains(&t), "{metric}");
            assert!((num(metric, "/bound") - t * se).abs() <= 1e-9 * se);
        }
        let difference = num(metric, "/mean_b") - num(metric, "/mean_a");
        let flagged = difference.abs() > num(metric, "/bound");
        assert_eq!(metric["flagged"], flagged, "{metric}");
        let verdict = if flagged { "differs" } else { "within_noise" };
        assert_eq!(metric["verdict"], verdict, "{metric}");
    }

    let ran = compare("b", &["--output-format=csv"]).ok();
    let rows = parse_csv(&ran.stdout);
    assert_eq!(rows[0], ["metric", "epoch", "a", "b", "b_minus_a"]);
    assert_eq!(rows.len(), 1 + 6 * 3);
    let summary_b = read_json(&tmp.join("b/summary.json"));
    let au_b = nums(&summary_b, "/metric/train_au_percentage");
    for (epoch, row) in rows[1..4].iter().enumerate() {
        assert_eq!(row[..2], ["AU".to_string(), (epoch + 1).to_string()]);
        assert_eq!(row[3].parse::<f64>().unwrap(), au_b[epoch]);
    }

    // Another batch size: another workload.
    run(
        &tmp,
        "c",
        &words,
        &["-q", reuse, "++workload.reader.batch_size=4"],
    )
    .ok();
    let refused = compare("c", &["--output-format=json"]).fails(2).says(&[
        "are runs of different workloads",
        "reader.batch_size (A: 2, B: 4)",
        "--different-workloads",
    ]);
    assert_eq!(refused.stdout, "");
    let ran = compare("c", &["--output-format=json", "--different-workloads"]).ok();
    assert!(
        ran.stderr
            .starts_with("WARNING: DIFFERENT WORKLOADS — reader.batch_size (A: 2, B: 4)"),
        "{}",
        ran.context()
    );
    let doc = document(&ran);
    assert_eq!(doc["same_workload"], false);
    assert_eq!(doc["judged"], false);
    assert_eq!(
        doc["workload_differences"],
        json!([{"key": "reader.batch_size", "a": 2, "b": 4}])
    );
    for metric in at(&doc, "/metrics").as_array().unwrap() {
        assert_eq!(metric["flagged"], false, "{metric}");
        assert_eq!(metric["verdict"], "not_judged", "{metric}");
    }
    let text = compare("c", &["--different-workloads"]).ok();
    assert!(text.stdout.starts_with("WARNING: DIFFERENT WORKLOADS"));
    assert!(!text.stdout.contains("DIFFERS"), "{}", text.context());

    // A Python DLIO run without its configuration: compared, and said to be unknown.
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dlio-output");
    let dlio = fixture.display().to_string();
    let ran = dlio_rs(
        &tmp.path,
        &["compare", &dlio, &dlio, &html, "--output-format=json"],
    )
    .ok();
    let doc = document(&ran);
    assert_eq!(doc["same_workload"], Value::Null);
    assert_eq!(doc["configuration_compared"], false);
    assert_eq!(doc["warnings"].as_array().unwrap().len(), 2);
    assert!(ran.stderr.contains("the configuration of A is unknown"));
}

#[test]
fn plan_and_workloads_documents_list_what_their_text_lists() {
    let tmp = Scratch::new("machine-plan");
    let text = dlio_rs(&tmp.path, &["workloads"]).ok();
    let names: Vec<&str> = text
        .stdout
        .lines()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    let doc = document(&dlio_rs(&tmp.path, &["workloads", "--output-format=json"]).ok());
    assert_eq!(doc["command"], "workloads");
    let listed = at(&doc, "/workloads").as_array().unwrap();
    let json_names: Vec<&str> = listed.iter().map(|w| w["name"].as_str().unwrap()).collect();
    assert_eq!(json_names, names);
    let rows = parse_csv(
        &dlio_rs(&tmp.path, &["workloads", "--output-format=csv"])
            .ok()
            .stdout,
    );
    assert_eq!(rows[0], ["name", "description"]);
    assert_eq!(rows.len(), names.len() + 1);
    for (row, workload) in rows[1..].iter().zip(listed) {
        assert_eq!(row[0], workload["name"].as_str().unwrap());
        assert_eq!(row[1], workload["description"].as_str().unwrap());
    }
    // Descriptions with commas come back whole: the quoting held.
    assert!(rows.iter().any(|r| r[1].contains(',')));

    let plan = |extra: &[&str]| {
        let mut args = strings(&[
            "plan",
            "workload=default",
            "-n",
            "2",
            "--rank=1",
            "--epoch=2",
            "--head=3",
            "++workload.dataset.num_files_train=20",
            "++workload.reader.batch_size=4",
        ]);
        args.extend(strings(extra));
        dlio_rs(&tmp.path, &args)
    };
    let doc = document(&plan(&["--output-format=json"]).ok());
    assert_eq!(doc["command"], "plan");
    let training = at(&doc, "/training");
    assert_eq!(
        (int(training, "/accelerators"), int(training, "/rank")),
        (2, 1)
    );
    // 20 files of 1 sample over 2 ranks in batches of 4: 2 steps each, 4 samples not read.
    assert_eq!(int(training, "/steps_per_rank"), 2);
    assert_eq!(int(training, "/samples_not_read"), 4);
    let batches = at(training, "/batches").as_array().unwrap();
    assert_eq!(batches.len(), 2);
    assert_eq!(int(training, "/steps_not_listed"), 0);
    let rows = parse_csv(&plan(&["--output-format=csv"]).ok().stdout);
    assert_eq!(rows[0], ["step", "position", "file", "sample"]);
    assert_eq!(rows.len(), 1 + 2 * 4);
    // The default workload's shuffles are seeded: both documents list the same samples.
    for row in &rows[1..] {
        let step: usize = row[0].parse().unwrap();
        let position: usize = row[1].parse().unwrap();
        let sample = &batches[step - 1]["samples"][position];
        assert_eq!(row[2], sample["file"].as_str().unwrap());
        assert_eq!(row[3], sample["sample"].to_string());
    }
    // A workload that only checkpoints has no batches to list as CSV.
    dlio_rs(
        &tmp.path,
        &["plan", "workload=llama3_8b", "--output-format=csv"],
    )
    .fails(2)
    .says(&["does not train", "--output-format json"]);
    let doc = document(
        &dlio_rs(
            &tmp.path,
            &[
                "plan",
                "workload=llama3_8b",
                "-n",
                "8",
                "--output-format=json",
            ],
        )
        .ok(),
    );
    assert_eq!(doc["training"], Value::Null);
    assert_eq!(int(&doc, "/checkpoint/files_per_checkpoint"), 16);
}

#[test]
fn formats_are_checked_and_json_is_json_everywhere() {
    let tmp = Scratch::new("machine-formats");
    dlio_rs(&tmp.path, &["workloads", "--output-format=xml"])
        .fails(2)
        .says(&["'xml'", "text, json, csv"]);
    let datasize = |extra: &[&str]| {
        let mut args = strings(&[
            "datasize",
            "workload=unet3d_h100",
            "--max-accelerators=8",
            "--client-host-memory-in-gb=64",
        ]);
        args.extend(strings(extra));
        dlio_rs(&tmp.path, &args)
    };
    let json = datasize(&["--json"]).ok();
    assert_eq!(datasize(&["--output-format=json"]).ok().stdout, json.stdout);
    assert!(document(&json)["num_files_train"].is_u64());
    datasize(&["--output-format=csv"])
        .fails(2)
        .says(&["datasize has no table"]);
    datasize(&["--json", "--output-format=text"])
        .fails(2)
        .says(&["--json is --output-format json"]);
    dlio_rs(&tmp.path, &["audit", &tmp.s("none"), "--output-format=csv"])
        .fails(2)
        .says(&["audit has no table"]);
}
