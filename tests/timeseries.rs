//! The run's time series (`timeseries.jsonl`): written as the run goes, a line per rank, per
//! host and for the run each interval, whose sums are exactly the report's totals; AU counted
//! in the intervals compute spans; checkpoint bytes; the host's disks; off with 0.

use serde_json::Value;

use crate::common::*;

/// A run behind a slow link (`storage.throttle`): 1 MiB samples, one per step, 0.2 s of compute
/// each, sampled every 0.05 s, so compute spans several intervals.
fn throttled_words(tmp: &Scratch, extra: &[&str]) -> Vec<String> {
    let mut words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.evaluation=False",
        "++workload.dataset.format=npy",
        "++workload.dataset.num_subfolders_train=0",
        "++workload.dataset.num_files_train=6",
        "++workload.dataset.record_length_bytes=1048576",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.reader.batch_size=1",
        "++workload.reader.read_threads=1",
        "++workload.train.computation_time=0.2",
        "++workload.train.epochs=2",
        "++workload.storage.throttle.mib_per_second=20",
        "++workload.storage.throttle.latency_ms=1",
        "++workload.output.timeseries_interval=0.05",
    ]);
    words.push(format!("++workload.dataset.data_folder={}", tmp.s("data")));
    words.push(format!("++hydra.run.dir={}", tmp.s("out")));
    words.extend(extra.iter().map(|w| w.to_string()));
    words
}

/// The file's whole lines (a run still writing may have begun the next).
pub fn lines_of(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    whole
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

pub fn of_kind<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["kind"] == kind).collect()
}

fn sum(lines: &[&Value], key: &str) -> u64 {
    lines.iter().map(|l| int(l, key)).sum()
}

/// Each interval's run line follows the last: contiguous, and in order.
pub fn assert_contiguous(runs: &[&Value]) {
    let mut end = 0.0;
    for (i, run) in runs.iter().enumerate() {
        assert_eq!(num(run, "/start"), end, "{run}");
        assert!(num(run, "/end") >= end, "{run}");
        assert!(i == 0 || int(run, "/interval") > int(runs[i - 1], "/interval"));
        end = num(run, "/end");
    }
}

#[test]
fn intervals_are_contiguous_and_sum_to_the_report() {
    let tmp = Scratch::new("timeseries_sums");
    run_quiet(&tmp.path, 2, &throttled_words(&tmp, &[])).ok();
    let report = read_json(&tmp.join("out/report.json"));
    let epochs = at(&report, "/epochs").as_array().unwrap();
    let bytes: u64 = epochs.iter().map(|e| int(e, "/bytes_read")).sum();
    let samples: u64 = epochs.iter().map(|e| int(e, "/samples_read")).sum();
    assert_eq!(samples, 6 * 2);
    let lines = lines_of(&tmp.join("out/timeseries.jsonl"));
    let (ranks, hosts, runs) = (
        of_kind(&lines, "rank"),
        of_kind(&lines, "host"),
        of_kind(&lines, "run"),
    );
    // Each interval: a line for each of the 2 ranks, then the host's, then the run's.
    assert_eq!(ranks.len(), 2 * runs.len());
    assert_eq!(hosts.len(), runs.len());
    assert!(runs.len() >= 10, "{} intervals", runs.len());
    assert_contiguous(&runs);
    for key in ["/bytes_read", "/samples", "/steps"] {
        let total = if key == "/bytes_read" { bytes } else { samples };
        assert_eq!(sum(&runs, key), total, "{key}");
        assert_eq!(sum(&ranks, key), total, "{key}");
    }
    // Behind a 20 MiB/s link each 1 MiB read takes ~50 ms: intervals with a read under way.
    assert!(runs.iter().any(|r| num(r, "/reads_in_flight") > 0.5));
    assert!(runs
        .iter()
        .any(|r| r["read_latency_us"]["p50"].as_f64() > Some(20_000.0)));
    // Compute counts in the intervals it spans: no interval over 100 %, and over the run each
    // rank's compute is its steps × 0.2 s.
    for run in &runs {
        assert!(num(run, "/au_percent") <= 100.0 + 1e-6, "{run}");
    }
    let compute: f64 = runs
        .iter()
        .map(|h| num(h, "/au_percent") / 100.0 * (num(h, "/end") - num(h, "/start")))
        .sum();
    let expected = samples as f64 / 2.0 * 0.2;
    assert!(
        (compute - expected).abs() < 0.05 * expected,
        "{compute} s of compute per rank, expected {expected}"
    );
    let compute_seconds: f64 = ranks.iter().map(|r| num(r, "/compute_seconds")).sum();
    assert!((compute_seconds - 2.0 * expected).abs() < 0.05 * expected);
}

