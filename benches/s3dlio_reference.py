#!/usr/bin/env python3
"""s3dlio reference client for the dlio-rs S3 benchmark (benches/).

Runs the s3dlio side of a side-by-side GET/PUT comparison (same server, same
objects, same concurrency) and prints ONE JSON line on stdout:

  {"op": "get"|"put", "objects": n, "bytes": b, "seconds": s,
   "cpu_seconds": c, "mib_per_s": ..., "cpu_ms_per_mib": ..., "client": "s3dlio X.Y.Z", ...}

Usage:
  s3dlio_reference.py get --bucket B --keys-file F [--threads T] [--max-in-flight M]
                          [--expect-size BYTES]
  s3dlio_reference.py put --bucket B --prefix P --count N --size BYTES [--max-in-flight M]
  s3dlio_reference.py ckpt --bucket B --like SAVED_PREFIX --prefix P [--part-mib 16]
                           [--parts-in-flight 8] [--range-split]

Connection settings come from the environment, as s3dlio reads them:
AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION.

How s3dlio is driven (--strategy auto, the default; measured on s3dlio 0.10.0
against SeaweedFS, see the notes at the end):
  * get: whole-object GETs through s3dlio.get_many(uris, max_in_flight=M), the
    call MLPerf Storage v3's DLIO S3 readers use (_prefetch_s3dlio). The key
    list is fed in batches so memory stays bounded: the first batch is one wave
    of M keys; its mean object size then sizes later batches to about
    --batch-mib (64) MiB, at least --min-waves (4) x M and at most --max-batch
    (4096) keys. Each batch is verified and released before the next. Small batches are also
    faster: one get_many over 20,000 x 112 KiB took 2.06 CPU-ms/MiB and 2.5 GiB
    RSS vs 1.22 CPU-ms/MiB and 150 MiB RSS in 64 MiB batches.
    If such a batch would exceed --max-batch-mib (1024) MiB (large objects:
    batches of ~1 wave would drain the pipeline at every boundary), the rest is
    fetched continuously: M Python threads each call s3dlio.get(uri) (it
    releases the GIL), so M requests stay in flight and at most M objects are
    held. Reported as strategy "get_many+threads".
  * put: s3dlio.put_many([(uri, buf), ...], max_in_flight=M), batches of
    max(16*M, 4096) items, one PUT per object. The payload is one immutable
    `bytes` generated once (outside the timing) and shared by every object:
    s3dlio never copies exact `bytes`, so CPU measures the client, not a
    generator. --multipart-part-mib P uploads objects larger than P MiB with
    MultipartUploadWriter instead (as DLIO's s3dlio storage does above 32 MiB),
    --multipart-parts-in-flight parts per object (default 1, keeping <= M
    requests in flight; DLIO uses 8).
  --strategy get_many / threads / put_many / multipart force one method.

s3dlio environment this script sets before importing s3dlio:
  S3DLIO_ENABLE_RANGE_OPTIMIZATION=0 (unless already set; --range-split sets 1):
      one plain GET per object. s3dlio's default (1) makes get_many first HEAD
      every object ("pre-stat"), then split objects >= 32 MiB
      (S3DLIO_RANGE_THRESHOLD_MB) into concurrent range GETs, so more than M
      requests are in flight. On 2,000 x 112 KiB it cut throughput ~30% (255 vs
      370 MiB/s, M=8); on 128 MiB objects over loopback splitting was ~10%
      slower. MLPerf/DLIO tuning notes for s3dlio recommend disabling it too.
  S3DLIO_RT_THREADS (Tokio workers) only with --rt-threads. s3dlio's default is
      max(4, cores); 2 and 8 were not faster than the default on a 2-core box.
  OMPI_COMM_WORLD_SIZE, PMI_SIZE, WORLD_SIZE are removed from this process's
      environment: s3dlio divides its Tokio threads by that world size at import
      (configure_tokio_threads), but this one process carries the whole run's
      concurrency (ranks x threads), not one rank's share.
Timing and getrusage (RUSAGE_SELF: covers s3dlio's Rust threads) deltas cover
only the transfer. Import, key-file parsing, payload generation and runtime
start-up are excluded: one 1-byte GET (or PUT) before the clock starts builds
the Tokio runtime and the S3 client. Opening the other M-1 connections is
inside the timing.
"""

