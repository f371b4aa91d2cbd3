//! The end-to-end tests, in one binary (`integration`): each module is one area, and
//! `common` (scratch folders, the binaries run as processes, their JSON outputs, SeaweedFS and a
//! fault-injecting proxy for the S3 tests, Azurite for the Azure tests, fake-gcs-server for the
//! GCS tests) is compiled once for all of them.
//!
//! - `azure` (with the `azure` feature): runs against a real Azure Blob server (Azurite);
//! - `catalogue`: a catalogue of bad input (words, YAML, values, damaged files, signals), each
//!   with its exit code and message;
//! - `checkpoint`: checkpoint files, sizes and figures against DLIO's geometry, loads, failures
//!   and fsync;
//! - `cli`: the two command lines, `dlio-rs` and `dlio_benchmark`: output files, Hydra files,
//!   errors, the dataset layout;
//! - `datasize`: `dlio-rs datasize` against mlpstorage's `training datasize`;
//! - `docs`: docs/running.md and docs/configuration.md name the subcommands, options and keys the
//!   binaries have, and only those;
//! - `formats`: every data format, read and written, against Python DLIO and the Python tools;
//! - `gcs` (with the `gcs` feature): runs against a GCS server (fake-gcs-server);
//! - `grammar`: configuration text read as OmegaConf and Hydra read it (proptest included);
//! - `hostile`: random configurations and randomly damaged output folders given to the real
//!   binaries (proptest): no panic, no hang, exit 0/1/2 with one error line, no write outside;
//! - `interrupts`: SIGINT/SIGTERM during runs, and concurrent generations;
//! - `layers`: the modules of src/ use one another only down the floors lib.rs draws;
//! - `machine`: `--output-format json|csv`: each command's document alone on standard output,
//!   its values against the run's files; `compare`'s t bound, configuration difference and
//!   refusal of different workloads;
//! - `mpi`: runs under `mpirun` (the `mpi` feature's tests, or the default build's refusal);
//! - `output_folder`: a run owns its output folder;
//! - `report_html`: report.html, written, rebuilt and rendered by a headless browser;
//! - `s3` (with the `s3` feature): runs against a real S3 server (SeaweedFS), faults injected;
//! - `scale`: how a run finds its files (scheme-named, listed, unfinished);
//! - `sweep`: `dlio-rs sweep` on a storage of known speed;
//! - `timeseries`: timeseries.jsonl against the run's report: sums, AU, reads in flight,
//!   checkpoint bytes, the host's disk;
//! - `upstream` (with the `mpi` feature): every case of DLIO's own test suite, run as
//!   `mpirun -np 2 dlio_benchmark` with the upstream case's words and checked as it checks;
//! - `traces`: the Chrome and DFTracer traces, read back with serde_json and DFTracer's own tools
//!   and checked against the run's report;
//! - `validity`: traced runs checked by `dlio-rs audit`, and the bytes each epoch read.
//! - `verdict`: each reason of the verdict fired by a real run, the terminal, report.json and
//!   the page saying the same verdict, `run --check`, a sweep of invalid trials, the category.
//!
//! One area: `cargo test --release --test integration cli::` (the filter is matched against each
//! test's path, `module::test`); `--features fault-injection,s3` adds the tests of those features,
//! as `.ci/run` does when it runs them all.

mod common;

#[cfg(feature = "azure")]
mod azure;
mod catalogue;
mod checkpoint;
mod cli;
mod datasize;
mod docs;
mod formats;
#[cfg(feature = "gcs")]
mod gcs;
// proptest keeps grammar's failing cases in tests/grammar.proptest-regressions, beside the module
// file, because no folder above it holds a lib.rs or main.rs; were this file tests/main.rs, they
// would move to proptest-regressions/grammar.txt.
mod grammar;
// hostile's failing cases are kept beside it too, in tests/hostile.proptest-regressions.
mod hostile;
mod interrupts;
mod layers;
mod machine;
mod mpi;
mod output_folder;
mod report_html;
#[cfg(feature = "s3")]
mod s3;
mod scale;
mod sweep;
mod timeseries;
mod traces;
#[cfg(feature = "mpi")]
mod upstream;
mod validity;
mod verdict;