/// A TFRecord dataset of 12 files × 8 records of 64 KiB, for the loaders with threads of their own.
const TFRECORD_12_BY_8: [&str; 4] = [
    "++workload.dataset.format=tfrecord",
    "++workload.dataset.num_files_train=12",
    "++workload.dataset.num_samples_per_file=8",
    "++workload.dataset.record_length_bytes=65536",
];

/// Runs `extra` (traced) on `ranks` ranks and returns its time series' lines, once its run
/// lines are checked to be contiguous, to count as samples the reads its ranks traced, to keep
/// AU at 100 % at most, and to have at most `most_in_flight` reads in flight at any time.
fn traced_run(tmp: &Scratch, ranks: usize, extra: &[&str], most_in_flight: f64) -> Vec<Value> {
    run_quiet(&tmp.path, ranks, &throttled_words(tmp, extra)).ok();
    let rows: u64 = (0..ranks)
        .map(|rank| {
            let trace = std::fs::read_to_string(tmp.join(format!("out/trace/{rank}.csv"))).unwrap();
            trace.lines().skip(1).count() as u64
        })
        .sum();
    let lines = lines_of(&tmp.join("out/timeseries.jsonl"));
    let runs = of_kind(&lines, "run");
    assert_contiguous(&runs);
    assert_eq!(sum(&runs, "/samples"), rows);
    for run in &runs {
        assert!(num(run, "/au_percent") <= 100.0 + 1e-6, "{run}");
        assert!(
            num(run, "/reads_in_flight") <= most_in_flight + 1e-6,
            "{run}"
        );
    }
    lines
}

/// Loaders that start more threads than `read_threads` (the TensorFlow pipeline's 3 workers per
/// read thread, over TFRecord) each count in a meter of their own: the time series' reads are
/// the trace's rows, its AU never above 100 %, and the run ends.
#[test]
fn every_worker_of_the_tensorflow_pipeline_counts_in_its_own_meter() {
    let tmp = Scratch::new("timeseries_tf_workers");
    let mut extra = TFRECORD_12_BY_8.to_vec();
    extra.extend([
        "++workload.reader.data_loader=tensorflow",
        "++workload.reader.read_threads=2",
        "++workload.reader.batch_size=4",
        "++workload.reader.shuffle_size=8",
        "++workload.train.computation_time=0.02",
        "++workload.storage.throttle.mib_per_second=40",
        "++workload.output.trace=True",
    ]);
    // 2 ranks × 6 workers at most.
    traced_run(&tmp, 2, &extra, 12.0);
}

/// The native DALI loader over TFRecord starts its reader and `read_threads` operator threads,
/// which read the pages of the records the kernel was not advised to read ahead (those that do
/// not start a page) as they parse them: each thread has a meter of its own (one writer per
/// meter), so the time series counts every byte any of them brought from storage, as report.json
/// does, and its samples are the traced reads.
#[test]
fn every_thread_of_the_native_dali_pipeline_counts_in_its_own_meter() {
    let tmp = Scratch::new("timeseries_native_dali");
    let mut extra = vec![
        "++workload.storage.throttle.mib_per_second=0",
        "++workload.storage.throttle.latency_ms=0",
    ];
    extra.extend(TFRECORD_12_BY_8);
    extra.extend([
        "++workload.reader.data_loader=native_dali",
        "++workload.reader.read_threads=3",
        "++workload.reader.batch_size=4",
        "++workload.reader.page_cache=evict_after_read",
        "++workload.train.computation_time=0.01",
        "++workload.output.trace=True",
    ]);
    // DALI's reader takes one sample at a time.
    let lines = traced_run(&tmp, 1, &extra, 1.0);
    let report = read_json(&tmp.join("out/report.json"));
    let from_storage: u64 = at(&report, "/epochs")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| int(e, "/bytes_from_storage"))
        .sum();
    let hosts = of_kind(&lines, "host");
    assert_eq!(sum(&hosts, "/bytes_from_storage"), from_storage);
}

