//! `dlio_benchmark`: DLIO's own command line, so `mlpstorage --dlio-bin-path` (and any script
//! that runs DLIO) can launch dlio-rs unchanged: Hydra-style words, `--config-dir` (or Hydra's
//! `--config-path`), and the number of accelerators from `DLIO_RS_ACCELERATORS`.

use std::path::PathBuf;

use super::commands::{exit_code, stoppable_run};
use crate::config::overrides::Overrides;
use crate::config::Source;
use crate::console::{print_error, print_out};
use crate::error::Error;
use crate::run::RunOptions;

const DLIO_BENCHMARK_HELP: &str = "\
dlio_benchmark (dlio-rs) — DLIO's command line: Hydra-style words only.

Usage: dlio_benchmark [--config-dir DIR] WORDS...

  workload=NAME  ++workload.a.b=VALUE  workload.a.b=VALUE  +workload.a.b=VALUE  ~workload.a.b
  ++hydra.run.dir=DIR  ++hydra.output_subdir=NAME

Options:
  --config-dir DIR, --config-dir=DIR, -cd DIR   read workload=NAME from DIR/workload/NAME.yaml
  --config-path DIR, -cp DIR                    the same (Hydra's name, MLPerf Storage v1.0's)
  --config-name config, -cn config              DLIO's primary configuration, the only one
  -h, --help                                    this help
  --version                                     the version

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
                None => return print_error(&Error::usage("--config-dir needs a folder")),
            },
            // Hydra's primary configuration: DLIO's is `config`, the only one there is.
            "--config-name" | "-cn" => match iter.next().as_deref() {
                Some("config") => {}
                other => {
                    return print_error(&Error::usage(format!(
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
                    return print_error(&Error::usage(format!(
                        "unknown option {other}; dlio_benchmark takes --config-dir (or \
                         --config-path) DIR, --help, --version and Hydra words \
                         (workload=NAME, ++workload.a.b=VALUE)"
                    )))
                }
                None if other == "--config-name=config" => {}
                None if other.starts_with("--config-name=") => {
                    return print_error(&Error::usage(format!(
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
            return print_error(&Error::usage(format!(
                "DLIO_RS_ACCELERATORS = {v:?}: expected a whole number ≥ 1"
            )))
        }
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => {
                return print_error(&Error::usage(format!(
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
