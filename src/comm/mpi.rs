//! Ranks in MPI processes (the `mpi` feature): each process of `mpirun -n P` hosts the same number
//! of thread ranks. The per-step barrier is two-level: a process's rank threads meet at its
//! [`LocalBarrier`], and the last of them to arrive enters the MPI barrier for the whole process,
//! so one MPI barrier per process and step joins every rank of every process.
//!
//! A failure in any rank ends the job with `MPI_Abort`: the other processes may be blocked in a
//! barrier or collective that the failed process will never enter, and only the MPI runtime can
//! reach them there. The reason is printed once, by the process that failed.

use std::ops::Range;
use std::sync::Once;
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::{Threading, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
use mpi::Count;

use super::{Comm, LocalBarrier, Reduce, Vote};
use crate::error::{Error, Result};

/// MPI, initialized for as long as this process takes part in the job: finalized when dropped.
/// Runs come and go as [`MpiGroup`]s while it lives (a sweep's trials).
pub struct MpiJob {
    _universe: Universe,
    process: usize,
    processes: usize,
}

impl MpiJob {
    /// Initializes MPI, with the threading the rank threads need, for `command` (`run`,
    /// `sweep`); then checks that every process runs the same command of the same dlio-rs.
    /// `MPI_Init` waits for every process of the job: one that never calls it (another command,
    /// or a process that failed before) would hold the others there forever, so a watchdog ends
    /// this process after [`init_limit`], naming the cause.
    pub fn init(command: &str) -> Result<MpiJob> {
        let limit = init_limit()?;
        let (done, watched) = std::sync::mpsc::channel::<()>();
        let doing = command.to_string();
        std::thread::Builder::new()
            .name("mpi-init-watchdog".into())
            .spawn(move || {
                if watched.recv_timeout(limit) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                    crate::console::tell(format_args!(
                        "error: MPI_Init did not complete within {} s: some process of this MPI \
                         job never started it (it ran another command than `dlio-rs {doing}`, \
                         or stopped before: see its message), so this one gives up; every \
                         process of a job must run the same command (a larger job may need \
                         more time: {INIT_TIMEOUT_VARIABLE}=SECONDS)",
                        limit.as_secs_f64()
                    ));
                    std::process::exit(1);
                }
            })
            .map_err(|e| Error::run(format!("cannot start a thread: {e}")))?;
        let initialized = mpi::initialize_with_threading(Threading::Multiple);
        drop(done);
        let (universe, threading) =
            initialized.ok_or_else(|| Error::run("MPI was initialized twice in this process"))?;
        // Rank threads take turns calling MPI (the last arrival of each barrier), and an abort
        // may come from any thread.
        if !matches!(threading, Threading::Multiple | Threading::Serialized) {
            return Err(Error::run(format!(
                "the MPI library offers only {threading:?} threading; dlio-rs needs at least \
                 MPI_THREAD_SERIALIZED (rank threads take turns calling MPI)"
            )));
        }
        let world = universe.world();
        let job = MpiJob {
            process: world.rank() as usize,
            processes: world.size() as usize,
            _universe: universe,
        };
        job.same_command(command)?;
        Ok(job)
    }

    /// Every process runs `command` of this very version, or all stop with exit code 2 naming
    /// each process's: a `run` beside a `sweep` would enter different collectives and wait on
    /// each other forever.
    fn same_command(&self, command: &str) -> Result<()> {
        const WIDTH: usize = 64;
        let said = format!("dlio-rs {command} {}", env!("CARGO_PKG_VERSION"));
        let mut mine = [0u8; WIDTH];
        let len = said.len().min(WIDTH);
        mine[..len].copy_from_slice(&said.as_bytes()[..len]);
        let mut all = vec![0u8; WIDTH * self.processes];
        world().all_gather_into(&mine[..], &mut all[..]);
        let commands: Vec<String> = all
            .chunks(WIDTH)
            .map(|c| {
                String::from_utf8_lossy(c)
                    .trim_end_matches('\0')
                    .to_string()
            })
            .collect();
        if commands.iter().all(|c| *c == commands[0]) {
            return Ok(());
        }
        let listed: Vec<String> = commands
            .iter()
            .enumerate()
            .map(|(p, c)| format!("process {p}: {c}"))
            .collect();
        let error = Error::usage(format!(
            "the processes of this MPI job run different commands ({}); every process must run \
             the same command of the same dlio-rs",
            listed.join(", ")
        ));
        Err(match self.process {
            0 => error,
            _ => Error::Reported {
                exit_code: error.exit_code(),
            },
        })
    }

    pub fn processes(&self) -> usize {
        self.processes
    }
}