#[test]
fn the_host_s_disk_counts_at_least_what_the_ranks_read_from_it() {
    let tmp = Scratch::new("timeseries_disk");
    let words = throttled_words(
        &tmp,
        &[
            "++workload.reader.odirect=True",
            "++workload.storage.throttle.mib_per_second=200",
        ],
    );
    run_quiet(&tmp.path, 1, &words).ok();
    let report = read_json(&tmp.join("out/report.json"));
    let from_storage: u64 = at(&report, "/epochs")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| int(e, "/bytes_from_storage"))
        .sum();
    let lines = lines_of(&tmp.join("out/timeseries.jsonl"));
    let hosts = of_kind(&lines, "host");
    assert_eq!(sum(&hosts, "/bytes_from_storage"), from_storage);
    let disks: Vec<&Value> = hosts
        .iter()
        .flat_map(|h| h["disks"].as_array().unwrap())
        .collect();
    // The scratch folder is on a block device here (the tests' machine): named, and its reads
    // (this run's and any other process's) at least this run's.
    assert!(!disks.is_empty(), "no disk watched: {}", hosts[0]);
    let device = disks[0]["device"].as_str().unwrap();
    assert!(disks.iter().all(|d| d["device"] == device));
    assert!(sum(&disks, "/read_bytes") >= from_storage);
    for host in &hosts {
        let cpu = num(host, "/cpu_busy_percent");
        assert!((0.0..=100.0).contains(&cpu), "{host}");
        assert!(int(host, "/memory_used_bytes") < int(host, "/memory_total_bytes"));
    }
}

#[test]
fn checkpoint_bytes_are_counted_as_they_move() {
    let tmp = Scratch::new("timeseries_checkpoint");
    let mut args = strings(&["run", "-q", "--accelerators", "2"]);
    args.extend(strings(TINY_LLAMA));
    args.extend(strings(&[
        "++workload.checkpoint.num_checkpoints_write=2",
        "++workload.checkpoint.num_checkpoints_read=1",
        "++workload.storage.throttle.mib_per_second=100",
        "++workload.output.timeseries_interval=0.05",
    ]));
    args.push(format!(
        "++workload.checkpoint.checkpoint_folder={}",
        tmp.s("ckpt")
    ));
    args.push(format!("++hydra.run.dir={}", tmp.s("out")));
    dlio_rs(&tmp.path, &args).ok();
    let report = read_json(&tmp.join("out/report.json"));
    let size = int(&report, "/checkpoints/size_bytes");
    let lines = lines_of(&tmp.join("out/timeseries.jsonl"));
    let (ranks, runs) = (of_kind(&lines, "rank"), of_kind(&lines, "run"));
    assert_contiguous(&runs);
    assert_eq!(sum(&runs, "/checkpoint_bytes_written"), 2 * size);
    assert_eq!(sum(&runs, "/checkpoint_bytes_read"), size);
    assert_eq!(sum(&ranks, "/checkpoint_bytes_written"), 2 * size);
    // Behind a 100 MiB/s link the saves take several intervals: bytes move in each of them,
    // not all in the one a save ends in.
    let moving = runs
        .iter()
        .filter(|r| int(r, "/checkpoint_bytes_written") > 0)
        .count();
    assert!(moving >= 3, "{moving} intervals wrote");
    assert_eq!(sum(&runs, "/samples"), 0);
}

#[test]
fn an_interval_of_zero_writes_no_time_series_and_leaves_no_old_one() {
    let tmp = Scratch::new("timeseries_off");
    run_quiet(&tmp.path, 1, &throttled_words(&tmp, &[])).ok();
    assert!(tmp.join("out/timeseries.jsonl").exists());
    let words = throttled_words(&tmp, &["++workload.output.timeseries_interval=0"]);
    run_quiet(&tmp.path, 1, &words).ok();
    assert!(tmp.join("out/report.json").exists());
    assert!(!tmp.join("out/timeseries.jsonl").exists());
}

#[test]
fn a_bad_interval_is_refused_naming_the_key_and_range() {
    let tmp = Scratch::new("timeseries_bad");
    for bad in ["-1", "0.001", "7200"] {
        let word = format!("++workload.output.timeseries_interval={bad}");
        run_quiet(&tmp.path, 1, &throttled_words(&tmp, &[&word]))
            .fails(2)
            .says(&["output.timeseries_interval", "0.01 to 3600"]);
    }
}

