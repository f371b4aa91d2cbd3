#!/usr/bin/env python3
"""Checks an indexed_binary dataset folder with numpy, as DLIO's reader and Megatron read it.

usage: check_indexed_binary.py FOLDER EXPECT_JSON
EXPECT_JSON: {"files": N, "samples_per_file": S, "sample_bytes": B}
Every `train/*.indexed_binary` (or `.mmap_indexed_binary`) file must have `.off.idx` and `.sz.idx`
beside it holding S little-endian uint64 each; the offsets must be the running sum of the sizes,
every size B, and the data file exactly S x B bytes.
"""
import glob
import json
import os
import sys

import numpy as np


def main():
    folder, expect = sys.argv[1], json.loads(sys.argv[2])
    files = sorted(
        f
        for f in glob.glob(os.path.join(folder, "train", "**", "*"), recursive=True)
        if f.endswith("indexed_binary")
    )
    problems = []
    if len(files) != expect["files"]:
        problems.append(f"{len(files)} data files, expected {expect['files']}")
    for path in files:
        offsets = np.fromfile(path + ".off.idx", dtype="<u8")
        sizes = np.fromfile(path + ".sz.idx", dtype="<u8")
        size = os.path.getsize(path)
        s, b = expect["samples_per_file"], expect["sample_bytes"]
        if len(offsets) != s or len(sizes) != s:
            problems.append(f"{path}: {len(offsets)} offsets, {len(sizes)} sizes, expected {s}")
            continue
        if not (sizes == b).all():
            problems.append(f"{path}: sizes {sizes.tolist()}, expected {b} each")
        if not (offsets == np.concatenate([[0], np.cumsum(sizes)[:-1]])).all():
            problems.append(f"{path}: offsets {offsets.tolist()} are not the running sum of sizes")
        if size != s * b:
            problems.append(f"{path}: {size} bytes, expected {s * b}")
        data = np.memmap(path, dtype=np.uint8, mode="r")
        last = data[int(offsets[-1]) : int(offsets[-1] + sizes[-1])]
        if len(last) != b:
            problems.append(f"{path}: the last sample has {len(last)} bytes")
    for p in problems:
        print("FAIL", p)
    print(f"{len(files)} files checked, {len(problems)} problems")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
