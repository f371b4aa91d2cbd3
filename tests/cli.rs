//! End-to-end tests of the two command lines, `dlio-rs` and `dlio_benchmark`, run as processes on
//! tiny datasets in fresh temporary folders: the output files DLIO tools parse (and that their
//! numbers agree with each other and with the files on disk), the Hydra files, the error paths
//! (exit code and message), the dataset layout, and the generated files as numpy loads them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::common::*;

/// Relative equality for values computed by the same formula in two places.
fn assert_close(actual: f64, expected: f64, what: &str) {
    let scale = actual.abs().max(expected.abs());
    assert!(
        actual == expected || (actual - expected).abs() <= 1e-9 * scale,
        "{what}: {actual} != {expected} (relative tolerance 1e-9)"
    );
}

/// numpy's `mean` and population `std`.
fn mean_pstdev(values: &[f64]) -> (f64, f64) {
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// DLIO's file layout: `{split}/[{sub}/]{prefix}_{i:0N}_of_{n}.{ext}`, N = digits of n,
/// subfolder `i % subfolders` (zero-padded to its digits) only when there are more than one.
fn data_key(split: &str, prefix: &str, i: u64, n: u64, subfolders: u64, ext: &str) -> String {
    let width = n.to_string().len();
    let name = format!("{prefix}_{i:0width$}_of_{n}.{ext}");
    if subfolders > 1 {
        let sw = subfolders.to_string().len();
        format!("{split}/{:0sw$}/{name}", i % subfolders)
    } else {
        format!("{split}/{name}")
    }
}

fn file_size(path: &Path) -> u64 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .len()
}

/// Every file under `root` (recursively), as paths relative to it with '/' separators.
fn list_files(root: &Path) -> BTreeSet<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            if entry.file_type().unwrap().is_dir() {
                walk(&entry.path(), &rel, out);
            } else {
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, "", &mut out);
    out
}

/// Hidden or temporary files below `root`; not the output folder's lock (`.dlio-rs.lock`), which
/// stays by design, empty once its run ended.
fn leftovers(root: &Path) -> Vec<String> {
    list_files(root)
        .into_iter()
        .filter(|rel| {
            let lock = rel == ".dlio-rs.lock"
                && std::fs::read(root.join(rel)).is_ok_and(|pid| pid.is_empty());
            !lock
        })
        .filter(|rel| {
            rel.split('/')
                .any(|part| part.starts_with('.') || part.ends_with(".tmp"))
        })
        .collect()
}

/// The scalar at `path` of a block-style YAML document as dlio-rs writes it (mappings indented,
/// list items skipped).
fn yaml_get(text: &str, path: &[&str]) -> Option<String> {
    let mut stack: Vec<(usize, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with("- ") {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let Some((key, value)) = trimmed.split_once(':') else {
            continue;
        };
        while stack.last().is_some_and(|(i, _)| *i >= indent) {
            stack.pop();
        }
        stack.push((indent, key.trim().to_string()));
        if stack.len() == path.len() && stack.iter().zip(path).all(|((_, k), p)| k == p) {
            return Some(value.trim().to_string());
        }
    }
    None
}

/// Whitespace-separated tokens of a message, stripped of surrounding punctuation.
fn tokens(text: &str) -> Vec<&str> {
    text.split_whitespace()
        .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric()))
        .collect()
}

/// Steps per epoch: floor(files × samples per file / batch / accelerators).
fn steps_per_epoch(files: u64, spf: u64, batch: u64, world: u64) -> u64 {
    files * spf / batch / world
}

/// Splits a command line as a POSIX shell does for plain words, '...', "..." and backslashes
/// (no expansions).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if let Some(w) = word.take() {
                    words.push(w);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    w.push(c);
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => w.extend(chars.next()),
                        c => w.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).extend(chars.next()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    words
}

/// Runs the "generate the dataset with: dlio-rs run ..." command an error message suggests, as
/// a shell would split it.
fn run_generate_hint(cwd: &Path, failed: &Ran) -> Ran {
    const MARK: &str = "generate the dataset with: ";
    let hint = failed
        .stderr
        .lines()
        .find_map(|l| l.split_once(MARK).map(|(_, rest)| rest.trim().to_string()))
        .unwrap_or_else(|| panic!("no '{MARK}' hint\n{}", failed.context()));
    let mut words = shell_words(&hint);
    assert_eq!(
        words.first().map(String::as_str),
        Some("dlio-rs"),
        "the hint is not a dlio-rs command: {hint}"
    );
    words.remove(0);
    let ran = dlio_rs(cwd, &words);
    assert_eq!(
        ran.code,
        Some(0),
        "the command the error message suggests does not work\n{}",
        ran.context()
    );
    ran
}

// ---------------------------------------------------------------------------------------------
// 1. Generate + train end to end
// ---------------------------------------------------------------------------------------------

/// Checks one rank's `{rank}_output.json` epoch entry and returns its (AU, throughput) for
/// `block` ("block1" or "eval").
fn check_rank_lists(
    out: &Value,
    epoch: &str,
    block: &str,
    steps: usize,
    batch: u64,
    compute_time: f64,
    window: (usize, usize),
) -> (f64, f64) {
    let p = |list: &str| format!("/{epoch}/{list}/{block}");
    let load = nums(out, &p("load"));
    let proc = nums(out, &p("proc"));
    let compute = nums(out, &p("compute"));
    for (name, list) in [("load", &load), ("proc", &proc), ("compute", &compute)] {
        assert_eq!(list.len(), steps, "epoch {epoch} {name}.{block}: {list:?}");
    }
    for i in 0..steps {
        assert!(
            load[i] >= 0.0,
            "epoch {epoch} {block} step {i}: load {}",
            load[i]
        );
        assert!(
            compute[i] >= compute_time - 1e-9,
            "epoch {epoch} {block} step {i}: compute {} < computation time {compute_time}",
            compute[i]
        );
        assert!(
            proc[i] >= load[i] && proc[i] >= compute[i],
            "epoch {epoch} {block} step {i}: proc {} < load {} or compute {}",
            proc[i],
            load[i],
            compute[i]
        );
        assert!(
            (proc[i] - (load[i] + compute[i])).abs() <= 1e-9,
            "epoch {epoch} {block} step {i}: proc {} != load {} + compute {}",
            proc[i],
            load[i],
            compute[i]
        );
    }
    let au = num(out, &p("au"));
    let throughput = num(out, &p("throughput"));
    assert!(
        au > 0.0 && au <= 100.0,
        "epoch {epoch} {block}: AU {au} not in (0, 100]"
    );
    assert!(
        throughput > 0.0,
        "epoch {epoch} {block}: throughput {throughput}"
    );
    // The window formula, with s = exclude_start_steps and e = steps − 1 − exclude_end_steps:
    // AU = 100·Σcompute[s..=e] / T, T = block wall − Σproc outside [s..=e], which must hold at
    // least the proc of the counted steps. Training samples/s = (e − s + 1)·batch / T; eval
    // samples/s = steps·batch / block wall (as DLIO).
    let (exclude_start, exclude_end) = window;
    let last = steps - 1 - exclude_end;
    let window_compute: f64 = compute[exclude_start..=last].iter().sum();
    let window_proc: f64 = proc[exclude_start..=last].iter().sum();
    let outside_proc: f64 = proc.iter().sum::<f64>() - window_proc;
    let t_from_au = 100.0 * window_compute / au;
    assert!(
        t_from_au >= window_proc - 1e-9,
        "epoch {epoch} {block}: counted time {t_from_au} < Σ proc of counted steps {window_proc}"
    );
    let (samples, t_from_throughput, t_expected) = if block == "eval" {
        let samples = steps as f64 * batch as f64;
        (samples, samples / throughput, t_from_au + outside_proc)
    } else {
        let samples = (last + 1 - exclude_start) as f64 * batch as f64;
        (samples, samples / throughput, t_from_au)
    };
    assert!(
        (t_from_throughput - t_expected).abs() <= 1e-9 * t_expected.max(1e-3),
        "epoch {epoch} {block}: {samples} samples / throughput {throughput} = {t_from_throughput} s, \
         but AU {au} implies {t_expected} s"
    );
    (au, throughput)
}

