//! The GCS backend against a GCS server (fake-gcs-server, started here on a free port): the
//! conformance suite every backend passes, its conditional writes, resumable uploads, paginated
//! listings, a missing bucket; and where folders, endpoints and chunk sizes come from.

use super::*;
use crate::config::tests::resolve;
use crate::storage::WriteChecks;

// Beside each store's launcher, its own copy in each store's tests (built with or without the
// others).
#[path = "../../../tests/common/fake_gcs.rs"]
#[allow(dead_code)] // what only the end-to-end tests use
mod fake_gcs;
#[path = "../../../tests/common/watched.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod watched;

// The S3 and Azure tests include it too when those stores are built: each its own copy.
#[path = "../../../tests/common/fault_proxy.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod fault_proxy;

use fake_gcs::FakeGcs;
use fault_proxy::{Fault, FaultPlan, FaultProxy};

fn server(name: &str) -> FakeGcs {
    let parent = crate::storage::scratch_dir(name);
    FakeGcs::start(&parent).unwrap_or_else(|e| panic!("fake-gcs-server did not start: {e}"))
}

fn config(endpoint: &str, bucket: &str, extra: &[&str]) -> Config {
    let mut words = vec!["workload=default".to_string()];
    words.extend(fake_gcs::storage_words(endpoint, bucket));
    words.extend(
        extra
            .iter()
            .map(|w| format!("++workload.storage.storage_options.{w}")),
    );
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    resolve(&words).unwrap()
}

fn storage(endpoint: &str, bucket: &str, extra: &[&str]) -> GcsStorage {
    GcsStorage::for_folder(&config(endpoint, bucket, extra), "prefix/of/run", 4).unwrap()
}

/// A checkpoint load reads an object in `part_size` ranges, `parts_in_flight` of them fetched
/// ahead together (seen at the server through a proxy that counts what it answers at once).
#[test]
fn gcs_reads_an_object_in_order_ranges_ahead() {
    let server = server("gcs-ahead");
    let proxy = FaultProxy::start(server.addr(), FaultPlan::default()).unwrap();
    let gcs = storage(
        &proxy.endpoint(),
        "ahead",
        &["part_size=5242880", "parts_in_flight=3"],
    );
    gcs.check_access(true).unwrap();
    crate::storage::conformance::reads_in_order_ranges_ahead(
        "gcs",
        &gcs,
        (5 << 20, 3),
        &|| proxy.reset_peak(),
        &|| proxy.peak_in_flight(),
    );
}

