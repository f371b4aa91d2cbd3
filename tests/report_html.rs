//! report.html: written by every training run and rebuilt by `dlio-rs report`, from the run's
//! files alone (also without report.json, as for a run of Python DLIO); its charts show the
//! run's values (a mark per epoch, a timeline per rank with its steps); a real browser (Chromium,
//! headless) renders it without a console error and its screenshot is not blank; a 10,000-step
//! run's page stays small. Its charts are labelled for a slide: titles, axis titles with units,
//! round ticks that cover the values, labels that do not overlap, a log latency axis, failing
//! epochs in a colour of their own, and no empty chart.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::common::*;

/// The `data-value`s of the marks of the chart `name`, in order.
fn marks(html: &str, name: &str) -> Vec<f64> {
    let start = html
        .find(&format!("data-chart=\"{name}\""))
        .unwrap_or_else(|| panic!("no chart {name}"));
    let end = start + html[start..].find("</svg>").unwrap();
    html[start..end]
        .split("class=\"mark\" data-value=\"")
        .skip(1)
        .map(|rest| rest[..rest.find('"').unwrap()].parse().unwrap())
        .collect()
}

/// Chromium's console messages while loading `page`, and a screenshot of it in `png`.
fn chromium(page: &Path, png: &Path) -> String {
    let url = format!("file://{}", page.display());
    let mut shot = Command::new("chromium");
    shot.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        "--window-size=1000,2000",
        &format!("--screenshot={}", png.display()),
        &url,
    ]);
    let (ran, _) = run_bounded(
        shot,
        "chromium (apt install chromium, as .ci/run does)".into(),
        Duration::from_secs(120),
    );
    assert_eq!(ran.code, Some(0), "{}", ran.context());
    ran.stderr
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The share of the screenshot's pixels that are not white, and how many colours it has.
fn ink(png_path: &Path) -> (f64, usize) {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    let mut inked = 0usize;
    let mut colours = std::collections::HashSet::new();
    let count = pixels[..info.buffer_size()].len() / channels;
    for px in pixels[..info.buffer_size()].chunks(channels) {
        if px[..3].iter().any(|&c| c < 240) {
            inked += 1;
        }
        colours.insert((px[0], px[1], px[2]));
    }
    (inked as f64 / count as f64, colours.len())
}

/// Whether any pixel of the rows `rows` of the image is not white.
fn inked_rows(png_path: &Path, rows: std::ops::Range<usize>) -> bool {
    let decoder = png::Decoder::new(std::io::BufReader::new(
        std::fs::File::open(png_path).unwrap(),
    ));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let channels = info.color_type.samples();
    rows.flat_map(|y| pixels[y * info.line_size..(y + 1) * info.line_size].chunks(channels))
        .any(|px| px[..3].iter().any(|&c| c < 240))
}

