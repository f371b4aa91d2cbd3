//! The processes' time series made one, at the end of a run of several processes: each sends
//! process 0 the lines of the next [`CHUNK`] intervals of its own file, round after round, and
//! process 0 writes them into the run's file with, for each interval, a line per host (its
//! processes' ranks summed, its host counters from the process that read them) and one for the
//! run. Memory is that of one chunk of every process, whatever the run's length.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use serde_json::{json, Map, Value};

use super::sampler::{head, process_file, write_error, RankFigures};
use super::{Kind, PROCESS_FOLDER, RUN_FILE};
use crate::comm::{broadcast_value, gather_values, Comm};
use crate::error::{Error, Result};
use crate::folder::Beneath;
use crate::stats::Histogram;

/// Intervals sent to process 0 per round.
const CHUNK: u64 = 64;

/// One process's lines of a round.
#[derive(serde::Serialize, serde::Deserialize)]
struct Chunk {
    lines: Vec<String>,
    /// The file holds lines beyond this round's.
    more: bool,
    /// Why this process cannot go on.
    failed: Option<String>,
}

/// Merges every process's file in the output folder `output` into the run's file (written by
/// process 0); each process's own file is then removed. Collective: every process calls it.
pub fn merge(comm: &dyn Comm, output: &Path) -> Result<()> {
    let folder = Beneath::open(output).map_err(|e| write_error(output, e))?;
    let own = process_file(comm.process());
    let mut reader = folder
        .open_file(&own)
        .map(BufReader::new)
        .map_err(|e| e.to_string());
    let mut writer = match comm.process() {
        0 => Some(
            folder
                .create_file(Path::new(RUN_FILE))
                .map(BufWriter::new)
                .map_err(|e| write_error(&folder.path(Path::new(RUN_FILE)), e))?,
        ),
        _ => None,
    };
    let mut pending = None;
    let mut round = 0;
    loop {
        let chunk = match &mut reader {
            Ok(reader) => next_chunk(reader, &mut pending, (round + 1) * CHUNK),
            Err(e) => Chunk {
                lines: Vec::new(),
                more: false,
                failed: Some(format!("{}: {e}", folder.path(&own).display())),
            },
        };
        let go = match gather_values(comm, &chunk)? {
            Some(chunks) => {
                let failed = chunks.iter().find_map(|c| c.failed.clone());
                if failed.is_none() {
                    if let Some(writer) = &mut writer {
                        write_merged(writer, &chunks)
                            .map_err(|e| write_error(&folder.path(Path::new(RUN_FILE)), e))?;
                    }
                }
                let more = chunks.iter().any(|c| c.more);
                Some((more && failed.is_none(), failed))
            }
            None => None,
        };
        let (more, failed) = broadcast_value(comm, go)?;
        if let Some(failed) = failed {
            return Err(Error::run(format!(
                "cannot merge the processes' time series: {failed}"
            )));
        }
        if !more {
            break;
        }
        round += 1;
    }
    if let Some(mut writer) = writer {
        writer
            .flush()
            .map_err(|e| write_error(&folder.path(Path::new(RUN_FILE)), e))?;
    }
    folder
        .remove_file(&own)
        .map_err(|e| write_error(&folder.path(&own), e))?;
    // Every process has removed its file (a meeting of processes, not of ranks): the folder is
    // empty where the processes share it.
    comm.all_gather(&[])?;
    let _ = std::fs::remove_dir(output.join(PROCESS_FOLDER));
    Ok(())
}

/// The lines of intervals before `until` from `reader`; `pending` holds a line read ahead.
fn next_chunk(
    reader: &mut BufReader<std::fs::File>,
    pending: &mut Option<String>,
    until: u64,
) -> Chunk {
    let mut lines = Vec::new();
    loop {
        let line = match pending.take() {
            Some(line) => line,
            None => {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) => {
                        return Chunk {
                            lines,
                            more: false,
                            failed: None,
                        }
                    }
                    Ok(_) => line.trim_end().to_string(),
                    Err(e) => {
                        return Chunk {
                            lines,
                            more: false,
                            failed: Some(format!("cannot read its time series: {e}")),
                        }
                    }
                }
            }
        };
        if line.is_empty() {
            continue;
        }
        if interval_of(&line).is_some_and(|i| i >= until) {
            *pending = Some(line);
            return Chunk {
                lines,
                more: true,
                failed: None,
            };
        }
        lines.push(line);
    }
}

fn interval_of(line: &str) -> Option<u64> {
    serde_json::from_str::<Value>(line).ok()?["interval"].as_u64()
}

