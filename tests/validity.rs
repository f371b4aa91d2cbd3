//! End-to-end tests of measurement validity: traced runs checked by `dlio-rs audit` (every planned
//! sample read once per epoch, a fresh order and fresh rank shards each epoch when shuffling, the
//! same plan for the same seed), a planted reader fault that the audit must catch, and the bytes
//! each epoch really took from storage under each page-cache option.

use serde_json::Value;

use crate::common::*;

fn train_phases(report: &Value) -> Vec<&Value> {
    at(report, "/phases")
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["phase"] == "train")
        .collect()
}

#[test]
fn shuffled_runs_pass_the_audit_and_reshuffle_order_and_shards_every_epoch() {
    let tmp = Scratch::new("reshuffle");
    let shape = Shape {
        files: 24,
        samples_per_file: 2,
        batch: 3,
        threads: 2,
        epochs: 3,
    };
    let shuffled = [
        "++workload.reader.file_shuffle=seed",
        "++workload.reader.sample_shuffle=seed",
    ];
    generate_for(
        &tmp.path,
        &traced_words(&tmp.join("data"), &tmp.join("gen"), &shape, &[]),
    );
    for world in [2usize, 4] {
        let out = tmp.join(format!("shuffled{world}"));
        let words = traced_words(&tmp.join("data"), &out, &shape, &shuffled);
        run_quiet(&tmp.path, world, &words).ok();
        let (code, report, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{}", ran.context());
        assert_eq!(report["passed"], true, "{}", ran.context());
        let phases = train_phases(&report);
        assert_eq!(phases.len(), 3);
        for p in &phases[1..] {
            let changed = p["order_changed_fraction"].as_f64().unwrap();
            assert!(changed > 0.5, "order barely changed: {p}");
            let per_rank = p["rank_files_changed_fraction"].as_array().unwrap();
            assert_eq!(per_rank.len(), world);
            for share in per_rank {
                assert!(share.as_f64().unwrap() > 0.0, "a rank kept its files: {p}");
            }
        }

        let out = tmp.join(format!("ordered{world}"));
        let words = traced_words(&tmp.join("data"), &out, &shape, &[]);
        run_quiet(&tmp.path, world, &words).ok();
        let (code, report, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{}", ran.context());
        for p in &train_phases(&report)[1..] {
            assert_eq!(p["order_changed_fraction"], 0.0, "{p}");
            for share in p["rank_files_changed_fraction"].as_array().unwrap() {
                assert_eq!(share, 0.0, "{p}");
            }
        }

        // The same folder, run again untraced: the old trace goes, and the audit says why it
        // cannot check the new run.
        run_quiet(
            &tmp.path,
            world,
            &with(&words, &["++workload.output.trace=False"]),
        )
        .ok();
        assert!(
            !out.join("trace").exists(),
            "a stale trace was left beside a new report"
        );
        dlio_rs(&tmp.path, &["audit", &out.display().to_string()])
            .fails(2)
            .says(&["was not traced", "--trace"]);
    }
}

#[test]
fn uneven_shapes_read_each_sample_once_with_equal_steps_on_every_rank() {
    let tmp = Scratch::new("uneven");
    // (files, samples per file, batch, accelerators, read threads): nothing divides evenly.
    for (files, spf, batch, world, threads) in [
        (7u64, 3u64, 4u64, 3usize, 2u64),
        (5, 1, 2, 2, 0),
        (13, 2, 5, 4, 3),
        (9, 4, 7, 2, 1),
    ] {
        let shape = Shape {
            files,
            samples_per_file: spf,
            batch,
            threads,
            epochs: 2,
        };
        let data = tmp.join(format!("data{files}"));
        let out = tmp.join(format!("out{files}"));
        let eval = [
            "++workload.workflow.evaluation=True",
            "++workload.dataset.num_files_eval=3",
            "++workload.reader.batch_size_eval=2",
            "++workload.reader.file_shuffle=seed",
            "++workload.reader.sample_shuffle=seed",
        ];
        let words = traced_words(&data, &out, &shape, &eval);
        generate_for(&tmp.path, &words);
        run_quiet(&tmp.path, world, &words).ok();
        let (code, report, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{}", ran.context());
        let steps = (files * spf) / (batch * world as u64);
        let mut eval_phases = 0;
        for p in at(&report, "/phases").as_array().unwrap() {
            assert_eq!(p["repeated"], 0, "{p}");
            assert_eq!(p["missing"], 0, "{p}");
            if p["phase"] == "train" {
                assert_eq!(int(p, "/steps"), steps, "{p}");
                assert_eq!(
                    int(p, "/samples_not_read"),
                    files * spf - steps * batch * world as u64
                );
            } else {
                eval_phases += 1;
            }
        }
        assert_eq!(eval_phases, 2, "an eval phase after each epoch");
    }
}

#[test]
fn the_same_seed_gives_the_same_plan_and_random_a_different_one() {
    let tmp = Scratch::new("seeds");
    let shape = Shape {
        files: 32,
        samples_per_file: 2,
        batch: 4,
        threads: 3,
        epochs: 2,
    };
    generate_for(
        &tmp.path,
        &traced_words(&tmp.join("data"), &tmp.join("gen"), &shape, &[]),
    );
    let run = |name: &str, shuffle: &str| {
        let out = tmp.join(name);
        let file = format!("++workload.reader.file_shuffle={shuffle}");
        let sample = format!("++workload.reader.sample_shuffle={shuffle}");
        let words = traced_words(&tmp.join("data"), &out, &shape, &[&file, &sample]);
        run_quiet(&tmp.path, 2, &words).ok();
        assert_eq!(audit(&tmp.path, &out).0, Some(0));
        batches(&out, 2)
    };
    let seeded = run("seed1", "seed");
    let train_batches = seeded.keys().filter(|k| k.1 == "train").count();
    assert_eq!(train_batches, 2 * 2 * (64 / 8), "epochs × ranks × steps");
    assert_eq!(seeded, run("seed2", "seed"));
    let random = run("random1", "random");
    assert_ne!(random, run("random2", "random"));
    assert_ne!(random, seeded);
}

/// `reader.batch_handoff_time` is spent on the training thread on every batch, after the batch is
/// ready and before its compute: each step's load is at least the hand-off, compute is untouched,
/// and AU can be no more than the window's compute over its compute and hand-offs. The synthetic
/// loader has every batch ready at once, so without the hand-off its loads are bare hand-overs.
#[test]
fn the_batch_handoff_time_is_load_time_on_every_step() {
    let tmp = Scratch::new("batch-handoff");
    let shape = Shape {
        files: 16,
        samples_per_file: 1,
        batch: 2,
        threads: 2,
        epochs: 1,
    };
    let (compute, handoff) = (0.01, 0.02);
    let out = tmp.join("out");
    let compute_word = format!("++workload.train.computation_time={compute}");
    let handoff_word = format!("++workload.reader.batch_handoff_time={handoff}");
    let mut words = traced_words(
        &tmp.join("absent"),
        &out,
        &shape,
        &[compute_word.as_str(), handoff_word.as_str()],
    );
    words.push("++workload.reader.data_loader=synthetic".into());
    let ran = run_quiet(&tmp.path, 1, &words);
    assert_eq!(ran.code, Some(0), "{}", ran.context());
    let output = read_json(&out.join("0_output.json"));
    let load = nums(&output, "/1/load/block1");
    let steps = nums(&output, "/1/compute/block1");
    assert_eq!(load.len(), 8, "16 samples in batches of 2");
    for (step, (load, step_compute)) in load.iter().zip(&steps).enumerate() {
        assert!(
            *load >= handoff,
            "step {step}: load {load} s < the hand-off"
        );
        assert!(
            *step_compute >= compute,
            "step {step}: compute {step_compute} s"
        );
    }
    let au = nums(
        &read_json(&out.join("summary.json")),
        "/metric/train_au_percentage",
    )[0];
    // DLIO's window: steps 2.., each at least its measured compute plus the hand-off.
    let computed: f64 = steps[1..].iter().sum();
    let most = 100.0 * computed / (computed + handoff * (steps.len() - 1) as f64);
    assert!(au > 0.0 && au <= most, "AU {au} %, at most {most} %");
}

/// `reader.data_loader: synthetic` follows the run's plan through the same reader threads and
/// hands the trainer every planned sample once per epoch, the batches a real run reads, without
/// any storage: its data folder does not exist, nothing is read and AU is measured.
#[test]
fn the_synthetic_loader_delivers_the_planned_batches_without_storage() {
    let tmp = Scratch::new("synthetic-loader");
    let shape = Shape {
        files: 24,
        samples_per_file: 2,
        batch: 3,
        threads: 2,
        epochs: 2,
    };
    let shuffled = [
        "++workload.reader.file_shuffle=seed",
        "++workload.reader.sample_shuffle=seed",
        "++workload.train.computation_time=0.001",
    ];
    let real = tmp.join("real");
    let words = traced_words(&tmp.join("data"), &real, &shape, &shuffled);
    generate_for(&tmp.path, &words);
    run_quiet(&tmp.path, 2, &words).ok();

    let absent = tmp.join("absent");
    let synthetic = tmp.join("synthetic");
    let mut words = traced_words(&absent, &synthetic, &shape, &shuffled);
    words.push("++workload.reader.data_loader=synthetic".into());
    run_quiet(&tmp.path, 2, &words).ok();
    assert!(!absent.exists(), "the synthetic loader made a data folder");

    let delivered = batches(&synthetic, 2);
    assert_eq!(
        delivered,
        batches(&real, 2),
        "the same batches as a real run"
    );
    // 48 samples, 2 ranks × batch 3: 8 steps per rank, every sample once per epoch.
    for epoch in 1..=2u64 {
        let mut samples: Vec<&(String, u64)> = delivered
            .iter()
            .filter(|(key, _)| key.0 == epoch && key.1 == "train")
            .flat_map(|(_, batch)| batch)
            .collect();
        assert_eq!(samples.len(), 48, "epoch {epoch}");
        samples.sort();
        samples.dedup();
        assert_eq!(samples.len(), 48, "epoch {epoch}: a sample came twice");
    }
    let (code, _, ran) = audit(&tmp.path, &synthetic);
    assert_eq!(code, Some(0), "{}", ran.context());

    let report = read_json(&synthetic.join("report.json"));
    for epoch in at(&report, "/epochs").as_array().unwrap() {
        assert_eq!(int(epoch, "/steps"), 8, "{epoch}");
        assert_eq!(int(epoch, "/samples_read"), 48, "{epoch}");
        assert_eq!(int(epoch, "/bytes_read"), 0, "{epoch}");
        assert_eq!(int(epoch, "/bytes_from_storage"), 0, "{epoch}");
        let au = num(epoch, "/au_percent");
        assert!(au > 0.0 && au <= 100.0, "AU {au}");
        // DLIO's nominal rate: samples/s × record length, read or not.
        assert_eq!(
            num(epoch, "/nominal_mib_per_second"),
            num(epoch, "/samples_per_second") * 2048.0 / 1048576.0
        );
    }
}

/// A reader that skips or repeats a sample in epoch 2 (a test build's planted fault) is caught.
#[cfg(feature = "fault-injection")]
#[test]
fn a_planted_reader_fault_fails_the_audit() {
    let tmp = Scratch::new("fault");
    let shape = Shape {
        files: 16,
        samples_per_file: 1,
        batch: 4,
        threads: 2,
        epochs: 2,
    };
    let data = tmp.join("data");
    generate_for(
        &tmp.path,
        &traced_words(&data, &tmp.join("gen"), &shape, &[]),
    );
    for (fault, violation) in [("repeat", "repeated"), ("skip", "missing")] {
        let out = tmp.join(fault);
        let words = traced_words(&data, &out, &shape, &[]);
        let mut args = strings(&["run", "-q", "-n", "2"]);
        args.extend(words);
        launch(
            env!("CARGO_BIN_EXE_dlio-rs"),
            &tmp.path,
            &args,
            &[("DLIO_RS_PLANTED_FAULT", fault)],
        )
        .ok();
        let (code, report, ran) = audit(&tmp.path, &out);
        assert_eq!(
            code,
            Some(1),
            "the audit missed a {fault}\n{}",
            ran.context()
        );
        assert_eq!(report["passed"], false);
        let phases = train_phases(&report);
        assert_eq!(phases[0][violation], 0, "epoch 1 is clean: {}", phases[0]);
        assert!(
            int(phases[1], &format!("/{violation}")) >= 1,
            "epoch 2 should show the {fault}: {}",
            phases[1]
        );
        let human = dlio_rs(&tmp.path, &["audit", &out.display().to_string()]);
        assert_eq!(human.code, Some(1));
        assert!(
            human.stdout.contains("epoch 2") && human.stdout.contains("trace/0.csv:"),
            "the failure names the offending rows\n{}",
            human.context()
        );
    }
}

/// The dlio-rs program file, mapped with every page in place for as long as it lives. A page-cache
/// drop (`drop_before_epoch`) leaves mapped pages alone, so the runs' reader threads never fault
/// the program's own code back in from the disk, which the kernel counts as bytes they read:
/// megabytes in the first epoch after the drop, against a dataset of 4 MiB. Without it, that count
/// depends on whether another process happens to map the same code at the time.
struct ProgramPagesHeld {
    map: *mut libc::c_void,
    len: usize,
}

impl ProgramPagesHeld {
    fn new() -> ProgramPagesHeld {
        use std::os::fd::AsRawFd;
        let file = std::fs::File::open(DLIO_RS).unwrap();
        let len = file.metadata().unwrap().len() as usize;
        // SAFETY: a new read-only mapping of a file this test opened; nothing else refers to it.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_POPULATE,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "mapping {DLIO_RS}");
        ProgramPagesHeld { map, len }
    }
}

impl Drop for ProgramPagesHeld {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.map, self.len) };
    }
}

