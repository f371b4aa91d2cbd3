//! The words of `dlio-rs`: its subcommands and their options, as clap derives them. Each
//! subcommand's words are one struct, handed whole to its command ([`super::commands`]).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::machine::OutputFormat;

const EXAMPLES: &str = "\
Examples:
  dlio-rs workloads
  dlio-rs run workload=unet3d_h100 ++workload.workflow.generate_data=True ++workload.workflow.train=False \\
      ++workload.dataset.num_files_train=16 ++workload.dataset.data_folder=data/unet3d
  dlio-rs run workload=unet3d_h100 --accelerators 4 ++workload.dataset.num_files_train=16 \\
      ++workload.dataset.data_folder=data/unet3d ++workload.workflow.checkpoint=False ++hydra.run.dir=results/run1
  dlio-rs config workload=resnet50_h100 ++workload.reader.read_threads=8
  dlio-rs run --config-dir my_configs workload=mine
  dlio-rs audit results/run1 --json
  dlio-rs compare results/run1 results/run2 --output-format json > compare.json

Override words (DLIO / Hydra grammar):
  workload=NAME            a shipped workload, or DIR/workload/NAME.yaml with --config-dir DIR
  ++workload.a.b=VALUE     set a key (added if missing); VALUE is YAML: 8, True, [1,2], {mean: 1, stdev: 0.1}
  workload.a.b=VALUE       change a key the workload has;  +workload.a.b=VALUE  add a key it has not
  ~workload.a.b            delete a key
  ++hydra.run.dir=DIR      the output folder;  ++hydra.output_subdir=NAME  where config.yaml etc. go";

#[derive(Parser, Debug)]
#[command(name = "dlio-rs", version, about = "Emulates the storage I/O of deep-learning training (DLIO-compatible)", after_help = EXAMPLES)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Args, Debug)]
pub(super) struct ConfigArgs {
    /// Read workloads from DIR/workload/NAME.yaml instead of the shipped ones
    #[arg(long, value_name = "DIR")]
    pub(super) config_dir: Option<PathBuf>,
    /// Reject unknown configuration keys instead of warning
    #[arg(long)]
    pub(super) strict: bool,
    /// Read the data files with O_DIRECT, past the page cache (the same as
    /// ++workload.reader.odirect=True): reads the page cache serves measure memory, not the
    /// storage, and make the run NOT VALID
    #[arg(long)]
    pub(super) odirect: bool,
    /// What the reader does about the page cache (the same as
    /// ++workload.reader.page_cache=MODE): evict_after_read drops each file's pages once read,
    /// drop_before_epoch the host's cache before each epoch (root), keep leaves it; reads the
    /// cache serves make the run NOT VALID
    #[arg(long, value_name = "MODE", value_parser = page_cache_modes())]
    pub(super) page_cache: Option<String>,
    /// Override words: workload=NAME, ++workload.a.b=VALUE, ~workload.a.b, ++hydra.run.dir=DIR ...
    #[arg(value_name = "WORDS", allow_hyphen_values = false)]
    pub(super) words: Vec<String>,
}

#[derive(Subcommand, Debug)]
pub(super) enum Command {
    /// Generate data and/or train, as the workload's workflow says; writes DLIO's output files
    Run(RunArgs),
    /// Print the resolved workload configuration (after overrides) as YAML, under a `workload:`
    /// root as config.yaml saves it, or with --workload-file as a workload file
    Config(PrintConfigArgs),
    /// Show what a rank will read in an epoch (the first batches, as file#first-last sample
    /// ranges), without touching storage, and how long computing the plan took
    Plan(PlanArgs),
    /// MLPerf Storage's dataset size for a workload, as mlpstorage's `training datasize` computes
    /// it (5 × the client hosts' memory, and 500 steps per epoch for every accelerator), the disk
    /// space it takes, and the command that generates it
    Datasize(DatasizeArgs),
    /// Find the most accelerators the storage keeps above the workload's AU threshold: bisects
    /// the accelerator count between the bounds, a run per trial; saves every trial to
    /// OUTPUT/sweep.json, and continues an interrupted sweep from it. Under mpirun, each trial's
    /// ranks are spread evenly over the processes
    Sweep(SweepArgs),
    /// Rebuild OUTPUT_DIR/report.html from a run's output files (of dlio-rs, or of Python DLIO:
    /// summary.json and {rank}_output.json)
    Report(ReportArgs),
    /// Two runs side by side (their output folders, of dlio-rs or Python DLIO): their
    /// configurations' difference, per-epoch metrics with each difference flagged when beyond
    /// the runs' epoch-to-epoch noise (Welch's t, 95 %), and a page with the charts overlaid;
    /// runs of different workloads are refused unless --different-workloads
    Compare(CompareArgs),
    /// List the workloads shipped in the binary
    Workloads(WorkloadsArgs),
    /// Check a traced run (`run --trace`) against the plan its saved configuration gives; exit
    /// code 1 when any read was missing, repeated, unplanned or out of place
    Audit(AuditArgs),
}

