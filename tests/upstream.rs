//! DLIO's own test suite, passed from the outside: every case of argonne-lcf/dlio_benchmark's
//! `tests/dlio_benchmark_test.py`, `tests/dlio_dataset_dimension_test.py` and
//! `tests/dlio_sample_shuffle_test.py` (@ e1919d7), restated as a run of `dlio_benchmark` under
//! `mpirun -np 2` with the override words the upstream case composes, and asserting what the
//! upstream case asserts as far as files show it: generated files (count, names, shapes and types
//! read with numpy, h5py, Pillow, pandas), `{rank}_output.json` per rank, checkpoint files,
//! recorded compute times, samples read exactly once.
//!
//! One `#[test]` per upstream test function, iterating its parameter rows; a failing row is named
//! `function[params]` in the message, and every row runs before the test fails. Each row runs in
//! a fresh scratch folder (the upstream cases use `./data`, `./checkpoints`). The runs are made
//! quick as the upstream words allow: where a case keeps DLIO's default compute time (1 s) or
//! evaluation time (0.5 s), [`QUICK`] words after the upstream ones shorten them; the
//! computation-time distributions are scaled by 1/100 (Poisson's, whose draws are whole seconds,
//! is kept and run over fewer steps). `++hydra.run.dir` puts each run's outputs in a known
//! folder, as the upstream harness reads `benchmark.output_folder`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use crate::common::*;

/// The upstream suite's `NUM_PROCS` when mpirun is there.
const NP: usize = 2;

/// DLIO's default compute and evaluation times (1 s and 0.5 s a step) shortened, added after
/// the words of cases that keep them.
const QUICK: &[&str] = &[
    "++workload.train.computation_time=0.01",
    "++workload.evaluation.eval_time=0.005",
];

/// Runs `case` for every row, each named `function[name]`; fails after all rows ran, listing
/// the failed ones (each failure's own message is printed above it).
fn rows<T>(function: &str, rows: &[T], name: impl Fn(&T) -> String, case: impl Fn(&T, &str)) {
    let mut failed = Vec::new();
    for row in rows {
        let named = format!("{function}[{}]", name(row));
        if catch_unwind(AssertUnwindSafe(|| case(row, &named))).is_err() {
            failed.push(named);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} rows failed:\n  {}",
        failed.len(),
        rows.len(),
        failed.join("\n  ")
    );
}

/// `mpirun -np 2 dlio_benchmark WORDS ++hydra.run.dir=OUT` in `tmp`.
fn dlio(tmp: &Scratch, out: &str, words: &[String]) -> Ran {
    let mut args = words.to_vec();
    args.push(format!("++hydra.run.dir={}", tmp.s(out)));
    mpirun(&tmp.path, NP, DLIO_BENCHMARK, &args).0
}

/// The upstream words, then `extra`.
fn words(upstream: &[&str], extra: &[&str]) -> Vec<String> {
    let mut all = strings(upstream);
    all.extend(strings(extra));
    all
}

/// Files under `dir` whose names end `.{ext}`, in `dir` itself or (`deep`) at any depth.
fn files(dir: &Path, ext: &str, deep: bool) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if deep {
                found.extend(files(&path, ext, true));
            }
        } else if path.to_string_lossy().ends_with(&format!(".{ext}")) {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Files one level below `dir`'s folders (`dir/*/*`), as the upstream `glob("*/*")` counts them.
fn files_in_subfolders(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for sub in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if sub.path().is_dir() {
            for f in std::fs::read_dir(sub.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                found.push(f.path());
            }
        }
    }
    found.sort();
    found
}

/// The upstream `run_benchmark(cfg, verify=True)`: the run succeeds and leaves one
/// `*_output.json` per rank in its output folder.
fn verify(ran: Ran, out: &Path, row: &str) -> Ran {
    let ran = ran.ok();
    let outputs = files(out, "json", false)
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with("_output.json"))
        .count();
    assert_eq!(
        outputs,
        NP,
        "{row}: *_output.json files in {}",
        out.display()
    );
    ran
}

/// What the Python `script` prints as JSON, given the `args` in `sys.argv[1:]`.
fn python(script: &str, args: &[String], row: &str) -> Value {
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("python3 runs (CI installs it)");
    assert!(
        out.status.success(),
        "{row}: the Python check failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{row}: {e}"))
}

const FRAMEWORK_FORMATS: [&str; 7] = [
    "png",
    "npz",
    "jpeg",
    "tfrecord",
    "hdf5",
    "indexed_binary",
    "mmap_indexed_binary",
];

/// `test_gen_data`: generation alone writes `num_files_train` and `num_files_eval` files of the
/// format (in DLIO's default two subfolders).
#[test]
fn test_gen_data() {
    rows(
        "test_gen_data",
        &FRAMEWORK_FORMATS,
        |f| format!("{f}-tensorflow"),
        |fmt, row| {
            let tmp = Scratch::new("up-gen");
            let ran = dlio(
                &tmp,
                "out",
                &words(
                    &[
                        "++workload.framework=tensorflow",
                        "++workload.reader.data_loader=tensorflow",
                        "++workload.workflow.train=False",
                        "++workload.workflow.generate_data=True",
                        &format!("++workload.dataset.format={fmt}"),
                        "++workload.dataset.num_files_train=8",
                        "++workload.dataset.num_files_eval=8",
                    ],
                    &[],
                ),
            );
            ran.ok();
            for split in ["train", "valid"] {
                let found = files(&tmp.join(format!("data/default/{split}")), fmt, true);
                assert_eq!(found.len(), 8, "{row}: {split} files {found:?}");
            }
        },
    );
}

