//! The run over time, on the page: its time series (`timeseries.jsonl`) drawn as lines — MiB/s
//! read and from storage, AU, reads in flight, and each watched disk's reads and busy share.
//!
//! The file is read line by line, never whole (a week-long run's is gigabytes), into at most
//! [`POINTS`] points per line: when a series would pass twice that, neighbouring points are
//! merged in pairs and later intervals go in twice as many to a point. A point's figures are
//! time-weighted over the intervals it holds (bytes over seconds, AU and reads in flight
//! weighted by each interval's length), so a merged point says what the intervals it holds did
//! together.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde_json::Value;

use super::chart::{self, Axis, Chart, Series, CACHE_COLOR, COMPUTE_COLOR, STORAGE_COLOR};
use crate::error::{Error, Result};

/// Points drawn per line at most (the width of a chart in pixels, about).
pub const POINTS: usize = 400;
/// Longest line read; a longer one is not a line a run writes.
const MAX_LINE: u64 = 1 << 20;
/// Disks drawn at most (hosts × devices).
const MAX_DISKS: usize = 8;
/// Colours of the disks' lines, in turn.
const DISK_COLORS: [&str; MAX_DISKS] = [
    "#337ab7", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#0072b2", "#999999",
];

/// Time-weighted sums of figures over some intervals, merged as they come.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Point<const N: usize> {
    start: f64,
    end: f64,
    /// Σ figure × seconds, per figure.
    sums: [f64; N],
}

impl<const N: usize> Point<N> {
    fn seconds(&self) -> f64 {
        self.end - self.start
    }

    fn merge(&mut self, other: &Point<N>) {
        self.end = other.end;
        for (mine, theirs) in self.sums.iter_mut().zip(other.sums) {
            *mine += theirs;
        }
    }

    /// Where it is drawn across (its middle) and figure `i`'s time-weighted mean.
    fn at(&self, i: usize) -> (f64, f64) {
        let seconds = self.seconds();
        let mean = if seconds > 0.0 {
            self.sums[i] / seconds
        } else {
            0.0
        };
        ((self.start + self.end) / 2.0, mean)
    }
}

/// At most `2 × POINTS` points of a series, each holding `stride` intervals (the last fewer).
#[derive(Clone, Debug)]
struct Thinned<const N: usize> {
    points: Vec<Point<N>>,
    stride: usize,
    /// Intervals in the last point.
    in_last: usize,
}

impl<const N: usize> Default for Thinned<N> {
    fn default() -> Self {
        Thinned {
            points: Vec::new(),
            stride: 1,
            in_last: 0,
        }
    }
}

impl<const N: usize> Thinned<N> {
    fn push(&mut self, point: Point<N>) {
        match self.points.last_mut() {
            Some(last) if self.in_last < self.stride => {
                last.merge(&point);
                self.in_last += 1;
            }
            _ => {
                if self.points.len() == 2 * POINTS {
                    self.halve();
                    return self.push(point);
                }
                self.points.push(point);
                self.in_last = 1;
            }
        }
    }

    /// Merges neighbours in pairs: half the points, each holding twice the intervals.
    fn halve(&mut self) {
        let merged = self
            .points
            .chunks(2)
            .map(|pair| {
                let mut point = pair[0];
                if let Some(next) = pair.get(1) {
                    point.merge(next);
                }
                point
            })
            .collect();
        self.points = merged;
        self.stride *= 2;
        // The last pair was whole (an even count of full points): the last point is full.
        self.in_last = self.stride;
    }

    fn line(&self, i: usize) -> Vec<(f64, f64)> {
        self.points.iter().map(|p| p.at(i)).collect()
    }
}

/// What the run lines hold, per point: MiB/s read, MiB/s from storage, AU %, reads in flight.
const RUN_FIGURES: usize = 4;
/// What a disk's line holds per point: MiB/s read, busy %.
const DISK_FIGURES: usize = 2;

/// The run's time series, thinned for drawing.
#[derive(Debug, Default)]
pub struct OverTime {
    run: Thinned<RUN_FIGURES>,
    /// Whether every interval knew its bytes from storage.
    storage_known: bool,
    /// Per (host, device): its line.
    disks: BTreeMap<(String, String), Thinned<DISK_FIGURES>>,
}