/// `dlio-rs report OUT --png` with a browser that counts its starts: the run, and the starts.
fn png_with_counted_browser(tmp: &Scratch, out: &Path) -> (Ran, usize) {
    let starts = tmp.join("starts");
    let _ = std::fs::remove_file(&starts);
    let counting = tmp.join("counting.sh");
    std::fs::write(
        &counting,
        format!(
            "#!/bin/sh\necho start >> '{}'\nexec chromium \"$@\"\n",
            starts.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &counting,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let browser = counting.display().to_string();
    let ran = launch(
        DLIO_RS,
        &tmp.path,
        &["report", &out.display().to_string(), "--png"],
        &[("DLIO_RS_BROWSER", &browser)],
    )
    .ok();
    let started = std::fs::read_to_string(&starts).unwrap_or_default();
    (ran, started.lines().count())
}

#[test]
fn a_run_writes_a_report_page_that_shows_its_values_and_renders() {
    let tmp = Scratch::new("report-html");
    let out = tmp.join("out");
    let mut words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.evaluation=False",
        "++workload.dataset.num_files_train=48",
        "++workload.dataset.record_length_bytes=16384",
        "++workload.train.epochs=3",
        "++workload.train.computation_time=0.001",
        "++workload.reader.batch_size=4",
    ]);
    words.push(format!("++workload.dataset.data_folder={}", tmp.s("data")));
    words.push(format!("++hydra.run.dir={}", out.display()));
    run_quiet(&tmp.path, 2, &words).ok();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let summary = read_json(&out.join("summary.json"));
    let report = read_json(&out.join("report.json"));

    // A mark per epoch, with the epoch's values.
    assert_eq!(
        marks(&html, "au"),
        nums(&summary, "/metric/train_au_percentage")
    );
    assert_eq!(
        marks(&html, "samples"),
        nums(&summary, "/metric/train_throughput_samples_per_second")
    );
    let from_storage: Vec<f64> = at(&report, "/epochs")
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["bytes_from_storage"].as_f64().unwrap())
        .collect();
    assert_eq!(marks(&html, "storage"), from_storage);
    // A timeline per rank, with its steps: 48 samples / (2 ranks × 4) = 6 steps × 3 epochs.
    assert_eq!(html.matches("data-chart=\"timeline\"").count(), 2);
    assert_eq!(html.matches("data-steps=\"18\"").count(), 2);
    // The latency histogram counts every sample read.
    let reads: f64 = marks(&html, "latency").iter().sum();
    assert_eq!(reads, 3.0 * 48.0);
    // DLIO's nominal rate, in the unit it is (summary.json calls it MB, and it is MiB).
    let nominal = num(&summary, "/metric/train_io_mean_MB_per_second");
    assert!(
        html.contains(&format!(
            "<tr><th>Nominal MiB/s (DLIO's I/O throughput, mean)</th><td>{nominal:.2}</td></tr>"
        )),
        "{html}"
    );
    assert!(!html.contains("MB per second"));
    // The verdict is the run's (its AU depends on this machine's load, not on the page).
    let verdict = match at(&summary, "/metric/train_au_meet_expectation").as_str() {
        Some("success") => "pass",
        _ => "fail",
    };
    assert!(html.contains(&format!("data-verdict=\"{verdict}\"")));
    // Self-contained: nothing fetched, nothing run.
    for outside in ["http://", "https://", "<script", "@import", "url("] {
        assert!(
            !html
                .replace("http://www.w3.org/2000/svg", "")
                .contains(outside),
            "{outside}"
        );
    }

    assert_eq!(svg::overlapping_labels(&html), None);
    let console = chromium(&out.join("report.html"), &tmp.join("shot.png"));
    assert_eq!(console, "", "console messages");
    let (share, colours) = ink(&tmp.join("shot.png"));
    assert!(
        share > 0.05 && colours >= 5,
        "{share} inked, {colours} colours"
    );

    // The detector sees a console error where there is one.
    std::fs::write(tmp.join("bad.html"), "<script>nosuch()</script>").unwrap();
    assert!(chromium(&tmp.join("bad.html"), &tmp.join("bad.png")).contains("nosuch"));

    // Rebuilt from DLIO's files alone (as for a run of Python DLIO): the same AU marks; what
    // needs report.json says it is not recorded.
    std::fs::remove_file(out.join("report.json")).unwrap();
    std::fs::remove_file(out.join("report.html")).unwrap();
    let ran = dlio_rs(&tmp.path, &["report", &out.display().to_string()]).ok();
    assert!(ran.stdout.contains("report.html"));
    let rebuilt = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert_eq!(
        marks(&rebuilt, "au"),
        nums(&summary, "/metric/train_au_percentage")
    );
    assert!(rebuilt.contains("needs dlio-rs's report.json"));
    assert_eq!(rebuilt.matches("data-steps=\"18\"").count(), 2);

    dlio_rs(&tmp.path, &["report", &tmp.s("data")])
        .fails(2)
        .says(&["has no summary.json"]);

    // Each chart as SVG and PNG for slides: AU, samples/s, the run over time (throughput, AU,
    // reads in flight, and the scratch folder's disk: reads and busy) and the 2 timelines
    // (report.json, with what the storage and latency charts need, was removed above), drawn by
    // one browser start (a wrapper counts them).
    let (ran, starts) = png_with_counted_browser(&tmp, &out);
    let pngs: Vec<&str> = ran.stdout.lines().filter(|l| l.ends_with(".png")).collect();
    // The disk's two charts where the scratch folder is on a block device (not tmpfs).
    let disks = rebuilt.matches("data-chart=\"disk-").count();
    assert_eq!(pngs.len(), 7 + disks, "{}", ran.context());
    assert_eq!(starts, 1);
    for png in pngs {
        let (share, colours) = ink(Path::new(png));
        assert!(
            share > 0.01 && colours >= 3,
            "{png}: {share} inked, {colours} colours"
        );
        // The chart's SVG has its title and axis titles, and the PNG is it at twice its size.
        let chart = std::fs::read_to_string(Path::new(png).with_extension("svg")).unwrap();
        assert_eq!(svg::of_class(&chart, "chart-title").len(), 1);
        assert!(
            !svg::axis_title(&chart, "x").is_empty() && !svg::axis_title(&chart, "y").is_empty()
        );
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
        let info = decoder.read_info().unwrap().info().clone();
        assert_eq!(
            (f64::from(info.width), f64::from(info.height)),
            (
                2.0 * svg::number(&chart, "width"),
                2.0 * svg::number(&chart, "height")
            ),
            "{png}"
        );
    }
}