/// `test_subset`: training on 8 of the 64 files generated.
#[test]
fn test_subset() {
    let tmp = Scratch::new("up-subset");
    dlio(
        &tmp,
        "gen",
        &strings(&[
            "++workload.workflow.train=False",
            "++workload.workflow.generate_data=True",
        ]),
    )
    .ok();
    let ran = dlio(
        &tmp,
        "out",
        &words(
            &[
                "++workload.workflow.train=True",
                "++workload.workflow.generate_data=False",
                "++workload.dataset.num_files_train=8",
                "++workload.train.computation_time=0.01",
            ],
            &QUICK[1..],
        ),
    );
    verify(ran, &tmp.join("out"), "test_subset");
}

/// `test_storage_root_gen_data`: the data folder is taken below `storage.storage_root`.
#[test]
fn test_storage_root_gen_data() {
    rows(
        "test_storage_root_gen_data",
        &FRAMEWORK_FORMATS,
        |f| format!("{f}-tensorflow"),
        |fmt, row| {
            let tmp = Scratch::new("up-root-gen");
            dlio(
                &tmp,
                "out",
                &words(
                    &[
                        "++workload.framework=tensorflow",
                        "++workload.reader.data_loader=tensorflow",
                        "++workload.workflow.train=False",
                        "++workload.workflow.generate_data=True",
                        "++workload.storage.storage_root=runs",
                        &format!("++workload.dataset.format={fmt}"),
                        "++workload.dataset.num_files_train=16",
                    ],
                    &[],
                ),
            )
            .ok();
            // num_subfolders_train is 2: `train/*/*.{fmt}`.
            for (split, expected) in [("train", 16), ("valid", 8)] {
                let dir = tmp.join(format!("runs/data/default/{split}"));
                let found: Vec<_> = files_in_subfolders(&dir)
                    .into_iter()
                    .filter(|p| p.to_string_lossy().ends_with(&format!(".{fmt}")))
                    .collect();
                assert_eq!(found.len(), expected, "{row}: {split} files {found:?}");
            }
        },
    );
}

/// `test_iostat_profiling`: DLIO's iostat profiler writes `iostat.json`; dlio-rs reads
/// `workflow.profiling` and `profiling.profiler` but runs no profiler (docs/deviations.md, "Keys
/// read but not acted on"): the host's disk is sampled in `timeseries.jsonl` instead
/// (docs/timeseries.md). The run, and its outputs per rank, are DLIO's.
#[test]
fn test_iostat_profiling() {
    let tmp = Scratch::new("up-iostat");
    dlio(
        &tmp,
        "gen",
        &strings(&[
            "++workload.workflow.train=False",
            "++workload.workflow.generate_data=True",
        ]),
    )
    .ok();
    let ran = dlio(
        &tmp,
        "out",
        &strings(&[
            "++workload.workflow.train=True",
            "++workload.workflow.generate_data=False",
            "workload.train.computation_time=0.01",
            "workload.evaluation.eval_time=0.005",
            "workload.train.epochs=1",
            "workload.workflow.profiling=True",
            "workload.profiling.profiler=iostat",
        ]),
    );
    let out = tmp.join("out");
    verify(ran, &out, "test_iostat_profiling");
    assert!(!out.join("iostat.json").exists(), "no profiler runs");
    let series = std::fs::read_to_string(out.join("timeseries.jsonl")).unwrap();
    assert!(
        series.lines().any(|l| l.contains("\"disk")),
        "the host's disk is sampled:\n{series}"
    );
}

/// `test_checkpoint_epoch`: a checkpoint every 2 of 8 epochs; its files per checkpoint are
/// (model + optimizer + layer) × ranks, and for TensorFlow tf.train.Checkpoint's: two files a
/// shard (`{shard}.pb-1.index`, `{shard}.pb-1.data-00000-of-00001`) and the folder's
/// `checkpoint` file, as DLIO's test counts them (2 × shards + 1, 13 a checkpoint here).
#[test]
fn test_checkpoint_epoch() {
    type Row = (&'static str, &'static str, u64, u64, bool);
    let mut table: Vec<Row> = Vec::new();
    for randomize in [true, false] {
        for (optimizers, layers, zero) in [
            ("[1024, 128]", 2, 0),
            ("[1024, 128]", 2, 3),
            ("[128]", 1, 0),
        ] {
            for framework in ["tensorflow", "pytorch"] {
                table.push((framework, optimizers, layers, zero, randomize));
            }
        }
    }
    rows(
        "test_checkpoint_epoch",
        &table,
        |(f, o, l, z, r)| format!("{f}-1024-{o}-{l}-[16]-{z}-{r}"),
        |&(framework, optimizers, layers, zero, randomize), row| {
            let tmp = Scratch::new("up-ckpt-epoch");
            let (epochs, per_ckp) = (8, 2);
            let ran = dlio(
                &tmp,
                "out",
                &words(
                    &[
                        &format!("++workload.framework={framework}"),
                        &format!("++workload.reader.data_loader={framework}"),
                        "++workload.workflow.train=True",
                        "++workload.workflow.generate_data=True",
                        &format!(
                            "++workload.checkpoint.randomize_tensor={}",
                            if randomize { "True" } else { "False" }
                        ),
                        "++workload.train.computation_time=0.01",
                        "++workload.evaluation.eval_time=0.005",
                        &format!("++workload.train.epochs={epochs}"),
                        "++workload.workflow.checkpoint=True",
                        &format!("++workload.checkpoint.epochs_between_checkpoints={per_ckp}"),
                        "++workload.model.model_size=1024",
                        &format!("++workload.model.optimization_groups={optimizers}"),
                        &format!("++workload.model.num_layers={layers}"),
                        &format!("++workload.model.parallelism.zero_stage={zero}"),
                        "++workload.model.layer_parameters=[16]",
                        &format!("++workload.model.parallelism.tensor={NP}"),
                    ],
                    &[],
                ),
            );
            verify(ran, &tmp.join("out"), row);
            let found = files_in_subfolders(&tmp.join("checkpoints"));
            let shards = 3 * NP;
            let tensorflow = framework == "tensorflow";
            let per_checkpoint = if tensorflow { 2 * shards + 1 } else { shards };
            assert_eq!(
                found.len(),
                epochs / per_ckp * per_checkpoint,
                "{row}: files produced {found:?}"
            );
            let named = |f: &PathBuf| {
                let name = f.file_name().unwrap().to_string_lossy().into_owned();
                if tensorflow {
                    name == "checkpoint"
                        || name.ends_with(".pb-1.index")
                        || name.ends_with(".pb-1.data-00000-of-00001")
                } else {
                    name.ends_with(".pt")
                }
            };
            assert!(
                found.iter().all(named),
                "{row}: every file one of {framework}'s: {found:?}"
            );
        },
    );
}

