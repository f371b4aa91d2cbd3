//! The sampler: one thread per process that wakes at each interval's end, takes the difference
//! of the ranks' counters (and the host's) since the last, and appends the interval's lines to
//! the process's file, flushed at once, so nothing accumulates however long the run.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::counters::{bucket_count, Counters, MeterReading, ReadMeter};
use super::exporter::{Exporter, Page};
use super::host::{io_read_bytes, HostProbe, HostReading};
use super::{Kind, PROCESS_FOLDER, RUN_FILE};
use crate::error::{Error, Result};
use crate::folder::Beneath;
use crate::progress::EpochProgress;
use crate::stats::Histogram;
use crate::storage::{Accounting, Storage};

/// What the sampler reads besides the ranks' counters.
pub struct Sources<'a> {
    /// The storage the ranks read: how its bytes from storage are known, and its requests (an
    /// object store's).
    pub storage: &'a dyn Storage,
    /// The host's counters, read by one process per host (`None` in the others); the folders
    /// whose block devices it watches.
    pub host: Option<Vec<PathBuf>>,
    /// The metrics endpoint, given a new page each interval, and the labels of its samples.
    pub exporter: Option<(&'a Exporter, Vec<(String, String)>)>,
    /// The live progress line, told each interval's figures.
    pub progress: Option<&'a EpochProgress>,
}

/// The time-series file of this process, and what its lines are made of.
pub struct Sampler<'a> {
    counters: &'a Counters,
    storage: &'a dyn Storage,
    accounting: Accounting,
    probe: Option<HostProbe>,
    exporter: Option<(&'a Exporter, Vec<(String, String)>)>,
    progress: Option<&'a EpochProgress>,
    interval: Duration,
    hostname: String,
    /// `None` when this process is the whole run (it writes the run's file), else its number.
    process: Option<usize>,
    path: PathBuf,
    file: File,
    /// The interval's lines, written with one call so that a reader following the file sees
    /// whole intervals.
    text: String,
}

/// Cumulative readings of one moment.
struct Reading {
    /// Per rank: each meter's reading.
    meters: Vec<Vec<MeterReading>>,
    /// Per rank: bytes from storage so far, where known.
    storage: Vec<Option<u64>>,
    /// Per rank: latency counts per bucket.
    latency: Vec<Vec<u64>>,
    /// Per rank: steps, compute ns, checkpoint bytes written and read.
    totals: Vec<[u64; 4]>,
    host: HostReading,
    /// Requests, bytes, retries and failures of an object store's client.
    requests: Option<[u64; 4]>,
}

