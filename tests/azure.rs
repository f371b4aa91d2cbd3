//! End-to-end runs against a real Azure Blob server (Azurite, started per test on a free port
//! with its own folder and enforced SharedKey signatures): npz (whole gets) and hdf5 (ranged
//! gets) generated into a container, trained from it and audited, the blobs listed back;
//! checkpoints saved in blocks and loaded; refused keys and a missing container.

use serde_json::Value;

use crate::common::azurite::{self, Azurite};
use crate::common::*;

fn start(tmp: &Scratch) -> Azurite {
    Azurite::start(&tmp.path).unwrap_or_else(|e| panic!("Azurite did not start: {e}"))
}

/// A small traced run of `format` that generates 8 files of 2 samples into `folder` of the
/// container and trains 2 epochs on 2 accelerators.
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
    words.extend(azurite::storage_words(endpoint, "formats"));
    words
}

/// Every blob below the data folder of the configuration `words` and its size, listed through
/// dlio-rs's own Azure storage, folder by folder.
fn blobs(words: &[String]) -> Vec<(String, u64)> {
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
                _ => {
                    let size = storage.size(&path).unwrap();
                    found.push((path, size));
                }
            }
        }
    }
    found.sort();
    found
}

/// The bytes of whole and ranged get bodies the run's data storage received.
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
fn npz_and_hdf5_are_generated_into_trained_from_and_audited_in_a_container() {
    let tmp = Scratch::new("azure-formats");
    let server = start(&tmp);
    for format in ["npz", "hdf5"] {
        let words = format_words(&tmp, &server.endpoint(), format);
        run_quiet(&tmp.path, 2, &words).ok();
        let out = tmp.join(format!("out-{format}"));
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
        assert_eq!(data_get_bytes(&report), from_storage, "{format}: {report}");
        let kinds = at(&report, "/storage_requests/data/kinds");
        let ranged = kinds
            .pointer("/ranged GET/requests")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        // npz is read whole; hdf5 by ranged gets of its header and samples.
        assert_eq!(ranged > 0, format == "hdf5", "{format}: {kinds}");
        assert!(int(kinds, "/PUT/requests") >= 8, "{format}: {kinds}");
        assert_eq!(
            at(&report, "/cache_defeated_by"),
            "storage.storage_type=azure"
        );
        // The blobs: the 8 files of each split in the scheme's 2 subfolders, and nothing else
        // (the lease and the generation's marker are gone).
        let listed = blobs(&words);
        let mut expected: Vec<String> = ["train", "valid"]
            .iter()
            .flat_map(|split| {
                (0..8).map(move |i| format!("{split}/{}/img_{i}_of_8.{format}", i % 2))
            })
            .collect();
        expected.sort();
        assert_eq!(
            listed.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
            expected,
            "{format}"
        );
        assert!(
            listed.iter().all(|(_, size)| *size > 2 * 8192),
            "{listed:?}"
        );
        // The report keeps no key.
        let configuration = at(&report, "/configuration/storage/storage_options").to_string();
        assert!(
            !configuration.contains(azurite::ACCOUNT_KEY) && !configuration.contains("account_key"),
            "{configuration}"
        );
        let (code, audit, ran) = audit(&tmp.path, &out);
        assert_eq!(code, Some(0), "{format}: {audit}\n{}", ran.context());
    }
}

#[test]
fn checkpoints_are_saved_to_and_loaded_from_a_container_in_blocks() {
    let tmp = Scratch::new("azure-checkpoints");
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
        "++workload.checkpoint.checkpoint_folder=az://devstoreaccount1/checkpoints/llama",
        "++workload.storage.storage_options.part_size=5242880",
    ]);
    words.push(format!("++hydra.run.dir={}", tmp.s("out")));
    words.extend(azurite::storage_words(&server.endpoint(), "checkpoints"));
    let mut args = strings(&["run", "--accelerators", "2"]);
    args.extend(words.iter().cloned());
    let ran = dlio_rs(&tmp.path, &args).ok();
    assert!(
        ran.stdout
            .contains("Azure Blob requests for checkpoints: ranged GET "),
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
    // The blobs of the two saves hold every byte, in two checkpoint folders.
    let mut data = words.clone();
    data.push("++workload.dataset.data_folder=az://devstoreaccount1/checkpoints/llama".into());
    let listed = blobs(&data);
    assert_eq!(listed.iter().map(|(_, s)| s).sum::<u64>(), 2 * one);
    let saves: std::collections::BTreeSet<&str> = listed
        .iter()
        .map(|(n, _)| n.split('/').next().unwrap())
        .collect();
    assert_eq!(saves.len(), 2, "{listed:?}");
}

#[test]
fn refused_keys_and_missing_containers_are_usage_errors() {
    let tmp = Scratch::new("azure-credentials");
    let server = start(&tmp);
    let words = format_words(&tmp, &server.endpoint(), "npz");
    let trained = with(&words, &["++workload.workflow.generate_data=False"]);
    run_quiet(&tmp.path, 1, &trained)
        .fails(2)
        .says(&["container 'formats' does not exist at http://127.0.0.1:"]);
    run_quiet(&tmp.path, 1, &words).ok();
    run_quiet(
        &tmp.path,
        1,
        &with(
            &trained,
            &["++workload.storage.storage_options.account_key='d3Jvbmcga2V5'"],
        ),
    )
    .fails(2)
    .says(&["refused these credentials", "AuthorizationFailure"]);
    // Nothing listens there: the run fails (exit 1) after its attempts, naming the container.
    run_quiet(
        &tmp.path,
        1,
        &with(
            &trained,
            &["++workload.storage.storage_options.endpoint_url=http://127.0.0.1:1"],
        ),
    )
    .fails(1)
    .says(&["cannot reach container formats at http://127.0.0.1:1/devstoreaccount1/formats/"]);
}

/// A dataset whose names are not the scheme's (6 files asked for, 8 made) is listed page by
/// page; the audit lists it again with the key of the environment (the report keeps none).
#[test]
fn a_dataset_off_the_naming_scheme_is_listed_and_audited() {
    let tmp = Scratch::new("azure-listed");
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
    // The container check, and one page for train/ (its 2 subfolders), one for each subfolder.
    let lists = int(&report, "/storage_requests/data/kinds/LIST/requests");
    assert!((3..=5).contains(&lists), "{lists} LISTs");
    let audit = |env: &[(&str, &str)]| {
        launch(
            DLIO_RS,
            &tmp.path,
            &["audit", &out.display().to_string(), "--json"],
            env,
        )
    };
    audit(&[]).fails(1).says(&[
        "LIST az://devstoreaccount1/formats/datasets/npz/train/: HTTP 403 AuthorizationFailure",
    ]);
    let ran = audit(&[("AZURE_STORAGE_ACCOUNT_KEY", azurite::ACCOUNT_KEY)]);
    assert_eq!(ran.code, Some(0), "{}", ran.context());
}
