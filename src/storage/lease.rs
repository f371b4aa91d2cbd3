//! A folder of an object store held by one run at a time: a lease, since an object store has no
//! locks. The lease is a small object, [`LEASE_OBJECT`], in the folder, that names its holder
//! and the time it runs until; it is taken by a conditional PUT (`If-None-Match: *`: only if no
//! lease is there; `If-Match: TAG`: only in place of the expired lease just read), renewed by
//! its holder every [`RENEW_EVERY`] (again `If-Match`, so that a holder that lost it finds out)
//! and deleted when the holder lets go (`If-Match`). A holder that dies leaves a lease that
//! expires within [`LEASE_TIME`]; a later run takes it over then, and says so.
//!
//! Failure modes (docs/object-storage.md, "Held folders"): the hosts' clocks must agree within
//! the lease's time (a lease is judged expired by the reader's clock); a store that ignores the
//! conditions (answers 200 where it should answer 412) leaves only a read-before-write check, so
//! two runs that start within one request's time of each other can both believe they hold it; a
//! holder stalled past the lease's time (a stopped process) loses it and fails at its next
//! renewal or when it commits, rather than go on unheld.

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::{Condition, Storage};
use crate::error::{Error, Result};

/// The lease's name, in every folder of an object store a run holds.
pub const LEASE_OBJECT: &str = ".dlio-rs.lock";

/// How long a lease runs unless renewed: the longest a dead holder keeps others out.
pub const LEASE_TIME: Duration = Duration::from_secs(60);

/// How often the holder renews it: four times per lease, so that a slow request or two cannot
/// let it lapse.
pub const RENEW_EVERY: Duration = Duration::from_secs(15);

/// How often a waiting run looks again.
const RETRY: Duration = Duration::from_secs(1);

/// The largest lease object read: ours are a few lines.
const LEASE_LIMIT: usize = 4096;

/// A lease this process holds; renewed by a thread of its own until dropped (then deleted).
pub struct Lease {
    shared: Arc<Shared>,
    stop: Option<mpsc::Sender<()>>,
    keeper: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    storage: Arc<dyn Storage>,
    /// The holder's line: `generating, process 12 on host, since …`.
    holder: String,
    /// Unique to this lease, to know it again in an answer.
    token: String,
    /// The stored version's tag; the next write is conditional on it.
    tag: Mutex<String>,
    /// Why the lease was lost, once it was.
    lost: Mutex<Option<String>>,
}

/// Why a folder could not be held: another run's lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The holder's line, as its lease says.
    pub holder: String,
    /// Seconds until the lease expires unless renewed.
    pub expires_in: u64,
}

impl Lease {
    /// Takes the lease of the folder `storage` stands for, as `doing` (what this run does there,
    /// for the message another run gets), or says who holds it. With `wait`, waits up to that
    /// long for it (a signal ends the wait).
    pub fn take(
        storage: Arc<dyn Storage>,
        doing: &str,
        wait: Option<Duration>,
    ) -> Result<std::result::Result<Lease, Held>> {
        let holder = format!(
            "{doing}, process {} on {}, since {}",
            std::process::id(),
            crate::system::hostname(),
            crate::system::timestamp(SystemTime::now())
        );
        let token = format!(
            "{:016x}",
            rand::Rng::random::<u64>(
                &mut <rand::rngs::SmallRng as rand::SeedableRng>::from_os_rng()
            )
        );
        let shared = Arc::new(Shared {
            storage,
            holder,
            token,
            tag: Mutex::new(String::new()),
            lost: Mutex::new(None),
        });
        let mut waiting = crate::folder::lock::Waiting::new(wait);
        loop {
            match shared.try_take()? {
                Ok(tag) => {
                    *shared.tag.lock().unwrap_or_else(|p| p.into_inner()) = tag;
                    return Ok(Ok(Lease::keep(shared)));
                }
                Err(Some(held)) => {
                    let folder = shared.storage.describe("");
                    if !waiting.again(&folder, &|| held.holder.clone(), RETRY)? {
                        return Ok(Err(held));
                    }
                }
                // Another run took or let go of it between our read and our write: look again.
                Err(None) => crate::interrupt::check()?,
            }
        }
    }

    /// Starts the thread that renews the lease.
    fn keep(shared: Arc<Shared>) -> Lease {
        let (stop, stopped) = mpsc::channel::<()>();
        let kept = Arc::clone(&shared);
        let keeper = std::thread::Builder::new()
            .name("lease".into())
            .spawn(move || loop {
                match stopped.recv_timeout(RENEW_EVERY) {
                    Err(RecvTimeoutError::Timeout) => {
                        if kept.renew().is_err() {
                            return;
                        }
                    }
                    _ => return,
                }
            })
            .ok();
        Lease {
            shared,
            stop: Some(stop),
            keeper,
        }
    }

    /// Fails unless the lease is still this run's (renewed now): before a generation commits.
    pub fn check(&self) -> Result<()> {
        self.shared.renew()
    }
}

