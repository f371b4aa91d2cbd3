//! `dlio.log`, in DLIO's format: `[LEVEL] <timestamp> message`, with DLIO's custom OUTPUT level
//! for the lines tools look for, and the `[METRIC]` block at the end.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use super::FinishedRun;
use crate::checkpoint::geometry::{Geometry, ShardKind};
use crate::config::value::Value;
use crate::config::Config;
use crate::error::{Error, Result};
use crate::plan::{Phase, PlanSpec};
use crate::stats::{mean_stdev, phase_rates};
use crate::system::timestamp;

const GIB: f64 = (1u64 << 30) as f64;

/// The run's log; only process 0 of a run writes one (the others hold [`DlioLog::none`]).
pub struct DlioLog {
    path: PathBuf,
    file: Option<Mutex<LogFile>>,
}

struct LogFile {
    file: File,
    /// The first write that failed: said once, and the run then fails ([`DlioLog::check`]).
    failed: Option<std::io::Error>,
}

impl DlioLog {
    /// Starts a new log, replacing an old one (as DLIO's rank 0 does).
    pub fn create(path: &Path) -> Result<DlioLog> {
        let file =
            crate::folder::create_file(path).map_err(|e| Error::io("cannot create", path, e))?;
        Ok(DlioLog {
            path: path.to_path_buf(),
            file: Some(Mutex::new(LogFile { file, failed: None })),
        })
    }

    /// The log of a process that does not write it: lines to it go nowhere.
    pub fn none() -> DlioLog {
        DlioLog {
            path: PathBuf::new(),
            file: None,
        }
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'_, LogFile>> {
        let file = self.file.as_ref()?;
        Some(file.lock().unwrap_or_else(|p| p.into_inner()))
    }

    fn write(&self, text: &str) {
        let Some(mut log) = self.lock() else {
            return;
        };
        if log.failed.is_some() {
            return;
        }
        if let Err(e) = log.file.write_all(text.as_bytes()) {
            crate::console::tell(format_args!(
                "warning: cannot write {}: {e}; the run goes on, and fails at its end",
                self.path.display()
            ));
            log.failed = Some(e);
        }
    }

    /// Fails if a line could not be written: a run whose log is incomplete did not complete.
    pub fn check(&self) -> Result<()> {
        match self.lock().and_then(|mut log| log.failed.take()) {
            Some(e) => Err(Error::io("cannot write", &self.path, e)),
            None => Ok(()),
        }
    }

    /// An OUTPUT line stamped with `at`.
    pub fn output_at(&self, at: SystemTime, message: &str) {
        self.write(&format!("[OUTPUT] {} {message}\n", timestamp(at)));
    }

    pub fn output(&self, message: &str) {
        self.output_at(SystemTime::now(), message);
    }

    pub fn warning(&self, message: &str) {
        self.write(&format!(
            "[WARNING] {} {message}\n",
            timestamp(SystemTime::now())
        ));
    }

    pub fn error(&self, message: &str) {
        self.write(&format!(
            "[ERROR] {} {message}\n",
            timestamp(SystemTime::now())
        ));
    }

    /// The metric block: one OUTPUT record whose text spans lines, as DLIO logs it.
    pub fn metric_block(&self, block: &str) {
        self.write(&format!("[OUTPUT] {block}\n"));
    }

    /// The steps per epoch (and per eval), as DLIO logs them before training.
    pub fn run_plan(&self, config: &Config, world: u64) {
        let d = &config.dataset;
        let train = PlanSpec::for_phase(config, Phase::Train, world, 0);
        let uncapped = PlanSpec {
            max_steps: 0,
            ..train.clone()
        }
        .steps();
        self.output(&format!(
            "Max steps per epoch: {uncapped} = {} * {} / {} / {world} (samples per file * num files / batch size / comm size)",
            d.num_samples_per_file, d.num_files_train, config.reader.batch_size
        ));
        if config.train.total_training_steps > 0 {
            let tts = config.train.total_training_steps as u64;
            self.output(&format!(
                "Total training steps is set to be {tts}. Will only run up to {}",
                (uncapped * config.train.epochs).min(tts)
            ));
        }
        if config.workflow.evaluation {
            let eval = PlanSpec::for_phase(config, Phase::Eval, world, 0).steps();
            self.output(&format!(
                "Steps per eval: {eval} = {} * {} / {} / {world} (samples per file * num files / batch size eval / comm size)",
                d.num_samples_per_file, d.num_files_eval, config.reader.batch_size_eval
            ));
        }
    }