/// Reads the output folder `dir`'s time series, if it has one.
pub fn read(dir: &Path) -> Result<Option<OverTime>> {
    let path = dir.join(crate::timeseries::RUN_FILE);
    let file = crate::folder::open_regular_file(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::InvalidInput => crate::folder::bad_output_file(&path, &e.to_string()),
        _ => Error::io("cannot read", &path, e),
    })?;
    let Some(file) = file else {
        return Ok(None);
    };
    let mut reader = BufReader::new(file);
    let mut over = OverTime {
        storage_known: true,
        ..OverTime::default()
    };
    let mut line = Vec::new();
    for number in 1.. {
        line.clear();
        let read = (&mut reader)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut line)
            .map_err(|e| Error::io("cannot read", &path, e))?;
        if read == 0 || line.last() != Some(&b'\n') {
            if line.len() as u64 > MAX_LINE {
                let what = format!("line {number} is longer than {MAX_LINE} bytes");
                return Err(crate::folder::bad_output_file(&path, &what));
            }
            // The end, or a line the run had not finished writing when it stopped.
            break;
        }
        let value: Value = serde_json::from_slice(&line).map_err(|e| {
            crate::folder::bad_output_file(&path, &format!("line {number} is not JSON ({e})"))
        })?;
        over.add(&value).map_err(|what| {
            crate::folder::bad_output_file(&path, &format!("line {number}: {what}"))
        })?;
    }
    Ok(Some(over))
}

impl OverTime {
    /// Takes one line of the file in.
    fn add(&mut self, line: &Value) -> std::result::Result<(), String> {
        let number = |key: &str| {
            line[key]
                .as_f64()
                .ok_or_else(|| format!("'{key}' must be a number"))
        };
        let (start, end) = (number("start")?, number("end")?);
        if end < start {
            return Err("'end' is before 'start'".into());
        }
        let seconds = end - start;
        match line["kind"].as_str() {
            Some("run") => {
                let storage = match line["bytes_from_storage"].as_f64() {
                    Some(bytes) => bytes,
                    None => {
                        self.storage_known = false;
                        0.0
                    }
                };
                self.run.push(Point {
                    start,
                    end,
                    sums: [
                        number("bytes_read")? / MIB,
                        storage / MIB,
                        number("au_percent")? * seconds,
                        number("read_seconds")?,
                    ],
                });
            }
            Some("host") => {
                let host = line["host"].as_str().unwrap_or_default().to_string();
                let disks = line["disks"].as_array().map(Vec::as_slice).unwrap_or(&[]);
                for disk in disks {
                    let device = disk["device"].as_str().unwrap_or_default().to_string();
                    let key = (host.clone(), device);
                    if !self.disks.contains_key(&key) && self.disks.len() == MAX_DISKS {
                        continue;
                    }
                    let figure = |key: &str| {
                        disk[key]
                            .as_f64()
                            .ok_or_else(|| format!("a disk's '{key}' must be a number"))
                    };
                    let point = Point {
                        start,
                        end,
                        sums: [
                            figure("read_bytes")? / MIB,
                            figure("busy_percent")? * seconds,
                        ],
                    };
                    self.disks.entry(key).or_default().push(point);
                }
            }
            Some("rank") => {}
            _ => return Err("'kind' must be rank, host or run".into()),
        }
        Ok(())
    }