/// `report --png` for a folder named with characters a URL gives meaning to draws every chart; a
/// browser that hangs is stopped within its limit and named, and one that writes no PNG fails.
#[test]
fn png_charts_of_any_folder_and_browsers_that_fail_are_bounded() {
    let tmp = Scratch::new("png-bounded");
    let out = tmp.join("out #1 ?a=b %20");
    run_quiet(
        &tmp.path,
        1,
        &[
            "workload=default",
            "++workload.dataset.format=synthetic",
            "++workload.train.epochs=2",
            "++workload.train.computation_time=0.001",
            // Quoted, as Hydra's grammar wants a value with `#` or a space.
            &format!("++hydra.run.dir='{}'", out.display()),
        ],
    )
    .ok();
    let folder = out.display().to_string();
    let ran = dlio_rs(&tmp.path, &["report", &folder, "--png"]).ok();
    let pngs: Vec<&str> = ran.stdout.lines().filter(|l| l.ends_with(".png")).collect();
    assert!(pngs.len() >= 2, "{}", ran.context());
    for png in &pngs {
        let (share, _) = ink(Path::new(png));
        assert!(share > 0.01, "{png}: {share} inked");
    }
    let hangs = tmp.join("hangs.sh");
    std::fs::write(&hangs, "#!/bin/sh\nexec sleep 600\n").unwrap();
    let junk = tmp.join("junk.sh");
    std::fs::write(
        &junk,
        "#!/bin/sh\nfor a; do case $a in --screenshot=*) echo no > \"${a#--screenshot=}\";; esac; done\n",
    )
    .unwrap();
    for script in [&hangs, &junk] {
        std::fs::set_permissions(script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
    let started = std::time::Instant::now();
    let browser = hangs.display().to_string();
    launch(
        DLIO_RS,
        &tmp.path,
        &["report", &folder, "--png"],
        &[
            ("DLIO_RS_BROWSER", &browser),
            ("DLIO_RS_BROWSER_TIMEOUT", "0.5"),
        ],
    )
    .fails(1)
    .says(&["hangs.sh did not draw", "within 0.5 s, and was stopped"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(30));
    let browser = junk.display().to_string();
    launch(
        DLIO_RS,
        &tmp.path,
        &["report", &folder, "--png"],
        &[("DLIO_RS_BROWSER", &browser)],
    )
    .fails(1)
    .says(&["junk.sh did not draw", "no PNG image was written"]);
}

/// Two runs of one workload, the second behind a link slower than it needs: `compare` flags
/// the throughput's difference, and none between a run and itself; its page overlays the
/// epochs of both and renders.
#[test]
fn compare_flags_differences_beyond_the_noise() {
    let tmp = Scratch::new("compare");
    let mut words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.evaluation=False",
        "++workload.dataset.num_files_train=32",
        "++workload.dataset.record_length_bytes=262144",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.train.epochs=3",
        "++workload.train.computation_time=0.01",
        "++workload.reader.batch_size=2",
    ]);
    words.push(format!("++workload.dataset.data_folder={}", tmp.s("data")));
    let a = tmp.join("a");
    run_quiet(
        &tmp.path,
        1,
        &with(&words, &[&format!("++hydra.run.dir={}", a.display())]),
    )
    .ok();
    let b = tmp.join("b");
    // 2 samples of 256 KiB per 10 ms step ask for 50 MiB/s; the link gives 10.
    run_quiet(
        &tmp.path,
        1,
        &with(
            &words,
            &[
                "++workload.workflow.generate_data=False",
                "++workload.storage.throttle.mib_per_second=10",
                &format!("++hydra.run.dir={}", b.display()),
            ],
        ),
    )
    .ok();
    let page = tmp.join("compare.html");
    let compare = |x: &Path, y: &Path| {
        dlio_rs(
            &tmp.path,
            &[
                "compare",
                &x.display().to_string(),
                &y.display().to_string(),
                &format!("--html={}", page.display()),
            ],
        )
        .ok()
    };
    let ran = compare(&a, &b);
    let samples = ran
        .stdout
        .lines()
        .find(|l| l.starts_with("samples/s"))
        .unwrap_or_else(|| panic!("{}", ran.context()));
    assert!(samples.ends_with("DIFFERS"), "{samples}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("data-metric=\"samples/s\" data-differs=\"true\""));
    assert_eq!(html.matches("data-run=\"A\"").count() % 3, 0);
    assert_eq!(
        html.matches("data-run=\"A\"").count(),
        html.matches("data-run=\"B\"").count()
    );
    assert_eq!(chromium(&page, &tmp.join("compare.png")), "");

    let same = compare(&a, &a);
    assert!(!same.stdout.contains("DIFFERS"), "{}", same.context());
    assert!(same.stdout.contains("within noise"));
}