#[test]
fn generate_then_train_writes_consistent_dlio_outputs() {
    let tmp = Scratch::new("e2e");
    let (files, eval_files, batch, batch_eval, world, epochs) = (18u64, 4u64, 4u64, 1u64, 2u64, 2);
    let (record_length, compute_time, eval_time) = (4096u64, 0.002, 0.001);
    let data = tmp.s("data");
    let dataset = strings(&[
        "workload=default",
        &format!("++workload.dataset.data_folder={data}"),
        &format!("++workload.dataset.num_files_train={files}"),
        &format!("++workload.dataset.num_files_eval={eval_files}"),
        "++workload.dataset.record_length_bytes_stdev=1024",
    ]);

    // Generate only: the dataset, and no result files (as DLIO).
    run_quiet(
        &tmp.path,
        world as usize,
        &with(
            &dataset,
            &[
                "++workload.workflow.generate_data=True",
                "++workload.workflow.train=False",
                &format!("++hydra.run.dir={}", tmp.s("gen")),
            ],
        ),
    )
    .ok();
    assert!(
        !tmp.join("gen/summary.json").exists(),
        "generate-only wrote summary.json"
    );
    assert!(
        leftovers(&tmp.join("data")).is_empty(),
        "{:?}",
        leftovers(&tmp.join("data"))
    );

    // Train: hydra words in the middle, to check overrides.yaml keeps the task words in order.
    let out = tmp.join("out");
    let mut words = dataset.clone();
    words.insert(2, format!("++hydra.run.dir={}", out.display()));
    words.extend(strings(&[
        &format!("++workload.train.computation_time={compute_time}"),
        "++hydra.output_subdir=dlio_config",
        &format!("++workload.evaluation.eval_time={eval_time}"),
        &format!("++workload.train.epochs={epochs}"),
    ]));
    let ran = run_quiet(&tmp.path, world as usize, &words).ok();
    // -q leaves out the table, never the verdict.
    assert!(
        ran.stdout.starts_with("Training AU ") && ran.stdout.contains("\nVerdict: "),
        "-q printed to stdout:\n{}",
        ran.stdout
    );
    // The table's header row (a verdict's reason may name samples/s too).
    assert!(!ran.stdout.contains("MiB/s nom."), "{}", ran.stdout);

    for f in [
        "summary.json",
        "0_output.json",
        "1_output.json",
        "0_per_epoch_stats.json",
        "1_per_epoch_stats.json",
        "dlio.log",
        "report.json",
        "dlio_config/config.yaml",
        "dlio_config/overrides.yaml",
        "dlio_config/hydra.yaml",
    ] {
        assert!(out.join(f).is_file(), "{f} missing in {}", out.display());
    }
    assert!(
        !out.join("2_output.json").exists(),
        "more output files than ranks"
    );
    assert!(
        leftovers(&out).is_empty(),
        "temporary files left: {:?}",
        leftovers(&out)
    );

    let steps = steps_per_epoch(files, 1, batch, world);
    let eval_steps = steps_per_epoch(eval_files, 1, batch_eval, world);
    assert_eq!((steps, eval_steps), (2, 2));

    // {rank}_output.json and {rank}_per_epoch_stats.json
    let outputs: Vec<Value> = (0..world)
        .map(|r| read_json(&out.join(format!("{r}_output.json"))))
        .collect();
    let mut au = vec![vec![]; epochs]; // [epoch][rank]
    let mut thr = vec![vec![]; epochs];
    let mut eval_au = vec![vec![]; epochs];
    let mut eval_thr = vec![vec![]; epochs];
    for (r, o) in outputs.iter().enumerate() {
        for e in 0..epochs {
            let key = (e + 1).to_string();
            let (a, t) = check_rank_lists(
                o,
                &key,
                "block1",
                steps as usize,
                batch,
                compute_time,
                (1, 0),
            );
            au[e].push(a);
            thr[e].push(t);
            let (a, t) = check_rank_lists(
                o,
                &key,
                "eval",
                eval_steps as usize,
                batch_eval,
                eval_time,
                (1, 0),
            );
            eval_au[e].push(a);
            eval_thr[e].push(t);
        }
        assert!(
            o.get("3").is_none(),
            "rank {r}: more epochs than configured"
        );
        let stats = read_json(&out.join(format!("{r}_per_epoch_stats.json")));
        for e in 1..=epochs {
            for field in [
                "start",
                "end",
                "duration",
                "block1/start",
                "block1/end",
                "eval/start",
            ] {
                at(&stats, &format!("/{e}/{field}"));
            }
        }
    }

    // summary.json
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(int(&summary, "/num_accelerators"), world);
    assert_eq!(int(&summary, "/epochs"), epochs as u64);
    assert_eq!(int(&summary, "/num_files_train"), files);
    assert_eq!(int(&summary, "/num_files_eval"), eval_files);
    assert_eq!(int(&summary, "/num_samples_per_file"), 1);
    for field in [
        "/start",
        "/end",
        "/hostname",
        "/host_memory_GB",
        "/host_cpu_count",
    ] {
        at(&summary, field);
    }
    for (phase, au, thr) in [("train", &au, &thr), ("eval", &eval_au, &eval_thr)] {
        let m = |k: &str| format!("/metric/{phase}_{k}");
        let au_list = nums(&summary, &m("au_percentage"));
        let thr_list = nums(&summary, &m("throughput_samples_per_second"));
        assert_eq!(au_list.len(), epochs, "{phase} AU per epoch");
        assert_eq!(thr_list.len(), epochs, "{phase} throughput per epoch");
        for e in 0..epochs {
            let (rank_mean, _) = mean_pstdev(&au[e]);
            assert_close(
                au_list[e],
                rank_mean,
                &format!("{phase} AU epoch {}: mean over ranks", e + 1),
            );
            let rank_sum: f64 = thr[e].iter().sum();
            assert_close(
                thr_list[e],
                rank_sum,
                &format!("{phase} throughput epoch {}: sum over ranks", e + 1),
            );
        }
        let (au_mean, au_stdev) = mean_pstdev(&au_list);
        assert_close(
            num(&summary, &m("au_mean_percentage")),
            au_mean,
            &m("au_mean_percentage"),
        );
        assert_close(
            num(&summary, &m("au_stdev_percentage")),
            au_stdev,
            &m("au_stdev_percentage"),
        );
        let (t_mean, t_stdev) = mean_pstdev(&thr_list);
        assert_close(
            num(&summary, &m("throughput_mean_samples_per_second")),
            t_mean,
            &m("throughput_mean_samples_per_second"),
        );
        assert_close(
            num(&summary, &m("throughput_stdev_samples_per_second")),
            t_stdev,
            &m("throughput_stdev_samples_per_second"),
        );
        let mib = record_length as f64 / 1048576.0;
        assert_close(
            num(&summary, &m("io_mean_MB_per_second")),
            t_mean * mib,
            &m("io_mean_MB_per_second"),
        );
        assert_close(
            num(&summary, &m("io_stdev_MB_per_second")),
            t_stdev * mib,
            &m("io_stdev_MB_per_second"),
        );
        let expected = if au_mean >= 90.0 { "success" } else { "fail" };
        assert_eq!(
            at(&summary, &m("au_meet_expectation")).as_str(),
            Some(expected),
            "{phase}: AU mean {au_mean} against the 90% threshold"
        );
    }

    // report.json: bytes really read = the sizes of the files the plan reads (no shuffle, one
    // sample per file: train files 0..steps·batch·world, eval files 0..eval_steps·world).
    let train_key = |i| data_key("train", "img", i, files, 2, "npz");
    let eval_key = |i| data_key("valid", "img", i, eval_files, 2, "npz");
    let read = steps * batch * world;
    let train_bytes: u64 = (0..read)
        .map(|i| file_size(&tmp.join("data").join(train_key(i))))
        .sum();
    let unread_bytes: u64 = (read..files)
        .map(|i| file_size(&tmp.join("data").join(train_key(i))))
        .sum();
    assert!(unread_bytes > 0);
    let eval_bytes: u64 = (0..eval_steps * batch_eval * world)
        .map(|i| file_size(&tmp.join("data").join(eval_key(i))))
        .sum();
    let report = read_json(&out.join("report.json"));
    assert_eq!(int(&report, "/num_accelerators"), world);
    let report_epochs = at(&report, "/epochs").as_array().expect("epochs list");
    assert_eq!(report_epochs.len(), epochs);
    let summary_au = nums(&summary, "/metric/train_au_percentage");
    for (e, ep) in report_epochs.iter().enumerate() {
        assert_eq!(int(ep, "/epoch"), e as u64 + 1);
        assert_eq!(int(ep, "/steps"), steps);
        assert_eq!(int(ep, "/batch_size"), batch);
        assert_eq!(int(ep, "/samples_read"), read);
        assert_eq!(int(ep, "/reads"), read, "one read per sample");
        assert_eq!(int(ep, "/samples_not_read"), files - read);
        assert_eq!(
            int(ep, "/bytes_read"),
            train_bytes,
            "epoch {}: bytes read",
            e + 1
        );
        let (p50, p99, p999) = (num(ep, "/p50_us"), num(ep, "/p99_us"), num(ep, "/p999_us"));
        assert!(
            p50 > 0.0 && p50 <= p99 && p99 <= p999,
            "percentiles {p50} {p99} {p999}"
        );
        assert_close(
            num(ep, "/au_percent"),
            summary_au[e],
            "report AU vs summary AU",
        );
        assert_eq!(
            nums(ep, "/per_rank_au_percent"),
            au[e],
            "per-rank AU vs output.json"
        );
        assert_eq!(
            int(ep, "/eval/samples_read"),
            eval_steps * batch_eval * world
        );
        assert_eq!(
            int(ep, "/eval/bytes_read"),
            eval_bytes,
            "epoch {}: eval bytes read",
            e + 1
        );
    }
    assert_eq!(
        int(&report, "/configuration/dataset/num_files_train"),
        files
    );

    // dlio.log
    let log = std::fs::read_to_string(out.join("dlio.log")).unwrap();
    let au_mean = num(&summary, "/metric/train_au_mean_percentage");
    let line = format!("[METRIC] Training Accelerator Utilization [AU] (%): {au_mean:.4}");
    assert!(log.contains(&line), "dlio.log lacks {line:?}:\n{log}");
    assert!(
        log.contains("[METRIC] Number of Simulated Accelerators: 2"),
        "{log}"
    );

    // Hydra files
    let config = std::fs::read_to_string(out.join("dlio_config/config.yaml")).unwrap();
    assert!(config.starts_with("workload:"), "config.yaml:\n{config}");
    let get = |p: &[&str]| yaml_get(&config, p);
    assert_eq!(
        get(&["workload", "dataset", "num_files_train"]).as_deref(),
        Some("18")
    );
    assert_eq!(get(&["workload", "train", "epochs"]).as_deref(), Some("2"));
    assert_eq!(
        get(&["workload", "dataset", "data_folder"]),
        Some(data.clone())
    );
    assert!(
        !config.contains("hydra"),
        "config.yaml holds only the workload:\n{config}"
    );
    let overrides = std::fs::read_to_string(out.join("dlio_config/overrides.yaml")).unwrap();
    let expected: String = words
        .iter()
        .filter(|w| !w.trim_start_matches('+').starts_with("hydra."))
        .map(|w| format!("- {w}\n"))
        .collect();
    assert_eq!(overrides, expected, "overrides.yaml");
    let hydra = std::fs::read_to_string(out.join("dlio_config/hydra.yaml")).unwrap();
    assert_eq!(
        yaml_get(&hydra, &["hydra", "run", "dir"]),
        Some(out.display().to_string())
    );
    assert_eq!(
        yaml_get(&hydra, &["hydra", "output_subdir"]).as_deref(),
        Some("dlio_config")
    );
}

