//! The verdict judged from ranks' records of known timings and bytes: each reason raised by the
//! case it is about and absent from a clean run, the category by mlpstorage's rules, and the
//! exit code `--check` gives.

use super::verdict::{Category, Ceiling, Code, Verdict};
use super::{Interruption, Measured, Results};
use crate::config::value::Value;
use crate::config::{Config, DataLoader};
use crate::stats::{Block, EpochRecord, Histogram, PhaseRecord, RankRecord, StepTiming};
use crate::storage::Accounting;

const RECORD: u64 = 1 << 20;
const BATCH: u64 = 4;
const COMPUTE: f64 = 0.01;

/// A workload of 1 MiB samples, batch 4, 10 ms compute, 2 read threads (prefetch_size 8: 4
/// batches ahead per thread, 8 in flight, so a window needs 80 steps).
/// A run's configuration under PyTorch's loader (its read-ahead bound is the one the figures below
/// are chosen around).
fn config_of(workload: &str) -> Config {
    let yaml = format!(
        "dataset:\n  num_files_train: 100000\n  num_samples_per_file: 1\n  record_length_bytes: \
         {RECORD}\nreader:\n  data_loader: pytorch\n  batch_size: {BATCH}\n  read_threads: 2\n  \
         prefetch_size: 8\ntrain:\n  \
         epochs: 2\n  computation_time: {COMPUTE}\n"
    );
    Config::from_tree(workload, Value::from_yaml(&yaml).unwrap()).unwrap()
}

/// How a rank's epochs went.
#[derive(Clone, Copy)]
struct Epochs {
    steps: usize,
    /// Seconds each step waited for its batch (the first step waits `first_load`).
    load: f64,
    first_load: f64,
    /// Bytes read per sample, and the share of them the storage supplied.
    bytes_per_sample: u64,
    from_storage: f64,
    /// How late each compute sleep ended, in ns.
    late_ns: u64,
}

const CLEAN: Epochs = Epochs {
    steps: 100,
    load: 0.0001,
    first_load: 0.0001,
    bytes_per_sample: RECORD,
    from_storage: 1.0,
    late_ns: 1_000,
};

fn rank(rank: usize, epochs: Epochs) -> RankRecord {
    let mut records = Vec::new();
    let mut now = 0.0;
    for epoch in 1..=2 {
        let start = now;
        let mut steps = Vec::new();
        let mut lateness = Histogram::default();
        for step in 0..epochs.steps {
            let load = if step == 0 {
                epochs.first_load
            } else {
                epochs.load
            };
            steps.push(StepTiming {
                load,
                compute: COMPUTE,
                proc: load + COMPUTE,
            });
            lateness.record(epochs.late_ns);
            now += load + COMPUTE;
        }
        let samples = epochs.steps as u64 * BATCH;
        let bytes = samples * epochs.bytes_per_sample;
        let train = PhaseRecord {
            start,
            end: now,
            blocks: vec![Block {
                start,
                end: now,
                steps,
            }],
            samples_read: samples,
            bytes_read: bytes,
            read_latency: Histogram::default(),
            bytes_from_storage: Some((bytes as f64 * epochs.from_storage) as u64),
            compute_lateness: lateness,
        };
        records.push(EpochRecord {
            epoch,
            start,
            end: now,
            train,
            eval: None,
            page_cache_drop_seconds: None,
        });
    }
    RankRecord {
        rank,
        epochs: records,
        checkpoints: Vec::new(),
    }
}

struct Case {
    config: Config,
    epochs: Epochs,
    accounting: Accounting,
    memory: u64,
    interrupted: Option<Interruption>,
    ceiling: Ceiling,
}

impl Case {
    fn clean() -> Case {
        Case {
            config: config_of("t"),
            epochs: CLEAN,
            accounting: Accounting::KernelCounters,
            // 100,000 × 1 MiB ≥ 5 × 16 GiB.
            memory: 16 << 30,
            interrupted: None,
            ceiling: Ceiling::Measured {
                au_percent: 99.5,
                steps: 100,
            },
        }
    }

    fn results(&self) -> Results {
        let ranks = vec![rank(0, self.epochs), rank(1, self.epochs)];
        let measured = Measured {
            accounting: self.accounting.clone(),
            client_memory_bytes: self.memory,
            sample_bytes_as_configured: Some(RECORD as f64),
        };
        Results::from_ranks(
            &self.config,
            &ranks,
            measured,
            self.interrupted,
            self.ceiling.clone(),
        )
    }

