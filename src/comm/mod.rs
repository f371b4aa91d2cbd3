//! Ranks and how they meet. A run has `world` ranks (emulated accelerators); each process hosts a
//! contiguous block of them as threads: global rank = process × local ranks + local index.
//!
//! Two kinds of operation, behind one [`Comm`] trait:
//! - **rank operations**, called by every rank thread: the per-step [`Comm::barrier`] (across all
//!   ranks of all processes), [`Comm::gather_ranks`] (a barrier that brings every rank's
//!   figures to rank 0; typed: [`gather_rank_values`]), and [`Comm::abort`], which stops the
//!   whole run;
//! - **process collectives**, called once per process by the thread that runs it, in the same
//!   order in every process: [`Comm::broadcast`], [`Comm::all_gather`], [`Comm::gather`] and
//!   [`Comm::all_reduce`]. On them sit the typed helpers of this module: [`agree`] (all processes
//!   go on, or all stop with the first failure, reported once), [`broadcast_value`],
//!   [`gather_values`], [`all_gather_values`].
//!
//! Implementations: [`ThreadGroup`] (one process, the default build) and, with the `mpi`
//! feature, `MpiGroup` (MPI processes each holding thread ranks). [`Processes`] is how the process
//! was started, and makes the group of each run.

mod hosts;
pub mod launch;
#[cfg(feature = "mpi")]
mod mpi;
mod threads;

use std::ops::Range;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

pub use hosts::{HostFacts, Hosts};
pub use threads::{LocalBarrier, ThreadGroup, Vote};

/// The most ranks a run may have (processes × ranks each): far beyond any machine's, and a bound
/// that keeps every per-rank table and loop of a run (and of `plan` and `audit`) finite.
pub const MAX_WORLD: u64 = 1 << 20;

/// Refuses a world of more than [`MAX_WORLD`] ranks, naming it.
pub fn check_world(world: u64) -> Result<()> {
    match world {
        0 => Err(Error::usage(
            "the number of accelerators must be at least 1",
        )),
        w if w > MAX_WORLD => Err(Error::usage(format!(
            "{w} accelerators: a run has at most {MAX_WORLD} ranks (processes × ranks each)"
        ))),
        _ => Ok(()),
    }
}

/// How [`Comm::all_reduce`] combines the processes' values, element by element.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reduce {
    Max,
    Min,
    Sum,
}

pub trait Comm: Send + Sync {
    /// Number of ranks (emulated accelerators) in the run, across all processes.
    fn world(&self) -> usize;

    /// The global ranks this process hosts.
    fn local_ranks(&self) -> Range<usize>;

    /// This process's index, from 0, and the number of processes.
    fn process(&self) -> usize;
    fn processes(&self) -> usize;

    /// Waits until every rank of every process has arrived; fails if the run was aborted.
    fn barrier(&self) -> Result<()>;