// The words of `dlio-rs run`.
#[derive(Args, Debug)]
pub(super) struct RunArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Number of emulated accelerators (ranks) in this process
    #[arg(short = 'n', long, default_value_t = 1, value_name = "N")]
    pub(super) accelerators: usize,
    /// No progress and no end-of-run table (errors still print)
    #[arg(short, long)]
    pub(super) quiet: bool,
    #[command(flatten)]
    pub(super) output: OutputArgs,
    /// Verify the checksums of every sample read (npz CRC-32s, TFRecord payload CRCs, every CSV value); costs CPU, not I/O
    #[arg(long)]
    pub(super) verify: bool,
    /// Write one CSV row per sample read to OUTPUT/trace/RANK.csv (for `dlio-rs audit`)
    #[arg(long)]
    pub(super) trace: bool,
    /// Trace (as --trace) in FORMAT: csv (for the audit), chrome (Perfetto), pfw (DFTracer), all
    #[arg(long, value_name = "FORMAT", value_parser = parse_trace_format)]
    pub(super) trace_format: Option<crate::config::TraceFormat>,
    /// Serve live metrics (Prometheus text, GET /metrics) at ADDR: PORT (loopback), IP:PORT or
    /// [IPv6]:PORT; each process of an MPI job on a host takes the next port
    #[arg(long, value_name = "ADDR", value_parser = crate::config::listen_address)]
    pub(super) metrics_listen: Option<std::net::SocketAddr>,
    /// Exit 1 when the verdict is FAIL or NOT VALID (for CI jobs); the results are written as usual
    #[arg(long)]
    pub(super) check: bool,
    /// Wait up to SECONDS for a folder another run holds (output, data or checkpoint folder)
    /// instead of being refused at once
    #[arg(long, value_name = "SECONDS", value_parser = parse_wait)]
    pub(super) wait: Option<f64>,
}

// The words of `dlio-rs config`.
#[derive(Args, Debug)]
pub(super) struct PrintConfigArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Print the workload as a workload file holds it, its sections at the top level without the
    /// `workload:` root: saved as DIR/workload/NAME.yaml, `--config-dir DIR workload=NAME` runs
    /// exactly this configuration
    #[arg(long)]
    pub(super) workload_file: bool,
}

// The words of `dlio-rs plan`.
#[derive(Args, Debug)]
pub(super) struct PlanArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// Number of emulated accelerators (ranks)
    #[arg(short = 'n', long, default_value_t = 1, value_name = "N")]
    pub(super) accelerators: u64,
    /// The epoch, from 1
    #[arg(long, default_value_t = 1, value_name = "E")]
    pub(super) epoch: u64,
    /// The rank, from 0
    #[arg(long, default_value_t = 0, value_name = "R")]
    pub(super) rank: u64,
    /// How many of the rank's batches to list
    #[arg(long, default_value_t = 4, value_name = "K")]
    pub(super) head: u64,
    /// List every sample of each batch, not only the first ranges that fit a line
    #[arg(long)]
    pub(super) full: bool,
    /// The evaluation phase instead of training
    #[arg(long)]
    pub(super) eval: bool,
    #[command(flatten)]
    pub(super) output: OutputArgs,
}

// The words of `dlio-rs datasize`.
#[derive(Args, Debug)]
pub(super) struct DatasizeArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// The most accelerators the storage will be tested with
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) max_accelerators: u64,
    /// Memory of each client host, in GiB
    #[arg(long, value_name = "GIB", value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) client_host_memory_in_gb: u64,
    /// Number of client hosts
    #[arg(long, value_name = "HOSTS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub(super) num_client_hosts: u64,
    /// mlpstorage's model (unet3d, resnet50, cosmoflow...): with --accelerator-type, the
    /// workload MODEL_TYPE, in place of a workload= word
    #[arg(long, requires = "accelerator_type")]
    pub(super) model: Option<String>,
    /// mlpstorage's accelerator type (h100, a100...)
    #[arg(long, requires = "model")]
    pub(super) accelerator_type: Option<String>,
    /// Print one JSON object instead of the text (--output-format json)
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) output: OutputArgs,
}

// The words of `dlio-rs sweep`.
#[derive(Args, Debug)]
pub(super) struct SweepArgs {
    #[command(flatten)]
    pub(super) config: ConfigArgs,
    /// The fewest accelerators to try [default: the fewest the sweep can: --step, and a
    /// multiple of the processes under mpirun]
    #[arg(long, value_name = "N")]
    pub(super) min_accelerators: Option<u64>,
    /// The most accelerators to try
    #[arg(long, value_name = "N")]
    pub(super) max_accelerators: u64,
    /// Stop once the last passing and the first failing counts are this close
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(super) precision: u64,
    /// Try only multiples of this many accelerators (a model parallelism that needs them)
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(super) step: u64,
    /// Checkpoint sweeps: the share of the first trial's save throughput per rank a trial must
    /// hold to pass
    #[arg(long, default_value_t = 0.9, value_name = "SHARE")]
    pub(super) hold: f64,
    /// The sweep's folder: sweep.json and a run folder per trial
    #[arg(long, short = 'o', value_name = "DIR", default_value = "sweep")]
    pub(super) output: PathBuf,
    #[command(flatten)]
    pub(super) format: OutputArgs,
}

