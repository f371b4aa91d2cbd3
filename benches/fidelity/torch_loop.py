"""The real PyTorch loop of the fidelity benchmark: a torch DataLoader over npz files as
DLIO's PyTorch loader builds it (dlio_benchmark/data_loader/torch_data_loader.py: DLIO's
sampler in index order, `num_workers = read_threads`, `prefetch_factor =
ceil(prefetch_size / read_threads)` or 2 where that is 0, persistent forked workers,
`drop_last`), each sample's `__getitem__` loading its whole file with `np.load` (DLIO's npz
reader reads `['x']`), and `time.sleep(compute)` per step as the accelerator.

usage: torch_loop.py OUT.json FOLDER BATCH READ_THREADS PREFETCH_SIZE COMPUTE_SECONDS
"""

import glob
import math
import os
import sys

import numpy as np
import torch  # noqa: F401 (the DataLoader's tensors)
from torch.utils.data import DataLoader, Dataset

from common import report, train


class NpzFiles(Dataset):
    """One sample per file, as DLIO's npz datasets have it (unet3d)."""

    def __init__(self, files):
        self.files = files

    def __len__(self):
        return len(self.files)

    def __getitem__(self, index):
        with np.load(self.files[index], allow_pickle=True) as npz:
            return npz["x"]


def main():
    out, folder, batch, threads, prefetch, compute = sys.argv[1:7]
    batch, threads, prefetch, compute = int(batch), int(threads), int(prefetch), float(compute)
    # DLIO's file list: the train folder's files in name order.
    files = sorted(glob.glob(os.path.join(folder, "train", "*.npz")))
    factor = math.ceil(prefetch / threads) if threads >= 1 else prefetch
    if factor <= 0:
        factor = 2
    kwargs = {}
    if threads > 0:
        kwargs = {
            "multiprocessing_context": "fork",
            "prefetch_factor": factor,
            "persistent_workers": True,
        }
    loader = DataLoader(
        NpzFiles(files),
        batch_size=batch,
        shuffle=False,
        num_workers=threads,
        drop_last=True,
        **kwargs,
    )
    # Built before the clock starts, as DLIO's TorchDataLoader.read() builds it before the
    # epoch; its workers fork when the loop first asks it for a batch, inside the block.
    report(train(loader, len(files) // batch, compute, batch), out)


if __name__ == "__main__":
    main()
