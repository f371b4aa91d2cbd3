#!/usr/bin/env python3
"""A hostile survey of dlio-rs: runs a few hundred tries against the binaries, each bounded in time
and memory, and classifies each one.

Classes (the first that applies wins):
  HANG        the try did not end within its time limit (its whole session is then killed), or an
              inner bounded step timed out
  PANIC       exit 101/134/139/..., killed by a signal, `panicked` or a failed allocation in stderr
  MIXED       a result that is not this run's, a file written outside the run's own paths (a
              bystander file changed), a claim of success for a run that failed
  WRONG-CODE  the exit code is not what policy says (2 usage/config/bad own files, 1 failed run,
              0 success, 128+signal for a stopped run), or a non-zero exit without a message
              naming the key/file/value
  OK

Usage: survey.py [--only CATEGORY[,CATEGORY]] [--jobs N] [--id SUBSTRING] [--list]
BIN_DIR (env) chooses the binaries (default: target/release of this repository, built with
`cargo build --release --features s3,mpi`); DLIO_RS_MPI_INIT_TIMEOUT=20 shortens the MPI tries.
Writes results.json in the current folder (or --out FILE).
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BIN_DIR = os.environ.get(
    "BIN_DIR", os.path.join(os.path.dirname(HERE), "target", "release")
)

CATEGORIES = ["mpi", "mixed", "shared", "paths", "readers", "words", "smaller", "fuzz"]
CAT_TITLES = {
    "mpi": "1 processes that disagree",
    "mixed": "2 results of two runs mixed",
    "shared": "3 shared folders",
    "paths": "4 paths the run does not own",
    "readers": "5 readers of our own files",
    "words": "6 words we build",
    "smaller": "7 smaller",
    "fuzz": "8 config fuzz",
}
CLASSES = ["PANIC", "HANG", "MIXED", "WRONG-CODE", "OK"]

# ---------------------------------------------------------------------------------------------
# The shell every try runs in: the binaries, quick word sets, helpers.
# ---------------------------------------------------------------------------------------------
PRELUDE = r'''
set -u
export LC_ALL=C.UTF-8
BIN="$BIN_DIR/dlio-rs"; BENCH="$BIN_DIR/dlio_benchmark"
cd "$W"
mkdir -p "$W/by"
SYN="workload=default ++workload.dataset.format=synthetic ++workload.train.epochs=1 ++workload.train.computation_time=0 ++workload.dataset.num_files_train=4 ++workload.reader.batch_size=1 ++workload.workflow.evaluation=False"
# a quick run that passes its AU threshold (summary.json says success)
SYNP="workload=default ++workload.dataset.format=synthetic ++workload.train.epochs=1 ++workload.train.computation_time=0.02 ++workload.dataset.num_files_train=8 ++workload.reader.batch_size=1 ++workload.workflow.evaluation=False"
# a run of about 7 s (24 steps of 0.3 s), to be stopped or shared
SLOW="workload=default ++workload.dataset.format=synthetic ++workload.train.epochs=3 ++workload.train.computation_time=0.3 ++workload.dataset.num_files_train=8 ++workload.reader.batch_size=1 ++workload.workflow.evaluation=False"
T="workload=default ++workload.dataset.num_files_train=3 ++workload.dataset.num_files_eval=0 ++workload.dataset.num_samples_per_file=2 ++workload.dataset.num_subfolders_train=0 ++workload.dataset.num_subfolders_eval=0 ++workload.dataset.record_length_bytes=4096 ++workload.dataset.record_length_bytes_stdev=0 ++workload.reader.batch_size=1 ++workload.train.epochs=1 ++workload.train.computation_time=0 ++workload.workflow.evaluation=False"
# T with 8 files and a slow step: a reader of a real dataset for ~5 s
TSLOW="workload=default ++workload.dataset.num_files_train=8 ++workload.dataset.num_files_eval=0 ++workload.dataset.num_samples_per_file=1 ++workload.dataset.num_subfolders_train=0 ++workload.dataset.num_subfolders_eval=0 ++workload.dataset.record_length_bytes=4096 ++workload.dataset.record_length_bytes_stdev=0 ++workload.reader.batch_size=1 ++workload.train.epochs=2 ++workload.train.computation_time=0.3 ++workload.workflow.evaluation=False ++workload.dataset.format=npy"
T8="workload=default ++workload.dataset.num_files_train=8 ++workload.dataset.num_files_eval=0 ++workload.dataset.num_samples_per_file=1 ++workload.dataset.num_subfolders_train=0 ++workload.dataset.num_subfolders_eval=0 ++workload.dataset.record_length_bytes=4096 ++workload.dataset.record_length_bytes_stdev=0 ++workload.reader.batch_size=1 ++workload.train.epochs=1 ++workload.train.computation_time=0 ++workload.workflow.evaluation=False ++workload.dataset.format=npy"
CK="workload=default ++workload.workflow.train=False ++workload.workflow.checkpoint=True ++workload.checkpoint.num_checkpoints_write=1 ++workload.checkpoint.num_checkpoints_read=1 ++workload.model.model_size_bytes=65536 ++workload.checkpoint.time_between_checkpoints=0"
# a checkpoint-only run of a few seconds (throttled link)
CKSLOW="workload=default ++workload.workflow.train=False ++workload.workflow.checkpoint=True ++workload.checkpoint.num_checkpoints_write=3 ++workload.checkpoint.num_checkpoints_read=0 ++workload.model.model_size_bytes=1048576 ++workload.checkpoint.time_between_checkpoints=1"
MPI="mpirun --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader"

# a step a try needs to pass before the tried command; exit 97 if it does not
ok() { "$@" >"$W/.ok.out" 2>"$W/.ok.err"; local rc=$?; if [ $rc -ne 0 ]; then echo "SURVEY-SETUP: exit $rc from: $*" >&2; head -c 800 "$W/.ok.err" >&2; exit 97; fi; }
# a T dataset of format $2 (default npy) in folder $1
mkds() { local d=$1 f=${2:-npy}; shift; shift; ok $BIN run -q $T ++workload.dataset.format=$f "++workload.dataset.data_folder=$d" ++workload.workflow.generate_data=True ++workload.workflow.train=False "++hydra.run.dir=$W/.gen" "$@"; }
# judge an inner step: chk NAME RC ERRFILE EXPECTED_CODES [TEXT...]
chk() {
  local name=$1 rc=$2 err=$3 exp=$4; shift 4
  if [ "$rc" = 124 ]; then echo "SURVEY-HANG: $name did not end in its bound" >&2; return; fi
  if grep -qa 'panicked\|memory allocation of' "$err" 2>/dev/null || [[ " 101 134 135 136 139 " == *" $rc "* ]]; then echo "SURVEY-PANIC: $name exit $rc: $(grep -a -m1 'panicked\|memory allocation' "$err")" >&2; return; fi
  if [[ ",$exp," != *",$rc,"* ]]; then echo "SURVEY-WRONG: $name exited $rc, expected one of $exp: $(head -c 300 "$err" | tr '\n' ' ')" >&2; return; fi
  if [ "$rc" != 0 ]; then for s in "$@"; do grep -qiF -- "$s" "$err" || echo "SURVEY-WRONG: $name (exit $rc) does not say '$s': $(head -c 300 "$err" | tr '\n' ' ')" >&2; done; fi
}
# run in the background: bgrun NAME CMD...; its exit code lands in $W/NAME.rc
bgrun() { local name=$1; shift; ( "$@" >"$W/$name.out" 2>"$W/$name.err"; echo $? >"$W/$name.rc" ) & eval "PID_$name=$!"; }
# the descendants of a pid (by parent id), and the newest dlio-rs among them
desc() { local p; for p in $(pgrep -P "$1"); do echo $p; desc $p; done; }
newest_dlio() { local p last=; for p in $(desc "$1"); do [ "$(cat /proc/$p/comm 2>/dev/null)" = dlio-rs ] && last=$p; done; echo $last; }
sig_newest() { local p; p=$(newest_dlio "$2"); [ -n "$p" ] && kill -s "$1" "$p"; }
rcof() { cat "$W/$1.rc" 2>/dev/null || echo 255; }
mixed() { echo "SURVEY-MIXED: $*" >&2; }
wrong() { echo "SURVEY-WRONG: $*" >&2; }
h() { sha256sum < "$1" 2>/dev/null | cut -c1-16; }
# remember an earlier run's files: remember DIR
remember() { mkdir -p "$W/.earlier"; for f in summary.json report.json report.html dlio.log trace/0.csv 1_output.json 0_output.json .hydra/config.yaml; do [ -f "$1/$f" ] && h "$1/$f" > "$W/.earlier/$(echo $f | tr / _)"; done; true; }
# after a later run into DIR that exited RC: nothing of the earlier run may stand as this one's
stale_check() {
  local d=$1 rc=$2
  for f in summary.json report.json report.html dlio.log trace/0.csv 1_output.json 0_output.json; do
    local k="$W/.earlier/$(echo $f | tr / _)"
    if [ -f "$k" ] && [ -f "$d/$f" ] && [ "$(h "$d/$f")" = "$(cat "$k")" ]; then mixed "the earlier run's $f is still in $d after a later run there exited $rc"; fi
  done
  if [ "$rc" != 0 ] && [ -f "$d/summary.json" ] && grep -q '"train_au_meet_expectation": "success"' "$d/summary.json"; then mixed "summary.json says train_au_meet_expectation success after a run that exited $rc"; fi
  if [ "$rc" != 0 ] && [ -f "$d/summary.json" ] && ! grep -q '"interrupted"\|"status"' "$d/summary.json" && [ -f "$d/report.json" ] && ! grep -q '"status": "complete"' "$d/report.json"; then mixed "summary.json of a run that exited $rc has no interrupted/status mark"; fi
  for c in "$d"/charts/0*-fake.png; do [ -e "$c" ] && mixed "an earlier run's chart $c is still there"; done
  true
}
# a manifest of the bystander folder (names, kinds, link targets, sizes and contents)
manifest() { ( cd "$W/by" && find . -mindepth 1 -printf '%y %p -> %l %s\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum ) 2>/dev/null; }
snap() { manifest > "$W/.by.before"; }
pyedit() { python3 - "$@"; }
# the command a refused run suggests ("generate the dataset with: dlio-rs run ..."), to the end of the message
hint() { python3 -c 'import sys; t=open(sys.argv[1]).read(); m="generate the dataset with: dlio-rs run "; print(t[t.index(m)+len(m):].rstrip("\n") if m in t else "")' "$1"; }
'''


class Try:
    def __init__(self, cat, id, cmd, setup="", expect=(0,), says=(), timeout=60, limit=True,
                 note="", signals_ok=False, bystander_ok=False):
        self.cat, self.id, self.cmd, self.setup = cat, id, cmd, setup
        self.expect = tuple(expect)
        if signals_ok:
            self.expect += (130, 143)
        self.says = tuple(says)
        self.timeout = timeout
        self.limit = limit  # 4 GB of address space for the whole try (not for mpirun/Chromium)
        self.note = note
        # the bystander is a path the user named: a change there is noted, not a failure
        self.bystander_ok = bystander_ok


TRIES = []


def add(*a, **k):
    TRIES.append(Try(*a, **k))


def q(s):
    """Shell-quote s."""
    return "'" + s.replace("'", "'\\''") + "'"


# =============================================================================================
# 1. processes that disagree (MPI)
# =============================================================================================
def cat_mpi():
    c = "mpi"
    # word sets per process; each expected exit 2 naming the key and the processes
    differ = [
        ("epochs", "++workload.train.epochs=1", "++workload.train.epochs=2", ["train.epochs", "process 1"]),
        ("batch", "++workload.reader.batch_size=1", "++workload.reader.batch_size=2", ["batch_size", "process"]),
        ("seed", "++workload.train.seed=1", "++workload.train.seed=2", ["seed", "process"]),
        ("compute", "++workload.train.computation_time=0", "++workload.train.computation_time=0.001", ["computation_time", "process"]),
        ("workflow-eval", "++workload.workflow.evaluation=False", "++workload.workflow.evaluation=True", ["evaluation", "process"]),
        ("read-threads", "++workload.reader.read_threads=1", "++workload.reader.read_threads=2", ["read_threads", "process"]),
        ("shuffle", "++workload.reader.sample_shuffle=off", "++workload.reader.sample_shuffle=random", ["sample_shuffle", "process"]),
        ("record-length", "++workload.dataset.record_length_bytes=4096", "++workload.dataset.record_length_bytes=8192", ["record_length_bytes", "process"]),
        ("files", "++workload.dataset.num_files_train=4", "++workload.dataset.num_files_train=6", ["num_files_train", "process"]),
        ("metric-au", "++workload.metric.au=0.9", "++workload.metric.au=0.5", ["metric.au", "process"]),
        ("output-folder", "++workload.output.folder=$W/oa", "++workload.output.folder=$W/ob", ["output.folder", "process"]),
        ("log-file", "++workload.output.log_file=a.log", "++workload.output.log_file=b.log", ["log_file", "process"]),
        ("model-name", "++workload.model.name=a", "++workload.model.name=b", ["model.name", "process"]),
        ("unicode-value", "++workload.model.name=a", "'++workload.model.name=\"é\"'", ["model.name", "process"]),
    ]
    for name, a, b, says in differ:
        add(c, f"mpi-differ-{name}",
            f"timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o {a} : -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o {b}",
            expect=(2,), says=says, limit=False, timeout=75)
    # format and data folder: real datasets
    add(c, "mpi-differ-format", "timeout 60 $MPI -n 1 $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/o : -n 1 $BIN run -q $T ++workload.dataset.format=npz ++workload.dataset.data_folder=$W/e ++hydra.run.dir=$W/o",
        setup="mkds $W/d npy; mkds $W/e npz", expect=(2,), says=["format", "process"], limit=False, timeout=75)
    add(c, "mpi-differ-data-folder", "timeout 60 $MPI -n 1 $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/o : -n 1 $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/e ++hydra.run.dir=$W/o",
        setup="mkds $W/d npy; mkds $W/e npy", expect=(2,), says=["data_folder", "process"], limit=False, timeout=75)
    add(c, "mpi-differ-data-folder-one-missing", "timeout 60 $MPI -n 1 $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/o : -n 1 $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/nothing ++hydra.run.dir=$W/o",
        setup="mkds $W/d npy", expect=(2,), says=["data_folder", "process"], limit=False, timeout=75)
    add(c, "mpi-differ-generate", "timeout 60 $MPI -n 1 $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++hydra.run.dir=$W/o : -n 1 $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/o",
        setup="mkds $W/d npy", expect=(2,), says=["generate_data", "process"], limit=False, timeout=75)
    add(c, "mpi-differ-workload", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run -q workload=unet3d_h100 ${SYN#workload=default} ++hydra.run.dir=$W/o",
        expect=(2,), says=["process"], limit=False, timeout=75)
    add(c, "mpi-differ-trace", "timeout 60 $MPI -n 1 $BIN run -q --trace $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o",
        expect=(2,), says=["trace", "process"], limit=False, timeout=75)
    add(c, "mpi-differ-verify", "timeout 60 $MPI -n 1 $BIN run -q --verify $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o",
        expect=(2,), says=["verify", "process"], limit=False, timeout=75)
    add(c, "mpi-differ-ranks", "timeout 60 $MPI -n 1 $BIN run -q -n 1 $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run -q -n 2 $SYN ++hydra.run.dir=$W/o",
        expect=(2,), says=["process", "rank"], limit=False, timeout=75)
    add(c, "mpi-differ-bench-env-ranks", "timeout 60 $MPI -n 1 env DLIO_RS_ACCELERATORS=2 $BENCH $SYN ++hydra.run.dir=$W/o : -n 1 $BENCH $SYN ++hydra.run.dir=$W/o",
        expect=(2,), says=["DLIO_RS_ACCELERATORS", "process"], limit=False, timeout=75)
    add(c, "mpi-differ-config-dir-content", "timeout 60 $MPI -n 1 $BIN run -q --config-dir $W/c1 workload=w ++hydra.run.dir=$W/o : -n 1 $BIN run -q --config-dir $W/c2 workload=w ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/c1/workload $W/c2/workload; $BIN config $SYN | sed -n '2,$p' | sed 's/^  //' > $W/c1/workload/w.yaml; sed 's/epochs: 1/epochs: 2/' $W/c1/workload/w.yaml > $W/c2/workload/w.yaml; grep -q 'epochs: 2' $W/c2/workload/w.yaml || exit 97",
        expect=(2,), says=["epochs", "process"], limit=False, timeout=75)
    add(c, "mpi-differ-strict-unknown-key", "timeout 60 $MPI -n 1 $BIN run -q --strict $SYN ++workload.dataset.colour=red ++hydra.run.dir=$W/o : -n 1 $BIN run -q $SYN ++workload.dataset.colour=red ++hydra.run.dir=$W/o",
        expect=(2,), says=["colour"], limit=False, timeout=75)
    add(c, "mpi-one-bad-word", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run -q $SYN ++workload.reader.batch_size=abc ++hydra.run.dir=$W/o",
        expect=(2,), says=["batch_size", "abc"], limit=False, timeout=75)
    add(c, "mpi-one-bad-option", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run -q --frob $SYN ++hydra.run.dir=$W/o",
        expect=(2,), says=["--frob"], limit=False, timeout=75)
    add(c, "mpi-one-zero-ranks", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run -q -n 0 $SYN ++hydra.run.dir=$W/o",
        expect=(2,), says=["at least 1"], limit=False, timeout=75)
    add(c, "mpi-run-and-config", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN config $SYN",
        expect=(1, 2), says=[], limit=False, timeout=75,
        note="MPMD mixing a run with a subcommand that never joins MPI: must end, not hang")
    add(c, "mpi-run-and-sweep", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN sweep --max-accelerators 2 -o $W/sw $SYN",
        expect=(1, 2), says=["process"], limit=False, timeout=75)
    add(c, "mpi-run-and-plan", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN plan $SYN",
        expect=(1, 2), says=[], limit=False, timeout=75)
    add(c, "mpi-sweep-differ-bounds", "timeout 60 $MPI -n 1 $BIN sweep --max-accelerators 2 -o $W/sw $SYN : -n 1 $BIN sweep --max-accelerators 4 -o $W/sw $SYN",
        expect=(2,), says=["max", "process"], limit=False, timeout=75)
    add(c, "mpi-sweep-differ-words", "timeout 60 $MPI -n 1 $BIN sweep --max-accelerators 2 -o $W/sw $SYN : -n 1 $BIN sweep --max-accelerators 2 -o $W/sw $SYN ++workload.train.epochs=2",
        expect=(2,), says=["process"], limit=False, timeout=75)
    add(c, "mpi-sweep-differ-output", "timeout 60 $MPI -n 1 $BIN sweep --max-accelerators 2 -o $W/sw1 $SYN : -n 1 $BIN sweep --max-accelerators 2 -o $W/sw2 $SYN; rc=$?; [ -e $W/sw2/sweep.json ] && [ -e $W/sw1/sweep.json ] && echo 'SURVEY-MIXED: both sweep folders have a sweep.json' >&2; exit $rc",
        expect=(0, 2), says=["process"], limit=False, timeout=75)
    # identical words: must pass
    add(c, "mpi-same-words-mpmd", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o; rc=$?; [ -f $W/o/1_output.json ] || echo 'SURVEY-WRONG: no 1_output.json' >&2; exit $rc",
        expect=(0,), limit=False, timeout=75)
    add(c, "mpi-same-words-n2", "timeout 60 $MPI -n 2 $BIN run -q $SYN ++hydra.run.dir=$W/o", expect=(0,), limit=False, timeout=75)
    add(c, "mpi-same-words-bench", "timeout 60 $MPI -n 2 $BENCH $SYN ++hydra.run.dir=$W/o ++hydra.output_subdir=dlio_config; rc=$?; grep -q '\"num_accelerators\": 2' $W/o/summary.json || echo 'SURVEY-WRONG: summary.json does not say 2 accelerators' >&2; exit $rc",
        expect=(0,), limit=False, timeout=75)
    add(c, "mpi-same-words-run-and-bench", "timeout 60 $MPI -n 1 $BIN run $SYN ++hydra.run.dir=$W/o : -n 1 $BENCH $SYN ++hydra.run.dir=$W/o",
        expect=(0, 2), says=["process"], limit=False, timeout=75,
        note="dlio-rs run and dlio_benchmark with the same words: the same run")
    add(c, "mpi-same-words-quiet-differs", "timeout 60 $MPI -n 1 $BIN run -q $SYN ++hydra.run.dir=$W/o : -n 1 $BIN run $SYN ++hydra.run.dir=$W/o",
        expect=(0,), limit=False, timeout=75)
    add(c, "mpi-same-words-real-data", "timeout 60 $MPI -n 2 $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/d ++workload.dataset.num_files_train=4 ++hydra.run.dir=$W/o",
        setup="ok $BIN run -q $T ++workload.dataset.num_files_train=4 ++workload.dataset.format=npy ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/g",
        expect=(0,), limit=False, timeout=75)
    add(c, "mpi-same-words-checkpoint", "timeout 60 $MPI -n 2 $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        expect=(0,), limit=False, timeout=75)
    add(c, "mpi-differ-checkpoint-folder", "timeout 60 $MPI -n 1 $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck1 ++hydra.run.dir=$W/o : -n 1 $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck2 ++hydra.run.dir=$W/o",
        expect=(2,), says=["checkpoint_folder", "process"], limit=False, timeout=75)
    add(c, "mpi-sigterm-one-process", "bgrun m timeout 60 $MPI -n 2 $BIN run -q $SLOW ++hydra.run.dir=$W/o; sleep 2.5; sig_newest TERM $PID_m; wait; rc=$(rcof m); chk mpirun $rc $W/m.err 143,130,1; stale_check $W/o $rc; exit 0",
        expect=(0,), limit=False, timeout=75, note="SIGTERM to the newest process of the job (found by its own folder in the command line)")


# =============================================================================================
# 2. results of two runs mixed
# =============================================================================================
def cat_mixed():
    c = "mixed"
    rnd = random.Random(2)
    points = [0.15, 0.4, 0.8, 1.3, 2.2, 3.5, 5.0]
    for i, t in enumerate(points):
        for sig in ("INT", "TERM"):
            if (i + (sig == "TERM")) % 2 and i > 1:
                continue
            extra = rnd.choice(["", "--trace", "-n 2", "--trace -n 2"])
            add(c, f"rerun-{sig.lower()}-at-{t}s-{extra.replace(' ', '').replace('--', '') or 'plain'}",
                f"timeout --preserve-status -s {sig} {t} $BIN run -q {extra} $SLOW ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk rerun $rc $W/r.err 130,143,0; stale_check $W/o $rc; exit 0",
                setup="ok $BIN run -q --trace -n 2 $SYNP ++hydra.run.dir=$W/o; mkdir -p $W/o/charts; echo x > $W/o/charts/01-fake.png; remember $W/o",
                expect=(0,), timeout=40)
    add(c, "rerun-killed-9", "bgrun r $BIN run -q $SLOW ++hydra.run.dir=$W/o; sleep 1.5; sig_newest KILL $PID_r; wait; stale_check $W/o $(rcof r); exit 0",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; remember $W/o", expect=(0,), timeout=40)
    add(c, "rerun-two-signals", "bgrun r $BIN run -q $SLOW ++hydra.run.dir=$W/o; sleep 1.2; sig_newest INT $PID_r; sleep 1.3; sig_newest INT $PID_r; wait; rc=$(rcof r); chk r $rc $W/r.err 130; stale_check $W/o $rc; exit 0",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; remember $W/o", expect=(0,), timeout=40)
    add(c, "rerun-fails-corrupt-data", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/o >$W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 1 img_5; stale_check $W/o $rc; grep -q '\"status\": \"failed\"' $W/o/report.json || wrong 'report.json does not say failed'; exit 0",
        setup="ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/g; ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.train.computation_time=0.01 ++hydra.run.dir=$W/o; remember $W/o; f=$(ls $W/d/train/*5_of_8*); head -c 100 $f > $W/x; mv $W/x $f",
        expect=(0,))
    add(c, "rerun-fails-missing-data-usage", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/nothing ++hydra.run.dir=$W/o >$W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 2 nothing; stale_check $W/o $rc; exit 0",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; remember $W/o", expect=(0,),
        note="documented: a usage error leaves the folder as it was (the earlier run's files stay)")
    add(c, "rerun-other-log-file", "$BIN run -q $SYN ++workload.output.log_file=other.log ++hydra.run.dir=$W/o >$W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 0; stale_check $W/o $rc; [ -f $W/o/dlio.log ] && mixed 'the earlier run dlio.log (its [METRIC] block) is still beside this run results (it logged to other.log)'; exit 0",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; remember $W/o", expect=(0,))
    add(c, "rerun-other-output-subdir", "$BIN run -q $SYN ++hydra.output_subdir=cfg ++hydra.run.dir=$W/o >$W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 0; [ -f $W/o/.hydra/config.yaml ] && echo 'SURVEY-NOTE: the earlier run .hydra/config.yaml (other words) still stands beside this run results' >&2; exit 0",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o", expect=(0,))
    add(c, "rerun-output-folder-split-interrupted", "timeout --preserve-status -s INT 1 $BIN run -q $SLOW ++workload.output.folder=$W/out ++hydra.run.dir=$W/run > $W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 130; stale_check $W/out $rc; exit 0",
        setup="ok $BIN run -q $SYNP ++workload.output.folder=$W/out ++hydra.run.dir=$W/run; remember $W/out", expect=(0,))
    add(c, "rerun-generation-interrupted-then-train", "timeout --preserve-status -s INT 1.5 $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++workload.storage.throttle.mib_per_second=0.01 ++hydra.run.dir=$W/g2 >$W/g.out 2>$W/g.err; chk gen $? $W/g.err 130; $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/o",
        setup="ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/g",
        expect=(2,), says=["generat"], timeout=40)
    add(c, "rerun-checkpoint-interrupted", "timeout --preserve-status -s TERM 1.5 $BIN run -q $CKSLOW ++workload.checkpoint.checkpoint_folder=$W/ck2 ++hydra.run.dir=$W/o >$W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 143; stale_check $W/o $rc; exit 0",
        setup="ok $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o; remember $W/o", expect=(0,), timeout=40)
    add(c, "report-on-interrupted", "$BIN report $W/o > $W/rep.out 2>$W/rep.err; rc=$?; chk report $rc $W/rep.err 0,2 summary; [ $rc = 0 ] && ! grep -qi interrupt $W/o/report.html && mixed 'report.html rebuilt from an interrupted run does not say it was interrupted'; exit 0",
        setup="timeout --preserve-status -s INT 3.5 $BIN run -q $SLOW ++hydra.run.dir=$W/o >/dev/null 2>&1; true", expect=(0,), timeout=40)
    add(c, "compare-interrupted-with-complete", "$BIN compare $W/o $W/p --html $W/c.html > $W/c.out 2>$W/c.err; rc=$?; chk compare $rc $W/c.err 0,2 interrupt; [ $rc = 0 ] && ! grep -qi interrupt $W/c.out && mixed 'compare shows an interrupted run as a complete one (no word of it)'; exit 0",
        setup="ok $BIN run -q $SLOW ++workload.train.epochs=2 ++workload.train.computation_time=0.05 ++hydra.run.dir=$W/p; timeout --preserve-status -s INT 3.5 $BIN run -q $SLOW ++hydra.run.dir=$W/o >/dev/null 2>&1; true",
        expect=(0,), timeout=40)
    add(c, "audit-on-interrupted-traced", "$BIN audit $W/o > $W/a.out 2>$W/a.err; rc=$?; cat $W/a.out >> $W/a.err; grep -q 'audit FAILED' $W/a.out && echo 'SURVEY-NOTE: the audit fails an interrupted run for the epochs it never completed' >&2; chk audit $rc $W/a.err 0,1,2 interrupt; exit 0",
        setup="timeout --preserve-status -s INT 3.5 $BIN run -q --trace $SLOW ++hydra.run.dir=$W/o >/dev/null 2>&1; true", expect=(0,), timeout=40)
    add(c, "audit-after-untraced-rerun", "$BIN audit $W/o",
        setup="ok $BIN run -q --trace $SYNP ++hydra.run.dir=$W/o; ok $BIN run -q $SYNP ++workload.train.epochs=2 ++hydra.run.dir=$W/o",
        expect=(1, 2), says=["trace"])
    add(c, "sweep-interrupted-then-report", "$BIN report $W/sw > $W/rep.out 2>$W/rep.err; rc=$?; chk report $rc $W/rep.err 0,2 sweep; exit 0",
        setup="timeout --preserve-status -s INT 2 $BIN sweep --max-accelerators 4 -o $W/sw $SLOW >/dev/null 2>&1; true", expect=(0,), timeout=40)
    add(c, "sweep-interrupted-then-resumed", "$BIN sweep --max-accelerators 2 -o $W/sw $SLOW ++workload.train.epochs=1 ++workload.train.computation_time=0.02 > $W/s.out 2>$W/s.err; rc=$?; chk sweep $rc $W/s.err 0; grep -q 'continuing the sweep' $W/s.err || wrong 'the second sweep did not continue the first'; exit 0",
        setup="timeout --preserve-status -s INT 3 $BIN sweep --max-accelerators 2 -o $W/sw $SLOW ++workload.train.epochs=1 ++workload.train.computation_time=0.02 >/dev/null 2>&1; true", expect=(0,), timeout=50)
    add(c, "bench-rerun-interrupted-mlpstorage-layout", "timeout --preserve-status -s TERM 1.2 $BENCH $SLOW ++hydra.run.dir=$W/o ++hydra.output_subdir=dlio_config > $W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 143; stale_check $W/o $rc; exit 0",
        setup="ok $BENCH $SYNP ++hydra.run.dir=$W/o ++hydra.output_subdir=dlio_config; remember $W/o", expect=(0,), timeout=40)
    add(c, "rerun-fewer-ranks-interrupted", "timeout --preserve-status -s INT 1 $BIN run -q -n 1 $SLOW ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 130; [ -f $W/o/2_output.json ] && mixed '2_output.json of the earlier 3-rank run remains'; [ -f $W/o/trace/2.csv ] && mixed 'trace/2.csv of the earlier run remains'; exit 0",
        setup="ok $BIN run -q -n 3 --trace $SYNP ++workload.dataset.num_files_train=9 ++hydra.run.dir=$W/o", expect=(0,), timeout=40)
    add(c, "rerun-generate-only-after-training", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk gen $rc $W/r.err 0; stale_check $W/o $rc; exit 0",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; remember $W/o", expect=(0,),
        note="a generate-only run writes no JSON results; what it leaves beside its own log must not be an earlier run's")
    add(c, "rerun-mpi-fewer-processes-interrupted", "timeout 60 timeout --preserve-status -s TERM 1.2 $MPI -n 1 $BIN run -q $SLOW ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 143,130,1,0; [ -f $W/o/1_output.json ] && mixed '1_output.json of the earlier 2-process run remains'; stale_check $W/o $rc; exit 0",
        setup="ok timeout 60 $MPI -n 2 $BIN run -q $SYNP ++hydra.run.dir=$W/o; remember $W/o", expect=(0,), limit=False, timeout=75)
    add(c, "rerun-check-flag-fails", "$BIN run -q --check $SYN ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk r $rc $W/r.err 1 verdict; [ -f $W/o/summary.json ] && grep -q '\"start\"' $W/o/summary.json && [ \"$(h $W/o/summary.json)\" = \"$(cat $W/.earlier/summary.json)\" ] && mixed 'earlier summary remains'; exit 0",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; remember $W/o", expect=(0,))


# =============================================================================================
# 3. shared folders
# =============================================================================================
def cat_shared():
    c = "shared"
    GEN = "++workload.workflow.generate_data=True ++workload.workflow.train=False"
    THR = "++workload.storage.throttle.mib_per_second=0.02"  # 8 files of 4 KiB: ~1.6 s
    add(c, "two-generations-one-folder",
        f"bgrun a $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} {THR} ++hydra.run.dir=$W/ga; sleep 0.7; $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/gb > $W/b.out 2>$W/b.err; rb=$?; wait; chk first $(rcof a) $W/a.err 0; chk second $rb $W/b.err 2 $W/d; exit 0",
        timeout=40)
    add(c, "two-generations-one-folder-different-formats",
        f"bgrun a $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} {THR} ++hydra.run.dir=$W/ga; sleep 0.7; $BIN run -q $T8 ++workload.dataset.format=npz ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/gb > $W/b.out 2>$W/b.err; rb=$?; wait; chk first $(rcof a) $W/a.err 0; chk second $rb $W/b.err 2 $W/d; exit 0",
        timeout=40)
    add(c, "generation-while-training-reads",
        f"bgrun a $BIN run -q $TSLOW ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/gb > $W/b.out 2>$W/b.err; rb=$?; wait; chk reader $(rcof a) $W/a.err 0; chk generation $rb $W/b.err 2 $W/d; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "training-while-generation-writes",
        f"bgrun a $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} {THR} ++hydra.run.dir=$W/ga; sleep 0.7; $BIN run -q $TSLOW ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/tb > $W/b.out 2>$W/b.err; rb=$?; wait; chk generation $(rcof a) $W/a.err 0; chk reader $rb $W/b.err 2 generat; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "generate-and-train-while-another-trains",
        f"bgrun a $BIN run -q $TSLOW ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++hydra.run.dir=$W/gb > $W/b.out 2>$W/b.err; rb=$?; wait; chk reader $(rcof a) $W/a.err 0; chk gen+train $rb $W/b.err 2 $W/d; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "generation-into-subfolder-of-read-data",
        f"bgrun a $BIN run -q $TSLOW ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q $T8 ++workload.dataset.data_folder=$W/d/train {GEN} ++hydra.run.dir=$W/gb > $W/b.out 2>$W/b.err; rb=$?; wait; chk reader $(rcof a) $W/a.err 0; chk nested-generation $rb $W/b.err 0,2; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40,
        note="a generation into d/train while d is read: it adds files under the reader's split")
    # a reader of 3 epochs (~7 s) and a deleter (keep_files=False) that ends in the middle of it
    READER = "$TSLOW ++workload.train.epochs=3"
    add(c, "keep-files-false-while-another-reads-reader-first",
        f"bgrun a $BIN run -q {READER} ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q $TSLOW ++workload.train.epochs=1 ++workload.train.computation_time=0.05 ++workload.dataset.data_folder=$W/d ++workload.dataset.keep_files=False ++hydra.run.dir=$W/tb > $W/b.out 2>$W/b.err; rb=$?; wait; ra=$(rcof a); "
        f"echo \"reader=$ra deleter=$rb\" >&2; head -c 300 $W/a.err >&2; head -c 300 $W/b.err >&2; "
        f"if [ $rb = 2 ]; then chk deleter $rb $W/b.err 2 $W/d; elif [ $ra = 1 ] && grep -qi 'no such file' $W/a.err; then mixed 'the reader failed (exit 1, a file missing): the other run deleted the dataset under it; neither was refused'; fi; chk reader $ra $W/a.err 0; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "keep-files-false-while-another-reads-deleter-first",
        f"bgrun a $BIN run -q $TSLOW ++workload.train.epochs=1 ++workload.dataset.data_folder=$W/d ++workload.dataset.keep_files=False ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q {READER} ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/tb > $W/b.out 2>$W/b.err; rb=$?; wait; ra=$(rcof a); "
        f"echo \"deleter=$ra reader=$rb\" >&2; head -c 300 $W/a.err >&2; head -c 300 $W/b.err >&2; "
        f"if [ $rb = 2 ]; then chk reader $rb $W/b.err 2 $W/d; elif [ $rb = 1 ] && grep -qi 'no such file' $W/b.err; then mixed 'the reader started while a keep_files=False run held the data, and failed (exit 1, a file missing) when that run deleted it; neither was refused'; else chk reader $rb $W/b.err 0; fi; chk deleter $ra $W/a.err 0,1; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "keep-files-false-mpi-2-while-another-reads",
        f"bgrun a $BIN run -q $TSLOW ++workload.train.epochs=3 ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/ta; sleep 1; timeout 60 $MPI -n 2 $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.dataset.keep_files=False ++hydra.run.dir=$W/tb > $W/b.out 2>$W/b.err; rb=$?; wait; ra=$(rcof a); echo \"reader=$ra deleter=$rb\" >&2; "
        f"[ $ra = 1 ] && mixed 'the reader failed: the MPI run deleted its data while it read'; [ $ra = 0 ] && [ $rb = 0 ] && ! ls $W/d/train | grep -q . && mixed 'both ended 0, data deleted under the reader'; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=75, limit=False)
    add(c, "two-runs-one-output-folder",
        "bgrun a $BIN run -q $SLOW ++hydra.run.dir=$W/o; sleep 1; $BIN run -q $SYN ++hydra.run.dir=$W/o > $W/b.out 2>$W/b.err; rb=$?; wait; chk first $(rcof a) $W/a.err 0; chk second $rb $W/b.err 2 $W/o; exit 0",
        timeout=40)
    add(c, "two-runs-one-output-folder-via-output.folder",
        "bgrun a $BIN run -q $SLOW ++hydra.run.dir=$W/o; sleep 1; $BIN run -q $SYN ++workload.output.folder=$W/o ++hydra.run.dir=$W/o2 > $W/b.out 2>$W/b.err; rb=$?; wait; chk first $(rcof a) $W/a.err 0; chk second $rb $W/b.err 2 $W/o; exit 0",
        timeout=40)
    add(c, "two-runs-hydra-dir-shared-output-folders-differ",
        "bgrun a $BIN run -q $SLOW ++hydra.run.dir=$W/h ++workload.output.folder=$W/oa; sleep 1; $BIN run -q $SYN ++workload.output.folder=$W/ob ++hydra.run.dir=$W/h > $W/b.out 2>$W/b.err; rb=$?; wait; chk first $(rcof a) $W/a.err 0; chk second $rb $W/b.err 0,2 $W/h; "
        "[ $rb = 0 ] && grep -q ob $W/h/.hydra/config.yaml && mixed 'the hydra folder of run A (still running) now holds run B config.yaml'; exit 0",
        timeout=40)
    add(c, "sweep-and-run-one-folder",
        "bgrun a $BIN sweep --max-accelerators 2 -o $W/sw $SLOW; sleep 1.5; $BIN run -q $SYN ++hydra.run.dir=$W/sw/trial-1 > $W/b.out 2>$W/b.err; rb=$?; wait; chk sweep $(rcof a) $W/a.err 0; chk run $rb $W/b.err 2 trial-1; exit 0",
        timeout=50)
    add(c, "two-sweeps-one-folder",
        "bgrun a $BIN sweep --max-accelerators 2 -o $W/sw $SLOW; sleep 1.5; $BIN sweep --max-accelerators 2 -o $W/sw $SLOW > $W/b.out 2>$W/b.err; rb=$?; wait; chk first $(rcof a) $W/a.err 0; chk second $rb $W/b.err 2 $W/sw; exit 0",
        timeout=50)
    add(c, "two-checkpoint-runs-one-folder",
        "bgrun a $BIN run -q $CKSLOW ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/oa; sleep 0.8; $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/ob > $W/b.out 2>$W/b.err; rb=$?; wait; chk first $(rcof a) $W/a.err 0; chk second $rb $W/b.err 2 $W/ck; exit 0",
        timeout=40)
    add(c, "checkpoint-load-only-while-another-saves",
        "bgrun a $BIN run -q $CKSLOW ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/oa; sleep 0.8; $BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/ob > $W/b.out 2>$W/b.err; rb=$?; wait; chk saver $(rcof a) $W/a.err 0; chk loader $rb $W/b.err 2 $W/ck; exit 0",
        setup="ok $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o0", timeout=40)
    add(c, "two-load-only-runs-share",
        "bgrun a $BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.num_checkpoints_read=1 ++workload.checkpoint.time_between_checkpoints=2 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/oa; sleep 0.5; $BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/ob > $W/b.out 2>$W/b.err; rb=$?; wait; chk first $(rcof a) $W/a.err 0; chk second $rb $W/b.err 0; exit 0",
        setup="ok $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o0", timeout=40)
    add(c, "checkpoint-folder-is-own-data-folder",
        "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.checkpoint=True ++workload.checkpoint.checkpoint_after_epoch=1 ++workload.model.model_size_bytes=4096 ++workload.checkpoint.checkpoint_folder=$W/d ++hydra.run.dir=$W/o",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g",
        expect=(0, 2), says=["checkpoint", "data"],
        note="one run whose checkpoint folder is its own data folder: if refused, the message must not blame 'another run'")
    add(c, "checkpoint-folder-is-another-runs-data",
        "bgrun a $BIN run -q $TSLOW ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/d ++hydra.run.dir=$W/ob > $W/b.out 2>$W/b.err; rb=$?; wait; chk reader $(rcof a) $W/a.err 0; chk saver $rb $W/b.err 0,2 $W/d; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "checkpoint-folder-is-running-output-folder",
        "bgrun a $BIN run -q $SLOW ++hydra.run.dir=$W/o; sleep 1; $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/o ++hydra.run.dir=$W/ob > $W/b.out 2>$W/b.err; rb=$?; wait; chk run $(rcof a) $W/a.err 0; chk saver $rb $W/b.err 0,2 $W/o; exit 0",
        timeout=40)
    add(c, "output-folder-is-data-folder-being-generated",
        f"bgrun a $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} {THR} ++hydra.run.dir=$W/ga; sleep 0.7; $BIN run -q $SYN ++hydra.run.dir=$W/d > $W/b.out 2>$W/b.err; rb=$?; wait; chk generation $(rcof a) $W/a.err 0; chk run $rb $W/b.err 0,2; exit 0",
        timeout=40)
    add(c, "data-folder-is-running-output-folder-keep-false",
        f"bgrun a $BIN run -q $SLOW ++hydra.run.dir=$W/d; sleep 1; $BIN run -q $T8 ++workload.dataset.num_subfolders_train=0 ++workload.dataset.data_folder=$W/d ++workload.dataset.keep_files=False ++hydra.run.dir=$W/tb > $W/b.out 2>$W/b.err; rb=$?; wait; chk run $(rcof a) $W/a.err 0; chk reader $rb $W/b.err 0,2; [ -f $W/d/summary.json ] || mixed 'the running output folder lost its summary.json'; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "generation-while-s3-less-throttled-reader",
        f"bgrun a $BIN run -q $TSLOW ++workload.dataset.data_folder=$W/d ++workload.storage.throttle.mib_per_second=0.05 ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/gb > $W/b.out 2>$W/b.err; rb=$?; wait; chk reader $(rcof a) $W/a.err 0; chk generation $rb $W/b.err 2 $W/d; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "generation-via-storage-root-alias",
        f"bgrun a $BIN run -q $TSLOW ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q $T8 ++workload.storage.storage_root=$W ++workload.dataset.data_folder=d {GEN} ++hydra.run.dir=$W/gb > $W/b.out 2>$W/b.err; rb=$?; wait; chk reader $(rcof a) $W/a.err 0; chk generation $rb $W/b.err 2 d; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g", timeout=40)
    add(c, "generation-via-symlinked-folder",
        f"bgrun a $BIN run -q $TSLOW ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/ta; sleep 1; $BIN run -q $T8 ++workload.dataset.data_folder=$W/alias {GEN} ++hydra.run.dir=$W/gb > $W/b.out 2>$W/b.err; rb=$?; wait; chk reader $(rcof a) $W/a.err 0; chk generation $rb $W/b.err 2 alias; exit 0",
        setup=f"ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d {GEN} ++hydra.run.dir=$W/g; ln -s $W/d $W/alias", timeout=40)


# =============================================================================================
# 4. paths the run does not own
# =============================================================================================
def cat_paths():
    c = "paths"
    names = ["dlio.log", "report.html", "summary.json", "report.json", "0_output.json",
             "0_per_epoch_stats.json", ".dlio-rs.lock"]
    for n in names:
        add(c, f"link-{n}-to-bystander", f"$BIN run -q $SYN --trace ++hydra.run.dir=$W/o",
            setup=f"mkdir -p $W/o; echo keep > $W/by/victim; ln -s $W/by/victim $W/o/{n}",
            expect=(0, 1, 2), says=[n])
    for n in ["dlio.log", "summary.json", "report.html", ".dlio-rs.lock"]:
        for tgt in ["/dev/null", "/dev/zero"]:
            add(c, f"link-{n}-to-{tgt[5:]}", f"$BIN run -q $SYN ++hydra.run.dir=$W/o; rc=$?; [ -e /dev/null ] && [ -c /dev/null ] || echo 'SURVEY-MIXED: /dev/null is no longer a device' >&2; exit $rc",
                setup=f"mkdir -p $W/o; ln -s {tgt} $W/o/{n}", expect=(0, 1, 2), says=[n])
    for n in ["dlio.log", "summary.json", "0_output.json", ".dlio-rs.lock"]:
        add(c, f"fifo-{n}", f"$BIN run -q $SYN ++hydra.run.dir=$W/o", setup=f"mkdir -p $W/o; mkfifo $W/o/{n}",
            expect=(0, 1, 2), says=[n], timeout=30)
    # folders inside the output folder
    add(c, "link-trace-folder-to-bystander", "$BIN run -q --trace $SYN ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/o $W/by/t; echo keep > $W/by/t/0.csv; echo keep > $W/by/t/7.csv; echo keep > $W/by/t/.3.csv.partial; ln -s $W/by/t $W/o/trace",
        expect=(0, 1, 2), says=["trace"])
    add(c, "link-trace-folder-untraced-run", "$BIN run -q $SYN ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/o $W/by/t; echo keep > $W/by/t/5.csv; ln -s $W/by/t $W/o/trace",
        expect=(0, 1, 2), says=["trace"])
    add(c, "link-trace-folder-to-dev-null", "$BIN run -q --trace $SYN ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/o; ln -s /dev/null $W/o/trace", expect=(0, 1, 2), says=["trace"])
    add(c, "link-trace-file-to-bystander", "$BIN run -q --trace $SYN ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/o/trace; echo keep > $W/by/victim; ln -s $W/by/victim $W/o/trace/0.csv; ln -s $W/by/victim $W/o/trace/.0.csv.partial",
        expect=(0, 1, 2), says=["0.csv"])
    add(c, "link-hydra-folder-to-bystander", "$BIN run -q $SYN ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/o $W/by/h; echo keep > $W/by/h/config.yaml; echo keep > $W/by/h/overrides.yaml; ln -s $W/by/h $W/o/.hydra",
        expect=(0, 1, 2), says=[".hydra"])
    add(c, "link-hydra-file-to-bystander", "$BIN run -q $SYN ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/o/.hydra; echo keep > $W/by/victim; ln -s $W/by/victim $W/o/.hydra/config.yaml; ln -s $W/by/victim $W/o/.hydra/hydra.yaml",
        expect=(0, 1, 2), says=["config.yaml"])
    add(c, "link-bench-dlio_config-folder", "$BENCH $SYN ++hydra.run.dir=$W/o ++hydra.output_subdir=dlio_config",
        setup="mkdir -p $W/o $W/by/h; echo keep > $W/by/h/config.yaml; ln -s $W/by/h $W/o/dlio_config",
        expect=(0, 1, 2), says=["dlio_config"])
    add(c, "hydra-output-subdir-absolute", "$BIN run -q $SYN ++hydra.run.dir=$W/o ++hydra.output_subdir=$W/by/h",
        setup="mkdir -p $W/by/h; echo keep > $W/by/h/config.yaml", expect=(0, 2), says=["output_subdir"])
    add(c, "hydra-output-subdir-dot", "$BIN run -q $SYN ++hydra.run.dir=$W/o ++hydra.output_subdir=.",
        expect=(0, 2), says=["output_subdir"])
    add(c, "link-charts-folder-run", "$BIN run -q $SYN ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/o $W/by/ch; echo keep > $W/by/ch/01-au.png; echo keep > $W/by/ch/02-x.svg; ln -s $W/by/ch $W/o/charts",
        expect=(0, 1, 2), says=["charts"])
    add(c, "link-charts-folder-report-png", "DLIO_RS_BROWSER_TIMEOUT=60 $BIN report --png $W/o",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; mkdir -p $W/by/ch; echo keep > $W/by/ch/01-au.png; echo keep > $W/by/ch/notes.txt; ln -s $W/by/ch $W/o/charts",
        expect=(0, 1, 2), says=["charts"], limit=False, timeout=120)
    add(c, "link-chart-file-report-png", "DLIO_RS_BROWSER_TIMEOUT=60 $BIN report --png $W/o",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; mkdir -p $W/o/charts; echo keep > $W/by/victim; ln -s $W/by/victim $W/o/charts/01-au.svgx",
        expect=(0, 1, 2), says=["charts"], limit=False, timeout=120)
    add(c, "fifo-report-html-on-report", "$BIN report $W/o",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; rm $W/o/report.html; mkfifo $W/o/report.html", expect=(0, 1, 2), says=["report.html"], timeout=30)
    add(c, "link-report-html-on-report", "$BIN report $W/o",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; rm $W/o/report.html; echo keep > $W/by/victim; ln -s $W/by/victim $W/o/report.html", expect=(0, 1, 2), says=["report.html"])
    add(c, "link-sweep-json-to-bystander", "$BIN sweep --max-accelerators 1 -o $W/sw $SYN",
        setup="mkdir -p $W/sw; echo '{}' > $W/by/victim; ln -s $W/by/victim $W/sw/sweep.json", expect=(0, 1, 2), says=["sweep.json"])
    add(c, "link-sweep-trial-folder-to-bystander", "$BIN sweep --max-accelerators 1 -o $W/sw $SYN",
        setup="mkdir -p $W/sw $W/by/t; echo keep > $W/by/t/summary.json; echo keep > $W/by/t/dlio.log; ln -s $W/by/t $W/sw/trial-1", expect=(0, 1, 2), says=["trial-1"])
    add(c, "compare-html-link-to-bystander", "$BIN compare $W/o $W/o --html $W/o/page.html",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/o; echo keep > $W/by/victim; ln -s $W/by/victim $W/o/page.html", expect=(0, 1, 2), says=["page.html"],
        note="compare --html is a path the user names; following a link there is the user's choice", bystander_ok=True)
    # checkpoints
    add(c, "checkpoint-step-folder-link-to-bystander", "$BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/ck $W/by/s; echo keep > $W/by/s/model_states-0.pt; ln -s $W/by/s $W/ck/global_epoch1_step1",
        expect=(0, 1, 2), says=["global_epoch1_step1"])
    add(c, "checkpoint-step-folder-link-to-dev-shm", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_read=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o; rc=$?; [ -e /dev/shm/survey-$$-s/model_states-0.pt ] && echo 'SURVEY-MIXED: the checkpoint was written (and rated) in /dev/shm through a planted link' >&2; rm -rf /dev/shm/survey-$$-s; exit $rc",
        setup="mkdir -p $W/ck /dev/shm/survey-$$-s; ln -s /dev/shm/survey-$$-s $W/ck/global_epoch1_step1",
        expect=(0, 1, 2), says=["global_epoch1_step1"],
        note="a planted link sends the save to memory: storage speed rated through a path the run does not own")
    add(c, "checkpoint-file-link-to-bystander", "$BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/ck/global_epoch1_step1; echo keep > $W/by/victim; ln -s $W/by/victim $W/ck/global_epoch1_step1/model_states-0.pt",
        expect=(1, 2), says=["model_states-0.pt"])
    add(c, "checkpoint-load-only-file-link-to-dev-zero", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/ck/global_epoch1_step1; ln -s /dev/zero $W/ck/global_epoch1_step1/model_states-0.pt",
        expect=(1, 2), says=["model_states-0.pt"])
    add(c, "model-name-escapes-hydra-log", "mkdir -p $W/sub; cd $W/sub; $BIN run -q $SYN '++workload.model.name=\"../../by/x\"'",
        expect=(0, 2), says=["model.name"], note="Hydra's default run folder hydra_log/<model.name>/<time>: a name with .. leaves hydra_log")
    add(c, "model-name-absolute-hydra-log", "$BIN run -q $SYN \"++workload.model.name='/tmp/survey-abs-$$'\"; rc=$?; [ -e /tmp/survey-abs-$$ ] && echo \"SURVEY-MIXED: the run wrote its folder under /tmp/survey-abs-$$ (from model.name), outside hydra_log\" >&2; rm -rf /tmp/survey-abs-$$; exit $rc",
        expect=(0, 2), says=["model.name"])
    add(c, "checkpoint-load-only-file-link-to-dev-shm", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o; rc=$?; rm -f /dev/shm/survey-$$-ck; [ $rc = 0 ] && echo 'SURVEY-MIXED: a load through a planted link to /dev/shm (memory) was rated as a checkpoint load of the storage' >&2; exit $rc",
        setup="mkdir -p $W/ck/global_epoch1_step1; head -c 65536 /dev/urandom > /dev/shm/survey-$$-ck; ln -s /dev/shm/survey-$$-ck $W/ck/global_epoch1_step1/model_states-0.pt",
        expect=(0, 1, 2), says=["model_states-0.pt"])
    add(c, "checkpoint-load-only-file-link-to-bystander", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o; rc=$?; [ $rc = 0 ] && echo 'SURVEY-MIXED: a load through a planted link to a bystander file was rated as a checkpoint load' >&2; exit $rc",
        setup="mkdir -p $W/ck/global_epoch1_step1; head -c 65536 /dev/urandom > $W/by/victim; ln -s $W/by/victim $W/ck/global_epoch1_step1/model_states-0.pt",
        expect=(0, 1, 2), says=["model_states-0.pt"])
    add(c, "checkpoint-file-fifo-load-only", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/ck/global_epoch1_step1; mkfifo $W/ck/global_epoch1_step1/model_states-0.pt", expect=(1, 2), says=["model_states-0.pt"], timeout=30)
    add(c, "checkpoint-folder-is-dev-null", "$BIN run -q $CK ++workload.checkpoint.checkpoint_folder=/dev/null ++hydra.run.dir=$W/o",
        expect=(1, 2), says=["/dev/null"])
    add(c, "checkpoint-folder-link-to-dev-null", "$BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="ln -s /dev/null $W/ck", expect=(1, 2), says=["ck"])
    # data: generation through planted links, keep_files deletion through links
    add(c, "generation-file-link-to-bystander", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/d/train; echo keep > $W/by/victim; ln -s $W/by/victim $W/d/train/img_3_of_8.npy", expect=(0, 1, 2), says=["img_3_of_8.npy"])
    add(c, "generation-train-folder-link-to-bystander", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/d $W/by/t; echo keep > $W/by/t/img_3_of_8.npy; ln -s $W/by/t $W/d/train", expect=(0, 1, 2), says=["train"],
        note="a symlinked split folder inside the data folder; users do link data folders, so a doubtful case", bystander_ok=True)
    add(c, "keep-false-deletes-through-link", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.dataset.keep_files=False ++hydra.run.dir=$W/o",
        setup="ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/g; cp $W/d/train/img_2_of_8.npy $W/by/victim.npy; rm $W/d/train/img_2_of_8.npy; ln -s $W/by/victim.npy $W/d/train/img_2_of_8.npy",
        expect=(0, 1, 2), says=["img_2_of_8"])
    add(c, "data-file-link-to-dev-zero", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/o",
        setup="ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/g; rm $W/d/train/img_4_of_8.npy; ln -s /dev/zero $W/d/train/img_4_of_8.npy",
        expect=(1, 2), says=["img_4_of_8"])
    add(c, "data-file-fifo", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++hydra.run.dir=$W/o",
        setup="ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/g; rm $W/d/train/img_4_of_8.npy; mkfifo $W/d/train/img_4_of_8.npy",
        expect=(1, 2), says=["img_4_of_8"], timeout=30)
    add(c, "generate-data-folder-dev-null", "$BIN run -q $T8 ++workload.dataset.data_folder=/dev/null ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/o",
        expect=(2,), says=["/dev/null"])
    add(c, "output-folder-dev-null", "$BIN run -q $SYN ++hydra.run.dir=/dev/null", expect=(2,), says=["/dev/null"])
    add(c, "output-folder-inside-dev-shm-link", "$BIN run -q $SYN ++hydra.run.dir=$W/o ++workload.output.log_file=../by/victim.log",
        setup="echo keep > $W/by/victim.log", expect=(2,), says=["log_file"])
    add(c, "log-file-in-subfolder-link", "$BIN run -q $SYN ++hydra.run.dir=$W/o ++workload.output.log_file=sub/dlio.log",
        setup="mkdir -p $W/o $W/by/s; echo keep > $W/by/s/dlio.log; ln -s $W/by/s $W/o/sub", expect=(0, 1, 2), says=["log_file"])
    add(c, "throttled-save-to-dev-null-rated", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_read=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/ck/global_epoch1_step1; ln -s /dev/null $W/ck/global_epoch1_step1/model_states-0.pt", expect=(1, 2), says=["model_states-0.pt"])


# =============================================================================================
# 5. readers of our own files
# =============================================================================================
def cat_readers():
    c = "readers"
    base = "ok $BIN run -q --trace $SYNP ++hydra.run.dir=$W/r"
    dmg = {
        "truncated": "f={F}; s=$(stat -c %s $f); truncate -s $((s/2)) $f",
        "empty": ": > {F}",
        "random": "python3 -c 'import random,sys; r=random.Random(7); sys.stdout.buffer.write(bytes(r.randrange(256) for _ in range(4096)))' > {F}",
        "not-utf8": "printf '{{\"a\": \"\\377\\376\"}}' > {F}",
        "deep": "python3 -c 'print(\"[\"*200000 + \"]\"*200000)' > {F}",
        "fifo": "rm -f {F}; mkfifo {F}",
        "dev-zero": "rm -f {F}; ln -s /dev/zero {F}",
        "folder": "rm -f {F}; mkdir {F}",
        "null": "echo null > {F}",
        "list": "echo '[1,2,3]' > {F}",
        "nan-token": "sed -i 's/: [0-9][0-9.e+-]*,/: NaN,/' {F}",
    }
    targets = {"report.json": "report", "summary.json": "report", "0_output.json": "report"}
    cmds = {
        "report": "$BIN report $W/r",
        "compare": "$BIN compare $W/r $W/p --html $W/c.html",
        "audit": "$BIN audit $W/r",
    }
    n = 0
    for f, _ in targets.items():
        for dname, d in dmg.items():
            for cmdname in (["report", "compare", "audit"] if f == "report.json" else ["report", "compare"] if f == "summary.json" else ["report"]):
                if f == "0_output.json" and dname in ("null", "list", "nan-token"):
                    pass
                # keep the matrix reasonable
                if cmdname == "compare" and dname in ("deep", "null", "list") and f == "report.json":
                    continue
                setup = base + "\n" + ("ok $BIN run -q $SYNP ++hydra.run.dir=$W/p\n" if cmdname == "compare" else "") + d.format(F=f"$W/r/{f}")
                add(c, f"{cmdname}-{f}-{dname}", cmds[cmdname], setup=setup,
                    expect=(2,), says=[f], timeout=40,
                    note="audit's docs say 1 for a folder it cannot use; policy says 2 for a damaged own file" if cmdname == "audit" else "")
                n += 1
    # huge but valid files: memory must stay bounded (4 GB address space)
    add(c, "report-0_output-huge-valid", "$BIN report $W/r",
        setup=base + "\npython3 -c \"import sys; w=sys.stdout.write; w('{\\\"1\\\": {\\\"load\\\": {\\\"block1\\\": ['); [w('0,'*1000000) for _ in range(250)]; w('0]}}}')\" > $W/r/0_output.json",
        expect=(0, 2), says=["0_output.json"], timeout=60)
    add(c, "report-summary-huge-valid-list", "$BIN report $W/r",
        setup=base + "\npython3 -c \"import sys,json; d=json.load(open('$W/r/summary.json')); d['metric']['train_au_percentage']=[50.0]*20000000; json.dump(d, open('$W/r/summary.json','w'))\"",
        expect=(0, 2), says=["summary.json"], timeout=90)
    add(c, "audit-report-huge-latency-histogram", "$BIN audit $W/r",
        setup=base + "\npython3 -c \"import json; d=json.load(open('$W/r/report.json')); d['read_latency_histogram_us']=[[1.0,1]]*10000000; json.dump(d, open('$W/r/report.json','w'))\"",
        expect=(0, 1, 2), says=["report.json"], timeout=90)
    # forged values
    forge = [
        ("report.json", "num_accelerators", "-1", ["report", "audit"]),
        ("report.json", "num_accelerators", "\"2\"", ["audit"]),
        ("report.json", "num_accelerators", "0", ["audit", "report"]),
        ("report.json", "configuration.dataset.num_files_train", "1000000000000", ["audit"]),
        ("report.json", "configuration.dataset.num_samples_per_file", "1000000000000", ["audit"]),
        ("report.json", "configuration.dataset.num_samples_per_file", "0", ["audit"]),
        ("report.json", "configuration.reader.batch_size", "0", ["audit"]),
        ("report.json", "configuration.reader.batch_size", "-3", ["audit"]),
        ("report.json", "configuration.train.epochs", "1000000", ["audit"]),
        ("report.json", "configuration.train.epochs", "1e300", ["audit"]),
        ("report.json", "configuration.dataset.format", "\"npz\"", ["audit"]),
        ("report.json", "configuration.reader.sample_shuffle", "\"random\"", ["audit"]),
        ("report.json", "configuration", "\"x\"", ["audit"]),
        ("report.json", "configuration.workflow", "[]", ["audit"]),
        ("report.json", "run_entropy", "\"abc\"", ["audit"]),
        ("report.json", "run_entropy", "-1", ["audit"]),
        ("report.json", "epochs", "[{\"au_percent\": 1e308, \"samples_per_second\": -5}]", ["report", "compare"]),
        ("report.json", "epochs", "\"none\"", ["report", "compare"]),
        ("report.json", "read_latency_histogram_us", "[[1e308, 1000000000000], [-1, -5]]", ["report"]),
        ("report.json", "read_latency_histogram_us", "[[\"x\"]]", ["report"]),
        ("report.json", "hosts", "[{\"hostname\": 5, \"ranks\": [1000000000000]}]", ["report"]),
        ("report.json", "checkpoints.list", "[{\"op\": \"save\", \"seconds\": -1, \"bytes\": 1e300}]", ["report"]),
        ("report.json", "status", "\"complete\"", ["report"]),
        ("summary.json", "num_accelerators", "1000000000000", ["report", "compare"]),
        ("summary.json", "num_accelerators", "-5", ["report"]),
        ("summary.json", "metric.train_au_percentage", "[1e308, -1e308]", ["report", "compare"]),
        ("summary.json", "metric.train_au_percentage", "\"abc\"", ["report", "compare"]),
        ("summary.json", "metric.train_au_percentage", "[]", ["report", "compare"]),
        ("summary.json", "metric", "5", ["report", "compare"]),
        ("summary.json", "metric.train_au_meet_expectation", "\"success\"", ["report"]),
        ("summary.json", "start", "\"not a date\"", ["report", "compare"]),
        ("summary.json", "num_hosts", "1e12", ["report"]),
        ("0_output.json", "1", "{\"load\": {\"block1\": \"x\"}}", ["report"]),
        ("0_output.json", "1000000000000", "{\"load\": {\"block1\": [1e308]}, \"proc\": {\"block1\": [-1e308]}}", ["report"]),
    ]
    # expected codes: a valid value the audit measures the trace against (1: violations), a value
    # of the wrong type or out of its bounds (2, naming file and field), a number shown as it is
    # (0 or 2)
    wrong_type = {("report.json", "num_accelerators", "\"2\""), ("report.json", "configuration", "\"x\""),
                  ("report.json", "configuration.workflow", "[]"), ("report.json", "run_entropy", "\"abc\""),
                  ("report.json", "epochs", "\"none\""), ("report.json", "read_latency_histogram_us", "[[\"x\"]]"),
                  ("report.json", "hosts", "[{\"hostname\": 5, \"ranks\": [1000000000000]}]"),
                  ("summary.json", "metric.train_au_percentage", "\"abc\""), ("summary.json", "metric", "5"),
                  ("summary.json", "num_accelerators", "-5"), ("report.json", "num_accelerators", "-1"),
                  ("0_output.json", "1", "{\"load\": {\"block1\": \"x\"}}")}
    valid_for_audit = {"configuration.train.epochs=1000000", "configuration.dataset.format=\"npz\"",
                       "configuration.reader.sample_shuffle=\"random\""}
    for f, path, val, cmdl in forge:
        for cmdname in cmdl:
            keypath = json.dumps(path.split("."))
            # simpler: give the path through the environment
            setup = base + "\n" + ("ok $BIN run -q $SYNP ++hydra.run.dir=$W/p\n" if cmdname == "compare" else "") + \
                f"pyedit <<'EOF'\nimport json, os\np=os.environ['W']+'/r/{f}'\nd=json.load(open(p))\nk={keypath}\nx=d\nfor s in k[:-1]:\n    x=x.setdefault(s,{{}})\nx[k[-1]]=json.loads('''{val}''')\njson.dump(d,open(p,'w'))\nEOF"
            exp = (0, 2)
            if (f, path, val) in wrong_type:
                exp = (2,)
            if cmdname == "audit":
                exp = (1,) if f"{path}={val}" in valid_for_audit else (2,)
            add(c, f"{cmdname}-forged-{f}-{path}={val[:24]}", cmds[cmdname], setup=setup, expect=exp,
                says=[] if exp == (1,) else [f], timeout=40,
                note="a forged value must be refused (2, naming file and field) or shown as it is; never a panic, hang or blowup")
    # trace damage for audit
    tdmg = [
        ("rank-huge", "sed -i '2s/^\\([0-9]*\\),train,\\([0-9]*\\),0,/\\1,train,\\2,1000000000000,/' $W/r/trace/0.csv"),
        ("epoch-huge", "sed -i '2s/^1,/1000000000000,/' $W/r/trace/0.csv"),
        ("step-huge", "sed -i '2s/^1,train,1,/1,train,99999999999999999999,/' $W/r/trace/0.csv"),
        ("sample-huge", "awk -F, 'NR==2{$7=18446744073709551615}1' OFS=, $W/r/trace/0.csv > $W/x && mv $W/x $W/r/trace/0.csv"),
        ("negative", "awk -F, 'NR==2{$3=-1}1' OFS=, $W/r/trace/0.csv > $W/x && mv $W/x $W/r/trace/0.csv"),
        ("no-header", "sed -i 1d $W/r/trace/0.csv"),
        ("extra-column", "sed -i '2s/$/,extra/' $W/r/trace/0.csv"),
        ("crlf", "sed -i 's/$/\\r/' $W/r/trace/0.csv"),
        ("binary", "head -c 20000 /dev/urandom >> $W/r/trace/0.csv"),
        ("long-line", "python3 -c 'print(\"1,train,1,0,0,\" + \"x\"*50000000 + \",0,0,0,1,1\")' >> $W/r/trace/0.csv"),
        ("unknown-file", "sed -i '2s#train/[^,]*#train/../../etc/passwd#' $W/r/trace/0.csv"),
        ("phase-unknown", "sed -i '2s/,train,/,bogus,/' $W/r/trace/0.csv"),
        ("duplicate-rows-1e6", "python3 -c \"import sys; l=open('$W/r/trace/0.csv').read().splitlines()[1]; sys.stdout.write((l+'\\n')*3000000)\" >> $W/r/trace/0.csv"),
        ("fifo", "rm $W/r/trace/0.csv; mkfifo $W/r/trace/0.csv"),
        ("dev-zero", "rm $W/r/trace/0.csv; ln -s /dev/zero $W/r/trace/0.csv"),
        ("folder", "rm $W/r/trace/0.csv; mkdir $W/r/trace/0.csv"),
        ("empty", ": > $W/r/trace/0.csv"),
        ("extra-rank-file", "cp $W/r/trace/0.csv $W/r/trace/5.csv"),
        ("huge-sparse", "truncate -s 3G $W/r/trace/0.csv"),
        ("rank-file-name-huge", "mv $W/r/trace/0.csv $W/r/trace/99999999999999999999.csv"),
    ]
    # rows that parse but are not the plan's are violations (exit 1, on standard output); rows that
    # do not parse are a damaged file (2, naming it); CRLF may be read as LF
    violations = {"rank-huge", "epoch-huge", "unknown-file", "duplicate-rows-1e6", "extra-rank-file",
                  "rank-file-name-huge", "long-line"}
    for name, d in tdmg:
        exp = (1, 2) if name in violations else (0, 2) if name == "crlf" else (2,)
        add(c, f"audit-trace-{name}",
            "$BIN audit $W/r > $W/a.out 2>$W/a.err; rc=$?; s=$(stat -c %s $W/a.out); [ $s -gt 1000000 ] && wrong \"audit printed $s bytes to standard output (a trace field quoted whole)\"; s=$(stat -c %s $W/a.err); [ $s -gt 1000000 ] && wrong \"audit printed $s bytes to standard error (a trace line quoted whole)\"; head -c 2000 $W/a.err >&2; exit $rc",
            setup=base + "\n" + d, expect=exp, says=[] if name in violations else ["0.csv"], timeout=60,
            note="audit's docs say exit 1 for a malformed trace; the brief's policy says 2 for a damaged own file")
    # sweep.json: resume and report
    SW = "ok $BIN sweep --max-accelerators 2 -o $W/sw $SYN"
    swd = [
        ("truncated", "f=$W/sw/sweep.json; s=$(stat -c %s $f); truncate -s $((s/2)) $f"),
        ("random", "head -c 3000 /dev/urandom > $W/sw/sweep.json"),
        ("deep", "python3 -c 'print(\"[\"*200000 + \"]\"*200000)' > $W/sw/sweep.json"),
        ("dev-zero", "rm $W/sw/sweep.json; ln -s /dev/zero $W/sw/sweep.json"),
        ("folder", "rm $W/sw/sweep.json; mkdir $W/sw/sweep.json"),
        ("empty", ": > $W/sw/sweep.json"),
    ]
    for name, d in swd:
        for cmdname, cmd in (("resume", "$BIN sweep --max-accelerators 2 -o $W/sw $SYN"), ("report", "$BIN report $W/sw")):
            add(c, f"sweep-{cmdname}-sweep.json-{name}", cmd, setup=SW + "\n" + d, expect=(2,), says=["sweep.json"], timeout=40)
    swf = [
        ("trial-accelerators-huge", "d['trials'][0]['accelerators']=10**12"),
        ("trial-accelerators-zero", "d['trials'][0]['accelerators']=0"),
        ("trial-au-nan-like", "d['trials'][0]['au_percent']=1e308"),
        ("trials-empty-answer-kept", "d['trials']=[]"),
        ("trials-duplicated", "d['trials']=d['trials']*50"),
        ("answer-forged", "d['answer']={'most_passing': 1000, 'fewest_failing': 1}"),
        ("processes-zero", "d['processes']=0"),
        ("trial-output-elsewhere", "d['trials'][0]['output']='/etc'"),
        ("threshold-negative", "d['au_threshold_percent']=-50"),
        ("mode-unknown", "d['mode']='x'"),
    ]
    for name, e in swf:
        ed = f"pyedit <<'EOF'\nimport json, os\np=os.environ['W']+'/sw/sweep.json'\nd=json.load(open(p))\n{e}\njson.dump(d,open(p,'w'))\nEOF"
        for cmdname, cmd in (("resume", "$BIN sweep --max-accelerators 2 -o $W/sw $SYN"), ("report", "$BIN report $W/sw")):
            exp = (2,) if name in ("trial-accelerators-huge", "trial-accelerators-zero", "trials-duplicated", "processes-zero") else (0, 2)
            add(c, f"sweep-{cmdname}-forged-{name}", cmd, setup=SW + "\n" + ed, expect=exp, says=["sweep.json"], timeout=40,
                note="a forged sweep.json must be refused (2) or shown as it is; never a panic, hang or a wrong answer printed as the sweep's")


# =============================================================================================
# 6. words we build
# =============================================================================================
def cat_words():
    c = "words"
    names = {
        "comma-eq": "a,b=c",
        "quote": "it's",
        "dquote": 'say "x"',
        "bracket-hash": "x[1]#2",
        "tilde": "~t",
        "accent": "é-à",
        "space": "two words",
        "newline": "line\nbreak",
        "dollar-backslash": "a$HOME\\b",
        "brace-colon": "{a: b}",
        "percent": "50%off",
        "all": "s ,=' [#~é\"$\\x",
        "dash": "-o",
        "star-question": "*?",
    }
    for key, nm in names.items():
        add(c, f"sweep-o-{key}", f"D=$W/{q(nm)}; $BIN sweep --max-accelerators 1 -o \"$D\" $SYN >$W/s.out 2>$W/s.err; rc=$?; chk sweep $rc $W/s.err 0; [ $rc = 0 ] && {{ [ -f \"$D/trial-1/summary.json\" ] || wrong \"no trial-1/summary.json inside the sweep folder\"; [ -f \"$D/sweep.json\" ] || wrong 'no sweep.json'; }}; exit 0",
            expect=(0,), timeout=40)
    for key in ["comma-eq", "quote", "space", "newline", "all", "bracket-hash", "dquote", "tilde"]:
        nm = names[key]
        # Hydra grammar: quote the value; pick the quote the name does not contain
        if '"' in nm and "'" in nm:
            continue
        qv = f'"{nm}"' if '"' not in nm else f"'{nm}'"
        word = "++hydra.run.dir=$W/" + qv
        add(c, f"run-dir-{key}", f"$BIN run -q $SYN {q('++hydra.run.dir=' + qv).replace('++hydra.run.dir=', '++hydra.run.dir=')} >$W/r.out 2>$W/r.err; rc=$?; chk run $rc $W/r.err 0,2 hydra.run.dir; [ $rc = 0 ] && [ ! -f $W/{q(nm)}/summary.json ] && wrong \"summary.json is not in the folder named\"; exit 0",
            expect=(0,), timeout=40)
        # the value is relative to cwd = $W, given unquoted by the shell but quoted for Hydra
    for key in ["comma-eq", "quote", "space", "all", "newline"]:
        nm = names[key]
        add(c, f"report-png-{key}", f"D=$W/{q(nm)}; DLIO_RS_BROWSER_TIMEOUT=60 $BIN report --png \"$D\" > $W/p.out 2>$W/p.err; rc=$?; chk png $rc $W/p.err 0; [ $rc = 0 ] && {{ ls \"$D\"/charts/*.png >/dev/null 2>&1 || wrong 'no PNG in the charts folder'; }}; exit 0",
            setup=f"D=$W/{q(nm)}; ok $BIN sweep --max-accelerators 1 -o \"$D\" $SYNP; rm -f \"$D/sweep.json\"; mv \"$D\"/trial-1/* \"$D\"/; true",
            expect=(0,), limit=False, timeout=150)
    # the command a refused run suggests must generate the dataset where the run looks
    for key in ["quote", "space", "dollar-backslash", "tilde", "comma-eq", "newline", "all"]:
        nm = names[key]
        if '"' in nm and "'" in nm:
            qv = None
        qv = f'"{nm}"' if '"' not in nm else f"'{nm}'"
        if '"' in nm and "'" in nm:
            qv = "'" + nm.replace("'", "\\'") + "'"
        add(c, f"generate-hint-{key}",
            f"cd $W; $BIN run -q $T8 {q('++workload.dataset.data_folder=' + qv)} ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk run $rc $W/r.err 2 'generate the dataset with'; "
            f"cmd=$(hint $W/r.err); [ -n \"$cmd\" ] || {{ wrong 'no generate command in the message'; exit 0; }}; "
            f"eval \"set -- $cmd\" 2>$W/e.err || {{ wrong \"the suggested command is not valid shell: $cmd\"; exit 0; }}; "
            f"$BIN run -q \"$@\" ++hydra.run.dir=$W/g > $W/g.out 2>$W/g.err; chk suggested $? $W/g.err 0; "
            f"$BIN run -q $T8 {q('++workload.dataset.data_folder=' + qv)} ++hydra.run.dir=$W/o2 > $W/r2.out 2>$W/r2.err; chk rerun $? $W/r2.err 0; exit 0",
            expect=(0,), timeout=60)
    add(c, "generate-hint-config-dir-space",
        "mkdir -p \"$W/my cfg/workload\"; $BIN config $T8 | sed -n '2,$p' | sed 's/^  //' > \"$W/my cfg/workload/w.yaml\"; cd $W; $BIN run -q --config-dir \"$W/my cfg\" workload=w ++workload.dataset.data_folder=$W/dd ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk run $rc $W/r.err 2 'generate the dataset with'; "
        "cmd=$(hint $W/r.err); eval \"set -- $cmd\"; $BIN run -q \"$@\" ++hydra.run.dir=$W/g > $W/g.out 2>$W/g.err; chk suggested $? $W/g.err 0; $BIN run -q --config-dir \"$W/my cfg\" workload=w ++workload.dataset.data_folder=$W/dd ++hydra.run.dir=$W/o2 >/dev/null 2>$W/r2.err; chk rerun $? $W/r2.err 0; exit 0",
        expect=(0,), timeout=60)
    add(c, "generate-hint-compute-mapping",
        "cd $W; $BIN run -q $T8 '++workload.train.computation_time={mean: 0.001, stdev: 0}' ++workload.dataset.data_folder=$W/dd ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk run $rc $W/r.err 2 'generate the dataset with'; "
        "cmd=$(hint $W/r.err); eval \"set -- $cmd\"; $BIN run -q \"$@\" ++hydra.run.dir=$W/g > $W/g.out 2>$W/g.err; chk suggested $? $W/g.err 0; exit 0",
        expect=(0,), timeout=60)
    add(c, "generate-hint-workload-tilde-name",
        "mkdir -p $W/cfg/workload; $BIN config $T8 | sed -n '2,$p' | sed 's/^  //' > $W/cfg/workload/~.yaml; cd $W; $BIN run -q --config-dir $W/cfg \"workload='~'\" ++workload.dataset.data_folder=$W/dd ++hydra.run.dir=$W/o > $W/r.out 2>$W/r.err; rc=$?; chk run $rc $W/r.err 2; "
        "cmd=$(hint $W/r.err); [ -n \"$cmd\" ] || exit 0; eval \"set -- $cmd\"; $BIN run -q \"$@\" ++hydra.run.dir=$W/g > $W/g.out 2>$W/g.err; chk suggested $? $W/g.err 0; exit 0",
        expect=(0,), timeout=60)
    add(c, "bench-output-subdir-odd", "$BENCH $SYN ++hydra.run.dir=$W/o '++hydra.output_subdir=\"cfg, [x]=é\"'; rc=$?; [ $rc = 0 ] && [ ! -f \"$W/o/cfg, [x]=é/config.yaml\" ] && wrong 'config.yaml not in the subdir named'; exit $rc",
        expect=(0, 2), says=["output_subdir"])
    add(c, "compare-html-odd-name", "$BIN compare $W/p $W/p --html \"$W/c, [#]'é.html\"; rc=$?; [ $rc = 0 ] && [ ! -f \"$W/c, [#]'é.html\" ] && wrong 'page not where named'; exit $rc",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/p", expect=(0,))
    add(c, "sweep-data-folder-odd-generate", f"$BIN sweep --max-accelerators 2 -o $W/sw $T8 {q('++workload.dataset.data_folder=' + chr(34) + 'd, =x[1]' + chr(34))} ++workload.workflow.generate_data=True > $W/s.out 2>$W/s.err; rc=$?; chk sweep $rc $W/s.err 0; [ -d \"$W/d, =x[1]/train\" ] || wrong 'dataset not in the folder named'; exit 0",
        expect=(0,), timeout=60)
    add(c, "run-log-file-odd-name", "$BIN run -q $SYN ++hydra.run.dir=$W/o '++workload.output.log_file=\"l og,#é.log\"'; rc=$?; [ $rc = 0 ] && [ ! -f \"$W/o/l og,#é.log\" ] && wrong 'log not where named'; exit $rc",
        expect=(0, 2), says=["log_file"])


# =============================================================================================
# 7. smaller
# =============================================================================================
def cat_smaller():
    c = "smaller"
    # free space on load-only checkpoint runs
    add(c, "load-only-missing-checkpoint", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="mkdir -p $W/ck", expect=(1, 2), says=["model_states-0.pt"])
    add(c, "load-only-more-reads-than-saved", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.num_checkpoints_read=3 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="ok $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o0", expect=(0, 1, 2), says=["global_epoch"])
    add(c, "load-only-huge-model-no-folder", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.model.model_size_bytes=1000000000000000 ++workload.checkpoint.checkpoint_folder=$W/nothing ++hydra.run.dir=$W/o",
        expect=(1, 2), says=["nothing"])
    add(c, "load-only-huge-model-files-short", "$BIN run -q $CK ++workload.checkpoint.num_checkpoints_write=0 ++workload.model.model_size_bytes=1000000000000000 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="ok $BIN run -q $CK ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o0", expect=(1, 2), says=["model_states-0.pt"])
    add(c, "save-beyond-disk-inside-train", "$BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.checkpoint=True ++workload.checkpoint.checkpoint_after_epoch=1 ++workload.model.model_size_bytes=1000000000000000000 ++workload.checkpoint.checkpoint_folder=$W/ck ++hydra.run.dir=$W/o",
        setup="ok $BIN run -q $T8 ++workload.dataset.data_folder=$W/d ++workload.workflow.generate_data=True ++workload.workflow.train=False ++hydra.run.dir=$W/g",
        expect=(2,), says=["free"])
    # datasize
    ds = [
        ("zero-accelerators", "workload=unet3d_h100 --max-accelerators 0 --client-host-memory-in-gb 64", (2,), ["max-accelerators"]),
        ("zero-memory", "workload=unet3d_h100 --max-accelerators 1 --client-host-memory-in-gb 0", (2,), ["client-host-memory"]),
        ("negative-memory", "workload=unet3d_h100 --max-accelerators 1 --client-host-memory-in-gb -5", (2,), ["-5"]),
        ("float-memory", "workload=unet3d_h100 --max-accelerators 1 --client-host-memory-in-gb 0.5", (2,), ["0.5"]),
        ("overflow", "workload=unet3d_h100 --max-accelerators 18446744073709551616 --client-host-memory-in-gb 1", (2,), ["18446744073709551616"]),
        ("hosts-huge", "workload=unet3d_h100 --max-accelerators 8 --client-host-memory-in-gb 1024 --num-client-hosts 18446744073709551615", (0, 2), ["num-client-hosts"]),
        ("record-length-zero", "workload=unet3d_h100 --max-accelerators 8 --client-host-memory-in-gb 64 ++workload.dataset.record_length_bytes=0", (0, 2), ["record_length_bytes"]),
        ("samples-per-file-zero", "workload=unet3d_h100 --max-accelerators 8 --client-host-memory-in-gb 64 ++workload.dataset.num_samples_per_file=0", (2,), ["num_samples_per_file"]),
        ("batch-huge", "workload=unet3d_h100 --max-accelerators 8 --client-host-memory-in-gb 64 ++workload.reader.batch_size=1000000000000", (0, 2), ["batch_size"]),
        ("checkpoint-only-default", "workload=default ++workload.workflow.train=False ++workload.workflow.checkpoint=True --max-accelerators 8 --client-host-memory-in-gb 64", (2,), ["checkpoint"]),
        ("checkpoint-only-json", "workload=llama3_70b --max-accelerators 8 --client-host-memory-in-gb 64 --json", (2,), ["checkpoint"]),
        ("model-unknown", "--model nosuch --accelerator-type h100 --max-accelerators 8 --client-host-memory-in-gb 64", (2,), ["nosuch"]),
        ("model-and-workload", "workload=default --model unet3d --accelerator-type h100 --max-accelerators 8 --client-host-memory-in-gb 64", (0, 2), ["workload"]),
        ("model-traversal", "--model ../../etc/passwd --accelerator-type h100 --max-accelerators 8 --client-host-memory-in-gb 64", (2,), ["passwd"]),
        ("synthetic-format", "workload=default ++workload.dataset.format=synthetic --max-accelerators 8 --client-host-memory-in-gb 64", (0, 2), ["synthetic"]),
        ("record-stdev-huge", "workload=unet3d_h100 --max-accelerators 8 --client-host-memory-in-gb 64 ++workload.dataset.record_length_bytes=9223372036854775807", (0, 2), ["record_length_bytes"]),
        ("generate-only-workload", "workload=unet3d_datagen --max-accelerators 8 --client-host-memory-in-gb 64", (0, 2), ["train"]),
    ]
    for name, args, exp, says in ds:
        add(c, f"datasize-{name}", f"$BIN datasize {args}", expect=exp, says=says)
    # plan
    pl = [
        ("world-1e12-default", "-n 1000000000000 workload=default", (2,), ["1000000000000"]),
        ("world-overflow", "-n 18446744073709551616 workload=default", (2,), ["18446744073709551616"]),
        ("world-max-u64-llama", "-n 18446744073709551615 workload=llama3_8b", (2,), ["18446744073709551615"]),
        ("world-1e12-llama-1t", "-n 1000000000000 workload=llama3_1t", (0, 2), ["1000000000000"]),
        ("rank-beyond", "-n 2 --rank 2 workload=default", (2,), ["rank"]),
        ("rank-huge", "--rank 18446744073709551615 workload=default", (2,), ["rank"]),
        ("epoch-zero", "--epoch 0 workload=default", (2,), ["epoch"]),
        ("epoch-beyond", "--epoch 11 workload=default", (2,), ["epoch"]),
        ("head-huge", "--head 18446744073709551615 workload=default ++workload.dataset.num_files_train=8", (0,), []),
        ("head-zero", "--head 0 workload=default", (0, 2), ["head"]),
        ("eval-without-eval-files", "--eval workload=default ++workload.dataset.num_files_eval=0", (2,), ["eval"]),
        ("checkpoint-rank-beyond", "-n 8 --rank 9 workload=llama3_8b", (2,), ["rank"]),
        ("huge-dataset", "workload=default ++workload.dataset.num_files_train=1000000000000 ++workload.dataset.num_samples_per_file=1000000", (0, 2), ["num_files_train"]),
    ]
    for name, args, exp, says in pl:
        add(c, f"plan-{name}", f"$BIN plan {args} | head -c 100000; exit ${{PIPESTATUS[0]}}", expect=exp, says=says, timeout=30)
    # absurd -n for run
    for n in ["100000", "4294967296", "18446744073709551615", "-1", "1e3", "0x10"]:
        add(c, f"run-n-{n}", f"$BIN run -q -n {n} $SYN ++hydra.run.dir=$W/o", expect=(2,), says=[n], timeout=30)
    # environment variables
    env = [
        ("accelerators-abc", "DLIO_RS_ACCELERATORS=abc $BENCH $SYN ++hydra.run.dir=$W/o", (2,), ["DLIO_RS_ACCELERATORS"]),
        ("accelerators-empty", "DLIO_RS_ACCELERATORS= $BENCH $SYN ++hydra.run.dir=$W/o", (0, 2), ["DLIO_RS_ACCELERATORS"]),
        ("accelerators-space", "DLIO_RS_ACCELERATORS=' 2' $BENCH $SYN ++hydra.run.dir=$W/o", (0, 2), ["DLIO_RS_ACCELERATORS"]),
        ("accelerators-huge", "DLIO_RS_ACCELERATORS=18446744073709551615 $BENCH $SYN ++hydra.run.dir=$W/o", (2,), ["18446744073709551615"]),
        ("accelerators-100000", "DLIO_RS_ACCELERATORS=100000 $BENCH $SYN ++hydra.run.dir=$W/o", (2,), ["100000"]),
        ("accelerators-not-utf8", "DLIO_RS_ACCELERATORS=$'\\xff' $BENCH $SYN ++hydra.run.dir=$W/o", (2,), ["DLIO_RS_ACCELERATORS"]),
        ("accelerators-with-dlio-rs-run", "DLIO_RS_ACCELERATORS=abc $BIN run -q $SYN ++hydra.run.dir=$W/o", (0, 2), ["DLIO_RS_ACCELERATORS"]),
        ("browser-missing", "DLIO_RS_BROWSER=/nonexistent $BIN report --png $W/p", (1, 2), ["/nonexistent"]),
        ("browser-true", "DLIO_RS_BROWSER=/bin/true $BIN report --png $W/p", (1,), ["/bin/true"]),
        ("browser-false", "DLIO_RS_BROWSER=/bin/false $BIN report --png $W/p", (1,), ["/bin/false"]),
        ("browser-sleeps", "printf '#!/bin/sh\\nsleep 100\\n' > $W/slow.sh; chmod +x $W/slow.sh; DLIO_RS_BROWSER=$W/slow.sh DLIO_RS_BROWSER_TIMEOUT=1 $BIN report --png $W/p", (1,), ["slow.sh"]),
        ("browser-sleeps-forks", "printf '#!/bin/sh\\n(sleep 100) &\\nsleep 100\\n' > $W/slow.sh; chmod +x $W/slow.sh; DLIO_RS_BROWSER=$W/slow.sh DLIO_RS_BROWSER_TIMEOUT=1 $BIN report --png $W/p", (1,), ["slow.sh"]),
        ("browser-draws-nothing", "printf '#!/bin/sh\\nexit 0\\n' > $W/b.sh; chmod +x $W/b.sh; DLIO_RS_BROWSER=$W/b.sh $BIN report --png $W/p", (1,), ["b.sh"]),
        ("browser-empty", "DLIO_RS_BROWSER= $BIN report --png $W/p", (1, 2), ["DLIO_RS_BROWSER"]),
        ("browser-folder", "DLIO_RS_BROWSER=/tmp $BIN report --png $W/p", (1, 2), ["/tmp"]),
        ("browser-timeout-zero", "DLIO_RS_BROWSER_TIMEOUT=0 $BIN report --png $W/p", (2,), ["DLIO_RS_BROWSER_TIMEOUT"]),
        ("browser-timeout-nan", "DLIO_RS_BROWSER_TIMEOUT=nan $BIN report --png $W/p", (2,), ["DLIO_RS_BROWSER_TIMEOUT"]),
        ("browser-timeout-inf", "DLIO_RS_BROWSER_TIMEOUT=inf $BIN report --png $W/p", (2,), ["DLIO_RS_BROWSER_TIMEOUT"]),
        ("browser-timeout-negative", "DLIO_RS_BROWSER_TIMEOUT=-1 $BIN report --png $W/p", (2,), ["DLIO_RS_BROWSER_TIMEOUT"]),
        ("browser-timeout-without-png", "DLIO_RS_BROWSER_TIMEOUT=abc $BIN report $W/p", (0, 2), ["DLIO_RS_BROWSER_TIMEOUT"]),
        ("planted-fault-unknown", "DLIO_RS_PLANTED_FAULT=boom $BIN run -q $SYN ++hydra.run.dir=$W/o", (0, 2), ["DLIO_RS_PLANTED_FAULT"]),
        ("planted-fault-kill-1-rank", "DLIO_RS_PLANTED_FAULT=kill $BIN run -q $SYN ++hydra.run.dir=$W/o", (0,), []),
        ("planted-fault-kill-2-ranks", "DLIO_RS_PLANTED_FAULT=kill $BIN run -q -n 2 $SLOW ++workload.dataset.num_files_train=8 ++hydra.run.dir=$W/o; rc=$?; [ -f $W/o/summary.json ] && echo 'SURVEY-MIXED: a killed run left a summary.json' >&2; exit $rc", (137,), []),
        ("drop-timeout-abc", "DLIO_DROP_CACHES_TIMEOUT=abc $BIN run -q $SYN ++workload.reader.page_cache=drop_before_epoch ++hydra.run.dir=$W/o", (2,), ["DLIO_DROP_CACHES_TIMEOUT"]),
        ("drop-timeout-negative", "DLIO_DROP_CACHES_TIMEOUT=-5 $BIN run -q $SYN ++workload.reader.page_cache=drop_before_epoch ++hydra.run.dir=$W/o", (2,), ["DLIO_DROP_CACHES_TIMEOUT"]),
        ("drop-timeout-nan", "DLIO_DROP_CACHES_TIMEOUT=nan $BIN run -q $SYN ++workload.reader.page_cache=drop_before_epoch ++hydra.run.dir=$W/o", (2,), ["DLIO_DROP_CACHES_TIMEOUT"]),
    ]
    for name, cmd, exp, says in env:
        setup = "ok $BIN run -q $SYNP ++hydra.run.dir=$W/p" if "report" in cmd else ""
        add(c, f"env-{name}", cmd, setup=setup, expect=exp, says=says, timeout=60,
            limit=not ("png" in cmd))
    add(c, "sweep-hold-nan", "$BIN sweep --max-accelerators 2 --hold nan -o $W/sw $CK", expect=(2,), says=["hold"])
    add(c, "sweep-hold-inf", "$BIN sweep --max-accelerators 2 --hold inf -o $W/sw $CK", expect=(2,), says=["hold"])
    add(c, "sweep-precision-zero", "$BIN sweep --max-accelerators 2 --precision 0 -o $W/sw $SYN", expect=(2,), says=["precision"])
    add(c, "sweep-step-zero", "$BIN sweep --max-accelerators 2 --step 0 -o $W/sw $SYN", expect=(2,), says=["step"])
    add(c, "sweep-min-above-max", "$BIN sweep --min-accelerators 4 --max-accelerators 2 -o $W/sw $SYN", expect=(2,), says=["accelerators"])
    add(c, "sweep-max-huge", "$BIN sweep --max-accelerators 18446744073709551615 -o $W/sw $SYN", expect=(2,), says=["max-accelerators"])
    add(c, "sweep-step-huge", "$BIN sweep --max-accelerators 2 --step 18446744073709551615 -o $W/sw $SYN", expect=(2,), says=["step"])
    add(c, "sweep-precision-huge", "$BIN sweep --max-accelerators 4 --precision 18446744073709551615 -o $W/sw $SYN", expect=(0, 2), says=["precision"])
    add(c, "sweep-neither-train-nor-checkpoint", "$BIN sweep --max-accelerators 2 -o $W/sw $SYN ++workload.workflow.train=False", expect=(2,), says=["train"])
    add(c, "sweep-output-is-file", "$BIN sweep --max-accelerators 2 -o $W/f $SYN", setup="touch $W/f", expect=(2,), says=["f"])
    add(c, "audit-no-folder", "$BIN audit $W/nothing", expect=(1, 2), says=["nothing"])
    add(c, "report-no-folder", "$BIN report $W/nothing", expect=(2,), says=["nothing"])
    add(c, "compare-no-folder", "$BIN compare $W/nothing $W/nothing2", expect=(2,), says=["nothing"])
    add(c, "report-empty-folder", "$BIN report $W/e", setup="mkdir $W/e", expect=(2,), says=["summary.json"])
    add(c, "compare-same-folder", "$BIN compare $W/p $W/p --html $W/c.html", setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/p", expect=(0,))
    add(c, "compare-html-is-folder", "$BIN compare $W/p $W/p --html $W/p", setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/p", expect=(1, 2), says=["p"])
    add(c, "compare-html-overwrites-summary", "$BIN compare $W/p $W/p --html $W/p/summary.json; rc=$?; python3 -c \"import json; json.load(open('$W/p/summary.json'))\" 2>/dev/null || echo 'SURVEY-NOTE: compare --html overwrote a run file (summary.json) with its page' >&2; exit $rc",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/p", expect=(0, 1, 2), says=["summary.json"],
        note="the user names the page; writing over a run's own result file is doubtful")
    add(c, "report-png-interrupted", "timeout --preserve-status -s INT 2.5 $BIN report --png $W/p > $W/r.out 2>$W/r.err; rc=$?; sleep 1; n=0; for p in $(pgrep -s 0); do [ \"$(cat /proc/$p/comm 2>/dev/null)\" = chromium ] && n=$((n+1)); done; [ $n -gt 0 ] && echo \"SURVEY-NOTE: $n browser process(es) still running 1 s after report --png was stopped (exit $rc)\" >&2; cat $W/r.err >&2; exit $rc",
        setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/p", expect=(0, 130), limit=False, timeout=90)
    add(c, "report-in-readonly-folder", "chmod 555 $W/p; $BIN report $W/p; rc=$?; chmod 755 $W/p; exit $rc", setup="ok $BIN run -q $SYNP ++hydra.run.dir=$W/p", expect=(0, 1, 2), says=["p"],
        note="as root the folder stays writable")


# =============================================================================================
# 8. config fuzz
# =============================================================================================
def cat_fuzz():
    c = "fuzz"
    # hand-picked hostile values for run (must be 0 with sane results, or 2 naming the key)
    hand = [
        ("epochs-nan", "++workload.train.epochs=nan", (2,), ["epochs"]),
        ("epochs-inf", "++workload.train.epochs=inf", (2,), ["epochs"]),
        ("batch-1e308", "++workload.reader.batch_size=1e308", (2,), ["batch_size"]),
        ("batch-negative", "++workload.reader.batch_size=-1", (2,), ["batch_size"]),
        ("compute-nan", "++workload.train.computation_time=nan", (2,), ["computation_time"]),
        ("compute-inf", "++workload.train.computation_time=inf", (2,), ["computation_time"]),
        ("compute-negative", "++workload.train.computation_time=-1", (0, 2), ["computation_time"]),
        ("compute-mean-nan", "'++workload.train.computation_time={mean: nan, stdev: 0.1}'", (2,), ["computation_time"]),
        ("compute-stdev-negative", "'++workload.train.computation_time={mean: 0.01, stdev: -1}'", (2,), ["computation_time"]),
        ("compute-type-unknown", "'++workload.train.computation_time={type: cauchy, loc: 0}'", (2,), ["computation_time"]),
        ("compute-lognormal-huge", "'++workload.train.computation_time={type: lognormal, mean: 700, stdev: 1}'", (2,), ["computation_time"]),
        ("compute-normal-huge-stdev", "'++workload.train.computation_time={mean: 0, stdev: 1e300}'", (2,), ["computation_time"]),
        ("compute-uniform-reversed", "'++workload.train.computation_time={type: uniform, min: 1, max: 0}'", (2,), ["computation_time"]),
        ("compute-list", "'++workload.train.computation_time=[1,2]'", (2,), ["computation_time"]),
        ("metric-au-nan", "++workload.metric.au=nan", (2,), ["metric.au"]),
        ("metric-au-2", "++workload.metric.au=2", (2,), ["metric.au"]),
        ("metric-au-negative", "++workload.metric.au=-0.5", (2,), ["metric.au"]),
        ("metric-au-string", "++workload.metric.au=high", (2,), ["metric.au"]),
        ("exclude-start-huge", "++workload.output.metric.exclude_start_steps=18446744073709551615", (2,), ["exclude_start_steps"]),
        ("exclude-end-negative", "++workload.output.metric.exclude_end_steps=-1", (2,), ["exclude_end_steps"]),
        ("record-length-zero", "++workload.dataset.record_length_bytes=0", (0, 2), ["record_length_bytes"]),
        ("record-length-1e308", "++workload.dataset.record_length_bytes=1e308", (2,), ["record_length_bytes"]),
        ("files-zero", "++workload.dataset.num_files_train=0", (2,), ["num_files_train"]),
        ("samples-per-file-huge", "++workload.dataset.num_samples_per_file=18446744073709551615", (2,), ["num_samples_per_file"]),
        ("total-steps-negative", "++workload.train.total_training_steps=-5", (0, 2), ["total_training_steps"]),
        ("total-steps-huge", "++workload.train.total_training_steps=18446744073709551615", (2,), ["total_training_steps"]),
        ("seed-huge", "++workload.train.seed=99999999999999999999", (2,), ["seed"]),
        ("seed-negative", "++workload.train.seed=-1", (0, 2), ["seed"]),
        ("seed-float", "++workload.train.seed=1.5", (2,), ["seed"]),
        ("prefetch-huge", "++workload.reader.prefetch_size=18446744073709551615", (2,), ["prefetch_size"]),
        ("prefetch-negative", "++workload.reader.prefetch_size=-1", (2,), ["prefetch_size"]),
        ("read-threads-negative", "++workload.reader.read_threads=-1", (2,), ["read_threads"]),
        ("transfer-size-zero", "++workload.reader.transfer_size=0", (0, 2), ["transfer_size"]),
        ("transfer-size-negative", "++workload.reader.transfer_size=-4096", (2,), ["transfer_size"]),
        ("model-name-long", "++workload.model.name=" + "m" * 100000, (0, 2), ["model.name"]),
        ("model-name-slash", "'++workload.model.name=\"a/../../b\"'", (0, 2), ["model.name"]),
        ("model-name-unicode", "'++workload.model.name=\"模型\U0001F600\"'", (0, 2), ["model.name"]),
        ("model-name-control", "'++workload.model.name=\"a\\x00b\"'", (0, 2), ["model.name"]),
        ("data-folder-long", "++workload.dataset.data_folder=" + "/".join(["d" * 200] * 30), (0, 2), ["data_folder"]),
        ("format-unknown", "++workload.dataset.format=zip", (2,), ["format"]),
        ("format-number", "++workload.dataset.format=5", (2,), ["format"]),
        ("framework-unknown", "++workload.framework=jax", (0, 2), ["framework"]),
        ("data-loader-unknown", "++workload.reader.data_loader=mxnet", (0, 2), ["data_loader"]),
        ("shuffle-unknown", "++workload.reader.sample_shuffle=sometimes", (2,), ["sample_shuffle"]),
        ("eval-time-nan", "++workload.workflow.evaluation=True ++workload.dataset.num_files_eval=2 ++workload.evaluation.eval_time=nan", (2,), ["eval_time"]),
        ("epochs-between-evals-zero", "++workload.workflow.evaluation=True ++workload.dataset.num_files_eval=2 ++workload.evaluation.epochs_between_evals=0", (0, 2), ["epochs_between_evals"]),
        ("batch-eval-zero", "++workload.workflow.evaluation=True ++workload.dataset.num_files_eval=2 ++workload.reader.batch_size_eval=0", (2,), ["batch_size_eval"]),
        ("steps-between-checkpoints-zero", "++workload.workflow.checkpoint=True ++workload.checkpoint.steps_between_checkpoints=0 ++workload.checkpoint.checkpoint_folder=$W/ck", (0, 2), ["steps_between_checkpoints"]),
        ("checkpoint-after-epoch-huge", "++workload.workflow.checkpoint=True ++workload.checkpoint.checkpoint_after_epoch=18446744073709551615 ++workload.checkpoint.checkpoint_folder=$W/ck", (0, 2), ["checkpoint_after_epoch"]),
        ("section-is-scalar", "++workload.reader=5", (2,), ["reader"]),
        ("section-is-list", "'++workload.dataset=[1,2]'", (2,), ["dataset"]),
        ("key-very-long", "++workload." + "k" * 5000 + "=1", (0, 2), ["k" * 20]),
        ("key-deep", "++workload." + ".".join(["a"] * 500) + "=1", (0, 2), ["a.a.a"]),
        ("value-long-string", "++workload.dataset.file_prefix=" + "p" * 100000, (0, 2), ["file_prefix"]),
        ("throttle-nan", "++workload.storage.throttle.mib_per_second=nan", (2,), ["mib_per_second"]),
        ("throttle-zero", "++workload.storage.throttle.mib_per_second=0", (0, 2), ["mib_per_second"]),
        ("throttle-latency-inf", "++workload.storage.throttle.mib_per_second=1 ++workload.storage.throttle.latency_ms=inf", (2,), ["latency_ms"]),
        ("storage-type-unknown", "++workload.storage.storage_type=ftp", (2,), ["storage_type"]),
        ("page-cache-unknown", "++workload.reader.page_cache=maybe", (2,), ["page_cache"]),
        ("odirect-string", "++workload.reader.odirect=yes", (2,), ["odirect"]),
        ("verify-in-config", "++workload.output.trace=2", (2,), ["trace"]),
        ("listing-interval-zero", "++workload.dataset.listing_validation_interval=0", (0, 2), ["listing_validation_interval"]),
        ("subfolders-negative", "++workload.dataset.num_subfolders_train=-2", (2,), ["num_subfolders_train"]),
    ]
    for name, word, exp, says in hand:
        add(c, f"run-{name}", f"$BIN run -q $SYN {word} ++hydra.run.dir=$W/o >$W/r.out 2>$W/r.err; rc=$?; cat $W/r.err >&2; "
            "if [ $rc = 0 ] && [ -f $W/o/summary.json ]; then python3 -c \"import json,math,sys; t=open('$W/o/summary.json').read(); d=json.loads(t, parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c))); \" 2>/dev/null || echo 'SURVEY-WRONG: summary.json holds NaN/Infinity (not JSON) after exit 0' >&2; fi; exit $rc",
            expect=exp, says=says, timeout=30)
    # random words: a seeded fuzzer over keys and hostile values, through `config` (cheap)
    rnd = random.Random(1234)
    keys = ["train.epochs", "reader.batch_size", "train.computation_time", "dataset.num_files_train",
            "dataset.record_length_bytes", "dataset.num_samples_per_file", "reader.read_threads",
            "reader.prefetch_size", "metric.au", "dataset.format", "dataset.data_folder",
            "checkpoint.num_checkpoints_write", "model.model_size_bytes", "evaluation.eval_time",
            "dataset.record_length_bytes_stdev", "reader.file_shuffle", "train.seed",
            "dataset.num_subfolders_train", "checkpoint.time_between_checkpoints", "output.folder"]
    vals = ["nan", "-nan", "inf", "-inf", "1e308", "-1e308", "1e-320", "-1", "-0", "0", "0.0",
            "18446744073709551616", "9223372036854775808", "-9223372036854775809", "1_000",
            "0b101", "0o17", "+5", ".5", "5.", "1e", "true", "False", "null", "''", '""',
            "'\\u0000'", "[]", "{}", "[nan]", "{mean: inf}", "é", "\U0001F600", "a" * 3000,
            "'" + "b" * 3000 + "'", "[[[[[[[[[[]]]]]]]]]]", "{a: {b: {c: {d: 1}}}}", "${oc.env:HOME}",
            "${workload.train.epochs}", "'${x}'", "?", "%", "\\\\", "'a\\'b'", "\"a\\\"b\""]
    for i in range(44):
        k = rnd.choice(keys)
        v = rnd.choice(vals)
        word = f"++workload.{k}={v}"
        sub = "config" if i % 3 else "run -q"
        extra = "" if sub == "config" else " ++hydra.run.dir=$W/o"
        add(c, f"random-{i:02d}-{sub.split()[0]}-{k}", f"$BIN {sub} $SYN {q(word)}{extra}", expect=(0, 2),
            says=[k.split('.')[-1]], timeout=30, note=f"word: {word[:80]}")
    # YAML workload files
    yamls = [
        ("nan-values", "model: {name: y}\nmetric: {au: .nan}\n", (2,), ["metric.au"]),
        ("huge-int", "model: {name: y}\ndataset: {num_files_eval: 123456789012345678901234567890}\n", (2,), ["123456789012345678901234567890"]),
        ("inf-values", "model: {name: y}\nevaluation: {eval_time: .inf}\nworkflow: {evaluation: True}\ndataset: {num_files_eval: 2}\n", (2,), ["eval_time"]),
        ("section-null", "model: {name: y}\nreader: null\n", (0, 2), ["reader"]),
        ("section-scalar", "model: {name: y}\ndataset: 5\n", (2,), ["dataset"]),
        ("section-list", "model: {name: y}\ntrain: [1, 2]\n", (2,), ["train"]),
        ("unicode-keys", "model: {name: y}\ndataset: {fïles: 3}\n", (0, 2), ["fïles"]),
        ("deep-nesting", "model: {name: y}\nx: " + "[" * 10000 + "]" * 10000 + "\n", (2,), ["'w'"]),
        ("long-key", "model: {name: y}\n" + "k" * 100000 + ": 1\n", (0, 2), ["'w'"]),
        ("big-file", None, (0, 2), ["w.yaml"]),
        ("binary", None, (2,), ["w.yaml"]),
        ("anchors-cycle", "a: &a [*a]\n", (2,), ["'w'"]),
        ("merge-scalar", "model: {name: y}\nreader:\n  <<: 5\n", (2,), ["'w'", "merge"]),
        ("tags-float-on-int", "model: {name: y}\ndataset: {num_files_train: !!float 4}\n", (0, 2), ["num_files_train"]),
        ("tag-binary", "model: {name: y}\ndataset: {file_prefix: !!binary aGVsbG8=}\n", (0, 2), ["'w'", "binary"]),
        ("complex-key", "model: {name: y}\n? [a, b]\n: 1\n", (2,), ["'w'"]),
        ("workflow-strings", "model: {name: y}\nworkflow: {train: 'yes', generate_data: 'no'}\n", (2,), ["workflow"]),
        ("crlf", "model: {name: y}\r\ntrain: {epochs: 1}\r\n", (0,), []),
        ("interpolation", "model: {name: '${oc.env:HOME}'}\n", (0, 2), ["model.name"]),
        ("only-comment", "# nothing\n", (0, 2), ["w.yaml"]),
        ("workload-wrapper", "workload:\n  model: {name: y}\n", (0, 2), ["workload"]),
    ]
    for name, text, exp, says in yamls:
        if name == "big-file":
            mk = "python3 -c \"import sys; sys.stdout.write('model: {name: y}\\n' + ''.join('k%d: %d\\n' % (i, i) for i in range(2000000)))\" > $W/cd/workload/w.yaml"
        elif name == "binary":
            mk = "head -c 5000 /dev/urandom > $W/cd/workload/w.yaml"
        else:
            mk = f"cat > $W/cd/workload/w.yaml <<'SURVEYEOF'\n{text}SURVEYEOF"
        add(c, f"yaml-{name}", f"$BIN run -q --config-dir $W/cd workload=w ${{SYN#workload=default}} ++hydra.run.dir=$W/o",
            setup="mkdir -p $W/cd/workload\n" + mk, expect=exp, says=says, timeout=60)


for f in (cat_mpi, cat_mixed, cat_shared, cat_paths, cat_readers, cat_words, cat_smaller, cat_fuzz):
    f()

# ---------------------------------------------------------------------------------------------
# Running and classifying
# ---------------------------------------------------------------------------------------------
RUN_ID = f"{os.getpid()}"
PRINT_LOCK = threading.Lock()


def session_pids(sid):
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            fields = st[st.rindex(")") + 2:].split()
            if int(fields[3]) == sid:  # session id
                pids.append(int(d))
        except (OSError, ValueError, IndexError):
            pass
    return pids


def kill_session(sid):
    """Kills every process of the try's session (the try's own processes only), by pid."""
    for _ in range(3):
        pids = [p for p in session_pids(sid) if p != os.getpid()]
        if not pids:
            return
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


def read_head(path, n=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(n).decode("utf-8", "replace")
    except OSError:
        return ""


def manifest_of(w):
    r = subprocess.run(["bash", "-c", PRELUDE_MANIFEST], env={**os.environ, "W": w},
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=60)
    return r.stdout.decode("utf-8", "replace")


PRELUDE_MANIFEST = r'''manifest() { ( cd "$W/by" && find . -mindepth 1 -printf '%y %p -> %l %s\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0r sha256sum ) 2>/dev/null; }; manifest'''


def run_try(t, root):
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "._-") else "_" for ch in t.id)[:100]
    w = os.path.join(root, f"{TRIES.index(t):03d}-{safe}")
    shutil.rmtree(w, ignore_errors=True)
    os.makedirs(w)
    script = PRELUDE
    if t.limit:
        script = "ulimit -v 4000000\n" + script
    script += "\n" + t.setup + "\nsnap\n" + t.cmd + "\n"
    with open(os.path.join(w, ".script.sh"), "w") as f:
        f.write(script)
    env = dict(os.environ)
    env.update({"BIN_DIR": BIN_DIR, "W": w, "RUST_BACKTRACE": "0"})
    env.pop("DLIO_RS_ACCELERATORS", None)
    out_p, err_p = os.path.join(w, ".stdout"), os.path.join(w, ".stderr")
    start = time.monotonic()
    timed_out = False
    with open(out_p, "wb") as out, open(err_p, "wb") as err:
        p = subprocess.Popen(["bash", os.path.join(w, ".script.sh")], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=err, env=env, cwd=w, start_new_session=True)
        try:
            rc = p.wait(timeout=t.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_session(p.pid)
            rc = p.wait()
    secs = time.monotonic() - start
    # anything the try left running (background runs) goes too
    kill_session(p.pid)
    stdout, stderr = read_head(out_p), read_head(err_p)
    problems = []
    cls = "OK"
    markers = [l for l in stderr.splitlines() if l.startswith("SURVEY-")]
    both = stdout + "\n" + stderr
    if timed_out:
        cls = "HANG"
        problems.append(f"did not end within {t.timeout} s (killed)")
    if rc == 124 and "timeout 60" in t.cmd:
        cls = "HANG"
        problems.append("an inner step bounded by timeout 60 did not end")
    if any(m.startswith("SURVEY-HANG") for m in markers):
        cls = "HANG"
    if cls == "OK":
        if rc in (101, 134, 135, 136, 139) or rc < 0 or "panicked" in stderr or "memory allocation of" in stderr \
                or any(m.startswith("SURVEY-PANIC") for m in markers):
            if not (rc == 137 and 137 in t.expect):
                cls = "PANIC"
                problems.append(f"exit {rc}" + ("; panicked" if "panicked" in stderr else ""))
        elif rc in (137,) and 137 not in t.expect:
            cls = "PANIC"
            problems.append("killed by SIGKILL (memory limit or OOM?)")
    setup_failed = any(m.startswith("SURVEY-SETUP") for m in markers) and rc == 97
    # bystanders
    if not setup_failed and os.path.exists(os.path.join(w, ".by.before")):
        before = read_head(os.path.join(w, ".by.before"))
        after = manifest_of(w)
        if before != after:
            diff = set(before.splitlines()) ^ set(after.splitlines())
            problems.append(("(noted, user-named path) " if t.bystander_ok else "") + "bystander files changed: " + "; ".join(sorted(diff))[:300])
            if cls == "OK" and not t.bystander_ok:
                cls = "MIXED"
    if cls == "OK" and any(m.startswith("SURVEY-MIXED") for m in markers):
        cls = "MIXED"
    if cls == "OK":
        if setup_failed:
            cls = "WRONG-CODE"
            problems.append("a setup step (a run that should pass) failed")
        elif rc not in t.expect:
            cls = "WRONG-CODE"
            problems.append(f"exit {rc}, expected {'/'.join(map(str, t.expect))}")
        elif rc != 0:
            low = both.lower()
            missing = [s for s in t.says if s.lower() not in low]
            if missing:
                cls = "WRONG-CODE"
                problems.append("message does not name: " + ", ".join(missing)[:200])
        if cls == "OK" and any(m.startswith("SURVEY-WRONG") for m in markers):
            cls = "WRONG-CODE"
    problems += markers
    shutil.rmtree(w, ignore_errors=True)
    # scratch made outside W by a try (e.g. /dev/shm)
    return {
        "id": t.id, "category": t.cat, "command": (t.setup + "\n---\n" + t.cmd).strip(),
        "exit_code": rc, "seconds": round(secs, 2), "class": cls,
        "stderr": stderr[:400], "problems": problems, "expected": list(t.expect), "note": t.note,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", help="categories, comma-separated: " + ",".join(CATEGORIES))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--id", help="only tries whose id contains this")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", default="results.json")
    args = ap.parse_args()
    ids = [t.id for t in TRIES]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        sys.exit(f"duplicate try ids: {sorted(dup)}")
    tries = TRIES
    if args.only:
        want = set(args.only.split(","))
        bad = want - set(CATEGORIES)
        if bad:
            sys.exit(f"unknown categories {sorted(bad)}; known: {CATEGORIES}")
        tries = [t for t in tries if t.cat in want]
    if args.id:
        tries = [t for t in tries if args.id in t.id]
    if args.list:
        for t in tries:
            print(t.cat, t.id)
        print(len(tries), "tries")
        return
    for b in ("dlio-rs", "dlio_benchmark"):
        if not os.access(os.path.join(BIN_DIR, b), os.X_OK):
            sys.exit(f"{BIN_DIR}/{b} is missing: build it or set BIN_DIR")
    root = f"/tmp/survey-{RUN_ID}"
    os.makedirs(root, exist_ok=True)
    t0 = time.monotonic()
    results = []
    # the long tries first, so the pool ends together
    order = sorted(tries, key=lambda t: -t.timeout)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futs = {pool.submit(run_try, t, root): t for t in order}
        for n, fut in enumerate(concurrent.futures.as_completed(futs), 1):
            r = fut.result()
            results.append(r)
            with PRINT_LOCK:
                flag = "" if r["class"] == "OK" else "  <-- " + "; ".join(r["problems"])[:160]
                print(f"[{n:3d}/{len(tries)}] {r['class']:10s} {r['seconds']:6.1f}s {r['category']:8s} {r['id']}{flag}", flush=True)
    shutil.rmtree(root, ignore_errors=True)
    total = time.monotonic() - t0
    results.sort(key=lambda r: (CATEGORIES.index(r["category"]), r["id"]))
    with open(args.out, "w") as f:
        json.dump({"bin_dir": BIN_DIR, "seconds": round(total, 1), "tries": results}, f, indent=1, ensure_ascii=False)
    # the table
    print()
    print(f"{'category':32s}" + "".join(f"{c:>11s}" for c in CLASSES) + f"{'total':>8s}")
    tot = {c: 0 for c in CLASSES}
    for cat in CATEGORIES:
        rs = [r for r in results if r["category"] == cat]
        if not rs:
            continue
        counts = {c: sum(r["class"] == c for r in rs) for c in CLASSES}
        for c in CLASSES:
            tot[c] += counts[c]
        print(f"{CAT_TITLES[cat]:32s}" + "".join(f"{counts[c]:>11d}" for c in CLASSES) + f"{len(rs):>8d}")
    print(f"{'all':32s}" + "".join(f"{tot[c]:>11d}" for c in CLASSES) + f"{len(results):>8d}")
    print(f"\n{len(results)} tries in {total:.0f} s; results in {args.out}")


if __name__ == "__main__":
    main()
