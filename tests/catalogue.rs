//! A catalogue of bad input, as a hostile but fair user gives it: words, YAML, values, damaged data
//! files of every format, output folders, pipes and signals. Each case runs the real binaries in
//! a shell, bounded in time, and must end with its exit code (2 for usage and configuration, 1 for
//! a run that failed, 128 + a signal) and say what its message must say; none may panic or hang.
//! The cases grew out of a survey of about 450 attempts (see docs/running.md, "Exit codes").

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::common::*;

struct Case {
    id: &'static str,
    /// A shell script; `$BIN` is dlio-rs, `$BENCH` dlio_benchmark, `$WORK` a scratch folder with
    /// `ds/FORMAT/` (a small dataset of each format), `$SYN` the words of a quick run that needs
    /// no data, `$T` the words of a quick training run (add its format and data folder).
    run: &'static str,
    code: i32,
    /// What standard error (or standard output) must say.
    says: &'static [&'static str],
}

const SYN: &str = "workload=default ++workload.dataset.format=synthetic ++workload.train.epochs=1 \
                   ++workload.train.computation_time=0 ++workload.dataset.num_files_train=4 \
                   ++workload.reader.batch_size=1 ++workload.workflow.evaluation=False";

const T: &str = "workload=default ++workload.dataset.num_files_train=3 \
                 ++workload.dataset.num_files_eval=0 ++workload.dataset.num_samples_per_file=2 \
                 ++workload.dataset.num_subfolders_train=0 ++workload.dataset.num_subfolders_eval=0 \
                 ++workload.dataset.record_length_bytes=4096 \
                 ++workload.dataset.record_length_bytes_stdev=0 ++workload.reader.batch_size=1 \
                 ++workload.train.epochs=1 ++workload.train.computation_time=0 \
                 ++workload.workflow.evaluation=False";

