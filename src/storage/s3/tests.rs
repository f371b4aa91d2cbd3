//! The S3 backend against a real S3 server (SeaweedFS, started here on free ports): the
//! conformance suite every backend passes, multipart uploads, retries through a proxy that
//! injects faults, refused credentials, and a server that stops answering.

use std::time::{Duration, Instant};

use super::*;
use crate::config::tests::resolve;
use crate::storage::WriteChecks;

#[path = "../../../tests/common/fault_proxy.rs"]
mod fault_proxy;
// Beside each store's launcher, its own copy in each store's tests (built with or without the
// others).
#[path = "../../../tests/common/seaweed.rs"]
#[allow(dead_code)] // what only the end-to-end tests use (HTTPS)
mod seaweed;
#[path = "../../../tests/common/watched.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod watched;

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

    // Start + complete; a writer dropped midway aborts its upload (start + abort).
    crate::storage::conformance::uploads_in_parts("s3", &s3, 2);
    let counts = s3.request_counts().unwrap();
    assert_eq!(
        counts.of(RequestKind::Multipart).requests,
        4,
        "start + abort after the two of the first upload"
    );
}

/// A store that answers every request at a gateway with a 307 to the node holding the object
/// (AIStore's S3 API): the client follows each, method, headers and body, and the backend passes
/// the conformance suite through it, multipart uploads and ranged reads included. Every request
/// is redirected exactly once and counted as such; a redirect loop fails naming the object.
#[test]
fn s3_follows_redirects_as_aistores_gateways_send_them() {
    let server = server("s3-redirects");
    let target = FaultProxy::start(server.addr(), FaultPlan::default()).unwrap();
    let gateway = FaultProxy::start(server.addr(), FaultPlan::every(1, Fault::Redirect)).unwrap();
    gateway.redirect_to(target.addr());
    target.present_as(&gateway.addr().to_string());
    let s3 = storage(&gateway.endpoint(), "redirects", &["part_size=5242880"]);
    s3.check_access(true).unwrap();
    crate::storage::conformance::run("s3 behind redirects", &s3);

    let big: Vec<u8> = (0..(11 << 20)).map(|i: u32| (i % 253) as u8).collect();
    let mut object = s3.create("big.bin").unwrap();
    object.write(&big).unwrap();
    object.finish().unwrap();
    let mut buf = IoBuffer::new();
    assert_eq!(
        s3.read_all("big.bin", &mut buf).unwrap().bytes(&buf),
        &big[..]
    );
    assert_eq!(
        s3.read_range("big.bin", 6 << 20, 4096, &mut buf)
            .unwrap()
            .bytes(&buf),
        &big[6 << 20..(6 << 20) + 4096]
    );

    let counts = s3.request_counts().unwrap();
    let all = counts.for_endpoint("");
    let redirected = gateway.injected(Fault::Redirect);
    assert_eq!(
        gateway.requests(),
        redirected,
        "the gateway answers nothing itself"
    );
    assert_eq!(
        target.injected(Fault::Forward),
        redirected,
        "each redirect is followed once"
    );
    assert_eq!(
        all.all.redirects as usize, redirected,
        "the client counts every redirect it followed"
    );
    assert_eq!(
        all.all.requests + all.all.failures + all.all.retries,
        redirected as u64,
        "one redirect per attempt"
    );
    assert_eq!(counts.of(RequestKind::PartUpload).requests, 3);
    assert_eq!(counts.of(RequestKind::PartUpload).redirects, 3);

    // A gateway that sends requests back to itself: the client stops, naming the object.
    let looping = FaultProxy::start(server.addr(), FaultPlan::every(1, Fault::Redirect)).unwrap();
    looping.redirect_to(looping.addr());
    let lost = storage(&looping.endpoint(), "redirects", &[]);
    let error = lost.read_all("big.bin", &mut buf).unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("s3://redirects/prefix/of/run/big.bin")
            && text.contains("HTTP 307 too many redirects")
            && text.contains(&format!("{} followed", crate::storage::http::MAX_REDIRECTS)),
        "{text}"
    );
    assert_eq!(
        looping.requests(),
        crate::storage::http::MAX_REDIRECTS as usize + 1,
        "not retried: another attempt would loop again"
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

/// Bytes that differ from part to part, so that a part sent in the wrong place shows.
fn pattern(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i % 251) as u8 ^ (i >> 20) as u8)
        .collect()
}