/// The variable that sets how long `MPI_Init` may take, in seconds.
const INIT_TIMEOUT_VARIABLE: &str = "DLIO_RS_MPI_INIT_TIMEOUT";

/// How long `MPI_Init` may take before the process gives up ([`INIT_TIMEOUT_VARIABLE`], else
/// 60 s: the start of a job of thousands of processes takes seconds).
fn init_limit() -> Result<Duration> {
    match std::env::var(INIT_TIMEOUT_VARIABLE) {
        Err(_) => Ok(Duration::from_secs(60)),
        Ok(text) => text
            .parse::<f64>()
            .ok()
            .filter(|s| (1.0..=86400.0).contains(s))
            .map(Duration::from_secs_f64)
            .ok_or_else(|| {
                Error::usage(format!(
                    "{INIT_TIMEOUT_VARIABLE}={text}: give the seconds MPI_Init may take, from 1 \
                     to 86400"
                ))
            }),
    }
}

/// The ranks of one run, spread evenly over the job's processes as their threads.
pub struct MpiGroup {
    local: LocalBarrier,
    local_ranks: usize,
    process: usize,
    processes: usize,
    hostname: String,
    reported: Once,
}

/// `MPI_COMM_WORLD`. A handle to it is a constant; it is made where needed, because rsmpi's
/// communicators are not `Sync`, while the calls themselves are allowed from any thread
/// (`MPI_THREAD_MULTIPLE`, or serialized by the barrier's last arrival).
fn world() -> SimpleCommunicator {
    SimpleCommunicator::world()
}

/// How long the last local arrival polls the processes' barrier, yielding its core, before it
/// polls in naps of [`BARRIER_NAP`].
const BARRIER_SPIN: Duration = Duration::from_micros(200);
const BARRIER_NAP: Duration = Duration::from_micros(10);

/// The processes' barrier, entered by one thread per process with its process's [`Vote`]; returns
/// the largest vote, the same in every process. `MPI_Barrier` would busy-poll for the whole wait:
/// with more rank and reader threads than cores (several processes per host), the spinning process
/// holds a core that the ranks it waits for need, and every step loses a scheduler slice
/// (measured: AU 75% for 2 processes × 4 ranks on 2 cores). A non-blocking all-reduce (a barrier
/// that carries the vote) polled briefly, then between short naps, leaves the cores to the ranks.
fn meet_processes(vote: Vote) -> Vote {
    let mut decided: Vote = 0;
    mpi::request::scope(|scope| {
        let mut pending =
            world().immediate_all_reduce_into(scope, &vote, &mut decided, SystemOperation::max());
        let spin_until = Instant::now() + BARRIER_SPIN;
        loop {
            match pending.test() {
                Ok(_) => return,
                Err(request) => pending = request,
            }
            if Instant::now() < spin_until {
                std::thread::yield_now();
            } else {
                std::thread::sleep(BARRIER_NAP);
            }
        }
    });
    decided
}

impl MpiGroup {
    /// The group of a run with `local_ranks` ranks in each process of `job`; checks that every
    /// process hosts as many. Every process makes its group together (a collective).
    pub fn new(job: &MpiJob, local_ranks: usize) -> Result<MpiGroup> {
        // First of all, the collective: a process that refused its own count before it would
        // leave the others waiting here forever.
        let mut counts = vec![0u64; job.processes];
        world().all_gather_into(&(local_ranks as u64), &mut counts[..]);
        let group = MpiGroup {
            local: LocalBarrier::new(local_ranks.max(1)),
            local_ranks,
            process: job.process,
            processes: job.processes,
            hostname: crate::system::hostname(),
            reported: Once::new(),
        };
        if counts.iter().any(|&c| c != local_ranks as u64) {
            let listed: Vec<String> = counts
                .iter()
                .enumerate()
                .map(|(p, c)| format!("process {p}: {c}"))
                .collect();
            let error = Error::usage(format!(
                "every MPI process must host the same number of ranks, at least 1 (-n, or \
                 DLIO_RS_ACCELERATORS for dlio_benchmark); they differ: {}",
                listed.join(", ")
            ));
            return Err(if group.process == 0 {
                error
            } else {
                Error::Reported {
                    exit_code: error.exit_code(),
                }
            });
        }
        Ok(group)
    }
}

fn count(len: usize, what: &str) -> Result<Count> {
    Count::try_from(len).map_err(|_| {
        Error::run(format!(
            "{what} of {len} bytes is too large for one MPI message (2 GiB at most)"
        ))
    })
}