// The words of `dlio-rs report`.
#[derive(Args, Debug)]
pub(super) struct ReportArgs {
    /// The run's output folder (or a sweep's folder)
    #[arg(value_name = "OUTPUT_DIR")]
    pub(super) output_dir: PathBuf,
    /// Also write each chart as SVG and PNG into OUTPUT_DIR/charts, for slides (drawn by a
    /// headless Chromium)
    #[arg(long)]
    pub(super) png: bool,
}

// The words of `dlio-rs compare`.
#[derive(Args, Debug)]
pub(super) struct CompareArgs {
    #[arg(value_name = "DIR_A")]
    pub(super) a: PathBuf,
    #[arg(value_name = "DIR_B")]
    pub(super) b: PathBuf,
    /// Where to write the page
    #[arg(long, value_name = "FILE", default_value = "compare.html")]
    pub(super) html: PathBuf,
    /// Compare runs of different workloads (model, format, sample size, batch size, compute
    /// time, readers, accelerators...): shown side by side, no difference judged
    #[arg(long)]
    pub(super) different_workloads: bool,
    #[command(flatten)]
    pub(super) output: OutputArgs,
}

// The words of `dlio-rs workloads`.
#[derive(Args, Debug)]
pub(super) struct WorkloadsArgs {
    #[command(flatten)]
    pub(super) output: OutputArgs,
}

// The words of `dlio-rs audit`.
#[derive(Args, Debug)]
pub(super) struct AuditArgs {
    /// The run's output folder (with report.json and trace/)
    #[arg(value_name = "OUTPUT_DIR")]
    pub(super) output_dir: PathBuf,
    /// Print one JSON object instead of the text report (--output-format json)
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) output: OutputArgs,
}

/// `--output-format`, of every subcommand that has results.
#[derive(Args, Debug)]
pub(super) struct OutputArgs {
    /// What standard output carries: text for people, or one document for machines (json: the
    /// results; csv: the per-epoch, per-trial or per-sample table), the text then going to
    /// standard error [default: text]
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub(super) output_format: Option<FormatWord>,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FormatWord {
    Text,
    Json,
    Csv,
}

impl OutputArgs {
    /// The format asked for; `json` is `--json`'s (audit, datasize), which may not be given with
    /// another format.
    pub(super) fn format(&self, json: bool) -> Result<OutputFormat, crate::error::Error> {
        let asked = match self.output_format {
            None => None,
            Some(FormatWord::Text) => Some(OutputFormat::Text),
            Some(FormatWord::Json) => Some(OutputFormat::Json),
            Some(FormatWord::Csv) => Some(OutputFormat::Csv),
        };
        match (json, asked) {
            (true, None | Some(OutputFormat::Json)) => Ok(OutputFormat::Json),
            (true, Some(_)) => Err(crate::error::Error::usage(
                "--json is --output-format json: give one of them, not --json with another format",
            )),
            (false, asked) => Ok(asked.unwrap_or_default()),
        }
    }
}

/// `--page-cache MODE`: the names `reader.page_cache` takes.
fn page_cache_modes() -> clap::builder::PossibleValuesParser {
    use crate::config::fields::Choice;
    let names = crate::config::PageCache::NAMES
        .iter()
        .map(|(name, _)| *name);
    clap::builder::PossibleValuesParser::new(names)
}

/// The longest `--wait`: a week, beyond which a wait is a mistake (and beyond which a deadline
/// could overflow a clock).
const LONGEST_WAIT_SECONDS: f64 = 7.0 * 86400.0;

/// `--wait SECONDS`: a number of seconds from 0 to a week.
fn parse_trace_format(word: &str) -> Result<crate::config::TraceFormat, String> {
    use crate::config::fields::Choice;
    crate::config::TraceFormat::parse(word).ok_or_else(|| {
        format!(
            "'{word}' is not a trace format: valid values are {}",
            crate::config::TraceFormat::valid_names()
        )
    })
}

fn parse_wait(word: &str) -> Result<f64, String> {
    match word.parse::<f64>() {
        Ok(seconds) if (0.0..=LONGEST_WAIT_SECONDS).contains(&seconds) => Ok(seconds),
        _ => Err(format!(
            "'{word}' is not a number of seconds from 0 to {LONGEST_WAIT_SECONDS:.0} (a week)"
        )),
    }
}
