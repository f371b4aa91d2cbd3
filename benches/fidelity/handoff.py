"""The framework's own time per step, for dlio-rs's `++workload.reader.batch_handoff_time`: how long
a real loader takes to hand a batch that is ready to the training loop.

Runs the real loop of the fidelity benchmark (torch_loop.py: a PyTorch DataLoader as DLIO builds
it; tf_loop.py: DLIO's tf.data pipeline) over the dataset where it is, with the loader words given
and a compute time long enough that the storage never holds a step up (every batch is ready when
the loop asks for it). What `next()` then takes (DLIO's load time, steps 2..) is the framework's
machinery, not the storage's. Give the workload's loader words and its compute time, if the
storage keeps up with it (else the shortest compute time it keeps up with): the hand-off grows
with the time the loop sleeps between batches (on the 2-core VM the PyTorch loop's measured
higher at 0.75 s a step than at 0.5 s in 5 of 7 pairs of runs, by up to 2.3×). A median load above
a tenth of the compute time says the storage held steps up, and the script refuses it.

The loop runs `--runs` times (3 by default), each over cold data: the dataset's pages are evicted
first (posix_fadvise DONTNEED, which needs no root), so every run reads the storage as the
benchmark's runs do. Each run gives the median of its steps; the word printed is the median of the
runs' medians, with each run's figures on stderr. Medians, not means: a host's stalls (seconds long
on a shared VM) land in some steps of a run and not in others, and are not the framework's. Several
runs, not one: the framework's cost moves between runs minutes apart (on the 2-core VM the PyTorch
loop's median hand-off measured 4.3 ms in one run and 9.2 ms in the next), so one run is one draw.

Measure on the host and storage the runs will use: the hand-off depends on the host's CPUs and on
what the loader's workers do meanwhile (over page-cached files they decode on the CPUs the hand-off
needs: on the 2-core VM the npz loop's hand-off measured 9–14 ms over page-cached files, 3–9 ms over
the capped device).

usage: handoff.py [--runs N] torch FOLDER BATCH READ_THREADS PREFETCH_SIZE COMPUTE_SECONDS
       handoff.py [--runs N] tf FOLDER BATCH READ_THREADS PREFETCH_SIZE COMPUTE_SECONDS
                  SAMPLES_PER_FILE SHUFFLE_SIZE SEED COMPUTATION_THREADS
(run with the framework's Python: the fidelity benchmark's venv has both)
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

LOOPS = {"torch": "torch_loop.py", "tf": "tf_loop.py"}
# The runs' medians further apart than this ratio are reported: the hand-off is then a draw.
UNSTABLE = 1.5


def evict(folder):
    """Drops the dataset's pages from the page cache, so that the next run reads the storage."""
    for directory, _, names in os.walk(folder):
        for name in names:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def one_run(framework, folder, rest):
    """The load times of steps 2.. of one run of the real loop over cold data."""
    here = os.path.dirname(os.path.abspath(__file__))
    evict(folder)
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "figures.json")
        subprocess.run(
            [sys.executable, os.path.join(here, LOOPS[framework]), out, folder, *rest],
            check=True,
        )
        with open(out) as f:
            return json.load(f)["load_seconds"][1:]


def usage_error(message):
    """A usage error: the message on stderr, exit 2 (a failed measurement exits 1)."""
    print(message, file=sys.stderr)
    sys.exit(2)


def main():
    args = sys.argv[1:]
    runs = 3
    if args[:1] == ["--runs"]:
        if len(args) < 2 or not args[1].isdigit() or int(args[1]) < 1:
            usage_error("handoff.py: --runs takes a whole number of runs, 1 or more")
        runs, args = int(args[1]), args[2:]
    if len(args) < 6 or args[0] not in LOOPS:
        usage_error(__doc__)
    framework, folder, rest = args[0], args[1], args[2:]
    try:
        compute = float(rest[3])
    except ValueError:
        usage_error(f"handoff.py: COMPUTE_SECONDS is {rest[3]!r}; give seconds a step, as 0.5")
    medians = []
    for run in range(1, runs + 1):
        loads = one_run(framework, folder, rest)
        if len(loads) < 3:
            sys.exit("handoff.py: fewer than 4 steps; give a dataset of more batches")
        median = statistics.median(loads)
        if median > compute / 10:
            sys.exit(
                f"handoff.py: run {run}'s median load, {median * 1e3:.1f} ms, is over a tenth of "
                f"the compute time ({compute} s): the storage held steps up; give a longer compute"
            )
        quartiles = statistics.quantiles(loads, n=4)
        print(
            f"{framework} run {run}/{runs}: {len(loads)} steps, hand-off median {median * 1e3:.3f} "
            f"ms (quartiles {quartiles[0] * 1e3:.3f}–{quartiles[2] * 1e3:.3f} ms, mean "
            f"{statistics.fmean(loads) * 1e3:.3f} ms)",
            file=sys.stderr,
        )
        medians.append(median)
    handoff = statistics.median(medians)
    print(f"{framework}: hand-off {handoff * 1e3:.3f} ms (the median of {runs} runs)", file=sys.stderr)
    low, high = min(medians), max(medians)
    if runs > 1 and high > UNSTABLE * low:
        print(
            f"{framework}: warning: the runs' medians spread from {low * 1e3:.3f} to "
            f"{high * 1e3:.3f} ms: the framework's cost per step moves between runs on this host, "
            "so a run of the real loop may spend anywhere in that range; more --runs narrow the "
            "median, not the range",
            file=sys.stderr,
        )
    print(f"++workload.reader.batch_handoff_time={handoff:.6f}")


if __name__ == "__main__":
    main()