/// Bytes from storage per epoch under each page-cache option. The data lives under the build's
/// temporary folder, on the same disk as the checkout (never tmpfs), so the kernel counts reads.
#[test]
fn cache_options_make_every_epoch_read_from_storage_and_keep_is_flagged() {
    let _program = ProgramPagesHeld::new();
    let tmp = Scratch::new_in(env!("CARGO_TARGET_TMPDIR"), "bytes");
    let shape = Shape {
        files: 16,
        samples_per_file: 1,
        batch: 2,
        threads: 2,
        epochs: 3,
    };
    let size = ["++workload.dataset.record_length_bytes=262144"];
    let data = tmp.join("data");
    generate_for(
        &tmp.path,
        &traced_words(&data, &tmp.join("gen"), &shape, &size),
    );
    // Per epoch: bytes read, bytes from storage, cache-served share.
    type Epochs = Vec<(u64, Option<u64>, Option<f64>)>;
    let epochs = |name: &str, option: &str| -> (Value, Epochs) {
        let out = tmp.join(name);
        let words = traced_words(&data, &out, &shape, &[size[0], option]);
        run_quiet(&tmp.path, 2, &words).ok();
        let report = read_json(&out.join("report.json"));
        let per_epoch = at(&report, "/epochs")
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    int(e, "/bytes_read"),
                    e["bytes_from_storage"].as_u64(),
                    e["cache_served_fraction"].as_f64(),
                )
            })
            .collect();
        (report, per_epoch)
    };
    // Generation leaves the files in the page cache (flushed, but cached): with `keep`, the page
    // cache serves every epoch, and the report says so.
    let (report, per_epoch) = epochs("kept", "++workload.reader.page_cache=keep");
    for (read, _, cached) in &per_epoch {
        assert!(*read > 0);
        assert!(
            cached.unwrap() > 0.9,
            "expected a cache-served epoch: {per_epoch:?}"
        );
    }
    let reasons = at(&report, "/verdict/reasons").to_string();
    assert!(
        reasons.contains("\"page_cache\"") && reasons.contains("training phase of epoch(s) 1, 2"),
        "{reasons}"
    );
    assert_eq!(at(&report, "/verdict/valid"), false);
    // Each option defeats the cache from the first byte: the runs that evict or drop start with
    // the whole dataset cached (a `keep` run just read it); O_DIRECT follows the evicting run,
    // which leaves nothing cached, so that what O_DIRECT leaves behind can be seen. O_DIRECT is
    // asked for by `run --odirect`, which stands for ++workload.reader.odirect=True.
    for (option, method) in [
        (
            "++workload.reader.page_cache=evict_after_read",
            "kernel_read_bytes",
        ),
        ("--odirect", "exact"),
        (
            "++workload.reader.page_cache=drop_before_epoch",
            "kernel_read_bytes",
        ),
    ] {
        if method == "kernel_read_bytes" {
            let (_, warm) = epochs("warm", "++workload.reader.page_cache=keep");
            assert!(warm[0].2.unwrap() > 0.9, "{option}: {warm:?}");
        }
        let (report, per_epoch) = epochs("defeated", option);
        assert_eq!(
            at(&report, "/storage_accounting/method"),
            method,
            "{option}"
        );
        let first = per_epoch[0].1.expect("bytes from storage are counted");
        for (epoch, (read, from_storage, cached)) in per_epoch.iter().enumerate() {
            let from_storage = from_storage.unwrap();
            assert!(
                from_storage as f64 >= 0.95 * first as f64,
                "{option}: epoch {} took {from_storage} bytes from storage, epoch 1 {first}",
                epoch + 1
            );
            assert!(from_storage as f64 >= 0.95 * *read as f64, "{option}");
            assert!(cached.unwrap() <= 0.05, "{option}");
        }
        let reasons = at(&report, "/verdict/reasons").to_string();
        assert!(!reasons.contains("page_cache"), "{option}: {reasons}");
        if method == "exact" {
            // The accounting of O_DIRECT is by definition; that the reads really bypassed the
            // cache shows in what they left behind: nothing, so a cached read now finds nothing.
            let (_, after) = epochs("after-odirect", "++workload.reader.page_cache=keep");
            assert!(
                after[0].2.unwrap() <= 0.05,
                "O_DIRECT reads filled the page cache: {after:?}"
            );
        }
    }
}