/// Every write is checked before it counts: sent with its CRC-32, which SeaweedFS checks and
/// answers with (a multipart object's size then HEADed once complete), or by the stored size
/// (`verify_writes: size`, a HEAD each).
/// A write that a proxy truncates (the server stores half and answers 200) is caught and written
/// again; one truncated every time fails, naming the object and both sizes.
#[test]
fn s3_checks_every_write_and_writes_a_truncated_one_again() {
    let server = server("s3-verified");
    let small = pattern(100 << 10);
    let big = pattern((12 << 20) + 3);
    let setup = storage(&server.endpoint(), "verified", &[]);
    setup.check_access(true).unwrap();
    for (verify, heads) in [("etag", 1), ("size", 2)] {
        let s3 = storage(
            &server.endpoint(),
            "verified",
            &["part_size=5242880", &format!("verify_writes={verify}")],
        );
        s3.put("small.bin", &small).unwrap();
        s3.put("big.bin", &big).unwrap();
        let counts = s3.request_counts().unwrap();
        let checks = WriteChecks {
            verified: 2,
            ..WriteChecks::default()
        };
        assert_eq!(counts.writes, checks, "{verify}");
        assert_eq!(counts.of(RequestKind::Head).requests, heads, "{verify}");
    }

    // A store that takes no checksums (its answers without `x-amz-checksum-crc32`): checked by
    // its ETags, the MD5s of what was sent (a multipart object: of its parts' MD5s), no HEAD.
    let plain = FaultProxy::start(server.addr(), FaultPlan::every(1, Fault::HideChecksum)).unwrap();
    let s3 = storage(&plain.endpoint(), "verified", &["part_size=5242880"]);
    s3.put("small.bin", &small).unwrap();
    s3.put("big.bin", &big).unwrap();
    let counts = s3.request_counts().unwrap();
    let checks = WriteChecks {
        verified: 2,
        ..WriteChecks::default()
    };
    assert_eq!(counts.writes, checks, "by ETag");
    assert_eq!(counts.of(RequestKind::Head).requests, 0, "by ETag");
    assert!(plain.injected(Fault::HideChecksum) >= 6);

    // Truncated once (the retry is spared): caught, written again, stored whole.
    for (what, line, data) in [
        ("a PUT", "PUT /verified/prefix/of/run/once.bin?", &small),
        ("a part", "partNumber=2&", &big),
    ] {
        let proxy = FaultProxy::start(
            server.addr(),
            FaultPlan::matching(line, Fault::Truncate).sparing_retries(),
        )
        .unwrap();
        let s3 = storage(&proxy.endpoint(), "verified", &["part_size=5242880"]);
        s3.put("once.bin", data).unwrap();
        assert_eq!(proxy.injected(Fault::Truncate), 1, "{what}");
        let checks = WriteChecks {
            verified: 1,
            mismatches: 1,
            rewrites: 1,
        };
        assert_eq!(s3.request_counts().unwrap().writes, checks, "{what}");
        let mut buf = IoBuffer::new();
        assert!(setup.read_all("once.bin", &mut buf).unwrap().bytes(&buf) == &data[..]);
    }

    // Truncated every time: the run's write fails after its attempts, naming what was stored.
    for verify in ["etag", "size"] {
        let proxy = FaultProxy::start(
            server.addr(),
            FaultPlan::matching("PUT /verified/prefix/of/run/always.bin?", Fault::Truncate),
        )
        .unwrap();
        let s3 = storage(
            &proxy.endpoint(),
            "verified",
            &["s3_max_attempts=3", &format!("verify_writes={verify}")],
        );
        let error = s3.put("always.bin", &small).unwrap_err().to_string();
        let found = match verify {
            // Refused by the server, which checked the CRC-32 sent against what arrived.
            "etag" => {
                "always.bin was refused by the store as it arrived otherwise than sent \
                       (the 102400 bytes sent are crc32 "
            }
            _ => "always.bin holds 51200 bytes after a write of 102400 bytes",
        };
        assert!(
            error.contains(&format!("s3://verified/prefix/of/run/{found}"))
                && error.contains("after 3 writes"),
            "{verify}: {error}"
        );
        let checks = WriteChecks {
            verified: 0,
            mismatches: 3,
            rewrites: 2,
        };
        assert_eq!(s3.request_counts().unwrap().writes, checks, "{verify}");
    }
    // A part truncated every time fails the upload, which is aborted: no object.
    let proxy = FaultProxy::start(
        server.addr(),
        FaultPlan::matching("partNumber=2&", Fault::Truncate),
    )
    .unwrap();
    let s3 = storage(
        &proxy.endpoint(),
        "verified",
        &["part_size=5242880", "s3_max_attempts=2"],
    );
    let error = s3.put("cut.bin", &big).unwrap_err().to_string();
    assert!(
        error.contains(
            "part 2 of s3://verified/prefix/of/run/cut.bin was refused by the store as it \
             arrived otherwise than sent (the 5242880 bytes sent are crc32 "
        ),
        "{error}"
    );
    assert!(!setup.exists("cut.bin").unwrap());
}

