//! Which counts a sweep tries. Every count is a multiple of the sweep's unit (of `--step`, and
//! of the MPI processes, which host a trial's ranks evenly); the bounds are checked against it,
//! and against the checkpoint layout, before any trial. The search is a bisection: both bounds
//! first, then halves on the unit between the most that passed and the fewest that failed, until
//! they are `--precision` (or a unit) apart. It is sound because both AU and a rank's checkpoint
//! throughput only fall as ranks are added once the storage is the bottleneck.

use super::record::{Sweep, SweepRequest};
use crate::config::Config;
use crate::error::{Error, Result};

impl Sweep {
    /// The fewest accelerators tried: the first trial.
    pub fn min(&self) -> u64 {
        self.request
            .min
            .unwrap_or_else(|| unit(&self.request, self.processes))
    }
}

/// The bounds must be counts the sweep can try: multiples of its unit, in order.
pub(super) fn check_bounds(
    request: &SweepRequest,
    min: u64,
    unit: u64,
    processes: u64,
) -> Result<()> {
    let on_unit = |n: u64| n % unit == 0;
    if min == 0
        || request.step == 0
        || min > request.max
        || request.precision == 0
        || !on_unit(min)
        || !on_unit(request.max)
        || !(request.hold > 0.0 && request.hold <= 1.0)
    {
        let unit_is = match processes {
            1 => format!("--step ({})", request.step),
            p => format!(
                "{unit} (of --step ({}) and of the {p} MPI processes, which host a trial's ranks \
                 evenly)",
                request.step
            ),
        };
        return Err(Error::usage(format!(
            "the bounds must satisfy 1 ≤ --min-accelerators ({min}) ≤ --max-accelerators ({}), \
             both multiples of {unit_is}; --precision ({}) must be at least 1 and --hold ({}) a \
             share in (0, 1]",
            request.max, request.precision, request.hold
        )));
    }
    Ok(())
}

/// The next count to try, given the most that passed and the fewest that failed so far: both
/// ends first, then halves (on the unit), until they are `precision` (or a unit) apart.
pub(super) fn next_count(
    request: &SweepRequest,
    unit: u64,
    passing: Option<u64>,
    failing: Option<u64>,
) -> Option<u64> {
    match (passing, failing) {
        (None, None) => Some(request.min.unwrap_or(unit)),
        (None, Some(_)) => None,
        (Some(p), None) if p == request.max => None,
        (Some(_), None) => Some(request.max),
        (Some(p), Some(f)) if f - p > request.precision && f - p > unit => {
            Some(p + (f - p) / 2 / unit * unit)
        }
        _ => None,
    }
}

/// The most trials still to run, `n` (the next) included, however they turn out: the sweep's
/// progress.
pub(super) fn trials_left(
    request: &SweepRequest,
    unit: u64,
    passing: Option<u64>,
    failing: Option<u64>,
    n: u64,
) -> u64 {
    // Halvings of a gap between a pass and a failure; the larger part is the longer.
    let halvings = |mut gap: u64| {
        let mut trials = 0;
        while gap > request.precision && gap > unit {
            let half = gap / 2 / unit * unit;
            if half == 0 {
                break;
            }
            gap -= half;
            trials += 1;
        }
        trials
    };
    1 + match (passing, failing) {
        // The lower bound; if it passes, the upper, then the halvings between.
        (None, _) if n < request.max => 1 + halvings(request.max - n),
        (None, _) => 0,
        (Some(p), None) => halvings(n - p),
        (Some(p), Some(f)) => halvings(n - p).max(halvings(f - n)),
    }
}

/// A workload that checkpoints needs counts its checkpoint can be laid out on: whole model
/// replicas (tensor × pipeline ranks each) in the default mode, so every count the sweep may try
/// must be a multiple of a replica; and the bounds pass the layout's other checks (a subset's
/// size). Said before any trial, not at a midpoint.
pub(super) fn check_checkpoint_counts(
    config: &Config,
    request: &SweepRequest,
    min: u64,
    unit: u64,
) -> Result<()> {
    if !config.workflow.checkpoint {
        return Ok(());
    }
    let parallelism = &config.model.parallelism;
    let replica = parallelism
        .tensor
        .saturating_mul(parallelism.pipeline)
        .max(1);
    if config.checkpoint.mode == crate::config::CheckpointMode::Default && unit % replica != 0 {
        return Err(Error::usage(format!(
            "this workload's checkpoints need whole model replicas of \
             workload.model.parallelism.tensor × pipeline = {} × {} = {replica} ranks, and the \
             sweep would try counts that are not multiples of {replica}: add --step {} (bounds \
             on it too)",
            parallelism.tensor,
            parallelism.pipeline,
            least_common_multiple(request.step.max(1), replica)
        )));
    }
    for n in [min, request.max] {
        crate::checkpoint::Geometry::new(config, n)
            .map_err(|e| Error::usage(format!("a trial of {n} accelerator(s): {e}")))?;
    }
    Ok(())
}

