//! Tests of the whole configuration path (workload file, overrides, decoding, validation), and
//! [`resolve`], which other modules' tests use to build a [`Config`] from override words.

use super::decode::MAX_TRANSFER_SIZE;
use super::overrides::Overrides;
use super::value::Value;
use super::*;
use crate::error::Result;

pub(crate) fn resolve(words: &[&str]) -> Result<Config> {
    Source {
        overrides: Overrides::parse(words)?,
        config_dir: None,
    }
    .resolve(false)
}

#[test]
fn defaults_are_dlio_code_defaults() {
    let c = Config::from_tree("t", Value::empty_map()).unwrap();
    assert_eq!(c.framework, Framework::Tensorflow);
    assert_eq!(c.dataset.record_length_bytes, 65536);
    assert_eq!(c.dataset.num_files_train, 8);
    assert_eq!(c.dataset.format, Format::Tfrecord);
    assert_eq!(c.dataset.file_prefix, "img");
    assert_eq!(c.reader.batch_size, 1);
    assert_eq!(c.reader.read_threads, 1);
    assert_eq!(c.reader.prefetch_size, 2);
    assert_eq!(c.train.seed, 123);
    assert_eq!(c.train.epochs, 1);
    assert_eq!(c.output.exclude_start_steps, 1);
    assert_eq!(c.model.model_size_bytes, 10240);
    assert_eq!(c.au_threshold, 0.90);
}

#[test]
fn yaml_off_is_shuffle_off_and_aliases_work() {
    let tree = Value::from_yaml(
        "data_reader:\n  file_shuffle: off\n  sample_shuffle: seed\nmodel:\n  model_size: 499153191\n",
    )
    .unwrap();
    let short = Config::from_tree("t", Value::from_yaml("model: unet3d\n").unwrap()).unwrap();
    assert_eq!(short.model.name, "unet3d");
    assert!(short.unknown_keys.is_empty());
    let c = Config::from_tree("t", tree).unwrap();
    assert_eq!(c.reader.file_shuffle, Shuffle::Off);
    assert_eq!(c.reader.sample_shuffle, Shuffle::Seed);
    assert_eq!(c.model.model_size_bytes, 499153191);
    assert!(c.unknown_keys.is_empty(), "{:?}", c.unknown_keys);
}

#[test]
fn sizes_that_would_overflow_are_rejected() {
    for yaml in [
        "dataset:\n  num_samples_per_file: 9223372036854775807\n",
        "dataset:\n  num_files_eval: 4294967297\n  num_samples_per_file: 65536\n",
        "dataset:\n  record_dims: [100000000, 100000000]\n",
    ] {
        let err = Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap_err();
        let said = err.to_string();
        assert!(
            said.contains("2^48") || said.contains("at most 4294967296"),
            "{yaml}: {err}"
        );
    }
    let fine = "dataset:\n  num_files_train: 1000000\n  num_samples_per_file: 1000\n  record_dims: [4, 4]\n";
    assert!(Config::from_tree("t", Value::from_yaml(fine).unwrap()).is_ok());
}

#[test]
fn dlio_2_names_and_reader_precedence() {
    let tree = Value::from_yaml(
        "dataset:\n  record_length: 114660.07\n  record_length_stdev: 10\nreader:\n  batch_size: 3\ndata_reader:\n  batch_size: 5\n",
    )
    .unwrap();
    let c = Config::from_tree("t", tree).unwrap();
    assert_eq!(c.dataset.record_length_bytes, 114660);
    assert_eq!(c.dataset.record_length_bytes_stdev, 10);
    assert_eq!(c.reader.batch_size, 5, "data_reader wins, as in DLIO");
    assert_eq!(c.unknown_keys.len(), 1);
    assert!(
        c.unknown_keys[0].starts_with("reader (ignored"),
        "{:?}",
        c.unknown_keys
    );
}