const CASES: &[Case] = &[
    // --- Words ----------------------------------------------------------------------------------
    Case { id: "word-plusplus", run: "$BIN config ++", code: 2, says: &["malformed override '++'"] },
    Case { id: "word-empty-key", run: "$BIN config ++workload.=5", code: 2, says: &["is empty"] },
    Case { id: "word-missing-key", run: "$BIN config workload=default workload.x=1", code: 2, says: &["workload.x"] },
    Case { id: "word-bad-group", run: "$BIN config dataset.format=npz", code: 2, says: &["'dataset' is not a configuration group"] },
    Case { id: "word-unicode-key", run: "$BIN config workload=default '++workload.dätaset=1'", code: 2, says: &["dätaset", "not allowed"] },
    Case { id: "word-unknown-workload", run: "$BIN config workload=nonexistent", code: 2, says: &["nonexistent"] },
    Case { id: "word-workload-path", run: "$BIN config workload=../../etc/passwd", code: 2, says: &["../../etc/passwd"] },
    Case { id: "word-strict-unknown", run: "$BIN config --strict workload=default ++workload.dataset.colour=red", code: 2, says: &["colour"] },
    Case { id: "word-strict-misspelt", run: "$BIN config --strict workload=default ++workload.reader.odirct=True", code: 2, says: &["workload.reader.odirct; did you mean workload.reader.odirect?"] },
    Case { id: "word-odirect-and-its-key", run: "$BIN run -q --odirect $SYN ++workload.reader.odirect=False", code: 2, says: &["--odirect and the word '++workload.reader.odirect=False' both name workload.reader.odirect"] },
    Case { id: "word-page-cache-mode", run: "$BIN run -q --page-cache evict $SYN", code: 2, says: &["'evict'", "keep, drop_before_epoch, evict_after_read"] },
    Case { id: "word-misspelt-key-warns", run: "$BIN config workload=default ++workload.reader.page_cahce=keep >/dev/null", code: 0, says: &["workload.reader.page_cahce; did you mean workload.reader.page_cache?"] },
    Case { id: "word-unknown-subcommand", run: "$BIN frobnicate", code: 2, says: &["frobnicate"] },
    Case { id: "word-accelerators-zero", run: "$BIN run -q -n 0 $SYN", code: 2, says: &["at least 1"] },
    Case { id: "word-accelerators-text", run: "$BIN run -q -n abc $SYN", code: 2, says: &["abc"] },
    Case { id: "word-threads-beyond-the-system", run: "$BIN run -q $SYN ++workload.reader.read_threads=100000", code: 2, says: &["100001 threads", "read_threads"] },
    Case { id: "word-tilde-value-mismatch", run: "$BIN config workload=default ~workload.reader.batch_size=5", code: 2, says: &["its value is", "not 5"] },
    Case { id: "word-sweep", run: "$BIN config workload=default ++workload.reader.batch_size=1,2", code: 2, says: &["sweep"] },
    Case { id: "word-function", run: "$BIN config workload=default '++workload.reader.batch_size=int(3)'", code: 2, says: &["function int"] },
    Case { id: "word-tilde-unquoted", run: "$BIN config workload=default ++workload.model.name=~", code: 2, says: &["'~' cannot be written unquoted"] },
    Case { id: "word-big-integer", run: "$BIN config workload=default ++workload.dataset.num_files_train=99999999999999999999", code: 2, says: &["99999999999999999999 is too large an integer"] },
    Case { id: "word-nested-deep", run: "$BIN config workload=default \"++workload.x=$(printf '%*s' 50000 '' | tr ' ' '[')$(printf '%*s' 50000 '' | tr ' ' ']')\"", code: 2, says: &["nested deeper than 64"] },
    Case { id: "word-no-is-a-string", run: "$BIN config workload=default ++workload.workflow.evaluation=no", code: 2, says: &["workflow.evaluation", "True or False"] },
    Case { id: "word-octal-is-a-string", run: "$BIN config workload=default ++workload.reader.batch_size=017", code: 2, says: &["batch_size", "017"] },
    Case { id: "word-hydra-subdir-escapes", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/subdir ++hydra.output_subdir=../x", code: 2, says: &["inside the run folder"] },
    Case { id: "word-config-name", run: "$BENCH --config-name=foo $SYN", code: 2, says: &["--config-name=foo", "'config'"] },
    Case { id: "word-bench-unknown-option", run: "$BENCH --frob $SYN", code: 2, says: &["unknown option --frob"] },
    Case { id: "word-bench-accelerators-env", run: "DLIO_RS_ACCELERATORS=0 $BENCH $SYN", code: 2, says: &["DLIO_RS_ACCELERATORS"] },
    // --- YAML -----------------------------------------------------------------------------------
    Case { id: "yaml-alias-bomb", run: "printf 'a: &a [x,x,x,x,x,x,x,x,x,x]\\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\\nf: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]\\ng: [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]\\n' > $WORK/cd/workload/bomb.yaml; $BIN config --config-dir $WORK/cd workload=bomb", code: 2, says: &["alias bomb"] },
    Case { id: "yaml-two-documents", run: "printf 'model: {name: a}\\n---\\ntrain: {epochs: 2}\\n' > $WORK/cd/workload/docs.yaml; $BIN config --config-dir $WORK/cd workload=docs", code: 2, says: &["second YAML document"] },
    Case { id: "yaml-duplicate-key", run: "printf 'reader:\\n  batch_size: 1\\n  batch_size: 2\\n' > $WORK/cd/workload/dup.yaml; $BIN config --config-dir $WORK/cd workload=dup", code: 2, says: &["duplicate key batch_size"] },
    Case { id: "yaml-tab", run: "printf 'reader:\\n\\tbatch_size: 1\\n' > $WORK/cd/workload/tab.yaml; $BIN config --config-dir $WORK/cd workload=tab", code: 2, says: &["line 2", "a tab"] },
    Case { id: "yaml-python-tag", run: "printf 'model: !!python/object:os.system x\\n' > $WORK/cd/workload/tag.yaml; $BIN config --config-dir $WORK/cd workload=tag", code: 2, says: &["!!python/object:os.system", "not supported"] },
    Case { id: "yaml-empty-file", run: ": > $WORK/cd/workload/empty.yaml; $BIN config --config-dir $WORK/cd workload=empty", code: 2, says: &["is empty"] },
    Case { id: "yaml-fifo", run: "mkfifo $WORK/cd/workload/fifo.yaml; $BIN config --config-dir $WORK/cd workload=fifo", code: 2, says: &["fifo.yaml is not a file"] },
    Case { id: "yaml-dev-zero", run: "ln -s /dev/zero $WORK/cd/workload/zero.yaml; $BIN config --config-dir $WORK/cd workload=zero", code: 2, says: &["zero.yaml is not a file"] },
    Case { id: "yaml-bom-and-octal-and-merge", run: "printf '\\357\\273\\277reader: &b {batch_size: 017, read_threads: 2}\\ndata_reader:\\n  <<: *b\\n  read_threads: 3\\n' > $WORK/cd/workload/yaml11.yaml; $BIN config --config-dir $WORK/cd workload=yaml11 | grep -A2 '^  data_reader:'", code: 0, says: &["batch_size: 15", "read_threads: 3"] },
    Case { id: "yaml-not-utf8", run: "printf 'model: \\377\\n' > $WORK/cd/workload/latin.yaml; $BIN config --config-dir $WORK/cd workload=latin", code: 2, says: &["latin.yaml", "UTF-8"] },
    Case { id: "yaml-workload-root", run: "$BIN config workload=default > $WORK/cd/workload/printed.yaml; $BIN run -q --config-dir $WORK/cd workload=printed", code: 2, says: &["printed.yaml has its sections under a top-level 'workload:' key", "dlio-rs config --workload-file", "valid top-level sections: checkpoint, data_reader"] },
    Case { id: "yaml-unknown-section", run: "printf 'dataset: {num_files_train: 4}\\nfoo: {x: 1}\\n' > $WORK/cd/workload/foo.yaml; $BIN config --config-dir $WORK/cd workload=foo", code: 2, says: &["foo.yaml has an unknown top-level section 'foo'; valid top-level sections are checkpoint"] },
    Case { id: "yaml-list-root", run: "printf -- '- a\\n- b\\n' > $WORK/cd/workload/list.yaml; $BIN config --config-dir $WORK/cd workload=list", code: 2, says: &["must be a mapping of sections"] },
    // --- Values ---------------------------------------------------------------------------------
    Case { id: "value-negative-files", run: "$BIN config workload=default ++workload.dataset.num_files_train=-1", code: 2, says: &["num_files_train", "at least 0"] },
    Case { id: "value-fraction-files", run: "$BIN config workload=default ++workload.dataset.num_files_train=4.5", code: 2, says: &["num_files_train", "integer"] },
    Case { id: "value-text-batch", run: "$BIN config workload=default ++workload.reader.batch_size=abc", code: 2, says: &["batch_size", "abc"] },
    Case { id: "value-epochs-absurd", run: "$BIN config workload=default ++workload.train.epochs=1000000000", code: 2, says: &["train.epochs", "at most 1000000"] },
    Case { id: "value-subfolders-absurd", run: "$BIN config workload=default ++workload.dataset.num_subfolders_train=1000000000", code: 2, says: &["num_subfolders_train", "at most 65536"] },
    Case { id: "value-stdev-absurd", run: "$BIN config workload=default ++workload.dataset.record_length_bytes_stdev=1e30", code: 2, says: &["record_length_bytes_stdev"] },
    Case { id: "value-compute-absurd", run: "$BIN config workload=default ++workload.train.computation_time=1e30", code: 2, says: &["computation_time", "1e6"] },
    Case { id: "value-poisson-absurd", run: "$BIN config workload=default '++workload.train.computation_time={type: poisson, lam: 1e300}'", code: 2, says: &["computation_time"] },
    Case { id: "value-uniform-overflow", run: "$BIN config workload=default '++workload.reader.preprocess_time={type: uniform, min: -1e308, max: 1e308}'", code: 2, says: &["preprocess_time"] },
    Case { id: "value-handoff-negative", run: "$BIN config workload=default ++workload.reader.batch_handoff_time=-0.001", code: 2, says: &["batch_handoff_time", "≥ 0"] },
    Case { id: "value-handoff-absurd", run: "$BIN config workload=default ++workload.reader.batch_handoff_time=1e30", code: 2, says: &["batch_handoff_time", "1e6"] },
    Case { id: "value-gamma-negative", run: "$BIN config workload=default '++workload.train.computation_time={type: gamma, shape: -1, scale: 1}'", code: 2, says: &["computation_time", "shape"] },
    Case { id: "value-checkpoint-pause-absurd", run: "$BIN config workload=default ++workload.checkpoint.time_between_checkpoints=1e300", code: 2, says: &["time_between_checkpoints", "1e6"] },
    Case { id: "value-prefix-escapes", run: "$BIN config workload=default ++workload.dataset.file_prefix=../x", code: 2, says: &["file_prefix", "file name"] },
    Case { id: "value-log-file-empty", run: "$BIN config workload=default ++workload.output.log_file=", code: 2, says: &["output.log_file", "file name"] },
    Case { id: "value-log-file-escapes", run: "$BIN config workload=default ++workload.output.log_file=/tmp/x.log", code: 2, says: &["output.log_file", "file name"] },
    Case { id: "value-output-folder-empty", run: "$BIN config workload=default ++workload.output.folder=", code: 2, says: &["output.folder"] },
    Case { id: "value-parquet-column-size", run: "$BIN config workload=default ++workload.dataset.format=parquet '++workload.dataset.parquet.columns=[{name: a, dtype: float64, size: 9223372036854775807}]'", code: 2, says: &["bad size", "2^32"] },
    Case { id: "value-metric-window-empty", run: "$BIN run $SYN ++workload.output.metric.exclude_start_steps=3 ++workload.output.metric.exclude_end_steps=1 ++hydra.run.dir=$WORK/out/window", code: 0, says: &["exclude_start_steps 3", "keeps as few as 0 step(s)", "Verdict: no AU verdict · NOT VALID (", "metric_window"] },
    Case { id: "value-checkpoint-beyond-the-disk", run: "$BIN run -q workload=default ++workload.workflow.train=False ++workload.workflow.checkpoint=True ++workload.model.model_size_bytes=1000000000000000000 ++workload.checkpoint.num_checkpoints_write=1 ++workload.checkpoint.num_checkpoints_read=0 ++workload.checkpoint.checkpoint_folder=$WORK/nothing-yet/ckpt ++hydra.run.dir=$WORK/out/ck", code: 2, says: &["one checkpoint of this process's 1 rank(s)", "free in"] },
    Case { id: "value-parquet-nothing-read", run: "$BIN config workload=default ++workload.dataset.format=parquet '++workload.dataset.parquet.columns=[{name: a, dtype: float32, read: false}]'", code: 2, says: &["at least one must be read"] },
    Case { id: "value-drop-timeout", run: "DLIO_DROP_CACHES_TIMEOUT=1e300 $BIN run -q $SYN ++workload.reader.page_cache=drop_before_epoch ++hydra.run.dir=$WORK/out/dct", code: 2, says: &["DLIO_DROP_CACHES_TIMEOUT"] },
    // --- Paths the run does not own ---------------------------------------------------------------
    Case { id: "owned-checkpoint-link-to-dev-null", run: "mkdir -p $WORK/ckl/global_epoch1_step1; ln -s /dev/null $WORK/ckl/global_epoch1_step1/model_states-0.pt; $BIN run -q workload=default ++workload.workflow.train=False ++workload.workflow.checkpoint=True ++workload.checkpoint.num_checkpoints_write=1 ++workload.checkpoint.num_checkpoints_read=0 ++workload.checkpoint.checkpoint_folder=$WORK/ckl ++hydra.run.dir=$WORK/out/ckl; c=$?; test -L $WORK/ckl/global_epoch1_step1/model_states-0.pt || c=99; exit $c", code: 1, says: &["cannot save checkpoint file", "model_states-0.pt", "a symbolic link is there"] },
    Case { id: "owned-checkpoint-fifo", run: "mkdir -p $WORK/ckf/global_epoch1_step1; mkfifo $WORK/ckf/global_epoch1_step1/model_states-0.pt; $BIN run -q workload=default ++workload.workflow.train=False ++workload.workflow.checkpoint=True ++workload.checkpoint.num_checkpoints_write=1 ++workload.checkpoint.num_checkpoints_read=0 ++workload.checkpoint.checkpoint_folder=$WORK/ckf ++hydra.run.dir=$WORK/out/ckf; c=$?; test -p $WORK/ckf/global_epoch1_step1/model_states-0.pt || c=99; exit $c", code: 1, says: &["model_states-0.pt", "not a regular file"] },
    Case { id: "owned-log-link-is-replaced-not-followed", run: "echo keep > $WORK/victim.log; mkdir -p $WORK/out/lnk; ln -s $WORK/victim.log $WORK/out/lnk/dlio.log; $BIN run -q $SYN ++hydra.run.dir=$WORK/out/lnk; c=$?; grep -qx keep $WORK/victim.log || c=99; test -L $WORK/out/lnk/dlio.log && c=98; exit $c", code: 0, says: &["Verdict:"] },
    Case { id: "owned-trace-folder-link-is-removed-not-followed", run: "mkdir -p $WORK/vt $WORK/out/tfl; echo keep > $WORK/vt/0.csv; ln -s $WORK/vt $WORK/out/tfl/trace; $BIN run -q $SYN --trace ++hydra.run.dir=$WORK/out/tfl >/dev/null; c=$?; grep -qx keep $WORK/vt/0.csv || c=99; test -L $WORK/out/tfl/trace && c=98; head -1 $WORK/out/tfl/trace/0.csv; exit $c", code: 0, says: &["epoch,phase,step,rank"] },
    Case { id: "owned-hydra-folder-link", run: "mkdir -p $WORK/vh $WORK/out/hfl; ln -s $WORK/vh $WORK/out/hfl/.hydra; $BIN run -q $SYN ++hydra.run.dir=$WORK/out/hfl; c=$?; test -z \"$(ls $WORK/vh)\" || c=99; exit $c", code: 1, says: &[".hydra/config.yaml", "a symbolic link is there"] },
    Case { id: "owned-checkpoint-subfolder-link", run: "mkdir -p $WORK/cks $WORK/vc; ln -s $WORK/vc $WORK/cks/global_epoch1_step1; $BIN run -q workload=default ++workload.workflow.train=False ++workload.workflow.checkpoint=True ++workload.checkpoint.num_checkpoints_write=1 ++workload.checkpoint.num_checkpoints_read=0 ++workload.checkpoint.checkpoint_folder=$WORK/cks ++hydra.run.dir=$WORK/out/cks; c=$?; test -z \"$(ls $WORK/vc)\" || c=99; exit $c", code: 1, says: &["global_epoch1_step1/model_states-0.pt", "a symbolic link is there"] },
    Case { id: "owned-data-subfolder-link", run: "mkdir -p $WORK/dsl $WORK/vd; ln -s $WORK/vd $WORK/dsl/train; $BIN run -q $T ++workload.dataset.format=npz ++workload.workflow.generate_data=True ++workload.workflow.train=False ++workload.dataset.data_folder=$WORK/dsl ++hydra.run.dir=$WORK/out/dsl; c=$?; test -z \"$(ls $WORK/vd)\" || c=99; exit $c", code: 1, says: &["train", "a symbolic link is there"] },
    Case { id: "owned-charts-folder-link-is-removed-not-followed", run: "mkdir -p $WORK/vch; echo keep > $WORK/vch/01-au.png; $BIN run -q $SYN ++hydra.run.dir=$WORK/out/chl >/dev/null; ln -s $WORK/vch $WORK/out/chl/charts; DLIO_RS_BROWSER=/bin/true $BIN report $WORK/out/chl --png; c=$?; grep -qx keep $WORK/vch/01-au.png || c=99; test -L $WORK/out/chl/charts && c=98; exit $c", code: 1, says: &["did not draw the charts 01-au", "/chl/charts: no PNG image was written"] },
    Case { id: "owned-lock-file-link", run: "echo keep > $WORK/victim.lock; mkdir -p $WORK/out/lck; ln -s $WORK/victim.lock $WORK/out/lck/.dlio-rs.lock; $BIN run -q $SYN ++hydra.run.dir=$WORK/out/lck; c=$?; grep -qx keep $WORK/victim.lock || c=99; exit $c", code: 1, says: &["cannot create the lock file", "a symbolic link is there"] },
    Case { id: "words-sweep-folder-with-hydra-characters", run: "$BIN sweep --max-accelerators 1 -o \"$WORK/sw,=é'[#~\" $SYN; c=$?; test -f \"$WORK/sw,=é'[#~/trial-1/summary.json\" || c=99; exit $c", code: 0, says: &["trial 1: 1 accelerator(s)", "No valid answer"] },
    Case { id: "value-load-only-checkpoint-needs-no-room", run: "mkdir -p $WORK/lo; $BIN run -q -n 8 workload=llama3_8b ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.num_checkpoints_read=1 ++workload.checkpoint.checkpoint_folder=$WORK/lo ++hydra.run.dir=$WORK/out/lo 2>&1 | grep -v 'free in'; exit ${PIPESTATUS[0]}", code: 1, says: &["_model_states.pt is missing", "not saved whole"] },
    Case { id: "value-plan-world-beyond-any-run", run: "$BIN plan -n 1000000000000 workload=llama3_8b", code: 2, says: &["1000000000000 accelerators", "at most 1048576 ranks"] },
    Case { id: "value-plan-world-run-refuses", run: "$BIN plan -n 100000 workload=default", code: 2, says: &["fewer than one batch for every accelerator"] },
    Case { id: "value-datasize-saturated", run: "$BIN datasize workload=unet3d_h100 --max-accelerators 18446744073709551615 --client-host-memory-in-gb 18446744073709551615", code: 2, says: &["the rule asks for more than a dataset can hold", "--client-host-memory-in-gb"] },
    Case { id: "value-datasize-checkpoint-workload", run: "$BIN datasize workload=llama3_8b --max-accelerators 8 --client-host-memory-in-gb 64", code: 2, says: &["llama3_8b does not train", "nothing to size"] },
    // --- Our own files, read back -----------------------------------------------------------------
    Case { id: "read-report-json-fifo", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/rf >/dev/null && rm $WORK/out/rf/report.json && mkfifo $WORK/out/rf/report.json && $BIN report $WORK/out/rf", code: 2, says: &["report.json", "not a regular file"] },
    Case { id: "read-summary-dev-zero", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/rz >/dev/null && rm $WORK/out/rz/summary.json && ln -s /dev/zero $WORK/out/rz/summary.json && $BIN compare $WORK/out/rz $WORK/out/rz --html $WORK/rz.html", code: 2, says: &["summary.json", "not a regular file"] },
    Case { id: "read-report-json-huge", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/rh >/dev/null && truncate -s 2G $WORK/out/rh/report.json && $BIN report $WORK/out/rh", code: 2, says: &["report.json", "larger than the 134217728 bytes"] },
    Case { id: "read-sweep-json-fifo", run: "mkdir -p $WORK/swf && mkfifo $WORK/swf/sweep.json && $BIN sweep --max-accelerators 2 -o $WORK/swf $SYN", code: 2, says: &["sweep.json", "not a regular file"] },
    Case { id: "read-audit-forged-ranks", run: "$BIN run -q $SYN --trace ++hydra.run.dir=$WORK/out/ra >/dev/null && sed -i 's/\"num_accelerators\": 1,/\"num_accelerators\": 1000000000000,/' $WORK/out/ra/report.json && $BIN audit $WORK/out/ra", code: 2, says: &["num_accelerators", "from 1 to 1048576"] },
    Case { id: "read-trace-fifo", run: "$BIN run -q $SYN --trace ++hydra.run.dir=$WORK/out/tf >/dev/null && rm $WORK/out/tf/trace/0.csv && mkfifo $WORK/out/tf/trace/0.csv && $BIN audit $WORK/out/tf", code: 2, says: &["trace/0.csv", "not a regular file"] },
    Case { id: "read-trace-endless-line", run: "$BIN run -q $SYN --trace ++hydra.run.dir=$WORK/out/tl >/dev/null && head -c 200000 /dev/zero | tr '\\0' 7 >> $WORK/out/tl/trace/0.csv && $BIN audit $WORK/out/tl", code: 2, says: &["trace/0.csv", "longer than 65536 bytes"] },
    Case { id: "read-trace-not-utf8", run: "$BIN run -q $SYN --trace ++hydra.run.dir=$WORK/out/tu >/dev/null && printf '\\377\\376\\n' >> $WORK/out/tu/trace/0.csv && $BIN audit $WORK/out/tu", code: 2, says: &["trace/0.csv", "cannot read"] },
    Case { id: "read-report-json-wrong-type", run: "$BIN run -q $SYN --trace ++hydra.run.dir=$WORK/out/rw >/dev/null && sed -i 's/\"run_entropy\": [0-9]*/\"run_entropy\": \"x\"/' $WORK/out/rw/report.json && $BIN audit $WORK/out/rw", code: 2, says: &["report.json", "'run_entropy' must be a whole number", "not the file a dlio-rs run writes"] },
    Case { id: "read-report-json-not-json", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/rj >/dev/null && echo '{\"a\":' > $WORK/out/rj/summary.json && $BIN report $WORK/out/rj", code: 2, says: &["summary.json", "not valid JSON"] },
    Case { id: "read-sweep-forged-trial", run: "$BIN sweep --max-accelerators 2 -o $WORK/swg $SYN >/dev/null 2>&1; sed -i 's/\"au_percent\": [0-9.e+-]*/\"au_percent\": 1e300/' $WORK/swg/sweep.json && $BIN sweep --max-accelerators 2 -o $WORK/swg $SYN", code: 2, says: &["sweep.json", "trial 0", "au_percent"] },
    Case { id: "read-sweep-forged-count", run: "$BIN sweep --max-accelerators 2 -o $WORK/swc $SYN >/dev/null 2>&1; sed -i 's/\"accelerators\": 1,/\"accelerators\": 1000000,/' $WORK/swc/sweep.json && $BIN sweep --max-accelerators 2 -o $WORK/swc $SYN", code: 2, says: &["sweep.json", "trial 0 has 1000000 accelerators"] },
    Case { id: "read-summary-list-of-millions", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/rl >/dev/null && python3 -c \"import json; p='$WORK/out/rl/summary.json'; d=json.load(open(p)); d['metric']['train_au_percentage']=[50.0]*3000000; json.dump(d, open(p, 'w'))\" && prlimit --as=4000000000 $BIN report $WORK/out/rl", code: 2, says: &["summary.json", "'metric.train_au_percentage' has more than 1000000 entries"] },
    Case { id: "read-report-huge-histogram-audited-in-little-memory", run: "$BIN run -q $SYN --trace ++hydra.run.dir=$WORK/out/rhh >/dev/null && python3 -c \"import json; p='$WORK/out/rhh/report.json'; d=json.load(open(p)); d['read_latency_histogram_us']=[[1.0, 1]]*10000000; json.dump(d, open(p, 'w'))\" && prlimit --as=1500000000 $BIN audit $WORK/out/rhh", code: 0, says: &["access pattern: audit passed"] },
    Case { id: "read-summary-null", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/sn >/dev/null && echo null > $WORK/out/sn/summary.json && $BIN report $WORK/out/sn", code: 2, says: &["summary.json", "the file must be a JSON object"] },
    Case { id: "read-summary-wrong-list", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/sw >/dev/null && sed -i 's/\"train_au_percentage\": \\[/\"train_au_percentage\": [\"abc\", /' $WORK/out/sw/summary.json && $BIN compare $WORK/out/sw $WORK/out/sw --html $WORK/sw.html", code: 2, says: &["summary.json", "'metric.train_au_percentage' must be a list of numbers"] },
    Case { id: "read-rank-output-list", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/ro >/dev/null && echo '[]' > $WORK/out/ro/0_output.json && $BIN report $WORK/out/ro", code: 2, says: &["0_output.json", "must be a JSON object of epochs"] },
    Case { id: "read-audit-configuration-string", run: "$BIN run -q $SYN --trace ++hydra.run.dir=$WORK/out/ac >/dev/null && python3 -c \"import json; p='$WORK/out/ac/report.json'; d=json.load(open(p)); d['configuration']='x'; json.dump(d, open(p, 'w'))\" && $BIN audit $WORK/out/ac", code: 2, says: &["report.json", "'configuration' must be an object"] },
    Case { id: "read-sweep-forged-processes", run: "$BIN sweep --max-accelerators 2 -o $WORK/swp $SYN >/dev/null 2>&1; sed -i 's/\"processes\": 1,/\"processes\": 0,/' $WORK/swp/sweep.json && $BIN report $WORK/swp", code: 2, says: &["sweep.json", "'processes'"] },
    Case { id: "word-key-too-deep", run: "$BIN run -q $SYN ++workload.$(printf 'a.%.0s' $(seq 40))b=1 ++hydra.run.dir=$WORK/out/kd", code: 2, says: &["the key has 42 segments", "at most 32"] },
    Case { id: "word-model-name-escapes", run: "cd $WORK && $BIN run -q $SYN '++workload.model.name=\"../../escaped\"'; c=$?; test -e $WORK/../escaped && c=99; exit $c", code: 2, says: &["workload.model.name '../../escaped'", "a plain name"] },
    Case { id: "out-earlier-dlio-log-cleared", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/dl >/dev/null && $BIN run -q $SYN ++workload.output.log_file=other.log ++hydra.run.dir=$WORK/out/dl >/dev/null; test -e $WORK/out/dl/dlio.log && exit 99; ls $WORK/out/dl", code: 0, says: &["other.log"] },
    Case { id: "owned-checkpoint-load-link", run: "mkdir -p $WORK/ckr/global_epoch1_step1; head -c 65536 /dev/zero > $WORK/ckr.bin; ln -s $WORK/ckr.bin $WORK/ckr/global_epoch1_step1/model_states-0.pt; $BIN run -q workload=default ++workload.workflow.train=False ++workload.workflow.checkpoint=True ++workload.checkpoint.num_checkpoints_write=0 ++workload.checkpoint.num_checkpoints_read=1 ++workload.model.model_size_bytes=65536 ++workload.checkpoint.checkpoint_folder=$WORK/ckr ++hydra.run.dir=$WORK/out/ckr", code: 1, says: &["model_states-0.pt", "a symbolic link is there"] },
    Case { id: "owned-sweep-trial-link", run: "mkdir -p $WORK/swl $WORK/vsw; ln -s $WORK/vsw $WORK/swl/trial-1; $BIN sweep --max-accelerators 2 -o $WORK/swl $SYN; c=$?; test -z \"$(ls $WORK/vsw)\" || c=99; exit $c", code: 1, says: &["trial-1", "a symbolic link is there"] },
    Case { id: "out-browser-empty", run: "$BIN run -q $SYN ++hydra.run.dir=$WORK/out/be >/dev/null && DLIO_RS_BROWSER= $BIN report $WORK/out/be --png", code: 2, says: &["DLIO_RS_BROWSER is set but empty"] },
    Case { id: "out-browser-child-holds-its-pipe", run: "printf '#!/bin/sh\\nsleep 30 &\\nsleep 30\\n' > $WORK/slow.sh; chmod +x $WORK/slow.sh; $BIN run -q $SYN ++hydra.run.dir=$WORK/out/bs >/dev/null && start=$(date +%s) && DLIO_RS_BROWSER=$WORK/slow.sh DLIO_RS_BROWSER_TIMEOUT=1 $BIN report $WORK/out/bs --png; c=$?; test $(( $(date +%s) - start )) -lt 10 || c=99; exit $c", code: 1, says: &["slow.sh did not draw", "within 1.0 s"] },
    // --- Data -----------------------------------------------------------------------------------
    Case { id: "data-folder-missing", run: "$BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$WORK/nothing ++hydra.run.dir=$WORK/out/dm", code: 2, says: &["does not exist", "generate the dataset with"] },
    Case { id: "data-folder-is-a-file", run: "touch $WORK/afile; $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$WORK/afile ++hydra.run.dir=$WORK/out/df", code: 2, says: &["is not a folder", "generate the dataset with"] },
    Case { id: "data-folder-is-a-file-for-generation", run: "touch $WORK/afile2; $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$WORK/afile2 ++workload.workflow.generate_data=True ++workload.workflow.train=False", code: 2, says: &["data folder", "is not a folder"] },
    Case { id: "data-no-train-folder", run: "mkdir -p $WORK/notrain; $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$WORK/notrain ++hydra.run.dir=$WORK/out/nt", code: 2, says: &["no train/ folder", "generate the dataset with"] },
    Case { id: "data-generation-killed", run: "cp -a $WORK/ds/npy $WORK/killed; touch $WORK/killed/.dlio-rs-generating; $BIN run -q $T ++workload.dataset.format=npy ++workload.dataset.data_folder=$WORK/killed ++hydra.run.dir=$WORK/out/k", code: 2, says: &["incomplete"] },
    Case { id: "data-index-missing", run: "cp -a $WORK/ds/indexed_binary $WORK/noidx; rm $WORK/noidx/train/img_1_of_3.indexed_binary.off.idx; $BIN run -q $T ++workload.dataset.format=indexed_binary ++workload.dataset.data_folder=$WORK/noidx ++hydra.run.dir=$WORK/out/ni", code: 1, says: &["cannot read index file", "img_1_of_3.indexed_binary.off.idx"] },
    Case { id: "data-index-missing-found-before-training", run: "cp -a $WORK/ds/mmap_indexed_binary $WORK/noidx0; rm $WORK/noidx0/train/img_0_of_3.mmap_indexed_binary.sz.idx; $BIN run -q $T ++workload.dataset.format=mmap_indexed_binary ++workload.dataset.data_folder=$WORK/noidx0 ++hydra.run.dir=$WORK/out/ni0", code: 2, says: &["img_0_of_3.mmap_indexed_binary.sz.idx is missing", "generate the dataset with"] },
    Case { id: "data-index-wrong", run: "cp -a $WORK/ds/indexed_binary $WORK/badidx; printf '\\377\\377\\377\\377\\377\\377\\377\\000' | dd of=$WORK/badidx/train/img_0_of_3.indexed_binary.off.idx bs=8 seek=1 conv=notrunc 2>/dev/null; $BIN run -q $T ++workload.dataset.format=indexed_binary ++workload.dataset.data_folder=$WORK/badidx ++hydra.run.dir=$WORK/out/bi", code: 1, says: &["img_0_of_3.indexed_binary", "its index", "past the end"] },
];

/// For each format, a data file cut to nothing, a FIFO, and a folder in its place: exit 1, the
/// file named, and for the cut file the word "corrupt".
fn damaged_data_cases() -> Vec<(String, String, i32, Vec<String>)> {
    let mut cases = Vec::new();
    for format in FORMATS {
        let file = format!("train/img_1_of_3.{format}");
        let run = |damage: &str, id: &str| {
            format!(
                "cp -a $WORK/ds/{format} $WORK/{id}; (cd $WORK/{id} && {damage}); \
                 $BIN run -q $T ++workload.dataset.format={format} \
                 ++workload.dataset.data_folder=$WORK/{id} ++hydra.run.dir=$WORK/out/{id}"
            )
        };
        let id = format!("data-empty-{format}");
        cases.push((
            id.clone(),
            run(&format!(": > {file}"), &id),
            1,
            vec![format!("img_1_of_3.{format}")],
        ));
        let id = format!("data-fifo-{format}");
        cases.push((
            id.clone(),
            run(&format!("rm {file} && mkfifo {file}"), &id),
            1,
            vec![format!("img_1_of_3.{format}"), "not a regular file".into()],
        ));
        let id = format!("data-folder-for-a-file-{format}");
        cases.push((
            id.clone(),
            run(&format!("rm {file} && mkdir {file}"), &id),
            1,
            vec![format!("img_1_of_3.{format}")],
        ));
    }
    cases
}

/// Output folders, pipes and signals: cases whose scripts need the shell's redirections.
const OUTPUT_CASES: &[Case] = &[
    Case { id: "out-run-dir-is-a-file", run: "touch $WORK/file1; $BIN run -q $SYN ++hydra.run.dir=$WORK/file1", code: 2, says: &["is not a folder"] },
    Case { id: "out-folder-is-a-file", run: "touch $WORK/file2; $BIN run -q $SYN ++hydra.run.dir=$WORK/out/of ++workload.output.folder=$WORK/file2", code: 2, says: &["output folder", "is not a folder"] },
    Case { id: "out-stdout-full", run: "$BIN run $SYN ++hydra.run.dir=$WORK/out/full > /dev/full", code: 1, says: &["cannot write to standard output"] },
    Case { id: "out-stdout-full-config", run: "$BIN config workload=default > /dev/full", code: 1, says: &["cannot write to standard output"] },
    Case { id: "out-help-full", run: "$BIN --help > /dev/full", code: 1, says: &["cannot write to standard output"] },
    Case { id: "out-stdout-closed", run: "$BIN workloads | head -c 1 > /dev/null; exit ${PIPESTATUS[0]}", code: 0, says: &[] },
    Case { id: "out-stderr-full", run: "$BIN config workload=default workload.nope=1 2> /dev/full", code: 2, says: &[] },
    Case { id: "out-stderr-closed", run: "$BIN run $SYN ++hydra.run.dir=$WORK/out/closed 2>&- > /dev/null", code: 0, says: &[] },
    Case { id: "out-sigterm", run: "timeout --preserve-status -s TERM 2 $BIN run -q $SYN ++workload.train.computation_time=5 ++hydra.run.dir=$WORK/out/term", code: 143, says: &["interrupted by SIGTERM"] },
    Case { id: "out-sigint", run: "timeout --preserve-status -s INT 2 $BIN run -q $SYN ++workload.train.computation_time=5 ++hydra.run.dir=$WORK/out/int", code: 130, says: &["interrupted by SIGINT"] },
];

/// Makes `ds/FORMAT` (3 files of 2 samples of 4 KiB, for each format) and `cd/workload/`.
fn fixtures(work: &Path) {
    std::fs::create_dir_all(work.join("cd/workload")).unwrap();
    std::fs::create_dir_all(work.join("out")).unwrap();
    for format in FORMATS {
        let data = work.join("ds").join(format);
        let mut words: Vec<String> = T.split_whitespace().map(str::to_string).collect();
        words.extend([
            format!("++workload.dataset.format={format}"),
            format!("++workload.dataset.data_folder={}", data.display()),
            "++workload.workflow.generate_data=True".into(),
            "++workload.workflow.train=False".into(),
        ]);
        run_quiet(work, 1, &words).ok();
    }
}

fn run_case(work: &Path, id: &str, script: &str, code: i32, says: &[String]) -> Option<String> {
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(script)
        .current_dir(work)
        .env("BIN", DLIO_RS)
        .env("BENCH", DLIO_BENCHMARK)
        .env("WORK", work)
        .env("SYN", SYN)
        .env("T", T);
    for k in ISOLATED_ENV {
        cmd.env_remove(k);
    }
    // `$SYN` and `$T` must split into words: the scripts use them unquoted.
    let (ran, _) = run_bounded(cmd, format!("{id}: {script}"), Duration::from_secs(60));
    let said = format!("{}\n{}", ran.stderr, ran.stdout);
    let mut problems = Vec::new();
    if ran.code != Some(code) {
        problems.push(format!("exit {:?}, expected {code}", ran.code));
    }
    for fragment in says {
        if !said.contains(fragment.as_str()) {
            problems.push(format!("does not say {fragment:?}"));
        }
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{id}: {}\n  script: {script}\n  said: {}",
            problems.join("; "),
            said.trim()
                .lines()
                .take(6)
                .collect::<Vec<_>>()
                .join("\n        ")
        )
    })
}

#[test]
fn every_bad_input_gets_its_exit_code_and_a_message_that_names_it() {
    let tmp = Scratch::new("catalogue");
    fixtures(&tmp.path);
    let mut all: Vec<(String, String, i32, Vec<String>)> = CASES
        .iter()
        .chain(OUTPUT_CASES)
        .map(|c| {
            (
                c.id.to_string(),
                c.run.to_string(),
                c.code,
                c.says.iter().map(|s| s.to_string()).collect(),
            )
        })
        .collect();
    all.extend(damaged_data_cases());
    assert!(all.len() >= 60, "{} cases", all.len());
    let failures: Vec<String> = all
        .iter()
        .filter_map(|(id, script, code, says)| run_case(&tmp.path, id, script, *code, says))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        all.len(),
        failures.join("\n")
    );
}