/// Every object written is checked before it counts, by what GCS answers the upload with (the
/// object's metadata): its `md5Hash` against the MD5 of what was sent (of all the chunks of a
/// resumable upload), its `size` with `verify_writes: size`. A simple upload a proxy truncates
/// (the server stores half and answers 200) is caught and written again; one truncated every
/// time fails, naming the object and both sizes.
#[test]
fn gcs_checks_every_write_and_writes_a_truncated_one_again() {
    let server = server("gcs-verified");
    let pattern = |len: usize| -> Vec<u8> { (0..len).map(|i| (i * 7 % 253) as u8).collect() };
    let (small, big) = (pattern(100 << 10), pattern((12 << 20) + 3));
    let setup = storage(&server.endpoint(), "verified", &[]);
    setup.check_access(true).unwrap();
    for verify in ["etag", "size"] {
        let gcs = storage(
            &server.endpoint(),
            "verified",
            &["part_size=5242880", &format!("verify_writes={verify}")],
        );
        gcs.put("small.bin", &small).unwrap();
        gcs.put("big.bin", &big).unwrap();
        let counts = gcs.request_counts().unwrap();
        let checks = WriteChecks {
            verified: 2,
            ..WriteChecks::default()
        };
        assert_eq!(counts.writes, checks, "{verify}");
        assert_eq!(
            counts.of(RequestKind::Head).requests,
            0,
            "{verify}: the answers tell"
        );
    }

    // Truncated once (the retry is spared): caught, written again, stored whole.
    let proxy = FaultProxy::start(
        server.addr(),
        FaultPlan::matching("name=prefix%2Fof%2Frun%2Fonce.bin", Fault::Truncate).sparing_retries(),
    )
    .unwrap();
    let gcs = storage(&proxy.endpoint(), "verified", &[]);
    gcs.put("once.bin", &small).unwrap();
    assert_eq!(proxy.injected(Fault::Truncate), 1);
    let checks = WriteChecks {
        verified: 1,
        mismatches: 1,
        rewrites: 1,
    };
    assert_eq!(gcs.request_counts().unwrap().writes, checks);
    let mut buf = IoBuffer::new();
    assert!(setup.read_all("once.bin", &mut buf).unwrap().bytes(&buf) == &small[..]);

    // Truncated every time: the write fails after its attempts, naming what was stored.
    for verify in ["etag", "size"] {
        let proxy = FaultProxy::start(
            server.addr(),
            FaultPlan::matching("name=prefix%2Fof%2Frun%2Falways.bin", Fault::Truncate),
        )
        .unwrap();
        let gcs = storage(
            &proxy.endpoint(),
            "verified",
            &["s3_max_attempts=3", &format!("verify_writes={verify}")],
        );
        let error = gcs.put("always.bin", &small).unwrap_err().to_string();
        assert!(
            error.contains(
                "gs://verified/prefix/of/run/always.bin holds 51200 bytes after a write of \
                 102400 bytes"
            ) && error.contains("after 3 writes"),
            "{verify}: {error}"
        );
        let checks = WriteChecks {
            verified: 0,
            mismatches: 3,
            rewrites: 2,
        };
        assert_eq!(gcs.request_counts().unwrap().writes, checks, "{verify}");
    }
}

#[test]
fn gcs_passes_the_conformance_suite_and_uploads_in_checked_chunks() {
    let server = server("gcs-conformance");
    let gcs = storage(&server.endpoint(), "conformance", &["part_size=5242880"]);
    gcs.check_access(true).unwrap();
    crate::storage::conformance::run("gcs", &gcs);
    crate::storage::conformance::conditional_writes("gcs", &gcs, true);

    // The session's start; a writer dropped midway cancels its session.
    let big = crate::storage::conformance::uploads_in_parts("gcs", &gcs, 1);
    let mut buf = IoBuffer::new();

    // A tail is one request whose answer gives the size.
    let before = gcs.request_counts().unwrap();
    let (read, size) = gcs.read_tail("big.bin", 1000, &mut buf).unwrap();
    assert_eq!(
        (read.bytes(&buf), size),
        (&big[big.len() - 1000..], big.len() as u64)
    );
    let after = gcs.request_counts().unwrap();
    assert_eq!(
        after.of(RequestKind::RangedGet).requests - before.of(RequestKind::RangedGet).requests,
        1
    );
    assert_eq!(
        after.of(RequestKind::Head).requests,
        before.of(RequestKind::Head).requests
    );
    // Names with characters a URL must encode.
    let odd = "odd name/with spaces+plus&amp%.bin";
    gcs.put(odd, b"odd").unwrap();
    assert_eq!(gcs.read_all(odd, &mut buf).unwrap().bytes(&buf), b"odd");
    assert_eq!(
        gcs.describe(odd),
        format!("gs://conformance/prefix/of/run/{odd}")
    );
}

#[test]
fn gcs_lists_a_folder_page_by_page() {
    let server = server("gcs-pages");
    let gcs = storage(&server.endpoint(), "pages", &[]).with_list_page(7);
    gcs.check_access(true).unwrap();
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..20 {
        let name = format!("f{i:02}.bin");
        gcs.put(&format!("split/{name}"), b"x").unwrap();
        expected.insert(name, EntryKind::File);
    }
    for sub in ["0", "1", "2"] {
        gcs.put(&format!("split/{sub}/deeper.bin"), b"x").unwrap();
        expected.insert(sub.to_string(), EntryKind::Folder);
    }
    let mut listed = std::collections::BTreeMap::new();
    gcs.list_dir("split", &mut |name, kind| {
        assert!(
            listed.insert(name.to_string(), kind).is_none(),
            "{name} twice"
        );
    })
    .unwrap();
    assert_eq!(listed, expected);
    assert!(gcs.request_counts().unwrap().of(RequestKind::List).requests >= 3);
}