/// The emulated compute never ends early, and report.json's `compute_lateness` is how much later
/// than asked it ended, by the same step timings the DLIO files list.
#[test]
fn compute_lateness_is_measured_compute_beyond_the_asked_time() {
    let tmp = Scratch::new("lateness");
    let shape = Shape {
        files: 40,
        samples_per_file: 1,
        batch: 1,
        threads: 1,
        epochs: 1,
    };
    let compute = 0.002;
    let time = format!("++workload.train.computation_time={compute}");
    let words = traced_words(&tmp.join("data"), &tmp.join("out"), &shape, &[&time]);
    generate_for(&tmp.path, &words);
    run_quiet(&tmp.path, 2, &words).ok();
    let mut latest = 0.0f64;
    for rank in 0..2 {
        let output = read_json(&tmp.join(format!("out/{rank}_output.json")));
        for measured in nums(&output, "/1/compute/block1") {
            assert!(measured >= compute, "rank {rank} woke early: {measured}");
            latest = latest.max((measured - compute) * 1e6);
        }
    }
    let report = read_json(&tmp.join("out/report.json"));
    let max_us = num(&report, "/epochs/0/compute_lateness/max_us");
    // The histogram reports the middle of a bucket at most 1/32 wide.
    assert!(
        (max_us - latest).abs() <= latest / 32.0 + 0.5,
        "report.json max {max_us} µs, step timings {latest} µs"
    );
    assert!(num(&report, "/epochs/0/compute_lateness/p50_us") <= max_us);
}

