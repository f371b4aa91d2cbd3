//! dlio-rs: emulates the storage I/O of deep-learning training, compatible with the DLIO benchmark.
//!
//! The flow of a run, one module per step: [`config`] (workload + overrides, validated) →
//! [`dataset`] (names, sizes) → [`generate`] (format writers through [`storage`]) or training:
//! [`plan`] (the pure per-epoch order) → [`loader`] (reader threads, [`format`](mod@format) readers) →
//! [`trainer`] (emulated [`compute`], barriers over [`comm`]) → [`stats`] → [`report`]; a traced
//! run can be checked against its plan afterwards by [`audit`], and a plan shown beforehand by
//! [`preview`]; [`datasize`] says how large a dataset MLPerf Storage's rule asks for, and
//! [`sweep`] bisects the accelerator count for the most a storage keeps busy.

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
pub mod trainer;
