//! The two command lines: `dlio-rs` (subcommands) and `dlio_benchmark` (DLIO's Hydra-style words
//! only, so `mlpstorage --dlio-bin-path` can launch dlio-rs unchanged).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::audit::audit;
use crate::config::overrides::Overrides;
use crate::config::{workloads, Source};
use crate::console::print_out;
use crate::error::{Error, Result};
use crate::plan::{draw_run_entropy, Phase};
use crate::preview::{preview, PreviewRequest};
use crate::run::{run, RunOptions};

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

Override words (DLIO / Hydra grammar):
  workload=NAME            a shipped workload, or DIR/workload/NAME.yaml with --config-dir DIR
  ++workload.a.b=VALUE     set a key (added if missing); VALUE is YAML: 8, True, [1,2], {mean: 1, stdev: 0.1}
  workload.a.b=VALUE       change a key the workload has;  +workload.a.b=VALUE  add a key it has not
  ~workload.a.b            delete a key
  ++hydra.run.dir=DIR      the output folder;  ++hydra.output_subdir=NAME  where config.yaml etc. go";

#[derive(Parser, Debug)]
#[command(name = "dlio-rs", version, about = "Emulates the storage I/O of deep-learning training (DLIO-compatible)", after_help = EXAMPLES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug)]
struct ConfigArgs {
    /// Read workloads from DIR/workload/NAME.yaml instead of the shipped ones
    #[arg(long, value_name = "DIR")]
    config_dir: Option<PathBuf>,
    /// Reject unknown configuration keys instead of warning
    #[arg(long)]
    strict: bool,
    /// Override words: workload=NAME, ++workload.a.b=VALUE, ~workload.a.b, ++hydra.run.dir=DIR ...
    #[arg(value_name = "WORDS", allow_hyphen_values = false)]
    words: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Generate data and/or train, as the workload's workflow says; writes DLIO's output files
    Run {
        #[command(flatten)]
        config: ConfigArgs,
        /// Number of emulated accelerators (ranks) in this process
        #[arg(short = 'n', long, default_value_t = 1, value_name = "N")]
        accelerators: usize,
        /// No progress and no end-of-run table (errors still print)
        #[arg(short, long)]
        quiet: bool,
        /// Verify the checksums of every sample read (npz CRC-32s, TFRecord payload CRCs, every CSV value); costs CPU, not I/O
        #[arg(long)]
        verify: bool,
        /// Write one CSV row per sample read to OUTPUT/trace/RANK.csv (for `dlio-rs audit`)
        #[arg(long)]
        trace: bool,
    },
    /// Print the resolved workload configuration (after overrides) as YAML
    Config {
        #[command(flatten)]
        config: ConfigArgs,
    },
    /// Show what a rank will read in an epoch (the first batches: file#sample), without touching
    /// storage, and how long computing the plan took
    Plan {
        #[command(flatten)]
        config: ConfigArgs,
        /// Number of emulated accelerators (ranks)
        #[arg(short = 'n', long, default_value_t = 1, value_name = "N")]
        accelerators: u64,
        /// The epoch, from 1
        #[arg(long, default_value_t = 1, value_name = "E")]
        epoch: u64,
        /// The rank, from 0
        #[arg(long, default_value_t = 0, value_name = "R")]
        rank: u64,
        /// How many of the rank's batches to list
        #[arg(long, default_value_t = 4, value_name = "K")]
        head: u64,
        /// The evaluation phase instead of training
        #[arg(long)]
        eval: bool,
    },
    /// MLPerf Storage's dataset size for a workload, as mlpstorage's `training datasize` computes
    /// it (5 × the client hosts' memory, and 500 steps per epoch for every accelerator), the disk
    /// space it takes, and the command that generates it
    Datasize {
        #[command(flatten)]
        config: ConfigArgs,
        /// The most accelerators the storage will be tested with
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
        max_accelerators: u64,
        /// Memory of each client host, in GiB
        #[arg(long, value_name = "GIB", value_parser = clap::value_parser!(u64).range(1..))]
        client_host_memory_in_gb: u64,
        /// Number of client hosts
        #[arg(long, value_name = "HOSTS", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
        num_client_hosts: u64,
        /// mlpstorage's model (unet3d, resnet50, cosmoflow...): with --accelerator-type, the
        /// workload MODEL_TYPE, in place of a workload= word
        #[arg(long, requires = "accelerator_type")]
        model: Option<String>,
        /// mlpstorage's accelerator type (h100, a100...)
        #[arg(long, requires = "model")]
        accelerator_type: Option<String>,
        /// Print one JSON object instead of the text
        #[arg(long)]
        json: bool,
    },
    /// Find the most accelerators the storage keeps above the workload's AU threshold: bisects
    /// the accelerator count between the bounds, a run per trial; saves every trial to
    /// OUTPUT/sweep.json, and continues an interrupted sweep from it. Under mpirun, each trial's
    /// ranks are spread evenly over the processes
    Sweep {
        #[command(flatten)]
        config: ConfigArgs,
        /// The fewest accelerators to try [default: the fewest the sweep can: --step, and a
        /// multiple of the processes under mpirun]
        #[arg(long, value_name = "N")]
        min_accelerators: Option<u64>,
        /// The most accelerators to try
        #[arg(long, value_name = "N")]
        max_accelerators: u64,
        /// Stop once the last passing and the first failing counts are this close
        #[arg(long, default_value_t = 1, value_name = "N")]
        precision: u64,
        /// Try only multiples of this many accelerators (a model parallelism that needs them)
        #[arg(long, default_value_t = 1, value_name = "N")]
        step: u64,
        /// Checkpoint sweeps: the share of the first trial's save throughput per rank a trial must
        /// hold to pass
        #[arg(long, default_value_t = 0.9, value_name = "SHARE")]
        hold: f64,
        /// The sweep's folder: sweep.json and a run folder per trial
        #[arg(long, short = 'o', value_name = "DIR", default_value = "sweep")]
        output: PathBuf,
    },
    /// Rebuild OUTPUT_DIR/report.html from a run's output files (of dlio-rs, or of Python DLIO:
    /// summary.json and {rank}_output.json)
    Report {
        /// The run's output folder (or a sweep's folder)
        #[arg(value_name = "OUTPUT_DIR")]
        output_dir: PathBuf,
        /// Also write each chart as SVG and PNG into OUTPUT_DIR/charts, for slides (drawn by a
        /// headless Chromium)
        #[arg(long)]
        png: bool,
    },
    /// Two runs side by side (their output folders, of dlio-rs or Python DLIO): per-epoch
    /// metrics with each difference flagged when larger than the runs' epoch-to-epoch noise, and
    /// a page with the charts overlaid
    Compare {
        #[arg(value_name = "DIR_A")]
        a: PathBuf,
        #[arg(value_name = "DIR_B")]
        b: PathBuf,
        /// Where to write the page
        #[arg(long, value_name = "FILE", default_value = "compare.html")]
        html: PathBuf,
    },
    /// List the workloads shipped in the binary
    Workloads,
    /// Check a traced run (`run --trace`) against the plan its saved configuration gives; exit
    /// code 1 when any read was missing, repeated, unplanned or out of place
    Audit {
        /// The run's output folder (with report.json and trace/)
        #[arg(value_name = "OUTPUT_DIR")]
        output_dir: PathBuf,
        /// Print one JSON object instead of the text report
        #[arg(long)]
        json: bool,
    },
}