/// Writes the round's lines of every process, interval by interval: the ranks' lines, then a
/// line per host, then the run's.
fn write_merged(out: &mut impl Write, chunks: &[Chunk]) -> std::io::Result<()> {
    let mut intervals: BTreeMap<u64, Vec<Map<String, Value>>> = BTreeMap::new();
    for line in chunks.iter().flat_map(|c| &c.lines) {
        if let Ok(Value::Object(map)) = serde_json::from_str::<Value>(line) {
            if let Some(index) = map.get("interval").and_then(Value::as_u64) {
                intervals.entry(index).or_default().push(map);
            }
        }
    }
    for (index, lines) in intervals {
        let (mut ranks, processes): (Vec<_>, Vec<_>) = lines
            .into_iter()
            .partition(|l| l["kind"] == Kind::Rank.name());
        ranks.sort_by_key(|l| l["rank"].as_u64());
        for line in &ranks {
            writeln!(out, "{}", Value::Object(line.clone()))?;
        }
        let mut hosts: BTreeMap<String, Vec<&Map<String, Value>>> = BTreeMap::new();
        for line in &processes {
            let host = line["host"].as_str().unwrap_or_default().to_string();
            hosts.entry(host).or_default().push(line);
        }
        for (host, lines) in &hosts {
            writeln!(
                out,
                "{}",
                Value::Object(summed(Kind::Host, index, host, lines))
            )?;
        }
        let all: Vec<&Map<String, Value>> = processes.iter().collect();
        writeln!(out, "{}", Value::Object(summed(Kind::Run, index, "", &all)))?;
    }
    Ok(())
}

/// The line of `kind` of the processes' `lines` of interval `index` summed: their ranks'
/// figures, their object-store requests, and (for a host) the host's counters.
fn summed(kind: Kind, index: u64, host: &str, lines: &[&Map<String, Value>]) -> Map<String, Value> {
    // The processes' clocks start within a meeting of each other, and each wakes on its own: the
    // interval's times are those of its lowest-numbered process, so that a host's (and the
    // run's) lines follow each other without gap, as each process's do.
    let first = lines.iter().min_by_key(|l| l["process"].as_u64());
    let time = |key: &str| first.and_then(|l| l[key].as_f64()).unwrap_or(0.0);
    let (start, end) = (time("start"), time("end"));
    let mut line = head(
        kind,
        index,
        ((start * 1e9) as u64, (end * 1e9) as u64),
        host,
    );
    if kind == Kind::Run {
        line.remove("host");
        line.insert("hosts".into(), json!(distinct_hosts(lines)));
    }
    let mut figures = RankFigures {
        bytes_from_storage: Some(0),
        ..RankFigures::default()
    };
    let mut ranks = 0;
    for process in lines {
        figures.add(&figures_of(process));
        ranks += process["ranks"].as_u64().unwrap_or(0);
    }
    line.insert("ranks".into(), json!(ranks));
    figures.fields((end - start).max(0.0), ranks, &mut line);
    let requests: Vec<&Map<String, Value>> = lines
        .iter()
        .filter_map(|l| l.get("object_requests").and_then(Value::as_object))
        .collect();
    if !requests.is_empty() {
        let sum = |key: &str| requests.iter().filter_map(|r| r[key].as_u64()).sum::<u64>();
        line.insert(
            "object_requests".into(),
            json!({"requests": sum("requests"), "bytes": sum("bytes"),
                   "retries": sum("retries"), "failures": sum("failures")}),
        );
    }
    if kind == Kind::Host {
        // One process per host reads the host's counters.
        if let Some(probed) = lines.iter().find(|l| l.contains_key("disks")) {
            for key in [
                "cpu_busy_percent",
                "memory_used_bytes",
                "memory_total_bytes",
                "disks",
            ] {
                if let Some(value) = probed.get(key) {
                    line.insert(key.into(), value.clone());
                }
            }
        }
    }
    line
}

fn distinct_hosts(lines: &[&Map<String, Value>]) -> usize {
    let mut hosts: Vec<&str> = lines.iter().filter_map(|l| l["host"].as_str()).collect();
    hosts.sort_unstable();
    hosts.dedup();
    hosts.len()
}

/// The figures a process's line carries.
fn figures_of(line: &Map<String, Value>) -> RankFigures {
    let n = |key: &str| line.get(key).and_then(Value::as_u64).unwrap_or(0);
    let seconds = |key: &str| line.get(key).and_then(Value::as_f64).unwrap_or(0.0);
    let mut latency = Histogram::default();
    if let Some(buckets) = line.get("latency_buckets").and_then(Value::as_array) {
        for pair in buckets {
            if let (Some(bucket), Some(count)) = (pair[0].as_u64(), pair[1].as_u64()) {
                latency.add_to_bucket(bucket as usize, count);
            }
        }
    }
    RankFigures {
        samples: n("samples"),
        bytes_read: n("bytes_read"),
        bytes_from_storage: line.get("bytes_from_storage").and_then(Value::as_u64),
        steps: n("steps"),
        compute_ns: (seconds("compute_seconds") * 1e9).round() as u64,
        busy_ns: (seconds("read_seconds") * 1e9).round() as u64,
        reading_at_end: n("reads_in_flight_at_end"),
        checkpoint_written: n("checkpoint_bytes_written"),
        checkpoint_read: n("checkpoint_bytes_read"),
        latency,
    }
}
