//! Whether this process was started by an MPI launcher (`mpirun`, `mpiexec`, `srun`), read from
//! the environment the launcher sets, before (or without) initializing MPI.

/// What the launcher told this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpiLaunch {
    /// Number of processes in the job.
    pub size: usize,
    /// This process's index in the job, when the launcher says.
    pub rank: Option<usize>,
    /// The variable the size was read from (named in messages).
    pub variable: &'static str,
}

/// The size and rank variables of Open MPI, PMIx, MPICH/Hydra (PMI) and Intel MPI, in that order.
const LAUNCHERS: [(&str, &str); 4] = [
    ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
    ("PMIX_SIZE", "PMIX_RANK"),
    ("PMI_SIZE", "PMI_RANK"),
    ("MPI_LOCALNRANKS", "MPI_LOCALRANKID"),
];

/// The launch this process is part of, if an MPI launcher started it.
pub fn mpi_launch() -> Option<MpiLaunch> {
    launch_from(|name| std::env::var(name).ok())
}

fn launch_from(get: impl Fn(&str) -> Option<String>) -> Option<MpiLaunch> {
    LAUNCHERS.iter().find_map(|&(size, rank)| {
        Some(MpiLaunch {
            size: get(size)?.trim().parse().ok()?,
            rank: get(rank).and_then(|r| r.trim().parse().ok()),
            variable: size,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launchers_are_recognised_by_their_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(launch_from(env(&[])), None);
        assert_eq!(
            launch_from(env(&[
                ("OMPI_COMM_WORLD_SIZE", "4"),
                ("OMPI_COMM_WORLD_RANK", "3")
            ])),
            Some(MpiLaunch {
                size: 4,
                rank: Some(3),
                variable: "OMPI_COMM_WORLD_SIZE"
            })
        );
        assert_eq!(
            launch_from(env(&[("PMI_SIZE", "2")])),
            Some(MpiLaunch {
                size: 2,
                rank: None,
                variable: "PMI_SIZE"
            })
        );
        // A value that is not a number is not a launch.
        assert_eq!(launch_from(env(&[("PMIX_SIZE", "many")])), None);
    }
}
