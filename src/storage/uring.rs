//! Several reads of one file in flight at once, through io_uring: how [`super::LocalFs`] serves
//! [`super::Storage::read_ranges`] with O_DIRECT, where a reader that waits for each read in turn
//! leaves the device one request deep (a parquet row group's column ranges, which Arrow's
//! `pre_buffer` hands together to its I/O threads, each taking the next as it finishes one).
//!
//! The reads land in one arena used as a ring: each is placed after the last, wrapping to the
//! start when the end is reached, and is handed to the caller, in order, once it and every read
//! before it have arrived; its space is then free again. So the window slides: while the caller
//! checks one range, the next ones are on the device.
//!
//! Each thread keeps one small ring, made on its first use. Where the kernel refuses io_uring
//! (too old, or forbidden by a container's seccomp policy) the caller reads with `pread`, one
//! request after another; nothing else changes. Buffered reads do not come here: the kernel
//! counts the bytes a buffered read fetches against the thread that submits it, and io_uring may
//! hand a read to its own worker threads, which would hide them from the reader thread's count
//! (`read_bytes` in /proc/thread-self/io). With O_DIRECT every byte read is from the device, so
//! no counter is involved.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::ops::ControlFlow;
use std::os::fd::RawFd;

use io_uring::{opcode, types, IoUring};

use super::Window;

/// Requests a ring holds in flight at most.
const RING_ENTRIES: u32 = 32;

thread_local! {
    /// This thread's ring: `None` until first used, then `Some(None)` where io_uring is refused.
    static RING: RefCell<Option<Option<IoUring>>> = const { RefCell::new(None) };
}

/// What takes each read once it has arrived: `(index, its memory, bytes arrived)`.
pub(super) type OnArrival<'a> =
    dyn FnMut(usize, &mut [MaybeUninit<u8>], usize) -> ControlFlow<()> + 'a;

/// One read: `len` bytes of the file from `offset`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Request {
    pub offset: u64,
    pub len: usize,
}

/// How [`read_in_order`] ended.
pub(super) enum Outcome {
    /// Every read was handed over, or the caller stopped: nothing is in flight.
    Done,
    /// io_uring is not available to this thread: nothing was read.
    Unavailable,
    /// A read failed; nothing is in flight.
    Failed(io::Error),
    /// Waiting failed while reads were in flight: the kernel may still write into the arena,
    /// which the caller must therefore never use or free again.
    Stranded(io::Error),
}

/// The memory the reads land in: `len` bytes from `start`, which stay valid and untouched by
/// anything but these reads until [`read_in_order`] returns.
pub(super) struct Arena {
    pub start: *mut MaybeUninit<u8>,
    pub len: usize,
}

/// A read placed in the arena.
struct Slot {
    at: usize,
    len: usize,
    /// What the kernel returned, once it has.
    result: Option<i32>,
}

/// Reads `requests` of `file` into `arena`, with up to `window.reads` of them and
/// `window.bytes` bytes in flight or in the caller's hands at once (one at least), and calls
/// `each(i, memory, arrived)` for each request in order once it has completed: its place in the
/// arena (`len` bytes) and how many bytes arrived (fewer where the file ends; 0 where a read was
/// interrupted, left for the caller to make). `each` may write into that memory; `Break` stops:
/// no more reads are submitted, those in flight are waited for. Every request must fit in the
/// arena.
pub(super) fn read_in_order(
    file: RawFd,
    requests: &[Request],
    window: Window,
    arena: Arena,
    each: &mut OnArrival<'_>,
) -> Outcome {
    RING.with(|ring| {
        let mut ring = ring.borrow_mut();
        let ring = ring.get_or_insert_with(|| IoUring::new(RING_ENTRIES).ok());
        let Some(uring) = ring.as_mut() else {
            return Outcome::Unavailable;
        };
        let outcome = Drive {
            ring: uring,
            file,
            arena,
            slots: VecDeque::new(),
            first: 0,
            held: 0,
            in_flight: 0,
        }
        .run(requests, window, each);
        if matches!(outcome, Outcome::Stranded(_)) {
            // Its reads may still complete into memory nobody watches: never use this ring again.
            *ring = None;
        }
        outcome
    })
}

struct Drive<'r> {
    ring: &'r mut IoUring,
    file: RawFd,
    arena: Arena,
    /// The reads submitted and not yet handed over, the oldest first: request `first` onwards.
    slots: VecDeque<Slot>,
    first: usize,
    /// Bytes of the arena the slots take.
    held: usize,
    in_flight: usize,
}