    /// Every rank's `bytes`, in rank order, in rank 0 (`None` in the others); a barrier of all
    /// ranks too, which fails and stops as [`Comm::barrier`] does. A rank operation.
    fn gather_ranks(&self, rank: usize, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>>;

    /// Stops the run: pending and future barriers fail with this reason. With several
    /// processes, the reason is printed once and every process is ended (exit code of `reason`).
    fn abort(&self, reason: &Error);

    /// The abort reason, if any; readers poll this to stop early.
    fn aborted(&self) -> Option<Error>;

    /// The signal the ranks agreed at a barrier to stop for ([`crate::interrupt`]), if they did:
    /// the same in every process.
    fn stopped(&self) -> Option<i32>;

    /// Process 0's `bytes`, in every process.
    fn broadcast(&self, bytes: &mut Vec<u8>) -> Result<()>;

    /// Every process's `bytes`, in process order, in every process.
    fn all_gather(&self, bytes: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Every process's `bytes`, in process order, in process 0 (`None` elsewhere).
    fn gather(&self, bytes: Vec<u8>) -> Result<Option<Vec<Vec<u8>>>>;

    /// Combines `values` of every process element-wise, leaving the result in every process.
    fn all_reduce(&self, values: &mut [f64], op: Reduce) -> Result<()>;

    /// How a rank is named in messages: with its host when the run spans processes.
    fn rank_label(&self, rank: usize) -> String {
        format!("rank {rank}")
    }
}

/// This process's place in its job, for as long as it takes part: with MPI (under `mpirun`, the
/// `mpi` feature) MPI stays initialized while this lives and is finalized when it is dropped, so
/// that several runs of one process (a sweep's trials) share one MPI job; else the process is
/// alone. Its [`Processes::group`]s are the runs' [`Comm`]s.
pub struct Processes {
    #[cfg(feature = "mpi")]
    mpi: Option<mpi::MpiJob>,
}

impl Processes {
    /// Joins the job this process was started in: MPI processes under `mpirun` (with the `mpi`
    /// feature), else this process alone.
    /// `command` (`run`, `sweep`) is what this process does: every process of a job must do the
    /// same.
    pub fn join(command: &str) -> Result<Processes> {
        match launch::mpi_launch() {
            None => Ok(Processes::alone()),
            Some(launch) => Processes::with_mpi(launch, command),
        }
    }

    fn alone() -> Processes {
        Processes {
            #[cfg(feature = "mpi")]
            mpi: None,
        }
    }

    #[cfg(feature = "mpi")]
    fn with_mpi(_launch: launch::MpiLaunch, command: &str) -> Result<Processes> {
        Ok(Processes {
            mpi: Some(mpi::MpiJob::init(command)?),
        })
    }

    #[cfg(not(feature = "mpi"))]
    fn with_mpi(launch: launch::MpiLaunch, _command: &str) -> Result<Processes> {
        if launch.size <= 1 {
            // `mpirun -n 1` needs nothing MPI does.
            return Ok(Processes::alone());
        }
        let error = Error::usage(format!(
            "started as one of {size} MPI processes ({variable}={size}), but this build of dlio-rs \
             has no MPI support; rebuild it with: cargo build --release --features mpi \
             (Debian/Ubuntu need: apt install openmpi-bin libopenmpi-dev libclang-dev), or run one \
             process with the ranks of all {size} as its threads: dlio-rs run -n {size}×N … \
             (dlio_benchmark: DLIO_RS_ACCELERATORS={size}×N), N the ranks per process",
            size = launch.size,
            variable = launch.variable,
        ));
        // Every process finds this; one says it.
        if launch.rank.unwrap_or(0) == 0 {
            Err(error)
        } else {
            Err(Error::Reported {
                exit_code: error.exit_code(),
            })
        }
    }

    /// The number of processes in the job.
    pub fn count(&self) -> usize {
        #[cfg(feature = "mpi")]
        if let Some(job) = &self.mpi {
            return job.processes();
        }
        1
    }

    /// The ranks of one run: `local_ranks` in each process (the same number in every process).
    pub fn group(&self, local_ranks: usize) -> Result<Box<dyn Comm + '_>> {
        let world = (local_ranks as u64).saturating_mul(self.count() as u64);
        #[cfg(feature = "mpi")]
        if let Some(job) = &self.mpi {
            // The processes compare their counts first (a collective every process enters),
            // then each refuses the same world alike.
            let group = mpi::MpiGroup::new(job, local_ranks)?;
            check_world(world)?;
            return Ok(Box::new(group));
        }
        check_world(world)?;
        Ok(Box::new(ThreadGroup::new(local_ranks)))
    }
}

/// Every process's outcome of a step: all go on with their values, or all stop. The first failing
/// process (by index) prints its error; every process then returns [`Error::Reported`] with that
/// error's exit code. With one process the error is returned as it is.
pub fn agree<T>(comm: &dyn Comm, outcome: Result<T>) -> Result<T> {
    if comm.processes() == 1 {
        return outcome;
    }
    let mine = match &outcome {
        Ok(_) => Vec::new(),
        // An error travels as its exit code; its message stays with the process that prints it.
        Err(e) => vec![e.exit_code().clamp(1, 255) as u8],
    };
    let all = comm.all_gather(&mine)?;
    let Some((first, code)) = all
        .iter()
        .enumerate()
        .find_map(|(process, status)| status.first().map(|&code| (process, code)))
    else {
        return outcome;
    };
    if first == comm.process() {
        if let Err(e) = &outcome {
            crate::console::print_error(e);
        }
    }
    Err(Error::Reported {
        exit_code: i32::from(code),
    })
}

/// Ends a process's run: a failure this process met outside an [`agree`]ment stops every process
/// (the others may be waiting for this one in a collective). An interruption is not such a
/// failure: the processes decide it together (their votes at a barrier, then what all
/// completed), so all of them end with it at the same point and the job may go on (a sweep's
/// next step).
pub fn conclude<T>(comm: &dyn Comm, outcome: Result<T>) -> Result<T> {
    if let Err(e) = &outcome {
        if comm.processes() > 1 && !matches!(e, Error::Reported { .. } | Error::Interrupted { .. })
        {
            comm.abort(e);
        }
    }
    outcome
}

/// Fails with the interruption when a signal asked any process to stop, all processes together:
/// process 0 holds it, the others its exit code ([`interrupted_together`]).
pub fn check_interrupt(comm: &dyn Comm) -> Result<()> {
    let mut signal = [f64::from(crate::interrupt::received().unwrap_or(0))];
    comm.all_reduce(&mut signal, Reduce::Max)?;
    match signal[0] as i32 {
        0 => Ok(()),
        signal => Err(interrupted_together(comm, signal)),
    }
}

/// The error of a run every process stops for `signal` at the same point: process 0 says it,
/// the others stop with its exit code; not a failure to abort the job for ([`conclude`]).
pub fn interrupted_together(comm: &dyn Comm, signal: i32) -> Error {
    match comm.process() {
        0 => Error::Interrupted { signal },
        _ => Error::Reported {
            exit_code: crate::interrupt::exit_code(signal),
        },
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    postcard::to_allocvec(value).map_err(|e| {
        Error::run(format!(
            "cannot encode a message for the other processes: {e}"
        ))
    })
}

fn decode<T: DeserializeOwned>(bytes: &[u8], from: usize) -> Result<T> {
    postcard::from_bytes(bytes)
        .map_err(|e| Error::run(format!("cannot decode the message of process {from}: {e}")))
}

/// Process 0's `value` (the others pass `None`), in every process.
pub fn broadcast_value<T: Serialize + DeserializeOwned>(
    comm: &dyn Comm,
    value: Option<T>,
) -> Result<T> {
    let mut bytes = match &value {
        Some(v) if comm.process() == 0 => encode(v)?,
        _ => Vec::new(),
    };
    if comm.processes() == 1 {
        return value.ok_or_else(|| Error::run("broadcast without a value in process 0"));
    }
    comm.broadcast(&mut bytes)?;
    decode(&bytes, 0)
}

/// Every process's `value`, in process order, in process 0 (`None` elsewhere).
pub fn gather_values<T: Serialize + DeserializeOwned>(
    comm: &dyn Comm,
    value: &T,
) -> Result<Option<Vec<T>>> {
    let Some(all) = comm.gather(encode(value)?)? else {
        return Ok(None);
    };
    all.iter()
        .enumerate()
        .map(|(process, bytes)| decode(bytes, process))
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

/// Every rank's `value`, in rank order, in rank 0 (`None` in the others): a rank operation
/// ([`Comm::gather_ranks`]).
pub fn gather_rank_values<T: Serialize + DeserializeOwned>(
    comm: &dyn Comm,
    rank: usize,
    value: &T,
) -> Result<Option<Vec<T>>> {
    let Some(all) = comm.gather_ranks(rank, encode(value)?)? else {
        return Ok(None);
    };
    all.iter()
        .enumerate()
        .map(|(rank, bytes)| {
            postcard::from_bytes(bytes)
                .map_err(|e| Error::run(format!("cannot decode the message of rank {rank}: {e}")))
        })
        .collect::<Result<Vec<T>>>()
        .map(Some)
}

/// Every process's `value`, in process order, in every process.
pub fn all_gather_values<T: Serialize + DeserializeOwned>(
    comm: &dyn Comm,
    value: &T,
) -> Result<Vec<T>> {
    comm.all_gather(&encode(value)?)?
        .iter()
        .enumerate()
        .map(|(process, bytes)| decode(bytes, process))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_process_keeps_its_error_and_its_values() {
        let group = ThreadGroup::new(2);
        assert_eq!(agree(&group, Ok(7)), Ok(7));
        assert_eq!(
            agree::<()>(&group, Err(Error::usage("bad key"))),
            Err(Error::usage("bad key"))
        );
        assert_eq!(
            broadcast_value(&group, Some(vec![1u64, 2])).unwrap(),
            vec![1, 2]
        );
        assert_eq!(
            gather_values(&group, &("host".to_string(), 3u64)).unwrap(),
            Some(vec![("host".to_string(), 3)])
        );
        let mut values = [1.0, 2.0];
        group.all_reduce(&mut values, Reduce::Max).unwrap();
        assert_eq!(values, [1.0, 2.0]);
        assert_eq!(group.local_ranks(), 0..2);
        // A failure in one process stops only that one: nothing to abort.
        assert_eq!(
            conclude::<()>(&group, Err(Error::run("x"))),
            Err(Error::run("x"))
        );
        assert_eq!(group.aborted(), None);
    }
}
