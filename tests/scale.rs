//! End-to-end tests of how a run finds its files: names that follow DLIO's scheme are checked on a
//! sample and never listed (with `skip_listing`, a missing one is named before training); names
//! that do not are listed once and read in DLIO's order; a dataset whose generation did not
//! finish is refused.

use std::path::Path;

use crate::common::*;

fn shape(files: u64, epochs: u64) -> Shape {
    Shape {
        files,
        samples_per_file: 2,
        batch: 2,
        threads: 2,
        epochs,
    }
}

/// Overrides that keep the default workload's files in one folder and skip evaluation.
const FLAT_TRAIN_ONLY: [&str; 2] = [
    "++workload.dataset.num_subfolders_train=0",
    "++workload.workflow.evaluation=False",
];

/// The `file` column of a rank's trace, in row order.
fn files_read(out: &Path, rank: usize) -> Vec<String> {
    let trace = std::fs::read_to_string(out.join(format!("trace/{rank}.csv"))).unwrap();
    trace
        .lines()
        .skip(1)
        .map(|row| row.split(',').nth(5).unwrap().to_string())
        .collect()
}

fn rename(data: &Path, from: &str, to: &str) {
    let to = data.join(to);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::rename(data.join(from), to).unwrap();
}

#[test]
fn names_that_do_not_follow_the_scheme_are_listed_and_every_sample_read_once() {
    let tmp = Scratch::new("listed");
    let data = tmp.join("data");
    let out = tmp.join("out");
    let shuffled = [
        "++workload.reader.file_shuffle=seed",
        "++workload.reader.sample_shuffle=seed",
    ];
    let words = with(
        &traced_words(&data, &out, &shape(10, 2), &shuffled),
        &FLAT_TRAIN_ONLY,
    );
    generate_for(
        &tmp.path,
        &with(&words, &["++workload.dataset.num_files_train=12"]),
    );
    // Twelve files under other names; the run takes the first ten in sorted order, so the two
    // named to sort last are never read. Hidden files and other formats are not data.
    for i in 0..12 {
        let name = if i < 10 {
            format!("shot-{}.npz", 9 - i)
        } else {
            format!("zz-extra-{i}.npz")
        };
        rename(
            &data,
            &format!("train/img_{i:02}_of_12.npz"),
            &format!("train/{name}"),
        );
    }
    std::fs::write(data.join("train/notes.txt"), "not data").unwrap();
    std::fs::write(data.join("train/.half-written.npz"), "not data").unwrap();

    run_quiet(&tmp.path, 2, &words).ok();
    let report = read_json(&out.join("report.json"));
    let names = at(&report, "/startup/file_names/0");
    assert_eq!(names["method"], "listed", "{names}");
    assert_eq!(int(names, "/listed"), 12);
    let (code, audit_report, ran) = audit(&tmp.path, &out);
    assert_eq!(code, Some(0), "{}", ran.context());
    assert_eq!(int(&audit_report, "/violations"), 0);
    let mut read: Vec<String> = (0..2).flat_map(|rank| files_read(&out, rank)).collect();
    read.sort();
    read.dedup();
    let expected: Vec<String> = (0..10).map(|i| format!("train/shot-{i}.npz")).collect();
    assert_eq!(read, expected);

    // The same files with skip_listing: the scheme's first name is missing, and said so.
    let skip = with(&words, &["++workload.dataset.skip_listing=True"]);
    run_quiet(&tmp.path, 2, &skip)
        .fails(2)
        .says(&["img_00_of_10.npz is missing", "skip_listing=False"]);
}

