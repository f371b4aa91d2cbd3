//! End-to-end tests of multi-process runs under `mpirun` on this host (`--oversubscribe`): the
//! same batches per global rank and step as one process with the same world, whatever the split
//! into processes; the same output files; generation split across processes; a failure in one
//! rank ending every process; and the default build's refusal. Every launch is bounded in time.

use crate::common::*;

/// The tests of the MPI build.
#[cfg(feature = "mpi")]
mod with_mpi {
    use super::*;
    use serde_json::Value;
    use std::collections::BTreeSet;
    use std::path::Path;
    use std::time::Duration;

    /// Processes started with other words (an MPMD launch: `mpirun -n 1 A : -n 1 B`, as a host
    /// with an older workload file would be) stop before anything is written, all with exit 2 and
    /// one message naming each key that differs; a credential may differ, nothing else.
    #[test]
    fn processes_with_other_configurations_are_refused_by_key_before_anything_is_written() {
        let tmp = Scratch::new("mpi-disagree");
        let out = tmp.s("out");
        let words = |extra: &[&str]| {
            let mut words = strings(&[
                "run",
                "workload=default",
                "++workload.dataset.format=synthetic",
                "++workload.train.computation_time=0.01",
            ]);
            words.extend(strings(extra));
            words.push(format!("++hydra.run.dir={out}"));
            words
        };
        let mut args = words(&["++workload.train.epochs=2"]);
        args.extend(strings(&[":", "-n", "1", DLIO_RS]));
        args.extend(words(&[
            "++workload.train.epochs=3",
            "++workload.reader.batch_size=2",
        ]));
        let (ran, _) = mpirun(&tmp.path, 1, DLIO_RS, &args);
        let ran = ran.fails(2).says(&[
            "the MPI processes of this job resolved different configurations — process 1: \
             reader.batch_size = 2 (process 0: 4), train.epochs = 3 (process 0: 2); every \
             process must run the same workload file and words",
        ]);
        assert_eq!(
            ran.stderr
                .matches("resolved different configurations")
                .count(),
            1,
            "{}",
            ran.context()
        );
        assert!(!tmp.join("out").exists(), "{}", ran.context());
        // Each host's own credentials are no difference.
        let credential = |key: &str| {
            words(&[
                "++workload.train.epochs=1",
                &format!("++workload.storage.storage_options.secret_access_key={key}"),
            ])
        };
        let mut args = credential("a");
        args.extend(strings(&[":", "-n", "1", DLIO_RS]));
        args.extend(credential("b"));
        let (ran, _) = mpirun(&tmp.path, 1, DLIO_RS, &args);
        ran.ok();
        // Sweeps of other bounds would each wait for trials the others never run.
        let sweep = |max: &str| {
            strings(&[
                "sweep",
                "--max-accelerators",
                max,
                "-o",
                &tmp.s("sweep"),
                "workload=default",
                "++workload.dataset.format=synthetic",
            ])
        };
        let mut args = sweep("4");
        args.extend(strings(&[":", "-n", "1", DLIO_RS]));
        args.extend(sweep("8"));
        let (ran, _) = mpirun(&tmp.path, 1, DLIO_RS, &args);
        ran.fails(2).says(&[
            "the MPI processes of this sweep were given different sweeps — process 1: \
             --min-accelerators (default) --max-accelerators 8 (process 0: --min-accelerators \
             (default) --max-accelerators 4)",
        ]);
        assert!(!tmp.join("sweep").exists());
        // Different commands: a run beside a sweep would each enter collectives the other never
        // does; a run beside a command that starts no MPI (config) would wait in MPI_Init.
        let mut args = words(&["++workload.train.epochs=1"]);
        args.extend(strings(&[":", "-n", "1", DLIO_RS]));
        args.extend(sweep("4"));
        let (ran, _) = mpirun(&tmp.path, 1, DLIO_RS, &args);
        ran.fails(2).says(&[
            "the processes of this MPI job run different commands (process 0: dlio-rs run",
            "process 1: dlio-rs sweep",
        ]);
        let mut args = words(&["++workload.train.epochs=1"]);
        args.extend(strings(&[
            ":",
            "-n",
            "1",
            DLIO_RS,
            "config",
            "workload=default",
        ]));
        let env = [("DLIO_RS_MPI_INIT_TIMEOUT", "2")];
        let (ran, took) = mpirun_with(&tmp.path, &["--bind-to", "none"], &env, 1, DLIO_RS, &args);
        ran.fails(1).says(&[
            "MPI_Init did not complete within 2 s",
            "another command than `dlio-rs run`",
        ]);
        assert!(took < Duration::from_secs(30), "gave up after {took:?}");
        // A process that would refuse its own rank count first meets the others.
        let mut args = words(&["++workload.train.epochs=1"]);
        args.extend(strings(&[":", "-n", "1", DLIO_RS, "run", "-n", "0"]));
        args.extend(words(&["++workload.train.epochs=1"]).into_iter().skip(1));
        let (ran, _) = mpirun(&tmp.path, 1, DLIO_RS, &args);
        ran.fails(2)
            .says(&["they differ: process 0: 1, process 1: 0"]);
    }

    /// A shuffled traced run's words (2 epochs, 2 reader threads, `shuffle` for files and samples),
    /// traced in every format: each process writes its ranks' files as one process writes them.
    fn shuffled_words(tmp: &Scratch, out: &str, shuffle: &str) -> Vec<String> {
        let shape = Shape {
            files: 24,
            samples_per_file: 3,
            batch: 2,
            threads: 2,
            epochs: 2,
        };
        traced_words(
            &tmp.join("data"),
            &tmp.join(out),
            &shape,
            &[
                &format!("++workload.reader.file_shuffle={shuffle}"),
                &format!("++workload.reader.sample_shuffle={shuffle}"),
                "++workload.train.computation_time=0.001",
                "++workload.output.trace_format=all",
            ],
        )
    }