// ---------------------------------------------------------------------------------------------
// 2. The dlio_benchmark binary, as mlpstorage launches it
// ---------------------------------------------------------------------------------------------

fn write_mine_workload(tmp: &Scratch) -> PathBuf {
    let dir = tmp.join("configs");
    std::fs::create_dir_all(dir.join("workload")).unwrap();
    std::fs::write(
        dir.join("workload/mine.yaml"),
        "# my own workload\nmodel:\n  name: mine\nframework: pytorch\nworkflow:\n  generate_data: False\n  \
         train: True\ndataset:\n  format: npy\n  num_files_train: 12\n  num_samples_per_file: 1\n  \
         record_length_bytes: 1024\ndata_reader:\n  data_loader: pytorch\n  batch_size: 2\n  \
         read_threads: 2\n  file_shuffle: off\ntrain:\n  epochs: 1\n  computation_time: 0.001\n",
    )
    .unwrap();
    dir
}

#[test]
fn dlio_benchmark_takes_hydra_words_config_dir_last_and_accelerators_from_env() {
    let tmp = Scratch::new("dlio-benchmark");
    let configs = write_mine_workload(&tmp);
    let out = tmp.join("out");
    let words = strings(&[
        "workload=mine",
        "++workload.workflow.generate_data=True",
        &format!("++workload.dataset.data_folder={}", tmp.s("data")),
        &format!("++hydra.run.dir={}", out.display()),
        "++hydra.output_subdir=dlio_config",
        &format!("--config-dir={}", configs.display()),
    ]);
    launch(
        DLIO_BENCHMARK,
        &tmp.path,
        &words,
        &[("DLIO_RS_ACCELERATORS", "2")],
    )
    .ok();
    let summary = read_json(&out.join("summary.json"));
    assert_eq!(int(&summary, "/num_accelerators"), 2);
    assert_eq!(int(&summary, "/num_files_train"), 12);
    assert!(out.join("1_output.json").is_file() && !out.join("2_output.json").exists());
    let rank1 = read_json(&out.join("1_output.json"));
    // `data_reader` is DLIO's alias of `reader`: batch 2 is honoured.
    assert_eq!(
        nums(&rank1, "/1/compute/block1").len(),
        3,
        "12 files / batch 2 / 2 ranks"
    );
    let npy: Vec<String> = list_files(&tmp.join("data"))
        .into_iter()
        .filter(|f| f.ends_with(".npy"))
        .collect();
    assert_eq!(npy.len(), 12, "the workload's npy format: {npy:?}");
    let overrides = std::fs::read_to_string(out.join("dlio_config/overrides.yaml")).unwrap();
    assert!(
        !overrides.contains("config-dir"),
        "overrides.yaml: {overrides}"
    );
    assert!(
        overrides.starts_with("- workload=mine\n"),
        "overrides.yaml: {overrides}"
    );
    let hydra = std::fs::read_to_string(out.join("dlio_config/hydra.yaml")).unwrap();
    assert_eq!(
        yaml_get(&hydra, &["hydra", "runtime", "choices", "workload"]).as_deref(),
        Some("mine")
    );

    // `--config-dir DIR` as two words, at the end, training on the data just generated.
    let out2 = tmp.join("out2");
    let words = strings(&[
        "workload=mine",
        &format!("++workload.dataset.data_folder={}", tmp.s("data")),
        &format!("++hydra.run.dir={}", out2.display()),
        "--config-dir",
        &configs.display().to_string(),
    ]);
    launch(DLIO_BENCHMARK, &tmp.path, &words, &[]).ok();
    assert_eq!(
        int(&read_json(&out2.join("summary.json")), "/num_accelerators"),
        1
    );
}

/// A build without the `mpi` feature, told by the environment that it is one of several MPI
/// processes, refuses (an MPI build would start MPI: tests/mpi.rs runs it under mpirun).
#[cfg(not(feature = "mpi"))]
#[test]
fn dlio_benchmark_refuses_mpi_launch_and_bad_accelerator_env() {
    let tmp = Scratch::new("dlio-benchmark-env");
    let configs = write_mine_workload(&tmp);
    let out = tmp.join("out");
    let words = strings(&[
        "workload=mine",
        "++workload.workflow.generate_data=True",
        &format!("++workload.dataset.data_folder={}", tmp.s("data")),
        &format!("++hydra.run.dir={}", out.display()),
        &format!("--config-dir={}", configs.display()),
    ]);
    launch(
        DLIO_BENCHMARK,
        &tmp.path,
        &words,
        &[("OMPI_COMM_WORLD_SIZE", "4")],
    )
    .fails(2)
    .says(&["MPI", "4"]);
    launch(DLIO_BENCHMARK, &tmp.path, &words, &[("PMI_SIZE", "3")])
        .fails(2)
        .says(&["MPI"]);
    launch(
        DLIO_BENCHMARK,
        &tmp.path,
        &words,
        &[("DLIO_RS_ACCELERATORS", "0")],
    )
    .fails(2)
    .says(&["DLIO_RS_ACCELERATORS"]);
    launch(
        DLIO_BENCHMARK,
        &tmp.path,
        &words,
        &[("DLIO_RS_ACCELERATORS", "two")],
    )
    .fails(2)
    .says(&["DLIO_RS_ACCELERATORS"]);
    assert!(
        !out.exists(),
        "a refused launch must not create the output folder"
    );
    assert!(
        !tmp.join("data").exists(),
        "a refused launch must not generate data"
    );
    // A world of one MPI process is a plain run.
    launch(
        DLIO_BENCHMARK,
        &tmp.path,
        &words,
        &[("OMPI_COMM_WORLD_SIZE", "1")],
    )
    .ok();
    assert_eq!(
        int(&read_json(&out.join("summary.json")), "/num_accelerators"),
        1
    );
}

/// The "how to generate" hint of a missing dataset must work for a `--config-dir` workload too.
#[test]
fn missing_data_hint_of_a_config_dir_workload_is_runnable() {
    let tmp = Scratch::new("config-dir-hint");
    let configs = write_mine_workload(&tmp);
    let words = strings(&[
        "workload=mine",
        &format!("++workload.dataset.data_folder={}", tmp.s("data")),
        &format!("++hydra.run.dir={}", tmp.s("out")),
        &format!("--config-dir={}", configs.display()),
    ]);
    let failed = launch(DLIO_BENCHMARK, &tmp.path, &words, &[])
        .fails(2)
        .says(&["generate_data=True", "--config-dir"]);
    run_generate_hint(&tmp.path, &failed);
    launch(DLIO_BENCHMARK, &tmp.path, &words, &[]).ok();
}

// ---------------------------------------------------------------------------------------------
// 3. Subcommands: workloads, config
// ---------------------------------------------------------------------------------------------

#[test]
fn workloads_lists_the_shipped_workloads() {
    let tmp = Scratch::new("workloads");
    let ran = dlio_rs(&tmp.path, &["workloads"]).ok();
    let names: BTreeSet<&str> = ran
        .stdout
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for name in [
        "unet3d_h100",
        "resnet50_a100",
        "cosmoflow_h100",
        "retinanet_b200",
        "flux_b200",
        "dlrm_b200",
        "llama3_8b",
        "default",
    ] {
        assert!(names.contains(name), "{name} not listed:\n{}", ran.stdout);
    }
    // Every listed workload resolves.
    for name in &names {
        let ran = dlio_rs(&tmp.path, &["config", &format!("workload={name}")]).ok();
        assert!(
            ran.stdout.starts_with("workload:"),
            "{name}:\n{}",
            ran.stdout
        );
    }
}