/// `dlio-rs run` of the default workload with `page_cache: drop_before_epoch`, output in `out`.
fn drop_before_epoch_run(out: &std::path::Path) -> Vec<String> {
    vec![
        "run".to_string(),
        "workload=default".into(),
        "++workload.reader.page_cache=drop_before_epoch".into(),
        format!("++hydra.run.dir={}", out.display()),
    ]
}

/// Dropping the page cache needs root: without it the run stops before anything is written, with
/// exit code 2 and the option that needs no root. As root, the run is made as `nobody`.
#[test]
fn drop_before_epoch_without_root_is_a_usage_error() {
    let tmp = Scratch::new("noroot");
    let out = tmp.join("out");
    let words = drop_before_epoch_run(&out);
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ran = if root {
        let mut args = strings(&["--reuid=65534", "--regid=65534", "--clear-groups"]);
        args.push(env!("CARGO_BIN_EXE_dlio-rs").into());
        args.extend(words);
        launch("setpriv", &tmp.path, &args, &[])
    } else {
        dlio_rs(&tmp.path, &words)
    };
    ran.fails(2)
        .says(&["drop_before_epoch", "root", "evict_after_read"]);
    assert!(!out.exists(), "nothing is written before the check");
}

/// `DLIO_DROP_CACHES_TIMEOUT` (DLIO's and mlpstorage v3's variable) bounds each page-cache drop;
/// a value that is not a positive number of seconds is a usage error naming it, before anything is
/// written.
#[test]
fn a_bad_drop_caches_timeout_is_a_usage_error() {
    let tmp = Scratch::new("drop-timeout");
    let out = tmp.join("out");
    let words = drop_before_epoch_run(&out);
    for bad in ["soon", "0", "-5"] {
        let ran = launch(
            env!("CARGO_BIN_EXE_dlio-rs"),
            &tmp.path,
            &words,
            &[("DLIO_DROP_CACHES_TIMEOUT", bad)],
        );
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            ran.fails(2).says(&[
                &format!("DLIO_DROP_CACHES_TIMEOUT = '{bad}'"),
                "positive number of seconds",
            ]);
        } else {
            // Without root the run stops earlier, at the root check.
            ran.fails(2).says(&["drop_before_epoch", "root"]);
        }
        assert!(!out.exists(), "nothing is written before the check");
    }
}