/// The files of a real Python DLIO run (DLIO's own test data): the page shows its four epochs'
/// AU and both ranks' steps, as many as its `proc` lists hold.
#[test]
fn a_python_dlio_run_gets_its_page() {
    let tmp = Scratch::new("report-dlio");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dlio-output");
    let mut steps = Vec::new();
    for file in ["summary.json", "0_output.json", "1_output.json"] {
        std::fs::copy(fixture.join(file), tmp.join(file)).unwrap();
        if let Some(rank) = file.strip_suffix("_output.json") {
            let output = read_json(&tmp.join(file));
            let count: usize = output
                .as_object()
                .unwrap()
                .values()
                .filter_map(|epoch| epoch["proc"].as_object())
                .flat_map(|blocks| blocks.values())
                .map(|list| list.as_array().unwrap().len())
                .sum();
            steps.push((rank.to_string(), count));
        }
    }
    dlio_rs(&tmp.path, &["report", &tmp.path.display().to_string()]).ok();
    let html = std::fs::read_to_string(tmp.join("report.html")).unwrap();
    let summary = read_json(&tmp.join("summary.json"));
    assert_eq!(
        marks(&html, "au"),
        nums(&summary, "/metric/train_au_percentage")
    );
    assert_eq!(marks(&html, "au").len(), 4);
    for (rank, count) in steps {
        assert!(count > 0);
        assert!(
            html.contains(&format!("data-rank=\"{rank}\" data-steps=\"{count}\"")),
            "rank {rank}: {count} steps"
        );
    }
    assert_eq!(
        chromium(&tmp.join("report.html"), &tmp.join("shot.png")),
        ""
    );
}

#[test]
fn the_page_of_a_10000_step_run_stays_small() {
    let tmp = Scratch::new("report-html-long");
    let out = tmp.join("out");
    let mut words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.evaluation=False",
        "++workload.dataset.format=synthetic",
        "++workload.dataset.num_files_train=1",
        "++workload.dataset.num_samples_per_file=10000",
        "++workload.reader.batch_size=1",
        "++workload.train.epochs=1",
        "++workload.train.computation_time=0",
    ]);
    words.push(format!("++workload.dataset.data_folder={}", tmp.s("data")));
    words.push(format!("++hydra.run.dir={}", out.display()));
    run_quiet(&tmp.path, 1, &words).ok();
    let size = std::fs::metadata(out.join("report.html")).unwrap().len();
    assert!(size < 2 << 20, "{size} bytes");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("data-steps=\"10000\""));
    assert_eq!(html.matches("class=\"column\"").count(), 400);
    let _: Value = read_json(&out.join("summary.json"));
}

