//! Signals and concurrent runs, with real processes: SIGINT/SIGTERM stop a run cleanly with the
//! results of the epochs every rank completed, marked interrupted; a second signal ends the
//! process at once; a generation killed or still running is never taken for a dataset, and two
//! generations never share a data folder.
//!
//! The tests synchronize on what the process says (its progress lines) or leaves (the
//! generation's marker and files), each wait bounded; never on sleeps.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::*;

/// A training run of `epochs` epochs of about a second each, on `ranks` ranks, needing no data
/// (the synthetic format): 4 steps per rank and epoch of 0.25 s of compute.
fn training(out: &Path, ranks: usize, epochs: u64) -> Vec<String> {
    let mut words = strings(&[
        "run",
        "-n",
        &ranks.to_string(),
        "workload=default",
        "++workload.dataset.format=synthetic",
        "++workload.dataset.num_samples_per_file=1",
        "++workload.reader.batch_size=1",
        "++workload.train.computation_time=0.25",
        "++workload.workflow.generate_data=False",
        "++workload.workflow.evaluation=False",
        "++workload.workflow.checkpoint=False",
    ]);
    words.push(format!("++workload.dataset.num_files_train={}", 4 * ranks));
    words.push(format!("++workload.train.epochs={epochs}"));
    words.push(format!("++hydra.run.dir={}", out.display()));
    words
}

/// The epochs in a rank's `N_output.json`: its keys that are epoch numbers.
fn epochs_of(rank_file: &Value) -> usize {
    rank_file
        .as_object()
        .unwrap()
        .keys()
        .filter(|k| k.parse::<u64>().is_ok())
        .count()
}

fn interrupted_mid_run(signal: i32, code: i32, name: &str) {
    let tmp = Scratch::new("interrupt-mid-run");
    let out = tmp.join("out");
    // An earlier, complete run of 4 ranks: none of its files may survive the interrupted one.
    run_quiet(&tmp.path, 4, &training(&out, 4, 1)[3..]).ok();
    assert!(out.join("3_output.json").exists());
    let earlier = read_json(&out.join("summary.json"));
    assert_eq!(at(&earlier, "/metric/train_au_meet_expectation"), "success");
    // Its page's charts, as `report --png` writes them, beside a file of the user's.
    std::fs::create_dir_all(out.join("charts")).unwrap();
    for name in ["01-au.png", "01-au.svg", "notes.txt"] {
        std::fs::write(out.join("charts").join(name), "earlier").unwrap();
    }

    let mut words = training(&out, 2, 3);
    words.insert(1, "--trace".into());
    let mut run = Live::dlio_rs(&tmp.path, &words);
    // The training phase of epoch 2 is over, so epoch 1 is complete everywhere; epoch 3 is not.
    run.wait_for("epoch 2/3 train");
    run.signal(signal);
    let (ran, took) = run.finish();
    assert_eq!(ran.code, Some(code), "{}", ran.context());
    assert!(took < Duration::from_secs(1), "stopping took {took:?}");

    let summary = read_json(&out.join("summary.json"));
    let report = read_json(&out.join("report.json"));
    let completed = int(&summary, "/interrupted/epochs_completed") as usize;
    // Epoch 2 counts when the signal came after every rank ended it; epoch 3 cannot.
    assert!(
        (1..=2).contains(&completed),
        "{completed}\n{}",
        ran.context()
    );
    assert_eq!(at(&summary, "/interrupted/signal"), name);
    assert_eq!(int(&summary, "/interrupted/epochs_planned"), 3);
    assert_eq!(int(&summary, "/epochs") as usize, completed);
    assert_eq!(at(&report, "/status"), "interrupted");
    assert_eq!(at(&report, "/epochs").as_array().unwrap().len(), completed);
    let epochs: Vec<u64> = at(&report, "/epochs")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["epoch"].as_u64().unwrap())
        .collect();
    assert_eq!(epochs, (1..=completed as u64).collect::<Vec<_>>());
    assert_eq!(
        nums(&summary, "/metric/train_au_percentage").len(),
        completed
    );
    // Every rank's files hold the same completed epochs; the earlier run's ranks 2 and 3 are gone.
    for rank in 0..2 {
        let per_epoch = read_json(&out.join(format!("{rank}_per_epoch_stats.json")));
        assert_eq!(
            per_epoch.as_object().unwrap().len(),
            completed,
            "rank {rank}"
        );
        assert_eq!(
            epochs_of(&read_json(&out.join(format!("{rank}_output.json")))),
            completed
        );
    }
    // The run did not complete: mlpstorage's field says so, whatever its epochs' AU; the page is
    // this run's, and never a green PASS.
    assert_eq!(at(&summary, "/metric/train_au_meet_expectation"), "fail");
    let page = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(page.contains("data-code=\"interrupted\""), "{page}");
    assert!(!page.contains("class=\"verdict pass\""), "{page}");
    assert!(!out.join("charts/01-au.png").exists() && !out.join("charts/01-au.svg").exists());
    assert!(
        out.join("charts/notes.txt").exists(),
        "a file of the user's was removed"
    );
    for gone in ["2_output.json", "3_output.json", "3_per_epoch_stats.json"] {
        assert!(
            !out.join(gone).exists(),
            "{gone} of the earlier run is left"
        );
    }
    let log = std::fs::read_to_string(out.join("dlio.log")).unwrap();
    let said = format!("interrupted by {name} after {completed} of 3 epoch(s)");
    assert!(
        log.lines()
            .any(|l| l.starts_with("[WARNING]") && l.contains(&said)),
        "{log}"
    );
    assert!(ran.stdout.contains(&format!("interrupted by {name}")));
    // Its trace is audited over the epochs it completed, the cut one's rows left unjudged.
    let audited = dlio_rs(&tmp.path, &["audit", &out.display().to_string()]).ok();
    for said in [
        &format!("interrupted: the {completed} completed epoch(s) checked") as &str,
        "access pattern: audit passed",
    ] {
        assert!(audited.stdout.contains(said), "{}", audited.context());
    }
}