impl<'a> Sampler<'a> {
    /// Creates the time-series file in the output folder `output`: the run's file for a run of
    /// one process, the process's own for each of several; never through a link planted there.
    pub fn create(
        output: &Path,
        process: Option<usize>,
        counters: &'a Counters,
        sources: Sources<'a>,
        interval_seconds: f64,
    ) -> Result<Sampler<'a>> {
        let name = match process {
            Some(p) => process_file(p),
            None => PathBuf::from(RUN_FILE),
        };
        let folder = Beneath::open(output).map_err(|e| write_error(output, e))?;
        let path = folder.path(&name);
        let file = folder
            .create_file(&name)
            .map_err(|e| write_error(&path, e))?;
        let folders: Vec<&Path> = sources.host.iter().flatten().map(|p| p.as_path()).collect();
        Ok(Sampler {
            counters,
            storage: sources.storage,
            accounting: sources.storage.accounting(),
            probe: sources.host.as_ref().map(|_| HostProbe::new(&folders)),
            exporter: sources.exporter,
            progress: sources.progress,
            interval: Duration::from_secs_f64(interval_seconds),
            hostname: crate::system::hostname(),
            process,
            path,
            file,
            text: String::new(),
        })
    }

    /// Runs `work` on this thread while the sampler writes an interval's lines at each
    /// interval's end on another; when `work` ends, the last (shorter) interval is written and
    /// the file closed. `work`'s failure comes first; then the file's.
    pub fn beside<T>(mut self, work: impl FnOnce() -> Result<T>) -> Result<T> {
        let stop = (Mutex::new(false), Condvar::new());
        // Before the ranks start: the first interval counts all they do.
        let first = self.read(0);
        let (outcome, written) = std::thread::scope(|scope| {
            let stop = &stop;
            let sampler = std::thread::Builder::new()
                .name("timeseries".to_string())
                .spawn_scoped(scope, move || self.sample_until(stop, first));
            let outcome = work();
            *stop.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
            stop.1.notify_all();
            let written = match sampler {
                Ok(handle) => handle
                    .join()
                    .unwrap_or_else(|_| Err(Error::run("the time-series thread panicked"))),
                Err(e) => Err(Error::run(format!(
                    "cannot start the time-series thread: {e}"
                ))),
            };
            (outcome, written)
        });
        let value = outcome?;
        written?;
        Ok(value)
    }

    /// Writes each interval's lines at its end until `stop` holds `true`, then the last one.
    /// Interval k covers [k, k + 1) intervals of the run clock in every process, so that the
    /// processes' lines of one interval can be merged; a sampler that wakes late (a stalled host)
    /// stretches its interval to the moment it woke and goes on from the next boundary.
    fn sample_until(&mut self, stop: &(Mutex<bool>, Condvar), first: Reading) -> Result<()> {
        let base = self.counters.base();
        let step = (self.interval.as_nanos() as u64).max(1);
        let mut previous = first;
        let mut start_ns = 0;
        loop {
            let due = base + Duration::from_nanos((start_ns / step + 1) * step);
            let last = {
                let mut stopped = stop.0.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    let now = Instant::now();
                    if *stopped || now >= due {
                        break *stopped;
                    }
                    stopped = stop
                        .1
                        .wait_timeout(stopped, due - now)
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
            };
            let end_ns = Instant::now().saturating_duration_since(base).as_nanos() as u64;
            let now = self.read(end_ns);
            let index = start_ns / step;
            self.write_interval(index, (start_ns, end_ns), &previous, &now)
                .map_err(|e| write_error(&self.path, e))?;
            if last {
                return Ok(());
            }
            // Intervals follow each other without a gap, so their sums are the run's totals.
            previous = now;
            start_ns = end_ns;
        }
    }

    /// Every counter at `now_ns` from the base.
    fn read(&self, now_ns: u64) -> Reading {
        let mut reading = Reading {
            meters: Vec::new(),
            storage: Vec::new(),
            latency: Vec::new(),
            totals: Vec::new(),
            host: self.probe.as_ref().map(HostProbe::read).unwrap_or_default(),
            requests: self.storage.request_counts().map(|counts| {
                counts.kinds.iter().fold([0; 4], |[r, b, t, f], k| {
                    [r + k.requests, b + k.bytes, t + k.retries, f + k.failures]
                })
            }),
        };
        for (_, rank) in self.counters.ranks() {
            let mut latency = vec![0; bucket_count()];
            let mut meters = Vec::with_capacity(rank.meters().len());
            let mut from_storage = Some(0u64);
            for meter in rank.meters() {
                let (seen, storage) = self.meter_storage(meter, now_ns);
                from_storage = from_storage.zip(storage).map(|(a, b)| a + b);
                meter.add_latencies(&mut latency);
                meters.push(seen);
            }
            let bytes: u64 = meters.iter().map(|m| m.bytes).sum();
            reading
                .storage
                .push(self.accounting.bytes_from_storage(bytes, from_storage));
            reading.meters.push(meters);
            reading.latency.push(latency);
            reading.totals.push(rank.totals(now_ns));
        }
        reading
    }

    /// A meter's reading and, where the kernel counts them, the bytes from storage its threads
    /// caused so far: the threads gone, and the one holding it now (from /proc/self/task).
    fn meter_storage(&self, meter: &ReadMeter, now_ns: u64) -> (MeterReading, Option<u64>) {
        let seen = meter.read(now_ns);
        if self.accounting != Accounting::KernelCounters {
            return (seen, None);
        }
        // A thread may end between the holder's reading and its file's: then it has detached,
        // and its bytes are in `storage_done` at the next look.
        for _ in 0..3 {
            let holder = meter.holder();
            let Some(tid) = holder.tid else {
                return (seen, Some(holder.storage_done));
            };
            let io = std::fs::read_to_string(format!("/proc/self/task/{tid}/io"));
            if let Some(now) = io.ok().as_deref().and_then(io_read_bytes) {
                let live = now.saturating_sub(holder.storage_at_attach);
                return (seen, Some(holder.storage_done + live));
            }
        }
        (seen, None)
    }

    fn write_interval(
        &mut self,
        index: u64,
        (start_ns, end_ns): (u64, u64),
        before: &Reading,
        now: &Reading,
    ) -> std::io::Result<()> {
        let seconds = (end_ns - start_ns) as f64 / 1e9;
        let mut sum = Sums::default();
        let mut text = std::mem::take(&mut self.text);
        text.clear();
        for (i, (rank, _)) in self.counters.ranks().enumerate() {
            let figures = RankFigures::between(before, now, i);
            let mut line = head(Kind::Rank, index, (start_ns, end_ns), &self.hostname);
            line.insert("rank".into(), json!(rank));
            figures.fields(seconds, 1, &mut line);
            let _ = writeln!(text, "{}", Value::Object(line));
            sum.add(&figures);
        }
        let kind = match self.process {
            Some(_) => Kind::Process,
            None => Kind::Host,
        };
        let mut line = head(kind, index, (start_ns, end_ns), &self.hostname);
        self.process_fields(before, now, seconds, &sum, &mut line);
        if let Some(process) = self.process {
            line.insert("process".into(), json!(process));
            line.insert(
                "latency_buckets".into(),
                json!(sum.figures.latency.nonzero_buckets()),
            );
        }
        let _ = writeln!(text, "{}", Value::Object(line.clone()));
        if let Some(progress) = self.progress {
            let figure = |key: &str| line.get(key).and_then(Value::as_f64).unwrap_or(0.0);
            progress.interval(
                figure("mib_per_second"),
                figure("au_percent"),
                figure("reads_in_flight"),
            );
        }
        if let Some((exporter, labels)) = &self.exporter {
            exporter.publish(self.metrics_page(labels, now, &line));
        }
        if self.process.is_none() {
            // One process is the run: its run line is its host line.
            line.insert("kind".into(), json!(Kind::Run.name()));
            let _ = writeln!(text, "{}", Value::Object(line));
        }
        let written = self.file.write_all(text.as_bytes());
        self.text = text;
        written
    }

    /// The sums of a process's (or a lone process's host's) line.
    fn process_fields(
        &self,
        before: &Reading,
        now: &Reading,
        seconds: f64,
        sum: &Sums,
        line: &mut Map<String, Value>,
    ) {
        line.insert("ranks".into(), json!(sum.ranks));
        sum.figures.fields(seconds, sum.ranks, line);
        if let (Some(a), Some(b)) = (before.requests, now.requests) {
            let d = |i: usize| b[i].saturating_sub(a[i]);
            line.insert(
                "object_requests".into(),
                json!({"requests": d(0), "bytes": d(1), "retries": d(2), "failures": d(3)}),
            );
        }
        if let Some(probe) = &self.probe {
            probe.fields(&before.host, &now.host, seconds, line);
        }
    }
}

