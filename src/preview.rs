//! `dlio-rs plan`: what a rank will read in an epoch, computed from the configuration alone,
//! without touching storage, and how long computing it took. The plan is a pure function of the
//! configuration, the world size and the epoch, so this is exactly what a run would read (for
//! `random` shuffles: what a run with this draw would read).

use std::fmt::Write;
use std::time::{Duration, Instant};

use crate::config::{Config, Shuffle};
use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::plan::{EpochPlan, Phase, PlanSpec};

/// Which slice of which plan to show.
#[derive(Debug, Clone, Copy)]
pub struct PreviewRequest {
    pub world: u64,
    pub epoch: u64,
    pub rank: u64,
    pub phase: Phase,
    /// Batches to list from the rank's first.
    pub head: u64,
    /// Every sample of each batch listed, however long its line.
    pub full: bool,
}

/// The most characters of a batch's line before the rest of the batch is counted instead of
/// listed (`… K more sample(s)`), unless [`PreviewRequest::full`]: a batch of 400 samples listed
/// whole was one line of 12 KB.
const LINE_CHARS: usize = 160;

/// One batch's line: its samples as ranges, the consecutive samples of one file collapsed
/// (`train/img_1_of_8.npz#0-6`, both ends included), cut after [`LINE_CHARS`] unless `full`.
fn batch_line(step: u64, batch: &[(String, u64)], full: bool) -> String {
    let mut ranges: Vec<(&str, u64, u64)> = Vec::new();
    for (file, sample) in batch {
        match ranges.last_mut() {
            Some((f, _, last)) if f == file && *last + 1 == *sample => *last = *sample,
            _ => ranges.push((file, *sample, *sample)),
        }
    }
    let mut line = format!("step {step}:");
    let mut listed = 0;
    for (i, (file, first, last)) in ranges.iter().enumerate() {
        let entry = match first == last {
            true => format!(" {file}#{first}"),
            false => format!(" {file}#{first}-{last}"),
        };
        if !full && i > 0 && line.len() + entry.len() > LINE_CHARS {
            let more = batch.len() - listed;
            let _ = write!(line, " … {more} more sample(s) (--full lists them)");
            break;
        }
        line += &entry;
        listed += (last - first + 1) as usize;
    }
    line.push('\n');
    line
}

fn check(config: &Config, request: &PreviewRequest) -> Result<()> {
    if request.world == 0 {
        return Err(Error::usage("--accelerators must be at least 1"));
    }
    if request.rank >= request.world {
        return Err(Error::usage(format!(
            "--rank {} is not a rank of {} accelerator(s): valid ranks are 0..={}",
            request.rank,
            request.world,
            request.world - 1
        )));
    }
    if !(1..=config.train.epochs).contains(&request.epoch) {
        return Err(Error::usage(format!(
            "--epoch {} is not an epoch of this workload: valid epochs are 1..={} (workload.train.epochs)",
            request.epoch, config.train.epochs
        )));
    }
    if request.phase == Phase::Eval && config.dataset.num_files_eval == 0 {
        return Err(Error::usage(
            "--eval: the workload has no evaluation files (workload.dataset.num_files_eval = 0)",
        ));
    }
    Ok(())
}

fn describe_shuffle(kind: Shuffle) -> &'static str {
    match kind {
        Shuffle::Off => "off",
        Shuffle::Seed => "seed",
        Shuffle::Random => "random (a fresh order every run)",
    }
}

/// The slice of a plan `request` asked for: the plan's figures, the rank's first batches
/// (`file#sample` each) and how long computing them took.
#[derive(Debug)]
pub struct Preview {
    workload: String,
    request: PreviewRequest,
    total_samples: u64,
    files: u64,
    samples_per_file: u64,
    steps: u64,
    batch_size: u64,
    samples_not_read: u64,
    file_shuffle: Shuffle,
    sample_shuffle: Shuffle,
    seed: u64,
    seed_change_epoch: bool,
    build: Duration,
    first_batch: Duration,
    /// The listed batches, each sample as its file's key and its index in the file.
    batches: Vec<Vec<(String, u64)>>,
}

/// Computes the plan `request` asks for, with the time it took to build the plan and the rank's
/// first batch (file names included); `run_entropy` stands for a run's draw.
pub fn preview(config: &Config, request: &PreviewRequest, run_entropy: u64) -> Result<Preview> {
    check(config, request)?;
    let started = Instant::now();
    let plan = EpochPlan::new(
        PlanSpec::for_phase(config, request.phase, request.world, run_entropy),
        request.epoch,
    );
    let build = started.elapsed();
    let dataset = Dataset::from_config(config);
    let split = dataset.split(request.phase);
    let mut key = String::new();
    let mut batches: Vec<Vec<(String, u64)>> = Vec::new();
    let mut first_batch = Duration::ZERO;
    for step in 0..request.head.min(plan.steps()) {
        let started = Instant::now();
        let batch: Vec<(String, u64)> = plan
            .batch(request.rank, step)
            .map(|sample| {
                dataset.write_file_key(&mut key, split, sample.file);
                (key.clone(), sample.sample)
            })
            .collect();
        if step == 0 {
            first_batch = started.elapsed();
        }
        batches.push(batch);
    }
    let spec = plan.spec();
    Ok(Preview {
        workload: config.workload_name.clone(),
        request: *request,
        total_samples: spec.total_samples(),
        files: spec.files,
        samples_per_file: spec.samples_per_file,
        steps: plan.steps(),
        batch_size: plan.batch_size(),
        samples_not_read: plan.samples_not_read(),
        file_shuffle: spec.file_shuffle,
        sample_shuffle: spec.sample_shuffle,
        seed: spec.seed,
        seed_change_epoch: spec.seed_change_epoch,
        build,
        first_batch,
        batches,
    })
}