    /// mlpstorage's object runs: `mpirun -n 4 dlio_benchmark` with the bucket in the words and the
    /// connection in `AWS_*` (mlpstorage passes them with `-x`); generation split across the
    /// processes, training that reads what one process of 4 thread ranks reads, the audit of the
    /// object keys, and the request counts of all processes summed in the report.
    #[cfg(feature = "s3")]
    #[test]
    fn mpi_processes_generate_and_train_through_a_bucket() {
        let tmp = Scratch::new("mpi-s3");
        let server = crate::common::seaweed::SeaweedFs::start(&tmp.path)
            .unwrap_or_else(|e| panic!("SeaweedFS did not start: {e}"));
        let endpoint = server.endpoint();
        let env = [
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", crate::common::seaweed::ACCESS_KEY),
            ("AWS_SECRET_ACCESS_KEY", crate::common::seaweed::SECRET_KEY),
        ];
        // mlpstorage v3's words for object storage; the data folder below the bucket, or as a
        // URI: the same keys.
        let bucket = [
            "++workload.storage.storage_type=s3",
            "++workload.storage.storage_root=mpi-bucket",
            "++workload.storage.storage_options.storage_library=s3dlio",
            "++workload.storage.storage_options.uri_scheme=s3",
            "++workload.dataset.skip_listing=True",
            "++workload.dataset.listing_validation_interval=1",
        ];
        let words = |out: &str, folder: &str| {
            let mut w = shuffled_words(&tmp, out, "seed");
            w.retain(|w| !w.starts_with("++workload.dataset.data_folder="));
            w.push(format!("++workload.dataset.data_folder={folder}"));
            w.extend(strings(&bucket));
            w
        };
        let generate = with(
            &words("generation", "data"),
            &[
                "++workload.workflow.generate_data=True",
                "++workload.workflow.train=False",
            ],
        );
        let launcher = [
            "--bind-to",
            "none",
            "--mca",
            "btl",
            "vader,self",
            "-x",
            "AWS_ENDPOINT_URL",
            "-x",
            "AWS_ACCESS_KEY_ID",
            "-x",
            "AWS_SECRET_ACCESS_KEY",
        ];
        mpirun_with(&tmp.path, &launcher, &env, 4, DLIO_BENCHMARK, &generate)
            .0
            .ok();
        let train = words("procs4", "s3://mpi-bucket/data");
        mpirun_with(&tmp.path, &launcher, &env, 4, DLIO_BENCHMARK, &train)
            .0
            .ok();
        passes_audit(&tmp, "procs4");
        let mut threads = strings(&["run", "-q", "-n", "4"]);
        threads.extend(words("threads4", "data"));
        launch(DLIO_RS, &tmp.path, &threads, &env).ok();
        assert_eq!(
            batches(&tmp.join("procs4"), 4),
            batches(&tmp.join("threads4"), 4)
        );

        let report = read_json(&tmp.join("procs4/report.json"));
        let kinds = at(&report, "/storage_requests/data/kinds");
        let (mut from_storage, mut samples) = (0, 0);
        for epoch in at(&report, "/epochs").as_array().unwrap() {
            for phase in [epoch, at(epoch, "/eval")] {
                assert_eq!(int(phase, "/bytes_from_storage"), int(phase, "/bytes_read"));
                from_storage += int(phase, "/bytes_from_storage");
                samples += int(phase, "/samples_read");
            }
        }
        // npz: one whole-object GET per sample (training and evaluation), in all four processes
        // together.
        assert!(samples >= 2 * 24 * 3, "{samples}");
        assert_eq!(int(kinds, "/GET/bytes"), from_storage, "{kinds}");
        assert_eq!(int(kinds, "/GET/requests"), samples, "{kinds}");

        // Names off the scheme (20 of the 24 files asked for: `_of_20` names are not there):
        // process 0 lists the bucket's folder and hands the names to the others. The 4
        // processes make the LISTs one process makes, but for their own bucket checks.
        let listed = |out: &str, folder: &str| {
            let mut w = words(out, folder);
            w.retain(|w| !w.contains("skip_listing") && !w.contains("num_files_train"));
            w.push("++workload.dataset.num_files_train=20".into());
            w
        };
        let lists = |out: &str| {
            let report = read_json(&tmp.join(out).join("report.json"));
            assert_eq!(
                at(&report, "/startup/file_names/0/method"),
                "listed",
                "{out}: {report}"
            );
            int(&report, "/storage_requests/data/kinds/LIST/requests")
        };
        let train = listed("listed4", "s3://mpi-bucket/data");
        mpirun_with(&tmp.path, &launcher, &env, 4, DLIO_BENCHMARK, &train)
            .0
            .ok();
        let mut alone = strings(&["run", "-q", "-n", "4"]);
        alone.extend(listed("listed1", "data"));
        launch(DLIO_RS, &tmp.path, &alone, &env).ok();
        let (by_four, by_one) = (lists("listed4"), lists("listed1"));
        assert!(
            by_one >= 2,
            "a bucket check and at least one page: {by_one}"
        );
        assert_eq!(by_four, by_one + 3, "only process 0 lists");
        // The audit lists the folder again, with the connection of the environment.
        let out = tmp.join("listed4").display().to_string();
        launch(DLIO_RS, &tmp.path, &["audit", &out], &env).ok();
    }

    fn passes_audit(tmp: &Scratch, out: &str) {
        let (code, report, ran) = audit(&tmp.path, &tmp.join(out));
        assert_eq!(
            code,
            Some(0),
            "audit of {out}: {report:#}\n{}",
            ran.context()
        );
    }

    /// The names of the files a run left in its output folder (Hydra's folder and traces included).
    fn output_files(dir: &Path) -> BTreeSet<String> {
        let mut names = BTreeSet::new();
        for entry in walk(dir) {
            names.insert(entry.strip_prefix(dir).unwrap().display().to_string());
        }
        names
    }

    fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut found = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                found.extend(walk(&path));
            } else {
                found.push(path);
            }
        }
        found
    }

    /// A JSON value's shape: its keys (recursively) and the lengths of its lists, not its numbers.
    fn shape_of(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), shape_of(v))).collect())
            }
            Value::Array(items) => Value::from(format!("list of {}", items.len())),
            Value::Number(_) => Value::from("number"),
            Value::String(_) => Value::from("string"),
            other => other.clone(),
        }
    }

    #[test]
    fn any_split_into_processes_reads_the_batches_of_one_process() {
        let tmp = Scratch::new("mpi-batches");
        generate_for(&tmp.path, &shuffled_words(&tmp, "gen", "seed"));
        // One process with 4 thread ranks: the reference.
        run_quiet(&tmp.path, 4, &shuffled_words(&tmp, "threads4", "seed")).ok();
        passes_audit(&tmp, "threads4");
        let reference = batches(&tmp.join("threads4"), 4);
        assert_eq!(
            reference.keys().filter(|k| k.1 == "train").count(),
            2 * 4 * (24 * 3 / (2 * 4)),
            "epochs × ranks × steps"
        );

        // 4 processes of 1 rank, as mlpstorage launches dlio_benchmark.
        let (ran, _) = mpirun(
            &tmp.path,
            4,
            DLIO_BENCHMARK,
            &shuffled_words(&tmp, "procs4", "seed"),
        );
        let ran = ran.ok();
        assert_eq!(
            ran.stdout.matches("Training AU").count(),
            1,
            "only process 0 prints the report\n{}",
            ran.context()
        );
        passes_audit(&tmp, "procs4");
        assert_eq!(batches(&tmp.join("procs4"), 4), reference);

        // 2 processes of 2 thread ranks each.
        let mut args = strings(&["run", "-q", "-n", "2"]);
        args.extend(shuffled_words(&tmp, "procs2x2", "seed"));
        mpirun(&tmp.path, 2, DLIO_RS, &args).0.ok();
        passes_audit(&tmp, "procs2x2");
        assert_eq!(batches(&tmp.join("procs2x2"), 4), reference);

        // The same files, keys and step counts as the single process wrote.
        let files = output_files(&tmp.join("threads4"));
        assert!(files.contains("summary.json") && files.contains("3_output.json"));
        for run in ["procs4", "procs2x2"] {
            assert_eq!(output_files(&tmp.join(run)), files, "{run}");
            for file in [
                "summary.json",
                "0_output.json",
                "3_output.json",
                "3_per_epoch_stats.json",
            ] {
                let mut ours = shape_of(&read_json(&tmp.join(run).join(file)));
                let mut theirs = shape_of(&read_json(&tmp.join("threads4").join(file)));
                // Host facts come from /proc and vary between reads (free memory, CPU MHz).
                for v in [&mut ours, &mut theirs] {
                    if let Some(map) = v.as_object_mut() {
                        map.remove("host_meminfo");
                        map.remove("host_cpuinfo");
                    }
                }
                assert_eq!(ours, theirs, "{run}/{file}");
            }
            let summary = read_json(&tmp.join(run).join("summary.json"));
            assert_eq!(int(&summary, "/num_accelerators"), 4);
            assert_eq!(int(&summary, "/num_hosts"), 1);
            let report = read_json(&tmp.join(run).join("report.json"));
            let hosts = at(&report, "/hosts").as_array().unwrap();
            assert_eq!(hosts.len(), 1, "one host: {hosts:?}");
            assert_eq!(at(&hosts[0], "/ranks"), &serde_json::json!([0, 1, 2, 3]));
            // The host's bytes are every epoch's, training and evaluation.
            let bytes_read: u64 = at(&report, "/epochs")
                .as_array()
                .unwrap()
                .iter()
                .map(|e| {
                    int(e, "/bytes_read")
                        + e.pointer("/eval/bytes_read")
                            .map_or(0, |b| b.as_u64().unwrap())
                })
                .sum();
            assert_eq!(int(&hosts[0], "/bytes_read"), bytes_read);
        }

        // `random` shuffles draw their entropy once per run: every process plans the same order,
        // or ranks would read overlapping shards and the audit would fail.
        let (ran, _) = mpirun(
            &tmp.path,
            2,
            DLIO_BENCHMARK,
            &shuffled_words(&tmp, "random2", "random"),
        );
        ran.ok();
        passes_audit(&tmp, "random2");
    }

    /// With ranks in two processes, rank 0's progress lines show the figures of all four ranks,
    /// as the table does: the phase's end brings every process's figures to it.
    #[test]
    fn the_progress_lines_show_the_table_s_figures_of_every_process_s_ranks() {
        let tmp = Scratch::new("mpi-progress");
        let mut words = shuffled_words(&tmp, "out", "seed");
        words.retain(|w| w != "++workload.train.computation_time=0.001");
        words.extend(strings(&RANK_VARYING_PHASES));
        generate_for(&tmp.path, &words);
        let mut args = strings(&["run", "--accelerators", "2"]);
        args.extend(words);
        let (ran, _) = mpirun(&tmp.path, 2, DLIO_RS, &args);
        let ran = ran.ok();
        let (lines, rows) = phase_lines_and_table_rows(&ran);
        assert_eq!(lines.len(), 4, "{}", ran.context());
        assert_eq!(lines, rows, "{}", ran.context());
        let report = read_json(&tmp.join("out/report.json"));
        assert_eq!(nums(&report, "/epochs/0/per_rank_au_percent").len(), 4);
    }

    /// Each process writes its time series as it goes; at the end process 0 merges them: every
    /// interval a line per rank of both processes, one for the host (the two processes' ranks
    /// and the host's counters) and one for the run, summing to the report; no process file
    /// left behind.
    #[test]
    fn the_processes_time_series_are_merged_into_the_run_s() {
        let tmp = Scratch::new("mpi-timeseries");
        let mut words = shuffled_words(&tmp, "out", "seed");
        words.retain(|w| !w.starts_with("++workload.train.computation_time="));
        words.extend(strings(&[
            "++workload.train.computation_time=0.02",
            "++workload.output.timeseries_interval=0.05",
        ]));
        generate_for(&tmp.path, &words);
        let mut args = strings(&["run", "--accelerators", "2"]);
        args.extend(words);
        mpirun(&tmp.path, 2, DLIO_RS, &args).0.ok();
        assert!(!tmp.join("out/timeseries").exists(), "process files left");
        let lines = crate::timeseries::lines_of(&tmp.join("out/timeseries.jsonl"));
        let of = |kind| crate::timeseries::of_kind(&lines, kind);
        let (ranks, hosts, runs) = (of("rank"), of("host"), of("run"));
        assert!(runs.len() >= 3, "{} intervals", runs.len());
        assert_eq!(hosts.len(), runs.len(), "one host");
        crate::timeseries::assert_contiguous(&runs);
        for (host, run) in hosts.iter().zip(&runs) {
            assert_eq!(int(host, "/ranks"), 4, "{host}");
            assert_eq!(int(run, "/ranks"), 4, "{run}");
            assert_eq!(int(run, "/hosts"), 1, "{run}");
            assert!(host["cpu_busy_percent"].is_number(), "{host}");
            assert_eq!(host["samples"], run["samples"]);
            if int(run, "/samples") > 0 {
                assert!(run["read_latency_us"]["p99"].is_number(), "{run}");
            }
        }
        let mut seen: Vec<u64> = ranks.iter().map(|r| int(r, "/rank")).collect();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, vec![0, 1, 2, 3]);
        let report = read_json(&tmp.join("out/report.json"));
        let epochs = at(&report, "/epochs").as_array().unwrap();
        // Training and evaluation reads alike.
        let total = |key: &str| {
            let eval = format!("/eval{key}");
            epochs
                .iter()
                .map(|e| int(e, key) + e.pointer(&eval).and_then(Value::as_u64).unwrap_or(0))
                .sum::<u64>()
        };
        let sum = |lines: &[&Value], key: &str| lines.iter().map(|l| int(l, key)).sum::<u64>();
        assert_eq!(sum(&runs, "/samples"), total("/samples_read"));
        assert_eq!(sum(&ranks, "/bytes_read"), total("/bytes_read"));
        assert_eq!(sum(&runs, "/bytes_read"), total("/bytes_read"));
    }

    #[test]
    fn three_processes_generate_every_file_once() {
        let tmp = Scratch::new("mpi-generate");
        let words = |data: &str, out: &str| {
            strings(&[
                "workload=default",
                "++workload.workflow.generate_data=True",
                "++workload.workflow.train=False",
                "++workload.dataset.num_files_train=10",
                "++workload.dataset.num_files_eval=2",
                "++workload.dataset.record_length_bytes=3000",
                &format!("++workload.dataset.data_folder={}", tmp.s(data)),
                &format!("++hydra.run.dir={}", tmp.s(out)),
            ])
        };
        let (ran, _) = mpirun(&tmp.path, 3, DLIO_BENCHMARK, &words("data3", "gen3"));
        ran.ok();
        run_quiet(&tmp.path, 1, &words("data1", "gen1")).ok();
        let log = std::fs::read_to_string(tmp.join("gen3/dlio.log")).unwrap();
        assert!(
            log.contains("Generated 12 files") && log.contains("by 3 process(es)"),
            "the three shares add up to the dataset once:\n{log}"
        );
        let three = output_files(&tmp.join("data3"));
        assert_eq!(three, output_files(&tmp.join("data1")));
        assert_eq!(three.iter().filter(|f| f.ends_with(".npz")).count(), 12);
        for file in &three {
            assert_eq!(
                std::fs::read(tmp.join("data3").join(file)).unwrap(),
                std::fs::read(tmp.join("data1").join(file)).unwrap(),
                "{file} differs from the single-process generation"
            );
        }
        assert!(!three.contains(".dlio-rs-generating"), "{three:?}");
    }

    #[test]
    fn a_failed_rank_ends_every_process_with_its_reason_once() {
        let tmp = Scratch::new("mpi-failure");
        let shape = Shape {
            files: 16,
            samples_per_file: 1,
            batch: 1,
            threads: 1,
            epochs: 1,
        };
        let words = traced_words(
            &tmp.join("data"),
            &tmp.join("out"),
            &shape,
            &["++workload.train.computation_time=0.01"],
        );
        generate_for(&tmp.path, &words);
        // A file read late in the epoch by some rank is cut short; the other ranks are then
        // waiting in a barrier or in their next step.
        let victim = walk(&tmp.join("data/train"))
            .into_iter()
            .find(|f| f.ends_with("img_14_of_16.npz"))
            .expect("the generated img_14_of_16.npz");
        let bytes = std::fs::read(&victim).unwrap();
        std::fs::write(&victim, &bytes[..bytes.len() / 2]).unwrap();
        let (ran, elapsed) = mpirun(&tmp.path, 4, DLIO_BENCHMARK, &words);
        let ran = ran.fails(1);
        assert_eq!(
            ran.stderr.matches("error:").count(),
            1,
            "the reason is printed once\n{}",
            ran.context()
        );
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        ran.says(&[
            "img_14_of_16.npz",
            "rank ",
            &format!("host {}", host.trim()),
        ]);
        assert!(
            elapsed < Duration::from_secs(30),
            "the job took {elapsed:?} to end"
        );
        assert!(
            !tmp.join("out/summary.json").exists(),
            "a failed run must not leave a summary"
        );
    }

    /// A small traced dataset in `tmp/data` and the words that train on it into `tmp/out`.
    fn small_run(tmp: &Scratch, files: u64, epochs: u64, extra: &[&str]) -> Vec<String> {
        let shape = Shape {
            files,
            samples_per_file: 1,
            batch: 1,
            threads: 1,
            epochs,
        };
        let words = traced_words(&tmp.join("data"), &tmp.join("out"), &shape, extra);
        generate_for(&tmp.path, &words);
        words
    }

    #[test]
    fn a_process_killed_by_a_signal_ends_the_job_and_nothing_claims_success() {
        let tmp = Scratch::new("mpi-killed");
        let words = small_run(&tmp, 24, 1, &["++workload.train.computation_time=0.01"]);
        // The process of rank 1 kills itself with SIGKILL at its third batch (src/loader/fault.rs).
        let (ran, elapsed) = mpirun_with(
            &tmp.path,
            &["--bind-to", "none"],
            &[("DLIO_RS_PLANTED_FAULT", "kill")],
            3,
            DLIO_BENCHMARK,
            &words,
        );
        assert_ne!(
            ran.code,
            Some(0),
            "the job claims success\n{}",
            ran.context()
        );
        assert!(
            elapsed < Duration::from_secs(30),
            "the job took {elapsed:?} to end"
        );
        for file in ["summary.json", "report.json", "0_output.json"] {
            assert!(
                !tmp.join("out").join(file).exists(),
                "a killed job left {file}\n{}",
                ran.context()
            );
        }
        assert!(!ran.stdout.contains("Saved outputs"), "{}", ran.context());
    }

    #[test]
    fn drop_before_epoch_drops_each_host_s_cache_once_per_epoch() {
        let tmp = Scratch::new("mpi-drop");
        let words = small_run(
            &tmp,
            12,
            2,
            &["++workload.reader.page_cache=drop_before_epoch"],
        );
        let (ran, _) = mpirun(&tmp.path, 3, DLIO_BENCHMARK, &words);
        ran.ok();
        let report = read_json(&tmp.join("out/report.json"));
        let hosts = at(&report, "/hosts").as_array().unwrap();
        assert_eq!(hosts.len(), 1, "{hosts:?}");
        // Three processes on one host: one drop per epoch, not one per process.
        assert_eq!(at(&hosts[0], "/page_cache_drops"), 2, "{hosts:?}");
        assert!(at(&hosts[0], "/page_cache_drop_seconds").as_f64().unwrap() > 0.0);
        for epoch in at(&report, "/epochs").as_array().unwrap() {
            let read = at(epoch, "/bytes_read").as_f64().unwrap();
            let from_storage = at(epoch, "/bytes_from_storage").as_f64().unwrap();
            assert!(
                from_storage >= 0.95 * read,
                "every epoch reads from storage after the drop: {epoch}"
            );
        }
    }

    #[test]
    fn a_binding_narrower_than_the_threads_is_warned_about_once() {
        let tmp = Scratch::new("mpi-binding");
        let words = small_run(&tmp, 8, 1, &[]);
        let mut args = strings(&["run", "-q", "-n", "1"]);
        args.extend(words);
        let cpus = std::thread::available_parallelism().unwrap().get();
        // Each process: 1 rank + 1 reader thread = 2 threads, on the one core it is bound to.
        let (bound, _) = mpirun_with(&tmp.path, &["--bind-to", "core"], &[], 2, DLIO_RS, &args);
        let bound = bound.ok();
        let warnings = bound.stderr.matches("--bind-to none").count();
        if cpus >= 2 {
            assert_eq!(
                warnings,
                1,
                "warned once, with the fix\n{}",
                bound.context()
            );
            bound.says(&[
                "only 1 of its host's CPUs",
                "1 rank(s) with 1 reader thread(s)",
            ]);
        } else {
            // One CPU: no binding can be narrower than the host.
            assert_eq!(warnings, 0, "{}", bound.context());
        }
        let (unbound, _) = mpirun(&tmp.path, 2, DLIO_RS, &args);
        let unbound = unbound.ok();
        assert!(
            !unbound.stderr.contains("--bind-to none"),
            "no warning without a binding\n{}",
            unbound.context()
        );
    }

    /// mlpstorage 3.0's launch (mlpstorage_py/utils.py, benchmarks/dlio.py), for datagen then a
    /// training run of `--o-direct` storage: its mpirun prefix (`-host`, `--bind-to none`,
    /// `--map-by socket`, `--mca btl`, `-x`), and its words (Hydra's, `skip_listing`,
    /// `listing_validation_interval`, `direct_fs` storage with a root, `--config-dir` last).
    #[test]
    fn mlpstorage_v3_launches_datagen_and_run() {
        let tmp = Scratch::new("mpi-mlpstorage-v3");
        let configs = tmp.join("configs");
        std::fs::create_dir_all(configs.join("workload")).unwrap();
        let workload = "model:\n  name: tiny\nframework: pytorch\nworkflow:\n  generate_data: False\n  \
             train: True\ndataset:\n  data_folder: data/tiny\n  format: npz\n  num_files_train: 8\n  \
             num_samples_per_file: 1\n  record_length_bytes: 4096\nreader:\n  data_loader: pytorch\n  \
             batch_size: 1\n  read_threads: 1\ntrain:\n  epochs: 2\n  computation_time: 0.001\n";
        std::fs::write(configs.join("workload/tiny_b200.yaml"), workload).unwrap();
        let datagen = "model:\n  name: tiny\nframework: pytorch\nworkflow:\n  generate_data: True\n  \
             train: False\ndataset:\n  data_folder: data/tiny\n  format: npz\n  num_files_train: 8\n  \
             num_samples_per_file: 1\n  record_length_bytes: 4096\n";
        std::fs::write(configs.join("workload/tiny_datagen.yaml"), datagen).unwrap();
        let prefix = [
            "-host",
            "127.0.0.1:2",
            "--bind-to",
            "none",
            "--map-by",
            "socket",
            "--mca",
            "btl",
            "vader,self",
            "-x",
            "DLIO_DROP_CACHES_TIMEOUT",
        ];
        let words = |workload: &str, out: &str| {
            strings(&[
                &format!("workload={workload}"),
                &format!("++hydra.run.dir={}", tmp.s(out)),
                "++hydra.output_subdir=dlio_config",
                "++workload.dataset.num_files_train=16",
                "++workload.storage.storage_type=direct_fs",
                "++workload.storage.storage_options.storage_library=s3dlio",
                "++workload.storage.storage_options.uri_scheme=direct",
                &format!("++workload.storage.storage_root={}", tmp.path.display()),
                "++workload.dataset.skip_listing=True",
                "++workload.dataset.listing_validation_interval=1",
                "++workload.dataset.data_folder=tiny",
                &format!("--config-dir={}", configs.display()),
            ])
        };
        let env = [("DLIO_DROP_CACHES_TIMEOUT", "60")];
        let (gen, _) = mpirun_with(
            &tmp.path,
            &prefix,
            &env,
            2,
            DLIO_BENCHMARK,
            &words("tiny_datagen", "gen"),
        );
        gen.ok();
        // The relative data folder lies under the storage root.
        let generated = walk(&tmp.join("tiny/train"));
        assert_eq!(generated.len(), 16, "{generated:?}");
        let (run, _) = mpirun_with(
            &tmp.path,
            &prefix,
            &env,
            2,
            DLIO_BENCHMARK,
            &words("tiny_b200", "run"),
        );
        run.ok();
        let summary = read_json(&tmp.join("run/summary.json"));
        assert_eq!(at(&summary, "/num_accelerators"), 2);
        assert_eq!(at(&summary, "/num_files_train"), 16);
        let report = read_json(&tmp.join("run/report.json"));
        // direct_fs reads with O_DIRECT: every byte counted comes from the storage.
        assert_eq!(at(&report, "/storage_accounting/method"), "exact");
        assert_eq!(at(&report, "/epochs").as_array().unwrap().len(), 2);
        let overrides =
            std::fs::read_to_string(tmp.join("run/dlio_config/overrides.yaml")).unwrap();
        assert!(
            overrides.starts_with("- workload=tiny_b200\n")
                && overrides.contains("- ++workload.storage.storage_type=direct_fs\n")
                && !overrides.contains("config-dir"),
            "{overrides}"
        );
    }

    /// The files under `dir` (recursively), relative path → size.
    fn sizes(dir: &Path) -> std::collections::BTreeMap<String, u64> {
        walk(dir)
            .into_iter()
            .map(|f| {
                let size = std::fs::metadata(&f).unwrap().len();
                (f.strip_prefix(dir).unwrap().display().to_string(), size)
            })
            .collect()
    }

    /// mlpstorage's checkpointing launch (`mpirun -n 4 dlio_benchmark workload=llama3_8b
    /// ++hydra.run.dir=... ++hydra.output_subdir=dlio_config
    /// ++workload.checkpoint.num_checkpoints_read=1 ++workload.checkpoint.num_checkpoints_write=2
    /// ++workload.checkpoint.checkpoint_folder=...`, here with a tiny model), in default mode and
    /// in subset mode (4 processes of a TP 2 × DP 4 model): the files and sizes of
    /// `dlio-rs run -n 4` with the same words, and every rank's timings, gathered from its
    /// process into report.json.
    #[test]
    fn mlpstorage_checkpointing_saves_the_files_of_one_process_with_every_rank_s_timings() {
        let tmp = Scratch::new("mpi-checkpoint");
        let words = |run: &str, extra: &[&str]| {
            let mut words = strings(&[
                "workload=llama3_8b",
                &format!("++hydra.run.dir={}", tmp.s(&format!("out-{run}"))),
                "++hydra.output_subdir=dlio_config",
                "++workload.checkpoint.num_checkpoints_read=1",
                "++workload.checkpoint.num_checkpoints_write=2",
                &format!(
                    "++workload.checkpoint.checkpoint_folder={}",
                    tmp.s(&format!("ckpt-{run}"))
                ),
                "++workload.model.num_layers=2",
                "++workload.model.transformer.hidden_size=256",
                "++workload.model.transformer.ffn_hidden_size=512",
                "++workload.model.transformer.vocab_size=1000",
                "++workload.checkpoint.time_between_checkpoints=0",
            ]);
            words.extend(strings(extra));
            words
        };
        let subset = [
            "++workload.checkpoint.mode=subset",
            "++workload.model.parallelism.data=4",
            "++workload.model.parallelism.tensor=2",
        ];
        for (variant, extra, files) in [("default", &[][..], 8), ("subset", &subset[..], 8)] {
            let mpi = format!("{variant}-mpi");
            let (ran, _) = mpirun(&tmp.path, 4, DLIO_BENCHMARK, &words(&mpi, extra));
            ran.ok();
            let threads = format!("{variant}-threads");
            run_quiet(&tmp.path, 4, &words(&threads, extra)).ok();

            let saved = sizes(&tmp.join(format!("ckpt-{mpi}")));
            assert_eq!(
                saved,
                sizes(&tmp.join(format!("ckpt-{threads}"))),
                "{variant}: 4 processes (left) and 4 thread ranks (right) saved different files"
            );
            assert_eq!(saved.len(), 2 * files, "{variant}: {saved:?}");
            if variant == "subset" {
                // Data-parallel ranks 0 and 1 of 4, each split over 2 tensor ranks.
                assert!(saved
                    .contains_key("global_epoch1_step2/zero_pp_rank_1_mp_rank_1_optim_states.pt"));
                assert!(!saved.keys().any(|k| k.contains("zero_pp_rank_2_")));
            }
            let bytes: u64 = saved
                .iter()
                .filter(|(k, _)| k.starts_with("global_epoch1_step1/"))
                .map(|(_, v)| v)
                .sum();

            let out = tmp.join(format!("out-{mpi}"));
            assert!(out.join("dlio_config/overrides.yaml").is_file());
            // Process 0 alone writes DLIO's [METRIC] lines.
            let log = std::fs::read_to_string(out.join("dlio.log")).unwrap();
            for line in [
                "[METRIC] Number of Simulated Accelerators: 4 \n",
                "[METRIC] Checkpoint save duration (seconds): ",
                "[METRIC] Checkpoint load I/O Throughput (GB/second): ",
            ] {
                assert_eq!(
                    log.matches(line).count(),
                    1,
                    "{variant}: {line:?} in\n{log}"
                );
            }
            let summary = read_json(&out.join("summary.json"));
            assert_eq!(int(&summary, "/num_accelerators"), 4);
            assert_eq!(int(&summary, "/epochs"), 0);
            let size = num(&summary, "/metric/checkpoint_size_GB");
            assert_eq!(size, bytes as f64 / (1u64 << 30) as f64, "{variant}");
            let report = read_json(&out.join("report.json"));
            let list = at(&report, "/checkpoints/list").as_array().unwrap();
            assert_eq!(list.len(), 3, "{variant}: {list:?}");
            for rank in 0..4 {
                let stats = read_json(&out.join(format!("{rank}_per_epoch_stats.json")));
                let keys: BTreeSet<&String> = at(&stats, "/1")
                    .as_object()
                    .unwrap()
                    .keys()
                    .filter(|k| k.contains("_ckpt"))
                    .collect();
                assert_eq!(
                    keys.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
                    ["load_ckpt1", "save_ckpt1", "save_ckpt2"],
                    "{variant}: rank {rank}"
                );
                // Each rank's own timing reached report.json from its process.
                for entry in list {
                    let key = format!(
                        "/1/{}_ckpt{}",
                        entry["operation"].as_str().unwrap(),
                        entry["index"]
                    );
                    assert_eq!(
                        at(entry, &format!("/per_rank_seconds/{rank}")),
                        at(&stats, &format!("{key}/duration")),
                        "{variant}: rank {rank} {key}"
                    );
                    assert_eq!(int(entry, "/bytes"), bytes, "{variant}: {entry}");
                }
            }
        }
    }

    /// Ctrl-C at `mpirun` (which passes SIGTERM on to every process), or SIGTERM to one process
    /// alone: every process stops at the same barrier, and process 0 reports the epochs every
    /// rank of every process completed, marked interrupted, in every output.
    #[test]
    fn an_interrupt_stops_every_process_at_the_same_step_and_reports_what_all_completed() {
        let tmp = Scratch::new("mpi-interrupt");
        for target in ["mpirun", "process 1"] {
            let out = tmp.join(format!("out-{}", target.replace(' ', "-")));
            let mut words = strings(&[
                "run",
                "-n",
                "2",
                "workload=default",
                "++workload.dataset.format=synthetic",
                // 16 steps of 0.25 s an epoch: the signal, sent when epoch 2 starts, arrives
                // seconds before the training could end, however slowly mpirun forwards it.
                "++workload.dataset.num_files_train=64",
                "++workload.dataset.num_samples_per_file=1",
                "++workload.reader.batch_size=1",
                "++workload.train.computation_time=0.25",
                "++workload.train.epochs=3",
                "++workload.workflow.generate_data=False",
                "++workload.workflow.evaluation=False",
                "++workload.workflow.checkpoint=False",
            ]);
            words.push(format!("++hydra.run.dir={}", out.display()));
            let mut run = mpirun_live(&tmp.path, 2, &words);
            run.wait_for("epoch 2/3 train");
            match target {
                "mpirun" => run.signal(libc::SIGINT),
                _ => terminate_process(&run, 1),
            }
            let (ran, took) = run.finish();
            assert!(ran.code != Some(0), "{target}: {}", ran.context());
            assert!(
                took < Duration::from_secs(10),
                "{target}: stopping took {took:?}"
            );
            let summary = read_json(&out.join("summary.json"));
            let report = read_json(&out.join("report.json"));
            let completed = int(&summary, "/interrupted/epochs_completed") as usize;
            assert!((1..=2).contains(&completed), "{target}: {completed}");
            assert_eq!(at(&summary, "/interrupted/signal"), "SIGTERM", "{target}");
            assert_eq!(at(&report, "/status"), "interrupted", "{target}");
            assert_eq!(int(&summary, "/num_accelerators"), 4, "{target}");
            assert_eq!(at(&report, "/epochs").as_array().unwrap().len(), completed);
            for rank in 0..4 {
                let per_epoch = read_json(&out.join(format!("{rank}_per_epoch_stats.json")));
                assert_eq!(
                    per_epoch.as_object().unwrap().len(),
                    completed,
                    "{target}: rank {rank}"
                );
            }
        }
    }

    /// `mpirun -n PROCESSES dlio-rs ARGS`, running: its lines arrive as they are said.
    fn mpirun_live(cwd: &Path, processes: usize, args: &[String]) -> Live {
        let (cmd, what) =
            mpirun_command(cwd, &["--bind-to", "none"], &[], processes, DLIO_RS, args);
        Live::spawn(cmd, what)
    }

    /// Sends SIGTERM to the process of index `process` of the job `run` launched (a child of
    /// its mpirun, found by the index Open MPI gave it).
    fn terminate_process(run: &Live, process: usize) {
        let listed = std::process::Command::new("pgrep")
            .args(["-P", &run.pid().to_string(), "-x", "dlio-rs"])
            .output()
            .unwrap();
        let pids: Vec<i32> = String::from_utf8_lossy(&listed.stdout)
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect();
        let index_of = |pid: i32| {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
            environ
                .split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"OMPI_COMM_WORLD_RANK="))
                .map(|r| String::from_utf8_lossy(r).into_owned())
        };
        let target = *pids
            .iter()
            .find(|&&p| index_of(p) == Some(process.to_string()))
            .unwrap_or_else(|| panic!("no process {process} among {pids:?}"));
        // SAFETY: a plain system call on a process of this test's launch.
        assert_eq!(unsafe { libc::kill(target, libc::SIGTERM) }, 0);
    }

    /// A signal to one process before any epoch is complete: nothing to report, so every process
    /// ends with the signal's exit code, said once, and the folder says the run was interrupted
    /// (not an abort of the job, which would end it with 1).
    #[test]
    fn an_interrupt_before_anything_completed_ends_every_process_with_the_signal() {
        let tmp = Scratch::new("mpi-interrupt-early");
        let mut words = strings(&[
            "run",
            "workload=default",
            "++workload.dataset.format=synthetic",
            "++workload.dataset.num_files_train=16",
            "++workload.dataset.num_samples_per_file=1",
            "++workload.reader.batch_size=1",
            "++workload.train.computation_time=0.5",
            "++workload.train.epochs=1",
            "++workload.workflow.generate_data=False",
            "++workload.workflow.evaluation=False",
        ]);
        words.push(format!("++hydra.run.dir={}", tmp.s("out")));
        let mut live = mpirun_live(&tmp.path, 2, &words);
        // Said as training starts; the epoch takes 8 steps of 0.5 s.
        live.wait_for("training: 2 accelerator(s), 1 epoch(s) of 8 step(s)");
        terminate_process(&live, 1);
        let (ran, _) = live.finish();
        assert_eq!(ran.code, Some(143), "{}", ran.context());
        assert_eq!(
            ran.stderr.matches("error: interrupted by SIGTERM").count(),
            1,
            "{}",
            ran.context()
        );
        assert!(!ran.stderr.contains("MPI_ABORT"), "{}", ran.context());
        let report = read_json(&tmp.join("out/report.json"));
        assert_eq!(at(&report, "/status"), "interrupted");
        assert!(!tmp.join("out/summary.json").exists());
    }

    /// A sweep of 2 to 16 accelerators on [`throttled_sweep_words`], each process behind its own
    /// 52 MiB/s link (`storage.throttle` is each process's: its client's link). With 2 processes
    /// a trial of n accelerators puts n/2 on each link: 10 ask for 2 × 50 MiB/s (AU near 100 %),
    /// 12 for 2 × 60 (AU at most 52 / 60 = 87 %, below the 90 % threshold): the answer is 10.
    fn sweep_words(tmp: &Scratch) -> Vec<String> {
        let mut words = strings(&["sweep", "--max-accelerators=16", "-o", &tmp.s("sweep")]);
        words.extend(throttled_sweep_words(tmp, 336));
        words
    }

    #[test]
    fn a_sweep_under_mpirun_spreads_each_trial_over_the_processes_and_continues() {
        let tmp = Scratch::new("mpi-sweep");
        // Stopped by a signal to one process while its second trial runs: the job stops there,
        // keeping its first trial, and says so once.
        let mut live = mpirun_live(&tmp.path, 2, &sweep_words(&tmp));
        live.wait_for("trial 2: 16 accelerator(s) (8 in each of 2 processes)…");
        terminate_process(&live, 1);
        let (stopped, took) = live.finish();
        assert_eq!(stopped.code, Some(143), "{}", stopped.context());
        assert!(took < Duration::from_secs(15), "stopping took {took:?}");
        assert_eq!(
            stopped
                .stdout
                .matches("The sweep stopped before its answer")
                .count(),
            1,
            "{}",
            stopped.context()
        );
        assert_eq!(
            stopped.stderr.matches("the sweep was interrupted").count(),
            1
        );
        let kept = read_json(&tmp.join("sweep/sweep.json"));
        let kept: Vec<u64> = at(&kept, "/trials")
            .as_array()
            .unwrap()
            .iter()
            .map(|t| int(t, "/accelerators"))
            .collect();
        assert_eq!(kept, [2]);

        // The same words under mpirun continue from it, and find the answer.
        let (ran, _) = mpirun(&tmp.path, 2, DLIO_RS, &sweep_words(&tmp));
        let ran = ran.ok();
        assert_eq!(
            ran.stderr.matches("from its 1 trial(s)").count(),
            1,
            "{}",
            ran.context()
        );
        assert!(!ran.stderr.contains("trial 1:") && ran.stderr.contains("trial 2:"));
        // One answer, printed once for the job.
        let answer = "keeps 10 accelerator(s) above 90 % AU (12 are not; 11 was not tried (the \
                      sweep tries multiples of 2 only))";
        assert_eq!(ran.stdout.matches(answer).count(), 1, "{}", ran.context());
        let saved = read_json(&tmp.join("sweep/sweep.json"));
        assert_eq!(int(&saved, "/processes"), 2);
        assert_eq!(int(&saved, "/answer/most_passing"), 10);
        assert_eq!(int(&saved, "/answer/fewest_failing"), 12);
        let trials = at(&saved, "/trials").as_array().unwrap().clone();
        // 2 and 16, then halves on even counts: 8, 12, 10.
        assert!(trials.len() <= 5, "{saved}");
        for trial in &trials {
            let n = int(trial, "/accelerators");
            assert_eq!(n % 2, 0, "{trial}");
            assert_eq!(trial["passed"], Value::Bool(n <= 10), "{trial}");
            // A valid measurement: every byte read crossed a link, and 16 accelerators still
            // have 21 steps (a window of 20) each.
            assert_eq!(trial["reasons"], Value::Array(Vec::new()), "{trial}");
            assert_eq!(trial["cache_share"].as_f64(), Some(0.0), "{trial}");
            assert_eq!(int(trial, "/bytes_from_storage"), int(trial, "/bytes_read"));
            // The trial was one run of n ranks, half in each process: every rank's file, one
            // summary of all.
            let folder = tmp.join(format!("sweep/trial-{n}"));
            let summary = read_json(&folder.join("summary.json"));
            assert_eq!(int(&summary, "/num_accelerators"), n);
            for rank in 0..n {
                assert!(
                    folder.join(format!("{rank}_output.json")).exists(),
                    "{trial}"
                );
            }
            assert!(!folder.join(format!("{n}_output.json")).exists());
        }
        let page = std::fs::read_to_string(tmp.join("sweep/report.html")).unwrap();
        assert!(page.contains("data-answer=\"10\""));
        assert!(page.contains("spread evenly over 2 MPI processes"));

        // Its trials ran in 2 processes: one process may not continue it.
        dlio_rs(&tmp.path, &sweep_words(&tmp))
            .fails(2)
            .says(&["ran in 2 process(es)", "mpirun -n 2"]);
    }

    /// Counts the processes cannot share evenly are refused before any trial, once for the job.
    #[test]
    fn a_sweep_under_mpirun_refuses_counts_the_processes_cannot_share() {
        let tmp = Scratch::new("mpi-sweep-bounds");
        let mut words = sweep_words(&tmp);
        words.push("--min-accelerators=3".into());
        let (ran, _) = mpirun(&tmp.path, 2, DLIO_RS, &words);
        let ran = ran
            .fails(2)
            .says(&["--min-accelerators (3)", "the 2 MPI processes"]);
        assert_eq!(ran.stderr.matches("error:").count(), 1, "{}", ran.context());
        assert!(!tmp.join("sweep/trial-3").exists() && !tmp.join("data").exists());
    }

    /// A checkpoint sweep in 2 processes, each behind its own 100 MiB/s link that one rank's saves
    /// nearly fill: 2 ranks (one per process) are the reference, 4 (two per link) get about
    /// half each: the answer is 2.
    #[test]
    fn a_checkpoint_sweep_under_mpirun_holds_ranks_to_its_first_trial() {
        let tmp = Scratch::new("mpi-sweep-checkpoints");
        let words = checkpoint_sweep_args(&tmp);
        let (ran, _) = mpirun(&tmp.path, 2, DLIO_RS, &words);
        let ran = ran.ok();
        assert_eq!(
            ran.stdout
                .matches("keeps 2 accelerator(s) at 90 % or more of the save throughput per rank of 2 rank(s) (4 are not")
                .count(),
            1,
            "{}",
            ran.context()
        );
        let saved = read_json(&tmp.join("sweep/sweep.json"));
        let trials = at(&saved, "/trials").as_array().unwrap();
        assert_eq!(int(&trials[0], "/accelerators"), 2);
        let first = trials[0]["per_rank_gib_per_second"].as_f64().unwrap();
        for trial in trials {
            let per_rank = trial["per_rank_gib_per_second"].as_f64().unwrap();
            assert_eq!(
                trial["passed"],
                Value::Bool(per_rank >= 0.9 * first),
                "{trial}"
            );
            // Two links: 2 × 100 MiB/s is 0.195 GiB/s.
            assert!(
                trial["checkpoint_gib_per_second"].as_f64().unwrap() <= 0.2,
                "{trial}"
            );
        }
    }
}

#[cfg(not(feature = "mpi"))]
#[test]
fn the_default_build_under_mpirun_asks_for_the_mpi_feature() {
    let tmp = Scratch::new("mpi-default-build");
    let words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        &format!("++workload.dataset.data_folder={}", tmp.s("data")),
        &format!("++hydra.run.dir={}", tmp.s("out")),
    ]);
    let (ran, _) = mpirun(&tmp.path, 2, DLIO_BENCHMARK, &words);
    let ran = ran.fails(2).says(&[
        "2 MPI processes",
        "cargo build --release --features mpi",
        "libopenmpi-dev",
        "DLIO_RS_ACCELERATORS=2",
    ]);
    assert_eq!(
        ran.stderr.matches("error:").count(),
        1,
        "said once, not once per process\n{}",
        ran.context()
    );
    assert!(!tmp.join("data").exists() && !tmp.join("out").exists());
}
