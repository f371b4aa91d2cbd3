//! `dlio-rs sweep` on a storage of known speed (`storage.throttle`): it finds the known answer,
//! each trial is a valid measurement, a second run continues from the saved trials, and a sweep
//! of other words in the same folder is refused. Its page draws each trial at its count.

use serde_json::Value;

use crate::common::*;

/// Through one 52 MiB/s link, 5 accelerators ask for 50 MiB/s (AU near 100 %) and 6 for
/// 60 MiB/s (below the 90 % threshold): the answer is 5.
/// A workload that deletes its dataset after a run: a sweep keeps it for all its trials.
fn words(tmp: &Scratch) -> Vec<String> {
    with(
        &throttled_sweep_words(tmp, 264),
        &["++workload.dataset.keep_files=False"],
    )
}

fn sweep(tmp: &Scratch, words: &[String]) -> Ran {
    let mut args = strings(&["sweep", "--max-accelerators=12", "-o"]);
    args.push(tmp.s("sweep"));
    args.extend(words.iter().cloned());
    dlio_rs(&tmp.path, &args)
}

#[test]
fn a_sweep_finds_the_known_answer_and_continues_from_its_trials() {
    let tmp = Scratch::new("sweep");
    let ran = sweep(&tmp, &words(&tmp)).ok();
    assert!(
        ran.stdout
            .contains("keeps 5 accelerator(s) above 90 % AU (6 are not)"),
        "{}",
        ran.context()
    );
    assert!(ran.stderr.contains("the dataset is kept for every trial"));
    // Its progress: 1, 12, then at most 4 halvings of 11.
    assert!(
        ran.stderr
            .contains("trial 1: 1 accelerator(s)… (at most 6 trials in all)"),
        "{}",
        ran.context()
    );
    let saved = read_json(&tmp.join("sweep/sweep.json"));
    let trials = at(&saved, "/trials").as_array().unwrap().clone();
    // 1 and 12, then halves: 6, 3, then 4 and 5 (or 5 alone): at most 6 trials, not 12.
    assert!(trials.len() <= 6, "{saved}");
    for trial in &trials {
        let n = int(trial, "/accelerators");
        let au = trial["au_percent"].as_f64().unwrap();
        assert_eq!(trial["passed"], Value::Bool(n <= 5), "{trial}");
        assert!(au >= 90.0 || n > 5, "{trial}");
        // A valid measurement: every byte read crossed the link (the storage under test), and
        // each trial's metric window (21 steps or more) long enough to measure.
        assert_eq!(trial["reasons"], Value::Array(Vec::new()), "{trial}");
        assert_eq!(trial["cache_share"].as_f64(), Some(0.0), "{trial}");
        // 264 files are far from MLPerf's rule on this host's memory: no MLPerf category.
        let report = read_json(&tmp.join(format!("sweep/trial-{n}/report.json")));
        let note = at(&report, "/verdict/category_note")
            .as_str()
            .unwrap()
            .to_string();
        assert!(note.contains("not an MLPerf Storage workload"), "{note}");
        assert_eq!(int(trial, "/bytes_from_storage"), int(trial, "/bytes_read"));
        assert!(tmp.join(format!("sweep/trial-{n}/summary.json")).exists());
    }
    assert_eq!(int(&saved, "/answer/most_passing"), 5);
    // Its page: a bar per trial, the answer marked.
    let page = std::fs::read_to_string(tmp.join("sweep/report.html")).unwrap();
    assert!(page.contains("data-answer=\"5\""));
    assert_eq!(page.matches("data-chart=\"sweep-au\"").count(), 1, "{page}");
    let bars = page.split("data-chart=\"sweep-au\"").nth(1).unwrap();
    let bars = &bars[..bars.find("</svg>").unwrap()];
    assert_eq!(bars.matches("class=\"mark\"").count(), trials.len());
    // Rebuilt from sweep.json by `dlio-rs report`.
    std::fs::remove_file(tmp.join("sweep/report.html")).unwrap();
    dlio_rs(&tmp.path, &["report", &tmp.s("sweep")]).ok();
    let rebuilt = std::fs::read_to_string(tmp.join("sweep/report.html")).unwrap();
    assert_eq!(rebuilt, page);

    // Again: every trial is read back, none is run.
    let again = sweep(&tmp, &words(&tmp)).ok();
    assert!(again
        .stderr
        .contains(&format!("from its {} trial(s)", trials.len())));
    assert!(!again.stderr.contains("trial 1:"), "{}", again.context());
    assert!(again.stdout.contains("keeps 5 accelerator(s)"));
    // For machines: sweep.json's content and the answer as one document, the table on
    // standard error; or the trials as a CSV table.
    let json = sweep(&tmp, &with(&words(&tmp), &["--output-format=json"])).ok();
    assert!(json.stderr.contains("keeps 5 accelerator(s)"));
    let doc = document(&json);
    assert_eq!(doc["command"], "sweep");
    assert_eq!(doc["sweep"], saved);
    assert_eq!(doc["stopped_by"], Value::Null);
    assert!(at(&doc, "/answer_text")
        .as_str()
        .unwrap()
        .starts_with("This storage keeps 5 accelerator(s)"));
    let csv = sweep(&tmp, &with(&words(&tmp), &["--output-format=csv"])).ok();
    let rows = parse_csv(&csv.stdout);
    assert_eq!(rows[0][..3], ["accelerators", "passes", "passed"]);
    assert_eq!(rows.len(), trials.len() + 1);
    let mut counts: Vec<u64> = trials.iter().map(|t| int(t, "/accelerators")).collect();
    counts.sort();
    for (row, n) in rows[1..].iter().zip(counts) {
        assert_eq!(row[0], n.to_string());
        assert_eq!(row[1], (n <= 5).to_string(), "{row:?}");
        let trial = trials
            .iter()
            .find(|t| int(t, "/accelerators") == n)
            .unwrap();
        assert_eq!(row[4].parse::<f64>().unwrap(), num(trial, "/au_percent"));
    }

    // A sweep stopped after its first two trials continues with the third.
    let mut cut = saved.clone();
    cut["trials"] = Value::Array(trials[..2].to_vec());
    cut["answer"] = Value::Null;
    std::fs::write(tmp.join("sweep/sweep.json"), cut.to_string()).unwrap();
    let resumed = sweep(&tmp, &words(&tmp)).ok();
    assert!(
        resumed.stderr.contains("from its 2 trial(s)"),
        "{}",
        resumed.context()
    );
    assert!(resumed.stderr.contains("trial 3:"), "{}", resumed.context());
    assert!(resumed.stdout.contains("keeps 5 accelerator(s)"));

    // Other words in the same folder: refused, naming the file.
    let mut other = words(&tmp);
    other.push("++workload.train.computation_time=0.2".to_string());
    sweep(&tmp, &other)
        .fails(2)
        .says(&["sweep.json holds a sweep of other words"]);
}