/// A run's output folder, forged as a run of 2 accelerators writes it (summary.json and
/// report.json, no `{rank}_output.json`): `au` and `samples` per epoch, each epoch 3 GiB read
/// (2 from storage) with the read figures `compare` reads and a cache share of 0, the latency
/// buckets `latency` (µs, count) and `saves` checkpoint saves of 2 ranks.
fn forged_run(dir: &Path, au: &[f64], samples: &[f64], latency: &[(f64, u64)], saves: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let mean = au.iter().sum::<f64>() / au.len().max(1) as f64;
    let summary = serde_json::json!({
        "num_accelerators": 2,
        "metric": {
            "train_au_percentage": au,
            "train_au_mean_percentage": if au.is_empty() { None } else { Some(mean) },
            "train_au_meet_expectation": "fail",
            "train_throughput_samples_per_second": samples,
        },
    });
    let epochs: Vec<Value> = samples
        .iter()
        .map(|s| {
            serde_json::json!({
                "bytes_read": 3u64 << 30,
                "bytes_from_storage": 2u64 << 30,
                "measured_mib_per_second": s / 10.0,
                "p50_us": 5.0,
                "p99_us": 900.0,
                "cache_served_fraction": 0.0,
            })
        })
        .collect();
    let checkpoints: Vec<Value> = (1..=saves)
        .map(|i| {
            serde_json::json!({"operation": "save", "index": i, "per_rank_seconds": [0.5, 0.75]})
        })
        .collect();
    let report = serde_json::json!({
        "workload": "forged",
        "train": {"au_threshold_percent": 90.0},
        "epochs": epochs,
        "read_latency_histogram_us": latency.iter().map(|(us, n)| serde_json::json!([us, n])).collect::<Vec<_>>(),
        "checkpoints": {"list": checkpoints},
    });
    std::fs::write(dir.join("summary.json"), summary.to_string()).unwrap();
    std::fs::write(dir.join("report.json"), report.to_string()).unwrap();
}

/// The marks' values of a chart.
fn values(svg: &str) -> Vec<f64> {
    svg::marks(svg)
        .iter()
        .map(|m| svg::number(m, "data-value"))
        .collect()
}