    fn codes(&self) -> Vec<Code> {
        self.results()
            .verdict
            .reasons
            .iter()
            .map(|r| r.code)
            .collect()
    }
}

#[test]
fn a_clean_run_is_valid_and_passes() {
    let verdict = Case::clean().results().verdict;
    assert_eq!(verdict.reasons, Vec::new());
    assert_eq!(verdict.au_passed, Some(true));
    assert!(verdict.valid() && !verdict.fails_check());
    assert_eq!(verdict.contradicted_epochs, Vec::<u64>::new());
    assert!(verdict.line().starts_with("Verdict: PASS · VALID · "));
    let json = verdict.to_json();
    assert_eq!(json["valid"], true);
    assert_eq!(json["au_passed"], true);
    assert_eq!(json["host_au_ceiling"]["au_percent"], 99.5);
}

#[test]
fn each_reason_is_raised_by_its_case_alone() {
    type Make = Box<dyn Fn(&mut Case)>;
    let cases: Vec<(Code, Make)> = vec![
        (Code::PageCache, Box::new(|c| c.epochs.from_storage = 0.0)),
        (Code::DatasetSize, Box::new(|c| c.memory = 64 << 30)),
        (Code::MetricWindow, Box::new(|c| c.epochs.steps = 50)),
        (
            Code::FilesNotAsConfigured,
            Box::new(|c| c.epochs.bytes_per_sample = RECORD / 35),
        ),
        (
            // The first step, left out of the window, waited for almost all of the epoch.
            Code::NominalAboveMeasured,
            Box::new(|c| c.epochs.first_load = 2.0),
        ),
        (
            Code::Interrupted,
            Box::new(|c| {
                c.interrupted = Some(Interruption {
                    signal: 2,
                    epochs_planned: 3,
                })
            }),
        ),
        // 10 % of the 10 ms compute, late.
        (
            Code::ComputeLate,
            Box::new(|c| c.epochs.late_ns = 1_000_000),
        ),
        (
            Code::HostCeiling,
            Box::new(|c| {
                c.ceiling = Ceiling::Measured {
                    au_percent: 80.0,
                    steps: 100,
                }
            }),
        ),
        (
            Code::StorageBytesUnknown,
            Box::new(|c| c.accounting = Accounting::Unaccounted("nfs".into())),
        ),
        (
            Code::NoStorage,
            Box::new(|c| c.config.reader.data_loader = DataLoader::Synthetic),
        ),
    ];
    for (code, make) in cases {
        let mut case = Case::clean();
        make(&mut case);
        assert_eq!(case.codes(), vec![code], "{}", code.name());
        let verdict = case.results().verdict;
        assert!(verdict.fails_check() && !verdict.valid());
        let reason = &verdict.reasons[0];
        assert!(!reason.message.is_empty() && !reason.fix.is_empty());
        assert!(verdict.line().contains(code.name()), "{}", verdict.line());
        assert!(verdict.render().contains(&reason.fix));
        assert_eq!(verdict.to_json()["reasons"][0]["code"], code.name());
    }
}

#[test]
fn bounds_sit_where_docs_say() {
    // 80 steps in the window (81 - 1 excluded) are enough for 8 batches in flight; 79 are not.
    let mut case = Case::clean();
    case.epochs.steps = 81;
    assert_eq!(case.codes(), Vec::<Code>::new());
    case.epochs.steps = 80;
    assert_eq!(case.codes(), vec![Code::MetricWindow]);
    // Samples 1.5 × the record length are as configured; 1.6 × are not.
    let mut case = Case::clean();
    case.epochs.bytes_per_sample = RECORD * 3 / 2;
    assert_eq!(case.codes(), Vec::<Code>::new());
    case.epochs.bytes_per_sample = RECORD * 16 / 10;
    assert_eq!(case.codes(), vec![Code::FilesNotAsConfigured]);
    let verdict = case.results().verdict;
    assert_eq!(verdict.contradicted_epochs, vec![1, 2]);
    // Compute 4 % late passes; 6 % does not.
    let mut case = Case::clean();
    case.epochs.late_ns = 400_000;
    assert_eq!(case.codes(), Vec::<Code>::new());
    case.epochs.late_ns = 600_000;
    assert_eq!(case.codes(), vec![Code::ComputeLate]);
    // A ceiling at the threshold is not below it.
    let mut case = Case::clean();
    case.ceiling = Ceiling::Measured {
        au_percent: 90.0,
        steps: 10,
    };
    assert_eq!(case.codes(), Vec::<Code>::new());
    // A cache share of 10 % is allowed, 11 % is not.
    let mut case = Case::clean();
    case.epochs.from_storage = 0.90;
    assert_eq!(case.codes(), Vec::<Code>::new());
    case.epochs.from_storage = 0.89;
    assert_eq!(case.codes(), vec![Code::PageCache]);
}