#[test]
fn a_missing_bucket_is_a_usage_error_and_a_generation_makes_it() {
    let server = server("gcs-bucket");
    let gcs = storage(&server.endpoint(), "present", &[]);
    let missing = gcs.check_access(false).unwrap_err();
    assert_eq!(missing.exit_code(), 2);
    assert!(
        missing
            .to_string()
            .contains("bucket 'present' does not exist"),
        "{missing}"
    );
    gcs.check_access(true).unwrap();
    gcs.check_access(false).unwrap();
}

/// A lease on a folder of the bucket: one holder at a time; deleted when let go; one overwritten
/// by another run is found lost.
#[test]
fn a_lease_holds_a_folder_of_a_bucket_for_one_run_at_a_time() {
    use crate::storage::lease::{Lease, LEASE_OBJECT};
    let server = server("gcs-lease");
    let gcs: Arc<dyn Storage> = Arc::new(storage(&server.endpoint(), "lease", &[]));
    gcs.check_access(true).unwrap();
    let Ok(first) = Lease::take(Arc::clone(&gcs), "generating", None).unwrap() else {
        panic!("refused");
    };
    let Err(held) = Lease::take(Arc::clone(&gcs), "generating", None).unwrap() else {
        panic!("a second holder");
    };
    assert!(held.holder.starts_with("generating, process "), "{held:?}");
    first.check().unwrap();
    drop(first);
    assert!(!gcs.exists(LEASE_OBJECT).unwrap(), "let go: deleted");
    let Ok(second) = Lease::take(Arc::clone(&gcs), "generating", None).unwrap() else {
        panic!("refused");
    };
    gcs.put(
        LEASE_OBJECT,
        b"dlio-rs lease: generating, process 2 on x, since now\ntoken: 1\nuntil: 99999999999\n",
    )
    .unwrap();
    let lost = second.check().unwrap_err().to_string();
    assert!(lost.contains("lost the lease"), "{lost}");
    drop(second);
    assert!(gcs.exists(LEASE_OBJECT).unwrap(), "the other's stays");
}

#[test]
fn folders_endpoints_and_chunk_sizes_are_checked() {
    let c = config("http://127.0.0.1:1", "train-data", &[]);
    assert_eq!(
        bucket_and_prefix(&c, "./data/x/").unwrap(),
        ("train-data".to_string(), "data/x/".to_string())
    );
    assert_eq!(
        bucket_and_prefix(&c, "gs://other/a/b").unwrap(),
        ("other".to_string(), "a/b/".to_string())
    );
    for (folder, says) in [
        ("s3://b/x", "not a GCS address"),
        ("gs://Bad!", "'Bad!' is not a bucket name"),
        ("a/../b", "'..'"),
    ] {
        let error = bucket_and_prefix(&c, folder).unwrap_err();
        assert!(error.to_string().contains(says), "{folder}: {error}");
    }
    let env = |name: &str| (name == "STORAGE_EMULATOR_HOST").then(|| "localhost:4443".to_string());
    assert_eq!(
        endpoint(&ObjectStoreOptions::default(), &env).unwrap(),
        "http://localhost:4443"
    );
    assert_eq!(
        endpoint(&ObjectStoreOptions::default(), &|_| None).unwrap(),
        "https://storage.googleapis.com"
    );
    let odd = config("http://127.0.0.1:1", "b-b", &["part_size=5242881"]);
    let error = GcsStorage::for_folder(&odd, "x", 1).err().unwrap();
    assert!(
        error.to_string().contains("multiples of 256 KiB"),
        "{error}"
    );
}
