//! What every [`Storage`] backend must do, as one suite each backend's tests run against it (as
//! object_store's integration tests do): the bytes written are the bytes read, whole, in ranges
//! and in pieces; ranges past the end come back short, never wrong; absent objects say so; a
//! listing names what was written; deletes delete. Backends differ in how they move the bytes
//! (O_DIRECT blocks, evictions), never in what a caller gets.

use std::collections::BTreeMap;
use std::io;
use std::ops::ControlFlow;

use super::{EntryKind, IoBuffer, Storage, Window};

/// Bytes that differ from offset to offset, so a range read from the wrong place shows.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// Runs every check against `storage`, which must start empty; `name` says which backend
/// failed. Leaves the objects it wrote deleted.
pub(crate) fn run(name: &str, storage: &dyn Storage) {
    let small = pattern(1000, 1);
    let large = pattern(3 * 4096 + 123, 2);
    storage.put("a/small.bin", &small).unwrap();
    // Written in pieces of uneven sizes, through the streaming writer.
    let mut writer = storage.create("a/b/large.bin").unwrap();
    for piece in large.chunks(5000) {
        writer.write(piece).unwrap();
    }
    writer.finish().unwrap();
    storage.put("empty.bin", &[]).unwrap();

    let mut buf = IoBuffer::new();
    for (key, bytes) in [
        ("a/small.bin", &small),
        ("a/b/large.bin", &large),
        ("empty.bin", &Vec::new()),
    ] {
        let read = storage.read_all(key, &mut buf).unwrap();
        assert_eq!(read.bytes(&buf), &bytes[..], "{name}: read_all {key}");
        assert!(read.fetched >= bytes.len() as u64, "{name}: {key} fetched");
        assert_eq!(
            storage.size(key).unwrap(),
            bytes.len() as u64,
            "{name}: size {key}"
        );
        assert!(storage.exists(key).unwrap(), "{name}: exists {key}");
    }

    // Ranges: inside, across block edges, ending past the end, starting past it, empty.
    let len = large.len() as u64;
    for (offset, want) in [
        (0, 10),
        (4090, 20),
        (4096, 4096),
        (len - 5, 100),
        (len, 10),
        (len + 7, 10),
        (17, 0),
    ] {
        let read = storage
            .read_range("a/b/large.bin", offset, want, &mut buf)
            .unwrap();
        let start = (offset as usize).min(large.len());
        let end = (start + want).min(large.len());
        assert_eq!(
            read.bytes(&buf),
            &large[start..end],
            "{name}: range {offset}+{want}"
        );
    }

    // The tail, and the size with it: shorter than the object, longer, of an empty one.
    for (key, bytes) in [("a/b/large.bin", &large), ("a/small.bin", &small)] {
        for want in [1, 100, 5000] {
            let (read, size) = storage.read_tail(key, want, &mut buf).unwrap();
            assert_eq!(size, bytes.len() as u64, "{name}: tail size {key}");
            let from = bytes.len() - want.min(bytes.len());
            assert_eq!(
                read.bytes(&buf),
                &bytes[from..],
                "{name}: tail {want} of {key}"
            );
        }
    }
    let (read, size) = storage.read_tail("empty.bin", 8, &mut buf).unwrap();
    assert_eq!((read.len, size), (0, 0), "{name}: tail of an empty object");

    // Several ranges together, handed over in order, whatever the window.
    let ranges: Vec<(u64, usize)> = (0..13).map(|i| (i * 997 % len, 700)).collect();
    for window in [
        Window { reads: 1, bytes: 0 },
        Window {
            reads: 4,
            bytes: 3000,
        },
        Window {
            reads: 16,
            bytes: 1 << 20,
        },
    ] {
        let mut seen = Vec::new();
        storage
            .read_ranges(
                "a/b/large.bin",
                &ranges,
                window,
                &mut buf,
                &mut |i, bytes, _| {
                    let (offset, want) = ranges[i];
                    let start = offset as usize;
                    let end = (start + want).min(large.len());
                    assert_eq!(bytes, &large[start..end], "{name}: ranges[{i}] {window:?}");
                    seen.push(i);
                    ControlFlow::Continue(())
                },
            )
            .unwrap();
        assert_eq!(seen, (0..ranges.len()).collect::<Vec<_>>(), "{name}: order");
    }

    // Read whole, in order, in pieces of the caller's size.
    let mut reader = storage.open_sequential("a/b/large.bin").unwrap();
    assert_eq!(reader.size(), len, "{name}: sequential size");
    let mut whole = Vec::new();
    loop {
        let n = reader.read_next(&mut buf, 4096).unwrap();
        if n == 0 {
            break;
        }
        whole.extend_from_slice(&buf.as_slice()[..n]);
    }
    assert_eq!(whole, large, "{name}: sequential bytes");

    // What is absent says so.
    let missing = storage.read_all("a/none.bin", &mut buf).unwrap_err();
    assert_eq!(
        missing.kind(),
        io::ErrorKind::NotFound,
        "{name}: read absent"
    );
    assert!(
        !storage.exists("a/none.bin").unwrap(),
        "{name}: exists absent"
    );
    assert_eq!(
        storage.size("a/none.bin").unwrap_err().kind(),
        io::ErrorKind::NotFound,
        "{name}: size absent"
    );

    // Listings name what is directly below a folder.
    storage.make_folder("c/empty").unwrap();
    let mut listed = BTreeMap::new();
    storage
        .list_dir("a", &mut |entry, kind| {
            listed.insert(entry.to_string(), kind);
        })
        .unwrap();
    assert_eq!(
        listed,
        BTreeMap::from([
            ("small.bin".to_string(), EntryKind::File),
            ("b".to_string(), EntryKind::Folder),
        ]),
        "{name}: list a"
    );

    // Replacing an object replaces all of it; evicting one leaves its bytes.
    storage.put("a/small.bin", &small[..10]).unwrap();
    storage.evict("a/small.bin").unwrap();
    let read = storage.read_all("a/small.bin", &mut buf).unwrap();
    assert_eq!(read.bytes(&buf), &small[..10], "{name}: replaced");

    for key in ["a/small.bin", "a/b/large.bin", "empty.bin"] {
        assert!(storage.delete(key).unwrap(), "{name}: delete {key}");
        assert!(!storage.exists(key).unwrap(), "{name}: deleted {key}");
        assert!(!storage.delete(key).unwrap(), "{name}: delete again {key}");
    }
}