/// `dlio-rs datasize`: the rule's answer for the workload the words (or mlpstorage's model and
/// accelerator type) name.
fn datasize(
    config: &mut ConfigArgs,
    model_and_type: Option<(String, String)>,
    cluster: &crate::datasize::Cluster,
    json: bool,
) -> Result<Option<i32>> {
    if let Some((model, accelerator)) = model_and_type {
        if config.words.iter().any(|w| w.starts_with("workload=")) {
            return Err(Error::usage(
                "--model and --accelerator-type name the workload: give them or a workload= \
                 word, not both",
            ));
        }
        config
            .words
            .insert(0, format!("workload={model}_{accelerator}"));
    }
    let resolved = source(config)?.resolve(config.strict)?;
    let size = crate::datasize::Datasize::compute(&resolved, cluster);
    if json {
        let value = serde_json::json!({
            "workload": resolved.workload_name,
            "max_accelerators": cluster.max_accelerators,
            "client_hosts": cluster.client_hosts,
            "client_host_memory_gib": cluster.host_memory_gib,
            "num_files_train": size.files,
            "num_subfolders_train": size.subfolders,
            "disk_bytes": size.disk_bytes,
            "file_bytes": size.file_bytes,
            "files_for_memory": size.files_for_memory,
            "files_for_steps": size.files_for_steps,
            "memory_bytes_times_5": size.memory_bytes,
            "suggested_subfolders": size.suggested_subfolders(),
        });
        print_out(&format!("{value:#}\n"))?;
    } else {
        print_out(&size.render(&resolved, cluster, &config.words))?;
    }
    Ok(None)
}