impl Drop for Lease {
    /// Stops renewing and deletes the lease, if it is still ours.
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
        let shared = &self.shared;
        if shared.lost.lock().map_or(true, |l| l.is_none()) {
            let tag = shared.tag.lock().map(|t| t.clone()).unwrap_or_default();
            if let Err(e) = shared.storage.delete_if(LEASE_OBJECT, &tag) {
                crate::console::tell(format_args!(
                    "warning: cannot delete the lease {}: {e}; it expires within {} s",
                    shared.storage.describe(LEASE_OBJECT),
                    LEASE_TIME.as_secs()
                ));
            }
        }
    }
}

impl Shared {
    /// The lease's text: the holder, its token, and when it expires.
    fn text(&self) -> String {
        let until = unix_seconds(SystemTime::now()) + LEASE_TIME.as_secs();
        format!(
            "dlio-rs lease: {}\ntoken: {}\nuntil: {until}\n",
            self.holder, self.token
        )
    }

    /// One attempt: the lease taken (its tag); another run's live lease (`Err(Some)`); or a
    /// race lost to another run's write (`Err(None)`: look again).
    fn try_take(&self) -> Result<std::result::Result<String, Option<Held>>> {
        let storage = self.storage.as_ref();
        let object = || storage.describe(LEASE_OBJECT);
        let found = storage
            .get_tagged(LEASE_OBJECT, LEASE_LIMIT)
            .map_err(|e| Error::on_object("cannot read the lease", object(), e))?;
        let written = match found {
            None => storage.put_if(LEASE_OBJECT, self.text().as_bytes(), Condition::Absent),
            Some((bytes, tag)) => {
                let text = String::from_utf8_lossy(&bytes);
                // An earlier attempt of ours that the store applied, though its answer was lost.
                if text.contains(&format!("token: {}\n", self.token)) {
                    return Ok(Ok(tag));
                }
                let Some(lease) = ReadLease::parse(&text) else {
                    return Err(Error::usage(format!(
                        "{} is not a lease dlio-rs wrote; delete it if no run uses the folder",
                        object()
                    )));
                };
                let now = unix_seconds(SystemTime::now());
                if lease.until > now {
                    return Ok(Err(Some(Held {
                        holder: lease.holder,
                        expires_in: lease.until - now,
                    })));
                }
                crate::console::tell(format_args!(
                    "warning: {} held by {} expired {} s ago (its run ended without letting go); \
                     taken over",
                    storage.describe(""),
                    lease.holder,
                    now - lease.until
                ));
                storage.put_if(
                    LEASE_OBJECT,
                    self.text().as_bytes(),
                    Condition::Matches(&tag),
                )
            }
        };
        let written =
            written.map_err(|e| Error::on_object("cannot write the lease", object(), e))?;
        Ok(written.ok_or(None))
    }

    /// Writes the lease again with a later expiry, if it is still ours; records and returns the
    /// loss otherwise.
    fn renew(&self) -> Result<()> {
        let storage = self.storage.as_ref();
        if let Some(lost) = self.lost.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            return Err(Error::run(lost.clone()));
        }
        let mut tag = self.tag.lock().unwrap_or_else(|p| p.into_inner());
        let lost = match storage.put_if(
            LEASE_OBJECT,
            self.text().as_bytes(),
            Condition::Matches(&tag),
        ) {
            Ok(Some(renewed)) => {
                *tag = renewed;
                return Ok(());
            }
            Ok(None) => format!(
                "lost the lease {}: another run took it over (this run was stalled past its {} s)",
                storage.describe(LEASE_OBJECT),
                LEASE_TIME.as_secs()
            ),
            Err(e) => format!(
                "cannot renew the lease {}: {e}",
                storage.describe(LEASE_OBJECT)
            ),
        };
        *self.lost.lock().unwrap_or_else(|p| p.into_inner()) = Some(lost.clone());
        Err(Error::run(lost))
    }
}

/// A lease as read from the store.
struct ReadLease {
    holder: String,
    until: u64,
}

impl ReadLease {
    fn parse(text: &str) -> Option<ReadLease> {
        let mut lines = text.lines();
        let holder = lines.next()?.strip_prefix("dlio-rs lease: ")?.to_string();
        let until = lines
            .find_map(|l| l.strip_prefix("until: "))?
            .trim()
            .parse()
            .ok()?;
        Some(ReadLease { holder, until })
    }
}

/// Whether a live lease holds the folder `storage` stands for (a reader's check, which takes
/// nothing): its holder, if so.
pub fn holder(storage: &dyn Storage) -> std::io::Result<Option<Held>> {
    let Some((bytes, _)) = storage.get_tagged(LEASE_OBJECT, LEASE_LIMIT)? else {
        return Ok(None);
    };
    let now = unix_seconds(SystemTime::now());
    Ok(ReadLease::parse(&String::from_utf8_lossy(&bytes))
        .filter(|lease| lease.until > now)
        .map(|lease| Held {
            holder: lease.holder,
            expires_in: lease.until - now,
        }))
}

fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_s_text_reads_back_and_others_are_refused() {
        let lease = ReadLease::parse(
            "dlio-rs lease: generating, process 7 on h, since t\ntoken: ab\nuntil: 99\n",
        )
        .unwrap();
        assert_eq!(lease.holder, "generating, process 7 on h, since t");
        assert_eq!(lease.until, 99);
        assert!(ReadLease::parse("hello\nuntil: 5\n").is_none());
        assert!(ReadLease::parse("dlio-rs lease: x\nuntil: soon\n").is_none());
    }
}