import argparse
import json
import os
import resource
import sys
import threading
import time

MIB = 1024 * 1024


def die(msg):
    sys.stderr.write(f"s3dlio_reference: error: {msg}\n")
    sys.stderr.flush()
    sys.exit(1)


def cpu_now():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def emit(op, objects, nbytes, seconds, cpu, client, extra):
    mib = nbytes / MIB
    out = {
        "op": op,
        "objects": objects,
        "bytes": nbytes,
        "seconds": round(seconds, 6),
        "cpu_seconds": round(cpu, 6),
        "mib_per_s": round(mib / seconds, 3) if seconds > 0 else None,
        "cpu_ms_per_mib": round(cpu * 1000.0 / mib, 4) if mib > 0 else None,
        "client": client,
        "max_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
    }
    out.update(extra)
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()


def import_s3dlio(args):
    # Env defaults must be in place before s3dlio reads them (it caches them
    # once per process, on first use).
    if args.range_split:
        os.environ["S3DLIO_ENABLE_RANGE_OPTIMIZATION"] = "1"
    else:
        os.environ.setdefault("S3DLIO_ENABLE_RANGE_OPTIMIZATION", "0")
    if args.rt_threads:
        os.environ["S3DLIO_RT_THREADS"] = str(args.rt_threads)
    for v in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "WORLD_SIZE"):
        os.environ.pop(v, None)
    for v in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        if not os.environ.get(v) and not os.environ.get(v + "_S3"):
            sys.stderr.write(f"s3dlio_reference: warning: {v} is not set\n")
    try:
        import s3dlio  # noqa: WPS433
    except ImportError as e:
        die(f"cannot import s3dlio ({e}); install: python3 -m pip install "
            "--break-system-packages s3dlio")
    ver = getattr(s3dlio, "__version__", None)
    if not ver:
        try:
            from importlib.metadata import version
            ver = version("s3dlio")
        except Exception:  # pragma: no cover
            ver = "unknown"
    return s3dlio, f"s3dlio {ver}"


def env_info():
    keys = ("S3DLIO_ENABLE_RANGE_OPTIMIZATION", "S3DLIO_RT_THREADS",
            "S3DLIO_RANGE_THRESHOLD_MB", "S3DLIO_SKIP_HEAD", "S3DLIO_H2C")
    return {k: os.environ[k] for k in keys if k in os.environ}


def read_keys(path):
    keys, expect = [], []
    try:
        with open(path, "r", encoding="utf-8") as f:
            for ln, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    continue
                keys.append(parts[0])
                expect.append(int(parts[1]) if len(parts) > 1 else None)
    except (OSError, ValueError) as e:
        die(f"cannot read keys file {path}: {e}")
    return keys, expect


def uri_of(bucket, key):
    return f"s3://{bucket}/{key.lstrip('/')}"


