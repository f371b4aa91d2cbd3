//! The S3 backend against a real S3 server (SeaweedFS, started here on free ports): the
//! conformance suite every backend passes, multipart uploads, retries through a proxy that
//! injects faults, refused credentials, and a server that stops answering.

use std::time::{Duration, Instant};

use super::*;
use crate::config::tests::resolve;

#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;
#[path = "../../../tests/common/seaweed.rs"]
#[allow(dead_code)] // what only the end-to-end tests use (HTTPS)
mod seaweed;

use fault_proxy::{Fault, FaultPlan, FaultProxy};
use seaweed::SeaweedFs;

/// What only these tests ask a proxy: every request it took, whatever its fault.
trait Requests {
    fn requests(&self) -> usize;
}

impl Requests for FaultProxy {
    fn requests(&self) -> usize {
        Fault::ALL.iter().map(|&f| self.injected(f)).sum()
    }
}

fn server(name: &str) -> SeaweedFs {
    let parent = crate::storage::scratch_dir(name);
    std::fs::create_dir_all(&parent).unwrap();
    SeaweedFs::start(&parent).unwrap_or_else(|e| panic!("SeaweedFS did not start: {e}"))
}

/// A storage of `bucket` at `endpoint`, with the server's credentials and `extra` options.
fn storage(endpoint: &str, bucket: &str, extra: &[&str]) -> S3Storage {
    let mut words = vec!["workload=default".to_string()];
    words.extend(seaweed::storage_words(endpoint, bucket));
    words.extend(
        extra
            .iter()
            .map(|w| format!("++workload.storage.storage_options.{w}")),
    );
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let config = resolve(&words).unwrap();
    S3Storage::for_folder(&config, "prefix/of/run", 4).unwrap()
}

#[test]
fn s3_passes_the_conformance_suite_and_uploads_in_checked_parts() {
    let server = server("s3-conformance");
    let s3 = storage(&server.endpoint(), "conformance", &["part_size=5242880"]);
    s3.check_access(true).unwrap();
    crate::storage::conformance::run("s3", &s3);
    crate::storage::conformance::conditional_writes("s3", &s3, true);

    // 12 MiB + 3 bytes: three parts of 5 MiB, 5 MiB and 2 MiB + 3, written in odd pieces.
    let big: Vec<u8> = (0..(12 << 20) + 3).map(|i: u32| (i % 251) as u8).collect();
    let mut object = s3.create("big.bin").unwrap();
    for piece in big.chunks(777_777) {
        object.write(piece).unwrap();
    }
    object.finish().unwrap();
    let mut buf = IoBuffer::new();
    assert_eq!(
        s3.read_all("big.bin", &mut buf).unwrap().bytes(&buf),
        &big[..]
    );
    let counts = s3.request_counts().unwrap();
    assert_eq!(counts.of(RequestKind::PartUpload).requests, 3);
    assert_eq!(counts.of(RequestKind::PartUpload).bytes, big.len() as u64);
    // start + complete
    assert_eq!(counts.of(RequestKind::Multipart).requests, 2);

    // A writer dropped midway aborts its upload: no object appears.
    let mut partial = s3.create("partial.bin").unwrap();
    partial.write(&big).unwrap();
    drop(partial);
    assert!(!s3.exists("partial.bin").unwrap());
    let aborts = s3
        .request_counts()
        .unwrap()
        .of(RequestKind::Multipart)
        .requests;
    assert_eq!(aborts, 4, "start + abort after the two of the first upload");

    // Every byte of a GET body is counted, once.
    let before = s3.request_counts().unwrap();
    s3.read_range("big.bin", 5 << 20, 1000, &mut buf).unwrap();
    let after = s3.request_counts().unwrap();
    assert_eq!(
        after.of(RequestKind::RangedGet).bytes - before.of(RequestKind::RangedGet).bytes,
        1000
    );
}