#[test]
fn sigint_mid_run_leaves_the_completed_epochs_marked_interrupted() {
    interrupted_mid_run(libc::SIGINT, 130, "SIGINT");
}

#[test]
fn sigterm_mid_run_leaves_the_completed_epochs_marked_interrupted() {
    interrupted_mid_run(libc::SIGTERM, 143, "SIGTERM");
}

#[test]
fn a_run_stopped_before_any_epoch_completed_reports_nothing_but_the_interruption() {
    let tmp = Scratch::new("interrupt-first-epoch");
    let out = tmp.join("out");
    let mut run = Live::dlio_rs(&tmp.path, &training(&out, 2, 2));
    // Said as training starts; a 1 s epoch cannot have ended by now.
    run.wait_for("training: 2 accelerator(s), 2 epoch(s) of 4 step(s)");
    run.signal(libc::SIGTERM);
    let (ran, took) = run.finish();
    let ran = ran.fails(143).says(&["interrupted by SIGTERM"]);
    assert!(took < Duration::from_secs(1), "stopping took {took:?}");
    assert!(!out.join("summary.json").exists(), "{}", ran.context());
    let report = read_json(&out.join("report.json"));
    assert_eq!(at(&report, "/status"), "interrupted");
    assert_eq!(at(&report, "/exit_code"), 143);
}

