//! The local backend against real files in a scratch folder: the conformance suite every backend
//! passes (buffered, with O_DIRECT, evicting), reads and writes with and without O_DIRECT around
//! block and buffer sizes, O_DIRECT refused, ranges read together, eviction from the page cache
//! (checked page by page with `mincore`), held files, and the accounting each file system gets.

use std::ops::ControlFlow;

use super::direct::DIRECT_WRITE_BYTES;
use super::*;
use crate::storage::FILES_HELD;

#[test]
fn passes_the_conformance_suite_buffered_direct_and_evicting() {
    for (name, options) in [
        ("buffered", LocalOptions::default()),
        ("O_DIRECT", DIRECT),
        (
            "evicting",
            LocalOptions {
                odirect: false,
                evict_after_read: true,
            },
        ),
    ] {
        let dir = scratch_dir(&format!("conformance-{}", name.to_lowercase()));
        super::super::conformance::run(name, &LocalFs::with_options(&dir, options));
        super::super::conformance::conditional_writes(
            name,
            &LocalFs::with_options(&dir, options),
            false,
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
use crate::storage::scratch_dir;

/// Bytes that differ from block to block, so that a misplaced block shows.
fn pattern(len: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ len as u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

const DIRECT: LocalOptions = LocalOptions {
    odirect: true,
    evict_after_read: false,
};

#[test]
fn put_writes_whole_files_that_read_all_list_dir_and_delete_see() {
    let dir = scratch_dir("local");
    let storage = LocalFs::new(&dir);
    storage.put("a/b/c.bin", b"hello").unwrap();
    storage.put("a/d.bin", b"hi").unwrap();
    let mut buf = IoBuffer::new();
    assert_eq!(storage.read_all("a/b/c.bin", &mut buf).unwrap().len, 5);
    assert_eq!(buf.as_slice(), b"hello");
    let mut listed = Vec::new();
    storage
        .list_dir("a", &mut |name, kind| listed.push((name.to_string(), kind)))
        .unwrap();
    listed.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        listed,
        [
            ("b".to_string(), EntryKind::Folder),
            ("d.bin".to_string(), EntryKind::File)
        ]
    );
    assert!(storage.exists("a/d.bin").unwrap());
    assert!(!storage.exists("a/e.bin").unwrap());
    storage.put("a/d.bin", b"x").unwrap();
    assert_eq!(storage.read_all("a/d.bin", &mut buf).unwrap().len, 1);
    assert!(storage.delete("a/d.bin").unwrap());
    assert!(!storage.delete("a/d.bin").unwrap());
    assert!(storage.read_all("a/e.bin", &mut buf).is_err());
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn direct_reads_return_exactly_the_files_bytes_into_one_reused_buffer() {
    let dir = scratch_dir("odirect");
    let buffered = LocalFs::new(&dir);
    let direct = LocalFs::with_options(&dir, DIRECT);
    let sizes = [0, 1, 511, 4095, 4096, 4097, (1 << 20) + 3];
    for size in sizes {
        buffered
            .put(&format!("{size}.bin"), &pattern(size))
            .unwrap();
    }
    let mut direct_buf = IoBuffer::new();
    let mut buffered_buf = IoBuffer::new();
    let mut largest_allocation = None;
    // Ascending, then descending: the buffer serves a larger file after a smaller one and
    // the other way round.
    for size in sizes.into_iter().chain(sizes.into_iter().rev()) {
        let key = format!("{size}.bin");
        assert_eq!(direct.read_all(&key, &mut direct_buf).unwrap().len, size);
        assert_eq!(
            buffered.read_all(&key, &mut buffered_buf).unwrap().len,
            size
        );
        assert_eq!(direct_buf.as_slice(), buffered_buf.as_slice(), "{size}");
        assert_eq!(direct_buf.as_slice(), &pattern(size)[..], "{size}");
        let start = direct_buf.as_slice().as_ptr();
        if direct_buf.capacity() > 0 {
            assert_eq!(start as usize % IoBuffer::ALIGNMENT, 0);
        }
        if size == sizes[sizes.len() - 1] {
            largest_allocation = Some(start);
        } else if let Some(largest) = largest_allocation {
            assert_eq!(
                start, largest,
                "the buffer was reallocated for {size} bytes"
            );
        }
    }
    assert_eq!(
        direct_buf.capacity(),
        ((1 << 20) + 3usize).next_multiple_of(4096)
    );
    direct.check_direct_io("4097.bin").unwrap();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_refused_o_direct_says_what_to_set() {
    // procfs refuses O_DIRECT on open, as some FUSE and network file systems do.
    let proc = LocalFs::with_options("/proc", DIRECT);
    match proc.check_direct_io("version") {
        Err(Error::Usage(message)) => {
            assert!(
                message.starts_with(
                    "the file system of /proc/version refuses O_DIRECT (reader.odirect: True): "
                ),
                "{message}"
            );
            assert!(message.ends_with("; set ++workload.reader.odirect=False or use ++workload.reader.page_cache=evict_after_read"), "{message}");
        }
        other => panic!("O_DIRECT on /proc gave {other:?}"),
    }
    let error = proc.read_all("version", &mut IoBuffer::new()).unwrap_err();
    assert!(error.to_string().contains("refuses O_DIRECT"), "{error}");

    let path = Path::new("/data/x.npz");
    let refused = explain_direct_io_error(path, io::Error::from_raw_os_error(libc::EINVAL));
    assert!(is_direct_io_refusal(&refused));
    let failed = explain_direct_io_error(path, io::Error::from_raw_os_error(libc::EIO));
    assert!(!is_direct_io_refusal(&failed));
    assert_eq!(failed.raw_os_error(), Some(libc::EIO));
}

#[test]
fn other_o_direct_failures_are_run_errors_naming_the_file() {
    let dir = scratch_dir("odirect-missing");
    match LocalFs::with_options(&dir, DIRECT).check_direct_io("absent.npz") {
        Err(error @ Error::Io { .. }) => {
            assert_eq!(error.exit_code(), 1);
            assert_eq!(
                error.io_error().map(io::Error::kind),
                Some(io::ErrorKind::NotFound)
            );
            let message = error.to_string();
            assert!(
                message.contains(&*dir.join("absent.npz").to_string_lossy()),
                "{message}"
            )
        }
        other => panic!("a missing file gave {other:?}"),
    }
}

/// Pages of the file at `path` that are in the page cache.
fn resident_pages(path: &Path) -> usize {
    let file = File::open(path).unwrap();
    let len = file.metadata().unwrap().len() as usize;
    // SAFETY: sysconf only reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a new read-only shared mapping of an open file, which touches no page of it.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    let mut residency = vec![0u8; len.div_ceil(page)];
    // SAFETY: `map` covers `len` bytes and `residency` has a byte for each page of them.
    let status = unsafe { libc::mincore(map, len, residency.as_mut_ptr()) };
    // SAFETY: unmaps exactly the mapping made above, which nothing refers to any more.
    unsafe { libc::munmap(map, len) };
    assert_eq!(status, 0, "mincore: {}", io::Error::last_os_error());
    residency.iter().filter(|&&page| page & 1 != 0).count()
}

/// Ranges read together (through io_uring with O_DIRECT, read ahead together buffered) are
/// handed over in order, each the file's bytes, cut where the file ends, costing what a read
/// of it alone costs (its bytes, or with O_DIRECT its whole blocks), in memory bounded by the
/// window, however small; `Break` stops the reads.
#[test]
fn ranges_read_together_are_handed_over_in_order_as_the_files_bytes() {
    let dir = scratch_dir("ranges");
    let data = pattern(10 * 4096 + 100);
    let len = data.len();
    LocalFs::new(&dir).put("f.bin", &data).unwrap();
    LocalFs::new(&dir).sync().unwrap();
    // Overlapping, unordered, empty, cut by the end, past the end, and many (more than a
    // ring holds in flight).
    let mut ranges = vec![
        (5000, 3000),
        (0, 10),
        (40_000, 10_000),
        (4096, 8192),
        (41_000, 0),
        (50_000, 5),
        (100, 20_000),
    ];
    ranges.extend((0..40).map(|i| (i * 1000 + 7, 999 + i as usize * 100)));
    let largest = 20_000usize.next_multiple_of(4096) + 4096;
    let windows = [
        Window {
            reads: 8,
            bytes: 1 << 20,
        },
        // Wraps around its memory, and waits for room.
        Window {
            reads: 3,
            bytes: 9000,
        },
        Window { reads: 0, bytes: 0 },
    ];
    for (direct, evict_after_read) in [(false, false), (true, false), (false, true)] {
        let options = LocalOptions {
            odirect: direct,
            evict_after_read,
        };
        let storage = LocalFs::with_options(&dir, options);
        for (window, held) in windows.iter().flat_map(|w| [(w, false), (w, true)]) {
            if held {
                storage.hold("f.bin");
            }
            let what = format!("{options:?}, {window:?}, held {held}");
            let mut buf = IoBuffer::new();
            let mut handed = Vec::new();
            storage
                .read_ranges(
                    "f.bin",
                    &ranges,
                    *window,
                    &mut buf,
                    &mut |i, bytes, fetched| {
                        handed.push((i, bytes.to_vec(), fetched));
                        ControlFlow::Continue(())
                    },
                )
                .unwrap();
            assert_eq!(handed.len(), ranges.len(), "{what}");
            for ((&(offset, asked), (i, bytes, fetched)), at) in ranges.iter().zip(&handed).zip(0..)
            {
                let start = (offset as usize).min(len);
                let end = (start + asked).min(len);
                assert_eq!(*i, at, "{what}: in order");
                assert!(bytes[..] == data[start..end], "{what}: {asked} at {offset}");
                let cost = if direct {
                    let first = start / 4096 * 4096;
                    ((end - first).next_multiple_of(4096).min(len - first)).next_multiple_of(4096)
                } else {
                    end - start
                };
                assert_eq!(*fetched, cost as u64, "{what}: {asked} at {offset}");
            }
            let bound = window.bytes.max(largest);
            assert!(buf.capacity() <= bound.next_multiple_of(4096), "{what}");
            if evict_after_read {
                // Eviction drops whole pages, so the ends of ranges stay until the reader
                // moves off the file.
                storage.release("f.bin").unwrap();
                assert_eq!(resident_pages(&dir.join("f.bin")), 0, "{what}");
            }
            // Stopped after the fifth range: nothing more is handed over, and all is well.
            let mut count = 0;
            storage
                .read_ranges("f.bin", &ranges, *window, &mut buf, &mut |_, _, _| {
                    count += 1;
                    if count == 5 {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })
                .unwrap();
            assert_eq!(count, 5, "{what}");
            storage.release_all();
        }
    }
    let missing = LocalFs::new(&dir)
        .read_ranges(
            "none.bin",
            &ranges,
            windows[0],
            &mut IoBuffer::new(),
            &mut |_, _, _| ControlFlow::Continue(()),
        )
        .unwrap_err();
    assert_eq!(missing.kind(), io::ErrorKind::NotFound);
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn evict_after_read_leaves_no_page_of_the_file_cached() {
    let dir = scratch_dir("evict");
    let plain = LocalFs::new(&dir);
    let evicting = LocalFs::with_options(
        &dir,
        LocalOptions {
            odirect: false,
            evict_after_read: true,
        },
    );
    let data = pattern(1 << 20);
    plain.put("f.bin", &data).unwrap();
    // Written pages stay dirty until flushed, and dirty pages cannot be evicted.
    plain.sync().unwrap();
    let path = dir.join("f.bin");
    // SAFETY: sysconf only reads a constant of the system.
    let pages = data.len() / unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let mut buf = IoBuffer::new();
    plain.read_all("f.bin", &mut buf).unwrap();
    assert_eq!(resident_pages(&path), pages, "a plain read caches the file");
    evicting.read_all("f.bin", &mut buf).unwrap();
    assert_eq!(buf.as_slice(), &data[..]);
    assert_eq!(
        resident_pages(&path),
        0,
        "evict_after_read left pages cached"
    );
    plain.read_all("f.bin", &mut buf).unwrap();
    assert_eq!(
        resident_pages(&path),
        pages,
        "a plain read caches the file again"
    );
    fs::remove_dir_all(dir).unwrap();
}

/// Writes `data` through `storage`'s writer in pieces of `piece` bytes.
fn write_in_pieces(storage: &LocalFs, key: &str, data: &[u8], piece: usize, durably: bool) {
    let mut object = storage.create(key).unwrap();
    for chunk in data.chunks(piece.max(1)) {
        object.write(chunk).unwrap();
    }
    if durably {
        object.finish_durably().unwrap();
    } else {
        object.finish().unwrap();
    }
}

#[test]
fn direct_writes_and_sequential_reads_keep_every_byte_in_place() {
    let dir = scratch_dir("direct-write");
    let buffered = LocalFs::new(&dir);
    let direct_writer = LocalFs::new(&dir).writing_direct();
    let direct_reader = LocalFs::with_options(&dir, DIRECT);
    // Sizes around the block and the staging buffer, written in pieces that straddle both.
    let sizes = [
        0,
        1,
        4095,
        4096,
        4097,
        DIRECT_WRITE_BYTES + 4097,
        3 * DIRECT_WRITE_BYTES,
    ];
    for (i, size) in sizes.into_iter().enumerate() {
        let data = pattern(size);
        let key = format!("d/{size}.bin");
        write_in_pieces(
            &direct_writer,
            &key,
            &data,
            [1000, 4096, 1 << 20][i % 3],
            i % 2 == 0,
        );
        if size > 0 && size % 4096 == 0 {
            // Whole blocks went past the page cache.
            assert_eq!(
                resident_pages(&dir.join(&key)),
                0,
                "{size} bytes were cached"
            );
        }
        for (reader, piece) in [(&buffered, 65536), (&direct_reader, 1 << 20)] {
            let mut object = reader.open_sequential(&key).unwrap();
            assert_eq!(object.size(), size as u64);
            let mut buf = IoBuffer::new();
            let mut read = Vec::new();
            loop {
                let n = object.read_next(&mut buf, piece).unwrap();
                if n == 0 {
                    break;
                }
                assert_eq!(buf.len(), n);
                read.extend_from_slice(buf.as_slice());
            }
            assert!(read == data, "{size} bytes in pieces of {piece}");
        }
    }
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_held_file_is_read_without_opening_it_again_until_the_thread_lets_go() {
    let dir = scratch_dir("held");
    let storage = LocalFs::new(&dir);
    let data = pattern(3 * 4096);
    storage.put("a.bin", &data).unwrap();
    storage.put("b.bin", &data).unwrap();
    storage.hold("a.bin");
    let mut buf = IoBuffer::new();
    let read = storage.read_range("a.bin", 4096, 4096, &mut buf).unwrap();
    assert!(read.bytes(&buf) == &data[4096..8192]);
    // Unlinked, the file is still read: through the descriptor held, not a new open.
    fs::remove_file(dir.join("a.bin")).unwrap();
    let read = storage.read_range("a.bin", 8192, 4096, &mut buf).unwrap();
    assert!(read.bytes(&buf) == &data[8192..]);
    // Another thread holds nothing: it opens the path, which is gone.
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut buf = IoBuffer::new();
            let gone = storage.read_range("a.bin", 0, 10, &mut buf).unwrap_err();
            assert_eq!(gone.kind(), io::ErrorKind::NotFound);
        });
    });
    // Another key, or another storage on the same folder, is opened as usual.
    assert_eq!(storage.read_all("b.bin", &mut buf).unwrap().len, data.len());
    let other = LocalFs::new(&dir);
    let gone = other.read_range("a.bin", 0, 10, &mut buf).unwrap_err();
    assert_eq!(gone.kind(), io::ErrorKind::NotFound);
    // Moving off the file keeps it open, for a reader that comes back to it.
    storage.release("a.bin").unwrap();
    assert_eq!(
        storage.read_range("a.bin", 0, 10, &mut buf).unwrap().len,
        10
    );
    storage.release_all();
    let gone = storage.read_range("a.bin", 0, 10, &mut buf).unwrap_err();
    assert_eq!(gone.kind(), io::ErrorKind::NotFound, "let go: opened again");

    // A thread holds its last FILES_HELD files; holding one more closes the oldest.
    storage.put("a.bin", &data).unwrap();
    let keys: Vec<String> = (0..=FILES_HELD).map(|i| format!("f{i}.bin")).collect();
    for key in &keys {
        storage.put(key, &data).unwrap();
    }
    storage.hold("a.bin");
    for key in &keys[1..] {
        storage.hold(key);
    }
    // Taking a held file again makes it the newest: f1 goes when f0 comes.
    storage.hold("a.bin");
    storage.hold(&keys[0]);
    for key in ["a.bin", &keys[0], &keys[1]] {
        fs::remove_file(dir.join(key)).unwrap();
    }
    assert!(storage.read_range("a.bin", 0, 10, &mut buf).is_ok());
    assert!(storage.read_range(&keys[0], 0, 10, &mut buf).is_ok());
    let closed = storage.read_range(&keys[1], 0, 10, &mut buf).unwrap_err();
    assert_eq!(closed.kind(), io::ErrorKind::NotFound, "the oldest closed");
    storage.release_all();

    // Letting go of one held file closes it alone.
    for key in ["a.bin", "b.bin"] {
        storage.put(key, &data).unwrap();
        storage.hold(key);
        fs::remove_file(dir.join(key)).unwrap();
    }
    storage.let_go("a.bin");
    let closed = storage.read_range("a.bin", 0, 10, &mut buf).unwrap_err();
    assert_eq!(closed.kind(), io::ErrorKind::NotFound, "let go of: closed");
    assert!(
        storage.read_range("b.bin", 0, 10, &mut buf).is_ok(),
        "still held"
    );
    storage.release_all();
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn evict_drops_a_freshly_written_file_from_the_page_cache() {
    let dir = scratch_dir("evict-written");
    let storage = LocalFs::new(&dir);
    let data = pattern(1 << 20);
    write_in_pieces(&storage, "f.bin", &data, 1 << 16, false);
    let path = dir.join("f.bin");
    assert!(resident_pages(&path) > 0, "a written file is cached");
    // Its pages are dirty: evict writes them back first, then drops them.
    storage.evict("f.bin").unwrap();
    assert_eq!(resident_pages(&path), 0, "evict left pages cached");
    let mut buf = IoBuffer::new();
    storage.read_all("f.bin", &mut buf).unwrap();
    assert!(buf.as_slice() == &data[..]);
    fs::remove_dir_all(dir).unwrap();
}

#[test]
fn accounting_follows_o_direct_and_the_file_system() {
    // Not created: the nearest existing ancestor, on the build's disk, decides.
    let on_disk = scratch_dir("accounting").join("not/generated/yet");
    assert_eq!(
        LocalFs::new(&on_disk).accounting(),
        Accounting::KernelCounters
    );
    assert_eq!(
        LocalFs::with_options(&on_disk, DIRECT).accounting(),
        Accounting::Exact
    );
    assert_eq!(
        LocalFs::new("/dev/shm/dlio-rs-not-generated").accounting(),
        Accounting::InMemory
    );
    assert_eq!(
        LocalFs::with_options("/dev/shm", DIRECT).accounting(),
        Accounting::InMemory
    );
    assert!(matches!(
        LocalFs::new("/proc").accounting(),
        Accounting::Unaccounted(_)
    ));
}

#[test]
fn sync_names_a_missing_root() {
    let missing = scratch_dir("sync-missing");
    let error = LocalFs::new(&missing).sync().unwrap_err();
    assert!(
        error.to_string().contains(&*missing.to_string_lossy()),
        "{error}"
    );
}
