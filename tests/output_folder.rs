//! A run owns its output folder: a second run into a held folder stops at once (exit 2, naming the
//! folder and the holder's pid); a run clears the results an earlier run left, whatever becomes of
//! it; a run that fails records why in dlio.log and report.json; a usage error leaves the folder
//! alone.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::Path;

use crate::common::*;

/// A run that needs no data: the synthetic format, one short epoch.
fn quick_run(out: &Path) -> Vec<String> {
    let mut words = strings(&[
        "workload=default",
        "++workload.dataset.format=synthetic",
        "++workload.dataset.num_files_train=4",
        "++workload.dataset.num_samples_per_file=2",
        "++workload.reader.batch_size=2",
        "++workload.train.epochs=1",
        "++workload.train.computation_time=0",
        "++workload.workflow.generate_data=False",
        "++workload.workflow.evaluation=False",
        "++workload.workflow.checkpoint=False",
    ]);
    words.push(format!("++hydra.run.dir={}", out.display()));
    words
}

/// Files an earlier run (of 8 ranks) left, and one of the user's.
fn leave_earlier_results(out: &Path) {
    std::fs::create_dir_all(out).unwrap();
    for name in [
        "summary.json",
        "report.json",
        "dlio.log",
        "0_output.json",
        "7_output.json",
        "7_per_epoch_stats.json",
    ] {
        std::fs::write(out.join(name), "the earlier run's").unwrap();
    }
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_run_clears_the_results_an_earlier_run_left_and_nothing_else() {
    let tmp = Scratch::new("folder-clears");
    let out = tmp.join("out");
    leave_earlier_results(&out);
    run_quiet(&tmp.path, 1, &quick_run(&out)).ok();
    for gone in ["7_output.json", "7_per_epoch_stats.json"] {
        assert!(!out.join(gone).exists(), "{gone} is left");
    }
    for name in ["summary.json", "report.json", "0_output.json"] {
        assert!(
            read(&out.join(name)).starts_with('{'),
            "{name} is not this run's"
        );
    }
    let report = read_json(&out.join("report.json"));
    assert_eq!(at(&report, "/status").as_str(), Some("complete"));
    assert!(read(&out.join("dlio.log")).contains("Running DLIO"));
    assert_eq!(read(&out.join("notes.txt")), "mine");
}

#[test]
fn a_run_that_fails_leaves_its_error_and_no_earlier_results() {
    let tmp = Scratch::new("folder-failed");
    let out = tmp.join("out");
    leave_earlier_results(&out);
    let mut words = quick_run(&out);
    words.extend(strings(&["++workload.dataset.format=npz"]));
    words.push(format!(
        "++workload.dataset.data_folder={}",
        tmp.s("missing")
    ));
    let ran = run_quiet(&tmp.path, 1, &words).fails(2);
    let error = ran
        .stderr
        .lines()
        .find(|l| l.starts_with("error: "))
        .unwrap();
    let error = error.strip_prefix("error: ").unwrap();
    for gone in ["summary.json", "0_output.json", "7_output.json"] {
        assert!(!out.join(gone).exists(), "{gone} is left");
    }
    let report = read_json(&out.join("report.json"));
    assert_eq!(at(&report, "/status").as_str(), Some("failed"));
    assert_eq!(at(&report, "/error").as_str(), Some(error));
    assert_eq!(int(&report, "/exit_code"), 2);
    let log = read(&out.join("dlio.log"));
    assert!(log.lines().last().unwrap().contains("[ERROR]"), "{log}");
    assert!(log.contains(error), "{log}");
    assert_eq!(read(&out.join("notes.txt")), "mine");
}

#[test]
fn a_usage_error_leaves_the_folder_as_it_was() {
    let tmp = Scratch::new("folder-usage");
    let out = tmp.join("out");
    leave_earlier_results(&out);
    let words = with(&quick_run(&out), &["++workload.train.epochs=-3"]);
    run_quiet(&tmp.path, 1, &words).fails(2);
    for name in ["summary.json", "report.json", "dlio.log", "7_output.json"] {
        assert_eq!(read(&out.join(name)), "the earlier run's", "{name}");
    }
}

#[test]
fn a_second_run_into_a_held_folder_stops_at_once_naming_the_holder() {
    let tmp = Scratch::new("folder-held");
    let out = tmp.join("out");
    leave_earlier_results(&out);
    // This test holds the folder as a run does: an flock on its lock file, with a pid in it.
    let mut lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(out.join(".dlio-rs.lock"))
        .unwrap();
    lock.write_all(b"424242").unwrap();
    // SAFETY: a plain system call on a descriptor this test owns.
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let (ran, took) = run_bounded(
        {
            let mut cmd = std::process::Command::new(DLIO_RS);
            cmd.current_dir(&tmp.path)
                .args(["run", "-q"])
                .args(quick_run(&out));
            cmd
        },
        "a run into a held folder".into(),
        std::time::Duration::from_secs(60),
    );
    let ran = ran.fails(2);
    assert!(took.as_secs_f64() < 10.0, "waited {took:?}");
    ran.says(&[&out.display().to_string(), "pid 424242", "in use"]);
    // Nothing of the holder's was touched.
    assert_eq!(read(&out.join("summary.json")), "the earlier run's");
    assert_eq!(read(&out.join(".dlio-rs.lock")), "424242");
    drop(lock);
    // Let go, the folder is the next run's.
    run_quiet(&tmp.path, 1, &quick_run(&out)).ok();
    assert_eq!(
        read(&out.join(".dlio-rs.lock")),
        "",
        "a run's pid is in the lock file only while it runs"
    );
}
