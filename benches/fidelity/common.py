"""What the real loops share: DLIO's accounting of a training epoch (dlio_benchmark's
main.py `_train` and utils/statscounter.py), so that every column of the fidelity benchmark
counts AU the same way.

DLIO starts the block's clock before it makes the loader, starts a step's clock ("loading")
before it asks the loader for a batch, times the compute around the accelerator's stand-in,
and takes the first step out of the window: AU = the compute of steps 2.. over the block's
time less the first step's (load + compute) time.
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


def report(figures, path):
    """Writes the figures to `path` (the benchmark reads them there)."""
    with open(path, "w") as f:
        json.dump(figures, f)