#[test]
fn bad_values_name_key_value_and_valid_set() {
    let tree = Value::from_yaml(
        "dataset:\n  format: npzz\nreader:\n  batch_size: 0\n  file_shuffle: yes\n",
    )
    .unwrap();
    let err = Config::from_tree("t", tree).unwrap_err();
    let text = err.to_string();
    assert_eq!(err.exit_code(), 2);
    assert!(
        text.contains("workload.dataset.format = 'npzz'") && text.contains("npz, npy"),
        "{text}"
    );
    assert!(
        text.contains("workload.reader.batch_size = 0: must be at least 1"),
        "{text}"
    );
    assert!(
        text.contains("workload.reader.file_shuffle = true") && text.contains("off, seed, random"),
        "{text}"
    );
}

#[test]
fn transfer_size_is_tensorflow_s_buffer_by_default_and_bounded() {
    let parse = |yaml: &str| Config::from_tree("t", Value::from_yaml(yaml).unwrap());
    let default = parse("reader:\n  batch_size: 1\n").unwrap();
    assert_eq!(default.reader.transfer_size, TENSORFLOW_READ_BUFFER);
    for size in [0, 4096, MAX_TRANSFER_SIZE] {
        let c = parse(&format!("reader:\n  transfer_size: {size}\n")).unwrap();
        assert_eq!(c.reader.transfer_size, size);
    }
    for (bad, why) in [
        ("-1", "must be at least 0"),
        ("1073741825", "at most 1073741824 bytes"),
        ("big", "expected an integer"),
    ] {
        let err = parse(&format!("reader:\n  transfer_size: {bad}\n")).unwrap_err();
        assert_eq!(err.exit_code(), 2);
        let text = err.to_string();
        assert!(
            text.contains("workload.reader.transfer_size") && text.contains(why),
            "{text}"
        );
    }
}

#[test]
fn unknown_keys_warn_or_fail_with_strict() {
    let c = resolve(&[
        "workload=default",
        "++workload.dataset.colour=blue",
        "++workload.extra.x=1",
    ])
    .unwrap();
    assert_eq!(
        c.unknown_keys,
        vec!["dataset.colour".to_string(), "extra".to_string()]
    );
    let source = Source {
        overrides: Overrides::parse(&["workload=default", "++workload.dataset.colour=blue"])
            .unwrap(),
        config_dir: None,
    };
    let err = source.resolve(true).unwrap_err();
    assert!(err.to_string().contains("workload.dataset.colour"), "{err}");
}

#[test]
fn unknown_workload_suggests_close_names() {
    let err = resolve(&["workload=unet3d_h10"]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("unet3d_h100"), "{err}");
}