#[test]
fn a_checkpoint_only_run_stopped_reports_the_checkpoints_every_rank_completed() {
    let tmp = Scratch::new("interrupt-checkpoints");
    let out = tmp.join("out");
    let mut words = strings(&[
        "run",
        "-n",
        "2",
        "workload=default",
        "++workload.workflow.train=False",
        "++workload.workflow.checkpoint=True",
        "++workload.workflow.evaluation=False",
        "++workload.model.model_size_bytes=4096",
        "++workload.checkpoint.num_checkpoints_write=4",
        "++workload.checkpoint.num_checkpoints_read=0",
        "++workload.checkpoint.time_between_checkpoints=1",
    ]);
    words.push(format!(
        "++workload.checkpoint.checkpoint_folder={}",
        tmp.s("ckpt")
    ));
    words.push(format!("++hydra.run.dir={}", out.display()));
    let mut run = Live::dlio_rs(&tmp.path, &words);
    // The second save has begun, so every rank completed the first (a barrier comes between);
    // the fourth is two pauses of a second away.
    let second = tmp.join("ckpt/global_epoch1_step2");
    let deadline = Instant::now() + LIVE_BOUND;
    while !second.exists() {
        assert!(
            run.try_wait().is_none(),
            "the run ended before its second save"
        );
        assert!(
            Instant::now() < deadline,
            "no second save in {LIVE_BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    run.signal(libc::SIGINT);
    let (ran, took) = run.finish();
    assert_eq!(ran.code, Some(130), "{}", ran.context());
    assert!(took < Duration::from_secs(1), "stopping took {took:?}");
    let report = read_json(&out.join("report.json"));
    assert_eq!(at(&report, "/status"), "interrupted", "{}", ran.context());
    let completed = int(&report, "/interrupted/checkpoints_completed") as usize;
    assert!((1..=3).contains(&completed), "{completed}");
    assert_eq!(
        at(&report, "/checkpoints/list").as_array().unwrap().len(),
        completed
    );
    assert_eq!(int(&report, "/interrupted/epochs_planned"), 0);
}

#[test]
fn a_second_signal_ends_the_process_at_once() {
    let tmp = Scratch::new("interrupt-twice");
    let out = tmp.join("out");
    let mut run = Live::dlio_rs(&tmp.path, &training(&out, 1, 3));
    // Epoch 1 is complete: a clean stop would report it.
    run.wait_for("epoch 2/3 train");
    // Stopped, the process gets both signals pending and handles them back to back when it
    // continues (in either order): the first asks for a clean stop, the second ends it before it
    // writes anything, with its own code.
    run.signal(libc::SIGSTOP);
    run.signal(libc::SIGINT);
    run.signal(libc::SIGTERM);
    run.signal(libc::SIGCONT);
    let (ran, _) = run.finish();
    assert!(matches!(ran.code, Some(130 | 143)), "{}", ran.context());
    assert!(
        !out.join("summary.json").exists(),
        "a clean stop would have reported epoch 1; the second signal ended the process first"
    );
}

#[test]
fn one_signal_delivered_twice_is_one_request_to_stop() {
    // `timeout` sends its signal to the process, then to the process's group: two deliveries of
    // one request, which must stop the run cleanly, not end it at once.
    let tmp = Scratch::new("interrupt-delivered-twice");
    let out = tmp.join("out");
    let mut run = Live::dlio_rs(&tmp.path, &training(&out, 1, 3));
    run.wait_for("epoch 2/3 train");
    run.signal(libc::SIGINT);
    wait_until_delivered(&run, libc::SIGINT);
    run.signal(libc::SIGINT);
    let (ran, _) = run.finish();
    assert_eq!(ran.code, Some(130), "{}", ran.context());
    let said = format!("{}{}", ran.stdout, ran.stderr);
    assert!(said.contains("interrupted by SIGINT"), "{}", ran.context());
    // The clean stop reported what was complete; an end at once would have left nothing.
    let summary = read_json(&out.join("summary.json"));
    let completed = int(&summary, "/interrupted/epochs_completed");
    assert!((1..=2).contains(&completed), "{}", ran.context());
    assert_eq!(
        at(&read_json(&out.join("report.json")), "/status"),
        "interrupted"
    );
}

/// Waits (bounded) until `signal`, sent to the whole process, is no longer pending in it: a
/// thread has taken it, so the next one sent is a delivery of its own.
fn wait_until_delivered(run: &Live, signal: i32) {
    let status = format!("/proc/{}/status", run.pid());
    let bit = 1u64 << (signal - 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&status).unwrap();
        let pending = text
            .lines()
            .find_map(|l| l.strip_prefix("ShdPnd:"))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .unwrap();
        if pending & bit == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{signal} still pending after 10 s"
        );
        std::thread::yield_now();
    }
}

/// Generation of `files` npz files of 1 MiB into `data`.
fn generation(data: &Path, files: u64) -> Vec<String> {
    let mut words = strings(&[
        "run",
        "-q",
        "workload=unet3d_h100",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.train=False",
        "++workload.workflow.checkpoint=False",
        "++workload.dataset.record_length_bytes=1048576",
        "++workload.dataset.record_length_bytes_stdev=0",
    ]);
    words.push(format!("++workload.dataset.num_files_train={files}"));
    words.push(format!("++workload.dataset.data_folder={}", data.display()));
    words
}