#[test]
fn config_prints_the_resolved_yaml_with_overrides() {
    let tmp = Scratch::new("config");
    let ran = dlio_rs(
        &tmp.path,
        &[
            "config",
            "workload=unet3d_h100",
            "++workload.reader.read_threads=8",
            "++workload.reader.file_shuffle=off",
            "++workload.reader.sample_shuffle=seed",
            "++hydra.run.dir=ignored",
        ],
    )
    .ok();
    let yaml = &ran.stdout;
    assert!(yaml.starts_with("workload:\n"), "{yaml}");
    let get = |p: &[&str]| yaml_get(yaml, p);
    assert_eq!(
        get(&["workload", "reader", "read_threads"]).as_deref(),
        Some("8"),
        "{yaml}"
    );
    // Hydra's grammar: `off` in a word is the string (the enum's name), kept quoted in YAML,
    // where a plain off would be the boolean false.
    assert_eq!(
        get(&["workload", "reader", "file_shuffle"]).as_deref(),
        Some("'off'"),
        "{yaml}"
    );
    assert_eq!(
        get(&["workload", "reader", "sample_shuffle"]).as_deref(),
        Some("seed"),
        "{yaml}"
    );
    assert_eq!(
        get(&["workload", "dataset", "format"]).as_deref(),
        Some("npz"),
        "{yaml}"
    );
    assert!(
        !yaml.contains("hydra"),
        "hydra words do not reach the workload:\n{yaml}"
    );
    // Unchanged without the override.
    let plain = dlio_rs(&tmp.path, &["config", "workload=unet3d_h100"]).ok();
    assert_ne!(
        yaml_get(&plain.stdout, &["workload", "reader", "read_threads"]).as_deref(),
        Some("8")
    );
    // A quoted 'off' is the string, also valid; `yes` is true, which no shuffle mode is.
    dlio_rs(
        &tmp.path,
        &[
            "config",
            "workload=default",
            "++workload.reader.file_shuffle='off'",
        ],
    )
    .ok();
    dlio_rs(
        &tmp.path,
        &[
            "config",
            "workload=default",
            "++workload.reader.file_shuffle=yes",
        ],
    )
    .fails(2)
    .says(&["workload.reader.file_shuffle", "off, seed, random"]);
    // Deleting and adding keys.
    let ran = dlio_rs(
        &tmp.path,
        &[
            "config",
            "workload=default",
            "~workload.evaluation",
            "+workload.train.seed=7",
        ],
    )
    .ok();
    assert_eq!(
        yaml_get(&ran.stdout, &["workload", "train", "seed"]).as_deref(),
        Some("7")
    );
    assert_eq!(
        yaml_get(&ran.stdout, &["workload", "evaluation", "eval_time"]),
        None
    );
    // Unknown keys: a warning naming the key, with the key it most likely meant when one is
    // close, or an error with --strict.
    let unknown = [
        "workload=default",
        "++workload.dataset.colour=blue",
        "++workload.reader.odirct=True",
        "++workload.train.batch_size=2",
    ];
    let ran = dlio_rs(&tmp.path, &with(&strings(&["config"]), &unknown)).ok();
    assert_eq!(
        ran.stderr,
        "warning: unknown configuration key workload.dataset.colour\n\
         warning: unknown configuration key workload.reader.odirct; did you mean \
         workload.reader.odirect?\n\
         warning: unknown configuration key workload.train.batch_size; did you mean \
         workload.reader.batch_size?\n",
        "{}",
        ran.context()
    );
    let ran = dlio_rs(
        &tmp.path,
        &with(&strings(&["config", "--strict"]), &unknown),
    )
    .fails(2);
    assert_eq!(
        ran.stderr,
        "error: unknown configuration keys (rejected by --strict):\n  \
         workload.dataset.colour\n  \
         workload.reader.odirct; did you mean workload.reader.odirect?\n  \
         workload.train.batch_size; did you mean workload.reader.batch_size?\n",
        "{}",
        ran.context()
    );
}

/// Words that exercise the YAML a workload file is written in: strings that read as numbers or
/// booleans when unquoted, a mapping, a list, a deleted section and an added key.
const TRICKY_WORDS: &[&str] = &[
    "++workload.dataset.file_prefix='017'",
    "++workload.model.name='True'",
    "++workload.dataset.data_folder='data: #x'",
    "++workload.train.computation_time={type: uniform, min: 0.1, max: 0.3}",
    "++workload.dataset.record_dims=[64, 64]",
    "~workload.evaluation",
    "+workload.train.seed=7",
];

#[test]
fn config_workload_file_runs_as_the_same_workload_from_config_dir() {
    let tmp = Scratch::new("workload-file");
    std::fs::create_dir_all(tmp.join("cd/workload")).unwrap();
    let mut cases: Vec<Vec<String>> = dlio_rs(&tmp.path, &["workloads"])
        .ok()
        .stdout
        .lines()
        .map(|line| vec![format!("workload={}", line.split(' ').next().unwrap())])
        .collect();
    cases.push(with(&strings(&["workload=default"]), TRICKY_WORDS));
    assert!(cases.len() > 20, "{cases:?}");
    for words in cases {
        let args = |first: &[&str]| -> Vec<String> {
            strings(first)
                .into_iter()
                .chain(words.iter().cloned())
                .collect()
        };
        let original = dlio_rs(&tmp.path, &args(&["config"])).ok();
        let file = dlio_rs(&tmp.path, &args(&["config", "--workload-file"])).ok();
        assert!(!file.stdout.contains("\nworkload:"), "{}", file.stdout);
        std::fs::write(tmp.join("cd/workload/saved.yaml"), &file.stdout).unwrap();
        let again = dlio_rs(
            &tmp.path,
            &["config", "--config-dir", &tmp.s("cd"), "workload=saved"],
        )
        .ok();
        assert_eq!(again.stdout, original.stdout, "{words:?}");
        assert_eq!(again.stderr, "", "{words:?}");
    }
}

#[test]
fn cache_options_stand_for_their_keys_and_refuse_a_word_for_the_same_key() {
    let tmp = Scratch::new("cache-options");
    // Every subcommand that takes words takes the options, and its help names the keys.
    for command in ["run", "config", "plan", "datasize", "sweep"] {
        let help = dlio_rs(&tmp.path, &[command, "--help"]).ok().stdout;
        for needle in [
            "--odirect",
            "(the same as ++workload.reader.odirect=True)",
            "--page-cache <MODE>",
            "(the same as ++workload.reader.page_cache=MODE)",
            "make the run NOT VALID",
            "[possible values: keep, drop_before_epoch, evict_after_read]",
        ] {
            assert!(help.contains(needle), "{command} --help: {needle}\n{help}");
        }
    }
    for (options, words) in [
        (&["--odirect"][..], &["++workload.reader.odirect=True"][..]),
        (
            &["--page-cache", "evict_after_read"],
            &["++workload.reader.page_cache=evict_after_read"],
        ),
        (
            &["--odirect", "--page-cache=drop_before_epoch"],
            &[
                "++workload.reader.odirect=True",
                "++workload.reader.page_cache=drop_before_epoch",
            ],
        ),
    ] {
        let by_options = dlio_rs(
            &tmp.path,
            &with(&strings(&["config", "workload=default"]), options),
        )
        .ok();
        let by_words = dlio_rs(
            &tmp.path,
            &with(&strings(&["config", "workload=default"]), words),
        )
        .ok();
        assert_eq!(by_options.stdout, by_words.stdout, "{options:?}");
    }
    for (args, said) in [
        (
            &["--odirect", "++workload.reader.odirect=False"][..],
            "error: --odirect and the word '++workload.reader.odirect=False' both name \
             workload.reader.odirect: give one of them\n",
        ),
        (
            &["~workload.reader.page_cache", "--page-cache", "keep"],
            "error: --page-cache keep and the word '~workload.reader.page_cache' both name \
             workload.reader.page_cache: give one of them\n",
        ),
    ] {
        let ran = dlio_rs(
            &tmp.path,
            &with(&strings(&["config", "workload=default"]), args),
        )
        .fails(2);
        assert_eq!(ran.stderr, said);
    }
    dlio_rs(
        &tmp.path,
        &["config", "workload=default", "--page-cache", "evict"],
    )
    .fails(2)
    .says(&[
        "invalid value 'evict' for '--page-cache <MODE>'",
        "[possible values: keep, drop_before_epoch, evict_after_read]",
    ]);
}

#[test]
fn a_workload_file_with_an_unknown_section_is_refused_naming_it() {
    let tmp = Scratch::new("workload-sections");
    std::fs::create_dir_all(tmp.join("cd/workload")).unwrap();
    // `config`'s own output, under its `workload:` root, is the likeliest such file.
    let printed = dlio_rs(&tmp.path, &["config", "workload=default"]).ok();
    std::fs::write(tmp.join("cd/workload/printed.yaml"), &printed.stdout).unwrap();
    let path = tmp.join("cd/workload/printed.yaml");
    for command in ["config", "run"] {
        let ran = dlio_rs(
            &tmp.path,
            &[command, "--config-dir", &tmp.s("cd"), "workload=printed"],
        )
        .fails(2);
        assert_eq!(
            ran.stderr,
            format!(
                "error: workload 'printed': {} has its sections under a top-level 'workload:' \
                 key, as `dlio-rs config` prints a configuration; a workload file holds the \
                 sections themselves (model:, dataset:, reader:, …) at its top level. Write it \
                 with `dlio-rs config --workload-file WORDS... > {}`, or delete its 'workload:' \
                 line and unindent the rest (valid top-level sections: checkpoint, data_reader, \
                 dataset, evaluation, framework, metric, model, output, profiling, reader, \
                 storage, train, workflow)\n",
                path.display(),
                path.display()
            ),
            "{}",
            ran.context()
        );
    }
    std::fs::write(
        tmp.join("cd/workload/typo.yaml"),
        "dataset:\n  num_files_train: 4\nreadr:\n  batch_size: 2\n",
    )
    .unwrap();
    dlio_rs(
        &tmp.path,
        &["config", "--config-dir", &tmp.s("cd"), "workload=typo"],
    )
    .fails(2)
    .says(&[&format!(
        "{} has an unknown top-level section 'readr' (did you mean reader?); valid \
             top-level sections are checkpoint, data_reader, dataset",
        tmp.join("cd/workload/typo.yaml").display()
    )]);
    // The words may still add a section dlio-rs does not know: a warning, as for any key.
    std::fs::write(
        tmp.join("cd/workload/fine.yaml"),
        "dataset:\n  num_files_train: 4\n",
    )
    .unwrap();
    let ran = dlio_rs(
        &tmp.path,
        &[
            "config",
            "--config-dir",
            &tmp.s("cd"),
            "workload=fine",
            "++workload.foo.x=1",
        ],
    )
    .ok();
    assert_eq!(
        ran.stderr,
        "warning: unknown configuration key workload.foo\n"
    );
}