/// A large object's parts are uploaded together, up to `parts_in_flight` (seen at the server,
/// through a proxy that counts the requests it is answering at once), and completed in order; a
/// checkpoint load's ranges are fetched ahead together too. A part that fails for good aborts
/// the upload once the others have ended: no object appears.
#[test]
fn s3_uploads_parts_together_and_reads_pieces_ahead() {
    let server = server("s3-parallel");
    let proxy = FaultProxy::start(server.addr(), FaultPlan::default()).unwrap();
    let s3 = storage(
        &proxy.endpoint(),
        "parallel",
        &["part_size=5242880", "parts_in_flight=4"],
    );
    s3.check_access(true).unwrap();
    // At the server, more than one at once; at the client (exact: the proxy sees a request end
    // only when its connection closes, a little after the client is done), at most 4.
    crate::storage::conformance::writes_parts_together(
        "s3",
        &s3,
        (5 << 20, 4),
        &|| proxy.reset_peak(),
        &|| proxy.peak_in_flight(),
    );
    let counts = s3.request_counts().unwrap();
    assert_eq!(counts.writes.verified, 1);
    let big = pattern(8 * (5 << 20) + 1000);

    crate::storage::conformance::reads_in_order_ranges_ahead(
        "s3",
        &s3,
        (5 << 20, 4),
        &|| proxy.reset_peak(),
        &|| proxy.peak_in_flight(),
    );

    let failing = FaultProxy::start(
        server.addr(),
        FaultPlan::matching("partNumber=3&", Fault::ServiceUnavailable),
    )
    .unwrap();
    let s3 = storage(
        &failing.endpoint(),
        "parallel",
        &[
            "part_size=5242880",
            "parts_in_flight=4",
            "s3_max_attempts=2",
        ],
    );
    let error = s3.put("failed.bin", &big).unwrap_err().to_string();
    assert!(error.contains("HTTP 503 SlowDown"), "{error}");
    assert!(!s3.exists("failed.bin").unwrap());
    let multipart = s3
        .request_counts()
        .unwrap()
        .of(RequestKind::Multipart)
        .clone();
    assert_eq!(
        (multipart.requests, multipart.failures),
        (2, 0),
        "started, then aborted at the server"
    );
}

/// Two S3 gateways of one SeaweedFS filer are two endpoints of one store: each rank's requests go
/// to endpoint `rank mod 2` (or each request to the next, `endpoint_spread: requests`), what one
/// writes the other reads, each endpoint's requests are counted, and a request to a gateway that
/// died fails naming it.
#[test]
fn s3_spreads_requests_over_endpoints_and_names_a_dead_one() {
    let server = server("s3-endpoints");
    let mut gateway = server
        .start_gateway()
        .unwrap_or_else(|e| panic!("the second gateway did not start: {e}"));
    let (first, second) = (server.endpoint(), gateway.endpoint());
    let both = format!("endpoint_urls=[{first},{second}]");
    let s3 = storage(&first, "endpoints", &[&both]);
    s3.check_access(true).unwrap();
    let counted = |s3: &S3Storage| -> Vec<(String, u64)> {
        let counts = s3.request_counts().unwrap();
        counts
            .endpoints
            .iter()
            .map(|e| (e.url.clone(), e.all.requests))
            .collect()
    };
    assert_eq!(counted(&s3), [(first.clone(), 1), (second.clone(), 1)]);
    for rank in 0..3 {
        crate::storage::mark_rank(rank);
        s3.put(&format!("rank{rank}.bin"), &[rank as u8; 1000])
            .unwrap();
    }
    assert_eq!(counted(&s3), [(first.clone(), 3), (second.clone(), 2)]);
    // One store: rank 1's object, written through the second gateway, read through the first.
    crate::storage::mark_rank(0);
    let mut buf = IoBuffer::new();
    assert_eq!(
        s3.read_all("rank1.bin", &mut buf).unwrap().bytes(&buf),
        [1; 1000]
    );

    let spread = storage(&first, "endpoints", &[&both, "endpoint_spread=requests"]);
    for _ in 0..10 {
        spread.read_all("rank2.bin", &mut buf).unwrap();
    }
    assert_eq!(counted(&spread), [(first.clone(), 5), (second.clone(), 5)]);

    gateway.kill();
    let short = storage(
        &first,
        "endpoints",
        &[&both, "s3_max_attempts=2", "request_timeout=2"],
    );
    crate::storage::mark_rank(0);
    short.read_all("rank0.bin", &mut buf).unwrap();
    crate::storage::mark_rank(1);
    let error = short
        .read_all("rank0.bin", &mut buf)
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!(
            "GET s3://endpoints/prefix/of/run/rank0.bin at endpoint {second}: connection"
        )),
        "{error}"
    );
    let counts = short.request_counts().unwrap();
    assert_eq!(
        counts
            .endpoints
            .iter()
            .map(|e| (e.all.requests, e.all.failures))
            .collect::<Vec<_>>(),
        [(1, 0), (0, 1)]
    );
    let dead = short.check_access(false).unwrap_err().to_string();
    assert!(dead.contains(&format!("at {second}/")), "{dead}");
}