fn training_on(data: &Path, files: u64, out: &Path) -> Vec<String> {
    let mut words = strings(&[
        "workload=unet3d_h100",
        "++workload.workflow.checkpoint=False",
        "++workload.dataset.record_length_bytes=1048576",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.train.epochs=1",
        "++workload.train.computation_time=0",
        "++workload.reader.batch_size=1",
    ]);
    words.push(format!("++workload.dataset.num_files_train={files}"));
    words.push(format!("++workload.dataset.data_folder={}", data.display()));
    words.push(format!("++hydra.run.dir={}", out.display()));
    words
}

/// Waits until a generation into `data` is under way: its marker and at least one file exist.
fn wait_until_generating(data: &Path, generation: &mut Live) {
    let deadline = Instant::now() + LIVE_BOUND;
    loop {
        let marker = data.join(".dlio-rs-generating").exists();
        let files = std::fs::read_dir(data.join("train")).map_or(0, |d| d.count());
        if marker && files > 0 {
            return;
        }
        if let Some(status) = generation.try_wait() {
            panic!("the generation ended ({status}) before it could be caught at work");
        }
        assert!(
            Instant::now() < deadline,
            "no generation under way in {LIVE_BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_killed_generation_is_never_taken_for_a_dataset() {
    let tmp = Scratch::new("generation-killed");
    let data = tmp.join("data");
    let files = 4000;
    let mut generating = Live::dlio_rs(&tmp.path, &generation(&data, files));
    wait_until_generating(&data, &mut generating);
    generating.signal(libc::SIGKILL);
    let (killed, _) = generating.finish();
    assert_eq!(killed.code, None, "killed by the signal");
    run_quiet(&tmp.path, 1, &training_on(&data, files, &tmp.join("out")))
        .fails(2)
        .says(&["incomplete", "generation did not finish"]);
}

#[test]
fn an_interrupted_generation_stops_at_once_and_stays_incomplete() {
    let tmp = Scratch::new("generation-interrupted");
    let data = tmp.join("data");
    let files = 4000;
    let mut generating = Live::dlio_rs(&tmp.path, &generation(&data, files));
    wait_until_generating(&data, &mut generating);
    generating.signal(libc::SIGINT);
    let (ran, took) = generating.finish();
    ran.fails(130).says(&["interrupted by SIGINT"]);
    assert!(took < Duration::from_secs(1), "stopping took {took:?}");
    assert!(data.join(".dlio-rs-generating").exists());
    run_quiet(&tmp.path, 1, &training_on(&data, files, &tmp.join("out")))
        .fails(2)
        .says(&["incomplete"]);
}

#[test]
fn a_data_folder_being_generated_is_refused_to_a_second_generation_and_to_training() {
    let tmp = Scratch::new("generation-exclusive");
    let data = tmp.join("data");
    let files = 4000;
    let mut first = Live::dlio_rs(&tmp.path, &generation(&data, files));
    wait_until_generating(&data, &mut first);
    let pid = first.pid().to_string();

    let second = dlio_rs(&tmp.path, &generation(&data, files)).fails(2);
    second.says(&[&data.display().to_string(), &pid, "in use by a generation"]);
    run_quiet(&tmp.path, 1, &training_on(&data, files, &tmp.join("out")))
        .fails(2)
        .says(&["being generated", &pid]);

    // Stopped, the first leaves an incomplete dataset, refused; a generation that completes
    // whole makes it a dataset.
    first.signal(libc::SIGINT);
    first.finish().0.fails(130);
    run_quiet(&tmp.path, 1, &training_on(&data, files, &tmp.join("out")))
        .fails(2)
        .says(&["incomplete"]);
    dlio_rs(&tmp.path, &generation(&data, 16)).ok();
    run_quiet(&tmp.path, 1, &training_on(&data, 16, &tmp.join("out"))).ok();
}

/// A run that saves checkpoints holds their folder from before its training: a second run that
/// would save or load there is refused at once, naming the folder; once the first has ended, the
/// folder is free again.
#[test]
fn a_checkpoint_folder_is_held_by_the_run_that_saves_there() {
    let tmp = Scratch::new("checkpoint-folder-held");
    let folder = tmp.s("ckpt");
    let mut words = training(&tmp.join("a"), 1, 2);
    words.retain(|w| w != "++workload.workflow.checkpoint=False");
    words.extend(strings(&[
        "++workload.workflow.checkpoint=True",
        "++workload.checkpoint.checkpoint_after_epoch=1",
        "++workload.checkpoint.epochs_between_checkpoints=1",
    ]));
    words.push(format!("++workload.checkpoint.checkpoint_folder={folder}"));
    let mut first = Live::dlio_rs(&tmp.path, &words);
    first.wait_for("training: 1 accelerator(s), 2 epoch(s)");
    let other = |writes: u64, reads: u64, out: &str| {
        let mut words = strings(&[
            "run",
            "-q",
            "workload=default",
            "++workload.workflow.train=False",
            "++workload.workflow.checkpoint=True",
        ]);
        words.push(format!(
            "++workload.checkpoint.num_checkpoints_write={writes}"
        ));
        words.push(format!(
            "++workload.checkpoint.num_checkpoints_read={reads}"
        ));
        words.push(format!("++workload.checkpoint.checkpoint_folder={folder}"));
        words.push(format!("++hydra.run.dir={}", tmp.s(out)));
        dlio_rs(&tmp.path, &words)
    };
    let said = format!("the checkpoint folder {folder} is in use by another run");
    other(1, 0, "b").fails(2).says(&[&said]);
    other(0, 1, "c").fails(2).says(&[&said]);
    first.signal(libc::SIGINT);
    let (ran, _) = first.finish();
    assert_eq!(ran.code, Some(130), "{}", ran.context());
    // Free again: a run that saves there now may.
    other(1, 0, "d").ok();
}

/// `dataset.keep_files: False`: a run that deletes its dataset when it ends holds it alone from
/// before its training. A run that would read it meanwhile is refused at once, naming the holder;
/// the deleting run is itself refused while another reads, or waits for it with `--wait`.
#[test]
fn a_dataset_a_run_deletes_is_never_read_by_another_run_meanwhile() {
    let tmp = Scratch::new("dataset-deleted-held");
    let data = tmp.join("data");
    dlio_rs(&tmp.path, &generation(&data, 16)).ok();
    let slow = |out: &str, keep: bool| {
        let mut words = training_on(&data, 16, &tmp.join(out));
        words.retain(|w| !w.contains("computation_time"));
        words.push("++workload.train.computation_time=0.5".into());
        words.push(format!(
            "++workload.dataset.keep_files={}",
            if keep { "True" } else { "False" }
        ));
        let mut all = strings(&["run"]);
        all.extend(words);
        all
    };
    let deleting = |out: &str| {
        let mut words = training_on(&data, 16, &tmp.join(out));
        words.push("++workload.dataset.keep_files=False".into());
        words
    };

    // A deleting run holds it: a reader is refused, naming it.
    let mut first = Live::dlio_rs(&tmp.path, &slow("a", false));
    first.wait_for("training: 1 accelerator(s)");
    let pid = first.pid().to_string();
    run_quiet(&tmp.path, 1, &training_on(&data, 16, &tmp.join("b")))
        .fails(2)
        .says(&[
            &format!("the dataset in {} is held by", data.display()),
            "deletes the dataset when it ends",
            &format!("pid {pid}"),
        ]);
    first.signal(libc::SIGINT);
    assert_eq!(first.finish().0.code, Some(130));

    // A reader holds it: a deleting run is refused, naming the reader ...
    let mut reader = Live::dlio_rs(&tmp.path, &slow("c", true));
    reader.wait_for("training: 1 accelerator(s)");
    let pid = reader.pid().to_string();
    run_quiet(&tmp.path, 1, &deleting("d"))
        .fails(2)
        .says(&["needs it to itself", &format!("pid {pid}")]);
    assert_eq!(std::fs::read_dir(data.join("train")).unwrap().count(), 16);
    // ... or, told to, waits for it to end, then runs and deletes.
    let mut words = strings(&["run", "-q", "--wait", "60"]);
    words.extend(deleting("e"));
    let mut waiting = Live::dlio_rs(&tmp.path, &words);
    waiting.wait_for(&format!("waiting up to 60 s for {}", data.display()));
    reader.signal(libc::SIGINT);
    assert_eq!(reader.finish().0.code, Some(130));
    let (ran, _) = waiting.finish();
    ran.ok();
    let left = std::fs::read_dir(data.join("train")).unwrap().count();
    assert_eq!(left, 0, "the deleting run deleted the dataset");
}
