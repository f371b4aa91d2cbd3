#!/bin/bash
# The native DALI loader beside Python DLIO's (which runs real DALI), same words, same device of
# fixed speed: jpeg (fn.readers.file + fn.decoders.image), with DLIO's dont_use_mmap True (as its
# resnet50 workloads set it) and False, at three compute times across the AU curve; the data
# files' pages evicted before every run, each run's reads counted by the block-throttle group.
# DLIO's native_dali runs one epoch only (it fails at the second: docs/deviations.md), so one
# epoch is measured. Prints one line per run and the medians; docs/benchmarks.md has the figures.
#
#   DLIO_FIDELITY_VENV=/path/to/venv benches/fidelity/native_dali.sh [ROUNDS]
#
# Needs root (cgroup v1 blkio), a venv with dlio-benchmark and nvidia-dali-cuda120 (DALI's CPU
# operators run without a GPU), and dlio-rs built (cargo build --release). Env: DLIO_BENCH_DIR
# (default target/bench-data), DLIO_FIDELITY_MIB_S (the cap, default 16), DLIO_BENCH_DEVICE
# (MAJ:MIN of the device the bench dir is on; default: found with stat).
set -eu
rounds=${1:-3}
venv=${DLIO_FIDELITY_VENV:?set DLIO_FIDELITY_VENV to a venv with dlio-benchmark and nvidia-dali}
here=$(cd "$(dirname "$0")/../.." && pwd)
bench=${DLIO_BENCH_DIR:-$here/target/bench-data}
data=$bench/native-dali/data
rs=$here/target/release/dlio_benchmark
mib_s=${DLIO_FIDELITY_MIB_S:-16}
mkdir -p "$data"
device=${DLIO_BENCH_DEVICE:-}
if [ -z "$device" ]; then
    # The whole disk under the bench dir's file system (the throttle takes whole devices).
    dev=$(printf '%d:%d' "0x$(stat -c %t "$(df --output=source "$bench" | tail -1)")" \
        "0x$(stat -c %T "$(df --output=source "$bench" | tail -1)")")
    device=${dev%:*}:0
fi
group=/sys/fs/cgroup/blkio/dlio-rs-native-dali
mkdir -p $group
echo "$device $((mib_s * 1024 * 1024))" > $group/blkio.throttle.read_bps_device
trap 'echo "$device 0" > $group/blkio.throttle.read_bps_device' EXIT

common=(
    workload=resnet50_a100 ++workload.framework=pytorch ++workload.reader.data_loader=native_dali
    ++workload.dataset.format=jpeg "++workload.dataset.data_folder=$data"
    ++workload.dataset.num_files_train=200 ++workload.dataset.num_samples_per_file=1
    ++workload.dataset.record_length_bytes=1048576 ++workload.dataset.record_length_bytes_stdev=0
    ++workload.train.epochs=1 ++workload.reader.batch_size=4 ++workload.reader.read_threads=2
    ++workload.reader.sample_shuffle=off ++workload.workflow.checkpoint=False
    ++workload.workflow.evaluation=False
)
if [ ! -d "$data/train" ]; then
    "$rs" "${common[@]}" ++workload.workflow.generate_data=True ++workload.workflow.train=False \
        "++workload.output.folder=$bench/native-dali/gen" > /dev/null
fi

evict() {
    "$venv/bin/python" - "$data" <<'PY'
import os, sys
for root, _, files in os.walk(sys.argv[1]):
    for name in files:
        fd = os.open(os.path.join(root, name), os.O_RDONLY)
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
PY
}
device_reads() { awk -v d="$device" '$1 == d && $2 == "Read" { print $3 }' $group/blkio.throttle.io_service_bytes; }
au_of() {
    python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['metric']['train_au_percentage']; print(m[0] if isinstance(m, list) else m)" "$1"
}

results=$bench/native-dali/results.txt
: > "$results"
for round in $(seq 1 "$rounds"); do
    for no_mmap in True False; do
        for compute in 0.06 0.13 0.3; do
            words=("${common[@]}" ++workload.workflow.generate_data=False ++workload.workflow.train=True
                "++workload.reader.dont_use_mmap=$no_mmap" "++workload.train.computation_time=$compute")
            # Who goes first alternates round by round.
            tools=(dlio-rs dlio)
            [ $((round % 2)) -eq 0 ] && tools=(dlio dlio-rs)
            for tool in "${tools[@]}"; do
                out=$bench/native-dali/run-$tool-$no_mmap-$compute-$round
                rm -rf "$out"
                mkdir -p "$out"
                evict
                before=$(device_reads)
                if [ "$tool" = dlio-rs ]; then
                    sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' $group \
                        "$rs" "${words[@]}" "++workload.output.folder=$out" > "$out/stdout" 2>&1
                    summary=$out/summary.json
                else
                    (cd "$out" && sh -c 'echo $$ > "$0/cgroup.procs"; exec "$@"' $group \
                        "$venv/bin/dlio_benchmark" "${words[@]}" "++hydra.run.dir=$out/h" \
                        > "$out/stdout" 2>&1)
                    summary=$out/h/summary.json
                fi
                read_mib=$(( ($(device_reads) - before) / 1048576 ))
                line="dont_use_mmap=$no_mmap compute=$compute $tool AU $(au_of "$summary") device_read_mib $read_mib"
                echo "round $round $line"
                echo "$line" >> "$results"
            done
        done
    done
done
echo "medians over $rounds round(s):"
for no_mmap in True False; do
    for compute in 0.06 0.13 0.3; do
        for tool in dlio-rs dlio; do
            grep -F "dont_use_mmap=$no_mmap compute=$compute $tool AU" "$results" |
                awk '{ print $5 }' | sort -g |
                awk -v t="$tool" -v m="$no_mmap" -v c="$compute" \
                    '{ v[NR] = $1 } END { printf "dont_use_mmap=%s compute=%s %s AU %.2f\n", m, c, t, (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
        done
    done
done
