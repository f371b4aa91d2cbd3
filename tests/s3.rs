//! End-to-end runs against a real S3 server (SeaweedFS, started per test on free ports with its
//! own folder and enforced credentials): every format generated into a bucket, trained from it
//! and audited; checkpoints saved and loaded; faults injected by a proxy and retried; a server
//! that stops answering or dies; refused credentials.

use std::time::Duration;

use serde_json::Value;

use crate::common::fault_proxy::{Fault, FaultPlan, FaultProxy};
use crate::common::seaweed::{self, SeaweedFs};
use crate::common::*;

fn start(tmp: &Scratch) -> SeaweedFs {
    SeaweedFs::start(&tmp.path).unwrap_or_else(|e| panic!("SeaweedFS did not start: {e}"))
}

/// A small traced run of `format` that generates 8 files of 2 samples into `folder` of the
/// bucket and trains 2 epochs on 2 accelerators.
fn format_words(tmp: &Scratch, endpoint: &str, format: &str) -> Vec<String> {
    let mut words = strings(&[
        "workload=default",
        "++workload.workflow.generate_data=True",
        "++workload.workflow.train=True",
        "++workload.workflow.checkpoint=False",
        "++workload.workflow.evaluation=False",
        "++workload.dataset.num_files_train=8",
        "++workload.dataset.num_samples_per_file=2",
        "++workload.dataset.record_length_bytes=8192",
        "++workload.dataset.record_length_bytes_stdev=0",
        "++workload.reader.batch_size=2",
        "++workload.reader.read_threads=2",
        "++workload.train.epochs=2",
        "++workload.train.computation_time=0",
        "++workload.output.trace=True",
    ]);
    words.push(format!("++workload.dataset.format={format}"));
    words.push(format!("++workload.dataset.data_folder=datasets/{format}"));
    words.push(format!(
        "++hydra.run.dir={}",
        tmp.s(&format!("out-{format}"))
    ));
    words.extend(seaweed::storage_words(endpoint, "formats"));
    words
}

/// The bytes of GET and ranged GET bodies the run's data storage received.
fn data_get_bytes(report: &Value) -> u64 {
    ["GET", "ranged GET"]
        .iter()
        .map(|kind| {
            report
                .pointer(&format!("/storage_requests/data/kinds/{kind}/bytes"))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        })
        .sum()
}