/// `dlio-rs report`: rebuilds the page of a run's (or a sweep's) folder, and with `png` its charts
/// as image files.
fn report_page(folder: &std::path::Path, png: bool) -> Result<Option<i32>> {
    let page = match crate::sweep::saved(folder)? {
        Some(sweep) => crate::sweep::page(&sweep),
        None => crate::report::html::from_folder(folder)?,
    };
    let path = folder.join("report.html");
    std::fs::write(&path, &page)
        .map_err(|e| Error::on_object("cannot write", path.display().to_string(), e))?;
    let mut written = vec![path];
    if png {
        written.extend(crate::report::png::charts(&page, &folder.join("charts"))?);
    }
    let list: String = written
        .iter()
        .map(|p| format!("{}\n", p.display()))
        .collect();
    print_out(&list).map(|()| None)
}

fn source(args: &ConfigArgs) -> Result<Source> {
    Ok(Source {
        overrides: Overrides::parse(&args.words)?,
        config_dir: args.config_dir.clone(),
    })
}

/// Prints an error the way both binaries do and returns the exit code.
pub fn fail(error: &Error) -> i32 {
    crate::console::print_error(error)
}

/// The exit code of a command that returned `outcome`: a run a signal stopped (in any of its
/// processes) exits as the signal says (130, 143), even when it reported what it completed.
fn exit_code(outcome: Result<Option<i32>>) -> i32 {
    match outcome {
        Ok(stopped_by) => match stopped_by.or_else(crate::interrupt::received) {
            Some(signal) => crate::interrupt::exit_code(signal),
            // Said when it failed; the results are in the run's files.
            None if crate::console::stdout_failed() => 1,
            None => 0,
        },
        Err(e) => fail(&e),
    }
}

/// Runs a run with SIGINT and SIGTERM stopping it cleanly ([`crate::interrupt`]); returns the
/// signal it stopped for.
fn stoppable_run(source: &Source, options: &RunOptions) -> Result<Option<i32>> {
    crate::interrupt::watch()
        .map_err(|e| Error::run(format!("cannot watch for SIGINT and SIGTERM: {e}")))?;
    run(source, options).map(|outcome| outcome.stopped_by)
}

