//! dlio-rs: emulates the storage I/O of deep-learning training, compatible with the DLIO benchmark.
//!
//! The flow of a run, one module per step: [`config`] (workload + overrides, validated) →
//! [`dataset`] (names, sizes) → [`generate`] (format writers through [`storage`]) or training:
//! [`plan`] (the pure per-epoch order) → [`loader`] (reader threads, [`format`](mod@format) readers) →
//! [`trainer`] (emulated [`compute`], barriers over [`comm`]) → [`stats`] (each rank's timings)
//! → [`results`] (all ranks together, and whether they measured the storage) → [`report`] (the
//! output files). [`run`] tells that story in phases, [`sweep`] runs it for many accelerator
//! counts, and [`cli`] is the command line. A traced run can be checked against its plan
//! afterwards by [`audit`], and a plan shown beforehand by [`preview`]; [`datasize`] says how
//! large a dataset MLPerf Storage's rule asks for; [`machine`] writes a command's results as one
//! JSON or CSV document (`--output-format`).
//!
//! # Layers
//!
//! Each module uses only modules on floors below its own, so each can be read, tested and changed
//! without those above it; `python3 ../shared/tools/layers.py src` (beside the repository)
//! prints these floors and fails on any two modules that use each other in a loop. There is none,
//! and a new use that points up a floor is a design error to fix, not a loop to keep.
//!
//! ```text
//! 12  cli                              the two command lines, one function per subcommand
//! 11  sweep                            many runs: the most accelerators a storage keeps busy
//! 10  run                              one run, phase by phase, in one process or many
//!  9  report  audit  trainer           the output files; a traced run checked; one rank's loop
//!  8  checkpoint  generate  loader     checkpoints; the dataset written; reader threads
//!  7  format  preview                  each format's writer and reader; a plan shown
//!  6  dataset  results  timeseries    names, sizes; all ranks' results, validity; time series
//!  5  storage  progress                bytes in and out of the storage; the live progress line
//!  4  plan  stats  comm  folder        the epoch plan; per-rank timings; ranks and barriers;
//!     datasize  machine                folders a run owns; MLPerf's dataset-size rule; JSON/CSV
//!  3  config  console  system          the configuration; the terminal; facts of this host
//!  2  error  compute                   error kinds and exit codes; time specs and the sleep
//!  1  interrupt                        signals that ask the process to stop
//! ```
//!
//! The ground floors hold what everyone needs and nothing that decides a run: the terminal
//! ([`console`]), the error kinds ([`error`]) and the signals ([`interrupt`]), so that a module
//! on any floor can tell the user something, fail with a kind, or stop on request without
//! reaching up.

pub mod audit;
pub mod checkpoint;
pub mod cli;
pub mod comm;
pub mod compute;
pub mod config;
pub mod console;
pub mod dataset;
pub mod datasize;
pub mod error;
pub mod folder;
pub mod format;
pub mod generate;
pub mod interrupt;
pub mod loader;
pub mod machine;
pub mod plan;
pub mod preview;
pub mod progress;
pub mod report;
pub mod results;
pub mod run;
pub mod stats;
pub mod storage;
pub mod sweep;
pub mod system;
pub mod timeseries;
pub mod trainer;