#[test]
fn every_format_is_generated_into_trained_from_and_audited_in_a_bucket() {
    let tmp = Scratch::new("s3-formats");
    let server = start(&tmp);
    for format in FORMATS.iter().filter(|f| **f != "mmap_indexed_binary") {
        let out = tmp.join(format!("out-{format}"));
        run_quiet(
            &tmp.path,
            2,
            &format_words(&tmp, &server.endpoint(), format),
        )
        .ok();
        let report = read_json(&out.join("report.json"));
        let mut from_storage = 0;
        for epoch in 0..2 {
            let e = at(&report, &format!("/epochs/{epoch}"));
            assert_eq!(int(e, "/samples_read"), 16, "{format}: {e}");
            // Everything read came from the bucket: bytes from storage = bytes read, exactly.
            assert_eq!(
                int(e, "/bytes_from_storage"),
                int(e, "/bytes_read"),
                "{format}: {e}"
            );
            from_storage += int(e, "/bytes_from_storage");
        }
        // ... and they are the bytes of the GET bodies, every one of them.
        assert_eq!(data_get_bytes(&report), from_storage, "{format}: {report}");
        if *format == "hdf5" {
            // `read_type: on_demand`: every sample's open reads the metadata again, then the
            // slice: two ranged GETs per sample of the 2 × 16 read.
            let ranged = int(&report, "/storage_requests/data/kinds/ranged GET/requests");
            assert_eq!(ranged, 2 * 32, "hdf5: {report}");
        }
        let puts = int(&report, "/storage_requests/data/kinds/PUT/requests");
        // 8 data files, and the generation's marker (written, then removed).
        assert!(puts >= 8, "{format}: {puts} PUTs");
        let (code, audit, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{format}: {audit}\n{}", ran.context());
    }
    // The local cache's keys have nothing to act on: said, and the run is the same.
    let cached = with(
        &format_words(&tmp, &server.endpoint(), "npy"),
        &[
            "++workload.workflow.generate_data=False",
            "++workload.reader.odirect=True",
            "++workload.reader.page_cache=drop_before_epoch",
        ],
    );
    run_quiet(&tmp.path, 1, &cached).ok().says(&[
        "workload.reader.odirect, workload.reader.page_cache ignored with storage_type = s3",
    ]);
    let report = read_json(&tmp.join("out-npy/report.json"));
    assert_eq!(at(&report, "/storage_accounting/method"), "request_bodies");
    assert_eq!(at(&report, "/cache_defeated_by"), "storage.storage_type=s3");
    let mut mapped = format_words(&tmp, &server.endpoint(), "mmap_indexed_binary");
    mapped.push("++workload.workflow.generate_data=False".to_string());
    run_quiet(&tmp.path, 1, &mapped)
        .fails(2)
        .says(&["mmap_indexed_binary", "use indexed_binary"]);
}

/// A dataset whose names are not the scheme's (6 files asked for, 8 made) is listed, once per
/// split, page by page; the audit lists it again with the credentials of the environment (the
/// report keeps none).
#[test]
fn a_dataset_off_the_naming_scheme_is_listed_and_audited() {
    let tmp = Scratch::new("s3-listed");
    let server = start(&tmp);
    let words = format_words(&tmp, &server.endpoint(), "npz");
    run_quiet(&tmp.path, 1, &words).ok();
    let listed = with(
        &words,
        &[
            "++workload.workflow.generate_data=False",
            "++workload.dataset.num_files_train=6",
        ],
    );
    run_quiet(&tmp.path, 2, &listed).ok();
    let out = tmp.join("out-npz");
    let report = read_json(&out.join("report.json"));
    assert_eq!(
        at(&report, "/startup/file_names/0/method"),
        "listed",
        "{report}"
    );
    assert_eq!(int(&report, "/epochs/0/samples_read"), 12);
    // The bucket check, and one page for train/ (its 2 subfolders), one for each subfolder.
    let lists = int(&report, "/storage_requests/data/kinds/LIST/requests");
    assert!((3..=5).contains(&lists), "{lists} LISTs");
    let configuration = at(&report, "/configuration/storage/storage_options").to_string();
    assert!(
        !configuration.contains(seaweed::SECRET_KEY) && !configuration.contains("access_key"),
        "{configuration}"
    );
    let audit = |env: &[(&str, &str)]| {
        launch(
            DLIO_RS,
            &tmp.path,
            &["audit", &out.display().to_string(), "--json"],
            env,
        )
    };
    audit(&[]).fails(1).says(&["AccessDenied"]);
    let ran = audit(&[
        ("AWS_ACCESS_KEY_ID", seaweed::ACCESS_KEY),
        ("AWS_SECRET_ACCESS_KEY", seaweed::SECRET_KEY),
    ]);
    assert_eq!(ran.code, Some(0), "{}", ran.context());
}

#[test]
fn checkpoints_are_saved_to_and_loaded_from_a_bucket_in_checked_parts() {
    let tmp = Scratch::new("s3-checkpoints");
    let server = start(&tmp);
    let mut words = strings(&[
        "workload=llama3_8b",
        "++workload.model.num_layers=2",
        "++workload.model.transformer.hidden_size=1024",
        "++workload.model.transformer.ffn_hidden_size=2048",
        "++workload.model.transformer.vocab_size=8000",
        "++workload.checkpoint.time_between_checkpoints=0",
        "++workload.checkpoint.num_checkpoints_write=2",
        "++workload.checkpoint.num_checkpoints_read=1",
        "++workload.checkpoint.checkpoint_folder=s3://checkpoints/llama",
        "++workload.storage.storage_options.part_size=5242880",
    ]);
    words.push(format!("++hydra.run.dir={}", tmp.s("out")));
    words.extend(seaweed::storage_words(&server.endpoint(), "checkpoints"));
    run_quiet(&tmp.path, 2, &words).ok();
    let report = read_json(&tmp.join("out/report.json"));
    let one = int(&report, "/checkpoints/size_bytes");
    let kinds = at(&report, "/storage_requests/checkpoints/kinds");
    let sent = kinds
        .pointer("/PUT/bytes")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        + int(kinds, "/part upload/bytes");
    assert_eq!(sent, 2 * one, "two saves, every byte sent once: {kinds}");
    assert!(int(kinds, "/part upload/requests") >= 4, "{kinds}");
    assert_eq!(int(kinds, "/ranged GET/bytes"), one, "one load: {kinds}");
    // Every file of both saves checked: each PUT and part by the CRC-32 it was sent with, which
    // the server checks and answers with, a multipart file's size then by a HEAD once complete.
    // The other HEADs are the load's, one per file.
    let writes = at(&report, "/storage_requests/checkpoints/writes");
    assert_eq!(int(writes, "/mismatches"), 0, "{writes}");
    let files = int(writes, "/verified") / 2;
    assert!(files >= 2, "{writes}");
    // A start and a complete per multipart file.
    let multipart_files = int(kinds, "/multipart start~1complete~1abort/requests") / 2;
    assert!(multipart_files >= 2, "{kinds}");
    assert_eq!(
        int(kinds, "/HEAD/requests"),
        files + multipart_files,
        "{kinds}"
    );
    for kind in ["PUT", "part upload", "ranged GET"] {
        if let Some(retries) = kinds.pointer(&format!("/{kind}/failures")) {
            assert_eq!(retries.as_u64(), Some(0), "{kinds}");
        }
    }
}

/// TensorFlow shards on object storage, which has no rename: each saved under its final names
/// (data file, index, the folder's `checkpoint` object), and loaded back with every tensor's
/// CRC checked against the index.
#[test]
fn tensorflow_checkpoints_are_saved_to_a_bucket_under_their_final_names() {
    let tmp = Scratch::new("s3-tf-checkpoints");
    let server = start(&tmp);
    let mut words = strings(&[
        "workload=llama3_8b",
        "++workload.framework=tensorflow",
        "++workload.model.num_layers=2",
        "++workload.model.transformer.hidden_size=256",
        "++workload.model.transformer.ffn_hidden_size=512",
        "++workload.model.transformer.vocab_size=1000",
        "++workload.checkpoint.time_between_checkpoints=0",
        "++workload.checkpoint.num_checkpoints_write=1",
        "++workload.checkpoint.num_checkpoints_read=1",
        "++workload.checkpoint.checkpoint_folder=s3://checkpoints/tf",
    ]);
    words.push(format!("++hydra.run.dir={}", tmp.s("out")));
    words.extend(seaweed::storage_words(&server.endpoint(), "checkpoints"));
    run_quiet(&tmp.path, 2, &words).ok();
    let report = read_json(&tmp.join("out/report.json"));
    let one = int(&report, "/checkpoints/size_bytes");
    let list = at(&report, "/checkpoints/list").as_array().unwrap();
    assert_eq!(list.len(), 2, "a save and a load: {list:?}");
    let kinds = at(&report, "/storage_requests/checkpoints/kinds");
    // 2 ranks × 2 shards × (data file, index, checkpoint): 12 objects, no copies, no deletes.
    let puts = kinds
        .pointer("/PUT/requests")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        + kinds
            .pointer("/multipart complete/requests")
            .and_then(Value::as_u64)
            .unwrap_or(0);
    assert_eq!(puts, 12, "{kinds}");
    assert!(kinds.pointer("/DELETE").is_none(), "{kinds}");
    // TensorFlow's sizes for these shards (tests/checkpoint.rs): data files and indexes.
    let stored = 2 * (1_628_669 + 1015 + 9_780_255 + 531);
    let sent = kinds
        .pointer("/PUT/bytes")
        .and_then(Value::as_u64)
        .unwrap_or(0)
        + kinds
            .pointer("/part upload/bytes")
            .and_then(Value::as_u64)
            .unwrap_or(0);
    assert_eq!(sent, stored + 4 * 141, "{kinds}");
    assert!(stored > one, "the payload {one} is within the files");
}

#[test]
fn injected_503s_and_resets_are_retried_and_counted() {
    let tmp = Scratch::new("s3-proxy");
    let server = start(&tmp);
    let proxy = FaultProxy::start(
        server.addr(),
        FaultPlan::every(4, Fault::ServiceUnavailable)
            .and_every(7, Fault::Reset)
            .sparing_retries(),
    )
    .unwrap();
    let words = format_words(&tmp, &proxy.endpoint(), "npz");
    run_quiet(&tmp.path, 2, &words).ok();
    let report = read_json(&tmp.join("out-npz/report.json"));
    let retries: u64 = at(&report, "/storage_requests/data/kinds")
        .as_object()
        .unwrap()
        .values()
        .map(|k| k["retries"].as_u64().unwrap())
        .sum();
    assert!(proxy.faults() > 10, "{} faults", proxy.faults());
    assert_eq!(retries as usize, proxy.faults(), "{report}");
    assert_eq!(int(&report, "/epochs/1/samples_read"), 16);
}

/// A store behind a gateway that redirects every request (AIStore's S3 API: a 307 to the target
/// holding the object): 2 ranks generate, train and audit through it; report.json counts one
/// redirect per request, as many as the gateway sent.
#[test]
fn a_run_through_redirecting_gateways_counts_each_redirect() {
    let tmp = Scratch::new("s3-redirects");
    let server = start(&tmp);
    let target = FaultProxy::start(server.addr(), FaultPlan::default()).unwrap();
    let gateway = FaultProxy::start(server.addr(), FaultPlan::every(1, Fault::Redirect)).unwrap();
    gateway.redirect_to(target.addr());
    target.present_as(&gateway.addr().to_string());
    let words = format_words(&tmp, &gateway.endpoint(), "npz");
    run_quiet(&tmp.path, 2, &words).ok();
    let report = read_json(&tmp.join("out-npz/report.json"));
    assert_eq!(int(&report, "/epochs/1/samples_read"), 16);
    let mut requests = 0;
    let mut redirects = 0;
    for (_, kind) in at(&report, "/storage_requests/data/kinds")
        .as_object()
        .unwrap()
    {
        requests += kind["requests"].as_u64().unwrap() + kind["failures"].as_u64().unwrap();
        redirects += kind["redirects"].as_u64().unwrap();
    }
    assert_eq!(redirects, requests, "one redirect per request: {report}");
    assert_eq!(
        target.injected(Fault::Forward),
        gateway.injected(Fault::Redirect)
    );
    assert!(
        redirects as usize <= gateway.injected(Fault::Redirect) && redirects >= 16,
        "{redirects} redirects counted, {} sent",
        gateway.injected(Fault::Redirect)
    );
}

/// Every object a generation writes is checked before it counts: data files whose first PUT a
/// proxy truncates (the server keeps half and answers 200) are caught and written again, counted
/// in report.json, and the dataset trains whole after the settle time asked for; truncated every
/// time, the run fails (exit 1) naming the object, what was written and what was stored.
#[test]
fn truncated_writes_are_caught_written_again_and_counted() {
    let tmp = Scratch::new("s3-truncated");
    let server = start(&tmp);
    let proxy = FaultProxy::start(
        server.addr(),
        FaultPlan::matching("PUT /formats/datasets/npz/train/", Fault::Truncate).sparing_retries(),
    )
    .unwrap();
    let words = with(
        &format_words(&tmp, &proxy.endpoint(), "npz"),
        &["++workload.storage.post_generation_settle_seconds=0.2"],
    );
    run_quiet(&tmp.path, 2, &words).ok();
    assert_eq!(proxy.injected(Fault::Truncate), 8);
    let out = tmp.join("out-npz");
    let report = read_json(&out.join("report.json"));
    let writes = at(&report, "/storage_requests/data/writes");
    // 8 files in train/ (each written twice), 8 in valid/ and the generation's marker.
    assert_eq!(int(writes, "/verified"), 17, "{writes}");
    assert_eq!(int(writes, "/mismatches"), 8, "{writes}");
    assert_eq!(int(writes, "/rewrites"), 8, "{writes}");
    assert_eq!(int(&report, "/epochs/1/samples_read"), 16);
    let log = std::fs::read_to_string(out.join("dlio.log")).unwrap();
    let settled = log
        .find("Settling 0.2 s after generation")
        .expect("settled");
    assert!(log.find("Generation done").unwrap() < settled, "{log}");

    let always = FaultProxy::start(
        server.addr(),
        FaultPlan::matching("PUT /formats/datasets/cut/train/", Fault::Truncate),
    )
    .unwrap();
    let words = with(
        &format_words(&tmp, &always.endpoint(), "npz"),
        &[
            "++workload.dataset.data_folder=datasets/cut",
            "++workload.storage.storage_options.s3_max_attempts=2",
        ],
    );
    // The server checks the CRC-32 each PUT is sent with and refuses the truncated body.
    run_quiet(&tmp.path, 1, &words).fails(1).says(&[
        "s3://formats/datasets/cut/train/",
        "was refused by the store as it arrived otherwise than sent (the ",
        "bytes sent are crc32 ",
        "the store did not keep what was sent, after 2 writes",
    ]);
}

/// Several endpoints of one store (two S3 gateways of one SeaweedFS filer), named in
/// `S3_ENDPOINT_URIS` as mlpstorage v3 passes them: the ranks spread over them, round-robin by
/// global rank, and report.json counts each endpoint's requests; a gateway that dies in the middle
/// of a run (named in `endpoint_urls`) fails it with exit 1, naming that endpoint.
#[test]
fn ranks_spread_over_endpoints_and_a_dead_one_is_named() {
    let tmp = Scratch::new("s3-endpoints");
    let server = start(&tmp);
    let mut gateway = server
        .start_gateway()
        .unwrap_or_else(|e| panic!("the second gateway did not start: {e}"));
    let (first, second) = (server.endpoint(), gateway.endpoint());
    let words = format_words(&tmp, &server.endpoint(), "npz");
    let mut args = strings(&["run", "-q", "--accelerators", "2"]);
    args.extend(words.iter().cloned());
    let uris = format!("{first}, {second}");
    launch(DLIO_RS, &tmp.path, &args, &[("S3_ENDPOINT_URIS", &uris)]).ok();
    let report = read_json(&tmp.join("out-npz/report.json"));
    let data = at(&report, "/storage_requests/data");
    let endpoints = at(data, "/endpoints").as_array().unwrap();
    let urls: Vec<&str> = endpoints
        .iter()
        .map(|e| e["url"].as_str().unwrap())
        .collect();
    assert_eq!(urls, [first.as_str(), second.as_str()]);
    let all: u64 = at(data, "/kinds")
        .as_object()
        .unwrap()
        .values()
        .map(|k| k["requests"].as_u64().unwrap())
        .sum();
    let each: Vec<u64> = endpoints.iter().map(|e| int(e, "/requests")).collect();
    assert_eq!(each.iter().sum::<u64>(), all, "{data}");
    // Two ranks, each with its endpoint: both read (and generated) half of the files.
    let bytes: Vec<u64> = endpoints.iter().map(|e| int(e, "/bytes")).collect();
    assert!(bytes.iter().all(|&b| b > 100_000), "{bytes:?}");
    assert_eq!(int(&report, "/epochs/1/samples_read"), 16);

    let mut args = strings(&["run", "--accelerators", "2"]);
    args.extend(with(
        &words,
        &[
            "++workload.workflow.generate_data=False",
            "++workload.train.epochs=1000",
            "++workload.train.computation_time=0.01",
            "++workload.storage.storage_options.request_timeout=1",
            "++workload.storage.storage_options.s3_max_attempts=2",
            &format!("++workload.storage.storage_options.endpoint_urls=[{first},{second}]"),
        ],
    ));
    let mut live = Live::dlio_rs(&tmp.path, &args);
    live.wait_for("epoch 2/");
    gateway.kill();
    let (ran, took) = live.finish();
    assert_eq!(ran.code, Some(1), "{}", ran.context());
    assert!(
        ran.stderr.contains(&format!(" at endpoint {second}: ")),
        "{}",
        ran.context()
    );
    assert!(took < Duration::from_secs(20), "{took:?}");
}

/// A run whose server stops (paused: it keeps its connections and never answers; or killed)
/// fails with exit 1 within its timeout, naming the object it could not read.
#[test]
fn a_server_that_stops_answering_or_dies_fails_the_run_with_the_key() {
    for kill in [false, true] {
        let tmp = Scratch::new(if kill { "s3-killed" } else { "s3-paused" });
        let mut server = start(&tmp);
        let mut words = format_words(&tmp, &server.endpoint(), "npz");
        run_quiet(&tmp.path, 1, &words).ok();
        words = with(
            &words,
            &[
                "++workload.workflow.generate_data=False",
                "++workload.train.epochs=1000",
                "++workload.train.computation_time=0.01",
                "++workload.storage.storage_options.request_timeout=1",
                "++workload.storage.storage_options.s3_max_attempts=2",
            ],
        );
        let mut args = strings(&["run", "--accelerators", "1"]);
        args.extend(words);
        let mut live = Live::dlio_rs(&tmp.path, &args);
        live.wait_for("epoch 2/");
        if kill {
            server.kill();
        } else {
            server.pause();
        }
        let (ran, took) = live.finish();
        if !kill {
            server.resume();
        }
        assert_eq!(ran.code, Some(1), "{}", ran.context());
        assert!(
            ran.stderr
                .contains("cannot read data file s3://formats/datasets/npz/train/"),
            "{}",
            ran.context()
        );
        // Two attempts of at most 1 s, their backoff, the run's end.
        assert!(took < Duration::from_secs(20), "{took:?}");
    }
}

/// Ctrl-C while the reader threads wait on a server that stopped answering: the requests in flight
/// end at their timeout, none is retried, and the run stops as interrupted (130), with the epochs
/// it completed.
#[test]
fn an_interrupt_stops_a_run_waiting_on_a_stalled_server() {
    let tmp = Scratch::new("s3-interrupted");
    let server = start(&tmp);
    let words = format_words(&tmp, &server.endpoint(), "npz");
    run_quiet(&tmp.path, 1, &words).ok();
    let mut args = strings(&["run", "--accelerators", "1"]);
    args.extend(with(
        &words,
        &[
            "++workload.workflow.generate_data=False",
            "++workload.train.epochs=1000",
            "++workload.train.computation_time=0.01",
            "++workload.storage.storage_options.request_timeout=2",
        ],
    ));
    let mut live = Live::dlio_rs(&tmp.path, &args);
    live.wait_for("epoch 2/");
    server.pause();
    live.signal(libc::SIGINT);
    let (ran, took) = live.finish();
    server.resume();
    assert_eq!(ran.code, Some(130), "{}", ran.context());
    assert!(
        ran.stdout.contains("interrupted by SIGINT"),
        "{}",
        ran.context()
    );
    // At most one request timeout (2 s) and the run's end; without the signal, 5 attempts.
    assert!(took < Duration::from_secs(8), "{took:?}");
}

/// A private certificate authority (made here with openssl) signs the server's certificate: with
/// its PEM as `ca_bundle` (or AWS_CA_BUNDLE) the run speaks HTTPS to the server; without it, the
/// certificate is refused at once, as a usage error that says how to name the authority.
#[test]
fn https_with_a_private_authority() {
    let tmp = Scratch::new("s3-https");
    let pki = tmp.join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    let openssl = |args: &[&str]| {
        let ran = std::process::Command::new("openssl")
            .current_dir(&pki)
            .args(args)
            .output()
            .expect("openssl runs (apt install openssl)");
        assert!(ran.status.success(), "openssl {args:?}: {ran:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=dlio-rs test authority",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    std::fs::write(pki.join("san"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "server.pem",
        "-days",
        "2",
        "-extfile",
        "san",
    ]);
    let tls = seaweed::Tls {
        cert: pki.join("server.pem"),
        key: pki.join("server.key"),
    };
    let server = SeaweedFs::start_with_tls(&tmp.path, &tls)
        .unwrap_or_else(|e| panic!("SeaweedFS did not start: {e}"));
    assert!(server.endpoint().starts_with("https://"));
    let words = format_words(&tmp, &server.endpoint(), "npz");
    let authority = format!(
        "++workload.storage.storage_options.ca_bundle={}",
        pki.join("ca.pem").display()
    );
    run_quiet(&tmp.path, 1, &with(&words, &[&authority])).ok();
    let report = read_json(&tmp.join("out-npz/report.json"));
    assert_eq!(int(&report, "/epochs/1/samples_read"), 16);
    let trained = with(&words, &["++workload.workflow.generate_data=False"]);
    let ca = pki.join("ca.pem").display().to_string();
    let mut args = strings(&["run", "-q"]);
    args.extend(trained.iter().cloned());
    launch(DLIO_RS, &tmp.path, &args, &[("AWS_CA_BUNDLE", &ca)]).ok();
    run_quiet(&tmp.path, 1, &trained).fails(2).says(&[
        "cannot talk TLS with https://127.0.0.1",
        "ca_bundle or AWS_CA_BUNDLE",
    ]);
    let not_pem = format!(
        "++workload.storage.storage_options.ca_bundle={}",
        pki.join("san").display()
    );
    run_quiet(&tmp.path, 1, &with(&trained, &[&not_pem]))
        .fails(2)
        .says(&["holds no certificate"]);
}

#[test]
fn refused_credentials_are_a_usage_error_naming_the_problem() {
    let tmp = Scratch::new("s3-credentials");
    let server = start(&tmp);
    let words = format_words(&tmp, &server.endpoint(), "npy");
    run_quiet(&tmp.path, 1, &words).ok();
    for (word, code) in [
        (
            "++workload.storage.storage_options.secret_access_key=not-the-secret",
            "SignatureDoesNotMatch",
        ),
        (
            "++workload.storage.storage_options.access_key_id=nobody",
            "InvalidAccessKeyId",
        ),
    ] {
        run_quiet(
            &tmp.path,
            1,
            &with(&words, &["++workload.workflow.generate_data=False", word]),
        )
        .fails(2)
        .says(&[code, "refused these credentials", "'formats'"]);
    }
    run_quiet(
        &tmp.path,
        1,
        &with(
            &words,
            &[
                "++workload.workflow.generate_data=False",
                "++workload.storage.storage_root=no-such-bucket",
            ],
        ),
    )
    .fails(2)
    .says(&["bucket 'no-such-bucket' does not exist"]);
    let elsewhere = |endpoint: &str| {
        with(
            &words,
            &[
                "++workload.workflow.generate_data=False",
                &format!("++workload.storage.storage_options.endpoint_url={endpoint}"),
            ],
        )
    };
    run_quiet(&tmp.path, 1, &elsewhere("ftp://127.0.0.1:1"))
        .fails(2)
        .says(&["cannot address bucket 'formats'", "http:// or https://"]);
    run_quiet(&tmp.path, 1, &elsewhere("not a url"))
        .fails(2)
        .says(&["endpoint_url = 'not a url': not a URL"]);
    // Nothing listens there: the run fails (exit 1) after its attempts, naming the endpoint.
    run_quiet(&tmp.path, 1, &elsewhere("http://127.0.0.1:1"))
        .fails(1)
        .says(&[
            "cannot reach bucket formats at http://127.0.0.1:1",
            "after 5 attempts",
        ]);
}

/// A folder of the bucket is held by a lease (`.dlio-rs.lock`) while a generation writes into it:
/// a second generation and a training run are refused at once, naming the holder; a run that
/// deletes its dataset (`keep_files: False`) holds it too; once the holder has ended, the lease is
/// gone and the folder free.
#[test]
fn a_generation_into_a_bucket_holds_its_folder_with_a_lease() {
    let tmp = Scratch::new("s3-lease");
    let server = start(&tmp);
    let words = |out: &str, generate: bool, train: bool, files: u64| {
        let mut words = strings(&[
            "workload=default",
            "++workload.workflow.checkpoint=False",
            "++workload.workflow.evaluation=False",
            "++workload.dataset.num_samples_per_file=1",
            "++workload.dataset.record_length_bytes=65536",
            "++workload.dataset.record_length_bytes_stdev=0",
            "++workload.reader.batch_size=1",
            "++workload.train.epochs=1",
            "++workload.train.computation_time=0",
            "++workload.dataset.data_folder=datasets/held",
        ]);
        words.push(format!("++workload.dataset.num_files_train={files}"));
        words.push(format!("++workload.workflow.generate_data={generate}"));
        words.push(format!("++workload.workflow.train={train}"));
        words.push(format!("++hydra.run.dir={}", tmp.s(out)));
        words.extend(seaweed::storage_words(&server.endpoint(), "held"));
        words
    };
    // A generation slowed by a link of 2 MiB/s: 400 objects of 64 KiB take ~12 s.
    let mut slow = strings(&["run"]);
    slow.extend(words("a", true, false, 400));
    slow.push("++workload.storage.throttle.mib_per_second=2".into());
    let mut first = Live::dlio_rs(&tmp.path, &slow);
    // Logged once the folder is held.
    wait_until_logged(
        &tmp.join("a/dlio.log"),
        "Starting data generation",
        &mut first,
    );
    let holder = format!("the run generating, process {} on ", first.pid());
    run_quiet(&tmp.path, 1, &words("b", true, false, 8))
        .fails(2)
        .says(&[
            "in use by",
            &holder,
            ".dlio-rs.lock",
            "a generation needs it to itself",
        ]);
    run_quiet(&tmp.path, 1, &words("c", false, true, 400))
        .fails(2)
        .says(&["being generated by", &holder]);
    // Told to wait, a training run waits for the generation to end, then trains on its dataset.
    let mut waiting = strings(&["run", "-q", "--wait", "60"]);
    waiting.extend(words("c2", false, true, 400));
    let mut reader = Live::dlio_rs(&tmp.path, &waiting);
    reader.wait_for("waiting up to 60 s for s3://held/datasets/held/, held by generating");
    first.finish().0.ok();
    reader.finish().0.ok();

    // Let go, the lease is gone: a generation takes the folder, and a training run reads it.
    run_quiet(&tmp.path, 1, &words("d", true, false, 8)).ok();
    run_quiet(&tmp.path, 1, &words("e", false, true, 8)).ok();

    // A run that will delete the dataset holds it while it trains: a generation is refused.
    let mut deleting = strings(&["run"]);
    deleting.extend(words("f", false, true, 8));
    deleting.retain(|w| !w.contains("computation_time"));
    deleting.push("++workload.train.computation_time=1".into());
    deleting.push("++workload.dataset.keep_files=False".into());
    let mut first = Live::dlio_rs(&tmp.path, &deleting);
    first.wait_for("training: 1 accelerator(s)");
    run_quiet(&tmp.path, 1, &words("g", true, false, 8))
        .fails(2)
        .says(&["in use by the run training, then deleting the dataset"]);
    run_quiet(&tmp.path, 1, &words("h", false, true, 8))
        .fails(2)
        .says(&["is held by the run training, then deleting"]);
    first.signal(libc::SIGINT);
    assert_eq!(first.finish().0.code, Some(130));

    // A checkpoint folder is held by the lease of the run that saves there. is held by the lease of the run that saves there.
    let checkpointing = |out: &str| {
        let mut words = strings(&[
            "workload=default",
            "++workload.workflow.train=False",
            "++workload.workflow.checkpoint=True",
            "++workload.checkpoint.num_checkpoints_write=1",
            "++workload.checkpoint.num_checkpoints_read=0",
            "++workload.checkpoint.checkpoint_folder=ckpt",
        ]);
        words.push(format!("++hydra.run.dir={}", tmp.s(out)));
        words.extend(seaweed::storage_words(&server.endpoint(), "held"));
        words
    };
    run_quiet(&tmp.path, 1, &checkpointing("i")).ok();
    let mut saving = strings(&["run"]);
    saving.extend(words("j", false, true, 8));
    saving.retain(|w| !w.contains("computation_time") && !w.contains("checkpoint=False"));
    saving.extend(strings(&[
        "++workload.train.computation_time=1",
        "++workload.workflow.checkpoint=True",
        "++workload.checkpoint.checkpoint_after_epoch=1",
        "++workload.checkpoint.epochs_between_checkpoints=1",
        "++workload.checkpoint.checkpoint_folder=ckpt",
    ]));
    let mut second = Live::dlio_rs(&tmp.path, &saving);
    second.wait_for("training: 1 accelerator(s)");
    run_quiet(&tmp.path, 1, &checkpointing("k"))
        .fails(2)
        .says(&["the checkpoint folder s3://held/ckpt/ is in use by the run saving checkpoints"]);
    second.signal(libc::SIGINT);
    assert_eq!(second.finish().0.code, Some(130));
}

/// Waits (bounded) until the log `log` of the live run `run` holds `line`.
fn wait_until_logged(log: &std::path::Path, line: &str, run: &mut Live) {
    let deadline = std::time::Instant::now() + LIVE_BOUND;
    while !std::fs::read_to_string(log).is_ok_and(|text| text.contains(line)) {
        if let Some(status) = run.try_wait() {
            panic!("the run ended ({status}) before logging {line:?}");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{line:?} not logged in {LIVE_BOUND:?}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// A storage that stops answering in the middle of a run shows in its time series while it
/// lasts: intervals in which nothing is read and the readers that were reading stay inside their
/// reads (both, or one where the other had its batches read ahead and waits for the trainer,
/// which waits for the first: where the pause falls decides); once the server answers again,
/// reads resume and the run ends well.
#[test]
fn a_paused_server_shows_as_a_stall_in_the_time_series_while_it_lasts() {
    let tmp = Scratch::new("s3-stall");
    let server = start(&tmp);
    let mut words = format_words(&tmp, &server.endpoint(), "npz");
    words.retain(|w| !w.contains("output.trace="));
    run_quiet(&tmp.path, 1, &words).ok();
    words = with(
        &words,
        &[
            "++workload.workflow.generate_data=False",
            "++workload.train.epochs=400",
            "++workload.train.computation_time=0.01",
            "++workload.output.timeseries_interval=0.1",
            "++workload.storage.storage_options.request_timeout=60",
        ],
    );
    let mut args = strings(&["run", "--accelerators", "1", "--metrics-listen", "0"]);
    args.extend(words);
    let mut live = Live::dlio_rs(&tmp.path, &args);
    let said = live.wait_for("metrics: http://");
    let address = said
        .split("http://")
        .nth(1)
        .unwrap()
        .replace("/metrics", "");
    live.wait_for("epoch 2/");
    server.pause();
    // Read the file as the run writes it, until it shows the stall (bounded).
    let series = tmp.join("out-npz/timeseries.jsonl");
    // The readers stuck in reads, once the last 5 intervals read nothing with the same ones.
    let stalled = |lines: &[Value]| -> Option<u64> {
        let runs = crate::timeseries::of_kind(lines, "run");
        let last = runs.get(runs.len().checked_sub(5)?..)?;
        let stuck = int(last[0], "/reads_in_flight_at_end");
        let still = last.iter().all(|r| {
            int(r, "/samples") == 0
                && int(r, "/reads_in_flight_at_end") == stuck
                && num(r, "/reads_in_flight") > stuck as f64 - 0.1
                && num(r, "/au_percent") == 0.0
        });
        (still && (1..=2).contains(&stuck)).then_some(stuck)
    };
    let deadline = std::time::Instant::now() + LIVE_BOUND;
    let stuck = loop {
        if let Some(stuck) = stalled(&crate::timeseries::lines_of(&series)) {
            break stuck;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no stall shown in {}",
            series.display()
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // The endpoint shows it too, while it lasts.
    let page = crate::timeseries::parsed(&crate::timeseries::scrape(&address));
    let gauge = |family: &str| crate::timeseries::sample(&page, family, family, None);
    assert_eq!(gauge("dlio_interval_mib_per_second"), 0.0);
    assert_eq!(gauge("dlio_interval_au_percent"), 0.0);
    assert!(gauge("dlio_interval_reads_in_flight") > stuck as f64 - 0.1);
    let rank0 = Some(("rank", "0"));
    let reading =
        crate::timeseries::sample(&page, "dlio_reads_in_flight", "dlio_reads_in_flight", rank0);
    assert_eq!(reading, stuck as f64);
    let stalled_until =
        crate::timeseries::of_kind(&crate::timeseries::lines_of(&series), "run").len();
    server.resume();
    // Reads resume: a later interval reads again.
    let resumed = |lines: &[Value]| {
        let runs = crate::timeseries::of_kind(lines, "run");
        runs.iter()
            .skip(stalled_until)
            .any(|r| int(r, "/samples") > 0)
    };
    while !resumed(&crate::timeseries::lines_of(&series)) {
        assert!(std::time::Instant::now() < deadline, "reads never resumed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    live.signal(libc::SIGINT);
    let (ran, _) = live.finish();
    assert_eq!(ran.code, Some(130), "{}", ran.context());
    let runs_after = crate::timeseries::lines_of(&series);
    let runs = crate::timeseries::of_kind(&runs_after, "run");
    let last_stalled = runs
        .iter()
        .rposition(|r| int(r, "/samples") == 0 && int(r, "/reads_in_flight_at_end") == stuck)
        .unwrap();
    assert!(
        runs[..last_stalled].iter().any(|r| int(r, "/samples") > 0),
        "reads before the stall"
    );
    crate::timeseries::assert_contiguous(&runs);
    // The page draws the stall: intervals that read nothing while the stuck readers were in reads.
    let html = std::fs::read_to_string(tmp.join("out-npz/report.html")).unwrap();
    let read = svg::series(svg::chart(&html, "throughput-over-time"), "read");
    let in_flight = svg::chart(&html, "in-flight-over-time");
    let in_flight = svg::series(in_flight, "reads in flight, all reader threads");
    let stalled = read
        .iter()
        .zip(&in_flight)
        .filter(|(r, f)| **r == 0.0 && **f > stuck as f64 - 0.1)
        .count();
    assert!(stalled >= 5, "{stalled} stalled points drawn");
}