/// Conditional writes, where a backend has them ([`Storage::put_if`]: object stores), as S3
/// defines them; a backend without them says `Unsupported` for each, never a silent write.
pub(crate) fn conditional_writes(name: &str, storage: &dyn Storage, has_them: bool) {
    use super::Condition::{Absent, Matches};
    let key = "cond/lease";
    if !has_them {
        let unsupported = |r: io::Result<()>| r.unwrap_err().kind() == io::ErrorKind::Unsupported;
        assert!(
            unsupported(storage.put_if(key, b"x", Absent).map(drop)),
            "{name}"
        );
        assert!(unsupported(storage.get_tagged(key, 10).map(drop)), "{name}");
        assert!(unsupported(storage.delete_if(key, "t").map(drop)), "{name}");
        assert!(!storage.exists(key).unwrap(), "{name}: nothing written");
        return;
    }
    assert_eq!(
        storage.get_tagged(key, 100).unwrap(),
        None,
        "{name}: absent"
    );
    let first = storage
        .put_if(key, b"one", Absent)
        .unwrap()
        .expect("written");
    assert_eq!(
        storage.put_if(key, b"two", Absent).unwrap(),
        None,
        "{name}: present"
    );
    let (bytes, tag) = storage.get_tagged(key, 100).unwrap().unwrap();
    assert_eq!(
        (&bytes[..], &tag),
        (&b"one"[..], &first),
        "{name}: unchanged"
    );
    assert_eq!(
        storage.put_if(key, b"three", Matches("\"stale\"")).unwrap(),
        None,
        "{name}: a stale tag"
    );
    let second = storage
        .put_if(key, b"four", Matches(&first))
        .unwrap()
        .expect("replaced");
    assert_ne!(second, first, "{name}: a new version, a new tag");
    assert!(
        storage.get_tagged(key, 2).is_err(),
        "{name}: over the limit"
    );
    assert!(
        !storage.delete_if(key, &first).unwrap(),
        "{name}: delete with a stale tag"
    );
    assert!(storage.exists(key).unwrap(), "{name}: not deleted");
    assert!(
        storage.delete_if(key, &second).unwrap(),
        "{name}: delete with its tag"
    );
    assert!(!storage.exists(key).unwrap(), "{name}: deleted");
}

/// An object store's write in parts, with `part_size` 5 MiB: 12 MiB + 3 bytes written in odd
/// pieces go out as 3 parts (S3's parts, Azure's blocks, GCS's chunks) carrying every byte, with
/// `control` requests to start, commit or complete them (counted as `multipart`), and read back
/// whole; a writer dropped midway leaves no object; a ranged read's bytes are counted once.
/// Returns the object written (`big.bin`), for the store's own checks.
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
pub(crate) fn uploads_in_parts(name: &str, storage: &dyn Storage, control: u64) -> Vec<u8> {
    use super::RequestKind;
    let big: Vec<u8> = (0..(12 << 20) + 3).map(|i: u32| (i % 251) as u8).collect();
    let before = storage
        .request_counts()
        .expect("an object store counts its requests");
    let mut object = storage.create("big.bin").unwrap();
    for piece in big.chunks(777_777) {
        object.write(piece).unwrap();
    }
    object.finish().unwrap();
    let mut buf = IoBuffer::new();
    let read = storage.read_all("big.bin", &mut buf).unwrap();
    assert!(read.bytes(&buf) == big, "{name}: read back whole");
    let after = storage.request_counts().unwrap();
    let count = |kind: RequestKind| {
        let (a, b) = (after.of(kind), before.of(kind));
        (a.requests - b.requests, a.bytes - b.bytes)
    };
    assert_eq!(
        count(RequestKind::PartUpload),
        (3, big.len() as u64),
        "{name}: 3 parts, every byte"
    );
    assert_eq!(count(RequestKind::Multipart).0, control, "{name}: control");

    let mut partial = storage.create("partial.bin").unwrap();
    partial.write(&big).unwrap();
    drop(partial);
    assert!(
        !storage.exists("partial.bin").unwrap(),
        "{name}: a dropped writer leaves no object"
    );

    let before = storage.request_counts().unwrap();
    storage
        .read_range("big.bin", 5 << 20, 1000, &mut buf)
        .unwrap();
    assert!(
        buf.as_slice()[..1000] == big[5 << 20..(5 << 20) + 1000],
        "{name}"
    );
    let after = storage.request_counts().unwrap();
    let ranged = |c: &super::RequestCounts| c.of(RequestKind::RangedGet).bytes;
    assert_eq!(
        ranged(&after) - ranged(&before),
        1000,
        "{name}: counted once"
    );
    big
}