/// `GET /metrics` of the endpoint at `address` (bounded in time); the body.
pub fn scrape(address: &str) -> String {
    use std::io::{Read, Write};
    let timeout = std::time::Duration::from_secs(5);
    let address: std::net::SocketAddr = address.parse().unwrap();
    let mut stream = std::net::TcpStream::connect_timeout(&address, timeout).unwrap();
    stream.set_read_timeout(Some(timeout)).unwrap();
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: {address}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(
        answer.contains("Content-Type: text/plain; version=0.0.4"),
        "{answer}"
    );
    answer.split_once("\r\n\r\n").unwrap().1.to_string()
}

/// The page as Prometheus's own Python client parses it: family name → [[sample, labels,
/// value]].
pub fn parsed(page: &str) -> Value {
    let script = "import sys, json\n\
        from prometheus_client.parser import text_string_to_metric_families as families\n\
        print(json.dumps({f.name: [[s.name, s.labels, s.value] for s in f.samples]\n\
                          for f in families(sys.stdin.read())}))";
    // prometheus_client: pip install prometheus_client, as .ci/run does.
    python_json(script, page, "Prometheus's parser (prometheus_client)")
}

/// The value of the sample `name` with label `key` = `value` (or the first sample).
pub fn sample(families: &Value, family: &str, name: &str, label: Option<(&str, &str)>) -> f64 {
    let samples = families[family]
        .as_array()
        .unwrap_or_else(|| panic!("no family {family}: {families}"));
    samples
        .iter()
        .find(|s| s[0] == name && label.is_none_or(|(k, v)| s[1][k] == v))
        .and_then(|s| s[2].as_f64())
        .unwrap_or_else(|| panic!("no sample {name} {label:?} in {family}: {samples:?}"))
}