    /// The charts, in the page's order.
    pub fn charts(&self) -> String {
        let time = || Axis::linear("time since the ranks started (s)");
        let mut html = String::new();
        let mut throughput = vec![Series {
            name: "read".into(),
            colour: CACHE_COLOR,
            points: self.run.line(0),
        }];
        if self.storage_known {
            throughput.push(Series {
                name: "from storage".into(),
                colour: STORAGE_COLOR,
                points: self.run.line(1),
            });
        }
        let charts = [
            (
                Chart::new(
                    "throughput-over-time",
                    "Read throughput over the run",
                    time(),
                    Axis::linear("MiB/s"),
                ),
                throughput,
            ),
            (
                Chart::new(
                    "au-over-time",
                    "AU over the run",
                    time(),
                    Axis::linear("AU (%)").up_to(100.0),
                ),
                vec![Series {
                    name: "AU, mean of the ranks".into(),
                    colour: COMPUTE_COLOR,
                    points: self.run.line(2),
                }],
            ),
            (
                Chart::new(
                    "in-flight-over-time",
                    "Reads in flight over the run",
                    time(),
                    Axis::linear("reads in flight (mean)"),
                ),
                vec![Series {
                    name: "reads in flight, all reader threads".into(),
                    colour: STORAGE_COLOR,
                    points: self.run.line(3),
                }],
            ),
        ];
        for (chart, series) in charts {
            html.push_str(&chart.lines(&series).unwrap_or_default());
        }
        let disk_lines = |figure: usize| -> Vec<Series> {
            self.disks
                .iter()
                .zip(DISK_COLORS)
                .map(|(((host, device), line), colour)| Series {
                    name: format!("{device} on {host}"),
                    colour,
                    points: line.line(figure),
                })
                .collect()
        };
        if self.disks.is_empty() {
            html.push_str(&chart::left_out(
                "disks-over-time",
                "No disk watched: the run's folders are on no block device of this host (object \
                 storage, tmpfs, a network file system).",
            ));
            return html;
        }
        let disk_charts = [
            Chart::new(
                "disk-reads-over-time",
                "Disk reads over the run (every process's)",
                time(),
                Axis::linear("MiB/s"),
            )
            .lines(&disk_lines(0)),
            Chart::new(
                "disk-busy-over-time",
                "Disk busy over the run",
                time(),
                Axis::linear("busy (%)").up_to(100.0),
            )
            .lines(&disk_lines(1)),
        ];
        for chart in disk_charts.into_iter().flatten() {
            html.push_str(&chart);
        }
        html
    }
}

const MIB: f64 = 1048576.0;

#[cfg(test)]
mod tests {
    use super::*;

    fn point(start: f64, value: f64) -> Point<1> {
        Point {
            start,
            end: start + 1.0,
            sums: [value],
        }
    }

    #[test]
    fn a_long_series_is_thinned_to_time_weighted_means() {
        let mut thinned = Thinned::<1>::default();
        let n = 10 * POINTS + 3;
        for i in 0..n {
            thinned.push(point(i as f64, i as f64));
        }
        assert!(thinned.points.len() <= 2 * POINTS && thinned.points.len() > POINTS / 2);
        // Nothing lost: the points cover every interval, in order, without gap.
        assert_eq!(thinned.points[0].start, 0.0);
        assert_eq!(thinned.points.last().unwrap().end, n as f64);
        for pair in thinned.points.windows(2) {
            assert_eq!(pair[0].end, pair[1].start);
        }
        let total: f64 = thinned.points.iter().map(|p| p.sums[0]).sum();
        assert_eq!(total, (0..n).map(|i| i as f64).sum::<f64>());
        // A point of intervals i..i+k (value i each, 1 s) is their mean, drawn at its middle.
        let first = thinned.points[0];
        let k = first.seconds();
        assert_eq!(first.at(0), (k / 2.0, (k - 1.0) / 2.0));
    }

    #[test]
    fn lines_make_charts_and_bad_lines_are_named() {
        let mut over = OverTime {
            storage_known: true,
            ..OverTime::default()
        };
        let run = serde_json::json!({"kind": "run", "start": 0.0, "end": 2.0,
            "bytes_read": 4.0 * MIB, "bytes_from_storage": MIB, "au_percent": 50.0,
            "read_seconds": 3.0});
        over.add(&run).unwrap();
        let host = serde_json::json!({"kind": "host", "start": 0.0, "end": 2.0, "host": "h",
            "disks": [{"device": "vda", "read_bytes": 2.0 * MIB, "busy_percent": 10.0}]});
        over.add(&host).unwrap();
        assert_eq!(over.run.line(0), vec![(1.0, 2.0)]);
        assert_eq!(over.run.line(1), vec![(1.0, 0.5)]);
        assert_eq!(over.run.line(2), vec![(1.0, 50.0)]);
        assert_eq!(over.run.line(3), vec![(1.0, 1.5)]);
        let page = over.charts();
        for name in [
            "throughput-over-time",
            "au-over-time",
            "in-flight-over-time",
            "disk-reads-over-time",
            "disk-busy-over-time",
        ] {
            assert!(page.contains(&format!("data-chart=\"{name}\"")), "{name}");
        }
        assert!(page.contains("vda on h"));
        let bad = serde_json::json!({"kind": "run", "start": 2.0, "end": 1.0});
        assert!(over.add(&bad).unwrap_err().contains("before"));
        let bad = serde_json::json!({"kind": "x", "start": 0.0, "end": 1.0});
        assert!(over.add(&bad).unwrap_err().contains("'kind'"));
    }
}