// ---------------------------------------------------------------------------------------------
// 4. Bad input: exit code and message
// ---------------------------------------------------------------------------------------------

/// The words of a tiny default-workload run on `tmp/data`, output to `tmp/<out>`.
fn tiny(tmp: &Scratch, out: &str, files: u64) -> Vec<String> {
    strings(&[
        "workload=default",
        &format!("++workload.dataset.data_folder={}", tmp.s("data")),
        &format!("++workload.dataset.num_files_train={files}"),
        "++workload.dataset.num_files_eval=0",
        "++workload.workflow.evaluation=False",
        "++workload.train.computation_time=0.001",
        "++workload.train.epochs=1",
        &format!("++hydra.run.dir={}", tmp.s(out)),
    ])
}

fn generate(tmp: &Scratch, words: &[String]) {
    run_quiet(
        &tmp.path,
        1,
        &with(
            words,
            &[
                "++workload.workflow.generate_data=True",
                "++workload.workflow.train=False",
            ],
        ),
    )
    .ok();
}

#[test]
fn bad_words_and_values_are_usage_errors_before_any_side_effect() {
    let tmp = Scratch::new("bad-words");
    let base = tiny(&tmp, "out", 8);
    let cases: &[(&[&str], &[&str])] = &[
        (&["workload=unet3d_h10"], &["unet3d_h10", "unet3d_h100"]),
        (&["++workload.dataset"], &["++workload.dataset"]),
        (&["workload..x=1"], &["workload..x=1"]),
        (
            &["dataset.format=npz"],
            &["dataset.format=npz", "workload."],
        ),
        (
            &["++workload.dataset.format=npzz"],
            &["workload.dataset.format", "npzz", "npz, npy"],
        ),
        (
            &["++workload.reader.batch_size=0"],
            &["workload.reader.batch_size"],
        ),
        (
            &["++workload.train.epochs=two"],
            &["workload.train.epochs", "two"],
        ),
        (
            &["workload.dataset.colour=blue"],
            &["workload.dataset.colour", "++workload.dataset.colour"],
        ),
        (
            &["--strict", "++workload.dataset.colour=blue"],
            &["workload.dataset.colour"],
        ),
        (
            &["++workload.dataset.compression=bz2"],
            &["workload.dataset.compression", "bz2", "npz", "none"],
        ),
        (
            // A checkpoint geometry DLIO refuses: fewer layers than pipeline stages.
            &[
                "++workload.workflow.checkpoint=True",
                "++workload.model.type=transformer",
                "++workload.model.num_layers=2",
                "++workload.model.parallelism.pipeline=4",
            ],
            &[
                "workload.model.num_layers",
                "workload.model.parallelism.pipeline",
            ],
        ),
    ];
    for (extra, needles) in cases {
        let mut args = vec!["run".to_string(), "-q".into()];
        let (options, words): (Vec<&str>, Vec<&str>) =
            extra.iter().partition(|w| w.starts_with("--"));
        args.extend(options.iter().map(|w| w.to_string()));
        args.extend(with(&base, &words));
        dlio_rs(&tmp.path, &args).fails(2).says(needles);
    }
    let mut zero = vec![
        "run".to_string(),
        "-q".into(),
        "--accelerators".into(),
        "0".into(),
    ];
    zero.extend(base.iter().cloned());
    dlio_rs(&tmp.path, &zero).fails(2).says(&["accelerators"]);
    assert!(
        !tmp.join("out").exists(),
        "a configuration error created the output folder"
    );
    assert!(!tmp.join("data").exists());
}

#[test]
fn unknown_key_warns_and_runs_but_strict_rejects_it() {
    let tmp = Scratch::new("unknown-key");
    let words = with(
        &tiny(&tmp, "out", 8),
        &[
            "++workload.workflow.generate_data=True",
            "++workload.dataset.colour=blue",
            "++workload.reader.odirct=False",
        ],
    );
    let mut args = strings(&["run"]);
    args.extend(words.iter().cloned());
    let ran = dlio_rs(&tmp.path, &args).ok();
    let warnings: Vec<&str> = ran
        .stderr
        .lines()
        .filter(|l| l.starts_with("warning: unknown"))
        .collect();
    assert_eq!(
        warnings,
        [
            "warning: unknown configuration key workload.dataset.colour (ignored; --strict \
             rejects it)",
            "warning: unknown configuration key workload.reader.odirct (ignored; --strict \
             rejects it); did you mean workload.reader.odirect?"
        ],
        "{}",
        ran.context()
    );
    assert!(tmp.join("out/summary.json").is_file());
    let log = std::fs::read_to_string(tmp.join("out/dlio.log")).unwrap();
    assert!(
        log.contains("unknown configuration key workload.dataset.colour ignored\n"),
        "dlio.log:\n{log}"
    );
    assert!(
        log.contains(
            "unknown configuration key workload.reader.odirct ignored; did you mean \
             workload.reader.odirect?\n"
        ),
        "dlio.log:\n{log}"
    );

    let mut strict = strings(&["run", "-q", "--strict"]);
    strict.extend(with(
        &tiny(&tmp, "strict-out", 8),
        &["++workload.dataset.colour=blue"],
    ));
    dlio_rs(&tmp.path, &strict)
        .fails(2)
        .says(&["workload.dataset.colour", "strict"]);
    assert!(!tmp.join("strict-out").exists());
}

#[test]
fn missing_data_folder_says_how_to_generate_and_the_hint_works() {
    let tmp = Scratch::new("missing-data");
    let words = tiny(&tmp, "out", 8);
    let failed = run_quiet(&tmp.path, 1, &words)
        .fails(2)
        .says(&[&tmp.s("data"), "generate_data=True"]);
    run_generate_hint(&tmp.path, &failed);
    assert_eq!(
        list_files(&tmp.join("data")).len(),
        8,
        "the hint generates the dataset"
    );
    run_quiet(&tmp.path, 1, &words).ok();
    assert!(tmp.join("out/summary.json").is_file());
}

/// The hint is a command line to paste into a shell: words with spaces must be quoted.
#[test]
fn missing_data_hint_quotes_words_for_the_shell() {
    let tmp = Scratch::new("hint-quoting");
    let words = with(
        &tiny(&tmp, "out", 8),
        &["++workload.train.computation_time={mean: 0.001}"],
    );
    let failed = run_quiet(&tmp.path, 1, &words)
        .fails(2)
        .says(&["generate_data=True"]);
    run_generate_hint(&tmp.path, &failed);
    run_quiet(&tmp.path, 1, &words).ok();
}

#[test]
fn too_few_files_is_a_usage_error_with_both_counts() {
    let tmp = Scratch::new("too-few");
    let words = tiny(&tmp, "out", 16);
    generate(&tmp, &words);
    let last = tmp
        .join("data")
        .join(data_key("train", "img", 15, 16, 2, "npz"));
    std::fs::remove_file(&last).unwrap();
    let ran = run_quiet(&tmp.path, 2, &words).fails(2).says(&["generate"]);
    let toks = tokens(&ran.stderr);
    assert!(
        toks.contains(&"16") && toks.contains(&"15"),
        "the message should give the expected count 16 and the found count 15\n{}",
        ran.context()
    );
    assert!(!tmp.join("out/summary.json").exists());
}

/// Offset of the first byte of the `x` array's data inside an npz written by dlio-rs.
fn npz_x_data_offset(bytes: &[u8]) -> usize {
    let magic = bytes
        .windows(6)
        .position(|w| w == b"\x93NUMPY")
        .expect("an npy header in the npz");
    assert_eq!(bytes[magic + 6], 1, "npy format version 1");
    let header_len = u16::from_le_bytes([bytes[magic + 8], bytes[magic + 9]]) as usize;
    magic + 10 + header_len
}

#[test]
fn damaged_npz_files_fail_the_run_naming_the_file() {
    let tmp = Scratch::new("damaged");
    let words = tiny(&tmp, "out", 16);
    generate(&tmp, &words);

    // Truncated to half its size.
    let victim = tmp
        .join("data")
        .join(data_key("train", "img", 5, 16, 2, "npz"));
    let size = file_size(&victim);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&victim)
        .and_then(|f| f.set_len(size / 2))
        .unwrap();
    run_quiet(&tmp.path, 2, &words)
        .fails(1)
        .says(&[&victim.display().to_string()]);

    // Regenerated, then bytes flipped inside x's data: the zip CRC catches it (`--verify` checks
    // checksums on every read, as numpy does).
    generate(&tmp, &words);
    assert_eq!(file_size(&victim), size);
    let verify = |words: &[String]| {
        let mut args = strings(&["run", "-q", "--verify", "--accelerators", "2"]);
        args.extend(words.iter().cloned());
        dlio_rs(&tmp.path, &args)
    };
    verify(&words).ok();
    let victim = tmp
        .join("data")
        .join(data_key("train", "img", 10, 16, 2, "npz"));
    let mut bytes = std::fs::read(&victim).unwrap();
    let start = npz_x_data_offset(&bytes) + 100;
    for b in &mut bytes[start..start + 4] {
        *b ^= 0xA5;
    }
    std::fs::write(&victim, &bytes).unwrap();
    verify(&words)
        .fails(1)
        .says(&[&victim.display().to_string(), "CRC"]);
}

