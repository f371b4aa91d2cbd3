//! The Azure backend against a real Blob server (Azurite, started here on a free port): the
//! conformance suite every backend passes, its conditional writes, block uploads, paginated
//! listings, retries through a proxy that injects faults, refused credentials, a missing
//! container.

use super::*;
use crate::config::tests::resolve;
use crate::storage::WriteChecks;

// Beside each store's launcher, its own copy in each store's tests (built with or without the
// others).
#[path = "../../../tests/common/azurite.rs"]
#[allow(dead_code)] // what only the end-to-end tests use
mod azurite;
#[path = "../../../tests/common/watched.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod watched;
// The S3 tests include it too when both stores are built: each its own copy, as each is built
// without the other.
#[path = "../../../tests/common/fault_proxy.rs"]
#[allow(dead_code, clippy::duplicate_mod)]
mod fault_proxy;

use azurite::Azurite;
use fault_proxy::{Fault, FaultPlan, FaultProxy};

fn server(name: &str) -> Azurite {
    let parent = crate::storage::scratch_dir(name);
    Azurite::start(&parent).unwrap_or_else(|e| panic!("Azurite did not start: {e}"))
}

/// A storage of `container` at `endpoint`, with the development account and `extra` options.
fn storage(endpoint: &str, container: &str, extra: &[&str]) -> AzureStorage {
    let mut words = vec!["workload=default".to_string()];
    words.extend(azurite::storage_words(endpoint, container));
    words.extend(
        extra
            .iter()
            .map(|w| format!("++workload.storage.storage_options.{w}")),
    );
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let config = resolve(&words).unwrap();
    AzureStorage::for_folder(&config, "prefix/of/run", 4).unwrap()
}

