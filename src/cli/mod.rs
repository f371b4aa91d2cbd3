//! The two command lines: `dlio-rs` (subcommands, `args.rs`) and `dlio_benchmark` (DLIO's
//! Hydra-style words only, `dlio_benchmark.rs`). Each subcommand is one function of
//! `commands.rs`; this file parses the words, calls it, and turns its outcome into the exit code:
//! 0 done, 1 a failed run (or standard output that failed), 2 bad usage, 128 + the signal that
//! stopped a run.

mod args;
mod commands;
mod dlio_benchmark;

use clap::Parser;

use crate::console::print_out;
use args::{Cli, Command};
use commands::exit_code;

pub use dlio_benchmark::dlio_benchmark_main;

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
        Command::Run(args) => commands::run(&args),
        Command::Config(args) => commands::config(&args),
        Command::Plan(args) => commands::plan(&args),
        Command::Datasize(args) => commands::datasize(&args),
        Command::Sweep(args) => commands::sweep(&args),
        Command::Report(args) => commands::report(&args),
        Command::Compare(args) => commands::compare(&args),
        Command::Workloads(args) => commands::workloads(&args),
        Command::Audit(args) => return commands::audit(&args),
    };
    exit_code(outcome)
}