/// A checkpoint sweep through a 100 MiB/s link that one rank's saves already nearly fill: with
/// 2 ranks each gets about half, below 90 % of the single rank's: the answer is 1 rank, and each
/// trial's verdict follows its throughput per rank.
#[test]
fn a_checkpoint_sweep_holds_ranks_to_the_single_rank_figure() {
    let tmp = Scratch::new("sweep-checkpoints");
    let mut args = checkpoint_sweep_args(&tmp);
    // A workload with its own output folder: each trial still writes into its own.
    args.push(format!("++workload.output.folder={}", tmp.s("shared")));
    let ran = dlio_rs(&tmp.path, &args).ok();
    assert!(
        ran.stdout
            .contains("keeps 1 accelerator(s) at 90 % or more of the save throughput"),
        "{}",
        ran.context()
    );
    let saved = read_json(&tmp.join("sweep/sweep.json"));
    assert_eq!(at(&saved, "/mode"), "checkpointing");
    let trials = at(&saved, "/trials").as_array().unwrap();
    let first = trials[0]["per_rank_gib_per_second"].as_f64().unwrap();
    assert_eq!(int(&trials[0], "/accelerators"), 1);
    for trial in trials {
        let per_rank = trial["per_rank_gib_per_second"].as_f64().unwrap();
        let total = trial["checkpoint_gib_per_second"].as_f64().unwrap();
        let n = int(trial, "/accelerators") as f64;
        assert!((per_rank * n - total).abs() < 1e-9, "{trial}");
        assert_eq!(
            trial["passed"],
            Value::Bool(per_rank >= 0.9 * first),
            "{trial}"
        );
        // The link bounds every trial: 100 MiB/s is 0.098 GiB/s.
        assert!(total <= 0.1, "{trial}");
        let folder = tmp.join(format!("sweep/trial-{n}"));
        let summary = read_json(&folder.join("summary.json"));
        assert_eq!(int(&summary, "/num_accelerators"), n as u64, "{trial}");
    }
    assert!(!tmp.join("shared").exists());
}

/// Bounds, shares and workloads a sweep cannot work with: exit 2, naming the value, before any
/// trial runs.
#[test]
fn a_sweep_refuses_what_it_cannot_search() {
    let tmp = Scratch::new("sweep-refusals");
    let out = tmp.s("sweep");
    for (args, says) in [
        (vec!["--max-accelerators=4", "--hold=2"], "--hold (2)"),
        (vec!["--max-accelerators=6", "--step=4"], "--step (4)"),
        (
            vec!["--min-accelerators=5", "--max-accelerators=4"],
            "--min-accelerators (5)",
        ),
        (
            vec!["--max-accelerators=2", "++workload.workflow.train=False"],
            "does neither",
        ),
        (
            vec!["--max-accelerators=100000"],
            "--max-accelerators (100000): the training set has",
        ),
        // llama3_70b's checkpoints need replicas of 8 ranks (tensor parallelism 8).
        (
            vec![
                "--max-accelerators=16",
                "--min-accelerators=8",
                "workload=llama3_70b",
                "++workload.workflow.checkpoint=True",
            ],
            "multiples of 8: add --step 8",
        ),
    ] {
        let mut words = strings(&["sweep", "workload=default", "-o", &out]);
        words.extend(strings(&args));
        dlio_rs(&tmp.path, &words).fails(2).says(&[says]);
        assert!(!tmp.join("sweep/trial-1").exists());
    }
}