/// An account SAS token signed with `key`: every service, resource type and permission, for
/// http too (Azurite), until 2099.
fn sas(key: &[u8]) -> String {
    use base64::Engine;
    use hmac::{Hmac, KeyInit, Mac};
    let (version, expiry) = ("2021-12-02", "2099-01-01T00:00:00Z");
    let text = format!(
        "{}\nrwdlac\nb\nsco\n\n{expiry}\n\nhttps,http\n{version}\n\n",
        azurite::ACCOUNT
    );
    let mut mac = <Hmac<sha2::Sha256> as KeyInit>::new_from_slice(key).unwrap();
    mac.update(text.as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!(
        "sv={version}&ss=b&srt=sco&sp=rwdlac&se={}&spr=https,http&sig={}",
        encode(expiry, true),
        encode(&signature, true)
    )
}

/// The development account's SAS token (signed with its key).
fn account_sas() -> String {
    use base64::Engine;
    let key = base64::engine::general_purpose::STANDARD
        .decode(azurite::ACCOUNT_KEY)
        .unwrap();
    sas(&key)
}

/// A storage of `folder` in `container` at `endpoint` asked with the SAS token `token` (no key:
/// requests are not signed, only their URLs), one attempt per request.
fn storage_with_sas(endpoint: &str, container: &str, token: &str, folder: &str) -> AzureStorage {
    let words = [
        "workload=default".to_string(),
        "++workload.storage.storage_type=azure".to_string(),
        format!("++workload.storage.storage_root={container}"),
        format!("++workload.storage.storage_options.endpoint_url={endpoint}"),
        format!(
            "++workload.storage.storage_options.account_name={}",
            azurite::ACCOUNT
        ),
        "++workload.storage.storage_options.s3_max_attempts=1".to_string(),
    ];
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let mut config = resolve(&words).unwrap();
    config.storage.options.sas_token = Some(token.to_string());
    AzureStorage::for_folder(&config, folder, 2).unwrap()
}

#[test]
fn azure_passes_the_conformance_suite_and_uploads_in_checked_blocks() {
    let server = server("azure-conformance");
    let azure = storage(&server.endpoint(), "conformance", &["part_size=5242880"]);
    azure.check_access(true).unwrap();
    crate::storage::conformance::run("azure", &azure);
    crate::storage::conformance::conditional_writes("azure", &azure, true);

    // The block list; a writer dropped midway commits nothing: no blob appears.
    let big = crate::storage::conformance::uploads_in_parts("azure", &azure, 1);
    // And a blob there stays whole.
    let mut partial = azure.create("big.bin").unwrap();
    partial.write(&big[..(11 << 20)]).unwrap();
    drop(partial);
    assert_eq!(azure.size("big.bin").unwrap(), big.len() as u64);

    // Names with characters a URL must encode, and the describe that names them.
    let mut buf = IoBuffer::new();
    let odd = "odd name/with spaces+plus&amp%.bin";
    azure.put(odd, b"odd").unwrap();
    assert_eq!(azure.read_all(odd, &mut buf).unwrap().bytes(&buf), b"odd");
    assert_eq!(
        azure.describe(odd),
        format!("az://devstoreaccount1/conformance/prefix/of/run/{odd}")
    );
    let mut listed = Vec::new();
    azure
        .list_dir("odd name", &mut |name, kind| {
            listed.push((name.to_string(), kind))
        })
        .unwrap();
    assert_eq!(
        listed,
        [("with spaces+plus&amp%.bin".to_string(), EntryKind::File)]
    );
}

/// A checkpoint save sends a large blob's blocks together, up to `parts_in_flight`, and commits
/// them in order; a checkpoint load reads a blob in `part_size` ranges, `parts_in_flight` of them
/// fetched ahead together (both seen at the server through a proxy that counts what it answers
/// at once).
#[test]
fn azure_writes_blocks_together_and_reads_ranges_ahead() {
    let server = server("azure-ahead");
    let proxy = FaultProxy::start(server.addr(), FaultPlan::default()).unwrap();
    let azure = storage(
        &proxy.endpoint(),
        "ahead",
        &["part_size=5242880", "parts_in_flight=3"],
    );
    azure.check_access(true).unwrap();
    crate::storage::conformance::writes_parts_together(
        "azure",
        &azure,
        (5 << 20, 3),
        &|| proxy.reset_peak(),
        &|| proxy.peak_in_flight(),
    );
    crate::storage::conformance::reads_in_order_ranges_ahead(
        "azure",
        &azure,
        (5 << 20, 3),
        &|| proxy.reset_peak(),
        &|| proxy.peak_in_flight(),
    );
}

/// Every blob written is checked before it counts: a Put Blob by the `Content-MD5` Azure
/// answers with (the MD5 of what it stored), each block likewise, a block blob's size once
/// committed (a Get Blob Properties); with `verify_writes: size`, a Put Blob's size too. A Put
/// Blob a proxy damages (Azurite stores a body of the same length, half of it inverted, and
/// answers 201) is caught and written again, and so is a block, which Azure refuses as arrived
/// otherwise than its `Content-MD5` says; a blob damaged every time fails, naming it and both
/// digests. (A truncated body cannot reach Azure: SharedKey signs its Content-Length, and the
/// request is refused, 403.)
#[test]
fn azure_checks_every_write_and_writes_a_damaged_one_again() {
    let server = server("azure-verified");
    let pattern = |len: usize| -> Vec<u8> { (0..len).map(|i| (i * 7 % 253) as u8).collect() };
    let (small, big) = (pattern(100 << 10), pattern((12 << 20) + 3));
    let setup = storage(&server.endpoint(), "verified", &[]);
    setup.check_access(true).unwrap();
    for (verify, heads) in [("etag", 1), ("size", 2)] {
        let azure = storage(
            &server.endpoint(),
            "verified",
            &["part_size=5242880", &format!("verify_writes={verify}")],
        );
        azure.put("small.bin", &small).unwrap();
        azure.put("big.bin", &big).unwrap();
        let counts = azure.request_counts().unwrap();
        let checks = WriteChecks {
            verified: 2,
            ..WriteChecks::default()
        };
        assert_eq!(counts.writes, checks, "{verify}");
        assert_eq!(counts.of(RequestKind::Head).requests, heads, "{verify}");
    }

    // Damaged once (the retry is spared): caught, written again, stored whole.
    for (what, line, data, mismatches) in [
        (
            "a Put Blob",
            "PUT /devstoreaccount1/verified/prefix/of/run/once.bin ",
            &small,
            1,
        ),
        ("every block", "comp=block&", &big, 3),
    ] {
        let proxy = FaultProxy::start(
            server.addr(),
            FaultPlan::matching(line, Fault::Corrupt).sparing_retries(),
        )
        .unwrap();
        let azure = storage(&proxy.endpoint(), "verified", &["part_size=5242880"]);
        azure.put("once.bin", data).unwrap();
        assert_eq!(proxy.injected(Fault::Corrupt), mismatches, "{what}");
        let checks = WriteChecks {
            verified: 1,
            mismatches: mismatches as u64,
            rewrites: mismatches as u64,
        };
        assert_eq!(azure.request_counts().unwrap().writes, checks, "{what}");
        let mut buf = IoBuffer::new();
        assert!(setup.read_all("once.bin", &mut buf).unwrap().bytes(&buf) == &data[..]);
    }

    // Damaged every time: the write fails after its attempts, naming what was stored; checked
    // by size only, the damage passes (what `verify_writes: size` gives up).
    let proxy = FaultProxy::start(
        server.addr(),
        FaultPlan::matching(
            "PUT /devstoreaccount1/verified/prefix/of/run/always.bin ",
            Fault::Corrupt,
        ),
    )
    .unwrap();
    for verify in ["etag", "size"] {
        let azure = storage(
            &proxy.endpoint(),
            "verified",
            &["s3_max_attempts=3", &format!("verify_writes={verify}")],
        );
        let written = azure.put("always.bin", &small);
        if verify == "size" {
            written.unwrap();
            continue;
        }
        let error = written.unwrap_err().to_string();
        assert!(
            error.contains(
                "az://devstoreaccount1/verified/prefix/of/run/always.bin holds 102400 bytes \
                 after a write of 102400 bytes (stored "
            ) && error.contains("after 3 writes"),
            "{verify}: {error}"
        );
        let checks = WriteChecks {
            verified: 0,
            mismatches: 3,
            rewrites: 2,
        };
        assert_eq!(azure.request_counts().unwrap().writes, checks, "{verify}");
    }
}

#[test]
fn azure_lists_a_folder_page_by_page() {
    let server = server("azure-pages");
    let azure = storage(&server.endpoint(), "pages", &[]).with_list_page(7);
    azure.check_access(true).unwrap();
    let mut expected = std::collections::BTreeMap::new();
    for i in 0..20 {
        let name = format!("f{i:02}.bin");
        azure.put(&format!("split/{name}"), b"x").unwrap();
        expected.insert(name, EntryKind::File);
    }
    for sub in ["0", "1", "2"] {
        azure.put(&format!("split/{sub}/deeper.bin"), b"x").unwrap();
        expected.insert(sub.to_string(), EntryKind::Folder);
    }
    let before = azure
        .request_counts()
        .unwrap()
        .of(RequestKind::List)
        .requests;
    let mut listed = std::collections::BTreeMap::new();
    azure
        .list_dir("split", &mut |name, kind| {
            assert!(
                listed.insert(name.to_string(), kind).is_none(),
                "{name} twice"
            );
        })
        .unwrap();
    assert_eq!(listed, expected);
    let pages = azure
        .request_counts()
        .unwrap()
        .of(RequestKind::List)
        .requests
        - before;
    // 23 entries (20 blobs and 3 prefixes) at 7 a page.
    assert_eq!(pages, 4);
}

#[test]
fn azure_retries_503s_and_resets_and_gives_up_naming_the_blob() {
    let server = server("azure-faults");
    // Every 3rd request answered 503, every 5th reset (the 15th: a 503).
    let proxy = FaultProxy::start(
        server.addr(),
        FaultPlan::every(3, Fault::ServiceUnavailable)
            .and_every(5, Fault::Reset)
            .sparing_retries(),
    )
    .unwrap();
    let azure = storage(&proxy.endpoint(), "faults", &["s3_max_attempts=10"]);
    azure.check_access(true).unwrap();
    let mut buf = IoBuffer::new();
    for i in 0..20u8 {
        let key = format!("o{i}");
        azure.put(&key, &[i; 3000]).unwrap();
        assert_eq!(
            azure.read_all(&key, &mut buf).unwrap().bytes(&buf),
            &[i; 3000]
        );
    }
    let counts = azure.request_counts().unwrap();
    let retries: u64 = counts.kinds.iter().map(|k| k.retries).sum();
    assert_eq!(retries as usize, proxy.faults(), "one retry per fault");
    assert!(proxy.injected(Fault::ServiceUnavailable) > 0 && proxy.injected(Fault::Reset) > 0);
    assert_eq!(counts.of(RequestKind::Get).requests, 20);
    assert_eq!(counts.of(RequestKind::Get).bytes, 20 * 3000);

    let failing = FaultProxy::start(
        server.addr(),
        FaultPlan::every(1, Fault::ServiceUnavailable),
    )
    .unwrap();
    let through = storage(&failing.endpoint(), "faults", &["s3_max_attempts=3"]);
    let text = through.read_all("o1", &mut buf).unwrap_err().to_string();
    assert!(
        text.contains("GET az://devstoreaccount1/faults/prefix/of/run/o1")
            && text.contains("HTTP 503 SlowDown")
            && text.contains("after 3 attempts"),
        "{text}"
    );
    let counts = through.request_counts().unwrap();
    assert_eq!(counts.of(RequestKind::Get).failures, 1);
    assert_eq!(counts.of(RequestKind::Get).retries, 2);
}

#[test]
fn azure_does_not_hang_on_a_server_that_stops_answering() {
    let server = server("azure-stalled");
    let patient = storage(&server.endpoint(), "stalled", &[]);
    patient.check_access(true).unwrap();
    patient.put("k", b"bytes").unwrap();
    let azure = storage(
        &server.endpoint(),
        "stalled",
        &["request_timeout=0.5", "s3_max_attempts=2"],
    );
    server.pause();
    let started = std::time::Instant::now();
    let error = azure.read_all("k", &mut IoBuffer::new()).unwrap_err();
    let took = started.elapsed();
    server.resume();
    assert!(
        error
            .to_string()
            .contains("az://devstoreaccount1/stalled/prefix/of/run/k")
            && error.to_string().contains("timeout"),
        "{error}"
    );
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    assert_eq!(error.kind(), io::ErrorKind::TimedOut);
}

#[test]
fn refused_credentials_and_missing_containers_are_usage_errors() {
    let server = server("azure-credentials");
    let endpoint = server.endpoint();
    let good = storage(&endpoint, "present", &[]);
    let missing = good.check_access(false).unwrap_err();
    assert_eq!(missing.exit_code(), 2);
    assert!(
        missing
            .to_string()
            .contains("container 'present' does not exist"),
        "{missing}"
    );
    good.check_access(true).unwrap();
    good.check_access(false).unwrap();
    // Another process made it meanwhile: taken as made.
    good.check_access(true).unwrap();
    let wrong = "account_key=d3Jvbmcga2V5IG9mIHRoZSByaWdodCBsZW5ndGggZm9yIGF6dXJl";
    let bad = storage(&endpoint, "present", &[wrong, "s3_max_attempts=1"]);
    let error = bad.check_access(false).unwrap_err();
    assert_eq!(error.exit_code(), 2, "{error}");
    assert!(
        error.to_string().contains("refused these credentials")
            && error.to_string().contains("AuthorizationFailure"),
        "{error}"
    );
}

/// A lease on a folder of the container: one holder at a time, named to the next; deleted when
/// let go; an expired one taken over.
#[test]
fn a_lease_holds_a_folder_of_a_container_for_one_run_at_a_time() {
    use crate::storage::lease::{Lease, LEASE_OBJECT};
    let server = server("azure-lease");
    let azure: Arc<dyn Storage> = Arc::new(storage(&server.endpoint(), "lease", &[]));
    azure.check_access(true).unwrap();
    let Ok(first) = Lease::take(Arc::clone(&azure), "generating", None).unwrap() else {
        panic!("refused");
    };
    let Err(held) = Lease::take(Arc::clone(&azure), "generating", None).unwrap() else {
        panic!("a second holder");
    };
    assert!(held.holder.starts_with("generating, process "), "{held:?}");
    first.check().unwrap();
    drop(first);
    assert!(!azure.exists(LEASE_OBJECT).unwrap(), "let go: deleted");
    azure
        .put(
            LEASE_OBJECT,
            b"dlio-rs lease: generating, process 1 on gone, since then\ntoken: 0\nuntil: 1\n",
        )
        .unwrap();
    let Ok(second) = Lease::take(Arc::clone(&azure), "generating", None).unwrap() else {
        panic!("an expired lease refused");
    };
    azure
        .put(
            LEASE_OBJECT,
            b"dlio-rs lease: generating, process 2 on x, since now\ntoken: 1\nuntil: 99999999999\n",
        )
        .unwrap();
    let lost = second.check().unwrap_err().to_string();
    assert!(lost.contains("lost the lease"), "{lost}");
    drop(second);
    assert!(azure.exists(LEASE_OBJECT).unwrap(), "the other's stays");
}

/// An account SAS (signed here with the development key, as `az storage account
/// generate-sas` makes one) instead of the key: the requests carry it and Azurite takes them; a
/// token with a wrong signature is refused as credentials.
#[test]
fn a_sas_token_takes_the_place_of_the_key() {
    let server = server("azure-sas");
    let with_sas = |token: String| storage_with_sas(&server.endpoint(), "shared", &token, "run");
    let azure = with_sas(account_sas());
    azure.check_access(true).unwrap();
    azure.put("k", b"shared").unwrap();
    let mut buf = IoBuffer::new();
    assert_eq!(
        azure.read_all("k", &mut buf).unwrap().bytes(&buf),
        b"shared"
    );
    let mut listed = Vec::new();
    azure
        .list_dir("", &mut |name, _| listed.push(name.to_string()))
        .unwrap();
    assert_eq!(listed, ["k"]);
    let forged = with_sas(sas(b"not the key"));
    let error = forged.check_access(false).unwrap_err();
    assert_eq!(error.exit_code(), 2, "{error}");
    assert!(
        error.to_string().contains("refused these credentials"),
        "{error}"
    );
}
