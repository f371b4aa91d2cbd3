//! MLPerf Storage's dataset-size rule, as mlpstorage's `training datasize` computes it
//! (`calculate_training_data_size` in mlpstorage/rules.py): the training set must be at least 5
//! times the memory of all client hosts together, and an epoch must give every accelerator at
//! least 500 steps. The larger of the two file counts is the answer; the disk space is that many
//! files of `num_samples_per_file × record_length_bytes`.

use std::fmt::Write as _;

use crate::config::value::Value;
use crate::config::Config;

/// MLPerf Storage: the dataset is at least this many times the client hosts' memory.
pub const MEMORY_MULTIPLE: u64 = 5;
/// MLPerf Storage: an epoch gives every accelerator at least this many steps.
pub const MIN_STEPS: u64 = 500;
/// mlpstorage warns past this many files in one folder, and suggests subfolders.
pub const FILES_PER_FOLDER: u64 = 10_000;

/// What the rule is computed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cluster {
    /// The most accelerators the storage is to be tested with (mlpstorage's
    /// `--max-accelerators`, its MPI processes).
    pub max_accelerators: u64,
    /// Memory of one client host, in GiB (mlpstorage's `--client-host-memory-in-gb`, which it
    /// multiplies by 1024³).
    pub host_memory_gib: u64,
    pub client_hosts: u64,
}

/// The rule's answer for a workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datasize {
    /// Training files to generate: the larger of the two counts below.
    pub files: u64,
    /// Training subfolders (mlpstorage always answers 0, and warns past 10,000 files).
    pub subfolders: u64,
    /// `files × file_bytes`.
    pub disk_bytes: u64,
    /// `num_samples_per_file × record_length_bytes`.
    pub file_bytes: u64,
    /// Files for 5 × the memory: ⌊5 × memory / file_bytes⌋.
    pub files_for_memory: u64,
    /// Files for 500 steps: ⌊500 × accelerators × batch_size / num_samples_per_file⌋.
    pub files_for_steps: u64,
    /// 5 × the client hosts' memory, in bytes.
    pub memory_bytes: u64,
}

impl Datasize {
    /// The rule for `config`'s dataset and reader on `cluster`, in mlpstorage's integer
    /// arithmetic (floor divisions).
    pub fn compute(config: &Config, cluster: &Cluster) -> Datasize {
        let per_file = config.dataset.num_samples_per_file;
        let memory_bytes = MEMORY_MULTIPLE
            .saturating_mul(cluster.host_memory_gib)
            .saturating_mul(1 << 30)
            .saturating_mul(cluster.client_hosts);
        let samples_for_steps = MIN_STEPS
            .saturating_mul(cluster.max_accelerators)
            .saturating_mul(config.reader.batch_size);
        let files_for_steps = samples_for_steps.checked_div(per_file).unwrap_or(0);
        // A record length written with a fraction (resnet50's 114660.07) is a float in
        // mlpstorage's arithmetic, and so are the file size, the file count by memory and the
        // disk space (then truncated); dlio-rs reads whole bytes, which would shift the answer.
        let written = config
            .tree
            .get_path(&["dataset", "record_length_bytes"])
            .and_then(|v| match v {
                Value::Float(f) if f.fract() != 0.0 && f.is_finite() => Some(*f),
                _ => None,
            });
        let (file_bytes, files_for_memory, disk) = match written {
            Some(record) => {
                let file = per_file as f64 * record;
                let by_memory = python_floor_div(memory_bytes as f64, file) as u64;
                let files = by_memory.max(files_for_steps);
                (file as u64, by_memory, (files as f64 * file) as u64)
            }
            None => {
                let file = per_file.saturating_mul(config.dataset.record_length_bytes);
                let by_memory = memory_bytes.checked_div(file).unwrap_or(0);
                let files = by_memory.max(files_for_steps);
                (file, by_memory, files.saturating_mul(file))
            }
        };
        Datasize {
            files: files_for_memory.max(files_for_steps),
            subfolders: 0,
            disk_bytes: disk,
            file_bytes,
            files_for_memory,
            files_for_steps,
            memory_bytes,
        }
    }

