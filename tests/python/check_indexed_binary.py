#!/usr/bin/env python3
"""Checks an indexed_binary dataset with numpy, as DLIO's reader and Megatron read it.

Usage:
  check_indexed_binary.py FOLDER EXPECT_JSON

EXPECT_JSON, e.g. '{"files": 3, "samples_per_file": 4, "sample_bytes": 1024}':
  files             number of data files (`*.indexed_binary` or `*.mmap_indexed_binary`) under
                    FOLDER (recursively)
  samples_per_file  samples (S) in every file
  sample_bytes      bytes (B) of every sample

Every data file must have `.off.idx` and `.sz.idx` beside it holding S little-endian uint64 each;
the offsets must be the running sum of the sizes, every size B, the data file exactly S x B bytes,
and its last sample readable through a memory map. No temporary file (name starting with '.' or
ending '.tmp') may be left.

Prints one line per failure and a final "N passed, M failed" line; exits 0 only when everything
passed, 1 on a failed check, 2 on bad arguments, 3 when numpy is missing.
"""

import os
import sys

import checks_common


def check_file(np, path, expect):
    """A list of error messages about one data file and its index."""
    s, b = expect["samples_per_file"], expect["sample_bytes"]
    try:
        offsets = np.fromfile(path + ".off.idx", dtype="<u8")
        sizes = np.fromfile(path + ".sz.idx", dtype="<u8")
    except OSError as e:
        return [f"cannot read its index: {e}"]
    if len(offsets) != s or len(sizes) != s:
        return [f"{len(offsets)} offsets, {len(sizes)} sizes, expected {s}"]
    errors = []
    if not (sizes == b).all():
        errors.append(f"sizes {sizes.tolist()}, expected {b} each")
    if not (offsets == np.concatenate([[0], np.cumsum(sizes)[:-1]])).all():
        errors.append(f"offsets {offsets.tolist()} are not the running sum of sizes")
    size = os.path.getsize(path)
    if size != s * b:
        errors.append(f"{size} bytes, expected {s * b}")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    last = data[int(offsets[-1]) : int(offsets[-1] + sizes[-1])]
    if len(last) != b:
        errors.append(f"the last sample has {len(last)} bytes")
    return errors


def main(argv):
    folder, expect = checks_common.folder_and_expect(
        argv, __doc__, lambda text: checks_common.counts(
            text, ("files", "samples_per_file", "sample_bytes")))
    (np,) = checks_common.modules("numpy", "numpy")
    # Both formats' names end so: `.indexed_binary` and `.mmap_indexed_binary`.
    return checks_common.check_files(
        folder, "indexed_binary", expect["files"], lambda path: check_file(np, path, expect),
        suffix="indexed_binary")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