impl Preview {
    /// The plan for people.
    pub fn render(&self) -> String {
        let request = &self.request;
        let mut text = String::new();
        let _ = writeln!(
            text,
            "{} · {} accelerator(s) · epoch {} · {} · rank {}",
            self.workload,
            request.world,
            request.epoch,
            request.phase.as_str(),
            request.rank
        );
        let _ = writeln!(
            text,
            "{} sample(s) in {} file(s) of {}; {} step(s) of {} per rank; {} sample(s) not read",
            self.total_samples,
            self.files,
            self.samples_per_file,
            self.steps,
            self.batch_size,
            self.samples_not_read
        );
        let _ = writeln!(
            text,
            "file_shuffle {}, sample_shuffle {}, seed {}{}",
            describe_shuffle(self.file_shuffle),
            describe_shuffle(self.sample_shuffle),
            self.seed,
            if self.seed_change_epoch {
                " (changes every epoch)"
            } else {
                " (the same every epoch)"
            }
        );
        let _ = writeln!(
            text,
            "plan built in {}; rank {}'s first batch in {}; peak RSS {}; no storage touched",
            crate::console::duration(self.build.as_secs_f64() * 1e6),
            request.rank,
            crate::console::duration(self.first_batch.as_secs_f64() * 1e6),
            crate::system::peak_rss_bytes().map_or("unknown".to_string(), |b| format!(
                "{:.1} MiB",
                b as f64 / 1048576.0
            ))
        );
        for (step, batch) in (1..).zip(&self.batches) {
            text += &batch_line(step, batch, request.full);
        }
        let shown = self.batches.len() as u64;
        if shown < self.steps {
            let _ = writeln!(
                text,
                "… {} more step(s) (--head N shows more)",
                self.steps - shown
            );
        }
        text
    }

