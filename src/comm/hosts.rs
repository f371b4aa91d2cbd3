//! Which processes share a host, and the facts DLIO reports per host (memory, CPUs): gathered
//! once from every process, so that per-host duties (dropping the page cache) run once per host
//! and the summary lists each host once, as DLIO's per-node reductions do.

use serde::{Deserialize, Serialize};

use super::{all_gather_values, Comm};
use crate::error::Result;
use crate::system;

/// One process's host, as it sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostFacts {
    pub hostname: String,
    pub memory_bytes: u64,
    /// The host's online CPUs, whatever this process is bound to.
    pub cpu_count: usize,
}

impl HostFacts {
    pub fn of_this_host() -> HostFacts {
        HostFacts {
            hostname: system::hostname(),
            memory_bytes: system::memory_bytes(),
            cpu_count: system::host_cpu_count(),
        }
    }
}

/// The hosts of the run, in the order of their first process.
#[derive(Debug, Clone, PartialEq)]
pub struct Hosts {
    /// One entry per host.
    pub hosts: Vec<HostFacts>,
    /// The host of each process.
    pub host_of_process: Vec<usize>,
    /// The process that does this process's host's duties (its first process).
    pub leader_of_host: Vec<usize>,
    /// This process's index.
    pub process: usize,
}

impl Hosts {
    /// Gathers every process's host (a process collective).
    pub fn gather(comm: &dyn Comm) -> Result<Hosts> {
        let all = all_gather_values(comm, &HostFacts::of_this_host())?;
        Ok(Hosts::from_processes(all, comm.process()))
    }

    pub fn from_processes(facts: Vec<HostFacts>, process: usize) -> Hosts {
        let mut hosts: Vec<HostFacts> = Vec::new();
        let mut leader_of_host = Vec::new();
        let mut host_of_process = Vec::with_capacity(facts.len());
        for (p, f) in facts.into_iter().enumerate() {
            let host = match hosts.iter().position(|h| h.hostname == f.hostname) {
                Some(h) => h,
                None => {
                    hosts.push(f);
                    leader_of_host.push(p);
                    hosts.len() - 1
                }
            };
            host_of_process.push(host);
        }
        Hosts {
            hosts,
            host_of_process,
            leader_of_host,
            process,
        }
    }

    /// Whether this process does its host's duties.
    pub fn leads_its_host(&self) -> bool {
        self.leader_of_host[self.host_of_process[self.process]] == self.process
    }

    /// This process's place among its host's processes (0 for the first).
    pub fn place_on_host(&self) -> usize {
        let host = self.host_of_process[self.process];
        self.host_of_process[..self.process]
            .iter()
            .filter(|&&h| h == host)
            .count()
    }

    /// Processes on the host of process 0 (DLIO's `npernode` for rank 0).
    pub fn processes_on_first_host(&self) -> usize {
        self.host_of_process.iter().filter(|&&h| h == 0).count()
    }

    /// Total memory of all hosts, in bytes.
    pub fn total_memory_bytes(&self) -> u64 {
        self.hosts.iter().map(|h| h.memory_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(name: &str, gib: u64) -> HostFacts {
        HostFacts {
            hostname: name.into(),
            memory_bytes: gib << 30,
            cpu_count: 8,
        }
    }

    #[test]
    fn processes_are_grouped_by_host_in_order_of_their_first_process() {
        // --map-by node: processes alternate between the hosts.
        let all = vec![
            facts("a", 16),
            facts("b", 32),
            facts("a", 16),
            facts("b", 32),
        ];
        let hosts = Hosts::from_processes(all.clone(), 2);
        assert_eq!(hosts.hosts, vec![facts("a", 16), facts("b", 32)]);
        assert_eq!(hosts.host_of_process, vec![0, 1, 0, 1]);
        assert_eq!(hosts.leader_of_host, vec![0, 1]);
        assert!(!hosts.leads_its_host());
        assert!(Hosts::from_processes(all.clone(), 1).leads_its_host());
        assert_eq!(hosts.processes_on_first_host(), 2);
        assert_eq!(hosts.total_memory_bytes(), 48 << 30);
    }
}