pub fn dlio_rs_main(args: Vec<String>) -> i32 {
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        // Help and version go to standard output, which may fail like any other output.
        Err(e) if !e.use_stderr() => {
            return exit_code(print_out(&e.render().to_string()).map(|()| None));
        }
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    let outcome = match cli.command {
        Command::Run {
            config,
            accelerators,
            quiet,
            verify,
            trace,
        } => source(&config).and_then(|s| {
            stoppable_run(
                &s,
                &RunOptions {
                    accelerators,
                    quiet,
                    table: true,
                    strict: config.strict,
                    verify,
                    trace,
                },
            )
        }),
        Command::Config { config } => source(&config).and_then(|s| {
            let resolved = s.resolve(config.strict)?;
            for key in &resolved.unknown_keys {
                crate::console::tell(format_args!(
                    "warning: unknown configuration key workload.{key}"
                ));
            }
            // What `run` would refuse, refused here too.
            resolved.check_supported()?;
            crate::format::for_config(&resolved, false)?;
            let tree =
                crate::config::value::Value::Map(vec![("workload".into(), resolved.tree.clone())]);
            print_out(&tree.to_yaml()).map(|()| None)
        }),
        Command::Plan {
            config,
            accelerators,
            epoch,
            rank,
            head,
            eval,
        } => source(&config).and_then(|s| {
            let resolved = s.resolve(config.strict)?;
            for key in &resolved.unknown_keys {
                crate::console::tell(format_args!(
                    "warning: unknown configuration key workload.{key}"
                ));
            }
            let request = PreviewRequest {
                world: accelerators,
                epoch,
                rank,
                phase: if eval { Phase::Eval } else { Phase::Train },
                head,
            };
            if resolved.workflow.train {
                print_out(&preview(&resolved, &request, draw_run_entropy())?)?;
            }
            if resolved.workflow.checkpoint {
                print_out(&crate::checkpoint::preview::render(
                    &resolved,
                    accelerators,
                    rank,
                )?)?;
            }
            Ok(None)
        }),
        Command::Datasize {
            mut config,
            max_accelerators,
            client_host_memory_in_gb,
            num_client_hosts,
            model,
            accelerator_type,
            json,
        } => {
            let cluster = crate::datasize::Cluster {
                max_accelerators,
                host_memory_gib: client_host_memory_in_gb,
                client_hosts: num_client_hosts,
            };
            datasize(&mut config, model.zip(accelerator_type), &cluster, json)
        }
        Command::Sweep {
            config,
            min_accelerators,
            max_accelerators,
            precision,
            step,
            hold,
            output,
        } => {
            let request = crate::sweep::SweepRequest {
                words: config.words.clone(),
                config_dir: config.config_dir.clone(),
                min: min_accelerators,
                max: max_accelerators,
                precision,
                step,
                hold,
            };
            crate::interrupt::watch()
                .map_err(|e| Error::run(format!("cannot watch for SIGINT and SIGTERM: {e}")))
                .and_then(|()| crate::sweep::sweep(&request, &output, config.strict))
                .and_then(|swept| {
                    if !swept.speaks {
                        return Ok(swept.stopped);
                    }
                    print_out(&swept.sweep.render())?;
                    if swept.stopped.is_some() {
                        crate::console::tell(format_args!(
                            "the sweep was interrupted; its trials are in {}: run the same \
                             command to continue",
                            output.join("sweep.json").display()
                        ));
                    }
                    Ok(swept.stopped)
                })
        }
        Command::Report { output_dir, png } => report_page(&output_dir, png),
        Command::Compare { a, b, html } => {
            use crate::report::compare;
            compare::RunFiles::read(&a)
                .and_then(|a| Ok((a, compare::RunFiles::read(&b)?)))
                .and_then(|(a, b)| {
                    let rows = compare::rows(&a, &b);
                    std::fs::write(&html, compare::page(&a, &b, &rows)).map_err(|e| {
                        Error::on_object("cannot write", html.display().to_string(), e)
                    })?;
                    print_out(&format!(
                        "{}\nPage: {}\n",
                        compare::render(&a, &b, &rows),
                        html.display()
                    ))
                    .map(|()| None)
                })
        }
        Command::Workloads => {
            let list: String = workloads::SHIPPED
                .iter()
                .map(|(name, text)| format!("{name:<20} {}\n", workloads::description(text)))
                .collect();
            print_out(&list).map(|()| None)
        }
        Command::Audit { output_dir, json } => match audit(&output_dir) {
            Ok(report) => {
                let printed = match json {
                    true => print_out(&format!("{:#}\n", report.to_json())),
                    false => print_out(&report.to_text()),
                };
                if let Err(e) = printed {
                    return fail(&e);
                }
                // The report already says why; no error line on top.
                return if report.passed { 0 } else { 1 };
            }
            Err(e) => Err(e),
        },
    };
    exit_code(outcome)
}