#[test]
fn s3_lists_a_folder_page_by_page() {
    let server = server("s3-pages");
    let s3 = storage(&server.endpoint(), "pages", &[]).with_list_page(7);
    s3.check_access(true).unwrap();
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..20 {
        let name = format!("f{i:02}.bin");
        s3.put(&format!("split/{name}"), b"x").unwrap();
        expected.insert(name, EntryKind::File);
    }
    for sub in ["0", "1", "2"] {
        s3.put(&format!("split/{sub}/deeper.bin"), b"x").unwrap();
        expected.insert(sub.to_string(), EntryKind::Folder);
    }
    let before = s3.request_counts().unwrap().of(RequestKind::List).requests;
    let mut listed = std::collections::BTreeMap::new();
    s3.list_dir("split", &mut |name, kind| {
        assert!(
            listed.insert(name.to_string(), kind).is_none(),
            "{name} twice"
        );
    })
    .unwrap();
    assert_eq!(listed, expected);
    let pages = s3.request_counts().unwrap().of(RequestKind::List).requests - before;
    // 23 entries (20 keys and 3 common prefixes) at 7 a page.
    assert_eq!(pages, 4);
}

/// `max_in_flight` caps the requests of all threads together: 8 threads reading at once never
/// have more than 2 GETs out.
#[test]
fn s3_keeps_at_most_max_in_flight_requests_out() {
    let server = server("s3-in-flight");
    let s3 = storage(&server.endpoint(), "in-flight", &["max_in_flight=2"]);
    s3.check_access(true).unwrap();
    s3.put("k", &[5u8; 64 << 10]).unwrap();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                let mut buf = IoBuffer::new();
                for _ in 0..10 {
                    assert_eq!(s3.read_all("k", &mut buf).unwrap().len, 64 << 10);
                }
            });
        }
    });
    let counts = s3.request_counts().unwrap();
    assert_eq!(counts.of(RequestKind::Get).requests, 80);
    assert!(
        (1..=2).contains(&counts.peak_in_flight),
        "{}",
        counts.peak_in_flight
    );
}

#[test]
fn s3_retries_503s_and_resets_and_counts_them() {
    let server = server("s3-faults");
    // Every 3rd request answered 503 SlowDown, every 5th reset (the 15th: a 503).
    let proxy = FaultProxy::start(
        server.addr(),
        FaultPlan::every(3, Fault::ServiceUnavailable)
            .and_every(5, Fault::Reset)
            .sparing_retries(),
    )
    .unwrap();
    let s3 = storage(&proxy.endpoint(), "faults", &["s3_max_attempts=10"]);
    s3.check_access(true).unwrap();
    let mut buf = IoBuffer::new();
    for i in 0..20u8 {
        let key = format!("o{i}");
        s3.put(&key, &[i; 3000]).unwrap();
        assert_eq!(s3.read_all(&key, &mut buf).unwrap().bytes(&buf), &[i; 3000]);
    }
    let counts = s3.request_counts().unwrap();
    let retries: u64 = counts.kinds.iter().map(|k| k.retries).sum();
    assert_eq!(
        retries as usize,
        proxy.faults(),
        "each injected fault is one retry"
    );
    assert!(proxy.injected(Fault::ServiceUnavailable) > 0 && proxy.injected(Fault::Reset) > 0);
    assert_eq!(counts.of(RequestKind::Get).requests, 20);
    assert_eq!(counts.of(RequestKind::Get).bytes, 20 * 3000);
    // The one failure: the LIST that found no bucket, before it was made.
    assert_eq!(counts.of(RequestKind::List).failures, 1);
    assert_eq!(
        counts.of(RequestKind::Put).failures + counts.of(RequestKind::Get).failures,
        0
    );
}

#[test]
fn s3_gives_up_after_its_attempts_naming_the_key_and_the_status() {
    let server = server("s3-give-up");
    let s3 = storage(&server.endpoint(), "give-up", &[]);
    s3.check_access(true).unwrap();
    s3.put("k", b"bytes").unwrap();
    let proxy = FaultProxy::start(
        server.addr(),
        FaultPlan::every(1, Fault::ServiceUnavailable),
    )
    .unwrap();
    let through = storage(&proxy.endpoint(), "give-up", &["s3_max_attempts=3"]);
    let error = through.read_all("k", &mut IoBuffer::new()).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("s3://give-up/prefix/of/run/k")
            && text.contains("HTTP 503 SlowDown")
            && text.contains("after 3 attempts"),
        "{text}"
    );
    assert_eq!(proxy.requests(), 3);
    let counts = through.request_counts().unwrap();
    assert_eq!(counts.of(RequestKind::Get).failures, 1);
    assert_eq!(counts.of(RequestKind::Get).retries, 2);
}