/// A page of 120 epochs, 120 checkpoint bars and latencies from 3 µs to 42 ms: every chart has
/// a title and two axis titles, round ticks that cover its values and labels that do not
/// overlap; AU's axis ends at 100; failing epochs are in a colour of their own, said in the
/// legend; the bytes are in GiB; the latency axis is log, in µs and ms, an empty bin keeping its
/// place. The page renders in Chromium without a console message.
#[test]
fn charts_have_titles_round_ticks_and_labels_that_do_not_overlap() {
    let tmp = Scratch::new("charts-labelled");
    let out = tmp.join("out");
    let au: Vec<f64> = (0..120).map(|i| 60.0 + (i * 7 % 40) as f64).collect();
    let samples: Vec<f64> = (0..120).map(|i| 10_000.0 + 37.0 * i as f64).collect();
    let latency = [
        (3.5, 5),
        (4.2, 40),
        (5.0, 60),
        (900.0, 3),
        (1500.0, 2),
        (42_000.0, 1),
    ];
    forged_run(&out, &au, &samples, &latency, 60);
    dlio_rs(&tmp.path, &["report", &out.display().to_string()]).ok();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();

    for name in ["au", "samples", "storage", "latency", "checkpoints"] {
        let chart = svg::chart(&html, name);
        let title = svg::of_class(chart, "chart-title");
        assert!(!svg::text(title[0]).is_empty(), "{name}");
        for axis in ["x", "y"] {
            assert!(!svg::axis_title(chart, axis).is_empty(), "{name} {axis}");
        }
        let up = svg::ticks(chart, "y");
        assert!(up.len() >= 3 && svg::round_steps(&up), "{name}: {up:?}");
        assert!(up.iter().all(|t| t.label != "0.00"), "{name}: {up:?}");
        // The ticks cover the values (the bytes' in GiB).
        let marks = values(chart);
        let scale = if name == "storage" {
            (1u64 << 30) as f64
        } else {
            1.0
        };
        let most = marks.iter().fold(0.0, |m: f64, &v| m.max(v / scale));
        assert!(
            up[0].value <= 0.0 && up.last().unwrap().value >= most,
            "{name}: {up:?}"
        );
    }
    assert_eq!(svg::overlapping_labels(&html), None);

    // AU: a percentage ends at 100; failing epochs in a colour of their own, the legend says which.
    let chart = svg::chart(&html, "au");
    let up = svg::ticks(chart, "y");
    assert_eq!(
        (up.last().unwrap().value, up.last().unwrap().label.as_str()),
        (100.0, "100")
    );
    let marks = svg::marks(chart);
    assert_eq!(values(chart), au);
    let fill = |below: bool| -> std::collections::BTreeSet<&str> {
        marks
            .iter()
            .filter(|m| (svg::number(m, "data-value") < 90.0) == below)
            .map(|m| svg::attribute(m, "fill").unwrap())
            .collect()
    };
    let (fails, passes) = (fill(true), fill(false));
    assert!(
        fails.len() == 1 && passes.len() == 1 && fails != passes,
        "{fails:?} {passes:?}"
    );
    let legend = svg::legend(chart);
    let swatch = |said: &str| {
        legend
            .iter()
            .find(|g| g.contains(said))
            .and_then(|g| svg::attribute(&g[g.find("<rect").unwrap()..], "fill"))
            .unwrap_or_else(|| panic!("no legend entry saying {said}"))
    };
    assert!(fails.contains(swatch("fails")) && passes.contains(swatch("passes")));
    // Epochs: whole numbers, round steps, within the run's 120.
    let across = svg::ticks(chart, "x");
    assert!(svg::round_steps(&across), "{across:?}");
    assert!(across
        .iter()
        .all(|t| t.value.fract() == 0.0 && (1.0..=120.0).contains(&t.value)));

    // Bytes: binary units, as the terminal says them, with a legend of both sources.
    let chart = svg::chart(&html, "storage");
    assert!(svg::axis_title(chart, "y").contains("GiB"));
    assert_eq!(svg::legend(chart).len(), 2);
    assert_eq!(
        svg::ticks(chart, "x").len(),
        svg::ticks(svg::chart(&html, "au"), "x").len()
    );

    // Latency: a log axis in µs and ms (1 ms is "1 ms"); each bar at its bin's place on it.
    let chart = svg::chart(&html, "latency");
    let across = svg::ticks(chart, "x");
    let labels: Vec<&str> = across.iter().map(|t| t.label.as_str()).collect();
    for said in ["100 µs", "1 ms", "10 ms"] {
        assert!(labels.contains(&said), "{said}: {labels:?}");
    }
    assert!(
        labels
            .iter()
            .all(|l| !l.contains("k µs") && !l.contains(".0 ")),
        "{labels:?}"
    );
    let at = |label: &str| across.iter().find(|t| t.label == label).unwrap().at;
    let decade = at("1 ms") - at("100 µs");
    assert!(
        (at("10 ms") - at("1 ms") - decade).abs() < 0.2,
        "{across:?}"
    );
    let place = |us: f64| at("1 ms") + (us / 1000.0).log10() * decade;
    for (mark, (us, count)) in svg::marks(chart).iter().zip(latency) {
        // The bar starts a twentieth into its quarter-octave bin.
        let bin = (us.log2() * 4.0).floor();
        let start = place(2f64.powf((bin + 0.05) / 4.0));
        assert!(
            (svg::number(mark, "x") - start).abs() < 0.2,
            "{us} µs: {mark:.200}"
        );
        assert_eq!(svg::number(mark, "data-value"), count as f64);
    }

    // Checkpoints: 120 bars, their names thinned to fit.
    let chart = svg::chart(&html, "checkpoints");
    assert_eq!(svg::marks(chart).len(), 120);
    let named = svg::ticks(chart, "x");
    assert!(named.len() > 3 && named.len() < 120, "{named:?}");

    assert_eq!(
        chromium(&out.join("report.html"), &tmp.join("shot.png")),
        ""
    );
}