/// Start of each part when `counts` are laid end to end.
fn displacements(counts: &[Count]) -> Vec<Count> {
    counts
        .iter()
        .scan(0, |at, &c| {
            let start = *at;
            *at += c;
            Some(start)
        })
        .collect()
}

fn split(buffer: &[u8], counts: &[Count]) -> Vec<Vec<u8>> {
    displacements(counts)
        .iter()
        .zip(counts)
        .map(|(&start, &len)| buffer[start as usize..(start + len) as usize].to_vec())
        .collect()
}

impl Comm for MpiGroup {
    fn world(&self) -> usize {
        self.local_ranks * self.processes
    }

    fn local_ranks(&self) -> Range<usize> {
        let first = self.process * self.local_ranks;
        first..first + self.local_ranks
    }

    fn process(&self) -> usize {
        self.process
    }

    fn processes(&self) -> usize {
        self.processes
    }

    fn barrier(&self) -> Result<()> {
        self.local.wait(&meet_processes)
    }

    /// The last local arrival meets the other processes as at a barrier, then, unless they
    /// agreed to stop (the same decision in every process, so all skip it together), gathers
    /// each process's parts in process 0: process by process, rank order.
    fn gather_ranks(&self, rank: usize, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>> {
        let local = rank - self.local_ranks().start;
        self.local.wait_gathering(local, bytes, &|vote, parts| {
            let decided = meet_processes(vote);
            if decided != 0 {
                return Ok((decided, None));
            }
            let Some(processes) = super::gather_values(self, &parts)? else {
                return Ok((decided, None));
            };
            Ok((decided, Some(processes.into_iter().flatten().collect())))
        })
    }

    fn abort(&self, reason: &Error) {
        self.local.abort(reason);
        if self.processes == 1 {
            // Nobody else to stop: the run ends through its error, as with threads.
            return;
        }
        self.reported.call_once(|| {
            crate::console::print_error(reason);
        });
        world().abort(reason.exit_code())
    }

    fn aborted(&self) -> Option<Error> {
        self.local.aborted()
    }

    fn stopped(&self) -> Option<i32> {
        self.local.stopped()
    }

    fn broadcast(&self, bytes: &mut Vec<u8>) -> Result<()> {
        let world = world();
        let root = world.process_at_rank(0);
        let mut len = bytes.len() as u64;
        root.broadcast_into(&mut len);
        count(len as usize, "a broadcast")?;
        bytes.resize(len as usize, 0);
        root.broadcast_into(&mut bytes[..]);
        Ok(())
    }

    fn all_gather(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>> {
        let world = world();
        let mut counts: Vec<Count> = vec![0; self.processes];
        world.all_gather_into(&count(bytes.len(), "a message")?, &mut counts[..]);
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        count(total, "the gathered messages")?;
        let mut buffer = vec![0u8; total];
        // Open MPI refuses a gather of nothing at all (MPI_ERR_ARG).
        if total > 0 {
            let displs = displacements(&counts);
            let mut parts = PartitionMut::new(&mut buffer[..], &counts[..], &displs[..]);
            world.all_gather_varcount_into(bytes, &mut parts);
        }
        Ok(split(&buffer, &counts))
    }

    fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>> {
        let world = world();
        let root = world.process_at_rank(0);
        // Every process learns the total, so that all skip a gather of nothing (which Open MPI
        // refuses) together.
        let mut counts: Vec<Count> = vec![0; self.processes];
        world.all_gather_into(&count(bytes.len(), "a message")?, &mut counts[..]);
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        count(total, "the gathered messages")?;
        if self.process != 0 {
            if total > 0 {
                root.gather_varcount_into(&bytes[..]);
            }
            return Ok(None);
        }
        let mut buffer = vec![0u8; total];
        if total > 0 {
            let displs = displacements(&counts);
            let mut parts = PartitionMut::new(&mut buffer[..], &counts[..], &displs[..]);
            root.gather_varcount_into_root(&bytes[..], &mut parts);
        }
        Ok(Some(split(&buffer, &counts)))
    }

    fn all_reduce(&self, values: &mut [f64], op: Reduce) -> Result<()> {
        let mine = values.to_vec();
        let op = match op {
            Reduce::Max => SystemOperation::max(),
            Reduce::Min => SystemOperation::min(),
            Reduce::Sum => SystemOperation::sum(),
        };
        world().all_reduce_into(&mine[..], values, op);
        Ok(())
    }

    fn rank_label(&self, rank: usize) -> String {
        if self.processes == 1 {
            return format!("rank {rank}");
        }
        format!(
            "rank {rank} (process {} of {}, host {})",
            self.process, self.processes, self.hostname
        )
    }
}