/// A saved sweep of `trials` (accelerators, AU %, valid), of 1 to 16 accelerators at a 90 %
/// threshold, its answer `most_passing`, in `dir`; its page rebuilt by `dlio-rs report`.
fn forged_sweep_page(tmp: &Scratch, dir: &str, trials: &[(u64, f64, bool)], most: u64) -> String {
    let folder = tmp.join(dir);
    std::fs::create_dir_all(&folder).unwrap();
    let trials: Vec<Value> = trials
        .iter()
        .map(|&(n, au, valid)| {
            serde_json::json!({
                "accelerators": n, "au_percent": au, "passed": au >= 90.0,
                "samples_per_second": 100.0 * n as f64, "mib_per_second": 10.0 * n as f64,
                "bytes_read": 1000, "bytes_from_storage": 1000, "cache_share": 0.0,
                "checkpoint_gib_per_second": null, "per_rank_gib_per_second": null,
                "reasons": if valid { vec![] } else { vec!["page_cache: forged"] },
                "output": format!("trial-{n}"),
            })
        })
        .collect();
    let fewest = trials
        .iter()
        .map(|t| int(t, "/accelerators"))
        .find(|&n| n > most);
    let sweep = serde_json::json!({
        "request": {"words": ["workload=default"], "config_dir": null, "min": null, "max": 16,
                    "precision": 1, "step": 1, "hold": 0.9},
        "processes": 1, "mode": "training", "au_threshold_percent": 90.0, "generated": false,
        "trials": trials,
        "answer": {"most_passing": most, "fewest_failing": fewest},
    });
    std::fs::write(folder.join("sweep.json"), sweep.to_string()).unwrap();
    dlio_rs(&tmp.path, &["report", &folder.display().to_string()]).ok();
    std::fs::read_to_string(folder.join("report.html")).unwrap()
}

/// The sweep's page puts each trial at its count on a numeric axis — log2 for counts that
/// span a factor of 8 or more (1, 2, 3, 4, 8, 16: 3 between 2 and 4, not evenly spaced), linear
/// for others —, a failing trial in another colour than a passing one, said in the legend, the
/// answer ringed.
#[test]
fn the_sweep_page_places_trials_at_their_counts() {
    let tmp = Scratch::new("sweep-page");
    let trials = [
        (1, 99.0, true),
        (2, 98.0, true),
        (3, 97.0, false),
        (4, 95.0, true),
        (8, 91.0, true),
        (16, 60.0, true),
    ];
    let html = forged_sweep_page(&tmp, "log", &trials, 8);
    let chart = svg::chart(&html, "sweep-au");
    let marks = svg::marks(chart);
    assert_eq!(marks.len(), trials.len());
    let place: Vec<(f64, f64)> = marks
        .iter()
        .map(|m| (svg::number(m, "data-x"), svg::number(m, "cx")))
        .collect();
    let per_doubling = (place[5].1 - place[0].1) / 4.0;
    for &(n, cx) in &place {
        assert!(
            (cx - place[0].1 - n.log2() * per_doubling).abs() < 0.2,
            "{place:?}"
        );
    }
    let labels: Vec<String> = svg::ticks(chart, "x")
        .into_iter()
        .map(|t| t.label)
        .collect();
    assert_eq!(labels, ["1", "2", "4", "8", "16"]);
    assert_eq!(svg::ticks(chart, "y").last().unwrap().value, 100.0);
    let fill = |n: f64| svg::attribute(marks[place.iter().position(|p| p.0 == n).unwrap()], "fill");
    assert_ne!(fill(16.0), fill(8.0));
    let legend = svg::legend(chart);
    for said in ["passes", "fails", "not valid", "answer: 8"] {
        assert!(legend.iter().any(|g| g.contains(said)), "{said}");
    }
    assert!(legend
        .iter()
        .any(|g| g.contains("fails") && g.contains(fill(16.0).unwrap())));
    assert_eq!(chart.matches("r=\"8\"").count(), 1);
    // Samples/s against the same axis.
    let samples = svg::chart(&html, "sweep-samples");
    assert_eq!(svg::ticks(samples, "x").len(), 5);
    assert_eq!(svg::overlapping_labels(&html), None);

    // Counts within a factor of 8: linear, each at its value.
    let html = forged_sweep_page(
        &tmp,
        "linear",
        &[(2, 99.0, true), (3, 95.0, true), (5, 80.0, true)],
        3,
    );
    let chart = svg::chart(&html, "sweep-au");
    let place: Vec<(f64, f64)> = svg::marks(chart)
        .iter()
        .map(|m| (svg::number(m, "data-x"), svg::number(m, "cx")))
        .collect();
    let per_one = (place[2].1 - place[0].1) / 3.0;
    assert!((place[1].1 - place[0].1 - per_one).abs() < 0.2, "{place:?}");
    let across = svg::ticks(chart, "x");
    assert!(svg::round_steps(&across) && across.iter().all(|t| t.value.fract() == 0.0));
}