/// `native_dali` over tfrecord finds its records through DLIO's index files, as DALI does: a
/// missing index, one that lists another number of records than the dataset has per file, or one
/// that is not `offset length` lines fails the run (exit 1), naming the index file.
#[test]
fn native_dali_names_a_missing_or_damaged_tfrecord_index() {
    let tmp = Scratch::new("native-dali-index");
    let words = with(
        &tiny(&tmp, "out", 4),
        &[
            "++workload.dataset.format=tfrecord",
            "++workload.dataset.num_samples_per_file=3",
            "++workload.dataset.record_length_bytes=4096",
            "++workload.dataset.record_length_bytes_stdev=0",
            "++workload.reader.data_loader=native_dali",
            "++workload.reader.batch_size=2",
        ],
    );
    generate(&tmp, &words);
    run_quiet(&tmp.path, 1, &words).ok();
    let index = tmp.join("data").join("index/train/img_1_of_4.tfrecord.idx");
    let clean = std::fs::read_to_string(&index).unwrap();
    assert_eq!(clean.lines().count(), 3, "{clean}");
    let two_records: String = clean.lines().take(2).map(|l| format!("{l}\n")).collect();
    for (damage, says) in [
        (
            None,
            vec![
                "cannot read the DALI index file",
                "generate the dataset again",
            ],
        ),
        (
            Some(two_records),
            vec!["lists 2 records, the dataset has 3 per file"],
        ),
        (
            Some("0 100\nnot a line\n".to_string()),
            vec!["line 2 is \"not a line\", not \"offset length\""],
        ),
    ] {
        match &damage {
            None => std::fs::remove_file(&index).unwrap(),
            Some(text) => std::fs::write(&index, text).unwrap(),
        }
        let mut says = says;
        says.push("index/train/img_1_of_4.tfrecord.idx");
        run_quiet(&tmp.path, 1, &words).fails(1).says(&says);
        std::fs::write(&index, &clean).unwrap();
    }
    run_quiet(&tmp.path, 1, &words).ok();
}

#[test]
fn total_training_steps_caps_steps_and_too_many_is_a_usage_error() {
    let tmp = Scratch::new("total-steps");
    let words = tiny(&tmp, "out", 16);
    generate(&tmp, &words);
    // 16 files / batch 4 / 2 ranks = 2 steps available.
    run_quiet(
        &tmp.path,
        2,
        &with(&words, &["++workload.train.total_training_steps=3"]),
    )
    .fails(2)
    .says(&["total_training_steps", "3", "2"]);
    run_quiet(
        &tmp.path,
        2,
        &with(&words, &["++workload.train.total_training_steps=1"]),
    )
    .ok();
    for r in 0..2 {
        let o = read_json(&tmp.join(format!("out/{r}_output.json")));
        assert_eq!(
            nums(&o, "/1/compute/block1").len(),
            1,
            "rank {r}: capped at 1 step"
        );
    }
    let report = read_json(&tmp.join("out/report.json"));
    assert_eq!(int(&report, "/epochs/0/samples_read"), 8);
    assert_eq!(int(&report, "/epochs/0/samples_not_read"), 8);
    // Fewer samples than one batch per rank.
    run_quiet(&tmp.path, 8, &words)
        .fails(2)
        .says(&["num_files_train"]);
}

// ---------------------------------------------------------------------------------------------
// 5. Uneven division of files among ranks
// ---------------------------------------------------------------------------------------------

#[test]
fn uneven_split_reads_whole_batches_on_every_rank() {
    let tmp = Scratch::new("uneven");
    let (files, batch, world, epochs) = (13u64, 2u64, 3u64, 2usize);
    let words = strings(&[
        "workload=default",
        &format!("++workload.dataset.data_folder={}", tmp.s("data")),
        &format!("++workload.dataset.num_files_train={files}"),
        "++workload.dataset.num_files_eval=0",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.dataset.record_length_bytes_stdev=512",
        "++workload.workflow.evaluation=False",
        &format!("++workload.reader.batch_size={batch}"),
        "++workload.reader.read_threads=2",
        "++workload.train.computation_time=0.001",
        &format!("++workload.train.epochs={epochs}"),
        "++workload.workflow.generate_data=True",
        &format!("++hydra.run.dir={}", tmp.s("out")),
    ]);
    run_quiet(&tmp.path, world as usize, &words).ok();
    let steps = steps_per_epoch(files, 1, batch, world);
    assert_eq!(steps, 2);
    for r in 0..world {
        let o = read_json(&tmp.join(format!("out/{r}_output.json")));
        for e in 1..=epochs {
            check_rank_lists(
                &o,
                &e.to_string(),
                "block1",
                steps as usize,
                batch,
                0.001,
                (1, 0),
            );
        }
    }
    assert!(!tmp.join(format!("out/{world}_output.json")).exists());
    let summary = read_json(&tmp.join("out/summary.json"));
    assert_eq!(int(&summary, "/num_accelerators"), world);
    let read = steps * batch * world;
    let bytes: u64 = (0..read)
        .map(|i| {
            file_size(
                &tmp.join("data")
                    .join(data_key("train", "img", i, files, 0, "npz")),
            )
        })
        .sum();
    let report = read_json(&tmp.join("out/report.json"));
    for e in 0..epochs {
        let ep = &at(&report, "/epochs")[e];
        assert_eq!(int(ep, "/samples_read"), 12);
        assert_eq!(int(ep, "/samples_not_read"), 1);
        assert_eq!(int(ep, "/steps"), steps);
        assert_eq!(
            int(ep, "/bytes_read"),
            bytes,
            "epoch {}: the last file is not read",
            e + 1
        );
    }

    // Seeded sample shuffle: still 12 distinct samples (one whole file left out), and the same
    // plan, so the same bytes, in a second run with the same seed.
    let sizes: Vec<u64> = (0..files)
        .map(|i| {
            file_size(
                &tmp.join("data")
                    .join(data_key("train", "img", i, files, 0, "npz")),
            )
        })
        .collect();
    let total: u64 = sizes.iter().sum();
    let shuffled = |out: &str| -> Vec<u64> {
        let mut words = with(&words, &["++workload.reader.sample_shuffle=seed"]);
        words.retain(|w| !w.contains("generate_data") && !w.contains("hydra.run.dir"));
        words.push(format!("++hydra.run.dir={}", tmp.s(out)));
        run_quiet(&tmp.path, world as usize, &words).ok();
        let report = read_json(&tmp.join(out).join("report.json"));
        (0..epochs)
            .map(|e| {
                let ep = &at(&report, "/epochs")[e];
                assert_eq!(int(ep, "/samples_read"), 12);
                assert_eq!(int(ep, "/samples_not_read"), 1);
                let bytes = int(ep, "/bytes_read");
                assert!(
                    sizes.contains(&(total - bytes)),
                    "epoch {}: {bytes} bytes read is not all files but one ({sizes:?})",
                    e + 1
                );
                bytes
            })
            .collect()
    };
    assert_eq!(
        shuffled("seed-a"),
        shuffled("seed-b"),
        "seeded plans repeat"
    );
}

#[test]
fn samples_per_file_eval_schedule_window_and_output_folder() {
    let tmp = Scratch::new("options");
    let (files, spf, batch, eval_files, epochs) = (8u64, 3u64, 2u64, 2u64, 3usize);
    let custom = tmp.join("custom");
    let words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        &format!("++workload.dataset.data_folder={}", tmp.s("data")),
        &format!("++workload.dataset.num_files_train={files}"),
        &format!("++workload.dataset.num_files_eval={eval_files}"),
        &format!("++workload.dataset.num_samples_per_file={spf}"),
        &format!("++workload.reader.batch_size={batch}"),
        "++workload.reader.read_threads=0",
        "++workload.train.computation_time={mean: 0.002}",
        "++workload.evaluation.eval_time={type: uniform, min: 0.001, max: 0.002}",
        &format!("++workload.train.epochs={epochs}"),
        "++workload.evaluation.eval_after_epoch=2",
        "++workload.output.metric.exclude_start_steps=2",
        "++workload.output.metric.exclude_end_steps=3",
        &format!("++workload.output.folder={}", custom.display()),
        &format!("++hydra.run.dir={}", tmp.s("hydra-dir")),
    ]);
    run_quiet(&tmp.path, 1, &words).ok();
    // Results go to workload.output.folder; Hydra's files stay in hydra.run.dir, as in DLIO.
    assert!(custom.join("summary.json").is_file());
    assert!(!tmp.join("hydra-dir/summary.json").exists());
    assert!(tmp.join("hydra-dir/.hydra/config.yaml").is_file());
    assert!(!custom.join(".hydra").exists());
    // Words that need YAML quoting are quoted in overrides.yaml.
    let overrides = std::fs::read_to_string(tmp.join("hydra-dir/.hydra/overrides.yaml")).unwrap();
    assert!(
        overrides.contains("\n- '++workload.train.computation_time={mean: 0.002}'\n"),
        "overrides.yaml:\n{overrides}"
    );
    assert_eq!(overrides.lines().count(), words.len() - 1, "{overrides}");

    let steps = steps_per_epoch(files, spf, batch, 1);
    assert_eq!(steps, 12);
    let o = read_json(&custom.join("0_output.json"));
    for e in 1..=epochs {
        let key = e.to_string();
        check_rank_lists(&o, &key, "block1", steps as usize, batch, 0.002, (2, 3));
        // Evaluation after epoch 2 and every epoch after it: 2 files × 3 samples, batch 1.
        if e >= 2 {
            check_rank_lists(
                &o,
                &key,
                "eval",
                (eval_files * spf) as usize,
                1,
                0.001,
                (2, 3),
            );
        } else {
            assert!(
                o.pointer("/1/compute/eval").is_none(),
                "no evaluation after epoch 1"
            );
        }
    }
    let summary = read_json(&custom.join("summary.json"));
    assert_eq!(nums(&summary, "/metric/train_au_percentage").len(), epochs);
    assert_eq!(
        nums(&summary, "/metric/eval_au_percentage").len(),
        epochs - 1
    );
    // Every sample read reads its whole npz file.
    let file_bytes: u64 = (0..files)
        .map(|i| {
            file_size(
                &tmp.join("data")
                    .join(data_key("train", "img", i, files, 2, "npz")),
            )
        })
        .sum();
    let report = read_json(&custom.join("report.json"));
    for e in 0..epochs {
        let ep = &at(&report, "/epochs")[e];
        assert_eq!(int(ep, "/samples_read"), files * spf);
        assert_eq!(int(ep, "/reads"), files * spf);
        assert_eq!(int(ep, "/bytes_read"), file_bytes * spf);
        assert_eq!(ep.get("eval").is_some(), e >= 1, "epoch {}: eval", e + 1);
    }

    // Neither folder set: Hydra's default, hydra_log/<model>/<date>-<time> under the cwd.
    let mut words = words;
    words.retain(|w| !w.contains("output.folder") && !w.contains("hydra.run.dir"));
    words.retain(|w| !w.contains("generate_data"));
    run_quiet(&tmp.path, 1, &words).ok();
    let runs: Vec<PathBuf> = std::fs::read_dir(tmp.join("hydra_log/default"))
        .expect("hydra_log/default under the working folder")
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].join("summary.json").is_file());
}