impl Drive<'_> {
    fn run(mut self, requests: &[Request], window: Window, each: &mut OnArrival<'_>) -> Outcome {
        let mut next = 0;
        let mut stopped = false;
        let mut failure = None;
        let reads = window.reads.clamp(1, RING_ENTRIES as usize);
        loop {
            self.reap();
            // Refill the window before checking what arrived, so that the device works while
            // the caller does.
            let mut submitted = false;
            while !stopped && next < requests.len() && self.in_flight < reads {
                let request = requests[next];
                if !self.slots.is_empty() && self.held + request.len > window.bytes {
                    break;
                }
                let Some(at) = self.place(request.len) else {
                    break;
                };
                if let Err(error) = self.push(next, at, request) {
                    failure.get_or_insert(error);
                    stopped = true;
                    break;
                }
                submitted |= request.len > 0;
                next += 1;
            }
            if submitted {
                if let Err(error) = self.ring.submit() {
                    if !transient(&error) {
                        return Outcome::Stranded(error);
                    }
                }
            }
            // Hand over the oldest read if it has arrived (or, once stopped, only free it).
            if let Some(result) = self.slots.front().and_then(|slot| slot.result) {
                let slot = self.slots.pop_front().expect("a front slot");
                self.held -= slot.len;
                let arrived = match result {
                    n if n >= 0 => n as usize,
                    n if n == -libc::EINTR || n == -libc::EAGAIN => 0,
                    n => {
                        failure.get_or_insert(io::Error::from_raw_os_error(-n));
                        stopped = true;
                        0
                    }
                };
                if !stopped {
                    // SAFETY: the slot lies within the arena, its read has completed, and no other
                    // slot overlaps it; nothing else refers to it until it is placed again.
                    let memory = unsafe {
                        std::slice::from_raw_parts_mut(self.arena.start.add(slot.at), slot.len)
                    };
                    stopped = each(self.first, memory, arrived).is_break();
                }
                self.first += 1;
                continue;
            }
            if self.in_flight == 0 {
                // Every read placed has been handed over.
                if stopped || next == requests.len() {
                    return failure.map_or(Outcome::Done, Outcome::Failed);
                }
                // Nothing placed, with the arena empty: the request is larger than the arena,
                // which the caller sizes for every request.
                return Outcome::Failed(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a read is larger than the memory set aside for it",
                ));
            }
            if let Err(error) = self.ring.submit_and_wait(1) {
                if !transient(&error) {
                    return Outcome::Stranded(error);
                }
            }
        }
    }

    /// Marks the reads that have completed (no system call: the kernel posts them to memory
    /// shared with this process).
    fn reap(&mut self) {
        for completion in self.ring.completion() {
            let slot = completion.user_data() as usize - self.first;
            self.slots[slot].result = Some(completion.result());
            self.in_flight -= 1;
        }
    }

    /// Where in the arena `len` bytes go after the newest slot, wrapping to the start where the
    /// end is too near and the oldest slot has moved on from there; `None` while it is in the way.
    fn place(&self, len: usize) -> Option<usize> {
        let capacity = self.arena.len;
        // Empty reads take no space: they bound nothing.
        let taking = |slot: &&Slot| slot.len > 0;
        let (Some(oldest), Some(newest)) = (
            self.slots.iter().find(taking),
            self.slots.iter().rfind(taking),
        ) else {
            return (len <= capacity).then_some(0);
        };
        let (head, tail) = (oldest.at, newest.at + newest.len);
        if head < tail {
            // Taken: head..tail. Free: tail..capacity, then 0..head.
            if tail + len <= capacity {
                Some(tail)
            } else {
                (len <= head).then_some(0)
            }
        } else {
            // Wrapped, taken: head..capacity and 0..tail. Free: tail..head.
            (tail + len <= head).then_some(tail)
        }
    }

    /// Queues the read of `request` into the arena at `at` (submitted with the next system call).
    fn push(&mut self, index: usize, at: usize, request: Request) -> io::Result<()> {
        let mut slot = Slot {
            at,
            len: request.len,
            result: None,
        };
        if request.len == 0 {
            // Nothing to read: complete at once, taking no space or ring entry.
            slot.result = Some(0);
            self.slots.push_back(slot);
            return Ok(());
        }
        // Longer than a u32 says: the largest whole number of 4 KiB blocks it does, the rest read by
        // the caller's `pread`.
        let len = u32::try_from(request.len).unwrap_or(!0xfff);
        // SAFETY: `at + len` is within the arena (`place`).
        let target = unsafe { self.arena.start.add(at) };
        let entry = opcode::Read::new(types::Fd(self.file), target.cast(), len)
            .offset(request.offset)
            .build()
            .user_data(index as u64);
        // SAFETY: the entry points into the arena, which the caller keeps valid and otherwise
        // untouched until `read_in_order` returns; it returns only once no read is in flight (or
        // reports them stranded, forbidding the arena's use). No other slot overlaps this one.
        if unsafe { self.ring.submission().push(&entry) }.is_err() {
            // The queue is full: submit what it holds, then push again.
            self.ring.submit()?;
            // SAFETY: as above.
            unsafe { self.ring.submission().push(&entry) }
                .map_err(|_| io::Error::other("the io_uring submission queue stays full"))?;
        }
        self.held += request.len;
        self.in_flight += 1;
        self.slots.push_back(slot);
        Ok(())
    }
}

/// A failed wait that is worth trying again.
fn transient(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock
    ) || error.raw_os_error() == Some(libc::EBUSY)
}