/// `--metrics-listen` serves each interval's page while the run runs: Prometheus's parser reads
/// it, its counters grow between scrapes, it carries the run's labels; the endpoint is gone
/// when the run ends.
#[test]
fn the_metrics_endpoint_is_scraped_during_a_run() {
    let tmp = Scratch::new("timeseries_metrics");
    let words = throttled_words(&tmp, &["++workload.train.epochs=40"]);
    run_quiet(&tmp.path, 1, &with(&words, &["++workload.train.epochs=1"])).ok();
    let mut args = strings(&["run", "--accelerators", "2", "--metrics-listen", "0"]);
    args.extend(with(&words, &["++workload.workflow.generate_data=False"]));
    let mut live = Live::dlio_rs(&tmp.path, &args);
    let said = live.wait_for("metrics: http://");
    let address = said
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap()
        .to_string();
    // Scrape until two pages show reads (each interval renders a new page; bounded).
    let deadline = std::time::Instant::now() + LIVE_BOUND;
    let mut pages = Vec::new();
    while pages.len() < 2 {
        assert!(std::time::Instant::now() < deadline, "no reads scraped");
        let families = parsed(&scrape(&address));
        let read = |f: &Value| {
            f.get("dlio_samples").is_some()
                && sample(f, "dlio_samples", "dlio_samples_total", Some(("rank", "1"))) > 0.0
        };
        let newer = pages.last().is_none_or(|p: &Value| {
            sample(
                &families,
                "dlio_samples",
                "dlio_samples_total",
                Some(("rank", "1")),
            ) > sample(p, "dlio_samples", "dlio_samples_total", Some(("rank", "1")))
        });
        if read(&families) && newer {
            pages.push(families);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    live.signal(libc::SIGINT);
    let (ran, _) = live.finish();
    assert_eq!(ran.code, Some(130), "{}", ran.context());
    let page = &pages[1];
    let labels = &page["dlio_samples"][0][1];
    assert_eq!(labels["workload"], "default", "{labels}");
    assert!(
        labels["host"].is_string() && labels["rank"].is_string(),
        "{labels}"
    );
    // Every sample is the same size: bytes per sample alike in every rank and page; behind a
    // 20 MiB/s link, MiB/s and AU plausible.
    let per_sample = |page: &Value, rank: &str| {
        let rank = Some(("rank", rank));
        sample(page, "dlio_read_bytes", "dlio_read_bytes_total", rank)
            / sample(page, "dlio_samples", "dlio_samples_total", rank)
    };
    assert_eq!(per_sample(page, "0"), per_sample(&pages[0], "1"));
    assert!(per_sample(page, "0") > 1048576.0 * 0.99);
    let mib = sample(
        page,
        "dlio_interval_mib_per_second",
        "dlio_interval_mib_per_second",
        None,
    );
    assert!(
        (0.0..=25.0).contains(&mib),
        "{mib} MiB/s behind a 20 MiB/s link"
    );
    let au = sample(
        page,
        "dlio_interval_au_percent",
        "dlio_interval_au_percent",
        None,
    );
    assert!((0.0..=100.0 + 1e-9).contains(&au), "{au}");
    let count = sample(
        page,
        "dlio_read_latency_seconds",
        "dlio_read_latency_seconds_count",
        None,
    );
    let under_inf = sample(
        page,
        "dlio_read_latency_seconds",
        "dlio_read_latency_seconds_bucket",
        Some(("le", "+Inf")),
    );
    assert_eq!(count, under_inf);
    assert!(page["dlio_host_cpu_busy_percent"].is_array(), "{page}");
    // Gone with the run.
    let address: std::net::SocketAddr = address.parse().unwrap();
    let timeout = std::time::Duration::from_secs(1);
    assert!(std::net::TcpStream::connect_timeout(&address, timeout).is_err());
}

#[test]
fn a_taken_port_is_a_usage_error_naming_it() {
    let tmp = Scratch::new("timeseries_port");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut args = strings(&["run", "-q", "--metrics-listen", &port]);
    args.extend(throttled_words(&tmp, &[]));
    dlio_rs(&tmp.path, &args)
        .fails(2)
        .says(&["output.metrics_listen", &format!("127.0.0.1:{port}")]);
    let mut args = strings(&["run", "-q", "--metrics-listen", "nohost:1"]);
    args.extend(throttled_words(&tmp, &[]));
    dlio_rs(&tmp.path, &args)
        .fails(2)
        .says(&["--metrics-listen", "IP:PORT"]);
    let words = throttled_words(
        &tmp,
        &[
            "++workload.output.metrics_listen=9464",
            "++workload.output.timeseries_interval=0",
        ],
    );
    run_quiet(&tmp.path, 1, &words).fails(2).says(&[
        "output.metrics_listen",
        "output.timeseries_interval above 0",
    ]);
}

/// The page draws the run over time from timeseries.jsonl: one point per interval (fewer than
/// the page's 400), the values of the run's lines.
#[test]
fn the_page_draws_the_run_over_time() {
    let tmp = Scratch::new("timeseries_page");
    run_quiet(
        &tmp.path,
        2,
        &throttled_words(&tmp, &["++workload.reader.odirect=True"]),
    )
    .ok();
    let lines = lines_of(&tmp.join("out/timeseries.jsonl"));
    let runs = of_kind(&lines, "run");
    let html = std::fs::read_to_string(tmp.join("out/report.html")).unwrap();
    let close = |drawn: Vec<f64>, key: &str| {
        assert_eq!(drawn.len(), runs.len(), "{key}");
        for (d, run) in drawn.iter().zip(&runs) {
            let v = num(run, key);
            assert!(
                (d - v).abs() <= 1e-9 * v.abs().max(1.0),
                "{key}: {d} against {v}"
            );
        }
    };
    let throughput = svg::chart(&html, "throughput-over-time");
    close(svg::series(throughput, "read"), "/mib_per_second");
    let au = svg::chart(&html, "au-over-time");
    close(svg::series(au, "AU, mean of the ranks"), "/au_percent");
    let in_flight = svg::chart(&html, "in-flight-over-time");
    let in_flight = svg::series(in_flight, "reads in flight, all reader threads");
    close(in_flight, "/reads_in_flight");
    // O_DIRECT: everything read came from the disk the data is on, which has its charts.
    let disk = svg::chart(&html, "disk-reads-over-time");
    let device = svg::of_class(disk, "series");
    assert!(svg::attribute(device[0], "data-series").is_some_and(|s| s.contains(" on ")));
    assert!(
        svg::series(disk, svg::attribute(device[0], "data-series").unwrap())
            .iter()
            .any(|&mib| mib > 0.0)
    );
    assert_eq!(svg::overlapping_labels(&html), None);
}