/// `test_checkpoint_step`: a checkpoint every 2 steps of each of 8 epochs, one file each.
#[test]
fn test_checkpoint_step() {
    let tmp = Scratch::new("up-ckpt-step");
    let ran = dlio(
        &tmp,
        "out",
        &strings(&[
            "++workload.workflow.train=True",
            "++workload.workflow.generate_data=True",
            "++workload.train.computation_time=0.01",
            "++workload.evaluation.eval_time=0.005",
            "++workload.train.epochs=8",
            "++workload.workflow.checkpoint=True",
            "++workload.checkpoint.steps_between_checkpoints=2",
        ]),
    );
    verify(ran, &tmp.join("out"), "test_checkpoint_step");
    // num_files_train × num_samples_per_file // batch_size // ranks, DLIO's defaults.
    let steps = 64 / 4 / NP;
    let found = files_in_subfolders(&tmp.join("checkpoints"));
    assert_eq!(found.len(), steps / 2 * 8, "files produced {found:?}");
}

/// `test_checkpoint_ksm_config`: DLIO derives its kernel same-page merging settings from
/// `checkpoint.ksm` (enabled by the section, with defaults 12, 30.0, 15.0 and 200 s), Python-only
/// attributes dlio-rs accepts and does not act on (docs/configuration.md, "Keys accepted but not
/// acted on"). What a file shows: the three configurations run (a checkpoint written and read)
/// and the configuration Hydra saves keeps the section as given.
#[test]
fn test_checkpoint_ksm_config() {
    let cases: [(&str, &[&str], Value); 3] = [
        ("defaults", &["++workload.checkpoint.ksm={}"], json!({})),
        (
            "overrides",
            &[
                "++workload.checkpoint.ksm.high_ram_trigger=25.5",
                "++workload.checkpoint.ksm.await_time=100",
            ],
            json!({"high_ram_trigger": 25.5, "await_time": 100}),
        ),
        ("omitted", &[], Value::Null),
    ];
    rows(
        "test_checkpoint_ksm_config",
        &cases,
        |(name, _, _)| name.to_string(),
        |(_, ksm, expected), row| {
            let tmp = Scratch::new("up-ksm");
            let mut all = strings(&["++workload.workflow.checkpoint=True"]);
            all.extend(strings(ksm));
            all.extend(strings(&[
                "++workload.workflow.generate_data=False",
                "++workload.workflow.train=False",
                "++workload.checkpoint.num_checkpoints_write=1",
                "++workload.checkpoint.num_checkpoints_read=1",
                "++workload.checkpoint.randomize_tensor=False",
            ]));
            dlio(&tmp, "out", &all).ok();
            let saved = python(
                "import json, sys, yaml\n\
                 c = yaml.safe_load(open(sys.argv[1]))\n\
                 print(json.dumps(c['workload']['checkpoint'].get('ksm')))\n",
                &[tmp.s("out/.hydra/config.yaml")],
                row,
            );
            assert_eq!(
                &saved, expected,
                "{row}: checkpoint.ksm in .hydra/config.yaml"
            );
            let found = files_in_subfolders(&tmp.join("checkpoints"));
            assert!(!found.is_empty(), "{row}: a checkpoint is written");
        },
    );
}

/// `test_eval`: training with evaluation every epoch.
#[test]
fn test_eval() {
    let tmp = Scratch::new("up-eval");
    let ran = dlio(
        &tmp,
        "out",
        &strings(&[
            "++workload.workflow.train=True",
            "++workload.workflow.generate_data=True",
            "workload.train.computation_time=0.01",
            "workload.evaluation.eval_time=0.005",
            "++workload.train.epochs=4",
            "++workload.workflow.evaluation=True",
        ]),
    );
    let out = tmp.join("out");
    verify(ran, &out, "test_eval");
    let output = read_json(&out.join("0_output.json"));
    for epoch in 1..=4 {
        // DLIO's defaults: 8 evaluation files, batch 1, over 2 ranks.
        let steps = at(&output, &format!("/{epoch}/compute/eval"))
            .as_array()
            .unwrap()
            .len();
        assert_eq!(steps, 4, "epoch {epoch}'s evaluation steps on rank 0");
    }
}

