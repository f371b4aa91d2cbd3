#!/usr/bin/env python3
"""Reads a parquet file as DLIO's (MLPerf fork) parquet reader does, for a request-stream
comparison under strace: the file opened once with pyarrow.parquet.ParquetFile, then every row
group read with read_row_group(g, columns), in order.

Usage:
  pyarrow_row_groups.py FILE COLUMNS

COLUMNS is a comma-separated list of the columns to read (those marked `read: true`).
"""

import sys

import pyarrow.parquet as pq


def main() -> None:
    path, columns = sys.argv[1], sys.argv[2].split(",")
    parquet = pq.ParquetFile(path)
    rows = 0
    for group in range(parquet.num_row_groups):
        rows += parquet.read_row_group(group, columns=columns).num_rows
    if rows != parquet.metadata.num_rows:
        sys.exit(f"{path}: read {rows} rows of {parquet.metadata.num_rows}")


if __name__ == "__main__":
    main()
