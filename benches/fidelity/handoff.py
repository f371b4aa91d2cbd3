"""The framework's own time per step, for dlio-rs's `++workload.reader.batch_handoff_time`: how long
a real loader takes to hand a batch that is ready to the training loop.

Runs the real loop of the fidelity benchmark (torch_loop.py: a PyTorch DataLoader as DLIO builds
it; tf_loop.py: DLIO's tf.data pipeline) over the dataset where it is, with the loader words given
and a compute time long enough that the storage never holds a step up (every batch is ready when
the loop asks for it). What `next()` then takes (DLIO's load time, steps 2..) is the framework's
machinery, not the storage's: its median is printed as the dlio-rs word, with the mean and spread
on stderr. The median, not the mean: a host's stalls (seconds long on a shared VM) land in some
steps of a measurement and not in others, and are not the framework's. Give the workload's loader
words and a compute time well past the time a batch takes to read (3 × it serves); a median load
above a tenth of the compute time says the storage still held steps up, and the script refuses it.

Measure on the host and storage the runs will use: the hand-off depends on the host's CPUs and on
what the loader's workers do meanwhile (over page-cached files they decode on the CPUs the hand-off
needs: on the 2-core VM the npz loop's hand-off measured 9–14 ms over page-cached files, 7 ms over
the capped device).

usage: handoff.py torch FOLDER BATCH READ_THREADS PREFETCH_SIZE COMPUTE_SECONDS
       handoff.py tf FOLDER BATCH READ_THREADS PREFETCH_SIZE COMPUTE_SECONDS
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


def main():
    if len(sys.argv) < 7 or sys.argv[1] not in LOOPS:
        sys.exit(__doc__)
    framework, folder, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "figures.json")
        subprocess.run(
            [sys.executable, os.path.join(here, LOOPS[framework]), out, folder, *rest],
            check=True,
        )
        with open(out) as f:
            loads = json.load(f)["load_seconds"][1:]
    if len(loads) < 3:
        sys.exit("handoff.py: fewer than 4 steps; give a dataset of more batches")
    compute = float(rest[3])
    if statistics.median(loads) > compute / 10:
        sys.exit(
            f"handoff.py: the median load, {statistics.median(loads) * 1e3:.1f} ms, is over a tenth "
            f"of the compute time ({compute} s): the storage held steps up; give a longer compute"
        )
    quartiles = statistics.quantiles(loads, n=4)
    mean = statistics.fmean(loads)
    print(
        f"{framework}: {len(loads)} steps, hand-off mean {mean * 1e3:.3f} ms, median "
        f"{statistics.median(loads) * 1e3:.3f} ms (quartiles {quartiles[0] * 1e3:.3f}–"
        f"{quartiles[2] * 1e3:.3f} ms)",
        file=sys.stderr,
    )
    print(f"++workload.reader.batch_handoff_time={statistics.median(loads):.6f}")


if __name__ == "__main__":
    main()