/// `test_multi_threads`: 0, 1 and 2 read threads with either framework.
#[test]
fn test_multi_threads() {
    let table: Vec<(&str, u32)> = ["tensorflow", "pytorch"]
        .iter()
        .flat_map(|f| (0..3).map(move |nt| (*f, nt)))
        .collect();
    rows(
        "test_multi_threads",
        &table,
        |(f, nt)| format!("{f}-{nt}"),
        |(framework, nt), row| {
            let tmp = Scratch::new("up-threads");
            let ran = dlio(
                &tmp,
                "out",
                &strings(&[
                    "++workload.workflow.train=True",
                    "++workload.workflow.generate_data=True",
                    &format!("++workload.framework={framework}"),
                    &format!("++workload.reader.data_loader={framework}"),
                    &format!("++workload.reader.read_threads={nt}"),
                    "workload.train.computation_time=0.01",
                    "workload.evaluation.eval_time=0.005",
                    "++workload.train.epochs=1",
                    "++workload.dataset.num_files_train=8",
                    "++workload.dataset.num_files_eval=8",
                ]),
            );
            verify(ran, &tmp.join("out"), row);
        },
    );
}

/// `test_pytorch_multiprocessing_context`: the context is read (it means nothing to reader
/// threads: docs/deviations.md, "Reader threads, not processes, new every epoch").
#[test]
fn test_pytorch_multiprocessing_context() {
    let table = [(0, "None"), (1, "fork"), (2, "spawn"), (2, "forkserver")];
    rows(
        "test_pytorch_multiprocessing_context",
        &table,
        |(nt, c)| format!("{nt}-{c}"),
        |(nt, context), row| {
            let tmp = Scratch::new("up-mp-context");
            let ran = dlio(
                &tmp,
                "out",
                &strings(&[
                    "++workload.workflow.train=True",
                    "++workload.workflow.generate_data=True",
                    "++workload.framework=pytorch",
                    "++workload.reader.data_loader=pytorch",
                    &format!("++workload.reader.read_threads={nt}"),
                    &format!("++workload.reader.multiprocessing_context={context}"),
                    "workload.train.computation_time=0.01",
                    "workload.evaluation.eval_time=0.005",
                    "++workload.train.epochs=1",
                    "++workload.dataset.num_files_train=8",
                    "++workload.dataset.num_files_eval=8",
                ]),
            );
            verify(ran, &tmp.join("out"), row);
        },
    );
}

/// The formats a framework's loader reads in `test_train` (tfrecord only with TensorFlow).
fn train_formats(framework: &str) -> Vec<&'static str> {
    let mut formats = vec!["png", "npz", "jpeg"];
    if framework == "tensorflow" {
        formats.push("tfrecord");
    }
    formats.extend(["hdf5", "csv", "indexed_binary", "mmap_indexed_binary"]);
    formats
}

/// `test_train`: one epoch of every format with each loader, 16 (even) or 17 files; DALI's
/// loader with the formats DLIO's DALI rows use (its index-based readers: no tfrecord).
#[test]
fn test_train() {
    let mut table = Vec::new();
    for is_even in [true, false] {
        for (framework, loader) in [
            ("tensorflow", "tensorflow"),
            ("pytorch", "pytorch"),
            ("tensorflow", "dali"),
            ("pytorch", "dali"),
        ] {
            // DALI's rows are the PyTorch formats (no tfrecord).
            let formats = train_formats(if loader == "dali" {
                "pytorch"
            } else {
                framework
            });
            for fmt in formats {
                table.push((fmt, framework, loader, is_even));
            }
        }
    }
    assert_eq!(table.len(), 58);
    rows(
        "test_train",
        &table,
        |(f, fw, l, e)| format!("{f}-{fw}-{l}-{e}"),
        |&(fmt, framework, loader, is_even), row| {
            let tmp = Scratch::new("up-train");
            let num_files = if is_even { 16 } else { 17 };
            let ran = dlio(
                &tmp,
                "out",
                &strings(&[
                    "++workload.workflow.train=True",
                    "++workload.workflow.generate_data=True",
                    &format!("++workload.framework={framework}"),
                    &format!("++workload.reader.data_loader={loader}"),
                    &format!("++workload.dataset.format={fmt}"),
                    "workload.train.computation_time=0.01",
                    "workload.evaluation.eval_time=0.005",
                    "++workload.train.epochs=1",
                    &format!("++workload.dataset.num_files_train={num_files}"),
                    "++workload.reader.read_threads=1",
                ]),
            );
            verify(ran, &tmp.join("out"), row);
        },
    );
}

/// `test_uneven_samples_deadlock`: sample counts that do not divide among ranks and batches end
/// (every rank finishes its 3 epochs).
#[test]
fn test_uneven_samples_deadlock() {
    let mut table = Vec::new();
    for framework in ["pytorch", "tensorflow"] {
        for (files, batch) in [(13, 4), (24, 4), (25, 4), (145, 16)] {
            table.push((framework, files, batch));
        }
    }
    rows(
        "test_uneven_samples_deadlock",
        &table,
        |(f, n, b)| format!("npz-{f}-{f}-{n}-{b}"),
        |(framework, num_files, batch), row| {
            let tmp = Scratch::new("up-uneven");
            let ran = dlio(
                &tmp,
                "out",
                &strings(&[
                    "++workload.workflow.train=True",
                    "++workload.workflow.generate_data=True",
                    &format!("++workload.framework={framework}"),
                    &format!("++workload.reader.data_loader={framework}"),
                    "++workload.dataset.format=npz",
                    &format!("++workload.reader.batch_size={batch}"),
                    "++workload.train.computation_time=0.01",
                    "++workload.evaluation.eval_time=0.005",
                    "++workload.train.epochs=3",
                    &format!("++workload.dataset.num_files_train={num_files}"),
                    "++workload.reader.read_threads=1",
                ]),
            );
            verify(ran, &tmp.join("out"), row);
        },
    );
}