#[test]
fn reasons_come_together_and_a_fail_fails_the_check() {
    let mut case = Case::clean();
    case.epochs.from_storage = 0.0;
    case.memory = 64 << 30;
    case.epochs.steps = 3;
    assert_eq!(
        case.codes(),
        vec![Code::PageCache, Code::DatasetSize, Code::MetricWindow]
    );
    // A slow storage: AU below the threshold, valid.
    let mut case = Case::clean();
    case.epochs.load = COMPUTE;
    case.epochs.first_load = COMPUTE;
    let verdict = case.results().verdict;
    assert_eq!(verdict.au_passed, Some(false));
    assert!(verdict.valid() && verdict.fails_check());
    assert!(verdict.line().starts_with("Verdict: FAIL · VALID"));
}

#[test]
fn a_small_dataset_is_a_reason_only_while_the_cache_can_serve_it() {
    let mut case = Case::clean();
    case.memory = 64 << 30;
    assert_eq!(case.codes(), vec![Code::DatasetSize]);
    // With the page cache kept out, the reads are the storage's: valid, and said as a bar to
    // MLPerf's categories instead.
    case.config.reader.odirect = true;
    assert_eq!(case.codes(), Vec::<Code>::new());
    // With the cache kept out, unknown storage bytes are no reason either.
    let mut case = Case::clean();
    case.config.reader.odirect = true;
    case.accounting = Accounting::Unaccounted("nfs".into());
    assert_eq!(case.codes(), Vec::<Code>::new());
    // A closed unet3d run becomes uncategorised by a dataset short of the rule.
    let unet3d = |files: u64| {
        let mut case = Case::clean();
        case.config = resolved(
            "unet3d_h100",
            &[
                &format!("++workload.dataset.num_files_train={files}"),
                "++workload.reader.odirect=True",
            ],
        );
        case.results().verdict
    };
    // 2 ranks × batch 7 × 500 steps: 7000 files (5 × 16 GiB of 146,600,628-byte files is 585).
    let closed = unet3d(7000);
    assert_eq!(closed.category.name(), "closed", "{:?}", closed.category);
    let short = unet3d(6999);
    assert_eq!(short.category.name(), "none");
    let note = short.category.note().unwrap();
    assert!(
        note.contains(
            "the training dataset has 6999 file(s); MLPerf Storage's rule asks for at least 7000"
        ),
        "{note}"
    );
}

fn resolved(workload: &str, words: &[&str]) -> Config {
    let source = crate::config::Source {
        overrides: crate::config::overrides::Overrides::parse(
            &std::iter::once(format!("workload={workload}"))
                .chain(words.iter().map(|w| w.to_string()))
                .collect::<Vec<_>>(),
        )
        .unwrap(),
        config_dir: None,
    };
    source.resolve(false).unwrap()
}

