//! `dlio.log`, in DLIO's format: `[LEVEL] <timestamp> message`, with DLIO's custom OUTPUT level
//! for the lines tools look for, and the `[METRIC]` block at the end.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use super::timestamp;
use crate::error::{Error, Result};

pub struct DlioLog {
    path: PathBuf,
    file: Mutex<File>,
}

impl DlioLog {
    /// Starts a new log, replacing an old one (as DLIO's rank 0 does).
    pub fn create(path: &Path) -> Result<DlioLog> {
        let file = File::create(path).map_err(|e| Error::io("cannot create", path, e))?;
        Ok(DlioLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    fn write(&self, text: &str) {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(text.as_bytes()) {
            eprintln!("warning: cannot write {}: {e}", self.path.display());
        }
    }

    /// An OUTPUT line stamped with `at`.
    pub fn output_at(&self, at: SystemTime, message: &str) {
        self.write(&format!("[OUTPUT] {} {message}\n", timestamp(at)));
    }

    pub fn output(&self, message: &str) {
        self.output_at(SystemTime::now(), message);
    }

    pub fn warning(&self, message: &str) {
        self.write(&format!(
            "[WARNING] {} {message}\n",
            timestamp(SystemTime::now())
        ));
    }

    /// The metric block: one OUTPUT record whose text spans lines, as DLIO logs it.
    pub fn metric_block(&self, block: &str) {
        self.write(&format!("[OUTPUT] {block}\n"));
    }
}