/// `test_custom_storage_root_train`: generation and training below `storage.storage_root`.
#[test]
fn test_custom_storage_root_train() {
    let table: Vec<(&str, &str)> = ["tensorflow", "pytorch"]
        .iter()
        .flat_map(|f| train_formats(f).into_iter().map(move |fmt| (fmt, *f)))
        .collect();
    assert_eq!(table.len(), 15);
    rows(
        "test_custom_storage_root_train",
        &table,
        |(fmt, f)| format!("{fmt}-{f}"),
        |(fmt, framework), row| {
            let tmp = Scratch::new("up-root-train");
            let ran = dlio(
                &tmp,
                "out",
                &strings(&[
                    "++workload.workflow.train=True",
                    "++workload.workflow.generate_data=True",
                    &format!("++workload.framework={framework}"),
                    &format!("++workload.reader.data_loader={framework}"),
                    &format!("++workload.dataset.format={fmt}"),
                    "++workload.storage.storage_root=root_dir",
                    "workload.train.computation_time=0.01",
                    "workload.evaluation.eval_time=0.005",
                    "++workload.train.epochs=1",
                    "++workload.dataset.num_files_train=16",
                    "++workload.reader.read_threads=1",
                ]),
            );
            verify(ran, &tmp.join("out"), row);
            let found = files(&tmp.join("root_dir/data/default/train"), fmt, true);
            assert_eq!(found.len(), 16, "{row}: files below the storage root");
        },
    );
}

/// How the recorded compute times of one `test_computation_time_distribution` row should look:
/// the distribution's median and interquartile range (quantiles, not mean and deviation: a
/// recorded time is the measured sleep, which a busy host sometimes lengthens by milliseconds),
/// the tolerance of each, and the least a step may take.
struct Expect {
    median: f64,
    iqr: f64,
    tolerance: f64,
    least: f64,
}

/// The `q` quantile of sorted `times`, interpolated as numpy's default does.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let at = q * (sorted.len() - 1) as f64;
    let (low, high) = (at.floor() as usize, at.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (at - low as f64)
}

/// `test_computation_time_distribution`: `computation_time` given one word per key of the
/// distribution (`++workload.train.computation_time.type=uniform`, ...) over the default's
/// number, or as a number. The recorded compute times per step (`{rank}_output.json`'s
/// `compute`, 16 steps) follow the distribution, its times scaled by 1/100; the draws are seeded
/// per rank, so the figures repeat. Quantiles of DLIO's |draw| (numpy, 2·10^6 draws): a normal
/// of mean and deviation 0.01 folded at 0 has median 0.0105 and IQR 0.0117; an exponential of
/// scale 0.01 (and a gamma of shape 1) 0.0069 and 0.0110.
#[test]
fn test_computation_time_distribution() {
    let folded = || Expect {
        median: 0.0105,
        iqr: 0.0117,
        tolerance: 0.006,
        least: 0.0,
    };
    let exponential = || Expect {
        median: 0.0069,
        iqr: 0.0110,
        tolerance: 0.006,
        least: 0.0,
    };
    let constant = |t: f64| Expect {
        median: t,
        iqr: 0.0,
        tolerance: 0.002,
        least: t,
    };
    let table: Vec<(&str, Vec<&str>, Expect)> = vec![
        (
            "uniform",
            vec!["type=uniform", "min=0.01", "max=0.02"],
            Expect {
                median: 0.015,
                iqr: 0.005,
                tolerance: 0.003,
                least: 0.01,
            },
        ),
        (
            "normal",
            vec!["type=normal", "mean=0.01", "stdev=0.01"],
            folded(),
        ),
        (
            "gamma",
            vec!["type=gamma", "shape=1.0", "scale=0.01"],
            exponential(),
        ),
        ("exp", vec!["type=exponential", "scale=0.01"], exponential()),
        // Whole seconds: the one distribution not scaled, run over 4 steps a rank (median 1 s;
        // 8 draws put the quartiles at 0 or 1 s, and rarely 2).
        (
            "poisson",
            vec!["type=poisson", "lam=1.0"],
            Expect {
                median: 1.0,
                iqr: 1.0,
                tolerance: 1.0,
                least: 0.0,
            },
        ),
        ("normal_v2", vec!["mean=0.01"], constant(0.01)),
        ("normal_v3", vec!["mean=0.01", "stdev=0.01"], folded()),
        ("normal_v4", vec![], constant(0.02)),
    ];
    rows(
        "test_computation_time_distribution",
        &table,
        |(name, _, _)| name.to_string(),
        |(name, keys, expect), row| {
            let tmp = Scratch::new("up-compute-dist");
            let mut all = strings(&[
                "++workload.workflow.train=True",
                "++workload.workflow.generate_data=True",
                "++workload.train.epochs=1",
            ]);
            if keys.is_empty() {
                all.push("++workload.train.computation_time=0.02".into());
            } else {
                all.extend(
                    keys.iter()
                        .map(|kv| format!("++workload.train.computation_time.{kv}")),
                );
            }
            all.push(QUICK[1].into());
            if *name == "poisson" {
                all.push("++workload.dataset.num_files_train=32".into());
            }
            let ran = dlio(&tmp, "out", &all);
            let out = tmp.join("out");
            verify(ran, &out, row);
            let mut times = Vec::new();
            for rank in 0..NP {
                let output = read_json(&out.join(format!("{rank}_output.json")));
                times.extend(nums(&output, "/1/compute/block1"));
            }
            times.sort_by(f64::total_cmp);
            let median = quantile(&times, 0.5);
            let iqr = quantile(&times, 0.75) - quantile(&times, 0.25);
            assert!(
                (median - expect.median).abs() <= expect.tolerance
                    && (iqr - expect.iqr).abs() <= expect.tolerance,
                "{row}: median {median:.5} s, IQR {iqr:.5} s; expected {:.5} s and {:.5} s \
                 (± {}) — {times:?}",
                expect.median,
                expect.iqr,
                expect.tolerance
            );
            assert!(
                times[0] >= expect.least,
                "{row}: a step shorter than {} s: {times:?}",
                expect.least
            );
            if *name == "poisson" {
                assert!(
                    times.iter().all(|t| (t - t.round()).abs() < 0.05),
                    "{row}: Poisson draws are whole seconds: {times:?}"
                );
            }
        },
    );
}