#[test]
fn config_dir_workloads() {
    let dir = std::env::temp_dir().join(format!("dlio-rs-config-dir-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("workload")).unwrap();
    std::fs::write(
        dir.join("workload/mine.yaml"),
        "dataset:\n  format: npy\n  num_files_train: 3\n",
    )
    .unwrap();
    let source = Source {
        overrides: Overrides::parse(&["workload=mine"]).unwrap(),
        config_dir: Some(dir.clone()),
    };
    let c = source.resolve(true).unwrap();
    assert_eq!(c.dataset.format, Format::Npy);
    assert_eq!(c.dataset.num_files_train, 3);
    let source = Source {
        overrides: Overrides::parse(&["workload=mien"]).unwrap(),
        config_dir: Some(dir.clone()),
    };
    let err = source.resolve(false).unwrap_err();
    assert!(err.to_string().contains("mine"), "{err}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn object_stores_not_built_in_are_refused_naming_the_feature() {
    for store in ["s3", "aistore"] {
        let word = format!("++workload.storage.storage_type={store}");
        let c = resolve(&["workload=default", &word]).unwrap();
        let built_in = c
            .check_supported()
            .map_err(|e| (e.exit_code(), e.to_string()));
        if cfg!(feature = "s3") {
            assert_eq!(built_in, Ok(()));
        } else {
            let (code, text) = built_in.unwrap_err();
            assert_eq!(code, 2);
            assert!(
                text.contains("--features s3") && text.contains(store),
                "{text}"
            );
        }
    }
    let azure = resolve(&["workload=default", "++workload.storage.storage_type=azure"]).unwrap();
    let built_in = azure.check_supported().map_err(|e| e.to_string());
    if cfg!(feature = "azure") {
        assert_eq!(built_in, Ok(()));
    } else {
        assert!(built_in.unwrap_err().contains("--features azure"));
    }
    let gcs = resolve(&["workload=default", "++workload.storage.storage_type=gcs"]).unwrap();
    let built_in = gcs.check_supported().map_err(|e| e.to_string());
    if cfg!(feature = "gcs") {
        assert_eq!(built_in, Ok(()));
    } else {
        assert!(built_in.unwrap_err().contains("--features gcs"));
    }
    let mapped = resolve(&[
        "workload=default",
        "++workload.storage.storage_type=s3",
        "++workload.dataset.format=mmap_indexed_binary",
    ])
    .unwrap();
    let err = mapped.check_supported().unwrap_err().to_string();
    assert!(
        err.contains("mmap_indexed_binary") || err.contains("--features s3"),
        "{err}"
    );
}

#[test]
fn object_store_options_take_dlio_s_strings_and_refuse_what_cannot_work() {
    let c = resolve(&[
        "workload=default",
        "++workload.storage.storage_options.s3_force_path_style=False",
        "++workload.storage.storage_options.s3_max_attempts='7'",
        "++workload.storage.storage_options.endpoint_url=http://127.0.0.1:9000",
        "++workload.storage.storage_options.part_size=8388608",
    ])
    .unwrap();
    let o = &c.storage.options;
    assert_eq!(o.force_path_style, Some(false));
    assert_eq!(o.max_attempts, 7);
    assert_eq!(o.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
    assert_eq!(o.part_size, 8 << 20);
    assert_eq!(o.request_timeout, 30.0);
    for (word, fragment) in [
        ("s3_max_attempts=0", "from 1 to 100"),
        ("part_size=1024", "from 5242880"),
        ("request_timeout=-1", "a number of seconds"),
        ("max_in_flight=2.5", "whole number"),
    ] {
        let err = resolve(&[
            "workload=default",
            &format!("++workload.storage.storage_options.{word}"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.contains(fragment) && err.contains("storage_options"),
            "{word}: {err}"
        );
    }
}

#[test]
fn pytorch_prefetch_rule() {
    use crate::config::prefetch_factor;
    assert_eq!(prefetch_factor(4, 2), 1);
    assert_eq!(prefetch_factor(1, 2), 2);
    assert_eq!(prefetch_factor(3, 8), 3);
    assert_eq!(prefetch_factor(2, 0), 2);
    assert_eq!(prefetch_factor(0, 2), 2);
    assert_eq!(prefetch_factor(0, 0), 2);
}

#[test]
fn a_metrics_address_defaults_to_loopback_and_needs_the_time_series() {
    use super::decode::listen_address;
    assert_eq!(
        listen_address("9464").unwrap().to_string(),
        "127.0.0.1:9464"
    );
    assert_eq!(
        listen_address("0.0.0.0:80").unwrap().to_string(),
        "0.0.0.0:80"
    );
    assert_eq!(listen_address("[::1]:9").unwrap().to_string(), "[::1]:9");
    let error = listen_address("localhost:x").unwrap_err();
    assert!(
        error.contains("PORT") && error.contains("0.0.0.0:9464"),
        "{error}"
    );
    let config = resolve(&["++workload.output.metrics_listen=9464"]).unwrap();
    assert_eq!(config.output.metrics_listen.unwrap().port(), 9464);
    let error = resolve(&[
        "++workload.output.metrics_listen=9464",
        "++workload.output.timeseries_interval=0",
    ])
    .unwrap_err()
    .to_string();
    assert!(error.contains("output.metrics_listen") && error.contains("timeseries_interval"));
    let error = resolve(&["++workload.output.metrics_listen=x:1"]).unwrap_err();
    assert!(error.to_string().contains("IP:PORT"), "{error}");
}
