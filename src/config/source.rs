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
        if let Some(dir) = &self.config_dir {
            check_sections(&tree, name, &workload_path(dir, name))?;
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

/// The names a workload file's top level may have: DLIO's sections (and `framework`), their
/// aliases included.
fn top_level_names() -> Vec<String> {
    let aliases = super::decode::ALIASES
        .iter()
        .map(|(alias, _)| alias.to_string());
    let mut names: Vec<String> = super::decode::known_keys()
        .into_iter()
        .chain(aliases)
        .map(|key| key.split('.').next().unwrap_or_default().to_string())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A workload file's top level holds DLIO's sections only. A name dlio-rs does not know there is
/// an error, not the warning an unknown key deeper down is: it means the file is not laid out as
/// a workload file, and every section in it would be ignored, the run going on with the defaults.
/// The likeliest such file is `dlio-rs config`'s output, with its sections under a `workload:`
/// root, and the message says how to make it one.
fn check_sections(tree: &Value, name: &str, path: &Path) -> Result<()> {
    let Value::Map(entries) = tree else {
        return Ok(());
    };
    let valid = top_level_names();
    let Some((unknown, _)) = entries.iter().find(|(key, _)| !valid.contains(key)) else {
        return Ok(());
    };
    let listed = valid.join(", ");
    let file = path.display();
    if unknown == "workload" {
        return Err(Error::usage(format!(
            "workload '{name}': {file} has its sections under a top-level 'workload:' key, as \
             `dlio-rs config` prints a configuration; a workload file holds the sections \
             themselves (model:, dataset:, reader:, …) at its top level. Write it with \
             `dlio-rs config --workload-file WORDS... > {file}`, or delete its 'workload:' line \
             and unindent the rest (valid top-level sections: {listed})"
        )));
    }
    let refs: Vec<&str> = valid.iter().map(String::as_str).collect();
    let close = super::suggest::closest_names(unknown, &refs);
    let hint = match close.is_empty() {
        true => String::new(),
        false => format!(" (did you mean {}?)", close.join(", ")),
    };
    Err(Error::usage(format!(
        "workload '{name}': {file} has an unknown top-level section '{unknown}'{hint}; valid \
         top-level sections are {listed}"
    )))
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