const DLIO_BENCHMARK_HELP: &str = "\
dlio_benchmark (dlio-rs) — DLIO's command line: Hydra-style words only.

Usage: dlio_benchmark [--config-dir DIR] WORDS...

  workload=NAME  ++workload.a.b=VALUE  workload.a.b=VALUE  +workload.a.b=VALUE  ~workload.a.b
  ++hydra.run.dir=DIR  ++hydra.output_subdir=NAME

Behaves exactly like 'dlio-rs run WORDS...'. The number of emulated accelerators comes from the
environment variable DLIO_RS_ACCELERATORS (default 1). See 'dlio-rs --help' for examples.";

/// `dlio_benchmark`: only Hydra words and `--config-dir`.
pub fn dlio_benchmark_main(args: Vec<String>) -> i32 {
    let mut words = Vec::new();
    let mut config_dir = None;
    let mut iter = args.into_iter().skip(1);
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                return exit_code(print_out(&format!("{DLIO_BENCHMARK_HELP}\n")).map(|()| None));
            }
            "--version" => {
                let version = format!("dlio_benchmark (dlio-rs {})\n", env!("CARGO_PKG_VERSION"));
                return exit_code(print_out(&version).map(|()| None));
            }
            // Hydra's --config-path (MLPerf Storage v1.0's scripts pass it) names the same folder.
            "--config-dir" | "-cd" | "--config-path" | "-cp" => match iter.next() {
                Some(dir) => config_dir = Some(PathBuf::from(dir)),
                None => return fail(&Error::usage("--config-dir needs a folder")),
            },
            // Hydra's primary configuration: DLIO's is `config`, the only one there is.
            "--config-name" | "-cn" => match iter.next().as_deref() {
                Some("config") => {}
                other => {
                    return fail(&Error::usage(format!(
                        "--config-name {}: DLIO's primary configuration is 'config', the only \
                         one dlio_benchmark has; choose a workload with workload=NAME",
                        other.unwrap_or("(missing)")
                    )))
                }
            },
            other => match other
                .strip_prefix("--config-dir=")
                .or_else(|| other.strip_prefix("--config-path="))
            {
                Some(dir) => config_dir = Some(PathBuf::from(dir)),
                None if other.starts_with('-') && !other.starts_with("--config-name=") => {
                    return fail(&Error::usage(format!(
                        "unknown option {other}; dlio_benchmark takes --config-dir (or \
                         --config-path) DIR, --help, --version and Hydra words \
                         (workload=NAME, ++workload.a.b=VALUE)"
                    )))
                }
                None if other == "--config-name=config" => {}
                None if other.starts_with("--config-name=") => {
                    return fail(&Error::usage(format!(
                        "{other}: DLIO's primary configuration is 'config', the only one \
                         dlio_benchmark has; choose a workload with workload=NAME"
                    )))
                }
                None => words.push(arg),
            },
        }
    }
    let accelerators = match std::env::var("DLIO_RS_ACCELERATORS") {
        Err(std::env::VarError::NotPresent) => 1,
        Err(std::env::VarError::NotUnicode(v)) => {
            return fail(&Error::usage(format!(
                "DLIO_RS_ACCELERATORS = {v:?}: expected a whole number ≥ 1"
            )))
        }
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return fail(&Error::usage(format!(
                    "DLIO_RS_ACCELERATORS = '{v}': expected a whole number ≥ 1"
                )))
            }
        },
    };
    let outcome = Overrides::parse(&words)
        .map(|overrides| Source {
            overrides,
            config_dir,
        })
        .and_then(|s| {
            stoppable_run(
                &s,
                &RunOptions {
                    accelerators,
                    ..RunOptions::default()
                },
            )
        });
    exit_code(outcome)
}