def run_threads(n_threads, items, fn):
    """Run fn(item) for every item on n_threads Python threads (s3dlio calls
    release the GIL, so this keeps n_threads requests in flight). Returns the
    list of fn results in item order; re-raises the first exception."""
    results = [None] * len(items)
    nxt = [0]
    lock = threading.Lock()
    err = []

    def worker():
        while True:
            with lock:
                if err or nxt[0] >= len(items):
                    return
                i = nxt[0]
                nxt[0] += 1
            try:
                results[i] = fn(items[i])
            except BaseException as e:  # noqa: B902
                with lock:
                    err.append((i, e))
                return

    ts = [threading.Thread(target=worker, daemon=True) for _ in range(min(n_threads, len(items)))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if err:
        i, e = err[0]
        raise RuntimeError(f"item {i}: {e}") from e
    return results


# --------------------------------------------------------------------- get ---

def cmd_get(args):
    m = args.max_in_flight or max(1, args.threads)
    keys, expect = read_keys(args.keys_file)
    if not keys:
        die(f"keys file {args.keys_file} is empty")
    if args.expect_size is not None:
        expect = [e if e is not None else args.expect_size for e in expect]
    uris = [uri_of(args.bucket, k) for k in keys]
    s3dlio, client = import_s3dlio(args)

    # Warm-up outside the timed region: starts the Tokio runtime and builds the
    # S3 client (one small ranged GET of the first object).
    try:
        s3dlio.get_range(uris[0], 0, 1)
    except Exception as e:
        die(f"warm-up GET of {uris[0]} failed: {e}")

    budget = args.batch_mib * MIB
    cap = args.max_batch_mib * MIB
    total = 0
    n_done = 0
    short = []
    batches = 0

    def check(i0, lens):
        nonlocal total, n_done
        for j, ln in enumerate(lens):
            i = i0 + j
            total += ln
            n_done += 1
            e = expect[i]
            if (e is not None and ln != e) or (e is None and ln == 0 and not args.allow_empty):
                short.append((keys[i], ln, e))

    strategy = "get_many" if args.strategy == "auto" else args.strategy
    c0 = cpu_now()
    t0 = time.perf_counter()
    try:
        i = 0
        if strategy == "get_many":
            # First batch: one wave of M objects through get_many; its mean
            # object size sizes the following batches.
            batch = m
            while i < len(uris):
                chunk = uris[i:i + batch]
                res = s3dlio.get_many(chunk, max_in_flight=min(m, len(chunk)))
                if len(res) != len(chunk):
                    die(f"get_many returned {len(res)} results for {len(chunk)} keys")
                lens = [len(d) for _, d in res]
                del res
                check(i, lens)
                i += len(chunk)
                batches += 1
                avg = max(1, sum(lens) // max(1, len(lens)))
                # Next batch: ~--batch-mib of data, but at least --min-waves
                # waves of M (each batch end drains the pipeline once).
                batch = max(args.min_waves * m, min(args.max_batch, budget // avg))
                if args.strategy == "auto" and batch * avg > cap and i < len(uris):
                    # Objects too large for multi-wave batches within the
                    # memory cap: fetch the rest continuously, one
                    # s3dlio.get per object on M threads (<= M objects held).
                    strategy = "get_many+threads"
                    break
        if strategy in ("threads", "get_many+threads") and i < len(uris):
            lens = run_threads(m, uris[i:], lambda u: len(s3dlio.get(u)))
            check(i, lens)
            i = len(uris)
    except SystemExit:
        raise
    except Exception as e:
        die(f"GET failed (missing object or transport error): {e}")
    seconds = time.perf_counter() - t0
    cpu = cpu_now() - c0

    if n_done != len(uris):
        die(f"fetched {n_done} of {len(uris)} objects")
    if short:
        k, got, want = short[0]
        die(f"{len(short)} object(s) with wrong size (missing bytes), e.g. {k}: got {got} bytes"
            + (f", expected {want}" if want is not None else ""))
    emit("get", n_done, total, seconds, cpu, client,
         {"max_in_flight": m, "strategy": strategy, "batches": batches,
          "env": env_info()})


def cmd_put(args):
    m = args.max_in_flight or 1
    if args.count <= 0 or args.size < 0:
        die("--count must be > 0 and --size >= 0")
    prefix = args.prefix.strip("/")
    uris = [uri_of(args.bucket, f"{prefix}/obj_{i:08d}" if prefix else f"obj_{i:08d}")
            for i in range(args.count)]
    s3dlio, client = import_s3dlio(args)
    # One immutable buffer, generated once (outside the timed region) and
    # shared by every object: exact `bytes` are never copied by s3dlio.
    buf = os.urandom(args.size) if args.size else b""
    try:
        s3dlio.put_bytes(uri_of(args.bucket, f"{prefix}/.warmup" if prefix else ".warmup"), b"x")
    except Exception as e:
        die(f"warm-up PUT to bucket {args.bucket} failed (does the bucket exist?): {e}")

    part = args.multipart_part_mib * MIB if args.multipart_part_mib else 0
    strategy = args.strategy
    if strategy == "auto":
        strategy = "multipart" if part and args.size > part else "put_many"
    if strategy == "multipart" and not part:
        die("--strategy multipart needs --multipart-part-mib")
    mv = memoryview(buf)

    def put_mpu(u):
        w = s3dlio.MultipartUploadWriter.from_uri(
            u, part_size=part, max_in_flight=args.multipart_parts_in_flight,
            abort_on_drop=True)
        try:
            for off in range(0, len(mv), part):
                w.write(mv[off:off + part])
            w.close()
        except BaseException:
            w.abort()
            raise

    batches = 0
    c0 = cpu_now()
    t0 = time.perf_counter()
    try:
        if strategy == "put_many":
            # The item list is cheap (the payload is shared), so batches are
            # large: only the last one drains the pipeline.
            step = max(16 * m, args.max_batch)
            for i in range(0, len(uris), step):
                chunk = uris[i:i + step]
                s3dlio.put_many([(u, buf) for u in chunk], max_in_flight=min(m, len(chunk)))
                batches += 1
        elif strategy == "threads":
            run_threads(m, uris, lambda u: s3dlio.put_bytes(u, buf))
        elif strategy == "multipart":
            run_threads(m, uris, put_mpu)
        else:
            die(f"strategy {strategy} not supported for put")
    except SystemExit:
        raise
    except Exception as e:
        die(f"PUT failed: {e}")
    seconds = time.perf_counter() - t0
    cpu = cpu_now() - c0
    extra = {"max_in_flight": m, "strategy": strategy, "batches": batches, "env": env_info()}
    if strategy == "multipart":
        extra["multipart_part_mib"] = args.multipart_part_mib
        extra["multipart_parts_in_flight"] = args.multipart_parts_in_flight
    emit("put", len(uris), len(uris) * args.size, seconds, cpu, client, extra)


def cmd_ckpt(args):
    """One rank's checkpoint, saved then loaded: objects of the sizes of the objects under
    --like (a checkpoint dlio-rs saved), written one after another as DLIO's s3dlio storage
    writes them (MultipartUploadWriter above --part-mib, --parts-in-flight parts at once;
    put_bytes below), then read back one after another with s3dlio.get (checked for size)."""
    s3dlio, client = import_s3dlio(args)
    like = args.like.rstrip("/") + "/"
    listed = s3dlio.list(uri_of(args.bucket, like), recursive=True)
    names = sorted(n for n in listed if not n.rstrip("/").endswith(".dlio-rs.lock"))
    if not names:
        die(f"no objects under s3://{args.bucket}/{like}")
    full = [n if n.startswith("s3://") else uri_of(args.bucket, n) for n in names]
    sizes = [int(s3dlio.stat(u)["size"]) for u in full]
    prefix = args.prefix.strip("/")
    uris = [uri_of(args.bucket, f"{prefix}/file_{i:04d}") for i in range(len(sizes))]
    part = args.part_mib * MIB
    # The payloads, made once outside the timing: immutable bytes s3dlio never copies.
    buf = os.urandom(max(sizes))
    small = {n: buf[:n] for n in set(sizes) if n <= part}
    mv = memoryview(buf)
    try:
        s3dlio.put_bytes(uri_of(args.bucket, f"{prefix}/.warmup"), b"x")
    except Exception as e:
        die(f"warm-up PUT to bucket {args.bucket} failed: {e}")

    c0 = cpu_now()
    t0 = time.perf_counter()
    try:
        for u, n in zip(uris, sizes):
            if n <= part:
                s3dlio.put_bytes(u, small[n])
                continue
            w = s3dlio.MultipartUploadWriter.from_uri(
                u, part_size=part, max_in_flight=args.parts_in_flight, abort_on_drop=True)
            try:
                for off in range(0, n, part):
                    w.write(mv[off:min(off + part, n)])
                w.close()
            except BaseException:
                w.abort()
                raise
    except SystemExit:
        raise
    except Exception as e:
        die(f"checkpoint save failed: {e}")
    save_s = time.perf_counter() - t0
    save_cpu = cpu_now() - c0

    c0 = cpu_now()
    t0 = time.perf_counter()
    try:
        for u, n in zip(uris, sizes):
            got = len(s3dlio.get(u))
            if got != n:
                die(f"{u}: got {got} bytes, expected {n}")
    except SystemExit:
        raise
    except Exception as e:
        die(f"checkpoint load failed: {e}")
    load_s = time.perf_counter() - t0
    load_cpu = cpu_now() - c0
    total = sum(sizes)
    mib = total / MIB
    emit("ckpt", len(sizes), total, save_s + load_s, save_cpu + load_cpu, client,
         {"save_seconds": round(save_s, 6), "load_seconds": round(load_s, 6),
          "save_mib_per_s": round(mib / save_s, 3), "load_mib_per_s": round(mib / load_s, 3),
          "save_cpu_ms_per_mib": round(save_cpu * 1000 / mib, 4),
          "load_cpu_ms_per_mib": round(load_cpu * 1000 / mib, 4),
          "part_mib": args.part_mib, "parts_in_flight": args.parts_in_flight,
          "env": env_info()})


def main():
    p = argparse.ArgumentParser(
        description="s3dlio reference client for the dlio-rs S3 benchmark; "
                    "prints one JSON line on stdout.")
    sub = p.add_subparsers(dest="op", required=True)

    def common(sp):
        sp.add_argument("--bucket", required=True)
        sp.add_argument("--max-in-flight", type=int, default=None,
                        help="max concurrent requests (get: defaults to --threads; put: 1)")
        sp.add_argument("--strategy", default="auto",
                        choices=["auto", "get_many", "put_many", "threads", "multipart"],
                        help="how s3dlio is driven (default auto; see the module docstring)")
        sp.add_argument("--batch-mib", type=int, default=64,
                        help="get: target MiB of objects per get_many batch (default 64)")
        sp.add_argument("--min-waves", type=int, default=4,
                        help="get: min get_many batch = this many x M keys (default 4)")
        sp.add_argument("--max-batch-mib", type=int, default=1024,
                        help="get auto: if a min-size batch would exceed this many MiB, "
                             "use continuous per-object GETs on M threads (default 1024)")
        sp.add_argument("--max-batch", type=int, default=4096,
                        help="max objects per get_many/put_many call (default 4096)")
        sp.add_argument("--rt-threads", type=int, default=None,
                        help="set S3DLIO_RT_THREADS (Tokio workers); default: s3dlio's own")
        sp.add_argument("--range-split", action="store_true",
                        help="keep s3dlio's per-object HEAD + concurrent range splitting "
                             "of objects >= 32 MiB (S3DLIO_ENABLE_RANGE_OPTIMIZATION=1)")

    g = sub.add_parser("get", help="GET every key once, whole object")
    common(g)
    g.add_argument("--keys-file", required=True,
                   help="one object key per line (optional 2nd column: expected size in bytes)")
    g.add_argument("--threads", type=int, default=1,
                   help="reader threads; --max-in-flight defaults to this x 1")
    g.add_argument("--expect-size", type=int, default=None,
                   help="expected size of every object (fail if any differs)")
    g.add_argument("--allow-empty", action="store_true",
                   help="do not treat 0-byte objects as short")

    u = sub.add_parser("put", help="PUT N objects {prefix}/obj_{i:08d}")
    common(u)
    u.add_argument("--prefix", required=True)
    u.add_argument("--count", type=int, required=True)
    u.add_argument("--size", type=int, required=True)
    u.add_argument("--multipart-part-mib", type=int, default=0,
                   help="objects larger than this go through MultipartUploadWriter "
                        "with parts of this size (default 0: always one PUT per object)")
    u.add_argument("--multipart-parts-in-flight", type=int, default=1,
                   help="concurrent parts per multipart object (default 1, so at most "
                        "M requests in flight; DLIO's integration uses 8)")

    c = sub.add_parser("ckpt", help="save then load one rank's checkpoint files")
    common(c)
    c.add_argument("--like", required=True,
                   help="prefix of a saved checkpoint: the objects are written at its sizes")
    c.add_argument("--prefix", required=True, help="where this checkpoint is written")
    c.add_argument("--part-mib", type=int, default=16,
                   help="multipart part size in MiB; smaller objects are one PUT (default 16)")
    c.add_argument("--parts-in-flight", type=int, default=8,
                   help="concurrent parts per object (default 8, as DLIO's s3dlio storage)")

    args = p.parse_args()
    if args.max_in_flight is not None and args.max_in_flight < 1:
        die("--max-in-flight must be >= 1")
    if args.op == "get":
        if args.threads < 1:
            die("--threads must be >= 1")
        cmd_get(args)
    elif args.op == "put":
        cmd_put(args)
    else:
        cmd_ckpt(args)


if __name__ == "__main__":
    main()