#[test]
fn s3_does_not_hang_on_a_server_that_stops_answering() {
    let server = server("s3-stalled");
    let patient = storage(&server.endpoint(), "stalled", &[]);
    patient.check_access(true).unwrap();
    patient.put("k", b"bytes").unwrap();
    let s3 = storage(
        &server.endpoint(),
        "stalled",
        &["request_timeout=0.5", "s3_max_attempts=2"],
    );
    server.pause();
    let started = Instant::now();
    let error = s3.read_all("k", &mut IoBuffer::new()).unwrap_err();
    let took = started.elapsed();
    server.resume();
    assert!(
        error.to_string().contains("s3://stalled/prefix/of/run/k")
            && error.to_string().contains("timeout"),
        "{error}"
    );
    // Two attempts of 0.5 s each and a backoff of at most 50 ms, with room for a slow machine.
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(error.kind(), io::ErrorKind::TimedOut);
}

#[test]
fn refused_credentials_and_missing_buckets_are_usage_errors() {
    let server = server("s3-credentials");
    let endpoint = server.endpoint();
    let good = storage(&endpoint, "present", &[]);
    let missing = good.check_access(false).unwrap_err();
    assert_eq!(missing.exit_code(), 2);
    assert!(
        missing
            .to_string()
            .contains("bucket 'present' does not exist"),
        "{missing}"
    );
    good.check_access(true).unwrap();
    good.check_access(false).unwrap();
    for (words, code) in [
        (
            ["secret_access_key=wrong-secret", "s3_max_attempts=1"],
            "SignatureDoesNotMatch",
        ),
        (
            ["access_key_id=nobody", "s3_max_attempts=1"],
            "InvalidAccessKeyId",
        ),
    ] {
        let bad = storage(&endpoint, "present", &words);
        let error = bad.check_access(false).unwrap_err();
        assert_eq!(error.exit_code(), 2, "{error}");
        assert!(error.to_string().contains(code), "{error}");
    }
}

/// A lease on a folder of the bucket: one holder at a time, named to the next; renewed in place;
/// deleted when let go; an expired one taken over; one taken over from a stalled holder is found
/// lost when it renews.
#[test]
fn a_lease_holds_a_folder_for_one_run_at_a_time() {
    use crate::storage::lease::{Lease, LEASE_OBJECT};
    let server = server("s3-lease");
    let s3: Arc<dyn Storage> = Arc::new(storage(&server.endpoint(), "lease", &[]));
    s3.check_access(true).unwrap();
    let Ok(first) = Lease::take(Arc::clone(&s3), "generating", None).unwrap() else {
        panic!("refused");
    };
    let Err(held) = Lease::take(Arc::clone(&s3), "generating", None).unwrap() else {
        panic!("a second holder");
    };
    assert!(
        held.holder
            .starts_with(&format!("generating, process {} on ", std::process::id())),
        "{held:?}"
    );
    assert!((50..=60).contains(&held.expires_in), "{held:?}");
    first.check().unwrap();
    drop(first);
    assert!(!s3.exists(LEASE_OBJECT).unwrap(), "let go: deleted");

    // A holder that died left an expired lease: taken over.
    s3.put(
        LEASE_OBJECT,
        b"dlio-rs lease: generating, process 1 on gone, since then\ntoken: 0\nuntil: 1\n",
    )
    .unwrap();
    let Ok(second) = Lease::take(Arc::clone(&s3), "generating", None).unwrap() else {
        panic!("an expired lease refused");
    };
    // Another run overwrote it (this one stalled past its time): found lost, and not deleted.
    s3.put(
        LEASE_OBJECT,
        b"dlio-rs lease: generating, process 2 on other, since now\ntoken: 1\nuntil: 99999999999\n",
    )
    .unwrap();
    let lost = second.check().unwrap_err().to_string();
    assert!(lost.contains("lost the lease"), "{lost}");
    drop(second);
    assert!(
        s3.exists(LEASE_OBJECT).unwrap(),
        "the other run's lease stays"
    );
    // A folder holding something that is no lease of ours is refused, not overwritten.
    s3.put(LEASE_OBJECT, b"hello").unwrap();
    let refused = Lease::take(Arc::clone(&s3), "generating", None)
        .err()
        .unwrap()
        .to_string();
    assert!(
        refused.contains("is not a lease dlio-rs wrote"),
        "{refused}"
    );
}