fn category(workload: &str, words: &[&str], world: u64) -> Category {
    Category::of(&resolved(workload, words), world, None)
}
#[test]
fn the_category_follows_mlpstorages_rules() {
    let closed = category(
        "unet3d_h100",
        &[
            "++workload.dataset.num_files_train=5000",
            "++workload.dataset.data_folder=/mnt/x",
            "++workload.reader.read_threads=8",
            "++workload.workflow.generate_data=True",
            // The workload's own value is no change.
            "++workload.reader.batch_size=7",
        ],
        8,
    );
    assert_eq!(closed.name(), "closed");
    assert_eq!(
        closed.changed_keys(),
        [
            "dataset.data_folder",
            "dataset.num_files_train",
            "reader.read_threads"
        ]
    );
    assert_eq!(closed.note(), None);
    let open = category(
        "resnet50_h100",
        &[
            "++workload.dataset.format=npz",
            "++workload.framework=pytorch",
        ],
        4,
    );
    assert_eq!(open.name(), "open");
    assert_eq!(open.changed_keys(), ["framework", "dataset.format"]);
    assert_eq!(
        open.describe(),
        "OPEN (changed from the workload: framework, dataset.format): OPEN because of \
         framework, dataset.format"
    );
    assert_eq!(
        closed.describe(),
        "CLOSED (changed from the workload: dataset.data_folder, dataset.num_files_train, \
         reader.read_threads)"
    );
    for (workload, words, why) in [
        (
            "unet3d_h100",
            &["++workload.dataset.record_length_bytes=4096"][..],
            "dataset.record_length_bytes",
        ),
        (
            "resnet50_a100",
            &["++workload.reader.odirect=True"][..],
            "reader.odirect is allowed for unet3d only",
        ),
        (
            "unet3d_a100",
            &["++workload.workflow.checkpoint=False"][..],
            "unet3d training must run its checkpoints",
        ),
        (
            "cosmoflow_h100",
            &["~workload.train.computation_time"][..],
            "train.computation_time",
        ),
        ("dlrm", &[][..], "not an MLPerf Storage workload"),
    ] {
        let none = category(workload, words, 4);
        assert_eq!(none.name(), "none", "{workload} {words:?}");
        let note = none.note().unwrap();
        assert!(note.contains(why), "{note}");
    }
    // Removing a key is a change too, and a key added with the workload's own value is not.
    assert_eq!(
        category("llama3_8b", &[], 8).name(),
        "closed",
        "8 ranks, as mlpstorage's closed rule"
    );
    assert_eq!(category("llama3_70b", &[], 64).name(), "closed");
    assert_eq!(category("llama3_70b", &[], 16).name(), "open");
    assert_eq!(category("llama3_70b", &[], 12).name(), "none");
}

#[test]
fn a_run_without_a_measured_epoch_has_no_au_verdict() {
    let mut case = Case::clean();
    case.config.output.exclude_start_steps = 200;
    let verdict = case.results().verdict;
    assert_eq!(verdict.au_passed, None);
    assert!(verdict
        .line()
        .starts_with("Verdict: no AU verdict · NOT VALID (metric_window"));
    let judged = Verdict::judge(&case.config, &case.results(), Ceiling::Skipped("x".into()));
    assert!(judged
        .render()
        .contains("Host AU ceiling: not measured (x)"));
}

/// The metric window's bound follows the loader: each holds batches ahead its own way.
#[test]
fn batches_read_ahead_follow_each_loader() {
    let ahead = |loader: &str, format: &str, prefetch: u64| {
        let yaml = format!(
            "dataset:\n  format: {format}\nreader:\n  data_loader: {loader}\n  batch_size: 32\n  \
             read_threads: 4\n  prefetch_size: {prefetch}\n  shuffle_size: 1024\n  \
             sample_shuffle: seed\n"
        );
        let config = Config::from_tree("t", Value::from_yaml(&yaml).unwrap()).unwrap();
        super::verdict::batches_read_ahead(&config).0
    };
    // PyTorch: 4 threads × ceil(8 / 4).
    assert_eq!(ahead("pytorch", "npz", 8), 8);
    // tf.data over TFRecord: 2 batches, 1 in the map (computation_threads) + ceil((1024 + 12
    // files × 2 records) / 32).
    assert_eq!(ahead("tensorflow", "tfrecord", 2), 2 + 1 + 33);
    // DLIO's generators: 2 batches + 2 per generator.
    assert_eq!(ahead("tensorflow", "npz", 2), 2 + 8);
    // DALI: its depth, 2 when prefetch_size is 0.
    assert_eq!(ahead("dali", "npz", 0), 2);
    assert_eq!(ahead("dali", "npz", 3), 3);
    // Native DALI: its queue (prefetch_size, 1 when 0), the pipeline's 2 outputs and the
    // shuffle buffer's fill of 1024 in batches of 32.
    assert_eq!(ahead("native_dali", "npy", 0), 1 + 2 + 32);
    assert_eq!(ahead("native_dali", "npy", 3), 3 + 2 + 32);
}