impl Sampler<'_> {
    /// The metrics endpoint's page: the ranks' running totals (counters, for `rate()`), the
    /// latest interval's figures (gauges), the host's and the object store's.
    fn metrics_page(
        &self,
        labels: &[(String, String)],
        now: &Reading,
        line: &Map<String, Value>,
    ) -> String {
        let common: Vec<(&str, &str)> = labels
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let mut page = Page::new(&common);
        let ranks: Vec<usize> = self.counters.ranks().map(|(rank, _)| rank).collect();
        let rank_label = |i: usize| [("rank", ranks[i].to_string())];
        let per_rank: [(&str, &str, &str, RankValue); 8] = [
            ("dlio_samples_total", "counter", "Samples read.", |r, i| {
                Some(r.meters[i].iter().map(|m| m.reads).sum::<u64>() as f64)
            }),
            (
                "dlio_read_bytes_total",
                "counter",
                "Bytes of the samples read.",
                |r, i| Some(r.meters[i].iter().map(|m| m.bytes).sum::<u64>() as f64),
            ),
            (
                "dlio_storage_read_bytes_total",
                "counter",
                "Bytes the storage delivered (as report.json's bytes_from_storage).",
                |r, i| r.storage[i].map(|b| b as f64),
            ),
            (
                "dlio_steps_total",
                "counter",
                "Training steps completed.",
                |r, i| Some(r.totals[i][0] as f64),
            ),
            (
                "dlio_compute_seconds_total",
                "counter",
                "Seconds inside training compute (rate: AU as a fraction).",
                |r, i| Some(r.totals[i][1] as f64 / 1e9),
            ),
            (
                "dlio_read_seconds_total",
                "counter",
                "Seconds inside reads, summed over reader threads (rate: reads in flight).",
                |r, i| Some(r.meters[i].iter().map(|m| m.busy_ns).sum::<u64>() as f64 / 1e9),
            ),
            (
                "dlio_checkpoint_written_bytes_total",
                "counter",
                "Checkpoint bytes written.",
                |r, i| Some(r.totals[i][2] as f64),
            ),
            (
                "dlio_checkpoint_read_bytes_total",
                "counter",
                "Checkpoint bytes read.",
                |r, i| Some(r.totals[i][3] as f64),
            ),
        ];
        for (name, kind, help, value) in per_rank {
            page.family(name, kind, help);
            for i in 0..ranks.len() {
                if let Some(v) = value(now, i) {
                    page.sample(name, &rank_label(i), v);
                }
            }
        }
        page.family(
            "dlio_reads_in_flight",
            "gauge",
            "Reader threads inside a read now.",
        );
        for i in 0..ranks.len() {
            let reading = now.meters[i].iter().filter(|m| m.reading).count();
            page.sample("dlio_reads_in_flight", &rank_label(i), reading as f64);
        }
        let mut latency = vec![0u64; bucket_count()];
        for counts in &now.latency {
            for (sum, c) in latency.iter_mut().zip(counts) {
                *sum += c;
            }
        }
        let latency = Histogram::from_counts(&latency);
        page.family(
            "dlio_read_latency_seconds",
            "histogram",
            "Read latency of this process's ranks.",
        );
        let buckets = latency.buckets_us();
        for bound in LATENCY_BOUNDS {
            let under = buckets
                .iter()
                .filter(|(us, _)| *us <= bound * 1e6)
                .map(|(_, c)| c)
                .sum::<u64>();
            page.sample(
                "dlio_read_latency_seconds_bucket",
                &[("le", format!("{bound}"))],
                under as f64,
            );
        }
        page.sample(
            "dlio_read_latency_seconds_bucket",
            &[("le", "+Inf".into())],
            latency.count() as f64,
        );
        let sum_us = latency.mean_us().unwrap_or(0.0) * latency.count() as f64;
        page.sample("dlio_read_latency_seconds_sum", &[], sum_us / 1e6);
        page.sample(
            "dlio_read_latency_seconds_count",
            &[],
            latency.count() as f64,
        );
        for (key, name, help) in [
            (
                "mib_per_second",
                "dlio_interval_mib_per_second",
                "MiB/s read in the last interval.",
            ),
            (
                "au_percent",
                "dlio_interval_au_percent",
                "AU of the last interval, mean of the ranks, %.",
            ),
            (
                "reads_in_flight",
                "dlio_interval_reads_in_flight",
                "Mean reads in flight in the last interval.",
            ),
            (
                "cpu_busy_percent",
                "dlio_host_cpu_busy_percent",
                "The host's CPUs busy in the last interval, %.",
            ),
            (
                "memory_used_bytes",
                "dlio_host_memory_used_bytes",
                "The host's memory in use (MemTotal - MemAvailable).",
            ),
            (
                "memory_total_bytes",
                "dlio_host_memory_total_bytes",
                "The host's memory.",
            ),
        ] {
            if let Some(v) = line.get(key).and_then(Value::as_f64) {
                page.family(name, "gauge", help);
                page.sample(name, &[], v);
            }
        }
        let disks = line
            .get("disks")
            .and_then(Value::as_array)
            .filter(|d| !d.is_empty());
        for (key, help) in [
            (
                "read_bytes",
                "Bytes the device read in the last interval (every process's).",
            ),
            (
                "reads",
                "Read requests the device completed in the last interval.",
            ),
            (
                "busy_percent",
                "Time the device had a request in flight in the last interval, %.",
            ),
            (
                "mean_queue",
                "The device's mean queue depth in the last interval.",
            ),
            ("in_flight", "Requests in flight on the device now."),
        ] {
            let Some(disks) = disks else { break };
            let name = format!("dlio_disk_{key}");
            page.family(&name, "gauge", help);
            for disk in disks {
                let device = disk["device"].as_str().unwrap_or_default().to_string();
                page.sample(
                    &name,
                    &[("device", device)],
                    disk[key].as_f64().unwrap_or(0.0),
                );
            }
        }
        if let Some(requests) = now.requests {
            for (i, (name, help)) in [
                (
                    "dlio_object_requests_total",
                    "Object-store requests that succeeded.",
                ),
                (
                    "dlio_object_bytes_total",
                    "Bytes of object-store request bodies.",
                ),
                (
                    "dlio_object_retries_total",
                    "Object-store attempts made again.",
                ),
                (
                    "dlio_object_failures_total",
                    "Object-store requests that failed for good.",
                ),
            ]
            .into_iter()
            .enumerate()
            {
                page.family(name, "counter", help);
                page.sample(name, &[], requests[i] as f64);
            }
        }
        page.into_text()
    }
}