/// Every count the sweep tries is a multiple of this: of `--step` and of the processes, which
/// host a trial's ranks evenly.
pub(super) fn unit(request: &SweepRequest, processes: u64) -> u64 {
    least_common_multiple(request.step.max(1), processes)
}

pub(super) fn least_common_multiple(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::record::request;

    #[test]
    fn the_unit_is_a_multiple_of_the_step_and_of_the_processes() {
        assert_eq!(least_common_multiple(1, 1), 1);
        assert_eq!(least_common_multiple(1, 3), 3);
        assert_eq!(least_common_multiple(8, 2), 8);
        assert_eq!(least_common_multiple(4, 6), 12);
        // Bounds on the unit pass; off it, the error names the processes' share.
        assert_eq!(check_bounds(&request(1), 2, 2, 2), Ok(()));
        let Err(Error::Usage(message)) = check_bounds(&request(1), 3, 2, 2) else {
            panic!("3 accelerators in 2 processes accepted");
        };
        assert!(message.contains("--min-accelerators (3)"), "{message}");
        assert!(
            message.contains("of --step (1) and of the 2 MPI processes"),
            "{message}"
        );
        let off_step = SweepRequest {
            max: 6,
            ..request(4)
        };
        let Err(Error::Usage(message)) = check_bounds(&off_step, 4, 4, 1) else {
            panic!("a maximum off the step accepted");
        };
        assert!(message.contains("multiples of --step (4)"), "{message}");
        assert!(check_bounds(&request(0), 1, 1, 1).is_err());
    }

    /// For every answer a storage could have (the most accelerators that pass), the bisection
    /// finds it, and the trials it runs never exceed what its progress promised at any step; the
    /// first promise is met by some answer.
    #[test]
    fn the_bisection_finds_every_answer_within_the_trials_it_announces() {
        for (min, max, step, processes, precision) in [
            (None, 12, 1, 1, 1),
            (None, 16, 1, 2, 1),
            (Some(3), 100, 1, 1, 1),
            (None, 64, 8, 1, 1),
            (None, 1000, 1, 1, 10),
            (Some(6), 96, 3, 2, 1),
        ] {
            let request = SweepRequest {
                min,
                max,
                step,
                precision,
                ..request(step)
            };
            let unit = unit(&request, processes);
            let lowest = request.min.unwrap_or(unit);
            let mut longest = 0;
            let mut first_promise = None;
            for answer in lowest - 1..=max {
                let (mut passing, mut failing) = (None, None);
                let mut trials = 0;
                let mut next = next_count(&request, unit, None, None);
                while let Some(n) = next {
                    assert_eq!(n % unit, 0, "{n} is off the unit {unit}");
                    let promised = trials + trials_left(&request, unit, passing, failing, n);
                    first_promise.get_or_insert(promised);
                    trials += 1;
                    if n <= answer {
                        passing = Some(n);
                    } else {
                        failing = Some(n);
                    }
                    next = next_count(&request, unit, passing, failing);
                    assert!(trials <= promised, "{request:?}, answer {answer}");
                }
                longest = longest.max(trials);
                // The answer lies between the last pass and the first failure, within precision.
                match (passing, failing) {
                    (Some(p), Some(f)) => {
                        assert!(p <= answer && answer < f, "{request:?}, answer {answer}");
                        assert!(f - p <= precision.max(unit), "{request:?}, answer {answer}");
                    }
                    (Some(p), None) => assert_eq!(p, max),
                    (None, Some(f)) => assert!(f == lowest && answer < lowest),
                    (None, None) => unreachable!(),
                }
            }
            assert_eq!(first_promise, Some(longest), "{request:?}");
        }
    }
}