    /// DLIO's lines on the checkpoint's size, in GiB as DLIO's "GB": the bytes the model and the
    /// optimizer files of all ranks hold, as written (DLIO counts allocated bytes, which ZeRO 2
    /// doubles; docs/deviations.md).
    pub fn checkpoint_plan(&self, geometry: &Geometry) {
        let (mut model, mut optimizer) = (0u64, 0u64);
        for rank in 0..geometry.world() {
            for file in geometry.files(rank) {
                match file.kind {
                    ShardKind::Model => model += file.bytes,
                    ShardKind::Optimizer => optimizer += file.bytes,
                }
            }
        }
        let gib = |bytes: u64| bytes as f64 / GIB;
        self.output(&format!("Model size: {:.6} GB", gib(model)));
        self.output(&format!("Optimizer state size: {:.6} GB", gib(optimizer)));
        self.output(&format!(
            "Total checkpoint size: {:.6} GB",
            gib(model + optimizer)
        ));
    }

    /// DLIO's lines for each epoch, block and eval, from rank 0's timings (throughput lines
    /// show rank 0's samples/s times the number of ranks, as DLIO prints them).
    pub fn epochs(&self, run: &FinishedRun) {
        let FinishedRun { config, clock, .. } = *run;
        let (rank0, world) = (&run.ranks[0], run.results.world as u64);
        let window = crate::stats::MetricWindow::from(config);
        let set_value = config
            .tree
            .get_path(&["train", "computation_time"])
            .map_or("0".into(), Value::to_flow_yaml);
        for e in &rank0.epochs {
            let n = e.epoch;
            let steps = e.train.steps();
            self.output_at(
                clock.wall(e.start),
                &format!("Starting epoch {n}: {steps} steps expected"),
            );
            for (i, block) in e.train.blocks.iter().enumerate() {
                let b = i + 1;
                self.output_at(clock.wall(block.start), &format!("Starting block {b}"));
                let at = clock.wall(block.end);
                let rates = window.train_block(block, config.reader.batch_size);
                let compute: Vec<f64> = window
                    .counted(&block.steps)
                    .iter()
                    .map(|s| s.compute)
                    .collect();
                let (mean, stdev) = mean_stdev(&compute);
                for line in [
                    format!("Ending block {b} - {} steps completed in {:.2} s", block.steps.len(), block.end - block.start),
                    format!("Epoch {n} - Block {b} [Training] Accelerator Utilization [AU] (%): {:.4}", rates.au_percent),
                    format!(
                        "Epoch {n} - Block {b} [Training] Throughput (samples/second): {:.4}",
                        rates.samples_per_second * world as f64
                    ),
                    format!(
                        "Epoch {n} - Block {b} [Training] Computation time per step (second): {mean:.4}+/-{stdev:.4} (set value: {set_value})"
                    ),
                ] {
                    self.output_at(at, &line);
                }
            }
            self.output_at(
                clock.wall(e.train.end),
                &format!(
                    "Ending epoch {n} - {steps} steps completed in {:.2} s",
                    e.train.end - e.start
                ),
            );
            if let Some(eval) = &e.eval {
                let rates = phase_rates(eval, |b| {
                    window.eval_block(b, config.reader.batch_size_eval)
                });
                self.output_at(
                    clock.wall(eval.start),
                    &format!("Starting eval - {} steps expected", eval.steps()),
                );
                let at = clock.wall(eval.end);
                for line in [
                    format!(
                        "Ending eval - {} steps completed in {:.2} s",
                        eval.steps(),
                        eval.wall()
                    ),
                    format!(
                        "Epoch {n} [Eval] Accelerator Utilization [AU] (%): {:.4}",
                        rates.au_percent
                    ),
                    format!(
                        "Epoch {n} [Eval] Throughput (samples/second): {:.4}",
                        rates.samples_per_second * world as f64
                    ),
                ] {
                    self.output_at(at, &line);
                }
            }
        }
    }
}