/// A rank's value on the metrics page, from a reading: (reading, the rank's index).
type RankValue = fn(&Reading, usize) -> Option<f64>;

/// The latency histogram's bucket bounds on the metrics page, seconds: 1-2.5-5 steps from 10 µs
/// to 10 s.
const LATENCY_BOUNDS: [f64; 19] = [
    1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0,
];

/// The figures of one rank (or a sum of ranks) over an interval.
#[derive(Default)]
pub(super) struct RankFigures {
    pub samples: u64,
    pub bytes_read: u64,
    pub bytes_from_storage: Option<u64>,
    pub steps: u64,
    pub compute_ns: u64,
    pub busy_ns: u64,
    pub reading_at_end: u64,
    pub checkpoint_written: u64,
    pub checkpoint_read: u64,
    pub latency: Histogram,
}

impl RankFigures {
    fn between(before: &Reading, now: &Reading, rank: usize) -> RankFigures {
        let (a, b) = (&before.meters[rank], &now.meters[rank]);
        let d = |f: fn(&MeterReading) -> u64| -> u64 {
            let sum = |ms: &[MeterReading]| ms.iter().map(f).sum::<u64>();
            sum(b).saturating_sub(sum(a))
        };
        let latency: Vec<u64> = now.latency[rank]
            .iter()
            .zip(&before.latency[rank])
            .map(|(n, p)| n.saturating_sub(*p))
            .collect();
        let t = |i: usize| now.totals[rank][i].saturating_sub(before.totals[rank][i]);
        RankFigures {
            samples: d(|m| m.reads),
            bytes_read: d(|m| m.bytes),
            bytes_from_storage: now.storage[rank]
                .zip(before.storage[rank])
                .map(|(n, p)| n.saturating_sub(p)),
            steps: t(0),
            compute_ns: t(1),
            busy_ns: d(|m| m.busy_ns),
            reading_at_end: b.iter().filter(|m| m.reading).count() as u64,
            checkpoint_written: t(2),
            checkpoint_read: t(3),
            latency: Histogram::from_counts(&latency),
        }
    }