    /// The plan as `plan --output-format json` shows it (docs/running.md).
    pub fn to_json(&self) -> serde_json::Value {
        let request = &self.request;
        let shuffle = |kind| match kind {
            Shuffle::Off => "off",
            Shuffle::Seed => "seed",
            Shuffle::Random => "random",
        };
        serde_json::json!({
            "workload": self.workload,
            "accelerators": request.world,
            "epoch": request.epoch,
            "phase": request.phase.as_str(),
            "rank": request.rank,
            "samples": self.total_samples,
            "files": self.files,
            "samples_per_file": self.samples_per_file,
            "steps_per_rank": self.steps,
            "batch_size": self.batch_size,
            "samples_not_read": self.samples_not_read,
            "file_shuffle": shuffle(self.file_shuffle),
            "sample_shuffle": shuffle(self.sample_shuffle),
            "seed": self.seed,
            "seed_change_epoch": self.seed_change_epoch,
            "plan_build_microseconds": self.build.as_secs_f64() * 1e6,
            "batches": self.batches.iter().enumerate().map(|(step, batch)| serde_json::json!({
                "step": step + 1,
                "samples": batch.iter().map(|(file, sample)| serde_json::json!({
                    "file": file,
                    "sample": sample,
                })).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
            "steps_not_listed": self.steps - self.batches.len() as u64,
        })
    }

    /// The listed batches as `plan --output-format csv` shows them: a row per sample, with its
    /// step (from 1), its place in the batch (from 0), its file and its index in the file.
    pub fn to_csv(&self) -> String {
        let mut csv = crate::machine::Csv::new(&["step", "position", "file", "sample"]);
        for (step, batch) in self.batches.iter().enumerate() {
            for (position, (file, sample)) in batch.iter().enumerate() {
                csv.row([
                    (step + 1).to_string(),
                    position.to_string(),
                    file.clone(),
                    sample.to_string(),
                ]);
            }
        }
        csv.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;

    fn config(yaml: &str) -> Config {
        Config::from_tree("t", Value::from_yaml(yaml).unwrap()).unwrap()
    }

    /// The samples a step's line lists, its ranges expanded, and what it says of the rest.
    fn listed(shown: &str, step: u64) -> (Vec<(String, u64)>, Option<String>) {
        let line = shown
            .lines()
            .find_map(|l| l.strip_prefix(&format!("step {step}: ")))
            .unwrap_or_else(|| panic!("no step {step}:\n{shown}"));
        let (ranges, rest) = match line.split_once(" … ") {
            Some((ranges, rest)) => (ranges, Some(rest.to_string())),
            None => (line, None),
        };
        let mut samples = Vec::new();
        for entry in ranges.split(' ') {
            let (file, range) = entry.rsplit_once('#').unwrap();
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            for sample in first.parse::<u64>().unwrap()..=last.parse().unwrap() {
                samples.push((file.to_string(), sample));
            }
        }
        (samples, rest)
    }

    #[test]
    fn lists_exactly_the_rank_s_batches_of_the_run_plan() {
        let c = config(
            "dataset:\n  num_files_train: 10\n  num_samples_per_file: 3\n  format: npz\nreader:\n  batch_size: 4\n  file_shuffle: seed\n  sample_shuffle: seed\ntrain:\n  epochs: 3\n",
        );
        let request = PreviewRequest {
            world: 2,
            epoch: 2,
            rank: 1,
            phase: Phase::Train,
            head: 2,
            full: false,
        };
        let shown = preview(&c, &request, 7).unwrap().render();
        let plan = EpochPlan::new(PlanSpec::for_phase(&c, Phase::Train, 2, 7), 2);
        let dataset = Dataset::from_config(&c);
        for step in 0..2 {
            let planned: Vec<(String, u64)> = plan
                .batch(1, step)
                .map(|s| (dataset.file_key(&dataset.train, s.file), s.sample))
                .collect();
            assert_eq!(listed(&shown, step + 1), (planned, None), "{shown}");
        }
        assert!(
            shown.contains(
                "30 sample(s) in 10 file(s) of 3; 3 step(s) of 4 per rank; 6 sample(s) not read"
            ),
            "{shown}"
        );
        assert!(shown.contains("… 1 more step(s)"), "{shown}");
    }

    #[test]
    fn out_of_range_requests_are_usage_errors() {
        let c = config("train:\n  epochs: 2\n");
        let ok = PreviewRequest {
            world: 2,
            epoch: 1,
            rank: 1,
            phase: Phase::Train,
            head: 1,
            full: false,
        };
        assert!(preview(&c, &ok, 0).is_ok());
        for (bad, needle) in [
            (PreviewRequest { rank: 2, ..ok }, "valid ranks are 0..=1"),
            (PreviewRequest { epoch: 3, ..ok }, "valid epochs are 1..=2"),
            (PreviewRequest { epoch: 0, ..ok }, "valid epochs are 1..=2"),
            (PreviewRequest { world: 0, ..ok }, "at least 1"),
            (
                PreviewRequest {
                    phase: Phase::Eval,
                    ..ok
                },
                "num_files_eval = 0",
            ),
        ] {
            let error = preview(&c, &bad, 0).expect_err("rejected");
            assert_eq!(error.exit_code(), 2);
            assert!(error.to_string().contains(needle), "{error}");
        }
    }

    #[test]
    fn consecutive_samples_of_a_file_are_one_range() {
        let c = config(
            "dataset:\n  num_files_train: 2\n  num_samples_per_file: 8\n  format: npz\n  num_subfolders_train: 0\nreader:\n  batch_size: 7\n",
        );
        let request = PreviewRequest {
            world: 1,
            epoch: 1,
            rank: 0,
            phase: Phase::Train,
            head: 3,
            full: false,
        };
        let shown = preview(&c, &request, 0).unwrap().render();
        let steps: Vec<&str> = shown.lines().filter(|l| l.starts_with("step ")).collect();
        assert_eq!(
            steps,
            [
                "step 1: train/img_0_of_2.npz#0-6",
                "step 2: train/img_0_of_2.npz#7 train/img_1_of_2.npz#0-5",
            ],
            "{shown}"
        );
    }

    #[test]
    fn a_long_batch_is_cut_and_counted_unless_full() {
        // 400 samples of shuffled files: no two consecutive, so 400 ranges.
        let c = config(
            "dataset:\n  num_files_train: 1000\n  format: npz\nreader:\n  batch_size: 400\n  file_shuffle: seed\n",
        );
        let request = PreviewRequest {
            world: 1,
            epoch: 1,
            rank: 0,
            phase: Phase::Train,
            head: 1,
            full: false,
        };
        let plan = EpochPlan::new(PlanSpec::for_phase(&c, Phase::Train, 1, 0), 1);
        let dataset = Dataset::from_config(&c);
        let planned: Vec<(String, u64)> = plan
            .batch(0, 0)
            .map(|s| (dataset.file_key(&dataset.train, s.file), s.sample))
            .collect();
        let cut = preview(&c, &request, 0).unwrap().render();
        let line = cut.lines().find(|l| l.starts_with("step 1:")).unwrap();
        let (samples, rest) = listed(&cut, 1);
        assert!(line.len() <= LINE_CHARS + 60, "{line}");
        assert_eq!(samples[..], planned[..samples.len()]);
        assert_eq!(
            rest.as_deref(),
            Some(format!("{} more sample(s) (--full lists them)", 400 - samples.len()).as_str())
        );
        let full = preview(
            &c,
            &PreviewRequest {
                full: true,
                ..request
            },
            0,
        )
        .unwrap()
        .render();
        assert_eq!(listed(&full, 1), (planned, None));
    }
}
