"""What the real loops share: DLIO's accounting of a training epoch (dlio_benchmark's
main.py `_train` and utils/statscounter.py), so that every column of the fidelity benchmark
counts AU the same way.

DLIO builds its loader before the epoch (`read()`: the torch DataLoader, the tf.data pipeline),
starts the block's clock, then iterates the loader (PyTorch forks its workers there), starts a
step's clock ("loading") before it asks the loader for a batch, times the compute around the
accelerator's stand-in, and ends the block right after the last step's compute, before it leaves
the loader (`end_block`, then `break`): what the framework does to end the iteration is outside
the window. It takes the first step out of the window: AU = the compute of steps 2.. over the
block's time less the first step's (load + compute) time.
"""

import json
import time


class Epoch:
    """One epoch's step times, kept as DLIO's StatsCounter keeps them."""

    def __init__(self):
        self.start = time.time()  # start_block
        self.loading = None
        self.load = []  # batch_loaded: seconds from asking for the batch to having it
        self.proc = []  # batch_processed: seconds from asking for the batch to its compute's end
        self.compute = []  # measured compute (sleep) seconds per step
        self.end = None

    def start_loading(self):
        self.loading = time.time()

    def step(self, compute_seconds):
        """A batch is in hand: record its load time, run the step's compute, record both."""
        loaded = time.time()
        self.load.append(loaded - self.loading)
        time.sleep(compute_seconds)
        done = time.time()
        self.compute.append(done - loaded)
        self.proc.append(done - self.loading)

    def finish(self, batch_size):
        """Ends the block; returns the figures as JSON-ready values."""
        self.end = time.time()
        window = self.end - self.start - (self.proc[0] if self.proc else 0.0)
        computed = sum(self.compute[1:])
        au = 100.0 * computed / window if computed > 0 else 0.0
        return {
            "au": au,
            "samples_per_second": (len(self.compute) - 1) * batch_size / window,
            "steps": len(self.compute),
            "epoch_seconds": self.end - self.start,
            "load_seconds": self.load,
        }


def train(loader, steps, compute_seconds, batch_size):
    """DLIO's `_train` over a loader built beforehand: `steps` steps, the block ended after the
    last one's compute and before the iterator is left (tf.data tears its pipeline down when its
    iterator goes, which on the 2-core VM took 1.1–1.5 s in some runs and 0.01 s in others:
    DLIO's block never holds it). Returns the figures; exits 1 if the loader runs out first."""
    epoch = Epoch()
    epoch.start_loading()
    for _batch in loader:
        epoch.step(compute_seconds)
        if len(epoch.compute) == steps:
            return epoch.finish(batch_size)
        epoch.start_loading()
    raise SystemExit(f"the loader ran out after {len(epoch.compute)} of {steps} steps")


def report(figures, path):
    """Writes the figures to `path` (the benchmark reads them there)."""
    with open(path, "w") as f:
        json.dump(figures, f)