#[test]
fn listed_subfolders_are_read_in_dlio_s_order_of_file_names() {
    let tmp = Scratch::new("listed-sub");
    let data = tmp.join("data");
    let out = tmp.join("out");
    let mut words = traced_words(
        &data,
        &out,
        &shape(6, 1),
        &[
            "++workload.workflow.evaluation=False",
            "++workload.dataset.num_subfolders_train=3",
            "++workload.dataset.num_samples_per_file=1",
            "++workload.reader.read_threads=0",
        ],
    );
    words.push("++workload.reader.batch_size=1".into());
    generate_for(&tmp.path, &words);
    // DLIO sorts a split with subfolders by file name alone, whatever the subfolder.
    let renamed = [
        (0, "0/c.npz"),
        (1, "1/a.npz"),
        (2, "2/f.npz"),
        (3, "0/b.npz"),
        (4, "1/e.npz"),
        (5, "2/d.npz"),
    ];
    for (i, to) in renamed {
        rename(
            &data,
            &format!("train/{}/img_{i}_of_6.npz", i % 3),
            &format!("train/{to}"),
        );
    }
    run_quiet(&tmp.path, 1, &words).ok();
    let in_order: Vec<String> = ["1/a", "0/b", "0/c", "2/d", "1/e", "2/f"]
        .iter()
        .map(|n| format!("train/{n}.npz"))
        .collect();
    assert_eq!(files_read(&out, 0), in_order);
}

#[test]
fn with_skip_listing_a_missing_file_is_named_before_training() {
    let tmp = Scratch::new("skip-listing");
    let data = tmp.join("data");
    let out = tmp.join("out");
    let words = traced_words(&data, &out, &shape(20, 1), &FLAT_TRAIN_ONLY);
    generate_for(&tmp.path, &words);
    let skip = with(
        &words,
        &[
            "++workload.dataset.skip_listing=True",
            "++workload.dataset.listing_validation_interval=5",
        ],
    );
    let started = std::time::Instant::now();
    run_quiet(&tmp.path, 2, &skip).ok();
    let wall = started.elapsed().as_secs_f64();
    let report = read_json(&out.join("report.json"));
    let names = at(&report, "/startup/file_names/0");
    assert_eq!(names["method"], "scheme", "{names}");
    assert_eq!(int(names, "/checked"), 5, "0, 5, 10, 15 and 19");
    // The first batch arrives after every rank's first load and before the process ends.
    let first_batch = num(&report, "/startup/first_batch_seconds");
    for rank in 0..2 {
        let output = read_json(&out.join(format!("{rank}_output.json")));
        let first_load = nums(&output, "/1/load/block1")[0];
        assert!(first_batch >= first_load, "{first_batch} < {first_load}");
    }
    assert!(first_batch < wall, "{first_batch} ≥ the process's {wall} s");

    std::fs::remove_file(data.join("train/img_10_of_20.npz")).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    run_quiet(&tmp.path, 1, &skip).fails(2).says(&[
        "train/img_10_of_20.npz is missing",
        "every 5th file, 2 present before it",
    ]);
    // Refused before training: the run's report says it failed, and holds no results.
    let report = read_json(&out.join("report.json"));
    assert_eq!(at(&report, "/status").as_str(), Some("failed"), "{report}");
    assert!(report.get("epochs").is_none(), "{report}");

    // A file between the sampled ones is found missing only when read: a failed run naming it.
    std::fs::rename(
        data.join("train/img_11_of_20.npz"),
        data.join("train/img_10_of_20.npz"),
    )
    .unwrap();
    run_quiet(&tmp.path, 1, &skip)
        .fails(1)
        .says(&["img_11_of_20.npz"]);
}

#[test]
fn a_dataset_whose_generation_did_not_finish_is_refused() {
    let tmp = Scratch::new("incomplete");
    let data = tmp.join("data");
    let out = tmp.join("out");
    let words = traced_words(&data, &out, &shape(4, 1), &FLAT_TRAIN_ONLY);
    generate_for(&tmp.path, &words);
    let marker = data.join(".dlio-rs-generating");
    assert!(!marker.exists(), "a finished generation removes its marker");
    run_quiet(&tmp.path, 1, &words).ok();
    std::fs::write(&marker, "interrupted").unwrap();
    run_quiet(&tmp.path, 1, &words).fails(2).says(&[
        "incomplete",
        ".dlio-rs-generating",
        "generate_data=True",
    ]);
}