/// A chart with nothing to draw is left out, with the sentence saying why, never drawn empty:
/// a run with no completed epoch and no timed read; in `compare`, a metric that is 0 in every
/// epoch of both runs.
#[test]
fn a_chart_with_nothing_to_draw_is_left_out_with_its_reason() {
    let tmp = Scratch::new("charts-left-out");
    let out = tmp.join("empty");
    forged_run(&out, &[], &[], &[], 0);
    dlio_rs(&tmp.path, &["report", &out.display().to_string()]).ok();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    for name in ["au", "samples", "storage", "timeline", "latency"] {
        assert!(!html.contains(&format!("data-chart=\"{name}\"")), "{name}");
        let why = html
            .split(&format!("data-left-out=\"{name}\">"))
            .nth(1)
            .unwrap_or_else(|| panic!("{name} is not said to be left out"));
        let why = &why[..why.find("</p>").unwrap()];
        assert!(why.ends_with('.') && why.contains(':'), "{name}: {why}");
    }
    assert!(!html.contains("<svg"), "{html}");
    assert_eq!(
        chromium(&out.join("report.html"), &tmp.join("shot.png")),
        ""
    );

    let (a, b) = (tmp.join("a"), tmp.join("b"));
    forged_run(&a, &[95.0, 96.0], &[100.0, 110.0], &[(5.0, 10)], 0);
    forged_run(&b, &[91.0, 93.0], &[90.0, 95.0], &[(5.0, 10)], 0);
    let page = tmp.join("compare.html");
    dlio_rs(
        &tmp.path,
        &[
            "compare",
            &a.display().to_string(),
            &b.display().to_string(),
            &format!("--html={}", page.display()),
        ],
    )
    .ok();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(!html.contains("data-chart=\"cache share\""));
    assert!(
        html.contains("data-left-out=\"cache share\">Both runs' cache share is 0 in every epoch"),
        "{html}"
    );
    // The others are drawn, each with a legend of both runs, and none with 0.00 ticks.
    for name in [
        "AU",
        "samples/s",
        "MiB/s read",
        "read p50 µs",
        "read p99 µs",
    ] {
        let chart = svg::chart(&html, name);
        assert_eq!(svg::legend(chart).len(), 2, "{name}");
        let up = svg::ticks(chart, "y");
        assert!(svg::round_steps(&up), "{name}: {up:?}");
        assert!(up.iter().all(|t| t.label != "0.00"), "{name}: {up:?}");
    }
    assert_eq!(
        svg::ticks(svg::chart(&html, "AU"), "y")
            .last()
            .unwrap()
            .value,
        100.0
    );
    assert_eq!(svg::overlapping_labels(&html), None);
    assert_eq!(chromium(&page, &tmp.join("compare.png")), "");
}

/// A page taller than one sheet (24 ranks' timelines): `--png` takes a browser start per sheet
/// of at most 4000 pixels of charts, not one per chart, and every chart's PNG, the second
/// sheet's too, is its chart at twice its size and not blank.
#[test]
fn png_charts_of_a_tall_page_take_a_browser_start_per_sheet() {
    let tmp = Scratch::new("png-sheets");
    let out = tmp.join("out");
    let ranks = 24;
    forged_run(&out, &[95.0, 80.0], &[100.0, 90.0], &[(5.0, 10)], 0);
    let mut summary = read_json(&out.join("summary.json"));
    summary["num_accelerators"] = ranks.into();
    std::fs::write(out.join("summary.json"), summary.to_string()).unwrap();
    for rank in 0..ranks {
        let steps = serde_json::json!({
            "1": {"load": {"block1": [0.1, 0.2]}, "compute": {"block1": [0.2, 0.2]},
                  "proc": {"block1": [0.35, 0.45]}},
        });
        std::fs::write(out.join(format!("{rank}_output.json")), steps.to_string()).unwrap();
    }
    let (ran, starts) = png_with_counted_browser(&tmp, &out);
    let pngs: Vec<&str> = ran.stdout.lines().filter(|l| l.ends_with(".png")).collect();
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let heights: Vec<f64> = svg::charts(&html)
        .iter()
        .map(|c| svg::number(c, "height"))
        .collect();
    assert_eq!(pngs.len(), heights.len(), "{}", ran.context());
    assert_eq!(html.matches("data-chart=\"timeline\"").count(), ranks);
    // Sheets filled in order, a chart that would pass 4000 pixels starting the next.
    let mut sheets = 0;
    let mut filled = f64::INFINITY;
    for h in &heights {
        if filled + h > 4000.0 {
            sheets += 1;
            filled = 0.0;
        }
        filled += h;
    }
    assert!(sheets > 1 && sheets < pngs.len(), "{sheets} sheets");
    assert_eq!(starts, sheets);
    for (png, height) in pngs.iter().zip(&heights) {
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
        let info = decoder.read_info().unwrap().info().clone();
        assert_eq!(
            (info.width, f64::from(info.height)),
            (1760, 2.0 * height),
            "{png}"
        );
        let (share, colours) = ink(Path::new(png));
        assert!(
            share > 0.01 && colours >= 3,
            "{png}: {share} inked, {colours} colours"
        );
        // Cut at the chart's own edges: its title in the top rows, nothing of the next chart's
        // in the bottom ones.
        let rows = info.height as usize;
        assert!(inked_rows(Path::new(png), 10..40), "{png}: no title");
        assert!(
            !inked_rows(Path::new(png), rows - 6..rows),
            "{png}: ink at the bottom"
        );
    }
    // Nothing of the sheets is left behind.
    let left: Vec<String> = std::fs::read_dir(out.join("charts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