// ---------------------------------------------------------------------------------------------
// 6. Generation: names, subfolders, no temporary files
// ---------------------------------------------------------------------------------------------

/// Every folder under `root` (recursively), as paths relative to it.
fn list_folders(root: &Path) -> BTreeSet<String> {
    fn walk(dir: &Path, prefix: &str, out: &mut BTreeSet<String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                let name = entry.file_name().to_string_lossy().into_owned();
                let rel = match prefix {
                    "" => name,
                    _ => format!("{prefix}/{name}"),
                };
                walk(&entry.path(), &rel, out);
                out.insert(rel);
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, "", &mut out);
    out
}

/// DLIO's generation makes `train/` and `valid/`, and each split's subfolders when it has more
/// than one, whether files go there or not (data_generator.generate, rank 0: one create_node
/// each); TFRecord's generator adds `index/<split>/` as it writes each file's DALI index, and
/// indexed binary's writes `.off.idx` and `.sz.idx` beside each file. A dlio-rs dataset has
/// exactly that tree for every format, so that DLIO, which lists `valid/` even when it has nothing
/// to evaluate, trains on it.
#[test]
fn generation_makes_dlio_s_tree_for_every_format_empty_splits_included() {
    let tmp = Scratch::new("dlio-tree");
    for &format in FORMATS {
        for (train_subfolders, eval_subfolders) in [(2u64, 3u64), (0, 0)] {
            let data = tmp.join(format!("{format}-{train_subfolders}"));
            let words = strings(&[
                "workload=default",
                &format!("++workload.dataset.format={format}"),
                &format!("++workload.dataset.data_folder={}", data.display()),
                "++workload.dataset.num_files_train=4",
                "++workload.dataset.num_files_eval=0",
                &format!("++workload.dataset.num_subfolders_train={train_subfolders}"),
                &format!("++workload.dataset.num_subfolders_eval={eval_subfolders}"),
                "++workload.dataset.num_samples_per_file=2",
                "++workload.dataset.record_length_bytes=4096",
                "++workload.workflow.generate_data=True",
                "++workload.workflow.train=False",
                &format!("++hydra.run.dir={}", tmp.s("out")),
            ]);
            run_quiet(&tmp.path, 2, &words).ok();
            let mut folders: BTreeSet<String> = ["train", "valid"].map(String::from).into();
            for (split, subfolders) in [("train", train_subfolders), ("valid", eval_subfolders)] {
                if subfolders > 1 {
                    let width = subfolders.to_string().len();
                    folders.extend((0..subfolders).map(|i| format!("{split}/{i:0width$}")));
                }
            }
            let mut files = BTreeSet::new();
            for i in 0..4 {
                let key = data_key("train", "img", i, 4, train_subfolders, format);
                match format {
                    "indexed_binary" | "mmap_indexed_binary" => {
                        files.insert(format!("{key}.off.idx"));
                        files.insert(format!("{key}.sz.idx"));
                    }
                    "tfrecord" => {
                        let name = key.rsplit('/').next().unwrap();
                        files.insert(format!("index/train/{name}.idx"));
                        folders.extend(["index", "index/train"].map(String::from));
                    }
                    _ => {}
                }
                files.insert(key);
            }
            let case = format!("{format}, subfolders {train_subfolders}/{eval_subfolders}");
            assert_eq!(list_folders(&data), folders, "{case}");
            assert_eq!(list_files(&data), files, "{case}");
        }
    }
}