/// `dlio-rs plan` shows, without reading anything, exactly the batches a run then reads.
#[test]
fn plan_preview_matches_what_the_run_read() {
    let tmp = Scratch::new("preview");
    let shape = Shape {
        files: 20,
        samples_per_file: 3,
        batch: 4,
        threads: 2,
        epochs: 2,
    };
    let seeded = [
        "++workload.reader.file_shuffle=seed",
        "++workload.reader.sample_shuffle=seed",
    ];
    let out = tmp.join("out");
    let words = traced_words(&tmp.join("data"), &out, &shape, &seeded);
    generate_for(&tmp.path, &words);
    run_quiet(&tmp.path, 2, &words).ok();
    let read = batches(&out, 2);
    for (epoch, rank) in [(1u64, 0u64), (2, 1)] {
        let mut args = strings(&["plan", "-n", "2", "--head", "3"]);
        args.extend([format!("--epoch={epoch}"), format!("--rank={rank}")]);
        args.extend(words.iter().cloned());
        let shown = dlio_rs(&tmp.path, &args).ok();
        assert!(
            shown.stdout.contains("no storage touched"),
            "{}",
            shown.context()
        );
        for step in 1..=3u64 {
            let line = shown
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix(&format!("step {step}: ")))
                .unwrap_or_else(|| panic!("no step {step}\n{}", shown.context()));
            // `file#first-last` is a range of the file's samples, both ends included.
            let planned: Vec<(String, u64)> = line
                .split(' ')
                .flat_map(|item| {
                    let (file, range) = item.rsplit_once('#').unwrap();
                    let (first, last) = range.split_once('-').unwrap_or((range, range));
                    let samples = first.parse::<u64>().unwrap()..=last.parse().unwrap();
                    samples.map(move |sample| (file.to_string(), sample))
                })
                .collect();
            assert_eq!(
                planned,
                read[&(epoch, "train".to_string(), rank, step)],
                "epoch {epoch} rank {rank} step {step}"
            );
        }
    }
}