// ---------------------------------------------------------------------------------------------
// tests/dlio_dataset_dimension_test.py
// ---------------------------------------------------------------------------------------------

const DTYPES: [&str; 3] = ["float32", "int8", "float16"];
const DIMENSIONS: [usize; 3] = [2, 3, 4];

/// The upstream `generate_random_shape`: `dim` sizes in 1..=9, drawn here from a fixed
/// generator seeded by the row, so that a failing row repeats.
fn random_shape(seed: u64, dim: usize) -> Vec<u64> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..dim)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            1 + state % 9
        })
        .collect()
}

/// The upstream `generate_dlio_param`: 8 files per rank in `root/data`, outputs in `root`, no
/// subfolders, 2 epochs (then [`QUICK`]).
fn dimension_words(framework: &str, root: &str, fmt: &str, extra: &[String]) -> Vec<String> {
    let files = 8 * NP;
    let mut all = extra.to_vec();
    all.extend(strings(&[
        &format!("++workload.framework={framework}"),
        &format!("++workload.reader.data_loader={framework}"),
        "++workload.workflow.generate_data=True",
        &format!("++workload.output.folder={root}"),
        &format!("++workload.dataset.data_folder={root}/data"),
        &format!("++workload.dataset.num_files_train={files}"),
        "++workload.dataset.num_files_eval=0",
        &format!("++workload.dataset.format={fmt}"),
        "++workload.workflow.generate_data=True",
        &format!("++workload.dataset.num_files_train={files}"),
        "++workload.dataset.num_files_eval=0",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.dataset.num_subfolders_eval=0",
        "++workload.workflow.evaluate=False",
        "++workload.workflow.train=True",
        "++workload.train.epochs=2",
    ]));
    all.extend(strings(QUICK));
    all
}

/// Rows of (dtype, dim) in the upstream order, with a seed each.
fn dtype_dim_rows() -> Vec<(&'static str, usize, u64)> {
    let mut table = Vec::new();
    for dtype in DTYPES {
        for dim in DIMENSIONS {
            table.push((dtype, dim, table.len() as u64 + 1));
        }
    }
    table
}

/// The one scratch folder of a dimension row and its storage root (relative, as upstream's).
fn dimension_run(fmt: &str, framework: &str, extra: &[String]) -> (Scratch, Ran) {
    let tmp = Scratch::new("up-dim");
    let ran = dlio(
        &tmp,
        "hydra",
        &dimension_words(framework, "outputs/run", fmt, extra),
    );
    (tmp, ran)
}