    /// Adds `other`'s figures (bytes from storage stay known only while both are).
    pub(super) fn add(&mut self, other: &RankFigures) {
        self.samples += other.samples;
        self.bytes_read += other.bytes_read;
        self.bytes_from_storage = self
            .bytes_from_storage
            .zip(other.bytes_from_storage)
            .map(|(a, b)| a + b);
        self.steps += other.steps;
        self.compute_ns += other.compute_ns;
        self.busy_ns += other.busy_ns;
        self.reading_at_end += other.reading_at_end;
        self.checkpoint_written += other.checkpoint_written;
        self.checkpoint_read += other.checkpoint_read;
        self.latency.merge(&other.latency);
    }

    /// The fields of a line over `seconds`, for `ranks` ranks (AU is their mean).
    pub(super) fn fields(&self, seconds: f64, ranks: u64, line: &mut Map<String, Value>) {
        let per_second = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
        line.insert("samples".into(), json!(self.samples));
        line.insert("steps".into(), json!(self.steps));
        line.insert("bytes_read".into(), json!(self.bytes_read));
        line.insert("bytes_from_storage".into(), json!(self.bytes_from_storage));
        line.insert(
            "mib_per_second".into(),
            json!(per_second(self.bytes_read as f64 / 1048576.0)),
        );
        line.insert(
            "au_percent".into(),
            json!(per_second(self.compute_ns as f64 / 1e9) / ranks.max(1) as f64 * 100.0),
        );
        line.insert(
            "compute_seconds".into(),
            json!(self.compute_ns as f64 / 1e9),
        );
        line.insert("read_seconds".into(), json!(self.busy_ns as f64 / 1e9));
        line.insert(
            "reads_in_flight".into(),
            json!(per_second(self.busy_ns as f64 / 1e9)),
        );
        line.insert("reads_in_flight_at_end".into(), json!(self.reading_at_end));
        let q = |q: f64| self.latency.quantile_us(q);
        line.insert(
            "read_latency_us".into(),
            match self.latency.count() {
                0 => Value::Null,
                _ => json!({"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "max": q(1.0)}),
            },
        );
        line.insert(
            "checkpoint_bytes_written".into(),
            json!(self.checkpoint_written),
        );
        line.insert("checkpoint_bytes_read".into(), json!(self.checkpoint_read));
    }
}

/// Ranks' figures added up.
#[derive(Default)]
struct Sums {
    ranks: u64,
    figures: RankFigures,
}

impl Sums {
    fn add(&mut self, figures: &RankFigures) {
        if self.ranks == 0 {
            self.figures.bytes_from_storage = Some(0);
        }
        self.ranks += 1;
        self.figures.add(figures);
    }
}

/// The fields every line starts with.
pub(super) fn head(
    kind: Kind,
    index: u64,
    (start_ns, end_ns): (u64, u64),
    host: &str,
) -> Map<String, Value> {
    let mut line = Map::new();
    line.insert("kind".into(), json!(kind.name()));
    line.insert("interval".into(), json!(index));
    line.insert("start".into(), json!(start_ns as f64 / 1e9));
    line.insert("end".into(), json!(end_ns as f64 / 1e9));
    line.insert("host".into(), json!(host));
    line
}

/// The file of process `process` of several, in the output folder.
pub(super) fn process_file(process: usize) -> PathBuf {
    Path::new(PROCESS_FOLDER).join(format!("{process}.jsonl"))
}

pub(super) fn write_error(path: &Path, e: std::io::Error) -> Error {
    Error::io("cannot write time-series file", path, e)
}
