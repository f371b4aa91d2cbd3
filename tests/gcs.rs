//! End-to-end runs against a GCS server (fake-gcs-server, started per test on a free port):
//! npz (whole downloads), hdf5 (ranged downloads) and parquet (a suffix download for its
//! footer) generated into a bucket, trained from and audited, the objects listed back;
//! checkpoints saved in resumable uploads and loaded.

use serde_json::Value;

use crate::common::fake_gcs::{self, FakeGcs};
use crate::common::*;

fn start(tmp: &Scratch) -> FakeGcs {
    FakeGcs::start(&tmp.path).unwrap_or_else(|e| panic!("fake-gcs-server did not start: {e}"))
}

/// Every object below the data folder of the configuration `words`, listed through dlio-rs's own
/// GCS storage, folder by folder.
fn objects(words: &[String]) -> Vec<(String, u64)> {
    let overrides = dlio_rs::config::overrides::Overrides::parse(words).unwrap();
    let config = dlio_rs::config::Source {
        overrides,
        config_dir: None,
    }
    .resolve(false)
    .unwrap();
    let storage = dlio_rs::storage::for_data(&config, 1).unwrap();
    let mut found = Vec::new();
    let mut folders = vec![String::new()];
    while let Some(folder) = folders.pop() {
        let mut entries = Vec::new();
        storage
            .list_dir(&folder, &mut |name, kind| {
                entries.push((format!("{folder}{name}"), kind))
            })
            .unwrap();
        for (path, kind) in entries {
            match kind {
                dlio_rs::storage::EntryKind::Folder => folders.push(format!("{path}/")),
                _ => found.push((path.clone(), storage.size(&path).unwrap())),
            }
        }
    }
    found.sort();
    found
}

#[test]
fn npz_hdf5_and_parquet_are_generated_into_trained_from_and_audited_in_a_bucket() {
    let tmp = Scratch::new("gcs-formats");
    let server = start(&tmp);
    for format in ["npz", "hdf5", "parquet"] {
        let mut words = strings(&[
            "workload=default",
            "++workload.workflow.generate_data=True",
            "++workload.workflow.train=True",
            "++workload.workflow.checkpoint=False",
            "++workload.workflow.evaluation=False",
            "++workload.dataset.num_files_train=8",
            "++workload.dataset.num_files_eval=0",
            "++workload.dataset.num_subfolders_train=0",
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
        words.push(format!(
            "++workload.dataset.data_folder=gs://formats/{format}"
        ));
        let out = tmp.join(format!("out-{format}"));
        words.push(format!("++hydra.run.dir={}", out.display()));
        words.extend(fake_gcs::storage_words(&server.endpoint(), "formats"));
        run_quiet(&tmp.path, 2, &words).ok();
        let report = read_json(&out.join("report.json"));
        let mut from_storage = 0;
        for epoch in 0..2 {
            let e = at(&report, &format!("/epochs/{epoch}"));
            assert_eq!(int(e, "/samples_read"), 16, "{format}: {e}");
            assert_eq!(
                int(e, "/bytes_from_storage"),
                int(e, "/bytes_read"),
                "{format}: {e}"
            );
            from_storage += int(e, "/bytes_from_storage");
        }
        let kinds = at(&report, "/storage_requests/data/kinds");
        let get = |kind: &str, what: &str| {
            kinds
                .pointer(&format!("/{kind}/{what}"))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        assert_eq!(
            get("GET", "bytes") + get("ranged GET", "bytes"),
            from_storage,
            "{format}: {kinds}"
        );
        assert_eq!(
            get("ranged GET", "requests") > 0,
            format != "npz",
            "{kinds}"
        );
        assert_eq!(
            at(&report, "/cache_defeated_by"),
            "storage.storage_type=gcs"
        );
        let listed = objects(&words);
        let expected: Vec<String> = (0..8)
            .map(|i| format!("train/img_{i}_of_8.{format}"))
            .collect();
        assert_eq!(
            listed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            expected,
            "{format}"
        );
        let (code, audit, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{format}: {audit}\n{}", ran.context());
    }
}

#[test]
fn checkpoints_are_saved_to_and_loaded_from_a_bucket_in_resumable_uploads() {
    let tmp = Scratch::new("gcs-checkpoints");
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
        "++workload.checkpoint.checkpoint_folder=gs://checkpoints/llama",
        "++workload.storage.storage_options.part_size=5242880",
    ]);
    words.push(format!("++hydra.run.dir={}", tmp.s("out")));
    words.extend(fake_gcs::storage_words(&server.endpoint(), "checkpoints"));
    let mut args = strings(&["run", "--accelerators", "2"]);
    args.extend(words.iter().cloned());
    let ran = dlio_rs(&tmp.path, &args).ok();
    assert!(
        ran.stdout
            .contains("GCS requests for checkpoints: ranged GET "),
        "{}",
        ran.context()
    );
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
    let mut data = words.clone();
    data.push("++workload.dataset.data_folder=gs://checkpoints/llama".into());
    let listed = objects(&data);
    assert_eq!(listed.iter().map(|(_, s)| s).sum::<u64>(), 2 * one);
}
