"""How long a PyTorch DataLoader takes to hand a ready batch to the training loop, by batch size.

The fidelity benchmark's real loops spend time per step on the training thread that dlio-rs does
not (docs/benchmarks.md, "Causes of the gaps"). This measures that time bare: a DataLoader of
`num_workers` forked workers (DLIO's settings), whose samples are in memory (no storage), a
`time.sleep(compute)` per step so that the next batch is ready, and the time `next()` takes to
return it; the median over the steps, for samples from 10 KiB to 6 MiB.

usage: python handoff.py  (with torch and numpy installed, e.g. the fidelity benchmark's venv)
"""

import statistics
import time

import numpy as np
from torch.utils.data import DataLoader, Dataset


class InMemory(Dataset):
    def __init__(self, samples, sample_bytes):
        self.samples = samples
        self.bytes = np.random.randint(0, 255, sample_bytes, dtype=np.uint8)

    def __len__(self):
        return self.samples

    def __getitem__(self, index):
        return self.bytes.copy()


def hand_off_ms(sample_bytes, batch=4, workers=4, steps=60, compute=0.05):
    loader = DataLoader(
        InMemory(steps * batch, sample_bytes),
        batch_size=batch,
        num_workers=workers,
        prefetch_factor=1,
        persistent_workers=True,
        multiprocessing_context="fork",
        drop_last=True,
    )
    batches = iter(loader)
    next(batches)
    took = []
    for _ in range(steps - 2):
        time.sleep(compute)
        start = time.perf_counter()
        next(batches)
        took.append(time.perf_counter() - start)
    return statistics.median(took) * 1e3


if __name__ == "__main__":
    for mib in [0.01, 0.1, 1, 3, 6]:
        print(f"4 samples of {mib} MiB: hand-off median {hand_off_ms(int(mib * 1048576)):.3f} ms")