fn list(shape: &[u64]) -> String {
    format!(
        "[{}]",
        shape
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

/// The data files of a dimension row, at least one.
fn train_files(tmp: &Scratch, ext: &str, row: &str) -> Vec<PathBuf> {
    let found = files(&tmp.join("outputs/run/data/train"), ext, false);
    assert!(!found.is_empty(), "{row}: no .{ext} file");
    found
}

/// `test_dim_based_hdf5_gen_data`: `record_dims` (3 × 1, ...) over 3 datasets a record: each
/// dataset of shape (1, ...) and the element type.
#[test]
fn test_dim_based_hdf5_gen_data() {
    rows(
        "test_dim_based_hdf5_gen_data",
        &dtype_dim_rows(),
        |(t, d, _)| format!("{t}-{d}"),
        |&(dtype, dim, seed), row| {
            let per_dataset: Vec<u64> = [1].into_iter().chain(random_shape(seed, dim)).collect();
            let mut shape = per_dataset.clone();
            shape[0] = 3;
            let (tmp, ran) = dimension_run(
                "hdf5",
                "pytorch",
                &[
                    format!("++workload.dataset.record_dims={}", list(&shape)),
                    format!("++workload.dataset.record_element_type={dtype}"),
                    "++workload.dataset.hdf5.num_dset_per_record=3".into(),
                ],
            );
            ran.ok();
            let path = &train_files(&tmp, "hdf5", row)[0];
            let found = python(
                "import h5py, json, sys\n\
                 f = h5py.File(sys.argv[1], 'r')\n\
                 keys = list(f.keys()); keys.remove('labels')\n\
                 v = f[keys[-1]]\n\
                 print(json.dumps([list(v.shape), str(v.dtype), len(keys)]))\n",
                &[path.display().to_string()],
                row,
            );
            assert_eq!(
                found,
                json!([per_dataset, dtype, 3]),
                "{row}: shape, dtype, datasets"
            );
        },
    );
}

/// `test_dim_based_image_gen_data`: a 2-D `record_dims` is the image's (height, width); more
/// dimensions are refused with DLIO's sentence.
#[test]
fn test_dim_based_image_gen_data() {
    let mut table = Vec::new();
    for fmt in ["png", "jpeg"] {
        for (dtype, dim, seed) in dtype_dim_rows() {
            table.push((fmt, dtype, dim, seed + 100));
        }
    }
    rows(
        "test_dim_based_image_gen_data",
        &table,
        |(f, t, d, _)| format!("{t}-{f}-{d}"),
        |&(fmt, dtype, dim, seed), row| {
            let shape = random_shape(seed, dim);
            let (tmp, ran) = dimension_run(
                fmt,
                "pytorch",
                &[
                    format!("++workload.dataset.record_element_type={dtype}"),
                    format!("++workload.dataset.record_dims={}", list(&shape)),
                ],
            );
            if dim > 2 {
                ran.fails(2).says(&[&format!(
                    "{fmt} format does not support more than 2 dimensions, but got {dim} \
                     dimensions."
                )]);
                return;
            }
            ran.ok();
            let path = &train_files(&tmp, fmt, row)[0];
            let found = python(
                "import json, sys\nfrom PIL import Image\n\
                 img = Image.open(sys.argv[1])\n\
                 print(json.dumps([list(img.size), img.format.lower()]))\n",
                &[path.display().to_string()],
                row,
            );
            assert_eq!(
                found,
                json!([[shape[1], shape[0]], fmt]),
                "{row}: (width, height), format"
            );
        },
    );
}

/// `test_dim_based_np_gen_data`: npz's `x` and npy's array are `record_dims` plus the samples
/// axis, of the element type.
#[test]
fn test_dim_based_np_gen_data() {
    let mut table = Vec::new();
    for fmt in ["npz", "npy"] {
        for (dtype, dim, seed) in dtype_dim_rows() {
            table.push((fmt, dtype, dim, seed + 200));
        }
    }
    rows(
        "test_dim_based_np_gen_data",
        &table,
        |(f, t, d, _)| format!("{f}-{t}-{d}"),
        |&(fmt, dtype, dim, seed), row| {
            let shape = random_shape(seed, dim);
            let (tmp, ran) = dimension_run(
                fmt,
                "pytorch",
                &[
                    "++workload.dataset.num_samples_per_file=1".into(),
                    format!("++workload.dataset.record_element_type={dtype}"),
                    format!("++workload.dataset.record_dims={}", list(&shape)),
                ],
            );
            ran.ok();
            let path = &train_files(&tmp, fmt, row)[0];
            let found = python(
                "import json, sys\nimport numpy as np\n\
                 d = np.load(sys.argv[1])\n\
                 x = d['x'] if sys.argv[1].endswith('.npz') else d\n\
                 print(json.dumps([list(x.shape), str(x.dtype), x.dtype.itemsize]))\n",
                &[path.display().to_string()],
                row,
            );
            let mut expected = shape.clone();
            expected.push(1);
            let itemsize = if dtype == "int8" {
                1
            } else if dtype == "float16" {
                2
            } else {
                4
            };
            assert_eq!(
                found,
                json!([expected, dtype, itemsize]),
                "{row}: shape, dtype"
            );
        },
    );
}

/// `test_dim_based_tfrecord_gen_data`: each record's `image` holds prod(record_dims) × the
/// element's size bytes (read without TensorFlow by tests/python/check_tfrecord.py, which also
/// checks the framing, CRCs and DALI index files).
#[test]
fn test_dim_based_tfrecord_gen_data() {
    rows(
        "test_dim_based_tfrecord_gen_data",
        &dtype_dim_rows(),
        |(t, d, _)| format!("{t}-{d}"),
        |&(dtype, dim, seed), row| {
            let shape = random_shape(seed + 300, dim);
            let (tmp, ran) = dimension_run(
                "tfrecord",
                "tensorflow",
                &[
                    format!("++workload.dataset.record_element_type={dtype}"),
                    format!("++workload.dataset.record_dims={}", list(&shape)),
                ],
            );
            ran.ok();
            train_files(&tmp, "tfrecord", row);
            let script =
                Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/check_tfrecord.py");
            let expect =
                json!({"files": 8 * NP, "samples_per_file": 1, "dims": shape, "dtype": dtype});
            let out = std::process::Command::new("python3")
                .arg(&script)
                .arg(tmp.join("outputs/run/data"))
                .arg(expect.to_string())
                .output()
                .expect("python3 runs (CI installs it)");
            assert!(
                out.status.success(),
                "{row}: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        },
    );
}

/// `test_dim_based_indexed_gen_data`: the `.off.idx` and `.sz.idx` files list every sample of
/// the file, each prod(record_dims) × the element's size bytes, read back at its offset.
#[test]
fn test_dim_based_indexed_gen_data() {
    let mut table = Vec::new();
    for dtype in DTYPES {
        for per_file in [1u64, 2, 3] {
            for dim in DIMENSIONS {
                table.push((dtype, per_file, dim, table.len() as u64 + 400));
            }
        }
    }
    rows(
        "test_dim_based_indexed_gen_data",
        &table,
        |(t, n, d, _)| format!("{t}-{n}-{d}"),
        |&(dtype, per_file, dim, seed), row| {
            let shape = random_shape(seed, dim);
            let (tmp, ran) = dimension_run(
                "indexed_binary",
                "pytorch",
                &[
                    format!("++workload.dataset.num_samples_per_file={per_file}"),
                    format!("++workload.dataset.record_element_type={dtype}"),
                    format!("++workload.dataset.record_dims={}", list(&shape)),
                ],
            );
            ran.ok();
            let path = &train_files(&tmp, "indexed_binary", row)[0];
            let found = python(
                "import json, sys\nimport numpy as np\n\
                 p, n = sys.argv[1], int(sys.argv[2])\n\
                 off = np.fromfile(p + '.off.idx', dtype=np.int64)\n\
                 sz = np.fromfile(p + '.sz.idx', dtype=np.int64)\n\
                 lens = []\n\
                 with open(p, 'rb') as f:\n\
                 \x20   for o, s in zip(off[:n], sz[:n]):\n\
                 \x20       f.seek(int(o)); lens.append(len(f.read(int(s))))\n\
                 print(json.dumps([len(off), len(sz), [int(s) for s in sz], lens]))\n",
                &[path.display().to_string(), per_file.to_string()],
                row,
            );
            let itemsize = if dtype == "int8" {
                1
            } else if dtype == "float16" {
                2
            } else {
                4
            };
            let sample = shape.iter().product::<u64>() * itemsize;
            let sizes = vec![sample; per_file as usize];
            assert_eq!(
                found,
                json!([per_file, per_file, sizes, sizes]),
                "{row}: offsets, sizes, and the bytes read at each offset"
            );
        },
    );
}

/// `test_dim_based_csv`: the first row has prod(record_dims) values (pandas, no header). DLIO
/// writes no header and no index column.
#[test]
fn test_dim_based_csv() {
    rows(
        "test_dim_based_csv",
        &dtype_dim_rows(),
        |(t, d, _)| format!("{t}-{d}"),
        |&(dtype, dim, seed), row| {
            let shape = random_shape(seed + 500, dim);
            let (tmp, ran) = dimension_run(
                "csv",
                "pytorch",
                &[
                    format!("++workload.dataset.record_element_type={dtype}"),
                    format!("++workload.dataset.record_dims={}", list(&shape)),
                ],
            );
            ran.ok();
            let path = &train_files(&tmp, "csv", row)[0];
            let found = python(
                "import json, sys\nimport pandas as pd\n\
                 df = pd.read_csv(sys.argv[1], compression='infer', header=None)\n\
                 print(json.dumps(len(df.iloc[0])))\n",
                &[path.display().to_string()],
                row,
            );
            assert_eq!(
                found,
                json!(shape.iter().product::<u64>()),
                "{row}: values in row 0"
            );
        },
    );
}

/// `test_transformed_sample`: DLIO's loader hands the model batches of
/// `reader.transformed_record_dims` and `transformed_record_element_type`. dlio-rs accepts both
/// keys and does not act on them (docs/configuration.md, "Keys accepted but not acted on"): no
/// batch tensor is built, so the shape is not observable; what is: the run with those words reads
/// every generated hdf5 file's records (two epochs, every rank's output).
#[test]
fn test_transformed_sample() {
    let mut table = Vec::new();
    for dtype in DTYPES {
        for transformed in ["uint8", "float32"] {
            for dim in DIMENSIONS {
                table.push((dtype, transformed, dim, table.len() as u64 + 600));
            }
        }
    }
    rows(
        "test_transformed_sample",
        &table,
        |(t, tt, d, _)| format!("{t}-{tt}-{d}"),
        |&(dtype, transformed, dim, seed), row| {
            let shape = random_shape(seed, dim);
            let sample = random_shape(seed + 1000, 2);
            let (tmp, ran) = dimension_run(
                "hdf5",
                "pytorch",
                &[
                    format!("++workload.dataset.record_element_type={dtype}"),
                    format!("++workload.dataset.record_dims={}", list(&shape)),
                    format!(
                        "++workload.reader.transformed_record_dims={}",
                        list(&sample)
                    ),
                    format!("++workload.reader.transformed_record_element_type={transformed}"),
                    "++workload.reader.batch_size=1".into(),
                    "++workload.reader.read_threads=1".into(),
                ],
            );
            verify(ran, &tmp.join("outputs/run"), row);
            let output = read_json(&tmp.join("outputs/run/0_output.json"));
            for epoch in 1..=2 {
                let steps = nums(&output, &format!("/{epoch}/compute/block1")).len();
                assert_eq!(
                    steps, 8,
                    "{row}: epoch {epoch}'s steps on rank 0 (8 files, batch 1)"
                );
            }
        },
    );
}

// ---------------------------------------------------------------------------------------------
// tests/dlio_sample_shuffle_test.py
// ---------------------------------------------------------------------------------------------

/// `test_sample_shuffle_bug`: with seeded sample shuffling (seed 42, a new seed each epoch), 2
/// files of 4 samples, each file's samples 0..4 are read exactly once in the epoch. Upstream
/// builds one rank's sample map; here two ranks train and their traces together must cover
/// every sample once.
#[test]
fn test_sample_shuffle_bug() {
    let tmp = Scratch::new("up-shuffle");
    let ran = dlio(
        &tmp,
        "out",
        &words(
            &[
                "++workload.workflow.generate_data=True",
                "++workload.workflow.train=True",
                "++workload.train.epochs=1",
                "++workload.dataset.num_files_train=2",
                "++workload.dataset.num_samples_per_file=4",
                "++workload.dataset.num_subfolders_train=0",
                "++workload.reader.sample_shuffle=seed",
                "++workload.reader.seed=42",
                "++workload.reader.seed_change_epoch=True",
                "++workload.reader.read_threads=1",
                "++workload.reader.batch_size=1",
                "++workload.output.trace=True",
            ],
            QUICK,
        ),
    );
    let out = tmp.join("out");
    verify(ran, &out, "test_sample_shuffle_bug");
    let mut samples: std::collections::BTreeMap<String, Vec<u64>> = Default::default();
    for ((epoch, phase, _, _), reads) in batches(&out, NP) {
        if epoch == 1 && phase == "train" {
            for (file, sample) in reads {
                let name = file.rsplit('/').next().unwrap().to_string();
                samples.entry(name).or_default().push(sample);
            }
        }
    }
    assert_eq!(samples.len(), 2, "two files read: {samples:?}");
    for (file, mut read) in samples {
        read.sort();
        assert_eq!(read, [0, 1, 2, 3], "{file} should have [0, 1, 2, 3]");
    }
}