/// An object store's large write (a checkpoint save): the object written in pieces of any size
/// goes out in parts of `part` bytes (S3's parts, Azure's blocks), more than one in flight at once
/// at the server (`server_peak`: a proxy's peak, reset by `reset_peak` before the write) and no
/// more than `depth` at the client, and is stored whole, in order. Leaves the object deleted.
#[cfg(any(feature = "s3", feature = "azure"))]
pub(crate) fn writes_parts_together(
    name: &str,
    storage: &dyn Storage,
    (part, depth): (usize, usize),
    reset_peak: &dyn Fn(),
    server_peak: &dyn Fn() -> usize,
) {
    let key = "together.bin";
    let object = pattern(6 * part + 1000, 9);
    reset_peak();
    let before = storage
        .request_counts()
        .expect("an object store counts its requests");
    let mut writer = storage.create(key).unwrap();
    for piece in object.chunks(1 << 20) {
        writer.write(piece).unwrap();
    }
    writer.finish().unwrap();
    let after = storage.request_counts().unwrap();
    let parts = |c: &super::RequestCounts| c.of(super::RequestKind::PartUpload).requests;
    assert_eq!(
        parts(&after) - parts(&before),
        7,
        "{name}: 6 parts of {part} bytes and the last 1000"
    );
    let peak = server_peak();
    assert!(peak >= 2, "{name}: {peak} parts in flight at once");
    assert!(
        after.peak_in_flight as usize <= depth,
        "{name}: {} in flight at the client",
        after.peak_in_flight
    );
    let mut buf = IoBuffer::new();
    let read = storage.read_all(key, &mut buf).unwrap();
    assert!(read.bytes(&buf) == object, "{name}: stored whole, in order");
    storage.delete(key).unwrap();
}

/// An object store's whole-object read in order (a checkpoint load): the object's bytes, in
/// order, fetched as ranged GETs of `part` bytes (whatever the pieces asked for), more than one
/// in flight at once at the server (`server_peak`: a proxy's peak, reset by `reset_peak` before
/// the read) and no more than `depth` at the client. Leaves the object deleted.
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
pub(crate) fn reads_in_order_ranges_ahead(
    name: &str,
    storage: &dyn Storage,
    (part, depth): (usize, usize),
    reset_peak: &dyn Fn(),
    server_peak: &dyn Fn() -> usize,
) {
    let key = "ahead.bin";
    let object = pattern(4 * part + 1000, 5);
    storage.put(key, &object).unwrap();
    reset_peak();
    let before = storage
        .request_counts()
        .expect("an object store counts its requests");
    let mut reader = storage.open_sequential(key).unwrap();
    assert_eq!(reader.size(), object.len() as u64, "{name}: its size");
    let (mut buf, mut read) = (IoBuffer::new(), Vec::new());
    loop {
        let n = reader.read_next(&mut buf, 3 << 20).unwrap();
        if n == 0 {
            break;
        }
        read.extend_from_slice(&buf.as_slice()[..n]);
    }
    drop(reader);
    assert!(read == object, "{name}: the pieces, in order");
    let after = storage.request_counts().unwrap();
    let ranged = |c: &super::RequestCounts| {
        let k = c.of(super::RequestKind::RangedGet);
        (k.requests, k.bytes)
    };
    let (requests, bytes) = ranged(&after);
    assert_eq!(
        (requests - ranged(&before).0, bytes - ranged(&before).1),
        (5, object.len() as u64),
        "{name}: 4 ranges of {part} bytes and the last 1000"
    );
    let peak = server_peak();
    assert!(peak >= 2, "{name}: {peak} ranges in flight at once");
    assert!(
        after.peak_in_flight as usize <= depth,
        "{name}: {} in flight at the client",
        after.peak_in_flight
    );
    storage.delete(key).unwrap();
}
