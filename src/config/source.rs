//! Where a configuration comes from: [`Source`] names the workload (shipped, or a file of
//! `--config-dir`) and holds the command line's override words. Resolving it reads the workload
//! file, parses it into a tree, applies the overrides and hands the tree to `decode.rs`; the file
//! handling stays here so that decoding only ever sees a tree.

use std::path::{Path, PathBuf};

use super::overrides::Overrides;
use super::schema::Config;
use super::value::Value;
use super::workloads;
use crate::error::{Error, Result};

/// Where a configuration comes from: the Hydra words and an optional `--config-dir`.
#[derive(Debug, Clone, Default)]
pub struct Source {
    pub overrides: Overrides,
    pub config_dir: Option<PathBuf>,
}

impl Source {
    pub fn workload_name(&self) -> &str {
        self.overrides.workload.as_deref().unwrap_or("default")
    }

    /// Loads the workload file, applies the overrides and validates.
    pub fn resolve(&self, strict: bool) -> Result<Config> {
        let name = self.workload_name();
        let text = match &self.config_dir {
            Some(dir) => load_from_dir(dir, name)?,
            None => workloads::find(name)
                .ok_or_else(|| Error::usage(workloads::unknown_workload_message(name)))?
                .to_string(),
        };
        let mut tree = Value::from_yaml(&text)
            .map_err(|e| Error::usage(format!("workload '{name}' is not valid YAML: {e}")))?;
        if !matches!(tree, Value::Map(_)) {
            return Err(Error::usage(format!(
                "workload '{name}' must be a mapping of sections"
            )));
        }
        self.overrides.apply(&mut tree)?;
        let config = Config::from_tree(name, tree)?;
        if strict && !config.unknown_keys.is_empty() {
            return Err(Error::usage(format!(
                "unknown configuration keys (rejected by --strict):\n  {}",
                config
                    .unknown_keys
                    .iter()
                    .map(|k| format!("workload.{k}{}", super::suggest::key_hint(k)))
                    .collect::<Vec<_>>()
                    .join("\n  ")
            )));
        }
        Ok(config)
    }
}

/// The largest workload file read: DLIO's are a few KiB.
const MAX_WORKLOAD_BYTES: u64 = 1 << 20;

/// Where `--config-dir DIR` keeps the workload `name`.
fn workload_path(dir: &Path, name: &str) -> PathBuf {
    dir.join("workload").join(format!("{name}.yaml"))
}

fn load_from_dir(dir: &Path, name: &str) -> Result<String> {
    let path = workload_path(dir, name);
    // A FIFO or a device would be read forever; only a file of a workload's size is read.
    match std::fs::metadata(&path) {
        Ok(found) if !found.is_file() => {
            return Err(Error::usage(format!(
                "workload '{name}': {} is not a file",
                path.display()
            )))
        }
        Ok(found) if found.len() > MAX_WORKLOAD_BYTES => {
            return Err(Error::usage(format!(
            "workload '{name}': {} has {} bytes; a workload file has at most {MAX_WORKLOAD_BYTES}",
            path.display(),
            found.len()
        )))
        }
        _ => {}
    }
    let text = std::fs::read_to_string(&path).map_err(|e| {
        let mut message = format!("cannot read workload '{name}' from {}: {e}", path.display());
        let missing = e.kind() == std::io::ErrorKind::NotFound;
        if let (true, Ok(entries)) = (missing, std::fs::read_dir(dir.join("workload"))) {
            let names: Vec<String> = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_suffix(".yaml")
                        .map(str::to_string)
                })
                .collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            message.push_str(&super::suggest::closest_names_hint(name, &refs));
        }
        Error::usage(message)
    })?;
    // OmegaConf would make nothing of it, and DLIO stop on the first key it needs.
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Err(Error::usage(format!(
            "workload '{name}': {} is empty; a workload has DLIO's sections (model, workflow, \
             dataset, reader, train, …)",
            path.display()
        )));
    }
    Ok(text)
}