    /// Refuses an answer no dataset can have: more files than a split may hold, or sizes past
    /// what a count can say (the arithmetic saturates rather than wraps, and a saturated figure
    /// is no answer).
    pub fn check_within_bounds(&self) -> crate::error::Result<()> {
        let max_files = crate::config::MAX_FILES;
        if self.files <= max_files && self.disk_bytes < u64::MAX && self.memory_bytes < u64::MAX {
            return Ok(());
        }
        Err(crate::error::Error::usage(format!(
            "the rule asks for more than a dataset can hold ({} files for memory, {} for 500 \
             steps per epoch; at most {max_files} files in a split): check \
             --client-host-memory-in-gb, --num-client-hosts and --max-accelerators",
            self.files_for_memory, self.files_for_steps
        )))
    }

    /// Subfolders that keep about [`FILES_PER_FOLDER`] files in each, as mlpstorage suggests
    /// (`int(files / 10000)`); `None` at or under that many files.
    pub fn suggested_subfolders(&self) -> Option<u64> {
        (self.files > FILES_PER_FOLDER).then_some(self.files / FILES_PER_FOLDER)
    }

    /// The answer as people read it, with the commands that generate the dataset: dlio-rs's
    /// (`words` are the ones the rule was computed with) and mlpstorage's.
    pub fn render(&self, config: &Config, cluster: &Cluster, words: &[String]) -> String {
        let gib = |bytes: u64| bytes as f64 / (1u64 << 30) as f64;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} · up to {} accelerator(s) · {} client host(s) × {} GiB",
            config.workload_name,
            cluster.max_accelerators,
            cluster.client_hosts,
            cluster.host_memory_gib
        );
        let _ = writeln!(out, "training files:      {}", self.files);
        let _ = writeln!(out, "training subfolders: {}", self.subfolders);
        let _ = writeln!(
            out,
            "disk space:          {:.2} GiB ({} files × {} bytes: {} sample(s) of {} bytes; the \
             format adds its headers)",
            gib(self.disk_bytes),
            self.files,
            self.file_bytes,
            config.dataset.num_samples_per_file,
            config.dataset.record_length_bytes
        );
        let dictated = if self.files_for_memory > self.files_for_steps {
            "dataset-size to memory ratio"
        } else {
            "500 steps per epoch for the accelerators and batch size"
        };
        let _ = writeln!(
            out,
            "dictated by:         the {dictated} (5 × memory: {} files; 500 steps × {} \
             accelerator(s) × batch {}: {} files)",
            self.files_for_memory,
            cluster.max_accelerators,
            config.reader.batch_size,
            self.files_for_steps
        );
        if let Some(subfolders) = self.suggested_subfolders() {
            let _ = writeln!(
                out,
                "warning: {} files may be too many for one folder on some file systems; \
                 ++workload.dataset.num_subfolders_train={subfolders} keeps about 10,000 in each",
                self.files
            );
        }
        let _ = writeln!(out, "\ngenerate with dlio-rs:");
        let mut command = vec!["dlio-rs run".to_string()];
        command.extend(words.iter().map(|w| shell_word(w)));
        command.push("++workload.workflow.generate_data=True".into());
        command.push("++workload.workflow.train=False".into());
        command.push(format!("++workload.dataset.num_files_train={}", self.files));
        if self.subfolders > 0 {
            command.push(format!(
                "++workload.dataset.num_subfolders_train={}",
                self.subfolders
            ));
        }
        let _ = writeln!(out, "  {}", command.join(" "));
        out
    }
}

/// Python's `a // b` of floats (CPython's `float_floor_div`): the floor of the exact quotient,
/// which `(a / b).floor()` can miss by one where the division rounds up to a whole number.
fn python_floor_div(a: f64, b: f64) -> f64 {
    let mut rem = a % b;
    let mut div = (a - rem) / b;
    if rem != 0.0 && ((b < 0.0) != (rem < 0.0)) {
        rem += b;
        div -= 1.0;
    }
    let _ = rem;
    if div == 0.0 {
        return 0.0_f64.copysign(a / b);
    }
    let mut floor = div.floor();
    if div - floor > 0.5 {
        floor += 1.0;
    }
    floor
}

/// `word` quoted for a POSIX shell where it needs to be.
fn shell_word(word: &str) -> String {
    let plain = word
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"+-_=./,:@%".contains(&b));
    if plain && !word.is_empty() {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_where_a_shell_needs_it() {
        assert_eq!(shell_word("workload=unet3d_h100"), "workload=unet3d_h100");
        assert_eq!(
            shell_word("++workload.dataset.data_folder=/data/my set"),
            "'++workload.dataset.data_folder=/data/my set'"
        );
        assert_eq!(shell_word("a'b"), r"'a'\''b'");
        assert_eq!(shell_word(""), "''");
    }
}