#[test]
fn generation_names_files_like_dlio_and_leaves_no_temporaries() {
    let tmp = Scratch::new("naming");
    // Subfolders for train, none for eval, a custom prefix.
    let words = strings(&[
        "workload=default",
        &format!("++workload.dataset.data_folder={}", tmp.s("a")),
        "++workload.dataset.num_files_train=12",
        "++workload.dataset.num_subfolders_train=3",
        "++workload.dataset.num_files_eval=5",
        "++workload.dataset.num_subfolders_eval=0",
        "++workload.dataset.file_prefix=rec",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.train=False",
        &format!("++hydra.run.dir={}", tmp.s("out-a")),
    ]);
    run_quiet(&tmp.path, 2, &words).ok();
    let mut expected: BTreeSet<String> = (0..12)
        .map(|i| data_key("train", "rec", i, 12, 3, "npz"))
        .collect();
    expected.extend((0..5).map(|i| data_key("valid", "rec", i, 5, 0, "npz")));
    assert!(expected.contains("train/2/rec_11_of_12.npz"));
    assert!(expected.contains("valid/rec_4_of_5.npz"));
    assert_eq!(list_files(&tmp.join("a")), expected);

    // One subfolder is no subfolder; ten files pad to two digits; npy; more subfolders than 9.
    let words = strings(&[
        "workload=default",
        &format!("++workload.dataset.data_folder={}", tmp.s("b")),
        "++workload.dataset.format=npy",
        "++workload.dataset.num_files_train=10",
        "++workload.dataset.num_subfolders_train=1",
        "++workload.dataset.num_files_eval=11",
        "++workload.dataset.num_subfolders_eval=10",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.train=False",
        &format!("++hydra.run.dir={}", tmp.s("out-b")),
    ]);
    run_quiet(&tmp.path, 1, &words).ok();
    let mut expected: BTreeSet<String> = (0..10)
        .map(|i| data_key("train", "img", i, 10, 1, "npy"))
        .collect();
    expected.extend((0..11).map(|i| data_key("valid", "img", i, 11, 10, "npy")));
    assert!(expected.contains("train/img_00_of_10.npy"));
    assert!(expected.contains("valid/00/img_10_of_11.npy"));
    assert_eq!(list_files(&tmp.join("b")), expected);
    assert!(leftovers(&tmp.join("a")).is_empty() && leftovers(&tmp.join("b")).is_empty());

    // Generating again over an existing dataset replaces files in place: same names, no extras.
    run_quiet(&tmp.path, 2, &words).ok();
    assert_eq!(list_files(&tmp.join("b")), expected);
    for out in ["out-a", "out-b"] {
        assert!(
            !tmp.join(out).join("summary.json").exists(),
            "generate-only wrote results"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 7. numpy loads what dlio-rs generates
// ---------------------------------------------------------------------------------------------

fn check_numpy(cwd: &Path, args: &[String]) -> Ran {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/check_numpy.py");
    let mut cmd = Command::new("python3");
    cmd.current_dir(cwd).arg(&script).args(args);
    let out = cmd.output().unwrap_or_else(|e| {
        panic!(
            "python3 is needed for this test and could not be started ({e}); install Python 3 and \
             `pip install numpy` (CI installs it)"
        )
    });
    let ran = Ran {
        what: format!("python3 {} {}", script.display(), args.join(" ")),
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert_ne!(
        ran.code,
        Some(3),
        "numpy is missing: `pip install numpy` (CI installs it)\n{}",
        ran.context()
    );
    ran
}

#[test]
fn numpy_loads_generated_npz_and_npy_files() {
    let tmp = Scratch::new("numpy");
    let gen = |name: &str, extra: &[&str]| -> String {
        let mut words = strings(&[
            "workload=default",
            &format!("++workload.dataset.data_folder={}", tmp.s(name)),
            "++workload.dataset.num_files_eval=0",
            "++workload.workflow.generate_data=True",
            "++workload.workflow.train=False",
            &format!("++hydra.run.dir={}", tmp.s(&format!("out-{name}"))),
        ]);
        words.extend(strings(extra));
        run_quiet(&tmp.path, 2, &words).ok();
        tmp.s(name)
    };
    let expect_pass = |args: Vec<String>| {
        let ran = check_numpy(&tmp.path, &args);
        assert_eq!(ran.code, Some(0), "numpy check failed\n{}", ran.context());
        let files = &args[args.iter().position(|a| a == "--files").unwrap() + 1];
        assert!(
            ran.stdout.contains(&format!("{files} passed, 0 failed")),
            "{}",
            ran.context()
        );
    };
    let args = |dir: &str, rest: &str| -> Vec<String> {
        let mut v = vec![dir.to_string()];
        v.extend(rest.split_whitespace().map(str::to_string));
        v
    };

    // record_dims, two samples per file.
    let common = [
        "++workload.dataset.num_files_train=6",
        "++workload.dataset.record_dims=[8,8]",
        "++workload.dataset.num_samples_per_file=2",
    ];
    let npz = gen("npz", &common);
    expect_pass(args(
        &npz,
        "--format npz --files 6 --samples 2 --dims 8,8 --dtype uint8",
    ));
    let npy = gen(
        "npy",
        &[&common[..], &["++workload.dataset.format=npy"]].concat(),
    );
    expect_pass(args(
        &npy,
        "--format npy --files 6 --samples 2 --dims 8,8 --dtype uint8",
    ));

    // The size law without stdev: floor(sqrt(1000)) = 31 in both dims; a wider element type.
    let law = gen(
        "law",
        &[
            "++workload.dataset.num_files_train=4",
            "++workload.dataset.record_length_bytes=1000",
            "++workload.dataset.record_element_type=float32",
        ],
    );
    expect_pass(args(
        &law,
        "--format npz --files 4 --samples 1 --dims 31,31 --dtype float32",
    ));

    // The size law with a stdev: two free dims that vary from file to file.
    let varying = gen(
        "varying",
        &[
            "++workload.dataset.format=npy",
            "++workload.dataset.num_files_train=8",
            "++workload.dataset.num_samples_per_file=3",
            "++workload.dataset.record_length_bytes=4096",
            "++workload.dataset.record_length_bytes_stdev=1024",
        ],
    );
    expect_pass(args(
        &varying,
        "--format npy --files 8 --samples 3 --ndims 2 --dtype uint8 --varying",
    ));

    // The checker is not vacuous: wrong expectations fail.
    for wrong in [
        "--format npz --files 6 --samples 2 --dims 8,8 --dtype float32",
        "--format npz --files 6 --samples 1 --dims 8,8 --dtype uint8",
        "--format npz --files 7 --samples 2 --dims 8,8 --dtype uint8",
        "--format npz --files 6 --samples 2 --dims 8,9 --dtype uint8",
    ] {
        let ran = check_numpy(&tmp.path, &args(&npz, wrong));
        assert_eq!(ran.code, Some(1), "should fail: {wrong}\n{}", ran.context());
        assert!(ran.stdout.contains("FAIL"), "{}", ran.context());
    }
    let ran = check_numpy(
        &tmp.path,
        &args(
            &law,
            "--format npz --files 4 --samples 1 --ndims 2 --dtype float32 --varying",
        ),
    );
    assert_eq!(
        ran.code,
        Some(1),
        "equal shapes are not varying\n{}",
        ran.context()
    );
}

/// Sanity checks of the test helpers themselves (cheap, no processes).
#[test]
fn helpers_follow_dlio_conventions() {
    assert_eq!(
        data_key("train", "img", 7, 168, 0, "npz"),
        "train/img_007_of_168.npz"
    );
    assert_eq!(
        data_key("valid", "img", 3, 8, 2, "npz"),
        "valid/1/img_3_of_8.npz"
    );
    assert_eq!(
        data_key("train", "s", 11, 12, 10, "npy"),
        "train/01/s_11_of_12.npy"
    );
    let yaml =
        "workload:\n  reader:\n    read_threads: 8\n  train:\n    epochs: 2\nother:\n  epochs: 3\n";
    assert_eq!(
        yaml_get(yaml, &["workload", "reader", "read_threads"]).as_deref(),
        Some("8")
    );
    assert_eq!(
        yaml_get(yaml, &["workload", "train", "epochs"]).as_deref(),
        Some("2")
    );
    assert_eq!(yaml_get(yaml, &["other", "epochs"]).as_deref(), Some("3"));
    assert_eq!(yaml_get(yaml, &["workload", "epochs"]), None);
    assert_eq!(
        mean_pstdev(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]),
        (5.0, 2.0)
    );
    assert_eq!(
        shell_words(r#"run a=1 'b={x: 1}' "c d" e\ f 'it''s'"#),
        ["run", "a=1", "b={x: 1}", "c d", "e f", "its"]
    );
    assert_eq!(
        tokens("has 15 npz file(s), expects 16 (missing: a_15_of_16)"),
        [
            "has",
            "15",
            "npz",
            "file(s",
            "expects",
            "16",
            "missing",
            "a_15_of_16"
        ]
    );
}

/// The permanent line of each finished phase (stderr) shows the figures of all ranks exactly as
/// the end-of-run table (stdout) shows them: AU (the mean over ranks), samples/s (the sum) and
/// MiB/s read, to the digit, for training and evaluation, with ranks that differ.
#[test]
fn the_progress_lines_show_the_table_s_figures_of_all_ranks() {
    let tmp = Scratch::new("progress-au");
    let shape = Shape {
        files: 24,
        samples_per_file: 2,
        batch: 2,
        threads: 1,
        epochs: 2,
    };
    let mut words = traced_words(
        &tmp.join("data"),
        &tmp.join("out"),
        &shape,
        &RANK_VARYING_PHASES,
    );
    // The distribution replaces traced_words' fixed compute.
    words.retain(|w| w != "++workload.train.computation_time=0");
    generate_for(&tmp.path, &words);
    words.insert(0, "run".into());
    words.insert(1, "--accelerators=3".into());
    let ran = dlio_rs(&tmp.path, &words).ok();
    let (lines, rows) = phase_lines_and_table_rows(&ran);
    assert_eq!(lines.len(), 4, "{}", ran.context());
    assert_eq!(lines, rows, "{}", ran.context());
    // Not rank 0's figure passed off as everyone's: the ranks' AU differ.
    let report = read_json(&tmp.join("out/report.json"));
    let per_rank = nums(&report, "/epochs/0/per_rank_au_percent");
    assert_eq!(per_rank.len(), 3);
    assert!(per_rank.iter().any(|au| *au != per_rank[0]), "{per_rank:?}");
    // The latency columns: report.json's percentiles, each at its scale with its unit.
    let table: Vec<&str> = ran
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with("epoch "))
        .collect();
    assert_eq!(
        table[0],
        "epoch       AU %     samples/s   MiB/s nom.   MiB/s read  cache %       p50       p99     p99.9"
    );
    let rows = table[1..].iter().take_while(|l| !l.starts_with("mean"));
    let phases = ["", "/eval"];
    for (i, row) in rows.enumerate() {
        let cells: Vec<&str> = row.split_whitespace().collect();
        let at = format!("/epochs/{}{}", i / 2, phases[i % 2]);
        for (j, field) in ["p50_us", "p99_us", "p999_us"].iter().enumerate() {
            let (number, unit) = (
                cells[cells.len() - 6 + 2 * j],
                cells[cells.len() - 5 + 2 * j],
            );
            let shown = latency_cell_us(number, unit);
            let recorded = num(&report, &format!("{at}/{field}"));
            assert!(
                (shown - recorded).abs() <= 0.005 * recorded,
                "{row}: {field} {recorded} µs shown as {number} {unit}"
            );
        }
    }
}

/// A latency cell of the terminal's table (`241 ms`) in µs, checked to be at its scale: 3
/// significant digits, a number below 1000 in the largest unit (µs, ms, s) that keeps it at 1 or
/// more.
fn latency_cell_us(number: &str, unit: &str) -> f64 {
    let digits = number.chars().filter(char::is_ascii_digit).count();
    let value: f64 = number.parse().unwrap();
    assert_eq!(digits, if value < 1.0 { 4 } else { 3 }, "{number} {unit}");
    let scale = match unit {
        "µs" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        other => panic!("{number} {other}: not a unit of time"),
    };
    assert!(value < 1000.0, "{number} {unit}");
    assert!(value >= 1.0 || unit == "µs", "{number} {unit}");
    value * scale
}

/// `native_dali` runs npy, jpeg, png and tfrecord (DALI's numpy, file and tfrecord readers);
/// what DLIO cannot run under it exits 2 naming the key, the value and what is valid.
#[test]
fn native_dali_refuses_what_it_cannot_run() {
    let tmp = Scratch::new("native_dali_refusals");
    for (extra, says) in [
        (
            vec!["++workload.dataset.format=npz"],
            vec![
                "native_dali",
                "npz",
                "please use npy format instead",
                "native_dali runs npy, jpeg, png and tfrecord",
            ],
        ),
        (
            vec![
                "++workload.dataset.format=jpeg",
                "++workload.reader.sample_shuffle=seed",
            ],
            vec![
                "native_dali",
                "jpeg",
                "reader.sample_shuffle = seed",
                "shuffle_after_epoch and random_shuffle cannot be both true",
                "set reader.sample_shuffle off",
            ],
        ),
        (
            vec!["++workload.dataset.format=hdf5"],
            vec!["native_dali", "hdf5", "no DALI reader"],
        ),
        (
            vec![
                "++workload.dataset.format=npy",
                "++workload.reader.odirect=True",
            ],
            vec![
                "workload.reader.odirect",
                "native_dali",
                "set odirect False",
            ],
        ),
        (
            vec![
                "++workload.dataset.format=npy",
                "++workload.storage.throttle.mib_per_second=40",
            ],
            vec![
                "workload.storage.throttle",
                "native_dali",
                "++workload.reader.dont_use_mmap=True",
            ],
        ),
    ] {
        let mut words = strings(&[
            "run",
            "workload=unet3d_h100",
            "++workload.reader.data_loader=native_dali",
        ]);
        words.extend(extra.iter().map(|w| w.to_string()));
        dlio_rs(&tmp.path, &words).fails(2).says(&says);
    }
}