/// A traced `native_dali` run passes the audit: both ranks read shard 0's stream (the same
/// files), in order, each sample under the step it is pulled in for, and read ahead only as far
/// as DALI's queues allow; over npy (shuffle buffer on and off), jpeg (off: DLIO's shuffled
/// call fails in DALI) and tfrecord (records as samples, on and off), over 2 epochs. A trace
/// with two rows swapped, or a row dropped, fails it, naming the row.
#[test]
fn native_dali_runs_pass_the_audit_and_a_changed_stream_fails_it() {
    let tmp = Scratch::new("native-dali-audit");
    for (format, samples_per_file, shuffles, maps) in [
        ("npy", 1u64, &["off", "seed"][..], true),
        ("jpeg", 1, &["off"][..], true),
        ("tfrecord", 2, &["off", "seed"][..], true),
        // DLIO's dont_use_mmap: each sample read, not mapped.
        ("npy", 1, &["off"][..], false),
        ("jpeg", 1, &["off"][..], false),
        ("tfrecord", 2, &["seed"][..], false),
    ] {
        native_dali_audit(&tmp, format, samples_per_file, shuffles, maps);
    }
}

fn native_dali_audit(
    tmp: &Scratch,
    format: &str,
    samples_per_file: u64,
    shuffles: &[&str],
    maps: bool,
) {
    let shape = Shape {
        files: 16,
        samples_per_file,
        batch: 2,
        threads: 2,
        epochs: 2,
    };
    let data = tmp.join(format!("data-{format}"));
    let format_word = format!("++workload.dataset.format={format}");
    if !data.exists() {
        generate_for(
            &tmp.path,
            &traced_words(
                &data,
                &tmp.join(format!("gen-{format}")),
                &shape,
                &[&format_word],
            ),
        );
    }
    let mmap_word = format!("++workload.reader.dont_use_mmap={}", !maps);
    for &shuffle in shuffles {
        let out = tmp.join(format!("run-{format}-{shuffle}-{maps}"));
        let shuffle_word = format!("++workload.reader.sample_shuffle={shuffle}");
        let words = traced_words(
            &data,
            &out,
            &shape,
            &[
                &format_word,
                "++workload.reader.data_loader=native_dali",
                "++workload.reader.shuffle_size=4",
                &shuffle_word,
                &mmap_word,
                "++workload.workflow.evaluation=False",
            ],
        );
        let mut args = strings(&["run", "-q", "-n", "2"]);
        args.extend(words);
        launch(DLIO_RS, &tmp.path, &args, &[]).ok();
        let shuffle = format!("{format} {shuffle} mapped {maps}");
        let (code, report, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{shuffle}: {report:#}\n{}", ran.context());
        for phase in train_phases(&report) {
            // 16 files over 2 ranks: shard 0 is 8 files (of 2 records each for tfrecord),
            // the steps of 2 samples on each rank walking it once.
            let shard = 8 * samples_per_file;
            assert_eq!(int(phase, "/samples_read"), 2 * shard, "{shuffle}: {phase}");
            assert_eq!(int(phase, "/missing"), 0, "{shuffle}: {phase}");
        }
        // Both ranks read the same files: shard 0.
        let files = |rank: u64| -> std::collections::BTreeSet<String> {
            let trace = std::fs::read_to_string(out.join(format!("trace/{rank}.csv"))).unwrap();
            trace
                .lines()
                .skip(1)
                .map(|row| row.split(',').nth(5).unwrap().to_string())
                .collect()
        };
        assert_eq!(files(0), files(1), "{shuffle}: shard 0 on both ranks");
        assert_eq!(files(0).len(), 8, "{shuffle}: shard 0 is the first 8 files");

        // The stream changed: two rows of rank 1 swapped, then one dropped.
        let path = out.join("trace/1.csv");
        let clean = std::fs::read_to_string(&path).unwrap();
        let rows: Vec<&str> = clean.lines().collect();
        let swap_file = |a: &str, b: &str| -> (String, String) {
            let (mut x, mut y): (Vec<&str>, Vec<&str>) =
                (a.split(',').collect(), b.split(',').collect());
            std::mem::swap(&mut x[5], &mut y[5]);
            (x.join(","), y.join(","))
        };
        let (second, third) = swap_file(rows[2], rows[3]);
        let mut swapped: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
        swapped[2] = second;
        swapped[3] = third;
        let mut dropped: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
        dropped.remove(2);
        for (what, changed) in [("swapped", swapped), ("dropped", dropped)] {
            std::fs::write(&path, changed.join("\n") + "\n").unwrap();
            let (code, report, ran) = audit(&tmp.path, &out);
            assert_eq!(
                code,
                Some(1),
                "{shuffle} {what}: {report:#}\n{}",
                ran.context()
            );
            let first = at(&report, "/first_violations/0")
                .as_str()
                .unwrap()
                .to_string();
            assert!(first.contains("trace/1.csv:"), "{shuffle} {what}: {first}");
        }
        std::fs::write(&path, clean).unwrap();
    }
}
